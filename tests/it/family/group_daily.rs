//! The `GroupReader` calls people use daily (issue 33), classic members on Apache Kafka 4.4
//! and tansu (the KIP-848 runs of the same bodies are in `group_daily_kafka`): `seek` with a
//! plain offset (and the typed error for a partition not owned), `pause` / `resume` / `paused`
//! (a paused partition hands out nothing across heartbeats and keeps its assignment; a
//! revocation drops the pause, as in Java), `store_offset` with `enable_auto_offset_store`
//! off (auto-commit commits only what was stored), `commit_record` (offset + 1 and the
//! record's leader epoch, read back by OffsetFetch), changing the subscription of a running
//! member (`subscribe` to another topic, `unsubscribe`, which leaves the group, and
//! `subscribe` again, which rejoins and resumes at the commits), and
//! `auto_offset_reset` on the group builder. Records are read with the inherent
//! `GroupReader::next` (no stream trait imported here).

use std::collections::BTreeSet;
use std::time::Duration;

use super::{BROKER, broker};
use integration_tests::{BrokerKind, create_topic, group_committed, unique_topic};
use kafkit::{
    AutoOffsetReset, ConsumerRecord, GroupError, GroupProtocol, GroupReader, GroupReaderBuilder,
    ProducerRecord, Reader, StartOffset, Transport, Writer,
};

/// Upper bound for anything awaited that should finish much sooner.
const GUARD: Duration = Duration::from_secs(30);

fn transport() -> Transport {
    Transport::builder([broker()])
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(250))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport")
}

/// A member of `group` reading `topic` from the earliest offset, set on the group builder
/// itself (no `ReaderBuilder`), auto-commit off.
pub(crate) fn member(group: &str, topic: &str, protocol: GroupProtocol) -> GroupReaderBuilder {
    GroupReader::builder(transport(), group)
        .subscribe([topic])
        .group_protocol(protocol)
        .session_timeout(Duration::from_secs(6))
        .heartbeat_interval(Duration::from_millis(300))
        .retry_backoff(Duration::from_millis(50))
        .enable_auto_commit(false)
        .auto_offset_reset(AutoOffsetReset::Earliest)
}

/// Writes `n` records `"{partition}:{i}"` to `partition`.
async fn write(topic: &str, partition: i32, n: usize) {
    let w = Writer::builder(transport())
        .linger(Duration::from_millis(5))
        .build()
        .expect("writer");
    let mut futs = Vec::new();
    for i in 0..n {
        futs.push(
            w.send(ProducerRecord::new(topic, format!("{partition}:{i}")).partition(partition))
                .await
                .expect("send"),
        );
    }
    for f in futs {
        f.await.expect("written");
    }
    w.close(GUARD).await.expect("close");
}

/// The next record within `GUARD` (errors fail the test).
async fn next(m: &mut GroupReader) -> ConsumerRecord {
    tokio::time::timeout(GUARD, m.next())
        .await
        .expect("a record within GUARD")
        .expect("the member is open")
        .expect("a record")
}

/// Waits until the member owns exactly `want` (polling, so steps are carried out).
async fn owns(m: &mut GroupReader, want: &[(String, i32)]) -> Vec<ConsumerRecord> {
    let deadline = tokio::time::Instant::now() + GUARD;
    let mut got = Vec::new();
    while m.assignment() != want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "owns {:?}, want {want:?} ({:?})",
            m.assignment(),
            m.stats().state
        );
        if let Ok(Some(r)) = tokio::time::timeout(Duration::from_millis(100), m.next()).await {
            got.push(r.expect("record"));
        }
    }
    got
}

fn parts(topic: &str, ps: &[i32]) -> Vec<(String, i32)> {
    ps.iter().map(|p| (topic.to_owned(), *p)).collect()
}

/// `seek` with a plain offset goes back, the next record is that offset; a partition the
/// member does not own is refused with the typed `PartitionNotAssigned` and nothing moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_to_an_offset_and_a_typed_error_for_a_partition_not_owned() {
    let topic = unique_topic("daily-seek");
    let group = unique_topic("g-daily-seek");
    create_topic(&broker(), &topic, 1).await;
    write(&topic, 0, 10).await;
    let mut m = member(&group, &topic, GroupProtocol::Classic)
        .build()
        .expect("member");
    // auto_offset_reset(Earliest) on the group builder: the records written before the
    // member joined are read from offset 0.
    for want in 0..10 {
        assert_eq!(next(&mut m).await.offset, want);
    }
    m.seek(&topic, 0, 3).expect("owned");
    assert_eq!(next(&mut m).await.offset, 3, "read again from the seek");
    let err = m.seek(&topic, 7, 0).expect_err("not owned");
    assert!(
        matches!(&err, kafkit::Error::Group(GroupError::PartitionNotAssigned { topic: t, partition: 7, .. }) if *t == topic),
        "{err}"
    );
    let err = m
        .seek("no-such-topic", 0, StartOffset::Earliest)
        .expect_err("not owned");
    assert!(
        matches!(
            err,
            kafkit::Error::Group(GroupError::PartitionNotAssigned { .. })
        ),
        "{err}"
    );
    assert_eq!(
        next(&mut m).await.offset,
        4,
        "the failed seeks moved nothing"
    );
    m.close().await;
}

pub(crate) async fn pause_body(protocol: GroupProtocol) {
    let topic = unique_topic("daily-pause");
    let group = unique_topic("g-daily-pause");
    create_topic(&broker(), &topic, 2).await;
    let mut m = member(&group, &topic, protocol).build().expect("member");
    owns(&mut m, &parts(&topic, &[0, 1])).await;
    let generation = m.stats().generation;
    m.pause([(topic.as_str(), 0)]).expect("owned");
    assert_eq!(m.paused(), parts(&topic, &[0]));
    let err = m
        .pause([(topic.as_str(), 0), (topic.as_str(), 9)])
        .expect_err("9 not owned");
    assert!(
        matches!(
            err,
            kafkit::Error::Group(GroupError::PartitionNotAssigned { partition: 9, .. })
        ),
        "{err}"
    );
    // Partition 0's records are written first: unpaused, they would come with or before 1's.
    write(&topic, 0, 5).await;
    write(&topic, 1, 5).await;
    let mut got = Vec::new();
    while got.len() < 5 {
        let r = next(&mut m).await;
        assert_eq!(r.partition, 1, "a record of the paused partition: {r:?}");
        got.push(r.offset);
    }
    // Across several heartbeats (300 ms classic; KIP-848 heartbeats are the broker's 5 s,
    // the member's epoch is what it checks): nothing of partition 0, the assignment kept.
    let quiet = tokio::time::timeout(Duration::from_millis(1500), m.next()).await;
    assert!(
        quiet.is_err(),
        "nothing to hand out while paused: {quiet:?}"
    );
    assert_eq!(
        m.assignment(),
        parts(&topic, &[0, 1]),
        "pause is no rebalance"
    );
    assert_eq!(m.stats().generation, generation, "no new generation");
    assert_eq!(m.paused(), parts(&topic, &[0]));
    m.resume([(topic.as_str(), 0)]).expect("owned");
    assert!(m.paused().is_empty());
    let mut zero = Vec::new();
    while zero.len() < 5 {
        let r = next(&mut m).await;
        assert_eq!(r.partition, 0, "only partition 0 has records left");
        zero.push(r.offset);
    }
    assert_eq!(zero, (0..5).collect::<Vec<_>>(), "resumed where it paused");
    // A revocation drops the pause (Java: a revoked partition's state is gone): unsubscribe
    // revokes everything, subscribe assigns it again, unpaused.
    m.pause([(topic.as_str(), 1)]).expect("owned");
    m.unsubscribe().expect("unsubscribe");
    owns(&mut m, &[]).await;
    assert!(
        m.paused().is_empty(),
        "the revoked partition's pause is gone"
    );
    m.subscribe([topic.as_str()]).expect("subscribe");
    owns(&mut m, &parts(&topic, &[0, 1])).await;
    assert!(m.paused().is_empty(), "assigned again, not paused");
    m.close().await;
}

/// A paused partition hands out nothing and keeps its assignment across heartbeats; resumed,
/// it is read from where it stopped (classic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_keeps_the_partition_and_hands_out_nothing_classic() {
    pause_body(GroupProtocol::Classic).await;
}

/// librdkafka's at-least-once pattern: `enable_auto_offset_store(false)` and auto-commit
/// on; the application stores the offset of the records it finished. What Kafka holds is
/// what was stored (5), never what was handed out (10), also after the close's commit; a
/// successor starts there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_commit_commits_only_stored_offsets() {
    let topic = unique_topic("daily-store");
    let group = unique_topic("g-daily-store");
    create_topic(&broker(), &topic, 1).await;
    write(&topic, 0, 10).await;
    let mut m = member(&group, &topic, GroupProtocol::Classic)
        .enable_auto_commit(true)
        .auto_commit_interval(Duration::from_millis(100))
        .enable_auto_offset_store(false)
        .build()
        .expect("member");
    let mut read = Vec::new();
    for _ in 0..10 {
        read.push(next(&mut m).await);
    }
    m.store_offset(&read[4]).expect("stored");
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let c = group_committed(transport(), &group, &topic, 1).await;
        if let Some(Some((offset, epoch))) = c.get(&0) {
            assert_eq!(*offset, 5, "only the stored offset is committed");
            if BROKER == BrokerKind::Kafka {
                assert_eq!(*epoch, read[4].leader_epoch);
            }
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never committed");
        // Polling is what drives auto-commit: nothing more to read, so this waits.
        let _ = tokio::time::timeout(Duration::from_millis(100), m.next()).await;
    }
    // With the store off, a stored offset is the only thing a commit sends: commit() too.
    m.commit().await.expect("commit");
    m.close().await;
    let c = group_committed(transport(), &group, &topic, 1).await;
    assert_eq!(
        c[&0].map(|o| o.0),
        Some(5),
        "the close committed nothing more"
    );
    let mut next_member = member(&group, &topic, GroupProtocol::Classic)
        .build()
        .expect("successor");
    assert_eq!(
        next(&mut next_member).await.offset,
        5,
        "resumed after what was stored"
    );
    next_member.close().await;
}

/// `store_offset` with the store on is refused (`InvalidArgument`, naming the setting), and
/// for a partition not owned with `PartitionNotAssigned`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_offset_refusals_are_typed() {
    let topic = unique_topic("daily-store-no");
    let group = unique_topic("g-daily-store-no");
    create_topic(&broker(), &topic, 1).await;
    write(&topic, 0, 1).await;
    let mut on = member(&group, &topic, GroupProtocol::Classic)
        .build()
        .expect("member");
    let r = next(&mut on).await;
    let err = on.store_offset(&r).expect_err("store on");
    assert!(
        matches!(&err, kafkit::Error::InvalidArgument(m) if m.contains("enable_auto_offset_store")),
        "{err}"
    );
    on.close().await;
    let mut off = member(&group, &topic, GroupProtocol::Classic)
        .enable_auto_offset_store(false)
        .build()
        .expect("member");
    let r = next(&mut off).await;
    let mut other = r.clone();
    other.partition = 3;
    let err = off.store_offset(&other).expect_err("not owned");
    assert!(
        matches!(
            err,
            kafkit::Error::Group(GroupError::PartitionNotAssigned { partition: 3, .. })
        ),
        "{err}"
    );
    off.store_offset(&r).expect("owned");
    off.close().await;
}

/// `commit_record` commits the record's offset + 1 with its leader epoch (KIP-320), only its
/// partition, read back by OffsetFetch (classic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_record_commits_the_next_offset_with_the_leader_epoch() {
    commit_record_body(GroupProtocol::Classic).await;
}

pub(crate) async fn commit_record_body(protocol: GroupProtocol) {
    let topic = unique_topic("daily-commit");
    let group = unique_topic("g-daily-commit");
    create_topic(&broker(), &topic, 2).await;
    write(&topic, 0, 8).await;
    write(&topic, 1, 3).await;
    let mut m = member(&group, &topic, protocol).build().expect("member");
    let mut at6 = None;
    let mut seen = 0;
    while seen < 11 {
        let r = next(&mut m).await;
        seen += 1;
        if r.partition == 0 && r.offset == 6 {
            at6 = Some(r);
        }
    }
    let r = at6.expect("offset 6 read");
    m.commit_record(&r).await.expect("commit_record");
    let c = group_committed(transport(), &group, &topic, 2).await;
    // Kafka's batches carry the leader epoch and OffsetFetch answers it; tansu's batches carry
    // none (docs/testing.md), so there the offset alone is checked.
    let epoch = match BROKER {
        BrokerKind::Kafka => {
            assert!(r.leader_epoch.is_some(), "Kafka's batches carry the epoch");
            r.leader_epoch
        }
        BrokerKind::Tansu => None,
    };
    assert_eq!(c[&0], Some((7, epoch)), "offset + 1 and the record's epoch");
    assert_eq!(c[&1], None, "only the record's partition is committed");
    m.close().await;
}

pub(crate) async fn resubscribe_body(protocol: GroupProtocol) {
    let a = unique_topic("daily-sub-a");
    let b = unique_topic("daily-sub-b");
    let group = unique_topic("g-daily-sub");
    create_topic(&broker(), &a, 2).await;
    create_topic(&broker(), &b, 1).await;
    write(&a, 0, 3).await;
    write(&b, 0, 4).await;
    let mut m = member(&group, &a, protocol)
        .enable_auto_commit(true)
        .auto_commit_interval(Duration::from_millis(200))
        .build()
        .expect("member");
    let mut from_a = owns(&mut m, &parts(&a, &[0, 1])).await;
    while from_a.len() < 3 {
        from_a.push(next(&mut m).await);
    }
    assert!(from_a.iter().all(|r| *r.topic == *a));
    let generation = m.stats().generation;
    // Another topic: the member rejoins and owns b's partition only.
    m.subscribe([b.as_str()]).expect("subscribe b");
    assert_eq!(m.subscription(), vec![b.clone()]);
    let mut got = owns(&mut m, &parts(&b, &[0])).await;
    assert!(
        m.stats().generation > generation,
        "a new generation / epoch"
    );
    while got.iter().filter(|r| *r.topic == *b).count() < 4 {
        got.push(next(&mut m).await);
    }
    assert!(
        got.iter().all(|r| *r.topic == *b),
        "no record of a after the change: {got:?}"
    );
    // Unsubscribed: everything revoked (committed: auto-commit), out of the group.
    m.unsubscribe().expect("unsubscribe");
    owns(&mut m, &[]).await;
    let admin = kafkit::Client::new(transport());
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let _ = tokio::time::timeout(Duration::from_millis(100), m.next()).await;
        if m.stats().state == "unsubscribed" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "state {}",
            m.stats().state
        );
    }
    let members = group_members(&admin, &group, protocol).await;
    assert_eq!(members, 0, "the member left the group");
    let committed = group_committed(transport(), &group, &b, 1).await;
    assert_eq!(
        committed[&0].map(|o| o.0),
        Some(4),
        "b's records committed when revoked"
    );
    // Subscribed again: it joins again and reads on after its commits.
    write(&b, 0, 2).await;
    m.subscribe([b.as_str()]).expect("subscribe again");
    let mut again = owns(&mut m, &parts(&b, &[0])).await;
    while again.len() < 2 {
        again.push(next(&mut m).await);
    }
    let offsets: BTreeSet<i64> = again.iter().map(|r| r.offset).collect();
    assert_eq!(
        offsets,
        [4, 5].into(),
        "resumed at the commit, nothing twice"
    );
    m.close().await;
}

/// How many members the group has (DescribeGroups, or ConsumerGroupDescribe for KIP-848).
async fn group_members(admin: &kafkit::Client, group: &str, protocol: GroupProtocol) -> usize {
    match protocol {
        GroupProtocol::Consumer => {
            let d = admin
                .describe_kip848_groups(&[group], false)
                .await
                .expect("ConsumerGroupDescribe");
            d[0].1.as_ref().map_or(0, |g| g.members.len())
        }
        _ => {
            let d = admin
                .describe_consumer_groups(&[group], false)
                .await
                .expect("DescribeGroups");
            d[0].1.as_ref().map_or(0, |g| g.members.len())
        }
    }
}

/// A member dropped without `close()` as the last thing `block_on` runs on a multi-threaded
/// runtime, the runtime dropped right after (the end of `#[tokio::main] async fn main`): once
/// the drop returned the group has no member (DescribeGroups, or ConsumerGroupDescribe for
/// KIP-848), so the next run of the program is assigned at once instead of after the dropped
/// member's session timeout. Before the drop waited for the leave it asks for, the runtime
/// stopped the member task first and the member stayed in the group for its whole session.
pub(crate) fn dropped_member_body(protocol: GroupProtocol) {
    let topic = unique_topic("daily-drop");
    let group = unique_topic("g-daily-drop");
    // A session far longer than the test: a member still listed after the drop is one that
    // did not leave, never one whose session expired. tansu holds a new member's first join
    // about half the session timeout (docs/testing.md), so there it is 6 s (Kafka's minimum).
    let session = match BROKER {
        BrokerKind::Kafka => Duration::from_secs(30),
        BrokerKind::Tansu => Duration::from_secs(6),
    };
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime")
    };
    let first = runtime();
    first.block_on(async {
        create_topic(&broker(), &topic, 2).await;
        let mut m = member(&group, &topic, protocol)
            .session_timeout(session)
            .build()
            .expect("member");
        owns(&mut m, &parts(&topic, &[0, 1])).await;
        // Dropped, not closed, as the last thing of the future.
        drop(m);
    });
    drop(first);
    runtime().block_on(async {
        let admin = kafkit::Client::new(transport());
        let members = group_members(&admin, &group, protocol).await;
        assert_eq!(members, 0, "the dropped member left the group");
    });
}

/// A classic member dropped at the end of its runtime's `block_on` has left the group once
/// the drop returned.
#[test]
fn a_member_dropped_at_the_end_of_main_leaves_the_group_classic() {
    dropped_member_body(GroupProtocol::Classic);
}

/// A running classic member changes its subscription: rejoins and owns the new topic only;
/// unsubscribed, it revokes (commits) and leaves; subscribed again, it rejoins and resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_changes_after_build_classic() {
    resubscribe_body(GroupProtocol::Classic).await;
}

/// `auto_offset_reset` on the group builder wins over the `ReaderBuilder`'s: a member built
/// with a Reader set to `Latest` and the group builder's `Earliest` reads the records written
/// before it joined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_offset_reset_on_the_group_builder_wins() {
    let topic = unique_topic("daily-reset");
    let group = unique_topic("g-daily-reset");
    create_topic(&broker(), &topic, 1).await;
    write(&topic, 0, 3).await;
    let mut m = member(&group, &topic, GroupProtocol::Classic)
        // `member` set Earliest on the group builder before this Reader builder.
        .reader(Reader::builder(transport()).auto_offset_reset(AutoOffsetReset::Latest))
        .build()
        .expect("member");
    assert_eq!(next(&mut m).await.offset, 0, "from the earliest offset");
    m.close().await;
}
