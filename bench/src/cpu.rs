//! CPU time of this process, from `getrusage(RUSAGE_SELF)` (all threads of the process: the
//! tokio workers and librdkafka's broker threads alike).

use std::time::Duration;

use nix::sys::resource::{UsageWho, getrusage};
use nix::sys::time::TimeValLike;

/// User and system CPU time used by the process so far.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuTime {
    /// Time spent running the process's own code.
    pub user: Duration,
    /// Time the kernel spent on the process's behalf (socket reads and writes, mostly).
    pub system: Duration,
}

impl CpuTime {
    /// The process's CPU time now.
    ///
    /// Errors: the `getrusage` error (it does not fail for `RUSAGE_SELF` on Linux).
    pub fn now() -> Result<CpuTime, String> {
        let u = getrusage(UsageWho::RUSAGE_SELF).map_err(|e| format!("getrusage: {e}"))?;
        let micros = |t: nix::sys::time::TimeVal| {
            Duration::from_micros(u64::try_from(t.num_microseconds()).unwrap_or(0))
        };
        Ok(CpuTime {
            user: micros(u.user_time()),
            system: micros(u.system_time()),
        })
    }

    /// CPU time used between `earlier` and `self`.
    pub fn since(self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}
