//! The admin Client's group, offset, producer and transaction operations against one real broker
//! (tansu or Apache Kafka, one node).
//!
//! A consumer group is made by librdkafka's consumer joining and committing; our Client then
//! lists, describes, reads, alters and deletes it. On Kafka, OffsetDelete, DescribeProducers,
//! DescribeTransactions and ListTransactions are read back against an idempotent and a
//! transactional Writer's state; tansu 0.6 does not offer them, and there they must fail with
//! the typed unsupported-version error naming the API.
//!
//! Needs the brokers: run through `cargo xtask test`.

use super::{BROKER, broker, dial};
use integration_tests::BrokerKind;
use std::time::{Duration, Instant};

use integration_tests::{PEER_TIMEOUT, PeerSend, create_topic_with, peer_produce, unique_topic};
use kafkit::admin::{
    GroupState, ListGroupOffsets, ListGroupsOptions, ListTransactionsOptions, OffsetAndMetadata,
    ResourceResult,
};
use kafkit::admin::TransactionState;
use kafkit::{
    Client, Error, IsolationLevel, OffsetSpec, ProducerRecord, Transport, Writer,
};
use kafkit_protocol::{ApiKey, ErrorCode};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

fn client() -> Client {
    let transport = Transport::builder([broker()])
        .default_api_timeout(Duration::from_secs(15))
        .build()
        .expect("transport");
    Client::new(transport)
}

/// Writes `n` records to each partition of `partitions` with librdkafka.
async fn produce(topic: &str, partitions: &[i32], n: usize) {
    let records: Vec<PeerSend<'_>> = partitions
        .iter()
        .flat_map(|&partition| {
            (0..n).map(move |_| PeerSend {
                partition,
                key: Some(b"k"),
                value: Some(b"v"),
                headers: &[],
            })
        })
        .collect();
    peer_produce(&broker(), topic, &records).await;
}

/// A librdkafka consumer in `group`, subscribed to `topic`, polled until it owns `partitions`
/// partitions.
fn join_group(group: &str, topic: &str, partitions: usize) -> BaseConsumer {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker())
        .set("group.id", group)
        .set("client.id", "admin-groups-peer")
        .set("partition.assignment.strategy", "range")
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "200")
        .set("socket.timeout.ms", "10000")
        .create()
        .expect("librdkafka consumer");
    c.subscribe(&[topic]).expect("subscribe");
    let deadline = Instant::now() + PEER_TIMEOUT;
    while c.assignment().map_or(0, |a| a.count()) < partitions {
        assert!(
            Instant::now() < deadline,
            "the peer consumer got no assignment"
        );
        if let Some(Err(e)) = c.poll(Duration::from_millis(50)) {
            eprintln!("consumer poll: {e}");
        }
    }
    c
}

/// `(topic, partition) -> offset` from a consumer group offsets answer.
fn offsets_of(
    r: &ResourceResult<kafkit::admin::CommittedOffsets>,
) -> Vec<((String, i32), Option<i64>)> {
    let mut v: Vec<_> = r
        .as_ref()
        .expect("group offsets read")
        .iter()
        .map(|(tp, o)| {
            (
                tp.clone(),
                o.as_ref()
                    .expect("partition read")
                    .as_ref()
                    .map(|o| o.offset),
            )
        })
        .collect();
    v.sort();
    v
}

/// The node id of tansu's only broker.
async fn listed_coordinator(admin: &Client) -> i32 {
    let md = admin.transport().metadata().await.expect("metadata");
    assert_eq!(md.brokers.len(), 1, "tansu is one node");
    md.brokers[0].node_id
}

fn tp(topic: &str, p: i32) -> (String, i32) {
    (topic.to_owned(), p)
}

fn assert_unsupported<T: std::fmt::Debug>(r: kafkit::Result<T>, want: ApiKey) {
    match r {
        Err(Error::UnsupportedVersion { api, broker, .. }) => {
            assert_eq!(api, want);
            assert_eq!(broker, None, "tansu does not offer {want:?}");
        }
        other => panic!("{want:?}: expected UnsupportedVersion, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_group_lifecycle() {
    let admin = client();
    let conn = dial("admin-groups-tansu").await;
    let topic = create_topic_with(&conn, "admin-groups", 3).await;
    let group = unique_topic("admin-group");
    produce(&topic, &[0, 1, 2], 3).await;

    // A librdkafka consumer joins the group and commits offsets 2, 3, 1.
    let consumer = join_group(&group, &topic, 3);
    let mut commit = TopicPartitionList::new();
    for (p, o) in [(0, 2), (1, 3), (2, 1)] {
        commit
            .add_partition_offset(&topic, p, Offset::Offset(o))
            .expect("offset");
    }
    consumer
        .commit(&commit, CommitMode::Sync)
        .expect("peer commit");

    // Listed as a consumer group, stable, by its coordinator.
    let listed = admin
        .list_consumer_groups(&ListGroupsOptions::new())
        .await
        .expect("list groups");
    assert!(listed.errors.is_empty(), "{:?}", listed.errors);
    let ours = listed
        .groups
        .iter()
        .find(|g| g.group_id == group)
        .expect("our group is listed");
    assert_eq!(ours.protocol_type, "consumer");
    assert_eq!(ours.group_type.as_deref(), Some("classic"));
    // tansu 0.6 names every group's state "Unknown" in ListGroups (v4+ carries a state).
    assert!(ours.state.is_some());
    assert_eq!(ours.coordinator, listed_coordinator(&admin).await);
    // State and type filters go to the broker (ListGroups v4+, v5+) and are accepted.
    let filtered = admin
        .list_groups(&ListGroupsOptions::new().in_states([GroupState::Stable]))
        .await
        .expect("list with a state filter");
    assert!(filtered.errors.is_empty(), "{:?}", filtered.errors);
    let classic = admin
        .list_groups(&ListGroupsOptions::new().with_types(["classic"]))
        .await
        .expect("list with a type filter");
    // (tansu 0.6 accepts filters but does not apply them; the broker's job, not the client's.)
    assert!(classic.errors.is_empty(), "{:?}", classic.errors);
    assert!(classic.groups.iter().any(|g| g.group_id == group));

    // While the group has a member, an admin commit fails partition by partition.
    let busy = admin
        .alter_consumer_group_offsets(&group, &[(topic.clone(), 0, OffsetAndMetadata::new(0))])
        .await
        .expect("the coordinator answered");
    assert_eq!(busy[0].0, tp(&topic, 0));
    assert_eq!(
        busy[0].1.as_ref().err().and_then(Error::error_code),
        Some(ErrorCode::UNKNOWN_MEMBER_ID)
    );

    // Described: one member, range assignor, its subscription and assignment decoded.
    let missing = unique_topic("no-such-group");
    let described = admin
        .describe_consumer_groups(&[group.as_str(), missing.as_str()], false)
        .await
        .expect("describe");
    assert_eq!(described[0].0, group);
    let d = described[0].1.as_ref().expect("group described");
    assert_eq!(d.state, GroupState::Stable);
    assert_eq!(d.protocol_type, "consumer");
    assert_eq!(d.members.len(), 1);
    let m = &d.members[0];
    assert!(!m.member_id.is_empty());
    // tansu 0.6 leaves the protocol name and the members' metadata and assignment empty in
    // DescribeGroups; when a broker sends them they are decoded (unit tests and the Java
    // broker), and here only checked for consistency.
    if !m.metadata.is_empty() {
        let sub = m.subscription.as_ref().expect("subscription decoded");
        assert_eq!(sub.topics, std::slice::from_ref(&topic));
        assert_eq!(d.protocol, "range");
    }
    if !m.assignment_bytes.is_empty() {
        let asg = m.assignment.as_ref().expect("assignment decoded");
        assert!((0..3).all(|p| asg.contains(&topic, p)));
    }
    assert_eq!(d.authorized_operations, None, "not asked for");
    // An unknown group is described, not an error: Kafka says Dead, tansu 0.6 Empty.
    let unknown = described[1].1.as_ref().expect("unknown group described");
    assert!(
        matches!(unknown.state, GroupState::Dead | GroupState::Empty),
        "{unknown:?}"
    );
    assert!(unknown.members.is_empty());

    // Committed offsets: all of them, and one partition asked by name.
    let read = admin
        .list_consumer_group_offsets(
            &[
                ListGroupOffsets::all(&group),
                ListGroupOffsets::partitions(missing.as_str(), [(topic.as_str(), 1)]),
            ],
            false,
        )
        .await
        .expect("offset fetch");
    assert_eq!(
        offsets_of(&read[0].1),
        [
            (tp(&topic, 0), Some(2)),
            (tp(&topic, 1), Some(3)),
            (tp(&topic, 2), Some(1))
        ]
    );
    assert_eq!(
        offsets_of(&read[1].1),
        [(tp(&topic, 1), None)],
        "no commit: None"
    );

    // The member leaves; the group is empty and its offsets can be altered by an admin.
    consumer.unsubscribe();
    drop(consumer);
    let deadline = Instant::now() + PEER_TIMEOUT;
    loop {
        let d = admin
            .describe_consumer_groups(&[group.as_str()], false)
            .await
            .expect("describe");
        let d = d[0].1.as_ref().expect("described");
        if d.members.is_empty() {
            assert_eq!(d.state, GroupState::Empty);
            break;
        }
        assert!(Instant::now() < deadline, "member never left: {d:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let altered = admin
        .alter_consumer_group_offsets(
            &group,
            &[
                (topic.clone(), 0, OffsetAndMetadata::new(1)),
                (topic.clone(), 1, OffsetAndMetadata::new(3).metadata("note")),
                (topic.clone(), 2, OffsetAndMetadata::new(0)),
            ],
        )
        .await
        .expect("offset commit");
    for (tp, r) in &altered {
        r.as_ref().unwrap_or_else(|e| panic!("alter {tp:?}: {e}"));
    }
    let read = admin
        .list_consumer_group_offsets(&[ListGroupOffsets::all(&group)], false)
        .await
        .expect("offset fetch");
    assert_eq!(
        offsets_of(&read[0].1),
        [
            (tp(&topic, 0), Some(1)),
            (tp(&topic, 1), Some(3)),
            (tp(&topic, 2), Some(0))
        ]
    );
    // (tansu 0.6 does not keep commit metadata strings; admin_groups_mock checks them.)

    // Lag after producing more to partition 0: end offsets 5, 3, 3.
    produce(&topic, &[0], 2).await;
    let lag = admin
        .consumer_group_lag(&group, IsolationLevel::ReadUncommitted)
        .await
        .expect("lag");
    let lags: Vec<((String, i32), Option<i64>, i64)> = lag
        .iter()
        .map(|(tp, r)| {
            let l = r.as_ref().expect("partition lag");
            (tp.clone(), l.lag, l.end_offset)
        })
        .collect();
    assert_eq!(
        lags,
        [
            (tp(&topic, 0), Some(4), 5),
            (tp(&topic, 1), Some(0), 3),
            (tp(&topic, 2), Some(3), 3)
        ]
    );

    let removed = admin
        .delete_consumer_group_offsets(&group, &[tp(&topic, 0)])
        .await;
    match BROKER {
        // OffsetDelete is not offered by tansu 0.6.
        BrokerKind::Tansu => assert_unsupported(removed, ApiKey::OffsetDelete),
        BrokerKind::Kafka => {
            let removed = removed.expect("OffsetDelete");
            assert_eq!(removed.len(), 1);
            removed[0].1.as_ref().expect("offset of partition 0 deleted");
            let read = admin
                .list_consumer_group_offsets(&[ListGroupOffsets::all(&group)], false)
                .await
                .expect("offset fetch");
            assert_eq!(
                offsets_of(&read[0].1),
                [(tp(&topic, 1), Some(3)), (tp(&topic, 2), Some(0))],
                "partition 0's commit is gone"
            );
        }
    }

    // Delete the group; it is no longer listed.
    let deleted = admin
        .delete_consumer_groups(&[group.as_str()])
        .await
        .expect("delete groups");
    assert_eq!(deleted[0].0, group);
    deleted[0].1.as_ref().expect("group deleted");
    let listed = admin
        .list_consumer_groups(&ListGroupsOptions::new())
        .await
        .expect("list groups");
    assert!(!listed.groups.iter().any(|g| g.group_id == group));
    // Bad input never reaches the wire.
    assert!(matches!(
        admin.delete_consumer_groups(&[]).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        admin
            .describe_consumer_groups(&[group.as_str(), group.as_str()], false)
            .await,
        Err(Error::InvalidArgument(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_and_delete_records() {
    let admin = client();
    let conn = dial("admin-offsets-tansu").await;
    let topic = create_topic_with(&conn, "admin-offsets", 2).await;
    produce(&topic, &[0], 4).await;

    let specs = [
        (topic.as_str(), 0, OffsetSpec::Earliest),
        (topic.as_str(), 1, OffsetSpec::Latest),
    ];
    let got = admin
        .list_offsets(&specs, IsolationLevel::ReadUncommitted)
        .await
        .expect("list offsets");
    assert_eq!(got[0].0, tp(&topic, 0));
    assert_eq!(got[0].1.as_ref().expect("p0").offset, 0);
    assert_eq!(got[1].1.as_ref().expect("p1").offset, 0, "empty partition");
    let latest = admin
        .list_offsets(
            &[(topic.as_str(), 0, OffsetSpec::Latest)],
            IsolationLevel::ReadCommitted,
        )
        .await
        .expect("list offsets");
    assert_eq!(latest[0].1.as_ref().expect("p0").offset, 4);
    // By timestamp: the first record at or after time 0 is offset 0, with its timestamp.
    let by_time = admin
        .list_offsets(
            &[(topic.as_str(), 0, OffsetSpec::Timestamp(0))],
            IsolationLevel::ReadUncommitted,
        )
        .await
        .expect("list offsets");
    let info = by_time[0].1.as_ref().expect("p0");
    assert_eq!(info.offset, 0);
    assert!(info.timestamp.is_some_and(|t| t > 0), "{info:?}");

    if BROKER == BrokerKind::Kafka {
        // KIP-734: the record with the largest timestamp (the four share one batch timestamp or
        // rise: any of them, with its timestamp).
        let max = admin
            .list_offsets(
                &[(topic.as_str(), 0, OffsetSpec::MaxTimestamp)],
                IsolationLevel::ReadUncommitted,
            )
            .await
            .expect("list offsets");
        let info = max[0].1.as_ref().expect("max timestamp");
        assert!((0..4).contains(&info.offset), "{info:?}");
        assert!(info.timestamp.is_some_and(|t| t > 0), "{info:?}");
        // DeleteRecords moves the log start offset; Earliest then answers it.
        let deleted = admin
            .delete_records(&[(topic.as_str(), 0, 2)])
            .await
            .expect("delete records");
        assert_eq!(deleted[0].0, tp(&topic, 0));
        assert_eq!(*deleted[0].1.as_ref().expect("low watermark"), 2);
        let earliest = admin
            .list_offsets(
                &[(topic.as_str(), 0, OffsetSpec::Earliest)],
                IsolationLevel::ReadUncommitted,
            )
            .await
            .expect("list offsets");
        assert_eq!(earliest[0].1.as_ref().expect("p0").offset, 2);
        return;
    }
    // tansu 0.6 offers ListOffsets v9 and DeleteRecords 0-2 in ApiVersions, but answers neither a
    // max-timestamp look-up (KIP-734, timestamp -3) nor DeleteRecords: it closes the connection.
    // Each call must end at its deadline with a typed, retriable error (or per-partition errors),
    // never hang.
    let quick = Client::new(
        Transport::builder([broker()])
            .default_api_timeout(Duration::from_secs(1))
            .build()
            .expect("transport"),
    );
    match quick
        .list_offsets(
            &[(topic.as_str(), 0, OffsetSpec::MaxTimestamp)],
            IsolationLevel::ReadUncommitted,
        )
        .await
    {
        Err(e) => assert!(
            e.is_retriable() && e.to_string().contains("ListOffsets"),
            "{e}"
        ),
        Ok(parts) => {
            let e = parts[0].1.as_ref().expect_err("tansu cannot look up -3");
            assert!(e.is_retriable(), "{e}");
        }
    }
    match quick.delete_records(&[(topic.as_str(), 0, 2)]).await {
        Err(e) => {
            assert!(e.is_retriable(), "{e}");
            assert!(e.to_string().contains("DeleteRecords"), "{e}");
        }
        Ok(parts) => {
            let e = parts[0]
                .1
                .as_ref()
                .expect_err("tansu cannot delete records");
            assert!(e.is_retriable(), "{e}");
        }
    }
}

/// DescribeProducers, DescribeTransactions, ListTransactions and OffsetDelete. On Kafka they read
/// back an idempotent Writer's producer and a transactional Writer's open, then committed,
/// transaction; tansu 0.6 offers none of them, and each fails with the typed unsupported-version
/// error naming the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_and_transaction_apis() {
    let admin = client();
    if BROKER == BrokerKind::Tansu {
        let topic = unique_topic("admin-unsupported");
        assert_unsupported(
            admin.describe_producers(&[(topic.as_str(), 0)]).await,
            ApiKey::DescribeProducers,
        );
        assert_unsupported(
            admin.describe_transactions(&["some-txn"]).await,
            ApiKey::DescribeTransactions,
        );
        assert_unsupported(
            admin
                .list_transactions(&ListTransactionsOptions::new())
                .await,
            ApiKey::ListTransactions,
        );
        let err = admin
            .delete_consumer_group_offsets("g", &[tp(&topic, 0)])
            .await
            .expect_err("OffsetDelete");
        assert!(!err.is_retriable());
        assert!(err.to_string().contains("OffsetDelete"), "{err}");
        assert_eq!(err.error_code(), None::<ErrorCode>);
        return;
    }
    let conn = dial("admin-producers").await;
    let topic = create_topic_with(&conn, "admin-producers", 1).await;
    let transport = || Transport::builder([broker()]).build().expect("transport");

    // An idempotent Writer's three records, one request each: its producer id, epoch 0 and the
    // last sequence 2.
    let idempotent = Writer::builder(transport()).build().expect("writer");
    for i in 0..3 {
        idempotent
            .produce(ProducerRecord::new(topic.as_str(), format!("v{i}")).partition(0))
            .await
            .expect("produce");
    }
    let described = admin
        .describe_producers(&[(topic.as_str(), 0)])
        .await
        .expect("DescribeProducers");
    let producers = described[0].1.as_ref().expect("partition 0 answered");
    assert_eq!(producers.len(), 1, "{producers:?}");
    assert_eq!(producers[0].producer_epoch, 0);
    assert_eq!(producers[0].last_sequence, 2);
    assert_eq!(producers[0].current_transaction_start_offset, None);
    idempotent
        .close(Duration::from_secs(10))
        .await
        .expect("close");

    // A transactional Writer with a transaction open on partition 0.
    let id = unique_topic("admin-txn");
    let txn = Writer::builder(transport())
        .transactional_id(id.as_str())
        .build()
        .expect("writer");
    let t = Duration::from_secs(30);
    txn.init_transactions(t).await.expect("init");
    txn.begin_transaction().expect("begin");
    txn.produce(ProducerRecord::new(topic.as_str(), "in a transaction").partition(0))
        .await
        .expect("produce");
    let described = admin
        .describe_transactions(&[id.as_str()])
        .await
        .expect("DescribeTransactions");
    let d = described[0].1.as_ref().expect("described");
    assert_eq!(d.state, TransactionState::Ongoing);
    assert_eq!(d.topic_partitions, vec![tp(&topic, 0)]);
    assert!(d.producer_id >= 0);
    let listed = admin
        .list_transactions(&ListTransactionsOptions::new())
        .await
        .expect("ListTransactions");
    assert!(listed.errors.is_empty(), "{:?}", listed.errors);
    let ours = listed
        .transactions
        .iter()
        .find(|l| l.transactional_id == id)
        .expect("our transaction is listed");
    assert_eq!(ours.producer_id, d.producer_id);
    assert_eq!(ours.state, TransactionState::Ongoing);
    // The open transaction is the partition's: its first offset is 3.
    let described = admin
        .describe_producers(&[(topic.as_str(), 0)])
        .await
        .expect("DescribeProducers");
    let open = described[0]
        .1
        .as_ref()
        .expect("partition 0 answered")
        .iter()
        .find(|p| p.producer_id == d.producer_id)
        .expect("the transactional producer");
    assert_eq!(open.current_transaction_start_offset, Some(3));

    txn.commit_transaction(t).await.expect("commit");
    // The commit returns once the coordinator logged PrepareCommit; the markers follow.
    let deadline = Instant::now() + PEER_TIMEOUT;
    loop {
        let described = admin
            .describe_transactions(&[id.as_str()])
            .await
            .expect("DescribeTransactions");
        let d = described[0].1.as_ref().expect("described");
        if d.state == TransactionState::CompleteCommit {
            assert!(d.topic_partitions.is_empty(), "{d:?}");
            break;
        }
        assert_eq!(d.state, TransactionState::PrepareCommit);
        assert!(Instant::now() < deadline, "never CompleteCommit: {d:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // An unknown transactional id is a per-id error.
    let unknown = admin
        .describe_transactions(&["no-such-transaction"])
        .await
        .expect("DescribeTransactions");
    assert_eq!(
        unknown[0].1.as_ref().err().and_then(Error::error_code),
        Some(ErrorCode::TRANSACTIONAL_ID_NOT_FOUND)
    );
    txn.close(Duration::from_secs(10)).await.expect("close");
}
