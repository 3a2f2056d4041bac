//! The Java client (`kafka-clients` 4.4, `peers/java` run as [`JavaPeer`]) as a peer of ours on
//! Apache Kafka 4.4:
//! - group members of ours ([`GroupReader`]) and Java consumers in ONE group, with the classic
//!   protocol (`range`, `cooperative-sticky`: Kafka picks the protocol every member offers) and
//!   with KIP-848 (`group.protocol=consumer`, Kafka's server-side assignor): they split 12
//!   partitions with no overlap, no gap and evenly (3 each), every record is consumed, and after
//!   one of ours and one Java consumer leave the other two own 6 each and read on; the records
//!   of committed offsets are not read again;
//! - transactions both ways: Java's transactional producer (commit, abort, commit) read by our
//!   `read_committed` Reader (the committed values in order, nothing of the abort) and our
//!   transactional Writer read by Java's `read_committed` consumer; each `read_uncommitted`
//!   side reads the aborted records too, so the log does hold them;
//! - every codec both ways: Java writes gzip, snappy, lz4 and zstd batches (their headers say
//!   so) that our Reader reads equal, and Java reads equal what our Writer compresses.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use integration_tests::{
    JavaPeer, Member, MemberSpec, Tp, create_topic, kafka, partitions_of, raw_fetch_partition,
    unique_topic, write_each_partition,
};
use kafkit::group_balancer::{CooperativeStickyAssignor, GroupBalancer, RangeAssignor};
use kafkit::protocol::records::RecordBatchDecoder;
use kafkit::{
    AutoOffsetReset, Compression, GroupProtocol, GroupReader, GroupReaderBuilder, IsolationLevel,
    ProducerRecord, Reader, StartOffset, Transport, Writer,
};
use tokio::sync::Notify;

/// Upper bound of a wait that should end in seconds.
const GUARD: Duration = Duration::from_secs(30);

/// Upper bound of a group's convergence: a KIP-848 member hears of a new target assignment at
/// its next heartbeat, every `group.consumer.heartbeat.interval.ms` (5 s, Kafka's default and
/// minimum), and a move takes a revocation and an assignment.
const GROUP_GUARD: Duration = Duration::from_secs(60);

/// How a group's members agree on their partitions.
#[derive(Clone, Copy, Debug)]
enum Protocol {
    /// Classic, `range` on every member.
    Range,
    /// Classic, `cooperative-sticky` on every member (KIP-429).
    CooperativeSticky,
    /// KIP-848: the broker assigns.
    Consumer,
}

fn transport() -> Transport {
    Transport::builder([kafka()])
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(250))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport")
}

fn member(group: &str, topic: &str, protocol: Protocol) -> GroupReaderBuilder {
    let t = transport();
    let b = GroupReader::builder(t.clone(), group)
        .subscribe([topic])
        .session_timeout(Duration::from_secs(6))
        .heartbeat_interval(Duration::from_millis(500))
        .retry_backoff(Duration::from_millis(50))
        .reader(
            Reader::builder(t)
                .fetch_max_wait(Duration::from_millis(100))
                .auto_offset_reset(AutoOffsetReset::Earliest),
        );
    let assignor: Arc<dyn GroupBalancer> = match protocol {
        Protocol::Range => Arc::new(RangeAssignor::new()),
        Protocol::CooperativeSticky => Arc::new(CooperativeStickyAssignor::new()),
        Protocol::Consumer => return b.group_protocol(GroupProtocol::Consumer),
    };
    b.partition_assignment_strategy([assignor])
}

fn java_member(name: &str, group: &str, topic: &str, protocol: Protocol) -> JavaPeer {
    let bootstrap = kafka();
    let (proto, assignor) = match protocol {
        Protocol::Range => ("classic", "range"),
        Protocol::CooperativeSticky => ("classic", "cooperative-sticky"),
        Protocol::Consumer => ("consumer", ""),
    };
    let mut args = vec![
        ("bootstrap", bootstrap.as_str()),
        ("group", group),
        ("topic", topic),
        ("protocol", proto),
        ("session-ms", "6000"),
        ("client-id", name),
    ];
    if !assignor.is_empty() {
        args.push(("assignor", assignor));
    }
    JavaPeer::start(name, "consume-group", &args)
}

/// Waits until the members' and Java consumers' assignments are pairwise disjoint, together
/// exactly `all`, and even (each owns `all.len() / n`): the group converged. Returns each
/// one's partitions (ours first).
async fn converged(
    changed: &Notify,
    ours: &[&Member],
    java: &[&JavaPeer],
    all: &BTreeSet<Tp>,
) -> Vec<BTreeSet<Tp>> {
    let deadline = tokio::time::Instant::now() + GROUP_GUARD;
    let each = all.len() / (ours.len() + java.len());
    loop {
        // Java consumers have no notifier of ours: they are looked at every 20 ms as well.
        let notified = changed.notified();
        let mut splits: Vec<BTreeSet<Tp>> = ours.iter().map(|m| m.assignment()).collect();
        splits.extend(java.iter().map(|p| p.assignment()));
        let sum: usize = splits.iter().map(BTreeSet::len).sum();
        let union: BTreeSet<Tp> = splits.iter().flatten().cloned().collect();
        if splits.iter().all(|s| s.len() == each) && sum == union.len() && &union == all {
            return splits;
        }
        let names: Vec<&str> = ours
            .iter()
            .map(|m| m.name.as_str())
            .chain(java.iter().map(|p| p.name.as_str()))
            .collect();
        assert!(
            tokio::time::Instant::now() < deadline,
            "the group did not converge within {GROUP_GUARD:?}: {:?}",
            names.iter().zip(&splits).collect::<Vec<_>>()
        );
        let _ = tokio::time::timeout(Duration::from_millis(20), notified).await;
    }
}

/// Every record consumed by `ours` and `java` (and by members gone, `earlier`), once each
/// time it was handed out: `(partition, offset)`.
fn every(ours: &[&Member], java: &[&JavaPeer], earlier: &[Vec<(i32, i64)>]) -> Vec<(i32, i64)> {
    let mut all: Vec<(i32, i64)> = earlier.iter().flatten().copied().collect();
    for m in ours {
        all.extend(m.consumed.lock().unwrap().iter().map(|(_, p, o)| (*p, *o)));
    }
    for j in java {
        all.extend(j.records().iter().map(|r| (r.partition, r.offset)));
    }
    all
}

/// Waits until `want` distinct records were consumed.
async fn covered(
    changed: &Notify,
    ours: &[&Member],
    java: &[&JavaPeer],
    earlier: &[Vec<(i32, i64)>],
    want: usize,
) -> Vec<(i32, i64)> {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let notified = changed.notified();
        let all = every(ours, java, earlier);
        let distinct: BTreeSet<_> = all.iter().collect();
        if distinct.len() >= want {
            return all;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {want} records within {GUARD:?}",
            distinct.len()
        );
        let _ = tokio::time::timeout(Duration::from_millis(20), notified).await;
    }
}

/// Closes our member (commit, revocation, leave), bounded by [`GUARD`].
async fn close(m: Member) {
    let name = m.name.clone();
    tokio::time::timeout(GUARD, m.close())
        .await
        .unwrap_or_else(|_| panic!("{name} did not close within {GUARD:?}"));
}

/// Records handed out more than once.
fn twice(all: &[(i32, i64)]) -> Vec<(i32, i64)> {
    let mut seen = BTreeSet::new();
    all.iter().filter(|r| !seen.insert(**r)).copied().collect()
}

/// Two members of ours and two Java consumers in one group over 12 partitions: they split
/// them 3 each, read the 120 records, and after one of ours and one Java consumer leave the
/// other two own 6 each and read 60 more. Every member commits what it handed out (ours after
/// each batch, Java after each poll and on revocation), so nothing is read twice.
async fn ours_and_java_share_a_group(protocol: Protocol) {
    let topic = unique_topic("java-group");
    let group = unique_topic("g-java");
    create_topic(&kafka(), &topic, 12).await;
    write_each_partition(transport(), &topic, 12, 10, GUARD).await;
    let all = partitions_of(&[(&topic, 12)]);
    let changed = Arc::new(Notify::new());
    let spec = || MemberSpec {
        commit_each_batch: true,
        commit_on_revoke: false,
        changed: changed.clone(),
    };
    let started = std::time::Instant::now();
    let a = Member::start("ours-a", member(&group, &topic, protocol), spec());
    let mut p = java_member("java-p", &group, &topic, protocol);
    let b = Member::start("ours-b", member(&group, &topic, protocol), spec());
    let mut q = java_member("java-q", &group, &topic, protocol);
    let split = converged(&changed, &[&a, &b], &[&p, &q], &all).await;
    eprintln!(
        "{protocol:?}: converged in {:?}: {split:?}",
        started.elapsed()
    );
    // Classic: the assignor Kafka chose is the one every member offered. KIP-848: a member of
    // ours that fell back to classic would report it (`ProtocolFallback`, checked at the end).
    let chosen = match protocol {
        Protocol::Range => Some("range"),
        Protocol::CooperativeSticky => Some("cooperative-sticky"),
        Protocol::Consumer => None,
    };
    if let Some(name) = chosen {
        for m in [&a, &b] {
            assert_eq!(m.stats().protocol.as_deref(), Some(name), "{}", m.name);
        }
    }
    covered(&changed, &[&a, &b], &[&p, &q], &[], 120).await;

    // One of ours and one Java consumer leave: each commits and sends LeaveGroup (classic) or
    // a heartbeat at epoch -1 (KIP-848).
    let a_read: Vec<(i32, i64)> = every(&[&a], &[], &[]);
    close(a).await;
    q.close(GUARD).await;
    let q_read = every(&[], &[&q], &[]);
    let left = std::time::Instant::now();
    let split = converged(&changed, &[&b], &[&p], &all).await;
    eprintln!(
        "{protocol:?}: converged {:?} after the leave: {split:?}",
        left.elapsed()
    );
    write_each_partition(transport(), &topic, 12, 5, GUARD).await;
    let read = covered(&changed, &[&b], &[&p], &[a_read, q_read], 180).await;
    let again = twice(&read);
    let errors: Vec<String> = b
        .errors
        .lock()
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    let java_errors: Vec<serde_json::Value> = [&p, &q]
        .iter()
        .flat_map(|j| j.events())
        .filter(|e| e["event"] == "error" || e["event"] == "lost")
        .collect();
    // A Java commit refused in a rebalance is Java's to retry (it commits again on revocation):
    // shown, and only a record read twice because of it would fail the test.
    let refused: Vec<serde_json::Value> = [&p, &q]
        .iter()
        .flat_map(|j| j.events())
        .filter(|e| e["event"] == "commit-failed")
        .collect();
    close(b).await;
    p.close(GUARD).await;
    assert!(errors.is_empty(), "our member's errors: {errors:?}");
    assert!(java_errors.is_empty(), "Java's errors: {java_errors:?}");
    assert!(
        again.is_empty(),
        "records handed out twice: {again:?}; Java's refused commits: {refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_members_of_ours_and_java_split_and_converge() {
    ours_and_java_share_a_group(Protocol::Range).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooperative_sticky_members_of_ours_and_java_split_and_converge() {
    ours_and_java_share_a_group(Protocol::CooperativeSticky).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kip848_members_of_ours_and_java_split_and_converge() {
    ours_and_java_share_a_group(Protocol::Consumer).await;
}

// ----- transactions ------------------------------------------------------------------------------

fn reader(isolation: IsolationLevel, topic: &str) -> Reader {
    let r = Reader::builder(transport())
        .isolation_level(isolation)
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    r.assign([(topic, 0, StartOffset::Earliest)])
        .expect("assign");
    r
}

/// Values of partition 0 read by `reader` until its position is `end` (the log's end: past
/// every record and marker).
async fn read_to(reader: &Reader, topic: &str, end: i64) -> Vec<String> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + GUARD;
    while reader.position(topic, 0).map(|p| p.offset) != Some(end) {
        let parts = tokio::time::timeout_at(deadline, reader.next_batch())
            .await
            .unwrap_or_else(|_| panic!("{out:?}: position {end} not reached within {GUARD:?}"))
            .expect("next_batch");
        for p in parts {
            for r in &p.records {
                out.push(
                    String::from_utf8(r.value.as_deref().unwrap_or_default().to_vec()).unwrap(),
                );
            }
        }
    }
    out
}

/// The high watermark of partition 0.
async fn end_of(topic: &str) -> i64 {
    let conn = integration_tests::dial(&kafka(), "java-peer-end").await;
    raw_fetch_partition(&conn, topic, 0, 0, 1, IsolationLevel::ReadUncommitted)
        .await
        .high_watermark
}

/// The end of `topic`/0 once it reaches `n`, or as it is after the guard: a commit returns once
/// the coordinator logged it, and Kafka writes the marker after that.
async fn end_reaching(topic: &str, n: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let end = end_of(topic).await;
        if end >= n || tokio::time::Instant::now() >= deadline {
            return end;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// Java's transactional producer commits c0..c2, aborts a0..a2 and commits c3; our
/// `read_committed` Reader reads c0, c1, c2, c3 in order (Kafka lists the aborted
/// transaction in Fetch, the Reader drops it) up to the log's end, past the markers; a
/// `read_uncommitted` Reader reads all seven.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_transactions_read_by_our_read_committed_reader() {
    let topic = unique_topic("java-txn");
    create_topic(&kafka(), &topic, 1).await;
    let bootstrap = kafka();
    let txn_id = unique_topic("java-tx");
    let java = JavaPeer::start(
        "java-txn",
        "produce-txn",
        &[
            ("bootstrap", &bootstrap),
            ("topic", &topic),
            ("txn-id", &txn_id),
            ("plan", "c3,a3,c1"),
        ],
    );
    let events = java.finish(GUARD).await;
    let ends: Vec<&str> = events
        .iter()
        .filter_map(|e| e["event"].as_str())
        .filter(|e| *e == "committed" || *e == "aborted")
        .collect();
    assert_eq!(ends, ["committed", "aborted", "committed"]);
    // Seven records and three markers.
    let end = end_reaching(&topic, 10).await;
    assert_eq!(end, 10, "7 records and 3 markers");

    let rc = reader(IsolationLevel::ReadCommitted, &topic);
    assert_eq!(
        read_to(&rc, &topic, end).await,
        strings(&["c0", "c1", "c2", "c3"])
    );
    let ru = reader(IsolationLevel::ReadUncommitted, &topic);
    assert_eq!(
        read_to(&ru, &topic, end).await,
        strings(&["c0", "c1", "c2", "a0", "a1", "a2", "c3"])
    );
}

/// Our transactional Writer commits c0..c2, aborts a0..a2 and commits c3; Java's
/// `read_committed` consumer reads c0, c1, c2, c3 in order, and its `read_uncommitted` one all
/// seven.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_transactions_read_by_java_read_committed() {
    let topic = unique_topic("our-txn");
    create_topic(&kafka(), &topic, 1).await;
    let w = Writer::builder(transport())
        .transactional_id(unique_topic("our-tx"))
        .linger(Duration::from_millis(5))
        .build()
        .expect("writer");
    w.init_transactions(GUARD).await.expect("init");
    for (values, commit) in [
        (&["c0", "c1", "c2"][..], true),
        (&["a0", "a1", "a2"], false),
        (&["c3"], true),
    ] {
        w.begin_transaction().expect("begin");
        for v in values {
            // In the log before the transaction ends, so the abort has data to mark.
            w.produce(ProducerRecord::new(topic.as_str(), *v).partition(0))
                .await
                .expect("written");
        }
        if commit {
            w.commit_transaction(GUARD).await.expect("commit");
        } else {
            w.abort_transaction(GUARD).await.expect("abort");
        }
    }
    w.close(GUARD).await.expect("close");
    assert_eq!(
        end_reaching(&topic, 10).await,
        10,
        "7 records and 3 markers"
    );

    let bootstrap = kafka();
    let committed = JavaPeer::start(
        "java-read-committed",
        "consume-committed",
        &[("bootstrap", &bootstrap), ("topic", &topic)],
    );
    let uncommitted = JavaPeer::start(
        "java-read-uncommitted",
        "consume",
        &[("bootstrap", &bootstrap), ("topic", &topic)],
    );
    committed.finish(GUARD).await;
    uncommitted.finish(GUARD).await;
    assert_eq!(committed.values(), strings(&["c0", "c1", "c2", "c3"]));
    assert_eq!(
        uncommitted.values(),
        strings(&["c0", "c1", "c2", "a0", "a1", "a2", "c3"])
    );
}

// ----- codecs ------------------------------------------------------------------------------------

const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// Records per codec: one linger window, one batch or a few.
const RECORDS: usize = 200;

/// The codec of each batch of partition 0 of `topic`, in log order.
async fn codecs_in(topic: &str) -> Vec<Compression> {
    let conn = integration_tests::dial(&kafka(), "java-peer-codecs").await;
    let raw =
        raw_fetch_partition(&conn, topic, 0, 0, 1 << 20, IsolationLevel::ReadUncommitted).await;
    RecordBatchDecoder::new(raw.records.expect("records"))
        .map(|b| b.expect("batch").header.compression)
        .collect()
}

/// Java writes 200 records with each codec; its batches carry the codec, and our Reader
/// reads the values Java reported written, in order, at the offsets Java reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_writes_every_codec_and_our_reader_reads_it() {
    let bootstrap = kafka();
    for codec in CODECS {
        let topic = unique_topic(&format!("java-{codec}"));
        create_topic(&bootstrap, &topic, 1).await;
        let count = RECORDS.to_string();
        let name = codec.to_string();
        let java = JavaPeer::start(
            &format!("java-produce-{codec}"),
            "produce",
            &[
                ("bootstrap", &bootstrap),
                ("topic", &topic),
                ("compression", &name),
                ("count", &count),
                ("prefix", &format!("{codec} from java")),
            ],
        );
        java.finish(GUARD).await;
        let written = java.produced();
        assert_eq!(written.len(), RECORDS);
        let codecs = codecs_in(&topic).await;
        assert!(
            !codecs.is_empty() && codecs.iter().all(|c| *c == codec),
            "Java's batches: {codecs:?}"
        );
        let r = reader(IsolationLevel::ReadUncommitted, &topic);
        let mut got = Vec::new();
        let deadline = tokio::time::Instant::now() + GUARD;
        while got.len() < RECORDS {
            let parts = tokio::time::timeout_at(deadline, r.next_batch())
                .await
                .unwrap_or_else(|_| panic!("{codec}: {} of {RECORDS} within {GUARD:?}", got.len()))
                .expect("next_batch");
            for p in parts {
                for rec in &p.records {
                    got.push((
                        rec.offset,
                        String::from_utf8(rec.value.as_deref().unwrap_or_default().to_vec())
                            .unwrap(),
                    ));
                }
            }
        }
        let want: Vec<(i64, String)> = written
            .into_iter()
            .map(|w| (w.offset, w.value.unwrap_or_default()))
            .collect();
        assert_eq!(got, want, "{codec}: our Reader against what Java wrote");
    }
}

/// Our Writer writes 200 records with each codec; its batches carry the codec, and Java's
/// consumer reads the values equal and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_writer_writes_every_codec_and_java_reads_it() {
    let bootstrap = kafka();
    for codec in CODECS {
        let topic = unique_topic(&format!("ours-{codec}"));
        create_topic(&bootstrap, &topic, 1).await;
        let w = Writer::builder(transport())
            .compression(codec)
            .linger(Duration::from_millis(50))
            .build()
            .expect("writer");
        let want: Vec<String> = (0..RECORDS)
            .map(|i| format!("{codec} from kafkit {i}"))
            .collect();
        let mut acks = Vec::new();
        for v in &want {
            acks.push(
                w.send(ProducerRecord::new(topic.as_str(), v.clone()).partition(0))
                    .await
                    .expect("send"),
            );
        }
        for a in acks {
            a.await.expect("written");
        }
        w.close(GUARD).await.expect("close");
        let codecs = codecs_in(&topic).await;
        assert!(
            !codecs.is_empty() && codecs.iter().all(|c| *c == codec),
            "our batches: {codecs:?}"
        );
        let java = JavaPeer::start(
            &format!("java-consume-{codec}"),
            "consume",
            &[("bootstrap", &bootstrap), ("topic", &topic)],
        );
        java.finish(GUARD).await;
        assert_eq!(java.values(), want, "{codec}: Java against what we wrote");
    }
}
