//! Record batch (magic 2) encoder.
//!
//! The encoder writes a placeholder header, appends each record with its size computed first,
//! then back-patches the length, counts, timestamps and CRC-32C in place (protocol guide,
//! "Record Batch"; KIP-98).

use bytes::{BufMut, BytesMut};
use kafkit_compress::{Codec, CompressError, Compression};

use super::types::{RecordHeader, TimestampType, attributes};
use super::wire::{put_varint, put_varlong, varint_size, varlong_size};
use super::{BATCH_HEADER_SIZE, Record, RecordsError};

/// Byte offsets of the back-patched header fields, from the start of the batch.
const LENGTH_AT: usize = 8;
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
const LAST_OFFSET_DELTA_AT: usize = 23;
const BASE_TIMESTAMP_AT: usize = 27;
const MAX_TIMESTAMP_AT: usize = 35;
const RECORD_COUNT_AT: usize = 57;

pub(super) const MAX_FIELD: usize = i32::MAX as usize;

/// How codecs are found; tests swap in their own.
pub(crate) type CodecLookup = fn(Compression) -> Result<&'static dyn Codec, CompressError>;

fn default_lookup(c: Compression) -> Result<&'static dyn Codec, CompressError> {
    c.codec()
}

/// Settings for one record batch: the header fields a producer chooses.
///
/// Defaults: base offset 0, partition leader epoch -1, no compression (default level), create
/// time, not transactional, not control, no delete horizon, producer id -1, producer epoch -1,
/// base sequence -1 (a non-idempotent producer). Each setter below takes and returns the options:
///
/// ```
/// use kafkit_compress::Compression;
/// use kafkit_protocol::records::RecordBatchOptions;
///
/// let options = RecordBatchOptions::new()
///     .compression(Compression::None)
///     .producer(4000, 2, 17)
///     .transactional(true);
/// assert_eq!(options.producer_id, 4000);
/// ```
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct RecordBatchOptions {
    /// `baseOffset`: offset of the first record. Producers send 0; the broker assigns offsets.
    pub base_offset: i64,
    /// `partitionLeaderEpoch`; producers send -1 (KIP-101).
    pub partition_leader_epoch: i32,
    /// Codec for the records section.
    pub compression: Compression,
    /// Codec level (KIP-390), `None` for the codec's default.
    pub compression_level: Option<i32>,
    /// Timestamp type bit.
    pub timestamp_type: TimestampType,
    /// Transactional bit (KIP-98).
    pub is_transactional: bool,
    /// Control bit: the records are control records (KIP-98).
    pub is_control: bool,
    /// When set, the delete-horizon bit is set and `baseTimestamp` holds this value (ms; KIP-534);
    /// record timestamp deltas are then relative to it.
    pub delete_horizon_ms: Option<i64>,
    /// `producerId`, -1 for none.
    pub producer_id: i64,
    /// `producerEpoch`, -1 for none.
    pub producer_epoch: i16,
    /// `baseSequence`, -1 for none.
    pub base_sequence: i32,
    pub(super) lookup: CodecLookup,
}

impl Default for RecordBatchOptions {
    fn default() -> Self {
        RecordBatchOptions {
            base_offset: 0,
            partition_leader_epoch: -1,
            compression: Compression::None,
            compression_level: None,
            timestamp_type: TimestampType::CreateTime,
            is_transactional: false,
            is_control: false,
            delete_horizon_ms: None,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            lookup: default_lookup,
        }
    }
}

impl RecordBatchOptions {
    /// The defaults (see the type's docs).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `baseOffset`.
    pub fn base_offset(mut self, base_offset: i64) -> Self {
        self.base_offset = base_offset;
        self
    }

    /// Sets `partitionLeaderEpoch`.
    pub fn partition_leader_epoch(mut self, epoch: i32) -> Self {
        self.partition_leader_epoch = epoch;
        self
    }

    /// Sets the codec.
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// Sets the codec level (`None` = the codec's default).
    pub fn compression_level(mut self, level: Option<i32>) -> Self {
        self.compression_level = level;
        self
    }

    /// Sets the timestamp type. [`TimestampType::NoTimestampType`] is written as create time.
    pub fn timestamp_type(mut self, timestamp_type: TimestampType) -> Self {
        self.timestamp_type = timestamp_type;
        self
    }

    /// Sets the transactional bit.
    pub fn transactional(mut self, is_transactional: bool) -> Self {
        self.is_transactional = is_transactional;
        self
    }

    /// Sets the control bit.
    pub fn control(mut self, is_control: bool) -> Self {
        self.is_control = is_control;
        self
    }

    /// Sets the delete horizon (ms), or clears it with `None`.
    pub fn delete_horizon_ms(mut self, delete_horizon_ms: Option<i64>) -> Self {
        self.delete_horizon_ms = delete_horizon_ms;
        self
    }

    /// Sets `producerId`, `producerEpoch` and `baseSequence` (KIP-98 idempotence).
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    #[cfg(test)]
    pub(crate) fn with_lookup(mut self, lookup: CodecLookup) -> Self {
        self.lookup = lookup;
        self
    }

    /// The `attributes` field these options produce.
    pub fn attributes(&self) -> i16 {
        let mut a = i16::from(self.compression.id());
        if self.timestamp_type == TimestampType::LogAppendTime {
            a |= attributes::TIMESTAMP_TYPE;
        }
        if self.is_transactional {
            a |= attributes::TRANSACTIONAL;
        }
        if self.is_control {
            a |= attributes::CONTROL;
        }
        if self.delete_horizon_ms.is_some() {
            a |= attributes::DELETE_HORIZON;
        }
        a
    }
}

#[inline]
pub(super) fn check_len(what: &'static str, len: usize) -> Result<(), RecordsError> {
    if len > MAX_FIELD {
        return Err(RecordsError::TooLarge {
            what,
            size: len,
            max: MAX_FIELD,
        });
    }
    Ok(())
}

#[inline]
fn nullable_size(what: &'static str, b: Option<&[u8]>) -> Result<usize, RecordsError> {
    match b {
        None => Ok(1),
        Some(b) => {
            check_len(what, b.len())?;
            Ok(varint_size(b.len() as i32) + b.len())
        }
    }
}

/// Size of a record's body (everything after its length varint), in bytes.
#[inline]
pub(super) fn record_body_size(
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[RecordHeader],
) -> Result<usize, RecordsError> {
    check_len("header count", headers.len())?;
    let mut size = 1 // attributes
        + varlong_size(timestamp_delta)
        + varint_size(offset_delta)
        + nullable_size("record key", key)?
        + nullable_size("record value", value)?
        + varint_size(headers.len() as i32);
    for h in headers {
        size += nullable_size("header key", Some(&h.key))?;
        size += nullable_size("header value", h.value.as_deref())?;
    }
    check_len("record", size)?;
    Ok(size)
}

/// Bytes one record takes inside a magic 2 batch, including its length prefix, given its offset
/// and timestamp deltas from the batch base. A producer can use this to decide whether a record
/// fits a `batch.size` limit before writing anything.
///
/// # Errors
/// [`RecordsError::TooLarge`] if a field or the record exceeds `i32::MAX` bytes.
pub fn encoded_record_size(
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[RecordHeader],
) -> Result<usize, RecordsError> {
    let body = record_body_size(offset_delta, timestamp_delta, key, value, headers)?;
    Ok(varint_size(body as i32) + body)
}

/// Bytes of a record's body (everything after its length varint) at offset and timestamp deltas
/// of 0: the part of its size that depends only on its key, value and headers. A producer
/// computes it once when a record is buffered and derives the record's size at any deltas from
/// it with [`encoded_record_size_at`], and hands it to
/// [`RecordBatchEncoder::append_parts_sized`], instead of sizing the record again each time.
///
/// # Errors
/// [`RecordsError::TooLarge`] if a field or the record exceeds `i32::MAX` bytes.
#[inline]
pub fn encoded_record_body_size(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[RecordHeader],
) -> Result<usize, RecordsError> {
    record_body_size(0, 0, key, value, headers)
}

/// The body size at `offset_delta` and `timestamp_delta` of a record whose body size at deltas
/// of 0 is `body_at_zero`: the deltas' varints replace the two one-byte zeros.
#[inline]
pub(super) const fn body_size_at(
    body_at_zero: usize,
    offset_delta: i32,
    timestamp_delta: i64,
) -> usize {
    body_at_zero - 2 + varint_size(offset_delta) + varlong_size(timestamp_delta)
}

/// Bytes one record takes inside a magic 2 batch, length prefix included, at `offset_delta` and
/// `timestamp_delta`, from its body size at deltas of 0 ([`encoded_record_body_size`]): the same
/// as [`encoded_record_size`] of its parts, in a few instructions.
///
/// `body_at_zero` must come from [`encoded_record_body_size`] (at least 2, as every body is).
// Inlined across crates: a producer calls it several times per record, and without it each call
// is a real call into this crate (no LTO).
#[inline]
pub const fn encoded_record_size_at(
    body_at_zero: usize,
    offset_delta: i32,
    timestamp_delta: i64,
) -> usize {
    let body = body_size_at(body_at_zero, offset_delta, timestamp_delta);
    varint_size(body as i32) + body
}

pub(super) fn put_nullable(buf: &mut BytesMut, b: Option<&[u8]>) {
    match b {
        None => put_varint(buf, -1),
        Some(b) => {
            put_varint(buf, b.len() as i32);
            buf.put_slice(b);
        }
    }
}

/// Writes one record batch (magic 2) into a caller's buffer.
///
/// [`RecordBatchEncoder::new`] writes a placeholder header; each `append` computes the record's
/// size, then writes it (straight into the output when uncompressed, into a per-batch buffer when
/// compressed); [`RecordBatchEncoder::finish`] compresses if needed and patches `batchLength`,
/// `lastOffsetDelta`, the timestamps, the record count and the CRC-32C in place. Appending does no
/// heap allocation besides growing those buffers.
///
/// Dropping an encoder without calling `finish` removes its partial batch from the buffer.
///
/// ```
/// use bytes::{Bytes, BytesMut};
/// use kafkit_protocol::records::{Record, RecordBatchEncoder, RecordBatchOptions};
///
/// # fn main() -> Result<(), kafkit_protocol::records::RecordsError> {
/// let mut buf = BytesMut::new();
/// let mut batch = RecordBatchEncoder::new(&mut buf, RecordBatchOptions::new())?;
/// batch.append(&Record::new(None, Some(Bytes::from_static(b"v1"))).with_timestamp(1_000))?;
/// let size_before = batch.size_in_bytes();
/// batch.append_parts(1_005, Some(b"k"), Some(b"v2"), &[])?;
/// assert!(batch.size_in_bytes() > size_before);
/// let written = batch.finish()?;
/// assert_eq!(written, buf.len());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RecordBatchEncoder<'a> {
    out: &'a mut BytesMut,
    start: usize,
    options: RecordBatchOptions,
    codec: &'static dyn Codec,
    /// Uncompressed records when a codec other than `none` is used.
    scratch: Option<BytesMut>,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    records_size: usize,
    finished: bool,
}

impl<'a> RecordBatchEncoder<'a> {
    /// Starts a batch at the end of `out` with `options`.
    ///
    /// # Errors
    /// [`RecordsError::Compression`] if the codec is unknown or not built in.
    pub fn new(out: &'a mut BytesMut, options: RecordBatchOptions) -> Result<Self, RecordsError> {
        let codec =
            (options.lookup)(options.compression).map_err(|source| RecordsError::Compression {
                base_offset: options.base_offset,
                source,
            })?;
        let start = out.len();
        out.reserve(BATCH_HEADER_SIZE);
        out.put_i64(options.base_offset);
        out.put_i32(0); // batchLength, patched
        out.put_i32(options.partition_leader_epoch);
        out.put_i8(2); // magic
        out.put_u32(0); // crc, patched
        out.put_i16(options.attributes());
        out.put_i32(0); // lastOffsetDelta, patched
        out.put_i64(0); // baseTimestamp, patched
        out.put_i64(0); // maxTimestamp, patched
        out.put_i64(options.producer_id);
        out.put_i16(options.producer_epoch);
        out.put_i32(options.base_sequence);
        out.put_i32(0); // records count, patched
        debug_assert_eq!(out.len() - start, BATCH_HEADER_SIZE);
        let scratch = (options.compression != Compression::None).then(BytesMut::new);
        Ok(RecordBatchEncoder {
            out,
            start,
            options,
            codec,
            scratch,
            count: 0,
            base_timestamp: options.delete_horizon_ms.unwrap_or(0),
            max_timestamp: -1,
            records_size: 0,
            finished: false,
        })
    }

    /// Records appended so far.
    pub fn record_count(&self) -> i32 {
        self.count
    }

    /// The batch's size so far in bytes, header included, before compression.
    pub fn size_in_bytes(&self) -> usize {
        BATCH_HEADER_SIZE + self.records_size
    }

    fn deltas(&self, timestamp: i64) -> (i32, i64) {
        let base = if self.count == 0 && self.options.delete_horizon_ms.is_none() {
            timestamp
        } else {
            self.base_timestamp
        };
        (self.count, timestamp.wrapping_sub(base))
    }

    /// What [`RecordBatchEncoder::size_in_bytes`] would return after appending this record.
    ///
    /// # Errors
    /// [`RecordsError::TooLarge`] as for [`encoded_record_size`].
    pub fn size_with(
        &self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[RecordHeader],
    ) -> Result<usize, RecordsError> {
        let (offset_delta, ts_delta) = self.deltas(timestamp);
        Ok(
            self.size_in_bytes()
                + encoded_record_size(offset_delta, ts_delta, key, value, headers)?,
        )
    }

    /// Appends `record` (its `offset` is ignored; records are numbered from the base offset) and
    /// returns its offset delta.
    ///
    /// # Errors
    /// As for [`RecordBatchEncoder::append_parts`].
    pub fn append(&mut self, record: &Record) -> Result<i32, RecordsError> {
        self.append_parts(
            record.timestamp,
            record.key.as_deref(),
            record.value.as_deref(),
            &record.headers,
        )
    }

    /// Appends a record from borrowed parts and returns its offset delta.
    ///
    /// `timestamp` is in ms since the Unix epoch. Nothing is written if an error is returned.
    ///
    /// # Errors
    /// [`RecordsError::TooLarge`] if a field, the record or the batch would exceed `i32::MAX`
    /// bytes; [`RecordsError::BatchFull`] after `i32::MAX` records.
    pub fn append_parts(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[RecordHeader],
    ) -> Result<i32, RecordsError> {
        let (offset_delta, ts_delta) = self.deltas(timestamp);
        let body = record_body_size(offset_delta, ts_delta, key, value, headers)?;
        self.append_body(
            timestamp,
            (offset_delta, ts_delta),
            (key, value, headers),
            body,
        )
    }

    /// [`RecordBatchEncoder::append_parts`] for a record whose body size at deltas of 0 was
    /// computed when it was buffered ([`encoded_record_body_size`] of the same parts): the
    /// record is not sized again. A size that does not match the parts would write a corrupt
    /// batch; debug builds check it.
    ///
    /// # Errors
    /// As for [`RecordBatchEncoder::append_parts`].
    pub fn append_parts_sized(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[RecordHeader],
        body_at_zero: usize,
    ) -> Result<i32, RecordsError> {
        debug_assert_eq!(
            record_body_size(0, 0, key, value, headers).ok(),
            Some(body_at_zero),
            "append_parts_sized: the size does not match the record"
        );
        let (offset_delta, ts_delta) = self.deltas(timestamp);
        let body = body_size_at(body_at_zero, offset_delta, ts_delta);
        check_len("record", body)?;
        self.append_body(
            timestamp,
            (offset_delta, ts_delta),
            (key, value, headers),
            body,
        )
    }

    /// Writes a record of `body` bytes (its body's size at `deltas`, which
    /// [`RecordBatchEncoder::deltas`] gave for `timestamp`).
    fn append_body(
        &mut self,
        timestamp: i64,
        (offset_delta, ts_delta): (i32, i64),
        (key, value, headers): (Option<&[u8]>, Option<&[u8]>, &[RecordHeader]),
        body: usize,
    ) -> Result<i32, RecordsError> {
        if self.count == i32::MAX {
            return Err(RecordsError::BatchFull);
        }
        let total = varint_size(body as i32) + body;
        let new_size = self.size_in_bytes() + total;
        check_len("record batch", new_size)?;

        if self.count == 0 && self.options.delete_horizon_ms.is_none() {
            self.base_timestamp = timestamp;
        }
        let dst: &mut BytesMut = match &mut self.scratch {
            Some(s) => s,
            None => self.out,
        };
        put_record(dst, body, (ts_delta, offset_delta), (key, value, headers));

        self.max_timestamp = if self.count == 0 {
            timestamp
        } else {
            self.max_timestamp.max(timestamp)
        };
        self.count += 1;
        self.records_size += total;
        Ok(offset_delta)
    }

    /// Completes the batch and returns its size in bytes (0, and nothing left in the buffer, if no
    /// record was appended).
    ///
    /// # Errors
    /// [`RecordsError::Compression`] if the codec fails; [`RecordsError::TooLarge`] if the
    /// compressed batch exceeds `i32::MAX` bytes. The partial batch is removed from the buffer.
    pub fn finish(mut self) -> Result<usize, RecordsError> {
        if self.count == 0 {
            return Ok(0); // Drop removes the placeholder header.
        }
        if let Some(scratch) = &self.scratch {
            self.codec
                .compress(scratch, self.options.compression_level, self.out)
                .map_err(|source| RecordsError::Compression {
                    base_offset: self.options.base_offset,
                    source,
                })?;
        }
        let total = self.out.len() - self.start;
        check_len("record batch", total)?;
        let batch = &mut self.out[self.start..];
        let patch = |batch: &mut [u8], at: usize, bytes: &[u8]| {
            batch[at..at + bytes.len()].copy_from_slice(bytes);
        };
        patch(batch, LENGTH_AT, &((total - 12) as i32).to_be_bytes());
        patch(
            batch,
            ATTRIBUTES_AT,
            &self.options.attributes().to_be_bytes(),
        );
        patch(batch, LAST_OFFSET_DELTA_AT, &(self.count - 1).to_be_bytes());
        patch(batch, BASE_TIMESTAMP_AT, &self.base_timestamp.to_be_bytes());
        patch(batch, MAX_TIMESTAMP_AT, &self.max_timestamp.to_be_bytes());
        patch(batch, RECORD_COUNT_AT, &self.count.to_be_bytes());
        let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
        patch(batch, CRC_AT, &crc.to_be_bytes());
        self.finished = true;
        Ok(total)
    }
}

impl Drop for RecordBatchEncoder<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.out.truncate(self.start);
        }
    }
}

/// Writes one record of `body` bytes (its body's size at `deltas`) at the end of `dst` (the
/// encoder's and the builder's one way of writing a record).
pub(super) fn put_record(
    dst: &mut BytesMut,
    body: usize,
    (ts_delta, offset_delta): (i64, i32),
    (key, value, headers): (Option<&[u8]>, Option<&[u8]>, &[RecordHeader]),
) {
    dst.reserve(varint_size(body as i32) + body);
    put_varint(dst, body as i32);
    dst.put_i8(0); // record attributes: unused
    put_varlong(dst, ts_delta);
    put_varint(dst, offset_delta);
    put_nullable(dst, key);
    put_nullable(dst, value);
    // A header count over i32::MAX was refused when the record was sized; a size that was not
    // this record's shows in the caller's length check.
    put_varint(dst, i32::try_from(headers.len()).unwrap_or(i32::MAX));
    for h in headers {
        put_nullable(dst, Some(&h.key));
        put_nullable(dst, h.value.as_deref());
    }
}
