//! Property tests over random groups, and the 1 -> 2 -> 3 -> 2 members scenario.

use std::collections::{BTreeMap, BTreeSet};

use kafkit_group_balancer::{
    Assignment, CooperativeStickyAssignor, GroupAssignment, GroupBalancer, GroupMember,
    PartitionMetadata, RackAffinityGroupBalancer, RangeAssignor, RoundRobinAssignor,
    StickyAssignor, Subscription, TopicMetadata, TopicPartitions,
};
use proptest::prelude::*;

const RACKS: [&str; 3] = ["a", "b", "c"];

/// A random group: topics with partition counts and replica racks, members with subscriptions
/// and racks.
#[derive(Debug, Clone)]
struct Group {
    topics: Vec<TopicMetadata>,
    members: Vec<GroupMember>,
}

fn group(equal_subscriptions: bool) -> impl Strategy<Value = Group> {
    let topics = prop::collection::vec(
        prop::collection::vec((0usize..3, prop::collection::vec(0usize..3, 0..3)), 1..16),
        1..5,
    );
    let members = prop::collection::vec(
        (
            prop::collection::vec(any::<bool>(), 4),
            prop::option::of(0usize..3),
            any::<bool>(),
        ),
        1..9,
    );
    (topics, members).prop_map(move |(topics, members)| {
        let topics: Vec<TopicMetadata> = topics
            .into_iter()
            .enumerate()
            .map(|(t, parts)| {
                TopicMetadata::with_partitions(
                    format!("t{t}"),
                    parts
                        .into_iter()
                        .enumerate()
                        .map(|(p, (leader, others))| {
                            let mut replicas = vec![RACKS[leader]];
                            replicas.extend(others.into_iter().map(|r| RACKS[r]));
                            PartitionMetadata::with_racks(p as i32, RACKS[leader], replicas)
                        })
                        .collect(),
                )
            })
            .collect();
        let names: Vec<String> = topics.iter().map(|t| t.topic.clone()).collect();
        let members = members
            .into_iter()
            .enumerate()
            .map(|(i, (pick, rack, is_static))| {
                let mut subs: Vec<String> = if equal_subscriptions {
                    names.clone()
                } else {
                    names
                        .iter()
                        .zip(&pick)
                        .filter(|(_, k)| **k)
                        .map(|(n, _)| n.clone())
                        .collect()
                };
                if subs.is_empty() {
                    subs.push(names[i % names.len()].clone());
                }
                let mut s = Subscription::new(subs);
                if let Some(r) = rack {
                    s = s.with_rack_id(RACKS[r]);
                }
                let m = GroupMember::new(format!("m{i:02}"), s);
                if is_static {
                    m.with_group_instance_id(format!("i{:02}", 9 - i))
                } else {
                    m
                }
            })
            .collect();
        Group { topics, members }
    })
}

fn assignors() -> Vec<Box<dyn GroupBalancer>> {
    vec![
        Box::new(RangeAssignor::new()),
        Box::new(RoundRobinAssignor::new()),
        Box::new(RackAffinityGroupBalancer::new("a")),
        Box::new(StickyAssignor::new()),
        Box::new(CooperativeStickyAssignor::new()),
    ]
}

/// Members as the leader would see them for `balancer`: rack-affinity carries the rack in the
/// user data.
fn for_balancer(b: &dyn GroupBalancer, members: &[GroupMember]) -> Vec<GroupMember> {
    members
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if b.protocol_name() == "rack-affinity" {
                let rack = m.subscription.rack_id.clone().unwrap_or_default();
                m.subscription.user_data = RackAffinityGroupBalancer::new(rack).user_data(&[], -1);
            }
            m
        })
        .collect()
}

/// Every partition of a subscribed topic goes to exactly one member subscribed to it.
fn check_exactly_once(g: &Group, plan: &GroupAssignment) -> Result<(), TestCaseError> {
    prop_assert_eq!(plan.len(), g.members.len());
    let mut seen = BTreeSet::new();
    for m in &g.members {
        for (t, p) in plan[&m.member_id].iter() {
            prop_assert!(
                m.subscription.topics.iter().any(|s| s == t),
                "{} got {t}",
                m.member_id
            );
            prop_assert!(seen.insert((t.to_string(), p)), "{t}-{p} assigned twice");
        }
    }
    let mut want = BTreeSet::new();
    for t in &g.topics {
        if g.members
            .iter()
            .any(|m| m.subscription.topics.contains(&t.topic))
        {
            for p in &t.partitions {
                want.insert((t.topic.clone(), p.partition));
            }
        }
    }
    prop_assert_eq!(seen, want);
    Ok(())
}

fn spread(counts: impl Iterator<Item = usize>) -> usize {
    let c: Vec<usize> = counts.collect();
    c.iter().max().unwrap_or(&0) - c.iter().min().unwrap_or(&0)
}

fn owned_of(plan: &GroupAssignment, id: &str) -> Vec<TopicPartitions> {
    plan.get(id)
        .map(|a| a.partitions.clone())
        .unwrap_or_default()
}

/// The member as it rejoins after `plan` in `generation`, for a sticky assignor.
fn rejoin(
    b: &dyn GroupBalancer,
    m: &GroupMember,
    owned: Vec<TopicPartitions>,
    generation: i32,
) -> GroupMember {
    let mut m = m.clone();
    m.subscription.user_data = b.user_data(&owned, generation);
    if b.protocol_name() == "cooperative-sticky" {
        m.subscription.owned_partitions = owned;
        m.subscription.generation_id = generation;
    }
    m
}

/// The fewest partitions that must leave their owners to reach a balanced assignment when all
/// members subscribe to the same topics: quotas floor/ceil of partitions/members, the larger
/// quotas going to the members that own the most.
fn minimum_moves(owned_counts: &[usize], partitions: usize) -> usize {
    let n = owned_counts.len();
    let mut o = owned_counts.to_vec();
    o.sort_unstable_by(|a, b| b.cmp(a));
    o.iter()
        .enumerate()
        .map(|(i, &c)| {
            let quota = partitions / n + usize::from(i < partitions % n);
            c.saturating_sub(quota)
        })
        .sum()
}

/// Partitions a member owned before that it does not have now.
fn revoked(before: &GroupAssignment, after: &GroupAssignment) -> usize {
    after
        .iter()
        .map(|(id, a)| {
            before
                .get(id)
                .map(|b| b.iter().filter(|(t, p)| !a.contains(t, *p)).count())
                .unwrap_or(0)
        })
        .sum()
}

/// Runs cooperative rounds until nothing is held back: members revoke what they lost and
/// rejoin. Returns the final plan and the partitions revoked over all rounds.
fn cooperative_until_stable(
    members: &[GroupMember],
    topics: &[TopicMetadata],
    mut owned: GroupAssignment,
    mut generation: i32,
) -> (GroupAssignment, usize, i32) {
    let b = CooperativeStickyAssignor::new();
    // A member that leaves revoked everything first (KIP-429), so only members present count.
    owned.retain(|id, _| members.iter().any(|m| &m.member_id == id));
    let total: usize = topics
        .iter()
        .filter(|t| {
            members
                .iter()
                .any(|m| m.subscription.topics.contains(&t.topic))
        })
        .map(|t| t.partitions.len())
        .sum();
    let mut revocations = 0;
    for _ in 0..4 {
        let joined: Vec<GroupMember> = members
            .iter()
            .map(|m| rejoin(&b, m, owned_of(&owned, &m.member_id), generation))
            .collect();
        let plan = b.assign(&joined, topics).expect("assign");
        // Never hand a partition to a new owner while another member still owns it.
        for (id, a) in &plan {
            for (t, p) in a.iter() {
                let mine = owned.get(id).is_some_and(|o| o.contains(t, p));
                let elsewhere = owned.iter().any(|(o, oa)| o != id && oa.contains(t, p));
                assert!(
                    mine || !elsewhere,
                    "{t}-{p} handed to {id} while owned elsewhere"
                );
            }
        }
        let present: GroupAssignment = owned
            .into_iter()
            .filter(|(id, _)| members.iter().any(|m| &m.member_id == id))
            .collect();
        revocations += revoked(&present, &plan);
        generation += 1;
        let assigned: usize = plan.values().map(Assignment::len).sum();
        owned = plan;
        if assigned == total {
            return (owned, revocations, generation);
        }
    }
    panic!("cooperative-sticky did not settle within 4 rounds: {owned:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn every_subscribed_partition_is_assigned_exactly_once(g in group(false)) {
        for b in assignors() {
            let members = for_balancer(b.as_ref(), &g.members);
            let plan = b.assign(&members, &g.topics).expect("assign");
            check_exactly_once(&g, &plan)?;
        }
    }

    #[test]
    fn equal_subscriptions_are_balanced(g in group(true)) {
        for b in assignors() {
            let members = for_balancer(b.as_ref(), &g.members);
            let plan = b.assign(&members, &g.topics).expect("assign");
            match b.protocol_name() {
                // These balance each topic on its own.
                "range" | "rack-affinity" => {
                    for t in &g.topics {
                        let per = plan.values().map(|a| a.iter().filter(|(x, _)| *x == t.topic).count());
                        prop_assert!(spread(per) <= 1, "{} {}: {plan:?}", b.protocol_name(), t.topic);
                    }
                }
                _ => prop_assert!(spread(plan.values().map(Assignment::len)) <= 1, "{}: {plan:?}", b.protocol_name()),
            }
        }
    }

    #[test]
    fn sticky_general_path_leaves_no_improving_move(g in group(false)) {
        // With different subscriptions no member can take a partition of its topics from a
        // member holding two or more partitions more than it.
        let plan = StickyAssignor::new().assign(&g.members, &g.topics).expect("assign");
        for m in &g.members {
            for o in &g.members {
                let (mc, oc) = (plan[&m.member_id].len(), plan[&o.member_id].len());
                if oc >= mc + 2 {
                    for (t, _) in plan[&o.member_id].iter() {
                        prop_assert!(!m.subscription.topics.iter().any(|s| s == t),
                            "{} ({mc}) could take {t} from {} ({oc})", m.member_id, o.member_id);
                    }
                }
            }
        }
    }

    #[test]
    fn sticky_moves_no_more_than_needed_from_any_previous_state(
        g in group(true),
        owners in prop::collection::vec(prop::option::of(0usize..8), 64),
    ) {
        // Random disjoint previous ownership, then one rebalance.
        for b in [&StickyAssignor::new() as &dyn GroupBalancer, &CooperativeStickyAssignor::new()] {
            let mut before = GroupAssignment::new();
            let mut k = 0;
            for t in &g.topics {
                for p in &t.partitions {
                    if let Some(Some(o)) = owners.get(k).map(|o| o.filter(|o| *o < g.members.len())) {
                        let e = before.entry(g.members[o].member_id.clone()).or_default();
                        match e.partitions.iter_mut().find(|x| x.topic == t.topic) {
                            Some(x) => x.partitions.push(p.partition),
                            None => e.partitions.push(TopicPartitions::new(t.topic.clone(), vec![p.partition])),
                        }
                    }
                    k += 1;
                }
            }
            let joined: Vec<GroupMember> = g.members.iter()
                .map(|m| rejoin(b, m, owned_of(&before, &m.member_id), 4))
                .collect();
            let plan = b.assign(&joined, &g.topics).expect("assign");
            let total: usize = g.topics.iter().map(|t| t.partitions.len()).sum();
            let counts: Vec<usize> = g.members.iter().map(|m| before.get(&m.member_id).map_or(0, Assignment::len)).collect();
            prop_assert_eq!(revoked(&before, &plan), minimum_moves(&counts, total), "{}", b.protocol_name());
        }
    }

    #[test]
    fn sticky_join_and_leave_move_the_minimum(g in group(true), leave in any::<prop::sample::Index>()) {
        for b in [&StickyAssignor::new() as &dyn GroupBalancer, &CooperativeStickyAssignor::new()] {
            let total: usize = g.topics.iter().map(|t| t.partitions.len()).sum();
            let first = b.assign(&g.members, &g.topics).expect("assign");

            // A member joins.
            let mut grown: Vec<GroupMember> = g.members.iter()
                .map(|m| rejoin(b, m, owned_of(&first, &m.member_id), 1))
                .collect();
            grown.push(GroupMember::new("zz-new", g.members[0].subscription.clone()));
            let counts: Vec<usize> = grown.iter().map(|m| first.get(&m.member_id).map_or(0, Assignment::len)).collect();
            let plan = b.assign(&grown, &g.topics).expect("assign");
            prop_assert_eq!(revoked(&first, &plan), minimum_moves(&counts, total), "{} join", b.protocol_name());

            // A member leaves.
            if g.members.len() > 1 {
                let gone = leave.index(g.members.len());
                let shrunk: Vec<GroupMember> = g.members.iter().enumerate()
                    .filter(|(i, _)| *i != gone)
                    .map(|(_, m)| rejoin(b, m, owned_of(&first, &m.member_id), 1))
                    .collect();
                let plan = b.assign(&shrunk, &g.topics).expect("assign");
                // Nobody that stays loses anything: the leaver's partitions fill the gaps.
                prop_assert_eq!(revoked(&first, &plan), 0, "{} leave", b.protocol_name());
            }
        }
    }

    #[test]
    fn cooperative_never_hands_over_a_partition_still_owned(
        g in group(false),
        claims in prop::collection::vec(prop::collection::vec(0usize..8, 0..3), 64),
    ) {
        // Random, possibly overlapping claims from the members (even conflicting ones).
        let mut owned: BTreeMap<String, Assignment> = BTreeMap::new();
        let mut k = 0;
        for t in &g.topics {
            for p in &t.partitions {
                for &c in claims.get(k).map(Vec::as_slice).unwrap_or(&[]) {
                    if let Some(m) = g.members.get(c)
                        && (m.subscription.topics.contains(&t.topic) || c % 2 == 0) {
                            let e = owned.entry(m.member_id.clone()).or_default();
                            e.partitions.push(TopicPartitions::new(t.topic.clone(), vec![p.partition]));
                        }
                }
                k += 1;
            }
        }
        // Asserts the hand-over rule each round and that everything is assigned in the end.
        let (plan, _, _) = cooperative_until_stable(&g.members, &g.topics, owned, 3);
        check_exactly_once(&g, &plan)?;
    }
}

fn member(id: &str) -> GroupMember {
    GroupMember::new(id, Subscription::new(["t"]))
}

#[test]
fn cooperative_scenario_10_partitions_members_1_2_3_2() {
    let topics = [TopicMetadata::new("t", 10)];
    let mut owned = GroupAssignment::new();
    let mut generation = 1;
    let mut revoked_per_step = Vec::new();
    for ids in [&["a"][..], &["a", "b"], &["a", "b", "c"], &["a", "c"]] {
        let members: Vec<GroupMember> = ids.iter().map(|id| member(id)).collect();
        let (plan, revoked, next) = cooperative_until_stable(&members, &topics, owned, generation);
        let counts: Vec<usize> = plan.values().map(Assignment::len).collect();
        assert!(spread(counts.into_iter()) <= 1, "{plan:?}");
        revoked_per_step.push(revoked);
        owned = plan;
        generation = next;
    }
    // 1: nothing owned; 2: a gives 5 to b; 3: a and b give up 4+... (5,5 -> 4,3,3): 3;
    // 2 again (b leaves): a and c only gain.
    assert_eq!(revoked_per_step, [0, 5, 3, 0]);
}

#[test]
fn eager_sticky_scenario_10_partitions_members_1_2_3_2() {
    let topics = [TopicMetadata::new("t", 10)];
    let b = StickyAssignor::new();
    let mut owned = GroupAssignment::new();
    let mut moved = Vec::new();
    for (generation, ids) in [&["a"][..], &["a", "b"], &["a", "b", "c"], &["a", "c"]]
        .iter()
        .enumerate()
    {
        let members: Vec<GroupMember> = ids
            .iter()
            .map(|id| rejoin(&b, &member(id), owned_of(&owned, id), generation as i32))
            .collect();
        let plan = b.assign(&members, &topics).expect("assign");
        moved.push(revoked(&owned, &plan));
        owned = plan;
    }
    assert_eq!(moved, [0, 5, 3, 0]);
}
