//! The writer's sender tasks: one sender per broker, which turns every ready batch of the
//! partitions that broker leads into ONE Produce request (up to the in-flight limit).
//! Requests run on request tasks of their broker's (one request per task at a time, as many
//! tasks as requests in flight), so a slow broker never holds the others up. A request goes
//! through the phases in order: plan (`State::plan_into`), encode (`encode.rs`), send (here),
//! settle (`settle.rs`); the router task (leaders, the producer id) is `router.rs`'s. Imports
//! the phase files and the lists they pass (`lists.rs`); no phase file imports this one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kafkit_protocol::messages::{ProduceRequest, ProduceResponse};
use kafkit_protocol::{ApiKey, VersionRange};
use tracing::Instrument;

use super::accumulator::{Ending, Plan, ProducerStatus, State};
use super::batch::{Batch, Outcome, PartId};
use super::encode::{build_request, encode_off_runtime, release_request_bytes};
use super::inner::Inner;
use super::lists::{RequestLists, SendError, Verdict};
use super::settle::{apply, judge, keep_lists};
use crate::conn::Conn;
use crate::conn::produce::Acks;
use crate::error::Error;
use crate::error::produce::ProduceError;
use crate::ops::{meter, otel};
use crate::transport::ConnKind;

/// Broker `broker`'s plan at `now` (`State::plan_into`), with its request's batches in kept
/// lists (`None` when there is nothing to send: the lists are kept again).
pub(super) fn plan_request(
    st: &mut State,
    broker: i32,
    now: Instant,
    config: &super::config::Config,
) -> (Plan, Option<RequestLists>) {
    let mut lists = st.request_lists.pop().unwrap_or_default();
    let request = std::mem::take(&mut lists.request);
    let mut plan = st.plan_into(broker, now, config, request);
    lists.request = std::mem::take(&mut plan.request);
    if lists.request.is_empty() {
        keep_lists(st, lists);
        (plan, None)
    } else {
        (plan, Some(lists))
    }
}

/// A request for a request task: the producer id and epoch, the highest Produce version it may
/// go at ([`produce_max`]), and the request's lists.
type Job = ((i64, i16), Option<i16>, RequestLists);

/// The highest Produce version the request in `lists` may go at, with its topics' ids put in
/// `lists.topic_ids` (from the writer's metadata in `st`): v11 for a transactional writer on
/// the classic flow, since a broker reads Produce v12+ in a transaction as KIP-890 part 2's
/// implicit AddPartitionsToTxn (Java's `ProduceRequest.builder` with
/// `useTransactionV1Version`); v12 when a topic's id is not known (v13 names topics by id,
/// KIP-516); `None` (the client's table) otherwise.
fn produce_max(st: &State, lists: Option<&mut RequestLists>) -> Option<i16> {
    let mut max = st
        .txn
        .as_ref()
        .filter(|t| !t.v2)
        .map(|_| super::txn_state::PRODUCE_CLASSIC_MAX);
    let Some(lists) = lists else {
        return max;
    };
    lists.topic_ids.clear();
    for (_, batch) in &lists.request {
        let topic = &batch.shared.topic;
        if lists.topic_ids.iter().any(|(t, _)| **t == **topic) {
            continue;
        }
        let id = st
            .topics
            .get(&**topic)
            .map_or(kafkit_protocol::Uuid::ZERO, |t| t.topic_id);
        if id.is_zero() {
            max = Some(max.map_or(PRODUCE_BY_TOPIC_ID - 1, |m| m.min(PRODUCE_BY_TOPIC_ID - 1)));
        }
        lists.topic_ids.push((topic.clone(), id));
    }
    max
}

/// The first Produce version that names topics by id (KIP-516).
const PRODUCE_BY_TOPIC_ID: i16 = 13;

/// Names the topics of a Produce answer at v13+ (which carries topic ids only) from the request
/// `req` that named both, so the answer is matched to the batches by name.
fn name_answer_topics(req: &ProduceRequest, answer: &mut ProduceResponse) {
    for t in &mut answer.responses {
        if !t.name.is_empty() {
            continue;
        }
        if let Some(sent) = req.topic_data.iter().find(|s| s.topic_id == t.topic_id) {
            t.name.push_str(&sent.name);
        }
    }
}

/// One broker's request tasks: long-lived tasks that each run one request at a time
/// ([`request_task`]), so that a request costs no task of its own (a `tokio::spawn`, one
/// allocation per request). As many run at once as requests are in flight: a request goes to an
/// idle task when there is one, else a new task is started for it. `State::plan_into` keeps the
/// in-flight limit, but a task counts itself idle only after its request's outcome woke the
/// sender, so a few more tasks than the limit may be started (about twice the limit at most);
/// they stay parked until the writer closes.
struct RequestTasks {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
    queue: Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Job>>>,
    /// Tasks waiting for a request, less the requests sent and not yet taken: each request sent
    /// has a task of its own that is free or about to be, so none waits behind another's round
    /// trip (several in flight on one connection, as with a task per request).
    idle: Arc<std::sync::atomic::AtomicUsize>,
}

impl RequestTasks {
    fn new() -> Self {
        let (jobs, queue) = tokio::sync::mpsc::unbounded_channel();
        RequestTasks {
            jobs,
            queue: Arc::new(tokio::sync::Mutex::new(queue)),
            idle: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        }
    }

    /// Hands a request to an idle task, or to a new one when none is idle.
    fn run(&self, inner: &Arc<Inner>, broker: i32, job: Job) {
        use std::sync::atomic::Ordering;
        let taken = self
            .idle
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        if !taken {
            tokio::spawn(request_task(
                inner.clone(),
                broker,
                self.queue.clone(),
                self.idle.clone(),
            ));
        }
        // The receiver lives while any task does, and a task was just counted for this request:
        // sending fails only once every task is gone (the runtime shutting down).
        let _ = self.jobs.send(job);
    }
}

/// A request task: runs the requests it takes from `queue` one after the other until the sender
/// is gone. A request that panics is caught here, after its [`RequestGuard`] gave back what it
/// held, so the task goes on with the next (as a task per request would have ended).
async fn request_task(
    inner: Arc<Inner>,
    broker: i32,
    queue: Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Job>>>,
    idle: Arc<std::sync::atomic::AtomicUsize>,
) {
    loop {
        let job = queue.lock().await.recv().await;
        let Some((producer, max, lists)) = job else {
            return;
        };
        let request = std::pin::pin!(run_request(inner.clone(), broker, producer, max, lists));
        if CatchUnwind(request).await.is_err() {
            tracing::warn!(broker, "produce: a request panicked; its task goes on");
        }
        idle.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Polls a future, catching a panic in it as `Err` (`std::panic::catch_unwind` for one poll at
/// a time). The future is not polled again after it panicked.
struct CatchUnwind<F>(F);

impl<F: std::future::Future + Unpin> std::future::Future for CatchUnwind<F> {
    type Output = Result<F::Output, ()>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let fut = &mut self.0;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            std::pin::Pin::new(fut).poll(cx)
        })) {
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(_) => std::task::Poll::Ready(Err(())),
        }
    }
}

/// One broker's sender: plans, hands requests to its request tasks ([`RequestTasks`]), sleeps
/// until the next linger deadline, retry, expiry or wake-up.
pub(crate) async fn sender_loop(inner: Arc<Inner>, broker: i32) {
    let notify = inner.broker_notify(broker);
    let tasks = RequestTasks::new();
    loop {
        let now = Instant::now();
        let (plan, lists, max) = {
            let mut st = inner.lock();
            if st.shutdown {
                if let Some(b) = st.brokers.get_mut(&broker) {
                    b.has_sender = false;
                }
                return;
            }
            let (plan, mut lists) = plan_request(&mut st, broker, now, &inner.config);
            let max = produce_max(&st, lists.as_mut());
            (plan, lists, max)
        };
        let next_wake = plan.next_wake;
        if plan.wake_router {
            inner.router.notify_one();
        }
        if !plan.done.is_empty() {
            inner.finish(plan.done);
        }
        if let Some(lists) = lists {
            let producer = (plan.producer_id, plan.producer_epoch);
            tasks.run(&inner, broker, (producer, max, lists));
            continue;
        }
        match next_wake {
            Some(t) => {
                tokio::select! {
                    () = notify.notified() => {}
                    () = tokio::time::sleep_until(t.into()) => {}
                }
            }
            None => notify.notified().await,
        }
    }
}

/// Frees what a request task holds if the task ends without applying its outcome (a panic in
/// it, or its runtime shutting down): the broker's in-flight count, its partitions' in-flight
/// marks, and the buffer its batches hold (records and bytes, counted as failed). The batches
/// themselves fail with `Closed` in their own `Drop`. The request may have been written, so,
/// as [`sequence_fate`](super::accumulator::sequence_fate) decides for a maybe-written batch
/// that fails, an idempotent writer needs a new producer epoch. Without it those partitions
/// would stay "in flight" forever, and the buffer space would never come back (a closing
/// writer would wait for it until its deadline).
pub(crate) struct RequestGuard<'a> {
    inner: &'a Inner,
    broker: i32,
    /// Each batch's partition, record count and buffer cost.
    parts: Vec<(PartId, usize, usize)>,
    armed: bool,
}

impl<'a> RequestGuard<'a> {
    pub(crate) fn new(inner: &'a Inner, broker: i32, parts: Vec<(PartId, usize, usize)>) -> Self {
        RequestGuard {
            inner,
            broker,
            parts,
            armed: true,
        }
    }

    /// The outcome is being applied: nothing to undo. Gives back the list of parts (emptied),
    /// to be kept for the next request.
    fn disarm(&mut self) -> Vec<(PartId, usize, usize)> {
        self.armed = false;
        let mut parts = std::mem::take(&mut self.parts);
        parts.clear();
        parts
    }
}

impl Drop for RequestGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        tracing::warn!(
            broker = self.broker,
            "produce: a request task ended without an outcome"
        );
        let (records, cost) = self
            .parts
            .iter()
            .fold((0, 0), |(r, c), &(_, n, cost)| (r + n, c + cost));
        {
            let mut st = self.inner.lock();
            if let Some(b) = st.brokers.get_mut(&self.broker) {
                b.in_flight = b.in_flight.saturating_sub(1);
            }
            for &(id, _, _) in &self.parts {
                if let Some(p) = st.parts.get_mut(id) {
                    p.in_flight = None;
                }
            }
            st.buffered_records = st.buffered_records.saturating_sub(records);
            st.buffered_bytes = st.buffered_bytes.saturating_sub(cost);
            // Its batches fail and may have been written: THE decision says bump.
            let fate = super::accumulator::sequence_fate(Ending::Failed, true);
            if fate == super::accumulator::SequenceFate::Bump {
                if let Some(t) = &mut st.txn {
                    // Through the transaction coordinator, at the abort (KIP-360); the
                    // batches' failure makes the transaction abortable (`Inner::finish`).
                    t.bump_needed = true;
                } else if st.idempotent && matches!(st.producer.status, ProducerStatus::Ready) {
                    st.producer.status = ProducerStatus::Needed;
                }
            }
        }
        self.inner.stats.failed(records as u64);
        self.inner.release(cost, records);
        // The router bumps the epoch, and ends the tasks of a closing writer now idle.
        self.inner.broker_notify(self.broker).notify_one();
        self.inner.router.notify_one();
    }
}

/// Sends one Produce request (`lists.request`'s batches, encoded with `producer`'s id and
/// epoch, at a version no higher than `max`) and applies its outcome; the lists go back to the
/// writer's state for the next request.
async fn run_request(
    inner: Arc<Inner>,
    broker: i32,
    (pid, epoch): (i64, i16),
    max: Option<i16>,
    mut lists: RequestLists,
) {
    let mut parts = std::mem::take(&mut lists.parts);
    parts.extend(lists.request.iter().map(|(id, b)| (*id, b.count(), b.cost)));
    let mut guard = RequestGuard::new(&inner, broker, parts);
    let config = &inner.config;
    // The request may last until the first of its batches' delivery deadlines (and no longer
    // than the request timeout): a record's outcome is due by its delivery timeout.
    let deadline = lists
        .request
        .iter()
        .map(|(_, b)| b.deadline)
        .min()
        .unwrap_or_else(Instant::now);
    // A transactional writer's batches carry the transactional bit (KIP-98): the broker keeps
    // them below the last stable offset until the transaction's marker.
    let transactional = config.transactional_id.is_some();
    if !encode_off_runtime(config.compression, transactional, &mut lists, pid, epoch).await {
        // An encoding task panicked: its batches failed with `Closed` as they dropped; the
        // guard gives back what the request held.
        return;
    }
    let total = build_request(config, &mut lists);
    if !lists.sent.is_empty() {
        count_request(&inner, broker, &lists);
        let span = tracing::debug_span!(
            "produce",
            broker,
            partitions = lists.sent.len(),
            bytes = total,
            acks = config.acks.as_i16()
        );
        let otel_spans = send_spans(&inner, broker, &lists.sent);
        let started = meter::start();
        let mut shutdown = inner.shutdown_rx();
        let mut answer = std::mem::take(&mut lists.answer);
        let result = tokio::select! {
            r = send(&inner, broker, &lists.produce, max, deadline, &mut answer).instrument(span) => r,
            _ = shutdown.wait_for(|s| *s) => Err(SendError {
                error: ProduceError::Closed(
                    "close came while the record's request was in flight; the broker may have it",
                ),
                maybe_written: true,
                retriable: false,
                unroute: false,
            }),
        };
        #[cfg(test)]
        inner.panic_if_asked();
        inner.meter.request_ended(started, || {
            result
                .as_ref()
                .err()
                .map(|e| otel::error_type(e.error.error_code()))
        });
        if let Ok(true) = result {
            inner.stats.kip714.throttled(answer.throttle_time_ms);
        }
        let answered = result.as_ref().map(|&answered| answered.then_some(&answer));
        judge(&inner, broker, answered, &mut lists);
        end_send_spans(otel_spans, &lists.verdicts);
        lists.answer = answer;
    }
    // The request's references to the batches' bytes go before the batches end, so that an
    // ended batch's buffer can be reused (`Batch::into_spare`).
    release_request_bytes(&mut lists.produce);
    lists.parts = guard.disarm();
    apply(&inner, broker, lists);
}

/// Counts a request about to go out: the writer's stats, KIP-714's, and the metrics' produce
/// records and batches per node and topic (cargo feature `metrics`).
pub(super) fn count_request(inner: &Inner, broker: i32, lists: &RequestLists) {
    inner.stats.request(broker, &lists.sizes);
    inner
        .stats
        .kip714
        .sent(lists.sent.iter().map(|(_, b, _)| b.created));
    inner.meter.produce_batches(
        broker,
        lists
            .sent
            .iter()
            .map(|(_, b, _)| (&b.shared.topic, b.count() as u64)),
    );
}

/// The `send {topic}` span of each batch of a request (OpenTelemetry's conventions,
/// `ops/otel.rs`), made before the request goes out; none, and no metadata look-up, when no
/// subscriber is interested in `kafkit::otel`.
fn send_spans(
    inner: &Inner,
    broker: i32,
    sent: &[(PartId, Batch, bytes::Bytes)],
) -> Vec<tracing::Span> {
    if sent.is_empty() || !tracing::enabled!(target: "kafkit::otel", tracing::Level::INFO) {
        return Vec::new();
    }
    let md = inner.transport.cached_metadata();
    let md = md.as_deref();
    let node = md.and_then(|m| m.brokers.iter().find(|b| b.node_id == broker));
    let server = otel::Server {
        address: node.map(|b| b.host.as_str()),
        port: node.map(|b| i64::from(b.port)),
        cluster_id: md.and_then(|m| m.cluster_id.as_deref()),
    };
    sent.iter()
        .map(|(_, b, _)| otel::send_span(&b.shared.topic, b.shared.partition, b.count(), server))
        .collect()
}

/// Ends [`send_spans`]' spans with each batch's verdict: `error.type` on a failed or retried
/// batch (the verdicts come in the order of the batches sent).
fn end_send_spans(spans: Vec<tracing::Span>, verdicts: &[(PartId, Batch, Verdict)]) {
    for (span, (_, _, verdict)) in spans.iter().zip(verdicts) {
        let error = match verdict {
            Verdict::Done(Outcome::Written { .. }) => continue,
            Verdict::Done(Outcome::Failed { error, .. })
            | Verdict::Retry { error, .. }
            | Verdict::Bump(error)
            | Verdict::Split(error) => error,
        };
        otel::record_error(span, error.error_code());
    }
}

/// Dials (pooled) and sends at the highest version both sides speak up to `max`; `Ok(true)`
/// with the answer read into `answer`, `Ok(false)` for acks=0 (no answer). Both steps are bounded: the connection
/// (a dial, maybe a metadata lookup) by the request timeout, and everything by `deadline`
/// (the request's first delivery deadline). Failures are reported to the transport
/// (`note_failure`), and a request that got no answer within the whole request timeout
/// closes its connection as half-open.
async fn send(
    inner: &Inner,
    broker: i32,
    req: &ProduceRequest,
    max: Option<i16>,
    deadline: Instant,
    answer: &mut ProduceResponse,
) -> Result<bool, SendError> {
    let config = &inner.config;
    let wait = Duration::from_millis(config.request_timeout_ms);
    let started = Instant::now();
    let conn = connect(inner, broker, deadline.min(started + wait), started).await?;
    let version = produce_version(&conn, max, config.compression.compression())?;
    let sent_at = Instant::now();
    let io = async {
        if config.acks == Acks::None {
            conn.send_no_answer(req, version, wait)
                .await
                .map(|()| false)
        } else {
            // As `Conn::request_at`, but the body read into the last answer's memory.
            let mut body = conn.request_frame(req, version, wait).await?;
            super::answer::read_answer(&mut body, version, answer)?;
            if version >= PRODUCE_BY_TOPIC_ID {
                name_answer_topics(req, answer);
            }
            Ok(true)
        }
    };
    let request_deadline = deadline.min(Instant::now() + wait);
    match tokio::time::timeout_at(request_deadline.into(), io).await {
        Ok(Ok(r)) => {
            if r {
                inner
                    .stats
                    .kip714
                    .node_latency
                    .record(broker, sent_at.elapsed());
            }
            Ok(r)
        }
        Ok(Err(e)) => {
            inner.transport.note_failure(broker, &e);
            Err(SendError::of_request(e))
        }
        Err(_) => {
            let timed_out = Error::Timeout {
                operation: "Produce",
                timeout: request_deadline.saturating_duration_since(started),
            };
            if request_deadline >= started + wait {
                // A whole request timeout without an answer: the connection is half-open
                // (the broker or the path stopped answering); the next request dials anew.
                conn.close_half_open("Produce", wait);
                inner.transport.note_failure(broker, &timed_out);
            }
            Err(SendError::of_request(timed_out))
        }
    }
}

/// [`send`]'s connection to `broker` (pooled: a dial, maybe a metadata lookup), by
/// `conn_deadline`; a failure is reported to the transport.
#[inline(always)]
async fn connect(
    inner: &Inner,
    broker: i32,
    conn_deadline: Instant,
    started: Instant,
) -> Result<Conn, SendError> {
    match tokio::time::timeout_at(
        conn_deadline.into(),
        inner.transport.conn(broker, ConnKind::Produce),
    )
    .await
    {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => {
            inner.transport.note_failure(broker, &e);
            Err(SendError::not_sent(e))
        }
        Err(_) => Err(SendError::not_sent(Error::Timeout {
            operation: "connect",
            timeout: conn_deadline.saturating_duration_since(started),
        })),
    }
}

/// The Produce version for a request on `conn`: the highest both sides speak up to `max`, and
/// at least the one the writer's batches need (v3+ carries record batch v2; zstd needs v7+,
/// KIP-110).
#[inline(always)]
fn produce_version(
    conn: &Conn,
    max: Option<i16>,
    compression: kafkit_compress::Compression,
) -> Result<i16, SendError> {
    let version = conn
        .version_for::<ProduceRequest>(max)
        .map_err(SendError::not_sent)?;
    // v3+ carries record batch v2; zstd needs v7+ (KIP-110).
    let min = if compression == kafkit_compress::Compression::Zstd {
        7
    } else {
        3
    };
    if version < min {
        return Err(SendError {
            error: Error::UnsupportedVersion {
                api: ApiKey::Produce,
                ours: VersionRange {
                    min,
                    max: crate::ops::versions::client_max_for::<ProduceRequest>(),
                },
                broker: conn.broker_versions().get(ApiKey::Produce),
            }
            .into(),
            maybe_written: false,
            retriable: false,
            unroute: false,
        });
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use crate::{ProduceError, ProducerRecord, Transport, Writer};

    const WAIT: Duration = Duration::from_secs(10);

    /// A Produce v13 answer names topics by id only: each is named from the request's entry
    /// with that id (so `AnswerIndex` finds it by name); an id the request lacks stays unnamed
    /// (its partitions then fail as left out), a named answer (v12 and below) is kept.
    #[test]
    fn a_v13_answer_is_named_from_the_request() {
        use kafkit_protocol::Uuid;
        use kafkit_protocol::messages::produce_request::TopicProduceData;
        use kafkit_protocol::messages::produce_response::TopicProduceResponse;
        let req = super::ProduceRequest::default().with_topic_data(vec![
            TopicProduceData::default()
                .with_name("a".into())
                .with_topic_id(Uuid([1; 16])),
            TopicProduceData::default()
                .with_name("b".into())
                .with_topic_id(Uuid([2; 16])),
        ]);
        let mut answer = super::ProduceResponse::default().with_responses(vec![
            TopicProduceResponse::default().with_topic_id(Uuid([2; 16])),
            TopicProduceResponse::default().with_topic_id(Uuid([9; 16])),
            TopicProduceResponse::default().with_topic_id(Uuid([1; 16])),
            TopicProduceResponse::default().with_name("c".into()),
        ]);
        super::name_answer_topics(&req, &mut answer);
        let names: Vec<&str> = answer.responses.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["b", "", "a", "c"]);
    }

    /// librdkafka's mock cluster of one broker with `topic` of `partitions` partitions, and a
    /// writer on it with `settings`. The cluster is returned to be kept alive (and steered).
    fn mock_writer(
        topic: &str,
        partitions: i32,
        settings: impl FnOnce(crate::writer::WriterBuilder) -> crate::writer::WriterBuilder,
    ) -> (
        rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
        Writer,
    ) {
        let cluster = rdkafka::mocking::MockCluster::new(1).expect("mock cluster");
        cluster.create_topic(topic, partitions, 1).expect("topic");
        let t = Transport::builder(cluster.bootstrap_servers().split(','))
            .build()
            .expect("transport");
        let w = settings(Writer::builder(t)).build().expect("writer");
        (cluster, w)
    }

    /// A request task that panics after sending its request (`RequestGuard`): its record fails
    /// with `Closed`, its partition sends again (it is not left in flight), its buffer space
    /// comes back, and a close ends at once (nothing is counted as buffered).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_task_that_panics_gives_back_its_partition_and_buffer() {
        let (_cluster, w) = mock_writer("guarded", 1, |b| b.linger(Duration::ZERO));
        let rec = |v: &'static str| ProducerRecord::new("guarded", v).partition(0);
        w.produce(rec("warm")).await.expect("warm-up");
        w.inner.panic_requests.store(1, Ordering::SeqCst);
        let lost = tokio::time::timeout(WAIT, w.produce(rec("lost")))
            .await
            .expect("an outcome for the record of the task that panicked");
        assert!(matches!(lost, Err(ProduceError::Closed(_))), "{lost:?}");
        tokio::time::timeout(WAIT, w.produce(rec("after")))
            .await
            .expect("the partition sends again")
            .expect("written");
        {
            let st = w.inner.lock();
            assert_eq!((st.buffered_records, st.buffered_bytes), (0, 0));
        }
        assert_eq!(
            w.inner.bytes.available_permits(),
            w.inner.config.buffer_memory,
            "every buffer byte is back"
        );
        tokio::time::timeout(WAIT, w.close(Duration::from_secs(5)))
            .await
            .expect("close ends")
            .expect("nothing left buffered");
    }

    /// Requests to different partitions of one broker run at once (one request task each, up
    /// to `max_in_flight`): five of them take about one round trip, not two or more.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_of_one_broker_do_not_wait_for_each_other() {
        let (cluster, w) = mock_writer("concurrent", 5, |b| b.linger(Duration::ZERO));
        w.produce(ProducerRecord::new("concurrent", "warm").partition(0))
            .await
            .expect("warm-up");
        // Long enough that the time to send the five and a loaded machine's delays stay well
        // within half a round trip.
        let rtt = Duration::from_secs(2);
        cluster.broker_round_trip_time(1, rtt).expect("rtt");
        let started = std::time::Instant::now();
        let mut futures = Vec::new();
        for p in 0..5 {
            let r = ProducerRecord::new("concurrent", "v").partition(p);
            futures.push(w.send(r).await.expect("send"));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for f in futures {
            tokio::time::timeout(WAIT, f)
                .await
                .expect("answered")
                .expect("written");
        }
        let took = started.elapsed();
        // Serialized, the first request would be answered after a round trip and the four
        // others (in one request then) after a second one.
        assert!(took < rtt * 3 / 2, "five requests took {took:?}");
        cluster
            .broker_round_trip_time(1, Duration::ZERO)
            .expect("rtt");
        w.close(Duration::from_secs(5)).await.expect("close");
    }

    /// Once a writer is closed and dropped, no request task (idle ones included) keeps its
    /// state alive.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_closed_writer_leaves_no_request_task_behind() {
        let (_cluster, w) = mock_writer("leak", 4, |b| b.linger(Duration::ZERO));
        let mut futures = Vec::new();
        for i in 0..200 {
            let r = ProducerRecord::new("leak", "v").partition(i % 4);
            futures.push(w.send(r).await.expect("send"));
        }
        for f in futures {
            tokio::time::timeout(WAIT, f)
                .await
                .expect("answered")
                .expect("written");
        }
        let weak = std::sync::Arc::downgrade(&w.inner);
        w.close(Duration::from_secs(5)).await.expect("close");
        drop(w);
        let gone = async {
            while weak.upgrade().is_some() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(WAIT, gone)
            .await
            .expect("the writer's state is dropped once it is closed and dropped");
    }

    /// The send futures, borrowed forms included, can be spawned (they are `Send`).
    #[allow(dead_code)]
    fn send_futures_are_send(w: &Writer, r: crate::writer::ProducerRecordRef<'_>) {
        fn is_send<T: Send>(_: &T) {}
        is_send(&w.send_ref(r));
        is_send(&w.send_detached_ref(r));
        is_send(&w.send(ProducerRecord::new("t", "v")));
    }

    /// Requests on kept lists (`RequestLists`) under injected Produce errors (retries, leader
    /// refusals): every record is written, in order per partition, and close ends.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn retried_requests_on_kept_lists_write_everything_in_order() {
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
        let (cluster, w) = mock_writer("chaos", 8, |b| {
            b.linger(Duration::from_millis(1))
                .retry_backoff(Duration::from_millis(1))
        });
        w.produce(ProducerRecord::new("chaos", "warm").partition(0))
            .await
            .expect("warm-up");
        let mut errors = Vec::new();
        for i in 0..60 {
            errors.push(match i % 4 {
                0 => RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
                1 => RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
                2 => RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                _ => RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
            });
        }
        cluster.request_errors(RDKafkaApiKey::Produce, &errors);
        let mut futures = Vec::new();
        for i in 0..3_000 {
            let v = format!("{i}");
            let r = ProducerRecord::new("chaos", v).partition(i % 8);
            futures.push((i % 8, w.send(r).await.expect("send")));
            if i % 50 == 0 {
                tokio::task::yield_now().await;
            }
        }
        let mut last = [-1i64; 8];
        for (p, f) in futures {
            let md = tokio::time::timeout(WAIT, f)
                .await
                .expect("an outcome")
                .expect("written");
            let p = usize::try_from(p).expect("partition");
            assert!(
                md.offset > last[p],
                "partition {p}: {} after {}",
                md.offset,
                last[p]
            );
            last[p] = md.offset;
        }
        let stats = w.stats();
        assert!(stats.retries > 0, "{stats:?}");
        tokio::time::timeout(WAIT, w.close(Duration::from_secs(5)))
            .await
            .expect("close ends")
            .expect("closed");
    }
}
