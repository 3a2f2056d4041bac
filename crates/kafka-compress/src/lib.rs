//! Compression codecs for Kafka record batches, behind one [`Codec`] trait and a registry.
//!
//! A record batch names its codec in the low three bits of its `attributes` field
//! (protocol guide, "Record Batch"; KIP-98 for magic 2, KIP-110 for zstd). This crate maps
//! those ids and the Java client's `compression.type` names to codec implementations.
//!
//! ```
//! use bytes::BytesMut;
//! use kafka_compress::{codec_by_name, Compression};
//!
//! # fn main() -> Result<(), kafka_compress::CompressError> {
//! let codec = codec_by_name("none")?;
//! assert_eq!(codec.compression(), Compression::None);
//!
//! let mut compressed = BytesMut::new();
//! codec.compress(b"hello kafka", None, &mut compressed)?;
//!
//! // Decompression is bounded: a `max_output` of 1 MiB refuses anything larger.
//! let mut plain = BytesMut::new();
//! codec.decompress(&compressed, 1 << 20, &mut plain)?;
//! assert_eq!(&plain[..], b"hello kafka");
//!
//! // Codecs that are not built in are a typed error, not a panic.
//! assert!(matches!(
//!     Compression::Zstd.codec(),
//!     Err(kafka_compress::CompressError::UnsupportedCodec { .. })
//! ));
//! # Ok(())
//! # }
//! ```
//!
//! # Adding a codec
//!
//! Only [`Compression::None`] is implemented today. A codec is added by implementing
//! [`Codec`] in its own module behind a cargo feature named after it (`gzip`, `snappy`, `lz4`,
//! `zstd`) and returning it from the matching arm of [`Compression::codec`]; without the
//! feature that arm keeps returning [`CompressError::UnsupportedCodec`]. Callers never change:
//! they look codecs up through [`codec_by_id`], [`codec_by_name`] or [`Compression::codec`].

use std::fmt;
use std::str::FromStr;

use bytes::BytesMut;

/// A record batch compression type: the value of `attributes & 0x07` in a record batch (magic 2)
/// or a legacy message (magic 0 and 1).
///
/// Ids come from the protocol guide ("Record Batch") and the Java client's
/// `CompressionType`; names are the values of the producer's `compression.type` setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Compression {
    /// No compression (id 0, name `"none"`).
    None,
    /// GZIP, RFC 1952 (id 1, name `"gzip"`).
    Gzip,
    /// Snappy in the xerial framing (id 2, name `"snappy"`).
    Snappy,
    /// LZ4 frame format (id 3, name `"lz4"`; KIP-57 fixed the frame checksum for magic 1+).
    Lz4,
    /// Zstandard (id 4, name `"zstd"`; KIP-110, needs Produce v7+ / Fetch v10+).
    Zstd,
}

impl Compression {
    /// Every compression type Kafka defines, in id order.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// Mask of the `attributes` bits that hold the compression id (bits 0-2).
    pub const ATTRIBUTE_MASK: i16 = 0x07;

    /// The Kafka id of this compression type (0-4), as written in batch attributes.
    pub const fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// The lower-case name used by the `compression.type` setting (`"none"`, `"gzip"`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// The compression type with Kafka id `id`.
    ///
    /// # Errors
    /// [`CompressError::UnknownCodecId`] if `id` is not 0-4.
    pub const fn from_id(id: u8) -> Result<Self, CompressError> {
        match id {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            _ => Err(CompressError::UnknownCodecId(id)),
        }
    }

    /// The compression type named in bits 0-2 of a batch or legacy message `attributes` field.
    ///
    /// # Errors
    /// [`CompressError::UnknownCodecId`] if those bits hold 5, 6 or 7.
    pub const fn from_attributes(attributes: i16) -> Result<Self, CompressError> {
        // The mask keeps the value in 0..=7, so the cast cannot truncate.
        Self::from_id((attributes & Self::ATTRIBUTE_MASK) as u8)
    }

    /// The compression type with `name`, compared ASCII case-insensitively.
    ///
    /// # Errors
    /// [`CompressError::UnknownCodecName`] if the name is not one of Kafka's five.
    pub fn from_name(name: &str) -> Result<Self, CompressError> {
        Self::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| CompressError::UnknownCodecName(name.to_owned()))
    }

    /// The codec implementing this compression type, if it is built into this crate.
    ///
    /// # Errors
    /// [`CompressError::UnsupportedCodec`] if the codec is not built in (today: all but `none`).
    pub fn codec(self) -> Result<&'static dyn Codec, CompressError> {
        match self {
            Compression::None => Ok(&NoneCodec),
            // Each of these becomes `#[cfg(feature = "<name>")] Compression::X => Ok(&XCodec),`
            // when its codec lands.
            Compression::Gzip | Compression::Snappy | Compression::Lz4 | Compression::Zstd => {
                Err(CompressError::UnsupportedCodec { compression: self })
            }
        }
    }

    /// Whether [`Compression::codec`] succeeds for this compression type in this build.
    pub fn is_supported(self) -> bool {
        self.codec().is_ok()
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Compression {
    type Err = CompressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_name(s)
    }
}

impl TryFrom<u8> for Compression {
    type Error = CompressError;

    fn try_from(id: u8) -> Result<Self, Self::Error> {
        Self::from_id(id)
    }
}

/// The codec for Kafka compression id `id` (the value of `attributes & 0x07`).
///
/// # Errors
/// [`CompressError::UnknownCodecId`] for ids other than 0-4;
/// [`CompressError::UnsupportedCodec`] for a known codec that is not built in.
pub fn codec_by_id(id: u8) -> Result<&'static dyn Codec, CompressError> {
    Compression::from_id(id)?.codec()
}

/// The codec named `name` (`"none"`, `"gzip"`, `"snappy"`, `"lz4"`, `"zstd"`; ASCII
/// case-insensitive), as in the producer's `compression.type` setting.
///
/// # Errors
/// [`CompressError::UnknownCodecName`] for other names;
/// [`CompressError::UnsupportedCodec`] for a known codec that is not built in.
pub fn codec_by_name(name: &str) -> Result<&'static dyn Codec, CompressError> {
    Compression::from_name(name)?.codec()
}

/// One compression codec: turns a record batch's records section into its compressed form and back.
///
/// Implementations append to the output buffer and never clear it, so a caller can compress
/// straight into a request buffer after bytes it has already written.
pub trait Codec: Send + Sync + fmt::Debug {
    /// The compression type this codec implements.
    fn compression(&self) -> Compression;

    /// The Kafka id of this codec (0-4), as written in batch attributes.
    fn id(&self) -> u8 {
        self.compression().id()
    }

    /// The `compression.type` name of this codec (`"none"`, `"gzip"`, ...).
    fn name(&self) -> &'static str {
        self.compression().name()
    }

    /// The compression levels this codec accepts, or `None` if it takes no level
    /// (KIP-390 added `compression.gzip.level`, `compression.lz4.level`, `compression.zstd.level`).
    fn level_range(&self) -> Option<std::ops::RangeInclusive<i32>>;

    /// Appends the compressed form of `input` to `out`.
    ///
    /// `level` of `None` means the codec's default level.
    ///
    /// # Errors
    /// [`CompressError::InvalidLevel`] if `level` is outside [`Codec::level_range`] (or is
    /// `Some` for a codec without levels); [`CompressError::Corrupt`] if the codec's library fails.
    fn compress(
        &self,
        input: &[u8],
        level: Option<i32>,
        out: &mut BytesMut,
    ) -> Result<(), CompressError>;

    /// Appends the decompressed form of `input` to `out`, writing at most `max_output` bytes.
    ///
    /// `max_output` bounds the memory a hostile or corrupt input can make the caller use.
    ///
    /// # Errors
    /// [`CompressError::OutputLimitExceeded`] if the decompressed data is larger than `max_output`
    /// bytes (what was appended to `out` by this call is then unspecified);
    /// [`CompressError::Corrupt`] if `input` is not valid data for this codec.
    fn decompress(
        &self,
        input: &[u8],
        max_output: usize,
        out: &mut BytesMut,
    ) -> Result<(), CompressError>;
}

/// The `none` codec (id 0): copies bytes unchanged. Takes no compression level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NoneCodec;

impl Codec for NoneCodec {
    fn compression(&self) -> Compression {
        Compression::None
    }

    fn level_range(&self) -> Option<std::ops::RangeInclusive<i32>> {
        None
    }

    fn compress(
        &self,
        input: &[u8],
        level: Option<i32>,
        out: &mut BytesMut,
    ) -> Result<(), CompressError> {
        if let Some(level) = level {
            return Err(CompressError::InvalidLevel {
                compression: Compression::None,
                level,
            });
        }
        out.extend_from_slice(input);
        Ok(())
    }

    fn decompress(
        &self,
        input: &[u8],
        max_output: usize,
        out: &mut BytesMut,
    ) -> Result<(), CompressError> {
        if input.len() > max_output {
            return Err(CompressError::OutputLimitExceeded {
                compression: Compression::None,
                limit: max_output,
            });
        }
        out.extend_from_slice(input);
        Ok(())
    }
}

/// Errors from codec look-up, compression and decompression.
///
/// None of these is helped by retrying the same call: they describe the input or the build.
/// [`CompressError::kafka_error_name`] gives the matching Kafka protocol error code name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompressError {
    /// The compression id is not one Kafka defines (only 0-4 are). Kafka code: CORRUPT_MESSAGE.
    #[error("unknown compression id {0} (Kafka defines 0-4)")]
    UnknownCodecId(u8),
    /// The compression name is not one Kafka defines. Kafka code: none (a configuration error).
    #[error("unknown compression type name {0:?} (expected none, gzip, snappy, lz4 or zstd)")]
    UnknownCodecName(String),
    /// The codec exists in Kafka but is not built into this crate.
    /// Kafka code: UNSUPPORTED_COMPRESSION_TYPE.
    #[error("compression type {compression} is not supported by this build")]
    UnsupportedCodec {
        /// The compression type that was asked for.
        compression: Compression,
    },
    /// Decompressed data would exceed the caller's `max_output` bound (bytes).
    /// Kafka code: none (a local limit; raise the limit or fetch less).
    #[error("{compression} decompression exceeds the {limit}-byte output limit")]
    OutputLimitExceeded {
        /// The codec that was decompressing.
        compression: Compression,
        /// The `max_output` bound, in bytes.
        limit: usize,
    },
    /// The compression level is out of range for the codec (or the codec takes no level).
    /// Kafka code: none (a configuration error).
    #[error("compression level {level} is not valid for {compression}")]
    InvalidLevel {
        /// The codec the level was given to.
        compression: Compression,
        /// The rejected level.
        level: i32,
    },
    /// The compressed input is malformed. Kafka code: CORRUPT_MESSAGE.
    #[error("corrupt {compression} data: {reason}")]
    Corrupt {
        /// The codec that rejected the data.
        compression: Compression,
        /// What the codec reported.
        reason: String,
    },
}

impl CompressError {
    /// The Kafka protocol error code name this error corresponds to, if any
    /// (from `error-codes.tsv`: `CORRUPT_MESSAGE`, `UNSUPPORTED_COMPRESSION_TYPE`).
    pub fn kafka_error_name(&self) -> Option<&'static str> {
        match self {
            CompressError::UnknownCodecId(_) | CompressError::Corrupt { .. } => {
                Some("CORRUPT_MESSAGE")
            }
            CompressError::UnsupportedCodec { .. } => Some("UNSUPPORTED_COMPRESSION_TYPE"),
            _ => None,
        }
    }

    /// Whether retrying the same operation can succeed. Always `false`: every variant describes
    /// the input, the configuration or the build, none of which a retry changes.
    pub fn is_retriable(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_and_names_round_trip() {
        for c in Compression::ALL {
            assert_eq!(Compression::from_id(c.id()), Ok(c));
            assert_eq!(Compression::from_name(c.name()), Ok(c));
            assert_eq!(c.name().parse::<Compression>(), Ok(c));
            assert_eq!(c.to_string(), c.name());
        }
        assert_eq!(Compression::from_name("GZIP"), Ok(Compression::Gzip));
        assert_eq!(
            [0u8, 1, 2, 3, 4].map(|i| Compression::from_id(i).map(|c| c.name())),
            [Ok("none"), Ok("gzip"), Ok("snappy"), Ok("lz4"), Ok("zstd")]
        );
    }

    #[test]
    fn unknown_ids_and_names_are_errors() {
        for id in 5..=u8::MAX {
            assert_eq!(
                Compression::from_id(id),
                Err(CompressError::UnknownCodecId(id))
            );
        }
        assert_eq!(
            codec_by_name("brotli").unwrap_err(),
            CompressError::UnknownCodecName("brotli".into())
        );
        assert_eq!(
            codec_by_id(7).unwrap_err().kafka_error_name(),
            Some("CORRUPT_MESSAGE")
        );
    }

    #[test]
    fn attribute_bits_pick_the_codec() {
        // Timestamp type, transactional and control bits must not change the codec.
        assert_eq!(
            Compression::from_attributes(0b11_1011),
            Ok(Compression::Lz4)
        );
        assert_eq!(Compression::from_attributes(0x0004), Ok(Compression::Zstd));
        assert_eq!(
            Compression::from_attributes(0x0006),
            Err(CompressError::UnknownCodecId(6))
        );
    }

    #[test]
    fn unimplemented_codecs_are_unsupported() {
        for c in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let err = codec_by_id(c.id()).unwrap_err();
            assert_eq!(err, CompressError::UnsupportedCodec { compression: c });
            assert_eq!(err.kafka_error_name(), Some("UNSUPPORTED_COMPRESSION_TYPE"));
            assert!(!err.is_retriable());
            assert!(codec_by_name(c.name()).is_err());
            assert!(!c.is_supported());
        }
        assert!(Compression::None.is_supported());
    }

    #[test]
    fn none_codec_appends_and_keeps_existing_bytes() {
        let codec = codec_by_id(0).unwrap();
        assert_eq!(codec.id(), 0);
        assert_eq!(codec.name(), "none");
        assert_eq!(codec.level_range(), None);
        let mut out = BytesMut::from(&b"prefix:"[..]);
        codec.compress(b"abc", None, &mut out).unwrap();
        codec.decompress(b"def", 3, &mut out).unwrap();
        assert_eq!(&out[..], b"prefix:abcdef");
    }

    #[test]
    fn none_codec_enforces_output_limit_and_rejects_levels() {
        let codec = NoneCodec;
        let mut out = BytesMut::new();
        assert_eq!(
            codec.decompress(b"abcd", 3, &mut out),
            Err(CompressError::OutputLimitExceeded {
                compression: Compression::None,
                limit: 3
            })
        );
        assert!(out.is_empty());
        assert_eq!(
            codec.compress(b"abcd", Some(1), &mut out),
            Err(CompressError::InvalidLevel {
                compression: Compression::None,
                level: 1
            })
        );
    }

    proptest! {
        #[test]
        fn none_round_trip(data in proptest::collection::vec(any::<u8>(), 0..4096), slack in 0usize..16) {
            let codec = codec_by_name("none").unwrap();
            let mut c = BytesMut::new();
            codec.compress(&data, None, &mut c).unwrap();
            let mut d = BytesMut::new();
            codec.decompress(&c, data.len() + slack, &mut d).unwrap();
            prop_assert_eq!(&d[..], &data[..]);
            if !data.is_empty() {
                let mut e = BytesMut::new();
                let limited = codec.decompress(&c, data.len() - 1, &mut e);
                let is_limit_error = matches!(limited, Err(CompressError::OutputLimitExceeded { .. }));
                prop_assert!(is_limit_error);
            }
        }

        #[test]
        fn any_attribute_value_is_a_codec_or_a_typed_error(attrs in any::<i16>()) {
            match Compression::from_attributes(attrs) {
                Ok(c) => prop_assert_eq!(i16::from(c.id()), attrs & 7),
                Err(e) => prop_assert_eq!(e, CompressError::UnknownCodecId((attrs & 7) as u8)),
            }
        }
    }
}
