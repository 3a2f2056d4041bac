//! `sticky` and `cooperative-sticky`: the Java `StickyAssignor` and `CooperativeStickyAssignor`
//! (the shared logic of Java's `AbstractStickyAssignor`; KIP-54, KIP-429, KIP-792).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::metadata::{DEFAULT_GENERATION, TopicPartitions, count_partitions};
use crate::model::Model;
use crate::{
    AssignError, GroupAssignment, GroupBalancer, GroupMember, RebalanceProtocol, TopicMetadata,
};

/// Protocol `sticky` (eager): a balanced assignment that keeps as many of each member's previous
/// partitions as balance allows. Matches the Java client's `StickyAssignor`: a member's previous
/// partitions and generation travel in its user data (`StickyAssignorUserData` v1: an array of
/// `(topic: string, partitions: [i32])` then `generation: i32`).
///
/// Guarantees:
/// - every partition assigned once, only to a member subscribed to its topic;
/// - when all members subscribe to the same topics, counts differ by at most one and the number
///   of partitions that change owner is the minimum any balanced assignment needs (Java's
///   "constrained" path, same algorithm);
/// - otherwise, no member could take a partition from a member holding two or more partitions
///   more than it; previously owned partitions are kept where that rule allows (own algorithm
///   with the goals of Java's "general" path, not its exact steps);
/// - a partition claimed by two members of the same generation is given to neither claimant's
///   keep-list; a claim from a newer generation wins over an older one.
///
/// Java iterates members in `HashMap` order; this crate uses member id order, so when several
/// members are equally good choices the pick can differ from a Java leader's. Member racks are
/// not used: the rack-aware preference Java 3.5+ adds to its sticky assignors (KIP-881) is not
/// implemented here (only [`RangeAssignor`](crate::RangeAssignor) is rack-aware).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct StickyAssignor;

impl StickyAssignor {
    /// A sticky assignor.
    pub fn new() -> Self {
        Self
    }
}

impl GroupBalancer for StickyAssignor {
    fn protocol_name(&self) -> &str {
        "sticky"
    }

    fn user_data(&self, owned: &[TopicPartitions], generation_id: i32) -> Option<Bytes> {
        Some(encode_sticky_user_data(owned, generation_id))
    }

    fn assign(
        &self,
        members: &[GroupMember],
        topics: &[TopicMetadata],
    ) -> Result<GroupAssignment, AssignError> {
        let model = Model::new(members, topics)?;
        let data: Vec<MemberData> = members
            .iter()
            .map(|m| {
                match m
                    .subscription
                    .user_data
                    .as_ref()
                    .and_then(decode_sticky_user_data)
                {
                    Some((owned, generation)) => MemberData {
                        owned: model.indexes_of(&owned),
                        generation,
                    },
                    None => MemberData::default(),
                }
            })
            .collect();
        Ok(model.finish(sticky_plan(&model, &data)))
    }
}

/// Protocol `cooperative-sticky` (KIP-429): the `sticky` plan, minus every partition that would
/// move to a member while another member still owns it. Matches the Java client's
/// `CooperativeStickyAssignor`: owned partitions come from the subscription's
/// `OwnedPartitions`, the generation from `GenerationId` (v2+) or else the user data (one `i32`).
///
/// Guarantees, beyond those of [`StickyAssignor`]:
/// - a partition changes owner in two rebalances: the first leaves it out of everyone's
///   assignment so its owner revokes it, the next assigns it to its new owner; no partition is
///   ever owned by two members in one generation;
/// - members keep every owned partition that the plan keeps, so only the partitions that must
///   move are revoked.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct CooperativeStickyAssignor;

impl CooperativeStickyAssignor {
    /// A cooperative sticky assignor.
    pub fn new() -> Self {
        Self
    }
}

impl GroupBalancer for CooperativeStickyAssignor {
    fn protocol_name(&self) -> &str {
        "cooperative-sticky"
    }

    fn rebalance_protocol(&self) -> RebalanceProtocol {
        RebalanceProtocol::Cooperative
    }

    fn user_data(&self, _owned: &[TopicPartitions], generation_id: i32) -> Option<Bytes> {
        Some(Bytes::copy_from_slice(&generation_id.to_be_bytes()))
    }

    fn assign(
        &self,
        members: &[GroupMember],
        topics: &[TopicMetadata],
    ) -> Result<GroupAssignment, AssignError> {
        let model = Model::new(members, topics)?;
        let data: Vec<MemberData> = members
            .iter()
            .map(|m| {
                let s = &m.subscription;
                let generation = if s.generation_id >= 0 {
                    Some(s.generation_id)
                } else {
                    s.user_data.as_ref().map(|ud| {
                        let mut b = ud.clone();
                        if b.len() >= 4 {
                            b.get_i32()
                        } else {
                            DEFAULT_GENERATION
                        }
                    })
                };
                MemberData {
                    owned: model.indexes_of(&s.owned_partitions),
                    generation,
                }
            })
            .collect();
        let mut plan = sticky_plan(&model, &data);

        // Withhold a partition from its new member while anyone else still claims it.
        let n = model.num_partitions();
        let mut claims = vec![0u32; n];
        let mut owned_sorted: Vec<Vec<usize>> = Vec::with_capacity(members.len());
        for d in &data {
            let mut o = d.owned.clone();
            o.sort_unstable();
            o.dedup();
            for &g in &o {
                claims[g] += 1;
            }
            owned_sorted.push(o);
        }
        // A member that already claims a partition keeps it (any other claimant must revoke
        // it, since it is not in that claimant's assignment); a partition new to a member is
        // held back while anyone claims it.
        for (m, list) in plan.iter_mut().enumerate() {
            list.retain(|&g| claims[g] == 0 || owned_sorted[m].binary_search(&g).is_ok());
        }
        Ok(model.finish(plan))
    }
}

/// A member's previous partitions (global indexes) and their generation.
#[derive(Debug, Default)]
struct MemberData {
    owned: Vec<usize>,
    generation: Option<i32>,
}

/// `StickyAssignorUserData`: `[topics: i32 count][(topic: i16 len + UTF-8, partitions: i32
/// count + i32s)...][generation: i32]`.
fn encode_sticky_user_data(owned: &[TopicPartitions], generation_id: i32) -> Bytes {
    let mut buf = BytesMut::with_capacity(8 + owned.len() * 8 + count_partitions(owned) * 4);
    buf.put_i32(owned.len() as i32);
    for t in owned {
        let name = t.topic.as_bytes();
        buf.put_i16(name.len().min(i16::MAX as usize) as i16);
        buf.put_slice(&name[..name.len().min(i16::MAX as usize)]);
        buf.put_i32(t.partitions.len() as i32);
        for &p in &t.partitions {
            buf.put_i32(p);
        }
    }
    buf.put_i32(generation_id);
    buf.freeze()
}

/// Decodes `StickyAssignorUserData` v1 or v0 (no generation). Malformed data counts as none,
/// as a member whose data cannot be read has nothing to be sticky to.
fn decode_sticky_user_data(ud: &Bytes) -> Option<(Vec<TopicPartitions>, Option<i32>)> {
    let mut b = ud.clone();
    if b.remaining() < 4 {
        return None;
    }
    let topics = b.get_i32();
    if topics < 0 || topics as usize > b.remaining() / 6 {
        return None;
    }
    let mut out = Vec::with_capacity(topics as usize);
    for _ in 0..topics {
        if b.remaining() < 2 {
            return None;
        }
        let len = b.get_i16();
        if len < 0 || len as usize > b.remaining() {
            return None;
        }
        let name = String::from_utf8(b.split_to(len as usize).to_vec()).ok()?;
        if b.remaining() < 4 {
            return None;
        }
        let count = b.get_i32();
        if count < 0 || count as usize > b.remaining() / 4 {
            return None;
        }
        let partitions: Vec<i32> = (0..count).map(|_| b.get_i32()).collect();
        out.push(TopicPartitions::new(name, partitions));
    }
    let generation = (b.remaining() >= 4).then(|| b.get_i32());
    Some((out, generation))
}

/// The plan both sticky assignors share: per member, the global indexes it gets.
fn sticky_plan(model: &Model<'_>, data: &[MemberData]) -> Vec<Vec<usize>> {
    let members = model.members;
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by(|&a, &b| members[a].member_id.cmp(&members[b].member_id));
    let n = model.num_partitions();

    // Resolve claims: a newer generation wins; two claims from one generation cancel out.
    let mut owner: Vec<Option<usize>> = vec![None; n];
    let mut owner_generation = vec![DEFAULT_GENERATION; n];
    let mut conflicted = vec![false; n];
    for &m in &order {
        let generation = data[m].generation.unwrap_or(DEFAULT_GENERATION);
        for &g in &data[m].owned {
            if conflicted[g] || !model.subscribes(m, model.topic_of[g]) {
                continue;
            }
            match owner[g] {
                None => {
                    owner[g] = Some(m);
                    owner_generation[g] = generation;
                }
                Some(o) if o == m => {}
                Some(_) if generation == owner_generation[g] => {
                    owner[g] = None;
                    conflicted[g] = true;
                }
                Some(_) if generation > owner_generation[g] => {
                    owner[g] = Some(m);
                    owner_generation[g] = generation;
                }
                Some(_) => {}
            }
        }
    }
    let mut owned: Vec<Vec<usize>> = vec![Vec::new(); members.len()];
    for (g, o) in owner.iter().enumerate() {
        if let Some(o) = *o {
            owned[o].push(g); // in (topic, partition) order, as Java sorts them
        }
    }

    let topic_sets: Vec<Vec<&str>> = members
        .iter()
        .map(|m| {
            let mut t: Vec<&str> = m.subscription.topics.iter().map(String::as_str).collect();
            t.sort_unstable();
            t.dedup();
            t
        })
        .collect();
    let all_equal = topic_sets.windows(2).all(|w| w[0] == w[1]);
    if members.is_empty() {
        return Vec::new();
    }
    if all_equal {
        constrained(n, &order, owned)
    } else {
        general(model, &order, owner)
    }
}

/// Java's constrained path (all members subscribe to the same topics): every member keeps up
/// to its quota of what it owns, then the rest is dealt round-robin to members under quota.
fn constrained(n: usize, order: &[usize], owned: Vec<Vec<usize>>) -> Vec<Vec<usize>> {
    let members = order.len();
    let min_quota = n / members;
    let max_quota = n.div_ceil(members);
    let expected_over = n % members;
    let mut current_over = 0usize;
    let mut under: Vec<usize> = Vec::new();
    let mut exact: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
    let mut plan: Vec<Vec<usize>> = vec![Vec::new(); owned.len()];
    let mut assigned = vec![false; n];

    for &m in order {
        let mine = &owned[m];
        let keep = if mine.len() < min_quota {
            under.push(m);
            mine.len()
        } else if mine.len() >= max_quota && current_over < expected_over {
            current_over += 1;
            if current_over == expected_over {
                exact.clear();
            }
            max_quota
        } else {
            if current_over < expected_over {
                exact.push_back(m);
            }
            min_quota
        };
        for &g in &mine[..keep] {
            plan[m].push(g);
            assigned[g] = true;
        }
    }

    let mut cursor = 0usize;
    for g in (0..n).filter(|&g| !assigned[g]) {
        let (m, from_under) = if cursor < under.len() {
            cursor += 1;
            (under[cursor - 1], true)
        } else if !under.is_empty() {
            cursor = 1;
            (under[0], true)
        } else if let Some(m) = exact.pop_front() {
            (m, false)
        } else {
            // Quotas add up to `n`, so this cannot happen; never drop a partition regardless.
            let m = order
                .iter()
                .copied()
                .min_by_key(|&m| plan[m].len())
                .unwrap_or(order[0]);
            (m, false)
        };
        plan[m].push(g);
        let count = plan[m].len();
        if count == min_quota && from_under {
            cursor -= 1;
            under.remove(cursor);
            exact.push_back(m);
        } else if count == max_quota {
            current_over += 1;
            if current_over == expected_over {
                exact.clear();
            }
        }
    }
    plan
}

/// Members subscribe to different topics: keep valid owned partitions, give each unowned one
/// (fewest possible members first) to its least loaded member, then move partitions from a
/// member to one with two or more fewer until no such move exists, moving newly placed
/// partitions before previously owned ones.
fn general(model: &Model<'_>, order: &[usize], mut owner: Vec<Option<usize>>) -> Vec<Vec<usize>> {
    let members = model.members.len();
    let mut rank = vec![0usize; members];
    for (r, &m) in order.iter().enumerate() {
        rank[m] = r;
    }
    let previous = owner.clone();
    let mut counts = vec![0usize; members];
    for o in owner.iter().flatten() {
        counts[*o] += 1;
    }
    let least_loaded = |counts: &[usize], t: usize| -> Option<usize> {
        model.subscribers[t]
            .iter()
            .copied()
            .min_by_key(|&m| (counts[m], rank[m]))
    };

    let mut unowned: Vec<usize> = (0..owner.len()).filter(|&g| owner[g].is_none()).collect();
    unowned.sort_by_key(|&g| (model.subscribers[model.topic_of[g]].len(), g));
    for g in unowned {
        if let Some(m) = least_loaded(&counts, model.topic_of[g]) {
            owner[g] = Some(m);
            counts[m] += 1;
        }
    }

    for move_owned in [false, true] {
        loop {
            let mut moved = false;
            for g in 0..owner.len() {
                let Some(o) = owner[g] else { continue };
                if !move_owned && previous[g] == Some(o) {
                    continue;
                }
                let Some(m) = least_loaded(&counts, model.topic_of[g]) else {
                    continue;
                };
                if counts[m] + 1 < counts[o] {
                    owner[g] = Some(m);
                    counts[o] -= 1;
                    counts[m] += 1;
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
    }

    let mut plan = vec![Vec::new(); members];
    for (g, o) in owner.iter().enumerate() {
        if let Some(o) = *o {
            plan[o].push(g);
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Assignment, Subscription};

    fn names(a: &Assignment) -> Vec<String> {
        a.iter().map(|(t, p)| format!("{t}p{p}")).collect()
    }

    fn rejoin(id: &str, topics: &[&str], prev: &Assignment, generation: i32) -> GroupMember {
        let ud = StickyAssignor::new().user_data(&prev.partitions, generation);
        GroupMember::new(
            id,
            Subscription::new(topics.iter().copied()).with_user_data(ud),
        )
    }

    #[test]
    fn java_doc_example_equal_subscriptions_then_a_member_leaves() {
        let topics: Vec<TopicMetadata> = ["t0", "t1", "t2", "t3"]
            .iter()
            .map(|t| TopicMetadata::new(*t, 2))
            .collect();
        let all = ["t0", "t1", "t2", "t3"];
        let m: Vec<GroupMember> = ["C0", "C1", "C2"]
            .iter()
            .map(|id| GroupMember::new(*id, Subscription::new(all)))
            .collect();
        let p = StickyAssignor::new().assign(&m, &topics).unwrap();
        assert_eq!(names(&p["C0"]), ["t0p0", "t1p1", "t3p0"]);
        assert_eq!(names(&p["C1"]), ["t0p1", "t2p0", "t3p1"]);
        assert_eq!(names(&p["C2"]), ["t1p0", "t2p1"]);

        // C1 leaves: C0 and C2 keep everything they had and split C1's three partitions.
        let m2 = [
            rejoin("C0", &all, &p["C0"], 1),
            rejoin("C2", &all, &p["C2"], 1),
        ];
        let p2 = StickyAssignor::new().assign(&m2, &topics).unwrap();
        assert_eq!(p2["C0"].len(), 4);
        assert_eq!(p2["C2"].len(), 4);
        assert!(p["C0"].iter().all(|(t, q)| p2["C0"].contains(t, q)));
        assert!(p["C2"].iter().all(|(t, q)| p2["C2"].contains(t, q)));
    }

    #[test]
    fn java_doc_example_unequal_subscriptions_then_a_member_leaves() {
        let topics = [
            TopicMetadata::new("t0", 1),
            TopicMetadata::new("t1", 2),
            TopicMetadata::new("t2", 3),
        ];
        let subs: [(&str, &[&str]); 3] = [
            ("C0", &["t0"]),
            ("C1", &["t0", "t1"]),
            ("C2", &["t0", "t1", "t2"]),
        ];
        let m: Vec<GroupMember> = subs
            .iter()
            .map(|(id, t)| GroupMember::new(*id, Subscription::new(t.iter().copied())))
            .collect();
        let p = StickyAssignor::new().assign(&m, &topics).unwrap();
        assert_eq!(names(&p["C0"]), ["t0p0"]);
        assert_eq!(names(&p["C1"]), ["t1p0", "t1p1"]);
        assert_eq!(names(&p["C2"]), ["t2p0", "t2p1", "t2p2"]);

        let m2 = [
            rejoin("C1", subs[1].1, &p["C1"], 1),
            rejoin("C2", subs[2].1, &p["C2"], 1),
        ];
        let p2 = StickyAssignor::new().assign(&m2, &topics).unwrap();
        assert_eq!(names(&p2["C1"]), ["t0p0", "t1p0", "t1p1"]);
        assert_eq!(names(&p2["C2"]), ["t2p0", "t2p1", "t2p2"]);
    }

    #[test]
    fn sticky_user_data_round_trips_and_tolerates_garbage() {
        let owned = vec![TopicPartitions::new("t", vec![1, 3])];
        let one = StickyAssignor::new()
            .user_data(&[TopicPartitions::new("t", vec![1])], 2)
            .unwrap();
        // [1 topic]["t"][1 partition][1][generation 2]
        assert_eq!(
            &one[..],
            &[0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2]
        );
        let ud = StickyAssignor::new().user_data(&owned, 9).unwrap();
        assert_eq!(decode_sticky_user_data(&ud), Some((owned.clone(), Some(9))));
        // v0 (no generation).
        let v0 = ud.slice(..ud.len() - 4);
        assert_eq!(decode_sticky_user_data(&v0), Some((owned, None)));
        assert_eq!(
            decode_sticky_user_data(&Bytes::from_static(&[0, 0, 0x7f, 0])),
            None
        );
        assert_eq!(
            decode_sticky_user_data(&Bytes::from_static(&[0xff; 8])),
            None
        );
    }

    #[test]
    fn cooperative_user_data_is_the_generation() {
        let a = CooperativeStickyAssignor::new();
        assert_eq!(a.user_data(&[], 5).as_deref(), Some(&[0, 0, 0, 5][..]));
        assert_eq!(a.rebalance_protocol(), RebalanceProtocol::Cooperative);
    }

    #[test]
    fn same_generation_double_claim_is_not_kept_by_either() {
        let topics = [TopicMetadata::new("t", 4)];
        let owned = vec![TopicPartitions::new("t", vec![0, 1])];
        let mk = |id: &str, gen_id: i32| {
            GroupMember::new(
                id,
                Subscription::new(["t"])
                    .with_owned_partitions(owned.clone())
                    .with_generation_id(gen_id),
            )
        };
        // Same generation: neither claim is kept as such; the partitions are dealt again and
        // may only go to a member that already claims them (the other claimant revokes).
        let p = CooperativeStickyAssignor::new()
            .assign(&[mk("a", 3), mk("b", 3)], &topics)
            .unwrap();
        for q in [0, 1] {
            assert!(
                p["a"].contains("t", q) != p["b"].contains("t", q),
                "t-{q} {p:?}"
            );
        }
        assert_eq!(p["a"].len() + p["b"].len(), 4);
        // Newer generation wins and keeps them; the older claimant must revoke.
        let p = CooperativeStickyAssignor::new()
            .assign(&[mk("a", 2), mk("b", 3)], &topics)
            .unwrap();
        assert!(p["b"].contains("t", 0) && p["b"].contains("t", 1));
        assert!(!p["a"].contains("t", 0) && !p["a"].contains("t", 1));
    }
}
