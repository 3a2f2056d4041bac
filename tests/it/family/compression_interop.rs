//! Compressed record batches between this project and librdkafka, through a real broker (Apache
//! Kafka or tansu):
//! for each of gzip, snappy, lz4 and zstd, batches written by our `Conn::write_multi` /
//! `produce_compressed` are read back equal by librdkafka's consumer, and batches written by
//! librdkafka's producer with `compression.type` set to the codec are read back equal by our
//! `fetch` (and, read raw, carry that codec in their attributes).
//!
//! Needs the brokers: run through `cargo xtask test`.

use std::time::Duration;

use bytes::Bytes;
use super::broker;
use integration_tests::{
    PEER_TIMEOUT, create_topic_with, peer_consume, producer_config,
};
use kafkit::{Acks, Compression, CompressionConfig, Conn, FetchParams, ProduceBatches};
use kafkit_protocol::messages::{FetchRequest, fetch_request};
use kafkit_protocol::records::{Record, RecordBatchDecoder};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

const TIMEOUT: Duration = Duration::from_secs(30);
/// Records per partition: enough JSON-like data (about 20 KiB) that every codec shrinks it, so
/// librdkafka does not fall back to sending it uncompressed.
const RECORDS: usize = 100;

async fn dial() -> Conn {
    super::dial("compression-interop").await
}

async fn new_topic(conn: &Conn, prefix: &str, partitions: i32) -> String {
    create_topic_with(conn, prefix, partitions).await
}

/// The `i`th test record's key, value and header value.
fn parts(partition: i32, i: usize) -> (String, String, String) {
    (
        format!("key-{partition}-{i}"),
        format!(
            r#"{{"partition":{partition},"seq":{i},"customer":"cust-{:04}","status":"{}","note":"{}"}}"#,
            i * 37 % 1000,
            ["NEW", "PAID", "SHIPPED"][i % 3],
            "lorem ipsum ".repeat(1 + i % 5)
        ),
        format!("trace-{i}"),
    )
}

fn our_records(partition: i32) -> Vec<Record> {
    (0..RECORDS)
        .map(|i| {
            let (k, v, h) = parts(partition, i);
            Record::new(Some(Bytes::from(k)), Some(Bytes::from(v)))
                .with_timestamp(1_700_000_000_000 + i as i64)
                .with_header("trace", Some(Bytes::from(h)))
        })
        .collect()
}

/// Our client writes compressed batches (two partitions in one `write_multi` at the default
/// level, a third partition with `produce_compressed` at `level`); librdkafka reads them back.
async fn ours_to_librdkafka(c: Compression, level: Option<i32>) {
    let conn = dial().await;
    let topic = new_topic(&conn, &format!("zip-out-{c}"), 3).await;
    let mut batches = ProduceBatches::new(c);
    batches.add_records(&topic, 0, &our_records(0)).unwrap();
    batches.add_records(&topic, 1, &our_records(1)).unwrap();
    for r in conn
        .write_multi(&batches, Acks::All, TIMEOUT)
        .await
        .unwrap()
    {
        r.into_result().expect("partition written");
    }
    let config = match level {
        Some(l) => CompressionConfig::with_level(c, l).unwrap(),
        None => CompressionConfig::new(c),
    };
    conn.produce_compressed(&topic, 2, &our_records(2), config, Acks::All, TIMEOUT)
        .await
        .unwrap()
        .into_result()
        .expect("partition 2 written");

    // The batches really are compressed with `c` (as stored by the broker).
    for p in 0..3 {
        let (codecs, _) = raw_batches(&conn, &topic, p).await;
        assert!(
            !codecs.is_empty() && codecs.iter().all(|&x| x == c),
            "{c}: partition {p} holds {codecs:?}"
        );
    }

    let got = peer_consume(&broker(), &topic, 3, 3 * RECORDS).await;
    assert_eq!(got.len(), 3 * RECORDS);
    for r in &got {
        let i = usize::try_from(r.offset).unwrap();
        let (k, v, h) = parts(r.partition, i);
        assert_eq!(
            r.key.as_deref(),
            Some(k.as_bytes()),
            "{c} {}/{}",
            r.partition,
            i
        );
        assert_eq!(
            r.value.as_deref(),
            Some(v.as_bytes()),
            "{c} {}/{}",
            r.partition,
            i
        );
        assert_eq!(r.headers, vec![("trace".to_string(), Some(h.into_bytes()))]);
        assert_eq!(r.timestamp_ms, Some(1_700_000_000_000 + i as i64));
    }
}

/// librdkafka writes with `compression.type` = `c`; our `fetch` reads the records back.
async fn librdkafka_to_ours(c: Compression) {
    let conn = dial().await;
    let topic = new_topic(&conn, &format!("zip-in-{c}"), 2).await;
    let producer: FutureProducer = producer_config(&broker())
        .set("compression.type", c.name())
        // Let records gather into a few batches, so there is something to compress.
        .set("linger.ms", "50")
        .create()
        .expect("peer producer");
    let mut deliveries = Vec::new();
    for p in 0..2 {
        for i in 0..RECORDS {
            let (k, v, h) = parts(p, i);
            let headers = OwnedHeaders::new().insert(Header {
                key: "trace",
                value: Some(h.as_bytes()),
            });
            let rec = FutureRecord::to(&topic)
                .partition(p)
                .key(k.as_bytes())
                .payload(v.as_bytes())
                .headers(headers);
            deliveries.push(
                producer
                    .send_result(rec)
                    .unwrap_or_else(|(e, _)| panic!("{c}: enqueue: {e}")),
            );
        }
    }
    for d in deliveries {
        tokio::time::timeout(PEER_TIMEOUT, d)
            .await
            .expect("delivery within the peer timeout")
            .expect("delivery future")
            .unwrap_or_else(|(e, _)| panic!("{c}: delivery: {e}"));
    }

    for p in 0..2 {
        // librdkafka compressed what it wrote with `c`.
        let (codecs, count) = raw_batches(&conn, &topic, p).await;
        assert_eq!(count, RECORDS, "{c}: partition {p}");
        assert!(
            codecs.iter().all(|&x| x == c),
            "{c}: partition {p} holds {codecs:?}"
        );
        // Our fetch reads every record back.
        let mut next = 0i64;
        let mut got = Vec::new();
        while got.len() < RECORDS {
            let f = conn
                .fetch(&topic, p, next, &FetchParams::default())
                .await
                .unwrap()
                .into_result()
                .unwrap();
            assert!(!f.records.is_empty(), "{c}: no records at {p}/{next}");
            next = f.records.last().unwrap().offset + 1;
            got.extend(f.records);
        }
        for (i, r) in got.iter().enumerate() {
            let (k, v, h) = parts(p, i);
            assert_eq!(r.offset, i as i64);
            assert_eq!(r.key.as_deref(), Some(k.as_bytes()), "{c} {p}/{i}");
            assert_eq!(r.value.as_deref(), Some(v.as_bytes()), "{c} {p}/{i}");
            assert_eq!(r.headers.len(), 1);
            assert_eq!(r.headers[0].key_str(), Some("trace"));
            assert_eq!(r.headers[0].value.as_deref(), Some(h.as_bytes()));
        }
    }
}

/// Fetches `topic`/`partition` from offset 0 with a raw Fetch (v12, topics by name) and returns
/// the codec of every batch and the number of records, decoding the batches ourselves.
async fn raw_batches(conn: &Conn, topic: &str, partition: i32) -> (Vec<Compression>, usize) {
    let mut req = FetchRequest::default();
    req.replica_id = -1;
    req.max_wait_ms = 100;
    req.min_bytes = 1;
    req.max_bytes = 16 << 20;
    req.session_epoch = -1;
    let mut p = fetch_request::FetchPartition::default();
    p.partition = partition;
    p.fetch_offset = 0;
    p.partition_max_bytes = 16 << 20;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = topic.to_owned();
    t.partitions.push(p);
    req.topics.push(t);
    let resp = conn
        .request_at(&req, 12, Duration::from_millis(100))
        .await
        .expect("raw fetch");
    let data = resp.responses[0].partitions[0]
        .records
        .clone()
        .unwrap_or_default();
    let mut codecs = Vec::new();
    let mut count = 0;
    for batch in RecordBatchDecoder::new(data) {
        let batch = batch.expect("batch decodes");
        codecs.push(batch.header.compression);
        count += batch.records.len();
    }
    (codecs, count)
}

#[tokio::test]
async fn gzip_ours_to_librdkafka() {
    ours_to_librdkafka(Compression::Gzip, Some(9)).await;
}

#[tokio::test]
async fn gzip_librdkafka_to_ours() {
    librdkafka_to_ours(Compression::Gzip).await;
}

#[tokio::test]
async fn snappy_ours_to_librdkafka() {
    // Snappy takes no level (Kafka defines none).
    ours_to_librdkafka(Compression::Snappy, None).await;
}

#[tokio::test]
async fn snappy_librdkafka_to_ours() {
    librdkafka_to_ours(Compression::Snappy).await;
}

#[tokio::test]
async fn lz4_ours_to_librdkafka() {
    ours_to_librdkafka(Compression::Lz4, Some(12)).await;
}

#[tokio::test]
async fn lz4_librdkafka_to_ours() {
    librdkafka_to_ours(Compression::Lz4).await;
}

#[tokio::test]
async fn zstd_ours_to_librdkafka() {
    ours_to_librdkafka(Compression::Zstd, Some(10)).await;
}

#[tokio::test]
async fn zstd_librdkafka_to_ours() {
    librdkafka_to_ours(Compression::Zstd).await;
}
