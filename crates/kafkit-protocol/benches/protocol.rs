//! Produce-request encode and Fetch-response decode, this crate beside the crates.io
//! `kafka-protocol` crate (`kprs`) in the same run.
//!
//! Workload: one topic, 10 partitions x 1,000 records, each a 100-byte value with no key and no
//! headers, uncompressed, one batch per partition. Produce v11 and Fetch v12 (the newest versions
//! that name topics by name; both crates support them).
//!
//! - `produce_encode`: encode the 10 record batches from records held in memory, build the
//!   Produce request and encode it into a reused buffer.
//! - `fetch_decode`: decode a Fetch response (the same bytes for both crates), then every record
//!   batch in it down to keys and values.
//! - `record_batch_encode` / `record_batch_decode`: the record batch part of each alone.
//!
//! Run: `cargo bench -p kafkit-protocol --bench protocol -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{Criterion, Throughput, criterion_main};

use kafkit_protocol::Message;
use kafkit_protocol::messages::fetch_response::{
    FetchResponse, FetchableTopicResponse, PartitionData,
};
use kafkit_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafkit_protocol::records::{
    Record, RecordBatchEncoder, RecordBatchOptions, decode_record_batches,
};

use kprs::protocol::{Decodable as _, Encodable as _, StrBytes};

const PRODUCE_VERSION: i16 = 11;
const FETCH_VERSION: i16 = 12;
const TOPIC: &str = "bench-topic";
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

fn our_produce(records: &[Vec<Record>], out: &mut BytesMut) {
    let mut topic = TopicProduceData::default();
    topic.name = TOPIC.to_string();
    topic.partition_data = records
        .iter()
        .enumerate()
        .map(|(p, recs)| {
            let mut pd = PartitionProduceData::default();
            pd.index = p as i32;
            pd.records = Some(our_batch(recs));
            pd
        })
        .collect();
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 30_000;
    req.topic_data = vec![topic];
    out.clear();
    req.encode(out, PRODUCE_VERSION).expect("encodes");
}

fn kprs_produce(records: &[Vec<kprs::records::Record>], out: &mut BytesMut) {
    let partition_data = records
        .iter()
        .enumerate()
        .map(|(p, recs)| {
            kprs::messages::produce_request::PartitionProduceData::default()
                .with_index(p as i32)
                .with_records(Some(kprs_batch(recs)))
        })
        .collect();
    let topic = kprs::messages::produce_request::TopicProduceData::default()
        .with_name(kprs::messages::TopicName(StrBytes::from_static_str(TOPIC)))
        .with_partition_data(partition_data);
    let req = kprs::messages::ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![topic]);
    out.clear();
    req.encode(out, PRODUCE_VERSION).expect("kprs encodes");
}

/// A Fetch response v12 holding the workload, encoded by this crate.
fn fetch_response_bytes(records: &[Vec<Record>]) -> Bytes {
    let mut topic = FetchableTopicResponse::default();
    topic.topic = TOPIC.to_string();
    topic.partitions = records
        .iter()
        .enumerate()
        .map(|(p, recs)| {
            let mut pd = PartitionData::default();
            pd.partition_index = p as i32;
            pd.high_watermark = RECORDS_PER_PARTITION as i64;
            pd.last_stable_offset = RECORDS_PER_PARTITION as i64;
            pd.log_start_offset = 0;
            pd.records = Some(our_batch(recs));
            pd
        })
        .collect();
    let mut resp = FetchResponse::default();
    resp.responses = vec![topic];
    let mut out = BytesMut::new();
    resp.encode(&mut out, FETCH_VERSION).expect("encodes");
    out.freeze()
}

fn our_fetch_decode(bytes: &Bytes) -> usize {
    let resp = FetchResponse::decode(&mut bytes.clone(), FETCH_VERSION).expect("decodes");
    let mut total = 0;
    for topic in &resp.responses {
        for p in &topic.partitions {
            if let Some(data) = &p.records {
                total += our_decode(std::slice::from_ref(data));
            }
        }
    }
    total
}

fn kprs_fetch_decode(bytes: &Bytes) -> usize {
    let resp = kprs::messages::FetchResponse::decode(&mut bytes.clone(), FETCH_VERSION)
        .expect("kprs decodes");
    let mut total = 0;
    for topic in &resp.responses {
        for p in &topic.partitions {
            if let Some(data) = &p.records {
                total += kprs_decode(std::slice::from_ref(data));
            }
        }
    }
    total
}

fn messages(c: &mut Criterion) {
    let ours = our_records();
    let theirs = kprs_records();
    let payload = PARTITIONS as usize * RECORDS_PER_PARTITION * VALUE_SIZE;

    // Each crate reads the other's request and finds every record.
    let mut a = BytesMut::new();
    let mut b = BytesMut::new();
    our_produce(&ours, &mut a);
    kprs_produce(&theirs, &mut b);
    let read_ours = kprs::messages::ProduceRequest::decode(&mut a.freeze(), PRODUCE_VERSION)
        .expect("kprs reads our request");
    let read_theirs =
        ProduceRequest::decode(&mut b.freeze(), PRODUCE_VERSION).expect("we read the kprs request");
    let ours_batches: Vec<Bytes> = read_ours.topic_data[0]
        .partition_data
        .iter()
        .filter_map(|p| p.records.clone())
        .collect();
    let theirs_batches: Vec<Bytes> = read_theirs.topic_data[0]
        .partition_data
        .iter()
        .filter_map(|p| p.records.clone())
        .collect();
    assert_eq!(kprs_decode(&ours_batches), payload);
    assert_eq!(our_decode(&theirs_batches), payload);

    let mut group = c.benchmark_group("produce_encode");
    group.throughput(Throughput::Bytes(payload as u64));
    let mut out = BytesMut::new();
    group.bench_function("kafkit-protocol (this crate)", |b| {
        b.iter(|| {
            our_produce(black_box(&ours), &mut out);
            black_box(out.len())
        })
    });
    group.bench_function("kprs 0.18", |b| {
        b.iter(|| {
            kprs_produce(black_box(&theirs), &mut out);
            black_box(out.len())
        })
    });
    group.finish();

    let fetch = fetch_response_bytes(&ours);
    assert_eq!(our_fetch_decode(&fetch), payload);
    assert_eq!(kprs_fetch_decode(&fetch), payload);

    let mut group = c.benchmark_group("fetch_decode");
    group.throughput(Throughput::Bytes(payload as u64));
    group.bench_function("kafkit-protocol (this crate)", |b| {
        b.iter(|| black_box(our_fetch_decode(black_box(&fetch))))
    });
    group.bench_function("kprs 0.18", |b| {
        b.iter(|| black_box(kprs_fetch_decode(black_box(&fetch))))
    });
    group.finish();
}

fn records(c: &mut Criterion) {
    let ours = our_records();
    let theirs = kprs_records();
    let payload = PARTITIONS as usize * RECORDS_PER_PARTITION * VALUE_SIZE;

    let mut group = c.benchmark_group("record_batch_encode");
    group.throughput(Throughput::Bytes(payload as u64));
    group.bench_function("kafkit-protocol (this crate)", |b| {
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
    group.bench_function("kafkit-protocol (this crate)", |b| {
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
    criterion::criterion_group!(benches, super::messages, super::records);
}
criterion_main!(group::benches);
