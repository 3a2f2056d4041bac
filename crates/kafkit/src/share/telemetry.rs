//! The share group member's KIP-714 client metrics ([`ShareReader::metric_source`]) and its
//! own engine ([`ShareReaderBuilder::enable_metrics_push`](super::ShareReaderBuilder::enable_metrics_push),
//! [`ShareReader::client_instance_id`]).
//!
//! Java's `KafkaShareConsumer` registers its own metrics in the groups `consumer-share-metrics`
//! and `consumer-share-fetch-manager-metrics`, which its telemetry names
//! `org.apache.kafka.consumer.share.` and `org.apache.kafka.consumer.share.fetch.manager.`
//! (the group without `consumer-` and `-metrics`, dashes as dots). Its network client's
//! (connections, per-node request latency) are the plain consumer's groups `consumer-metrics`
//! and `consumer-node-metrics`, named `org.apache.kafka.consumer.` as `KafkaConsumer`'s are
//! (what Kafka 4.4's share consumer pushes; `telemetry_kafka` checks every name against it).
//! kafkit reports, with `-avg`/`-max` over the interval since the last push (0 when nothing
//! was recorded in it):
//!
//! | metric | kind | labels | what kafkit records |
//! | --- | --- | --- | --- |
//! | `org.apache.kafka.consumer.connection.creation.total` | counter | | connections the transport set up |
//! | `org.apache.kafka.consumer.connection.creation.rate` | gauge | | the same per second over the interval |
//! | `org.apache.kafka.consumer.node.request.latency.avg`, `.max` | gauge | `node_id` | ShareFetch and ShareAcknowledge request to answer, ms |
//! | `org.apache.kafka.consumer.share.fetch.manager.fetch.latency.avg`, `.max` | gauge | | ShareFetch request to answer, ms |
//! | `org.apache.kafka.consumer.share.fetch.manager.records.consumed.total` | counter | | records handed to the application |
//! | `org.apache.kafka.consumer.share.fetch.manager.acknowledgements.send.total` | counter | | acknowledgements the brokers took |
//! | `org.apache.kafka.consumer.share.fetch.manager.acknowledgements.error.total` | counter | | acknowledgements refused or lost |
//! | `kafkit.consumer.share.acknowledgement.total` | counter | `type` (`accept`, `release`, `reject`, `renew`) | acknowledgements made (explicit calls, implicit accepts) |
//! | `kafkit.consumer.share.records.acquired.total` | counter | | records acquired from the brokers |
//! | `kafkit.consumer.share.fetch.request.total` | counter | | ShareFetch requests sent |
//! | `kafkit.consumer.share.acknowledge.request.total` | counter | | ShareAcknowledge requests sent |
//! | `kafkit.consumer.share.assigned.partitions` | gauge | | partitions assigned now |
//!
//! Resource attributes: `group_id`, `group_member_id` (made by the client, KIP-932),
//! `client_rack` (when set).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use kafkit_protocol::Uuid;

use super::ShareReader;
use super::member::Shared;
use crate::error::Result;
use crate::telemetry::window::Rate;
use crate::telemetry::{Metric, MetricSource};

/// A [`MetricSource`] over a share member that does not keep it alive.
struct ShareMetrics {
    shared: Weak<Shared>,
    connections: Rate,
}

const S: &str = "org.apache.kafka.consumer.share.";

/// The network client's metrics: Java's share consumer registers them in the plain
/// consumer's groups (`consumer-metrics`, `consumer-node-metrics`), not under `share.`.
const C: &str = "org.apache.kafka.consumer.";

fn count(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl MetricSource for ShareMetrics {
    fn collect(&self, out: &mut Vec<Metric>) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let w = &shared.stats.kip714;
        crate::telemetry::window::network_metrics(
            out,
            C,
            shared.transport.dialer().connections_created(),
            &self.connections,
            &w.node_latency,
        );
        let (avg, max) = w.fetch.take_ms();
        let what = "The time taken for a share fetch request, in ms.";
        out.push(Metric::gauge(format!("{S}fetch.manager.fetch.latency.avg"), avg).describe(what));
        out.push(Metric::gauge(format!("{S}fetch.manager.fetch.latency.max"), max).describe(what));
        counters(&shared, out);
    }

    fn resource(&self, out: &mut Vec<(String, String)>) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        if let Some(rack) = &shared.config.client_rack {
            out.push(("client_rack".to_owned(), rack.clone()));
        }
        out.push(("group_id".to_owned(), shared.config.group_id.clone()));
        out.push(("group_member_id".to_owned(), shared.member_id.clone()));
    }
}

/// The counters of the module's table, from `records.consumed.total` on.
fn counters(shared: &Shared, out: &mut Vec<Metric>) {
    let c = &shared.stats;
    let w = &c.kip714;
    let load = |a: &AtomicU64| count(a.load(Relaxed));
    out.push(
        Metric::counter(
            format!("{S}fetch.manager.records.consumed.total"),
            load(&c.records_delivered),
        )
        .describe("The total number of records consumed."),
    );
    out.push(
        Metric::counter(
            format!("{S}fetch.manager.acknowledgements.send.total"),
            load(&c.acknowledgements_sent),
        )
        .describe("The total number of record acknowledgements sent."),
    );
    out.push(
        Metric::counter(
            format!("{S}fetch.manager.acknowledgements.error.total"),
            load(&c.acknowledgements_failed),
        )
        .describe("The total number of record acknowledgements that resulted in errors."),
    );
    for (i, kind) in ["accept", "release", "reject", "renew"].iter().enumerate() {
        out.push(
            Metric::counter(
                "kafkit.consumer.share.acknowledgement.total",
                load(&w.acks[i]),
            )
            .label("type", *kind),
        );
    }
    out.push(Metric::counter(
        "kafkit.consumer.share.records.acquired.total",
        load(&c.records_acquired),
    ));
    out.push(Metric::counter(
        "kafkit.consumer.share.fetch.request.total",
        load(&c.share_fetches),
    ));
    out.push(Metric::counter(
        "kafkit.consumer.share.acknowledge.request.total",
        load(&c.share_acknowledges),
    ));
    let assigned = shared.state().assignment.len();
    out.push(Metric::gauge(
        "kafkit.consumer.share.assigned.partitions",
        assigned as f64,
    ));
}

/// The source of a share member's metrics (also what its own engine pushes).
pub(super) fn source(shared: &Arc<Shared>) -> Arc<dyn MetricSource> {
    Arc::new(ShareMetrics {
        shared: Arc::downgrade(shared),
        connections: Rate::default(),
    })
}

impl ShareReader {
    /// This member's metrics as a source for a KIP-714 [`crate::telemetry::Telemetry`]
    /// engine, with the resource attributes `group_id`, `group_member_id` and `client_rack`
    /// (docs/observability.md, "KIP-714 client metrics"). The source does not keep the member
    /// alive. The `-avg`/`-max` windows restart at each collect: give the source to one engine
    /// only (the member's own, when `enable_metrics_push` is on, is one).
    pub fn metric_source(&self) -> Arc<dyn MetricSource> {
        source(&self.shared)
    }

    /// The id the cluster gave this member for its metrics (KIP-714; Java's
    /// `ShareConsumer.clientInstanceId(Duration)`), waiting up to `timeout` for the first
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
        self.push.client_instance_id(timeout).await
    }
}
