//! The metadata cache: the last Metadata answer, the topics asked for so far, its age, and
//! whether it was marked stale.

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
}

impl MetadataCache {
    /// The cached answer when it is fresh (younger than `max_age`, not invalidated since) and
    /// holds every topic of `topics`.
    pub(crate) fn fresh(&self, max_age: Duration, topics: &[&str]) -> Option<Arc<Metadata>> {
        let md = self.current.as_ref()?;
        let at = self.fetched_at?;
        if self.fresh_for != self.invalidations || at.elapsed() >= max_age {
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

    /// Stores a refresh that started when `invalidations` was `started_at`. A partition whose
    /// cached leader epoch is newer than the answer's (a KIP-951 hint, or an answer from a
    /// broker that knew more) keeps its cached leader: a broker that lags behind must not
    /// move a partition back to a leader that gave it up.
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

    /// Marks the cache stale.
    pub(crate) fn invalidate(&mut self) {
        self.invalidations += 1;
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
}
