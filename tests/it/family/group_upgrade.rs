//! An eager -> cooperative rolling upgrade: a running group of two `[range]` members is
//! restarted one by one with `[cooperative-sticky, range]`.
//!
//! Apache Kafka chooses the protocol every member offers, by the members' preference: `range`
//! while a `[range]` member remains, `cooperative-sticky` from the rebalance in which the last one
//! left. From then on a join revokes only what moves, and a member offering only
//! `[cooperative-sticky]` is welcome.
//!
//! tansu keeps `range` (the protocol its first member chose, for the group's whole life), and
//! the restarted members follow it: every rebalance they take part in revokes everything before
//! the rejoin (eager), and a member offering only `[cooperative-sticky]` is refused
//! (INCONSISTENT_GROUP_PROTOCOL) and stops with the typed fatal error. `group_upgrade_mock` says
//! what the mock does.

use super::{BROKER, broker};
use integration_tests::BrokerKind;
use std::sync::Arc;

use integration_tests::{Member, create_topic, partitions_of, settled, unique_topic};
use kafkit::group_balancer::{CooperativeStickyAssignor, GroupBalancer, RangeAssignor};
use kafkit::{Error, GroupError};
use kafkit_protocol::ErrorCode;
use tokio::sync::Notify;

use super::group::{GUARD, builder, spec};
use crate::group_upgrade_mock::{protocol, revoked};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_members_stay_eager_while_the_group_keeps_range() {
    let topic = unique_topic("group-upgrade");
    let group = unique_topic("g-upgrade");
    create_topic(&broker(), &topic, 6).await;
    let all = partitions_of(&[(&topic, 6)]);
    let changed = Arc::new(Notify::new());
    let range = || -> Arc<dyn GroupBalancer> { Arc::new(RangeAssignor::new()) };
    let coop = || -> Arc<dyn GroupBalancer> { Arc::new(CooperativeStickyAssignor::new()) };
    let start = |name: &str, assignors: Vec<Arc<dyn GroupBalancer>>| {
        Member::start(
            name,
            builder(&group, &topic).partition_assignment_strategy(assignors),
            spec(&changed),
        )
    };
    let started = std::time::Instant::now();
    let a1 = start("a1", vec![range()]);
    let b1 = start("b1", vec![range()]);
    settled(&changed, &[&a1, &b1], &[], &all, GUARD).await;
    assert_eq!(protocol(&a1), "range");

    a1.close().await;
    settled(&changed, &[&b1], &[], &all, GUARD).await;
    let a2 = start("a2", vec![coop(), range()]);
    let split = settled(&changed, &[&a2, &b1], &[], &all, GUARD).await;
    assert_eq!(protocol(&a2), "range");
    let mut a2_had = vec![split[0].clone()];
    if BROKER == BrokerKind::Kafka {
        b1.close().await;
        settled(&changed, &[&a2], &[], &all, GUARD).await;
        assert_eq!(
            protocol(&a2),
            "cooperative-sticky",
            "every member prefers it now"
        );
        assert_eq!(
            revoked(&a2),
            a2_had,
            "the rebalance began under range: everything revoked"
        );
        let b2 = start("b2", vec![coop(), range()]);
        let split = settled(&changed, &[&a2, &b2], &[], &all, GUARD).await;
        assert_eq!(protocol(&b2), "cooperative-sticky");
        let after = revoked(&a2);
        assert_eq!(after.len(), 2, "one revocation more: {after:?}");
        assert_eq!(after[1], split[1], "cooperative: a2 gave up only what b2 took");
        // [cooperative-sticky] alone: a third member, not an error.
        let c = start("c", vec![coop()]);
        settled(&changed, &[&a2, &b2, &c], &[], &all, GUARD).await;
        assert!(c.errors.lock().unwrap().is_empty());
        eprintln!("upgrade on Kafka in {:?}", started.elapsed());
        c.close().await;
        a2.close().await;
        b2.close().await;
        return;
    }
    b1.close().await;
    settled(&changed, &[&a2], &[], &all, GUARD).await;
    assert_eq!(
        revoked(&a2),
        a2_had,
        "eager under range: everything revoked before the rejoin"
    );
    a2_had.push(all.clone());
    let b2 = start("b2", vec![coop(), range()]);
    settled(&changed, &[&a2, &b2], &[], &all, GUARD).await;
    assert_eq!(protocol(&b2), "range", "tansu keeps range");
    assert_eq!(
        revoked(&a2),
        a2_had,
        "still eager: everything revoked again when b2 joined"
    );

    // [cooperative-sticky] alone does not offer range: refused, typed, fatal.
    let mut c = builder(&group, &topic)
        .partition_assignment_strategy([coop()])
        .build()
        .expect("member");
    let e = tokio::time::timeout(GUARD, c.next_batch())
        .await
        .expect("refused within GUARD")
        .expect_err("refused");
    match &e {
        Error::Group(g @ GroupError::Fatal { code, .. }) => {
            assert_eq!(*code, ErrorCode::INCONSISTENT_GROUP_PROTOCOL);
            assert!(!g.is_retriable());
        }
        other => panic!("INCONSISTENT_GROUP_PROTOCOL, not {other}"),
    }
    eprintln!("upgrade on tansu in {:?}", started.elapsed());
    c.close().await;
    a2.close().await;
    b2.close().await;
}
