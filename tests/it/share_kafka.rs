//! Share groups (KIP-932) on Apache Kafka 4.4: `ShareReader` members acquiring records,
//! acknowledging them (Accept, Release, Reject), sharing partitions, and closing. Each test
//! makes its own topic and group and sets the group's `share.auto.offset.reset` to `earliest`
//! (a group config; Kafka's default, `latest`, would skip what the test wrote first).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use std::sync::{Arc, Mutex};

use base64::Engine as _;

use integration_tests::kafka_cluster::KafkaCluster;
use integration_tests::{create_topic, create_topic_replicated, kafka, unique_topic};
use kafkit::admin::{AlterConfigOp, ConfigResource, ConfigResourceType, NewTopic};
use kafkit::protocol::ApiKey;
use kafkit::protocol::messages::ShareAcknowledgeRequest;
use kafkit::{
    AcknowledgeType, AcknowledgementMode, Client, CoordinatorType, Error, ErrorCode,
    ProducerRecord, Reader, ShareAcquireMode, ShareError, ShareReader, ShareRecord, StartOffset,
    Transport, Writer,
};

/// The bound on every wait of these tests.
const T: Duration = Duration::from_secs(60);

pub(crate) fn transport() -> Transport {
    Transport::builder([kafka()]).build().expect("transport")
}

/// A transport on the three-node cluster, quick to retry.
fn cluster_transport(cluster: &KafkaCluster) -> Transport {
    Transport::builder(cluster.bootstrap().split(','))
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(500))
        .default_api_timeout(Duration::from_secs(15))
        .build()
        .expect("transport")
}

/// Sets the group's configs (`share.auto.offset.reset=earliest` and `more`) through `t`.
pub(crate) async fn group_configs(t: &Transport, group: &str, more: &[(&str, &str)]) {
    let mut ops = vec![AlterConfigOp::set("share.auto.offset.reset", "earliest")];
    ops.extend(more.iter().map(|(k, v)| AlterConfigOp::set(*k, *v)));
    let r = Client::new(t.clone())
        .incremental_alter_configs(
            &[(ConfigResource::new(ConfigResourceType::Group, group), ops)],
            false,
        )
        .await
        .expect("IncrementalAlterConfigs");
    assert!(r[0].1.is_ok(), "{r:?}");
}

/// Writes `per_partition` records `<tag>-p<partition>-<i>` to each of `partitions` through `t`.
pub(crate) async fn write_on(
    t: &Transport,
    topic: &str,
    partitions: i32,
    per_partition: usize,
    tag: &str,
) -> BTreeSet<String> {
    let w = Writer::builder(t.clone())
        .delivery_timeout(Duration::from_secs(60))
        .build()
        .expect("writer");
    let mut values = BTreeSet::new();
    let mut records = Vec::new();
    for p in 0..partitions {
        for i in 0..per_partition {
            let v = format!("{tag}-p{p}-{i}");
            values.insert(v.clone());
            records.push(ProducerRecord::new(topic, v).partition(p));
        }
    }
    w.write(records).await.expect("written");
    w.close(Duration::from_secs(10)).await.expect("close");
    values
}

/// Writes `per_partition` records `w-p<partition>-<i>` to each of `partitions`.
async fn write(topic: &str, partitions: i32, per_partition: usize) -> BTreeSet<String> {
    write_on(&transport(), topic, partitions, per_partition, "w").await
}

/// A topic of `partitions` and a share group reading it from the earliest offset.
pub(crate) async fn topic_and_group(prefix: &str, partitions: i32) -> (String, String) {
    topic_and_group_with(prefix, partitions, &[]).await
}

/// As [`topic_and_group`], with more group configs.
pub(crate) async fn topic_and_group_with(
    prefix: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> (String, String) {
    let topic = unique_topic(prefix);
    create_topic(&kafka(), &topic, partitions).await;
    let group = unique_topic(&format!("g-{prefix}"));
    group_configs(&transport(), &group, configs).await;
    (topic, group)
}

pub(crate) fn reader(group: &str, topic: &str, mode: AcknowledgementMode) -> ShareReader {
    ShareReader::builder(transport(), group)
        .topics([topic])
        .acknowledgement_mode(mode)
        .build()
        .expect("share reader")
}

pub(crate) fn value(r: &ShareRecord) -> String {
    String::from_utf8(r.value.as_deref().expect("a value").to_vec()).expect("utf-8")
}

/// Polls until `n` records came (or the bound): every record, in poll order.
async fn poll_n(reader: &mut ShareReader, n: usize) -> Vec<ShareRecord> {
    let deadline = tokio::time::Instant::now() + T;
    let mut got = Vec::new();
    while got.len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {n} records within {T:?}",
            got.len()
        );
        got.extend(reader.poll(Duration::from_secs(1)).await.expect("poll"));
    }
    got
}

/// The group's start offset and lag per partition (DescribeShareGroupOffsets).
pub(crate) async fn lags(group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, Option<i64>> {
    let admin = Client::new(transport());
    let tps: Vec<(&str, i32)> = (0..partitions).map(|p| (topic, p)).collect();
    let offsets = admin
        .list_share_group_offsets(group, Some(&tps))
        .await
        .expect("DescribeShareGroupOffsets");
    offsets
        .into_iter()
        .map(|(tp, o)| (tp.1, o.ok().and_then(|o| o.lag)))
        .collect()
}

/// One member, implicit mode: every record of 3 partitions comes once with delivery count 1,
/// each poll accepts the one before it, and after `close` the group's lag is 0 everywhere.
/// The member sent ShareFetch to its one broker, never more than rounds of one request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_reads_and_accepts_every_record() {
    let (topic, group) = topic_and_group("share-one", 3).await;
    let values = write(&topic, 3, 40).await;
    let mut r = reader(&group, &topic, AcknowledgementMode::Implicit);
    let got = poll_n(&mut r, values.len()).await;
    let seen: BTreeSet<String> = got.iter().map(value).collect();
    assert_eq!(seen, values, "every record once");
    assert_eq!(got.len(), values.len(), "no record twice");
    assert!(got.iter().all(|x| x.delivery_count() == 1));
    assert_eq!(r.acquisition_lock_timeout(), Some(Duration::from_secs(30)));
    // The next poll accepts them; nothing more comes.
    assert!(
        r.poll(Duration::from_millis(500))
            .await
            .expect("poll")
            .is_empty()
    );
    let stats = r.stats();
    assert!(stats.share_fetch_requests >= 1, "{stats:?}");
    assert_eq!(stats.records_delivered, values.len() as u64, "{stats:?}");
    assert_eq!(stats.acknowledgements_failed, 0, "{stats:?}");
    r.close(Duration::from_secs(10)).await.expect("close");
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let l = lags(&group, &topic, 3).await;
        if l.values().all(|x| *x == Some(0)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "lag 0 everywhere: {l:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Explicit mode: a poll while records are unacknowledged is refused; Release brings a record
/// back at once with delivery count 2; Reject never brings it back; acknowledging a record
/// twice after it was sent is refused; the commit reports each partition's outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_redelivers_and_reject_never_does() {
    let (topic, group) = topic_and_group("share-ack", 1).await;
    write(&topic, 1, 10).await;
    let mut r = reader(&group, &topic, AcknowledgementMode::Explicit);
    let first = poll_n(&mut r, 10).await;
    assert_eq!(first.len(), 10);
    match r.poll(Duration::from_millis(100)).await {
        Err(Error::Share(ShareError::UnacknowledgedRecords { count: 10, .. })) => {}
        other => panic!("expected UnacknowledgedRecords, got {other:?}"),
    }
    for rec in &first {
        let how = match rec.offset {
            0..=2 => AcknowledgeType::Release,
            3..=4 => AcknowledgeType::Reject,
            _ => AcknowledgeType::Accept,
        };
        r.acknowledge(rec, how).expect("acknowledge");
    }
    let outcomes = r.commit(Duration::from_secs(10)).await.expect("commit");
    let acked: Vec<i64> = outcomes
        .iter()
        .inspect(|o| assert!(o.result.is_ok(), "{o:?}"))
        .flat_map(|o| o.offsets.iter().copied())
        .collect();
    assert_eq!(acked, (0..10).collect::<Vec<_>>(), "{outcomes:?}");
    match r.acknowledge(&first[5], AcknowledgeType::Accept) {
        Err(Error::Share(ShareError::NotAcknowledgeable { offset: 5, .. })) => {}
        other => panic!("expected NotAcknowledgeable, got {other:?}"),
    }
    // The released three come back, at once, delivered a second time; the rejected never.
    let again = poll_n(&mut r, 3).await;
    let offsets: Vec<i64> = again.iter().map(|x| x.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2]);
    assert!(again.iter().all(|x| x.delivery_count() == 2), "{again:?}");
    for rec in &again {
        r.acknowledge(rec, AcknowledgeType::Accept).expect("accept");
    }
    assert!(
        r.poll(Duration::from_secs(1))
            .await
            .expect("poll")
            .is_empty()
    );
    r.close(Duration::from_secs(10)).await.expect("close");
    let l = lags(&group, &topic, 1).await;
    assert_eq!(l[&0], Some(0), "{l:?}");
}

/// A member closing with records it did not acknowledge releases them: another member of the
/// group gets them at once (well within the 30 s lock) with delivery count 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_releases_what_was_not_acknowledged() {
    let (topic, group) = topic_and_group("share-close", 1).await;
    write(&topic, 1, 5).await;
    let mut a = reader(&group, &topic, AcknowledgementMode::Explicit);
    let held = poll_n(&mut a, 5).await;
    a.acknowledge(&held[0], AcknowledgeType::Accept)
        .expect("accept");
    let started = tokio::time::Instant::now();
    a.close(Duration::from_secs(10)).await.expect("close");
    let mut b = reader(&group, &topic, AcknowledgementMode::Implicit);
    let got = poll_n(&mut b, 4).await;
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "released, not timed out"
    );
    let offsets: Vec<i64> = got.iter().map(|x| x.offset).collect();
    assert_eq!(offsets, vec![1, 2, 3, 4]);
    assert!(got.iter().all(|x| x.delivery_count() == 2), "{got:?}");
    b.close(Duration::from_secs(10)).await.expect("close");
}

/// Three members share 12 partitions: every record is delivered and accepted exactly once
/// among them, and each member got some of the partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_twelve_partitions() {
    let (topic, group) = topic_and_group("share-three", 12).await;
    let mut members: Vec<ShareReader> = (0..3)
        .map(|_| reader(&group, &topic, AcknowledgementMode::Implicit))
        .collect();
    // Wait until the group settled on three members before writing, so all three share.
    let deadline = tokio::time::Instant::now() + T;
    loop {
        for m in &mut members {
            assert!(
                m.poll(Duration::from_millis(200))
                    .await
                    .expect("poll")
                    .is_empty()
            );
        }
        let sizes: Vec<usize> = members
            .iter()
            .map(|m| m.stats().assigned_partitions)
            .collect();
        let named: BTreeSet<(Arc<str>, i32)> =
            members.iter().flat_map(ShareReader::assignment).collect();
        if sizes.iter().all(|s| *s > 0) && named.len() == 12 {
            assert!(named.iter().all(|(t, _)| **t == *topic), "{named:?}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "three members assigned: {sizes:?}"
        );
    }
    let values = write(&topic, 12, 30).await;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_member = [0usize; 3];
    let deadline = tokio::time::Instant::now() + T;
    while seen.len() < values.len() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} records",
            seen.len(),
            values.len()
        );
        for (i, m) in members.iter_mut().enumerate() {
            for rec in m.poll(Duration::from_millis(200)).await.expect("poll") {
                per_member[i] += 1;
                *seen.entry(value(&rec)).or_default() += 1;
            }
        }
    }
    for m in members {
        m.close(Duration::from_secs(10)).await.expect("close");
    }
    assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), values);
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    assert!(
        per_member.iter().all(|n| *n > 0),
        "each member read: {per_member:?}"
    );
}

/// The group's delivery count limit (2, the least Kafka allows) archives a record released
/// twice: after its second delivery and release nothing comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delivery_count_limit_archives_a_record_that_keeps_failing() {
    let (topic, group) =
        topic_and_group_with("share-limit", 1, &[("share.delivery.count.limit", "2")]).await;
    write(&topic, 1, 1).await;
    let mut r = reader(&group, &topic, AcknowledgementMode::Explicit);
    for delivery in 1..=2u16 {
        let got = poll_n(&mut r, 1).await;
        assert_eq!((got[0].offset, got[0].delivery_count()), (0, delivery));
        r.acknowledge(&got[0], AcknowledgeType::Release)
            .expect("release");
    }
    let outcomes = r.commit(Duration::from_secs(10)).await.expect("commit");
    assert!(outcomes.iter().all(|o| o.result.is_ok()), "{outcomes:?}");
    for _ in 0..3 {
        let got = r.poll(Duration::from_millis(500)).await.expect("poll");
        assert!(got.is_empty(), "archived, never delivered again: {got:?}");
    }
    r.close(Duration::from_secs(10)).await.expect("close");
}

/// A member killed while it holds records (its runtime dropped: no acknowledgement, no close,
/// no leave): its connections close, and another member gets the records, delivered a second
/// time, within the lock period plus a little.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_members_records_are_delivered_again() {
    let (topic, group) = topic_and_group("share-kill", 1).await;
    write(&topic, 1, 5).await;
    let (g, t) = (group.clone(), topic.clone());
    let victim = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (reader, held) = rt.block_on(async move {
            let mut a = reader(&g, &t, AcknowledgementMode::Explicit);
            let held = poll_n(&mut a, 5).await;
            (a, held.len())
        });
        drop(rt);
        drop(reader);
        held
    });
    assert_eq!(victim.join().expect("the victim's thread"), 5);
    let mut b = reader(&group, &topic, AcknowledgementMode::Implicit);
    let got = poll_n(&mut b, 5).await;
    let offsets: Vec<i64> = got.iter().map(|x| x.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2, 3, 4]);
    assert!(got.iter().all(|x| x.delivery_count() == 2), "{got:?}");
    b.close(Duration::from_secs(10)).await.expect("close");
}

/// Renew (KIP-1222) keeps a slow record with its member past the lock period (15 s here, the
/// least Kafka allows): another member polling all along never gets it, and the record is
/// accepted by the member that renewed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_keeps_a_slow_record_from_being_delivered_again() {
    let (topic, group) = topic_and_group_with(
        "share-renew",
        1,
        &[("share.record.lock.duration.ms", "15000")],
    )
    .await;
    write(&topic, 1, 1).await;
    let mut a = reader(&group, &topic, AcknowledgementMode::Explicit);
    let held = poll_n(&mut a, 1).await;
    assert_eq!(a.acquisition_lock_timeout(), Some(Duration::from_secs(15)));
    let mut b = reader(&group, &topic, AcknowledgementMode::Implicit);
    let until = tokio::time::Instant::now() + Duration::from_secs(25);
    let mut renewed = 0;
    while tokio::time::Instant::now() < until {
        // Renew every ~5 s (a third of the lock), while b polls for the record.
        a.acknowledge(&held[0], AcknowledgeType::Renew)
            .expect("renew");
        let outcomes = a.commit(Duration::from_secs(10)).await.expect("commit");
        assert!(outcomes.iter().all(|o| o.result.is_ok()), "{outcomes:?}");
        renewed += 1;
        let step = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < step {
            let got = b.poll(Duration::from_millis(500)).await.expect("poll");
            assert!(got.is_empty(), "renewed, so not delivered again: {got:?}");
        }
    }
    assert!(renewed >= 5);
    a.acknowledge(&held[0], AcknowledgeType::Accept)
        .expect("accept");
    let outcomes = a.commit(Duration::from_secs(10)).await.expect("commit");
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert!(outcomes[0].result.is_ok(), "{outcomes:?}");
    assert!(
        b.poll(Duration::from_secs(1))
            .await
            .expect("poll")
            .is_empty()
    );
    a.close(Duration::from_secs(10)).await.expect("close");
    b.close(Duration::from_secs(10)).await.expect("close");
}

/// A rejected record goes to the group's dead-letter topic (KIP-1191, `share.version` 2) when
/// the group names one (a topic under the `dlq.` prefix, made with
/// `errors.deadletterqueue.group.enable`): the copy there holds the record's value; the
/// accepted ones do not go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_record_lands_in_the_dead_letter_topic() {
    // Kafka takes dead-letter topics under the broker's prefix only (`dlq.` by default).
    let dlq = format!("dlq.{}", unique_topic("share"));
    let admin = Client::new(transport());
    let made = admin
        .create_topics(
            &[NewTopic::new(dlq.clone(), 1, 1)
                .config("errors.deadletterqueue.group.enable", "true")],
            false,
        )
        .await
        .expect("CreateTopics");
    assert!(made[0].1.is_ok(), "{made:?}");
    let (topic, group) = topic_and_group_with(
        "share-dlq-in",
        1,
        &[
            ("errors.deadletterqueue.topic.name", dlq.as_str()),
            ("errors.deadletterqueue.copy.record.enable", "true"),
        ],
    )
    .await;
    write(&topic, 1, 3).await;
    let mut r = reader(&group, &topic, AcknowledgementMode::Explicit);
    let got = poll_n(&mut r, 3).await;
    for rec in &got {
        let how = if rec.offset == 1 {
            AcknowledgeType::Reject
        } else {
            AcknowledgeType::Accept
        };
        r.acknowledge(rec, how).expect("acknowledge");
    }
    let outcomes = r.commit(Duration::from_secs(10)).await.expect("commit");
    assert!(outcomes.iter().all(|o| o.result.is_ok()), "{outcomes:?}");
    r.close(Duration::from_secs(10)).await.expect("close");
    let dead = Reader::builder(transport()).build().expect("reader");
    dead.assign([(dlq.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    let batch = tokio::time::timeout(T, dead.next_batch())
        .await
        .expect("the dead letter within the bound")
        .expect("next_batch");
    let values: Vec<String> = batch
        .iter()
        .flat_map(|p| p.records.iter())
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect();
    assert_eq!(values, vec!["w-p0-1".to_string()], "{batch:?}");
}

/// On the three-node cluster, 12 partitions whose leaders are spread over the three nodes: one
/// member's poll asks every leader at once (three requests in flight), never more than one
/// request per broker, each node gets ShareFetch requests, and every record comes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn share_fetch_goes_to_every_leader_at_once_one_request_each() {
    let cluster = KafkaCluster::acquire().await;
    let t = cluster_transport(&cluster);
    let topic = unique_topic("share-wide");
    create_topic_replicated(&cluster.bootstrap(), &topic, 12, 3).await;
    cluster.wait_in_sync(&topic, 12).await;
    let md = t.metadata_for(&[topic.as_str()]).await.expect("metadata");
    let leaders: BTreeSet<i32> = md
        .topic(&topic)
        .expect("topic")
        .partitions
        .iter()
        .map(|p| p.leader_id)
        .collect();
    assert_eq!(
        leaders.len(),
        3,
        "leaders spread over the nodes: {leaders:?}"
    );
    let group = unique_topic("g-share-wide");
    group_configs(&t, &group, &[]).await;
    let values = write_on(&t, &topic, 12, 50, "w").await;
    let mut r = ShareReader::builder(t.clone(), group.as_str())
        .topics([topic.as_str()])
        .build()
        .expect("share reader");
    let got = poll_n(&mut r, values.len()).await;
    let seen: BTreeSet<String> = got.iter().map(value).collect();
    assert_eq!(seen, values);
    assert_eq!(got.len(), values.len(), "no record twice");
    let stats = r.stats();
    assert_eq!(
        stats.max_requests_in_flight, 3,
        "every leader asked at once: {stats:?}"
    );
    assert!(
        stats.share_fetch_requests + stats.share_acknowledge_requests <= stats.fetch_rounds * 3,
        "at most one request per broker per round: {stats:?}"
    );
    r.close(Duration::from_secs(10)).await.expect("close");
    for node in leaders {
        assert!(
            t.requests_sent(node, ApiKey::ShareFetch) > 0,
            "node {node} got ShareFetch requests"
        );
    }
}

/// Which node a fault test kills.
#[derive(Clone, Copy, Debug)]
enum Victim {
    /// The group coordinator's (FindCoordinator, key type GROUP).
    GroupCoordinator,
    /// The share coordinator's of the topic's partition 0 (FindCoordinator, key type SHARE,
    /// key `group:topic id:partition`: it keeps the share-partition's state,
    /// `__share_group_state`).
    ShareCoordinator,
}

/// On the three-node cluster, the node that coordinates the group (and leads some of the
/// partitions) is killed while a member reads, and started again: the member finds the new
/// coordinator and leaders and reads on. Every record written before, during and after is
/// delivered; a record delivered twice is one whose acknowledgement the member was told
/// failed (the dead leader held its lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinators_node_killed_and_restarted_loses_nothing() {
    kill_and_restart_while_reading(Victim::GroupCoordinator).await;
}

/// As above, the node of the share coordinator that keeps partition 0's share state killed
/// and restarted: the partitions' leaders persist acknowledgements through another one, and
/// nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_share_coordinators_node_killed_and_restarted_loses_nothing() {
    kill_and_restart_while_reading(Victim::ShareCoordinator).await;
}

async fn kill_and_restart_while_reading(victim: Victim) {
    let cluster = KafkaCluster::acquire().await;
    let t = cluster_transport(&cluster);
    let topic = unique_topic("share-kill3");
    create_topic_replicated(&cluster.bootstrap(), &topic, 6, 3).await;
    cluster.wait_in_sync(&topic, 6).await;
    let group = unique_topic("g-share-kill3");
    group_configs(&t, &group, &[]).await;
    let failed: Arc<Mutex<BTreeSet<(i32, i64)>>> = Arc::default();
    let f = failed.clone();
    let mut r = ShareReader::builder(t.clone(), group.as_str())
        .topics([topic.as_str()])
        .acknowledgement_commit_callback(move |c| {
            if c.result.is_err() {
                let mut f = f.lock().unwrap();
                f.extend(c.offsets.iter().map(|o| (c.partition, *o)));
            }
        })
        .build()
        .expect("share reader");
    let mut values = write_on(&t, &topic, 6, 50, "before").await;
    let mut seen: BTreeMap<String, Vec<(i32, i64)>> = BTreeMap::new();
    let read = |got: Vec<ShareRecord>, seen: &mut BTreeMap<String, Vec<(i32, i64)>>| {
        for x in got {
            seen.entry(value(&x))
                .or_default()
                .push((x.partition, x.offset));
        }
    };
    read(poll_n(&mut r, 100).await, &mut seen);
    let coordinator = match victim {
        Victim::GroupCoordinator => t.coordinator(CoordinatorType::Group, &group).await,
        Victim::ShareCoordinator => {
            let md = t.metadata_for(&[topic.as_str()]).await.expect("metadata");
            let id = md.topic(&topic).expect("topic").topic_id;
            let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.0);
            t.coordinator(CoordinatorType::Share, &format!("{group}:{id}:0"))
                .await
        }
    }
    .expect("coordinator");
    cluster.kill(coordinator).await;
    values.extend(write_on(&t, &topic, 6, 50, "during").await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !values.iter().all(|v| seen.contains_key(v)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} records with node {coordinator} down",
            seen.len(),
            values.len()
        );
        read(
            r.poll(Duration::from_secs(1)).await.expect("poll"),
            &mut seen,
        );
    }
    cluster.restart(coordinator).await;
    cluster.wait_in_sync(&topic, 6).await;
    values.extend(write_on(&t, &topic, 6, 50, "after").await);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !values.iter().all(|v| seen.contains_key(v)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} records after node {coordinator} came back",
            seen.len(),
            values.len()
        );
        read(
            r.poll(Duration::from_secs(1)).await.expect("poll"),
            &mut seen,
        );
    }
    r.commit(Duration::from_secs(10)).await.expect("commit");
    r.close(Duration::from_secs(10)).await.expect("close");
    let failed = failed.lock().unwrap().clone();
    for (v, at) in &seen {
        if at.len() > 1 {
            assert!(
                at[..at.len() - 1].iter().all(|x| failed.contains(x)),
                "{v} delivered {at:?}, but only these acknowledgements failed: {failed:?}"
            );
        }
    }
}

/// `record_limit` (KIP-1206): a poll never hands out more than `max_poll_records`, though the
/// records were written as one batch of 20, which `batch_optimized` hands out whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_limit_acquires_at_most_max_poll_records() {
    let (topic, group) = topic_and_group("share-limit-mode", 1).await;
    write(&topic, 1, 20).await;
    let mut r = ShareReader::builder(transport(), group.as_str())
        .topics([topic.as_str()])
        .acquire_mode(ShareAcquireMode::RecordLimit)
        .max_poll_records(3)
        .build()
        .expect("share reader");
    let mut offsets = Vec::new();
    let deadline = tokio::time::Instant::now() + T;
    while offsets.len() < 20 {
        assert!(tokio::time::Instant::now() < deadline, "{offsets:?}");
        let got = r.poll(Duration::from_secs(1)).await.expect("poll");
        assert!(got.len() <= 3, "at most 3 a poll: {got:?}");
        offsets.extend(got.iter().map(|x| x.offset));
    }
    assert_eq!(offsets, (0..20).collect::<Vec<_>>());
    r.close(Duration::from_secs(10)).await.expect("close");
    let (topic, group) = topic_and_group("share-batch-mode", 1).await;
    write(&topic, 1, 20).await;
    let mut r = ShareReader::builder(transport(), group.as_str())
        .topics([topic.as_str()])
        .max_poll_records(3)
        .build()
        .expect("share reader");
    let got = poll_n(&mut r, 1).await;
    assert!(got.len() <= 3, "the poll hands out at most 3 even so");
    assert!(
        r.stats().records_acquired >= 20,
        "the whole batch acquired: {:?}",
        r.stats()
    );
    r.close(Duration::from_secs(10)).await.expect("close");
}

/// A member not polled for `max_poll_interval` leaves the group: another member gets its
/// partitions and, once the locks run out (15 s), its records; its next poll says so once
/// (`MaxPollIntervalExceeded`), and it joins again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_not_polled_leaves_and_its_records_go_to_another() {
    let (topic, group) = topic_and_group_with(
        "share-stall",
        1,
        &[("share.record.lock.duration.ms", "15000")],
    )
    .await;
    write(&topic, 1, 3).await;
    let mut a = ShareReader::builder(transport(), group.as_str())
        .topics([topic.as_str()])
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .max_poll_interval(Duration::from_secs(2))
        .build()
        .expect("share reader");
    let held = poll_n(&mut a, 3).await;
    let mut b = reader(&group, &topic, AcknowledgementMode::Implicit);
    let got = poll_n(&mut b, 3).await;
    assert!(got.iter().all(|x| x.delivery_count() == 2), "{got:?}");
    assert_eq!(a.stats().member_epoch, 0, "left: {:?}", a.stats());
    for rec in &held {
        a.acknowledge(rec, AcknowledgeType::Accept)
            .expect("acknowledge");
    }
    match a.poll(Duration::from_millis(100)).await {
        Err(Error::Share(ShareError::MaxPollIntervalExceeded { .. })) => {}
        other => panic!("expected MaxPollIntervalExceeded, got {other:?}"),
    }
    let deadline = tokio::time::Instant::now() + T;
    while a.stats().member_epoch <= 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "joined again: {:?}",
            a.stats()
        );
        a.poll(Duration::from_millis(200)).await.expect("poll");
    }
    a.close(Duration::from_secs(10)).await.expect("close");
    b.close(Duration::from_secs(10)).await.expect("close");
}

/// The member's share session closed behind its back (a ShareAcknowledge at epoch -1 with its
/// member id, as a restarted broker or an evicted session would leave it): the broker releases
/// the records it held, the member's acknowledgements of them come back INVALID_RECORD_STATE
/// per partition, and it opens a new session and reads on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_session_is_opened_again_and_stale_acknowledgements_are_reported() {
    let (topic, group) = topic_and_group("share-session", 1).await;
    write(&topic, 1, 4).await;
    let mut r = reader(&group, &topic, AcknowledgementMode::Explicit);
    let held = poll_n(&mut r, 4).await;
    let conn = integration_tests::dial(&kafka(), "share-session-closer").await;
    let close = ShareAcknowledgeRequest::default()
        .with_group_id(Some(group.clone()))
        .with_member_id(Some(r.member_id().to_string()))
        .with_share_session_epoch(-1);
    let closed = conn.request(&close).await.expect("ShareAcknowledge");
    assert!(closed.error_code.is_ok(), "{closed:?}");
    for rec in &held {
        r.acknowledge(rec, AcknowledgeType::Accept)
            .expect("acknowledge");
    }
    let outcomes = r.commit(Duration::from_secs(10)).await.expect("commit");
    let codes: Vec<_> = outcomes
        .iter()
        .map(|o| o.result.as_ref().err().and_then(Error::error_code))
        .collect();
    assert!(!outcomes.is_empty(), "the acknowledgements were answered");
    assert!(
        codes
            .iter()
            .all(|c| *c == Some(ErrorCode::INVALID_RECORD_STATE)),
        "{outcomes:?}"
    );
    // Released by the closed session, they come again (delivery count 2) on the new one.
    let again = poll_n(&mut r, 4).await;
    assert!(again.iter().all(|x| x.delivery_count() == 2), "{again:?}");
    for rec in &again {
        r.acknowledge(rec, AcknowledgeType::Accept)
            .expect("acknowledge");
    }
    let outcomes = r.commit(Duration::from_secs(10)).await.expect("commit");
    assert!(outcomes.iter().all(|o| o.result.is_ok()), "{outcomes:?}");
    r.close(Duration::from_secs(10)).await.expect("close");
}

/// `subscribe` on a running member: the next heartbeat carries the new topics, the coordinator
/// assigns their partitions, and their records come; the old topic's records written after it
/// left the subscription do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_moves_a_running_member_to_other_topics() {
    let (first, group) = topic_and_group("share-sub-a", 1).await;
    let second = unique_topic("share-sub-b");
    create_topic(&kafka(), &second, 2).await;
    write(&first, 1, 3).await;
    let mut r = reader(&group, &first, AcknowledgementMode::Implicit);
    let got = poll_n(&mut r, 3).await;
    assert!(got.iter().all(|x| *x.topic == *first));
    r.subscribe([second.as_str()]).expect("subscribe");
    let deadline = tokio::time::Instant::now() + T;
    while r.assignment().iter().any(|(t, _)| **t == *first) || r.assignment().len() != 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}",
            r.assignment()
        );
        assert!(
            r.poll(Duration::from_millis(200))
                .await
                .expect("poll")
                .is_empty()
        );
    }
    write(&first, 1, 3).await;
    let values = write(&second, 2, 5).await;
    let got = poll_n(&mut r, 10).await;
    assert!(got.iter().all(|x| *x.topic == *second), "{got:?}");
    assert_eq!(got.iter().map(value).collect::<BTreeSet<_>>(), values);
    assert!(
        r.subscribe(Vec::<String>::new()).is_err(),
        "an empty subscription is refused"
    );
    r.close(Duration::from_secs(10)).await.expect("close");
}
