//! The transactional [`Writer`] (KIP-98) on tansu, which keeps transactional ids and epochs,
//! writes the commit and abort markers and answers Fetch with the last stable offset:
//! - committed, aborted and committed transactions of our Writer: one marker per transaction
//!   in the log, and librdkafka's `read_committed` consumer and our Reader read back the
//!   records in order, without markers (tansu lists no aborted transactions in Fetch, as
//!   `reader_txn_tansu` shows for librdkafka's producer; the aborted records are expected out
//!   only when it does);
//! - zombie fencing: a second Writer of the same transactional id fences the first, whose
//!   next call fails fatal.

use super::{BROKER, broker, dial};
use std::time::Duration;

use integration_tests::{BrokerKind, create_topic_with, peer_consume, raw_fetch_partition, unique_topic};
use kafkit::protocol::messages::fetch_response;
use kafkit::protocol::records::{ControlRecordType, RecordBatchDecoder};
use kafkit::{
    IsolationLevel, ProduceError, ProducerRecord, Reader, StartOffset, TransactionPhase, Transport,
    Writer,
};

const T: Duration = Duration::from_secs(30);

fn transport() -> Transport {
    Transport::builder([broker()]).build().expect("transport")
}

fn writer(id: &str) -> Writer {
    Writer::builder(transport())
        .transactional_id(id)
        .linger(Duration::from_millis(5))
        .build()
        .expect("writer")
}

/// Partition 0 of `topic` from offset 0, undecoded, as `isolation` sees it.
async fn raw_fetch(topic: &str, isolation: IsolationLevel) -> fetch_response::PartitionData {
    let conn = dial("writer-txn-raw").await;
    raw_fetch_partition(&conn, topic, 0, 0, 1 << 20, isolation).await
}

/// `(producer id, transactional, control type)` of each batch of the raw log.
fn log_of(p: &fetch_response::PartitionData) -> Vec<(i64, bool, Option<ControlRecordType>)> {
    RecordBatchDecoder::new(p.records.clone().expect("records"))
        .map(|b| {
            let b = b.expect("our batches decode");
            let control = b
                .header
                .is_control
                .then(|| b.records.first().and_then(|r| r.control_type()))
                .flatten();
            (b.header.producer_id, b.header.is_transactional, control)
        })
        .collect()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_and_an_abort_write_markers_and_read_committed_reads_the_commits() {
    let conn = dial("writer-txn").await;
    let topic = create_topic_with(&conn, "writer-txn", 1).await;
    let w = writer(&unique_topic("tx"));
    w.init_transactions(T).await.expect("init");
    for (values, commit) in [
        (&["c0", "c1", "c2"][..], true),
        (&["a0", "a1", "a2"], false),
        (&["c3"], true),
    ] {
        w.begin_transaction().expect("begin");
        for v in values {
            // Each record is written before the transaction ends, so the abort has data to
            // mark.
            w.produce(ProducerRecord::new(topic.as_str(), *v).partition(0))
                .await
                .expect("written");
        }
        if commit {
            w.commit_transaction(T).await.expect("commit");
        } else {
            w.abort_transaction(T).await.expect("abort");
        }
        assert_eq!(w.transaction_state(), TransactionPhase::Ready);
    }
    // A commit returns once the coordinator logged it; Kafka writes the markers after that
    // (tansu before it answers): wait until the last one is in the log.
    let deadline = tokio::time::Instant::now() + T;
    let log = loop {
        let raw = raw_fetch(&topic, IsolationLevel::ReadUncommitted).await;
        let log = log_of(&raw);
        if log.iter().filter(|b| b.2.is_some()).count() == 3
            || tokio::time::Instant::now() >= deadline
        {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let markers: Vec<ControlRecordType> = log.iter().filter_map(|b| b.2).collect();
    assert_eq!(
        markers,
        [
            ControlRecordType::Commit,
            ControlRecordType::Abort,
            ControlRecordType::Commit
        ],
        "one marker per transaction: {log:?}"
    );
    assert!(
        log.iter().all(|b| b.1 && b.0 >= 0),
        "transactional batches with a producer id: {log:?}"
    );
    let raw_rc = raw_fetch(&topic, IsolationLevel::ReadCommitted).await;
    assert_eq!(
        raw_rc.last_stable_offset, raw_rc.high_watermark,
        "no transaction left open"
    );
    let listed = raw_rc.aborted_transactions.clone().unwrap_or_default();
    // Kafka lists the aborted transaction and read_committed readers drop it; tansu lists
    // none, and there they read it too.
    let want: Vec<String> = match BROKER {
        BrokerKind::Kafka => {
            assert_eq!(listed.len(), 1, "Kafka lists the aborted transaction");
            strings(&["c0", "c1", "c2", "c3"])
        }
        BrokerKind::Tansu => {
            assert!(listed.is_empty(), "tansu lists no aborted transaction");
            strings(&["c0", "c1", "c2", "a0", "a1", "a2", "c3"])
        }
    };

    let peer = peer_consume(&broker(), &topic, 1, want.len()).await;
    let got: Vec<String> = peer
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap_or_default()).unwrap())
        .collect();
    assert_eq!(got, want, "librdkafka read_committed");

    let reader = Reader::builder(transport())
        .isolation_level(IsolationLevel::ReadCommitted)
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    reader
        .assign([(topic.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    let mut read = Vec::new();
    while read.len() < want.len() {
        let parts = tokio::time::timeout(T, reader.next_batch())
            .await
            .expect("records within the guard")
            .expect("next_batch");
        for p in parts {
            for r in &p.records {
                read.push(
                    String::from_utf8(r.value.as_deref().unwrap_or_default().to_vec()).unwrap(),
                );
            }
        }
    }
    assert_eq!(read, want, "the Reader, read_committed");
    // Nothing more (no marker surfaces).
    if let Ok(more) = tokio::time::timeout(Duration::from_millis(500), reader.next_batch()).await {
        let more = more.expect("next_batch");
        assert!(
            more.iter().all(|p| p.records.is_empty()),
            "after the last commit: {more:?}"
        );
    }
    w.close(T).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_writer_of_the_same_id_fences_the_first() {
    let conn = dial("writer-txn-fence").await;
    let topic = create_topic_with(&conn, "writer-txn-fence", 1).await;
    let id = unique_topic("tx");
    let zombie = writer(&id);
    zombie.init_transactions(T).await.expect("init");
    zombie.begin_transaction().expect("begin");
    zombie
        .produce(ProducerRecord::new(topic.as_str(), "z0").partition(0))
        .await
        .expect("written before the fence");
    let fresh = writer(&id);
    fresh
        .init_transactions(T)
        .await
        .expect("the new writer inits");
    // The zombie's next call: a record (its epoch is old), then the commit.
    let late = zombie
        .produce(ProducerRecord::new(topic.as_str(), "z1").partition(0))
        .await;
    let commit = zombie.commit_transaction(T).await;
    let e = commit.expect_err("the zombie cannot commit");
    assert!(e.is_fatal(), "{e} (the late record: {late:?})");
    assert!(
        matches!(
            e.error_code(),
            Some(kafkit::ErrorCode::INVALID_PRODUCER_EPOCH | kafkit::ErrorCode::PRODUCER_FENCED)
        ),
        "{e}"
    );
    assert_eq!(zombie.transaction_state(), TransactionPhase::FatalError);
    assert!(zombie.begin_transaction().unwrap_err().is_fatal());
    let refused = zombie.send(ProducerRecord::new(topic.as_str(), "z2")).await;
    assert!(
        matches!(&refused, Err(ProduceError::Transaction(e)) if e.is_fatal()),
        "{refused:?}"
    );
    fresh.begin_transaction().expect("begin");
    fresh
        .produce(ProducerRecord::new(topic.as_str(), "f0").partition(0))
        .await
        .expect("written");
    fresh.commit_transaction(T).await.expect("commit");
}
