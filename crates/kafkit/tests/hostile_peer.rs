//! A `Conn` facing a peer that misbehaves: a raw TCP listener answers the ApiVersions handshake,
//! then garbles, truncates, stalls or closes. Every failure must be a typed error, never a panic
//! or a hang.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafkit::{Acks, CloseCause, Dialer, Error, FetchParams, ProduceBatches};
use kafkit_protocol::Message;
use kafkit_protocol::messages::ApiVersionsResponse;
use kafkit_protocol::messages::api_versions_response::ApiVersion;
use kafkit_protocol::records::Record;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as read by the peer: api key, version, correlation id.
#[derive(Debug, Clone, Copy)]
struct Req {
    api_key: i16,
    version: i16,
    correlation_id: i32,
}

async fn read_req(s: &mut TcpStream) -> Option<Req> {
    let size = s.read_i32().await.ok()?;
    let mut body = vec![0u8; usize::try_from(size).ok()?];
    s.read_exact(&mut body).await.ok()?;
    Some(Req {
        api_key: i16::from_be_bytes([body[0], body[1]]),
        version: i16::from_be_bytes([body[2], body[3]]),
        correlation_id: i32::from_be_bytes([body[4], body[5], body[6], body[7]]),
    })
}

/// Answers ApiVersions announcing `ranges` (api key, min, max).
async fn answer_api_versions(s: &mut TcpStream, req: Req, ranges: &[(i16, i16, i16)]) {
    let mut resp = ApiVersionsResponse::default();
    resp.api_keys = ranges
        .iter()
        .map(|&(k, min, max)| {
            let mut v = ApiVersion::default();
            v.api_key = k;
            v.min_version = min;
            v.max_version = max;
            v
        })
        .collect();
    let mut body = BytesMut::new();
    resp.encode(&mut body, req.version).unwrap();
    let mut frame = BytesMut::new();
    frame.put_i32(4 + i32::try_from(body.len()).unwrap());
    frame.put_i32(req.correlation_id);
    frame.put_slice(&body);
    s.write_all(&frame).await.unwrap();
}

const DEFAULT_RANGES: &[(i16, i16, i16)] = &[
    (0, 3, 11),
    (1, 4, 12),
    (2, 1, 8),
    (3, 1, 12),
    (18, 0, 4),
    (19, 2, 7),
];

/// A listener whose first connection gets the handshake and then `then`.
async fn peer<F, Fut>(
    ranges: &'static [(i16, i16, i16)],
    then: F,
) -> (String, tokio::task::JoinHandle<()>)
where
    F: FnOnce(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let h = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let req = read_req(&mut s).await.unwrap();
        assert_eq!(req.api_key, 18);
        answer_api_versions(&mut s, req, ranges).await;
        then(s).await;
    });
    (addr, h)
}

fn dialer() -> Dialer {
    Dialer::builder()
        .connect_timeout(Duration::from_secs(5))
        .request_timeout(Duration::from_secs(2))
        .max_response_size(1 << 20)
        .build()
}

async fn drain(mut s: TcpStream) {
    let mut sink = Vec::new();
    let _ = s.read_to_end(&mut sink).await;
}

fn frame(cid: i32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&(4 + payload.len() as i32).to_be_bytes());
    f.extend_from_slice(&cid.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[tokio::test]
async fn garbage_metadata_response_is_decode_error() {
    let (addr, _h) = peer(DEFAULT_RANGES, |mut s| async move {
        let req = read_req(&mut s).await.unwrap();
        s.write_all(&frame(req.correlation_id, &[0xff; 40]))
            .await
            .unwrap();
        drain(s).await;
    })
    .await;
    let conn = dialer().dial(&addr).await.unwrap();
    let err = conn.metadata(None).await.unwrap_err();
    assert!(matches!(err, Error::Decode(_)), "{err:?}");
}

#[tokio::test]
async fn empty_response_body_is_decode_error() {
    let (addr, _h) = peer(DEFAULT_RANGES, |mut s| async move {
        let req = read_req(&mut s).await.unwrap();
        s.write_all(&frame(req.correlation_id, &[])).await.unwrap();
        drain(s).await;
    })
    .await;
    let conn = dialer().dial(&addr).await.unwrap();
    let err = conn.metadata(Some(&["t"])).await.unwrap_err();
    assert!(matches!(err, Error::Decode(_)), "{err:?}");
}

#[tokio::test]
async fn close_mid_frame_is_eof() {
    let (addr, _h) = peer(DEFAULT_RANGES, |mut s| async move {
        let req = read_req(&mut s).await.unwrap();
        let f = frame(req.correlation_id, &[0; 100]);
        s.write_all(&f[..30]).await.unwrap();
    })
    .await;
    let conn = dialer().dial(&addr).await.unwrap();
    let err = conn.metadata(None).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::ConnectionClosed {
                cause: CloseCause::Eof | CloseCause::Io(_),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(conn.is_closed());
}

#[tokio::test]
async fn huge_size_prefix_after_handshake() {
    let (addr, _h) = peer(DEFAULT_RANGES, |mut s| async move {
        let _ = read_req(&mut s).await.unwrap();
        s.write_all(&0x7fff_fff0_i32.to_be_bytes()).await.unwrap();
        drain(s).await;
    })
    .await;
    let conn = dialer().dial(&addr).await.unwrap();
    let err = conn.metadata(None).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::ConnectionClosed {
                cause: CloseCause::InvalidFrameSize { .. },
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn unknown_correlation_id_then_silence_times_out() {
    let (addr, _h) = peer(DEFAULT_RANGES, |mut s| async move {
        let req = read_req(&mut s).await.unwrap();
        s.write_all(&frame(req.correlation_id.wrapping_add(1000), &[1, 2, 3]))
            .await
            .unwrap();
        drain(s).await;
    })
    .await;
    let conn = dialer().dial(&addr).await.unwrap();
    let err = conn.metadata(None).await.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
}

#[tokio::test]
async fn many_concurrent_callers_all_fail_when_peer_closes() {
    let (addr, _h) = peer(DEFAULT_RANGES, |mut s| async move {
        // Take a few requests, then die.
        for _ in 0..3 {
            read_req(&mut s).await;
        }
    })
    .await;
    let conn = dialer().dial(&addr).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..500 {
        let c = conn.clone();
        tasks.spawn(async move { c.metadata(None).await });
    }
    let mut n = 0;
    while let Some(r) = tasks.join_next().await {
        let err = r.unwrap().unwrap_err();
        assert!(
            matches!(err, Error::ConnectionClosed { .. } | Error::Timeout { .. }),
            "{err:?}"
        );
        n += 1;
    }
    assert_eq!(n, 500);
}

#[tokio::test]
async fn dropped_futures_mid_request_leave_conn_usable() {
    let (addr, _h) = peer(DEFAULT_RANGES, |mut s| async move {
        let mut reqs = Vec::new();
        // 3 requests abandoned by the client, answered late, then a 4th answered garbage.
        while let Some(r) = read_req(&mut s).await {
            reqs.push(r);
            if reqs.len() == 4 {
                break;
            }
        }
        for r in &reqs {
            s.write_all(&frame(r.correlation_id, &[0xff; 3]))
                .await
                .unwrap();
        }
        drain(s).await;
    })
    .await;
    let conn = dialer().dial(&addr).await.unwrap();
    for _ in 0..3 {
        let _ = tokio::time::timeout(Duration::from_millis(50), conn.metadata(None)).await;
    }
    let err = conn.metadata(None).await.unwrap_err();
    assert!(matches!(err, Error::Decode(_)), "{err:?}");
    assert!(!conn.is_closed());
}

#[tokio::test]
async fn old_produce_range_is_unsupported_version() {
    static OLD: &[(i16, i16, i16)] = &[(0, 0, 2), (3, 0, 1), (18, 0, 4)];
    let (addr, _h) = peer(OLD, drain).await;
    let conn = dialer().dial(&addr).await.unwrap();
    let mut b = ProduceBatches::default();
    b.add_records("t", 0, &[Record::new(None, Some(Bytes::from_static(b"v")))])
        .unwrap();
    let err = conn
        .write_multi(&b, Acks::All, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnsupportedVersion { .. }), "{err:?}");
    // Fetch is not offered at all.
    let err = conn
        .fetch("t", 0, 0, &FetchParams::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnsupportedVersion { .. }), "{err:?}");
}

#[tokio::test]
async fn inverted_broker_range_is_unsupported_version() {
    static INV: &[(i16, i16, i16)] = &[(3, 12, 1), (18, 0, 4)];
    let (addr, _h) = peer(INV, drain).await;
    let conn = dialer().dial(&addr).await.unwrap();
    let err = conn.metadata(None).await.unwrap_err();
    assert!(matches!(err, Error::UnsupportedVersion { .. }), "{err:?}");
}
