//! [`ReaderBuilder`]: every setting of the [`Reader`], with its default, unit and range.
//!
//! Time spans are [`Duration`]s, sent in whole milliseconds (what the protocol carries). The
//! ranges are checked by [`ReaderBuilder::build`] (`Config::validate`, in this file), which
//! names the setting in an [`Error::Config`].
//!
//! | Setting | Default | Unit, range | Java / librdkafka name | What it does |
//! |---|---|---|---|---|
//! | `fetch_min_bytes` | 1 | bytes, 0..=2^31-1 | `fetch.min.bytes` | Least data a broker gathers before it answers a Fetch (it waits at most `fetch_max_wait`). |
//! | `fetch_max_wait` | 500 ms | `Duration`, 0..=2^31-1 ms | `fetch.max.wait.ms` / `fetch.wait.max.ms` | Longest time a broker holds a Fetch waiting for `fetch_min_bytes`; also the least time between two Fetch requests to a broker that answered nothing. |
//! | `fetch_max_bytes` | 50 MiB | bytes, 1..=2^31-1 | `fetch.max.bytes` | Most data of one Fetch response (a first batch larger than this still comes back, KIP-74). |
//! | `max_partition_fetch_bytes` | 1 MiB | bytes, 1..=2^31-1 | `max.partition.fetch.bytes` | Most data per partition in one Fetch response (same KIP-74 exception); a partition holding this much undelivered data is not fetched. |
//! | `queued_max_bytes` | 64 MiB | bytes, >= 1 | (librdkafka `queued.max.messages.kbytes`) | Most fetched, undelivered record data held (paused partitions' buffers left out); above it no Fetch is sent until the application reads. |
//! | `max_poll_records` | 500 | records, >= 1 | `max.poll.records` | `next_batch` stops adding partitions once it holds this many records (a partition's records are never split). |
//! | `isolation_level` | read uncommitted | | `isolation.level` | `ReadCommitted`: read up to the last stable offset, drop aborted transactions (KIP-98). |
//! | `auto_offset_reset` | latest | earliest, latest, none | `auto.offset.reset` | Where to go when a position is out of range (or a log was truncated and no diverging offset is known); `None` reports a typed error; for a group member's partition without a committed offset, `ReaderError::NoOffsetForPartition`. |
//! | `client_rack` | none | | `client.rack` | The consumer's rack: brokers may name a closer replica to read from (KIP-392, Fetch v11+). |
//! | `enable_metrics_push` | true | bool | `enable.metrics.push` | Pushes the Reader's metrics to the cluster (KIP-714); a group member's Reader never does (its member decides). |
//! | `fetch_sessions` | true | | (Java always; librdkafka none) | Incremental fetch sessions (KIP-227, Fetch v7+), used when the broker hands out a session id. |
//! | `retry_backoff` | 100 ms | `Duration`, 0..=1 h | `retry.backoff.ms` / `fetch.error.backoff.ms` | First wait before a partition or a broker is fetched again after an error; doubles per failure (KIP-580). |
//! | `retry_backoff_max` | 1 s | `Duration`, >= `retry_backoff`, <= 1 h | `retry.backoff.max.ms` | Longest such wait. |
//! | `preferred_replica_recheck` | 5 min | `Duration`, 1 s..=1 day | (`metadata.max.age.ms` in Java) | How long a preferred read replica (KIP-392) is used before the leader is asked again. |
//! | `check_crcs` | true | | `check.crcs` | Verify each batch's CRC-32C before reading it. |
//! | `max_batch_decompressed_bytes` | 64 MiB | bytes, >= 1 | (none) | Largest decompressed size accepted for one record batch: a bigger (or hostile) batch fails its partition with a typed error. |
//! | `process_spans` | false | | (Java OTel instrumentation's receive/process telemetry) | A `process {topic}` span per record handed out as a [`ConsumerRecord`](super::ConsumerRecord) (`ConsumerRecord::span`; docs/observability.md). |
//! | `on_traceparent` | none | `Fn(&Span, &TraceParent)` | | Called with each process span whose record carries a valid `traceparent`: set the parent or add a link there. |

use std::time::Duration;

use super::Reader;
use crate::error::{Error, Result};
use crate::ops::offsets::IsolationLevel;
use crate::ops::otel::{ProcessSpans, TraceParent};
use crate::time::millis;
use crate::transport::{Backoff, Transport};

/// What to do when a partition's position is not valid: out of range, or no offset yet (Java
/// `auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AutoOffsetReset {
    /// Go to the log start offset (`earliest`).
    Earliest,
    /// Go to the log end offset, or the last stable offset under `ReadCommitted` (`latest`,
    /// the default).
    #[default]
    Latest,
    /// Report [`crate::ReaderError::OffsetOutOfRange`] (or `LogTruncation`) for the partition and
    /// stop fetching it until the application seeks (`none`); a group member's partition
    /// without a committed offset gets [`crate::ReaderError::NoOffsetForPartition`] instead of
    /// a start.
    None,
}

/// The settings a [`Reader`] runs with (validated).
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) fetch_min_bytes: i32,
    pub(crate) fetch_max_wait: Duration,
    pub(crate) fetch_max_bytes: i32,
    pub(crate) max_partition_fetch_bytes: i32,
    pub(crate) queued_max_bytes: usize,
    pub(crate) max_poll_records: usize,
    pub(crate) isolation_level: IsolationLevel,
    pub(crate) auto_offset_reset: AutoOffsetReset,
    pub(crate) client_rack: Option<String>,
    pub(crate) fetch_sessions: bool,
    pub(crate) retry_backoff: Duration,
    pub(crate) retry_backoff_max: Duration,
    pub(crate) preferred_replica_recheck: Duration,
    pub(crate) check_crcs: bool,
    pub(crate) max_batch_decompressed_bytes: usize,
    /// Per-record process spans (`process_spans`); `process` holds their group and hook.
    pub(crate) process_spans: bool,
    pub(crate) process: ProcessSpans,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            fetch_min_bytes: 1,
            fetch_max_wait: Duration::from_millis(500),
            fetch_max_bytes: 50 << 20,
            max_partition_fetch_bytes: 1 << 20,
            queued_max_bytes: 64 << 20,
            max_poll_records: 500,
            isolation_level: IsolationLevel::ReadUncommitted,
            auto_offset_reset: AutoOffsetReset::Latest,
            client_rack: None,
            fetch_sessions: true,
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
            preferred_replica_recheck: Duration::from_secs(300),
            check_crcs: true,
            max_batch_decompressed_bytes: 64 << 20,
            process_spans: false,
            process: ProcessSpans::default(),
        }
    }
}

/// The largest time span the protocol carries in milliseconds (`i32::MAX` ms, ~24.8 days).
const MAX_WIRE_SPAN: Duration = Duration::from_millis(i32::MAX as u64);
const HOUR: Duration = Duration::from_secs(3600);

impl Config {
    /// The backoff between tries of one partition (`retry_backoff` growing to
    /// `retry_backoff_max`), shared by the sources, `apply` and the manager.
    pub(super) fn backoff(&self) -> Backoff {
        Backoff {
            base_ms: millis(self.retry_backoff),
            max_ms: millis(self.retry_backoff_max),
        }
    }

    /// Checks every range of the settings table; the error names the setting.
    fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(Error::Config(format!("reader: {what}")));
        if self.fetch_min_bytes < 0 {
            return bad("fetch_min_bytes must be 0..=2^31-1 bytes");
        }
        if self.fetch_max_wait > MAX_WIRE_SPAN {
            return bad("fetch_max_wait must be at most 2^31-1 ms");
        }
        if self.fetch_max_bytes < 1 {
            return bad("fetch_max_bytes must be 1..=2^31-1 bytes");
        }
        if self.max_partition_fetch_bytes < 1 {
            return bad("max_partition_fetch_bytes must be 1..=2^31-1 bytes");
        }
        if self.queued_max_bytes < 1 {
            return bad("queued_max_bytes must be at least 1 byte");
        }
        if self.max_poll_records < 1 {
            return bad("max_poll_records must be at least 1");
        }
        if self.retry_backoff > HOUR {
            return bad("retry_backoff must be at most 1 h");
        }
        if self.retry_backoff_max < self.retry_backoff || self.retry_backoff_max > HOUR {
            return bad("retry_backoff_max must be retry_backoff..=1 h");
        }
        if self.preferred_replica_recheck < Duration::from_secs(1)
            || self.preferred_replica_recheck > Duration::from_secs(86_400)
        {
            return bad("preferred_replica_recheck must be 1 s..=1 day");
        }
        if self.max_batch_decompressed_bytes < 1 {
            return bad("max_batch_decompressed_bytes must be at least 1 byte");
        }
        Ok(())
    }
}

/// Builds a [`Reader`]. Every setting, with its default, unit, range and Java / librdkafka
/// name:
///
/// | Setting | Default | Unit, range | Java / librdkafka name |
/// |---|---|---|---|
/// | [`fetch_min_bytes`](Self::fetch_min_bytes) | 1 | bytes, 0..=2^31-1 | `fetch.min.bytes` |
/// | [`fetch_max_wait`](Self::fetch_max_wait) | 500 ms | 0..=2^31-1 ms | `fetch.max.wait.ms` |
/// | [`fetch_max_bytes`](Self::fetch_max_bytes) | 50 MiB | bytes, 1..=2^31-1 | `fetch.max.bytes` |
/// | [`max_partition_fetch_bytes`](Self::max_partition_fetch_bytes) | 1 MiB | bytes, 1..=2^31-1 | `max.partition.fetch.bytes` |
/// | [`queued_max_bytes`](Self::queued_max_bytes) | 64 MiB | bytes, >= 1 | librdkafka `queued.max.messages.kbytes` |
/// | [`max_poll_records`](Self::max_poll_records) | 500 | records, >= 1 | `max.poll.records` |
/// | [`isolation_level`](Self::isolation_level) | read uncommitted | | `isolation.level` |
/// | [`auto_offset_reset`](Self::auto_offset_reset) | latest | | `auto.offset.reset` |
/// | [`client_rack`](Self::client_rack) | none | | `client.rack` |
/// | [`fetch_sessions`](Self::fetch_sessions) | true | | (KIP-227) |
/// | [`retry_backoff`](Self::retry_backoff) | 100 ms | 0..=1 h | `retry.backoff.ms` |
/// | [`retry_backoff_max`](Self::retry_backoff_max) | 1 s | `retry_backoff`..=1 h | `retry.backoff.max.ms` |
/// | [`preferred_replica_recheck`](Self::preferred_replica_recheck) | 5 min | 1 s..=1 day | (`metadata.max.age.ms`) |
/// | [`check_crcs`](Self::check_crcs) | true | | `check.crcs` |
/// | [`max_batch_decompressed_bytes`](Self::max_batch_decompressed_bytes) | 64 MiB | bytes, >= 1 | |
///
/// The table with a sentence per setting is at the top of `reader/config.rs`.
///
/// ```
/// use kafkit::{AutoOffsetReset, IsolationLevel, Reader, Transport};
/// use std::time::Duration;
///
/// let transport = Transport::builder(["127.0.0.1:9092"]).build()?;
/// let reader = Reader::builder(transport)
///     .fetch_max_wait(Duration::from_millis(100))
///     .isolation_level(IsolationLevel::ReadCommitted)
///     .auto_offset_reset(AutoOffsetReset::Earliest)
///     .build()?;
/// assert!(reader.assignment().is_empty());
/// assert!(Reader::builder(Transport::builder(["h:1"]).build()?).max_poll_records(0).build().is_err());
/// # Ok::<(), kafkit::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct ReaderBuilder {
    transport: Transport,
    config: Config,
    enable_metrics_push: bool,
}

impl ReaderBuilder {
    pub(crate) fn new(transport: Transport) -> Self {
        ReaderBuilder {
            transport,
            config: Config::default(),
            enable_metrics_push: true,
        }
    }

    /// Whether the Reader pushes its metrics to the cluster (KIP-714; Java's
    /// `enable.metrics.push`, default true; Java's consumer pushes without a group too). On,
    /// the Reader runs a [`Telemetry`](crate::telemetry::Telemetry) engine fed by
    /// [`Reader::metric_source`]: it asks for a subscription (GetTelemetrySubscriptions) in
    /// the background, pushes what the operator subscribed to at the interval the broker
    /// gives, and a last time on [`Reader::close_within`]. Off, nothing is sent and
    /// [`Reader::client_instance_id`] fails. A group member's Reader never pushes: the
    /// [`GroupReaderBuilder::enable_metrics_push`](crate::GroupReaderBuilder::enable_metrics_push)
    /// of its member decides, and the member's engine reports the Reader's metrics.
    pub fn enable_metrics_push(mut self, on: bool) -> Self {
        self.enable_metrics_push = on;
        self
    }

    /// Least data, in bytes, a broker gathers before answering a Fetch (Java `fetch.min.bytes`).
    /// Default 1.
    pub fn fetch_min_bytes(mut self, bytes: i32) -> Self {
        self.config.fetch_min_bytes = bytes;
        self
    }

    /// Longest time a broker holds a Fetch waiting for `fetch_min_bytes` (Java
    /// `fetch.max.wait.ms`). Default 500 ms. While nothing arrives, each broker gets at most
    /// one Fetch per this span.
    pub fn fetch_max_wait(mut self, wait: Duration) -> Self {
        self.config.fetch_max_wait = wait;
        self
    }

    /// Most data, in bytes, in one Fetch response (Java `fetch.max.bytes`). Default 50 MiB.
    pub fn fetch_max_bytes(mut self, bytes: i32) -> Self {
        self.config.fetch_max_bytes = bytes;
        self
    }

    /// Most data, in bytes, per partition in one Fetch response (Java
    /// `max.partition.fetch.bytes`). Default 1 MiB.
    pub fn max_partition_fetch_bytes(mut self, bytes: i32) -> Self {
        self.config.max_partition_fetch_bytes = bytes;
        self
    }

    /// Most fetched, undelivered record data held, in bytes (librdkafka
    /// `queued.max.messages.kbytes`); paused partitions' buffers are left out. Default 64 MiB.
    pub fn queued_max_bytes(mut self, bytes: usize) -> Self {
        self.config.queued_max_bytes = bytes;
        self
    }

    /// Records after which [`Reader::next_batch`] stops adding partitions (Java
    /// `max.poll.records`). Default 500.
    pub fn max_poll_records(mut self, records: usize) -> Self {
        self.config.max_poll_records = records;
        self
    }

    /// Which records may be read (Java `isolation.level`). Default read uncommitted.
    pub fn isolation_level(mut self, level: IsolationLevel) -> Self {
        self.config.isolation_level = level;
        self
    }

    /// Where to go when a position is out of range (Java `auto.offset.reset`), and where a
    /// group member's partition without a committed offset starts (`None`:
    /// [`crate::ReaderError::NoOffsetForPartition`] instead). Default latest.
    pub fn auto_offset_reset(mut self, reset: AutoOffsetReset) -> Self {
        self.config.auto_offset_reset = reset;
        self
    }

    /// The consumer's rack (Java `client.rack`, KIP-392). Default none.
    pub fn client_rack(mut self, rack: impl Into<String>) -> Self {
        self.config.client_rack = Some(rack.into());
        self
    }

    /// Whether to use incremental fetch sessions (KIP-227). Default true.
    pub fn fetch_sessions(mut self, enabled: bool) -> Self {
        self.config.fetch_sessions = enabled;
        self
    }

    /// First wait before fetching again after an error (Java `retry.backoff.ms`). Default
    /// 100 ms.
    pub fn retry_backoff(mut self, backoff: Duration) -> Self {
        self.config.retry_backoff = backoff;
        self
    }

    /// Longest wait between retries (Java `retry.backoff.max.ms`). Default 1 s.
    pub fn retry_backoff_max(mut self, backoff: Duration) -> Self {
        self.config.retry_backoff_max = backoff;
        self
    }

    /// How long a preferred read replica is used before asking the leader again (KIP-392).
    /// Default 5 min.
    pub fn preferred_replica_recheck(mut self, recheck: Duration) -> Self {
        self.config.preferred_replica_recheck = recheck;
        self
    }

    /// Whether to verify batch CRCs (Java `check.crcs`). Default true.
    pub fn check_crcs(mut self, check: bool) -> Self {
        self.config.check_crcs = check;
        self
    }

    /// Largest decompressed record batch accepted, in bytes. Default 64 MiB.
    pub fn max_batch_decompressed_bytes(mut self, bytes: usize) -> Self {
        self.config.max_batch_decompressed_bytes = bytes;
        self
    }

    /// Makes a `process {topic}` span (OpenTelemetry's messaging conventions, kind CONSUMER:
    /// topic, partition, offset, UTF-8 key) for every record handed out as a
    /// [`ConsumerRecord`](super::ConsumerRecord): by the `Stream`, and by
    /// `PartitionRecords::into_consumer_records` for `next_batch`'s records. The record
    /// carries it ([`ConsumerRecord::span`](super::ConsumerRecord::span)) and it ends when the
    /// record (with every clone of the span) is dropped. Default false: a span per record
    /// costs (a subscriber call and an allocation each); off, the reader makes none and pays
    /// one branch per record. With no subscriber interested in `kafkit::otel` at INFO no span
    /// is made either.
    pub fn process_spans(mut self, on: bool) -> Self {
        self.config.process_spans = on;
        self
    }

    /// Called with each process span (see [`ReaderBuilder::process_spans`]) whose record
    /// carries a valid W3C `traceparent` header, before the record is handed out: the place
    /// to make the producer's span the parent or a link, with `tracing-opentelemetry`
    /// (docs/observability.md, "Trace context in records", has the code). Runs on the task
    /// that takes the record: keep it short, never block. Without `process_spans(true)` it is
    /// never called. Default none.
    pub fn on_traceparent(
        mut self,
        hook: impl Fn(&tracing::Span, &TraceParent) + Send + Sync + 'static,
    ) -> Self {
        self.config.process.hook = Some(std::sync::Arc::new(hook));
        self
    }

    /// A group member's settings for the process spans: its group name, spans on when either
    /// builder asked for them, its hook in place of the Reader builder's when it has one.
    pub(crate) fn member_process_spans(
        mut self,
        group: &str,
        on: bool,
        hook: Option<crate::ops::otel::TraceParentHook>,
    ) -> Self {
        self.config.process_spans |= on;
        self.config.process.group = Some(std::sync::Arc::from(group));
        if hook.is_some() {
            self.config.process.hook = hook;
        }
        self
    }

    /// The [`Reader`], with nothing assigned. No I/O happens here; tasks start on the first
    /// [`Reader::assign`].
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming a setting outside its range.
    pub fn build(self) -> Result<Reader> {
        self.config.validate()?;
        Ok(Reader::with_push(
            self.transport,
            self.config,
            self.enable_metrics_push,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_table_and_ranges_are_checked() {
        let c = Config::default();
        assert_eq!(c.fetch_max_wait, Duration::from_millis(500));
        assert_eq!(c.fetch_max_bytes, 52_428_800);
        assert_eq!(c.max_partition_fetch_bytes, 1_048_576);
        assert_eq!(c.queued_max_bytes, 64 << 20);
        assert_eq!(c.max_poll_records, 500);
        assert_eq!(c.auto_offset_reset, AutoOffsetReset::Latest);
        assert!(c.validate().is_ok());
        let bad = [
            Config {
                fetch_min_bytes: -1,
                ..Config::default()
            },
            Config {
                fetch_max_bytes: 0,
                ..Config::default()
            },
            Config {
                fetch_max_wait: Duration::from_secs(30 * 86_400),
                ..Config::default()
            },
            Config {
                retry_backoff_max: Duration::from_millis(10),
                ..Config::default()
            },
            Config {
                queued_max_bytes: 0,
                ..Config::default()
            },
        ];
        for c in bad {
            assert!(matches!(c.validate(), Err(Error::Config(_))), "{c:?}");
        }
    }
}
