//! The index-based view of one rebalance that every assignor works on.
//!
//! Topics are those subscribed by at least one member and present in the metadata, sorted by
//! name; their partitions are sorted by id and numbered globally in that order, so "global
//! index order" is "(topic, partition) order". Members keep the caller's order.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::metadata::{Assignment, TopicPartitions};
use crate::{AssignError, GroupAssignment, GroupMember, PartitionMetadata, TopicMetadata};

pub(crate) struct Model<'a> {
    pub members: &'a [GroupMember],
    /// Topic names, sorted.
    pub topics: Vec<&'a str>,
    /// Per topic: its partitions sorted by id.
    pub partitions: Vec<Vec<&'a PartitionMetadata>>,
    /// Per topic: global index of its first partition; one extra entry holds the total.
    pub base: Vec<usize>,
    /// Global index -> topic index.
    pub topic_of: Vec<usize>,
    /// Per member: subscribed topic indexes, sorted and deduplicated.
    pub subs: Vec<Vec<usize>>,
    /// Per topic: subscribing members in member order.
    pub subscribers: Vec<Vec<usize>>,
    topic_index: HashMap<&'a str, usize>,
}

impl<'a> Model<'a> {
    pub fn new(
        members: &'a [GroupMember],
        metadata: &'a [TopicMetadata],
    ) -> Result<Self, AssignError> {
        let mut ids = HashSet::with_capacity(members.len());
        for m in members {
            if !ids.insert(m.member_id.as_str()) {
                return Err(AssignError::DuplicateMember(m.member_id.clone()));
            }
        }
        let mut by_name: BTreeMap<&str, &TopicMetadata> = BTreeMap::new();
        for t in metadata {
            if by_name.insert(t.topic.as_str(), t).is_some() {
                return Err(AssignError::DuplicateTopic(t.topic.clone()));
            }
        }
        let subscribed: HashSet<&str> = members
            .iter()
            .flat_map(|m| m.subscription.topics.iter().map(String::as_str))
            .collect();
        let mut topics = Vec::new();
        let mut partitions = Vec::new();
        let mut base = vec![0];
        let mut topic_of = Vec::new();
        for (name, t) in by_name {
            if !subscribed.contains(name) {
                continue;
            }
            let mut parts: Vec<&PartitionMetadata> = t.partitions.iter().collect();
            parts.sort_by_key(|p| p.partition);
            if let Some(p) = parts.iter().find(|p| p.partition < 0) {
                return Err(AssignError::InvalidPartition {
                    topic: t.topic.clone(),
                    partition: p.partition,
                });
            }
            if let Some(w) = parts.windows(2).find(|w| w[0].partition == w[1].partition) {
                return Err(AssignError::InvalidPartition {
                    topic: t.topic.clone(),
                    partition: w[0].partition,
                });
            }
            let ti = topics.len();
            topics.push(name);
            topic_of.extend(std::iter::repeat_n(ti, parts.len()));
            base.push(base[ti] + parts.len());
            partitions.push(parts);
        }
        let topic_index: HashMap<&str, usize> =
            topics.iter().enumerate().map(|(i, t)| (*t, i)).collect();
        let mut subscribers = vec![Vec::new(); topics.len()];
        let subs = members
            .iter()
            .enumerate()
            .map(|(mi, m)| {
                let mut s: Vec<usize> = m
                    .subscription
                    .topics
                    .iter()
                    .filter_map(|t| topic_index.get(t.as_str()).copied())
                    .collect();
                s.sort_unstable();
                s.dedup();
                for &t in &s {
                    subscribers[t].push(mi);
                }
                s
            })
            .collect();
        Ok(Self {
            members,
            topics,
            partitions,
            base,
            topic_of,
            subs,
            subscribers,
            topic_index,
        })
    }

    pub fn num_partitions(&self) -> usize {
        self.topic_of.len()
    }

    pub fn topic_len(&self, t: usize) -> usize {
        self.base[t + 1] - self.base[t]
    }

    /// Global index of `(topic, partition)`, if the topic is in the model and has it.
    pub fn index_of(&self, topic: &str, partition: i32) -> Option<usize> {
        let t = *self.topic_index.get(topic)?;
        let pos = self.partitions[t]
            .binary_search_by_key(&partition, |p| p.partition)
            .ok()?;
        Some(self.base[t] + pos)
    }

    /// Global indexes of a topic-grouped partition list (unknown ones skipped).
    pub fn indexes_of(&self, list: &[TopicPartitions]) -> Vec<usize> {
        let mut out = Vec::new();
        for tp in list {
            for &p in &tp.partitions {
                if let Some(i) = self.index_of(&tp.topic, p) {
                    out.push(i);
                }
            }
        }
        out
    }

    pub fn partition(&self, g: usize) -> &'a PartitionMetadata {
        let t = self.topic_of[g];
        self.partitions[t][g - self.base[t]]
    }

    pub fn subscribes(&self, member: usize, topic: usize) -> bool {
        self.subs[member].binary_search(&topic).is_ok()
    }

    /// Turns per-member lists of global indexes into the result map. Every member gets an
    /// entry; partitions are grouped by topic and sorted.
    pub fn finish(&self, mut per_member: Vec<Vec<usize>>) -> GroupAssignment {
        let mut out = GroupAssignment::new();
        for (mi, list) in per_member.iter_mut().enumerate() {
            list.sort_unstable();
            let mut parts: Vec<TopicPartitions> = Vec::new();
            for &g in list.iter() {
                let t = self.topic_of[g];
                let p = self.partition(g).partition;
                match parts.last_mut() {
                    Some(last) if last.topic == self.topics[t] => last.partitions.push(p),
                    _ => parts.push(TopicPartitions::new(self.topics[t], vec![p])),
                }
            }
            out.insert(self.members[mi].member_id.clone(), Assignment::new(parts));
        }
        out
    }
}

/// Java's `MemberInfo` order: members with a `group.instance.id` first, by that id; then the
/// others by member id.
pub(crate) fn java_member_order(members: &[GroupMember]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by(|&a, &b| {
        let (ma, mb) = (&members[a], &members[b]);
        match (&ma.group_instance_id, &mb.group_instance_id) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => ma.member_id.cmp(&mb.member_id),
        }
    });
    order
}
