//! What the Reader hands out: [`ConsumerRecord`] (one record, for the `Stream`) and
//! [`PartitionRecords`] (one partition's records from one Fetch answer, for `next_batch`).
//!
//! Keys, values and header values are `Bytes` slices of the Fetch response frame (of the
//! decompressed buffer for a compressed batch): no copy. Holding any one of them keeps that whole
//! buffer alive (up to `max_partition_fetch_bytes` per partition of the response, or the
//! decompressed batch), so an application that keeps records long should copy what it keeps.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use kafkit_protocol::records::{Record, RecordHeader, TimestampType};

/// One record read from a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerRecord {
    /// The topic (shared by every record of the partition: no allocation per record).
    pub topic: Arc<str>,
    /// The partition.
    pub partition: i32,
    /// The record's offset.
    pub offset: i64,
    /// The leader epoch of the batch that holds the record (KIP-320; `None` for message
    /// formats v0/v1, which carry none). Commit it with the next offset.
    pub leader_epoch: Option<i32>,
    /// Milliseconds since the Unix epoch (-1 for message format v0).
    pub timestamp: i64,
    /// What the timestamp means (create time or log append time, KIP-32).
    pub timestamp_type: TimestampType,
    /// The key, `None` for a null key.
    pub key: Option<Bytes>,
    /// The value, `None` for a null value (a tombstone).
    pub value: Option<Bytes>,
    /// The headers, in order (KIP-82).
    pub headers: Vec<RecordHeader>,
    /// The `process {topic}` span the reader made when built with `process_spans(true)`.
    pub(crate) span: crate::ops::otel::RecordSpan,
}

impl ConsumerRecord {
    /// The record's `process {topic}` span (OpenTelemetry's conventions, kind CONSUMER: the
    /// attributes of [`ConsumerRecord::process_span`], the reader's group for a member),
    /// made as the record was handed out when the reader was built with `process_spans(true)`
    /// (`ReaderBuilder`, `GroupReaderBuilder`, `ShareReaderBuilder`) and a subscriber is
    /// interested in `kafkit::otel` at INFO; `None` otherwise.
    ///
    /// The span ends when its last handle is dropped: the record's (and its clones'), and
    /// any clone the application took (`record.span().cloned()` to move it into a task).
    /// Run the processing in it: `handle(&record).instrument(record.span().cloned()
    /// .unwrap_or_else(Span::none))` with `tracing::Instrument`, or `span.in_scope(..)`.
    pub fn span(&self) -> Option<&tracing::Span> {
        self.span.0.as_deref()
    }

    /// The W3C `traceparent` the producer put in the record's headers; `None` when there is
    /// none, more than one, or it is malformed.
    pub fn traceparent(&self) -> Option<crate::ops::otel::TraceParent> {
        crate::ops::otel::TraceParent::from_headers(&self.headers)
    }

    /// A `process {topic}` span for handling this record (OpenTelemetry's conventions: kind
    /// CONSUMER, with its partition, offset and UTF-8 key, and `group` as
    /// `messaging.consumer.group.name`); a disabled span, at the cost of a branch, when no
    /// subscriber is interested in `kafkit::otel` at INFO. Enter it around the processing, and
    /// link it to [`ConsumerRecord::traceparent`] in the OpenTelemetry layer. A reader built
    /// with `process_spans(true)` makes this span itself ([`ConsumerRecord::span`]) and hands
    /// it to its `on_traceparent` hook.
    pub fn process_span(&self, group: Option<&str>) -> tracing::Span {
        crate::ops::otel::process_span(
            group,
            &self.topic,
            self.partition,
            self.offset,
            self.key.as_deref(),
        )
    }
}

/// Where one record batch's records start in [`PartitionRecords::records`], with what they share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// Index of the batch's first delivered record.
    pub(crate) start: usize,
    /// The batch's partition leader epoch, -1 when unknown.
    pub(crate) leader_epoch: i32,
    pub(crate) timestamp_type: TimestampType,
}

/// The version barrier of a partition: records fetched under an older version of their
/// partition (before a seek, reset or unassignment) are stale and never handed out.
#[derive(Debug, Clone)]
pub(crate) struct Barrier {
    pub(crate) current: Arc<AtomicU64>,
    pub(crate) version: u64,
}

impl Barrier {
    /// Whether the partition is still at the version these records were fetched under.
    pub(crate) fn holds(&self) -> bool {
        self.current.load(Ordering::Acquire) == self.version
    }
}

/// One partition's records from one Fetch answer, in offset order: what
/// [`crate::Reader::next_batch`] returns per partition.
///
/// After these records the partition's position is [`PartitionRecords::next_offset`] (batches
/// that held no deliverable record, such as transaction markers or aborted batches, are passed
/// too).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PartitionRecords {
    /// The topic.
    pub topic: Arc<str>,
    /// The partition.
    pub partition: i32,
    /// The records, in offset order. Keys, values and headers are slices of the response.
    pub records: Vec<Record>,
    /// The offset after these records: the partition's position once they are handed out.
    pub next_offset: i64,
    /// The partition's high watermark in the answer that held these records.
    pub high_watermark: i64,
    /// The last stable offset in that answer (-1 when the broker sent none).
    pub last_stable_offset: i64,
    /// The log start offset in that answer (-1 when the broker sent none).
    pub log_start_offset: i64,
    pub(crate) spans: Vec<Span>,
    /// The leader epoch of the batch that ends at `next_offset` (a transaction marker or an
    /// aborted batch after the last record may be of a newer epoch); `None`: the last
    /// record's.
    pub(crate) next_leader_epoch: Option<i32>,
    pub(crate) barrier: Barrier,
    /// Bytes of record data these records came from (buffer accounting).
    pub(crate) bytes: usize,
    /// The reader's process spans when they are on: each [`ConsumerRecord`] made of these
    /// records gets one (set as the records are handed out).
    pub(crate) process: Option<crate::ops::otel::ProcessSpans>,
}

impl PartitionRecords {
    /// The span of the record at `index`.
    fn span(&self, index: usize) -> Option<&Span> {
        let i = self.spans.partition_point(|s| s.start <= index);
        i.checked_sub(1).and_then(|i| self.spans.get(i))
    }

    /// The leader epoch of the batch that held record `index` (`None` when unknown or out of
    /// range).
    pub fn leader_epoch(&self, index: usize) -> Option<i32> {
        self.span(index).map(|s| s.leader_epoch).filter(|e| *e >= 0)
    }

    /// The timestamp type of record `index` (create time when out of range).
    pub fn timestamp_type(&self, index: usize) -> TimestampType {
        self.span(index)
            .map_or(TimestampType::CreateTime, |s| s.timestamp_type)
    }

    /// The leader epoch to commit with `next_offset` (KIP-320): of the last batch passed, the
    /// last record's, or a transaction marker's or an aborted batch's after it (which may be
    /// of a newer epoch: the pair stays one the leader's log holds).
    pub fn last_leader_epoch(&self) -> Option<i32> {
        self.next_leader_epoch.or_else(|| {
            self.spans
                .last()
                .map(|s| s.leader_epoch)
                .filter(|e| *e >= 0)
        })
    }

    /// Drops the records at or past `end` (a log diverged there, KIP-320); the records before
    /// it stay, and the position after them becomes at most `end`. Returns how many were
    /// dropped.
    pub(crate) fn truncate_at(&mut self, end: i64) -> usize {
        let keep = self.records.partition_point(|r| r.offset < end);
        let dropped = self.records.len() - keep;
        self.records.truncate(keep);
        self.spans.retain(|s| s.start < keep);
        if end < self.next_offset {
            // The batches past `end` are gone: the last record's epoch goes with it.
            self.next_leader_epoch = None;
        }
        self.next_offset = self.next_offset.min(end);
        dropped
    }

    /// The records as [`ConsumerRecord`]s (moved out, no copy of their bytes). With the
    /// reader's `process_spans(true)`, each record gets its process span
    /// ([`ConsumerRecord::span`]) as the iterator yields it.
    pub fn into_consumer_records(self) -> impl Iterator<Item = ConsumerRecord> {
        ConsumerRecords::new(self)
    }
}

/// The iterator behind [`PartitionRecords::into_consumer_records`] and the Reader's `Stream`.
#[derive(Debug)]
pub(crate) struct ConsumerRecords {
    topic: Arc<str>,
    partition: i32,
    records: std::vec::IntoIter<Record>,
    spans: Vec<Span>,
    span: usize,
    index: usize,
    pub(crate) barrier: Barrier,
    process: Option<crate::ops::otel::ProcessSpans>,
}

impl ConsumerRecords {
    /// Whether these are records of `topic`/`partition`.
    pub(crate) fn is_of(&self, topic: &str, partition: i32) -> bool {
        self.partition == partition && &*self.topic == topic
    }

    /// Where a reader of these records stands while some are left: the offset of the next
    /// record, with the leader epoch of the last one yielded (`None` before the first).
    /// `None` once every record was yielded.
    pub(crate) fn resume_at(&self) -> Option<(i64, Option<i32>)> {
        let next = self.records.as_slice().first()?;
        let epoch = (self.index > 0)
            .then(|| self.spans.get(self.span))
            .flatten()
            .map(|s| s.leader_epoch)
            .filter(|e| *e >= 0);
        Some((next.offset, epoch))
    }

    pub(crate) fn new(p: PartitionRecords) -> Self {
        ConsumerRecords {
            topic: p.topic,
            partition: p.partition,
            records: p.records.into_iter(),
            spans: p.spans,
            span: 0,
            index: 0,
            barrier: p.barrier,
            process: p.process,
        }
    }
}

impl Iterator for ConsumerRecords {
    type Item = ConsumerRecord;

    fn next(&mut self) -> Option<ConsumerRecord> {
        let r = self.records.next()?;
        while self
            .spans
            .get(self.span + 1)
            .is_some_and(|s| s.start <= self.index)
        {
            self.span += 1;
        }
        let span = self.spans.get(self.span);
        self.index += 1;
        let process = match &self.process {
            None => crate::ops::otel::RecordSpan::default(),
            Some(p) => p.span(
                &self.topic,
                self.partition,
                r.offset,
                r.key.as_deref(),
                &r.headers,
            ),
        };
        Some(ConsumerRecord {
            topic: Arc::clone(&self.topic),
            partition: self.partition,
            offset: r.offset,
            leader_epoch: span.map(|s| s.leader_epoch).filter(|e| *e >= 0),
            timestamp: r.timestamp,
            timestamp_type: span.map_or(TimestampType::CreateTime, |s| s.timestamp_type),
            key: r.key,
            value: r.value,
            headers: r.headers,
            span: process,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.records.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_give_each_record_its_batch_epoch() {
        let records: Vec<Record> = (0..5)
            .map(|i| Record::new(None, None).with_offset(10 + i))
            .collect();
        let p = PartitionRecords {
            topic: Arc::from("t"),
            partition: 0,
            records,
            next_offset: 15,
            high_watermark: 15,
            last_stable_offset: 15,
            log_start_offset: 0,
            spans: vec![
                Span {
                    start: 0,
                    leader_epoch: 3,
                    timestamp_type: TimestampType::CreateTime,
                },
                Span {
                    start: 2,
                    leader_epoch: 4,
                    timestamp_type: TimestampType::LogAppendTime,
                },
            ],
            next_leader_epoch: None,
            barrier: Barrier {
                current: Arc::new(AtomicU64::new(0)),
                version: 0,
            },
            bytes: 0,
            process: None,
        };
        assert_eq!(p.leader_epoch(1), Some(3));
        assert_eq!(p.leader_epoch(2), Some(4));
        assert_eq!(p.timestamp_type(4), TimestampType::LogAppendTime);
        assert_eq!(p.last_leader_epoch(), Some(4));
        // A divergence at 12: the first batch's records stay, with its span.
        let mut cut = p.clone();
        assert_eq!(cut.truncate_at(12), 3);
        assert_eq!(cut.records.len(), 2);
        assert_eq!(cut.next_offset, 12);
        assert_eq!(cut.last_leader_epoch(), Some(3));
        let mut none = p.clone();
        assert_eq!(none.truncate_at(20), 0, "nothing at or past 20");
        assert_eq!(none.next_offset, 15);
        let epochs: Vec<(i64, Option<i32>)> = p
            .into_consumer_records()
            .map(|r| (r.offset, r.leader_epoch))
            .collect();
        assert_eq!(
            epochs,
            vec![
                (10, Some(3)),
                (11, Some(3)),
                (12, Some(4)),
                (13, Some(4)),
                (14, Some(4))
            ]
        );
    }
}
