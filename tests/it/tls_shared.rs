//! The broker-neutral TLS test bodies, run by `secure_tansu` (a TLS relay written in the test in
//! front of tansu, which cannot serve TLS itself) and `secure_kafka` (Apache Kafka 4.4's own SSL
//! and MTLS listeners): the CA given connects and anything else fails verification, mutual TLS
//! with and without the client certificate, and each side of a TLS/plaintext mismatch. Each body
//! takes the listener's address and the PEM it needs; every failure must be a typed
//! [`Error::Tls`] that arrives promptly (well before the dialer's connect timeout), not a hang.

use std::time::{Duration, Instant};

use integration_tests::BrokerKind;
use kafkit::{Conn, Dialer, Error, TlsConfig, TlsErrorKind};

/// The dialers' connect timeout (TCP, TLS handshake and ApiVersions): generous for a loaded
/// machine, and the bound a failure must beat to count as prompt.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// A dialer with `tls`.
pub(crate) fn tls_dialer(tls: TlsConfig) -> Dialer {
    Dialer::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .tls(tls)
        .build()
}

/// `TlsConfig` trusting only `ca_pem`.
pub(crate) fn with_ca(ca_pem: &str) -> TlsConfig {
    TlsConfig::builder()
        .ca_pem(ca_pem.to_owned())
        .build()
        .expect("TLS config with the CA")
}

/// Dials `addr` with `dialer` and returns the failure, asserting it is [`Error::Tls`] of `kind`,
/// not retriable, and prompt.
pub(crate) async fn dial_fails(dialer: &Dialer, addr: &str, kind: TlsErrorKind) -> Error {
    let started = Instant::now();
    let err = match dialer.dial(addr).await {
        Ok(_) => panic!("dialling {addr} with {dialer:?} succeeded; wanted {kind:?}"),
        Err(e) => e,
    };
    let took = started.elapsed();
    match &err {
        Error::Tls { kind: got, .. } => assert_eq!(*got, kind, "{err:?}"),
        other => panic!("expected Error::Tls {{ kind: {kind:?} }}, got {other:?}"),
    }
    assert!(!err.is_retriable(), "{err}");
    assert!(
        took < CONNECT_TIMEOUT / 2,
        "{kind:?} took {took:?}: a timeout, not the peer's answer ({err})"
    );
    err
}

/// Metadata on `conn` lists a broker.
async fn metadata_works(conn: &Conn) {
    let md = conn.metadata(None).await.expect("metadata over TLS");
    assert!(!md.brokers.is_empty());
}

/// On the TLS listener at `127.0.0.1:port` (certificate for `localhost` and 127.0.0.1, signed by
/// `ca_pem`): the CA given connects by name and by address; the default webpki roots, the
/// system's roots and a server name the certificate lacks each fail verification. Returns a
/// connection made with the CA.
pub(crate) async fn ca_given_connects_and_others_fail_verification(
    port: u16,
    ca_pem: &str,
) -> Conn {
    // SNI and the name check use the dialled host.
    let by_name = format!("localhost:{port}");
    let by_ip = format!("127.0.0.1:{port}");
    let conn = tls_dialer(with_ca(ca_pem)).dial(&by_name).await.unwrap();
    metadata_works(&conn).await;
    let ip = tls_dialer(with_ca(ca_pem)).dial(&by_ip).await.unwrap();
    metadata_works(&ip).await;
    ip.close();

    // Default roots (webpki): the test CA is unknown.
    let webpki = tls_dialer(TlsConfig::builder().build().unwrap());
    dial_fails(&webpki, &by_name, TlsErrorKind::Verification).await;
    // The system's roots do not know it either (a machine without any has nothing to try).
    if let Ok(system) = TlsConfig::builder().system_roots().build() {
        dial_fails(&tls_dialer(system), &by_ip, TlsErrorKind::Verification).await;
    }
    // The right CA but a name the certificate does not carry.
    let other_name = TlsConfig::builder()
        .ca_pem(ca_pem.to_owned())
        .server_name("broker.example.com")
        .build()
        .unwrap();
    dial_fails(
        &tls_dialer(other_name),
        &by_name,
        TlsErrorKind::Verification,
    )
    .await;
    conn
}

/// On the TLS listener at `addr` that requires a client certificate signed by `ca_pem`: with
/// `client_cert_pem` and its key the dial works (the connection is returned); without, the
/// broker's refusal is a typed [`TlsErrorKind::Handshake`]. In TLS 1.3 the server checks the
/// client certificate after the client's side of the handshake is done, so the refusal (an
/// alert) arrives at the first read, the ApiVersions answer the dial waits for.
pub(crate) async fn mutual_tls_needs_the_client_certificate(
    addr: &str,
    ca_pem: &str,
    client_cert_pem: &str,
    client_key_pem: &str,
) -> Conn {
    let mtls = TlsConfig::builder()
        .ca_pem(ca_pem.to_owned())
        .client_cert_pem(client_cert_pem.to_owned(), client_key_pem.to_owned())
        .build()
        .unwrap();
    let conn = tls_dialer(mtls).dial(addr).await.unwrap();
    metadata_works(&conn).await;

    dial_fails(&tls_dialer(with_ca(ca_pem)), addr, TlsErrorKind::Handshake).await;
    conn
}

/// A TLS dialer on the plaintext listener at `addr`: [`TlsErrorKind::NotTls`].
///
/// Kafka reads the ClientHello's first four bytes (`16 03 01 ..`) as a request size of hundreds
/// of megabytes, over its `socket.request.max.bytes`, and closes the connection at once: the
/// handshake sees the end of the stream. tansu waits for that many bytes and never answers, so
/// there the dialer's own handshake deadline (3 s here) ends the dial, still typed `NotTls`.
pub(crate) async fn tls_dialer_on_a_plaintext_listener_says_so(
    kind: BrokerKind,
    addr: &str,
    ca_pem: &str,
) {
    match kind {
        BrokerKind::Kafka => {
            dial_fails(&tls_dialer(with_ca(ca_pem)), addr, TlsErrorKind::NotTls).await;
        }
        BrokerKind::Tansu => {
            let short = Dialer::builder()
                .connect_timeout(Duration::from_secs(3))
                .tls(with_ca(ca_pem))
                .build();
            let err = short.dial(addr).await.unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Tls {
                        kind: TlsErrorKind::NotTls,
                        ..
                    }
                ),
                "{err:?}"
            );
            assert!(err.to_string().contains("no answer"), "{err}");
        }
    }
}

/// A plaintext dialer on the TLS listener at `addr`: [`TlsErrorKind::PlaintextToTls`], whose
/// message tells the user to configure TLS.
pub(crate) async fn plaintext_dialer_on_a_tls_listener_says_so(addr: &str) {
    let plain = Dialer::builder().connect_timeout(CONNECT_TIMEOUT).build();
    let err = dial_fails(&plain, addr, TlsErrorKind::PlaintextToTls).await;
    assert!(err.to_string().contains("TLS listener"), "{err}");
}
