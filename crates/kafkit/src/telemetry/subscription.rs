//! What a GetTelemetrySubscriptions answer asks of the client (KIP-714), and the two choices it
//! drives: which metrics to push, and how to compress them.

use std::time::Duration;

use kafkit_compress::Compression;
use kafkit_protocol::Uuid;
use kafkit_protocol::messages::GetTelemetrySubscriptionsResponse;

/// The broker's subscription for this client: read from one GetTelemetrySubscriptions answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Subscription {
    /// The id the broker gave this client instance (or confirmed).
    pub client_instance_id: Uuid,
    /// The subscription's id, sent back with every push.
    pub subscription_id: i32,
    /// The compression types the broker accepts, in its order of preference.
    pub accepted: Vec<i8>,
    /// How often to push.
    pub push_interval: Duration,
    /// The largest payload the broker takes (uncompressed), in bytes.
    pub max_bytes: usize,
    /// Sums as deltas since the last push (true) or cumulative since the start (false).
    pub delta: bool,
    /// The metric name prefixes asked for: empty means none, `""` or `"*"` means all.
    pub requested: Vec<String>,
}

/// The push interval when the broker sends none (or nonsense): Java's default, 5 minutes.
const DEFAULT_PUSH_INTERVAL: Duration = Duration::from_secs(300);

impl Subscription {
    /// The subscription an answer carries (its error code is the caller's to judge).
    pub fn from_response(r: &GetTelemetrySubscriptionsResponse) -> Subscription {
        let interval = u64::try_from(r.push_interval_ms)
            .ok()
            .filter(|ms| *ms > 0)
            .map_or(DEFAULT_PUSH_INTERVAL, Duration::from_millis);
        Subscription {
            client_instance_id: r.client_instance_id,
            subscription_id: r.subscription_id,
            accepted: r.accepted_compression_types.clone(),
            push_interval: interval,
            max_bytes: usize::try_from(r.telemetry_max_bytes).unwrap_or(0),
            delta: r.delta_temporality,
            requested: r.requested_metrics.clone(),
        }
    }

    /// Whether the broker wants any metric at all (KIP-714: an empty list asks for none; the
    /// client keeps asking for a subscription at the push interval, and pushes nothing).
    pub fn wants_any(&self) -> bool {
        !self.requested.is_empty()
    }

    /// Whether metric `name` is asked for: KIP-714's prefix match, where `""` or `"*"` is every
    /// metric.
    pub fn selects(&self, name: &str) -> bool {
        self.requested
            .iter()
            .any(|p| p.is_empty() || p == "*" || name.starts_with(p.as_str()))
    }

    /// The compression to push with: the broker's first accepted type this build can write
    /// (KIP-714 lists them in the broker's preference), none when none fits or none is accepted.
    pub fn compression(&self) -> Compression {
        self.accepted
            .iter()
            .filter_map(|id| u8::try_from(*id).ok())
            .filter_map(|id| Compression::from_id(id).ok())
            .find(|c| *c != Compression::None && c.is_supported())
            .unwrap_or(Compression::None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(requested: &[&str]) -> Subscription {
        Subscription::from_response(
            &GetTelemetrySubscriptionsResponse::default()
                .with_requested_metrics(requested.iter().map(|s| (*s).to_owned()).collect()),
        )
    }

    #[test]
    fn prefixes_select_metrics_as_kip_714_says() {
        let name = "org.apache.kafka.producer.record.error.total";
        let none = sub(&[]);
        assert!(!none.wants_any());
        assert!(!none.selects(name));
        for all in ["*", ""] {
            let s = sub(&[all]);
            assert!(
                s.wants_any() && s.selects(name) && s.selects("kafkit.x"),
                "{all:?}"
            );
        }
        let some = sub(&[
            "org.apache.kafka.producer.record",
            "org.apache.kafka.consumer.",
        ]);
        assert!(some.selects(name));
        assert!(!some.selects("org.apache.kafka.producer.batch.size.avg"));
        assert!(!some.selects("kafkit.producer.record.acked.total"));
    }

    #[test]
    fn the_interval_defaults_when_missing() {
        assert_eq!(sub(&[]).push_interval, DEFAULT_PUSH_INTERVAL);
        let r = GetTelemetrySubscriptionsResponse::default().with_push_interval_ms(250);
        assert_eq!(
            Subscription::from_response(&r).push_interval,
            Duration::from_millis(250)
        );
    }

    #[test]
    fn compression_is_the_first_accepted_that_this_build_has() {
        let with = |ids: Vec<i8>| {
            Subscription::from_response(
                &GetTelemetrySubscriptionsResponse::default().with_accepted_compression_types(ids),
            )
            .compression()
        };
        assert_eq!(with(vec![]), Compression::None);
        assert_eq!(with(vec![0]), Compression::None);
        assert_eq!(with(vec![99, -1]), Compression::None);
        let first = Compression::Zstd;
        if first.is_supported() {
            assert_eq!(with(vec![4, 3, 1, 2]), first);
        }
        if Compression::Gzip.is_supported() {
            assert_eq!(with(vec![99, 1]), Compression::Gzip);
        }
    }
}
