//! Pattern subscriptions on librdkafka's mock cluster: a topic created later that matches
//! the pattern is picked up after a metadata refresh (`metadata_max_age`), a topic that goes
//! away leaves the assignment, and a topic that does not match is never assigned; for the
//! classic protocol (the member resolves the pattern against the cluster's topics and
//! rejoins when the matches change) and for KIP-848 (the coordinator resolves the regular
//! expression the member sent).
//!
//! Mock limits: it has no DeleteTopics, so a deleted topic is a topic whose metadata answers
//! UNKNOWN_TOPIC_OR_PARTITION (`rd_kafka_mock_topic_set_error`), which is what a client sees
//! of a deleted topic; its KIP-848 coordinator matches the regex against every topic it holds,
//! errors or not, so deletion is tested for the classic protocol only. Neither the mock nor
//! tansu can add partitions to a topic (no CreatePartitions, no mock call for it).

use std::sync::Arc;
use std::time::Duration;

use integration_tests::{GroupMock, Member, MemberSpec, partitions_of, settled};
use kafkit::group_balancer::RangeAssignor;
use rdkafka::types::RDKafkaRespErr;
use tokio::sync::Notify;

use super::group_mock::{GUARD, builder, write};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_pattern_picks_up_new_topics_and_drops_deleted_ones() {
    let mock = GroupMock::new(3);
    mock.initial_rebalance_delay(Duration::from_millis(200));
    let bootstrap = mock.bootstrap();
    let prefix = integration_tests::unique_topic("pat");
    let (first, later) = (format!("{prefix}-a"), format!("{prefix}-b"));
    let other = format!("other-{prefix}");
    let cluster = mock.cluster();
    integration_tests::mock_topic_spread(&cluster, &first, 3, 3);
    integration_tests::mock_topic_spread(&cluster, &other, 2, 3);
    let group = integration_tests::unique_topic("g-pat");
    let changed = Arc::new(Notify::new());
    let spec = || MemberSpec {
        commit_each_batch: true,
        commit_on_revoke: false,
        changed: changed.clone(),
    };
    let member = || {
        builder(&bootstrap, &group, &first, Arc::new(RangeAssignor::new()))
            .subscribe_pattern(format!("{prefix}-.*"))
            .metadata_max_age(Duration::from_millis(300))
    };
    let a = Member::start("a", member(), spec());
    let b = Member::start("b", member(), spec());
    settled(
        &changed,
        &[&a, &b],
        &[],
        &partitions_of(&[(&first, 3)]),
        GUARD,
    )
    .await;

    let created = std::time::Instant::now();
    integration_tests::mock_topic_spread(&cluster, &later, 3, 3);
    let both = partitions_of(&[(&first, 3), (&later, 3)]);
    settled(&changed, &[&a, &b], &[], &both, GUARD).await;
    eprintln!(
        "classic pattern: a new topic assigned {:?} after its creation",
        created.elapsed()
    );
    write(&bootstrap, &later, 3, 4).await;
    let deadline = tokio::time::Instant::now() + GUARD;
    while a.count() + b.count() < 12 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new topic's records"
        );
        let _ = tokio::time::timeout(Duration::from_millis(20), changed.notified()).await;
    }

    let deleted = std::time::Instant::now();
    cluster
        .topic_error(
            &first,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
        )
        .expect("topic error");
    settled(
        &changed,
        &[&a, &b],
        &[],
        &partitions_of(&[(&later, 3)]),
        GUARD,
    )
    .await;
    eprintln!(
        "classic pattern: a deleted topic left the assignment {:?} after",
        deleted.elapsed()
    );
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip848_regex_picks_up_new_topics() {
    let mock = GroupMock::new(3);
    mock.consumer_group_timing(Duration::from_secs(6), Duration::from_millis(200));
    let bootstrap = mock.bootstrap();
    let prefix = integration_tests::unique_topic("pat848");
    let (first, later) = (format!("{prefix}-a"), format!("{prefix}-b"));
    let other = format!("other-{prefix}");
    let cluster = mock.cluster();
    integration_tests::mock_topic_spread(&cluster, &first, 3, 3);
    integration_tests::mock_topic_spread(&cluster, &other, 2, 3);
    let group = integration_tests::unique_topic("g-pat848");
    let changed = Arc::new(Notify::new());
    let spec = || MemberSpec {
        commit_each_batch: true,
        commit_on_revoke: false,
        changed: changed.clone(),
    };
    let member = || {
        builder(&bootstrap, &group, &first, Arc::new(RangeAssignor::new()))
            .group_protocol(kafkit::GroupProtocol::Consumer)
            .subscribe_pattern(format!("{prefix}-.*"))
            .metadata_max_age(Duration::from_millis(300))
    };
    let a = Member::start("a", member(), spec());
    let b = Member::start("b", member(), spec());
    settled(
        &changed,
        &[&a, &b],
        &[],
        &partitions_of(&[(&first, 3)]),
        GUARD,
    )
    .await;
    let created = std::time::Instant::now();
    integration_tests::mock_topic_spread(&cluster, &later, 3, 3);
    let both = partitions_of(&[(&first, 3), (&later, 3)]);
    settled(&changed, &[&a, &b], &[], &both, GUARD).await;
    eprintln!(
        "kip848 regex: a new topic assigned {:?} after its creation",
        created.elapsed()
    );
    write(&bootstrap, &later, 3, 4).await;
    let deadline = tokio::time::Instant::now() + GUARD;
    while a.count() + b.count() < 12 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the new topic's records"
        );
        let _ = tokio::time::timeout(Duration::from_millis(20), changed.notified()).await;
    }
    for m in [&a, &b] {
        assert!(
            m.errors.lock().unwrap().is_empty(),
            "{:?}",
            m.errors.lock().unwrap()
        );
    }
    a.close().await;
    b.close().await;
}
