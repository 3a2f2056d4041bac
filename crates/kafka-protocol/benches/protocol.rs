//! Record batch encode and decode, this crate beside the crates.io `kafka-protocol` crate
//! (`kprs`) in the same run.
//!
//! Workload: 10 partitions x 1,000 records, each a 100-byte value with no key and no headers,
//! uncompressed, one batch per partition.
//!
//! - `record_batch_encode`: encode the 10 batches from records held in memory.
//! - `record_batch_decode`: decode the 10 batches down to keys and values.
//!
//! Run: `cargo bench -p kafka-protocol --bench protocol -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput, criterion_main};

use kafka_protocol::records::{
    Record, RecordBatchEncoder, RecordBatchOptions, decode_record_batches,
};

const PARTITIONS: i32 = 10;
const RECORDS_PER_PARTITION: usize = 1_000;
const VALUE_SIZE: usize = 100;
const BASE_TIMESTAMP: i64 = 1_700_000_000_000;
const BATCH_CAPACITY: usize = RECORDS_PER_PARTITION * (VALUE_SIZE + 16) + 64;

fn value(partition: i32, i: usize) -> Bytes {
    let mut v = vec![b'x'; VALUE_SIZE];
    v[..4].copy_from_slice(&(partition as u32).to_be_bytes());
    v[4..12].copy_from_slice(&(i as u64).to_be_bytes());
    Bytes::from(v)
}

/// Our records, one vector per partition.
fn our_records() -> Vec<Vec<Record>> {
    (0..PARTITIONS)
        .map(|p| {
            (0..RECORDS_PER_PARTITION)
                .map(|i| {
                    Record::new(None, Some(value(p, i))).with_timestamp(BASE_TIMESTAMP + i as i64)
                })
                .collect()
        })
        .collect()
}

/// The same records as `kprs` records.
fn kprs_records() -> Vec<Vec<kprs::records::Record>> {
    (0..PARTITIONS)
        .map(|p| {
            (0..RECORDS_PER_PARTITION)
                .map(|i| kprs::records::Record {
                    transactional: false,
                    control: false,
                    delete_horizon: false,
                    partition_leader_epoch: -1,
                    producer_id: -1,
                    producer_epoch: -1,
                    timestamp_type: kprs::records::TimestampType::Creation,
                    offset: i as i64,
                    sequence: -1,
                    timestamp: BASE_TIMESTAMP + i as i64,
                    key: None,
                    value: Some(value(p, i)),
                    headers: Default::default(),
                })
                .collect()
        })
        .collect()
}

fn our_batch(records: &[Record]) -> Bytes {
    let mut buf = BytesMut::with_capacity(BATCH_CAPACITY);
    let mut enc = RecordBatchEncoder::new(&mut buf, RecordBatchOptions::new()).expect("none codec");
    for r in records {
        enc.append(r).expect("record fits");
    }
    enc.finish().expect("batch fits");
    buf.freeze()
}

fn kprs_batch(records: &[kprs::records::Record]) -> Bytes {
    let options = kprs::records::RecordEncodeOptions {
        version: 2,
        compression: kprs::records::Compression::None,
    };
    let mut buf = BytesMut::with_capacity(BATCH_CAPACITY);
    kprs::records::RecordBatchEncoder::encode(&mut buf, records.iter(), &options)
        .expect("kprs encodes");
    buf.freeze()
}

fn our_decode(batches: &[Bytes]) -> usize {
    let mut total = 0;
    for data in batches {
        for batch in decode_record_batches(data.clone()).expect("batches decode") {
            for r in &batch.records {
                total += r.value.as_ref().map_or(0, Bytes::len);
            }
        }
    }
    total
}

fn kprs_decode(batches: &[Bytes]) -> usize {
    let mut total = 0;
    for data in batches {
        for set in kprs::records::RecordBatchDecoder::decode_all(&mut data.clone())
            .expect("kprs batches decode")
        {
            for r in &set.records {
                total += r.value.as_ref().map_or(0, Bytes::len);
            }
        }
    }
    total
}

fn records(c: &mut Criterion) {
    let ours = our_records();
    let theirs = kprs_records();
    let payload = PARTITIONS as usize * RECORDS_PER_PARTITION * VALUE_SIZE;

    let mut group = c.benchmark_group("record_batch_encode");
    group.throughput(Throughput::Bytes(payload as u64));
    group.bench_function("kafka-protocol (this crate)", |b| {
        b.iter(|| {
            let batches: Vec<Bytes> = black_box(&ours).iter().map(|r| our_batch(r)).collect();
            black_box(batches)
        })
    });
    group.bench_function("kprs 0.18", |b| {
        b.iter(|| {
            let batches: Vec<Bytes> = black_box(&theirs).iter().map(|r| kprs_batch(r)).collect();
            black_box(batches)
        })
    });
    group.finish();

    // Both decoders read the same bytes (ours), and agree on them and on kprs's bytes.
    let encoded: Vec<Bytes> = ours.iter().map(|r| our_batch(r)).collect();
    let kprs_encoded: Vec<Bytes> = theirs.iter().map(|r| kprs_batch(r)).collect();
    assert_eq!(our_decode(&encoded), payload);
    assert_eq!(kprs_decode(&encoded), payload);
    assert_eq!(our_decode(&kprs_encoded), payload);

    let mut group = c.benchmark_group("record_batch_decode");
    group.throughput(Throughput::Bytes(payload as u64));
    group.bench_function("kafka-protocol (this crate)", |b| {
        b.iter(|| black_box(our_decode(black_box(&encoded))))
    });
    group.bench_function("kprs 0.18", |b| {
        b.iter(|| black_box(kprs_decode(black_box(&encoded))))
    });
    group.finish();
}

/// `criterion_group!` makes an undocumented `pub fn`; keep it in its own module.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::records);
}
criterion_main!(group::benches);
