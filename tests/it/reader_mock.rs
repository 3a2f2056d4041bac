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
//! - KIP-320 truncation: a position whose epoch ended earlier on the leader;
//! - buffered memory under `queued_max_bytes` (plus one answer per broker) while the
//!   application does not read, and no Fetch while full; everything delivered once it reads;
//! - two Readers on one Transport: one idle in a 5 s long poll delays neither the other's
//!   records, nor a Writer's produce, nor an admin request;
//! - a KIP-951 `current_leader` hint moves partitions without a Metadata request;
//! - OFFSET_OUT_OF_RANGE below the log start (the mock drops the oldest batches past 5 MiB
//!   per partition): typed, or reset to the log start;
//! - a Fetch failure no retry fixes (an answer over `max_response_size`) is reported once, not
//!   after every retry, and again after the broker has answered in between;
//! - `ReaderStats` counts each fetched record once, as delivered (by `next_batch` or the
//!   `Stream`) or discarded (queued, or the rest of a `Stream` chunk, behind a seek);
//! - what the mock shows of transactions (no markers, the log end as the last stable offset;
//!   transactions are tested in `reader_txn_tansu`).
//!
//! The mock does not implement fetch sessions (it echoes the session id it is sent, so a
//! request for a new session gets 0 back: the Reader then sends full fetches), returns one
//! produced batch per partition per Fetch, and reports the last stable offset as the end
//! offset.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use integration_tests::{mock_cluster, mock_topic_spread, unique_topic, write_batches};
use kafkit::protocol::ApiKey;
use kafkit::{
    AutoOffsetReset, Broker, Error, ProducerRecord, Reader, ReaderError, StartOffset, Transport,
    Writer,
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

/// Writes `per_partition` records `"p:i"` to each partition: one batch per partition, one
/// Produce request per leader (`Conn::write_multi`; the Writer's reads back are in
/// `reader_tansu` and `a_batch_larger_than_every_limit_is_still_read`).
async fn write(bootstrap: &str, topic: &str, partitions: i32, from: usize, per_partition: usize) {
    write_batches(
        bootstrap,
        topic,
        partitions,
        |p| expect_values(p, from..from + per_partition),
        Broker::addr,
    )
    .await;
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
        // Replication factor 1: the mock's own assignment leads partition p from its
        // (p % 3)-th broker (`rd_kafka_mock_partition_assign_replicas`), spread as
        // `mock_topic_spread` does without its 200 `partition_leader` commands (~150 ms each
        // on the mock: 30 s).
        cluster.create_topic(t, 100, 1).expect("topic");
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
    let mut led: BTreeMap<i32, usize> = BTreeMap::new();
    for p in &stats.partitions {
        *led.entry(p.node.expect("a leader")).or_default() += 1;
    }
    assert!(
        led.len() == 3 && led.values().all(|n| (66..=68).contains(n)),
        "leaders spread over the 3 brokers: {led:?}"
    );
    assert_eq!(
        stats.fetch_requests.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    for (node, n) in &stats.fetch_requests {
        // Each broker leads ~67 partitions; one request per round covers them all (kafka-go
        // sends one per partition). One batch per partition was written, and the mock answers
        // one batch per partition per Fetch: a couple of rounds.
        assert!(
            *n <= 6,
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

/// A partition whose leader is missing from the metadata's broker list (librdkafka's mock lists
/// no broker that is down) is looked up again in fresh metadata: once the broker is back, the
/// partition is read within seconds, not after `metadata_max_age` (5 min). Before, every retry
/// read the cached answer that lacked the broker again: the mock soak's partition 3 stayed
/// without a leader (189 failed look-ups) and read nothing for 90 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_missing_from_the_broker_list_is_looked_up_in_fresh_metadata() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("reader-absent-leader");
    // Partition p is led by broker p % 3 + 1: broker 1 leads partition 0.
    mock_topic_spread(&cluster, &topic, 3, 3);
    write(&bootstrap, &topic, 3, 0, 10).await;
    cluster.broker_down(1).expect("down");
    let reader = reader(transport(&bootstrap), AutoOffsetReset::Earliest);
    reader
        .assign((0..3).map(|p| (topic.as_str(), p, StartOffset::Earliest)))
        .expect("assign");
    let mut got = read(&reader, 20).await;
    // Partition 0 has looked for its leader in metadata that lists no broker 1.
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let s = reader.stats();
        let p0 = s
            .partitions
            .iter()
            .find(|p| p.partition == 0)
            .expect("partition 0");
        if p0.fetch_state == kafkit::FetchState::AwaitingLeader && p0.failures >= 2 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{p0:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.broker_up(1).expect("up");
    for (k, v) in read(&reader, 10).await {
        got.entry(k).or_default().extend(v);
    }
    for p in 0..3 {
        assert_eq!(
            got[&(topic.clone(), p)],
            expect_values(p, 0..10),
            "partition {p}"
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

/// Waits until `f` holds, polling every 20 ms (the stats have no event to await), within the
/// guard.
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + GUARD;
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_memory_stays_under_queued_max_bytes_while_the_application_does_not_read() {
    const QUEUED_MAX: u64 = 256 << 10;
    const FETCH_MAX: u64 = 64 << 10;
    const BATCH: usize = 16 << 10;
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("reader-mem");
    mock_topic_spread(&cluster, &topic, 12, 3);
    // 12 partitions x 8 batches of 4 records of 4 KiB: 1.5 MiB, six times the limit.
    let pad = "x".repeat(BATCH / 4 - 16);
    for b in 0..8 {
        write_batches(
            &bootstrap,
            &topic,
            12,
            |p| {
                (b * 4..b * 4 + 4)
                    .map(|i| format!("{p}:{i}:{pad}"))
                    .collect()
            },
            Broker::addr,
        )
        .await;
    }
    let reader = Reader::builder(transport(&bootstrap))
        .queued_max_bytes(QUEUED_MAX as usize)
        .fetch_max_bytes(FETCH_MAX as i32)
        .max_partition_fetch_bytes(32 << 10)
        .fetch_max_wait(Duration::from_millis(100))
        .max_poll_records(100_000)
        .build()
        .expect("reader");
    reader
        .assign((0..12).map(|p| (topic.as_str(), p, StartOffset::Earliest)))
        .expect("assign");
    // The application does not read: fetching fills the buffer, then stops.
    let mut last = (0, std::time::Instant::now());
    until("fetching stops once the buffer is full", || {
        let s = reader.stats();
        if s.fetch_bytes != last.0 {
            last = (s.fetch_bytes, std::time::Instant::now());
        }
        s.fetch_bytes > 0 && last.1.elapsed() > Duration::from_secs(1)
    })
    .await;
    let s = reader.stats();
    // The bound: queued_max_bytes, plus one answer per broker in flight when it was reached
    // (the mock adds a whole batch while under fetch_max_bytes, so an answer is at most
    // fetch_max_bytes plus one batch).
    let bound = QUEUED_MAX + 3 * (FETCH_MAX + BATCH as u64 + 1024);
    eprintln!(
        "buffered {} bytes, fetched {}, bound {bound}: {:?}",
        s.buffered_bytes, s.fetch_bytes, s.fetch_requests
    );
    assert!(
        s.buffered_bytes >= QUEUED_MAX,
        "the buffer filled to the limit"
    );
    assert!(s.buffered_bytes <= bound, "{} buffered", s.buffered_bytes);
    assert_eq!(
        s.fetch_bytes, s.buffered_bytes,
        "everything fetched is held"
    );
    assert_eq!(s.records_delivered, 0);
    let held: u64 = s.partitions.iter().map(|p| p.buffered_bytes).sum();
    assert_eq!(held, s.buffered_bytes, "per-partition bytes add up");
    // Full: no Fetch at all while the application does not read.
    let requests: u64 = s.fetch_requests.values().sum();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        reader.stats().fetch_requests.values().sum::<u64>(),
        requests,
        "no Fetch while the buffer is full"
    );

    // Reading now delivers everything, once, in order.
    let got = read(&reader, 12 * 32).await;
    for p in 0..12 {
        let want: Vec<String> = (0..32).map(|i| format!("{p}:{i}:{pad}")).collect();
        assert_eq!(got[&(topic.clone(), p)], want, "partition {p}");
    }
    let s = reader.stats();
    assert_eq!(s.records_delivered, 12 * 32);
    assert!(
        s.fetch_bytes > QUEUED_MAX * 4,
        "the rest was fetched after reading"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_readers_on_one_transport_do_not_wait_for_each_other() {
    let cluster = mock_cluster(1);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("reader-two");
    cluster.create_topic(&topic, 2, 1).expect("topic");
    let t = transport(&bootstrap);
    // A idles at the end of an empty partition 0; the broker holds each of its Fetches 5 s.
    let idle = Reader::builder(t.clone())
        .fetch_max_wait(Duration::from_secs(5))
        .build()
        .expect("reader");
    idle.assign([(topic.as_str(), 0, StartOffset::At(0))])
        .expect("assign");
    let busy = reader(t.clone(), AutoOffsetReset::Earliest);
    busy.assign([(topic.as_str(), 1, StartOffset::At(0))])
        .expect("assign");
    let writer = Writer::builder(t.clone())
        .linger(Duration::from_millis(1))
        .build()
        .expect("writer");
    let admin = kafkit::Client::new(t.clone());
    until("the idle reader's long poll is out", || {
        idle.stats().fetch_requests.get(&1).copied().unwrap_or(0) >= 1
    })
    .await;
    for i in 0..3i64 {
        // Each step while A's 5 s poll is out: a produce, an admin request, B's record.
        let started = std::time::Instant::now();
        writer
            .produce(ProducerRecord::new(&topic, format!("1:{i}")).partition(1))
            .await
            .expect("produce");
        let produced = started.elapsed();
        let offsets = admin
            .list_offsets(
                &[(&topic, 1, kafkit::OffsetSpec::Latest)],
                kafkit::IsolationLevel::ReadUncommitted,
            )
            .await
            .expect("list offsets");
        let listed = started.elapsed();
        let listed_offset = offsets[0].1.as_ref().expect("offset").offset;
        assert_eq!(listed_offset, i + 1);
        let got = read(&busy, 1).await;
        let read_at = started.elapsed();
        eprintln!("produce {produced:?}, admin {listed:?}, read {read_at:?}");
        assert_eq!(got[&(topic.clone(), 1)], [format!("1:{i}")]);
        assert!(
            read_at < Duration::from_secs(2),
            "nothing waited behind the idle reader's 5 s Fetch: {read_at:?}"
        );
    }
    assert_eq!(idle.stats().records_delivered, 0);
    assert_eq!(
        t.requests_sent(1, ApiKey::Fetch),
        0,
        "no Fetch on pooled connections"
    );
    writer.close(GUARD).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kip951_leader_hint_moves_the_reader_without_metadata() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("reader-hint");
    mock_topic_spread(&cluster, &topic, 3, 3);
    write(&bootstrap, &topic, 3, 0, 10).await;
    let t = transport(&bootstrap);
    let reader = reader(t.clone(), AutoOffsetReset::Earliest);
    reader
        .assign((0..3).map(|p| (topic.as_str(), p, StartOffset::Earliest)))
        .expect("assign");
    let mut got = read(&reader, 30).await;
    let metadata =
        |t: &Transport| -> u64 { (-1..=3).map(|n| t.requests_sent(n, ApiKey::Metadata)).sum() };
    let before = metadata(&t);
    // Every leader moves one broker on: the old leader answers NOT_LEADER_OR_FOLLOWER with
    // the new leader and its epoch (KIP-951 `current_leader`, Fetch v12+ on the mock).
    for p in 0..3 {
        cluster
            .partition_leader(&topic, p, Some((p + 1) % 3 + 1))
            .expect("move");
    }
    write(&bootstrap, &topic, 3, 10, 10).await;
    for (k, v) in read(&reader, 30).await {
        got.entry(k).or_default().extend(v);
    }
    for p in 0..3 {
        assert_eq!(got[&(topic.clone(), p)], expect_values(p, 0..20));
    }
    let s = reader.stats();
    for p in 0..3 {
        assert_eq!(
            s.partitions[p as usize].node,
            Some((p + 1) % 3 + 1),
            "{s:?}"
        );
    }
    assert_eq!(
        metadata(&t) - before,
        0,
        "the hints moved every partition: no Metadata request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offset_out_of_range_below_the_log_start_is_typed_or_reset() {
    let cluster = mock_cluster(1);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("reader-below");
    cluster.create_topic(&topic, 1, 1).expect("topic");
    // The mock keeps at most 5 MiB per partition and drops the oldest batches beyond it
    // (librdkafka `rd_kafka_mock_msgset_new`): 8 batches of ~1 MiB move the log start.
    let pad = "y".repeat(1 << 20);
    for i in 0..8 {
        write_batches(
            &bootstrap,
            &topic,
            1,
            |_| vec![format!("0:{i}:{pad}")],
            Broker::addr,
        )
        .await;
    }
    let strict = reader(transport(&bootstrap), AutoOffsetReset::None);
    strict
        .assign([(topic.as_str(), 0, StartOffset::At(0))])
        .expect("assign");
    let err = tokio::time::timeout(GUARD, strict.next_batch())
        .await
        .expect("guard")
        .expect_err("below the log start");
    let log_start = match err {
        Error::Reader(ReaderError::OffsetOutOfRange {
            offset,
            log_start_offset,
            high_watermark,
            ..
        }) => {
            assert_eq!(offset, 0);
            assert_eq!(high_watermark, 8);
            assert!((1..8).contains(&log_start_offset), "{log_start_offset}");
            log_start_offset
        }
        e => panic!("expected OffsetOutOfRange, got {e:?}"),
    };
    let lenient = Reader::builder(transport(&bootstrap))
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .fetch_max_wait(Duration::from_millis(200))
        .max_poll_records(100_000)
        .build()
        .expect("reader");
    lenient
        .assign([(topic.as_str(), 0, StartOffset::At(0))])
        .expect("assign");
    let n = usize::try_from(8 - log_start).unwrap();
    let got = read(&lenient, n).await;
    let want: Vec<String> = (log_start..8).map(|i| format!("0:{i}:{pad}")).collect();
    assert_eq!(got[&(topic.clone(), 0)], want, "reset to the log start");
}

/// What the mock shows of transactions, so that `reader_txn_tansu` is where they are tested:
/// librdkafka's transactional producer works against it, but its EndTxn writes no marker,
/// its Fetch lists no aborted transaction and reports the log end as the last stable offset,
/// so both isolation levels read every record, an open transaction's too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mock_writes_no_transaction_markers_and_no_last_stable_offset() {
    use rdkafka::producer::Producer;
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("reader-mock-txn");
    cluster.create_topic(&topic, 1, 1).expect("topic");
    let producer = integration_tests::txn_producer(&bootstrap, &unique_topic("mock-txn"));
    let t = rdkafka::util::Timeout::After(GUARD);
    for (v, commit) in [("c0", true), ("a0", false)] {
        producer.begin_transaction().expect("begin");
        integration_tests::peer_send(&producer, &topic, 0, v).await;
        if commit {
            producer.commit_transaction(t).expect("commit");
        } else {
            producer.abort_transaction(t).expect("abort");
        }
    }
    producer.begin_transaction().expect("begin");
    integration_tests::peer_send(&producer, &topic, 0, "o0").await;
    for level in [
        kafkit::IsolationLevel::ReadUncommitted,
        kafkit::IsolationLevel::ReadCommitted,
    ] {
        let r = Reader::builder(transport(&bootstrap))
            .isolation_level(level)
            .fetch_max_wait(Duration::from_millis(200))
            .build()
            .expect("reader");
        r.assign([(topic.as_str(), 0, StartOffset::Earliest)])
            .expect("assign");
        let got = read(&r, 3).await;
        assert_eq!(got[&(topic.clone(), 0)], ["c0", "a0", "o0"], "{level:?}");
        let s = r.stats().partitions.remove(0);
        assert_eq!(
            (s.high_watermark, s.last_stable_offset, s.position),
            (3, 3, Some(3)),
            "no marker took an offset; the LSO is the log end ({level:?})"
        );
    }
    producer.abort_transaction(t).expect("abort");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_failure_no_retry_fixes_is_reported_once_per_change() {
    let cluster = mock_cluster(1);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("reader-fetch-err");
    cluster.create_topic(&topic, 1, 1).expect("topic");
    // Offset 0: a 256 KiB record, whose Fetch answer is over the 64 KiB the dialer takes;
    // offset 1: a small one.
    let big = "z".repeat(256 << 10);
    write_batches(&bootstrap, &topic, 1, |_| vec![big.clone()], Broker::addr).await;
    write(&bootstrap, &topic, 1, 1, 1).await;
    let t = Transport::builder([bootstrap.as_str()])
        .dialer(
            kafkit::Dialer::builder()
                .max_response_size(64 << 10)
                .build(),
        )
        .build()
        .expect("transport");
    let reader = reader(t, AutoOffsetReset::None);
    reader
        .assign([(topic.as_str(), 0, StartOffset::At(0))])
        .expect("assign");
    let fetch_error = |e: Error| match e {
        Error::Reader(ReaderError::Fetch { node, source }) => {
            assert_eq!(node, 1);
            assert!(
                matches!(
                    *source,
                    Error::ConnectionClosed {
                        cause: kafkit::CloseCause::InvalidFrameSize { .. },
                        ..
                    }
                ),
                "{source:?}"
            );
        }
        e => panic!("expected ReaderError::Fetch, got {e:?}"),
    };
    let err = tokio::time::timeout(GUARD, reader.next_batch())
        .await
        .expect("guard")
        .expect_err("the answer is over max_response_size");
    fetch_error(err);
    // The Reader keeps retrying (each retry fails the same way) without reporting it again.
    let errors = reader.stats().fetch_errors;
    tokio::select! {
        got = reader.next_batch() => panic!("reported again: {got:?}"),
        () = until("retries go on", || reader.stats().fetch_errors >= errors + 4) => {}
    }
    // Past the big record the broker answers; back before it, the failure is new: reported.
    reader.seek(&topic, 0, StartOffset::At(1)).expect("seek");
    let got = read(&reader, 1).await;
    assert_eq!(got[&(topic.clone(), 0)], expect_values(0, 1..2));
    reader.seek(&topic, 0, StartOffset::At(0)).expect("seek");
    let err = tokio::time::timeout(GUARD, reader.next_batch())
        .await
        .expect("guard")
        .expect_err("failing again after an answer");
    fetch_error(err);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_each_record_once_as_delivered_or_discarded() {
    let cluster = mock_cluster(1);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("reader-stats");
    cluster.create_topic(&topic, 2, 1).expect("topic");
    write(&bootstrap, &topic, 2, 0, 20).await;
    let mut reader = reader(transport(&bootstrap), AutoOffsetReset::Earliest);
    reader
        .assign((0..2).map(|p| (topic.as_str(), p, StartOffset::Earliest)))
        .expect("assign");
    read(&reader, 40).await;
    let s = reader.stats();
    assert_eq!((s.records_fetched, s.records_delivered), (40, 40));

    // Queued and never handed out: a seek drops them, and they count as discarded.
    write_batches(
        &bootstrap,
        &topic,
        2,
        |p| {
            if p == 0 {
                expect_values(0, 20..40)
            } else {
                vec![]
            }
        },
        Broker::addr,
    )
    .await;
    until("partition 0's new batch is queued", || {
        reader.stats().records_fetched == 60
    })
    .await;
    reader.seek(&topic, 0, StartOffset::At(30)).expect("seek");
    let got = read(&reader, 10).await;
    assert_eq!(got[&(topic.clone(), 0)], expect_values(0, 30..40));
    let s = reader.stats();
    assert_eq!(
        (s.records_fetched, s.records_delivered, s.records_discarded),
        (70, 50, 20),
        "20 queued records dropped by the seek"
    );

    // The Stream takes a whole answer (20 records of partition 1) and yields 5: only those 5
    // count as delivered; the 15 the seek drops count as discarded.
    write_batches(
        &bootstrap,
        &topic,
        2,
        |p| {
            if p == 1 {
                expect_values(1, 20..40)
            } else {
                vec![]
            }
        },
        Broker::addr,
    )
    .await;
    for i in 20..25 {
        let r = stream_next(&mut reader).await;
        assert_eq!((r.partition, r.offset), (1, i));
    }
    reader.seek(&topic, 1, StartOffset::At(35)).expect("seek");
    for i in 35..40 {
        let r = stream_next(&mut reader).await;
        assert_eq!((r.partition, r.offset), (1, i));
    }
    let s = reader.stats();
    assert_eq!(
        (s.records_fetched, s.records_delivered, s.records_discarded),
        (95, 60, 35),
        "{s:?}"
    );
    assert_eq!(s.buffered_bytes, 0);
}

/// The `Stream`'s next record (a failure on an error, the end, or after the guard).
async fn stream_next(reader: &mut Reader) -> kafkit::ConsumerRecord {
    use futures_core::Stream;
    tokio::time::timeout(
        GUARD,
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut *reader).poll_next(cx)),
    )
    .await
    .expect("guard")
    .expect("a record")
    .expect("ok")
}

/// Issue 31 item 23: the leader names a preferred read replica (KIP-392) that metadata does
/// not list (broker 4 of a 3-broker cluster). As Java's fetcher (`selectReadReplica`: a node
/// missing from metadata is not used; the leader is, and metadata is asked for), the Reader
/// keeps fetching from the leader, never dialling a broker it cannot address: no failed
/// Fetch while the leader answers again and again (before, every leader answer sent the
/// partition to broker 4, whose dial failed, and back). Once broker 4 joins and metadata lists
/// it, the Reader fetches from it (the mock's leader returns no records while it names a
/// preferred replica, so every record read came from broker 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preferred_read_replica_missing_from_metadata_is_not_dialled() {
    let mock = integration_tests::GroupMock::new(3);
    let cluster = mock.cluster();
    let bootstrap = mock.bootstrap();
    let topic = unique_topic("reader-unlisted-replica");
    cluster.create_topic(&topic, 1, 3).expect("topic");
    cluster
        .partition_leader(&topic, 0, Some(1))
        .expect("leader");
    write(&bootstrap, &topic, 1, 0, 20).await;
    cluster.partition_follower(&topic, 0, 4).expect("follower");
    let reader = reader(transport(&bootstrap), AutoOffsetReset::Earliest);
    reader
        .assign([(topic.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    let deadline = tokio::time::Instant::now() + GUARD;
    while reader.stats().fetch_requests.get(&1).copied().unwrap_or(0) < 8 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the leader fetched from 8 times within {GUARD:?}: {:?}",
            reader.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stats = reader.stats();
    assert_eq!(
        stats.fetch_errors, 0,
        "no Fetch tried on broker 4, which metadata does not list: {stats:?}"
    );
    assert!(!stats.fetch_requests.contains_key(&4), "{stats:?}");
    assert_eq!(
        stats.partitions[0].node,
        Some(1),
        "fetching from the leader"
    );
    mock.add_broker(4);
    cluster
        .partition_leader(&topic, 0, Some(1))
        .expect("leader");
    let got = read(&reader, 20).await;
    assert_eq!(got[&(topic.clone(), 0)], expect_values(0, 0..20));
    let stats = reader.stats();
    assert!(
        stats.fetch_requests.get(&4).copied().unwrap_or(0) >= 1,
        "{stats:?}"
    );
}
