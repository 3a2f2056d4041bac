//! Writing records end to end through a connection: this crate's `Conn` beside librdkafka's
//! producer (the peer) in the same run, both against one librdkafka mock cluster in this process.
//!
//! Workload: 10 partitions x 100 records of 100-byte values (no key, no headers, uncompressed),
//! `acks=1`, all partitions led by one broker.
//!
//! - `write_multi/kafkit`: the 10 batches encoded and sent in ONE Produce request with
//!   `Conn::write_multi`, waiting for the answer.
//! - `write_multi/librdkafka`: the same 1,000 records queued in a `BaseProducer` (`linger.ms=0`,
//!   so it sends as soon as it can), then polled until every record is acknowledged.
//! - `produce_one_partition/*`: 1,000 records to one partition (`Conn::produce`, one batch).
//!
//! The mock broker's own cost is part of both sides. Run:
//! `cargo bench -p kafkit --bench conn -- --warm-up-time 1 --measurement-time 3`.

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_main};
use kafkit::{Acks, Compression, Conn, Dialer, ProduceBatches};
use kafkit_protocol::records::Record;
use rdkafka::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

const TOPIC: &str = "bench-conn";
const PARTITIONS: i32 = 10;
const RECORDS_PER_PARTITION: usize = 100;
const VALUE_SIZE: usize = 100;
const TIMEOUT: Duration = Duration::from_secs(30);

fn records(n: usize) -> Vec<Record> {
    (0..n)
        .map(|i| {
            let mut v = vec![b'x'; VALUE_SIZE];
            v[..8].copy_from_slice(&(i as u64).to_be_bytes());
            Record::new(None, Some(Bytes::from(v))).with_timestamp(1_700_000_000_000)
        })
        .collect()
}

fn peer_producer(bootstrap: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "1")
        .set("linger.ms", "0")
        .set("compression.type", "none")
        .set("socket.nagle.disable", "true")
        .set("message.timeout.ms", "30000")
        .create()
        .expect("librdkafka producer")
}

/// Queues every record with librdkafka and waits until all are acknowledged, polling for
/// delivery reports in 100 µs slices.
fn peer_send(producer: &BaseProducer, per_partition: &[Vec<Record>]) {
    for (p, recs) in per_partition.iter().enumerate() {
        for r in recs {
            let value = r.value.as_deref().unwrap_or_default();
            let rec: BaseRecord<'_, [u8], [u8]> =
                BaseRecord::to(TOPIC).partition(p as i32).payload(value);
            producer
                .send(rec)
                .map_err(|(e, _)| e)
                .expect("queue record");
        }
    }
    // Not `flush`: the binding's flush polls in 100 ms slices, which would dominate the time.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while producer.in_flight_count() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "records not acknowledged"
        );
        producer.poll(Duration::from_micros(100));
    }
}

fn benches() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster
        .create_topic(TOPIC, PARTITIONS, 1)
        .expect("create topic");
    let bootstrap = cluster.bootstrap_servers();
    let conn: Conn = rt
        .block_on(Dialer::default().dial(&bootstrap))
        .expect("dial");
    let producer = peer_producer(&bootstrap);
    let per_partition: Vec<Vec<Record>> = (0..PARTITIONS)
        .map(|_| records(RECORDS_PER_PARTITION))
        .collect();
    let one_partition = records(PARTITIONS as usize * RECORDS_PER_PARTITION);
    // Warm the peer's metadata and connections.
    peer_send(&producer, &per_partition);

    let mut c = Criterion::default().configure_from_args();
    let total = (PARTITIONS as usize * RECORDS_PER_PARTITION) as u64;

    let mut g = c.benchmark_group("write_multi");
    g.throughput(Throughput::Elements(total));
    g.bench_function("kafkit", |b| {
        b.iter(|| {
            let mut batches = ProduceBatches::new(Compression::None);
            for (p, recs) in per_partition.iter().enumerate() {
                batches.add_records(TOPIC, p as i32, recs).expect("encode");
            }
            let out = rt
                .block_on(conn.write_multi(&batches, Acks::Leader, TIMEOUT))
                .expect("write_multi");
            assert!(out.iter().all(|r| r.is_ok()));
            black_box(out);
        })
    });
    g.bench_function("librdkafka", |b| {
        b.iter(|| peer_send(&producer, &per_partition))
    });
    g.finish();

    let mut g = c.benchmark_group("produce_one_partition");
    g.throughput(Throughput::Elements(total));
    g.bench_function("kafkit", |b| {
        b.iter(|| {
            let out = rt
                .block_on(conn.produce(TOPIC, 0, &one_partition, Acks::Leader, TIMEOUT))
                .expect("produce");
            assert!(out.is_ok());
            black_box(out);
        })
    });
    let single = vec![one_partition.clone()];
    g.bench_function("librdkafka", |b| b.iter(|| peer_send(&producer, &single)));
    g.finish();
    c.final_summary();
}

criterion_main!(benches);
