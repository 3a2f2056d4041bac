//! [`ShareReaderBuilder`]: the settings of a share group member (the table is on the builder).

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::transport::Transport;

use super::{AcknowledgementCommit, ShareReader};

/// The acknowledgement commit callback.
pub(crate) type AckCallback = Arc<dyn Fn(&AcknowledgementCommit) + Send + Sync>;

/// When records are acknowledged (Java `share.acknowledgement.mode`, KIP-932).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AcknowledgementMode {
    /// Each poll (and each commit) accepts every record the poll before it handed out; the
    /// application does not call `acknowledge` (Java `implicit`, the default).
    #[default]
    Implicit,
    /// The application acknowledges each record with [`ShareReader::acknowledge`]; a poll while
    /// records of the last one are unacknowledged is a typed error (Java `explicit`).
    Explicit,
}

impl AcknowledgementMode {
    /// Java's name (`implicit`, `explicit`).
    pub fn name(self) -> &'static str {
        match self {
            AcknowledgementMode::Implicit => "implicit",
            AcknowledgementMode::Explicit => "explicit",
        }
    }
}

/// How many records a ShareFetch acquires (Java `share.acquire.mode`, KIP-1206; ShareFetch
/// v2's `ShareAcquireMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ShareAcquireMode {
    /// Whole batches: `max_poll_records` is a soft limit the broker may pass to end at a
    /// batch boundary (`batch_optimized`, the default).
    #[default]
    BatchOptimized,
    /// At most `max_poll_records` records per fetch, strictly (`record_limit`; needs
    /// ShareFetch v2, Kafka 4.2+).
    RecordLimit,
}

impl ShareAcquireMode {
    /// Java's name (`batch_optimized`, `record_limit`).
    pub fn name(self) -> &'static str {
        match self {
            ShareAcquireMode::BatchOptimized => "batch_optimized",
            ShareAcquireMode::RecordLimit => "record_limit",
        }
    }

    /// The wire value.
    pub(crate) fn wire(self) -> i8 {
        match self {
            ShareAcquireMode::BatchOptimized => 0,
            ShareAcquireMode::RecordLimit => 1,
        }
    }
}

/// The settings a built reader runs with.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) group_id: String,
    pub(crate) topics: Vec<String>,
    pub(crate) acknowledgement_mode: AcknowledgementMode,
    pub(crate) acquire_mode: ShareAcquireMode,
    pub(crate) max_poll_records: i32,
    pub(crate) max_poll_interval: Duration,
    pub(crate) fetch_max_wait: Duration,
    pub(crate) fetch_min_bytes: i32,
    pub(crate) fetch_max_bytes: i32,
    pub(crate) client_rack: Option<String>,
    pub(crate) retry_backoff: Duration,
    pub(crate) on_acknowledged: Option<AckCallback>,
    /// Per-record process spans (`process_spans`), with the group and the hook.
    pub(crate) process: Option<crate::ops::otel::ProcessSpans>,
    pub(crate) on_traceparent: Option<crate::ops::otel::TraceParentHook>,
}

/// Builds a [`ShareReader`]: a member of a share group (KIP-932). Every setting, its default and
/// Java's name (`ShareReaderBuilder::from_properties` takes those names):
///
/// | setting | default | unit / type | Java `KafkaShareConsumer` name |
/// | --- | --- | --- | --- |
/// | `group_id` | (required) | string | `group.id` |
/// | `topics` | (required before the first poll) | topic names | `subscribe(...)` |
/// | `acknowledgement_mode` | implicit | [`AcknowledgementMode`] | `share.acknowledgement.mode` |
/// | `acquire_mode` | batch optimized | [`ShareAcquireMode`] | `share.acquire.mode` (KIP-1206) |
/// | `max_poll_records` | 500 | records | `max.poll.records` |
/// | `max_poll_interval` | 300 s | `Duration` | `max.poll.interval.ms` |
/// | `fetch_max_wait` | 500 ms | `Duration` | `fetch.max.wait.ms` |
/// | `fetch_min_bytes` | 1 | bytes | `fetch.min.bytes` |
/// | `fetch_max_bytes` | 50 MiB | bytes | `fetch.max.bytes` |
/// | `client_rack` | none | string | `client.rack` |
/// | `retry_backoff` | 100 ms | `Duration` | `retry.backoff.ms` |
/// | `process_spans` | false | bool | (OTel instrumentation's process spans) |
/// | `on_traceparent` | none | `Fn(&Span, &TraceParent)` | |
/// | `enable_metrics_push` | true | bool | `enable.metrics.push` |
#[must_use]
pub struct ShareReaderBuilder {
    transport: Transport,
    config: Config,
    enable_metrics_push: bool,
}

impl std::fmt::Debug for ShareReaderBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareReaderBuilder")
            .field("group_id", &self.config.group_id)
            .field("topics", &self.config.topics)
            .finish_non_exhaustive()
    }
}

impl ShareReaderBuilder {
    pub(crate) fn new(transport: Transport, group_id: impl Into<String>) -> Self {
        ShareReaderBuilder {
            transport,
            config: Config {
                group_id: group_id.into(),
                topics: Vec::new(),
                acknowledgement_mode: AcknowledgementMode::Implicit,
                acquire_mode: ShareAcquireMode::BatchOptimized,
                max_poll_records: 500,
                max_poll_interval: Duration::from_secs(300),
                fetch_max_wait: Duration::from_millis(500),
                fetch_min_bytes: 1,
                fetch_max_bytes: 50 * 1024 * 1024,
                client_rack: None,
                retry_backoff: Duration::from_millis(100),
                on_acknowledged: None,
                process: None,
                on_traceparent: None,
            },
            enable_metrics_push: true,
        }
    }

    /// Whether the member pushes its metrics to the cluster (KIP-714; Java's
    /// `enable.metrics.push`, default true), with the resource attributes `group_id`,
    /// `group_member_id` and `client_rack`. On, the member runs a
    /// [`Telemetry`](crate::telemetry::Telemetry) engine fed by [`ShareReader::metric_source`]:
    /// it asks for a subscription (GetTelemetrySubscriptions) in the background, pushes what
    /// the operator subscribed to at the interval the broker gives, and a last time on
    /// [`ShareReader::close`]. Off, nothing is sent and [`ShareReader::client_instance_id`]
    /// fails.
    pub fn enable_metrics_push(mut self, on: bool) -> Self {
        self.enable_metrics_push = on;
        self
    }

    /// The settings as built so far (the `from_properties` tests read them).
    #[cfg(test)]
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// The topics to consume (Java `subscribe`). The coordinator assigns their partitions
    /// among the group's members.
    pub fn topics<I, S>(mut self, topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.topics = topics.into_iter().map(Into::into).collect();
        self
    }

    /// Implicit (default) or explicit acknowledgement (`share.acknowledgement.mode`).
    pub fn acknowledgement_mode(mut self, mode: AcknowledgementMode) -> Self {
        self.config.acknowledgement_mode = mode;
        self
    }

    /// Batch optimized (default) or record limit (`share.acquire.mode`, KIP-1206).
    pub fn acquire_mode(mut self, mode: ShareAcquireMode) -> Self {
        self.config.acquire_mode = mode;
        self
    }

    /// The most records one poll hands out, and the records each ShareFetch asks for
    /// (`max.poll.records`, default 500; 1 to `i32::MAX`).
    pub fn max_poll_records(mut self, records: usize) -> Self {
        self.config.max_poll_records = i32::try_from(records).unwrap_or(i32::MAX);
        self
    }

    /// How long the application may go between polls before the member leaves the group
    /// (`max.poll.interval.ms`, default 300 s). Its acquired records go back to the group when
    /// their locks run out; the next poll says so once and joins again.
    pub fn max_poll_interval(mut self, interval: Duration) -> Self {
        self.config.max_poll_interval = interval;
        self
    }

    /// How long a broker may hold a ShareFetch for `fetch_min_bytes` (`fetch.max.wait.ms`,
    /// default 500 ms).
    pub fn fetch_max_wait(mut self, wait: Duration) -> Self {
        self.config.fetch_max_wait = wait;
        self
    }

    /// The bytes a broker waits for before it answers a ShareFetch (`fetch.min.bytes`,
    /// default 1).
    pub fn fetch_min_bytes(mut self, bytes: i32) -> Self {
        self.config.fetch_min_bytes = bytes;
        self
    }

    /// The most bytes one ShareFetch answer carries (`fetch.max.bytes`, default 50 MiB; a
    /// first batch larger than this still comes whole, KIP-74).
    pub fn fetch_max_bytes(mut self, bytes: i32) -> Self {
        self.config.fetch_max_bytes = bytes;
        self
    }

    /// The member's rack (`client.rack`), sent on its first heartbeat.
    pub fn client_rack(mut self, rack: impl Into<String>) -> Self {
        self.config.client_rack = Some(rack.into());
        self
    }

    /// The wait before a heartbeat is tried again after a retriable failure
    /// (`retry.backoff.ms`, default 100 ms).
    pub fn retry_backoff(mut self, backoff: Duration) -> Self {
        self.config.retry_backoff = backoff;
        self
    }

    /// Called with the outcome of every acknowledgement the broker answered, in the task
    /// that reads the answer (a poll, commit or close; Java's
    /// `AcknowledgementCommitCallback`). It must not block.
    pub fn acknowledgement_commit_callback(
        mut self,
        callback: impl Fn(&AcknowledgementCommit) + Send + Sync + 'static,
    ) -> Self {
        self.config.on_acknowledged = Some(Arc::new(callback));
        self
    }

    /// Makes a `process {topic}` span (OpenTelemetry's messaging conventions, kind CONSUMER:
    /// topic, partition, offset, UTF-8 key, the share group) for every record a poll or the
    /// stream hands out; the record carries it ([`ConsumerRecord::span`](crate::ConsumerRecord::span))
    /// and it ends when the record is dropped. Default false (a span per record costs); off,
    /// no span is made and a poll pays one branch.
    pub fn process_spans(mut self, on: bool) -> Self {
        self.config.process = on.then(crate::ops::otel::ProcessSpans::default);
        self
    }

    /// Called with each process span (see [`ShareReaderBuilder::process_spans`]) whose record
    /// carries a valid W3C `traceparent`, before the record is handed out: set the parent or
    /// add a link there (docs/observability.md has the code). Keep it short, never block.
    /// Without `process_spans(true)` it is never called. Default none.
    pub fn on_traceparent(
        mut self,
        hook: impl Fn(&tracing::Span, &crate::TraceParent) + Send + Sync + 'static,
    ) -> Self {
        self.config.on_traceparent = Some(Arc::new(hook));
        self
    }

    /// Builds the reader and starts its member task, which joins the group (one
    /// ShareGroupHeartbeat) at once. Needs a Tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty group id, no topic, `max_poll_records` below 1 or a
    /// negative byte limit.
    pub fn build(self) -> Result<ShareReader> {
        let c = &self.config;
        if c.group_id.is_empty() {
            return Err(Error::Config("group.id must not be empty".into()));
        }
        if c.topics.is_empty() || c.topics.iter().any(String::is_empty) {
            return Err(Error::Config(
                "a share group member needs at least one topic, and no empty topic name".into(),
            ));
        }
        if c.max_poll_records < 1 {
            return Err(Error::Config("max.poll.records must be at least 1".into()));
        }
        if c.fetch_min_bytes < 0 || c.fetch_max_bytes < 1 {
            return Err(Error::Config(
                "fetch.min.bytes must be at least 0 and fetch.max.bytes at least 1".into(),
            ));
        }
        let mut config = self.config;
        if let Some(p) = &mut config.process {
            p.group = Some(Arc::from(config.group_id.as_str()));
            p.hook = config.on_traceparent.clone();
        }
        Ok(ShareReader::start(
            self.transport,
            config,
            self.enable_metrics_push,
        ))
    }
}
