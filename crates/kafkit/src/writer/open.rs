//! What `send` reaches without the writer's lock: each partition's open batch behind a lock of
//! its own ([`Slot`]), and a snapshot of the writer's topics ([`Routes`]) read without any lock.
//!
//! The common case of `send`, a record that joins its partition's open batch and leaves it
//! open, takes the partition's slot lock only (`Inner::append_fast`): two tasks sending to
//! different partitions never wait for each other, and the writer's state lock is taken once
//! per batch (to start it, to seal it when a record fills it), not once per record. The Java
//! producer does the same with a lock per partition queue (`RecordAccumulator`); librdkafka
//! keeps a queue per partition, each with its own lock.
//!
//! Invariants (every one upheld under the writer's state lock, `Inner::lock`):
//! - A slot's batch is made, sealed and taken out only under the state lock (which then takes
//!   the slot's lock: state before slot, never the other way). Without the state lock, a
//!   `send` only appends to a batch already there and leaves it open (a record that would
//!   fill it takes the state lock), so [`PartState::open`](super::accumulator::PartState::open)
//!   (its creation time and deadline) is true whenever the state lock is held.
//! - A slot's batch is newer than every batch in its partition's queue: the queue is sent
//!   first, then the slot's batch (per-partition order).
//! - A slot's credit ([`Open::credit_bytes`], [`Open::credit_records`]) is buffer space taken
//!   from the writer's semaphores and not yet charged to a record: taken in chunks so that a
//!   record costs no atomic operation on memory the other tasks write, and given back
//!   ([`Routes::slots`]) before any `send` waits for room, so no room sits in a slot while a
//!   caller waits.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arc_swap::ArcSwap;
use rustc_hash::FxHashMap;

use super::batch::{Batch, DeliveryFuture, PendingRecord};
use super::config::Config;

/// One partition's open batch and buffer credit, behind a lock of its own.
#[derive(Debug)]
pub(crate) struct Slot {
    open: Mutex<Open>,
}

/// What a [`Slot`]'s lock guards.
#[derive(Debug, Default)]
pub(crate) struct Open {
    /// The partition's open batch (never sealed while here), if any.
    pub(crate) batch: Option<Batch>,
    /// Bytes of buffer space (`buffer_memory`) held for the next records of this partition.
    pub(crate) credit_bytes: usize,
    /// Records of buffer space (`max_buffered_records`) held likewise.
    pub(crate) credit_records: usize,
    /// The partition has a leader (set with `PartState::leader` under the state lock): a
    /// record to a partition without one takes the state lock, which may learn the leader
    /// from cached metadata.
    pub(crate) routed: bool,
}

impl Slot {
    pub(crate) fn new() -> Arc<Slot> {
        Arc::new(Slot {
            open: Mutex::new(Open::default()),
        })
    }

    /// The slot's lock (a panic elsewhere while it was held leaves the batch as it was: each
    /// change to it is whole before the lock is let go).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What `send` needs of one topic without the state lock: a copy of
/// [`TopicState`](super::accumulator::TopicState)'s partitions, kept current by the state.
#[derive(Debug, Default)]
pub(crate) struct TopicRoute {
    /// `0..n`, for the balancer.
    pub(crate) partitions: Vec<i32>,
    /// The partitions with a leader among the listed brokers (KIP-794).
    pub(crate) available: Vec<i32>,
    /// Partition index -> its slot, once a record went there.
    pub(crate) slots: Vec<Option<Arc<Slot>>>,
}

/// The writer's topics as `send` reads them: published again (a new snapshot) under the state
/// lock whenever a topic, its partitions or a partition's slot is added.
#[derive(Debug, Default)]
pub(crate) struct Routes {
    pub(crate) topics: FxHashMap<Arc<str>, Arc<TopicRoute>>,
    /// Bytes of buffer space a slot takes at once ([`Open::credit_bytes`]): at most an eighth
    /// of `buffer_memory` over all slots, so the credit held never starves a partition.
    pub(crate) credit_bytes: usize,
    /// Records a slot takes at once, likewise of `max_buffered_records`.
    pub(crate) credit_records: usize,
}

impl Routes {
    /// Every slot, for giving their credit back.
    pub(crate) fn slots(&self) -> impl Iterator<Item = &Arc<Slot>> {
        self.topics
            .values()
            .flat_map(|t| t.slots.iter().filter_map(Option::as_ref))
    }
}

/// The routes, shared by the state (which publishes them, under its lock) and `send` (which
/// reads them without a lock). `arc-swap`'s `load` was measured against a per-thread copy kept
/// by generation (a `thread_local!` cache): 95 against 100 ns of CPU per record on
/// `kafkit-bench encode`, so the library stays.
pub(crate) type SharedRoutes = Arc<ArcSwap<Routes>>;

/// The most bytes of credit a slot takes at once.
const MAX_CREDIT_BYTES: usize = 64 << 10;
/// The most records of credit a slot takes at once.
const MAX_CREDIT_RECORDS: usize = 256;

/// The chunk of credit each of `slots` slots takes: an eighth of `limit` shared among them, at
/// most `max`, at least 1.
pub(crate) fn credit_chunk(limit: usize, slots: usize, max: usize) -> usize {
    (limit / 8 / slots.max(1)).clamp(1, max)
}

/// [`credit_chunk`] of bytes and of records for `slots` slots, under the limits
/// `(buffer_memory, max_buffered_records)`.
pub(crate) fn credit_chunks(
    (bytes, records): (usize, Option<usize>),
    slots: usize,
) -> (usize, usize) {
    (
        credit_chunk(bytes, slots, MAX_CREDIT_BYTES),
        records.map_or(0, |r| credit_chunk(r, slots, MAX_CREDIT_RECORDS)),
    )
}

/// The size of `record` in `b` when it may join it (`b` open, `record` not `alone`, within
/// `batch_size` and `batch_max_records`); `None` when it needs a new batch.
#[inline(always)]
pub(crate) fn fits(
    b: &Batch,
    record: &PendingRecord,
    alone: bool,
    config: &Config,
) -> Option<usize> {
    if b.sealed || alone || b.count() >= config.batch_max_records {
        return None;
    }
    let base = b.base_timestamp().unwrap_or(record.timestamp);
    let size = record.size_at(b.count(), record.timestamp.wrapping_sub(base));
    (b.size + size <= config.batch_size).then_some(size)
}

/// Whether a record of `size` bytes would fill `b` (it is then sealed).
#[inline(always)]
pub(crate) fn would_fill(b: &Batch, size: usize, config: &Config) -> bool {
    b.count() + 1 >= config.batch_max_records || b.size + size >= config.batch_size
}

/// Adds `record` (`size` bytes in the batch, `cost` against the buffer) to `batch`: encodes it
/// into the batch's records section (the caller drops its key and value, on the sending thread),
/// sealing the batch when it is full or the record is `alone`. Returns the record's future
/// (with `want_future`) and whether the batch was sealed.
///
/// # Errors
/// The record would take the batch past the protocol's `i32` limits (nothing added).
#[inline(always)]
pub(crate) fn add_record(
    batch: &mut Batch,
    record: &PendingRecord,
    size: usize,
    cost: usize,
    alone: bool,
    config: &Config,
    want_future: bool,
) -> Result<(Option<DeliveryFuture>, bool), kafkit_protocol::records::RecordsError> {
    let index = u32::try_from(batch.count()).unwrap_or(u32::MAX);
    let timestamp = record.timestamp;
    batch.append(record, size)?;
    batch.cost += cost;
    let full =
        alone || batch.count() >= config.batch_max_records || batch.size >= config.batch_size;
    if full {
        batch.sealed = true;
    }
    let future =
        want_future.then(|| DeliveryFuture::pending(batch.shared.clone(), index, timestamp));
    Ok((future, full))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_chunks_share_an_eighth_of_the_limit() {
        assert_eq!(
            credit_chunk(32 << 20, 48, MAX_CREDIT_BYTES),
            MAX_CREDIT_BYTES
        );
        assert_eq!(credit_chunk(32 << 20, 1_000, MAX_CREDIT_BYTES), 4_194);
        assert_eq!(credit_chunk(100, 1_000, MAX_CREDIT_BYTES), 1);
        assert_eq!(credit_chunk(10, 0, 4), 1);
    }
}
