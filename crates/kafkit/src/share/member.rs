//! The state a share group member's task and its [`super::ShareReader`] share, and the member
//! task: ShareGroupHeartbeat (KIP-932) with the group coordinator, on a connection of its own.
//!
//! The coordinator assigns partitions (server-side assignment, the `simple` assignor); a member
//! has no revocation to go through: a heartbeat answer with an assignment replaces the old one
//! at once, and the reader's next poll fetches the new partitions and forgets the old ones.
//! A fenced or unknown member (`FENCED_MEMBER_EPOCH`, `UNKNOWN_MEMBER_ID`) joins again at epoch
//! 0 with the same member id; `NOT_COORDINATOR` / `COORDINATOR_NOT_AVAILABLE` finds the
//! coordinator again; `COORDINATOR_LOAD_IN_PROGRESS` and other retriable codes wait
//! `retry_backoff`; anything else stops the member with [`ShareError::Fatal`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::{ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::share::ShareError;
use crate::group::coordinator::{Coordinator, Verdict, failure_verdict, verdict};
use crate::transport::Transport;

use super::acks::PartAcks;
use super::config::Config;
use super::session::Tip;

/// What the member task and the reader share.
pub(crate) struct Shared {
    /// This reader's number in the process (a record names the reader that handed it out).
    pub(crate) id: u64,
    /// Set by `close` (and a drop): acknowledgements are refused from then on.
    pub(crate) closed: std::sync::atomic::AtomicBool,
    pub(crate) config: Config,
    pub(crate) transport: Transport,
    /// The member id, made by this client (KIP-932 members name themselves).
    pub(crate) member_id: String,
    pub(crate) state: Mutex<MemberState>,
    /// Wakes the member task: the reader polled after a stall, the subscription changed, or
    /// the reader closes.
    pub(crate) wake: Notify,
    /// Wakes a poll waiting for an assignment.
    pub(crate) assigned: Notify,
    /// The reader's acknowledgement state per partition (for `acknowledge(&self)`).
    pub(crate) acks: Mutex<HashMap<Tip, PartAcks>>,
    pub(crate) stats: Counters,
}

/// Counters for [`super::ShareStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) heartbeats: AtomicU64,
    pub(crate) share_fetches: AtomicU64,
    pub(crate) share_acknowledges: AtomicU64,
    pub(crate) records_acquired: AtomicU64,
    pub(crate) records_delivered: AtomicU64,
    pub(crate) acknowledgements_sent: AtomicU64,
    pub(crate) acknowledgements_failed: AtomicU64,
    pub(crate) rounds: AtomicU64,
    pub(crate) max_in_flight: AtomicU64,
    /// The KIP-714 windows (`share/telemetry.rs` reports them).
    pub(crate) kip714: crate::telemetry::window::ShareWindows,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// The member's state.
#[derive(Debug)]
pub(crate) struct MemberState {
    /// The member epoch; 0 to join, -1 after leaving.
    pub(crate) epoch: i32,
    /// The assigned partitions, sorted.
    pub(crate) assignment: Vec<Tip>,
    /// Bumped on every change of `assignment`.
    pub(crate) version: u64,
    /// The topics subscribed to; `subscription_sent` is false until a heartbeat carried them.
    pub(crate) topics: Vec<String>,
    pub(crate) subscription_sent: bool,
    /// Why the member stopped, if it did.
    pub(crate) fatal: Option<ShareError>,
    /// When the application last polled.
    pub(crate) last_poll: Instant,
    /// The member left after `max_poll_interval`; the next poll reports it once.
    pub(crate) left_for_poll: bool,
    /// The reader closes: the task leaves the group and ends.
    pub(crate) closing: bool,
    /// The acquisition lock timeout the brokers last reported.
    pub(crate) lock_timeout: Option<Duration>,
}

impl Shared {
    pub(crate) fn new(transport: Transport, config: Config, member_id: String) -> Self {
        let topics = config.topics.clone();
        static READERS: AtomicU64 = AtomicU64::new(0);
        Shared {
            id: READERS.fetch_add(1, Ordering::Relaxed),
            closed: std::sync::atomic::AtomicBool::new(false),
            config,
            transport,
            member_id,
            state: Mutex::new(MemberState {
                epoch: 0,
                assignment: Vec::new(),
                version: 0,
                topics,
                subscription_sent: false,
                fatal: None,
                last_poll: Instant::now(),
                left_for_poll: false,
                closing: false,
                lock_timeout: None,
            }),
            wake: Notify::new(),
            assigned: Notify::new(),
            acks: Mutex::new(HashMap::new()),
            stats: Counters::default(),
        }
    }

    /// The member state, locked (never held across an `.await`).
    pub(crate) fn state(&self) -> MutexGuard<'_, MemberState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The acknowledgement state, locked (never held across an `.await`; taken after
    /// `state` when both are needed).
    pub(crate) fn acks(&self) -> MutexGuard<'_, HashMap<Tip, PartAcks>> {
        self.acks.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn group(&self) -> &str {
        &self.config.group_id
    }

    fn fatal(&self, operation: &'static str, code: ErrorCode, message: Option<String>) {
        let mut st = self.state();
        st.fatal = Some(ShareError::Fatal {
            group_id: self.group().to_string(),
            operation,
            code,
            message,
        });
        st.assignment.clear();
        st.version += 1;
    }
}

/// What the task does next.
enum Next {
    /// Heartbeat after this long (or when woken).
    Wait(Duration),
    /// Stop.
    Stop,
}

/// The member task: heartbeats until the reader closes (then leaves the group) or the member
/// fails for good.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut coord = Coordinator::new(shared.transport.clone(), shared.config.group_id.clone());
    let mut interval = Duration::from_secs(5);
    loop {
        let next = match step(&shared, &mut coord, &mut interval).await {
            Next::Stop => break,
            Next::Wait(d) => d,
        };
        let stall = {
            let st = shared.state();
            (st.epoch >= 0 && !st.left_for_poll)
                .then(|| st.last_poll + shared.config.max_poll_interval)
        };
        let wake = Instant::now() + next;
        let until = stall.map_or(wake, |s| s.min(wake));
        tokio::select! {
            () = tokio::time::sleep_until(until) => {}
            () = shared.wake.notified() => {}
        }
    }
    coord.close();
}

/// One pass: close, leave after a stall, or heartbeat.
async fn step(shared: &Arc<Shared>, coord: &mut Coordinator, interval: &mut Duration) -> Next {
    let (closing, stalled, left) = {
        let st = shared.state();
        let stalled = !st.left_for_poll && st.last_poll.elapsed() > shared.config.max_poll_interval;
        (st.closing, stalled, st.left_for_poll)
    };
    if closing {
        leave(shared, coord).await;
        return Next::Stop;
    }
    if stalled {
        tracing::info!(
            group = shared.group(),
            "max_poll_interval passed: leaving the share group"
        );
        leave(shared, coord).await;
        let mut st = shared.state();
        st.left_for_poll = true;
        st.epoch = 0;
        st.subscription_sent = false;
        return Next::Wait(Duration::from_secs(3600));
    }
    if left {
        // Wait for the poll that reports the stall; it wakes this task.
        return Next::Wait(Duration::from_secs(3600));
    }
    heartbeat(shared, coord, interval).await
}

/// Sends one ShareGroupHeartbeat and applies its answer.
async fn heartbeat(shared: &Arc<Shared>, coord: &mut Coordinator, interval: &mut Duration) -> Next {
    let backoff = shared.config.retry_backoff;
    let Some((node, conn)) = connected(coord).await else {
        return Next::Wait(backoff);
    };
    let req = request(shared);
    let sent_topics = req.subscribed_topic_names.clone();
    Counters::add(&shared.stats.heartbeats, 1);
    let resp = match coord.send(node, conn, req, Duration::ZERO).await {
        Ok((_, r)) => r,
        Err(e) => {
            return match failure_verdict(&e) {
                Verdict::Fatal => {
                    let code = e.error_code().unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR);
                    shared.fatal("ShareGroupHeartbeat", code, Some(e.to_string()));
                    Next::Stop
                }
                _ => {
                    tracing::debug!(error = %e, "share heartbeat failed: finding the coordinator again");
                    coord.lost();
                    Next::Wait(backoff)
                }
            };
        }
    };
    answered(shared, coord, resp, sent_topics, interval)
}

/// The coordinator connection, found and dialled when there is none.
async fn connected(coord: &mut Coordinator) -> Option<(i32, crate::conn::Conn)> {
    if let Some(c) = coord.connected() {
        return Some(c);
    }
    match coord.find().await {
        Ok((node, conn)) => {
            coord.set(node, conn.clone());
            Some((node, conn))
        }
        Err(e) => {
            tracing::debug!(error = %e, "share group coordinator not found yet");
            None
        }
    }
}

/// The heartbeat to send now: the subscription when joining or changed, the rack when joining.
fn request(shared: &Shared) -> ShareGroupHeartbeatRequest {
    let st = shared.state();
    let joining = st.epoch == 0;
    let mut req = ShareGroupHeartbeatRequest::default()
        .with_group_id(shared.config.group_id.clone())
        .with_member_id(shared.member_id.clone())
        .with_member_epoch(st.epoch);
    if joining || !st.subscription_sent {
        req = req.with_subscribed_topic_names(Some(st.topics.clone()));
    }
    if joining {
        req = req.with_rack_id(shared.config.client_rack.clone());
    }
    req
}

/// Applies a heartbeat answer.
fn answered(
    shared: &Shared,
    coord: &mut Coordinator,
    resp: ShareGroupHeartbeatResponse,
    sent_topics: Option<Vec<String>>,
    interval: &mut Duration,
) -> Next {
    let backoff = shared.config.retry_backoff;
    match verdict(resp.error_code) {
        Verdict::Ok => {
            if resp.heartbeat_interval_ms > 0 {
                *interval = Duration::from_millis(resp.heartbeat_interval_ms as u64);
            }
            let mut st = shared.state();
            st.epoch = resp.member_epoch;
            // A subscription changed while the heartbeat was out goes with the next one.
            if sent_topics.is_some_and(|t| t == st.topics) {
                st.subscription_sent = true;
            }
            if let Some(a) = resp.assignment {
                let mut tips: Vec<Tip> = a
                    .topic_partitions
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
                    .collect();
                tips.sort_unstable();
                if tips != st.assignment {
                    tracing::debug!(
                        group = shared.group(),
                        partitions = tips.len(),
                        "share assignment"
                    );
                    st.assignment = tips;
                    st.version += 1;
                    shared.assigned.notify_one();
                }
            }
            Next::Wait(*interval)
        }
        Verdict::Relocate => {
            coord.lost();
            Next::Wait(backoff)
        }
        // REBALANCE_IN_PROGRESS is no share group answer; if it comes, try again.
        Verdict::Retry | Verdict::Rejoin => Next::Wait(backoff),
        Verdict::Reset | Verdict::ResetMemberId => {
            tracing::info!(group = shared.group(), code = %resp.error_code, "share member fenced: joining again");
            let mut st = shared.state();
            st.epoch = 0;
            st.subscription_sent = false;
            if !st.assignment.is_empty() {
                st.assignment.clear();
                st.version += 1;
            }
            Next::Wait(Duration::ZERO)
        }
        Verdict::Fenced | Verdict::Fatal => {
            shared.fatal("ShareGroupHeartbeat", resp.error_code, resp.error_message);
            Next::Stop
        }
    }
}

/// Leaves the group (epoch -1), once, within the request timeout; errors are only logged (the
/// coordinator drops the member when its session runs out anyway).
async fn leave(shared: &Shared, coord: &mut Coordinator) {
    let skip = {
        let st = shared.state();
        st.epoch < 0 || st.left_for_poll
    };
    if skip || !joined_once(shared) {
        return;
    }
    if let Some((node, conn)) = connected(coord).await {
        let req = ShareGroupHeartbeatRequest::default()
            .with_group_id(shared.config.group_id.clone())
            .with_member_id(shared.member_id.clone())
            .with_member_epoch(-1);
        match coord.send(node, conn, req, Duration::ZERO).await {
            Ok((_, r)) if r.error_code.is_ok() => {
                tracing::debug!(group = shared.group(), "left the share group");
            }
            Ok((_, r)) => tracing::debug!(code = %r.error_code, "share group leave answered"),
            Err(e) => tracing::debug!(error = %e, "share group leave failed"),
        }
    }
    let mut st = shared.state();
    st.epoch = -1;
    if !st.assignment.is_empty() {
        st.assignment.clear();
        st.version += 1;
    }
}

/// Whether a heartbeat was ever sent (a member that never joined has nothing to leave).
fn joined_once(shared: &Shared) -> bool {
    shared.stats.heartbeats.load(Ordering::Relaxed) > 0
}
