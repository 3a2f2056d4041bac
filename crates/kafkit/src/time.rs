//! Deadlines from time spans that a caller or a broker gave, which may be as long as
//! `Duration::MAX` (the natural "no timeout"): `Instant + span` and `span + span` overflow and
//! panic on such values, so the crate makes its deadlines from caller- and network-given spans
//! here, and adds spans with `Duration::saturating_add`.

use std::time::Duration;

/// The farthest ahead a deadline is set: about 30 years, as tokio's own far future for
/// `sleep(Duration::MAX)`. A longer span waits this long, which no caller can tell from
/// forever.
pub(crate) const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// An instant type a deadline can be made of (`std::time::Instant`, `tokio::time::Instant`).
pub(crate) trait Moment: Copy {
    /// `self + span`, `None` when it does not fit the type.
    fn checked_plus(self, span: Duration) -> Option<Self>;
}

impl Moment for std::time::Instant {
    fn checked_plus(self, span: Duration) -> Option<Self> {
        self.checked_add(span)
    }
}

impl Moment for tokio::time::Instant {
    fn checked_plus(self, span: Duration) -> Option<Self> {
        self.checked_add(span)
    }
}

/// `start + span`, at most `start + FAR_FUTURE`: never panics. (An instant type that cannot
/// hold 30 years ahead, where `start` itself would be returned, exists on no platform tokio
/// runs on.)
pub(crate) fn after<I: Moment>(start: I, span: Duration) -> I {
    start.checked_plus(span.min(FAR_FUTURE)).unwrap_or(start)
}

/// The deadline `span` from now (tokio's clock, so paused test time applies).
pub(crate) fn deadline_after(span: Duration) -> tokio::time::Instant {
    after(tokio::time::Instant::now(), span)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_spans_end_in_the_far_future_and_small_ones_exactly() {
        let now = std::time::Instant::now();
        assert_eq!(after(now, Duration::MAX), now + FAR_FUTURE);
        assert_eq!(after(now, Duration::ZERO), now);
        assert_eq!(
            after(now, Duration::from_millis(5)),
            now + Duration::from_millis(5)
        );
        let t = tokio::time::Instant::now();
        assert_eq!(after(t, Duration::MAX), t + FAR_FUTURE);
        assert!(deadline_after(Duration::MAX) > t);
    }
}
