//! GZIP (id 1): RFC 1952 through flate2's pure-Rust (miniz_oxide) backend.

use std::io::Write;

use bytes::{BufMut, BytesMut};
use flate2::bufread::MultiGzDecoder;
use flate2::write::GzEncoder;

use crate::bounded::{corrupt, read_bounded};
use crate::{Codec, CompressError, Compression};

/// Deflate's largest expansion ratio (about 1032:1, one 258-byte match per two bits or so).
const MAX_DEFLATE_RATIO: usize = 1032;

/// The `gzip` codec (Kafka id 1).
///
/// Compresses one GZIP member; decompresses one or more concatenated members, as Java's
/// `GZIPInputStream` and librdkafka do. Levels follow KIP-390's `compression.gzip.level`: 1-9,
/// or -1 for zlib's default (6), which is also used when no level is given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GzipCodec;

impl Codec for GzipCodec {
    fn compression(&self) -> Compression {
        Compression::Gzip
    }

    fn compress(
        &self,
        input: &[u8],
        level: Option<i32>,
        out: &mut BytesMut,
    ) -> Result<(), CompressError> {
        let level = match Compression::Gzip.validate_level(level)? {
            Some(l @ 1..=9) => flate2::Compression::new(l.unsigned_abs()),
            _ => flate2::Compression::default(),
        };
        let mut enc = GzEncoder::new(out.writer(), level);
        enc.write_all(input)
            .map_err(|e| corrupt(Compression::Gzip, e))?;
        enc.finish().map_err(|e| corrupt(Compression::Gzip, e))?;
        Ok(())
    }

    fn decompress(
        &self,
        input: &[u8],
        max_output: usize,
        out: &mut BytesMut,
    ) -> Result<(), CompressError> {
        // ISIZE, the last four bytes, is the size modulo 2^32 of the last member: only a hint,
        // and never more than deflate can expand this input (about 1032:1), so a lying trailer
        // cannot make a small payload reserve the whole output bound.
        let hint = input
            .last_chunk::<4>()
            .map_or(0, |b| u32::from_le_bytes(*b) as usize)
            .min(input.len().saturating_mul(MAX_DEFLATE_RATIO));
        read_bounded(
            MultiGzDecoder::new(input),
            max_output,
            hint,
            out,
            Compression::Gzip,
        )
    }
}
