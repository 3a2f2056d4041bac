//! Shared helpers for the integration tests in `tests/`: where the brokers are, unique topic
//! names, and librdkafka (the peer client) producers and consumers to check our client against.
//!
//! Two kinds of broker are used, never a hand-written fake:
//! - **tansu**, a real Kafka-compatible broker (one node, memory storage), started by
//!   `cargo xtask test` or `cargo xtask broker start`; see [`tansu`].
//! - **librdkafka's mock cluster**, in-process brokers with fault injection; see [`mock_cluster`].
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

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{DefaultProducerContext, FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// Environment variable holding tansu's bootstrap address (`host:port`), set by `cargo xtask test`.
pub const TANSU_BOOTSTRAP_ENV: &str = "KAFKIT_TANSU_BOOTSTRAP";

/// Where `cargo xtask broker start` puts tansu when no `--port` is given.
pub const DEFAULT_TANSU_BOOTSTRAP: &str = "127.0.0.1:19092";

/// Upper bound of any one peer operation (produce, consume, admin) in these helpers: 30 s.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(30);

/// tansu's bootstrap address, if a tansu is known to run.
///
/// Reads [`TANSU_BOOTSTRAP_ENV`]; when it is unset, returns [`DEFAULT_TANSU_BOOTSTRAP`] if
/// something accepts TCP connections there (a broker left by `cargo xtask broker start`), so
/// `cargo nextest run -p integration-tests` works after a plain `broker start`.
pub fn tansu_bootstrap() -> Option<String> {
    if let Ok(v) = std::env::var(TANSU_BOOTSTRAP_ENV)
        && !v.trim().is_empty()
    {
        return Some(v.trim().to_string());
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
             `cargo xtask broker start` (listens on {DEFAULT_TANSU_BOOTSTRAP}) or set \
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
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let opts = AdminOptions::new().operation_timeout(Some(Timeout::After(PEER_TIMEOUT)));
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
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
/// If fewer than `count` records arrive within 30 s (the message lists what did arrive), or on a
/// consumer error.
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
    let deadline = tokio::time::Instant::now() + PEER_TIMEOUT;
    while got.len() < count {
        let msg = match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => panic!("peer consume {topic}: {e}"),
            Err(_) => panic!(
                "peer consume {topic}: {} of {count} records within {PEER_TIMEOUT:?}: {got:?}",
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
    kafkit::Dialer::builder()
        .client_id(client_id)
        .build()
        .dial(&tansu())
        .await
        .expect("dial tansu")
}

/// Creates a fresh topic named after `prefix` with `partitions` partitions through our own
/// CreateTopics (tansu only) and returns its name. Panics unless exactly that topic was created.
pub async fn create_topic_with(conn: &kafkit::Conn, prefix: &str, partitions: i32) -> String {
    let name = unique_topic(prefix);
    let results = conn
        .create_topics(&[kafkit::admin::NewTopic::new(&name, partitions, 1)], false)
        .await
        .expect("CreateTopics");
    assert_eq!(results.len(), 1, "one topic result");
    let (_, created) = results.into_iter().next().expect("one topic result");
    created.expect("topic created");
    name
}
