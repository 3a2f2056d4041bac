//! The KIP-848 consumer group protocol (`group_protocol = consumer`): one ConsumerGroupHeartbeat
//! loop, the coordinator computing the assignment (server-side assignors `uniform`, `range`),
//! as Java's `ConsumerMembershipManager` and librdkafka's `rd_kafka_cgrp_consumer_*` run it:
//!
//! ```text
//!  join: epoch 0, every field (subscription names or regex, rack, rebalance timeout, assignor)
//!  ─► heartbeat every heartbeat_interval_ms the coordinator gives, carrying only what changed
//!  ─► a new target assignment (topic ids) ─► reconcile: revoke what left (commit + callback),
//!     report the owned partitions at once (the acknowledgement: the coordinator moves the
//!     member to the next epoch and hands the revoked partitions on), then OffsetFetch and
//!     assign what was added (a newer target taking partitions back stops it) ─► the next
//!     heartbeat (sent at once) carries the owned partitions
//!  FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID ─► partitions lost, join again at epoch 0
//!  leave: epoch -1 (-2 for a static member, KIP-345)
//! ```
//!
//! A coordinator without ConsumerGroupHeartbeat (tansu, brokers before 4.0) makes the member
//! report [`GroupError::ProtocolFallback`] naming the API and go on with the classic protocol.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kafkit_protocol::messages::{
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, consumer_group_heartbeat_request,
};
use kafkit_protocol::{ApiKey, ErrorCode, Uuid};
use tokio::time::Instant;
use tracing::Instrument;

use super::commit::{self, Identity};
use super::coordinator::{self, Verdict, failure_verdict, verdict};
use super::member::{Beat, BeatPlan, Member, Stop, Wake};
use super::shared::Tp;
use super::subscription::{Subscription, all_topics};
use crate::error::group::GroupError;
use crate::error::{Error, Result};
use crate::time::wire_ms;

/// Runs a KIP-848 member until it is closed (or falls back to the classic protocol). `auto`
/// ([`super::config::GroupProtocol::Auto`]): a coordinator without ConsumerGroupHeartbeat is the
/// expected case, not reported as [`GroupError::ProtocolFallback`].
pub(crate) async fn run(core: Member, auto: bool) {
    let mut m = Consumer::new(core);
    m.auto = auto;
    match m.run().await {
        Ok(Fallback) => {
            let core = m.core;
            core.shared
                .set_group_protocol(super::config::GroupProtocol::Classic);
            super::classic::run(core).await;
        }
        Err(Stop) => {
            m.leave().await;
            m.core.shutdown().await;
        }
    }
}

/// The coordinator lacks ConsumerGroupHeartbeat: go on with the classic protocol.
struct Fallback;

struct Consumer {
    core: Member,
    member_id: String,
    /// 0 to join; the coordinator's epoch after.
    epoch: i32,
    interval: Duration,
    /// The subscription must be sent (joining, or it changed).
    send_subscription: bool,
    /// The owned partitions must be sent (joining, or a reconciliation finished).
    send_owned: bool,
    /// The latest target assignment, as topic id -> partitions, until reconciled.
    target: Option<Vec<(Uuid, Vec<i32>)>>,
    /// Topic ids and names (learned from metadata).
    names: HashMap<Uuid, Arc<str>>,
    ids: HashMap<Arc<str>, Uuid>,
    next_beat: Instant,
    failures: u32,
    /// `group_protocol = auto`: falling back is not reported.
    auto: bool,
}

impl Consumer {
    fn new(core: Member) -> Self {
        Consumer {
            core,
            member_id: random_member_id(),
            epoch: 0,
            interval: Duration::from_secs(5),
            send_subscription: true,
            send_owned: true,
            target: None,
            names: HashMap::new(),
            ids: HashMap::new(),
            next_beat: Instant::now(),
            failures: 0,
            auto: false,
        }
    }

    async fn run(&mut self) -> Result<Fallback, Stop> {
        self.core.shared.rebalance_started();
        loop {
            let (node, conn) = self.core.ensure_coordinator().await?;
            if conn
                .version_for::<ConsumerGroupHeartbeatRequest>(None)
                .is_err()
            {
                return Ok(self.fall_back());
            }
            let req = self.request();
            let span = tracing::debug_span!("heartbeat", group = %self.core.group_id(), epoch = self.epoch);
            let send = self
                .core
                .coord
                .send(node, conn, req, Duration::ZERO)
                .instrument(span);
            let sent_owned = self.send_owned;
            let sent_subscription = self.send_subscription;
            let answer = self.core.wait(send).await?;
            match answer {
                Ok((_, resp)) => {
                    if resp.error_code == ErrorCode::NONE {
                        if sent_owned {
                            self.send_owned = false;
                        }
                        if sent_subscription {
                            self.send_subscription = false;
                        }
                    }
                    if self.on_answer(resp).await? {
                        return Ok(Fallback);
                    }
                }
                Err(Error::UnsupportedVersion { .. }) => return Ok(self.fall_back()),
                Err(e) => {
                    tracing::debug!(group = %self.core.group_id(), error = %e, "heartbeat failed");
                    match failure_verdict(&e) {
                        Verdict::Relocate | Verdict::Retry => {
                            self.core.coord.lost();
                            self.back_off().await?;
                        }
                        _ => return Err(self.core.park(e).await),
                    }
                    continue;
                }
            }
            self.reconcile().await?;
            self.wait_next().await?;
        }
    }

    /// The coordinator lacks ConsumerGroupHeartbeat: report it (unless `auto`) and go on with
    /// the classic protocol.
    fn fall_back(&self) -> Fallback {
        if self.auto {
            tracing::debug!(group = %self.core.group_id(), "group_protocol = auto: ConsumerGroupHeartbeat not offered, the classic protocol it is");
        } else {
            tracing::warn!(group = %self.core.group_id(), "KIP-848 not offered: falling back to the classic protocol");
            self.core.report(Error::Group(GroupError::ProtocolFallback {
                group_id: self.core.group_id().to_owned(),
                api: ApiKey::ConsumerGroupHeartbeat,
            }));
        }
        Fallback
    }

    /// The next heartbeat: every field when joining, else only what changed.
    fn request(&self) -> ConsumerGroupHeartbeatRequest {
        let cfg = &self.core.shared.config;
        let joining = self.epoch == 0;
        let mut req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(cfg.group_id.clone())
            .with_member_id(self.member_id.clone())
            .with_member_epoch(self.epoch)
            .with_rebalance_timeout_ms(if joining {
                wire_ms(cfg.rebalance_timeout())
            } else {
                -1
            });
        if joining {
            req = req
                .with_instance_id(cfg.group_instance_id.clone())
                .with_rack_id(self.core.shared.reader_settings.3.clone())
                .with_server_assignor(cfg.group_remote_assignor.clone());
        }
        if joining || self.send_subscription {
            // Names and a regex together, as librdkafka sends them (the regex empty when
            // subscribing by names).
            match &self.core.shared.subscription() {
                Some(Subscription::Topics(t)) => {
                    req = req
                        .with_subscribed_topic_names(Some(t.clone()))
                        .with_subscribed_topic_regex(Some(String::new()));
                }
                Some(Subscription::Pattern(p)) => {
                    req = req
                        .with_subscribed_topic_names(Some(Vec::new()))
                        .with_subscribed_topic_regex(Some(p.clone()));
                }
                None => {}
            }
        }
        if joining || self.send_owned {
            req = req.with_topic_partitions(Some(self.owned_by_id()));
        }
        req
    }

    /// The owned partitions by topic id (topics whose id is unknown are left out).
    fn owned_by_id(&self) -> Vec<consumer_group_heartbeat_request::TopicPartitions> {
        let mut m: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in &self.core.owned {
            m.entry(t).or_default().push(*p);
        }
        m.into_iter()
            .filter_map(|(t, ps)| {
                let id = *self.ids.get(t)?;
                Some(
                    consumer_group_heartbeat_request::TopicPartitions::default()
                        .with_topic_id(id)
                        .with_partitions(ps),
                )
            })
            .collect()
    }

    /// Handles a heartbeat answer; `Ok(true)` to fall back to the classic protocol.
    async fn on_answer(&mut self, resp: ConsumerGroupHeartbeatResponse) -> Result<bool, Stop> {
        let code = resp.error_code;
        if code == ErrorCode::NONE {
            self.failures = 0;
            if let Some(id) = resp.member_id.filter(|m| !m.is_empty()) {
                self.member_id = id;
            }
            let new_epoch = resp.member_epoch != self.epoch;
            self.epoch = resp.member_epoch;
            if let Ok(ms) = u64::try_from(resp.heartbeat_interval_ms)
                && ms > 0
            {
                self.interval = Duration::from_millis(ms);
            }
            if let Some(a) = resp.assignment {
                self.target = Some(
                    a.topic_partitions
                        .into_iter()
                        .map(|t| (t.topic_id, t.partitions))
                        .collect(),
                );
            }
            self.core.who = Identity {
                generation: self.epoch,
                member_id: self.member_id.clone(),
                instance_id: self.core.shared.config.group_instance_id.clone(),
            };
            self.core.commit_ready = true;
            if new_epoch {
                self.core.shared.joined(
                    &self.member_id,
                    self.epoch,
                    self.core.shared.config.group_remote_assignor.as_deref(),
                );
                self.core.shared.set_assignment(&self.core.owned);
            }
            self.next_beat = Instant::now() + self.interval;
            return Ok(false);
        }
        tracing::debug!(group = %self.core.group_id(), %code, epoch = self.epoch, "ConsumerGroupHeartbeat error");
        match code {
            ErrorCode::UNSUPPORTED_VERSION => return Ok(true),
            ErrorCode::FENCED_MEMBER_EPOCH | ErrorCode::UNKNOWN_MEMBER_ID => {
                self.fenced().await?;
            }
            ErrorCode::UNRELEASED_INSTANCE_ID
            | ErrorCode::FENCED_INSTANCE_ID
            | ErrorCode::GROUP_MAX_SIZE_REACHED
            | ErrorCode::UNSUPPORTED_ASSIGNOR
            | ErrorCode::INVALID_REQUEST
            | ErrorCode::GROUP_AUTHORIZATION_FAILED
            | ErrorCode::TOPIC_AUTHORIZATION_FAILED => {
                return Err(self
                    .core
                    .fatal("ConsumerGroupHeartbeat", code, resp.error_message)
                    .await);
            }
            ErrorCode::INVALID_REGULAR_EXPRESSION => {
                let pattern = match &self.core.shared.subscription() {
                    Some(Subscription::Pattern(p)) => p.clone(),
                    _ => String::new(),
                };
                let e = GroupError::InvalidRegularExpression {
                    group_id: self.core.group_id().to_owned(),
                    pattern,
                    message: resp.error_message,
                };
                return Err(self.core.park(Error::Group(e)).await);
            }
            c => match verdict(c) {
                Verdict::Relocate => {
                    self.core.coord.lost();
                    self.back_off().await?;
                }
                _ => self.back_off().await?,
            },
        }
        Ok(false)
    }

    /// Fenced: every partition is lost; join again at epoch 0 with the same member id.
    async fn fenced(&mut self) -> Result<(), Stop> {
        self.epoch = 0;
        self.target = None;
        self.core.commit_ready = false;
        self.core.fail_deferred(ErrorCode::FENCED_MEMBER_EPOCH);
        self.core.who.generation = -1;
        self.send_subscription = true;
        self.send_owned = true;
        self.core.shared.rebalance_started();
        self.core.revoke_all(true).await?;
        self.next_beat = Instant::now();
        Ok(())
    }

    /// The application unsubscribed (Java `unsubscribe`): revoke what is owned (its commit
    /// and callback), leave the group as a close would (epoch -1; -2 for a static member),
    /// and wait outside it until the application subscribes again, then join at epoch 0.
    async fn unsubscribed(&mut self) -> Result<(), Stop> {
        tracing::info!(group = %self.core.group_id(), "unsubscribed: leaving the group");
        self.core.revoke_all(false).await?;
        self.core.commits_answered().await?;
        self.leave().await;
        self.core.beat = None;
        self.core.drop_heartbeat();
        self.epoch = 0;
        self.target = None;
        self.core.commit_ready = false;
        self.core.who.generation = -1;
        self.send_owned = true;
        self.core.until_subscribed().await?;
        self.core.shared.rebalance_started();
        Ok(())
    }

    /// Learns topic names for ids the member does not know (one full Metadata request).
    async fn learn_ids(&mut self, ids: &[Uuid]) -> Result<(), Stop> {
        let cached = self.core.shared.transport.cached_metadata();
        let know = |md: &crate::conn::metadata::Metadata,
                    names: &mut HashMap<Uuid, Arc<str>>,
                    idx: &mut HashMap<Arc<str>, Uuid>| {
            for t in &md.topics {
                if !t.topic_id.is_zero() {
                    let name: Arc<str> = Arc::from(t.name.as_str());
                    names.insert(t.topic_id, Arc::clone(&name));
                    idx.insert(name, t.topic_id);
                }
            }
        };
        if let Some(md) = cached {
            know(&md, &mut self.names, &mut self.ids);
        }
        if ids.iter().all(|id| self.names.contains_key(id)) {
            return Ok(());
        }
        let t = self.core.shared.transport.clone();
        if let Ok(md) = self.core.wait(async move { all_topics(&t).await }).await? {
            know(&md, &mut self.names, &mut self.ids);
            // Commits and committed-offset reads name these topics by id (v10) too.
            for (name, id) in &self.ids {
                self.core.learned_ids.insert(name.to_string(), *id);
            }
        }
        Ok(())
    }

    /// Moves the owned partitions to the target, round after round while newer targets come
    /// in meanwhile. Partitions of topics whose id is still unknown wait for the next answer.
    async fn reconcile(&mut self) -> Result<(), Stop> {
        while let Some(target) = self.target.clone() {
            if !self.reconcile_once(target).await? {
                break;
            }
        }
        Ok(())
    }

    /// One round toward `target`: revoke what left (commit, callback), report the partitions
    /// owned then at once, read the committed offsets of what came and assign it; then the next
    /// heartbeat (at once) reports the owned partitions again. `Ok(true)` when a keep-alive
    /// answer brought a newer target, a new epoch, or took back partitions while the offsets
    /// were read: go again at once.
    ///
    /// The report after the revocation is the acknowledgement the coordinator waits for
    /// before it hands the revoked partitions to their new owner (KIP-848: a member in
    /// `UNREVOKED_PARTITIONS` moves on once its owned partitions leave them out). Java's
    /// reconciliation acknowledges once the revocation and the assignment callbacks are done
    /// and reads committed offsets after it (`ConsumerMembershipManager`); reading them first
    /// held the acknowledgement up as long as the OffsetFetch took, and offsets a transaction
    /// left unstable (`UNSTABLE_OFFSET_COMMIT` under `require_stable`) keep it for as long as
    /// the transaction stays open. For the same reason a keep-alive answer that takes back
    /// partitions owned or being added, fences the member or moves its epoch stops the
    /// OffsetFetch (`Member::committed_until`): what it read is not handed out, and the next
    /// round starts from the newest target.
    async fn reconcile_once(&mut self, target: Vec<(Uuid, Vec<i32>)>) -> Result<bool, Stop> {
        let ids: Vec<Uuid> = target.iter().map(|(id, _)| *id).collect();
        self.learn_ids(&ids).await?;
        let mut want: BTreeSet<Tp> = BTreeSet::new();
        let mut unknown = false;
        for (id, parts) in &target {
            match self.names.get(id) {
                Some(name) => want.extend(parts.iter().map(|p| (Arc::clone(name), *p))),
                None => unknown = true,
            }
        }
        let revoked: Vec<Tp> = self.core.owned.difference(&want).cloned().collect();
        let added: Vec<Tp> = want.difference(&self.core.owned).cloned().collect();
        if revoked.is_empty() && added.is_empty() {
            if !unknown {
                self.target = None;
            }
            return Ok(false);
        }
        self.keepalive(None, self.interval);
        let revoking = !revoked.is_empty();
        if revoking {
            self.core.revoke(revoked, false).await?;
        }
        let mut interrupted = false;
        if !added.is_empty() {
            if revoking {
                // The acknowledgement: the partitions owned now, reported at once and then
                // with every keep-alive. (Without a revocation nothing waits for it, and an
                // early report of an owned set the coordinator already knows only adds a
                // round trip: librdkafka's mock then fenced keep-alives of a first member.)
                self.keepalive(Some(self.owned_by_id()), Duration::ZERO);
            }
            let keep: BTreeSet<(Uuid, i32)> = self
                .core
                .owned
                .iter()
                .chain(&added)
                .filter_map(|(t, p)| Some((*self.ids.get(t)?, *p)))
                .collect();
            let (member_id, interval) = (self.member_id.clone(), self.interval);
            let owned = revoking.then(|| self.owned_by_id());
            let mut epoch = self.epoch;
            let moved = move |core: &mut Member| {
                if core.beats.iter().any(|b| moves_on(b, &keep)) {
                    return true;
                }
                // The acknowledgement's answer moves the epoch on without taking a partition
                // back: the keep-alives go on at the new epoch (Kafka accepts the previous
                // epoch only once, librdkafka's mock fences it at once).
                let newest = core.beats.iter().filter_map(answered_epoch).max();
                if let Some(e) = newest.filter(|e| *e > epoch) {
                    epoch = e;
                    let next = core.beat.as_ref().map_or_else(Instant::now, |b| b.next);
                    let plan = keepalive_plan(core, &member_id, e, owned.clone(), interval);
                    core.beat = Some(BeatPlan { next, ..plan });
                }
                false
            };
            match self.core.committed_until(&added, moved).await? {
                Some(starts) => self.core.assign(starts),
                None => interrupted = true,
            }
        }
        self.core.beat = None;
        self.core.drop_heartbeat();
        self.handle_keepalive_answers().await?;
        self.send_owned = true;
        self.next_beat = Instant::now();
        let newer = self
            .target
            .as_ref()
            .is_some_and(|t| partition_set(t) != partition_set(&target));
        if !newer && !interrupted && !unknown {
            self.target = None;
        }
        tracing::debug!(group = %self.core.group_id(), epoch = self.epoch, owned = self.core.owned.len(), interrupted, newer, "reconciled");
        Ok(self.target.is_some() && (newer || interrupted))
    }

    /// Heartbeats with the member id and epoch while a reconciliation waits (for the
    /// application, or for committed offsets): the coordinator must not time the member out
    /// meanwhile. With `owned`, each also reports those partitions. The first goes after
    /// `first`.
    fn keepalive(
        &mut self,
        owned: Option<Vec<consumer_group_heartbeat_request::TopicPartitions>>,
        first: Duration,
    ) {
        let plan = keepalive_plan(
            &self.core,
            &self.member_id,
            self.epoch,
            owned,
            self.interval,
        );
        self.core.beat = Some(BeatPlan {
            next: Instant::now() + first,
            ..plan
        });
    }

    /// Keep-alive answers: a new epoch or assignment is kept for the next round; fencing is
    /// handled now.
    async fn handle_keepalive_answers(&mut self) -> Result<(), Stop> {
        while let Some(b) = self.core.beats.pop_front() {
            let Beat::Consumer(Ok((_, resp))) = b else {
                continue;
            };
            match resp.error_code {
                ErrorCode::NONE => {
                    if resp.member_epoch > self.epoch {
                        self.epoch = resp.member_epoch;
                        self.core.who.generation = self.epoch;
                        // Transactions name the member by this epoch (group_metadata): an
                        // old one gets every TxnOffsetCommit refused.
                        self.core.shared.set_generation(self.epoch);
                    }
                    if let Some(a) = resp.assignment {
                        self.target = Some(
                            a.topic_partitions
                                .into_iter()
                                .map(|t| (t.topic_id, t.partitions))
                                .collect(),
                        );
                    }
                }
                ErrorCode::FENCED_MEMBER_EPOCH | ErrorCode::UNKNOWN_MEMBER_ID => {
                    self.fenced().await?;
                    return Ok(());
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Waits for the next heartbeat, checking the poll interval.
    async fn wait_next(&mut self) -> Result<(), Stop> {
        loop {
            let cfg = &self.core.shared.config;
            let since = self.core.shared.since_poll();
            if since > cfg.max_poll_interval {
                return self.poll_timeout().await;
            }
            let now = Instant::now();
            if now >= self.next_beat {
                return Ok(());
            }
            let poll_due = now + (cfg.max_poll_interval - since) + Duration::from_millis(1);
            let mut sleep = Box::pin(tokio::time::sleep_until(self.next_beat.min(poll_due)));
            match self.core.during(&mut sleep).await? {
                Wake::Done(()) | Wake::Beat => {}
            }
            if self.core.take_resubscribed() {
                if self.core.shared.subscription().is_none() {
                    self.unsubscribed().await?;
                } else {
                    tracing::info!(group = %self.core.group_id(), "the application changed the subscription: heartbeat now");
                }
                // The next heartbeat names the subscription (KIP-848: the coordinator
                // reassigns from it; Java sends it with the next heartbeat as well).
                self.send_subscription = true;
                self.next_beat = Instant::now();
                return Ok(());
            }
            if let Some(code) = self.core.generation_gone.take() {
                // A commit was refused for the member's epoch (FENCED_MEMBER_EPOCH,
                // UNKNOWN_MEMBER_ID): heartbeat now, so the coordinator's answer fences the
                // member (or confirms its epoch) at once, not at the end of the interval.
                tracing::debug!(group = %self.core.group_id(), %code, "a commit found the epoch gone: heartbeat now");
                self.next_beat = Instant::now();
                return Ok(());
            }
        }
    }

    async fn back_off(&mut self) -> Result<(), Stop> {
        self.failures += 1;
        let d = commit::backoff(self.core.shared.config.retry_backoff, self.failures);
        self.next_beat = Instant::now() + d;
        self.core.pause(d).await
    }

    /// The application stopped polling: leave, report, lose everything, rejoin on the next
    /// poll (with epoch 0).
    async fn poll_timeout(&mut self) -> Result<(), Stop> {
        let shared = Arc::clone(&self.core.shared);
        let cfg = &shared.config;
        tracing::warn!(group = %cfg.group_id, "poll timeout: leaving the group");
        self.leave().await;
        let e = Error::Group(GroupError::MaxPollIntervalExceeded {
            group_id: cfg.group_id.clone(),
            max_poll_interval: cfg.max_poll_interval,
        });
        self.core.shared.set_state("left: poll timeout");
        self.core.report(e);
        self.fenced().await?;
        self.core.polled_again().await
    }

    /// Leaves the group as the close asked (KIP-1092, Java `ConsumerMembershipManager
    /// .leaveGroupEpoch`): epoch -1 (gone for good) for a dynamic member by default and for
    /// every member with `LeaveGroup`; -2 for a static member otherwise (it keeps its
    /// assignment until the session times out); nothing for a dynamic member with
    /// `RemainInGroup` (the coordinator times it out). Bounded by 5 s.
    async fn leave(&mut self) {
        if self.epoch <= 0 && self.core.owned.is_empty() && self.epoch != 0 {
            return;
        }
        let is_static = self.core.shared.config.group_instance_id.is_some();
        let Some(leave_epoch) = leave_epoch(self.core.leave_op, is_static) else {
            tracing::debug!(group = %self.core.group_id(), member = %self.member_id, "closed with RemainInGroup: no leave heartbeat");
            return;
        };
        let Some((node, conn)) = self.core.coord.connected() else {
            return;
        };
        let req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(self.core.shared.config.group_id.clone())
            .with_member_id(self.member_id.clone())
            .with_member_epoch(leave_epoch)
            .with_instance_id(self.core.shared.config.group_instance_id.clone())
            .with_rebalance_timeout_ms(-1);
        let send = self.core.coord.send(node, conn, req, Duration::ZERO);
        match tokio::time::timeout(Duration::from_secs(5), send).await {
            Ok(Ok((_, r))) => {
                tracing::debug!(group = %self.core.group_id(), code = %r.error_code, "left the group")
            }
            Ok(Err(e)) => {
                tracing::debug!(group = %self.core.group_id(), error = %e, "leave failed")
            }
            Err(_) => tracing::debug!(group = %self.core.group_id(), "leave timed out"),
        }
        self.epoch = 0;
    }
}

/// The epoch of a KIP-848 member's leave heartbeat for `op` (KIP-1092): -1 leaves for good,
/// -2 is a static member's "back within the session timeout"; `None`: no leave heartbeat (a
/// dynamic member that remains in the group until the coordinator times it out).
fn leave_epoch(op: super::config::GroupMembershipOperation, is_static: bool) -> Option<i32> {
    use super::config::GroupMembershipOperation as Op;
    match (op, is_static) {
        (Op::LeaveGroup, _) => Some(-1),
        (_, true) => Some(-2),
        (Op::RemainInGroup, false) => None,
        (_, false) => Some(-1),
    }
}

/// A member id as KIP-1082 asks the client to make one (ConsumerGroupHeartbeat v1): a random
/// UUID in Kafka's base64url form (22 characters).
pub(crate) fn random_member_id() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        // No randomness source: time-based bytes still make a distinct id per member.
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        b = n.to_le_bytes();
    }
    base64url(&b)
}

/// A target assignment as a set of (topic id, partition).
fn partition_set(target: &[(Uuid, Vec<i32>)]) -> BTreeSet<(Uuid, i32)> {
    target
        .iter()
        .flat_map(|(id, ps)| ps.iter().map(move |p| (*id, *p)))
        .collect()
}

/// The keep-alive heartbeat of `member_id` at `epoch`, every `interval` (first one now): the
/// member id and epoch, and with `owned` the partitions the member reports owning.
fn keepalive_plan(
    core: &Member,
    member_id: &str,
    epoch: i32,
    owned: Option<Vec<consumer_group_heartbeat_request::TopicPartitions>>,
    interval: Duration,
) -> BeatPlan {
    let req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(core.shared.config.group_id.clone())
        .with_member_id(member_id.to_owned())
        .with_member_epoch(epoch)
        .with_rebalance_timeout_ms(-1)
        .with_topic_partitions(owned);
    let transport = core.coord.transport().clone();
    BeatPlan {
        every: interval,
        next: Instant::now(),
        make: Box::new(move |node, conn| {
            let send =
                coordinator::send(transport.clone(), node, conn, req.clone(), Duration::ZERO);
            Box::pin(async move { Beat::Consumer(send.await) })
        }),
    }
}

/// The member epoch a keep-alive answer without error gives.
fn answered_epoch(beat: &Beat) -> Option<i32> {
    match beat {
        Beat::Consumer(Ok((_, resp))) if resp.error_code == ErrorCode::NONE => {
            Some(resp.member_epoch)
        }
        _ => None,
    }
}

/// Whether a keep-alive answer must stop the reconciliation reading committed offsets: the
/// member is fenced, or the assignment leaves out a partition in `keep` (owned, or being
/// added). A new epoch alone does not: the keep-alives move to it.
fn moves_on(beat: &Beat, keep: &BTreeSet<(Uuid, i32)>) -> bool {
    let Beat::Consumer(Ok((_, resp))) = beat else {
        return false;
    };
    match resp.error_code {
        ErrorCode::NONE => resp.assignment.as_ref().is_some_and(|a| {
            let now: BTreeSet<(Uuid, i32)> = a
                .topic_partitions
                .iter()
                .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
                .collect();
            !keep.is_subset(&now)
        }),
        ErrorCode::FENCED_MEMBER_EPOCH | ErrorCode::UNKNOWN_MEMBER_ID => true,
        _ => false,
    }
}

fn base64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// KIP-1092 as Java's `ConsumerMembershipManager.leaveGroupEpoch` and
    /// `ConsumerHeartbeatRequestManager.shouldSendLeaveHeartbeatNow` decide it.
    #[test]
    fn the_leave_epoch_follows_the_close_option() {
        use super::super::config::GroupMembershipOperation as Op;
        assert_eq!(leave_epoch(Op::Default, false), Some(-1));
        assert_eq!(leave_epoch(Op::Default, true), Some(-2));
        assert_eq!(leave_epoch(Op::LeaveGroup, false), Some(-1));
        assert_eq!(leave_epoch(Op::LeaveGroup, true), Some(-1));
        assert_eq!(leave_epoch(Op::RemainInGroup, false), None);
        assert_eq!(leave_epoch(Op::RemainInGroup, true), Some(-2));
    }

    #[test]
    fn member_ids_are_base64url_uuids() {
        let id = random_member_id();
        assert_eq!(id.len(), 22);
        assert!(
            id.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        assert_ne!(id, random_member_id());
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
        assert_eq!(base64url(b"Man"), "TWFu");
    }

    /// What stops a reconciliation reading the committed offsets of what it
    /// was given. The member keeps partitions 0 and 1 (owned, or being added) at epoch 5.
    #[test]
    fn a_keep_alive_answer_taking_partitions_back_stops_the_offset_fetch() {
        use kafkit_protocol::messages::consumer_group_heartbeat_response::{
            Assignment, TopicPartitions,
        };
        let topic = Uuid([7; 16]);
        let keep: BTreeSet<(Uuid, i32)> = [(topic, 0), (topic, 1)].into();
        let answer = |code: ErrorCode, epoch: i32, parts: Option<Vec<i32>>| {
            Beat::Consumer(Ok((
                0,
                ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(code)
                    .with_member_epoch(epoch)
                    .with_assignment(parts.map(|ps| {
                        Assignment::default().with_topic_partitions(vec![
                            TopicPartitions::default()
                                .with_topic_id(topic)
                                .with_partitions(ps),
                        ])
                    })),
            )))
        };
        let ok = ErrorCode::NONE;
        assert!(!moves_on(&answer(ok, 5, None), &keep), "nothing new");
        assert!(
            !moves_on(&answer(ok, 5, Some(vec![0, 1, 2])), &keep),
            "more partitions wait for the next round"
        );
        assert!(
            moves_on(&answer(ok, 5, Some(vec![1])), &keep),
            "partition 0 taken back"
        );
        // A new epoch alone (the acknowledgement's answer) does not: the keep-alives move to it
        // (librdkafka's mock fenced the old epoch, Kafka accepts it once).
        assert!(
            !moves_on(&answer(ok, 6, None), &keep),
            "a new epoch, nothing taken back"
        );
        assert_eq!(answered_epoch(&answer(ok, 6, None)), Some(6));
        assert_eq!(
            answered_epoch(&answer(ErrorCode::FENCED_MEMBER_EPOCH, -1, None)),
            None
        );
        assert!(!moves_on(&answer(ok, 4, None), &keep), "an old answer");
        assert!(moves_on(
            &answer(ErrorCode::FENCED_MEMBER_EPOCH, -1, None),
            &keep
        ));
        assert!(moves_on(
            &answer(ErrorCode::UNKNOWN_MEMBER_ID, -1, None),
            &keep
        ));
        assert!(!moves_on(
            &answer(ErrorCode::NOT_COORDINATOR, -1, None),
            &keep
        ));
        assert!(!moves_on(
            &Beat::Consumer(Err(Error::Protocol("cut".into()))),
            &keep
        ));
    }

    /// A new member epoch learned from a keep-alive heartbeat (sent while a
    /// reconciliation waits for the application) is what `group_metadata` hands a
    /// transaction: with the old epoch every TxnOffsetCommit would be refused
    /// (STALE_MEMBER_EPOCH / FENCED_MEMBER_EPOCH, KIP-848 / KIP-447).
    #[tokio::test]
    async fn an_epoch_learned_in_a_keep_alive_reaches_group_metadata() {
        let transport = crate::transport::Transport::builder(["127.0.0.1:9"])
            .build()
            .expect("transport");
        let r = crate::group::GroupReader::builder(transport, "g")
            .subscribe(["t"])
            .group_protocol(super::super::config::GroupProtocol::Consumer)
            .build()
            .expect("member");
        let (_cmd_tx, cmd_rx) = tokio::sync::mpsc::unbounded_channel();
        let (step_tx, _step_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut m = Consumer::new(Member::new(Arc::clone(&r.shared), cmd_rx, step_tx));
        let answer = |epoch: i32| {
            ConsumerGroupHeartbeatResponse::default()
                .with_member_id(Some(m_id()))
                .with_member_epoch(epoch)
                .with_heartbeat_interval_ms(5000)
        };
        fn m_id() -> String {
            "member-1".to_owned()
        }
        assert!(!m.on_answer(answer(1)).await.expect("answer"));
        assert_eq!(r.group_metadata().generation_id, 1);
        m.core.beats.push_back(Beat::Consumer(Ok((0, answer(2)))));
        m.handle_keepalive_answers().await.expect("keep-alive");
        assert_eq!(
            r.group_metadata().generation_id,
            2,
            "the epoch of the keep-alive answer"
        );
    }
}
