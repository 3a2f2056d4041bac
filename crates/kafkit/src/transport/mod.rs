//! [`Transport`]: pooled connections to every broker of a cluster, a metadata cache, and
//! `round_trip`, which sends any supported request where it belongs and retries what can be
//! retried (like kafka-go's `Transport` and the Java client's `NetworkClient` +
//! `Metadata`).
//!
//! Layout: `pool.rs` (connections per broker per [`ConnKind`]), `cache.rs` (metadata cache),
//! `bootstrap.rs` (staggered bootstrap dialling), `retry.rs` (KIP-580 backoff, deadlines),
//! `meta.rs` (throttle time and whole-request error of any response), `route.rs` (the
//! [`Routed`] trait and the simple routes), `split*.rs` (requests split across brokers and
//! merged back).

mod bootstrap;
mod cache;
mod meta;
mod pool;
mod retry;
mod route;
pub(crate) mod split;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kafkit_protocol::messages::{FindCoordinatorRequest, MetadataRequest, metadata_request};
use kafkit_protocol::{ApiKey, ErrorCode, Request, Response};
use tokio::time::Instant;

use crate::conn::Conn;
use crate::conn::metadata::Metadata;
use crate::dialer::Dialer;
use crate::error::{Error, Result};
use crate::ops::meter;
use crate::ops::topics::is_valid_topic_name;
use crate::time::millis;

pub(crate) use self::cache::LeaderHint;
pub(crate) use self::retry::{Backoff, RetryClock};
pub use self::route::Routed;
pub(crate) use self::route::{Route, SendOptions};

use self::cache::MetadataCache;
use self::pool::Pool;

/// Default [`TransportBuilder::metadata_max_age`]: 5 min (Java `metadata.max.age.ms`).
pub const DEFAULT_METADATA_MAX_AGE: Duration = Duration::from_secs(300);
/// Default [`TransportBuilder::connections_max_idle`]: 9 min (Java `connections.max.idle.ms`).
pub const DEFAULT_CONNECTIONS_MAX_IDLE: Duration = Duration::from_secs(540);
/// Default [`TransportBuilder::retry_backoff`]: 100 ms (Java `retry.backoff.ms`).
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_millis(100);
/// Default [`TransportBuilder::retry_backoff_max`]: 1 s (Java `retry.backoff.max.ms`, KIP-580).
pub const DEFAULT_RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Default [`TransportBuilder::default_api_timeout`]: 60 s (Java `default.api.timeout.ms`).
pub const DEFAULT_API_TIMEOUT: Duration = Duration::from_secs(60);
/// Default [`TransportBuilder::metadata_recovery_rebootstrap_trigger`]: 5 min (Java
/// `metadata.recovery.rebootstrap.trigger.ms`, KIP-1102).
pub const DEFAULT_METADATA_RECOVERY_REBOOTSTRAP_TRIGGER: Duration = Duration::from_secs(300);

/// The shortest time between two WARN events "cannot reach any bootstrap broker" of one
/// transport.
const UNREACHABLE_WARN_EVERY: Duration = Duration::from_secs(30);

/// What the [`Transport`] does when none of the brokers it knows can give it metadata (Java
/// `metadata.recovery.strategy`, KIP-899).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetadataRecoveryStrategy {
    /// Keep trying the known brokers until the operation's deadline; the bootstrap addresses
    /// serve only the first metadata. Broker answers of `REBOOTSTRAP_REQUIRED` are errors, and
    /// connections do not name their cluster and node (no KIP-1242 check).
    None,
    /// Bootstrap again (the default, as in Java 4.x): drop the cached metadata and every
    /// connection, dial the bootstrap addresses (resolving their names anew) and take the
    /// metadata from there. It happens when every known broker failed, when a broker answers
    /// `REBOOTSTRAP_REQUIRED` (Metadata v13, KIP-1102; a misrouted connection's ApiVersions
    /// v5, KIP-1242), and when no metadata could be had for
    /// [`TransportBuilder::metadata_recovery_rebootstrap_trigger`].
    #[default]
    Rebootstrap,
}

/// Which pool a connection comes from. Each broker gets separate connections per kind, so a
/// long Fetch (the broker holds it up to `max_wait`) never delays a Produce, and group
/// heartbeats never queue behind either.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnKind {
    /// Produce requests (and transactional produce).
    Produce,
    /// Fetch requests.
    Fetch,
    /// Group and transaction coordinator traffic (JoinGroup, Heartbeat, OffsetCommit, EndTxn...).
    Group,
    /// Everything else: Metadata, FindCoordinator, admin requests.
    Admin,
}

/// The coordinator kinds of FindCoordinator: its `key_type` 0, 1 and 2.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoordinatorType {
    /// A consumer group's coordinator (key: the `group.id`), key_type 0.
    Group,
    /// A transactional producer's coordinator (key: the `transactional.id`), key_type 1
    /// (KIP-98).
    Transaction,
    /// A share group's coordinator (KIP-932), key_type 2.
    Share,
}

impl CoordinatorType {
    /// The FindCoordinator `key_type` value.
    pub fn key_type(self) -> i8 {
        match self {
            CoordinatorType::Group => 0,
            CoordinatorType::Transaction => 1,
            CoordinatorType::Share => 2,
        }
    }
}

/// Settings of a [`Transport`] (see [`TransportBuilder`] for each one's meaning and default).
#[derive(Debug, Clone)]
struct Config {
    metadata_max_age: Duration,
    max_idle: Duration,
    backoff: Backoff,
    api_timeout_ms: u64,
    recovery: MetadataRecoveryStrategy,
    rebootstrap_trigger: Duration,
    cluster_check: bool,
}

/// A cluster-wide connection manager, like kafka-go's `Transport`: it bootstraps from a list
/// of addresses, keeps a metadata cache, pools connections to every broker (one per broker per
/// [`ConnKind`]), finds coordinators, and sends requests where they belong with
/// [`Transport::round_trip`], retrying retriable failures with exponential backoff until a
/// deadline. Cheap to clone (an `Arc` inside); clones share everything.
///
/// No I/O happens until the first call that needs the cluster. Connections are dialled on
/// demand with the [`Dialer`] given to the builder (TLS, SASL, timeouts).
///
/// ```
/// use kafkit::{ConnKind, CoordinatorType, Transport};
/// use kafkit::protocol::messages::{DescribeClusterRequest, HeartbeatRequest};
///
/// use std::time::Duration;
///
/// let transport = Transport::builder(["127.0.0.1:9092", "127.0.0.1:9093"])
///     .metadata_max_age(Duration::from_secs(60))
///     .retry_backoff(Duration::from_millis(50))
///     .default_api_timeout(Duration::from_secs(10))
///     .build()?;
/// assert_eq!(transport.default_api_timeout(), Duration::from_secs(10));
/// assert!(transport.cached_metadata().is_none(), "no I/O yet");
/// assert!(Transport::builder(Vec::<String>::new()).build().is_err());
///
/// # let run = async {
/// // With a cluster at hand: metadata (cached), a request to any broker, one routed to the
/// // group coordinator (found with FindCoordinator and cached).
/// let md = transport.metadata_for(&["orders"]).await?;
/// println!("{} brokers, controller {}", md.brokers.len(), md.controller_id);
/// let cluster = transport.round_trip(DescribeClusterRequest::default()).await?;
/// let hb = HeartbeatRequest::default().with_group_id("my-group".into());
/// let answer = transport.round_trip(hb).await?;
/// println!("{:?} {}", cluster.cluster_id, answer.error_code);
/// let node = transport.coordinator(CoordinatorType::Group, "my-group").await?;
/// let conn = transport.conn(node, ConnKind::Group).await?;
/// # drop(conn);
/// # Ok::<(), kafkit::Error>(())
/// # };
/// # drop(run);
/// # Ok::<(), kafkit::Error>(())
/// ```
#[derive(Clone)]
pub struct Transport {
    inner: Arc<Inner>,
}

/// A coordinator cache key: the coordinator type and the group / transactional id.
type CoordinatorKey = (CoordinatorType, String);

struct Inner {
    bootstrap: Vec<String>,
    dialer: Dialer,
    config: Config,
    cache: Mutex<MetadataCache>,
    /// Held while a Metadata request is in flight: concurrent refreshes wait for it and use
    /// its answer instead of sending their own.
    refresh_lock: tokio::sync::Mutex<()>,
    pool: Pool,
    coordinators: Mutex<HashMap<CoordinatorKey, i32>>,
    /// Per coordinator key being looked up: held during its FindCoordinator, so concurrent
    /// lookups of one key send one request.
    lookups: Mutex<HashMap<CoordinatorKey, Arc<tokio::sync::Mutex<()>>>>,
    /// Addresses of coordinators learnt from FindCoordinator (`host:port`), for nodes the
    /// metadata does not list.
    coordinator_addrs: Mutex<HashMap<i32, String>>,
    /// Per broker: no request before this instant (KIP-219 throttling).
    throttled_until: Mutex<HashMap<i32, Instant>>,
    /// Per broker: when a connection to it last failed (cleared on success).
    failed_at: Mutex<HashMap<i32, Instant>>,
    /// When "no bootstrap address answers" was last said at WARN (see
    /// `Transport::warn_unreachable`).
    unreachable_warned_at: Mutex<Option<Instant>>,
    reaper_started: AtomicBool,
    next_any: AtomicUsize,
    /// Since when metadata could not be had (cleared by every answer): the KIP-1102 trigger.
    metadata_failing_since: Mutex<Option<Instant>>,
    /// How many times the transport bootstrapped again.
    rebootstraps: AtomicU64,
    /// Set by a rebootstrap: the next Metadata request goes to the bootstrap addresses, not
    /// to the cached brokers (whose addresses may reach another node or cluster).
    bootstrap_next: AtomicBool,
    /// Whether a broker of the cluster offered ApiVersions v5 (Kafka 4.4+): only then do new
    /// connections name their cluster and node (KIP-1242). A broker that offers less answers a
    /// v5 request UNSUPPORTED_VERSION and the ids are dropped anyway, but tansu 0.6 cannot read
    /// a v5 request that carries them and closes the connection (docs/testing.md).
    cluster_checks_ids: AtomicBool,
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("bootstrap", &self.inner.bootstrap)
            .field("dialer", &self.inner.dialer)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.pool.close_all();
    }
}

/// Checks one bootstrap entry: `host:port` with a non-empty host and a port in 1..=65535; no
/// scheme (`http://`, `SASL_SSL://`: Kafka's `bootstrap.servers` takes none), and an IPv6
/// address in brackets (`[::1]:9092`), as Java's `ClientUtils.parseAndValidateAddresses`.
fn check_bootstrap_addr(addr: &str) -> Result<()> {
    let bad = |why: &str| Err(Error::Config(format!("bootstrap address {addr:?} {why}")));
    if addr.contains("://") {
        return bad("has a scheme (expected host:port, e.g. broker-1:9092)");
    }
    let Some((host, port)) = addr.rsplit_once(':') else {
        return bad("has no port (expected host:port)");
    };
    if host.is_empty() || host == "[]" {
        return bad("has no host (expected host:port)");
    }
    let bracketed = host.starts_with('[') && host.ends_with(']');
    if !bracketed && host.contains(':') {
        return bad(
            "is an IPv6 address without brackets (expected [address]:port, e.g. [::1]:9092)",
        );
    }
    if host.contains(['/', ' ', '[', ']']) && !bracketed {
        return bad("has a host that is not a host name nor an address (expected host:port)");
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => bad("has no valid port (1..=65535)"),
    }
}

/// A Metadata request for `topics` (never creating them) at the version `conn` negotiated.
fn metadata_request(conn: &Conn, topics: &[&str]) -> Result<(MetadataRequest, i16)> {
    let version = conn.version_for::<MetadataRequest>(None)?;
    let req = MetadataRequest::default()
        .with_topics(Some(
            topics
                .iter()
                .map(|n| {
                    metadata_request::MetadataRequestTopic::default()
                        .with_name(Some((*n).to_owned()))
                })
                .collect(),
        ))
        // v0 has no "no topics" form (an empty list means all topics); only v4+ has the flag.
        .with_allow_auto_topic_creation(version < 4);
    Ok((req, version))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these short locks; if something did, the data is still
    // plain values, usable as they are.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Builder of a [`Transport`]; every setting starts at its documented default.
///
/// | setting | default | unit | Java / librdkafka name |
/// |---|---|---|---|
/// | `dialer` | `Dialer::default()` | | (client id, `request.timeout.ms`, TLS, SASL...) |
/// | `metadata_max_age` | 5 min | `Duration` | `metadata.max.age.ms` |
/// | `connections_max_idle` | 9 min | `Duration`, at least 1 ms | `connections.max.idle.ms` |
/// | `retry_backoff` | 100 ms | `Duration` | `retry.backoff.ms` |
/// | `retry_backoff_max` | 1 s | `Duration` | `retry.backoff.max.ms` (KIP-580) |
/// | `default_api_timeout` | 60 s | `Duration` | `default.api.timeout.ms` |
/// | `metadata_recovery_strategy` | `Rebootstrap` | [`MetadataRecoveryStrategy`] | `metadata.recovery.strategy` (KIP-899) |
/// | `metadata_recovery_rebootstrap_trigger` | 5 min | `Duration` | `metadata.recovery.rebootstrap.trigger.ms` (KIP-1102) |
/// | `metadata_cluster_check` | `true` | | `metadata.cluster.check.enable` (KIP-1242) |
#[derive(Debug, Clone)]
pub struct TransportBuilder {
    bootstrap: Vec<String>,
    dialer: Dialer,
    metadata_max_age: Duration,
    connections_max_idle: Duration,
    retry_backoff: Duration,
    retry_backoff_max: Duration,
    default_api_timeout: Duration,
    metadata_recovery_strategy: MetadataRecoveryStrategy,
    metadata_recovery_rebootstrap_trigger: Duration,
    metadata_cluster_check: bool,
}

impl TransportBuilder {
    /// The dialer used for every connection (client id, connect and request timeouts, TLS,
    /// SASL). Default: `Dialer::builder().build()`.
    pub fn dialer(mut self, d: Dialer) -> Self {
        self.dialer = d;
        self
    }

    /// The age after which cached metadata is fetched again even without an error (Java
    /// `metadata.max.age.ms`). Default 5 min.
    pub fn metadata_max_age(mut self, age: Duration) -> Self {
        self.metadata_max_age = age;
        self
    }

    /// Pooled connections unused for this long are closed (Java `connections.max.idle.ms`).
    /// Default 9 min; values below 1 ms count as 1 ms. The next use dials again.
    pub fn connections_max_idle(mut self, idle: Duration) -> Self {
        self.connections_max_idle = idle.max(Duration::from_millis(1));
        self
    }

    /// The first delay before a retry (Java `retry.backoff.ms`); it doubles on each further
    /// retry up to `retry_backoff_max`, with ±20 % jitter (KIP-580). Default 100 ms; used in
    /// whole milliseconds.
    pub fn retry_backoff(mut self, backoff: Duration) -> Self {
        self.retry_backoff = backoff;
        self
    }

    /// The largest delay between retries (Java `retry.backoff.max.ms`, KIP-580). Default 1 s.
    pub fn retry_backoff_max(mut self, max: Duration) -> Self {
        self.retry_backoff_max = max;
        self
    }

    /// The deadline of one [`Transport::round_trip`] (and of `metadata`, `coordinator`),
    /// retries included (Java `default.api.timeout.ms`). Default 60 s.
    pub fn default_api_timeout(mut self, timeout: Duration) -> Self {
        self.default_api_timeout = timeout;
        self
    }

    /// What to do when no known broker can give metadata (Java `metadata.recovery.strategy`,
    /// KIP-899). Default [`MetadataRecoveryStrategy::Rebootstrap`].
    pub fn metadata_recovery_strategy(mut self, strategy: MetadataRecoveryStrategy) -> Self {
        self.metadata_recovery_strategy = strategy;
        self
    }

    /// With [`MetadataRecoveryStrategy::Rebootstrap`]: bootstrap again when no metadata could
    /// be had from the known brokers for this long (Java
    /// `metadata.recovery.rebootstrap.trigger.ms`, KIP-1102). Default 5 min.
    pub fn metadata_recovery_rebootstrap_trigger(mut self, trigger: Duration) -> Self {
        self.metadata_recovery_rebootstrap_trigger = trigger;
        self
    }

    /// Whether a connection to a known broker names the cluster id and node id it is meant for
    /// in its ApiVersions v5 request, so that a broker of Apache Kafka 4.4+ that is another node
    /// or in another cluster refuses it with `REBOOTSTRAP_REQUIRED` and the transport
    /// bootstraps again (Java `metadata.cluster.check.enable`, KIP-1242). Default `true`;
    /// ignored with [`MetadataRecoveryStrategy::None`], as in Java.
    pub fn metadata_cluster_check(mut self, enable: bool) -> Self {
        self.metadata_cluster_check = enable;
        self
    }

    /// The finished [`Transport`]; no I/O happens here.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the bootstrap list has no address, or an entry is not
    /// `host:port` with a port in 1..=65535.
    pub fn build(self) -> Result<Transport> {
        let bootstrap: Vec<String> = self
            .bootstrap
            .iter()
            .flat_map(|s| s.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if bootstrap.is_empty() {
            return Err(Error::Config(
                "the bootstrap list has no address (expected host:port)".into(),
            ));
        }
        for addr in &bootstrap {
            check_bootstrap_addr(addr)?;
        }
        Ok(Transport {
            inner: Arc::new(Inner {
                bootstrap,
                dialer: self.dialer,
                config: Config {
                    metadata_max_age: self.metadata_max_age,
                    max_idle: self.connections_max_idle,
                    backoff: Backoff {
                        base_ms: millis(self.retry_backoff),
                        max_ms: millis(self.retry_backoff_max),
                    },
                    api_timeout_ms: millis(self.default_api_timeout),
                    recovery: self.metadata_recovery_strategy,
                    rebootstrap_trigger: self.metadata_recovery_rebootstrap_trigger,
                    cluster_check: self.metadata_cluster_check,
                },
                cache: Mutex::default(),
                refresh_lock: tokio::sync::Mutex::new(()),
                pool: Pool::default(),
                coordinators: Mutex::default(),
                lookups: Mutex::default(),
                coordinator_addrs: Mutex::default(),
                throttled_until: Mutex::default(),
                failed_at: Mutex::default(),
                unreachable_warned_at: Mutex::default(),
                reaper_started: AtomicBool::new(false),
                next_any: AtomicUsize::new(0),
                metadata_failing_since: Mutex::new(None),
                rebootstraps: AtomicU64::new(0),
                bootstrap_next: AtomicBool::new(false),
                cluster_checks_ids: AtomicBool::new(false),
            }),
        })
    }
}

impl Transport {
    /// A builder for a transport that bootstraps from `bootstrap`: `"host:port"` strings (an
    /// entry may also hold a comma-separated list). No I/O happens here.
    pub fn builder<I, S>(bootstrap: I) -> TransportBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        TransportBuilder {
            bootstrap: bootstrap.into_iter().map(Into::into).collect(),
            dialer: Dialer::builder().build(),
            metadata_max_age: DEFAULT_METADATA_MAX_AGE,
            connections_max_idle: DEFAULT_CONNECTIONS_MAX_IDLE,
            retry_backoff: DEFAULT_RETRY_BACKOFF,
            retry_backoff_max: DEFAULT_RETRY_BACKOFF_MAX,
            default_api_timeout: DEFAULT_API_TIMEOUT,
            metadata_recovery_strategy: MetadataRecoveryStrategy::default(),
            metadata_recovery_rebootstrap_trigger: DEFAULT_METADATA_RECOVERY_REBOOTSTRAP_TRIGGER,
            metadata_cluster_check: true,
        }
    }

    /// The dialer's settings (client id, timeouts, TLS, SASL).
    pub fn dialer(&self) -> &Dialer {
        &self.inner.dialer
    }

    /// The bootstrap addresses (`host:port`), as given to the builder.
    pub fn bootstrap(&self) -> &[String] {
        &self.inner.bootstrap
    }

    /// The metadata recovery strategy (KIP-899).
    pub fn metadata_recovery_strategy(&self) -> MetadataRecoveryStrategy {
        self.inner.config.recovery
    }

    /// How many times this transport bootstrapped again (KIP-899, KIP-1102, KIP-1242): for
    /// tests and statistics.
    pub fn rebootstraps(&self) -> u64 {
        self.inner.rebootstraps.load(Ordering::Relaxed)
    }

    /// Bootstraps again (with [`MetadataRecoveryStrategy::Rebootstrap`]; nothing otherwise):
    /// marks the cached metadata stale (it is kept until the new answer replaces it), forgets
    /// coordinators and broker failures and closes every pooled connection
    /// ([`crate::CloseCause::Rebootstrap`]); the next Metadata request goes to the bootstrap
    /// addresses, dialled (and resolved) anew. `why` is logged.
    pub(crate) fn rebootstrap(&self, why: &str) {
        if self.inner.config.recovery != MetadataRecoveryStrategy::Rebootstrap {
            return;
        }
        let cluster = self.cached_metadata().and_then(|md| md.cluster_id.clone());
        tracing::info!(?cluster, bootstrap = ?self.inner.bootstrap, why, "rebootstrapping");
        lock(&self.inner.cache).invalidate();
        self.inner.bootstrap_next.store(true, Ordering::Release);
        lock(&self.inner.coordinators).clear();
        lock(&self.inner.coordinator_addrs).clear();
        lock(&self.inner.failed_at).clear();
        *lock(&self.inner.metadata_failing_since) = None;
        self.inner.pool.close_all_for_rebootstrap();
        self.inner.rebootstraps.fetch_add(1, Ordering::Relaxed);
    }

    /// The cluster and node a connection to `node` is meant for, when the KIP-1242 check
    /// applies: a known node id of the cached metadata's cluster, the check enabled, and the
    /// rebootstrap strategy (Java sends neither with `none`).
    fn expected_node(&self, node: i32) -> Option<(String, i32)> {
        let config = &self.inner.config;
        if node < 0
            || !config.cluster_check
            || config.recovery != MetadataRecoveryStrategy::Rebootstrap
        {
            return None;
        }
        if !self.inner.cluster_checks_ids.load(Ordering::Acquire) {
            return None;
        }
        let cluster = self.cached_metadata()?.cluster_id.clone()?;
        Some((cluster, node))
    }

    /// After a failed dial, with [`MetadataRecoveryStrategy::Rebootstrap`]: when every broker
    /// of the cached metadata failed its last connection ("all last-known brokers appear
    /// unavailable", KIP-899), bootstraps again and fetches metadata from the bootstrap
    /// addresses now (one attempt; a failure is only logged: the caller's retry goes on). For
    /// clients that dial a node without asking for metadata first (the Reader's fetch
    /// connections); nothing happens while some known broker is reachable.
    pub(crate) async fn after_dial_failure(&self) {
        if self.inner.config.recovery != MetadataRecoveryStrategy::Rebootstrap {
            return;
        }
        let Some(md) = self.cached_metadata() else {
            return;
        };
        let all_failed = {
            let failed = lock(&self.inner.failed_at);
            !md.brokers.is_empty() && md.brokers.iter().all(|b| failed.contains_key(&b.node_id))
        };
        if !all_failed {
            return;
        }
        self.rebootstrap("every known broker unreachable (KIP-899)");
        if let Err(e) = self.refresh_once(&[]).await {
            tracing::debug!(error = %e, "metadata from the bootstrap addresses");
        }
    }

    /// Remembers whether the broker `conn` reached offers ApiVersions v5 (see
    /// `Inner::cluster_checks_ids`).
    fn note_versions(&self, conn: &Conn) {
        let v5 = conn
            .broker_versions()
            .get(ApiKey::ApiVersions)
            .is_some_and(|r| r.max >= 5);
        self.inner.cluster_checks_ids.store(v5, Ordering::Release);
    }

    /// The deadline of one round trip (`default_api_timeout`).
    pub fn default_api_timeout(&self) -> Duration {
        Duration::from_millis(self.inner.config.api_timeout_ms)
    }

    // ----- metadata -----------------------------------------------------------------------

    /// Cluster metadata from the cache: brokers, controller, cluster id, and every topic asked
    /// for so far with [`Transport::metadata_for`]. Fetched (one Metadata request, shared by
    /// concurrent callers) when there is none yet, when it is older than
    /// `metadata_max_age`, or after [`Transport::invalidate_metadata`].
    ///
    /// # Errors
    ///
    /// [`Error::DeadlineExceeded`] when no broker (known or bootstrap) answered within
    /// `default_api_timeout`, and non-retriable errors at once (e.g. [`Error::Tls`],
    /// [`Error::Sasl`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops the wait; a refresh, lookup or dial shared
    /// with other callers goes on for them, and the cache and pool stay consistent.
    pub async fn metadata(&self) -> Result<Arc<Metadata>> {
        self.metadata_for(&[]).await
    }

    /// Like [`Transport::metadata`], but makes sure `topics` are in the answer (fetching them
    /// when missing; they stay in the cache and in later refreshes). A topic that does not
    /// exist is present with its error code (`UNKNOWN_TOPIC_OR_PARTITION`), not an `Err`;
    /// topics are never created by this request. A name that is not a legal topic name (1 to
    /// 249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`) is present with
    /// `INVALID_TOPIC_EXCEPTION` without being sent.
    ///
    /// # Errors
    ///
    /// As [`Transport::metadata`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops the wait; a refresh, lookup or dial shared
    /// with other callers goes on for them, and the cache and pool stay consistent.
    pub async fn metadata_for(&self, topics: &[&str]) -> Result<Arc<Metadata>> {
        let mut retry = self.retry("Metadata");
        loop {
            match retry.attempt(self.refresh_once(topics)).await {
                Ok(md) => return Ok(md),
                Err(e) if e.is_retriable() => retry.backoff(e).await?,
                Err(e) => return Err(e),
            }
        }
    }

    /// The cached metadata, without I/O (`None` before the first fetch). It may be stale.
    pub fn cached_metadata(&self) -> Option<Arc<Metadata>> {
        lock(&self.inner.cache).current.clone()
    }

    /// Marks the cached metadata stale: the next [`Transport::metadata`] or
    /// [`Transport::metadata_for`] fetches it again, every topic asked for so far (the TTL is
    /// not waited for). Called by the transport itself when a response carries an error code
    /// for which `ErrorCode::is_invalid_metadata` holds, or `NOT_CONTROLLER`. When only some
    /// topics' partitions erred, [`Transport::invalidate_topics`] refreshes less.
    pub fn invalidate_metadata(&self) {
        lock(&self.inner.cache).invalidate();
    }

    /// Marks the metadata of `topics` stale (e.g. a partition of theirs answered
    /// `NOT_LEADER_OR_FOLLOWER`): the next [`Transport::metadata_for`] that asks for one of
    /// them sends one Metadata request for the topics so marked, and only those, and merges
    /// the answer (with the brokers and controller it lists) into the cache; lookups of other
    /// topics keep using the cache. Topics never asked for are ignored (they are fetched when
    /// asked for).
    pub fn invalidate_topics<'a>(&self, topics: impl IntoIterator<Item = &'a str>) {
        lock(&self.inner.cache).invalidate_topics(topics);
    }

    /// Applies a leader hint to the cache (KIP-951: the `current_leader` and `node_endpoints`
    /// of Produce and Fetch responses that carry `NOT_LEADER_OR_FOLLOWER` or
    /// `FENCED_LEADER_EPOCH`), only when `leader_epoch` is newer than the cached epoch of that
    /// partition. `endpoint`: the new leader's `(host, port)` when the response carried it (it
    /// is added to the brokers, or replaces that node's address). Unknown topics or
    /// partitions, and negative leader ids, are ignored.
    pub fn update_leader(
        &self,
        topic: &str,
        partition: i32,
        leader_id: i32,
        leader_epoch: i32,
        endpoint: Option<(&str, i32)>,
    ) {
        let hint = cache::LeaderHint {
            topic,
            partition,
            leader_id,
            leader_epoch,
        };
        let endpoints: Vec<(i32, &str, i32)> = endpoint
            .map(|(host, port)| (leader_id, host, port))
            .into_iter()
            .collect();
        if self.update_leaders(&[hint], &endpoints) > 0 {
            tracing::debug!(
                topic,
                partition,
                leader_id,
                leader_epoch,
                "leader hint applied"
            );
        }
    }

    /// Applies every KIP-951 leader hint of one response at once (see
    /// [`Transport::update_leader`]): one new cache snapshot, copying only the topics a hint
    /// changes. `endpoints`: `(node id, host, port)` of the response's `node_endpoints`.
    /// Returns how many hints were newer than the cache and applied.
    pub(crate) fn update_leaders(
        &self,
        hints: &[cache::LeaderHint<'_>],
        endpoints: &[(i32, &str, i32)],
    ) -> usize {
        if hints.is_empty() {
            return 0;
        }
        lock(&self.inner.cache).update_leaders(hints, endpoints)
    }

    /// One attempt at a fresh metadata view holding `topics`: from the cache, or by joining
    /// the refresh in flight, or by sending one Metadata request.
    pub(crate) async fn refresh_once(&self, topics: &[&str]) -> Result<Arc<Metadata>> {
        if topics.iter().any(|t| !is_valid_topic_name(t)) {
            // Invalid names are answered here (as a broker would, INVALID_TOPIC_EXCEPTION) and
            // never sent nor remembered: one bad name must not fail every later refresh.
            let valid: Vec<&str> = topics
                .iter()
                .copied()
                .filter(|t| is_valid_topic_name(t))
                .collect();
            let md = self.refresh_valid(&valid).await?;
            let mut md = Metadata::clone(&md);
            for name in topics.iter().filter(|t| !is_valid_topic_name(t)) {
                if md.topic(name).is_none() {
                    md.topics
                        .push(Arc::new(crate::conn::metadata::TopicMetadata {
                            name: (*name).to_owned(),
                            topic_id: kafkit_protocol::Uuid::default(),
                            error_code: ErrorCode::INVALID_TOPIC_EXCEPTION,
                            is_internal: false,
                            partitions: Vec::new(),
                        }));
                }
            }
            return Ok(Arc::new(md));
        }
        self.refresh_valid(topics).await
    }

    /// [`Transport::refresh_once`] for valid topic names.
    async fn refresh_valid(&self, topics: &[&str]) -> Result<Arc<Metadata>> {
        let max_age = self.inner.config.metadata_max_age;
        let generation = {
            let cache = lock(&self.inner.cache);
            if let Some(md) = cache.fresh(max_age, topics) {
                return Ok(md);
            }
            cache.generation
        };
        let _refreshing = self.inner.refresh_lock.lock().await;
        let plan = {
            let cache = lock(&self.inner.cache);
            if cache.generation != generation
                && let Some(md) = cache.fresh(max_age, topics)
            {
                return Ok(md);
            }
            // Every topic asked for so far when the whole answer is old or invalidated; else
            // only the missing and stale topics (MetadataCache::plan).
            cache.plan(max_age, topics)
        };
        let md = self.fetch_metadata(&plan.topics).await?;
        let mut cache = lock(&self.inner.cache);
        // Only names that were fetched successfully join the set every full refresh asks for.
        cache.topics.extend(plan.topics.iter().cloned());
        Ok(cache.store_planned(md, &plan))
    }

    /// Sends one Metadata request for `topics`: to a known broker (those that did not fail
    /// recently first), else through the bootstrap list.
    async fn fetch_metadata(&self, topics: &[String]) -> Result<Metadata> {
        let result = self.fetch_metadata_from_any(topics).await;
        let mut since = lock(&self.inner.metadata_failing_since);
        match &result {
            Ok(md) => {
                *since = None;
                let old = self.cached_metadata().and_then(|m| m.cluster_id.clone());
                if old.is_some() && old != md.cluster_id {
                    tracing::info!(?old, new = ?md.cluster_id, "cluster id changed");
                }
            }
            Err(_) => {
                since.get_or_insert_with(Instant::now);
            }
        }
        result
    }

    /// Whether no metadata could be had for the KIP-1102 trigger span (with the rebootstrap
    /// strategy).
    fn rebootstrap_due(&self) -> bool {
        let config = &self.inner.config;
        config.recovery == MetadataRecoveryStrategy::Rebootstrap
            && lock(&self.inner.metadata_failing_since)
                .is_some_and(|at| at.elapsed() >= config.rebootstrap_trigger)
    }

    /// [`Transport::fetch_metadata`]'s attempt: the known brokers, then (when there are none,
    /// or with the rebootstrap strategy when none answered, KIP-899) the bootstrap addresses.
    async fn fetch_metadata_from_any(&self, topics: &[String]) -> Result<Metadata> {
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        let mut last_err = None;
        if self.rebootstrap_due() {
            self.rebootstrap("no metadata for metadata_recovery_rebootstrap_trigger (KIP-1102)");
        }
        let known = self
            .cached_metadata()
            .filter(|_| !self.inner.bootstrap_next.swap(false, Ordering::AcqRel));
        if let Some(md) = known {
            match self.metadata_from_known(&md, &names).await? {
                KnownBrokers::Answered(md) => return Ok(md),
                KnownBrokers::NoneAnswered(e) => last_err = e,
            }
            if self.inner.config.recovery == MetadataRecoveryStrategy::None
                && let Some(e) = last_err
            {
                // KIP-899 `none`: once brokers are known, the bootstrap addresses are not
                // asked again (an answer that listed no broker leaves none known).
                return Err(e);
            }
            if !self.inner.bootstrap_next.swap(false, Ordering::AcqRel) {
                self.rebootstrap("every known broker failed (KIP-899)");
                self.inner.bootstrap_next.store(false, Ordering::Release);
            }
        }
        // No broker known, or none answered: (re)bootstrap.
        self.metadata_from_bootstrap(&names, last_err).await
    }

    /// Asks the brokers of `md` for metadata in [`Transport::broker_order`] until one answers.
    /// A broker that fails is noted ([`Transport::note_failure`]) and the next one asked; one
    /// whose failure calls for a rebootstrap ends the round.
    ///
    /// Errors: a failure no other broker can help with ([`AfterMetadataError::Fail`]).
    async fn metadata_from_known(&self, md: &Metadata, names: &[&str]) -> Result<KnownBrokers> {
        let mut last_err = None;
        for node in self.broker_order(md) {
            let Some(addr) = md.broker(node).map(crate::conn::metadata::Broker::addr) else {
                continue;
            };
            let e = match self.metadata_from_node(node, &addr, names).await {
                Ok(md) => return Ok(KnownBrokers::Answered(md)),
                Err(e) => e,
            };
            match after_metadata_error(self.inner.config.recovery, &e) {
                AfterMetadataError::Rebootstrap => {
                    // note_failure rebootstraps; go to the bootstrap addresses now.
                    self.note_failure(node, &e);
                    last_err = Some(e);
                    break;
                }
                AfterMetadataError::NextBroker => {
                    self.note_failure(node, &e);
                    last_err = Some(e);
                }
                AfterMetadataError::Fail => return Err(e),
            }
        }
        Ok(KnownBrokers::NoneAnswered(last_err))
    }

    /// One Metadata request for `names` to broker `node` at `addr`, on its Admin connection.
    async fn metadata_from_node(&self, node: i32, addr: &str, names: &[&str]) -> Result<Metadata> {
        let conn = self.conn_at(node, ConnKind::Admin, addr).await?;
        self.wait_throttle(node).await;
        let (req, version) = metadata_request(&conn, names)?;
        let resp = self
            .request_on(node, &conn, &req, version, Duration::ZERO)
            .await?;
        crate::conn::metadata::top_level_error(conn.addr(), &resp)?;
        Ok(Metadata::from(resp))
    }

    /// Asks the first bootstrap address that can be dialled for metadata, and keeps its
    /// connection where it can serve again ([`Transport::keep_bootstrap_conn`]).
    ///
    /// Errors: the metadata request's; when no bootstrap address can be dialled, `last_err`
    /// (the known brokers' last failure) if the dial failure is retriable, else the dial's.
    async fn metadata_from_bootstrap(
        &self,
        names: &[&str],
        last_err: Option<Error>,
    ) -> Result<Metadata> {
        let (addr, conn) =
            match bootstrap::dial_first(&self.inner.dialer, &self.inner.bootstrap).await {
                Ok(c) => c,
                Err(e) => {
                    self.warn_unreachable(&e);
                    return Err(last_err.filter(|_| e.is_retriable()).unwrap_or(e));
                }
            };
        self.note_versions(&conn);
        let result = conn.metadata(Some(names)).await;
        self.keep_bootstrap_conn(&addr, conn, &result);
        result
    }

    /// Keeps the bootstrap connection `conn` (dialled to `addr`) as the Admin connection of the
    /// broker it reached, when that broker advertises the same address in `result` and has no
    /// pooled Admin connection; otherwise closes it and counts its requests under -1.
    fn keep_bootstrap_conn(&self, addr: &str, conn: Conn, result: &Result<Metadata>) {
        let node = result
            .as_ref()
            .ok()
            .and_then(|md| md.brokers.iter().find(|b| b.addr() == addr))
            .map(|b| b.node_id);
        match node {
            Some(n)
                if self
                    .inner
                    .pool
                    .get(n, ConnKind::Admin, self.inner.config.max_idle)
                    .is_none() =>
            {
                self.inner.pool.put(n, ConnKind::Admin, conn);
            }
            _ => {
                conn.close();
                self.inner.pool.retire(node.unwrap_or(-1), &conn);
            }
        }
    }

    /// Says at WARN that no bootstrap address could be dialled, at most once per
    /// [`UNREACHABLE_WARN_EVERY`] per transport: the callers retry every backoff (a `Writer`
    /// for up to its delivery timeout, a group member for as long as it runs), and an
    /// application that installed a subscriber should learn why it waits without a line per
    /// retry. Each failed address is also logged at DEBUG (`bootstrap address failed`).
    fn warn_unreachable(&self, e: &Error) {
        {
            let mut at = lock(&self.inner.unreachable_warned_at);
            if at.is_some_and(|t| t.elapsed() < UNREACHABLE_WARN_EVERY) {
                return;
            }
            *at = Some(Instant::now());
        }
        tracing::warn!(
            bootstrap = ?self.inner.bootstrap,
            error = %e,
            "cannot reach any bootstrap broker; still trying (said at most every {}s)",
            UNREACHABLE_WARN_EVERY.as_secs()
        );
    }

    /// Node ids of `md`'s brokers in the order to try them (like the Java client's "least
    /// loaded node"): brokers with an open Admin connection, then the others, each group in
    /// rotating order; brokers whose connection failed recently go last (oldest failure
    /// first).
    fn broker_order(&self, md: &Metadata) -> Vec<i32> {
        let failed = lock(&self.inner.failed_at).clone();
        let n = md.brokers.len().max(1);
        let start = self.inner.next_any.fetch_add(1, Ordering::Relaxed) % n;
        let mut connected = Vec::with_capacity(md.brokers.len());
        let mut ok = Vec::with_capacity(md.brokers.len());
        let mut bad = Vec::new();
        for i in 0..md.brokers.len() {
            let id = md.brokers[(start + i) % n].node_id;
            match failed.get(&id) {
                Some(at) => bad.push((*at, id)),
                None if self.inner.pool.is_connected(id, ConnKind::Admin) => connected.push(id),
                None => ok.push(id),
            }
        }
        bad.sort();
        connected.extend(ok);
        connected.extend(bad.into_iter().map(|(_, id)| id));
        connected
    }

    /// A broker to send an any-broker request to (see [`Transport::broker_order`]): one
    /// attempt at fresh metadata, no retry (the caller's retry loop owns the deadline).
    async fn any_node_once(&self) -> Result<i32> {
        let md = self.refresh_once(&[]).await?;
        self.broker_order(&md)
            .first()
            .copied()
            .ok_or_else(|| Error::Protocol("the Metadata answer lists no broker".into()))
    }

    /// The controller from metadata (`controller_id`), or any broker when it is unknown or
    /// not listed (with KRaft, brokers forward controller requests, KIP-590). One attempt.
    async fn controller_node_once(&self) -> Result<i32> {
        let md = self.refresh_once(&[]).await?;
        if md.controller_id >= 0 && md.broker(md.controller_id).is_some() {
            return Ok(md.controller_id);
        }
        self.broker_order(&md)
            .first()
            .copied()
            .ok_or_else(|| Error::Protocol("the Metadata answer lists no broker".into()))
    }

    // ----- connections --------------------------------------------------------------------

    /// A pooled connection to broker `node_id` of kind `kind`, dialled on demand with the
    /// address from metadata (fetched first when there is none). A closed or idle connection
    /// is replaced. Concurrent callers share one dial.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownBroker`] when the node is not in metadata (nor a known
    /// coordinator); the errors of [`Dialer::dial`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops the wait; a refresh, lookup or dial shared
    /// with other callers goes on for them, and the cache and pool stay consistent.
    pub async fn conn(&self, node_id: i32, kind: ConnKind) -> Result<Conn> {
        if let Some(c) = self
            .inner
            .pool
            .get(node_id, kind, self.inner.config.max_idle)
        {
            return Ok(c);
        }
        let addr = match self.addr_of(node_id) {
            Some(a) => a,
            None => {
                self.metadata().await?;
                self.addr_of(node_id)
                    .ok_or(Error::UnknownBroker { node_id })?
            }
        };
        self.conn_at(node_id, kind, &addr).await
    }

    /// [`Transport::conn`] without retries: one attempt at fresh metadata when the node's
    /// address is not known, so that a failure reaches the caller's retry loop with its cause.
    pub(crate) async fn conn_once(&self, node_id: i32, kind: ConnKind) -> Result<Conn> {
        if let Some(c) = self
            .inner
            .pool
            .get(node_id, kind, self.inner.config.max_idle)
        {
            return Ok(c);
        }
        let addr = match self.addr_of(node_id) {
            Some(a) => a,
            None => {
                self.refresh_once(&[]).await?;
                self.addr_of(node_id)
                    .ok_or(Error::UnknownBroker { node_id })?
            }
        };
        self.conn_at(node_id, kind, &addr).await
    }

    /// A new connection to broker `node_id` that is **not pooled**: the caller owns it (dropping
    /// its last handle closes it), and no other caller of this transport sends on it. For a
    /// client that needs a connection of its own, such as the Reader's fetch
    /// connection per broker: a broker handles one request per connection at a time, so a
    /// long-poll Fetch on a shared connection would sit in front of every other request. The
    /// address comes from metadata (fetched first when the node is not in it). Its requests
    /// count in [`Transport::requests_sent`] once it is handed back with
    /// `retire_unpooled` (the Reader does so when it closes one).
    ///
    /// # Errors
    ///
    /// [`Error::UnknownBroker`] when the node is not in metadata (nor a known coordinator); the
    /// errors of [`Dialer::dial`] (a connection failure also marks the broker as failed, as for
    /// pooled connections).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future abandons the dial; nothing is left behind.
    pub async fn dial_unpooled(&self, node_id: i32) -> Result<Conn> {
        let addr = match self.addr_of(node_id) {
            Some(a) => a,
            None => {
                self.refresh_once(&[]).await?;
                self.addr_of(node_id)
                    .ok_or(Error::UnknownBroker { node_id })?
            }
        };
        match self
            .inner
            .dialer
            .dial_checked(&addr, self.expected_node(node_id))
            .await
        {
            Ok(c) => {
                tracing::debug!(node = node_id, addr, "connected (unpooled)");
                c.meter().set_node(node_id);
                self.note_versions(&c);
                lock(&self.inner.failed_at).remove(&node_id);
                Ok(c)
            }
            Err(e) => {
                meter::connect_error(node_id);
                self.note_failure(node_id, &e);
                Err(e)
            }
        }
    }

    /// Adds the request counts of an unpooled connection to broker `node` (see
    /// [`Transport::dial_unpooled`]) to [`Transport::requests_sent`]; call it once, when the
    /// connection is given up.
    #[allow(dead_code)] // the Reader's fetch connections (next commits)
    pub(crate) fn retire_unpooled(&self, node: i32, conn: &Conn) {
        self.inner.pool.retire(node, conn);
    }

    /// The address of `node`: from cached metadata, else from FindCoordinator answers.
    fn addr_of(&self, node: i32) -> Option<String> {
        let from_md = self
            .cached_metadata()
            .and_then(|md| md.broker(node).map(crate::conn::metadata::Broker::addr));
        from_md.or_else(|| lock(&self.inner.coordinator_addrs).get(&node).cloned())
    }

    /// The pooled connection `(node, kind)`, dialling `addr` when there is none.
    async fn conn_at(&self, node: i32, kind: ConnKind, addr: &str) -> Result<Conn> {
        self.start_reaper();
        let pool = &self.inner.pool;
        let max_idle = self.inner.config.max_idle;
        if let Some(c) = pool.get(node, kind, max_idle) {
            return Ok(c);
        }
        let dial_lock = pool.dial_lock(node, kind);
        let _dialling = dial_lock.lock().await;
        if let Some(c) = pool.get(node, kind, max_idle) {
            return Ok(c);
        }
        match self
            .inner
            .dialer
            .dial_checked(addr, self.expected_node(node))
            .await
        {
            Ok(c) => {
                tracing::debug!(node, ?kind, addr, "connected");
                self.note_versions(&c);
                lock(&self.inner.failed_at).remove(&node);
                pool.put(node, kind, c.clone());
                Ok(c)
            }
            Err(e) => {
                meter::connect_error(node);
                self.note_failure(node, &e);
                Err(e)
            }
        }
    }

    /// Remembers a connection-level failure of `node` (so other brokers are preferred for
    /// any-broker requests for a while) and drops its dead connections. A request timeout
    /// counts: the connection it timed out on was closed as half-open
    /// (`CloseCause::RequestTimedOut`). The Writer reports its own failures here too.
    pub(crate) fn note_failure(&self, node: i32, e: &Error) {
        if let Error::RebootstrapRequired { operation, .. } = e {
            // KIP-1242 (a misrouted connection) or KIP-1102 (the cluster asked for it).
            self.rebootstrap(operation);
            return;
        }
        if matches!(
            e,
            Error::Connect { .. }
                | Error::ConnectTimeout { .. }
                | Error::ConnectionClosed { .. }
                | Error::Io(_)
                | Error::Timeout { .. }
        ) {
            lock(&self.inner.failed_at).insert(node, Instant::now());
            self.inner.pool.drop_node(node, false);
        }
    }

    /// Starts (once, when a tokio runtime is present) the task that closes idle connections.
    fn start_reaper(&self) {
        if self.inner.reaper_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            self.inner.reaper_started.store(false, Ordering::Release);
            return;
        };
        let weak = Arc::downgrade(&self.inner);
        let max_idle = self.inner.config.max_idle;
        let period = (max_idle / 2).clamp(Duration::from_millis(100), Duration::from_secs(60));
        handle.spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { break };
                inner.pool.reap_idle(max_idle);
            }
        });
    }

    /// Closes every pooled connection (requests waiting on them fail with
    /// [`Error::ConnectionClosed`]). The transport stays usable: later calls dial again.
    pub fn close(&self) {
        self.inner.pool.close_all();
    }

    /// Requests of `api` sent so far to broker `node_id` over all its pooled connections,
    /// counted when each request is queued for the socket. Counts survive connections being
    /// closed or replaced. Requests sent on a bootstrap connection that matched no advertised
    /// broker address count under node id -1. For tests and statistics.
    pub fn requests_sent(&self, node_id: i32, api: ApiKey) -> u64 {
        self.inner.pool.requests_sent(node_id, api)
    }

    // ----- throttling (KIP-219) -----------------------------------------------------------

    /// Waits until broker `node` may be sent to again (after a response with
    /// `throttle_time_ms > 0`).
    pub(crate) async fn wait_throttle(&self, node: i32) {
        let until = lock(&self.inner.throttled_until).get(&node).copied();
        if let Some(until) = until
            && until > Instant::now()
        {
            tracing::debug!(node, "throttled by the broker, waiting");
            tokio::time::sleep_until(until).await;
        }
    }

    /// Records a `throttle_time_ms` answer from `node`.
    fn throttle(&self, node: i32, ms: i32) {
        meter::throttled(node, ms);
        let Ok(ms) = u64::try_from(ms) else { return };
        if ms == 0 {
            return;
        }
        let until = crate::time::deadline_after(Duration::from_millis(ms));
        let mut map = lock(&self.inner.throttled_until);
        let e = map.entry(node).or_insert(until);
        if *e < until {
            *e = until;
        }
    }

    /// When broker `node` may next be sent to, if it is throttled now.
    #[allow(dead_code)] // for the split routes
    pub(crate) fn throttled_until(&self, node: i32) -> Option<Instant> {
        lock(&self.inner.throttled_until)
            .get(&node)
            .copied()
            .filter(|u| *u > Instant::now())
    }

    // ----- coordinators -------------------------------------------------------------------

    /// The node id of the coordinator for `key` (a group id, transactional id or share group
    /// id), found with FindCoordinator (KIP-699 batched form v4+ when the broker has it) and
    /// cached until [`Transport::invalidate_coordinator`] or an answer with `NOT_COORDINATOR`
    /// / `COORDINATOR_NOT_AVAILABLE`. Retries retriable errors until `default_api_timeout`.
    ///
    /// # Errors
    ///
    /// [`Error::Broker`] with a non-retriable FindCoordinator error (e.g.
    /// `GROUP_AUTHORIZATION_FAILED`); [`Error::DeadlineExceeded`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops the wait; a refresh, lookup or dial shared
    /// with other callers goes on for them, and the cache and pool stay consistent.
    pub async fn coordinator(&self, key_type: CoordinatorType, key: &str) -> Result<i32> {
        let mut retry = self.retry("FindCoordinator");
        loop {
            match retry.attempt(self.coordinator_once(key_type, key)).await {
                Ok(n) => return Ok(n),
                Err(e) if e.is_retriable() => retry.backoff(e).await?,
                Err(e) => return Err(e),
            }
        }
    }

    /// Forgets the cached coordinator of `key`: the next use sends FindCoordinator again.
    pub fn invalidate_coordinator(&self, key_type: CoordinatorType, key: &str) {
        lock(&self.inner.coordinators).remove(&(key_type, key.to_owned()));
    }

    /// The cached coordinator of `key`, without I/O.
    pub(crate) fn cached_coordinator(&self, key_type: CoordinatorType, key: &str) -> Option<i32> {
        lock(&self.inner.coordinators)
            .get(&(key_type, key.to_owned()))
            .copied()
    }

    /// One FindCoordinator attempt (or the cached answer).
    pub(crate) async fn coordinator_once(
        &self,
        key_type: CoordinatorType,
        key: &str,
    ) -> Result<i32> {
        if let Some(n) = self.cached_coordinator(key_type, key) {
            return Ok(n);
        }
        let map_key = (key_type, key.to_owned());
        let lookup = Arc::clone(
            lock(&self.inner.lookups)
                .entry(map_key.clone())
                .or_default(),
        );
        let result = async {
            let _looking = lookup.lock().await;
            match self.cached_coordinator(key_type, key) {
                Some(n) => Ok(n),
                None => self.find_coordinator(key_type, key).await,
            }
        }
        .await;
        {
            // Forget the lock once nobody else waits on it.
            let mut lookups = lock(&self.inner.lookups);
            if Arc::strong_count(&lookup) == 2 {
                lookups.remove(&map_key);
            }
        }
        result
    }

    /// Sends one FindCoordinator for `key` and caches the answer.
    async fn find_coordinator(&self, key_type: CoordinatorType, key: &str) -> Result<i32> {
        let node = self.any_node_once().await?;
        let conn = self.conn_once(node, ConnKind::Admin).await?;
        let version = conn.version_for::<FindCoordinatorRequest>(None)?;
        let mut req = FindCoordinatorRequest::default();
        if version >= 1 {
            req.key_type = key_type.key_type();
        } else if key_type != CoordinatorType::Group {
            return Err(Error::UnsupportedVersion {
                api: ApiKey::FindCoordinator,
                ours: kafkit_protocol::VersionRange::new(
                    1,
                    crate::ops::versions::client_max_for::<FindCoordinatorRequest>(),
                ),
                broker: conn.broker_versions().get(ApiKey::FindCoordinator),
            });
        }
        if version >= 4 {
            req.coordinator_keys = vec![key.to_owned()];
        } else {
            req.key = key.to_owned();
        }
        self.wait_throttle(node).await;
        let resp = self
            .request_on(node, &conn, &req, version, Duration::ZERO)
            .await?;
        let (code, message, node_id, host, port) = if version >= 4 {
            let c = resp
                .coordinators
                .into_iter()
                .find(|c| c.key == key)
                .ok_or_else(|| {
                    Error::Protocol(format!("FindCoordinator: no answer for {key:?}"))
                })?;
            (c.error_code, c.error_message, c.node_id, c.host, c.port)
        } else {
            (
                resp.error_code,
                resp.error_message,
                resp.node_id,
                resp.host,
                resp.port,
            )
        };
        if !code.is_ok() {
            return Err(Error::broker("FindCoordinator", code, message));
        }
        let addr = crate::conn::metadata::Broker {
            node_id,
            host,
            port,
            rack: None,
        }
        .addr();
        tracing::debug!(?key_type, key, node_id, addr, "coordinator found");
        lock(&self.inner.coordinator_addrs).insert(node_id, addr);
        lock(&self.inner.coordinators).insert((key_type, key.to_owned()), node_id);
        Ok(node_id)
    }

    // ----- sending ------------------------------------------------------------------------

    /// A retry clock for `operation` with this transport's backoff and
    /// `default_api_timeout` deadline.
    pub(crate) fn retry(&self, operation: &'static str) -> RetryClock {
        self.retry_within(operation, self.inner.config.api_timeout_ms)
    }

    /// A retry clock for `operation` with a deadline `timeout_ms` from now.
    pub(crate) fn retry_within(&self, operation: &'static str, timeout_ms: u64) -> RetryClock {
        RetryClock::new(operation, timeout_ms, self.inner.config.backoff)
    }

    /// Sends `req` to broker `node` on its `kind` connection: waits out a throttle first,
    /// uses the highest common version (capped by `opts.max_version`), records the response's
    /// `throttle_time_ms`, and notes connection failures. One attempt, no retry, no deadline
    /// of its own (the connection's request timeout applies; wrap it in
    /// [`RetryClock::attempt`]). Error codes inside the response are data, not `Err`.
    ///
    /// Errors: those of [`Transport::conn`] and [`Conn::request_at`].
    pub(crate) async fn send_to<R: Request>(
        &self,
        node: i32,
        kind: ConnKind,
        req: &R,
        opts: SendOptions,
    ) -> Result<R::Response> {
        let conn = self.conn_once(node, kind).await?;
        let version = conn.version_for::<R>(opts.max_version)?;
        self.wait_throttle(node).await;
        self.request_on(node, &conn, req, version, opts.extra_wait)
            .await
    }

    /// Sends `req` at `version` on `conn` (a connection to `node`), recording throttling and
    /// connection failures.
    pub(crate) async fn request_on<R: Request>(
        &self,
        node: i32,
        conn: &Conn,
        req: &R,
        version: i16,
        extra_wait: Duration,
    ) -> Result<R::Response> {
        let result = conn.request_at(req, version, extra_wait).await;
        match &result {
            Ok(resp) => self.throttle(node, resp.throttle_time_ms().unwrap_or(0)),
            Err(e) => self.note_failure(node, e),
        }
        result
    }

    /// Sends any supported generated request where it belongs, by its kind: any broker, the
    /// controller (any broker when unknown: with KRaft brokers forward it, KIP-590), the group
    /// or transaction coordinator of the id in the request, or (split routes) the leaders of
    /// its partitions / the brokers its resources name, one request per broker sent
    /// concurrently and merged back in the caller's order.
    ///
    /// Retries, with exponential backoff and jitter (KIP-580), on retriable errors: connection
    /// failures and timeouts, and retriable error codes that apply to the whole request (a
    /// top-level `error_code`; a coordinator or controller error on every item). Coordinator
    /// errors drop the cached coordinator; `is_invalid_metadata` codes and `NOT_CONTROLLER`
    /// invalidate the metadata. Each request waits out the broker's `throttle_time_ms` of the
    /// previous answer (KIP-219). Per-partition / per-resource errors stay in the returned
    /// response. The deadline is `default_api_timeout` from the call; for another one use
    /// [`Transport::round_trip_within`]. Requests the broker may hold before answering get that
    /// time added to the connection's request timeout: JoinGroup its `rebalance_timeout_ms`,
    /// every request with a `timeout_ms` field (CreateTopics, DeleteTopics, CreatePartitions,
    /// ElectLeaders, Alter/ListPartitionReassignments, UpdateFeatures...) that value (give a
    /// JoinGroup a deadline above its rebalance timeout).
    ///
    /// # Errors
    ///
    /// [`Error::DeadlineExceeded`] naming the API and the last failure when retriable
    /// failures lasted until the deadline; non-retriable errors at once (e.g.
    /// [`Error::UnsupportedVersion`] naming the API, [`Error::Broker`] with a non-retriable
    /// FindCoordinator code).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the retries: a request already sent may still be carried
    /// out by the broker (its answer is discarded; the connection stays usable). Reads are
    /// cancel safe.
    pub async fn round_trip<R: Routed>(&self, req: R) -> Result<R::Response> {
        R::route(self, req, self.inner.config.api_timeout_ms).await
    }

    /// [`Transport::round_trip`] with a deadline of `timeout` from now instead of
    /// `default_api_timeout` (e.g. a Heartbeat that must not outlive the session timeout).
    ///
    /// # Errors
    ///
    /// As [`Transport::round_trip`], with `timeout` as the deadline.
    ///
    /// # Cancel safety
    ///
    /// As [`Transport::round_trip`].
    pub async fn round_trip_within<R: Routed>(
        &self,
        req: R,
        timeout: Duration,
    ) -> Result<R::Response> {
        R::route(self, req, millis(timeout)).await
    }

    /// Sends `req` to broker `node_id` on its Admin connection: no routing, no retry, waits out
    /// a throttle first. For requests about one broker (DescribeLogDirs, DescribeConfigs of a
    /// broker resource...).
    ///
    /// # Errors
    ///
    /// Those of [`Transport::conn`] and [`Conn::request`]; [`Error::Timeout`] after
    /// `default_api_timeout`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the retries: a request already sent may still be carried
    /// out by the broker (its answer is discarded; the connection stays usable). Reads are
    /// cancel safe.
    pub async fn round_trip_to<R: Request>(&self, node_id: i32, req: &R) -> Result<R::Response> {
        let retry = self.retry(R::API_KEY.name());
        retry
            .attempt(self.send_to(node_id, ConnKind::Admin, req, SendOptions::default()))
            .await
    }

    /// Sends `req` to every broker in metadata concurrently, one attempt each (as
    /// [`Transport::round_trip_to`]); one result per broker, `(node id, result)`, in the order
    /// of the metadata's broker list. When metadata cannot be had, the only entry is
    /// `(-1, Err(..))`.
    ///
    /// # Errors
    ///
    /// None for the call: each broker's entry carries its own result.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops the retries: a request already sent may still be carried
    /// out by the broker (its answer is discarded; the connection stays usable). Reads are
    /// cancel safe.
    pub async fn round_trip_all<R: Request + Clone>(
        &self,
        req: &R,
    ) -> Vec<(i32, Result<R::Response>)> {
        let md = match self.metadata().await {
            Ok(md) => md,
            Err(e) => return vec![(-1, Err(e))],
        };
        let mut set = tokio::task::JoinSet::new();
        for (i, b) in md.brokers.iter().enumerate() {
            let t = self.clone();
            let req = req.clone();
            let node = b.node_id;
            set.spawn(async move { (i, node, t.round_trip_to(node, &req).await) });
        }
        let mut out: Vec<Option<(i32, Result<R::Response>)>> =
            (0..md.brokers.len()).map(|_| None).collect();
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok((i, node, r)) => out[i] = Some((node, r)),
                Err(e) => tracing::warn!(error = %e, "round_trip_all task failed"),
            }
        }
        out.into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.unwrap_or_else(|| {
                    (
                        md.brokers[i].node_id,
                        Err(Error::Protocol("the request task did not finish".into())),
                    )
                })
            })
            .collect()
    }

    /// Reacts to `code` from a request routed to `target`: drops a wrong coordinator,
    /// invalidates stale metadata.
    pub(crate) fn on_error_code(&self, target: &Route, code: ErrorCode) {
        if let Route::Coordinator(kt, key) = target
            && meta::drops_coordinator(code)
        {
            self.invalidate_coordinator(*kt, key);
        }
        if code.is_invalid_metadata() || code == ErrorCode::NOT_CONTROLLER {
            self.invalidate_metadata();
        }
    }

    /// Sends `req` to the `key_type` coordinator of `key` at a version no higher than
    /// `max_version`, retried as [`Transport::round_trip`] does within `timeout`: for requests
    /// whose version the caller must choose (the transactional Writer keeps EndTxn below v5
    /// unless KIP-890's `transaction.version` 2 is finalized).
    ///
    /// Errors: those of [`Transport::round_trip_within`].
    pub(crate) async fn coordinator_round_trip<R: Request>(
        &self,
        req: &R,
        key_type: CoordinatorType,
        key: &str,
        max_version: Option<i16>,
        timeout: Duration,
    ) -> Result<R::Response> {
        let opts = SendOptions {
            max_version,
            ..SendOptions::default()
        };
        let target = Route::Coordinator(key_type, key.to_owned());
        self.route_simple(req, target, opts, meta::no_items, millis(timeout))
            .await
    }

    /// Sends TxnOffsetCommit `req` to its group's coordinator at a version no higher than
    /// `max_version`, retried as [`Transport::round_trip_within`] retries it (a coordinator error
    /// on every partition resends the whole request) within `timeout`: the transactional Writer
    /// keeps it below v5 on the classic flow (KIP-890 part 2).
    ///
    /// Errors: those of [`Transport::round_trip_within`].
    pub(crate) async fn txn_offset_commit_capped(
        &self,
        req: &kafkit_protocol::messages::TxnOffsetCommitRequest,
        max_version: Option<i16>,
        timeout: Duration,
    ) -> Result<kafkit_protocol::messages::TxnOffsetCommitResponse> {
        let opts = SendOptions {
            max_version,
            ..SendOptions::default()
        };
        let target = Route::Coordinator(CoordinatorType::Group, req.group_id.clone());
        self.route_simple(
            req,
            target,
            opts,
            meta::txn_offset_commit_items,
            millis(timeout),
        )
        .await
    }

    /// The simple routes: one request to one broker chosen by `target`, retried as
    /// [`Transport::round_trip`] describes; `items` is the request type's per-item rule for an
    /// error that applies to the whole request ([`meta::whole_error`]).
    pub(crate) async fn route_simple<R: Request>(
        &self,
        req: &R,
        target: Route,
        opts: SendOptions,
        items: fn(&R::Response) -> Option<ErrorCode>,
        timeout_ms: u64,
    ) -> Result<R::Response> {
        let api = R::API_KEY.name();
        let mut retry = self.retry_within(api, timeout_ms);
        loop {
            let attempt = retry
                .attempt(async {
                    let (node, kind) = match &target {
                        Route::Any => (self.any_node_once().await?, ConnKind::Admin),
                        Route::Controller => (self.controller_node_once().await?, ConnKind::Admin),
                        Route::Coordinator(kt, key) => {
                            (self.coordinator_once(*kt, key).await?, ConnKind::Group)
                        }
                    };
                    let r = self.send_to(node, kind, req, opts).await;
                    if let (Err(e), Route::Coordinator(kt, key)) = (&r, &target)
                        && matches!(e, Error::Connect { .. } | Error::ConnectionClosed { .. })
                    {
                        // The coordinator may have moved with its broker.
                        self.invalidate_coordinator(*kt, key);
                    }
                    r
                })
                .await;
            let err = match attempt {
                Ok(resp) => match meta::whole_error(&resp, items) {
                    Some(code) if code.is_retriable() => {
                        self.on_error_code(&target, code);
                        Error::broker(api, code, None)
                    }
                    _ => return Ok(resp),
                },
                Err(e) if e.is_retriable() => {
                    if let Some(code) = e.error_code() {
                        self.on_error_code(&target, code);
                    }
                    if matches!(e, Error::UnknownBroker { .. }) {
                        self.invalidate_metadata();
                    }
                    e
                }
                Err(e) => return Err(e),
            };
            retry.backoff(err).await?;
        }
    }
}

/// What asking the known brokers for metadata came to
/// ([`Transport::metadata_from_known`]).
enum KnownBrokers {
    /// One answered.
    Answered(Metadata),
    /// None answered: the last failure, `None` when no broker could be tried.
    NoneAnswered(Option<Error>),
}

/// What [`Transport::fetch_metadata`] does after a known broker's Metadata attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterMetadataError {
    /// Bootstrap again and ask the bootstrap addresses now, skipping the other known brokers.
    Rebootstrap,
    /// Try the next known broker (with [`MetadataRecoveryStrategy::None`], once every known
    /// broker failed, the last error reaches the caller: the bootstrap addresses are not asked
    /// again).
    NextBroker,
    /// Give the error to the caller now (not retriable).
    Fail,
}

/// The one place that decides what a failed Metadata attempt at a known broker leads to:
/// [`Error::RebootstrapRequired`] (a Metadata v13+ answer's top-level code, KIP-1102, or a
/// misrouted connection refused by ApiVersions v5, KIP-1242) rebootstraps with
/// [`MetadataRecoveryStrategy::Rebootstrap`] and is an ordinary retriable error with `None`
/// (as in Java, which ignores the code then); other retriable errors move on to the next
/// broker; the rest fail.
fn after_metadata_error(strategy: MetadataRecoveryStrategy, e: &Error) -> AfterMetadataError {
    match e {
        Error::RebootstrapRequired { .. } if strategy == MetadataRecoveryStrategy::Rebootstrap => {
            AfterMetadataError::Rebootstrap
        }
        e if e.is_retriable() => AfterMetadataError::NextBroker,
        _ => AfterMetadataError::Fail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit_protocol::messages as m;

    fn transport() -> Transport {
        Transport::builder(["127.0.0.1:1"])
            .build()
            .expect("transport")
    }

    /// KIP-1102: a decoded Metadata v13 answer with a top-level REBOOTSTRAP_REQUIRED is the
    /// typed, retriable `RebootstrapRequired` (operation "Metadata"); with the rebootstrap
    /// strategy it rebootstraps at once, with `None` it is an ordinary retriable error (the
    /// bootstrap addresses are not asked again, so it reaches the caller). The path on Apache
    /// Kafka 4.4: `rebootstrap_kafka::metadata_rebootstrap_required_*`.
    #[test]
    fn metadata_rebootstrap_required_decision() {
        use kafkit_protocol::Message;
        let answer = m::MetadataResponse::default()
            .with_error_code(ErrorCode::REBOOTSTRAP_REQUIRED)
            .with_cluster_id(Some("c".into()));
        let mut buf = bytes::BytesMut::new();
        answer.encode(&mut buf, 13).unwrap();
        let decoded = m::MetadataResponse::decode(&mut buf.freeze(), 13).unwrap();
        assert_eq!(decoded.error_code, ErrorCode::REBOOTSTRAP_REQUIRED);
        let err = crate::conn::metadata::top_level_error("h:1", &decoded).unwrap_err();
        match &err {
            Error::RebootstrapRequired {
                operation,
                addr,
                cluster_id,
                node_id,
            } => {
                assert_eq!((*operation, addr.as_str()), ("Metadata", "h:1"));
                assert_eq!((cluster_id, node_id), (&None, &None));
            }
            other => panic!("{other:?}"),
        }
        assert!(err.is_retriable());
        assert_eq!(err.error_code(), Some(ErrorCode::REBOOTSTRAP_REQUIRED));
        assert_eq!(
            after_metadata_error(MetadataRecoveryStrategy::Rebootstrap, &err),
            AfterMetadataError::Rebootstrap
        );
        assert_eq!(
            after_metadata_error(MetadataRecoveryStrategy::None, &err),
            AfterMetadataError::NextBroker
        );

        // Other top-level codes: a broker error, never a rebootstrap.
        let other = decoded.with_error_code(ErrorCode::NOT_CONTROLLER);
        let err = crate::conn::metadata::top_level_error("h:1", &other).unwrap_err();
        assert!(matches!(err, Error::Broker { .. }), "{err:?}");
        for strategy in [
            MetadataRecoveryStrategy::Rebootstrap,
            MetadataRecoveryStrategy::None,
        ] {
            assert_ne!(
                after_metadata_error(strategy, &err),
                AfterMetadataError::Rebootstrap
            );
            assert_eq!(
                after_metadata_error(strategy, &Error::Config("x".into())),
                AfterMetadataError::Fail
            );
        }
        let ok = other.with_error_code(ErrorCode::NONE);
        assert!(crate::conn::metadata::top_level_error("h:1", &ok).is_ok());
    }

    /// No bootstrap address answers: said at WARN once, not again at the next retries (the
    /// time of the last warning does not move within `UNREACHABLE_WARN_EVERY`).
    #[tokio::test]
    async fn an_unreachable_bootstrap_is_warned_about_once_per_span() {
        let t = Transport::builder(["127.0.0.1:1"])
            .default_api_timeout(Duration::from_millis(1))
            .build()
            .unwrap();
        assert!(lock(&t.inner.unreachable_warned_at).is_none());
        assert!(t.fetch_metadata(&[]).await.is_err());
        let first = lock(&t.inner.unreachable_warned_at).expect("warned");
        assert!(t.fetch_metadata(&[]).await.is_err());
        assert_eq!(
            *lock(&t.inner.unreachable_warned_at),
            Some(first),
            "not warned again within the span"
        );
    }

    /// KIP-899 / KIP-1102 settings: defaults as Java 4.x; the trigger only with the rebootstrap
    /// strategy and only once metadata failed for that long; `None` never rebootstraps; the
    /// KIP-1242 ids only for a known node of a known cluster, with the check on.
    #[tokio::test]
    async fn rebootstrap_settings_and_trigger() {
        let t = Transport::builder(["127.0.0.1:1"]).build().unwrap();
        assert_eq!(
            t.metadata_recovery_strategy(),
            MetadataRecoveryStrategy::Rebootstrap
        );
        assert_eq!(
            t.inner.config.rebootstrap_trigger,
            DEFAULT_METADATA_RECOVERY_REBOOTSTRAP_TRIGGER
        );
        assert!(t.inner.config.cluster_check);
        assert!(!t.rebootstrap_due(), "no failure yet");
        assert!(t.expected_node(1).is_none(), "no cluster id known yet");

        let quick = Transport::builder(["127.0.0.1:1"])
            .metadata_recovery_rebootstrap_trigger(Duration::ZERO)
            .default_api_timeout(Duration::from_millis(1))
            .build()
            .unwrap();
        assert!(quick.fetch_metadata(&[]).await.is_err());
        assert!(
            quick.rebootstrap_due(),
            "metadata failed for the (zero) trigger span"
        );
        quick.rebootstrap("test");
        assert_eq!(quick.rebootstraps(), 1);
        assert!(
            !quick.rebootstrap_due(),
            "a rebootstrap starts the span again"
        );

        let none = Transport::builder(["127.0.0.1:1"])
            .metadata_recovery_strategy(MetadataRecoveryStrategy::None)
            .metadata_recovery_rebootstrap_trigger(Duration::ZERO)
            .build()
            .unwrap();
        assert!(none.fetch_metadata(&[]).await.is_err());
        assert!(!none.rebootstrap_due());
        none.rebootstrap("test");
        assert_eq!(none.rebootstraps(), 0, "None never rebootstraps");

        // A known cluster: ids for known nodes only, and not with the check off or `None`.
        let md = Metadata {
            brokers: Vec::new(),
            cluster_id: Some("c".into()),
            controller_id: -1,
            topics: Vec::new(),
        };
        lock(&t.inner.cache).store(md.clone(), 0);
        assert_eq!(
            t.expected_node(2),
            None,
            "no broker offered ApiVersions v5 yet"
        );
        for (transport, expect) in [(&t, true), (&none, false)] {
            transport
                .inner
                .cluster_checks_ids
                .store(true, Ordering::Release);
            lock(&transport.inner.cache).store(md.clone(), 0);
            assert_eq!(
                transport.expected_node(2),
                expect.then(|| ("c".to_owned(), 2))
            );
            assert_eq!(transport.expected_node(-1), None, "a bootstrap connection");
        }
        let unchecked = Transport::builder(["127.0.0.1:1"])
            .metadata_cluster_check(false)
            .build()
            .unwrap();
        unchecked
            .inner
            .cluster_checks_ids
            .store(true, Ordering::Release);
        lock(&unchecked.inner.cache).store(md, 0);
        assert_eq!(unchecked.expected_node(2), None);
    }

    #[test]
    fn builder_defaults_and_an_empty_bootstrap_list() {
        let t = Transport::builder(["a:1, b:2", " c:3 "])
            .build()
            .expect("transport");
        assert_eq!(t.bootstrap(), ["a:1", "b:2", "c:3"]);
        assert_eq!(t.default_api_timeout(), Duration::from_secs(60));
        let c = &t.inner.config;
        assert_eq!(c.metadata_max_age, Duration::from_millis(300_000));
        assert_eq!(c.max_idle, Duration::from_millis(540_000));
        assert_eq!((c.backoff.base_ms, c.backoff.max_ms), (100, 1_000));
        // Every time span is a Duration, kept as given (the idle limit at least 1 ms).
        let t = Transport::builder(["a:1"])
            .metadata_max_age(Duration::from_secs(7))
            .connections_max_idle(Duration::ZERO)
            .retry_backoff(Duration::from_millis(20))
            .retry_backoff_max(Duration::from_millis(250))
            .default_api_timeout(Duration::from_millis(1_500))
            .build()
            .expect("transport");
        let c = &t.inner.config;
        assert_eq!(c.metadata_max_age, Duration::from_secs(7));
        assert_eq!(c.max_idle, Duration::from_millis(1));
        assert_eq!((c.backoff.base_ms, c.backoff.max_ms), (20, 250));
        assert_eq!(t.default_api_timeout(), Duration::from_millis(1_500));
        let err = Transport::builder([" , "]).build().expect_err("empty");
        assert!(matches!(err, Error::Config(_)), "{err:?}");
        assert!(!err.is_retriable());
    }

    #[test]
    fn bootstrap_entries_need_a_host_and_a_port() {
        for ok in ["127.0.0.1:9092", "broker-1.example:19092", "[::1]:9092"] {
            Transport::builder([ok])
                .build()
                .unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "127.0.0.1",
            "127.0.0.1:99999",
            "127.0.0.1:0",
            ":9092",
            "host:",
            "a:b",
            // Not host:port, though each has a colon.
            "http://x:9092",
            "SASL_SSL://broker:9093",
            "::1:9092",
            "fe80::1:9092",
            "x/y:9092",
        ] {
            let err = Transport::builder(["127.0.0.1:9092", bad])
                .build()
                .expect_err(bad);
            assert!(
                matches!(&err, Error::Config(m) if m.contains(bad)),
                "{bad}: {err:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn throttle_holds_back_the_next_request_to_that_broker_only() {
        let t = transport();
        let start = Instant::now();
        t.throttle(1, 500);
        t.throttle(1, 100); // a shorter throttle does not shorten the first
        t.throttle(1, 0);
        t.throttle(1, -5);
        t.wait_throttle(2).await;
        assert_eq!(
            start.elapsed(),
            Duration::ZERO,
            "other brokers are not held back"
        );
        assert_eq!(
            t.throttled_until(1),
            Some(start + Duration::from_millis(500))
        );
        t.wait_throttle(1).await;
        assert_eq!(start.elapsed(), Duration::from_millis(500));
        t.wait_throttle(1).await;
        assert_eq!(start.elapsed(), Duration::from_millis(500), "waited once");
        assert_eq!(t.throttled_until(1), None);
    }

    #[test]
    fn whole_request_errors() {
        use kafkit_protocol::messages::{create_topics_response, offset_commit_response};
        let jg = m::JoinGroupResponse::default();
        assert_eq!(meta::whole_error(&jg, meta::no_items), None);
        let jg = jg.with_error_code(ErrorCode::COORDINATOR_NOT_AVAILABLE);
        assert_eq!(
            meta::whole_error(&jg, meta::no_items),
            Some(ErrorCode::COORDINATOR_NOT_AVAILABLE)
        );

        let commit = |codes: &[ErrorCode]| {
            let partitions = codes
                .iter()
                .map(|c| {
                    offset_commit_response::OffsetCommitResponsePartition::default()
                        .with_error_code(*c)
                })
                .collect();
            let t = offset_commit_response::OffsetCommitResponseTopic::default()
                .with_partitions(partitions);
            let r = m::OffsetCommitResponse::default().with_topics(vec![t]);
            meta::whole_error(&r, meta::offset_commit_items)
        };
        let nc = ErrorCode::NOT_COORDINATOR;
        assert_eq!(commit(&[nc, nc]), Some(nc));
        assert_eq!(
            commit(&[nc, ErrorCode::NONE]),
            None,
            "mixed: per-item answers"
        );
        assert_eq!(commit(&[]), None);
        let unknown = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
        assert_eq!(
            commit(&[unknown]),
            None,
            "a per-item error, not a wrong broker"
        );

        let create = |code: ErrorCode| {
            let t = create_topics_response::CreatableTopicResult::default().with_error_code(code);
            let r = m::CreateTopicsResponse::default().with_topics(vec![t]);
            meta::whole_error(&r, meta::create_topics_items)
        };
        assert_eq!(
            create(ErrorCode::NOT_CONTROLLER),
            Some(ErrorCode::NOT_CONTROLLER)
        );
        assert_eq!(create(ErrorCode::REQUEST_TIMED_OUT), None, "not idempotent");
        assert_eq!(create(ErrorCode::TOPIC_ALREADY_EXISTS), None);
    }

    #[tokio::test]
    async fn unknown_node_without_metadata_is_typed() {
        // Nothing listens on port 1: metadata cannot be had, within a short deadline. The
        // deadline leaves room for at least one refused connect on a loaded machine (at 300 ms
        // the first attempt could still be running when it passed, giving a bare Timeout).
        let t = Transport::builder(["127.0.0.1:1"])
            .default_api_timeout(Duration::from_millis(1500))
            .retry_backoff(Duration::from_millis(10))
            .build()
            .expect("transport");
        let err = t.conn(7, ConnKind::Admin).await.expect_err("no cluster");
        match err {
            Error::DeadlineExceeded {
                operation: "Metadata",
                last,
                ..
            } => assert!(matches!(*last, Error::Connect { .. }), "{last:?}"),
            other => panic!("{other:?}"),
        }
    }
}
