//! The [`Reader`] on transactional data written by librdkafka's transactional producer
//! (`transactional.id`, `init_transactions`, `begin_transaction`, `commit_transaction`,
//! `abort_transaction`) into tansu, which writes the commit and abort markers and answers
//! Fetch with the last stable offset:
//! - markers never surface in either isolation level, and positions pass them: a Reader at the
//!   marker that ends the log does not fetch in a loop (Fetch requests counted while idle);
//! - `read_committed` stops at the last stable offset while a transaction is open, and goes on
//!   once it commits;
//! - tansu's Fetch answers list no aborted transactions (as librdkafka's mock), so the
//!   aborted-record filter is also run on the very batches librdkafka wrote, fetched raw, with
//!   the list a broker would send, built from the aborted transaction's producer id and first
//!   offset (`FetchedPartition::decode`, the same `AbortedFilter` decision as the Reader's).

use super::{BROKER, broker, dial};
use std::time::Duration;

use integration_tests::{BrokerKind, create_topic_with, peer_send, raw_fetch_partition, txn_producer, unique_topic};
use kafkit::protocol::messages::fetch_response;
use kafkit::protocol::records::{ControlRecordType, RecordBatchDecoder};
use kafkit::{Bytes, FetchedPartition, IsolationLevel, Reader, StartOffset, Transport};
use rdkafka::producer::Producer;
use rdkafka::util::Timeout;

const GUARD: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_millis(200);

fn reader(isolation: IsolationLevel) -> Reader {
    Reader::builder(Transport::builder([broker()]).build().expect("transport"))
        .isolation_level(isolation)
        .fetch_max_wait(WAIT)
        .max_poll_records(100_000)
        .build()
        .expect("reader")
}

/// Values read from partition 0 until `n` came (a failure after the guard).
async fn read_values(reader: &Reader, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + GUARD;
    while out.len() < n {
        let parts = tokio::time::timeout_at(deadline, reader.next_batch())
            .await
            .unwrap_or_else(|_| panic!("{out:?}: {} of {n} within {GUARD:?}", out.len()))
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

/// Asserts nothing more comes within `d`.
async fn quiet(reader: &Reader, d: Duration, what: &str) {
    if let Ok(got) = tokio::time::timeout(d, reader.next_batch()).await {
        panic!("{what}: got {got:?}");
    }
}

/// One batch of the raw log.
#[derive(Debug)]
struct Batch {
    base: i64,
    next: i64,
    producer_id: i64,
    transactional: bool,
    control: Option<ControlRecordType>,
    values: Vec<String>,
}

/// Partition 0 of `topic` from offset 0 as tansu answers it, undecoded (one Fetch by name).
async fn raw_fetch(topic: &str, isolation: IsolationLevel) -> fetch_response::PartitionData {
    let conn = dial("reader-txn-raw").await;
    raw_fetch_partition(&conn, topic, 0, 0, 1 << 20, isolation).await
}

fn batches(data: &Bytes) -> Vec<Batch> {
    RecordBatchDecoder::new(data.clone())
        .map(|b| {
            let b = b.expect("librdkafka's batches decode");
            Batch {
                base: b.header.base_offset,
                next: b.header.next_offset(),
                producer_id: b.header.producer_id,
                transactional: b.header.is_transactional,
                control: b
                    .header
                    .is_control
                    .then(|| b.records.first().and_then(|r| r.control_type()))
                    .flatten(),
                values: if b.header.is_control {
                    Vec::new()
                } else {
                    b.records
                        .iter()
                        .map(|r| {
                            String::from_utf8(r.value.as_deref().unwrap_or_default().to_vec())
                                .unwrap()
                        })
                        .collect()
                },
            }
        })
        .collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn librdkafka_transactions_markers_never_surface_and_positions_pass_them() {
    let conn = dial("reader-txn").await;
    let topic = create_topic_with(&conn, "reader-txn", 1).await;
    let producer = txn_producer(&broker(), &unique_topic("txn"));
    let t = Timeout::After(GUARD);
    // T1 committed, T2 aborted, T3 committed: each transaction ends with a marker, the last
    // one at the end of the log.
    for (values, commit) in [
        (&["c0", "c1", "c2"][..], true),
        (&["a0", "a1", "a2"], false),
        (&["c3"], true),
    ] {
        producer.begin_transaction().expect("begin");
        for v in values {
            peer_send(&producer, &topic, 0, v).await;
        }
        if commit {
            producer.commit_transaction(t).expect("commit");
        } else {
            producer.abort_transaction(t).expect("abort");
        }
    }
    // A commit returns once the coordinator logged it; Kafka writes the markers after that
    // (tansu before it answers): wait until the last one is in the log.
    let deadline = tokio::time::Instant::now() + GUARD;
    let (raw, log) = loop {
        let raw = raw_fetch(&topic, IsolationLevel::ReadUncommitted).await;
        let log = batches(raw.records.as_ref().expect("records"));
        if log.iter().filter(|b| b.control.is_some()).count() == 3
            || tokio::time::Instant::now() >= deadline
        {
            break (raw, log);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!("the log the broker holds: {log:#?}");
    let markers: Vec<(i64, ControlRecordType)> = log
        .iter()
        .filter_map(|b| b.control.map(|c| (b.base, c)))
        .collect();
    assert_eq!(
        markers.iter().map(|m| m.1).collect::<Vec<_>>(),
        [
            ControlRecordType::Commit,
            ControlRecordType::Abort,
            ControlRecordType::Commit
        ],
        "one marker per transaction: {log:?}"
    );
    assert!(
        log.iter().all(|b| b.transactional),
        "librdkafka wrote transactional batches"
    );
    let end = log.last().expect("batches").next;
    assert_eq!(raw.high_watermark, end);
    assert_eq!(markers[2].0, end - 1, "a marker ends the log");

    // read_uncommitted: every data record, no marker; the position passes the last marker.
    let ru = reader(IsolationLevel::ReadUncommitted);
    ru.assign([(topic.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    assert_eq!(
        read_values(&ru, 7).await,
        strings(&["c0", "c1", "c2", "a0", "a1", "a2", "c3"])
    );
    // read_committed: Kafka lists the aborted transaction T2 and the Reader drops it; tansu
    // lists none, so there it reads T2 too (the filter on these very batches with the list a
    // broker would send is shown below).
    let raw_rc = raw_fetch(&topic, IsolationLevel::ReadCommitted).await;
    let listed = raw_rc.aborted_transactions.clone().unwrap_or_default();
    assert_eq!(raw_rc.last_stable_offset, end, "no transaction open");
    let rc = reader(IsolationLevel::ReadCommitted);
    rc.assign([(topic.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    let want_rc: &[&str] = match BROKER {
        // Kafka lists T2, which starts at the first batch after T1's marker.
        BrokerKind::Kafka => {
            let t2 = markers[0].0 + 1;
            assert_eq!(
                listed.iter().map(|a| a.first_offset).collect::<Vec<_>>(),
                [t2],
                "Kafka lists the aborted transaction: {listed:?}"
            );
            &["c0", "c1", "c2", "c3"]
        }
        BrokerKind::Tansu => {
            assert!(listed.is_empty(), "tansu lists no aborted transaction");
            &["c0", "c1", "c2", "a0", "a1", "a2", "c3"]
        }
    };
    assert_eq!(read_values(&rc, want_rc.len()).await, strings(want_rc));

    // Both sit at the marker that ends the log: the position is past it, and idling there
    // costs at most one Fetch per fetch_max_wait (200 ms: ~10 in 2 s), never a spin.
    for r in [&ru, &rc] {
        let settled = tokio::time::Instant::now() + GUARD;
        while r.position(&topic, 0).map(|p| p.offset) != Some(end) {
            assert!(
                tokio::time::Instant::now() < settled,
                "position {:?}",
                r.stats()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(r.lag(&topic, 0), Some(0));
    }
    let before: Vec<u64> = [&ru, &rc]
        .iter()
        .map(|r| r.stats().fetch_requests.values().sum())
        .collect();
    quiet(
        &ru,
        Duration::from_secs(2),
        "read_uncommitted at the tail marker",
    )
    .await;
    for (r, b) in [&ru, &rc].iter().zip(before) {
        let n = r.stats().fetch_requests.values().sum::<u64>() - b;
        assert!(
            (1..=13).contains(&n),
            "{n} Fetch requests in 2 s at the tail marker"
        );
        assert_eq!(r.stats().partitions[0].fetch_offset, end);
    }
    quiet(
        &rc,
        Duration::from_millis(300),
        "read_committed at the tail marker",
    )
    .await;

    // The filter on librdkafka's batches, with the list a broker sends for T2: its producer id
    // and the offset of its first batch.
    let t2 = log
        .iter()
        .find(|b| b.values.first().is_some_and(|v| v == "a0"))
        .expect("T2's first batch");
    let mut with_list = raw_rc.clone();
    with_list.aborted_transactions = Some(vec![
        fetch_response::AbortedTransaction::default()
            .with_producer_id(t2.producer_id)
            .with_first_offset(t2.base),
    ]);
    let decode = |from: i64, level: IsolationLevel, p: &fetch_response::PartitionData| {
        let f = FetchedPartition::decode(&topic, from, level, p.clone());
        assert!(f.records_error.is_none(), "{:?}", f.records_error);
        let vals: Vec<String> = f
            .records
            .iter()
            .map(|r| String::from_utf8(r.value.as_deref().unwrap_or_default().to_vec()).unwrap())
            .collect();
        (vals, f.next_offset)
    };
    assert_eq!(
        decode(0, IsolationLevel::ReadCommitted, &with_list),
        (strings(&["c0", "c1", "c2", "c3"]), end),
        "T2 dropped, markers left out, the position past the last marker"
    );
    assert_eq!(
        decode(0, IsolationLevel::ReadUncommitted, &with_list),
        (strings(&["c0", "c1", "c2", "a0", "a1", "a2", "c3"]), end),
        "read_uncommitted ignores the list"
    );
    // From T1's commit marker (what a consumer at that marker fetches next): T2 still
    // dropped, since its first offset is after the marker.
    assert_eq!(
        decode(markers[0].0, IsolationLevel::ReadCommitted, &with_list),
        (strings(&["c3"]), end)
    );
    // From the abort marker: only T3.
    assert_eq!(
        decode(markers[1].0, IsolationLevel::ReadCommitted, &with_list),
        (strings(&["c3"]), end)
    );
    // From the tail marker alone: nothing, and the next offset is past it.
    assert_eq!(
        decode(end - 1, IsolationLevel::ReadCommitted, &with_list),
        (vec![], end)
    );
    // A list naming another producer drops nothing.
    let mut other = with_list.clone();
    other.aborted_transactions = Some(vec![
        fetch_response::AbortedTransaction::default()
            .with_producer_id(t2.producer_id + 1)
            .with_first_offset(t2.base),
    ]);
    assert_eq!(decode(0, IsolationLevel::ReadCommitted, &other).0.len(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_committed_stops_at_the_last_stable_offset_while_a_transaction_is_open() {
    let conn = dial("reader-lso").await;
    let topic = create_topic_with(&conn, "reader-lso", 1).await;
    let producer = txn_producer(&broker(), &unique_topic("txn-open"));
    let t = Timeout::After(GUARD);
    producer.begin_transaction().expect("begin");
    peer_send(&producer, &topic, 0, "c0").await;
    peer_send(&producer, &topic, 0, "c1").await;
    producer.commit_transaction(t).expect("commit");
    // c0 c1 at 0..2, the commit marker at 2; the open transaction starts at 3.
    producer.begin_transaction().expect("begin");
    let first_open = peer_send(&producer, &topic, 0, "o0").await;
    peer_send(&producer, &topic, 0, "o1").await;
    let raw = raw_fetch(&topic, IsolationLevel::ReadCommitted).await;
    eprintln!(
        "open transaction from {first_open}: high watermark {}, last stable offset {}",
        raw.high_watermark, raw.last_stable_offset
    );
    assert_eq!(
        raw.last_stable_offset, first_open,
        "tansu's LSO stops at the open transaction"
    );

    let rc = reader(IsolationLevel::ReadCommitted);
    rc.assign([(topic.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    let ru = reader(IsolationLevel::ReadUncommitted);
    ru.assign([(topic.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    assert_eq!(
        read_values(&ru, 4).await,
        strings(&["c0", "c1", "o0", "o1"])
    );
    assert_eq!(read_values(&rc, 2).await, strings(&["c0", "c1"]));
    quiet(
        &rc,
        Duration::from_secs(1),
        "read_committed past the last stable offset",
    )
    .await;
    let s = rc.stats().partitions.remove(0);
    assert_eq!(s.last_stable_offset, first_open);
    assert_eq!(s.high_watermark, first_open + 2);
    assert_eq!(
        s.position,
        Some(first_open),
        "past the commit marker, at the LSO"
    );
    assert_eq!(rc.lag(&topic, 0), Some(0), "lag against the LSO");
    assert_eq!(ru.lag(&topic, 0), Some(0));

    producer.commit_transaction(t).expect("commit");
    assert_eq!(read_values(&rc, 2).await, strings(&["o0", "o1"]));
    let end = first_open + 3;
    let settled = tokio::time::Instant::now() + GUARD;
    while rc.position(&topic, 0).map(|p| p.offset) != Some(end) {
        assert!(tokio::time::Instant::now() < settled, "{:?}", rc.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
