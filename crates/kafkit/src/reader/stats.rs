//! Counters of a [`Reader`](super::Reader), read with [`Reader::stats`](super::Reader::stats).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A snapshot of a reader's counters since it was built, and of its partitions now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReaderStats {
    /// Fetch requests sent, per broker node id (one per broker per round).
    pub fetch_requests: BTreeMap<i32, u64>,
    /// Of those, incremental fetch session requests (KIP-227).
    pub incremental_fetches: u64,
    /// Fetch requests that got no answer (connection lost, timeout) or a whole-request error.
    pub fetch_errors: u64,
    /// Record data received in Fetch answers, in bytes (the `records` fields, as sent:
    /// compressed when the batches are).
    pub fetch_bytes: u64,
    /// Records decoded from Fetch answers (markers and aborted records excluded). Each is
    /// then delivered, discarded, or still buffered.
    pub records_fetched: u64,
    /// Records handed to the application: those `next_batch` returned, and those the `Stream`
    /// yielded (the rest of a partition's records that the barrier drops on the `Stream` count
    /// in `records_discarded`, not here).
    pub records_delivered: u64,
    /// Records fetched but dropped by the version barrier (their partition was sought, reset
    /// or unassigned before they were handed out: queued, in a Fetch answer still out, or
    /// the rest of the `Stream`'s current chunk).
    pub records_discarded: u64,
    /// Record data fetched and not yet handed out, in bytes (bounded by `queued_max_bytes`
    /// plus one answer per broker).
    pub buffered_bytes: u64,
    /// Every assigned partition, sorted by topic and partition.
    pub partitions: Vec<PartitionStats>,
}

/// One assigned partition in [`ReaderStats`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionStats {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The position (next offset for the application), `None` while awaiting a reset.
    pub position: Option<i64>,
    /// Where the next Fetch starts (ahead of `position` by what is buffered).
    pub fetch_offset: i64,
    /// The last high watermark seen (-1 before the first answer).
    pub high_watermark: i64,
    /// The last stable offset seen (-1 when unknown).
    pub last_stable_offset: i64,
    /// `high_watermark` (or the last stable offset under `read_committed`) minus `position`.
    pub lag: Option<i64>,
    /// Fetched, undelivered record data of this partition, in bytes.
    pub buffered_bytes: u64,
    /// The broker it is fetched from now (leader or preferred replica), `None` while unknown.
    pub node: Option<i32>,
    /// Whether it is paused.
    pub paused: bool,
    /// What the partition waits for now (librdkafka's per-partition `fetch_state`).
    pub fetch_state: FetchState,
    /// Whether a request for it (ListOffsets, OffsetForLeaderEpoch or Fetch) awaits its
    /// answer.
    pub in_flight: bool,
    /// Failed attempts in a row (leader look-up, ListOffsets, OffsetForLeaderEpoch, Fetch)
    /// since the last one that succeeded: the retry backoff grows with it.
    pub failures: u32,
}

/// The fetch state of one partition in [`PartitionStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FetchState {
    /// Its leader is unknown: metadata is being looked up.
    AwaitingLeader,
    /// Its position comes from ListOffsets (a reset: earliest, latest or by timestamp;
    /// librdkafka's `offset-query`).
    Resetting,
    /// Its position is being validated against the leader's log (OffsetForLeaderEpoch,
    /// KIP-320).
    Validating,
    /// It is fetched (librdkafka's `active`), unless paused, backing off or its buffer is
    /// full.
    Fetching,
    /// It stopped after an error that was reported; a seek or a new assignment starts it
    /// again.
    Failed,
}

/// The live counters (atomics, and one short mutex for the per-broker map).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) requests: Mutex<BTreeMap<i32, u64>>,
    pub(crate) incremental: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) fetched: AtomicU64,
    pub(crate) delivered: AtomicU64,
    pub(crate) discarded: AtomicU64,
    /// The KIP-714 windows (`reader/telemetry.rs` reports them).
    pub(crate) kip714: crate::telemetry::window::FetchWindows,
}

impl Counters {
    pub(crate) fn request(&self, node: i32, incremental: bool) {
        *self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(node)
            .or_default() += 1;
        if incremental {
            self.incremental.fetch_add(1, Relaxed);
        }
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    /// The counters part of a snapshot (the partitions are filled in by the caller).
    pub(crate) fn snapshot(&self) -> ReaderStats {
        ReaderStats {
            fetch_requests: self
                .requests
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
            incremental_fetches: self.incremental.load(Relaxed),
            fetch_errors: self.errors.load(Relaxed),
            fetch_bytes: self.bytes.load(Relaxed),
            records_fetched: self.fetched.load(Relaxed),
            records_delivered: self.delivered.load(Relaxed),
            records_discarded: self.discarded.load(Relaxed),
            buffered_bytes: 0,
            partitions: Vec::new(),
        }
    }
}
