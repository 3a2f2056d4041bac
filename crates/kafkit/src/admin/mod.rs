//! The admin client: typed cluster administration over a [`crate::Transport`], with the Java
//! Admin client's operation names in snake_case (`create_topics`, `describe_configs`,
//! `describe_acls`...).
//!
//! One module per operation family, so missing coverage shows in the file list:
//!
//! | module            | operations |
//! |-------------------|------------|
//! | `topics`          | create/delete/list/describe topics, create partitions |
//! | `configs`         | describe configs, alter configs (legacy), incremental alter configs, list config resources |
//! | `acls`            | describe/create/delete ACLs |
//! | `quotas`          | describe/alter client quotas |
//! | `scram`           | describe/alter user SCRAM credentials |
//! | `reassignments`   | list/alter partition reassignments |
//! | `replica_dirs`    | describe replicas' log dirs, move replicas between log dirs |
//! | `cluster`         | describe cluster (fenced brokers), describe/update features, describe the metadata quorum, describe log dirs, elect leaders |
//! | `membership`      | unregister a broker, add/remove KRaft voters |
//! | `groups`          | consumer groups, their offsets and lag |
//! | `group_members`   | remove members from a consumer group |
//! | `group_describe`  | describe KIP-848 consumer, share and streams groups |
//! | `share_offsets`   | list/alter/delete share-group offsets |
//! | `tokens`          | create/renew/expire/describe delegation tokens |
//! | `offsets`         | list offsets, delete records |
//! | `producers`       | describe producers |
//! | `transactions`    | describe/list transactions |
//! | `txn_admin`       | fence producers, abort a hanging transaction |
//!
//! # Results
//!
//! Every batch operation answers per resource (topic, config resource, ACL filter, user...), in
//! the caller's order: a [`ResourceResult`] for each, so one failing resource never hides the
//! others' outcome. The operation itself returns `Err` only when nothing could be answered (no
//! broker reachable before the deadline, an API the broker does not offer:
//! [`Error::UnsupportedVersion`] naming the API, invalid arguments).

mod acls;
mod cluster;
mod configs;
mod group_describe;
mod group_members;
mod groups;
mod membership;
mod offsets;
mod producers;
mod quotas;
mod reassignments;
mod replica_dirs;
mod scram;
mod share_offsets;
mod tokens;
mod topics;
mod transactions;
mod txn_admin;

pub use acls::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType,
    ResourcePattern, ResourceType,
};
pub use cluster::{
    ClusterDescription, DescribeClusterOptions, ElectionType, FeatureMetadata, FeatureUpdate,
    FeatureUpgradeType, FinalizedFeature, LogDirDescription, QuorumInfo, QuorumNode, QuorumReplica,
    ReplicaInfo, SupportedFeature,
};
pub use configs::{
    AlterConfigOp, AlterConfigOpType, ConfigResource, ConfigResourceType, DescribeConfigsOptions,
};
pub use group_describe::{
    GroupMemberType, Kip848GroupDescription, Kip848Member, ShareGroupDescription, ShareMember,
    StreamsGroupDescription, StreamsMember, StreamsSubtopology, StreamsTasks, TopicPartitions,
};
pub use group_members::{MemberToRemove, MembersToRemove};
pub use groups::{
    ConsumerGroupDescription, GroupListing, GroupState, ListGroupsOptions, ListGroupsResult,
    MemberDescription, PartitionLag,
};
pub use membership::RaftVoterEndpoint;
pub use offsets::{DELETE_TO_HIGH_WATERMARK, OffsetInfo};
pub use producers::{PartitionProducers, ProducerState};
pub use quotas::{
    ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilterComponent, QuotaMatch,
};
pub use reassignments::PartitionReassignment;
pub use replica_dirs::{ReplicaLogDirInfo, TopicPartitionReplica};
pub use scram::{
    SCRAM_MAX_ITERATIONS, SCRAM_MIN_ITERATIONS, SCRAM_SALT_LEN, ScramCredentialInfo,
    ScramMechanism, UserScramCredentialAlteration,
};
pub use share_offsets::ShareGroupOffset;
pub use tokens::{CreateDelegationTokenOptions, DelegationToken, KafkaPrincipal};
pub use topics::{NewPartitions, TopicDescription, TopicListing};
pub use transactions::{
    ListTransactionsOptions, ListTransactionsResult, TransactionDescription, TransactionListing,
    TransactionState,
};
pub use txn_admin::{AbortTransactionSpec, ProducerIdAndEpoch};

pub use crate::ops::ResourceResult;
pub use crate::ops::configs::{ConfigEntry, ConfigSource, ConfigSynonym, ConfigType};
pub use crate::ops::offsets::{CommittedOffsets, ListGroupOffsets, OffsetAndMetadata};
pub use crate::ops::topics::{CreatedTopic, NewTopic};

use std::time::Duration;

use kafkit_protocol::Request;

use crate::error::{Error, Result};
use crate::transport::{ConnKind, Transport};

/// The admin client, like kafka-go's `Client` and Java's `Admin`: typed cluster administration
/// over a [`Transport`] (which routes each request to the right broker, retries retriable
/// errors until its `default_api_timeout` deadline, and pools connections).
///
/// Cheap to clone (the transport is shared). Operations have the Java Admin names in
/// snake_case. Batch operations answer per resource, in the caller's order, as
/// `Vec<(key, ResourceResult<value>)>`: one failing topic never hides the outcome of the
/// others. `Err` from the operation itself means no answer at all: the API is not offered by the
/// broker ([`Error::UnsupportedVersion`] naming it), no broker answered by the deadline, or the
/// arguments were invalid (nothing sent).
///
/// ```
/// use kafkit::{Client, Transport};
/// use kafkit::admin::{ConfigResource, NewTopic};
/// use std::time::Duration;
///
/// // No I/O happens until an operation runs.
/// let transport = Transport::builder(["127.0.0.1:9092"]).build()?;
/// // The broker may take 9/10 of the dialer's request timeout (30 s by default) per operation.
/// assert_eq!(Client::new(transport.clone()).timeout(), Duration::from_secs(27));
/// let admin = Client::new(transport).with_timeout(Duration::from_secs(10));
/// assert_eq!(admin.timeout(), Duration::from_secs(10));
///
/// let topics = [NewTopic::new("orders", 6, 1).config("retention.ms", "3600000")];
/// let resources = [ConfigResource::topic("orders"), ConfigResource::broker(1)];
/// assert_eq!(resources[1].name, "1");
///
/// # let run = async {
/// // With a broker at hand (see the integration tests in tests/it/admin_tansu.rs):
/// for (name, result) in admin.create_topics(&topics, false).await? {
///     match result {
///         Ok(created) => println!("{name}: {} partitions", created.num_partitions),
///         Err(e) => println!("{name}: {e} (retriable: {})", e.is_retriable()),
///     }
/// }
/// for (resource, entries) in admin.describe_configs(&resources, Default::default()).await? {
///     println!("{resource:?}: {} entries", entries?.len());
/// }
/// # Ok::<(), kafkit::Error>(())
/// # };
/// # drop(run);
/// # Ok::<(), kafkit::Error>(())
/// ```
///
/// # Cancel safety
///
/// Every async method of the client is one of two kinds, and its own docs say which.
/// - **A read** (describe, list, fetch) is cancel safe: dropping its future abandons the requests
///   in flight; nothing changes on the cluster, and the pooled connections stay usable (a late
///   answer is read and discarded).
/// - **A change** (create, delete, alter, commit, elect...) is not cancel safe: dropping its future
///   abandons the operation, but a request already sent may still be carried out by the broker,
///   and its answer is then lost. Nothing is retried; the pooled connections stay usable. Read the
///   state back (describe, list) to learn what happened.
#[derive(Clone, Debug)]
pub struct Client {
    transport: Transport,
    timeout: Duration,
}

impl Client {
    /// An admin client over `transport`. No I/O happens here. The broker-side operation
    /// timeout starts at nine tenths of the dialer's `request_timeout` (27 s with the default
    /// 30 s), so the broker answers before the client stops waiting.
    pub fn new(transport: Transport) -> Client {
        let timeout = transport.dialer().request_timeout() / 10 * 9;
        Client { transport, timeout }
    }

    /// Sets how long the broker may wait for an operation to complete before answering (the
    /// `timeout_ms` of CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords,
    /// ElectLeaders, partition reassignments and UpdateFeatures; Java `timeoutMs` of the admin
    /// options), sent in whole milliseconds up to `i32::MAX`. Keep it below the dialer's
    /// `request_timeout`: the client waits no longer than that for an answer. A part that did
    /// not complete in time comes back with `REQUEST_TIMED_OUT` (it may still complete later).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// The broker-side operation timeout (see [`Client::with_timeout`]).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// [`Client::timeout`] as the requests' `timeout_ms` field.
    pub(crate) fn timeout_ms(&self) -> i32 {
        crate::time::wire_ms(self.timeout)
    }

    /// The transport this client sends through.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// A node to ask for cluster-wide things, with an Admin connection to it: the controller
    /// when the metadata names one, else the listed brokers in order. A node that cannot be
    /// reached (its dial fails: killed, fenced, partitioned away) is skipped for the next one, so
    /// cached metadata that still names a dead node does not stop cluster-wide operations.
    ///
    /// Errors: the last node's dial error when none can be reached, [`Error::Protocol`] when the
    /// metadata lists no broker, and the transport's metadata errors.
    pub(crate) async fn any_node(&self) -> Result<(i32, crate::conn::Conn)> {
        let md = self.transport.metadata().await?;
        let mut order: Vec<i32> = Vec::with_capacity(md.brokers.len());
        if md.broker(md.controller_id).is_some() {
            order.push(md.controller_id);
        }
        order.extend(
            md.brokers
                .iter()
                .map(|b| b.node_id)
                .filter(|id| *id != md.controller_id),
        );
        let mut last = None;
        for node in order {
            match self.transport.conn(node, ConnKind::Admin).await {
                Ok(conn) => return Ok((node, conn)),
                Err(e) if e.is_retriable() => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Protocol("the cluster metadata lists no broker".into())))
    }

    /// The version of `R` this library and the cluster speak (asked of [`Client::any_node`]), for
    /// requests whose shape depends on it.
    ///
    /// Errors: [`Error::UnsupportedVersion`] naming the API when there is none, and the
    /// transport's errors.
    pub(crate) async fn version<R: Request>(&self) -> Result<i16> {
        let (_, conn) = self.any_node().await?;
        conn.version_for::<R>(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every request builder gives a request that encodes at each version this library speaks
    /// (builders that take the version are given it), so no option is lost or refused at a
    /// version the broker may pick. The documented exceptions (`validate_only` on CreateTopics
    /// v0, an unclean election or a non-literal pattern at v0) are left out of the inputs.
    #[test]
    fn every_request_encodes_at_every_version() {
        use kafkit_protocol::Message;

        fn each_version<M: Message>(build: impl Fn(i16) -> M) {
            for v in M::VERSIONS.min..=M::VERSIONS.max {
                let mut buf = bytes::BytesMut::new();
                if let Err(e) = build(v).encode(&mut buf, v) {
                    panic!("{} v{v}: {e}", M::NAME);
                }
            }
        }

        let names = vec!["a".to_owned(), "b".to_owned()];
        let topic_filter = acls::AclBindingFilter::any().resource(
            acls::ResourceType::Topic,
            "t",
            acls::PatternType::Literal,
        );
        let binding = acls::AclBinding::new(
            acls::ResourcePattern::new(acls::ResourceType::Topic, "t", acls::PatternType::Literal),
            acls::AccessControlEntry::new(
                "User:a",
                "*",
                acls::AclOperation::Read,
                acls::AclPermissionType::Allow,
            ),
        );
        let resources = [
            configs::ConfigResource::topic("t"),
            configs::ConfigResource::broker(1),
        ];
        let all_options = configs::DescribeConfigsOptions::default()
            .include_synonyms(true)
            .include_documentation(true);

        each_version(|_| {
            crate::ops::topics::create_topics_request(
                &[crate::admin::NewTopic::new("t", 3, 1).config("retention.ms", "1")],
                false,
                1_000,
            )
        });
        each_version(|v| crate::ops::topics::delete_topics_request(&names, v, 1_000));
        each_version(|v| topics::metadata_request_for(Some(&names), true, v));
        each_version(|v| topics::metadata_request_for(None, false, v));
        each_version(|v| cluster::cluster_metadata_request_for(true, v));
        each_version(|_| {
            topics::create_partitions_request_for(
                &[(
                    "t",
                    topics::NewPartitions::increase_to_with_assignments(2, vec![vec![1]]),
                )],
                true,
                1_000,
            )
        });
        each_version(|v| configs::describe_configs_request_for(&resources, &all_options, v));
        each_version(|_| {
            configs::incremental_alter_configs_request_for(
                &[(
                    configs::ConfigResource::topic("t"),
                    vec![configs::AlterConfigOp::set("retention.ms", "1")],
                )],
                true,
            )
        });
        each_version(|_| acls::describe_acls_request_for(&topic_filter));
        each_version(|_| acls::create_acls_request_for(std::slice::from_ref(&binding)));
        each_version(|_| acls::delete_acls_request_for(&[binding.to_filter()]));
        each_version(|_| {
            quotas::describe_client_quotas_request_for(
                &[quotas::ClientQuotaFilterComponent::exact("user", "u")],
                false,
            )
        });
        each_version(|_| {
            quotas::alter_client_quotas_request_for(
                &[
                    quotas::ClientQuotaAlteration::new(quotas::ClientQuotaEntity::user(None))
                        .set("producer_byte_rate", 1.0),
                ],
                true,
            )
        });
        each_version(|_| {
            scram::alter_scram_request_for(&[scram::UserScramCredentialAlteration::deletion(
                "u",
                scram::ScramMechanism::ScramSha256,
            )])
            .expect("request")
        });
        each_version(|_| {
            reassignments::alter_reassignments_request_for(&[("t", 0, Some(vec![1]))], 1_000)
        });
        each_version(|_| {
            cluster::elect_leaders_request_for(
                cluster::ElectionType::Preferred,
                Some(&[("t", 0)]),
                1_000,
            )
        });
        each_version(|v| {
            cluster::update_features_request_for(
                &[(
                    "f",
                    cluster::FeatureUpdate::new(1, cluster::FeatureUpgradeType::SafeDowngrade),
                )],
                false,
                1_000,
                v,
            )
        });
    }
}
