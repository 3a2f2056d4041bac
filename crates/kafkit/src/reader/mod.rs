//! [`Reader`]: a consumer of explicitly assigned partitions (kafka-go's `Reader`, the Java
//! consumer's `assign` mode), sending ONE Fetch request per broker per round for every
//! assigned partition that broker serves.
//!
//! Layout: `config.rs` (settings table, [`ReaderBuilder`]), `cursor.rs` (cursors, positions,
//! the state behind the lock and the version barrier), `source.rs` (the per-broker fetch task:
//! plan, build, send, decode, apply), `session.rs` (KIP-227 fetch sessions), `offsets.rs` (the
//! manager task: leaders, resets, KIP-320 validation and truncation), `record.rs` (what is
//! handed out), `stats.rs`, `error.rs`. The batches of an answer are walked by
//! `conn/records.rs`'s walker with `conn/aborted.rs`'s `read_committed` filter, the same
//! walker `Conn::fetch_multi` uses.
//!
//! Lock order: the Reader's state lock (`Shared::state`) is taken alone and never held across
//! an `.await`; the tasks lock (`Shared::tasks`: sources, connections) is taken after it is
//! released, never under it. Transport calls (metadata, leader hints, invalidations) happen
//! outside both.

mod config;
mod cursor;
mod error;
mod offsets;
mod record;
mod session;
mod source;
mod stats;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use tokio::runtime::Handle;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use self::config::{AutoOffsetReset, ReaderBuilder};
pub use self::cursor::{Position, StartOffset};
pub use self::error::ReaderError;
pub use self::record::{ConsumerRecord, PartitionRecords};
pub use self::stats::{FetchState, PartitionStats, ReaderStats};

use self::config::Config;
use self::cursor::{CursorState, State};
use self::offsets::{ResetItem, ValidateItem, Work};
pub(crate) use self::record::{Barrier, ConsumerRecords};
use self::source::{Answer, Followup, Plan, Planned};
use self::stats::Counters;
use crate::conn::Conn;
use crate::conn::offsets::IsolationLevel;
use crate::error::{Error, Result};
use crate::transport::Transport;

/// A consumer of explicitly assigned partitions.
///
/// Every round, each broker that serves assigned partitions (their leader, or a preferred read
/// replica, KIP-392) gets **one** Fetch request covering all of them, on a connection the
/// Reader keeps for itself (never the transport's pooled one, so a long poll never delays other
/// requests, and two Readers never wait for each other). The next Fetch to a broker is in
/// flight while the records of the previous one are being read (prefetch), bounded by
/// `queued_max_bytes` and `max_partition_fetch_bytes` (see [`ReaderBuilder`]).
///
/// Positions advance **by batch**: past transaction markers, aborted batches and batches that
/// compaction emptied, so a partition never asks for the same offset twice. A seek, a reset and
/// an unassignment are behind a **version barrier**: once they return, no record of that
/// partition fetched before is handed out.
///
/// Records come as a [`futures_core::Stream`] of `Result<ConsumerRecord>` (the `Reader` itself)
/// or, for throughput, per partition with [`Reader::next_batch`]. A partition's error (out of
/// range without a reset policy, log truncation, a corrupt batch, a broker error no retry
/// fixes) is reported once as [`Error::Reader`] and stops only that partition.
///
/// ```no_run
/// use kafkit::{Reader, StartOffset, Transport};
///
/// # async fn run() -> Result<(), kafkit::Error> {
/// let transport = Transport::builder(["127.0.0.1:9092"]).build()?;
/// let reader = Reader::builder(transport).build()?;
/// reader.assign([("orders", 0, StartOffset::Earliest), ("orders", 1, StartOffset::At(42))])?;
/// loop {
///     for part in reader.next_batch().await? {
///         for r in &part.records {
///             println!("{}/{} @{}: {:?}", part.topic, part.partition, r.offset, r.value);
///         }
///     }
/// }
/// # }
/// ```
pub struct Reader {
    shared: Arc<Shared>,
    /// The records the `Stream` is handing out, one at a time.
    current: Option<ConsumerRecords>,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

/// What the Reader's tasks and its facade share.
pub(crate) struct Shared {
    pub(crate) transport: Transport,
    pub(crate) config: Config,
    state: Mutex<State>,
    pub(crate) counters: Counters,
    pub(crate) manager_wake: Notify,
    tasks: Mutex<Tasks>,
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

impl Reader {
    /// A builder for a Reader on `transport` (see [`ReaderBuilder`] for every setting).
    pub fn builder(transport: Transport) -> ReaderBuilder {
        ReaderBuilder::new(transport)
    }

    pub(crate) fn new(transport: Transport, config: Config) -> Reader {
        Reader {
            shared: Arc::new(Shared {
                transport,
                config,
                state: Mutex::new(State::default()),
                counters: Counters::default(),
                manager_wake: Notify::new(),
                tasks: Mutex::new(Tasks::default()),
            }),
            current: None,
        }
    }

    /// Adds partitions to the assignment, each starting at its [`StartOffset`]; a partition
    /// already assigned moves there (as [`Reader::seek`]). Starts the Reader's tasks on first
    /// use, on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::Reader`] with [`ReaderError::Closed`] after [`Reader::close`];
    /// [`Error::Config`] when called outside a tokio runtime the first time;
    /// [`Error::InvalidArgument`] for a negative partition (nothing is assigned then).
    pub fn assign<I, T>(&self, partitions: I) -> Result<()>
    where
        I: IntoIterator<Item = (T, i32, StartOffset)>,
        T: AsRef<str>,
    {
        let parts: Vec<(T, i32, StartOffset)> = partitions.into_iter().collect();
        if let Some((t, p, _)) = parts.iter().find(|(_, p, _)| *p < 0) {
            return Err(Error::InvalidArgument(format!(
                "{}/{p}: a partition is >= 0",
                t.as_ref()
            )));
        }
        self.shared.start()?;
        {
            let mut st = self.shared.lock();
            if st.closed {
                return Err(Error::Reader(ReaderError::Closed));
            }
            for (t, p, start) in &parts {
                st.assign(t.as_ref(), *p, *start);
            }
        }
        self.shared.manager_wake.notify_one();
        self.shared.wake_sources();
        Ok(())
    }

    /// Assigns (or, when assigned, moves) `topic`/`partition` without a place to start: it is
    /// not fetched, and the application gets `error` for it once, until it seeks the
    /// partition (a group member's partition without a usable committed offset).
    pub(crate) fn assign_failed(&self, topic: &str, partition: i32, error: Error) -> Result<()> {
        if partition < 0 {
            return Err(Error::InvalidArgument(format!(
                "{topic}/{partition}: a partition is >= 0"
            )));
        }
        self.shared.start()?;
        let waiters = {
            let mut st = self.shared.lock();
            if st.closed {
                return Err(Error::Reader(ReaderError::Closed));
            }
            // Behind the version barrier like a seek; no reset is asked for before `fail`
            // stops it (the manager runs under the same lock).
            st.assign(topic, partition, StartOffset::Latest);
            let t: Arc<str> = Arc::from(topic);
            st.fail(&t, partition, error);
            st.take_waiters()
        };
        waiters.into_iter().for_each(std::task::Waker::wake);
        Ok(())
    }

    /// Removes partitions from the assignment. Once this returns, no record of them is handed
    /// out (their buffered records are dropped, answers in flight are ignored); their fetch
    /// sessions forget them on the next request. Partitions not assigned are ignored.
    pub fn unassign<I, T>(&self, partitions: I)
    where
        I: IntoIterator<Item = (T, i32)>,
        T: AsRef<str>,
    {
        let mut st = self.shared.lock();
        for (t, p) in partitions {
            st.unassign(t.as_ref(), p);
        }
    }

    /// Removes every partition (see [`Reader::unassign`]).
    pub fn unassign_all(&self) {
        let all = self.assignment();
        self.unassign(all.iter().map(|(t, p)| (t.as_str(), *p)));
    }

    /// The assigned partitions, sorted.
    pub fn assignment(&self) -> Vec<(String, i32)> {
        let st = self.shared.lock();
        let mut out: Vec<(String, i32)> =
            st.cursors().map(|(t, p, _)| (t.to_string(), p)).collect();
        out.sort();
        out
    }

    /// Moves an assigned partition to `to` (Java `seek` / `seekToBeginning` / `seekToEnd` /
    /// `offsetsForTimes` + `seek`; KIP-320 `seek` with a leader epoch via
    /// [`StartOffset::AtEpoch`]). Once this returns, no record fetched before is handed out for
    /// it; a partition stopped by an error is fetched again.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the partition is not assigned.
    pub fn seek(&self, topic: &str, partition: i32, to: StartOffset) -> Result<()> {
        let found = self.shared.lock().seek(topic, partition, to);
        if !found {
            return Err(Error::InvalidArgument(format!(
                "{topic}/{partition} is not assigned"
            )));
        }
        self.shared.manager_wake.notify_one();
        self.shared.wake_sources();
        Ok(())
    }

    /// Stops fetching and handing out records of these partitions until [`Reader::resume`];
    /// records already buffered stay buffered (Java `pause`), and do not count against
    /// `queued_max_bytes` while paused. Unassigned ones are ignored.
    pub fn pause<I, T>(&self, partitions: I)
    where
        I: IntoIterator<Item = (T, i32)>,
        T: AsRef<str>,
    {
        let mut st = self.shared.lock();
        for (t, p) in partitions {
            if let Some(c) = st.cursor_mut(t.as_ref(), p)
                && !c.paused
            {
                c.paused = true;
                st.paused += 1;
            }
        }
        drop(st);
        // Its buffer no longer counts against `queued_max_bytes`: the others may fetch.
        self.shared.wake_sources();
    }

    /// Fetches and hands out these partitions again (Java `resume`).
    pub fn resume<I, T>(&self, partitions: I)
    where
        I: IntoIterator<Item = (T, i32)>,
        T: AsRef<str>,
    {
        let waiters = {
            let mut st = self.shared.lock();
            for (t, p) in partitions {
                if let Some(c) = st.cursor_mut(t.as_ref(), p)
                    && c.paused
                {
                    c.paused = false;
                    st.paused -= 1;
                }
            }
            st.take_waiters()
        };
        waiters.into_iter().for_each(std::task::Waker::wake);
        self.shared.wake_sources();
    }

    /// The paused partitions, sorted.
    pub fn paused(&self) -> Vec<(String, i32)> {
        let st = self.shared.lock();
        let mut out: Vec<(String, i32)> = st
            .cursors()
            .filter(|(_, _, c)| c.paused)
            .map(|(t, p, _)| (t.to_string(), p))
            .collect();
        out.sort();
        out
    }

    /// The position of a partition: the offset after the last record (or skipped batch) handed
    /// out, with the leader epoch of that record (what to commit, KIP-320). The `Stream` hands
    /// out one record at a time: while it holds records of a partition answer not yielded yet,
    /// the position is the offset of the next of them. `None` when the partition is not
    /// assigned or awaits its first offset (a reset by ListOffsets).
    pub fn position(&self, topic: &str, partition: i32) -> Option<Position> {
        let taken = self.shared.lock().cursor(topic, partition)?.position?;
        Some(
            self.streamed(topic, partition)
                .map_or(taken, |(offset, epoch)| {
                    Position::new(offset, epoch.or(taken.leader_epoch))
                }),
        )
    }

    /// The `Stream`'s place in a partition answer it took but has not yielded in full:
    /// `(next offset, leader epoch of the last record yielded)`.
    fn streamed(&self, topic: &str, partition: i32) -> Option<(i64, Option<i32>)> {
        let cur = self.current.as_ref()?;
        if !cur.is_of(topic, partition) || !cur.barrier.holds() {
            return None;
        }
        cur.resume_at()
    }

    /// How far a partition's position is behind its end: the high watermark (under
    /// `read_committed` the last stable offset) of the last Fetch answer minus the position.
    /// `None` before the first answer, or when not assigned.
    pub fn lag(&self, topic: &str, partition: i32) -> Option<i64> {
        let rc = self.shared.config.isolation_level == IsolationLevel::ReadCommitted;
        let (lag, taken) = {
            let st = self.shared.lock();
            let c = st.cursor(topic, partition)?;
            (c.lag(rc)?, c.position)
        };
        // Records the Stream took but has not yielded are still behind.
        let behind = match (taken, self.streamed(topic, partition)) {
            (Some(t), Some((next, _))) => (t.offset - next).max(0),
            _ => 0,
        };
        Some(lag + behind)
    }

    /// The next records: every buffered partition answer, in arrival order, until at least
    /// `max_poll_records` records are held (a partition's records are never split), each
    /// partition's position moved past them. Waits until there is something.
    ///
    /// # Errors
    ///
    /// [`Error::Reader`]: a partition's error, reported once (the records before it come in
    /// earlier calls; the other partitions keep flowing), a reader-wide Fetch failure that no
    /// retry fixes ([`ReaderError::Fetch`]), or [`ReaderError::Closed`] once closed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: records are taken from the buffer only when the future completes; a
    /// dropped future loses nothing.
    pub async fn next_batch(&self) -> Result<Vec<PartitionRecords>> {
        let max = self.shared.config.max_poll_records;
        let out = std::future::poll_fn(|cx| self.shared.poll_take(cx, max)).await?;
        let n: usize = out.iter().map(|p| p.records.len()).sum();
        Counters::add(&self.shared.counters.delivered, n as u64);
        Ok(out)
    }

    /// `next_batch` as a poll, with its own record limit (the group consumer's `Stream` and
    /// `next_batch` drive the Reader through it).
    pub(crate) fn poll_batch(
        &self,
        cx: &mut Context<'_>,
        max_records: usize,
    ) -> Poll<Result<Vec<PartitionRecords>>> {
        self.shared.poll_take(cx, max_records)
    }

    /// The settings the group consumer reads: `max_poll_records`, `auto_offset_reset`,
    /// `isolation_level`, `client_rack`.
    pub(crate) fn settings(&self) -> (usize, AutoOffsetReset, IsolationLevel, Option<&str>) {
        let c = &self.shared.config;
        (
            c.max_poll_records,
            c.auto_offset_reset,
            c.isolation_level,
            c.client_rack.as_deref(),
        )
    }

    /// Counters since the Reader was built (Fetch requests per broker, bytes, records) and
    /// each partition's position, lag and buffered bytes now.
    pub fn stats(&self) -> ReaderStats {
        let mut s = self.shared.counters.snapshot();
        let rc = self.shared.config.isolation_level == IsolationLevel::ReadCommitted;
        let now = Instant::now();
        let st = self.shared.lock();
        s.buffered_bytes = st.queued_bytes as u64;
        s.records_discarded += st.purged;
        s.partitions = st
            .cursors()
            .map(|(t, p, c)| PartitionStats {
                topic: t.to_string(),
                partition: p,
                position: c.position.map(|p| p.offset),
                fetch_offset: c.fetch.offset,
                high_watermark: c.high_watermark,
                last_stable_offset: c.last_stable_offset,
                lag: c.lag(rc),
                buffered_bytes: c.queued_bytes as u64,
                node: c.fetch_node(now),
                paused: c.paused,
                fetch_state: match c.state {
                    CursorState::Failed => FetchState::Failed,
                    _ if c.leader.is_none() => FetchState::AwaitingLeader,
                    CursorState::Reset(_) => FetchState::Resetting,
                    CursorState::Validate => FetchState::Validating,
                    CursorState::Fetching => FetchState::Fetching,
                },
                in_flight: c.in_flight.is_some(),
                failures: c.failures,
            })
            .collect();
        drop(st);
        s.partitions
            .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        s
    }

    /// Stops the Reader: its tasks end, its fetch connections close, buffered records are
    /// dropped; `next_batch` then fails with [`ReaderError::Closed`] and the `Stream` ends.
    /// Dropping the Reader does the same.
    pub fn close(&self) {
        self.shared.close();
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl futures_core::Stream for Reader {
    type Item = Result<ConsumerRecord>;

    /// The next record. Records of a partition sought, reset or unassigned since they were
    /// fetched are never yielded (checked per record). A partition's error is yielded once as
    /// `Some(Err(..))`; the stream goes on. It ends (`None`) once the Reader is closed.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(cur) = &mut self.current {
                if cur.barrier.holds() {
                    if let Some(r) = cur.next() {
                        // Counted as the application gets it: what the barrier drops after
                        // this is counted as discarded instead.
                        Counters::add(&self.shared.counters.delivered, 1);
                        return Poll::Ready(Some(Ok(r)));
                    }
                } else {
                    let left = cur.size_hint().0 as u64;
                    Counters::add(&self.shared.counters.discarded, left);
                }
                self.current = None;
            }
            match self.shared.poll_take(cx, 1) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(Error::Reader(ReaderError::Closed))) => return Poll::Ready(None),
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Ok(parts)) => {
                    let mut parts = parts.into_iter();
                    self.current = parts.next().map(ConsumerRecords::new);
                    debug_assert!(parts.next().is_none(), "one partition at a time");
                }
            }
        }
    }
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Starts the manager task (once), capturing the current runtime for later tasks.
    fn start(self: &Arc<Self>) -> Result<()> {
        let mut tasks = lock(&self.tasks);
        if tasks.runtime.is_some() {
            return Ok(());
        }
        let handle = Handle::try_current()
            .map_err(|_| Error::Config("Reader::assign needs a tokio runtime".into()))?;
        tasks.manager = Some(handle.spawn(offsets::run(Arc::clone(self))));
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
                    let task = rt.spawn(source::run(Arc::clone(self), node, Arc::clone(&wake)));
                    tasks.sources.insert(node, (wake, task));
                }
            }
        }
    }

    /// Wakes every source (work may have appeared or buffer room freed).
    fn wake_sources(&self) {
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

    fn close(&self) {
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
                rt.spawn(source::close_session(
                    self.transport.clone(),
                    node,
                    session_id,
                ));
            }
        }
    }

    /// The queue's next records (or error), or `Pending` with the waker kept.
    fn poll_take(&self, cx: &mut Context<'_>, max: usize) -> Poll<Result<Vec<PartitionRecords>>> {
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
            _ => Poll::Ready(Ok(out)),
        }
    }

    /// `plan` of the source of `node`: the cursors it fetches this round, marked in flight.
    pub(crate) fn plan(&self, node: i32, rotation: &mut usize) -> Plan {
        let mut st = self.lock();
        if st.closed {
            return Plan::Stop;
        }
        if st.queued_bytes >= self.config.queued_max_bytes {
            // Paused partitions' records wait for a resume, not for the application: they
            // are left out of the budget, or one paused partition could stop every other.
            let paused: usize = st
                .cursors()
                .filter(|(_, _, c)| c.paused)
                .map(|(_, _, c)| c.queued_bytes)
                .sum();
            if st.queued_bytes.saturating_sub(paused) >= self.config.queued_max_bytes {
                return Plan::Wait(None);
            }
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
                let from_replica = c.leader != Some(node);
                parts.push(Planned {
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
                    barrier: record::Barrier {
                        current: Arc::clone(&c.barrier),
                        version: c.version,
                    },
                });
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
        // A fixed order, started one further each round: a busy partition cannot keep the
        // others out of `fetch_max_bytes`.
        parts.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        let start = *rotation % parts.len();
        parts.rotate_left(start);
        *rotation = rotation.wrapping_add(1);
        let id = st.next_id();
        for p in &parts {
            if let Some(c) = st.cursor_mut(&p.topic, p.partition) {
                c.in_flight = Some(id);
            }
        }
        Plan::Fetch { id, parts }
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
                    source::apply_one(&mut st, &self.config, node, p, a, &mut fu, &self.counters);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader (never started) with partitions 0 and 1 of `t` led by broker 1, both at
    /// fetch offset 100.
    fn two_partitions() -> Reader {
        let transport = Transport::builder(["127.0.0.1:9"])
            .build()
            .expect("transport");
        let reader = Reader::builder(transport).build().expect("reader");
        let mut st = reader.shared.lock();
        for p in 0..2 {
            st.assign("t", p, StartOffset::At(100));
            st.cursor_mut("t", p).expect("assigned").leader = Some(1);
        }
        drop(st);
        reader
    }

    fn planned(reader: &Reader) -> Option<Vec<i32>> {
        match reader.shared.plan(1, &mut 0) {
            Plan::Fetch { id, parts } => {
                let mut st = reader.shared.lock();
                for p in &parts {
                    let c = st.cursor_mut(&p.topic, p.partition).expect("assigned");
                    assert_eq!(c.in_flight, Some(id));
                    c.in_flight = None;
                }
                Some(parts.iter().map(|p| p.partition).collect())
            }
            Plan::Wait(_) => None,
            Plan::Stop => panic!("not closed"),
        }
    }

    #[tokio::test]
    async fn no_long_poll_of_partitions_at_their_end_while_others_are_held_back() {
        let reader = two_partitions();
        let full = usize::try_from(reader.shared.config.max_partition_fetch_bytes).expect("size");
        // Nothing known yet: both are fetched.
        assert_eq!(planned(&reader), Some(vec![0, 1]));
        // Partition 1 at its log end and partition 0's buffer full: a Fetch of partition 1
        // alone would sit at the broker for fetch_max_wait in front of partition 0's next one.
        {
            let mut st = reader.shared.lock();
            st.cursor_mut("t", 0).expect("assigned").queued_bytes = full;
            st.cursor_mut("t", 1).expect("assigned").high_watermark = 100;
        }
        assert_eq!(planned(&reader), None);
        // New data in partition 1: fetched alone.
        reader
            .shared
            .lock()
            .cursor_mut("t", 1)
            .expect("assigned")
            .high_watermark = 150;
        assert_eq!(planned(&reader), Some(vec![1]));
        // At its end again but partition 0 drained: both go (the long poll waits for either).
        {
            let mut st = reader.shared.lock();
            st.cursor_mut("t", 0).expect("assigned").queued_bytes = 0;
            st.cursor_mut("t", 1).expect("assigned").high_watermark = 100;
        }
        assert_eq!(planned(&reader), Some(vec![0, 1]));
        // Only partition 1, at its end, and nothing held back: the ordinary long poll.
        reader.pause([("t", 0)]);
        assert_eq!(planned(&reader), Some(vec![1]));
    }

    /// Issue 31 item 9. Records buffered for a paused partition are not handed out until it is
    /// resumed, so they do not count against `queued_max_bytes`: a paused partition holding
    /// the whole budget would otherwise stop every other partition (Java's fetcher leaves
    /// paused partitions' buffered data out of its limits too).
    #[tokio::test]
    async fn a_paused_partitions_buffer_does_not_stop_the_others() {
        let reader = two_partitions();
        let max = reader.shared.config.queued_max_bytes;
        {
            let mut st = reader.shared.lock();
            st.cursor_mut("t", 0).expect("assigned").queued_bytes = max;
            st.queued_bytes = max;
        }
        assert_eq!(planned(&reader), None, "the budget is spent");
        reader.pause([("t", 0)]);
        assert_eq!(
            planned(&reader),
            Some(vec![1]),
            "the paused partition's buffer is left out of the budget"
        );
        reader.resume([("t", 0)]);
        assert_eq!(planned(&reader), None, "counted again once resumed");
    }

    /// Issue 31 item 10. The `Stream` takes a whole partition answer (records 100..103) and
    /// yields one record: the position is after that record (101), not after the answer, so
    /// what an application commits from `position` covers only the records it was given.
    #[tokio::test]
    async fn the_stream_position_covers_only_the_records_yielded() {
        use futures_core::Stream as _;
        use kafkit_protocol::records::{Record, TimestampType};

        let mut reader = two_partitions();
        {
            let mut st = reader.shared.lock();
            let records = PartitionRecords {
                topic: Arc::from("t"),
                partition: 0,
                records: (100..103)
                    .map(|o| Record::new(None, None).with_offset(o))
                    .collect(),
                next_offset: 103,
                high_watermark: 103,
                last_stable_offset: 103,
                log_start_offset: 0,
                spans: vec![record::Span {
                    start: 0,
                    leader_epoch: 7,
                    timestamp_type: TimestampType::CreateTime,
                }],
                next_leader_epoch: None,
                barrier: st.barrier("t", 0).expect("assigned"),
                bytes: 10,
            };
            st.push_records(records);
            st.cursor_mut("t", 0)
                .expect("assigned")
                .advance(Position::new(103, Some(7)));
        }
        let first = std::future::poll_fn(|cx| Pin::new(&mut reader).poll_next(cx))
            .await
            .expect("a record")
            .expect("no error");
        assert_eq!(first.offset, 100);
        assert_eq!(
            reader.position("t", 0),
            Some(Position::new(101, Some(7))),
            "after the one record yielded"
        );
        let second = std::future::poll_fn(|cx| Pin::new(&mut reader).poll_next(cx))
            .await
            .expect("a record")
            .expect("no error");
        assert_eq!(second.offset, 101);
        assert_eq!(reader.position("t", 0), Some(Position::new(102, Some(7))));
        let _ = std::future::poll_fn(|cx| Pin::new(&mut reader).poll_next(cx)).await;
        assert_eq!(reader.position("t", 0), Some(Position::new(103, Some(7))));
    }
}
