//! An owned record batch (magic 2) encoded record by record: the producer's accumulator form
//! (Java's `MemoryRecordsBuilder`).
//!
//! [`RecordBatchBuilder`] encodes each record into its records section when it is appended,
//! with `BATCH_HEADER_SIZE` bytes reserved in front; [`RecordBatchBuilder::build`] later writes
//! the header and CRC-32C in that space (uncompressed: no copy of the records) or compresses the
//! section behind a new header, as often as the header fields change (a new producer epoch or
//! base sequence). [`put_record_batch`] writes a header around a records section held anywhere.
//! The bytes are the same as [`RecordBatchEncoder`](super::RecordBatchEncoder) writes for the
//! same records and options.

use bytes::{BufMut, Bytes, BytesMut};

use super::encode::{
    MAX_FIELD, RecordBatchOptions, body_size_at, check_len, put_record, record_body_size,
};
use super::types::RecordHeader;
use super::wire::varint_size;
use super::{BATCH_HEADER_SIZE, RecordsError};

/// Byte offset of the CRC-32C field, from the start of the batch; the CRC covers everything
/// from the attributes (the next field) on.
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;

/// Most cache lines [`prefetch_write`] asks for (a longer range is a stream the hardware
/// prefetcher follows by itself).
const PREFETCH_LINES: usize = 4;

/// Asks the CPU to bring into its cache, ready for writing, the lines of the `len` bytes at
/// `addr` (at most four 64-byte lines from the first); a hint only, for memory about to be
/// written: it reads and writes nothing, and no address, mapped or not, makes it fault (see
/// `prefetch_line` for the instructions; nothing on other targets). `addr` is a plain number so
/// that no pointer past an allocation is ever made.
///
/// What it is for: a producer appends to many partitions' buffers in turn, so the next record's
/// destination has usually left the cache (or is shared with the thread that read the buffer
/// before it was reused); without the hint the stores of the copy wait for those lines, and the
/// next atomic instruction (the writer's lock release) waits for the stores.
/// [`RecordBatchBuilder::append_parts_sized`] asks it for the next record's lines.
#[doc(hidden)]
#[inline]
pub fn prefetch_write(addr: usize, len: usize) {
    if len == 0 {
        return;
    }
    let end = addr.saturating_add(len);
    let mut line = addr & !63;
    let mut n = 0;
    while line < end && n < PREFETCH_LINES {
        prefetch_line(line);
        let Some(next) = line.checked_add(64) else {
            break;
        };
        line = next;
        n += 1;
    }
}

/// After an append: the lines the next `ahead` bytes appended to `buf` will fill, as far as
/// its spare capacity reaches, skipping the line the last write already holds.
#[inline]
fn prefetch_tail(buf: &BytesMut, ahead: usize) {
    let spare = buf.capacity() - buf.len();
    let tail = buf.as_ptr() as usize + buf.len();
    let end = tail + ahead.min(spare);
    if let Some(next_line) = (tail | 63).checked_add(1)
        && next_line < end
    {
        prefetch_write(next_line, end - next_line);
    }
}

/// A write prefetch of the cache line holding `addr`: on x86-64 `_mm_prefetch` with the
/// `_MM_HINT_ET0` hint, which is `PREFETCHW` where the build enables the `prfchw` feature and
/// `PREFETCHT0` (a read prefetch, in every x86-64 CPU) otherwise; on AArch64 `PRFM PSTL1KEEP`.
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch_line(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86-64 CPU has (it is in the target's
    // baseline). A prefetch is a hint: it reads and writes no memory the program can observe
    // and raises no fault for any address, mapped or not. Tested by
    // `prefetching_changes_no_byte_and_never_faults`.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_ET0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_ET0>(addr as *const i8);
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: PRFM (base A64) is a hint: no architectural effect, no fault for any address.
    unsafe {
        std::arch::asm!("prfm pstl1keep, [{0}]", in(reg) addr, options(nostack, nomem, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = addr;
}

/// The header fields that depend on the records, not on the options.
#[derive(Clone, Copy)]
struct Summary {
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

/// Writes the 61-byte v2 header of a batch of `total` bytes (header included) into `h`, its
/// CRC-32C left 0.
fn fill_header(h: &mut [u8], options: &RecordBatchOptions, s: Summary, total: usize) {
    let mut w = &mut h[..BATCH_HEADER_SIZE];
    w.put_i64(options.base_offset);
    w.put_i32((total - 12) as i32); // batchLength: the bytes after it
    w.put_i32(options.partition_leader_epoch);
    w.put_i8(2); // magic
    w.put_u32(0); // crc, set by `seal_crc`
    w.put_i16(options.attributes());
    w.put_i32(s.count - 1); // lastOffsetDelta
    w.put_i64(s.base_timestamp);
    w.put_i64(s.max_timestamp);
    w.put_i64(options.producer_id);
    w.put_i16(options.producer_epoch);
    w.put_i32(options.base_sequence);
    w.put_i32(s.count);
}

/// Computes and stores the CRC-32C of a whole batch whose header is filled.
fn seal_crc(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
    batch[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
}

fn check_options(options: &RecordBatchOptions) -> Result<(), RecordsError> {
    if options.delete_horizon_ms.is_some() {
        return Err(RecordsError::InvalidOptions {
            reason: "a delete horizon (the timestamp deltas count from the first record)",
        });
    }
    Ok(())
}

/// Appends one record batch v2 to `out`: the header for `options` (`baseOffset`, producer
/// fields, attributes; `lastOffsetDelta` = `count - 1`, `baseTimestamp`, `maxTimestamp`, the
/// record count and `batchLength` from the arguments), then `records`, compressed with
/// `options.compression` (at `options.compression_level`), and the CRC-32C over it all.
///
/// `records` is an encoded records section (the records' length varints, attributes, timestamp
/// deltas from `base_timestamp` in ms, offset deltas `0..count`, keys, values, headers), such as
/// [`RecordBatchBuilder::records`]; it is not checked. Timestamps are ms since the Unix epoch.
/// Returns the bytes written: 0 (and nothing written) when `count` is 0.
///
/// # Errors
/// Nothing is left in `out` on error. [`RecordsError::InvalidRecordCount`] if `count` is
/// negative; [`RecordsError::InvalidOptions`] if `options` sets a delete horizon;
/// [`RecordsError::Compression`] if the codec is not built in or fails;
/// [`RecordsError::TooLarge`] if the batch would exceed `i32::MAX` bytes.
pub fn put_record_batch(
    out: &mut BytesMut,
    options: &RecordBatchOptions,
    records: &[u8],
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
) -> Result<usize, RecordsError> {
    let summary = Summary {
        count,
        base_timestamp,
        max_timestamp,
    };
    put_batch(out, options, records, summary)
}

fn put_batch(
    out: &mut BytesMut,
    options: &RecordBatchOptions,
    records: &[u8],
    s: Summary,
) -> Result<usize, RecordsError> {
    if s.count < 0 {
        return Err(RecordsError::InvalidRecordCount {
            base_offset: options.base_offset,
            count: s.count,
            max: records.len(),
        });
    }
    check_options(options)?;
    if s.count == 0 {
        return Ok(0);
    }
    let codec =
        (options.lookup)(options.compression).map_err(|source| RecordsError::Compression {
            base_offset: options.base_offset,
            source,
        })?;
    check_len(
        "record batch",
        BATCH_HEADER_SIZE.saturating_add(records.len()),
    )?;
    let start = out.len();
    out.reserve(BATCH_HEADER_SIZE + records.len());
    out.put_bytes(0, BATCH_HEADER_SIZE);
    if options.compression == kafkit_compress::Compression::None {
        out.put_slice(records);
    } else if let Err(source) = codec.compress(records, options.compression_level, out) {
        out.truncate(start);
        return Err(RecordsError::Compression {
            base_offset: options.base_offset,
            source,
        });
    }
    let total = out.len() - start;
    if let Err(e) = check_len("record batch", total) {
        out.truncate(start);
        return Err(e);
    }
    let batch = &mut out[start..];
    fill_header(batch, options, s, total);
    seal_crc(batch);
    Ok(total)
}

/// One record batch v2 under construction, owning its bytes: each record is encoded into the
/// records section when it is appended (its key, value and headers copied; the caller may drop
/// them at once), and [`RecordBatchBuilder::build`] writes the batch header around the section,
/// as often as needed.
///
/// Records are numbered from 0 in the order appended (offset delta = index); timestamp deltas
/// count from the first record's timestamp (ms since the Unix epoch; any `i64`, deltas wrap as
/// in [`RecordBatchEncoder`](super::RecordBatchEncoder)). The buffer holds
/// [`BATCH_HEADER_SIZE`] bytes of header space in front of the records, so an uncompressed
/// build writes the header in place and hands out the buffer without copying the records.
/// Appending allocates only when the buffer grows (reserve with
/// [`RecordBatchBuilder::with_capacity`]).
///
/// ```
/// use kafkit_protocol::records::{RecordBatchBuilder, RecordBatchOptions, decode_record_batches};
///
/// # fn main() -> Result<(), kafkit_protocol::records::RecordsError> {
/// let mut batch = RecordBatchBuilder::with_capacity(1024);
/// batch.append_parts(1_000, None, Some(b"v1"), &[])?;
/// batch.append_parts(990, Some(b"k"), Some(b"v2"), &[])?;
/// assert_eq!((batch.record_count(), batch.base_timestamp(), batch.max_timestamp()), (2, Some(1_000), 1_000));
/// let bytes = batch.build(&RecordBatchOptions::new().producer(7, 0, 0))?;
/// assert_eq!(bytes.len(), batch.size_in_bytes());
/// let decoded = decode_record_batches(bytes)?;
/// assert_eq!(decoded[0].records[1].timestamp, 990);
/// // Built again with other producer fields (a new epoch): the same records.
/// let again = batch.build(&RecordBatchOptions::new().producer(7, 1, 0))?;
/// assert_eq!(decode_record_batches(again)?[0].header.producer_epoch, 1);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RecordBatchBuilder {
    /// Header space and records while appending; empty while `built` holds them.
    open: BytesMut,
    /// The buffer as the last uncompressed build handed it out (header filled in front).
    built: Option<Bytes>,
    count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

impl Default for RecordBatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RecordBatchBuilder {
    /// An empty batch.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty batch whose buffer holds `bytes` (header included; at least the header) before
    /// it grows.
    pub fn with_capacity(bytes: usize) -> Self {
        let mut open = BytesMut::with_capacity(bytes.max(BATCH_HEADER_SIZE));
        open.put_bytes(0, BATCH_HEADER_SIZE);
        RecordBatchBuilder {
            open,
            built: None,
            count: 0,
            base_timestamp: 0,
            max_timestamp: -1,
        }
    }

    /// An empty batch that writes into `buffer` (its contents are dropped, its memory kept),
    /// grown to hold `bytes` (header included) if it is smaller: for reusing the buffer of a
    /// batch that ended ([`RecordBatchBuilder::take_buffer`]), so a new batch allocates nothing.
    pub fn from_buffer(mut buffer: BytesMut, bytes: usize) -> Self {
        buffer.clear();
        buffer.reserve(bytes.max(BATCH_HEADER_SIZE));
        buffer.put_bytes(0, BATCH_HEADER_SIZE);
        RecordBatchBuilder {
            open: buffer,
            built: None,
            count: 0,
            base_timestamp: 0,
            max_timestamp: -1,
        }
    }

    /// Takes the batch's buffer for reuse ([`RecordBatchBuilder::from_buffer`]), emptied;
    /// `None` when bytes of the last uncompressed build are still held elsewhere (they share the
    /// buffer). The builder is left empty, with no buffer.
    pub fn take_buffer(&mut self) -> Option<BytesMut> {
        self.count = 0;
        self.base_timestamp = 0;
        self.max_timestamp = -1;
        let mut buffer = match self.built.take() {
            Some(b) => {
                drop(std::mem::take(&mut self.open));
                b.try_into_mut().ok()?
            }
            None => std::mem::take(&mut self.open),
        };
        buffer.clear();
        Some(buffer)
    }

    /// Records appended so far.
    pub fn record_count(&self) -> i32 {
        self.count
    }

    /// The batch's size in bytes, header included, uncompressed: [`BATCH_HEADER_SIZE`] plus
    /// the records section.
    pub fn size_in_bytes(&self) -> usize {
        self.bytes().len()
    }

    /// The first record's timestamp (ms), which the others' deltas count from; `None` when
    /// empty.
    pub fn base_timestamp(&self) -> Option<i64> {
        (self.count > 0).then_some(self.base_timestamp)
    }

    /// The largest record timestamp (ms), -1 when empty.
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }

    /// The encoded records section (everything after the header), uncompressed.
    pub fn records(&self) -> &[u8] {
        &self.bytes()[BATCH_HEADER_SIZE..]
    }

    fn bytes(&self) -> &[u8] {
        self.built.as_deref().unwrap_or(&self.open)
    }

    /// The buffer to append to, taken back from the last build (without a copy when nothing
    /// else holds that build's bytes).
    fn open_mut(&mut self) -> &mut BytesMut {
        if self.built.is_some() {
            self.reopen();
        }
        &mut self.open
    }

    #[cold]
    #[inline(never)]
    fn reopen(&mut self) {
        if let Some(b) = self.built.take() {
            self.open = b
                .try_into_mut()
                .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
        }
    }

    /// Appends a record from borrowed parts (sizing it first) and returns its offset delta.
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
        let body = record_body_size(0, 0, key, value, headers)?;
        self.append_parts_sized(timestamp, key, value, headers, body)
    }

    /// [`RecordBatchBuilder::append_parts`] for a record whose body size at deltas of 0 was
    /// computed before ([`encoded_record_body_size`](super::encoded_record_body_size) of the
    /// same parts): the record is not sized again. It takes
    /// [`encoded_record_size_at`](super::encoded_record_size_at)`(body_at_zero, offset delta,
    /// timestamp delta)` bytes: the batch grows by exactly that.
    ///
    /// # Errors
    /// As for [`RecordBatchBuilder::append_parts`]; [`RecordsError::RecordLengthMismatch`] (and
    /// nothing written) if `body_at_zero` is not the parts' size.
    pub fn append_parts_sized(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[RecordHeader],
        body_at_zero: usize,
    ) -> Result<i32, RecordsError> {
        if self.count == i32::MAX {
            return Err(RecordsError::BatchFull);
        }
        let offset_delta = self.count;
        let base = if offset_delta == 0 {
            timestamp
        } else {
            self.base_timestamp
        };
        let ts_delta = timestamp.wrapping_sub(base);
        if !(2..=MAX_FIELD).contains(&body_at_zero) {
            return Err(RecordsError::RecordLengthMismatch {
                base_offset: -1,
                declared: i32::try_from(body_at_zero).unwrap_or(i32::MAX),
                actual: 0,
            });
        }
        let body = body_size_at(body_at_zero, offset_delta, ts_delta);
        check_len("record", body)?;
        let total = varint_size(body as i32) + body;
        if self.built.is_some() {
            self.reopen();
        }
        let dst = &mut self.open;
        let start = dst.len();
        check_len("record batch", start + total)?;
        put_record(dst, body, (ts_delta, offset_delta), (key, value, headers));
        let written = dst.len() - start;
        if written != total {
            dst.truncate(start);
            return Err(RecordsError::RecordLengthMismatch {
                base_offset: -1,
                declared: body as i32,
                actual: written,
            });
        }
        if offset_delta == 0 {
            self.base_timestamp = timestamp;
            self.max_timestamp = timestamp;
        } else {
            self.max_timestamp = self.max_timestamp.max(timestamp);
        }
        self.count += 1;
        // The next record goes right after this one: ask for its cache lines now.
        prefetch_tail(dst, total);
        Ok(offset_delta)
    }

    /// The batch with `options`' header fields (base offset, leader epoch, producer id, epoch
    /// and base sequence, attributes) around the records, compressed with
    /// `options.compression`: the bytes [`RecordBatchEncoder`](super::RecordBatchEncoder)
    /// writes for the same records and options. Empty when no record was appended.
    ///
    /// Uncompressed, the header is written into the reserved space and the buffer itself is
    /// returned (no copy); the builder keeps a reference, so it can build again (another
    /// header) or take more records (then copying the buffer if the returned bytes are still
    /// alive). Compressed, the records are compressed into a new buffer; the builder keeps the
    /// uncompressed section.
    ///
    /// # Errors
    /// [`RecordsError::InvalidOptions`] if `options` sets a delete horizon (deltas here count
    /// from the first record); [`RecordsError::Compression`] if the codec is not built in or
    /// fails; [`RecordsError::TooLarge`] if the compressed batch exceeds `i32::MAX` bytes.
    pub fn build(&mut self, options: &RecordBatchOptions) -> Result<Bytes, RecordsError> {
        check_options(options)?;
        if self.count == 0 {
            return Ok(Bytes::new());
        }
        let summary = Summary {
            count: self.count,
            base_timestamp: self.base_timestamp,
            max_timestamp: self.max_timestamp,
        };
        if options.compression != kafkit_compress::Compression::None {
            let mut out = BytesMut::with_capacity(self.size_in_bytes());
            put_batch(&mut out, options, self.records(), summary)?;
            return Ok(out.freeze());
        }
        // Appends kept the total within i32::MAX.
        let buf = self.open_mut();
        let total = buf.len();
        fill_header(buf, options, summary, total);
        seal_crc(buf);
        let bytes = std::mem::take(buf).freeze();
        self.built = Some(bytes.clone());
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::{RecordBatchBuilder, prefetch_tail, prefetch_write};
    use crate::records::{RecordBatchEncoder, RecordBatchOptions};

    #[test]
    fn prefetching_changes_no_byte_and_never_faults() {
        // Addresses that are mapped, unmapped, null, the very top, and ranges that wrap.
        for addr in [0, 1, 63, 64, 4096, usize::MAX - 100, usize::MAX] {
            for len in [0, 1, 64, 1 << 20, usize::MAX] {
                prefetch_write(addr, len);
            }
        }
        let mut buf = BytesMut::with_capacity(300);
        buf.extend_from_slice(&[7; 100]);
        let before = buf.clone();
        prefetch_tail(&buf, 1 << 20);
        prefetch_write(buf.as_ptr() as usize, buf.capacity());
        assert_eq!(buf, before);
        // A full buffer: nothing past its capacity is asked for, and nothing fails.
        let full = BytesMut::from(&[1u8; 64][..]);
        prefetch_tail(&full, 64);
        assert_eq!(&full[..], &[1u8; 64][..]);
    }

    #[test]
    fn appends_with_prefetching_build_what_the_encoder_writes() {
        let options = RecordBatchOptions::new();
        let values: Vec<Vec<u8>> = (0..500u32).map(|i| i.to_be_bytes().repeat(30)).collect();
        let mut b = RecordBatchBuilder::new();
        for (i, v) in (0i64..).zip(&values) {
            b.append_parts(1_000 + i, None, Some(v), &[]).unwrap();
        }
        let built = b.build(&options).unwrap();
        let mut encoded = BytesMut::new();
        let mut enc = RecordBatchEncoder::new(&mut encoded, options).unwrap();
        for (i, v) in (0i64..).zip(&values) {
            enc.append_parts(1_000 + i, None, Some(v), &[]).unwrap();
        }
        enc.finish().unwrap();
        assert_eq!(&built[..], &encoded[..]);
    }
}
