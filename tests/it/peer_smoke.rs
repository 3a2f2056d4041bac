//! Proves the test infrastructure: librdkafka writes records to tansu and to the mock cluster and
//! reads the same records back (keys, values, headers, partitions, consecutive offsets).

use integration_tests::{PEER_TIMEOUT, producer_config};
use integration_tests::{
    PeerSend, create_topic, mock_cluster, mock_topic_spread, peer_consume, peer_produce, tansu,
    unique_topic,
};
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::{RDKafkaApiKey, RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::util::Timeout;

const RECORDS: usize = 60;
const PARTITIONS: i32 = 3;

/// Writes RECORDS records round-robin over PARTITIONS and checks what a consumer reads back.
async fn round_trip(bootstrap: &str, topic: &str) {
    let keys: Vec<String> = (0..RECORDS).map(|i| format!("key-{i}")).collect();
    let values: Vec<String> = (0..RECORDS)
        .map(|i| format!("value-{i}").repeat(i % 5 + 1))
        .collect();
    let seq: Vec<[u8; 8]> = (0..RECORDS).map(|i| (i as u64).to_be_bytes()).collect();
    let headers: Vec<[(&str, &[u8]); 1]> = seq.iter().map(|s| [("seq", &s[..])]).collect();
    let sends: Vec<PeerSend<'_>> = (0..RECORDS)
        .map(|i| PeerSend {
            partition: i as i32 % PARTITIONS,
            key: Some(keys[i].as_bytes()),
            value: Some(values[i].as_bytes()),
            headers: &headers[i],
        })
        .collect();

    let acks = peer_produce(bootstrap, topic, &sends).await;
    // Each partition's offsets start at 0 and have no gaps, in send order.
    for (i, (partition, offset)) in acks.iter().enumerate() {
        assert_eq!(*partition, i as i32 % PARTITIONS, "record {i} partition");
        assert_eq!(*offset, (i as i32 / PARTITIONS) as i64, "record {i} offset");
    }

    let got = peer_consume(bootstrap, topic, PARTITIONS, RECORDS).await;
    assert_eq!(got.len(), RECORDS);
    for r in &got {
        let i = (r.offset * PARTITIONS as i64 + r.partition as i64) as usize;
        assert!(i < RECORDS, "unexpected record {r:?}");
        assert_eq!(r.key.as_deref(), Some(keys[i].as_bytes()), "key of {r:?}");
        assert_eq!(
            r.value.as_deref(),
            Some(values[i].as_bytes()),
            "value of record {i}"
        );
        assert_eq!(r.headers, vec![("seq".to_string(), Some(seq[i].to_vec()))]);
        assert!(r.timestamp_ms.is_some_and(|t| t > 0), "timestamp of {r:?}");
    }
}

#[tokio::test]
async fn librdkafka_round_trip_on_tansu() {
    let bootstrap = tansu();
    let topic = unique_topic("peer-smoke");
    create_topic(&bootstrap, &topic, PARTITIONS).await;
    round_trip(&bootstrap, &topic).await;
}

#[tokio::test]
async fn librdkafka_round_trip_on_mock_cluster_with_spread_leaders() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("peer-smoke");
    // Partition p is led by broker p+1, so the producer talks to all three brokers.
    mock_topic_spread(&cluster, &topic, PARTITIONS, 3);
    round_trip(&cluster.bootstrap_servers(), &topic).await;
}

/// The mock cluster's error injection reaches the client: two Produce requests fail with
/// retriable errors, librdkafka retries, and every record still lands exactly once.
#[tokio::test]
async fn mock_cluster_injected_produce_errors_are_retried() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("peer-smoke-errors");
    mock_topic_spread(&cluster, &topic, PARTITIONS, 3);
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        ],
    );
    round_trip(&cluster.bootstrap_servers(), &topic).await;
}

/// A non-retriable injected error reaches the producer's caller with its code; the next
/// request, with the error stack empty, succeeds.
#[tokio::test]
async fn mock_cluster_injected_fatal_produce_error_reaches_caller() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("peer-smoke-fatal");
    mock_topic_spread(&cluster, &topic, 1, 3);
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    let producer: FutureProducer = producer_config(&cluster.bootstrap_servers())
        .create()
        .expect("producer");
    let send = |v: &'static str| {
        producer.send(
            FutureRecord::<(), str>::to(&topic).partition(0).payload(v),
            Timeout::After(PEER_TIMEOUT),
        )
    };
    match send("first").await {
        Err((KafkaError::MessageProduction(code), _)) => {
            assert_eq!(code, RDKafkaErrorCode::MessageSizeTooLarge)
        }
        other => panic!("expected MESSAGE_TOO_LARGE, got {other:?}"),
    }
    let delivered = send("second").await.expect("second record");
    assert_eq!((delivered.partition, delivered.offset), (0, 0));
}
