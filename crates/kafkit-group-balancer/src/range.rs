//! `range`: the Java `RangeAssignor`, including its KIP-881 rack-aware variant.

use std::collections::{BTreeMap, HashSet};

use crate::model::{Model, java_member_order};
use crate::{AssignError, GroupAssignment, GroupBalancer, GroupMember, TopicMetadata};

/// Protocol `range`: each topic on its own, its partitions cut into contiguous ranges, one per
/// subscribed member, the first `partitions % members` members getting one extra. Matches the
/// Java client's `RangeAssignor` (members ordered by `group.instance.id`, then member id).
///
/// Rack awareness (KIP-881): when a topic's members send a rack (`Subscription::rack_id`), some
/// partition has a replica in one of those racks, and the partitions' replica racks differ,
/// members first take partitions with a replica in their own rack, within the same per-member
/// quota; the plain range pass then places the rest. Topics with the same members and the same
/// partition count are treated together so that partition `p` of each goes to one member, as in
/// Java.
///
/// Guarantees: every partition assigned once; per topic, member counts differ by at most one.
/// Across topics the first members may get more (one extra per topic).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RangeAssignor;

impl RangeAssignor {
    /// A range assignor.
    pub fn new() -> Self {
        Self
    }
}

impl GroupBalancer for RangeAssignor {
    fn protocol_name(&self) -> &str {
        "range"
    }

    fn assign(
        &self,
        members: &[GroupMember],
        topics: &[TopicMetadata],
    ) -> Result<GroupAssignment, AssignError> {
        let model = Model::new(members, topics)?;
        Ok(model.finish(range(&model)))
    }
}

/// The per-topic state of Java's `TopicAssignmentState`.
struct TopicState<'m> {
    topic: usize,
    /// Members subscribed to the topic, in Java member order.
    consumers: Vec<usize>,
    /// Partitions assigned so far, by member index.
    counts: Vec<usize>,
    /// Position within the topic -> still unassigned.
    unassigned: Vec<bool>,
    unassigned_left: usize,
    per_consumer: usize,
    with_extra: usize,
    replica_racks: Vec<HashSet<&'m str>>,
    needs_rack: bool,
}

impl<'m> TopicState<'m> {
    fn max_assignable(&self, member: usize) -> usize {
        (self.per_consumer + usize::from(self.with_extra > 0)).saturating_sub(self.counts[member])
    }

    /// A member without a rack matches any partition; one with a rack matches partitions with a
    /// replica in it.
    fn racks_match(&self, model: &Model<'m>, member: usize, pos: usize) -> bool {
        match member_rack(model, member) {
            None => true,
            Some(r) => self.replica_racks[pos].contains(r),
        }
    }

    fn assign(&mut self, member: usize, pos: usize, out: &mut [Vec<usize>], base: usize) {
        self.unassigned[pos] = false;
        self.unassigned_left -= 1;
        self.counts[member] += 1;
        out[member].push(base + pos);
        if self.with_extra > 0 && self.counts[member] == self.per_consumer + 1 {
            self.with_extra -= 1;
        }
    }
}

fn member_rack<'m>(model: &Model<'m>, member: usize) -> Option<&'m str> {
    model.members[member]
        .subscription
        .rack_id
        .as_deref()
        .filter(|r| !r.is_empty())
}

pub(crate) fn range(model: &Model<'_>) -> Vec<Vec<usize>> {
    let order = java_member_order(model.members);
    let mut out = vec![Vec::new(); model.members.len()];
    let mut states: Vec<TopicState<'_>> = Vec::new();
    for t in 0..model.topics.len() {
        let consumers: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&m| model.subscribes(m, t))
            .collect();
        if consumers.is_empty() {
            continue;
        }
        let n = model.topic_len(t);
        let replica_racks: Vec<HashSet<&str>> = model.partitions[t]
            .iter()
            .map(|p| p.replica_racks.iter().map(String::as_str).collect())
            .collect();
        let consumer_racks: HashSet<&str> = consumers
            .iter()
            .filter_map(|&m| member_rack(model, m))
            .collect();
        let all_racks: HashSet<&str> = replica_racks.iter().flatten().copied().collect();
        let needs_rack = !consumer_racks.is_empty()
            && !consumer_racks.is_disjoint(&all_racks)
            && !replica_racks.iter().all(|r| *r == all_racks);
        states.push(TopicState {
            topic: t,
            per_consumer: n / consumers.len(),
            with_extra: n % consumers.len(),
            consumers,
            counts: vec![0; model.members.len()],
            unassigned: vec![true; n],
            unassigned_left: n,
            replica_racks,
            needs_rack,
        });
    }

    let rack_aware = states.iter().any(|s| s.needs_rack);
    if rack_aware {
        // Group topics by (members, partition count): co-partitioned groups are placed
        // partition by partition across all their topics.
        let mut groups: BTreeMap<(Vec<usize>, usize), Vec<usize>> = BTreeMap::new();
        for (i, s) in states.iter().enumerate() {
            groups
                .entry((s.consumers.clone(), s.unassigned.len()))
                .or_default()
                .push(i);
        }
        for ((consumers, n), group) in groups {
            if group.len() > 1 {
                co_partitioned_with_racks(model, &mut states, &group, &consumers, n, &mut out);
            } else if states[group[0]].needs_rack {
                let s = &mut states[group[0]];
                assign_ranges(model, s, true, &mut out);
            }
        }
    }
    for s in &mut states {
        assign_ranges(model, s, false, &mut out);
    }
    out
}

/// Java's `assignRanges`: each member in order takes up to its quota of the unassigned
/// partitions, in partition order (only rack-matching ones when `rack_only`).
fn assign_ranges(
    model: &Model<'_>,
    s: &mut TopicState<'_>,
    rack_only: bool,
    out: &mut [Vec<usize>],
) {
    let base = model.base[s.topic];
    for ci in 0..s.consumers.len() {
        if s.unassigned_left == 0 {
            break;
        }
        let c = s.consumers[ci];
        let max = s.max_assignable(c);
        let picked: Vec<usize> = (0..s.unassigned.len())
            .filter(|&pos| s.unassigned[pos] && (!rack_only || s.racks_match(model, c, pos)))
            .take(max)
            .collect();
        for pos in picked {
            s.assign(c, pos, out, base);
        }
    }
}

/// Java's `assignCoPartitionedWithRackMatching`.
fn co_partitioned_with_racks(
    model: &Model<'_>,
    states: &mut [TopicState<'_>],
    group: &[usize],
    consumers: &[usize],
    n: usize,
    out: &mut [Vec<usize>],
) {
    let mut remaining: Vec<usize> = consumers.to_vec();
    for p in 0..n {
        let matching = remaining.iter().position(|&c| {
            group.iter().all(|&i| {
                let s = &states[i];
                s.racks_match(model, c, p) && s.max_assignable(c) > 0
            })
        });
        let Some(ri) = matching else { continue };
        let c = remaining[ri];
        for &i in group {
            let base = model.base[states[i].topic];
            if states[i].unassigned[p] {
                states[i].assign(c, p, out, base);
            }
        }
        if group.iter().all(|&i| states[i].max_assignable(c) == 0) {
            remaining.remove(ri);
            if remaining.is_empty() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PartitionMetadata, Subscription};

    fn plan(members: &[GroupMember], topics: &[TopicMetadata]) -> BTreeMap<String, Vec<String>> {
        RangeAssignor::new()
            .assign(members, topics)
            .unwrap()
            .into_iter()
            .map(|(m, a)| (m, a.iter().map(|(t, p)| format!("{t}p{p}")).collect()))
            .collect()
    }

    fn member(id: &str, topics: &[&str]) -> GroupMember {
        GroupMember::new(id, Subscription::new(topics.iter().copied()))
    }

    #[test]
    fn java_doc_example_two_members_two_topics_of_three() {
        let m = [member("C0", &["t0", "t1"]), member("C1", &["t0", "t1"])];
        let t = [TopicMetadata::new("t0", 3), TopicMetadata::new("t1", 3)];
        let p = plan(&m, &t);
        assert_eq!(p["C0"], ["t0p0", "t0p1", "t1p0", "t1p1"]);
        assert_eq!(p["C1"], ["t0p2", "t1p2"]);
    }

    #[test]
    fn static_members_come_first_by_instance_id() {
        let m = [
            member("a", &["t"]),
            member("b", &["t"]).with_group_instance_id("z"),
            member("c", &["t"]).with_group_instance_id("y"),
        ];
        let p = plan(&m, &[TopicMetadata::new("t", 4)]);
        assert_eq!(p["c"], ["tp0", "tp1"]);
        assert_eq!(p["b"], ["tp2"]);
        assert_eq!(p["a"], ["tp3"]);
    }

    #[test]
    fn unsubscribed_and_unknown_topics() {
        let m = [member("a", &["t0", "gone"]), member("b", &["t1"])];
        let t = [
            TopicMetadata::new("t0", 2),
            TopicMetadata::new("t1", 1),
            TopicMetadata::new("x", 5),
        ];
        let p = plan(&m, &t);
        assert_eq!(p["a"], ["t0p0", "t0p1"]);
        assert_eq!(p["b"], ["t1p0"]);
    }

    fn racked(topic: &str, racks: &[&[&str]]) -> TopicMetadata {
        TopicMetadata::with_partitions(
            topic,
            racks
                .iter()
                .enumerate()
                .map(|(i, r)| PartitionMetadata::with_racks(i as i32, r[0], r.iter().copied()))
                .collect(),
        )
    }

    #[test]
    fn kip_881_members_take_partitions_in_their_rack() {
        // p0 and p2 live in rack a, p1 and p3 in rack b. Without racks c0 would get p0,p1.
        let t = [racked("t", &[&["a"], &["b"], &["a"], &["b"]])];
        let m = [
            GroupMember::new("c0", Subscription::new(["t"]).with_rack_id("a")),
            GroupMember::new("c1", Subscription::new(["t"]).with_rack_id("b")),
        ];
        let p = plan(&m, &t);
        assert_eq!(p["c0"], ["tp0", "tp2"]);
        assert_eq!(p["c1"], ["tp1", "tp3"]);
    }

    #[test]
    fn kip_881_co_partitioned_topics_stay_aligned() {
        let racks: &[&[&str]] = &[&["b"], &["a"], &["b"], &["a"]];
        let t = [racked("t0", racks), racked("t1", racks)];
        let m = [
            GroupMember::new("c0", Subscription::new(["t0", "t1"]).with_rack_id("a")),
            GroupMember::new("c1", Subscription::new(["t0", "t1"]).with_rack_id("b")),
        ];
        let p = plan(&m, &t);
        assert_eq!(p["c0"], ["t0p1", "t0p3", "t1p1", "t1p3"]);
        assert_eq!(p["c1"], ["t0p0", "t0p2", "t1p0", "t1p2"]);
    }

    #[test]
    fn kip_881_not_used_when_every_partition_is_in_every_rack() {
        let t = [racked("t", &[&["a", "b"], &["a", "b"], &["a", "b"]])];
        let m = [
            GroupMember::new("c0", Subscription::new(["t"]).with_rack_id("b")),
            GroupMember::new("c1", Subscription::new(["t"]).with_rack_id("a")),
        ];
        let p = plan(&m, &t);
        assert_eq!(p["c0"], ["tp0", "tp1"]);
        assert_eq!(p["c1"], ["tp2"]);
    }

    #[test]
    fn kip_881_quota_still_holds_when_racks_are_uneven() {
        // Every partition is in rack a; c1 (rack b) still gets its share.
        let t = [racked("t", &[&["a"], &["a"], &["a"], &["b"]])];
        let m = [
            GroupMember::new("c0", Subscription::new(["t"]).with_rack_id("a")),
            GroupMember::new("c1", Subscription::new(["t"]).with_rack_id("a")),
            GroupMember::new("c2", Subscription::new(["t"]).with_rack_id("b")),
        ];
        let p = plan(&m, &t);
        assert_eq!(p["c0"], ["tp0", "tp1"]);
        assert_eq!(p["c1"], ["tp2"]);
        assert_eq!(p["c2"], ["tp3"]);
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        let m = [member("a", &["t"]), member("a", &["t"])];
        assert_eq!(
            RangeAssignor::new().assign(&m, &[TopicMetadata::new("t", 1)]),
            Err(AssignError::DuplicateMember("a".into()))
        );
        let m = [member("a", &["t"])];
        let bad = TopicMetadata::with_partitions(
            "t",
            vec![PartitionMetadata::new(0), PartitionMetadata::new(0)],
        );
        assert!(matches!(
            RangeAssignor::new().assign(&m, &[bad]),
            Err(AssignError::InvalidPartition { partition: 0, .. })
        ));
    }
}
