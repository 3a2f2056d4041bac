//! The Reader's fetch sessions (KIP-227) against Apache Kafka, the only broker here that hands
//! them out (tansu and the mock answer session id 0). What the broker did with each session is
//! read from its log (`integration_tests::kafka_log`: `FetchManager` at TRACE names the
//! partitions each incremental request added, updated and removed, and each session removed).
//! A fault relay in front of Kafka (`integration_tests::kafka_relay`) damages or cuts an
//! answer, and records every Fetch the Reader sent and what Kafka answered.
//!
//! The session errors (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH) are Kafka's
//! own answers: a second client in the test does to the Reader's session what an eviction or
//! a request processed twice would do (it closes the session, or moves its epoch on with an
//! incremental Fetch of its own: Kafka does not tie a session to a connection), and the
//! Reader's next Fetch meets the error.

use std::time::Duration;

use integration_tests::{create_topic, kafka, kafka_log_line, unique_topic};
use kafkit::{ProducerRecord, Reader, StartOffset, Transport, Writer};

const T: Duration = Duration::from_secs(30);
const FETCH: i16 = 1;

fn transport() -> Transport {
    Transport::builder([kafka()]).build().expect("transport")
}

async fn write(topic: &str, partition: i32, n: usize) {
    let w = Writer::builder(transport()).build().expect("writer");
    let records = (0..n)
        .map(|i| ProducerRecord::new(topic, format!("v{i}")).partition(partition))
        .collect();
    w.write(records).await.expect("written");
    w.close(Duration::from_secs(10)).await.expect("close");
}

async fn read(reader: &Reader, n: usize) {
    let mut got = 0;
    while got < n {
        let batch = tokio::time::timeout(T, reader.next_batch())
            .await
            .expect("records within the bound")
            .expect("next_batch");
        got += batch.iter().map(|p| p.records.len()).sum::<usize>();
    }
    assert_eq!(got, n);
}

/// The session id of the incremental request line `line` of Kafka's log.
fn session_of(line: &str) -> String {
    line.split("session id ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .expect("a session id")
        .to_string()
}

/// A partition unassigned from a Reader is forgotten by its session: the next incremental Fetch
/// names it among the partitions to remove, and the session goes on with the other one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unassigned_partition_is_forgotten_by_the_session() {
    let topic = unique_topic("reader-forget");
    create_topic(&kafka(), &topic, 2).await;
    write(&topic, 0, 5).await;
    write(&topic, 1, 5).await;
    let reader = Reader::builder(transport())
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    reader
        .assign((0..2).map(|p| (topic.as_str(), p, StartOffset::Earliest)))
        .expect("assign");
    read(&reader, 10).await;
    reader.unassign([(topic.as_str(), 1)]);
    write(&topic, 0, 3).await;
    read(&reader, 3).await;
    let removed = format!(":{topic}-1]");
    let line = kafka_log_line(|l| {
        l.contains("Created a new incremental FetchContext for session id")
            && l.contains("removed [")
            && l.contains(&removed)
    })
    .await;
    assert_ne!(session_of(&line), "0", "{line}");
    reader.close();
}

/// Partitions unassigned and assigned again at the offsets the fetch session already holds for
/// them (an eager rebalance hands a group member its partitions back at their committed
/// offsets) learn their log end from the next Fetch. An incremental Fetch is answered only
/// with news (records, a moved high watermark), so a session that kept them would never
/// answer for them; their high watermark (and `lag`) stayed unknown, and the Reader, which
/// holds back a Fetch of only caught-up partitions while others drain, long-polled them
/// instead (the group bench's eager-rebalance stall: seconds per few MB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_assigned_again_at_the_sessions_offsets_learn_their_log_end() {
    let topic = unique_topic("reader-reassign-session");
    create_topic(&kafka(), &topic, 2).await;
    write(&topic, 0, 5).await;
    write(&topic, 1, 5).await;
    let reader = Reader::builder(transport())
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    let t = topic.as_str();
    let both = |at: StartOffset| (0..2).map(move |p| (t, p, at));
    reader.assign(both(StartOffset::Earliest)).expect("assign");
    read(&reader, 10).await;
    // An incremental Fetch at the log end (offset 5 of both) answered: the session holds both.
    kafka_log_line(|l| {
        l.contains("Created a new incremental FetchContext for session id")
            && l.contains(&format!(":{topic}-0"))
    })
    .await;
    for round in 0..3 {
        reader.unassign_all();
        reader
            .assign(both(StartOffset::At(5)))
            .expect("assign again");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let lags = (reader.lag(&topic, 0), reader.lag(&topic, 1));
            if lags == (Some(0), Some(0)) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: the log end is still unknown after 5 s (50 fetch waits): {lags:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    reader.close();
}

/// Closing a Reader closes its fetch session on the broker (a full Fetch with the session's id
/// and the final epoch, as Java's consumer sends on close), so the broker's session cache does
/// not hold it until it expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_reader_closes_its_fetch_session() {
    let topic = unique_topic("reader-close-session");
    create_topic(&kafka(), &topic, 1).await;
    write(&topic, 0, 5).await;
    let reader = Reader::builder(transport())
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    reader
        .assign([(topic.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    read(&reader, 5).await;
    write(&topic, 0, 1).await;
    read(&reader, 1).await;
    let incremental = kafka_log_line(|l| {
        l.contains("Created a new incremental FetchContext for session id")
            && l.contains(&format!(":{topic}-0"))
    })
    .await;
    let session = session_of(&incremental);
    reader.close();
    let closed = format!("Removed fetch session {session}.");
    kafka_log_line(|l| l.contains(&closed) && l.contains("Will not try to create a new session"))
        .await;
}

/// A session given up after a failed request is closed by the next full Fetch (its id with
/// epoch 0, Java's `nextCloseExisting`): through the relay in front of Kafka, one Fetch answer is
/// made undecodable; the broker logs the session removed, and the Reader reads on in a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_given_up_after_a_failed_fetch_is_closed() {
    let (_one, relay) = integration_tests::kafka_relay().await;
    let topic = unique_topic("reader-session-error");
    create_topic(relay.addr(), &topic, 1).await;
    write(&topic, 0, 5).await;
    let reader = Reader::builder(
        Transport::builder([relay.addr()])
            .build()
            .expect("transport"),
    )
    .fetch_max_wait(Duration::from_millis(100))
    .build()
    .expect("reader");
    reader
        .assign([(topic.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    read(&reader, 5).await;
    let incremental = kafka_log_line(|l| {
        l.contains("Created a new incremental FetchContext for session id")
            && l.contains(&format!(":{topic}-0"))
    })
    .await;
    let session = session_of(&incremental);
    relay.fault_next_response(FETCH, integration_tests::ResponseFault::Undecodable);
    write(&topic, 0, 3).await;
    // The undecodable answer is reported once (no retry mends a decode error); then the Reader
    // fetches on, in a new session.
    let (mut got, mut errors) = (0, 0);
    while got < 3 {
        match tokio::time::timeout(T, reader.next_batch())
            .await
            .expect("records within the bound")
        {
            Ok(batch) => got += batch.iter().map(|p| p.records.len()).sum::<usize>(),
            Err(e) => {
                errors += 1;
                assert!(
                    matches!(e, kafkit::Error::Reader(kafkit::ReaderError::Fetch { .. })),
                    "{e}"
                );
            }
        }
    }
    assert_eq!((got, errors), (3, 1));
    let closed = format!("Removed fetch session {session}.");
    let line = kafka_log_line(|l| l.contains(&closed)).await;
    assert!(
        line.contains("Created a new full FetchContext with"),
        "closed by a full Fetch that opens a new session: {line}"
    );
    reader.close();
}

/// One Fetch the Reader sent through the relay, and Kafka's answer as the relay carried it.
#[derive(Debug, Clone)]
struct Exchange {
    conn: u64,
    session_id: i32,
    epoch: i32,
    /// Each partition the request named, with its fetch offset.
    partitions: Vec<(i32, i64)>,
    /// The answer's top-level error and session id (`None`: not answered yet).
    answer: Option<(kafkit::protocol::ErrorCode, i32)>,
}

/// The Fetch exchanges carried by a relay that records (`Relay::record`), in the order the
/// requests arrived.
#[derive(Default)]
struct FetchTrace {
    exchanges: Vec<Exchange>,
    /// (connection, correlation id) -> (request version, index into `exchanges`).
    pending: std::collections::HashMap<(u64, i32), (i16, usize)>,
}

impl FetchTrace {
    /// Takes the frames the relay recorded since the last call.
    fn update(&mut self, relay: &integration_tests::Relay) {
        use bytes::{Buf, Bytes};
        use kafkit::protocol::messages::FetchRequest;
        use kafkit::protocol::{Message, Request};
        for f in relay.take_recorded() {
            let mut buf = Bytes::from(f.frame);
            buf.advance(4);
            if f.request {
                let (api, version, correlation) = (buf.get_i16(), buf.get_i16(), buf.get_i32());
                if api != FETCH {
                    continue;
                }
                let n = usize::try_from(buf.get_i16()).unwrap_or(0);
                buf.advance(n);
                if FetchRequest::request_header_version(version) >= 2 {
                    assert_eq!(buf.get_u8(), 0, "no tagged fields in our request headers");
                }
                let req = FetchRequest::decode(&mut buf, version).expect("a Fetch request");
                self.pending
                    .insert((f.conn, correlation), (version, self.exchanges.len()));
                self.exchanges.push(Exchange {
                    conn: f.conn,
                    session_id: req.session_id,
                    epoch: req.session_epoch,
                    partitions: req
                        .topics
                        .iter()
                        .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.fetch_offset)))
                        .collect(),
                    answer: None,
                });
            } else {
                let correlation = buf.clone().get_i32();
                let Some((version, i)) = self.pending.remove(&(f.conn, correlation)) else {
                    continue;
                };
                let (_, resp) =
                    kafkit::protocol::protocol::decode_response_frame::<FetchRequest>(buf, version)
                        .expect("a Fetch answer");
                self.exchanges[i].answer = Some((resp.error_code, resp.session_id));
            }
        }
    }

    /// Waits until an exchange from index `from` on satisfies `wanted`, and returns its index.
    async fn wait_for(
        &mut self,
        relay: &integration_tests::Relay,
        what: &str,
        from: usize,
        wanted: impl Fn(&Exchange) -> bool,
    ) -> usize {
        let deadline = tokio::time::Instant::now() + T;
        loop {
            self.update(relay);
            if let Some(i) = self.exchanges.iter().skip(from).position(&wanted) {
                return from + i;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no Fetch {what} within {T:?}: {:#?}",
                self.exchanges
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Reads `n` records (every batch `Ok`: an error reaching the application fails the test) and
/// appends each one's (partition, offset) to `seen`.
async fn read_into(reader: &Reader, n: usize, seen: &mut Vec<(i32, i64)>) {
    let mut got = 0;
    while got < n {
        let batch = tokio::time::timeout(T, reader.next_batch())
            .await
            .expect("records within the bound")
            .unwrap_or_else(|e| panic!("an error reached the application: {e}"));
        for p in &batch {
            got += p.records.len();
            seen.extend(p.records.iter().map(|r| (p.partition, r.offset)));
        }
    }
    assert_eq!(got, n);
}

/// Every partition of `0..partitions` was read from offset 0 to `each - 1`, in order, each
/// record once.
fn assert_each_once(seen: &[(i32, i64)], partitions: i32, each: i64) {
    for p in 0..partitions {
        let offsets: Vec<i64> = seen
            .iter()
            .filter(|(q, _)| *q == p)
            .map(|(_, o)| *o)
            .collect();
        assert_eq!(offsets, (0..each).collect::<Vec<_>>(), "partition {p}");
    }
}

/// A Reader through the Kafka relay, reading both partitions of `topic` from the start.
fn relayed_reader(relay: &integration_tests::Relay, topic: &str, max_wait: Duration) -> Reader {
    let reader = Reader::builder(
        Transport::builder([relay.addr()])
            .build()
            .expect("transport"),
    )
    .fetch_max_wait(max_wait)
    .build()
    .expect("reader");
    reader
        .assign((0..2).map(|p| (topic, p, StartOffset::Earliest)))
        .expect("assign");
    reader
}

/// The Reader's session once it fetches incrementally: waits for an answered incremental
/// Fetch and returns its session id.
async fn incremental_session(trace: &mut FetchTrace, relay: &integration_tests::Relay) -> i32 {
    let i = trace
        .wait_for(relay, "answered in a session", 0, |e| {
            e.session_id != 0 && e.epoch > 0 && e.answer.is_some()
        })
        .await;
    trace.exchanges[i].session_id
}

/// A second client's Fetch on the Reader's session (Kafka does not tie a session to its
/// connection): `epoch` -1 closes it (what an eviction does to it), another epoch is an
/// What each fetch-session test starts from: Kafka's relay (recording), a topic of two
/// partitions with 5 records each, a Reader through the relay (Fetches waiting up to
/// `max_wait`) that read them, and the incremental session it holds by then.
struct Session {
    /// Held for the test: one test at a time owns the relay's port.
    _relay_lock: tokio::sync::MutexGuard<'static, ()>,
    relay: integration_tests::Relay,
    topic: String,
    reader: Reader,
    seen: Vec<(i32, i64)>,
    trace: FetchTrace,
    session: i32,
}

impl Session {
    async fn start(prefix: &str, max_wait: Duration) -> Session {
        let (_relay_lock, relay) = integration_tests::kafka_relay().await;
        relay.record(true);
        let topic = unique_topic(prefix);
        create_topic(&kafka(), &topic, 2).await;
        write(&topic, 0, 5).await;
        write(&topic, 1, 5).await;
        let reader = relayed_reader(&relay, &topic, max_wait);
        let mut seen = Vec::new();
        read_into(&reader, 10, &mut seen).await;
        let mut trace = FetchTrace::default();
        let session = incremental_session(&mut trace, &relay).await;
        Session {
            _relay_lock,
            relay,
            topic,
            reader,
            seen,
            trace,
            session,
        }
    }
}

/// incremental Fetch that moves its epoch on. Returns the answer's error.
async fn meddle(conn: &kafkit::Conn, session_id: i32, epoch: i32) -> kafkit::protocol::ErrorCode {
    let mut req = kafkit::protocol::messages::FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20);
    req.replica_id = -1;
    if conn
        .version_for::<kafkit::protocol::messages::FetchRequest>(None)
        .expect("Fetch")
        >= 15
    {
        req.replica_id = kafkit::protocol::messages::FetchRequest::default().replica_id;
    }
    req.session_id = session_id;
    req.session_epoch = epoch;
    conn.request(&req).await.expect("an answer").error_code
}

/// FETCH_SESSION_ID_NOT_FOUND from Kafka: the Reader's session is gone from the broker's cache
/// (closed by another client here, as an eviction or a broker restart loses it). The error does
/// not reach the application; the next Fetch is full at epoch 0 and names no session (there is
/// none to close), Kafka answers it with a new session, the Reader goes on incrementally in it,
/// and every record is read once, the partitions continuing where they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_session_the_broker_lost_is_replaced() {
    use kafkit::protocol::ErrorCode;
    let Session {
        _relay_lock,
        relay,
        topic,
        reader,
        mut seen,
        mut trace,
        session: lost,
    } = Session::start("reader-session-lost", Duration::from_millis(500)).await;

    let other = integration_tests::dial(&kafka(), "session-evictor").await;
    assert_eq!(meddle(&other, lost, -1).await, ErrorCode::NONE);
    kafka_log_line(|l| l.contains(&format!("Removed fetch session {lost}."))).await;

    let refused = trace
        .wait_for(&relay, "answered FETCH_SESSION_ID_NOT_FOUND", 0, |e| {
            e.answer
                .is_some_and(|(c, _)| c == ErrorCode::FETCH_SESSION_ID_NOT_FOUND)
        })
        .await;
    assert_eq!(trace.exchanges[refused].session_id, lost);
    write(&topic, 0, 5).await;
    write(&topic, 1, 5).await;
    read_into(&reader, 10, &mut seen).await;
    assert_each_once(&seen, 2, 10);

    let next = trace
        .wait_for(&relay, "answered after the refused one", refused + 1, |e| {
            e.answer.is_some()
        })
        .await;
    assert_eq!(next, refused + 1, "{:#?}", trace.exchanges);
    let next = trace.exchanges[next].clone();
    assert_eq!(
        (next.session_id, next.epoch),
        (0, 0),
        "a full Fetch asking for a new session, naming none: {next:?}"
    );
    let mut parts = next.partitions.clone();
    parts.sort_unstable();
    assert_eq!(parts, vec![(0, 5), (1, 5)], "every partition, where it was");
    let (code, new) = next.answer.expect("answered");
    assert_eq!(code, ErrorCode::NONE);
    assert!(new != 0 && new != lost, "a new session: {new}");
    trace
        .wait_for(&relay, "incremental in the new session", refused, |e| {
            e.session_id == new && e.epoch == 1 && e.answer.is_some_and(|(c, _)| c.is_ok())
        })
        .await;
    kafka_log_line(|l| {
        l.contains(&format!(
            "Session error for {lost}: no such session ID found."
        ))
    })
    .await;
    kafka_log_line(|l| l.contains(&format!("Created fetch session FetchSession(id={new},"))).await;
    reader.close();
}

/// INVALID_FETCH_SESSION_EPOCH from Kafka: an incremental Fetch the Reader did not send moved
/// its session's epoch on (another client's here; a request carried out twice would do the
/// same). Kafka refuses the Reader's Fetch at the old epoch (the one it holds, or the next);
/// the error does not reach the application; the next Fetch is full at epoch 0 and names the
/// refused session, which Kafka closes as it hands out a new one; the Reader goes on
/// incrementally in that, and every record is read once, the partitions continuing where they
/// were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_session_epoch_the_broker_refuses_starts_a_new_session() {
    use kafkit::protocol::ErrorCode;
    // A long poll: the Reader's idle Fetch waits at the broker, out of the other client's way.
    let Session {
        _relay_lock,
        relay,
        topic,
        reader,
        mut seen,
        mut trace,
        session: refused_session,
    } = Session::start("reader-session-epoch", Duration::from_secs(2)).await;

    // The broker's epoch is one past the epoch of the Reader's last Fetch it took: tried from
    // the Reader's last request, again while the Reader's own Fetch got there first.
    let other = integration_tests::dial(&kafka(), "session-duplicate").await;
    let mut tries = 0;
    loop {
        trace.update(&relay);
        let last = trace
            .exchanges
            .iter()
            .rev()
            .find(|e| e.session_id == refused_session)
            .expect("the session's requests");
        match meddle(&other, refused_session, last.epoch + 1).await {
            ErrorCode::NONE => break,
            e => assert_eq!(e, ErrorCode::INVALID_FETCH_SESSION_EPOCH),
        }
        tries += 1;
        assert!(tries < 100, "the session's epoch never caught");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let refused = trace
        .wait_for(&relay, "answered INVALID_FETCH_SESSION_EPOCH", 0, |e| {
            e.answer
                .is_some_and(|(c, _)| c == ErrorCode::INVALID_FETCH_SESSION_EPOCH)
        })
        .await;
    assert_eq!(trace.exchanges[refused].session_id, refused_session);
    write(&topic, 0, 5).await;
    write(&topic, 1, 5).await;
    read_into(&reader, 10, &mut seen).await;
    assert_each_once(&seen, 2, 10);

    let next = trace
        .wait_for(&relay, "answered after the refused one", refused + 1, |e| {
            e.answer.is_some()
        })
        .await;
    assert_eq!(next, refused + 1, "{:#?}", trace.exchanges);
    let next = trace.exchanges[next].clone();
    assert_eq!(
        (next.session_id, next.epoch),
        (refused_session, 0),
        "a full Fetch closing the refused session: {next:?}"
    );
    let mut parts = next.partitions.clone();
    parts.sort_unstable();
    assert_eq!(parts, vec![(0, 5), (1, 5)], "every partition, where it was");
    let (code, new) = next.answer.expect("answered");
    assert_eq!(code, ErrorCode::NONE);
    assert!(new != 0 && new != refused_session, "a new session: {new}");
    trace
        .wait_for(&relay, "incremental in the new session", refused, |e| {
            e.session_id == new && e.epoch == 1 && e.answer.is_some_and(|(c, _)| c.is_ok())
        })
        .await;
    // Refused when it arrived, or (having waited at the broker) when it was answered.
    kafka_log_line(|l| {
        l.contains(&format!(
            "Session error for {refused_session}: expected epoch"
        )) || (l.contains(&format!(
            "Incremental fetch session {refused_session} expected epoch"
        )) && l.contains("Possible duplicate request"))
    })
    .await;
    let closed = kafka_log_line(|l| {
        l.contains(&format!("Removed fetch session {refused_session}."))
            && l.contains("Created a new full FetchContext with")
    })
    .await;
    assert!(closed.contains(&format!(":{topic}-0")), "{closed}");
    kafka_log_line(|l| l.contains(&format!("Created fetch session FetchSession(id={new},"))).await;
    reader.close();
}

/// A Fetch answer lost on the way (the connection cut within it, after Kafka carried the
/// request out): the Reader does not send the session's epoch again (Kafka would refuse it,
/// INVALID_FETCH_SESSION_EPOCH), it gives the session up, as Java's `FetchSessionHandler`
/// does after a failed request: its next Fetch, on a new connection, is full at epoch 0 and
/// names the session, which Kafka closes as it hands out a new one. Nothing reaches the
/// application (a cut connection is retried) and every record is read once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_answer_cut_off_gives_the_session_up_instead_of_resending_its_epoch() {
    use kafkit::protocol::ErrorCode;
    let Session {
        _relay_lock,
        relay,
        topic,
        reader,
        mut seen,
        mut trace,
        session,
    } = Session::start("reader-session-cut", Duration::from_millis(500)).await;

    relay.cut_within(FETCH, 1);
    let deadline = tokio::time::Instant::now() + T;
    while relay.cuts_within() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no Fetch answer cut"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    trace.update(&relay);
    let cut = trace
        .exchanges
        .iter()
        .rposition(|e| e.session_id == session && e.epoch > 0)
        .expect("the cut Fetch");
    write(&topic, 0, 5).await;
    write(&topic, 1, 5).await;
    read_into(&reader, 10, &mut seen).await;
    assert_each_once(&seen, 2, 10);

    let next = trace
        .wait_for(&relay, "answered after the cut one", cut + 1, |e| {
            e.answer.is_some()
        })
        .await;
    assert_eq!(next, cut + 1, "{:#?}", trace.exchanges);
    let next = trace.exchanges[next].clone();
    assert_ne!(next.conn, trace.exchanges[cut].conn, "a new connection");
    assert_eq!(
        (next.session_id, next.epoch),
        (session, 0),
        "a full Fetch closing the session: {next:?}"
    );
    let (code, new) = next.answer.expect("answered");
    assert_eq!(code, ErrorCode::NONE);
    assert!(new != 0 && new != session, "a new session: {new}");
    // The relay records an answer before it cuts it: the cut one shows as Kafka sent it.
    assert!(
        trace
            .exchanges
            .iter()
            .all(|e| e.answer.is_none_or(|(c, _)| c.is_ok())),
        "no Fetch refused: {:#?}",
        trace.exchanges
    );
    let closed = kafka_log_line(|l| {
        l.contains(&format!("Removed fetch session {session}."))
            && l.contains("Created a new full FetchContext with")
    })
    .await;
    assert!(closed.contains(&format!(":{topic}-0")), "{closed}");
    reader.close();
}

/// Issue 32: ListOffsets v11 on Kafka 4.4 (KIP-1023's earliest pending upload, timestamp -6),
/// with the tiered-storage specs before it. Without tiered storage Kafka answers the local
/// log start for `EarliestLocal` (the log start, 0) and -1 (unknown) for `LatestTiered` and
/// `EarliestPendingUpload`; every request went at v11 (seen through the relay).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_offsets_v11_answers_the_tiered_storage_specs() {
    use kafkit::OffsetSpec;
    let (_one, relay) = integration_tests::kafka_relay().await;
    let topic = unique_topic("list-offsets-v11");
    create_topic(&kafka(), &topic, 1).await;
    write(&topic, 0, 3).await;
    const LIST_OFFSETS: i16 = 2;
    relay.capture(LIST_OFFSETS);
    let admin = kafkit::admin::Client::new(
        Transport::builder([relay.addr()])
            .build()
            .expect("transport"),
    );
    let specs = [
        (OffsetSpec::Earliest, 0),
        (OffsetSpec::Latest, 3),
        (OffsetSpec::EarliestLocal, 0),
        (OffsetSpec::LatestTiered, -1),
        (OffsetSpec::EarliestPendingUpload, -1),
    ];
    for (spec, want) in specs {
        let got = admin
            .list_offsets(
                &[(topic.as_str(), 0, spec)],
                kafkit::IsolationLevel::ReadUncommitted,
            )
            .await
            .expect("ListOffsets");
        let info = got[0].1.as_ref().expect("partition answered");
        assert_eq!(info.offset, want, "{spec:?}");
    }
    let versions: Vec<i16> = relay
        .take_captured()
        .into_iter()
        .map(|(_, frame)| i16::from_be_bytes([frame[6], frame[7]]))
        .collect();
    assert_eq!(versions, [11; 5], "ListOffsets v11 on Kafka 4.4");
}
