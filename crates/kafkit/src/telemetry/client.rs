//! A client's own engine: what the Writer, the GroupReader and the ShareReader hold when
//! `enable_metrics_push` is on (the default, as Java's `enable.metrics.push`).

use std::sync::Arc;
use std::time::Duration;

use kafkit_protocol::Uuid;

use super::{MetricSource, Telemetry, TelemetryError};
use crate::error::Result;
use crate::transport::Transport;

/// A client's KIP-714 engine, or why it has none.
#[derive(Debug)]
pub(crate) enum ClientPush {
    /// `enable_metrics_push(false)`.
    Off,
    /// On, but built outside a tokio runtime: no engine could start.
    NoRuntime,
    /// The running engine.
    On(Telemetry),
}

impl ClientPush {
    /// Starts the engine over `transport` with the client's `source` and fixed resource
    /// `labels` when `enabled`. The engine's task only spawns here: its first request goes out
    /// from the task, so the client's build and first request do not wait for it.
    pub(crate) fn start(
        enabled: bool,
        transport: &Transport,
        source: Arc<dyn MetricSource>,
        labels: Vec<(String, String)>,
    ) -> ClientPush {
        if !enabled {
            return ClientPush::Off;
        }
        let mut b = Telemetry::builder(transport.clone()).source(source);
        for (k, v) in labels {
            b = b.resource_label(k, v);
        }
        match b.build() {
            Ok(t) => ClientPush::On(t),
            Err(e) => {
                tracing::debug!(error = %e, "client metrics (KIP-714) not started");
                ClientPush::NoRuntime
            }
        }
    }

    /// The client instance id (Java's `clientInstanceId(Duration)`), waiting up to `timeout`.
    pub(crate) async fn client_instance_id(&self, timeout: Duration) -> Result<Uuid> {
        match self {
            ClientPush::Off => Err(TelemetryError::Disabled.into()),
            ClientPush::NoRuntime => Err(TelemetryError::Unsupported.into()),
            ClientPush::On(t) => t.client_instance_id(timeout).await,
        }
    }

    /// Stops the engine, with the terminating push when it holds a subscription, within
    /// `timeout`; at once when it has none (the client's close is not lengthened).
    pub(crate) async fn close(&self, timeout: Duration) {
        if let ClientPush::On(t) = self {
            t.close(timeout).await;
        }
    }
}
