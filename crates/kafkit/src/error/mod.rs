//! The client's error type, [`Error`]: every other public error of the crate and of the crates it
//! re-exports converts into it, so `?` works in a function returning `kafkit::Result`.
//!
//! `error/` is the ground floor of the crate: the error types of every client (the writer's in
//! `produce`, the reader's in `reader`, the group member's in `group`, the properties' in
//! `properties`, and [`TlsErrorKind`]) live here because they wrap one another through
//! [`Error`]. Nothing here imports another module of the crate except `crate::time`; it may use
//! std, the leaf crates (`kafkit_protocol`, `kafkit_compress`, `kafkit_balancer`,
//! `kafkit_group_balancer`, `kafkit_sasl`, `kafkit_pagebuf`) and external crates. The modules
//! above re-export what their users name.

pub(crate) mod group;
pub(crate) mod produce;
pub(crate) mod properties;
pub(crate) mod reader;
pub(crate) mod share;
pub(crate) mod telemetry;

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use kafkit_balancer::BalanceError;
use kafkit_compress::CompressError;
use kafkit_group_balancer::{AssignError, MetadataError};
use kafkit_protocol::records::RecordsError;
use kafkit_protocol::{ApiKey, DecodeError, EncodeError, ErrorCode, VersionRange};
use kafkit_sasl::SaslError;

use self::group::GroupError;
use self::produce::{ProduceError, WriteErrors, WriterConfigError};
use self::properties::PropertyError;
use self::reader::ReaderError;
use self::share::ShareError;

/// Why a connection stopped carrying requests.
///
/// Every request that was in flight or queued on a connection when it closed receives
/// [`Error::ConnectionClosed`] carrying one of these causes, at the moment the connection closes.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum CloseCause {
    /// The broker closed the TCP connection (end of stream while reading a response frame).
    Eof,
    /// A read or write on the socket failed.
    Io(Arc<io::Error>),
    /// A response frame's 4-byte size prefix was negative, smaller than a correlation id (4 bytes)
    /// or larger than the configured maximum response size. Nothing was allocated for it.
    InvalidFrameSize {
        /// The size prefix as received, in bytes.
        size: i32,
        /// The largest frame this connection accepts, in bytes.
        max: usize,
    },
    /// The connection was closed by this client ([`crate::Conn::close`] or the last handle dropped).
    ClosedByClient,
    /// The first bytes of the broker's answer on a plaintext connection were a TLS record header,
    /// not a Kafka size prefix: the listener speaks TLS. [`crate::Dialer::dial`] reports this as
    /// [`Error::Tls`] with [`crate::TlsErrorKind::PlaintextToTls`].
    TlsRecordReceived,
    /// The first bytes of the broker's answer were `HTTP`: the address is an HTTP server or
    /// proxy, not a Kafka listener. Not retriable: the address needs changing.
    HttpReceived,
    /// The first 4 bytes of the peer's answer read as a frame size over the maximum response
    /// size and are printable ASCII (`<!DO` of an HTML page, `SSH-`, `220 ` of SMTP): the
    /// address is some other text protocol's server, not a Kafka listener. Not retriable: the
    /// address needs changing. (`HTTP` itself is [`CloseCause::HttpReceived`].)
    TextReceived {
        /// The first 4 bytes of the answer.
        prefix: [u8; 4],
    },
    /// Re-authentication (KIP-368) on this connection failed; the broker would close it when the
    /// session expires, so the client closes it first.
    ReauthenticationFailed(String),
    /// A request (not a long poll such as Fetch or JoinGroup) got no answer within its timeout:
    /// the connection is taken for half-open (a broker or path that stopped answering) and
    /// closed, as the Java client's `NetworkClient` does, so the next request dials anew instead
    /// of waiting on it again. The request that timed out gets [`Error::Timeout`].
    RequestTimedOut {
        /// The API that timed out (e.g. `Produce`).
        operation: &'static str,
        /// The time allowed.
        timeout: Duration,
    },
    /// The [`crate::Transport`] bootstraps again (KIP-899, KIP-1102, KIP-1242) and closed
    /// every connection it had; retriable: the request may be sent again on a connection of
    /// the metadata fetched from the bootstrap addresses.
    Rebootstrap,
}

impl fmt::Display for CloseCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseCause::Eof => f.write_str("the broker closed the connection"),
            CloseCause::Io(e) => write!(f, "socket error: {e}"),
            CloseCause::InvalidFrameSize { size, max } => write!(
                f,
                "invalid response frame size {size} bytes (accepted: 4..={max})"
            ),
            CloseCause::ClosedByClient => f.write_str("the connection was closed by the client"),
            CloseCause::Rebootstrap => {
                f.write_str("the client bootstraps again and closed the connection")
            }
            CloseCause::TlsRecordReceived => f.write_str(
                "the broker answered with a TLS record: it is a TLS listener, configure TLS",
            ),
            CloseCause::HttpReceived => f.write_str(
                "the peer answered HTTP: it is an HTTP server or proxy, not a Kafka listener",
            ),
            CloseCause::TextReceived { prefix } => write!(
                f,
                "the peer's answer starts with '{}': it is not a Kafka listener (an HTTP server \
                 or another non-Kafka service?)",
                String::from_utf8_lossy(prefix)
            ),
            CloseCause::ReauthenticationFailed(why) => {
                write!(f, "SASL re-authentication failed: {why}")
            }
            CloseCause::RequestTimedOut { operation, timeout } => write!(
                f,
                "a {operation} request got no answer within {timeout:?}; the connection was \
                 closed as half-open"
            ),
        }
    }
}

/// What went wrong in a TLS set-up; carried by [`Error::Tls`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsErrorKind {
    /// The `TlsConfig` could not be built (bad PEM, rejected key).
    Config,
    /// The broker's certificate was not trusted: unknown issuer, expired, or not valid for the
    /// dialled host name. Not retriable without a configuration change.
    Verification,
    /// The peer does not speak TLS: it closed the connection, answered with bytes that are no
    /// TLS record, or did not answer the ClientHello. Most likely a plaintext listener.
    NotTls,
    /// Another TLS handshake failure (e.g. the broker required a client certificate, no common
    /// protocol version or cipher suite).
    Handshake,
    /// The broker answered a plaintext request with a TLS record: it is a TLS listener and the
    /// dialer has no `TlsConfig`.
    PlaintextToTls,
}

impl fmt::Display for TlsErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TlsErrorKind::Config => "invalid TLS configuration",
            TlsErrorKind::Verification => "broker certificate verification failed",
            TlsErrorKind::NotTls => {
                "the broker did not answer the TLS handshake (a plaintext listener?)"
            }
            TlsErrorKind::Handshake => "TLS handshake failed",
            TlsErrorKind::PlaintextToTls => {
                "the broker answered in TLS: it is a TLS listener, configure TLS on the dialer"
            }
        })
    }
}

/// Errors returned by the client, and the one error type a user can `?` every other into.
///
/// [`Error::is_retriable`] tells whether sending the same request again (possibly after refreshing
/// metadata or reconnecting) can succeed; [`Error::error_code`] gives the Kafka error code when
/// there is one. Both look through the wrapped errors: a [`ProduceError`] keeps its own answers
/// as [`Error::Produce`].
///
/// `From` conversions: [`ProduceError`], [`WriteErrors`], [`WriterConfigError`], `io::Error`,
/// the protocol's [`EncodeError`], [`DecodeError`] and [`RecordsError`], [`CompressError`],
/// [`BalanceError`], [`SaslError`], and the group balancer's [`AssignError`] and
/// [`MetadataError`].
///
/// ```
/// use kafkit::{ProducerRecord, Transport, Writer};
///
/// // Transport, Writer and record errors all meet in kafkit::Error.
/// async fn produce() -> Result<(), kafkit::Error> {
///     let transport = Transport::builder(["127.0.0.1:9092"]).build()?; // kafkit::Error
///     let writer = Writer::builder(transport).build()?; // WriterConfigError
///     let ack = writer.produce(ProducerRecord::new("orders", "v")).await?; // ProduceError
///     println!("offset {}", ack.offset);
///     Ok(())
/// }
/// # drop(produce());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Connecting to a broker failed (DNS resolution or TCP connect).
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address that was dialled (`host:port`).
        addr: String,
        /// The underlying I/O error.
        #[source]
        source: io::Error,
    },

    /// A local I/O error outside an established connection.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),

    /// The connection closed before the response arrived. The request may or may not have been
    /// processed by the broker.
    #[error("connection to {addr} closed: {cause}")]
    ConnectionClosed {
        /// The broker address (`host:port`).
        addr: String,
        /// Why the connection closed.
        cause: CloseCause,
    },

    /// No response (or no connection, when dialling) within the allotted time.
    /// The connection stays usable: a response arriving later is discarded.
    #[error("{operation} timed out after {timeout:?}")]
    Timeout {
        /// What timed out (an API name such as `Produce`, or `connect`).
        operation: &'static str,
        /// The time allowed.
        timeout: Duration,
    },

    /// Setting up a connection to `addr` (TCP connect, TLS, ApiVersions, SASL) took longer
    /// than the dialer's `connect_timeout`. Retriable.
    #[error("connecting to {addr} timed out after {timeout:?}")]
    ConnectTimeout {
        /// The address that was dialled (`host:port`).
        addr: String,
        /// The `connect_timeout` allowed.
        timeout: Duration,
    },

    /// A request could not be encoded (the value does not fit the chosen version).
    #[error("cannot encode request: {0}")]
    Encode(#[from] EncodeError),

    /// A response could not be decoded (malformed or truncated bytes from the broker).
    #[error("cannot decode response: {0}")]
    Decode(#[from] DecodeError),

    /// A record batch could not be built or read.
    #[error("record batch error: {0}")]
    Records(#[from] RecordsError),

    /// The chosen compression codec is not available.
    #[error("compression error: {0}")]
    Compression(#[from] CompressError),

    /// This library and the broker share no version of an API (KIP-35 negotiation).
    #[error(
        "no common version of {api:?}: this client speaks {ours}, the broker {}",
        broker.map_or_else(|| "does not offer it".to_owned(), |b| format!("speaks {b}"))
    )]
    UnsupportedVersion {
        /// The API.
        api: ApiKey,
        /// The versions this library can use.
        ours: VersionRange,
        /// The versions the broker announced, `None` when it does not list the API.
        broker: Option<VersionRange>,
    },

    /// The broker answered with an error code (top-level, or for the one topic/partition an
    /// operation was about). Retriable exactly when the code is (`ErrorCode::is_retriable`).
    #[error("{operation} failed: {code}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Broker {
        /// The operation (API name, e.g. `Produce`).
        operation: &'static str,
        /// The Kafka error code (its name via `ErrorCode::name`).
        code: ErrorCode,
        /// The broker's error message, when it sent one.
        message: Option<String>,
    },

    /// A request frame would exceed the protocol's 2^31-1 byte limit.
    #[error("request of {size} bytes exceeds the largest frame Kafka accepts")]
    RequestTooLarge {
        /// The encoded size, in bytes.
        size: usize,
    },

    /// A TLS problem: bad configuration, an untrusted broker certificate, a failed handshake, or
    /// TLS spoken on one side only (plaintext dialer and TLS listener, or the reverse). Not
    /// retriable: each of these needs a configuration change on one side.
    #[error("TLS error{}{}: {kind}: {message}", if addr.is_empty() { "" } else { " with " }, addr)]
    Tls {
        /// The broker address (`host:port`), empty for configuration errors.
        addr: String,
        /// What kind of failure.
        kind: TlsErrorKind,
        /// Details from rustls (never key material).
        message: String,
    },

    /// SASL authentication failed (SaslHandshake / SaslAuthenticate, KIP-43, KIP-152), or the
    /// mechanism could not produce its next message. Carries the Kafka error code when the
    /// broker sent one (`SASL_AUTHENTICATION_FAILED`, `UNSUPPORTED_SASL_MECHANISM`,
    /// `ILLEGAL_SASL_STATE`) and never a credential. Not retriable: the same credentials fail
    /// again.
    #[error("SASL {mechanism} authentication with {addr} failed{}: {message}", code.map(|c| format!(" ({c})")).unwrap_or_default())]
    Sasl {
        /// The broker address (`host:port`).
        addr: String,
        /// The mechanism name, e.g. `SCRAM-SHA-512`.
        mechanism: String,
        /// The broker's error code, `None` when the failure was on the client side (e.g. a
        /// server signature that did not verify, a credentials provider error).
        code: Option<ErrorCode>,
        /// What happened (the broker's error message or the mechanism's error).
        message: String,
    },

    /// The client refused a request, or one resource of it (e.g. one topic of a
    /// CreateTopics), before sending it, where a broker would have answered `code`
    /// (`INVALID_TOPIC_EXCEPTION` for an illegal topic name, `INVALID_PARTITIONS`,
    /// `INVALID_REPLICATION_FACTOR`). Nothing was sent; not retriable.
    #[error("{operation} not sent: {reason} ({code})")]
    NotSent {
        /// The operation (API name, e.g. `CreateTopics`).
        operation: &'static str,
        /// The Kafka error code a broker would have answered.
        code: ErrorCode,
        /// What is wrong with the input.
        reason: String,
    },

    /// The caller passed an invalid argument (the request was not sent).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The broker answered something that does not fit the request (e.g. a missing partition).
    #[error("protocol violation: {0}")]
    Protocol(String),

    /// A setting is invalid (e.g. an empty bootstrap list given to
    /// [`crate::TransportBuilder::build`]). Not retriable.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// The node id is not among the brokers of the cached metadata (nor a coordinator address
    /// learnt from FindCoordinator), so there is no address to dial. Retriable: a metadata
    /// refresh may list it.
    #[error("broker {node_id} is not in the cluster metadata")]
    UnknownBroker {
        /// The node id asked for.
        node_id: i32,
    },

    /// The broker asked the client to bootstrap again (`REBOOTSTRAP_REQUIRED`, code 129):
    /// either a connection dialled to node `node_id` of cluster `cluster_id` reached another
    /// cluster or another node (the broker refused the ApiVersions v5 check, KIP-1242: a
    /// misrouted connection, closed), or a Metadata v13+ answer carried the code (KIP-1102).
    /// Retriable: with [`crate::MetadataRecoveryStrategy::Rebootstrap`] the [`crate::Transport`]
    /// has dropped its metadata and connections and the next attempt starts from the bootstrap
    /// addresses.
    #[error(
        "{operation} on {addr}: REBOOTSTRAP_REQUIRED (expected cluster {cluster_id:?}, node {node_id:?})"
    )]
    RebootstrapRequired {
        /// The request that was answered so (`ApiVersions` or `Metadata`).
        operation: &'static str,
        /// The address that was dialled (`host:port`).
        addr: String,
        /// The cluster id the connection was meant for (ApiVersions v5), if it was sent.
        cluster_id: Option<String>,
        /// The node id the connection was meant for (ApiVersions v5), if it was sent.
        node_id: Option<i32>,
    },

    /// [`crate::Transport::round_trip`] (or another retrying operation) kept failing with
    /// retriable errors until its deadline (`default_api_timeout`) passed. `last` is the
    /// cause of the final failed attempt (e.g. [`Error::Connect`] for a broker that is down,
    /// [`Error::Broker`] with `COORDINATOR_NOT_AVAILABLE`). Retriable: a later attempt may
    /// succeed.
    #[error(
        "{operation} did not succeed within {timeout:?} ({attempts} attempts); last error: {last}"
    )]
    DeadlineExceeded {
        /// The operation (API name such as `JoinGroup`, or `Metadata`, `FindCoordinator`).
        operation: &'static str,
        /// The deadline, from the start of the operation.
        timeout: Duration,
        /// How many attempts were made.
        attempts: u32,
        /// Why the last attempt failed.
        #[source]
        last: Box<Error>,
    },

    /// A record handed to the [`crate::Writer`] was not written, or a writer call failed
    /// (`send`, `flush`, `close`). Retriable and error code as [`ProduceError`] says.
    #[error(transparent)]
    Produce(ProduceError),

    /// Records of one [`crate::Writer::write`] call failed. Retriable when every failed record's
    /// error is; the error code is the first failed record's that has one.
    #[error(transparent)]
    Write(WriteErrors),

    /// A [`crate::WriterBuilder`] setting is out of range or contradicts another. Not retriable.
    #[error("invalid writer configuration: {0}")]
    WriterConfig(#[from] WriterConfigError),

    /// A partition balancer could not choose a partition (from [`crate::balancer`]). Retriable as
    /// [`BalanceError::is_retriable`] says; `UNKNOWN_TOPIC_OR_PARTITION` for a partition the
    /// topic lacks.
    #[error("cannot choose a partition: {0}")]
    Balance(#[from] BalanceError),

    /// A SASL mechism failed outside a connection's login (from [`crate::sasl`], e.g. a
    /// `Session::step` driven by hand); a login failure is [`Error::Sasl`]. Retriable as
    /// [`SaslError::is_retriable`] says (credential sources only).
    #[error("SASL mechanism error: {0}")]
    Mechanism(#[from] SaslError),

    /// A consumer group assignor refused its input (from [`crate::group_balancer`]). Not
    /// retriable.
    #[error("cannot assign partitions: {0}")]
    Assign(#[from] AssignError),

    /// Consumer protocol metadata (JoinGroup / SyncGroup member data) could not be encoded or
    /// decoded (from [`crate::group_balancer`]). Not retriable.
    #[error("consumer protocol metadata: {0}")]
    ConsumerProtocol(#[from] MetadataError),

    /// The [`crate::Reader`] stopped fetching a partition (out of range without a reset policy,
    /// log truncation, a corrupt batch, a broker error no retry fixes) or was closed. Retriable
    /// and error code as [`ReaderError`] says.
    #[error(transparent)]
    Reader(ReaderError),
    /// Java / librdkafka properties could not configure a builder: an unknown or unsupported
    /// name, a bad value, a missing or contradicting setting ([`crate::properties`]).
    #[error("invalid properties: {0}")]
    Properties(#[from] PropertyError),

    /// A consumer group member ([`crate::GroupReader`]) was fenced, left the group after
    /// `max_poll_interval`, fell back from KIP-848, had a commit refused, was refused by the
    /// coordinator, or was closed. Retriable and error code as [`GroupError`] says.
    #[error(transparent)]
    Group(GroupError),

    /// A share group member ([`crate::ShareReader`], KIP-932) refused a call (unacknowledged
    /// records in explicit mode, a record it cannot acknowledge), left the group after
    /// `max_poll_interval`, was refused by the coordinator, or was closed. Retriable and error
    /// code as [`ShareError`] says.
    #[error(transparent)]
    Share(ShareError),

    /// A client has no KIP-714 client instance id ([`telemetry::TelemetryError`]:
    /// metrics push off, the cluster takes none, or none in time).
    #[error(transparent)]
    Telemetry(#[from] telemetry::TelemetryError),
}

impl From<ProduceError> for Error {
    fn from(e: ProduceError) -> Self {
        Error::Produce(e)
    }
}

impl From<WriteErrors> for Error {
    fn from(e: WriteErrors) -> Self {
        Error::Write(e)
    }
}

impl Error {
    /// Whether repeating the operation can succeed: true for connection problems and timeouts,
    /// false for bad input, encoding and decoding errors.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Connect { .. }
            | Error::Io(_)
            | Error::Timeout { .. }
            | Error::ConnectTimeout { .. }
            | Error::UnknownBroker { .. }
            | Error::RebootstrapRequired { .. }
            | Error::DeadlineExceeded { .. } => true,
            Error::ConnectionClosed { cause, .. } => !matches!(
                cause,
                CloseCause::ClosedByClient
                    | CloseCause::InvalidFrameSize { .. }
                    | CloseCause::TlsRecordReceived
                    | CloseCause::HttpReceived
                    | CloseCause::TextReceived { .. }
            ),
            Error::Tls { .. } | Error::Sasl { .. } => false,
            Error::Broker { code, .. } => code.is_retriable(),
            Error::Records(e) => e.is_retriable(),
            Error::Produce(e) => e.is_retriable(),
            Error::Write(e) => e.is_retriable(),
            Error::Balance(e) => e.is_retriable(),
            Error::Mechanism(e) => e.is_retriable(),
            Error::Reader(e) => e.is_retriable(),
            Error::Group(e) => e.is_retriable(),
            Error::Share(e) => e.is_retriable(),
            Error::Telemetry(e) => e.is_retriable(),
            Error::Encode(_)
            | Error::Decode(_)
            | Error::Compression(_)
            | Error::WriterConfig(_)
            | Error::Assign(_)
            | Error::ConsumerProtocol(_)
            | Error::UnsupportedVersion { .. }
            | Error::RequestTooLarge { .. }
            | Error::InvalidArgument(_)
            | Error::NotSent { .. }
            | Error::Config(_)
            | Error::Properties(_)
            | Error::Protocol(_) => false,
        }
    }
}

impl Error {
    /// An [`Error::Broker`] for `code`.
    pub(crate) fn broker(
        operation: &'static str,
        code: ErrorCode,
        message: Option<String>,
    ) -> Error {
        Error::Broker {
            operation,
            code,
            message,
        }
    }

    /// The Kafka error code carried by this error, if any: the broker's, the wrapped error's
    /// (a [`ProduceError`], the first failed record of [`WriteErrors`]), the code Kafka uses for
    /// a local record batch or codec failure (`CORRUPT_MESSAGE`, `MESSAGE_TOO_LARGE`,
    /// `UNSUPPORTED_COMPRESSION_TYPE`), `UNKNOWN_TOPIC_OR_PARTITION` for a partition a topic
    /// lacks, `SASL_AUTHENTICATION_FAILED` for credentials a mechanism saw refused.
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            Error::Broker { code, .. } | Error::NotSent { code, .. } => Some(*code),
            Error::Sasl { code, .. } => *code,
            Error::RebootstrapRequired { .. } => Some(ErrorCode::REBOOTSTRAP_REQUIRED),
            Error::DeadlineExceeded { last, .. } => last.error_code(),
            Error::Produce(e) => e.error_code(),
            Error::Write(e) => e.error_code(),
            Error::Reader(e) => e.error_code(),
            Error::Group(e) => e.error_code(),
            Error::Share(e) => e.error_code(),
            Error::Records(e) => e.kafka_error_name().and_then(code_named),
            Error::Compression(e) => e.kafka_error_name().and_then(code_named),
            Error::Balance(BalanceError::UnknownPartition { .. }) => {
                Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
            }
            Error::Mechanism(SaslError::AuthenticationFailed { .. }) => {
                Some(ErrorCode::SASL_AUTHENTICATION_FAILED)
            }
            _ => None,
        }
    }
}

/// How an application recovers from an error, in KIP-1050's categories (Java's exception
/// classes `RetriableException`, `RefreshRetriableException`, `TransactionAbortableException`,
/// `ApplicationRecoverableException`, `InvalidConfigurationException`; every other
/// `KafkaException` is [`ErrorCategory::Fatal`]). A broker's error code is placed by Kafka's
/// error table (`ErrorCode::is_transaction_abortable`, `is_application_recoverable`,
/// `is_refresh_retriable`, `is_retriable`: [`ErrorCategory::of`]); an error of the client's
/// own by what it says. From [`Error::category`], [`ProduceError::category`],
/// [`crate::TransactionError::category`] and [`WriteErrors::category`]. Source: KIP-1050.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCategory {
    /// The same operation may succeed if made again (Java `RetriableException`), e.g.
    /// `NOT_ENOUGH_REPLICAS`, `REQUEST_TIMED_OUT`, a lost connection, a timeout.
    Retriable,
    /// Retriable once the client's metadata (leaders, coordinators) is refreshed (Java
    /// `RefreshRetriableException`), e.g. `NOT_LEADER_OR_FOLLOWER`, `UNKNOWN_TOPIC_ID`,
    /// `NOT_COORDINATOR`. The client refreshes and retries these itself until its timeout.
    RefreshRetriable,
    /// The open transaction cannot commit: abort it, then go on with the same writer (Java
    /// `TransactionAbortableException`, `TRANSACTION_ABORTABLE`, KIP-890).
    TransactionAbortable,
    /// The client cannot go on, the application can: close the writer and build a new one
    /// (or rejoin the group) (Java `ApplicationRecoverableException`: `PRODUCER_FENCED`,
    /// `INVALID_PRODUCER_EPOCH`, `INVALID_PRODUCER_ID_MAPPING`, `ILLEGAL_GENERATION`,
    /// `UNKNOWN_MEMBER_ID`, `FENCED_INSTANCE_ID`).
    ApplicationRecoverable,
    /// A setting is wrong (Java `InvalidConfigurationException`, `INVALID_CONFIG`): fix it.
    InvalidConfiguration,
    /// None of the above (any other Java `KafkaException`): the operation failed, and
    /// repeating it as it was will not help (an authorization failure, a record too large,
    /// bad input, an unsupported version).
    Fatal,
}

impl ErrorCategory {
    /// The category of the broker's error `code` from Kafka's error table (`None` for
    /// `NONE`): abortable, application-recoverable, refresh-retriable, retriable, in that
    /// order (the table puts a code in at most one of the first three, and every
    /// refresh-retriable code is retriable); `INVALID_CONFIG` is
    /// [`ErrorCategory::InvalidConfiguration`]; any other code [`ErrorCategory::Fatal`].
    pub fn of(code: ErrorCode) -> Option<ErrorCategory> {
        Some(if code.is_ok() {
            return None;
        } else if code.is_transaction_abortable() {
            ErrorCategory::TransactionAbortable
        } else if code.is_application_recoverable() {
            ErrorCategory::ApplicationRecoverable
        } else if code.is_refresh_retriable() {
            ErrorCategory::RefreshRetriable
        } else if code.is_retriable() {
            ErrorCategory::Retriable
        } else if code == ErrorCode::INVALID_CONFIG {
            ErrorCategory::InvalidConfiguration
        } else {
            ErrorCategory::Fatal
        })
    }

    /// Whether the category is retriable ([`ErrorCategory::Retriable`] or
    /// [`ErrorCategory::RefreshRetriable`]): what `is_retriable` of every error says.
    pub fn is_retriable(self) -> bool {
        matches!(
            self,
            ErrorCategory::Retriable | ErrorCategory::RefreshRetriable
        )
    }

    /// The category of an error that is `retriable` and carries `code`: the code's when it
    /// agrees, else [`ErrorCategory::Retriable`] or [`ErrorCategory::Fatal`].
    pub(crate) fn from_parts(code: Option<ErrorCode>, retriable: bool) -> ErrorCategory {
        match code.and_then(ErrorCategory::of) {
            Some(c) if c.is_retriable() == retriable => c,
            _ if retriable => ErrorCategory::Retriable,
            _ => ErrorCategory::Fatal,
        }
    }

    /// The name of Java's exception class for the category (`TransactionAbortableException`...).
    pub fn java_name(self) -> &'static str {
        match self {
            ErrorCategory::Retriable => "RetriableException",
            ErrorCategory::RefreshRetriable => "RefreshRetriableException",
            ErrorCategory::TransactionAbortable => "TransactionAbortableException",
            ErrorCategory::ApplicationRecoverable => "ApplicationRecoverableException",
            ErrorCategory::InvalidConfiguration => "InvalidConfigurationException",
            ErrorCategory::Fatal => "KafkaException",
        }
    }
}

impl fmt::Display for ErrorCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.java_name())
    }
}

impl Error {
    /// How the application recovers from this error (KIP-1050, [`ErrorCategory`]): a
    /// producer or transaction error's own category ([`ProduceError::category`]), a
    /// configuration error's [`ErrorCategory::InvalidConfiguration`], else the category of its
    /// error code when that agrees with [`Error::is_retriable`], else
    /// [`ErrorCategory::Retriable`] or [`ErrorCategory::Fatal`] as `is_retriable` says.
    pub fn category(&self) -> ErrorCategory {
        match self {
            Error::Produce(e) => e.category(),
            Error::Write(e) => e.category(),
            Error::Config(_) | Error::WriterConfig(_) | Error::Properties(_) => {
                ErrorCategory::InvalidConfiguration
            }
            _ => ErrorCategory::from_parts(self.error_code(), self.is_retriable()),
        }
    }
}

/// The error code Kafka names `name` (the protocol crates give names for local failures).
fn code_named(name: &str) -> Option<ErrorCode> {
    // Known codes are -1 and 0 up to ~130, so a name that exists is found within that many steps
    // (the protocol crates only give names that exist).
    (-1..=i16::MAX).map(ErrorCode).find(|c| c.name() == name)
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit_compress::Compression;

    /// Every code of Kafka's error table (`error-codes.tsv`, generated into `ErrorCode`).
    fn table() -> impl Iterator<Item = ErrorCode> {
        (-1..=i16::from(u8::MAX))
            .map(ErrorCode)
            .filter(|c| c.is_known() && !c.is_ok())
    }

    /// KIP-1050: each code of the table is in one category, the one the table's columns give;
    /// the categories' retriability is the code's; broker and producer errors carrying the
    /// code say the same category and retriability.
    #[test]
    fn every_code_of_the_table_has_its_kip_1050_category() {
        let mut seen = std::collections::HashMap::new();
        for code in table() {
            let c = ErrorCategory::of(code).expect("an error");
            *seen.entry(c).or_insert(0) += 1;
            assert_eq!(c.is_retriable(), code.is_retriable(), "{code}: {c}");
            assert_eq!(
                c == ErrorCategory::TransactionAbortable,
                code.is_transaction_abortable(),
                "{code}"
            );
            assert_eq!(
                c == ErrorCategory::ApplicationRecoverable,
                code.is_application_recoverable(),
                "{code}"
            );
            assert_eq!(
                c == ErrorCategory::RefreshRetriable,
                code.is_refresh_retriable(),
                "{code}"
            );
            let broker = Error::broker("Produce", code, None);
            assert_eq!(broker.is_retriable(), code.is_retriable(), "{code}");
            assert_eq!(broker.category(), c, "{code}");
            let produce = ProduceError::Broker {
                code,
                message: None,
                record_error: None,
            };
            assert_eq!(produce.is_retriable(), code.is_retriable(), "{code}");
            assert_eq!(produce.category(), c, "{code}");
            let wrapped = Error::Produce(produce);
            assert_eq!(wrapped.category(), c, "{code}");
            assert_eq!(wrapped.is_retriable(), code.is_retriable(), "{code}");
        }
        assert_eq!(ErrorCategory::of(ErrorCode::NONE), None);
        assert_eq!(seen[&ErrorCategory::TransactionAbortable], 1);
        assert_eq!(seen[&ErrorCategory::ApplicationRecoverable], 6);
        assert_eq!(seen[&ErrorCategory::InvalidConfiguration], 1);
        assert!(seen[&ErrorCategory::RefreshRetriable] >= 15);
        assert_eq!(
            ErrorCategory::of(ErrorCode::TRANSACTION_ABORTABLE),
            Some(ErrorCategory::TransactionAbortable)
        );
        assert_eq!(
            ErrorCategory::of(ErrorCode::PRODUCER_FENCED),
            Some(ErrorCategory::ApplicationRecoverable)
        );
        assert_eq!(
            ErrorCategory::of(ErrorCode::UNKNOWN_TOPIC_ID),
            Some(ErrorCategory::RefreshRetriable)
        );
        assert_eq!(
            ErrorCategory::of(ErrorCode::TOPIC_AUTHORIZATION_FAILED),
            Some(ErrorCategory::Fatal)
        );
    }

    /// Errors without a broker code: the client's own retriable errors are retriable, its
    /// configuration errors InvalidConfiguration, the rest fatal; a write's failures say the
    /// category of the first record that a retry cannot help.
    #[test]
    fn client_errors_have_a_category_too() {
        let timeout = Error::Timeout {
            operation: "Produce",
            timeout: Duration::from_secs(1),
        };
        assert_eq!(timeout.category(), ErrorCategory::Retriable);
        assert_eq!(
            Error::Config("x".into()).category(),
            ErrorCategory::InvalidConfiguration
        );
        assert_eq!(
            Error::InvalidArgument("x".into()).category(),
            ErrorCategory::Fatal
        );
        assert_eq!(
            ProduceError::TransactionAborted.category(),
            ErrorCategory::Retriable
        );
        assert_eq!(
            ProduceError::RecordTooLarge { size: 2, max: 1 }.category(),
            ErrorCategory::Fatal
        );
        let broker = |code| ProduceError::Broker {
            code,
            message: None,
            record_error: None,
        };
        let write = WriteErrors {
            errors: vec![
                (0, broker(ErrorCode::NOT_LEADER_OR_FOLLOWER)),
                (1, broker(ErrorCode::TRANSACTION_ABORTABLE)),
            ],
            results: Vec::new(),
        };
        assert_eq!(write.category(), ErrorCategory::TransactionAbortable);
        assert_eq!(
            Error::Write(write).category(),
            ErrorCategory::TransactionAbortable
        );
        let refresh = WriteErrors {
            errors: vec![(0, broker(ErrorCode::NOT_LEADER_OR_FOLLOWER))],
            results: Vec::new(),
        };
        assert_eq!(refresh.category(), ErrorCategory::RefreshRetriable);
    }

    /// `?` from every public error type into [`Error`] (the function signatures are the test).
    fn question_mark<E>(r: std::result::Result<(), E>) -> Result<()>
    where
        Error: From<E>,
    {
        r?;
        Ok(())
    }

    #[test]
    fn produce_errors_keep_their_code_and_retriability() {
        let broker = ProduceError::Broker {
            code: ErrorCode::TOPIC_AUTHORIZATION_FAILED,
            message: None,
            record_error: None,
        };
        let e = question_mark(Err(broker)).unwrap_err();
        assert!(matches!(e, Error::Produce(_)), "{e:?}");
        assert_eq!(e.error_code(), Some(ErrorCode::TOPIC_AUTHORIZATION_FAILED));
        assert!(!e.is_retriable());

        let full = Error::from(ProduceError::QueueFull {
            buffered_records: 1,
            buffered_bytes: 1,
        });
        assert!(full.is_retriable());
        assert_eq!(full.error_code(), None);

        // A client error inside a delivery timeout: the cause's code comes through.
        let timeout = ProduceError::DeliveryTimeout {
            timeout: std::time::Duration::from_millis(1),
            cause: Some(Box::new(ProduceError::from(Error::broker(
                "Produce",
                ErrorCode::NOT_LEADER_OR_FOLLOWER,
                None,
            )))),
        };
        let e = Error::from(timeout);
        assert!(e.is_retriable());
        assert_eq!(e.error_code(), Some(ErrorCode::NOT_LEADER_OR_FOLLOWER));
        assert!(e.to_string().contains("delivery timeout"), "{e}");
    }

    #[test]
    fn write_errors_answer_for_every_failed_record() {
        let failed = |e: ProduceError| (0, e);
        let mut errors = WriteErrors {
            errors: vec![
                failed(ProduceError::QueueFull {
                    buffered_records: 1,
                    buffered_bytes: 1,
                }),
                failed(ProduceError::RecordTooLarge { size: 2, max: 1 }),
            ],
            results: Vec::new(),
        };
        let e = question_mark(Err(errors.clone())).unwrap_err();
        assert!(matches!(e, Error::Write(_)), "{e:?}");
        // Not every failed record can be retried; the first code is MESSAGE_TOO_LARGE's.
        assert!(!e.is_retriable());
        assert_eq!(e.error_code(), Some(ErrorCode::MESSAGE_TOO_LARGE));
        errors.errors.pop();
        assert!(Error::from(errors).is_retriable());
    }

    #[test]
    fn config_balance_sasl_and_group_errors_convert() {
        let e = question_mark(Err(WriterConfigError::Conflict("acks"))).unwrap_err();
        assert!(
            matches!(e, Error::WriterConfig(_)) && !e.is_retriable(),
            "{e:?}"
        );

        let unknown = BalanceError::UnknownPartition {
            topic: "t".into(),
            partition: 9,
            count: 3,
        };
        let e = question_mark(Err(unknown)).unwrap_err();
        assert_eq!(e.error_code(), Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION));
        assert!(!e.is_retriable());
        let none = BalanceError::NoPartitions { topic: "t".into() };
        assert!(Error::from(none).is_retriable());

        let refused = SaslError::AuthenticationFailed {
            mechanism: "PLAIN",
            reason: "bad password".into(),
        };
        let e = question_mark(Err(refused)).unwrap_err();
        assert_eq!(e.error_code(), Some(ErrorCode::SASL_AUTHENTICATION_FAILED));
        assert!(!e.is_retriable());
        let creds = SaslError::Credentials {
            mechanism: "AWS_MSK_IAM",
            reason: "no credentials yet".into(),
        };
        assert!(Error::from(creds).is_retriable());

        let e = question_mark(Err(AssignError::DuplicateMember("m".into()))).unwrap_err();
        assert!(matches!(e, Error::Assign(_)) && !e.is_retriable(), "{e:?}");
        let e = question_mark(Err(MetadataError::MissingVersion(1))).unwrap_err();
        assert!(
            matches!(e, Error::ConsumerProtocol(_)) && !e.is_retriable(),
            "{e:?}"
        );
    }

    #[test]
    fn local_record_and_codec_failures_carry_kafkas_code() {
        let e = question_mark(Err(CompressError::UnsupportedCodec {
            compression: Compression::Zstd,
        }))
        .unwrap_err();
        assert_eq!(
            e.error_code(),
            Some(ErrorCode::UNSUPPORTED_COMPRESSION_TYPE)
        );
        assert!(!e.is_retriable());

        let crc = RecordsError::CrcMismatch {
            base_offset: 0,
            stored: 1,
            computed: 2,
        };
        let e = question_mark(Err(crc)).unwrap_err();
        assert_eq!(e.error_code(), Some(ErrorCode::CORRUPT_MESSAGE));
        // Kafka retries CORRUPT_MESSAGE: the bytes may have been damaged in transit.
        assert!(e.is_retriable());
        assert_eq!(
            Error::from(RecordsError::BatchFull).error_code(),
            None,
            "a local limit has no Kafka code"
        );
    }
}
