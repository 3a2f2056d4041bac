//! Transactions v2 (KIP-890 part 2) on Apache Kafka 4.4, seen on the wire: a transactional
//! Writer through the relay in front of Kafka (`integration_tests::kafka_relay`, recording every
//! frame) sends Produce v12+, TxnOffsetCommit v5+ and EndTxn v5 and never AddPartitionsToTxn or
//! AddOffsetsToTxn, every EndTxn answer carries the epoch plus one, and the choice follows the
//! finalized `transaction.version` per transaction (downgraded to 1, upgraded back to 2).
//! Neither stand-in has the feature: the mock and tansu stay on the classic flow
//! (writer_txn_mock, on_tansu::writer_txn). Every test here holds the `transaction.version`
//! lock (`integration_tests::kafka_transaction_version`).

use std::time::Duration;

use bytes::{Buf, Bytes};
use integration_tests::{create_topic_with, dial, kafka, unique_topic};
use kafkit::admin::{ListGroupOffsets, OffsetAndMetadata};
use kafkit::protocol::messages::{EndTxnRequest, ProduceRequest, TxnOffsetCommitRequest};
use kafkit::protocol::{Message, Request};
use kafkit::{
    Client, ConsumerGroupMetadata, IsolationLevel, ProducerRecord, Reader, StartOffset, Transport,
    Writer,
};

const T: Duration = Duration::from_secs(30);

const PRODUCE: i16 = 0;
const ADD_PARTITIONS_TO_TXN: i16 = 24;
const ADD_OFFSETS_TO_TXN: i16 = 25;
const END_TXN: i16 = 26;
const TXN_OFFSET_COMMIT: i16 = 28;

/// One request the relay carried, with what the test reads of it and of its answer.
#[derive(Debug, Clone)]
struct Sent {
    api: i16,
    version: i16,
    /// Produce: whether it carried the writer's transactional id.
    transactional: bool,
    /// EndTxn: the request's `(producer id, epoch, committed)`.
    end: Option<(i64, i16, bool)>,
    /// EndTxn: the answer's `(error code, producer id, epoch)`.
    ended: Option<(kafkit::protocol::ErrorCode, i64, i16)>,
    /// TxnOffsetCommit: each topic's `(name, id)` as decoded at its version.
    offsets: Vec<(String, kafkit::protocol::Uuid)>,
}

/// The requests a recording relay carried, in the order they arrived.
#[derive(Default)]
struct WireTrace {
    sent: Vec<Sent>,
    /// (connection, correlation id) -> index into `sent`.
    pending: std::collections::HashMap<(u64, i32), usize>,
}

impl WireTrace {
    /// Takes the frames recorded since the last call.
    fn update(&mut self, relay: &integration_tests::Relay) {
        for f in relay.take_recorded() {
            let mut buf = Bytes::from(f.frame);
            buf.advance(4);
            if f.request {
                let (api, version, correlation) = (buf.get_i16(), buf.get_i16(), buf.get_i32());
                let n = usize::try_from(buf.get_i16()).unwrap_or(0);
                buf.advance(n);
                let mut sent = Sent {
                    api,
                    version,
                    transactional: false,
                    end: None,
                    ended: None,
                    offsets: Vec::new(),
                };
                if api == PRODUCE {
                    if ProduceRequest::request_header_version(version) >= 2 {
                        buf.advance(1);
                    }
                    let req = ProduceRequest::decode(&mut buf, version).expect("a Produce");
                    sent.transactional = req.transactional_id.is_some();
                } else if api == END_TXN {
                    if EndTxnRequest::request_header_version(version) >= 2 {
                        buf.advance(1);
                    }
                    let req = EndTxnRequest::decode(&mut buf, version).expect("an EndTxn");
                    sent.end = Some((req.producer_id, req.producer_epoch, req.committed));
                } else if api == TXN_OFFSET_COMMIT {
                    if TxnOffsetCommitRequest::request_header_version(version) >= 2 {
                        buf.advance(1);
                    }
                    let req = TxnOffsetCommitRequest::decode(&mut buf, version)
                        .expect("a TxnOffsetCommit");
                    sent.offsets = req
                        .topics
                        .iter()
                        .map(|t| (t.name.clone(), t.topic_id))
                        .collect();
                }
                self.pending.insert((f.conn, correlation), self.sent.len());
                self.sent.push(sent);
            } else {
                let correlation = buf.clone().get_i32();
                let Some(i) = self.pending.remove(&(f.conn, correlation)) else {
                    continue;
                };
                if self.sent[i].api == END_TXN {
                    let (_, resp) = kafkit::protocol::protocol::decode_response_frame::<
                        EndTxnRequest,
                    >(buf, self.sent[i].version)
                    .expect("an EndTxn answer");
                    self.sent[i].ended =
                        Some((resp.error_code, resp.producer_id, resp.producer_epoch));
                }
            }
        }
    }

    /// The requests of `api` recorded so far.
    fn of(&self, api: i16) -> Vec<&Sent> {
        self.sent.iter().filter(|s| s.api == api).collect()
    }
}

/// A transactional Writer bootstrapped at the relay.
fn relayed_writer(relay: &integration_tests::Relay, txn_id: &str) -> Writer {
    Writer::builder(
        Transport::builder([relay.addr()])
            .retry_backoff(Duration::from_millis(50))
            .build()
            .expect("transport"),
    )
    .transactional_id(txn_id)
    .linger(Duration::from_millis(1))
    .build()
    .expect("writer")
}

/// Every value a `read_committed` Reader reads of `topic`'s `partitions` up to their end.
async fn read_committed(topic: &str, partitions: i32, expect: usize) -> Vec<String> {
    let reader = Reader::builder(Transport::builder([kafka()]).build().expect("transport"))
        .isolation_level(IsolationLevel::ReadCommitted)
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    reader
        .assign((0..partitions).map(|p| (topic, p, StartOffset::Earliest)))
        .expect("assign");
    let mut values = Vec::new();
    while values.len() < expect {
        let batch = tokio::time::timeout(T, reader.next_batch())
            .await
            .expect("records within the bound")
            .expect("next_batch");
        for p in &batch {
            values.extend(p.records.iter().map(|r| {
                String::from_utf8(r.value.as_deref().expect("value").to_vec()).expect("utf-8")
            }));
        }
    }
    values.sort();
    values
}

/// KIP-890 part 2 on Kafka 4.4 (transaction.version 2, as `xtask broker start --kafka` formats
/// it): a committed transaction, an aborted one and a consume-transform-produce one (offsets
/// through TxnOffsetCommit) go on the wire as Produce v12+, TxnOffsetCommit v6 (by topic id)
/// and EndTxn v5,
/// with no AddPartitionsToTxn or AddOffsetsToTxn; each EndTxn answer hands back the epoch plus
/// one and the next transaction's requests use it. `read_committed` reads the committed records
/// only, and the group's offsets are visible after the commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_v2_on_the_wire() {
    let _tv = integration_tests::kafka_transaction_version(2).await;
    assert_eq!(
        integration_tests::kafka_finalized_transaction_version().await,
        Some(2),
        "Kafka 4.4 finalizes transaction.version 2"
    );
    let (_relay_lock, relay) = integration_tests::kafka_relay().await;
    let conn = dial(&kafka(), "txn-v2-wire").await;
    let topic = create_topic_with(&conn, "txn-v2-wire", 2).await;
    let group = unique_topic("g-txn-v2");
    relay.record(true);
    let w = relayed_writer(&relay, &unique_topic("txn-v2"));
    w.init_transactions(T).await.expect("init");

    w.begin_transaction().expect("begin");
    for (p, v) in [(0, "c1"), (1, "c2"), (0, "c3")] {
        w.produce(ProducerRecord::new(topic.as_str(), v).partition(p))
            .await
            .expect("produce");
    }
    w.commit_transaction(T).await.expect("commit");

    w.begin_transaction().expect("begin");
    for (p, v) in [(0, "a1"), (1, "a2")] {
        w.produce(ProducerRecord::new(topic.as_str(), v).partition(p))
            .await
            .expect("produce");
    }
    w.abort_transaction(T).await.expect("abort");

    // Consume-transform-produce: the input's offsets committed with the output.
    w.begin_transaction().expect("begin");
    w.produce(ProducerRecord::new(topic.as_str(), "o1").partition(1))
        .await
        .expect("produce");
    let offsets = [(topic.as_str(), 0, OffsetAndMetadata::new(2))];
    w.send_offsets_to_transaction(&offsets, &ConsumerGroupMetadata::new(group.as_str()), T)
        .await
        .expect("offsets");
    w.commit_transaction(T).await.expect("commit");
    w.close(Duration::from_secs(10)).await.expect("close");

    let mut trace = WireTrace::default();
    trace.update(&relay);
    relay.record(false);
    assert!(
        trace.of(ADD_PARTITIONS_TO_TXN).is_empty() && trace.of(ADD_OFFSETS_TO_TXN).is_empty(),
        "no AddPartitionsToTxn or AddOffsetsToTxn under transactions v2: {:?}",
        trace.sent
    );
    let produces: Vec<i16> = trace
        .of(PRODUCE)
        .iter()
        .filter(|s| s.transactional)
        .map(|s| s.version)
        .collect();
    assert!(produces.len() >= 3, "{produces:?}");
    assert!(produces.iter().all(|v| *v >= 12), "Produce {produces:?}");
    // TxnOffsetCommit v6 names the topic by the id the Writer's metadata has (KIP-1319).
    let md = conn
        .metadata(Some(&[topic.as_str()]))
        .await
        .expect("Metadata");
    let id = md.topic(&topic).expect("listed").topic_id;
    let commits = trace.of(TXN_OFFSET_COMMIT);
    assert!(!commits.is_empty(), "{:?}", trace.sent);
    for c in &commits {
        assert_eq!(c.version, 6, "{c:?}");
        assert_eq!(c.offsets, [(String::new(), id)], "by id, no name: {c:?}");
    }
    let ends = trace.of(END_TXN);
    assert_eq!(ends.len(), 3, "one EndTxn per transaction: {ends:?}");
    let mut epochs = Vec::new();
    for (e, committed) in ends.iter().zip([true, false, true]) {
        assert_eq!(e.version, 5, "{e:?}");
        let (pid, epoch, c) = e.end.expect("decoded");
        assert_eq!(c, committed, "{e:?}");
        let (code, new_pid, new_epoch) = e.ended.expect("answered");
        assert!(code.is_ok(), "{e:?}");
        assert_eq!(
            (new_pid, new_epoch),
            (pid, epoch + 1),
            "EndTxn bumps the epoch"
        );
        epochs.push(epoch);
    }
    assert_eq!(
        epochs,
        [epochs[0], epochs[0] + 1, epochs[0] + 2],
        "each transaction ends with the epoch the last EndTxn handed back"
    );

    let values = read_committed(&topic, 2, 4).await;
    assert_eq!(
        values,
        ["c1", "c2", "c3", "o1"],
        "the aborted records are never read"
    );
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
    assert_eq!(
        got,
        [((topic.clone(), 0), Some(2))],
        "the committed offsets"
    );
}

/// The flow is chosen per transaction from the broker's finalized `transaction.version`, as
/// Java's producer chooses it: a transaction that began under version 2 goes on (a Produce v13
/// after the downgrade to 1 is taken) and ends with EndTxn v5; the next one is classic
/// (AddPartitionsToTxn, Produce v11, EndTxn v4, no epoch bump); after the upgrade back to 2 the
/// writer bumps its epoch (InitProducerId) and the next transaction is v2 again. All three
/// transactions commit and are read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_flow_follows_transaction_version_per_transaction() {
    let tv = integration_tests::kafka_transaction_version(2).await;
    let (_relay_lock, relay) = integration_tests::kafka_relay().await;
    let conn = dial(&kafka(), "txn-v2-switch").await;
    let topic = create_topic_with(&conn, "txn-v2-switch", 1).await;
    relay.record(true);
    let w = relayed_writer(&relay, &unique_topic("txn-v2-switch"));
    w.init_transactions(T).await.expect("init");
    let mut trace = WireTrace::default();
    let produce = |v: &'static str| {
        let (w, topic) = (&w, &topic);
        async move {
            w.produce(ProducerRecord::new(topic.as_str(), v).partition(0))
                .await
                .expect("produce");
        }
    };

    // Begun under 2; transaction.version goes to 1 before it ends.
    w.begin_transaction().expect("begin");
    produce("v2-before").await;
    tv.set(1).await;
    // A Produce of the v2 transaction after the downgrade: Kafka still adds it implicitly.
    produce("v2-during").await;
    w.commit_transaction(T).await.expect("commit");
    trace.update(&relay);
    let first = std::mem::take(&mut trace.sent);

    w.begin_transaction().expect("begin");
    produce("classic").await;
    tv.set(2).await;
    w.commit_transaction(T).await.expect("commit");
    trace.update(&relay);
    let second = std::mem::take(&mut trace.sent);

    w.begin_transaction().expect("begin");
    produce("v2-after").await;
    w.commit_transaction(T).await.expect("commit");
    w.close(Duration::from_secs(10)).await.expect("close");
    trace.update(&relay);
    let third = std::mem::take(&mut trace.sent);
    relay.record(false);

    let of = |sent: &[Sent], api: i16| -> Vec<Sent> {
        sent.iter().filter(|s| s.api == api).cloned().collect()
    };
    let txn_produce = |sent: &[Sent]| -> Vec<i16> {
        sent.iter()
            .filter(|s| s.api == PRODUCE && s.transactional)
            .map(|s| s.version)
            .collect()
    };
    // 1: v2 to its end.
    assert!(of(&first, ADD_PARTITIONS_TO_TXN).is_empty(), "{first:?}");
    assert!(txn_produce(&first).iter().all(|v| *v >= 12), "{first:?}");
    let end1 = of(&first, END_TXN);
    assert_eq!(end1.len(), 1, "{first:?}");
    assert_eq!(end1[0].version, 5);
    let (_, e1, _) = end1[0].end.expect("decoded");
    assert_eq!(end1[0].ended.expect("answered").2, e1 + 1);
    // 2: classic.
    // (Sent again when answered CONCURRENT_TRANSACTIONS: the last one's markers.)
    assert!(!of(&second, ADD_PARTITIONS_TO_TXN).is_empty(), "{second:?}");
    assert!(txn_produce(&second).iter().all(|v| *v <= 11), "{second:?}");
    let end2 = of(&second, END_TXN);
    assert_eq!(end2.len(), 1, "{second:?}");
    assert!(end2[0].version <= 4, "{end2:?}");
    let (_, e2, _) = end2[0].end.expect("decoded");
    assert_eq!(e2, e1 + 1, "the epoch EndTxn v5 handed back");
    // The upgrade bumped the epoch through InitProducerId (after EndTxn v4).
    assert!(
        second.iter().any(|s| s.api == 22),
        "InitProducerId after the upgrade: {second:?}"
    );
    // 3: v2 again.
    assert!(of(&third, ADD_PARTITIONS_TO_TXN).is_empty(), "{third:?}");
    assert!(
        !txn_produce(&third).is_empty() && txn_produce(&third).iter().all(|v| *v >= 12),
        "{third:?}"
    );
    let end3 = of(&third, END_TXN);
    assert_eq!(end3.len(), 1, "{third:?}");
    assert_eq!(end3[0].version, 5);
    let (_, e3, _) = end3[0].end.expect("decoded");
    assert_eq!(e3, e2 + 1, "the upgrade's InitProducerId bumped the epoch");
    assert_eq!(end3[0].ended.expect("answered").2, e3 + 1);

    assert_eq!(
        read_committed(&topic, 1, 4).await,
        ["classic", "v2-after", "v2-before", "v2-during"]
    );
    drop(tv);
    assert_eq!(
        integration_tests::kafka_finalized_transaction_version().await,
        Some(2)
    );
}
