//! The connection's frame reader, through the public API: `Dialer::dial` to a loopback listener
//! that answers with the fuzz input, whatever the client sent.
//!
//! No public entry point takes a byte stream (the reader task is started on a socket inside
//! `Dialer::dial`), so each run goes over a real loopback TCP connection: the client's
//! ApiVersions exchange (with its UNSUPPORTED_VERSION retry) reads the first frames; when dialing
//! succeeds, a Metadata request reads the next one. Responses carry the correlation ids 0, 1, 2...
//! in order.
//!
//! Input: `limit: u8` (the `max_response_size`, one of `LIMITS`), then the bytes the "broker"
//! sends before closing its side.
//!
//! Checks: no panic, and every call ends (the server closes, so each wait is bounded by the
//! connection's EOF; a 5 s timeout fails the run otherwise).
#![no_main]

// Links the shared crate, and with it the allocation limit (`kafkit_fuzz::LimitedAlloc`).
use kafkit_fuzz as _;

use std::sync::OnceLock;
use std::time::Duration;

use kafkit::Dialer;
use kafkit::protocol::messages::MetadataRequest;
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::runtime::Runtime;

const LIMITS: [usize; 4] = [4, 64, 4096, 1 << 20];

struct Env {
    rt: Runtime,
    listener: TcpListener,
    addr: String,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let listener = rt.block_on(TcpListener::bind("127.0.0.1:0")).expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        Env { rt, listener, addr }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&limit, answer)) = data.split_first() else {
        return;
    };
    let limit = LIMITS[usize::from(limit) % LIMITS.len()];
    let env = env();
    let run = async {
        let server = async {
            let Ok((mut s, _)) = env.listener.accept().await else {
                return;
            };
            let _ = s.write_all(answer).await;
            let _ = s.shutdown().await;
            let mut sink = [0u8; 4096];
            while let Ok(n) = s.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        };
        let client = async {
            let dialer = Dialer::builder()
                .connect_timeout(Duration::from_secs(2))
                .request_timeout(Duration::from_secs(2))
                .max_response_size(limit)
                .build();
            if let Ok(conn) = dialer.dial(&env.addr).await {
                let _ = conn.request(&MetadataRequest::default()).await;
                conn.close();
            }
        };
        tokio::join!(server, client);
    };
    env.rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(5), run).await })
        .expect("a dial over a connection the peer closed did not end within 5 s");
});
