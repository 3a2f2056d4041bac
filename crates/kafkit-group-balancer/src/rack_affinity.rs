//! `rack-affinity`: kafka-go's `RackAffinityGroupBalancer`.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::model::Model;
use crate::{
    AssignError, GroupAssignment, GroupBalancer, GroupMember, TopicMetadata, TopicPartitions,
};

/// Protocol `rack-affinity`: per topic, members are placed with partitions whose leader is in
/// their rack, up to an even share; what is left is spread to bring every member to its share.
/// Matches kafka-go's `RackAffinityGroupBalancer`: a member's rack travels as its user data
/// (the raw UTF-8 rack name), and a partition's rack is its leader's.
///
/// kafka-go walks racks in Go map order, so its result varies between runs; this version walks
/// racks by name and members by member id, so the same input always gives the same plan.
/// Members without user data fall back to their [`Subscription::rack_id`](crate::Subscription).
///
/// Guarantees: every partition assigned once; per topic, member counts differ by at most one.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RackAffinityGroupBalancer {
    /// The rack of this member (`client.rack`); sent as user data. Empty when unknown.
    pub rack: String,
}

impl RackAffinityGroupBalancer {
    /// A balancer for a member in `rack`.
    pub fn new(rack: impl Into<String>) -> Self {
        Self { rack: rack.into() }
    }
}

impl GroupBalancer for RackAffinityGroupBalancer {
    fn protocol_name(&self) -> &str {
        "rack-affinity"
    }

    fn user_data(&self, _owned: &[TopicPartitions], _generation_id: i32) -> Option<Bytes> {
        Some(Bytes::copy_from_slice(self.rack.as_bytes()))
    }

    fn assign(
        &self,
        members: &[GroupMember],
        topics: &[TopicMetadata],
    ) -> Result<GroupAssignment, AssignError> {
        let model = Model::new(members, topics)?;
        let racks: Vec<String> = members
            .iter()
            .map(|m| match &m.subscription.user_data {
                Some(ud) if !ud.is_empty() => String::from_utf8_lossy(ud).into_owned(),
                _ => m.subscription.rack_id.clone().unwrap_or_default(),
            })
            .collect();
        let mut out = vec![Vec::new(); members.len()];
        for t in 0..model.topics.len() {
            let mut subs = model.subscribers[t].clone();
            subs.sort_by(|&a, &b| members[a].member_id.cmp(&members[b].member_id));
            assign_topic(&model, t, &subs, &racks, &mut out);
        }
        Ok(model.finish(out))
    }
}

fn assign_topic(
    model: &Model<'_>,
    t: usize,
    members: &[usize],
    racks: &[String],
    out: &mut [Vec<usize>],
) {
    let n = model.topic_len(t);
    let base = model.base[t];
    let mut zoned_parts: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for pos in 0..n {
        let rack = model.partitions[t][pos]
            .leader_rack
            .as_deref()
            .unwrap_or("");
        zoned_parts.entry(rack).or_default().push(base + pos);
    }
    let mut zoned_members: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for &m in members {
        zoned_members.entry(racks[m].as_str()).or_default().push(m);
    }
    let target = n / members.len();
    let mut remainder = n % members.len();
    let mut got = vec![0usize; members.len()];
    let slot = |m: usize| members.iter().position(|&x| x == m).unwrap_or(0);

    // In-rack pass: up to `target` each, plus at most one of the remainder.
    let mut leftovers: Vec<usize> = Vec::new();
    for (zone, parts) in zoned_parts {
        let Some(consumers) = zoned_members.get(zone) else {
            leftovers.extend(parts);
            continue;
        };
        let per = (parts.len() / consumers.len()).min(target);
        let mut it = parts.into_iter();
        for &c in consumers {
            for g in it.by_ref().take(per) {
                out[c].push(g);
                got[slot(c)] += 1;
            }
        }
        let rest: Vec<usize> = it.collect();
        let mut extra = rest.len();
        if per == target {
            extra = extra.min(remainder).min(consumers.len());
            remainder -= extra;
        }
        for (i, &g) in rest.iter().enumerate() {
            if i < extra {
                out[consumers[i]].push(g);
                got[slot(consumers[i])] += 1;
            } else {
                leftovers.push(g);
            }
        }
    }

    // Spread what is left, regardless of rack.
    let mut left = leftovers.into_iter();
    for (i, &m) in members.iter().enumerate() {
        let mut want = target.saturating_sub(got[i]);
        if got[i] <= target && remainder > 0 {
            want += 1;
            remainder -= 1;
        }
        for g in left.by_ref().take(want) {
            out[m].push(g);
            got[i] += 1;
        }
    }
    // Unreachable with consistent counts; kept so that no partition is ever dropped.
    for g in left {
        let i = (0..members.len()).min_by_key(|&i| got[i]).unwrap_or(0);
        out[members[i]].push(g);
        got[i] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PartitionMetadata, Subscription};

    fn topic(leaders: &[&str]) -> TopicMetadata {
        TopicMetadata::with_partitions(
            "t",
            leaders
                .iter()
                .enumerate()
                .map(|(i, r)| PartitionMetadata::with_racks(i as i32, *r, [*r]))
                .collect(),
        )
    }

    fn member(id: &str, rack: &str) -> GroupMember {
        let ud = RackAffinityGroupBalancer::new(rack).user_data(&[], -1);
        GroupMember::new(id, Subscription::new(["t"]).with_user_data(ud))
    }

    fn parts(a: &crate::Assignment) -> Vec<i32> {
        a.iter().map(|(_, p)| p).collect()
    }

    #[test]
    fn members_get_partitions_led_in_their_rack() {
        let t = [topic(&["a", "b", "c", "a", "b", "c"])];
        let m = [member("m1", "c"), member("m2", "a"), member("m3", "b")];
        let p = RackAffinityGroupBalancer::new("a").assign(&m, &t).unwrap();
        assert_eq!(parts(&p["m1"]), [2, 5]);
        assert_eq!(parts(&p["m2"]), [0, 3]);
        assert_eq!(parts(&p["m3"]), [1, 4]);
    }

    #[test]
    fn uneven_racks_still_balance() {
        // Five partitions led in rack a, one in b; two members in a, one in c.
        let t = [topic(&["a", "a", "a", "a", "a", "b"])];
        let m = [member("m1", "a"), member("m2", "a"), member("m3", "c")];
        let p = RackAffinityGroupBalancer::new("a").assign(&m, &t).unwrap();
        let counts: Vec<usize> = p.values().map(|a| a.len()).collect();
        assert_eq!(counts, [2, 2, 2]);
        assert!(parts(&p["m1"]).iter().all(|&x| x < 5));
        assert!(parts(&p["m2"]).iter().all(|&x| x < 5));
    }

    #[test]
    fn user_data_is_the_rack_name() {
        let b = RackAffinityGroupBalancer::new("use1-az1");
        assert_eq!(b.user_data(&[], 3).as_deref(), Some(&b"use1-az1"[..]));
        assert_eq!(b.protocol_name(), "rack-affinity");
    }
}
