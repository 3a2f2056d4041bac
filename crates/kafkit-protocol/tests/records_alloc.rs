//! Decoding hostile record batches preallocates at most a small multiple of the bytes it was
//! given: a record count or a header count is checked against the bytes left, but a decoded
//! record (or header) is much larger in memory than its smallest encoding, so preallocating the
//! count a batch claims turned a zstd bomb of under 1 KiB (8 MiB of zeros) into a 124 MB
//! allocation, about 1 GB with the default 64 MiB decompression bound (found while writing the
//! `records` fuzz target, issue 19; the fix bounds each preallocation by twice the bytes left).
//!
//!
//! Valid but hostile data amplified too (not a preallocation): a section of empty records or
//! headers (7 or 2 bytes each) decodes to about 15 or 32 times its size in `Record` /
//! `RecordHeader` values, and every batch of a field stays alive while its records do, so a
//! field of small compressed batches, each under the decompression bound, claimed about 1 to 2 GB
//! per batch at the default bound. Each decoder now has a budget of decoded memory
//! (`DecodeOptions::max_decoded_bytes`, 4 x the decompression bound by default).
//!
//! A counting global allocator records the largest single allocation made on the test's
//! thread, and the peak of the bytes allocated on it and not yet freed.

// The allocator only forwards to `System`; see the SAFETY comments.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::{BufMut, Bytes, BytesMut};
use kafkit_compress::Compression;
use kafkit_protocol::records::{
    DecodeOptions, RecordBatchBuilder, RecordBatchDecoder, RecordBatchOptions, RecordHeader,
    RecordsError,
};

struct Largest;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: allocations during thread teardown are not recorded.
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    let _ = COUNT.try_with(|c| c.set(c.get() + 1));
}

/// Allocations and reallocations made on this thread so far.
fn allocations() -> usize {
    COUNT.with(Cell::get)
}

/// Counts `delta` bytes allocated (negative: freed) on this thread.
fn live(delta: isize) {
    let _ = LIVE.try_with(|l| {
        let now = l.get() + delta;
        l.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds the
// `GlobalAlloc` contract; `note` neither allocates nor unwinds (a const-initialized thread-local
// `Cell` has no destructor and no lazy initialization).
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        live(layout.size() as isize);
        // SAFETY: the caller's guarantees for `layout` are passed on as they are.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        live(-(layout.size() as isize));
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        live(new_size as isize - layout.size() as isize);
        // SAFETY: as `dealloc`, and the caller's guarantees for `new_size` are passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Largest = Largest;

/// A magic 2 batch with a correct CRC whose records section is `section` compressed with
/// `compression`, claiming `count` records.
fn batch(compression: Compression, count: i32, section: &[u8]) -> Bytes {
    let mut body = BytesMut::new();
    compression
        .codec()
        .unwrap()
        .compress(section, None, &mut body)
        .unwrap();
    let mut after_crc = BytesMut::new();
    after_crc.put_i16(i16::from(compression.id()));
    after_crc.put_i32(count - 1);
    after_crc.put_i64(0);
    after_crc.put_i64(0);
    after_crc.put_i64(-1);
    after_crc.put_i16(-1);
    after_crc.put_i32(-1);
    after_crc.put_i32(count);
    after_crc.extend_from_slice(&body);
    let mut b = BytesMut::new();
    b.put_i64(0);
    b.put_i32((9 + after_crc.len()) as i32);
    b.put_i32(0);
    b.put_i8(2);
    b.put_u32(crc32c::crc32c(&after_crc));
    b.extend_from_slice(&after_crc);
    b.freeze()
}

/// Decodes `data` and returns the first batch's result and the largest allocation made while
/// decoding.
fn decode_measured(data: Bytes) -> (Result<(), RecordsError>, usize) {
    LARGEST.with(|l| l.set(0));
    let result = RecordBatchDecoder::new(data)
        .next()
        .expect("one batch")
        .map(drop);
    (result, LARGEST.with(Cell::get))
}

const SECTION: usize = 8 << 20;

fn varint(b: &mut BytesMut, v: i64) {
    kafkit_protocol::records::put_varlong(b, v);
}

#[test]
fn a_record_count_the_section_could_hold_preallocates_at_most_twice_the_section() {
    // 8 MiB of zeros, compressed to a few hundred bytes, claiming one record per 7 bytes (the
    // smallest record): every record is malformed (a zero length), so decoding fails at once.
    let data = batch(Compression::Zstd, (SECTION / 7) as i32, &vec![0u8; SECTION]);
    assert!(data.len() < 4096, "the bomb is {} bytes", data.len());
    let (result, largest) = decode_measured(data);
    assert!(result.is_err());
    // The decompressed section itself (8 MiB, bounded by `max_decompressed_bytes`) is the
    // largest allocation a decoder needs.
    assert!(
        largest <= 2 * SECTION + 64,
        "largest allocation {largest} bytes for a {SECTION}-byte section"
    );
}

#[test]
fn a_header_count_the_record_could_hold_preallocates_at_most_twice_the_record() {
    // One record: length (the rest of the section), attributes, timestamp delta, offset delta,
    // null key, null value, a header count of one header per 2 bytes left, then bytes 0x01: the
    // first header's key length is -1, so decoding fails there, after the preallocation.
    let mut section = BytesMut::new();
    let mut rec = BytesMut::new();
    rec.put_i8(0);
    varint(&mut rec, 0);
    varint(&mut rec, 0);
    varint(&mut rec, -1);
    varint(&mut rec, -1);
    let headers = (SECTION / 2 - 16) as i64;
    varint(&mut rec, headers);
    rec.resize(SECTION, 1);
    varint(&mut section, rec.len() as i64);
    section.extend_from_slice(&rec);
    let data = batch(Compression::Zstd, 1, &section);
    let (result, largest) = decode_measured(data);
    assert!(result.is_err());
    assert!(
        largest <= 2 * section.len() + 64,
        "largest allocation {largest} bytes for a {}-byte section",
        section.len()
    );
}

#[test]
fn a_real_batch_still_decodes_every_record() {
    use kafkit_protocol::records::{Record, RecordBatchEncoder, RecordBatchOptions};
    let mut buf = BytesMut::new();
    let mut enc = RecordBatchEncoder::new(
        &mut buf,
        RecordBatchOptions::new().compression(Compression::Zstd),
    )
    .unwrap();
    for i in 0..10_000u32 {
        let r =
            Record::new(None, Some(Bytes::from(i.to_be_bytes().to_vec()))).with_header("h", None);
        enc.append(&r).unwrap();
    }
    enc.finish().unwrap();
    let batches: Vec<_> = RecordBatchDecoder::new(buf.freeze())
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(batches[0].records.len(), 10_000);
    assert_eq!(batches[0].records[9_999].headers.len(), 1);
    assert_eq!(
        batches[0].records[9_999].value.as_deref(),
        Some(&9_999u32.to_be_bytes()[..])
    );
}

/// `n` valid empty records (7 bytes each: length 6, attributes, timestamp delta, offset delta,
/// null key, null value, no headers).
fn empty_records(n: usize) -> Vec<u8> {
    [0x0c, 0, 0, 0, 0x01, 0x01, 0].repeat(n)
}

/// Decodes every batch of `data` with `options`, keeping what was decoded alive (as the Reader
/// does with a partition's answer); returns the first error and the peak of live bytes.
fn decode_kept(data: Bytes, options: DecodeOptions) -> (Option<RecordsError>, usize, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let mut kept = Vec::new();
    let mut error = None;
    for b in RecordBatchDecoder::with_options(data, options) {
        match b {
            Ok(b) => kept.push(b),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let peak = usize::try_from(PEAK.with(Cell::get) - start).unwrap_or(0);
    (error, kept.len(), peak)
}

#[test]
fn a_section_of_empty_records_stops_at_the_decoded_budget() {
    // 8 MiB of valid empty records compress to a few KiB and decoded to 1.2 M `Record`s
    // (about 125 MB); the budget is 4 x the 8 MiB decompression bound.
    let n = SECTION / 7;
    let data = batch(Compression::Zstd, n as i32, &empty_records(n));
    assert!(data.len() < 64 << 10, "the batch is {} bytes", data.len());
    let options = DecodeOptions::new().max_decompressed_bytes(SECTION + 8);
    let budget = options.decoded_budget();
    assert_eq!(budget, 4 * (SECTION + 8));
    let (error, batches, peak) = decode_kept(data, options);
    assert!(
        matches!(error, Some(RecordsError::DecodedTooLarge { limit, .. }) if limit == budget),
        "{error:?}"
    );
    assert_eq!(batches, 0);
    // The compressed input, the budget, and a vector's doubling on top.
    assert!(
        peak <= 3 * budget,
        "peak {peak} bytes for a budget of {budget}"
    );
}

#[test]
fn a_field_of_many_small_batches_stops_at_the_decoded_budget() {
    // 64 batches, each 256 KiB of empty records (under the 1 MiB decompression bound, about
    // 4 MB decoded each): about 250 MB decoded in all without the budget.
    let n = (256 << 10) / 7;
    let one = batch(Compression::Zstd, n as i32, &empty_records(n));
    let mut field = BytesMut::new();
    for _ in 0..64 {
        field.extend_from_slice(&one);
    }
    let options = DecodeOptions::new().max_decompressed_bytes(1 << 20);
    let budget = options.decoded_budget();
    let (error, batches, peak) = decode_kept(field.freeze(), options);
    assert!(
        matches!(error, Some(RecordsError::DecodedTooLarge { .. })),
        "{error:?} after {batches} batches"
    );
    assert!(batches < 64, "{batches} batches decoded");
    assert!(
        peak <= 3 * budget,
        "peak {peak} bytes for a budget of {budget}"
    );
    // A budget that fits them all decodes them all.
    let mut field = BytesMut::new();
    for _ in 0..64 {
        field.extend_from_slice(&one);
    }
    let roomy = DecodeOptions::new()
        .max_decompressed_bytes(1 << 20)
        .max_decoded_bytes(1 << 30);
    let (error, batches, _) = decode_kept(field.freeze(), roomy);
    assert!(error.is_none(), "{error:?}");
    assert_eq!(batches, 64);
}

/// The producer's path: a record appended to a `RecordBatchBuilder` whose buffer has room
/// allocates nothing (no per-record allocation); one without room grows by doubling (a few
/// reallocations per batch, not one per record); an uncompressed build allocates at most the
/// `Bytes`' shared header, and copies nothing.
#[test]
fn appending_records_allocates_nothing_per_record() {
    let value = [7u8; 100];
    let headers = [RecordHeader::new("trace", Some(Bytes::from_static(b"id")))];
    let mut reserved = RecordBatchBuilder::with_capacity(256 * 1024);
    let before = allocations();
    for i in 0..1_000 {
        reserved
            .append_parts(1_700_000_000_000 - i, Some(b"key"), Some(&value), &headers)
            .unwrap();
    }
    assert_eq!(allocations() - before, 0, "appends into a reserved buffer");
    let before = allocations();
    let data = reserved.build(&RecordBatchOptions::new()).unwrap();
    assert!(allocations() - before <= 1, "an uncompressed build");
    assert_eq!(data.len(), reserved.size_in_bytes());

    let mut growing = RecordBatchBuilder::new();
    let before = allocations();
    for i in 0..1_000 {
        growing
            .append_parts(1_700_000_000_000 + i, None, Some(&value), &[])
            .unwrap();
    }
    let grown = allocations() - before;
    assert!(grown <= 16, "{grown} reallocations for 1,000 records");
}
