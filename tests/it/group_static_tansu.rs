//! Static membership (KIP-345, `group_instance_id`) against tansu: a static member that
//! restarts within the session timeout gets its partitions back with no rebalance (the other
//! member sees no revocation) and resumes at what it committed.
//!
//! Not here: a second live member with the same instance id fencing the first. tansu never
//! answers FENCED_INSTANCE_ID (both members go on), and librdkafka's mock cluster does not
//! implement static membership; `group_faults_mock` injects the code instead.

use std::collections::BTreeSet;
use std::sync::Arc;

use integration_tests::{
    Event, Member, create_topic, partitions_of, settled, sorted, tansu, unique_topic,
};
use tokio::sync::Notify;

use super::group_tansu::{GUARD, builder, consumed, spec, write};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_member_restart_within_the_session_keeps_its_partitions_without_a_rebalance() {
    let topic = unique_topic("group-static");
    let group = unique_topic("g-static");
    create_topic(&tansu(), &topic, 6).await;
    write(&topic, 6, 10).await;
    let changed = Arc::new(Notify::new());
    let all = partitions_of(&[(&topic, 6)]);
    let started = std::time::Instant::now();
    let a = Member::start(
        "a",
        builder(&group, &topic).group_instance_id("static-a"),
        spec(&changed),
    );
    let b = Member::start("b", builder(&group, &topic), spec(&changed));
    let split = settled(&changed, &[&a, &b], &[], &all, GUARD).await;
    consumed(&changed, &[&a, &b], 60).await;
    let b_events = b.events();
    let a_consumed = a.consumed.clone();
    // Closing a static member sends no LeaveGroup: the coordinator keeps its place.
    a.close().await;
    let restarted = std::time::Instant::now();
    let a2 = Member::start(
        "a2",
        builder(&group, &topic).group_instance_id("static-a"),
        spec(&changed),
    );
    let again = settled(&changed, &[&a2, &b], &[], &all, GUARD).await;
    eprintln!(
        "static restart: back in {:?} (first split in {:?})",
        restarted.elapsed(),
        restarted - started
    );
    assert_eq!(again, split, "the restarted member got its partitions back");
    assert_eq!(b.events(), b_events, "the other member saw no rebalance");
    assert_eq!(
        sorted(a2.events()),
        vec![Event::Assigned(split[0].iter().cloned().collect())]
    );
    // It resumes at what the first incarnation committed: nothing read twice.
    write(&topic, 6, 5).await;
    let gone = a_consumed.lock().unwrap().len();
    consumed(&changed, &[&a2, &b], 90 - gone).await;
    let mut every: Vec<(String, i32, i64)> = a_consumed.lock().unwrap().clone();
    every.extend(a2.consumed.lock().unwrap().iter().cloned());
    every.extend(b.consumed.lock().unwrap().iter().cloned());
    let distinct: BTreeSet<_> = every.iter().cloned().collect();
    assert_eq!(distinct.len(), 90, "every record consumed");
    assert_eq!(every.len(), 90, "none twice");
    a2.close().await;
    b.close().await;
}
