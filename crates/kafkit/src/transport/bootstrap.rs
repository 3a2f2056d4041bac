//! Dialling the bootstrap list: staggered and concurrent, first success wins (in the manner of
//! RFC 8305 "happy eyeballs"), so an address that refuses, is unresolvable or is blackholed
//! never holds up the others for a whole connect timeout.

use std::time::Duration;

use tokio::task::JoinSet;

use crate::conn::Conn;
use crate::dialer::Dialer;
use crate::error::{Error, Result};

/// How long one bootstrap address is given before the next one is dialled alongside it.
pub(crate) const BOOTSTRAP_STAGGER: Duration = Duration::from_millis(250);

/// Dials `addrs` in order, starting the next one when the previous failed or after
/// [`BOOTSTRAP_STAGGER`], whichever comes first; the first connection set up wins and the other
/// attempts are abandoned. Each dial is bounded by the dialer's connect timeout.
///
/// Errors: the last dial error when every address failed; [`Error::Config`] for an empty list.
pub(crate) async fn dial_first(dialer: &Dialer, addrs: &[String]) -> Result<(String, Conn)> {
    let mut set: JoinSet<(String, Result<Conn>)> = JoinSet::new();
    let mut next = 0;
    let mut last_err = None;
    loop {
        if next < addrs.len() {
            let addr = addrs[next].clone();
            let dialer = dialer.clone();
            set.spawn(async move {
                let r = dialer.dial(&addr).await;
                (addr, r)
            });
            next += 1;
        }
        if set.is_empty() {
            return Err(last_err.unwrap_or_else(|| Error::Config("empty bootstrap list".into())));
        }
        let more = next < addrs.len();
        tokio::select! {
            joined = set.join_next() => match joined {
                Some(Ok((addr, Ok(conn)))) => {
                    tracing::debug!(addr, "bootstrap connection established");
                    return Ok((addr, conn));
                }
                Some(Ok((addr, Err(e)))) => {
                    tracing::debug!(addr, error = %e, "bootstrap address failed");
                    last_err = Some(e);
                }
                Some(Err(join)) => {
                    last_err = Some(Error::Io(std::io::Error::other(join.to_string())));
                }
                None => {}
            },
            () = tokio::time::sleep(BOOTSTRAP_STAGGER), if more => {}
        }
    }
}
