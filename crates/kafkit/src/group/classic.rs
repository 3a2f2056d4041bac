//! The classic group protocol (KIP-62 era JoinGroup / SyncGroup / Heartbeat / LeaveGroup),
//! as Java's `AbstractCoordinator` + `ConsumerCoordinator` and librdkafka's `rdkafka_cgrp.c`
//! run it:
//!
//! ```text
//!  resolve subscription ─► coordinator ─► [eager: revoke all] ─► JoinGroup (MEMBER_ID_REQUIRED:
//!  again with the id, KIP-394) ─► heartbeats from here ─► leader: metadata + assignor (on a
//!  blocking thread) ─► SyncGroup ─► install: [cooperative: revoke what moved, then rejoin at
//!  once (KIP-429)] + OffsetFetch of what was added ─► stable: heartbeats, metadata checks,
//!  poll-interval checks ─► (rejoin) ...
//! ```
//!
//! Heartbeats go out from the JoinGroup answer on, as Java's heartbeat thread runs in
//! `COMPLETING_REBALANCE`: Kafka expires a member of a completing group that neither heartbeats
//! nor waits in a SyncGroup for its session timeout, so a leader whose assignor takes longer
//! would be dropped and the group rebalanced. They pause while the SyncGroup
//! is out (see [`Classic::sync`]).
//!
//! Error codes are judged by `coordinator::verdict` (one table for JoinGroup, SyncGroup,
//! Heartbeat and OffsetCommit). Partitions are **lost** (no commit, the lost callback) when
//! the generation is gone: `ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID`, no heartbeat answered
//! within the session timeout (librdkafka's rule: another member may own them by then), or
//! the member left after `max_poll_interval`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kafkit_group_balancer::{
    ASSIGNMENT_VERSION, Assignment, GroupBalancer, GroupMember, PartitionMetadata as GbPartition,
    RebalanceProtocol, SUBSCRIPTION_VERSION, Subscription as MemberSubscription, TopicMetadata,
    TopicPartitions, encode_assignments,
};
use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::{
    HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest, SyncGroupResponse,
    join_group_request, join_group_response::JoinGroupResponseMember, leave_group_request,
    sync_group_request,
};
use tokio::time::Instant;
use tracing::Instrument;

use super::commit::{self, Identity};
use super::coordinator::{self, Verdict, failure_verdict, verdict};
use super::member::{Beat, BeatPlan, Member, Stop, Wake};
use super::shared::Tp;
use super::subscription::{Snapshot, Subscription};
use crate::conn::Conn;
use crate::conn::metadata::Metadata;
use crate::error::group::GroupError;
use crate::error::{Error, Result};
use crate::time::wire_ms;

/// Runs a classic member until it is closed.
pub(crate) async fn run(core: Member) {
    let mut m = Classic::new(core);
    let _ = m.run().await;
    m.leave().await;
    m.core.shutdown().await;
}

/// `lead`: every member's subscription as the assignor reads it (an undecodable one
/// subscribes to nothing), and the topics they subscribe to, sorted.
fn group_members(members: &[JoinGroupResponseMember]) -> (Vec<GroupMember>, Vec<String>) {
    let mut group: Vec<GroupMember> = Vec::with_capacity(members.len());
    let mut topics: BTreeSet<String> = BTreeSet::new();
    for m in members {
        let gm = GroupMember::from_join_group(m.member_id.clone(), m.group_instance_id.clone(), &m.metadata)
            .unwrap_or_else(|e| {
                tracing::warn!(member = %m.member_id, error = %e, "undecodable member metadata: assigned nothing");
                GroupMember::new(m.member_id.clone(), MemberSubscription::new(Vec::<String>::new()))
            });
        topics.extend(gm.subscription.topics.iter().cloned());
        group.push(gm);
    }
    (group, topics.into_iter().collect())
}

/// `lead`: the topics of `names` that metadata knows, with their partitions' racks (for
/// rack-aware assignors), and the snapshot of their partition counts (a change rejoins).
fn assignor_input(md: &Metadata, names: &[String]) -> (Vec<TopicMetadata>, Snapshot) {
    let racks: HashMap<i32, Option<String>> = md
        .brokers
        .iter()
        .map(|b| (b.node_id, b.rack.clone()))
        .collect();
    let mut tmeta = Vec::new();
    let mut snap = Snapshot::new();
    for name in names {
        let Some(tm) = md.topic(name) else { continue };
        if !tm.error_code.is_ok() || tm.partitions.is_empty() {
            continue;
        }
        let parts = tm
            .partitions
            .iter()
            .map(|p| {
                let rack_of = |n: i32| racks.get(&n).cloned().flatten();
                match rack_of(p.leader_id) {
                    Some(r) => GbPartition::with_racks(
                        p.partition,
                        r,
                        p.replicas.iter().filter_map(|n| rack_of(*n)),
                    ),
                    None => GbPartition::new(p.partition),
                }
            })
            .collect();
        snap.insert(
            name.clone(),
            i32::try_from(tm.partitions.len()).unwrap_or(i32::MAX),
        );
        tmeta.push(TopicMetadata::with_partitions(name.clone(), parts));
    }
    (tmeta, snap)
}

/// What JoinGroup answered that SyncGroup needs.
struct Joined {
    members: Vec<JoinGroupResponseMember>,
    skip_assignment: bool,
}

pub(crate) struct Classic {
    pub(crate) core: Member,
    generation: i32,
    member_id: String,
    protocol: Option<String>,
    leader: bool,
    /// The member's own subscription when it joined.
    snapshot: Snapshot,
    /// The leader's view of every member's topics when it assigned.
    group_snapshot: Option<(Vec<String>, Snapshot)>,
    /// Why the member must rejoin.
    rejoin: Option<&'static str>,
    /// The owned partitions must be reported lost before the next join.
    lost: bool,
    /// A fatal code from a heartbeat or commit.
    fatal: Option<(&'static str, ErrorCode)>,
    /// The assignment before the last revocation, and its generation (sticky user data).
    last_assignment: Vec<TopicPartitions>,
    last_generation: i32,
    /// When a heartbeat was last answered `NONE` (or the generation started).
    last_ok: Instant,
    next_metadata: Instant,
    failures: u32,
    /// A JoinGroup or SyncGroup was sent on the coordinator connection and its answer not
    /// read: the broker may hold it (a rebalance waiting for members), and it answers a
    /// connection's requests in order, so a LeaveGroup sent behind it would wait there.
    held: bool,
}

impl Classic {
    fn new(core: Member) -> Self {
        Classic {
            core,
            generation: -1,
            member_id: String::new(),
            protocol: None,
            leader: false,
            snapshot: Snapshot::new(),
            group_snapshot: None,
            rejoin: None,
            lost: false,
            fatal: None,
            last_assignment: Vec::new(),
            last_generation: -1,
            last_ok: Instant::now(),
            next_metadata: Instant::now(),
            failures: 0,
            held: false,
        }
    }

    /// Whether the next rebalance is eager (revoke everything before the JoinGroup): the
    /// protocol of the assignor the group chose in the member's last generation, when it
    /// offers that one (the group follows it, so in an eager -> cooperative rolling upgrade
    /// the member is eager while an eager assignor is the common one and cooperative once a
    /// cooperative one is); before a first generation, eager unless every offered assignor
    /// is cooperative (Java's rule; nothing is owned then anyway).
    fn eager(&self) -> bool {
        let cfg = &self.core.shared.config;
        let chosen = self
            .protocol
            .as_deref()
            .and_then(|p| cfg.assignors.iter().find(|a| a.protocol_name() == p));
        match chosen {
            Some(a) => a.rebalance_protocol() == RebalanceProtocol::Eager,
            None => cfg.rebalance_protocol() == RebalanceProtocol::Eager,
        }
    }

    async fn run(&mut self) -> Result<(), Stop> {
        loop {
            if let Some((op, code)) = self.fatal.take() {
                return Err(self.core.fatal(op, code, None).await);
            }
            if self.lost {
                self.lost = false;
                self.end_generation();
                self.core.revoke_all(true).await?;
            }
            // This join reads the subscription as it is now; a change after sets it again.
            self.core.take_resubscribed();
            if self.core.shared.subscription().is_none() {
                self.unsubscribed().await?;
                continue;
            }
            self.snapshot = self.resolve().await?;
            self.next_metadata = Instant::now() + self.core.shared.config.metadata_max_age;
            let (node, conn) = self.core.ensure_coordinator().await?;
            if self.eager() && !self.core.owned.is_empty() {
                self.remember_assignment();
                self.core.revoke_all(false).await?;
                self.handle_beats();
                if self.lost || self.fatal.is_some() {
                    continue;
                }
            }
            self.core.commits_answered().await?;
            self.rejoin = None;
            self.core.shared.rebalance_started();
            self.core.commit_ready = false;
            self.core.beat = None;
            self.core.drop_heartbeat();
            // Answers to heartbeats of the generation that ended say nothing about the next.
            self.core.beats.clear();
            let Some(joined) = self.join(node, conn.clone()).await? else {
                continue;
            };
            // In the generation from the JoinGroup answer on (Java's COMPLETING_REBALANCE,
            // where its heartbeat thread runs): a leader whose assignment takes longer than
            // the session timeout stays in the group (KIP-62).
            self.start_heartbeats();
            let Some(assignment) = self.sync(node, conn, joined).await? else {
                continue;
            };
            self.install(assignment).await?;
            self.stable().await?;
        }
    }

    /// The application unsubscribed (Java `unsubscribe`: `onLeavePrepare` + `maybeLeaveGroup`):
    /// revoke what is owned (its commit and callback), leave the group as a close would, and
    /// wait outside it until the application subscribes again.
    async fn unsubscribed(&mut self) -> Result<(), Stop> {
        tracing::info!(group = %self.core.group_id(), "unsubscribed: leaving the group");
        self.core.revoke_all(false).await?;
        self.core.commits_answered().await?;
        self.leave().await;
        self.end_generation();
        self.member_id.clear();
        self.core.who.member_id.clear();
        self.core.until_subscribed().await?;
        self.core.shared.rebalance_started();
        Ok(())
    }

    /// The subscription's topics now (retried until it answers).
    async fn resolve(&mut self) -> Result<Snapshot, Stop> {
        let Some(sub) = self.core.shared.subscription() else {
            return Ok(Snapshot::new());
        };
        let mut failures = 0;
        loop {
            let t = self.core.shared.transport.clone();
            let sub2 = sub.clone();
            match self
                .core
                .wait(async move { sub2.resolve(&t).await })
                .await?
            {
                Ok(s) => return Ok(s),
                Err(e) if e.is_retriable() => {
                    failures += 1;
                    tracing::debug!(error = %e, "subscription metadata");
                    self.core
                        .pause(commit::backoff(
                            self.core.shared.config.retry_backoff,
                            failures,
                        ))
                        .await?;
                }
                Err(e) => return Err(self.core.park(e).await),
            }
        }
    }

    /// The generation ended: no heartbeats, no commits with it.
    fn end_generation(&mut self) {
        self.generation = -1;
        self.core.who.generation = -1;
        self.core.commit_ready = false;
        self.core.fail_deferred(ErrorCode::ILLEGAL_GENERATION);
        self.core.beat = None;
        self.core.drop_heartbeat();
    }

    fn remember_assignment(&mut self) {
        self.last_assignment = by_topic(&self.core.owned);
        self.last_generation = self.generation;
    }

    /// The topics the member subscribes with: the names given, or the pattern's matches.
    fn topics(&self) -> Vec<String> {
        match &self.core.shared.subscription() {
            Some(Subscription::Topics(t)) => t.clone(),
            _ => self.snapshot.keys().cloned().collect(),
        }
    }

    fn join_request(&self) -> Result<JoinGroupRequest> {
        let cfg = &self.core.shared.config;
        let owned = by_topic(&self.core.owned);
        let topics = self.topics();
        let rack = self.core.shared.reader_settings.3.clone();
        let mut protocols = Vec::with_capacity(cfg.assignors.len());
        for a in &cfg.assignors {
            let mut sub = MemberSubscription::new(topics.iter().cloned())
                .with_owned_partitions(owned.clone())
                // The generation the owned partitions came with (KIP-792), not the last
                // JoinGroup answer's: a member whose SyncGroup was refused never got that one,
                // and a generation that changes with every join makes tansu take each rejoin
                // as changed metadata and start the rebalance over.
                .with_generation_id(self.core.who.generation)
                .with_user_data(a.user_data(&self.last_assignment, self.last_generation));
            if let Some(r) = &rack {
                sub = sub.with_rack_id(r.clone());
            }
            protocols.push(
                join_group_request::JoinGroupRequestProtocol::default()
                    .with_name(a.protocol_name().to_owned())
                    .with_metadata(sub.encode(SUBSCRIPTION_VERSION)?),
            );
        }
        Ok(JoinGroupRequest::default()
            .with_group_id(cfg.group_id.clone())
            .with_session_timeout_ms(wire_ms(cfg.session_timeout))
            .with_rebalance_timeout_ms(wire_ms(cfg.rebalance_timeout()))
            .with_member_id(self.member_id.clone())
            .with_group_instance_id(cfg.group_instance_id.clone())
            .with_protocol_type("consumer".to_owned())
            .with_protocols(protocols))
    }

    /// Backs off after a failure (doubling), serving commands meanwhile.
    async fn back_off(&mut self) -> Result<(), Stop> {
        self.failures += 1;
        let d = commit::backoff(self.core.shared.config.retry_backoff, self.failures);
        self.core.pause(d).await
    }

    /// What a JoinGroup / SyncGroup error means; `Ok(())` to try the join again.
    async fn on_join_error(&mut self, op: &'static str, code: ErrorCode) -> Result<(), Stop> {
        tracing::debug!(group = %self.core.group_id(), op, %code, "rejoining");
        match verdict(code) {
            Verdict::Ok => Ok(()),
            Verdict::Rejoin => Ok(()),
            Verdict::Relocate => {
                self.core.coord.lost();
                self.back_off().await
            }
            Verdict::Retry => self.back_off().await,
            Verdict::Reset => {
                self.end_generation();
                self.lost |= !self.core.owned.is_empty();
                Ok(())
            }
            Verdict::ResetMemberId => {
                self.end_generation();
                self.member_id.clear();
                self.core.who.member_id.clear();
                self.lost |= !self.core.owned.is_empty();
                Ok(())
            }
            Verdict::Fenced | Verdict::Fatal => Err(self.core.fatal(op, code, None).await),
        }
    }

    /// A request that got no answer: relocate and back off, or stop.
    async fn on_failure(&mut self, op: &'static str, e: Error) -> Result<(), Stop> {
        tracing::debug!(group = %self.core.group_id(), op, error = %e, "group request failed");
        match failure_verdict(&e) {
            Verdict::Relocate | Verdict::Retry => {
                self.core.coord.lost();
                self.back_off().await
            }
            _ => Err(self.core.park(e).await),
        }
    }

    async fn join(&mut self, node: i32, conn: Conn) -> Result<Option<Joined>, Stop> {
        loop {
            let req = match self.join_request() {
                Ok(r) => r,
                Err(e) => return Err(self.core.park(e).await),
            };
            let wait = self.core.shared.config.rebalance_timeout();
            let span = tracing::info_span!("join", group = %self.core.group_id(), member_id = %self.member_id);
            let send = self
                .core
                .coord
                .send(node, conn.clone(), req, wait)
                .instrument(span);
            self.held = true;
            let answer = self.core.wait(send).await?;
            self.held = false;
            let (_, resp) = match answer {
                Ok(x) => x,
                Err(Error::Decode(e)) => {
                    // librdkafka's mock cluster answers every JoinGroup error with a null
                    // leader and member id (non-nullable strings), so its error code cannot
                    // be read. Find the coordinator again (the code may have been
                    // NOT_COORDINATOR) and join again after a backoff; a fatal code comes
                    // back the same way and is retried, never mistaken for success.
                    tracing::debug!(group = %self.core.group_id(), error = %e, "undecodable JoinGroup answer: joining again");
                    self.core.coord.lost();
                    self.back_off().await?;
                    return Ok(None);
                }
                Err(e) => {
                    self.on_failure("JoinGroup", e).await?;
                    return Ok(None);
                }
            };
            match resp.error_code {
                ErrorCode::NONE => {
                    self.failures = 0;
                    self.generation = resp.generation_id;
                    self.member_id = resp.member_id;
                    self.protocol = resp.protocol_name;
                    self.leader = resp.leader == self.member_id;
                    tracing::debug!(
                        group = %self.core.group_id(),
                        member_id = %self.member_id,
                        generation = self.generation,
                        leader = self.leader,
                        protocol = ?self.protocol,
                        "joined"
                    );
                    return Ok(Some(Joined {
                        members: resp.members,
                        skip_assignment: resp.skip_assignment,
                    }));
                }
                ErrorCode::MEMBER_ID_REQUIRED => {
                    // KIP-394: join again at once with the id the coordinator gave.
                    self.member_id = resp.member_id;
                }
                code => {
                    self.on_join_error("JoinGroup", code).await?;
                    return Ok(None);
                }
            }
        }
    }

    /// The leader's part: every member's subscription, the topics' metadata, the assignor.
    /// Heartbeats go out meanwhile (the assignor runs on a blocking thread, so a slow one
    /// holds up neither them nor commits); `None` when one of their answers ended the
    /// generation (the member joins again).
    async fn lead(
        &mut self,
        members: &[JoinGroupResponseMember],
    ) -> Result<Option<Vec<(String, bytes::Bytes)>>, Stop> {
        let (group, names) = group_members(members);
        let Some(md) = self.fresh_metadata(&names).await? else {
            return Ok(None);
        };
        let (tmeta, snap) = assignor_input(&md, &names);
        let assignor = self.chosen_assignor().await?;
        let eager = assignor.rebalance_protocol() == RebalanceProtocol::Eager;
        // An assignor is the application's code and may take long (Java runs it on the poll
        // thread while its heartbeat thread goes on); if this member is closed meanwhile, the
        // thread finishes on its own and its plan is dropped.
        let assign = tokio::task::spawn_blocking(move || {
            let plan = assignor.assign(&group, &tmeta);
            (group, plan)
        });
        let (group, plan) = match self.syncing(assign).await? {
            None => return Ok(None),
            Some(Ok(done)) => done,
            Some(Err(e)) => match e.try_into_panic() {
                // The assignor panicked: as if it had run on this task.
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_) => return Err(Stop),
            },
        };
        let mut plan = match plan {
            Ok(p) => p,
            Err(e) => return Err(self.core.park(Error::Assign(e)).await),
        };
        if eager {
            hold_back_transfers(&group, &mut plan);
        }
        self.group_snapshot = Some((names, snap));
        match encode_assignments(&plan, ASSIGNMENT_VERSION) {
            Ok(a) => Ok(Some(a)),
            Err(e) => Err(self.core.park(Error::ConsumerProtocol(e)).await),
        }
    }

    /// `lead`: metadata of the members' topics, asked afresh (heartbeats go on meanwhile);
    /// `None` when a heartbeat answer ended the generation.
    async fn fresh_metadata(&mut self, names: &[String]) -> Result<Option<Arc<Metadata>>, Stop> {
        let t = self.core.shared.transport.clone();
        // The leader assigns from fresh metadata (librdkafka refreshes before it runs the
        // assignor): partitions added since the last refresh are assigned in this generation.
        // It also gives the followers the time to send their SyncGroup before the leader's,
        // which librdkafka's mock cluster needs (it answers the group once the leader's
        // assignment is in, and refuses a follower's SyncGroup that comes after).
        t.invalidate_metadata();
        loop {
            let t2 = t.clone();
            let n = names.to_vec();
            let r = self
                .syncing(async move {
                    let refs: Vec<&str> = n.iter().map(String::as_str).collect();
                    t2.metadata_for(&refs).await
                })
                .await?;
            match r {
                None => return Ok(None),
                Some(Ok(md)) => return Ok(Some(md)),
                Some(Err(e)) if e.is_retriable() => {
                    self.failures += 1;
                    let d = commit::backoff(self.core.shared.config.retry_backoff, self.failures);
                    if self.syncing(tokio::time::sleep(d)).await?.is_none() {
                        return Ok(None);
                    }
                }
                Some(Err(e)) => return Err(self.core.park(e).await),
            }
        }
    }

    /// `lead`: the assignor the coordinator chose, of those this member offers; parks the
    /// member (a fatal `INCONSISTENT_GROUP_PROTOCOL`) when it offers no such assignor.
    async fn chosen_assignor(&mut self) -> Result<Arc<dyn GroupBalancer>, Stop> {
        let protocol = self.protocol.clone().unwrap_or_default();
        let chosen = self
            .core
            .shared
            .config
            .assignors
            .iter()
            .find(|a| a.protocol_name() == protocol)
            .cloned();
        if let Some(assignor) = chosen {
            return Ok(assignor);
        }
        let e = Error::Group(GroupError::Fatal {
            group_id: self.core.group_id().to_owned(),
            operation: "SyncGroup",
            code: ErrorCode::INCONSISTENT_GROUP_PROTOCOL,
            message: Some(format!(
                "the coordinator chose {protocol:?}, which this member does not offer"
            )),
        });
        Err(self.core.park(e).await)
    }

    async fn sync(
        &mut self,
        node: i32,
        conn: Conn,
        joined: Joined,
    ) -> Result<Option<Assignment>, Stop> {
        let assignments = if self.leader && !joined.skip_assignment {
            match self.lead(&joined.members).await? {
                Some(a) => a,
                None => return Ok(None),
            }
        } else {
            self.group_snapshot = None;
            Vec::new()
        };
        let req = self.sync_request(assignments);
        let wait = self.core.shared.config.rebalance_timeout();
        let span = tracing::info_span!("sync", group = %self.core.group_id(), generation = self.generation);
        let send = self.core.coord.send(node, conn, req, wait).instrument(span);
        // No heartbeat goes out while the SyncGroup is held: a broker reads one request of a
        // connection at a time, so one sent now would wait behind it (and, past the request
        // timeout, close the connection and the SyncGroup with it), and Kafka counts a member
        // whose SyncGroup it holds as alive (`ClassicGroupMember.hasSatisfiedHeartbeat`). One
        // already in flight is answered first.
        self.core.beat = None;
        self.held = true;
        let answer = self.syncing(send).await?;
        self.held = false;
        // Answers to heartbeats sent before the SyncGroup: judged here, in the phase they
        // were sent in (the mock cluster answers them REBALANCE_IN_PROGRESS while it syncs);
        // heartbeats of the stable phase start afresh in `install`.
        self.handle_beats_in(true);
        self.core.drop_heartbeat();
        let Some(answer) = answer else {
            return Ok(None);
        };
        if self.generation < 0 || self.fatal.is_some() {
            // A heartbeat answer ended the generation: the assignment cannot be used
            // (Java: "Generation data was cleared by heartbeat thread").
            return Ok(None);
        }
        self.synced(answer).await
    }

    /// `sync`'s request: this member's part of the generation, with the leader's assignments.
    fn sync_request(&self, assignments: Vec<(String, bytes::Bytes)>) -> SyncGroupRequest {
        let cfg = &self.core.shared.config;
        SyncGroupRequest::default()
            .with_group_id(cfg.group_id.clone())
            .with_generation_id(self.generation)
            .with_member_id(self.member_id.clone())
            .with_group_instance_id(cfg.group_instance_id.clone())
            .with_protocol_type(Some("consumer".to_owned()))
            .with_protocol_name(self.protocol.clone())
            .with_assignments(
                assignments
                    .into_iter()
                    .map(|(member_id, assignment)| {
                        sync_group_request::SyncGroupRequestAssignment::default()
                            .with_member_id(member_id)
                            .with_assignment(assignment)
                    })
                    .collect(),
            )
    }

    /// `sync`: the SyncGroup answer judged: this member's assignment, or `None` (join again,
    /// after a backoff where the answer asks for one).
    async fn synced(
        &mut self,
        answer: Result<(i16, SyncGroupResponse)>,
    ) -> Result<Option<Assignment>, Stop> {
        let (_, resp) = match answer {
            Ok(x) => x,
            Err(Error::Decode(e)) => {
                // librdkafka's mock cluster answers every SyncGroup error with a null
                // assignment (non-nullable bytes), so its error code cannot be read. Every
                // SyncGroup error but a fatal one is cured by joining again, and a fatal one
                // comes back from that JoinGroup.
                tracing::debug!(group = %self.core.group_id(), error = %e, "undecodable SyncGroup answer: rejoining");
                self.back_off().await?;
                return Ok(None);
            }
            Err(e) => {
                self.on_failure("SyncGroup", e).await?;
                return Ok(None);
            }
        };
        if resp.error_code != ErrorCode::NONE {
            self.on_join_error("SyncGroup", resp.error_code).await?;
            return Ok(None);
        }
        if resp.assignment.is_empty() {
            return Ok(Some(Assignment::default()));
        }
        match Assignment::decode(&resp.assignment) {
            Ok(a) => Ok(Some(a)),
            Err(e) => {
                tracing::warn!(group = %self.core.group_id(), error = %e, "undecodable assignment: rejoining");
                self.back_off().await?;
                Ok(None)
            }
        }
    }

    /// Applies an assignment: revokes what moved (cooperative; then rejoin at once), reads the
    /// committed offsets of what was added, hands it to the application, starts heartbeats.
    async fn install(&mut self, assignment: Assignment) -> Result<(), Stop> {
        let new: BTreeSet<Tp> = assignment.iter().map(|(t, p)| (Arc::from(t), p)).collect();
        self.core.who = Identity {
            generation: self.generation,
            member_id: self.member_id.clone(),
            instance_id: self.core.shared.config.group_instance_id.clone(),
        };
        self.core
            .shared
            .joined(&self.member_id, self.generation, self.protocol.as_deref());
        self.start_heartbeats();
        let revoked: Vec<Tp> = self.core.owned.difference(&new).cloned().collect();
        let added: Vec<Tp> = new.difference(&self.core.owned).cloned().collect();
        if !revoked.is_empty() {
            // KIP-429: give up what moved, then rejoin so the leader can hand it over.
            self.remember_assignment();
            self.core.revoke(revoked, false).await?;
            self.rejoin = Some("partitions were revoked");
        }
        self.core.after_rebalance();
        let starts = self.core.committed(&added).await?;
        tracing::debug!(
            group = %self.core.group_id(),
            generation = self.generation,
            added = starts.len(),
            owned = new.len(),
            "assignment installed"
        );
        self.core.assign(starts);
        self.core.shared.set_assignment(&self.core.owned);
        Ok(())
    }

    /// Heartbeats of the current generation from now on (Java's `HeartbeatThread.enable`,
    /// which resets the session timer).
    fn start_heartbeats(&mut self) {
        self.last_ok = Instant::now();
        let cfg = &self.core.shared.config;
        let req = HeartbeatRequest::default()
            .with_group_id(cfg.group_id.clone())
            .with_generation_id(self.generation)
            .with_member_id(self.member_id.clone())
            .with_group_instance_id(cfg.group_instance_id.clone());
        let transport = self.core.coord.transport().clone();
        self.core.beat = Some(BeatPlan {
            every: cfg.heartbeat_interval,
            next: Instant::now() + cfg.heartbeat_interval,
            make: Box::new(move |node, conn| {
                let send =
                    coordinator::send(transport.clone(), node, conn, req.clone(), Duration::ZERO);
                Box::pin(async move { Beat::Classic(send.await) })
            }),
        });
    }

    /// Runs `fut` between the JoinGroup answer and the SyncGroup answer, judging heartbeat
    /// answers as they come ([`Classic::handle_beats_in`], syncing); `None` as soon as one
    /// ends the generation or is fatal (the member joins again, or stops, at the top of
    /// [`Classic::run`]), `fut` dropped.
    async fn syncing<F: Future>(&mut self, fut: F) -> Result<Option<F::Output>, Stop> {
        let mut fut = Box::pin(fut);
        loop {
            match self.core.during(&mut fut).await? {
                Wake::Done(out) => return Ok(Some(out)),
                Wake::Beat => {
                    self.handle_beats_in(true);
                    if self.generation < 0 || self.fatal.is_some() {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Handles the heartbeat answers that came in, in the stable phase.
    fn handle_beats(&mut self) {
        self.handle_beats_in(false);
    }

    /// Handles the heartbeat answers that came in. `syncing`: sent between the JoinGroup
    /// answer and the SyncGroup (Java's COMPLETING_REBALANCE): REBALANCE_IN_PROGRESS is
    /// ignored then (the SyncGroup answer tells whether the rebalance failed; librdkafka's
    /// mock cluster answers every heartbeat so while it syncs), and the session is not
    /// checked (a held SyncGroup holds the heartbeats behind it; its own answer bounds it).
    fn handle_beats_in(&mut self, syncing: bool) {
        while let Some(b) = self.core.beats.pop_front() {
            let Beat::Classic(r) = b else { continue };
            let (v, code) = match r {
                Ok((_, resp)) => (verdict(resp.error_code), resp.error_code),
                Err(e) => (
                    failure_verdict(&e),
                    e.error_code().unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR),
                ),
            };
            match v {
                Verdict::Ok => {
                    self.last_ok = Instant::now();
                    self.failures = 0;
                }
                // Java: "Ignoring heartbeat response with error REBALANCE_IN_PROGRESS during
                // COMPLETING_REBALANCE state", and counts it as answered.
                Verdict::Rejoin if syncing => self.last_ok = Instant::now(),
                Verdict::Rejoin => {
                    self.rejoin.get_or_insert("the group is rebalancing");
                }
                Verdict::Reset => {
                    self.end_generation();
                    self.lost = true;
                    self.rejoin = Some("the generation expired");
                }
                Verdict::ResetMemberId => {
                    self.end_generation();
                    self.member_id.clear();
                    self.lost = true;
                    self.rejoin = Some("the member id is unknown");
                }
                Verdict::Relocate => self.core.coord.lost(),
                Verdict::Retry => {}
                Verdict::Fenced => self.fatal = Some(("Heartbeat", ErrorCode::FENCED_INSTANCE_ID)),
                // Retrying cannot help, and the application must know: stop with the code.
                Verdict::Fatal if code == ErrorCode::GROUP_AUTHORIZATION_FAILED => {
                    self.fatal = Some(("Heartbeat", code));
                }
                Verdict::Fatal => {
                    // Java's heartbeat thread fails this heartbeat and sends the next at its
                    // interval; the session timeout (above) bounds how long that may go on.
                    tracing::warn!(group = %self.core.group_id(), %code, "heartbeat failed; the next one goes at its interval");
                }
            }
        }
        if let Some(code) = self.core.generation_gone.take() {
            self.end_generation();
            if code == ErrorCode::UNKNOWN_MEMBER_ID {
                self.member_id.clear();
            }
            self.lost = true;
            self.rejoin = Some("a commit found the generation gone");
        }
        let session = self.core.shared.config.session_timeout;
        if !syncing && self.generation >= 0 && self.last_ok.elapsed() > session {
            // librdkafka: no heartbeat answered within the session timeout, so the
            // coordinator has dropped the member and another may own its partitions.
            tracing::warn!(group = %self.core.group_id(), "no heartbeat answered within the session timeout");
            self.end_generation();
            self.lost = true;
            self.rejoin = Some("the session timed out");
        }
    }

    /// The stable phase: heartbeats (sent by `Member::during`), metadata checks and the poll
    /// interval, until a rejoin is needed.
    async fn stable(&mut self) -> Result<(), Stop> {
        loop {
            self.handle_beats();
            if self.core.take_resubscribed() {
                tracing::info!(group = %self.core.group_id(), "the application changed the subscription: rejoining");
                self.rejoin = Some("the subscription changed");
            }
            if self.fatal.is_some() || self.lost || self.rejoin.is_some() {
                return Ok(());
            }
            let cfg = &self.core.shared.config;
            let since = self.core.shared.since_poll();
            if since > cfg.max_poll_interval {
                return self.poll_timeout().await;
            }
            let Some((_, coord_conn)) = self.core.coord.connected() else {
                // Bounded by the session: past it the partitions are lost (handle_beats).
                let session_due = self.last_ok + cfg.session_timeout;
                self.core.ensure_coordinator_by(Some(session_due)).await?;
                continue;
            };
            let now = Instant::now();
            if now >= self.next_metadata {
                self.next_metadata = now + cfg.metadata_max_age;
                if self.subscription_changed().await? {
                    self.rejoin = Some("the subscribed topics changed");
                }
                continue;
            }
            let poll_due = now + (cfg.max_poll_interval - since);
            let session_due = self.last_ok + cfg.session_timeout;
            let until =
                self.next_metadata.min(poll_due).min(session_due) + Duration::from_millis(1);
            // Also woken when the coordinator connection closes (the broker restarted, the
            // link was cut): no heartbeat goes out without one, so waiting for the next
            // deadline would let the session run out and lose the partitions.
            let mut sleep = Box::pin(async move {
                tokio::select! {
                    () = tokio::time::sleep_until(until) => {}
                    () = coord_conn.closed() => {}
                }
            });
            match self.core.during(&mut sleep).await? {
                Wake::Done(()) | Wake::Beat => {}
            }
        }
    }

    /// Whether the member's (or, for the leader, the group's) topics changed since the join.
    async fn subscription_changed(&mut self) -> Result<bool, Stop> {
        let Some(sub) = self.core.shared.subscription() else {
            return Ok(false);
        };
        let t = self.core.shared.transport.clone();
        let group = self.group_snapshot.clone();
        let r = self
            .core
            .wait(async move {
                t.invalidate_metadata();
                let own = sub.resolve(&t).await?;
                let group_now = match &group {
                    Some((names, _)) => {
                        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                        let md = t.metadata_for(&refs).await?;
                        let snap: Snapshot = names
                            .iter()
                            .filter_map(|n| md.topic(n))
                            .filter(|tm| tm.error_code.is_ok() && !tm.partitions.is_empty())
                            .map(|tm| {
                                (
                                    tm.name.clone(),
                                    i32::try_from(tm.partitions.len()).unwrap_or(i32::MAX),
                                )
                            })
                            .collect();
                        Some(snap)
                    }
                    None => None,
                };
                Ok::<_, Error>((own, group_now))
            })
            .await?;
        match r {
            Ok((own, group_now)) => {
                let changed = own != self.snapshot
                    || matches!((&self.group_snapshot, &group_now), (Some((_, a)), Some(b)) if a != b);
                if changed {
                    tracing::info!(group = %self.core.group_id(), "subscribed topics changed: rejoining");
                }
                Ok(changed)
            }
            Err(e) => {
                tracing::debug!(error = %e, "metadata check failed");
                Ok(false)
            }
        }
    }

    /// The application stopped polling: leave the group (dynamic members), report the
    /// error and the lost partitions, wait for the next poll, rejoin.
    async fn poll_timeout(&mut self) -> Result<(), Stop> {
        let shared = Arc::clone(&self.core.shared);
        let cfg = &shared.config;
        tracing::warn!(group = %cfg.group_id, max_poll_interval = ?cfg.max_poll_interval, "poll timeout: leaving the group");
        self.leave().await;
        self.end_generation();
        self.member_id.clear();
        self.core.who.member_id.clear();
        let e = Error::Group(GroupError::MaxPollIntervalExceeded {
            group_id: cfg.group_id.clone(),
            max_poll_interval: cfg.max_poll_interval,
        });
        self.core.shared.set_state("left: poll timeout");
        self.core.report(e);
        self.core.revoke_all(true).await?;
        self.core.polled_again().await?;
        self.rejoin = Some("the application polled again");
        Ok(())
    }

    /// LeaveGroup as the close asked (KIP-1092, Java `AbstractCoordinator.maybeLeaveGroup`):
    /// by default for a dynamic member only (a static member stays until its session times
    /// out, KIP-345); `LeaveGroup` for a static member too (LeaveGroup v3+ naming its
    /// instance id); `RemainInGroup` for none. Bounded by 5 s.
    async fn leave(&mut self) {
        let cfg = &self.core.shared.config;
        let is_static = cfg.group_instance_id.is_some();
        if !sends_leave_group(self.core.leave_op, is_static) || self.member_id.is_empty() {
            return;
        }
        if self.held {
            // Closed mid-join: the held JoinGroup (or SyncGroup) would keep the LeaveGroup
            // behind it on its connection until the rebalance ends, past the 5 s bound, and
            // the member would stay in the group. Cut that connection and leave on a new one.
            self.held = false;
            self.core.coord.close();
            match tokio::time::timeout(Duration::from_secs(5), self.core.coord.find()).await {
                Ok(Ok((node, conn))) => self.core.coord.set(node, conn),
                Ok(Err(e)) => {
                    tracing::debug!(group = %cfg.group_id, error = %e, "no connection to leave the group on");
                    return;
                }
                Err(_) => {
                    tracing::debug!(group = %cfg.group_id, "no connection to leave the group on within 5 s");
                    return;
                }
            }
        }
        let Some((node, conn)) = self.core.coord.connected() else {
            return;
        };
        // A static member is named by its instance id, which LeaveGroup carries from v3
        // (KIP-345); a dynamic one goes at the member's usual version.
        let version = if is_static {
            conn.version_for::<LeaveGroupRequest>(None)
                .ok()
                .filter(|v| *v >= 3)
        } else {
            coordinator::preferred_version::<LeaveGroupRequest>(&conn).ok()
        };
        let Some(version) = version else {
            tracing::debug!(group = %cfg.group_id, "no LeaveGroup version for this member: it stays until its session times out");
            return;
        };
        let mut req = LeaveGroupRequest::default().with_group_id(cfg.group_id.clone());
        if version >= 3 {
            req.members = vec![
                leave_group_request::MemberIdentity::default()
                    .with_member_id(self.member_id.clone())
                    .with_group_instance_id(cfg.group_instance_id.clone())
                    .with_reason(Some("the consumer is closing".into())),
            ];
        } else {
            req.member_id.clone_from(&self.member_id);
        }
        let send = self.core.coord.send_at(node, conn, req, version);
        match tokio::time::timeout(Duration::from_secs(5), send).await {
            Ok(Ok((_, resp))) => {
                tracing::debug!(group = %cfg.group_id, code = %resp.error_code, "left the group");
            }
            Ok(Err(e)) => tracing::debug!(group = %cfg.group_id, error = %e, "LeaveGroup failed"),
            Err(_) => tracing::debug!(group = %cfg.group_id, "LeaveGroup timed out"),
        }
        self.member_id.clear();
    }
}

/// Whether a classic member closed with `op` sends LeaveGroup (KIP-1092, Java
/// `AbstractCoordinator.shouldSendLeaveGroupRequest`): `LeaveGroup` always, `Default` for a
/// dynamic member only, `RemainInGroup` never.
fn sends_leave_group(op: super::config::GroupMembershipOperation, is_static: bool) -> bool {
    use super::config::GroupMembershipOperation as Op;
    match op {
        Op::LeaveGroup => true,
        Op::RemainInGroup => false,
        _ => !is_static,
    }
}

/// Owned partitions grouped by topic (the consumer protocol's shape).
fn by_topic(owned: &BTreeSet<Tp>) -> Vec<TopicPartitions> {
    let mut m: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in owned {
        m.entry(t).or_default().push(*p);
    }
    m.into_iter()
        .map(|(t, ps)| TopicPartitions::new(t, ps))
        .collect()
}

/// An eager assignor chosen while members still own partitions (members that were
/// cooperative in the last generation, when the group moves back to an eager assignor): a
/// partition assigned to one member but owned by another is held back for this generation
/// (KIP-429's two phases, which a cooperative assignor does itself): its owner revokes it,
/// being cooperative, and rejoins at once, and the next generation hands it over. So no
/// partition is owned by two members at once. Members that revoked everything before joining
/// (eager) own nothing and change nothing here.
fn hold_back_transfers(group: &[GroupMember], plan: &mut kafkit_group_balancer::GroupAssignment) {
    let mut owner: HashMap<(&str, i32), &str> = HashMap::new();
    for m in group {
        for tp in &m.subscription.owned_partitions {
            for p in &tp.partitions {
                owner.insert((tp.topic.as_str(), *p), m.member_id.as_str());
            }
        }
    }
    if owner.is_empty() {
        return;
    }
    for (member, assignment) in plan.iter_mut() {
        for tp in &mut assignment.partitions {
            tp.partitions.retain(|p| {
                owner
                    .get(&(tp.topic.as_str(), *p))
                    .is_none_or(|o| *o == member.as_str())
            });
        }
        assignment.partitions.retain(|tp| !tp.partitions.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// KIP-1092 as Java's `AbstractCoordinator.shouldSendLeaveGroupRequest` decides it.
    #[test]
    fn leave_group_follows_the_close_option() {
        use super::super::config::GroupMembershipOperation as Op;
        assert!(sends_leave_group(Op::Default, false));
        assert!(!sends_leave_group(Op::Default, true));
        assert!(sends_leave_group(Op::LeaveGroup, false));
        assert!(sends_leave_group(Op::LeaveGroup, true));
        assert!(!sends_leave_group(Op::RemainInGroup, false));
        assert!(!sends_leave_group(Op::RemainInGroup, true));
    }
}
