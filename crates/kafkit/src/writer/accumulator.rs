//! The accumulator: per topic-partition queues of batches, which broker leads each partition,
//! and the choice of what one Produce request to a broker carries. No I/O here; the writer's
//! tasks (sender.rs) call into it under the writer's state lock. Each partition's open batch
//! sits in its [`Slot`], behind a lock of its own, where `send` appends without the state lock
//! (open.rs says how the two locks share the work).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafkit_protocol::records::BATCH_HEADER_SIZE;
use rustc_hash::FxHashMap;

use super::batch::{Batch, DeliveryFuture, Outcome, PartId, PendingRecord};
use super::config::Config;
use super::open::{Routes, SharedRoutes, Slot, TopicRoute, add_record, credit_chunks, fits};
use crate::error::produce::ProduceError;

/// Producer id and epoch (KIP-98) and where getting them stands.
#[derive(Debug, Clone)]
pub(crate) struct Producer {
    pub(crate) id: i64,
    pub(crate) epoch: i16,
    /// Bumped each time the id or epoch changes; sequences of older generations are void.
    pub(crate) generation: u64,
    pub(crate) status: ProducerStatus,
    /// An epoch bump of this id failed (even retriably): the next attempt asks for a new id.
    pub(crate) bump_failed: bool,
}

/// Where getting the producer id stands.
#[derive(Debug, Clone)]
pub(crate) enum ProducerStatus {
    /// Not idempotent, or the id is known: batches may be sent.
    Ready,
    /// An InitProducerId (first, or an epoch bump after a sequence error) is needed.
    Needed,
    /// InitProducerId failed for good: batches fail with this error.
    Failed(ProduceError),
}

/// One topic-partition's queue.
#[derive(Debug)]
pub(crate) struct PartState {
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
    /// Sealed batches waiting, oldest first (the open one, newer than all of them, is in
    /// `slot`).
    pub(crate) batches: VecDeque<Batch>,
    /// The partition's open batch and buffer credit, behind a lock of its own (open.rs).
    pub(crate) slot: Arc<Slot>,
    /// The creation time and delivery deadline of the batch in `slot`, while there is one.
    pub(crate) open: Option<OpenBatch>,
    /// The batch in a request now, if any (at most one per partition: order across retries).
    pub(crate) in_flight: Option<Arc<super::batch::BatchShared>>,
    /// Leader node id, -1 when unknown (then the partition is in [`State::unrouted`]).
    pub(crate) leader: i32,
    /// The next batch's base sequence (idempotence).
    pub(crate) next_sequence: i32,
    /// No send before this (retry backoff).
    pub(crate) retry_at: Option<Instant>,
    /// Where the partition sits in its leader's [`BrokerState::queued`] (it has batches and
    /// a leader), or in [`State::unrouted`] (no leader).
    pub(crate) pos: Option<usize>,
    /// Records of the partition's last batch taken for sending: a new batch reserves room for
    /// as many (up to [`MAX_RESERVED_RECORDS`]), so its vector grows once, not once per doubling.
    pub(crate) last_count: usize,
}

/// When the open batch of a partition (in its [`Slot`]) was made and must be delivered by:
/// what the sender needs to know of it without taking the slot's lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpenBatch {
    pub(crate) created: Instant,
    pub(crate) deadline: Instant,
}

/// The oldest batch of a partition as a plan sees it: its creation time, delivery deadline
/// and whether it is sealed (ready whatever the linger).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Front {
    pub(crate) created: Instant,
    pub(crate) deadline: Instant,
    pub(crate) sealed: bool,
}

/// The most records a new batch reserves room for up front.
const MAX_RESERVED_RECORDS: usize = 4_096;

/// One broker's sending state.
#[derive(Debug, Default)]
pub(crate) struct BrokerState {
    /// The partitions this broker leads (as far as the writer knows) that have batches queued:
    /// what its plans look at, so planning costs what is queued, not every partition it leads.
    /// Each partition's index here is its [`PartState::pos`].
    pub(crate) queued: Vec<PartId>,
    /// Produce requests in flight.
    pub(crate) in_flight: usize,
    /// Where the next scan starts in `queued`, so no partition starves.
    pub(crate) rotation: usize,
    /// No request before this (`throttle_time_ms`).
    pub(crate) throttled_until: Option<Instant>,
    /// Whether its sender task runs.
    pub(crate) has_sender: bool,
    /// The latest time the sender will plan again by itself (its sleep deadline; `None`: it
    /// sleeps until woken). Appends wake it only for a batch ready before then.
    pub(crate) wake_at: Option<Instant>,
    /// The sender cannot send (no producer id yet, or its in-flight limit reached): it is
    /// woken by the id or an answer, and sleeps at most until its earliest delivery deadline;
    /// appends wake it only for a batch whose deadline comes before `wake_at`.
    pub(crate) blocked: bool,
}

/// A topic as the writer knows it.
#[derive(Debug)]
pub(crate) struct TopicState {
    pub(crate) name: Arc<str>,
    /// `0..n`, for the balancer.
    pub(crate) partitions: Vec<i32>,
    /// The partitions with a leader among the listed brokers (for keyless records, KIP-794).
    pub(crate) available: Vec<i32>,
    /// Partition index -> its [`PartId`], once a record went there.
    pub(crate) ids: Vec<Option<PartId>>,
    /// The topic id the last metadata gave (KIP-516; zero: not known, e.g. Metadata below
    /// v10). Produce v13+ names the topic by it.
    pub(crate) topic_id: kafkit_protocol::Uuid,
}

/// What a broker's sender should do now.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    /// Batches for one Produce request, with their partitions, and the producer id/epoch to
    /// encode them with.
    pub(crate) request: Vec<(PartId, Batch)>,
    pub(crate) producer_id: i64,
    pub(crate) producer_epoch: i16,
    /// Batches that ended here (expired, or the producer id could not be had).
    pub(crate) done: Vec<(Batch, Outcome)>,
    /// When to look again, if nothing wakes the sender earlier.
    pub(crate) next_wake: Option<Instant>,
    /// A batch that ended here needs a new producer epoch: the router has work.
    pub(crate) wake_router: bool,
}

/// Everything behind the writer's state lock (the open batches are in their partitions'
/// slots, each behind a lock of its own: open.rs).
#[derive(Debug)]
pub(crate) struct State {
    /// Each known topic's partitions and ids. Looked up by name once per record, so hashed with FxHash (`rustc-hash`) rather than
    /// SipHash: the names are the writer's own topics, not input an attacker chooses.
    pub(crate) topics: FxHashMap<Arc<str>, TopicState>,
    pub(crate) parts: Vec<PartState>,
    pub(crate) brokers: FxHashMap<i32, BrokerState>,
    /// The partitions with no known leader; each one's index here is its [`PartState::pos`].
    pub(crate) unrouted: Vec<PartId>,
    /// Scratch list of partition ids for [`State::plan_into`], kept to reuse its memory.
    scratch: Vec<PartId>,
    /// Scratch list of the partitions [`State::scan`] finds eligible, kept to reuse its memory.
    eligible: Vec<PartId>,
    /// The lists of requests that are over, kept for the next ones (taken with a plan, given
    /// back when the request's outcome was applied): in steady state a request allocates none.
    pub(crate) request_lists: Vec<super::lists::RequestLists>,
    /// Batches taken out of their queue to end outside the lock, not held by an in-flight
    /// mark (expired, refused a sequence number, not splittable), until they have ended:
    /// [`State::seal_all`] hands them to `flush` too, so a flush in that gap still waits for
    /// their outcome. `Inner::finish_releasing` drops the ended ones.
    pub(crate) ending: Vec<Arc<super::batch::BatchShared>>,
    /// What ended batches left for new ones ([`Spares`]): a new batch in steady state
    /// allocates nothing.
    pub(crate) spares: Spares,
    pub(crate) producer: Producer,
    /// Idempotent writes (the setting, unless turned off because the cluster cannot give a
    /// producer id and idempotence was not asked for explicitly).
    pub(crate) idempotent: bool,
    /// No more records; batches are sent without lingering.
    pub(crate) closing: bool,
    /// Tasks stop.
    pub(crate) shutdown: bool,
    /// Records and bytes of the batches out of their slots (queued, in flight, ending); the
    /// open batches' are counted when they leave their slot ([`State::buffered`] adds them).
    pub(crate) buffered_records: usize,
    pub(crate) buffered_bytes: usize,
    /// Partitions with an open batch in their slot.
    pub(crate) open_batches: usize,
    /// The topics as `send` reads them without this lock, published again on every change.
    pub(crate) routes: SharedRoutes,
    /// `buffer_memory` and `max_buffered_records`, for the slots' credit chunks.
    pub(crate) limits: (usize, Option<usize>),
    /// The transaction state machine of a transactional writer (KIP-98); `None` otherwise.
    pub(crate) txn: Option<super::txn_state::Txn>,
}

/// Most spares kept ([`Spares`]).
const MAX_SPARES: usize = 4_096;
/// Least of the most memory the spares keep, in bytes ([`Spares::for_buffer`] raises it to the
/// writer's `buffer_memory`): beyond the buffer's `buffer_memory`, which counts records, not
/// the memory of batches that ended.
const MAX_SPARE_BYTES: usize = 8 << 20;
/// A records buffer larger than this is not kept: a batch that large spreads its one
/// allocation over many records anyway.
const MAX_SPARE_BUFFER: usize = 256 << 10;

/// The memory of ended batches, kept for new ones of any partition (a stack: the most recently
/// ended, still in cache, is reused first), bounded by [`MAX_SPARES`] and `max_bytes`.
#[derive(Debug)]
pub(crate) struct Spares {
    list: Vec<super::batch::Spare>,
    bytes: usize,
    /// Most bytes kept: [`MAX_SPARE_BYTES`], or the writer's `buffer_memory` when larger.
    max_bytes: usize,
}

impl Default for Spares {
    fn default() -> Self {
        Spares {
            list: Vec::new(),
            bytes: 0,
            max_bytes: MAX_SPARE_BYTES,
        }
    }
}

impl Spares {
    /// Spares for a writer of `buffer_memory` bytes: they may keep as much memory as its
    /// buffered records may take, and never less than [`MAX_SPARE_BYTES`], kept until the writer
    /// closes (Java's `BufferPool` keeps its free buffers too, but counts them within
    /// `buffer.memory`; these come on top of it, so an idle writer holds up to that much more). The records of one
    /// linger window are in that many bytes of batches, and as many end per window: with a
    /// smaller bound (8 MiB before), 1,000 partitions with batches of 10 KiB each made about a
    /// tenth of their batches anew every window (four allocations each) however long the linger.
    pub(crate) fn for_buffer(buffer_memory: usize) -> Self {
        Spares {
            max_bytes: buffer_memory.max(MAX_SPARE_BYTES),
            ..Spares::default()
        }
    }

    /// Keeps `spare` if the bounds allow (dropped otherwise; a buffer over
    /// [`MAX_SPARE_BUFFER`] is dropped and the rest kept).
    pub(crate) fn put(&mut self, mut spare: super::batch::Spare) {
        if spare.bytes() > MAX_SPARE_BUFFER {
            spare.drop_buffer();
        }
        let n = spare.bytes();
        if self.list.len() >= MAX_SPARES || self.bytes.saturating_add(n) > self.max_bytes {
            return;
        }
        self.bytes += n;
        self.list.push(spare);
    }

    /// The most recently kept spare, if any.
    pub(crate) fn take(&mut self) -> Option<super::batch::Spare> {
        let s = self.list.pop()?;
        self.bytes = self.bytes.saturating_sub(s.bytes());
        Some(s)
    }

    /// Spares kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// The spare [`Spares::take`] would give.
    #[cfg(test)]
    pub(crate) fn last(&self) -> Option<&super::batch::Spare> {
        self.list.last()
    }
}

/// How one attempt of a batch ended, as far as its sequence numbers are concerned (the input
/// of [`sequence_fate`], with whether any attempt of the batch may have been written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Written: `NONE`, or `DUPLICATE_SEQUENCE_NUMBER` (an earlier attempt was).
    Written,
    /// A retriable error: sent again as it is, same bytes, same sequence.
    Resend,
    /// `OUT_OF_ORDER_SEQUENCE_NUMBER` / `UNKNOWN_PRODUCER_ID`: this attempt was not appended
    /// and the producer's sequence is broken (KIP-360).
    SequenceError,
    /// Too large for the broker: sent again as two halves, with new sequences.
    Split,
    /// Ends for good: a non-retriable error, its delivery timeout, the producer id failing, the
    /// writer closing.
    Failed,
}

/// What becomes of the sequence numbers of a batch whose attempt ended (see [`Ending`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SequenceFate {
    /// They stay taken: the batch was written, or is sent again with them.
    Keep,
    /// The broker cannot have them: the partition's next batch takes them again.
    Rewind,
    /// The broker may have them, or the sequence is broken: a new producer epoch (KIP-360),
    /// after which every partition restarts at 0. Never a rewind: reusing a sequence the broker
    /// may hold gets the next batch deduplicated against it and acknowledged at its offsets.
    Bump,
}

/// THE decision, for every path that ends an attempt (a response's verdict, a whole-request
/// failure, expiry): whether to keep, rewind or bump, from how the attempt ended and whether
/// the broker may have appended the batch in this or an earlier attempt (`maybe_written`: a
/// timeout, a connection lost after the request was written, `REQUEST_TIMED_OUT`,
/// `NOT_ENOUGH_REPLICAS_AFTER_APPEND`; see [`may_have_appended`]). docs/DESIGN.md's producer
/// table says the same; `sequence_fate_table` below walks every case.
pub(crate) fn sequence_fate(ending: Ending, maybe_written: bool) -> SequenceFate {
    match (ending, maybe_written) {
        (Ending::Written | Ending::Resend, _) => SequenceFate::Keep,
        (Ending::SequenceError, _) => SequenceFate::Bump,
        (Ending::Split | Ending::Failed, false) => SequenceFate::Rewind,
        (Ending::Split | Ending::Failed, true) => SequenceFate::Bump,
    }
}

/// Whether a partition's error code leaves open that the batch was appended: only
/// `REQUEST_TIMED_OUT` (the leader appended and gave up waiting for replicas) and
/// `NOT_ENOUGH_REPLICAS_AFTER_APPEND`. Every other code (`NOT_LEADER_OR_FOLLOWER`,
/// `LEADER_NOT_AVAILABLE`, `UNKNOWN_TOPIC_OR_PARTITION`, `NOT_ENOUGH_REPLICAS`,
/// `CORRUPT_MESSAGE`...) is answered before the append.
pub(crate) fn may_have_appended(code: kafkit_protocol::ErrorCode) -> bool {
    use kafkit_protocol::ErrorCode;
    code == ErrorCode::REQUEST_TIMED_OUT || code == ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND
}

/// `seq + count` with Kafka's wrap-around at `i32::MAX` (sequences restart at 0).
pub(crate) fn next_sequence(seq: i32, count: i32) -> i32 {
    if seq > i32::MAX - count {
        count - (i32::MAX - seq) - 1
    } else {
        seq + count
    }
}

fn min_instant(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl State {
    pub(crate) fn new(idempotent: bool) -> Self {
        State {
            topics: FxHashMap::default(),
            parts: Vec::new(),
            brokers: FxHashMap::default(),
            unrouted: Vec::new(),
            scratch: Vec::new(),
            eligible: Vec::new(),
            request_lists: Vec::new(),
            ending: Vec::new(),
            spares: Spares::default(),
            producer: Producer {
                id: -1,
                epoch: -1,
                generation: 0,
                bump_failed: false,
                status: if idempotent {
                    ProducerStatus::Needed
                } else {
                    ProducerStatus::Ready
                },
            },
            idempotent,
            closing: false,
            shutdown: false,
            buffered_records: 0,
            buffered_bytes: 0,
            open_batches: 0,
            routes: SharedRoutes::default(),
            limits: (usize::MAX, None),
            txn: None,
        }
    }

    /// Publishes `topic`'s partitions and slots to [`State::routes`] (a new snapshot, the
    /// other topics shared with the last one), with the credit chunks for as many slots.
    fn publish(&self, topic: &str) {
        let Some(t) = self.topics.get(topic) else {
            return;
        };
        let route = TopicRoute {
            partitions: t.partitions.clone(),
            available: t.available.clone(),
            slots: t
                .ids
                .iter()
                .map(|id| id.map(|id| self.parts[id].slot.clone()))
                .collect(),
        };
        let old = self.routes.load();
        let mut topics = old.topics.clone();
        topics.insert(t.name.clone(), Arc::new(route));
        let (credit_bytes, credit_records) = credit_chunks(self.limits, self.parts.len());
        self.routes.store(Arc::new(Routes {
            topics,
            credit_bytes,
            credit_records,
        }));
    }

    /// Whether any record is buffered: in a queue, in flight, ending or in an open batch.
    pub(crate) fn has_buffered(&self) -> bool {
        self.buffered_records > 0 || self.open_batches > 0
    }

    /// Records and bytes buffered, the open batches' included (their slots are locked one by
    /// one: for stats and errors, not per record).
    pub(crate) fn buffered(&self) -> (usize, usize) {
        let (mut records, mut bytes) = (self.buffered_records, self.buffered_bytes);
        for p in self.parts.iter().filter(|p| p.open.is_some()) {
            if let Some(b) = &p.slot.lock().batch {
                records += b.count();
                bytes += b.cost;
            }
        }
        (records, bytes)
    }

    /// Whether partition `id` has a batch, queued or open.
    pub(crate) fn has_batches(&self, id: PartId) -> bool {
        let p = &self.parts[id];
        !p.batches.is_empty() || p.open.is_some()
    }

    /// Partition `id`'s oldest batch: the front of its queue, else its open batch.
    pub(crate) fn front(&self, id: PartId) -> Option<Front> {
        let p = &self.parts[id];
        match p.batches.front() {
            Some(b) => Some(Front {
                created: b.created,
                deadline: b.deadline,
                sealed: b.sealed,
            }),
            None => p.open.map(|o| Front {
                created: o.created,
                deadline: o.deadline,
                sealed: false,
            }),
        }
    }

    /// The size in bytes of partition `id`'s oldest batch (the open one's under its slot lock).
    fn front_size(&self, id: PartId) -> usize {
        let p = &self.parts[id];
        match p.batches.front() {
            Some(b) => b.size,
            None => p.slot.lock().batch.as_ref().map_or(0, |b| b.size),
        }
    }

    /// Takes partition `id`'s oldest batch out: the front of its queue, else its open batch
    /// (sealed, out of its slot).
    pub(crate) fn pop_front(&mut self, id: PartId) -> Option<Batch> {
        match self.parts[id].batches.pop_front() {
            Some(b) => Some(b),
            None => self.take_open(id),
        }
    }

    /// Takes partition `id`'s open batch out of its slot, sealed and counted as buffered.
    pub(crate) fn take_open(&mut self, id: PartId) -> Option<Batch> {
        let part = &mut self.parts[id];
        part.open.take()?;
        let batch = part.slot.lock().batch.take();
        self.open_batches -= 1;
        let mut batch = batch?;
        batch.sealed = true;
        self.buffered_records += batch.count();
        self.buffered_bytes += batch.cost;
        Some(batch)
    }

    /// Seals partition `id`'s open batch into the back of its queue.
    fn seal_open(&mut self, id: PartId) {
        if let Some(b) = self.take_open(id) {
            self.parts[id].batches.push_back(b);
        }
    }

    /// Records the partition count of `topic` (from metadata); counts only grow.
    pub(crate) fn set_partition_count(&mut self, topic: &str, count: usize) {
        match self.topics.get_mut(topic) {
            Some(t) => {
                if count > t.partitions.len() {
                    t.partitions = (0..count as i32).collect();
                    t.ids.resize(count, None);
                    self.publish(topic);
                }
            }
            None => {
                let name: Arc<str> = topic.into();
                self.topics.insert(
                    name.clone(),
                    TopicState {
                        name,
                        partitions: (0..count as i32).collect(),
                        available: Vec::new(),
                        ids: vec![None; count],
                        topic_id: kafkit_protocol::Uuid::ZERO,
                    },
                );
                self.publish(topic);
            }
        }
    }

    /// Records what `md` says of `t`: its partition count (which only grows), its topic id,
    /// and which partitions have a leader among the listed brokers.
    pub(crate) fn set_topic_metadata(
        &mut self,
        t: &crate::conn::metadata::TopicMetadata,
        md: &crate::conn::metadata::Metadata,
    ) {
        if !t.error_code.is_ok() {
            return;
        }
        self.set_partition_count(&t.name, t.partitions.len());
        if let Some(state) = self.topics.get_mut(t.name.as_str()) {
            // A topic deleted and created again under its name has a new id: requests from
            // now on name the new one (the old answers UNKNOWN_TOPIC_ID).
            state.topic_id = t.topic_id;
            let available = t
                .partitions
                .iter()
                .filter(|p| p.leader_id >= 0 && md.broker(p.leader_id).is_some())
                .map(|p| p.partition);
            if !state.available.iter().copied().eq(available.clone()) {
                state.available.clear();
                state.available.extend(available);
                self.publish(&t.name);
            }
        }
    }

    /// The partition's id, made on first use (unrouted until a leader is known).
    pub(crate) fn part_id(&mut self, topic: &str, partition: i32) -> Option<PartId> {
        let t = self.topics.get_mut(topic)?;
        let slot = t.ids.get_mut(usize::try_from(partition).ok()?)?;
        if let Some(id) = *slot {
            return Some(id);
        }
        let id = self.parts.len();
        *slot = Some(id);
        self.parts.push(PartState {
            topic: t.name.clone(),
            partition,
            batches: VecDeque::new(),
            slot: Slot::new(),
            open: None,
            in_flight: None,
            leader: -1,
            next_sequence: 0,
            retry_at: None,
            pos: Some(self.unrouted.len()),
            last_count: 0,
        });
        self.unrouted.push(id);
        self.publish(topic);
        Some(id)
    }

    /// The list partition `id` belongs in: its leader's queued partitions, or the unrouted ones.
    fn list_of(&mut self, id: PartId) -> Option<&mut Vec<PartId>> {
        let leader = self.parts[id].leader;
        if leader < 0 {
            Some(&mut self.unrouted)
        } else {
            self.brokers.get_mut(&leader).map(|b| &mut b.queued)
        }
    }

    /// Takes partition `id` out of its list (O(1): the last entry takes its place).
    fn unlist(&mut self, id: PartId) {
        let Some(pos) = self.parts[id].pos.take() else {
            return;
        };
        let Some(list) = self.list_of(id) else { return };
        if list.get(pos) != Some(&id) {
            return;
        }
        list.swap_remove(pos);
        if let Some(&moved) = list.get(pos) {
            self.parts[moved].pos = Some(pos);
        }
    }

    /// Puts partition `id` in its list when it belongs there and is not in it yet: the
    /// unrouted ones (no leader), else its leader's queued ones when it has batches.
    pub(crate) fn relist(&mut self, id: PartId) {
        let part = &self.parts[id];
        if part.pos.is_some() || (part.leader >= 0 && !self.has_batches(id)) {
            return;
        }
        let leader = part.leader;
        let list = if leader < 0 {
            &mut self.unrouted
        } else {
            &mut self.brokers.entry(leader).or_default().queued
        };
        let pos = list.len();
        list.push(id);
        self.parts[id].pos = Some(pos);
    }

    /// Moves partition `id` to `leader` (-1: unknown). Returns whether `leader` needs a sender.
    ///
    /// O(1): the partition leaves one list and joins another ([`State::unlist`],
    /// [`State::relist`]), whatever the number of partitions.
    pub(crate) fn set_leader(&mut self, id: PartId, leader: i32) -> bool {
        let old = self.parts[id].leader;
        if old == leader {
            return false;
        }
        self.unlist(id);
        self.parts[id].leader = leader;
        self.parts[id].slot.lock().routed = leader >= 0;
        self.relist(id);
        if leader < 0 {
            return false;
        }
        !self.brokers.entry(leader).or_default().has_sender
    }

    /// Appends a record to partition `id`: into its open batch when it fits (`batch_size`,
    /// `batch_max_records`), else into a new one. `alone`: the record gets a batch of its own
    /// (a record larger than `batch_size` uncompressed that fits once compressed).
    ///
    /// Returns the record's future and whether the partition's sender should look again (a
    /// batch was sealed or started). `now` is the time of the append (tests pass their own).
    #[cfg(test)]
    pub(crate) fn append(
        &mut self,
        id: PartId,
        record: PendingRecord,
        cost: usize,
        alone: bool,
        config: &Config,
        now: Instant,
    ) -> Result<(DeliveryFuture, bool), ProduceError> {
        let (future, wake) = self.append_with(id, &record, cost, alone, config, || now, true)?;
        Ok((future.expect("a future was asked for"), wake))
    }

    /// [`State::append`] reading the clock (`now`) only when the time matters: when a batch
    /// is started (its creation time, the linger's start) or sealed (whether to wake its
    /// sender). A record that joins an open batch reads no clock. With `want_future` false no
    /// [`DeliveryFuture`] is made (`Writer::send_detached`: the outcome reaches the completion
    /// callback only), which saves the batch slot's reference count.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn append_with(
        &mut self,
        id: PartId,
        record: &PendingRecord,
        cost: usize,
        alone: bool,
        config: &Config,
        now: impl Fn() -> Instant,
        want_future: bool,
    ) -> Result<(Option<DeliveryFuture>, bool), ProduceError> {
        let part = &mut self.parts[id];
        let mut open = part.slot.lock();
        // Into the open batch when the record fits (as `Inner::append_fast` does without this
        // lock, but here the record may fill the batch: it is sealed into the queue).
        if let Some(b) = open.batch.as_mut()
            && let Some(size) = fits(b, record, alone, config)
        {
            let (future, full) = add_record(b, record, size, cost, false, config, want_future)
                .map_err(|e| ProduceError::from(crate::error::Error::from(e)))?;
            drop(open);
            if !full {
                return Ok((future, false));
            }
            self.seal_open(id);
            let now = now();
            let part = &self.parts[id];
            let deadline = part.batches.back().map_or(now, |b| b.deadline);
            let leader = part.leader;
            return Ok((future, self.must_wake(leader, now, deadline, now)));
        }
        drop(open);
        // A new batch: the open one, if any, is sealed behind the queue first.
        self.seal_open(id);
        let now = now();
        let mut batch = self.parts[id].new_batch(record, config, now, &mut self.spares);
        let size = record.size_at(0, 0);
        let (future, sealed) =
            match add_record(&mut batch, record, size, cost, alone, config, want_future) {
                Ok(added) => added,
                Err(e) => {
                    // Past the protocol's limits (not reachable within `batch_size`): the
                    // batch started for the record leaves with it.
                    self.relist(id);
                    return Err(crate::error::Error::from(e).into());
                }
            };
        let deadline = batch.deadline;
        if sealed {
            self.buffered_records += 1;
            self.buffered_bytes += cost;
            self.parts[id].batches.push_back(batch);
        } else {
            let part = &mut self.parts[id];
            part.open = Some(OpenBatch {
                created: now,
                deadline,
            });
            part.slot.lock().batch = Some(batch);
            self.open_batches += 1;
        }
        self.relist(id);
        let ready_at = if sealed || self.closing {
            now
        } else {
            now + Duration::from_millis(config.linger_ms)
        };
        let leader = self.parts[id].leader;
        Ok((future, self.must_wake(leader, ready_at, deadline, now)))
    }

    /// Whether the sender of `leader` must be woken for a new or newly sealed batch ready at
    /// `ready_at`, due by `deadline`: only when it would otherwise sleep past that moment (one
    /// wake-up per linger window, not one per partition); for a blocked sender, past the
    /// batch's delivery deadline (it cannot send the batch anyway, but must expire it on time).
    /// Yes when the leader or its sender state is unknown.
    fn must_wake(
        &mut self,
        leader: i32,
        ready_at: Instant,
        deadline: Instant,
        now: Instant,
    ) -> bool {
        if leader < 0 {
            return true;
        }
        let Some(b) = self.brokers.get_mut(&leader) else {
            return true;
        };
        let due = if b.blocked { deadline } else { ready_at };
        if b.wake_at.is_some_and(|w| w <= due) {
            return false;
        }
        b.wake_at = Some(now);
        true
    }

    /// Seals every open batch (for `flush`/`close`) and returns a handle on every batch not yet
    /// ended, queued or in flight.
    pub(crate) fn seal_all(&mut self) -> Vec<Arc<super::batch::BatchShared>> {
        let mut out = self.ending.clone();
        for id in 0..self.parts.len() {
            self.seal_open(id);
        }
        for p in &mut self.parts {
            out.extend(p.in_flight.iter().cloned());
            for b in &mut p.batches {
                b.sealed = true;
                out.push(b.shared.clone());
            }
        }
        out
    }

    /// Takes the batches that ended in the queues of `parts`: expired ones (`DeliveryTimeout`),
    /// and, when the producer id cannot be had, all of them.
    pub(crate) fn expire(
        &mut self,
        ids: &[PartId],
        now: Instant,
        config: &Config,
        plan: &mut Plan,
    ) {
        let failed = match &self.producer.status {
            ProducerStatus::Failed(e) => Some(e.clone()),
            // An abort, or an error of the transaction: nothing more of it is sent.
            _ => self.txn.as_ref().and_then(|t| t.fail_unsent.clone()),
        };
        for &id in ids {
            while let Some(front) = self.front(id) {
                let error = match &failed {
                    Some(e) => e.clone(),
                    None if front.deadline <= now => ProduceError::DeliveryTimeout {
                        timeout: Duration::from_millis(config.delivery_timeout_ms),
                        // An open batch was never sent: no error of its own.
                        cause: self.parts[id]
                            .batches
                            .front()
                            .and_then(|b| b.last_error.clone())
                            .map(Box::new),
                    },
                    None => break,
                };
                let Some(batch) = self.pop_front(id) else {
                    break;
                };
                plan.wake_router |= self.settle_sequence(id, &batch, Ending::Failed);
                self.ending.push(batch.shared.clone());
                plan.done.push((batch, Outcome::failed(error)));
            }
            if !self.has_batches(id) && self.parts[id].leader >= 0 {
                self.unlist(id);
            }
        }
    }

    /// What broker `broker`'s sender should do at `now`: end expired batches and, once any
    /// batch of the partitions it leads is ready (sealed, lingered `linger_ms`, flushed or
    /// closing), gather into ONE request the oldest batch of EVERY such partition that has
    /// records, ready or not (so a broker gets one request per linger window, not one per
    /// partition deadline), skipping partitions with a batch in flight or in retry backoff;
    /// up to `max_request_size`, starting one partition further each time; unless
    /// `max_in_flight_requests_per_connection` requests are out.
    ///
    /// Phases: expire, [`State::scan`] the partitions, [`State::take`] their batches, then
    /// count the request as in flight. Only the broker's partitions with batches queued are
    /// looked at ([`BrokerState::queued`]).
    ///
    /// `request` (emptied) becomes the request's list, to reuse its memory.
    pub(crate) fn plan_into(
        &mut self,
        broker: i32,
        now: Instant,
        config: &Config,
        mut request: Vec<(PartId, Batch)>,
    ) -> Plan {
        let mut ids = std::mem::take(&mut self.scratch);
        let mut eligible = std::mem::take(&mut self.eligible);
        request.clear();
        let plan = Plan {
            request,
            ..Plan::default()
        };
        let plan = self.plan_with(broker, now, config, &mut ids, &mut eligible, plan);
        ids.clear();
        eligible.clear();
        self.scratch = ids;
        self.eligible = eligible;
        plan
    }

    /// [`State::plan_into`] with a new list.
    #[cfg(test)]
    pub(crate) fn plan(&mut self, broker: i32, now: Instant, config: &Config) -> Plan {
        self.plan_into(broker, now, config, Vec::new())
    }

    /// [`State::plan_into`] with `ids` and `eligible` as the scratch lists of partitions (what is
    /// queued, what may send now).
    fn plan_with(
        &mut self,
        broker: i32,
        now: Instant,
        config: &Config,
        ids: &mut Vec<PartId>,
        eligible: &mut Vec<PartId>,
        mut plan: Plan,
    ) -> Plan {
        let Some(b) = self.brokers.get(&broker) else {
            return plan;
        };
        ids.clear();
        ids.extend_from_slice(&b.queued);
        self.expire(ids, now, config, &mut plan);
        // Expiry may have emptied some: the scan looks at what is still queued.
        let b = self.brokers.get(&broker).expect("checked above");
        ids.clear();
        ids.extend_from_slice(&b.queued);
        let ids = &ids[..];
        let ready_to_send = matches!(self.producer.status, ProducerStatus::Ready);
        let linger = Duration::from_millis(config.linger_ms);
        let b = self.brokers.get_mut(&broker).expect("checked above");
        let throttled = b.throttled_until.filter(|t| *t > now);
        if let Some(t) = throttled {
            plan.next_wake = Some(t);
        }
        // Blocked until an answer or the producer id comes: either wakes the sender.
        let blocked = !ready_to_send || b.in_flight >= config.max_in_flight;
        let start = if ids.is_empty() {
            0
        } else {
            b.rotation % ids.len()
        };
        let scan = self.scan(ids, start, now, linger, eligible, &mut plan);
        if !scan.triggered || blocked || throttled.is_some() {
            if let Some(t) = scan.ready_at {
                plan.next_wake = min_instant(plan.next_wake, t);
            }
            let b = self.brokers.get_mut(&broker).expect("checked above");
            // A blocked sender is woken by the producer id or an answer, and by itself at its
            // earliest deadline (expiry). `None` when it holds no batch: the next append wakes
            // it, so that batch expires on time even if the id never comes.
            b.blocked = blocked;
            b.wake_at = plan.next_wake;
            return plan;
        }
        self.take(eligible, config, &mut plan);
        if plan.request.is_empty() {
            plan.next_wake = Some(now);
            return plan;
        }
        let b = self.brokers.get_mut(&broker).expect("checked above");
        b.in_flight += 1;
        b.blocked = false;
        b.rotation = b.rotation.wrapping_add(1);
        // The sender loops at once after launching a request.
        b.wake_at = Some(now);
        plan.producer_id = self.producer.id;
        plan.producer_epoch = self.producer.epoch;
        plan
    }

    /// Looks at the partitions `ids`, from `start` on (rotating): which may send their oldest
    /// batch now (records, no batch in flight, no retry backoff running; a backoff that ended
    /// is cleared), put in `eligible` in scan order (cleared first), and whether any of those
    /// batches is ready. `plan.next_wake` learns the earliest delivery deadline and backoff end.
    fn scan(
        &mut self,
        ids: &[PartId],
        start: usize,
        now: Instant,
        linger: Duration,
        eligible: &mut Vec<PartId>,
        plan: &mut Plan,
    ) -> Scan {
        let mut scan = Scan::default();
        eligible.clear();
        let n = ids.len();
        for k in 0..n {
            let id = ids[(start + k) % n];
            let Some(front) = self.front(id) else {
                continue;
            };
            let part = &mut self.parts[id];
            plan.next_wake = min_instant(plan.next_wake, front.deadline);
            if part.in_flight.is_some() {
                continue;
            }
            // A transaction's partition sends once AddPartitionsToTxn added it (the router
            // asks for it when the partition's first record comes).
            if let Some(t) = &self.txn
                && !t.may_send(id)
            {
                continue;
            }
            if let Some(t) = part.retry_at {
                if t > now {
                    plan.next_wake = min_instant(plan.next_wake, t);
                    continue;
                }
                part.retry_at = None;
            }
            if front.sealed || self.closing || front.created + linger <= now {
                scan.triggered = true;
            } else {
                scan.ready_at = min_instant(scan.ready_at, front.created + linger);
            }
            eligible.push(id);
        }
        scan
    }

    /// Moves the oldest batch of each `eligible` partition into `plan.request`, sealed,
    /// numbered ([`State::number`]) and marked in flight, up to `max_request_size` (the first
    /// batch always goes). A batch that may not be resent ends in `plan.done`.
    fn take(&mut self, eligible: &[PartId], config: &Config, plan: &mut Plan) {
        let mut bytes = 0usize;
        // One allocation for the request's list (it leaves with the request).
        plan.request.reserve(eligible.len());
        for &id in eligible {
            if !self.has_batches(id) {
                continue;
            }
            if !plan.request.is_empty() && bytes + self.front_size(id) > config.max_request_size {
                // The next request takes it; look again as soon as this one is out.
                continue;
            }
            let Some(mut batch) = self.pop_front(id) else {
                continue;
            };
            batch.sealed = true;
            self.parts[id].last_count = batch.count();
            if !self.has_batches(id) {
                self.unlist(id);
            }
            if self.idempotent
                && let Err(error) = self.number(id, &mut batch)
            {
                self.ending.push(batch.shared.clone());
                plan.done.push((batch, Outcome::failed(error)));
                continue;
            }
            bytes += batch.size;
            self.parts[id].in_flight = Some(batch.shared.clone());
            plan.request.push((id, batch));
        }
    }

    /// Gives partition `id`'s `batch` its sequence under the current producer generation
    /// (idempotence): a batch numbered in this generation keeps its sequence (a retry), any
    /// other takes the partition's next one and is encoded again. Errors: a batch sent under an
    /// older producer epoch and maybe written (OUT_OF_ORDER_SEQUENCE_NUMBER).
    fn number(&mut self, id: PartId, batch: &mut Batch) -> Result<(), ProduceError> {
        let generation = self.producer.generation;
        let part = &mut self.parts[id];
        if batch.sequence.map(|(g, _)| g) != Some(generation) && batch.maybe_written {
            // Sent under an older producer epoch and maybe written: renumbered under the
            // new epoch the broker could not tell it from new records (a duplicate).
            return Err(ProduceError::Broker {
                code: kafkit_protocol::ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER,
                message: Some(
                    "an earlier attempt may have been written before the producer epoch \
                     changed; not resent, as that could duplicate it"
                        .into(),
                ),
                record_error: None,
            });
        }
        if batch.sequence.map(|(g, _)| g) != Some(generation) {
            batch.sequence = Some((generation, part.next_sequence));
            part.next_sequence = next_sequence(part.next_sequence, batch.count() as i32);
            batch.encoded = None;
        }
        Ok(())
    }

    /// Puts a batch back at the head of its partition's queue after a retriable error, to be
    /// sent again after the retry backoff (KIP-580: `retry_backoff` doubling per attempt up to
    /// `retry_backoff_max`, ±20 % jitter), or fails it when its delivery timeout has passed.
    /// Returns whether a new producer epoch is now needed.
    pub(crate) fn requeue(
        &mut self,
        id: PartId,
        mut batch: Batch,
        error: ProduceError,
        now: Instant,
        config: &Config,
        done: &mut Vec<(Batch, Outcome)>,
    ) -> bool {
        let part = &mut self.parts[id];
        batch.attempts += 1;
        let backoff = crate::transport::Backoff {
            base_ms: config.retry_backoff_ms,
            max_ms: config.retry_backoff_max_ms,
        };
        batch.last_error = Some(error);
        part.retry_at = Some(now + backoff.delay(batch.attempts));
        part.batches.push_front(batch);
        self.relist(id);
        let mut plan = Plan::default();
        self.expire(&[id], now, config, &mut plan);
        done.extend(plan.done);
        plan.wake_router
    }

    /// Applies [`sequence_fate`] to `batch` of partition `id`, whose attempt ended as
    /// `ending`: nothing for a batch not numbered in the current producer generation (its
    /// sequence is void already), a rewind of the partition's next sequence (only possible
    /// while the batch holds the partition's latest sequences; otherwise the gap it would
    /// leave needs a new epoch too), or a new epoch. Returns whether a new epoch is now needed
    /// (the router has work).
    pub(crate) fn settle_sequence(&mut self, id: PartId, batch: &Batch, ending: Ending) -> bool {
        if !self.idempotent {
            return false;
        }
        let Some((_, seq)) = batch
            .sequence
            .filter(|(generation, _)| *generation == self.producer.generation)
        else {
            return false;
        };
        match sequence_fate(ending, batch.maybe_written) {
            SequenceFate::Keep => false,
            SequenceFate::Rewind
                if next_sequence(seq, batch.count() as i32) == self.parts[id].next_sequence =>
            {
                self.parts[id].next_sequence = seq;
                false
            }
            SequenceFate::Rewind | SequenceFate::Bump => {
                if let Some(t) = &mut self.txn {
                    // A transactional producer bumps its epoch through the transaction
                    // coordinator when the transaction is aborted (KIP-360): the batch's
                    // failure made the transaction abortable.
                    t.bump_needed = true;
                    return false;
                }
                if matches!(self.producer.status, ProducerStatus::Ready) {
                    self.producer.status = ProducerStatus::Needed;
                    true
                } else {
                    false
                }
            }
        }
    }

    /// Whether a batch is in a request now (a new epoch waits for none: a batch answered after
    /// it would mix epochs).
    pub(crate) fn any_in_flight(&self) -> bool {
        self.parts.iter().any(|p| p.in_flight.is_some())
    }

    /// A new producer id or epoch: every partition's sequence restarts at 0 (KIP-360).
    pub(crate) fn new_producer(&mut self, id: i64, epoch: i16) {
        self.producer.id = id;
        self.producer.epoch = epoch;
        self.producer.generation += 1;
        self.producer.status = ProducerStatus::Ready;
        self.producer.bump_failed = false;
        for p in &mut self.parts {
            p.next_sequence = 0;
        }
    }
}

/// What [`State::scan`] found among a broker's partitions (besides the eligible ones, which
/// it lists in its caller's scratch list).
#[derive(Debug, Default)]
struct Scan {
    /// Whether one of those batches is ready (sealed, lingered, or the writer is closing).
    triggered: bool,
    /// When the first of those batches that is not ready will be.
    ready_at: Option<Instant>,
}

impl PartState {
    /// A new batch for `record` and the records like it that follow, made at `now`: its
    /// records vector reserves room for as many records as the partition's last batch sent
    /// (up to [`MAX_RESERVED_RECORDS`]), so it grows once, not once per doubling; its memory
    /// comes from `spares` when an ended batch left some.
    fn new_batch(
        &self,
        record: &PendingRecord,
        config: &Config,
        now: Instant,
        spares: &mut Spares,
    ) -> Batch {
        let reserve = self
            .last_count
            .min(config.batch_max_records)
            .min(MAX_RESERVED_RECORDS);
        // Room for as many records like this one, each sized at the last one's offset delta
        // and a timestamp delta of a minute: a batch that outgrows its buffer copies it all.
        let reserve_bytes = reserve
            .saturating_mul(record.size_at(reserve, 60_000))
            .saturating_add(BATCH_HEADER_SIZE)
            .min(config.batch_size);
        Batch::new(
            self.topic.clone(),
            self.partition,
            now,
            Duration::from_millis(config.delivery_timeout_ms),
            config.on_completion.clone(),
            (reserve, reserve_bytes),
            spares.take(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Transport;
    use crate::writer::WriterBuilder;
    use bytes::Bytes;

    /// The spare of an ended batch whose buffer holds `bytes`.
    fn spare(bytes: usize) -> super::super::batch::Spare {
        let b = Batch::new(
            "t".into(),
            0,
            Instant::now(),
            Duration::from_secs(1),
            None,
            (0, bytes),
            None,
        );
        assert!(b.complete(Outcome::failed(ProduceError::NoTopic)));
        b.into_spare().expect("an ended batch")
    }

    #[test]
    fn spares_keep_at_most_their_bounds() {
        let mut sp = Spares::default();
        // A buffer too large to keep goes; the slot stays.
        sp.put(spare(MAX_SPARE_BUFFER + 1));
        assert_eq!((sp.len(), sp.bytes), (1, 0));
        let big = MAX_SPARE_BUFFER - 1024;
        for _ in 0..MAX_SPARE_BYTES / big + 3 {
            sp.put(spare(big));
        }
        assert!(sp.bytes <= MAX_SPARE_BYTES && sp.bytes > MAX_SPARE_BYTES - 2 * big);
        let kept = sp.len();
        // What is taken is given back from the count.
        let before = sp.bytes;
        let s = sp.take().expect("a spare");
        assert_eq!((sp.len(), sp.bytes), (kept - 1, before - s.bytes()));
        while sp.take().is_some() {}
        assert_eq!((sp.len(), sp.bytes), (0, 0));
        for _ in 0..MAX_SPARES + 10 {
            sp.put(spare(0));
        }
        assert_eq!(sp.len(), MAX_SPARES);
        // A writer with a larger buffer keeps up to its size, never less than the least bound.
        assert_eq!(Spares::for_buffer(1 << 20).max_bytes, MAX_SPARE_BYTES);
        let mut sp = Spares::for_buffer(4 * MAX_SPARE_BYTES);
        for _ in 0..2 * MAX_SPARE_BYTES / big {
            sp.put(spare(big));
        }
        assert!(sp.bytes > MAX_SPARE_BYTES, "{} bytes kept", sp.bytes);
    }

    fn config(f: impl FnOnce(WriterBuilder) -> WriterBuilder) -> Config {
        let t = Transport::builder(["127.0.0.1:1"]).build().unwrap();
        f(WriterBuilder::new(t)).validate().unwrap()
    }

    /// A record of a `value_len`-byte value (at most 1,024).
    fn rec(value_len: usize) -> PendingRecord<'static> {
        static VALUE: [u8; 1_024] = [b'v'; 1_024];
        PendingRecord::new(1_700_000_000_000, None, Some(&VALUE[..value_len]), &[]).unwrap()
    }

    /// A state with `n` partitions of topic "t", partition p led by broker `p % 2`.
    fn state(n: usize, idempotent: bool) -> State {
        let mut st = State::new(idempotent);
        st.set_partition_count("t", n);
        for p in 0..n as i32 {
            let id = st.part_id("t", p).unwrap();
            st.set_leader(id, p % 2);
        }
        if idempotent {
            st.new_producer(42, 0);
        }
        st
    }

    fn drop_all(done: Vec<(Batch, Outcome)>) {
        for (b, o) in done {
            b.complete(o);
        }
    }

    #[test]
    fn batches_close_at_batch_size_and_max_records() {
        let cfg = config(|b| b.batch_size(1_024).linger(Duration::from_millis(100)));
        let mut st = state(1, false);
        let now = Instant::now();
        let mut wakes = Vec::new();
        for _ in 0..25 {
            let (_f, wake) = st.append(0, rec(100), 100, false, &cfg, now).unwrap();
            wakes.push(wake);
        }
        let mut sizes: Vec<(usize, bool)> = st.parts[0]
            .batches
            .iter()
            .map(|b| (b.count(), b.sealed))
            .collect();
        // The open batch is in the partition's slot, the sealed ones in its queue.
        let open = st.parts[0]
            .slot
            .lock()
            .batch
            .as_ref()
            .map(|b| (b.count(), b.sealed));
        sizes.extend(open);
        // 61 header bytes + 8 records of 109 bytes fit 1024; the 9th starts a new batch.
        assert_eq!(sizes, vec![(8, true), (8, true), (8, true), (1, false)]);
        assert!(st.parts[0].batches.iter().all(|b| b.size <= 1_024));
        // One wake-up: the sender has not planned since, so it is known to look again at once.
        assert_eq!(wakes.iter().filter(|w| **w).count(), 1);
        // 24 records in the queue, one in the open batch.
        assert_eq!(st.buffered_records, 24);
        assert_eq!(st.buffered(), (25, 2_500));
        assert!(st.has_buffered());

        let cfg = config(|b| b.batch_max_records(4).linger(Duration::from_millis(100)));
        let mut st = state(1, false);
        for _ in 0..10 {
            drop(st.append(0, rec(10), 10, false, &cfg, now).unwrap());
        }
        st.seal_all();
        let counts: Vec<usize> = st.parts[0].batches.iter().map(Batch::count).collect();
        assert_eq!(counts, vec![4, 4, 2]);
        drop_all(
            st.parts[0]
                .batches
                .drain(..)
                .map(|b| (b, Outcome::failed(ProduceError::NoTopic)))
                .collect(),
        );
    }

    #[test]
    fn a_broker_gets_every_ready_partition_in_one_request_after_the_linger() {
        let cfg = config(|b| b.linger(Duration::from_millis(50)));
        let mut st = state(6, false);
        let t0 = Instant::now();
        for id in 0..6 {
            // Partition 4's batch starts 30 ms later: not lingered yet when the others are.
            let at = if id == 4 {
                t0 + Duration::from_millis(30)
            } else {
                t0
            };
            drop(st.append(id, rec(10), 10, false, &cfg, at).unwrap());
        }
        let early = st.plan(0, t0 + Duration::from_millis(10), &cfg);
        assert!(early.request.is_empty());
        assert_eq!(early.next_wake, Some(t0 + Duration::from_millis(50)));
        let plan = st.plan(0, t0 + Duration::from_millis(50), &cfg);
        let mut parts: Vec<i32> = plan
            .request
            .iter()
            .map(|(_, b)| b.shared.partition)
            .collect();
        parts.sort_unstable();
        // Broker 0 leads the even partitions; partition 4 rides along in the same request.
        assert_eq!(parts, vec![0, 2, 4]);
        assert_eq!(st.brokers[&0].in_flight, 1);
        // Nothing left for broker 0; broker 1 still has its own.
        assert!(
            st.plan(0, t0 + Duration::from_millis(60), &cfg)
                .request
                .is_empty()
        );
        let other = st.plan(1, t0 + Duration::from_millis(60), &cfg);
        assert_eq!(other.request.len(), 3);
        for (id, b) in plan.request.into_iter().chain(other.request) {
            st.parts[id].in_flight = None;
            b.complete(Outcome::Written {
                base_offset: 0,
                log_append_time: -1,
            });
        }
    }

    #[test]
    fn one_batch_per_partition_in_flight_and_the_request_cap_rotates() {
        let cfg = config(|b| {
            b.linger(Duration::ZERO)
                .batch_size(1_024)
                .max_request_size(1_024)
        });
        let mut st = state(4, false);
        let now = Instant::now();
        for id in [0, 2] {
            for _ in 0..3 {
                // ~600-byte records: one per batch, two batches per partition would not fit.
                drop(st.append(id, rec(600), 600, false, &cfg, now).unwrap());
            }
        }
        let mut firsts = Vec::new();
        let mut taken = Vec::new();
        for _ in 0..2 {
            let plan = st.plan(0, now, &cfg);
            // The cap lets one ~700-byte batch per request; each partition has one in flight.
            assert_eq!(plan.request.len(), 1);
            firsts.push(plan.request[0].1.shared.partition);
            taken.extend(plan.request);
        }
        firsts.sort_unstable();
        assert_eq!(
            firsts,
            vec![0, 2],
            "the start rotates: no partition waits for the other"
        );
        // Both partitions have a batch in flight: nothing more until one returns.
        assert!(st.plan(0, now, &cfg).request.is_empty());
        for (id, b) in taken {
            st.parts[id].in_flight = None;
            b.complete(Outcome::Written {
                base_offset: 0,
                log_append_time: -1,
            });
        }
        st.brokers.get_mut(&0).unwrap().in_flight = 0;
        assert_eq!(st.plan(0, now, &cfg).request.len(), 1);
        st.seal_all();
        drop_all(
            st.parts
                .iter_mut()
                .flat_map(|p| p.batches.drain(..))
                .map(|b| (b, Outcome::failed(ProduceError::NoTopic)))
                .collect(),
        );
    }

    #[test]
    fn sequences_follow_batches_across_retries_failures_and_epoch_bumps() {
        let cfg = config(|b| b.linger(Duration::ZERO).batch_max_records(2));
        let mut st = state(1, true);
        let now = Instant::now();
        for _ in 0..6 {
            drop(st.append(0, rec(10), 10, false, &cfg, now).unwrap());
        }
        // First batch: sequence 0..=1.
        let mut plan = st.plan(0, now, &cfg);
        assert_eq!((plan.producer_id, plan.producer_epoch), (42, 0));
        let (id, b) = plan.request.pop().unwrap();
        assert_eq!(b.sequence, Some((1, 0)));
        assert_eq!(st.parts[0].next_sequence, 2);
        // A retriable error: same sequence on the retry.
        st.parts[id].in_flight = None;
        st.brokers.get_mut(&0).unwrap().in_flight = 0;
        let mut done = Vec::new();
        st.requeue(id, b, ProduceError::NoTopic, now, &cfg, &mut done);
        assert!(done.is_empty());
        let later = now + Duration::from_millis(cfg.retry_backoff_ms * 2);
        let (id, b) = st.plan(0, later, &cfg).request.pop().unwrap();
        assert_eq!((b.sequence, b.attempts), (Some((1, 0)), 1));
        st.parts[id].in_flight = None;
        st.brokers.get_mut(&0).unwrap().in_flight = 0;
        b.complete(Outcome::Written {
            base_offset: 0,
            log_append_time: -1,
        });
        // Second batch fails for good: the third reuses its sequence.
        let (id, b) = st.plan(0, later, &cfg).request.pop().unwrap();
        assert_eq!(b.sequence, Some((1, 2)));
        st.parts[id].in_flight = None;
        st.brokers.get_mut(&0).unwrap().in_flight = 0;
        assert!(!st.settle_sequence(id, &b, Ending::Failed));
        b.complete(Outcome::failed(ProduceError::NoTopic));
        assert_eq!(st.parts[0].next_sequence, 2);
        let (id, b) = st.plan(0, later, &cfg).request.pop().unwrap();
        assert_eq!(b.sequence, Some((1, 2)));
        // Sequence error -> new epoch: every partition restarts at 0 and the batch is renumbered.
        st.parts[id].in_flight = None;
        st.brokers.get_mut(&0).unwrap().in_flight = 0;
        let mut b = b;
        b.encoded = Some(Bytes::from_static(b"stale"));
        st.requeue(id, b, ProduceError::NoTopic, later, &cfg, &mut done);
        st.new_producer(42, 1);
        let later = later + Duration::from_millis(cfg.retry_backoff_ms * 2);
        let plan = st.plan(0, later, &cfg);
        assert_eq!(plan.producer_epoch, 1);
        let (_, b) = &plan.request[0];
        assert_eq!(b.sequence, Some((2, 0)));
        assert!(
            b.encoded.is_none(),
            "re-encoded with the new epoch and sequence"
        );
        assert_eq!(st.parts[0].next_sequence, 2);
        drop(plan);
    }

    #[test]
    fn a_batch_maybe_written_under_an_old_epoch_fails_instead_of_being_renumbered() {
        let cfg = config(|b| b.linger(Duration::ZERO));
        let mut st = state(1, true);
        let now = Instant::now();
        drop(st.append(0, rec(10), 10, false, &cfg, now).unwrap());
        drop(st.append(0, rec(10), 10, false, &cfg, now).unwrap());
        let (id, mut b) = st.plan(0, now, &cfg).request.pop().unwrap();
        st.parts[id].in_flight = None;
        st.brokers.get_mut(&0).unwrap().in_flight = 0;
        // A timeout: the broker may have it. Then another partition's sequence error bumps.
        b.maybe_written = true;
        let mut done = Vec::new();
        st.requeue(id, b, ProduceError::NoTopic, now, &cfg, &mut done);
        assert!(!st.any_in_flight() && done.is_empty());
        st.new_producer(42, 1);
        let later = now + Duration::from_millis(cfg.retry_backoff_ms * 2);
        let plan = st.plan(0, later, &cfg);
        assert!(plan.request.is_empty());
        assert_eq!(plan.done.len(), 1);
        assert!(matches!(
            &plan.done[0].1,
            Outcome::Failed { error: ProduceError::Broker { code, .. }, .. }
                if *code == kafkit_protocol::ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER
        ));
        drop_all(plan.done);
        // The partition goes on with its next batch, numbered from 0 under the new epoch.
        drop(st.append(0, rec(10), 10, false, &cfg, later).unwrap());
        let plan = st.plan(0, later, &cfg);
        assert_eq!(plan.request.len(), 1);
        assert_eq!(plan.request[0].1.sequence, Some((2, 0)));
        assert_eq!(plan.producer_epoch, 1);
    }

    /// Every partition with a leader and batches is in its leader's `queued` list exactly once
    /// (its `pos` pointing at it), and no other partition is: what plans look at.
    fn assert_lists(st: &State) {
        for (id, p) in st.parts.iter().enumerate() {
            let listed: Vec<(i32, usize)> = st
                .brokers
                .iter()
                .flat_map(|(b, s)| {
                    s.queued
                        .iter()
                        .enumerate()
                        .filter(move |(_, x)| **x == id)
                        .map(move |(i, _)| (*b, i))
                })
                .collect();
            let unrouted: Vec<usize> = (0..st.unrouted.len())
                .filter(|&i| st.unrouted[i] == id)
                .collect();
            if p.leader < 0 {
                assert!(listed.is_empty(), "partition {id}: {listed:?}");
                assert_eq!(
                    unrouted.iter().map(|&i| Some(i)).collect::<Vec<_>>(),
                    vec![p.pos]
                );
            } else if !st.has_batches(id) {
                assert!(
                    listed.is_empty() && unrouted.is_empty() && p.pos.is_none(),
                    "{id}"
                );
            } else {
                assert_eq!(listed, vec![(p.leader, p.pos.unwrap())], "partition {id}");
                assert!(unrouted.is_empty());
            }
        }
    }

    /// A plan looks only at the partitions with batches queued; leader moves keep every list
    /// exact (O(1) moves with `pos`), so no batch is planned twice or forgotten.
    #[test]
    fn plans_see_the_queued_partitions_across_leader_moves() {
        let cfg = config(|b| b.linger(Duration::ZERO));
        let mut st = state(1_000, false);
        let now = Instant::now();
        assert_lists(&st);
        assert!(st.brokers.values().all(|b| b.queued.is_empty()));
        for id in [3, 4, 500, 999] {
            drop(st.append(id, rec(10), 10, false, &cfg, now).unwrap());
        }
        assert_lists(&st);
        assert_eq!(st.brokers[&0].queued.len(), 2);
        assert_eq!(st.brokers[&1].queued.len(), 2);
        // Moves: to the other broker, to no leader (unrouted), back, twice to the same one.
        st.set_leader(3, 0);
        st.set_leader(4, -1);
        st.set_leader(500, 1);
        st.set_leader(500, 0);
        st.set_leader(7, 0);
        assert_lists(&st);
        st.set_leader(4, 0);
        assert_lists(&st);
        let plan = st.plan(0, now, &cfg);
        let mut planned: Vec<usize> = plan.request.iter().map(|(id, _)| *id).collect();
        planned.sort_unstable();
        assert_eq!(planned, vec![3, 4, 500]);
        assert!(
            st.brokers[&0].queued.is_empty(),
            "emptied queues leave the list"
        );
        assert_lists(&st);
        let other = st.plan(1, now, &cfg);
        assert_eq!(other.request.len(), 1);
        assert_eq!(other.request[0].0, 999);
        // A retried batch comes back into the list of its (new) leader.
        let mut done = Vec::new();
        let mut taken = plan.request.into_iter();
        let (id, b) = taken.next().unwrap();
        st.parts[id].in_flight = None;
        st.set_leader(id, 1);
        st.requeue(id, b, ProduceError::NoTopic, now, &cfg, &mut done);
        assert!(done.is_empty());
        assert_lists(&st);
        assert_eq!(st.brokers[&1].queued, vec![id]);
        for (id, b) in taken.chain(other.request) {
            st.parts[id].in_flight = None;
            b.complete(Outcome::Written {
                base_offset: 0,
                log_append_time: -1,
            });
        }
        st.seal_all();
        drop_all(
            st.parts
                .iter_mut()
                .flat_map(|p| p.batches.drain(..))
                .map(|b| (b, Outcome::failed(ProduceError::NoTopic)))
                .collect(),
        );
    }

    /// The plans' scratch list of eligible partitions keeps its memory and starts empty each
    /// time: a plan takes neither another broker's partitions nor an earlier plan's.
    #[test]
    fn the_eligible_scratch_list_is_reused_and_cleared() {
        let cfg = config(|b| b.linger(Duration::ZERO));
        let mut st = state(4, false);
        let now = Instant::now();
        for id in 0..4 {
            drop(st.append(id, rec(10), 10, false, &cfg, now).unwrap());
        }
        let ids = |p: &Plan| {
            let mut v: Vec<PartId> = p.request.iter().map(|(id, _)| *id).collect();
            v.sort_unstable();
            v
        };
        let first = st.plan(0, now, &cfg);
        assert_eq!(ids(&first), vec![0, 2]);
        assert!(st.eligible.is_empty(), "cleared after the plan");
        assert!(st.eligible.capacity() >= 2, "its memory kept");
        let second = st.plan(1, now, &cfg);
        assert_eq!(ids(&second), vec![1, 3], "only broker 1's partitions");
        drop(st.append(0, rec(10), 10, false, &cfg, now).unwrap());
        st.parts[0].in_flight = None;
        st.brokers.get_mut(&0).unwrap().in_flight = 0;
        let third = st.plan(0, now, &cfg);
        assert_eq!(ids(&third), vec![0], "not partition 2 again (in flight)");
        for plan in [first, second, third] {
            for (_, b) in plan.request {
                b.complete(Outcome::failed(ProduceError::NoTopic));
            }
        }
    }

    #[test]
    fn sequence_numbers_wrap_like_kafka() {
        assert_eq!(next_sequence(0, 5), 5);
        assert_eq!(next_sequence(i32::MAX - 4, 5), 0);
        assert_eq!(next_sequence(i32::MAX - 2, 5), 2);
        assert_eq!(next_sequence(i32::MAX, 1), 0);
    }

    #[test]
    fn batches_expire_after_the_delivery_timeout_and_an_unknown_outcome_needs_a_new_epoch() {
        let cfg = config(|b| {
            b.linger(Duration::ZERO)
                .request_timeout(Duration::from_millis(100))
                .delivery_timeout(Duration::from_secs(1))
        });
        let mut st = state(2, true);
        let now = Instant::now();
        drop(st.append(0, rec(10), 10, false, &cfg, now).unwrap());
        let (id, mut b) = st.plan(0, now, &cfg).request.pop().unwrap();
        st.parts[id].in_flight = None;
        b.maybe_written = true;
        let mut done = Vec::new();
        st.requeue(id, b, ProduceError::NoTopic, now, &cfg, &mut done);
        assert!(done.is_empty());
        let plan = st.plan(0, now + Duration::from_millis(1_000), &cfg);
        assert!(plan.request.is_empty());
        assert_eq!(plan.done.len(), 1);
        match &plan.done[0].1 {
            Outcome::Failed {
                error: ProduceError::DeliveryTimeout { timeout, cause },
                ..
            } => {
                assert_eq!(*timeout, Duration::from_secs(1));
                assert!(matches!(cause.as_deref(), Some(ProduceError::NoTopic)));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(st.producer.status, ProducerStatus::Needed));
        drop_all(plan.done);
    }

    /// The one decision, case by case, and docs/DESIGN.md's producer table row by row: both
    /// say the same.
    #[test]
    fn sequence_fate_table() {
        use Ending::*;
        use SequenceFate::*;
        let cases = [
            (Written, false, Keep),
            (Written, true, Keep),
            (Resend, false, Keep),
            (Resend, true, Keep),
            (SequenceError, false, Bump),
            (SequenceError, true, Bump),
            (Split, false, Rewind),
            (Split, true, Bump),
            (Failed, false, Rewind),
            (Failed, true, Bump),
        ];
        for (ending, maybe, fate) in cases {
            assert_eq!(sequence_fate(ending, maybe), fate, "{ending:?}, {maybe}");
        }
        let design = include_str!("../../../../docs/DESIGN.md");
        let mut rows = 0;
        for row in design.lines().filter(|l| l.starts_with("| `Ending::")) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let ending = match cells[1] {
                "`Ending::Written`" => Written,
                "`Ending::Resend`" => Resend,
                "`Ending::SequenceError`" => SequenceError,
                "`Ending::Split`" => Split,
                "`Ending::Failed`" => Failed,
                other => panic!("unknown ending {other}"),
            };
            let maybes: &[bool] = match cells[3] {
                "no" => &[false],
                "yes" => &[true],
                "either" => &[false, true],
                other => panic!("maybe written: {other}"),
            };
            let fate = match cells[4]
                .split_whitespace()
                .next()
                .map(|w| w.trim_end_matches(':'))
            {
                Some("kept") => Keep,
                Some("rewound") => Rewind,
                Some("void") => Bump,
                other => panic!("sequences: {other:?} in {row}"),
            };
            for &maybe in maybes {
                assert_eq!(sequence_fate(ending, maybe), fate, "DESIGN.md row: {row}");
                rows += 1;
            }
        }
        assert_eq!(
            rows,
            cases.len(),
            "DESIGN.md's table covers every case once"
        );
    }

    #[test]
    fn not_appended_codes_are_not_maybe_written() {
        use kafkit_protocol::ErrorCode as E;
        for code in [
            E::NOT_LEADER_OR_FOLLOWER,
            E::LEADER_NOT_AVAILABLE,
            E::UNKNOWN_TOPIC_OR_PARTITION,
            E::NOT_ENOUGH_REPLICAS,
            E::CORRUPT_MESSAGE,
        ] {
            assert!(!may_have_appended(code), "{code}");
        }
        assert!(may_have_appended(E::REQUEST_TIMED_OUT));
        assert!(may_have_appended(E::NOT_ENOUGH_REPLICAS_AFTER_APPEND));
    }

    /// A batch that timed out (maybe written) and then fails for good bumps the epoch and never
    /// rewinds its partition's sequence: a rewound sequence would let the next batch of the same
    /// size reuse it, be deduplicated against the first and be acknowledged at its offset.
    #[test]
    fn a_maybe_written_batch_that_fails_for_good_bumps_and_never_rewinds() {
        let cfg = config(|b| b.linger(Duration::ZERO));
        let mut st = state(1, true);
        let now = Instant::now();
        drop(st.append(0, rec(10), 10, false, &cfg, now).unwrap());
        let (id, mut b) = st.plan(0, now, &cfg).request.pop().unwrap();
        assert_eq!(b.sequence, Some((1, 0)));
        st.parts[id].in_flight = None;
        st.brokers.get_mut(&0).unwrap().in_flight = 0;
        b.maybe_written = true; // the first attempt timed out
        assert!(st.settle_sequence(id, &b, Ending::Failed), "router woken");
        assert_eq!(st.parts[0].next_sequence, 1, "not rewound");
        assert!(matches!(st.producer.status, ProducerStatus::Needed));
        b.complete(Outcome::failed(ProduceError::NoTopic));
        // Not maybe written: the sequence is given back.
        let mut st = state(1, true);
        drop(st.append(0, rec(10), 10, false, &cfg, now).unwrap());
        let (id, b) = st.plan(0, now, &cfg).request.pop().unwrap();
        st.parts[id].in_flight = None;
        assert!(!st.settle_sequence(id, &b, Ending::Failed));
        assert_eq!(st.parts[0].next_sequence, 0);
        assert!(matches!(st.producer.status, ProducerStatus::Ready));
        b.complete(Outcome::failed(ProduceError::NoTopic));
    }

    /// A batch refused before the append (NOT_LEADER_OR_FOLLOWER...) that expires does not
    /// force an epoch bump, and one requeued across a bump is renumbered, not failed.
    #[test]
    fn a_batch_never_appended_expires_without_a_bump_and_is_renumbered_across_one() {
        let cfg = config(|b| {
            b.linger(Duration::ZERO)
                .request_timeout(Duration::from_millis(100))
                .delivery_timeout(Duration::from_secs(1))
        });
        let mut st = state(1, true);
        let now = Instant::now();
        drop(st.append(0, rec(10), 10, false, &cfg, now).unwrap());
        let (id, b) = st.plan(0, now, &cfg).request.pop().unwrap();
        st.parts[id].in_flight = None;
        st.brokers.get_mut(&0).unwrap().in_flight = 0;
        let mut done = Vec::new();
        assert!(!st.requeue(id, b, ProduceError::NoTopic, now, &cfg, &mut done));
        // Another partition's sequence error bumps: this batch is renumbered and sent.
        st.new_producer(42, 1);
        let plan = st.plan(0, now + Duration::from_millis(300), &cfg);
        assert!(plan.done.is_empty(), "not failed: {:?}", plan.done.len());
        assert_eq!(plan.request[0].1.sequence, Some((2, 0)));
        let (id, b) = plan.request.into_iter().next().unwrap();
        st.parts[id].in_flight = None;
        st.brokers.get_mut(&0).unwrap().in_flight = 0;
        st.requeue(id, b, ProduceError::NoTopic, now, &cfg, &mut done);
        // Past its delivery timeout it fails, the sequence rewound, no bump.
        let plan = st.plan(0, now + Duration::from_secs(2), &cfg);
        assert_eq!(plan.done.len(), 1);
        assert!(!plan.wake_router);
        assert!(matches!(st.producer.status, ProducerStatus::Ready));
        assert_eq!(st.parts[0].next_sequence, 0);
        drop_all(plan.done);
    }
}
