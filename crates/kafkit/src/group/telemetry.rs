//! The group member's KIP-714 client metrics ([`GroupReader::metric_source`]) and its own
//! engine ([`GroupReaderBuilder::enable_metrics_push`](super::GroupReaderBuilder::enable_metrics_push),
//! [`GroupReader::client_instance_id`]), for the classic and the KIP-848 protocols alike.
//!
//! The member reports the Reader's consumer metrics (`reader/telemetry.rs`: connections,
//! `node.request.latency`, `fetch.manager.fetch.latency`, records consumed) and the
//! coordinator's:
//!
//! | metric | kind | what kafkit records |
//! | --- | --- | --- |
//! | `org.apache.kafka.consumer.coordinator.commit.latency.avg`, `.max` | gauge | OffsetCommit round trips (ms) over the interval |
//! | `org.apache.kafka.consumer.coordinator.assigned.partitions` | gauge | partitions owned now |
//! | `org.apache.kafka.consumer.coordinator.rebalance.latency.avg`, `.max` | gauge | a join's start to its assignment (ms) over the interval |
//! | `org.apache.kafka.consumer.coordinator.rebalance.latency.total` | counter | the same, summed since the member started (ms) |
//! | `kafkit.consumer.commit.total` | counter | commits answered |
//! | `kafkit.consumer.rebalance.total` | counter | rebalances (generations or epochs joined) |
//!
//! Resource attributes: `group_id`, `group_instance_id` (static members), `group_member_id`
//! (once the coordinator gave one, or KIP-848's own), `client_rack` (when set).
//!
//! Java's `poll.idle.ratio.avg` is not reported: kafkit's member is polled as a `Stream` or
//! by `next_batch` futures, where the time the application spends between polls is not
//! measured the way Java's `poll()` loop measures it.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};
use std::time::Duration;

use kafkit_protocol::Uuid;

use super::GroupReader;
use super::shared::{Shared, lock};
use crate::error::Result;
use crate::telemetry::window::Rate;
use crate::telemetry::{Metric, MetricSource};

/// A [`MetricSource`] over a member that does not keep it alive.
struct GroupMetrics {
    shared: Weak<Shared>,
    connections: Rate,
    /// The resource attributes of the last push (`resource`).
    last_resource: std::sync::Mutex<Vec<(String, String)>>,
}

const C: &str = "org.apache.kafka.consumer.";

fn count(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl MetricSource for GroupMetrics {
    fn collect(&self, out: &mut Vec<Metric>) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        crate::reader::consumer_fetch_metrics(&shared.reader, &self.connections, out);
        let w = &shared.kip714;
        let (avg, max) = w.commit.take_ms();
        let what = "The time taken for a commit request, in ms.";
        out.push(Metric::gauge(format!("{C}coordinator.commit.latency.avg"), avg).describe(what));
        out.push(Metric::gauge(format!("{C}coordinator.commit.latency.max"), max).describe(what));
        let (avg, max) = w.rebalance.take_ms();
        let what = "The time taken for a group to complete a rebalance, in ms.";
        out.push(
            Metric::gauge(format!("{C}coordinator.rebalance.latency.avg"), avg).describe(what),
        );
        out.push(
            Metric::gauge(format!("{C}coordinator.rebalance.latency.max"), max).describe(what),
        );
        out.push(
            Metric::counter(
                format!("{C}coordinator.rebalance.latency.total"),
                count(w.rebalance_total_us.load(Relaxed) / 1_000),
            )
            .describe("The total number of milliseconds this consumer has spent in successful rebalances since creation."),
        );
        let (assigned, commits, rebalances) = {
            let v = lock(&shared.view);
            (v.assignment.len(), v.commits, v.rebalances)
        };
        out.push(
            Metric::gauge(
                format!("{C}coordinator.assigned.partitions"),
                assigned as f64,
            )
            .describe("The number of partitions currently assigned to this consumer."),
        );
        out.push(Metric::counter(
            "kafkit.consumer.commit.total",
            count(commits),
        ));
        out.push(Metric::counter(
            "kafkit.consumer.rebalance.total",
            count(rebalances),
        ));
    }

    fn resource(&self, out: &mut Vec<(String, String)>) {
        // The last labels the member had: once it closed (its state dropped, a classic
        // member's id cleared) the terminating push still names the member it was.
        let mut last = self
            .last_resource
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(shared) = self.shared.upgrade() {
            let mut now = Vec::with_capacity(4);
            if let Some(rack) = &shared.reader_settings.3 {
                now.push(("client_rack".to_owned(), rack.clone()));
            }
            now.push(("group_id".to_owned(), shared.config.group_id.clone()));
            if let Some(id) = &shared.config.group_instance_id {
                now.push(("group_instance_id".to_owned(), id.clone()));
            }
            let member = lock(&shared.view).member_id.clone();
            let known = last
                .iter()
                .find(|(k, _)| k == "group_member_id")
                .map(|(_, v)| v.clone());
            match (member.is_empty(), known) {
                (false, _) => now.push(("group_member_id".to_owned(), member)),
                (true, Some(before)) => now.push(("group_member_id".to_owned(), before)),
                (true, None) => {}
            }
            *last = now;
        }
        out.extend(last.iter().cloned());
    }
}

/// The source of a member's metrics (also what its own engine pushes).
pub(super) fn source(shared: &Arc<Shared>) -> Arc<dyn MetricSource> {
    Arc::new(GroupMetrics {
        shared: Arc::downgrade(shared),
        connections: Rate::default(),
        last_resource: std::sync::Mutex::default(),
    })
}

impl GroupReader {
    /// This member's metrics as a source for a KIP-714 [`crate::telemetry::Telemetry`] engine,
    /// with the resource attributes `group_id`, `group_instance_id`, `group_member_id` and
    /// `client_rack` (docs/observability.md, "KIP-714 client metrics"). The source does not
    /// keep the member alive. The `-avg`/`-max` windows restart at each collect: give the
    /// source to one engine only (the member's own, when `enable_metrics_push` is on, is one).
    pub fn metric_source(&self) -> Arc<dyn MetricSource> {
        source(&self.shared)
    }

    /// The id the cluster gave this member for its metrics (KIP-714; Java's
    /// `Consumer.clientInstanceId(Duration)`), waiting up to `timeout` for the first
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

#[cfg(test)]
mod tests {
    use crate::{GroupReader, Reader, Transport};

    /// Before it joined, a member's source names its group, instance id and rack, not yet a
    /// member id (KIP-714's `group_member_id` comes once the coordinator gave one).
    #[tokio::test]
    async fn the_resource_names_the_group_before_the_member_id_is_known() {
        let t = Transport::builder(["127.0.0.1:1"]).build().unwrap();
        let m = GroupReader::builder(t.clone(), "g")
            .subscribe(["t"])
            .group_instance_id("i-1")
            .reader(Reader::builder(t).client_rack("r-1"))
            .enable_metrics_push(false)
            .build()
            .unwrap();
        let mut resource = Vec::new();
        m.metric_source().resource(&mut resource);
        let want: Vec<(String, String)> = [
            ("client_rack", "r-1"),
            ("group_id", "g"),
            ("group_instance_id", "i-1"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        assert_eq!(resource, want);
        let mut metrics = Vec::new();
        m.metric_source().collect(&mut metrics);
        assert!(
            metrics
                .iter()
                .any(|x| x.name == "org.apache.kafka.consumer.coordinator.assigned.partitions")
        );
    }
}
