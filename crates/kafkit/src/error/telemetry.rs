//! [`TelemetryError`]: why a client has no KIP-714 client instance id, inside
//! [`crate::Error::Telemetry`].

use std::time::Duration;

/// Why `Telemetry::client_instance_id` (and the clients' `client_instance_id`) has no id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// Metrics push is off (`enable_metrics_push(false)`; Java throws `IllegalStateException`).
    #[error("client metrics push is off (enable.metrics.push=false)")]
    Disabled,
    /// The engine stopped without an id: the cluster takes no client metrics (no KIP-714
    /// GetTelemetrySubscriptions), or the client was closed.
    #[error(
        "the cluster gave no client instance id: it takes no client metrics (KIP-714), or the client closed"
    )]
    Unsupported,
    /// No GetTelemetrySubscriptions answer within the timeout (retriable).
    #[error("no client instance id within {timeout:?}")]
    Timeout {
        /// The time waited.
        timeout: Duration,
    },
}

impl TelemetryError {
    /// Whether asking again may help (only [`TelemetryError::Timeout`]).
    pub fn is_retriable(&self) -> bool {
        matches!(self, TelemetryError::Timeout { .. })
    }
}
