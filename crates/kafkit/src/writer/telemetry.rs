//! The Writer's counters as KIP-714 client metrics ([`Writer::metric_source`]), and the
//! Writer's own engine ([`WriterBuilder::enable_metrics_push`](super::WriterBuilder::enable_metrics_push),
//! [`Writer::client_instance_id`]).
//!
//! Java's standard producer metrics (KIP-714, "Client metrics: producer"), as kafkit measures
//! them; `-avg`/`-max` are over the interval since the last push (Java: its sample windows),
//! 0 when nothing was recorded in it; latencies and throttle times in milliseconds:
//!
//! | metric (`org.apache.kafka.producer.` +) | kind | labels | what kafkit records |
//! | --- | --- | --- | --- |
//! | `connection.creation.total` | counter | | connections the writer's transport set up (TCP, TLS, SASL done) |
//! | `connection.creation.rate` | gauge | | the same per second over the interval |
//! | `node.request.latency.avg`, `.max` | gauge | `node_id` | Produce request to answer, per broker (acks=0 requests have none) |
//! | `produce.throttle.time.avg`, `.max` | gauge | | `throttle_time_ms` of Produce answers |
//! | `record.queue.time.avg`, `.max` | gauge | | a batch's creation to its send (per batch sent) |
//! | `record.error.total` | counter | | records whose send ended in an error |
//!
//! And kafkit's own:
//!
//! | `WriterStats` field | metric | kind | labels |
//! | --- | --- | --- | --- |
//! | `records` | `kafkit.producer.record.acked.total` | counter | |
//! | `bytes` | `kafkit.producer.byte.acked.total` | counter | |
//! | `retries` | `kafkit.producer.batch.retry.total` | counter | |
//! | `batches` | `kafkit.producer.batch.sent.total` | counter | |
//! | `produce_requests` | `kafkit.producer.produce.request.total` | counter | `node_id` |
//! | `batch_bytes_avg`, `batch_bytes_max` | `kafkit.producer.batch.size.avg`, `.max` | gauge | |
//! | `buffered_records`, `buffered_bytes` | `kafkit.producer.buffered.records`, `.bytes` | gauge | |
//!
//! These differ from their nearest Java metric (`record-send-total` counts records when their
//! batch is sent, retries again, where kafkit counts acknowledged records; `batch-size-avg`
//! and `record-retry-total` are over a sample window or per record, kafkit's over the writer's
//! life or per batch), so they keep kafkit's own prefix rather than borrow a name they do not
//! fit.

use std::sync::{Arc, Weak};
use std::time::Duration;

use kafkit_protocol::Uuid;

use super::Writer;
use super::inner::Inner;
use crate::error::Result;
use crate::telemetry::window::Rate;
use crate::telemetry::{Metric, MetricSource};

/// A [`MetricSource`] over a writer that does not keep it open: once the writer is gone, it
/// reports nothing.
struct WriterMetrics {
    inner: Weak<Inner>,
    connections: Rate,
    transactional_id: Option<String>,
}

impl Writer {
    /// This writer's counters as a source for a KIP-714 [`crate::telemetry::Telemetry`]
    /// engine, named as the table in docs/observability.md ("KIP-714 client metrics") says. The
    /// source does not keep the writer open. The `-avg`/`-max` windows restart at each
    /// collect: give the source to one engine only (the writer's own, when
    /// `enable_metrics_push` is on, is one).
    pub fn metric_source(&self) -> Arc<dyn MetricSource> {
        source(&self.inner)
    }

    /// The id the cluster gave this writer for its metrics (KIP-714; Java's
    /// `Producer.clientInstanceId(Duration)`), waiting up to `timeout` for the first
    /// GetTelemetrySubscriptions answer.
    ///
    /// # Errors
    /// [`crate::Error::Telemetry`]: [`TelemetryError::Disabled`](crate::telemetry::TelemetryError::Disabled)
    /// when built with `enable_metrics_push(false)` (Java: `IllegalStateException`),
    /// [`TelemetryError::Timeout`](crate::telemetry::TelemetryError::Timeout) when no answer
    /// came within `timeout`, [`TelemetryError::Unsupported`](crate::telemetry::TelemetryError::Unsupported)
    /// when the cluster takes no client metrics.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future loses nothing.
    pub async fn client_instance_id(&self, timeout: Duration) -> Result<Uuid> {
        self.guard.push.client_instance_id(timeout).await
    }
}

/// The source of a writer's metrics (also what its own engine pushes).
pub(super) fn source(inner: &Arc<Inner>) -> Arc<dyn MetricSource> {
    Arc::new(WriterMetrics {
        inner: Arc::downgrade(inner),
        connections: Rate::default(),
        transactional_id: inner.config.transactional_id.clone(),
    })
}

fn count(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

const P: &str = "org.apache.kafka.producer.";

fn avg_max(out: &mut Vec<Metric>, name: &str, (avg, max): (f64, f64), what: &'static str) {
    out.push(Metric::gauge(format!("{P}{name}.avg"), avg).describe(what));
    out.push(Metric::gauge(format!("{P}{name}.max"), max).describe(what));
}

impl MetricSource for WriterMetrics {
    fn resource(&self, out: &mut Vec<(String, String)>) {
        if let Some(id) = &self.transactional_id {
            out.push(("transactional_id".to_owned(), id.clone()));
        }
    }

    fn collect(&self, out: &mut Vec<Metric>) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        self.standard(&inner, out);
        let (records, bytes) = inner.lock().buffered();
        kafkit_metrics(&inner.stats.snapshot(records as u64, bytes as u64), out);
    }
}

impl WriterMetrics {
    /// Java's standard producer metrics (the module's first table).
    fn standard(&self, inner: &Inner, out: &mut Vec<Metric>) {
        let w = &inner.stats.kip714;
        crate::telemetry::window::network_metrics(
            out,
            P,
            inner.transport.dialer().connections_created(),
            &self.connections,
            &w.node_latency,
        );
        avg_max(
            out,
            "produce.throttle.time",
            w.throttle_ms.take(),
            "The time in ms a request was throttled by a broker.",
        );
        avg_max(
            out,
            "record.queue.time",
            w.queue_time.take_ms(),
            "The time in ms record batches spent in the send buffer.",
        );
    }
}

/// The error count under Java's name, and kafkit's own counters (the module's second table).
fn kafkit_metrics(s: &super::WriterStats, out: &mut Vec<Metric>) {
    out.push(
        Metric::counter(format!("{P}record.error.total"), count(s.errors))
            .describe("The total number of record sends that resulted in errors."),
    );
    out.push(Metric::counter(
        "kafkit.producer.record.acked.total",
        count(s.records),
    ));
    out.push(Metric::counter(
        "kafkit.producer.byte.acked.total",
        count(s.bytes),
    ));
    out.push(Metric::counter(
        "kafkit.producer.batch.retry.total",
        count(s.retries),
    ));
    out.push(Metric::counter(
        "kafkit.producer.batch.sent.total",
        count(s.batches),
    ));
    for (node, n) in &s.produce_requests {
        out.push(
            Metric::counter("kafkit.producer.produce.request.total", count(*n))
                .label("node_id", node.to_string()),
        );
    }
    out.push(Metric::gauge(
        "kafkit.producer.batch.size.avg",
        s.batch_bytes_avg,
    ));
    out.push(Metric::gauge(
        "kafkit.producer.batch.size.max",
        s.batch_bytes_max as f64,
    ));
    out.push(Metric::gauge(
        "kafkit.producer.buffered.records",
        s.buffered_records as f64,
    ));
    out.push(Metric::gauge(
        "kafkit.producer.buffered.bytes",
        s.buffered_bytes as f64,
    ));
}

#[cfg(test)]
mod tests {
    use crate::{Transport, Writer};

    /// A transactional writer's source names its transactional id as a resource attribute and
    /// reports Java's standard producer names before any request (windows empty: 0).
    #[tokio::test]
    async fn the_source_names_the_transactional_id_and_the_standard_metrics() {
        let t = Transport::builder(["127.0.0.1:1"]).build().unwrap();
        let w = Writer::builder(t)
            .transactional_id("tx-1")
            .enable_metrics_push(false)
            .build()
            .unwrap();
        let source = w.metric_source();
        let mut resource = Vec::new();
        source.resource(&mut resource);
        assert_eq!(resource, [("transactional_id".into(), "tx-1".into())]);
        let mut metrics = Vec::new();
        source.collect(&mut metrics);
        let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
        for n in [
            "org.apache.kafka.producer.connection.creation.total",
            "org.apache.kafka.producer.connection.creation.rate",
            "org.apache.kafka.producer.produce.throttle.time.avg",
            "org.apache.kafka.producer.record.queue.time.max",
            "org.apache.kafka.producer.record.error.total",
        ] {
            assert!(names.contains(&n), "{n}: {names:?}");
        }
        drop(w);
        let mut after = Vec::new();
        source.collect(&mut after);
        assert!(after.is_empty(), "the source does not keep the writer");
    }
}
