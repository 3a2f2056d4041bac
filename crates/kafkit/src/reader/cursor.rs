//! Cursors (one per assigned partition: its positions, leader, state and version) and the
//! Reader's state behind its one lock: every cursor, the queue of fetched records waiting for
//! the application, buffer accounting and the sources' wake-ups.
//!
//! Two positions per partition, as in the Java consumer's `SubscriptionState`: the **fetch
//! position** (`Cursor::fetch`, where the next Fetch starts; moved by a source when an answer
//! is applied) and the **position** (`Cursor::position`, the offset after the last record
//! handed to the application; moved when records leave the queue). Both move **by batch**, to
//! the next offset of the last batch read (`advance`), never only past the last record.
//!
//! The **version barrier**: a seek, a reset and an unassignment bump the cursor's version
//! (`Cursor::bump`), drop its queued records and make answers still in flight stale: an answer
//! is applied only when the cursor's version is the one it was planned under, and queued
//! records carry a [`Barrier`] checked again when each record is handed out.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Waker;

use kafkit_protocol::Uuid;
use tokio::time::Instant;

use super::config::AutoOffsetReset;
#[cfg(test)]
use super::record::Barrier;
use super::record::PartitionRecords;
use crate::error::Error;
use crate::ops::offsets::OffsetSpec;

/// Where a partition starts, or where [`crate::Reader::seek`] moves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StartOffset {
    /// The log start offset (ListOffsets `EARLIEST`).
    Earliest,
    /// The log end offset; under `ReadCommitted` the last stable offset (ListOffsets `LATEST`).
    Latest,
    /// This offset, as is. Out of range, it is reset as `auto_offset_reset` says.
    At(i64),
    /// This offset, with the leader epoch of the record before it (a committed offset, KIP-320):
    /// validated against the leader with OffsetForLeaderEpoch before fetching, so a log
    /// truncated since is detected.
    AtEpoch {
        /// The offset.
        offset: i64,
        /// The leader epoch of the record before `offset`.
        leader_epoch: i32,
    },
    /// The first offset whose record timestamp is at or after this time, in ms since the Unix
    /// epoch (ListOffsets by timestamp); the log end when there is none.
    Timestamp(i64),
}

/// A partition's position: the next offset and the leader epoch of the record before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Position {
    /// The next offset to read.
    pub offset: i64,
    /// The leader epoch of the last record read before `offset` (KIP-320), `None` when unknown.
    pub leader_epoch: Option<i32>,
}

impl From<i64> for StartOffset {
    /// A plain offset: [`StartOffset::At`] (`seek("t", 0, 42)`).
    fn from(offset: i64) -> Self {
        StartOffset::At(offset)
    }
}

impl From<Position> for StartOffset {
    /// A position: [`StartOffset::AtEpoch`] when it has a leader epoch (validated, KIP-320),
    /// else [`StartOffset::At`].
    fn from(p: Position) -> Self {
        match p.leader_epoch {
            Some(leader_epoch) => StartOffset::AtEpoch {
                offset: p.offset,
                leader_epoch,
            },
            None => StartOffset::At(p.offset),
        }
    }
}

impl Position {
    pub(crate) fn new(offset: i64, leader_epoch: Option<i32>) -> Self {
        Position {
            offset,
            leader_epoch,
        }
    }
}

/// What a cursor waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CursorState {
    /// An offset from ListOffsets (the manager's resets).
    Reset(OffsetSpec),
    /// Validation of the fetch position against the leader (OffsetForLeaderEpoch, KIP-320).
    Validate,
    /// Fetchable (when routed, not paused, not in flight, not backing off, buffer not full).
    Fetching,
    /// Stopped after an error that was reported; a seek or assign starts it again.
    Failed,
}

/// One assigned partition.
#[derive(Debug)]
pub(crate) struct Cursor {
    pub(crate) state: CursorState,
    pub(crate) paused: bool,
    /// Bumped by seek, reset and unassignment (and mirrored in `barrier`).
    pub(crate) version: u64,
    pub(crate) barrier: Arc<AtomicU64>,
    /// Where the next Fetch starts.
    pub(crate) fetch: Position,
    /// After the last record handed to the application; `None` before the first position is
    /// known (awaiting a reset).
    pub(crate) position: Option<Position>,
    /// The leader (from metadata or a KIP-951 hint), `None` while unknown.
    pub(crate) leader: Option<i32>,
    /// The leader epoch that came with `leader`, -1 when unknown (sent as
    /// `current_leader_epoch`).
    pub(crate) leader_epoch: i32,
    /// A preferred read replica (KIP-392) and until when to use it (one metadata lists).
    pub(crate) preferred: Option<(i32, Instant)>,
    /// A preferred read replica the leader named that metadata did not list, and until when it
    /// holds: fetched from once metadata lists it (`Cursor::prefer_replica`), the leader
    /// meanwhile.
    pub(crate) unlisted_replica: Option<(i32, Instant)>,
    /// The id of the Fetch (or offset request) this cursor is in, if any.
    pub(crate) in_flight: Option<u64>,
    /// Queued, undelivered record data of this partition, in bytes.
    pub(crate) queued_bytes: usize,
    /// Queued items of this partition (records or errors).
    pub(crate) queued_items: usize,
    pub(crate) high_watermark: i64,
    pub(crate) last_stable_offset: i64,
    pub(crate) log_start_offset: i64,
    /// No fetch (or offset request) before this instant (backoff after an error).
    pub(crate) retry_at: Option<Instant>,
    /// Consecutive failures (for the backoff).
    pub(crate) failures: u32,
    /// A refusal the partition is fetched again after (`TOPIC_AUTHORIZATION_FAILED`) was
    /// reported since its last answer without error: the next ones are not.
    pub(crate) refusal_reported: bool,
    /// Fetch records, batches and lag of this partition (cargo feature `metrics`).
    pub(crate) meter: crate::ops::meter::PartitionMeter,
}

impl Cursor {
    fn new(start: StartOffset) -> Self {
        let mut c = Cursor {
            state: CursorState::Fetching,
            paused: false,
            version: 0,
            barrier: Arc::new(AtomicU64::new(0)),
            fetch: Position::new(-1, None),
            position: None,
            leader: None,
            leader_epoch: -1,
            preferred: None,
            unlisted_replica: None,
            in_flight: None,
            queued_bytes: 0,
            queued_items: 0,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            retry_at: None,
            failures: 0,
            refusal_reported: false,
            meter: crate::ops::meter::PartitionMeter::default(),
        };
        c.start_at(start);
        c
    }

    /// Sets the state and positions `start` asks for.
    fn start_at(&mut self, start: StartOffset) {
        self.retry_at = None;
        self.failures = 0;
        self.refusal_reported = false;
        match start {
            StartOffset::Earliest => self.reset(OffsetSpec::Earliest),
            StartOffset::Latest => self.reset(OffsetSpec::Latest),
            StartOffset::Timestamp(t) => self.reset(OffsetSpec::Timestamp(t)),
            StartOffset::At(offset) => {
                self.set_position(Position::new(offset, None));
                self.state = CursorState::Fetching;
            }
            StartOffset::AtEpoch {
                offset,
                leader_epoch,
            } => {
                self.set_position(Position::new(offset, Some(leader_epoch)));
                self.state = CursorState::Validate;
            }
        }
    }

    fn reset(&mut self, spec: OffsetSpec) {
        self.state = CursorState::Reset(spec);
        self.position = None;
    }

    /// Both positions at `p` (after a seek, reset or validation).
    pub(crate) fn set_position(&mut self, p: Position) {
        self.fetch = p;
        self.position = Some(p);
    }

    /// Bumps the version: queued records and answers in flight become stale.
    fn bump(&mut self) {
        self.version += 1;
        self.barrier.store(self.version, Ordering::Release);
        self.preferred = None;
        self.unlisted_replica = None;
    }

    /// The leader named `replica` as the preferred read replica (KIP-392), valid until
    /// `until`; `listed`: the reader's metadata lists it. The one place a preference is taken
    /// (from a Fetch answer, or when metadata comes to list a remembered one). As Java's
    /// `AbstractFetch.selectReadReplica`, a replica metadata does not list is not fetched from
    /// (it cannot be addressed: dialling it fails, and the partition would bounce between it
    /// and the leader at every answer): it is remembered, the leader is fetched from, and the
    /// caller asks for metadata. Returns the replica when its source must be started.
    pub(crate) fn prefer_replica(
        &mut self,
        replica: i32,
        until: Instant,
        listed: bool,
    ) -> Option<i32> {
        if listed {
            self.preferred = Some((replica, until));
            self.unlisted_replica = None;
            Some(replica)
        } else {
            self.preferred = None;
            self.unlisted_replica = Some((replica, until));
            None
        }
    }

    /// The broker to fetch from: the preferred read replica while it is valid, else the
    /// leader.
    pub(crate) fn fetch_node(&self, now: Instant) -> Option<i32> {
        match self.preferred {
            Some((node, until)) if until > now => Some(node),
            _ => self.leader,
        }
    }

    /// Whether a failure's backoff still runs.
    pub(crate) fn backing_off(&self, now: Instant) -> bool {
        self.retry_at.is_some_and(|t| t > now)
    }

    /// Moves the fetch position past what an answer returned (by batch: `next` is the next
    /// offset of the last batch read, markers and aborted batches included). The one place
    /// the fetch position advances. When nothing of the partition waits in the queue, the
    /// application's position follows at once (an answer that held only markers has nothing
    /// to deliver but must still move the position).
    pub(crate) fn advance(&mut self, next: Position) {
        if next.offset > self.fetch.offset {
            self.fetch = next;
            if self.queued_items == 0 {
                self.position = Some(next);
            }
        }
    }

    /// Whether the fetch position had reached the log end (high watermark, under
    /// `read_committed` the last stable offset) in the last answer; `false` before any.
    pub(crate) fn at_log_end(&self, read_committed: bool) -> bool {
        let end = if read_committed && self.last_stable_offset >= 0 {
            self.last_stable_offset
        } else {
            self.high_watermark
        };
        end >= 0 && self.fetch.offset >= end
    }

    /// The lag: high watermark (under `read_committed` the last stable offset) minus the
    /// position, when both are known.
    pub(crate) fn lag(&self, read_committed: bool) -> Option<i64> {
        let end = if read_committed && self.last_stable_offset >= 0 {
            self.last_stable_offset
        } else {
            self.high_watermark
        };
        let pos = self.position?;
        (end >= 0).then(|| (end - pos.offset).max(0))
    }
}

/// The cursors of one topic.
#[derive(Debug)]
pub(crate) struct TopicCursors {
    /// The topic id (KIP-516) the Reader knows, zero until metadata gives one.
    pub(crate) topic_id: Uuid,
    pub(crate) partitions: HashMap<i32, Cursor>,
}

/// One entry of the queue the application reads from.
#[derive(Debug)]
pub(crate) enum Ready {
    /// Records (stale when the partition's version moved on).
    Records(PartitionRecords),
    /// An error to report once, for a partition (at that version) or for the reader.
    Error {
        topic: Arc<str>,
        partition: Option<i32>,
        version: u64,
        error: Error,
    },
}

impl Ready {
    fn is_of(&self, topic: &str, partition: i32) -> bool {
        match self {
            Ready::Records(r) => r.partition == partition && &*r.topic == topic,
            Ready::Error {
                topic: t,
                partition: p,
                ..
            } => *p == Some(partition) && &**t == topic,
        }
    }
}

/// What [`State::take`] has gathered so far.
#[derive(Default)]
struct Taking {
    out: Vec<PartitionRecords>,
    /// Records in `out`.
    held: usize,
    /// Stale records dropped.
    stale: u64,
    /// Items of paused partitions, to go back to the queue's head.
    skipped: VecDeque<Ready>,
}

/// What [`State::take`] does after one item.
enum Next {
    /// Takes the next item.
    Go,
    /// Stops: the records taken are handed out.
    Stop,
    /// Hands out this error alone.
    Fail(Error),
}

/// `take`: records of cursor `c` leave the queue (its counts and `queued_bytes` drop); when
/// they are still current (the barrier holds), the position moves to their end and they are
/// handed out. Returns whether they are.
#[inline(always)]
fn hand_out(c: &mut Cursor, queued_bytes: &mut usize, r: &PartitionRecords) -> bool {
    c.queued_items -= 1;
    c.queued_bytes -= r.bytes;
    *queued_bytes -= r.bytes;
    if !r.barrier.holds() {
        return false;
    }
    let next = Position::new(
        r.next_offset.max(c.position.map_or(-1, |p| p.offset)),
        r.last_leader_epoch()
            .or(c.position.and_then(|p| p.leader_epoch)),
    );
    // The queue is drained to this item: if it was the partition's last, the fetch position
    // (which may have moved past batches without records) is the position.
    c.position = Some(if c.queued_items == 0 { c.fetch } else { next });
    true
}

/// Everything behind the Reader's lock.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) topics: HashMap<Arc<str>, TopicCursors>,
    /// Fetched records and errors, in arrival order.
    pub(crate) queue: VecDeque<Ready>,
    /// Record data in `queue`, in bytes.
    pub(crate) queued_bytes: usize,
    /// Paused partitions (their queued records stay, but are skipped).
    pub(crate) paused: usize,
    /// Tasks waiting for the queue (`next_batch`, the `Stream`).
    pub(crate) waiters: Vec<Waker>,
    pub(crate) closed: bool,
    /// Queued records dropped by seeks, resets and unassignments (counted in
    /// `ReaderStats::records_discarded`).
    pub(crate) purged: u64,
    /// The brokers the reader's last metadata listed (empty before the first): a preferred
    /// read replica is fetched from only when listed here.
    pub(crate) brokers: std::collections::HashSet<i32>,
    /// A preferred read replica missing from metadata asks for metadata (`replica_lookup_wanted`);
    /// the manager sends one at most every `retry_backoff_max` (`replica_lookup_at`: the last).
    pub(crate) replica_lookup_wanted: bool,
    pub(crate) replica_lookup_at: Option<Instant>,
    next_id: u64,
}

impl State {
    /// A new request id (for `Cursor::in_flight`).
    pub(crate) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub(crate) fn cursor_mut(&mut self, topic: &str, partition: i32) -> Option<&mut Cursor> {
        self.topics.get_mut(topic)?.partitions.get_mut(&partition)
    }

    /// The cursor of `topic`/`partition` whose manager request `id` is answered, with that
    /// request no longer in flight; `None` when the partition is gone or another request
    /// replaced this one (its answer is then stale).
    pub(crate) fn answered(&mut self, topic: &str, partition: i32, id: u64) -> Option<&mut Cursor> {
        let c = self.cursor_mut(topic, partition)?;
        if c.in_flight != Some(id) {
            return None;
        }
        c.in_flight = None;
        Some(c)
    }

    pub(crate) fn cursor(&self, topic: &str, partition: i32) -> Option<&Cursor> {
        self.topics.get(topic)?.partitions.get(&partition)
    }

    /// Assigns `topic`/`partition` at `start` (an assigned one is moved there, as by `seek`).
    pub(crate) fn assign(&mut self, topic: &str, partition: i32, start: StartOffset) {
        if self.cursor(topic, partition).is_some() {
            self.seek(topic, partition, start);
            return;
        }
        let t = self
            .topics
            .entry(Arc::from(topic))
            .or_insert_with(|| TopicCursors {
                topic_id: Uuid::default(),
                partitions: HashMap::new(),
            });
        t.partitions.insert(partition, Cursor::new(start));
    }

    /// Removes `topic`/`partition`: its queued records are dropped and its answers in flight
    /// become stale. Returns whether it was assigned.
    pub(crate) fn unassign(&mut self, topic: &str, partition: i32) -> bool {
        self.purge(topic, partition);
        let Some(t) = self.topics.get_mut(topic) else {
            return false;
        };
        let Some(mut c) = t.partitions.remove(&partition) else {
            return false;
        };
        c.bump();
        if c.paused {
            self.paused -= 1;
        }
        if t.partitions.is_empty() {
            self.topics.remove(topic);
        }
        true
    }

    /// Moves an assigned partition to `start` behind the version barrier. Returns whether it
    /// is assigned.
    pub(crate) fn seek(&mut self, topic: &str, partition: i32, start: StartOffset) -> bool {
        if self.cursor(topic, partition).is_none() {
            return false;
        }
        self.purge(topic, partition);
        if let Some(c) = self.cursor_mut(topic, partition) {
            c.bump();
            c.start_at(start);
        }
        true
    }

    /// A reset by `auto_offset_reset` (after OFFSET_OUT_OF_RANGE, a re-created topic, or a
    /// truncation without a diverging offset): behind the version barrier, like a seek.
    /// Returns `false` when the policy is `None` (the caller reports an error instead).
    pub(crate) fn reset_by_policy(
        &mut self,
        topic: &str,
        partition: i32,
        policy: AutoOffsetReset,
    ) -> bool {
        let start = match policy {
            AutoOffsetReset::Earliest => StartOffset::Earliest,
            AutoOffsetReset::Latest => StartOffset::Latest,
            AutoOffsetReset::None => return false,
        };
        self.seek(topic, partition, start)
    }

    /// Drops the queued items of `topic`/`partition`.
    fn purge(&mut self, topic: &str, partition: i32) {
        let Some(c) = self.cursor(topic, partition) else {
            return;
        };
        if c.queued_items == 0 {
            return;
        }
        let (mut freed, mut records) = (0, 0);
        self.queue.retain(|r| {
            if !r.is_of(topic, partition) {
                return true;
            }
            if let Ready::Records(p) = r {
                freed += p.bytes;
                records += p.records.len() as u64;
            }
            false
        });
        self.queued_bytes -= freed;
        self.purged += records;
        if let Some(c) = self.cursor_mut(topic, partition) {
            c.queued_bytes = 0;
            c.queued_items = 0;
        }
    }

    /// Drops the queued records of `topic`/`partition` at or past `end` (its log diverged
    /// there: KIP-320), keeping those before it for the application; no version bump, so
    /// they stay deliverable. An item left without records is removed.
    pub(crate) fn trim(&mut self, topic: &str, partition: i32, end: i64) {
        let Some(c) = self.cursor(topic, partition) else {
            return;
        };
        if c.queued_items == 0 {
            return;
        }
        let (mut freed, mut items, mut dropped) = (0, 0, 0u64);
        self.queue.retain_mut(|r| {
            if !r.is_of(topic, partition) {
                return true;
            }
            let Ready::Records(p) = r else {
                return true;
            };
            dropped += p.truncate_at(end) as u64;
            if p.records.is_empty() {
                freed += p.bytes;
                items += 1;
                return false;
            }
            true
        });
        self.queued_bytes -= freed;
        self.purged += dropped;
        if let Some(c) = self.cursor_mut(topic, partition) {
            c.queued_bytes -= freed;
            c.queued_items -= items;
        }
    }

    /// Queues records for the application.
    pub(crate) fn push_records(&mut self, records: PartitionRecords) {
        let bytes = records.bytes;
        if let Some(c) = self.cursor_mut(&records.topic, records.partition) {
            c.queued_bytes += bytes;
            c.queued_items += 1;
        }
        self.queued_bytes += bytes;
        self.queue.push_back(Ready::Records(records));
    }

    /// Queues an error of `topic`/`partition` and stops fetching it (state `Failed`).
    pub(crate) fn fail(&mut self, topic: &Arc<str>, partition: i32, error: Error) {
        let Some(c) = self.cursor_mut(topic, partition) else {
            return;
        };
        c.state = CursorState::Failed;
        c.queued_items += 1;
        let version = c.version;
        self.queue.push_back(Ready::Error {
            topic: Arc::clone(topic),
            partition: Some(partition),
            version,
            error,
        });
    }

    /// Queues an error of `topic`/`partition` for the application without stopping it (a
    /// refusal the partition is fetched again after, such as `TOPIC_AUTHORIZATION_FAILED`).
    pub(crate) fn warn(&mut self, topic: &Arc<str>, partition: i32, error: Error) {
        let Some(c) = self.cursor_mut(topic, partition) else {
            return;
        };
        c.queued_items += 1;
        let version = c.version;
        self.queue.push_back(Ready::Error {
            topic: Arc::clone(topic),
            partition: Some(partition),
            version,
            error,
        });
    }

    /// Queues an error that is about no single partition.
    pub(crate) fn report(&mut self, error: Error) {
        self.queue.push_back(Ready::Error {
            topic: Arc::from(""),
            partition: None,
            version: 0,
            error,
        });
    }

    /// Takes what the application gets next: the queued records of partitions that are not
    /// paused (stale ones dropped), until `max_records` records are held or an error is next.
    /// Moves each partition's position to the end of what is taken. Returns the records, an
    /// error (only when no records come before it), and the number of stale records dropped.
    pub(crate) fn take(
        &mut self,
        max_records: usize,
    ) -> (Vec<PartitionRecords>, Option<Error>, u64) {
        let mut t = Taking::default();
        while t.held < max_records {
            let Some(item) = self.queue.pop_front() else {
                break;
            };
            match self.take_one(item, &mut t) {
                Next::Go => {}
                Next::Stop => break,
                Next::Fail(error) => {
                    self.requeue(t.skipped);
                    return (t.out, Some(error), t.stale);
                }
            }
        }
        self.requeue(t.skipped);
        (t.out, None, t.stale)
    }

    /// `take`: one item off the queue's head.
    #[inline(always)]
    fn take_one(&mut self, item: Ready, t: &mut Taking) -> Next {
        let (topic, partition) = match &item {
            Ready::Records(r) => (Arc::clone(&r.topic), Some(r.partition)),
            Ready::Error {
                topic, partition, ..
            } => (Arc::clone(topic), *partition),
        };
        let Some(partition) = partition else {
            return self.reader_error(item, t);
        };
        let Some(c) = self
            .topics
            .get_mut(&*topic)
            .and_then(|t| t.partitions.get_mut(&partition))
        else {
            // Unassigned: its items were purged, so this cannot happen; drop it anyway.
            return Next::Go;
        };
        if c.paused {
            t.skipped.push_back(item);
            return Next::Go;
        }
        match item {
            Ready::Records(r) => {
                if hand_out(c, &mut self.queued_bytes, &r) {
                    t.held += r.records.len();
                    t.out.push(r);
                } else {
                    t.stale += r.records.len() as u64;
                }
                Next::Go
            }
            Ready::Error { version, error, .. } => {
                c.queued_items -= 1;
                if version != c.version {
                    return Next::Go;
                }
                if t.out.is_empty() {
                    return Next::Fail(error);
                }
                c.queued_items += 1;
                self.queue.push_front(Ready::Error {
                    topic,
                    partition: Some(partition),
                    version,
                    error,
                });
                Next::Stop
            }
        }
    }

    /// `take`: a reader-wide error is handed out alone, after the records taken before it.
    #[inline(always)]
    fn reader_error(&mut self, item: Ready, t: &Taking) -> Next {
        if t.out.is_empty() {
            let Ready::Error { error, .. } = item else {
                unreachable!("only errors have no partition")
            };
            return Next::Fail(error);
        }
        self.queue.push_front(item);
        Next::Stop
    }

    /// Puts items of paused partitions back at the head of the queue, in their order.
    fn requeue(&mut self, mut skipped: VecDeque<Ready>) {
        while let Some(item) = skipped.pop_back() {
            self.queue.push_front(item);
        }
    }

    /// Wakers of the tasks waiting for the queue (to wake after the lock is released).
    pub(crate) fn take_waiters(&mut self) -> Vec<Waker> {
        std::mem::take(&mut self.waiters)
    }

    /// Every cursor, with its topic.
    pub(crate) fn cursors_mut(&mut self) -> impl Iterator<Item = (&Arc<str>, i32, &mut Cursor)> {
        self.topics
            .iter_mut()
            .flat_map(|(t, tc)| tc.partitions.iter_mut().map(move |(p, c)| (t, *p, c)))
    }

    /// Every cursor, with its topic.
    pub(crate) fn cursors(&self) -> impl Iterator<Item = (&Arc<str>, i32, &Cursor)> {
        self.topics
            .iter()
            .flat_map(|(t, tc)| tc.partitions.iter().map(move |(p, c)| (t, *p, c)))
    }

    /// The barrier of `topic`/`partition` at its current version.
    #[cfg(test)]
    pub(crate) fn barrier(&self, topic: &str, partition: i32) -> Option<Barrier> {
        let c = self.cursor(topic, partition)?;
        Some(Barrier {
            current: Arc::clone(&c.barrier),
            version: c.version,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::record::Span;
    use kafkit_protocol::records::{Record, TimestampType};

    fn records(st: &State, topic: &str, from: i64, n: i64, next: i64) -> PartitionRecords {
        PartitionRecords {
            topic: Arc::from(topic),
            partition: 0,
            records: (from..from + n)
                .map(|o| Record::new(None, None).with_offset(o))
                .collect(),
            next_offset: next,
            high_watermark: next,
            last_stable_offset: next,
            log_start_offset: 0,
            spans: vec![Span {
                start: 0,
                leader_epoch: 1,
                timestamp_type: TimestampType::CreateTime,
            }],
            next_leader_epoch: None,
            barrier: st.barrier(topic, 0).unwrap(),
            bytes: 100,
            process: None,
        }
    }

    #[test]
    fn positions_move_by_batch_and_follow_the_queue() {
        let mut st = State::default();
        st.assign("t", 0, StartOffset::At(0));
        let r = records(&st, "t", 0, 3, 5); // a marker at 3..5 follows the records
        st.push_records(r);
        st.cursor_mut("t", 0)
            .unwrap()
            .advance(Position::new(5, Some(1)));
        assert_eq!(st.cursor("t", 0).unwrap().position.unwrap().offset, 0);
        // Only markers came next: the fetch position moves, the position waits for the queue.
        st.cursor_mut("t", 0)
            .unwrap()
            .advance(Position::new(7, Some(1)));
        let (out, err, stale) = st.take(100);
        assert!(err.is_none());
        assert_eq!(stale, 0);
        assert_eq!(out.len(), 1);
        assert_eq!(
            st.cursor("t", 0).unwrap().position,
            Some(Position::new(7, Some(1))),
            "position passes the markers once the queue is drained"
        );
        assert_eq!(st.queued_bytes, 0);
        // With nothing queued, markers move the position at once.
        st.cursor_mut("t", 0)
            .unwrap()
            .advance(Position::new(9, Some(2)));
        assert_eq!(st.cursor("t", 0).unwrap().position.unwrap().offset, 9);
    }

    #[test]
    fn seek_and_unassign_drop_queued_records_behind_the_barrier() {
        let mut st = State::default();
        st.assign("t", 0, StartOffset::At(0));
        st.assign("u", 0, StartOffset::At(0));
        let r = records(&st, "t", 0, 3, 3);
        let barrier = r.barrier.clone();
        st.push_records(r);
        let u = records(&st, "u", 0, 2, 2);
        st.push_records(u);
        assert!(st.seek("t", 0, StartOffset::At(100)));
        assert!(
            !barrier.holds(),
            "records handed out before the seek are now stale"
        );
        assert_eq!(st.queued_bytes, 100, "t's records are gone, u's stay");
        let (out, _, _) = st.take(100);
        assert_eq!(out.len(), 1);
        assert_eq!(&*out[0].topic, "u");
        assert_eq!(st.cursor("t", 0).unwrap().position.unwrap().offset, 100);
        let r = records(&st, "t", 100, 1, 101);
        st.push_records(r);
        assert!(st.unassign("t", 0));
        assert_eq!(st.queued_bytes, 0);
        assert!(st.take(100).0.is_empty());
        assert!(st.cursor("t", 0).is_none());
    }

    #[test]
    fn paused_partitions_keep_their_records_and_errors_come_after_records() {
        let mut st = State::default();
        st.assign("t", 0, StartOffset::At(0));
        st.assign("u", 0, StartOffset::At(0));
        let r = records(&st, "t", 0, 3, 3);
        st.push_records(r);
        let u = records(&st, "u", 0, 2, 2);
        st.push_records(u);
        st.fail(&Arc::from("u"), 0, Error::Protocol("bad".into()));
        st.cursor_mut("t", 0).unwrap().paused = true;
        let (out, err, _) = st.take(100);
        assert_eq!(out.len(), 1, "only u's records");
        assert!(err.is_none(), "the error waits for the next call");
        let (out, err, _) = st.take(100);
        assert!(out.is_empty());
        assert!(err.is_some());
        st.cursor_mut("t", 0).unwrap().paused = false;
        let (out, _, _) = st.take(100);
        assert_eq!(&*out[0].topic, "t", "resumed: its records come");
    }

    #[test]
    fn lag_uses_the_last_stable_offset_when_read_committed() {
        let mut st = State::default();
        st.assign("t", 0, StartOffset::At(4));
        let c = st.cursor_mut("t", 0).unwrap();
        c.high_watermark = 10;
        c.last_stable_offset = 8;
        assert_eq!(c.lag(false), Some(6));
        assert_eq!(c.lag(true), Some(4));
    }
}
