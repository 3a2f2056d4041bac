//! Decoder for a `records` field: a sequence of record batches (magic 2) and/or legacy messages
//! (magic 0 and 1), as found in Fetch responses and Produce requests.

use bytes::{Bytes, BytesMut};
use kafkit_compress::{Codec, CompressError, Compression};

use super::encode::CodecLookup;
use super::types::{RecordHeader, TimestampType, attributes};
use super::wire::{Reader, crc32_ieee};
use super::{BATCH_HEADER_SIZE, Record, RecordBatch, RecordBatchHeader, RecordsError};

/// Bytes before every batch's or message's length-dependent part: `offset: int64` + `length: int32`.
pub const LOG_OVERHEAD: usize = 12;

/// Smallest record inside a magic 2 batch: length, attributes, timestamp delta, offset delta,
/// key length, value length and header count, one byte each.
const MIN_RECORD_SIZE: usize = 7;
/// Smallest header inside a record: key length and value length, one byte each.
const MIN_HEADER_SIZE: usize = 2;
/// Preallocation bound of the records of a batch and the headers of a record, as a multiple of
/// the bytes left to decode. A count is first checked against those bytes with the smallest
/// size of an item, but a decoded item is far larger in memory than that (a `Record` is about
/// 100 bytes, its smallest encoding 7): preallocating the count itself let a small compressed
/// batch claim gigabytes. The vectors grow past this bound as items are actually decoded.
const PREALLOC_FACTOR: usize = 2;

/// How many `T` to preallocate for `count` items decoded from `remaining` bytes.
fn prealloc<T>(count: usize, remaining: usize) -> usize {
    count.min(PREALLOC_FACTOR * remaining / std::mem::size_of::<T>().max(1))
}

/// Smallest legacy message body (crc, magic, attributes, key length, value length) for magic 0.
const LEGACY_V0_MIN: i32 = 14;
/// The same for magic 1, which adds an 8-byte timestamp.
const LEGACY_V1_MIN: i32 = 22;
/// Smallest `batchLength` for magic 2 (the header after the length field).
const V2_MIN: i32 = (BATCH_HEADER_SIZE - LOG_OVERHEAD) as i32;

fn default_lookup(c: Compression) -> Result<&'static dyn Codec, CompressError> {
    c.codec()
}

/// How many times `max_decompressed_bytes` the values one decoder hands out may take in memory
/// when no `max_decoded_bytes` is set: one largest batch (its section, plus its records at about
/// 100 bytes each in memory) fits, a field of many batches that each stay under the
/// decompression bound does not fit without end.
const DECODED_FACTOR: usize = 4;

/// Decoder settings.
///
/// Defaults: checksums verified, at most 64 MiB decompressed per batch, at most 256 MiB
/// (4 x the decompression bound) decoded per `records` field.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct DecodeOptions {
    /// Largest decompressed records section accepted for one batch or legacy wrapper, in bytes.
    /// Bounds the memory a corrupt or hostile batch can claim. Default 64 MiB.
    pub max_decompressed_bytes: usize,
    /// Verify each batch's CRC before decoding it. Default `true` (the Java consumer's
    /// `check.crcs`).
    pub verify_crc: bool,
    /// Largest memory the decoded values of one `records` field may take, over all its
    /// batches: the decompressed sections plus `size_of::<Record>()` per record and
    /// `size_of::<RecordHeader>()` per header. `None`: 4 x `max_decompressed_bytes`. A valid
    /// section of empty records or headers (7 or 2 bytes each) decodes to about 15 or 32 times
    /// its size, and every batch of a field stays alive while its records do, so without this
    /// budget a small field of compressed batches could claim gigabytes.
    pub max_decoded_bytes: Option<usize>,
    lookup: CodecLookup,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            max_decompressed_bytes: 64 << 20,
            verify_crc: true,
            max_decoded_bytes: None,
            lookup: default_lookup,
        }
    }
}

impl DecodeOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the per-batch decompressed size limit in bytes.
    pub fn max_decompressed_bytes(mut self, bytes: usize) -> Self {
        self.max_decompressed_bytes = bytes;
        self
    }

    /// Turns CRC verification on or off.
    pub fn verify_crc(mut self, verify: bool) -> Self {
        self.verify_crc = verify;
        self
    }

    /// Sets the budget of decoded memory for one `records` field, in bytes (see
    /// [`DecodeOptions::max_decoded_bytes`](field@DecodeOptions::max_decoded_bytes)).
    pub fn max_decoded_bytes(mut self, bytes: usize) -> Self {
        self.max_decoded_bytes = Some(bytes);
        self
    }

    /// The decoded-memory budget in force: `max_decoded_bytes`, else 4 x
    /// `max_decompressed_bytes`.
    pub fn decoded_budget(&self) -> usize {
        self.max_decoded_bytes
            .unwrap_or_else(|| self.max_decompressed_bytes.saturating_mul(DECODED_FACTOR))
    }

    #[cfg(test)]
    pub(crate) fn with_lookup(mut self, lookup: CodecLookup) -> Self {
        self.lookup = lookup;
        self
    }
}

/// Iterates the batches of a `records` field.
///
/// Yields one [`RecordBatch`] per magic 2 batch and one per legacy message (a compressed legacy
/// wrapper yields its inner messages as the batch's records). A partial batch at the end, which a
/// Fetch response may contain when a batch did not fit its size limit, ends the iteration without
/// an error; [`RecordBatchDecoder::partial_bytes`] then says how many bytes were left. After an
/// error the iterator yields `None`.
///
/// ```
/// use bytes::{Bytes, BytesMut};
/// use kafkit_protocol::records::{
///     Record, RecordBatchDecoder, RecordBatchEncoder, RecordBatchOptions,
/// };
///
/// # fn main() -> Result<(), kafkit_protocol::records::RecordsError> {
/// let mut buf = BytesMut::new();
/// let mut enc = RecordBatchEncoder::new(&mut buf, RecordBatchOptions::new().base_offset(42))?;
/// enc.append(&Record::new(None, Some(Bytes::from_static(b"hello"))).with_timestamp(7))?;
/// enc.finish()?;
///
/// let data = buf.freeze();
/// // Drop the last 3 bytes: the batch becomes a partial batch and is skipped.
/// let mut partial = RecordBatchDecoder::new(data.slice(..data.len() - 3));
/// assert!(partial.next().is_none());
/// assert_eq!(partial.partial_bytes(), data.len() - 3);
///
/// let batches = RecordBatchDecoder::new(data).collect::<Result<Vec<_>, _>>()?;
/// assert_eq!(batches[0].records[0].offset, 42);
/// assert_eq!(batches[0].records[0].value.as_deref(), Some(&b"hello"[..]));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RecordBatchDecoder {
    data: Bytes,
    pos: usize,
    options: DecodeOptions,
    budget: Budget,
    failed: bool,
}

/// What a decoder may still spend on decoded values (see
/// [`DecodeOptions::max_decoded_bytes`](field@DecodeOptions::max_decoded_bytes)).
#[derive(Clone, Debug)]
struct Budget {
    left: usize,
    limit: usize,
}

impl Budget {
    fn new(limit: usize) -> Budget {
        Budget { left: limit, limit }
    }

    /// Takes `bytes` from the budget, or fails naming the batch at `base_offset`.
    fn charge(&mut self, bytes: usize, base_offset: i64) -> Result<(), RecordsError> {
        match self.left.checked_sub(bytes) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(RecordsError::DecodedTooLarge {
                base_offset,
                limit: self.limit,
            }),
        }
    }
}

impl RecordBatchDecoder {
    /// A decoder over `data` (a whole `records` field) with default options.
    pub fn new(data: Bytes) -> Self {
        Self::with_options(data, DecodeOptions::default())
    }

    /// A decoder over `data` with `options`.
    pub fn with_options(data: Bytes, options: DecodeOptions) -> Self {
        RecordBatchDecoder {
            data,
            pos: 0,
            budget: Budget::new(options.decoded_budget()),
            options,
            failed: false,
        }
    }

    /// Bytes of decoded values charged to the budget so far
    /// ([`DecodeOptions::max_decoded_bytes`](field@DecodeOptions::max_decoded_bytes)): the
    /// decompressed sections plus the per-record and per-header sizes of the batches decoded.
    /// A caller decoding several fields under one budget (every partition of a Fetch answer)
    /// gives the next field what is left.
    pub fn decoded_bytes(&self) -> usize {
        self.budget.limit - self.budget.left
    }

    /// Bytes not yet decoded. Once the iterator has returned `None` without an error, these are
    /// the bytes of a trailing partial batch (0 if there was none).
    pub fn partial_bytes(&self) -> usize {
        self.data.len() - self.pos
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>, RecordsError> {
        let rest = &self.data[self.pos..];
        if rest.len() < LOG_OVERHEAD {
            return Ok(None);
        }
        let mut r = Reader::new(rest);
        let base_offset = r.i64("base offset")?;
        let length = r.i32("batch length")?;
        if length < LEGACY_V0_MIN {
            return Err(RecordsError::BatchTooSmall {
                base_offset,
                length,
                min: LEGACY_V0_MIN,
            });
        }
        // `length` is positive here, so the cast is exact.
        let end = LOG_OVERHEAD + length as usize;
        if rest.len() < end {
            return Ok(None); // partial batch at the end
        }
        let batch = self.data.slice(self.pos..self.pos + end);
        // Every format puts its magic byte at position 16.
        let magic = i8::from_be_bytes([batch[16]]);
        let decoded = match magic {
            2 => decode_v2(batch, base_offset, length, &self.options, &mut self.budget)?,
            0 | 1 => decode_legacy(batch, &self.options, &mut self.budget)?,
            _ => return Err(RecordsError::UnknownMagic { base_offset, magic }),
        };
        self.pos += end;
        Ok(Some(decoded))
    }
}

impl Iterator for RecordBatchDecoder {
    type Item = Result<RecordBatch, RecordsError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.next_batch() {
            Ok(batch) => batch.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Decodes every complete batch in `data` (a `records` field) with default options, ignoring a
/// trailing partial batch.
///
/// # Errors
/// The first [`RecordsError`] met; see [`RecordBatchDecoder`].
pub fn decode_record_batches(data: Bytes) -> Result<Vec<RecordBatch>, RecordsError> {
    RecordBatchDecoder::new(data).collect()
}

fn timestamp_type_of(attrs: i16) -> TimestampType {
    if attrs & attributes::TIMESTAMP_TYPE != 0 {
        TimestampType::LogAppendTime
    } else {
        TimestampType::CreateTime
    }
}

fn decompress(
    codec: &dyn Codec,
    input: &[u8],
    options: &DecodeOptions,
    base_offset: i64,
) -> Result<Bytes, RecordsError> {
    let mut out = BytesMut::new();
    codec
        .decompress(input, options.max_decompressed_bytes, &mut out)
        .map_err(|source| RecordsError::Compression {
            base_offset,
            source,
        })?;
    Ok(out.freeze())
}

/// Decodes one whole magic 2 batch (`batch` starts at `baseOffset` and holds exactly
/// `12 + length` bytes).
fn decode_v2(
    batch: Bytes,
    base_offset: i64,
    length: i32,
    options: &DecodeOptions,
    budget: &mut Budget,
) -> Result<RecordBatch, RecordsError> {
    if length < V2_MIN {
        return Err(RecordsError::BatchTooSmall {
            base_offset,
            length,
            min: V2_MIN,
        });
    }
    let mut r = Reader::new(&batch);
    r.skip(LOG_OVERHEAD, "batch prefix")?;
    let partition_leader_epoch = r.i32("partition leader epoch")?;
    let magic = r.i8("magic")?;
    let crc = r.u32("crc")?;
    if options.verify_crc {
        let computed = crc32c::crc32c(&batch[r.position()..]);
        if computed != crc {
            return Err(RecordsError::CrcMismatch {
                base_offset,
                stored: crc,
                computed,
            });
        }
    }
    let attrs = r.i16("attributes")?;
    let last_offset_delta = r.i32("last offset delta")?;
    let base_timestamp = r.i64("base timestamp")?;
    let max_timestamp = r.i64("max timestamp")?;
    let producer_id = r.i64("producer id")?;
    let producer_epoch = r.i16("producer epoch")?;
    let base_sequence = r.i32("base sequence")?;
    let record_count = r.i32("record count")?;
    let compression =
        Compression::from_attributes(attrs).map_err(|source| RecordsError::Compression {
            base_offset,
            source,
        })?;
    let header = RecordBatchHeader {
        base_offset,
        batch_length: length,
        partition_leader_epoch,
        magic,
        crc,
        attributes: attrs,
        compression,
        timestamp_type: timestamp_type_of(attrs),
        is_transactional: attrs & attributes::TRANSACTIONAL != 0,
        is_control: attrs & attributes::CONTROL != 0,
        has_delete_horizon: attrs & attributes::DELETE_HORIZON != 0,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    };
    let body = batch.slice(BATCH_HEADER_SIZE..);
    let records_data = if compression == Compression::None {
        body
    } else {
        let codec = (options.lookup)(compression).map_err(|source| RecordsError::Compression {
            base_offset,
            source,
        })?;
        let section = decompress(codec, &body, options, base_offset)?;
        // The section lives as long as the records that slice it.
        budget.charge(section.len(), base_offset)?;
        section
    };
    let records = decode_v2_records(&records_data, &header, budget)?;
    Ok(RecordBatch { header, records })
}

/// Reads a varint length prefix that may be -1 (null) and returns the slice it covers.
fn nullable_bytes(
    r: &mut Reader<'_>,
    data: &Bytes,
    what: &'static str,
) -> Result<Option<Bytes>, RecordsError> {
    let len = r.varint(what)?;
    if len == -1 {
        return Ok(None);
    }
    if len < 0 || len as usize > r.remaining() {
        return Err(RecordsError::InvalidLength {
            what,
            length: i64::from(len),
            remaining: r.remaining(),
        });
    }
    let range = r.skip(len as usize, what)?;
    Ok(Some(data.slice(range)))
}

/// Decodes the (decompressed) records section of a magic 2 batch.
fn decode_v2_records(
    data: &Bytes,
    header: &RecordBatchHeader,
    budget: &mut Budget,
) -> Result<Vec<Record>, RecordsError> {
    let base_offset = header.base_offset;
    let max = data.len() / MIN_RECORD_SIZE;
    if header.record_count < 0 || header.record_count as usize > max {
        return Err(RecordsError::InvalidRecordCount {
            base_offset,
            count: header.record_count,
            max,
        });
    }
    let log_append = header.timestamp_type == TimestampType::LogAppendTime;
    let mut records =
        Vec::with_capacity(prealloc::<Record>(header.record_count as usize, data.len()));
    let mut r = Reader::new(data);
    for _ in 0..header.record_count {
        let length = r.varint("record length")?;
        if length < 0 || length as usize > r.remaining() {
            return Err(RecordsError::InvalidLength {
                what: "record length",
                length: i64::from(length),
                remaining: r.remaining(),
            });
        }
        let start = r.position();
        budget.charge(std::mem::size_of::<Record>(), base_offset)?;
        let _attributes = r.i8("record attributes")?;
        let timestamp_delta = r.varlong("timestamp delta")?;
        let offset_delta = r.varint("offset delta")?;
        let key = nullable_bytes(&mut r, data, "record key length")?;
        let value = nullable_bytes(&mut r, data, "record value length")?;
        let header_count = r.varint("header count")?;
        if header_count < 0 || header_count as usize > r.remaining() / MIN_HEADER_SIZE {
            return Err(RecordsError::InvalidLength {
                what: "header count",
                length: i64::from(header_count),
                remaining: r.remaining(),
            });
        }
        budget.charge(
            header_count as usize * std::mem::size_of::<RecordHeader>(),
            base_offset,
        )?;
        let mut headers = Vec::with_capacity(prealloc::<RecordHeader>(
            header_count as usize,
            r.remaining(),
        ));
        for _ in 0..header_count {
            let key_len = r.varint("header key length")?;
            if key_len < 0 || key_len as usize > r.remaining() {
                return Err(RecordsError::InvalidLength {
                    what: "header key length",
                    length: i64::from(key_len),
                    remaining: r.remaining(),
                });
            }
            let key = data.slice(r.skip(key_len as usize, "header key")?);
            let value = nullable_bytes(&mut r, data, "header value length")?;
            headers.push(RecordHeader { key, value });
        }
        let used = r.position() - start;
        if used != length as usize {
            return Err(RecordsError::RecordLengthMismatch {
                base_offset,
                declared: length,
                actual: used,
            });
        }
        records.push(Record {
            offset: base_offset.wrapping_add(i64::from(offset_delta)),
            timestamp: if log_append {
                header.max_timestamp
            } else {
                header.base_timestamp.wrapping_add(timestamp_delta)
            },
            key,
            value,
            headers,
        });
    }
    if r.remaining() != 0 {
        return Err(RecordsError::TrailingBytes {
            base_offset,
            extra: r.remaining(),
        });
    }
    Ok(records)
}

/// The fields of one legacy message (magic 0 or 1).
struct LegacyMessage {
    offset: i64,
    length: i32,
    crc: u32,
    magic: i8,
    attributes: i8,
    timestamp: i64,
    key: Option<Bytes>,
    value: Option<Bytes>,
}

/// Reads an `int32`-length-prefixed nullable byte string of a legacy message.
fn legacy_bytes(
    r: &mut Reader<'_>,
    data: &Bytes,
    what: &'static str,
) -> Result<Option<Bytes>, RecordsError> {
    let len = r.i32(what)?;
    if len == -1 {
        return Ok(None);
    }
    if len < 0 || len as usize > r.remaining() {
        return Err(RecordsError::InvalidLength {
            what,
            length: i64::from(len),
            remaining: r.remaining(),
        });
    }
    Ok(Some(data.slice(r.skip(len as usize, what)?)))
}

/// Parses one whole legacy message (`msg` holds exactly `12 + length` bytes) and checks its CRC.
fn parse_legacy(msg: &Bytes, options: &DecodeOptions) -> Result<LegacyMessage, RecordsError> {
    let mut r = Reader::new(msg);
    let offset = r.i64("offset")?;
    let length = r.i32("message size")?;
    let crc = r.u32("crc")?;
    let magic = r.i8("magic")?;
    let min = match magic {
        0 => LEGACY_V0_MIN,
        1 => LEGACY_V1_MIN,
        _ => {
            return Err(RecordsError::UnknownMagic {
                base_offset: offset,
                magic,
            });
        }
    };
    if length < min {
        return Err(RecordsError::BatchTooSmall {
            base_offset: offset,
            length,
            min,
        });
    }
    if options.verify_crc {
        let computed = crc32_ieee(&msg[16..]);
        if computed != crc {
            return Err(RecordsError::CrcMismatch {
                base_offset: offset,
                stored: crc,
                computed,
            });
        }
    }
    let attributes = r.i8("attributes")?;
    let timestamp = if magic == 1 { r.i64("timestamp")? } else { -1 };
    let key = legacy_bytes(&mut r, msg, "message key length")?;
    let value = legacy_bytes(&mut r, msg, "message value length")?;
    if r.remaining() != 0 {
        return Err(RecordsError::TrailingBytes {
            base_offset: offset,
            extra: r.remaining(),
        });
    }
    Ok(LegacyMessage {
        offset,
        length,
        crc,
        magic,
        attributes,
        timestamp,
        key,
        value,
    })
}

/// Decodes one whole legacy message; a compressed wrapper is expanded into its inner messages.
fn decode_legacy(
    msg: Bytes,
    options: &DecodeOptions,
    budget: &mut Budget,
) -> Result<RecordBatch, RecordsError> {
    let m = parse_legacy(&msg, options)?;
    let attrs = i16::from(m.attributes);
    let compression =
        Compression::from_attributes(attrs).map_err(|source| RecordsError::Compression {
            base_offset: m.offset,
            source,
        })?;
    let timestamp_type = match m.magic {
        0 => TimestampType::NoTimestampType,
        _ => timestamp_type_of(attrs),
    };
    let records = if compression == Compression::None {
        budget.charge(std::mem::size_of::<Record>(), m.offset)?;
        vec![Record {
            offset: m.offset,
            timestamp: m.timestamp,
            key: m.key.clone(),
            value: m.value.clone(),
            headers: Vec::new(),
        }]
    } else {
        let codec = (options.lookup)(compression).map_err(|source| RecordsError::Compression {
            base_offset: m.offset,
            source,
        })?;
        let Some(value) = &m.value else {
            return Err(RecordsError::InvalidWrapper {
                base_offset: m.offset,
                reason: "null value",
            });
        };
        let inner = decompress(codec, value, options, m.offset)?;
        budget.charge(inner.len(), m.offset)?;
        expand_wrapper(&m, timestamp_type, inner, options, budget)?
    };
    let first = records.first().map_or(m.offset, |r| r.offset);
    let last = records.last().map_or(m.offset, |r| r.offset);
    let max_timestamp = records.iter().map(|r| r.timestamp).max().unwrap_or(-1);
    Ok(RecordBatch {
        header: RecordBatchHeader {
            base_offset: first,
            batch_length: m.length,
            partition_leader_epoch: -1,
            magic: m.magic,
            crc: m.crc,
            attributes: attrs,
            compression,
            timestamp_type,
            is_transactional: false,
            is_control: false,
            has_delete_horizon: false,
            last_offset_delta: i32::try_from(last.wrapping_sub(first)).unwrap_or(i32::MAX),
            base_timestamp: records.first().map_or(-1, |r| r.timestamp),
            max_timestamp,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            record_count: i32::try_from(records.len()).unwrap_or(i32::MAX),
        },
        records,
    })
}

/// Turns the decompressed inner message set of a legacy wrapper into records.
///
/// Magic 1 inner offsets are relative (0, 1, ...) and the wrapper carries the absolute offset of
/// the last one (KIP-31); magic 0 inner offsets are absolute. With log-append time (magic 1) every
/// inner record takes the wrapper's timestamp (KIP-32).
fn expand_wrapper(
    wrapper: &LegacyMessage,
    timestamp_type: TimestampType,
    inner: Bytes,
    options: &DecodeOptions,
    budget: &mut Budget,
) -> Result<Vec<Record>, RecordsError> {
    let invalid = |reason| RecordsError::InvalidWrapper {
        base_offset: wrapper.offset,
        reason,
    };
    let max = inner.len() / (LOG_OVERHEAD + LEGACY_V0_MIN as usize);
    let mut records = Vec::with_capacity(max.min(1024));
    let mut pos = 0;
    while pos < inner.len() {
        let mut r = Reader::new(&inner[pos..]);
        let _offset = r.i64("inner offset")?;
        let length = r.i32("inner message size")?;
        if length < LEGACY_V0_MIN {
            return Err(RecordsError::BatchTooSmall {
                base_offset: wrapper.offset,
                length,
                min: LEGACY_V0_MIN,
            });
        }
        let end = pos + LOG_OVERHEAD + length as usize;
        if end > inner.len() {
            return Err(RecordsError::UnexpectedEof {
                what: "inner message",
                needed: end - pos,
                remaining: inner.len() - pos,
            });
        }
        let m = parse_legacy(&inner.slice(pos..end), options)?;
        if m.magic != wrapper.magic {
            return Err(invalid("inner magic differs from the wrapper's"));
        }
        if m.attributes & (Compression::ATTRIBUTE_MASK as i8) != 0 {
            return Err(invalid("nested compression"));
        }
        budget.charge(std::mem::size_of::<Record>(), wrapper.offset)?;
        records.push(Record {
            offset: m.offset,
            timestamp: if timestamp_type == TimestampType::LogAppendTime {
                wrapper.timestamp
            } else {
                m.timestamp
            },
            key: m.key,
            value: m.value,
            headers: Vec::new(),
        });
        pos = end;
    }
    let Some(last) = records.last() else {
        return Err(invalid("empty inner message set"));
    };
    if wrapper.magic >= 1 {
        let base = wrapper.offset.wrapping_sub(last.offset);
        for rec in &mut records {
            rec.offset = base.wrapping_add(rec.offset);
        }
    }
    Ok(records)
}
