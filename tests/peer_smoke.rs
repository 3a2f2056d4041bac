//! Proves the test infrastructure: librdkafka writes records to tansu and to the mock cluster and
//! reads the same records back (keys, values, headers, partitions, consecutive offsets).

use integration_tests::{
    PeerSend, create_topic, mock_cluster, peer_consume, peer_produce, tansu, unique_topic,
};

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
    cluster
        .create_topic(&topic, PARTITIONS, 3)
        .expect("create topic");
    // Partition p is led by broker p+1, so the producer talks to all three brokers.
    for p in 0..PARTITIONS {
        cluster
            .partition_leader(&topic, p, Some(p + 1))
            .expect("set leader");
    }
    round_trip(&cluster.bootstrap_servers(), &topic).await;
}
