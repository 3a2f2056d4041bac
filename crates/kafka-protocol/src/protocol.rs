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
/// One struct covers all versions of the schema; fields absent at a version are ignored when
/// encoding (or rejected with [`EncodeError::FieldNotSupportedAtVersion`] when they are not
/// ignorable and hold a non-default value) and left at their default when decoding.
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
    type Response: Message;
    /// Which broker the request must go to.
    const ROUTING: Routing;

    /// The request header version used with request `version`: 2 for flexible versions, 1
    /// otherwise, 0 for ControlledShutdown v0 (Kafka protocol guide, "Request Header").
    fn request_header_version(version: i16) -> i16;

    /// The response header version used with `version`: 1 for flexible versions, 0 otherwise.
    /// ApiVersions always answers with header version 0 so that clients can parse it before
    /// they know which versions the broker speaks (KIP-511).
    fn response_header_version(version: i16) -> i16;
}
