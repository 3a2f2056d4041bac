//! `roundrobin`: the Java `RoundRobinAssignor`.

use crate::model::{Model, java_member_order};
use crate::{AssignError, GroupAssignment, GroupBalancer, GroupMember, TopicMetadata};

/// Protocol `roundrobin`: all subscribed partitions, sorted by topic then partition, dealt one
/// at a time to the members in a circle (members ordered by `group.instance.id`, then member
/// id), skipping members not subscribed to the partition's topic. Matches the Java client's
/// `RoundRobinAssignor`.
///
/// Guarantees: every partition assigned once; when all members subscribe to the same topics,
/// member counts differ by at most one. With different subscriptions the spread can be larger.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RoundRobinAssignor;

impl RoundRobinAssignor {
    /// A round-robin assignor.
    pub fn new() -> Self {
        Self
    }
}

impl GroupBalancer for RoundRobinAssignor {
    fn protocol_name(&self) -> &str {
        "roundrobin"
    }

    fn assign(
        &self,
        members: &[GroupMember],
        topics: &[TopicMetadata],
    ) -> Result<GroupAssignment, AssignError> {
        let model = Model::new(members, topics)?;
        let order = java_member_order(members);
        let mut out = vec![Vec::new(); members.len()];
        let mut next = 0usize;
        for g in 0..model.num_partitions() {
            let t = model.topic_of[g];
            // The topic is in the model only if someone subscribes, so this ends within one lap.
            while !model.subscribes(order[next], t) {
                next = (next + 1) % order.len();
            }
            out[order[next]].push(g);
            next = (next + 1) % order.len();
        }
        Ok(model.finish(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Subscription;

    fn names(a: &crate::Assignment) -> Vec<String> {
        a.iter().map(|(t, p)| format!("{t}p{p}")).collect()
    }

    #[test]
    fn java_doc_example_two_members_two_topics_of_three() {
        let m = [
            GroupMember::new("C0", Subscription::new(["t0", "t1"])),
            GroupMember::new("C1", Subscription::new(["t0", "t1"])),
        ];
        let t = [TopicMetadata::new("t0", 3), TopicMetadata::new("t1", 3)];
        let p = RoundRobinAssignor::new().assign(&m, &t).unwrap();
        assert_eq!(names(&p["C0"]), ["t0p0", "t0p2", "t1p1"]);
        assert_eq!(names(&p["C1"]), ["t0p1", "t1p0", "t1p2"]);
    }

    #[test]
    fn java_doc_example_unequal_subscriptions() {
        // C0: t0; C1: t0, t1; C2: t0, t1, t2; t0 has 1 partition, t1 2, t2 3.
        let m = [
            GroupMember::new("C0", Subscription::new(["t0"])),
            GroupMember::new("C1", Subscription::new(["t0", "t1"])),
            GroupMember::new("C2", Subscription::new(["t0", "t1", "t2"])),
        ];
        let t = [
            TopicMetadata::new("t0", 1),
            TopicMetadata::new("t1", 2),
            TopicMetadata::new("t2", 3),
        ];
        let p = RoundRobinAssignor::new().assign(&m, &t).unwrap();
        assert_eq!(names(&p["C0"]), ["t0p0"]);
        assert_eq!(names(&p["C1"]), ["t1p0"]);
        assert_eq!(names(&p["C2"]), ["t1p1", "t2p0", "t2p1", "t2p2"]);
    }

    #[test]
    fn no_members_or_no_topics() {
        let p = RoundRobinAssignor::new()
            .assign(&[], &[TopicMetadata::new("t", 3)])
            .unwrap();
        assert!(p.is_empty());
        let m = [GroupMember::new("a", Subscription::new(["t"]))];
        let p = RoundRobinAssignor::new().assign(&m, &[]).unwrap();
        assert!(p["a"].is_empty());
    }
}
