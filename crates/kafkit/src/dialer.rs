//! [`Dialer`]: opens [`Conn`]s to brokers.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kafkit_pagebuf::SizeClassPool;
use kafkit_sasl::Mechanism;
use tokio::net::TcpStream;

use crate::conn::Conn;
use crate::conn::metadata::Broker;
use crate::conn::{Core, CoreConfig};
use crate::error::TlsErrorKind;
use crate::error::{CloseCause, Error, Result};
use crate::tls::TlsConfig;

/// Idle time before the first TCP keep-alive probe of a connection.
const TCP_KEEPALIVE_TIME: std::time::Duration = std::time::Duration::from_secs(60);
/// Time between unanswered TCP keep-alive probes (the OS gives up after its probe count).
const TCP_KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// Default [`Dialer::client_id`]: `"kafkit"`.
pub const DEFAULT_CLIENT_ID: &str = "kafkit";
/// Default [`Dialer::connect_timeout`]: 10 s (Java's `socket.connection.setup.timeout.ms`).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`Dialer::request_timeout`]: 30 s (Java's `request.timeout.ms`).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default [`Dialer::max_in_flight_requests_per_connection`]: 5 (Java's default).
pub const DEFAULT_MAX_IN_FLIGHT: usize = 5;
/// The shortest `connect_timeout` and `request_timeout`: 1 ms (shorter spans count as this).
const MIN_TIMEOUT: Duration = Duration::from_millis(1);
/// Default [`Dialer::max_response_size`]: 100 000 000 bytes (librdkafka's
/// `receive.message.max.bytes`).
pub const DEFAULT_MAX_RESPONSE_SIZE: usize = 100_000_000;
/// Default [`Dialer::response_pool_max_bytes`]: 32 MiB per size class (the Java producer's
/// `buffer.memory`).
pub const DEFAULT_RESPONSE_POOL_MAX_BYTES: usize = 32 * 1024 * 1024;
/// The page sizes of the response pool ([`Dialer::response_pool`]): 64 KiB to 16 MiB in steps
/// of 4x, so a frame wastes less than 3/4 of its page. Larger frames are read without the pool.
pub const RESPONSE_POOL_CLASSES: [usize; 5] = [
    64 * 1024,
    256 * 1024,
    1024 * 1024,
    4 * 1024 * 1024,
    16 * 1024 * 1024,
];

/// The response pool of `max_bytes` per class.
fn response_pool(max_bytes: usize) -> SizeClassPool {
    match SizeClassPool::new(&RESPONSE_POOL_CLASSES, max_bytes) {
        Ok(pool) => pool,
        // The classes are a constant, strictly increasing and within MAX_PAGE_SIZE (a unit test
        // builds them): this cannot happen.
        Err(e) => unreachable!("response pool classes: {e}"),
    }
}

/// Opens connections ([`Conn`]) to Kafka brokers, like kafka-go's `Dialer`.
///
/// A `Dialer` is a cheap, cloneable bundle of settings; build one with [`Dialer::builder`] or use
/// [`Dialer::default`]. Dialling connects over TCP (within `connect_timeout`), then negotiates
/// API versions with an ApiVersions request (KIP-35, KIP-511) before returning the connection.
///
/// | setting | default | unit | Java / librdkafka name |
/// |---|---|---|---|
/// | `client_id` | `"kafkit"` | | `client.id` |
/// | `connect_timeout` | 10 s | `Duration` | `socket.connection.setup.timeout.ms` |
/// | `request_timeout` | 30 s | `Duration` | `request.timeout.ms` |
/// | `max_in_flight_requests_per_connection` | 5 | requests | same |
/// | `max_response_size` | 100 000 000 | bytes | `receive.message.max.bytes` |
/// | `response_pool_max_bytes` | 32 MiB per size class | bytes | (none: Java and librdkafka do not pool response buffers) |
/// | `tls` (cargo feature `tls`, `tls-graviola` or `rustls`) | none (plaintext) | | `security.protocol=SSL`, `ssl.*` |
/// | `sasl` | none | | `sasl.mechanism`, `sasl.jaas.config` |
/// | `sasl_max_reauth_interval` | none | `Duration` | (client-side cap; KIP-368) |
/// | `sasl_handshake_max_version` | none (highest both sides have) | version | (none) |
/// | `unstable_api_versions` | `false` | | `unstable.api.versions.enable` |
///
/// With `tls`, the TCP connection is wrapped in TLS before anything else; with `sasl`, the
/// connection authenticates right after the ApiVersions exchange (SaslHandshake, then
/// SaslAuthenticate; KIP-43, KIP-152) and re-authenticates before the session lifetime the
/// broker granted runs out (KIP-368). All of it counts against `connect_timeout`.
/// `Debug` never shows credentials or key material.
#[derive(Clone)]
pub struct Dialer {
    client_id: String,
    connect_timeout: Duration,
    request_timeout: Duration,
    max_in_flight: usize,
    max_response_size: usize,
    /// Shared by every clone of the dialer, so by every connection of a `Transport`.
    response_pool: SizeClassPool,
    tls: Option<TlsConfig>,
    sasl: Option<Arc<dyn Mechanism>>,
    sasl_max_reauth_interval: Option<Duration>,
    sasl_handshake_max_version: Option<i16>,
    unstable_api_versions: bool,
    /// Connections set up so far, by every clone (Java's `connection-creation-total`).
    connections_created: Arc<std::sync::atomic::AtomicU64>,
}

impl fmt::Debug for Dialer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The mechanism's own Debug redacts its secrets (kafkit-sasl's contract).
        f.debug_struct("Dialer")
            .field("client_id", &self.client_id)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("max_in_flight", &self.max_in_flight)
            .field("max_response_size", &self.max_response_size)
            .field("response_pool", &self.response_pool)
            .field("tls", &self.tls)
            .field("sasl", &self.sasl)
            .field("sasl_max_reauth_interval", &self.sasl_max_reauth_interval)
            .field(
                "sasl_handshake_max_version",
                &self.sasl_handshake_max_version,
            )
            .field("unstable_api_versions", &self.unstable_api_versions)
            .finish()
    }
}

impl Default for Dialer {
    fn default() -> Self {
        Dialer {
            client_id: DEFAULT_CLIENT_ID.to_owned(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_response_size: DEFAULT_MAX_RESPONSE_SIZE,
            response_pool: response_pool(DEFAULT_RESPONSE_POOL_MAX_BYTES),
            tls: None,
            sasl: None,
            sasl_max_reauth_interval: None,
            sasl_handshake_max_version: None,
            unstable_api_versions: false,
            connections_created: Arc::default(),
        }
    }
}

/// Builder of a [`Dialer`]; every setting starts at its documented default.
#[derive(Debug, Clone, Default)]
pub struct DialerBuilder {
    dialer: Dialer,
}

impl DialerBuilder {
    /// The `client_id` sent in every request header (Java: `client.id`).
    pub fn client_id(mut self, client_id: impl Into<String>) -> Self {
        self.dialer.client_id = client_id.into();
        self
    }

    /// The time allowed for TCP connect, TLS, API-version negotiation and SASL together
    /// (Java: `socket.connection.setup.timeout.ms`; default 10 s). Values below 1 ms count as
    /// 1 ms (a zero span could not even poll the connect once); `Duration::MAX` means no limit
    /// in practice (a deadline about 30 years ahead).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.dialer.connect_timeout = timeout.max(MIN_TIMEOUT);
        self
    }

    /// The time a request may wait for its response (Java: `request.timeout.ms`; default
    /// 30 s). Requests that make the broker wait (Fetch [`FetchParams::max_wait`], the Produce
    /// `timeout` of [`Conn::write_multi`]) get that wait added on top. Values below 1 ms count
    /// as 1 ms; `Duration::MAX` means no limit in practice (the sum saturates, and the deadline
    /// is about 30 years ahead).
    ///
    /// [`FetchParams::max_wait`]: crate::FetchParams::max_wait
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.dialer.request_timeout = timeout.max(MIN_TIMEOUT);
        self
    }

    /// The most requests a connection has outstanding at once, of any API; further callers wait
    /// for a slot (Java: `max.in.flight.requests.per.connection`). Values below 1 are treated
    /// as 1. The [`Writer`](crate::Writer)'s setting of the same name counts only its Produce
    /// requests to one broker, which all go on one connection with this limit: what the writer
    /// has in flight per broker is the lower of the two.
    pub fn max_in_flight_requests_per_connection(mut self, n: usize) -> Self {
        self.dialer.max_in_flight = n.max(1);
        self
    }

    /// The largest response frame accepted, in bytes; a larger size prefix closes the connection
    /// with [`crate::CloseCause::InvalidFrameSize`] before anything is allocated for it
    /// (librdkafka: `receive.message.max.bytes`).
    pub fn max_response_size(mut self, bytes: usize) -> Self {
        self.dialer.max_response_size = bytes;
        self
    }

    /// The most memory each size class of the response pool keeps, in bytes (default
    /// [`DEFAULT_RESPONSE_POOL_MAX_BYTES`], 32 MiB; rounded down to whole pages, so 32 MiB is
    /// two 16 MiB pages or 512 of 64 KiB). Response frames of 16 KiB to 16 MiB are read into one
    /// page of the smallest class that holds them ([`RESPONSE_POOL_CLASSES`]: 64 KiB to 16 MiB),
    /// and a Fetch response's records are slices of that page: it returns to the pool when the
    /// last record of the frame drops, and the next large frame reuses it instead of allocating
    /// (and page-faulting) afresh. Beyond the bound a class allocates pages that are freed after
    /// use, so the setting limits the memory kept between uses, never what can be read; the
    /// pool keeps at most 5 x this value, and only as much as the connections have needed at
    /// once. `0` pools nothing. Every connection of the dialer (and of a `Transport` built with
    /// it, and of its clones) shares one pool; calling this makes a new, empty one.
    pub fn response_pool_max_bytes(mut self, bytes: usize) -> Self {
        self.dialer.response_pool = response_pool(bytes);
        self
    }

    /// Connects over TLS with `tls` (Java: `security.protocol=SSL` or `SASL_SSL`). Dialling a
    /// plaintext listener then fails with [`Error::Tls`] ([`TlsErrorKind::NotTls`]) instead of
    /// hanging. Cargo feature `tls`, `tls-graviola` or `rustls`.
    #[cfg(feature = "rustls")]
    pub fn tls(mut self, tls: TlsConfig) -> Self {
        self.dialer.tls = Some(tls);
        self
    }

    /// Authenticates every connection with `mechanism` (from the `kafkit-sasl` crate: PLAIN,
    /// SCRAM-SHA-256/512, OAUTHBEARER, AWS_MSK_IAM; Java: `sasl.mechanism`).
    pub fn sasl(mut self, mechanism: impl Mechanism + 'static) -> Self {
        self.dialer.sasl = Some(Arc::new(mechanism));
        self
    }

    /// As [`DialerBuilder::sasl`], for a mechanism already shared.
    pub fn sasl_shared(mut self, mechanism: Arc<dyn Mechanism>) -> Self {
        self.dialer.sasl = Some(mechanism);
        self
    }

    /// Re-authenticates (KIP-368) at least every `interval`, even when the broker grants a
    /// longer session or none. Without it, the client re-authenticates at 85 % of the
    /// `session_lifetime_ms` the broker returned, and never when that is 0. Values below 1 ms
    /// are treated as 1 ms. Apache Kafka refuses a re-authentication that begins less than a
    /// second after the previous one (ILLEGAL_SASL_STATE), and the connection is then closed
    /// with [`CloseCause::ReauthenticationFailed`](crate::CloseCause::ReauthenticationFailed):
    /// against Kafka keep the interval at a second or more.
    pub fn sasl_max_reauth_interval(mut self, interval: Duration) -> Self {
        self.dialer.sasl_max_reauth_interval = Some(interval.max(Duration::from_millis(1)));
        self
    }

    /// Uses SaslHandshake at most at `version` (KIP-43, KIP-152). `0` makes the connection send
    /// the mechanism's messages as raw size-prefixed tokens instead of SaslAuthenticate
    /// requests, as clients before Kafka 1.0 did; such a connection cannot re-authenticate
    /// (KIP-368 needs SaslAuthenticate). For brokers that mishandle SaslAuthenticate, and to
    /// test the raw framing. Negative values are treated as 0.
    pub fn sasl_handshake_max_version(mut self, version: i16) -> Self {
        self.dialer.sasl_handshake_max_version = Some(version.max(0));
        self
    }

    /// Lets requests use the versions the schemas mark `latestVersionUnstable` (Java:
    /// `unstable.api.versions.enable`; default `false`): an API whose client maximum is its
    /// latest stable version may then go up to the highest generated version (InitProducerId
    /// v6 in Apache Kafka 4.4), where the broker offers it (a broker offers unstable versions
    /// only with its own `unstable.api.versions.enable`). Such versions may still change
    /// incompatibly: for testing against a development broker, not for production.
    pub fn unstable_api_versions(mut self, enable: bool) -> Self {
        self.dialer.unstable_api_versions = enable;
        self
    }

    /// The finished [`Dialer`].
    pub fn build(self) -> Dialer {
        self.dialer
    }
}

impl Dialer {
    /// A builder starting from the defaults.
    pub fn builder() -> DialerBuilder {
        DialerBuilder::default()
    }

    /// The client id sent in request headers.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// The time allowed to set up a connection (TCP, TLS, versions, SASL).
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The time a request waits for its response (plus the broker-side wait it asks for).
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// The client-side cap on the time between SASL re-authentications (KIP-368), if set.
    pub fn sasl_max_reauth_interval(&self) -> Option<Duration> {
        self.sasl_max_reauth_interval
    }

    /// Maximum outstanding requests per connection.
    pub fn max_in_flight_requests_per_connection(&self) -> usize {
        self.max_in_flight
    }

    /// Maximum response frame size, in bytes.
    pub fn max_response_size(&self) -> usize {
        self.max_response_size
    }

    /// The most bytes each size class of the response pool keeps
    /// ([`DialerBuilder::response_pool_max_bytes`]).
    pub fn response_pool_max_bytes(&self) -> usize {
        self.response_pool.max_bytes_per_class()
    }

    /// The pool that response frames of 16 KiB to 16 MiB are read into, shared by every
    /// connection of this dialer: its [`stats`](SizeClassPool::stats) show the pages in use
    /// (held by responses and the records decoded from them), idle, and allocated beyond the
    /// bound.
    pub fn response_pool(&self) -> &SizeClassPool {
        &self.response_pool
    }

    /// The TLS settings, `None` for plaintext. Cargo feature `tls`, `tls-graviola` or `rustls`.
    #[cfg(feature = "rustls")]
    pub fn tls_config(&self) -> Option<&TlsConfig> {
        self.tls.as_ref()
    }

    /// Whether versions marked unstable may be used
    /// ([`DialerBuilder::unstable_api_versions`]).
    pub fn unstable_api_versions(&self) -> bool {
        self.unstable_api_versions
    }

    /// The SASL mechanism, `None` without authentication.
    pub fn sasl_mechanism(&self) -> Option<&Arc<dyn Mechanism>> {
        self.sasl.as_ref()
    }

    /// Connects to the broker at `addr` (`host:port`): TCP, then TLS when configured, then the
    /// ApiVersions exchange, then SASL authentication when configured.
    ///
    /// # Errors
    ///
    /// [`Error::Connect`] when the TCP connection fails; [`Error::Tls`] when the TLS
    /// handshake fails ([`TlsErrorKind::Verification`] for an untrusted certificate,
    /// [`TlsErrorKind::NotTls`] when the listener does not speak TLS) or when a plaintext dial
    /// reaches a TLS listener ([`TlsErrorKind::PlaintextToTls`]); [`Error::Sasl`] when
    /// authentication fails; [`Error::ConnectTimeout`] (naming `addr`) when all of it takes
    /// longer than `connect_timeout`; and the errors of [`Conn::api_versions`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future closes the half-open connection; nothing else is left behind.
    pub async fn dial(&self, addr: &str) -> Result<Conn> {
        self.dial_checked(addr, None).await
    }

    /// Connections this dialer and its clones (so a whole [`crate::Transport`]) set up so far:
    /// TCP, TLS, ApiVersions and SASL done. Java's `connection-creation-total`.
    pub fn connections_created(&self) -> u64 {
        self.connections_created
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// [`Dialer::dial`] for node `expected.1` of cluster `expected.0`: the ApiVersions v5
    /// request names both, and a broker of Apache Kafka 4.4+ that is not that node refuses
    /// (KIP-1242).
    ///
    /// # Errors
    ///
    /// Those of [`Dialer::dial`], and [`Error::RebootstrapRequired`] for a misrouted
    /// connection (closed).
    ///
    /// # Cancel safety
    ///
    /// As [`Dialer::dial`].
    pub(crate) async fn dial_checked(
        &self,
        addr: &str,
        expected: Option<(String, i32)>,
    ) -> Result<Conn> {
        let timeout = self.connect_timeout;
        let deadline = crate::time::deadline_after(timeout);
        let setup = async {
            let stream = connect_tcp(addr).await?;
            let core = self.start_core(addr, stream, deadline).await?;
            let opts = crate::conn::NegotiateOptions {
                unstable: self.unstable_api_versions,
                expected,
            };
            let conn = Conn::negotiate(core, self.client_id.clone(), self.request_timeout, opts)
                .await
                .map_err(tls_refusal)?;
            self.login(&conn).await?;
            Ok(conn)
        };
        match tokio::time::timeout_at(deadline, setup).await {
            Ok(r) => {
                if r.is_ok() {
                    self.connections_created
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                r
            }
            Err(_) => Err(Error::ConnectTimeout {
                addr: addr.to_owned(),
                timeout,
            }),
        }
    }

    /// The connection's I/O tasks over `stream`: plaintext, or TLS after a handshake that
    /// must answer by `deadline`.
    async fn start_core(
        &self,
        addr: &str,
        stream: TcpStream,
        deadline: tokio::time::Instant,
    ) -> Result<Core> {
        let config = CoreConfig {
            max_in_flight: self.max_in_flight,
            max_response_size: self.max_response_size,
            detect_tls_reply: self.tls.is_none(),
            response_pool: Some(self.response_pool.clone()),
        };
        Ok(match &self.tls {
            Some(tls) => {
                let handshake = tls.connect(addr, stream);
                let tls_stream = match tokio::time::timeout_at(deadline, handshake).await {
                    Ok(r) => r?,
                    Err(_) => {
                        return Err(Error::Tls {
                            addr: addr.to_owned(),
                            kind: TlsErrorKind::NotTls,
                            message: format!(
                                "no answer to the TLS ClientHello within {:?}",
                                self.connect_timeout
                            ),
                        });
                    }
                };
                let (rd, wr) = tokio::io::split(tls_stream);
                Core::start_io(rd, wr, addr.to_owned(), config)
            }
            None => {
                let (rd, wr) = stream.into_split();
                Core::start_io(rd, wr, addr.to_owned(), config)
            }
        })
    }

    /// SASL authentication when a mechanism is configured; the connection is closed when it
    /// fails.
    async fn login(&self, conn: &Conn) -> Result<()> {
        if let Some(mech) = &self.sasl {
            let options = crate::conn::sasl::SaslOptions {
                max_reauth_interval: self.sasl_max_reauth_interval,
                handshake_max_version: self.sasl_handshake_max_version,
            };
            if let Err(e) = conn.authenticate(Arc::clone(mech), options).await {
                conn.close();
                return Err(e);
            }
        }
        Ok(())
    }

    /// Finds the leader of `topic`/`partition` by asking the brokers in `bootstrap` (a
    /// comma-separated `host:port` list, tried in order) for metadata.
    ///
    /// # Errors
    ///
    /// The last connection error when no bootstrap broker answers;
    /// [`Error::Broker`] with the topic's or partition's error code (e.g.
    /// `UNKNOWN_TOPIC_OR_PARTITION`, `LEADER_NOT_AVAILABLE`); [`Error::InvalidArgument`] for an
    /// empty bootstrap list.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a connection opened on the way is closed when the future is dropped.
    pub async fn lookup_leader(
        &self,
        bootstrap: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Broker> {
        let mut last_err = None;
        for addr in bootstrap
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
        {
            let conn = match self.dial(addr).await {
                Ok(c) => c,
                Err(e) => {
                    last_err = Some(e);
                    continue;
                }
            };
            let result = conn.metadata(Some(&[topic])).await;
            conn.close();
            match result {
                Ok(md) => return md.leader_of(topic, partition),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| {
            Error::InvalidArgument(format!("empty bootstrap list {bootstrap:?}"))
        }))
    }

    /// Dials the leader of `topic`/`partition` found through `bootstrap` (see
    /// [`Dialer::lookup_leader`]).
    ///
    /// # Errors
    ///
    /// Those of `lookup_leader` and [`Dialer::dial`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a connection opened on the way is closed when the future is dropped.
    pub async fn dial_leader(&self, bootstrap: &str, topic: &str, partition: i32) -> Result<Conn> {
        let leader = self.lookup_leader(bootstrap, topic, partition).await?;
        self.dial(&leader.addr()).await
    }
}

/// A TCP connection to `addr` with `TCP_NODELAY` and keep-alive set.
async fn connect_tcp(addr: &str) -> Result<TcpStream> {
    let connect_error = |source| Error::Connect {
        addr: addr.to_owned(),
        source,
    };
    let stream = TcpStream::connect(addr).await.map_err(connect_error)?;
    stream.set_nodelay(true).map_err(connect_error)?;
    // TCP keep-alive, so a peer that vanished without a FIN or RST (a half-open
    // connection) is found even while no request is waiting on it.
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(TCP_KEEPALIVE_TIME)
        .with_interval(TCP_KEEPALIVE_INTERVAL);
    socket2::SockRef::from(&stream)
        .set_tcp_keepalive(&keepalive)
        .map_err(connect_error)?;
    Ok(stream)
}

/// A failed ApiVersions exchange as the TLS error it is, when it is one: a TLS listener
/// answering plaintext, or a TLS server refusing the client certificate.
fn tls_refusal(e: Error) -> Error {
    match e {
        Error::ConnectionClosed {
            addr,
            cause: CloseCause::TlsRecordReceived,
        } => Error::Tls {
            addr,
            kind: TlsErrorKind::PlaintextToTls,
            message: "the first answer was a TLS record, not a Kafka response".into(),
        },
        // In TLS 1.3 the server checks the client certificate after the client's side of the
        // handshake is done: its refusal arrives as an alert on the first read.
        Error::ConnectionClosed {
            addr,
            cause: CloseCause::Io(io),
        } if crate::tls::is_tls_error(&io) => Error::Tls {
            addr,
            kind: TlsErrorKind::Handshake,
            message: io.to_string(),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CloseCause;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn dialer(connect_timeout_ms: u64) -> Dialer {
        Dialer::builder()
            .connect_timeout(Duration::from_millis(connect_timeout_ms))
            .request_timeout(Duration::from_secs(30))
            .build()
    }

    /// Reads one request frame and returns its correlation id (header v1/v2 layout).
    async fn read_correlation_id(s: &mut tokio::net::TcpStream) -> i32 {
        let size = s.read_i32().await.unwrap();
        let mut body = vec![0u8; usize::try_from(size).unwrap()];
        s.read_exact(&mut body).await.unwrap();
        i32::from_be_bytes([body[4], body[5], body[6], body[7]])
    }

    #[test]
    fn builder_defaults_and_overrides() {
        let d = Dialer::default();
        assert_eq!(d.client_id(), DEFAULT_CLIENT_ID);
        assert_eq!(d.connect_timeout(), Duration::from_secs(10));
        assert_eq!(d.request_timeout(), Duration::from_secs(30));
        assert_eq!(d.sasl_max_reauth_interval(), None);
        assert_eq!(d.max_in_flight_requests_per_connection(), 5);
        assert_eq!(d.max_response_size(), 100_000_000);
        assert_eq!(d.response_pool_max_bytes(), 32 * 1024 * 1024);
        let pages: Vec<usize> = d
            .response_pool()
            .stats()
            .iter()
            .map(|s| s.max_pages)
            .collect();
        assert_eq!(pages, [512, 128, 32, 8, 2]);
        assert_eq!(d.response_pool().largest(), 16 * 1024 * 1024);
        let small = Dialer::builder()
            .response_pool_max_bytes(1024 * 1024)
            .build();
        let pages: Vec<usize> = small
            .response_pool()
            .stats()
            .iter()
            .map(|s| s.max_pages)
            .collect();
        assert_eq!(pages, [16, 4, 1, 0, 0]);
        // Clones (a Transport's connections) share one pool.
        let clone = small.clone();
        {
            use bytes::BufMut;
            let mut buf = clone.response_pool().buffer_for(100_000).unwrap();
            buf.put_u8(1);
            assert_eq!(small.response_pool().stats()[1].in_use, 1);
        }
        assert_eq!(small.response_pool().stats()[1].idle, 1);
        let d = Dialer::builder()
            .client_id("x")
            .max_in_flight_requests_per_connection(0)
            .connect_timeout(Duration::from_millis(1_500))
            .request_timeout(Duration::from_secs(2))
            .sasl_max_reauth_interval(Duration::ZERO)
            .build();
        assert_eq!(d.client_id(), "x");
        assert_eq!(d.connect_timeout(), Duration::from_millis(1_500));
        assert_eq!(d.request_timeout(), Duration::from_secs(2));
        assert_eq!(d.sasl_max_reauth_interval(), Some(Duration::from_millis(1)));
        assert_eq!(d.max_in_flight_requests_per_connection(), 1);
    }

    #[tokio::test]
    async fn refused_connection_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let err = dialer(5_000).dial(&addr).await.unwrap_err();
        assert!(matches!(err, Error::Connect { .. }), "{err:?}");
        assert!(err.is_retriable());
    }

    #[tokio::test]
    async fn silent_peer_times_out_during_negotiation() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink).await;
        });
        let err = dialer(200).dial(&addr).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::ConnectTimeout {
                    addr: ref dialled,
                    timeout
                } if timeout == Duration::from_millis(200) && dialled == &addr
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains(&addr), "{err}");
        server.await.unwrap();
    }

    /// `connect_timeout(Duration::MAX)` must not overflow when added to an instant, and zero
    /// still lets the connect be polled once.
    #[tokio::test]
    async fn huge_and_zero_connect_timeouts_dial_without_panicking() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        // The peer accepts and never answers: with no limit in practice, the dial still waits.
        let d = Dialer::builder().connect_timeout(Duration::MAX).build();
        assert_eq!(d.connect_timeout(), Duration::MAX);
        let waited = tokio::time::timeout(Duration::from_millis(300), d.dial(&addr)).await;
        assert!(
            waited.is_err(),
            "the dial should still be waiting: {waited:?}"
        );
        let zero = Dialer::builder().request_timeout(Duration::ZERO).build();
        assert_eq!(zero.request_timeout(), Duration::from_millis(1));
        let d = Dialer::builder().connect_timeout(Duration::ZERO).build();
        assert_eq!(d.connect_timeout(), Duration::from_millis(1));
        let err = d.dial(&addr).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::ConnectTimeout { addr: ref dialled, timeout }
                    if timeout == Duration::from_millis(1) && dialled == &addr
            ),
            "{err:?}"
        );
        drop(listener);
    }

    #[tokio::test]
    async fn peer_closing_during_negotiation_is_connection_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            read_correlation_id(&mut s).await;
        });
        let err = dialer(5_000).dial(&addr).await.unwrap_err();
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
    }

    /// An HTTP server or proxy at the address is named as such, not as `InvalidFrameSize {
    /// size: 1213486160 }` (the bytes "HTTP" read as a size prefix).
    #[tokio::test]
    async fn an_http_answer_says_the_peer_speaks_http() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            read_correlation_id(&mut s).await;
            s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await
                .unwrap();
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink).await;
        });
        let err = dialer(5_000).dial(&addr).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::ConnectionClosed {
                    cause: CloseCause::HttpReceived,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("answered HTTP"), "{err}");
        assert!(err.to_string().contains(&addr), "{err}");
        assert!(!err.is_retriable());
    }

    /// A new user's walk-through: python's `http.server` answers a Kafka request with an HTML
    /// page only, whose "<!DO" read as a size prefix showed as `InvalidFrameSize { size:
    /// 1008813135 }`.
    #[tokio::test]
    async fn a_text_answer_says_the_peer_is_not_kafka() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            read_correlation_id(&mut s).await;
            s.write_all(b"<!DOCTYPE HTML>\n<html><body>Error</body></html>\n")
                .await
                .unwrap();
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink).await;
        });
        let err = dialer(5_000).dial(&addr).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::ConnectionClosed {
                    cause: CloseCause::TextReceived {
                        prefix: [b'<', b'!', b'D', b'O']
                    },
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("starts with '<!DO'"), "{err}");
        assert!(!err.is_retriable());
    }

    #[tokio::test]
    async fn garbled_answer_is_a_decode_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let cid = read_correlation_id(&mut s).await;
            // Correlation id, error code 0, then an array count far beyond the frame.
            let mut frame = Vec::new();
            frame.extend_from_slice(&14i32.to_be_bytes());
            frame.extend_from_slice(&cid.to_be_bytes());
            frame.extend_from_slice(&0i16.to_be_bytes());
            frame.extend_from_slice(&[0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0]);
            s.write_all(&frame).await.unwrap();
            let mut sink = Vec::new();
            let _ = s.read_to_end(&mut sink).await;
        });
        let err = dialer(5_000).dial(&addr).await.unwrap_err();
        assert!(matches!(err, Error::Decode(_)), "{err:?}");
        assert!(!err.is_retriable());
    }
}
