//! The traits every generated message implements, and the small types they use.
//!
//! A message type ([`Message`]) covers every version of one schema: fields that a version does
//! not carry keep their default. A request type ([`Request`]) also knows its API key, its
//! response type, its header versions and how it is routed to a broker (Kafka protocol guide,
//! "The Messages" and "Request Header").

use std::fmt;

use bytes::{Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
pub use crate::generated::api_key::ApiKey;
use crate::generated::error_code::ErrorCode;

/// A protocol version number of one API (the `request_api_version` of a request header).
pub type ApiVersion = i16;

/// An inclusive range of protocol versions, e.g. the `validVersions` `"0-11"` of a schema.
///
/// An open-ended schema range such as `"9+"` has `max == i16::MAX`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VersionRange {
    /// Lowest version in the range.
    pub min: i16,
    /// Highest version in the range (inclusive).
    pub max: i16,
}

impl VersionRange {
    /// Builds the range `min..=max`.
    pub const fn new(min: i16, max: i16) -> Self {
        Self { min, max }
    }

    /// Whether `v` lies in the range (both ends inclusive).
    pub const fn contains(&self, v: i16) -> bool {
        self.min <= v && v <= self.max
    }

    /// The versions both ranges contain, or `None` when they do not overlap. This is how a client
    /// picks the highest version that it and a broker both speak (KIP-35, ApiVersions).
    pub fn intersect(&self, other: &VersionRange) -> Option<VersionRange> {
        let min = self.min.max(other.min);
        let max = self.max.min(other.max);
        (min <= max).then_some(VersionRange { min, max })
    }
}

impl fmt::Display for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.max == i16::MAX {
            write!(f, "{}+", self.min)
        } else if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}-{}", self.min, self.max)
        }
    }
}

/// Encoding and decoding of one message type.
///
/// One struct covers all versions of the schema. Each field's doc gives, in short, the versions
/// that carry it (`v3+`, `v0-4`; `tag 2, v12+` for a tagged field, KIP-482), where it may be null
/// (`nullable v3+`), its default when that is not the type's empty value (`default -1`,
/// `default null`), `ignorable`, and a field-level encoding override (`never compact`).
///
/// The rule for a field that the version being encoded lacks: an `ignorable` field is dropped
/// silently; any other field must hold its default, or encoding fails with
/// [`EncodeError::FieldNotSupportedAtVersion`]. Decoding leaves such fields at their default.
/// Structs are `#[non_exhaustive]`: build them from `Default` with the `with_<field>` setters,
/// e.g. `HeartbeatRequest::default().with_group_id(id).with_generation_id(3)`.
pub trait Message:
    Sized + Default + Clone + PartialEq + fmt::Debug + Send + Sync + 'static
{
    /// Schema name, e.g. `"ProduceRequest"`.
    const NAME: &'static str;
    /// The versions this library can encode and decode (`validVersions`).
    const VERSIONS: VersionRange;
    /// The versions that use the compact ("flexible", KIP-482) encoding; `None` = never.
    const FLEXIBLE_VERSIONS: Option<VersionRange>;

    /// Appends the encoding of `self` at `version` to `buf`.
    ///
    /// Errors: [`EncodeError::UnsupportedVersion`] outside [`Self::VERSIONS`], and the field
    /// errors of [`EncodeError`]. On error `buf` is left as it was before the call.
    fn encode(&self, buf: &mut BytesMut, version: i16) -> Result<(), EncodeError>;

    /// The number of bytes [`encode`](Message::encode) would append at `version`; fails exactly
    /// when `encode` would.
    fn compute_size(&self, version: i16) -> Result<usize, EncodeError>;

    /// Decodes one value from the front of `buf`, advancing it past what was read. Bytes and
    /// records fields are zero-copy slices of `buf` (`Bytes::slice_ref`).
    ///
    /// Errors: [`DecodeError`] for truncated or malformed input and for unsupported versions; on
    /// error `buf` is not advanced.
    fn decode(buf: &mut Bytes, version: i16) -> Result<Self, DecodeError>;

    /// Whether `version` uses the compact (flexible) encoding.
    fn is_flexible(version: i16) -> bool {
        match Self::FLEXIBLE_VERSIONS {
            Some(r) => r.contains(version),
            None => false,
        }
    }
}

/// How a request is routed to a broker. Routing is a property of the request type (see
/// [`Request::ROUTING`]), so transports need no per-API switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Routing {
    /// Any broker of the cluster can answer (e.g. Metadata, ApiVersions).
    AnyBroker,
    /// The leader of each partition named in the request (Produce, Fetch, ListOffsets...).
    PartitionLeader,
    /// The group coordinator of the group named in the request (KIP-848 groups included).
    GroupCoordinator,
    /// The transaction coordinator of the `transactional.id` in the request.
    TransactionCoordinator,
    /// The active controller (cluster-wide changes such as CreateTopics).
    Controller,
    /// The share-group coordinator (KIP-932 share groups).
    ShareCoordinator,
    /// A KRaft controller-quorum API (Vote, BeginQuorumEpoch...) sent between controllers.
    Quorum,
    /// Sent by brokers or controllers to each other; not used by clients.
    BrokerInternal,
    /// Sent on each connection to set it up (ApiVersions, SaslHandshake, SaslAuthenticate).
    Connection,
    /// The broker the request names (e.g. DescribeLogDirs, DescribeConfigs for broker resources).
    SpecificBroker,
}

/// A request message: a [`Message`] that starts an exchange with a broker.
pub trait Request: Message {
    /// The API key sent in the request header.
    const API_KEY: ApiKey;
    /// The message the broker answers with.
    type Response: Response;
    /// Which broker the request must go to.
    const ROUTING: Routing;
    /// The highest version that released brokers serve by default: `VERSIONS.max`, or one
    /// below it when the schema marks its latest version unstable (`latestVersionUnstable`, a
    /// version still under development that a broker serves only with
    /// `unstable.api.versions.enable=true`). A client picks a version above it only when the
    /// application opts in.
    const LATEST_STABLE_VERSION: i16;

    /// The request header version used with request `version`: 2 for flexible versions, 1
    /// otherwise, 0 for ControlledShutdown v0 (Kafka protocol guide, "Request Header").
    fn request_header_version(version: i16) -> i16;

    /// The response header version used with `version`: 1 for flexible versions, 0 otherwise.
    /// ApiVersions always answers with header version 0 so that clients can parse it before
    /// they know which versions the broker speaks (KIP-511).
    fn response_header_version(version: i16) -> i16;

    /// The request's top-level `timeout_ms`: how long the broker may take before it answers
    /// (waiting for replication, a controller change, a remote offset look-up...), in ms.
    /// `None` when the schema has no such field (Produce, CreateTopics, DeleteRecords... have
    /// one; Fetch bounds its wait with `max_wait_ms` instead).
    fn timeout_ms(&self) -> Option<i32> {
        None
    }
}

/// A response message, with what a transport reads from any response without knowing its type.
pub trait Response: Message {
    /// The top-level `throttle_time_ms` (KIP-219): how long the broker asks the client to wait
    /// before its next request, in ms. `None` when the schema has no such field; a version
    /// that lacks the field decodes it as 0.
    fn throttle_time_ms(&self) -> Option<i32> {
        None
    }

    /// The top-level `error_code`, the one that applies to the whole request. `None` when the
    /// schema has none (errors are per item then); a version that lacks the field decodes it as
    /// [`ErrorCode::NONE`].
    fn error_code(&self) -> Option<ErrorCode> {
        None
    }
}

/// Appends a request header (Kafka protocol guide, "Request Header") for `R` at `version`,
/// without allocating: `request_api_key`, `request_api_version`, `correlation_id`, then (header
/// v1+) the nullable `client_id` in the classic int16-length form, then (header v2) an empty
/// tagged-field section.
///
/// Errors: [`EncodeError::UnsupportedVersion`] when `version` is outside `R::VERSIONS`,
/// [`EncodeError::TooLong`] for a client id over 32767 bytes.
pub fn write_request_header<R: Request>(
    buf: &mut BytesMut,
    version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
) -> Result<(), EncodeError> {
    use bytes::BufMut;
    if !R::VERSIONS.contains(version) {
        return Err(EncodeError::UnsupportedVersion {
            message: R::NAME,
            version,
            supported: R::VERSIONS,
        });
    }
    let header_version = R::request_header_version(version);
    buf.put_i16(R::API_KEY as i16);
    buf.put_i16(version);
    buf.put_i32(correlation_id);
    if header_version >= 1 {
        match client_id {
            None => buf.put_i16(-1),
            Some(id) => {
                let len = i16::try_from(id.len()).map_err(|_| EncodeError::TooLong {
                    message: "RequestHeader",
                    field: "client_id",
                    len: id.len(),
                    max: i16::MAX as usize,
                })?;
                buf.put_i16(len);
                buf.put_slice(id.as_bytes());
            }
        }
    }
    if header_version >= 2 {
        buf.put_u8(0);
    }
    Ok(())
}

/// Appends a whole request frame: the int32 size prefix, the request header and the body of
/// `req` at `version`. The size is computed up front, so nothing is back-patched. On error `buf`
/// is left as it was.
///
/// Errors: as [`write_request_header`] and [`Message::encode`].
pub fn write_request_frame<R: Request>(
    buf: &mut BytesMut,
    req: &R,
    version: i16,
    correlation_id: i32,
    client_id: Option<&str>,
) -> Result<(), EncodeError> {
    use bytes::BufMut;
    let start = buf.len();
    buf.put_i32(0);
    let result = write_request_header::<R>(buf, version, correlation_id, client_id)
        .and_then(|()| req.encode(buf, version));
    if let Err(e) = result {
        buf.truncate(start);
        crate::splice::forget_after(start);
        return Err(e);
    }
    // Inside `splice::collect`, payloads left out of `buf` are still part of the frame.
    let size = buf.len() - start - 4 + crate::splice::spliced_len_after(start);
    let Ok(size) = i32::try_from(size) else {
        buf.truncate(start);
        crate::splice::forget_after(start);
        return Err(EncodeError::TooLong {
            message: R::NAME,
            field: "(frame)",
            len: size,
            max: i32::MAX as usize,
        });
    };
    buf[start..start + 4].copy_from_slice(&size.to_be_bytes());
    Ok(())
}

/// Reads the response header for a response to `R` at `version` from the front of `buf`
/// (a frame body without its size prefix) and returns the correlation id. Header v1 tagged
/// fields are skipped.
///
/// Errors: [`DecodeError`] for truncated or malformed input.
pub fn read_response_header<R: Request>(buf: &mut Bytes, version: i16) -> Result<i32, DecodeError> {
    let header_version = R::response_header_version(version);
    let h = crate::generated::ResponseHeader::decode(buf, header_version)?;
    Ok(h.correlation_id)
}

/// Decodes a response frame body (header and message, without the size prefix) for a request of
/// type `R` sent at `version`: `(correlation_id, response)`.
///
/// Errors: [`DecodeError`] for truncated or malformed input, or when bytes remain after the
/// response ([`DecodeError::InvalidValue`]: a version mismatch is the usual cause).
pub fn decode_response_frame<R: Request>(
    mut body: Bytes,
    version: i16,
) -> Result<(i32, R::Response), DecodeError> {
    let correlation_id = read_response_header::<R>(&mut body, version)?;
    let response = R::Response::decode(&mut body, version)?;
    if !body.is_empty() {
        return Err(DecodeError::InvalidValue {
            field: "response",
            reason: "trailing bytes after the response body",
        });
    }
    Ok((correlation_id, response))
}
