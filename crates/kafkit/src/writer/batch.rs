//! One partition's record batch as it moves through the writer, and the futures of its
//! records.
//!
//! A [`Batch`] is born open in the accumulator, is sealed when it is full or sent, is encoded
//! (record batch v2, compressed) when first sent, and ends in exactly one outcome, which its
//! [`BatchShared`] slot hands to every record's [`DeliveryFuture`]. One `Arc` per batch serves
//! all its records: no per-record allocation on the way.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use kafkit_compress::CompressionConfig;
use kafkit_protocol::records::{
    RecordBatchEncoder, RecordBatchOptions, RecordHeader, RecordsError, encoded_record_body_size,
    encoded_record_size_at,
};

use super::config::CompletionCallback;
use super::error::ProduceError;
use super::record::RecordMetadata;

/// A record waiting in a batch: the caller's bytes, not copied.
#[derive(Debug)]
pub(crate) struct PendingRecord {
    pub(crate) timestamp: i64,
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Vec<RecordHeader>,
    /// The record's body size at deltas of 0 (`encoded_record_body_size`), computed once when
    /// it is buffered: its size in a batch, its buffer charge and its encoding derive from it.
    pub(crate) body: usize,
}

impl PendingRecord {
    /// A record of these parts, sized.
    ///
    /// # Errors
    /// [`RecordsError::TooLarge`] if a field or the record exceeds `i32::MAX` bytes.
    pub(crate) fn new(
        timestamp: i64,
        key: Option<Bytes>,
        value: Option<Bytes>,
        headers: Vec<RecordHeader>,
    ) -> Result<Self, RecordsError> {
        let body = encoded_record_body_size(key.as_deref(), value.as_deref(), &headers)?;
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
    pub(crate) records: Vec<PendingRecord>,
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
            .field("records", &self.records.len())
            .field("size", &self.size)
            .field("sealed", &self.sealed)
            .field("sequence", &self.sequence)
            .finish_non_exhaustive()
    }
}

impl Batch {
    pub(crate) fn new(
        topic: Arc<str>,
        partition: i32,
        now: Instant,
        delivery_timeout: std::time::Duration,
        callback: Option<CompletionCallback>,
        reserve: usize,
    ) -> Self {
        Batch {
            shared: BatchShared::new(topic, partition),
            records: Vec::with_capacity(reserve),
            encoded: None,
            size: kafkit_protocol::records::BATCH_HEADER_SIZE,
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

    /// Records in the batch.
    pub(crate) fn count(&self) -> usize {
        self.records.len()
    }

    /// The timestamp the record deltas count from (the first record's).
    pub(crate) fn base_timestamp(&self) -> Option<i64> {
        self.records.first().map(|r| r.timestamp)
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
        let mut buf = BytesMut::with_capacity(self.size);
        let mut enc = RecordBatchEncoder::new(&mut buf, options)?;
        for r in &self.records {
            enc.append_parts_sized(
                r.timestamp,
                r.key.as_deref(),
                r.value.as_deref(),
                &r.headers,
                r.body,
            )?;
        }
        enc.finish()?;
        let bytes = buf.freeze();
        self.encoded = Some(bytes.clone());
        Ok(bytes)
    }

    /// Splits the batch in two halves (sealed, unsequenced, with the same deadline) that take
    /// over its records and futures; this batch is left empty and ended. For a batch the
    /// broker refused as too large (`MESSAGE_TOO_LARGE`), as the Java client does.
    pub(crate) fn split(&mut self) -> (Batch, Batch) {
        let mut first = std::mem::take(&mut self.records);
        let at = first.len() / 2;
        let second = first.split_off(at);
        let make = |records: Vec<PendingRecord>| {
            let (size, cost) = sizes(&records);
            Batch {
                shared: BatchShared::new(self.shared.topic.clone(), self.shared.partition),
                records,
                encoded: None,
                size,
                cost,
                created: self.created,
                deadline: self.deadline,
                sealed: true,
                sequence: None,
                attempts: self.attempts,
                last_error: self.last_error.clone(),
                maybe_written: false,
                callback: self.callback.clone(),
            }
        };
        let (a, b) = (make(first), make(second));
        self.shared.split_into(
            u32::try_from(at).unwrap_or(u32::MAX),
            a.shared.clone(),
            b.shared.clone(),
        );
        (a, b)
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
            for (i, r) in self.records.iter().enumerate() {
                md.offset = record_offset(*base_offset, i as i64);
                md.timestamp = record_timestamp(*log_append_time, r.timestamp);
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
        for (i, r) in self.records.iter().enumerate() {
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            let result =
                outcome.for_record(&self.shared.topic, self.shared.partition, i, r.timestamp);
            // A panicking callback must not take the futures' outcome (or the writer's task)
            // with it.
            let call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &result {
                Ok(md) => cb(md, None),
                Err(e) => {
                    let md = RecordMetadata {
                        topic: self.shared.topic.clone(),
                        partition: self.shared.partition,
                        offset: -1,
                        timestamp: r.timestamp,
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

/// `(size in a batch, header included; bytes charged to the buffer)` of `records`, as
/// computed when they were appended.
fn sizes(records: &[PendingRecord]) -> (usize, usize) {
    let base = records.first().map_or(0, |r| r.timestamp);
    let mut size = kafkit_protocol::records::BATCH_HEADER_SIZE;
    let mut cost = 0;
    for (i, r) in records.iter().enumerate() {
        size += r.size_at(i, r.timestamp.wrapping_sub(base));
        cost += r.cost();
    }
    (size, cost)
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

    fn batch_of(n: usize) -> Batch {
        let mut b = Batch::new(
            "t".into(),
            2,
            Instant::now(),
            Duration::from_secs(1),
            None,
            0,
        );
        for i in 0..n {
            b.records.push(
                PendingRecord::new(
                    1_000 + i as i64,
                    None,
                    Some(Bytes::from_static(b"v")),
                    Vec::new(),
                )
                .unwrap(),
            );
        }
        (b.size, b.cost) = sizes(&b.records);
        b
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
        let (first, second) = b.split();
        assert_eq!((first.count(), second.count()), (2, 3));
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
        let mut b = batch_of(2);
        b.callback = Some(cb);
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
