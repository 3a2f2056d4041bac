//! TLS for broker connections ([`TlsConfig`]), on rustls.
//!
//! The crypto provider is chosen when kafkit is built (`provider`): ring with the cargo feature
//! `tls` (it needs a C compiler), graviola with `tls-graviola` (pure Rust and assembly, no C
//! compiler; x86_64 and aarch64 only), ring when both are on. With `rustls` alone the
//! application's process-wide provider is used (`rustls::crypto::CryptoProvider::install_default`).
//!
//! Verification is always on: the broker's certificate chain must lead to a trusted root (the
//! webpki roots by default, or the CA certificates given in PEM) and name the host that was
//! dialled (SNI and name check use the host part of `host:port`). A client certificate can be
//! presented for mutual TLS (Java: `ssl.keystore.*`).

#[cfg(feature = "rustls")]
use std::fmt;
#[cfg(feature = "rustls")]
use std::sync::Arc;

#[cfg(feature = "rustls")]
use tokio_rustls::TlsConnector;
#[cfg(feature = "rustls")]
use tokio_rustls::rustls::pki_types::pem::PemObject;
#[cfg(feature = "rustls")]
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
#[cfg(feature = "rustls")]
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

use crate::error::Result;
#[cfg(feature = "rustls")]
use crate::error::{Error, TlsErrorKind};

/// TLS settings of a [`crate::Dialer`] (Java: `security.protocol=SSL` / `SASL_SSL`).
///
/// Build one with [`TlsConfig::builder`]. Cloning is cheap (the rustls configuration is shared).
/// `Debug` shows which trust roots and whether a client certificate is set, never key material.
/// Cargo feature `tls` (on by default), `tls-graviola` or `rustls` (see the crate's feature table).
#[cfg(feature = "rustls")]
#[derive(Clone)]
pub struct TlsConfig {
    connector: TlsConnector,
    roots: &'static str,
    client_auth: bool,
    server_name: Option<String>,
}

#[cfg(feature = "rustls")]
impl fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig")
            .field("roots", &self.roots)
            .field("client_auth", &self.client_auth)
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

/// Builder of a [`TlsConfig`].
///
/// Defaults: trust the webpki roots (Mozilla's CA list, compiled in; or the system's with
/// [`TlsConfigBuilder::system_roots`], or a given CA), no client certificate, SNI and certificate
/// name from the dialled host.
#[cfg(feature = "rustls")]
#[derive(Default)]
pub struct TlsConfigBuilder {
    system_roots: bool,
    ca_pem: Option<Vec<u8>>,
    client_cert_pem: Option<Vec<u8>>,
    client_key_pem: Option<Vec<u8>>,
    server_name: Option<String>,
}

#[cfg(feature = "rustls")]
impl fmt::Debug for TlsConfigBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfigBuilder")
            .field("system_roots", &self.system_roots)
            .field("ca_pem", &self.ca_pem.as_ref().map(|_| "<set>"))
            .field(
                "client_cert",
                &self.client_cert_pem.as_ref().map(|_| "<set>"),
            )
            .field(
                "client_key",
                &self.client_key_pem.as_ref().map(|_| "<redacted>"),
            )
            .field("server_name", &self.server_name)
            .finish()
    }
}

#[cfg(feature = "rustls")]
impl TlsConfigBuilder {
    /// Trusts the operating system's root certificates (on Linux the CA bundle found via the
    /// usual OpenSSL locations, `SSL_CERT_FILE` / `SSL_CERT_DIR`) instead of the webpki roots.
    /// [`TlsConfigBuilder::ca_pem`] takes precedence when both are set.
    pub fn system_roots(mut self) -> Self {
        self.system_roots = true;
        self
    }

    /// Trusts only the CA certificates in `pem` (one or more `CERTIFICATE` blocks) instead of the
    /// webpki roots (Java: `ssl.truststore.*`).
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Presents a client certificate for mutual TLS: `cert_chain_pem` holds the certificate
    /// (then its intermediates) as `CERTIFICATE` blocks, `key_pem` its private key (PKCS#8,
    /// PKCS#1 or SEC1 PEM). The key is kept only inside the rustls configuration.
    pub fn client_cert_pem(
        mut self,
        cert_chain_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.client_cert_pem = Some(cert_chain_pem.into());
        self.client_key_pem = Some(key_pem.into());
        self
    }

    /// Uses `name` for SNI and the certificate name check instead of the dialled host (for
    /// brokers reached through an address their certificate does not name).
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// The finished configuration.
    ///
    /// # Errors
    ///
    /// [`Error::Tls`] when the PEM input holds no certificate, cannot be parsed, or the
    /// client key does not match what rustls accepts; or, in a build with the `rustls` feature
    /// and no provider feature, when the application installed no process-wide crypto provider.
    /// The error never contains key bytes.
    pub fn build(self) -> Result<TlsConfig> {
        let provider = provider()?;
        let mut roots = RootCertStore::empty();
        let roots_name = match &self.ca_pem {
            Some(pem) => {
                let certs = parse_certs(pem, "CA")?;
                for c in certs {
                    roots
                        .add(c)
                        .map_err(|e| tls_config_error(format!("CA: {e}")))?;
                }
                "ca_pem"
            }
            None if self.system_roots => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _ignored) = roots.add_parsable_certificates(found.certs);
                if added == 0 {
                    return Err(tls_config_error(format!(
                        "no usable system root certificate found ({} errors while loading)",
                        found.errors.len()
                    )));
                }
                "system"
            }
            None => {
                roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                "webpki"
            }
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_config_error(e.to_string()))?
            .with_root_certificates(roots);
        let client_auth = self.client_cert_pem.is_some();
        let config = match (self.client_cert_pem, self.client_key_pem) {
            (Some(cert), Some(key)) => {
                let chain = parse_certs(&cert, "client certificate")?;
                let key = PrivateKeyDer::from_pem_slice(&key).map_err(|_| {
                    tls_config_error("client key: no readable private key in the PEM".into())
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    tls_config_error(format!("client certificate or key rejected: {e}"))
                })?
            }
            _ => builder.with_no_client_auth(),
        };
        Ok(TlsConfig {
            connector: TlsConnector::from(Arc::new(config)),
            roots: roots_name,
            client_auth,
            server_name: self.server_name,
        })
    }
}

/// The rustls crypto provider of this build: ring (`tls`, which wins when both are on), else
/// graviola (`tls-graviola`), else the one the application installed for the process.
#[cfg(feature = "rustls")]
fn provider() -> Result<Arc<rustls::crypto::CryptoProvider>> {
    // rustls 0.23.48 and later deprecate their built-in providers for the `rustls-ring` crate
    // of rustls 0.24 (not released yet): a newer rustls in an application's lock file must
    // not turn this into a warning in its build.
    #[cfg(feature = "tls")]
    #[allow(deprecated)]
    let built_in = Some(rustls::crypto::ring::default_provider());
    #[cfg(all(feature = "tls-graviola", not(feature = "tls")))]
    let built_in = {
        // graviola asserts its CPU features on first use: a panic inside a handshake otherwise.
        if !graviola::util::is_cpu_supported() {
            return Err(tls_config_error(
                "this CPU lacks the instructions graviola needs (x86_64: AES-NI, PCLMULQDQ, \
                 AVX2, BMI1, ADX; aarch64: AES, SHA2, PMULL, NEON): build kafkit with `tls` \
                 (ring), or with `rustls` and a provider installed by the application"
                    .into(),
            ));
        }
        Some(rustls_graviola::default_provider())
    };
    #[cfg(not(any(feature = "tls", feature = "tls-graviola")))]
    let built_in: Option<rustls::crypto::CryptoProvider> = None;
    match (built_in, rustls::crypto::CryptoProvider::get_default()) {
        (Some(p), _) => Ok(Arc::new(p)),
        (None, Some(p)) => Ok(Arc::clone(p)),
        (None, None) => Err(tls_config_error(
            "no crypto provider: this kafkit is built with neither `tls` (ring) nor \
             `tls-graviola`, and the application installed none \
             (rustls::crypto::CryptoProvider::install_default)"
                .into(),
        )),
    }
}

#[cfg(feature = "rustls")]
fn parse_certs(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| tls_config_error(format!("{what}: bad PEM: {e}")))?;
    if certs.is_empty() {
        return Err(tls_config_error(format!(
            "{what}: no CERTIFICATE in the PEM"
        )));
    }
    Ok(certs)
}

#[cfg(feature = "rustls")]
fn tls_config_error(message: String) -> Error {
    Error::Tls {
        addr: String::new(),
        kind: TlsErrorKind::Config,
        message,
    }
}

#[cfg(feature = "rustls")]
impl TlsConfig {
    /// A builder with the defaults (webpki roots, no client certificate).
    pub fn builder() -> TlsConfigBuilder {
        TlsConfigBuilder::default()
    }

    /// Runs the TLS handshake over `tcp` for the broker at `addr` (`host:port`).
    ///
    /// Errors: [`Error::Tls`] with [`TlsErrorKind::Verification`], [`TlsErrorKind::NotTls`] or
    /// [`TlsErrorKind::Handshake`]; [`Error::InvalidArgument`] when the host is no valid DNS
    /// name or IP address.
    pub(crate) async fn connect(
        &self,
        addr: &str,
        tcp: tokio::net::TcpStream,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let host = match &self.server_name {
            Some(n) => n.as_str(),
            None => host_of(addr),
        };
        let name = ServerName::try_from(host.to_owned()).map_err(|_| {
            Error::InvalidArgument(format!("{host:?} is not a valid TLS server name"))
        })?;
        self.connector
            .connect(name, tcp)
            .await
            .map_err(|e| classify(addr, e))
    }
}

/// The host part of `host:port` (`[v6]:port` gives `v6`).
pub(crate) fn host_of(addr: &str) -> &str {
    if let Some(rest) = addr.strip_prefix('[')
        && let Some(end) = rest.find(']')
    {
        return &rest[..end];
    }
    match addr.rsplit_once(':') {
        Some((h, _)) => h,
        None => addr,
    }
}

#[cfg(feature = "rustls")]
fn classify(addr: &str, e: std::io::Error) -> Error {
    use std::io::ErrorKind;
    let tls_err = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .cloned();
    let kind = match &tls_err {
        Some(rustls::Error::InvalidCertificate(_)) => TlsErrorKind::Verification,
        Some(rustls::Error::InvalidMessage(_))
        | Some(rustls::Error::InappropriateMessage { .. })
        | Some(rustls::Error::InappropriateHandshakeMessage { .. }) => TlsErrorKind::NotTls,
        Some(_) => TlsErrorKind::Handshake,
        None => match e.kind() {
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => {
                TlsErrorKind::NotTls
            }
            // rustls reports bytes that are no TLS record as InvalidData.
            ErrorKind::InvalidData => TlsErrorKind::NotTls,
            _ => TlsErrorKind::Handshake,
        },
    };
    Error::Tls {
        addr: addr.to_owned(),
        kind,
        message: e.to_string(),
    }
}

/// Whether `e` is an error rustls raised (a TLS alert from the peer, a bad record).
#[cfg(feature = "rustls")]
pub(crate) fn is_tls_error(e: &std::io::Error) -> bool {
    e.get_ref()
        .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
}

/// Without the `rustls` feature (which `tls` and `tls-graviola` turn on) no TLS configuration exists: this stands in for it in
/// [`crate::Dialer`], which then always holds `None` and dials plaintext.
#[cfg(not(feature = "rustls"))]
#[derive(Clone, Debug)]
pub(crate) enum TlsConfig {}

#[cfg(not(feature = "rustls"))]
impl TlsConfig {
    /// Never called: there is no value of this type.
    pub(crate) async fn connect(
        &self,
        _addr: &str,
        _tcp: tokio::net::TcpStream,
    ) -> Result<tokio::net::TcpStream> {
        match *self {}
    }
}

/// Without the `rustls` feature no error comes from rustls.
#[cfg(not(feature = "rustls"))]
pub(crate) fn is_tls_error(_: &std::io::Error) -> bool {
    false
}

/// Whether a response's first four bytes look like a TLS record header (content type 20..=23,
/// protocol version 3.x) rather than a Kafka size prefix: the broker is a TLS listener.
pub(crate) fn looks_like_tls_record(prefix: [u8; 4]) -> bool {
    (20..=23).contains(&prefix[0]) && prefix[1] == 3 && prefix[2] <= 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_of_splits_host_and_port() {
        assert_eq!(host_of("broker-1.example.com:9093"), "broker-1.example.com");
        assert_eq!(host_of("127.0.0.1:9093"), "127.0.0.1");
        assert_eq!(host_of("[::1]:9093"), "::1");
        assert_eq!(host_of("nohost"), "nohost");
    }

    #[test]
    fn tls_record_headers_are_recognised() {
        // A fatal alert record (TLS 1.2) and a handshake record.
        assert!(looks_like_tls_record([0x15, 0x03, 0x03, 0x00]));
        assert!(looks_like_tls_record([0x16, 0x03, 0x01, 0x02]));
        // Ordinary Kafka size prefixes.
        assert!(!looks_like_tls_record([0x00, 0x00, 0x01, 0x00]));
        assert!(!looks_like_tls_record([0x15, 0x00, 0x00, 0x00]));
    }

    #[cfg(any(feature = "tls", feature = "tls-graviola"))]
    #[test]
    fn bad_pem_is_a_config_error_without_key_bytes() {
        let err = TlsConfig::builder()
            .ca_pem("not a pem")
            .build()
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Tls {
                    kind: TlsErrorKind::Config,
                    ..
                }
            ),
            "{err:?}"
        );
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let secret_key =
            "-----BEGIN PRIVATE KEY-----\nTOPSECRETKEYMATERIAL\n-----END PRIVATE KEY-----\n";
        let builder = TlsConfig::builder().client_cert_pem(cert.cert.pem(), secret_key);
        assert!(!format!("{builder:?}").contains("TOPSECRET"));
        let err = builder.build().unwrap_err();
        for s in [format!("{err}"), format!("{err:?}")] {
            assert!(!s.contains("TOPSECRET"), "{s}");
        }
    }

    #[cfg(any(feature = "tls", feature = "tls-graviola"))]
    #[test]
    fn system_roots_load_or_say_why_not() {
        match TlsConfig::builder().system_roots().build() {
            Ok(cfg) => assert!(format!("{cfg:?}").contains("\"system\"")),
            Err(e) => assert!(
                matches!(
                    e,
                    Error::Tls {
                        kind: TlsErrorKind::Config,
                        ..
                    }
                ),
                "{e:?}"
            ),
        }
        // A given CA wins over the system store.
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let cfg = TlsConfig::builder()
            .system_roots()
            .ca_pem(cert.cert.pem())
            .build()
            .unwrap();
        assert!(format!("{cfg:?}").contains("ca_pem"));
    }

    #[cfg(any(feature = "tls", feature = "tls-graviola"))]
    #[test]
    fn debug_never_shows_the_client_key() {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let key_pem = cert.signing_key.serialize_pem();
        let cfg = TlsConfig::builder()
            .ca_pem(cert.cert.pem())
            .client_cert_pem(cert.cert.pem(), key_pem.clone())
            .build()
            .unwrap();
        let shown = format!("{cfg:?}");
        let body: String = key_pem.lines().nth(1).unwrap().to_owned();
        assert!(!shown.contains(&body), "{shown}");
        assert!(shown.contains("client_auth: true"), "{shown}");
    }

    /// A TLS server for `cert` on the graviola provider (ring is not in a `tls-graviola` build).
    #[cfg(all(feature = "tls-graviola", not(feature = "tls")))]
    fn graviola_acceptor(cert: &rcgen::CertifiedKey<rcgen::KeyPair>) -> tokio_rustls::TlsAcceptor {
        let key =
            PrivateKeyDer::from_pem_slice(cert.signing_key.serialize_pem().as_bytes()).unwrap();
        let provider = Arc::new(rustls_graviola::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.cert.der().clone()], key)
            .unwrap();
        tokio_rustls::TlsAcceptor::from(Arc::new(server))
    }

    /// The graviola provider (the no-C build's TLS) completes a handshake, verifying the
    /// server's certificate against a given CA, carries bytes both ways, and reports a
    /// certificate for another name as a verification error.
    #[cfg(all(feature = "tls-graviola", not(feature = "tls")))]
    #[tokio::test]
    async fn graviola_handshakes_and_verifies() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let acceptor = graviola_acceptor(&cert);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = tokio::spawn(async move {
            for _ in 0..2 {
                let (tcp, _) = listener.accept().await.unwrap();
                // The second client gives up on the certificate: this accept fails.
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    let mut buf = [0u8; 4];
                    tls.read_exact(&mut buf).await.unwrap();
                    tls.write_all(&buf).await.unwrap();
                    tls.shutdown().await.unwrap();
                }
            }
        });
        let builder = || TlsConfig::builder().ca_pem(cert.cert.pem());
        let cfg = builder().server_name("localhost").build().unwrap();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut tls = cfg.connect(&addr.to_string(), tcp).await.unwrap();
        tls.write_all(b"ping").await.unwrap();
        let mut back = [0u8; 4];
        tls.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"ping");

        let other = builder().server_name("elsewhere").build().unwrap();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let err = other.connect(&addr.to_string(), tcp).await.unwrap_err();
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
        served.await.unwrap();
    }
}
