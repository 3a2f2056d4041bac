//! What only Apache Kafka shows of writing (one KRaft node, `integration_tests::kafka`): an
//! idempotent batch sent twice is stored once (the mock checks no sequence without a
//! transactional id), the Writer's answers lost after Kafka appended (through the relay in front
//! of it) losing and duplicating nothing, a transaction left open past its timeout is aborted by the broker
//! (`transaction.timeout.ms`: neither stand-in enforces it), an abort after AddOffsetsToTxn
//! answers were lost ending the transaction Kafka began (the mock keeps no transaction state),
//! a group member waiting for a pending transactional commit of its group (RequireStable: tansu
//! ignores it, the mock has OffsetFetch v6), and offsets looked up by timestamp (tansu answers
//! the earliest offset for any time).

use std::time::Duration;

use bytes::Bytes;
use integration_tests::{create_topic_with, dial, kafka, unique_topic};
use kafkit::admin::{OffsetAndMetadata, TransactionState};
use kafkit::{
    Acks, AutoOffsetReset, Client, Compression, ConsumerGroupMetadata, GroupReader, IsolationLevel,
    OffsetSpec, ProduceBatches, ProducerRecord, Transport, Writer,
};
use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::InitProducerIdRequest;
use kafkit_protocol::records::{Record, RecordBatchEncoder, RecordBatchOptions};

const T: Duration = Duration::from_secs(30);

fn transport() -> Transport {
    Transport::builder([kafka()])
        .retry_backoff(Duration::from_millis(50))
        .build()
        .expect("transport")
}

/// One batch of `values` from producer `(id, epoch)` starting at `sequence`.
fn batch(id: i64, epoch: i16, sequence: i32, values: &[&'static str]) -> Bytes {
    let mut buf = bytes::BytesMut::new();
    let mut enc = RecordBatchEncoder::new(
        &mut buf,
        RecordBatchOptions::new().producer(id, epoch, sequence),
    )
    .expect("encoder");
    for v in values {
        enc.append(&Record::new(None, Some(Bytes::from_static(v.as_bytes()))).with_timestamp(1))
            .expect("append");
    }
    enc.finish().expect("finish");
    buf.freeze()
}

/// A batch resent with the same producer id, epoch and sequence (what a producer does when the
/// answer to the first send was lost) is answered with the first one's offset and stored once;
/// a sequence with a gap is refused with OUT_OF_ORDER_SEQUENCE_NUMBER.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_idempotent_batch_is_stored_once() {
    let conn = dial(&kafka(), "writer-kafka-dedup").await;
    let topic = create_topic_with(&conn, "writer-dedup", 1).await;
    let mut init = InitProducerIdRequest::default();
    init.transactional_id = None;
    init.transaction_timeout_ms = 60_000;
    init.producer_id = -1;
    init.producer_epoch = -1;
    let producer = transport().round_trip(init).await.expect("InitProducerId");
    assert!(producer.error_code.is_ok(), "{}", producer.error_code);
    let (id, epoch) = (producer.producer_id, producer.producer_epoch);

    let send = |bytes: Bytes| {
        let (conn, topic) = (&conn, &topic);
        async move {
            let mut batches = ProduceBatches::new(Compression::None);
            batches.add_batch(topic, 0, bytes).expect("add");
            let answer = conn
                .write_multi(&batches, Acks::All, T)
                .await
                .expect("Produce");
            (answer[0].error_code, answer[0].base_offset)
        }
    };
    let first = batch(id, epoch, 0, &["a", "b", "c"]);
    assert_eq!(send(first.clone()).await, (ErrorCode::NONE, 0));
    assert_eq!(
        send(first).await,
        (ErrorCode::NONE, 0),
        "the resent batch is answered with its first offset"
    );
    assert_eq!(
        send(batch(id, epoch, 3, &["d"])).await,
        (ErrorCode::NONE, 3)
    );
    let (gap, _) = send(batch(id, epoch, 10, &["x"])).await;
    assert_eq!(gap, ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER);

    let fetched = conn
        .fetch_multi(
            &[(&topic, 0, 0)],
            &kafkit::FetchParams::default().max_wait(Duration::from_millis(100)),
        )
        .await
        .expect("Fetch");
    let values: Vec<&[u8]> = fetched[0]
        .records
        .iter()
        .map(|r| r.value.as_deref().expect("value"))
        .collect();
    assert_eq!(values, [&b"a"[..], b"b", b"c", b"d"]);
}

/// A transaction left open past its `transaction_timeout` is aborted by the broker: its
/// records are never read by `read_committed`, and the writer's commit is refused with a typed
/// error instead of committing them. A new writer of the same transactional id then commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_aborts_a_transaction_left_open_past_its_timeout() {
    // The refusal's code depends on the flow: transactions v2 (Kafka 4.4's default).
    let _tv = integration_tests::kafka_transaction_version(2).await;
    let conn = dial(&kafka(), "writer-kafka-txn-timeout").await;
    let topic = create_topic_with(&conn, "writer-txn-timeout", 1).await;
    let id = unique_topic("txn-timeout");
    let admin = Client::new(transport());
    let writer = |timeout: Duration| {
        Writer::builder(transport())
            .transactional_id(id.as_str())
            .transaction_timeout(timeout)
            .linger(Duration::from_millis(1))
            .build()
            .expect("writer")
    };
    let w = writer(Duration::from_secs(2));
    w.init_transactions(T).await.expect("init");
    w.begin_transaction().expect("begin");
    w.produce(ProducerRecord::new(topic.as_str(), "timed out").partition(0))
        .await
        .expect("produce");
    // The coordinator aborts it within its timeout plus the broker's check interval (1 s here).
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let d = admin
            .describe_transactions(&[id.as_str()])
            .await
            .expect("DescribeTransactions");
        let state = d[0].1.as_ref().expect("described").state;
        if state == TransactionState::CompleteAbort {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still {state:?}: the broker did not abort"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let refused = w.commit_transaction(T).await;
    let e = refused.expect_err("the broker aborted this transaction: no commit");
    // Kafka bumped the epoch when it aborted: under transactions v2 EndTxn(commit) with the
    // old epoch is a retry of a transaction that ended in CompleteAbort, INVALID_TXN_STATE
    // (the classic flow answered PRODUCER_FENCED), fatal for this writer as for Java's
    // producer (TransactionManager.EndTxnHandler).
    assert!(e.is_fatal(), "{e}");
    assert_eq!(e.error_code(), Some(ErrorCode::INVALID_TXN_STATE), "{e}");
    w.close(Duration::from_secs(5)).await.ok();

    let fresh = writer(Duration::from_secs(60));
    fresh.init_transactions(T).await.expect("init");
    fresh.begin_transaction().expect("begin");
    fresh
        .produce(ProducerRecord::new(topic.as_str(), "committed").partition(0))
        .await
        .expect("produce");
    fresh.commit_transaction(T).await.expect("commit");
    fresh.close(Duration::from_secs(10)).await.expect("close");

    let reader = kafkit::Reader::builder(transport())
        .isolation_level(IsolationLevel::ReadCommitted)
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    reader
        .assign([(topic.as_str(), 0, kafkit::StartOffset::Earliest)])
        .expect("assign");
    let batch = tokio::time::timeout(T, reader.next_batch())
        .await
        .expect("read")
        .expect("next_batch");
    let values: Vec<&[u8]> = batch
        .iter()
        .flat_map(|p| &p.records)
        .map(|r| r.value.as_deref().expect("value"))
        .collect();
    assert_eq!(
        values,
        [&b"committed"[..]],
        "the aborted record is never read"
    );
}

/// ListOffsets by timestamp (KIP-79): the first record at or after the time, with its
/// timestamp; none (-1) past the last record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_by_timestamp_find_the_first_record_at_or_after_the_time() {
    let conn = dial(&kafka(), "writer-kafka-times").await;
    let topic = create_topic_with(&conn, "writer-times", 1).await;
    let w = Writer::builder(transport()).build().expect("writer");
    let records = (1..=3)
        .map(|k| {
            ProducerRecord::new(topic.as_str(), format!("t{k}"))
                .partition(0)
                .timestamp(1_700_000_000_000 + k * 1_000)
        })
        .collect();
    w.write(records).await.expect("written");
    let admin = Client::new(transport());
    let look = |ms: i64| {
        let (admin, topic) = (&admin, &topic);
        async move {
            let got = admin
                .list_offsets(
                    &[(topic.as_str(), 0, OffsetSpec::Timestamp(ms))],
                    IsolationLevel::ReadUncommitted,
                )
                .await
                .expect("ListOffsets");
            let info = *got[0].1.as_ref().expect("partition 0");
            (info.offset, info.timestamp)
        }
    };
    assert_eq!(look(0).await, (0, Some(1_700_000_001_000)));
    assert_eq!(look(1_700_000_002_500).await, (2, Some(1_700_000_003_000)));
    assert_eq!(look(1_700_000_002_000).await, (1, Some(1_700_000_002_000)));
    assert_eq!(look(1_700_000_009_000).await.0, -1, "past the last record");
    w.close(Duration::from_secs(10)).await.expect("close");
}

/// The Writer through a relay in front of Kafka: the answers to batches Kafka appended are lost
/// (undecodable, then an invalid frame size: failures no retry mends, after which the writer
/// bumps its epoch, KIP-360). Every record reported written is in the log at its offset, none
/// twice, none that was never sent (`writer_harden`'s item 1, which runs it on tansu).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_answers_to_appended_batches_lose_and_duplicate_nothing() {
    let (_one, relay) = integration_tests::kafka_relay().await;
    for fault in [
        integration_tests::ResponseFault::Undecodable,
        integration_tests::ResponseFault::InvalidFrameSize,
    ] {
        crate::writer_harden::lost_answers_never_rewind_through(&relay, fault).await;
    }
}

/// Issue 31 item 24 on Kafka (the classic flow: transaction.version 1 while it runs): every
/// answer to AddOffsetsToTxn is lost (cut mid-frame by the
/// relay, after Kafka carried the request out) until `send_offsets_to_transaction` times out,
/// so the coordinator holds an `Ongoing` transaction the writer never heard of. The abort must
/// end it there (it sends AddOffsetsToTxn again, then EndTxn), not leave it open until
/// `transaction.timeout.ms`; the next transaction of the same writer then commits by itself,
/// and a `read_committed` reader reads just its record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_after_lost_add_offsets_to_txn_answers_ends_the_coordinators_transaction() {
    const ADD_OFFSETS_TO_TXN: i16 = 25;
    // AddOffsetsToTxn is the classic flow's: transaction.version 1 for this test.
    let _tv = integration_tests::kafka_transaction_version(1).await;
    let (_one, relay) = integration_tests::kafka_relay().await;
    let conn = dial(&kafka(), "writer-kafka-lost-offsets").await;
    let topic = create_topic_with(&conn, "writer-lost-offsets", 1).await;
    let id = unique_topic("txn-lost-offsets");
    let group = ConsumerGroupMetadata::new(unique_topic("g-lost-offsets"));
    let admin = Client::new(transport());
    let coordinator_state = || {
        let (admin, id) = (&admin, &id);
        async move {
            let d = admin
                .describe_transactions(&[id.as_str()])
                .await
                .expect("DescribeTransactions");
            d[0].1.as_ref().expect("described").state
        }
    };
    let relayed = Transport::builder([relay.addr()])
        .retry_backoff(Duration::from_millis(50))
        .build()
        .expect("transport");
    let w = Writer::builder(relayed)
        .transactional_id(id.as_str())
        .linger(Duration::from_millis(1))
        .build()
        .expect("writer");
    w.init_transactions(T).await.expect("init");
    w.begin_transaction().expect("begin");
    relay.cut_within(ADD_OFFSETS_TO_TXN, u32::MAX);
    let offsets = [(topic.as_str(), 0, OffsetAndMetadata::new(1))];
    let e = w
        .send_offsets_to_transaction(&offsets, &group, Duration::from_secs(2))
        .await
        .expect_err("every answer is lost");
    assert!(e.is_retriable(), "{e}");
    relay.cut_within(ADD_OFFSETS_TO_TXN, 0);
    assert!(relay.cuts_within() >= 1, "an answer was cut");
    assert_eq!(
        coordinator_state().await,
        TransactionState::Ongoing,
        "the AddOffsetsToTxn whose answer was lost began the transaction on the coordinator"
    );
    w.abort_transaction(T).await.expect("abort");
    let state = coordinator_state().await;
    assert!(
        matches!(
            state,
            TransactionState::PrepareAbort | TransactionState::CompleteAbort
        ),
        "the abort ended the coordinator's transaction: still {state:?}"
    );
    w.begin_transaction().expect("begin");
    w.produce(ProducerRecord::new(topic.as_str(), "committed").partition(0))
        .await
        .expect("produce");
    w.send_offsets_to_transaction(&offsets, &group, T)
        .await
        .expect("offsets");
    w.commit_transaction(T).await.expect("commit");
    w.close(Duration::from_secs(10)).await.expect("close");
    let reader = kafkit::Reader::builder(transport())
        .isolation_level(IsolationLevel::ReadCommitted)
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    reader
        .assign([(topic.as_str(), 0, kafkit::StartOffset::Earliest)])
        .expect("assign");
    let batch = tokio::time::timeout(T, reader.next_batch())
        .await
        .expect("read")
        .expect("next_batch");
    let values: Vec<&[u8]> = batch
        .iter()
        .flat_map(|p| &p.records)
        .map(|r| r.value.as_deref().expect("value"))
        .collect();
    assert_eq!(values, [&b"committed"[..]]);
}

/// Issue 31 item 2 on Kafka: a member that takes a partition while another producer's
/// TxnOffsetCommit for its group is pending (that transaction still open) does not start from the
/// last stable commit: with RequireStable (the default) Kafka answers UNSTABLE_OFFSET_COMMIT until
/// the transaction ends, the member asks again, and it starts where the transaction committed.
/// Read without RequireStable (the old default), the member got no committed offset and started
/// at the earliest one, offsets 0..6 handed out again: the duplicates of a consume-transform-
/// produce hand-over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_waits_for_a_pending_transactional_commit_of_its_group() {
    let conn = dial(&kafka(), "writer-kafka-stable").await;
    let topic = create_topic_with(&conn, "writer-stable-offsets", 1).await;
    let group = unique_topic("g-stable-offsets");
    let plain = Writer::builder(transport()).build().expect("writer");
    for i in 0..10 {
        plain
            .produce(ProducerRecord::new(topic.as_str(), format!("v{i}")).partition(0))
            .await
            .expect("produce");
    }
    plain.close(Duration::from_secs(10)).await.expect("close");

    // The stalled owner: its transaction commits offset 6 for the group, and stays open.
    let w = Writer::builder(transport())
        .transactional_id(unique_topic("txn-stable-offsets").as_str())
        .build()
        .expect("writer");
    w.init_transactions(T).await.expect("init");
    w.begin_transaction().expect("begin");
    w.send_offsets_to_transaction(
        &[(topic.as_str(), 0, OffsetAndMetadata::new(6))],
        &ConsumerGroupMetadata::new(group.as_str()),
        T,
    )
    .await
    .expect("offsets");

    let t = transport();
    let mut member = GroupReader::builder(t.clone(), group.as_str())
        .subscribe([topic.as_str()])
        .session_timeout(Duration::from_secs(6))
        .heartbeat_interval(Duration::from_millis(300))
        .retry_backoff(Duration::from_millis(50))
        .reader(
            kafkit::Reader::builder(t)
                .fetch_max_wait(Duration::from_millis(100))
                .auto_offset_reset(AutoOffsetReset::Earliest),
        )
        .build()
        .expect("member");
    // Polled until it is in a generation (its partition is handed over once the committed offset
    // is read), then 2 s longer: nothing is handed out while the commit is pending.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut joined_at = None;
    loop {
        let now = tokio::time::Instant::now();
        assert!(
            now < deadline,
            "the member joined no generation within 30 s"
        );
        let batch = tokio::time::timeout(Duration::from_millis(200), member.next_batch()).await;
        if let Ok(b) = batch {
            let b = b.expect("poll");
            let offsets: Vec<i64> = b
                .iter()
                .flat_map(|p| &p.records)
                .map(|r| r.offset)
                .collect();
            assert!(
                offsets.is_empty(),
                "records handed out while the group's transactional commit is pending: {offsets:?}"
            );
        }
        if member.stats().generation < 1 {
            continue;
        }
        if now - *joined_at.get_or_insert(now) >= Duration::from_secs(2) {
            break;
        }
    }
    w.commit_transaction(T).await.expect("commit");
    let mut offsets = Vec::new();
    while offsets.len() < 4 {
        let b = tokio::time::timeout(T, member.next_batch())
            .await
            .expect("records after the commit")
            .expect("poll");
        offsets.extend(b.iter().flat_map(|p| &p.records).map(|r| r.offset));
    }
    assert_eq!(
        offsets,
        [6, 7, 8, 9],
        "started where the transaction committed"
    );
    member.close().await;
    w.close(Duration::from_secs(10)).await.expect("close");
}
