//! The admin [`Client`] against librdkafka's mock cluster (3 in-process brokers, ids 1..=3),
//! for what tansu (one node) cannot show: several brokers, leaders spread over them, and a
//! broker without DescribeCluster, where `describe_cluster` falls back to Metadata.
//!
//! The mock offers no admin API besides Metadata (no CreateTopics, DescribeConfigs,
//! DescribeCluster, DescribeLogDirs...): those give the typed unsupported-version error naming
//! the API. The mock cluster is not `Send`, so each test keeps it on the test's
//! (current-thread) runtime; the client's own tasks never touch it.

use std::time::Duration;

use integration_tests::{mock_cluster, mock_topic_spread, unique_topic};
use kafkit::admin::{ConfigResource, DescribeConfigsOptions, NewTopic};
use kafkit::{Client, Error, Transport};
use kafkit_protocol::ApiKey;

fn admin(bootstrap: &str) -> Client {
    let transport = Transport::builder(bootstrap.split(','))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport");
    Client::new(transport).with_timeout(Duration::from_secs(5))
}

fn assert_unsupported<T: std::fmt::Debug>(result: Result<T, Error>, api: ApiKey) {
    match result {
        Err(Error::UnsupportedVersion { api: got, .. }) => assert_eq!(got, api),
        other => panic!("expected UnsupportedVersion for {api:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn describe_cluster_falls_back_to_metadata() {
    let cluster = mock_cluster(3);
    let admin = admin(&cluster.bootstrap_servers());
    let described = admin
        .describe_cluster(false)
        .await
        .expect("describe cluster");
    let mut ids: Vec<i32> = described.brokers.iter().map(|b| b.node_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2, 3]);
    for b in &described.brokers {
        assert!(
            cluster.bootstrap_servers().contains(&b.addr()),
            "{} is one of the mock brokers",
            b.addr()
        );
    }
    // The same cluster id and controller as a plain Metadata answer.
    let md = admin.transport().metadata().await.expect("metadata");
    assert_eq!(described.cluster_id, md.cluster_id);
    assert!(described.cluster_id.is_some());
    assert_eq!(
        described.controller_id,
        Some(md.controller_id).filter(|c| *c >= 0)
    );
}

#[tokio::test]
async fn describe_topics_reports_leaders_on_every_broker() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("admin-mock");
    mock_topic_spread(&cluster, &topic, 6, 3);
    let admin = admin(&cluster.bootstrap_servers());

    let listed = admin.list_topics(false).await.expect("list topics");
    assert!(listed.iter().any(|t| t.name == topic), "{listed:?}");

    let missing = unique_topic("admin-mock-missing");
    let described = admin
        .describe_topics(&[&topic, &missing], false)
        .await
        .expect("describe topics");
    let d = described[0].1.as_ref().expect("described");
    let leaders: Vec<(i32, i32)> = d
        .partitions
        .iter()
        .map(|p| (p.partition, p.leader_id))
        .collect();
    assert_eq!(
        leaders,
        vec![(0, 1), (1, 2), (2, 3), (3, 1), (4, 2), (5, 3)]
    );
    for p in &d.partitions {
        assert_eq!(p.replicas.len(), 3, "{p:?}");
        assert!(p.replicas.contains(&p.leader_id));
    }
    assert_eq!(described[1].0, missing);
    assert!(described[1].1.is_err(), "{:?}", described[1].1);

    // A leader move shows in the next description (no cache in between).
    cluster
        .partition_leader(&topic, 0, Some(3))
        .expect("move leader");
    let again = admin
        .describe_topics(&[&topic], false)
        .await
        .expect("describe");
    assert_eq!(
        again[0].1.as_ref().expect("described").partitions[0].leader_id,
        3
    );
}

#[tokio::test]
async fn admin_apis_the_mock_lacks_name_the_api() {
    let cluster = mock_cluster(3);
    let admin = admin(&cluster.bootstrap_servers());
    assert_unsupported(
        admin
            .create_topics(&[NewTopic::new(unique_topic("admin-mock"), 1, 1)], false)
            .await,
        ApiKey::CreateTopics,
    );
    assert_unsupported(
        admin
            .describe_configs(
                &[ConfigResource::broker(2)],
                DescribeConfigsOptions::default(),
            )
            .await,
        ApiKey::DescribeConfigs,
    );
    // Sent to each of the three brokers; none answers, so the call fails with the API named.
    assert_unsupported(admin.describe_log_dirs(None).await, ApiKey::DescribeLogDirs);
}
