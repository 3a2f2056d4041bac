//! Transport against tansu, a real Kafka-compatible broker (one node): metadata cache,
//! controller, group-coordinator and transaction-coordinator routes, every-broker requests.
//!
//! Needs tansu: run through `cargo xtask test`, or `cargo xtask broker start` first.

use super::broker;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use integration_tests::unique_topic;
use kafkit::{ConnKind, CoordinatorType, ErrorCode, Transport};
use kafkit_protocol::ApiKey;
use kafkit_protocol::messages::{
    ApiVersionsRequest, CreateTopicsRequest, HeartbeatRequest, InitProducerIdRequest,
    JoinGroupRequest, LeaveGroupRequest, OffsetCommitRequest, SyncGroupRequest,
    create_topics_request, join_group_request, leave_group_request, offset_commit_request,
    sync_group_request,
};

fn transport() -> Transport {
    Transport::builder([broker()])
        .dialer(
            kafkit::Dialer::builder()
                .client_id("transport-tansu-test")
                .build(),
        )
        .retry_backoff(Duration::from_millis(20))
        .default_api_timeout(Duration::from_secs(20))
        .build()
        .expect("transport")
}

/// Requests of `api` sent to every broker of the cluster.
fn sent(t: &Transport, api: ApiKey) -> u64 {
    let md = t.cached_metadata().expect("metadata");
    md.brokers
        .iter()
        .map(|b| t.requests_sent(b.node_id, api))
        .chain([t.requests_sent(-1, api)])
        .sum()
}

#[tokio::test]
async fn create_topics_goes_to_the_controller_and_metadata_is_cached() {
    let t = transport();
    let md = t.metadata().await.expect("metadata");
    assert_eq!(md.brokers.len(), 1, "one node");
    let topic = unique_topic("tt-create");
    let mut ct = create_topics_request::CreatableTopic::default();
    ct.name = topic.clone();
    ct.num_partitions = 3;
    ct.replication_factor = 1;
    let mut req = CreateTopicsRequest::default();
    req.topics.push(ct);
    req.timeout_ms = 10_000;
    let resp = t.round_trip(req).await.expect("CreateTopics");
    assert_eq!(resp.topics.len(), 1);
    let code = resp.topics[0].error_code;
    assert!(code.is_ok(), "{code}");
    let node = md.brokers[0].node_id;
    assert_eq!(t.requests_sent(node, ApiKey::CreateTopics), 1);
    // Kafka's broker lists the topic a moment after CreateTopics answers (on a connection of
    // the test's, so that the transport's own counts stay as they were).
    let conn = integration_tests::dial(&broker(), "tt-create-wait").await;
    integration_tests::wait_for_topic(&conn, &topic, 3).await;

    let before = sent(&t, ApiKey::Metadata);
    let with_topic = t.metadata_for(&[&topic]).await.expect("metadata");
    assert_eq!(with_topic.topic(&topic).expect("topic").partitions.len(), 3);
    assert_eq!(
        sent(&t, ApiKey::Metadata),
        before + 1,
        "fetched the new topic"
    );
    let cached = t.metadata_for(&[&topic]).await.expect("metadata");
    assert!(Arc::ptr_eq(&with_topic, &cached));
    assert_eq!(sent(&t, ApiKey::Metadata), before + 1, "then cached");
}

#[tokio::test]
async fn group_requests_go_to_the_coordinator() {
    let t = transport();
    let group = unique_topic("tt-group");
    let topic = unique_topic("tt-group-topic");
    let coordinator = t
        .coordinator(CoordinatorType::Group, &group)
        .await
        .expect("coordinator");

    let join = |member_id: String| {
        let mut p = join_group_request::JoinGroupRequestProtocol::default();
        p.name = "range".into();
        p.metadata = Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 0]);
        let mut req = JoinGroupRequest::default();
        req.group_id = group.clone();
        // tansu waits half the session timeout for more members before answering a join.
        req.session_timeout_ms = 6_000;
        req.rebalance_timeout_ms = 1_000;
        req.member_id = member_id;
        req.protocol_type = "consumer".into();
        req.protocols.push(p);
        req
    };
    let mut joined = t.round_trip(join(String::new())).await.expect("JoinGroup");
    // KIP-394: a first join may be told to come back with its assigned member id; that code
    // is not retriable and reaches the caller.
    if joined.error_code == ErrorCode::MEMBER_ID_REQUIRED {
        joined = t
            .round_trip(join(joined.member_id.clone()))
            .await
            .expect("JoinGroup");
    }
    assert!(joined.error_code.is_ok(), "{}", joined.error_code);
    let member = joined.member_id.clone();
    let generation = joined.generation_id;

    let mut sync = SyncGroupRequest::default();
    sync.group_id = group.clone();
    sync.generation_id = generation;
    sync.member_id = member.clone();
    sync.protocol_type = Some("consumer".into());
    sync.protocol_name = joined.protocol_name.clone();
    // The only member leads the group and hands out the (empty) assignment.
    let mut mine = sync_group_request::SyncGroupRequestAssignment::default();
    mine.member_id = member.clone();
    mine.assignment = Bytes::from_static(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    sync.assignments.push(mine);
    let synced = t.round_trip(sync).await.expect("SyncGroup");
    assert!(synced.error_code.is_ok(), "{}", synced.error_code);

    let mut hb = HeartbeatRequest::default();
    hb.group_id = group.clone();
    hb.generation_id = generation;
    hb.member_id = member.clone();
    let beat = t.round_trip(hb).await.expect("Heartbeat");
    assert!(beat.error_code.is_ok(), "{}", beat.error_code);

    let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
    p.partition_index = 0;
    p.committed_offset = 5;
    let mut tp = offset_commit_request::OffsetCommitRequestTopic::default();
    tp.name = topic;
    tp.partitions.push(p);
    let mut commit = OffsetCommitRequest::default();
    commit.group_id = group.clone();
    commit.generation_id_or_member_epoch = generation;
    commit.member_id = member.clone();
    commit.topics.push(tp);
    let committed = t.round_trip(commit).await.expect("OffsetCommit");
    assert_eq!(committed.topics.len(), 1);

    let mut leave = LeaveGroupRequest::default();
    leave.group_id = group.clone();
    let mut who = leave_group_request::MemberIdentity::default();
    who.member_id = member;
    leave.members.push(who);
    let left = t.round_trip(leave).await.expect("LeaveGroup");
    assert!(left.error_code.is_ok(), "{}", left.error_code);

    for api in [
        ApiKey::JoinGroup,
        ApiKey::SyncGroup,
        ApiKey::Heartbeat,
        ApiKey::OffsetCommit,
        ApiKey::LeaveGroup,
    ] {
        assert!(
            t.requests_sent(coordinator, api) >= 1,
            "{api:?} went to the coordinator"
        );
    }
    assert_eq!(
        sent(&t, ApiKey::FindCoordinator),
        1,
        "the coordinator was cached"
    );
    // Group traffic uses the Group pool, not the Admin one.
    let group_conn = t.conn(coordinator, ConnKind::Group).await.expect("conn");
    assert!(group_conn.requests_sent(ApiKey::Heartbeat) >= 1);
}

#[tokio::test]
async fn init_producer_id_with_and_without_transactional_id() {
    let t = transport();
    let mut idempotent = InitProducerIdRequest::default();
    // No transactional id is null, not the default "" (which Kafka refuses: INVALID_REQUEST).
    idempotent.transactional_id = None;
    idempotent.transaction_timeout_ms = 60_000;
    idempotent.producer_id = -1;
    idempotent.producer_epoch = -1;
    let r = t.round_trip(idempotent).await.expect("InitProducerId");
    assert!(r.error_code.is_ok(), "{}", r.error_code);
    assert!(r.producer_id >= 0);
    assert_eq!(sent(&t, ApiKey::FindCoordinator), 0, "any broker");

    let txn_id = unique_topic("tt-txn");
    let mut transactional = InitProducerIdRequest::default();
    transactional.transactional_id = Some(txn_id.clone());
    transactional.transaction_timeout_ms = 60_000;
    transactional.producer_id = -1;
    transactional.producer_epoch = -1;
    let r = t.round_trip(transactional).await.expect("InitProducerId");
    assert!(r.error_code.is_ok(), "{}", r.error_code);
    assert_eq!(
        sent(&t, ApiKey::FindCoordinator),
        1,
        "transaction coordinator"
    );
    let node = t
        .coordinator(CoordinatorType::Transaction, &txn_id)
        .await
        .expect("coordinator");
    assert_eq!(t.requests_sent(node, ApiKey::InitProducerId), 2);
}

#[tokio::test]
async fn round_trip_all_asks_every_broker() {
    let t = transport();
    // KIP-511: Kafka refuses empty client software names (INVALID_REQUEST); tansu ignores them.
    let mut request = ApiVersionsRequest::default();
    request.client_software_name = "kafkit-test".into();
    request.client_software_version = "0.1.0".into();
    let all = t.round_trip_all(&request).await;
    let md = t.cached_metadata().expect("metadata");
    assert_eq!(all.len(), md.brokers.len());
    for (node, r) in all {
        let r = r.unwrap_or_else(|e| panic!("broker {node}: {e}"));
        assert!(r.error_code.is_ok());
        assert!(t.requests_sent(node, ApiKey::ApiVersions) >= 1);
    }
}

#[tokio::test]
async fn an_invalid_topic_name_is_answered_locally_and_does_not_poison_the_cache() {
    let t = transport();
    let long = "y".repeat(40_000);
    let md = t
        .metadata_for(&[&long, "bad name"])
        .await
        .expect("metadata");
    for name in [long.as_str(), "bad name"] {
        let topic = md.topic(name).expect("present");
        assert_eq!(topic.error_code, ErrorCode::INVALID_TOPIC_EXCEPTION);
        assert!(topic.partitions.is_empty());
    }
    t.invalidate_metadata();
    t.metadata().await.expect("later refreshes still work");
    let fine = unique_topic("tt-fine");
    let md = t.metadata_for(&[&fine]).await.expect("metadata");
    assert!(md.topic(&fine).is_some());
    assert!(md.topic("bad name").is_none(), "not remembered");
}
