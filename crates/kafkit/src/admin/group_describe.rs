//! The group describes of the new group types, each sent to the groups' coordinators (the
//! transport's split route, one request per coordinator):
//!
//! - ConsumerGroupDescribe (key 69, v0-1; KIP-848 consumer groups, `group.protocol=consumer`;
//!   v1 adds each member's type, KIP-1099),
//! - ShareGroupDescribe (key 77, v1; KIP-932 share groups),
//! - StreamsGroupDescribe (key 89, v0-1; KIP-1071 streams groups).
//!
//! A group of another type, or none, answers `GROUP_ID_NOT_FOUND` for that group alone. Classic
//! groups are described with DescribeGroups ([`Client::describe_consumer_groups`]).

use kafkit_protocol::Uuid;
use kafkit_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ShareGroupDescribeRequest,
    ShareGroupDescribeResponse, StreamsGroupDescribeRequest, StreamsGroupDescribeResponse,
    consumer_group_describe_response, share_group_describe_response,
    streams_group_describe_response,
};

use super::Client;
use super::acls::{AclOperation, operations_from_bits};
use super::groups::GroupState;
use crate::error::Result;
use crate::ops::{ResourceResult, check_distinct, code_result, missing};

/// The partitions of one topic in a member's assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicPartitions {
    /// The topic id.
    pub topic_id: Uuid,
    /// The topic name.
    pub topic: String,
    /// The partition indexes.
    pub partitions: Vec<i32>,
}

/// Whether a member of a KIP-848 consumer group speaks the new protocol or joined with the
/// classic one (KIP-1099, ConsumerGroupDescribe v1+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GroupMemberType {
    /// Not sent (v0) or not known.
    Unknown,
    /// A classic member (JoinGroup / SyncGroup) of a consumer group (upgrade path).
    Classic,
    /// A member using ConsumerGroupHeartbeat.
    Consumer,
}

impl GroupMemberType {
    fn from_code(code: i8) -> GroupMemberType {
        match code {
            0 => GroupMemberType::Classic,
            1 => GroupMemberType::Consumer,
            _ => GroupMemberType::Unknown,
        }
    }
}

/// A member of a KIP-848 consumer group (Java `MemberDescription` of a consumer group).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Kip848Member {
    /// The member id.
    pub member_id: String,
    /// The static membership id (`group.instance.id`), if any.
    pub instance_id: Option<String>,
    /// The member's rack, if any.
    pub rack_id: Option<String>,
    /// The member's epoch.
    pub member_epoch: i32,
    /// The member's `client.id`.
    pub client_id: String,
    /// The member's host as the coordinator saw it.
    pub client_host: String,
    /// The topics it subscribes to by name.
    pub subscribed_topic_names: Vec<String>,
    /// The regular expression it subscribes with (KIP-848 RE2J), if any.
    pub subscribed_topic_regex: Option<String>,
    /// Its current assignment.
    pub assignment: Vec<TopicPartitions>,
    /// The assignment it is moving to.
    pub target_assignment: Vec<TopicPartitions>,
    /// Whether it speaks the new protocol (v1+).
    pub member_type: GroupMemberType,
}

/// A described KIP-848 consumer group (ConsumerGroupDescribe; Java `ConsumerGroupDescription`
/// of a group of type `consumer`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Kip848GroupDescription {
    /// The group id.
    pub group_id: String,
    /// The group's state (`Empty`, `Assigning`, `Reconciling`, `Stable`, `Dead`).
    pub state: GroupState,
    /// The group epoch.
    pub group_epoch: i32,
    /// The epoch of the target assignment.
    pub assignment_epoch: i32,
    /// The server-side assignor (`uniform`, `range`).
    pub assignor_name: String,
    /// The members.
    pub members: Vec<Kip848Member>,
    /// The caller's operations on the group, when asked for (KIP-430).
    pub authorized_operations: Option<Vec<AclOperation>>,
}

/// A member of a share group (KIP-932; Java `ShareMemberDescription`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShareMember {
    /// The member id.
    pub member_id: String,
    /// The member's rack, if any.
    pub rack_id: Option<String>,
    /// The member's epoch.
    pub member_epoch: i32,
    /// The member's `client.id`.
    pub client_id: String,
    /// The member's host as the coordinator saw it.
    pub client_host: String,
    /// The topics it subscribes to.
    pub subscribed_topic_names: Vec<String>,
    /// Its assignment.
    pub assignment: Vec<TopicPartitions>,
}

/// A described share group (ShareGroupDescribe, KIP-932; Java `ShareGroupDescription`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShareGroupDescription {
    /// The group id.
    pub group_id: String,
    /// The group's state (`Empty`, `Stable`, `Dead`).
    pub state: GroupState,
    /// The group epoch.
    pub group_epoch: i32,
    /// The epoch of the target assignment.
    pub assignment_epoch: i32,
    /// The server-side assignor (`simple`).
    pub assignor_name: String,
    /// The members.
    pub members: Vec<ShareMember>,
    /// The caller's operations on the group, when asked for (KIP-430).
    pub authorized_operations: Option<Vec<AclOperation>>,
}

/// The tasks of one subtopology: `(subtopology id, partitions)`.
pub type StreamsTasks = (String, Vec<i32>);

/// A member of a streams group (KIP-1071; Java `StreamsGroupMemberDescription`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamsMember {
    /// The member id.
    pub member_id: String,
    /// The member's epoch.
    pub member_epoch: i32,
    /// The static membership id, if any.
    pub instance_id: Option<String>,
    /// The member's rack, if any.
    pub rack_id: Option<String>,
    /// The member's `client.id`.
    pub client_id: String,
    /// The member's host as the coordinator saw it.
    pub client_host: String,
    /// The topology epoch the member runs.
    pub topology_epoch: i32,
    /// The id of the Streams process (several members may share one).
    pub process_id: String,
    /// Whether it joined with the classic protocol.
    pub is_classic: bool,
    /// Its active tasks.
    pub active_tasks: Vec<StreamsTasks>,
    /// Its standby tasks.
    pub standby_tasks: Vec<StreamsTasks>,
    /// Its warm-up tasks.
    pub warmup_tasks: Vec<StreamsTasks>,
}

/// A subtopology of a streams group's topology.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamsSubtopology {
    /// The subtopology id.
    pub subtopology_id: String,
    /// The topics it reads.
    pub source_topics: Vec<String>,
    /// The repartition topics it writes.
    pub repartition_sink_topics: Vec<String>,
    /// Its state changelog topics.
    pub state_changelog_topics: Vec<String>,
    /// Its repartition source topics.
    pub repartition_source_topics: Vec<String>,
}

/// A described streams group (StreamsGroupDescribe, KIP-1071; Java `StreamsGroupDescription`).
/// The topology description of KIP-1331 is not asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamsGroupDescription {
    /// The group id.
    pub group_id: String,
    /// The group's state (`Empty`, `NotReady`, `Assigning`, `Reconciling`, `Stable`, `Dead`).
    pub state: GroupState,
    /// The group epoch.
    pub group_epoch: i32,
    /// The epoch of the target assignment.
    pub assignment_epoch: i32,
    /// The topology's epoch, `None` when the group has no topology yet.
    pub topology_epoch: Option<i32>,
    /// The topology's subtopologies (empty when not known).
    pub subtopologies: Vec<StreamsSubtopology>,
    /// The members.
    pub members: Vec<StreamsMember>,
    /// The caller's operations on the group, when asked for (KIP-430).
    pub authorized_operations: Option<Vec<AclOperation>>,
}

/// `answered` matched to `groups` by id, in the caller's order; a group the answer leaves out
/// gets [`crate::Error::Protocol`], a group with an error code [`crate::Error::Broker`].
fn per_group<G, T>(
    operation: &'static str,
    groups: &[&str],
    answered: Vec<G>,
    id: impl Fn(&G) -> &str,
    check: impl Fn(&G) -> ResourceResult<()>,
    map: impl Fn(G) -> T,
) -> Vec<(String, ResourceResult<T>)> {
    let mut by_id: std::collections::HashMap<String, G> = answered
        .into_iter()
        .map(|g| (id(&g).to_owned(), g))
        .collect();
    groups
        .iter()
        .map(|&g| {
            let r = match by_id.remove(g) {
                None => Err(missing(operation, g)),
                Some(a) => check(&a).map(|()| map(a)),
            };
            (g.to_owned(), r)
        })
        .collect()
}

fn consumer_topics(a: consumer_group_describe_response::Assignment) -> Vec<TopicPartitions> {
    a.topic_partitions
        .into_iter()
        .map(|t| TopicPartitions {
            topic_id: t.topic_id,
            topic: t.topic_name,
            partitions: t.partitions,
        })
        .collect()
}

fn share_topics(a: share_group_describe_response::Assignment) -> Vec<TopicPartitions> {
    a.topic_partitions
        .into_iter()
        .map(|t| TopicPartitions {
            topic_id: t.topic_id,
            topic: t.topic_name,
            partitions: t.partitions,
        })
        .collect()
}

fn streams_tasks(ts: Vec<streams_group_describe_response::TaskIds>) -> Vec<StreamsTasks> {
    ts.into_iter()
        .map(|t| (t.subtopology_id, t.partitions))
        .collect()
}

/// Maps a ConsumerGroupDescribe answer to one result per group of `groups`, in order.
pub(crate) fn kip848_groups_from(
    groups: &[&str],
    resp: ConsumerGroupDescribeResponse,
) -> Vec<(String, ResourceResult<Kip848GroupDescription>)> {
    per_group(
        "ConsumerGroupDescribe",
        groups,
        resp.groups,
        |g| &g.group_id,
        |g| {
            code_result(
                "ConsumerGroupDescribe",
                g.error_code,
                g.error_message.clone(),
            )
        },
        |g| Kip848GroupDescription {
            group_id: g.group_id,
            state: GroupState::parse(&g.group_state),
            group_epoch: g.group_epoch,
            assignment_epoch: g.assignment_epoch,
            assignor_name: g.assignor_name,
            members: g
                .members
                .into_iter()
                .map(|m| Kip848Member {
                    member_id: m.member_id,
                    instance_id: m.instance_id,
                    rack_id: m.rack_id,
                    member_epoch: m.member_epoch,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    subscribed_topic_names: m.subscribed_topic_names,
                    subscribed_topic_regex: m.subscribed_topic_regex,
                    assignment: consumer_topics(m.assignment),
                    target_assignment: consumer_topics(m.target_assignment),
                    member_type: GroupMemberType::from_code(m.member_type),
                })
                .collect(),
            authorized_operations: operations_from_bits(g.authorized_operations),
        },
    )
}

/// Maps a ShareGroupDescribe answer to one result per group of `groups`, in order.
pub(crate) fn share_groups_from(
    groups: &[&str],
    resp: ShareGroupDescribeResponse,
) -> Vec<(String, ResourceResult<ShareGroupDescription>)> {
    per_group(
        "ShareGroupDescribe",
        groups,
        resp.groups,
        |g| &g.group_id,
        |g| code_result("ShareGroupDescribe", g.error_code, g.error_message.clone()),
        |g| ShareGroupDescription {
            group_id: g.group_id,
            state: GroupState::parse(&g.group_state),
            group_epoch: g.group_epoch,
            assignment_epoch: g.assignment_epoch,
            assignor_name: g.assignor_name,
            members: g
                .members
                .into_iter()
                .map(|m| ShareMember {
                    member_id: m.member_id,
                    rack_id: m.rack_id,
                    member_epoch: m.member_epoch,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    subscribed_topic_names: m.subscribed_topic_names,
                    assignment: share_topics(m.assignment),
                })
                .collect(),
            authorized_operations: operations_from_bits(g.authorized_operations),
        },
    )
}

/// Maps a StreamsGroupDescribe answer to one result per group of `groups`, in order.
pub(crate) fn streams_groups_from(
    groups: &[&str],
    resp: StreamsGroupDescribeResponse,
) -> Vec<(String, ResourceResult<StreamsGroupDescription>)> {
    per_group(
        "StreamsGroupDescribe",
        groups,
        resp.groups,
        |g| &g.group_id,
        |g| {
            code_result(
                "StreamsGroupDescribe",
                g.error_code,
                g.error_message.clone(),
            )
        },
        |g| {
            let (topology_epoch, subtopologies) = match g.topology {
                None => (None, Vec::new()),
                Some(t) => (
                    Some(t.epoch),
                    t.subtopologies
                        .unwrap_or_default()
                        .into_iter()
                        .map(|s| StreamsSubtopology {
                            subtopology_id: s.subtopology_id,
                            source_topics: s.source_topics,
                            repartition_sink_topics: s.repartition_sink_topics,
                            state_changelog_topics: s
                                .state_changelog_topics
                                .into_iter()
                                .map(|t| t.name)
                                .collect(),
                            repartition_source_topics: s
                                .repartition_source_topics
                                .into_iter()
                                .map(|t| t.name)
                                .collect(),
                        })
                        .collect(),
                ),
            };
            StreamsGroupDescription {
                group_id: g.group_id,
                state: GroupState::parse(&g.group_state),
                group_epoch: g.group_epoch,
                assignment_epoch: g.assignment_epoch,
                topology_epoch,
                subtopologies,
                members: g
                    .members
                    .into_iter()
                    .map(|m| StreamsMember {
                        member_id: m.member_id,
                        member_epoch: m.member_epoch,
                        instance_id: m.instance_id,
                        rack_id: m.rack_id,
                        client_id: m.client_id,
                        client_host: m.client_host,
                        topology_epoch: m.topology_epoch,
                        process_id: m.process_id,
                        is_classic: m.is_classic,
                        active_tasks: streams_tasks(m.assignment.active_tasks),
                        standby_tasks: streams_tasks(m.assignment.standby_tasks),
                        warmup_tasks: streams_tasks(m.assignment.warmup_tasks),
                    })
                    .collect(),
                authorized_operations: operations_from_bits(g.authorized_operations),
            }
        },
    )
}

fn owned(groups: &[&str]) -> Vec<String> {
    groups.iter().map(|g| (*g).to_owned()).collect()
}

impl Client {
    /// Describes KIP-848 consumer groups (groups of type `consumer`, ConsumerGroupDescribe;
    /// the new-protocol half of Java `Admin.describeConsumerGroups`), each at its coordinator.
    /// `include_authorized_operations` asks for the caller's operations (KIP-430).
    ///
    /// Returns one result per group, in the order given: a classic group, or none, is
    /// `GROUP_ID_NOT_FOUND` ([`Client::describe_consumer_groups`] describes classic groups).
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty list or a group given twice;
    /// [`crate::Error::UnsupportedVersion`] naming ConsumerGroupDescribe (brokers before 4.0);
    /// otherwise only when no group got any answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_kip848_groups(
        &self,
        groups: &[&str],
        include_authorized_operations: bool,
    ) -> Result<Vec<(String, ResourceResult<Kip848GroupDescription>)>> {
        check_distinct("group", groups)?;
        let req = ConsumerGroupDescribeRequest::default()
            .with_group_ids(owned(groups))
            .with_include_authorized_operations(include_authorized_operations);
        let resp = self.transport().round_trip(req).await?;
        Ok(kip848_groups_from(groups, resp))
    }

    /// Describes share groups (ShareGroupDescribe v1, KIP-932; Java
    /// `Admin.describeShareGroups`), each at its coordinator.
    ///
    /// Returns one result per group, in the order given: a group of another type, or none, is
    /// `GROUP_ID_NOT_FOUND`.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty list or a group given twice;
    /// [`crate::Error::UnsupportedVersion`] naming ShareGroupDescribe (brokers without
    /// ShareGroupDescribe v1, KIP-932); otherwise only when no group got any answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_share_groups(
        &self,
        groups: &[&str],
        include_authorized_operations: bool,
    ) -> Result<Vec<(String, ResourceResult<ShareGroupDescription>)>> {
        check_distinct("group", groups)?;
        let req = ShareGroupDescribeRequest::default()
            .with_group_ids(owned(groups))
            .with_include_authorized_operations(include_authorized_operations);
        let resp = self.transport().round_trip(req).await?;
        Ok(share_groups_from(groups, resp))
    }

    /// Describes streams groups (StreamsGroupDescribe, KIP-1071; Java
    /// `Admin.describeStreamsGroups`), each at its coordinator, with their topologies (the
    /// KIP-1331 topology description is not asked for).
    ///
    /// Returns one result per group, in the order given: a group of another type, or none, is
    /// `GROUP_ID_NOT_FOUND`.
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty list or a group given twice;
    /// [`crate::Error::UnsupportedVersion`] naming StreamsGroupDescribe (brokers without KIP-1071);
    /// otherwise only when no group got any answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_streams_groups(
        &self,
        groups: &[&str],
        include_authorized_operations: bool,
    ) -> Result<Vec<(String, ResourceResult<StreamsGroupDescription>)>> {
        check_distinct("group", groups)?;
        let req = StreamsGroupDescribeRequest::default()
            .with_group_ids(owned(groups))
            .with_include_authorized_operations(include_authorized_operations);
        let resp = self.transport().round_trip(req).await?;
        Ok(streams_groups_from(groups, resp))
    }
}

#[cfg(test)]
mod tests {
    use kafkit_protocol::ErrorCode;

    use super::*;
    use crate::error::Error;

    #[test]
    fn kip848_answers_per_group_in_order() {
        let mut found = consumer_group_describe_response::DescribedGroup::default();
        found.group_id = "a".into();
        found.group_state = "Stable".into();
        found.assignor_name = "uniform".into();
        found.authorized_operations = i32::MIN;
        let mut m = consumer_group_describe_response::Member::default();
        m.member_id = "m1".into();
        m.member_type = 1;
        let mut tp = consumer_group_describe_response::TopicPartitions::default();
        tp.topic_name = "t".into();
        tp.partitions = vec![0, 1];
        m.assignment.topic_partitions.push(tp);
        found.members.push(m);
        let mut gone = consumer_group_describe_response::DescribedGroup::default();
        gone.group_id = "b".into();
        gone.error_code = ErrorCode::GROUP_ID_NOT_FOUND;
        gone.error_message = Some("Group b is not a consumer group.".into());
        let mut resp = ConsumerGroupDescribeResponse::default();
        resp.groups = vec![gone, found];

        let got = kip848_groups_from(&["a", "b", "c"], resp);
        let a = got[0].1.as_ref().unwrap();
        assert_eq!(a.state, GroupState::Stable);
        assert_eq!(a.members[0].member_type, GroupMemberType::Consumer);
        assert_eq!(a.members[0].assignment[0].partitions, vec![0, 1]);
        assert_eq!(a.authorized_operations, None);
        let b = got[1].1.as_ref().unwrap_err();
        assert_eq!(b.error_code(), Some(ErrorCode::GROUP_ID_NOT_FOUND));
        assert!(b.to_string().contains("not a consumer group"), "{b}");
        assert!(matches!(got[2].1, Err(Error::Protocol(_))));
    }

    #[test]
    fn share_and_streams_answers_are_mapped() {
        let mut g = share_group_describe_response::DescribedGroup::default();
        g.group_id = "s".into();
        g.group_state = "Empty".into();
        g.authorized_operations = 1 << 3;
        let mut resp = ShareGroupDescribeResponse::default();
        resp.groups.push(g);
        let got = share_groups_from(&["s"], resp);
        let s = got[0].1.as_ref().unwrap();
        assert_eq!(s.state, GroupState::Empty);
        assert_eq!(s.authorized_operations, Some(vec![AclOperation::Read]));

        let mut g = streams_group_describe_response::DescribedGroup::default();
        g.group_id = "k".into();
        g.group_state = "NotReady".into();
        g.topology = Some(
            streams_group_describe_response::Topology::default()
                .with_epoch(2)
                .with_subtopologies(Some(vec![
                    streams_group_describe_response::Subtopology::default()
                        .with_subtopology_id("0".into())
                        .with_source_topics(vec!["in".into()]),
                ])),
        );
        let mut m = streams_group_describe_response::Member::default();
        m.assignment.active_tasks.push(
            streams_group_describe_response::TaskIds::default()
                .with_subtopology_id("0".into())
                .with_partitions(vec![3]),
        );
        g.members.push(m);
        let mut resp = StreamsGroupDescribeResponse::default();
        resp.groups.push(g);
        let got = streams_groups_from(&["k"], resp);
        let k = got[0].1.as_ref().unwrap();
        assert_eq!(k.state, GroupState::NotReady);
        assert_eq!(k.topology_epoch, Some(2));
        assert_eq!(k.subtopologies[0].source_topics, vec!["in".to_owned()]);
        assert_eq!(k.members[0].active_tasks, vec![("0".to_owned(), vec![3])]);
    }
}
