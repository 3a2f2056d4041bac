//! Consume-transform-produce with exactly-once semantics: [`GroupTransactSession`] ties a
//! consumer group member ([`GroupReader`]) to a transactional [`Writer`] so that the records
//! it reads, what a [`Transform`] makes of them, and the input offsets they advance to are
//! written in one transaction (KIP-98), committed with the member's generation (KIP-447).
//! Java has no such helper (Kafka Streams does this inside its task manager); franz-go's
//! `GroupTransactSession` is the closest, and this one follows its choice: a rebalance
//! aborts the open transaction rather than holding the rebalance up until a commit.
//!
//! One round ([`GroupTransactSession::process_once`]):
//!
//! 1. **recover**: a transaction the previous round left half done (cancelled, failed with
//!    an abortable error or a timeout) is finished first: a commit that timed out is resumed,
//!    anything else is aborted and the member rewinds (step 6).
//! 2. **poll**: [`GroupReader::next_batch`] (input read `read_committed`), waiting at most
//!    until the open transaction is due. Rebalance callbacks run inside this poll: a
//!    revocation (or a loss) of partitions while a transaction is open aborts it there,
//!    before the partitions are handed over, so the next owner never meets an open
//!    transaction of this member on their output (the records already sent get abort
//!    markers; `read_committed` readers skip them).
//! 3. **begin**: the first records of a round with no open transaction begin one.
//! 4. **transform and send**: each record goes through the [`Transform`]; its output records
//!    are handed to the Writer (they belong to the open transaction); the input partition's
//!    next offset (and the leader epoch of its last record, KIP-320) is remembered.
//! 5. **end**: once `commit_every` records are in the transaction or `commit_interval` has
//!    passed since it began, the remembered offsets are added with
//!    [`Writer::send_offsets_to_transaction`] and [`GroupReader::group_metadata`] (generation,
//!    member id, instance id: the group coordinator refuses them from a member fenced by a
//!    rebalance), then [`Writer::commit_transaction`].
//! 6. **rewind** after any abort: every owned partition is moved back to its committed offset
//!    (OffsetFetch with `require_stable`, KIP-447, unless the member turned it off), so the
//!    aborted records are read and transformed again in a later transaction. The duty to
//!    rewind is kept until the rewind has run: one that failed (an error returned) or was
//!    cancelled runs again at the start of the next round, before anything is read.
//!
//! Invariant: an input offset is committed only in the transaction that holds the output of
//! every input record below it (down to the previous committed offset), and only while this
//! member owns the partition in the generation the offsets name. So after any sequence of
//! commits, aborts, rebalances and crashes, the committed output holds each input record's
//! output exactly once. See docs/DESIGN.md ("Consume-transform-produce").

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafkit_protocol::messages::OffsetFetchRequest;
use tokio::time::Instant;

use crate::ErrorCode;
use crate::error::{Error, Result};
use crate::group::{
    GroupHandle, GroupReader, GroupReaderBuilder, ListenerFuture, RebalanceListener,
};
use crate::ops::offsets::{
    CommittedOffsets, ConsumerGroupMetadata, ListGroupOffsets, OffsetAndMetadata,
    offset_fetch_request, offset_fetch_results,
};
use crate::ops::{ResourceResult, unsupported_from};
use crate::reader::{ConsumerRecord, PartitionRecords, StartOffset};
use crate::transport::{ConnKind, CoordinatorType, Transport};
use crate::writer::{ProduceError, ProducerRecord, TransactionError, TransactionPhase, Writer};

/// What a [`GroupTransactSession`] makes of each input record: the output records it pushes
/// onto `out` (none to drop the record, several to fan out). Closures
/// `FnMut(&ConsumerRecord, &mut Vec<ProducerRecord>)` are transforms.
///
/// It runs inside the transaction, so it must be deterministic enough to run again: after an
/// abort the same input records come again, and only the output of the committed run counts.
pub trait Transform {
    /// Pushes the output of `record` onto `out` (empty on entry).
    fn transform(&mut self, record: &ConsumerRecord, out: &mut Vec<ProducerRecord>);
}

impl<F> Transform for F
where
    F: FnMut(&ConsumerRecord, &mut Vec<ProducerRecord>),
{
    fn transform(&mut self, record: &ConsumerRecord, out: &mut Vec<ProducerRecord>) {
        self(record, out)
    }
}

/// How a transaction ended, as [`GroupTransactSession::process_once`] reports it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum TransactionOutcome {
    /// Committed: its output is visible to `read_committed` readers, its input offsets are
    /// the group's committed offsets.
    Committed {
        /// Input records whose output it holds.
        records: u64,
        /// Input partitions whose offsets it committed.
        partitions: usize,
    },
    /// Aborted; the member rewound to the committed offsets, so these input records come
    /// again.
    Aborted {
        /// Input records read in it.
        records: u64,
        /// Why.
        reason: AbortReason,
    },
}

/// Why a [`GroupTransactSession`] aborted a transaction.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AbortReason {
    /// Partitions were revoked or lost in a rebalance while it was open.
    Rebalance,
    /// A record or a request of the transaction failed with an abortable error (e.g. the
    /// group coordinator refused the offsets for the member's generation).
    Error(TransactionError),
    /// The previous round was cancelled (its future dropped) or failed midway, so the
    /// transaction may miss part of the records read.
    Interrupted,
}

/// Counters of a [`GroupTransactSession`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransactStats {
    /// Transactions committed.
    pub committed: u64,
    /// Transactions aborted (every reason).
    pub aborted: u64,
    /// Of those, aborted because of a rebalance.
    pub aborted_by_rebalance: u64,
    /// Input records whose output was committed.
    pub records_committed: u64,
    /// Rewinds to the committed offsets (one after each abort).
    pub rewinds: u64,
}

/// Builds a [`GroupTransactSession`] (see its documentation).
///
/// | setting | default | range | Kafka name |
/// |---|---|---|---|
/// | [`commit_every`](Self::commit_every) | 1000 records | >= 1 | |
/// | [`commit_interval`](Self::commit_interval) | 100 ms | > 0 | Kafka Streams `commit.interval.ms` (its exactly-once default) |
/// | [`timeout`](Self::timeout) | the writer transport's `default_api_timeout` | > 0 | `default.api.timeout.ms` |
#[must_use]
pub struct GroupTransactSessionBuilder {
    group: GroupReaderBuilder,
    writer: Writer,
    commit_every: u64,
    commit_interval: Duration,
    timeout: Duration,
}

impl std::fmt::Debug for GroupTransactSessionBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupTransactSessionBuilder")
            .field("group", &self.group)
            .field("commit_every", &self.commit_every)
            .field("commit_interval", &self.commit_interval)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl GroupTransactSessionBuilder {
    /// Ends the open transaction (with a commit) once it holds this many input records.
    /// Checked after each poll, so one poll's records (up to the Reader's
    /// `max_poll_records`, in whole partition answers) may take it past. Default 1000.
    pub fn commit_every(mut self, records: u64) -> Self {
        self.commit_every = records;
        self
    }

    /// Ends the open transaction (with a commit) once it has been open this long, however
    /// few records it holds (Kafka Streams `commit.interval.ms`). Default 100 ms. A
    /// transaction stays open while it waits for input, so this is also the longest time a
    /// record's output stays invisible to `read_committed` readers once written.
    pub fn commit_interval(mut self, interval: Duration) -> Self {
        self.commit_interval = interval;
        self
    }

    /// The timeout of each transactional call (`send_offsets_to_transaction`,
    /// `commit_transaction`, `abort_transaction`, `init_transactions`) and of reading the
    /// committed offsets on a rewind. Default: the writer transport's
    /// `default_api_timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The session: builds the group member with auto-commit off, `read_committed` input and
    /// the session's rebalance listener (which calls the application's, if one was set on the
    /// [`GroupReaderBuilder`], after its own work). The member joins the group at once; the
    /// writer's transactions are initialized by the first round (unless the application did
    /// it already), and again by the next round when that init timed out or was cancelled
    /// (the writer is left `Initializing`).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a setting out of its range, and the member's
    /// [`GroupReaderBuilder::build`] errors.
    pub fn build(self) -> Result<GroupTransactSession> {
        if self.commit_every == 0 {
            return Err(Error::Config(
                "commit_every must be at least 1 record".into(),
            ));
        }
        if self.commit_interval.is_zero() || self.timeout.is_zero() {
            return Err(Error::Config(
                "commit_interval and timeout must be positive".into(),
            ));
        }
        let shared = Arc::new(Shared {
            writer: self.writer.clone(),
            timeout: self.timeout,
            rewind: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            failure: Mutex::new(None),
            aborted_by_rebalance: AtomicU64::new(0),
        });
        let (group, user) = self.group.for_transactions();
        let listener = Arc::new(Listener {
            shared: Arc::clone(&shared),
            user,
        });
        let group = group.rebalance_listener(listener);
        let member = group.build()?;
        Ok(GroupTransactSession {
            member,
            writer: self.writer,
            shared,
            commit_every: self.commit_every,
            commit_interval: self.commit_interval,
            timeout: self.timeout,
            open: None,
            in_progress: false,
            rewind_due: false,
            out: Vec::new(),
            stats: TransactStats::default(),
        })
    }
}

/// A consumer group member and a transactional writer doing consume-transform-produce in
/// transactions: each input record's output is written, and its offset committed, exactly
/// once (the module documentation gives the steps and the invariant). The counterpart of
/// franz-go's `GroupTransactSession`, of Kafka Streams' exactly-once task loop, and of the
/// read-process-write loop of KIP-98 / KIP-447 written by hand with Java's `KafkaConsumer`
/// and `KafkaProducer`.
///
/// Each member needs its own transactional id (KIP-447: the group coordinator, not the
/// transactional id, fences a member that lost its partitions, so the id need not follow
/// the partitions); reuse the id when a crashed member is restarted, so that its
/// `init_transactions` fences the crashed one and aborts the transaction it left open.
///
/// Offsets are committed only through transactions: the member's auto-commit is turned off.
/// Committed offsets are read with `require_stable` (KIP-447, Kafka 2.5+; the default of
/// [`GroupReaderBuilder::require_stable_offsets`]), so a new owner of a partition waits for a
/// commit still in flight before it reads the committed offset; an older broker is asked
/// without it.
///
/// ```no_run
/// use kafkit::transact::GroupTransactSession;
/// use kafkit::{ConsumerRecord, GroupReader, ProducerRecord, Transport, Writer};
///
/// # async fn run() -> Result<(), kafkit::Error> {
/// let transport = Transport::builder(["127.0.0.1:9092"]).build()?;
/// let group = GroupReader::builder(transport.clone(), "uppercaser").subscribe(["words"]);
/// let writer = Writer::builder(transport).transactional_id("uppercaser-1").build()?;
/// let mut session = GroupTransactSession::builder(group, writer).build()?;
/// let mut upper = |r: &ConsumerRecord, out: &mut Vec<ProducerRecord>| {
///     let value = r.value.as_deref().unwrap_or_default().to_ascii_uppercase();
///     out.push(ProducerRecord::new("WORDS", value));
/// };
/// session.run(&mut upper).await?; // returns only on an error
/// # Ok(())
/// # }
/// ```
pub struct GroupTransactSession {
    member: GroupReader,
    writer: Writer,
    shared: Arc<Shared>,
    commit_every: u64,
    commit_interval: Duration,
    timeout: Duration,
    /// The open transaction, as far as the session knows it.
    open: Option<Open>,
    /// A round is between reading records and finishing with them: if this is still set when
    /// the next round starts, the previous one was cancelled or failed midway.
    in_progress: bool,
    /// A transaction was aborted and the member has not been rewound since: set before the
    /// rewind starts and cleared only once it moved every owned partition, so a rewind that
    /// failed or was cancelled (its future dropped) runs again before anything is read.
    rewind_due: bool,
    /// The transform's output, reused (no allocation per record).
    out: Vec<ProducerRecord>,
    stats: TransactStats,
}

impl std::fmt::Debug for GroupTransactSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupTransactSession")
            .field("member", &self.member)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// The open transaction: when it began, how many input records it holds, and the next
/// offset (with the leader epoch of the last record) of each input partition read in it.
#[derive(Debug)]
struct Open {
    began: Instant,
    records: u64,
    offsets: HashMap<(Arc<str>, i32), (i64, Option<i32>)>,
}

/// What the session and its rebalance listener share. The listener's callbacks run inside
/// the session's poll (never concurrently with the session's own use of the writer).
struct Shared {
    writer: Writer,
    timeout: Duration,
    /// The listener aborted the open transaction: the session rewinds before going on.
    rewind: AtomicBool,
    /// A callback is using the writer (its future may be parked half done inside a poll
    /// that timed out): the session leaves the writer alone until it finished.
    busy: AtomicBool,
    /// The listener's abort failed: the session reports or resumes it.
    failure: Mutex<Option<TransactionError>>,
    aborted_by_rebalance: AtomicU64,
}

impl Shared {
    /// A rebalance takes partitions away: abort the open transaction before they go.
    async fn abort_for_rebalance(&self) {
        let state = self.writer.transaction_state();
        if !matches!(
            state,
            TransactionPhase::InTransaction
                | TransactionPhase::AbortableError
                | TransactionPhase::AbortingTransaction
        ) {
            return;
        }
        self.busy.store(true, Ordering::Release);
        tracing::info!(
            state = %state,
            "transact: partitions revoked with a transaction open; aborting it"
        );
        match self.writer.abort_transaction(self.timeout).await {
            Ok(()) => {
                self.aborted_by_rebalance.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(error = %e, "transact: the abort on a rebalance failed");
                *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            }
        }
        self.rewind.store(true, Ordering::Release);
        self.busy.store(false, Ordering::Release);
    }
}

/// The session's rebalance listener: aborts on a revocation or a loss, then calls the
/// application's listener.
struct Listener {
    shared: Arc<Shared>,
    user: Option<Arc<dyn RebalanceListener>>,
}

impl RebalanceListener for Listener {
    fn on_partitions_assigned(
        &self,
        group: GroupHandle,
        partitions: Vec<(String, i32)>,
    ) -> ListenerFuture {
        match self.user.clone() {
            Some(u) => u.on_partitions_assigned(group, partitions),
            None => Box::pin(async {}),
        }
    }

    fn on_partitions_revoked(
        &self,
        group: GroupHandle,
        partitions: Vec<(String, i32)>,
    ) -> ListenerFuture {
        self.abort_then(group, partitions, |u, g, p| u.on_partitions_revoked(g, p))
    }

    fn on_partitions_lost(
        &self,
        group: GroupHandle,
        partitions: Vec<(String, i32)>,
    ) -> ListenerFuture {
        self.abort_then(group, partitions, |u, g, p| u.on_partitions_lost(g, p))
    }
}

/// One of the application's [`RebalanceListener`] callbacks for partitions taken away.
type UserCallback = fn(&dyn RebalanceListener, GroupHandle, Vec<(String, i32)>) -> ListenerFuture;

impl Listener {
    /// A revocation or a loss of `partitions`: aborts the open transaction, then runs the
    /// application's callback (`user`, the same kind).
    fn abort_then(
        &self,
        group: GroupHandle,
        partitions: Vec<(String, i32)>,
        user: UserCallback,
    ) -> ListenerFuture {
        let shared = Arc::clone(&self.shared);
        let listener = self.user.clone();
        Box::pin(async move {
            // A cooperative rebalance may revoke nothing: the transaction goes on.
            if !partitions.is_empty() {
                shared.abort_for_rebalance().await;
            }
            if let Some(u) = listener {
                user(&*u, group, partitions).await;
            }
        })
    }
}

impl GroupTransactSession {
    /// A builder for a session of the member `group` (its subscription, timeouts, assignors,
    /// Reader settings; auto-commit and the isolation level are set by the session) and the
    /// transactional `writer` (built with [`crate::WriterBuilder::transactional_id`]).
    pub fn builder(group: GroupReaderBuilder, writer: Writer) -> GroupTransactSessionBuilder {
        let timeout = writer.transport().default_api_timeout();
        GroupTransactSessionBuilder {
            group,
            writer,
            commit_every: 1000,
            commit_interval: Duration::from_millis(100),
            timeout,
        }
    }

    /// The group member (assignment, position, stats).
    pub fn member(&self) -> &GroupReader {
        &self.member
    }

    /// The transactional writer (its state, stats).
    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    /// The session's counters.
    pub fn stats(&self) -> TransactStats {
        let mut s = self.stats.clone();
        s.aborted_by_rebalance = self.shared.aborted_by_rebalance.load(Ordering::Relaxed);
        s.aborted += s.aborted_by_rebalance;
        s
    }

    /// Runs rounds ([`GroupTransactSession::process_once`]) until one fails: aborts (on a
    /// rebalance, an abortable error) are carried out and the loop goes on.
    ///
    /// # Errors
    ///
    /// As [`GroupTransactSession::process_once`]; the session may be used again after a
    /// timeout or a group error, never after a fatal [`TransactionError`].
    ///
    /// # Cancel safety
    ///
    /// As [`GroupTransactSession::process_once`]: dropped midway, the next round (or
    /// [`GroupTransactSession::close`]) aborts the open transaction if it may be incomplete
    /// and rewinds; nothing committed is lost and nothing is committed twice.
    pub async fn run<T: Transform + ?Sized>(&mut self, transform: &mut T) -> Result<()> {
        loop {
            self.process_once(transform).await?;
        }
    }

    /// One round: finishes what an earlier round left, polls the member (waiting at most
    /// until the open transaction is due, or `commit_interval`), transforms and sends the
    /// records in the open transaction (beginning one if needed), and ends it when it is due.
    /// Returns how a transaction ended in this round, if one did.
    ///
    /// # Errors
    ///
    /// - [`TransactionError`] (as [`Error::Produce`]): `Fatal` (fenced by a newer writer of
    ///   the same transactional id, refused for good: drop the session), `Timeout` (a
    ///   transactional call, `init_transactions` included, or the rewind did not finish
    ///   within `timeout`: call again, the round resumes it), `NotTransactional` (the writer
    ///   has no transactional id).
    /// - The member's errors from [`GroupReader::next_batch`] (fenced, a partition error,
    ///   closed); a transaction open then is aborted by the next round if it lost its
    ///   partitions.
    /// - A record the writer refused to take (e.g. larger than `max_request_size`, an
    ///   unknown topic): the open transaction is aborted by the next round, which rewinds, so
    ///   the same record fails again until the application changes its transform.
    ///
    /// Abortable errors are not errors here: the transaction is aborted, the member rewinds,
    /// and the outcome says why.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe while it waits for records (nothing is taken then). Dropped while it
    /// sends or ends a transaction, the transaction may miss part of what was read: the next
    /// round aborts it (or resumes a commit that was under way) and rewinds. Dropped (or
    /// failed) while it rewinds after an abort, the next round rewinds before it reads.
    pub async fn process_once<T: Transform + ?Sized>(
        &mut self,
        transform: &mut T,
    ) -> Result<Option<TransactionOutcome>> {
        // While a callback's abort is parked inside the member (a poll that timed out), the
        // writer is left alone: only the next poll can finish it.
        if !self.shared.busy.load(Ordering::Acquire) {
            if let Some(outcome) = self.recover().await? {
                return Ok(Some(outcome));
            }
            // `Initializing`: an earlier round's init timed out or was cancelled; the writer
            // takes the same call again (a fresh InitProducerId).
            if matches!(
                self.writer.transaction_state(),
                TransactionPhase::Uninitialized | TransactionPhase::Initializing
            ) {
                self.writer.init_transactions(self.timeout).await?;
            }
        }
        let now = Instant::now();
        let due = self.open.as_ref().map_or(now + self.commit_interval, |o| {
            o.began + self.commit_interval
        });
        let polled = tokio::time::timeout_at(due, self.member.next_batch()).await;
        if self.shared.busy.load(Ordering::Acquire) {
            // A callback is still aborting inside the poll that timed out: let the next
            // poll finish it before touching the writer.
            return Ok(None);
        }
        if let Some(outcome) = self.recover().await? {
            // A rebalance aborted the transaction inside the poll; what it returned was read
            // past the committed offsets the rewind went back to.
            return Ok(Some(outcome));
        }
        match polled {
            Err(_) => {}
            Ok(Err(e)) => return Err(e),
            Ok(Ok(parts)) => {
                if let Some(outcome) = self.transform_and_send(parts, transform).await? {
                    return Ok(Some(outcome));
                }
            }
        }
        let due = self.open.as_ref().is_some_and(|o| {
            o.records >= self.commit_every || o.began.elapsed() >= self.commit_interval
        });
        if due {
            return self.end().await.map(Some);
        }
        Ok(None)
    }

    /// Commits the open transaction now (with its offsets), e.g. before a planned shutdown.
    /// `Ok(None)` when none is open.
    ///
    /// # Errors
    ///
    /// As [`GroupTransactSession::process_once`].
    ///
    /// # Cancel safety
    ///
    /// As [`GroupTransactSession::process_once`].
    pub async fn commit(&mut self) -> Result<Option<TransactionOutcome>> {
        self.finish_callback().await?;
        if let Some(outcome) = self.recover().await? {
            return Ok(Some(outcome));
        }
        if self.open.is_none() {
            return Ok(None);
        }
        self.end().await.map(Some)
    }

    /// Commits the open transaction (unless an earlier round left it incomplete, then it is
    /// aborted), leaves the group ([`GroupReader::close`]) and closes the writer.
    ///
    /// # Errors
    ///
    /// The commit's errors (as [`GroupTransactSession::commit`]; the member still leaves and
    /// the writer still closes), else the writer's close errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped midway, the member leaves in the background; a transaction left open is
    /// aborted by the coordinator after the writer's `transaction_timeout`, or at once by
    /// the next writer of the same transactional id.
    pub async fn close(mut self) -> Result<()> {
        let committed = self.commit().await;
        let GroupTransactSession {
            member,
            writer,
            timeout,
            ..
        } = self;
        member.close().await;
        let closed = writer.close(timeout).await;
        committed?;
        closed.map_err(Error::from)
    }

    /// Polls the member until a callback's abort parked inside it (by a poll that timed out)
    /// has finished; what the polls return is dropped (the abort makes the session rewind).
    async fn finish_callback(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        while self.shared.busy.load(Ordering::Acquire) {
            if Instant::now() >= deadline {
                return Err(TransactionError::Timeout {
                    operation: "the abort of a rebalance",
                    timeout: self.timeout,
                    last: None,
                }
                .into());
            }
            let _ = tokio::time::timeout_at(deadline, self.member.next_batch()).await;
        }
        Ok(())
    }

    /// Step 1: a failure left by the listener, a commit or abort left half done, an
    /// incomplete transaction, or an abort by a rebalance: each is finished here.
    async fn recover(&mut self) -> Result<Option<TransactionOutcome>> {
        let failure = self
            .shared
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(e) = failure
            && e.is_fatal()
        {
            return Err(e.into());
        }
        match self.writer.transaction_state() {
            TransactionPhase::CommittingTransaction => return self.end().await.map(Some),
            TransactionPhase::AbortingTransaction | TransactionPhase::AbortableError => {
                let reason = match self.writer_error() {
                    Some(e) => AbortReason::Error(e),
                    None => AbortReason::Interrupted,
                };
                return self.abort(reason).await.map(Some);
            }
            TransactionPhase::InTransaction if self.in_progress || self.open.is_none() => {
                return self.abort(AbortReason::Interrupted).await.map(Some);
            }
            _ => {}
        }
        if self.shared.rewind.swap(false, Ordering::AcqRel) {
            // The listener aborted (and counted) it; the session forgets it and rewinds. The
            // duty moves from the listener's flag to the session's in one step (no await in
            // between), so a cancellation cannot lose it.
            let records = self.open.take().map_or(0, |o| o.records);
            self.in_progress = false;
            self.rewind_due = true;
            self.rewind().await?;
            return Ok(Some(TransactionOutcome::Aborted {
                records,
                reason: AbortReason::Rebalance,
            }));
        }
        if self.rewind_due {
            // The rewind after an earlier abort failed or was cancelled (the abort itself was
            // reported then): nothing is read before it has run.
            self.rewind().await?;
        }
        Ok(None)
    }

    /// Why the writer's open transaction must abort, as far as its state tells.
    fn writer_error(&self) -> Option<TransactionError> {
        (self.writer.transaction_state() == TransactionPhase::AbortableError).then(|| {
            TransactionError::Abortable {
                code: None,
                message: "a record or request of the transaction failed".into(),
            }
        })
    }

    /// Steps 3 and 4: the records through the transform into the open transaction.
    async fn transform_and_send<T: Transform + ?Sized>(
        &mut self,
        parts: Vec<PartitionRecords>,
        transform: &mut T,
    ) -> Result<Option<TransactionOutcome>> {
        if parts.iter().all(|p| p.records.is_empty()) {
            return Ok(None);
        }
        if self.open.is_none() {
            if let Err(e) = self.writer.begin_transaction() {
                // The records polled are gone from the member: read them again.
                self.rewind_due = true;
                return Err(e.into());
            }
            self.open = Some(Open {
                began: Instant::now(),
                records: 0,
                offsets: HashMap::new(),
            });
        }
        self.in_progress = true;
        let mut out = std::mem::take(&mut self.out);
        let failed = self.send_all(parts, transform, &mut out).await;
        out.clear();
        self.out = out;
        match failed {
            None => {
                self.in_progress = false;
                Ok(None)
            }
            Some(ProduceError::Transaction(e)) if e.is_abortable() => {
                self.abort(AbortReason::Error(e)).await.map(Some)
            }
            // The next round aborts the incomplete transaction (in_progress stays set).
            Some(e) => Err(e.into()),
        }
    }

    /// Each record through the transform, its output to the writer; the first record the
    /// writer refused stops it.
    async fn send_all<T: Transform + ?Sized>(
        &mut self,
        parts: Vec<PartitionRecords>,
        transform: &mut T,
        out: &mut Vec<ProducerRecord>,
    ) -> Option<ProduceError> {
        for p in parts {
            let key = (Arc::clone(&p.topic), p.partition);
            let next = (p.next_offset, p.last_leader_epoch());
            let mut n = 0u64;
            for record in p.into_consumer_records() {
                n += 1;
                transform.transform(&record, out);
                for r in out.drain(..) {
                    // The record's outcome is collected by commit_transaction (a failed
                    // record makes the transaction abortable).
                    match self.writer.send(r).await {
                        Ok(delivery) => drop(delivery),
                        Err(e) => return Some(e),
                    }
                }
            }
            let open = self.open.as_mut()?;
            open.records += n;
            open.offsets.insert(key, next);
        }
        None
    }

    /// Step 5: the offsets into the transaction, then the commit. Also resumes a commit
    /// that timed out.
    async fn end(&mut self) -> Result<TransactionOutcome> {
        self.in_progress = true;
        let (records, offsets) = match &self.open {
            Some(o) => (
                o.records,
                o.offsets
                    .iter()
                    .map(|((t, p), (offset, epoch))| {
                        let mut om = OffsetAndMetadata::new(*offset);
                        om.leader_epoch = *epoch;
                        (Arc::clone(t), *p, om)
                    })
                    .collect::<Vec<_>>(),
            ),
            None => (0, Vec::new()),
        };
        let resuming = self.writer.transaction_state() == TransactionPhase::CommittingTransaction;
        if !resuming && !offsets.is_empty() {
            let group: ConsumerGroupMetadata = self.member.group_metadata();
            match self
                .writer
                .send_offsets_to_transaction(&offsets, &group, self.timeout)
                .await
            {
                Ok(()) => {}
                Err(e) if e.is_abortable() => return self.abort(AbortReason::Error(e)).await,
                Err(e) => return Err(e.into()),
            }
        }
        match self.writer.commit_transaction(self.timeout).await {
            Ok(()) => {}
            Err(e) if e.is_abortable() => return self.abort(AbortReason::Error(e)).await,
            Err(e) => return Err(e.into()),
        }
        self.open = None;
        self.in_progress = false;
        self.stats.committed += 1;
        self.stats.records_committed += records;
        tracing::debug!(records, partitions = offsets.len(), "transact: committed");
        Ok(TransactionOutcome::Committed {
            records,
            partitions: offsets.len(),
        })
    }

    /// The open transaction aborted by the session, then step 6.
    async fn abort(&mut self, reason: AbortReason) -> Result<TransactionOutcome> {
        self.in_progress = true;
        match self.writer.transaction_state() {
            TransactionPhase::InTransaction
            | TransactionPhase::AbortableError
            | TransactionPhase::AbortingTransaction => {
                self.writer.abort_transaction(self.timeout).await?;
            }
            _ => {}
        }
        let records = self.open.take().map_or(0, |o| o.records);
        self.stats.aborted += 1;
        tracing::info!(records, reason = ?reason, "transact: aborted");
        // The listener's own abort (if it raced this one) needs no second rewind. From here
        // the only duty left is the rewind, kept in `rewind_due` until it has run.
        self.shared.rewind.store(false, Ordering::Release);
        self.rewind_due = true;
        self.in_progress = false;
        self.rewind().await?;
        Ok(TransactionOutcome::Aborted { records, reason })
    }

    /// Step 6: every owned partition back to its committed offset (OffsetFetch, asked again
    /// while an offset is unstable or the coordinator moves, until `timeout`). Clears
    /// `rewind_due` once done; failed or dropped midway, it stays set and the next round
    /// (or [`GroupTransactSession::commit`]) runs the rewind again before reading.
    async fn rewind(&mut self) -> Result<()> {
        let owned = self.member.assignment();
        if owned.is_empty() {
            // Partitions assigned later start at their committed offsets anyway.
            self.rewind_due = false;
            return Ok(());
        }
        let (mut stable, reset) = self.member.offset_settings();
        let spec = ListGroupOffsets::partitions(self.member.group_id(), owned.iter().cloned());
        let deadline = Instant::now() + self.timeout;
        let mut backoff = Duration::from_millis(20);
        loop {
            let last = match committed(self.member.transport(), &spec, stable).await {
                Ok(mut groups) => match groups.pop().map(|(_, r)| r) {
                    Some(Ok(parts)) => match starts(parts, reset) {
                        Ok(starts) => {
                            self.member.rewind(starts);
                            self.rewind_due = false;
                            self.stats.rewinds += 1;
                            return Ok(());
                        }
                        Err(e) => e,
                    },
                    Some(Err(e)) => e,
                    None => Error::Protocol("OffsetFetch: no answer for the group".into()),
                },
                Err(Error::UnsupportedVersion { .. }) if stable => {
                    // A coordinator before KIP-447 (OffsetFetch below v7): asked without
                    // require_stable, as Java does.
                    stable = false;
                    continue;
                }
                Err(e) => e,
            };
            let again =
                last.is_retriable() || last.error_code() == Some(ErrorCode::UNSTABLE_OFFSET_COMMIT);
            if !again || Instant::now() + backoff > deadline {
                return Err(TransactionError::Timeout {
                    operation: "rewind to the committed offsets",
                    timeout: self.timeout,
                    last: Some(Arc::new(last)),
                }
                .into());
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(500));
        }
    }
}

/// The committed offsets of `spec` (OffsetFetch, routed by the transport to the group's
/// coordinator), one result for its group. `require_stable` (KIP-447) needs v7+ at the
/// coordinator: below that the answer is [`Error::UnsupportedVersion`], and the caller asks
/// again without it.
///
/// Errors: [`Error::UnsupportedVersion`] as above, and the transport's errors.
async fn committed(
    transport: &Transport,
    spec: &ListGroupOffsets,
    require_stable: bool,
) -> Result<Vec<(String, ResourceResult<CommittedOffsets>)>> {
    if require_stable {
        let node = transport
            .coordinator(CoordinatorType::Group, &spec.group_id)
            .await?;
        let version = transport
            .conn(node, ConnKind::Admin)
            .await?
            .version_for::<OffsetFetchRequest>(None)?;
        if version < 7 {
            return Err(unsupported_from::<OffsetFetchRequest>(7, version));
        }
    }
    let groups = [spec];
    // The multi-group form; the transport's split route sends the single-group form to a
    // coordinator older than v8.
    let req = offset_fetch_request(&groups, require_stable, 8)?;
    let resp = transport.round_trip(req).await?;
    Ok(offset_fetch_results(&groups, resp))
}

/// Where each partition goes back to: its committed offset (with its leader epoch, KIP-320),
/// else where `auto_offset_reset` says; the first partition error (e.g.
/// `UNSTABLE_OFFSET_COMMIT`) fails the whole answer, which is asked again.
fn starts(
    parts: CommittedOffsets,
    reset: crate::reader::AutoOffsetReset,
) -> Result<Vec<(String, i32, crate::group::commit::Start)>> {
    let mut out = Vec::with_capacity(parts.len());
    for ((topic, partition), r) in parts {
        let start = match r? {
            Some(om) => Ok(match om.leader_epoch {
                Some(leader_epoch) => StartOffset::AtEpoch {
                    offset: om.offset,
                    leader_epoch,
                },
                None => StartOffset::At(om.offset),
            }),
            None => crate::group::commit::reset_start(reset)
                .ok_or_else(|| crate::group::commit::no_offset(&topic, partition)),
        };
        out.push((topic, partition, start));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::AutoOffsetReset;

    #[test]
    fn starts_are_the_committed_offsets_else_the_reset() {
        let mut om = OffsetAndMetadata::new(7);
        om.leader_epoch = Some(3);
        let parts = vec![
            (("t".to_owned(), 0), Ok(Some(om))),
            (("t".to_owned(), 1), Ok(Some(OffsetAndMetadata::new(9)))),
            (("t".to_owned(), 2), Ok(None)),
        ];
        let got: Vec<(String, i32, StartOffset)> = starts(parts, AutoOffsetReset::Earliest)
            .expect("starts")
            .into_iter()
            .map(|(t, p, s)| (t, p, s.expect("a start")))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "t".to_owned(),
                    0,
                    StartOffset::AtEpoch {
                        offset: 7,
                        leader_epoch: 3
                    }
                ),
                ("t".to_owned(), 1, StartOffset::At(9)),
                ("t".to_owned(), 2, StartOffset::Earliest),
            ]
        );
        // Without a committed offset under `none`: the partition's error, not a start.
        let none = vec![(("t".to_owned(), 2), Ok(None))];
        let got = starts(none, AutoOffsetReset::None).expect("starts");
        assert!(
            matches!(
                &got[0].2,
                Err(Error::Reader(
                    crate::reader::ReaderError::NoOffsetForPartition { partition: 2, .. }
                ))
            ),
            "{got:?}"
        );
        let unstable = vec![(
            ("t".to_owned(), 0),
            Err(Error::Protocol("UNSTABLE_OFFSET_COMMIT".into())),
        )];
        assert!(starts(unstable, AutoOffsetReset::Latest).is_err());
    }
}
