//! The transactional [`Writer`] (KIP-98) on librdkafka's mock cluster (3 brokers), which keeps
//! transactional producer ids and epochs, checks them on AddPartitionsToTxn, AddOffsetsToTxn,
//! TxnOffsetCommit and EndTxn, and takes injected errors (`rd_kafka_mock_push_request_errors`,
//! per broker with a round-trip time). The mock writes no transaction markers and lists no
//! aborted transactions, so reading back an abort is tested on tansu (`writer_txn_tansu`);
//! here: committed records read back by librdkafka's `read_committed` consumer and by the
//! Reader, an abort failing the unsent records, zombie fencing, and every retriable
//! coordinator error, a coordinator broker down and a call's timeout on each transactional API.

use std::time::Duration;

use integration_tests::{GroupMock, peer_consume, unique_topic};
use kafkit::admin::OffsetAndMetadata;
use kafkit::{
    ConsumerGroupMetadata, CoordinatorType, IsolationLevel, ProduceError, ProducerRecord, Reader,
    StartOffset, TransactionError, TransactionPhase, Transport, Writer,
};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

/// The timeout of each transactional call that should succeed.
const T: Duration = Duration::from_secs(20);
const PARTITIONS: i32 = 3;

fn transport(bootstrap: &str) -> Transport {
    Transport::builder(bootstrap.split(','))
        .build()
        .expect("transport")
}

fn writer(bootstrap: &str, id: &str) -> Writer {
    Writer::builder(transport(bootstrap))
        .transactional_id(id)
        .linger(Duration::from_millis(5))
        .build()
        .expect("writer")
}

/// A mock of 3 brokers with a topic of 3 partitions (spread over the brokers), tracking
/// requests.
fn setup(name: &str) -> (GroupMock, String, String) {
    let mock = GroupMock::new(3);
    let topic = unique_topic(name);
    integration_tests::mock_topic_spread(&mock.cluster(), &topic, PARTITIONS, 3);
    mock.track_requests();
    let bootstrap = mock.bootstrap();
    (mock, bootstrap, topic)
}

/// Sends `values` to `topic` round-robin over its partitions, returning each record's future.
async fn send_all(w: &Writer, topic: &str, values: &[String]) -> Vec<kafkit::DeliveryFuture> {
    let mut futs = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        let p = i32::try_from(i).unwrap() % PARTITIONS;
        let rec = ProducerRecord::new(topic, v.clone()).partition(p);
        futs.push(w.send(rec).await.expect("taken"));
    }
    futs
}

/// As [`send_all`], but a transaction that failed meanwhile (an injected error answered
/// before the last record) may refuse the rest: stops at the first refusal and returns it with
/// the futures of the records taken before it.
async fn send_until_refused(
    w: &Writer,
    topic: &str,
    values: &[String],
) -> (Vec<kafkit::DeliveryFuture>, Option<TransactionError>) {
    let mut futs = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        let p = i32::try_from(i).unwrap() % PARTITIONS;
        match w
            .send(ProducerRecord::new(topic, v.clone()).partition(p))
            .await
        {
            Ok(f) => futs.push(f),
            Err(ProduceError::Transaction(e)) => return (futs, Some(e)),
            Err(e) => panic!("a record refused with {e}"),
        }
    }
    (futs, None)
}

fn values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// What a read of `topic` must give: `values` sent round-robin, by partition then order.
fn by_partition(values: &[String]) -> Vec<(i32, String)> {
    let mut out: Vec<(i32, String)> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (i32::try_from(i).unwrap() % PARTITIONS, v.clone()))
        .collect();
    out.sort_by_key(|(p, _)| *p);
    out
}

/// One transaction: `values` written, offsets of `group` added, committed.
async fn transaction(w: &Writer, topic: &str, group: &str, values: &[String]) {
    w.begin_transaction().expect("begin");
    let futs = send_all(w, topic, values).await;
    let offsets = [(topic, 0, OffsetAndMetadata::new(values.len() as i64))];
    w.send_offsets_to_transaction(&offsets, &ConsumerGroupMetadata::new(group), T)
        .await
        .expect("offsets");
    w.commit_transaction(T).await.expect("commit");
    for f in futs {
        f.await.expect("a committed record was written");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_transactions_are_read_back_by_librdkafka_and_the_reader() {
    let (_mock, bootstrap, topic) = setup("txn-commit");
    let w = writer(&bootstrap, &unique_topic("tx"));
    assert_eq!(w.transaction_state(), TransactionPhase::Uninitialized);
    w.init_transactions(T).await.expect("init");
    assert_eq!(w.transaction_state(), TransactionPhase::Ready);
    let group = unique_topic("g");
    let (first, second) = (values("a", 30), values("b", 30));
    transaction(&w, &topic, &group, &first).await;
    assert_eq!(w.transaction_state(), TransactionPhase::Ready);
    transaction(&w, &topic, &group, &second).await;
    let all: Vec<String> = first.iter().chain(&second).cloned().collect();
    let want = by_partition(&all);

    let peer = peer_consume(&bootstrap, &topic, PARTITIONS, all.len()).await;
    let got: Vec<(i32, String)> = peer
        .iter()
        .map(|r| {
            let v = String::from_utf8(r.value.clone().unwrap_or_default()).unwrap();
            (r.partition, v)
        })
        .collect();
    assert_eq!(got, want, "librdkafka read_committed");

    let reader = Reader::builder(transport(&bootstrap))
        .isolation_level(IsolationLevel::ReadCommitted)
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    reader
        .assign((0..PARTITIONS).map(|p| (topic.as_str(), p, StartOffset::Earliest)))
        .expect("assign");
    let mut read: Vec<(i32, i64, String)> = Vec::new();
    while read.len() < all.len() {
        let parts = tokio::time::timeout(T, reader.next_batch())
            .await
            .expect("records within the guard")
            .expect("next_batch");
        for p in parts {
            for r in &p.records {
                let v = String::from_utf8(r.value.as_deref().unwrap_or_default().to_vec());
                read.push((p.partition, r.offset, v.unwrap()));
            }
        }
    }
    read.sort_by_key(|(p, o, _)| (*p, *o));
    let read: Vec<(i32, String)> = read.into_iter().map(|(p, _, v)| (p, v)).collect();
    assert_eq!(read, want, "the Reader, read_committed");
    w.close(T).await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_fails_every_unsent_record_and_the_writer_goes_on() {
    let (_mock, bootstrap, topic) = setup("txn-abort");
    let w = Writer::builder(transport(&bootstrap))
        .transactional_id(unique_topic("tx"))
        // Records stay buffered until the abort.
        .linger(Duration::from_secs(30))
        .build()
        .expect("writer");
    // Nothing before init_transactions, nor outside a transaction.
    let before = w.send(ProducerRecord::new(topic.as_str(), "x")).await;
    assert!(
        matches!(
            before,
            Err(ProduceError::Transaction(TransactionError::InvalidState {
                state: TransactionPhase::Uninitialized,
                ..
            }))
        ),
        "{before:?}"
    );
    // `try_send` refuses as `send` does, also for a topic it has not learned yet (it used to
    // answer MetadataPending, "try again", and start a lookup).
    let unknown = w.try_send(ProducerRecord::new(
        unique_topic("txn-unknown").as_str(),
        "x",
    ));
    assert!(
        matches!(
            unknown,
            Err(ProduceError::Transaction(TransactionError::InvalidState {
                state: TransactionPhase::Uninitialized,
                ..
            }))
        ),
        "{unknown:?}"
    );
    w.init_transactions(T).await.expect("init");
    let outside = w.send(ProducerRecord::new(topic.as_str(), "x")).await;
    assert!(
        matches!(
            outside,
            Err(ProduceError::Transaction(TransactionError::InvalidState {
                state: TransactionPhase::Ready,
                ..
            }))
        ),
        "{outside:?}"
    );
    assert!(matches!(
        w.commit_transaction(T).await,
        Err(TransactionError::InvalidState { .. })
    ));
    w.begin_transaction().expect("begin");
    assert!(matches!(
        w.begin_transaction(),
        Err(TransactionError::InvalidState {
            state: TransactionPhase::InTransaction,
            ..
        })
    ));
    let futs = send_all(&w, &topic, &values("aborted", 20)).await;
    w.abort_transaction(T).await.expect("abort");
    assert_eq!(w.transaction_state(), TransactionPhase::Ready);
    for f in futs {
        let r = tokio::time::timeout(T, f).await.expect("an outcome");
        assert!(matches!(r, Err(ProduceError::TransactionAborted)), "{r:?}");
    }
    assert_eq!(w.stats().buffered_records, 0, "nothing left buffered");
    // The next transaction goes on (linger runs out at commit: flush sends at once).
    w.begin_transaction().expect("begin again");
    let futs = send_all(&w, &topic, &values("kept", 6)).await;
    w.commit_transaction(T).await.expect("commit");
    for f in futs {
        f.await.expect("written");
    }
}

/// The mock hands every InitProducerId a new producer id and keeps the old ones valid, so
/// fencing by a second writer is tested on tansu (`writer_txn_tansu`); here the fatal codes
/// are injected, on the coordinator APIs and on Produce.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fatal_codes_make_the_writer_refuse_further_work() {
    let cases = [
        (
            RDKafkaApiKey::EndTxn,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_PRODUCER_FENCED,
        ),
        (
            RDKafkaApiKey::EndTxn,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH,
        ),
        (
            RDKafkaApiKey::AddPartitionsToTxn,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ),
        (
            RDKafkaApiKey::AddOffsetsToTxn,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_PRODUCER_FENCED,
        ),
        (
            RDKafkaApiKey::Produce,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH,
        ),
    ];
    for (api, code) in cases {
        let case = format!("{api:?} {code:?}");
        let (mock, bootstrap, topic) = setup("txn-fatal");
        let w = writer(&bootstrap, &unique_topic("tx"));
        w.init_transactions(T).await.expect("init");
        mock.cluster().request_errors(api, &[code]);
        w.begin_transaction().expect("begin");
        // The first record's AddPartitionsToTxn (or its batch's Produce) goes out at once and
        // may be answered, fatally, before the last record is sent (under load, often): from
        // then on the writer refuses records with that error (Java's send does too).
        let (futs, refused) = send_until_refused(&w, &topic, &values("f", 3)).await;
        if let Some(e) = refused {
            assert!(e.is_fatal(), "{case}: a record refused with {e}");
            assert_eq!(
                e.error_code().map(|c| c.0),
                Some(code as i16),
                "{case}: {e}"
            );
        }
        let offsets = [(topic.as_str(), 0, OffsetAndMetadata::new(3))];
        let meta = ConsumerGroupMetadata::new(unique_topic("g"));
        let offsets_sent = w.send_offsets_to_transaction(&offsets, &meta, T).await;
        let result = match offsets_sent {
            Ok(()) => w.commit_transaction(T).await,
            Err(e) => Err(e),
        };
        let e = result.expect_err(&case);
        assert!(e.is_fatal(), "{case}: {e}");
        assert_eq!(
            e.error_code().map(|c| c.0),
            Some(code as i16),
            "{case}: {e}"
        );
        assert_eq!(
            w.transaction_state(),
            TransactionPhase::FatalError,
            "{case}"
        );
        // Every record has an outcome, and the writer refuses further work.
        for f in futs {
            let _ = tokio::time::timeout(T, f).await.expect("an outcome");
        }
        assert!(w.begin_transaction().unwrap_err().is_fatal(), "{case}");
        assert!(
            w.abort_transaction(T).await.unwrap_err().is_fatal(),
            "{case}"
        );
        assert!(
            w.commit_transaction(T).await.unwrap_err().is_fatal(),
            "{case}"
        );
        let refused = w.send(ProducerRecord::new(topic.as_str(), "z")).await;
        assert!(
            matches!(&refused, Err(ProduceError::Transaction(e)) if e.is_fatal()),
            "{case}: {refused:?}"
        );
    }
}

/// Abortable errors: a record refused by its partition, an offset commit refused for the
/// group's generation (KIP-447), an AddPartitionsToTxn refused for a topic. The call (or
/// commit) fails abortable, the abort goes through, and the next transaction commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abortable_errors_need_an_abort_then_the_writer_goes_on() {
    let cases = [
        (
            RDKafkaApiKey::Produce,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
        ),
        (
            RDKafkaApiKey::TxnOffsetCommit,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION,
        ),
        (
            RDKafkaApiKey::TxnOffsetCommit,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID,
        ),
        (
            RDKafkaApiKey::AddPartitionsToTxn,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
        ),
    ];
    for (api, code) in cases {
        let case = format!("{api:?} {code:?}");
        let (mock, bootstrap, topic) = setup("txn-abortable");
        let w = writer(&bootstrap, &unique_topic("tx"));
        w.init_transactions(T).await.expect("init");
        mock.cluster().request_errors(api, &[code]);
        w.begin_transaction().expect("begin");
        // As above: a record sent after the injected answer came is refused with its error.
        let (futs, refused) = send_until_refused(&w, &topic, &values("x", 3)).await;
        if let Some(e) = refused {
            assert!(e.is_abortable(), "{case}: a record refused with {e}");
            assert_eq!(
                e.error_code().map(|c| c.0),
                Some(code as i16),
                "{case}: {e}"
            );
        }
        let offsets = [(topic.as_str(), 0, OffsetAndMetadata::new(3))];
        let meta = ConsumerGroupMetadata::new(unique_topic("g")).with_member(3, "member-1", None);
        let result = match w.send_offsets_to_transaction(&offsets, &meta, T).await {
            Ok(()) => w.commit_transaction(T).await,
            Err(e) => Err(e),
        };
        let e = result.expect_err(&case);
        assert!(e.is_abortable(), "{case}: {e}");
        assert_eq!(
            w.transaction_state(),
            TransactionPhase::AbortableError,
            "{case}"
        );
        // Until the abort, nothing more is taken.
        let refused = w.send(ProducerRecord::new(topic.as_str(), "z")).await;
        assert!(
            matches!(&refused, Err(ProduceError::Transaction(e)) if e.is_abortable()),
            "{case}: {refused:?}"
        );
        w.abort_transaction(T).await.expect("abort");
        for f in futs {
            let _ = tokio::time::timeout(T, f).await.expect("an outcome");
        }
        transaction(&w, &topic, &unique_topic("g"), &values("after", 3)).await;
    }
}

/// TRANSACTION_ABORTABLE (KIP-890, code 120, which librdkafka's enum lacks) answered by
/// Produce, TxnOffsetCommit or EndTxn(commit): the transaction is abortable
/// (`ErrorCategory::TransactionAbortable`), the application aborts, and the next transaction
/// commits. Answering EndTxn(abort) it is fatal, as for Java's producer (aborting again could
/// not end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_abortable_is_aborted_and_the_writer_goes_on() {
    use kafkit::ErrorCategory;
    const TRANSACTION_ABORTABLE: i16 = 120;
    for api in [
        RDKafkaApiKey::Produce,
        RDKafkaApiKey::TxnOffsetCommit,
        RDKafkaApiKey::EndTxn,
    ] {
        let case = format!("{api:?}");
        let (mock, bootstrap, topic) = setup("txn-abortable-120");
        let w = writer(&bootstrap, &unique_topic("tx"));
        w.init_transactions(T).await.expect("init");
        mock.push_request_error_codes(api as i16, &[TRANSACTION_ABORTABLE]);
        w.begin_transaction().expect("begin");
        let (futs, _) = send_until_refused(&w, &topic, &values("x", 3)).await;
        let offsets = [(topic.as_str(), 0, OffsetAndMetadata::new(3))];
        let meta = ConsumerGroupMetadata::new(unique_topic("g"));
        let result = match w.send_offsets_to_transaction(&offsets, &meta, T).await {
            Ok(()) => w.commit_transaction(T).await,
            Err(e) => Err(e),
        };
        let e = result.expect_err(&case);
        assert!(e.is_abortable(), "{case}: {e}");
        assert_eq!(e.category(), ErrorCategory::TransactionAbortable, "{case}");
        assert_eq!(
            e.error_code().map(|c| c.0),
            Some(TRANSACTION_ABORTABLE),
            "{case}: {e}"
        );
        assert_eq!(
            kafkit::Error::from(e).category(),
            ErrorCategory::TransactionAbortable
        );
        w.abort_transaction(T).await.expect("abort");
        for f in futs {
            let _ = tokio::time::timeout(T, f).await.expect("an outcome");
        }
        transaction(&w, &topic, &unique_topic("g"), &values("after", 3)).await;
    }

    // EndTxn(abort) answered TRANSACTION_ABORTABLE: fatal.
    let (mock, bootstrap, topic) = setup("txn-abortable-120-abort");
    let w = writer(&bootstrap, &unique_topic("tx"));
    w.init_transactions(T).await.expect("init");
    w.begin_transaction().expect("begin");
    let futs = send_all(&w, &topic, &values("x", 3)).await;
    for f in futs {
        f.await.expect("written");
    }
    mock.push_request_error_codes(RDKafkaApiKey::EndTxn as i16, &[TRANSACTION_ABORTABLE]);
    let e = w.abort_transaction(T).await.expect_err("refused");
    assert!(e.is_fatal(), "{e}");
    assert_eq!(e.category(), ErrorCategory::Fatal, "{e}");
    assert_eq!(w.transaction_state(), TransactionPhase::FatalError);
}

/// The APIs of a transaction, as librdkafka names them, with what this test calls them.
const APIS: [RDKafkaApiKey; 5] = [
    RDKafkaApiKey::InitProducerId,
    RDKafkaApiKey::AddPartitionsToTxn,
    RDKafkaApiKey::AddOffsetsToTxn,
    RDKafkaApiKey::TxnOffsetCommit,
    RDKafkaApiKey::EndTxn,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retriable_coordinator_errors_are_retried_inside_every_call() {
    let codes = [
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
    ];
    for api in APIS {
        for code in codes {
            let case = format!("{api:?} x3 {code:?}");
            let (mock, bootstrap, topic) = setup("txn-retry");
            mock.cluster().request_errors(api, &[code; 3]);
            let w = writer(&bootstrap, &unique_topic("tx"));
            let run = async {
                w.init_transactions(T).await.expect("init");
                transaction(&w, &topic, &unique_topic("g"), &values("r", 6)).await;
            };
            tokio::time::timeout(T * 2, run)
                .await
                .unwrap_or_else(|_| panic!("{case}: the transaction ends"));
            assert_eq!(w.transaction_state(), TransactionPhase::Ready, "{case}");
            // The three refused requests and the one that went through.
            let sent = mock.requests(api);
            assert!(sent >= 4, "{case}: {sent} requests");
        }
    }
}

/// The coordinator's broker of the key (1-based mock id).
async fn coordinator(bootstrap: &str, kind: CoordinatorType, key: &str) -> i32 {
    transport(bootstrap)
        .coordinator(kind, key)
        .await
        .expect("coordinator")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_broker_down_for_a_moment_is_ridden_out_by_each_call() {
    // (call, whose coordinator goes down for 1 s while it runs)
    for step in [
        "init_transactions",
        "send_offsets_to_transaction",
        "commit_transaction",
    ] {
        let (mock, bootstrap, topic) = setup("txn-down");
        let id = unique_topic("tx");
        let group = unique_topic("g");
        let w = writer(&bootstrap, &id);
        let down = |node: i32| {
            mock.cluster().broker_down(node).expect("down");
            async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        };
        let txn_node = coordinator(&bootstrap, CoordinatorType::Transaction, &id).await;
        let group_node = coordinator(&bootstrap, CoordinatorType::Group, &group).await;
        let node = if step == "send_offsets_to_transaction" {
            group_node
        } else {
            txn_node
        };
        let up = || mock.cluster().broker_up(node).expect("up");
        if step == "init_transactions" {
            let (r, ()) = tokio::join!(w.init_transactions(T), async {
                down(node).await;
                up();
            });
            r.unwrap_or_else(|e| panic!("{step}: {e}"));
        } else {
            w.init_transactions(T).await.expect("init");
        }
        w.begin_transaction().expect("begin");
        let futs = send_all(&w, &topic, &values("d", 6)).await;
        let offsets = [(topic.as_str(), 0, OffsetAndMetadata::new(6))];
        let meta = ConsumerGroupMetadata::new(group.as_str());
        if step == "send_offsets_to_transaction" {
            let (r, ()) = tokio::join!(w.send_offsets_to_transaction(&offsets, &meta, T), async {
                down(node).await;
                up();
            });
            r.unwrap_or_else(|e| panic!("{step}: {e}"));
        } else {
            w.send_offsets_to_transaction(&offsets, &meta, T)
                .await
                .expect("offsets");
        }
        if step == "commit_transaction" {
            let (r, ()) = tokio::join!(w.commit_transaction(T), async {
                down(node).await;
                up();
            });
            r.unwrap_or_else(|e| panic!("{step}: {e}"));
        } else {
            w.commit_transaction(T).await.expect("commit");
        }
        for f in futs {
            f.await.unwrap_or_else(|e| panic!("{step}: {e}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_times_out_can_be_called_again() {
    let slow = RDKafkaRespErr::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS;
    // One answer held 3 s: a call with a 1 s timeout ends with a typed timeout and leaves
    // the state as it was; the same call made again goes on.
    let short = Duration::from_secs(1);
    let held = Duration::from_secs(3);
    for api in APIS {
        let case = format!("{api:?}");
        let (mock, bootstrap, topic) = setup("txn-timeout");
        let id = unique_topic("tx");
        let group = unique_topic("g");
        let w = writer(&bootstrap, &id);
        let node = if matches!(api, RDKafkaApiKey::TxnOffsetCommit) {
            coordinator(&bootstrap, CoordinatorType::Group, &group).await
        } else {
            coordinator(&bootstrap, CoordinatorType::Transaction, &id).await
        };
        mock.broker_request_errors(node, api, &[(slow, held)]);
        let timed_out = |r: Result<(), TransactionError>, state: TransactionPhase| {
            let e = r.expect_err(&case);
            assert!(
                matches!(e, TransactionError::Timeout { .. }) && e.is_retriable(),
                "{case}: {e}"
            );
            assert_eq!(w.transaction_state(), state, "{case}");
        };
        if api == RDKafkaApiKey::InitProducerId {
            timed_out(
                w.init_transactions(short).await,
                TransactionPhase::Initializing,
            );
        }
        w.init_transactions(T).await.expect("init");
        w.begin_transaction().expect("begin");
        let futs = send_all(&w, &topic, &values("t", 6)).await;
        let offsets = [(topic.as_str(), 0, OffsetAndMetadata::new(6))];
        let meta = ConsumerGroupMetadata::new(group.as_str());
        if api == RDKafkaApiKey::AddPartitionsToTxn {
            // At once, while the router's AddPartitionsToTxn is held: the records wait for
            // their partitions, so the commit's flush does not end in time.
            timed_out(
                w.commit_transaction(short).await,
                TransactionPhase::CommittingTransaction,
            );
            w.commit_transaction(T).await.expect("commit");
            for f in futs {
                f.await.unwrap_or_else(|e| panic!("{case}: {e}"));
            }
            continue;
        }
        if matches!(
            api,
            RDKafkaApiKey::AddOffsetsToTxn | RDKafkaApiKey::TxnOffsetCommit
        ) {
            timed_out(
                w.send_offsets_to_transaction(&offsets, &meta, short).await,
                TransactionPhase::InTransaction,
            );
        }
        w.send_offsets_to_transaction(&offsets, &meta, T)
            .await
            .expect("offsets");
        if api == RDKafkaApiKey::EndTxn {
            timed_out(
                w.commit_transaction(short).await,
                TransactionPhase::CommittingTransaction,
            );
        }
        w.commit_transaction(T).await.expect("commit");
        for f in futs {
            f.await.unwrap_or_else(|e| panic!("{case}: {e}"));
        }
    }
}

/// KIP-360 for a transactional writer: a sequence error on Produce makes the transaction
/// abortable, and its abort bumps the epoch through the transaction coordinator
/// (InitProducerId with the current id and epoch), after which a transaction commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_error_is_abortable_and_the_abort_bumps_the_epoch() {
    for code in [
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID,
    ] {
        let (mock, bootstrap, topic) = setup("txn-bump");
        let w = writer(&bootstrap, &unique_topic("tx"));
        w.init_transactions(T).await.expect("init");
        assert_eq!(mock.requests(RDKafkaApiKey::InitProducerId), 1);
        mock.cluster()
            .request_errors(RDKafkaApiKey::Produce, &[code]);
        w.begin_transaction().expect("begin");
        let futs = send_all(&w, &topic, &values("s", 3)).await;
        let e = w.commit_transaction(T).await.expect_err("abortable");
        assert!(e.is_abortable(), "{code:?}: {e}");
        assert_eq!(e.error_code().map(|c| c.0), Some(code as i16), "{e}");
        w.abort_transaction(T).await.expect("abort");
        assert_eq!(
            mock.requests(RDKafkaApiKey::InitProducerId),
            2,
            "{code:?}: the abort bumped the epoch"
        );
        for f in futs {
            let _ = tokio::time::timeout(T, f).await.expect("an outcome");
        }
        transaction(&w, &topic, &unique_topic("g"), &values("after", 3)).await;
    }
}

/// Issue 31 item 12: an abort whose KIP-360 bump (InitProducerId) timed out is resumed by
/// running only the bump, as Java does: its EndTxn went through, and sent again with the
/// old epoch after the bump it would be fenced (Kafka answers PRODUCER_FENCED; the mock,
/// which gives every InitProducerId a new id, accepts it, so the EndTxn count shows it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_resumed_after_its_bump_timed_out_sends_no_second_end_txn() {
    let (mock, bootstrap, topic) = setup("txn-bump-resume");
    let id = unique_topic("tx");
    let w = writer(&bootstrap, &id);
    w.init_transactions(T).await.expect("init");
    mock.cluster().request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER],
    );
    w.begin_transaction().expect("begin");
    let futs = send_all(&w, &topic, &values("s", 3)).await;
    let e = w.commit_transaction(T).await.expect_err("abortable");
    assert!(e.is_abortable(), "{e}");
    let node = coordinator(&bootstrap, CoordinatorType::Transaction, &id).await;
    mock.broker_request_errors(
        node,
        RDKafkaApiKey::InitProducerId,
        &[(
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS,
            Duration::from_secs(3),
        )],
    );
    let e = w
        .abort_transaction(Duration::from_secs(1))
        .await
        .expect_err("the bump is held past the timeout");
    assert!(matches!(e, TransactionError::Timeout { .. }), "{e}");
    assert_eq!(w.transaction_state(), TransactionPhase::AbortingTransaction);
    assert_eq!(
        mock.requests(RDKafkaApiKey::EndTxn),
        1,
        "the abort's EndTxn"
    );
    w.abort_transaction(T).await.expect("the abort resumed");
    assert_eq!(
        mock.requests(RDKafkaApiKey::EndTxn),
        1,
        "the resumed abort runs only the bump, not EndTxn again"
    );
    for f in futs {
        let _ = tokio::time::timeout(T, f).await.expect("an outcome");
    }
    transaction(&w, &topic, &unique_topic("g"), &values("after", 3)).await;
}

/// Issue 31 item 24: an AddOffsetsToTxn whose answer never came (held past the call's
/// timeout; the broker carried it out) may have begun the transaction on the coordinator, so
/// the transaction's end must not skip EndTxn, or the coordinator keeps it open until
/// `transaction.timeout.ms` (Kafka then aborts it with a new epoch and fences this writer).
/// As Java, which sends the AddOffsetsToTxn again before EndTxn until it is answered, the end
/// sends it again, then EndTxn. Both ends: an abort, and a commit made anyway (nothing of the
/// offsets was committed: TxnOffsetCommit was never sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_end_after_an_unanswered_add_offsets_to_txn_sends_end_txn() {
    for committed in [false, true] {
        let case = if committed { "commit" } else { "abort" };
        let (mock, bootstrap, topic) = setup("txn-offsets-lost");
        let id = unique_topic("tx");
        let group = unique_topic("g");
        let w = writer(&bootstrap, &id);
        w.init_transactions(T).await.expect("init");
        let node = coordinator(&bootstrap, CoordinatorType::Transaction, &id).await;
        mock.broker_request_errors(
            node,
            RDKafkaApiKey::AddOffsetsToTxn,
            &[(
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
                Duration::from_secs(3),
            )],
        );
        w.begin_transaction().expect("begin");
        let offsets = [(topic.as_str(), 0, OffsetAndMetadata::new(6))];
        let meta = ConsumerGroupMetadata::new(group.as_str());
        let e = w
            .send_offsets_to_transaction(&offsets, &meta, Duration::from_secs(1))
            .await
            .expect_err("the answer is held past the timeout");
        assert!(matches!(e, TransactionError::Timeout { .. }), "{case}: {e}");
        assert_eq!(w.transaction_state(), TransactionPhase::InTransaction);
        assert_eq!(mock.requests(RDKafkaApiKey::AddOffsetsToTxn), 1, "{case}");
        if committed {
            w.commit_transaction(T).await.expect("commit");
        } else {
            w.abort_transaction(T).await.expect("abort");
        }
        assert_eq!(
            mock.requests(RDKafkaApiKey::EndTxn),
            1,
            "{case}: the end closes the transaction the unanswered AddOffsetsToTxn may have begun"
        );
        assert_eq!(
            mock.requests(RDKafkaApiKey::AddOffsetsToTxn),
            2,
            "{case}: AddOffsetsToTxn sent again before EndTxn, as Java"
        );
        assert_eq!(w.transaction_state(), TransactionPhase::Ready, "{case}");
        // A transaction without offsets after it ends without EndTxn, as before.
        w.begin_transaction().expect("begin");
        w.abort_transaction(T).await.expect("an empty abort");
        assert_eq!(mock.requests(RDKafkaApiKey::EndTxn), 1, "{case}");
        transaction(&w, &topic, &group, &values("after", 3)).await;
        assert_eq!(mock.requests(RDKafkaApiKey::EndTxn), 2, "{case}");
    }
}
