//! Consume-transform-produce ([`GroupTransactSession`]) against tansu, which runs classic
//! groups, stores transactional offsets (TxnOffsetCommit, made the group's committed offsets
//! by EndTxn(commit)), writes commit and abort markers and answers `read_committed` Fetch with
//! the last stable offset, but lists no aborted transactions in its Fetch answers (so its
//! `read_committed` readers see the records of aborted transactions: checked below). The
//! exactly-once check therefore reads the output log raw and applies the markers as a broker
//! with an aborted-transaction index would (the committed records of each producer are those
//! followed by its commit marker), and runs the Reader's own aborted-record filter
//! (`FetchedPartition::decode`) with the list such a broker would send.
//!
//! librdkafka's mock cluster is not used for this test: its TxnOffsetCommit answers without
//! storing the offsets and its EndTxn writes no markers, so neither the committed input offsets
//! nor the output of an aborted transaction can be told there.

use super::{BROKER, broker};
use integration_tests::BrokerKind;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use integration_tests::{create_topic, peer_consume, raw_fetch_partition, unique_topic};
use kafkit::admin::ListGroupOffsets;
use kafkit::protocol::messages::fetch_response;
use kafkit::protocol::records::{ControlRecordType, RecordBatchDecoder};
use kafkit::transact::{GroupTransactSession, TransactStats, TransactionOutcome};
use kafkit::{
    AutoOffsetReset, Client, ConsumerRecord, FetchedPartition, GroupReader, IsolationLevel,
    ProducerRecord, Reader, StartOffset, Transport, Writer,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const RECORDS: usize = 100_000;
const PARTITIONS: i32 = 4;
/// The whole run (the input written, processed, checked) should take well under this.
const GUARD: Duration = Duration::from_secs(90);

fn transport() -> Transport {
    Transport::builder([broker()])
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(250))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport")
}

/// A session of member `name` with the transactional id `group-name`.
///
/// Dynamic members: tansu 0.6 cannot rebalance static ones (KIP-345) reliably. A static
/// follower whose JoinGroup brings changed metadata (the generation it last had, in every
/// rejoin after a new generation) once the leader has synced puts the group back to forming
/// in the same generation, and the leader's heartbeats go on being answered `NONE`, so the
/// leader never rejoins and every follower's SyncGroup is answered `REBALANCE_IN_PROGRESS`
/// for good (seen on its debug log: the followers' partitions stalled past the guard). It also
/// holds a static member's JoinGroup and SyncGroup 3 s each without counting them as contact,
/// so a member slower than the session timeout through both is dropped right after its join.
/// A dynamic member's changed metadata bumps the generation, which the leader's heartbeat
/// learns.
fn session(group: &str, input: &str, name: &str) -> GroupTransactSession {
    let t = transport();
    let member = GroupReader::builder(t.clone(), group)
        .subscribe([input])
        .session_timeout(Duration::from_secs(10))
        .heartbeat_interval(Duration::from_millis(300))
        .rebalance_timeout(Duration::from_secs(10))
        .retry_backoff(Duration::from_millis(50))
        .require_stable_offsets(true)
        .reader(
            Reader::builder(t.clone())
                .fetch_max_wait(Duration::from_millis(100))
                .max_partition_fetch_bytes(16 << 10)
                .max_poll_records(1000)
                .auto_offset_reset(AutoOffsetReset::Earliest),
        );
    let writer = Writer::builder(t)
        .transactional_id(format!("{group}-{name}"))
        .linger(Duration::from_millis(5))
        .build()
        .expect("writer");
    GroupTransactSession::builder(member, writer)
        .commit_every(20_000)
        .commit_interval(Duration::from_secs(2))
        .timeout(Duration::from_secs(10))
        .build()
        .expect("session")
}

/// When the member's open transaction took its first record (`None` between transactions).
type OpenSince = Arc<Mutex<Option<std::time::Instant>>>;

/// Runs `session` until `stop`, copying each input record to the same partition of `output`;
/// returns its counters. `open` tells when its open transaction began.
fn spawn(
    name: &'static str,
    session: GroupTransactSession,
    output: String,
    stop: watch::Receiver<bool>,
) -> (JoinHandle<TransactStats>, OpenSince) {
    let (member, open) = member(name, session, output, stop);
    (tokio::spawn(member), open)
}

/// A member on a runtime of its own: `kill` drops every task of it at once (no commit, no
/// abort, no LeaveGroup; its connections just close), as a crash would.
struct Killable {
    /// `None` once killed.
    runtime: Option<tokio::runtime::Runtime>,
    task: Option<JoinHandle<TransactStats>>,
}

impl Killable {
    fn start(
        name: &'static str,
        session: impl FnOnce() -> GroupTransactSession,
        output: String,
        stop: watch::Receiver<bool>,
    ) -> (Killable, OpenSince) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        // The member, the writer and their transport spawn their tasks on this runtime.
        let session = {
            let _inside = runtime.enter();
            session()
        };
        let (member, open) = member(name, session, output, stop);
        let task = runtime.spawn(member);
        let killable = Killable {
            runtime: Some(runtime),
            task: Some(task),
        };
        (killable, open)
    }

    /// Stops every task of the member where it stands.
    async fn kill(mut self) {
        if let Some(r) = self.runtime.take() {
            r.shutdown_background();
        }
        let task = self.task.take().expect("not killed yet");
        assert!(task.await.unwrap_err().is_cancelled(), "killed");
    }
}

impl Drop for Killable {
    /// A test that failed before the kill: the runtime cannot be dropped inside the test's.
    fn drop(&mut self) {
        if let Some(r) = self.runtime.take() {
            r.shutdown_background();
        }
    }
}

/// The loop of [`spawn`], and when its open transaction began.
fn member(
    name: &'static str,
    mut session: GroupTransactSession,
    output: String,
    mut stop: watch::Receiver<bool>,
) -> (
    impl std::future::Future<Output = TransactStats> + Send + 'static,
    OpenSince,
) {
    let open: OpenSince = Arc::default();
    let since = Arc::clone(&open);
    let reset = Arc::clone(&open);
    let task = async move {
        let mut copy = move |r: &ConsumerRecord, out: &mut Vec<ProducerRecord>| {
            let value = r.value.clone().unwrap_or_default();
            out.push(ProducerRecord::new(output.as_str(), value).partition(r.partition));
            since
                .lock()
                .unwrap()
                .get_or_insert_with(std::time::Instant::now);
        };
        let mut owned = Vec::new();
        loop {
            let now = session.member().assignment();
            if now != owned {
                eprintln!(
                    "{name}: owns {now:?} (generation {})",
                    session.member().group_metadata().generation_id
                );
                owned = now;
            }
            let writer = session.writer().clone();
            let round = session.process_once(&mut copy);
            tokio::pin!(round);
            let mut slow = tokio::time::interval_at(
                tokio::time::Instant::now() + Duration::from_secs(3),
                Duration::from_secs(3),
            );
            let r = loop {
                tokio::select! {
                    r = &mut round => break Some(r),
                    _ = slow.tick() => eprintln!(
                        "{name}: a slow round; writer {} {:?}",
                        writer.transaction_state(),
                        writer.stats()
                    ),
                    _ = stop.changed() => break None,
                }
            };
            let Some(r) = r else { break };
            tokio::select! {
                r = std::future::ready(r) => match r {
                    Ok(None) => {}
                    Ok(Some(outcome)) => {
                        if matches!(outcome, TransactionOutcome::Aborted { .. }) {
                            eprintln!("{name}: {outcome:?}");
                        }
                        *reset.lock().unwrap() = None;
                    }
                    Err(kafkit::Error::Produce(kafkit::ProduceError::Transaction(e)))
                        if e.is_fatal() => panic!("{name}: fatal {e}"),
                    Err(e) => {
                        eprintln!("{name}: {e} (going on)");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                _ = stop.changed() => break,
            }
        }
        let stats = session.stats();
        eprintln!("{name}: {stats:?}");
        session.close().await.expect("close");
        stats
    };
    (task, open)
}

/// Waits until each of `members` has a transaction open that began less than 1 s ago (so
/// that a rebalance started now meets it open: they commit every 2 s).
async fn fresh_transactions(members: &[&OpenSince]) {
    fresh(members, true).await;
}

/// Waits until one of `members` has such a transaction open.
async fn fresh_transaction(members: &[&OpenSince]) {
    fresh(members, false).await;
}

async fn fresh(members: &[&OpenSince], all: bool) {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let young = |m: &&OpenSince| {
            m.lock()
                .unwrap()
                .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        };
        let fresh = if all {
            members.iter().all(young)
        } else {
            members.iter().any(young)
        };
        if fresh {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no fresh transactions"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The high watermark of each partition of `topic` (a Fetch answer's: tansu answers
/// ListOffsets `Latest` with the base offset of the last batch).
async fn ends(conn: &kafkit::Conn, topic: &str) -> BTreeMap<i32, i64> {
    let mut out = BTreeMap::new();
    for p in 0..PARTITIONS {
        out.insert(p, fetch(conn, topic, p, 0, 1).await.high_watermark);
    }
    out
}

/// One raw Fetch of `partition` from `offset` (read_uncommitted, at most `max_bytes`).
async fn fetch(
    conn: &kafkit::Conn,
    topic: &str,
    partition: i32,
    offset: i64,
    max_bytes: i32,
) -> fetch_response::PartitionData {
    let p = raw_fetch_partition(
        conn,
        topic,
        partition,
        offset,
        max_bytes,
        IsolationLevel::ReadUncommitted,
    )
    .await;
    assert!(
        p.error_code.is_ok(),
        "{topic}/{partition}: {}",
        p.error_code
    );
    p
}

/// The group's committed offsets, per partition.
async fn committed(admin: &Client, group: &str, input: &str) -> BTreeMap<i32, i64> {
    let spec = ListGroupOffsets::partitions(group, (0..PARTITIONS).map(|p| (input, p)));
    let mut committed = BTreeMap::new();
    if let Ok(groups) = admin.list_consumer_group_offsets(&[spec], false).await {
        for (_, parts) in groups {
            for ((_, p), om) in parts.into_iter().flatten() {
                if let Ok(Some(om)) = om {
                    committed.insert(p, om.offset);
                }
            }
        }
    }
    committed
}

/// Waits until the group committed `n` input records; returns how many it committed.
async fn committed_at_least(admin: &Client, group: &str, input: &str, n: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let committed = committed(admin, group, input).await;
        let sum = committed.values().sum::<i64>();
        if sum >= n {
            return sum;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{committed:?}: fewer than {n} committed within {GUARD:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What one output partition's log holds, its markers applied as a broker with an
/// aborted-transaction index applies them.
#[derive(Debug, Default)]
struct Log {
    /// Values of committed transactions, in offset order.
    committed: Vec<String>,
    /// Data records of aborted transactions.
    aborted_records: usize,
    /// `(producer id, first offset)` of each aborted transaction: the list a broker sends.
    aborted: Vec<(i64, i64)>,
    /// Every raw Fetch answer, for the Reader's filter.
    answers: Vec<(i64, fetch_response::PartitionData)>,
    high_watermark: i64,
}

/// Reads `partition` of `topic` raw from offset 0 to its end and applies the markers.
async fn read_log(conn: &kafkit::Conn, topic: &str, partition: i32) -> Log {
    let mut log = Log::default();
    // Data batches of a producer's open transaction: (first offset, values).
    let mut open: HashMap<i64, (i64, Vec<String>)> = HashMap::new();
    let mut offset = 0;
    loop {
        let p = fetch(conn, topic, partition, offset, 4 << 20).await;
        log.high_watermark = p.high_watermark;
        let data = p.records.clone().unwrap_or_default();
        let from = offset;
        for b in RecordBatchDecoder::new(data) {
            let b = b.expect("batches decode");
            if b.header.next_offset() <= offset {
                continue;
            }
            offset = b.header.next_offset();
            let pid = b.header.producer_id;
            assert!(b.header.is_transactional, "a non-transactional batch");
            if b.header.is_control {
                let (first, values) = open.remove(&pid).unwrap_or_default();
                match b.records.first().and_then(|r| r.control_type()) {
                    Some(ControlRecordType::Commit) => log.committed.extend(values),
                    Some(ControlRecordType::Abort) => {
                        if !values.is_empty() {
                            log.aborted_records += values.len();
                            log.aborted.push((pid, first));
                        }
                    }
                    other => panic!("unknown control record {other:?}"),
                }
            } else {
                let entry = open
                    .entry(pid)
                    .or_insert_with(|| (b.header.base_offset, Vec::new()));
                for r in &b.records {
                    let v = r.value.as_deref().unwrap_or_default();
                    entry.1.push(String::from_utf8(v.to_vec()).expect("utf-8"));
                }
            }
        }
        log.answers.push((from, p));
        if offset >= log.high_watermark || from == offset {
            break;
        }
    }
    assert_eq!(
        offset, log.high_watermark,
        "{topic}/{partition}: read to the end"
    );
    let left: Vec<(i64, usize)> = open.iter().map(|(p, (_, v))| (*p, v.len())).collect();
    assert!(
        left.iter().all(|(_, n)| *n == 0),
        "{topic}/{partition}: transactions left open (producer, records): {left:?}"
    );
    log
}

/// The Reader's aborted-record filter on the raw answers, with the list a broker would send.
fn reader_filter(topic: &str, log: &Log) -> Vec<String> {
    let list: Vec<fetch_response::AbortedTransaction> = log
        .aborted
        .iter()
        .map(|(pid, first)| {
            fetch_response::AbortedTransaction::default()
                .with_producer_id(*pid)
                .with_first_offset(*first)
        })
        .collect();
    let mut out = Vec::new();
    for (from, answer) in &log.answers {
        let mut p = answer.clone();
        p.aborted_transactions = Some(list.clone());
        let f = FetchedPartition::decode(topic, *from, IsolationLevel::ReadCommitted, p);
        assert!(f.records_error.is_none(), "{:?}", f.records_error);
        out.extend(f.records.iter().map(|r| {
            String::from_utf8(r.value.as_deref().unwrap_or_default().to_vec()).expect("utf-8")
        }));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_input_record_is_output_exactly_once_across_a_kill_and_a_rebalance() {
    let started = std::time::Instant::now();
    let bootstrap = broker();
    let (input, output) = (unique_topic("ctp-in"), unique_topic("ctp-out"));
    create_topic(&bootstrap, &input, PARTITIONS).await;
    create_topic(&bootstrap, &output, PARTITIONS).await;
    let group = unique_topic("ctp");

    // The input: RECORDS values `p:i`, round-robin over the partitions, written while the
    // members work (about 6 700 a second), so that the kill and the rebalance come mid-run.
    let input_writer = {
        let input = input.clone();
        tokio::spawn(async move {
            let w = Writer::builder(transport())
                .linger(Duration::from_millis(5))
                .build()
                .expect("writer");
            let mut futs = Vec::with_capacity(RECORDS);
            let mut tick = tokio::time::interval(Duration::from_millis(15));
            for chunk in 0..RECORDS / 100 {
                tick.tick().await;
                for i in chunk * 100..(chunk + 1) * 100 {
                    let p = i32::try_from(i).unwrap() % PARTITIONS;
                    let rec = ProducerRecord::new(input.as_str(), format!("{p}:{i}")).partition(p);
                    futs.push(w.send(rec).await.expect("send"));
                }
            }
            for f in futs {
                f.await.expect("input written");
            }
            w.close(GUARD).await.expect("close");
        })
    };
    let conn = kafkit::Dialer::builder()
        .client_id("ctp-check")
        .build()
        .dial(&bootstrap)
        .await
        .expect("dial");
    let admin = Client::new(transport());
    let (stop_tx, stop) = watch::channel(false);
    let (a, a_open) = spawn(
        "a",
        session(&group, &input, "a"),
        output.clone(),
        stop.clone(),
    );
    let (b, b_open) = Killable::start(
        "b",
        || session(&group, &input, "b"),
        output.clone(),
        stop.clone(),
    );

    // A third member joins mid-run, while the input still flows: a rebalance while
    // transactions are open (each revocation aborts one).
    let at = committed_at_least(&admin, &group, &input, 20_000).await;
    eprintln!("{at} committed at {:?}; c joins", started.elapsed());
    assert!(at < RECORDS as i64, "c joins mid-run");
    fresh_transaction(&[&a_open, &b_open]).await;
    let (c, c_open) = spawn(
        "c",
        session(&group, &input, "c"),
        output.clone(),
        stop.clone(),
    );

    // Once c works, b is killed mid-transaction (its runtime dropped: no commit, no abort, no
    // LeaveGroup) and restarted with the same transactional id: the new writer's
    // InitProducerId fences the old one and aborts the transaction it left open. The new
    // member joins at once; the dead one stays in the group until its session times out (two
    // more rebalances).
    fresh_transaction(&[&c_open]).await;
    fresh_transactions(&[&b_open]).await;
    let at = committed(&admin, &group, &input)
        .await
        .values()
        .sum::<i64>();
    eprintln!("{at} committed at {:?}; b killed", started.elapsed());
    assert!(at < RECORDS as i64, "b is killed mid-run");
    b.kill().await;
    let (b2, _) = spawn(
        "b2",
        session(&group, &input, "b"),
        output.clone(),
        stop.clone(),
    );

    // Every input record's offset committed.
    input_writer.await.expect("input writer");
    eprintln!("input written at {:?}", started.elapsed());
    let ends = ends(&conn, &input).await;
    assert_eq!(ends.values().sum::<i64>(), RECORDS as i64, "{ends:?}");
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let committed = committed(&admin, &group, &input).await;
        if committed == ends {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "committed {committed:?} never reached the ends {ends:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("all committed at {:?}", started.elapsed());
    stop_tx.send(true).expect("stop");
    let mut stats = Vec::new();
    for h in [a, c, b2] {
        stats.push(h.await.expect("member task"));
    }
    assert_eq!(
        committed(&admin, &group, &input).await,
        ends,
        "closing committed nothing more"
    );
    let rebalance_aborts: u64 = stats.iter().map(|s| s.aborted_by_rebalance).sum();
    let rewinds: u64 = stats.iter().map(|s| s.rewinds).sum();
    eprintln!("aborts by a rebalance {rebalance_aborts}, rewinds {rewinds}");
    assert!(
        rebalance_aborts >= 1,
        "the rebalance met an open transaction: {stats:?}"
    );

    // The output: each input value exactly once among the committed records, in the partition
    // it came from, in input order within it.
    let mut aborted_records = 0;
    let mut total = 0;
    for p in 0..PARTITIONS {
        let log = read_log(&conn, &output, p).await;
        let want: Vec<String> = (0..RECORDS)
            .filter(|i| i32::try_from(*i).unwrap() % PARTITIONS == p)
            .map(|i| format!("{p}:{i}"))
            .collect();
        assert_eq!(log.committed.len(), want.len(), "partition {p}");
        assert!(
            log.committed == want,
            "partition {p}: the committed output is not the input once, in order"
        );
        assert!(
            reader_filter(&output, &log) == want,
            "partition {p}: the Reader's filter with the broker's list"
        );
        aborted_records += log.aborted_records;
        total += log.committed.len() + log.aborted_records;
        eprintln!(
            "output {p}: {} committed, {} aborted records in {} aborted transactions, high watermark {}",
            log.committed.len(),
            log.aborted_records,
            log.aborted.len(),
            log.high_watermark
        );
    }
    assert!(
        aborted_records > 0,
        "the kill and the rebalance aborted work"
    );

    // read_committed readers: on Kafka every committed record and nothing else (the broker
    // lists the aborted transactions); on tansu every data record, the aborted ones too (tansu
    // lists no aborted transactions), and nothing else.
    let visible = match BROKER {
        BrokerKind::Kafka => total - aborted_records,
        BrokerKind::Tansu => total,
    };
    let reader = Reader::builder(transport())
        .isolation_level(IsolationLevel::ReadCommitted)
        .fetch_max_wait(Duration::from_millis(100))
        .max_poll_records(10_000)
        .build()
        .expect("reader");
    reader
        .assign((0..PARTITIONS).map(|p| (output.as_str(), p, StartOffset::Earliest)))
        .expect("assign");
    let mut read = 0;
    while read < visible {
        let parts = tokio::time::timeout(GUARD, reader.next_batch())
            .await
            .expect("records within the guard")
            .expect("next_batch");
        read += parts.iter().map(|p| p.records.len()).sum::<usize>();
    }
    assert_eq!(read, visible, "the Reader, read_committed");
    let peer = peer_consume(&bootstrap, &output, PARTITIONS, visible).await;
    assert_eq!(peer.len(), visible, "librdkafka, read_committed");
    eprintln!("done in {:?}", started.elapsed());
}
