//! Compression codecs for Kafka record batches, behind one [`Codec`] trait and a registry.
//!
//! A record batch names its codec in the low three bits of its `attributes` field
//! (protocol guide, "Record Batch"; KIP-98 for magic 2, KIP-110 for zstd). This crate maps
//! those ids and the Java client's `compression.type` names to codec implementations:
//!
//! | id | name     | cargo feature | library                 | levels (KIP-390)          |
//! |----|----------|---------------|-------------------------|---------------------------|
//! | 0  | `none`   | always        | -                       | none                      |
//! | 1  | `gzip`   | `gzip`        | flate2 (pure Rust)      | 1-9 or -1; default -1 (6) |
//! | 2  | `snappy` | `snappy`      | snap (xerial framing)   | none                      |
//! | 3  | `lz4`    | `lz4`         | lz4_flex (frame format) | 1-17; default 9           |
//! | 4  | `zstd`   | `zstd`        | zstd (libzstd)          | -131072 to 22; default 3  |
//! | 4  | `zstd`   | `zstd-pure`   | ruzstd (pure Rust)      | checked as above; writes ruzstd's one level (about 1) |
//!
//! All features but `zstd-pure` are on by default. Every codec but `zstd` builds without a C
//! compiler; `zstd-pure` reads every zstd frame without one (`ZstdPureCodec`). With both zstd
//! features on, libzstd (`ZstdCodec`) serves [`Compression::Zstd`].
//!
//! ```
//! use bytes::BytesMut;
//! use kafkit_compress::{codec_by_name, Compression, CompressionConfig};
//!
//! # fn main() -> Result<(), kafkit_compress::CompressError> {
//! let codec = codec_by_name("lz4")?;
//! assert_eq!(codec.compression(), Compression::Lz4);
//!
//! let mut compressed = BytesMut::new();
//! codec.compress(b"hello kafka, hello kafka", None, &mut compressed)?;
//!
//! // Decompression is bounded: a `max_output` of 1 MiB refuses anything larger.
//! let mut plain = BytesMut::new();
//! codec.decompress(&compressed, 1 << 20, &mut plain)?;
//! assert_eq!(&plain[..], b"hello kafka, hello kafka");
//!
//! // A level is checked when the configuration is made, not when the first batch is written.
//! let zstd = CompressionConfig::with_level(Compression::Zstd, 9)?;
//! assert_eq!(zstd.level(), Some(9));
//! assert!(CompressionConfig::with_level(Compression::Gzip, 10).is_err());
//!
//! // Unknown ids are a typed error, not a panic.
//! assert!(matches!(
//!     Compression::from_id(6),
//!     Err(kafkit_compress::CompressError::UnknownCodecId(6))
//! ));
//! # Ok(())
//! # }
//! ```
//!
//! # Bounded decompression
//!
//! [`Codec::decompress`] takes the largest output the caller accepts. No codec appends more
//! than that, and the output buffer never grows past it (plus one byte used to detect the
//! overflow), so a decompression bomb (a few KiB that expand to GiBs) costs at most the bound.
//!
//! # Adding a codec
//!
//! A codec implements [`Codec`] in its own module behind a cargo feature named after it and is
//! returned from the matching arm of [`Compression::codec`]; without the feature that arm returns
//! [`CompressError::UnsupportedCodec`]. Callers never change: they look codecs up through
//! [`codec_by_id`], [`codec_by_name`] or [`Compression::codec`].
// docs.rs builds with `--cfg docsrs` (Cargo.toml): nightly rustdoc then marks each item behind a
// cargo feature with that feature (`doc_cfg` shows the `#[cfg]` of an item by itself).
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::fmt;
use std::str::FromStr;

use bytes::BytesMut;

#[cfg_attr(
    not(any(
        feature = "gzip",
        feature = "lz4",
        feature = "zstd",
        feature = "zstd-pure"
    )),
    allow(dead_code)
)]
mod bounded;
#[cfg(feature = "gzip")]
mod gzip;
#[cfg(feature = "lz4")]
mod lz4;
#[cfg(feature = "snappy")]
pub mod snappy;
#[cfg(feature = "zstd")]
mod zstd;
#[cfg(feature = "zstd-pure")]
mod zstd_pure;

#[cfg(feature = "gzip")]
pub use gzip::GzipCodec;
#[cfg(feature = "lz4")]
pub use lz4::Lz4Codec;
#[cfg(feature = "snappy")]
pub use snappy::SnappyCodec;
#[cfg(feature = "zstd")]
pub use zstd::ZstdCodec;
#[cfg(feature = "zstd-pure")]
pub use zstd_pure::ZstdPureCodec;

// The tests exercise every codec, so they need the default features.
#[cfg(all(
    test,
    feature = "gzip",
    feature = "snappy",
    feature = "lz4",
    feature = "zstd"
))]
mod tests;

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
    /// [`CompressError::UnsupportedCodec`] if the codec's cargo feature is off in this build.
    pub fn codec(self) -> Result<&'static dyn Codec, CompressError> {
        match self {
            Compression::None => Ok(&NoneCodec),
            #[cfg(feature = "gzip")]
            Compression::Gzip => Ok(&GzipCodec),
            #[cfg(feature = "snappy")]
            Compression::Snappy => Ok(&SnappyCodec),
            #[cfg(feature = "lz4")]
            Compression::Lz4 => Ok(&Lz4Codec),
            #[cfg(feature = "zstd")]
            Compression::Zstd => Ok(&ZstdCodec),
            // libzstd wins when both are built: faster, and it honours every level.
            #[cfg(all(feature = "zstd-pure", not(feature = "zstd")))]
            Compression::Zstd => Ok(&ZstdPureCodec),
            #[allow(unreachable_patterns)]
            _ => Err(CompressError::UnsupportedCodec { compression: self }),
        }
    }

    /// The compression levels Kafka accepts for this type (KIP-390: `compression.gzip.level`,
    /// `compression.lz4.level`, `compression.zstd.level`), or `None` for `none` and `snappy`,
    /// which take no level.
    ///
    /// gzip: 1-9 (and -1, zlib's default, which is outside this range but accepted by
    /// [`Compression::validate_level`]); lz4: 1-17; zstd: -131072 to 22 (libzstd's range).
    pub const fn level_range(self) -> Option<std::ops::RangeInclusive<i32>> {
        match self {
            Compression::None | Compression::Snappy => None,
            Compression::Gzip => Some(1..=9),
            Compression::Lz4 => Some(1..=17),
            Compression::Zstd => Some(-131_072..=22),
        }
    }

    /// Kafka's default level for this type (KIP-390): gzip -1 (zlib's default, level 6),
    /// lz4 9, zstd 3; `None` for types without levels. Used when no level is configured.
    pub const fn default_level(self) -> Option<i32> {
        match self {
            Compression::None | Compression::Snappy => None,
            Compression::Gzip => Some(-1),
            Compression::Lz4 => Some(9),
            Compression::Zstd => Some(3),
        }
    }

    /// Checks `level` against [`Compression::level_range`] and returns it unchanged.
    /// `None` (use the default) is always valid; gzip also accepts -1.
    ///
    /// # Errors
    /// [`CompressError::InvalidLevel`] if the level is out of range, or is `Some` for a type
    /// without levels.
    pub fn validate_level(self, level: Option<i32>) -> Result<Option<i32>, CompressError> {
        let Some(l) = level else { return Ok(None) };
        let ok = match self.level_range() {
            Some(range) => range.contains(&l) || (self == Compression::Gzip && l == -1),
            None => false,
        };
        if ok {
            Ok(level)
        } else {
            Err(CompressError::InvalidLevel {
                compression: self,
                level: l,
            })
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

/// A compression type with a validated level: what a producer is configured with
/// (Java: `compression.type` plus `compression.<type>.level`, KIP-390).
///
/// The level is checked when the value is made, so a bad level is a configuration error and
/// never a failure while writing a batch. `From<Compression>` gives the type's default level.
///
/// ```
/// use kafkit_compress::{Compression, CompressionConfig, CompressError};
///
/// let cfg = CompressionConfig::with_level(Compression::Lz4, 12).unwrap();
/// assert_eq!((cfg.compression(), cfg.level()), (Compression::Lz4, Some(12)));
/// assert_eq!(CompressionConfig::from(Compression::Zstd).level(), None); // default (3)
/// assert!(matches!(
///     CompressionConfig::with_level(Compression::Snappy, 1),
///     Err(CompressError::InvalidLevel { .. })
/// ));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CompressionConfig {
    compression: Compression,
    level: Option<i32>,
}

impl CompressionConfig {
    /// No compression.
    pub const NONE: CompressionConfig = CompressionConfig {
        compression: Compression::None,
        level: None,
    };

    /// `compression` at its default level ([`Compression::default_level`]).
    pub const fn new(compression: Compression) -> Self {
        CompressionConfig {
            compression,
            level: None,
        }
    }

    /// `compression` at `level`.
    ///
    /// # Errors
    /// [`CompressError::InvalidLevel`] when `level` is outside [`Compression::level_range`]
    /// (gzip also takes -1) or the type takes no level (`none`, `snappy`).
    pub fn with_level(compression: Compression, level: i32) -> Result<Self, CompressError> {
        let level = compression.validate_level(Some(level))?;
        Ok(CompressionConfig { compression, level })
    }

    /// The compression type.
    pub const fn compression(&self) -> Compression {
        self.compression
    }

    /// The configured level; `None` means the type's default.
    pub const fn level(&self) -> Option<i32> {
        self.level
    }

    /// The codec for this configuration.
    ///
    /// # Errors
    /// [`CompressError::UnsupportedCodec`] when the codec is not built in.
    pub fn codec(&self) -> Result<&'static dyn Codec, CompressError> {
        self.compression.codec()
    }
}

impl Default for CompressionConfig {
    /// No compression.
    fn default() -> Self {
        CompressionConfig::NONE
    }
}

impl From<Compression> for CompressionConfig {
    fn from(compression: Compression) -> Self {
        CompressionConfig::new(compression)
    }
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
    /// Defaults to [`Compression::level_range`] of [`Codec::compression`].
    fn level_range(&self) -> Option<std::ops::RangeInclusive<i32>> {
        self.compression().level_range()
    }

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

/// The example of this crate's README.md, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
