//! The Reader's engine state: [`Shared`], what the facade (`mod.rs`), the sources
//! (`source.rs`) and the manager (`offsets.rs`) share, with the phases that run under its lock
//! (`plan`, `release`, `apply`, `manager_work`, `poll_take`) and `follow`, which carries out
//! outside it what they leave to do. The cursors themselves are in `cursor.rs`, the per-cursor
//! answer rules in `apply.rs`, what the phases hand one another in `work.rs`. The tasks it
//! starts reach it as functions the facade hands in ([`TaskFns`]). Imports the state and
//! vocabulary below it (`apply.rs`, `work.rs`, `cursor.rs`, ...), `conn` and `transport`;
//! never a task file (`source.rs`, `offsets.rs`) nor the facade.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::apply;
use super::config::Config;
use super::cursor::{Cursor, CursorState, State, TopicCursors};
use super::record::{self, PartitionRecords};
use super::session;
use super::stats::Counters;
use super::work::{Answer, Followup, Plan, Planned, ResetItem, ValidateItem, Work};
use crate::conn::Conn;
use crate::error::reader::ReaderError;
use crate::error::{Error, Result};
use crate::ops::offsets::IsolationLevel;
use crate::transport::Transport;

/// A task's future, boxed: its type is the task file's.
pub(super) type TaskFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// The Reader's tasks, as the facade (`mod.rs`) wires them: the engine starts them without
/// naming the task files (`source.rs`, `offsets.rs`), which import this one.
pub(super) struct TaskFns {
    /// The manager (once per Reader, on first use).
    pub(super) manager: fn(Arc<Shared>) -> TaskFuture,
    /// One broker's source, woken through its `Notify`.
    pub(super) source: fn(Arc<Shared>, i32, Arc<Notify>) -> TaskFuture,
    /// Closes the fetch session (node, session id) a broker holds for us, on close.
    pub(super) close_session: fn(Transport, i32, i32) -> TaskFuture,
}

/// What the Reader's tasks and its facade share.
pub(crate) struct Shared {
    pub(crate) transport: Transport,
    pub(crate) config: Config,
    state: Mutex<State>,
    pub(crate) counters: Counters,
    pub(crate) manager_wake: Notify,
    tasks: Mutex<Tasks>,
    /// The Reader's tasks, started from here ([`TaskFns`]).
    task_fns: &'static TaskFns,
}

/// The Reader's tasks and fetch connections.
#[derive(Default)]
struct Tasks {
    runtime: Option<Handle>,
    manager: Option<JoinHandle<()>>,
    sources: HashMap<i32, (Arc<Notify>, JoinHandle<()>)>,
    /// The sources' live fetch connections (their request counts go to the transport when
    /// they are given up).
    conns: HashMap<i32, Conn>,
    /// The fetch session each source's broker holds for us (KIP-227), by node: closed when the
    /// Reader closes.
    sessions: HashMap<i32, i32>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    pub(super) fn new(transport: Transport, config: Config, task_fns: &'static TaskFns) -> Shared {
        Shared {
            transport,
            config,
            state: Mutex::new(State::default()),
            counters: Counters::default(),
            manager_wake: Notify::new(),
            tasks: Mutex::new(Tasks::default()),
            task_fns,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Starts the manager task (once), capturing the current runtime for later tasks.
    pub(super) fn start(self: &Arc<Self>) -> Result<()> {
        let mut tasks = lock(&self.tasks);
        if tasks.runtime.is_some() {
            return Ok(());
        }
        let handle = Handle::try_current()
            .map_err(|_| Error::Config("Reader::assign needs a tokio runtime".into()))?;
        tasks.manager = Some(handle.spawn((self.task_fns.manager)(Arc::clone(self))));
        tasks.runtime = Some(handle);
        Ok(())
    }

    /// Starts the sources of `nodes` that have none, and wakes the others.
    fn ensure_sources(self: &Arc<Self>, nodes: &[i32]) {
        if nodes.is_empty() {
            return;
        }
        if self.lock().closed {
            return;
        }
        let mut tasks = lock(&self.tasks);
        let Some(rt) = tasks.runtime.clone() else {
            return;
        };
        for &node in nodes {
            match tasks.sources.get(&node) {
                Some((wake, task)) if !task.is_finished() => wake.notify_one(),
                _ => {
                    let wake = Arc::new(Notify::new());
                    let task = rt.spawn((self.task_fns.source)(
                        Arc::clone(self),
                        node,
                        Arc::clone(&wake),
                    ));
                    tasks.sources.insert(node, (wake, task));
                }
            }
        }
    }

    /// Wakes every source (work may have appeared or buffer room freed).
    pub(super) fn wake_sources(&self) {
        for (wake, _) in lock(&self.tasks).sources.values() {
            wake.notify_one();
        }
    }

    pub(crate) fn note_conn(&self, node: i32, conn: &Conn) {
        lock(&self.tasks).conns.insert(node, conn.clone());
    }

    pub(crate) fn forget_conn(&self, node: i32, conn: &Conn) {
        lock(&self.tasks).conns.remove(&node);
        self.transport.retire_unpooled(node, conn);
    }

    /// Records the fetch session broker `node` holds for us (0: none).
    pub(crate) fn note_session(&self, node: i32, session_id: i32) {
        let mut tasks = lock(&self.tasks);
        if session_id == 0 {
            tasks.sessions.remove(&node);
        } else {
            tasks.sessions.insert(node, session_id);
        }
    }

    /// Every assigned topic.
    pub(crate) fn topics(&self) -> Vec<Arc<str>> {
        self.lock().topics.keys().cloned().collect()
    }

    pub(super) fn close(&self) {
        let waiters = {
            let mut st = self.lock();
            if st.closed {
                return;
            }
            st.closed = true;
            st.queue.clear();
            st.queued_bytes = 0;
            st.take_waiters()
        };
        waiters.into_iter().for_each(std::task::Waker::wake);
        let mut tasks = lock(&self.tasks);
        if let Some(m) = tasks.manager.take() {
            m.abort();
        }
        for (_, (_, task)) in tasks.sources.drain() {
            task.abort();
        }
        for (node, conn) in tasks.conns.drain() {
            conn.close();
            self.transport.retire_unpooled(node, &conn);
        }
        // Each broker's session is closed, as Java's consumer does on close, so that the broker
        // frees its slot at once instead of when it needs it. A session is the broker's, not a
        // connection's: the source's connection, maybe mid-request when its task was aborted,
        // is not used.
        let sessions = std::mem::take(&mut tasks.sessions);
        if let Some(rt) = &tasks.runtime {
            for (node, session_id) in sessions {
                rt.spawn((self.task_fns.close_session)(
                    self.transport.clone(),
                    node,
                    session_id,
                ));
            }
        }
    }

    /// The queue's next records (or error), or `Pending` with the waker kept.
    pub(super) fn poll_take(
        &self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<Result<Vec<PartitionRecords>>> {
        let mut st = self.lock();
        if st.closed {
            return Poll::Ready(Err(Error::Reader(ReaderError::Closed)));
        }
        let (out, err, stale) = st.take(max);
        if stale > 0 {
            Counters::add(&self.counters.discarded, stale);
        }
        if out.is_empty() && err.is_none() {
            if !st.waiters.iter().any(|w| w.will_wake(cx.waker())) {
                st.waiters.push(cx.waker().clone());
            }
            return Poll::Pending;
        }
        drop(st);
        // Room was freed: sources holding back partitions may fetch again.
        self.wake_sources();
        match err {
            Some(e) if out.is_empty() => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(self.with_process_spans(out))),
        }
    }

    /// Hands the reader's process spans to the records taken when they are on (one clone
    /// per partition answer; a branch when off).
    fn with_process_spans(&self, mut out: Vec<PartitionRecords>) -> Vec<PartitionRecords> {
        if self.config.process_spans {
            for p in &mut out {
                p.process = Some(self.config.process.clone());
            }
        }
        out
    }

    /// `plan` of the source of `node`: the cursors it fetches this round, marked in flight.
    pub(crate) fn plan(&self, node: i32, rotation: &mut usize) -> Plan {
        let mut st = self.lock();
        if st.closed {
            return Plan::Stop;
        }
        if self.buffer_full(&st) {
            return Plan::Wait(None);
        }
        let now = Instant::now();
        let limit = usize::try_from(self.config.max_partition_fetch_bytes).unwrap_or(usize::MAX);
        let rc = self.config.isolation_level == IsolationLevel::ReadCommitted;
        let mut next: Option<Instant> = None;
        let mut parts: Vec<Planned> = Vec::new();
        // Partitions left out only because their buffer is full, and whether every planned
        // one was at its log end in its last answer.
        let mut held_back = false;
        let mut all_at_end = true;
        for (topic, tc) in &st.topics {
            for (&partition, c) in &tc.partitions {
                if c.fetch_node(now) != Some(node)
                    || c.state != CursorState::Fetching
                    || c.paused
                    || c.in_flight.is_some()
                {
                    continue;
                }
                if c.queued_bytes >= limit {
                    held_back = true;
                    continue;
                }
                if c.backing_off(now) {
                    next = next.min(c.retry_at).or(c.retry_at);
                    continue;
                }
                all_at_end &= c.at_log_end(rc);
                parts.push(self.planned(node, topic, tc, partition, c));
            }
        }
        if parts.is_empty() {
            return Plan::Wait(next);
        }
        if held_back && all_at_end {
            // The broker would hold such a Fetch for `fetch_max_wait` (nothing to return), and
            // the partitions held back could not be fetched behind it once the application
            // takes their records. Their next Fetch (woken by that take) asks for these too.
            return Plan::Wait(next);
        }
        rotate(&mut parts, rotation);
        let id = st.next_id();
        for p in &parts {
            if let Some(c) = st.cursor_mut(&p.topic, p.partition) {
                c.in_flight = Some(id);
            }
        }
        Plan::Fetch { id, parts }
    }

    /// `plan`: whether the queued records fill `queued_max_bytes`. Paused partitions' records
    /// wait for a resume, not for the application: they are left out of the budget, or one
    /// paused partition could stop every other.
    fn buffer_full(&self, st: &State) -> bool {
        if st.queued_bytes < self.config.queued_max_bytes {
            return false;
        }
        let paused: usize = st
            .cursors()
            .filter(|(_, _, c)| c.paused)
            .map(|(_, _, c)| c.queued_bytes)
            .sum();
        st.queued_bytes.saturating_sub(paused) >= self.config.queued_max_bytes
    }

    /// `plan`: cursor `c` of `topic`/`partition` as the source of `node` fetches it (from a
    /// replica, no leader epoch is sent).
    fn planned(
        &self,
        node: i32,
        topic: &Arc<str>,
        tc: &TopicCursors,
        partition: i32,
        c: &Cursor,
    ) -> Planned {
        let from_replica = c.leader != Some(node);
        Planned {
            topic: Arc::clone(topic),
            topic_id: tc.topic_id,
            partition,
            version: c.version,
            data: session::PartData {
                topic_id: tc.topic_id,
                fetch_offset: c.fetch.offset,
                current_leader_epoch: if from_replica { -1 } else { c.leader_epoch },
                last_fetched_epoch: c.fetch.leader_epoch.unwrap_or(-1),
                max_bytes: self.config.max_partition_fetch_bytes,
            },
            last_epoch: c.fetch.leader_epoch,
            from_replica,
            end_unknown: c.high_watermark < 0,
            barrier: record::Barrier {
                current: Arc::clone(&c.barrier),
                version: c.version,
            },
        }
    }

    /// Gives planned partitions back without an answer (the request failed); `report` is
    /// queued for the application when the failure is one no retry fixes.
    pub(crate) fn release(self: &Arc<Self>, id: u64, parts: &[Planned], report: Option<Error>) {
        let mut nodes = Vec::new();
        let mut wake_manager = false;
        let waiters = {
            let mut st = self.lock();
            for p in parts {
                if let Some(c) = st.cursor_mut(&p.topic, p.partition)
                    && c.in_flight == Some(id)
                {
                    c.in_flight = None;
                    wake_manager |=
                        matches!(c.state, CursorState::Reset(_) | CursorState::Validate);
                    if p.from_replica {
                        c.preferred = None;
                        nodes.extend(c.leader);
                    }
                }
            }
            match report {
                Some(e) => {
                    st.report(e);
                    st.take_waiters()
                }
                None => Vec::new(),
            }
        };
        waiters.into_iter().for_each(std::task::Waker::wake);
        if wake_manager {
            self.manager_wake.notify_one();
        }
        self.ensure_sources(&nodes);
    }

    /// `apply`: an answer's partitions, under the lock (answers of stale cursors dropped),
    /// then the follow-ups outside it.
    pub(crate) fn apply(
        self: &Arc<Self>,
        node: i32,
        id: u64,
        parts: &[Planned],
        answers: Vec<Option<Answer>>,
    ) {
        let mut fu = Followup::default();
        {
            let mut st = self.lock();
            for (p, a) in parts.iter().zip(answers) {
                let Some(c) = st.cursor_mut(&p.topic, p.partition) else {
                    continue;
                };
                if c.in_flight != Some(id) {
                    continue;
                }
                c.in_flight = None;
                if matches!(c.state, CursorState::Reset(_) | CursorState::Validate) {
                    // Sought (or reset) while this Fetch was out: the manager skipped it then.
                    fu.wake_manager = true;
                }
                if c.version != p.version {
                    // Fetched, then dropped by the barrier: counted as both.
                    let n = a
                        .as_ref()
                        .and_then(|a| a.records.as_ref())
                        .map_or(0, |r| r.records.len());
                    Counters::add(&self.counters.fetched, n as u64);
                    Counters::add(&self.counters.discarded, n as u64);
                    continue;
                }
                if let Some(a) = a {
                    if let Some(r) = &a.records {
                        Counters::add(&self.counters.bytes, r.bytes as u64);
                    }
                    apply::apply_one(&mut st, &self.config, node, p, a, &mut fu, &self.counters);
                }
            }
        }
        self.follow(fu);
    }

    /// Carries out what `apply` (or the manager) left to do outside the lock.
    pub(crate) fn follow(self: &Arc<Self>, fu: Followup) {
        if fu.queued {
            let waiters = self.lock().take_waiters();
            waiters.into_iter().for_each(std::task::Waker::wake);
        }
        for (topic, partition, leader, epoch) in &fu.hints {
            self.transport
                .update_leader(topic, *partition, *leader, *epoch, None);
        }
        if fu.metadata_stale {
            self.transport.invalidate_metadata();
        }
        if fu.wake_manager {
            self.manager_wake.notify_one();
        }
        self.ensure_sources(&fu.nodes);
    }

    /// `manager_work` of the manager: what to route, reset and validate now (the resets and
    /// validations marked in flight).
    pub(crate) fn manager_work(&self) -> Option<Work> {
        let mut st = self.lock();
        if st.closed {
            return None;
        }
        let now = Instant::now();
        let id = st.next_id();
        let mut w = Work {
            id,
            ..Work::default()
        };
        let mut route: Vec<Arc<str>> = Vec::new();
        for (topic, partition, c) in st.cursors_mut() {
            if c.state == CursorState::Failed || c.in_flight.is_some() {
                continue;
            }
            if c.backing_off(now) {
                if c.leader.is_none() || c.state != CursorState::Fetching {
                    w.next_due = w.next_due.min(c.retry_at).or(c.retry_at);
                }
                continue;
            }
            if c.leader.is_none() {
                if route.last() != Some(topic) {
                    route.push(Arc::clone(topic));
                }
                continue;
            }
            match c.state {
                CursorState::Reset(spec) => {
                    c.in_flight = Some(id);
                    w.resets.push(ResetItem {
                        topic: Arc::clone(topic),
                        partition,
                        spec,
                        version: c.version,
                        leader_epoch: c.leader_epoch,
                    });
                }
                CursorState::Validate => match c.fetch.leader_epoch {
                    None => c.state = CursorState::Fetching,
                    Some(last_epoch) => {
                        c.in_flight = Some(id);
                        w.validations.push(ValidateItem {
                            topic: Arc::clone(topic),
                            partition,
                            version: c.version,
                            leader_epoch: c.leader_epoch,
                            last_epoch,
                        });
                    }
                },
                CursorState::Fetching | CursorState::Failed => {}
            }
        }
        route.sort();
        route.dedup();
        w.route = route;
        if st.replica_lookup_wanted {
            // At most one lookup every `retry_backoff_max`: the leader names the replica in
            // every answer until metadata lists it.
            let due = st
                .replica_lookup_at
                .map(|at| at + self.config.retry_backoff_max);
            match due.filter(|&due| due > now) {
                Some(due) => w.next_due = w.next_due.min(Some(due)).or(Some(due)),
                None => {
                    st.replica_lookup_wanted = false;
                    st.replica_lookup_at = Some(now);
                    w.replica_lookup = true;
                }
            }
        }
        Some(w)
    }
}

/// `plan`: a fixed order, started one further each round: a busy partition cannot keep the
/// others out of `fetch_max_bytes`.
fn rotate(parts: &mut [Planned], rotation: &mut usize) {
    parts.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let start = *rotation % parts.len();
    parts.rotate_left(start);
    *rotation = rotation.wrapping_add(1);
}
