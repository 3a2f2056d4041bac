//! What both protocols' member tasks share (`Member`): the command channel from the facade,
//! the step channel to it, the coordinator connection, the owned partitions, commits in flight
//! and deferred, and `during`, the one place a member task waits: it runs one future while it
//! serves commits, heartbeat answers and close requests, so no wait of the member (a
//! JoinGroup held for the rebalance, a revocation the application is carrying out, a
//! backoff) stops heartbeats or commits.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use kafkit_protocol::messages::{
    ConsumerGroupHeartbeatResponse, HeartbeatResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest,
};
use kafkit_protocol::{ErrorCode, Uuid};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until};

use super::commit::{
    self, CommitOutcome, CommitRequest, Identity, commit_failed, commit_request, judge_commit,
    judge_failure,
};
use super::coordinator::Coordinator;
use super::shared::{Command, Shared, Step, Tp};
use crate::conn::Conn;
use crate::error::group::GroupError;
use crate::error::{Error, Result};
use crate::ops::otel;

/// The member should stop (closed by the application, or the facade is gone).
#[derive(Debug)]
pub(crate) struct Stop;

/// A heartbeat's answer, of either protocol.
pub(crate) enum Beat {
    Classic(Result<(i16, HeartbeatResponse)>),
    Consumer(Result<(i16, ConsumerGroupHeartbeatResponse)>),
}

/// What woke [`Member::during`].
pub(crate) enum Wake<T> {
    /// The future finished.
    Done(T),
    /// A heartbeat was answered (it waits in [`Member::beats`]).
    Beat,
}

pub(crate) type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Makes one heartbeat request to the coordinator (`node`, `conn`).
pub(crate) type BeatMaker = Box<dyn Fn(i32, Conn) -> Boxed<Beat> + Send>;

/// The heartbeats `during` sends by itself while the member is in a generation.
pub(crate) struct BeatPlan {
    pub(crate) every: Duration,
    pub(crate) next: Instant,
    pub(crate) make: BeatMaker,
}

/// The state both member tasks share.
pub(crate) struct Member {
    pub(crate) shared: Arc<Shared>,
    cmds: mpsc::UnboundedReceiver<Command>,
    steps: mpsc::UnboundedSender<Step>,
    pub(crate) coord: Coordinator,
    /// The partitions the member owns (assigned to the facade and not revoked).
    pub(crate) owned: BTreeSet<Tp>,
    /// Who commits now (generation or member epoch, member id, instance id).
    pub(crate) who: Identity,
    /// Whether commits may be sent now (false while joining and syncing: they wait).
    pub(crate) commit_ready: bool,
    /// A revocation is being carried out: its commits go out with the generation that is
    /// ending and are never deferred to the end of the rebalance (which waits for them).
    revoking: bool,
    commits: JoinSet<CommitDone>,
    /// The partitions each commit in flight names, by its task: a commit naming one of them
    /// waits until that one is answered ([`Member::flush_deferred`]).
    in_flight: HashMap<tokio::task::Id, Vec<(String, i32)>>,
    deferred: Vec<(CommitRequest, Instant)>,
    /// How many commits were asked for (the last `CommitRequest::seq`).
    commit_seq: u64,
    /// Per partition, the `seq` of the newest commit asked for that names it: an older commit
    /// sent again after a retriable refusal leaves the partition out, so it never moves the
    /// committed offset back past the newer one.
    newest: std::collections::HashMap<(String, i32), u64>,
    heartbeat: Option<tokio::task::JoinHandle<Beat>>,
    /// The heartbeats to send (`None`: none, outside a generation).
    pub(crate) beat: Option<BeatPlan>,
    /// Heartbeat answers not yet handled by the protocol, oldest first.
    pub(crate) beats: std::collections::VecDeque<Beat>,
    /// A commit failed because the generation is gone (the protocol rejoins).
    pub(crate) generation_gone: Option<ErrorCode>,
    /// A commit answer changed what the protocol loop must do (the coordinator was lost,
    /// the generation is gone): the next [`Member::during`] returns [`Wake::Beat`] at once, so
    /// a stable member finds the coordinator again instead of waiting, without heartbeats,
    /// for its session to time out.
    wake: bool,
    /// The application changed the subscription since the protocol last looked
    /// ([`Member::take_resubscribed`]).
    resubscribed: bool,
    /// Where the application's close waits for the member to leave.
    pub(crate) closing: Option<oneshot::Sender<()>>,
    /// Topic ids a coordinator answered `UNKNOWN_TOPIC_ID` for (OffsetCommit / OffsetFetch
    /// v10): not used again, so the next request names those topics (or carries the newer
    /// id the refreshed metadata has).
    pub(crate) bad_ids: std::collections::HashSet<Uuid>,
    /// Topic ids the protocol learned besides the transport's cache (a KIP-848 member's
    /// assignment names topics by id, resolved with a Metadata request of its own).
    pub(crate) learned_ids: HashMap<String, Uuid>,
    /// What the close asked of the membership (KIP-1092); `Default` until then (a drop, a
    /// poll timeout).
    pub(crate) leave_op: super::config::GroupMembershipOperation,
    /// A FindCoordinator (and dial) running in the background for a commit that is due while
    /// the coordinator's connection is gone ([`Member::find_for_commits`]).
    finding: Option<tokio::task::JoinHandle<crate::error::Result<(i32, Conn)>>>,
    /// Background lookups that failed in a row, and when the next may start (backoff).
    find_failures: u32,
    find_after: Instant,
}

/// An OffsetCommit answer (its topics named) and the topic ids its request carried.
type CommitAnswer = (OffsetCommitResponse, HashMap<String, Uuid>);

/// What a commit's task ends with: the request, the offsets it sent, the answer.
type CommitDone = (CommitRequest, Vec<commit::Offset>, Result<CommitAnswer>);

impl Member {
    pub(crate) fn new(
        shared: Arc<Shared>,
        cmds: mpsc::UnboundedReceiver<Command>,
        steps: mpsc::UnboundedSender<Step>,
    ) -> Self {
        let coord = Coordinator::new(shared.transport.clone(), shared.config.group_id.clone());
        let who = Identity {
            generation: -1,
            member_id: String::new(),
            instance_id: shared.config.group_instance_id.clone(),
        };
        Member {
            shared,
            cmds,
            steps,
            coord,
            owned: BTreeSet::new(),
            who,
            commit_ready: false,
            revoking: false,
            commits: JoinSet::new(),
            in_flight: HashMap::new(),
            deferred: Vec::new(),
            commit_seq: 0,
            newest: std::collections::HashMap::new(),
            heartbeat: None,
            beat: None,
            beats: std::collections::VecDeque::new(),
            generation_gone: None,
            wake: false,
            resubscribed: false,
            closing: None,
            bad_ids: std::collections::HashSet::new(),
            learned_ids: HashMap::new(),
            leave_op: super::config::GroupMembershipOperation::Default,
            finding: None,
            find_failures: 0,
            find_after: Instant::now(),
        }
    }

    pub(crate) fn group_id(&self) -> &str {
        &self.shared.config.group_id
    }

    /// Runs `fut` until it finishes, serving commands, commit answers and heartbeats
    /// meanwhile (the [`BeatPlan`]'s, sent when due while connected); returns early with
    /// [`Wake::Beat`] when a heartbeat is answered (the answer waits in `beats`), with `fut`
    /// left to go on in the next call.
    ///
    /// Errors: [`Stop`] when the application closes the member or drops it.
    pub(crate) async fn during<F>(&mut self, fut: &mut F) -> Result<Wake<F::Output>, Stop>
    where
        F: Future + Unpin,
    {
        loop {
            if std::mem::take(&mut self.wake) {
                return Ok(Wake::Beat);
            }
            self.flush_deferred();
            self.maybe_beat();
            self.find_for_commits();
            let retry_at = self.commit_wake_at();
            let has_find = self.finding.is_some();
            let finding = self.finding.as_mut();
            // Only while connected: without a connection `maybe_beat` sends nothing, and a
            // due time in the past would wake this loop again at once.
            let beat_at = match (&self.beat, &self.heartbeat) {
                (Some(b), None) if self.coord.connected().is_some() => Some(b.next),
                _ => None,
            };
            let has_hb = self.heartbeat.is_some();
            let hb = self.heartbeat.as_mut();
            tokio::select! {
                biased;
                cmd = self.cmds.recv() => match cmd {
                    None => return Err(Stop),
                    Some(Command::Close(reply, op)) => {
                        self.closing = Some(reply);
                        self.leave_op = op;
                        return Err(Stop);
                    }
                    Some(Command::Commit(req)) => self.commit(req),
                    Some(Command::Resubscribe) => {
                        self.resubscribed = true;
                        self.wake = true;
                    }
                },
                Some(done) = self.commits.join_next_with_id(), if !self.commits.is_empty() => {
                    self.commit_ended(done);
                }
                beat = async { hb.expect("guarded").await }, if has_hb => {
                    self.heartbeat = None;
                    if let Ok(b) = beat {
                        self.beats.push_back(b);
                        return Ok(Wake::Beat);
                    }
                }
                found = async { finding.expect("guarded").await }, if has_find => {
                    self.finding = None;
                    self.found_for_commits(found);
                }
                out = &mut *fut => return Ok(Wake::Done(out)),
                () = sleep_until(beat_at.unwrap_or_else(far)), if beat_at.is_some() => {}
                () = sleep_until(retry_at.unwrap_or_else(far)), if retry_at.is_some() => {}
            }
        }
    }

    /// Whether the deferred commits may be sent now (stable, or a revocation's, which goes
    /// with the generation that is ending).
    fn may_commit(&self) -> bool {
        self.commit_ready || (self.revoking && self.who.generation >= 0)
    }

    /// When [`Member::during`] must look at the deferred commits again: the first one's retry
    /// time while connected; while not, when the next background lookup may start
    /// ([`Member::find_for_commits`]; one running wakes the loop itself). `None` when no
    /// commit may be sent now: the end of the rebalance, or a command, wakes the loop.
    fn commit_wake_at(&self) -> Option<Instant> {
        if self.deferred.is_empty() || !self.may_commit() {
            return None;
        }
        // A commit waiting for an earlier one in flight is woken by that one's answer (a due
        // time in the past would spin this loop until then).
        let first = self
            .deferred
            .iter()
            .filter(|(req, _)| !self.behind_in_flight(req))
            .map(|(_, at)| *at)
            .min()?;
        if self.coord.connected().is_some() {
            Some(first)
        } else if self.finding.is_none() {
            Some(first.max(self.find_after))
        } else {
            None
        }
    }

    /// A commit is due while the coordinator's connection is gone (a NOT_COORDINATOR answer,
    /// a connection closed while idle): the coordinator is looked up in the background, so the
    /// commit goes out while the member waits for something else (a revocation waiting for
    /// its own commit, as auto-commit's is). It used to wait there until its deadline.
    fn find_for_commits(&mut self) {
        if self.finding.is_some() || self.coord.connected().is_some() || !self.may_commit() {
            return;
        }
        let now = Instant::now();
        if now < self.find_after || !self.deferred.iter().any(|(_, at)| *at <= now) {
            return;
        }
        self.finding = Some(tokio::spawn(self.coord.find()));
    }

    /// The background lookup's answer: the coordinator's connection kept, or a backoff before
    /// the next (a lookup that cannot succeed is the protocol loop's to report, as it looks
    /// the coordinator up itself).
    fn found_for_commits(
        &mut self,
        found: std::result::Result<crate::error::Result<(i32, Conn)>, tokio::task::JoinError>,
    ) {
        if let Ok(Ok((node, conn))) = found {
            self.coord.set(node, conn);
            self.find_failures = 0;
            return;
        }
        if let Ok(Err(e)) = found {
            tracing::debug!(group = %self.group_id(), error = %e, "coordinator not found for a commit yet");
            self.coord.lost();
        }
        self.find_failures += 1;
        self.find_after =
            Instant::now() + commit::backoff(self.shared.config.retry_backoff, self.find_failures);
    }

    /// Sends the planned heartbeat when it is due, connected, and none is in flight.
    fn maybe_beat(&mut self) {
        if self.heartbeat.is_some() {
            return;
        }
        let Some(plan) = &mut self.beat else { return };
        let now = Instant::now();
        if now < plan.next {
            return;
        }
        let Some((node, conn)) = self.coord.connected() else {
            return;
        };
        plan.next = now + plan.every;
        self.heartbeat = Some(tokio::spawn((plan.make)(node, conn)));
    }

    /// Runs `fut` to its end, serving commands meanwhile (no heartbeats).
    pub(crate) async fn wait<F: Future>(&mut self, fut: F) -> Result<F::Output, Stop> {
        let mut fut = Box::pin(fut);
        loop {
            if let Wake::Done(out) = self.during(&mut fut).await? {
                return Ok(out);
            }
        }
    }

    /// Waits (up to the transport's default API timeout) until the commits in flight are
    /// answered, and sends, then waits for, the commits still waiting to be sent (a revocation's
    /// commit deferred because the coordinator's connection was gone, or sent again after a
    /// retriable refusal), with the generation that is ending (finding the coordinator again
    /// first when needed). Called before a JoinGroup and before leaving: a commit the
    /// revocation asked for with the generation the rebalance ends must reach the coordinator
    /// before the JoinGroup or the leave that ends it, or it is refused with
    /// ILLEGAL_GENERATION or never sent (Java commits synchronously in `onJoinPrepare` and
    /// `onLeavePrepare`; librdkafka waits for its commits in progress before it rejoins). While
    /// this waits the member counts as revoking: a REBALANCE_IN_PROGRESS refusal fails the
    /// commit at once rather than waiting for a rebalance that waits for this member.
    ///
    /// Errors: [`Stop`] when the application closes the member meanwhile.
    pub(crate) async fn commits_answered(&mut self) -> Result<(), Stop> {
        let deadline = Instant::now() + self.shared.transport.default_api_timeout();
        let was = std::mem::replace(&mut self.revoking, true);
        let result = self.commits_answered_by(deadline).await;
        self.revoking = was;
        result
    }

    /// [`Member::commits_answered`] until `deadline`.
    async fn commits_answered_by(&mut self, deadline: Instant) -> Result<(), Stop> {
        loop {
            let sendable = !self.deferred.is_empty() && self.who.generation >= 0;
            if sendable && self.coord.connected().is_none() {
                self.ensure_coordinator_by(Some(deadline)).await?;
            }
            if sendable {
                self.flush_deferred();
            }
            let waiting = self.who.generation >= 0 && !self.deferred.is_empty();
            if self.commits.is_empty() && !waiting {
                return Ok(());
            }
            if Instant::now() >= deadline {
                tracing::debug!(group = %self.group_id(), "commits still in flight at the rejoin");
                return Ok(());
            }
            // A commit waiting for an earlier one in flight is woken by that one's answer.
            let retry_at = self
                .deferred
                .iter()
                .filter(|(req, _)| !self.behind_in_flight(req))
                .map(|(_, at)| *at)
                .min()
                .map_or(deadline, |at| at.clamp(Instant::now(), deadline));
            tokio::select! {
                Some(done) = self.commits.join_next_with_id(), if !self.commits.is_empty() => {
                    self.commit_ended(done);
                }
                () = sleep_until(retry_at) => {}
            }
        }
    }

    /// Waits, serving commands, until the application polls again (a member that left the
    /// group after `max_poll_interval` rejoins only then, as Java's and librdkafka's do; one
    /// that owned nothing would otherwise rejoin at once and leave again, a rebalance each).
    ///
    /// Errors: [`Stop`] when the application closes the member or drops it.
    pub(crate) async fn polled_again(&mut self) -> Result<(), Stop> {
        let shared = Arc::clone(&self.shared);
        let max = shared.config.max_poll_interval;
        self.wait(async move {
            loop {
                let polled = shared.polled.notified();
                tokio::pin!(polled);
                // Registered before the check, so a poll between the two is not missed.
                polled.as_mut().enable();
                if shared.since_poll() <= max {
                    return;
                }
                polled.await;
            }
        })
        .await
    }

    /// Whether the application changed the subscription since the last call.
    pub(crate) fn take_resubscribed(&mut self) -> bool {
        std::mem::take(&mut self.resubscribed)
    }

    /// Waits, outside the group and serving commands, until the application subscribes
    /// again (after [`crate::GroupReader::unsubscribe`]).
    ///
    /// Errors: [`Stop`] when the application closes the member or drops it.
    pub(crate) async fn until_subscribed(&mut self) -> Result<(), Stop> {
        self.shared.set_state("unsubscribed");
        let mut never = Box::pin(std::future::pending::<()>());
        while self.shared.subscription().is_none() {
            self.during(&mut never).await?;
            self.beats.clear();
        }
        self.resubscribed = false;
        Ok(())
    }

    /// Waits `d`, serving commands meanwhile.
    pub(crate) async fn pause(&mut self, d: Duration) -> Result<(), Stop> {
        self.wait(tokio::time::sleep(d)).await
    }

    /// Forgets a heartbeat in flight (its generation is gone).
    pub(crate) fn drop_heartbeat(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
    }

    /// The coordinator connection, found and dialled when there is none; failures back off
    /// and retry, serving commands meanwhile.
    ///
    /// Errors: [`Stop`]; a non-retriable FindCoordinator error stops the member through
    /// [`Member::fatal`].
    pub(crate) async fn ensure_coordinator(&mut self) -> Result<(i32, Conn), Stop> {
        loop {
            // Without a deadline it only returns with a connection.
            if let Some(c) = self.ensure_coordinator_by(None).await? {
                return Ok(c);
            }
        }
    }

    /// As [`Member::ensure_coordinator`], but gives up (`Ok(None)`) once `deadline` passes
    /// between two tries: a stable member looking for its coordinator must still notice
    /// that its session ran out (its partitions are lost then).
    ///
    /// Errors: as [`Member::ensure_coordinator`].
    pub(crate) async fn ensure_coordinator_by(
        &mut self,
        deadline: Option<Instant>,
    ) -> Result<Option<(i32, Conn)>, Stop> {
        let mut failures = 0;
        loop {
            if let Some(c) = self.coord.connected() {
                return Ok(Some(c));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            let find = self.coord.find();
            match self.wait(find).await? {
                Ok((node, conn)) => {
                    if let Some(f) = self.finding.take() {
                        f.abort();
                    }
                    self.coord.set(node, conn.clone());
                    return Ok(Some((node, conn)));
                }
                Err(e) if e.is_retriable() => {
                    tracing::debug!(group = %self.group_id(), error = %e, "coordinator not found yet");
                    self.coord.lost();
                    failures += 1;
                    let mut d = commit::backoff(self.shared.config.retry_backoff, failures);
                    if let Some(end) = deadline {
                        d = d.min(end.saturating_duration_since(Instant::now()));
                    }
                    self.pause(d).await?;
                }
                Err(e) => {
                    let code = e.error_code().unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR);
                    return Err(self
                        .fatal("FindCoordinator", code, Some(e.to_string()))
                        .await);
                }
            }
        }
    }

    /// Reports `error` to the application and waits until it closes the member, failing
    /// every commit with it.
    pub(crate) async fn park(&mut self, error: Error) -> Stop {
        tracing::warn!(group = %self.group_id(), %error, "group member stopped");
        self.shared.set_state("failed");
        let for_commits = match &error {
            Error::Group(g) => g.clone(),
            other => GroupError::Fatal {
                group_id: self.group_id().to_owned(),
                operation: "group member",
                code: other
                    .error_code()
                    .unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR),
                message: Some(other.to_string()),
            },
        };
        self.beat = None;
        self.drop_heartbeat();
        // The partitions are gone with the membership; the facade takes them from the Reader.
        self.owned.clear();
        self.shared.set_assignment(&self.owned);
        let _ = self.steps.send(Step::Stop(error, for_commits.clone()));
        loop {
            match self.cmds.recv().await {
                None => return Stop,
                Some(Command::Close(reply, op)) => {
                    self.closing = Some(reply);
                    self.leave_op = op;
                    return Stop;
                }
                Some(Command::Commit(req)) => req.answer(Err(Error::Group(for_commits.clone()))),
                Some(Command::Resubscribe) => {}
            }
        }
    }

    /// A fatal refusal: parks with [`GroupError::Fatal`] (or `FencedInstanceId`).
    pub(crate) async fn fatal(
        &mut self,
        operation: &'static str,
        code: ErrorCode,
        message: Option<String>,
    ) -> Stop {
        let group_id = self.group_id().to_owned();
        let e = if code == ErrorCode::FENCED_INSTANCE_ID {
            GroupError::FencedInstanceId {
                group_id,
                group_instance_id: self.who.instance_id.clone().unwrap_or_default(),
            }
        } else {
            GroupError::Fatal {
                group_id,
                operation,
                code,
                message,
            }
        };
        self.park(Error::Group(e)).await
    }

    /// Hands an error to the application (its next poll returns it).
    pub(crate) fn report(&self, error: Error) {
        let _ = self.steps.send(Step::Report(error));
    }

    /// Hands newly assigned partitions, with where each starts, to the application.
    pub(crate) fn assign(&mut self, parts: Vec<(String, i32, commit::Start)>) {
        for (t, p, _) in &parts {
            self.owned.insert((Arc::from(t.as_str()), *p));
        }
        self.shared.set_assignment(&self.owned);
        let _ = self.steps.send(Step::Assign(parts));
    }

    /// Takes partitions away: the application's next poll commits them (auto-commit, unless
    /// `lost`), runs the revoked (or lost) callback and unassigns them from the Reader; this
    /// waits until it has, serving commands (a commit inside the callback) and heartbeats
    /// meanwhile (their answers wait in `beats`).
    pub(crate) async fn revoke(&mut self, parts: Vec<Tp>, lost: bool) -> Result<(), Stop> {
        if parts.is_empty() {
            return Ok(());
        }
        let (ack, done) = oneshot::channel();
        let list: Vec<(String, i32)> = parts.iter().map(|(t, p)| (t.to_string(), *p)).collect();
        tracing::debug!(group = %self.group_id(), lost, partitions = list.len(), "revoking");
        let _ = self.steps.send(Step::Revoke {
            parts: list,
            lost,
            ack,
        });
        // An error means the facade is gone: the member is closing anyway.
        self.revoking = !lost;
        let waited = self.wait(done).await;
        self.revoking = false;
        let _ = waited?;
        for tp in &parts {
            self.owned.remove(tp);
        }
        self.shared.set_assignment(&self.owned);
        Ok(())
    }

    /// Every owned partition, revoked (or lost).
    pub(crate) async fn revoke_all(&mut self, lost: bool) -> Result<(), Stop> {
        let all: Vec<Tp> = self.owned.iter().cloned().collect();
        self.revoke(all, lost).await
    }

    /// The committed offsets of `parts` (OffsetFetch on the member's connection; partitions
    /// with `UNSTABLE_OFFSET_COMMIT` or a moved coordinator are asked again after a
    /// backoff), as start offsets for the Reader.
    pub(crate) async fn committed(
        &mut self,
        parts: &[Tp],
    ) -> Result<Vec<(String, i32, commit::Start)>, Stop> {
        let never = |_: &mut Member| false;
        Ok(self
            .committed_until(parts, never)
            .await?
            .unwrap_or_default())
    }

    /// As [`Member::committed`], but gives up (`Ok(None)`, the OffsetFetch in flight dropped)
    /// as soon as `stop` holds, asked before each request and each backoff and whenever a
    /// heartbeat is answered (its answer waits in [`Member::beats`] for `stop` to read): a
    /// KIP-848 member reading the offsets of what it was assigned must answer a newer
    /// assignment that takes partitions back at once, not after offsets that may stay
    /// unstable as long as a transaction stays open.
    pub(crate) async fn committed_until(
        &mut self,
        parts: &[Tp],
        mut stop: impl FnMut(&mut Member) -> bool,
    ) -> Result<Option<Vec<(String, i32, commit::Start)>>, Stop> {
        let mut out = Vec::with_capacity(parts.len());
        let mut todo: Vec<Tp> = parts.to_vec();
        let mut failures = 0u32;
        while !todo.is_empty() {
            if stop(self) {
                return Ok(None);
            }
            let Some(answer) = self.fetch_committed(&todo, &mut stop).await? else {
                return Ok(None);
            };
            todo = match answer {
                Ok(starts) => self.started(starts, &mut out),
                Err(e) => {
                    self.fetch_failed(e).await?;
                    todo
                }
            };
            if !todo.is_empty() {
                failures += 1;
                let d = commit::backoff(self.shared.config.retry_backoff, failures);
                if self
                    .wait_unless(tokio::time::sleep(d), &mut stop)
                    .await?
                    .is_none()
                {
                    return Ok(None);
                }
            }
        }
        Ok(Some(out))
    }

    /// `committed_until`: one OffsetFetch for `todo` at the coordinator (topic ids from v10
    /// when every topic's is known), read as start offsets; `None` when `stop` held first.
    async fn fetch_committed(
        &mut self,
        todo: &[Tp],
        stop: &mut impl FnMut(&mut Member) -> bool,
    ) -> Result<Option<Result<commit::Starts>>, Stop> {
        let (_, reset, _, _) = self.shared.reader_settings;
        let (node, conn) = self.ensure_coordinator().await?;
        let ids = self.topic_ids();
        let all_known = todo.iter().all(|(t, _)| ids.contains_key(&**t));
        let cap = (!all_known).then_some(commit::FIRST_TOPIC_ID_VERSION - 1);
        let version = match conn.version_for::<OffsetFetchRequest>(cap) {
            Ok(v) => v,
            Err(e) => return Err(self.park(e).await),
        };
        let (spec, mut req) = match commit::fetch_request(
            self.group_id(),
            todo,
            self.shared.config.require_stable_offsets,
            version,
        ) {
            Ok(x) => x,
            Err(e) => return Err(self.park(e).await),
        };
        commit::fetch_topic_ids(&mut req, &ids);
        let send = self.coord.send_at(node, conn, req, version);
        let Some(answer) = self.wait_unless(send, stop).await? else {
            return Ok(None);
        };
        let answer = answer.map(|(_, mut r)| {
            self.forget_ids(commit::unknown_fetch_ids(&r), &ids);
            commit::name_fetch_answer(&mut r, &ids);
            r
        });
        Ok(Some(
            answer.and_then(|r| commit::start_offsets(&spec, r, reset)),
        ))
    }

    /// `committed_until`: the partitions whose start is known go to `out`; returns those to
    /// ask again. A partition whose offset cannot be read is not started: the application gets
    /// the error (Java fails the poll) and may seek.
    fn started(
        &self,
        (ok, failed): commit::Starts,
        out: &mut Vec<(String, i32, commit::Start)>,
    ) -> Vec<Tp> {
        out.extend(ok);
        let mut again = Vec::new();
        for (t, p, code) in failed {
            if !code.is_retriable() && code != ErrorCode::UNSTABLE_OFFSET_COMMIT {
                tracing::warn!(group = %self.group_id(), topic = %t, partition = p, %code, "committed offset unreadable");
                let e = commit::unreadable(&t, p, code);
                out.push((t, p, Err(e)));
            } else {
                tracing::debug!(group = %self.group_id(), topic = %t, partition = p, %code, "committed offset asked again");
                again.push((Arc::from(t.as_str()), p));
            }
        }
        again
    }

    /// `committed_until`: the OffsetFetch failed as a whole: a lost coordinator is looked up
    /// again, a retriable error asks again, any other parks the member.
    async fn fetch_failed(&mut self, e: Error) -> Result<(), Stop> {
        match e.error_code() {
            Some(ErrorCode::NOT_COORDINATOR | ErrorCode::COORDINATOR_NOT_AVAILABLE) => {
                self.coord.lost()
            }
            Some(c) if c.is_retriable() || c == ErrorCode::UNSTABLE_OFFSET_COMMIT => {}
            None if e.is_retriable() => self.coord.lost(),
            _ => return Err(self.park(e).await),
        }
        Ok(())
    }

    /// As [`Member::wait`], but `None` (`fut` dropped) once `stop` holds after a heartbeat
    /// answer.
    async fn wait_unless<F: Future>(
        &mut self,
        fut: F,
        stop: &mut impl FnMut(&mut Member) -> bool,
    ) -> Result<Option<F::Output>, Stop> {
        let mut fut = Box::pin(fut);
        loop {
            match self.during(&mut fut).await? {
                Wake::Done(out) => return Ok(Some(out)),
                Wake::Beat if stop(self) => return Ok(None),
                Wake::Beat => {}
            }
        }
    }

    /// Topic name -> id for OffsetCommit / OffsetFetch v10: the transport's cached metadata,
    /// then [`Member::learned_ids`] for topics it lacks, less [`Member::bad_ids`].
    fn topic_ids(&self) -> HashMap<String, Uuid> {
        let mut ids = commit::known_ids(
            self.shared.transport.cached_metadata().as_deref(),
            &self.bad_ids,
        );
        for (name, id) in &self.learned_ids {
            if !self.bad_ids.contains(id) {
                ids.entry(name.clone()).or_insert(*id);
            }
        }
        ids
    }

    /// A coordinator answered `UNKNOWN_TOPIC_ID` for `unknown` (ids of `ids`): stale metadata.
    /// The ids are not used again and the topics' metadata is marked stale, so the request
    /// is sent again by name (or with the newer id a refresh brings); a topic that is gone
    /// then gets its definitive error (`UNKNOWN_TOPIC_OR_PARTITION`).
    fn forget_ids(&mut self, unknown: Vec<Uuid>, ids: &HashMap<String, Uuid>) {
        if unknown.is_empty() {
            return;
        }
        let names: Vec<&str> = ids
            .iter()
            .filter(|(_, id)| unknown.contains(id))
            .map(|(n, _)| n.as_str())
            .collect();
        tracing::debug!(group = %self.group_id(), topics = ?names, "UNKNOWN_TOPIC_ID: the topics are named until their metadata is refreshed");
        self.shared
            .transport
            .invalidate_topics(names.iter().copied());
        self.bad_ids.extend(unknown);
    }

    /// A commit asked for: sent now when the member may commit, else kept until it may.
    fn commit(&mut self, mut req: CommitRequest) {
        if req.offsets.is_empty() {
            req.answer(Ok(()));
            return;
        }
        self.commit_seq += 1;
        req.seq = self.commit_seq;
        for (t, p, _) in &req.offsets {
            self.newest.insert((t.clone(), *p), req.seq);
        }
        self.deferred.push((req, Instant::now()));
        self.flush_deferred();
    }

    /// Sends the deferred commits whose time has come, when the member may commit.
    fn flush_deferred(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut keep = Vec::new();
        for (mut req, at) in std::mem::take(&mut self.deferred) {
            // Commits go out in the order asked (one naming a partition of a commit in flight
            // waits for its answer: `behind_in_flight`), except one sent again after a retriable
            // refusal: a partition a newer commit names is left to that one, or the resend
            // would move its committed offset back (Java retries a sync commit before the
            // next is asked; franz-go sends one commit at a time).
            let newest = &self.newest;
            req.offsets.retain(|(t, p, _)| {
                newest
                    .get(&(t.clone(), *p))
                    .is_none_or(|seq| *seq <= req.seq)
            });
            if req.offsets.is_empty() {
                // Every partition is carried by a newer commit.
                req.answer(Ok(()));
                continue;
            }
            if now >= req.deadline {
                let e = commit_failed(
                    self.group_id(),
                    ErrorCode::REQUEST_TIMED_OUT,
                    Some("the commit could not be sent before the default API timeout".into()),
                );
                req.answer(Err(e));
                continue;
            }
            let may = self.may_commit();
            if !may || at > now || self.behind_in_flight(&req) {
                keep.push((req, at));
                continue;
            }
            let Some((node, conn)) = self.coord.connected() else {
                keep.push((req, at));
                continue;
            };
            self.send_commit(req, node, conn);
        }
        self.deferred.extend(keep);
    }

    /// Sends `req` to the coordinator at `node` over `conn`, from a task of its own (its
    /// partitions marked in flight until the answer); a request that cannot be built or has
    /// no version in common is answered with the error.
    fn send_commit(&mut self, req: CommitRequest, node: i32, conn: crate::Conn) {
        let offsets = req.offsets.clone();
        let built = commit_request(self.group_id(), &self.who, &offsets);
        let mut req_msg = match built {
            Ok(r) => r,
            Err(e) => {
                req.answer(Err(e));
                return;
            }
        };
        let ids = self.topic_ids();
        let cap = (!commit::commit_topic_ids(&mut req_msg, &ids))
            .then_some(commit::FIRST_TOPIC_ID_VERSION - 1);
        let version = match conn.version_for::<OffsetCommitRequest>(cap) {
            Ok(v) => v,
            Err(e) => {
                req.answer(Err(e));
                return;
            }
        };
        let send = self.coord.send_at(node, conn, req_msg, version);
        let span = tracing::debug_span!("commit", group = %self.shared.config.group_id, partitions = offsets.len(), version);
        let otel_span = self.commit_otel_span(node, &offsets);
        let names = offsets.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
        let task = self.commits.spawn(tracing::Instrument::instrument(
            async move {
                let started = crate::ops::meter::start();
                let r = send.await.map(|(_, mut r)| {
                    commit::name_commit_answer(&mut r, &ids);
                    (r, ids)
                });
                commit::end_commit_span(&otel_span, &r);
                crate::ops::meter::settled(crate::ops::meter::Op::Commit, started, &r);
                (req, offsets, r)
            },
            span,
        ));
        self.in_flight.insert(task.id(), names);
    }

    /// Whether `req` names a partition that a commit in flight names: it waits for that one's
    /// answer. Each commit is sent from a task of its own, its request queued on the
    /// coordinator's connection when that task first runs, so two commits in flight at once
    /// may reach the coordinator in either order: an auto-commit of an older position asked
    /// just before a revocation's commit could land after it and move the committed offset
    /// back (Java sends a member's commits in order on its one coordinator connection;
    /// franz-go sends one commit at a time).
    fn behind_in_flight(&self, req: &CommitRequest) -> bool {
        req.offsets.iter().any(|(t, p, _)| {
            self.in_flight
                .values()
                .any(|names| names.iter().any(|(nt, np)| nt == t && np == p))
        })
    }

    /// A commit's task ended: its partitions are free for the next commit; its answer, if it
    /// has one (not when the task was aborted), is handled.
    fn commit_ended(
        &mut self,
        done: std::result::Result<(tokio::task::Id, CommitDone), tokio::task::JoinError>,
    ) {
        match done {
            Ok((id, (req, offsets, result))) => {
                self.in_flight.remove(&id);
                self.on_commit_answer(req, offsets, result);
            }
            Err(e) => {
                self.in_flight.remove(&e.id());
            }
        }
    }

    /// The `commit` span (OpenTelemetry's conventions, `ops/otel.rs`) of one OffsetCommit to
    /// coordinator `node`: the topic when the commit names one, the partition when one.
    fn commit_otel_span(&self, node: i32, offsets: &[commit::Offset]) -> tracing::Span {
        if !tracing::enabled!(target: "kafkit::otel", tracing::Level::INFO) {
            return tracing::Span::none();
        }
        let topic = offsets.first().map(|(t, _, _)| t.as_str());
        let topic = topic.filter(|t| offsets.iter().all(|(o, _, _)| o == t));
        let partition = (offsets.len() == 1).then(|| offsets[0].1);
        let md = self.shared.transport.cached_metadata();
        let md = md.as_deref();
        let coordinator = md.and_then(|m| m.brokers.iter().find(|b| b.node_id == node));
        let server = otel::Server {
            address: coordinator.map(|b| b.host.as_str()),
            port: coordinator.map(|b| i64::from(b.port)),
            cluster_id: md.and_then(|m| m.cluster_id.as_deref()),
        };
        otel::commit_span(self.group_id(), topic, partition, server)
    }

    fn on_commit_answer(
        &mut self,
        req: CommitRequest,
        offsets: Vec<commit::Offset>,
        result: Result<CommitAnswer>,
    ) {
        let outcome = match result {
            Ok((resp, ids)) => {
                self.forget_ids(commit::unknown_commit_ids(&resp), &ids);
                judge_commit(&offsets, resp)
            }
            Err(e) => judge_failure(e),
        };
        match outcome {
            CommitOutcome::Done => {
                self.shared.note_commit(req.asked.elapsed());
                req.answer(Ok(()));
            }
            CommitOutcome::Again { code, .. }
                if self.revoking && code == ErrorCode::REBALANCE_IN_PROGRESS =>
            {
                // The coordinator refuses commits until the rebalance this revocation is
                // part of ends, and that rebalance waits for the revocation: give up
                // (Java's `RebalanceInProgressException`, librdkafka's failed commit on
                // revoke). A broker that accepts commits while preparing a rebalance
                // (Kafka's `PreparingRebalance`) never gets here.
                req.answer(Err(commit_failed(
                    self.group_id(),
                    code,
                    Some("the group is rebalancing and the partitions are being revoked".into()),
                )));
            }
            CommitOutcome::Again { code, relocate } => {
                tracing::debug!(group = %self.group_id(), %code, "commit again later");
                if relocate {
                    self.coord.lost();
                    self.wake = true;
                }
                if code == ErrorCode::REBALANCE_IN_PROGRESS {
                    self.commit_ready = false;
                }
                // Only partitions still owned are committed again after a rebalance:
                // another member may own the others now.
                let at = Instant::now() + self.shared.config.retry_backoff;
                self.deferred.push((req, at));
            }
            CommitOutcome::Failed { code, message } => {
                if matches!(
                    code,
                    ErrorCode::ILLEGAL_GENERATION
                        | ErrorCode::UNKNOWN_MEMBER_ID
                        | ErrorCode::FENCED_MEMBER_EPOCH
                ) {
                    self.generation_gone = Some(code);
                    self.wake = true;
                }
                req.answer(Err(commit_failed(self.group_id(), code, message)));
            }
        }
    }

    /// The member's generation (or epoch) is gone and its partitions are lost: commits
    /// waiting to be sent can never be sent with it, and another member may own their
    /// partitions by the next one, so they fail now with `code` (Java's commitSync throws
    /// `CommitFailedException` at once when the member is not in an active generation)
    /// rather than waiting for the default API timeout; the positions stay for the next
    /// commit.
    pub(crate) fn fail_deferred(&mut self, code: ErrorCode) {
        let group = self.shared.config.group_id.clone();
        for (req, _) in self.deferred.drain(..) {
            req.answer(Err(commit_failed(
                &group,
                code,
                Some("the member lost its partitions before the commit could be sent".into()),
            )));
        }
    }

    /// After a rebalance: deferred commits of partitions no longer owned fail (another member
    /// may own them now); the rest go out with the new generation.
    pub(crate) fn after_rebalance(&mut self) {
        let owned = &self.owned;
        let group = self.shared.config.group_id.clone();
        let mut keep = Vec::new();
        for (req, at) in std::mem::take(&mut self.deferred) {
            let all_owned = req
                .offsets
                .iter()
                .all(|(t, p, _)| owned.contains(&(Arc::from(t.as_str()), *p)));
            if all_owned || req.auto {
                keep.push((req, at));
            } else {
                req.answer(Err(commit_failed(
                    &group,
                    ErrorCode::REBALANCE_IN_PROGRESS,
                    Some("partitions were revoked before the commit could be retried".into()),
                )));
            }
        }
        for (req, _) in &mut keep {
            if req.auto {
                req.offsets
                    .retain(|(t, p, _)| owned.contains(&(Arc::from(t.as_str()), *p)));
            }
        }
        self.deferred = keep;
        self.commit_ready = true;
    }

    /// Waits (bounded) for commits in flight to be answered, then closes the coordinator
    /// connection; answers the application's close.
    pub(crate) async fn shutdown(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.commits.is_empty() {
            match tokio::time::timeout_at(deadline, self.commits.join_next_with_id()).await {
                Ok(Some(done)) => self.commit_ended(done),
                Ok(None) | Err(_) => break,
            }
        }
        self.commits.abort_all();
        self.in_flight.clear();
        if let Some(f) = self.finding.take() {
            f.abort();
        }
        for (req, _) in self.deferred.drain(..) {
            req.answer(Err(Error::Group(GroupError::Closed)));
        }
        self.drop_heartbeat();
        self.coord.close();
        self.shared.set_state("closed");
        if let Some(reply) = self.closing.take() {
            let _ = reply.send(());
        }
    }
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(86_400)
}
