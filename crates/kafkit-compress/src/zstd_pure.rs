//! Zstandard (id 4, KIP-110) in pure Rust through ruzstd: for builds without a C compiler.
//!
//! Reading is complete: ruzstd decodes every frame libzstd (and so the Java client's zstd-jni and
//! librdkafka) writes, at any level, with or without a content size, and skips skippable frames.
//! Writing is limited by ruzstd: its encoder implements one level, "Fastest" (about zstd level 1),
//! so every KIP-390 level writes that. The frames are valid zstd; only the ratio differs.

use std::io::{self, Read};

use bytes::{Bytes, BytesMut};
use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};
use ruzstd::encoding::CompressionLevel;

use crate::bounded::{corrupt, read_bounded};
use crate::{Codec, CompressError, Compression};

/// The `zstd` codec in pure Rust (Kafka id 4), through ruzstd; cargo feature `zstd-pure`.
///
/// [`Compression::Zstd`] resolves to this codec only when the `zstd` feature (libzstd) is off;
/// with both on, libzstd's `ZstdCodec` wins (it is faster and honours levels).
///
/// Writes one frame without a content size, with a content checksum, at ruzstd's only level
/// whatever the level asked for (levels are still checked against KIP-390's range, -131072 to 22,
/// so a configuration means the same in every build). Reads one or more concatenated frames,
/// checking each checksum present. Working memory while decoding is the frame's window, at most
/// 128 MiB (ruzstd's default limit, the same as libzstd's), besides the bounded output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZstdPureCodec;

impl Codec for ZstdPureCodec {
    fn compression(&self) -> Compression {
        Compression::Zstd
    }

    fn compress(
        &self,
        input: &[u8],
        level: Option<i32>,
        out: &mut BytesMut,
    ) -> Result<(), CompressError> {
        Compression::Zstd.validate_level(level)?;
        let mut buf = Vec::from(std::mem::take(out));
        // ruzstd 0.9 panics (`unimplemented!`) on its Default, Better and Best levels.
        ruzstd::encoding::compress(input, &mut buf, CompressionLevel::Fastest);
        *out = BytesMut::from(Bytes::from(buf));
        Ok(())
    }

    fn decompress(
        &self,
        input: &[u8],
        max_output: usize,
        out: &mut BytesMut,
    ) -> Result<(), CompressError> {
        let mut frames = Frames::new(input);
        frames
            .next_frame(true)
            .map_err(|e| corrupt(Compression::Zstd, e))?;
        let hint = frames.declared_size().min(max_output);
        read_bounded(frames, max_output, hint, out, Compression::Zstd)
    }
}

/// The decoded bytes of every frame in `input`, one after the other, as a [`Read`].
struct Frames<'a> {
    input: &'a [u8],
    decoder: FrameDecoder,
    /// Whether `decoder` holds a frame (initialised and not yet drained and checked).
    in_frame: bool,
}

impl<'a> Frames<'a> {
    fn new(input: &'a [u8]) -> Self {
        Frames {
            input,
            decoder: FrameDecoder::new(),
            in_frame: false,
        }
    }

    /// The first frame's declared content size in bytes, 0 when it declares none.
    fn declared_size(&self) -> usize {
        if self.in_frame {
            usize::try_from(self.decoder.content_size()).unwrap_or(0)
        } else {
            0
        }
    }

    /// Reads the next frame's header, skipping skippable frames (as libzstd does); leaves
    /// `in_frame` false when the input is used up. Input without a `first` frame is an error.
    fn next_frame(&mut self, first: bool) -> Result<(), FrameDecoderError> {
        loop {
            if self.input.is_empty() {
                if first {
                    return Err(FrameDecoderError::ReadFrameHeaderError(
                        ReadFrameHeaderError::MagicNumberReadError(io::Error::from(
                            io::ErrorKind::UnexpectedEof,
                        )),
                    ));
                }
                self.in_frame = false;
                return Ok(());
            }
            match self.decoder.reset(&mut self.input) {
                Ok(()) => {
                    self.in_frame = true;
                    return Ok(());
                }
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                    length,
                    ..
                })) => {
                    self.input = usize::try_from(length)
                        .ok()
                        .and_then(|n| self.input.get(n..))
                        .ok_or(FrameDecoderError::FailedToSkipFrame)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Checks the finished frame's checksum, when it carries one.
    fn check_checksum(&self) -> io::Result<()> {
        match (
            self.decoder.get_checksum_from_data(),
            self.decoder.get_calculated_checksum(),
        ) {
            (Some(want), Some(got)) if want != got => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("frame checksum {want:#010x} does not match the data's {got:#010x}"),
            )),
            _ => Ok(()),
        }
    }
}

impl Read for Frames<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.in_frame {
            if self.decoder.can_collect() == 0 && !self.decoder.is_finished() {
                self.decoder
                    .decode_blocks(&mut self.input, BlockDecodingStrategy::UptoBlocks(1))
                    .map_err(io::Error::other)?;
                continue;
            }
            let n = self.decoder.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            // Finished and drained: check it, then on to the next frame.
            self.check_checksum()?;
            self.in_frame = false;
            self.next_frame(false).map_err(io::Error::other)?;
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pure_compress(data: &[u8], level: Option<i32>) -> Vec<u8> {
        let mut z = BytesMut::new();
        ZstdPureCodec.compress(data, level, &mut z).unwrap();
        z.to_vec()
    }

    fn pure_decompress(z: &[u8], max: usize) -> Result<Vec<u8>, CompressError> {
        let mut out = BytesMut::from(&b"keep"[..]);
        ZstdPureCodec.decompress(z, max, &mut out)?;
        assert_eq!(&out[..4], b"keep", "decompress must append");
        Ok(out[4..].to_vec())
    }

    /// JSON-like text: compressible, like real record values.
    fn sample(len: usize) -> Vec<u8> {
        let mut s = Vec::with_capacity(len + 64);
        let mut i = 0u64;
        while s.len() < len {
            s.extend_from_slice(
                format!(r#"{{"id":{i},"user":"u{}"}},"#, i * 7919 % 1000).as_bytes(),
            );
            i += 1;
        }
        s.truncate(len);
        s
    }

    #[test]
    fn the_registry_picks_libzstd_when_both_are_built() {
        let codec = Compression::Zstd.codec().unwrap();
        let name = format!("{codec:?}");
        if cfg!(feature = "zstd") {
            assert_eq!(name, "ZstdCodec");
        } else {
            assert_eq!(name, "ZstdPureCodec");
        }
    }

    #[test]
    fn compresses_appends_and_checks_levels() {
        let data = sample(300_000);
        let mut z = BytesMut::from(&b"head"[..]);
        ZstdPureCodec.compress(&data, Some(19), &mut z).unwrap();
        assert_eq!(&z[..4], b"head");
        assert!(z.len() < data.len() / 3, "{} of {}", z.len(), data.len());
        assert_eq!(pure_decompress(&z[4..], data.len()).unwrap(), data);
        for bad in [23, -131_073] {
            assert_eq!(
                ZstdPureCodec.compress(&data, Some(bad), &mut BytesMut::new()),
                Err(CompressError::InvalidLevel {
                    compression: Compression::Zstd,
                    level: bad
                })
            );
        }
    }

    #[test]
    fn reads_concatenated_and_skippable_frames() {
        let mut z = pure_compress(b"hello ", None);
        // A skippable frame (magic 0x184D2A50..=5F, 4-byte length, payload) between two frames.
        z.extend_from_slice(&0x184D_2A53u32.to_le_bytes());
        z.extend_from_slice(&3u32.to_le_bytes());
        z.extend_from_slice(b"xyz");
        z.extend_from_slice(&pure_compress(b"kafka", Some(3)));
        assert_eq!(pure_decompress(&z, 100).unwrap(), b"hello kafka");
        assert_eq!(pure_decompress(&pure_compress(b"", None), 0).unwrap(), b"");
    }

    #[test]
    fn corrupt_truncated_and_empty_inputs_are_typed_errors() {
        let data = sample(10_000);
        let z = pure_compress(&data, None);
        for bad in [&z[..z.len() / 2], &z[..3], b"", b"not zstd at all"] {
            assert!(
                matches!(
                    pure_decompress(bad, data.len()),
                    Err(CompressError::Corrupt {
                        compression: Compression::Zstd,
                        ..
                    })
                ),
                "{} bytes",
                bad.len()
            );
        }
        // A flipped content byte fails the frame checksum (or the block decoding).
        let mut flipped = z.clone();
        let at = flipped.len() - 5;
        flipped[at] ^= 0x55;
        assert!(pure_decompress(&flipped, data.len()).is_err());
    }

    #[test]
    fn a_decompression_bomb_stops_at_the_limit() {
        let zeros = vec![0u8; 64 << 20];
        let z = pure_compress(&zeros, None);
        assert!(z.len() < 64 << 10, "{} bytes", z.len());
        let mut out = BytesMut::new();
        assert_eq!(
            ZstdPureCodec.decompress(&z, 1 << 20, &mut out),
            Err(CompressError::OutputLimitExceeded {
                compression: Compression::Zstd,
                limit: 1 << 20
            })
        );
        assert!(out.capacity() <= (1 << 20) + 1, "{}", out.capacity());
        // Exactly the size passes.
        assert_eq!(pure_decompress(&z, zeros.len()).unwrap().len(), zeros.len());
    }

    /// Both directions against libzstd, when this test build has it.
    #[cfg(feature = "zstd")]
    #[test]
    fn pure_and_libzstd_read_each_other() {
        use crate::ZstdCodec;
        for len in [0, 1, 100, 70_000, 1_000_000] {
            let data = sample(len);
            for level in [
                None,
                Some(-5),
                Some(1),
                Some(3),
                Some(9),
                Some(19),
                Some(22),
            ] {
                // libzstd's one-shot frame (with content size) read by ruzstd.
                let mut z = BytesMut::new();
                ZstdCodec.compress(&data, level, &mut z).unwrap();
                assert_eq!(pure_decompress(&z, len).unwrap(), data, "{len} {level:?}");
                // ruzstd's frame read by libzstd.
                let z = pure_compress(&data, level);
                let mut plain = BytesMut::new();
                ZstdCodec.decompress(&z, len, &mut plain).unwrap();
                assert_eq!(&plain[..], &data[..], "{len} {level:?}");
            }
            // A streamed frame without a content size, as the Java producer writes it.
            let mut enc = ::zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
            std::io::Write::write_all(&mut enc, &data).unwrap();
            let z = enc.finish().unwrap();
            assert_eq!(pure_decompress(&z, len).unwrap(), data, "streamed {len}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn decompress_inverts_compress(
            data in proptest::collection::vec(any::<u8>(), 0..20_000),
            repeat in 1usize..4,
            level in proptest::option::of(-131_072i32..=22),
        ) {
            let data = data.repeat(repeat);
            let z = pure_compress(&data, level);
            prop_assert_eq!(pure_decompress(&z, data.len()).unwrap(), data.clone());
            if !data.is_empty() {
                let short = pure_decompress(&z, data.len() - 1);
                let is_limit = matches!(short, Err(CompressError::OutputLimitExceeded { .. }));
                prop_assert!(is_limit, "{:?}", short);
            }
        }

        #[test]
        fn garbage_never_panics_or_exceeds_the_limit(
            data in proptest::collection::vec(any::<u8>(), 0..2_000),
            max in 0usize..10_000,
        ) {
            // A zstd magic number in front reaches the frame header and block decoders.
            let mut framed = 0xFD2F_B528u32.to_le_bytes().to_vec();
            framed.extend_from_slice(&data);
            for input in [&data, &framed] {
                let mut out = BytesMut::new();
                let r = ZstdPureCodec.decompress(input, max, &mut out);
                // Past the limit one byte more is how the overflow was seen.
                let bound = if r.is_ok() { max } else { max + 1 };
                prop_assert!(out.len() <= bound);
                prop_assert!(out.capacity() <= (max + 1).max(input.len()) + 64 * 1024);
            }
        }
    }
}
