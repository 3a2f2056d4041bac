//! `Dialer` and `Conn` against tansu, a real Kafka-compatible broker (one node).
//!
//! Needs tansu: run through `cargo xtask test`, or `cargo xtask broker start` first.
//!
//! tansu 0.6 is lax where Apache Kafka is strict: it accepts produce requests for missing topics
//! (creating them) and for partition indexes the topic lacks, does not enforce
//! `message.max.bytes`, answers ListOffsets at batch granularity (latest = last batch's base
//! offset + 1) and with the earliest offset for timestamp queries. Partial write failures and
//! timestamp look-ups are therefore tested against librdkafka's mock cluster (conn_mock.rs).

use super::{BROKER, broker};
use integration_tests::BrokerKind;
use std::time::Duration;

use bytes::Bytes;
use integration_tests::{PeerSend, create_topic_with, peer_consume, peer_produce, unique_topic};
use kafkit::admin::NewTopic;
use kafkit::{
    Acks, Compression, Conn, Dialer, Error, FetchParams, IsolationLevel, OffsetSpec, ProduceBatches,
};
use kafkit_protocol::records::Record;
use kafkit_protocol::{ApiKey, ErrorCode};

const TIMEOUT: Duration = Duration::from_secs(30);

async fn dial() -> Conn {
    super::dial("conn-family-test").await
}

async fn new_topic(conn: &Conn, prefix: &str, partitions: i32) -> String {
    create_topic_with(conn, prefix, partitions).await
}

fn record(key: &str, value: &str, ts: i64) -> Record {
    Record::new(
        Some(Bytes::copy_from_slice(key.as_bytes())),
        Some(Bytes::copy_from_slice(value.as_bytes())),
    )
    .with_timestamp(ts)
    .with_header("h1", Some(Bytes::copy_from_slice(value.as_bytes())))
    .with_header("h-null", None)
}

#[tokio::test]
async fn negotiates_versions_within_both_ranges() {
    let conn = dial().await;
    let broker = conn
        .broker_versions()
        .get(ApiKey::ListOffsets)
        .expect("tansu offers ListOffsets");
    let chosen = conn
        .version_for::<kafkit_protocol::messages::ListOffsetsRequest>(None)
        .unwrap();
    assert!(broker.contains(chosen), "{chosen} outside {broker:?}");
    // 11: the client's ListOffsets maximum (docs/protocol.md).
    assert_eq!(chosen, broker.max.min(11));
    // The negotiation itself was one ApiVersions request.
    assert_eq!(conn.requests_sent(ApiKey::ApiVersions), 1);
    let again = conn.api_versions().await.unwrap();
    assert!(!again.api_keys.is_empty());
}

#[tokio::test]
async fn metadata_create_and_delete_topics() {
    let conn = dial().await;
    let topic = new_topic(&conn, "conn-admin", 3).await;

    let md = conn.metadata(Some(&[topic.as_str()])).await.unwrap();
    assert!(!md.brokers.is_empty());
    assert!(md.controller_id >= 0);
    let t = md.topic(&topic).expect("topic listed");
    assert_eq!(t.error_code, ErrorCode::NONE);
    assert_eq!(t.partitions.len(), 3);
    for (i, p) in t.partitions.iter().enumerate() {
        assert_eq!(p.partition, i as i32);
        assert!(
            md.broker(p.leader_id).is_some(),
            "leader {} unknown",
            p.leader_id
        );
        assert!(p.replicas.contains(&p.leader_id));
    }
    let leader = md.leader_of(&topic, 2).unwrap();
    assert_eq!(leader.node_id, t.partitions[2].leader_id);

    // Creating it again fails for that topic only.
    let again = conn
        .create_topics(&[NewTopic::new(&topic, 3, 1)], false)
        .await
        .unwrap();
    assert_eq!(again[0].0, topic);
    let code = again[0].1.as_ref().map_err(kafkit::Error::error_code);
    assert_eq!(code, Err(Some(ErrorCode::TOPIC_ALREADY_EXISTS)));

    let deleted = conn.delete_topics(&[&topic]).await.unwrap();
    assert_eq!(deleted.len(), 1);
    assert!(deleted[0].1.is_ok(), "{deleted:?}");
    // Kafka's broker drops the topic a moment after DeleteTopics answers.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let md = conn.metadata(Some(&[topic.as_str()])).await.unwrap();
        let gone = md.topic(&topic).map(|t| t.error_code);
        if gone.is_none() || gone == Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "still listed: {gone:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn unknown_topic_is_reported_not_created() {
    let conn = dial().await;
    let topic = unique_topic("conn-missing");
    let md = conn.metadata(Some(&[topic.as_str()])).await.unwrap();
    assert_eq!(
        md.topic(&topic).map(|t| t.error_code),
        Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
    let err = md.leader_of(&topic, 0).unwrap_err();
    assert_eq!(
        err.error_code(),
        Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
    assert!(err.is_retriable());
}

#[tokio::test]
async fn produce_then_fetch_round_trips_records() {
    let conn = dial().await;
    let topic = new_topic(&conn, "conn-rt", 2).await;
    let records: Vec<Record> = (0..5)
        .map(|i| record(&format!("k{i}"), &format!("v{i}"), 1_700_000_000_000 + i))
        .collect();
    let produced = conn
        .produce(&topic, 1, &records, Acks::All, TIMEOUT)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(produced.base_offset, 0);

    let fetched = conn
        .fetch(&topic, 1, 0, &FetchParams::default())
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(fetched.high_watermark, 5);
    assert_eq!(fetched.records.len(), 5);
    for (i, (got, sent)) in fetched.records.iter().zip(&records).enumerate() {
        assert_eq!(got.offset, i as i64);
        assert_eq!(got.key, sent.key);
        assert_eq!(got.value, sent.value);
        assert_eq!(got.timestamp, sent.timestamp);
        assert_eq!(got.headers, sent.headers);
    }

    // Fetching from the middle returns the tail only.
    let tail = conn
        .fetch(&topic, 1, 3, &FetchParams::default())
        .await
        .unwrap();
    assert_eq!(
        tail.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![3, 4]
    );

    // list_offsets. tansu answers at batch granularity (its latest offset is the last batch's
    // base offset + 1), so this part writes one record per batch.
    let topic = new_topic(&conn, "conn-offsets", 2).await;
    for (i, r) in records.iter().enumerate() {
        let p = conn
            .produce(&topic, 1, std::slice::from_ref(r), Acks::All, TIMEOUT)
            .await
            .unwrap();
        assert_eq!((p.error_code, p.base_offset), (ErrorCode::NONE, i as i64));
    }
    // A partition may appear once per request: earliest and latest take two calls.
    let mut offsets = conn
        .list_offsets(
            &[
                (&topic, 1, OffsetSpec::Earliest),
                (&topic, 0, OffsetSpec::Latest),
            ],
            IsolationLevel::ReadUncommitted,
        )
        .await
        .unwrap();
    offsets.insert(
        1,
        conn.list_offsets(
            &[(&topic, 1, OffsetSpec::Latest)],
            IsolationLevel::ReadUncommitted,
        )
        .await
        .unwrap()
        .remove(0),
    );
    let got: Vec<(i32, ErrorCode, i64)> = offsets
        .iter()
        .map(|o| (o.partition, o.error_code, o.offset))
        .collect();
    assert_eq!(
        got,
        vec![
            (1, ErrorCode::NONE, 0),
            (1, ErrorCode::NONE, 5),
            (0, ErrorCode::NONE, 0)
        ]
    );
    // (tansu answers timestamp look-ups with the earliest offset; conn_mock.rs checks them.)
}

#[tokio::test]
async fn write_multi_sends_one_produce_request_for_two_topics_by_four_partitions() {
    let conn = dial().await;
    let a = new_topic(&conn, "conn-multi-a", 4).await;
    let b = new_topic(&conn, "conn-multi-b", 4).await;
    let mut batches = ProduceBatches::new(Compression::None);
    for topic in [&a, &b] {
        for p in 0..4 {
            let recs: Vec<Record> = (0..3)
                .map(|i| record(&format!("{topic}-{p}-{i}"), &format!("v{i}"), 1_000 + i))
                .collect();
            batches.add_records(topic, p, &recs).unwrap();
        }
    }
    let before = conn.requests_sent(ApiKey::Produce);
    let results = conn
        .write_multi(&batches, Acks::All, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(conn.requests_sent(ApiKey::Produce) - before, 1);
    assert_eq!(results.len(), 8);
    for (r, (topic, p)) in results.iter().zip(batches.partitions()) {
        assert_eq!((r.topic.as_str(), r.partition), (topic, p));
        assert_eq!(r.error_code, ErrorCode::NONE, "{r:?}");
        assert_eq!(r.base_offset, 0);
    }
    // Read all 8 partitions back with ONE Fetch request.
    let wanted: Vec<(&str, i32, i64)> = batches.partitions().map(|(t, p)| (t, p, 0)).collect();
    let fetches_before = conn.requests_sent(ApiKey::Fetch);
    let fetched = conn
        .fetch_multi(&wanted, &FetchParams::default())
        .await
        .unwrap();
    assert_eq!(conn.requests_sent(ApiKey::Fetch) - fetches_before, 1);
    assert_eq!(fetched.len(), 8);
    for (f, (t, p, _)) in fetched.iter().zip(&wanted) {
        assert_eq!((f.topic.as_str(), f.partition), (*t, *p));
        assert_eq!(f.error_code, ErrorCode::NONE);
        assert_eq!(f.records.len(), 3, "{t}/{p}");
        assert_eq!(f.high_watermark, 3);
    }
    for topic in [&a, &b] {
        for p in 0..4 {
            let f = conn
                .fetch(topic, p, 0, &FetchParams::default())
                .await
                .unwrap();
            assert_eq!(f.records.len(), 3, "{topic}/{p}");
            assert_eq!(
                f.records[2].key.as_deref(),
                Some(format!("{topic}-{p}-2").as_bytes())
            );
        }
    }
}

#[tokio::test]
async fn write_multi_without_batches_sends_nothing() {
    let conn = dial().await;
    let before = conn.requests_sent(ApiKey::Produce);
    let out = conn
        .write_multi(&ProduceBatches::default(), Acks::All, TIMEOUT)
        .await
        .unwrap();
    assert!(out.is_empty());
    assert_eq!(conn.requests_sent(ApiKey::Produce), before);
}

#[tokio::test]
async fn acks_zero_returns_without_a_response() {
    let conn = dial().await;
    let topic = new_topic(&conn, "conn-acks0", 1).await;
    let r = conn
        .produce(&topic, 0, &[record("k", "v", 9)], Acks::None, TIMEOUT)
        .await
        .unwrap();
    assert_eq!((r.error_code, r.base_offset), (ErrorCode::NONE, -1));
    // The connection keeps working after a request without a response: the record is there
    // once the broker has processed it (min_bytes 1 makes the fetch wait for it).
    let f = conn
        .fetch(
            &topic,
            0,
            0,
            &FetchParams::default().max_wait(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert_eq!(f.error_code, ErrorCode::NONE);
    assert_eq!(f.records.len(), 1);
}

#[tokio::test]
async fn concurrent_callers_share_one_connection() {
    let conn = dial().await;
    let topic = new_topic(&conn, "conn-concurrent", 1).await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let conn = conn.clone();
        let topic = topic.clone();
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                conn.metadata(Some(&[topic.as_str()])).await.map(|_| ())
            } else {
                conn.produce(&topic, 0, &[record("k", "v", i)], Acks::All, TIMEOUT)
                    .await
                    .and_then(|r| r.into_result())
                    .map(|_| ())
            }
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let f = conn
        .fetch(&topic, 0, 0, &FetchParams::default())
        .await
        .unwrap();
    assert_eq!(f.records.len(), 10);
}

#[tokio::test]
async fn dial_leader_and_lookup_leader() {
    let conn = dial().await;
    let topic = new_topic(&conn, "conn-leader", 2).await;
    let dialer = Dialer::default();
    let leader = dialer.lookup_leader(&broker(), &topic, 1).await.unwrap();
    let md = conn.metadata(Some(&[topic.as_str()])).await.unwrap();
    assert_eq!(
        leader.node_id,
        md.topic(&topic).unwrap().partitions[1].leader_id
    );
    let lconn = dialer.dial_leader(&broker(), &topic, 1).await.unwrap();
    lconn
        .produce(&topic, 1, &[record("k", "v", 1)], Acks::All, TIMEOUT)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let missing = dialer
        .lookup_leader(&broker(), &unique_topic("nope"), 0)
        .await;
    assert!(matches!(missing, Err(Error::Broker { .. })), "{missing:?}");
}

#[tokio::test]
async fn what_we_write_librdkafka_reads_back_equal() {
    let conn = dial().await;
    let topic = new_topic(&conn, "conn-peer-read", 2).await;
    let mut batches = ProduceBatches::new(Compression::None);
    let ts = 1_700_000_123_000;
    let p0: Vec<Record> = (0..3)
        .map(|i| record(&format!("a{i}"), &format!("x{i}"), ts + i))
        .collect();
    let p1 = vec![
        Record::new(None, Some(Bytes::from_static(b"null-key"))).with_timestamp(ts),
        Record::new(Some(Bytes::from_static(b"tombstone")), None).with_timestamp(ts + 1),
    ];
    batches.add_records(&topic, 0, &p0).unwrap();
    batches.add_records(&topic, 1, &p1).unwrap();
    for r in conn
        .write_multi(&batches, Acks::All, TIMEOUT)
        .await
        .unwrap()
    {
        r.into_result().unwrap();
    }
    let got = peer_consume(&broker(), &topic, 2, 5).await;
    let ours: Vec<(i32, &Record)> = p0
        .iter()
        .map(|r| (0, r))
        .chain(p1.iter().map(|r| (1, r)))
        .collect();
    assert_eq!(got.len(), ours.len());
    for (peer, (partition, sent)) in got.iter().zip(ours) {
        assert_eq!(peer.partition, partition);
        assert_eq!(peer.key.as_deref(), sent.key.as_deref());
        assert_eq!(peer.value.as_deref(), sent.value.as_deref());
        assert_eq!(peer.timestamp_ms, Some(sent.timestamp));
        let headers: Vec<(String, Option<Vec<u8>>)> = sent
            .headers
            .iter()
            .map(|h| {
                (
                    String::from_utf8(h.key.to_vec()).unwrap(),
                    h.value.as_ref().map(|v| v.to_vec()),
                )
            })
            .collect();
        assert_eq!(peer.headers, headers);
    }
}

#[tokio::test]
async fn what_librdkafka_writes_we_read_back_equal() {
    let conn = dial().await;
    let topic = new_topic(&conn, "conn-peer-write", 1).await;
    let sends = [
        PeerSend {
            partition: 0,
            key: Some(b"k1"),
            value: Some(b"v1"),
            headers: &[("a", b"1"), ("b", b"2")],
        },
        PeerSend {
            partition: 0,
            key: None,
            value: Some(b"v2"),
            headers: &[],
        },
        PeerSend {
            partition: 0,
            key: Some(b"k3"),
            value: None,
            headers: &[("c", b"")],
        },
    ];
    let offsets = peer_produce(&broker(), &topic, &sends).await;
    let f = conn
        .fetch(&topic, 0, 0, &FetchParams::default())
        .await
        .unwrap()
        .into_result()
        .unwrap();
    assert_eq!(f.records.len(), sends.len());
    for ((got, sent), (_, offset)) in f.records.iter().zip(&sends).zip(offsets) {
        assert_eq!(got.offset, offset);
        assert_eq!(got.key.as_deref(), sent.key);
        assert_eq!(got.value.as_deref(), sent.value);
        let headers: Vec<(&[u8], Option<&[u8]>)> = got
            .headers
            .iter()
            .map(|h| (&h.key[..], h.value.as_deref()))
            .collect();
        let want: Vec<(&[u8], Option<&[u8]>)> = sent
            .headers
            .iter()
            .map(|(k, v)| (k.as_bytes(), Some(*v)))
            .collect();
        assert_eq!(headers, want);
        assert!(got.timestamp > 0);
    }
}

/// A damaged batch fails only its own partition. Kafka checks the CRC of a produced batch and
/// refuses it (CORRUPT_MESSAGE) while the other partition of the same request is written. tansu
/// stores it without checking, so there the damage comes back in a Fetch, where the client's
/// CRC check must fail that partition alone.
#[tokio::test]
async fn a_corrupt_batch_fails_only_its_partition() {
    use kafkit_protocol::records::{RecordBatchEncoder, RecordBatchOptions, RecordsError};
    let conn = dial().await;
    let topic = new_topic(&conn, "conn-corrupt", 2).await;
    let mut damaged = bytes::BytesMut::new();
    let mut enc = RecordBatchEncoder::new(&mut damaged, RecordBatchOptions::new()).unwrap();
    enc.append(&Record::new(None, Some(Bytes::from_static(b"hello"))).with_timestamp(1))
        .unwrap();
    enc.finish().unwrap();
    let last = damaged.len() - 1;
    damaged[last] ^= 0xff; // the value's last byte: the CRC no longer matches
    let mut batches = ProduceBatches::new(Compression::None);
    batches
        .add_records(
            &topic,
            0,
            &[Record::new(None, Some(Bytes::from_static(b"fine")))],
        )
        .unwrap();
    batches.add_batch(&topic, 1, damaged.freeze()).unwrap();
    let written = conn
        .write_multi(&batches, Acks::All, TIMEOUT)
        .await
        .unwrap();
    let codes: Vec<(i32, ErrorCode)> = written.iter().map(|p| (p.partition, p.error_code)).collect();
    if BROKER == BrokerKind::Kafka {
        assert_eq!(
            codes,
            [(0, ErrorCode::NONE), (1, ErrorCode::CORRUPT_MESSAGE)],
            "{written:?}"
        );
        let fetched = conn
            .fetch_multi(
                &[(&topic, 0, 0), (&topic, 1, 0)],
                &FetchParams::default().max_wait(Duration::from_millis(100)),
            )
            .await
            .unwrap();
        assert_eq!(fetched[0].records[0].value.as_deref(), Some(&b"fine"[..]));
        assert_eq!(fetched[1].error_code, ErrorCode::NONE);
        assert!(fetched[1].records.is_empty(), "nothing of the damaged batch was stored");
        return;
    }
    assert_eq!(codes, [(0, ErrorCode::NONE), (1, ErrorCode::NONE)], "{written:?}");
    let fetched = conn
        .fetch_multi(
            &[(&topic, 0, 0), (&topic, 1, 0)],
            &FetchParams::default().max_wait(Duration::from_millis(100)),
        )
        .await
        .unwrap();
    assert_eq!(fetched[0].error_code, ErrorCode::NONE);
    assert_eq!(fetched[0].records[0].value.as_deref(), Some(&b"fine"[..]));
    assert_eq!(fetched[1].error_code, ErrorCode::CORRUPT_MESSAGE);
    assert!(fetched[1].records.is_empty());
    assert!(
        matches!(
            fetched[1].records_error,
            Some(RecordsError::CrcMismatch { .. })
        ),
        "{:?}",
        fetched[1].records_error
    );
    let err = fetched[1].clone().into_result().unwrap_err();
    assert!(matches!(err, Error::Records(_)), "{err:?}");
}
