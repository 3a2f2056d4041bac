//! LZ4 (id 3): the LZ4 frame format through lz4_flex, plus the legacy header checksum of
//! Kafka's magic 0 message sets.
//!
//! # The legacy header checksum (KIP-57)
//! A frame header ends with one checksum byte, `(XXH32(descriptor, seed 0) >> 8) & 0xff`, where
//! the descriptor is the FLG and BD bytes (plus the optional content size and dictionary id).
//! Kafka before 0.10 (magic 0) hashed the 4-byte frame magic too. KIP-57 fixed this for magic
//! 1+, and Java and librdkafka still write the wrong byte for magic 0 message sets. This codec
//! accepts both: when the byte matches only the legacy hash, the header is repaired before
//! decoding.
//!
//! # Crate choice
//! lz4_flex is pure Rust (built here with its safe-only encoder and decoder), reads and writes the
//! frame format, and brings no second copy of the C liblz4 into a binary that also links
//! librdkafka (which carries its own). Its one compressor is LZ4's fast mode: KIP-390's
//! `compression.lz4.level` (1-17, default 9) is validated but does not change the output.

use std::io::Read;

use bytes::{BufMut, BytesMut};
use lz4_flex::frame::FrameDecoder;

use crate::bounded::{corrupt, read_bounded};
use crate::{Codec, CompressError, Compression};

/// The LZ4 frame magic number, little-endian on the wire.
const FRAME_MAGIC: [u8; 4] = 0x184D_2204_u32.to_le_bytes();
/// FLG bit: an 8-byte content size follows BD.
const FLG_CONTENT_SIZE: u8 = 0x08;
/// FLG bit: each block is followed by a 4-byte checksum.
const FLG_BLOCK_CHECKSUM: u8 = 0x10;
/// FLG bit: the end mark is followed by a 4-byte content checksum.
const FLG_CONTENT_CHECKSUM: u8 = 0x04;
/// FLG bit: a 4-byte dictionary id follows.
const FLG_DICT_ID: u8 = 0x01;
/// Longest frame header: magic, FLG, BD, content size, dictionary id, checksum.
const MAX_HEADER: usize = 4 + 2 + 8 + 4 + 1;

/// The `lz4` codec (Kafka id 3).
///
/// Writes what the Java producer writes: one frame of independent 64 KiB blocks, without block or
/// content checksums, with the KIP-57 header checksum. Reads any single- or multi-frame input
/// lz4_flex supports (no dictionaries), including the legacy header checksum (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lz4Codec;

impl Codec for Lz4Codec {
    fn compression(&self) -> Compression {
        Compression::Lz4
    }

    fn compress(
        &self,
        input: &[u8],
        level: Option<i32>,
        out: &mut BytesMut,
    ) -> Result<(), CompressError> {
        Compression::Lz4.validate_level(level)?;
        write_frame(input, out)
    }

    fn decompress(
        &self,
        input: &[u8],
        max_output: usize,
        out: &mut BytesMut,
    ) -> Result<(), CompressError> {
        check_frames(input)?;
        let mut header = [0u8; MAX_HEADER];
        match repaired_header(input, &mut header) {
            Some(n) => read_bounded(
                FrameDecoder::new(header[..n].chain(&input[n..])),
                max_output,
                0,
                out,
                Compression::Lz4,
            ),
            None => read_bounded(
                FrameDecoder::new(input),
                max_output,
                0,
                out,
                Compression::Lz4,
            ),
        }
    }
}

/// Walks the frames of `input` by their block sizes, without decoding: every frame must end with
/// its end mark and the frames must fill `input` exactly. (lz4_flex alone takes input that stops
/// at a block boundary for a complete frame, which would turn a truncated batch into a short one.)
fn check_frames(input: &[u8]) -> Result<(), CompressError> {
    let truncated = |what: &str| CompressError::Corrupt {
        compression: Compression::Lz4,
        reason: format!("truncated LZ4 {what}"),
    };
    let u32_at = |pos: usize| {
        input
            .get(pos..pos + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    let mut pos = 0;
    loop {
        if input.get(pos..pos + 4) != Some(&FRAME_MAGIC[..]) {
            return Err(match input.len() - pos {
                0..4 => truncated("frame header"),
                _ => corrupt(Compression::Lz4, "not an LZ4 frame (bad magic number)"),
            });
        }
        let flg = *input
            .get(pos + 4)
            .ok_or_else(|| truncated("frame header"))?;
        let mut header = 7;
        if flg & FLG_CONTENT_SIZE != 0 {
            header += 8;
        }
        if flg & FLG_DICT_ID != 0 {
            header += 4;
        }
        pos += header;
        if pos > input.len() {
            return Err(truncated("frame header"));
        }
        loop {
            let size = u32_at(pos).ok_or_else(|| truncated("block size"))?;
            pos += 4;
            if size == 0 {
                if flg & FLG_CONTENT_CHECKSUM != 0 {
                    pos += 4;
                }
                break;
            }
            pos += (size & 0x7fff_ffff) as usize;
            if flg & FLG_BLOCK_CHECKSUM != 0 {
                pos += 4;
            }
            if pos > input.len() {
                return Err(truncated("block"));
            }
        }
        match pos.cmp(&input.len()) {
            std::cmp::Ordering::Equal => return Ok(()),
            std::cmp::Ordering::Greater => return Err(truncated("content checksum")),
            std::cmp::Ordering::Less => {}
        }
    }
}

/// FLG of the frames written: version 01, independent blocks, no checksums, no content size.
const WRITE_FLG: u8 = 0x60;
/// BD of the frames written: blocks of at most 64 KiB.
const WRITE_BD: u8 = 0x40;
/// The most input bytes in one block of the frames written.
const WRITE_BLOCK: usize = 64 << 10;
/// Block size bit: the block is stored uncompressed.
const BLOCK_UNCOMPRESSED: u32 = 0x8000_0000;

/// Appends one LZ4 frame of `input` to `out`, as the Java producer writes it: independent
/// 64 KiB blocks, no block or content checksum, the KIP-57 header checksum; a block that does
/// not shrink is stored as it is. Each block is compressed by lz4_flex's block compressor
/// straight into `out` (its frame encoder allocates and zeroes about 200 KiB of buffers and
/// tables per frame, more than a small batch itself).
///
/// # Errors
/// [`CompressError::Corrupt`] if the block compressor fails (it does not, given room for its
/// largest output, which is reserved).
fn write_frame(input: &[u8], out: &mut BytesMut) -> Result<(), CompressError> {
    let blocks = input.len().div_ceil(WRITE_BLOCK);
    out.reserve(7 + 4 + blocks * 4 + lz4_flex::block::get_maximum_output_size(input.len()));
    out.put_slice(&FRAME_MAGIC);
    out.put_u8(WRITE_FLG);
    out.put_u8(WRITE_BD);
    out.put_u8(header_checksum(&[WRITE_FLG, WRITE_BD]));
    for block in input.chunks(WRITE_BLOCK) {
        let at = out.len();
        let room = lz4_flex::block::get_maximum_output_size(block.len());
        out.resize(at + 4 + room, 0);
        let n = lz4_flex::block::compress_into(block, &mut out[at + 4..])
            .map_err(|e| corrupt(Compression::Lz4, e))?;
        let size = if n < block.len() {
            out.truncate(at + 4 + n);
            n as u32
        } else {
            out.truncate(at + 4);
            out.put_slice(block);
            block.len() as u32 | BLOCK_UNCOMPRESSED
        };
        out[at..at + 4].copy_from_slice(&size.to_le_bytes());
    }
    out.put_u32_le(0); // end mark
    Ok(())
}

/// `(XXH32(data, seed 0) >> 8) & 0xff`: the frame header checksum byte.
fn header_checksum(data: &[u8]) -> u8 {
    (twox_hash::XxHash32::oneshot(0, data) >> 8) as u8
}

/// When `input`'s first frame header carries the legacy (pre-KIP-57) checksum, writes the header
/// with the correct checksum into `buf` and returns its length; otherwise `None` (the decoder
/// then checks the header as it is).
fn repaired_header(input: &[u8], buf: &mut [u8; MAX_HEADER]) -> Option<usize> {
    if !input.starts_with(&FRAME_MAGIC) {
        return None;
    }
    let flg = *input.get(4)?;
    let mut checksum_at = 6;
    if flg & FLG_CONTENT_SIZE != 0 {
        checksum_at += 8;
    }
    if flg & FLG_DICT_ID != 0 {
        checksum_at += 4;
    }
    let found = *input.get(checksum_at)?;
    let proper = header_checksum(&input[4..checksum_at]);
    if found == proper || found != header_checksum(&input[..checksum_at]) {
        return None;
    }
    let len = checksum_at + 1;
    buf[..len].copy_from_slice(&input[..len]);
    buf[checksum_at] = proper;
    Some(len)
}

/// Rewrites the header checksum of the first frame in `frame` the way Kafka's magic 0 message
/// sets carried it (hashing the magic too); for building legacy test data (the crate's tests
/// module, built only with every codec).
#[cfg(all(test, feature = "gzip", feature = "snappy", feature = "zstd"))]
pub(crate) fn break_header_checksum(frame: &mut [u8]) {
    let flg = frame[4];
    let mut at = 6;
    if flg & FLG_CONTENT_SIZE != 0 {
        at += 8;
    }
    if flg & FLG_DICT_ID != 0 {
        at += 4;
    }
    frame[at] = header_checksum(&frame[..at]);
}
