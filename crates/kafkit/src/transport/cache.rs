//! The metadata cache: the last Metadata answer, the topics asked for so far, its age, and
//! what was marked stale: the whole answer (a broker or controller changed), or single topics
//! (a partition error of a topic), which the next lookup that wants them fetches alone.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::conn::metadata::{Broker, Metadata, TopicMetadata};

/// The cache's state, under the transport's mutex.
#[derive(Debug, Default)]
pub(crate) struct MetadataCache {
    /// The last answer (with leader hints applied).
    pub(crate) current: Option<Arc<Metadata>>,
    /// When `current` was fetched.
    fetched_at: Option<Instant>,
    /// Every topic asked for so far: each refresh fetches them all.
    pub(crate) topics: BTreeSet<String>,
    /// Bumped by every invalidation; a refresh that started before the latest one does not
    /// make the cache fresh.
    pub(crate) invalidations: u64,
    /// The value of `invalidations` the cached answer is fresh for.
    fresh_for: u64,
    /// Bumped whenever `current` changes (lets waiters see that a refresh happened).
    pub(crate) generation: u64,
    /// Topic name -> its slot in `current.topics`.
    index: HashMap<String, usize>,
    /// Topics marked stale since they were last fetched: name -> the mark's number (from
    /// `marks`). A refresh that started before a mark does not clear it.
    stale: HashMap<String, u64>,
    /// Bumped by every topic mark.
    marks: u64,
}

/// What a refresh must fetch (see [`MetadataCache::plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RefreshPlan {
    /// The topics to ask for.
    pub(crate) topics: Vec<String>,
    /// Every topic asked for so far (the answer replaces the cache, and makes it young again),
    /// or only the missing and stale ones (merged into it; the cache's age is unchanged).
    pub(crate) full: bool,
    /// `invalidations` and `marks` when the refresh was planned.
    pub(crate) started_at: u64,
    pub(crate) marks_at: u64,
}

impl MetadataCache {
    /// Whether the answer as a whole may be used: there is one, younger than `max_age`, and
    /// not invalidated since it was fetched.
    fn whole_fresh(&self, max_age: Duration) -> bool {
        self.current.is_some()
            && self.fresh_for == self.invalidations
            && self.fetched_at.is_some_and(|at| at.elapsed() < max_age)
    }

    /// The cached answer when it is fresh (younger than `max_age`, not invalidated since) and
    /// holds every topic of `topics`, none of them marked stale.
    pub(crate) fn fresh(&self, max_age: Duration, topics: &[&str]) -> Option<Arc<Metadata>> {
        if !self.whole_fresh(max_age) {
            return None;
        }
        let md = self.current.as_ref()?;
        if !self.stale.is_empty() && topics.iter().any(|t| self.stale.contains_key(*t)) {
            return None;
        }
        let all_present = if topics.len() <= 8 {
            topics.iter().all(|t| md.topic(t).is_some())
        } else {
            // Many names: one pass over the answer instead of a scan per name.
            let names: std::collections::HashSet<&str> =
                md.topics.iter().map(|t| t.name.as_str()).collect();
            topics.iter().all(|t| names.contains(t))
        };
        all_present.then(|| Arc::clone(md))
    }

    /// What a lookup of `topics` must fetch: every topic asked for so far (and `topics`) when
    /// the answer as a whole is old or invalidated, else only the topics of `topics` that are
    /// missing from it, and every topic marked stale.
    pub(crate) fn plan(&self, max_age: Duration, topics: &[&str]) -> RefreshPlan {
        let mut full = !self.whole_fresh(max_age);
        let mut want: Vec<String> = Vec::new();
        if !full {
            let mut stale: Vec<&String> = self.stale.keys().collect();
            stale.sort();
            want.extend(stale.into_iter().cloned());
            for t in topics {
                if !self.index.contains_key(*t) && !want.iter().any(|w| w == t) {
                    want.push((*t).to_owned());
                }
            }
            // Nothing is missing or stale: the caller wanted a refresh of the whole.
            full = want.is_empty();
        }
        if full {
            want.clear();
            want.extend(self.topics.iter().cloned());
            want.extend(
                topics
                    .iter()
                    .filter(|t| !self.topics.contains(**t))
                    .map(|t| (*t).to_owned()),
            );
        }
        RefreshPlan {
            topics: want,
            full,
            started_at: self.invalidations,
            marks_at: self.marks,
        }
    }

    /// Stores the answer to a refresh planned as `plan` ([`MetadataCache::plan`]): a full
    /// answer replaces the cache, a partial one replaces its topics and the cluster's brokers
    /// and controller. Either way a partition whose cached leader epoch is newer than the
    /// answer's (a KIP-951 hint, or an answer from a broker that knew more) keeps its cached
    /// leader: a broker that lags behind must not move a partition back to a leader that gave
    /// it up. The stale marks of the fetched topics are cleared, unless they came after the
    /// refresh started.
    pub(crate) fn store_planned(&mut self, md: Metadata, plan: &RefreshPlan) -> Arc<Metadata> {
        self.clear_marks(&plan.topics, plan.marks_at);
        match &self.current {
            Some(_) if !plan.full => self.merge(md),
            _ => self.store(md, plan.started_at),
        }
    }

    /// Forgets the stale marks of `topics` made up to mark number `upto`.
    fn clear_marks(&mut self, topics: &[String], upto: u64) {
        if self.stale.is_empty() {
            return;
        }
        for t in topics {
            if self.stale.get(t).is_some_and(|m| *m <= upto) {
                self.stale.remove(t);
            }
        }
    }

    /// Merges a partial answer: its topics replace (or join) the cached ones, its brokers,
    /// controller and cluster id replace the cached ones; the cache's age is unchanged.
    fn merge(&mut self, mut md: Metadata) -> Arc<Metadata> {
        let Some(old) = self.current.clone() else {
            return self.store(md, self.invalidations);
        };
        keep_newer_leaders(&old, &self.index, &mut md);
        let fetched = std::mem::replace(&mut md.topics, old.topics.clone());
        for t in fetched {
            match self.index.get(&t.name) {
                Some(&i) if md.topics.get(i).is_some_and(|o| o.name == t.name) => {
                    md.topics[i] = t;
                }
                _ => {
                    self.index.insert(t.name.clone(), md.topics.len());
                    md.topics.push(t);
                }
            }
        }
        let md = Arc::new(md);
        self.current = Some(Arc::clone(&md));
        self.generation += 1;
        md
    }

    /// Stores a full refresh that started when `invalidations` was `started_at`, keeping newer
    /// cached leaders (see [`MetadataCache::store_planned`]).
    pub(crate) fn store(&mut self, mut md: Metadata, started_at: u64) -> Arc<Metadata> {
        if let Some(old) = &self.current {
            keep_newer_leaders(old, &self.index, &mut md);
        }
        self.index = md
            .topics
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        let md = Arc::new(md);
        self.current = Some(Arc::clone(&md));
        self.fetched_at = Some(Instant::now());
        self.fresh_for = started_at;
        self.generation += 1;
        md
    }

    /// Marks the cache stale as a whole: the next lookup fetches every topic.
    pub(crate) fn invalidate(&mut self) {
        self.invalidations += 1;
    }

    /// Marks `topics` stale: the next lookup that wants one of them fetches every topic so
    /// marked, and only those (the rest of the answer stays as it is).
    pub(crate) fn invalidate_topics<'a>(&mut self, topics: impl IntoIterator<Item = &'a str>) {
        for t in topics {
            // A topic never fetched is fetched when asked for anyway.
            if !self.topics.contains(t) {
                continue;
            }
            self.marks += 1;
            match self.stale.get_mut(t) {
                Some(m) => *m = self.marks,
                None => {
                    self.stale.insert(t.to_owned(), self.marks);
                }
            }
        }
    }

    /// Applies one KIP-951 leader hint; see [`MetadataCache::update_leaders`].
    #[cfg(test)]
    pub(crate) fn update_leader(
        &mut self,
        topic: &str,
        partition: i32,
        leader_id: i32,
        leader_epoch: i32,
        endpoint: Option<(&str, i32)>,
    ) -> bool {
        let hint = LeaderHint {
            topic,
            partition,
            leader_id,
            leader_epoch,
        };
        let endpoints: Vec<(i32, &str, i32)> = endpoint
            .map(|(h, p)| (leader_id, h, p))
            .into_iter()
            .collect();
        self.update_leaders(&[hint], &endpoints) > 0
    }

    /// Applies the KIP-951 leader hints of one response at once: each moves its partition to
    /// `leader_id` when `leader_epoch` is newer than the cached epoch (negative leader ids,
    /// unknown topics and partitions are skipped). `endpoints` (`node id, host, port`) add or
    /// replace the address of a hinted leader. Costs O(hints) lookups (an index by topic name,
    /// partitions by index) and copies only the topics a hint changes (one new snapshot per
    /// call, its other topics shared). Returns how many hints were applied.
    pub(crate) fn update_leaders(
        &mut self,
        hints: &[LeaderHint<'_>],
        endpoints: &[(i32, &str, i32)],
    ) -> usize {
        let Some(current) = &self.current else {
            return 0;
        };
        let newer = |h: &LeaderHint<'_>| -> Option<(usize, usize)> {
            let ti = *self.index.get(h.topic)?;
            let t = current.topics.get(ti).filter(|t| t.name == h.topic)?;
            let pi = partition_slot(t, h.partition)?;
            (h.leader_id >= 0 && h.leader_epoch > t.partitions[pi].leader_epoch).then_some((ti, pi))
        };
        if !hints.iter().any(|h| newer(h).is_some()) {
            return 0;
        }
        // One shallow copy: brokers and the topic list of `Arc`s; a topic is copied when a
        // hint first changes it.
        let mut md = Metadata::clone(current);
        let mut applied = 0;
        for h in hints {
            let Some(ti) = self.index.get(h.topic).copied() else {
                continue;
            };
            let t = &md.topics[ti];
            let Some(pi) = partition_slot(t, h.partition) else {
                continue;
            };
            if h.leader_id < 0 || h.leader_epoch <= t.partitions[pi].leader_epoch {
                continue;
            }
            let p = &mut Arc::make_mut(&mut md.topics[ti]).partitions[pi];
            p.leader_id = h.leader_id;
            p.leader_epoch = h.leader_epoch;
            p.error_code = kafkit_protocol::ErrorCode::NONE;
            applied += 1;
            if let Some((_, host, port)) = endpoints.iter().find(|e| e.0 == h.leader_id) {
                match md.brokers.iter_mut().find(|b| b.node_id == h.leader_id) {
                    Some(b) if b.host == *host && b.port == *port => {}
                    Some(b) => {
                        b.host = (*host).to_owned();
                        b.port = *port;
                    }
                    None => md.brokers.push(Broker {
                        node_id: h.leader_id,
                        host: (*host).to_owned(),
                        port: *port,
                        rack: None,
                    }),
                }
            }
        }
        self.current = Some(Arc::new(md));
        self.generation += 1;
        applied
    }
}

/// One KIP-951 leader hint: `topic`/`partition` is led by `leader_id` since `leader_epoch`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaderHint<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) leader_id: i32,
    pub(crate) leader_epoch: i32,
}

/// The slot of partition `index` in `t.partitions` (sorted by index, so usually the index
/// itself).
fn partition_slot(t: &TopicMetadata, index: i32) -> Option<usize> {
    let guess = usize::try_from(index).ok()?;
    if t.partitions
        .get(guess)
        .is_some_and(|p| p.partition == index)
    {
        return Some(guess);
    }
    t.partitions
        .binary_search_by_key(&index, |p| p.partition)
        .ok()
}

/// In the new answer `md`, gives back the cached leader of every partition whose cached leader
/// epoch is newer (both epochs known).
fn keep_newer_leaders(old: &Metadata, index: &HashMap<String, usize>, md: &mut Metadata) {
    for t in &mut md.topics {
        let Some(o) = index
            .get(&t.name)
            .and_then(|&i| old.topics.get(i))
            .filter(|o| o.name == t.name)
        else {
            continue;
        };
        if Arc::ptr_eq(o, t) {
            continue;
        }
        let older = |p: &crate::conn::metadata::PartitionMetadata| {
            partition_slot(o, p.partition).is_some_and(|j| {
                p.leader_epoch >= 0 && o.partitions[j].leader_epoch > p.leader_epoch
            })
        };
        if !t.partitions.iter().any(older) {
            continue;
        }
        let t = Arc::make_mut(t);
        for p in &mut t.partitions {
            if let Some(j) = partition_slot(o, p.partition) {
                let q = &o.partitions[j];
                if p.leader_epoch >= 0 && q.leader_epoch > p.leader_epoch {
                    p.leader_id = q.leader_id;
                    p.leader_epoch = q.leader_epoch;
                    p.error_code = q.error_code;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::metadata::PartitionMetadata;
    use kafkit_protocol::{ErrorCode, Uuid};

    fn md() -> Metadata {
        Metadata {
            brokers: vec![Broker {
                node_id: 1,
                host: "a".into(),
                port: 1,
                rack: None,
            }],
            cluster_id: None,
            controller_id: 1,
            topics: vec![Arc::new(TopicMetadata {
                name: "t".into(),
                topic_id: Uuid::default(),
                error_code: ErrorCode::NONE,
                is_internal: false,
                partitions: vec![PartitionMetadata {
                    partition: 0,
                    error_code: ErrorCode::NONE,
                    leader_id: 1,
                    leader_epoch: 5,
                    replicas: vec![1],
                    isr: vec![1],
                    offline_replicas: vec![],
                }],
            })],
        }
    }

    #[tokio::test(start_paused = true)]
    async fn freshness_follows_age_topics_and_invalidation() {
        let mut c = MetadataCache::default();
        let age = Duration::from_secs(10);
        assert!(c.fresh(age, &[]).is_none());
        let started = c.invalidations;
        c.store(md(), started);
        assert!(c.fresh(age, &["t"]).is_some());
        assert!(c.fresh(age, &["t", "other"]).is_none(), "missing topic");
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(c.fresh(age, &[]).is_none(), "too old");
        c.store(md(), c.invalidations);
        c.invalidate();
        assert!(c.fresh(age, &[]).is_none(), "invalidated");
        // A refresh that started before an invalidation does not count as fresh.
        let started = c.invalidations;
        c.invalidate();
        c.store(md(), started);
        assert!(c.fresh(age, &[]).is_none());
    }

    fn topic(name: &str, leader: i32, epoch: i32) -> Arc<TopicMetadata> {
        let mut t = TopicMetadata::clone(&md().topics[0]);
        t.name = name.into();
        t.partitions[0].leader_id = leader;
        t.partitions[0].leader_epoch = epoch;
        Arc::new(t)
    }

    /// Stores an answer for `names` as a refresh planned now would.
    fn answer(c: &mut MetadataCache, names: &[&str], leader: i32, epoch: i32) -> RefreshPlan {
        let plan = c.plan(Duration::from_secs(10), names);
        let mut m = md();
        m.topics = plan
            .topics
            .iter()
            .map(|n| topic(n, leader, epoch))
            .collect();
        c.topics.extend(plan.topics.iter().cloned());
        c.store_planned(m, &plan);
        plan
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_topic_is_fetched_alone_and_merged() {
        let mut c = MetadataCache::default();
        let age = Duration::from_secs(10);
        let plan = answer(&mut c, &["a", "b", "c"], 1, 1);
        assert!(plan.full, "the first answer fetches everything");
        assert!(c.fresh(age, &["a", "b", "c"]).is_some());
        // A partition error of "b": only "b" is stale; lookups of the others stay cached.
        c.invalidate_topics(["b", "never-asked"]);
        assert!(c.fresh(age, &["a", "c"]).is_some());
        assert!(c.fresh(age, &[]).is_some(), "brokers only");
        assert!(c.fresh(age, &["a", "b"]).is_none());
        let plan = c.plan(age, &["a"]);
        assert!(!plan.full);
        assert_eq!(plan.topics, ["b"], "every stale topic, nothing else");
        let plan = answer(&mut c, &["b"], 2, 2);
        assert_eq!(
            (plan.full, plan.topics.clone()),
            (false, vec!["b".to_owned()])
        );
        let m = c
            .fresh(age, &["a", "b", "c"])
            .expect("fresh after the merge");
        assert_eq!(m.topic("b").unwrap().partitions[0].leader_id, 2);
        assert_eq!(
            m.topic("a").unwrap().partitions[0].leader_epoch,
            1,
            "a kept"
        );
        assert_eq!(m.topics.len(), 3);
        // A new topic is fetched alone too.
        let plan = answer(&mut c, &["a", "d"], 1, 1);
        assert_eq!((plan.full, plan.topics), (false, vec!["d".to_owned()]));
        assert_eq!(c.fresh(age, &["a", "b", "c", "d"]).unwrap().topics.len(), 4);
        // A mark that comes while its refresh is in flight is not lost.
        c.invalidate_topics(["c"]);
        let plan = c.plan(age, &["c"]);
        c.invalidate_topics(["c"]);
        c.store_planned(md_with(&plan.topics), &plan);
        assert!(c.fresh(age, &["c"]).is_none(), "marked again meanwhile");
        // The whole answer invalidated, or too old: everything is fetched.
        c.invalidate();
        let plan = c.plan(age, &["a"]);
        assert!(plan.full);
        assert_eq!(plan.topics, ["a", "b", "c", "d"]);
    }

    fn md_with(names: &[String]) -> Metadata {
        let mut m = md();
        m.topics = names.iter().map(|n| topic(n, 1, 1)).collect();
        m
    }

    #[test]
    fn leader_hint_applies_only_with_a_newer_epoch() {
        let mut c = MetadataCache::default();
        c.store(md(), 0);
        assert!(!c.update_leader("t", 0, 2, 5, None), "same epoch");
        assert!(!c.update_leader("t", 0, 2, 4, None), "older epoch");
        assert!(!c.update_leader("t", 9, 2, 9, None), "unknown partition");
        assert!(c.update_leader("t", 0, 2, 6, Some(("b", 2))));
        let m = c.current.clone().unwrap();
        assert_eq!(m.leader_of("t", 0).unwrap().node_id, 2);
        assert_eq!(m.broker(2).unwrap().addr(), "b:2");
        assert_eq!(m.topic("t").unwrap().partitions[0].leader_epoch, 6);
    }

    #[test]
    fn an_older_answer_does_not_overwrite_a_newer_leader_epoch() {
        let mut c = MetadataCache::default();
        c.store(md(), 0);
        // A hint (epoch 6) moves the leader to broker 2; then a Metadata answer that a broker
        // sent before it knew (epoch 5, leader 1) arrives: the newer leader stays.
        assert!(c.update_leader("t", 0, 2, 6, Some(("b", 2))));
        c.store(md(), 0);
        let m = c.current.clone().unwrap();
        let p = &m.topic("t").unwrap().partitions[0];
        assert_eq!((p.leader_id, p.leader_epoch), (2, 6));
        // A newer answer wins.
        let mut newer = md();
        let t = Arc::make_mut(&mut newer.topics[0]);
        t.partitions[0].leader_id = 3;
        t.partitions[0].leader_epoch = 7;
        c.store(newer, 0);
        let m = c.current.clone().unwrap();
        let p = &m.topic("t").unwrap().partitions[0];
        assert_eq!((p.leader_id, p.leader_epoch), (3, 7));
    }

    /// The KIP-951 hints of one response make ONE new snapshot that copies
    /// only the hinted topics: every other topic is the same `Arc` as in the old one (no deep copy of
    /// the metadata per hint), and whoever holds the old snapshot still sees the old leaders.
    #[test]
    fn leader_hints_of_one_response_copy_only_the_hinted_topics() {
        let mut c = MetadataCache::default();
        let mut m = md();
        m.topics = (0..100).map(|i| topic(&format!("t{i}"), 1, 5)).collect();
        c.store(m, 0);
        let before = c.current.clone().unwrap();
        let generation = c.generation;
        let hint = |topic: &'static str, leader_id, leader_epoch| LeaderHint {
            topic,
            partition: 0,
            leader_id,
            leader_epoch,
        };
        let hints = [
            hint("t7", 2, 6),
            hint("t42", 2, 6),
            hint("t42", 3, 7),
            hint("t9", 2, 5),
            hint("missing", 2, 9),
        ];
        assert_eq!(c.update_leaders(&hints, &[(2, "b", 2), (3, "c", 3)]), 3);
        assert_eq!(
            c.generation,
            generation + 1,
            "one snapshot for the response"
        );
        let after = c.current.clone().unwrap();
        for (i, (old, new)) in before.topics.iter().zip(&after.topics).enumerate() {
            let hinted = i == 7 || i == 42;
            assert_eq!(!Arc::ptr_eq(old, new), hinted, "t{i}");
        }
        assert_eq!(after.leader_of("t7", 0).unwrap().node_id, 2);
        assert_eq!(after.leader_of("t42", 0).unwrap().addr(), "c:3");
        assert_eq!(
            after.topic("t9").unwrap().partitions[0].leader_id,
            1,
            "same epoch"
        );
        assert_eq!(
            before.topic("t7").unwrap().partitions[0].leader_id,
            1,
            "old snapshot kept"
        );
        // Hints that change nothing make no snapshot at all.
        assert_eq!(c.update_leaders(&[hint("t7", 2, 6)], &[]), 0);
        assert_eq!(c.generation, generation + 1);
    }
}
