//! Deadlines from time spans that a caller or a broker gave, which may be as long as
//! `Duration::MAX` (the natural "no timeout"): `Instant + span` and `span + span` overflow and
//! panic on such values, so the crate makes its deadlines from caller- and network-given spans
//! here, and adds spans with `Duration::saturating_add`.
//!
//! Also the crate's one home for milliseconds: [`wire_ms`] (a span as a request's `i32` field),
//! [`millis`] (a span as `u64`, the retry clock's unit) and [`now_ms`] (the wall clock as a
//! record timestamp). All saturate instead of wrapping or panicking.
//!
//! A ground-floor module, beside `error/`: it imports only std, tokio and libc.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// A broker-side wait or timeout as the `timeout_ms` / `max_wait_ms` / `session_timeout_ms`
/// field of a request: whole milliseconds, at most `i32::MAX` (~24.8 days).
pub(crate) fn wire_ms(wait: Duration) -> i32 {
    i32::try_from(wait.as_millis()).unwrap_or(i32::MAX)
}

/// A time span in whole milliseconds for one of the protocol's int64 fields (a transaction
/// duration filter, a delegation token's period), saturating at `i64::MAX`.
pub(crate) fn wire_ms_i64(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A time span in whole milliseconds, saturating at `u64::MAX` (the unit of the retry clock
/// and of the transport's timeouts).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds since the Unix epoch (0 before it), from whole seconds and the milliseconds of
/// the second (no 128-bit arithmetic: this runs once per record). On Unix straight from
/// `clock_gettime(CLOCK_REALTIME)`, the clock `SystemTime::now` reads, without its conversion
/// to a `Duration` and back (a tenth of the clock read's cost).
#[inline]
pub(crate) fn now_ms() -> i64 {
    #[cfg(unix)]
    {
        // Uninitialised, not a struct literal: some targets' `timespec` has private padding.
        let mut ts = std::mem::MaybeUninit::<libc::timespec>::uninit();
        // SAFETY: `clock_gettime` writes one `timespec` through the pointer, which points to
        // writable, properly aligned memory of that type's layout; it keeps no reference to
        // it. Tested by `the_record_clock_is_the_system_clock`.
        #[allow(unsafe_code)]
        let read = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, ts.as_mut_ptr()) };
        if read == 0 {
            // SAFETY: it returned 0, so it wrote the whole `timespec`.
            #[allow(unsafe_code)]
            let ts = unsafe { ts.assume_init() };
            // `time_t` and `c_long` are 64 bits on the targets that matter, 32 on some.
            #[allow(clippy::useless_conversion)]
            let (secs, nanos) = (i64::from(ts.tv_sec), i64::from(ts.tv_nsec));
            return if secs < 0 {
                0
            } else {
                epoch_ms(secs, nanos / 1_000_000)
            };
        }
        // A 32-bit `time_t` past 2038 (EOVERFLOW): the slower path below.
    }
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| {
        i64::try_from(d.as_secs()).map_or(i64::MAX, |s| epoch_ms(s, i64::from(d.subsec_millis())))
    })
}

/// `secs` whole seconds and `millis` more, in milliseconds (saturating).
fn epoch_ms(secs: i64, millis: i64) -> i64 {
    secs.saturating_mul(1000).saturating_add(millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_clock_is_the_system_clock() {
        let ms = |t: std::time::SystemTime| {
            i64::try_from(t.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
        };
        for _ in 0..1_000 {
            let before = ms(std::time::SystemTime::now());
            let now = now_ms();
            let after = ms(std::time::SystemTime::now());
            assert!(
                before <= now && now <= after,
                "{before} <= {now} <= {after}"
            );
        }
    }

    #[test]
    fn spans_saturate_in_milliseconds() {
        assert_eq!(wire_ms(Duration::from_millis(1_500)), 1_500);
        assert_eq!(wire_ms(Duration::from_micros(1_999)), 1);
        assert_eq!(wire_ms(Duration::MAX), i32::MAX);
        assert_eq!(millis(Duration::from_secs(3)), 3_000);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }

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
