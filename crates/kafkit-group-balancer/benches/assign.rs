//! Time to assign 1,000 members x 10,000 partitions (100 topics of 100 partitions), for each
//! assignor. The sticky assignors are timed on a rebalance where one member has just joined a
//! group that owned a balanced assignment, the case the Java sticky assignor once took minutes on.

use criterion::{Criterion, criterion_main};
use kafkit_group_balancer::{
    CooperativeStickyAssignor, GroupBalancer, GroupMember, RackAffinityGroupBalancer,
    RangeAssignor, RoundRobinAssignor, StickyAssignor, Subscription, TopicMetadata,
};

const MEMBERS: usize = 1_000;
const TOPICS: usize = 100;
const PARTITIONS_PER_TOPIC: i32 = 100;

fn topics() -> Vec<TopicMetadata> {
    (0..TOPICS)
        .map(|t| TopicMetadata::new(format!("topic-{t:03}"), PARTITIONS_PER_TOPIC))
        .collect()
}

fn fresh_members(topics: &[TopicMetadata]) -> Vec<GroupMember> {
    let names: Vec<String> = topics.iter().map(|t| t.topic.clone()).collect();
    (0..MEMBERS)
        .map(|m| GroupMember::new(format!("member-{m:04}"), Subscription::new(names.clone())))
        .collect()
}

fn bench(c: &mut Criterion) {
    let topics = topics();
    let members = fresh_members(&topics);
    let mut g = c.benchmark_group("assign_1000_members_10000_partitions");
    g.sample_size(10);
    let assignors: Vec<Box<dyn GroupBalancer>> = vec![
        Box::new(RangeAssignor::new()),
        Box::new(RoundRobinAssignor::new()),
        Box::new(RackAffinityGroupBalancer::new("")),
        Box::new(StickyAssignor::new()),
        Box::new(CooperativeStickyAssignor::new()),
    ];
    for a in &assignors {
        g.bench_function(a.protocol_name(), |b| {
            b.iter(|| a.assign(&members, &topics).map(|p| p.len()))
        });
    }

    // Sticky rebalances: every member rejoins with what it owns and one new member arrives
    // (equal subscriptions), then the same with members subscribed to different halves of the
    // topics (the general path).
    let sticky: Vec<Box<dyn GroupBalancer>> = vec![
        Box::new(StickyAssignor::new()),
        Box::new(CooperativeStickyAssignor::new()),
    ];
    let names: Vec<String> = topics.iter().map(|t| t.topic.clone()).collect();
    for (label, mixed) in [("join", false), ("join_mixed_subscriptions", true)] {
        let members: Vec<GroupMember> = (0..MEMBERS)
            .map(|m| {
                let subs = if mixed && m % 2 == 1 {
                    names[..TOPICS / 2].to_vec()
                } else {
                    names.clone()
                };
                GroupMember::new(format!("member-{m:04}"), Subscription::new(subs))
            })
            .collect();
        for a in &sticky {
            let first = a.assign(&members, &topics).expect("assign");
            let mut rejoined: Vec<GroupMember> = members
                .iter()
                .map(|m| {
                    let owned = first[&m.member_id].partitions.clone();
                    let s = m
                        .subscription
                        .clone()
                        .with_user_data(a.user_data(&owned, 1))
                        .with_owned_partitions(owned)
                        .with_generation_id(1);
                    GroupMember::new(m.member_id.clone(), s)
                })
                .collect();
            rejoined.push(GroupMember::new(
                "member-new",
                Subscription::new(names.clone()),
            ));
            g.bench_function(format!("{}_{label}", a.protocol_name()), |b| {
                b.iter(|| a.assign(&rejoined, &topics).map(|p| p.len()))
            });
        }
    }

    // Worst case for the general path: one member claims every partition (e.g. it was alone
    // before) and the other 999, half of them on half of the topics, join at once.
    let all: Vec<kafkit_group_balancer::TopicPartitions> = topics
        .iter()
        .map(|t| {
            kafkit_group_balancer::TopicPartitions::new(
                t.topic.clone(),
                (0..PARTITIONS_PER_TOPIC).collect::<Vec<i32>>(),
            )
        })
        .collect();
    for a in &sticky {
        let members: Vec<GroupMember> = (0..MEMBERS)
            .map(|m| {
                let subs = if m % 2 == 1 {
                    names[..TOPICS / 2].to_vec()
                } else {
                    names.clone()
                };
                let mut s = Subscription::new(subs);
                if m == 0 {
                    s = s
                        .with_user_data(a.user_data(&all, 1))
                        .with_owned_partitions(all.clone())
                        .with_generation_id(1);
                }
                GroupMember::new(format!("member-{m:04}"), s)
            })
            .collect();
        g.bench_function(
            format!("{}_one_owner_mixed_subscriptions", a.protocol_name()),
            |b| b.iter(|| a.assign(&members, &topics).map(|p| p.len())),
        );
    }
    g.finish();
}

/// `criterion_group!` makes an undocumented `pub fn`; keep it in its own module.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}
criterion_main!(group::benches);
