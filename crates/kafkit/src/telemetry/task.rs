//! The engine's task: subscribe, push at the interval, resubscribe when told, and push one last
//! time on close. Every wait is a `select!` on the close signal, and every round trip is bounded.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use kafkit_compress::Compression;
use kafkit_protocol::messages::{GetTelemetrySubscriptionsRequest, PushTelemetryRequest};
use kafkit_protocol::{ErrorCode, Uuid};
use tokio::sync::watch;

use super::collect::{Collector, Payload};
use super::subscription::Subscription;
use super::{Metric, MetricSource};
use crate::error::Error;
use crate::transport::Transport;

/// The wait before asking again after a failed GetTelemetrySubscriptions (a broker down, an
/// error code), doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The most one round trip may take (the push interval bounds it too).
const ROUND_TRIP_MAX: Duration = Duration::from_secs(30);

/// What the engine does next after a phase.
#[derive(Debug, PartialEq)]
enum Next {
    /// Ask for a (new) subscription.
    Resubscribe,
    /// The task ends: closed, or the broker refused client metrics for good.
    Stop,
}

/// How one push went.
#[derive(Debug, PartialEq)]
enum Pushed {
    /// Taken, skipped or failed in a way the next push may fix: go on at the interval.
    GoOn,
    /// The subscription changed (UNKNOWN_SUBSCRIPTION_ID, UNSUPPORTED_COMPRESSION_TYPE).
    Resubscribe,
    /// The broker refused the client's payloads for good (INVALID_REQUEST, INVALID_RECORD).
    Stop,
}

pub(super) struct Engine {
    transport: Transport,
    sources: Vec<Arc<dyn MetricSource>>,
    collector: Collector,
    instance: Uuid,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Engine {
    pub fn new(
        transport: Transport,
        sources: Vec<Arc<dyn MetricSource>>,
        resource: Vec<(String, String)>,
    ) -> Engine {
        Engine {
            transport,
            sources,
            collector: Collector::new(resource, now_ns()),
            instance: Uuid::default(),
        }
    }

    /// The task: subscribe and push until closed or refused for good.
    pub async fn run(
        mut self,
        instance: watch::Sender<Option<Uuid>>,
        mut close: watch::Receiver<Option<Duration>>,
    ) {
        loop {
            let Some(sub) = self.subscribe(&mut close).await else {
                return;
            };
            self.instance = sub.client_instance_id;
            instance.send_replace(Some(sub.client_instance_id));
            if self.pushing(&sub, &mut close).await == Next::Stop {
                return;
            }
        }
    }

    /// Asks for the subscription until one comes (`None`: closed, or the broker has no KIP-714).
    async fn subscribe(
        &mut self,
        close: &mut watch::Receiver<Option<Duration>>,
    ) -> Option<Subscription> {
        let mut backoff = FIRST_BACKOFF;
        loop {
            let req =
                GetTelemetrySubscriptionsRequest::default().with_client_instance_id(self.instance);
            let answer = tokio::select! {
                r = self.transport.round_trip_within(req, ROUND_TRIP_MAX) => r,
                _ = closed(close) => return None,
            };
            match answer {
                Ok(r) if r.error_code == ErrorCode::NONE => {
                    return Some(Subscription::from_response(&r));
                }
                Ok(r) => tracing::debug!(code = %r.error_code, "GetTelemetrySubscriptions refused"),
                Err(Error::UnsupportedVersion { .. }) => {
                    tracing::debug!("the broker takes no client metrics (KIP-714)");
                    return None;
                }
                Err(e) => tracing::debug!(error = %e, "GetTelemetrySubscriptions failed"),
            }
            if wait(backoff, close).await.is_some() {
                return None;
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Pushes at `sub`'s interval until the subscription must be asked again or the engine
    /// stops; on close, the terminating push.
    async fn pushing(
        &mut self,
        sub: &Subscription,
        close: &mut watch::Receiver<Option<Duration>>,
    ) -> Next {
        // KIP-714: the first push waits a random 0.5x-1.5x of the interval, so that clients
        // started together do not push together.
        let mut interval = jitter(sub.push_interval);
        loop {
            if let Some(timeout) = wait(interval, close).await {
                if sub.wants_any() {
                    let _ = tokio::time::timeout(timeout, self.push(sub, true)).await;
                }
                return Next::Stop;
            }
            interval = sub.push_interval;
            // No metric asked for: nothing to push; ask again at the interval (KIP-714).
            if !sub.wants_any() {
                return Next::Resubscribe;
            }
            match self.push(sub, false).await {
                Pushed::GoOn => {}
                Pushed::Resubscribe => return Next::Resubscribe,
                Pushed::Stop => return Next::Stop,
            }
        }
    }

    /// One push: collect, select, encode, compress, send, judge.
    async fn push(&mut self, sub: &Subscription, terminating: bool) -> Pushed {
        let mut metrics: Vec<Metric> = Vec::new();
        let mut resource = Vec::new();
        for s in &self.sources {
            s.collect(&mut metrics);
            s.resource(&mut resource);
        }
        self.collector.set_dynamic(resource);
        let payload = self.collector.payload(metrics, sub, now_ns());
        let (compression, bytes) = compressed(sub.compression(), &payload.bytes);
        let req = PushTelemetryRequest::default()
            .with_client_instance_id(self.instance)
            .with_subscription_id(sub.subscription_id)
            .with_terminating(terminating)
            .with_compression_type(i8::try_from(compression.id()).unwrap_or(0))
            .with_metrics(bytes);
        let bound = sub.push_interval.min(ROUND_TRIP_MAX);
        match self.transport.round_trip_within(req, bound).await {
            Ok(r) => self.judge(r.error_code, payload),
            Err(e) => {
                tracing::debug!(error = %e, "PushTelemetry failed");
                Pushed::GoOn
            }
        }
    }

    /// What a PushTelemetry answer's code asks (KIP-714, "Error handling").
    fn judge(&mut self, code: ErrorCode, payload: Payload) -> Pushed {
        match code {
            ErrorCode::NONE => {
                self.collector.accepted(payload);
                Pushed::GoOn
            }
            ErrorCode::UNKNOWN_SUBSCRIPTION_ID | ErrorCode::UNSUPPORTED_COMPRESSION_TYPE => {
                Pushed::Resubscribe
            }
            ErrorCode::TELEMETRY_TOO_LARGE => {
                self.collector.shrink(payload.metrics);
                Pushed::GoOn
            }
            ErrorCode::INVALID_REQUEST | ErrorCode::INVALID_RECORD => {
                tracing::warn!(code = %code, "the broker refused client metrics; pushes stop");
                Pushed::Stop
            }
            other => {
                tracing::debug!(code = %other, "PushTelemetry refused");
                Pushed::GoOn
            }
        }
    }
}

/// The payload compressed with `compression`, or as it is when that is none or fails.
fn compressed(compression: Compression, raw: &[u8]) -> (Compression, Bytes) {
    if compression != Compression::None
        && let Ok(codec) = compression.codec()
    {
        let mut out = BytesMut::with_capacity(raw.len() / 2 + 64);
        if codec.compress(raw, None, &mut out).is_ok() {
            return (compression, out.freeze());
        }
    }
    (Compression::None, Bytes::copy_from_slice(raw))
}

/// `d` times a random factor in [0.5, 1.5).
fn jitter(d: Duration) -> Duration {
    let mut b = [0u8; 2];
    let r = getrandom::fill(&mut b).map_or(0.5, |()| f64::from(u16::from_le_bytes(b)) / 65536.0);
    d.mul_f64(0.5 + r)
}

/// Waits `d`, or less when the engine is closed: then the close's timeout.
async fn wait(d: Duration, close: &mut watch::Receiver<Option<Duration>>) -> Option<Duration> {
    tokio::select! {
        () = tokio::time::sleep(d) => None,
        t = closed(close) => Some(t),
    }
}

/// Resolves when the engine is closed (or its handle dropped), with the close's timeout.
async fn closed(close: &mut watch::Receiver<Option<Duration>>) -> Duration {
    match close.wait_for(Option::is_some).await {
        Ok(t) => t.unwrap_or_default(),
        Err(_) => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_half_and_one_and_a_half() {
        for _ in 0..100 {
            let j = jitter(Duration::from_secs(10));
            assert!(
                j >= Duration::from_secs(5) && j < Duration::from_secs(15),
                "{j:?}"
            );
        }
    }

    #[test]
    fn compressed_payloads_read_back() {
        let raw = vec![7u8; 1000];
        for c in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            if !c.is_supported() {
                continue;
            }
            let (used, bytes) = compressed(c, &raw);
            assert_eq!(used, c);
            let mut back = BytesMut::new();
            c.codec()
                .expect("codec")
                .decompress(&bytes, 1 << 20, &mut back)
                .expect("decompresses");
            assert_eq!(&back[..], &raw[..]);
        }
        assert_eq!(compressed(Compression::None, &raw).1.len(), 1000);
    }
}
