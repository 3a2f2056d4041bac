//! The [`Reader`] against librdkafka's mock cluster (3 brokers, ids 1..=3):
//! - 2 topics x 100 partitions spread over the brokers: everything written is read back, in
//!   order, with a handful of Fetch requests per broker (one request covers every partition a
//!   broker leads), none on the transport's pooled connections, and while idle at the log end
//!   at most one Fetch per broker per `fetch_max_wait`;
//! - a leader move in the middle of a stream (NOT_LEADER_OR_FOLLOWER, KIP-951 hints, leader
//!   epoch validation) and a broker down then up: no record lost or repeated;
//! - OFFSET_OUT_OF_RANGE above the log: a typed error with `auto_offset_reset` none, the log
//!   start with earliest;
//! - pause / resume / seek while fetching, and the version barrier of `unassign` on the
//!   `Stream`;
//! - a preferred read replica (KIP-392: `partition_follower`, `broker_rack`);
//! - a batch larger than every fetch limit (KIP-74) is still read;
//! - KIP-320 truncation: a position whose epoch ended earlier on the leader.
//!
//! The mock does not implement fetch sessions (it echoes the session id it is sent, so a
//! request for a new session gets 0 back: the Reader then sends full fetches), returns one
//! produced batch per partition per Fetch, and reports the last stable offset as the end
//! offset.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use integration_tests::{mock_cluster, mock_topic_spread, unique_topic};
use kafkit::protocol::ApiKey;
use kafkit::{
    AutoOffsetReset, Error, ProducerRecord, Reader, ReaderError, StartOffset, Transport, Writer,
};

/// Upper bound for anything a test awaits that should finish much sooner.
const GUARD: Duration = Duration::from_secs(30);

fn transport(bootstrap: &str) -> Transport {
    Transport::builder(bootstrap.split(','))
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(250))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport")
}

fn reader(t: Transport, reset: AutoOffsetReset) -> Reader {
    Reader::builder(t)
        .fetch_max_wait(Duration::from_millis(200))
        .auto_offset_reset(reset)
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(250))
        .max_poll_records(100_000)
        .build()
        .expect("reader")
}

/// Writes `per_partition` records `"p:i"` to each partition with the Writer.
async fn write(bootstrap: &str, topic: &str, partitions: i32, from: usize, per_partition: usize) {
    let w = Writer::builder(transport(bootstrap))
        .linger(Duration::from_millis(20))
        .build()
        .expect("writer");
    let mut futs = Vec::new();
    for i in from..from + per_partition {
        for p in 0..partitions {
            let r = ProducerRecord::new(topic, format!("{p}:{i}")).partition(p);
            futs.push(w.send(r).await.expect("send"));
        }
    }
    for f in futs {
        f.await.expect("written");
    }
    w.close(GUARD).await.expect("close");
}

/// Reads until `n` records came (or the guard passes: a failure), as (topic, partition) ->
/// values in order.
async fn read(reader: &Reader, n: usize) -> BTreeMap<(String, i32), Vec<String>> {
    let mut got: BTreeMap<(String, i32), Vec<String>> = BTreeMap::new();
    let mut count = 0;
    let deadline = tokio::time::Instant::now() + GUARD;
    while count < n {
        let batch = tokio::time::timeout_at(deadline, reader.next_batch())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{count} of {n} records within {GUARD:?}: {:?}",
                    reader.stats()
                )
            })
            .expect("next_batch");
        for p in batch {
            let e = got.entry((p.topic.to_string(), p.partition)).or_default();
            for r in &p.records {
                e.push(String::from_utf8(r.value.as_deref().unwrap_or_default().to_vec()).unwrap());
                count += 1;
            }
        }
    }
    got
}

fn expect_values(p: i32, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{p}:{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_fetch_per_broker_covers_every_partition_and_idle_does_not_spin() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topics = [unique_topic("reader-a"), unique_topic("reader-b")];
    for t in &topics {
        mock_topic_spread(&cluster, t, 100, 3);
        write(&bootstrap, t, 100, 0, 5).await;
    }
    let t = transport(&bootstrap);
    let reader = reader(t.clone(), AutoOffsetReset::Earliest);
    reader
        .assign(
            topics
                .iter()
                .flat_map(|t| (0..100).map(move |p| (t.as_str(), p, StartOffset::Earliest))),
        )
        .expect("assign");
    let started = std::time::Instant::now();
    let got = read(&reader, 1000).await;
    eprintln!(
        "read 1000 in {:?}: {:?}",
        started.elapsed(),
        reader.stats().fetch_requests
    );
    for t in &topics {
        for p in 0..100 {
            assert_eq!(got[&(t.clone(), p)], expect_values(p, 0..5), "{t}/{p}");
            assert_eq!(reader.position(t, p).expect("position").offset, 5);
            assert_eq!(reader.lag(t, p), Some(0));
        }
    }
    let stats = reader.stats();
    assert_eq!(
        stats.fetch_requests.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    for (node, n) in &stats.fetch_requests {
        // Each broker leads ~67 partitions; one request per round covers them all (kafka-go
        // sends one per partition). The mock answers one produced batch per partition per
        // Fetch, and the Writer may have used more than one batch per partition.
        assert!(
            *n <= 12,
            "broker {node}: {n} Fetch requests for 200 partitions"
        );
        assert_eq!(
            t.requests_sent(*node, ApiKey::Fetch),
            0,
            "no Fetch on the transport's pooled connections"
        );
    }
    assert_eq!(stats.records_fetched, 1000);
    assert_eq!(stats.records_delivered, 1000);

    // Idle at the log end: the brokers hold each Fetch up to fetch_max_wait (200 ms), so two
    // seconds cost at most ~10 requests per broker, never a spin.
    let before = reader.stats().fetch_requests;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = reader.stats().fetch_requests;
    for node in 1..=3 {
        let n = after[&node] - before[&node];
        assert!(
            (1..=13).contains(&n),
            "broker {node}: {n} Fetch requests in 2 s idle"
        );
    }
    reader.close();
    let total: u64 = after.values().sum();
    let counted: u64 = (1..=3).map(|n| t.requests_sent(n, ApiKey::Fetch)).sum();
    assert!(
        counted >= total,
        "closed fetch connections count in the transport"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_moves_and_a_broker_outage_lose_and_repeat_nothing() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("reader-move");
    mock_topic_spread(&cluster, &topic, 6, 3);
    write(&bootstrap, &topic, 6, 0, 20).await;
    let reader = reader(transport(&bootstrap), AutoOffsetReset::Earliest);
    reader
        .assign((0..6).map(|p| (topic.as_str(), p, StartOffset::Earliest)))
        .expect("assign");
    let mut got = read(&reader, 120).await;
    // Every leader moves one broker on (the mock bumps each leader epoch).
    for p in 0..6 {
        cluster
            .partition_leader(&topic, p, Some((p + 1) % 3 + 1))
            .expect("move leader");
    }
    write(&bootstrap, &topic, 6, 20, 20).await;
    for (k, v) in read(&reader, 120).await {
        got.entry(k).or_default().extend(v);
    }
    // Broker 1 goes down and comes back; its partitions' leaders stay on it.
    cluster.broker_down(1).expect("down");
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.broker_up(1).expect("up");
    write(&bootstrap, &topic, 6, 40, 20).await;
    for (k, v) in read(&reader, 120).await {
        got.entry(k).or_default().extend(v);
    }
    for p in 0..6 {
        assert_eq!(
            got[&(topic.clone(), p)],
            expect_values(p, 0..60),
            "partition {p}"
        );
        let pos = reader.position(&topic, p).expect("position");
        assert_eq!(pos.offset, 60);
        assert!(
            pos.leader_epoch.is_some(),
            "records carry their leader epoch"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_out_of_range_is_typed_or_reset() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("reader-oor");
    mock_topic_spread(&cluster, &topic, 2, 2);
    write(&bootstrap, &topic, 2, 0, 10).await;

    let strict = reader(transport(&bootstrap), AutoOffsetReset::None);
    strict
        .assign([
            (topic.as_str(), 0, StartOffset::At(100)),
            (topic.as_str(), 1, StartOffset::Earliest),
        ])
        .expect("assign");
    let mut other = 0;
    let err = loop {
        match tokio::time::timeout(GUARD, strict.next_batch())
            .await
            .expect("guard")
        {
            Ok(parts) => {
                for p in parts {
                    assert_eq!(p.partition, 1, "partition 0 never delivers from 100");
                    other += p.records.len();
                }
            }
            Err(e) => break e,
        }
    };
    match &err {
        Error::Reader(ReaderError::OffsetOutOfRange {
            partition,
            offset,
            high_watermark,
            ..
        }) => {
            assert_eq!((*partition, *offset, *high_watermark), (0, 100, 10));
        }
        e => panic!("expected OffsetOutOfRange, got {e:?}"),
    }
    assert_eq!(
        err.error_code(),
        Some(kafkit::ErrorCode::OFFSET_OUT_OF_RANGE)
    );
    // The other partition kept flowing; a seek restarts the failed one.
    let rest = read(&strict, 10 - other).await;
    assert!(rest.keys().all(|(_, p)| *p == 1));
    strict.seek(&topic, 0, StartOffset::At(3)).expect("seek");
    let got = read(&strict, 7).await;
    assert_eq!(got[&(topic.clone(), 0)], expect_values(0, 3..10));

    let lenient = reader(transport(&bootstrap), AutoOffsetReset::Earliest);
    lenient
        .assign([(topic.as_str(), 0, StartOffset::At(100))])
        .expect("assign");
    let got = read(&lenient, 10).await;
    assert_eq!(
        got[&(topic.clone(), 0)],
        expect_values(0, 0..10),
        "reset to the log start"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_seek_and_the_unassign_barrier() {
    use futures_core::Stream;
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("reader-pause");
    mock_topic_spread(&cluster, &topic, 2, 2);
    write(&bootstrap, &topic, 2, 0, 30).await;
    let reader = reader(transport(&bootstrap), AutoOffsetReset::Earliest);
    reader
        .assign((0..2).map(|p| (topic.as_str(), p, StartOffset::Earliest)))
        .expect("assign");
    reader.pause([(topic.as_str(), 1)]);
    assert_eq!(reader.paused(), vec![(topic.clone(), 1)]);
    let got = read(&reader, 30).await;
    assert_eq!(got.len(), 1, "only the unpaused partition: {got:?}");
    assert_eq!(got[&(topic.clone(), 0)], expect_values(0, 0..30));
    assert!(
        tokio::time::timeout(Duration::from_millis(600), reader.next_batch())
            .await
            .is_err(),
        "nothing while partition 1 is paused"
    );
    reader.resume([(topic.as_str(), 1)]);
    let got = read(&reader, 30).await;
    assert_eq!(got[&(topic.clone(), 1)], expect_values(1, 0..30));

    // Seek back while fetching: what comes next starts at the new position.
    reader.seek(&topic, 0, StartOffset::At(25)).expect("seek");
    let got = read(&reader, 5).await;
    assert_eq!(got[&(topic.clone(), 0)], expect_values(0, 25..30));

    // The Stream: take one record of partition 1, unassign it, and nothing of it comes after.
    let mut reader = reader;
    reader.seek(&topic, 1, StartOffset::Earliest).expect("seek");
    let first = tokio::time::timeout(
        GUARD,
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut reader).poll_next(cx)),
    )
    .await
    .expect("guard")
    .expect("a record")
    .expect("ok");
    assert_eq!((first.partition, first.offset), (1, 0));
    reader.unassign([(topic.as_str(), 1)]);
    assert_eq!(reader.assignment(), vec![(topic.clone(), 0)]);
    let after = tokio::time::timeout(
        Duration::from_millis(800),
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut reader).poll_next(cx)),
    )
    .await;
    assert!(after.is_err(), "no record after unassign: {after:?}");
    assert!(
        reader.stats().records_discarded >= 29,
        "the rest of the batch was dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preferred_read_replica_is_used() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("reader-rack");
    cluster.create_topic(&topic, 1, 3).expect("topic");
    cluster
        .partition_leader(&topic, 0, Some(1))
        .expect("leader");
    for (b, rack) in [(1, "r1"), (2, "r2"), (3, "r3")] {
        cluster.broker_rack(b, rack).expect("rack");
    }
    write(&bootstrap, &topic, 1, 0, 20).await;
    cluster.partition_follower(&topic, 0, 2).expect("follower");
    let reader = Reader::builder(transport(&bootstrap))
        .client_rack("r2")
        .fetch_max_wait(Duration::from_millis(200))
        .build()
        .expect("reader");
    reader
        .assign([(topic.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    let got = read(&reader, 20).await;
    assert_eq!(got[&(topic.clone(), 0)], expect_values(0, 0..20));
    let stats = reader.stats();
    assert!(
        stats.fetch_requests.get(&2).copied().unwrap_or(0) >= 1,
        "{stats:?}"
    );
    assert_eq!(
        stats.partitions[0].node,
        Some(2),
        "fetching from the follower"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_larger_than_every_limit_is_still_read() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("reader-big");
    cluster.create_topic(&topic, 1, 1).expect("topic");
    let w = Writer::builder(transport(&bootstrap))
        .batch_size(4 << 20)
        .build()
        .expect("writer");
    let big = Bytes::from(vec![7u8; 2 << 20]);
    w.produce(ProducerRecord::new(&topic, big.clone()).partition(0))
        .await
        .expect("big record");
    w.produce(ProducerRecord::new(&topic, "small").partition(0))
        .await
        .expect("small record");
    let reader = Reader::builder(transport(&bootstrap))
        .fetch_max_bytes(1024)
        .max_partition_fetch_bytes(1024)
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    reader
        .assign([(topic.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    let mut values = Vec::new();
    while values.len() < 2 {
        for p in tokio::time::timeout(GUARD, reader.next_batch())
            .await
            .expect("no stall on a batch over the limits")
            .expect("batch")
        {
            values.extend(p.records.into_iter().map(|r| r.value.expect("value")));
        }
    }
    assert_eq!(values[0], big);
    assert_eq!(&values[1][..], b"small");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_log_is_detected_from_the_leader_epoch() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("reader-trunc");
    cluster.create_topic(&topic, 1, 3).expect("topic");
    cluster
        .partition_leader(&topic, 0, Some(1))
        .expect("leader");
    write(&bootstrap, &topic, 1, 0, 5).await;
    // Read once to learn the epoch the first records were written in.
    let probe = reader(transport(&bootstrap), AutoOffsetReset::Earliest);
    probe
        .assign([(topic.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    read(&probe, 5).await;
    let epoch = probe
        .position(&topic, 0)
        .and_then(|p| p.leader_epoch)
        .expect("epoch");
    drop(probe);
    // A new leader (epoch + 1) and more records in the new epoch: offsets 5..10.
    cluster.partition_leader(&topic, 0, Some(2)).expect("move");
    write(&bootstrap, &topic, 1, 5, 5).await;
    // A position at offset 8 that claims the old epoch: the leader's log has that epoch only
    // up to offset 5, so 5..8 were lost (what a consumer sees after an unclean election).
    let strict = reader(transport(&bootstrap), AutoOffsetReset::None);
    strict
        .assign([(
            topic.as_str(),
            0,
            StartOffset::AtEpoch {
                offset: 8,
                leader_epoch: epoch,
            },
        )])
        .expect("assign");
    let err = tokio::time::timeout(GUARD, strict.next_batch())
        .await
        .expect("guard")
        .expect_err("truncation");
    match err {
        Error::Reader(ReaderError::LogTruncation {
            offset,
            end_offset,
            diverging_epoch,
            ..
        }) => {
            assert_eq!(offset, 8);
            assert_eq!(end_offset, Some(5));
            assert_eq!(diverging_epoch, Some(epoch));
        }
        e => panic!("expected LogTruncation, got {e:?}"),
    }
    // With a reset policy the reader continues at the diverging offset.
    let lenient = reader(transport(&bootstrap), AutoOffsetReset::Latest);
    lenient
        .assign([(
            topic.as_str(),
            0,
            StartOffset::AtEpoch {
                offset: 8,
                leader_epoch: epoch,
            },
        )])
        .expect("assign");
    let got = read(&lenient, 5).await;
    assert_eq!(got[&(topic.clone(), 0)], expect_values(0, 5..10));
}
