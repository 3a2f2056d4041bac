//! Rebootstrap on Apache Kafka 4.4, through relays that move an address to another broker or
//! cut the known brokers off: KIP-1242 (ApiVersions v5 names the cluster and node a connection
//! is meant for; the broker refuses a misrouted one with REBOOTSTRAP_REQUIRED) and KIP-899
//! (`metadata_recovery_strategy`: when every known broker is unreachable, the bootstrap
//! addresses are dialled again), and KIP-1102 (a Metadata v13 answer whose top-level error code
//! is REBOOTSTRAP_REQUIRED: Apache Kafka 4.4 never sends it there, so the relay overwrites the
//! code of a real answer, [`ResponseFault::TopLevelErrorCode`]).
//!
//! What Java 4.4 does, and these tests expect: `NetworkClient` sends the cluster id and node id
//! in ApiVersions v5 for a known node (never for a bootstrap connection) when the strategy is
//! `rebootstrap`; on REBOOTSTRAP_REQUIRED it closes every connection and bootstraps again, and it
//! takes whatever cluster the bootstrap addresses now reach (`Metadata.update` only logs the new
//! cluster id). So a client whose bootstrap address moved to another cluster recovers onto that
//! cluster; there is no typed error for the application.
//!
//! The tests that use the three-node cluster hold it ([`KafkaCluster::acquire`]), as
//! `durability_kafka` does while it kills nodes; those that use the one-node cluster's relayed
//! listener hold its relay ([`kafka_relay`]).

use std::time::Duration;

use integration_tests::kafka_cluster::KafkaCluster;
use integration_tests::{
    RecordedFrame, Relay, ResponseFault, create_topic_replicated, kafka, kafka_relay, unique_topic,
};
use kafkit::{
    Dialer, Error, MetadataRecoveryStrategy, ProducerRecord, Reader, StartOffset, Transport, Writer,
};

/// Bound of each step.
const T: Duration = Duration::from_secs(60);
/// ApiVersions' API key.
const API_VERSIONS: i16 = 18;
/// Metadata's API key.
const METADATA: i16 = 3;
/// REBOOTSTRAP_REQUIRED.
const REBOOTSTRAP_REQUIRED: i16 = 129;

/// The request timeout of the tests' connections (the writer's delivery timeout must be at
/// least this plus its linger).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

fn transport(bootstrap: &str, strategy: MetadataRecoveryStrategy) -> Transport {
    Transport::builder([bootstrap])
        .dialer(Dialer::builder().request_timeout(REQUEST_TIMEOUT).build())
        .metadata_recovery_strategy(strategy)
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(500))
        .default_api_timeout(Duration::from_secs(15))
        .build()
        .expect("transport")
}

/// The ApiVersions exchanges the relay recorded that Kafka refused with REBOOTSTRAP_REQUIRED:
/// `(cluster id, node id)` the request named (KIP-1242), one per refused connection.
fn refusals(frames: &[RecordedFrame], cluster_id: &str) -> Vec<(String, i32)> {
    let mut out = Vec::new();
    for req in frames
        .iter()
        .filter(|f| f.request && f.frame.get(4..6) == Some(&API_VERSIONS.to_be_bytes()[..]))
    {
        let refused = frames.iter().any(|f| {
            !f.request
                && f.conn == req.conn
                && f.frame.get(8..10) == Some(&REBOOTSTRAP_REQUIRED.to_be_bytes()[..])
        });
        let named = req
            .frame
            .windows(cluster_id.len())
            .position(|w| w == cluster_id.as_bytes());
        if let (true, Some(at)) = (refused, named) {
            let n = req
                .frame
                .get(at + cluster_id.len()..at + cluster_id.len() + 4);
            let node = n.map_or(-1, |b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
            out.push((cluster_id.to_owned(), node));
        }
    }
    out
}

/// Asserts that `e` is the typed refusal of a connection dialled for node `node_id` of
/// `cluster_id` (KIP-1242: ApiVersions v5 answered REBOOTSTRAP_REQUIRED by the broker).
fn assert_refused(e: &Error, cluster_id: &str, node_id: i32) {
    match e {
        Error::RebootstrapRequired {
            operation,
            cluster_id: c,
            node_id: n,
            ..
        } => {
            assert_eq!(*operation, "ApiVersions", "{e}");
            assert_eq!((c.as_deref(), *n), (Some(cluster_id), Some(node_id)), "{e}");
        }
        other => panic!("not RebootstrapRequired: {other:?}"),
    }
    assert!(e.is_retriable());
    assert_eq!(
        e.error_code(),
        Some(kafkit::ErrorCode::REBOOTSTRAP_REQUIRED)
    );
}

/// Waits until `cond` holds (checked every 20 ms: the relay has no event to await).
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    tokio::time::timeout(T, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}: not within {T:?}"));
}

async fn cluster_id(t: &Transport) -> String {
    t.metadata()
        .await
        .expect("metadata")
        .cluster_id
        .clone()
        .expect("cluster id")
}

/// The values of `topic`/0 on the cluster at `bootstrap`, from the start, `n` of them.
async fn read_values(bootstrap: &str, topic: &str, n: usize) -> Vec<String> {
    let reader = Reader::builder(transport(bootstrap, MetadataRecoveryStrategy::Rebootstrap))
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    reader
        .assign([(topic, 0, StartOffset::Earliest)])
        .expect("assign");
    let mut values = Vec::new();
    tokio::time::timeout(T, async {
        while values.len() < n {
            let batch = reader.next_batch().await.expect("next_batch");
            for p in batch.iter() {
                for r in &p.records {
                    let v = r.value.as_deref().unwrap_or_default();
                    values.push(String::from_utf8_lossy(v).into_owned());
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{n} records of {topic} within {T:?}: {values:?}"));
    values
}

/// The values of the reader's next batch.
async fn next_values(reader: &Reader) -> Vec<String> {
    let batch = tokio::time::timeout(T, reader.next_batch())
        .await
        .expect("a batch within T")
        .expect("next_batch");
    batch
        .iter()
        .flat_map(|p| &p.records)
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

/// (a) The bootstrap address moved to another cluster: a client bootstrapped through a relay in
/// front of the one-node cluster (whose RELAYED listener advertises the relay, so every
/// connection goes through it) finds, once the relay forwards to the three-node cluster, its
/// next connection to node 1 refused by ApiVersions v5 (cluster id of the one-node cluster,
/// node 1: REBOOTSTRAP_REQUIRED); it bootstraps again and, as Java does, goes on with the
/// cluster the address now reaches: its metadata names the new cluster id and the next record
/// is written there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_address_moved_to_another_cluster() {
    let cluster = KafkaCluster::acquire().await;
    let (_relay_guard, relay) = kafka_relay().await;
    let topic = unique_topic("moved");
    create_topic_replicated(&kafka(), &topic, 1, 1).await;
    create_topic_replicated(&cluster.bootstrap(), &topic, 1, 3).await;

    let t = transport(relay.addr(), MetadataRecoveryStrategy::Rebootstrap);
    let first = cluster_id(&t).await;
    // A second client that knows node 1 of the first cluster, to dial it after the move.
    let probe = transport(relay.addr(), MetadataRecoveryStrategy::Rebootstrap);
    assert_eq!(cluster_id(&probe).await, first);
    let w = Writer::builder(t.clone()).build().expect("writer");
    w.produce(ProducerRecord::new(topic.as_str(), "before").partition(0))
        .await
        .expect("produce before the move");

    relay.record(true);
    relay.switch_upstream(&cluster.nodes()[0].addr());
    relay.cut_all();
    let ack = tokio::time::timeout(
        T,
        w.produce(ProducerRecord::new(topic.as_str(), "after").partition(0)),
    )
    .await
    .expect("produce within T")
    .expect("produce after the move");
    assert_eq!(ack.offset, 0, "the first record of the new cluster's topic");

    let refused = refusals(&relay.take_recorded(), &first);
    assert!(
        refused.contains(&(first.clone(), 1)),
        "an ApiVersions v5 naming {first} node 1 refused: {refused:?}"
    );
    assert!(t.rebootstraps() >= 1);
    // The refusal as the caller of a dial sees it: the typed error naming what was expected.
    let e = probe.dial_unpooled(1).await.expect_err("node 1 moved away");
    assert_refused(&e, &first, 1);
    assert_eq!(probe.rebootstraps(), 1);
    let second = cluster_id(&t).await;
    assert_ne!(second, first, "the metadata is the new cluster's");
    assert_eq!(
        read_values(&cluster.bootstrap(), &topic, 1).await,
        ["after"]
    );
    assert_eq!(read_values(&kafka(), &topic, 1).await, ["before"]);
    w.close(Duration::from_secs(10)).await.ok();
}

/// (b) A broker replaced behind the same address: the three-node cluster reached only through
/// a relay per node; the relay of a partition's leader is switched to another node, so a new
/// connection to the leader reaches the wrong node id and is refused (REBOOTSTRAP_REQUIRED:
/// node id). The writer's record waits (never written to the wrong node); once the address
/// reaches the leader again the client recovers and the record is written once, and reading
/// goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_replaced_behind_the_same_address() {
    let cluster = KafkaCluster::acquire().await;
    let mut relays = Vec::new();
    for n in cluster.nodes() {
        let listen = format!("127.0.0.1:{}", n.relay_port);
        let listener = tokio::time::timeout(T, async {
            loop {
                match tokio::net::TcpListener::bind(&listen).await {
                    Ok(l) => break l,
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("bind {listen}"));
        relays.push((
            n.id,
            Relay::serve(listener, &format!("127.0.0.1:{}", n.relayed_port)),
        ));
    }
    let topic = unique_topic("replaced");
    create_topic_replicated(&cluster.bootstrap(), &topic, 1, 3).await;

    let t = transport(relays[0].1.addr(), MetadataRecoveryStrategy::Rebootstrap);
    let id = cluster_id(&t).await;
    // A second client that knows every node, to dial the leader after its address moved.
    let probe = transport(relays[0].1.addr(), MetadataRecoveryStrategy::Rebootstrap);
    assert_eq!(cluster_id(&probe).await, id);
    let w = Writer::builder(t.clone()).build().expect("writer");
    w.produce(ProducerRecord::new(topic.as_str(), "v0").partition(0))
        .await
        .expect("produce");
    let md = t.metadata_for(&[topic.as_str()]).await.expect("metadata");
    let leader = md.leader_of(&topic, 0).expect("leader").node_id;
    let other = cluster
        .nodes()
        .iter()
        .find(|n| n.id != leader)
        .expect("another node");
    let (_, relay) = relays.iter().find(|(id, _)| *id == leader).expect("relay");

    relay.record(true);
    relay.switch_upstream(&format!("127.0.0.1:{}", other.relayed_port));
    relay.cut_all();
    let before = t.rebootstraps();
    let pending = tokio::spawn({
        let w = w.clone();
        let topic = topic.clone();
        async move {
            w.produce(ProducerRecord::new(topic.as_str(), "v1").partition(0))
                .await
        }
    });
    let mut refused = Vec::new();
    until("a connection to the leader refused by node id", || {
        refused.extend(refusals(&relay.take_recorded(), &id));
        !refused.is_empty()
    })
    .await;
    assert!(
        refused.iter().all(|(c, n)| *c == id && *n == leader),
        "refused as node {leader} of {id}: {refused:?}"
    );
    until("a rebootstrap", || t.rebootstraps() > before).await;
    assert!(!pending.is_finished(), "nothing written to the wrong node");
    let e = probe
        .dial_unpooled(leader)
        .await
        .expect_err("the leader's address reaches another node");
    assert_refused(&e, &id, leader);

    let home = cluster
        .nodes()
        .iter()
        .find(|n| n.id == leader)
        .expect("the leader's node");
    relay.switch_upstream(&format!("127.0.0.1:{}", home.relayed_port));
    let ack = tokio::time::timeout(T, pending)
        .await
        .expect("produce within T")
        .expect("join")
        .expect("produce after the broker came back");
    assert_eq!(ack.offset, 1);
    w.produce(ProducerRecord::new(topic.as_str(), "v2").partition(0))
        .await
        .expect("produce goes on");
    assert_eq!(
        read_values(&cluster.bootstrap(), &topic, 3).await,
        ["v0", "v1", "v2"]
    );
    w.close(Duration::from_secs(10)).await.ok();
}

/// The one-node cluster reached through its relayed listener (node 1 advertised at the relay),
/// bootstrapped through a second relay; then the advertised address is cut for good and the
/// bootstrap address moved to the plain listener (the broker changed address): every known
/// broker is unreachable, the bootstrap address works.
struct Moved {
    topic: String,
    writer: Writer,
    transport: Transport,
    /// A Reader on a transport of its own (same bootstrap, same strategy) that read `before`.
    reader: Reader,
    reader_transport: Transport,
    _relay_guard: tokio::sync::MutexGuard<'static, ()>,
    _relay: Relay,
    boot: Relay,
}

async fn moved_broker(strategy: MetadataRecoveryStrategy, delivery: Duration) -> Moved {
    let (guard, relay) = kafka_relay().await;
    let spec = std::env::var(integration_tests::KAFKA_RELAY_ENV).expect("relay env");
    let (_, relayed) = spec.split_once(',').expect("LISTEN,TARGET");
    let boot = Relay::start(relayed).await;
    let topic = unique_topic("kip899");
    create_topic_replicated(&kafka(), &topic, 1, 1).await;
    let t = transport(boot.addr(), strategy);
    let writer = Writer::builder(t.clone())
        .request_timeout(REQUEST_TIMEOUT)
        .delivery_timeout(delivery)
        .build()
        .expect("writer");
    writer
        .produce(ProducerRecord::new(topic.as_str(), "before").partition(0))
        .await
        .expect("produce through the relay");
    let md = t.cached_metadata().expect("metadata");
    assert_eq!(
        md.brokers[0].addr(),
        relay.addr(),
        "node 1 is known at the relay"
    );
    let reader_transport = transport(boot.addr(), strategy);
    let reader = Reader::builder(reader_transport.clone())
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    reader
        .assign([(topic.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    assert_eq!(next_values(&reader).await, ["before"]);
    relay.refuse(true);
    relay.cut_all();
    boot.switch_upstream(&kafka());
    Moved {
        topic,
        writer,
        transport: t,
        reader,
        reader_transport,
        _relay_guard: guard,
        _relay: relay,
        boot,
    }
}

/// (c) KIP-899, `Rebootstrap` (the default): every known broker unreachable, the writer
/// bootstraps again, learns the broker's new address and writes the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_known_brokers_unreachable_rebootstraps() {
    let m = moved_broker(
        MetadataRecoveryStrategy::Rebootstrap,
        Duration::from_secs(60),
    )
    .await;
    let metadata_before = m.boot.requests().iter().filter(|r| r.api_key == 3).count();
    let ack = tokio::time::timeout(
        T,
        m.writer
            .produce(ProducerRecord::new(m.topic.as_str(), "after").partition(0)),
    )
    .await
    .expect("produce within T")
    .expect("produce after the move");
    assert_eq!(ack.offset, 1);
    assert!(m.transport.rebootstraps() >= 1);
    let metadata_after = m.boot.requests().iter().filter(|r| r.api_key == 3).count();
    assert!(
        metadata_after > metadata_before,
        "metadata asked at the bootstrap address again"
    );
    let md = m.transport.cached_metadata().expect("metadata");
    assert_eq!(md.brokers[0].addr(), kafka(), "the broker's new address");
    assert_eq!(
        read_values(&kafka(), &m.topic, 2).await,
        ["before", "after"]
    );
    // The Reader, on a transport of its own, bootstraps again too and reads on.
    assert_eq!(next_values(&m.reader).await, ["after"]);
    assert!(m.reader_transport.rebootstraps() >= 1);
    m.writer.close(Duration::from_secs(10)).await.ok();
}

/// (c) KIP-899, `None`: the bootstrap address is never asked again; the record's delivery
/// timeout passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_known_brokers_unreachable_without_rebootstrap_fails() {
    let m = moved_broker(MetadataRecoveryStrategy::None, Duration::from_secs(5)).await;
    let metadata_before = m.boot.requests().iter().filter(|r| r.api_key == 3).count();
    let r = tokio::time::timeout(
        T,
        m.writer
            .produce(ProducerRecord::new(m.topic.as_str(), "after").partition(0)),
    )
    .await
    .expect("an answer within T");
    assert!(r.is_err(), "not written: {r:?}");
    assert_eq!(m.transport.rebootstraps(), 0);
    let metadata_after = m.boot.requests().iter().filter(|r| r.api_key == 3).count();
    assert_eq!(
        metadata_after, metadata_before,
        "the bootstrap address is not asked again"
    );
    assert_eq!(read_values(&kafka(), &m.topic, 1).await, ["before"]);
    // A record written at the broker's new address: the Reader, which never asks the
    // bootstrap address again, does not see it (bounded wait: nothing may arrive).
    let direct = Writer::builder(Transport::builder([kafka()]).build().expect("transport"))
        .build()
        .expect("writer");
    direct
        .produce(ProducerRecord::new(m.topic.as_str(), "direct").partition(0))
        .await
        .expect("produce at the new address");
    let nothing = tokio::time::timeout(Duration::from_secs(5), m.reader.next_batch()).await;
    assert!(nothing.is_err(), "the reader read on: {nothing:?}");
    assert_eq!(m.reader_transport.rebootstraps(), 0);
    direct.close(Duration::from_secs(5)).await.ok();
    m.writer.close(Duration::from_secs(1)).await.ok();
}

/// KIP-1102 on Apache Kafka 4.4: a client reaches the one-node cluster only through the relay
/// (node 1's RELAYED listener advertises the relay); the relay overwrites the top-level error
/// code of Kafka's next Metadata v13 answer with REBOOTSTRAP_REQUIRED (the rest of the answer is
/// Kafka's, and the relay checks on that frame that the two bytes it overwrites are the error
/// code). With `Rebootstrap` the client bootstraps again: the next Metadata request goes on a
/// new connection to the bootstrap address (the relay) and the metadata comes back. With `None`
/// every answer so damaged is the typed `RebootstrapRequired` (operation "Metadata") and the
/// caller gets it as the last error of its deadline; no new connection is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_rebootstrap_required_on_kafka() {
    let (_relay_guard, relay) = kafka_relay().await;
    let metadata_requests = |relay: &Relay| -> Vec<u64> {
        relay
            .requests()
            .iter()
            .filter(|r| r.api_key == METADATA)
            .map(|r| r.conn)
            .collect()
    };

    // Rebootstrap: one damaged answer, then a new connection through the bootstrap address.
    let t = transport(relay.addr(), MetadataRecoveryStrategy::Rebootstrap);
    let id = cluster_id(&t).await;
    let md = t.cached_metadata().expect("metadata");
    assert_eq!(md.brokers[0].addr(), relay.addr(), "node 1 at the relay");
    let before = metadata_requests(&relay);
    let known = *before.last().expect("the bootstrap Metadata request");
    relay.record(true);
    relay.fault_next_response(
        METADATA,
        ResponseFault::TopLevelErrorCode(REBOOTSTRAP_REQUIRED),
    );
    t.invalidate_metadata();
    let md = tokio::time::timeout(T, t.metadata())
        .await
        .expect("metadata within T")
        .expect("metadata after the rebootstrap");
    assert_eq!(md.cluster_id.as_deref(), Some(id.as_str()));
    assert_eq!(relay.refused_faults(), Vec::<String>::new());
    assert_eq!(relay.faults_pending(), 0, "the fault took Kafka's answer");
    assert_eq!(t.rebootstraps(), 1);
    let after = metadata_requests(&relay)[before.len()..].to_vec();
    assert_eq!(after.len(), 2, "the damaged one and one more: {after:?}");
    assert_eq!(after[0], known, "asked node 1 on its known connection");
    assert!(after[1] > known, "then a new connection: {after:?}");
    // The damaged answer as Kafka sent it (recorded before the fault): a Metadata v13 answer
    // whose body ends with error code 0 and an empty tagged-field count.
    let recorded = relay.take_recorded();
    let request = recorded
        .iter()
        .find(|f| {
            f.request && f.conn == known && f.frame.get(4..6) == Some(&METADATA.to_be_bytes()[..])
        })
        .expect("the Metadata request recorded");
    assert_eq!(&request.frame[6..8], &13i16.to_be_bytes(), "Metadata v13");
    let answer = recorded
        .iter()
        .find(|f| !f.request && f.conn == known && f.frame[4..8] == request.frame[8..12])
        .expect("Kafka's answer recorded");
    assert_eq!(&answer.frame[answer.frame.len() - 3..], &[0, 0, 0]);
    relay.record(false);
    t.close();

    // None: the damaged answers reach the caller as the typed error; nothing is dialled anew.
    let t = Transport::builder([relay.addr()])
        .dialer(Dialer::builder().request_timeout(REQUEST_TIMEOUT).build())
        .metadata_recovery_strategy(MetadataRecoveryStrategy::None)
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(200))
        // Long enough for a damaged answer to come back within it on a loaded machine (with
        // 2 s the first answer once came too late: a plain Timeout, no error to carry).
        .default_api_timeout(Duration::from_secs(5))
        .build()
        .expect("transport");
    assert_eq!(cluster_id(&t).await, id);
    let before = metadata_requests(&relay);
    let known = *before.last().expect("the bootstrap Metadata request");
    // More than the deadline can use (at least 50 ms of backoff each: at most 100 in 5 s): every
    // answer within it is damaged.
    const ARMED: usize = 200;
    for _ in 0..ARMED {
        relay.fault_next_response(
            METADATA,
            ResponseFault::TopLevelErrorCode(REBOOTSTRAP_REQUIRED),
        );
    }
    t.invalidate_metadata();
    let e = tokio::time::timeout(T, t.metadata())
        .await
        .expect("an answer within T")
        .expect_err("every answer damaged");
    let last = match &e {
        Error::DeadlineExceeded {
            operation: "Metadata",
            last,
            ..
        } => last,
        other => panic!("{other:?}"),
    };
    assert!(
        matches!(
            **last,
            Error::RebootstrapRequired {
                operation: "Metadata",
                ..
            }
        ),
        "{last:?}"
    );
    assert_eq!(
        last.error_code(),
        Some(kafkit::ErrorCode::REBOOTSTRAP_REQUIRED)
    );
    assert_eq!(t.rebootstraps(), 0);
    assert_eq!(relay.refused_faults(), Vec::<String>::new());
    let after = metadata_requests(&relay)[before.len()..].to_vec();
    assert!(!after.is_empty());
    assert_eq!(
        ARMED - relay.faults_pending(),
        after.len(),
        "each answer damaged"
    );
    assert!(
        after.iter().all(|c| *c == known),
        "every Metadata request on the known connection: {after:?}"
    );
    t.close();
}
