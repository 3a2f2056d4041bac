//! The admin [`Client`] against Apache Kafka 4.4 (one KRaft node, node id 1): a round trip with
//! a visible effect for each operation tansu does not offer (`admin_tansu` asserts the typed
//! unsupported-version error for those), and `validate_only` where tansu ignores it.
//!
//! Kafka applies what the controller accepted through its metadata log: the broker that
//! answers the next DescribeConfigs, DescribeClientQuotas or Metadata request may not have
//! read it yet. The tests poll in a bounded loop ([`eventually`]) until the change shows.
//! "Nothing changed" after a `validate_only` request is shown the same way: a real change made
//! after it is awaited, and since the log is applied in order, a change the validation had
//! made would show by then.
//!
//! What this rig's Kafka answers (found by running it):
//! - no authorizer is configured, so CreateAcls, DescribeAcls and DeleteAcls are answered
//!   SECURITY_DISABLED (per binding, at the top, per filter);
//! - on one node, ElectLeaders for the preferred replica answers ELECTION_NOT_NEEDED per
//!   partition, and a reassignment to the partition's own replica is accepted and finishes at
//!   once (ListPartitionReassignments lists nothing in progress).
//!
//! Each test makes its own topics, client ids and users, so the tests run in parallel beside the
//! other Kafka modules. None changes a broker-wide setting.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use integration_tests::{create_topic, dial, kafka, unique_topic};
use kafkit::admin::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
    AlterConfigOp, ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilterComponent,
    ConfigResource, ConfigSource, DescribeConfigsOptions, ElectionType, FeatureUpdate,
    FeatureUpgradeType, NewPartitions, NewTopic, PatternType, ResourcePattern, ResourceType,
    ScramMechanism, UserScramCredentialAlteration,
};
use kafkit::{Client, Error, ErrorCode, ProducerRecord, Transport, Writer};

/// The rig's only node id (`node.id` in xtask's `server.properties`).
const KAFKA_NODE: i32 = 1;

/// How long a change accepted by the controller may take to show on the broker.
const SETTLE: Duration = Duration::from_secs(20);

fn transport() -> Transport {
    Transport::builder([kafka()])
        .default_api_timeout(Duration::from_secs(15))
        .build()
        .expect("transport")
}

fn admin() -> Client {
    Client::new(transport()).with_timeout(Duration::from_secs(10))
}

/// Calls `probe` until it returns `Some`, at most [`SETTLE`]; panics naming `what` with the
/// last value seen otherwise.
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(last) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not within {SETTLE:?}; last seen: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Asserts `r` is the broker's typed `expected` code (not an error made up by the client).
fn assert_broker_code<T: std::fmt::Debug>(r: &Result<T, Error>, expected: ErrorCode) {
    match r {
        Err(Error::Broker { code, .. }) if *code == expected => {}
        other => panic!("expected the broker's {}, got {other:?}", expected.name()),
    }
}

/// A new topic of `partitions` partitions, led and ready on the broker.
async fn topic(prefix: &str, partitions: i32) -> String {
    let name = unique_topic(prefix);
    create_topic(&kafka(), &name, partitions).await;
    name
}

/// The partition count of `name` as a fresh Metadata request describes it.
async fn partition_count(admin: &Client, name: &str) -> Result<usize, String> {
    let described = admin
        .describe_topics(&[name], false)
        .await
        .map_err(|e| e.to_string())?;
    match &described[0].1 {
        Ok(t) => Ok(t.partitions.len()),
        Err(e) => Err(e.to_string()),
    }
}

/// The configs set on topic `name` itself (source `DynamicTopicConfig`), name to value.
async fn topic_overrides(admin: &Client, name: &str) -> Result<BTreeMap<String, String>, String> {
    let described = admin
        .describe_configs(
            &[ConfigResource::topic(name)],
            DescribeConfigsOptions::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
    let (_, entries) = described.into_iter().next().ok_or("no resource")?;
    let entries = entries.map_err(|e| e.to_string())?;
    Ok(entries
        .into_iter()
        .filter(|e| e.source == ConfigSource::DynamicTopicConfig)
        .map(|e| (e.name, e.value.unwrap_or_default()))
        .collect())
}

/// Waits until topic `name`'s own configs are exactly `want`.
async fn overrides_become(admin: &Client, name: &str, want: &[(&str, &str)]) {
    let want: BTreeMap<String, String> = want
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    eventually(&format!("{name}'s configs become {want:?}"), || async {
        let got = topic_overrides(admin, name).await?;
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
}

/// CreatePartitions (KIP-195): a `validate_only` request is accepted and leaves the count as it
/// was; the real one grows the topic, which Metadata then shows; shrinking is refused
/// INVALID_PARTITIONS and an unknown topic UNKNOWN_TOPIC_OR_PARTITION, per topic.
#[tokio::test]
async fn create_partitions_grows_a_topic_and_validate_only_changes_nothing() {
    let admin = admin();
    let name = topic("admin-k-grow", 1).await;
    let other = topic("admin-k-grow-marker", 1).await;

    let checked = admin
        .create_partitions(&[(&name, NewPartitions::increase_to(3))], true)
        .await
        .expect("CreatePartitions answered");
    assert_eq!(checked[0].0, name);
    assert!(checked[0].1.is_ok(), "{:?}", checked[0].1);
    // A real change after the validation: once it shows, the validation would have too.
    let grown = admin
        .create_partitions(&[(&other, NewPartitions::increase_to(2))], false)
        .await
        .expect("CreatePartitions answered");
    assert!(grown[0].1.is_ok(), "{:?}", grown[0].1);
    eventually("the marker topic has 2 partitions", || async {
        match partition_count(&admin, &other).await? {
            2 => Ok(()),
            n => Err(format!("{n} partitions")),
        }
    })
    .await;
    assert_eq!(partition_count(&admin, &name).await, Ok(1), "validate_only");

    let missing = unique_topic("admin-k-grow-missing");
    let grown = admin
        .create_partitions(
            &[
                (&missing, NewPartitions::increase_to(2)),
                (&name, NewPartitions::increase_to(3)),
            ],
            false,
        )
        .await
        .expect("CreatePartitions answered");
    assert_eq!(
        (grown[0].0.as_str(), grown[1].0.as_str()),
        (&*missing, &*name)
    );
    assert_broker_code(&grown[0].1, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    assert!(grown[1].1.is_ok(), "{:?}", grown[1].1);
    eventually("the topic has 3 partitions", || async {
        match partition_count(&admin, &name).await? {
            3 => Ok(()),
            n => Err(format!("{n} partitions")),
        }
    })
    .await;
    let described = admin
        .describe_topics(&[&name], false)
        .await
        .expect("describe");
    let t = described[0].1.as_ref().expect("described");
    assert_eq!(
        t.partitions.iter().map(|p| p.partition).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    for p in &t.partitions {
        assert_eq!(p.replicas, vec![KAFKA_NODE], "{p:?}");
    }

    let shrunk = admin
        .create_partitions(&[(&name, NewPartitions::increase_to(2))], false)
        .await
        .expect("CreatePartitions answered");
    assert_broker_code(&shrunk[0].1, ErrorCode::INVALID_PARTITIONS);
    assert_eq!(partition_count(&admin, &name).await, Ok(3));
}

/// AlterConfigs (the legacy API) replaces a topic's whole set of configs: a `validate_only`
/// request changes nothing, the real one leaves only what it names (the config set at
/// creation is gone), and a value Kafka cannot parse is refused INVALID_CONFIG for its topic.
#[tokio::test]
async fn alter_configs_replaces_the_topic_configs_and_validate_only_changes_nothing() {
    let admin = admin();
    let name = unique_topic("admin-k-alter");
    let created = admin
        .create_topics(
            &[NewTopic::new(&name, 1, 1).config("cleanup.policy", "compact")],
            false,
        )
        .await
        .expect("CreateTopics answered");
    assert!(created[0].1.is_ok(), "{:?}", created[0].1);
    overrides_become(&admin, &name, &[("cleanup.policy", "compact")]).await;

    let resource = ConfigResource::topic(&name);
    let checked = admin
        .alter_configs(
            &[(
                resource.clone(),
                vec![("retention.ms".into(), "1000".into())],
            )],
            true,
        )
        .await
        .expect("AlterConfigs answered");
    assert_eq!(checked[0].0, resource);
    assert!(checked[0].1.is_ok(), "{:?}", checked[0].1);
    // A real change after it: once it shows, the validated one would have shown too.
    let marked = admin
        .incremental_alter_configs(
            &[(
                resource.clone(),
                vec![AlterConfigOp::set("segment.ms", "3600000")],
            )],
            false,
        )
        .await
        .expect("IncrementalAlterConfigs answered");
    assert!(marked[0].1.is_ok(), "{:?}", marked[0].1);
    overrides_become(
        &admin,
        &name,
        &[("cleanup.policy", "compact"), ("segment.ms", "3600000")],
    )
    .await;

    let missing = ConfigResource::topic(unique_topic("admin-k-alter-missing"));
    let altered = admin
        .alter_configs(
            &[
                (
                    resource.clone(),
                    vec![("retention.ms".into(), "7200000".into())],
                ),
                (missing.clone(), vec![("retention.ms".into(), "1".into())]),
            ],
            false,
        )
        .await
        .expect("AlterConfigs answered");
    assert_eq!((&altered[0].0, &altered[1].0), (&resource, &missing));
    assert!(altered[0].1.is_ok(), "{:?}", altered[0].1);
    assert_broker_code(&altered[1].1, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    overrides_become(&admin, &name, &[("retention.ms", "7200000")]).await;

    let refused = admin
        .alter_configs(
            &[(
                resource.clone(),
                vec![("retention.ms".into(), "not-a-number".into())],
            )],
            false,
        )
        .await
        .expect("AlterConfigs answered");
    assert_broker_code(&refused[0].1, ErrorCode::INVALID_CONFIG);
    assert_eq!(
        topic_overrides(&admin, &name).await,
        Ok([("retention.ms".to_owned(), "7200000".to_owned())].into())
    );
}

/// IncrementalAlterConfigs (KIP-339) with `validate_only` (which tansu ignores): nothing
/// changes; then set, append, subtract and delete, each read back with DescribeConfigs.
#[tokio::test]
async fn incremental_alter_configs_validate_only_then_each_op_read_back() {
    let admin = admin();
    let name = topic("admin-k-incr", 1).await;
    let resource = ConfigResource::topic(&name);
    assert_eq!(topic_overrides(&admin, &name).await, Ok(BTreeMap::new()));

    let checked = admin
        .incremental_alter_configs(
            &[(
                resource.clone(),
                vec![AlterConfigOp::set("retention.ms", "1000")],
            )],
            true,
        )
        .await
        .expect("IncrementalAlterConfigs answered");
    assert!(checked[0].1.is_ok(), "{:?}", checked[0].1);
    let set = admin
        .incremental_alter_configs(
            &[(
                resource.clone(),
                vec![
                    AlterConfigOp::set("segment.ms", "3600000"),
                    AlterConfigOp::append("cleanup.policy", "compact"),
                ],
            )],
            false,
        )
        .await
        .expect("IncrementalAlterConfigs answered");
    assert!(set[0].1.is_ok(), "{:?}", set[0].1);
    // The default `delete` and the appended `compact`; no retention.ms from the validation.
    overrides_become(
        &admin,
        &name,
        &[
            ("cleanup.policy", "delete,compact"),
            ("segment.ms", "3600000"),
        ],
    )
    .await;

    let changed = admin
        .incremental_alter_configs(
            &[(
                resource.clone(),
                vec![
                    AlterConfigOp::delete("segment.ms"),
                    AlterConfigOp::subtract("cleanup.policy", "delete"),
                ],
            )],
            false,
        )
        .await
        .expect("IncrementalAlterConfigs answered");
    assert!(changed[0].1.is_ok(), "{:?}", changed[0].1);
    overrides_become(&admin, &name, &[("cleanup.policy", "compact")]).await;

    // An unknown config name is refused for its resource, and nothing of the request applies.
    let refused = admin
        .incremental_alter_configs(
            &[(
                resource.clone(),
                vec![
                    AlterConfigOp::set("retention.ms", "5000"),
                    AlterConfigOp::set("no.such.config", "1"),
                ],
            )],
            false,
        )
        .await
        .expect("IncrementalAlterConfigs answered");
    assert_broker_code(&refused[0].1, ErrorCode::INVALID_CONFIG);
    assert_eq!(
        topic_overrides(&admin, &name).await,
        Ok([("cleanup.policy".to_owned(), "compact".to_owned())].into())
    );
}

/// DescribeLogDirs (KIP-113): the node's two log dirs list the topic's partitions (each in one), the one
/// written to with a size that grows with what was written.
#[tokio::test]
async fn describe_log_dirs_lists_the_partition_with_its_size() {
    let admin = admin();
    let name = topic("admin-k-logdirs", 2).await;
    let writer = Writer::builder(transport()).build().expect("writer");
    let records = (0..20)
        .map(|i| {
            ProducerRecord::new(&name, format!("value-{i:04}-{}", "x".repeat(100))).partition(0)
        })
        .collect();
    writer.write(records).await.expect("written");
    writer.close(Duration::from_secs(10)).await.expect("close");

    for asked in [None, Some(&[KAFKA_NODE][..])] {
        let described = admin
            .describe_log_dirs(asked)
            .await
            .expect("DescribeLogDirs answered");
        assert_eq!(
            described.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            vec![KAFKA_NODE],
            "asked {asked:?}"
        );
        let dirs = described[0].1.as_ref().expect("log dirs");
        // The rig's node has two log dirs (`data`, `data2`); each partition is in one of them.
        assert_eq!(dirs.len(), 2, "{dirs:?}");
        for dir in dirs {
            assert!(dir.error_code.is_ok(), "{dir:?}");
            assert!(!dir.path.is_empty());
            // KIP-827: the volume's total and usable bytes.
            let total = dir.total_bytes.expect("total bytes");
            let usable = dir.usable_bytes.expect("usable bytes");
            assert!(total > 0 && usable <= total, "{total} / {usable}");
        }
        let size = |p: i32| {
            let found: Vec<_> = dirs
                .iter()
                .flat_map(|d| d.replicas.iter())
                .filter(|r| r.topic == name && r.partition == p)
                .map(|r| (r.size, r.is_future))
                .collect();
            assert_eq!(found.len(), 1, "partition {p} is in one dir: {dirs:?}");
            found[0]
        };
        let (written, future) = size(0);
        assert!(!future);
        // 20 records of over 100 bytes each, in one or more batches.
        assert!(written > 2000, "partition 0 holds {written} bytes");
        assert_eq!(size(1), (0, false), "partition 1 is empty");
    }
    let missing = admin.describe_log_dirs(Some(&[KAFKA_NODE, 99])).await;
    let missing = missing.expect("one broker answered");
    assert!(missing[0].1.is_ok(), "{:?}", missing[0].1);
    assert_eq!(missing[1].0, 99);
    assert!(missing[1].1.is_err(), "no broker 99: {:?}", missing[1].1);
}

/// ElectLeaders (KIP-460) for the preferred replica on one node: each partition already has its
/// preferred leader, answered ELECTION_NOT_NEEDED (typed, per partition, in the caller's
/// order); a partition of a missing topic UNKNOWN_TOPIC_OR_PARTITION.
#[tokio::test]
async fn preferred_election_on_one_node_is_not_needed() {
    let admin = admin();
    let name = topic("admin-k-elect", 2).await;
    let missing = unique_topic("admin-k-elect-missing");
    let elected = admin
        .elect_leaders(
            ElectionType::Preferred,
            Some(&[(&name, 1), (&missing, 0), (&name, 0)]),
        )
        .await
        .expect("ElectLeaders answered");
    assert_eq!(
        elected.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        vec![(name.clone(), 1), (missing.clone(), 0), (name.clone(), 0)]
    );
    assert_broker_code(&elected[0].1, ErrorCode::ELECTION_NOT_NEEDED);
    assert_broker_code(&elected[1].1, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION);
    assert_broker_code(&elected[2].1, ErrorCode::ELECTION_NOT_NEEDED);
    let described = admin
        .describe_topics(&[&name], false)
        .await
        .expect("describe");
    for p in &described[0].1.as_ref().expect("described").partitions {
        assert_eq!(p.leader_id, KAFKA_NODE, "{p:?}");
    }
}

/// AlterPartitionReassignments / ListPartitionReassignments (KIP-455) on one node: moving a
/// partition to its own replica is accepted and done at once (nothing listed in progress), a
/// replica on a broker that does not exist is refused, cancelling when nothing moves is
/// NO_REASSIGNMENT_IN_PROGRESS.
#[tokio::test]
async fn reassignments_on_one_node() {
    let admin = admin();
    let name = topic("admin-k-reassign", 2).await;
    let moved = admin
        .alter_partition_reassignments(&[
            (&name, 0, Some(vec![KAFKA_NODE])),
            (&name, 1, Some(vec![99])),
        ])
        .await
        .expect("AlterPartitionReassignments answered");
    assert_eq!(
        moved.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        vec![(name.clone(), 0), (name.clone(), 1)]
    );
    assert!(moved[0].1.is_ok(), "{:?}", moved[0].1);
    assert_broker_code(&moved[1].1, ErrorCode::INVALID_REPLICA_ASSIGNMENT);

    let listed = admin
        .list_partition_reassignments(Some(&[(&name, 0), (&name, 1)]))
        .await
        .expect("ListPartitionReassignments answered");
    assert_eq!(listed, vec![], "nothing in progress");
    let all = admin
        .list_partition_reassignments(None)
        .await
        .expect("ListPartitionReassignments answered");
    assert!(all.iter().all(|r| r.topic != name), "{all:?}");

    let cancelled = admin
        .alter_partition_reassignments(&[(&name, 0, None)])
        .await
        .expect("AlterPartitionReassignments answered");
    assert_broker_code(&cancelled[0].1, ErrorCode::NO_REASSIGNMENT_IN_PROGRESS);

    let described = admin
        .describe_topics(&[&name], false)
        .await
        .expect("describe");
    for p in &described[0].1.as_ref().expect("described").partitions {
        assert_eq!(p.replicas, vec![KAFKA_NODE], "{p:?}");
    }
}

/// The quotas of one client id, as DescribeClientQuotas reads them.
async fn quotas_of(admin: &Client, client_id: &str) -> Result<BTreeMap<String, f64>, String> {
    let found = admin
        .describe_client_quotas(
            &[ClientQuotaFilterComponent::exact("client-id", client_id)],
            true,
        )
        .await
        .map_err(|e| e.to_string())?;
    match found.as_slice() {
        [] => Ok(BTreeMap::new()),
        [(entity, quotas)] if *entity == ClientQuotaEntity::client_id(Some(client_id)) => {
            Ok(quotas.clone())
        }
        other => Err(format!("unexpected entities {other:?}")),
    }
}

async fn quotas_become(admin: &Client, client_id: &str, want: &[(&str, f64)]) {
    let want: BTreeMap<String, f64> = want.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect();
    eventually(&format!("{client_id}'s quotas become {want:?}"), || async {
        let got = quotas_of(admin, client_id).await?;
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
}

/// DescribeClientQuotas / AlterClientQuotas (KIP-546): a quota set for a client id is read
/// back; `validate_only` changes nothing; one removed leaves the other; an unknown quota key is
/// refused; removing the last leaves the client id without quotas.
#[tokio::test]
async fn client_quotas_set_read_back_and_removed() {
    let admin = admin();
    let client_id = unique_topic("admin-k-quota-client");
    let marker = unique_topic("admin-k-quota-marker");
    let entity = ClientQuotaEntity::client_id(Some(&client_id));
    assert_eq!(quotas_of(&admin, &client_id).await, Ok(BTreeMap::new()));

    let checked = admin
        .alter_client_quotas(
            &[ClientQuotaAlteration::new(entity.clone()).set("producer_byte_rate", 1.0)],
            true,
        )
        .await
        .expect("AlterClientQuotas answered");
    assert_eq!(checked[0].0, entity);
    assert!(checked[0].1.is_ok(), "{:?}", checked[0].1);
    // A real change after it (to another client id): once it shows, the validated one would too.
    let marked = admin
        .alter_client_quotas(
            &[
                ClientQuotaAlteration::new(ClientQuotaEntity::client_id(Some(&marker)))
                    .set("request_percentage", 50.0),
            ],
            false,
        )
        .await
        .expect("AlterClientQuotas answered");
    assert!(marked[0].1.is_ok(), "{:?}", marked[0].1);
    quotas_become(&admin, &marker, &[("request_percentage", 50.0)]).await;
    assert_eq!(quotas_of(&admin, &client_id).await, Ok(BTreeMap::new()));

    let set = admin
        .alter_client_quotas(
            &[ClientQuotaAlteration::new(entity.clone())
                .set("producer_byte_rate", 1024.0)
                .set("consumer_byte_rate", 2048.0)],
            false,
        )
        .await
        .expect("AlterClientQuotas answered");
    assert!(set[0].1.is_ok(), "{:?}", set[0].1);
    quotas_become(
        &admin,
        &client_id,
        &[
            ("consumer_byte_rate", 2048.0),
            ("producer_byte_rate", 1024.0),
        ],
    )
    .await;

    let refused = admin
        .alter_client_quotas(
            &[ClientQuotaAlteration::new(entity.clone()).set("no_such_quota", 1.0)],
            false,
        )
        .await
        .expect("AlterClientQuotas answered");
    assert_broker_code(&refused[0].1, ErrorCode::INVALID_REQUEST);

    let removed = admin
        .alter_client_quotas(
            &[ClientQuotaAlteration::new(entity.clone()).remove("producer_byte_rate")],
            false,
        )
        .await
        .expect("AlterClientQuotas answered");
    assert!(removed[0].1.is_ok(), "{:?}", removed[0].1);
    quotas_become(&admin, &client_id, &[("consumer_byte_rate", 2048.0)]).await;

    let removed = admin
        .alter_client_quotas(
            &[
                ClientQuotaAlteration::new(entity.clone()).remove("consumer_byte_rate"),
                ClientQuotaAlteration::new(ClientQuotaEntity::client_id(Some(&marker)))
                    .remove("request_percentage"),
            ],
            false,
        )
        .await
        .expect("AlterClientQuotas answered");
    assert!(removed.iter().all(|(_, r)| r.is_ok()), "{removed:?}");
    quotas_become(&admin, &client_id, &[]).await;
    quotas_become(&admin, &marker, &[]).await;
}

/// UpdateFeatures (KIP-584) with `validate_only`: lowering a finalized feature with the
/// `Upgrade` type is refused INVALID_UPDATE_VERSION (typed), and the finalized levels read back
/// through ApiVersions are unchanged; asking for the level it already has validates.
#[tokio::test]
async fn update_features_validate_only_refuses_a_downgrade_and_changes_nothing() {
    // The finalized features are compared: no test changes transaction.version meanwhile.
    let _tv = integration_tests::kafka_transaction_version(
        integration_tests::KAFKA_TRANSACTION_VERSION_LEVEL,
    )
    .await;
    let admin = admin();
    let before = admin.describe_features().await.expect("ApiVersions");
    let mv = before
        .finalized
        .iter()
        .find(|f| f.name == "metadata.version")
        .cloned()
        .expect("metadata.version is finalized on KRaft");
    assert!(mv.max_version_level > 1, "{mv:?}");
    assert!(
        before
            .supported
            .iter()
            .any(|s| s.name == "metadata.version" && s.max_version >= mv.max_version_level),
        "{before:?}"
    );

    let refused = admin
        .update_features(
            &[(
                "metadata.version",
                FeatureUpdate::new(mv.max_version_level - 1, FeatureUpgradeType::Upgrade),
            )],
            true,
        )
        .await;
    let per_feature = match refused {
        Ok(results) => {
            assert_eq!(results.len(), 1, "{results:?}");
            results.into_iter().next().map(|(_, r)| r).expect("one")
        }
        Err(e) => Err(e),
    };
    assert_broker_code(&per_feature, ErrorCode::INVALID_UPDATE_VERSION);

    let same = admin
        .update_features(
            &[(
                "metadata.version",
                FeatureUpdate::new(mv.max_version_level, FeatureUpgradeType::Upgrade),
            )],
            true,
        )
        .await
        .expect("UpdateFeatures answered");
    assert_eq!(same[0].0, "metadata.version");
    assert!(same[0].1.is_ok(), "{:?}", same[0].1);

    let after = admin.describe_features().await.expect("ApiVersions");
    assert_eq!(after.finalized, before.finalized);
}

/// DescribeCluster (KIP-700): the cluster id Metadata reports, the one node as controller and
/// as the only broker at the bootstrap address; with authorized operations asked for, Kafka
/// without an authorizer allows every cluster operation.
#[tokio::test]
async fn describe_cluster_names_the_one_node() {
    let admin = admin();
    let conn = dial(&kafka(), "admin-k-cluster").await;
    let md = conn.metadata(Some(&[])).await.expect("metadata");
    let cluster = admin
        .describe_cluster(false)
        .await
        .expect("DescribeCluster");
    assert!(cluster.cluster_id.is_some());
    assert_eq!(cluster.cluster_id, md.cluster_id);
    assert_eq!(cluster.controller_id, Some(KAFKA_NODE));
    assert_eq!(
        cluster
            .brokers
            .iter()
            .map(|b| (b.node_id, b.addr()))
            .collect::<Vec<_>>(),
        vec![(KAFKA_NODE, kafka())]
    );
    assert_eq!(cluster.authorized_operations, None, "not asked for");

    let with_ops = admin.describe_cluster(true).await.expect("DescribeCluster");
    let ops = with_ops.authorized_operations.expect("asked for");
    for op in [
        AclOperation::Describe,
        AclOperation::Alter,
        AclOperation::Create,
        AclOperation::ClusterAction,
    ] {
        assert!(ops.contains(&op), "{op:?} in {ops:?}");
    }
}

/// CreateAcls, DescribeAcls, DeleteAcls: the rig's Kafka has no authorizer, and answers each
/// with SECURITY_DISABLED, typed (per binding, top-level, per filter).
#[tokio::test]
async fn acls_without_an_authorizer_are_security_disabled() {
    let admin = admin();
    let principal = format!("User:{}", unique_topic("admin-k-alice"));
    let binding = AclBinding::new(
        ResourcePattern::new(
            ResourceType::Topic,
            unique_topic("admin-k-acl"),
            PatternType::Literal,
        ),
        AccessControlEntry::new(
            &principal,
            "*",
            AclOperation::Read,
            AclPermissionType::Allow,
        ),
    );
    let created = admin
        .create_acls(std::slice::from_ref(&binding))
        .await
        .expect("CreateAcls answered");
    assert_eq!(created[0].0, binding);
    assert_broker_code(&created[0].1, ErrorCode::SECURITY_DISABLED);

    let described = admin
        .describe_acls(&AclBindingFilter::any().principal(&principal))
        .await;
    assert_broker_code(&described, ErrorCode::SECURITY_DISABLED);

    let deleted = admin
        .delete_acls(&[binding.to_filter()])
        .await
        .expect("DeleteAcls answered");
    assert_eq!(deleted[0].0, binding.to_filter());
    assert_broker_code(&deleted[0].1, ErrorCode::SECURITY_DISABLED);
}

/// The SCRAM mechanisms of `user` and their iterations, as DescribeUserScramCredentials reads
/// them (`Err` with the code when the user has none).
async fn scram_of(admin: &Client, user: &str) -> Result<Vec<(ScramMechanism, i32)>, String> {
    let described = admin
        .describe_user_scram_credentials(Some(&[user]))
        .await
        .map_err(|e| e.to_string())?;
    let (name, creds) = described.into_iter().next().ok_or("no user")?;
    if name != user {
        return Err(format!("answered for {name}"));
    }
    match creds {
        Ok(c) => {
            let mut out: Vec<(ScramMechanism, i32)> =
                c.into_iter().map(|i| (i.mechanism, i.iterations)).collect();
            out.sort_by_key(|(m, _)| m.code());
            Ok(out)
        }
        Err(e) => Err(format!("{:?}", e.error_code())),
    }
}

/// Describe/AlterUserScramCredentials (KIP-554): both mechanisms of one user in one request are
/// refused DUPLICATE_RESOURCE; a user given both, one request each, is described with them and
/// their iterations; one deleted leaves the other; the last deleted
/// leaves the user unknown (RESOURCE_NOT_FOUND); deleting what does not exist is refused.
#[tokio::test]
async fn scram_credentials_created_described_and_deleted() {
    let admin = admin();
    let user = unique_topic("admin-k-scram");
    let nobody = unique_topic("admin-k-scram-nobody");
    let described = admin
        .describe_user_scram_credentials(Some(&[&nobody]))
        .await
        .expect("DescribeUserScramCredentials answered");
    assert_eq!(described[0].0, nobody);
    assert_broker_code(&described[0].1, ErrorCode::RESOURCE_NOT_FOUND);

    // Two alterations of one user in one request are one too many for Kafka's controller,
    // whatever their mechanisms (`ScramControlManager.alterCredentials` keys them by user):
    // DUPLICATE_RESOURCE for the user.
    let sha256 = UserScramCredentialAlteration::upsertion(
        &user,
        ScramMechanism::ScramSha256,
        8192,
        "secret-password",
    );
    let sha512 = UserScramCredentialAlteration::upsertion(
        &user,
        ScramMechanism::ScramSha512,
        4096,
        "another-password",
    );
    let altered = admin
        .alter_user_scram_credentials(&[sha256.clone(), sha512.clone()])
        .await
        .expect("AlterUserScramCredentials answered");
    assert_eq!(altered.len(), 1, "one result per user: {altered:?}");
    assert_eq!(altered[0].0, user);
    assert_broker_code(&altered[0].1, ErrorCode::DUPLICATE_RESOURCE);

    // One request per mechanism.
    for alteration in [sha256, sha512] {
        let altered = admin
            .alter_user_scram_credentials(&[alteration])
            .await
            .expect("AlterUserScramCredentials answered");
        assert_eq!(altered[0].0, user);
        assert!(altered[0].1.is_ok(), "{:?}", altered[0].1);
    }
    let both = vec![
        (ScramMechanism::ScramSha256, 8192),
        (ScramMechanism::ScramSha512, 4096),
    ];
    eventually("both credentials described", || async {
        match scram_of(&admin, &user).await {
            Ok(c) if c == both => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    let altered = admin
        .alter_user_scram_credentials(&[
            UserScramCredentialAlteration::deletion(&user, ScramMechanism::ScramSha256),
            UserScramCredentialAlteration::deletion(&nobody, ScramMechanism::ScramSha512),
        ])
        .await
        .expect("AlterUserScramCredentials answered");
    assert_eq!(
        altered.iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>(),
        vec![user.as_str(), nobody.as_str()]
    );
    assert!(altered[0].1.is_ok(), "{:?}", altered[0].1);
    assert_broker_code(&altered[1].1, ErrorCode::RESOURCE_NOT_FOUND);
    eventually("one credential left", || async {
        match scram_of(&admin, &user).await {
            Ok(c) if c == [(ScramMechanism::ScramSha512, 4096)] => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    let altered = admin
        .alter_user_scram_credentials(&[UserScramCredentialAlteration::deletion(
            &user,
            ScramMechanism::ScramSha512,
        )])
        .await
        .expect("AlterUserScramCredentials answered");
    assert!(altered[0].1.is_ok(), "{:?}", altered[0].1);
    eventually("no credential left", || async {
        match scram_of(&admin, &user).await {
            Err(e) if e == format!("{:?}", Some(ErrorCode::RESOURCE_NOT_FOUND)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}
