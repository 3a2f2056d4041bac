//! Whether the cluster's brokers still accept connections: the check behind "cannot reach the
//! cluster" while records wait (`produce`) or fetches get nothing (`consume`). A TCP connect
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
}
