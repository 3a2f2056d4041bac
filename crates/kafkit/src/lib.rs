//! An async Apache Kafka client: a producer, a consumer, a consumer group member, a share group
//! member and an admin client on one cluster connection manager, with Go's kafka-go connections underneath.
//!
//! What an application uses:
//! - [`Writer`], the producer: records are batched per partition, and each broker's sender puts
//!   every ready batch of the partitions it leads, across all topics, into ONE Produce request;
//!   idempotent by default (KIP-98), with retries, backpressure and per-record outcomes
//!   ([`DeliveryFuture`], [`WriteErrors`]). A transactional `Writer` (KIP-98) takes transactions
//!   v2 (KIP-890 part 2) wherever the broker finalizes `transaction.version` 2, and the classic
//!   flow elsewhere.
//! - [`Reader`], the consumer of assigned partitions: one Fetch per broker per round, fetch
//!   sessions (KIP-227), leader epochs (KIP-320), `read_committed`, rack-aware fetching (KIP-392),
//!   bounded prefetch.
//! - [`GroupReader`], a consumer group member (classic and KIP-848) on a `Reader`, with the calls
//!   of Java's `KafkaConsumer` and librdkafka: [`GroupReader::next`] (an inherent async fn; it is
//!   also a `futures_core::Stream`) or [`GroupReader::next_batch`], [`GroupReader::seek`],
//!   [`GroupReader::pause`] / [`GroupReader::resume`], [`GroupReader::commit_record`],
//!   librdkafka's at-least-once [`GroupReader::store_offset`], [`GroupReader::subscribe`] /
//!   [`GroupReader::unsubscribe`] on a running member.
//! - [`ShareReader`], a share group member (KIP-932, "queues for Kafka"): records shared among
//!   the members one at a time, each acknowledged ([`AcknowledgeType`]: accept, release, reject,
//!   renew), one ShareFetch per broker per round, the calls of Java's `KafkaShareConsumer`.
//! - [`Client`], the admin client ([`admin`]): topics, configs, ACLs, groups and their offsets,
//!   quotas, SCRAM users, reassignments, delegation tokens, transactions.
//! - [`transact`]: consume-transform-produce, exactly once, on a `GroupReader` and a
//!   transactional `Writer`.
//!
//! All of them take a [`Transport`], which manages a whole cluster: bootstrap, a metadata cache,
//! pooled connections per broker and [`ConnKind`], coordinators, and
//! [`Transport::round_trip`], which sends any supported request where it belongs and retries what
//! can be retried until a deadline. [`Properties`] carry Java / librdkafka configuration names
//! over (`linger.ms`, `security.protocol`, `sasl.jaas.config`...): `from_properties` on
//! [`DialerBuilder`], [`TransportBuilder`], [`WriterBuilder`], [`ReaderBuilder`],
//! [`GroupReaderBuilder`] and [`ShareReaderBuilder`] reads them, as one table ([`properties`])
//! says.
//!
//! ```
//! use kafkit::admin::NewTopic;
//! use kafkit::{AutoOffsetReset, Client, GroupReader, ProducerRecord, Reader, Transport, Writer};
//! use std::time::Duration;
//!
//! let record = ProducerRecord::new("orders", "hello").key("k");
//! assert_eq!(record.topic.as_deref(), Some("orders"));
//!
//! # let run = async {
//! // With a broker at hand (`cargo xtask broker start` listens on 127.0.0.1:19092):
//! let transport = Transport::builder(["127.0.0.1:19092"]).build()?;
//! let admin = Client::new(transport.clone());
//! admin.create_topics(&[NewTopic::new("orders", 3, 1)], false).await?;
//! let writer = Writer::builder(transport.clone()).linger(Duration::from_millis(5)).build()?;
//! let written = writer.produce(record).await?;
//! println!("written at {}/{}@{}", written.topic, written.partition, written.offset);
//!
//! let mut member = GroupReader::builder(transport.clone(), "billing")
//!     .subscribe(["orders"])
//!     .auto_offset_reset(AutoOffsetReset::Earliest)
//!     .build()?;
//! if let Some(record) = member.next().await {
//!     let record = record?;
//!     member.commit_record(&record).await?;
//! }
//! member.close().await;
//! let _ = Reader::builder(transport).build()?; // partitions by hand: `Reader::assign`
//! # Ok::<(), kafkit::Error>(())
//! # };
//! # drop(run);
//! ```
//!
//! The low road, for programs that talk to one broker by hand: a [`Dialer`] opens a [`Conn`]. A
//! `Conn` pipelines requests: several callers may use it at once, up to
//! `max_in_flight_requests_per_connection` requests are on the wire, and each response is
//! matched to its caller by correlation id. API versions are negotiated when the connection
//! opens (KIP-35, KIP-511). Its signature method, [`Conn::write_multi`], sends one Produce
//! request carrying batches for many topics and partitions. Connections can use TLS
//! ([`TlsConfig`], rustls) and SASL ([`sasl`] mechanisms: SaslHandshake, SaslAuthenticate,
//! KIP-368 re-authentication).
//!
//! ```
//! use kafkit::{Acks, Bytes, Compression, Dialer, ProduceBatches};
//! use kafkit::protocol::records::Record;
//! use std::time::Duration;
//!
//! let dialer = Dialer::builder()
//!     .client_id("doc-example")
//!     .request_timeout(Duration::from_secs(5))
//!     .build();
//! assert_eq!(dialer.connect_timeout(), Duration::from_secs(10));
//!
//! // Batches for two topic-partitions, to be sent in ONE Produce request.
//! let mut batches = ProduceBatches::new(Compression::None);
//! batches.add_records("orders", 0, &[Record::new(None, Some(Bytes::from_static(b"a")))])?;
//! batches.add_records("audit", 3, &[Record::new(Some(Bytes::from_static(b"k")), None)])?;
//! assert_eq!(batches.len(), 2);
//!
//! // TLS (cargo feature `tls`; verification always on; the webpki roots here, `ca_pem` for a
//! // private CA) and SASL/SCRAM for secured clusters.
//! # #[cfg(any(feature = "tls", feature = "tls-graviola"))] {
//! use kafkit::{TlsConfig, sasl::Scram};
//! let secure = Dialer::builder()
//!     .tls(TlsConfig::builder().build()?)
//!     .sasl(Scram::sha512("alice", "alice-secret"))
//!     .build();
//! assert!(!format!("{secure:?}").contains("alice-secret"));
//! # }
//!
//! # let run = async {
//! let conn = dialer.dial("127.0.0.1:9092").await?;
//! let results = conn.write_multi(&batches, Acks::All, Duration::from_secs(30)).await?;
//! for r in results {
//!     println!("{}/{}: {} at offset {}", r.topic, r.partition, r.error_code, r.base_offset);
//! }
//! # Ok::<(), kafkit::Error>(())
//! # };
//! # drop(run);
//! # Ok::<(), kafkit::Error>(())
//! ```
//!
//! This crate is the one to depend on: it re-exports the crates its API uses ([`protocol`],
//! [`compress`], [`balancer`], [`group_balancer`], [`sasl`]) and [`Bytes`], and every error
//! converts into [`Error`], whose [`Error::category`] says how to recover from it (KIP-1050,
//! [`ErrorCategory`]).
//!
//! # Guides
//!
//! Task by task, with code that compiles and a runnable example each
//! ([the index](https://github.com/kafkit/kafkit/blob/main/docs/guide/README.md)):
//! - [producing](https://github.com/kafkit/kafkit/blob/main/docs/guide/producing.md): keys,
//!   balancers, acks, idempotence, one Produce request per broker, per-record errors;
//! - [consuming](https://github.com/kafkit/kafkit/blob/main/docs/guide/consuming.md): the
//!   [`Reader`], [`StartOffset`], seek, pause / resume, `read_committed`;
//! - [consumer groups](https://github.com/kafkit/kafkit/blob/main/docs/guide/groups.md):
//!   protocols, commits, rebalance listeners, static membership;
//! - [transactions](https://github.com/kafkit/kafkit/blob/main/docs/guide/transactions.md):
//!   consume-transform-produce, exactly once;
//! - [share groups](https://github.com/kafkit/kafkit/blob/main/docs/guide/share-groups.md): the
//!   [`ShareReader`] work queue (Kafka 4.2+);
//! - [security](https://github.com/kafkit/kafkit/blob/main/docs/guide/security.md): TLS, mTLS,
//!   PLAIN, SCRAM, OAUTHBEARER, AWS_MSK_IAM;
//! - [observability](https://github.com/kafkit/kafkit/blob/main/docs/guide/observability.md):
//!   `tracing`, the `metrics` facade, KIP-714, OpenTelemetry;
//! - [tuning](https://github.com/kafkit/kafkit/blob/main/docs/guide/tuning.md): throughput,
//!   latency and memory settings with their Java names;
//! - [coming from rust-rdkafka](https://github.com/kafkit/kafkit/blob/main/docs/guide/from-rust-rdkafka.md).
//!
//! # Cargo features
//!
//! | feature | default | what it brings |
//! |---|---|---|
//! | `gzip`, `snappy`, `lz4`, `zstd` | on | the record batch codec of that name ([`Compression`]); without it, a batch of that codec can be neither written nor read (the error carries [`compress::CompressError::UnsupportedCodec`], Kafka's `UNSUPPORTED_COMPRESSION_TYPE`). `zstd` is libzstd and needs a C compiler |
//! | `zstd-pure` | off | zstd in pure Rust (ruzstd): reads every zstd batch, writes at ruzstd's one level (about zstd level 1); `zstd` wins when both are on |
//! | `tls` | on | [`TlsConfig`] and `DialerBuilder::tls` (rustls, ring: needs a C compiler); without a TLS feature, connections are plaintext only |
//! | `tls-graviola` | off | the same on rustls with the graviola provider (no C compiler; x86_64 and aarch64 only); `tls` wins when both are on |
//! | `rustls` | off | the same with no provider built in: the application installs one (`rustls::crypto::CryptoProvider::install_default`) |
//! | `aws-msk-iam` | on | the AWS_MSK_IAM SASL mechanism (`sasl::AwsMskIam`, SigV4) |
//! | `metrics` | off | metrics through the `metrics` facade (`kafkit::meter`) |
//! | `pure-rust` | off | `gzip`, `snappy`, `lz4`, `zstd-pure`, `tls-graviola`, `aws-msk-iam`: builds without a C compiler |
// docs.rs builds with `--cfg docsrs` (Cargo.toml): nightly rustdoc then marks each item behind a
// cargo feature with that feature (`doc_cfg` shows the `#[cfg]` of an item by itself).
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod admin;
#[cfg(test)]
mod architecture;
mod conn;
mod dialer;
mod error;
mod group;
mod ops;
pub mod properties;
mod reader;
mod share;
pub mod telemetry;
mod time;
mod tls;
pub mod transact;
mod transport;
mod writer;

pub use admin::Client;
/// Payloads, keys and header values are [`bytes::Bytes`] (cheaply cloned, reference-counted).
pub use bytes::Bytes;
pub use conn::fetch::{FetchParams, FetchedPartition};
pub use conn::metadata::{Broker, Metadata, PartitionMetadata, TopicMetadata};
pub use conn::produce::{Acks, ProduceBatches, ProducedPartition, RecordError};
pub use conn::{BrokerVersions, Conn};
pub use dialer::{
    DEFAULT_CLIENT_ID, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_RESPONSE_SIZE,
    DEFAULT_REQUEST_TIMEOUT, DEFAULT_RESPONSE_POOL_MAX_BYTES, Dialer, DialerBuilder,
    RESPONSE_POOL_CLASSES,
};
pub use error::TlsErrorKind;
pub use error::{CloseCause, Error, ErrorCategory, Result};
pub use group::{
    CloseOptions, CommitFuture, GroupError, GroupHandle, GroupMembershipOperation, GroupProtocol,
    GroupReader, GroupReaderBuilder, GroupStats, ListenerFuture, RebalanceListener,
};
/// Partition balancers: the [`Writer`]'s choice of partition per record (`kafkit-balancer`).
pub use kafkit_balancer as balancer;
/// Record batch compression codecs (`kafkit-compress`).
pub use kafkit_compress as compress;
pub use kafkit_compress::{Compression, CompressionConfig};
/// Consumer group assignors and consumer protocol metadata (`kafkit-group-balancer`).
pub use kafkit_group_balancer as group_balancer;
/// Pooled page buffers: `BufMut` writes, `Buf` reads, zero-copy slices that become [`Bytes`]
/// (`kafkit-pagebuf`).
pub use kafkit_pagebuf as pagebuf;
/// The Kafka wire protocol: every request and response type, record batches, error codes
/// (`kafkit-protocol`), for [`Transport::round_trip`] and [`Conn::request`].
pub use kafkit_protocol as protocol;
/// Kafka protocol error codes, as found in per-partition results.
pub use kafkit_protocol::ErrorCode;
/// Records and headers as written and read (from [`protocol::records`]).
pub use kafkit_protocol::records::{Record, RecordHeader};
/// SASL mechanisms for [`DialerBuilder::sasl`]: PLAIN, SCRAM, OAUTHBEARER, AWS_MSK_IAM
/// (`kafkit-sasl`).
pub use kafkit_sasl as sasl;
pub use ops::meter;
pub use ops::offsets::{ConsumerGroupMetadata, IsolationLevel, ListedOffset, OffsetSpec};
pub use ops::otel::{
    OTEL_SEMCONV_VERSION, OTEL_TARGET, TraceParent, TraceParentHook, TraceParentSource,
};
pub use properties::{Properties, PropertyError};
pub use reader::{
    AutoOffsetReset, ConsumerRecord, FetchState, PartitionRecords, PartitionStats, Position,
    Reader, ReaderBuilder, ReaderError, ReaderStats, StartOffset,
};
pub use share::{
    AcknowledgeType, AcknowledgementCommit, AcknowledgementMode, ShareAcknowledger,
    ShareAcquireMode, ShareError, ShareReader, ShareReaderBuilder, ShareRecord, ShareStats,
    ShareStream,
};
#[cfg(feature = "rustls")]
pub use tls::{TlsConfig, TlsConfigBuilder};
pub use transport::{
    ConnKind, CoordinatorType, DEFAULT_API_TIMEOUT, DEFAULT_CONNECTIONS_MAX_IDLE,
    DEFAULT_METADATA_MAX_AGE, DEFAULT_METADATA_RECOVERY_REBOOTSTRAP_TRIGGER, DEFAULT_RETRY_BACKOFF,
    DEFAULT_RETRY_BACKOFF_MAX, MetadataRecoveryStrategy, Routed, Transport, TransportBuilder,
};
/// Not part of the API: hooks for the benches (docs/benchmarks.md), which may change at any
/// time.
#[doc(hidden)]
pub mod bench {
    pub use crate::writer::{EncodePathStats, encode_path};
}
pub use writer::{
    CompletionCallback, DeliveryFuture, ProduceError, ProducerRecord, ProducerRecordRef,
    RecordMetadata, TransactionError, TransactionPhase, WriteErrors, Writer, WriterBuilder,
    WriterConfigError, WriterStats,
};
