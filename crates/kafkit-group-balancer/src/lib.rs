//! Consumer group assignors: the code the group leader runs to split partitions among the
//! members of a consumer group, and the consumer protocol metadata the members exchange.
//!
//! Members of one group may run different clients, so each assignor here uses the protocol
//! name, the user data and the algorithm of the client it is named after:
//!
//! | [`GroupBalancer`] | protocol name | matches |
//! |---|---|---|
//! | [`RangeAssignor`] | `range` | Java `RangeAssignor`, with KIP-881 rack awareness |
//! | [`RoundRobinAssignor`] | `roundrobin` | Java `RoundRobinAssignor` |
//! | [`RackAffinityGroupBalancer`] | `rack-affinity` | kafka-go `RackAffinityGroupBalancer` |
//! | [`StickyAssignor`] | `sticky` | Java `StickyAssignor` (eager) |
//! | [`CooperativeStickyAssignor`] | `cooperative-sticky` | Java `CooperativeStickyAssignor` (KIP-429) |
//!
//! This crate does no I/O: the client puts [`Subscription::encode`] into JoinGroup, the leader
//! decodes every member's metadata, calls [`GroupBalancer::assign`], and sends each
//! [`Assignment::encode`] in SyncGroup.
//!
//! ```
//! use kafkit_group_balancer::{
//!     Assignment, GroupBalancer, GroupMember, RangeAssignor, Subscription, TopicMetadata,
//!     encode_assignments,
//! };
//!
//! // Each member sends this in JoinGroup; the leader receives and decodes it.
//! let wire = Subscription::new(["t0", "t1"]).encode(3)?;
//! let members = vec![
//!     GroupMember::from_join_group("c0", None, &wire)?,
//!     GroupMember::from_join_group("c1", None, &wire)?,
//! ];
//! let topics = [TopicMetadata::new("t0", 3), TopicMetadata::new("t1", 3)];
//!
//! let plan = RangeAssignor::new().assign(&members, &topics)?;
//! assert_eq!(encode_assignments(&plan, 3)?.len(), 2); // what SyncGroup carries
//! // The example of Java's RangeAssignor documentation:
//! // c0 gets t0p0, t0p1, t1p0, t1p1; c1 gets t0p2, t1p2.
//! assert_eq!(plan["c0"].iter().collect::<Vec<_>>(), [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)]);
//! assert_eq!(plan["c1"].iter().collect::<Vec<_>>(), [("t0", 2), ("t1", 2)]);
//!
//! // The leader sends each member its assignment in SyncGroup.
//! let bytes = plan["c1"].encode(3)?;
//! assert_eq!(Assignment::decode(&bytes)?, plan["c1"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
// docs.rs builds with `--cfg docsrs` (Cargo.toml): nightly rustdoc then marks each item behind a
// cargo feature with that feature (`doc_cfg` shows the `#[cfg]` of an item by itself).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod metadata;
mod model;
mod rack_affinity;
mod range;
mod roundrobin;
mod sticky;

use std::collections::BTreeMap;

use bytes::Bytes;

pub use metadata::{
    ASSIGNMENT_VERSION, Assignment, DEFAULT_GENERATION, MetadataError, SUBSCRIPTION_VERSION,
    Subscription, TopicPartitions,
};
pub use rack_affinity::RackAffinityGroupBalancer;
pub use range::RangeAssignor;
pub use roundrobin::RoundRobinAssignor;
pub use sticky::{CooperativeStickyAssignor, StickyAssignor};

/// The result of [`GroupBalancer::assign`]: member id -> its assignment. Every member passed in
/// has an entry, possibly empty.
pub type GroupAssignment = BTreeMap<String, Assignment>;

/// One member of the group as the leader sees it in the JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupMember {
    /// The member id the coordinator gave the member.
    pub member_id: String,
    /// The member's `group.instance.id` (static membership, KIP-345), if any. The range and
    /// round-robin assignors order static members by it, as the Java client does.
    pub group_instance_id: Option<String>,
    /// The member's decoded JoinGroup metadata.
    pub subscription: Subscription,
}

impl GroupMember {
    /// A dynamic member (no `group.instance.id`).
    pub fn new(member_id: impl Into<String>, subscription: Subscription) -> Self {
        Self {
            member_id: member_id.into(),
            group_instance_id: None,
            subscription,
        }
    }

    /// Sets the member's `group.instance.id`.
    pub fn with_group_instance_id(mut self, id: impl Into<String>) -> Self {
        self.group_instance_id = Some(id.into());
        self
    }

    /// A member from one entry of a JoinGroup response (`MemberId`, `GroupInstanceId`,
    /// `Metadata`), decoding the metadata with [`Subscription::decode`].
    ///
    /// Errors: the [`MetadataError`] of a malformed `Metadata`.
    pub fn from_join_group(
        member_id: impl Into<String>,
        group_instance_id: Option<String>,
        metadata: &Bytes,
    ) -> Result<Self, MetadataError> {
        Ok(Self {
            member_id: member_id.into(),
            group_instance_id,
            subscription: Subscription::decode(metadata)?,
        })
    }
}

/// Encodes every member's assignment for a SyncGroup request at `version` (the Java client uses
/// [`ASSIGNMENT_VERSION`]): `(member id, assignment bytes)`, in member id order.
///
/// Errors: [`MetadataError::Encode`] for a version outside 0-3.
pub fn encode_assignments(
    plan: &GroupAssignment,
    version: i16,
) -> Result<Vec<(String, Bytes)>, MetadataError> {
    plan.iter()
        .map(|(id, a)| Ok((id.clone(), a.encode(version)?)))
        .collect()
}

/// What the leader knows of one partition from Metadata: its id and where its replicas live.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PartitionMetadata {
    /// Partition id (>= 0).
    pub partition: i32,
    /// Rack of the partition leader's broker, if known (used by `rack-affinity`).
    pub leader_rack: Option<String>,
    /// Racks of the brokers holding a replica (used by KIP-881 rack-aware `range`).
    pub replica_racks: Vec<String>,
}

impl PartitionMetadata {
    /// A partition with no rack information.
    pub fn new(partition: i32) -> Self {
        Self {
            partition,
            ..Self::default()
        }
    }

    /// A partition whose leader is in `leader_rack` and whose replicas are in `replica_racks`.
    pub fn with_racks<I, S>(
        partition: i32,
        leader_rack: impl Into<String>,
        replica_racks: I,
    ) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            partition,
            leader_rack: Some(leader_rack.into()),
            replica_racks: replica_racks.into_iter().map(Into::into).collect(),
        }
    }
}

/// One topic from Metadata. Topics subscribed by a member but absent here are skipped, as the
/// Java client skips topics it has no metadata for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TopicMetadata {
    /// Topic name.
    pub topic: String,
    /// Its partitions, in any order.
    pub partitions: Vec<PartitionMetadata>,
}

impl TopicMetadata {
    /// A topic with partitions `0..partition_count` and no rack information.
    pub fn new(topic: impl Into<String>, partition_count: i32) -> Self {
        Self {
            topic: topic.into(),
            partitions: (0..partition_count.max(0))
                .map(PartitionMetadata::new)
                .collect(),
        }
    }

    /// A topic with the given partitions.
    pub fn with_partitions(topic: impl Into<String>, partitions: Vec<PartitionMetadata>) -> Self {
        Self {
            topic: topic.into(),
            partitions,
        }
    }
}

/// Why [`GroupBalancer::assign`] refused its input. The input is wrong, so a retry with the
/// same input cannot help.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AssignError {
    /// Two members have the same member id.
    #[error("member id {0:?} appears twice")]
    DuplicateMember(String),
    /// Two metadata entries have the same topic name.
    #[error("topic {0:?} appears twice in the metadata")]
    DuplicateTopic(String),
    /// A topic lists a negative partition id or the same id twice.
    #[error("topic {topic:?} has an invalid or repeated partition {partition}")]
    InvalidPartition {
        /// Topic name.
        topic: String,
        /// The offending partition id.
        partition: i32,
    },
}

impl AssignError {
    /// Always `false`: the input itself is wrong.
    pub const fn is_retriable(&self) -> bool {
        false
    }
}

/// Which rebalance protocol an assignor supports (KIP-429).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RebalanceProtocol {
    /// Members give up all their partitions before joining.
    Eager,
    /// Members keep their partitions across a rebalance and give up only those the leader
    /// withholds; a withheld partition is assigned in a follow-up rebalance.
    Cooperative,
}

/// A consumer group assignor: what a member advertises in JoinGroup and what the leader runs.
pub trait GroupBalancer: Send + Sync {
    /// The protocol name sent in JoinGroup (`"range"`, `"cooperative-sticky"`...). Members of a
    /// group must share one; the broker picks the one every member supports.
    fn protocol_name(&self) -> &str;

    /// The rebalance protocol the assignor follows; [`RebalanceProtocol::Eager`] by default.
    fn rebalance_protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Eager
    }

    /// The user data a member puts in its [`Subscription`], given the partitions it owns and the
    /// generation it got them in ([`DEFAULT_GENERATION`] if none). `None` by default.
    fn user_data(&self, owned: &[TopicPartitions], generation_id: i32) -> Option<Bytes> {
        let _ = (owned, generation_id);
        None
    }

    /// Assigns the partitions of `topics` to `members`. Each partition of a topic that at
    /// least one member subscribes to goes to exactly one member subscribed to its topic
    /// (cooperative assignors may hold some back for a follow-up rebalance).
    ///
    /// Errors: [`AssignError`] for repeated member ids, repeated topics or bad partition ids.
    fn assign(
        &self,
        members: &[GroupMember],
        topics: &[TopicMetadata],
    ) -> Result<GroupAssignment, AssignError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_group_to_sync_group() {
        let meta = Subscription::new(["t"])
            .with_rack_id("r")
            .encode(3)
            .unwrap();
        let m = GroupMember::from_join_group("m1", Some("i1".into()), &meta).unwrap();
        assert_eq!(m.group_instance_id.as_deref(), Some("i1"));
        assert_eq!(m.subscription.rack_id.as_deref(), Some("r"));
        assert!(GroupMember::from_join_group("m1", None, &Bytes::from_static(&[0])).is_err());

        let plan = RoundRobinAssignor::new()
            .assign(&[m], &[TopicMetadata::new("t", 2)])
            .unwrap();
        let sync = encode_assignments(&plan, ASSIGNMENT_VERSION).unwrap();
        assert_eq!(sync.len(), 1);
        assert_eq!(sync[0].0, "m1");
        let back = Assignment::decode(&sync[0].1).unwrap();
        assert_eq!(back.iter().collect::<Vec<_>>(), [("t", 0), ("t", 1)]);
        assert!(encode_assignments(&plan, 9).is_err());
    }
}

/// The example of this crate's README.md, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
