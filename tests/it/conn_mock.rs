//! `Dialer` and `Conn` against librdkafka's in-process mock cluster (3 brokers, ids 1..=3):
//! multi-broker metadata, write_multi grouped by leader, not-leader errors, peer interop, and
//! brokers dying with requests in flight.
//!
//! The mock cluster is not `Send`, so each test keeps it on the test's (current-thread) runtime.

use std::time::Duration;

use bytes::Bytes;
use integration_tests::{PeerSend, mock_cluster, peer_consume, peer_produce, unique_topic};
use kafkit::{
    Acks, CloseCause, Compression, Conn, Dialer, Error, FetchParams, IsolationLevel, Metadata,
    OffsetSpec, ProduceBatches,
};
use kafkit_protocol::records::Record;
use kafkit_protocol::{ApiKey, ErrorCode};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

const TIMEOUT: Duration = Duration::from_secs(10);

fn first(bootstrap: &str) -> &str {
    bootstrap.split(',').next().unwrap()
}

async fn metadata(dialer: &Dialer, bootstrap: &str, topics: &[&str]) -> Metadata {
    let conn = dialer
        .dial(first(bootstrap))
        .await
        .expect("dial mock broker");
    conn.metadata(Some(topics)).await.expect("metadata")
}

fn record(key: &str, value: &str, ts: i64) -> Record {
    Record::new(
        Some(Bytes::copy_from_slice(key.as_bytes())),
        Some(Bytes::copy_from_slice(value.as_bytes())),
    )
    .with_timestamp(ts)
    .with_header("trace", Some(Bytes::copy_from_slice(key.as_bytes())))
}

/// Fetches from offset 0 until `count` records have arrived (a fetch may return fewer batches
/// than exist, as the mock returns one batch per fetch).
async fn fetch_all(conn: &Conn, topic: &str, partition: i32, count: usize) -> Vec<Record> {
    let mut out: Vec<Record> = Vec::new();
    while out.len() < count {
        let next = out.last().map_or(0, |r| r.offset + 1);
        let f = conn
            .fetch(
                topic,
                partition,
                next,
                &FetchParams::default().max_wait(Duration::from_secs(1)),
            )
            .await
            .unwrap()
            .into_result()
            .unwrap();
        assert!(
            !f.records.is_empty() || f.high_watermark > next,
            "{topic}/{partition}: no records after offset {next}, high watermark {}",
            f.high_watermark
        );
        out.extend(f.records);
    }
    out
}

#[tokio::test]
async fn metadata_lists_three_brokers_and_leaders() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("mock-md");
    cluster.create_topic(&topic, 4, 3).unwrap();
    for p in 0..4 {
        cluster
            .partition_leader(&topic, p, Some(p % 3 + 1))
            .unwrap();
    }
    let md = metadata(&Dialer::default(), &bootstrap, &[&topic]).await;
    let mut ids: Vec<i32> = md.brokers.iter().map(|b| b.node_id).collect();
    ids.sort();
    assert_eq!(ids, vec![1, 2, 3]);
    let t = md.topic(&topic).unwrap();
    assert_eq!(t.error_code, ErrorCode::NONE);
    assert_eq!(t.partitions.len(), 4);
    for p in &t.partitions {
        assert_eq!(p.leader_id, p.partition % 3 + 1);
        assert_eq!(p.replicas.len(), 3);
        assert!(!p.isr.is_empty());
    }
    // Every broker in the list can be dialled at its advertised address.
    for b in &md.brokers {
        let c = Dialer::default().dial(&b.addr()).await.unwrap();
        assert!(c.broker_versions().get(ApiKey::Produce).is_some());
    }
}

#[tokio::test]
async fn write_multi_one_produce_request_per_leader() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let a = unique_topic("mock-multi-a");
    let b = unique_topic("mock-multi-b");
    for (i, t) in [&a, &b].into_iter().enumerate() {
        cluster.create_topic(t, 4, 3).unwrap();
        for p in 0..4 {
            cluster
                .partition_leader(t, p, Some((p + i as i32) % 3 + 1))
                .unwrap();
        }
    }
    let dialer = Dialer::default();
    let md = metadata(&dialer, &bootstrap, &[&a, &b]).await;
    let mut all = ProduceBatches::new(Compression::None);
    for t in [&a, &b] {
        for p in 0..4 {
            let recs: Vec<Record> = (0..2)
                .map(|i| record(&format!("{t}/{p}/{i}"), "v", 1_000 + i))
                .collect();
            all.add_records(t, p, &recs).unwrap();
        }
    }
    let (groups, unroutable) = all.split_by_leader(&md);
    assert!(unroutable.is_empty(), "{unroutable:?}");
    assert_eq!(groups.len(), 3, "the 8 partitions span all 3 brokers");
    assert_eq!(
        groups
            .iter()
            .map(|(b, g)| (b.node_id, g.len()))
            .collect::<Vec<_>>(),
        vec![(1, 3), (2, 3), (3, 2)]
    );

    let mut written = 0;
    for (leader, batches) in &groups {
        let conn = dialer.dial(&leader.addr()).await.unwrap();
        let results = conn.write_multi(batches, Acks::All, TIMEOUT).await.unwrap();
        assert_eq!(
            conn.requests_sent(ApiKey::Produce),
            1,
            "broker {}",
            leader.node_id
        );
        assert_eq!(results.len(), batches.len());
        for r in &results {
            assert_eq!(r.error_code, ErrorCode::NONE, "{r:?}");
            assert_eq!(r.base_offset, 0);
        }
        written += results.len();
        let partitions: Vec<(String, i32)> = batches
            .partitions()
            .map(|(t, p)| (t.to_owned(), p))
            .collect();
        // Read back from the same leader.
        for (t, p) in &partitions {
            let f = conn.fetch(t, *p, 0, &FetchParams::default()).await.unwrap();
            assert_eq!(f.error_code, ErrorCode::NONE);
            assert_eq!(f.high_watermark, 2);
            let got = fetch_all(&conn, t, *p, 2).await;
            assert_eq!(got[1].key.as_deref(), Some(format!("{t}/{p}/1").as_bytes()));
        }
        let offs = conn
            .list_offsets(
                &partitions
                    .iter()
                    .map(|(t, p)| (t.as_str(), *p, OffsetSpec::Latest))
                    .collect::<Vec<_>>(),
                IsolationLevel::ReadUncommitted,
            )
            .await
            .unwrap();
        assert!(
            offs.iter().all(|o| o.error_code.is_ok() && o.offset == 2),
            "{offs:?}"
        );
    }
    assert_eq!(written, 8);
}

#[tokio::test]
async fn write_multi_to_a_non_leader_fails_only_those_partitions() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("mock-notleader");
    cluster.create_topic(&topic, 3, 3).unwrap();
    for p in 0..3 {
        cluster.partition_leader(&topic, p, Some(p + 1)).unwrap();
    }
    let dialer = Dialer::default();
    let md = metadata(&dialer, &bootstrap, &[&topic]).await;
    let conn = dialer.dial(&md.broker(1).unwrap().addr()).await.unwrap();
    let mut batches = ProduceBatches::new(Compression::None);
    for p in 0..3 {
        batches
            .add_records(&topic, p, &[record("k", "v", 1)])
            .unwrap();
    }
    let missing = unique_topic("mock-missing");
    batches
        .add_records(&missing, 0, &[record("k", "v", 1)])
        .unwrap();
    // A partition index the topic does not have.
    batches
        .add_records(&topic, 9, &[record("k", "v", 1)])
        .unwrap();
    let results = conn
        .write_multi(&batches, Acks::All, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(conn.requests_sent(ApiKey::Produce), 1);
    assert_eq!(results[0].error_code, ErrorCode::NONE, "{:?}", results[0]);
    assert_eq!(results[1].error_code, ErrorCode::NOT_LEADER_OR_FOLLOWER);
    assert_eq!(results[2].error_code, ErrorCode::NOT_LEADER_OR_FOLLOWER);
    assert_eq!(
        results[3].error_code,
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        "{:?}",
        results[3]
    );
    assert_eq!(
        results[4].error_code,
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        "{:?}",
        results[4]
    );
    let err = results[1].clone().into_result().unwrap_err();
    assert!(err.is_retriable(), "NOT_LEADER_OR_FOLLOWER is retriable");
}

#[tokio::test]
async fn what_we_write_librdkafka_reads_back_equal() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("mock-peer-read");
    cluster.create_topic(&topic, 1, 1).unwrap();
    cluster.partition_leader(&topic, 0, Some(2)).unwrap();
    let dialer = Dialer::default();
    let conn = dialer.dial_leader(&bootstrap, &topic, 0).await.unwrap();
    let recs: Vec<Record> = (0..4)
        .map(|i| {
            record(
                &format!("k{i}"),
                &format!("value-{i}"),
                1_700_000_000_000 + i,
            )
        })
        .collect();
    conn.produce(&topic, 0, &recs, Acks::All, TIMEOUT)
        .await
        .unwrap()
        .into_result()
        .unwrap();
    let got = peer_consume(&bootstrap, &topic, 1, 4).await;
    for (peer, sent) in got.iter().zip(&recs) {
        assert_eq!(peer.key.as_deref(), sent.key.as_deref());
        assert_eq!(peer.value.as_deref(), sent.value.as_deref());
        assert_eq!(peer.timestamp_ms, Some(sent.timestamp));
        assert_eq!(
            peer.headers,
            vec![("trace".to_owned(), sent.key.as_ref().map(|k| k.to_vec()))]
        );
    }
}

#[tokio::test]
async fn what_librdkafka_writes_we_read_back_equal() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("mock-peer-write");
    cluster.create_topic(&topic, 2, 1).unwrap();
    let sends = [
        PeerSend {
            partition: 1,
            key: Some(b"key-1"),
            value: Some(b"value-1"),
            headers: &[("h", b"1")],
        },
        PeerSend {
            partition: 1,
            key: None,
            value: Some(b"value-2"),
            headers: &[],
        },
    ];
    let offsets = peer_produce(&bootstrap, &topic, &sends).await;
    let conn = Dialer::default()
        .dial_leader(&bootstrap, &topic, 1)
        .await
        .unwrap();
    let got = fetch_all(&conn, &topic, 1, sends.len()).await;
    for ((got, sent), (_, off)) in got.iter().zip(&sends).zip(offsets) {
        assert_eq!(got.offset, off);
        assert_eq!(got.key.as_deref(), sent.key);
        assert_eq!(got.value.as_deref(), sent.value);
        assert_eq!(got.headers.len(), sent.headers.len());
    }
}

#[tokio::test]
async fn message_too_large_reaches_the_caller_and_the_connection_survives() {
    // Neither the mock nor tansu enforce `message.max.bytes`, so the broker's verdict is
    // injected: the next Produce request is answered with MESSAGE_TOO_LARGE.
    let cluster = mock_cluster(1);
    let topic = unique_topic("mock-too-large");
    cluster.create_topic(&topic, 1, 1).unwrap();
    let conn = Dialer::default()
        .dial(&cluster.bootstrap_servers())
        .await
        .unwrap();
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    let big = Record::new(None, Some(Bytes::from(vec![1u8; 2_000_000])));
    let r = conn
        .produce(&topic, 0, &[big], Acks::All, TIMEOUT)
        .await
        .unwrap();
    assert_eq!(r.error_code, ErrorCode::MESSAGE_TOO_LARGE);
    let err = r.into_result().unwrap_err();
    assert!(!err.is_retriable());
    assert_eq!(err.error_code(), Some(ErrorCode::MESSAGE_TOO_LARGE));
    let ok = conn
        .produce(&topic, 0, &[record("k", "v", 1)], Acks::All, TIMEOUT)
        .await
        .unwrap();
    assert_eq!((ok.error_code, ok.base_offset), (ErrorCode::NONE, 0));
}

#[tokio::test]
async fn broker_going_down_fails_requests_in_flight() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("mock-down");
    cluster.create_topic(&topic, 1, 1).unwrap();
    let dialer = Dialer::builder()
        .request_timeout(Duration::from_secs(60))
        .build();
    let md = metadata(&dialer, &bootstrap, &[&topic]).await;
    let conn = dialer.dial(&md.broker(1).unwrap().addr()).await.unwrap();
    // Slow the broker down so the requests below are still waiting when it goes away.
    cluster
        .broker_round_trip_time(1, Duration::from_secs(30))
        .unwrap();
    let mut calls = Vec::new();
    for _ in 0..3 {
        let conn = conn.clone();
        let topic = topic.clone();
        calls.push(tokio::spawn(async move {
            conn.metadata(Some(&[topic.as_str()])).await
        }));
    }
    while conn.requests_sent(ApiKey::Metadata) < 3 {
        tokio::task::yield_now().await;
    }
    cluster.broker_down(1).unwrap();
    for c in calls {
        match c.await.unwrap() {
            Err(e @ Error::ConnectionClosed { .. }) => {
                assert!(e.is_retriable());
                assert!(matches!(
                    e,
                    Error::ConnectionClosed {
                        cause: CloseCause::Eof | CloseCause::Io(_),
                        ..
                    }
                ));
            }
            other => panic!("expected ConnectionClosed, got {other:?}"),
        }
    }
    assert!(conn.is_closed());
    // A new dial to the downed broker fails fast instead of hanging.
    let again = Dialer::builder()
        .connect_timeout(Duration::from_secs(5))
        .build()
        .dial(&md.broker(1).unwrap().addr())
        .await;
    assert!(again.is_err());
}

#[tokio::test]
async fn conn_is_usable_from_many_tasks() {
    let cluster = mock_cluster(1);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("mock-many");
    cluster.create_topic(&topic, 1, 1).unwrap();
    let conn: Conn = Dialer::builder()
        .max_in_flight_requests_per_connection(2)
        .build()
        .dial(&bootstrap)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let conn = conn.clone();
        let topic = topic.clone();
        tasks.push(tokio::spawn(async move {
            conn.produce(
                &topic,
                0,
                &[record("k", &i.to_string(), i)],
                Acks::Leader,
                TIMEOUT,
            )
            .await
        }));
    }
    let mut offsets = Vec::new();
    for t in tasks {
        offsets.push(t.await.unwrap().unwrap().into_result().unwrap().base_offset);
    }
    offsets.sort();
    assert_eq!(offsets, (0..16).collect::<Vec<i64>>());
}

#[tokio::test]
async fn api_versions_falls_back_when_the_broker_lacks_our_version() {
    // The mock speaks ApiVersions 0-2 only; we open with our highest (4), get
    // UNSUPPORTED_VERSION, and retry at 2 (KIP-511).
    let cluster = mock_cluster(1);
    let conn = Dialer::default()
        .dial(&cluster.bootstrap_servers())
        .await
        .unwrap();
    assert_eq!(conn.requests_sent(ApiKey::ApiVersions), 2);
    let range = conn.broker_versions().get(ApiKey::ApiVersions).unwrap();
    assert!(range.max < 4, "{range:?}");
    assert!(conn.broker_versions().iter().count() > 10);
}

#[tokio::test]
async fn no_common_version_is_a_typed_error_naming_both_ranges() {
    let cluster = mock_cluster(1);
    let topic = unique_topic("mock-versions");
    cluster.create_topic(&topic, 1, 1).unwrap();
    // Produce v0-2 only: this client needs v3+ (record batches of magic 2).
    cluster
        .apiversion(RDKafkaApiKey::Produce, Some(0), Some(2))
        .unwrap();
    // No ListOffsets at all.
    cluster
        .apiversion(RDKafkaApiKey::ListOffsets, None, None)
        .unwrap();
    let conn = Dialer::default()
        .dial(&cluster.bootstrap_servers())
        .await
        .unwrap();
    let err = conn
        .produce(&topic, 0, &[record("k", "v", 1)], Acks::All, TIMEOUT)
        .await
        .unwrap_err();
    match &err {
        Error::UnsupportedVersion { api, ours, broker } => {
            assert_eq!(*api, ApiKey::Produce);
            assert_eq!(ours.min, 3);
            assert_eq!(broker.map(|b| b.max), Some(2));
        }
        other => panic!("expected UnsupportedVersion, got {other:?}"),
    }
    assert!(!err.is_retriable());
    assert!(err.to_string().contains("Produce"), "{err}");
    assert_eq!(conn.requests_sent(ApiKey::Produce), 0);
    let err = conn
        .list_offsets(
            &[(&topic, 0, OffsetSpec::Earliest)],
            IsolationLevel::ReadUncommitted,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::UnsupportedVersion { broker: None, .. }),
        "{err:?}"
    );
    // Everything else still works on the connection.
    conn.metadata(Some(&[topic.as_str()])).await.unwrap();
}

#[tokio::test]
async fn list_offsets_answers_in_the_callers_order() {
    let cluster = mock_cluster(1);
    let bootstrap = cluster.bootstrap_servers();
    let a = unique_topic("mock-lo-a");
    let b = unique_topic("mock-lo-b");
    cluster.create_topic(&a, 2, 1).unwrap();
    cluster.create_topic(&b, 1, 1).unwrap();
    let conn = Dialer::default().dial(first(&bootstrap)).await.unwrap();
    // a/0 gets 1 record, b/0 2, a/1 3: each partition's latest offset names it.
    let mut batches = ProduceBatches::new(Compression::None);
    for (t, p, n) in [(&a, 0, 1), (&b, 0, 2), (&a, 1, 3)] {
        let records: Vec<Record> = (0..n).map(|i| record("k", "v", i)).collect();
        batches.add_records(t, p, &records).unwrap();
    }
    for r in conn
        .write_multi(&batches, Acks::All, TIMEOUT)
        .await
        .unwrap()
    {
        assert_eq!(r.error_code, ErrorCode::NONE, "{r:?}");
    }
    // Topics interleaved: the request groups partitions by topic, the answer must not.
    let offs = conn
        .list_offsets(
            &[
                (&a, 0, OffsetSpec::Latest),
                (&b, 0, OffsetSpec::Latest),
                (&a, 1, OffsetSpec::Latest),
            ],
            IsolationLevel::ReadUncommitted,
        )
        .await
        .unwrap();
    let got: Vec<(&str, i32, ErrorCode, i64)> = offs
        .iter()
        .map(|o| (o.topic.as_str(), o.partition, o.error_code, o.offset))
        .collect();
    assert_eq!(
        got,
        vec![
            (a.as_str(), 0, ErrorCode::NONE, 1),
            (b.as_str(), 0, ErrorCode::NONE, 2),
            (a.as_str(), 1, ErrorCode::NONE, 3),
        ]
    );
    // A partition may be named once per request (Kafka answers INVALID_REQUEST otherwise).
    let dup = conn
        .list_offsets(
            &[(&a, 0, OffsetSpec::Earliest), (&a, 0, OffsetSpec::Latest)],
            IsolationLevel::ReadUncommitted,
        )
        .await;
    assert!(matches!(dup, Err(Error::InvalidArgument(_))), "{dup:?}");
}

/// Issue: `Duration::MAX`, the natural "no timeout", as `write_multi`'s timeout, as a Fetch's
/// `max_wait`, or as the dialer's `request_timeout` panicked with "overflow when adding
/// durations" (request timeout + broker-side wait). Zero works too: the broker answers at once.
#[tokio::test]
async fn write_multi_and_fetch_take_any_timeout() {
    let cluster = mock_cluster(1);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("mock-spans");
    cluster.create_topic(&topic, 1, 1).unwrap();
    for request_timeout in [TIMEOUT, Duration::MAX] {
        let dialer = Dialer::builder().request_timeout(request_timeout).build();
        let conn = dialer.dial(first(&bootstrap)).await.unwrap();
        for timeout in [Duration::MAX, Duration::ZERO] {
            let mut batches = ProduceBatches::new(Compression::None);
            batches
                .add_records(&topic, 0, &[record("k", "v", 1_000)])
                .unwrap();
            let written =
                tokio::time::timeout(TIMEOUT, conn.write_multi(&batches, Acks::All, timeout))
                    .await
                    .expect("an answer")
                    .unwrap();
            assert!(
                written[0].error_code.is_ok(),
                "{request_timeout:?}/{timeout:?}: {written:?}"
            );
        }
        for max_wait in [Duration::MAX, Duration::ZERO] {
            // Records are there: the broker answers at once, whatever it may wait.
            let params = FetchParams::default().max_wait(max_wait);
            let fetched = tokio::time::timeout(TIMEOUT, conn.fetch(&topic, 0, 0, &params))
                .await
                .expect("an answer")
                .unwrap()
                .into_result()
                .unwrap();
            assert!(
                !fetched.records.is_empty(),
                "{request_timeout:?}/{max_wait:?}"
            );
        }
    }
}
