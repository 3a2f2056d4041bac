//! A source: the task that fetches from one broker for one Reader (franz-go's `source`,
//! librdkafka's broker fetcher). It owns that broker's fetch connection (its own, never the
//! transport's pooled one: a long poll would sit in front of every other request there) and
//! its fetch session, and runs rounds of named phases:
//!
//! `plan` (under the lock: the fetchable cursors this broker serves, marked in flight) ->
//! `build` (the session decides full or incremental; topic ids from Fetch v13) -> `send` (one
//! Fetch, a tracing span per request) -> `decode` (outside the lock, on this task: batches, the
//! aborted-transaction filter, positions by batch; `conn/records.rs`'s walker) -> `apply`
//! (`Shared::apply` and `apply.rs`, under the lock: positions, queue, errors per partition;
//! stale answers dropped by the version barrier) -> `pace` (no
//! second Fetch within `fetch_max_wait` of one that brought nothing).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafkit_protocol::messages::{FetchRequest, FetchResponse, fetch_request, fetch_response};
use kafkit_protocol::records::{DecodeOptions, Record, RecordBatchHeader, RecordsError};
use kafkit_protocol::{ErrorCode, Uuid};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::Instrument;

use super::config::Config;
use super::cursor::Position;
use super::record::{PartitionRecords, Span};
use super::session::{FetchSession, Outcome, PartData, PartKey, SessionRequest};
use super::shared::Shared;
use super::work::{Answer, Plan, Planned};
use crate::conn::Conn;
use crate::conn::aborted::AbortedFilter;
use crate::conn::records::walk_batches;
use crate::error::Error;
use crate::error::reader::ReaderError;
use crate::ops::meter;
use crate::ops::offsets::IsolationLevel;
use crate::time::wire_ms;
use crate::transport::Backoff;
use crate::transport::Transport;

/// Fetch v13 is the first to name topics by id (KIP-516).
const FIRST_TOPIC_ID_VERSION: i16 = 13;

/// The source task of broker `node`.
pub(crate) async fn run(shared: Arc<Shared>, node: i32, wake: Arc<Notify>) {
    let config = shared.config.clone();
    let mut src = Source {
        backoff: config.backoff(),
        session: FetchSession::new(config.fetch_sessions),
        shared,
        config,
        node,
        wake,
        conn: None,
        failures: 0,
        rotation: 0,
        reported: false,
    };
    while src.round().await {}
    src.drop_conn();
}

/// The longest a closing Reader's last Fetch (the one that closes its session) may take.
const CLOSE_SESSION_TIMEOUT: Duration = Duration::from_secs(5);

/// Closes fetch session `session_id` on broker `node`: a Fetch with the session's id, the final
/// epoch (-1) and no partitions (KIP-227; Java's `FetchMetadata.nextCloseExisting` on close),
/// answered at once (no wait, no bytes), on a connection of its own. Best effort, bounded by
/// [`CLOSE_SESSION_TIMEOUT`]: a broker not reached keeps the session until its cache needs the
/// slot.
pub(crate) async fn close_session(transport: Transport, node: i32, session_id: i32) {
    let close = async {
        let conn = transport.dial_unpooled(node).await?;
        let sent = async {
            let version = conn.version_for::<FetchRequest>(None)?;
            if version >= 7 {
                let mut req = FetchRequest::default()
                    .with_replica_id(-1)
                    .with_max_wait_ms(0)
                    .with_min_bytes(0);
                if version >= 15 {
                    req.replica_id = FetchRequest::default().replica_id;
                }
                req.session_id = session_id;
                req.session_epoch = -1;
                transport
                    .request_on(node, &conn, &req, version, Duration::ZERO)
                    .await?;
            }
            Ok::<(), Error>(())
        }
        .await;
        conn.close();
        transport.retire_unpooled(node, &conn);
        sent
    };
    let closed = tokio::time::timeout(CLOSE_SESSION_TIMEOUT, close).await;
    tracing::debug!(
        node,
        session = session_id,
        ok = matches!(closed, Ok(Ok(()))),
        "fetch session closed"
    );
}

struct Source {
    shared: Arc<Shared>,
    config: Config,
    node: i32,
    wake: Arc<Notify>,
    conn: Option<Conn>,
    session: FetchSession,
    backoff: Backoff,
    /// Consecutive failed requests.
    failures: u32,
    /// Where the next plan starts in the partition order (so no partition is always last).
    rotation: usize,
    /// A failure no retry fixes was reported since the last answer: the same failure after
    /// each backoff is not reported again (once per change from answering to failing).
    reported: bool,
}

impl Source {
    /// One round; `false` once the reader is closed.
    async fn round(&mut self) -> bool {
        let (id, parts) = match self.shared.plan(self.node, &mut self.rotation) {
            Plan::Stop => return false,
            Plan::Wait(until) => {
                self.wait(until).await;
                return true;
            }
            Plan::Fetch { id, parts } => (id, parts),
        };
        let conn = match self.conn().await {
            Ok(c) => c,
            Err(e) => {
                self.unreachable(&e).await;
                self.failed(id, &parts, e).await;
                return true;
            }
        };
        let (req, version) = match self.build(&conn, &parts) {
            Ok(r) => r,
            Err(e) => {
                self.failed(id, &parts, e).await;
                return true;
            }
        };
        let started = Instant::now();
        let resp = self.send(&conn, &req, version, parts.len()).await;
        if resp.is_ok() {
            self.shared
                .counters
                .kip714
                .fetched(self.node, started.elapsed());
        }
        match resp.and_then(|resp| self.answered(id, &parts, resp)) {
            Ok(data) => {
                self.failures = 0;
                self.reported = false;
                self.shared.note_session(self.node, self.session.open_id());
                if !data {
                    self.pace(started).await;
                }
            }
            Err(e) => self.failed(id, &parts, e).await,
        }
        true
    }

    /// Waits for a wake-up (new work, a drained queue, a closed reader), at most until `until`
    /// (or 1 s, to pick up expired preferred replicas and backoffs).
    async fn wait(&self, until: Option<Instant>) {
        let cap = Instant::now() + Duration::from_secs(1);
        let until = until.map_or(cap, |u| u.min(cap));
        let _ = tokio::time::timeout_at(until, self.wake.notified()).await;
    }

    /// No second Fetch within `fetch_max_wait` of one that brought no records: a broker that
    /// answers an idle long poll at once (or hands back only a partial batch) cannot make the
    /// reader spin. A wake-up (assign, seek, resume) ends the wait.
    async fn pace(&self, started: Instant) {
        let until = started + self.config.fetch_max_wait;
        if until > Instant::now() {
            let _ = tokio::time::timeout_at(until, self.wake.notified()).await;
        }
    }

    /// The fetch connection, dialled when there is none (or it died).
    async fn conn(&mut self) -> Result<Conn, Error> {
        if let Some(c) = &self.conn
            && !c.is_closed()
        {
            return Ok(c.clone());
        }
        self.drop_conn();
        let c = self.shared.transport.dial_unpooled(self.node).await?;
        self.shared.note_conn(self.node, &c);
        self.conn = Some(c.clone());
        Ok(c)
    }

    fn drop_conn(&mut self) {
        if let Some(c) = self.conn.take() {
            c.close();
            self.shared.forget_conn(self.node, &c);
        }
    }

    /// `build`: the Fetch request for `parts`, at the version to send it with.
    fn build(&mut self, conn: &Conn, parts: &[Planned]) -> Result<(FetchRequest, i16), Error> {
        let mut version = conn.version_for::<FetchRequest>(None)?;
        let ids = version >= FIRST_TOPIC_ID_VERSION && parts.iter().all(|p| !p.topic_id.is_zero());
        if version >= FIRST_TOPIC_ID_VERSION && !ids {
            // A topic without an id (metadata from an older broker): names, at v12.
            version = conn.version_for::<FetchRequest>(Some(FIRST_TOPIC_ID_VERSION - 1))?;
        }
        let wanted: Vec<(PartKey, PartData)> = parts
            .iter()
            .map(|p| ((Arc::clone(&p.topic), p.partition), p.data))
            .collect();
        let plan = self
            .session
            .plan(&wanted, |i| parts[i].end_unknown, ids, version >= 7);
        let mut req = self.request_head(version, &plan);
        let mut by_topic: HashMap<&str, usize> = HashMap::new();
        for &i in &plan.send {
            add_partition(&mut req, &mut by_topic, &parts[i], version, ids);
        }
        for ((topic, partition), topic_id) in &plan.forget {
            forget_partition(&mut req, topic, *partition, *topic_id, ids);
        }
        self.shared.counters.request(self.node, !plan.full);
        Ok((req, version))
    }

    /// `build`: the request's fields other than its partitions, at `version`.
    fn request_head(&self, version: i16, plan: &SessionRequest) -> FetchRequest {
        let mut req = FetchRequest::default()
            .with_replica_id(-1)
            .with_max_wait_ms(wire_ms(self.config.fetch_max_wait))
            .with_min_bytes(self.config.fetch_min_bytes)
            .with_max_bytes(self.config.fetch_max_bytes)
            .with_isolation_level(self.config.isolation_level.as_i8());
        if version >= 15 {
            // v15 replaced replica_id by replica_state (KIP-903); a consumer sends neither.
            req.replica_id = FetchRequest::default().replica_id;
        }
        if version >= 7 {
            req.session_id = plan.session_id;
            req.session_epoch = plan.epoch;
        }
        if version >= 11
            && let Some(rack) = &self.config.client_rack
        {
            req.rack_id = rack.clone();
        }
        req
    }

    /// `send`: one Fetch on this source's connection, throttling honoured (KIP-219), in a
    /// tracing span.
    async fn send(
        &self,
        conn: &Conn,
        req: &FetchRequest,
        version: i16,
        partitions: usize,
    ) -> Result<FetchResponse, Error> {
        let t = &self.shared.transport;
        t.wait_throttle(self.node).await;
        let span = tracing::debug_span!(
            "fetch",
            node = self.node,
            version,
            partitions,
            session = req.session_id,
            epoch = req.session_epoch
        );
        let started = meter::start();
        let r = t
            .request_on(self.node, conn, req, version, self.config.fetch_max_wait)
            .instrument(span)
            .await;
        meter::operation_duration(meter::Op::Poll, started, || {
            r.as_ref()
                .err()
                .map(|e| crate::ops::otel::error_type(e.error_code()))
        });
        r
    }

    /// The request got no answer, or an answer with a top-level error (or could not be
    /// built): the partitions go back (none of them fails: Java's fetcher, too, only logs a
    /// failed Fetch and fetches again), the session starts over, a dead connection is dropped,
    /// and the next request waits the backoff. A failure no retry is known to fix is reported
    /// once to the application; `UNKNOWN_SERVER_ERROR` is not (Java logs it).
    /// The broker could not be dialled: when every broker the metadata knows is unreachable,
    /// the transport bootstraps again now (KIP-899, `Transport::after_dial_failure`), so the
    /// next dial uses the node's address from the bootstrap addresses' answer.
    async fn unreachable(&self, e: &Error) {
        let dial_failed = matches!(
            e,
            Error::Connect { .. }
                | Error::ConnectTimeout { .. }
                | Error::ConnectionClosed { .. }
                | Error::RebootstrapRequired { .. }
                | Error::Io(_)
        );
        if dial_failed {
            self.shared.transport.after_dial_failure().await;
        }
    }

    async fn failed(&mut self, id: u64, parts: &[Planned], e: Error) {
        self.session.failed();
        self.shared.note_session(self.node, self.session.open_id());
        self.failures += 1;
        super::stats::Counters::add(&self.shared.counters.errors, 1);
        // A Fetch that went unanswered past request_timeout + fetch_max_wait leaves a
        // connection nobody can trust (its peer may be gone without a reset): the next one is
        // dialled, as Java's NetworkClient disconnects a node whose request timed out.
        let timed_out = matches!(e, Error::Timeout { .. });
        if timed_out || self.conn.as_ref().is_some_and(Conn::is_closed) {
            self.drop_conn();
        }
        tracing::debug!(node = self.node, error = %e, "fetch failed");
        let quiet = e.is_retriable() || e.error_code() == Some(ErrorCode::UNKNOWN_SERVER_ERROR);
        let report = (!quiet && !self.reported).then(|| {
            Error::Reader(ReaderError::Fetch {
                node: self.node,
                source: Box::new(e),
            })
        });
        self.reported |= report.is_some();
        self.shared.release(id, parts, report);
        tokio::time::sleep(self.backoff.delay(self.failures)).await;
    }

    /// Handles an answer; returns whether it brought any records, or the answer's top-level
    /// error (other than the session's own), for `failed`: such an error is about the request
    /// (a broker's internal failure, an authorization that is still propagating), not about
    /// any partition, and failing every partition with it stopped them for good.
    fn answered(&mut self, id: u64, parts: &[Planned], resp: FetchResponse) -> Result<bool, Error> {
        match self.session.answered(resp.error_code, resp.session_id) {
            Outcome::Reset => {
                self.shared.release(id, parts, None);
                return Ok(true); // a new full request at once
            }
            Outcome::Ok => {}
        }
        if !resp.error_code.is_ok() {
            return Err(Error::broker("Fetch", resp.error_code, None));
        }
        let answers = decode(&self.config, parts, resp);
        let data = answers.iter().zip(parts).any(|(a, p)| {
            a.as_ref()
                .is_some_and(|a| a.records.is_some() || a.next.offset > p.data.fetch_offset)
        });
        self.shared.apply(self.node, id, parts, answers);
        Ok(data)
    }
}

/// `build`: planned partition `p` into `req`, under its topic (by id or by name); `by_topic`
/// indexes the topics already in `req`.
fn add_partition<'a>(
    req: &mut FetchRequest,
    by_topic: &mut HashMap<&'a str, usize>,
    p: &'a Planned,
    version: i16,
    ids: bool,
) {
    let mut fp = fetch_request::FetchPartition::default()
        .with_partition(p.partition)
        .with_fetch_offset(p.data.fetch_offset)
        .with_partition_max_bytes(p.data.max_bytes);
    if version >= 9 {
        fp.current_leader_epoch = p.data.current_leader_epoch;
    }
    if version >= 12 {
        fp.last_fetched_epoch = p.data.last_fetched_epoch;
    }
    let t = *by_topic.entry(&p.topic).or_insert_with(|| {
        let mut t = fetch_request::FetchTopic::default();
        if ids {
            t.topic_id = p.topic_id;
        } else {
            t.topic = p.topic.to_string();
        }
        req.topics.push(t);
        req.topics.len() - 1
    });
    req.topics[t].partitions.push(fp);
}

/// `build`: a partition the session forgets (KIP-227), under its topic (by id or by name).
fn forget_partition(
    req: &mut FetchRequest,
    topic: &Arc<str>,
    partition: i32,
    topic_id: Uuid,
    ids: bool,
) {
    let f = req.forgotten_topics_data.iter_mut().find(|f| {
        if ids {
            f.topic_id == topic_id
        } else {
            f.topic == **topic
        }
    });
    match f {
        Some(f) => f.partitions.push(partition),
        None => {
            let mut f = fetch_request::ForgottenTopic::default();
            if ids {
                f.topic_id = topic_id;
            } else {
                f.topic = topic.to_string();
            }
            f.partitions.push(partition);
            req.forgotten_topics_data.push(f);
        }
    }
}

impl Answer {
    /// An answer carrying only `error`.
    fn error(error: ErrorCode, p: &Planned) -> Answer {
        Answer {
            error,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            preferred_read_replica: -1,
            current_leader: (-1, -1),
            diverging: None,
            records: None,
            next: Position::new(p.data.fetch_offset, p.last_epoch),
            decode_error: None,
            too_large: false,
            deferred: false,
        }
    }
}

/// `decode`: every partition of the answer, matched to the plan (by name, or by topic id from
/// v13); partitions the answer leaves out (an incremental session answers only those with
/// news) get `None`. A topic in the answer that matches nothing asked (tansu answers a topic
/// id it no longer knows, a deleted topic's, with a zero id and UNKNOWN_TOPIC_OR_PARTITION
/// where Kafka echoes the id with UNKNOWN_TOPIC_ID) says a topic asked for is unknown: the
/// partitions it can be (left out, of a topic absent from the answer, with a partition index
/// the unmatched topic lists) get UNKNOWN_TOPIC_ID, so metadata is asked again (and a
/// re-created topic is found) instead of the partition waiting on answers that never come.
/// Other partitions left out (an incremental session's, with no news) are not failed.
pub(crate) fn decode(
    config: &Config,
    parts: &[Planned],
    resp: FetchResponse,
) -> Vec<Option<Answer>> {
    let mut index: HashMap<(&str, i32), usize> = HashMap::with_capacity(parts.len());
    let mut names: HashMap<Uuid, &str> = HashMap::new();
    for (i, p) in parts.iter().enumerate() {
        index.insert((&p.topic, p.partition), i);
        if !p.topic_id.is_zero() {
            names.insert(p.topic_id, &p.topic);
        }
    }
    let mut out: Vec<Option<Answer>> = Vec::with_capacity(parts.len());
    out.resize_with(parts.len(), || None);
    let options = DecodeOptions::new()
        .verify_crc(config.check_crcs)
        .max_decompressed_bytes(config.max_batch_decompressed_bytes);
    // One decoded-memory budget for the whole answer, not one per partition: an answer of N
    // partitions could otherwise decode to N x the budget.
    let mut budget = Budget::new(options.decoded_budget());
    // Partition indexes of answer topics that match nothing asked, and the topics answered.
    let mut unmatched: Vec<i32> = Vec::new();
    let mut answered: std::collections::HashSet<String> = std::collections::HashSet::new();
    for t in resp.responses {
        let topic: &str = if t.topic.is_empty() {
            match names.get(&t.topic_id) {
                Some(n) => n,
                None => {
                    unmatched.extend(t.partitions.iter().map(|p| p.partition_index));
                    continue;
                }
            }
        } else {
            &t.topic
        };
        if !answered.contains(topic) {
            answered.insert(topic.to_owned());
        }
        for p in t.partitions {
            let Some(&i) = index.get(&(topic, p.partition_index)) else {
                continue; // not asked for: ignored
            };
            if out[i].is_some() {
                continue; // listed twice: the first answer counts
            }
            out[i] = Some(decode_partition(config, options, &mut budget, &parts[i], p));
        }
    }
    if !unmatched.is_empty() {
        for (a, p) in out.iter_mut().zip(parts) {
            if a.is_none() && unmatched.contains(&p.partition) && !answered.contains(&*p.topic) {
                *a = Some(Answer::error(ErrorCode::UNKNOWN_TOPIC_ID, p));
            }
        }
    }
    out
}

/// The decoded-memory budget of one Fetch answer, shared by its partitions in answer order
/// (`DecodeOptions::max_decoded_bytes`, by default 4 x `max_batch_decompressed_bytes`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    full: usize,
    left: usize,
}

impl Budget {
    pub(crate) fn new(full: usize) -> Budget {
        Budget { full, left: full }
    }
}

/// Decodes one partition's answer from the planned fetch offset: whole batches in offset
/// order, markers and aborted batches passed (positions by batch), records before the fetch
/// offset dropped (a compressed legacy wrapper may start before it). Decoded values are
/// charged to `budget`: a batch that does not fit what earlier partitions of the answer left
/// is deferred, not failed (the partition keeps the whole batches before it and its position
/// stays there, so the next Fetch asks for the rest; the Reader starts each Fetch one partition
/// further, so every partition comes first, with the whole budget, in turn). Only a batch that
/// does not fit the whole budget is an error (`RecordsError::DecodedTooLarge`).
pub(crate) fn decode_partition(
    config: &Config,
    options: DecodeOptions,
    budget: &mut Budget,
    planned: &Planned,
    mut p: fetch_response::PartitionData,
) -> Answer {
    let mut answer = answer_head(planned, &p);
    if !p.error_code.is_ok() || answer.diverging.is_some() {
        return answer;
    }
    let data: Bytes = p.records.take().unwrap_or_default();
    let mut filter = aborted_filter(config, &p);
    let mut records: Vec<Record> = Vec::new();
    let mut spans: Vec<Span> = Vec::new();
    let shared = budget.left < budget.full;
    let mut next = answer.next;
    let walked = walk_batches(
        &data,
        options,
        &mut budget.left,
        planned.data.fetch_offset,
        &mut filter,
        |h, kept| {
            if let Some(batch_records) = kept {
                keep_batch(&mut records, &mut spans, h, batch_records);
            }
            next = next_position(h, next);
        },
    );
    answer.next = next;
    match walked.error {
        None => {}
        // Deferred to the next Fetch (see above).
        Some(RecordsError::DecodedTooLarge { .. }) if shared => answer.deferred = true,
        Some(e) => answer.decode_error = Some((answer.next.offset, e)),
    }
    answer.too_large = walked.whole == 0
        && !answer.deferred
        && answer.decode_error.is_none()
        && !data.is_empty()
        && walked.partial_bytes == data.len()
        && data.len() >= usize::try_from(planned.data.max_bytes).unwrap_or(usize::MAX);
    if !records.is_empty() {
        answer.records = Some(partition_records(
            planned, &p, &answer, records, spans, &data,
        ));
    }
    answer
}

/// `decode_partition`'s answer before any batch is read: the partition's fields, the position
/// at the fetch offset.
#[inline(always)]
fn answer_head(planned: &Planned, p: &fetch_response::PartitionData) -> Answer {
    let diverging = (p.diverging_epoch.epoch >= 0 && p.diverging_epoch.end_offset >= 0)
        .then_some((p.diverging_epoch.epoch, p.diverging_epoch.end_offset));
    Answer {
        error: p.error_code,
        high_watermark: p.high_watermark,
        last_stable_offset: p.last_stable_offset,
        log_start_offset: p.log_start_offset,
        preferred_read_replica: p.preferred_read_replica,
        current_leader: (p.current_leader.leader_id, p.current_leader.leader_epoch),
        diverging,
        records: None,
        next: Position::new(planned.data.fetch_offset, planned.last_epoch),
        decode_error: None,
        too_large: false,
        deferred: false,
    }
}

/// The aborted-transaction filter of the reader's isolation level, fed the answer's list.
#[inline(always)]
fn aborted_filter(config: &Config, p: &fetch_response::PartitionData) -> AbortedFilter {
    if config.isolation_level == IsolationLevel::ReadCommitted {
        AbortedFilter::read_committed(
            p.aborted_transactions
                .iter()
                .flatten()
                .map(|a| (a.producer_id, a.first_offset)),
        )
    } else {
        AbortedFilter::read_uncommitted()
    }
}

/// Appends one delivered batch's records, with the span that says what they share.
#[inline(always)]
fn keep_batch(
    records: &mut Vec<Record>,
    spans: &mut Vec<Span>,
    h: &RecordBatchHeader,
    mut batch_records: Vec<Record>,
) {
    let start = records.len();
    // The first batch's vector is taken as it is, later ones moved in one copy.
    if records.is_empty() {
        *records = batch_records;
    } else {
        records.append(&mut batch_records);
    }
    if records.len() > start {
        spans.push(Span {
            start,
            leader_epoch: h.partition_leader_epoch,
            timestamp_type: h.timestamp_type,
        });
    }
}

/// The position past batch `h`: its next offset, with its leader epoch when it has one
/// (magic 2), else the epoch of the position before it.
#[inline(always)]
fn next_position(h: &RecordBatchHeader, before: Position) -> Position {
    let epoch = (h.magic >= 2 && h.partition_leader_epoch >= 0).then_some(h.partition_leader_epoch);
    Position::new(h.next_offset(), epoch.or(before.leader_epoch))
}

/// The records an answer delivers, with the partition's watermarks and barrier.
#[inline(always)]
fn partition_records(
    planned: &Planned,
    p: &fetch_response::PartitionData,
    answer: &Answer,
    records: Vec<Record>,
    spans: Vec<Span>,
    data: &Bytes,
) -> PartitionRecords {
    PartitionRecords {
        topic: Arc::clone(&planned.topic),
        partition: planned.partition,
        records,
        next_offset: answer.next.offset,
        high_watermark: p.high_watermark,
        last_stable_offset: p.last_stable_offset,
        log_start_offset: p.log_start_offset,
        spans,
        next_leader_epoch: answer.next.leader_epoch.filter(|e| *e >= 0),
        barrier: planned.barrier.clone(),
        bytes: data.len(),
        process: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::apply::apply_one;
    use crate::reader::cursor::{CursorState, State};
    use crate::reader::record::Barrier;
    use crate::reader::work::Followup;
    use bytes::BytesMut;
    use kafkit_protocol::records::{ControlRecordType, RecordBatchEncoder, RecordBatchOptions};
    use std::sync::atomic::AtomicU64;

    fn batch(
        buf: &mut BytesMut,
        base: i64,
        pid: Option<i64>,
        control: Option<ControlRecordType>,
        n: i64,
    ) {
        let mut opts = RecordBatchOptions::new().base_offset(base);
        if let Some(pid) = pid {
            opts = opts.producer(pid, 0, 0).transactional(true);
        }
        if control.is_some() {
            opts = opts.control(true);
        }
        let mut enc = RecordBatchEncoder::new(buf, opts).unwrap();
        for i in 0..n {
            let key = control.map(|c| Bytes::copy_from_slice(&c.key()));
            enc.append(
                &Record::new(key, Some(Bytes::from((base + i).to_string()))).with_timestamp(1),
            )
            .unwrap();
        }
        enc.finish().unwrap();
    }

    fn planned(offset: i64) -> Planned {
        Planned {
            topic: Arc::from("t"),
            topic_id: Uuid::default(),
            partition: 0,
            version: 0,
            data: PartData {
                topic_id: Uuid::default(),
                fetch_offset: offset,
                current_leader_epoch: -1,
                last_fetched_epoch: -1,
                max_bytes: 1 << 20,
            },
            last_epoch: None,
            from_replica: false,
            end_unknown: false,
            barrier: Barrier {
                current: Arc::new(AtomicU64::new(0)),
                version: 0,
            },
        }
    }

    fn answer(config: &Config, from: i64, data: Bytes, aborted: Option<Vec<(i64, i64)>>) -> Answer {
        let mut p = fetch_response::PartitionData::default();
        p.records = Some(data);
        p.high_watermark = 100;
        p.aborted_transactions = aborted.map(|a| {
            a.into_iter()
                .map(|(pid, first)| {
                    let mut t = fetch_response::AbortedTransaction::default();
                    t.producer_id = pid;
                    t.first_offset = first;
                    t
                })
                .collect()
        });
        let opts = DecodeOptions::new().max_decompressed_bytes(config.max_batch_decompressed_bytes);
        decode_partition(
            config,
            opts,
            &mut Budget::new(opts.decoded_budget()),
            &planned(from),
            p,
        )
    }

    fn offsets(a: &Answer) -> Vec<i64> {
        a.records
            .as_ref()
            .map(|r| r.records.iter().map(|r| r.offset).collect())
            .unwrap_or_default()
    }

    /// 0-1 plain, 2-3 producer 7 (aborted), 4-5 producer 8 (committed), 6 abort marker of 7,
    /// 7 commit marker of 8, 8 plain.
    fn txn_log() -> Bytes {
        let mut buf = BytesMut::new();
        batch(&mut buf, 0, None, None, 2);
        batch(&mut buf, 2, Some(7), None, 2);
        batch(&mut buf, 4, Some(8), None, 2);
        batch(&mut buf, 6, Some(7), Some(ControlRecordType::Abort), 1);
        batch(&mut buf, 7, Some(8), Some(ControlRecordType::Commit), 1);
        batch(&mut buf, 8, None, None, 1);
        buf.freeze()
    }

    #[test]
    fn positions_move_by_batch_past_markers_and_aborted_batches() {
        let rc = Config {
            isolation_level: IsolationLevel::ReadCommitted,
            ..Config::default()
        };
        let a = answer(&rc, 0, txn_log(), Some(vec![(7, 2)]));
        assert_eq!(offsets(&a), vec![0, 1, 4, 5, 8]);
        assert_eq!(a.next.offset, 9);
        let ru = answer(&Config::default(), 0, txn_log(), None);
        assert_eq!(
            offsets(&ru),
            vec![0, 1, 2, 3, 4, 5, 8],
            "markers never surface"
        );
        // From offset 6: only markers, then record 8.
        let a = answer(&rc, 6, txn_log(), Some(vec![(7, 2)]));
        assert_eq!(offsets(&a), vec![8]);
        // Only the two markers: no records, but the position passes them.
        let data = txn_log();
        let a = answer(&rc, 6, data.clone(), Some(vec![]));
        assert_eq!(a.next.offset, 9);
    }

    #[test]
    fn the_reader_and_fetch_multi_pass_over_the_same_markers_and_aborted_batches() {
        // One walker: whatever the isolation level and fetch offset, the Reader's source and
        // `Conn::fetch_multi`'s decoder deliver the same records and move to the same offset.
        for (level, aborted) in [
            (IsolationLevel::ReadUncommitted, None),
            (IsolationLevel::ReadCommitted, Some(vec![(7, 2)])),
        ] {
            let config = Config {
                isolation_level: level,
                ..Config::default()
            };
            for from in [0, 3, 5, 6, 8] {
                let reader = answer(&config, from, txn_log(), aborted.clone());
                let (mut out, mut unbounded) = (Vec::new(), usize::MAX);
                let next = crate::conn::records::decode_records(
                    &txn_log(),
                    from,
                    aborted.as_deref(),
                    &mut out,
                    &mut unbounded,
                )
                .unwrap();
                let conn: Vec<i64> = out.iter().map(|r| r.offset).collect();
                assert_eq!(offsets(&reader), conn, "{level:?} from {from}");
                assert_eq!(reader.next.offset, next, "{level:?} from {from}");
                assert!(
                    !conn.contains(&6) && !conn.contains(&7),
                    "markers never surface"
                );
            }
        }
    }

    #[test]
    fn hostile_and_truncated_batches_are_typed_errors_without_progress_or_panic() {
        let c = Config::default();
        let mut buf = BytesMut::new();
        batch(&mut buf, 0, None, None, 3);
        batch(&mut buf, 3, None, None, 3);
        let good = buf.freeze();
        // A flipped byte in the second batch's records: its CRC fails; the first is delivered.
        let mut bad = good.to_vec();
        let last = bad.len() - 2;
        bad[last] ^= 0xff;
        let a = answer(&c, 0, Bytes::from(bad), None);
        assert_eq!(offsets(&a), vec![0, 1, 2]);
        let (at, e) = a.decode_error.as_ref().expect("crc error");
        assert_eq!(*at, 3);
        assert!(matches!(e, RecordsError::CrcMismatch { .. }), "{e:?}");
        // A cut batch (as a broker cuts at max bytes): no error, no progress.
        let a = answer(&c, 0, good.slice(..20), None);
        assert!(a.decode_error.is_none() && a.records.is_none());
        assert_eq!(a.next.offset, 0);
        assert!(!a.too_large, "a short answer is not a too-large batch");
        // An absurd record count (2^31-1) with a valid CRC: refused before allocating.
        let mut absurd = good.slice(..good.len() / 2).to_vec();
        absurd[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
        let crc = crc32c::crc32c(&absurd[21..]);
        absurd[17..21].copy_from_slice(&crc.to_be_bytes());
        let a = answer(&c, 0, Bytes::from(absurd), None);
        assert!(
            matches!(
                a.decode_error,
                Some((0, RecordsError::InvalidRecordCount { .. }))
            ),
            "{:?}",
            a.decode_error
        );
        // A negative batch length, and random bytes.
        let mut neg = good.to_vec();
        neg[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(answer(&c, 0, Bytes::from(neg), None).decode_error.is_some());
        let noise: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let a = answer(&c, 0, Bytes::from(noise), None);
        assert!(a.records.is_none());
    }

    #[test]
    fn a_corrupt_partition_does_not_touch_the_others() {
        let c = Config::default();
        let mut buf = BytesMut::new();
        batch(&mut buf, 0, None, None, 2);
        let good = buf.freeze();
        let mut bad = good.to_vec();
        bad[30] ^= 1;
        let mut resp = FetchResponse::default();
        let mut t = fetch_response::FetchableTopicResponse::default();
        t.topic = "t".into();
        for (p, data) in [(0, Bytes::from(bad)), (1, good)] {
            let mut pd = fetch_response::PartitionData::default();
            pd.partition_index = p;
            pd.records = Some(data);
            t.partitions.push(pd);
        }
        resp.responses.push(t);
        let mut p1 = planned(0);
        p1.partition = 1;
        let answers = decode(
            &c,
            &[planned(0), p1, {
                let mut p = planned(0);
                p.partition = 2;
                p
            }],
            resp,
        );
        assert!(answers[0].as_ref().unwrap().decode_error.is_some());
        assert_eq!(offsets(answers[1].as_ref().unwrap()), vec![0, 1]);
        assert!(answers[2].is_none(), "left out of the answer: no news");
    }

    /// One decoded-memory budget per Fetch answer: 4 partitions whose batches each fit the
    /// per-field budget (`max_decoded_bytes`, 4 x `max_batch_decompressed_bytes`) but hold twice
    /// the budget together. The first answer decodes at most the budget; what does not fit is
    /// deferred (no error, the position at the last whole batch) and the next Fetches (the
    /// Reader starts each one a partition further) deliver the rest, every record once.
    #[test]
    fn one_fetch_answer_decodes_at_most_one_budget_over_all_its_partitions() {
        let c = Config {
            max_batch_decompressed_bytes: 4096,
            ..Config::default()
        };
        let budget = 4 * 4096;
        let per_record = std::mem::size_of::<Record>();
        // Each batch costs about a quarter of the budget, each partition (2 batches) half.
        let n = (budget / 4 / per_record) as i64;
        let (log, second) = {
            let mut buf = BytesMut::new();
            batch(&mut buf, 0, None, None, n);
            let second = buf.len();
            batch(&mut buf, n, None, None, n);
            (buf.freeze(), second)
        };
        let plan = |partition: i32, from: i64| {
            let mut p = planned(from);
            p.partition = partition;
            p
        };
        // Where each partition stands, and what it delivered.
        let mut next = [0i64; 4];
        let mut delivered: Vec<Vec<i64>> = vec![Vec::new(); 4];
        let mut rounds = 0;
        while next.iter().any(|&o| o < 2 * n) {
            assert!(rounds < 8, "not done after {rounds} answers: {next:?}");
            // The request order, one further each round; the broker answers in that order.
            let order: Vec<i32> = (0..4).map(|i| (i + rounds) % 4).collect();
            let parts: Vec<Planned> = order.iter().map(|&p| plan(p, next[p as usize])).collect();
            let mut resp = FetchResponse::default();
            let mut t = fetch_response::FetchableTopicResponse::default();
            t.topic = "t".into();
            for part in &parts {
                // The broker returns the log from the fetch offset (whole batches).
                let skip = if part.data.fetch_offset >= n {
                    second
                } else {
                    0
                };
                let mut pd = fetch_response::PartitionData::default();
                pd.partition_index = part.partition;
                pd.high_watermark = 2 * n;
                // Nothing past the end of the log.
                pd.records = (part.data.fetch_offset < 2 * n).then(|| log.slice(skip..));
                t.partitions.push(pd);
            }
            resp.responses.push(t);
            let answers = decode(&c, &parts, resp);
            let mut decoded = 0;
            for (a, part) in answers.iter().zip(&parts) {
                let a = a.as_ref().expect("an answer");
                assert!(a.decode_error.is_none(), "{:?}", a.decode_error);
                assert!(!a.too_large);
                let got = offsets(a);
                decoded += got.len() * per_record;
                let i = part.partition as usize;
                assert_eq!(got.first().copied().unwrap_or(a.next.offset), next[i]);
                assert_eq!(
                    a.next.offset,
                    next[i] + got.len() as i64,
                    "position after them"
                );
                assert_eq!(a.deferred, a.next.offset < 2 * n, "{i}: {a:?}");
                delivered[i].extend(got);
                next[i] = a.next.offset;
            }
            assert!(
                decoded <= budget,
                "answer {rounds}: {decoded} bytes decoded, budget {budget}"
            );
            rounds += 1;
        }
        assert!(rounds >= 2, "the first answer could not hold everything");
        for d in &delivered {
            assert_eq!(
                *d,
                (0..2 * n).collect::<Vec<_>>(),
                "every record once, in order"
            );
        }
        // A batch larger than the whole budget stays an error when it comes first.
        let mut big = BytesMut::new();
        batch(&mut big, 0, None, None, 2 * (budget / per_record) as i64);
        let mut resp = FetchResponse::default();
        let mut t = fetch_response::FetchableTopicResponse::default();
        t.topic = "t".into();
        let mut pd = fetch_response::PartitionData::default();
        pd.records = Some(big.freeze());
        t.partitions.push(pd);
        resp.responses.push(t);
        let a = decode(&c, &[planned(0)], resp)
            .remove(0)
            .expect("an answer");
        assert!(
            matches!(
                a.decode_error,
                Some((0, RecordsError::DecodedTooLarge { .. }))
            ),
            "{:?}",
            a.decode_error
        );
        assert!(!a.deferred);
    }

    #[test]
    fn an_answer_for_an_unknown_topic_id_fails_the_partitions_left_out() {
        // Asked by id for "t" (deleted) and "u"; answered "u" and, as tansu does for an id it
        // no longer knows, a topic with a zero id.
        let c = Config::default();
        let (t_id, u_id) = (Uuid([1; 16]), Uuid([2; 16]));
        let mut t = planned(3);
        t.topic_id = t_id;
        let mut u = planned(0);
        u.topic = Arc::from("u");
        u.topic_id = u_id;
        let mut resp = FetchResponse::default();
        for id in [Uuid::default(), u_id] {
            let mut r = fetch_response::FetchableTopicResponse::default();
            r.topic_id = id;
            let mut pd = fetch_response::PartitionData::default();
            if id.is_zero() {
                pd.error_code = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
            }
            r.partitions.push(pd);
            resp.responses.push(r);
        }
        let answers = decode(&c, &[t, u], resp);
        let a = answers[0]
            .as_ref()
            .expect("an answer for the unmatched topic");
        assert_eq!(a.error, ErrorCode::UNKNOWN_TOPIC_ID);
        assert_eq!(a.next.offset, 3, "no progress");
        assert!(answers[1].as_ref().unwrap().error.is_ok());
    }

    /// An incremental session's answer leaves out the partitions with no
    /// news; one topic answered with a zero id (tansu, for an id it no longer knows) must fail
    /// only the partitions it can be: of a topic absent from the answer, with a partition
    /// index the unmatched topic lists. Healthy partitions left out (here "v"/1) are not
    /// failed as UNKNOWN_TOPIC_ID.
    #[test]
    fn an_unmatched_answer_topic_fails_only_the_partitions_it_can_be() {
        let c = Config::default();
        let (t_id, u_id, v_id) = (Uuid([1; 16]), Uuid([2; 16]), Uuid([3; 16]));
        let mut t = planned(3);
        t.topic_id = t_id;
        let mut u = planned(0);
        u.topic = Arc::from("u");
        u.topic_id = u_id;
        let mut v = planned(7);
        v.topic = Arc::from("v");
        v.topic_id = v_id;
        v.partition = 1;
        let mut resp = FetchResponse::default();
        for id in [Uuid::default(), u_id] {
            let mut r = fetch_response::FetchableTopicResponse::default();
            r.topic_id = id;
            let mut pd = fetch_response::PartitionData::default();
            if id.is_zero() {
                pd.error_code = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
            }
            r.partitions.push(pd);
            resp.responses.push(r);
        }
        let answers = decode(&c, &[t, u, v], resp);
        assert_eq!(
            answers[0].as_ref().map(|a| a.error),
            Some(ErrorCode::UNKNOWN_TOPIC_ID),
            "t/0 can be the unmatched topic"
        );
        assert!(answers[1].as_ref().unwrap().error.is_ok());
        assert!(
            answers[2].is_none(),
            "v/1, left out with no news, is not failed: {:?}",
            answers[2].as_ref().map(|a| a.error)
        );
    }

    /// Records in epoch 1, then a transaction marker written in epoch 2: the
    /// answer's `next_offset` passes the marker, so the epoch committed with it
    /// (`last_leader_epoch`) is the marker batch's, 2. The pair (offset past an epoch-2 batch,
    /// epoch 1) would claim epoch 1 reaches past where it ends, and the next owner's
    /// validation (OffsetForLeaderEpoch, KIP-320) would see a truncation that never happened.
    #[test]
    fn the_committed_epoch_pairs_with_the_offset_past_a_newer_marker() {
        let mut buf = BytesMut::new();
        for (base, control, epoch) in [(0, None, 1), (3, Some(ControlRecordType::Commit), 2)] {
            let mut opts = RecordBatchOptions::new()
                .base_offset(base)
                .partition_leader_epoch(epoch)
                .producer(9, 0, 0)
                .transactional(true);
            if control.is_some() {
                opts = opts.control(true);
            }
            let n = if control.is_some() { 1 } else { 3 };
            let mut enc = RecordBatchEncoder::new(&mut buf, opts).unwrap();
            for i in 0..n {
                let key = control.map(|c: ControlRecordType| Bytes::copy_from_slice(&c.key()));
                enc.append(
                    &Record::new(key, Some(Bytes::from((base + i).to_string()))).with_timestamp(1),
                )
                .unwrap();
            }
            enc.finish().unwrap();
        }
        let a = answer(&Config::default(), 0, buf.freeze(), None);
        let p = a.records.as_ref().expect("records");
        assert_eq!((p.records.len(), p.next_offset), (3, 4));
        assert_eq!(a.next, Position::new(4, Some(2)));
        assert_eq!(
            (p.next_offset, p.last_leader_epoch()),
            (4, Some(2)),
            "the offset past the marker goes with the marker's epoch"
        );
    }

    #[test]
    fn a_fetch_offset_inside_a_batch_drops_only_the_records_before_it() {
        let mut buf = BytesMut::new();
        batch(&mut buf, 0, None, None, 3);
        batch(&mut buf, 3, None, None, 2);
        batch(&mut buf, 5, None, None, 2);
        let data = buf.freeze();
        let c = Config::default();
        let a = answer(&c, 1, data.clone(), None);
        assert_eq!(offsets(&a), vec![1, 2, 3, 4, 5, 6]);
        let r = a.records.as_ref().unwrap();
        let starts: Vec<usize> = r.spans.iter().map(|s| s.start).collect();
        assert_eq!(
            starts,
            vec![0, 2, 4],
            "one span per batch, at its first record kept"
        );
        assert_eq!(a.next.offset, 7);
        let a = answer(&c, 4, data, None);
        assert_eq!(offsets(&a), vec![4, 5, 6]);
        let starts: Vec<usize> = a
            .records
            .as_ref()
            .unwrap()
            .spans
            .iter()
            .map(|s| s.start)
            .collect();
        assert_eq!(starts, vec![0, 1]);
    }

    /// A cursor of `t`/0 fetching at `fetch` (with the epoch of the last record fetched)
    /// whose records `queued` (from, to) wait for the application; the position is at `from`.
    fn fetching(fetch: Position, queued: Option<(i64, i64)>) -> State {
        let mut st = State::default();
        let start = queued.map_or(fetch.offset, |(from, _)| from);
        st.assign("t", 0, super::super::StartOffset::At(start));
        if let Some((from, to)) = queued {
            let records = PartitionRecords {
                topic: Arc::from("t"),
                partition: 0,
                records: (from..to)
                    .map(|o| Record::new(None, None).with_offset(o))
                    .collect(),
                next_offset: to,
                high_watermark: to,
                last_stable_offset: to,
                log_start_offset: 0,
                spans: vec![Span {
                    start: 0,
                    leader_epoch: fetch.leader_epoch.unwrap_or(-1),
                    timestamp_type: kafkit_protocol::records::TimestampType::CreateTime,
                }],
                next_leader_epoch: None,
                barrier: st.barrier("t", 0).unwrap(),
                bytes: 100,
                process: None,
            };
            st.push_records(records);
        }
        let c = st.cursor_mut("t", 0).unwrap();
        c.advance(fetch);
        c.fetch = fetch;
        c.leader = Some(1);
        st
    }

    /// The planned Fetch of `t`/0 from `st`'s cursor, as `Shared::plan` builds it.
    fn planned_from(st: &State) -> Planned {
        let c = st.cursor("t", 0).unwrap();
        let mut p = planned(c.fetch.offset);
        p.last_epoch = c.fetch.leader_epoch;
        p.data.last_fetched_epoch = c.fetch.leader_epoch.unwrap_or(-1);
        p.version = c.version;
        p.barrier = st.barrier("t", 0).unwrap();
        p
    }

    /// An answer of `code` for `planned`, with a diverging epoch when given.
    fn answered(st: &mut State, config: &Config, code: ErrorCode, diverging: Option<(i32, i64)>) {
        let planned = planned_from(st);
        let mut a = Answer::error(code, &planned);
        a.diverging = diverging;
        let mut fu = Followup::default();
        let counters = super::super::stats::Counters::default();
        apply_one(st, config, 1, &planned, a, &mut fu, &counters);
    }

    fn taken_offsets(st: &mut State) -> Vec<i64> {
        let (out, err, _) = st.take(1000);
        assert!(err.is_none(), "no error: {err:?}");
        out.iter()
            .flat_map(|p| p.records.iter().map(|r| r.offset))
            .collect()
    }

    /// The leader answers a Fetch with a diverging epoch whose end offset is
    /// at or past the fetch offset: the position is valid, but the last fetched epoch sent was
    /// not the leader's. The next Fetch must not be the same request (it would get the same
    /// answer forever): it carries the leader's epoch (KIP-595's rule), and when the leader
    /// names the very epoch sent, none (as Java's consumer, which never sends one).
    #[test]
    fn a_diverging_epoch_at_or_past_the_fetch_offset_does_not_repeat_the_same_fetch() {
        let c = Config::default();
        let mut st = fetching(Position::new(10, Some(3)), None);
        let before = planned_from(&st).data;
        answered(&mut st, &c, ErrorCode::NONE, Some((2, 15)));
        let cur = st.cursor("t", 0).unwrap();
        assert_eq!(cur.state, CursorState::Fetching);
        let after = planned_from(&st).data;
        assert_ne!(
            (after.fetch_offset, after.last_fetched_epoch),
            (before.fetch_offset, before.last_fetched_epoch),
            "the same Fetch again"
        );
        assert_eq!(cur.fetch, Position::new(10, Some(2)), "the leader's epoch");
        // A leader that names the epoch sent: the next Fetch sends none.
        answered(&mut st, &c, ErrorCode::NONE, Some((2, 10)));
        let after2 = planned_from(&st).data;
        assert_eq!(after2.fetch_offset, 10);
        assert_eq!(after2.last_fetched_epoch, -1, "no last fetched epoch");
        assert_eq!(st.cursor("t", 0).unwrap().state, CursorState::Fetching);
    }

    /// Records 0..10 wait for the application while the fetch position is
    /// at 10; the leader says epoch 3 ends at 6. Records 0..6 are valid and are handed out,
    /// records 6..10 are dropped, fetching goes on at 6 with no error and no reset.
    #[test]
    fn a_divergence_past_the_position_keeps_the_valid_prefetched_records() {
        for policy in [
            super::super::AutoOffsetReset::Latest,
            super::super::AutoOffsetReset::None,
        ] {
            let c = Config {
                auto_offset_reset: policy,
                ..Config::default()
            };
            let mut st = fetching(Position::new(10, Some(4)), Some((0, 10)));
            answered(&mut st, &c, ErrorCode::NONE, Some((3, 6)));
            let cur = st.cursor("t", 0).unwrap();
            assert_eq!(cur.state, CursorState::Fetching, "{policy:?}");
            assert_eq!(cur.fetch, Position::new(6, Some(3)), "{policy:?}");
            assert_eq!(
                taken_offsets(&mut st),
                vec![0, 1, 2, 3, 4, 5],
                "{policy:?}: the records before the divergence are delivered"
            );
            assert_eq!(
                st.cursor("t", 0).unwrap().position,
                Some(Position::new(6, Some(3))),
                "{policy:?}"
            );
        }
        // A divergence before the position (records past it were handed out already) is a
        // truncation: with a policy, the partition goes on at the diverging end.
        let c = Config::default();
        let mut st = fetching(Position::new(10, Some(4)), None);
        answered(&mut st, &c, ErrorCode::NONE, Some((3, 6)));
        assert_eq!(
            st.cursor("t", 0).unwrap().position,
            Some(Position::new(6, Some(3)))
        );
    }

    /// The reset: OFFSET_OUT_OF_RANGE at the fetch position while records
    /// fetched before it wait for the application. They are handed out first (Java fetches a
    /// partition only once its buffered records are consumed, so its reset never drops them);
    /// the reset follows once they are.
    #[test]
    fn out_of_range_past_prefetched_records_resets_only_after_they_are_delivered() {
        let c = Config::default();
        let mut st = fetching(Position::new(10, Some(4)), Some((0, 10)));
        answered(&mut st, &c, ErrorCode::OFFSET_OUT_OF_RANGE, None);
        assert_eq!(taken_offsets(&mut st), (0..10).collect::<Vec<_>>());
        answered(&mut st, &c, ErrorCode::OFFSET_OUT_OF_RANGE, None);
        assert!(
            matches!(st.cursor("t", 0).unwrap().state, CursorState::Reset(_)),
            "reset once nothing is queued"
        );
    }

    /// Per partition: UNKNOWN_SERVER_ERROR (Java logs it and fetches again)
    /// and TOPIC_AUTHORIZATION_FAILED (Java raises it from poll and fetches again: ACLs may
    /// still be propagating) leave the partition fetchable after a backoff; the authorization
    /// error is reported once.
    #[test]
    fn errors_java_retries_leave_the_partition_fetchable() {
        let c = Config::default();
        let mut st = fetching(Position::new(10, Some(4)), None);
        answered(&mut st, &c, ErrorCode::UNKNOWN_SERVER_ERROR, None);
        let cur = st.cursor("t", 0).unwrap();
        assert_eq!(cur.state, CursorState::Fetching, "UNKNOWN_SERVER_ERROR");
        assert!(cur.retry_at.is_some(), "after a backoff");
        assert!(st.take(10).1.is_none(), "not reported");
        for _ in 0..3 {
            answered(&mut st, &c, ErrorCode::TOPIC_AUTHORIZATION_FAILED, None);
            assert_eq!(st.cursor("t", 0).unwrap().state, CursorState::Fetching);
        }
        let (_, err, _) = st.take(10);
        assert!(err.is_some(), "reported");
        assert!(st.take(10).1.is_none(), "once");
        answered(&mut st, &c, ErrorCode::NONE, None);
        answered(&mut st, &c, ErrorCode::TOPIC_AUTHORIZATION_FAILED, None);
        assert!(st.take(10).1.is_some(), "again after an answer");
    }

    /// The decision: a preferred read replica (KIP-392) that the reader's
    /// metadata does not list is remembered, not fetched from (no source started for it: its
    /// dial would fail and send the partition back to the leader at every answer), and
    /// metadata is asked for; once metadata lists it, the partition moves there until the
    /// preference expires. A listed replica is used at once.
    #[test]
    fn a_preferred_replica_missing_from_metadata_is_remembered_until_listed() {
        let c = Config::default();
        let counters = super::super::stats::Counters::default();
        let mut st = fetching(Position::new(0, None), None);
        st.brokers = [1, 2, 3].into();
        let prefer = |st: &mut State, replica: i32| {
            let planned = planned_from(st);
            let mut a = Answer::error(ErrorCode::NONE, &planned);
            a.preferred_read_replica = replica;
            let mut fu = Followup::default();
            apply_one(st, &c, 1, &planned, a, &mut fu, &counters);
            fu
        };
        for _ in 0..3 {
            let fu = prefer(&mut st, 4);
            assert!(
                fu.nodes.is_empty(),
                "no source for broker 4: {:?}",
                fu.nodes
            );
            let cur = st.cursor("t", 0).unwrap();
            assert_eq!(
                cur.fetch_node(Instant::now()),
                Some(1),
                "the leader meanwhile"
            );
            assert_eq!(cur.unlisted_replica.map(|(r, _)| r), Some(4));
            assert!(
                st.replica_lookup_wanted && fu.wake_manager,
                "metadata asked for"
            );
        }
        use crate::conn::metadata::{Broker, Metadata};
        let broker = |node_id: i32| Broker {
            node_id,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: None,
        };
        let md = Metadata {
            brokers: (1..=4).map(broker).collect(),
            cluster_id: None,
            controller_id: 1,
            topics: Vec::new(),
        };
        let fu = super::super::offsets::apply_metadata(&mut st, &c, &md, &[]);
        assert_eq!(fu.nodes, [4], "broker 4's source starts");
        let cur = st.cursor("t", 0).unwrap();
        assert_eq!(cur.fetch_node(Instant::now()), Some(4), "listed now");
        assert_eq!(cur.unlisted_replica, None);
        // A listed replica is taken at once.
        let fu = prefer(&mut st, 2);
        assert_eq!(fu.nodes, [2]);
        assert_eq!(
            st.cursor("t", 0).unwrap().fetch_node(Instant::now()),
            Some(2)
        );
    }
}
