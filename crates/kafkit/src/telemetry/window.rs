//! The recording side of the clients' KIP-714 metrics: an average and a maximum over the
//! interval since the last push ([`Window`]), the same per broker ([`NodeWindows`]), and a rate
//! over that interval ([`Rate`]).
//!
//! Java computes `-avg` and `-max` over sample windows (two of 30 s by default); kafkit's
//! windows run from one push to the next instead: each [`Window::take`] (one per push) starts a
//! new one. Recording is three relaxed atomics, done per request or per batch, never per record.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// An average and a maximum of values recorded since the last [`Window::take`], in
/// microseconds (durations) or plain units.
#[derive(Debug, Default)]
pub(crate) struct Window {
    sum: AtomicU64,
    count: AtomicU64,
    max: AtomicU64,
}

impl Window {
    /// Records one value.
    pub(crate) fn record(&self, v: u64) {
        self.sum.fetch_add(v, Relaxed);
        self.count.fetch_add(1, Relaxed);
        self.max.fetch_max(v, Relaxed);
    }

    /// Records a duration, kept in microseconds.
    pub(crate) fn record_duration(&self, d: Duration) {
        self.record(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    /// `(average, maximum)` since the last take, and starts a new window; `(0, 0)` when
    /// nothing was recorded. A value recorded during the take may count in either window.
    pub(crate) fn take(&self) -> (f64, f64) {
        let count = self.count.swap(0, Relaxed);
        let sum = self.sum.swap(0, Relaxed);
        let max = self.max.swap(0, Relaxed);
        if count == 0 {
            return (0.0, 0.0);
        }
        (sum as f64 / count as f64, max as f64)
    }

    /// [`Window::take`] of durations, in milliseconds (Java's unit for latencies).
    pub(crate) fn take_ms(&self) -> (f64, f64) {
        let (avg, max) = self.take();
        (avg / 1_000.0, max / 1_000.0)
    }
}

/// A [`Window`] per broker node id; one short lock per recording (per request).
#[derive(Debug, Default)]
pub(crate) struct NodeWindows(Mutex<BTreeMap<i32, (u64, u64, u64)>>);

impl NodeWindows {
    /// Records a request's latency to `node`.
    pub(crate) fn record(&self, node: i32, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (sum, count, max) = map.entry(node).or_default();
        *sum = sum.saturating_add(us);
        *count += 1;
        *max = (*max).max(us);
    }

    /// Each node's `(average, maximum)` in milliseconds since the last take (nodes with no
    /// request in the window are left out), and starts a new window.
    pub(crate) fn take_ms(&self) -> Vec<(i32, f64, f64)> {
        let map = std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        map.into_iter()
            .filter(|(_, (_, count, _))| *count > 0)
            .map(|(node, (sum, count, max))| {
                (
                    node,
                    sum as f64 / count as f64 / 1_000.0,
                    max as f64 / 1_000.0,
                )
            })
            .collect()
    }
}

/// A counter's rate per second over the interval since the last [`Rate::per_second`].
#[derive(Debug)]
pub(crate) struct Rate(Mutex<(u64, Instant)>);

impl Default for Rate {
    fn default() -> Self {
        Rate(Mutex::new((0, Instant::now())))
    }
}

impl Rate {
    /// The rate of `total` (a counter that only grows) since the last call, per second.
    pub(crate) fn per_second(&self, total: u64) -> f64 {
        let mut last = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        let secs = now.duration_since(last.1).as_secs_f64();
        let rate = if secs > 0.0 {
            total.saturating_sub(last.0) as f64 / secs
        } else {
            0.0
        };
        *last = (total, now);
        rate
    }
}

/// The connection and per-node request metrics every client reports the same way (Java's
/// network metrics), under `prefix` (`org.apache.kafka.producer.` or `.consumer.`):
/// `connection.creation.total` and `.rate` from `created` (the transport's connections so
/// far, `Dialer::connections_created`), and `node.request.latency.avg` / `.max` per `node_id`
/// from `node_latency` (its window restarts).
pub(crate) fn network_metrics(
    out: &mut Vec<super::Metric>,
    prefix: &str,
    created: u64,
    connections: &Rate,
    node_latency: &NodeWindows,
) {
    use super::Metric;
    out.push(
        Metric::counter(
            format!("{prefix}connection.creation.total"),
            i64::try_from(created).unwrap_or(i64::MAX),
        )
        .describe("The total number of new connections established."),
    );
    out.push(
        Metric::gauge(
            format!("{prefix}connection.creation.rate"),
            connections.per_second(created),
        )
        .describe("The number of new connections established per second."),
    );
    for (node, avg, max) in node_latency.take_ms() {
        let node = node.to_string();
        let what = "The request latency to the node, in ms.";
        out.push(
            Metric::gauge(format!("{prefix}node.request.latency.avg"), avg)
                .label("node_id", node.clone())
                .describe(what),
        );
        out.push(
            Metric::gauge(format!("{prefix}node.request.latency.max"), max)
                .label("node_id", node)
                .describe(what),
        );
    }
}

/// What the Writer records for its standard metrics (`writer/telemetry.rs` reports them): per
/// batch sent, per Produce answer.
#[derive(Debug, Default)]
pub(crate) struct ProducerWindows {
    /// A batch's creation to its send.
    pub(crate) queue_time: Window,
    /// Produce answers' `throttle_time_ms`.
    pub(crate) throttle_ms: Window,
    /// Produce request to answer, per broker.
    pub(crate) node_latency: NodeWindows,
}

impl ProducerWindows {
    /// A request is about to carry batches created at these instants.
    pub(crate) fn sent(&self, created: impl Iterator<Item = Instant>) {
        let now = Instant::now();
        for c in created {
            self.queue_time
                .record_duration(now.saturating_duration_since(c));
        }
    }

    /// A Produce answer said `throttle_time_ms`.
    pub(crate) fn throttled(&self, ms: i32) {
        self.throttle_ms.record(u64::try_from(ms).unwrap_or(0));
    }
}

/// What a Reader records (`reader/telemetry.rs` reports them): Fetch latencies, all brokers
/// and per broker.
#[derive(Debug, Default)]
pub(crate) struct FetchWindows {
    pub(crate) latency: Window,
    pub(crate) node_latency: NodeWindows,
}

impl FetchWindows {
    /// A Fetch to `node` was answered after `took`.
    pub(crate) fn fetched(&self, node: i32, took: Duration) {
        self.latency.record_duration(took);
        self.node_latency.record(node, took);
    }
}

/// What a group member records (`group/telemetry.rs` reports them): one per commit answered,
/// one per rebalance.
#[derive(Debug, Default)]
pub(crate) struct CoordinatorWindows {
    pub(crate) commit: Window,
    pub(crate) rebalance: Window,
    /// Every rebalance's time summed, in microseconds.
    pub(crate) rebalance_total_us: AtomicU64,
}

impl CoordinatorWindows {
    /// A commit was answered after `took`.
    pub(crate) fn committed(&self, took: Duration) {
        self.commit.record_duration(took);
    }

    /// A rebalance ended after `took`.
    pub(crate) fn rebalanced(&self, took: Duration) {
        self.rebalance.record_duration(took);
        self.rebalance_total_us
            .fetch_add(u64::try_from(took.as_micros()).unwrap_or(u64::MAX), Relaxed);
    }
}

/// What a share group member records (`share/telemetry.rs` reports them): per answer, per
/// acknowledgement call.
#[derive(Debug, Default)]
pub(crate) struct ShareWindows {
    /// ShareFetch request to answer.
    pub(crate) fetch: Window,
    /// ShareFetch and ShareAcknowledge request to answer, per broker.
    pub(crate) node_latency: NodeWindows,
    /// Acknowledgements made, by the wire's type less one (Accept, Release, Reject, Renew).
    pub(crate) acks: [AtomicU64; 4],
}

impl ShareWindows {
    /// A ShareFetch (`fetch`) or ShareAcknowledge to `node` was answered after `took`.
    pub(crate) fn answered(&self, node: i32, took: Duration, fetch: bool) {
        if fetch {
            self.fetch.record_duration(took);
        }
        self.node_latency.record(node, took);
    }

    /// `n` records were acknowledged with the wire's type `wire` (1 Accept .. 4 Renew).
    pub(crate) fn acknowledged(&self, wire: i8, n: u64) {
        if let Some(c) = usize::try_from(wire - 1)
            .ok()
            .and_then(|i| self.acks.get(i))
        {
            c.fetch_add(n, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_averages_and_starts_again_at_each_take() {
        let w = Window::default();
        assert_eq!(w.take(), (0.0, 0.0));
        w.record_duration(Duration::from_millis(2));
        w.record_duration(Duration::from_millis(6));
        assert_eq!(w.take_ms(), (4.0, 6.0));
        assert_eq!(w.take_ms(), (0.0, 0.0), "a new window");
        let n = NodeWindows::default();
        n.record(1, Duration::from_millis(3));
        n.record(2, Duration::from_millis(1));
        n.record(1, Duration::from_millis(5));
        assert_eq!(n.take_ms(), [(1, 4.0, 5.0), (2, 1.0, 1.0)]);
        assert!(n.take_ms().is_empty());
    }
}
