//! The admin [`Client`] against tansu (a real broker): a round trip with a visible effect for
//! every operation tansu offers, and for each operation it does not offer, the typed
//! unsupported-version error naming the API.
//!
//! tansu 0.6 offers (ApiVersions): CreateTopics, DeleteTopics, Metadata, DescribeConfigs,
//! IncrementalAlterConfigs, DescribeAcls, CreateAcls, ListPartitionReassignments,
//! DescribeUserScramCredentials, AlterUserScramCredentials, DescribeCluster, ApiVersions. It
//! does not offer CreatePartitions, AlterConfigs, DeleteAcls, DescribeClientQuotas,
//! AlterClientQuotas, AlterPartitionReassignments, ElectLeaders, DescribeLogDirs,
//! UpdateFeatures. Each test makes its own topics and users, so the tests run in parallel.
//!
//! What tansu 0.6 does with what it offers (found by running it):
//! - `validate_only` is ignored by CreateTopics and IncrementalAlterConfigs (the change is
//!   made), so it is covered by unit tests of the request only.
//! - CreateAcls and DescribeUserScramCredentials are answered with a null `results` array,
//!   which their schemas forbid: the client reports a typed decode error naming the field
//!   (never a panic), and the ACL / credential cannot be read back. DescribeAcls answers (with
//!   no bindings); AlterUserScramCredentials answers per user.
//! - ListPartitionReassignments lists every asked partition with its replicas and nothing
//!   being added or removed.

use std::time::Duration;

use integration_tests::{tansu, unique_topic};
use kafkit::admin::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
    AlterConfigOp, ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilterComponent,
    ConfigResource, DescribeConfigsOptions, ElectionType, FeatureUpdate, FeatureUpgradeType,
    NewPartitions, NewTopic, PatternType, ResourcePattern, ResourceType, ScramMechanism,
    UserScramCredentialAlteration,
};
use kafkit::{Client, Error, ErrorCode, Transport};
use kafkit_protocol::ApiKey;

/// tansu's only node id.
const TANSU_NODE: i32 = 111;

fn admin() -> Client {
    let transport = Transport::builder([tansu()])
        .default_api_timeout(Duration::from_secs(15))
        .build()
        .expect("transport");
    Client::new(transport).with_timeout(Duration::from_secs(10))
}

/// Asserts `result` is the typed unsupported-version error for `api`.
fn assert_unsupported<T: std::fmt::Debug>(result: Result<T, Error>, api: ApiKey) {
    match result {
        Err(Error::UnsupportedVersion {
            api: got, broker, ..
        }) => {
            assert_eq!(got, api);
            assert_eq!(broker, None, "tansu does not list {api:?}");
        }
        other => panic!("expected UnsupportedVersion for {api:?}, got {other:?}"),
    }
}

async fn create(admin: &Client, prefix: &str, partitions: i32) -> String {
    let name = unique_topic(prefix);
    let out = admin
        .create_topics(&[NewTopic::new(&name, partitions, 1)], false)
        .await
        .expect("CreateTopics answered");
    assert_eq!(out.len(), 1);
    out.into_iter()
        .next()
        .map(|(_, r)| r)
        .expect("one")
        .expect("topic created");
    name
}

#[tokio::test]
async fn create_list_describe_and_delete_topics() {
    let admin = admin();
    let a = unique_topic("admin-a");
    let b = unique_topic("admin-b");
    let out = admin
        .create_topics(
            &[
                NewTopic::new(&a, 3, 1).config("retention.ms", "3600000"),
                NewTopic::new(&b, 1, 1),
            ],
            false,
        )
        .await
        .expect("CreateTopics answered");
    assert_eq!(
        out.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        vec![a.as_str(), b.as_str()]
    );
    for (name, r) in &out {
        assert!(r.is_ok(), "{name}: {r:?}");
    }

    // Creating `a` again fails for `a` alone; a new topic in the same batch succeeds.
    let c = unique_topic("admin-c");
    let again = admin
        .create_topics(&[NewTopic::new(&a, 3, 1), NewTopic::new(&c, 2, 1)], false)
        .await
        .expect("CreateTopics answered");
    assert_eq!(
        again[0].1.as_ref().expect_err("a exists").error_code(),
        Some(ErrorCode::TOPIC_ALREADY_EXISTS)
    );
    assert!(again[1].1.is_ok(), "{:?}", again[1].1);

    let listed = admin.list_topics(false).await.expect("list topics");
    for name in [&a, &b, &c] {
        assert!(listed.iter().any(|t| &t.name == name), "{name} listed");
    }
    assert!(listed.windows(2).all(|w| w[0].name <= w[1].name), "sorted");

    let missing = unique_topic("admin-missing");
    let described = admin
        .describe_topics(&[&missing, &a, &c], false)
        .await
        .expect("describe");
    assert_eq!(described[0].0, missing);
    assert_eq!(
        described[0].1.as_ref().expect_err("missing").error_code(),
        Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
    let da = described[1].1.as_ref().expect("a described");
    assert_eq!(da.name, a);
    assert_eq!(
        da.partitions
            .iter()
            .map(|p| p.partition)
            .collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    for p in &da.partitions {
        assert_eq!(p.leader_id, TANSU_NODE);
        assert_eq!(p.replicas, vec![TANSU_NODE]);
        assert_eq!(p.isr, vec![TANSU_NODE]);
    }
    assert_eq!(described[2].1.as_ref().expect("c").partitions.len(), 2);

    let deleted = admin.delete_topics(&[&b, &missing]).await.expect("delete");
    assert!(deleted[0].1.is_ok(), "{:?}", deleted[0].1);
    assert_eq!(
        deleted[1].1.as_ref().expect_err("missing").error_code(),
        Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
    let after = admin.describe_topics(&[&b], false).await.expect("describe");
    assert_eq!(
        after[0].1.as_ref().expect_err("b deleted").error_code(),
        Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
}

#[tokio::test]
async fn delete_topics_by_id() {
    let admin = admin();
    let name = create(&admin, "admin-by-id", 1).await;
    let described = admin
        .describe_topics(&[&name], false)
        .await
        .expect("describe");
    let id = described[0].1.as_ref().expect("described").topic_id;
    assert!(!id.is_zero(), "tansu sends topic ids");
    let deleted = admin.delete_topics_by_id(&[id]).await.expect("delete");
    assert_eq!(deleted[0].0, id);
    assert!(deleted[0].1.is_ok(), "{:?}", deleted[0].1);
    let after = admin
        .describe_topics(&[&name], false)
        .await
        .expect("describe");
    assert!(after[0].1.is_err(), "deleted by id");
}

/// The values of `names` in the configs of topic `name`, as described now.
async fn topic_configs(admin: &Client, name: &str, names: &[&str]) -> Vec<Option<String>> {
    let described = admin
        .describe_configs(
            &[ConfigResource::topic(name)],
            DescribeConfigsOptions::default(),
        )
        .await
        .expect("DescribeConfigs answered");
    let entries = described
        .into_iter()
        .next()
        .map(|(_, r)| r)
        .expect("one resource")
        .expect("topic configs");
    names
        .iter()
        .map(|n| {
            entries
                .iter()
                .find(|e| e.name == *n)
                .and_then(|e| e.value.clone())
        })
        .collect()
}

#[tokio::test]
async fn topic_configs_set_append_delete_subtract_then_read_back() {
    let admin = admin();
    let name = unique_topic("admin-config");
    admin
        .create_topics(
            &[NewTopic::new(&name, 1, 1).config("cleanup.policy", "delete")],
            false,
        )
        .await
        .expect("CreateTopics answered")[0]
        .1
        .as_ref()
        .expect("created");
    let keys = ["retention.ms", "cleanup.policy"];
    assert_eq!(
        topic_configs(&admin, &name, &keys).await,
        vec![None, Some("delete".into())]
    );

    let resource = ConfigResource::topic(&name);
    let missing = ConfigResource::topic(unique_topic("admin-config-missing"));
    let altered = admin
        .incremental_alter_configs(
            &[(
                resource.clone(),
                vec![
                    AlterConfigOp::set("retention.ms", "123456"),
                    AlterConfigOp::append("cleanup.policy", "compact"),
                ],
            )],
            false,
        )
        .await
        .expect("IncrementalAlterConfigs answered");
    assert_eq!(altered[0].0, resource);
    assert!(altered[0].1.is_ok(), "{:?}", altered[0].1);
    assert_eq!(
        topic_configs(&admin, &name, &keys).await,
        vec![Some("123456".into()), Some("delete,compact".into())]
    );

    let altered = admin
        .incremental_alter_configs(
            &[
                (
                    missing.clone(),
                    vec![AlterConfigOp::set("retention.ms", "1")],
                ),
                (
                    resource.clone(),
                    vec![
                        AlterConfigOp::delete("retention.ms"),
                        AlterConfigOp::subtract("cleanup.policy", "delete"),
                    ],
                ),
            ],
            false,
        )
        .await
        .expect("IncrementalAlterConfigs answered");
    assert_eq!((&altered[0].0, &altered[1].0), (&missing, &resource));
    assert!(altered[1].1.is_ok(), "{:?}", altered[1].1);
    assert_eq!(
        topic_configs(&admin, &name, &keys).await,
        vec![None, Some("compact".into())]
    );
}

#[tokio::test]
async fn broker_configs_are_described_by_their_broker() {
    let admin = admin();
    let missing = ConfigResource::topic(unique_topic("admin-config-missing"));
    let described = admin
        .describe_configs(
            &[ConfigResource::broker(TANSU_NODE), missing.clone()],
            DescribeConfigsOptions::default(),
        )
        .await
        .expect("DescribeConfigs answered");
    assert_eq!(described[0].0, ConfigResource::broker(TANSU_NODE));
    assert!(described[0].1.is_ok(), "{:?}", described[0].1);
    assert_eq!(described[1].0, missing);

    // A broker resource is altered by its own broker (round_trip_to), a topic by any broker:
    // two requests, one merged answer in the caller's order.
    let topic = create(&admin, "admin-broker-config", 1).await;
    let altered = admin
        .incremental_alter_configs(
            &[
                (
                    ConfigResource::topic(&topic),
                    vec![AlterConfigOp::set("retention.ms", "4242")],
                ),
                (
                    ConfigResource::broker(TANSU_NODE),
                    vec![AlterConfigOp::set("log.retention.ms", "4242")],
                ),
            ],
            false,
        )
        .await
        .expect("IncrementalAlterConfigs answered");
    assert_eq!(altered[0].0, ConfigResource::topic(&topic));
    assert_eq!(altered[1].0, ConfigResource::broker(TANSU_NODE));
    assert!(altered.iter().all(|(_, r)| r.is_ok()), "{altered:?}");
    assert_eq!(
        topic_configs(&admin, &topic, &["retention.ms"]).await,
        vec![Some("4242".into())]
    );
}

/// Asserts `result` is the typed decode error tansu's null `results` array gives.
fn assert_null_results<T: std::fmt::Debug>(result: Result<T, Error>) {
    match result {
        Err(Error::Decode(e)) => assert!(e.to_string().contains("results"), "{e}"),
        other => panic!("expected a decode error for tansu's null results, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unreachable_broker_fails_only_its_own_config_resources() {
    // A short deadline: broker 99 is in no metadata, so its part fails after 1 s of retries.
    let transport = Transport::builder([tansu()])
        .default_api_timeout(Duration::from_secs(1))
        .build()
        .expect("transport");
    let admin = Client::new(transport);
    let topic = create(&admin, "admin-partial", 1).await;
    let altered = admin
        .incremental_alter_configs(
            &[
                (
                    ConfigResource::broker(99),
                    vec![AlterConfigOp::set("log.retention.ms", "1")],
                ),
                (
                    ConfigResource::topic(&topic),
                    vec![AlterConfigOp::set("retention.ms", "777")],
                ),
            ],
            false,
        )
        .await
        .expect("one part answered");
    assert_eq!(altered[0].0, ConfigResource::broker(99));
    match &altered[0].1 {
        Err(Error::DeadlineExceeded { last, .. }) => {
            assert!(
                matches!(**last, Error::UnknownBroker { node_id: 99 }),
                "{last:?}"
            )
        }
        other => panic!("expected the deadline for broker 99, got {other:?}"),
    }
    assert!(altered[1].1.is_ok(), "{:?}", altered[1].1);
    assert_eq!(
        topic_configs(&admin, &topic, &["retention.ms"]).await,
        vec![Some("777".into())]
    );

    // Described through the transport's split route: the same partial answer.
    let described = admin
        .describe_configs(
            &[ConfigResource::topic(&topic), ConfigResource::broker(99)],
            DescribeConfigsOptions::default(),
        )
        .await
        .expect("one part answered");
    let entries = described[0].1.as_ref().expect("topic configs");
    assert!(entries.iter().any(|e| e.name == "retention.ms"));
    assert_eq!(described[1].0, ConfigResource::broker(99));
    assert_eq!(
        described[1]
            .1
            .as_ref()
            .expect_err("no broker 99")
            .error_code(),
        Some(ErrorCode::BROKER_NOT_AVAILABLE)
    );
}

#[tokio::test]
async fn acls_on_tansu() {
    let admin = admin();
    let topic = unique_topic("admin-acl");
    let principal = format!("User:{}", unique_topic("alice"));
    let binding = AclBinding::new(
        ResourcePattern::new(ResourceType::Topic, &topic, PatternType::Literal),
        AccessControlEntry::new(
            &principal,
            "*",
            AclOperation::Read,
            AclPermissionType::Allow,
        ),
    );
    // DescribeAcls answers: nobody has ACLs for this principal.
    let found = admin
        .describe_acls(&AclBindingFilter::any().principal(&principal))
        .await
        .expect("DescribeAcls");
    assert_eq!(found, vec![]);
    // CreateAcls is answered with a null results array (see the file's doc).
    assert_null_results(admin.create_acls(std::slice::from_ref(&binding)).await);
    // DeleteAcls is not offered.
    assert_unsupported(
        admin.delete_acls(&[binding.to_filter()]).await,
        ApiKey::DeleteAcls,
    );
}

#[tokio::test]
async fn scram_credentials_on_tansu() {
    let admin = admin();
    let user = unique_topic("scram-user");
    let other = unique_topic("scram-nobody");
    let altered = admin
        .alter_user_scram_credentials(&[UserScramCredentialAlteration::upsertion(
            &user,
            ScramMechanism::ScramSha256,
            8192,
            "secret-password",
        )])
        .await
        .expect("AlterUserScramCredentials answered");
    assert_eq!(altered[0].0, user);
    assert!(altered[0].1.is_ok(), "{:?}", altered[0].1);

    // Another user's upsertion and this user's deletion, one request, one result per user.
    let altered = admin
        .alter_user_scram_credentials(&[
            UserScramCredentialAlteration::upsertion(
                &other,
                ScramMechanism::ScramSha512,
                4096,
                "other-password",
            ),
            UserScramCredentialAlteration::deletion(&user, ScramMechanism::ScramSha256),
        ])
        .await
        .expect("AlterUserScramCredentials answered");
    assert_eq!(
        altered.iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>(),
        vec![other.as_str(), user.as_str()]
    );
    assert!(altered[0].1.is_ok(), "{:?}", altered[0].1);
    assert!(altered[1].1.is_ok(), "{:?}", altered[1].1);
    // DescribeUserScramCredentials is answered with a null results array (see the file's doc).
    assert_null_results(
        admin
            .describe_user_scram_credentials(Some(&[&user, &other]))
            .await,
    );
}

#[tokio::test]
async fn cluster_features_and_reassignments() {
    let admin = admin();
    let cluster = admin
        .describe_cluster(false)
        .await
        .expect("DescribeCluster");
    assert_eq!(
        cluster
            .brokers
            .iter()
            .map(|b| b.node_id)
            .collect::<Vec<_>>(),
        vec![TANSU_NODE]
    );
    assert!(cluster.cluster_id.is_some());
    assert_eq!(cluster.controller_id, Some(TANSU_NODE));

    let features = admin.describe_features().await.expect("ApiVersions");
    // tansu finalizes no feature; what it sends is what we report.
    assert!(features.finalized.iter().all(|f| !f.name.is_empty()));

    let name = create(&admin, "admin-reassign", 1).await;
    let listed = admin
        .list_partition_reassignments(Some(&[(&name, 0)]))
        .await
        .expect("ListPartitionReassignments");
    // No reassignment is in progress: tansu lists the partition with its replica set and
    // nothing being added or removed.
    for r in &listed {
        assert_eq!((r.topic.as_str(), r.partition), (name.as_str(), 0));
        assert_eq!(r.replicas, vec![TANSU_NODE]);
        assert!(
            r.adding_replicas.is_empty() && r.removing_replicas.is_empty(),
            "{r:?}"
        );
    }
}

#[tokio::test]
async fn operations_tansu_lacks_name_the_api() {
    let admin = admin();
    let name = create(&admin, "admin-unsupported", 1).await;
    assert_unsupported(
        admin
            .create_partitions(&[(&name, NewPartitions::increase_to(2))], false)
            .await,
        ApiKey::CreatePartitions,
    );
    assert_unsupported(
        admin
            .alter_configs(
                &[(
                    ConfigResource::topic(&name),
                    vec![("retention.ms".into(), "1000".into())],
                )],
                false,
            )
            .await,
        ApiKey::AlterConfigs,
    );
    assert_unsupported(
        admin
            .describe_client_quotas(&[ClientQuotaFilterComponent::any("user")], false)
            .await,
        ApiKey::DescribeClientQuotas,
    );
    assert_unsupported(
        admin
            .alter_client_quotas(
                &[
                    ClientQuotaAlteration::new(ClientQuotaEntity::user(Some("u")))
                        .set("producer_byte_rate", 1024.0),
                ],
                false,
            )
            .await,
        ApiKey::AlterClientQuotas,
    );
    assert_unsupported(
        admin
            .alter_partition_reassignments(&[(&name, 0, Some(vec![TANSU_NODE]))])
            .await,
        ApiKey::AlterPartitionReassignments,
    );
    assert_unsupported(
        admin
            .elect_leaders(ElectionType::Preferred, Some(&[(&name, 0)]))
            .await,
        ApiKey::ElectLeaders,
    );
    assert_unsupported(admin.describe_log_dirs(None).await, ApiKey::DescribeLogDirs);
    assert_unsupported(
        admin.describe_log_dirs(Some(&[TANSU_NODE])).await,
        ApiKey::DescribeLogDirs,
    );
    assert_unsupported(
        admin
            .update_features(
                &[(
                    "transaction.version",
                    FeatureUpdate::new(1, FeatureUpgradeType::Upgrade),
                )],
                false,
            )
            .await,
        ApiKey::UpdateFeatures,
    );

    // The topic is untouched.
    let described = admin
        .describe_topics(&[&name], false)
        .await
        .expect("describe");
    assert_eq!(described[0].1.as_ref().expect("topic").partitions.len(), 1);
}

/// Issue: `NewTopic::new("", 1, 1)`, -5 partitions and a replication factor of 0 were sent,
/// and tansu created a topic named "". As Java's admin client, each such topic is refused
/// before sending (its result is a typed error with the code a broker would answer), and the
/// others of the call are created.
#[tokio::test]
async fn illegal_new_topics_are_refused_per_topic_and_the_others_created() {
    let admin = admin();
    let good = unique_topic("admin-checked");
    let few = unique_topic("admin-few");
    let none = unique_topic("admin-none");
    let results = admin
        .create_topics(
            &[
                NewTopic::new("", 1, 1),
                NewTopic::new(&few, -5, 1),
                NewTopic::new(&none, 1, 0),
                NewTopic::new(&good, 1, 1),
            ],
            false,
        )
        .await
        .expect("an answer");
    let codes: Vec<Option<ErrorCode>> = results
        .iter()
        .map(|(_, r)| r.as_ref().err().and_then(Error::error_code))
        .collect();
    assert_eq!(
        codes,
        [
            Some(ErrorCode::INVALID_TOPIC_EXCEPTION),
            Some(ErrorCode::INVALID_PARTITIONS),
            Some(ErrorCode::INVALID_REPLICATION_FACTOR),
            None,
        ],
        "{results:?}"
    );
    for (_, r) in &results[..3] {
        let e = r.as_ref().unwrap_err();
        assert!(!matches!(e, Error::Broker { .. }), "refused here: {e:?}");
    }
    let listed: Vec<String> = admin
        .list_topics(false)
        .await
        .expect("list")
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(listed.contains(&good), "{listed:?}");
    // (A topic named "" cannot be looked for on a shared broker: a client without the check
    // may have made one; its result above says it was not sent.)
    for absent in [few.as_str(), none.as_str()] {
        assert!(
            !listed.iter().any(|n| n == absent),
            "{absent:?} in {listed:?}"
        );
    }
}
