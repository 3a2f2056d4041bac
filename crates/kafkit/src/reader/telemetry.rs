//! The Reader's share of the consumer's KIP-714 client metrics: the fetch windows it records
//! into (per Fetch answer), and the metrics every consumer source reports from them
//! ([`consumer_fetch_metrics`]: the plain Reader's and the group member's).
//!
//! | metric | kind | labels | what kafkit records |
//! | --- | --- | --- | --- |
//! | `org.apache.kafka.consumer.connection.creation.total` | counter | | connections the transport set up (TCP, TLS, SASL done) |
//! | `org.apache.kafka.consumer.connection.creation.rate` | gauge | | the same per second over the interval |
//! | `org.apache.kafka.consumer.node.request.latency.avg`, `.max` | gauge | `node_id` | Fetch request to answer, per broker, ms |
//! | `org.apache.kafka.consumer.fetch.manager.fetch.latency.avg`, `.max` | gauge | | Fetch request to answer, all brokers, ms |
//! | `org.apache.kafka.consumer.fetch.manager.records.consumed.total` | counter | | records handed to the application |
//! | `kafkit.consumer.fetch.bytes.total` | counter | | record data received in Fetch answers (as sent) |
//! | `kafkit.consumer.fetch.records.total` | counter | | records decoded from Fetch answers |
//! | `kafkit.consumer.fetch.request.total` | counter | `node_id` | Fetch requests sent |
//! | `kafkit.consumer.fetch.error.total` | counter | | Fetch requests without an answer or with a request-level error |
//! | `kafkit.consumer.records.lag.max` | gauge | | the largest partition lag now |
//!
//! `-avg`/`-max` are over the interval since the last push (Java: its sample windows), 0
//! when no Fetch was answered in it.

use std::sync::{Arc, Weak};
use std::time::Duration;

use kafkit_protocol::Uuid;

use super::shared::Shared;
use super::{Reader, ReaderStats};
use crate::error::Result;
use crate::telemetry::window::Rate;
use crate::telemetry::{Metric, MetricSource};

const C: &str = "org.apache.kafka.consumer.";

fn count(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The consumer metrics `reader` (a plain Reader's or a group member's) reports, named as the
/// module's table says; `connections` keeps the connection rate's last reading.
pub(crate) fn consumer_fetch_metrics(reader: &Reader, connections: &Rate, out: &mut Vec<Metric>) {
    fetch_metrics(&reader.shared, reader.stats(), connections, out);
}

fn fetch_metrics(shared: &Shared, s: ReaderStats, connections: &Rate, out: &mut Vec<Metric>) {
    let w = &shared.counters.kip714;
    crate::telemetry::window::network_metrics(
        out,
        C,
        shared.transport.dialer().connections_created(),
        connections,
        &w.node_latency,
    );
    let (avg, max) = w.latency.take_ms();
    let what = "The time taken for a fetch request, in ms.";
    out.push(Metric::gauge(format!("{C}fetch.manager.fetch.latency.avg"), avg).describe(what));
    out.push(Metric::gauge(format!("{C}fetch.manager.fetch.latency.max"), max).describe(what));
    out.push(
        Metric::counter(
            format!("{C}fetch.manager.records.consumed.total"),
            count(s.records_delivered),
        )
        .describe("The total number of records consumed."),
    );
    out.push(Metric::counter(
        "kafkit.consumer.fetch.bytes.total",
        count(s.fetch_bytes),
    ));
    out.push(Metric::counter(
        "kafkit.consumer.fetch.records.total",
        count(s.records_fetched),
    ));
    for (node, n) in &s.fetch_requests {
        out.push(
            Metric::counter("kafkit.consumer.fetch.request.total", count(*n))
                .label("node_id", node.to_string()),
        );
    }
    out.push(Metric::counter(
        "kafkit.consumer.fetch.error.total",
        count(s.fetch_errors),
    ));
    let lag = s.partitions.iter().filter_map(|p| p.lag).max().unwrap_or(0);
    out.push(Metric::gauge("kafkit.consumer.records.lag.max", lag as f64));
}

/// A [`MetricSource`] over a plain Reader that does not keep it open.
struct ReaderMetrics {
    shared: Weak<Shared>,
    connections: Rate,
}

impl MetricSource for ReaderMetrics {
    fn collect(&self, out: &mut Vec<Metric>) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        fetch_metrics(&shared, super::stats_of(&shared), &self.connections, out);
    }

    fn resource(&self, out: &mut Vec<(String, String)>) {
        if let Some(shared) = self.shared.upgrade()
            && let Some(rack) = &shared.config.client_rack
        {
            out.push(("client_rack".to_owned(), rack.clone()));
        }
    }
}

/// The source of a plain Reader's metrics (also what its own engine pushes).
pub(super) fn source(shared: &Arc<Shared>) -> Arc<dyn MetricSource> {
    Arc::new(ReaderMetrics {
        shared: Arc::downgrade(shared),
        connections: Rate::default(),
    })
}

impl Reader {
    /// This Reader's metrics as a source for a KIP-714 [`crate::telemetry::Telemetry`] engine,
    /// named as docs/observability.md ("KIP-714 client metrics") says, with the resource
    /// attribute `client_rack` when set. The source does not keep the Reader open. The
    /// `-avg`/`-max` windows restart at each collect: give the source to one engine only (the
    /// Reader's own, when `enable_metrics_push` is on, is one).
    pub fn metric_source(&self) -> Arc<dyn MetricSource> {
        source(&self.shared)
    }

    /// The id the cluster gave this Reader for its metrics (KIP-714; Java's
    /// `Consumer.clientInstanceId(Duration)`), waiting up to `timeout` for the first
    /// GetTelemetrySubscriptions answer.
    ///
    /// # Errors
    /// [`crate::Error::Telemetry`]: [`TelemetryError::Disabled`](crate::telemetry::TelemetryError::Disabled)
    /// when built with `enable_metrics_push(false)` (Java: `IllegalStateException`), or for a
    /// group member's Reader (ask the [`crate::GroupReader`]),
    /// [`TelemetryError::Timeout`](crate::telemetry::TelemetryError::Timeout) when no answer
    /// came within `timeout`, [`TelemetryError::Unsupported`](crate::telemetry::TelemetryError::Unsupported)
    /// when the cluster takes no client metrics.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future loses nothing.
    pub async fn client_instance_id(&self, timeout: Duration) -> Result<Uuid> {
        self.push.client_instance_id(timeout).await
    }
}
