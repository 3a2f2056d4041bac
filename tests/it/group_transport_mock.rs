//! Group members sharing ONE [`Transport`] on librdkafka's mock cluster: each member's
//! coordinator connection is its own, so a JoinGroup the coordinator holds for a rebalance
//! delays neither another group's heartbeats nor a Fetch, and two members of one group in one
//! process converge.
//!
//! The hold is real: when a member joins a stable group the mock waits the group's session
//! timeout minus 1 s (5 s here) for every member to rejoin before it answers any JoinGroup.
//! Both groups' coordinator and the fetched partitions' leader are the same broker, so a
//! connection shared by the members would carry the held JoinGroup and the other requests
//! together.

use std::sync::Arc;
use std::time::Duration;

use integration_tests::{Event, GroupMock, Member, MemberSpec, partitions_of, settled, sorted};
use kafkit::{AutoOffsetReset, GroupReader, GroupReaderBuilder, Reader, Transport};
use rdkafka::mocking::MockCoordinator;
use rdkafka::types::RDKafkaApiKey;
use tokio::sync::Notify;

use super::group_mock::{GUARD, transport, write};

const HEARTBEAT: Duration = Duration::from_millis(300);

fn on(t: &Transport, group: &str, topic: &str, session: Duration) -> GroupReaderBuilder {
    GroupReader::builder(t.clone(), group)
        .subscribe([topic])
        .session_timeout(session)
        .heartbeat_interval(HEARTBEAT)
        .retry_backoff(Duration::from_millis(50))
        .reader(
            Reader::builder(t.clone())
                .fetch_max_wait(Duration::from_millis(100))
                .auto_offset_reset(AutoOffsetReset::Earliest),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_join_delays_no_other_groups_heartbeat_nor_a_fetch_on_one_transport() {
    let mock = GroupMock::new(3);
    mock.initial_rebalance_delay(Duration::from_millis(200));
    let bootstrap = mock.bootstrap();
    let slow_topic = integration_tests::unique_topic("group-held");
    let fast_topic = integration_tests::unique_topic("group-beats");
    let slow_group = integration_tests::unique_topic("g-held");
    let fast_group = integration_tests::unique_topic("g-beats");
    let cluster = mock.cluster();
    for (topic, n) in [(&slow_topic, 6), (&fast_topic, 3)] {
        cluster.create_topic(topic, n, 1).expect("topic");
        for p in 0..n {
            cluster.partition_leader(topic, p, Some(1)).expect("leader");
        }
    }
    for g in [&slow_group, &fast_group] {
        cluster
            .coordinator(MockCoordinator::Group(g.clone()), 1)
            .expect("coordinator");
    }
    let t = transport(&bootstrap);
    let changed = Arc::new(Notify::new());
    let spec = || MemberSpec {
        commit_each_batch: true,
        commit_on_revoke: false,
        changed: changed.clone(),
    };
    // The slow group: a 6 s session, so its rebalances hold JoinGroups for 5 s.
    let slow = Duration::from_secs(6);
    let a = Member::start("a", on(&t, &slow_group, &slow_topic, slow), spec());
    let c = Member::start(
        "c",
        on(&t, &fast_group, &fast_topic, Duration::from_secs(2)),
        spec(),
    );
    let slow_all = partitions_of(&[(&slow_topic, 6)]);
    let fast_all = partitions_of(&[(&fast_topic, 3)]);
    settled(&changed, &[&a], &[], &slow_all, GUARD).await;
    settled(&changed, &[&c], &[], &fast_all, GUARD).await;
    let c_generation = c.stats().generation;

    // b joins the slow group: the mock holds a's and b's JoinGroups for 5 s.
    mock.track_requests();
    let joined = std::time::Instant::now();
    let b = Member::start("b", on(&t, &slow_group, &slow_topic, slow), spec());
    // Records written for c during the hold (both JoinGroups sent, none answered) reach it
    // at once.
    let deadline = tokio::time::Instant::now() + GUARD;
    while mock.requests(RDKafkaApiKey::JoinGroup) < 2 {
        assert!(tokio::time::Instant::now() < deadline, "a and b rejoin");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(b.assignment().is_empty(), "the join is still held");
    let written = std::time::Instant::now();
    write(&bootstrap, &fast_topic, 3, 4).await;
    let deadline = tokio::time::Instant::now() + GUARD;
    while c.count() < 12 {
        assert!(tokio::time::Instant::now() < deadline, "c's records");
        let _ = tokio::time::timeout(Duration::from_millis(20), changed.notified()).await;
    }
    let fetched_in = written.elapsed();
    assert!(
        b.assignment().is_empty(),
        "c fetched while the join was held"
    );
    let split = settled(&changed, &[&a, &b], &[], &slow_all, GUARD).await;
    let held = joined.elapsed();
    assert!(
        split.iter().all(|s| s.len() == 3),
        "the two members of one group on one transport converge: {split:?}"
    );
    // Only c heartbeats while the slow group is joining (its members send none then).
    let beats = mock.request_times(RDKafkaApiKey::Heartbeat);
    let gaps: Vec<i64> = beats.windows(2).map(|w| w[1] - w[0]).collect();
    let max_gap = Duration::from_micros(u64::try_from(*gaps.iter().max().unwrap_or(&0)).unwrap());
    eprintln!(
        "join held {held:?}; c's records fetched {fetched_in:?} after the write; {} heartbeats, \
         largest gap {max_gap:?}",
        beats.len()
    );
    assert!(
        held >= Duration::from_secs(4),
        "the join was held: {held:?}"
    );
    assert!(
        beats.len() as u128 >= held.as_millis() / HEARTBEAT.as_millis() - 2,
        "c heartbeat all along: {} heartbeats in {held:?}",
        beats.len()
    );
    assert!(
        max_gap < HEARTBEAT + Duration::from_millis(400),
        "no heartbeat waited for the held JoinGroup: largest gap {max_gap:?}"
    );
    assert!(
        fetched_in < Duration::from_secs(2),
        "the fetch waited for the held JoinGroup: {fetched_in:?}"
    );
    assert_eq!(
        sorted(c.events()),
        vec![Event::Assigned(fast_all.iter().cloned().collect())],
        "c never left its group"
    );
    assert_eq!(c.stats().generation, c_generation);
    assert!(c.errors.lock().unwrap().is_empty());
    a.close().await;
    b.close().await;
    c.close().await;
}
