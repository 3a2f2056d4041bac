//! Transport against librdkafka's 3-broker mock cluster: metadata cache, routing, retries,
//! broker failures, bootstrap fallbacks.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use integration_tests::{mock_cluster, mock_topic_spread, unique_topic};
use kafkit::{
    Acks, Compression, ConnKind, CoordinatorType, Dialer, Error, ProduceBatches, Record, Transport,
};
use kafkit_protocol::ApiKey;
use kafkit_protocol::messages::{
    ApiVersionsRequest, CreateTopicsRequest, InitProducerIdRequest, OffsetCommitRequest,
    offset_commit_request,
};
use rdkafka::mocking::MockCoordinator;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

/// Metadata requests sent to any broker of a 3-broker cluster (and bootstrap connections).
fn metadata_sent(t: &Transport) -> u64 {
    (-1..=3).map(|n| t.requests_sent(n, ApiKey::Metadata)).sum()
}

#[tokio::test]
async fn metadata_is_cached_and_refetched_after_invalidate() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("tm-md");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let t = Transport::builder([cluster.bootstrap_servers()])
        .build()
        .expect("transport");
    let md = t.metadata_for(&[&topic]).await.expect("metadata");
    assert_eq!(md.brokers.len(), 3);
    assert_eq!(md.topic(&topic).expect("topic").partitions.len(), 3);
    let before = metadata_sent(&t);
    assert_eq!(before, 1, "one Metadata request so far");

    let again = t.metadata_for(&[&topic]).await.expect("metadata");
    assert!(Arc::ptr_eq(&md, &again), "served from the cache");
    assert_eq!(
        metadata_sent(&t),
        before,
        "no Metadata request for a cached view"
    );

    t.invalidate_metadata();
    let fresh = t.metadata().await.expect("metadata");
    assert_eq!(
        metadata_sent(&t),
        before + 1,
        "refetched at once after invalidate"
    );
    assert!(
        fresh.topic(&topic).is_some(),
        "known topics stay in the refresh"
    );
}

/// An OffsetCommit of offset `offset` for `topic` partition 0, as a group without members
/// (a "simple" commit: generation -1).
fn commit(group: &str, topic: &str, offset: i64) -> OffsetCommitRequest {
    let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
    p.partition_index = 0;
    p.committed_offset = offset;
    let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
    t.name = topic.to_owned();
    t.partitions.push(p);
    let mut req = OffsetCommitRequest::default();
    req.group_id = group.to_owned();
    req.generation_id_or_member_epoch = -1;
    req.topics.push(t);
    req
}

/// Requests of `api` sent to brokers 1..=3.
fn sent(t: &Transport, api: ApiKey) -> u64 {
    (1..=3).map(|n| t.requests_sent(n, api)).sum()
}

#[tokio::test]
async fn injected_coordinator_errors_are_retried_until_success() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("tm-commit");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let group = unique_topic("tm-group");
    let t = Transport::builder([cluster.bootstrap_servers()])
        .retry_backoff(Duration::from_millis(10))
        .retry_backoff_max(Duration::from_millis(50))
        .default_api_timeout(Duration::from_secs(20))
        .build()
        .expect("transport");
    // (FindCoordinator errors are not injected: the mock answers them with a null `host`, which
    // the protocol does not allow and our decoder refuses, as Java's does.)
    cluster.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        ],
    );
    let resp = t
        .round_trip(commit(&group, &topic, 42))
        .await
        .expect("OffsetCommit retried to success");
    let code = resp.topics[0].partitions[0].error_code;
    assert!(code.is_ok(), "{code}");
    assert_eq!(
        sent(&t, ApiKey::OffsetCommit),
        5,
        "4 failed attempts, then success"
    );
    // The first lookup, then one more after each of NOT_COORDINATOR and
    // COORDINATOR_NOT_AVAILABLE (LOAD_IN_PROGRESS and REQUEST_TIMED_OUT keep the coordinator).
    assert_eq!(sent(&t, ApiKey::FindCoordinator), 3);
}

#[tokio::test]
async fn coordinator_cache_is_dropped_on_not_coordinator() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("tm-move");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let group = unique_topic("tm-group");
    cluster
        .coordinator(MockCoordinator::Group(group.clone()), 2)
        .expect("set coordinator");
    let t = Transport::builder([cluster.bootstrap_servers()])
        .retry_backoff(Duration::from_millis(10))
        .build()
        .expect("transport");
    t.round_trip(commit(&group, &topic, 1))
        .await
        .expect("commit");
    assert_eq!(t.requests_sent(2, ApiKey::OffsetCommit), 1);
    assert_eq!(
        t.coordinator(CoordinatorType::Group, &group)
            .await
            .expect("coordinator"),
        2
    );
    let lookups = sent(&t, ApiKey::FindCoordinator);
    assert_eq!(lookups, 1, "cached");

    // The coordinator moves; the old one answers NOT_COORDINATOR.
    cluster
        .coordinator(MockCoordinator::Group(group.clone()), 3)
        .expect("move coordinator");
    cluster.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_COORDINATOR],
    );
    t.round_trip(commit(&group, &topic, 2))
        .await
        .expect("commit");
    assert_eq!(
        t.requests_sent(2, ApiKey::OffsetCommit),
        2,
        "the stale coordinator was tried"
    );
    assert_eq!(
        t.requests_sent(3, ApiKey::OffsetCommit),
        1,
        "then the new one"
    );
    assert_eq!(
        sent(&t, ApiKey::FindCoordinator),
        lookups + 1,
        "looked up again"
    );
    assert_eq!(
        t.coordinator(CoordinatorType::Group, &group)
            .await
            .expect("coordinator"),
        3
    );
}

#[tokio::test]
async fn leader_move_is_seen_at_once_after_not_leader() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("tm-move-leader");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let t = Transport::builder([cluster.bootstrap_servers()])
        .metadata_max_age(Duration::from_secs(300))
        .build()
        .expect("transport");
    let md = t.metadata_for(&[&topic]).await.expect("metadata");
    let old = md.leader_of(&topic, 0).expect("leader").node_id;
    let new = old % 3 + 1;
    cluster
        .partition_leader(&topic, 0, Some(new))
        .expect("move leader");

    // A produce to the old leader is refused; the writer reacts by invalidating metadata.
    let mut batches = ProduceBatches::new(Compression::None);
    batches
        .add_records(
            &topic,
            0,
            &[Record::new(None, Some(Bytes::from_static(b"v")))],
        )
        .expect("batch");
    let conn = t.conn(old, ConnKind::Produce).await.expect("conn");
    let results = conn
        .write_multi(&batches, Acks::All, Duration::from_secs(5))
        .await
        .expect("produce");
    assert!(
        results[0].error_code.is_invalid_metadata(),
        "{}",
        results[0].error_code
    );
    let before = metadata_sent(&t);
    t.invalidate_metadata();
    let md = t.metadata_for(&[&topic]).await.expect("metadata");
    assert_eq!(metadata_sent(&t), before + 1, "one refresh, no TTL wait");
    assert_eq!(md.leader_of(&topic, 0).expect("leader").node_id, new);
    let conn = t.conn(new, ConnKind::Produce).await.expect("conn");
    let results = conn
        .write_multi(&batches, Acks::All, Duration::from_secs(5))
        .await
        .expect("produce");
    assert!(results[0].error_code.is_ok(), "{}", results[0].error_code);
}

#[tokio::test]
async fn a_down_broker_fails_only_what_is_routed_to_it() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("tm-down");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let group = unique_topic("tm-group-down");
    cluster
        .coordinator(MockCoordinator::Group(group.clone()), 2)
        .expect("set coordinator");
    let t = Transport::builder([cluster.bootstrap_servers()])
        .retry_backoff(Duration::from_millis(20))
        .retry_backoff_max(Duration::from_millis(100))
        .default_api_timeout(Duration::from_millis(1_500))
        .build()
        .expect("transport");
    t.metadata_for(&[&topic]).await.expect("metadata");
    cluster.broker_down(2).expect("broker down");

    // Requests for brokers 1 and 3 still work, whatever the order brokers are tried in.
    for _ in 0..3 {
        t.invalidate_metadata();
        let md = t.metadata().await.expect("metadata from a live broker");
        assert!(md.broker(1).is_some() && md.broker(3).is_some(), "{md:?}");
    }
    for node in [1, 3] {
        t.round_trip_to(node, &ApiVersionsRequest::default())
            .await
            .unwrap_or_else(|e| panic!("broker {node}: {e}"));
    }
    // (The mock leaves a down broker out of its Metadata answers.)
    let all = t.round_trip_all(&ApiVersionsRequest::default()).await;
    assert!(all.len() >= 2);
    for (node, r) in &all {
        assert_eq!(r.is_ok(), *node != 2, "broker {node}: {r:?}");
    }

    // A request routed to broker 2 (the group's coordinator) fails with a typed error after
    // the deadline, naming the API and the connection failure.
    let err = t
        .round_trip(commit(&group, &topic, 7))
        .await
        .expect_err("coordinator is down");
    match &err {
        Error::DeadlineExceeded {
            operation: "OffsetCommit",
            timeout,
            last,
            ..
        } if *timeout == Duration::from_millis(1_500) => assert!(
            matches!(
                **last,
                Error::Connect { .. } | Error::ConnectionClosed { .. } | Error::Timeout { .. }
            ),
            "{last:?}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(err.is_retriable());

    cluster.broker_up(2).expect("broker up");
    t.round_trip(commit(&group, &topic, 8))
        .await
        .expect("coordinator is back");
}

#[tokio::test]
async fn unsupported_api_is_a_typed_error_at_once() {
    let cluster = mock_cluster(3);
    let t = Transport::builder([cluster.bootstrap_servers()])
        .default_api_timeout(Duration::from_secs(60))
        .build()
        .expect("transport");
    // The mock cluster has no CreateTopics.
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        t.round_trip(CreateTopicsRequest::default()),
    )
    .await
    .expect("not retried until the deadline")
    .expect_err("unsupported");
    assert!(
        matches!(
            err,
            Error::UnsupportedVersion {
                api: ApiKey::CreateTopics,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_retriable());
}

/// A local address where nothing listens (the port was just freed).
fn refused_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    drop(l);
    addr
}

/// Bootstraps through `first` then the mock cluster's addresses, with a 60 s connect timeout,
/// and requires metadata within 10 s.
async fn bootstrap_through(first: &str) {
    let cluster = mock_cluster(3);
    let mut list = vec![first.to_owned()];
    list.extend(cluster.bootstrap_servers().split(',').map(str::to_owned));
    let t = Transport::builder(list)
        .dialer(
            Dialer::builder()
                .connect_timeout(Duration::from_secs(60))
                .build(),
        )
        .build()
        .expect("transport");
    let md = tokio::time::timeout(Duration::from_secs(10), t.metadata())
        .await
        .unwrap_or_else(|_| panic!("bootstrap waited on {first}"))
        .expect("metadata");
    assert_eq!(md.brokers.len(), 3);
}

#[tokio::test]
async fn bootstrap_skips_a_refused_first_address() {
    bootstrap_through(&refused_addr()).await;
}

#[tokio::test]
async fn bootstrap_skips_a_blackholed_first_address() {
    // Not routable: a SYN there gets no answer (or, in some sandboxes, "unreachable" at once).
    bootstrap_through("10.255.255.1:9092").await;
}

#[tokio::test]
async fn bootstrap_skips_a_silent_first_address() {
    // Accepts TCP connections and never answers: the dial there would wait the whole 60 s
    // connect timeout for its ApiVersions answer.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = silent.local_addr().expect("addr").to_string();
    let keep = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    bootstrap_through(&addr).await;
    keep.abort();
}

#[tokio::test]
async fn bootstrap_skips_an_unresolvable_first_address() {
    bootstrap_through("no-such-broker.invalid:9092").await;
}

#[tokio::test]
async fn dead_and_idle_connections_are_replaced() {
    let cluster = mock_cluster(3);
    let t = Transport::builder([cluster.bootstrap_servers()])
        .connections_max_idle(Duration::from_millis(200))
        .build()
        .expect("transport");
    let c1 = t.conn(1, ConnKind::Admin).await.expect("conn");
    let again = t.conn(1, ConnKind::Admin).await.expect("conn");
    let fetch = t.conn(1, ConnKind::Fetch).await.expect("conn");
    assert!(!again.is_closed());
    let on_c1 = c1.requests_sent(ApiKey::Metadata);
    again.metadata(Some(&[])).await.expect("pooled conn works");
    assert_eq!(
        c1.requests_sent(ApiKey::Metadata),
        on_c1 + 1,
        "the same connection"
    );
    assert_eq!(
        fetch.requests_sent(ApiKey::Metadata),
        0,
        "a separate one per kind"
    );

    // A dead connection is replaced on next use.
    c1.close();
    let c2 = t.conn(1, ConnKind::Admin).await.expect("conn");
    assert!(!c2.is_closed());
    assert_eq!(c2.requests_sent(ApiKey::Metadata), 0, "a new connection");
    c2.metadata(Some(&[])).await.expect("new conn works");
    // Counts survive the replacement (1 on the bootstrap/first connections may add to it).
    assert!(t.requests_sent(1, ApiKey::Metadata) >= 2);

    // An idle one is closed by the reaper, and a new one dialled on next use. The reaper sees
    // the request above at its first pass after `max_idle` and counts the idle time from there,
    // so the close comes between 200 ms and about 2 x (200 + 100) ms later; wait for the event.
    let idle_from = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(10), c2.closed())
        .await
        .expect("closed after connections_max_idle_ms");
    assert!(
        idle_from.elapsed() >= Duration::from_millis(200),
        "not closed before connections_max_idle_ms: {:?}",
        idle_from.elapsed()
    );
    let c3 = t.conn(1, ConnKind::Admin).await.expect("conn");
    assert!(!c3.is_closed());

    // A connection kept busy through a clone held outside the pool is not idle.
    for _ in 0..6 {
        c3.metadata(Some(&[])).await.expect("busy conn works");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!c3.is_closed(), "in use, not idle");
}

#[tokio::test]
async fn concurrent_refreshes_and_lookups_share_one_request() {
    let cluster = mock_cluster(3);
    let t = Transport::builder([cluster.bootstrap_servers()])
        .build()
        .expect("transport");
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let t = t.clone();
        set.spawn(async move { t.metadata().await.map(|md| md.brokers.len()) });
    }
    while let Some(r) = set.join_next().await {
        assert_eq!(r.expect("task").expect("metadata"), 3);
    }
    assert_eq!(metadata_sent(&t), 1, "one refresh in flight, shared");

    let group = unique_topic("tm-lookup");
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let t = t.clone();
        let group = group.clone();
        set.spawn(async move { t.coordinator(CoordinatorType::Group, &group).await });
    }
    let mut nodes = Vec::new();
    while let Some(r) = set.join_next().await {
        nodes.push(r.expect("task").expect("coordinator"));
    }
    nodes.dedup();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    assert_eq!(sent(&t, ApiKey::FindCoordinator), 1, "one lookup, shared");
}

#[tokio::test]
async fn transaction_coordinator_move_and_retriable_codes() {
    let cluster = mock_cluster(3);
    let txn = unique_topic("tm-txn");
    cluster
        .coordinator(MockCoordinator::Transaction(txn.clone()), 2)
        .expect("set coordinator");
    let t = Transport::builder([cluster.bootstrap_servers()])
        .retry_backoff(Duration::from_millis(10))
        .retry_backoff_max(Duration::from_millis(50))
        .default_api_timeout(Duration::from_secs(20))
        .build()
        .expect("transport");
    let init = || {
        let mut r = InitProducerIdRequest::default();
        r.transactional_id = Some(txn.clone());
        r.transaction_timeout_ms = 60_000;
        r.producer_id = -1;
        r.producer_epoch = -1;
        r
    };
    let first = t.round_trip(init()).await.expect("InitProducerId");
    assert!(first.error_code.is_ok(), "{}", first.error_code);
    assert_eq!(t.requests_sent(2, ApiKey::InitProducerId), 1);

    // The coordinator moves: broker 2 itself answers NOT_COORDINATOR (no injection).
    cluster
        .coordinator(MockCoordinator::Transaction(txn.clone()), 3)
        .expect("move coordinator");
    // And the new one is slow to start: retriable codes first.
    cluster.request_errors(
        RDKafkaApiKey::InitProducerId,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS,
        ],
    );
    let second = t.round_trip(init()).await.expect("InitProducerId");
    assert!(second.error_code.is_ok(), "{}", second.error_code);
    // The two injected errors were used by the first two attempts (on broker 2), then broker 2
    // refused as not the coordinator, then broker 3 answered.
    assert_eq!(t.requests_sent(2, ApiKey::InitProducerId), 4);
    assert_eq!(t.requests_sent(3, ApiKey::InitProducerId), 1);
    assert_eq!(sent(&t, ApiKey::FindCoordinator), 2);
    assert_eq!(
        t.coordinator(CoordinatorType::Transaction, &txn)
            .await
            .expect("coordinator"),
        3
    );
}
