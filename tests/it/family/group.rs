//! Classic consumer group members ([`GroupReader`]) against tansu: one member reads every
//! record and commits exactly what it handed out, and a successor in the same group resumes
//! at those offsets (OffsetCommit / OffsetFetch on the member's own coordinator connection);
//! two members split a topic's partitions with no overlap and no gap, and the one left
//! takes everything over after the other leaves, with no record delivered twice (eager
//! revocation commits before giving partitions up).

use super::{BROKER, broker};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use integration_tests::{BrokerKind, Member, MemberSpec, create_topic, group_committed, partitions_of, settled, unique_topic, write_each_partition};
use kafkit::{AutoOffsetReset, GroupReader, GroupReaderBuilder, Reader, Transport};
use tokio::sync::Notify;

/// Upper bound for anything a test awaits that should finish much sooner.
pub(crate) const GUARD: Duration = Duration::from_secs(20);

pub(crate) fn transport() -> Transport {
    Transport::builder([broker()])
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(250))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport")
}

pub(crate) fn builder(group: &str, topic: &str) -> GroupReaderBuilder {
    let t = transport();
    GroupReader::builder(t.clone(), group)
        .subscribe([topic])
        .session_timeout(Duration::from_secs(6))
        .heartbeat_interval(Duration::from_millis(300))
        .retry_backoff(Duration::from_millis(50))
        .reader(
            Reader::builder(t)
                .fetch_max_wait(Duration::from_millis(100))
                .auto_offset_reset(AutoOffsetReset::Earliest),
        )
}

pub(crate) fn spec(changed: &Arc<Notify>) -> MemberSpec {
    MemberSpec {
        commit_each_batch: true,
        commit_on_revoke: false,
        changed: changed.clone(),
    }
}

/// Writes `per_partition` records to each of `partitions` partitions.
pub(crate) async fn write(topic: &str, partitions: i32, per_partition: usize) {
    write_each_partition(transport(), topic, partitions, per_partition, GUARD).await;
}

/// Waits until `members` consumed `n` records together.
pub(crate) async fn consumed(changed: &Notify, members: &[&Member], n: usize) {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let notified = changed.notified();
        let have: usize = members.iter().map(|m| m.count()).sum();
        if have >= n {
            return;
        }
        let errors: Vec<String> = members
            .iter()
            .flat_map(|m| {
                m.errors
                    .lock()
                    .unwrap()
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(
            tokio::time::Instant::now() < deadline,
            "{have} of {n} records within {GUARD:?}; errors {errors:?}"
        );
        let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
    }
}

/// The group's committed offset of each partition of `topic`.
async fn committed(group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, Option<i64>> {
    group_committed(transport(), group, topic, partitions)
        .await
        .into_iter()
        .map(|(p, o)| (p, o.map(|(offset, _)| offset)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_commits_what_it_handed_out_and_a_successor_resumes_there() {
    let topic = unique_topic("group-resume");
    let group = unique_topic("g-resume");
    create_topic(&broker(), &topic, 4).await;
    write(&topic, 4, 10).await;
    let changed = Arc::new(Notify::new());
    let a = Member::start("a", builder(&group, &topic), spec(&changed));
    let all = partitions_of(&[(&topic, 4)]);
    settled(&changed, &[&a], &[], &all, GUARD).await;
    consumed(&changed, &[&a], 40).await;
    let seen: BTreeSet<(i32, i64)> = a
        .consumed
        .lock()
        .unwrap()
        .iter()
        .map(|(_, p, o)| (*p, *o))
        .collect();
    assert_eq!(seen.len(), 40, "each record once");
    a.close().await;
    // Commit after each batch, and the auto-commit on close: the next offset of each
    // partition's last record.
    let offsets = committed(&group, &topic, 4).await;
    assert_eq!(
        offsets,
        (0..4).map(|p| (p, Some(10))).collect(),
        "committed offsets"
    );

    write(&topic, 4, 5).await;
    let b = Member::start("b", builder(&group, &topic), spec(&changed));
    consumed(&changed, &[&b], 20).await;
    let got: Vec<(i32, i64)> = b
        .consumed
        .lock()
        .unwrap()
        .iter()
        .map(|(_, p, o)| (*p, *o))
        .collect();
    assert!(
        got.iter().all(|(_, o)| *o >= 10),
        "the successor starts at the committed offsets: {got:?}"
    );
    assert_eq!(got.len(), 20);
    b.close().await;
    assert_eq!(
        committed(&group, &topic, 4).await,
        (0..4).map(|p| (p, Some(15))).collect()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_split_the_partitions_and_one_takes_over_when_the_other_leaves() {
    let topic = unique_topic("group-split");
    let group = unique_topic("g-split");
    create_topic(&broker(), &topic, 6).await;
    write(&topic, 6, 10).await;
    let changed = Arc::new(Notify::new());
    let all = partitions_of(&[(&topic, 6)]);
    let a = Member::start("a", builder(&group, &topic), spec(&changed));
    let b = Member::start("b", builder(&group, &topic), spec(&changed));
    let split = settled(&changed, &[&a, &b], &[], &all, GUARD).await;
    eprintln!("split: {split:?}");
    consumed(&changed, &[&a, &b], 60).await;
    let a_consumed = a.consumed.clone();
    a.close().await;
    let split = settled(&changed, &[&b], &[], &all, GUARD).await;
    assert_eq!(split[0], all);
    write(&topic, 6, 5).await;
    let before = a_consumed.lock().unwrap().len();
    consumed(&changed, &[&b], 90 - before).await;
    let b_consumed = b.consumed.clone();
    b.close().await;
    let mut every: Vec<(String, i32, i64)> = a_consumed.lock().unwrap().clone();
    every.extend(b_consumed.lock().unwrap().iter().cloned());
    let distinct: BTreeSet<_> = every.iter().cloned().collect();
    assert_eq!(distinct.len(), 90, "every record consumed");
    assert_eq!(
        every.len(),
        90,
        "none twice: the eager revocation committed before the partitions moved"
    );
}

/// `group_protocol = consumer` (KIP-848). Kafka runs it: the member reads everything with no
/// error. tansu lacks ConsumerGroupHeartbeat: the member reports `GroupError::ProtocolFallback`
/// naming the API, once, and goes on with the classic protocol (it reads everything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip848_runs_or_falls_back_to_classic_with_a_typed_error_naming_the_api() {
    let topic = unique_topic("group-fallback");
    let group = unique_topic("g-fallback");
    create_topic(&broker(), &topic, 2).await;
    write(&topic, 2, 10).await;
    let changed = Arc::new(Notify::new());
    let a = Member::start(
        "a",
        builder(&group, &topic).group_protocol(kafkit::GroupProtocol::Consumer),
        spec(&changed),
    );
    consumed(&changed, &[&a], 20).await;
    let errors: Vec<String> = a
        .errors
        .lock()
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    if BROKER == BrokerKind::Kafka {
        assert!(errors.is_empty(), "{errors:?}");
        a.close().await;
        return;
    }
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        matches!(
            a.errors.lock().unwrap()[0],
            kafkit::Error::Group(kafkit::GroupError::ProtocolFallback {
                api: kafkit::protocol::ApiKey::ConsumerGroupHeartbeat,
                ..
            })
        ),
        "{errors:?}"
    );
    a.close().await;
}

/// `group_protocol = auto` runs the consumer protocol (KIP-848) where the coordinator offers
/// ConsumerGroupHeartbeat (Apache Kafka 4.4) and the classic protocol where it does not
/// (tansu), without reporting the choice as an error; either way the member reads every
/// record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_protocol_auto_picks_what_the_coordinator_offers() {
    let topic = unique_topic("group-auto");
    let group = unique_topic("g-auto");
    create_topic(&broker(), &topic, 2).await;
    let changed = Arc::new(Notify::new());
    let m = Member::start(
        "auto",
        builder(&group, &topic).group_protocol(kafkit::GroupProtocol::Auto),
        spec(&changed),
    );
    settled(&changed, &[&m], &[], &partitions_of(&[(&topic, 2)]), GUARD).await;
    write(&topic, 2, 5).await;
    consumed(&changed, &[&m], 10).await;
    let expected = match BROKER {
        BrokerKind::Tansu => kafkit::GroupProtocol::Classic,
        BrokerKind::Kafka => kafkit::GroupProtocol::Consumer,
    };
    assert_eq!(m.stats().group_protocol, expected, "{:?}", m.stats());
    assert!(m.errors.lock().unwrap().is_empty(), "no fallback reported: {:?}", m.errors);
    m.close().await;
}
