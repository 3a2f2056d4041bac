//! Whether the cluster's brokers still accept connections: the check behind "cannot reach the
//! cluster" while records wait (`produce`, which then stops) or while `consume` follows
//! (which says so on stderr, rate-limited, and goes on trying). A TCP connect
//! only: a broker that accepts is reachable, whatever it answers later (the client's own
//! errors say that).

use std::time::Duration;

/// How long one broker gets to accept a connection.
const PROBE: Duration = Duration::from_secs(1);

/// `Ok` when any of `brokers` (`host:port`) accepts a TCP connection within a second; the
/// first broker's error otherwise (`127.0.0.1:9092: Connection refused`). No brokers: `Ok`
/// (nothing to say).
pub async fn any(brokers: &[String]) -> Result<(), String> {
    let mut first = None;
    for addr in brokers {
        let why = match tokio::time::timeout(PROBE, tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => format!("{addr}: {e}"),
            Err(_) => format!("{addr}: no answer within {PROBE:?}"),
        };
        first.get_or_insert(why);
    }
    first.map_or(Ok(()), Err)
}

/// How often [`watch`] probes the brokers.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// How often [`watch`] repeats that the cluster is still unreachable.
const REPEAT: Duration = Duration::from_secs(10);

/// What [`watch`] says after one probe, given when the cluster became unreachable (`None`:
/// reachable) and when it last said so: a line at once, then every [`REPEAT`] while it lasts,
/// and once when it is back. `None`: nothing to say.
fn verdict(
    probe: &Result<(), String>,
    down_since: &mut Option<std::time::Instant>,
    said: &mut Option<std::time::Instant>,
    now: std::time::Instant,
) -> Option<String> {
    match probe {
        Ok(()) => {
            let was_down = down_since.take().is_some();
            *said = None;
            was_down.then(|| "the cluster is reachable again".to_owned())
        }
        Err(why) => {
            let since = *down_since.get_or_insert(now);
            if said.is_some_and(|t| now.duration_since(t) < REPEAT) {
                return None;
            }
            *said = Some(now);
            let secs = now.duration_since(since).as_secs();
            let how_long = if secs == 0 {
                String::new()
            } else {
                format!(" for {secs} s")
            };
            Some(format!(
                "cannot reach the cluster{how_long}: {why}; still trying (Ctrl-C ends)"
            ))
        }
    }
}

/// Says on stderr when no broker of `brokers` accepts a connection any more, while a command
/// waits for the cluster without failing (`consume` follows and retries): at once, then every
/// 10 s while it lasts, and once when a broker accepts again. Probes once a second; never
/// returns (the caller aborts its task).
pub async fn watch(brokers: Vec<String>) {
    let mut tick = tokio::time::interval(WATCH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut down_since, mut said) = (None, None);
    loop {
        tick.tick().await;
        let probe = any(&brokers).await;
        if let Some(line) = verdict(
            &probe,
            &mut down_since,
            &mut said,
            std::time::Instant::now(),
        ) {
            eprintln!("kafkit: {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_port_is_unreachable_and_a_listener_is_not() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap().to_string();
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let err = any(std::slice::from_ref(&closed)).await.unwrap_err();
        assert!(err.starts_with(&closed), "{err}");
        assert_eq!(any(&[closed, open]).await, Ok(()));
        assert_eq!(any(&[]).await, Ok(()));
    }

    #[test]
    fn unreachable_is_said_at_once_then_every_ten_seconds_and_back_once() {
        let t0 = std::time::Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let (mut down, mut said) = (None, None);
        let refused = Err("h:1: Connection refused".to_owned());
        let mut say = |p: &Result<(), String>, s| verdict(p, &mut down, &mut said, at(s));
        assert_eq!(say(&Ok(()), 0), None);
        let first = say(&refused, 1).expect("said at once");
        assert!(
            first.starts_with("cannot reach the cluster: h:1"),
            "{first}"
        );
        assert_eq!(say(&refused, 2), None);
        assert_eq!(say(&refused, 10), None);
        let again = say(&refused, 11).expect("said again after 10 s");
        assert!(
            again.starts_with("cannot reach the cluster for 10 s"),
            "{again}"
        );
        assert_eq!(
            say(&Ok(()), 12).as_deref(),
            Some("the cluster is reachable again")
        );
        assert_eq!(say(&Ok(()), 13), None);
    }
}
