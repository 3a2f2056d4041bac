//! Consumer group administration: ListGroups (key 16), DescribeGroups (15), DeleteGroups (42),
//! OffsetFetch (9), OffsetCommit (8), OffsetDelete (47), and consumer group lag (OffsetFetch and
//! ListOffsets together).
//!
//! The request builders and response mappers are pure functions (unit-tested below); the
//! [`Client`] methods route them with the [`crate::Transport`].

use std::collections::HashMap;

use bytes::Bytes;
use kafkit_group_balancer::{Assignment, Subscription};
use kafkit_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    ListGroupsRequest, ListGroupsResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, offset_delete_request,
};
use kafkit_protocol::{ErrorCode, Request, Response};

use super::Client;
use crate::error::{Error, Result};
use crate::ops::offsets::{
    CommittedOffsets, ListGroupOffsets, OffsetAndMetadata, by_topic, offset_commit_request,
    offset_commit_results, offset_fetch_request, offset_fetch_results,
};
use crate::ops::{ResourceResult, check_distinct, code_result, missing, unsupported_from};
use crate::transport::{ConnKind, Transport};
use crate::{IsolationLevel, OffsetSpec};

/// The state of a consumer group, as brokers name it in ListGroups and DescribeGroups (classic
/// groups: KIP-88 / the group coordinator's state machine; `Assigning`, `Reconciling` and
/// `NotReady` come from KIP-848 consumer groups).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GroupState {
    /// A state this library does not know, or none given.
    Unknown,
    /// Members are (re)joining (`PreparingRebalance`).
    PreparingRebalance,
    /// Waiting for the leader's assignment (`CompletingRebalance`).
    CompletingRebalance,
    /// Members have their assignment (`Stable`).
    Stable,
    /// The group has no members and no metadata left, or does not exist (`Dead`).
    Dead,
    /// No members, but committed offsets may remain (`Empty`).
    Empty,
    /// KIP-848: the coordinator is computing a new assignment (`Assigning`).
    Assigning,
    /// KIP-848: members are moving to their new assignment (`Reconciling`).
    Reconciling,
    /// KIP-932 share groups / KIP-848: not ready yet (`NotReady`).
    NotReady,
}

impl GroupState {
    /// Parses a broker's state name (case-insensitive); unknown names give
    /// [`GroupState::Unknown`], as in the Java client.
    pub fn parse(name: &str) -> GroupState {
        const ALL: [GroupState; 8] = [
            GroupState::PreparingRebalance,
            GroupState::CompletingRebalance,
            GroupState::Stable,
            GroupState::Dead,
            GroupState::Empty,
            GroupState::Assigning,
            GroupState::Reconciling,
            GroupState::NotReady,
        ];
        ALL.into_iter()
            .find(|s| s.as_str().eq_ignore_ascii_case(name))
            .unwrap_or(GroupState::Unknown)
    }

    /// The name brokers use on the wire (e.g. `"Stable"`); `"Unknown"` for
    /// [`GroupState::Unknown`].
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Unknown => "Unknown",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
            GroupState::Empty => "Empty",
            GroupState::Assigning => "Assigning",
            GroupState::Reconciling => "Reconciling",
            GroupState::NotReady => "NotReady",
        }
    }
}

impl std::fmt::Display for GroupState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Filters for [`Client::list_groups`] (Java `ListGroupsOptions` / `ListConsumerGroupsOptions`).
///
/// The broker applies them: a states filter needs ListGroups v4+ (KIP-518), a types filter v5+
/// (KIP-848). A broker too old for a filter it is given is reported in
/// [`ListGroupsResult::errors`] as [`Error::UnsupportedVersion`] for ListGroups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListGroupsOptions {
    /// Only groups in one of these states (empty: any state).
    pub states: Vec<GroupState>,
    /// Only groups of these types, e.g. `"classic"`, `"consumer"`, `"share"` (empty: any type).
    pub types: Vec<String>,
}

impl ListGroupsOptions {
    /// No filter: every group of every broker.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps only groups in one of `states`.
    pub fn in_states(mut self, states: impl IntoIterator<Item = GroupState>) -> Self {
        self.states = states.into_iter().collect();
        self
    }

    /// Keeps only groups of one of `types` (`"classic"`, `"consumer"`, `"share"`; KIP-848).
    pub fn with_types<I, S>(mut self, types: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.types = types.into_iter().map(Into::into).collect();
        self
    }

    /// The lowest ListGroups version that carries these filters (0, 4 or 5).
    pub(crate) fn min_version(&self) -> i16 {
        if !self.types.is_empty() {
            5
        } else if !self.states.is_empty() {
            4
        } else {
            0
        }
    }
}

/// One group as a broker listed it (Java `GroupListing` / `ConsumerGroupListing`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupListing {
    /// The group id.
    pub group_id: String,
    /// The protocol type: `"consumer"` for consumer groups, `""` for groups that only hold
    /// committed offsets (no member ever joined), `"connect"` for Kafka Connect...
    pub protocol_type: String,
    /// The group's state; `None` when the broker's ListGroups version (< 4) does not say.
    pub state: Option<GroupState>,
    /// The group's type (`"classic"`, `"consumer"`, `"share"`); `None` below ListGroups v5.
    pub group_type: Option<String>,
    /// The broker that listed it: the group's coordinator.
    pub coordinator: i32,
}

/// The answer of [`Client::list_groups`]: the groups every reachable broker listed, and each
/// broker that failed.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ListGroupsResult {
    /// The groups listed, in broker order (each group is listed by its coordinator only).
    pub groups: Vec<GroupListing>,
    /// `(broker id, why)` for each broker that could not list its groups (its groups are
    /// missing from `groups`).
    pub errors: Vec<(i32, Error)>,
}

/// Builds the ListGroups request for `options` at `version`.
///
/// Errors: [`Error::UnsupportedVersion`] for ListGroups when `version` cannot carry a filter.
pub(crate) fn list_groups_request(
    options: &ListGroupsOptions,
    version: i16,
) -> Result<ListGroupsRequest> {
    let need = options.min_version();
    if version < need {
        return Err(unsupported_from::<ListGroupsRequest>(need, version));
    }
    let req = ListGroupsRequest::default()
        .with_states_filter(
            options
                .states
                .iter()
                .map(|s| s.as_str().to_owned())
                .collect(),
        )
        .with_types_filter(options.types.clone());
    Ok(req)
}

/// Maps one broker's ListGroups answer: its groups, or the top-level error.
pub(crate) fn list_groups_results(
    broker: i32,
    resp: ListGroupsResponse,
    version: i16,
) -> Result<Vec<GroupListing>> {
    let code = resp.error_code;
    if !code.is_ok() {
        return Err(Error::broker("ListGroups", code, None));
    }
    Ok(resp
        .groups
        .into_iter()
        .map(|g| GroupListing {
            group_id: g.group_id,
            protocol_type: g.protocol_type,
            state: (version >= 4).then(|| GroupState::parse(&g.group_state)),
            group_type: (version >= 5).then_some(g.group_type),
            coordinator: broker,
        })
        .collect())
}

/// Whether a listed group is a consumer group, as the Java client decides it: protocol type
/// `"consumer"`, or empty (a group that only has committed offsets).
pub(crate) fn is_consumer_group(g: &GroupListing) -> bool {
    g.protocol_type.is_empty() || g.protocol_type == "consumer"
}

/// One member of a described group (Java `MemberDescription`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemberDescription {
    /// The member id the coordinator gave it.
    pub member_id: String,
    /// Its static membership id (`group.instance.id`, KIP-345), if any.
    pub group_instance_id: Option<String>,
    /// The member's `client.id`.
    pub client_id: String,
    /// The member's host as the coordinator saw it (e.g. `/127.0.0.1`).
    pub client_host: String,
    /// Its subscription decoded with the consumer protocol; `None` when the group's protocol
    /// type is not `"consumer"` or the bytes do not decode (see `metadata`).
    pub subscription: Option<Subscription>,
    /// Its assignment decoded with the consumer protocol; `None` when not a consumer group,
    /// when no assignment was made yet, or when the bytes do not decode (see `assignment_bytes`).
    pub assignment: Option<Assignment>,
    /// The raw protocol metadata (JoinGroup `Metadata`), as the member sent it.
    pub metadata: Bytes,
    /// The raw assignment (SyncGroup `Assignment`).
    pub assignment_bytes: Bytes,
}

/// A described consumer group (Java `ConsumerGroupDescription`).
///
/// A group that does not exist is described (not an error) with state [`GroupState::Dead`] and
/// no members, as brokers answer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerGroupDescription {
    /// The group id.
    pub group_id: String,
    /// The group's state.
    pub state: GroupState,
    /// The protocol type (`"consumer"` for consumer groups, `""` when empty).
    pub protocol_type: String,
    /// The chosen protocol: for consumer groups the assignor name (`"range"`,
    /// `"cooperative-sticky"`).
    pub protocol: String,
    /// The members; empty unless the group is `Stable` or rebalancing.
    pub members: Vec<MemberDescription>,
    /// The ACL operations the caller may perform on the group (a bit field of ACL operation
    /// codes, DescribeGroups v3+, KIP-430) when they were asked for; `None` otherwise.
    pub authorized_operations: Option<i32>,
}

/// Builds a DescribeGroups request for `groups`.
pub(crate) fn describe_groups_request(
    groups: &[&str],
    include_authorized_operations: bool,
) -> DescribeGroupsRequest {
    DescribeGroupsRequest::default()
        .with_groups(groups.iter().map(|g| (*g).to_owned()).collect())
        .with_include_authorized_operations(include_authorized_operations)
}

/// Maps a DescribeGroups answer to one result per entry of `groups`, in order: the description,
/// or [`Error::Broker`] with the group's error code (`COORDINATOR_NOT_AVAILABLE`,
/// `GROUP_AUTHORIZATION_FAILED`, `NETWORK_EXCEPTION` when its coordinator was unreachable...),
/// or [`Error::Protocol`] when the answer leaves the group out.
pub(crate) fn describe_groups_results(
    groups: &[&str],
    asked_authorized_operations: bool,
    resp: DescribeGroupsResponse,
) -> Vec<(String, ResourceResult<ConsumerGroupDescription>)> {
    let mut answered: HashMap<String, _> = resp
        .groups
        .into_iter()
        .map(|g| (g.group_id.clone(), g))
        .collect();
    groups
        .iter()
        .map(|&id| {
            let result = match answered.remove(id) {
                None => Err(missing("DescribeGroups", id)),
                Some(g) => code_result("DescribeGroups", g.error_code, None).map(|()| {
                    let consumer = g.protocol_type == "consumer";
                    ConsumerGroupDescription {
                        group_id: g.group_id,
                        state: GroupState::parse(&g.group_state),
                        protocol_type: g.protocol_type,
                        protocol: g.protocol_data,
                        members: g
                            .members
                            .into_iter()
                            .map(|m| MemberDescription {
                                subscription: consumer
                                    .then(|| Subscription::decode(&m.member_metadata).ok())
                                    .flatten(),
                                assignment: (consumer && !m.member_assignment.is_empty())
                                    .then(|| Assignment::decode(&m.member_assignment).ok())
                                    .flatten(),
                                member_id: m.member_id,
                                group_instance_id: m.group_instance_id,
                                client_id: m.client_id,
                                client_host: m.client_host,
                                metadata: m.member_metadata,
                                assignment_bytes: m.member_assignment,
                            })
                            .collect(),
                        // i32::MIN is the wire's "not requested"; some brokers send -1.
                        authorized_operations: (asked_authorized_operations
                            && g.authorized_operations != i32::MIN)
                            .then_some(g.authorized_operations),
                    }
                }),
            };
            (id.to_owned(), result)
        })
        .collect()
}

/// Builds a DeleteGroups request for `groups`.
pub(crate) fn delete_groups_request(groups: &[&str]) -> DeleteGroupsRequest {
    DeleteGroupsRequest::default()
        .with_groups_names(groups.iter().map(|g| (*g).to_owned()).collect())
}

/// Maps a DeleteGroups answer to one result per entry of `groups`, in order
/// (`GROUP_ID_NOT_FOUND`, `NON_EMPTY_GROUP`, `GROUP_AUTHORIZATION_FAILED`...).
pub(crate) fn delete_groups_results(
    groups: &[&str],
    resp: DeleteGroupsResponse,
) -> Vec<(String, ResourceResult<()>)> {
    // DeleteGroups v3 carries an error message per group (e.g. why GROUP_DELETION_FAILED).
    let mut answered: HashMap<String, (ErrorCode, Option<String>)> = resp
        .results
        .into_iter()
        .map(|r| (r.group_id, (r.error_code, r.error_message)))
        .collect();
    groups
        .iter()
        .map(|&id| {
            let result = match answered.remove(id) {
                Some((c, message)) => code_result("DeleteGroups", c, message),
                None => Err(missing("DeleteGroups", id)),
            };
            (id.to_owned(), result)
        })
        .collect()
}

/// Builds an OffsetDelete request (KIP-496) for `partitions` of `group_id`.
///
/// Errors: [`Error::InvalidArgument`] for an empty list.
pub(crate) fn offset_delete_request(
    group_id: &str,
    partitions: &[(String, i32)],
) -> Result<OffsetDeleteRequest> {
    if partitions.is_empty() {
        return Err(Error::InvalidArgument(
            "no partitions to delete offsets of".into(),
        ));
    }
    let req = OffsetDeleteRequest::default()
        .with_group_id(group_id.to_owned())
        .with_topics(
            by_topic(partitions)
                .into_iter()
                .map(|(name, ps)| {
                    offset_delete_request::OffsetDeleteRequestTopic::default()
                        .with_name(name)
                        .with_partitions(
                            ps.into_iter()
                                .map(|p| {
                                    offset_delete_request::OffsetDeleteRequestPartition::default()
                                        .with_partition_index(p)
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    Ok(req)
}

/// Maps an OffsetDelete answer to one result per partition, in order. A group-level error
/// (`GROUP_ID_NOT_FOUND`, `NON_EMPTY_GROUP`...) fails every partition with that code; a
/// partition's own error is e.g. `GROUP_SUBSCRIBED_TO_TOPIC` (a member still consumes it).
pub(crate) fn offset_delete_results(
    partitions: &[(String, i32)],
    resp: OffsetDeleteResponse,
) -> Vec<((String, i32), ResourceResult<()>)> {
    let answered: HashMap<(&str, i32), ErrorCode> = resp
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| ((t.name.as_str(), p.partition_index), p.error_code))
        })
        .collect();
    partitions
        .iter()
        .map(|tp| {
            let r =
                code_result("OffsetDelete", resp.error_code, None).and_then(|()| {
                    match answered.get(&(tp.0.as_str(), tp.1)) {
                        Some(&c) => code_result("OffsetDelete", c, None),
                        None => Err(missing("OffsetDelete", tp)),
                    }
                });
            (tp.clone(), r)
        })
        .collect()
}

/// A consumer group's lag on one partition (what `kafka-consumer-groups --describe` shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionLag {
    /// The group's committed offset; `None` when it has not committed one.
    pub committed: Option<i64>,
    /// The log end offset: the high watermark, or the last stable offset under
    /// `ReadCommitted`.
    pub end_offset: i64,
    /// `end_offset - committed`, never negative; `None` without a commit.
    pub lag: Option<i64>,
}

/// Computes per-partition lag.
///
/// `partitions`: every `(topic, partition)` to report, in the order to report them;
/// `committed`: the group's commits (a partition absent here has no commit); `ends`: each
/// partition's end offset or the error that prevented reading it (absent: an
/// [`Error::Protocol`]).
pub(crate) fn lag_results(
    partitions: &[(String, i32)],
    committed: CommittedOffsets,
    mut ends: HashMap<(String, i32), ResourceResult<i64>>,
) -> Vec<((String, i32), ResourceResult<PartitionLag>)> {
    let mut committed: HashMap<(String, i32), ResourceResult<Option<OffsetAndMetadata>>> =
        committed.into_iter().collect();
    partitions
        .iter()
        .map(|tp| {
            let commit = committed.remove(tp).unwrap_or(Ok(None));
            let end = ends
                .remove(tp)
                .unwrap_or_else(|| Err(missing("ListOffsets", tp)));
            let r = commit.and_then(|c| {
                let end_offset = end?;
                let committed = c.map(|c| c.offset);
                Ok(PartitionLag {
                    committed,
                    end_offset,
                    lag: committed.map(|c| (end_offset - c).max(0)),
                })
            });
            (tp.clone(), r)
        })
        .collect()
}

// ----- the Client methods ---------------------------------------------------------------------

/// One broker's answer to [`to_every_broker`]: its node id, and the version used with the
/// response, or why it failed.
pub(crate) type BrokerAnswer<R> = (i32, Result<(i16, <R as Request>::Response)>);

/// Sends `make(version)` to every broker in metadata concurrently, each at the highest version
/// it speaks (so a filter a broker is too old for fails that broker with a typed
/// [`Error::UnsupportedVersion`]); one `(node id, result)` per broker, in the metadata's order.
///
/// A broker whose connection fails, or whose answer's top-level `error_code` is
/// `COORDINATOR_LOAD_IN_PROGRESS` or `COORDINATOR_NOT_AVAILABLE`, is asked again after a backoff
/// until the transport's `default_api_timeout`; then its entry is
/// [`Error::DeadlineExceeded`] carrying the last failure.
///
/// Errors: the metadata's error when there is no metadata at all.
pub(crate) async fn to_every_broker<R, M>(t: &Transport, make: M) -> Result<Vec<BrokerAnswer<R>>>
where
    R: Request,
    M: Fn(i16) -> Result<R> + Clone + Send + Sync + 'static,
{
    let md = t.metadata().await?;
    let nodes: Vec<i32> = md.brokers.iter().map(|b| b.node_id).collect();
    let answers = each_node(&nodes, |node| {
        let t = t.clone();
        let make = make.clone();
        async move {
            let api = R::API_KEY.name();
            let mut retry = t.retry(api);
            loop {
                let attempt = retry
                    .attempt(async {
                        let version = t
                            .conn(node, ConnKind::Admin)
                            .await?
                            .version_for::<R>(None)?;
                        let req = make(version)?;
                        Ok::<_, Error>((version, t.round_trip_to(node, &req).await?))
                    })
                    .await;
                let last = match attempt {
                    Ok((version, resp)) => match resp.error_code().unwrap_or(ErrorCode::NONE) {
                        code @ (ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
                        | ErrorCode::COORDINATOR_NOT_AVAILABLE) => Error::broker(api, code, None),
                        _ => return Ok((version, resp)),
                    },
                    Err(e) if e.is_retriable() => e,
                    Err(e) => return Err(e),
                };
                retry.backoff(last).await?;
            }
        }
    })
    .await;
    Ok(nodes.into_iter().zip(answers).collect())
}

/// Runs `f(node)` for every node concurrently (one task each); the results in `nodes`' order.
async fn each_node<T, F, Fut>(nodes: &[i32], mut f: F) -> Vec<Result<T>>
where
    T: Send + 'static,
    F: FnMut(i32) -> Fut,
    Fut: Future<Output = Result<T>> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    for (i, &node) in nodes.iter().enumerate() {
        let fut = f(node);
        set.spawn(async move { (i, fut.await) });
    }
    let mut out: Vec<Option<Result<T>>> = (0..nodes.len()).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        if let Ok((i, r)) = joined {
            out[i] = Some(r);
        }
    }
    out.into_iter()
        .map(|r| {
            r.unwrap_or_else(|| Err(Error::Protocol("the request task did not finish".into())))
        })
        .collect()
}

impl Client {
    /// Lists the groups of every broker (ListGroups, KIP-518 state filter, KIP-848 type
    /// filter), like Java `Admin.listGroups`: each broker lists the groups it coordinates; the
    /// brokers are asked concurrently.
    ///
    /// Returns every group listed and, in [`ListGroupsResult::errors`], each broker that could
    /// not answer (its groups are then missing): e.g. [`Error::UnsupportedVersion`] for
    /// ListGroups when a filter needs a newer version than it speaks.
    ///
    /// # Errors
    ///
    /// Only when no broker answered at all (the first broker's error) or there is no
    /// metadata.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn list_groups(&self, options: &ListGroupsOptions) -> Result<ListGroupsResult> {
        let options = options.clone();
        let answers =
            to_every_broker(self.transport(), move |v| list_groups_request(&options, v)).await?;
        let mut out = ListGroupsResult::default();
        let mut answered = false;
        for (node, r) in answers {
            match r.and_then(|(version, resp)| {
                answered = true;
                list_groups_results(node, resp, version)
            }) {
                Ok(groups) => out.groups.extend(groups),
                Err(e) => out.errors.push((node, e)),
            }
        }
        if !answered && !out.errors.is_empty() {
            return Err(out.errors.swap_remove(0).1);
        }
        Ok(out)
    }

    /// Lists the consumer groups of every broker: [`Client::list_groups`] keeping the groups
    /// whose protocol type is `"consumer"` or empty (groups that only hold committed offsets),
    /// as Java `Admin.listConsumerGroups` does.
    ///
    /// # Errors
    ///
    /// As [`Client::list_groups`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn list_consumer_groups(
        &self,
        options: &ListGroupsOptions,
    ) -> Result<ListGroupsResult> {
        let mut r = self.list_groups(options).await?;
        r.groups.retain(is_consumer_group);
        Ok(r)
    }

    /// Describes consumer groups (DescribeGroups), each at its coordinator (one request per
    /// coordinator, sent concurrently by the transport's split route). Members' subscriptions
    /// and assignments are decoded with the consumer protocol (`kafkit-group-balancer`).
    /// `include_authorized_operations` asks for the caller's ACL operations (KIP-430, v3+).
    ///
    /// Returns one result per group, in the order given.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a group given twice;
    /// [`Error::UnsupportedVersion`] for DescribeGroups when the brokers do not offer it (or
    /// are older than v3 and authorized operations are asked for); otherwise only when no
    /// group got any answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_consumer_groups(
        &self,
        groups: &[&str],
        include_authorized_operations: bool,
    ) -> Result<Vec<(String, ResourceResult<ConsumerGroupDescription>)>> {
        check_distinct("group", groups)?;
        let version = self.version::<DescribeGroupsRequest>().await?;
        if include_authorized_operations && version < 3 {
            return Err(unsupported_from::<DescribeGroupsRequest>(3, version));
        }
        let req = describe_groups_request(groups, include_authorized_operations);
        let resp = self.transport().round_trip(req).await?;
        Ok(describe_groups_results(
            groups,
            include_authorized_operations,
            resp,
        ))
    }

    /// Deletes consumer groups (DeleteGroups, KIP-229), each at its coordinator (one request per
    /// coordinator, the transport's split route). A group must be empty (no members): otherwise
    /// its result is `NON_EMPTY_GROUP`.
    ///
    /// Returns one result per group, in the order given (`GROUP_ID_NOT_FOUND`,
    /// `NON_EMPTY_GROUP`, `GROUP_AUTHORIZATION_FAILED`...).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a group given twice;
    /// [`Error::UnsupportedVersion`] for DeleteGroups when the brokers do not offer it.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn delete_consumer_groups(
        &self,
        groups: &[&str],
    ) -> Result<Vec<(String, ResourceResult<()>)>> {
        check_distinct("group", groups)?;
        let resp = self
            .transport()
            .round_trip(delete_groups_request(groups))
            .await?;
        Ok(delete_groups_results(groups, resp))
    }

    /// Reads committed offsets of one or more groups (OffsetFetch), each at its coordinator;
    /// groups sharing a coordinator go in one request where it speaks v8+ (KIP-709), else one
    /// request per group. `require_stable` (KIP-447, v7+) makes the coordinator refuse
    /// partitions with pending transactional commits (`UNSTABLE_OFFSET_COMMIT`) instead of
    /// answering with the last stable one.
    ///
    /// Returns one result per group, in the order given: the group's error, or one entry per
    /// partition ([`CommittedOffsets`]; `Ok(None)` where nothing is committed).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a group given twice;
    /// [`Error::UnsupportedVersion`] for OffsetFetch when `require_stable` needs a newer
    /// version than the brokers speak; otherwise only when no group got any answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn list_consumer_group_offsets(
        &self,
        groups: &[ListGroupOffsets],
        require_stable: bool,
    ) -> Result<Vec<(String, ResourceResult<CommittedOffsets>)>> {
        let ids: Vec<&str> = groups.iter().map(|g| g.group_id.as_str()).collect();
        check_distinct("group", &ids)?;
        let version = self.version::<OffsetFetchRequest>().await?;
        if require_stable && version < 7 {
            return Err(unsupported_from::<OffsetFetchRequest>(7, version));
        }
        let refs: Vec<&ListGroupOffsets> = groups.iter().collect();
        // The multi-group form; the split route turns it into single-group requests for
        // coordinators older than v8.
        let req = offset_fetch_request(&refs, require_stable, 8)?;
        let resp = self.transport().round_trip(req).await?;
        Ok(offset_fetch_results(&refs, resp))
    }

    /// Commits offsets for a group as an admin (OffsetCommit with generation -1 and no member
    /// id, like Java `Admin.alterConsumerGroupOffsets`): `offsets` holds `(topic, partition,
    /// offset)`. The group must have no active members; otherwise each partition fails (e.g.
    /// `UNKNOWN_MEMBER_ID`).
    ///
    /// Returns one result per entry of `offsets`, in order.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list, a partition given twice or a negative
    /// offset (nothing is sent); the transport's errors when the coordinator could not be
    /// reached by the deadline.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn alter_consumer_group_offsets(
        &self,
        group_id: &str,
        offsets: &[(String, i32, OffsetAndMetadata)],
    ) -> Result<Vec<((String, i32), ResourceResult<()>)>> {
        let keys: Vec<(&str, i32)> = offsets.iter().map(|(t, p, _)| (t.as_str(), *p)).collect();
        check_distinct("partition", &keys)?;
        let req = offset_commit_request(group_id, offsets)?;
        let resp = self.transport().round_trip(req).await?;
        Ok(offset_commit_results(offsets, resp))
    }

    /// Deletes a group's committed offsets for `partitions` (OffsetDelete, KIP-496). Partitions
    /// of a topic that a member of the group still subscribes to fail with
    /// `GROUP_SUBSCRIBED_TO_TOPIC`; a group-level error (`GROUP_ID_NOT_FOUND`...) fails every
    /// partition.
    ///
    /// Returns one result per partition, in order.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a partition given twice;
    /// [`Error::UnsupportedVersion`] for OffsetDelete when the brokers do not offer it; the
    /// transport's errors when the coordinator could not be reached.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn delete_consumer_group_offsets(
        &self,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<((String, i32), ResourceResult<()>)>> {
        check_distinct("partition", partitions)?;
        let req = offset_delete_request(group_id, partitions)?;
        let resp = self.transport().round_trip(req).await?;
        Ok(offset_delete_results(partitions, resp))
    }

    /// The lag of consumer group `group_id` on every partition of the topics it has committed
    /// offsets for: committed offsets (OffsetFetch) against the end offsets (ListOffsets
    /// latest under `isolation_level`, at each partition's leader).
    ///
    /// Returns one result per partition, sorted by topic and partition: [`PartitionLag`] (lag
    /// `None` where the group has no commit), or the partition's error.
    ///
    /// ```
    /// use kafkit::{Client, IsolationLevel, Transport};
    /// use kafkit::admin::{ListGroupOffsets, OffsetAndMetadata};
    ///
    /// let admin = Client::new(Transport::builder(["127.0.0.1:9092"]).build()?);
    ///
    /// # let run = async {
    /// // Rewind an idle group's partition 0 of "orders" to offset 0, then see how far behind it is.
    /// admin
    ///     .alter_consumer_group_offsets("billing", &[("orders".into(), 0, OffsetAndMetadata::new(0))])
    ///     .await?;
    /// for ((topic, partition), lag) in admin
    ///     .consumer_group_lag("billing", IsolationLevel::ReadCommitted)
    ///     .await?
    /// {
    ///     match lag {
    ///         Ok(l) => println!("{topic}/{partition}: lag {:?} (end {})", l.lag, l.end_offset),
    ///         Err(e) => println!("{topic}/{partition}: {e}"),
    ///     }
    /// }
    /// // Several groups in one call (one OffsetFetch per coordinator, KIP-709).
    /// let groups = [ListGroupOffsets::all("billing"), ListGroupOffsets::partitions("audit", [("orders", 0)])];
    /// for (group, offsets) in admin.list_consumer_group_offsets(&groups, false).await? {
    ///     println!("{group}: {:?}", offsets.map(|o| o.len()));
    /// }
    /// # Ok::<(), kafkit::Error>(())
    /// # };
    /// # drop(run);
    /// # Ok::<(), kafkit::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The group's own error (e.g. [`Error::Broker`] with `GROUP_AUTHORIZATION_FAILED`),
    /// and those of [`Client::list_consumer_group_offsets`] and [`Client::list_offsets`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn consumer_group_lag(
        &self,
        group_id: &str,
        isolation_level: IsolationLevel,
    ) -> Result<Vec<((String, i32), ResourceResult<PartitionLag>)>> {
        let committed = self
            .list_consumer_group_offsets(&[ListGroupOffsets::all(group_id)], false)
            .await?
            .pop()
            .map(|(_, r)| r)
            .unwrap_or_else(|| Err(missing("OffsetFetch", group_id)))?;
        let mut topics: Vec<&str> = committed.iter().map(|((t, _), _)| t.as_str()).collect();
        topics.sort_unstable();
        topics.dedup();
        if topics.is_empty() {
            return Ok(Vec::new());
        }
        let md = self.transport().metadata_for(&topics).await?;
        // Indexes instead of a scan per topic: a group may commit for thousands of topics.
        let known: HashMap<&str, &crate::conn::metadata::TopicMetadata> =
            md.topics.iter().map(|t| (t.name.as_str(), &**t)).collect();
        let mut committed_by_topic: HashMap<&str, Vec<i32>> = HashMap::new();
        for ((t, p), _) in &committed {
            committed_by_topic.entry(t.as_str()).or_default().push(*p);
        }
        let mut partitions: Vec<(String, i32)> = Vec::new();
        for &name in &topics {
            match known.get(name) {
                Some(t) if !t.partitions.is_empty() => {
                    partitions.extend(t.partitions.iter().map(|p| (name.to_owned(), p.partition)));
                }
                // A deleted topic: report the committed partitions alone.
                _ => partitions.extend(
                    committed_by_topic
                        .get(name)
                        .into_iter()
                        .flatten()
                        .map(|p| (name.to_owned(), *p)),
                ),
            }
        }
        partitions.sort_unstable();
        partitions.dedup();
        let specs: Vec<(&str, i32, OffsetSpec)> = partitions
            .iter()
            .map(|(t, p)| (t.as_str(), *p, OffsetSpec::Latest))
            .collect();
        let ends: HashMap<(String, i32), ResourceResult<i64>> = self
            .list_offsets(&specs, isolation_level)
            .await?
            .into_iter()
            .map(|(tp, r)| (tp, r.map(|i| i.offset)))
            .collect();
        Ok(lag_results(&partitions, committed, ends))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit_group_balancer::TopicPartitions;
    use kafkit_protocol::messages::{
        delete_groups_response, describe_groups_response, list_groups_response,
        offset_delete_response,
    };
    use kafkit_protocol::{ApiKey, Message};

    use crate::ops::offsets::tests::{code_of, encodes, tp};

    /// Every request this module family builds encodes at each version this library speaks
    /// when given that version (the options a version cannot carry are refused by the
    /// builders with a typed error instead, tested above).
    #[test]
    fn every_request_encodes_at_every_version() {
        fn each_version<M: Message>(build: impl Fn(i16) -> M) {
            for v in M::VERSIONS.min..=M::VERSIONS.max {
                encodes(&build(v), v).unwrap_or_else(|e| panic!("{} v{v}: {e}", M::NAME));
            }
        }
        use crate::admin::{offsets, producers, transactions};
        use crate::{IsolationLevel, OffsetSpec};
        let some = ListGroupOffsets::partitions("g", [("t", 0), ("u", 1)]);
        let all = ListGroupOffsets::all("g");
        each_version(|v| list_groups_request(&ListGroupsOptions::new(), v).expect("no filter"));
        each_version(|_| describe_groups_request(&["a", "b"], false));
        each_version(|_| delete_groups_request(&["a", "b"]));
        each_version(|v| offset_fetch_request(&[&some], false, v).expect("one group"));
        // "Every partition" needs v2; below, the builder refuses it (tested above).
        each_version(|v| {
            offset_fetch_request(&[if v >= 2 { &all } else { &some }], false, v).expect("request")
        });
        each_version(|_| {
            offset_commit_request(
                "g",
                &[(
                    "t".to_owned(),
                    0,
                    OffsetAndMetadata::new(1).leader_epoch(3).metadata("m"),
                )],
            )
            .expect("request")
        });
        each_version(|_| offset_delete_request("g", &[("t".to_owned(), 0)]).expect("request"));
        each_version(|v| {
            crate::ops::offsets::list_offsets_request(
                &[
                    ("t", 0, OffsetSpec::Earliest),
                    ("t", 1, OffsetSpec::Timestamp(5)),
                ],
                IsolationLevel::ReadCommitted,
                v,
            )
            .or_else(|_| {
                crate::ops::offsets::list_offsets_request(
                    &[("t", 0, OffsetSpec::Earliest)],
                    IsolationLevel::ReadUncommitted,
                    v,
                )
            })
            .expect("request")
        });
        each_version(|_| offsets::delete_records_request(&[("t", 0, 5)], 1_000).expect("request"));
        each_version(|_| producers::describe_producers_request(&[("t", 0)]).expect("request"));
        each_version(|_| transactions::describe_transactions_request(&["x"]));
        each_version(|v| {
            let opts = transactions::ListTransactionsOptions::new()
                .in_states([transactions::TransactionState::Ongoing])
                .producer_ids([1]);
            let opts = if v >= 1 {
                opts.longer_than(std::time::Duration::from_secs(1))
            } else {
                opts
            };
            transactions::list_transactions_request(&opts, v).expect("request")
        });
    }

    #[test]
    fn group_state_parses_known_names_and_falls_back_to_unknown() {
        assert_eq!(GroupState::parse("Stable"), GroupState::Stable);
        assert_eq!(
            GroupState::parse("completingrebalance"),
            GroupState::CompletingRebalance
        );
        assert_eq!(GroupState::parse("Empty"), GroupState::Empty);
        assert_eq!(GroupState::parse(""), GroupState::Unknown);
        assert_eq!(GroupState::parse("Melting"), GroupState::Unknown);
        assert_eq!(GroupState::Reconciling.to_string(), "Reconciling");
    }

    #[test]
    fn list_groups_filters_need_their_versions() {
        let none = ListGroupsOptions::new();
        assert!(list_groups_request(&none, 0).is_ok());
        let states = ListGroupsOptions::new().in_states([GroupState::Stable, GroupState::Empty]);
        let req = list_groups_request(&states, 4).expect("v4 carries states");
        assert_eq!(req.states_filter, ["Stable", "Empty"]);
        encodes(&req, 4).expect("encodes at v4");
        match list_groups_request(&states, 3) {
            Err(Error::UnsupportedVersion { api, ours, broker }) => {
                assert_eq!(api, ApiKey::ListGroups);
                assert_eq!(ours.min, 4);
                assert_eq!(broker.map(|b| b.max), Some(3));
            }
            other => panic!("expected UnsupportedVersion, got {other:?}"),
        }
        let types = ListGroupsOptions::new().with_types(["consumer"]);
        assert!(list_groups_request(&types, 4).is_err());
        let req = list_groups_request(&types, 5).expect("v5 carries types");
        assert_eq!(req.types_filter, ["consumer"]);
        encodes(&req, 5).expect("encodes at v5");
    }

    #[test]
    fn list_groups_maps_groups_and_top_level_error() {
        let mut resp = ListGroupsResponse::default();
        let mut g = list_groups_response::ListedGroup::default();
        g.group_id = "g1".into();
        g.protocol_type = "consumer".into();
        g.group_state = "Stable".into();
        g.group_type = "classic".into();
        resp.groups.push(g);
        let got = list_groups_results(2, resp.clone(), 5).expect("no error");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].group_id, "g1");
        assert_eq!(got[0].state, Some(GroupState::Stable));
        assert_eq!(got[0].group_type.as_deref(), Some("classic"));
        assert_eq!(got[0].coordinator, 2);
        assert!(is_consumer_group(&got[0]));
        // Below v4 the state is not on the wire.
        let old = list_groups_results(2, resp.clone(), 3).expect("no error");
        assert_eq!(old[0].state, None);
        assert_eq!(old[0].group_type, None);
        resp.error_code = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS;
        let err = list_groups_results(2, resp, 5).expect_err("top-level error");
        assert_eq!(
            err.error_code(),
            Some(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS)
        );
        assert!(err.is_retriable());
    }

    #[test]
    fn describe_groups_decodes_consumer_protocol_members_in_caller_order() {
        let sub = Subscription::new(["orders"]);
        let asg = Assignment::new(vec![TopicPartitions::new("orders", vec![0, 1])]);
        let mut member = describe_groups_response::DescribedGroupMember::default();
        member.member_id = "m-1".into();
        member.client_id = "cli".into();
        member.client_host = "/127.0.0.1".into();
        member.member_metadata = sub.encode(1).expect("encode subscription");
        member.member_assignment = asg.encode(0).expect("encode assignment");
        let mut g1 = describe_groups_response::DescribedGroup::default();
        g1.group_id = "g1".into();
        g1.group_state = "Stable".into();
        g1.protocol_type = "consumer".into();
        g1.protocol_data = "range".into();
        g1.members.push(member.clone());
        g1.authorized_operations = i32::MIN;
        let mut g2 = describe_groups_response::DescribedGroup::default();
        g2.group_id = "g2".into();
        g2.group_state = "Dead".into();
        g2.authorized_operations = 0b1000;
        let mut other = describe_groups_response::DescribedGroup::default();
        other.group_id = "connect".into();
        other.protocol_type = "connect".into();
        other.members.push(member);
        let mut denied = describe_groups_response::DescribedGroup::default();
        denied.group_id = "denied".into();
        denied.error_code = ErrorCode::GROUP_AUTHORIZATION_FAILED;
        let mut resp = DescribeGroupsResponse::default();
        resp.groups = vec![other, denied, g2, g1];
        let got = describe_groups_results(&["g1", "g2", "connect", "lost", "denied"], true, resp);
        let ids: Vec<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["g1", "g2", "connect", "lost", "denied"]);
        let g1 = got[0].1.as_ref().expect("g1 described");
        assert_eq!(g1.state, GroupState::Stable);
        assert_eq!(g1.protocol, "range");
        assert_eq!(g1.authorized_operations, None);
        let m = &g1.members[0];
        assert_eq!(
            m.subscription.as_ref().map(|s| s.topics.clone()),
            Some(vec!["orders".to_owned()])
        );
        let a = m.assignment.as_ref().expect("assignment decoded");
        assert!(a.contains("orders", 1));
        let g2 = got[1].1.as_ref().expect("g2 described");
        assert_eq!(g2.state, GroupState::Dead);
        assert_eq!(g2.authorized_operations, Some(0b1000));
        // Not the consumer protocol: raw bytes only.
        let connect = got[2].1.as_ref().expect("connect described");
        assert!(connect.members[0].subscription.is_none());
        assert!(!connect.members[0].metadata.is_empty());
        assert!(matches!(got[3].1, Err(Error::Protocol(_))));
        assert_eq!(
            code_of(&got[4].1),
            Some(ErrorCode::GROUP_AUTHORIZATION_FAILED)
        );
    }

    #[test]
    fn describe_groups_keeps_undecodable_bytes_raw() {
        let mut member = describe_groups_response::DescribedGroupMember::default();
        member.member_metadata = Bytes::from_static(&[0]);
        member.member_assignment = Bytes::from_static(&[0, 0, 0, 0, 0, 9]);
        let mut g = describe_groups_response::DescribedGroup::default();
        g.group_id = "g".into();
        g.protocol_type = "consumer".into();
        g.members.push(member);
        let mut resp = DescribeGroupsResponse::default();
        resp.groups.push(g);
        let got = describe_groups_results(&["g"], false, resp);
        let m = &got[0].1.as_ref().expect("described").members[0];
        assert!(m.subscription.is_none());
        assert!(m.assignment.is_none());
        assert_eq!(m.metadata.len(), 1);
    }

    #[test]
    fn delete_groups_maps_per_group_codes() {
        let req = delete_groups_request(&["a", "b"]);
        assert_eq!(req.groups_names, ["a", "b"]);
        let mut resp = DeleteGroupsResponse::default();
        let mut r = delete_groups_response::DeletableGroupResult::default();
        r.group_id = "b".into();
        r.error_code = ErrorCode::NON_EMPTY_GROUP;
        r.error_message = Some("The group has active members.".into());
        resp.results.push(r);
        let mut r = delete_groups_response::DeletableGroupResult::default();
        r.group_id = "a".into();
        resp.results.push(r);
        let got = delete_groups_results(&["a", "b", "c"], resp);
        assert!(got[0].1.is_ok());
        assert_eq!(code_of(&got[1].1), Some(ErrorCode::NON_EMPTY_GROUP));
        // v3's message is kept.
        let e = got[1].1.as_ref().unwrap_err().to_string();
        assert!(e.contains("active members"), "{e}");
        assert!(matches!(got[2].1, Err(Error::Protocol(_))));
    }

    #[test]
    fn offset_delete_maps_group_and_partition_errors() {
        let parts = vec![tp("t", 0), tp("t", 1)];
        let req = offset_delete_request("g", &parts).expect("request");
        assert_eq!(req.topics.len(), 1);
        assert_eq!(req.topics[0].partitions.len(), 2);
        encodes(&req, 0).expect("encodes");
        let mut resp = OffsetDeleteResponse::default();
        let mut t = offset_delete_response::OffsetDeleteResponseTopic::default();
        t.name = "t".into();
        let mut p = offset_delete_response::OffsetDeleteResponsePartition::default();
        p.partition_index = 1;
        p.error_code = ErrorCode::GROUP_SUBSCRIBED_TO_TOPIC;
        t.partitions.push(p);
        let mut p = offset_delete_response::OffsetDeleteResponsePartition::default();
        p.partition_index = 0;
        t.partitions.push(p);
        resp.topics.push(t);
        let got = offset_delete_results(&parts, resp);
        assert!(got[0].1.is_ok());
        assert_eq!(
            code_of(&got[1].1),
            Some(ErrorCode::GROUP_SUBSCRIBED_TO_TOPIC)
        );
        let mut resp = OffsetDeleteResponse::default();
        resp.error_code = ErrorCode::GROUP_ID_NOT_FOUND;
        let got = offset_delete_results(&parts, resp);
        assert!(
            got.iter()
                .all(|(_, r)| code_of(r) == Some(ErrorCode::GROUP_ID_NOT_FOUND))
        );
    }

    #[test]
    fn lag_is_end_minus_committed_and_unknown_without_commit() {
        let parts = vec![tp("t", 0), tp("t", 1), tp("t", 2), tp("t", 3), tp("t", 4)];
        let committed: CommittedOffsets = vec![
            (tp("t", 0), Ok(Some(OffsetAndMetadata::new(4)))),
            (tp("t", 2), Ok(Some(OffsetAndMetadata::new(10)))),
            (tp("t", 3), Ok(Some(OffsetAndMetadata::new(1)))),
            (
                tp("t", 4),
                Err(Error::broker(
                    "OffsetFetch",
                    ErrorCode::UNSTABLE_OFFSET_COMMIT,
                    None,
                )),
            ),
        ];
        let mut ends = HashMap::new();
        ends.insert(tp("t", 0), Ok(10));
        ends.insert(tp("t", 1), Ok(3));
        ends.insert(tp("t", 2), Ok(8)); // records deleted / log truncated below the commit
        ends.insert(
            tp("t", 3),
            Err(Error::broker(
                "ListOffsets",
                ErrorCode::NOT_LEADER_OR_FOLLOWER,
                None,
            )),
        );
        ends.insert(tp("t", 4), Ok(1));
        let got = lag_results(&parts, committed, ends);
        let lag = |i: usize| got[i].1.as_ref().ok().copied();
        assert_eq!(lag(0).and_then(|l| l.lag), Some(6));
        let no_commit = lag(1).expect("end offset known");
        assert_eq!((no_commit.committed, no_commit.lag), (None, None));
        assert_eq!(no_commit.end_offset, 3);
        assert_eq!(lag(2).and_then(|l| l.lag), Some(0), "never negative");
        assert_eq!(code_of(&got[3].1), Some(ErrorCode::NOT_LEADER_OR_FOLLOWER));
        assert_eq!(code_of(&got[4].1), Some(ErrorCode::UNSTABLE_OFFSET_COMMIT));
    }
}
