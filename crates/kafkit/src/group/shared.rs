//! The group member's engine state: [`Shared`], what the member task (`member.rs`,
//! `classic.rs`, `consumer.rs`) and the facade (`mod.rs`) share; the [`Step`]s the member asks
//! the facade to carry out and the [`Command`]s the facade sends it; the [`View`] behind
//! [`GroupStats`]. Imports `config.rs`, `commit.rs`, `subscription.rs`, the reader, `ops` and
//! `transport`; never the facade.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use super::commit::{self, CommitRequest};
use super::config::{Config, GroupMembershipOperation, GroupProtocol};
use super::subscription::Subscription;
use crate::error::group::GroupError;
use crate::error::{Error, Result};
use crate::ops::offsets::IsolationLevel;
use crate::ops::offsets::OffsetAndMetadata;
use crate::reader::{AutoOffsetReset, Barrier, Position, Reader};
use crate::transport::Transport;

/// A partition: topic and index.
pub(crate) type Tp = (Arc<str>, i32);

/// What the member task asks the facade to do, in order, inside the next poll.
pub(crate) enum Step {
    /// Assign these partitions to the Reader, each at its start offset.
    Assign(Vec<(String, i32, commit::Start)>),
    /// Take these partitions away (commit them unless `lost`), then answer `ack`.
    Revoke {
        parts: Vec<(String, i32)>,
        lost: bool,
        ack: oneshot::Sender<()>,
    },
    /// Hand this error to the application.
    Report(Error),
    /// The member stopped for good (fenced, a fatal refusal): hand the error to the
    /// application, take every partition from the Reader (another member may own them now)
    /// and answer every later poll with the second error.
    Stop(Error, GroupError),
}

/// What the facade asks the member task.
pub(crate) enum Command {
    Commit(CommitRequest),
    /// The application changed the subscription (`Shared::subscription`): rejoin with it, or
    /// leave the group and wait while there is none.
    Resubscribe,
    /// Leave the group or stay in it (KIP-1092) and stop; answer when done.
    Close(oneshot::Sender<()>, GroupMembershipOperation),
}

/// What the member task and the facade share.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) transport: Transport,
    /// `(max_poll_records, auto_offset_reset, isolation level, client_rack)` of the Reader.
    pub(crate) reader_settings: (usize, AutoOffsetReset, IsolationLevel, Option<String>),
    pub(super) view: Mutex<View>,
    /// What the member reads now (`None`: unsubscribed); the member task reads it at each
    /// join, the application changes it ([`GroupReader::subscribe`](super::GroupReader::subscribe)).
    pub(super) subscription: Mutex<Option<Subscription>>,
    /// Offsets the application stored ([`GroupReader::store_offset`](super::GroupReader::store_offset)): with
    /// `enable_auto_offset_store` off, what a commit sends.
    pub(super) stored: Mutex<BTreeMap<(String, i32), Position>>,
    /// The member's Reader: its positions are what a commit sends.
    pub(super) reader: Arc<Reader>,
    /// Where the application stands in the partition answer the `Stream` is handing out, which
    /// the Reader's position already passed (set at each record yielded).
    pub(super) streamed: Mutex<Option<Streamed>>,
    pub(super) commands: mpsc::UnboundedSender<Command>,
    /// When the application last polled, in ms since `epoch`. A poll that waits is polled
    /// again at least every `GroupReader::keep_alive`, so it keeps this fresh while the
    /// application awaits it, and stops when the application drops or stops awaiting it.
    pub(super) last_poll_ms: AtomicU64,
    /// Notified at every poll (a member that left after `max_poll_interval` waits for it).
    pub(crate) polled: Notify,
    pub(super) epoch: Instant,
    /// The KIP-714 windows (`group/telemetry.rs` reports them).
    pub(super) kip714: crate::telemetry::window::CoordinatorWindows,
}

/// The `Stream`'s place in a partition answer it has not yielded in full.
pub(super) struct Streamed {
    pub(super) key: Tp,
    /// The answer's version barrier: a seek, reset or revocation since ends it.
    pub(super) barrier: Barrier,
    /// After the last record yielded (before the first: the first record's offset).
    pub(super) at: Position,
}

/// What [`GroupReader::stats`](super::GroupReader::stats) reports, kept by the member task.
#[derive(Debug, Default)]
pub(super) struct View {
    pub(super) state: &'static str,
    pub(super) group_protocol: GroupProtocol,
    pub(super) member_id: String,
    pub(super) generation: i32,
    pub(super) protocol: Option<String>,
    pub(super) assignment: Vec<(String, i32)>,
    pub(super) rebalances: u64,
    pub(super) first_assignment: Option<Duration>,
    pub(super) last_rebalance: Option<Duration>,
    pub(super) rebalance_started: Option<Instant>,
    pub(super) commits: u64,
    pub(super) commit_latency_total: Duration,
    pub(super) commit_latency_max: Duration,
    pub(super) commit_latency_last: Option<Duration>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    pub(super) fn new(
        config: Config,
        transport: Transport,
        reader_settings: (usize, AutoOffsetReset, IsolationLevel, Option<String>),
        reader: Arc<Reader>,
        commands: mpsc::UnboundedSender<Command>,
        epoch: Instant,
    ) -> Shared {
        let view = View {
            state: "joining",
            generation: -1,
            group_protocol: match config.group_protocol {
                GroupProtocol::Classic => GroupProtocol::Classic,
                _ => GroupProtocol::Consumer,
            },
            ..View::default()
        };
        Shared {
            subscription: Mutex::new(config.subscription.clone()),
            config,
            transport,
            reader_settings,
            reader,
            streamed: Mutex::new(None),
            stored: Mutex::new(BTreeMap::new()),
            view: Mutex::new(view),
            commands,
            last_poll_ms: AtomicU64::new(0),
            polled: Notify::new(),
            epoch,
            kip714: crate::telemetry::window::CoordinatorWindows::default(),
        }
    }

    /// What the member reads now (`None`: unsubscribed).
    pub(crate) fn subscription(&self) -> Option<Subscription> {
        lock(&self.subscription).clone()
    }

    pub(crate) fn set_state(&self, state: &'static str) {
        lock(&self.view).state = state;
    }

    /// The member falls back from the consumer protocol to the classic one.
    pub(crate) fn set_group_protocol(&self, protocol: GroupProtocol) {
        lock(&self.view).group_protocol = protocol;
    }

    /// A join started (for the rebalance time).
    pub(crate) fn rebalance_started(&self) {
        let mut v = lock(&self.view);
        v.state = "joining";
        v.rebalance_started.get_or_insert_with(Instant::now);
    }

    /// The member's epoch moved without a rebalance of its own (KIP-848: learned from a
    /// keep-alive heartbeat): what [`GroupReader::group_metadata`](super::GroupReader::group_metadata) hands a transaction.
    pub(crate) fn set_generation(&self, generation: i32) {
        lock(&self.view).generation = generation;
    }

    /// A generation (or epoch) was joined with this assignment.
    pub(crate) fn joined(&self, member_id: &str, generation: i32, protocol: Option<&str>) {
        let mut v = lock(&self.view);
        v.state = "stable";
        v.member_id = member_id.to_owned();
        v.generation = generation;
        v.protocol = protocol.map(str::to_owned);
        v.rebalances += 1;
        if let Some(start) = v.rebalance_started.take() {
            v.last_rebalance = Some(start.elapsed());
            self.kip714.rebalanced(start.elapsed());
        }
        if v.first_assignment.is_none() {
            v.first_assignment = Some(self.epoch.elapsed());
        }
    }

    pub(crate) fn set_assignment(&self, owned: &BTreeSet<Tp>) {
        lock(&self.view).assignment = owned.iter().map(|(t, p)| (t.to_string(), *p)).collect();
    }

    pub(crate) fn note_commit(&self, latency: Duration) {
        self.kip714.committed(latency);
        let mut v = lock(&self.view);
        v.commits += 1;
        v.commit_latency_total += latency;
        v.commit_latency_max = v.commit_latency_max.max(latency);
        v.commit_latency_last = Some(latency);
    }

    pub(super) fn stats(&self) -> GroupStats {
        let v = lock(&self.view);
        GroupStats {
            state: v.state,
            group_protocol: v.group_protocol,
            member_id: v.member_id.clone(),
            generation: v.generation,
            protocol: v.protocol.clone(),
            assignment: v.assignment.clone(),
            rebalances: v.rebalances,
            first_assignment: v.first_assignment,
            last_rebalance: v.last_rebalance,
            commits: v.commits,
            commit_latency_avg: u32::try_from(v.commits)
                .ok()
                .filter(|n| *n > 0)
                .map(|n| v.commit_latency_total / n),
            commit_latency_max: (v.commits > 0).then_some(v.commit_latency_max),
            commit_latency_last: v.commit_latency_last,
        }
    }

    /// How long since the application last polled.
    pub(crate) fn since_poll(&self) -> Duration {
        let last = self.last_poll_ms.load(Ordering::Acquire);
        let now = crate::time::millis(self.epoch.elapsed());
        Duration::from_millis(now.saturating_sub(last))
    }

    pub(super) fn note_poll(&self) {
        let now = crate::time::millis(self.epoch.elapsed());
        self.last_poll_ms.store(now, Ordering::Release);
        self.polled.notify_waiters();
    }

    /// The consumed positions of `parts` (or of every partition the Reader holds) as offsets
    /// to commit: every partition with a position, whether or not it was handed a record
    /// (Java commits every assigned partition with a valid position), so a commit passes
    /// transaction markers and aborted batches, and a partition positioned by
    /// `auto_offset_reset` that got no record keeps that position across a restart.
    ///
    /// With `enable_auto_offset_store` off: the offsets the application stored instead.
    pub(super) fn consumed_offsets(&self, parts: Option<&[(String, i32)]>) -> Vec<commit::Offset> {
        if !self.config.enable_auto_offset_store {
            let stored = lock(&self.stored);
            return stored
                .iter()
                .filter(|((t, p), _)| {
                    parts.is_none_or(|ps| ps.iter().any(|(pt, pp)| pt == t && pp == p))
                })
                .map(|((t, p), pos)| {
                    let mut om = OffsetAndMetadata::new(pos.offset);
                    om.leader_epoch = pos.leader_epoch;
                    (t.clone(), *p, om)
                })
                .collect();
        }
        let all;
        let parts = match parts {
            Some(ps) => ps,
            None => {
                all = self.reader.assignment();
                &all
            }
        };
        let mut out: Vec<commit::Offset> = parts
            .iter()
            .filter_map(|(t, p)| {
                let pos = self.position(t, *p)?;
                let mut om = OffsetAndMetadata::new(pos.offset);
                om.leader_epoch = pos.leader_epoch;
                Some((t.clone(), *p, om))
            })
            .collect();
        out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        out
    }

    /// The application's position in a partition: in the answer the `Stream` is handing out,
    /// after the last record yielded; otherwise the Reader's position.
    pub(super) fn position(&self, topic: &str, partition: i32) -> Option<Position> {
        let streamed = lock(&self.streamed).as_ref().and_then(|s| {
            (&*s.key.0 == topic && s.key.1 == partition && s.barrier.holds()).then_some(s.at)
        });
        streamed.or_else(|| self.reader.position(topic, partition))
    }

    /// Forgets the stored offsets of partitions taken away (librdkafka drops them too).
    pub(super) fn forget_stored(&self, parts: &[(String, i32)]) {
        let mut stored = lock(&self.stored);
        for (t, p) in parts {
            stored.remove(&(t.clone(), *p));
        }
    }

    /// Whether the member owns `topic`/`partition` now; else the typed error.
    pub(super) fn owned(&self, topic: &str, partition: i32) -> Result<()> {
        let owned = lock(&self.view)
            .assignment
            .iter()
            .any(|(t, p)| t == topic && *p == partition);
        if owned {
            Ok(())
        } else {
            Err(Error::Group(GroupError::PartitionNotAssigned {
                group_id: self.config.group_id.clone(),
                topic: topic.to_owned(),
                partition,
            }))
        }
    }

    /// The `Stream` yielded up to `at` in the answer of `key` (`None`: it holds none).
    pub(super) fn set_streamed(&self, streamed: Option<Streamed>) {
        *lock(&self.streamed) = streamed;
    }

    /// Sends a commit to the member task; the receiver gets its outcome.
    pub(super) fn send_commit(
        &self,
        offsets: Vec<commit::Offset>,
        auto: bool,
    ) -> oneshot::Receiver<Result<()>> {
        let (tx, rx) = oneshot::channel();
        let now = Instant::now();
        let req = CommitRequest {
            offsets,
            reply: Some(tx),
            deadline: now + self.transport.default_api_timeout(),
            asked: now,
            auto,
            seq: 0,
        };
        if let Err(mpsc::error::SendError(Command::Commit(req))) =
            self.commands.send(Command::Commit(req))
        {
            req.answer(Err(Error::Group(GroupError::Closed)));
        }
        rx
    }
}

/// Counters and the member's state, from [`GroupReader::stats`](super::GroupReader::stats).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct GroupStats {
    /// `joining`, `stable`, `failed`, `closed`...
    pub state: &'static str,
    /// The protocol the member runs: [`GroupProtocol::Classic`] or [`GroupProtocol::Consumer`]
    /// (never `Auto`: what it chose; `Consumer` until a fallback to the classic protocol).
    pub group_protocol: GroupProtocol,
    /// The member id the coordinator gave (empty before the first join).
    pub member_id: String,
    /// The generation (classic) or member epoch (KIP-848) of the current assignment.
    pub generation: i32,
    /// The assignor the coordinator chose (classic), or the server assignor asked for.
    pub protocol: Option<String>,
    /// The partitions owned now, sorted.
    pub assignment: Vec<(String, i32)>,
    /// Joins completed (each generation or new epoch counts once).
    pub rebalances: u64,
    /// From `build` to the first completed join.
    pub first_assignment: Option<Duration>,
    /// How long the last rebalance took (JoinGroup sent -> assignment received).
    pub last_rebalance: Option<Duration>,
    /// Commits answered successfully.
    pub commits: u64,
    /// Their mean latency (asked -> answered, retries included); `None` before the first.
    pub commit_latency_avg: Option<Duration>,
    /// The largest commit latency.
    pub commit_latency_max: Option<Duration>,
    /// The latency of the last successful commit.
    pub commit_latency_last: Option<Duration>,
}
