//! The admin Client's offset and group-offset operations on librdkafka's 3-broker mock cluster,
//! where partitions have different leaders and groups different coordinators (what one tansu
//! node cannot show), and the typed unsupported-version errors for the APIs the mock lacks.
//!
//! The mock is not `Send`: each test keeps it on its own current-thread runtime.

use std::time::Duration;

use integration_tests::{PeerSend, mock_cluster, mock_topic_spread, peer_produce, unique_topic};
use kafkit::admin::{
    ListGroupOffsets, ListGroupsOptions, ListTransactionsOptions, OffsetAndMetadata,
};
use kafkit::{Client, Error, IsolationLevel, OffsetSpec, Transport};
use kafkit_protocol::ApiKey;
use rdkafka::mocking::MockCoordinator;

fn client(bootstrap: &str) -> Client {
    let transport = Transport::builder([bootstrap])
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport");
    Client::new(transport)
}

fn tp(topic: &str, p: i32) -> (String, i32) {
    (topic.to_owned(), p)
}

#[tokio::test]
async fn list_offsets_sends_one_request_per_leader() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("admin-offsets-mock");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let records: Vec<PeerSend<'_>> = [0, 1, 1, 2, 2, 2]
        .into_iter()
        .map(|partition| PeerSend {
            partition,
            key: None,
            value: Some(b"v"),
            headers: &[],
        })
        .collect();
    peer_produce(&bootstrap, &topic, &records).await;

    let admin = client(&bootstrap);
    let specs: Vec<(&str, i32, OffsetSpec)> = [2, 0, 1]
        .into_iter()
        .map(|p| (topic.as_str(), p, OffsetSpec::Latest))
        .collect();
    let latest = admin
        .list_offsets(&specs, IsolationLevel::ReadUncommitted)
        .await
        .expect("list offsets");
    let got: Vec<((String, i32), i64)> = latest
        .into_iter()
        .map(|(tp, r)| (tp, r.expect("partition answered").offset))
        .collect();
    assert_eq!(
        got,
        [(tp(&topic, 2), 3), (tp(&topic, 0), 1), (tp(&topic, 1), 2)],
        "caller's order"
    );
    // Partition p is led by broker p + 1: one ListOffsets request went to each.
    for node in 1..=3 {
        assert_eq!(
            admin.transport().requests_sent(node, ApiKey::ListOffsets),
            1,
            "broker {node}"
        );
    }
    let earliest: Vec<(&str, i32, OffsetSpec)> = (0..3)
        .map(|p| (topic.as_str(), p, OffsetSpec::Earliest))
        .collect();
    for (tp, r) in admin
        .list_offsets(&earliest, IsolationLevel::ReadCommitted)
        .await
        .expect("list offsets")
    {
        assert_eq!(r.expect("answered").offset, 0, "{tp:?}");
    }
}

#[tokio::test]
async fn group_offsets_at_three_coordinators() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("admin-group-offsets-mock");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let groups: Vec<String> = (1..=3)
        .map(|i| unique_topic(&format!("admin-mock-group-{i}")))
        .collect();
    for (i, g) in groups.iter().enumerate() {
        let node = i32::try_from(i).expect("small") + 1;
        cluster
            .coordinator(MockCoordinator::Group(g.clone()), node)
            .expect("set coordinator");
    }
    let admin = client(&bootstrap);

    // Group i commits offset 10*i + p for partitions 0 and 1, at its own coordinator.
    for (i, g) in groups.iter().enumerate() {
        let base = 10 * i64::try_from(i).expect("small");
        let altered = admin
            .alter_consumer_group_offsets(
                g,
                &[
                    (topic.clone(), 0, OffsetAndMetadata::new(base)),
                    (
                        topic.clone(),
                        1,
                        OffsetAndMetadata::new(base + 1).metadata("m"),
                    ),
                ],
            )
            .await
            .expect("offset commit");
        for (tp, r) in altered {
            r.unwrap_or_else(|e| panic!("{g} {tp:?}: {e}"));
        }
    }
    for node in 1..=3 {
        assert_eq!(
            admin.transport().requests_sent(node, ApiKey::OffsetCommit),
            1,
            "broker {node} coordinates one group"
        );
    }

    // One call reads all three groups, each from its coordinator (the mock speaks OffsetFetch
    // v6 at most: one request per group).
    let specs: Vec<ListGroupOffsets> = groups
        .iter()
        .map(|g| {
            ListGroupOffsets::partitions(
                g.as_str(),
                [
                    (topic.as_str(), 1),
                    (topic.as_str(), 0),
                    (topic.as_str(), 2),
                ],
            )
        })
        .collect();
    let read = admin
        .list_consumer_group_offsets(&specs, false)
        .await
        .expect("offset fetch");
    for (i, (g, r)) in read.iter().enumerate() {
        assert_eq!(*g, groups[i]);
        let base = 10 * i64::try_from(i).expect("small");
        let got: Vec<((String, i32), Option<i64>)> = r
            .as_ref()
            .expect("group read")
            .iter()
            .map(|(tp, o)| {
                (
                    tp.clone(),
                    o.as_ref()
                        .expect("partition read")
                        .as_ref()
                        .map(|o| o.offset),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (tp(&topic, 1), Some(base + 1)),
                (tp(&topic, 0), Some(base)),
                (tp(&topic, 2), None)
            ]
        );
        let p1 = r.as_ref().expect("group read")[0]
            .1
            .as_ref()
            .expect("p1 read")
            .as_ref()
            .expect("p1 committed");
        assert_eq!(p1.metadata.as_deref(), Some("m"), "commit metadata kept");
    }
    for node in 1..=3 {
        assert_eq!(
            admin.transport().requests_sent(node, ApiKey::OffsetFetch),
            1,
            "broker {node}"
        );
    }
    // require_stable needs OffsetFetch v7; the mock has v6.
    match admin.list_consumer_group_offsets(&specs, true).await {
        Err(Error::UnsupportedVersion { api, ours, .. }) => {
            assert_eq!(api, ApiKey::OffsetFetch);
            assert_eq!(ours.min, 7);
        }
        other => panic!("require_stable on v6: {other:?}"),
    }
}

#[tokio::test]
async fn apis_the_mock_lacks_fail_with_a_typed_unsupported_version_error() {
    let cluster = mock_cluster(3);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("admin-mock-unsupported");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let admin = client(&bootstrap);
    fn api_of<T: std::fmt::Debug>(r: kafkit::Result<T>) -> ApiKey {
        match r {
            Err(Error::UnsupportedVersion { api, .. }) => api,
            other => panic!("expected UnsupportedVersion, got {other:?}"),
        }
    }
    assert_eq!(
        api_of(admin.list_groups(&ListGroupsOptions::new()).await),
        ApiKey::ListGroups
    );
    assert_eq!(
        api_of(admin.describe_consumer_groups(&["g"], false).await),
        ApiKey::DescribeGroups
    );
    assert_eq!(
        api_of(admin.delete_consumer_groups(&["g"]).await),
        ApiKey::DeleteGroups
    );
    assert_eq!(
        api_of(
            admin
                .delete_consumer_group_offsets("g", &[tp(&topic, 0)])
                .await
        ),
        ApiKey::OffsetDelete
    );
    assert_eq!(
        api_of(admin.delete_records(&[(topic.as_str(), 0, 0)]).await),
        ApiKey::DeleteRecords
    );
    assert_eq!(
        api_of(admin.describe_producers(&[(topic.as_str(), 0)]).await),
        ApiKey::DescribeProducers
    );
    assert_eq!(
        api_of(admin.describe_transactions(&["t"]).await),
        ApiKey::DescribeTransactions
    );
    assert_eq!(
        api_of(
            admin
                .list_transactions(&ListTransactionsOptions::new())
                .await
        ),
        ApiKey::ListTransactions
    );
}
