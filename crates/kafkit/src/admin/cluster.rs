//! Cluster operations: describe cluster (DescribeCluster key 60, KIP-700, falling back to
//! Metadata), describe features (ApiVersions v3+, KIP-584), update features (UpdateFeatures
//! key 57, KIP-584/KIP-778), describe log dirs (DescribeLogDirs key 35, KIP-113) and elect
//! leaders (ElectLeaders key 43, KIP-183/KIP-460).

use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::{
    ApiVersionsResponse, DescribeClusterRequest, DescribeClusterResponse, DescribeLogDirsRequest,
    DescribeLogDirsResponse, DescribeQuorumRequest, DescribeQuorumResponse, ElectLeadersRequest,
    ElectLeadersResponse, MetadataRequest, MetadataResponse, UpdateFeaturesRequest,
    UpdateFeaturesResponse, describe_quorum_request, describe_quorum_response,
    elect_leaders_request, update_features_request,
};
use tokio::task::JoinSet;

use super::Client;
use super::acls::{AclOperation, operations_from_bits};
use crate::conn::metadata::{Broker, Metadata};
use crate::error::{Error, Result};
use crate::ops::{
    ResourceResult, check_distinct, code_result, in_order, unsupported_from, wire_enum,
};

/// The cluster as described by [`Client::describe_cluster`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterDescription {
    /// The cluster id, when the broker sent one.
    pub cluster_id: Option<String>,
    /// The node id of the active controller as brokers see it (with KRaft, a random broker
    /// that forwards to it), `None` when unknown.
    pub controller_id: Option<i32>,
    /// The live brokers.
    pub brokers: Vec<Broker>,
    /// The operations the caller may perform on the cluster (KIP-430), when asked for;
    /// `None` otherwise.
    pub authorized_operations: Option<Vec<AclOperation>>,
    /// The node ids of the fenced brokers among `brokers` (KIP-1073, DescribeCluster v2+): only
    /// filled when [`DescribeClusterOptions::include_fenced_brokers`] asked for them; a fenced
    /// broker is registered but not serving (shut down, or missing its heartbeats).
    pub fenced_brokers: Vec<i32>,
}

/// What [`Client::describe_cluster_with`] asks for (Java `DescribeClusterOptions`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DescribeClusterOptions {
    /// Ask for the caller's cluster operations (KIP-430).
    pub include_authorized_operations: bool,
    /// List the fenced brokers too (KIP-1073, DescribeCluster v2+), marked in
    /// [`ClusterDescription::fenced_brokers`].
    pub include_fenced_brokers: bool,
}

impl DescribeClusterOptions {
    /// Neither authorized operations nor fenced brokers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`DescribeClusterOptions::include_authorized_operations`].
    pub fn include_authorized_operations(mut self, yes: bool) -> Self {
        self.include_authorized_operations = yes;
        self
    }

    /// Sets [`DescribeClusterOptions::include_fenced_brokers`].
    pub fn include_fenced_brokers(mut self, yes: bool) -> Self {
        self.include_fenced_brokers = yes;
        self
    }
}

/// One replica of the metadata log as the quorum leader sees it (Java `QuorumInfo.ReplicaState`,
/// KIP-595 / KIP-836).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuorumReplica {
    /// The replica's node id.
    pub replica_id: i32,
    /// Its log directory id (KIP-853, DescribeQuorum v2+); `None` when not sent (zero UUID).
    pub replica_directory_id: Option<kafkit_protocol::Uuid>,
    /// The end offset of its log as the leader last saw it; `None` when unknown (-1).
    pub log_end_offset: Option<i64>,
    /// When it last fetched from the leader, in ms since the Unix epoch (v1+); `None` when
    /// unknown.
    pub last_fetch_timestamp: Option<i64>,
    /// When it was last caught up with the leader, in ms since the Unix epoch (v1+); `None`
    /// when unknown.
    pub last_caught_up_timestamp: Option<i64>,
}

/// The KRaft metadata quorum (Java `QuorumInfo`, DescribeQuorum, KIP-595 / KIP-836 / KIP-853).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuorumInfo {
    /// The node id of the quorum leader (the active controller).
    pub leader_id: i32,
    /// The leader's epoch.
    pub leader_epoch: i32,
    /// The high watermark of the metadata log.
    pub high_watermark: i64,
    /// The voters (the controllers).
    pub voters: Vec<QuorumReplica>,
    /// The observers (brokers that replicate the log without voting).
    pub observers: Vec<QuorumReplica>,
    /// The voters' controller endpoints (v2+): `(node id, listener name, host, port)`.
    pub nodes: Vec<QuorumNode>,
}

/// A controller endpoint of a voter in [`QuorumInfo::nodes`] (DescribeQuorum v2+, KIP-853).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuorumNode {
    /// The voter's node id.
    pub node_id: i32,
    /// Its listeners as `(name, host, port)`.
    pub listeners: Vec<(String, String, u16)>,
}

impl QuorumInfo {
    /// How far each voter and observer is behind the leader's log end, in offsets:
    /// `(replica id, lag)`; `None` for a replica whose log end offset is unknown.
    pub fn lags(&self) -> Vec<(i32, Option<i64>)> {
        let leader_end = self
            .voters
            .iter()
            .find(|r| r.replica_id == self.leader_id)
            .and_then(|r| r.log_end_offset);
        self.voters
            .iter()
            .chain(&self.observers)
            .map(|r| {
                let lag = match (leader_end, r.log_end_offset) {
                    (Some(l), Some(o)) => Some((l - o).max(0)),
                    _ => None,
                };
                (r.replica_id, lag)
            })
            .collect()
    }
}

/// A feature a broker supports, with its version range (KIP-584).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SupportedFeature {
    /// The feature name, e.g. `metadata.version`, `transaction.version`.
    pub name: String,
    /// The lowest supported version.
    pub min_version: i16,
    /// The highest supported version.
    pub max_version: i16,
}

/// A feature finalized cluster-wide, with its version level range (KIP-584).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FinalizedFeature {
    /// The feature name.
    pub name: String,
    /// The lowest finalized version level.
    pub min_version_level: i16,
    /// The highest finalized version level: the one in use.
    pub max_version_level: i16,
}

/// The features of the cluster (KIP-584), from an ApiVersions v3+ answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FeatureMetadata {
    /// The finalized features.
    pub finalized: Vec<FinalizedFeature>,
    /// The epoch of the finalized features, `None` when not sent.
    pub finalized_epoch: Option<i64>,
    /// The features the answering broker supports.
    pub supported: Vec<SupportedFeature>,
}

wire_enum! {
    /// How [`Client::update_features`] may move a feature's level (UpdateFeatures v1+,
    /// KIP-778).
    pub enum FeatureUpgradeType: i8 {
        /// Only upgrades.
        Upgrade = 1,
        /// A downgrade that keeps metadata.
        SafeDowngrade = 2,
        /// A downgrade that may lose metadata.
        UnsafeDowngrade = 3,
    }
}

/// The new level of a feature for [`Client::update_features`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FeatureUpdate {
    /// The new maximum version level; 0 or less removes the finalized feature (a downgrade).
    pub max_version_level: i16,
    /// How the level may move.
    pub upgrade_type: FeatureUpgradeType,
}

impl FeatureUpdate {
    /// Moves a feature to `max_version_level` in the way `upgrade_type` allows.
    pub fn new(max_version_level: i16, upgrade_type: FeatureUpgradeType) -> FeatureUpdate {
        FeatureUpdate {
            max_version_level,
            upgrade_type,
        }
    }
}

wire_enum! {
    /// Which leader [`Client::elect_leaders`] elects (KIP-460).
    pub enum ElectionType: i8 {
        /// The preferred (first) replica, when it is in sync.
        Preferred = 0,
        /// Any live replica when no in-sync replica is left (may lose data).
        Unclean = 1,
    }
}

/// One partition replica in a log dir.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaInfo {
    /// The topic.
    pub topic: String,
    /// The partition index.
    pub partition: i32,
    /// The size of the replica's log, in bytes.
    pub size: i64,
    /// How far the replica is behind the leader's high watermark (or, for a future replica,
    /// behind the current one), in offsets.
    pub offset_lag: i64,
    /// Whether this is a future replica (being moved here, KIP-113).
    pub is_future: bool,
}

/// One log directory of a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogDirDescription {
    /// The directory's absolute path.
    pub path: String,
    /// `NONE`, or why the directory is unusable (e.g. `KAFKA_STORAGE_ERROR`).
    pub error_code: ErrorCode,
    /// The replicas in the directory.
    pub replicas: Vec<ReplicaInfo>,
    /// The volume's size in bytes (v4+, KIP-827), `None` when not sent.
    pub total_bytes: Option<i64>,
    /// The volume's free bytes (v4+, KIP-827), `None` when not sent.
    pub usable_bytes: Option<i64>,
    /// Whether the directory is cordoned: no new partitions are placed in it (v5+, KIP-1066;
    /// `false` from older brokers).
    pub is_cordoned: bool,
}

impl Client {
    /// Describes the cluster: id, controller, brokers and, with
    /// `include_authorized_operations`, the caller's cluster operations (KIP-430).
    ///
    /// Uses DescribeCluster (KIP-700) and falls back to Metadata when the broker does not offer
    /// it.
    ///
    /// # Errors
    ///
    /// [`Error::Broker`] with the broker's code, and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_cluster(
        &self,
        include_authorized_operations: bool,
    ) -> Result<ClusterDescription> {
        self.describe_cluster_with(
            DescribeClusterOptions::new()
                .include_authorized_operations(include_authorized_operations),
        )
        .await
    }

    /// Describes the cluster as [`Client::describe_cluster`] does, with Java's
    /// `DescribeClusterOptions`: `include_fenced_brokers` (KIP-1073) lists the fenced brokers
    /// too and names them in [`ClusterDescription::fenced_brokers`].
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedVersion`] naming DescribeCluster when fenced brokers are asked of a
    /// broker below DescribeCluster v2, [`Error::Broker`] with the broker's code,
    /// and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_cluster_with(
        &self,
        options: DescribeClusterOptions,
    ) -> Result<ClusterDescription> {
        let include_authorized_operations = options.include_authorized_operations;
        match self.version::<DescribeClusterRequest>().await {
            Ok(version) => {
                if options.include_fenced_brokers && version < 2 {
                    return Err(unsupported_from::<DescribeClusterRequest>(2, version));
                }
                let req = DescribeClusterRequest::default()
                    .with_include_cluster_authorized_operations(include_authorized_operations)
                    .with_include_fenced_brokers(options.include_fenced_brokers);
                let resp = self.transport().round_trip(req).await?;
                describe_cluster_result(resp)
            }
            // No DescribeCluster at all: the Metadata fallback cannot name fenced brokers.
            Err(e @ Error::UnsupportedVersion { .. }) if options.include_fenced_brokers => Err(e),
            Err(Error::UnsupportedVersion { .. }) => {
                let version = self.version::<MetadataRequest>().await?;
                let req = cluster_metadata_request_for(include_authorized_operations, version);
                let resp = self.transport().round_trip(req).await?;
                Ok(cluster_from_metadata(resp))
            }
            Err(e) => Err(e),
        }
    }

    /// Describes the KRaft metadata quorum (DescribeQuorum, KIP-595 / KIP-836; Java
    /// `Admin.describeMetadataQuorum`): the leader, its epoch and high watermark, the voters and
    /// the observers with their log end offsets ([`QuorumInfo::lags`]). Any broker answers; it
    /// forwards to the active controller.
    ///
    /// # Errors
    ///
    /// [`Error::Broker`] with the top-level or the metadata partition's code (e.g.
    /// `NOT_LEADER_OR_FOLLOWER` while a new leader is elected, `CLUSTER_AUTHORIZATION_FAILED`),
    /// [`Error::Protocol`] when the answer has no metadata partition,
    /// [`Error::UnsupportedVersion`] naming DescribeQuorum (a ZooKeeper cluster), and the
    /// transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_metadata_quorum(&self) -> Result<QuorumInfo> {
        let resp = self
            .transport()
            .round_trip(describe_quorum_request())
            .await?;
        quorum_from(resp)
    }

    /// The finalized and supported features of the cluster (KIP-584), from an ApiVersions
    /// exchange with one broker (the controller when known and reachable, else another). Empty
    /// when the broker speaks
    /// ApiVersions below v3.
    ///
    /// # Errors
    ///
    /// The transport's and [`crate::Conn::api_versions`]'s errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_features(&self) -> Result<FeatureMetadata> {
        let (_, conn) = self.any_node().await?;
        let resp = conn.api_versions().await?;
        Ok(features_from(resp))
    }

    /// Changes the finalized level of features (UpdateFeatures API, KIP-584); with
    /// `validate_only` (v1+) the controller only checks. The broker waits up to
    /// [`Client::timeout`].
    ///
    /// Returns one `(feature, result)` per feature in the given order (v2+ brokers answer for
    /// the whole request, which then counts for each feature).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a feature given twice,
    /// [`Error::Broker`] with the top-level code, [`Error::Encode`] for a downgrade type or
    /// `validate_only` a v0 broker cannot carry, [`Error::UnsupportedVersion`] naming
    /// UpdateFeatures, and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn update_features(
        &self,
        updates: &[(&str, FeatureUpdate)],
        validate_only: bool,
    ) -> Result<Vec<(String, ResourceResult<()>)>> {
        let names: Vec<String> = updates.iter().map(|(n, _)| (*n).to_owned()).collect();
        check_distinct("feature", &names)?;
        let version = self.version::<UpdateFeaturesRequest>().await?;
        let req = update_features_request_for(updates, validate_only, self.timeout_ms(), version);
        let resp = self.transport().round_trip(req).await?;
        update_features_results(names, resp)
    }

    /// Describes the log directories of `brokers` (`None`: every broker in the metadata)
    /// (DescribeLogDirs API, sent to each broker concurrently).
    ///
    /// Returns one `(node id, result)` per broker, in the given order (node id order for
    /// `None`); a broker that could not be reached or failed does not fail the others.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a broker given twice; when no
    /// broker answered at all, the first broker's error (e.g. [`Error::UnsupportedVersion`]
    /// naming DescribeLogDirs).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    #[allow(clippy::type_complexity)]
    pub async fn describe_log_dirs(
        &self,
        brokers: Option<&[i32]>,
    ) -> Result<Vec<(i32, ResourceResult<Vec<LogDirDescription>>)>> {
        let nodes: Vec<i32> = match brokers {
            Some(b) => {
                check_distinct("broker", b)?;
                b.to_vec()
            }
            None => {
                let mut ids: Vec<i32> = self
                    .transport()
                    .metadata()
                    .await?
                    .brokers
                    .iter()
                    .map(|b| b.node_id)
                    .collect();
                ids.sort_unstable();
                ids
            }
        };
        let mut tasks = JoinSet::new();
        for node in nodes.iter().copied() {
            let client = self.clone();
            tasks.spawn(async move {
                let req = describe_log_dirs_request();
                let resp = client.transport().round_trip_to(node, &req).await;
                (node, resp.and_then(log_dirs_from))
            });
        }
        let mut answers = Vec::with_capacity(nodes.len());
        while let Some(joined) = tasks.join_next().await {
            answers.push(
                joined.map_err(|e| Error::Protocol(format!("DescribeLogDirs task failed: {e}")))?,
            );
        }
        if !answers.is_empty() && answers.iter().all(|(_, r)| r.is_err()) {
            let first = nodes.first().copied();
            let pos = answers
                .iter()
                .position(|(n, _)| Some(*n) == first)
                .unwrap_or(0);
            if let (_, Err(e)) = answers.swap_remove(pos) {
                return Err(e);
            }
        }
        Ok(in_order("DescribeLogDirs", nodes, answers))
    }

    /// Elects leaders for `partitions` (`None`: every partition) (ElectLeaders API): the
    /// preferred replica, or with [`ElectionType::Unclean`] any live replica (v1+). The broker
    /// waits up to [`Client::timeout`].
    ///
    /// Returns one `((topic, partition), result)` per partition, in the given order (the
    /// broker's for `None`); e.g. `ELECTION_NOT_NEEDED` when the leader is already the
    /// preferred one, `PREFERRED_LEADER_NOT_AVAILABLE`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a partition given twice,
    /// [`Error::Broker`] with the top-level code (v1+), [`Error::Encode`] for an unclean
    /// election on a v0 broker, [`Error::UnsupportedVersion`] naming ElectLeaders, and the
    /// transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    #[allow(clippy::type_complexity)]
    pub async fn elect_leaders(
        &self,
        election_type: ElectionType,
        partitions: Option<&[(&str, i32)]>,
    ) -> Result<Vec<((String, i32), ResourceResult<()>)>> {
        let keys: Option<Vec<(String, i32)>> =
            partitions.map(|ps| ps.iter().map(|(t, p)| ((*t).to_owned(), *p)).collect());
        if let Some(k) = &keys {
            check_distinct("partition", k)?;
        }
        let req = elect_leaders_request_for(election_type, partitions, self.timeout_ms());
        let resp = self.transport().round_trip(req).await?;
        elect_leaders_results(keys, resp)
    }
}

/// A [`ClusterDescription`] from a DescribeCluster response, or its error.
pub(crate) fn describe_cluster_result(resp: DescribeClusterResponse) -> Result<ClusterDescription> {
    code_result("DescribeCluster", resp.error_code, resp.error_message)?;
    Ok(ClusterDescription {
        cluster_id: Some(resp.cluster_id).filter(|c| !c.is_empty()),
        controller_id: Some(resp.controller_id).filter(|c| *c >= 0),
        fenced_brokers: resp
            .brokers
            .iter()
            .filter(|b| b.is_fenced)
            .map(|b| b.broker_id)
            .collect(),
        brokers: resp
            .brokers
            .into_iter()
            .map(|b| Broker {
                node_id: b.broker_id,
                host: b.host,
                port: b.port,
                rack: b.rack,
            })
            .collect(),
        authorized_operations: operations_from_bits(resp.cluster_authorized_operations),
    })
}

/// The Metadata request of the [`Client::describe_cluster`] fallback at `version`: no topics,
/// the cluster's authorized operations when asked and carried (v8-10).
pub(crate) fn cluster_metadata_request_for(
    include_authorized_operations: bool,
    version: i16,
) -> MetadataRequest {
    MetadataRequest::default()
        // An empty list asks for no topic (v1+); v0 lists every topic, which is harmless.
        .with_topics(Some(Vec::new()))
        .with_allow_auto_topic_creation(version < 4)
        .with_include_cluster_authorized_operations(
            include_authorized_operations && (8..=10).contains(&version),
        )
}

/// A [`ClusterDescription`] from a Metadata response (the fallback).
pub(crate) fn cluster_from_metadata(resp: MetadataResponse) -> ClusterDescription {
    let authorized_operations = operations_from_bits(resp.cluster_authorized_operations);
    let md = Metadata::from(resp);
    ClusterDescription {
        cluster_id: md.cluster_id,
        controller_id: Some(md.controller_id).filter(|c| *c >= 0),
        brokers: md.brokers,
        authorized_operations,
        fenced_brokers: Vec::new(),
    }
}

/// The name of the KRaft metadata log, the only topic DescribeQuorum describes.
const METADATA_TOPIC: &str = "__cluster_metadata";

/// The DescribeQuorum request for the metadata log's one partition.
pub(crate) fn describe_quorum_request() -> DescribeQuorumRequest {
    DescribeQuorumRequest::default().with_topics(vec![
        describe_quorum_request::TopicData::default()
            .with_topic_name(METADATA_TOPIC.to_owned())
            .with_partitions(vec![
                describe_quorum_request::PartitionData::default().with_partition_index(0),
            ]),
    ])
}

/// A [`QuorumInfo`] from a DescribeQuorum answer: the metadata partition's, or the error.
pub(crate) fn quorum_from(resp: DescribeQuorumResponse) -> Result<QuorumInfo> {
    code_result("DescribeQuorum", resp.error_code, resp.error_message)?;
    let part = resp
        .topics
        .into_iter()
        .filter(|t| t.topic_name == METADATA_TOPIC)
        .flat_map(|t| t.partitions)
        .find(|p| p.partition_index == 0)
        .ok_or_else(|| {
            Error::Protocol("the DescribeQuorum response has no metadata partition".into())
        })?;
    code_result("DescribeQuorum", part.error_code, part.error_message)?;
    let known = |v: i64| Some(v).filter(|v| *v >= 0);
    let replica = |r: describe_quorum_response::ReplicaState| QuorumReplica {
        replica_id: r.replica_id,
        replica_directory_id: Some(r.replica_directory_id).filter(|u| !u.is_zero()),
        log_end_offset: known(r.log_end_offset),
        last_fetch_timestamp: known(r.last_fetch_timestamp),
        last_caught_up_timestamp: known(r.last_caught_up_timestamp),
    };
    Ok(QuorumInfo {
        leader_id: part.leader_id,
        leader_epoch: part.leader_epoch,
        high_watermark: part.high_watermark,
        voters: part.current_voters.into_iter().map(replica).collect(),
        observers: part.observers.into_iter().map(replica).collect(),
        nodes: resp
            .nodes
            .into_iter()
            .map(|n| QuorumNode {
                node_id: n.node_id,
                listeners: n
                    .listeners
                    .into_iter()
                    .map(|l| (l.name, l.host, l.port))
                    .collect(),
            })
            .collect(),
    })
}

/// The features of an ApiVersions response.
pub(crate) fn features_from(resp: ApiVersionsResponse) -> FeatureMetadata {
    FeatureMetadata {
        finalized: resp
            .finalized_features
            .into_iter()
            .map(|f| FinalizedFeature {
                name: f.name,
                min_version_level: f.min_version_level,
                max_version_level: f.max_version_level,
            })
            .collect(),
        finalized_epoch: Some(resp.finalized_features_epoch).filter(|e| *e >= 0),
        supported: resp
            .supported_features
            .into_iter()
            .map(|f| SupportedFeature {
                name: f.name,
                min_version: f.min_version,
                max_version: f.max_version,
            })
            .collect(),
    }
}

/// The UpdateFeatures request at `version` (v0 says "downgrade allowed" with a flag, v1+
/// with the upgrade type).
pub(crate) fn update_features_request_for(
    updates: &[(&str, FeatureUpdate)],
    validate_only: bool,
    timeout_ms: i32,
    version: i16,
) -> UpdateFeaturesRequest {
    UpdateFeaturesRequest::default()
        .with_timeout_ms(timeout_ms)
        .with_validate_only(validate_only)
        .with_feature_updates(
            updates
                .iter()
                .map(|(name, u)| {
                    let mut f = update_features_request::FeatureUpdateKey::default()
                        .with_feature((*name).to_owned())
                        .with_max_version_level(u.max_version_level);
                    if version == 0 {
                        f.allow_downgrade = u.upgrade_type != FeatureUpgradeType::Upgrade;
                    } else {
                        f.upgrade_type = u.upgrade_type.code();
                    }
                    f
                })
                .collect(),
        )
}

/// Per-feature results of an UpdateFeatures response in the order of `names`, or the
/// top-level error. v2+ responses carry no per-feature results: success counts for each.
pub(crate) fn update_features_results(
    names: Vec<String>,
    resp: UpdateFeaturesResponse,
) -> Result<Vec<(String, ResourceResult<()>)>> {
    code_result("UpdateFeatures", resp.error_code, resp.error_message)?;
    if resp.results.is_empty() {
        return Ok(names.into_iter().map(|n| (n, Ok(()))).collect());
    }
    let answers = resp.results.into_iter().map(|r| {
        (
            r.feature,
            code_result("UpdateFeatures", r.error_code, r.error_message),
        )
    });
    Ok(in_order("UpdateFeatures", names, answers))
}

/// The DescribeLogDirs request for every replica of a broker: `topics` null. The generated
/// default is an empty list (as in Kafka's Java message classes), which asks for no topic:
/// Kafka then lists each log dir with no replica in it.
pub(crate) fn describe_log_dirs_request() -> DescribeLogDirsRequest {
    DescribeLogDirsRequest::default().with_topics(None)
}

/// The log dirs of a DescribeLogDirs response, or its top-level error (v3+).
pub(crate) fn log_dirs_from(resp: DescribeLogDirsResponse) -> Result<Vec<LogDirDescription>> {
    code_result("DescribeLogDirs", resp.error_code, None)?;
    Ok(resp
        .results
        .into_iter()
        .map(|d| LogDirDescription {
            path: d.log_dir,
            error_code: d.error_code,
            replicas: d
                .topics
                .into_iter()
                .flat_map(|t| {
                    let name = t.name;
                    t.partitions.into_iter().map(move |p| ReplicaInfo {
                        topic: name.clone(),
                        partition: p.partition_index,
                        size: p.partition_size,
                        offset_lag: p.offset_lag,
                        is_future: p.is_future_key,
                    })
                })
                .collect(),
            total_bytes: Some(d.total_bytes).filter(|b| *b >= 0),
            usable_bytes: Some(d.usable_bytes).filter(|b| *b >= 0),
            is_cordoned: d.is_cordoned,
        })
        .collect())
}

/// The ElectLeaders request; `None` partitions asks for every partition.
pub(crate) fn elect_leaders_request_for(
    election_type: ElectionType,
    partitions: Option<&[(&str, i32)]>,
    timeout_ms: i32,
) -> ElectLeadersRequest {
    ElectLeadersRequest::default()
        .with_election_type(election_type.code())
        .with_timeout_ms(timeout_ms)
        .with_topic_partitions(partitions.map(|ps| {
            let mut out: Vec<elect_leaders_request::TopicPartitions> = Vec::new();
            for (topic, p) in ps {
                match out.iter_mut().find(|t| t.topic == *topic) {
                    Some(t) => t.partitions.push(*p),
                    None => {
                        let mut t = elect_leaders_request::TopicPartitions::default()
                            .with_topic((*topic).to_owned());
                        t.partitions.push(*p);
                        out.push(t);
                    }
                }
            }
            out
        }))
}

/// Per-partition results of an ElectLeaders response (in the order of `keys` when given), or
/// the top-level error.
#[allow(clippy::type_complexity)]
pub(crate) fn elect_leaders_results(
    keys: Option<Vec<(String, i32)>>,
    resp: ElectLeadersResponse,
) -> Result<Vec<((String, i32), ResourceResult<()>)>> {
    code_result("ElectLeaders", resp.error_code, None)?;
    let answers = resp.replica_election_results.into_iter().flat_map(|t| {
        let topic = t.topic;
        t.partition_result.into_iter().map(move |p| {
            (
                (topic.clone(), p.partition_id),
                code_result("ElectLeaders", p.error_code, p.error_message),
            )
        })
    });
    Ok(match keys {
        Some(keys) => in_order("ElectLeaders", keys, answers),
        None => answers.collect(),
    })
}

#[cfg(test)]
mod tests {
    use kafkit_protocol::messages::{
        api_versions_response, describe_cluster_response, describe_log_dirs_response,
        elect_leaders_response, metadata_response, update_features_response,
    };

    use super::*;

    #[test]
    fn cluster_descriptions_from_both_apis() {
        let mut resp = DescribeClusterResponse::default();
        resp.cluster_id = "c1".into();
        resp.controller_id = 2;
        resp.cluster_authorized_operations = i32::MIN;
        let mut b = describe_cluster_response::DescribeClusterBroker::default();
        b.broker_id = 2;
        b.host = "h".into();
        b.port = 9092;
        resp.brokers.push(b);
        let mut fenced = describe_cluster_response::DescribeClusterBroker::default();
        fenced.broker_id = 3;
        fenced.is_fenced = true;
        resp.brokers.push(fenced);
        let d = describe_cluster_result(resp).unwrap();
        assert_eq!(d.fenced_brokers, vec![3]);
        assert_eq!(d.brokers.len(), 2);
        assert_eq!(d.cluster_id.as_deref(), Some("c1"));
        assert_eq!(d.controller_id, Some(2));
        assert_eq!(d.brokers[0].addr(), "h:9092");
        assert_eq!(d.authorized_operations, None);

        let mut resp = DescribeClusterResponse::default();
        resp.error_code = ErrorCode::CLUSTER_AUTHORIZATION_FAILED;
        assert!(describe_cluster_result(resp).is_err());

        let mut md = MetadataResponse::default();
        md.controller_id = -1;
        md.cluster_authorized_operations = 1 << 8;
        let mut b = metadata_response::MetadataResponseBroker::default();
        b.node_id = 5;
        md.brokers.push(b);
        let d = cluster_from_metadata(md);
        assert_eq!(d.controller_id, None);
        assert_eq!(d.brokers[0].node_id, 5);
        assert_eq!(d.authorized_operations, Some(vec![AclOperation::Describe]));
    }

    #[test]
    fn quorum_is_mapped_with_lags() {
        let req = describe_quorum_request();
        assert_eq!(req.topics[0].topic_name, "__cluster_metadata");
        assert_eq!(req.topics[0].partitions[0].partition_index, 0);

        let rs = |id: i32, leo: i64| {
            let mut r = describe_quorum_response::ReplicaState::default();
            r.replica_id = id;
            r.log_end_offset = leo;
            r.last_fetch_timestamp = -1;
            r
        };
        let mut p = describe_quorum_response::PartitionData::default();
        p.leader_id = 1;
        p.leader_epoch = 4;
        p.high_watermark = 90;
        p.current_voters = vec![rs(1, 100), rs(2, 70)];
        p.observers = vec![rs(7, -1)];
        let mut t = describe_quorum_response::TopicData::default();
        t.topic_name = "__cluster_metadata".into();
        t.partitions = vec![p];
        let mut resp = DescribeQuorumResponse::default();
        resp.topics = vec![t];
        let q = quorum_from(resp).unwrap();
        assert_eq!((q.leader_id, q.leader_epoch, q.high_watermark), (1, 4, 90));
        assert_eq!(q.voters[1].last_fetch_timestamp, None);
        assert_eq!(q.lags(), vec![(1, Some(0)), (2, Some(30)), (7, None)]);

        // No metadata partition, or a partition error: typed errors, no panic.
        assert!(matches!(
            quorum_from(DescribeQuorumResponse::default()),
            Err(Error::Protocol(_))
        ));
        let mut p = describe_quorum_response::PartitionData::default();
        p.error_code = ErrorCode::NOT_LEADER_OR_FOLLOWER;
        let mut t = describe_quorum_response::TopicData::default();
        t.topic_name = "__cluster_metadata".into();
        t.partitions = vec![p];
        let mut resp = DescribeQuorumResponse::default();
        resp.topics = vec![t];
        let e = quorum_from(resp).unwrap_err();
        assert_eq!(e.error_code(), Some(ErrorCode::NOT_LEADER_OR_FOLLOWER));
    }

    #[test]
    fn features_are_mapped() {
        let mut resp = ApiVersionsResponse::default();
        let mut f = api_versions_response::FinalizedFeatureKey::default();
        f.name = "metadata.version".into();
        f.min_version_level = 1;
        f.max_version_level = 20;
        resp.finalized_features.push(f);
        resp.finalized_features_epoch = 7;
        let mut s = api_versions_response::SupportedFeatureKey::default();
        s.name = "metadata.version".into();
        s.max_version = 21;
        resp.supported_features.push(s);
        let m = features_from(resp);
        assert_eq!(m.finalized[0].max_version_level, 20);
        assert_eq!(m.finalized_epoch, Some(7));
        assert_eq!(m.supported[0].max_version, 21);
    }

    #[test]
    fn update_features_request_per_version_and_results() {
        let updates = [(
            "a",
            FeatureUpdate::new(2, FeatureUpgradeType::SafeDowngrade),
        )];
        let v0 = update_features_request_for(&updates, false, 100, 0);
        assert!(v0.feature_updates[0].allow_downgrade);
        // v0 has no upgrade type: the field keeps its default, so the request encodes.
        let mut buf = bytes::BytesMut::new();
        kafkit_protocol::Message::encode(&v0, &mut buf, 0).expect("v0 encodes");
        let v1 = update_features_request_for(&updates, true, 100, 1);
        assert!(!v1.feature_updates[0].allow_downgrade);
        assert_eq!(v1.feature_updates[0].upgrade_type, 2);
        assert!(v1.validate_only);

        let mut resp = UpdateFeaturesResponse::default();
        let mut r = update_features_response::UpdatableFeatureResult::default();
        r.feature = "b".into();
        r.error_code = ErrorCode::INVALID_UPDATE_VERSION;
        resp.results.push(r);
        let mut r = update_features_response::UpdatableFeatureResult::default();
        r.feature = "a".into();
        resp.results.push(r);
        let out = update_features_results(vec!["a".into(), "b".into()], resp).unwrap();
        assert!(out[0].1.is_ok());
        assert!(out[1].1.is_err());
        // v2: no per-feature results; success counts for each.
        let out =
            update_features_results(vec!["a".into()], UpdateFeaturesResponse::default()).unwrap();
        assert!(out[0].1.is_ok());
    }

    #[test]
    fn log_dirs_are_asked_for_every_topic() {
        // An empty list would ask for no topic (Kafka answers the dirs without replicas).
        assert_eq!(describe_log_dirs_request().topics, None);
    }

    #[test]
    fn log_dirs_and_elections_are_mapped() {
        let mut resp = DescribeLogDirsResponse::default();
        let mut d = describe_log_dirs_response::DescribeLogDirsResult::default();
        d.log_dir = "/data".into();
        d.total_bytes = -1;
        d.usable_bytes = 10;
        d.is_cordoned = true;
        let mut t = describe_log_dirs_response::DescribeLogDirsTopic::default();
        t.name = "t".into();
        let mut p = describe_log_dirs_response::DescribeLogDirsPartition::default();
        p.partition_index = 3;
        p.partition_size = 1234;
        t.partitions.push(p);
        d.topics.push(t);
        resp.results.push(d);
        let dirs = log_dirs_from(resp).unwrap();
        assert_eq!(dirs[0].path, "/data");
        assert_eq!(dirs[0].total_bytes, None);
        assert_eq!(dirs[0].usable_bytes, Some(10));
        assert!(dirs[0].is_cordoned);
        assert_eq!(dirs[0].replicas[0].size, 1234);

        let req = elect_leaders_request_for(
            ElectionType::Unclean,
            Some(&[("a", 0), ("b", 1), ("a", 2)]),
            100,
        );
        assert_eq!(req.election_type, 1);
        let tps = req.topic_partitions.as_ref().unwrap();
        assert_eq!(tps[0].partitions, vec![0, 2]);
        assert!(
            elect_leaders_request_for(ElectionType::Preferred, None, 1)
                .topic_partitions
                .is_none()
        );

        let mut resp = ElectLeadersResponse::default();
        let mut t = elect_leaders_response::ReplicaElectionResult::default();
        t.topic = "a".into();
        for (p, code) in [(2, ErrorCode::ELECTION_NOT_NEEDED), (0, ErrorCode::NONE)] {
            let mut r = elect_leaders_response::PartitionResult::default();
            r.partition_id = p;
            r.error_code = code;
            t.partition_result.push(r);
        }
        resp.replica_election_results.push(t);
        let out =
            elect_leaders_results(Some(vec![("a".into(), 0), ("a".into(), 2)]), resp).unwrap();
        assert!(out[0].1.is_ok());
        assert_eq!(
            out[1].1.as_ref().unwrap_err().error_code(),
            Some(ErrorCode::ELECTION_NOT_NEEDED)
        );
    }
}
