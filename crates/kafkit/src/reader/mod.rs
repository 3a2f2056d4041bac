//! [`Reader`]: a consumer of explicitly assigned partitions (kafka-go's `Reader`, the Java
//! consumer's `assign` mode), sending ONE Fetch request per broker per round for every
//! assigned partition that broker serves.
//!
//! Layout: this file is the facade (`Reader`, its `Stream`). `shared.rs` (`Shared`: the engine
//! state and the phases under its lock: plan, release, apply, follow, manager_work, poll_take),
//! `config.rs` (settings table, [`ReaderBuilder`]), `cursor.rs` (cursors, positions, the state
//! behind the lock and the version barrier), `apply.rs` (how an answer changes a cursor:
//! `apply_one`, `truncated`), `source.rs` (the per-broker fetch task: plan, build, send, decode),
//! `session.rs` (KIP-227 fetch sessions), `offsets.rs` (the manager task: leaders, resets, KIP-320
//! validation), `work.rs` (what the phases hand one another: plans, answers, the manager's work,
//! follow-ups), `record.rs` (what is handed out), `stats.rs`; the errors are in
//! `error/reader.rs`. The children point one way: the task files (`source.rs`, `offsets.rs`)
//! import `shared.rs` and `work.rs` (the manager also `apply.rs`'s `truncated`); `shared.rs`
//! imports `apply.rs` and `work.rs`, never a task file: this file hands the engine its tasks
//! (`TaskFns`), as the writer's facade does. None imports this file (the builder in
//! `config.rs` aside, which builds the facade). The batches of an answer are walked by
//! `conn/records.rs`'s walker with `conn/aborted.rs`'s `read_committed` filter, the same walker
//! `Conn::fetch_multi` uses.
//!
//! Lock order: the Reader's state lock (`Shared::state`) is taken alone and never held across
//! an `.await`; the tasks lock (`Shared::tasks`: sources, connections) is taken after it is
//! released, never under it. Transport calls (metadata, leader hints, invalidations) happen
//! outside both.

mod apply;
mod config;
mod cursor;
mod offsets;
mod record;
mod session;
mod shared;
mod source;
mod stats;
mod telemetry;
mod work;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

pub use self::config::{AutoOffsetReset, ReaderBuilder};
pub use self::cursor::{Position, StartOffset};
pub use self::record::{ConsumerRecord, PartitionRecords};
pub use self::stats::{FetchState, PartitionStats, ReaderStats};
pub use crate::error::reader::ReaderError;

use self::config::Config;
use self::cursor::CursorState;
pub(crate) use self::record::{Barrier, ConsumerRecords};
use self::shared::{Shared, TaskFns};
use self::stats::Counters;
pub(crate) use self::telemetry::consumer_fetch_metrics;
use crate::error::{Error, Result};
use crate::ops::offsets::IsolationLevel;
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
    /// The `Stream`'s poll span while it refills `current` (`ops/otel.rs`).
    refill: crate::ops::otel::RefillSpan,
    /// Its KIP-714 engine (`reader/telemetry.rs`); dropped with the Reader. A group member's
    /// Reader has none (the member's engine reports it).
    push: crate::telemetry::ClientPush,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

/// The engine's tasks ([`TaskFns`]): the manager, one source per broker, and the closing of a
/// broker's fetch session.
static TASKS: TaskFns = TaskFns {
    manager: |shared| Box::pin(offsets::run(shared)),
    source: |shared, node, wake| Box::pin(source::run(shared, node, wake)),
    close_session: |transport, node, session_id| {
        Box::pin(source::close_session(transport, node, session_id))
    },
};

impl Reader {
    /// A builder for a Reader on `transport` (see [`ReaderBuilder`] for every setting).
    pub fn builder(transport: Transport) -> ReaderBuilder {
        ReaderBuilder::new(transport)
    }

    pub(crate) fn new(transport: Transport, config: Config) -> Reader {
        Reader {
            shared: Arc::new(Shared::new(transport, config, &TASKS)),
            current: None,
            refill: crate::ops::otel::RefillSpan::default(),
            push: crate::telemetry::ClientPush::Off,
        }
    }

    /// [`Reader::new`], with its KIP-714 engine when `push` (fed by
    /// [`Reader::metric_source`], labelled with the client rack).
    pub(crate) fn with_push(transport: Transport, config: Config, push: bool) -> Reader {
        let mut reader = Reader::new(transport, config);
        reader.push = crate::telemetry::ClientPush::start(
            push,
            &reader.shared.transport,
            telemetry::source(&reader.shared),
            Vec::new(),
        );
        reader
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
        let span = crate::ops::otel::poll_span(None);
        let max = self.shared.config.max_poll_records;
        let out = std::future::poll_fn(|cx| self.shared.poll_take(cx, max)).await;
        let out = poll_ended(&span, None, out)?;
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

    /// `n` records taken with [`Reader::poll_batch`] were handed to the application (the group
    /// consumer's count of [`ReaderStats::records_delivered`]).
    pub(crate) fn note_delivered(&self, n: usize) {
        Counters::add(&self.shared.counters.delivered, n as u64);
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
        stats_of(&self.shared)
    }

    /// Stops the Reader: its tasks end, its fetch connections close, buffered records are
    /// dropped; `next_batch` then fails with [`ReaderError::Closed`] and the `Stream` ends.
    /// Dropping the Reader does the same.
    pub fn close(&self) {
        self.shared.close();
    }

    /// [`Reader::close`], after KIP-714's terminating push (when metrics push is on and a
    /// subscription asks for metrics) within `timeout`: Java's `close(Duration)`. Without a
    /// subscription it returns at once.
    ///
    /// # Cancel safety
    /// Dropped part way, the Reader is not closed yet (it is when dropped); the engine ends on
    /// its own within `timeout`.
    pub async fn close_within(&self, timeout: Duration) {
        self.push.close(timeout).await;
        self.shared.close();
    }
}

/// [`Reader::stats`] of the Reader whose state is `shared` (its metric source holds only that).
fn stats_of(shared: &Shared) -> ReaderStats {
    let mut s = shared.counters.snapshot();
    let rc = shared.config.isolation_level == IsolationLevel::ReadCommitted;
    let now = Instant::now();
    let st = shared.lock();
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
    ///
    /// Tracing: one `poll {topic}` span per refill (a partition answer taken from the
    /// buffer), from the first poll that finds nothing to yield to the answer, not one per
    /// record; with `process_spans(true)` each record carries its `process {topic}` span.
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
            // One poll span per refill of `current`, not per record.
            self.refill.start(None);
            match self.shared.poll_take(cx, 1) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(Error::Reader(ReaderError::Closed))) => {
                    self.refill.failed(None);
                    return Poll::Ready(None);
                }
                Poll::Ready(Err(e)) => {
                    self.refill.failed(e.error_code());
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(Ok(parts)) => {
                    self.refill.done(
                        parts
                            .iter()
                            .map(|p| (&*p.topic, p.partition, p.records.len())),
                    );
                    meter_streamed(&parts, None);
                    let mut parts = parts.into_iter();
                    self.current = parts.next().map(ConsumerRecords::new);
                    debug_assert!(parts.next().is_none(), "one partition at a time");
                }
            }
        }
    }
}

/// `messaging.client.consumed.messages` of the records a `Stream` (the Reader's, a group
/// member's) takes to yield one by one: counted when taken, once per partition (cargo feature
/// `metrics`).
#[inline(always)]
pub(crate) fn meter_streamed(parts: &[PartitionRecords], group: Option<&str>) {
    crate::ops::meter::consumed_messages(
        parts.iter().map(|p| (&p.topic, p.records.len() as u64)),
        group,
    );
}

/// Ends a `poll` span (`ops/otel.rs`) with what the poll handed out: the record count and the
/// topic (or `error.type`); the result passes through. The group member's `next_batch` ends
/// its span here too. With the cargo feature `metrics`, each partition's records count as
/// `messaging.client.consumed.messages` (of `group`, for a member).
pub(crate) fn poll_ended(
    span: &tracing::Span,
    group: Option<&str>,
    out: Result<Vec<PartitionRecords>>,
) -> Result<Vec<PartitionRecords>> {
    match &out {
        Ok(parts) => {
            crate::ops::meter::consumed_messages(
                parts.iter().map(|p| (&p.topic, p.records.len() as u64)),
                group,
            );
            crate::ops::otel::poll_done(
                span,
                parts
                    .iter()
                    .map(|p| (&*p.topic, p.partition, p.records.len())),
            )
        }
        Err(e) => crate::ops::otel::record_error(span, e.error_code()),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::work::Plan;

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

    /// Records buffered for a paused partition are not handed out until it is
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

    /// The `Stream` takes a whole partition answer (records 100..103) and
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
                process: None,
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
