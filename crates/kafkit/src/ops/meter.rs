//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (cargo feature `metrics`):
//! every metric's name, kind, unit and labels are declared here, once, and the clients call
//! the recording functions below. The application installs a recorder (an exporter such as
//! `metrics-exporter-prometheus`) and may call [`describe_metrics`] after it for the
//! descriptions and units.
//!
//! Two families: OpenTelemetry's messaging conventions ([`crate::OTEL_SEMCONV_VERSION`]),
//! `messaging.client.*` and `messaging.process.duration`, and transport metrics after franz-go's
//! kprom, `kafkit.*`.
//!
//! Without the feature every function here is an empty `#[inline(always)]` body and
//! [`Started`] is an empty struct: the clients' calls compile to nothing and kafkit does not depend on
//! `metrics`. With it, each call builds a metric key (a label vector: one allocation) and asks
//! the installed recorder, once per batch or request, never per record.
//!
//! This floor holds the vocabulary because the writer, the reader, the group member and the
//! connections all record and none of them may import another.

/// `messaging.client.operation.duration`: histogram, seconds; labels `messaging.system`,
/// `messaging.operation.name` (`send` for a Produce request), `error.type` on a failure.
pub const OPERATION_DURATION: &str = "messaging.client.operation.duration";
/// `messaging.client.sent.messages`: counter, `{message}`; labels `messaging.system`,
/// `messaging.operation.name` = `send`, `messaging.destination.name`, `error.type` on a
/// failure. Counted once per batch when its outcome is known (written or failed).
pub const SENT_MESSAGES: &str = "messaging.client.sent.messages";
/// `messaging.client.consumed.messages`: counter, `{message}`; labels `messaging.system`,
/// `messaging.operation.name` = `poll`, `messaging.destination.name`,
/// `messaging.consumer.group.name` for a group member. Counted per partition per poll.
pub const CONSUMED_MESSAGES: &str = "messaging.client.consumed.messages";
/// `messaging.process.duration`: histogram, seconds; declared for the conventions' process
/// operation, not recorded by the library yet.
pub const PROCESS_DURATION: &str = "messaging.process.duration";
/// `kafkit.connects.total`: counter; label `node_id`. Connections opened (kprom's
/// `connects_total`).
pub const CONNECTS: &str = "kafkit.connects.total";
/// `kafkit.connect.errors.total`: counter; label `node_id` (kprom's `connect_errors_total`).
pub const CONNECT_ERRORS: &str = "kafkit.connect.errors.total";
/// `kafkit.disconnects.total`: counter; label `node_id` (kprom's `disconnects_total`).
pub const DISCONNECTS: &str = "kafkit.disconnects.total";
/// `kafkit.produce.records.total`: counter; labels `node_id`, `topic` (kprom's
/// `produce_records_total`): records in Produce requests, retries included.
pub const PRODUCE_RECORDS: &str = "kafkit.produce.records.total";
/// `kafkit.produce.batches.total`: counter; labels `node_id`, `topic` (kprom's
/// `produce_batches_total`).
pub const PRODUCE_BATCHES: &str = "kafkit.produce.batches.total";

/// Whether this build records metrics (the cargo feature `metrics`): callers skip their loops
/// without it.
pub(crate) const ENABLED: bool = cfg!(feature = "metrics");

/// The `messaging.system` value.
#[cfg(feature = "metrics")]
const SYSTEM: &str = "kafka";

/// Every metric: name, kind, unit, description (`describe_metrics` reads it; the docs table in
/// docs/observability.md mirrors it).
pub const METRICS: &[(&str, Kind, &str, &str)] = &[
    (
        OPERATION_DURATION,
        Kind::Histogram,
        "s",
        "Duration of a messaging operation (a Produce request for `send`).",
    ),
    (
        SENT_MESSAGES,
        Kind::Counter,
        "{message}",
        "Messages the producer attempted to send (counted when their batch ends).",
    ),
    (
        CONSUMED_MESSAGES,
        Kind::Counter,
        "{message}",
        "Messages handed to the application by a poll.",
    ),
    (
        PROCESS_DURATION,
        Kind::Histogram,
        "s",
        "Duration of processing a message (not recorded by the library yet).",
    ),
    (
        CONNECTS,
        Kind::Counter,
        "{connection}",
        "Connections opened to a broker.",
    ),
    (
        CONNECT_ERRORS,
        Kind::Counter,
        "{connection}",
        "Connections to a broker that failed to open.",
    ),
    (
        DISCONNECTS,
        Kind::Counter,
        "{connection}",
        "Connections to a broker closed.",
    ),
    (
        PRODUCE_RECORDS,
        Kind::Counter,
        "{record}",
        "Records in Produce requests sent to a broker, retries included.",
    ),
    (
        PRODUCE_BATCHES,
        Kind::Counter,
        "{batch}",
        "Record batches in Produce requests sent to a broker, retries included.",
    ),
];

/// A metric's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// A monotonic sum.
    Counter,
    /// A distribution of values.
    Histogram,
}

/// When an operation started: an `Instant` with the feature, `()` without (nothing is read).
#[cfg(feature = "metrics")]
pub(crate) type Started = std::time::Instant;
/// When an operation started: an `Instant` with the feature, nothing without (no clock read).
#[cfg(not(feature = "metrics"))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started;

/// Declares every metric of [`METRICS`] (description and unit) to the installed recorder. Call
/// it once after installing the recorder; recording works without it, exporters then show no
/// description. Without the cargo feature `metrics` it does nothing.
pub fn describe_metrics() {
    #[cfg(feature = "metrics")]
    for &(name, kind, unit, description) in METRICS {
        let unit = match unit {
            "s" => Some(metrics::Unit::Seconds),
            _ => None,
        };
        let description = metrics::SharedString::const_str(description);
        metrics::with_recorder(|r| match kind {
            Kind::Counter => r.describe_counter(name.into(), unit, description),
            Kind::Histogram => r.describe_histogram(name.into(), unit, description),
        });
    }
}

/// The start of a timed operation.
#[inline(always)]
pub(crate) fn start() -> Started {
    #[cfg(feature = "metrics")]
    return std::time::Instant::now();
    #[cfg(not(feature = "metrics"))]
    Started
}

/// Records one operation's duration since `started` under `operation` (`send`), with
/// `error.type` when it failed (`error` is asked only with the feature on).
#[inline(always)]
#[allow(unused_variables)]
pub(crate) fn operation_duration(
    operation: &'static str,
    started: Started,
    error: impl FnOnce() -> Option<&'static str>,
) {
    #[cfg(feature = "metrics")]
    {
        let secs = started.elapsed().as_secs_f64();
        match error() {
            None => metrics::histogram!(OPERATION_DURATION,
                "messaging.system" => SYSTEM, "messaging.operation.name" => operation)
            .record(secs),
            Some(e) => metrics::histogram!(OPERATION_DURATION,
                "messaging.system" => SYSTEM, "messaging.operation.name" => operation,
                "error.type" => e)
            .record(secs),
        }
    }
}

/// Counts `count` messages of one batch of `topic` as sent, with `error.type` when the batch
/// failed (`error` is asked only with the feature on).
#[inline(always)]
#[allow(unused_variables)]
pub(crate) fn sent_messages(
    topic: &std::sync::Arc<str>,
    count: u64,
    error: impl FnOnce() -> Option<&'static str>,
) {
    #[cfg(feature = "metrics")]
    {
        let topic = metrics::SharedString::from(std::sync::Arc::clone(topic));
        match error() {
            None => metrics::counter!(SENT_MESSAGES,
                "messaging.system" => SYSTEM, "messaging.operation.name" => "send",
                "messaging.destination.name" => topic)
            .increment(count),
            Some(e) => metrics::counter!(SENT_MESSAGES,
                "messaging.system" => SYSTEM, "messaging.operation.name" => "send",
                "messaging.destination.name" => topic, "error.type" => e)
            .increment(count),
        }
    }
}

/// Counts `count` messages of `topic` handed out by a poll (of `group`'s member, when one).
#[inline(always)]
#[allow(unused_variables)]
pub(crate) fn consumed_messages(topic: &std::sync::Arc<str>, count: u64, group: Option<&str>) {
    #[cfg(feature = "metrics")]
    {
        let topic = metrics::SharedString::from(std::sync::Arc::clone(topic));
        match group {
            None => metrics::counter!(CONSUMED_MESSAGES,
                "messaging.system" => SYSTEM, "messaging.operation.name" => "poll",
                "messaging.destination.name" => topic)
            .increment(count),
            Some(g) => metrics::counter!(CONSUMED_MESSAGES,
                "messaging.system" => SYSTEM, "messaging.operation.name" => "poll",
                "messaging.destination.name" => topic,
                "messaging.consumer.group.name" => g.to_owned())
            .increment(count),
        }
    }
}

/// Counts a Produce request's batches to `node`: `(topic, records)` per batch.
#[inline(always)]
#[allow(unused_variables)]
pub(crate) fn produce_batches<'a>(
    node: i32,
    batches: impl Iterator<Item = (&'a std::sync::Arc<str>, u64)>,
) {
    #[cfg(feature = "metrics")]
    {
        let node = metrics::SharedString::from(node.to_string());
        for (topic, records) in batches {
            let topic = metrics::SharedString::from(std::sync::Arc::clone(topic));
            metrics::counter!(PRODUCE_RECORDS, "node_id" => node.clone(), "topic" => topic.clone())
                .increment(records);
            metrics::counter!(PRODUCE_BATCHES, "node_id" => node.clone(), "topic" => topic)
                .increment(1);
        }
    }
}

/// A connection event of `node`: opened, failed to open, or closed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ConnEvent {
    Connect,
    ConnectError,
    /// Not counted yet: the pool's close paths are still to be instrumented.
    #[allow(dead_code)]
    Disconnect,
}

/// Counts one connection event of `node` (a pooled connection of the transport).
#[inline(always)]
#[allow(unused_variables)]
pub(crate) fn connection(node: i32, event: ConnEvent) {
    #[cfg(feature = "metrics")]
    {
        let name = match event {
            ConnEvent::Connect => CONNECTS,
            ConnEvent::ConnectError => CONNECT_ERRORS,
            ConnEvent::Disconnect => DISCONNECTS,
        };
        metrics::counter!(name, "node_id" => node.to_string()).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_declared_once() {
        let mut names: Vec<&str> = METRICS.iter().map(|m| m.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), METRICS.len());
        // Counters of the kafkit family end in `.total`, as kprom's (and Prometheus') do.
        for &(name, kind, ..) in METRICS {
            if name.starts_with("kafkit.") {
                assert_eq!(kind == Kind::Counter, name.ends_with(".total"), "{name}");
            }
        }
    }

    #[cfg(feature = "metrics")]
    #[test]
    fn recordings_reach_the_local_recorder() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU64, Ordering};

        /// Sums every counter increment, whatever its key.
        #[derive(Default)]
        struct Sum(Arc<AtomicU64>);
        struct Handle(Arc<AtomicU64>);
        impl metrics::CounterFn for Handle {
            fn increment(&self, v: u64) {
                self.0.fetch_add(v, Ordering::Relaxed);
            }
            fn absolute(&self, _: u64) {}
        }
        impl metrics::Recorder for Sum {
            fn describe_counter(
                &self,
                _: metrics::KeyName,
                _: Option<metrics::Unit>,
                _: metrics::SharedString,
            ) {
            }
            fn describe_gauge(
                &self,
                _: metrics::KeyName,
                _: Option<metrics::Unit>,
                _: metrics::SharedString,
            ) {
            }
            fn describe_histogram(
                &self,
                _: metrics::KeyName,
                _: Option<metrics::Unit>,
                _: metrics::SharedString,
            ) {
            }
            fn register_counter(
                &self,
                key: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Counter {
                assert_eq!(key.name(), SENT_MESSAGES);
                metrics::Counter::from_arc(Arc::new(Handle(Arc::clone(&self.0))))
            }
            fn register_gauge(
                &self,
                _: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Gauge {
                metrics::Gauge::noop()
            }
            fn register_histogram(
                &self,
                _: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Histogram {
                metrics::Histogram::noop()
            }
        }
        let sum = Sum::default();
        let seen = Arc::clone(&sum.0);
        let topic: Arc<str> = Arc::from("t");
        metrics::with_local_recorder(&sum, || {
            sent_messages(&topic, 3, || None);
            sent_messages(&topic, 4, || Some("REQUEST_TIMED_OUT"));
        });
        assert_eq!(seen.load(Ordering::Relaxed), 7);
    }
}
