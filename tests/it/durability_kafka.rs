//! Durability on Apache Kafka's three-node cluster (`integration_tests::kafka_cluster`): nodes
//! SIGKILLed under a transaction, and a partition that cannot reach `min.insync.replicas`. The
//! idempotent writer and a group under killed nodes, then the quorum leader's node, is the Kafka
//! phase of the soak (`soak::short_soak_on_kafka_*`).
//!
//! These tests kill nodes, so they run one at a time: each holds the cluster
//! ([`KafkaCluster::acquire`]) for its whole run, as the soak's Kafka phase does.

use std::collections::BTreeMap;
use std::time::Duration;

use integration_tests::kafka_cluster::KafkaCluster;
use integration_tests::{create_topic_replicated, unique_topic};
use kafkit::{
    Acks, AutoOffsetReset, ErrorCode, IsolationLevel, ProduceError, ProducerRecord, Reader,
    StartOffset, Transport, Writer,
};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

/// Bound of each step.
const T: Duration = Duration::from_secs(60);

fn transport(cluster: &KafkaCluster) -> Transport {
    Transport::builder(cluster.bootstrap().split(','))
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(500))
        .default_api_timeout(Duration::from_secs(15))
        .build()
        .expect("transport")
}

/// The leader of `topic`/`partition` as the cluster's metadata says now.
async fn leader_of(t: &Transport, topic: &str, partition: i32) -> i32 {
    let md = t.metadata_for(&[topic]).await.expect("metadata");
    md.topic(topic)
        .and_then(|tm| tm.partitions.iter().find(|p| p.partition == partition))
        .map(|p| p.leader_id)
        .expect("partition listed")
}

/// Every (offset, value) of `topic`'s `partitions`, in offset order per partition, as a
/// `read_committed` Reader sees them; stops at the last stable offsets.
async fn read_committed(
    cluster: &KafkaCluster,
    topic: &str,
    partitions: i32,
) -> Vec<Vec<(i64, String)>> {
    let reader = Reader::builder(transport(cluster))
        .isolation_level(IsolationLevel::ReadCommitted)
        .fetch_max_wait(Duration::from_millis(100))
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .build()
        .expect("reader");
    reader
        .assign((0..partitions).map(|p| (topic, p, StartOffset::Earliest)))
        .expect("assign");
    let mut got: Vec<Vec<(i64, String)>> = vec![Vec::new(); usize::try_from(partitions).unwrap()];
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let done = reader.stats().partitions.iter().all(|p| {
            p.position
                .is_some_and(|pos| pos >= p.last_stable_offset && p.last_stable_offset >= 0)
        }) && reader.stats().partitions.len() == got.len();
        if done {
            break;
        }
        let batch = tokio::time::timeout_at(deadline, reader.next_batch())
            .await
            .expect("read within the bound")
            .expect("next_batch");
        for part in batch {
            for r in part.records {
                let v = String::from_utf8(r.value.expect("value").to_vec()).expect("utf8");
                got[usize::try_from(part.partition).unwrap()].push((r.offset, v));
            }
        }
    }
    got
}

/// A transaction over three partitions whose partition 0 leader is SIGKILLed midway commits:
/// the writer finds the new leaders (and, if the node was its coordinator, the new
/// coordinator), and a `read_committed` Reader sees every record of the transaction exactly
/// once, in order, and nothing of the transaction aborted before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_commits_across_its_leader_killed() {
    let cluster = KafkaCluster::acquire().await;
    let topic = unique_topic("dur-txn");
    create_topic_replicated(&cluster.bootstrap(), &topic, 3, 3).await;
    let t = transport(&cluster);
    let w = Writer::builder(t.clone())
        .transactional_id(unique_topic("dur-txn-id"))
        .linger(Duration::from_millis(5))
        .delivery_timeout(Duration::from_secs(60))
        .build()
        .expect("writer");
    w.init_transactions(T).await.expect("init");
    // An aborted transaction first: none of it may be read.
    w.begin_transaction().expect("begin");
    for p in 0..3 {
        w.produce(ProducerRecord::new(topic.as_str(), "aborted").partition(p))
            .await
            .expect("produce");
    }
    w.abort_transaction(T).await.expect("abort");

    w.begin_transaction().expect("begin");
    let send = |from: usize, to: usize| {
        let (w, topic) = (&w, &topic);
        async move {
            let records = (from..to)
                .flat_map(|i| {
                    (0..3).map(move |p| {
                        ProducerRecord::new(topic.as_str(), format!("{p}:{i}")).partition(p)
                    })
                })
                .collect();
            w.write(records).await.expect("written");
        }
    };
    send(0, 100).await;
    let victim = leader_of(&t, &topic, 0).await;
    cluster.kill(victim).await;
    send(100, 200).await;
    w.commit_transaction(T).await.expect("commit");
    cluster.restart(victim).await;
    cluster.wait_in_sync(&topic, 3).await;

    let got = read_committed(&cluster, &topic, 3).await;
    for (p, records) in got.iter().enumerate() {
        let values: Vec<&str> = records.iter().map(|(_, v)| v.as_str()).collect();
        let want: Vec<String> = (0..200).map(|i| format!("{p}:{i}")).collect();
        assert_eq!(
            values, want,
            "partition {p}: the transaction once, in order"
        );
    }
    w.close(Duration::from_secs(10)).await.expect("close");
}

/// A partition whose in-sync replicas fall below `min.insync.replicas` refuses `acks=all`
/// writes with NOT_ENOUGH_REPLICAS: the writer reports it as a typed error once its delivery
/// timeout runs out, and every record it reported written is in the log once the node is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_enough_replicas_is_a_typed_error_and_nothing_unwritten_is_reported_written() {
    let cluster = KafkaCluster::acquire().await;
    let topic = unique_topic("dur-isr");
    // min.insync.replicas=3 on this topic: one node down is one too many.
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap())
        .create()
        .expect("admin");
    let new = NewTopic::new(&topic, 1, TopicReplication::Fixed(3)).set("min.insync.replicas", "3");
    let made = admin
        .create_topics(&[new], &AdminOptions::new())
        .await
        .expect("CreateTopics");
    made[0].as_ref().expect("topic created");
    cluster.wait_in_sync(&topic, 1).await;
    let t = transport(&cluster);
    let writer = Writer::builder(t.clone())
        .acks(Acks::All)
        .linger(Duration::from_millis(1))
        .delivery_timeout(Duration::from_secs(8))
        .request_timeout(Duration::from_secs(4))
        .build()
        .expect("writer");
    let before = writer
        .produce(ProducerRecord::new(topic.as_str(), "before").partition(0))
        .await
        .expect("written with every replica in sync");

    // Kill a follower: the leader stays, the ISR shrinks to two once the node is fenced.
    let leader = leader_of(&t, &topic, 0).await;
    let follower = cluster
        .nodes()
        .iter()
        .map(|n| n.id)
        .find(|&id| id != leader)
        .expect("a follower");
    cluster.kill(follower).await;
    let mut outcomes = BTreeMap::new();
    let code_of = |e: &ProduceError| match e {
        ProduceError::Broker { code, .. } => Some(*code),
        ProduceError::DeliveryTimeout { cause, .. } => cause.as_deref().and_then(|c| match c {
            ProduceError::Broker { code, .. } => Some(*code),
            _ => None,
        }),
        _ => None,
    };
    let deadline = tokio::time::Instant::now() + T;
    let refused = loop {
        // Until the controller fences the node (4 s here) the dead follower is still in the
        // ISR: a write may then wait for it and time out, or succeed once the ISR shrinks to
        // two. Every success is recorded and checked below; a timed-out record's fate is
        // unknown, so it is not.
        let r = writer
            .produce(ProducerRecord::new(topic.as_str(), "while down").partition(0))
            .await;
        match r {
            Ok(meta) => {
                outcomes.insert(meta.offset, "while down");
            }
            Err(e)
                if matches!(
                    code_of(&e),
                    Some(
                        ErrorCode::NOT_ENOUGH_REPLICAS
                            | ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND
                    )
                ) =>
            {
                break e;
            }
            Err(e) => eprintln!("while the ISR shrinks: {e}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never refused with NOT_ENOUGH_REPLICAS with a replica down"
        );
    };
    assert!(refused.is_retriable(), "{refused:?}");
    cluster.restart(follower).await;
    cluster.wait_in_sync(&topic, 1).await;
    let after = writer
        .produce(ProducerRecord::new(topic.as_str(), "after").partition(0))
        .await
        .expect("written once the replica is back");
    outcomes.insert(before.offset, "before");
    outcomes.insert(after.offset, "after");
    // Every record reported written is in the log at the offset it was reported at.
    let got = read_committed(&cluster, &topic, 1).await;
    let log: BTreeMap<i64, &str> = got[0].iter().map(|(o, v)| (*o, v.as_str())).collect();
    for (offset, want) in &outcomes {
        assert_eq!(
            log.get(offset),
            Some(want),
            "reported written at {offset}; the log: {log:?}"
        );
    }
    writer.close(Duration::from_secs(10)).await.expect("close");
}
