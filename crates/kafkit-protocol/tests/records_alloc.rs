//! Decoding hostile record batches preallocates at most a small multiple of the bytes it was
//! given: a record count or a header count is checked against the bytes left, but a decoded
//! record (or header) is much larger in memory than its smallest encoding, so preallocating the
//! count a batch claims turned a zstd bomb of under 1 KiB (8 MiB of zeros) into a 124 MB
//! allocation, about 1 GB with the default 64 MiB decompression bound (found while writing the
//! `records` fuzz target, issue 19; the fix bounds each preallocation by twice the bytes left).
//!
//! A counting global allocator records the largest single allocation made on the test's thread.

// The allocator only forwards to `System`; see the SAFETY comments.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::{BufMut, Bytes, BytesMut};
use kafkit_compress::Compression;
use kafkit_protocol::records::{RecordBatchDecoder, RecordsError};

struct Largest;

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: allocations during thread teardown are not recorded.
    let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
}

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds the
// `GlobalAlloc` contract; `note` neither allocates nor unwinds (a const-initialized thread-local
// `Cell` has no destructor and no lazy initialization).
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's guarantees for `layout` are passed on as they are.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
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
