//! Split routes of `Transport::round_trip` on librdkafka's 3-broker mock cluster: one request
//! per broker, answers merged in the caller's order, leader moves, a broker down, injected
//! retriable errors, and coordinators on different brokers.
//!
//! The mock is not `Send`, so every test runs on `#[tokio::test]`'s current-thread runtime.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use integration_tests::{mock_cluster, mock_topic_spread, unique_topic};
use kafkit::{Dialer, Transport};
use kafkit_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafkit_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafkit_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafkit_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafkit_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafkit_protocol::messages::{
    InitProducerIdRequest, ListOffsetsRequest, OffsetCommitRequest, OffsetFetchRequest,
    OffsetForLeaderEpochRequest, ProduceRequest, ProduceResponse,
};
use kafkit_protocol::records::{Record, RecordBatchEncoder, RecordBatchOptions};
use kafkit_protocol::{ApiKey, ErrorCode};
use rdkafka::mocking::MockCoordinator;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

/// A transport on the mock with a `timeout_ms` deadline and short backoffs.
fn transport(bootstrap: &str, timeout_ms: u64) -> Transport {
    Transport::builder(bootstrap.split(','))
        .dialer(
            Dialer::builder()
                .client_id("split-mock")
                .connect_timeout(Duration::from_secs(1))
                .request_timeout(Duration::from_secs(2))
                .build(),
        )
        .retry_backoff(Duration::from_millis(20))
        .retry_backoff_max(Duration::from_millis(100))
        .default_api_timeout(Duration::from_millis(timeout_ms))
        .build()
        .expect("transport")
}

/// One record batch (magic v2) with `count` records; idempotent when `producer` is
/// `Some((producer id, epoch, base sequence))`.
fn batch(count: usize, producer: Option<(i64, i16, i32)>) -> Bytes {
    let mut buf = BytesMut::new();
    let mut opts = RecordBatchOptions::new();
    if let Some((id, epoch, seq)) = producer {
        opts = opts.producer(id, epoch, seq);
    }
    let mut enc = RecordBatchEncoder::new(&mut buf, opts).expect("encoder");
    for i in 0..count {
        enc.append(&Record::new(None, Some(Bytes::from(format!("v{i}")))))
            .expect("append");
    }
    enc.finish().expect("finish");
    buf.freeze()
}

/// A Produce request (acks=all) with one batch per `(topic, partition, batch)`, topics in first
/// appearance order, partitions in the given order.
fn produce(parts: &[(&str, i32, Bytes)]) -> ProduceRequest {
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 2_000;
    for (topic, partition, records) in parts {
        let mut p = PartitionProduceData::default();
        p.index = *partition;
        p.records = Some(records.clone());
        match req.topic_data.iter_mut().find(|t| t.name == *topic) {
            Some(t) => t.partition_data.push(p),
            None => {
                let mut t = TopicProduceData::default();
                t.name = (*topic).to_string();
                t.partition_data.push(p);
                req.topic_data.push(t);
            }
        }
    }
    req
}

/// `(topic, partition, error code, base offset)` of every partition, in response order.
fn produced(resp: &ProduceResponse) -> Vec<(String, i32, ErrorCode, i64)> {
    resp.responses
        .iter()
        .flat_map(|t| {
            t.partition_responses
                .iter()
                .map(|p| (t.name.clone(), p.index, p.error_code, p.base_offset))
        })
        .collect()
}

fn sent(t: &Transport, api: ApiKey) -> [u64; 3] {
    [1, 2, 3].map(|n| t.requests_sent(n, api))
}

#[tokio::test]
async fn produce_across_three_leaders_is_one_request_per_broker_merged_in_order() {
    let cluster = mock_cluster(3);
    let (a, b) = (unique_topic("split-a"), unique_topic("split-b"));
    mock_topic_spread(&cluster, &a, 6, 3);
    mock_topic_spread(&cluster, &b, 3, 3);
    let t = transport(&cluster.bootstrap_servers(), 10_000);

    let order: Vec<(&str, i32)> = vec![
        (&a, 4),
        (&a, 1),
        (&a, 5),
        (&a, 0),
        (&a, 3),
        (&a, 2),
        (&b, 2),
        (&b, 0),
        (&b, 1),
    ];
    let parts: Vec<(&str, i32, Bytes)> = order
        .iter()
        .map(|(topic, p)| (*topic, *p, batch(2, None)))
        .collect();
    let resp = t.round_trip(produce(&parts)).await.expect("produce");

    let got = produced(&resp);
    let want: Vec<(String, i32, ErrorCode, i64)> = order
        .iter()
        .map(|(topic, p)| (topic.to_string(), *p, ErrorCode::NONE, 0))
        .collect();
    assert_eq!(got, want, "every partition, in the caller's order, written");
    assert_eq!(resp.responses.len(), 2, "one entry per topic, as sent");
    assert_eq!(
        sent(&t, ApiKey::Produce),
        [1, 1, 1],
        "one Produce per broker"
    );
}

#[tokio::test]
async fn a_moved_leader_is_found_on_the_next_round_trip_without_waiting_for_the_ttl() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("split-move");
    mock_topic_spread(&cluster, &topic, 3, 3);
    // The metadata TTL (5 min) is far beyond the deadline (10 s): only a refresh on
    // NOT_LEADER_OR_FOLLOWER can make the second write succeed.
    let t = Transport::builder(cluster.bootstrap_servers().split(','))
        .metadata_max_age(Duration::from_secs(300))
        .retry_backoff(Duration::from_millis(20))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport");

    let first = t
        .round_trip(produce(&[(&topic, 0, batch(1, None))]))
        .await
        .expect("first produce");
    assert_eq!(produced(&first)[0].2, ErrorCode::NONE);
    assert_eq!(
        sent(&t, ApiKey::Produce),
        [1, 0, 0],
        "partition 0 is led by broker 1"
    );

    cluster
        .partition_leader(&topic, 0, Some(2))
        .expect("move leader");
    let second = t
        .round_trip(produce(&[(&topic, 0, batch(1, None))]))
        .await
        .expect("second produce");
    assert_eq!(
        produced(&second),
        vec![(topic.clone(), 0, ErrorCode::NONE, 1)],
        "written at the new leader, after the first record"
    );
    assert_eq!(
        sent(&t, ApiKey::Produce),
        [2, 1, 0],
        "refused by the old leader once, then sent to the new one"
    );
    let md = t.cached_metadata().expect("metadata");
    let p0 = &md.topic(&topic).expect("topic").partitions[0];
    assert_eq!(p0.leader_id, 2);
}

#[tokio::test]
async fn with_a_broker_down_its_partitions_fail_alone_after_the_deadline() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("split-down");
    mock_topic_spread(&cluster, &topic, 6, 3);
    let t = transport(&cluster.bootstrap_servers(), 1_500);
    t.metadata_for(&[&topic]).await.expect("metadata");

    cluster.broker_down(3).expect("broker down");
    let parts: Vec<(&str, i32, Bytes)> = (0..6)
        .map(|p| (topic.as_str(), p, batch(1, None)))
        .collect();
    let resp = t
        .round_trip(produce(&parts))
        .await
        .expect("partial success is not an Err");

    for (name, p, code, offset) in produced(&resp) {
        assert_eq!(name, topic);
        if p % 3 + 1 == 3 {
            // The mock drops a down broker from Metadata, so after the refresh its partitions
            // have no leader; before it, the dial fails.
            assert!(
                [
                    ErrorCode::NETWORK_EXCEPTION,
                    ErrorCode::REQUEST_TIMED_OUT,
                    ErrorCode::LEADER_NOT_AVAILABLE
                ]
                .contains(&code),
                "partition {p} on the down broker: {code}"
            );
            assert_eq!(offset, -1);
        } else {
            assert_eq!((code, offset), (ErrorCode::NONE, 0), "partition {p}");
        }
    }
    assert_eq!(produced(&resp).len(), 6);
}

#[tokio::test]
async fn injected_not_leader_is_retried_but_a_plain_batch_timeout_is_returned() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("split-inject");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let t = transport(&cluster.bootstrap_servers(), 10_000);
    t.metadata_for(&[&topic]).await.expect("metadata");

    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION],
    );
    let resp = t
        .round_trip(produce(&[(&topic, 0, batch(1, None))]))
        .await
        .expect("produce");
    assert_eq!(
        produced(&resp),
        vec![(topic.clone(), 0, ErrorCode::NONE, 0)]
    );
    assert_eq!(
        sent(&t, ApiKey::Produce)[0],
        2,
        "refused once, then written"
    );

    // A timeout may have written a non-idempotent batch: it goes back to the caller.
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT],
    );
    let resp = t
        .round_trip(produce(&[(&topic, 0, batch(1, None))]))
        .await
        .expect("produce");
    assert_eq!(produced(&resp)[0].2, ErrorCode::REQUEST_TIMED_OUT);
    assert_eq!(sent(&t, ApiKey::Produce)[0], 3, "not retried");
}

#[tokio::test]
async fn an_idempotent_batch_is_retried_after_request_timed_out() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("split-idem");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let t = transport(&cluster.bootstrap_servers(), 10_000);

    let mut init = InitProducerIdRequest::default();
    init.transactional_id = None;
    init.transaction_timeout_ms = 60_000;
    let pid = t.round_trip(init).await.expect("InitProducerId");
    assert_eq!(pid.error_code, ErrorCode::NONE);
    assert!(pid.producer_id >= 0);

    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        ],
    );
    let idem = batch(3, Some((pid.producer_id, pid.producer_epoch, 0)));
    let resp = t
        .round_trip(produce(&[(&topic, 1, idem)]))
        .await
        .expect("produce");
    assert_eq!(
        produced(&resp),
        vec![(topic.clone(), 1, ErrorCode::NONE, 0)]
    );
    assert_eq!(
        sent(&t, ApiKey::Produce)[1],
        3,
        "two injected errors, then written"
    );
}

#[tokio::test]
async fn list_offsets_across_three_brokers_is_merged_and_retried() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("split-offsets");
    mock_topic_spread(&cluster, &topic, 6, 3);
    let t = transport(&cluster.bootstrap_servers(), 10_000);
    // Partition p holds p + 1 records.
    let parts: Vec<(&str, i32, Bytes)> = (0..6)
        .map(|p| (topic.as_str(), p, batch(p as usize + 1, None)))
        .collect();
    let resp = t.round_trip(produce(&parts)).await.expect("produce");
    assert!(produced(&resp).iter().all(|r| r.2 == ErrorCode::NONE));

    cluster.request_errors(
        RDKafkaApiKey::ListOffsets,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        ],
    );
    let order = [5, 2, 0, 4, 1, 3];
    let mut req = ListOffsetsRequest::default();
    req.replica_id = -1;
    let mut lt = ListOffsetsTopic::default();
    lt.name = topic.clone();
    lt.partitions = order
        .iter()
        .map(|&p| {
            let mut x = ListOffsetsPartition::default();
            x.partition_index = p;
            x.timestamp = -1; // latest
            x
        })
        .collect();
    req.topics = vec![lt];
    let resp = t.round_trip(req).await.expect("ListOffsets");

    assert_eq!(resp.topics.len(), 1);
    let got: Vec<(i32, ErrorCode, i64)> = resp.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.error_code, p.offset))
        .collect();
    let want: Vec<(i32, ErrorCode, i64)> = order
        .iter()
        .map(|&p| (p, ErrorCode::NONE, i64::from(p) + 1))
        .collect();
    assert_eq!(got, want);
    let per_broker = sent(&t, ApiKey::ListOffsets);
    assert!(per_broker.iter().all(|&n| n >= 1), "{per_broker:?}");
    assert_eq!(
        per_broker.iter().sum::<u64>(),
        5,
        "three requests, two of them answered with an injected error and sent again"
    );
}

#[tokio::test]
async fn offset_fetch_for_groups_on_three_coordinators_is_merged() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("split-groups");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let t = transport(&cluster.bootstrap_servers(), 10_000);
    let groups: Vec<String> = (1..=3).map(|i| unique_topic(&format!("g{i}"))).collect();
    for (i, g) in groups.iter().enumerate() {
        cluster
            .coordinator(MockCoordinator::Group(g.clone()), i as i32 + 1)
            .expect("set coordinator");
        // A standalone commit (no member): offset 10 * (i + 1) on partition 0.
        let mut commit = OffsetCommitRequest::default();
        commit.group_id = g.clone();
        commit.generation_id_or_member_epoch = -1;
        let mut ct = OffsetCommitRequestTopic::default();
        ct.name = topic.clone();
        let mut cp = OffsetCommitRequestPartition::default();
        cp.partition_index = 0;
        cp.committed_offset = 10 * (i as i64 + 1);
        ct.partitions = vec![cp];
        commit.topics = vec![ct];
        let r = t.round_trip(commit).await.expect("OffsetCommit");
        assert_eq!(r.topics[0].partitions[0].error_code, ErrorCode::NONE);
    }

    let order = [2usize, 0, 1];
    let mut req = OffsetFetchRequest::default();
    req.groups = order
        .iter()
        .map(|&i| {
            let mut g = OffsetFetchRequestGroup::default();
            g.group_id = groups[i].clone();
            let mut ft = OffsetFetchRequestTopics::default();
            ft.name = topic.clone();
            ft.partition_indexes = vec![0];
            g.topics = Some(vec![ft]);
            g
        })
        .collect();
    let check = |resp: kafkit_protocol::messages::OffsetFetchResponse| {
        let got: Vec<(String, ErrorCode, i64)> = resp
            .groups
            .iter()
            .map(|g| {
                (
                    g.group_id.clone(),
                    g.error_code,
                    g.topics[0].partitions[0].committed_offset,
                )
            })
            .collect();
        let want: Vec<(String, ErrorCode, i64)> = order
            .iter()
            .map(|&i| (groups[i].clone(), ErrorCode::NONE, 10 * (i as i64 + 1)))
            .collect();
        assert_eq!(got, want);
    };
    check(t.round_trip(req.clone()).await.expect("OffsetFetch"));
    // The mock speaks OffsetFetch v6 (no KIP-709 batching): one request per group, each at its
    // own coordinator.
    assert_eq!(sent(&t, ApiKey::OffsetFetch), [1, 1, 1]);

    // Coordinators move and load: each of the three requests is answered with a retriable
    // coordinator error, then sent again.
    cluster.request_errors(
        RDKafkaApiKey::OffsetFetch,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
        ],
    );
    check(
        t.round_trip(req)
            .await
            .expect("OffsetFetch after coordinator errors"),
    );
    assert_eq!(
        sent(&t, ApiKey::OffsetFetch).iter().sum::<u64>(),
        3 + 6,
        "three requests answered with an injected error, each sent again"
    );
}

#[tokio::test]
async fn a_partition_missing_from_fresh_metadata_fails_alone_and_is_not_sent() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("split-missing");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let t = transport(&cluster.bootstrap_servers(), 30_000);

    let resp = t
        .round_trip(produce(&[
            (&topic, 1, batch(1, None)),
            (&topic, 99, batch(1, None)),
        ]))
        .await
        .expect("produce");
    assert_eq!(
        produced(&resp),
        vec![
            (topic.clone(), 1, ErrorCode::NONE, 0),
            (topic.clone(), 99, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, -1),
        ],
        "final once a refreshed Metadata also lacks it (not REQUEST_TIMED_OUT at the deadline)"
    );
    assert_eq!(
        sent(&t, ApiKey::Produce),
        [0, 1, 0],
        "partition 99 is never sent"
    );
}

#[tokio::test]
async fn acks_zero_produce_reports_every_partition_without_a_response() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("split-acks0");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let t = transport(&cluster.bootstrap_servers(), 10_000);
    let mut req = produce(&[
        (&topic, 2, batch(1, None)),
        (&topic, 0, batch(1, None)),
        (&topic, 1, batch(1, None)),
    ]);
    req.acks = 0;
    let resp = t.round_trip(req).await.expect("produce acks=0");
    assert_eq!(
        produced(&resp),
        [2, 0, 1]
            .map(|p| (topic.clone(), p, ErrorCode::NONE, -1))
            .to_vec()
    );
    assert_eq!(sent(&t, ApiKey::Produce), [1, 1, 1]);
}

#[tokio::test]
async fn offset_for_leader_epoch_across_three_brokers_is_merged() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("split-epoch");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let t = transport(&cluster.bootstrap_servers(), 10_000);
    let parts: Vec<(&str, i32, Bytes)> = (0..3)
        .map(|p| (topic.as_str(), p, batch(p as usize + 2, None)))
        .collect();
    let resp = t.round_trip(produce(&parts)).await.expect("produce");
    assert!(produced(&resp).iter().all(|r| r.2 == ErrorCode::NONE));
    let md = t.metadata_for(&[&topic]).await.expect("metadata");
    let epochs: Vec<i32> = md
        .topic(&topic)
        .expect("topic")
        .partitions
        .iter()
        .map(|p| p.leader_epoch)
        .collect();

    let order = [1, 2, 0];
    let mut req = OffsetForLeaderEpochRequest::default();
    req.replica_id = -1;
    let mut ot = OffsetForLeaderTopic::default();
    ot.topic = topic.clone();
    ot.partitions = order
        .iter()
        .map(|&p| {
            let mut x = OffsetForLeaderPartition::default();
            x.partition = p;
            x.current_leader_epoch = -1;
            x.leader_epoch = epochs[p as usize];
            x
        })
        .collect();
    req.topics = vec![ot];
    let resp = t.round_trip(req).await.expect("OffsetForLeaderEpoch");
    let got: Vec<(i32, ErrorCode, i64)> = resp.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition, p.error_code, p.end_offset))
        .collect();
    let want: Vec<(i32, ErrorCode, i64)> = order
        .iter()
        .map(|&p| (p, ErrorCode::NONE, i64::from(p) + 2))
        .collect();
    assert_eq!(
        got, want,
        "end of each partition's current epoch, in the caller's order"
    );
    assert_eq!(sent(&t, ApiKey::OffsetForLeaderEpoch), [1, 1, 1]);
}

#[tokio::test]
async fn a_partition_listed_twice_is_written_once_and_its_copy_is_refused() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("split-twice");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let t = transport(&cluster.bootstrap_servers(), 5_000);

    let resp = t
        .round_trip(produce(&[
            (&topic, 1, batch(1, None)),
            (&topic, 2, batch(1, None)),
            (&topic, 1, batch(1, None)),
        ]))
        .await
        .expect("produce");
    assert_eq!(
        produced(&resp),
        vec![
            (topic.clone(), 1, ErrorCode::NONE, 0),
            (topic.clone(), 2, ErrorCode::NONE, 0),
            (topic.clone(), 1, ErrorCode::INVALID_REQUEST, -1),
        ],
        "the repeat is refused, not reported as a failure after being written"
    );
    // Only one copy reached the log: the next record of partition 1 is at offset 1.
    let next = t
        .round_trip(produce(&[(&topic, 1, batch(1, None))]))
        .await
        .expect("produce");
    assert_eq!(
        produced(&next),
        vec![(topic.clone(), 1, ErrorCode::NONE, 1)]
    );
}

#[tokio::test]
async fn a_part_whose_dial_never_finished_is_not_reported_as_maybe_written() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("split-dial");
    mock_topic_spread(&cluster, &topic, 3, 3);
    // Every dial to broker 2 (TCP, then ApiVersions: two round trips on the mock, which refuses
    // our newest ApiVersions version) takes 2 x 400 ms, more than the 500 ms connect timeout,
    // so nothing ever reaches broker 2. At the deadline a dial is usually under way: its items
    // must end NETWORK_EXCEPTION (not written), not REQUEST_TIMED_OUT (may have been written).
    let t = Transport::builder(cluster.bootstrap_servers().split(','))
        .dialer(
            Dialer::builder()
                .connect_timeout(Duration::from_millis(500))
                .request_timeout(Duration::from_secs(2))
                .build(),
        )
        .retry_backoff(Duration::from_millis(20))
        .retry_backoff_max(Duration::from_millis(50))
        .default_api_timeout(Duration::from_millis(1_200))
        .build()
        .expect("transport");
    t.metadata_for(&[&topic]).await.expect("metadata");
    cluster
        .broker_round_trip_time(2, std::time::Duration::from_millis(400))
        .expect("slow broker 2");
    let parts: Vec<(&str, i32, Bytes)> = (0..3)
        .map(|p| (topic.as_str(), p, batch(1, None)))
        .collect();
    let resp = t.round_trip(produce(&parts)).await.expect("produce");
    assert_eq!(
        produced(&resp),
        vec![
            (topic.clone(), 0, ErrorCode::NONE, 0),
            (topic.clone(), 1, ErrorCode::NETWORK_EXCEPTION, -1),
            (topic.clone(), 2, ErrorCode::NONE, 0),
        ]
    );
    assert_eq!(
        sent(&t, ApiKey::Produce),
        [1, 0, 1],
        "nothing reached broker 2"
    );
}
