//! The Java client's `KafkaShareConsumer` (`peers/java`'s `share-consume`, run as
//! [`JavaPeer`]) and our [`ShareReader`] as members of ONE share group (KIP-932) on Apache
//! Kafka 4.4: two of ours and two Java consumers, one of each kind in implicit and one in
//! explicit acknowledgement mode, share a topic of 12 partitions (the broker's `simple`
//! assignor gives each member some of them); every record written is delivered once, with
//! delivery count 1, to one of the four and accepted (the group's lag ends at 0 everywhere), and
//! both kinds get records. Then one of ours and one Java consumer close, and the other two
//! read everything written after. And what a closing member holds (Java's last poll in
//! implicit mode, ours unacknowledged in explicit mode) goes to a member of the other kind,
//! delivered a second time. The group's `share.auto.offset.reset` is set to `earliest` first,
//! as in `share_kafka`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::share_kafka::{lags, topic_and_group, transport, write_on};
use integration_tests::{JavaPeer, kafka};
use kafkit::{
    AcknowledgeType, AcknowledgementMode, Client, ProducerRecord, ShareReader, ShareRecord, Writer,
};
use tokio::time::Instant;

/// The bound on every wait of these tests. A share group member hears of a new assignment at
/// its next heartbeat, `group.share.heartbeat.interval.ms` (5 s by default) apart.
const T: Duration = Duration::from_secs(60);

/// The partitions of the topic.
const PARTITIONS: i32 = 12;

/// Records written to each partition, per round.
const PER_PARTITION: usize = 30;

/// Writes `PER_PARTITION` records `<round>-p<partition>-<i>` to each partition.
async fn write(topic: &str, round: &str) -> BTreeSet<String> {
    write_on(&transport(), topic, PARTITIONS, PER_PARTITION, round).await
}

/// A Java `KafkaShareConsumer` of `group` (its `client.id` is `name`).
fn java_member(name: &str, group: &str, topic: &str, mode: AcknowledgementMode) -> JavaPeer {
    let bootstrap = kafka();
    JavaPeer::start(
        name,
        "share-consume",
        &[
            ("bootstrap", bootstrap.as_str()),
            ("group", group),
            ("topic", topic),
            ("ack-mode", mode.name()),
            ("client-id", name),
        ],
    )
}

/// One delivery of a record to a member: `(member, value, delivery count)`.
type Delivery = (String, String, u16);

/// A `ShareReader` of ours with a name for messages.
struct Ours {
    name: String,
    reader: ShareReader,
    mode: AcknowledgementMode,
}

impl Ours {
    fn new(name: &str, group: &str, topic: &str, mode: AcknowledgementMode) -> Ours {
        let reader = ShareReader::builder(transport(), group)
            .topics([topic])
            .acknowledgement_mode(mode)
            .build()
            .expect("share reader");
        Ours {
            name: name.to_owned(),
            reader,
            mode,
        }
    }

    /// One poll of up to 200 ms, as Java's loop does it: in explicit mode each record is
    /// accepted and the acknowledgements committed (every outcome must be `Ok`); in implicit
    /// mode the next poll accepts them. The records go to `got`.
    async fn poll(&mut self, got: &mut Vec<Delivery>) {
        let records = self
            .reader
            .poll(Duration::from_millis(200))
            .await
            .unwrap_or_else(|e| panic!("{}: poll: {e}", self.name));
        if records.is_empty() {
            return;
        }
        if self.mode == AcknowledgementMode::Explicit {
            for r in &records {
                self.reader
                    .acknowledge(r, AcknowledgeType::Accept)
                    .unwrap_or_else(|e| panic!("{}: acknowledge: {e}", self.name));
            }
        }
        got.extend(records.iter().map(|r| self.delivery(r)));
        if self.mode == AcknowledgementMode::Explicit {
            self.commit().await;
        }
    }

    fn delivery(&self, r: &ShareRecord) -> Delivery {
        let v = r.value.as_deref().expect("a value");
        (
            self.name.clone(),
            String::from_utf8(v.to_vec()).expect("utf-8"),
            r.delivery_count(),
        )
    }

    /// Sends every acknowledgement (in implicit mode: accepts what the last poll handed out)
    /// and checks the broker took each.
    async fn commit(&mut self) {
        let outcomes = self
            .reader
            .commit(Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("{}: commit: {e}", self.name));
        let failed: Vec<_> = outcomes.iter().filter(|o| o.result.is_err()).collect();
        assert!(
            failed.is_empty(),
            "{}: acknowledgements refused: {failed:?}",
            self.name
        );
    }

    /// Commits what is left and leaves the group.
    async fn close(mut self) {
        self.commit().await;
        let stats = self.reader.stats();
        assert_eq!(stats.acknowledgements_failed, 0, "{}: {stats:?}", self.name);
        self.reader
            .close(Duration::from_secs(10))
            .await
            .expect("close");
    }
}

/// Polls each of `ours` once (the records to `got`): the wait of the loops below, which keeps
/// our members fetching and acknowledging while the Java ones run on their own.
async fn poll_all(ours: &mut [Ours], got: &mut Vec<Delivery>) {
    for m in ours {
        m.poll(got).await;
    }
}

/// Waits until the group has `members` members, each told its assignment (its epoch is the
/// assignment's) and holding some partitions, all `PARTITIONS` among them. Returns each
/// member's partitions by name (ours by member id, the Java ones by client id).
async fn settled(
    group: &str,
    ours: &mut [Ours],
    members: usize,
    got: &mut Vec<Delivery>,
) -> BTreeMap<String, BTreeSet<i32>> {
    let admin = Client::new(transport());
    let deadline = Instant::now() + T;
    loop {
        let d = admin
            .describe_share_groups(&[group], false)
            .await
            .expect("ShareGroupDescribe");
        let last = format!("{d:?}");
        if let Ok(desc) = &d[0].1 {
            let split: BTreeMap<String, BTreeSet<i32>> = desc
                .members
                .iter()
                .map(|m| {
                    let name = ours
                        .iter()
                        .find(|o| o.reader.member_id() == m.member_id)
                        .map_or(m.client_id.clone(), |o| o.name.clone());
                    let parts = m.assignment.iter().flat_map(|t| t.partitions.clone());
                    (name, parts.collect())
                })
                .collect();
            let union: BTreeSet<i32> = split.values().flatten().copied().collect();
            if split.len() == members
                && desc
                    .members
                    .iter()
                    .all(|m| m.member_epoch == desc.assignment_epoch)
                && split.values().all(|p| !p.is_empty())
                && union == (0..PARTITIONS).collect()
            {
                return split;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{members} members settled within {T:?}: {last}"
        );
        poll_all(ours, got).await;
    }
}

/// Reads until every one of `values` was delivered to `ours` (into `got`) or `java`, then
/// until the group's lag is 0 on every partition: all accepted. Our implicit members accept
/// their last records with a commit; the Java ones with their next poll, 100 ms on.
async fn read_all(
    group: &str,
    topic: &str,
    values: &BTreeSet<String>,
    ours: &mut [Ours],
    java: &[&JavaPeer],
    got: &mut Vec<Delivery>,
) {
    let deadline = Instant::now() + T;
    loop {
        poll_all(ours, got).await;
        let mut seen: BTreeSet<String> = got.iter().map(|d| d.1.clone()).collect();
        seen.extend(java.iter().flat_map(|j| j.values()));
        let missing = values.difference(&seen).count();
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of {} records not delivered within {T:?}",
            values.len()
        );
    }
    for m in ours.iter_mut() {
        m.commit().await;
    }
    loop {
        let lags = lags(group, topic, PARTITIONS).await;
        if lags.values().all(|l| *l == Some(0)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "lag 0 everywhere within {T:?}: {lags:?}"
        );
        // The wait: ours poll (anything they get now is a second delivery, which the caller
        // sees in `got`).
        poll_all(ours, got).await;
    }
}

/// Every delivery of `values` among ours (`got`) and `java`: each value exactly once, at
/// delivery count 1. Returns how many records each member got.
fn exactly_once(
    values: &BTreeSet<String>,
    got: &[Delivery],
    java: &[&JavaPeer],
) -> BTreeMap<String, usize> {
    let mut all: Vec<Delivery> = got
        .iter()
        .filter(|d| values.contains(&d.1))
        .cloned()
        .collect();
    for j in java {
        all.extend(j.records().into_iter().filter_map(|r| {
            let v = r.value?;
            values.contains(&v).then(|| {
                let count = r.delivery_count.expect("a share record's delivery_count");
                (j.name.clone(), v, count)
            })
        }));
    }
    let mut times: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
    for d in &all {
        times.entry(d.1.as_str()).or_default().push(d);
    }
    let twice: Vec<_> = times.values().filter(|ds| ds.len() > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    let seen: BTreeSet<String> = times.keys().map(|v| (*v).to_owned()).collect();
    assert_eq!(&seen, values, "every record delivered");
    let again: Vec<_> = all.iter().filter(|d| d.2 != 1).collect();
    assert!(again.is_empty(), "delivery count above 1: {again:?}");
    let mut per_member: BTreeMap<String, usize> = BTreeMap::new();
    for d in &all {
        *per_member.entry(d.0.clone()).or_default() += 1;
    }
    per_member
}

/// No `commit-failed` (nor `error`) event from a Java member.
fn no_failures(java: &[&JavaPeer]) {
    for j in java {
        let bad: Vec<_> = j
            .events()
            .into_iter()
            .filter(|e| e["event"] == "commit-failed" || e["event"] == "error")
            .collect();
        assert!(bad.is_empty(), "java peer {}: {bad:?}", j.name);
    }
}

/// Two `ShareReader`s and two Java share consumers in one group over 12 partitions: every
/// record delivered once and accepted, both kinds reading; after one of each closes, the other
/// two read everything written next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ours_and_java_share_one_share_group() {
    use AcknowledgementMode::{Explicit, Implicit};
    let (topic, group) = topic_and_group("share-java", PARTITIONS).await;
    let mut ja = java_member("java-implicit", &group, &topic, Implicit);
    let mut jb = java_member("java-explicit", &group, &topic, Explicit);
    let mut ours = vec![
        Ours::new("ours-implicit", &group, &topic, Implicit),
        Ours::new("ours-explicit", &group, &topic, Explicit),
    ];
    let mut got: Vec<Delivery> = Vec::new();

    // All four told their partitions before anything is written, so each can read some.
    let started = Instant::now();
    let split = settled(&group, &mut ours, 4, &mut got).await;
    eprintln!("four members settled in {:?}: {split:?}", started.elapsed());
    assert!(got.is_empty(), "nothing written yet: {got:?}");
    let values = write(&topic, "first").await;
    let started = Instant::now();
    read_all(&group, &topic, &values, &mut ours, &[&ja, &jb], &mut got).await;
    eprintln!("{} records read in {:?}", values.len(), started.elapsed());
    let per_member = exactly_once(&values, &got, &[&ja, &jb]);
    let java: usize = [&ja.name, &jb.name]
        .iter()
        .map(|n| per_member.get(*n).copied().unwrap_or(0))
        .sum();
    assert!(
        java > 0 && java < values.len(),
        "both kinds read: {per_member:?}"
    );
    no_failures(&[&ja, &jb]);

    // One of ours (implicit) and one Java consumer (explicit) leave; the other two take every
    // partition between them and read the next round.
    let gone = ours.remove(0);
    gone.close().await;
    jb.close(T).await;
    let started = Instant::now();
    let split = settled(&group, &mut ours, 2, &mut got).await;
    eprintln!("two members settled in {:?}: {split:?}", started.elapsed());
    let values = write(&topic, "second").await;
    let started = Instant::now();
    read_all(&group, &topic, &values, &mut ours, &[&ja], &mut got).await;
    eprintln!("{} records read in {:?}", values.len(), started.elapsed());
    let per_member = exactly_once(&values, &got, &[&ja]);
    assert_eq!(
        per_member.keys().cloned().collect::<BTreeSet<_>>(),
        BTreeSet::from([ja.name.clone(), ours[0].name.clone()]),
        "both read: {per_member:?}"
    );
    no_failures(&[&ja, &jb]);
    for m in ours {
        m.close().await;
    }
    ja.close(T).await;
}

/// What a member holds when it closes goes to a member of the other kind, delivered a second
/// time: a Java consumer in implicit mode closing after its first poll (`--max-records 1`:
/// Java 4.4's `close` sends only what was acknowledged, so the last poll's records are
/// released, not accepted) hands them to one of ours; one of ours in explicit mode closing with
/// nothing acknowledged hands them to a Java consumer. Both well within the 30 s lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_closing_member_holds_goes_to_the_other_kind() {
    use AcknowledgementMode::{Explicit, Implicit};
    let (topic, group) = topic_and_group("share-java-close", 1).await;
    let bootstrap = kafka();
    let first: BTreeSet<String> = (0..10).map(|i| format!("first-{i}")).collect();
    let w = Writer::builder(transport()).build().expect("writer");
    w.write(
        first
            .iter()
            .map(|v| ProducerRecord::new(&topic, v.clone()))
            .collect(),
    )
    .await
    .expect("written");

    // Java reads once and closes on its own.
    let java = JavaPeer::start(
        "java-close",
        "share-consume",
        &[
            ("bootstrap", bootstrap.as_str()),
            ("group", &group),
            ("topic", &topic),
            ("max-records", "1"),
        ],
    );
    java.finish(T).await;
    let held = java.records();
    assert!(!held.is_empty(), "java read something: {:?}", java.events());
    assert!(held.iter().all(|r| r.delivery_count == Some(1)), "{held:?}");
    let started = Instant::now();
    let mut ours = Ours::new("ours-after-java", &group, &topic, Implicit);
    let mut got = Vec::new();
    while got.len() < first.len() {
        assert!(
            started.elapsed() < T,
            "{} of {}: {got:?}",
            got.len(),
            first.len()
        );
        ours.poll(&mut got).await;
    }
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "released, not timed out: {:?}",
        started.elapsed()
    );
    let java_held: BTreeSet<String> = held.into_iter().filter_map(|r| r.value).collect();
    for (_, v, count) in &got {
        let want = if java_held.contains(v) { 2 } else { 1 };
        assert_eq!(*count, want, "{v}: {got:?}");
    }
    ours.close().await;

    // One of ours reads in explicit mode, acknowledges nothing and closes.
    let second: BTreeSet<String> = (0..10).map(|i| format!("second-{i}")).collect();
    w.write(
        second
            .iter()
            .map(|v| ProducerRecord::new(&topic, v.clone()))
            .collect(),
    )
    .await
    .expect("written");
    w.close(Duration::from_secs(10)).await.expect("close");
    let mut ours = Ours::new("ours-holding", &group, &topic, Explicit);
    let started = Instant::now();
    let mut records = Vec::new();
    while records.len() < second.len() {
        assert!(started.elapsed() < T, "{} of 10", records.len());
        records.extend(
            ours.reader
                .poll(Duration::from_millis(200))
                .await
                .expect("poll"),
        );
    }
    assert!(records.iter().all(|r| r.delivery_count() == 1));
    let started = Instant::now();
    ours.reader
        .close(Duration::from_secs(10))
        .await
        .expect("close");
    let mut java = JavaPeer::start(
        "java-after-ours",
        "share-consume",
        &[
            ("bootstrap", bootstrap.as_str()),
            ("group", &group),
            ("topic", &topic),
            ("ack-mode", "explicit"),
        ],
    );
    java.wait_until("read the 10 records ours held", T, |j| j.count() >= 10)
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "released, not timed out: {:?}",
        started.elapsed()
    );
    let again = java.records();
    let values: BTreeSet<String> = again.iter().filter_map(|r| r.value.clone()).collect();
    assert_eq!(values, second, "{again:?}");
    assert!(
        again.iter().all(|r| r.delivery_count == Some(2)),
        "{again:?}"
    );
    no_failures(&[&java]);
    java.close(T).await;
}
