//! Retry timing: exponential backoff with jitter (KIP-580) bounded by a deadline.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};

/// Exponential backoff between attempts (KIP-580): `retry_backoff * 2^(attempt-1)`, capped
/// at `retry_backoff_max`, each delay spread by a random ±20 % so that many clients do not
/// retry in step.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    /// First delay, in ms (Java `retry.backoff.ms`).
    pub(crate) base_ms: u64,
    /// Largest delay, in ms (Java `retry.backoff.max.ms`).
    pub(crate) max_ms: u64,
}

impl Backoff {
    /// The delay after failed attempt number `attempt` (1 = the first failure).
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(32);
        let raw = self
            .base_ms
            .saturating_mul(1u64 << exp)
            .min(self.max_ms.max(self.base_ms));
        // Jitter in [0.8, 1.2).
        let r = random_u64() % 4_000;
        let ms = raw.saturating_mul(8_000 + r) / 10_000;
        Duration::from_millis(ms)
    }
}

/// A random number from the standard library's per-process random hash keys (no extra
/// dependency; quality is ample for jitter).
fn random_u64() -> u64 {
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u64(0x9e37_79b9_7f4a_7c15);
    h.finish()
}

/// The clock of one retrying operation: its deadline, how many attempts failed, and the
/// backoff before the next one. Used by [`crate::Transport::round_trip`] and by the split
/// routes (`transport/split*.rs`).
#[derive(Debug)]
pub(crate) struct RetryClock {
    operation: &'static str,
    deadline: Instant,
    timeout_ms: u64,
    attempts: u32,
    backoff: Backoff,
}

impl RetryClock {
    /// Starts the clock now: the operation must finish within `timeout_ms`.
    pub(crate) fn new(operation: &'static str, timeout_ms: u64, backoff: Backoff) -> RetryClock {
        RetryClock {
            operation,
            deadline: crate::time::deadline_after(Duration::from_millis(timeout_ms)),
            timeout_ms,
            attempts: 0,
            backoff,
        }
    }

    /// When the operation must be finished.
    #[allow(dead_code)] // for the split routes
    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Failed attempts so far.
    #[allow(dead_code)]
    pub(crate) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Records a failed attempt (`last`, which must be retriable) and waits the backoff before
    /// the next one. Errors: [`Error::DeadlineExceeded`] carrying `last` when the next attempt
    /// could not start before the deadline (returned at once, without sleeping).
    pub(crate) async fn backoff(&mut self, last: Error) -> Result<()> {
        self.attempts += 1;
        let wait = self.backoff.delay(self.attempts);
        if crate::time::deadline_after(wait) >= self.deadline {
            return Err(self.exceeded(last));
        }
        tracing::debug!(operation = self.operation, attempt = self.attempts, wait_ms = wait.as_millis() as u64, error = %last, "retrying");
        tokio::time::sleep(wait).await;
        Ok(())
    }

    /// The [`Error::DeadlineExceeded`] for this operation with `last` as its cause.
    pub(crate) fn exceeded(&self, last: Error) -> Error {
        Error::DeadlineExceeded {
            operation: self.operation,
            timeout: Duration::from_millis(self.timeout_ms),
            attempts: self.attempts.max(1),
            last: Box::new(last),
        }
    }

    /// Runs `fut` (one attempt) until the deadline; past it, fails with [`Error::Timeout`].
    pub(crate) async fn attempt<T>(&self, fut: impl Future<Output = Result<T>>) -> Result<T> {
        match tokio::time::timeout_at(self.deadline, fut).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout {
                operation: self.operation,
                timeout: Duration::from_millis(self.timeout_ms),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_exponentially_with_jitter_and_a_cap() {
        let b = Backoff {
            base_ms: 100,
            max_ms: 1_000,
        };
        for _ in 0..50 {
            let d1 = b.delay(1).as_millis();
            assert!((80..120).contains(&d1), "{d1}");
            let d3 = b.delay(3).as_millis();
            assert!((320..480).contains(&d3), "{d3}");
            let d10 = b.delay(10).as_millis();
            assert!((800..1200).contains(&d10), "{d10}");
            let huge = b.delay(u32::MAX).as_millis();
            assert!((800..1200).contains(&huge), "{huge}");
        }
        let delays: std::collections::HashSet<u128> =
            (0..50).map(|_| b.delay(5).as_millis()).collect();
        assert!(delays.len() > 1, "jitter varies the delay");
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_gives_up_at_the_deadline_with_the_last_cause() {
        let mut r = RetryClock::new(
            "JoinGroup",
            1_000,
            Backoff {
                base_ms: 100,
                max_ms: 400,
            },
        );
        let mut n = 0;
        let err = loop {
            n += 1;
            let last = Error::broker(
                "JoinGroup",
                kafkit_protocol::ErrorCode::NOT_COORDINATOR,
                None,
            );
            if let Err(e) = r.backoff(last).await {
                break e;
            }
        };
        assert!(n >= 3, "{n} attempts");
        assert!(Instant::now() <= r.deadline());
        match err {
            Error::DeadlineExceeded {
                operation: "JoinGroup",
                timeout,
                attempts,
                last,
            } => {
                assert_eq!(timeout, Duration::from_secs(1));
                assert_eq!(attempts, n);
                assert_eq!(
                    last.error_code(),
                    Some(kafkit_protocol::ErrorCode::NOT_COORDINATOR)
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
