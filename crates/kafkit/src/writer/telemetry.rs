//! The Writer's counters as KIP-714 client metrics ([`Writer::metric_source`]).
//!
//! | `WriterStats` field | metric | kind | labels |
//! | --- | --- | --- | --- |
//! | `errors` | `org.apache.kafka.producer.record.error.total` (Java's `record-error-total`: records whose send ended in an error) | counter | |
//! | `records` | `kafkit.producer.record.acked.total` | counter | |
//! | `bytes` | `kafkit.producer.byte.acked.total` | counter | |
//! | `retries` | `kafkit.producer.batch.retry.total` | counter | |
//! | `batches` | `kafkit.producer.batch.sent.total` | counter | |
//! | `produce_requests` | `kafkit.producer.produce.request.total` | counter | `node_id` |
//! | `batch_bytes_avg`, `batch_bytes_max` | `kafkit.producer.batch.size.avg`, `.max` | gauge | |
//! | `buffered_records`, `buffered_bytes` | `kafkit.producer.buffered.records`, `.bytes` | gauge | |
//!
//! Only `record.error.total` means exactly what Java's metric of that name means. The others
//! differ from their nearest Java metric (`record-send-total` counts records when their batch is
//! sent, retries again, where kafkit counts acknowledged records; `batch-size-avg` and
//! `record-retry-total` are over a sample window or per record, kafkit's over the writer's life
//! or per batch), so they keep kafkit's own prefix rather than borrow a name they do not fit.

use std::sync::{Arc, Weak};

use super::Writer;
use super::inner::Inner;
use crate::telemetry::{Metric, MetricSource};

/// A [`MetricSource`] over a writer that does not keep it open: once the writer is gone, it
/// reports nothing.
struct WriterMetrics(Weak<Inner>);

impl Writer {
    /// This writer's counters as a source for a KIP-714 [`crate::telemetry::Telemetry`]
    /// engine, named as the table in docs/observability.md ("KIP-714 client metrics") says. The
    /// source does not keep the writer open.
    pub fn metric_source(&self) -> Arc<dyn MetricSource> {
        Arc::new(WriterMetrics(Arc::downgrade(&self.inner)))
    }
}

fn count(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl MetricSource for WriterMetrics {
    fn collect(&self, out: &mut Vec<Metric>) {
        let Some(inner) = self.0.upgrade() else {
            return;
        };
        let (records, bytes) = inner.lock().buffered();
        let s = inner.stats.snapshot(records as u64, bytes as u64);
        out.push(
            Metric::counter(
                "org.apache.kafka.producer.record.error.total",
                count(s.errors),
            )
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
}
