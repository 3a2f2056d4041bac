//! Transactions (KIP-98): the transactional [`Writer`]'s state machine, its calls
//! (`init_transactions`, `begin_transaction`, `send_offsets_to_transaction`,
//! `commit_transaction`, `abort_transaction`, as Java's `KafkaProducer`), and the
//! AddPartitionsToTxn the router sends before a partition's first batch in a transaction.
//!
//! ```text
//!  Uninitialized ─init_transactions─► Initializing ─InitProducerId─► Ready
//!  Ready ─begin_transaction─► InTransaction ─commit_transaction─► CommittingTransaction
//!        ─flush, EndTxn(commit)─► Ready
//!  InTransaction | AbortableError ─abort_transaction─► AbortingTransaction
//!        ─unsent records failed, in-flight ones settled, EndTxn(abort), KIP-360 bump─► Ready
//!  InTransaction | CommittingTransaction ─a record or request failed─► AbortableError
//!  any ─PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED...─►
//!        FatalError (every later call fails with that error)
//! ```
//!
//! The state lives under the writer's state lock (`State::txn`), which a transactional
//! writer's every `send` takes (it never takes the slots' fast path), so a record's `send` and
//! an abort see the same state; the calls are serialized by `Inner::txn_op`. See docs/DESIGN.md
//! ("Transactions") for the invariants.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, EndTxnRequest,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse, add_partitions_to_txn_request,
    txn_offset_commit_request,
};

use super::Writer;
use super::accumulator::{PartState, State};
use super::batch::PartId;
use super::inner::Inner;
use super::router::{ProducerIdError, ask_producer_id};
use super::txn_state::{Txn, code_error};
use crate::error::Error;
use crate::error::produce::{TransactionError, TransactionPhase};
use crate::ops::offsets::{ConsumerGroupMetadata, OffsetAndMetadata};
use crate::ops::versions::client_max_for;
use crate::transport::{ConnKind, CoordinatorType};

/// The error of a call whose request failed without an answer `e`: a timeout when retrying
/// could still help (the transport retried until the call's deadline), else by its code (a
/// FindCoordinator `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`), else fatal (e.g. an unsupported
/// version) or abortable (inside a transaction).
fn client_error(
    operation: &'static str,
    timeout: Duration,
    e: Error,
    in_txn: bool,
) -> TransactionError {
    if e.is_retriable() {
        return TransactionError::Timeout {
            operation,
            timeout,
            last: Some(Arc::new(e)),
        };
    }
    if let Some(code) = e.error_code() {
        let mut err = code_error(operation, code, in_txn);
        if let TransactionError::Fatal { message, .. }
        | TransactionError::Abortable { message, .. } = &mut err
        {
            *message = e.to_string();
        }
        return err;
    }
    let fatal = matches!(e, Error::UnsupportedVersion { .. } | Error::Encode(_)) || !in_txn;
    if fatal {
        TransactionError::Fatal {
            code: None,
            message: e.to_string(),
        }
    } else {
        TransactionError::Abortable {
            code: None,
            message: e.to_string(),
        }
    }
}

/// KIP-890 part 2's choice: the `transaction.version` feature finalized at 2 or more, and the
/// broker and this library both speaking Produce v12 (implicit AddPartitionsToTxn),
/// TxnOffsetCommit v5 and EndTxn v5 (an epoch bump at every end). `ours_*` are this
/// library's highest versions (the generated ones), `broker_*` the broker's (`None`: not
/// offered).
pub(crate) fn use_transaction_v2(
    finalized_level: Option<i16>,
    ours: (i16, i16, i16),
    broker: (Option<i16>, Option<i16>, Option<i16>),
) -> bool {
    let level_ok = finalized_level.is_some_and(|l| l >= 2);
    let (produce, txn_offset_commit, end_txn) = ours;
    let both = |ours: i16, theirs: Option<i16>, need: i16| ours >= need && theirs >= Some(need);
    level_ok
        && both(produce, broker.0, 12)
        && both(txn_offset_commit, broker.1, 5)
        && both(end_txn, broker.2, 5)
}

/// The name of KIP-890's feature in ApiVersions' finalized features.
const TRANSACTION_VERSION: &str = "transaction.version";

/// Highest EndTxn version of the classic flow (v5 is KIP-890's, with an epoch bump).
const END_TXN_CLASSIC_MAX: i16 = 4;

/// Highest TxnOffsetCommit version of the classic flow: v5+ tells the group coordinator the
/// client added the group's partition implicitly (KIP-890 part 2).
const TXN_OFFSET_COMMIT_CLASSIC_MAX: i16 = 4;

impl Writer {
    fn txn_id(&self) -> Result<&str, TransactionError> {
        self.inner
            .config
            .transactional_id
            .as_deref()
            .ok_or(TransactionError::NotTransactional)
    }

    /// Where the transaction stands ([`TransactionPhase::Uninitialized`] for a writer that is
    /// not transactional).
    pub fn transaction_state(&self) -> TransactionPhase {
        self.inner
            .lock()
            .txn
            .as_ref()
            .map_or(TransactionPhase::Uninitialized, |t| t.state)
    }

    /// Gets the producer id and epoch of the writer's `transactional_id` from its transaction
    /// coordinator (FindCoordinator key type 1, then InitProducerId with the transactional id
    /// and `transaction_timeout`), as Java's `initTransactions`. This fences every older
    /// writer of the same transactional id (their next request fails with `PRODUCER_FENCED`
    /// or `INVALID_PRODUCER_EPOCH`) and completes or aborts the transaction they left open.
    /// Call once, before the first [`Writer::begin_transaction`]. Also reads the broker's
    /// finalized `transaction.version` (ApiVersions, KIP-584) to choose KIP-890's flow.
    ///
    /// `CONCURRENT_TRANSACTIONS`, `COORDINATOR_LOAD_IN_PROGRESS`, `NOT_COORDINATOR` and lost
    /// connections are retried (with the transport's backoff) until `timeout`.
    ///
    /// # Errors
    ///
    /// [`TransactionError::NotTransactional`]; [`TransactionError::InvalidState`] after a
    /// successful init; [`TransactionError::Timeout`] when retrying lasted until `timeout` (the
    /// state stays `Initializing`: call again); [`TransactionError::Fatal`] for any refusal
    /// (`TRANSACTIONAL_ID_AUTHORIZATION_FAILED`, `INVALID_TRANSACTION_TIMEOUT`, no
    /// InitProducerId...); [`TransactionError::Closed`] without a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Dropped midway, the state stays `Initializing`, and a later call starts again (an
    /// InitProducerId the coordinator carried out only bumped the epoch, which the next one
    /// bumps again).
    pub async fn init_transactions(&self, timeout: Duration) -> Result<(), TransactionError> {
        let txn_id = self.txn_id()?.to_owned();
        let inner = &self.inner;
        inner
            .ensure_started()
            .map_err(|_| TransactionError::Closed("it needs a tokio runtime"))?;
        let started = Instant::now();
        let _op = inner.txn_op_lock(timeout, "init_transactions").await?;
        inner.with_txn(|t| match t.state {
            TransactionPhase::Uninitialized | TransactionPhase::Initializing => {
                t.state = TransactionPhase::Initializing;
                Ok(())
            }
            _ => Err(t.refused("init_transactions")),
        })?;
        let (id, epoch) = init_producer_id(
            inner,
            &txn_id,
            -1,
            -1,
            "init_transactions",
            timeout,
            started,
        )
        .await
        .inspect_err(|e| inner.txn_error(e.clone()))?;
        let left = timeout.saturating_sub(started.elapsed());
        let v2 = tokio::time::timeout(left, transaction_v2(inner, &txn_id))
            .await
            .ok()
            .flatten()
            .unwrap_or(false);
        tracing::debug!(
            transactional_id = %txn_id,
            producer_id = id,
            producer_epoch = epoch,
            kip_890 = v2,
            "writer: transactions initialized"
        );
        let mut st = inner.lock();
        st.new_producer(id, epoch);
        let t = st.txn.as_mut().expect("a transactional writer");
        t.v2 = v2;
        t.clear();
        t.state = TransactionPhase::Ready;
        Ok(())
    }

    /// Opens a transaction (Java `beginTransaction`): records sent from now on belong to it
    /// until [`Writer::commit_transaction`] or [`Writer::abort_transaction`]. No I/O (the
    /// coordinator learns of the transaction with its first partition or offsets), so no
    /// timeout.
    ///
    /// # Errors
    ///
    /// [`TransactionError::NotTransactional`]; [`TransactionError::InvalidState`] unless the
    /// state is `Ready` (before `init_transactions`, or with a transaction already open);
    /// the writer's [`TransactionError::Fatal`] after a fatal error.
    pub fn begin_transaction(&self) -> Result<(), TransactionError> {
        self.txn_id()?;
        self.inner.with_txn(|t| match t.state {
            TransactionPhase::Ready => {
                t.clear();
                t.state = TransactionPhase::InTransaction;
                Ok(())
            }
            _ => Err(t.refused("begin_transaction")),
        })
    }

    /// Adds the consumed `offsets` (`(topic, partition, offset)`: the next record to read) of
    /// the group `group` to the open transaction (Java `sendOffsetsToTransaction`):
    /// AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the group's
    /// coordinator with the member's generation, member id and instance id (KIP-447), so a
    /// member fenced by a rebalance cannot commit. The offsets become visible when the
    /// transaction commits, and are dropped when it aborts. Retriable coordinator errors are
    /// retried until `timeout`.
    ///
    /// # Errors
    ///
    /// [`TransactionError::InvalidArgument`] (nothing sent) for an empty group id, a
    /// negative offset or a partition given twice; [`TransactionError::InvalidState`] outside
    /// an open transaction; [`TransactionError::Abortable`] when the group coordinator
    /// refuses the commit (`ILLEGAL_GENERATION`, `UNKNOWN_MEMBER_ID`, `FENCED_INSTANCE_ID`,
    /// `GROUP_AUTHORIZATION_FAILED`...): the transaction then must abort;
    /// [`TransactionError::Fatal`] (`PRODUCER_FENCED`...); [`TransactionError::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// Dropped midway (or timed out), the offsets may or may not be in the transaction: abort
    /// it (or call again: a second commit of the same offsets is harmless). An AddOffsetsToTxn
    /// left without an answer is sent again by the transaction's end before it decides on
    /// EndTxn, so the coordinator never keeps a transaction open that the writer thinks it
    /// never began.
    pub async fn send_offsets_to_transaction<S: AsRef<str>>(
        &self,
        offsets: &[(S, i32, OffsetAndMetadata)],
        group: &ConsumerGroupMetadata,
        timeout: Duration,
    ) -> Result<(), TransactionError> {
        const OP: &str = "send_offsets_to_transaction";
        let txn_id = self.txn_id()?.to_owned();
        let inner = &self.inner;
        let started = Instant::now();
        let mut topics = offsets_request(offsets, group)?;
        let _op = inner.txn_op_lock(timeout, OP).await?;
        let mut v2 = false;
        let (pid, epoch) = inner.with_txn_producer(|t| {
            v2 = t.offsets_allowed(OP)?;
            Ok(())
        })?;
        let fail = |e: TransactionError| {
            inner.txn_error(e.clone());
            e
        };
        if v2 {
            // KIP-890 part 2: TxnOffsetCommit v5+ adds the group's offsets partition to the
            // transaction itself (Java skips AddOffsetsToTxn too); the transaction's end needs
            // EndTxn whatever this request's fate, since it may have reached the coordinator.
            inner.with_txn(|t| {
                t.started = true;
                Ok(())
            })?;
        } else {
            // The coordinator adds the group's offsets partition to the transaction.
            let (producer, group) = ((pid, epoch), &group.group_id);
            add_offsets_to_txn(inner, &txn_id, producer, group, OP, timeout, started)
                .await
                .map_err(fail)?;
        }
        let max = if v2 {
            // v6 names topics by id (KIP-1319): only when the writer's metadata has every
            // topic's id (as Java's `forTopicIdsOrNames`), else names at v5.
            with_topic_ids(inner, &mut topics)
        } else {
            Some(TXN_OFFSET_COMMIT_CLASSIC_MAX)
        };
        let commit = TxnOffsetCommitRequest::default()
            .with_transactional_id(txn_id)
            .with_group_id(group.group_id.clone())
            .with_producer_id(pid)
            .with_producer_epoch(epoch)
            .with_generation_id_or_member_epoch(group.generation_id)
            .with_member_id(group.member_id.clone())
            .with_group_instance_id(group.group_instance_id.clone())
            .with_topics(topics);
        let left = timeout.saturating_sub(started.elapsed());
        let resp = inner
            .transport
            .txn_offset_commit_capped(&commit, max, left)
            .await
            .map_err(|e| fail(client_error(OP, timeout, e, true)))?;
        match refused_offsets(&resp) {
            Some(code) => {
                if code == ErrorCode::UNKNOWN_TOPIC_ID {
                    refresh_topic_ids(inner, &commit, timeout, started).await;
                }
                Err(fail(code_error("TxnOffsetCommit", code, true)))
            }
            None => Ok(()),
        }
    }

    /// Commits the open transaction (Java `commitTransaction`): sends every buffered record
    /// and waits for its outcome (as [`Writer::flush`]), then EndTxn(commit) to the transaction
    /// coordinator; once it returns `Ok`, the transaction's records and offsets are visible to
    /// `read_committed` readers, and the state is `Ready` again. Retriable coordinator errors
    /// are retried until `timeout`.
    ///
    /// # Errors
    ///
    /// [`TransactionError::InvalidState`] outside a transaction;
    /// [`TransactionError::Abortable`] when a record of the transaction failed (each record's
    /// future has its own error) or EndTxn was refused so: call
    /// [`Writer::abort_transaction`]; [`TransactionError::Fatal`] when fenced;
    /// [`TransactionError::Timeout`] when the records or EndTxn did not finish in time (the
    /// state stays `CommittingTransaction`: call again to resume; `abort_transaction` is
    /// refused until the commit ends, as Java refuses it).
    ///
    /// # Cancel safety
    ///
    /// Dropped midway, the state stays `CommittingTransaction` and the records go on being
    /// sent; call `commit_transaction` again to finish.
    pub async fn commit_transaction(&self, timeout: Duration) -> Result<(), TransactionError> {
        self.end_transaction(true, timeout).await
    }

    /// Aborts the open transaction (Java `abortTransaction`): records not sent yet fail at
    /// once with [`ProduceError::TransactionAborted`](crate::error::produce::ProduceError::TransactionAborted) (each reaches its caller's future and
    /// callback), records in flight get their outcome, then EndTxn(abort) makes the
    /// coordinator write abort markers (`read_committed` readers never see the records), and,
    /// when the producer's sequences broke (KIP-360), InitProducerId with the current id and
    /// epoch bumps the epoch through the transaction coordinator. The state is `Ready` again.
    /// Also the way out of `AbortableError`.
    ///
    /// # Errors
    ///
    /// [`TransactionError::InvalidState`] without an open transaction, or after
    /// [`Writer::commit_transaction`] timed out (call the commit again: its EndTxn may have
    /// reached the coordinator);
    /// [`TransactionError::Fatal`] when fenced (or the abort was refused);
    /// [`TransactionError::Timeout`] (the state stays `AbortingTransaction`: call again; a
    /// call resumed after EndTxn went through runs only what is left, the KIP-360 bump).
    ///
    /// # Cancel safety
    ///
    /// Dropped midway, the state stays `AbortingTransaction`: call `abort_transaction`
    /// again to finish.
    pub async fn abort_transaction(&self, timeout: Duration) -> Result<(), TransactionError> {
        self.end_transaction(false, timeout).await
    }

    /// `commit_transaction` (`committed`) or `abort_transaction`: the transactional calls'
    /// lock, the state moved to `CommittingTransaction` or `AbortingTransaction` (an abort
    /// fails the unsent records at once), every record of the transaction settled and no
    /// AddPartitionsToTxn left in flight, then EndTxn when the coordinator knows of the
    /// transaction, the KIP-360 bump after an abort that needs it, and `Ready`.
    async fn end_transaction(
        &self,
        committed: bool,
        timeout: Duration,
    ) -> Result<(), TransactionError> {
        let op = if committed {
            "commit_transaction"
        } else {
            "abort_transaction"
        };
        let txn_id = self.txn_id()?.to_owned();
        let inner = &self.inner;
        let started = Instant::now();
        let _op = inner.txn_op_lock(timeout, op).await?;
        self.settle_before_end(committed, op, timeout, started)
            .await?;
        let mut end = EndPoint::read(inner, committed)?;
        if let Some(group) = end.unanswered.take() {
            end.needs_end = settle_unanswered_offsets(
                inner,
                &txn_id,
                (end.pid, end.epoch),
                &group,
                committed,
                op,
                timeout,
                started,
            )
            .await?;
        }
        // The next transaction's flow, from the coordinator's finalized transaction.version
        // now (Java re-reads it as each transaction ends, after building its EndTxn), asked
        // alongside EndTxn so the end waits no longer: this one ends at the version it began
        // with. Unknown (no answer in time): unchanged.
        let left = timeout.saturating_sub(started.elapsed());
        let ask = async {
            tokio::time::timeout(left, transaction_v2(inner, &txn_id))
                .await
                .ok()
                .flatten()
        };
        let next_v2 = if end.needs_end {
            let ended = end_txn(
                inner, &txn_id, end.pid, end.epoch, committed, op, timeout, started,
            );
            let (ended, next) = tokio::join!(ended, ask);
            ended?;
            inner.with_txn(Txn::ended)?;
            next
        } else {
            ask.await
        }
        .unwrap_or(end.v2);
        // Upgrading to KIP-890 part 2 bumps the epoch first (Java's
        // `clientSideEpochBumpRequired`): the classic transaction's epoch is fenced, so no
        // partition of it counts as added to the first implicit one.
        let upgrade = next_v2 && !end.v2;
        if end.bump || upgrade {
            // KIP-360: a new epoch for the same id through the transaction coordinator, so
            // sequences restart at 0 and nothing of the aborted transaction can be mistaken
            // for the next one's.
            let (pid, epoch) = inner.producer();
            let (id, epoch) = init_producer_id(inner, &txn_id, pid, epoch, op, timeout, started)
                .await
                .inspect_err(|e| inner.txn_error(e.clone()))?;
            bumped(inner, id, epoch, next_v2);
        }
        if next_v2 != end.v2 {
            tracing::info!(
                transactional_id = %txn_id,
                kip_890 = next_v2,
                "writer: transaction.version changed; the next transaction follows it"
            );
        }
        inner.with_txn(|t| t.end_done(committed, upgrade, next_v2))
    }

    /// [`Writer::end_transaction`]'s first phase: the state moved to `CommittingTransaction` or
    /// `AbortingTransaction` (an abort fails the unsent records at once), then every record of
    /// the transaction settled and no AddPartitionsToTxn left in flight, by `timeout` from
    /// `started`.
    async fn settle_before_end(
        &self,
        committed: bool,
        op: &'static str,
        timeout: Duration,
        started: Instant,
    ) -> Result<(), TransactionError> {
        let inner = &self.inner;
        inner.with_txn(|t| {
            if committed {
                t.enter_commit()
            } else {
                t.enter_abort()
            }
        })?;
        if !committed {
            // The unsent records fail at once.
            inner.wake_all();
        }
        // Every record of the transaction has its outcome first. A commit: a failure among
        // them makes the transaction abortable, and then unsent records fail at once, so this
        // ends. An abort: no batch of this transaction is still on its way when the abort
        // marker is written.
        let left = timeout.saturating_sub(started.elapsed());
        if tokio::time::timeout(left, self.flush()).await.is_err() {
            return Err(TransactionError::Timeout {
                operation: op,
                timeout,
                last: None,
            });
        }
        inner.added_settled(timeout, started, op).await
    }
}

/// Where a transaction's end stands once its records settled ([`EndPoint::read`]).
struct EndPoint {
    /// The producer id and epoch the transaction ran with.
    pid: i64,
    epoch: i16,
    /// The coordinator knows of the transaction: EndTxn is needed.
    needs_end: bool,
    /// An AddOffsetsToTxn of this group was never answered (and nothing else began the
    /// transaction): sent again before deciding on EndTxn.
    unanswered: Option<String>,
    /// An abort that needs the KIP-360 bump through the coordinator.
    bump: bool,
    /// The transaction ran on KIP-890 part 2's flow.
    v2: bool,
}

impl EndPoint {
    /// The state after the records settled, or the transaction's error that ends the call: a
    /// commit fails with any error of the transaction, an abort with a fatal one.
    fn read(inner: &Inner, committed: bool) -> Result<EndPoint, TransactionError> {
        let st = inner.lock();
        let t = st.txn.as_ref().expect("a transactional writer");
        match (&t.error, t.state) {
            // A commit fails with any error of the transaction, an abort with a fatal one.
            (Some(e), _) if committed => return Err(e.clone()),
            (Some(e), TransactionPhase::FatalError) => return Err(e.clone()),
            _ => {}
        }
        // KIP-890 part 2: EndTxn bumps the epoch itself (Java's
        // `needToTriggerEpochBumpFromClient` is false under transaction.version 2).
        let bump = !committed && t.bump_needed && !(t.v2 && t.started);
        let unanswered = t.offsets_unanswered.clone().filter(|_| !t.started);
        Ok(EndPoint {
            pid: st.producer.id,
            epoch: st.producer.epoch,
            needs_end: t.started,
            unanswered,
            bump,
            v2: t.v2,
        })
    }
}

/// The producer's new epoch (`id`, `epoch`) after a KIP-360 bump through the transaction
/// coordinator (`next_v2`: the next transaction's flow, for the log).
fn bumped(inner: &Inner, id: i64, epoch: i16, next_v2: bool) {
    inner.lock().new_producer(id, epoch);
    tracing::info!(
        producer_id = id,
        producer_epoch = epoch,
        kip_890 = next_v2,
        "writer: epoch bumped through the transaction coordinator (KIP-360)"
    );
}

/// The first partition's refusal in a TxnOffsetCommit answer. Retriable codes on some
/// partitions only (the transport resends only when every partition has one): a leader moved;
/// the transaction cannot be trusted to hold them, as Java's TxnOffsetCommit handler it is
/// abortable once the call ends.
fn refused_offsets(resp: &TxnOffsetCommitResponse) -> Option<ErrorCode> {
    resp.topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.error_code)
        .find(|c| !c.is_ok())
}

/// v6 named a topic of `commit` by an id that is gone (deleted, or created again under its
/// name): the metadata is refreshed now (by `timeout` from `started`), so the next transaction
/// names the current id.
async fn refresh_topic_ids(
    inner: &Inner,
    commit: &TxnOffsetCommitRequest,
    timeout: Duration,
    started: Instant,
) {
    let names: Vec<&str> = commit.topics.iter().map(|t| t.name.as_str()).collect();
    inner.transport.invalidate_topics(names.iter().copied());
    let left = timeout.saturating_sub(started.elapsed());
    let _ = tokio::time::timeout(left, inner.transport.metadata_for(&names)).await;
}

/// The TxnOffsetCommit topics for `offsets`, checked (nothing sent when refused).
fn offsets_request<S: AsRef<str>>(
    offsets: &[(S, i32, OffsetAndMetadata)],
    group: &ConsumerGroupMetadata,
) -> Result<Vec<txn_offset_commit_request::TxnOffsetCommitRequestTopic>, TransactionError> {
    if group.group_id.is_empty() {
        return Err(TransactionError::InvalidArgument(
            "the group id is empty".into(),
        ));
    }
    let mut seen = HashSet::with_capacity(offsets.len());
    let mut topics: Vec<txn_offset_commit_request::TxnOffsetCommitRequestTopic> = Vec::new();
    for (topic, partition, om) in offsets {
        let topic = topic.as_ref();
        if om.offset < 0 || *partition < 0 {
            return Err(TransactionError::InvalidArgument(format!(
                "{topic}/{partition}: offset {} (a partition and an offset are >= 0)",
                om.offset
            )));
        }
        if !seen.insert((topic, *partition)) {
            return Err(TransactionError::InvalidArgument(format!(
                "{topic}/{partition} is given twice"
            )));
        }
        let p = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
            .with_partition_index(*partition)
            .with_committed_offset(om.offset)
            .with_committed_leader_epoch(om.leader_epoch.unwrap_or(-1))
            .with_committed_metadata(om.metadata.clone());
        match topics.iter_mut().find(|t| t.name == topic) {
            Some(t) => t.partitions.push(p),
            None => topics.push(
                txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                    .with_name(topic.to_owned())
                    .with_partitions(vec![p]),
            ),
        }
    }
    Ok(topics)
}

/// Fills each of `topics`' id from the writer's cached metadata (no I/O) and returns the
/// highest TxnOffsetCommit version they allow: `None` (the client's table, v6 names topics by
/// id) when every topic has one, else v5 (names).
fn with_topic_ids(
    inner: &Inner,
    topics: &mut [txn_offset_commit_request::TxnOffsetCommitRequestTopic],
) -> Option<i16> {
    let md = inner.transport.cached_metadata();
    let id_of = |name: &str| {
        md.as_ref()
            .and_then(|md| md.topic(name))
            .filter(|t| t.error_code.is_ok())
            .map(|t| t.topic_id)
            .filter(|id| !id.is_zero())
    };
    if topics.iter().all(|t| id_of(&t.name).is_some()) {
        for t in topics.iter_mut() {
            t.topic_id = id_of(&t.name).unwrap_or_default();
        }
        None
    } else {
        Some(TXN_OFFSET_COMMIT_BY_TOPIC_ID - 1)
    }
}

/// The first TxnOffsetCommit version that names topics by id (KIP-1319).
const TXN_OFFSET_COMMIT_BY_TOPIC_ID: i16 = 6;

/// AddOffsetsToTxn of `group` to the transaction of `txn_id` (`producer`: its id and epoch),
/// bounded by `timeout` from `started`. Until an answer comes, the group is kept as
/// `Txn::offsets_unanswered`: the request may have reached the coordinator and begun the
/// transaction there (an answer lost with its connection, held past the deadline, or the call
/// dropped), so the transaction's end must find out before it decides on EndTxn. An answer
/// settles it: `started` when the partition was added, nothing when refused.
async fn add_offsets_to_txn(
    inner: &Inner,
    txn_id: &str,
    producer: (i64, i16),
    group: &str,
    operation: &'static str,
    timeout: Duration,
    started: Instant,
) -> Result<(), TransactionError> {
    let req = AddOffsetsToTxnRequest::default()
        .with_transactional_id(txn_id.to_owned())
        .with_producer_id(producer.0)
        .with_producer_epoch(producer.1)
        .with_group_id(group.to_owned());
    inner.with_txn(|t| {
        // An earlier group still unanswered stays: this answer says nothing of it.
        t.offsets_unanswered.get_or_insert_with(|| group.to_owned());
        Ok(())
    })?;
    let left = timeout.saturating_sub(started.elapsed());
    let resp = inner
        .transport
        .round_trip_within(req, left)
        .await
        .map_err(|e| client_error(operation, timeout, e, true))?;
    inner.with_txn(|t| {
        if resp.error_code.is_ok() {
            // In the transaction: its end sends EndTxn whatever else was unanswered.
            t.started = true;
            t.offsets_unanswered = None;
        } else if t.offsets_unanswered.as_deref() == Some(group) {
            t.offsets_unanswered = None;
        }
        Ok(())
    })?;
    if !resp.error_code.is_ok() {
        return Err(code_error("AddOffsetsToTxn", resp.error_code, true));
    }
    Ok(())
}

/// The end of a transaction (`committed` or an abort) whose only content may be an
/// AddOffsetsToTxn of `group` that was never answered: sends it again, as Java's transaction
/// manager resends it before EndTxn, so the coordinator's answer says whether there is a
/// transaction to end. Returns whether EndTxn is needed. A coordinator that had the first one
/// answers the same; one that had not begins the transaction now, and EndTxn ends it either
/// way (EndTxn without it would be refused `INVALID_TXN_STATE` by a coordinator with no
/// transaction open, and skipping it would leave one open until `transaction.timeout.ms`).
///
/// # Errors
///
/// A timeout (the call may be made again: the group stays unanswered) and a fatal refusal end
/// the call. An abortable refusal fails a commit (the transaction becomes abortable); an abort
/// goes on without EndTxn, the coordinator having said the partition is not in the
/// transaction.
#[allow(clippy::too_many_arguments)]
async fn settle_unanswered_offsets(
    inner: &Inner,
    txn_id: &str,
    producer: (i64, i16),
    group: &str,
    committed: bool,
    operation: &'static str,
    timeout: Duration,
    started: Instant,
) -> Result<bool, TransactionError> {
    tracing::debug!(
        transactional_id = %txn_id,
        group,
        "writer: AddOffsetsToTxn was not answered; sent again before the transaction ends"
    );
    match add_offsets_to_txn(inner, txn_id, producer, group, operation, timeout, started).await {
        Ok(()) => Ok(true),
        Err(e) if !committed && e.is_abortable() => {
            let answered = inner
                .lock()
                .txn
                .as_ref()
                .is_some_and(|t| t.offsets_unanswered.is_none());
            if answered {
                tracing::debug!(error = %e, "writer: AddOffsetsToTxn refused during the abort");
                Ok(false)
            } else {
                Err(e)
            }
        }
        Err(e) => {
            inner.txn_error(e.clone());
            Err(e)
        }
    }
}

/// InitProducerId for `txn_id` through its transaction coordinator (the writer's one path,
/// [`ask_producer_id`]): `id`/`epoch` -1 for `init_transactions`, the current ones for a
/// KIP-360 bump (v3+; an older coordinator is asked with -1 / -1, which bumps the epoch of the
/// same transactional id too). Bounded by `timeout` from `started`.
async fn init_producer_id(
    inner: &Inner,
    txn_id: &str,
    id: i64,
    epoch: i16,
    operation: &'static str,
    timeout: Duration,
    started: Instant,
) -> Result<(i64, i16), TransactionError> {
    let bound = || timeout.saturating_sub(started.elapsed());
    // Only a bump the coordinator cannot take: a refusal (PRODUCER_FENCED...) stands.
    let new_id_after = |e: &ProducerIdError| {
        matches!(
            e,
            ProducerIdError::Request(Error::Encode(_) | Error::UnsupportedVersion { .. })
        )
    };
    ask_producer_id(inner, Some(txn_id), (id, epoch), bound, new_id_after)
        .await
        .map_err(|e| match e {
            ProducerIdError::Request(e) => client_error(operation, timeout, e, false),
            ProducerIdError::Refused(code) => code_error("InitProducerId", code, false),
        })
}

/// EndTxn (`committed`: commit or abort) through the transaction coordinator, at v4 or below
/// unless KIP-890 is in use (v5 hands back a new epoch, taken here). Bounded by `timeout` from
/// `started`; its failures move the state (fatal, abortable).
#[allow(clippy::too_many_arguments)]
async fn end_txn(
    inner: &Inner,
    txn_id: &str,
    pid: i64,
    epoch: i16,
    committed: bool,
    operation: &'static str,
    timeout: Duration,
    started: Instant,
) -> Result<(), TransactionError> {
    let v2 = inner.lock().txn.as_ref().is_some_and(|t| t.v2);
    let req = EndTxnRequest::default()
        .with_transactional_id(txn_id.to_owned())
        .with_producer_id(pid)
        .with_producer_epoch(epoch)
        .with_committed(committed);
    let left = timeout.saturating_sub(started.elapsed());
    let max = (!v2).then_some(END_TXN_CLASSIC_MAX);
    let resp = inner
        .transport
        .coordinator_round_trip(&req, CoordinatorType::Transaction, txn_id, max, left)
        .await
        .map_err(|e| {
            let e = client_error(operation, timeout, e, committed);
            inner.txn_error(e.clone());
            e
        })?;
    if !resp.error_code.is_ok() {
        // A refused abort leaves nothing to abort with: fatal.
        let e = code_error("EndTxn", resp.error_code, committed);
        inner.txn_error(e.clone());
        return Err(e);
    }
    if v2 && resp.producer_epoch >= 0 && (resp.producer_id, resp.producer_epoch) != (pid, epoch) {
        // KIP-890: every end bumps the epoch.
        inner
            .lock()
            .new_producer(resp.producer_id, resp.producer_epoch);
    }
    Ok(())
}

/// Whether the transaction coordinator of `txn_id` offers KIP-890 part 2 (see
/// [`use_transaction_v2`]): its ApiVersions' finalized `transaction.version` (asked anew) and
/// versions. `None` when it cannot be asked.
async fn transaction_v2(inner: &Inner, txn_id: &str) -> Option<bool> {
    use kafkit_protocol::{ApiKey, messages};
    let asked = async {
        let node = inner
            .transport
            .coordinator(CoordinatorType::Transaction, txn_id)
            .await?;
        let conn = inner.transport.conn(node, ConnKind::Group).await?;
        let features = conn.api_versions().await?;
        Ok::<_, Error>((conn, features))
    };
    let Ok((conn, features)) = asked.await else {
        return None;
    };
    let level = features
        .finalized_features
        .iter()
        .find(|f| f.name == TRANSACTION_VERSION)
        .map(|f| f.max_version_level);
    let v = conn.broker_versions();
    Some(use_transaction_v2(
        level,
        (
            client_max_for::<messages::ProduceRequest>(),
            client_max_for::<messages::TxnOffsetCommitRequest>(),
            client_max_for::<messages::EndTxnRequest>(),
        ),
        (
            v.get(ApiKey::Produce).map(|r| r.max),
            v.get(ApiKey::TxnOffsetCommit).map(|r| r.max),
            v.get(ApiKey::EndTxn).map(|r| r.max),
        ),
    ))
}

impl Inner {
    /// The producer id and epoch now.
    fn producer(&self) -> (i64, i16) {
        let st = self.lock();
        (st.producer.id, st.producer.epoch)
    }

    /// Runs `f` on the transaction state (a transactional writer only).
    fn with_txn<T>(
        &self,
        f: impl FnOnce(&mut Txn) -> Result<T, TransactionError>,
    ) -> Result<T, TransactionError> {
        let mut st = self.lock();
        let t = st.txn.as_mut().ok_or(TransactionError::NotTransactional)?;
        f(t)
    }

    /// [`Inner::with_txn`], then the producer id and epoch.
    fn with_txn_producer(
        &self,
        f: impl FnOnce(&mut Txn) -> Result<(), TransactionError>,
    ) -> Result<(i64, i16), TransactionError> {
        let mut st = self.lock();
        let t = st.txn.as_mut().ok_or(TransactionError::NotTransactional)?;
        f(t)?;
        Ok((st.producer.id, st.producer.epoch))
    }

    /// The transactional calls' lock (one at a time), waited for at most `timeout`.
    async fn txn_op_lock(
        &self,
        timeout: Duration,
        operation: &'static str,
    ) -> Result<tokio::sync::MutexGuard<'_, ()>, TransactionError> {
        tokio::time::timeout(timeout, self.txn_op.lock())
            .await
            .map_err(|_| TransactionError::Timeout {
                operation,
                timeout,
                last: None,
            })
    }

    /// Waits until no AddPartitionsToTxn is in flight (its partitions are then in
    /// `added`, and `started` says whether EndTxn is needed), at most until `timeout` from
    /// `started` (the call's).
    async fn added_settled(
        &self,
        timeout: Duration,
        started: Instant,
        operation: &'static str,
    ) -> Result<(), TransactionError> {
        let wait = async {
            loop {
                let notified = self.txn_added.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if !self.lock().txn.as_ref().is_some_and(|t| t.adding) {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout.saturating_sub(started.elapsed()), wait)
            .await
            .map_err(|_| TransactionError::Timeout {
                operation,
                timeout,
                last: None,
            })
    }

    /// Records a call's error in the state machine (abortable, fatal; a timeout changes
    /// nothing) and wakes the tasks so unsent batches fail with it.
    pub(crate) fn txn_error(&self, e: TransactionError) {
        let changed = {
            let mut st = self.lock();
            st.txn.as_mut().is_some_and(|t| t.fail(e))
        };
        if changed {
            self.wake_all();
        }
    }

    /// Sends one AddPartitionsToTxn for every partition waiting for it (the router calls it),
    /// bounded by `bound`. Partitions added may send; retriable failures leave them waiting
    /// (returns true: try again after the backoff); others make the transaction abortable or
    /// fatal.
    pub(crate) async fn add_partitions(&self, bound: Duration) -> bool {
        let Some(txn_id) = self.config.transactional_id.as_deref() else {
            return false;
        };
        let Some((req, ids, round)) = self.take_pending(txn_id) else {
            return false;
        };
        let answer =
            tokio::time::timeout(bound, self.transport.round_trip_within(req, bound)).await;
        let Some(Added {
            retry,
            failure,
            mut wake,
        }) = self.apply_added(answer, ids, round, bound)
        else {
            return false;
        };
        if let Some(e) = failure {
            tracing::debug!(error = %e, "writer: AddPartitionsToTxn failed");
            self.txn_error(e);
        }
        wake.sort_unstable();
        wake.dedup();
        for b in wake {
            self.broker_notify(b).notify_one();
        }
        retry
    }

    /// [`Inner::add_partitions`]'s request: the partitions waiting for AddPartitionsToTxn
    /// (taken, and `adding` set), with the transaction's round; `None` when there is nothing
    /// to add (no open transaction, one in flight already, or KIP-890's implicit adding).
    fn take_pending(&self, txn_id: &str) -> Option<(AddPartitionsToTxnRequest, Vec<PartId>, u64)> {
        let mut st = self.lock();
        let (pid, epoch) = (st.producer.id, st.producer.epoch);
        let State { txn, parts, .. } = &mut *st;
        let t = txn.as_mut()?;
        let open = matches!(
            t.state,
            TransactionPhase::InTransaction | TransactionPhase::CommittingTransaction
        );
        if t.adding || t.pending.is_empty() || !open || t.v2 {
            return None;
        }
        t.adding = true;
        let round = t.round;
        let ids = std::mem::take(&mut t.pending);
        let mut topics: Vec<add_partitions_to_txn_request::AddPartitionsToTxnTopic> = Vec::new();
        for &id in &ids {
            let p = &parts[id];
            match topics.iter_mut().find(|t| *t.name == *p.topic) {
                Some(t) => t.partitions.push(p.partition),
                None => topics.push(
                    add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                        .with_name(p.topic.to_string())
                        .with_partitions(vec![p.partition]),
                ),
            }
        }
        let req = AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(txn_id.to_owned())
            .with_v3_and_below_producer_id(pid)
            .with_v3_and_below_producer_epoch(epoch)
            .with_v3_and_below_topics(topics);
        Some((req, ids, round))
    }

    /// Applies the AddPartitionsToTxn `answer` for partitions `ids` (sent in transaction round
    /// `round`, bounded by `bound`) under the lock; `None` when the transaction ended meanwhile.
    fn apply_added(
        &self,
        answer: Result<Result<AddPartitionsToTxnResponse, Error>, tokio::time::error::Elapsed>,
        ids: Vec<PartId>,
        round: u64,
        bound: Duration,
    ) -> Option<Added> {
        let mut added = Added {
            retry: false,
            failure: None,
            wake: Vec::new(),
        };
        let mut st = self.lock();
        let State { txn, parts, .. } = &mut *st;
        let t = txn.as_mut()?;
        t.adding = false;
        self.txn_added.notify_waiters();
        if t.round != round {
            // The transaction ended meanwhile (it waited for this answer only up to its
            // call's timeout): nothing of it goes into the next one.
            return None;
        }
        let still_open = matches!(
            t.state,
            TransactionPhase::InTransaction | TransactionPhase::CommittingTransaction
        );
        match answer {
            Ok(Ok(resp)) => added.answered(t, parts, &resp, ids, still_open),
            Ok(Err(e)) if !e.is_retriable() => {
                added.failure = Some(client_error("AddPartitionsToTxn", bound, e, true));
            }
            Ok(Err(_)) | Err(_) => {
                added.retry = true;
                if still_open {
                    t.pending.extend(ids);
                }
            }
        }
        Some(added)
    }
}

/// What an AddPartitionsToTxn answer left to do once the writer's lock is released.
struct Added {
    /// Some partitions wait again: try again after the backoff.
    retry: bool,
    /// The transaction's error (abortable or fatal).
    failure: Option<TransactionError>,
    /// Leaders of the partitions added: their senders may send now.
    wake: Vec<i32>,
}

impl Added {
    /// Each partition of `ids` by its code in `resp`: added, waiting again (retriable), or
    /// the transaction's failure.
    fn answered(
        &mut self,
        t: &mut Txn,
        parts: &[PartState],
        resp: &AddPartitionsToTxnResponse,
        ids: Vec<PartId>,
        still_open: bool,
    ) {
        let mut codes = std::collections::HashMap::new();
        for tr in &resp.results_by_topic_v3_and_below {
            for p in &tr.results_by_partition {
                codes.insert(
                    (tr.name.as_str(), p.partition_index),
                    p.partition_error_code,
                );
            }
        }
        for id in ids {
            let p = &parts[id];
            let code = codes
                .get(&(&*p.topic, p.partition))
                .copied()
                .unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR);
            if code.is_ok() {
                t.added.insert(id);
                t.started = true;
                if p.leader >= 0 {
                    self.wake.push(p.leader);
                }
            } else if code.is_retriable() || code == ErrorCode::OPERATION_NOT_ATTEMPTED {
                // OPERATION_NOT_ATTEMPTED: another partition of the request failed.
                self.retry = true;
                if still_open {
                    t.pending.push(id);
                }
            } else if self.failure.is_none() {
                self.failure = Some(code_error("AddPartitionsToTxn", code, true));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCategory;
    use crate::error::produce::ProduceError;
    use crate::writer::txn_state::{PRODUCE_CLASSIC_MAX, record_failure};

    #[test]
    fn transaction_v2_needs_the_feature_and_every_version() {
        let all = (Some(12), Some(5), Some(5));
        assert!(use_transaction_v2(Some(2), (12, 5, 5), all));
        assert!(use_transaction_v2(Some(3), (13, 6, 6), all));
        // The feature below 2, or not finalized.
        assert!(!use_transaction_v2(Some(1), (12, 5, 5), all));
        assert!(!use_transaction_v2(None, (12, 5, 5), all));
        // The broker short of one version.
        assert!(!use_transaction_v2(
            Some(2),
            (12, 5, 5),
            (Some(11), Some(5), Some(5))
        ));
        assert!(!use_transaction_v2(
            Some(2),
            (12, 5, 5),
            (Some(12), Some(4), Some(5))
        ));
        assert!(!use_transaction_v2(
            Some(2),
            (12, 5, 5),
            (Some(12), Some(5), None)
        ));
        // This library short of one: the classic flow, whatever the broker says.
        assert!(!use_transaction_v2(Some(2), (11, 5, 5), all));
        assert!(!use_transaction_v2(Some(2), (12, 4, 5), all));
        // The client's version table (ops/versions.rs) allows it.
        use crate::ops::versions::client_max_for;
        use kafkit_protocol::messages;
        let ours = (
            client_max_for::<messages::ProduceRequest>(),
            client_max_for::<messages::TxnOffsetCommitRequest>(),
            client_max_for::<messages::EndTxnRequest>(),
        );
        assert!(use_transaction_v2(Some(2), ours, all));
        // The classic flow's caps stay below KIP-890's versions.
        let classic = (
            PRODUCE_CLASSIC_MAX,
            TXN_OFFSET_COMMIT_CLASSIC_MAX,
            END_TXN_CLASSIC_MAX,
        );
        assert!(!use_transaction_v2(Some(2), classic, all));
    }

    #[test]
    fn error_classes_follow_java() {
        for code in [
            ErrorCode::PRODUCER_FENCED,
            ErrorCode::INVALID_PRODUCER_EPOCH,
            ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ] {
            assert!(code_error("EndTxn", code, true).is_fatal(), "{code}");
        }
        for code in [
            ErrorCode::ILLEGAL_GENERATION,
            ErrorCode::UNKNOWN_MEMBER_ID,
            ErrorCode::FENCED_INSTANCE_ID,
            ErrorCode::GROUP_AUTHORIZATION_FAILED,
            ErrorCode::TOPIC_AUTHORIZATION_FAILED,
        ] {
            let e = code_error("TxnOffsetCommit", code, true);
            assert!(
                e.is_abortable() && !e.is_fatal() && !e.is_retriable(),
                "{code}"
            );
            assert_eq!(e.error_code(), Some(code));
        }
        // Outside a transaction (InitProducerId) every refusal is fatal.
        assert!(code_error("InitProducerId", ErrorCode::UNKNOWN_SERVER_ERROR, false).is_fatal());
        // The retriable ones are retried inside the call: only their deadline comes out.
        let last = Error::broker("EndTxn", ErrorCode::CONCURRENT_TRANSACTIONS, None);
        let e = client_error("commit_transaction", Duration::from_secs(1), last, true);
        assert!(e.is_retriable(), "{e}");
        assert_eq!(e.error_code(), Some(ErrorCode::CONCURRENT_TRANSACTIONS));
        // A record failing inside a transaction makes it abortable, or fatal when fenced; a
        // record failed by the transaction itself changes nothing.
        let fenced = ProduceError::Broker {
            code: ErrorCode::PRODUCER_FENCED,
            message: None,
            record_error: None,
        };
        assert!(record_failure(&fenced).is_some_and(|e| e.is_fatal()));
        let too_large = ProduceError::RecordTooLarge { size: 2, max: 1 };
        assert!(record_failure(&too_large).is_some_and(|e| e.is_abortable()));
        assert!(record_failure(&ProduceError::TransactionAborted).is_none());
    }

    /// KIP-1050 categories of the transaction errors: a refusal inside a transaction is
    /// abortable, also `TRANSACTION_ABORTABLE` (KIP-890) from Produce, TxnOffsetCommit or
    /// EndTxn(commit); the same code answering an abort is fatal (Java: aborting again could
    /// not end); a fenced writer is application-recoverable (a new writer); a timeout
    /// retriable; a writer without a transactional id a configuration error.
    #[test]
    fn transaction_errors_have_their_kip_1050_category() {
        let abortable = ErrorCode::TRANSACTION_ABORTABLE;
        for op in ["Produce", "TxnOffsetCommit", "EndTxn"] {
            let e = code_error(op, abortable, true);
            assert!(e.is_abortable(), "{e}");
            assert_eq!(e.category(), ErrorCategory::TransactionAbortable);
        }
        let record = ProduceError::Broker {
            code: abortable,
            message: None,
            record_error: None,
        };
        assert_eq!(record.category(), ErrorCategory::TransactionAbortable);
        assert!(record_failure(&record).is_some_and(|e| e.is_abortable()));
        let refused_abort = code_error("EndTxn", abortable, false);
        assert!(refused_abort.is_fatal());
        assert_eq!(refused_abort.category(), ErrorCategory::Fatal);
        for code in [
            ErrorCode::PRODUCER_FENCED,
            ErrorCode::INVALID_PRODUCER_EPOCH,
        ] {
            let e = code_error("EndTxn", code, true);
            assert!(e.is_fatal());
            assert_eq!(
                e.category(),
                ErrorCategory::ApplicationRecoverable,
                "{code}"
            );
            assert_eq!(
                Error::from(e).category(),
                ErrorCategory::ApplicationRecoverable
            );
        }
        let auth = code_error(
            "EndTxn",
            ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            true,
        );
        assert_eq!(auth.category(), ErrorCategory::Fatal);
        // ILLEGAL_GENERATION is application-recoverable as a group member's error, but a
        // TxnOffsetCommit refused so only aborts the transaction (Java's CommitFailedException
        // as an abortable error).
        let generation = code_error("TxnOffsetCommit", ErrorCode::ILLEGAL_GENERATION, true);
        assert_eq!(generation.category(), ErrorCategory::TransactionAbortable);
        let last = Error::broker("EndTxn", ErrorCode::CONCURRENT_TRANSACTIONS, None);
        let timeout = client_error("commit_transaction", Duration::from_secs(1), last, true);
        assert_eq!(timeout.category(), ErrorCategory::Retriable);
        assert_eq!(
            TransactionError::NotTransactional.category(),
            ErrorCategory::InvalidConfiguration
        );
        // Every category agrees with is_retriable.
        for e in [&timeout, &auth, &generation, &refused_abort] {
            assert_eq!(e.category().is_retriable(), e.is_retriable(), "{e}");
            let outer = Error::from(e.clone());
            assert_eq!(outer.category(), e.category(), "{e}");
            assert_eq!(outer.is_retriable(), e.is_retriable(), "{e}");
        }
    }
}
