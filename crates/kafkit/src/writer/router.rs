//! The router task: partition leaders from metadata for the unrouted partitions, expiry of
//! batches nobody can send, a closing writer's end, and the producer id: the one
//! InitProducerId / KIP-360 path of both the idempotent and the transactional writer.
//! Imports the state and the engine (`inner.rs`), never a task file.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse};

use super::accumulator::{Plan, ProducerStatus, State};
use super::batch::{Batch, Outcome, PartId};
use super::inner::Inner;
use crate::conn::metadata::{Metadata, PartitionMetadata, TopicMetadata};
use crate::error::Error;

/// The router: leaders for unrouted partitions, the producer id, expiry of batches nobody
/// can send, and shutting down once a closing writer has nothing left.
pub(crate) async fn router_loop(inner: Arc<Inner>) {
    let backoff = Duration::from_millis(inner.config.retry_backoff_ms.max(1));
    let mut last_refresh = Instant::now();
    loop {
        let work = RouterWork::read(&inner);
        if work.shutdown {
            return;
        }
        // Batches nobody can send end first, before any round trip below can delay them.
        let expired = {
            let mut st = inner.lock();
            let ids = st.unrouted.clone();
            let mut plan = Plan::default();
            st.expire(&ids, Instant::now(), &inner.config, &mut plan);
            plan.done
        };
        inner.finish(expired);
        let mut next_wake = producer_work(&inner, &work, backoff).await;
        route_work(&inner, &work, &mut last_refresh).await;
        let (done, stop) = end_round(&inner, backoff, &mut next_wake);
        inner.finish(done);
        if stop {
            inner.stop_tasks();
            return;
        }
        let refresh_at = last_refresh + METADATA_REFRESH;
        let t = next_wake.map_or(refresh_at, |w| w.min(refresh_at));
        tokio::select! {
            () = inner.router.notified() => {}
            () = tokio::time::sleep_until(t.into()) => {}
        }
    }
}

/// What the router has to do this round, read under the writer's lock.
struct RouterWork {
    /// A producer id (or a new epoch) to ask for.
    needs_id: bool,
    /// The topics of the unrouted partitions with batches.
    topics: Vec<Arc<str>>,
    /// The writer has shut down.
    shutdown: bool,
    /// The first delivery deadline among the unrouted batches.
    first_deadline: Option<Instant>,
}

impl RouterWork {
    fn read(inner: &Inner) -> RouterWork {
        let st = inner.lock();
        let mut topics: Vec<Arc<str>> = Vec::new();
        let mut first_deadline: Option<Instant> = None;
        for &id in &st.unrouted {
            let t = &st.parts[id].topic;
            if let Some(f) = st.front(id) {
                first_deadline = Some(first_deadline.map_or(f.deadline, |d| d.min(f.deadline)));
                if !topics.iter().any(|x| x == t) {
                    topics.push(t.clone());
                }
            }
        }
        // A bump waits until no batch is in flight (as the Java client does); the first id
        // has nothing in flight to wait for.
        // A transactional writer gets its id from `init_transactions` (and a new epoch
        // from its coordinator when a transaction aborts), never here.
        let needs_id = matches!(st.producer.status, ProducerStatus::Needed)
            && st.txn.is_none()
            && st.has_buffered()
            && (st.producer.id < 0 || !st.any_in_flight());
        RouterWork {
            needs_id,
            topics,
            shutdown: st.shutdown,
            first_deadline,
        }
    }

    /// The request timeout, or less: never past the first unrouted batch's deadline, so that
    /// batch expires on time.
    fn bound(&self, inner: &Inner) -> Duration {
        let mut bound = Duration::from_millis(inner.config.request_timeout_ms);
        if let Some(d) = self.first_deadline {
            bound = bound.min(d.saturating_duration_since(Instant::now()));
        }
        bound
    }
}

/// The producer's round: its id when needed ([`init_producer_id`]), and a transaction's
/// partitions with their first records (one AddPartitionsToTxn). Returns when to try again
/// after a failure (`backoff` from now).
async fn producer_work(
    inner: &Arc<Inner>,
    work: &RouterWork,
    backoff: Duration,
) -> Option<Instant> {
    let mut next_wake: Option<Instant> = None;
    // Bounded by the first unrouted batch's deadline too, so that batch expires on time.
    let id_bound = work.bound(inner);
    if work.needs_id
        && !tokio::time::timeout(
            id_bound.max(Duration::from_millis(1)),
            init_producer_id(inner),
        )
        .await
        .unwrap_or(false)
    {
        next_wake = Some(Instant::now() + backoff);
    }
    // A transaction's partitions with their first records: one AddPartitionsToTxn.
    if inner
        .add_partitions(Duration::from_millis(inner.config.request_timeout_ms))
        .await
    {
        next_wake = Some(next_wake.map_or(Instant::now() + backoff, |w| {
            w.min(Instant::now() + backoff)
        }));
    }
    next_wake
}

/// The routing round: leaders for the unrouted partitions' topics, and now and then
/// ([`METADATA_REFRESH`], from `last_refresh`) every known topic's.
async fn route_work(inner: &Arc<Inner>, work: &RouterWork, last_refresh: &mut Instant) {
    if !work.topics.is_empty() {
        // Never past the first unrouted batch's deadline, so it expires on time.
        let bound = work.bound(inner);
        route(
            inner,
            &work.topics,
            bound.max(Duration::from_millis(1)),
            false,
        )
        .await;
    }
    // Now and then, whether routed or not: partitions added to the topics, and leaders
    // that moved without an error telling (the transport refetches after
    // metadata_max_age_ms).
    if last_refresh.elapsed() >= METADATA_REFRESH {
        *last_refresh = Instant::now();
        let known: Vec<Arc<str>> = inner.lock().topics.keys().cloned().collect();
        if !known.is_empty() {
            let bound = Duration::from_millis(inner.config.request_timeout_ms);
            route(inner, &known, bound, true).await;
        }
    }
}

/// The round's end, under the lock: the unrouted batches past their deadline (to end), the
/// next wake-up moved up to the first unrouted deadline or `backoff` from now, and whether a
/// closing writer with nothing left stops now (then marked shut down).
fn end_round(
    inner: &Inner,
    backoff: Duration,
    next_wake: &mut Option<Instant>,
) -> (Vec<(Batch, Outcome)>, bool) {
    let now = Instant::now();
    let mut st = inner.lock();
    let ids = st.unrouted.clone();
    let mut plan = Plan::default();
    st.expire(&ids, now, &inner.config, &mut plan);
    for &id in &st.unrouted {
        if let Some(f) = st.front(id) {
            *next_wake = Some(next_wake.map_or(f.deadline, |w| w.min(f.deadline)));
            *next_wake = Some(next_wake.map_or(now + backoff, |w| w.min(now + backoff)));
        }
    }
    let stop = st.closing && !st.has_buffered() && plan.done.is_empty();
    if stop {
        st.shutdown = true;
    }
    (plan.done, stop)
}

/// How often the router re-reads the metadata of the writer's topics.
const METADATA_REFRESH: Duration = Duration::from_secs(30);

/// Finds leaders for the unrouted partitions of `topics` from metadata (at most `bound` spent
/// on it); with `every_partition`, also moves routed partitions whose leader changed, and
/// learns partitions added to the topics.
async fn route(inner: &Arc<Inner>, topics: &[Arc<str>], bound: Duration, every_partition: bool) {
    let names: Vec<&str> = topics.iter().map(|t| &**t).collect();
    // Bounded, so the router still expires batches when no broker answers.
    let md = match tokio::time::timeout(bound, inner.transport.metadata_for(&names)).await {
        Ok(Ok(md)) => md,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "writer: metadata refresh failed");
            return;
        }
        Err(_) => {
            tracing::debug!("writer: metadata refresh timed out");
            return;
        }
    };
    let mut wake = Vec::new();
    {
        let mut st = inner.lock();
        for t in &md.topics {
            if st.topics.contains_key(t.name.as_str()) {
                st.set_topic_metadata(t, &md);
            }
        }
        let moves = if every_partition {
            moved_leaders(&st, &md)
        } else {
            unrouted_leaders(&st, &md)
        };
        for (id, leader) in moves {
            if st.set_leader(id, leader) {
                inner.spawn_sender(&mut st, leader);
            }
            wake.push(leader);
        }
        let mut stale: Vec<&str> = Vec::new();
        for &id in &st.unrouted {
            let topic = &*st.parts[id].topic;
            if st.has_batches(id) && !stale.contains(&topic) {
                stale.push(topic);
            }
        }
        // Some leaders are still unknown (or not among the listed brokers, as when a broker is
        // down): the next attempt, after the backoff, asks again for those topics.
        inner.transport.invalidate_topics(stale);
    }
    wake.sort_unstable();
    wake.dedup();
    for b in wake {
        inner.broker_notify(b).notify_one();
    }
}

/// A partition's leader in `md` when it is one of the listed brokers.
fn leader_of(md: &Metadata, p: &PartitionMetadata) -> Option<i32> {
    Some(p.leader_id).filter(|l| *l >= 0 && md.broker(*l).is_some())
}

/// The moves, found in one pass over the answer's partitions, each looked up by index:
/// every known partition whose leader in `md` differs from the writer's (O(partitions), never
/// partitions x topics).
fn moved_leaders(st: &State, md: &Metadata) -> Vec<(PartId, i32)> {
    let mut moves: Vec<(PartId, i32)> = Vec::new();
    for t in &md.topics {
        let Some(known) = st.topics.get(t.name.as_str()) else {
            continue;
        };
        for p in &t.partitions {
            let id = usize::try_from(p.partition)
                .ok()
                .and_then(|i| known.ids.get(i).copied().flatten());
            if let (Some(id), Some(leader)) = (id, leader_of(md, p))
                && st.parts[id].leader != leader
            {
                moves.push((id, leader));
            }
        }
    }
    moves
}

/// The unrouted partitions' leaders in `md`, each partition looked up by index.
fn unrouted_leaders(st: &State, md: &Metadata) -> Vec<(PartId, i32)> {
    let mut moves: Vec<(PartId, i32)> = Vec::new();
    let by_name: HashMap<&str, &TopicMetadata> =
        md.topics.iter().map(|t| (t.name.as_str(), &**t)).collect();
    for &id in &st.unrouted {
        let part = &st.parts[id];
        let Some(t) = by_name.get(&*part.topic) else {
            continue;
        };
        let p = usize::try_from(part.partition)
            .ok()
            .and_then(|i| t.partitions.get(i))
            .filter(|p| p.partition == part.partition)
            .or_else(|| t.partitions.iter().find(|p| p.partition == part.partition));
        if let Some(leader) = p.and_then(|p| leader_of(md, p)) {
            moves.push((id, leader));
        }
    }
    moves
}

/// Gets a producer id, or a new epoch for the current one (KIP-360, InitProducerId v3+ with
/// the current id and epoch; older brokers hand out a new id). Returns false to try again
/// after the backoff.
async fn init_producer_id(inner: &Arc<Inner>) -> bool {
    let (id, epoch, bump_failed) = {
        let st = inner.lock();
        (st.producer.id, st.producer.epoch, st.producer.bump_failed)
    };
    // A bump (KIP-360) first when there is an id; when the broker refuses it (it may not know
    // the id any more, not allow bumps of idempotent ids, or predate InitProducerId v3), a new
    // id at once; when the bump fails otherwise (no answer: a broker that cannot bump may
    // never answer one), a new id at the next attempt. Either way every partition's sequence
    // restarts at 0, so a new id is always safe; a bump only keeps the id.
    let bump = id >= 0 && !bump_failed;
    let current = if bump {
        // Marked before the attempt, so that a bump cut by the router's bound counts too
        // (`new_producer` clears it).
        inner.lock().producer.bump_failed = true;
        (id, epoch)
    } else {
        (-1, -1)
    };
    let bound = || Duration::from_millis(inner.config.request_timeout_ms);
    let new_id_after = |e: &ProducerIdError| {
        if e.is_retriable() {
            tracing::info!(error = %e, "writer: epoch bump failed; the next attempt asks for a new producer id");
            false
        } else {
            tracing::info!(error = %e, "writer: epoch bump refused; asking for a new producer id");
            true
        }
    };
    let result = ask_producer_id(inner, None, current, bound, new_id_after)
        .await
        .map_err(Error::from);
    match result {
        Ok((id, epoch)) => {
            tracing::debug!(
                producer_id = id,
                producer_epoch = epoch,
                "writer: producer id"
            );
            let brokers: Vec<i32> = {
                let mut st = inner.lock();
                st.new_producer(id, epoch);
                st.brokers.keys().copied().collect()
            };
            wake_brokers(inner, brokers);
            true
        }
        Err(e) if e.is_retriable() => {
            tracing::debug!(error = %e, "writer: InitProducerId failed; retrying");
            false
        }
        Err(e) if !inner.config.idempotence_explicit && cannot_be_idempotent(&e) => {
            // Idempotence was only the default: go on without it (as the Java client does when
            // the cluster does not allow it), rather than failing every record.
            tracing::warn!(error = %e, "writer: no producer id; writing without idempotence");
            let brokers: Vec<i32> = {
                let mut st = inner.lock();
                st.idempotent = false;
                st.producer.status = ProducerStatus::Ready;
                st.brokers.keys().copied().collect()
            };
            wake_brokers(inner, brokers);
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "writer: InitProducerId failed for good");
            let brokers: Vec<i32> = {
                let mut st = inner.lock();
                st.producer.status = ProducerStatus::Failed(e.into());
                st.brokers.keys().copied().collect()
            };
            wake_brokers(inner, brokers);
            inner.router.notify_one();
            true
        }
    }
}

/// Wakes the senders of `brokers` (a new producer id, or none to wait for).
fn wake_brokers(inner: &Inner, brokers: Vec<i32>) {
    for b in brokers {
        inner.broker_notify(b).notify_one();
    }
}

/// Whether an InitProducerId failure means this cluster (or this principal) cannot have an
/// idempotent producer: the API is missing, or `IdempotentWrite` is not allowed.
fn cannot_be_idempotent(e: &Error) -> bool {
    matches!(e, Error::UnsupportedVersion { .. })
        || e.error_code().is_some_and(|c| {
            c == ErrorCode::CLUSTER_AUTHORIZATION_FAILED
                || c == ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        })
}

/// Why an InitProducerId gave no producer id.
#[derive(Debug)]
pub(super) enum ProducerIdError {
    /// The request failed without an answer (the transport retried what it could).
    Request(Error),
    /// The broker answered with this error code.
    Refused(ErrorCode),
}

impl ProducerIdError {
    /// Whether asking again may help.
    fn is_retriable(&self) -> bool {
        match self {
            ProducerIdError::Request(e) => e.is_retriable(),
            ProducerIdError::Refused(code) => code.is_retriable(),
        }
    }
}

impl std::fmt::Display for ProducerIdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProducerIdError::Request(e) => e.fmt(f),
            ProducerIdError::Refused(code) => Error::broker("InitProducerId", *code, None).fmt(f),
        }
    }
}

impl From<ProducerIdError> for Error {
    fn from(e: ProducerIdError) -> Self {
        match e {
            ProducerIdError::Request(e) => e,
            ProducerIdError::Refused(code) => Error::broker("InitProducerId", code, None),
        }
    }
}

/// The one InitProducerId path (KIP-98, KIP-360) of the idempotent writer (`txn_id` `None`:
/// to any broker, no transaction timeout) and the transactional one (its transactional id,
/// routed by the transport to its transaction coordinator, with the writer's
/// `transaction_timeout`). `current` (-1, -1) asks for a new id; the current id and epoch ask
/// for a new epoch of that id (v3+: brokers below v3 cannot take them, which is a
/// non-retriable encode error). When such a bump fails and `new_id_after` says so, a new id
/// is asked for at once (-1, -1: a transactional id gets a new epoch of the same id that way
/// too). Each request is bounded by `bound()` (asked anew for each), within which the
/// transport fails over and retries.
pub(super) async fn ask_producer_id(
    inner: &Inner,
    txn_id: Option<&str>,
    current: (i64, i16),
    bound: impl Fn() -> Duration,
    new_id_after: impl FnOnce(&ProducerIdError) -> bool,
) -> Result<(i64, i16), ProducerIdError> {
    // The transport's calls are awaited here, not in a helper, so a caller's future (a
    // transaction's end) gets no deeper (DESIGN.md, Non-obvious: Conn).
    let req = producer_id_request(inner, txn_id, current);
    let result = producer_id_answer(inner.transport.round_trip_within(req, bound()).await);
    match result {
        Err(e) if current.0 >= 0 && new_id_after(&e) => {
            let req = producer_id_request(inner, txn_id, (-1, -1));
            producer_id_answer(inner.transport.round_trip_within(req, bound()).await)
        }
        other => other,
    }
}

/// [`ask_producer_id`]'s request for `(id, epoch)`.
fn producer_id_request(
    inner: &Inner,
    txn_id: Option<&str>,
    (id, epoch): (i64, i16),
) -> InitProducerIdRequest {
    let transaction_timeout_ms = match txn_id {
        Some(_) => i32::try_from(inner.config.transaction_timeout_ms).unwrap_or(i32::MAX),
        None => i32::MAX,
    };
    InitProducerIdRequest::default()
        .with_transactional_id(txn_id.map(str::to_owned))
        .with_transaction_timeout_ms(transaction_timeout_ms)
        .with_producer_id(id)
        .with_producer_epoch(epoch)
}

/// The producer id and epoch of an InitProducerId answer, or why there is none.
fn producer_id_answer(
    result: Result<InitProducerIdResponse, Error>,
) -> Result<(i64, i16), ProducerIdError> {
    let resp = result.map_err(ProducerIdError::Request)?;
    if !resp.error_code.is_ok() {
        return Err(ProducerIdError::Refused(resp.error_code));
    }
    Ok((resp.producer_id, resp.producer_epoch))
}
