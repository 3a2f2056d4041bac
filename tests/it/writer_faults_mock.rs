//! The [`Writer`] under faults injected into librdkafka's mock cluster (3 brokers, ids 1..=3),
//! each run checked by reading the topic back with librdkafka's consumer:
//! - a leader move in the middle of a stream;
//! - NOT_LEADER_OR_FOLLOWER and REQUEST_TIMED_OUT answers to Produce requests;
//! - a broker down for 2 seconds and back, with a delivery timeout longer than the outage (every
//!   record written) and shorter (records of that broker fail with a typed timeout, after it);
//! - `close` with a deadline while the brokers are down;
//! - many senders (issue 35): the leader move, the Produce errors and the broker down for 2 s
//!   (both delivery timeouts) again, with 4 tasks on the runtime's workers that share one
//!   `Writer` and send at the same time, each round-robin over the partitions (see [`Senders`]).
//!
//! Every record carries `task:partition:sequence` as its value, numbered per (task, partition)
//! in that task's send order (a test with one sender is task 0). The check (see [`check_log`]):
//! in each partition the sequences of each task read back strictly increase (order kept, no
//! duplicate), every acknowledged record is at the offset its metadata names, every record read
//! back was sent, and a record missing from the log has failed with a typed error (no gap that
//! nobody was told about); where the fault allows it, every record is written exactly once
//! ([`assert_all_written`]).
//!
//! The mock cluster is not `Send`: each test keeps it in the test body, which tokio's
//! multi-thread test runtime runs on the test thread (`block_on`); the writer's tasks and the
//! sending tasks of the many-senders tests run on the runtime's workers.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
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
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// Partitions of each test topic, spread over the 3 brokers (partition p led by p % 3 + 1).
const PARTITIONS: i32 = 6;

/// Upper bound for anything a test awaits that should finish much sooner.
const GUARD: Duration = Duration::from_secs(60);

/// Sending tasks of a many-senders test.
const TASKS: u32 = 4;

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

/// The partitions broker 2 leads (before any leader move).
fn on_broker_2(partition: i32) -> bool {
    partition % 3 + 1 == 2
}

/// One record handed to the writer and what became of it.
#[derive(Debug)]
struct Sent {
    task: u32,
    partition: i32,
    seq: u64,
    /// When `send` returned the record's future.
    at: Instant,
    /// The record's outcome and when it came.
    outcome: Option<(Result<RecordMetadata, ProduceError>, Instant)>,
}

impl Sent {
    /// What the record's value names: (task, partition, sequence).
    fn key(&self) -> (u32, i32, u64) {
        (self.task, self.partition, self.seq)
    }
}

/// `task:partition:seq`, as in the record's value.
impl fmt::Display for Sent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.task, self.partition, self.seq)
    }
}

/// One task's records: sends them and remembers them, numbering them per partition.
struct Stream {
    topic: String,
    /// The sending task (0 in a test with one sender).
    task: u32,
    next_seq: BTreeMap<i32, u64>,
    sent: Vec<Sent>,
    pending: Vec<(usize, DeliveryFuture)>,
}

impl Stream {
    /// The stream of a test's only sender (task 0).
    fn new(topic: &str) -> Stream {
        Stream::of_task(topic, 0)
    }

    fn of_task(topic: &str, task: u32) -> Stream {
        Stream {
            topic: topic.to_string(),
            task,
            next_seq: BTreeMap::new(),
            sent: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Sends `n` records, round-robin over the partitions.
    async fn send(&mut self, w: &Writer, n: usize) {
        let task = self.task;
        for _ in 0..n {
            let partition = i32::try_from(self.sent.len()).unwrap() % PARTITIONS;
            let seq = self.next_seq.entry(partition).or_default();
            let value = Bytes::from(format!("{task}:{partition}:{seq}"));
            let record = ProducerRecord::new(&self.topic, value).partition(partition);
            let fut = tokio::time::timeout(GUARD, w.send(record))
                .await
                .expect("send waited past the guard")
                .unwrap_or_else(|e| panic!("send refused record {task}:{partition}:{seq}: {e}"));
            self.pending.push((self.sent.len(), fut));
            self.sent.push(Sent {
                task,
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
            let r = tokio::time::timeout(GUARD, fut).await.unwrap_or_else(|_| {
                panic!(
                    "record {}'s future did not resolve within {GUARD:?}",
                    self.sent[i]
                )
            });
            self.sent[i].outcome = Some((r, Instant::now()));
        }
    }

    /// Waits for the outcome of the first `n` records only.
    async fn settle_first(&mut self, n: usize) {
        let rest = self.pending.split_off(n.min(self.pending.len()));
        self.settle().await;
        self.pending = rest;
    }

    /// Waits for the outcome of the pending records that `which` picks; the others stay
    /// pending.
    async fn settle_if(&mut self, which: impl Fn(&Sent) -> bool) {
        let (now, rest) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(i, _)| which(&self.sent[*i]));
        self.pending = now;
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

/// The [`TASKS`] sending tasks of a many-senders test. Each runs on the runtime's workers
/// (`tokio::spawn`, through a `JoinSet`) with a clone of one shared [`Writer`] and its own
/// [`Stream`] (task ids `0..TASKS`), so the tasks send at the same time, each round-robin over
/// the partitions. A task's script stops at its [`Cue::pause`]s; the test body waits until
/// every task has reached the next one ([`Senders::all_paused`]), injects its fault and lets
/// them go on ([`Senders::resume`]). Every wait is bounded by [`GUARD`], and a task that fails
/// fails the test at once with its own panic.
struct Senders {
    tasks: JoinSet<Stream>,
    /// (task, pause) from each task that reached a pause.
    paused: mpsc::UnboundedReceiver<(u32, u32)>,
    /// The last pause the tasks may go past.
    go: watch::Sender<u32>,
    /// The pause the tasks reached last.
    step: u32,
}

/// A sending task's side of its [`Senders`]' pauses.
struct Cue {
    task: u32,
    /// The pauses this task reached.
    step: u32,
    paused: mpsc::UnboundedSender<(u32, u32)>,
    go: watch::Receiver<u32>,
}

impl Cue {
    /// Tells the test body this task reached its next pause, and waits until the body lets the
    /// tasks go on (the records already sent stay buffered or in flight meanwhile).
    async fn pause(&mut self) {
        self.step += 1;
        let step = self.step;
        self.paused
            .send((self.task, step))
            .expect("the test body waits for the tasks");
        tokio::time::timeout(GUARD, self.go.wait_for(|go| *go >= step))
            .await
            .unwrap_or_else(|_| panic!("task {} waited past the guard at pause {step}", self.task))
            .expect("the test body lets the tasks go on");
    }
}

impl Senders {
    /// Starts the tasks: each runs `script` with a clone of `w`, its stream on `topic` and its
    /// cue, and ends with its stream, its records settled.
    fn spawn<F, Fut>(w: &Writer, topic: &str, script: F) -> Senders
    where
        F: Fn(Writer, Stream, Cue) -> Fut,
        Fut: Future<Output = Stream> + Send + 'static,
    {
        let (paused_tx, paused) = mpsc::unbounded_channel();
        let (go, go_rx) = watch::channel(0);
        let mut tasks = JoinSet::new();
        for task in 0..TASKS {
            let cue = Cue {
                task,
                step: 0,
                paused: paused_tx.clone(),
                go: go_rx.clone(),
            };
            tasks.spawn(script(w.clone(), Stream::of_task(topic, task), cue));
        }
        Senders {
            tasks,
            paused,
            go,
            step: 0,
        }
    }

    /// Waits until every task has reached its next pause.
    async fn all_paused(&mut self) {
        self.step += 1;
        let step = self.step;
        let deadline = tokio::time::Instant::now() + GUARD;
        let mut waiting: BTreeSet<u32> = (0..TASKS).collect();
        while !waiting.is_empty() {
            tokio::select! {
                biased;
                Some(ended) = self.tasks.join_next() => {
                    let stream = ended.unwrap_or_else(|e| rethrow(e));
                    panic!("task {} ended before pause {step}", stream.task);
                }
                got = tokio::time::timeout_at(deadline, self.paused.recv()) => {
                    let (task, at) = got
                        .unwrap_or_else(|_| {
                            panic!("tasks {waiting:?} did not reach pause {step} within {GUARD:?}")
                        })
                        .expect("the tasks hold their cues");
                    assert_eq!(at, step, "task {task} at pause {at}, the test at {step}");
                    assert!(waiting.remove(&task), "task {task} reached pause {step} twice");
                }
            }
        }
    }

    /// Lets every task go on past the pause they all reached.
    fn resume(&self) {
        self.go.send_replace(self.step);
    }

    /// Waits for every task to end and returns their streams, by task.
    async fn join(mut self) -> Vec<Stream> {
        let deadline = tokio::time::Instant::now() + GUARD;
        let mut streams = Vec::new();
        while let Some(ended) = tokio::time::timeout_at(deadline, self.tasks.join_next())
            .await
            .unwrap_or_else(|_| panic!("the sending tasks did not end within {GUARD:?}"))
        {
            streams.push(ended.unwrap_or_else(|e| rethrow(e)));
        }
        streams.sort_by_key(|s| s.task);
        assert_eq!(streams.len(), TASKS as usize);
        streams
    }
}

/// Fails with a task's own panic (or says it was cancelled).
fn rethrow(e: tokio::task::JoinError) -> ! {
    match e.try_into_panic() {
        Ok(panic) => std::panic::resume_unwind(panic),
        Err(e) => panic!("a sending task did not finish: {e}"),
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

/// Reads the whole topic back with librdkafka and checks it against what the `streams` (one
/// per sending task, all on one topic) sent (see the module docs). Returns the log.
async fn check_log(bootstrap: &str, streams: &[Stream]) -> Vec<PeerRecord> {
    let topic = &streams[0].topic;
    let total = usize::try_from(end_offsets(bootstrap, topic)).unwrap();
    let log = peer_consume(bootstrap, topic, PARTITIONS, total).await;
    assert_eq!(log.len(), total);
    check_against(streams, &log);
    log
}

/// (task, partition, sequence) from a `task:partition:seq` value.
fn parse_value(r: &PeerRecord) -> (u32, i32, u64) {
    let v = std::str::from_utf8(r.value.as_deref().expect("a value")).expect("utf-8 value");
    let mut parts = v.splitn(3, ':');
    let mut next = |what: &str| {
        parts
            .next()
            .unwrap_or_else(|| panic!("value {v:?} is not task:partition:seq: no {what}"))
    };
    let (t, p, s) = (next("task"), next("partition"), next("seq"));
    (
        t.parse().expect("task"),
        p.parse().expect("partition"),
        s.parse().expect("seq"),
    )
}

fn check_against(streams: &[Stream], log: &[PeerRecord]) {
    let topic = streams[0].topic.as_str();
    let mut sent: BTreeMap<(u32, i32, u64), &Sent> = BTreeMap::new();
    for stream in streams {
        assert_eq!(stream.topic, topic, "one topic for every sender");
        for s in &stream.sent {
            assert!(
                sent.insert(s.key(), s).is_none(),
                "record {s} sent twice (two streams of task {}?)",
                s.task
            );
        }
    }
    // (task, partition, seq) -> offset in the log.
    let mut found: BTreeMap<(u32, i32, u64), i64> = BTreeMap::new();
    // (partition, task) -> the task's last sequence so far in the partition.
    let mut last: BTreeMap<(i32, u32), u64> = BTreeMap::new();
    for r in log {
        let (t, p, seq) = parse_value(r);
        assert_eq!(
            p, r.partition,
            "record {t}:{p}:{seq} in partition {}",
            r.partition
        );
        if let Some(prev) = last.insert((p, t), seq) {
            assert!(
                seq > prev,
                "partition {p}: task {t}'s sequence {seq} at offset {} after its {prev} \
                 (duplicate or reorder)",
                r.offset
            );
        }
        found.insert((t, p, seq), r.offset);
    }
    for &(t, p, seq) in found.keys() {
        assert!(
            sent.contains_key(&(t, p, seq)),
            "record {t}:{p}:{seq} in the log was never sent"
        );
    }
    // A failed record may or may not be in the log (it may have been written before its answer
    // was lost), but it was reported with a typed error: no silent gap. An acknowledged one
    // must be where its metadata says.
    for (s, r) in streams.iter().flat_map(Stream::outcomes) {
        if let Ok(md) = r {
            assert_eq!(
                (&*md.topic, md.partition),
                (topic, s.partition),
                "record {s} acknowledged for another partition"
            );
            assert_eq!(
                found.get(&s.key()),
                Some(&md.offset),
                "record {s} acknowledged at offset {} but the log has it at {:?}",
                md.offset,
                found.get(&s.key())
            );
        }
    }
}

/// Asserts that every record was acknowledged and the log holds exactly them (each once).
/// Returns the log.
async fn assert_all_written(bootstrap: &str, streams: &[Stream]) -> Vec<PeerRecord> {
    let failed: Vec<_> = streams
        .iter()
        .flat_map(Stream::outcomes)
        .filter_map(|(s, r)| r.as_ref().err().map(|e| format!("{s}: {e}")))
        .take(5)
        .collect();
    assert!(failed.is_empty(), "records failed, e.g. {failed:?}");
    let log = check_log(bootstrap, streams).await;
    assert_eq!(
        log.len(),
        streams.iter().map(|s| s.sent.len()).sum::<usize>(),
        "the log holds exactly the records sent"
    );
    log
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
    assert_all_written(&bootstrap, std::slice::from_ref(&stream)).await;
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
    assert_all_written(&bootstrap, std::slice::from_ref(&stream)).await;
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
    assert_all_written(&bootstrap, std::slice::from_ref(&stream)).await;
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
    check_log(&bootstrap, std::slice::from_ref(&stream)).await;
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
    check_log(&bootstrap, std::slice::from_ref(&stream)).await;
    eprintln!("close took {took:?}");
}

/// As [`leader_move_mid_stream`] with [`TASKS`] senders sharing the writer. Each sends 300
/// records and waits for its first 75; the leaders move while the tasks send 225 more (the rest
/// still buffered or in flight); once every task is past that, each sends 225 more, which the
/// writer first sends to the old leaders (its metadata is stale). Every record is written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_move_mid_stream_many_senders() {
    let (cluster, topic, bootstrap) = mock_with_topic("wf-leader-move-many");
    let w = writer(&bootstrap, 20_000);
    let mut senders = Senders::spawn(&w, &topic, |w, mut s, mut cue| async move {
        s.send(&w, 300).await;
        s.settle_first(75).await;
        cue.pause().await;
        s.send(&w, 225).await;
        cue.pause().await;
        s.send(&w, 225).await;
        s.settle().await;
        s
    });
    senders.all_paused().await;
    senders.resume();
    // The tasks send meanwhile, on the runtime's workers.
    for p in 0..PARTITIONS {
        // Each partition moves to the next broker: p % 3 + 1 -> (p + 1) % 3 + 1.
        cluster
            .partition_leader(&topic, p, Some((p + 1) % 3 + 1))
            .expect("move leader");
    }
    senders.all_paused().await;
    senders.resume();
    let streams = senders.join().await;
    let log = assert_all_written(&bootstrap, &streams).await;
    let stats = w.stats();
    assert!(stats.retries > 0, "no batch met the old leader: {stats:?}");
    assert_eq!(stats.records, 3_000);
    eprintln!("{} task switches in the log", task_switches(&log));
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// As [`not_leader_and_request_timed_out_on_produce`] with [`TASKS`] senders sharing the
/// writer: after a warm-up (15 records each), the next 12 Produce requests fail whole with
/// NOT_LEADER_OR_FOLLOWER or REQUEST_TIMED_OUT while every task sends 500 records. Every record
/// is written once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_leader_and_request_timed_out_on_produce_many_senders() {
    let (cluster, topic, bootstrap) = mock_with_topic("wf-produce-errors-many");
    let w = writer(&bootstrap, 20_000);
    let mut senders = Senders::spawn(&w, &topic, |w, mut s, mut cue| async move {
        // Warm up: metadata, producer id, connections.
        s.send(&w, 15).await;
        s.settle().await;
        cue.pause().await;
        s.send(&w, 500).await;
        s.settle().await;
        s
    });
    senders.all_paused().await;
    let retries_before = w.stats().retries;
    // The next Produce requests (on any broker) fail whole, one error per request.
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        ]
        .repeat(6),
    );
    senders.resume();
    let streams = senders.join().await;
    let log = assert_all_written(&bootstrap, &streams).await;
    let stats = w.stats();
    assert!(
        stats.retries > retries_before,
        "the injected errors were retried: {stats:?}"
    );
    eprintln!("{} task switches in the log", task_switches(&log));
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// As [`broker_down_and_back_within_delivery_timeout`] with [`TASKS`] senders sharing the
/// writer. Broker 2 goes down; every task sends 300 records and waits for those of the other
/// brokers' partitions (written meanwhile); broker 2's are then all still buffered. Broker 2
/// comes back 2 s after it went down (the outage's length is the fault itself: nothing to
/// wait for), and every task sends 150 more. With a delivery timeout longer than the outage
/// every record is written once, within the delivery timeout of its send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_down_and_back_within_delivery_timeout_many_senders() {
    let (cluster, topic, bootstrap) = mock_with_topic("wf-broker-down-many");
    let delivery_timeout = Duration::from_secs(10);
    let w = writer(&bootstrap, delivery_timeout.as_millis() as u64);
    let mut senders = Senders::spawn(&w, &topic, |w, mut s, mut cue| async move {
        s.send(&w, 15).await;
        s.settle().await;
        cue.pause().await;
        s.send(&w, 300).await;
        s.settle_if(|s| !on_broker_2(s.partition)).await;
        cue.pause().await;
        s.send(&w, 150).await;
        s.settle().await;
        s
    });
    senders.all_paused().await;
    cluster.broker_down(2).expect("broker down");
    let down_at = tokio::time::Instant::now();
    senders.resume();
    senders.all_paused().await;
    // The writer went on with brokers 1 and 3 and holds broker 2's records: a third of 300 per
    // task.
    let stats = w.stats();
    assert_eq!(
        (stats.buffered_records, stats.errors),
        (u64::from(TASKS) * 100, 0),
        "broker 2's records wait, nothing failed: {stats:?}"
    );
    tokio::time::sleep_until(down_at + Duration::from_secs(2)).await;
    cluster.broker_up(2).expect("broker up");
    senders.resume();
    let streams = senders.join().await;

    for (s, r) in streams.iter().flat_map(Stream::outcomes) {
        let (_, done) = s.outcome.as_ref().unwrap();
        assert!(
            r.is_ok(),
            "record {s} failed although the outage (2 s) is shorter than the delivery timeout: \
             {r:?}"
        );
        assert!(
            done.duration_since(s.at) <= delivery_timeout + Duration::from_secs(2),
            "record {s} acknowledged {:?} after send, past the delivery timeout",
            done.duration_since(s.at)
        );
    }
    let log = assert_all_written(&bootstrap, &streams).await;
    eprintln!("{} task switches in the log", task_switches(&log));
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// As [`broker_down_longer_than_delivery_timeout`] with [`TASKS`] senders sharing the writer,
/// a 1 s delivery timeout and broker 2 down for 2 s: each task sends 300 records during the
/// outage; those of broker 2's partitions (100 a task) fail with a typed delivery timeout, not
/// before the timeout, the others are written; after the outage every task sends 30 more, all
/// written. Nothing is left without an outcome, and the log has no unreported gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_down_longer_than_delivery_timeout_many_senders() {
    const WARM: usize = 15;
    const DURING: usize = 300;
    let (cluster, topic, bootstrap) = mock_with_topic("wf-broker-down-timeout-many");
    let delivery_timeout = Duration::from_millis(1_000);
    let w = writer(&bootstrap, delivery_timeout.as_millis() as u64);
    let mut senders = Senders::spawn(&w, &topic, |w, mut s, mut cue| async move {
        s.send(&w, WARM).await;
        s.settle().await;
        cue.pause().await;
        s.send(&w, DURING).await;
        s.settle().await;
        cue.pause().await;
        s.send(&w, 30).await;
        s.settle().await;
        s
    });
    senders.all_paused().await;
    cluster.broker_down(2).expect("broker down");
    let down_at = Instant::now();
    senders.resume();
    senders.all_paused().await;
    // The outage's length is the fault itself: nothing to wait for.
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(down_at.elapsed())).await;
    cluster.broker_up(2).expect("broker up");
    senders.resume();
    let streams = senders.join().await;

    let mut failed = 0;
    for stream in &streams {
        for (i, (s, r)) in stream.outcomes().enumerate() {
            let (_, done) = s.outcome.as_ref().unwrap();
            let on_down_broker = on_broker_2(s.partition);
            let during = (WARM..WARM + DURING).contains(&i);
            match r {
                Ok(_) => assert!(
                    !(on_down_broker && during),
                    "record {s} for the down broker was acknowledged during the outage"
                ),
                Err(e) => {
                    failed += 1;
                    assert!(
                        on_down_broker && during,
                        "record {s} failed though its broker was up: {e}"
                    );
                    assert!(
                        matches!(e, ProduceError::DeliveryTimeout { .. }),
                        "record {s}: expected a delivery timeout, got {e:?}"
                    );
                    // Its batch was made after the outage began.
                    assert!(
                        done.duration_since(down_at) >= delivery_timeout,
                        "record {s} failed {:?} after the outage began, before the delivery \
                         timeout",
                        done.duration_since(down_at)
                    );
                }
            }
        }
    }
    assert_eq!(
        failed,
        TASKS as usize * DURING / 3,
        "every record of broker 2's partitions during the outage failed"
    );
    let log = check_log(&bootstrap, &streams).await;
    eprintln!("{} task switches in the log", task_switches(&log));
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// How often, in the log, a partition's next record comes from another task than the one
/// before: 0 when the tasks' records are not interleaved.
fn task_switches(log: &[PeerRecord]) -> usize {
    let mut last: BTreeMap<i32, u32> = BTreeMap::new();
    log.iter()
        .filter(|r| {
            let (task, p, _) = parse_value(r);
            last.insert(p, task).is_some_and(|before| before != task)
        })
        .count()
}
