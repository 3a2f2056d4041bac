//! Record batches (magic 2) and legacy message sets (magic 0 and 1) with every codec.
//!
//! Input: `mode: u8`, `codec: u8`, `flags: u8`, then a payload.
//! - mode % 3 == 0: the payload is a whole `records` field, decoded as is (`flags & 1`: verify
//!   CRCs; a corrupt CRC is rejected first, so most inputs turn it off);
//! - 1: the payload is the records section of one magic 2 batch: it is compressed with codec
//!   `codec % 5`, wrapped in a batch header with a correct CRC (`record count` from the first 4
//!   payload bytes, timestamp type / transactional / control bits from `flags`) and decoded;
//! - 2: the payload is the inner message set of a legacy wrapper (magic `flags & 1`), compressed
//!   with codec `1 + codec % 4` and wrapped in a legacy message (inner CRCs are not verified).
//!
//! Decoding runs with a 1 MiB decompression bound: every batch is checked to hold no more
//! records than its bytes can.
#![no_main]

use bytes::{BufMut, Bytes, BytesMut};
use kafkit_compress::Compression;
use kafkit_fuzz::take_u8;
use kafkit_protocol::records::{DecodeOptions, RecordBatchDecoder};
use libfuzzer_sys::fuzz_target;

const BOUND: usize = 1 << 20;

fn decode(data: Bytes, verify_crc: bool) {
    let options = DecodeOptions::new()
        .max_decompressed_bytes(BOUND)
        .verify_crc(verify_crc);
    let len = data.len();
    let mut decoder = RecordBatchDecoder::with_options(data, options);
    for batch in decoder.by_ref() {
        let Ok(batch) = batch else { break };
        // A record takes at least 7 bytes of the (decompressed, bounded) section.
        assert!(batch.records.len() <= BOUND.max(len) / 7 + 1);
        for r in &batch.records {
            let _ = r.control_type();
        }
    }
    assert!(decoder.partial_bytes() <= len);
}

fn compress(codec: Compression, plain: &[u8]) -> Option<BytesMut> {
    let mut out = BytesMut::new();
    if codec == Compression::None {
        out.extend_from_slice(plain);
        return Some(out);
    }
    codec.codec().ok()?.compress(plain, None, &mut out).ok()?;
    Some(out)
}

fn v2_batch(codec: u8, flags: u8, payload: &[u8]) -> Option<Bytes> {
    let compression = Compression::ALL[usize::from(codec) % 5];
    let (count, section) = if payload.len() >= 4 {
        let c = i32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
        (c, &payload[4..])
    } else {
        (0, payload)
    };
    let body = compress(compression, section)?;
    let attrs = i16::from(compression.id()) | (i16::from(flags & 0x70) >> 1);
    let mut after_crc = BytesMut::new();
    after_crc.put_i16(attrs);
    after_crc.put_i32(count.wrapping_sub(1)); // last offset delta
    after_crc.put_i64(1_700_000_000_000); // base timestamp
    after_crc.put_i64(1_700_000_000_100); // max timestamp
    after_crc.put_i64(-1); // producer id
    after_crc.put_i16(-1);
    after_crc.put_i32(-1);
    after_crc.put_i32(count);
    after_crc.extend_from_slice(&body);
    let mut batch = BytesMut::new();
    batch.put_i64(100); // base offset
    batch.put_i32(i32::try_from(4 + 1 + 4 + after_crc.len()).ok()?);
    batch.put_i32(0); // partition leader epoch
    batch.put_i8(2);
    batch.put_u32(crc32c::crc32c(&after_crc));
    batch.extend_from_slice(&after_crc);
    Some(batch.freeze())
}

fn legacy_wrapper(codec: u8, flags: u8, payload: &[u8]) -> Option<Bytes> {
    let compression = Compression::ALL[1 + usize::from(codec) % 4];
    let magic = (flags & 1) as i8;
    let value = compress(compression, payload)?;
    let mut after_crc = BytesMut::new();
    after_crc.put_i8(magic);
    after_crc.put_i8(compression.id() as i8 | ((flags & 0x08) as i8));
    if magic == 1 {
        after_crc.put_i64(1_700_000_000_000);
    }
    after_crc.put_i32(-1); // null key
    after_crc.put_i32(i32::try_from(value.len()).ok()?);
    after_crc.extend_from_slice(&value);
    let mut msg = BytesMut::new();
    msg.put_i64(42);
    msg.put_i32(i32::try_from(4 + after_crc.len()).ok()?);
    msg.put_u32(crc32fast::hash(&after_crc));
    msg.extend_from_slice(&after_crc);
    Some(msg.freeze())
}

fuzz_target!(|data: &[u8]| {
    let mut d = data;
    let mode = take_u8(&mut d) % 3;
    let codec = take_u8(&mut d);
    let flags = take_u8(&mut d);
    match mode {
        0 => decode(Bytes::copy_from_slice(d), flags & 1 != 0),
        1 => {
            if let Some(batch) = v2_batch(codec, flags, d) {
                decode(batch, true);
            }
        }
        _ => {
            if let Some(msg) = legacy_wrapper(codec, flags, d) {
                decode(msg, false);
            }
        }
    }
});
