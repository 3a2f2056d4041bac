//! [`GroupReader`]: a member of a consumer group (Java `KafkaConsumer.subscribe`, librdkafka's
//! high-level consumer, kafka-go's `ConsumerGroup`). The group's coordinator splits the
//! partitions of the subscribed topics between its members; each member reads its share with a
//! [`Reader`] and commits what it consumed.
//!
//! Layout: this file is the facade ([`GroupReader`], [`GroupHandle`], the `Stream`). `shared.rs`
//! (`Shared`: what the member task and the facade share, `Step`, `Command`, the stats view),
//! `config.rs` (settings table, [`GroupReaderBuilder`]), `subscription.rs` (topics or a pattern,
//! and the snapshot that tells when to rejoin), `coordinator.rs` (the member's own coordinator
//! connection, what each error code asks), `member.rs` (`Member`, what both protocols share: the
//! one waiting loop `Member::during`, revocation, commits), `classic.rs` (JoinGroup / SyncGroup /
//! Heartbeat: Java `AbstractCoordinator` + `ConsumerCoordinator`), `consumer.rs` (KIP-848
//! ConsumerGroupHeartbeat: Java `ConsumerMembershipManager`), `commit.rs` (OffsetCommit /
//! OffsetFetch built by `ops/offsets.rs`); the errors are in `error/group.rs`. The
//! children import `shared.rs`, never this file (the builder in `config.rs` aside, which builds the
//! facade).
//!
//! Data flow: the member task (one per `GroupReader`, on the runtime of `build`) owns the
//! protocol; it sends the facade **steps** (assign, revoke or lose partitions, report an
//! error) and the facade carries them out inside the application's next poll (the `Stream` or
//! `next_batch`), before any record: it assigns or unassigns the Reader's partitions (the
//! version barrier: no record of a revoked partition is handed out after the step), commits
//! what was consumed (auto-commit) and runs the [`RebalanceListener`]. The facade sends the
//! member **commands** (commit, close). So callbacks never run concurrently with each other
//! nor with record delivery, and a callback may commit: the member serves commits while it
//! waits for the step to finish.
//!
//! Offsets: what a commit sends for a partition is the Reader's position (past every batch
//! taken, markers and aborted batches included, or the committed or reset offset it started
//! at), except for the partition whose answer the `Stream` is handing out one record at a
//! time: there, the offset after the last record it yielded (`Shared::streamed`).
//!
//! Lock order: `Shared::view` and `Shared::streamed` are std mutexes, each taken alone and
//! never across an `.await`; the Reader's own locks are never taken under them.

mod classic;
pub(crate) mod commit;
mod config;
mod consumer;
pub(crate) mod coordinator;
pub(crate) use consumer::random_member_id;
mod member;
mod shared;
mod subscription;
mod telemetry;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use self::config::{CloseOptions, GroupMembershipOperation, GroupProtocol, GroupReaderBuilder};
pub use self::shared::GroupStats;
pub use crate::error::group::GroupError;

use self::config::Config;
use self::shared::{Command, Shared, Step, Streamed, lock};
use self::subscription::Subscription;
use crate::error::{Error, Result};
use crate::ops::offsets::OffsetAndMetadata;
use crate::reader::{
    AutoOffsetReset, ConsumerRecord, ConsumerRecords, PartitionRecords, Position, Reader,
    ReaderError, StartOffset,
};
use crate::transport::Transport;

/// A future the [`RebalanceListener`] returns (it may commit through the [`GroupHandle`]).
pub type ListenerFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Rebalance callbacks (Java `ConsumerRebalanceListener`, librdkafka's rebalance callback).
///
/// They run inside the application's poll (the `Stream` or [`GroupReader::next_batch`]), one
/// at a time, before any record of the new assignment and after the last record of the
/// revoked partitions: never concurrently with each other nor with record delivery. A callback
/// may commit with the [`GroupHandle`] it is given (the member serves commits while it
/// waits). The member waits for a revocation's callback before it rejoins (eager) or
/// reports the revocation (cooperative), so a slow callback slows the rebalance.
pub trait RebalanceListener: Send + Sync + 'static {
    /// Partitions newly assigned to this member (after their committed offsets were read).
    /// With a cooperative protocol only the added ones; possibly empty.
    fn on_partitions_assigned(
        &self,
        group: GroupHandle,
        partitions: Vec<(String, i32)>,
    ) -> ListenerFuture {
        let _ = (group, partitions);
        Box::pin(async {})
    }

    /// Partitions taken away in a rebalance. Their consumed offsets were committed just before
    /// when auto-commit is on; the callback may commit too (Java `onPartitionsRevoked`).
    fn on_partitions_revoked(
        &self,
        group: GroupHandle,
        partitions: Vec<(String, i32)>,
    ) -> ListenerFuture {
        let _ = (group, partitions);
        Box::pin(async {})
    }

    /// Partitions that may already belong to another member (the generation expired, the
    /// member was fenced or left after `max_poll_interval`): a commit would fail, so none is
    /// made (Java `onPartitionsLost`). By default: `on_partitions_revoked`, as in Java.
    fn on_partitions_lost(
        &self,
        group: GroupHandle,
        partitions: Vec<(String, i32)>,
    ) -> ListenerFuture {
        self.on_partitions_revoked(group, partitions)
    }
}

/// The outcome of a commit: awaited with `.await`, or dropped (the commit goes on).
#[derive(Debug)]
#[must_use = "a commit goes on when this is dropped, but its outcome is lost"]
pub struct CommitFuture {
    rx: oneshot::Receiver<Result<()>>,
}

impl Future for CommitFuture {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        match ready!(Pin::new(&mut self.rx).poll(cx)) {
            Ok(r) => Poll::Ready(r),
            Err(_) => Poll::Ready(Err(Error::Group(GroupError::Closed))),
        }
    }
}

/// A handle on a member for committing from elsewhere (a [`RebalanceListener`], another
/// task). Cheap to clone.
#[derive(Clone)]
pub struct GroupHandle {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for GroupHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupHandle")
            .field("group_id", &self.shared.config.group_id)
            .finish_non_exhaustive()
    }
}

impl GroupHandle {
    /// Commits the consumed position of every owned partition. See [`GroupReader::commit`].
    ///
    /// # Errors
    ///
    /// As [`GroupReader::commit`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the commit going; its outcome is lost.
    pub async fn commit(&self) -> Result<()> {
        let offsets = self.shared.consumed_offsets(None);
        CommitFuture {
            rx: self.shared.send_commit(offsets, false),
        }
        .await
    }

    /// Commits these offsets (see [`GroupReader::commit_offsets`]).
    ///
    /// # Errors
    ///
    /// As [`GroupReader::commit_offsets`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the commit going; its outcome is lost.
    pub async fn commit_offsets<S: AsRef<str>>(
        &self,
        offsets: &[(S, i32, OffsetAndMetadata)],
    ) -> Result<()> {
        let offsets = owned_offsets(offsets)?;
        CommitFuture {
            rx: self.shared.send_commit(offsets, false),
        }
        .await
    }

    /// Commits `record`'s offset + 1 with its leader epoch (see
    /// [`GroupReader::commit_record`]).
    ///
    /// # Errors
    ///
    /// As [`GroupReader::commit_record`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the commit going; its outcome is lost.
    pub async fn commit_record(&self, record: &ConsumerRecord) -> Result<()> {
        let next = next_offset(record)?;
        let mut om = OffsetAndMetadata::new(next);
        om.leader_epoch = record.leader_epoch;
        self.commit_offsets(&[(&*record.topic, record.partition, om)])
            .await
    }

    /// The partitions the member owns now, sorted.
    pub fn assignment(&self) -> Vec<(String, i32)> {
        lock(&self.shared.view).assignment.clone()
    }
    /// The member's state and counters (see [`GroupReader::stats`]).
    pub fn stats(&self) -> GroupStats {
        self.shared.stats()
    }

    /// The member's Reader statistics (see [`GroupReader::reader_stats`]).
    pub fn reader_stats(&self) -> crate::reader::ReaderStats {
        self.shared.reader.stats()
    }
}

/// The offset after `record`: what committing or storing it names.
fn next_offset(record: &ConsumerRecord) -> Result<i64> {
    record
        .offset
        .checked_add(1)
        .filter(|_| record.offset >= 0)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{}/{} @{}: no offset after it",
                record.topic, record.partition, record.offset
            ))
        })
}

fn owned_offsets<S: AsRef<str>>(
    offsets: &[(S, i32, OffsetAndMetadata)],
) -> Result<Vec<commit::Offset>> {
    let mut out: Vec<commit::Offset> = offsets
        .iter()
        .map(|(t, p, o)| (t.as_ref().to_owned(), *p, o.clone()))
        .collect();
    out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    if out.windows(2).any(|w| w[0].0 == w[1].0 && w[0].1 == w[1].1) {
        return Err(Error::InvalidArgument("a partition is given twice".into()));
    }
    if let Some((t, p, _)) = out.iter().find(|(_, p, o)| *p < 0 || o.offset < 0) {
        return Err(Error::InvalidArgument(format!(
            "{t}/{p}: partitions and offsets are >= 0"
        )));
    }
    Ok(out)
}

/// A member of a consumer group: records of the partitions the group gives it, as a
/// [`futures_core::Stream`] of `Result<ConsumerRecord>` or with
/// [`GroupReader::next_batch`], and commits.
///
/// Classic groups (`group_protocol = classic`): the member joins with JoinGroup offering its
/// assignors ([`GroupReaderBuilder::partition_assignment_strategy`]), the leader runs the
/// chosen one, SyncGroup hands out the assignment, and heartbeats keep the member in the
/// group; eager assignors revoke everything before each rejoin, cooperative ones (KIP-429)
/// only what moves. Static members (`group_instance_id`, KIP-345) keep their assignment
/// across a restart within the session timeout. KIP-848 groups (`group_protocol =
/// consumer`) use ConsumerGroupHeartbeat, the coordinator assigning incrementally;
/// `group_protocol = auto` takes KIP-848 where the coordinator offers it and classic
/// elsewhere. Members of either kind interoperate with other clients' members of the same
/// group (Java, librdkafka). [`GroupReader::close_with`] chooses whether closing leaves the
/// group (KIP-1092).
///
/// Each member has its own coordinator connection and its own fetch connections: a
/// JoinGroup held for the rebalance never delays another member's heartbeat or a Fetch.
///
/// Stopping: [`GroupReader::close`] (or [`GroupReader::close_with`]) is what commits what was
/// consumed (auto-commit), runs [`RebalanceListener::on_partitions_revoked`] and leaves the
/// group. Dropping a member without `close` leaves the group (dynamic members) without the
/// commit and the callback; on a multi-threaded runtime the drop waits for the leave (at most
/// the shorter of `close_timeout` and 5 s), so a member dropped at the end of
/// `#[tokio::main] async fn main` is gone before the program exits. On a current-thread
/// runtime the drop cannot wait, and a member dropped by the runtime shutting down (one a
/// spawned task still holds when `main` returns) can no longer leave: either warns, and the
/// member stays in the group until its session times out, holding the next member's
/// assignment that long.
///
/// Offsets: with `enable_auto_commit` (the default) what the application consumed is
/// committed every `auto_commit_interval`, before partitions are revoked and on close;
/// [`GroupReader::commit`], [`GroupReader::commit_async`] and
/// [`GroupReader::commit_offsets`] commit on demand. A commit carries the leader epoch of
/// the last record consumed (KIP-320). A partition starts at its committed offset (validated
/// against the leader's log with KIP-320 when it has an epoch), else where the Reader's
/// `auto_offset_reset` says; under `AutoOffsetReset::None`, or when its committed offset
/// cannot be read, it is not started: the next poll returns
/// [`ReaderError::NoOffsetForPartition`] (Java's `NoOffsetForPartitionException`) or the
/// partition's error, and [`GroupReader::seek`] starts it.
///
/// ```no_run
/// use kafkit::{GroupReader, Transport};
///
/// # async fn run() -> Result<(), kafkit::Error> {
/// let transport = Transport::builder(["127.0.0.1:9092"]).build()?;
/// let mut member = GroupReader::builder(transport, "orders-app")
///     .subscribe(["orders"])
///     .enable_auto_commit(false)
///     .build()?;
/// loop {
///     for part in member.next_batch().await? {
///         for r in &part.records {
///             println!("{}/{} @{}", part.topic, part.partition, r.offset);
///         }
///     }
///     member.commit().await?;
/// }
/// # }
/// ```
///
/// One record at a time, with librdkafka's at-least-once pattern: auto-commit on, and only
/// what the application finished is stored for it ([`GroupReader::next`] needs no stream
/// trait; `GroupReader` is also a `futures_core::Stream`, so `futures::StreamExt` works too):
///
/// ```no_run
/// use kafkit::{AutoOffsetReset, GroupReader, Transport};
///
/// # async fn handle(_: &kafkit::ConsumerRecord) {}
/// # async fn run() -> Result<(), kafkit::Error> {
/// let transport = Transport::builder(["127.0.0.1:9092"]).build()?;
/// let mut member = GroupReader::builder(transport, "billing")
///     .subscribe(["orders"])
///     .auto_offset_reset(AutoOffsetReset::Earliest)
///     .enable_auto_offset_store(false)
///     .build()?;
/// while let Some(record) = member.next().await {
///     let record = record?;
///     handle(&record).await;
///     member.store_offset(&record)?; // committed by the next auto-commit
/// }
/// # Ok(())
/// # }
/// ```
pub struct GroupReader {
    shared: Arc<Shared>,
    reader: Arc<Reader>,
    steps: mpsc::UnboundedReceiver<Step>,
    /// A step being carried out (its callback, its commit).
    applying: Option<ListenerFuture>,
    /// The partition answer the `Stream` is handing out (where it stands: `Shared::streamed`).
    current: Option<ConsumerRecords>,
    /// The `Stream`'s poll span while it refills `current` (`ops/otel.rs`).
    refill: crate::ops::otel::RefillSpan,
    listener: Option<Arc<dyn RebalanceListener>>,
    next_auto_commit: Instant,
    /// Wakes a poll that waits for records when the next automatic commit is due (a member
    /// that caught up still commits what it consumed, as librdkafka's timer does).
    auto_commit_timer: Pin<Box<tokio::time::Sleep>>,
    /// Wakes a poll that waits at least every `keep_alive` (the shorter of
    /// `heartbeat_interval` and half of `max_poll_interval`), so a poll the application still
    /// awaits counts as polling (Java's `KafkaConsumer.poll` loop wakes at least at the
    /// coordinator's next due time and resets the poll timer on each pass), while a poll
    /// future it dropped (a `timeout` around `next_batch`, a `select!` branch that lost) or
    /// a `Stream` it stopped awaiting does not.
    keep_alive_timer: Pin<Box<tokio::time::Sleep>>,
    keep_alive: Duration,
    task: Option<JoinHandle<()>>,
    /// The member task ended: the next poll reports `Closed`.
    ended: bool,
    /// The member stopped for good: every poll reports this.
    stopped: Option<GroupError>,
    /// Its KIP-714 engine (`group/telemetry.rs`); dropped with the member.
    push: crate::telemetry::ClientPush,
}

impl std::fmt::Debug for GroupReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupReader")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl GroupReader {
    /// A builder for a member of `group_id` on `transport` (see [`GroupReaderBuilder`]).
    pub fn builder(transport: Transport, group_id: impl Into<String>) -> GroupReaderBuilder {
        GroupReaderBuilder::new(transport, group_id)
    }

    pub(crate) fn start(
        transport: Transport,
        reader: Reader,
        config: Config,
        listener: Option<Arc<dyn RebalanceListener>>,
        push: bool,
    ) -> Result<GroupReader> {
        let handle = Handle::try_current()
            .map_err(|_| Error::Config("GroupReaderBuilder::build needs a tokio runtime".into()))?;
        let (max_poll, reset, isolation, rack) = reader.settings();
        let reader_settings = (max_poll, reset, isolation, rack.map(str::to_owned));
        let (cmd_tx, cmd_rx) = mpsc::unbounded_channel();
        let (step_tx, step_rx) = mpsc::unbounded_channel();
        let epoch = Instant::now();
        let next_auto_commit = epoch + config.auto_commit_interval;
        let reader = Arc::new(reader);
        let shared = Arc::new(Shared::new(
            config,
            transport,
            reader_settings,
            Arc::clone(&reader),
            cmd_tx,
            epoch,
        ));
        let keep_alive = shared
            .config
            .heartbeat_interval
            .min(shared.config.max_poll_interval / 2)
            .max(Duration::from_millis(1));
        let push = crate::telemetry::ClientPush::start(
            push,
            &shared.transport,
            telemetry::source(&shared),
            Vec::new(),
        );
        let core = member::Member::new(Arc::clone(&shared), cmd_rx, step_tx);
        let task = match shared.config.group_protocol {
            GroupProtocol::Classic => handle.spawn(classic::run(core)),
            GroupProtocol::Consumer => handle.spawn(consumer::run(core, false)),
            GroupProtocol::Auto => handle.spawn(consumer::run(core, true)),
        };
        Ok(GroupReader {
            shared,
            reader,
            steps: step_rx,
            applying: None,
            current: None,
            refill: crate::ops::otel::RefillSpan::default(),
            listener,
            next_auto_commit,
            auto_commit_timer: Box::pin(tokio::time::sleep_until(next_auto_commit)),
            keep_alive_timer: Box::pin(tokio::time::sleep_until(epoch)),
            keep_alive,
            task: Some(task),
            ended: false,
            stopped: None,
            push,
        })
    }

    /// A handle for committing from a callback or another task.
    pub fn handle(&self) -> GroupHandle {
        GroupHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The group id.
    pub fn group_id(&self) -> &str {
        &self.shared.config.group_id
    }

    /// The partitions the member owns now (the coordinator's latest assignment, less what was
    /// revoked), sorted.
    pub fn assignment(&self) -> Vec<(String, i32)> {
        lock(&self.shared.view).assignment.clone()
    }

    /// The member as a transaction's offsets name it (Java `KafkaConsumer.groupMetadata`,
    /// KIP-447): the group id, the generation (or KIP-848 member epoch) and member id of the
    /// last join (-1 and empty before the first), and the static instance id, for
    /// [`crate::Writer::send_offsets_to_transaction`].
    pub fn group_metadata(&self) -> crate::ops::offsets::ConsumerGroupMetadata {
        let v = lock(&self.shared.view);
        let generation = if v.member_id.is_empty() {
            -1
        } else {
            v.generation
        };
        crate::ops::offsets::ConsumerGroupMetadata::new(self.group_id()).with_member(
            generation,
            v.member_id.clone(),
            self.shared.config.group_instance_id.clone(),
        )
    }

    /// `(require_stable_offsets, auto_offset_reset)`: how the transactional session
    /// ([`crate::transact`]) reads committed offsets when it rewinds.
    pub(crate) fn offset_settings(&self) -> (bool, AutoOffsetReset) {
        (
            self.shared.config.require_stable_offsets,
            self.shared.reader_settings.1,
        )
    }

    /// The transport the member runs on.
    pub(crate) fn transport(&self) -> &Transport {
        &self.shared.transport
    }

    /// Moves owned partitions back to `starts` (their committed offsets, after a
    /// transaction aborted: [`crate::transact`]) and forgets what was consumed of them. No
    /// record fetched before is handed out for them afterwards ([`Reader::seek`]); a
    /// partition no longer assigned is skipped.
    pub(crate) fn rewind(&mut self, starts: Vec<(String, i32, commit::Start)>) {
        self.current = None;
        self.shared.set_streamed(None);
        let owned = self.reader.assignment();
        for (t, p, to) in starts {
            let to = match to {
                Ok(to) => to,
                Err(e) => {
                    if owned.iter().any(|(ot, op)| *ot == t && *op == p)
                        && let Err(e) = self.reader.assign_failed(&t, p, e)
                    {
                        tracing::debug!(topic = %t, partition = p, error = %e, "rewind skipped");
                    }
                    continue;
                }
            };
            if let Err(e) = self.reader.seek(&t, p, to) {
                tracing::debug!(topic = %t, partition = p, error = %e, "rewind skipped");
            }
        }
    }

    /// Moves an owned partition to `to` (Java `KafkaConsumer.seek`, librdkafka
    /// `rd_kafka_seek`): a plain offset (`member.seek("t", 0, 42)`) or any [`StartOffset`]
    /// (`Earliest` / `Latest`: Java `seekToBeginning` / `seekToEnd`; `Timestamp`; `AtEpoch`:
    /// KIP-320). No record fetched before is handed out for it afterwards, and a partition
    /// stopped by an error (a batch that does not decode, a record over
    /// `max_partition_fetch_bytes`, a refusal no retry fixes) is fetched again, so this is the
    /// way past such a record. What the next commit sends for it is `to` for
    /// [`StartOffset::At`] / [`StartOffset::AtEpoch`], else the offset the reset finds
    /// (nothing until it is found). A paused partition stays paused. A rebalance that moves
    /// the partition later starts the next owner at the committed offset, as ever.
    ///
    /// # Errors
    ///
    /// [`GroupError::PartitionNotAssigned`] when the member does not own the partition now
    /// (nothing changed). A new member owns nothing until its first assignment, which
    /// [`next`](Self::next) drives: seek once [`assignment`](Self::assignment) lists the
    /// partition, or in [`RebalanceListener::on_partitions_assigned`], as Java's `seek` needs
    /// the partition assigned.
    #[doc(
        alias = "seek_to_beginning",
        alias = "seek_to_end",
        alias = "rd_kafka_seek"
    )]
    pub fn seek(&mut self, topic: &str, partition: i32, to: impl Into<StartOffset>) -> Result<()> {
        self.shared.owned(topic, partition)?;
        if self
            .current
            .as_ref()
            .is_some_and(|c| c.is_of(topic, partition))
        {
            self.current = None;
            self.shared.set_streamed(None);
        }
        self.reader.seek(topic, partition, to.into())
    }

    /// Stops fetching these owned partitions and handing out their records until
    /// [`GroupReader::resume`] (Java `KafkaConsumer.pause`, librdkafka
    /// `rd_kafka_pause_partitions`): the member keeps them across heartbeats and commits (a
    /// pause is not a rebalance), records already buffered stay buffered, and the partition
    /// answer the `Stream` is handing out stops at its next record. Pausing a paused partition
    /// does nothing. As in Java, a partition revoked (or lost) in a rebalance loses its pause:
    /// if it is assigned again it is fetched; a partition the member keeps through a
    /// cooperative or KIP-848 rebalance stays paused (an eager rebalance revokes everything,
    /// so nothing stays paused).
    ///
    /// # Errors
    ///
    /// [`GroupError::PartitionNotAssigned`] naming the first partition the member does not
    /// own; then none is paused.
    pub fn pause<I, T>(&mut self, partitions: I) -> Result<()>
    where
        I: IntoIterator<Item = (T, i32)>,
        T: AsRef<str>,
    {
        let parts = self.owned_parts(partitions)?;
        if self
            .current
            .as_ref()
            .is_some_and(|c| parts.iter().any(|(t, p)| c.is_of(t.as_ref(), *p)))
        {
            // The rest of that answer stays unread: the position is after the last record
            // yielded, so resuming fetches from there.
            if let Some(at) = lock(&self.shared.streamed)
                .as_ref()
                .map(|s| (s.key.clone(), s.at))
                && let Err(e) = self.reader.seek(&at.0.0, at.0.1, StartOffset::from(at.1))
            {
                tracing::debug!(error = %e, "pause: rewinding the streamed answer");
            }
            self.current = None;
            self.shared.set_streamed(None);
        }
        self.reader.pause(parts);
        Ok(())
    }

    /// `partitions` collected, when the member owns every one of them (else the typed
    /// refusal naming the first it does not own).
    fn owned_parts<I, T>(&self, partitions: I) -> Result<Vec<(T, i32)>>
    where
        I: IntoIterator<Item = (T, i32)>,
        T: AsRef<str>,
    {
        let parts: Vec<(T, i32)> = partitions.into_iter().collect();
        for (t, p) in &parts {
            self.shared.owned(t.as_ref(), *p)?;
        }
        Ok(parts)
    }

    /// Fetches and hands out these paused partitions again (Java `KafkaConsumer.resume`,
    /// librdkafka `rd_kafka_resume_partitions`). Resuming a partition that is not paused does
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`GroupError::PartitionNotAssigned`] naming the first partition the member does not
    /// own; then none is resumed.
    pub fn resume<I, T>(&mut self, partitions: I) -> Result<()>
    where
        I: IntoIterator<Item = (T, i32)>,
        T: AsRef<str>,
    {
        let parts = self.owned_parts(partitions)?;
        self.reader.resume(parts);
        Ok(())
    }

    /// The paused partitions, sorted (Java `KafkaConsumer.paused`).
    pub fn paused(&self) -> Vec<(String, i32)> {
        self.reader.paused()
    }

    /// Stores `record`'s offset + 1, with its leader epoch, as what the next commit sends for
    /// its partition (librdkafka `rd_kafka_offset_store` / rust-rdkafka
    /// `store_offset_from_message`): with
    /// [`GroupReaderBuilder::enable_auto_offset_store`] off, call it once the record is
    /// processed, and auto-commit (or [`GroupReader::commit`]) commits only what was
    /// processed, never a record handed out but not finished (at-least-once).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `enable_auto_offset_store` is on (the position is
    /// stored by itself; librdkafka's `__INVALID_ARG`), or for an offset that cannot be
    /// stored (negative, or `i64::MAX`); [`GroupError::PartitionNotAssigned`] when the member
    /// does not own the partition now (revoked since the record was handed out).
    #[doc(alias = "rd_kafka_offset_store", alias = "store_offset_from_message")]
    pub fn store_offset(&self, record: &ConsumerRecord) -> Result<()> {
        let next = next_offset(record)?;
        let mut om = OffsetAndMetadata::new(next);
        om.leader_epoch = record.leader_epoch;
        self.store_offsets(&[(&*record.topic, record.partition, om)])
    }

    /// Stores these offsets (`(topic, partition, offset)`: the next record to read, as
    /// [`GroupReader::commit_offsets`] takes them) as what the next commit sends (librdkafka
    /// `rd_kafka_offsets_store`), replacing what was stored for each partition. See
    /// [`GroupReader::store_offset`].
    ///
    /// # Errors
    ///
    /// As [`GroupReader::store_offset`], and [`Error::InvalidArgument`] for a partition given
    /// twice; on any error nothing is stored.
    #[doc(alias = "rd_kafka_offsets_store")]
    pub fn store_offsets<S: AsRef<str>>(
        &self,
        offsets: &[(S, i32, OffsetAndMetadata)],
    ) -> Result<()> {
        if self.shared.config.enable_auto_offset_store {
            return Err(Error::InvalidArgument(
                "store_offset needs enable_auto_offset_store(false) (enable.auto.offset.store=false): with it on, the position is stored as records are handed out".into(),
            ));
        }
        let offsets = owned_offsets(offsets)?;
        for (t, p, _) in &offsets {
            self.shared.owned(t, *p)?;
        }
        let mut stored = lock(&self.shared.stored);
        for (t, p, om) in offsets {
            stored.insert((t, p), Position::new(om.offset, om.leader_epoch));
        }
        Ok(())
    }

    /// Commits `record`'s offset + 1 with its leader epoch (KIP-320) and waits for the answer:
    /// the offset of the next record to read, which is what a commit names (Java
    /// `commitSync(Map.of(tp, new OffsetAndMetadata(record.offset() + 1,
    /// record.leaderEpoch(), "")))`, librdkafka `rd_kafka_commit_message`). Only that
    /// partition is committed.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an offset that cannot be committed (negative, or
    /// `i64::MAX`); otherwise as [`GroupReader::commit`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the commit going; its outcome is lost.
    #[doc(alias = "rd_kafka_commit_message", alias = "commit_message")]
    pub async fn commit_record(&self, record: &ConsumerRecord) -> Result<()> {
        self.handle().commit_record(record).await
    }

    /// Reads these topics from now on (Java `KafkaConsumer.subscribe(Collection)`, librdkafka
    /// `rd_kafka_subscribe`), replacing the subscription the member was built with or last
    /// given: the member rejoins the group with it (classic: a JoinGroup, with the revocation
    /// the assignor's protocol asks for; KIP-848: the next ConsumerGroupHeartbeat names the
    /// topics at once and the coordinator reassigns). The same subscription again does
    /// nothing. After [`GroupReader::unsubscribe`], the member joins the group again.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for no topic or an empty name; [`GroupError::Closed`] once
    /// the member task ended.
    pub fn subscribe<I, S>(&mut self, topics: I) -> Result<()>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let t = config::topic_list(topics);
        if t.is_empty() || t.iter().any(String::is_empty) {
            return Err(Error::InvalidArgument(
                "subscribe: at least one topic, and no empty name".into(),
            ));
        }
        self.resubscribe(Some(Subscription::Topics(t)))
    }

    /// Reads the topics matching `pattern` from now on (Java `subscribe(Pattern)`), replacing
    /// the subscription; as [`GroupReader::subscribe`].
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an invalid pattern; [`GroupError::Closed`] once the member task
    /// ended.
    pub fn subscribe_pattern(&mut self, pattern: impl Into<String>) -> Result<()> {
        let pattern = pattern.into();
        Subscription::compile(&pattern)?;
        self.resubscribe(Some(Subscription::Pattern(pattern)))
    }

    /// Stops reading every topic (Java `KafkaConsumer.unsubscribe`, librdkafka
    /// `rd_kafka_unsubscribe`): inside the next poll the owned partitions are revoked (their
    /// consumed offsets committed under auto-commit, then the revoked callback), the member
    /// leaves the group (LeaveGroup, or a KIP-848 leave heartbeat; a static member stays until
    /// its session times out, as on close) and then owns nothing and gets no record until
    /// [`GroupReader::subscribe`] or [`GroupReader::subscribe_pattern`], which joins again.
    ///
    /// # Errors
    ///
    /// [`GroupError::Closed`] once the member task ended.
    pub fn unsubscribe(&mut self) -> Result<()> {
        self.resubscribe(None)
    }

    /// What the member reads now: the topic names, or the pattern as one entry; empty when
    /// unsubscribed (Java `KafkaConsumer.subscription`, which lists a pattern's matches).
    pub fn subscription(&self) -> Vec<String> {
        match self.shared.subscription() {
            Some(Subscription::Topics(t)) => t,
            Some(Subscription::Pattern(p)) => vec![p],
            None => Vec::new(),
        }
    }

    fn resubscribe(&mut self, to: Option<Subscription>) -> Result<()> {
        {
            let mut sub = lock(&self.shared.subscription);
            if *sub == to {
                return Ok(());
            }
            *sub = to;
        }
        self.shared
            .commands
            .send(Command::Resubscribe)
            .map_err(|_| Error::Group(GroupError::Closed))
    }

    /// The next record, or `None` once the member is closed: the `Stream`'s next item without
    /// importing a stream trait (`while let Some(r) = member.next().await`), so no helper
    /// crate is needed; with `futures::StreamExt` in scope the two are the same.
    ///
    /// # Errors
    ///
    /// As the `Stream` (see its `poll_next`): each error is handed out once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a record is taken only when the future completes.
    ///
    /// # Tracing
    ///
    /// As the `Stream`: one `poll {topic}` span per refill of the records it hands out one at
    /// a time (a partition answer), not one per call.
    #[doc(alias = "recv", alias = "poll")]
    pub async fn next(&mut self) -> Option<Result<ConsumerRecord>> {
        std::future::poll_fn(|cx| futures_core::Stream::poll_next(Pin::new(&mut *self), cx)).await
    }

    /// The consumed position of an owned partition (what `commit` sends): the Reader's
    /// position (after the last batch handed out, markers and aborted batches passed, else
    /// the committed or reset offset it started at), or, in the answer the `Stream` is
    /// handing out, after the last record it yielded.
    pub fn position(&self, topic: &str, partition: i32) -> Option<Position> {
        self.shared.position(topic, partition)
    }

    /// How far an owned partition is behind its end (see [`Reader::lag`]).
    pub fn lag(&self, topic: &str, partition: i32) -> Option<i64> {
        self.reader.lag(topic, partition)
    }

    /// The lag of every owned partition, sorted: `(topic, partition, lag)`, the lag `None`
    /// until a fetch answer gave the partition's end (see [`Reader::lag`]).
    pub fn lags(&self) -> Vec<(String, i32, Option<i64>)> {
        self.assignment()
            .into_iter()
            .map(|(t, p)| {
                let lag = self.reader.lag(&t, p);
                (t, p, lag)
            })
            .collect()
    }

    /// The member's state and counters.
    pub fn stats(&self) -> GroupStats {
        self.shared.stats()
    }

    /// The Reader's statistics (Fetch requests per broker, bytes, per-partition lag).
    pub fn reader_stats(&self) -> crate::reader::ReaderStats {
        self.reader.stats()
    }

    /// The next records: every buffered partition answer until `max_poll_records` records
    /// (see [`Reader::next_batch`]); carries out rebalance steps and auto-commit first. Their
    /// positions count as consumed at once (what the next commit sends).
    ///
    /// # Errors
    ///
    /// [`Error::Group`]: a typed group error (`MaxPollIntervalExceeded`, a protocol
    /// fallback), reported once; a fatal one (fenced, a fatal refusal) on this call and every
    /// later one, as librdkafka's consumer poll answers every call after a fatal error with
    /// it (the member is stopped and owns nothing: close it); [`GroupError::Closed`] once
    /// closed; the Reader's partition errors ([`Error::Reader`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: records are taken only when the future completes; a rebalance step left
    /// half done is finished by the next call. For `max_poll_interval`, a dropped call polled
    /// until it was dropped.
    pub async fn next_batch(&mut self) -> Result<Vec<PartitionRecords>> {
        let span = crate::ops::otel::poll_span(Some(&self.shared.config.group_id));
        let max = self.shared.reader_settings.0;
        let out = std::future::poll_fn(|cx| self.poll_batch(cx, max)).await;
        let out = crate::reader::poll_ended(&span, Some(&self.shared.config.group_id), out)?;
        self.reader
            .note_delivered(out.iter().map(|p| p.records.len()).sum());
        Ok(out)
    }

    fn poll_batch(
        &mut self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<Result<Vec<PartitionRecords>>> {
        if let Some(e) = ready!(self.poll_steps(cx)) {
            self.shared.note_poll();
            return Poll::Ready(Err(e));
        }
        self.maybe_auto_commit();
        self.shared.note_poll();
        match self.reader.poll_batch(cx, max) {
            Poll::Pending => {
                self.arm_auto_commit(cx);
                self.arm_keep_alive(cx);
                Poll::Pending
            }
            Poll::Ready(r) => Poll::Ready(r.map_err(closed_as_group)),
        }
    }

    /// Carries out queued steps. `Ready(Some(e))`: an error to report; `Ready(None)`: nothing
    /// left to do; `Pending`: a step is still being carried out.
    fn poll_steps(&mut self, cx: &mut Context<'_>) -> Poll<Option<Error>> {
        loop {
            if let Some(fut) = &mut self.applying {
                ready!(fut.as_mut().poll(cx));
                self.applying = None;
            }
            if self.ended {
                return Poll::Ready(Some(Error::Group(GroupError::Closed)));
            }
            if let Some(g) = &self.stopped {
                return Poll::Ready(Some(Error::Group(g.clone())));
            }
            match self.steps.poll_recv(cx) {
                Poll::Ready(Some(Step::Report(e))) => return Poll::Ready(Some(e)),
                Poll::Ready(Some(Step::Stop(e, g))) => {
                    // No record of a partition the member no longer owns is handed out.
                    self.current = None;
                    self.shared.set_streamed(None);
                    self.reader.unassign_all();
                    lock(&self.shared.stored).clear();
                    self.stopped = Some(g);
                    return Poll::Ready(Some(e));
                }
                Poll::Ready(Some(step)) => {
                    self.applying = Some(self.apply(step));
                }
                Poll::Ready(None) => {
                    self.ended = true;
                    return Poll::Ready(Some(Error::Group(GroupError::Closed)));
                }
                Poll::Pending => return Poll::Ready(None),
            }
        }
    }

    /// The future that carries out `step`.
    fn apply(&mut self, step: Step) -> ListenerFuture {
        let shared = Arc::clone(&self.shared);
        let reader = Arc::clone(&self.reader);
        let listener = self.listener.clone();
        let handle = self.handle();
        match step {
            Step::Assign(parts) => {
                let list: Vec<(String, i32)> =
                    parts.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
                let mut starts = Vec::with_capacity(parts.len());
                for (t, p, start) in parts {
                    match start {
                        Ok(s) => starts.push((t, p, s)),
                        Err(e) => {
                            if let Err(e) = reader.assign_failed(&t, p, e) {
                                tracing::warn!(error = %e, "assigning partitions to the Reader");
                            }
                        }
                    }
                }
                if let Err(e) = reader.assign(starts) {
                    tracing::warn!(error = %e, "assigning partitions to the Reader");
                }
                Box::pin(async move {
                    if let Some(l) = listener {
                        l.on_partitions_assigned(handle, list).await;
                    }
                })
            }
            Step::Revoke { parts, lost, ack } => Box::pin(async move {
                if !lost && shared.config.enable_auto_commit {
                    let offsets = shared.consumed_offsets(Some(&parts));
                    if !offsets.is_empty() {
                        let _ = CommitFuture {
                            rx: shared.send_commit(offsets, true),
                        }
                        .await;
                    }
                }
                if let Some(l) = listener {
                    if lost {
                        l.on_partitions_lost(handle, parts.clone()).await;
                    } else {
                        l.on_partitions_revoked(handle, parts.clone()).await;
                    }
                }
                reader.unassign(parts.iter().map(|(t, p)| (t.as_str(), *p)));
                shared.forget_stored(&parts);
                let _ = ack.send(());
            }),
            Step::Report(e) | Step::Stop(e, _) => {
                // Handled by poll_steps; kept here so the match is whole.
                tracing::debug!(error = %e, "report step applied as a no-op");
                Box::pin(async {})
            }
        }
    }

    /// A poll about to wait: have it woken when the next automatic commit is due, so
    /// `maybe_auto_commit` runs then even if no record comes.
    fn arm_auto_commit(&mut self, cx: &mut Context<'_>) {
        if !self.shared.config.enable_auto_commit {
            return;
        }
        let timer = self.auto_commit_timer.as_mut();
        if timer.deadline() != self.next_auto_commit {
            timer.reset(self.next_auto_commit);
        }
        if self.auto_commit_timer.as_mut().poll(cx).is_ready() {
            // Due already (the interval passed during this poll): wake at once.
            cx.waker().wake_by_ref();
        }
    }

    /// A poll about to wait: have it woken within `keep_alive`, so it notes the poll again
    /// while the application still awaits it (see `keep_alive_timer`).
    fn arm_keep_alive(&mut self, cx: &mut Context<'_>) {
        let now = Instant::now();
        let mut timer = self.keep_alive_timer.as_mut();
        if timer.deadline() <= now {
            timer.as_mut().reset(now + self.keep_alive);
        }
        if timer.poll(cx).is_ready() {
            cx.waker().wake_by_ref();
        }
    }

    /// Sends the automatic commit when it is due (Java commits inside `poll`, too).
    fn maybe_auto_commit(&mut self) {
        if !self.shared.config.enable_auto_commit {
            return;
        }
        let now = Instant::now();
        if now < self.next_auto_commit {
            return;
        }
        self.next_auto_commit = now + self.shared.config.auto_commit_interval;
        let offsets = self.shared.consumed_offsets(None);
        if !offsets.is_empty() {
            drop(self.shared.send_commit(offsets, true));
        }
    }

    /// Commits the consumed position of every owned partition (after the last record handed
    /// out, with the leader epoch of that record, KIP-320; past batches with nothing to hand
    /// out, such as transaction markers; for a partition that got no record, the committed or
    /// reset offset it started at) and waits for the answer (Java `commitSync`). Partitions
    /// without a position yet (a reset not answered) are not sent.
    ///
    /// # Errors
    ///
    /// [`GroupError::CommitFailed`] when the coordinator refused it for the member's
    /// generation (`ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID`, `STALE_MEMBER_EPOCH`) or the
    /// partitions were revoked before it could be retried after a rebalance; the positions
    /// are kept, so the next commit carries them. A commit that meets `REBALANCE_IN_PROGRESS`
    /// or a moving coordinator is retried (until the transport's default API timeout, then
    /// `CommitFailed` with `REQUEST_TIMED_OUT`), without the partitions a newer commit names
    /// (it never moves a committed offset back; with none left it succeeds). Commits of a
    /// partition reach the coordinator in the order they were asked: one waits while an
    /// earlier commit of the same partition is in flight. [`GroupError::Closed`] once closed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the commit going; its outcome is lost.
    pub async fn commit(&mut self) -> Result<()> {
        self.commit_async().await
    }

    /// Starts the same commit as [`GroupReader::commit`] and returns at once (Java
    /// `commitAsync`): await the [`CommitFuture`] for the outcome, or drop it.
    pub fn commit_async(&mut self) -> CommitFuture {
        let offsets = self.shared.consumed_offsets(None);
        CommitFuture {
            rx: self.shared.send_commit(offsets, false),
        }
    }

    /// Commits these offsets (`(topic, partition, offset)`: the next record to read, usually
    /// a record's offset + 1 with its leader epoch) and waits for the answer (Java
    /// `commitSync(Map)`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a partition given twice or a negative offset (nothing
    /// sent); otherwise as [`GroupReader::commit`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the commit going; its outcome is lost.
    pub async fn commit_offsets<S: AsRef<str>>(
        &self,
        offsets: &[(S, i32, OffsetAndMetadata)],
    ) -> Result<()> {
        self.handle().commit_offsets(offsets).await
    }

    /// Leaves the group: commits what was consumed (auto-commit), runs the revoked callback
    /// for every owned partition, sends LeaveGroup (dynamic members; a static member stays in
    /// the group until its session times out, KIP-345), and stops the Reader. All of it within
    /// [`GroupReaderBuilder::close_timeout`] (30 s by default, as Java's `close()`): past it
    /// the member stops without waiting further for the commit, the callback or the leave.
    ///
    /// With metrics push on ([`GroupReaderBuilder::enable_metrics_push`]) and a subscription
    /// that asks for metrics, the last KIP-714 push (`Terminating`) goes out in what is left
    /// of the close timeout.
    ///
    /// Only `close` commits (auto-commit) and runs the callback: dropping the member leaves
    /// without either, and waits for the leave only on a multi-threaded runtime (at most 5 s;
    /// see [`GroupReader`]'s `Drop`).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops waiting; the member still leaves in the background.
    pub async fn close(self) {
        self.close_with(CloseOptions::default()).await;
    }

    /// [`GroupReader::close`] with options (KIP-1092, Java `close(CloseOptions)`): whether
    /// the member leaves the group or stays in it until its session times out
    /// ([`GroupMembershipOperation`]: by default dynamic members leave and static ones stay),
    /// and the longest the close takes (default: [`GroupReaderBuilder::close_timeout`]). The
    /// closing auto-commit and the revoked callback run either way.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future stops waiting; the member still leaves (or not, as asked) in the
    /// background.
    pub async fn close_with(mut self, options: CloseOptions) {
        let timeout = options.timeout.unwrap_or(self.shared.config.close_timeout);
        let deadline = Instant::now() + timeout;
        let op = options.group_membership_operation;
        if tokio::time::timeout_at(deadline, self.close_steps(deadline, op))
            .await
            .is_err()
        {
            tracing::warn!(group = %self.shared.config.group_id, ?timeout, "close timed out; the member stops without waiting further");
        }
        // KIP-714's terminating push, in what is left of the timeout.
        self.push
            .close(deadline.saturating_duration_since(Instant::now()))
            .await;
        self.reader.close();
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }

    /// What `close` waits for: the pending step, the auto-commit, the revoked callback and
    /// the member task's LeaveGroup (bounded by `deadline`, as the whole is by `close`).
    async fn close_steps(&mut self, deadline: Instant, op: GroupMembershipOperation) {
        // Finish a step under way, so the callbacks keep their order.
        std::future::poll_fn(|cx| {
            loop {
                match self.poll_steps(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(_)) if !self.ended && self.stopped.is_none() => continue,
                    Poll::Ready(_) => return Poll::Ready(()),
                }
            }
        })
        .await;
        let owned = self.assignment();
        if !owned.is_empty() && !self.ended {
            if self.shared.config.enable_auto_commit {
                let offsets = self.shared.consumed_offsets(None);
                if !offsets.is_empty() {
                    let _ = CommitFuture {
                        rx: self.shared.send_commit(offsets, true),
                    }
                    .await;
                }
            }
            if let Some(l) = self.listener.clone() {
                l.on_partitions_revoked(self.handle(), owned).await;
            }
        }
        let (tx, rx) = oneshot::channel();
        if self.shared.commands.send(Command::Close(tx, op)).is_ok() {
            let _ = tokio::time::timeout_at(deadline, rx).await;
        }
    }
}

/// A closed Reader inside a group member means the member is closed.
fn closed_as_group(e: Error) -> Error {
    match e {
        Error::Reader(ReaderError::Closed) => Error::Group(GroupError::Closed),
        other => other,
    }
}

/// The longest a drop waits for the member to leave (the close timeout, when shorter): a
/// LeaveGroup (or KIP-848's leaving heartbeat) is one round trip to the coordinator, which a
/// healthy one answers in milliseconds; a drop that blocks the dropping thread for longer
/// would be a surprise of its own.
const DROP_LEAVE_WAIT: Duration = Duration::from_secs(5);

/// Dropping a member that was not closed stops it the way [`GroupMembershipOperation::Default`]
/// asks, without the closing auto-commit and without the revoked callback (those need the
/// application's future, which a drop cannot await): a dynamic member leaves the group
/// (classic: LeaveGroup; KIP-848: a heartbeat with epoch -1), a static one stays until its
/// session times out (classic: nothing is sent; KIP-848: a heartbeat with epoch -2).
///
/// On a multi-threaded tokio runtime the drop waits for that, at most the shorter of
/// [`GroupReaderBuilder::close_timeout`] and 5 s (`tokio::task::block_in_place`): a member
/// dropped at the end of `#[tokio::main] async fn main` has left before the runtime shuts down,
/// so the next run of the program is not held for the old member's session timeout (as
/// rust-rdkafka closes a consumer when it is dropped). On a current-thread runtime, or outside
/// a runtime, a drop cannot block: it asks the member task to leave and returns at once, with a
/// warning, and the member leaves only if the runtime keeps running; otherwise it stays in the
/// group until its session times out. The same when the runtime drops the member as it shuts
/// down (a task holding it is dropped): the member task will not run again. [`GroupReader::close`] is the way to stop a member that
/// commits and runs callbacks, on any runtime.
impl Drop for GroupReader {
    fn drop(&mut self) {
        if self.task.is_some() {
            let (tx, rx) = oneshot::channel();
            if self
                .shared
                .commands
                .send(Command::Close(tx, GroupMembershipOperation::Default))
                .is_ok()
            {
                self.wait_for_leave_on_drop(rx);
            }
        }
        self.reader.close();
    }
}

impl GroupReader {
    /// Blocks until the member task answers the drop's `Close` (it left, or stayed as a static
    /// member does), bounded by [`DROP_LEAVE_WAIT`], where blocking is allowed and can be
    /// answered: on a multi-threaded runtime that is not shutting down, whose other workers
    /// (or, from a `block_on` thread, the workers) run the member task, so the wait never
    /// needs the dropping thread. The bound is kept with the thread's own clock
    /// ([`wait_on_thread`]), not the runtime's timer, which no worker may be driving.
    ///
    /// Never panics: `block_in_place` panics on a current-thread runtime (checked first) and
    /// inside a current-thread runtime that entered a multi-threaded one's context (not
    /// detectable beforehand: caught), and a drop during a panic does not wait at all. Never
    /// waits for good: a member dropped by the runtime shutting down (a task that holds it
    /// dropped by `Runtime::drop`) would wait for a member task that no worker will run again,
    /// so the shutdown is checked first ([`shutting_down`]).
    fn wait_for_leave_on_drop(&self, rx: oneshot::Receiver<()>) {
        let group = &self.shared.config.group_id;
        let handle = match Handle::try_current() {
            Ok(h)
                if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
                    && !std::thread::panicking() =>
            {
                h
            }
            _ => {
                tracing::warn!(
                    group = %group,
                    "GroupReader dropped without close() where the drop cannot wait (not on a \
                     multi-threaded tokio runtime, or while panicking): it was asked to leave but \
                     is not waited for; the member may stay in the group until its session times \
                     out"
                );
                return;
            }
        };
        if shutting_down(&handle) {
            tracing::warn!(
                group = %group,
                "GroupReader dropped without close() by its runtime shutting down: the member \
                 task does not run again and the member may stay in the group until its session \
                 times out"
            );
            return;
        }
        let bound = self.shared.config.close_timeout.min(DROP_LEAVE_WAIT);
        let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            tokio::task::block_in_place(|| wait_on_thread(rx, bound))
        }));
        match waited {
            Ok(true) => {
                tracing::debug!(group = %group, "GroupReader dropped without close(): stopped without a commit");
            }
            Ok(false) => tracing::warn!(
                group = %group,
                ?bound,
                "GroupReader dropped without close(): the member did not finish leaving in time; \
                 it may stay in the group until its session times out"
            ),
            Err(_) => tracing::warn!(
                group = %group,
                "GroupReader dropped without close() where the thread cannot block: it was asked \
                 to leave but is not waited for; the member may stay in the group until its \
                 session times out"
            ),
        }
    }
}

/// Whether `handle`'s runtime is shutting down: a task spawned then is cancelled at once
/// (tokio closes the runtime's task list before it drops the tasks), so a task that can only
/// end by being cancelled and has already ended says so. tokio has no public query for it.
fn shutting_down(handle: &Handle) -> bool {
    let probe = handle.spawn(std::future::pending::<()>());
    let closed = probe.is_finished();
    probe.abort();
    closed
}

/// Waits for `rx` on this thread, parking it, for at most `bound` of the thread's own clock:
/// `true` when `rx` resolved (answered, or its sender dropped with the member task).
fn wait_on_thread(mut rx: oneshot::Receiver<()>, bound: Duration) -> bool {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let deadline = std::time::Instant::now() + bound;
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if Pin::new(&mut rx).poll(&mut cx).is_ready() {
            return true;
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::park_timeout(deadline - now);
    }
}

impl futures_core::Stream for GroupReader {
    type Item = Result<ConsumerRecord>;

    /// The next record. Rebalance steps (assign, revoke, lost, their callbacks) and
    /// auto-commit happen first; records of a partition revoked since they were fetched are
    /// never yielded (checked per record). Errors are yielded once; the stream ends (`None`)
    /// once the member is closed, and right after a fatal error (fenced, a fatal refusal:
    /// the member stopped and owns nothing), which `next_batch` keeps returning.
    ///
    /// Tracing: one `poll {topic}` span per refill (a partition answer taken from the
    /// Reader), from the first poll that finds nothing to yield to the answer, not one per
    /// record; with `process_spans(true)` each record carries its `process {topic}` span.
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.stopped.is_some() {
            // The fatal error was yielded when the member stopped.
            return Poll::Ready(None);
        }
        loop {
            match this.poll_steps(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Error::Group(GroupError::Closed))) => return Poll::Ready(None),
                Poll::Ready(Some(e)) => {
                    this.shared.note_poll();
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {}
            }
            if let Some(cur) = &mut this.current {
                if cur.barrier.holds()
                    && let Some(r) = cur.next()
                {
                    if let Some(s) = lock(&this.shared.streamed).as_mut() {
                        s.at = Position::new(r.offset + 1, r.leader_epoch);
                    }
                    this.reader.note_delivered(1);
                    return Poll::Ready(Some(Ok(r)));
                }
                // Every record yielded (the Reader's position covers them), or stale.
                this.current = None;
                this.shared.set_streamed(None);
            }
            this.maybe_auto_commit();
            this.shared.note_poll();
            // One poll span per refill of `current`, not per record.
            this.refill.start(Some(&this.shared.config.group_id));
            match this.reader.poll_batch(cx, 1) {
                Poll::Pending => {
                    this.arm_auto_commit(cx);
                    this.arm_keep_alive(cx);
                    return Poll::Pending;
                }
                Poll::Ready(Err(Error::Reader(ReaderError::Closed))) => {
                    this.refill.failed(None);
                    return Poll::Ready(None);
                }
                Poll::Ready(Err(e)) => {
                    this.refill.failed(e.error_code());
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(Ok(parts)) => {
                    this.refill.done(
                        parts
                            .iter()
                            .map(|p| (&*p.topic, p.partition, p.records.len())),
                    );
                    let group = Some(this.shared.config.group_id.as_str());
                    crate::reader::meter_streamed(&parts, group);
                    if let Some(p) = parts.into_iter().next()
                        && let Some(first) = p.records.first()
                    {
                        // The batch's epoch is at least the last consumed record's, and the
                        // broker holds the first record under it (KIP-320 accepts it).
                        this.shared.set_streamed(Some(Streamed {
                            key: (Arc::clone(&p.topic), p.partition),
                            barrier: p.barrier.clone(),
                            at: Position::new(first.offset, p.leader_epoch(0)),
                        }));
                        this.current = Some(ConsumerRecords::new(p));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: i64) -> ConsumerRecord {
        ConsumerRecord {
            topic: Arc::from("t"),
            partition: 0,
            offset,
            leader_epoch: Some(4),
            timestamp: 0,
            timestamp_type: crate::protocol::records::TimestampType::CreateTime,
            key: None,
            value: None,
            headers: Vec::new(),
            span: Default::default(),
        }
    }

    fn builder() -> GroupReaderBuilder {
        // No I/O before the member task runs; nothing listens here.
        let t = Transport::builder(["127.0.0.1:9"])
            .build()
            .expect("transport");
        GroupReader::builder(t, "g").subscribe(["t"])
    }

    #[test]
    fn the_offset_after_a_record_is_checked() {
        assert_eq!(next_offset(&record(6)).unwrap(), 7);
        assert!(matches!(
            next_offset(&record(i64::MAX)),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            next_offset(&record(-1)),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(StartOffset::from(42), StartOffset::At(42));
        assert_eq!(
            StartOffset::from(Position::new(7, Some(3))),
            StartOffset::AtEpoch {
                offset: 7,
                leader_epoch: 3
            }
        );
        assert_eq!(
            StartOffset::from(Position::new(7, None)),
            StartOffset::At(7)
        );
    }

    #[tokio::test]
    async fn auto_offset_reset_on_the_group_builder_wins_in_either_order() {
        let t = Transport::builder(["127.0.0.1:9"])
            .build()
            .expect("transport");
        let latest = || Reader::builder(t.clone()).auto_offset_reset(AutoOffsetReset::Latest);
        let a = builder()
            .auto_offset_reset(AutoOffsetReset::Earliest)
            .reader(latest())
            .build()
            .unwrap();
        let b = builder()
            .reader(latest())
            .auto_offset_reset(AutoOffsetReset::None)
            .build()
            .unwrap();
        let c = builder().reader(latest()).build().unwrap();
        assert_eq!(a.offset_settings().1, AutoOffsetReset::Earliest);
        assert_eq!(b.offset_settings().1, AutoOffsetReset::None);
        assert_eq!(c.offset_settings().1, AutoOffsetReset::Latest);
    }

    #[tokio::test]
    async fn calls_on_partitions_not_owned_are_refused_typed_and_change_nothing() {
        let mut m = builder().enable_auto_offset_store(false).build().unwrap();
        let not_assigned = |r: Result<()>| {
            matches!(
                r,
                Err(Error::Group(GroupError::PartitionNotAssigned {
                    partition: 0,
                    ..
                }))
            )
        };
        assert!(not_assigned(m.seek("t", 0, 5)));
        assert!(not_assigned(m.pause([("t", 0)])));
        assert!(not_assigned(m.resume([("t", 0)])));
        assert!(not_assigned(m.store_offset(&record(3))));
        assert!(m.paused().is_empty());
        assert!(lock(&m.shared.stored).is_empty());
        assert!(matches!(
            m.store_offsets(&[
                ("t", 0, OffsetAndMetadata::new(1)),
                ("t", 0, OffsetAndMetadata::new(2))
            ]),
            Err(Error::InvalidArgument(_))
        ));
        // With the store on (the default), storing is refused naming the setting.
        let on = builder().build().unwrap();
        assert!(matches!(
            on.store_offset(&record(3)),
            Err(Error::InvalidArgument(m)) if m.contains("enable_auto_offset_store")
        ));
    }

    #[tokio::test]
    async fn subscription_changes_are_checked_and_kept() {
        let mut m = builder().build().unwrap();
        assert_eq!(m.subscription(), vec!["t".to_owned()]);
        assert!(matches!(
            m.subscribe(Vec::<String>::new()),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(m.subscribe([""]), Err(Error::InvalidArgument(_))));
        assert!(matches!(m.subscribe_pattern("("), Err(Error::Config(_))));
        assert_eq!(
            m.subscription(),
            vec!["t".to_owned()],
            "unchanged by refusals"
        );
        m.subscribe(["b", "a", "b"]).unwrap();
        assert_eq!(m.subscription(), vec!["a".to_owned(), "b".to_owned()]);
        m.subscribe_pattern("orders-.*").unwrap();
        assert_eq!(m.subscription(), vec!["orders-.*".to_owned()]);
        m.unsubscribe().unwrap();
        assert!(m.subscription().is_empty());
    }

    /// A drop on a current-thread runtime (where `block_in_place` would panic) and a drop
    /// outside any runtime ask the member task to stop and return at once, without a panic.
    #[test]
    fn a_drop_without_a_multi_threaded_runtime_neither_blocks_nor_panics() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let outside = rt.block_on(async {
            let m = builder().build().unwrap();
            let started = Instant::now();
            drop(m);
            assert!(started.elapsed() < Duration::from_secs(1), "no wait");
            builder().build().unwrap()
        });
        // Outside the runtime's context now.
        drop(outside);
        drop(rt);
    }

    /// On a multi-threaded runtime (one worker: the member task needs the worker the dropping
    /// task gives up), the drop returns once the member task stopped, within the bound.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_drop_on_a_multi_threaded_runtime_waits_for_the_member_to_stop() {
        let m = builder().build().unwrap();
        let shared = m.shared.clone();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Instant::now();
        drop(m);
        assert!(
            started.elapsed() < DROP_LEAVE_WAIT,
            "{:?}",
            started.elapsed()
        );
        assert_eq!(shared.stats().state, "closed", "the member task stopped");
    }

    /// The same from a thread that is not a worker (`Runtime::block_on`, as `#[tokio::main]`
    /// runs `main`), with the runtime dropped right after, as at the end of a program.
    #[test]
    fn a_drop_at_the_end_of_block_on_waits_for_the_member_to_stop() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let shared = rt.block_on(async {
            let m = builder().build().unwrap();
            let shared = m.shared.clone();
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(m);
            shared
        });
        drop(rt);
        assert_eq!(shared.stats().state, "closed", "the member task stopped");
    }

    /// A member owned by a task the runtime drops as it shuts down (a `#[tokio::main]` that
    /// returns while a spawned task holds the member): the member task cannot run any more,
    /// so the drop must not wait for it (it would wait for good: nothing drives the runtime
    /// then), and the runtime's drop returns at once.
    #[test]
    fn a_member_dropped_by_the_runtime_shutting_down_does_not_wait() {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let m = builder().build().unwrap();
                tokio::spawn(async move {
                    let _held = m;
                    std::future::pending::<()>().await;
                });
                tokio::time::sleep(Duration::from_millis(50)).await;
            });
            let started = std::time::Instant::now();
            drop(rt);
            let _ = done_tx.send(started.elapsed());
        });
        let took = done_rx
            .recv_timeout(Duration::from_secs(15))
            .expect("the runtime's drop returned");
        assert!(took < Duration::from_secs(1), "{took:?}");
    }
}
