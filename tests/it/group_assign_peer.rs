//! kafkit-group-balancer against librdkafka's own assignors: two librdkafka consumers join one
//! group on the in-process mock cluster with `partition.assignment.strategy` set to `range` or
//! `roundrobin` (librdkafka's ports of the Java assignors), and the partitions they end up with
//! must be the two assignments our assignor makes for the same group.
//!
//! librdkafka does not expose member ids, and the broker chooses them, so the test computes our
//! plan for every order the member ids could sort in and requires librdkafka's result to be one
//! of them.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use integration_tests::{PEER_TIMEOUT, mock_cluster, unique_topic};
use kafkit_group_balancer::{
    GroupBalancer, GroupMember, RangeAssignor, RoundRobinAssignor, Subscription, TopicMetadata,
};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

type Split = BTreeSet<(String, i32)>;

fn consumer(bootstrap: &str, group: &str, strategy: &str, topics: &[&str]) -> BaseConsumer {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("partition.assignment.strategy", strategy)
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "200")
        .create()
        .expect("librdkafka consumer");
    c.subscribe(topics).expect("subscribe");
    c
}

fn split(c: &BaseConsumer) -> Split {
    c.assignment()
        .expect("assignment")
        .elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

/// Polls the consumers until their assignments are non-empty, pairwise disjoint and cover
/// all `total` partitions: the group's settled state (every topic here has at least as many
/// partitions per member as needed for each member to get one).
fn settled(consumers: &[BaseConsumer], total: usize) -> Vec<Split> {
    let deadline = Instant::now() + PEER_TIMEOUT;
    loop {
        for c in consumers {
            if let Some(Err(e)) = c.poll(Duration::from_millis(50)) {
                eprintln!("consumer poll: {e}");
            }
        }
        let splits: Vec<Split> = consumers.iter().map(split).collect();
        let union: Split = splits.iter().flatten().cloned().collect();
        let sum: usize = splits.iter().map(Split::len).sum();
        if splits.iter().all(|s| !s.is_empty()) && union.len() == sum && sum == total {
            return splits;
        }
        assert!(
            Instant::now() < deadline,
            "group did not settle within {PEER_TIMEOUT:?}: {splits:?}"
        );
    }
}

/// Our plan for members with these subscriptions, for every order the broker may have put the
/// member ids in: `result[k][i]` is member `i`'s partitions under order `k`.
fn ours(
    assignor: &dyn GroupBalancer,
    subs: &[Vec<String>],
    topics: &[(String, i32)],
) -> Vec<Vec<Split>> {
    let metadata: Vec<TopicMetadata> = topics
        .iter()
        .map(|(t, n)| TopicMetadata::new(t.clone(), *n))
        .collect();
    let mut out = Vec::new();
    for order in permutations(subs.len()) {
        // Member i sorts at position order[i].
        let members: Vec<GroupMember> = subs
            .iter()
            .enumerate()
            .map(|(i, s)| GroupMember::new(format!("m{}", order[i]), Subscription::new(s.clone())))
            .collect();
        let plan = assignor.assign(&members, &metadata).expect("assign");
        out.push(
            members
                .iter()
                .map(|m| {
                    plan[&m.member_id]
                        .iter()
                        .map(|(t, p)| (t.to_string(), p))
                        .collect()
                })
                .collect(),
        );
    }
    out
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for p in permutations(n - 1) {
        for at in 0..=p.len() {
            let mut q = p.clone();
            q.insert(at, n - 1);
            out.push(q);
        }
    }
    out
}

/// `subs[i]` lists the topic indexes consumer `i` subscribes to; `counts[t]` is topic `t`'s
/// partition count.
fn compare(strategy: &str, assignor: &dyn GroupBalancer, counts: &[i32], subs: &[&[usize]]) {
    let cluster = mock_cluster(1);
    let bootstrap = cluster.bootstrap_servers();
    // Names share a prefix and differ in a final digit, so they sort the same on both sides.
    let base = unique_topic("grp");
    let topics: Vec<(String, i32)> = counts
        .iter()
        .enumerate()
        .map(|(i, n)| (format!("{base}-{i}"), *n))
        .collect();
    for (t, n) in &topics {
        cluster.create_topic(t, *n, 1).expect("create topic");
    }
    let subs: Vec<Vec<String>> = subs
        .iter()
        .map(|s| s.iter().map(|&t| topics[t].0.clone()).collect())
        .collect();
    let group = unique_topic("group");
    let consumers: Vec<BaseConsumer> = subs
        .iter()
        .map(|s| {
            let names: Vec<&str> = s.iter().map(String::as_str).collect();
            consumer(&bootstrap, &group, strategy, &names)
        })
        .collect();
    let total: usize = topics
        .iter()
        .filter(|(t, _)| subs.iter().any(|s| s.contains(t)))
        .map(|(_, n)| *n as usize)
        .sum();
    let theirs = settled(&consumers, total);
    let candidates = ours(assignor, &subs, &topics);
    assert!(
        candidates.contains(&theirs),
        "{strategy}: librdkafka gave {theirs:?}, none of our {} member orders does",
        candidates.len()
    );
}

#[test]
fn range_matches_librdkafka() {
    // Java's documented example: two members, two topics of three partitions.
    compare("range", &RangeAssignor::new(), &[3, 3], &[&[0, 1], &[0, 1]]);
}

#[test]
fn range_matches_librdkafka_with_different_subscriptions() {
    compare(
        "range",
        &RangeAssignor::new(),
        &[3, 4, 5],
        &[&[0], &[0, 1], &[0, 1, 2]],
    );
}

#[test]
fn roundrobin_matches_librdkafka() {
    compare(
        "roundrobin",
        &RoundRobinAssignor::new(),
        &[3, 3],
        &[&[0, 1], &[0, 1]],
    );
}

#[test]
fn roundrobin_matches_librdkafka_with_different_subscriptions() {
    compare(
        "roundrobin",
        &RoundRobinAssignor::new(),
        &[3, 3, 3],
        &[&[0], &[0, 1], &[0, 1, 2]],
    );
}
