//! One partition's record batch as it moves through the writer, and the futures of its
//! records.
//!
//! A [`Batch`] is born open in the accumulator, encodes each record into its records section
//! as it is appended (on the caller's thread; the record's key and value are dropped there), is
//! sealed when it is full or sent, gets its header (and compression) when first sent, and ends
//! in exactly one outcome, which its [`BatchShared`] slot hands to every record's
//! [`DeliveryFuture`]. One `Arc` per batch serves all its records: no per-record allocation on
//! the way.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use kafkit_compress::CompressionConfig;
use kafkit_protocol::records::{
    BATCH_HEADER_SIZE, Record, RecordBatchBuilder, RecordBatchOptions, RecordHeader, RecordsError,
    decode_record_batches, encoded_record_body_size, encoded_record_size_at,
};

use super::config::CompletionCallback;
use crate::error::produce::ProduceError;
use crate::error::produce::RecordMetadata;

/// Index of a partition in `State::parts`.
pub(crate) type PartId = usize;

/// A record on its way into a batch: the caller's bytes, borrowed and sized, until they are
/// encoded into the batch (copied) when it is appended. Borrowed so that a record moves through
/// the writer's calls as a few pointers, and so that a caller's key and value need not be
/// [`Bytes`] (`Writer::send_ref`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PendingRecord<'a> {
    pub(crate) timestamp: i64,
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) value: Option<&'a [u8]>,
    pub(crate) headers: &'a [RecordHeader],
    /// The record's body size at deltas of 0 (`encoded_record_body_size`), computed once when
    /// it is buffered: its size in a batch, its buffer charge and its encoding derive from it.
    pub(crate) body: usize,
}

impl<'a> PendingRecord<'a> {
    /// A record of these parts, sized.
    ///
    /// # Errors
    /// [`RecordsError::TooLarge`] if a field or the record exceeds `i32::MAX` bytes.
    pub(crate) fn new(
        timestamp: i64,
        key: Option<&'a [u8]>,
        value: Option<&'a [u8]>,
        headers: &'a [RecordHeader],
    ) -> Result<Self, RecordsError> {
        let body = encoded_record_body_size(key, value, headers)?;
        Ok(PendingRecord {
            timestamp,
            key,
            value,
            headers,
            body,
        })
    }

    /// Bytes the record takes in a batch at `offset_delta` (clamped to `i32::MAX`) and
    /// `timestamp_delta`, length prefix included.
    pub(crate) fn size_at(&self, offset_delta: usize, timestamp_delta: i64) -> usize {
        let offset = i32::try_from(offset_delta).unwrap_or(i32::MAX);
        encoded_record_size_at(self.body, offset, timestamp_delta)
    }

    /// Bytes charged to the buffer for the record: its size at deltas of 0.
    pub(crate) fn cost(&self) -> usize {
        encoded_record_size_at(self.body, 0, 0)
    }
}

/// How a batch ended.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// Written at `base_offset` (-1 when unknown: acks=0, duplicate); `log_append_time` is the
    /// broker's append time for `LogAppendTime` topics, else -1.
    Written {
        base_offset: i64,
        log_append_time: i64,
    },
    /// Failed; `record_errors` are the broker's per-record messages (KIP-467) by batch index.
    Failed {
        error: ProduceError,
        record_errors: Vec<(i32, Option<String>)>,
    },
}

impl Outcome {
    pub(crate) fn failed(error: ProduceError) -> Self {
        Outcome::Failed {
            error,
            record_errors: Vec::new(),
        }
    }

    /// The result of the record at `index` with create time `timestamp`.
    fn for_record(
        &self,
        topic: &Arc<str>,
        partition: i32,
        index: u32,
        timestamp: i64,
    ) -> Result<RecordMetadata, ProduceError> {
        match self {
            Outcome::Written {
                base_offset,
                log_append_time,
            } => Ok(RecordMetadata {
                topic: topic.clone(),
                partition,
                offset: record_offset(*base_offset, i64::from(index)),
                timestamp: record_timestamp(*log_append_time, timestamp),
            }),
            Outcome::Failed {
                error,
                record_errors,
            } => Err(match error {
                ProduceError::Broker { code, message, .. } if !record_errors.is_empty() => {
                    ProduceError::Broker {
                        code: *code,
                        message: message.clone(),
                        record_error: record_errors
                            .iter()
                            .find(|(i, _)| i64::from(*i) == i64::from(index))
                            .map(|(_, m)| m.clone().unwrap_or_else(|| "invalid record".into())),
                    }
                }
                e => e.clone(),
            }),
        }
    }
}

/// The offset of the record at `index` of a batch written at `base_offset` (-1 when unknown).
/// A broker's base offset is data: one so large that the record's offset would overflow is
/// reported as unknown (-1) rather than trusted.
fn record_offset(base_offset: i64, index: i64) -> i64 {
    if base_offset < 0 {
        -1
    } else {
        base_offset.checked_add(index).unwrap_or(-1)
    }
}

/// A written record's timestamp: the broker's append time when it gave one, else its own.
fn record_timestamp(log_append_time: i64, create_time: i64) -> i64 {
    if log_append_time >= 0 {
        log_append_time
    } else {
        create_time
    }
}

#[derive(Debug, Default)]
struct Slot {
    outcome: Option<Outcome>,
    /// The batch was split (the broker found it too large): records `..at` continue in the
    /// first batch, the rest in the second.
    split: Option<(u32, Arc<BatchShared>, Arc<BatchShared>)>,
    wakers: Vec<Option<Waker>>,
}

/// The part of a batch its records' futures share: where it goes and how it ended.
#[derive(Debug)]
pub(crate) struct BatchShared {
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
    slot: Mutex<Slot>,
}

impl BatchShared {
    pub(crate) fn new(topic: Arc<str>, partition: i32) -> Arc<Self> {
        Arc::new(BatchShared {
            topic,
            partition,
            slot: Mutex::new(Slot::default()),
        })
    }

    /// Makes an ended batch's slot, held by nobody else, the fresh slot of a batch of
    /// `partition` of `topic`; false (nothing changed) while a future or handle still holds it.
    fn reset(this: &mut Arc<Self>, topic: &Arc<str>, partition: i32) -> bool {
        let Some(s) = Arc::get_mut(this) else {
            return false;
        };
        if !Arc::ptr_eq(&s.topic, topic) {
            s.topic = topic.clone();
        }
        s.partition = partition;
        let slot = s
            .slot
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slot.outcome = None;
        slot.split = None;
        slot.wakers.clear();
        true
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the batch has its outcome (or was split into two that carry on).
    pub(crate) fn is_done(&self) -> bool {
        let slot = self.lock();
        slot.outcome.is_some() || slot.split.is_some()
    }

    /// Hands the batch's records on to two batches: `..at` to `first`, the rest to `second`;
    /// the futures follow.
    pub(crate) fn split_into(&self, at: u32, first: Arc<BatchShared>, second: Arc<BatchShared>) {
        let wakers = {
            let mut slot = self.lock();
            if slot.outcome.is_some() || slot.split.is_some() {
                return;
            }
            slot.split = Some((at, first, second));
            std::mem::take(&mut slot.wakers)
        };
        for w in wakers.into_iter().flatten() {
            w.wake();
        }
    }

    /// Sets the outcome (the first one wins) and wakes the futures; true if this call set it.
    fn complete(&self, outcome: Outcome) -> bool {
        let wakers = {
            let mut slot = self.lock();
            if slot.outcome.is_some() || slot.split.is_some() {
                return false;
            }
            slot.outcome = Some(outcome);
            std::mem::take(&mut slot.wakers)
        };
        for w in wakers.into_iter().flatten() {
            w.wake();
        }
        true
    }

    /// Registers `waker` in slot `waker_slot` (a fresh one when `None`).
    fn register(slot: &mut Slot, waker_slot: &mut Option<usize>, waker: &Waker) {
        match *waker_slot {
            Some(i) => match slot.wakers.get_mut(i) {
                Some(Some(w)) if w.will_wake(waker) => {}
                Some(w) => *w = Some(waker.clone()),
                None => {}
            },
            None => {
                *waker_slot = Some(slot.wakers.len());
                slot.wakers.push(Some(waker.clone()));
            }
        }
    }
}

/// Waits until every record of the batches `handles` has its outcome, following splits (for
/// `flush` and `close`).
pub(crate) async fn settle_all(handles: Vec<Arc<BatchShared>>) {
    let mut stack = handles;
    while let Some(h) = stack.pop() {
        if let Some((a, b)) = (Settled {
            shared: h,
            waker_slot: None,
        })
        .await
        {
            stack.push(a);
            stack.push(b);
        }
    }
}

/// Resolves when a batch ends: `None`, or `Some(parts)` when it was split.
struct Settled {
    shared: Arc<BatchShared>,
    waker_slot: Option<usize>,
}

impl Future for Settled {
    type Output = Option<(Arc<BatchShared>, Arc<BatchShared>)>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let mut slot = this.shared.lock();
        if let Some((_, a, b)) = &slot.split {
            return Poll::Ready(Some((a.clone(), b.clone())));
        }
        if slot.outcome.is_some() {
            return Poll::Ready(None);
        }
        BatchShared::register(&mut slot, &mut this.waker_slot, cx.waker());
        Poll::Pending
    }
}

/// The outcome of one record handed to [`Writer::send`](super::Writer::send): resolves to
/// `Ok(RecordMetadata)` once the record is acknowledged (at once when sent with `acks=0`), or
/// to the [`ProduceError`] that ended it. It always resolves: records are never dropped
/// silently (closing or dropping the writer fails pending records with
/// [`ProduceError::Closed`] or [`ProduceError::DeliveryTimeout`]). Dropping the future does not
/// cancel the record.
#[derive(Debug)]
#[must_use = "a DeliveryFuture tells whether the record was written"]
pub struct DeliveryFuture {
    shared: Arc<BatchShared>,
    index: u32,
    timestamp: i64,
    /// Where this future's waker sits in the batch's list, once registered.
    waker_slot: Option<usize>,
}

impl DeliveryFuture {
    pub(crate) fn pending(shared: Arc<BatchShared>, index: u32, timestamp: i64) -> Self {
        DeliveryFuture {
            shared,
            index,
            timestamp,
            waker_slot: None,
        }
    }
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata, ProduceError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        loop {
            let next = {
                let mut slot = this.shared.lock();
                if let Some(outcome) = &slot.outcome {
                    return Poll::Ready(outcome.for_record(
                        &this.shared.topic,
                        this.shared.partition,
                        this.index,
                        this.timestamp,
                    ));
                }
                match &slot.split {
                    // Follow the record into the part of the split batch that holds it.
                    Some((at, first, _)) if this.index < *at => (first.clone(), this.index),
                    Some((at, _, second)) => (second.clone(), this.index - at),
                    None => {
                        BatchShared::register(&mut slot, &mut this.waker_slot, cx.waker());
                        return Poll::Pending;
                    }
                }
            };
            (this.shared, this.index) = next;
            this.waker_slot = None;
        }
    }
}

/// A partition's batch of records.
pub(crate) struct Batch {
    pub(crate) shared: Arc<BatchShared>,
    /// The records, encoded as each was appended (record batch v2's records section, offset
    /// deltas from 0, timestamp deltas from the first record), with the header's room in front.
    /// Kept uncompressed until the batch ends: it is encoded again when its sequence changes.
    records: RecordBatchBuilder,
    /// Each record's create timestamp (ms), by index, for the completion callback; empty when
    /// there is none (the futures carry their own).
    timestamps: Vec<i64>,
    /// The encoded batch, once sent (kept for retries; dropped when the sequence changes).
    pub(crate) encoded: Option<Bytes>,
    /// Size of the batch before compression, header included, in bytes.
    pub(crate) size: usize,
    /// Bytes charged to `buffer_memory` for these records.
    pub(crate) cost: usize,
    pub(crate) created: Instant,
    pub(crate) deadline: Instant,
    /// No more records go in (full, too-large record alone, or taken for sending).
    pub(crate) sealed: bool,
    /// `(producer generation, base sequence)` assigned when first sent in that generation.
    pub(crate) sequence: Option<(u64, i32)>,
    pub(crate) attempts: u32,
    pub(crate) last_error: Option<ProduceError>,
    /// Whether a request carrying it may have reached the broker.
    pub(crate) maybe_written: bool,
    callback: Option<CompletionCallback>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("topic", &self.shared.topic)
            .field("partition", &self.shared.partition)
            .field("records", &self.count())
            .field("size", &self.size)
            .field("sealed", &self.sealed)
            .field("sequence", &self.sequence)
            .finish_non_exhaustive()
    }
}

/// What an ended batch leaves for a new one of any partition, so that a batch allocates nothing
/// in steady state: its shared slot when nothing else holds it any more (no future, no `flush`),
/// its records buffer when no request holds its bytes, its timestamp list. See
/// [`Batch::into_spare`] and [`Batch::new`].
#[derive(Debug)]
pub(crate) struct Spare {
    shared: Option<Arc<BatchShared>>,
    buffer: Option<BytesMut>,
    timestamps: Vec<i64>,
}

impl Spare {
    /// Lets the records buffer go (too large to keep), keeping the rest.
    pub(crate) fn drop_buffer(&mut self) {
        self.buffer = None;
        if self.timestamps.capacity() * std::mem::size_of::<i64>() > 64 << 10 {
            self.timestamps = Vec::new();
        }
    }

    /// The memory it keeps, in bytes (the records buffer's capacity and the timestamps').
    pub(crate) fn bytes(&self) -> usize {
        self.buffer.as_ref().map_or(0, BytesMut::capacity)
            + self.timestamps.capacity() * std::mem::size_of::<i64>()
    }

    /// Whether it keeps the ended batch's shared slot.
    #[cfg(test)]
    pub(crate) fn has_slot(&self) -> bool {
        self.shared.is_some()
    }

    /// Whether it keeps the ended batch's records buffer.
    #[cfg(test)]
    pub(crate) fn has_buffer(&self) -> bool {
        self.buffer.is_some()
    }
}

/// A new records buffer of `capacity` bytes that is shared-backed from the start (the
/// `bytes` crate's reference-counted form, which costs its one allocation here): a batch's
/// build hands it out (`BytesMut::freeze`) and [`RecordBatchBuilder::take_buffer`] takes it
/// back with no allocation, where a buffer still backed by a plain vector would allocate its
/// reference count at every build. Growing keeps the form. Not inlined: a cold path (a
/// batch with no spare to take) kept out of the appends' code.
#[inline(never)]
fn shared_buffer(capacity: usize) -> BytesMut {
    let mut buffer = BytesMut::with_capacity(capacity);
    // An empty split shares the buffer (promoting it to the shared form) and drops at once.
    drop(buffer.split_to(0));
    buffer
}

impl Batch {
    /// An open batch of partition `partition` of `topic` with room for `reserve` records of
    /// `reserve_bytes` bytes (header included) before it grows, made of what `spare` (an ended
    /// batch's) offers, newly allocated otherwise.
    pub(crate) fn new(
        topic: Arc<str>,
        partition: i32,
        now: Instant,
        delivery_timeout: std::time::Duration,
        callback: Option<CompletionCallback>,
        (reserve, reserve_bytes): (usize, usize),
        spare: Option<Spare>,
    ) -> Self {
        let (shared, buffer, mut timestamps) = spare.map_or((None, None, Vec::new()), |s| {
            (s.shared, s.buffer, s.timestamps)
        });
        let shared = match shared.map(|mut s| (BatchShared::reset(&mut s, &topic, partition), s)) {
            Some((true, s)) => s,
            _ => BatchShared::new(topic, partition),
        };
        let buffer = buffer.unwrap_or_else(|| shared_buffer(reserve_bytes));
        let records = RecordBatchBuilder::from_buffer(buffer, reserve_bytes);
        timestamps.clear();
        if callback.is_some() {
            timestamps.reserve(reserve);
        }
        Batch {
            shared,
            records,
            timestamps,
            encoded: None,
            size: BATCH_HEADER_SIZE,
            cost: 0,
            created: now,
            deadline: now + delivery_timeout,
            sealed: false,
            sequence: None,
            attempts: 0,
            last_error: None,
            maybe_written: false,
            callback,
        }
    }

    /// What this ended batch leaves for a new one ([`Spare`]): its slot if nothing else holds
    /// it, its buffers. `None` for a batch that has not ended (it still owes its records an
    /// outcome, which dropping it gives).
    pub(crate) fn into_spare(mut self) -> Option<Spare> {
        if !self.shared.is_done() {
            return None;
        }
        self.encoded = None;
        // Only this batch holds the slot: nothing can take another reference from here on, so
        // after the batch drops the spare's is the only one.
        let shared = (Arc::strong_count(&self.shared) == 1).then(|| self.shared.clone());
        Some(Spare {
            shared,
            buffer: self.records.take_buffer(),
            timestamps: std::mem::take(&mut self.timestamps),
        })
    }

    /// Where the records section's memory is (the same for a batch made of this one's spare
    /// whose buffer did not have to grow).
    #[cfg(test)]
    pub(crate) fn records_ptr(&self) -> *const u8 {
        self.records.records().as_ptr()
    }

    /// Records in the batch.
    pub(crate) fn count(&self) -> usize {
        usize::try_from(self.records.record_count()).unwrap_or(0)
    }

    /// The timestamp the record deltas count from (the first record's).
    pub(crate) fn base_timestamp(&self) -> Option<i64> {
        self.records.base_timestamp()
    }

    /// Encodes `record` at the end of the batch (`size` bytes there, from
    /// [`PendingRecord::size_at`]; `size` grows by it): the record's key, value and headers are
    /// copied; they stay the caller's (a `ProducerRecord`'s are dropped after the writer's
    /// lock, off its critical section).
    ///
    /// # Errors
    /// [`RecordsError::TooLarge`] / [`RecordsError::BatchFull`] past the protocol's `i32` limits
    /// (nothing appended).
    #[inline]
    pub(crate) fn append(
        &mut self,
        record: &PendingRecord,
        size: usize,
    ) -> Result<(), RecordsError> {
        let written = self.push(
            record.timestamp,
            (record.key, record.value, record.headers),
            record.body,
        )?;
        debug_assert_eq!(
            written, size,
            "a record's size in its batch is the bytes it took"
        );
        self.size += size;
        Ok(())
    }

    /// Encodes one record of body size `body` (at deltas of 0) at the end of the batch; returns
    /// the bytes it took.
    #[inline]
    fn push(
        &mut self,
        timestamp: i64,
        (key, value, headers): (Option<&[u8]>, Option<&[u8]>, &[RecordHeader]),
        body: usize,
    ) -> Result<usize, RecordsError> {
        let before = self.records.size_in_bytes();
        self.records
            .append_parts_sized(timestamp, key, value, headers, body)?;
        if self.callback.is_some() {
            self.timestamps.push(timestamp);
            // The next record's slot when it starts a cache line (once every 8 records), as
            // far as the list's capacity reaches (see `prefetch_write`).
            let ts = &self.timestamps;
            let next = ts.as_ptr() as usize + ts.len() * std::mem::size_of::<i64>();
            if next.is_multiple_of(64) && ts.len() < ts.capacity() {
                kafkit_protocol::records::prefetch_write(next, std::mem::size_of::<i64>());
            }
        }
        Ok(self.records.size_in_bytes() - before)
    }

    /// The batch's size as encoded so far, header included, uncompressed (the same as `size`).
    #[cfg(test)]
    pub(crate) fn encoded_size(&self) -> usize {
        self.records.size_in_bytes()
    }

    /// Encodes the records as one record batch v2 with the producer fields
    /// (`producer_id` -1 when not idempotent).
    pub(crate) fn encode(
        &mut self,
        compression: CompressionConfig,
        producer_id: i64,
        producer_epoch: i16,
        base_sequence: i32,
        transactional: bool,
    ) -> Result<Bytes, RecordsError> {
        if let Some(b) = &self.encoded {
            return Ok(b.clone());
        }
        let options = RecordBatchOptions::new()
            .compression(compression.compression())
            .compression_level(compression.level())
            .producer(producer_id, producer_epoch, base_sequence)
            .transactional(transactional);
        // The records were encoded when appended: uncompressed, this writes the header and
        // CRC in front of them (no copy); compressed, it compresses the section.
        let bytes = self.records.build(&options)?;
        self.encoded = Some(bytes.clone());
        Ok(bytes)
    }

    /// Splits the batch in two halves (sealed, unsequenced, with the same deadline) that take
    /// over its records and futures; this batch is left empty and ended. For a batch the
    /// broker refused as too large (`MESSAGE_TOO_LARGE`), as the Java client does. A rare
    /// path: the records section is decoded and its halves encoded again.
    ///
    /// # Errors
    /// The records section does not decode (or a half does not encode): the batch is left as
    /// it was, for its caller to fail.
    pub(crate) fn split(&mut self) -> Result<(Batch, Batch), RecordsError> {
        let section = self.records.build(&RecordBatchOptions::new())?;
        let records = decode_record_batches(section)?
            .into_iter()
            .next()
            .map(|b| b.records)
            .unwrap_or_default();
        if records.len() != self.count() {
            return Err(RecordsError::InvalidRecordCount {
                base_offset: 0,
                count: self.records.record_count(),
                max: records.len(),
            });
        }
        let at = records.len() / 2;
        let make = |records: &[Record]| -> Result<Batch, RecordsError> {
            let mut b = Batch {
                shared: BatchShared::new(self.shared.topic.clone(), self.shared.partition),
                records: RecordBatchBuilder::from_buffer(
                    shared_buffer(self.size / 2 + BATCH_HEADER_SIZE),
                    self.size / 2 + BATCH_HEADER_SIZE,
                ),
                timestamps: Vec::new(),
                encoded: None,
                size: BATCH_HEADER_SIZE,
                cost: 0,
                created: self.created,
                deadline: self.deadline,
                sealed: true,
                sequence: None,
                attempts: self.attempts,
                last_error: self.last_error.clone(),
                maybe_written: false,
                callback: self.callback.clone(),
            };
            for r in records {
                let parts = (r.key.as_deref(), r.value.as_deref(), &r.headers[..]);
                let body = encoded_record_body_size(parts.0, parts.1, parts.2)?;
                b.size += b.push(r.timestamp, parts, body)?;
                b.cost += encoded_record_size_at(body, 0, 0);
            }
            Ok(b)
        };
        let (first, second) = records.split_at(at);
        let (a, b) = (make(first)?, make(second)?);
        self.records = RecordBatchBuilder::new();
        self.timestamps = Vec::new();
        self.encoded = None;
        self.shared.split_into(
            u32::try_from(at).unwrap_or(u32::MAX),
            a.shared.clone(),
            b.shared.clone(),
        );
        Ok((a, b))
    }

    /// Ends the batch with `outcome`: resolves its futures and runs the completion callback for
    /// each record. Returns false (and does nothing) when it had already ended.
    pub(crate) fn complete(&self, outcome: Outcome) -> bool {
        let Some(cb) = &self.callback else {
            return self.shared.complete(outcome);
        };
        // Each batch is ended by its one owner; the check only guards against a second call.
        if self.shared.is_done() {
            return false;
        }
        // Callbacks first: whoever awaits a record's future (or flush) then knows the record's
        // callback has run. A written batch hands every callback the same metadata, its
        // offset and timestamp set per record: one topic reference per batch, not per record.
        if let Outcome::Written {
            base_offset,
            log_append_time,
        } = &outcome
        {
            let mut md = RecordMetadata {
                topic: self.shared.topic.clone(),
                partition: self.shared.partition,
                offset: -1,
                timestamp: -1,
            };
            for (i, &ts) in self.timestamps.iter().enumerate() {
                md.offset = record_offset(*base_offset, i as i64);
                md.timestamp = record_timestamp(*log_append_time, ts);
                let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(&md, None)));
                if call.is_err() {
                    tracing::error!(
                        topic = %self.shared.topic,
                        partition = self.shared.partition,
                        "writer: the on_completion callback panicked"
                    );
                }
            }
            return self.shared.complete(outcome);
        }
        for (i, &ts) in self.timestamps.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            let result = outcome.for_record(&self.shared.topic, self.shared.partition, i, ts);
            // A panicking callback must not take the futures' outcome (or the writer's task)
            // with it.
            let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &result {
                Ok(md) => cb(md, None),
                Err(e) => {
                    let md = RecordMetadata {
                        topic: self.shared.topic.clone(),
                        partition: self.shared.partition,
                        offset: -1,
                        timestamp: ts,
                    };
                    cb(&md, Some(e));
                }
            }));
            if call.is_err() {
                tracing::error!(
                    topic = %self.shared.topic,
                    partition = self.shared.partition,
                    "writer: the on_completion callback panicked"
                );
            }
        }
        self.shared.complete(outcome)
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        // A batch dropped without an outcome (runtime shut down, writer tasks gone): its records
        // must still be told.
        if !self.shared.is_done() {
            self.complete(Outcome::failed(ProduceError::Closed(
                "its tasks stopped (the runtime shut down) before the record was acknowledged",
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    pub(super) fn batch_of(n: usize) -> Batch {
        let mut b = Batch::new(
            "t".into(),
            2,
            Instant::now(),
            Duration::from_secs(1),
            None,
            (0, 0),
            None,
        );
        for i in 0..n {
            push(&mut b, 1_000 + i as i64, None, Some(b"v"), Vec::new());
        }
        b
    }

    /// Appends a record as the accumulator does (sized by `PendingRecord::size_at`), checking
    /// that the size the batch grows by is the bytes the record took.
    fn push(
        b: &mut Batch,
        timestamp: i64,
        key: Option<&'static [u8]>,
        value: Option<&'static [u8]>,
        headers: Vec<RecordHeader>,
    ) {
        let (key, value) = (key.map(Bytes::from_static), value.map(Bytes::from_static));
        let mut r = Record::new(key, value).with_timestamp(timestamp);
        r.headers = headers;
        push_record(b, &r);
    }

    pub(super) fn push_record(b: &mut Batch, r: &Record) {
        let timestamp = r.timestamp;
        let r = PendingRecord::new(timestamp, r.key.as_deref(), r.value.as_deref(), &r.headers)
            .unwrap();
        let base = b.base_timestamp().unwrap_or(timestamp);
        let size = r.size_at(b.count(), timestamp.wrapping_sub(base));
        let (before, cost) = (b.encoded_size(), r.cost());
        b.append(&r, size).unwrap();
        b.cost += cost;
        assert_eq!(b.encoded_size() - before, size);
        assert_eq!(b.encoded_size(), b.size);
    }

    #[tokio::test]
    async fn futures_resolve_with_consecutive_offsets() {
        let b = batch_of(3);
        let futs: Vec<_> = (0..3)
            .map(|i| DeliveryFuture::pending(b.shared.clone(), i, 1_000 + i64::from(i)))
            .collect();
        assert!(b.complete(Outcome::Written {
            base_offset: 40,
            log_append_time: -1
        }));
        assert!(!b.complete(Outcome::failed(ProduceError::NoTopic)));
        for (i, f) in futs.into_iter().enumerate() {
            let md = f.await.unwrap();
            assert_eq!(
                (md.partition, md.offset, md.timestamp),
                (2, 40 + i as i64, 1_000 + i as i64)
            );
        }
    }

    /// A new batch made from an ended one's spare: it takes the slot (when nothing else holds
    /// it) and the buffer, starts empty and unended, and encodes what a fresh batch would.
    #[tokio::test]
    async fn an_ended_batch_leaves_its_memory_to_the_next_one() {
        let written = || Outcome::Written {
            base_offset: 7,
            log_append_time: -1,
        };
        let mut b = batch_of(3);
        let sent = b
            .encode(CompressionConfig::default(), -1, -1, -1, false)
            .unwrap();
        // Unended, or while the request still holds the bytes: no slot, no buffer.
        let unended = batch_of(1);
        let f = DeliveryFuture::pending(unended.shared.clone(), 0, 1);
        assert!(
            unended.into_spare().is_none(),
            "an unended batch owes an outcome"
        );
        assert!(matches!(f.await, Err(ProduceError::Closed(_))));
        b.complete(written());
        let (slot, memory) = (Arc::as_ptr(&b.shared) as usize, sent.as_ptr() as usize);
        drop(sent);
        let spare = b.into_spare().expect("an ended batch");
        assert!(spare.shared.is_some() && spare.buffer.is_some());
        let mut next = Batch::new(
            "u".into(),
            5,
            Instant::now(),
            Duration::from_secs(1),
            None,
            (0, 0),
            Some(spare),
        );
        assert_eq!(Arc::as_ptr(&next.shared) as usize, slot, "the same slot");
        assert_eq!((&*next.shared.topic, next.shared.partition), ("u", 5));
        assert!(!next.shared.is_done() && next.count() == 0 && next.encoded.is_none());
        push(&mut next, 50, None, Some(b"w"), Vec::new());
        let mut fresh = batch_of(0);
        push(&mut fresh, 50, None, Some(b"w"), Vec::new());
        let bytes = next
            .encode(CompressionConfig::default(), -1, -1, -1, false)
            .unwrap();
        assert_eq!(bytes.as_ptr() as usize, memory, "the same buffer");
        assert_eq!(
            bytes,
            fresh
                .encode(CompressionConfig::default(), -1, -1, -1, false)
                .unwrap()
        );
        // A future still holding the slot: the buffer is reused, the slot is not.
        let f = DeliveryFuture::pending(next.shared.clone(), 0, 50);
        drop(bytes);
        next.complete(written());
        let spare = next.into_spare().expect("ended");
        assert!(spare.shared.is_none() && spare.buffer.is_some());
        assert_eq!(f.await.unwrap().offset, 7);
    }

    #[tokio::test]
    async fn dropping_an_unfinished_batch_fails_its_records() {
        let b = batch_of(1);
        let f = DeliveryFuture::pending(b.shared.clone(), 0, 1);
        drop(b);
        assert!(matches!(f.await, Err(ProduceError::Closed(_))));
    }

    #[tokio::test]
    async fn record_errors_name_the_records() {
        let b = batch_of(3);
        let futs: Vec<_> = (0..3)
            .map(|i| DeliveryFuture::pending(b.shared.clone(), i, 0))
            .collect();
        b.complete(Outcome::Failed {
            error: ProduceError::Broker {
                code: kafkit_protocol::ErrorCode::INVALID_RECORD,
                message: None,
                record_error: None,
            },
            record_errors: vec![(1, Some("bad key".into()))],
        });
        let mut named = Vec::new();
        for f in futs {
            match f.await {
                Err(ProduceError::Broker { record_error, .. }) => named.push(record_error),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(named, vec![None, Some("bad key".to_string()), None]);
    }

    #[tokio::test]
    async fn a_split_batch_hands_its_futures_on() {
        let mut b = batch_of(5);
        let (size, cost) = (b.size, b.cost);
        let futs: Vec<_> = (0..5)
            .map(|i| DeliveryFuture::pending(b.shared.clone(), i, 1_000 + i64::from(i)))
            .collect();
        let handle = b.shared.clone();
        let (first, second) = b.split().unwrap();
        assert_eq!((first.count(), second.count()), (2, 3));
        assert_eq!(
            (first.encoded_size(), second.encoded_size()),
            (first.size, second.size)
        );
        assert!(b.shared.is_done() && b.count() == 0);
        drop(b);
        assert_eq!(first.cost + second.cost, cost);
        assert!(first.size + second.size >= size);
        first.complete(Outcome::Written {
            base_offset: 10,
            log_append_time: -1,
        });
        second.complete(Outcome::Written {
            base_offset: 20,
            log_append_time: -1,
        });
        let mut offsets = Vec::new();
        for f in futs {
            let md = f.await.unwrap();
            offsets.push((md.offset, md.timestamp));
        }
        assert_eq!(
            offsets,
            vec![
                (10, 1_000),
                (11, 1_001),
                (20, 1_002),
                (21, 1_003),
                (22, 1_004)
            ]
        );
        settle_all(vec![handle]).await;
    }

    #[tokio::test]
    async fn a_panicking_callback_does_not_lose_the_outcome() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = calls.clone();
        let cb: CompletionCallback = Arc::new(move |_, _| {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            panic!("callback bug");
        });
        let mut b = Batch::new(
            "t".into(),
            2,
            Instant::now(),
            Duration::from_secs(1),
            Some(cb),
            (0, 0),
            None,
        );
        push(&mut b, 1_000, None, Some(b"v"), Vec::new());
        push(&mut b, 1_001, None, Some(b"v"), Vec::new());
        let f = DeliveryFuture::pending(b.shared.clone(), 1, 1_001);
        assert!(b.complete(Outcome::Written {
            base_offset: 7,
            log_append_time: -1
        }));
        assert_eq!(f.await.unwrap().offset, 8);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 2);
    }

    #[test]
    fn encode_sets_the_producer_fields_and_is_kept_for_retries() {
        let mut b = batch_of(2);
        let bytes = b.encode(CompressionConfig::NONE, 77, 3, 10, true).unwrap();
        let batches = kafkit_protocol::records::decode_record_batches(bytes.clone()).unwrap();
        assert_eq!(batches[0].header.producer_id, 77);
        assert_eq!(batches[0].header.producer_epoch, 3);
        assert_eq!(batches[0].header.base_sequence, 10);
        assert!(batches[0].header.is_transactional);
        assert_eq!(batches[0].records.len(), 2);
        let again = b.encode(CompressionConfig::NONE, 1, 1, 1, false).unwrap();
        assert_eq!(again, bytes);
        assert!(b.complete(Outcome::failed(ProduceError::NoTopic)));
    }

    #[tokio::test]
    async fn a_base_offset_that_would_overflow_gives_an_unknown_offset_not_a_panic() {
        let b = batch_of(2);
        let f = DeliveryFuture::pending(b.shared.clone(), 1, 1_001);
        assert!(b.complete(Outcome::Written {
            base_offset: i64::MAX,
            log_append_time: -1
        }));
        assert_eq!(f.await.unwrap().offset, -1);
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use kafkit_compress::{Compression, CompressionConfig};
    use kafkit_protocol::records::RecordBatchEncoder;
    use proptest::prelude::*;
    use std::time::Duration;

    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    fn arb_bytes() -> impl Strategy<Value = Option<Bytes>> {
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from))
    }

    /// Records with any timestamps (so negative deltas too), null or empty keys and values,
    /// null header values.
    fn arb_record() -> impl Strategy<Value = Record> {
        (
            prop_oneof![any::<i64>(), 1_700_000_000_000..1_700_000_000_100i64],
            arb_bytes(),
            arb_bytes(),
            proptest::collection::vec(("[a-z]{0,6}", arb_bytes()), 0..3),
        )
            .prop_map(|(timestamp, key, value, headers)| {
                let mut r = Record::new(key, value).with_timestamp(timestamp);
                r.headers = headers
                    .into_iter()
                    .map(|(k, v)| RecordHeader::new(k, v))
                    .collect();
                r
            })
    }

    /// What `RecordBatchEncoder` writes for `records` with the writer's options.
    fn reference(
        records: &[Record],
        compression: Compression,
        (pid, epoch, seq): (i64, i16, i32),
        transactional: bool,
    ) -> Bytes {
        let options = RecordBatchOptions::new()
            .compression(compression)
            .producer(pid, epoch, seq)
            .transactional(transactional);
        let mut buf = bytes::BytesMut::new();
        let mut enc = RecordBatchEncoder::new(&mut buf, options).unwrap();
        for r in records {
            enc.append(r).unwrap();
        }
        enc.finish().unwrap();
        buf.freeze()
    }

    fn batch_of(records: &[Record], callback: bool) -> Batch {
        let cb: Option<CompletionCallback> =
            callback.then(|| Arc::new(|_: &_, _: Option<&_>| {}) as _);
        let mut b = Batch::new(
            "t".into(),
            0,
            Instant::now(),
            Duration::from_secs(9),
            cb,
            (1, 64),
            None,
        );
        for r in records {
            super::tests::push_record(&mut b, r);
        }
        b
    }

    proptest! {
        /// A batch encoded record by record at append (sizes asserted per record in
        /// `push_record`) sends the bytes the encoder writes for its records, with every codec,
        /// and again after a new sequence (a re-encode); split, each half sends the encoder's
        /// bytes for its records, and the sizes and costs add up.
        #[test]
        fn a_batch_sends_the_encoders_bytes(
            records in proptest::collection::vec(arb_record(), 1..20),
            codec in 0..CODECS.len(),
            producer in any::<(i64, i16, i32)>(),
            renumbered in any::<i32>(),
            transactional in any::<bool>(),
            callback in any::<bool>(),
        ) {
            let compression = CODECS[codec];
            let config = CompressionConfig::new(compression);
            let mut b = batch_of(&records, callback);
            prop_assert_eq!(b.count(), records.len());
            prop_assert_eq!(b.encoded_size(), b.size);
            let (pid, epoch, seq) = producer;
            let sent = b.encode(config, pid, epoch, seq, transactional).unwrap();
            prop_assert_eq!(&sent, &reference(&records, compression, producer, transactional));
            if compression == Compression::None {
                prop_assert_eq!(sent.len(), b.size);
            }
            b.encoded = None;
            let again = b.encode(config, pid, epoch.wrapping_add(1), renumbered, transactional).unwrap();
            prop_assert_eq!(
                again,
                reference(&records, compression, (pid, epoch.wrapping_add(1), renumbered), transactional)
            );
            if records.len() > 1 {
                let cost = b.cost;
                let (mut first, mut second) = b.split().unwrap();
                let at = records.len() / 2;
                prop_assert_eq!((first.count(), second.count()), (at, records.len() - at));
                prop_assert_eq!(first.cost + second.cost, cost);
                for (half, rs) in [(&mut first, &records[..at]), (&mut second, &records[at..])] {
                    prop_assert_eq!(half.encoded_size(), half.size);
                    prop_assert_eq!(half.timestamps.len(), if callback { rs.len() } else { 0 });
                    let bytes = half.encode(config, pid, epoch, seq, transactional).unwrap();
                    prop_assert_eq!(bytes, reference(rs, compression, producer, transactional));
                    half.complete(Outcome::failed(ProduceError::NoTopic));
                }
                prop_assert_eq!(b.count(), 0);
            }
            b.complete(Outcome::failed(ProduceError::NoTopic));
        }
    }
}
