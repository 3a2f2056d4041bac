//! The Writer and Transport under the faults of a hard review (issue 13), each test written to
//! fail on the code before its fix: librdkafka's mock cluster (round-trip times, leaders, brokers
//! down), and a fault relay in front of a tansu of the test's own (`integration_tests::Relay`,
//! `OwnedTansu`) for half-open connections, KIP-368 re-authentication and answers lost after
//! the broker appended, and librdkafka's mock cluster behind relays (`RelayedMock`) for
//! several brokers one of which stops answering. No fake broker.

use std::time::{Duration, Instant};

use bytes::Bytes;
use integration_tests::{
    OwnedTansu, Relay, RelayedMock, ResponseFault, mock_cluster, unique_topic,
};
use kafkit::protocol::ApiKey;
use kafkit::{Compression, ProduceError, ProducerRecord, Transport, Writer};

const GUARD: Duration = Duration::from_secs(30);
const PRODUCE: i16 = 0;
const METADATA: i16 = 3;

fn transport(bootstrap: &str) -> Transport {
    Transport::builder(bootstrap.split(','))
        .retry_backoff(Duration::from_millis(20))
        .retry_backoff_max(Duration::from_millis(200))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport")
}

fn metadata_requests(t: &Transport, brokers: i32) -> u64 {
    (-1..=brokers)
        .map(|n| t.requests_sent(n, ApiKey::Metadata))
        .sum()
}

/// Item 3: 1,000 `try_send` to a topic that does not exist (auto-creation off) share one
/// lookup: a handful of Metadata requests in a second, not thousands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_send_to_a_missing_topic_does_not_storm_metadata() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let t = transport(&bootstrap);
    let w = Writer::builder(t.clone())
        .allow_auto_topic_creation(false)
        .build()
        .expect("writer");
    t.metadata().await.expect("metadata");
    let topic = unique_topic("h-missing");
    let start = metadata_requests(&t, 3);
    for i in 0..1_000 {
        let r = w.try_send(ProducerRecord::new(&topic, format!("v{i}")));
        assert!(r.is_err(), "the topic does not exist");
    }
    // The measurement window: one second of whatever the writer does by itself.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sent = metadata_requests(&t, 3) - start;
    eprintln!("Metadata requests in 1 s after 1000 try_send: {sent}");
    assert!(sent <= 20, "{sent} Metadata requests within a second");
}

/// Item 4: a partition whose first record came while its leader was unknown, then a record
/// after cached metadata names a leader whose sender already runs: that sender is woken (it
/// used to sleep with nothing due, and the batch waited forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_learned_in_send_wakes_a_running_sender() {
    let cluster = mock_cluster(1);
    let topic = unique_topic("h-wake");
    cluster.create_topic(&topic, 2, 1).expect("topic");
    cluster
        .partition_leader(&topic, 1, None)
        .expect("no leader");
    let bootstrap = cluster.bootstrap_servers();
    let t = transport(&bootstrap);
    // A long retry backoff keeps the router from finding the leader itself first.
    let w = Writer::builder(t.clone())
        .linger(Duration::from_millis(5))
        .retry_backoff(Duration::from_secs(5))
        .delivery_timeout(Duration::from_secs(60))
        .build()
        .expect("writer");
    let rec = |p: i32, v: &'static str| {
        ProducerRecord::new(&topic, Bytes::from_static(v.as_bytes())).partition(p)
    };
    // Broker 1's sender starts and goes idle.
    w.produce(rec(0, "p0")).await.expect("p0");
    let first = w.send(rec(1, "early")).await.expect("send");
    cluster
        .partition_leader(&topic, 1, Some(1))
        .expect("leader");
    // The transport learns the leader (a refresh of ours); the writer's next send reads it.
    let end = Instant::now() + GUARD;
    loop {
        t.invalidate_metadata();
        let md = t.metadata_for(&[topic.as_str()]).await.expect("metadata");
        if md
            .topic(&topic)
            .is_some_and(|x| x.partitions[1].leader_id == 1)
        {
            break;
        }
        assert!(Instant::now() < end, "the mock names the new leader");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = w.send(rec(1, "late")).await.expect("send");
    let a = tokio::time::timeout(Duration::from_secs(3), first)
        .await
        .expect("the batch was sent within 3 s");
    let b = tokio::time::timeout(Duration::from_secs(3), second)
        .await
        .expect("the batch was sent within 3 s");
    assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// Item 8: a record larger than `buffer_memory` that compresses below `batch_size` fails typed
/// at once (it used to wait in `send` for buffer room that can never come); a `send` given up
/// while it waits for room leaks no buffer space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffer_accounting_holds_for_dropped_sends_and_oversized_records() {
    let cluster = mock_cluster(1);
    let topic = unique_topic("h-buffer");
    cluster.create_topic(&topic, 1, 1).expect("topic");
    let bootstrap = cluster.bootstrap_servers();
    let w = Writer::builder(transport(&bootstrap))
        .batch_size(4_096)
        .buffer_memory(4_096)
        .max_buffered_records(1)
        .compression(Compression::Lz4)
        .linger(Duration::ZERO)
        .build()
        .expect("writer");
    let big = ProducerRecord::new(&topic, Bytes::from(vec![0u8; 10_000]));
    match tokio::time::timeout(Duration::from_secs(5), w.send(big)).await {
        Ok(Err(ProduceError::RecordTooLarge { max, .. })) => assert_eq!(max, 4_096),
        Ok(other) => panic!("expected RecordTooLarge, got {:?}", other.map(|_| ())),
        Err(_) => panic!("send of a record larger than the buffer waited 5 s"),
    }
    w.produce(ProducerRecord::new(&topic, "warm"))
        .await
        .expect("warm-up");
    cluster.broker_down(1).expect("down");
    // One record holds the only record permit; each further send waits for it (its byte
    // permits taken) and is given up: 50 x 1000 bytes would leak more than the buffer.
    let held = w
        .send(ProducerRecord::new(&topic, "held"))
        .await
        .expect("send");
    for _ in 0..50 {
        let r = tokio::time::timeout(
            Duration::from_millis(5),
            w.send(ProducerRecord::new(&topic, Bytes::from(vec![1u8; 1_000]))),
        )
        .await;
        assert!(r.is_err(), "the send waits for the record permit");
    }
    cluster.broker_up(1).expect("up");
    tokio::time::timeout(GUARD, held)
        .await
        .expect("outcome")
        .expect("held record written");
    // All the buffer is free again: a record of 3000 bytes is taken at once.
    let r = w.try_send(ProducerRecord::new(&topic, Bytes::from(vec![2u8; 3_000])));
    let f = r.expect("no buffer space leaked");
    tokio::time::timeout(GUARD, f)
        .await
        .expect("outcome")
        .expect("written");
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// Item 10: every broker down for longer than the delivery timeout: each record's outcome
/// comes within the delivery timeout plus a small slack (the connection, the metadata lookup
/// and InitProducerId are bounded by it too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_come_within_the_delivery_timeout_when_every_broker_is_down() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("h-deadline");
    integration_tests::mock_topic_spread(&cluster, &topic, 6, 3);
    let bootstrap = cluster.bootstrap_servers();
    let delivery = Duration::from_millis(1_500);
    let w = Writer::builder(transport(&bootstrap))
        .linger(Duration::from_millis(5))
        .request_timeout(Duration::from_millis(1_000))
        .delivery_timeout(delivery)
        .build()
        .expect("writer");
    for p in 0..6 {
        w.produce(ProducerRecord::new(&topic, "warm").partition(p))
            .await
            .expect("warm-up");
    }
    for b in 1..=3 {
        cluster.broker_down(b).expect("down");
    }
    w.transport().close();
    let mut pending = Vec::new();
    for i in 0..300 {
        let r = ProducerRecord::new(&topic, format!("v{i}")).partition(i % 6);
        pending.push((Instant::now(), w.send(r).await.expect("send")));
    }
    // The slack: a sender's wake-up and the request task's scheduling, documented in DESIGN.md.
    let slack = Duration::from_millis(500);
    for (at, f) in pending {
        let r = tokio::time::timeout(GUARD, f).await.expect("outcome");
        let took = at.elapsed();
        assert!(
            matches!(r, Err(ProduceError::DeliveryTimeout { .. })),
            "expected a delivery timeout: {r:?}"
        );
        assert!(took <= delivery + slack, "outcome after {took:?}");
    }
    for b in 1..=3 {
        cluster.broker_up(b).expect("up");
    }
    let _ = w.close(Duration::from_secs(2)).await;
}

/// Item 6: a broker behind a relay that stops forwarding (half-open): the request that times
/// out closes its connection, the next request goes on a new connection, and the Writer's own
/// request timeout does the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_connection_is_closed_not_kept() {
    let Some(bin) = integration_tests::sqlite_tansu_bin() else {
        return;
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let relay_addr = listener.local_addr().expect("addr").to_string();
    let tansu = OwnedTansu::start(&bin, Some(&relay_addr), false).await;
    let relay = Relay::serve(listener, &tansu.listen);
    let dialer = kafkit::Dialer::builder()
        .connect_timeout(Duration::from_millis(1_000))
        .request_timeout(Duration::from_millis(500))
        .build();
    let t = Transport::builder([relay.addr()])
        .dialer(dialer)
        .default_api_timeout(Duration::from_secs(3))
        .build()
        .expect("transport");
    let md = t.metadata().await.expect("metadata");
    let node = md.brokers[0].node_id;
    let req = kafkit::protocol::messages::ApiVersionsRequest::default();
    t.round_trip_to(node, &req).await.expect("api versions");
    let conn_of = |relay: &Relay| relay.requests().last().map(|r| r.conn);
    let before = conn_of(&relay);
    relay.black_hole(true);
    let err = t.round_trip_to(node, &req).await.expect_err("black-holed");
    assert!(err.is_retriable(), "{err:?}");
    relay.black_hole(false);
    t.round_trip_to(node, &req)
        .await
        .expect("api versions again");
    assert_ne!(
        conn_of(&relay),
        before,
        "the request after the timeout went on a new connection"
    );
    assert_eq!(relay.violations(), Vec::<String>::new());
    drop(tansu);
}

/// Item 5 (KIP-368): under continuous produce, with re-authentication every 300 ms, no request
/// goes out between a re-authentication's SaslHandshake and the end of its exchange; the relay
/// enforces the rule as Apache Kafka does (closing the connection) and records any breach.
/// tansu refuses a second SaslHandshake (UNSUPPORTED_SASL_MECHANISM), so each re-authentication
/// ends at that answer and our client closes the connection (ReauthenticationFailed); what is
/// shown is the silence between the handshake and its answer while produce requests keep
/// flowing around it, and that every record is still written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reauthentication_sends_nothing_else_between_handshake_and_its_end() {
    use kafkit::admin::{ScramMechanism, UserScramCredentialAlteration};
    use kafkit::sasl::{Scram, ScramHash};
    let Some(bin) = integration_tests::sqlite_tansu_bin() else {
        return;
    };
    let open = OwnedTansu::start(&bin, None, false).await;
    {
        let t = Transport::builder([open.listen.as_str()])
            .build()
            .expect("transport");
        let admin = kafkit::Client::new(t.clone());
        let users = [UserScramCredentialAlteration::upsertion(
            "hard",
            ScramMechanism::ScramSha256,
            4096,
            "secret",
        )];
        let results = admin
            .alter_user_scram_credentials(&users)
            .await
            .expect("AlterUserScramCredentials");
        assert!(results.iter().all(|(_, r)| r.is_ok()), "{results:?}");
        t.close();
    }
    let dir = open.stop_keeping_data();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let relay_addr = listener.local_addr().expect("addr").to_string();
    let tansu = OwnedTansu::start_in(&bin, dir, Some(&relay_addr), true).await;
    let relay = Relay::serve(listener, &tansu.listen);
    relay.enforce_sasl_exclusive(2);
    let dialer = kafkit::Dialer::builder()
        .connect_timeout(Duration::from_secs(10))
        .sasl(Scram::new(ScramHash::Sha256, "hard", "secret"))
        .sasl_max_reauth_interval(Duration::from_millis(300))
        .build();
    let conn = dialer.dial(relay.addr()).await.expect("dial");
    let topic = integration_tests::create_topic_with(&conn, "h-reauth", 1).await;
    conn.close();
    let t = Transport::builder([relay.addr()])
        .dialer(dialer)
        .retry_backoff(Duration::from_millis(20))
        .build()
        .expect("transport");
    let w = Writer::builder(t)
        .linger(Duration::ZERO)
        .delivery_timeout(Duration::from_secs(60))
        .build()
        .expect("writer");
    let end = Instant::now() + Duration::from_secs(3);
    let mut pending = Vec::new();
    let mut n = 0u32;
    while Instant::now() < end {
        for _ in 0..20 {
            n += 1;
            let r = ProducerRecord::new(&topic, format!("v{n}"));
            pending.push(w.send(r).await.expect("send"));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for f in pending {
        tokio::time::timeout(GUARD, f)
            .await
            .expect("outcome")
            .expect("written");
    }
    let requests = relay.requests();
    let handshakes = requests.iter().filter(|r| r.api_key == 17).count();
    let conns: std::collections::BTreeSet<u64> = requests.iter().map(|r| r.conn).collect();
    let produces = requests.iter().filter(|r| r.api_key == 0).count();
    eprintln!(
        "{handshakes} SaslHandshake on {} connections, {produces} Produce",
        conns.len()
    );
    assert!(
        handshakes > conns.len(),
        "re-authentications were attempted ({handshakes} handshakes, {} connections)",
        conns.len()
    );
    assert_eq!(relay.violations(), Vec::<String>::new());
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// Reads `topic`/`partition` from offset 0 up to its high watermark with our own Fetch:
/// `(offset, value)` of every record, in log order.
async fn read_log(bootstrap: &str, topic: &str, partition: i32) -> Vec<(i64, String)> {
    let conn = kafkit::Dialer::builder()
        .build()
        .dial(bootstrap)
        .await
        .expect("dial");
    let params = kafkit::FetchParams::default().max_wait(Duration::from_millis(10));
    let mut out = Vec::new();
    let mut next = 0i64;
    let end = Instant::now() + GUARD;
    loop {
        let f = conn
            .fetch(topic, partition, next, &params)
            .await
            .expect("fetch");
        assert!(
            f.error_code.is_ok(),
            "fetch {topic}/{partition}: {:?}",
            f.error_code
        );
        for r in &f.records {
            let v = r
                .value
                .as_deref()
                .map(|v| String::from_utf8_lossy(v).into_owned());
            out.push((r.offset, v.unwrap_or_default()));
        }
        next = f.next_offset.max(next);
        if next >= f.high_watermark {
            break;
        }
        assert!(
            Instant::now() < end,
            "read {topic}/{partition} to {}",
            f.high_watermark
        );
    }
    conn.close();
    out
}

/// Item 1, for one way of losing an answer (see the two tests below), on tansu.
async fn lost_answers_never_rewind(fault: ResponseFault) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let relay_addr = listener.local_addr().expect("addr").to_string();
    // Memory storage: it deduplicates idempotent batches and survives an epoch bump.
    let tansu = OwnedTansu::start_memory(Some(&relay_addr)).await;
    let relay = Relay::serve(listener, &tansu.listen);
    lost_answers_never_rewind_through(&relay, fault).await;
    drop(tansu);
}

/// Item 1's body: through `relay`, in front of a broker that advertises the relay's address,
/// answers to appended batches are lost (`fault`); every record reported written is in the log
/// at its offset, none twice, none that was never sent. `writer_kafka` runs it on Kafka.
pub(crate) async fn lost_answers_never_rewind_through(relay: &Relay, fault: ResponseFault) {
    let conn = kafkit::Dialer::builder()
        .build()
        .dial(relay.addr())
        .await
        .expect("dial");
    let topic = integration_tests::create_topic_with(&conn, "h-lost-answer", 1).await;
    conn.close();
    let w = Writer::builder(transport(relay.addr()))
        .linger(Duration::ZERO)
        .request_timeout(Duration::from_secs(5))
        .delivery_timeout(Duration::from_secs(20))
        .build()
        .expect("writer");
    let produce = async |v: &str| {
        let r = ProducerRecord::new(&topic, v.to_owned()).partition(0);
        tokio::time::timeout(GUARD, w.produce(r))
            .await
            .unwrap_or_else(|_| panic!("{v}: no outcome within {GUARD:?}"))
    };
    // (offset the writer reported, value) of every record it reported written.
    let mut written: Vec<(i64, String)> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    for round in 0..3 {
        let v = format!("r{round}-before");
        let m = produce(&v).await.expect("written");
        written.push((m.offset, v));
        // The broker appends this one; its answer is lost in a way no retry mends.
        relay.fault_next_response(PRODUCE, fault);
        let v = format!("r{round}-lost");
        match produce(&v).await {
            Err(e) => eprintln!("{v}: {e}"),
            Ok(m) => panic!(
                "{v}: its answer was lost, yet it was reported at {}",
                m.offset
            ),
        }
        failed.push(v);
        // The next batches have the lost one's record count (1): with its sequence reused the
        // broker takes each for a duplicate of it.
        for k in 0..3 {
            let v = format!("r{round}-after{k}");
            let m = produce(&v).await.expect("written after a lost answer");
            written.push((m.offset, v));
        }
    }
    w.close(Duration::from_secs(5)).await.expect("close");
    let log = read_log(relay.addr(), &topic, 0).await;
    eprintln!("{fault:?}: reported written {written:?}; the log holds {log:?}");
    for (offset, v) in &written {
        assert!(
            log.iter().any(|(o, x)| o == offset && x == v),
            "{v} was reported written at offset {offset}, which the log does not hold: {log:?}"
        );
    }
    let mut seen = std::collections::HashSet::new();
    for (i, (o, v)) in log.iter().enumerate() {
        assert_eq!(*o, i as i64, "a gap in the log: {log:?}");
        assert!(seen.insert(v.clone()), "{v} is in the log twice: {log:?}");
        assert!(
            written.iter().any(|(_, x)| x == v) || failed.contains(v),
            "{v} is in the log but was never sent: {log:?}"
        );
    }
}

/// Item 1: the broker appended a batch whose answer does not decode (a non-retriable failure
/// after the frame was written). The writer fails the batch and bumps the epoch; it used to
/// rewind the sequence, so tansu took the next batch for a duplicate
/// (DUPLICATE_SEQUENCE_NUMBER) and the writer reported it written at offset -1, never logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_answer_to_an_appended_batch_loses_no_later_record() {
    lost_answers_never_rewind(ResponseFault::Undecodable).await;
}

/// Item 1: as above, with an answer whose size prefix is invalid (the connection is closed,
/// `InvalidFrameSize`, not retriable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_frame_size_after_an_appended_batch_loses_no_later_record() {
    lost_answers_never_rewind(ResponseFault::InvalidFrameSize).await;
}

/// Item 6, several brokers: one of three brokers stops answering (its relay black-holes every
/// frame) and gives up its partitions. The first request to it costs one request timeout,
/// which closes the connection and marks the broker failed: metadata refreshes then go to the
/// others first (before the fix each refresh that started at it waited a request timeout), and
/// produce to every partition goes on within a bounded time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_broker_among_several_costs_one_request_timeout() {
    let mock = RelayedMock::start(3).await;
    let topic = unique_topic("h-black-hole");
    integration_tests::mock_topic_spread(&mock.cluster(), &topic, 6, 3);
    let request_timeout = Duration::from_millis(500);
    let dialer = kafkit::Dialer::builder()
        .connect_timeout(Duration::from_secs(1))
        .request_timeout(request_timeout)
        .build();
    let t = Transport::builder(mock.bootstrap().split(','))
        .dialer(dialer)
        .retry_backoff(Duration::from_millis(20))
        .retry_backoff_max(Duration::from_millis(200))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport");
    let w = Writer::builder(t.clone())
        .linger(Duration::from_millis(5))
        .request_timeout(request_timeout)
        .delivery_timeout(Duration::from_secs(20))
        .build()
        .expect("writer");
    for p in 0..6 {
        w.produce(ProducerRecord::new(&topic, "warm").partition(p))
            .await
            .expect("warm-up");
    }
    // An Admin connection to every broker, so that each is a first choice for metadata.
    let req = kafkit::protocol::messages::ApiVersionsRequest::default();
    for b in 1..=3 {
        t.round_trip_to(b, &req).await.expect("api versions");
    }
    mock.relay(1).black_hole(true);
    for p in [0, 3] {
        mock.cluster()
            .partition_leader(&topic, p, Some(2))
            .expect("leader moves");
    }
    let start = Instant::now();
    let mut slowest = Duration::ZERO;
    for _ in 0..15 {
        let at = Instant::now();
        t.invalidate_metadata();
        t.metadata_for(&[topic.as_str()]).await.expect("metadata");
        slowest = slowest.max(at.elapsed());
    }
    let took = start.elapsed();
    eprintln!("15 metadata refreshes with broker 1 black-holed: {took:?}, slowest {slowest:?}");
    assert!(
        took < request_timeout * 3,
        "15 refreshes took {took:?}: the black-holed broker was tried again and again"
    );
    let start = Instant::now();
    let mut pending = Vec::new();
    for i in 0..60 {
        let r = ProducerRecord::new(&topic, format!("v{i}")).partition(i % 6);
        pending.push(w.send(r).await.expect("send"));
    }
    for f in pending {
        tokio::time::timeout(GUARD, f)
            .await
            .expect("outcome")
            .expect("written");
    }
    let took = start.elapsed();
    eprintln!("60 records over 6 partitions with broker 1 black-holed: {took:?}");
    assert!(took < request_timeout * 6, "produce took {took:?}");
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// Item 10: a broker whose port accepts connections but never answers (its relay black-holes
/// every frame; the pooled connection was cut, so the writer dials anew and the dial waits for
/// its ApiVersions answer up to the 10 s connect timeout). Each record's outcome still comes
/// within the delivery timeout plus the slack: the dial counts against the request timeout
/// and the batch's delivery deadline. Before the fix it came after the whole connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dial_that_hangs_does_not_hold_outcomes_past_the_delivery_timeout() {
    let mock = RelayedMock::start(1).await;
    let topic = unique_topic("h-hung-dial");
    mock.cluster().create_topic(&topic, 2, 1).expect("topic");
    let dialer = kafkit::Dialer::builder()
        .connect_timeout(Duration::from_secs(10))
        .build();
    let t = Transport::builder(mock.bootstrap().split(','))
        .dialer(dialer)
        .retry_backoff(Duration::from_millis(20))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport");
    let delivery = Duration::from_millis(1_500);
    let w = Writer::builder(t)
        .linger(Duration::from_millis(5))
        .request_timeout(Duration::from_millis(1_000))
        .delivery_timeout(delivery)
        .build()
        .expect("writer");
    for p in 0..2 {
        w.produce(ProducerRecord::new(&topic, "warm").partition(p))
            .await
            .expect("warm-up");
    }
    let relay = mock.relay(1);
    relay.black_hole(true);
    relay.cut_all();
    let mut pending = Vec::new();
    for i in 0..20 {
        let r = ProducerRecord::new(&topic, format!("v{i}")).partition(i % 2);
        pending.push((Instant::now(), w.send(r).await.expect("send")));
    }
    let slack = Duration::from_millis(500);
    for (at, f) in pending {
        let r = tokio::time::timeout(GUARD, f).await.expect("outcome");
        let took = at.elapsed();
        assert!(
            matches!(r, Err(ProduceError::DeliveryTimeout { .. })),
            "expected a delivery timeout: {r:?}"
        );
        assert!(took <= delivery + slack, "outcome after {took:?}");
    }
    relay.black_hole(false);
    let _ = w.close(Duration::from_secs(2)).await;
}

/// The topics of every Metadata request our client (not the mock's owner) sent through the
/// relays since the last call (`None`: all topics).
fn metadata_asks(mock: &RelayedMock, brokers: i32) -> Vec<Option<Vec<String>>> {
    use bytes::Buf;
    use kafkit::protocol::messages::MetadataRequest;
    use kafkit::protocol::{Message, Request};
    let mut out = Vec::new();
    for b in 1..=brokers {
        for (_, frame) in mock.relay(b).take_captured() {
            let mut buf = Bytes::from(frame);
            buf.advance(4);
            let (_api, version, _correlation) = (buf.get_i16(), buf.get_i16(), buf.get_i32());
            let n = usize::try_from(buf.get_i16()).unwrap_or(0);
            let client = String::from_utf8_lossy(&buf.split_to(n)).into_owned();
            if MetadataRequest::request_header_version(version) >= 2 {
                assert_eq!(buf.get_u8(), 0, "no tagged fields in our request headers");
            }
            if client == "mock-owner" {
                continue;
            }
            let req = MetadataRequest::decode(&mut buf, version).expect("a Metadata request");
            out.push(
                req.topics
                    .map(|ts| ts.into_iter().filter_map(|t| t.name).collect()),
            );
        }
    }
    out
}

/// Item 9: a retry refreshes only the topics whose errors called for it. A writer that knows
/// eight topics gets LEADER_NOT_AVAILABLE for one partition of one of them: the Metadata
/// requests of its retry ask for that topic alone (they used to ask for all eight), and the
/// record is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_refreshes_only_the_topic_that_failed() {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let mock = RelayedMock::start(2).await;
    let topics: Vec<String> = (0..8)
        .map(|i| unique_topic(&format!("h-stale{i}")))
        .collect();
    for topic in &topics {
        integration_tests::mock_topic_spread(&mock.cluster(), topic, 2, 2);
    }
    for b in 1..=2 {
        mock.relay(b).capture(METADATA);
    }
    let t = transport(&mock.bootstrap());
    let w = Writer::builder(t.clone())
        .linger(Duration::ZERO)
        .retry_backoff(Duration::from_millis(10))
        .build()
        .expect("writer");
    for topic in &topics {
        for p in 0..2 {
            w.produce(ProducerRecord::new(topic, "warm").partition(p))
                .await
                .expect("warm-up");
        }
    }
    let warm = metadata_asks(&mock, 2);
    assert!(
        !warm.is_empty(),
        "the writer learned its topics through the relays"
    );
    // The next Produce request (one partition of topics[3]) fails for all its partitions.
    mock.cluster().request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE],
    );
    w.produce(ProducerRecord::new(&topics[3], "retried").partition(1))
        .await
        .expect("written after its retry");
    let asks = metadata_asks(&mock, 2);
    eprintln!("Metadata requests of the retry: {asks:?}");
    assert!(!asks.is_empty(), "the retry looked the leader up again");
    for ask in &asks {
        assert_eq!(
            ask.as_deref(),
            Some(&topics[3..4]),
            "a retry of {} asked for {ask:?}",
            topics[3]
        );
    }
    // A whole refresh still asks for every topic.
    t.invalidate_metadata();
    t.metadata().await.expect("metadata");
    let asks = metadata_asks(&mock, 2);
    assert!(
        asks.iter()
            .any(|a| a.as_ref().is_some_and(|a| a.len() == 8)),
        "{asks:?}"
    );
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// Item 10: a record sent while the writer waits for a new producer epoch (an answer was lost
/// after the broker appended, so the epoch must be bumped) and InitProducerId keeps failing:
/// the record ends with its delivery timeout, on time. Its sender could not send and slept
/// without a deadline, and the append did not wake it nor the router (it was thought awake):
/// the record waited until the router's 30 s metadata round, then for the epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_waiting_for_a_new_epoch_ends_by_its_delivery_timeout() {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let mock = RelayedMock::start(1).await;
    let topic = unique_topic("h-epoch-wait");
    mock.cluster().create_topic(&topic, 1, 1).expect("topic");
    let delivery = Duration::from_millis(1_500);
    let w = Writer::builder(transport(&mock.bootstrap()))
        .linger(Duration::ZERO)
        .request_timeout(Duration::from_millis(1_000))
        .retry_backoff(Duration::from_millis(50))
        .delivery_timeout(delivery)
        .build()
        .expect("writer");
    let rec = |v: &'static str| ProducerRecord::new(&topic, v).partition(0);
    w.produce(rec("warm")).await.expect("warm-up");
    mock.cluster().request_errors(
        RDKafkaApiKey::InitProducerId,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE; 500],
    );
    mock.relay(1)
        .fault_next_response(PRODUCE, ResponseFault::Undecodable);
    let lost = tokio::time::timeout(GUARD, w.produce(rec("lost")))
        .await
        .expect("an outcome");
    assert!(lost.is_err(), "its answer was lost: {lost:?}");
    let at = Instant::now();
    let waiting = tokio::time::timeout(GUARD, w.produce(rec("waits for the epoch"))).await;
    let took = at.elapsed();
    assert!(
        matches!(waiting, Ok(Err(ProduceError::DeliveryTimeout { .. }))),
        "expected a delivery timeout within {GUARD:?}: {waiting:?}"
    );
    let slack = Duration::from_millis(500);
    assert!(took <= delivery + slack, "outcome after {took:?}");
    // InitProducerId answers again: the writer gets its new epoch and writes.
    mock.cluster()
        .clear_request_errors(RDKafkaApiKey::InitProducerId);
    tokio::time::timeout(GUARD, w.produce(rec("after")))
        .await
        .expect("an outcome")
        .expect("written under the new epoch");
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// InitProducerId requests our transport sent (bootstrap and every broker of a mock cluster).
fn init_producer_id_requests(t: &Transport, brokers: i32) -> u64 {
    (-1..=brokers)
        .map(|n| t.requests_sent(n, ApiKey::InitProducerId))
        .sum()
}

/// Item 2: a batch the broker refused before appending it (NOT_ENOUGH_REPLICAS on every
/// attempt) expires without an epoch bump: the broker holds none of its sequences, so the next
/// record goes out under the same epoch. Before the fix the code marked the batch maybe written
/// and its expiry made the writer ask for a new epoch (a second InitProducerId).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_refused_before_its_append_expires_without_an_epoch_bump() {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let cluster = mock_cluster(1);
    let topic = unique_topic("h-refused");
    cluster.create_topic(&topic, 1, 1).expect("topic");
    let t = transport(&cluster.bootstrap_servers());
    let w = Writer::builder(t.clone())
        .linger(Duration::ZERO)
        .request_timeout(Duration::from_millis(500))
        .retry_backoff(Duration::from_millis(20))
        .delivery_timeout(Duration::from_secs(1))
        .build()
        .expect("writer");
    let rec = |v: &'static str| ProducerRecord::new(&topic, v).partition(0);
    w.produce(rec("warm")).await.expect("warm-up");
    assert_eq!(init_producer_id_requests(&t, 1), 1, "one producer id");
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 1_000],
    );
    let refused = tokio::time::timeout(GUARD, w.produce(rec("refused")))
        .await
        .expect("an outcome");
    assert!(
        matches!(refused, Err(ProduceError::DeliveryTimeout { .. })),
        "refused on every attempt until it expired: {refused:?}"
    );
    cluster.clear_request_errors(RDKafkaApiKey::Produce);
    let after = tokio::time::timeout(GUARD, w.produce(rec("after")))
        .await
        .expect("an outcome");
    let inits = init_producer_id_requests(&t, 1);
    eprintln!("InitProducerId requests: {inits}");
    assert_eq!(
        inits, 1,
        "no epoch bump for a batch never appended (the next record: {after:?})"
    );
    after.expect("written");
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// Item 2: a batch refused before its append (NOT_LEADER_OR_FOLLOWER, answered slowly) that is
/// still waiting for its retry when the epoch is bumped (another partition's batch got
/// OUT_OF_ORDER_SEQUENCE_NUMBER) is renumbered under the new epoch and written. Before the fix
/// the refusal marked it maybe written, and it failed with an OUT_OF_ORDER_SEQUENCE_NUMBER the
/// broker never sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_refused_before_its_append_is_resent_across_an_epoch_bump() {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let mock = RelayedMock::start(2).await;
    let topic = unique_topic("h-refused-bump");
    // Partition 0 on broker 1, partition 1 on broker 2.
    integration_tests::mock_topic_spread(&mock.cluster(), &topic, 2, 2);
    let t = transport(&mock.bootstrap());
    let w = Writer::builder(t.clone())
        .linger(Duration::ZERO)
        .retry_backoff(Duration::from_millis(20))
        .build()
        .expect("writer");
    let rec = |p: i32, v: &'static str| ProducerRecord::new(&topic, v).partition(p);
    for p in 0..2 {
        w.produce(rec(p, "warm")).await.expect("warm-up");
    }
    let produced = |b: i32| {
        mock.relay(b)
            .requests()
            .iter()
            .filter(|r| r.api_key == PRODUCE)
            .count()
    };
    let before = produced(2);
    mock.broker_request_errors(
        2,
        RDKafkaApiKey::Produce,
        &[(
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            Duration::from_millis(1_500),
        )],
    );
    let refused = w.send(rec(1, "refused, then resent")).await.expect("send");
    // Its request reached broker 2 (whose refusal comes after 1.5 s).
    let until = Instant::now() + GUARD;
    while produced(2) == before {
        assert!(Instant::now() < until, "the request never reached broker 2");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    mock.broker_request_errors(
        1,
        RDKafkaApiKey::Produce,
        &[(
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
            Duration::ZERO,
        )],
    );
    tokio::time::timeout(GUARD, w.produce(rec(0, "bumps the epoch")))
        .await
        .expect("an outcome")
        .expect("written under the new epoch");
    let r = tokio::time::timeout(GUARD, refused)
        .await
        .expect("an outcome");
    assert!(r.is_ok(), "the refused batch is resent, not failed: {r:?}");
    let inits = init_producer_id_requests(&t, 2);
    eprintln!("InitProducerId requests: {inits}");
    assert!(inits >= 2, "the epoch was bumped ({inits} InitProducerId)");
    w.close(Duration::from_secs(5)).await.expect("close");
}

/// Produce requests a writer sends for one record that `code` refuses on every attempt
/// within its 1 s delivery timeout (retry backoff 20 ms; the record must expire).
async fn attempts_while_refused(code: rdkafka::types::RDKafkaRespErr) -> u64 {
    use rdkafka::types::RDKafkaApiKey;
    let cluster = mock_cluster(1);
    let topic = unique_topic("h-backoff");
    cluster.create_topic(&topic, 1, 1).expect("topic");
    let t = transport(&cluster.bootstrap_servers());
    let w = Writer::builder(t.clone())
        .linger(Duration::ZERO)
        .request_timeout(Duration::from_millis(500))
        .retry_backoff(Duration::from_millis(20))
        .delivery_timeout(Duration::from_secs(1))
        .build()
        .expect("writer");
    let rec = |v: &'static str| ProducerRecord::new(&topic, v).partition(0);
    w.produce(rec("warm")).await.expect("warm-up");
    let produce = || -> u64 { (-1..=1).map(|n| t.requests_sent(n, ApiKey::Produce)).sum() };
    let before = produce();
    cluster.request_errors(RDKafkaApiKey::Produce, &[code; 1_000]);
    let refused = tokio::time::timeout(GUARD, w.produce(rec("refused")))
        .await
        .expect("an outcome");
    let attempts = produce() - before;
    eprintln!("{code:?}: {attempts} Produce requests in the delivery timeout");
    assert!(
        matches!(refused, Err(ProduceError::DeliveryTimeout { .. })),
        "refused on every attempt until it expired: {refused:?}"
    );
    cluster.clear_request_errors(RDKafkaApiKey::Produce);
    w.close(Duration::from_secs(5)).await.expect("close");
    attempts
}

/// Item 9: retries back off exponentially (KIP-580): a batch refused with a retriable code
/// (NOT_ENOUGH_REPLICAS, no leader hint) is tried a handful of times in its 1 s delivery
/// timeout, 20 ms doubling to 1 s (±20 %): about 6. The constant backoff before the fix tried
/// it every 20 ms (and looked its leader up each time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_back_off_exponentially() {
    let n = attempts_while_refused(
        rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
    )
    .await;
    assert!(n <= 15, "{n} attempts");
}

/// Item 9: NOT_LEADER_OR_FOLLOWER whose KIP-951 hint names the broker that refused (the mock
/// answers every refusal so) keeps the retry backoff: the batch is retried a handful of times
/// before its delivery timeout, not in a loop. Before, a hinted retry skipped the backoff
/// whatever the hint named: 1,000 refusals were used up in a fraction of a second and the
/// record was written before its delivery timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_hint_naming_the_refusing_broker_keeps_the_backoff() {
    let n = attempts_while_refused(
        rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
    )
    .await;
    assert!(n <= 15, "{n} attempts");
}

/// Item 6: every connection has TCP keep-alive on, so a peer that vanished without a FIN or
/// RST is found while nothing waits on the connection. Read from the kernel's socket table
/// (`/proc/net/tcp`): an idle established connection with keep-alive has its keep-alive timer
/// armed (timer kind 2, due in about the 60 s idle time); without, no timer (kind 0), as
/// before the fix.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_keep_alive() {
    let cluster = mock_cluster(1);
    let bootstrap = cluster.bootstrap_servers();
    let conn = kafkit::Dialer::default()
        .dial(&bootstrap)
        .await
        .expect("dial");
    conn.metadata(Some(&[])).await.expect("metadata");
    let port = bootstrap
        .rsplit(':')
        .next()
        .and_then(|p| p.parse::<u16>().ok())
        .expect("a port");
    // Our side of the connection: remote address 127.0.0.1:port, ESTABLISHED (01). The
    // columns: sl local rem st tx:rx tr:when ...
    let remote = format!("0100007F:{port:04X}");
    let until = Instant::now() + GUARD;
    let timer = loop {
        let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
        let ours: Vec<(u8, u64)> = table
            .lines()
            .skip(1)
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(2) == Some(&remote.as_str()) && f.get(3) == Some(&"01")).then(|| {
                    let (tr, when) = f[5].split_once(':').expect("tr:when");
                    (
                        u8::from_str_radix(tr, 16).expect("tr"),
                        u64::from_str_radix(when, 16).expect("when"),
                    )
                })
            })
            .collect();
        assert_eq!(ours.len(), 1, "one connection of ours: {ours:?}");
        // A delayed ACK also shows as kind 2 for a moment: wait for the idle state.
        if ours[0].0 != 2 || ours[0].1 > 1_000 || Instant::now() > until {
            break ours[0];
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("our connection's timer (kind, clock ticks): {timer:?}");
    // USER_HZ ticks: 100 per second, so 60 s is 6,000.
    assert_eq!(timer.0, 2, "a keep-alive timer is armed");
    assert!(
        timer.1 > 1_000,
        "due in about the keep-alive idle time: {timer:?}"
    );
    drop(conn);
}
