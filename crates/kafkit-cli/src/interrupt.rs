//! Ctrl-C (SIGINT) and SIGTERM: the first one ends a command cleanly (a consumer flushes what
//! it formatted, a group member commits what it printed and leaves its group, a producer writes
//! what it read or aborts its transaction; as kcat); a second one exits at once with 130
//! (128 + SIGINT), for when the clean end hangs.

use crate::Failure;

/// Exit code of a second interrupt (the shell's code of a process killed by SIGINT).
pub const EXIT_INTERRUPTED: i32 = 130;

/// The interrupt signals, listened to from [`Interrupt::new`] on (a signal that arrives before
/// is the default action: the process dies).
#[derive(Debug)]
pub struct Interrupt {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Interrupt {
    /// Installs the handlers.
    pub fn new() -> Result<Interrupt, Failure> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let handler = |e: std::io::Error| Failure::Error(format!("cannot handle Ctrl-C: {e}"));
            Ok(Interrupt {
                int: signal(SignalKind::interrupt()).map_err(handler)?,
                term: signal(SignalKind::terminate()).map_err(handler)?,
            })
        }
        #[cfg(not(unix))]
        Ok(Interrupt {})
    }

    /// Waits for the first interrupt; from then on a second one exits the process at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a signal that arrives while nobody waits is kept for the next call.
    pub async fn recv(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }

    /// Runs `work` (connecting to the cluster, looking up where to start) unless an interrupt
    /// comes first: nothing was done yet, so there is nothing to end cleanly and the process
    /// exits at once with [`EXIT_INTERRUPTED`] (before, Ctrl-C waited for the whole
    /// `--timeout` of an unreachable cluster).
    ///
    /// # Cancel safety
    ///
    /// As `work`'s.
    pub async fn or_exit<T>(&mut self, what: &str, work: impl Future<Output = T>) -> T {
        tokio::select! {
            t = work => t,
            () = self.recv() => {
                eprintln!("kafkit: interrupted while {what}");
                std::process::exit(EXIT_INTERRUPTED);
            }
        }
    }

    /// After the first interrupt: a second one exits at once with [`EXIT_INTERRUPTED`].
    pub fn exit_on_the_next(mut self) {
        tokio::spawn(async move {
            self.recv().await;
            eprintln!("kafkit: interrupted again: exiting without waiting");
            std::process::exit(EXIT_INTERRUPTED);
        });
    }
}
