//! The [`Writer`] under faults injected into librdkafka's mock cluster (3 brokers, ids 1..=3),
//! each run checked by reading the topic back with librdkafka's consumer:
//! - a leader move in the middle of a stream;
//! - NOT_LEADER_OR_FOLLOWER and REQUEST_TIMED_OUT answers to Produce requests;
//! - a broker down for 2 seconds and back, with a delivery timeout longer than the outage (every
//!   record written) and shorter (records of that broker fail with a typed timeout, after it);
//! - `close` with a deadline while the brokers are down.
//!
//! Every record carries `partition:sequence` as its value, numbered per partition in send order.
//! The check (see [`check_log`]): in each partition the sequences read back strictly increase
//! (order kept, no duplicate), every acknowledged record is at the offset its metadata names,
//! every record read back was sent, and a record missing from the log has failed with a typed
//! error (no gap that nobody was told about).
//!
//! The mock cluster is not `Send`: each test keeps it in the test body, which tokio's
//! multi-thread test runtime runs on the test thread (`block_on`); the writer's tasks run on the
//! runtime's workers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use integration_tests::{PeerRecord, mock_cluster, mock_topic_spread, peer_consume, unique_topic};
use kafkit::{
    Acks, DeliveryFuture, ProduceError, ProducerRecord, RecordMetadata, Transport, Writer,
};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

/// Partitions of each test topic, spread over the 3 brokers (partition p led by p % 3 + 1).
const PARTITIONS: i32 = 6;

/// Upper bound for anything a test awaits that should finish much sooner.
const GUARD: Duration = Duration::from_secs(60);

type Mock = MockCluster<'static, DefaultProducerContext>;

/// A transport with short timeouts and backoffs, so faults are retried quickly.
fn transport(bootstrap: &str) -> Transport {
    Transport::builder(bootstrap.split(','))
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(250))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport")
}

/// A writer with the settings the tests share: acks=all, idempotent, 5 ms linger, small
/// batches (so a stream makes many requests) and short request and backoff times (a request
/// timeout of at most 1 s, below the delivery timeout).
fn writer(bootstrap: &str, delivery_timeout_ms: u64) -> Writer {
    Writer::builder(transport(bootstrap))
        .acks(Acks::All)
        .enable_idempotence(true)
        .linger(Duration::from_millis(5))
        .batch_max_records(50)
        .request_timeout(Duration::from_millis(1_000.min(delivery_timeout_ms / 2)))
        .retry_backoff(Duration::from_millis(50))
        .delivery_timeout(Duration::from_millis(delivery_timeout_ms))
        .build()
        .expect("writer")
}

/// One record handed to the writer and what became of it.
#[derive(Debug)]
struct Sent {
    partition: i32,
    seq: u64,
    /// When `send` returned the record's future.
    at: Instant,
    /// The record's outcome and when it came.
    outcome: Option<(Result<RecordMetadata, ProduceError>, Instant)>,
}

/// Sends records and remembers them, numbering them per partition.
struct Stream {
    topic: String,
    next_seq: BTreeMap<i32, u64>,
    sent: Vec<Sent>,
    pending: Vec<(usize, DeliveryFuture)>,
}

impl Stream {
    fn new(topic: &str) -> Stream {
        Stream {
            topic: topic.to_string(),
            next_seq: BTreeMap::new(),
            sent: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Sends `n` records, round-robin over the partitions.
    async fn send(&mut self, w: &Writer, n: usize) {
        for _ in 0..n {
            let partition = i32::try_from(self.sent.len()).unwrap() % PARTITIONS;
            let seq = self.next_seq.entry(partition).or_default();
            let value = Bytes::from(format!("{partition}:{seq}"));
            let record = ProducerRecord::new(&self.topic, value).partition(partition);
            let fut = tokio::time::timeout(GUARD, w.send(record))
                .await
                .expect("send waited past the guard")
                .unwrap_or_else(|e| panic!("send refused record {partition}:{seq}: {e}"));
            self.pending.push((self.sent.len(), fut));
            self.sent.push(Sent {
                partition,
                seq: *seq,
                at: Instant::now(),
                outcome: None,
            });
            *seq += 1;
        }
    }

    /// Waits for the outcome of every record sent so far (each within the guard: a future that
    /// never resolves is a failure, not a hang).
    async fn settle(&mut self) {
        for (i, fut) in std::mem::take(&mut self.pending) {
            let r = tokio::time::timeout(GUARD, fut)
                .await
                .unwrap_or_else(|_| panic!("record {i}'s future did not resolve within {GUARD:?}"));
            self.sent[i].outcome = Some((r, Instant::now()));
        }
    }

    /// Waits for the outcome of the first `n` records only.
    async fn settle_first(&mut self, n: usize) {
        let rest = self.pending.split_off(n.min(self.pending.len()));
        self.settle().await;
        self.pending = rest;
    }

    fn outcomes(&self) -> impl Iterator<Item = (&Sent, &Result<RecordMetadata, ProduceError>)> {
        self.sent.iter().map(|s| {
            let (r, _) = s.outcome.as_ref().expect("every record settled");
            (s, r)
        })
    }

    fn acked(&self) -> usize {
        self.outcomes().filter(|(_, r)| r.is_ok()).count()
    }
}

/// Sum of the topic's end offsets, read with librdkafka.
fn end_offsets(bootstrap: &str, topic: &str) -> i64 {
    let consumer: BaseConsumer = integration_tests::consumer_config(bootstrap)
        .create()
        .expect("peer consumer");
    (0..PARTITIONS)
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(30))
                .unwrap_or_else(|e| panic!("end offset of {topic}/{p}: {e}"))
                .1
        })
        .sum()
}

/// Reads the whole topic back with librdkafka and checks it against what was sent (see the
/// module docs). Returns the number of records in the log.
async fn check_log(bootstrap: &str, stream: &Stream) -> usize {
    let total = usize::try_from(end_offsets(bootstrap, &stream.topic)).unwrap();
    let log = peer_consume(bootstrap, &stream.topic, PARTITIONS, total).await;
    assert_eq!(log.len(), total);
    check_against(stream, &log);
    total
}

fn parse_value(r: &PeerRecord) -> (i32, u64) {
    let v = std::str::from_utf8(r.value.as_deref().expect("a value")).expect("utf-8 value");
    let (p, s) = v.split_once(':').expect("partition:seq");
    (p.parse().expect("partition"), s.parse().expect("seq"))
}

fn check_against(stream: &Stream, log: &[PeerRecord]) {
    // (partition, seq) -> offset in the log.
    let mut found: BTreeMap<(i32, u64), i64> = BTreeMap::new();
    let mut last: BTreeMap<i32, u64> = BTreeMap::new();
    for r in log {
        let (p, seq) = parse_value(r);
        assert_eq!(
            p, r.partition,
            "record {p}:{seq} in partition {}",
            r.partition
        );
        if let Some(prev) = last.insert(p, seq) {
            assert!(
                seq > prev,
                "partition {p}: sequence {seq} at offset {} after {prev} (duplicate or reorder)",
                r.offset
            );
        }
        found.insert((p, seq), r.offset);
    }
    let sent: BTreeMap<(i32, u64), &Sent> = stream
        .sent
        .iter()
        .map(|s| ((s.partition, s.seq), s))
        .collect();
    for key in found.keys() {
        assert!(
            sent.contains_key(key),
            "record {key:?} in the log was never sent"
        );
    }
    // A failed record may or may not be in the log (it may have been written before its answer
    // was lost), but it was reported: no silent gap. An acknowledged one must be where its
    // metadata says.
    for (s, r) in stream.outcomes() {
        let key = (s.partition, s.seq);
        if let Ok(md) = r {
            assert_eq!(
                (&*md.topic, md.partition),
                (stream.topic.as_str(), s.partition),
                "record {key:?} acknowledged for another partition"
            );
            assert_eq!(
                found.get(&key),
                Some(&md.offset),
                "record {key:?} acknowledged at offset {} but the log has it at {:?}",
                md.offset,
                found.get(&key)
            );
        }
    }
}

/// Asserts that every record was acknowledged and the log holds exactly them.
async fn assert_all_written(bootstrap: &str, stream: &Stream) {
    let failed: Vec<_> = stream
        .outcomes()
        .filter_map(|(s, r)| {
            r.as_ref()
                .err()
                .map(|e| (s.partition, s.seq, e.to_string()))
        })
        .take(5)
        .collect();
    assert!(failed.is_empty(), "records failed, e.g. {failed:?}");
    let total = check_log(bootstrap, stream).await;
    assert_eq!(
        total,
        stream.sent.len(),
        "the log holds exactly the records sent"
    );
}

fn mock_with_topic(prefix: &str) -> (Mock, String, String) {
    let cluster = mock_cluster(3);
    let topic = unique_topic(prefix);
    mock_topic_spread(&cluster, &topic, PARTITIONS, 3);
    let bootstrap = cluster.bootstrap_servers();
    (cluster, topic, bootstrap)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_move_mid_stream() {
    let (cluster, topic, bootstrap) = mock_with_topic("wf-leader-move");
    let w = writer(&bootstrap, 20_000);
    let mut stream = Stream::new(&topic);
    stream.send(&w, 1_500).await;
    // Some records are written, the rest are buffered or in flight when leadership moves.
    stream.settle_first(300).await;
    for p in 0..PARTITIONS {
        // Each partition moves to the next broker: p % 3 + 1 -> (p + 1) % 3 + 1.
        cluster
            .partition_leader(&topic, p, Some((p + 1) % 3 + 1))
            .expect("move leader");
    }
    stream.send(&w, 1_500).await;
    stream.settle().await;
    assert_all_written(&bootstrap, &stream).await;
    // The writer met the move (NOT_LEADER_OR_FOLLOWER from the old leaders) and retried the
    // batches there on the new leaders; each record counts once.
    let stats = w.stats();
    assert!(stats.retries > 0, "no batch met the old leader: {stats:?}");
    assert_eq!(stats.records, 3_000);
    w.close(Duration::from_secs(5)).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_leader_and_request_timed_out_on_produce() {
    let (cluster, topic, bootstrap) = mock_with_topic("wf-produce-errors");
    let w = writer(&bootstrap, 20_000);
    let mut stream = Stream::new(&topic);
    // Warm up: metadata, producer id, connections.
    stream.send(&w, 60).await;
    stream.settle().await;
    let retries_before = w.stats().retries;
    // The next Produce requests (on any broker) fail whole, one error per request.
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        ],
    );
    stream.send(&w, 2_000).await;
    stream.settle().await;
    assert_all_written(&bootstrap, &stream).await;
    let stats = w.stats();
    assert!(
        stats.retries > retries_before,
        "the injected errors were retried: {stats:?}"
    );
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// Broker 2 is down for 2 s while records for its partitions are pending. With a delivery
/// timeout longer than the outage every record is written once the broker is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_down_and_back_within_delivery_timeout() {
    let (cluster, topic, bootstrap) = mock_with_topic("wf-broker-down");
    let delivery_timeout = Duration::from_secs(10);
    let w = writer(&bootstrap, delivery_timeout.as_millis() as u64);
    let mut stream = Stream::new(&topic);
    stream.send(&w, 60).await;
    stream.settle().await;

    cluster.broker_down(2).expect("broker down");
    let down_at = Instant::now();
    stream.send(&w, 1_200).await;
    // Let the writer meet the dead broker before it comes back.
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(down_at.elapsed())).await;
    cluster.broker_up(2).expect("broker up");
    stream.send(&w, 600).await;
    stream.settle().await;

    for (s, r) in stream.outcomes() {
        let (_, done) = s.outcome.as_ref().unwrap();
        assert!(
            r.is_ok(),
            "record {}:{} failed although the outage (2 s) is shorter than the delivery timeout: {:?}",
            s.partition,
            s.seq,
            r
        );
        assert!(
            done.duration_since(s.at) <= delivery_timeout + Duration::from_secs(2),
            "record {}:{} acknowledged {:?} after send, past the delivery timeout",
            s.partition,
            s.seq,
            done.duration_since(s.at)
        );
    }
    assert_all_written(&bootstrap, &stream).await;
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// Broker 2 is down for 2 s with a 1 s delivery timeout: records for broker 2's partitions
/// sent during the outage fail with a typed delivery timeout, not before the timeout; records
/// for the other brokers' partitions are written; nothing is left without an outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_down_longer_than_delivery_timeout() {
    let (cluster, topic, bootstrap) = mock_with_topic("wf-broker-down-timeout");
    let delivery_timeout = Duration::from_millis(1_000);
    let w = writer(&bootstrap, delivery_timeout.as_millis() as u64);
    let mut stream = Stream::new(&topic);
    stream.send(&w, 60).await;
    stream.settle().await;

    cluster.broker_down(2).expect("broker down");
    let down_at = Instant::now();
    stream.send(&w, 600).await;
    let sent_while_down = stream.sent.len();
    stream.settle().await;
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(down_at.elapsed())).await;
    cluster.broker_up(2).expect("broker up");
    // After the outage, broker 2's partitions take records again.
    stream.send(&w, 120).await;
    stream.settle().await;

    let mut failed = 0;
    for (i, (s, r)) in stream.outcomes().enumerate() {
        let (_, done) = s.outcome.as_ref().unwrap();
        let on_down_broker = s.partition % 3 + 1 == 2;
        let during = (60..sent_while_down).contains(&i);
        match r {
            Ok(_) => assert!(
                !(on_down_broker && during),
                "record {}:{} for the down broker was acknowledged during the outage",
                s.partition,
                s.seq
            ),
            Err(e) => {
                failed += 1;
                assert!(
                    on_down_broker && during,
                    "record {}:{} failed though its broker was up: {e}",
                    s.partition,
                    s.seq
                );
                assert!(
                    matches!(e, ProduceError::DeliveryTimeout { .. }),
                    "record {}:{}: expected a delivery timeout, got {e:?}",
                    s.partition,
                    s.seq
                );
                // Its batch was made after the outage began (the clock of a batch starts when
                // its first record is sent, which is before `s.at` for later records).
                assert!(
                    done.duration_since(down_at) >= delivery_timeout,
                    "record {}:{} failed {:?} after the outage began, before the delivery timeout",
                    s.partition,
                    s.seq,
                    done.duration_since(down_at)
                );
            }
        }
    }
    assert_eq!(
        failed,
        600 / 3,
        "every record of broker 2's partitions during the outage failed"
    );
    check_log(&bootstrap, &stream).await;
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// `close(1000)` while every broker is down returns by its deadline, and every pending record
/// fails with `ProduceError::Closed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_while_brokers_down_fails_pending_records() {
    let (cluster, topic, bootstrap) = mock_with_topic("wf-close-down");
    let w = writer(&bootstrap, 60_000);
    let mut stream = Stream::new(&topic);
    stream.send(&w, 60).await;
    stream.settle().await;
    assert_eq!(stream.acked(), 60);

    for b in 1..=3 {
        cluster.broker_down(b).expect("broker down");
    }
    stream.send(&w, 300).await;
    let started = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(10), w.close(Duration::from_secs(1)))
        .await
        .expect("close returned within 10 s of a 1 s deadline");
    assert!(
        matches!(closed, Err(ProduceError::Closed(_))),
        "close with records pending: {closed:?}"
    );
    let took = started.elapsed();
    stream.settle().await;
    for (s, r) in stream.outcomes().skip(60) {
        match r {
            Err(ProduceError::Closed(_)) => {}
            other => panic!("record {}:{} after close: {other:?}", s.partition, s.seq),
        }
    }
    let late = w.send(ProducerRecord::new(&topic, Bytes::from_static(b"late")));
    assert!(
        matches!(late.await, Err(ProduceError::Closed(_))),
        "a send after close is refused"
    );
    // Brokers back: the log has the first 60 records, in order, and nothing else unreported.
    for b in 1..=3 {
        cluster.broker_up(b).expect("broker up");
    }
    check_log(&bootstrap, &stream).await;
    eprintln!("close took {took:?}");
}
