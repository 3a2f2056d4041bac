//! A classic group member whose coordinator connection closes while it is stable (the broker
//! restarted, the link cut), behind a relay the broker advertises (so the coordinator connection
//! goes through it): the member dials the coordinator again at once and goes on heartbeating in
//! the same generation, with its partitions. Before the fix it sent nothing until its session ran
//! out (no heartbeat goes out without a connection, and the stable phase only looked at the
//! connection at its next deadline), then called its partitions lost and rejoined: the SQLite
//! soak phase (`cargo xtask soak`) lost every member's session at each restart of tansu.
//!
//! One body, two brokers: `on_tansu` (a tansu of the test's own that advertises the relay) and
//! `on_kafka` (the one-node Apache Kafka's RELAYED listener, [`integration_tests::kafka_relay`]).

use std::sync::Arc;
use std::time::Duration;

use integration_tests::{Event, Member, MemberSpec, OwnedTansu, Relay, create_topic, unique_topic};
use kafkit::{AutoOffsetReset, GroupReader, Reader, Transport};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The Heartbeat API key.
const HEARTBEAT: i16 = 12;
/// Long enough that a member that reconnects at once stays well inside it on a loaded machine;
/// the old behaviour lost the partitions when it ran out.
const SESSION: Duration = Duration::from_secs(30);
/// Upper bound for what the test awaits (past the session, so the old behaviour shows).
const GUARD: Duration = Duration::from_secs(90);

/// Polls `cond` every 50 ms until it holds; panics after [`GUARD`].
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + GUARD;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {GUARD:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The relay's number of the newest connection that carried a heartbeat, if any.
fn heartbeat_conn(relay: &Relay) -> Option<u64> {
    relay
        .requests()
        .iter()
        .filter(|r| r.api_key == HEARTBEAT)
        .map(|r| r.conn)
        .max()
}

/// How many heartbeats the relay carried on connections numbered `from_conn` or more.
fn heartbeats(relay: &Relay, from_conn: u64) -> usize {
    relay
        .requests()
        .iter()
        .filter(|r| r.api_key == HEARTBEAT && r.conn >= from_conn)
        .count()
}

mod on_tansu {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stable_member_whose_coordinator_connection_is_cut_keeps_its_generation() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let relay_addr = listener.local_addr().expect("addr").to_string();
        let tansu = super::OwnedTansu::start_memory(Some(&relay_addr)).await;
        let relay = super::Relay::serve(listener, &tansu.listen);
        super::keeps_its_generation_through_a_cut(&relay).await;
    }
}

mod on_kafka {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stable_member_whose_coordinator_connection_is_cut_keeps_its_generation() {
        // The guard: one test at a time owns the relay in front of Kafka.
        let (_one, relay) = integration_tests::kafka_relay().await;
        super::keeps_its_generation_through_a_cut(&relay).await;
    }
}

/// The body: a member bootstrapped at `relay` (which the broker advertises) gets both partitions
/// of a new topic, the relay cuts every connection between two heartbeats, and the member
/// heartbeats on a new connection in the same generation, member id and assignment.
async fn keeps_its_generation_through_a_cut(relay: &Relay) {
    let topic = unique_topic("coord-cut");
    create_topic(relay.addr(), &topic, 2).await;
    let t = Transport::builder([relay.addr()])
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(250))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport");
    let builder = GroupReader::builder(t.clone(), unique_topic("coord-cut-group"))
        .subscribe([&topic])
        .session_timeout(SESSION)
        .heartbeat_interval(Duration::from_millis(500))
        .retry_backoff(Duration::from_millis(50))
        .reader(
            Reader::builder(t)
                .fetch_max_wait(Duration::from_millis(100))
                .auto_offset_reset(AutoOffsetReset::Earliest),
        );
    let changed = Arc::new(Notify::new());
    let m = Member::start(
        "a",
        builder,
        MemberSpec {
            commit_each_batch: false,
            commit_on_revoke: false,
            changed,
        },
    );
    // Stable: both partitions, and heartbeats going out in that generation.
    until("both partitions assigned", || m.assignment().len() == 2).await;
    let beats = heartbeats(relay, 0);
    until("a heartbeat after the assignment", || {
        heartbeats(relay, 0) > beats
    })
    .await;
    let before = m.stats();
    let old_conn = heartbeat_conn(relay).expect("a heartbeat");
    // Between two heartbeats (each takes a few ms of the 500 ms): none is in flight to fail.
    relay.cut_all();
    until("a heartbeat on a new coordinator connection", || {
        heartbeat_conn(relay).is_some_and(|c| c > old_conn)
    })
    .await;
    // Two more heartbeats: an answer that ended the generation would show by then.
    let seen = heartbeats(relay, old_conn + 1);
    until("two more heartbeats on the new connection", || {
        heartbeats(relay, old_conn + 1) >= seen + 2
    })
    .await;
    let after = m.stats();
    assert_eq!(
        (after.generation, after.rebalances, after.member_id.clone()),
        (
            before.generation,
            before.rebalances,
            before.member_id.clone()
        ),
        "the member kept its generation through the cut"
    );
    assert_eq!(after.assignment.len(), 2, "{:?}", after.assignment);
    assert!(
        !m.events().iter().any(|e| matches!(e, Event::Lost(_))),
        "no partition lost: {:?}",
        m.events()
    );
    m.close().await;
}
