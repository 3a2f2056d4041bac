//! Java / librdkafka configuration names ([`Properties`]): what lets a user carry a
//! `client.properties` or a librdkafka config over. [`TransportBuilder::from_properties`],
//! [`WriterBuilder::from_properties`], [`ReaderBuilder::from_properties`],
//! [`GroupReaderBuilder::from_properties`] and [`ShareReaderBuilder::from_properties`] read the
//! names of the table below.
//!
//! Every builder reads the names of its scope (`T` transport and dialer, `W` writer, `R` reader,
//! `G` consumer group member, `S` share group member) and skips the names of the other scopes,
//! so ONE set of properties can configure all five.
//! A name in no scope fails with [`PropertyError::Unknown`]; a known Java / librdkafka name that
//! kafkit does not implement fails with [`PropertyError::Unsupported`] (never silently ignored);
//! a value that does not parse fails with [`PropertyError::InvalidValue`]. Ranges are then
//! checked by each builder's `build`, as for the builder methods. Time spans (`ms`) are
//! milliseconds; the values of secret names (`sasl.password`, `sasl.jaas.config`, `ssl.key.pem`)
//! never appear in an error or in `Debug`.
//!
//! Each row of [`PROPERTIES`] also carries the name's default and unit
//! ([`PropertyInfo::default`], [`PropertyInfo::unit`]), as the command line's `kafkit -X list`
//! prints them.
//!
//! | Name (aliases) | Scope | Value | Builder setting |
//! |---|---|---|---|
//! | `bootstrap.servers` (`metadata.broker.list`) | T | `host:port[,host:port]` | [`Transport::builder`]'s list (required by [`TransportBuilder::from_properties`]) |
//! | `client.id` | T | string | [`DialerBuilder::client_id`] |
//! | `socket.connection.setup.timeout.ms` | T | ms | [`DialerBuilder::connect_timeout`] |
//! | `request.timeout.ms` | T, W | ms | [`DialerBuilder::request_timeout`], [`WriterBuilder::request_timeout`] |
//! | `socket.timeout.ms` | T | ms | [`DialerBuilder::request_timeout`] (librdkafka's name for it) |
//! | `max.in.flight.requests.per.connection` (`max.in.flight`) | T, W | requests | [`DialerBuilder::max_in_flight_requests_per_connection`], [`WriterBuilder::max_in_flight_requests_per_connection`] |
//! | `receive.message.max.bytes` | T | bytes | [`DialerBuilder::max_response_size`] |
//! | `metadata.max.age.ms` | T | ms | [`TransportBuilder::metadata_max_age`] |
//! | `connections.max.idle.ms` | T | ms | [`TransportBuilder::connections_max_idle`] |
//! | `retry.backoff.ms` | T, W, R, S | ms | `retry_backoff` of each builder |
//! | `retry.backoff.max.ms` | T, W, R | ms | `retry_backoff_max` of each builder |
//! | `default.api.timeout.ms` | T | ms | [`TransportBuilder::default_api_timeout`] |
//! | `metadata.recovery.strategy` | T | `none`, `rebootstrap` | [`TransportBuilder::metadata_recovery_strategy`] (KIP-899) |
//! | `metadata.recovery.rebootstrap.trigger.ms` | T | ms | [`TransportBuilder::metadata_recovery_rebootstrap_trigger`] (KIP-1102) |
//! | `metadata.cluster.check.enable` | T | `true`, `false` | [`TransportBuilder::metadata_cluster_check`] (KIP-1242) |
//! | `unstable.api.versions.enable` | T | `true`, `false` | [`DialerBuilder::unstable_api_versions`] |
//! | `security.protocol` | T | `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL` | TLS and SASL on or off |
//! | `ssl.ca.location` | T | PEM file, or `probe` (the system's roots) | [`TlsConfigBuilder::ca_pem`] / [`TlsConfigBuilder::system_roots`] |
//! | `ssl.ca.pem` | T | PEM text | [`TlsConfigBuilder::ca_pem`] |
//! | `ssl.truststore.location` | T | PEM file (with `ssl.truststore.type=PEM`) | [`TlsConfigBuilder::ca_pem`] |
//! | `ssl.truststore.type` | T | `PEM` (JKS and PKCS12 are unsupported) | |
//! | `ssl.certificate.location`, `ssl.key.location` | T | PEM files, both or neither | [`TlsConfigBuilder::client_cert_pem`] |
//! | `ssl.certificate.pem`, `ssl.key.pem` | T | PEM text, both or neither | [`TlsConfigBuilder::client_cert_pem`] |
//! | `ssl.endpoint.identification.algorithm` | T | `https` (verification cannot be turned off) | |
//! | `sasl.mechanism` (`sasl.mechanisms`) | T | `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`, `OAUTHBEARER`, `AWS_MSK_IAM` | [`DialerBuilder::sasl`] |
//! | `sasl.username`, `sasl.password` | T | strings | the credentials of PLAIN and SCRAM |
//! | `sasl.jaas.config` | T | `...PlainLoginModule required username="u" password="p";` (or `ScramLoginModule`); `...OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="u";` (options `unsecuredLoginLifetimeSeconds`, `unsecuredLoginExtension_NAME`); `software.amazon.msk.auth.iam.IAMLoginModule required;` | the mechanism's credentials |
//! | `enable.sasl.oauthbearer.unsecure.jwt` | T | `true`, `false` | OAUTHBEARER with an unsecured JWT (`alg: none`, for test clusters) built from `sasl.oauthbearer.config`, as librdkafka does |
//! | `sasl.oauthbearer.config` | T | `principal=NAME [principalClaimName=sub] [scope=a,b] [scopeClaimName=scope] [lifeSeconds=3600] [extension_NAME=VALUE]...` | the unsecured JWT's claims and the SASL extensions (KIP-342) |
//! | `sasl.oauthbearer.extensions` | T | `NAME=VALUE,NAME=VALUE` | more SASL extensions (KIP-342) |
//! | `sasl.oauthbearer.method` | T | `default` (`oidc` is unsupported) | |
//! | `sasl.client.callback.handler.class` | T | `software.amazon.msk.auth.iam.IAMClientCallbackHandler` (AWS_MSK_IAM) | |
//! | `acks` (`request.required.acks`) | W | `0`, `1`, `all`, `-1` | [`WriterBuilder::acks`] |
//! | `linger.ms` (`queue.buffering.max.ms`) | W | ms | [`WriterBuilder::linger`] |
//! | `batch.size` | W | bytes | [`WriterBuilder::batch_size`] |
//! | `batch.num.messages` | W | records | [`WriterBuilder::batch_max_records`] |
//! | `compression.type` (`compression.codec`) | W | `none`, `gzip`, `snappy`, `lz4`, `zstd` | [`WriterBuilder::compression`] |
//! | `compression.level`, `compression.gzip.level`, `compression.lz4.level`, `compression.zstd.level` | W | integer (KIP-390) | the level of [`WriterBuilder::compression`] (a codec's own name applies to that codec only) |
//! | `delivery.timeout.ms` (`message.timeout.ms`) | W | ms | [`WriterBuilder::delivery_timeout`] |
//! | `max.block.ms` | W | ms | [`WriterBuilder::max_block`] |
//! | `buffer.memory` | W | bytes | [`WriterBuilder::buffer_memory`] |
//! | `queue.buffering.max.kbytes` | W | KiB | [`WriterBuilder::buffer_memory`] |
//! | `queue.buffering.max.messages` | W | records | [`WriterBuilder::max_buffered_records`] |
//! | `max.request.size` (`message.max.bytes`: librdkafka's largest request, kcat users' setting for big records) | W | bytes | [`WriterBuilder::max_request_size`] |
//! | `allow.auto.create.topics` | W | `true`, `false` | [`WriterBuilder::allow_auto_topic_creation`] |
//! | `enable.idempotence` | W | `true`, `false` | [`WriterBuilder::enable_idempotence`] |
//! | `transactional.id` | W | string | [`WriterBuilder::transactional_id`] |
//! | `transaction.timeout.ms` | W | ms | [`WriterBuilder::transaction_timeout`] |
//! | `fetch.min.bytes` | R, S | bytes | [`ReaderBuilder::fetch_min_bytes`], [`ShareReaderBuilder::fetch_min_bytes`] |
//! | `fetch.max.wait.ms` (`fetch.wait.max.ms`) | R, S | ms | [`ReaderBuilder::fetch_max_wait`], [`ShareReaderBuilder::fetch_max_wait`] |
//! | `fetch.max.bytes` | R, S | bytes | [`ReaderBuilder::fetch_max_bytes`], [`ShareReaderBuilder::fetch_max_bytes`] |
//! | `max.partition.fetch.bytes` (`fetch.message.max.bytes`) | R | bytes | [`ReaderBuilder::max_partition_fetch_bytes`] |
//! | `queued.max.messages.kbytes` | R | KiB | [`ReaderBuilder::queued_max_bytes`] |
//! | `max.poll.records` | R, S | records | [`ReaderBuilder::max_poll_records`], [`ShareReaderBuilder::max_poll_records`] |
//! | `isolation.level` | R | `read_uncommitted`, `read_committed` | [`ReaderBuilder::isolation_level`] |
//! | `auto.offset.reset` | R | `earliest` (`smallest`, `beginning`), `latest` (`largest`, `end`), `none` (`error`) | [`ReaderBuilder::auto_offset_reset`] |
//! | `client.rack` | R, S | string | [`ReaderBuilder::client_rack`], [`ShareReaderBuilder::client_rack`] |
//! | `fetch.error.backoff.ms` | R | ms | [`ReaderBuilder::retry_backoff`] |
//! | `check.crcs` | R | `true`, `false` | [`ReaderBuilder::check_crcs`] |
//! | `group.id` | G, S | string | the group of [`GroupReaderBuilder::from_properties`] and [`ShareReaderBuilder::from_properties`] (required by both) |
//! | `group.instance.id` | G | string | [`GroupReaderBuilder::group_instance_id`] |
//! | `group.protocol` | G | `classic`, `consumer` | [`GroupReaderBuilder::group_protocol`] |
//! | `group.remote.assignor` | G | string | [`GroupReaderBuilder::group_remote_assignor`] |
//! | `session.timeout.ms` | G | ms | [`GroupReaderBuilder::session_timeout`] |
//! | `heartbeat.interval.ms` | G | ms | [`GroupReaderBuilder::heartbeat_interval`] |
//! | `max.poll.interval.ms` | G, S | ms | [`GroupReaderBuilder::max_poll_interval`], [`ShareReaderBuilder::max_poll_interval`] |
//! | `enable.auto.commit` | G | `true`, `false` | [`GroupReaderBuilder::enable_auto_commit`] |
//! | `auto.commit.interval.ms` | G | ms | [`GroupReaderBuilder::auto_commit_interval`] |
//! | `partition.assignment.strategy` | G | comma-separated `range`, `roundrobin`, `cooperative-sticky` (or the Java class names) | [`GroupReaderBuilder::partition_assignment_strategy`] |
//! | `share.acknowledgement.mode` | S | `implicit`, `explicit` | [`ShareReaderBuilder::acknowledgement_mode`] (KIP-932) |
//! | `share.acquire.mode` | S | `batch_optimized`, `record_limit` | [`ShareReaderBuilder::acquire_mode`] (KIP-1206) |
//! | `enable.metrics.push` | W, R, G, S | `true`, `false` | [`WriterBuilder::enable_metrics_push`], [`ReaderBuilder::enable_metrics_push`], [`GroupReaderBuilder::enable_metrics_push`], [`ShareReaderBuilder::enable_metrics_push`] (KIP-714) |
//!
//! AWS_MSK_IAM signs with the credentials of `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
//! `AWS_SESSION_TOKEN` (read at each authentication) for the region of `AWS_REGION` (or
//! `AWS_DEFAULT_REGION`), else of the first bootstrap host (`...kafka.REGION.amazonaws.com`).
//! OAUTHBEARER with a real token provider (OIDC, a cloud's token service) is set up in code
//! with [`DialerBuilder::sasl`].
//!
//! Known but unsupported (each fails with [`PropertyError::Unsupported`] and says why):
//! `partitioner`, `partitioner.class`, `ssl.keystore.location`,
//! `ssl.key.password`, `sasl.kerberos.service.name`, and the OIDC token retrieval names
//! `sasl.oauthbearer.client.id`, `sasl.oauthbearer.client.secret`,
//! `sasl.oauthbearer.token.endpoint.url`, `sasl.oauthbearer.scope` (give a
//! [`kafkit_sasl::TokenProvider`] to [`DialerBuilder::sasl`] instead).

mod builders;
mod security;

use std::fmt;
use std::time::Duration;

pub use crate::error::properties::PropertyError;

// The builders the module table links to.
#[cfg(all(doc, feature = "rustls"))]
use crate::tls::TlsConfigBuilder;
#[cfg(doc)]
use crate::{
    DialerBuilder, GroupReaderBuilder, ReaderBuilder, ShareReaderBuilder, Transport,
    TransportBuilder, WriterBuilder,
};

/// The builder a property configures (the `Scope` column of the [module table](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PropertyScope {
    /// [`TransportBuilder`] and the [`crate::Dialer`] it builds (`T`).
    Transport,
    /// [`WriterBuilder`] (`W`).
    Writer,
    /// [`ReaderBuilder`] (`R`).
    Reader,
    /// [`GroupReaderBuilder`] (`G`).
    Group,
    /// [`ShareReaderBuilder`] (`S`): a share group member (KIP-932).
    Share,
}

/// The shape of a property's value, as the [module table](self) gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PropertyKind {
    /// Milliseconds, 0..=2^63-1, read as a [`Duration`].
    Millis,
    /// A non-negative integer (bytes, records, requests, KiB as the name says).
    Count,
    /// Any integer (compression levels).
    Integer,
    /// `true` or `false` (any case).
    Bool,
    /// One of these words (any case); the first of each `|`-separated group is the canonical one.
    Choice(&'static [&'static str]),
    /// Any string.
    Text,
    /// Any string that must never be shown (passwords, keys, JAAS configs).
    Secret,
    /// A Java / librdkafka name kafkit does not implement; the text says why or what to use.
    Unsupported(&'static str),
}

/// One row of the [module table](self): a supported (or knowingly unsupported) name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PropertyInfo {
    /// The Java name (librdkafka's where Java has none).
    pub name: &'static str,
    /// Other names for the same setting (librdkafka's, older Java ones).
    pub aliases: &'static [&'static str],
    /// The builders that read it.
    pub scopes: &'static [PropertyScope],
    /// The shape of its value.
    pub kind: PropertyKind,
    /// What applies when the name is not set: a value as it would be written (`5`, `all`),
    /// or a description in parentheses (`(none)`, `(required)`, `(the broker's)`). Empty for
    /// an unsupported name.
    pub default: &'static str,
    /// The unit of a number (`ms`, `bytes`, `KiB`, `records`, `requests`) or `file` for a
    /// path; empty otherwise.
    pub unit: &'static str,
}

impl PropertyInfo {
    /// The row with its default and unit.
    const fn with_default(mut self, default: &'static str, unit: &'static str) -> Self {
        self.default = default;
        self.unit = unit;
        self
    }
}

use PropertyKind as K;
use PropertyScope::{Group as G, Reader as R, Share as S, Transport as T, Writer as W};

const fn p(
    name: &'static str,
    aliases: &'static [&'static str],
    scopes: &'static [PropertyScope],
    kind: PropertyKind,
) -> PropertyInfo {
    PropertyInfo {
        name,
        aliases,
        scopes,
        kind,
        default: "",
        unit: "",
    }
}

const BOOL: PropertyKind = K::Bool;
pub(super) const OIDC: &str = "OIDC token retrieval (sasl.oauthbearer.method=oidc) is not implemented; give \
                    a kafkit::sasl::TokenProvider to DialerBuilder::sasl";
const ALL: &[PropertyScope] = &[T, W, R];

/// Every name [`Properties`] know: the [module table](self), as data. Lookups and value checks
/// read this table.
pub const PROPERTIES: &[PropertyInfo] = &[
    p(
        "bootstrap.servers",
        &["metadata.broker.list"],
        &[T],
        K::Text,
    )
    .with_default("(required)", ""),
    p("client.id", &[], &[T], K::Text).with_default("kafkit", ""),
    p("socket.connection.setup.timeout.ms", &[], &[T], K::Millis).with_default("10000", "ms"),
    p("request.timeout.ms", &[], &[T, W], K::Millis).with_default("30000", "ms"),
    p("socket.timeout.ms", &[], &[T], K::Millis).with_default("30000", "ms"),
    p(
        "max.in.flight.requests.per.connection",
        &["max.in.flight"],
        &[T, W],
        K::Count,
    )
    .with_default("5", "requests"),
    p("receive.message.max.bytes", &[], &[T], K::Count).with_default("100000000", "bytes"),
    p("metadata.max.age.ms", &[], &[T], K::Millis).with_default("300000", "ms"),
    p("connections.max.idle.ms", &[], &[T], K::Millis).with_default("540000", "ms"),
    p("retry.backoff.ms", &[], &[T, W, R, S], K::Millis).with_default("100", "ms"),
    p("retry.backoff.max.ms", &[], ALL, K::Millis).with_default("1000", "ms"),
    p("default.api.timeout.ms", &[], &[T], K::Millis).with_default("60000", "ms"),
    p(
        "metadata.recovery.strategy",
        &[],
        &[T],
        K::Choice(&["none", "rebootstrap"]),
    )
    .with_default("rebootstrap", ""),
    p(
        "metadata.recovery.rebootstrap.trigger.ms",
        &[],
        &[T],
        K::Millis,
    )
    .with_default("300000", "ms"),
    p("metadata.cluster.check.enable", &[], &[T], BOOL).with_default("true", ""),
    p("unstable.api.versions.enable", &[], &[T], BOOL).with_default("false", ""),
    p(
        "security.protocol",
        &[],
        &[T],
        K::Choice(&["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]),
    )
    .with_default("PLAINTEXT", ""),
    p("ssl.ca.location", &[], &[T], K::Text)
        .with_default("(the webpki roots, Mozilla's CAs)", "file"),
    p("ssl.ca.pem", &[], &[T], K::Text).with_default("(none)", ""),
    p("ssl.truststore.location", &[], &[T], K::Text).with_default("(none)", "file"),
    p("ssl.truststore.type", &[], &[T], K::Choice(&["PEM"])).with_default("PEM", ""),
    p("ssl.certificate.location", &[], &[T], K::Text).with_default("(none)", "file"),
    p("ssl.key.location", &[], &[T], K::Text).with_default("(none)", "file"),
    p("ssl.certificate.pem", &[], &[T], K::Text).with_default("(none)", ""),
    p("ssl.key.pem", &[], &[T], K::Secret).with_default("(none)", ""),
    p(
        "ssl.endpoint.identification.algorithm",
        &[],
        &[T],
        K::Choice(&["https"]),
    )
    .with_default("https", ""),
    p(
        "sasl.mechanism",
        &["sasl.mechanisms"],
        &[T],
        K::Choice(&[
            "PLAIN",
            "SCRAM-SHA-256",
            "SCRAM-SHA-512",
            "OAUTHBEARER",
            "AWS_MSK_IAM",
        ]),
    )
    .with_default("(none: needed with SASL_*)", ""),
    p("sasl.username", &[], &[T], K::Text).with_default("(none)", ""),
    p("sasl.password", &[], &[T], K::Secret).with_default("(none)", ""),
    p("sasl.jaas.config", &[], &[T], K::Secret).with_default("(none)", ""),
    p("enable.sasl.oauthbearer.unsecure.jwt", &[], &[T], BOOL).with_default("false", ""),
    p("sasl.oauthbearer.config", &[], &[T], K::Text).with_default("(none)", ""),
    p("sasl.oauthbearer.extensions", &[], &[T], K::Text).with_default("(none)", ""),
    p(
        "sasl.oauthbearer.method",
        &[],
        &[T],
        K::Choice(&["default", "oidc"]),
    )
    .with_default("default", ""),
    p("sasl.client.callback.handler.class", &[], &[T], K::Text).with_default("(none)", ""),
    p(
        "acks",
        &["request.required.acks"],
        &[W],
        K::Choice(&["all|-1", "1", "0"]),
    )
    .with_default("all", ""),
    p("linger.ms", &["queue.buffering.max.ms"], &[W], K::Millis).with_default("5", "ms"),
    p("batch.size", &[], &[W], K::Count).with_default("1048576", "bytes"),
    p("batch.num.messages", &[], &[W], K::Count).with_default("2147483647", "records"),
    p(
        "compression.type",
        &["compression.codec"],
        &[W],
        K::Choice(&["none", "gzip", "snappy", "lz4", "zstd"]),
    )
    .with_default("none", ""),
    p("compression.level", &[], &[W], K::Integer).with_default("(the codec's own)", ""),
    p("compression.gzip.level", &[], &[W], K::Integer).with_default("(the codec's own)", ""),
    p("compression.lz4.level", &[], &[W], K::Integer).with_default("(the codec's own)", ""),
    p("compression.zstd.level", &[], &[W], K::Integer).with_default("(the codec's own)", ""),
    p(
        "delivery.timeout.ms",
        &["message.timeout.ms"],
        &[W],
        K::Millis,
    )
    .with_default("120000", "ms"),
    p("max.block.ms", &[], &[W], K::Millis).with_default("60000", "ms"),
    p("buffer.memory", &[], &[W], K::Count).with_default("33554432", "bytes"),
    p("queue.buffering.max.kbytes", &[], &[W], K::Count).with_default("32768", "KiB"),
    p("queue.buffering.max.messages", &[], &[W], K::Count).with_default("(no limit)", "records"),
    // librdkafka's message.max.bytes bounds a request as Java's max.request.size does.
    p("max.request.size", &["message.max.bytes"], &[W], K::Count)
        .with_default("(the larger of 16777216 and batch.size)", "bytes"),
    p("allow.auto.create.topics", &[], &[W], BOOL).with_default("true", ""),
    p("enable.idempotence", &[], &[W], BOOL).with_default("true", ""),
    p("enable.metrics.push", &[], &[W, R, G, S], BOOL).with_default("true", ""),
    p("fetch.min.bytes", &[], &[R, S], K::Count).with_default("1", "bytes"),
    p(
        "fetch.max.wait.ms",
        &["fetch.wait.max.ms"],
        &[R, S],
        K::Millis,
    )
    .with_default("500", "ms"),
    p("fetch.max.bytes", &[], &[R, S], K::Count).with_default("52428800", "bytes"),
    p(
        "max.partition.fetch.bytes",
        &["fetch.message.max.bytes"],
        &[R],
        K::Count,
    )
    .with_default("1048576", "bytes"),
    p("queued.max.messages.kbytes", &[], &[R], K::Count).with_default("65536", "KiB"),
    p("max.poll.records", &[], &[R, S], K::Count).with_default("500", "records"),
    p(
        "isolation.level",
        &[],
        &[R],
        K::Choice(&["read_uncommitted", "read_committed"]),
    )
    .with_default("read_uncommitted", ""),
    p(
        "auto.offset.reset",
        &[],
        &[R],
        K::Choice(&[
            "earliest|smallest|beginning",
            "latest|largest|end",
            "none|error",
        ]),
    )
    .with_default("latest", ""),
    p("client.rack", &[], &[R, S], K::Text).with_default("(none)", ""),
    p("fetch.error.backoff.ms", &[], &[R], K::Millis).with_default("100", "ms"),
    p("check.crcs", &[], &[R], BOOL).with_default("true", ""),
    p("transactional.id", &[], &[W], K::Text).with_default("(none)", ""),
    p("transaction.timeout.ms", &[], &[W], K::Millis).with_default("60000", "ms"),
    p("group.id", &[], &[G, S], K::Text).with_default("(required by a group member)", ""),
    p("group.instance.id", &[], &[G], K::Text).with_default("(none: a dynamic member)", ""),
    p(
        "group.protocol",
        &[],
        &[G],
        K::Choice(&["classic", "consumer"]),
    )
    .with_default("classic", ""),
    p("group.remote.assignor", &[], &[G], K::Text).with_default("(the broker's)", ""),
    p("session.timeout.ms", &[], &[G], K::Millis).with_default("45000", "ms"),
    p("heartbeat.interval.ms", &[], &[G], K::Millis).with_default("3000", "ms"),
    p("max.poll.interval.ms", &[], &[G, S], K::Millis).with_default("300000", "ms"),
    p("enable.auto.commit", &[], &[G], BOOL).with_default("true", ""),
    p("auto.commit.interval.ms", &[], &[G], K::Millis).with_default("5000", "ms"),
    p("partition.assignment.strategy", &[], &[G], K::Text)
        .with_default("range,cooperative-sticky", ""),
    p(
        "share.acknowledgement.mode",
        &[],
        &[S],
        K::Choice(&["implicit", "explicit"]),
    )
    .with_default("implicit", ""),
    p(
        "share.acquire.mode",
        &[],
        &[S],
        K::Choice(&["batch_optimized", "record_limit"]),
    )
    .with_default("batch_optimized", ""),
    p(
        "partitioner",
        &["partitioner.class"],
        ALL,
        K::Unsupported("choose a balancer with WriterBuilder::balancer"),
    ),
    p(
        "ssl.keystore.location",
        &[],
        ALL,
        K::Unsupported("use ssl.certificate.location and ssl.key.location (PEM)"),
    ),
    p(
        "ssl.key.password",
        &[],
        ALL,
        K::Unsupported("encrypted private keys are not supported; give an unencrypted PEM key"),
    ),
    p(
        "sasl.kerberos.service.name",
        &[],
        ALL,
        K::Unsupported("GSSAPI (Kerberos) is not implemented"),
    ),
    p("sasl.oauthbearer.client.id", &[], ALL, K::Unsupported(OIDC)),
    p(
        "sasl.oauthbearer.client.secret",
        &[],
        ALL,
        K::Unsupported(OIDC),
    ),
    p(
        "sasl.oauthbearer.token.endpoint.url",
        &[],
        ALL,
        K::Unsupported(OIDC),
    ),
    p("sasl.oauthbearer.scope", &[], ALL, K::Unsupported(OIDC)),
];

/// An ordered list of `name=value` settings with Java / librdkafka names (see the
/// [module table](self)). Later settings of a name replace earlier ones. `Debug` redacts the
/// values of secret names.
///
/// ```
/// use kafkit::{Properties, Transport, Writer};
///
/// let mut props = Properties::parse("bootstrap.servers=127.0.0.1:9092\n# a comment\nlinger.ms=20\n")?;
/// props.push_assignment("acks=1")?;
/// let transport = kafkit::TransportBuilder::from_properties(&props)?.build()?;
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # rt.block_on(async {
/// let writer = kafkit::WriterBuilder::from_properties(transport, &props)?.build()?;
/// # drop(writer);
/// # Ok::<(), kafkit::Error>(())
/// # })?;
/// assert!(matches!(
///     Properties::parse("linger.mss=5").unwrap().check(),
///     Err(kafkit::PropertyError::Unknown { suggestion: Some("linger.ms"), .. })
/// ));
/// # Ok::<(), kafkit::Error>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Properties {
    entries: Vec<(String, String)>,
}

impl fmt::Debug for Properties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for (k, v) in &self.entries {
            if is_secret(k) {
                m.entry(k, &"<redacted>");
            } else {
                m.entry(k, v);
            }
        }
        m.finish()
    }
}

fn is_secret(name: &str) -> bool {
    lookup(name).is_some_and(|i| i.kind == K::Secret)
}

impl Properties {
    /// No settings.
    pub fn new() -> Self {
        Properties::default()
    }

    /// Reads a Java `.properties`-style text: one `name=value` per line; blank lines and lines
    /// starting with `#` or `!` are skipped; spaces around the name and the value are trimmed.
    /// (Line continuations and escapes of Java's format are not read.)
    ///
    /// # Errors
    ///
    /// [`PropertyError::Malformed`] for a line without `=`. Names are checked when the
    /// properties are used (or by [`Properties::check`]).
    pub fn parse(text: &str) -> Result<Self, PropertyError> {
        let mut props = Properties::new();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
                continue;
            }
            props.push_assignment(line)?;
        }
        Ok(props)
    }

    /// Sets `name` to `value`, replacing an earlier value of the same name.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) -> &mut Self {
        let (name, value) = (name.into(), value.into());
        match self.entries.iter_mut().find(|(k, _)| *k == name) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((name, value)),
        }
        self
    }

    /// Sets a `name=value` assignment (a `-X` argument): the name is what comes before the
    /// first `=`, trimmed.
    ///
    /// # Errors
    ///
    /// [`PropertyError::Malformed`] when there is no `=` or the name is empty.
    pub fn push_assignment(&mut self, assignment: &str) -> Result<&mut Self, PropertyError> {
        match assignment.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok(self.set(k.trim(), v.trim())),
            _ => Err(PropertyError::Malformed(if is_secret_text(assignment) {
                "<redacted>".into()
            } else {
                assignment.to_owned()
            })),
        }
    }

    /// The value set for exactly `name` (aliases are not resolved).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The settings in the order they were first set.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Whether there is no setting.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Checks every name and value against the table without building anything (no file is
    /// read): for a command line to report a bad `-X` before it connects.
    ///
    /// # Errors
    ///
    /// The first [`PropertyError::Unknown`], [`PropertyError::Unsupported`] or
    /// [`PropertyError::InvalidValue`].
    pub fn check(&self) -> Result<(), PropertyError> {
        for (name, value) in self.iter() {
            let info = resolve(name)?;
            parse_value(info, name, value)?;
        }
        Ok(())
    }

    /// The settings of `scope`, resolved (canonical name) and parsed, in order.
    pub(super) fn scoped(
        &self,
        scope: PropertyScope,
    ) -> Result<Vec<(&'static str, Value<'_>)>, PropertyError> {
        let mut out = Vec::new();
        for (name, value) in self.iter() {
            let info = resolve(name)?;
            let v = parse_value(info, name, value)?;
            if info.scopes.contains(&scope) {
                out.push((info.name, v));
            }
        }
        Ok(out)
    }
}

fn is_secret_text(assignment: &str) -> bool {
    let name = assignment.split(['=', ' ']).next().unwrap_or("");
    is_secret(name.trim()) || assignment.contains("password")
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Properties {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut props = Properties::new();
        props.extend(iter);
        props
    }
}

impl<K: Into<String>, V: Into<String>> Extend<(K, V)> for Properties {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, iter: I) {
        for (k, v) in iter {
            self.set(k, v);
        }
    }
}

/// The table row of `name` (or of an alias of it).
pub fn lookup(name: &str) -> Option<&'static PropertyInfo> {
    PROPERTIES
        .iter()
        .find(|i| i.name == name || i.aliases.contains(&name))
}

fn resolve(name: &str) -> Result<&'static PropertyInfo, PropertyError> {
    let info = lookup(name).ok_or_else(|| PropertyError::Unknown {
        name: name.to_owned(),
        suggestion: suggest(name),
    })?;
    if let K::Unsupported(reason) = info.kind {
        return Err(PropertyError::Unsupported {
            name: name.to_owned(),
            reason,
        });
    }
    Ok(info)
}

/// The known name closest to `name` when it is within 2 edits (a typo).
fn suggest(name: &str) -> Option<&'static str> {
    PROPERTIES
        .iter()
        .flat_map(|i| std::iter::once(&i.name).chain(i.aliases))
        .map(|&n| (edit_distance(name, n), n))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// A parsed value.
#[derive(Debug, Clone, Copy)]
pub(super) enum Value<'a> {
    Millis(Duration),
    Count(u64),
    Integer(i64),
    Bool(bool),
    /// The canonical word of a `Choice`.
    Choice(&'static str),
    Text(&'a str),
}

fn parse_value<'a>(
    info: &PropertyInfo,
    name: &str,
    value: &'a str,
) -> Result<Value<'a>, PropertyError> {
    let bad = |expected: String| PropertyError::InvalidValue {
        name: name.to_owned(),
        value: if info.kind == K::Secret {
            "<redacted>".into()
        } else {
            format!("{value:?}")
        },
        expected,
    };
    Ok(match info.kind {
        K::Millis => Value::Millis(Duration::from_millis(
            value
                .parse()
                .map_err(|_| bad("milliseconds, a non-negative integer".into()))?,
        )),
        K::Count => Value::Count(
            value
                .parse()
                .map_err(|_| bad("a non-negative integer".into()))?,
        ),
        K::Integer => Value::Integer(value.parse().map_err(|_| bad("an integer".into()))?),
        K::Bool => match value.to_ascii_lowercase().as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(bad("true or false".into())),
        },
        K::Choice(words) => words
            .iter()
            .find(|group| group.split('|').any(|w| w.eq_ignore_ascii_case(value)))
            .map(|group| Value::Choice(group.split('|').next().unwrap_or(group)))
            .ok_or_else(|| bad(format!("one of {}", words.join(", ").replace('|', ", "))))?,
        K::Text | K::Secret => Value::Text(value),
        K::Unsupported(reason) => {
            return Err(PropertyError::Unsupported {
                name: name.to_owned(),
                reason,
            });
        }
    })
}

pub(super) fn count<T: TryFrom<u64>>(name: &'static str, v: Value<'_>) -> Result<T, PropertyError> {
    match v {
        Value::Count(n) => T::try_from(n).map_err(|_| PropertyError::InvalidValue {
            name: name.to_owned(),
            value: format!("\"{n}\""),
            expected: "a number the setting can hold (at most 2147483647 where the protocol \
                       carries an int32)"
                .into(),
        }),
        _ => unreachable_kind(name),
    }
}

pub(super) fn millis_value(name: &'static str, v: Value<'_>) -> Result<Duration, PropertyError> {
    match v {
        Value::Millis(d) => Ok(d),
        _ => unreachable_kind(name),
    }
}

pub(super) fn boolean(name: &'static str, v: Value<'_>) -> Result<bool, PropertyError> {
    match v {
        Value::Bool(b) => Ok(b),
        _ => unreachable_kind(name),
    }
}

pub(super) fn text<'a>(name: &'static str, v: Value<'a>) -> Result<&'a str, PropertyError> {
    match v {
        Value::Text(s) => Ok(s),
        _ => unreachable_kind(name),
    }
}

pub(super) fn choice(name: &'static str, v: Value<'_>) -> Result<&'static str, PropertyError> {
    match v {
        Value::Choice(s) => Ok(s),
        _ => unreachable_kind(name),
    }
}

/// A table row whose kind does not match the code that applies it: a bug in this file, reported
/// as a typed error rather than a panic.
pub(super) fn unreachable_kind<T>(name: &'static str) -> Result<T, PropertyError> {
    Err(PropertyError::InvalidValue {
        name: name.to_owned(),
        value: String::new(),
        expected: "a value of the kind in the properties table (internal mismatch)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialer::DialerBuilder;

    fn props(pairs: &[(&str, &str)]) -> Properties {
        pairs.iter().copied().collect()
    }

    #[test]
    fn every_table_row_is_unique_and_has_a_scope() {
        let mut seen = std::collections::HashSet::new();
        for info in PROPERTIES {
            assert!(!info.scopes.is_empty(), "{}", info.name);
            for n in std::iter::once(&info.name).chain(info.aliases) {
                assert!(seen.insert(*n), "{n} twice");
            }
        }
    }

    #[test]
    fn module_table_names_every_supported_row() {
        let doc = include_str!("mod.rs");
        for info in PROPERTIES {
            assert!(
                doc.contains(&format!("`{}`", info.name)),
                "{} is not documented",
                info.name
            );
        }
    }

    #[test]
    fn unknown_names_fail_typed_with_a_suggestion() {
        let e = props(&[("linger.mss", "5")]).check().unwrap_err();
        assert!(
            matches!(&e, PropertyError::Unknown { name, suggestion: Some("linger.ms") } if name == "linger.mss"),
            "{e:?}"
        );
        let e = props(&[("no.such.thing.at.all", "5")]).check().unwrap_err();
        assert!(
            matches!(
                e,
                PropertyError::Unknown {
                    suggestion: None,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = props(&[("partitioner", "murmur2")]).check().unwrap_err();
        assert!(matches!(e, PropertyError::Unsupported { .. }), "{e:?}");
    }

    /// The table's defaults are values the name takes (or a description in parentheses), and
    /// its units agree with the kind: what `kafkit config list` prints can be typed back.
    #[test]
    fn every_default_parses_and_every_time_is_in_ms() {
        for info in PROPERTIES {
            if matches!(info.kind, K::Unsupported(_)) {
                assert_eq!((info.default, info.unit), ("", ""), "{}", info.name);
                continue;
            }
            assert!(!info.default.is_empty(), "{} has no default", info.name);
            if !info.default.starts_with('(') {
                parse_value(info, info.name, info.default)
                    .unwrap_or_else(|e| panic!("{}: {e}", info.name));
            }
            assert_eq!(info.kind == K::Millis, info.unit == "ms", "{}", info.name);
            if info.kind == K::Count {
                assert!(
                    ["bytes", "KiB", "records", "requests"].contains(&info.unit),
                    "{}",
                    info.name
                );
            }
        }
    }

    #[test]
    fn bad_values_fail_typed_and_secrets_stay_hidden() {
        for (k, v) in [
            ("linger.ms", "5ms"),
            ("acks", "2"),
            ("enable.idempotence", "yes"),
            ("batch.size", "-1"),
            ("security.protocol", "TLS"),
        ] {
            let e = props(&[(k, v)]).check().unwrap_err();
            assert!(
                matches!(e, PropertyError::InvalidValue { .. }),
                "{k}={v}: {e:?}"
            );
            assert!(e.to_string().contains(v), "{e}");
        }
        let p = props(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "alice"),
            ("sasl.password", "hunter2"),
        ]);
        assert!(!format!("{p:?}").contains("hunter2"));
        let mut p = Properties::new();
        let e = p.push_assignment("sasl.password").unwrap_err();
        assert!(!e.to_string().contains("hunter2"));
        let e = DialerBuilder::from_properties(&props(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.jaas.config", "org.Foo required password=\"hunter2\";"),
        ]))
        .unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn aliases_and_words_resolve_to_the_java_names() {
        let p = props(&[
            ("metadata.broker.list", "h:1"),
            ("request.required.acks", "-1"),
            ("queue.buffering.max.ms", "20"),
            ("auto.offset.reset", "smallest"),
        ]);
        p.check().unwrap();
        let w = p.scoped(W).unwrap();
        assert!(matches!(w[0], ("acks", Value::Choice("all"))));
        assert!(matches!(w[1], ("linger.ms", Value::Millis(d)) if d == Duration::from_millis(20)));
        let r = p.scoped(R).unwrap();
        assert!(matches!(
            r[..],
            [("auto.offset.reset", Value::Choice("earliest"))]
        ));
    }

    /// kcat users raise librdkafka's message.max.bytes for big records: Java's
    /// max.request.size.
    #[test]
    fn message_max_bytes_is_max_request_size() {
        let p = props(&[("message.max.bytes", "2097152")]);
        p.check().unwrap();
        let w = p.scoped(W).unwrap();
        assert!(matches!(
            w[..],
            [("max.request.size", Value::Count(2_097_152))]
        ));
    }

    #[test]
    fn parse_reads_properties_files() {
        let p = Properties::parse(
            "# c\n! c\n\n bootstrap.servers = a:1,b:2 \nlinger.ms=5\nlinger.ms=7\n",
        )
        .unwrap();
        assert_eq!(p.get("bootstrap.servers"), Some("a:1,b:2"));
        assert_eq!(p.get("linger.ms"), Some("7"));
        assert!(matches!(
            Properties::parse("oops"),
            Err(PropertyError::Malformed(_))
        ));
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("linger.ms", "linger.ms"), 0);
        assert_eq!(edit_distance("lingr.ms", "linger.ms"), 1);
        assert_eq!(edit_distance("", "ab"), 2);
    }
}
