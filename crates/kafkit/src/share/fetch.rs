//! The reader's side of a share group member: one ShareFetch per broker that leads an
//! assigned partition, all in flight at once, at most one request per broker at a time
//! (KIP-932). Acknowledgements ride on the next ShareFetch to the partition's leader; a
//! ShareAcknowledge carries them when the partition is no longer fetched there, when a Renew
//! is among them (KIP-1222: a request with `IsRenewAck` fetches nothing), on commit and on
//! close (epoch -1, which also ends the share session and releases what the member still
//! holds).
//!
//! Each broker's requests go on a connection of the reader's own, one at a time, so the
//! session epoch of each request is the one before it plus one ([`super::session`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use kafkit_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatch,
};
use kafkit_protocol::messages::share_fetch_request::{
    AcknowledgementBatch as FetchAckBatch, FetchPartition, FetchTopic, ForgottenTopic,
};
use kafkit_protocol::messages::share_fetch_response::PartitionData;
use kafkit_protocol::messages::{
    ShareAcknowledgeRequest, ShareAcknowledgeResponse, ShareFetchRequest, ShareFetchResponse,
};
use kafkit_protocol::records::DecodeOptions;
use kafkit_protocol::{ErrorCode, Uuid, VersionRange};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::conn::Conn;
use crate::conn::aborted::AbortedFilter;
use crate::conn::records::walk_batches;
use crate::error::share::ShareError;
use crate::error::{Error, Result};
use crate::reader::ConsumerRecord;

use super::acks::Outgoing;
use super::member::{Counters, Shared};
use super::session::{Session, Tip};
use super::{AcknowledgementCommit, ShareRecord};

/// The most offsets of one partition's acquired ranges looked at for gaps per answer: a
/// hostile answer's range cannot make the reader loop for long.
const MAX_GAP_SCAN: i64 = 1 << 20;

/// A request's answer, from its task.
pub(crate) struct Answer {
    node: i32,
    /// The acknowledgements it carried, per partition.
    acks: Vec<(Tip, Outgoing)>,
    result: Result<Resp>,
    at: Instant,
    /// The request's round trip (KIP-714's latencies).
    took: Duration,
}

enum Resp {
    Fetch(ShareFetchResponse),
    Acknowledge(ShareAcknowledgeResponse),
}

/// One broker: the reader's connection to it, its share session, the request in flight.
#[derive(Default)]
struct Broker {
    conn: Option<Conn>,
    session: Session,
    /// The request in flight (its task), at most one.
    in_flight: Option<AbortHandle>,
    /// No request before this (after a failure).
    retry_at: Option<Instant>,
}

/// The fetch side of a reader.
pub(crate) struct Fetcher {
    brokers: HashMap<i32, Broker>,
    /// Topic names by id (from metadata).
    names: HashMap<Uuid, Arc<str>>,
    /// The leader of each partition fetched or acknowledged (kept after an unassignment, for
    /// the acknowledgements still owed).
    leaders: HashMap<Tip, i32>,
    /// The assignment version routed.
    routed: Option<u64>,
    assignment: Vec<Tip>,
    /// Leaders must be looked up again (a leader moved, a partition or topic is unknown).
    stale: bool,
    /// Records fetched, not handed out yet.
    pub(crate) ready: VecDeque<ShareRecord>,
    /// Acknowledgement outcomes for the commit that runs (`None` outside a commit).
    pub(crate) settled: Option<Vec<AcknowledgementCommit>>,
    /// A partition error the application must hear of, for the next poll.
    pub(crate) error: Option<Error>,
    /// Where the request tasks put their answers.
    tx: mpsc::UnboundedSender<Answer>,
    rx: mpsc::UnboundedReceiver<Answer>,
}

impl Fetcher {
    pub(crate) fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Fetcher {
            brokers: HashMap::new(),
            names: HashMap::new(),
            leaders: HashMap::new(),
            routed: None,
            assignment: Vec::new(),
            stale: true,
            ready: VecDeque::new(),
            settled: None,
            error: None,
            tx,
            rx,
        }
    }

    /// `assignment` as (topic, partition), for the topics whose names are known.
    pub(crate) fn named(&self, assignment: &[Tip]) -> Vec<(Arc<str>, i32)> {
        assignment
            .iter()
            .filter_map(|(id, p)| self.names.get(id).map(|n| (n.clone(), *p)))
            .collect()
    }

    /// Whether a request is in flight to any broker.
    pub(crate) fn in_flight(&self) -> bool {
        self.brokers.values().any(|b| b.in_flight.is_some())
    }

    /// Takes the member's assignment (when it changed) and looks leaders up when needed.
    ///
    /// Errors: the metadata look-up's, only when no leader at all is known.
    pub(crate) async fn route(&mut self, shared: &Shared) -> Result<()> {
        let (version, assignment) = {
            let st = shared.state();
            (st.version, st.assignment.clone())
        };
        if self.routed != Some(version) {
            self.routed = Some(version);
            self.assignment = assignment;
            self.stale = true;
        }
        let unknown = self
            .assignment
            .iter()
            .any(|t| !self.names.contains_key(&t.0) || !self.leaders.contains_key(t));
        // Partitions that owe acknowledgements but lost their leader (a move, or a topic no
        // longer subscribed to): looked up too, or what they owe would never go.
        let owing: BTreeSet<Arc<str>> = shared
            .acks()
            .iter()
            .filter(|(t, a)| a.has_pending() && !self.leaders.contains_key(t))
            .filter_map(|(t, _)| self.names.get(&t.0).cloned())
            .collect();
        if !(self.stale || unknown || !owing.is_empty())
            || (self.assignment.is_empty() && owing.is_empty())
        {
            return Ok(());
        }
        let mut topics: Vec<String> = shared.state().topics.clone();
        topics.extend(owing.iter().map(|t| t.to_string()));
        topics.sort();
        topics.dedup();
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let md = match shared.transport.metadata_for(&names).await {
            Ok(md) => md,
            Err(e) if self.leaders.is_empty() => return Err(e),
            Err(e) => {
                tracing::debug!(error = %e, "share reader: metadata refresh failed");
                return Ok(());
            }
        };
        for t in &md.topics {
            if t.topic_id.is_zero() {
                continue;
            }
            let name: Arc<str> = Arc::from(t.name.as_str());
            self.names.insert(t.topic_id, name);
            for p in &t.partitions {
                if p.leader_id >= 0 {
                    self.leaders.insert((t.topic_id, p.partition), p.leader_id);
                }
            }
        }
        self.stale = false;
        Ok(())
    }

    /// Starts a request to every broker that has none in flight and has partitions to fetch
    /// or acknowledgements to send. `fetch`: whether to fetch (false on commit and close: only
    /// acknowledgements go). `urgent_before`: only the acknowledgements whose records' locks
    /// run out before it (a poll handing out fetched records: the rest ride on the next
    /// ShareFetch).
    pub(crate) async fn send_all(
        &mut self,
        shared: &Shared,
        fetch: bool,
        urgent_before: Option<std::time::Instant>,
    ) {
        let wanted = self.wanted();
        let pending = self.pending_by_broker(shared, urgent_before);
        let mut nodes: BTreeSet<i32> = pending.keys().copied().collect();
        if fetch {
            nodes.extend(wanted.keys().copied());
        }
        let now = Instant::now();
        for node in nodes {
            let b = self.brokers.entry(node).or_default();
            if b.in_flight.is_some() || b.retry_at.is_some_and(|t| t > now) {
                continue;
            }
            let conn = match ready_conn(shared, node, b).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(node, error = %e, "share reader: cannot reach the broker");
                    b.retry_at = Some(Instant::now() + shared.config.retry_backoff);
                    shared.transport.invalidate_metadata();
                    self.stale = true;
                    continue;
                }
            };
            let empty = BTreeSet::new();
            let fetched = if fetch {
                wanted.get(&node).unwrap_or(&empty)
            } else {
                &empty
            };
            let acks = pending.get(&node).cloned().unwrap_or_default();
            self.start(shared, node, conn, fetched, &acks, fetch);
        }
        let busy = self
            .brokers
            .values()
            .filter(|b| b.in_flight.is_some())
            .count() as u64;
        if busy > 0 {
            Counters::add(&shared.stats.rounds, 1);
            shared
                .stats
                .max_in_flight
                .fetch_max(busy, Ordering::Relaxed);
        }
    }

    /// Builds and spawns one broker's request: a ShareAcknowledge when the session is open
    /// and acknowledgements cannot ride on a ShareFetch (nothing to fetch there, a Renew among
    /// them, or a partition the session does not fetch), else a ShareFetch (with the
    /// acknowledgements when the session is open), else, with only acknowledgements and no
    /// session, an empty ShareFetch opening one.
    fn start(
        &mut self,
        shared: &Shared,
        node: i32,
        conn: Conn,
        fetched: &BTreeSet<Tip>,
        acks: &[Tip],
        fetch: bool,
    ) {
        let tx = self.tx.clone();
        let b = self
            .brokers
            .get_mut(&node)
            .expect("broker entry made by send_all");
        let fetching = fetch && !fetched.is_empty();
        let open = b.session.is_open();
        let apart = !fetching
            || has_renew(shared, acks)
            || acks
                .iter()
                .any(|t| !fetched.contains(t) || !b.session.holds(t));
        if open && !acks.is_empty() && apart {
            let taken = take_acks(shared, acks);
            if !taken.is_empty() {
                let epoch = b.session.next_ack().expect("the session is open");
                let renew = taken.iter().any(|(_, o)| o.has_renew());
                let req = acknowledge_request(shared, epoch, &taken, renew);
                Counters::add(&shared.stats.share_acknowledges, 1);
                b.in_flight = Some(spawn_ack(tx, conn, node, req, taken));
                return;
            }
        }
        if !fetching && (open || acks.is_empty()) {
            return;
        }
        // Epoch 0 carries no acknowledgement: they wait for the session it opens.
        let taken = if open && fetching {
            take_acks(shared, acks)
        } else {
            Vec::new()
        };
        let wanted = if fetching {
            fetched.clone()
        } else {
            BTreeSet::new()
        };
        let plan = b.session.next_fetch(&wanted);
        let req = fetch_request(shared, &plan, &taken, fetching);
        Counters::add(&shared.stats.share_fetches, 1);
        let wait = if fetching {
            shared.config.fetch_max_wait
        } else {
            Duration::ZERO
        };
        b.in_flight = Some(spawn_fetch(tx, conn, node, req, wait, taken));
    }

    /// The partitions to fetch, by leader.
    fn wanted(&self) -> HashMap<i32, BTreeSet<Tip>> {
        let mut out: HashMap<i32, BTreeSet<Tip>> = HashMap::new();
        for t in &self.assignment {
            if let Some(l) = self.leaders.get(t) {
                out.entry(*l).or_default().insert(*t);
            }
        }
        out
    }

    /// The partitions with acknowledgements to send, by leader.
    fn pending_by_broker(
        &self,
        shared: &Shared,
        urgent_before: Option<std::time::Instant>,
    ) -> HashMap<i32, Vec<Tip>> {
        let mut out: HashMap<i32, Vec<Tip>> = HashMap::new();
        for (t, a) in shared.acks().iter() {
            let due = urgent_before.map_or(a.has_pending(), |b| a.is_urgent(b));
            if due && let Some(l) = self.leaders.get(t) {
                out.entry(*l).or_default().push(*t);
            }
        }
        out
    }

    /// Waits for the first answer (or `deadline`), then reads every answer that is in.
    /// Returns whether any answer was read.
    ///
    /// Cancel safe: an answer not read stays queued for the next call.
    pub(crate) async fn wait_answers(&mut self, shared: &Shared, deadline: Instant) -> bool {
        if !self.in_flight() {
            return false;
        }
        let first = match tokio::time::timeout_at(deadline, self.rx.recv()).await {
            Ok(Some(a)) => a,
            Ok(None) | Err(_) => return false,
        };
        self.take_answer(shared, first);
        self.read_answers(shared);
        true
    }

    /// Reads every answer that is in.
    pub(crate) fn read_answers(&mut self, shared: &Shared) {
        while let Ok(a) = self.rx.try_recv() {
            self.take_answer(shared, a);
        }
    }

    fn take_answer(&mut self, shared: &Shared, a: Answer) {
        if let Some(b) = self.brokers.get_mut(&a.node) {
            b.in_flight = None;
        }
        self.answered(shared, a);
    }

    /// Waits for every request in flight, until `deadline`.
    pub(crate) async fn drain(&mut self, shared: &Shared, deadline: Instant) {
        while self.in_flight() && Instant::now() < deadline {
            self.wait_answers(shared, deadline).await;
        }
    }

    /// Applies one answer.
    fn answered(&mut self, shared: &Shared, a: Answer) {
        let node = a.node;
        let resp = match a.result {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(node, error = %e, "share request failed");
                if let Some(b) = self.brokers.get_mut(&node) {
                    b.session.reset();
                    if let Some(c) = b.conn.take() {
                        c.close();
                        shared.transport.retire_unpooled(node, &c);
                    }
                    b.retry_at = Some(Instant::now() + shared.config.retry_backoff);
                }
                shared.transport.invalidate_metadata();
                self.stale = true;
                self.settle_all(shared, a.acks, |_| Err(lost(&e)));
                return;
            }
        };
        let fetch = matches!(resp, Resp::Fetch(_));
        shared.stats.kip714.answered(node, a.took, fetch);
        match resp {
            Resp::Fetch(r) => self.fetched(shared, node, r, a.acks, a.at),
            Resp::Acknowledge(r) => self.acknowledged(shared, node, r, a.acks),
        }
    }

    /// A top-level error code of either answer: true when the answer is to be read on.
    fn top_level(
        &mut self,
        shared: &Shared,
        node: i32,
        operation: &'static str,
        code: ErrorCode,
        message: Option<String>,
        acks: &mut Vec<(Tip, Outgoing)>,
    ) -> bool {
        if code.is_ok() {
            return true;
        }
        let b = self.brokers.entry(node).or_default();
        b.session.reset();
        if matches!(
            code,
            ErrorCode::SHARE_SESSION_NOT_FOUND
                | ErrorCode::INVALID_SHARE_SESSION_EPOCH
                | ErrorCode::SHARE_SESSION_LIMIT_REACHED
        ) || code.is_retriable()
        {
            // The broker read none of it: the acknowledgements go again in the new session.
            tracing::debug!(node, %code, "share session starts over");
            put_back(shared, std::mem::take(acks));
            b.retry_at = Some(Instant::now() + shared.config.retry_backoff);
            return false;
        }
        self.settle_all(shared, std::mem::take(acks), |_| {
            Err(Error::broker(operation, code, message.clone()))
        });
        let mut st = shared.state();
        if st.fatal.is_none() {
            st.fatal = Some(ShareError::Fatal {
                group_id: shared.config.group_id.clone(),
                operation,
                code,
                message,
            });
        }
        false
    }

    /// A ShareFetch answer: acknowledgement results, leader moves, records.
    fn fetched(
        &mut self,
        shared: &Shared,
        node: i32,
        r: ShareFetchResponse,
        mut acks: Vec<(Tip, Outgoing)>,
        at: Instant,
    ) {
        if !self.top_level(
            shared,
            node,
            "ShareFetch",
            r.error_code,
            r.error_message,
            &mut acks,
        ) {
            return;
        }
        let lock = Duration::from_millis(r.acquisition_lock_timeout_ms.max(0) as u64);
        if r.acquisition_lock_timeout_ms > 0 {
            shared.state().lock_timeout = Some(lock);
        }
        let endpoints: Vec<(i32, &str, i32)> = r
            .node_endpoints
            .iter()
            .map(|e| (e.node_id, e.host.as_str(), e.port))
            .collect();
        let mut codes: HashMap<Tip, (ErrorCode, Option<String>)> = HashMap::new();
        for t in &r.responses {
            let Some(topic) = self.names.get(&t.topic_id).cloned() else {
                continue;
            };
            for p in &t.partitions {
                let tip = (t.topic_id, p.partition_index);
                codes.insert(
                    tip,
                    (
                        p.acknowledge_error_code,
                        p.acknowledge_error_message.clone(),
                    ),
                );
                if p.error_code.is_ok() {
                    self.records(shared, tip, &topic, p, at + lock);
                } else {
                    self.partition_error(
                        shared,
                        &topic,
                        tip,
                        p.error_code,
                        &p.current_leader,
                        &endpoints,
                    );
                }
            }
        }
        self.settle_codes(shared, "ShareFetch", acks, &codes);
    }

    /// A ShareAcknowledge answer.
    fn acknowledged(
        &mut self,
        shared: &Shared,
        node: i32,
        r: ShareAcknowledgeResponse,
        mut acks: Vec<(Tip, Outgoing)>,
    ) {
        if !self.top_level(
            shared,
            node,
            "ShareAcknowledge",
            r.error_code,
            r.error_message,
            &mut acks,
        ) {
            return;
        }
        let mut codes: HashMap<Tip, (ErrorCode, Option<String>)> = HashMap::new();
        for t in &r.responses {
            for p in &t.partitions {
                let tip = (t.topic_id, p.partition_index);
                codes.insert(tip, (p.error_code, p.error_message.clone()));
                if matches!(
                    p.error_code,
                    ErrorCode::NOT_LEADER_OR_FOLLOWER | ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                ) {
                    self.leaders.remove(&tip);
                    self.stale = true;
                }
            }
        }
        self.settle_codes(shared, "ShareAcknowledge", acks, &codes);
    }

    /// A partition's fetch error: a leader hint applied (KIP-951), or the leaders looked up
    /// again.
    fn partition_error(
        &mut self,
        shared: &Shared,
        topic: &str,
        tip: Tip,
        code: ErrorCode,
        leader: &kafkit_protocol::messages::share_fetch_response::LeaderIdAndEpoch,
        endpoints: &[(i32, &str, i32)],
    ) {
        tracing::debug!(topic, partition = tip.1, %code, "share fetch partition error");
        if !refreshes_metadata(code) && self.error.is_none() {
            // Not a move the reader follows on its own (an authorization failure, an invalid
            // request...): the next poll says so.
            self.error = Some(Error::broker(
                "ShareFetch",
                code,
                Some(format!("{topic}/{}", tip.1)),
            ));
        }
        if matches!(
            code,
            ErrorCode::NOT_LEADER_OR_FOLLOWER | ErrorCode::FENCED_LEADER_EPOCH
        ) && leader.leader_id >= 0
        {
            let ep = endpoints
                .iter()
                .find(|e| e.0 == leader.leader_id)
                .map(|e| (e.1, e.2));
            shared
                .transport
                .update_leader(topic, tip.1, leader.leader_id, leader.leader_epoch, ep);
            self.leaders.insert(tip, leader.leader_id);
            return;
        }
        self.leaders.remove(&tip);
        shared.transport.invalidate_topics([topic]);
        self.stale = true;
    }

    /// One partition's acquired records: handed to `ready`; the acquired offsets without a
    /// record settled ([`settle_unseen`]).
    fn records(
        &mut self,
        shared: &Shared,
        tip: Tip,
        topic: &Arc<str>,
        p: &PartitionData,
        deadline: Instant,
    ) {
        if p.acquired_records.is_empty() {
            return;
        }
        let before = self.ready.len();
        let walked_to = decode_acquired(&mut self.ready, shared, tip, topic, p, deadline);
        let acquired = self.ready.len() - before;
        Counters::add(&shared.stats.records_acquired, acquired as u64);
        let mut acks = shared.acks();
        let part = acks.entry(tip).or_default();
        let offsets = self.ready.range(before..).map(|r| r.offset);
        let released = settle_unseen(part, &p.acquired_records, offsets, walked_to);
        if released > 0 {
            tracing::warn!(
                topic = &**topic,
                partition = tip.1,
                released,
                "share fetch: acquired records did not come whole or did not decode: released"
            );
        }
    }

    /// Reports acknowledgements by the per-partition codes of an answer.
    fn settle_codes(
        &mut self,
        shared: &Shared,
        operation: &'static str,
        acks: Vec<(Tip, Outgoing)>,
        codes: &HashMap<Tip, (ErrorCode, Option<String>)>,
    ) {
        self.settle_all(shared, acks, |tip| match codes.get(tip) {
            Some((c, _)) if c.is_ok() => Ok(()),
            Some((c, m)) => Err(Error::broker(operation, *c, m.clone())),
            None => Err(Error::Protocol(format!(
                "{operation}: the answer left out partition {} of a topic acknowledged",
                tip.1
            ))),
        });
    }

    /// Reports acknowledgements: the callback, the stats, and the commit's list.
    fn settle_all(
        &mut self,
        shared: &Shared,
        acks: Vec<(Tip, Outgoing)>,
        result: impl Fn(&Tip) -> Result<()>,
    ) {
        for (tip, out) in acks {
            let offsets = out.acknowledged();
            let result = result(&tip);
            let n = offsets.len() as u64;
            if result.is_ok() {
                Counters::add(&shared.stats.acknowledgements_sent, n);
            } else {
                Counters::add(&shared.stats.acknowledgements_failed, n);
            }
            if offsets.is_empty() {
                continue;
            }
            let commit = AcknowledgementCommit {
                topic: self
                    .names
                    .get(&tip.0)
                    .cloned()
                    .unwrap_or_else(|| Arc::from("")),
                partition: tip.1,
                offsets,
                result,
            };
            if let Some(cb) = &shared.config.on_acknowledged {
                cb(&commit);
            }
            if let Some(list) = &mut self.settled {
                list.push(commit);
            }
        }
    }

    /// Closes every share session (ShareAcknowledge at epoch -1 with what is pending), then
    /// the connections.
    pub(crate) async fn close_sessions(&mut self, shared: &Shared, deadline: Instant) {
        self.drain(shared, deadline).await;
        let pending = self.pending_by_broker(shared, None);
        let nodes: Vec<i32> = self.brokers.keys().copied().collect();
        for node in nodes {
            let b = self.brokers.get_mut(&node).expect("listed");
            let (Some(conn), Some(epoch)) = (b.conn.clone(), b.session.close()) else {
                continue;
            };
            let tips = pending.get(&node).cloned().unwrap_or_default();
            let taken = take_acks(shared, &tips);
            let renew = taken.iter().any(|(_, o)| o.has_renew());
            let req = acknowledge_request(shared, epoch, &taken, renew);
            Counters::add(&shared.stats.share_acknowledges, 1);
            b.in_flight = Some(spawn_ack(self.tx.clone(), conn, node, req, taken));
        }
        self.drain(shared, deadline).await;
        // What could not be sent (no session, no leader, no time left) is reported, not lost.
        let left: Vec<Tip> = shared
            .acks()
            .iter()
            .filter(|(_, a)| a.has_pending())
            .map(|(t, _)| *t)
            .collect();
        let left = take_acks(shared, &left);
        self.settle_all(shared, left, |_| {
            Err(Error::broker(
                "ShareAcknowledge",
                ErrorCode::NETWORK_EXCEPTION,
                Some("not sent: the reader closed first".into()),
            ))
        });
        for (node, b) in &mut self.brokers {
            if let Some(h) = b.in_flight.take() {
                h.abort();
            }
            if let Some(c) = b.conn.take() {
                c.close();
                shared.transport.retire_unpooled(*node, &c);
            }
        }
    }
}

/// Decodes one partition's records into `ready`: those in an acquired range, in offset order,
/// each once. Returns the offset up to which whole batches were walked.
fn decode_acquired(
    ready: &mut VecDeque<ShareRecord>,
    shared: &Shared,
    tip: Tip,
    topic: &Arc<str>,
    p: &PartitionData,
    deadline: Instant,
) -> i64 {
    let ranges = &p.acquired_records;
    let from = ranges.first().map_or(0, |a| a.first_offset);
    let empty = Bytes::new();
    let data = p.records.as_ref().unwrap_or(&empty);
    let mut budget = usize::try_from(shared.config.fetch_max_bytes)
        .unwrap_or(usize::MAX)
        .saturating_mul(4)
        .max(64 << 20);
    let mut filter = AbortedFilter::read_uncommitted();
    let lock_deadline = deadline.into_std();
    let mut last = i64::MIN;
    let mut range = 0usize;
    let walked = walk_batches(
        data,
        DecodeOptions::new(),
        &mut budget,
        from,
        &mut filter,
        |h, kept| {
            let Some(records) = kept else { return };
            for r in records {
                while range < ranges.len() && ranges[range].last_offset < r.offset {
                    range += 1;
                }
                let Some(a) = ranges.get(range).filter(|a| a.first_offset <= r.offset) else {
                    continue;
                };
                if r.offset <= last {
                    continue;
                }
                last = r.offset;
                ready.push_back(ShareRecord {
                    record: ConsumerRecord {
                        topic: topic.clone(),
                        partition: tip.1,
                        offset: r.offset,
                        leader_epoch: (h.partition_leader_epoch >= 0)
                            .then_some(h.partition_leader_epoch),
                        timestamp: r.timestamp,
                        timestamp_type: h.timestamp_type,
                        key: r.key,
                        value: r.value,
                        headers: r.headers,
                        span: Default::default(),
                    },
                    delivery_count: u16::try_from(a.delivery_count).unwrap_or(0),
                    lock_deadline,
                    tip,
                    reader: shared.id,
                });
            }
        },
    );
    if let Some(e) = &walked.error {
        tracing::warn!(topic = &**topic, partition = tip.1, error = %e, "share fetch: a batch did not decode");
    }
    walked.next_offset
}

/// The acquired offsets no record was handed out for: below `walked_to` (whole batches
/// walked) they are gaps (transaction markers, records compacted away: the wire's Gap, which
/// archives them); from there on (a batch that did not decode or did not come whole) they are
/// released for another delivery. `delivered`: the offsets handed to `ready`, ascending. At
/// most [`MAX_GAP_SCAN`] offsets are looked at. Returns how many were released.
fn settle_unseen(
    part: &mut super::acks::PartAcks,
    ranges: &[kafkit_protocol::messages::share_fetch_response::AcquiredRecords],
    delivered: impl Iterator<Item = i64>,
    walked_to: i64,
) -> usize {
    let mut delivered = delivered.peekable();
    let mut scanned = 0i64;
    let mut released = 0;
    for a in ranges {
        if scanned >= MAX_GAP_SCAN || a.last_offset < a.first_offset {
            break;
        }
        let last = a
            .last_offset
            .min(a.first_offset.saturating_add(MAX_GAP_SCAN - scanned - 1));
        for o in a.first_offset..=last {
            while delivered.next_if(|d| *d < o).is_some() {}
            if delivered.next_if_eq(&o).is_some() {
                continue;
            }
            if o < walked_to {
                part.gap(o);
            } else {
                part.release_unseen(o);
                released += 1;
            }
        }
        scanned += last - a.first_offset + 1;
    }
    released
}

/// Whether a ShareFetch partition error is one the reader follows by itself (a leader moved,
/// metadata is stale, the broker is busy): the others reach the application.
fn refreshes_metadata(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NOT_LEADER_OR_FOLLOWER
            | ErrorCode::FENCED_LEADER_EPOCH
            | ErrorCode::UNKNOWN_LEADER_EPOCH
            | ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
            | ErrorCode::UNKNOWN_TOPIC_ID
            | ErrorCode::LEADER_NOT_AVAILABLE
    ) || code.is_retriable()
}

/// The broker's connection, dialled when there is none (a new connection starts a new
/// session).
async fn ready_conn(shared: &Shared, node: i32, b: &mut Broker) -> Result<Conn> {
    if let Some(c) = b.conn.as_ref().filter(|c| !c.is_closed()) {
        return Ok(c.clone());
    }
    if let Some(c) = b.conn.take() {
        shared.transport.retire_unpooled(node, &c);
    }
    b.session.reset();
    let c = shared.transport.dial_unpooled(node).await?;
    b.retry_at = None;
    b.conn = Some(c.clone());
    Ok(c)
}

/// The error reported for each acknowledgement of a request that got no answer: the
/// connection's failure as `NETWORK_EXCEPTION` (as Java reports it), the broker's code as is.
fn lost(e: &Error) -> Error {
    match e {
        Error::Broker {
            operation,
            code,
            message,
        } => Error::broker(operation, *code, message.clone()),
        e => Error::broker(
            "ShareFetch",
            e.error_code().unwrap_or(ErrorCode::NETWORK_EXCEPTION),
            Some(e.to_string()),
        ),
    }
}

/// Whether a Renew waits among the acknowledgements of `tips`.
fn has_renew(shared: &Shared, tips: &[Tip]) -> bool {
    let acks = shared.acks();
    tips.iter()
        .any(|t| acks.get(t).is_some_and(|a| a.has_pending_renew()))
}

/// Takes the pending acknowledgements of `tips` out of the shared state.
fn take_acks(shared: &Shared, tips: &[Tip]) -> Vec<(Tip, Outgoing)> {
    let mut acks = shared.acks();
    tips.iter()
        .filter_map(|t| {
            let out = acks.get_mut(t)?.take();
            (!out.is_empty()).then_some((*t, out))
        })
        .collect()
}

/// Puts acknowledgements the broker did not read back to be sent again.
fn put_back(shared: &Shared, taken: Vec<(Tip, Outgoing)>) {
    let mut acks = shared.acks();
    for (t, out) in taken {
        acks.entry(t).or_default().put_back(out);
    }
}

/// Groups `(tip, item)` by topic id, in order.
fn by_topic<T>(items: impl IntoIterator<Item = (Tip, T)>) -> BTreeMap<Uuid, Vec<(i32, T)>> {
    let mut out: BTreeMap<Uuid, Vec<(i32, T)>> = BTreeMap::new();
    for ((id, p), t) in items {
        out.entry(id).or_default().push((p, t));
    }
    out
}

/// A ShareFetch: the plan's session changes, the acknowledgements, the fetch limits (zero
/// when it only opens a session).
fn fetch_request(
    shared: &Shared,
    plan: &super::session::FetchPlan,
    acks: &[(Tip, Outgoing)],
    fetching: bool,
) -> ShareFetchRequest {
    let c = &shared.config;
    let mut parts: BTreeMap<Tip, Vec<FetchAckBatch>> =
        plan.add.iter().map(|t| (*t, Vec::new())).collect();
    for (t, out) in acks {
        let batches = out.ranges.iter().map(|r| {
            FetchAckBatch::default()
                .with_first_offset(r.first)
                .with_last_offset(r.last)
                .with_acknowledge_types(r.types.clone())
        });
        parts.entry(*t).or_default().extend(batches);
    }
    let topics = by_topic(parts)
        .into_iter()
        .map(|(id, ps)| {
            FetchTopic::default().with_topic_id(id).with_partitions(
                ps.into_iter()
                    .map(|(p, b)| {
                        FetchPartition::default()
                            .with_partition_index(p)
                            .with_acknowledgement_batches(b)
                    })
                    .collect(),
            )
        })
        .collect();
    let forgotten = by_topic(plan.forget.iter().map(|t| (*t, ())))
        .into_iter()
        .map(|(id, ps)| {
            ForgottenTopic::default()
                .with_topic_id(id)
                .with_partitions(ps.into_iter().map(|(p, ())| p).collect())
        })
        .collect();
    let (wait, min, max, records) = if fetching {
        (
            crate::time::wire_ms(c.fetch_max_wait),
            c.fetch_min_bytes,
            c.fetch_max_bytes,
            c.max_poll_records,
        )
    } else {
        (0, 0, 0, 0)
    };
    ShareFetchRequest::default()
        .with_group_id(Some(c.group_id.clone()))
        .with_member_id(Some(shared.member_id.clone()))
        .with_share_session_epoch(plan.epoch)
        .with_max_wait_ms(wait)
        .with_min_bytes(min)
        .with_max_bytes(max)
        .with_max_records(records)
        .with_batch_size(records)
        .with_share_acquire_mode(c.acquire_mode.wire())
        .with_topics(topics)
        .with_forgotten_topics_data(forgotten)
}

/// A ShareAcknowledge carrying `acks` at `epoch`.
fn acknowledge_request(
    shared: &Shared,
    epoch: i32,
    acks: &[(Tip, Outgoing)],
    renew: bool,
) -> ShareAcknowledgeRequest {
    let topics = by_topic(acks.iter().map(|(t, o)| (*t, o)))
        .into_iter()
        .map(|(id, ps)| {
            AcknowledgeTopic::default()
                .with_topic_id(id)
                .with_partitions(
                    ps.into_iter()
                        .map(|(p, out)| {
                            AcknowledgePartition::default()
                                .with_partition_index(p)
                                .with_acknowledgement_batches(
                                    out.ranges
                                        .iter()
                                        .map(|r| {
                                            AckBatch::default()
                                                .with_first_offset(r.first)
                                                .with_last_offset(r.last)
                                                .with_acknowledge_types(r.types.clone())
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                )
        })
        .collect();
    ShareAcknowledgeRequest::default()
        .with_group_id(Some(shared.config.group_id.clone()))
        .with_member_id(Some(shared.member_id.clone()))
        .with_share_session_epoch(epoch)
        .with_is_renew_ack(renew)
        .with_topics(topics)
}

/// The version to send `R` at: the highest both speak, at least 1 (version 0 was KIP-932's
/// early access, removed in Kafka 4.1).
fn version<R: kafkit_protocol::Request>(conn: &Conn) -> Result<i16> {
    let v = conn.version_for::<R>(None)?;
    if v < 1 {
        let max = crate::ops::versions::client_max(R::API_KEY).unwrap_or(1);
        return Err(Error::UnsupportedVersion {
            api: R::API_KEY,
            ours: VersionRange::new(1, max),
            broker: Some(VersionRange::new(0, 0)),
        });
    }
    Ok(v)
}

/// Sends a ShareFetch in a task of its own; the answer goes to `tx`.
fn spawn_fetch(
    tx: mpsc::UnboundedSender<Answer>,
    conn: Conn,
    node: i32,
    req: ShareFetchRequest,
    wait: Duration,
    acks: Vec<(Tip, Outgoing)>,
) -> AbortHandle {
    tokio::spawn(async move {
        let started = Instant::now();
        let result = async {
            let v = version::<ShareFetchRequest>(&conn)?;
            conn.request_at(&req, v, wait).await.map(Resp::Fetch)
        }
        .await;
        let _ = tx.send(Answer {
            node,
            acks,
            result,
            at: Instant::now(),
            took: started.elapsed(),
        });
    })
    .abort_handle()
}

/// Sends a ShareAcknowledge in a task of its own; the answer goes to `tx`.
fn spawn_ack(
    tx: mpsc::UnboundedSender<Answer>,
    conn: Conn,
    node: i32,
    req: ShareAcknowledgeRequest,
    acks: Vec<(Tip, Outgoing)>,
) -> AbortHandle {
    tokio::spawn(async move {
        let started = Instant::now();
        let result = async {
            let v = version::<ShareAcknowledgeRequest>(&conn)?;
            conn.request_at(&req, v, Duration::ZERO)
                .await
                .map(Resp::Acknowledge)
        }
        .await;
        let _ = tx.send(Answer {
            node,
            acks,
            result,
            at: Instant::now(),
            took: started.elapsed(),
        });
    })
    .abort_handle()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::share::acks::PartAcks;
    use kafkit_protocol::messages::share_fetch_response::AcquiredRecords;

    fn range(first: i64, last: i64) -> AcquiredRecords {
        AcquiredRecords::default()
            .with_first_offset(first)
            .with_last_offset(last)
            .with_delivery_count(1)
    }

    /// Leader moves and stale metadata are followed silently; authorization failures and
    /// other final codes reach the application.
    #[test]
    fn which_partition_errors_reach_the_application() {
        for c in [
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            ErrorCode::FENCED_LEADER_EPOCH,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode::UNKNOWN_TOPIC_ID,
            ErrorCode::KAFKA_STORAGE_ERROR,
        ] {
            assert!(refreshes_metadata(c), "{c}");
        }
        for c in [
            ErrorCode::TOPIC_AUTHORIZATION_FAILED,
            ErrorCode::GROUP_AUTHORIZATION_FAILED,
            ErrorCode::INVALID_REQUEST,
        ] {
            assert!(!refreshes_metadata(c), "{c}");
        }
    }

    /// Offsets without a record are gaps up to where the batches were walked whole, released
    /// after it; a hostile range is looked at only up to the scan bound.
    #[test]
    fn unseen_offsets_are_gaps_where_walked_and_released_after() {
        let mut part = PartAcks::default();
        let ranges = [range(10, 14), range(20, 21)];
        let released = settle_unseen(&mut part, &ranges, [10, 12, 14].into_iter(), 20);
        assert_eq!(released, 2, "20 and 21 were not walked");
        let out = part.take();
        let runs: Vec<_> = out.runs.iter().map(|r| (r.first, r.last, r.ty)).collect();
        assert_eq!(runs, vec![(11, 11, 0), (13, 13, 0), (20, 21, 2)]);

        let mut part = PartAcks::default();
        let released = settle_unseen(&mut part, &[range(0, i64::MAX)], std::iter::empty(), 0);
        assert_eq!(released as i64, MAX_GAP_SCAN);
        assert!(settle_unseen(&mut part, &[range(5, 1)], std::iter::empty(), 0) == 0);
    }
}
