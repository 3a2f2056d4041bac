//! Transport against librdkafka's 3-broker mock cluster: metadata cache, routing, retries,
//! broker failures, bootstrap fallbacks.

use std::sync::Arc;

use integration_tests::{mock_cluster, mock_topic_spread, unique_topic};
use kafka_client::{CoordinatorType, ErrorCode, Transport};
use kafka_protocol::ApiKey;
use kafka_protocol::messages::{OffsetCommitRequest, offset_commit_request};
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
        .retry_backoff_ms(10)
        .retry_backoff_max_ms(50)
        .default_api_timeout_ms(20_000)
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
    let code = ErrorCode(resp.topics[0].partitions[0].error_code);
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
        .retry_backoff_ms(10)
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
