//! Snappy (id 2): raw blocks through snap, in the xerial framing (snappy-java's stream format).
//!
//! # Which encoding is written, and why
//! Kafka's Java producer writes snappy-java's *xerial* framing: an 8-byte magic
//! (`0x82 "SNAPPY" 0x00`), a big-endian `int32` version and compatible version (both 1), then
//! blocks, each a big-endian `int32` length followed by one raw snappy block. librdkafka writes
//! one raw snappy block. Both clients read both: librdkafka recognises the xerial magic, and
//! snappy-java's `SnappyInputStream` falls back to raw snappy when the magic is missing.
//!
//! This codec **writes the xerial framing** with 32 KiB blocks, exactly what the Java producer
//! writes, because it is the format both readers treat as first-class: Java reads it natively
//! (its raw fallback reads the whole payload into one array first), librdkafka reads it natively,
//! and the per-block lengths let a reader bound its memory block by block. It **reads both**.

use bytes::{BufMut, BytesMut};

use crate::bounded::corrupt;
use crate::{Codec, CompressError, Compression};

/// The xerial stream magic: `0x82`, `"SNAPPY"`, `0x00`.
pub const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Length of the xerial header: magic, `int32` version, `int32` compatible version.
pub const XERIAL_HEADER_LEN: usize = 16;
/// Uncompressed bytes per xerial block written by this codec (snappy-java's default, 32 KiB).
pub const XERIAL_BLOCK_SIZE: usize = 32 * 1024;

/// The `snappy` codec (Kafka id 2). Snappy has no compression levels (Kafka defines none).
///
/// Writes the xerial framing (see the module docs for why); decompresses both xerial-framed and
/// raw snappy input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SnappyCodec;

impl Codec for SnappyCodec {
    fn compression(&self) -> Compression {
        Compression::Snappy
    }

    fn compress(
        &self,
        input: &[u8],
        level: Option<i32>,
        out: &mut BytesMut,
    ) -> Result<(), CompressError> {
        Compression::Snappy.validate_level(level)?;
        let mut enc = snap::raw::Encoder::new();
        out.reserve(XERIAL_HEADER_LEN + snap::raw::max_compress_len(input.len()));
        out.extend_from_slice(&XERIAL_MAGIC);
        out.put_i32(1); // version
        out.put_i32(1); // compatible version
        for block in input.chunks(XERIAL_BLOCK_SIZE) {
            let len_at = out.len();
            let data_at = len_at + 4;
            out.resize(data_at + snap::raw::max_compress_len(block.len()), 0);
            let n = enc
                .compress(block, &mut out[data_at..])
                .map_err(|e| corrupt(Compression::Snappy, e))?;
            out.truncate(data_at + n);
            // A 32 KiB block compresses to well under 2 GiB, so the length fits an int32.
            let n = u32::try_from(n).map_err(|e| corrupt(Compression::Snappy, e))?;
            out[len_at..data_at].copy_from_slice(&n.to_be_bytes());
        }
        Ok(())
    }

    fn decompress(
        &self,
        input: &[u8],
        max_output: usize,
        out: &mut BytesMut,
    ) -> Result<(), CompressError> {
        let mut dec = snap::raw::Decoder::new();
        let mut budget = max_output;
        let Some(mut rest) = input.strip_prefix(&XERIAL_MAGIC[..]) else {
            return decode_block(&mut dec, input, &mut budget, max_output, out);
        };
        rest = rest
            .get(XERIAL_HEADER_LEN - XERIAL_MAGIC.len()..)
            .ok_or_else(|| truncated("xerial header"))?;
        while !rest.is_empty() {
            let (len, tail) = rest
                .split_first_chunk::<4>()
                .ok_or_else(|| truncated("xerial block length"))?;
            let len = usize::try_from(u32::from_be_bytes(*len))
                .map_err(|e| corrupt(Compression::Snappy, e))?;
            if len > tail.len() {
                return Err(truncated("xerial block"));
            }
            let (block, tail) = tail.split_at(len);
            decode_block(&mut dec, block, &mut budget, max_output, out)?;
            rest = tail;
        }
        Ok(())
    }
}

/// Decodes one raw snappy block onto `out`, charging its declared size to `budget` first.
fn decode_block(
    dec: &mut snap::raw::Decoder,
    block: &[u8],
    budget: &mut usize,
    max_output: usize,
    out: &mut BytesMut,
) -> Result<(), CompressError> {
    let n = snap::raw::decompress_len(block).map_err(|e| corrupt(Compression::Snappy, e))?;
    if n > *budget {
        return Err(CompressError::OutputLimitExceeded {
            compression: Compression::Snappy,
            limit: max_output,
        });
    }
    *budget -= n;
    let at = out.len();
    out.resize(at + n, 0);
    let written = dec
        .decompress(block, &mut out[at..])
        .map_err(|e| corrupt(Compression::Snappy, e))?;
    if written != n {
        return Err(corrupt(
            Compression::Snappy,
            "block is shorter than its declared length",
        ));
    }
    Ok(())
}

fn truncated(what: &str) -> CompressError {
    CompressError::Corrupt {
        compression: Compression::Snappy,
        reason: format!("truncated {what}"),
    }
}
