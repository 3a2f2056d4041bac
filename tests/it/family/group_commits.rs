//! Commits of a group member against tansu: auto-commit every `auto_commit_interval` of what
//! was consumed, with the leader epoch of the last record (KIP-320), read back with
//! `require_stable` (OffsetFetch v7+, KIP-447) by a successor that resumes there; explicitly
//! given offsets (`commit_offsets`); a commit inside `on_partitions_revoked`, from which the
//! next owner resumes with nothing read twice.

use super::broker;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use integration_tests::{Member, MemberSpec, create_topic, group_committed, partitions_of, settled, unique_topic};
use kafkit::admin::OffsetAndMetadata;
use tokio::sync::Notify;

use super::group::{GUARD, builder, consumed, transport, write};

/// The group's committed offset and leader epoch of each partition of `topic`.
async fn committed(
    group: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<i32, Option<(i64, Option<i32>)>> {
    group_committed(transport(), group, topic, partitions).await
}

/// Waits (up to [`GUARD`]) until every partition of `topic` is committed at `at`.
async fn committed_at(
    group: &str,
    topic: &str,
    partitions: i32,
    at: i64,
) -> BTreeMap<i32, Option<(i64, Option<i32>)>> {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let c = committed(group, topic, partitions).await;
        if c.values().all(|o| o.is_some_and(|(off, _)| off == at)) {
            return c;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "committed at {at} within {GUARD:?}: {c:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn spec(changed: &Arc<Notify>, commit_on_revoke: bool) -> MemberSpec {
    MemberSpec {
        commit_each_batch: false,
        commit_on_revoke,
        changed: changed.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_commit_with_leader_epochs_read_back_stable_and_explicit_offsets() {
    let topic = unique_topic("group-autocommit");
    let group = unique_topic("g-autocommit");
    create_topic(&broker(), &topic, 3).await;
    write(&topic, 3, 10).await;
    let changed = Arc::new(Notify::new());
    let a = Member::start(
        "a",
        builder(&group, &topic)
            .auto_commit_interval(Duration::from_millis(200))
            .require_stable_offsets(true),
        spec(&changed, false),
    );
    consumed(&changed, &[&a], 30).await;
    // No commit of the application's: auto-commit sends what it consumed.
    let started = std::time::Instant::now();
    let c = committed_at(&group, &topic, 3, 10).await;
    eprintln!(
        "auto-commit: committed {:?} after the last record: {c:?}",
        started.elapsed()
    );
    assert!(a.stats().commits >= 1);
    let epochs: BTreeSet<Option<i32>> = c.values().map(|o| o.and_then(|(_, e)| e)).collect();
    eprintln!("committed leader epochs: {epochs:?}");
    a.close().await;

    // A successor reading committed offsets with require_stable resumes there.
    write(&topic, 3, 2).await;
    let b = Member::start(
        "b",
        builder(&group, &topic)
            .enable_auto_commit(false)
            .require_stable_offsets(true),
        spec(&changed, false),
    );
    consumed(&changed, &[&b], 6).await;
    let offsets: BTreeSet<i64> = b.consumed.lock().unwrap().iter().map(|r| r.2).collect();
    assert_eq!(
        offsets,
        BTreeSet::from([10, 11]),
        "resumed at the committed offsets"
    );
    // Explicit offsets: commit_offsets sends exactly these.
    let mut om = OffsetAndMetadata::new(4);
    om.metadata = Some("marked".into());
    b.handle()
        .commit_offsets(&[
            (topic.as_str(), 0, om),
            (topic.as_str(), 2, OffsetAndMetadata::new(7)),
        ])
        .await
        .expect("commit_offsets");
    let c = committed(&group, &topic, 3).await;
    assert_eq!(c[&0].map(|x| x.0), Some(4));
    assert_eq!(c[&1].map(|x| x.0), Some(10), "partition 1 untouched");
    assert_eq!(c[&2].map(|x| x.0), Some(7));
    let bad = b
        .handle()
        .commit_offsets(&[
            (topic.as_str(), 0, OffsetAndMetadata::new(1)),
            (topic.as_str(), 0, OffsetAndMetadata::new(2)),
        ])
        .await
        .expect_err("a partition given twice");
    assert!(matches!(bad, kafkit::Error::InvalidArgument(_)), "{bad}");
    b.close().await;
}

/// Java's commit-on-revoke: auto-commit off, the application commits inside
/// `on_partitions_revoked`; when a second member joins, the first commits what it consumed
/// of the partitions it gives up, and the new owner resumes there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_inside_revoked_hands_over_without_duplicates() {
    let topic = unique_topic("group-revoke-commit");
    let group = unique_topic("g-revoke-commit");
    create_topic(&broker(), &topic, 4).await;
    write(&topic, 4, 10).await;
    let changed = Arc::new(Notify::new());
    let all = partitions_of(&[(&topic, 4)]);
    let a = Member::start(
        "a",
        builder(&group, &topic).enable_auto_commit(false),
        spec(&changed, true),
    );
    consumed(&changed, &[&a], 40).await;
    assert_eq!(a.stats().commits, 0, "nothing committed yet");
    let b = Member::start(
        "b",
        builder(&group, &topic).enable_auto_commit(false),
        spec(&changed, true),
    );
    let split = settled(&changed, &[&a, &b], &[], &all, GUARD).await;
    assert!(
        a.stats().commits >= 1,
        "a committed inside the revoked callback"
    );
    let c = committed(&group, &topic, 4).await;
    for (_, p) in &split[1] {
        assert_eq!(
            c[p].map(|x| x.0),
            Some(10),
            "b's partition {p} committed by a: {c:?}"
        );
    }
    write(&topic, 4, 5).await;
    consumed(&changed, &[&a, &b], 60).await;
    let mut every: Vec<(String, i32, i64)> = a.consumed.lock().unwrap().clone();
    every.extend(b.consumed.lock().unwrap().iter().cloned());
    let distinct: BTreeSet<_> = every.iter().cloned().collect();
    assert_eq!(distinct.len(), 60, "every record");
    assert_eq!(every.len(), 60, "none twice");
    a.close().await;
    b.close().await;
}
