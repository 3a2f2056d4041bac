//! The metadata cache: the last Metadata answer, the topics asked for so far, its age, and
//! whether it was marked stale.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::conn::metadata::{Broker, Metadata};

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

    /// Stores a refresh that started when `invalidations` was `started_at`.
    pub(crate) fn store(&mut self, md: Metadata, started_at: u64) -> Arc<Metadata> {
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

    /// Applies a KIP-951 leader hint when `leader_epoch` is newer than the cached epoch of the
    /// partition. Returns whether the cache changed.
    pub(crate) fn update_leader(
        &mut self,
        topic: &str,
        partition: i32,
        leader_id: i32,
        leader_epoch: i32,
        endpoint: Option<(&str, i32)>,
    ) -> bool {
        let Some(current) = &self.current else {
            return false;
        };
        let Some(p) = current
            .topic(topic)
            .and_then(|t| t.partitions.iter().find(|p| p.partition == partition))
        else {
            return false;
        };
        if leader_epoch <= p.leader_epoch || leader_id < 0 {
            return false;
        }
        let mut md = Metadata::clone(current);
        if let Some(p) = md
            .topics
            .iter_mut()
            .find(|t| t.name == topic)
            .and_then(|t| t.partitions.iter_mut().find(|p| p.partition == partition))
        {
            p.leader_id = leader_id;
            p.leader_epoch = leader_epoch;
            p.error_code = kafkit_protocol::ErrorCode::NONE;
        }
        if let Some((host, port)) = endpoint {
            match md.brokers.iter_mut().find(|b| b.node_id == leader_id) {
                Some(b) => {
                    b.host = host.to_owned();
                    b.port = port;
                }
                None => md.brokers.push(Broker {
                    node_id: leader_id,
                    host: host.to_owned(),
                    port,
                    rack: None,
                }),
            }
        }
        self.current = Some(Arc::new(md));
        self.generation += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::metadata::{PartitionMetadata, TopicMetadata};
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
            topics: vec![TopicMetadata {
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
            }],
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
}
