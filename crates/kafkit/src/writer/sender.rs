//! The writer's tasks: one sender per broker, which turns every ready batch of the partitions
//! that broker leads into ONE Produce request (up to the in-flight limit), and one router,
//! which finds partition leaders (metadata) and the producer id (InitProducerId, KIP-98 /
//! KIP-360). Requests run as their own tasks so a slow broker never holds the others up.

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
use super::error::ProduceError;
use crate::conn::produce::Acks;
use crate::error::Error;
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

/// One broker's sender: plans, launches requests, sleeps until the next linger deadline,
/// retry, expiry or wake-up.
pub(crate) async fn sender_loop(inner: Arc<Inner>, broker: i32) {
    let notify = inner.broker_notify(broker);
    loop {
        let now = Instant::now();
        let plan = {
            let mut st = inner.lock();
            if st.shutdown {
                if let Some(b) = st.brokers.get_mut(&broker) {
                    b.has_sender = false;
                }
                return;
            }
            st.plan(broker, now, &inner.config)
        };
        let next_wake = plan.next_wake;
        let launched = !plan.request.is_empty();
        if plan.wake_router {
            inner.router.notify_one();
        }
        if !plan.done.is_empty() {
            inner.finish(plan.done);
        }
        if launched {
            let request = Plan {
                done: Vec::new(),
                ..plan
            };
            tokio::spawn(run_request(inner.clone(), broker, request));
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

    /// The outcome is being applied: nothing to undo.
    fn disarm(&mut self) {
        self.armed = false;
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

/// Sends one Produce request and applies its outcome.
async fn run_request(inner: Arc<Inner>, broker: i32, plan: Plan) {
    let mut guard = RequestGuard::new(
        &inner,
        broker,
        plan.request
            .iter()
            .map(|(id, b)| (*id, b.count(), b.cost))
            .collect(),
    );
    let config = &inner.config;
    // The request may last until the first of its batches' delivery deadlines (and no longer
    // than the request timeout): a record's outcome is due by its delivery timeout.
    let deadline = plan
        .request
        .iter()
        .map(|(_, b)| b.deadline)
        .min()
        .unwrap_or_else(Instant::now);
    // -1 / -1 when not idempotent (no producer id was fetched).
    let (pid, epoch) = (plan.producer_id, plan.producer_epoch);
    // A transactional writer's batches carry the transactional bit (KIP-98): the broker keeps
    // them below the last stable offset until the transaction's marker.
    let transactional = config.transactional_id.is_some();
    let Some((sent, mut verdicts)) =
        encode_off_runtime(config.compression, transactional, plan.request, pid, epoch).await
    else {
        // An encoding task panicked: its batches failed with `Closed` as they dropped; the
        // guard gives back what the request held.
        return;
    };
    let (req, sizes, total) = build_request(config, &sent);
    if !sent.is_empty() {
        inner.stats.request(broker, &sizes);
        let span = tracing::debug_span!(
            "produce",
            broker,
            partitions = sent.len(),
            bytes = total,
            acks = config.acks.as_i16()
        );
        let mut shutdown = inner.shutdown_rx();
        let result = tokio::select! {
            r = send(&inner, broker, &req, deadline).instrument(span) => r,
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
        judge(&inner, broker, result, sent, &mut verdicts);
    }
    // The request's references to the batches' bytes go before the batches end, so that an
    // ended batch's buffer can be reused (`Batch::into_spare`).
    drop(req);
    guard.disarm();
    apply(&inner, broker, verdicts);
}

/// A request's batches once encoded: those to send with their bytes, and those that already
/// have their verdict (they could not be encoded).
type Encoded = (Vec<(PartId, Batch, Bytes)>, Vec<(PartId, Batch, Verdict)>);

/// Encodes every batch of a request (record batch v2 with the producer fields and, for a
/// transactional writer, the transactional bit; compressed with the writer's codec; a batch
/// encoded by an earlier attempt keeps its bytes). A batch that cannot be encoded gets its
/// verdict at once.
fn encode_batches(
    compression: kafkit_compress::CompressionConfig,
    transactional: bool,
    request: Vec<(PartId, Batch)>,
    pid: i64,
    epoch: i16,
) -> Encoded {
    let mut verdicts: Vec<(PartId, Batch, Verdict)> = Vec::new();
    let mut sent: Vec<(PartId, Batch, Bytes)> = Vec::with_capacity(request.len());
    for (id, mut batch) in request {
        let seq = batch.sequence.map_or(-1, |(_, s)| s);
        match batch.encode(compression, pid, epoch, seq, transactional) {
            Ok(bytes) => sent.push((id, batch, bytes)),
            Err(e) => {
                let v = Verdict::Done(Outcome::failed(Error::from(e).into()));
                verdicts.push((id, batch, v));
            }
        }
    }
    (sent, verdicts)
}

/// [`encode_batches`], off the runtime's workers when there is compressing to do: the batches
/// not encoded yet go to tokio's blocking pool in up to one group per core (by size), so one
/// broker's zstd or gzip work can use every core and never holds up the I/O tasks. Without
/// compression (a header and a CRC per batch: the records were encoded when appended) or with
/// nothing left to encode (a retry), on the calling task. `None` when an encoding task panicked
/// (its batches dropped, failing their records).
async fn encode_off_runtime(
    compression: kafkit_compress::CompressionConfig,
    transactional: bool,
    request: Vec<(PartId, Batch)>,
    pid: i64,
    epoch: i16,
) -> Option<Encoded> {
    let to_encode: usize = request
        .iter()
        .filter(|(_, b)| b.encoded.is_none())
        .map(|(_, b)| b.size)
        .sum();
    if compression.compression() == kafkit_compress::Compression::None || to_encode == 0 {
        return Some(encode_batches(
            compression,
            transactional,
            request,
            pid,
            epoch,
        ));
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let share = to_encode.div_ceil(cores).max(1);
    let mut groups: Vec<Vec<(PartId, Batch)>> = vec![Vec::new()];
    let mut filled = 0usize;
    for (id, batch) in request {
        if filled >= share && groups.len() < cores {
            groups.push(Vec::new());
            filled = 0;
        }
        if batch.encoded.is_none() {
            filled += batch.size;
        }
        groups
            .last_mut()
            .expect("one group at least")
            .push((id, batch));
    }
    let tasks: Vec<_> = groups
        .into_iter()
        .map(|g| {
            tokio::task::spawn_blocking(move || {
                encode_batches(compression, transactional, g, pid, epoch)
            })
        })
        .collect();
    let mut sent = Vec::new();
    let mut verdicts = Vec::new();
    for t in tasks {
        let (s, v) = t.await.ok()?;
        sent.extend(s);
        verdicts.extend(v);
    }
    Some((sent, verdicts))
}

/// The Produce request carrying the encoded batches `sent` (grouped by topic, in order), with
/// each batch's `(bytes, records)` for the stats and the request's record bytes in all.
fn build_request(
    config: &super::config::Config,
    sent: &[(PartId, Batch, Bytes)],
) -> (ProduceRequest, Vec<(u64, u64)>, usize) {
    let mut topic_data: Vec<produce_request::TopicProduceData> = Vec::new();
    let mut sizes = Vec::with_capacity(sent.len());
    let mut total = 0usize;
    for (i, (_, batch, bytes)) in sent.iter().enumerate() {
        sizes.push((bytes.len() as u64, batch.count() as u64));
        total += bytes.len();
        let p = produce_request::PartitionProduceData::default()
            .with_index(batch.shared.partition)
            .with_records(Some(bytes.clone()));
        match topic_data
            .iter_mut()
            .rev()
            .find(|t| *t.name == *batch.shared.topic)
        {
            Some(t) => t.partition_data.push(p),
            None => {
                // The first topic's list has room for every batch left (most requests carry
                // one topic: one allocation); a later topic's grows as needed, so that many
                // topics do not each reserve the whole request.
                let room = if topic_data.is_empty() {
                    sent.len() - i
                } else {
                    1
                };
                let mut partitions = Vec::with_capacity(room);
                partitions.push(p);
                let t = produce_request::TopicProduceData::default()
                    .with_name(batch.shared.topic.to_string())
                    .with_partition_data(partitions);
                topic_data.push(t);
            }
        }
    }
    let req = ProduceRequest::default()
        .with_transactional_id(config.transactional_id.clone())
        .with_acks(config.acks.as_i16())
        .with_timeout_ms(i32::try_from(config.request_timeout_ms).unwrap_or(i32::MAX))
        .with_topic_data(topic_data);
    (req, sizes, total)
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

/// Dials (pooled) and sends; `Ok(None)` for acks=0. Both steps are bounded: the connection
/// (a dial, maybe a metadata lookup) by the request timeout, and everything by `deadline`
/// (the request's first delivery deadline). Failures are reported to the transport
/// (`note_failure`), and a request that got no answer within the whole request timeout
/// closes its connection as half-open.
async fn send(
    inner: &Inner,
    broker: i32,
    req: &ProduceRequest,
    deadline: Instant,
) -> Result<Option<ProduceResponse>, SendError> {
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
        .version_for::<ProduceRequest>(None)
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
                    max: ProduceRequest::VERSIONS.max,
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
            conn.send(req, version, false, wait).await.map(|_| None)
        } else {
            conn.request_at(req, version, wait).await.map(Some)
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

/// Turns the request's result into one verdict per batch: every batch written (acks=0), every
/// batch retried or failed alike (no response: [`judge_failure`]), or each batch by its
/// partition's answer ([`judge_response`]).
fn judge(
    inner: &Inner,
    broker: i32,
    result: Result<Option<ProduceResponse>, SendError>,
    sent: Vec<(PartId, Batch, Bytes)>,
    verdicts: &mut Vec<(PartId, Batch, Verdict)>,
) {
    // One verdict per batch: grown once, not once per doubling.
    verdicts.reserve(sent.len());
    match result {
        Ok(Some(resp)) => judge_response(inner, broker, resp, sent, verdicts),
        Ok(None) => {
            for (id, batch, _) in sent {
                let v = Verdict::Done(Outcome::Written {
                    base_offset: -1,
                    log_append_time: -1,
                });
                verdicts.push((id, batch, v));
            }
        }
        Err(e) => {
            for (id, mut batch, _) in sent {
                // Whatever the verdict, the batch remembers that the broker may have it.
                batch.maybe_written |= e.maybe_written;
                verdicts.push((id, batch, judge_failure(&e)));
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

/// Honours the response's throttle time and matches each batch to its partition's answer
/// ([`judge_partition`]); a partition the broker left out fails with `UNKNOWN_SERVER_ERROR`.
fn judge_response(
    inner: &Inner,
    broker: i32,
    resp: ProduceResponse,
    sent: Vec<(PartId, Batch, Bytes)>,
    verdicts: &mut Vec<(PartId, Batch, Verdict)>,
) {
    if resp.throttle_time_ms > 0 {
        inner.throttle(broker, resp.throttle_time_ms);
    }
    for ep in &resp.node_endpoints {
        tracing::trace!(node = ep.node_id, host = %ep.host, port = ep.port, "produce: leader endpoint hint");
    }
    let mut hints: Vec<(usize, i32, i32)> = Vec::new();
    let mut index = AnswerIndex::new(&resp.responses);
    for (id, batch, _) in sent {
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
    apply_leader_hints(inner, &resp.node_endpoints, &hints, verdicts);
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

/// Applies the verdicts under the lock ([`Settling::verdict`]), then ends the finished batches
/// and wakes whoever has work ([`Settling::release`]).
fn apply(inner: &Arc<Inner>, broker: i32, verdicts: Vec<(PartId, Batch, Verdict)>) {
    let mut settling = Settling::new(inner, broker, verdicts.len());
    {
        let mut st = inner.lock();
        if let Some(b) = st.brokers.get_mut(&broker) {
            b.in_flight = b.in_flight.saturating_sub(1);
        }
        for (id, batch, verdict) in verdicts {
            settling.verdict(&mut st, id, batch, verdict);
        }
    }
    inner.finish_releasing(std::mem::take(&mut settling.done), &settling.held);
    settling.release();
}

/// Applying one request's verdicts: what they decided that is left to do once the writer's
/// lock is released.
struct Settling<'a> {
    inner: &'a Arc<Inner>,
    now: Instant,
    /// Batches that ended; their futures resolve after the lock is released.
    done: Vec<(Batch, Outcome)>,
    /// The partitions of the batches in `done` (ended by a verdict, not by expiry): they stay
    /// "in flight" until their futures resolve, so a `flush` that starts now waits for them too
    /// ([`Inner::finish_releasing`] clears the marks).
    held: Vec<PartId>,
    /// The router has work: a leader to find, or a producer epoch to bump.
    wake_router: bool,
    /// Senders with work: the request's broker, new leaders.
    wake_brokers: Vec<i32>,
    /// Topics whose metadata was marked stale already (once per response is enough).
    stale: Vec<Arc<str>>,
    /// The broker that answered.
    broker: i32,
}

impl<'a> Settling<'a> {
    /// For the verdicts of `batches` batches (the lists that take one entry per batch are
    /// allocated once, at their size).
    fn new(inner: &'a Arc<Inner>, broker: i32, batches: usize) -> Self {
        Settling {
            inner,
            now: Instant::now(),
            done: Vec::with_capacity(batches),
            held: Vec::with_capacity(batches),
            wake_router: false,
            wake_brokers: vec![broker],
            stale: Vec::new(),
            broker,
        }
    }

    /// Applies one batch's verdict to the state `st`.
    fn verdict(&mut self, st: &mut State, id: PartId, mut batch: Batch, verdict: Verdict) {
        if matches!(verdict, Verdict::Done(_)) {
            self.held.push(id);
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
                self.done.push((batch, outcome));
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
            self.wake_brokers.push(leader);
        } else if unroute {
            // Only this batch's topic is looked up again (once per response).
            if !self.stale.contains(&batch.shared.topic) {
                inner.transport.invalidate_topics([&*batch.shared.topic]);
                self.stale.push(batch.shared.topic.clone());
            }
            st.set_leader(id, -1);
            self.wake_router = true;
        }
        self.wake_router |= st.requeue(id, batch, error, self.now, &inner.config, &mut self.done);
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
                self.done
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
        self.wake_router |= st.requeue(id, batch, error, self.now, config, &mut self.done);
    }

    /// After the ended batches' futures resolved and their partitions were freed
    /// ([`Inner::finish_releasing`]): the router and senders with work are woken.
    fn release(mut self) {
        {
            let st = self.inner.lock();
            if matches!(st.producer.status, ProducerStatus::Needed) {
                // A bump may be waiting for this request to be over.
                self.wake_router = true;
            }
            for &id in &self.held {
                let leader = st.parts[id].leader;
                if leader >= 0 && !self.wake_brokers.contains(&leader) {
                    self.wake_brokers.push(leader);
                }
            }
        }
        if self.wake_router {
            self.inner.router.notify_one();
        }
        for &b in &self.wake_brokers {
            self.inner.broker_notify(b).notify_one();
        }
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
    let mut frame = bytes::BytesMut::new();
    let round = round.max(1);
    for i in 0..records {
        let p = i32::try_from(i % partitions as u64).unwrap_or(0);
        let prepared = inner.prepare(
            super::ProducerRecord::to_default_topic(value.clone()).partition(p),
            futures,
        )?;
        if inner.try_acquire(prepared.cost).is_err() {
            encode_round(&inner, brokers, &mut frame, &mut stats)?;
            inner.try_acquire(prepared.cost)?;
        }
        drop(inner.enqueue(&prepared, false).into_result(&prepared)?);
        if (i + 1) % round == 0 {
            encode_round(&inner, brokers, &mut frame, &mut stats)?;
        }
    }
    inner.lock().seal_all();
    encode_round(&inner, brokers, &mut frame, &mut stats)?;
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

/// One round of [`encode_path`]: every broker's requests until none has a batch left.
fn encode_round(
    inner: &Arc<Inner>,
    brokers: i32,
    frame: &mut bytes::BytesMut,
    stats: &mut EncodePathStats,
) -> Result<(), ProduceError> {
    let config = &inner.config;
    for broker in 0..brokers {
        loop {
            // As the sender would plan once the batches lingered.
            let at = Instant::now() + Duration::from_millis(config.linger_ms + 1);
            let plan = inner.lock().plan(broker, at, config);
            inner.finish(plan.done);
            if plan.request.is_empty() {
                break;
            }
            let (sent, mut verdicts) = encode_batches(
                config.compression,
                config.transactional_id.is_some(),
                plan.request,
                plan.producer_id,
                plan.producer_epoch,
            );
            let (req, sizes, _) = build_request(config, &sent);
            inner.stats.request(broker, &sizes);
            frame.clear();
            // As `Conn` encodes a request: the batches stay out of the frame (vectored writes).
            let (encoded, splices) =
                kafkit_protocol::splice::collect(crate::conn::core::SPLICE_MIN, || {
                    req.encode(frame, 9)
                });
            encoded.map_err(|e| ProduceError::from(Error::from(e)))?;
            stats.requests += 1;
            stats.request_bytes +=
                (frame.len() + splices.iter().map(|s| s.data.len()).sum::<usize>()) as u64;
            // Written by now, as `Conn` would have: the batches' bytes are not held past here,
            // so the ended batches' buffers can be reused (`Batch::into_spare`).
            drop(splices);
            let responses = req
                .topic_data
                .iter()
                .map(|t| {
                    produce_response::TopicProduceResponse::default()
                        .with_name(t.name.clone())
                        .with_partition_responses(
                            t.partition_data
                                .iter()
                                .map(|p| {
                                    produce_response::PartitionProduceResponse::default()
                                        .with_index(p.index)
                                        .with_base_offset(0)
                                })
                                .collect(),
                        )
                })
                .collect();
            drop(req);
            let resp = ProduceResponse::default().with_responses(responses);
            // As `judge` does: one verdict per batch.
            verdicts.reserve(sent.len());
            judge_response(inner, broker, resp, sent, &mut verdicts);
            apply(inner, broker, verdicts);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use crate::{ProduceError, ProducerRecord, Transport, Writer};

    const WAIT: Duration = Duration::from_secs(10);

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
                let r = ProducerRecord::to_default_topic(bytes::Bytes::from_static(b"value"));
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
        super::encode_round(inner, 1, &mut bytes::BytesMut::new(), &mut stats).expect("round");
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
        let mut settling = super::Settling::new(&inner, 0, 1);
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
        assert_eq!(settling.done.len(), 1, "expired when requeued");
        let ending = settling.done[0].0.shared.clone();
        // A flush that starts now, as `Writer::flush` does.
        let handles = inner.lock().seal_all();
        let pending = !ending.is_done();
        let waited_for = handles.iter().any(|h| std::sync::Arc::ptr_eq(h, &ending));
        inner.finish_releasing(std::mem::take(&mut settling.done), &settling.held);
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

    /// A request task that panics after sending its request (`RequestGuard`): its record fails
    /// with `Closed`, its partition sends again (it is not left in flight), its buffer space
    /// comes back, and a close ends at once (nothing is counted as buffered).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_task_that_panics_gives_back_its_partition_and_buffer() {
        let cluster = rdkafka::mocking::MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("guarded", 1, 1).expect("topic");
        let t = Transport::builder(cluster.bootstrap_servers().split(','))
            .build()
            .expect("transport");
        let w = Writer::builder(t)
            .linger(Duration::ZERO)
            .build()
            .expect("writer");
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
}
