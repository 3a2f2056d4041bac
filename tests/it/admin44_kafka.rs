//! The admin methods of the Java 4.4 Admin API against Apache Kafka 4.4 (one KRaft node, node
//! id 1): DescribeCluster v2 (fenced brokers), DescribeQuorum, ConsumerGroupDescribe,
//! ShareGroupDescribe and StreamsGroupDescribe, ListConfigResources v1, ListTransactions v2
//! (transactional id pattern), DeleteGroups v3, and delegation tokens over SASL SCRAM.
//!
//! Groups of the new types are made with the group heartbeats themselves, sent by our
//! connection (ConsumerGroupHeartbeat; ShareGroupHeartbeat at v1): a member joins, the describe
//! shows it, the member leaves. `share_kafka` runs whole share group members (`ShareReader`).
//!
//! Each test makes its own groups, topics, transactional ids and users; none changes a
//! broker-wide setting, so the tests run in parallel beside the other Kafka modules.

use std::time::Duration;

use base64::Engine as _;
use integration_tests::kafka_cluster::KafkaCluster;
use integration_tests::{create_topic, dial, kafka, kafka_sasl, unique_topic};
use kafkit::admin::{
    ConfigResource, ConfigResourceType, CreateDelegationTokenOptions, DescribeClusterOptions,
    GroupMemberType, GroupState, KafkaPrincipal, ListTransactionsOptions, ScramMechanism,
    UserScramCredentialAlteration,
};
use kafkit::sasl::{Scram, ScramHash};
use kafkit::{Client, Dialer, Error, ErrorCode, Transport};
use kafkit_protocol::messages::{
    ConsumerGroupHeartbeatRequest, InitProducerIdRequest, ShareGroupHeartbeatRequest,
};

/// The rig's only node id.
const KAFKA_NODE: i32 = 1;

/// How long a change accepted by the controller may take to show.
const SETTLE: Duration = Duration::from_secs(20);

fn admin() -> Client {
    let transport = Transport::builder([kafka()])
        .default_api_timeout(Duration::from_secs(15))
        .build()
        .expect("transport");
    Client::new(transport).with_timeout(Duration::from_secs(10))
}

/// Asserts `r` is the broker's typed `expected` code.
fn assert_broker_code<T: std::fmt::Debug>(r: &Result<T, Error>, expected: ErrorCode) {
    match r {
        Err(Error::Broker { code, .. }) if *code == expected => {}
        other => panic!("expected the broker's {}, got {other:?}", expected.name()),
    }
}

/// DescribeCluster v2 (KIP-1073): with fenced brokers asked for, the one live node is listed
/// and none is fenced; without, the list is the same and `fenced_brokers` stays empty.
#[tokio::test]
async fn describe_cluster_v2_with_fenced_brokers() {
    let admin = admin();
    let d = admin
        .describe_cluster_with(
            DescribeClusterOptions::new()
                .include_fenced_brokers(true)
                .include_authorized_operations(true),
        )
        .await
        .expect("DescribeCluster v2");
    assert_eq!(
        d.brokers.iter().map(|b| b.node_id).collect::<Vec<_>>(),
        [KAFKA_NODE]
    );
    assert!(d.fenced_brokers.is_empty(), "{d:?}");
    assert!(d.authorized_operations.is_some());
    let plain = admin
        .describe_cluster(false)
        .await
        .expect("DescribeCluster");
    assert_eq!(plain.brokers, d.brokers);
}

/// DescribeLogDirs v5 (KIP-1066): the node's two log dirs, neither cordoned, with their volume's
/// sizes.
#[tokio::test]
async fn describe_log_dirs_v5_says_the_dir_is_not_cordoned() {
    let got = admin()
        .describe_log_dirs(Some(&[KAFKA_NODE]))
        .await
        .expect("DescribeLogDirs");
    let dirs = got[0].1.as_ref().expect("the node answered");
    assert_eq!(dirs.len(), 2, "the rig's two log dirs: {dirs:?}");
    for d in dirs {
        assert!(!d.is_cordoned, "{dirs:?}");
        assert!(d.total_bytes.is_some(), "{dirs:?}");
    }
    let conn = dial(&kafka(), "admin44-logdirs").await;
    assert_eq!(
        conn.version_for::<kafkit_protocol::messages::DescribeLogDirsRequest>(None)
            .expect("offered"),
        5,
        "Kafka 4.4 and the client agree on v5"
    );
}

/// DescribeQuorum: the one combined node is the quorum's leader and only voter, caught up
/// (lag 0), and its controller endpoint is listed (v2, KIP-853).
#[tokio::test]
async fn describe_quorum_shows_the_one_voter() {
    let q = admin()
        .describe_metadata_quorum()
        .await
        .expect("DescribeQuorum");
    assert_eq!(q.leader_id, KAFKA_NODE);
    assert!(q.leader_epoch >= 1, "{q:?}");
    assert!(q.high_watermark > 0, "{q:?}");
    assert_eq!(
        q.voters.iter().map(|v| v.replica_id).collect::<Vec<_>>(),
        [KAFKA_NODE]
    );
    assert!(q.observers.is_empty(), "{q:?}");
    // A static quorum (`controller.quorum.voters`, kraft.version 0) has no directory ids.
    assert_eq!(q.voters[0].replica_directory_id, None, "{q:?}");
    assert_eq!(q.lags(), vec![(KAFKA_NODE, Some(0))]);
    assert_eq!(q.nodes.len(), 1, "{q:?}");
    assert!(
        q.nodes[0]
            .listeners
            .iter()
            .any(|(name, _, _)| name == "CONTROLLER"),
        "{q:?}"
    );
}

/// Describe features: Kafka 4.4 finalizes `transaction.version` and `group.version` (the
/// levels the KIP-848 and transaction v2 code depend on).
#[tokio::test]
async fn describe_features_sees_transaction_and_group_versions() {
    let f = admin().describe_features().await.expect("ApiVersions");
    for name in ["metadata.version", "transaction.version", "group.version"] {
        let fin = f.finalized.iter().find(|x| x.name == name);
        assert!(
            fin.is_some_and(|x| x.max_version_level >= 1),
            "{name} finalized: {f:?}"
        );
        assert!(f.supported.iter().any(|s| s.name == name), "{name}: {f:?}");
    }
}

/// A KIP-848 group made by one ConsumerGroupHeartbeat member: ListGroups with the `consumer`
/// type lists it (and the `classic` type does not), ConsumerGroupDescribe v1 shows the member
/// as a `Consumer` member with its subscription, DeleteGroups v3 refuses the non-empty group
/// (NON_EMPTY_GROUP), and after the member leaves the group is deleted. The same id described
/// as a share or streams group is GROUP_ID_NOT_FOUND.
#[tokio::test]
async fn kip848_group_listed_described_and_deleted() {
    let admin = admin();
    let topic = unique_topic("admin44-848");
    create_topic(&kafka(), &topic, 2).await;
    let group = unique_topic("g-admin44-848");
    let member_id = unique_topic("m");
    let join = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(group.clone())
        .with_member_id(member_id.clone())
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(vec![topic.clone()]))
        .with_topic_partitions(Some(Vec::new()));
    let joined = admin
        .transport()
        .round_trip(join.clone())
        .await
        .expect("ConsumerGroupHeartbeat");
    assert!(joined.error_code.is_ok(), "{joined:?}");
    assert!(joined.member_epoch >= 1, "{joined:?}");

    let listed = admin
        .list_groups(&kafkit::admin::ListGroupsOptions::new().with_types(["consumer"]))
        .await
        .expect("ListGroups");
    let g = listed
        .groups
        .iter()
        .find(|g| g.group_id == group)
        .unwrap_or_else(|| panic!("{group} in {listed:?}"));
    assert_eq!(g.group_type.as_deref(), Some("consumer"));
    let classic = admin
        .list_groups(&kafkit::admin::ListGroupsOptions::new().with_types(["classic"]))
        .await
        .expect("ListGroups");
    assert!(!classic.groups.iter().any(|g| g.group_id == group));

    let described = admin
        .describe_kip848_groups(&[group.as_str(), "admin44-no-such-group"], true)
        .await
        .expect("ConsumerGroupDescribe");
    let d = described[0].1.as_ref().expect("described");
    assert!(
        matches!(
            d.state,
            GroupState::Assigning | GroupState::Reconciling | GroupState::Stable
        ),
        "{d:?}"
    );
    assert!(d.group_epoch >= 1, "{d:?}");
    assert_eq!(d.members.len(), 1, "{d:?}");
    let m = &d.members[0];
    assert_eq!(m.member_id, member_id);
    assert_eq!(m.member_type, GroupMemberType::Consumer, "v1 carries it");
    assert_eq!(m.subscribed_topic_names, vec![topic.clone()]);
    assert!(d.authorized_operations.is_some());
    assert_broker_code(&described[1].1, ErrorCode::GROUP_ID_NOT_FOUND);

    let as_share = admin
        .describe_share_groups(&[group.as_str()], false)
        .await
        .expect("ShareGroupDescribe");
    assert_broker_code(&as_share[0].1, ErrorCode::GROUP_ID_NOT_FOUND);
    let as_streams = admin
        .describe_streams_groups(&[group.as_str()], false)
        .await
        .expect("StreamsGroupDescribe");
    assert_broker_code(&as_streams[0].1, ErrorCode::GROUP_ID_NOT_FOUND);

    let busy = admin
        .delete_consumer_groups(&[group.as_str()])
        .await
        .expect("DeleteGroups");
    assert_broker_code(&busy[0].1, ErrorCode::NON_EMPTY_GROUP);

    let leave = join
        .clone()
        .with_member_epoch(-1)
        .with_subscribed_topic_names(None)
        .with_topic_partitions(None);
    let left = admin.transport().round_trip(leave).await.expect("leave");
    assert!(left.error_code.is_ok(), "{left:?}");
    let deleted = admin
        .delete_consumer_groups(&[group.as_str()])
        .await
        .expect("DeleteGroups");
    assert!(deleted[0].1.is_ok(), "{deleted:?}");
    let gone = admin
        .describe_kip848_groups(&[group.as_str()], false)
        .await
        .expect("ConsumerGroupDescribe");
    assert_broker_code(&gone[0].1, ErrorCode::GROUP_ID_NOT_FOUND);
}

/// A share group made by one ShareGroupHeartbeat v1 member (KIP-932): ListGroups with the
/// `share` type lists it, ShareGroupDescribe v1 shows the member and its subscription; after
/// the member leaves, the group is Empty, and its start offset on the topic's partition is set
/// (AlterShareGroupOffsets), read back with its lag (DescribeShareGroupOffsets v1) and deleted
/// (DeleteShareGroupOffsets).
#[tokio::test]
async fn share_group_listed_and_described() {
    let admin = admin();
    let topic = unique_topic("admin44-share");
    create_topic(&kafka(), &topic, 1).await;
    let group = unique_topic("g-admin44-share");
    let member_id = unique_topic("sm");
    let conn = dial(&kafka(), "admin44-share").await;
    let join = ShareGroupHeartbeatRequest::default()
        .with_group_id(group.clone())
        .with_member_id(member_id.clone())
        .with_member_epoch(0)
        .with_subscribed_topic_names(Some(vec![topic.clone()]));
    // Before the member: GROUP_ID_NOT_FOUND, typed (the describe also finds the coordinator,
    // which loads the group partitions the heartbeat below needs).
    let unknown = admin
        .describe_share_groups(&[group.as_str()], false)
        .await
        .expect("ShareGroupDescribe");
    assert_broker_code(&unknown[0].1, ErrorCode::GROUP_ID_NOT_FOUND);
    // v1 is the first stable version (KIP-932); the heartbeat goes on our connection to the one
    // node (the coordinator of every group).
    let deadline = tokio::time::Instant::now() + SETTLE;
    let joined = loop {
        let r = conn
            .request_at(&join, 1, Duration::ZERO)
            .await
            .expect("ShareGroupHeartbeat v1");
        let loading = [
            ErrorCode::NOT_COORDINATOR,
            ErrorCode::COORDINATOR_NOT_AVAILABLE,
            ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
        ];
        if !loading.contains(&r.error_code) || tokio::time::Instant::now() >= deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(joined.error_code.is_ok(), "{joined:?}");

    let listed = admin
        .list_groups(&kafkit::admin::ListGroupsOptions::new().with_types(["share"]))
        .await
        .expect("ListGroups");
    assert!(
        listed.groups.iter().any(|g| g.group_id == group),
        "{group} in {listed:?}"
    );
    let described = admin
        .describe_share_groups(&[group.as_str()], false)
        .await
        .expect("ShareGroupDescribe");
    let d = described[0].1.as_ref().expect("described");
    assert_eq!(d.members.len(), 1, "{d:?}");
    assert_eq!(d.members[0].member_id, member_id);
    assert_eq!(d.members[0].subscribed_topic_names, vec![topic.clone()]);
    assert_eq!(d.assignor_name, "simple", "{d:?}");
    assert_eq!(d.authorized_operations, None, "not asked for");

    let leave = join
        .clone()
        .with_member_epoch(-1)
        .with_subscribed_topic_names(None);
    let left = conn
        .request_at(&leave, 1, Duration::ZERO)
        .await
        .expect("leave");
    assert!(left.error_code.is_ok(), "{left:?}");
    let after = admin
        .describe_share_groups(&[group.as_str()], false)
        .await
        .expect("ShareGroupDescribe");
    let d = after[0].1.as_ref().expect("described");
    assert_eq!(d.state, GroupState::Empty, "{d:?}");
    assert!(d.members.is_empty(), "{d:?}");

    // Share-group offsets (KIP-932) of the now empty group: set, read back, deleted.
    let tp = (topic.as_str(), 0);
    let altered = admin
        .alter_share_group_offsets(&group, &[(tp, 0)])
        .await
        .expect("AlterShareGroupOffsets");
    assert!(altered[0].1.is_ok(), "{altered:?}");
    let offsets = admin
        .list_share_group_offsets(&group, Some(&[tp]))
        .await
        .expect("DescribeShareGroupOffsets");
    let o = offsets[0].1.as_ref().expect("the partition");
    assert_eq!(o.start_offset, Some(0), "{offsets:?}");
    assert_eq!(o.lag, Some(0), "an empty topic: {offsets:?}");
    let all = admin
        .list_share_group_offsets(&group, None)
        .await
        .expect("DescribeShareGroupOffsets");
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].0, (topic.clone(), 0));
    let deleted = admin
        .delete_share_group_offsets(&group, &[topic.as_str()])
        .await
        .expect("DeleteShareGroupOffsets");
    assert!(deleted[0].1.is_ok(), "{deleted:?}");
    let gone = admin
        .list_share_group_offsets(&group, None)
        .await
        .expect("DescribeShareGroupOffsets");
    assert!(gone.is_empty(), "{gone:?}");
    let unknown = admin
        .list_share_group_offsets("admin44-no-such-share-group", None)
        .await;
    match unknown {
        Err(Error::Broker { code, .. }) if code == ErrorCode::GROUP_ID_NOT_FOUND => {}
        Ok(v) if v.is_empty() => {}
        other => panic!("unknown share group: {other:?}"),
    }
}

/// ListConfigResources v1 (KIP-1142): a new topic is listed as a typed topic resource, the
/// broker as a broker resource, and a topic filter lists no broker.
#[tokio::test]
async fn list_config_resources_lists_typed_resources() {
    let admin = admin();
    let topic = unique_topic("admin44-cfg");
    create_topic(&kafka(), &topic, 1).await;
    let all = admin
        .list_config_resources(&[])
        .await
        .expect("ListConfigResources");
    assert!(all.contains(&ConfigResource::topic(&topic)), "{all:?}");
    assert!(all.contains(&ConfigResource::broker(KAFKA_NODE)), "{all:?}");
    let topics = admin
        .list_config_resources(&[ConfigResourceType::Topic])
        .await
        .expect("ListConfigResources");
    assert!(topics.contains(&ConfigResource::topic(&topic)));
    assert!(
        topics
            .iter()
            .all(|r| r.resource_type == ConfigResourceType::Topic),
        "{topics:?}"
    );
    admin
        .list_client_metrics_resources()
        .await
        .expect("client metrics resources");
}

/// ListTransactions v2 (KIP-1152): a pattern keeps the transactional ids it matches; an id
/// that does not match is left out.
#[tokio::test]
async fn list_transactions_by_transactional_id_pattern() {
    let admin = admin();
    let prefix = unique_topic("admin44-txn");
    let ids = [
        format!("{prefix}-a"),
        format!("{prefix}-b"),
        unique_topic("other-txn"),
    ];
    for id in &ids {
        let req = InitProducerIdRequest::default()
            .with_transactional_id(Some(id.clone()))
            .with_transaction_timeout_ms(60_000)
            .with_producer_id(-1)
            .with_producer_epoch(-1);
        let resp = admin
            .transport()
            .round_trip(req)
            .await
            .expect("InitProducerId");
        assert!(resp.error_code.is_ok(), "{id}: {resp:?}");
    }
    let listed = admin
        .list_transactions(
            &ListTransactionsOptions::new()
                .transactional_id_pattern(format!("^{}-.*", regex_quote(&prefix))),
        )
        .await
        .expect("ListTransactions");
    assert!(listed.errors.is_empty(), "{:?}", listed.errors);
    let mut got: Vec<&str> = listed
        .transactions
        .iter()
        .map(|t| t.transactional_id.as_str())
        .collect();
    got.sort_unstable();
    assert_eq!(got, [ids[0].as_str(), ids[1].as_str()]);
}

/// `s` with the regular-expression metacharacters it may hold escaped.
fn regex_quote(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let special = "\\.^$|?*+()[]{}".contains(c);
            special.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

/// A SCRAM-SHA-256 user made with AlterUserScramCredentials, and an admin client logged in as
/// it on the SASL_PLAINTEXT listener (retried until the broker has the credential).
async fn scram_admin(user: &str, password: &str) -> Client {
    let results = admin()
        .alter_user_scram_credentials(&[UserScramCredentialAlteration::upsertion(
            user,
            ScramMechanism::ScramSha256,
            4096,
            password,
        )])
        .await
        .expect("AlterUserScramCredentials");
    assert!(results[0].1.is_ok(), "{results:?}");
    let dialer = Dialer::builder()
        .client_id("admin44-tokens")
        .sasl(Scram::new(ScramHash::Sha256, user, password))
        .build();
    let addr = kafka_sasl();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match dialer.dial(&addr).await {
            Ok(conn) => {
                conn.close();
                break;
            }
            Err(e) if tokio::time::Instant::now() < deadline => {
                assert_eq!(
                    e.error_code(),
                    Some(ErrorCode::SASL_AUTHENTICATION_FAILED),
                    "{e:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{user} cannot log in: {e}"),
        }
    }
    let transport = Transport::builder([addr])
        .dialer(dialer)
        .default_api_timeout(Duration::from_secs(15))
        .build()
        .expect("transport");
    Client::new(transport)
}

/// Delegation tokens (KIP-48) over SASL SCRAM: created with a renewer and a max lifetime,
/// described (owner, renewer, HMAC), used to log in (SCRAM `tokenauth=true`; a token-authenticated
/// connection may not create tokens: DELEGATION_TOKEN_REQUEST_NOT_ALLOWED), renewed, expired
/// (then DELEGATION_TOKEN_NOT_FOUND on renewal). On PLAINTEXT the broker refuses
/// (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED).
#[tokio::test]
async fn delegation_tokens_created_described_renewed_and_expired() {
    let plain = admin()
        .create_delegation_token(&CreateDelegationTokenOptions::new())
        .await;
    assert_broker_code(&plain, ErrorCode::DELEGATION_TOKEN_REQUEST_NOT_ALLOWED);

    let user = unique_topic("tok-owner");
    let admin = scram_admin(&user, "tok-owner-pw").await;
    let renewer = KafkaPrincipal::user(unique_topic("tok-renewer"));
    let token = admin
        .create_delegation_token(
            &CreateDelegationTokenOptions::new()
                .renewers([renewer.clone()])
                .max_lifetime(Duration::from_secs(3600)),
        )
        .await
        .expect("CreateDelegationToken");
    assert_eq!(token.owner, KafkaPrincipal::user(&user));
    assert_eq!(token.token_requester, token.owner);
    assert!(!token.hmac.is_empty());
    assert!(token.max_timestamp_ms <= token.issue_timestamp_ms + 3_600_000);

    // Described once the broker has applied it from the metadata log.
    let deadline = tokio::time::Instant::now() + SETTLE;
    let described = loop {
        let all = admin
            .describe_delegation_token(Some(&[KafkaPrincipal::user(&user)]))
            .await
            .expect("DescribeDelegationToken");
        if let Some(t) = all.into_iter().find(|t| t.token_id == token.token_id) {
            break t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "token not described"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(described.hmac, token.hmac);
    assert_eq!(described.renewers, vec![renewer]);
    assert_eq!(described.owner, token.owner);

    // Log in with the token itself: SCRAM with the token id and the base64 HMAC.
    let password = base64::engine::general_purpose::STANDARD.encode(&token.hmac);
    let token_dialer = Dialer::builder()
        .client_id("admin44-token-login")
        .sasl(
            Scram::new(
                ScramHash::Sha256,
                token.token_id.as_str(),
                password.as_str(),
            )
            .with_token_auth(true),
        )
        .build();
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        match token_dialer.dial(&kafka_sasl()).await {
            Ok(conn) => {
                conn.close();
                break;
            }
            Err(e) if tokio::time::Instant::now() < deadline => {
                assert_eq!(
                    e.error_code(),
                    Some(ErrorCode::SASL_AUTHENTICATION_FAILED),
                    "{e:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("token login: {e}"),
        }
    }
    let token_admin = Client::new(
        Transport::builder([kafka_sasl()])
            .dialer(token_dialer)
            .build()
            .expect("transport"),
    );
    let nested = token_admin
        .create_delegation_token(&CreateDelegationTokenOptions::new())
        .await;
    assert_broker_code(&nested, ErrorCode::DELEGATION_TOKEN_REQUEST_NOT_ALLOWED);

    let renewed = admin
        .renew_delegation_token(&token.hmac, Some(Duration::from_secs(600)))
        .await
        .expect("RenewDelegationToken");
    assert!(renewed > token.issue_timestamp_ms, "{renewed}");
    assert!(renewed <= token.max_timestamp_ms, "{renewed}");

    let expired = admin
        .expire_delegation_token(&token.hmac, None)
        .await
        .expect("ExpireDelegationToken");
    assert!(expired <= renewed, "{expired} {renewed}");
    // Read-only polling: a renewal sent before the broker applied the removal would write the
    // token back (the controller checks the broker's token cache).
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let all = admin
            .describe_delegation_token(None)
            .await
            .expect("DescribeDelegationToken");
        if !all.iter().any(|t| t.token_id == token.token_id) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "token still described"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let again = admin.renew_delegation_token(&token.hmac, None).await;
    assert_broker_code(&again, ErrorCode::DELEGATION_TOKEN_NOT_FOUND);
    assert!(matches!(
        admin.renew_delegation_token(&[], None).await,
        Err(Error::InvalidArgument(_))
    ));
}

/// DescribeCluster v2 on the three-node cluster (held alone, [`KafkaCluster::acquire`]): a node
/// killed (not the quorum's leader) is fenced once its broker session (4 s on the rig) runs out:
/// with fenced brokers asked for it is still listed and named in `fenced_brokers`, without it
/// is not listed at all; the quorum still has three voters. Restarted, it is unfenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_is_listed_as_fenced() {
    let cluster = KafkaCluster::acquire().await;
    let transport = Transport::builder([cluster.bootstrap()])
        .default_api_timeout(Duration::from_secs(15))
        .build()
        .expect("transport");
    let admin = Client::new(transport.clone());
    let fenced_too = DescribeClusterOptions::new().include_fenced_brokers(true);
    let before = admin
        .describe_cluster_with(fenced_too)
        .await
        .expect("DescribeCluster v2");
    assert_eq!(before.brokers.len(), 3, "{before:?}");
    assert!(before.fenced_brokers.is_empty(), "{before:?}");

    let leader = cluster.quorum_leader(&transport).await;
    let victim = cluster
        .nodes()
        .iter()
        .map(|n| n.id)
        .find(|id| *id != leader)
        .expect("a follower");
    cluster.kill(victim).await;
    // Fenced when the controller misses its heartbeats: no event tells a client, so poll.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let fenced = loop {
        match admin.describe_cluster_with(fenced_too).await {
            Ok(d) if d.fenced_brokers == [victim] => break d,
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "node {victim} not fenced: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let mut listed: Vec<i32> = fenced.brokers.iter().map(|b| b.node_id).collect();
    listed.sort_unstable();
    assert_eq!(listed.len(), 3, "the fenced node is listed: {fenced:?}");
    let live = admin
        .describe_cluster(false)
        .await
        .expect("DescribeCluster");
    assert!(
        live.brokers.iter().all(|b| b.node_id != victim),
        "without the option the fenced node is left out: {live:?}"
    );
    assert!(live.fenced_brokers.is_empty());
    let q = admin
        .describe_metadata_quorum()
        .await
        .expect("DescribeQuorum");
    assert_eq!(q.voters.len(), 3, "{q:?}");

    cluster.restart(victim).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match admin.describe_cluster_with(fenced_too).await {
            Ok(d) if d.fenced_brokers.is_empty() && d.brokers.len() == 3 => break,
            other => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "node {victim} still fenced: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// A transactional Writer of ours on `id`, batching little.
fn txn_writer(id: &str) -> kafkit::Writer {
    kafkit::Writer::builder(Transport::builder([kafka()]).build().expect("transport"))
        .transactional_id(id)
        .linger(Duration::from_millis(5))
        .build()
        .expect("writer")
}

/// The values partition 0 of `topic` holds for a read_committed Reader, read until `n` came
/// (then a short look for more, which must find none).
async fn read_committed(topic: &str, n: usize) -> Vec<String> {
    let reader = kafkit::Reader::builder(Transport::builder([kafka()]).build().expect("transport"))
        .isolation_level(kafkit::IsolationLevel::ReadCommitted)
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    reader
        .assign([(topic, 0, kafkit::StartOffset::Earliest)])
        .expect("assign");
    let mut read = Vec::new();
    let values = |parts: Vec<kafkit::PartitionRecords>| -> Vec<String> {
        parts
            .iter()
            .flat_map(|p| p.records.iter())
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
            .collect()
    };
    while read.len() < n {
        let parts = tokio::time::timeout(SETTLE, reader.next_batch())
            .await
            .expect("records within the guard")
            .expect("next_batch");
        read.extend(values(parts));
    }
    if let Ok(more) = tokio::time::timeout(Duration::from_millis(500), reader.next_batch()).await {
        read.extend(values(more.expect("next_batch")));
    }
    read
}

/// fenceProducers (KIP-618): InitProducerId with no producer id or epoch at the id's
/// transaction coordinator bumps the epoch; our Writer holding the id is fenced (its commit
/// fails fatal with PRODUCER_FENCED or INVALID_PRODUCER_EPOCH), its open transaction is
/// aborted, and a new Writer of the id works. An empty id is refused before sending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_producers_fences_our_transactional_writer() {
    const T: Duration = Duration::from_secs(30);
    let topic = unique_topic("admin44-fence");
    create_topic(&kafka(), &topic, 1).await;
    let id = unique_topic("tx-fence");
    let zombie = txn_writer(&id);
    zombie.init_transactions(T).await.expect("init");
    zombie.begin_transaction().expect("begin");
    zombie
        .produce(kafkit::ProducerRecord::new(topic.as_str(), "z0").partition(0))
        .await
        .expect("written before the fence");
    let admin = admin();
    let described = admin.describe_transactions(&[&id]).await.expect("describe");
    let before = described[0].1.as_ref().expect("described").producer_epoch;

    let fenced = admin
        .fence_producers(&[id.as_str()], None)
        .await
        .expect("FenceProducers");
    assert_eq!(fenced.len(), 1);
    assert_eq!(fenced[0].0, id);
    let got = fenced[0].1.as_ref().expect("fenced");
    assert!(got.producer_epoch > before, "{got:?} after epoch {before}");

    let e = zombie
        .commit_transaction(T)
        .await
        .expect_err("the fenced Writer cannot commit");
    assert!(e.is_fatal(), "{e}");
    assert!(
        matches!(
            e.error_code(),
            Some(ErrorCode::PRODUCER_FENCED | ErrorCode::INVALID_PRODUCER_EPOCH)
        ),
        "{e}"
    );
    let fresh = txn_writer(&id);
    fresh
        .init_transactions(T)
        .await
        .expect("a new Writer inits");
    fresh.begin_transaction().expect("begin");
    fresh
        .produce(kafkit::ProducerRecord::new(topic.as_str(), "f0").partition(0))
        .await
        .expect("written");
    fresh.commit_transaction(T).await.expect("commit");
    assert_eq!(
        read_committed(&topic, 1).await,
        ["f0"],
        "the fenced transaction was aborted"
    );
    fresh.close(T).await.expect("close");

    let refused = admin.fence_producers(&[""], None).await;
    assert!(
        matches!(refused, Err(Error::InvalidArgument(_))),
        "{refused:?}"
    );
}

/// abortTransaction (KIP-664's tool): a transaction our Writer leaves open hangs the
/// partition's last stable offset; the admin call, built from describe_producers' answer,
/// writes the abort marker with WriteTxnMarkers at the partition's leader. The last stable
/// offset moves past it, a read_committed Reader reads the records written after it and never
/// the open transaction's, and a second abort with an older epoch is refused with a typed
/// INVALID_PRODUCER_EPOCH. Holds the `transaction.version` lock at the rig's level (2), so the
/// Writer runs transactions v2 (KIP-890) throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_transaction_aborts_a_hanging_transaction() {
    use kafkit::admin::AbortTransactionSpec;
    use kafkit::{IsolationLevel, OffsetSpec};
    const T: Duration = Duration::from_secs(30);
    let _tv = integration_tests::kafka_transaction_version(
        integration_tests::KAFKA_TRANSACTION_VERSION_LEVEL,
    )
    .await;
    let topic = unique_topic("admin44-abort");
    create_topic(&kafka(), &topic, 1).await;
    let id = unique_topic("tx-hang");
    let hanging = txn_writer(&id);
    hanging.init_transactions(T).await.expect("init");
    hanging.begin_transaction().expect("begin");
    for v in ["h0", "h1"] {
        hanging
            .produce(kafkit::ProducerRecord::new(topic.as_str(), v).partition(0))
            .await
            .expect("written in the open transaction");
    }
    // Records after the open transaction, not transactional: read_committed waits behind it.
    let plain = kafkit::Writer::builder(Transport::builder([kafka()]).build().expect("transport"))
        .build()
        .expect("writer");
    plain
        .produce(kafkit::ProducerRecord::new(topic.as_str(), "p0").partition(0))
        .await
        .expect("written");
    let admin = admin();
    let lso = |admin: Client, topic: String| async move {
        let got = admin
            .list_offsets(
                &[(topic.as_str(), 0, OffsetSpec::Latest)],
                IsolationLevel::ReadCommitted,
            )
            .await
            .expect("ListOffsets");
        got[0].1.as_ref().expect("answered").offset
    };
    assert_eq!(
        lso(admin.clone(), topic.clone()).await,
        0,
        "the open transaction holds the LSO"
    );

    let producers = admin
        .describe_producers(&[(topic.as_str(), 0)])
        .await
        .expect("DescribeProducers");
    let states = producers[0].1.as_ref().expect("described");
    let open = states
        .iter()
        .find(|s| s.current_transaction_start_offset.is_some())
        .expect("the open transaction is listed");
    assert_eq!(open.current_transaction_start_offset, Some(0));
    let spec = AbortTransactionSpec::from_producer_state(topic.as_str(), 0, open).expect("spec");
    admin.abort_transaction(&spec).await.expect("aborted");

    // h0, h1, p0 and the marker: the LSO is the log end.
    assert_eq!(
        lso(admin.clone(), topic.clone()).await,
        4,
        "the LSO moved past the abort"
    );
    assert_eq!(
        read_committed(&topic, 1).await,
        ["p0"],
        "the aborted records are never read"
    );
    let after = admin
        .describe_producers(&[(topic.as_str(), 0)])
        .await
        .expect("DescribeProducers");
    assert!(
        after[0]
            .1
            .as_ref()
            .expect("described")
            .iter()
            .all(|s| s.current_transaction_start_offset.is_none()),
        "{after:?}"
    );

    // An abort naming an epoch older than the producer's is refused by the leader.
    if spec.producer_epoch > 0 {
        let stale = AbortTransactionSpec::new(
            topic.as_str(),
            0,
            spec.producer_id,
            spec.producer_epoch - 1,
            Some(spec.coordinator_epoch),
        );
        assert_broker_code(
            &admin.abort_transaction(&stale).await,
            ErrorCode::INVALID_PRODUCER_EPOCH,
        );
    }
    // The Writer's transaction is gone from the partition; its coordinator aborts it too when
    // the Writer ends it (or the transaction times out).
    let _ = hanging.abort_transaction(T).await;
}

/// removeMembersFromConsumerGroup (KIP-345): a static classic member of ours (it stays in the
/// group after close until its session times out) is removed by LeaveGroup v3+ naming its
/// instance id; DescribeGroups no longer lists it, and an unknown instance id gets a typed
/// per-member UNKNOWN_MEMBER_ID. For a group that does not exist Kafka 4.4 answers
/// UNKNOWN_MEMBER_ID per member too (not as the top-level code).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_members_from_consumer_group_removes_a_static_member() {
    use kafkit::admin::MembersToRemove;
    let topic = unique_topic("admin44-rm");
    let group = unique_topic("g-rm");
    create_topic(&kafka(), &topic, 1).await;
    let t = Transport::builder([kafka()]).build().expect("transport");
    let mut member = kafkit::GroupReader::builder(t.clone(), group.as_str())
        .subscribe([topic.as_str()])
        .group_instance_id("instance-rm")
        .session_timeout(Duration::from_secs(45))
        .heartbeat_interval(Duration::from_millis(300))
        .reader(kafkit::Reader::builder(t).fetch_max_wait(Duration::from_millis(100)))
        .build()
        .expect("member");
    let deadline = tokio::time::Instant::now() + SETTLE;
    while member.assignment().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the member never got its partition"
        );
        let _ = tokio::time::timeout(Duration::from_millis(500), member.next_batch()).await;
    }
    member.close().await;
    let admin = admin();
    let described = admin
        .describe_consumer_groups(&[group.as_str()], false)
        .await
        .expect("DescribeGroups");
    let d = described[0].1.as_ref().expect("described");
    assert_eq!(
        d.members
            .iter()
            .map(|m| m.group_instance_id.as_deref())
            .collect::<Vec<_>>(),
        [Some("instance-rm")],
        "a closed static member stays: {d:?}"
    );

    let removed = admin
        .remove_members_from_consumer_group(
            &group,
            &MembersToRemove::Static(vec!["instance-rm".into(), "instance-unknown".into()]),
            Some("admin44 test"),
        )
        .await
        .expect("LeaveGroup");
    assert_eq!(removed.len(), 2);
    assert_eq!(
        removed[0].0.group_instance_id.as_deref(),
        Some("instance-rm")
    );
    assert!(removed[0].1.is_ok(), "{removed:?}");
    assert_broker_code(&removed[1].1, ErrorCode::UNKNOWN_MEMBER_ID);
    let described = admin
        .describe_consumer_groups(&[group.as_str()], false)
        .await
        .expect("DescribeGroups");
    let d = described[0].1.as_ref().expect("described");
    assert!(d.members.is_empty(), "{d:?}");
    // Nothing left to remove: `All` answers no member.
    let none = admin
        .remove_members_from_consumer_group(&group, &MembersToRemove::All, None)
        .await
        .expect("nothing to remove");
    assert!(none.is_empty(), "{none:?}");
    let missing_group = admin
        .remove_members_from_consumer_group(
            &unique_topic("g-none"),
            &MembersToRemove::Static(vec!["x".into()]),
            None,
        )
        .await
        .expect("Kafka answers per member");
    assert_broker_code(&missing_group[0].1, ErrorCode::UNKNOWN_MEMBER_ID);
}

/// unregisterBroker (KIP-500) and add/removeRaftVoter (KIP-853) on the rig's static quorum,
/// where nothing may change: unregistering a broker id that was never registered answers
/// BROKER_ID_NOT_REGISTERED, and both voter changes answer UNSUPPORTED_VERSION (kraft.version
/// 0: the quorum is `controller.quorum.voters`). The quorum and the live broker are untouched.
#[tokio::test]
async fn unregister_broker_and_raft_voter_changes_answer_typed_errors() {
    use kafkit::admin::RaftVoterEndpoint;
    let admin = admin();
    assert_broker_code(
        &admin.unregister_broker(4_242).await,
        ErrorCode::BROKER_ID_NOT_REGISTERED,
    );
    let dir = kafkit_protocol::Uuid([9; 16]);
    let endpoints = [RaftVoterEndpoint::new("CONTROLLER", "127.0.0.1", 1)];
    assert_broker_code(
        &admin.add_raft_voter(4_243, dir, &endpoints, None).await,
        ErrorCode::UNSUPPORTED_VERSION,
    );
    assert_broker_code(
        &admin.remove_raft_voter(KAFKA_NODE, dir, None).await,
        ErrorCode::UNSUPPORTED_VERSION,
    );
    let q = admin
        .describe_metadata_quorum()
        .await
        .expect("DescribeQuorum");
    assert_eq!(
        q.voters.iter().map(|v| v.replica_id).collect::<Vec<_>>(),
        [KAFKA_NODE]
    );
}

/// describeReplicaLogDirs and alterReplicaLogDirs (KIP-113) on the rig's node, which has two
/// log dirs: a written partition of ours is in one; AlterReplicaLogDirs moves it to the other
/// (the broker copies it into a future replica and swaps it in), describe_replica_log_dirs
/// shows it there with no future replica left, and its records are all still read. A path
/// that is not a log dir is refused per replica with LOG_DIR_NOT_FOUND; a replica the broker
/// does not hold has no current dir.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_moves_to_the_other_log_dir() {
    use kafkit::admin::TopicPartitionReplica;
    let topic = unique_topic("admin44-move");
    create_topic(&kafka(), &topic, 1).await;
    let writer = kafkit::Writer::builder(Transport::builder([kafka()]).build().expect("transport"))
        .build()
        .expect("writer");
    for i in 0..5 {
        writer
            .produce(kafkit::ProducerRecord::new(topic.as_str(), format!("r{i}")).partition(0))
            .await
            .expect("written");
    }
    let admin = admin();
    let replica = TopicPartitionReplica::new(topic.as_str(), 0, KAFKA_NODE);
    let absent = TopicPartitionReplica::new(topic.as_str(), 7, KAFKA_NODE);
    let described = admin
        .describe_replica_log_dirs(&[replica.clone(), absent.clone()])
        .await
        .expect("DescribeLogDirs");
    assert_eq!(described[1].0, absent);
    let none = described[1].1.as_ref().expect("answered");
    assert_eq!(
        (&none.current_replica_log_dir, &none.future_replica_log_dir),
        (&None, &None)
    );
    let before = described[0].1.as_ref().expect("answered");
    let from = before
        .current_replica_log_dir
        .clone()
        .expect("in a log dir");
    assert_eq!(before.future_replica_log_dir, None);
    let dirs = admin
        .describe_log_dirs(Some(&[KAFKA_NODE]))
        .await
        .expect("DescribeLogDirs");
    let to = dirs[0]
        .1
        .as_ref()
        .expect("log dirs")
        .iter()
        .map(|d| d.path.clone())
        .find(|p| *p != from)
        .expect("the rig's second log dir");

    let refused = admin
        .alter_replica_log_dirs(&[(replica.clone(), format!("{to}-missing"))])
        .await
        .expect("AlterReplicaLogDirs");
    assert_broker_code(&refused[0].1, ErrorCode::LOG_DIR_NOT_FOUND);
    let moved = admin
        .alter_replica_log_dirs(&[(replica.clone(), to.clone())])
        .await
        .expect("AlterReplicaLogDirs");
    assert_eq!(moved[0].0, replica);
    moved[0].1.as_ref().expect("the move is accepted");

    // The copy finishes in the broker's background: ask until the replica is in `to`.
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut seen = Vec::new();
    loop {
        let now = admin
            .describe_replica_log_dirs(std::slice::from_ref(&replica))
            .await
            .expect("DescribeLogDirs");
        let info = now.into_iter().next().expect("one").1.expect("answered");
        if info.current_replica_log_dir.as_deref() == Some(to.as_str())
            && info.future_replica_log_dir.is_none()
        {
            break;
        }
        seen.push(info);
        assert!(
            tokio::time::Instant::now() < deadline,
            "never moved: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let conn = dial(&kafka(), "admin44-move").await;
    let read = integration_tests::raw_fetch_partition(
        &conn,
        &topic,
        0,
        0,
        1 << 20,
        kafkit::IsolationLevel::ReadUncommitted,
    )
    .await;
    assert_eq!(read.high_watermark, 5, "{read:?}");
    let values: Vec<String> =
        kafkit::protocol::records::RecordBatchDecoder::new(read.records.clone().expect("records"))
            .flat_map(|b| b.expect("batches decode").records)
            .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
            .collect();
    assert_eq!(
        values,
        ["r0", "r1", "r2", "r3", "r4"],
        "every record after the move"
    );
    writer.close(Duration::from_secs(10)).await.expect("close");
}
