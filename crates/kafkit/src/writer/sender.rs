//! The writer's tasks: one sender per broker, which turns every ready batch of the partitions
//! that broker leads into ONE Produce request (up to the in-flight limit), and one router,
//! which finds partition leaders (metadata) and the producer id (InitProducerId, KIP-98 /
//! KIP-360). Requests run on request tasks of their broker's (one request per task at a time,
//! as many tasks as requests in flight), so a slow broker never holds the others up.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafkit_protocol::messages::{
    InitProducerIdRequest, ProduceRequest, ProduceResponse, produce_request, produce_response,
};
use kafkit_protocol::{ApiKey, ErrorCode, Message, VersionRange};
use tracing::Instrument;

use super::Inner;
use super::accumulator::{Ending, PartId, Plan, ProducerStatus, State, may_have_appended};
use super::batch::{Batch, Outcome};
use crate::conn::produce::Acks;
use crate::error::Error;
use crate::error::produce::ProduceError;
use crate::transport::ConnKind;

/// How one batch of a request ended.
enum Verdict {
    Done(Outcome),
    /// Retriable: send again after the backoff. `unroute`: find the leader again first;
    /// `hint`: the new leader (id, epoch) from the response (KIP-951).
    Retry {
        error: ProduceError,
        unroute: bool,
        hint: Option<(i32, i32)>,
        maybe_written: bool,
    },
    /// A sequence error: new epoch (KIP-360), then send again.
    Bump(ProduceError),
    /// The broker found the batch too large: send it again as two halves.
    Split(ProduceError),
}

/// The lists one Produce request goes through, kept from one request to the next (in
/// `State::request_lists`: taken with the plan, given back once the request's outcome was
/// applied, both under the writer's lock that those steps take anyway), so that in steady state
/// a request allocates none of them: they have grown to the largest request by then. Each is
/// empty between requests; the Produce request keeps its topic entries (names and partition
/// lists, emptied) to fill again.
#[derive(Default)]
pub(crate) struct RequestLists {
    /// The plan's batches (`Plan::request`).
    request: Vec<(PartId, Batch)>,
    /// [`RequestGuard`]'s: each batch's partition, record count and buffer cost.
    parts: Vec<(PartId, usize, usize)>,
    /// The encoded batches with their bytes ([`encode_batches`]).
    sent: Vec<(PartId, Batch, Bytes)>,
    /// One verdict per batch ([`judge`]).
    verdicts: Vec<(PartId, Batch, Verdict)>,
    /// Each sent batch's `(bytes, records)`, for the stats.
    sizes: Vec<(u64, u64)>,
    /// The Produce request ([`build_request`]); between requests its topics' partition lists
    /// are empty (no batch's bytes are held).
    produce: ProduceRequest,
    /// Topic entries of an earlier request that had more topics, kept to be filled again.
    topics: Vec<produce_request::TopicProduceData>,
    /// The answer, read into the last one's memory (`answer::read_answer`).
    answer: ProduceResponse,
    /// [`judge_response`]'s KIP-951 leader hints.
    hints: Vec<(usize, i32, i32)>,
    /// The request's topics with their ids from the writer's metadata ([`produce_max`]).
    topic_ids: Vec<(Arc<str>, kafkit_protocol::Uuid)>,
    /// [`Settling`]'s lists.
    done: Vec<(Batch, Outcome)>,
    held: Vec<PartId>,
    wake_brokers: Vec<i32>,
    stale: Vec<Arc<str>>,
}

impl std::fmt::Debug for RequestLists {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestLists")
            .field("request", &self.request.capacity())
            .field("sent", &self.sent.capacity())
            .field("topics", &self.produce.topic_data.len())
            .finish_non_exhaustive()
    }
}

/// Most request lists kept ([`RequestLists`]): more than the requests a writer has in flight
/// at once (brokers x `max_in_flight`) only after a burst of brokers.
const MAX_REQUEST_LISTS: usize = 64;

/// Keeps `lists` for the next request (emptied; the bound drops the rest).
fn keep_lists(st: &mut State, mut lists: RequestLists) {
    if st.request_lists.len() >= MAX_REQUEST_LISTS {
        return;
    }
    lists.request.clear();
    lists.parts.clear();
    lists.sent.clear();
    lists.verdicts.clear();
    lists.sizes.clear();
    lists.hints.clear();
    lists.topic_ids.clear();
    lists.done.clear();
    lists.held.clear();
    lists.wake_brokers.clear();
    lists.stale.clear();
    st.request_lists.push(lists);
}

/// Broker `broker`'s plan at `now` (`State::plan_into`), with its request's batches in kept
/// lists (`None` when there is nothing to send: the lists are kept again).
fn plan_request(
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
        .map(|_| super::txn::PRODUCE_CLASSIC_MAX);
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
        inner.stats.request(broker, &lists.sizes);
        let span = tracing::debug_span!(
            "produce",
            broker,
            partitions = lists.sent.len(),
            bytes = total,
            acks = config.acks.as_i16()
        );
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
        let answered = result.as_ref().map(|&answered| answered.then_some(&answer));
        judge(&inner, broker, answered, &mut lists);
        lists.answer = answer;
    }
    // The request's references to the batches' bytes go before the batches end, so that an
    // ended batch's buffer can be reused (`Batch::into_spare`).
    release_request_bytes(&mut lists.produce);
    lists.parts = guard.disarm();
    apply(&inner, broker, lists);
}

/// Drops the request's references to its batches' bytes, keeping its topic entries and their
/// lists' memory for the next request.
fn release_request_bytes(produce: &mut ProduceRequest) {
    for t in &mut produce.topic_data {
        t.partition_data.clear();
    }
}

/// Encodes every batch of `lists.request` into `lists.sent` (record batch v2 with the producer
/// fields and, for a transactional writer, the transactional bit; compressed with the writer's
/// codec; a batch encoded by an earlier attempt keeps its bytes). A batch that cannot be
/// encoded gets its verdict at once, in `lists.verdicts`.
fn encode_batches(
    compression: kafkit_compress::CompressionConfig,
    transactional: bool,
    lists: &mut RequestLists,
    pid: i64,
    epoch: i16,
) {
    let RequestLists {
        request,
        sent,
        verdicts,
        ..
    } = lists;
    sent.reserve(request.len());
    for (id, mut batch) in request.drain(..) {
        let seq = batch.sequence.map_or(-1, |(_, s)| s);
        match batch.encode(compression, pid, epoch, seq, transactional) {
            Ok(bytes) => sent.push((id, batch, bytes)),
            Err(e) => {
                let v = Verdict::Done(Outcome::failed(Error::from(e).into()));
                verdicts.push((id, batch, v));
            }
        }
    }
}

/// [`encode_batches`], off the runtime's workers when there is compressing to do: the batches
/// not encoded yet go to tokio's blocking pool in up to one group per core (by size), so one
/// broker's zstd or gzip work can use every core and never holds up the I/O tasks. Without
/// compression (a header and a CRC per batch: the records were encoded when appended) or with
/// nothing left to encode (a retry), on the calling task, with the request's kept lists; the
/// groups are lists of their own (a compressed batch allocates its output anyway). False when
/// an encoding task panicked (its batches dropped, failing their records).
async fn encode_off_runtime(
    compression: kafkit_compress::CompressionConfig,
    transactional: bool,
    lists: &mut RequestLists,
    pid: i64,
    epoch: i16,
) -> bool {
    let to_encode: usize = lists
        .request
        .iter()
        .filter(|(_, b)| b.encoded.is_none())
        .map(|(_, b)| b.size)
        .sum();
    if compression.compression() == kafkit_compress::Compression::None || to_encode == 0 {
        encode_batches(compression, transactional, lists, pid, epoch);
        return true;
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let share = to_encode.div_ceil(cores).max(1);
    let mut groups: Vec<RequestLists> = vec![RequestLists::default()];
    let mut filled = 0usize;
    for (id, batch) in lists.request.drain(..) {
        if filled >= share && groups.len() < cores {
            groups.push(RequestLists::default());
            filled = 0;
        }
        if batch.encoded.is_none() {
            filled += batch.size;
        }
        groups
            .last_mut()
            .expect("one group at least")
            .request
            .push((id, batch));
    }
    let tasks: Vec<_> = groups
        .into_iter()
        .map(|mut g| {
            tokio::task::spawn_blocking(move || {
                encode_batches(compression, transactional, &mut g, pid, epoch);
                g
            })
        })
        .collect();
    for t in tasks {
        let Ok(mut g) = t.await else {
            return false;
        };
        lists.sent.append(&mut g.sent);
        lists.verdicts.append(&mut g.verdicts);
    }
    true
}

/// Fills `lists.produce`, the Produce request carrying the encoded batches `lists.sent`
/// (grouped by topic, in order), and `lists.sizes` with each batch's `(bytes, records)` for the
/// stats; returns the request's record bytes in all. The topic entries of the last request are
/// filled again (their names rewritten only when the topic differs, their partition lists
/// cleared), so in steady state nothing is allocated here.
fn build_request(config: &super::config::Config, lists: &mut RequestLists) -> usize {
    let RequestLists {
        sent,
        sizes,
        produce,
        topics,
        topic_ids,
        ..
    } = lists;
    // Every entry of the last request back to the kept ones, the first topic's last, so that
    // it is the first taken again (most requests carry one topic, the same each time).
    topics.extend(produce.topic_data.drain(..).rev());
    sizes.clear();
    sizes.reserve(sent.len());
    let mut total = 0usize;
    for (i, (_, batch, bytes)) in sent.iter().enumerate() {
        sizes.push((bytes.len() as u64, batch.count() as u64));
        total += bytes.len();
        let p = produce_request::PartitionProduceData::default()
            .with_index(batch.shared.partition)
            .with_records(Some(bytes.clone()));
        let topic = &*batch.shared.topic;
        if let Some(t) = produce
            .topic_data
            .iter_mut()
            .rev()
            .find(|t| t.name == topic)
        {
            t.partition_data.push(p);
            continue;
        }
        let mut t = topics.pop().unwrap_or_default();
        if t.name != topic {
            t.name.clear();
            t.name.push_str(topic);
        }
        // Both the name and the id: the version, chosen with the connection, picks one.
        t.topic_id = topic_ids
            .iter()
            .find(|(n, _)| **n == *topic)
            .map_or(kafkit_protocol::Uuid::ZERO, |(_, id)| *id);
        t.partition_data.clear();
        // The first topic's list has room for every batch left (most requests carry one
        // topic); a later topic's grows as needed, so that many topics do not each reserve
        // the whole request.
        if produce.topic_data.is_empty() {
            t.partition_data.reserve(sent.len() - i);
        }
        t.partition_data.push(p);
        produce.topic_data.push(t);
    }
    if produce.transactional_id != config.transactional_id {
        produce
            .transactional_id
            .clone_from(&config.transactional_id);
    }
    produce.acks = config.acks.as_i16();
    produce.timeout_ms = i32::try_from(config.request_timeout_ms).unwrap_or(i32::MAX);
    total
}

/// A whole-request failure.
struct SendError {
    error: ProduceError,
    maybe_written: bool,
    retriable: bool,
    unroute: bool,
}

impl SendError {
    /// A failure before the request was handed to the connection: nothing was written.
    fn not_sent(e: Error) -> Self {
        SendError {
            retriable: e.is_retriable(),
            unroute: true,
            error: e.into(),
            maybe_written: false,
        }
    }

    /// A failure of the request itself: written, unless the error says it never left
    /// (encoding, size).
    fn of_request(e: Error) -> Self {
        let maybe_written = !matches!(
            e,
            Error::Encode(_) | Error::RequestTooLarge { .. } | Error::UnsupportedVersion { .. }
        );
        SendError {
            retriable: e.is_retriable(),
            unroute: true,
            error: e.into(),
            maybe_written,
        }
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
    let conn_deadline = deadline.min(started + wait);
    let conn = match tokio::time::timeout_at(
        conn_deadline.into(),
        inner.transport.conn(broker, ConnKind::Produce),
    )
    .await
    {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            inner.transport.note_failure(broker, &e);
            return Err(SendError::not_sent(e));
        }
        Err(_) => {
            return Err(SendError::not_sent(Error::Timeout {
                operation: "connect",
                timeout: conn_deadline.saturating_duration_since(started),
            }));
        }
    };
    let version = conn
        .version_for::<ProduceRequest>(max)
        .map_err(SendError::not_sent)?;
    // v3+ carries record batch v2; zstd needs v7+ (KIP-110).
    let min = if config.compression.compression() == kafkit_compress::Compression::Zstd {
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
                    max: crate::conn::versions::client_max_for::<ProduceRequest>(),
                },
                broker: conn.broker_versions().get(ApiKey::Produce),
            }
            .into(),
            maybe_written: false,
            retriable: false,
            unroute: false,
        });
    }
    let io = async {
        if config.acks == Acks::None {
            conn.send(req, version, false, wait).await.map(|_| false)
        } else {
            // As `Conn::request_at`, but the body read into the last answer's memory.
            let frame = conn.send(req, version, true, wait).await?;
            let mut frame = frame.ok_or_else(|| Error::Protocol("missing response".into()))?;
            crate::conn::skip_response_header::<ProduceRequest>(&mut frame, version)?;
            super::answer::read_answer(&mut frame, version, answer)?;
            if version >= PRODUCE_BY_TOPIC_ID {
                name_answer_topics(req, answer);
            }
            Ok(true)
        }
    };
    let request_deadline = deadline.min(Instant::now() + wait);
    match tokio::time::timeout_at(request_deadline.into(), io).await {
        Ok(Ok(r)) => Ok(r),
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

/// Turns the request's result into one verdict per batch (`lists.sent` into `lists.verdicts`):
/// every batch written (acks=0), every batch retried or failed alike (no response:
/// [`judge_failure`]), or each batch by its partition's answer ([`judge_response`]).
fn judge(
    inner: &Inner,
    broker: i32,
    result: Result<Option<&ProduceResponse>, &SendError>,
    lists: &mut RequestLists,
) {
    // One verdict per batch: grown once, not once per doubling.
    lists.verdicts.reserve(lists.sent.len());
    match result {
        Ok(Some(resp)) => judge_response(inner, broker, resp, lists),
        Ok(None) => {
            for (id, batch, _) in lists.sent.drain(..) {
                let v = Verdict::Done(Outcome::Written {
                    base_offset: -1,
                    log_append_time: -1,
                });
                lists.verdicts.push((id, batch, v));
            }
        }
        Err(e) => {
            for (id, mut batch, _) in lists.sent.drain(..) {
                // Whatever the verdict, the batch remembers that the broker may have it.
                batch.maybe_written |= e.maybe_written;
                lists.verdicts.push((id, batch, judge_failure(e)));
            }
        }
    }
}

/// The verdict for each batch of a request that got no response.
fn judge_failure(e: &SendError) -> Verdict {
    if e.retriable {
        Verdict::Retry {
            error: e.error.clone(),
            unroute: e.unroute,
            hint: None,
            maybe_written: e.maybe_written,
        }
    } else {
        Verdict::Done(Outcome::failed(e.error.clone()))
    }
}

/// Honours the response's throttle time and matches each batch of `lists.sent` to its
/// partition's answer ([`judge_partition`]), into `lists.verdicts`; a partition the broker left
/// out fails with `UNKNOWN_SERVER_ERROR`.
fn judge_response(inner: &Inner, broker: i32, resp: &ProduceResponse, lists: &mut RequestLists) {
    if resp.throttle_time_ms > 0 {
        inner.throttle(broker, resp.throttle_time_ms);
    }
    for ep in &resp.node_endpoints {
        tracing::trace!(node = ep.node_id, host = %ep.host, port = ep.port, "produce: leader endpoint hint");
    }
    let RequestLists {
        sent,
        verdicts,
        hints,
        ..
    } = lists;
    hints.clear();
    let mut index = AnswerIndex::new(&resp.responses);
    for (id, batch, _) in sent.drain(..) {
        let answer = index.take(&batch.shared.topic, batch.shared.partition);
        let Some(p) = answer else {
            let error = ProduceError::Broker {
                code: ErrorCode::UNKNOWN_SERVER_ERROR,
                message: Some("the broker did not answer for this partition".into()),
                record_error: None,
            };
            verdicts.push((id, batch, Verdict::Done(Outcome::failed(error))));
            continue;
        };
        let v = judge_partition(inner, &batch, p);
        if let Verdict::Retry {
            hint: Some((leader, epoch)),
            ..
        } = &v
        {
            hints.push((verdicts.len(), *leader, *epoch));
        }
        verdicts.push((id, batch, v));
    }
    apply_leader_hints(inner, &resp.node_endpoints, hints, verdicts);
}

/// Finds each sent batch's partition in a Produce answer. A broker answers in the request's
/// order, so the answer is read in its own order (one cursor per topic, no map); the first
/// partition out of that order turns the rest into a map of the entries not taken yet. Each
/// entry is taken at most once.
struct AnswerIndex<'a> {
    topics: &'a [produce_response::TopicProduceResponse],
    /// Per topic (up to [`AnswerIndex::CURSORS`]), its next partition entry in order.
    cursors: [usize; AnswerIndex::CURSORS],
    /// The topic of the last look-up (a request carries its topics' batches together).
    last: usize,
    /// Once the order broke: (topic's place, partition) -> entry, for what is left.
    map:
        Option<rustc_hash::FxHashMap<(usize, i32), &'a produce_response::PartitionProduceResponse>>,
    /// Once the order broke: each topic name's first place (look-ups stay O(1) however many
    /// topics an answer names).
    places: rustc_hash::FxHashMap<&'a str, usize>,
}

impl<'a> AnswerIndex<'a> {
    /// Topics read in order; an answer with more starts as a map.
    const CURSORS: usize = 8;

    fn new(topics: &'a [produce_response::TopicProduceResponse]) -> Self {
        let mut index = AnswerIndex {
            topics,
            cursors: [0; Self::CURSORS],
            last: 0,
            map: None,
            places: rustc_hash::FxHashMap::default(),
        };
        if topics.len() > Self::CURSORS {
            index.switch_to_map();
        }
        index
    }

    /// The place of `topic` in the answer (its first entry, as a map keeps the first).
    fn topic(&mut self, topic: &str) -> Option<usize> {
        if self.topics.get(self.last).is_some_and(|t| t.name == topic) {
            return Some(self.last);
        }
        let i = if self.map.is_some() {
            *self.places.get(topic)?
        } else {
            // At most `CURSORS` topics.
            self.topics.iter().position(|t| t.name == topic)?
        };
        self.last = i;
        Some(i)
    }

    /// Switches to the map: every entry not taken yet, keyed by its topic's first place.
    fn switch_to_map(&mut self) {
        let mut map = rustc_hash::FxHashMap::default();
        for (i, t) in self.topics.iter().enumerate() {
            let first = *self.places.entry(t.name.as_str()).or_insert(i);
            let from = self.cursors.get(i).copied().unwrap_or(0);
            for p in t.partition_responses.iter().skip(from) {
                map.entry((first, p.index)).or_insert(p);
            }
        }
        self.map = Some(map);
    }

    /// The answer for `partition` of `topic`, once.
    fn take(
        &mut self,
        topic: &str,
        partition: i32,
    ) -> Option<&'a produce_response::PartitionProduceResponse> {
        let t = self.topic(topic)?;
        if self.map.is_none() {
            let topics = self.topics;
            let at = self.cursors[t];
            if let Some(p) = topics[t].partition_responses.get(at)
                && p.index == partition
            {
                self.cursors[t] = at + 1;
                return Some(p);
            }
            self.switch_to_map();
        }
        self.map.as_mut()?.remove(&(t, partition))
    }
}

/// The verdict for `batch` from its partition's answer `p`: written (a duplicate sequence
/// included), an epoch bump (sequence errors, idempotent only), a split (too large, more than
/// one record), a retry (retriable codes; a KIP-951 leader hint goes to the transport's cache
/// first, see [`apply_leader_hint`]), or failed.
fn judge_partition(
    inner: &Inner,
    batch: &Batch,
    p: &produce_response::PartitionProduceResponse,
) -> Verdict {
    let code = p.error_code;
    let error = || ProduceError::Broker {
        code,
        message: p.error_message.clone(),
        record_error: None,
    };
    if code.is_ok() || code == ErrorCode::DUPLICATE_SEQUENCE_NUMBER {
        Verdict::Done(Outcome::Written {
            base_offset: p.base_offset,
            log_append_time: p.log_append_time_ms,
        })
    } else if inner.config.idempotent
        && inner.config.transactional_id.is_none()
        && (code == ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER
            || code == ErrorCode::UNKNOWN_PRODUCER_ID)
    {
        // A transactional producer fails the batch instead: the transaction becomes
        // abortable and its abort bumps the epoch through the coordinator (KIP-360).
        Verdict::Bump(error())
    } else if (code == ErrorCode::MESSAGE_TOO_LARGE || code == ErrorCode::RECORD_LIST_TOO_LARGE)
        && batch.count() > 1
    {
        // Above the topic's max.message.bytes: halve until each record stands alone, so
        // only a record too large by itself fails (as the Java client does).
        Verdict::Split(error())
    } else if code.is_retriable() {
        Verdict::Retry {
            error: error(),
            unroute: code.is_invalid_metadata(),
            hint: (p.current_leader.leader_id >= 0)
                .then_some((p.current_leader.leader_id, p.current_leader.leader_epoch)),
            // Only a code that leaves the append open marks the batch: the others prove the
            // broker refused it before appending (a retry with a new epoch is then safe).
            maybe_written: may_have_appended(code),
        }
    } else {
        Verdict::Done(Outcome::Failed {
            error: error(),
            record_errors: p
                .record_errors
                .iter()
                .map(|r| (r.batch_index, r.batch_index_error_message.clone()))
                .collect(),
        })
    }
}

/// Tells the transport's metadata cache every KIP-951 leader hint of one response at once
/// (`hints`: the verdict's index, leader id and epoch), with the endpoints the response carried:
/// one new cache snapshot per response, not one per partition.
fn apply_leader_hints(
    inner: &Inner,
    endpoints: &[produce_response::NodeEndpoint],
    hints: &[(usize, i32, i32)],
    verdicts: &[(PartId, Batch, Verdict)],
) {
    if hints.is_empty() {
        return;
    }
    let leader_hints: Vec<crate::transport::LeaderHint<'_>> = hints
        .iter()
        .map(|&(i, leader_id, leader_epoch)| {
            let shared = &verdicts[i].1.shared;
            crate::transport::LeaderHint {
                topic: &shared.topic,
                partition: shared.partition,
                leader_id,
                leader_epoch,
            }
        })
        .collect();
    let endpoints: Vec<(i32, &str, i32)> = endpoints
        .iter()
        .map(|e| (e.node_id, e.host.as_str(), e.port))
        .collect();
    let applied = inner.transport.update_leaders(&leader_hints, &endpoints);
    tracing::debug!(
        hints = hints.len(),
        applied,
        "produce: leader hints (KIP-951)"
    );
}

/// Applies `lists.verdicts` under the lock ([`Settling::verdict`]), then ends the finished
/// batches and wakes whoever has work ([`Settling::release`], which keeps the lists for the
/// next request).
fn apply(inner: &Arc<Inner>, broker: i32, mut lists: RequestLists) {
    let mut verdicts = std::mem::take(&mut lists.verdicts);
    let mut settling = Settling::new(inner, broker, verdicts.len(), lists);
    {
        let mut st = inner.lock();
        if let Some(b) = st.brokers.get_mut(&broker) {
            b.in_flight = b.in_flight.saturating_sub(1);
        }
        for (id, batch, verdict) in verdicts.drain(..) {
            settling.verdict(&mut st, id, batch, verdict);
        }
    }
    settling.lists.verdicts = verdicts;
    let lists = &mut settling.lists;
    inner.finish_releasing(&mut lists.done, &lists.held);
    settling.release();
}

/// Applying one request's verdicts: what they decided that is left to do once the writer's
/// lock is released.
struct Settling<'a> {
    inner: &'a Arc<Inner>,
    now: Instant,
    /// The request's lists, of which `done` (batches that ended; their futures resolve after
    /// the lock is released), `held` (the partitions of the batches in `done` ended by a
    /// verdict, not by expiry: they stay "in flight" until their futures resolve, so a `flush`
    /// that starts now waits for them too; [`Inner::finish_releasing`] clears the marks),
    /// `wake_brokers` (senders with work: the request's broker, new leaders) and `stale`
    /// (topics whose metadata was marked stale already: once per response is enough).
    lists: RequestLists,
    /// The router has work: a leader to find, or a producer epoch to bump.
    wake_router: bool,
    /// The broker that answered.
    broker: i32,
}

impl<'a> Settling<'a> {
    /// For the verdicts of `batches` batches, with `lists` (the lists that take one entry per
    /// batch grow once, at their size, and not at all once they have grown).
    fn new(inner: &'a Arc<Inner>, broker: i32, batches: usize, mut lists: RequestLists) -> Self {
        lists.done.clear();
        lists.done.reserve(batches);
        lists.held.clear();
        lists.held.reserve(batches);
        lists.wake_brokers.clear();
        lists.wake_brokers.push(broker);
        lists.stale.clear();
        Settling {
            inner,
            now: Instant::now(),
            lists,
            wake_router: false,
            broker,
        }
    }

    /// Applies one batch's verdict to the state `st`.
    fn verdict(&mut self, st: &mut State, id: PartId, mut batch: Batch, verdict: Verdict) {
        if matches!(verdict, Verdict::Done(_)) {
            self.lists.held.push(id);
        } else {
            st.parts[id].in_flight = None;
        }
        match verdict {
            Verdict::Done(outcome) => {
                let ending = match outcome {
                    Outcome::Written { .. } => Ending::Written,
                    Outcome::Failed { .. } => Ending::Failed,
                };
                self.wake_router |= st.settle_sequence(id, &batch, ending);
                self.lists.done.push((batch, outcome));
            }
            Verdict::Retry {
                error,
                unroute,
                hint,
                maybe_written,
            } => {
                self.inner.stats.retried();
                batch.maybe_written |= maybe_written;
                self.wake_router |= st.settle_sequence(id, &batch, Ending::Resend);
                self.retry(st, id, batch, error, hint, unroute);
            }
            Verdict::Split(error) => self.split(st, id, batch, &error),
            Verdict::Bump(error) => self.bump(st, id, batch, error),
        }
    }

    /// A retriable failure: to the leader the response named when the writer knows that broker
    /// (KIP-951; no backoff needed), else back to the router when the leader must be found
    /// again (`unroute`), and back in its partition's queue.
    fn retry(
        &mut self,
        st: &mut State,
        id: PartId,
        batch: Batch,
        error: ProduceError,
        hint: Option<(i32, i32)>,
        unroute: bool,
    ) {
        let inner = self.inner;
        tracing::debug!(
            topic = %batch.shared.topic,
            partition = batch.shared.partition,
            %error,
            "produce: retrying batch"
        );
        let known = hint.filter(|(leader, _)| {
            st.brokers.contains_key(leader)
                || inner
                    .transport
                    .cached_metadata()
                    .is_some_and(|m| m.broker(*leader).is_some())
        });
        if let Some((leader, _)) = known {
            if st.set_leader(id, leader) {
                inner.spawn_sender(st, leader);
            }
            self.lists.wake_brokers.push(leader);
        } else if unroute {
            // Only this batch's topic is looked up again (once per response).
            if !self.lists.stale.contains(&batch.shared.topic) {
                inner.transport.invalidate_topics([&*batch.shared.topic]);
                self.lists.stale.push(batch.shared.topic.clone());
            }
            st.set_leader(id, -1);
            self.wake_router = true;
        }
        self.wake_router |= st.requeue(
            id,
            batch,
            error,
            self.now,
            &inner.config,
            &mut self.lists.done,
        );
        if known.is_some_and(|(leader, _)| leader != self.broker) {
            // The response named a new leader (KIP-951): no backoff needed. A hint naming the
            // broker that just refused the batch keeps the backoff (as Java's, which skips it
            // only when the leader changed): retried at once it would refuse again, in a loop.
            st.parts[id].retry_at = None;
        }
    }

    /// The broker found the batch too large: its two halves go back to the head of the queue.
    fn split(&mut self, st: &mut State, id: PartId, mut batch: Batch, error: &ProduceError) {
        self.inner.stats.retried();
        tracing::debug!(
            topic = %batch.shared.topic,
            partition = batch.shared.partition,
            records = batch.count(),
            %error,
            "produce: splitting a batch the broker found too large"
        );
        // (A split's sequences fare as a failure's: the same whether or not it splits.)
        self.wake_router |= st.settle_sequence(id, &batch, Ending::Split);
        let (first, second) = match batch.split() {
            Ok(halves) => halves,
            Err(e) => {
                // Its own records section did not decode again (not expected): the batch ends
                // with the error rather than being sent as it is again.
                tracing::error!(error = %e, "produce: a batch to split could not be split");
                st.ending.push(batch.shared.clone());
                self.lists
                    .done
                    .push((batch, Outcome::failed(Error::from(e).into())));
                return;
            }
        };
        let part = &mut st.parts[id];
        part.batches.push_front(second);
        part.batches.push_front(first);
        st.relist(id);
    }

    /// A sequence error: the router bumps the producer epoch (KIP-360) unless an earlier
    /// error of this generation did already, and the batch goes back in its queue.
    fn bump(&mut self, st: &mut State, id: PartId, batch: Batch, error: ProduceError) {
        if st.settle_sequence(id, &batch, Ending::SequenceError) {
            tracing::info!(%error, "produce: sequence error; bumping the producer epoch (KIP-360)");
            self.wake_router = true;
        }
        self.inner.stats.retried();
        let config = &self.inner.config;
        self.wake_router |= st.requeue(id, batch, error, self.now, config, &mut self.lists.done);
    }

    /// After the ended batches' futures resolved and their partitions were freed
    /// ([`Inner::finish_releasing`]): the router and senders with work are woken, and the lists
    /// are kept for the next request.
    fn release(mut self) {
        let lists = &mut self.lists;
        {
            let st = self.inner.lock();
            if matches!(st.producer.status, ProducerStatus::Needed) {
                // A bump may be waiting for this request to be over.
                self.wake_router = true;
            }
            for &id in &lists.held {
                let leader = st.parts[id].leader;
                if leader >= 0 && !lists.wake_brokers.contains(&leader) {
                    lists.wake_brokers.push(leader);
                }
            }
        }
        if self.wake_router {
            self.inner.router.notify_one();
        }
        for &b in &lists.wake_brokers {
            self.inner.broker_notify(b).notify_one();
        }
        // Not in the lock above: the senders are woken after it is released.
        let lists = std::mem::take(&mut self.lists);
        keep_lists(&mut self.inner.lock(), lists);
    }
}

/// The router: leaders for unrouted partitions, the producer id, expiry of batches nobody
/// can send, and shutting down once a closing writer has nothing left.
pub(crate) async fn router_loop(inner: Arc<Inner>) {
    let backoff = Duration::from_millis(inner.config.retry_backoff_ms.max(1));
    let mut last_refresh = Instant::now();
    loop {
        let (needs_id, topics, shutdown, first_deadline) = {
            let st = inner.lock();
            let mut topics: Vec<Arc<str>> = Vec::new();
            let mut first_deadline: Option<Instant> = None;
            for &id in &st.unrouted {
                let t = &st.parts[id].topic;
                if let Some(f) = st.parts[id].batches.front() {
                    first_deadline = Some(first_deadline.map_or(f.deadline, |d| d.min(f.deadline)));
                    if !topics.iter().any(|x| x == t) {
                        topics.push(t.clone());
                    }
                }
            }
            // A bump waits until no batch is in flight (as the Java client does); the first id
            // has nothing in flight to wait for.
            // A transactional writer gets its id from `init_transactions` (and a new epoch
            // from its coordinator when a transaction aborts), never here.
            let needs_id = matches!(st.producer.status, ProducerStatus::Needed)
                && st.txn.is_none()
                && st.buffered_records > 0
                && (st.producer.id < 0 || !st.any_in_flight());
            (needs_id, topics, st.shutdown, first_deadline)
        };
        if shutdown {
            return;
        }
        // Batches nobody can send end first, before any round trip below can delay them.
        let expired = {
            let mut st = inner.lock();
            let ids = st.unrouted.clone();
            let mut plan = Plan::default();
            st.expire(&ids, Instant::now(), &inner.config, &mut plan);
            plan.done
        };
        inner.finish(expired);
        let mut next_wake: Option<Instant> = None;
        // Bounded by the first unrouted batch's deadline too, so that batch expires on time.
        let mut id_bound = Duration::from_millis(inner.config.request_timeout_ms);
        if let Some(d) = first_deadline {
            id_bound = id_bound.min(d.saturating_duration_since(Instant::now()));
        }
        if needs_id
            && !tokio::time::timeout(
                id_bound.max(Duration::from_millis(1)),
                init_producer_id(&inner),
            )
            .await
            .unwrap_or(false)
        {
            next_wake = Some(Instant::now() + backoff);
        }
        // A transaction's partitions with their first records: one AddPartitionsToTxn.
        if inner
            .add_partitions(Duration::from_millis(inner.config.request_timeout_ms))
            .await
        {
            next_wake = Some(next_wake.map_or(Instant::now() + backoff, |w| {
                w.min(Instant::now() + backoff)
            }));
        }
        if !topics.is_empty() {
            // Never past the first unrouted batch's deadline, so it expires on time.
            let mut bound = Duration::from_millis(inner.config.request_timeout_ms);
            if let Some(d) = first_deadline {
                bound = bound.min(d.saturating_duration_since(Instant::now()));
            }
            route(&inner, &topics, bound.max(Duration::from_millis(1)), false).await;
        }
        // Now and then, whether routed or not: partitions added to the topics, and leaders
        // that moved without an error telling (the transport refetches after
        // metadata_max_age_ms).
        if last_refresh.elapsed() >= METADATA_REFRESH {
            last_refresh = Instant::now();
            let known: Vec<Arc<str>> = inner.lock().topics.keys().cloned().collect();
            if !known.is_empty() {
                let bound = Duration::from_millis(inner.config.request_timeout_ms);
                route(&inner, &known, bound, true).await;
            }
        }
        let now = Instant::now();
        let (done, stop) = {
            let mut st = inner.lock();
            let ids = st.unrouted.clone();
            let mut plan = Plan::default();
            st.expire(&ids, now, &inner.config, &mut plan);
            for &id in &st.unrouted {
                if let Some(f) = st.parts[id].batches.front() {
                    next_wake = Some(next_wake.map_or(f.deadline, |w| w.min(f.deadline)));
                    next_wake = Some(next_wake.map_or(now + backoff, |w| w.min(now + backoff)));
                }
            }
            let stop = st.closing && st.buffered_records == 0 && plan.done.is_empty();
            if stop {
                st.shutdown = true;
            }
            (plan.done, stop)
        };
        inner.finish(done);
        if stop {
            inner.stop_tasks();
            return;
        }
        let refresh_at = last_refresh + METADATA_REFRESH;
        let t = next_wake.map_or(refresh_at, |w| w.min(refresh_at));
        tokio::select! {
            () = inner.router.notified() => {}
            () = tokio::time::sleep_until(t.into()) => {}
        }
    }
}

/// How often the router re-reads the metadata of the writer's topics.
const METADATA_REFRESH: Duration = Duration::from_secs(30);

/// Finds leaders for the unrouted partitions of `topics` from metadata (at most `bound` spent
/// on it); with `every_partition`, also moves routed partitions whose leader changed, and
/// learns partitions added to the topics.
async fn route(inner: &Arc<Inner>, topics: &[Arc<str>], bound: Duration, every_partition: bool) {
    let names: Vec<&str> = topics.iter().map(|t| &**t).collect();
    // Bounded, so the router still expires batches when no broker answers.
    let md = match tokio::time::timeout(bound, inner.transport.metadata_for(&names)).await {
        Ok(Ok(md)) => md,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "writer: metadata refresh failed");
            return;
        }
        Err(_) => {
            tracing::debug!("writer: metadata refresh timed out");
            return;
        }
    };
    let mut wake = Vec::new();
    {
        let mut st = inner.lock();
        for t in &md.topics {
            if st.topics.contains_key(t.name.as_str()) {
                st.set_topic_metadata(t, &md);
            }
        }
        let leader_of = |p: &crate::PartitionMetadata| {
            Some(p.leader_id).filter(|l| *l >= 0 && md.broker(*l).is_some())
        };
        // The moves, found in one pass over the answer's partitions (every partition) or over
        // the unrouted ones, each looked up by index: O(partitions), never partitions x topics.
        let mut moves: Vec<(PartId, i32)> = Vec::new();
        if every_partition {
            for t in &md.topics {
                let Some(known) = st.topics.get(t.name.as_str()) else {
                    continue;
                };
                for p in &t.partitions {
                    let id = usize::try_from(p.partition)
                        .ok()
                        .and_then(|i| known.ids.get(i).copied().flatten());
                    if let (Some(id), Some(leader)) = (id, leader_of(p))
                        && st.parts[id].leader != leader
                    {
                        moves.push((id, leader));
                    }
                }
            }
        } else {
            let by_name: HashMap<&str, &crate::TopicMetadata> =
                md.topics.iter().map(|t| (t.name.as_str(), &**t)).collect();
            for &id in &st.unrouted {
                let part = &st.parts[id];
                let Some(t) = by_name.get(&*part.topic) else {
                    continue;
                };
                let p = usize::try_from(part.partition)
                    .ok()
                    .and_then(|i| t.partitions.get(i))
                    .filter(|p| p.partition == part.partition)
                    .or_else(|| t.partitions.iter().find(|p| p.partition == part.partition));
                if let Some(leader) = p.and_then(leader_of) {
                    moves.push((id, leader));
                }
            }
        }
        for (id, leader) in moves {
            if st.set_leader(id, leader) {
                inner.spawn_sender(&mut st, leader);
            }
            wake.push(leader);
        }
        let mut stale: Vec<&str> = Vec::new();
        for &id in &st.unrouted {
            let topic = &*st.parts[id].topic;
            if !st.parts[id].batches.is_empty() && !stale.contains(&topic) {
                stale.push(topic);
            }
        }
        // Some leaders are still unknown (or not among the listed brokers, as when a broker is
        // down): the next attempt, after the backoff, asks again for those topics.
        inner.transport.invalidate_topics(stale);
    }
    wake.sort_unstable();
    wake.dedup();
    for b in wake {
        inner.broker_notify(b).notify_one();
    }
}

/// Gets a producer id, or a new epoch for the current one (KIP-360, InitProducerId v3+ with
/// the current id and epoch; older brokers hand out a new id). Returns false to try again
/// after the backoff.
async fn init_producer_id(inner: &Arc<Inner>) -> bool {
    let (id, epoch, bump_failed) = {
        let st = inner.lock();
        (st.producer.id, st.producer.epoch, st.producer.bump_failed)
    };
    // A bump (KIP-360) first when there is an id; when the broker refuses it (it may not know
    // the id any more, not allow bumps of idempotent ids, or predate InitProducerId v3), a new
    // id at once; when the bump fails otherwise (no answer: a broker that cannot bump may
    // never answer one), a new id at the next attempt. Either way every partition's sequence
    // restarts at 0, so a new id is always safe; a bump only keeps the id.
    let bump = id >= 0 && !bump_failed;
    let mut result = if bump {
        // Marked before the attempt, so that a bump cut by the router's bound counts too
        // (`new_producer` clears it).
        inner.lock().producer.bump_failed = true;
        ask_producer_id(inner, id, epoch).await
    } else {
        ask_producer_id(inner, -1, -1).await
    };
    if bump && let Err(e) = &result {
        if e.is_retriable() {
            tracing::info!(error = %e, "writer: epoch bump failed; the next attempt asks for a new producer id");
        } else {
            tracing::info!(error = %e, "writer: epoch bump refused; asking for a new producer id");
            result = ask_producer_id(inner, -1, -1).await;
        }
    }
    match result {
        Ok((id, epoch)) => {
            tracing::debug!(
                producer_id = id,
                producer_epoch = epoch,
                "writer: producer id"
            );
            let brokers: Vec<i32> = {
                let mut st = inner.lock();
                st.new_producer(id, epoch);
                st.brokers.keys().copied().collect()
            };
            for b in brokers {
                inner.broker_notify(b).notify_one();
            }
            true
        }
        Err(e) if e.is_retriable() => {
            tracing::debug!(error = %e, "writer: InitProducerId failed; retrying");
            false
        }
        Err(e) if !inner.config.idempotence_explicit && cannot_be_idempotent(&e) => {
            // Idempotence was only the default: go on without it (as the Java client does when
            // the cluster does not allow it), rather than failing every record.
            tracing::warn!(error = %e, "writer: no producer id; writing without idempotence");
            let brokers: Vec<i32> = {
                let mut st = inner.lock();
                st.idempotent = false;
                st.producer.status = ProducerStatus::Ready;
                st.brokers.keys().copied().collect()
            };
            for b in brokers {
                inner.broker_notify(b).notify_one();
            }
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "writer: InitProducerId failed for good");
            let brokers: Vec<i32> = {
                let mut st = inner.lock();
                st.producer.status = ProducerStatus::Failed(e.into());
                st.brokers.keys().copied().collect()
            };
            for b in brokers {
                inner.broker_notify(b).notify_one();
            }
            inner.router.notify_one();
            true
        }
    }
}

/// Whether an InitProducerId failure means this cluster (or this principal) cannot have an
/// idempotent producer: the API is missing, or `IdempotentWrite` is not allowed.
fn cannot_be_idempotent(e: &Error) -> bool {
    matches!(e, Error::UnsupportedVersion { .. })
        || e.error_code().is_some_and(|c| {
            c == ErrorCode::CLUSTER_AUTHORIZATION_FAILED
                || c == ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        })
}

/// One InitProducerId for an idempotent producer (no transactional id), to any broker through
/// the transport (which fails over and retries until `request_timeout_ms`). `id`/`epoch` -1
/// ask for a new id; others bump that id's epoch (v3+: brokers below v3 cannot take them,
/// which is a non-retriable encode error).
async fn ask_producer_id(inner: &Inner, id: i64, epoch: i16) -> Result<(i64, i16), Error> {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(i32::MAX)
        .with_producer_id(id)
        .with_producer_epoch(epoch);
    let resp = inner
        .transport
        .round_trip_within(req, Duration::from_millis(inner.config.request_timeout_ms))
        .await?;
    let code = resp.error_code;
    if !code.is_ok() {
        return Err(Error::broker("InitProducerId", code, None));
    }
    Ok((resp.producer_id, resp.producer_epoch))
}

/// What [`encode_path`] did.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EncodePathStats {
    /// Records appended and acknowledged.
    pub records: u64,
    /// Produce requests built and encoded.
    pub requests: u64,
    /// Bytes of encoded Produce request bodies.
    pub request_bytes: u64,
}

/// Not part of the API (the benches' instruction counts, docs/benchmarks.md): runs the Writer's
/// CPU path for `records` records without a network or a runtime. Each record goes through
/// `try_send`'s steps (prepare, buffer permits, enqueue: the partition's batch), record `i` to
/// partition `i % partitions`, the partitions led by brokers `0..brokers` in turn. After every
/// `round` records each broker's plan is taken as its sender would once the linger passed:
/// the batches encoded (compressed), the Produce request built and encoded (version 9, as
/// `Conn` would frame it), then an answer (every partition written, made here, not decoded)
/// judged and applied, which resolves the futures and runs the `on_completion` callback.
/// `builder` gives the settings (its transport is never used); its default topic is set.
/// `futures`: each record's [`DeliveryFuture`](super::DeliveryFuture) is made and dropped
/// (`send`, `try_send`), else none is (`send_detached`).
///
/// # Errors
///
/// A record or setting the writer refuses, or a request that cannot be encoded.
#[doc(hidden)]
pub fn encode_path(
    builder: super::WriterBuilder,
    (partitions, brokers): (i32, i32),
    records: u64,
    round: u64,
    value: Bytes,
    futures: bool,
) -> Result<EncodePathStats, ProduceError> {
    let (partitions, brokers) = (partitions.max(1), brokers.max(1));
    let (_writer, inner) = offline_writer(builder, partitions, brokers)?;
    let mut stats = EncodePathStats::default();
    let mut kept = EncodeRoundLists::default();
    let round = round.max(1);
    for i in 0..records {
        let p = i32::try_from(i % partitions as u64).unwrap_or(0);
        let prepared = inner.prepare(
            super::ProducerRecordRef::to_default_topic(&value).partition(p),
            futures,
        )?;
        if inner.try_acquire(prepared.cost).is_err() {
            encode_round(&inner, brokers, &mut kept, &mut stats)?;
            inner.try_acquire(prepared.cost)?;
        }
        drop(inner.enqueue(&prepared, false).into_result(&prepared)?);
        if (i + 1) % round == 0 {
            encode_round(&inner, brokers, &mut kept, &mut stats)?;
        }
    }
    inner.lock().seal_all();
    encode_round(&inner, brokers, &mut kept, &mut stats)?;
    stats.records = inner.stats.snapshot(0, 0).records;
    Ok(stats)
}

/// [`encode_path`]'s writer: `builder`'s, with its default topic set to one of `partitions`
/// partitions, partition `p` led by broker `p % brokers`, and no tasks (the caller plays the
/// senders' part). The [`Writer`](super::Writer) is returned to be kept alive.
fn offline_writer(
    builder: super::WriterBuilder,
    partitions: i32,
    brokers: i32,
) -> Result<(super::Writer, Arc<Inner>), ProduceError> {
    const TOPIC: &str = "encode-path";
    let builder = builder.topic(TOPIC);
    let transport = builder.transport_ref().clone();
    let config = builder
        .validate()
        .map_err(|e| ProduceError::InvalidRecord(format!("the settings are refused: {e}")))?;
    let writer = super::Writer::start(transport, config);
    let inner = writer.inner.clone();
    {
        let mut st = inner.lock();
        st.set_partition_count(TOPIC, usize::try_from(partitions).unwrap_or(1));
        for p in 0..partitions {
            let id = st
                .part_id(TOPIC, p)
                .expect("the partition was just counted");
            st.set_leader(id, p % brokers);
        }
        // No sender tasks: the caller plays their part.
        for b in st.brokers.values_mut() {
            b.has_sender = true;
        }
    }
    Ok((writer, inner))
}

/// What [`encode_path`] keeps from one request to the next, as `Conn` and a broker would: the
/// request frame, its splice list, and the answer.
#[derive(Default)]
struct EncodeRoundLists {
    frame: bytes::BytesMut,
    splices: Vec<kafkit_protocol::splice::Splice>,
    answer: ProduceResponse,
}

/// One round of [`encode_path`]: every broker's requests until none has a batch left.
fn encode_round(
    inner: &Arc<Inner>,
    brokers: i32,
    kept: &mut EncodeRoundLists,
    stats: &mut EncodePathStats,
) -> Result<(), ProduceError> {
    let config = &inner.config;
    for broker in 0..brokers {
        loop {
            // As the sender would plan once the batches lingered.
            let at = Instant::now() + Duration::from_millis(config.linger_ms + 1);
            let (plan, lists) = plan_request(&mut inner.lock(), broker, at, config);
            inner.finish(plan.done);
            let Some(mut lists) = lists else {
                break;
            };
            encode_batches(
                config.compression,
                config.transactional_id.is_some(),
                &mut lists,
                plan.producer_id,
                plan.producer_epoch,
            );
            build_request(config, &mut lists);
            inner.stats.request(broker, &lists.sizes);
            kept.frame.clear();
            // As `Conn` encodes a request: the batches stay out of the frame (vectored writes).
            let splices = std::mem::take(&mut kept.splices);
            let (encoded, splices) = kafkit_protocol::splice::collect_into(
                crate::conn::core::SPLICE_MIN,
                splices,
                || lists.produce.encode(&mut kept.frame, 9),
            );
            kept.splices = splices;
            encoded.map_err(|e| ProduceError::from(Error::from(e)))?;
            stats.requests += 1;
            stats.request_bytes += (kept.frame.len()
                + kept.splices.iter().map(|s| s.data.len()).sum::<usize>())
                as u64;
            // Written by now, as `Conn` would have: the batches' bytes are not held past here,
            // so the ended batches' buffers can be reused (`Batch::into_spare`).
            kept.splices.clear();
            answer_every_partition(&lists.produce, &mut kept.answer);
            release_request_bytes(&mut lists.produce);
            judge(inner, broker, Ok(Some(&kept.answer)), &mut lists);
            apply(inner, broker, lists);
        }
    }
    Ok(())
}

/// Fills `answer` with a written entry (base offset 0) for every partition of `produce`, in
/// its order, reusing the entries of the last answer.
fn answer_every_partition(produce: &ProduceRequest, answer: &mut ProduceResponse) {
    answer.responses.truncate(produce.topic_data.len());
    for (i, t) in produce.topic_data.iter().enumerate() {
        if i == answer.responses.len() {
            answer.responses.push(Default::default());
        }
        let r = &mut answer.responses[i];
        if r.name != t.name {
            r.name.clone_from(&t.name);
        }
        r.partition_responses.clear();
        r.partition_responses
            .extend(t.partition_data.iter().map(|p| {
                produce_response::PartitionProduceResponse::default()
                    .with_index(p.index)
                    .with_base_offset(0)
            }));
    }
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
        use super::produce_request::TopicProduceData;
        use super::produce_response::TopicProduceResponse;
        use kafkit_protocol::Uuid;
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

    /// An answer of `topics`, each with its partitions' entries (base offset = 100 x
    /// partition + the topic's place, to tell entries apart).
    fn answer(topics: &[(&str, &[i32])]) -> Vec<super::produce_response::TopicProduceResponse> {
        use super::produce_response::{PartitionProduceResponse, TopicProduceResponse};
        topics
            .iter()
            .enumerate()
            .map(|(i, (name, parts))| {
                TopicProduceResponse::default()
                    .with_name((*name).to_string())
                    .with_partition_responses(
                        parts
                            .iter()
                            .map(|&p| {
                                PartitionProduceResponse::default()
                                    .with_index(p)
                                    .with_base_offset(i64::from(p) * 100 + i as i64)
                            })
                            .collect(),
                    )
            })
            .collect()
    }

    #[test]
    fn answers_are_found_in_order_out_of_order_and_only_once() {
        let resp = answer(&[("a", &[0, 1, 2]), ("b", &[5, 6]), ("a", &[9])]);
        let offset = |p: Option<&super::produce_response::PartitionProduceResponse>| {
            p.map(|p| p.base_offset)
        };
        // In the answer's order: every entry, then nothing more.
        let mut ix = super::AnswerIndex::new(&resp);
        for (t, p, want) in [
            ("a", 0, 0),
            ("a", 1, 100),
            ("a", 2, 200),
            ("b", 5, 501),
            ("b", 6, 601),
        ] {
            assert_eq!(offset(ix.take(t, p)), Some(want), "{t}/{p}");
        }
        assert!(ix.map.is_none(), "read in order, no map");
        // A repeated topic name: its later entries are found too (under its first place).
        assert_eq!(offset(ix.take("a", 9)), Some(902));
        assert_eq!(offset(ix.take("a", 0)), None, "taken once");
        assert_eq!(offset(ix.take("c", 0)), None, "a topic not in the answer");

        // Out of order: what the cursors passed is not found again; the rest is.
        let mut ix = super::AnswerIndex::new(&resp);
        assert_eq!(offset(ix.take("a", 0)), Some(0));
        assert_eq!(offset(ix.take("b", 6)), Some(601));
        assert!(ix.map.is_some());
        assert_eq!(offset(ix.take("a", 0)), None, "taken before the map");
        for (t, p, want) in [("a", 2, 200), ("b", 5, 501), ("a", 1, 100), ("a", 9, 902)] {
            assert_eq!(offset(ix.take(t, p)), Some(want), "{t}/{p}");
        }
        assert_eq!(offset(ix.take("b", 6)), None, "taken once");
        assert_eq!(
            offset(ix.take("a", 3)),
            None,
            "a partition not in the answer"
        );

        // More topics than cursors: a map from the start, every entry found once.
        let names: Vec<String> = (0..20).map(|i| format!("t{i}")).collect();
        let many: Vec<(&str, &[i32])> = names.iter().map(|n| (n.as_str(), &[3][..])).collect();
        let resp = answer(&many);
        let mut ix = super::AnswerIndex::new(&resp);
        assert!(ix.map.is_some());
        for (i, n) in names.iter().enumerate().rev() {
            assert_eq!(offset(ix.take(n, 3)), Some(300 + i as i64), "{n}");
            assert_eq!(offset(ix.take(n, 3)), None, "{n} once");
        }
    }

    /// An offline writer of one partition led by broker 0 (`offline_writer`), with a
    /// completion callback (so its batches keep timestamps too).
    fn offline() -> (Writer, std::sync::Arc<super::Inner>) {
        let t = Transport::builder(["127.0.0.1:1"])
            .build()
            .expect("transport");
        let b = Writer::builder(t)
            .acks(crate::Acks::Leader)
            .enable_idempotence(false)
            .on_completion(|_, _| {});
        super::offline_writer(b, 1, 1).expect("offline writer")
    }

    /// Appends `n` records to the partition as `try_send` does; their futures.
    fn append(inner: &std::sync::Arc<super::Inner>, n: usize) -> Vec<crate::DeliveryFuture> {
        (0..n)
            .map(|_| {
                let r = crate::ProducerRecordRef::to_default_topic(b"value");
                let p = inner.prepare(r.partition(0), true).expect("prepared");
                inner.try_acquire(p.cost).expect("buffer space");
                inner
                    .enqueue(&p, false)
                    .into_result(&p)
                    .expect("appended")
                    .expect("a future was asked for")
            })
            .collect()
    }

    /// The open batch's shared slot and records memory, as addresses.
    fn open_batch(inner: &super::Inner) -> (usize, usize) {
        let st = inner.lock();
        let b = st.parts[0].batches.back().expect("an open batch");
        (
            std::sync::Arc::as_ptr(&b.shared) as usize,
            b.records_ptr() as usize,
        )
    }

    /// One request of the open batch, answered (written at offset 0) and applied.
    fn round(inner: &std::sync::Arc<super::Inner>) {
        let mut stats = super::EncodePathStats::default();
        let mut kept = super::EncodeRoundLists::default();
        super::encode_round(inner, 1, &mut kept, &mut stats).expect("round");
        assert_eq!(stats.requests, 1);
    }

    /// Issue 17: an answered batch's in-flight mark held its shared slot when the batch ended,
    /// so no slot was ever reused (an allocation per batch). Once the futures are gone, the
    /// next batch is made of the slot and the buffer of the one that ended.
    #[test]
    fn an_answered_batch_leaves_its_slot_and_buffer_to_the_next_one() {
        let (_w, inner) = offline();
        drop(append(&inner, 3));
        round(&inner);
        // A batch of the same size again: its buffer, from the first one's spare, has room.
        drop(append(&inner, 3));
        let second = open_batch(&inner);
        round(&inner);
        {
            let st = inner.lock();
            assert!(
                st.parts[0].in_flight.is_none(),
                "the mark went with the answer"
            );
            assert_eq!(st.spares.len(), 1);
            let spare = st.spares.last().expect("the ended batch's spare");
            assert!(spare.has_slot() && spare.has_buffer());
        }
        drop(append(&inner, 1));
        assert_eq!(open_batch(&inner), second, "the same slot and buffer");
        assert_eq!(inner.lock().spares.len(), 0);
    }

    /// A slot that a record's future still holds is not reused (the future reads the outcome
    /// from it); the buffer is.
    #[test]
    fn a_slot_a_future_holds_is_not_reused() {
        let (_w, inner) = offline();
        drop(append(&inner, 3));
        round(&inner);
        let mut futures = append(&inner, 3);
        let kept = futures.pop().expect("three futures");
        drop(futures);
        let second = open_batch(&inner);
        round(&inner);
        {
            let st = inner.lock();
            let spare = st.spares.last().expect("the ended batch's spare");
            assert!(!spare.has_slot() && spare.has_buffer());
        }
        drop(append(&inner, 1));
        let third = open_batch(&inner);
        assert_ne!(third.0, second.0, "a new slot");
        assert_eq!(third.1, second.1, "the same buffer");
        let mut kept = std::pin::pin!(kept);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::future::Future::poll(kept.as_mut(), &mut cx) {
            std::task::Poll::Ready(Ok(md)) => assert_eq!((md.partition, md.offset), (0, 2)),
            other => panic!("{other:?}"),
        }
    }

    /// A retried batch whose delivery timeout has passed ends in `State::requeue`
    /// (`DeliveryTimeout`). Between `apply`'s lock and `Inner::finish_releasing` its partition
    /// is no longer marked in flight and the batch is in no queue: a `flush` that starts then
    /// (`State::seal_all`) still gets a handle on it (`State::ending`), so it waits for the
    /// record's outcome (and `commit_transaction`, which flushes and then checks the
    /// transaction's error, sees the failure). The handle goes once the batch ended.
    #[test]
    fn a_flush_sees_a_retried_batch_that_expires_before_it_ends() {
        let (_w, inner) = offline();
        let futures = append(&inner, 1);
        let config = &inner.config;
        let at = std::time::Instant::now() + Duration::from_millis(config.linger_ms + 1);
        let mut request = inner.lock().plan(0, at, config).request;
        assert_eq!(request.len(), 1);
        let (id, mut batch) = request.pop().expect("one batch");
        // Its delivery timeout has passed by the time its retriable answer comes.
        batch.deadline = std::time::Instant::now();
        let mut settling = super::Settling::new(&inner, 0, 1, super::RequestLists::default());
        {
            let mut st = inner.lock();
            if let Some(b) = st.brokers.get_mut(&0) {
                b.in_flight = b.in_flight.saturating_sub(1);
            }
            let error = ProduceError::Broker {
                code: super::ErrorCode::NOT_LEADER_OR_FOLLOWER,
                message: None,
                record_error: None,
            };
            let verdict = super::Verdict::Retry {
                error,
                unroute: false,
                hint: None,
                maybe_written: false,
            };
            settling.verdict(&mut st, id, batch, verdict);
        }
        assert_eq!(settling.lists.done.len(), 1, "expired when requeued");
        let ending = settling.lists.done[0].0.shared.clone();
        // A flush that starts now, as `Writer::flush` does.
        let handles = inner.lock().seal_all();
        let pending = !ending.is_done();
        let waited_for = handles.iter().any(|h| std::sync::Arc::ptr_eq(h, &ending));
        let lists = &mut settling.lists;
        inner.finish_releasing(&mut lists.done, &lists.held);
        settling.release();
        drop(futures);
        assert!(pending, "the record has no outcome yet");
        assert!(
            waited_for,
            "flush has nothing to wait for while the record's outcome is pending"
        );
        assert!(ending.is_done());
        assert!(
            inner.lock().ending.is_empty(),
            "an ended batch's handle goes"
        );
    }

    /// librdkafka's mock cluster of one broker with `topic` of `partitions` partitions, and a
    /// writer on it with `settings`. The cluster is returned to be kept alive (and steered).
    fn mock_writer(
        topic: &str,
        partitions: i32,
        settings: impl FnOnce(crate::WriterBuilder) -> crate::WriterBuilder,
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
    fn send_futures_are_send(w: &Writer, r: crate::ProducerRecordRef<'_>) {
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
