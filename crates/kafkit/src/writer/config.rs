//! [`WriterBuilder`]: every setting of the [`Writer`], with its default, unit and range.
//!
//! Time spans are [`Duration`]s, used in whole milliseconds (what the protocol carries). The
//! ranges are checked by [`WriterBuilder::build`] (in `validate`, in this file), which names the
//! setting in a [`WriterConfigError`].
//!
//! | Setting | Default | Unit, range | Java / librdkafka name | What it does |
//! |---|---|---|---|---|
//! | `acks` | `all` | `0`, `1`, `all` | `acks` / `request.required.acks` | Acknowledgements the leader waits for. |
//! | `linger` | 5 ms | `Duration`, 0..=1 h | `linger.ms` | How long a batch waits for more records. |
//! | `batch_size` | 1 MiB | bytes, 1 KiB..=1 GiB | `batch.size` | Largest batch (and record) before compression. |
//! | `batch_max_records` | no limit (2^31-1) | records, 1..=2^31-1 | (librdkafka `batch.num.messages`) | Most records in one batch. |
//! | `compression` | none | a codec built in (its cargo feature on), level in its range | `compression.type`, `compression.<codec>.level` | Codec of every batch (KIP-390 levels). |
//! | `balancer` | murmur2 keyed, uniform sticky keyless | | `partitioner.class` / `partitioner` | Chooses the partition of records without one. |
//! | `max_in_flight_requests_per_connection` | 5 | requests, 1..=5 idempotent, 1..=1000 otherwise | `max.in.flight.requests.per.connection` | Produce requests in flight per broker (at most the `Dialer`'s limit of the same name, which counts every request of the connection). |
//! | `delivery_timeout` | 2 min | `Duration`, `linger + request_timeout`..=2^31-1 ms | `delivery.timeout.ms` / `message.timeout.ms` | Longest time from send to outcome, retries included. |
//! | `request_timeout` | 30 s | `Duration`, 1 ms..=2^31-1 ms | `request.timeout.ms` | Broker's replication wait and the wait for its answer. |
//! | `retry_backoff` | 100 ms | `Duration`, 0..=1 h | `retry.backoff.ms` | First wait before a partition's batch is retried; doubles per retry (KIP-580). |
//! | `retry_backoff_max` | 1 s | `Duration`, 0..=1 h (at least `retry_backoff` in effect) | `retry.backoff.max.ms` | Longest wait between retries of a batch (KIP-580, ±20 % jitter). |
//! | `max_block` | 60 s | `Duration`, 0..=2^31-1 ms | `max.block.ms` | Longest wait in `send` for a topic's metadata and for buffer room. |
//! | `buffer_memory` | 32 MiB | bytes, >= `batch_size` | `buffer.memory` / `queue.buffering.max.kbytes` | Most bytes buffered before `send` waits. |
//! | `max_buffered_records` | no limit | records, >= 1 | (librdkafka `queue.buffering.max.messages`) | Most records buffered before `send` waits. |
//! | `max_request_size` | max(16 MiB, `batch_size`) | bytes, `batch_size`..=2^31-1 | (`max.request.size` caps records too) | Cap on the batches of one Produce request. |
//! | `allow_auto_topic_creation` | true | | librdkafka `allow.auto.create.topics` (the Java producer always asks) | Whether an unknown topic is asked to be created. |
//! | `topic` | none | a legal topic name (1 to 249 of `[a-zA-Z0-9._-]`, not `.`, `..`) | (kafka-go `Writer.Topic`) | Topic of records that name none. |
//! | `enable_idempotence` | true (false when it was not set and `acks` is not `all` or more than 5 requests are in flight) | | `enable.idempotence` | Producer id and sequences: no duplicates on retry (KIP-98). |
//! | `on_completion` | none | | (Java `Callback`, librdkafka `dr_msg_cb`) | Called once per record with its outcome. |
//! | `traceparent_from` | none | `Fn() -> Option<TraceParent>` | (Java OTel instrumentation's propagation) | Fills the W3C `traceparent` header of each record that has none when the writer takes it. |
//! | `transactional_id` | none | a non-empty string | `transactional.id` | Makes the writer transactional (KIP-98; idempotence on, `acks` all). |
//! | `enable_metrics_push` | true | bool | `enable.metrics.push` / `enable.metrics.push` | Pushes the writer's metrics to the cluster (KIP-714). |
//! | `transaction_timeout` | 1 min | `Duration`, 1 ms..=2^31-1 ms | `transaction.timeout.ms` | Longest a transaction may stay open before the coordinator aborts it. |

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kafkit_balancer::{Balancer, UniformSticky};
use kafkit_compress::CompressionConfig;

use super::Writer;
use crate::conn::produce::Acks;
use crate::error::produce::RecordMetadata;
use crate::error::produce::{ProduceError, WriterConfigError};
use crate::time::millis;
use crate::transport::Transport;

/// Called once for every record when it is acknowledged or fails (Java `Callback`): with its
/// metadata and `None`, or with its topic and partition (offset -1) and the error.
pub type CompletionCallback = Arc<dyn Fn(&RecordMetadata, Option<&ProduceError>) + Send + Sync>;

/// The settings a [`Writer`] runs with (validated).
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) acks: Acks,
    // Time spans in whole milliseconds, as validated (the builder takes `Duration`s).
    pub(crate) linger_ms: u64,
    pub(crate) batch_size: usize,
    pub(crate) batch_max_records: usize,
    pub(crate) compression: CompressionConfig,
    pub(crate) balancer: Arc<dyn Balancer>,
    /// The default balancer, kept typed to place keyless records among available partitions.
    pub(crate) sticky: Option<Arc<UniformSticky>>,
    pub(crate) max_in_flight: usize,
    pub(crate) delivery_timeout_ms: u64,
    pub(crate) request_timeout_ms: u64,
    pub(crate) retry_backoff_ms: u64,
    pub(crate) retry_backoff_max_ms: u64,
    pub(crate) max_block_ms: u64,
    pub(crate) buffer_memory: usize,
    pub(crate) max_buffered_records: Option<usize>,
    pub(crate) max_request_size: usize,
    pub(crate) allow_auto_topic_creation: bool,
    pub(crate) topic: Option<String>,
    pub(crate) idempotent: bool,
    /// `enable_idempotence(true)` was called (no silent fallback then).
    pub(crate) idempotence_explicit: bool,
    pub(crate) on_completion: Option<CompletionCallback>,
    /// The application's trace context for records without a `traceparent` header.
    pub(crate) traceparent_from: Option<crate::ops::otel::TraceParentSource>,
    /// Transactions (KIP-98) with this id; `None`: not transactional.
    pub(crate) transactional_id: Option<String>,
    pub(crate) transaction_timeout_ms: u64,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("acks", &self.acks)
            .field("linger_ms", &self.linger_ms)
            .field("batch_size", &self.batch_size)
            .field("batch_max_records", &self.batch_max_records)
            .field("compression", &self.compression)
            .field("max_in_flight", &self.max_in_flight)
            .field("delivery_timeout_ms", &self.delivery_timeout_ms)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("retry_backoff_ms", &self.retry_backoff_ms)
            .field("retry_backoff_max_ms", &self.retry_backoff_max_ms)
            .field("max_block_ms", &self.max_block_ms)
            .field("buffer_memory", &self.buffer_memory)
            .field("max_buffered_records", &self.max_buffered_records)
            .field("max_request_size", &self.max_request_size)
            .field("allow_auto_topic_creation", &self.allow_auto_topic_creation)
            .field("topic", &self.topic)
            .field("idempotent", &self.idempotent)
            .field("transactional_id", &self.transactional_id)
            .field("transaction_timeout_ms", &self.transaction_timeout_ms)
            .finish_non_exhaustive()
    }
}

/// Default `transaction_timeout`: 1 min (Java's `transaction.timeout.ms`).
pub(crate) const DEFAULT_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `linger`: 5 ms (Java 5 ms since Kafka 4.0, KIP-1030; librdkafka 5 ms).
pub(crate) const DEFAULT_LINGER: Duration = Duration::from_millis(5);
/// Default `delivery_timeout`: 2 min (Java's `delivery.timeout.ms`).
pub(crate) const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);
/// Default `request_timeout`: 30 s (Java's `request.timeout.ms`).
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `retry_backoff_max`: 1 s (Java's `retry.backoff.max.ms`, KIP-580).
pub(crate) const DEFAULT_RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Default `retry_backoff`: 100 ms (Java's `retry.backoff.ms`).
pub(crate) const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_millis(100);
/// Default `max_block`: 60 s (Java's `max.block.ms`).
pub(crate) const DEFAULT_MAX_BLOCK: Duration = Duration::from_secs(60);
/// Default `batch_size`: 1 MiB.
pub(crate) const DEFAULT_BATCH_SIZE: usize = 1_048_576;
/// Default `buffer_memory`: 32 MiB (Java's default).
pub(crate) const DEFAULT_BUFFER_MEMORY: usize = 33_554_432;
/// Default lower bound of `max_request_size`: 16 MiB.
pub(crate) const DEFAULT_MAX_REQUEST_SIZE: usize = 16 * 1_048_576;

/// Builds a [`Writer`]; made by [`Writer::builder`]. Every setting has a default (see the
/// table in this module's docs, and each method); [`WriterBuilder::build`] checks ranges and
/// conflicts and returns a typed [`WriterConfigError`].
#[must_use]
pub struct WriterBuilder {
    transport: Transport,
    acks: Acks,
    linger: Duration,
    batch_size: usize,
    batch_max_records: usize,
    compression: CompressionConfig,
    balancer: Option<Arc<dyn Balancer>>,
    max_in_flight: usize,
    delivery_timeout: Duration,
    request_timeout: Duration,
    retry_backoff: Duration,
    retry_backoff_max: Duration,
    max_block: Duration,
    buffer_memory: usize,
    max_buffered_records: Option<usize>,
    max_request_size: Option<usize>,
    allow_auto_topic_creation: bool,
    topic: Option<String>,
    enable_idempotence: Option<bool>,
    on_completion: Option<CompletionCallback>,
    traceparent_from: Option<crate::ops::otel::TraceParentSource>,
    transactional_id: Option<String>,
    transaction_timeout: Duration,
    enable_metrics_push: bool,
}

impl fmt::Debug for WriterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriterBuilder")
            .field("acks", &self.acks)
            .field("linger", &self.linger)
            .field("batch_size", &self.batch_size)
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl WriterBuilder {
    pub(crate) fn new(transport: Transport) -> Self {
        WriterBuilder {
            transport,
            acks: Acks::All,
            linger: DEFAULT_LINGER,
            batch_size: DEFAULT_BATCH_SIZE,
            batch_max_records: i32::MAX as usize,
            compression: CompressionConfig::NONE,
            balancer: None,
            max_in_flight: 5,
            delivery_timeout: DEFAULT_DELIVERY_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            retry_backoff: DEFAULT_RETRY_BACKOFF,
            retry_backoff_max: DEFAULT_RETRY_BACKOFF_MAX,
            max_block: DEFAULT_MAX_BLOCK,
            buffer_memory: DEFAULT_BUFFER_MEMORY,
            max_buffered_records: None,
            max_request_size: None,
            allow_auto_topic_creation: true,
            topic: None,
            enable_idempotence: None,
            on_completion: None,
            traceparent_from: None,
            transactional_id: None,
            transaction_timeout: DEFAULT_TRANSACTION_TIMEOUT,
            enable_metrics_push: true,
        }
    }

    /// Whether the writer pushes its metrics to the cluster (KIP-714; Java's
    /// `enable.metrics.push`, default true). On, the writer runs a
    /// [`Telemetry`](crate::telemetry::Telemetry) engine fed by [`Writer::metric_source`]: it
    /// asks for a subscription (GetTelemetrySubscriptions) in the background, pushes what the
    /// operator subscribed to at the interval the broker gives, and a last time on
    /// [`Writer::close`]. A cluster without KIP-714 (or without a subscription for this
    /// client) costs one request. Off, nothing is sent and [`Writer::client_instance_id`]
    /// fails.
    pub fn enable_metrics_push(mut self, on: bool) -> Self {
        self.enable_metrics_push = on;
        self
    }

    /// Acknowledgements the leader waits for (Java `acks`): [`Acks::All`] (default),
    /// [`Acks::Leader`] or [`Acks::None`] (records complete when sent, offset -1).
    pub fn acks(mut self, acks: Acks) -> Self {
        self.acks = acks;
        self
    }

    /// How long a partition's batch waits for more records before it is sent (Java
    /// `linger.ms`; default 5 ms, at most 1 h). A full batch, `flush` or `close` sends at once.
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// Largest record batch, in bytes, before compression (Java `batch.size`; default 1 MiB). A
    /// batch is closed when the next record would not fit. Also the largest record accepted:
    /// a record whose batch of one (compressed when applicable) exceeds it fails alone with
    /// [`ProduceError::RecordTooLarge`]; keep it at or below the topic's `max.message.bytes`.
    pub fn batch_size(mut self, bytes: usize) -> Self {
        self.batch_size = bytes;
        self
    }

    /// Most records in one batch (default: no limit besides `batch_size`).
    pub fn batch_max_records(mut self, records: usize) -> Self {
        self.batch_max_records = records;
        self
    }

    /// Codec and level of every batch (Java `compression.type`, `compression.<codec>.level`,
    /// KIP-390): a [`kafkit_compress::Compression`] or a [`CompressionConfig`]. Default none. A
    /// codec whose cargo feature is off in this build makes `build` fail with
    /// [`WriterConfigError::UnsupportedCompression`].
    pub fn compression(mut self, compression: impl Into<CompressionConfig>) -> Self {
        self.compression = compression.into();
        self
    }

    /// Chooses the partition of records without an explicit one (Java `partitioner.class`).
    /// Default: [`kafkit_balancer::UniformSticky`] with this writer's `batch_size` (murmur2 of
    /// the key over all partitions for keyed records, as the Java client; keyless ones stick
    /// to one partition among those with a leader, KIP-794). A balancer given here sees every
    /// partition of the topic.
    pub fn balancer(mut self, balancer: impl Balancer + 'static) -> Self {
        self.balancer = Some(Arc::new(balancer));
        self
    }

    /// Produce requests in flight per broker (Java
    /// `max.in.flight.requests.per.connection`; default 5, 1..=1000). Each partition has at most
    /// one batch in flight, so per-partition order is kept across retries whatever this is set
    /// to. Above 5, idempotence is off unless `enable_idempotence(true)` was called, which is
    /// then a [`WriterConfigError::Conflict`] (as in Java).
    ///
    /// The writer sends every Produce request to a broker on the transport's one Produce
    /// connection to it, and that connection has the [`Dialer`](crate::Dialer)'s own
    /// `max_in_flight_requests_per_connection` (default 5), which counts every request on it:
    /// what is in flight per broker is the lower of the two, and raising this one above the
    /// dialer's only queues requests in the connection.
    pub fn max_in_flight_requests_per_connection(mut self, requests: usize) -> Self {
        self.max_in_flight = requests;
        self
    }

    /// Upper bound on the time from `send` to the record's outcome, retries included (Java
    /// `delivery.timeout.ms`, KIP-91; default 2 min). Must be at least
    /// `linger + request_timeout` and at most `i32::MAX` ms (about 24.8 days, Java's limit).
    /// After it a record fails with [`ProduceError::DeliveryTimeout`] naming the last error.
    pub fn delivery_timeout(mut self, timeout: Duration) -> Self {
        self.delivery_timeout = timeout;
        self
    }

    /// How long one Produce request may take (Java `request.timeout.ms`; default 30 s, from
    /// 1 ms to `i32::MAX` ms): the broker's replication wait (`timeout_ms` of the request) and
    /// the client's wait for the answer.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// First wait before retrying a partition's batch after a retriable error (Java
    /// `retry.backoff.ms`; default 100 ms, at most 1 h). Each further retry of the same batch
    /// waits twice as long, up to `retry_backoff_max`, spread by ±20 % (KIP-580).
    pub fn retry_backoff(mut self, backoff: Duration) -> Self {
        self.retry_backoff = backoff;
        self
    }

    /// Longest wait between retries of a batch (Java `retry.backoff.max.ms`, KIP-580; default
    /// 1 s, at most 1 h; a value below `retry_backoff` means `retry_backoff`).
    pub fn retry_backoff_max(mut self, max: Duration) -> Self {
        self.retry_backoff_max = max;
        self
    }

    /// Longest time [`Writer::send`] (and `produce`, `write`) waits before the record is taken
    /// (Java `max.block.ms`; default 60 s, at most `i32::MAX` ms): for the metadata of a topic
    /// the writer has not sent to yet, then for room in the buffer. Past it the record fails,
    /// not taken, with [`ProduceError::BlockTimeout`] (carrying why: the topic's last error
    /// code, e.g. `UNKNOWN_TOPIC_OR_PARTITION`, or [`ProduceError::QueueFull`]). Zero fails at
    /// once when the topic is not known yet or the buffer is full.
    pub fn max_block(mut self, max_block: Duration) -> Self {
        self.max_block = max_block;
        self
    }

    /// Most bytes of records buffered (not yet acknowledged), in bytes (Java `buffer.memory`;
    /// default 32 MiB). When full, `send` waits and `try_send` fails with
    /// [`ProduceError::QueueFull`].
    pub fn buffer_memory(mut self, bytes: usize) -> Self {
        self.buffer_memory = bytes;
        self
    }

    /// Most records buffered (not yet acknowledged); default no limit. When full, `send` waits
    /// and `try_send` fails with [`ProduceError::QueueFull`].
    pub fn max_buffered_records(mut self, records: usize) -> Self {
        self.max_buffered_records = Some(records);
        self
    }

    /// Cap on the record batches of one Produce request, in bytes (default the larger of 16 MiB
    /// and `batch_size`; must be at least `batch_size`). A request always carries at least one
    /// batch. Unlike Java's `max.request.size`, it does not limit a record's size
    /// (`batch_size` does).
    pub fn max_request_size(mut self, bytes: usize) -> Self {
        self.max_request_size = Some(bytes);
        self
    }

    /// Whether a record for an unknown topic asks the broker to create it (Metadata
    /// `allow_auto_topic_creation`, honoured when the broker's `auto.create.topics.enable` is
    /// on; Java `allow.auto.create.topics`). Default true, as the Java producer and librdkafka's
    /// producer. The topic gets the broker's default partition count and replication factor;
    /// until it has partitions, `send` waits (up to `max_block`).
    pub fn allow_auto_topic_creation(mut self, allow: bool) -> Self {
        self.allow_auto_topic_creation = allow;
        self
    }

    /// The topic of records that name none (kafka-go `Writer.Topic`). Default none: such
    /// records fail with [`ProduceError::NoTopic`]. A name that is not a legal topic name (1 to
    /// 249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`) makes `build` fail with
    /// [`WriterConfigError::InvalidTopic`].
    pub fn topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = Some(topic.into());
        self
    }

    /// Idempotent writes (Java `enable.idempotence`, KIP-98): a producer id from
    /// InitProducerId and per-partition sequence numbers, so retries never duplicate or
    /// reorder records. Default on; when not set, it is silently turned off, as the Java client
    /// does, if `acks` is not `all`, if `max_in_flight_requests_per_connection` is above 5, and
    /// when the cluster cannot give a producer id (no InitProducerId, or
    /// `CLUSTER_AUTHORIZATION_FAILED`). Set to true, such a cluster makes every record fail with
    /// that error instead, and `acks` other than `all` or more than 5 requests in flight make
    /// `build` fail with [`WriterConfigError::Conflict`].
    pub fn enable_idempotence(mut self, enable: bool) -> Self {
        self.enable_idempotence = Some(enable);
        self
    }

    /// Called once for every record when it is acknowledged or fails, on the writer's task
    /// (keep it short, do not block; a panic is caught and logged, and the record's future
    /// still gets its outcome): `(metadata, None)` on success;
    /// `(metadata with offset -1, Some(error))` on failure (Java `Callback.onCompletion`).
    /// Runs before the record's [`DeliveryFuture`](super::DeliveryFuture) (which may be
    /// dropped) resolves, so after `flush` returns every callback of the flushed records has
    /// run.
    pub fn on_completion(
        mut self,
        callback: impl Fn(&RecordMetadata, Option<&ProduceError>) + Send + Sync + 'static,
    ) -> Self {
        self.on_completion = Some(Arc::new(callback));
        self
    }

    /// Fills the W3C `traceparent` header of every record that carries none (Java's
    /// OpenTelemetry instrumentation propagates the producer's context the same way): `source`
    /// is called once per such record when `send` (or its kin) takes it, on the caller's task,
    /// so `tracing::Span::current()` is the caller's span; it returns the context to carry,
    /// or `None` to leave the record as it is. A record with a `traceparent` header of its own
    /// ([`ProducerRecord::traceparent`](super::ProducerRecord::traceparent)) keeps it. Unset
    /// (the default), the writer pays one branch per record. With `tracing-opentelemetry` it
    /// is two lines (docs/observability.md, "Trace context in records"):
    ///
    /// ```ignore
    /// .traceparent_from(|| {
    ///     let cx = tracing::Span::current().context(); // OpenTelemetrySpanExt
    ///     let sc = cx.span().span_context().clone();   // TraceContextExt
    ///     TraceParent::new(sc.trace_id().to_bytes(), sc.span_id().to_bytes(), sc.trace_flags().to_u8())
    /// })
    /// ```
    pub fn traceparent_from(
        mut self,
        source: impl Fn() -> Option<crate::ops::otel::TraceParent> + Send + Sync + 'static,
    ) -> Self {
        self.traceparent_from = Some(Arc::new(source));
        self
    }

    /// Makes the writer transactional (Java `transactional.id`, KIP-98): records are written
    /// in transactions ([`Writer::init_transactions`], [`Writer::begin_transaction`],
    /// [`Writer::commit_transaction`], [`Writer::abort_transaction`]) that `read_committed`
    /// readers see whole or not at all, and a newer writer with the same id fences this one.
    /// Turns idempotence on: with `enable_idempotence(false)`, `acks` other than `all` or more
    /// than 5 requests in flight, `build` fails with [`WriterConfigError::Conflict`]; an empty
    /// id with [`WriterConfigError::OutOfRange`].
    pub fn transactional_id(mut self, id: impl Into<String>) -> Self {
        self.transactional_id = Some(id.into());
        self
    }

    /// The longest a transaction may stay open before its coordinator aborts it (Java
    /// `transaction.timeout.ms`; default 1 min, 1 ms..=2^31-1 ms, and at most the broker's
    /// `transaction.max.timeout.ms`, else `init_transactions` fails with
    /// `INVALID_TRANSACTION_TIMEOUT`). Sent with InitProducerId.
    pub fn transaction_timeout(mut self, timeout: Duration) -> Self {
        self.transaction_timeout = timeout;
        self
    }

    /// Checks the settings and starts the writer (no I/O until the first record; needs a
    /// tokio runtime).
    ///
    /// # Errors
    ///
    /// [`WriterConfigError::OutOfRange`] for a setting outside its range (see the
    /// module's table), [`WriterConfigError::Conflict`] for contradicting settings,
    /// [`WriterConfigError::UnsupportedCompression`] for a codec this build leaves out (its
    /// cargo feature is off), [`WriterConfigError::InvalidTopic`] for a default `topic` that is
    /// not a legal topic name.
    pub fn build(self) -> Result<Writer, WriterConfigError> {
        let config = self.validate()?;
        Ok(Writer::start_with_push(
            self.transport,
            config,
            self.enable_metrics_push,
        ))
    }

    /// The transport the writer will send through.
    pub(crate) fn transport_ref(&self) -> &Transport {
        &self.transport
    }

    /// Checks every setting (in the order a user meets them in the table, so the first bad one
    /// is the one reported) and makes the writer's [`Config`].
    pub(crate) fn validate(&self) -> Result<Config, WriterConfigError> {
        let spans = SpansMs::of(self);
        let max_request_size = self
            .max_request_size
            .unwrap_or_else(|| DEFAULT_MAX_REQUEST_SIZE.max(self.batch_size));
        self.check_ranges(&spans, max_request_size)?;
        let idempotent = self.check_delivery_guarantees()?;
        range(
            "max_in_flight_requests_per_connection",
            self.max_in_flight as u64,
            (1..=1_000).contains(&self.max_in_flight),
            "1..=1000",
        )?;
        self.check_topic_and_codec()?;
        Ok(self.config(&spans, max_request_size, idempotent))
    }

    /// The range of every size and time span, one row per setting.
    fn check_ranges(&self, t: &SpansMs, max_request_size: usize) -> Result<(), WriterConfigError> {
        let u = |v: usize| v as u64;
        let max_buffered = self.max_buffered_records;
        #[rustfmt::skip]
        let checks: [(&'static str, u64, bool, &'static str); 12] = [
            ("linger", t.linger, t.linger <= 3_600_000, "0 ms..=3600000 ms (1 h)"),
            ("batch_size", u(self.batch_size), (1_024..=1 << 30).contains(&self.batch_size), "1024..=1073741824"),
            ("batch_max_records", u(self.batch_max_records), (1..=i32::MAX as usize).contains(&self.batch_max_records), "1..=2147483647"),
            ("request_timeout", t.request_timeout, (1..=i32::MAX as u64).contains(&t.request_timeout), "1 ms..=2147483647 ms"),
            // Every row is computed before the first is checked: saturating, so a linger or
            // request timeout out of range (reported by its own row, above) cannot overflow here.
            ("delivery_timeout", t.delivery_timeout, t.delivery_timeout >= t.linger.saturating_add(t.request_timeout) && t.delivery_timeout <= i32::MAX as u64, ">= linger + request_timeout, <= 2147483647 ms"),
            ("retry_backoff", t.retry_backoff, t.retry_backoff <= 3_600_000, "0 ms..=3600000 ms (1 h)"),
            ("retry_backoff_max", t.retry_backoff_max, t.retry_backoff_max <= 3_600_000, "0 ms..=3600000 ms (1 h)"),
            ("max_block", t.max_block, t.max_block <= i32::MAX as u64, "0 ms..=2147483647 ms"),
            ("buffer_memory", u(self.buffer_memory), self.buffer_memory >= self.batch_size && self.buffer_memory <= usize::MAX >> 4, ">= batch_size"),
            // Unset, there is no limit to check.
            ("max_buffered_records", u(max_buffered.unwrap_or(0)), max_buffered.is_none_or(|n| (1..=usize::MAX >> 4).contains(&n)), ">= 1"),
            ("max_request_size", u(max_request_size), max_request_size >= self.batch_size && max_request_size <= i32::MAX as usize, "batch_size..=2147483647"),
            ("transaction_timeout", t.transaction_timeout, (1..=i32::MAX as u64).contains(&t.transaction_timeout), "1 ms..=2147483647 ms"),
        ];
        checks
            .into_iter()
            .try_for_each(|(name, value, ok, allowed)| range(name, value, ok, allowed))
    }

    /// The transactional id's and idempotence's needs (acks = all, at most 5 requests in
    /// flight); returns whether the writer is idempotent by its own settings.
    fn check_delivery_guarantees(&self) -> Result<bool, WriterConfigError> {
        if let Some(id) = &self.transactional_id {
            range("transactional_id", 0, !id.is_empty(), "a non-empty string")?;
            if self.enable_idempotence == Some(false) {
                return Err(WriterConfigError::Conflict(
                    "transactional_id needs idempotence: enable_idempotence(false) contradicts it",
                ));
            }
            if self.acks != Acks::All {
                return Err(WriterConfigError::Conflict(
                    "transactional_id needs acks = all",
                ));
            }
            if self.max_in_flight > 5 {
                return Err(WriterConfigError::Conflict(
                    "transactional_id allows at most 5 requests in flight",
                ));
            }
        }
        Ok(match self.enable_idempotence {
            Some(true) => {
                if self.acks != Acks::All {
                    return Err(WriterConfigError::Conflict(
                        "enable_idempotence(true) needs acks = all",
                    ));
                }
                if self.max_in_flight > 5 {
                    return Err(WriterConfigError::Conflict(
                        "enable_idempotence(true) allows at most 5 requests in flight",
                    ));
                }
                true
            }
            Some(false) => false,
            None => self.acks == Acks::All && self.max_in_flight <= 5,
        })
    }

    /// The default topic is a legal name and the codec is in this build.
    fn check_topic_and_codec(&self) -> Result<(), WriterConfigError> {
        if let Some(topic) = &self.topic
            && !crate::ops::topics::is_valid_topic_name(topic)
        {
            return Err(WriterConfigError::InvalidTopic {
                topic: topic.clone(),
            });
        }
        let compression = self.compression.compression();
        if !compression.is_supported() {
            return Err(WriterConfigError::UnsupportedCompression { compression });
        }
        Ok(())
    }

    /// The checked settings as the writer's [`Config`].
    fn config(&self, t: &SpansMs, max_request_size: usize, idempotent: bool) -> Config {
        let transactional = self.transactional_id.is_some();
        let sticky = match self.balancer {
            Some(_) => None,
            None => Some(Arc::new(UniformSticky::new().batch_size(self.batch_size))),
        };
        let balancer = match (&self.balancer, &sticky) {
            (Some(b), _) => b.clone(),
            (None, Some(s)) => s.clone() as Arc<dyn Balancer>,
            (None, None) => Arc::new(UniformSticky::new()) as Arc<dyn Balancer>,
        };
        Config {
            acks: self.acks,
            linger_ms: t.linger,
            batch_size: self.batch_size,
            batch_max_records: self.batch_max_records,
            compression: self.compression,
            balancer,
            sticky,
            max_in_flight: self.max_in_flight,
            delivery_timeout_ms: t.delivery_timeout,
            request_timeout_ms: t.request_timeout,
            retry_backoff_ms: t.retry_backoff,
            retry_backoff_max_ms: t.retry_backoff_max.max(t.retry_backoff),
            max_block_ms: t.max_block,
            buffer_memory: self.buffer_memory,
            max_buffered_records: self.max_buffered_records,
            max_request_size,
            allow_auto_topic_creation: self.allow_auto_topic_creation,
            topic: self.topic.clone(),
            // A transactional writer is idempotent whatever was set, with no silent fallback.
            idempotent: idempotent || transactional,
            idempotence_explicit: self.enable_idempotence == Some(true) || transactional,
            on_completion: self.on_completion.clone(),
            traceparent_from: self.traceparent_from.clone(),
            transactional_id: self.transactional_id.clone(),
            transaction_timeout_ms: t.transaction_timeout,
        }
    }
}

/// The builder's time spans in whole milliseconds: they are checked and kept in the unit the
/// protocol carries.
struct SpansMs {
    linger: u64,
    request_timeout: u64,
    delivery_timeout: u64,
    retry_backoff: u64,
    retry_backoff_max: u64,
    max_block: u64,
    transaction_timeout: u64,
}

impl SpansMs {
    fn of(b: &WriterBuilder) -> Self {
        SpansMs {
            linger: millis(b.linger),
            request_timeout: millis(b.request_timeout),
            delivery_timeout: millis(b.delivery_timeout),
            retry_backoff: millis(b.retry_backoff),
            retry_backoff_max: millis(b.retry_backoff_max),
            max_block: millis(b.max_block),
            transaction_timeout: millis(b.transaction_timeout),
        }
    }
}

/// `Ok` when `ok`, else [`WriterConfigError::OutOfRange`] naming `name`'s unit (the table's;
/// time spans in whole milliseconds).
fn range(
    name: &'static str,
    value: u64,
    ok: bool,
    allowed: &'static str,
) -> Result<(), WriterConfigError> {
    let unit = match name {
        "linger"
        | "delivery_timeout"
        | "request_timeout"
        | "retry_backoff"
        | "retry_backoff_max"
        | "max_block"
        | "transaction_timeout" => "ms",
        "transactional_id" => "characters",
        "batch_size" | "buffer_memory" | "max_request_size" => "bytes",
        "batch_max_records" | "max_buffered_records" => "records",
        _ => "requests",
    };
    if ok {
        Ok(())
    } else {
        Err(WriterConfigError::OutOfRange {
            name,
            value,
            unit,
            allowed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder() -> WriterBuilder {
        WriterBuilder::new(Transport::builder(["127.0.0.1:1"]).build().unwrap())
    }

    #[test]
    fn defaults_follow_the_documented_table() {
        let c = builder().validate().unwrap();
        assert_eq!(c.acks, Acks::All);
        assert_eq!(c.linger_ms, 5);
        assert_eq!(c.batch_size, 1_048_576);
        assert_eq!(c.max_in_flight, 5);
        assert_eq!(c.delivery_timeout_ms, 120_000);
        assert_eq!(c.request_timeout_ms, 30_000);
        assert_eq!(c.retry_backoff_ms, 100);
        assert_eq!(c.max_block_ms, 60_000);
        assert!(c.allow_auto_topic_creation, "as the Java producer");
        assert_eq!(c.buffer_memory, 33_554_432);
        assert_eq!(c.max_request_size, 16 * 1_048_576);
        assert!(c.idempotent && !c.idempotence_explicit);
        assert!(c.sticky.is_some());
        // Idempotence left at its default goes with acks other than all.
        assert!(!builder().acks(Acks::Leader).validate().unwrap().idempotent);
        // max_request_size follows a larger batch_size.
        let big = builder()
            .batch_size(32 << 20)
            .buffer_memory(64 << 20)
            .validate()
            .unwrap();
        assert_eq!(big.max_request_size, 32 << 20);
    }

    /// The module's table says what the code does: every time span and size default in it is
    /// the one `validate` gives.
    #[test]
    fn the_settings_table_matches_the_defaults() {
        let c = builder().validate().unwrap();
        let doc = include_str!("config.rs");
        let mut checked = 0;
        for row in doc.lines().filter(|l| l.starts_with("//! | `")) {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let (name, default) = (cells[1].trim_matches('`'), cells[2]);
            let parse = |unit: &str, scale: u64| {
                default
                    .strip_suffix(unit)
                    .and_then(|n| n.trim().parse::<u64>().ok())
                    .map(|n| n * scale)
            };
            let value = parse(" ms", 1)
                .or_else(|| parse(" s", 1_000))
                .or_else(|| parse(" min", 60_000))
                .or_else(|| parse(" MiB", 1 << 20));
            let Some(value) = value else { continue };
            let actual = match name {
                "linger" => c.linger_ms,
                "delivery_timeout" => c.delivery_timeout_ms,
                "request_timeout" => c.request_timeout_ms,
                "retry_backoff" => c.retry_backoff_ms,
                "retry_backoff_max" => c.retry_backoff_max_ms,
                "max_block" => c.max_block_ms,
                "transaction_timeout" => c.transaction_timeout_ms,
                "batch_size" => c.batch_size as u64,
                "buffer_memory" => c.buffer_memory as u64,
                other => panic!("no check for {other}"),
            };
            assert_eq!(actual, value, "{name}: the table says {default}");
            checked += 1;
        }
        assert_eq!(checked, 9, "every time span and size default was found");
    }

    #[test]
    fn out_of_range_and_conflicting_settings_are_typed_errors() {
        let name = |b: WriterBuilder| match b.validate() {
            Err(WriterConfigError::OutOfRange { name, .. }) => name,
            other => panic!("{other:?}"),
        };
        assert_eq!(name(builder().batch_size(10)), "batch_size");
        assert_eq!(name(builder().batch_max_records(0)), "batch_max_records");
        assert_eq!(name(builder().transactional_id("")), "transactional_id");
        assert_eq!(
            name(builder().transaction_timeout(Duration::ZERO)),
            "transaction_timeout"
        );
        // A transactional writer is idempotent, with acks = all and at most 5 in flight.
        for b in [
            builder().transactional_id("t").enable_idempotence(false),
            builder().transactional_id("t").acks(Acks::Leader),
            builder()
                .transactional_id("t")
                .max_in_flight_requests_per_connection(6),
        ] {
            assert!(
                matches!(b.validate(), Err(WriterConfigError::Conflict(_))),
                "{b:?}"
            );
        }
        let c = builder().transactional_id("t").validate().unwrap();
        assert!(c.idempotent && c.idempotence_explicit);
        assert_eq!(c.transaction_timeout_ms, 60_000);
        assert_eq!(
            name(builder().request_timeout(Duration::ZERO)),
            "request_timeout"
        );
        // Below a millisecond is zero milliseconds, what the protocol would carry.
        assert_eq!(
            name(builder().request_timeout(Duration::from_micros(999))),
            "request_timeout"
        );
        assert_eq!(
            name(builder().request_timeout(Duration::from_millis(i32::MAX as u64 + 1))),
            "request_timeout"
        );
        assert_eq!(
            name(
                builder()
                    .linger(Duration::from_millis(10))
                    .request_timeout(Duration::from_secs(1))
                    .delivery_timeout(Duration::from_millis(1_009))
            ),
            "delivery_timeout"
        );
        // Duration::MAX (the natural "no timeout") is refused: its deadline would overflow on
        // platforms whose Instant counts nanoseconds in a u64.
        assert_eq!(
            name(builder().delivery_timeout(Duration::MAX)),
            "delivery_timeout"
        );
        assert_eq!(
            name(builder().delivery_timeout(Duration::from_millis(i32::MAX as u64 + 1))),
            "delivery_timeout"
        );
        assert!(
            builder()
                .delivery_timeout(Duration::from_millis(i32::MAX as u64))
                .validate()
                .is_ok()
        );
        assert_eq!(
            name(builder().linger(Duration::from_secs(3_600) + Duration::from_millis(1))),
            "linger"
        );
        assert_eq!(
            name(builder().retry_backoff(Duration::from_secs(3_601))),
            "retry_backoff"
        );
        assert_eq!(
            name(builder().max_block(Duration::from_millis(i32::MAX as u64 + 1))),
            "max_block"
        );
        let c = builder()
            .max_block(Duration::ZERO)
            .allow_auto_topic_creation(false)
            .validate()
            .unwrap();
        assert_eq!(c.max_block_ms, 0);
        assert!(!c.allow_auto_topic_creation);
        // The bounds themselves are allowed.
        assert!(
            builder()
                .linger(Duration::from_secs(3_600))
                .retry_backoff(Duration::from_secs(3_600))
                .request_timeout(Duration::from_millis(1))
                .delivery_timeout(Duration::from_millis(3_600_001))
                .validate()
                .is_ok()
        );
        match builder().linger(Duration::from_secs(7_200)).validate() {
            Err(
                e @ WriterConfigError::OutOfRange {
                    value: 7_200_000, ..
                },
            ) => {
                assert!(e.to_string().contains("linger = 7200000 ms"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(name(builder().buffer_memory(1_000)), "buffer_memory");
        assert_eq!(
            name(builder().max_buffered_records(0)),
            "max_buffered_records"
        );
        assert_eq!(name(builder().max_request_size(1_024)), "max_request_size");
        assert_eq!(
            name(
                builder()
                    .enable_idempotence(false)
                    .max_in_flight_requests_per_connection(0)
            ),
            "max_in_flight_requests_per_connection"
        );
        let conflict =
            |b: WriterBuilder| matches!(b.validate(), Err(WriterConfigError::Conflict(_)));
        assert!(conflict(
            builder().acks(Acks::None).enable_idempotence(true)
        ));
        assert!(conflict(
            builder()
                .enable_idempotence(true)
                .max_in_flight_requests_per_connection(6)
        ));
        // A default topic with an illegal name is refused here, not by every record later.
        for bad in ["", "bad name", ".", "..", &"x".repeat(250)] {
            assert_eq!(
                builder().topic(bad).validate().unwrap_err(),
                WriterConfigError::InvalidTopic { topic: bad.into() },
                "{bad:?}"
            );
        }
        assert!(builder().topic("orders.v1_a-b").validate().is_ok());
        // Left unset, idempotence is silently off above 5 requests in flight (as Java).
        let c = builder()
            .max_in_flight_requests_per_connection(6)
            .validate()
            .unwrap();
        assert!(!c.idempotent && !c.idempotence_explicit);
        // Without idempotence, more requests in flight are fine.
        assert!(
            builder()
                .enable_idempotence(false)
                .max_in_flight_requests_per_connection(50)
                .validate()
                .is_ok()
        );
        let e = builder().batch_size(10).validate().unwrap_err();
        assert!(e.to_string().contains("batch_size = 10"), "{e}");
    }

    /// With a codec's cargo feature off, `build` refuses `compression(Compression::Gzip)`,
    /// rather than every record failing later. Each codec is taken exactly when it is built in; run with
    /// `--no-default-features` to see the refusals (`cargo xtask test` does).
    #[test]
    fn a_codec_left_out_of_the_build_is_refused_by_build() {
        use kafkit_compress::Compression;
        for c in Compression::ALL {
            match builder().compression(c).validate() {
                Ok(_) => assert!(c.is_supported(), "{c} is not built in but was taken"),
                Err(e) => {
                    assert!(!c.is_supported(), "{c}: {e}");
                    assert_eq!(
                        e,
                        WriterConfigError::UnsupportedCompression { compression: c }
                    );
                    assert!(e.to_string().contains(c.name()), "{e}");
                }
            }
        }
        assert!(Compression::None.is_supported());
    }
}
