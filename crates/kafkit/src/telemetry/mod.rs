//! KIP-714 client metrics: the client pushes its own metrics to the cluster, which hands them to
//! the broker's `ClientTelemetry` plugin for the operator.
//!
//! A [`Telemetry`] engine runs one task on a [`Transport`]: it asks any broker for this client's
//! subscription (GetTelemetrySubscriptions: a client instance id, the metric name prefixes the
//! operator asked for, the push interval, delta or cumulative sums, the compression types the
//! broker accepts), then pushes at that interval (PushTelemetry) the metrics the prefixes select,
//! as an OTLP `MetricsData` ([`otlp`]), compressed as the broker allows, and a last push marked
//! `Terminating` on [`Telemetry::close`]. The metrics come from [`MetricSource`]s: anything that
//! can list `(name, kind, value, labels)` now, such as [`crate::Writer::metric_source`], which
//! maps the writer's counters to Java's names (docs/observability.md, "KIP-714 client metrics").
//!
//! Every client runs an engine of its own over its own source unless built with
//! `enable_metrics_push(false)` (Java's `enable.metrics.push`, default true): the Writer, the
//! Reader, the GroupReader and the ShareReader, each with `client_instance_id(timeout)` and the
//! terminating push in its close. An engine built here is for an application's own sources.
//!
//! ```
//! use kafkit::telemetry::{Metric, MetricSource, Telemetry};
//! use std::sync::Arc;
//!
//! struct Jobs;
//! impl MetricSource for Jobs {
//!     fn collect(&self, out: &mut Vec<Metric>) {
//!         out.push(Metric::counter("com.example.jobs.done.total", 42).label("queue", "a"));
//!     }
//! }
//!
//! # let run = async {
//! let transport = kafkit::Transport::builder(["127.0.0.1:9092"]).build()?;
//! let telemetry = Telemetry::builder(transport)
//!     .source(Arc::new(Jobs))
//!     .resource_label("client_rack", "eu-1a")
//!     .build()?;
//! println!("{:?}", telemetry.client_instance_id(std::time::Duration::from_secs(5)).await?);
//! telemetry.close(std::time::Duration::from_secs(5)).await;
//! # Ok::<(), kafkit::Error>(())
//! # };
//! # drop(run);
//! ```

mod client;
mod collect;
pub mod otlp;
mod subscription;
mod task;
pub(crate) mod window;

pub use crate::error::telemetry::TelemetryError;
pub(crate) use client::ClientPush;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafkit_protocol::Uuid;
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::transport::Transport;

/// Whether a metric counts up (pushed as a monotonic OTLP sum, delta or cumulative as the
/// subscription asks) or is a value sampled now (pushed as an OTLP gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricKind {
    /// A counter since the source started; the engine computes deltas itself.
    Counter,
    /// A value now (an average, a maximum, a size).
    Gauge,
}

/// A metric's value: OTLP's `as_int` or `as_double`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum MetricValue {
    /// A whole number.
    Int(i64),
    /// A real number.
    Double(f64),
}

/// One metric as a [`MetricSource`] reports it: a name (OpenTelemetry style, dotted: Java's
/// `org.apache.kafka.producer.record.error.total`), a kind, a value and the data point's labels.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Metric {
    /// The full name, matched against the subscription's prefixes.
    pub name: String,
    /// A sentence for the receiver (OTLP `description`); may be empty.
    pub description: &'static str,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// The value now (a counter's total since its source started).
    pub value: MetricValue,
    /// The data point's attributes (`node_id`, `topic`, ...).
    pub labels: Vec<(String, String)>,
}

impl Metric {
    /// A counter: `value` counted since its source started.
    pub fn counter(name: impl Into<String>, value: i64) -> Metric {
        Metric::new(name, MetricKind::Counter, MetricValue::Int(value))
    }

    /// A gauge: `value` now.
    pub fn gauge(name: impl Into<String>, value: f64) -> Metric {
        Metric::new(name, MetricKind::Gauge, MetricValue::Double(value))
    }

    fn new(name: impl Into<String>, kind: MetricKind, value: MetricValue) -> Metric {
        Metric {
            name: name.into(),
            description: "",
            kind,
            value,
            labels: Vec::new(),
        }
    }

    /// Adds a data point label.
    #[must_use]
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Metric {
        self.labels.push((key.into(), value.into()));
        self
    }

    /// Sets the description.
    #[must_use]
    pub fn describe(mut self, description: &'static str) -> Metric {
        self.description = description;
        self
    }
}

/// Something whose metrics the engine pushes: asked once per push, from the engine's task, so
/// `collect` should be quick and must not block on I/O.
pub trait MetricSource: Send + Sync + 'static {
    /// Appends the metrics as they are now.
    fn collect(&self, out: &mut Vec<Metric>);

    /// Appends resource attributes that may change while the client runs (KIP-714's
    /// `group_member_id`, known once the member joined), asked at each push after the fixed
    /// ones of [`TelemetryBuilder::resource_label`]. None by default.
    fn resource(&self, out: &mut Vec<(String, String)>) {
        let _ = out;
    }
}

/// Builds a [`Telemetry`] engine; see [`Telemetry::builder`].
#[must_use]
pub struct TelemetryBuilder {
    transport: Transport,
    sources: Vec<Arc<dyn MetricSource>>,
    resource: Vec<(String, String)>,
    enabled: bool,
}

impl std::fmt::Debug for TelemetryBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetryBuilder")
            .field("sources", &self.sources.len())
            .field("resource", &self.resource)
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

impl TelemetryBuilder {
    /// Adds a source of metrics; every push asks each source, in the order added.
    pub fn source(mut self, source: Arc<dyn MetricSource>) -> Self {
        self.sources.push(source);
        self
    }

    /// Adds a resource attribute of the client: KIP-714 names `client_rack`, `group_id`,
    /// `group_instance_id`, `group_member_id` and `transactional_id` (the broker adds
    /// `client_instance_id`, `client_id`, the client software and the addresses itself).
    pub fn resource_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.resource.push((key.into(), value.into()));
        self
    }

    /// Java's `enable.metrics.push` (default true): false builds an engine that asks for no
    /// subscription and pushes nothing; [`Telemetry::client_instance_id`] then fails.
    pub fn enable_metrics_push(mut self, on: bool) -> Self {
        self.enabled = on;
        self
    }

    /// Starts the engine's task on the current tokio runtime.
    ///
    /// # Errors
    /// [`Error::Config`] outside a tokio runtime.
    pub fn build(self) -> Result<Telemetry> {
        let (instance_tx, instance_rx) = watch::channel(None);
        let (close_tx, close_rx) = watch::channel(None);
        let task = if self.enabled {
            let runtime = tokio::runtime::Handle::try_current()
                .map_err(|_| Error::Config("Telemetry::build needs a tokio runtime".into()))?;
            let engine = task::Engine::new(self.transport, self.sources, self.resource);
            Some(runtime.spawn(engine.run(instance_tx, close_rx)))
        } else {
            None
        };
        Ok(Telemetry {
            enabled: self.enabled,
            instance: instance_rx,
            close: close_tx,
            task: Mutex::new(task),
        })
    }
}

/// A running KIP-714 engine: pushes the metrics of its sources at the interval the broker
/// asks for. Dropping it stops the task without the terminating push; [`Telemetry::close`]
/// sends it.
#[derive(Debug)]
pub struct Telemetry {
    enabled: bool,
    instance: watch::Receiver<Option<Uuid>>,
    close: watch::Sender<Option<Duration>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Telemetry {
    /// A builder for an engine over `transport`, with metrics push on (Java's default).
    pub fn builder(transport: Transport) -> TelemetryBuilder {
        TelemetryBuilder {
            transport,
            sources: Vec::new(),
            resource: Vec::new(),
            enabled: true,
        }
    }

    /// The id the cluster gave this client instance (Java's `clientInstanceId`), waiting up to
    /// `timeout` for the first GetTelemetrySubscriptions answer.
    ///
    /// Cancel safe: dropping the future loses nothing.
    ///
    /// # Errors
    /// [`Error::Telemetry`]: [`TelemetryError::Disabled`] when metrics push is off,
    /// [`TelemetryError::Timeout`] when no subscription came within `timeout`,
    /// [`TelemetryError::Unsupported`] when the engine stopped (the broker has no KIP-714
    /// support, or the engine was closed) before it had an id.
    pub async fn client_instance_id(&self, timeout: Duration) -> Result<Uuid> {
        if !self.enabled {
            return Err(TelemetryError::Disabled.into());
        }
        let mut rx = self.instance.clone();
        let got = tokio::time::timeout(timeout, rx.wait_for(Option::is_some)).await;
        match got {
            Ok(Ok(id)) => Ok(id.unwrap_or_default()),
            Ok(Err(_)) => Err(TelemetryError::Unsupported.into()),
            Err(_) => Err(TelemetryError::Timeout { timeout }.into()),
        }
    }

    /// Stops the engine: sends the terminating push (KIP-714 `Terminating: true`, so the broker
    /// can forget this instance at once) when it holds a subscription, within `timeout`.
    ///
    /// Cancel safe: dropping the future leaves the task ending on its own, bounded by `timeout`.
    pub async fn close(&self, timeout: Duration) {
        let _ = self.close.send(Some(timeout));
        let task = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            let _ = tokio::time::timeout(timeout + Duration::from_millis(100), task).await;
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(task) = self
            .task
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }
}
