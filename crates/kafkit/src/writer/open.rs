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

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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
/// reads them through its thread's cache, [`SharedRoutes::with`]): a `send` that finds its
/// thread's copy current reads one counter that only publications write, and takes no lock
/// and no reference count. (`arc-swap`'s `load`, measured here first, cost about 7 % of a
/// record's CPU time with two sending tasks: a thread-local debt written and paid per
/// record.)
#[derive(Debug)]
pub(crate) struct SharedRoutes {
    /// This writer's number among the process's writers: the key of the threads' caches.
    id: u64,
    /// Bumped after each publication: a thread's copy of an older one is read again.
    generation: AtomicU64,
    current: Mutex<Arc<Routes>>,
}

/// The number of the next writer's routes.
static NEXT_ROUTES: AtomicU64 = AtomicU64::new(1);

/// Writers whose routes each thread keeps at once (direct-mapped by their number).
const CACHED: usize = 4;

/// One thread's copy of a writer's routes, as of a generation.
struct Cached {
    id: u64,
    generation: u64,
    routes: Arc<Routes>,
}

thread_local! {
    static CACHE: RefCell<[Option<Cached>; CACHED]> = const { RefCell::new([const { None }; CACHED]) };
}

impl Default for SharedRoutes {
    fn default() -> Self {
        SharedRoutes {
            id: NEXT_ROUTES.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(0),
            current: Mutex::new(Arc::new(Routes::default())),
        }
    }
}

impl SharedRoutes {
    /// The routes published last.
    pub(crate) fn load(&self) -> Arc<Routes> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Publishes `routes` (the state calls this under its lock, so publications are ordered).
    pub(crate) fn store(&self, routes: Arc<Routes>) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = routes;
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Runs `f` on the routes: this thread's copy when it is of the latest generation, else
    /// the latest (then kept as this thread's copy). The generation is read before the routes,
    /// so a copy is never older than the generation it is kept under; a copy a little older
    /// than the latest is harmless anyway (a slot or topic missing from it sends the record
    /// the slow way, through the state lock).
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Routes) -> R) -> R {
        let generation = self.generation.load(Ordering::Acquire);
        let at = (self.id % CACHED as u64) as usize;
        let mut f = Some(f);
        let cached = CACHE.try_with(|cache| {
            let cache = cache.try_borrow().ok()?;
            let c = cache[at].as_ref()?;
            if c.id != self.id || c.generation != generation {
                return None;
            }
            let f = f.take()?;
            Some(f(&c.routes))
        });
        if let Ok(Some(r)) = cached {
            return r;
        }
        let routes = self.load();
        let _ = CACHE.try_with(|cache| {
            if let Ok(mut cache) = cache.try_borrow_mut() {
                cache[at] = Some(Cached {
                    id: self.id,
                    generation,
                    routes: routes.clone(),
                });
            }
        });
        match f.take() {
            Some(f) => f(&routes),
            None => unreachable!("the cached path returns once it took `f`"),
        }
    }
}

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

    /// A thread's copy of the routes follows every publication, and two writers whose copies
    /// share a cache entry each read their own.
    #[test]
    fn the_thread_s_copy_follows_publications_and_keeps_writers_apart() {
        let routes = |credit_bytes| {
            Arc::new(Routes {
                credit_bytes,
                ..Routes::default()
            })
        };
        let a = SharedRoutes::default();
        // Writers CACHED numbers apart share their entry in every thread's cache.
        let b = loop {
            let b = SharedRoutes::default();
            if b.id % CACHED as u64 == a.id % CACHED as u64 {
                break b;
            }
        };
        a.store(routes(1));
        b.store(routes(2));
        for _ in 0..3 {
            assert_eq!(a.with(|r| r.credit_bytes), 1);
            assert_eq!(b.with(|r| r.credit_bytes), 2);
        }
        a.store(routes(3));
        assert_eq!(a.with(|r| r.credit_bytes), 3);
        assert_eq!(a.with(|r| r.credit_bytes), 3);
        assert_eq!(b.with(|r| r.credit_bytes), 2);
        // Another thread reads the latest too.
        let a = Arc::new(a);
        let other = {
            let a = a.clone();
            std::thread::spawn(move || a.with(|r| r.credit_bytes))
        };
        assert_eq!(other.join().expect("thread"), 3);
    }

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
