//! Topic ids on the produce side (KIP-516) on Apache Kafka 4.4, seen on the wire through the
//! relay in front of Kafka (`integration_tests::kafka_relay`, recording): the Writer's Produce
//! goes at v13 and names its topic by the id Metadata gave, not by name; a topic deleted and
//! created again under the same name while a Writer writes to it answers the old id
//! UNKNOWN_TOPIC_ID, and the Writer refreshes its metadata and writes to the new topic (its
//! new id on the wire), nothing lost. Neither stand-in speaks Produce v13.

use std::time::Duration;

use bytes::{Buf, Bytes};
use integration_tests::{create_topic_with, dial, kafka, wait_for_topic};
use kafkit::protocol::messages::ProduceRequest;
use kafkit::protocol::{ErrorCode, Message, Request, Uuid};
use kafkit::{Client, ProducerRecord, Reader, StartOffset, Transport, Writer};

const T: Duration = Duration::from_secs(30);
const PRODUCE: i16 = 0;

/// One Produce the relay carried: its version, each topic's `(name, id)` as decoded at that
/// version, and the partitions' error codes of its answer.
#[derive(Debug, Clone)]
struct SentProduce {
    version: i16,
    topics: Vec<(String, Uuid)>,
    answer: Option<Vec<ErrorCode>>,
}

/// The Produce requests recorded so far, with their answers.
fn produces(relay: &integration_tests::Relay) -> Vec<SentProduce> {
    let mut sent: Vec<SentProduce> = Vec::new();
    let mut pending = std::collections::HashMap::new();
    for f in relay.take_recorded() {
        let mut buf = Bytes::from(f.frame);
        buf.advance(4);
        if f.request {
            let (api, version, correlation) = (buf.get_i16(), buf.get_i16(), buf.get_i32());
            if api != PRODUCE {
                continue;
            }
            let n = usize::try_from(buf.get_i16()).unwrap_or(0);
            buf.advance(n);
            if ProduceRequest::request_header_version(version) >= 2 {
                buf.advance(1);
            }
            let req = ProduceRequest::decode(&mut buf, version).expect("a Produce");
            pending.insert((f.conn, correlation), (version, sent.len()));
            sent.push(SentProduce {
                version,
                topics: req
                    .topic_data
                    .iter()
                    .map(|t| (t.name.clone(), t.topic_id))
                    .collect(),
                answer: None,
            });
        } else {
            let correlation = buf.clone().get_i32();
            let Some((version, i)) = pending.remove(&(f.conn, correlation)) else {
                continue;
            };
            let (_, resp) =
                kafkit::protocol::protocol::decode_response_frame::<ProduceRequest>(buf, version)
                    .expect("a Produce answer");
            sent[i].answer = Some(
                resp.responses
                    .iter()
                    .flat_map(|t| t.partition_responses.iter().map(|p| p.error_code))
                    .collect(),
            );
        }
    }
    sent
}

/// The id Kafka's Metadata gives `topic`.
async fn topic_id(conn: &kafkit::Conn, topic: &str) -> Uuid {
    let md = conn.metadata(Some(&[topic])).await.expect("Metadata");
    let id = md.topic(topic).expect("listed").topic_id;
    assert!(!id.is_zero(), "Kafka 4.4 gives topic ids");
    id
}

fn relayed_writer(relay: &integration_tests::Relay) -> Writer {
    Writer::builder(
        Transport::builder([relay.addr()])
            .retry_backoff(Duration::from_millis(50))
            .build()
            .expect("transport"),
    )
    .linger(Duration::from_millis(1))
    .build()
    .expect("writer")
}

/// Every value of `topic`'s partition 0 up to `n`, in order.
async fn read(topic: &str, n: usize) -> Vec<(i64, String)> {
    let reader = Reader::builder(Transport::builder([kafka()]).build().expect("transport"))
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    reader
        .assign([(topic, 0, StartOffset::Earliest)])
        .expect("assign");
    let mut out = Vec::new();
    while out.len() < n {
        let batch = tokio::time::timeout(T, reader.next_batch())
            .await
            .expect("records within the bound")
            .expect("next_batch");
        for p in &batch {
            out.extend(p.records.iter().map(|r| {
                let v = r.value.as_deref().expect("value");
                (r.offset, String::from_utf8(v.to_vec()).expect("utf-8"))
            }));
        }
    }
    out
}

/// A plain (idempotent, not transactional) Writer sends Produce v13 with the topic's id from
/// Metadata and no name; Kafka writes the records, read back in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_produce_goes_at_v13_by_topic_id() {
    let (_relay_lock, relay) = integration_tests::kafka_relay().await;
    let conn = dial(&kafka(), "produce-v13").await;
    let topic = create_topic_with(&conn, "produce-v13", 1).await;
    let id = topic_id(&conn, &topic).await;
    relay.record(true);
    let w = relayed_writer(&relay);
    for v in ["a", "b", "c"] {
        w.produce(ProducerRecord::new(topic.as_str(), v).partition(0))
            .await
            .expect("produce");
    }
    w.close(Duration::from_secs(10)).await.expect("close");
    let sent = produces(&relay);
    relay.record(false);
    assert!(!sent.is_empty());
    for p in &sent {
        assert_eq!(p.version, 13, "{sent:?}");
        assert_eq!(p.topics, [(String::new(), id)], "by id, no name: {sent:?}");
        assert_eq!(
            p.answer.as_deref(),
            Some(&[ErrorCode::NONE][..]),
            "{sent:?}"
        );
    }
    assert_eq!(
        read(&topic, 3).await,
        [(0, "a".into()), (1, "b".into()), (2, "c".into())]
    );
}

/// A topic deleted and created again under its name while a Writer writes to it: the Writer's
/// next Produce names the old id and Kafka answers UNKNOWN_TOPIC_ID; the Writer refreshes its
/// metadata (stale, as for UNKNOWN_TOPIC_OR_PARTITION), resends with the new id, and the record
/// is written to the new topic at offset 0. Nothing is lost: every record's future reports
/// where it was written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_created_again_under_its_name_is_written_by_its_new_id() {
    let (_relay_lock, relay) = integration_tests::kafka_relay().await;
    let conn = dial(&kafka(), "produce-recreated").await;
    let topic = create_topic_with(&conn, "produce-recreated", 1).await;
    let old = topic_id(&conn, &topic).await;
    let w = relayed_writer(&relay);
    let before = w
        .produce(ProducerRecord::new(topic.as_str(), "before").partition(0))
        .await
        .expect("produce");
    assert_eq!(before.offset, 0);

    let admin = Client::new(Transport::builder([kafka()]).build().expect("transport"));
    let deleted = admin
        .delete_topics(&[topic.as_str()])
        .await
        .expect("DeleteTopics");
    assert!(deleted[0].1.is_ok(), "{deleted:?}");
    // Created again once Kafka finished the deletion (TOPIC_ALREADY_EXISTS until then).
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let created = conn
            .create_topics(&[kafkit::admin::NewTopic::new(&topic, 1, 1)], false)
            .await
            .expect("CreateTopics");
        match &created[0].1 {
            Ok(_) => break,
            Err(e) if e.error_code() == Some(ErrorCode::TOPIC_ALREADY_EXISTS) => {}
            Err(e) => panic!("CreateTopics: {e}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not deleted in time"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_for_topic(&conn, &topic, 1).await;
    let new = topic_id(&conn, &topic).await;
    assert_ne!(new, old, "a new topic has a new id");

    relay.record(true);
    let after = w
        .produce(ProducerRecord::new(topic.as_str(), "after").partition(0))
        .await
        .expect("written to the new topic");
    w.close(Duration::from_secs(10)).await.expect("close");
    let sent = produces(&relay);
    relay.record(false);
    assert_eq!(after.offset, 0, "the new topic's first record");
    let stale = sent
        .iter()
        .position(|p| p.topics.iter().any(|(_, id)| *id == old))
        .unwrap_or_else(|| panic!("a Produce named the old id: {sent:?}"));
    assert_eq!(
        sent[stale].answer.as_deref(),
        Some(&[ErrorCode::UNKNOWN_TOPIC_ID][..]),
        "{sent:?}"
    );
    let fresh = sent
        .iter()
        .position(|p| p.topics.iter().any(|(_, id)| *id == new))
        .unwrap_or_else(|| panic!("a Produce named the new id: {sent:?}"));
    assert!(fresh > stale, "{sent:?}");
    assert!(sent.iter().all(|p| p.version == 13), "{sent:?}");
    assert_eq!(read(&topic, 1).await, [(0, "after".into())]);
}

/// Deletes `topic` and creates it again under its name (one partition), once Kafka finished the
/// deletion; returns the new id.
async fn create_again(conn: &kafkit::Conn, topic: &str) -> Uuid {
    let admin = Client::new(Transport::builder([kafka()]).build().expect("transport"));
    let deleted = admin.delete_topics(&[topic]).await.expect("DeleteTopics");
    assert!(deleted[0].1.is_ok(), "{deleted:?}");
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let created = conn
            .create_topics(&[kafkit::admin::NewTopic::new(topic, 1, 1)], false)
            .await
            .expect("CreateTopics");
        match &created[0].1 {
            Ok(_) => break,
            Err(e) if e.error_code() == Some(ErrorCode::TOPIC_ALREADY_EXISTS) => {}
            Err(e) => panic!("CreateTopics: {e}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not deleted in time"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_for_topic(conn, topic, 1).await;
    topic_id(conn, topic).await
}

/// TxnOffsetCommit v6 (KIP-1319, transactions v2) names the offsets' topic by the id in the
/// transactional Writer's metadata. The topic deleted and created again under its name: the
/// commit naming the old id is refused UNKNOWN_TOPIC_ID, abortable (typed, nothing committed);
/// the Writer refreshed its metadata, so after the abort the next transaction names the new id
/// and its offsets are the group's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn txn_offset_commit_by_a_stale_topic_id_is_abortable_then_names_the_new_one() {
    use kafkit::admin::{ListGroupOffsets, OffsetAndMetadata};
    use kafkit::{ConsumerGroupMetadata, ErrorCategory};
    // TxnOffsetCommit v6 needs transactions v2.
    let _tv = integration_tests::kafka_transaction_version(2).await;
    let conn = dial(&kafka(), "txn-offsets-recreated").await;
    let input = create_topic_with(&conn, "txn-offsets-in", 1).await;
    let output = create_topic_with(&conn, "txn-offsets-out", 1).await;
    let group = integration_tests::unique_topic("g-offsets-recreated");
    let w = Writer::builder(Transport::builder([kafka()]).build().expect("transport"))
        .transactional_id(integration_tests::unique_topic("txn-offsets-recreated").as_str())
        .linger(Duration::from_millis(1))
        .build()
        .expect("writer");
    w.init_transactions(T).await.expect("init");
    // The Writer learns both topics' ids (it writes to both).
    w.begin_transaction().expect("begin");
    for t in [&input, &output] {
        w.produce(ProducerRecord::new(t.as_str(), "x").partition(0))
            .await
            .expect("produce");
    }
    w.commit_transaction(T).await.expect("commit");

    create_again(&conn, &input).await;
    let offsets = [(input.as_str(), 0, OffsetAndMetadata::new(7))];
    let meta = ConsumerGroupMetadata::new(group.as_str());
    w.begin_transaction().expect("begin");
    w.produce(ProducerRecord::new(output.as_str(), "y").partition(0))
        .await
        .expect("produce");
    let e = w
        .send_offsets_to_transaction(&offsets, &meta, T)
        .await
        .expect_err("the old id is gone");
    assert_eq!(e.error_code(), Some(ErrorCode::UNKNOWN_TOPIC_ID), "{e}");
    assert_eq!(e.category(), ErrorCategory::TransactionAbortable, "{e}");
    w.abort_transaction(T).await.expect("abort");

    w.begin_transaction().expect("begin");
    w.produce(ProducerRecord::new(output.as_str(), "z").partition(0))
        .await
        .expect("produce");
    w.send_offsets_to_transaction(&offsets, &meta, T)
        .await
        .expect("offsets by the new id");
    w.commit_transaction(T).await.expect("commit");
    w.close(Duration::from_secs(10)).await.expect("close");
    let admin = Client::new(Transport::builder([kafka()]).build().expect("transport"));
    let read = admin
        .list_consumer_group_offsets(&[ListGroupOffsets::all(group.as_str())], true)
        .await
        .expect("OffsetFetch");
    let got: Vec<((String, i32), Option<i64>)> = read[0]
        .1
        .as_ref()
        .expect("group read")
        .iter()
        .map(|(tp, o)| {
            (
                tp.clone(),
                o.as_ref().expect("read").as_ref().map(|o| o.offset),
            )
        })
        .collect();
    assert_eq!(got, [((input.clone(), 0), Some(7))]);
}
