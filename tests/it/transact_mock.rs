//! Consume-transform-produce ([`GroupTransactSession`]) on librdkafka's mock cluster (one
//! broker), for the session's own bookkeeping under injected faults. The mock neither stores
//! the offsets of a TxnOffsetCommit nor writes transaction markers (see `family/transact.rs`), so
//! the output log cannot tell what was committed; the tests count instead which input records
//! went through the transform in a transaction that `process_once` reported committed. With
//! nothing committed to the group, a rewind goes back to the start of the partition
//! (`auto_offset_reset = Earliest`), which is where a correct rewind must go.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use integration_tests::{GroupMock, unique_topic};
use kafkit::transact::{GroupTransactSession, TransactionOutcome};
use kafkit::{ConsumerRecord, ProducerRecord, TransactionPhase, Writer};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

use super::group_mock::{GUARD, builder, transport, write};

/// The input offsets the transform saw in the open transaction (`pending`) and in committed
/// ones (`committed`, with how many times each).
#[derive(Default)]
struct Book {
    pending: Vec<i64>,
    committed: BTreeMap<i64, usize>,
    errors: Vec<String>,
}

/// One round of `session`, its outcome applied to `book`: a commit moves the pending offsets
/// to the committed ones, an abort (reported, or an error after which no transaction is open)
/// drops them. `None` when the round was cancelled by `within`.
async fn round(
    session: &mut GroupTransactSession,
    transform: &mut (impl FnMut(&ConsumerRecord, &mut Vec<ProducerRecord>) + Send),
    book: &Arc<Mutex<Book>>,
    within: Duration,
) -> Option<()> {
    let outcome = tokio::time::timeout(within, session.process_once(transform)).await;
    let open = session.writer().transaction_state() == TransactionPhase::InTransaction;
    let mut b = book.lock().unwrap();
    match outcome {
        Err(_) => return None,
        Ok(Ok(Some(TransactionOutcome::Committed { .. }))) => {
            let pending = std::mem::take(&mut b.pending);
            for o in pending {
                *b.committed.entry(o).or_default() += 1;
            }
        }
        Ok(Ok(Some(TransactionOutcome::Aborted { .. }))) => b.pending.clear(),
        Ok(Ok(Some(other))) => panic!("an outcome this test does not know: {other:?}"),
        Ok(Ok(None)) => {}
        Ok(Err(e)) => {
            b.errors.push(e.to_string());
            if !open {
                b.pending.clear();
            }
        }
    }
    Some(())
}

/// Issue 31 item 1. A transaction is aborted (its TxnOffsetCommit refused with an abortable
/// `ILLEGAL_GENERATION`), and the rewind that must follow fails (OffsetFetch answered
/// `GROUP_AUTHORIZATION_FAILED`); the next round is cancelled while it waits for a slow
/// OffsetFetch. The duty to rewind survives both: a later round rewinds before it reads, so
/// every input record goes through the transform in a committed transaction exactly once.
/// Before the fix, the flag was cleared before the rewind ran, the member read on from where
/// it stood, and the aborted input was never committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_cancelled_rewind_after_an_abort_is_run_again() {
    let mock = GroupMock::new(1);
    mock.initial_rebalance_delay(Duration::from_millis(300));
    let bootstrap = mock.bootstrap();
    let topic = unique_topic("transact-rewind");
    let group = unique_topic("g-transact-rewind");
    mock.cluster().create_topic(&topic, 1, 1).expect("topic");

    let member = builder(
        &bootstrap,
        &group,
        &topic,
        Arc::new(kafkit::group_balancer::RangeAssignor::new()),
    );
    let writer = Writer::builder(transport(&bootstrap))
        .transactional_id(format!("{group}-1"))
        .linger(Duration::from_millis(5))
        .build()
        .expect("writer");
    let mut session = GroupTransactSession::builder(member, writer)
        .commit_every(1000)
        .commit_interval(Duration::from_millis(500))
        .timeout(Duration::from_secs(5))
        .build()
        .expect("session");
    let book = Arc::new(Mutex::new(Book::default()));
    let seen = Arc::clone(&book);
    let out_topic = format!("{topic}-out");
    mock.cluster()
        .create_topic(&out_topic, 1, 1)
        .expect("topic");
    let mut transform = move |r: &ConsumerRecord, out: &mut Vec<ProducerRecord>| {
        seen.lock().unwrap().pending.push(r.offset);
        out.push(ProducerRecord::new(out_topic.clone(), r.offset.to_string()).partition(0));
    };
    let deadline = tokio::time::Instant::now() + GUARD;

    // The member owns the partition (its own OffsetFetch is done) before faults are set.
    while session.member().assignment().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "assigned within {GUARD:?}"
        );
        round(&mut session, &mut transform, &book, GUARD).await;
    }
    mock.push_request_errors(
        RDKafkaApiKey::TxnOffsetCommit as i16,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION],
    );
    mock.push_request_errors(
        RDKafkaApiKey::OffsetFetch as i16,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED],
    );
    write(&bootstrap, &topic, 1, 10).await;

    // The first transaction ends: refused, aborted, and its rewind fails.
    while book.lock().unwrap().errors.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the refused commit within {GUARD:?}"
        );
        round(&mut session, &mut transform, &book, GUARD).await;
    }
    let first = book.lock().unwrap().errors[0].clone();
    assert!(first.contains("rewind"), "the rewind failed: {first}");

    // The next round is cancelled while an OffsetFetch (of a rewind) waits for its answer.
    mock.broker_request_errors(
        1,
        RDKafkaApiKey::OffsetFetch,
        &[(
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
            Duration::from_secs(3),
        )],
    );
    let cancelled = round(
        &mut session,
        &mut transform,
        &book,
        Duration::from_millis(700),
    )
    .await
    .is_none();
    assert!(
        cancelled,
        "the round runs the rewind owed and waits for its OffsetFetch (errors: {:?})",
        book.lock().unwrap().errors
    );

    write(&bootstrap, &topic, 1, 10).await;
    while !book.lock().unwrap().committed.contains_key(&19) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "offset 19 committed within {GUARD:?}: {:?}",
            book.lock().unwrap().committed
        );
        round(&mut session, &mut transform, &book, GUARD).await;
    }
    let (committed, errors) = {
        let b = book.lock().unwrap();
        (b.committed.clone(), b.errors.clone())
    };
    let want: BTreeMap<i64, usize> = (0..20).map(|o| (o, 1)).collect();
    assert_eq!(
        committed, want,
        "each input offset committed exactly once (errors on the way: {errors:?})"
    );
    session.close().await.expect("close");
}

/// Issue 31 item 11. The writer's `init_transactions` (run by the first round) times out
/// (InitProducerId answered after the session's timeout), then the next round is cancelled
/// while a second InitProducerId waits for its answer: the writer stays `Initializing`. The
/// next rounds initialize it again and go on, so the records written then are committed.
/// Before the fix only an `Uninitialized` writer was initialized, and every later round
/// failed to begin a transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_or_cancelled_init_transactions_is_run_again() {
    let mock = GroupMock::new(1);
    mock.initial_rebalance_delay(Duration::from_millis(300));
    let bootstrap = mock.bootstrap();
    let topic = unique_topic("transact-init");
    let group = unique_topic("g-transact-init");
    mock.cluster().create_topic(&topic, 1, 1).expect("topic");
    let out_topic = format!("{topic}-out");
    mock.cluster()
        .create_topic(&out_topic, 1, 1)
        .expect("topic");
    let member = builder(
        &bootstrap,
        &group,
        &topic,
        Arc::new(kafkit::group_balancer::RangeAssignor::new()),
    );
    let writer = Writer::builder(transport(&bootstrap))
        .transactional_id(format!("{group}-1"))
        .linger(Duration::from_millis(5))
        .build()
        .expect("writer");
    let mut session = GroupTransactSession::builder(member, writer)
        .commit_every(1000)
        .commit_interval(Duration::from_millis(500))
        .timeout(Duration::from_secs(1))
        .build()
        .expect("session");
    let book = Arc::new(Mutex::new(Book::default()));
    let seen = Arc::clone(&book);
    let mut transform = move |r: &ConsumerRecord, out: &mut Vec<ProducerRecord>| {
        seen.lock().unwrap().pending.push(r.offset);
        out.push(ProducerRecord::new(out_topic.clone(), r.offset.to_string()).partition(0));
    };
    let slow = [(
        RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
        Duration::from_secs(2),
    )];
    mock.broker_request_errors(1, RDKafkaApiKey::InitProducerId, &slow);
    round(&mut session, &mut transform, &book, GUARD).await;
    let first = book.lock().unwrap().errors.clone();
    assert_eq!(
        first.len(),
        1,
        "the first round's init timed out: {first:?}"
    );
    assert_eq!(
        session.writer().transaction_state(),
        TransactionPhase::Initializing
    );
    mock.broker_request_errors(1, RDKafkaApiKey::InitProducerId, &slow);
    let cancelled = round(
        &mut session,
        &mut transform,
        &book,
        Duration::from_millis(300),
    )
    .await
    .is_none();
    assert!(cancelled, "the second round waits for its InitProducerId");

    write(&bootstrap, &topic, 1, 5).await;
    let deadline = tokio::time::Instant::now() + GUARD;
    while !book.lock().unwrap().committed.contains_key(&4) {
        if tokio::time::Instant::now() >= deadline {
            let b = book.lock().unwrap();
            panic!(
                "offset 4 committed within {GUARD:?}: committed {:?}, errors {:?}",
                b.committed, b.errors
            );
        }
        round(&mut session, &mut transform, &book, GUARD).await;
    }
    let committed = book.lock().unwrap().committed.clone();
    let want: BTreeMap<i64, usize> = (0..5).map(|o| (o, 1)).collect();
    assert_eq!(committed, want);
    session.close().await.expect("close");
}
