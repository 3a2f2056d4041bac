//! Secure connections against tansu: SASL with a tansu started here with `--authentication`,
//! and TLS.
//!
//! What tansu 0.6.0 can and cannot show (found by running it; see the report of issue 5):
//! - With `--authentication` it offers SCRAM-SHA-512, SCRAM-SHA-256 and OAUTHBEARER (PLAIN is
//!   not built in: `UNSUPPORTED_SASL_MECHANISM`) and refuses every API but ApiVersions and SASL
//!   before authentication, AlterUserScramCredentials included. This build has only the
//!   object-store engine (`memory://`, `s3://`), whose credential store drops every user, so no
//!   exchange can succeed here: these tests cover the handshake, the SaslAuthenticate framing
//!   and the typed failures. Without `--authentication` it serves no mechanism at all.
//!   OAUTHBEARER tokens are refused by its validator whatever they hold. Successful SCRAM
//!   logins run in sasl_tansu.rs, against a tansu built with SQLite storage; kafkit-sasl also
//!   checks full exchanges against rsasl's server side.
//! - tansu cannot serve TLS itself: its `--cert` and `--key` flags sit in one clap group and so
//!   exclude each other, and it needs both. TLS is tested through a TLS-terminating relay
//!   (tokio-rustls server, certificates made here with rcgen) in front of the real tansu, as
//!   stunnel would be; every byte past TLS is tansu's. The TLS bodies are shared with
//!   `secure_kafka`, which runs them against Apache Kafka's own SSL and MTLS listeners
//!   (module `tls_shared`).

use std::net::TcpListener as StdListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use kafkit::sasl::{Mechanism, OAuthBearer, Plain, Scram, ScramHash};
use kafkit::{Dialer, Error, ErrorCode, TlsConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};

use crate::tls_shared;

/// A tansu with `--authentication` on a free port, killed on drop.
struct AuthTansu {
    child: Child,
    addr: String,
}

impl Drop for AuthTansu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl AuthTansu {
    async fn start() -> AuthTansu {
        let port = StdListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let url = format!("tcp://{addr}");
        let child = Command::new(integration_tests::prebuilt_tansu_bin())
            .arg("broker")
            .args(["--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .args(["--cluster-id", "kafkit-secure"])
            .arg("--authentication")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tansu");
        let tansu = AuthTansu { child, addr };
        // Ready when an ApiVersions round trip works (no authentication needed for it).
        let dialer = Dialer::builder()
            .connect_timeout(Duration::from_secs(1))
            .build();
        for _ in 0..300 {
            if let Ok(c) = dialer.dial(&tansu.addr).await {
                c.close();
                return tansu;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("tansu --authentication did not start on {}", tansu.addr);
    }
}

fn sasl_dialer(mech: impl Mechanism + 'static) -> Dialer {
    Dialer::builder()
        .connect_timeout(Duration::from_secs(10))
        .sasl(mech)
        .build()
}

fn assert_sasl_code(err: &Error, want: ErrorCode) {
    match err {
        Error::Sasl { code, .. } => assert_eq!(*code, Some(want), "{err}"),
        other => panic!("expected Error::Sasl with {want}, got {other:?}"),
    }
    assert!(!err.is_retriable(), "{err}");
    assert_eq!(err.error_code(), Some(want));
}

#[tokio::test]
async fn scram_against_tansu_reaches_the_exchange_and_fails_typed_without_a_user() {
    let tansu = AuthTansu::start().await;
    // Without SASL, tansu refuses everything but ApiVersions.
    let bare = Dialer::builder().build().dial(&tansu.addr).await.unwrap();
    assert!(bare.metadata(None).await.is_err());

    for hash in [ScramHash::Sha256, ScramHash::Sha512] {
        let password = format!("pw-{}-never-shown", hash.mechanism_name());
        // The handshake accepts the mechanism, the client-first message goes out in a
        // SaslAuthenticate request, tansu answers with a SCRAM `e=unknown-user` server message,
        // and that refusal comes back as a typed error.
        let err = sasl_dialer(Scram::new(hash, "alice", password.as_str()))
            .dial(&tansu.addr)
            .await
            .unwrap_err();
        assert_sasl_code(&err, ErrorCode::SASL_AUTHENTICATION_FAILED);
        match &err {
            Error::Sasl {
                mechanism, message, ..
            } => {
                assert_eq!(mechanism, hash.mechanism_name());
                assert!(message.contains("unknown-user"), "{message}");
            }
            _ => unreachable!(),
        }
        for shown in [format!("{err}"), format!("{err:?}")] {
            assert!(!shown.contains(&password), "{shown}");
        }
    }
}

#[tokio::test]
async fn oauthbearer_token_refused_by_tansu_is_a_typed_error() {
    let tansu = AuthTansu::start().await;
    let token = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.never-shown";
    let err = sasl_dialer(OAuthBearer::with_static_token(token))
        .dial(&tansu.addr)
        .await
        .unwrap_err();
    assert_sasl_code(&err, ErrorCode::SASL_AUTHENTICATION_FAILED);
    for shown in [format!("{err}"), format!("{err:?}")] {
        assert!(!shown.contains("never-shown"), "{shown}");
    }
}

#[tokio::test]
async fn mechanisms_the_broker_lacks_fail_typed() {
    // tansu with --authentication closes the connection instead of answering
    // UNSUPPORTED_SASL_MECHANISM; the client says what that most likely means.
    let tansu = AuthTansu::start().await;
    for mech in [
        Arc::new(Plain::new("alice", "alice-secret")) as Arc<dyn Mechanism>,
        Arc::new(UnknownMech),
    ] {
        let name = mech.name();
        let err = Dialer::builder()
            .sasl_shared(mech)
            .build()
            .dial(&tansu.addr)
            .await
            .unwrap_err();
        match &err {
            Error::Sasl {
                code: None,
                message,
                ..
            } => {
                assert!(message.contains("not enabled"), "{err}")
            }
            other => panic!("{name}: {other:?}"),
        }
        assert!(!format!("{err:?}").contains("alice-secret"));
    }
    // The shared tansu (no --authentication) answers the handshake with the error code.
    let err = sasl_dialer(Plain::new("alice", "alice-secret"))
        .dial(&integration_tests::tansu())
        .await
        .unwrap_err();
    assert_sasl_code(&err, ErrorCode::UNSUPPORTED_SASL_MECHANISM);
}

/// A mechanism no broker offers, to see the handshake refuse it.
#[derive(Debug)]
struct UnknownMech;

impl Mechanism for UnknownMech {
    fn name(&self) -> &'static str {
        "X-NO-SUCH-MECHANISM"
    }
    fn start(
        &self,
        _ctx: &kafkit::sasl::SaslContext,
    ) -> Result<Box<dyn kafkit::sasl::Session>, kafkit::sasl::SaslError> {
        Err(kafkit::sasl::SaslError::InvalidConfig {
            mechanism: "X-NO-SUCH-MECHANISM",
            reason: "test mechanism".into(),
        })
    }
}

#[tokio::test]
async fn secrets_never_appear_in_debug_or_errors() {
    let secret = "s3cr3t-never-shown";
    let dialers = [
        sasl_dialer(Plain::new("u", secret)),
        sasl_dialer(Scram::new(ScramHash::Sha256, "u", secret)),
        sasl_dialer(Scram::new(ScramHash::Sha512, "u", secret)),
        sasl_dialer(OAuthBearer::with_static_token(secret)),
    ];
    for d in &dialers {
        let shown = format!("{d:?} {:?}", d.sasl_mechanism());
        assert!(!shown.contains(secret), "{shown}");
    }
    // Failed exchanges against a broker: no error holds the secret.
    let tansu = AuthTansu::start().await;
    for d in &dialers {
        let err = d.dial(&tansu.addr).await.unwrap_err();
        for shown in [format!("{err}"), format!("{err:?}")] {
            assert!(!shown.contains(secret), "{shown}");
        }
    }
    // TLS: the client key is shown neither by the config nor by its builder.
    let pki = Pki::new();
    let key_line = pki.client_key_pem.lines().nth(1).unwrap().to_owned();
    let builder = TlsConfig::builder()
        .ca_pem(pki.ca_pem.clone())
        .client_cert_pem(pki.client_cert_pem.clone(), pki.client_key_pem.clone());
    assert!(!format!("{builder:?}").contains(&key_line));
    let tls = builder.build().unwrap();
    let d = Dialer::builder()
        .tls(tls)
        .sasl(Plain::new("u", secret))
        .build();
    let shown = format!("{d:?}");
    assert!(
        !shown.contains(&key_line) && !shown.contains(secret),
        "{shown}"
    );
}

/// A tracing subscriber that keeps every event's and span's fields as text, at every level.
#[derive(Clone, Default)]
struct Capture(Arc<std::sync::Mutex<String>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        span.record(&mut Fields(&mut self.0.lock().unwrap()));
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        values.record(&mut Fields(&mut self.0.lock().unwrap()));
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut out = self.0.lock().unwrap();
        out.push('\n');
        event.record(&mut Fields(&mut out));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test]
async fn secrets_never_appear_in_logs() {
    // The test runtime is single-threaded, so the client's tasks log to this subscriber too.
    let capture = Capture::default();
    let _guard = integration_tests::scoped_subscriber(capture.clone());
    let secret = "l0g-s3cr3t-never-shown";
    let tansu = AuthTansu::start().await;
    for d in [
        sasl_dialer(Scram::new(ScramHash::Sha256, "u", secret)),
        sasl_dialer(Scram::new(ScramHash::Sha512, "u", secret)),
        sasl_dialer(OAuthBearer::with_static_token(secret)),
        sasl_dialer(Plain::new("u", secret)),
    ] {
        assert!(d.dial(&tansu.addr).await.is_err());
    }
    let logged = capture.0.lock().unwrap().clone();
    // The capture works (the client logs its closes at debug level) and holds no secret.
    assert!(logged.contains("connection closed"), "{logged}");
    assert!(!logged.contains(secret), "{logged}");
}

// ---------------------------------------------------------------------------------------------
// TLS

/// A CA, a server certificate for `localhost`/127.0.0.1 signed by it, and a client certificate
/// signed by it, all PEM.
struct Pki {
    ca_pem: String,
    server_cert_pem: String,
    server_key_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
}

impl Pki {
    fn new() -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kafkit test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let server_key = KeyPair::generate().unwrap();
        let server = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap()
            .signed_by(&server_key, &issuer)
            .unwrap();
        let client_key = KeyPair::generate().unwrap();
        let client = CertificateParams::new(vec!["kafkit".to_owned()])
            .unwrap()
            .signed_by(&client_key, &issuer)
            .unwrap();
        Pki {
            ca_pem: ca.pem(),
            server_cert_pem: server.pem(),
            server_key_pem: server_key.serialize_pem(),
            client_cert_pem: client.pem(),
            client_key_pem: client_key.serialize_pem(),
        }
    }

    fn server_config(&self, require_client_cert: bool) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs = vec![CertificateDer::from_pem_slice(self.server_cert_pem.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(self.server_key_pem.as_bytes()).unwrap();
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = if require_client_cert {
            let mut roots = RootCertStore::empty();
            roots
                .add(CertificateDer::from_pem_slice(self.ca_pem.as_bytes()).unwrap())
                .unwrap();
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        } else {
            builder.with_no_client_auth()
        };
        Arc::new(builder.with_single_cert(certs, key).unwrap())
    }
}

/// A TLS-terminating relay to `upstream` (the shared tansu); returns its port. Runs until the
/// test's runtime ends.
async fn tls_relay(config: Arc<ServerConfig>, upstream: String) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = TlsAcceptor::from(config);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut up) = TcpStream::connect(&upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            });
        }
    });
    port
}

#[tokio::test]
async fn tls_with_the_ca_given_connects_and_without_it_fails_verification() {
    let pki = Pki::new();
    let port = tls_relay(pki.server_config(false), integration_tests::tansu()).await;
    tls_shared::ca_given_connects_and_others_fail_verification(port, &pki.ca_pem).await;
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let pki = Pki::new();
    let port = tls_relay(pki.server_config(true), integration_tests::tansu()).await;
    tls_shared::mutual_tls_needs_the_client_certificate(
        &format!("localhost:{port}"),
        &pki.ca_pem,
        &pki.client_cert_pem,
        &pki.client_key_pem,
    )
    .await;
}

#[tokio::test]
async fn tls_dialer_on_a_plaintext_listener_says_so() {
    let pki = Pki::new();
    tls_shared::tls_dialer_on_a_plaintext_listener_says_so(
        integration_tests::BrokerKind::Tansu,
        &integration_tests::tansu(),
        &pki.ca_pem,
    )
    .await;
}

#[tokio::test]
async fn plaintext_dialer_on_a_tls_listener_says_so() {
    let pki = Pki::new();
    let port = tls_relay(pki.server_config(false), integration_tests::tansu()).await;
    tls_shared::plaintext_dialer_on_a_tls_listener_says_so(&format!("127.0.0.1:{port}")).await;
}
