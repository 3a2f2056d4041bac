//! Errors raised while encoding or decoding protocol messages.
//!
//! Both enums describe a problem with the bytes or the value at hand, never with the network or
//! the broker: a retry with the same input fails the same way, so [`EncodeError::is_retriable`]
//! and [`DecodeError::is_retriable`] always answer `false`. Broker-side errors travel inside
//! responses as [`ErrorCode`](crate::ErrorCode) values instead.

use crate::protocol::VersionRange;

/// Why a message could not be encoded.
///
/// Every variant points at a bug or a version mismatch on the caller's side (Kafka protocol guide,
/// "Versioning and Compatibility"); a retry with the same value and version cannot help.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// The requested version is outside the message's `validVersions`.
    #[error("{message} does not support version {version} (supported: {supported})")]
    UnsupportedVersion {
        /// Message name, e.g. `ProduceRequest`.
        message: &'static str,
        /// The version asked for.
        version: i16,
        /// The versions this library can encode for the message.
        supported: VersionRange,
    },
    /// A field that is not `ignorable` holds a non-default value, but the chosen version does not
    /// carry it, so encoding would silently drop information.
    #[error("{message}.{field} is set but version {version} does not carry it")]
    FieldNotSupportedAtVersion {
        /// Name of the struct holding the field.
        message: &'static str,
        /// Field name (snake_case).
        field: &'static str,
        /// The version being encoded.
        version: i16,
    },
    /// A field holds `None` but the chosen version does not allow null for it.
    #[error("{message}.{field} is null but version {version} does not allow null")]
    NullNotAllowed {
        /// Name of the struct holding the field.
        message: &'static str,
        /// Field name (snake_case).
        field: &'static str,
        /// The version being encoded.
        version: i16,
    },
    /// A string, bytes value or array is longer than its length prefix can express
    /// (e.g. 32767 bytes for a non-compact string).
    #[error("{message}.{field} has length {len}, more than the maximum {max}")]
    TooLong {
        /// Name of the struct holding the field.
        message: &'static str,
        /// Field name (snake_case).
        field: &'static str,
        /// The length of the value (bytes or elements).
        len: usize,
        /// The largest length the encoding allows.
        max: usize,
    },
}

impl EncodeError {
    /// Whether retrying the same operation could succeed. Always `false`: the value or the
    /// version must change first.
    pub const fn is_retriable(&self) -> bool {
        false
    }
}

/// Why bytes could not be decoded into a message.
///
/// Raised for truncated input, length or count prefixes larger than the bytes that remain,
/// and values the protocol forbids (bad UTF-8, negative lengths other than -1 for null,
/// over-long varints). Decoders never panic and never allocate more than the input can justify.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended before a fixed-size value could be read.
    #[error("input truncated: needed {needed} more bytes, {remaining} remain")]
    Truncated {
        /// Bytes the value needs.
        needed: usize,
        /// Bytes left in the input.
        remaining: usize,
    },
    /// A length or count prefix claims more bytes (or elements) than the input has left.
    #[error("length prefix {length} exceeds the {remaining} bytes that remain")]
    LengthOutOfRange {
        /// The decoded length or element count.
        length: i64,
        /// Bytes left in the input after the prefix.
        remaining: usize,
    },
    /// A value the protocol does not allow at this place.
    #[error("invalid value for {field}: {reason}")]
    InvalidValue {
        /// The field or primitive being read (e.g. `ClientId`, `unsigned varint`).
        field: &'static str,
        /// What was wrong.
        reason: &'static str,
    },
    /// The requested version is outside the message's `validVersions`.
    #[error("{message} does not support version {version} (supported: {supported})")]
    UnsupportedVersion {
        /// Message name, e.g. `ProduceResponse`.
        message: &'static str,
        /// The version asked for.
        version: i16,
        /// The versions this library can decode for the message.
        supported: VersionRange,
    },
    /// A generic parser failure reported by a `nom` combinator.
    #[error("parse error ({kind:?}) with {remaining} bytes remaining")]
    Parse {
        /// The combinator that failed.
        kind: nom::error::ErrorKind,
        /// Bytes left in the input where it failed.
        remaining: usize,
    },
}

impl DecodeError {
    /// Whether retrying the same operation could succeed. Always `false`: the same bytes decode
    /// the same way.
    pub const fn is_retriable(&self) -> bool {
        false
    }
}

impl<'a> nom::error::ParseError<&'a [u8]> for DecodeError {
    fn from_error_kind(input: &'a [u8], kind: nom::error::ErrorKind) -> Self {
        if kind == nom::error::ErrorKind::Eof {
            DecodeError::Truncated {
                needed: 1,
                remaining: input.len(),
            }
        } else {
            DecodeError::Parse {
                kind,
                remaining: input.len(),
            }
        }
    }

    fn append(_input: &'a [u8], _kind: nom::error::ErrorKind, other: Self) -> Self {
        other
    }
}
