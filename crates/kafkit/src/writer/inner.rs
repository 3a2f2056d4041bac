//! The writer's engine: [`Inner`], the state every task and every [`Writer`](super::Writer)
//! clone share (the accumulator under the state lock, each partition's open batch in its slot
//! under a lock of its own (open.rs), the buffer's permits, the wake-ups), the way in of a
//! record (prepare, the slot's fast path or buffer space and enqueue), the way out of a batch (its futures
//! resolved, its partition released), and the lookup of a topic not known yet
//! ([`lookup_loop`]). The facade (`mod.rs`) and the task and phase files import this file; it
//! imports the state and vocabulary below it, never a task file ([`Tasks`]) nor the facade.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kafkit_balancer::{BalanceError, Record as BalancerRecord};
use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::{MetadataRequest, metadata_request};
use kafkit_protocol::records::{BATCH_HEADER_SIZE, RecordBatchEncoder, RecordBatchOptions};
use tokio::sync::{Notify, Semaphore, TryAcquireError, watch};

use super::accumulator::{self, State};
use super::batch::{self, Batch, DeliveryFuture, Outcome, PartId, PendingRecord};
use super::config::Config;
use super::open::{self, Open, SharedRoutes};
use super::record::ProducerRecordRef;
use super::stats::Stats;
use super::txn_state::{Txn, record_failure};
use crate::error::Error;
use crate::error::produce::ProduceError;
use crate::time::now_ms;
use crate::transport::{ConnKind, Transport};

/// A task's future, boxed: its type is the task file's.
pub(super) type TaskFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// The writer's tasks, as the facade (`mod.rs`) wires them: the engine starts them without
/// naming the task files (`router.rs`, `sender.rs`), which import this one.
pub(super) struct Tasks {
    /// The router (once per writer, on first use).
    pub(super) router: fn(Arc<Inner>) -> TaskFuture,
    /// One broker's sender (once per broker the writer sends to).
    pub(super) sender: fn(Arc<Inner>, i32) -> TaskFuture,
}

/// The writer's shared state.
pub(crate) struct Inner {
    pub(crate) transport: Transport,
    pub(crate) config: Config,
    state: Mutex<State>,
    /// The topics and partition slots `send` reads without the state lock (open.rs).
    routes: SharedRoutes,
    /// Whether `send` may append without the state lock ([`Inner::append_fast`]): not for a
    /// transactional writer, whose every record is checked against the transaction's state
    /// under that lock.
    fast_path: bool,
    pub(super) bytes: Semaphore,
    records: Option<Semaphore>,
    pub(crate) stats: Stats,
    /// This Writer's share of the buffered gauges (cargo feature `metrics`).
    buffered_meter: crate::ops::meter::Buffered,
    /// This Writer's metric handles per topic and node (cargo feature `metrics`).
    pub(crate) meter: crate::ops::meter::ProduceMeter,
    pub(crate) router: Notify,
    notifies: Mutex<HashMap<i32, Arc<Notify>>>,
    /// Topic name -> the one metadata lookup every sender waiting for that topic shares.
    lookups: Mutex<HashMap<String, Arc<TopicLookup>>>,
    /// What the lookups of a topic not known yet learnt last, for `try_send`.
    pub(super) topic_errors: Mutex<HashMap<String, ProduceError>>,
    shutdown: watch::Sender<bool>,
    started: AtomicBool,
    /// Set with `State::closing`, read without the lock on the way in.
    closing: AtomicBool,
    /// Serializes the transactional calls (`init_transactions`, `commit_transaction`...).
    pub(super) txn_op: tokio::sync::Mutex<()>,
    /// Notified when an AddPartitionsToTxn answer was applied (a transaction's end waits).
    pub(super) txn_added: Notify,
    /// The writer's tasks, started from here ([`Tasks`]).
    tasks: &'static Tasks,
    /// Tests: how many request tasks still to make panic (after sending, before judging).
    #[cfg(test)]
    pub(crate) panic_requests: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A record checked and sized, before its partition is chosen; it borrows the caller's record.
pub(super) struct Prepared<'a> {
    /// The record's own topic; `None` for the writer's default topic (not copied per record).
    pub(super) own_topic: Option<&'a str>,
    partition: Option<i32>,
    record: PendingRecord<'a>,
    /// Bytes charged to `buffer_memory`.
    pub(super) cost: usize,
    /// Goes in a batch of its own (larger than `batch_size` before compression).
    alone: bool,
    /// The caller wants the record's [`DeliveryFuture`] (`send`; not `send_detached`).
    want_future: bool,
}

/// What [`Inner::send_at_once`] did: the record's outcome, or the record, checked, to wait
/// with (only a record that waits is moved into the `send` future).
pub(super) enum AtOnce<'a> {
    Done(Result<Option<DeliveryFuture>, ProduceError>),
    Wait(Prepared<'a>),
}

/// What [`Inner::enqueue`] did with a record whose buffer space is held.
pub(super) enum Enqueued {
    /// Taken (the record's future, when one was asked for), or refused (the space was given
    /// back).
    Done(Result<Option<DeliveryFuture>, ProduceError>),
    /// Its topic is not known yet and the caller asked to be told (nothing was done, the
    /// space was given back): `send` learns the topic first.
    UnknownTopic,
}

impl Enqueued {
    /// The outcome for the caller of `enqueue(p, ..)`.
    pub(super) fn into_result(self, p: &Prepared) -> Result<Option<DeliveryFuture>, ProduceError> {
        match self {
            Enqueued::Done(r) => r,
            Enqueued::UnknownTopic => Err(no_metadata(
                p.own_topic.unwrap_or_default(),
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            )),
        }
    }
}

/// Why [`ProduceError::Closed`] refuses a record after `close` (or the last handle's drop).
const CLOSE_CALLED: &str = "close was called; it takes no more records";
/// Why [`ProduceError::Closed`] refuses a record outside a tokio runtime.
const NO_RUNTIME: &str = "it needs a tokio runtime, and none is running here";
/// The most topics whose last lookup error `try_send` remembers (a bound on names that never
/// resolve); past it the memory starts afresh.
const MAX_TOPIC_ERRORS: usize = 1_024;

/// One metadata lookup of a topic the writer has not learned yet, shared by every `send`
/// and `try_send` waiting for it.
struct TopicLookup {
    state: watch::Sender<LookupState>,
    /// The lookup goes on at least until then, even when nobody waits (`try_send`).
    keep_until: Mutex<Instant>,
}

/// What a topic lookup learnt so far.
#[derive(Debug, Clone, Default)]
pub(super) struct LookupState {
    /// The topic's last error code in a Metadata answer.
    last_code: Option<ErrorCode>,
    /// The last client error (no answer at all), when no code came.
    last_error: Option<ProduceError>,
    /// The end: known (`Ok`), or an error retrying cannot fix.
    done: Option<Result<(), ProduceError>>,
}

/// The future of a record appended with one asked for (`send`, `try_send`): always there, so
/// the error never reaches anyone (a typed one rather than a panic).
pub(super) fn asked_future(future: Option<DeliveryFuture>) -> Result<DeliveryFuture, ProduceError> {
    future.ok_or(ProduceError::Closed("it made no future for the record"))
}

/// The error a record gets when `topic` has no usable metadata (`code`).
fn no_metadata(topic: &str, code: ErrorCode) -> ProduceError {
    ProduceError::TopicMetadata {
        topic: topic.to_owned(),
        code,
    }
}

/// Refuses a topic name that is not a legal one before any lookup (the transport's check).
pub(super) fn check_topic_name(topic: &str) -> Result<(), ProduceError> {
    if crate::ops::topics::is_valid_topic_name(topic) {
        Ok(())
    } else {
        Err(ProduceError::InvalidTopic {
            topic: topic.to_owned(),
        })
    }
}

/// The lookup of `topic` (see [`Inner::learn_topic`]): Metadata for the topic until it lists
/// partitions or an error retrying cannot fix, while someone waits (or `keep_until` has not
/// passed), each attempt bounded by the request timeout and followed by the writer's
/// KIP-580 backoff (`retry_backoff` doubling to `retry_backoff_max`, ±20 %). An unknown topic
/// is asked to be created once (unless auto topic creation is off).
async fn lookup_loop(weak: std::sync::Weak<Inner>, topic: String, lookup: Arc<TopicLookup>) {
    let mut attempts = 0u32;
    let mut asked_creation = false;
    loop {
        let Some(inner) = weak.upgrade() else { break };
        if attempts > 0 && lookup_abandoned(&inner, &topic, &lookup) {
            return;
        }
        let wait = Duration::from_millis(inner.config.request_timeout_ms);
        // One attempt per round: this loop is the retry loop. The transport's own retrying
        // `metadata_for` inside a timeout would hide the real cause (a refused connection,
        // naming the address) behind that timeout.
        let fetched = tokio::time::timeout(wait, inner.transport.refresh_once(&[topic.as_str()]))
            .await
            .unwrap_or(Err(Error::Timeout {
                operation: "Metadata",
                timeout: wait,
            }));
        let done = match fetched {
            Ok(md) => lookup_answer(&inner, &topic, &lookup, &md, wait, &mut asked_creation).await,
            Err(e) => lookup_failure(&inner, &topic, &lookup, e),
        };
        if let Some(done) = done {
            inner
                .lookups
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&topic);
            lookup.state.send_modify(|s| s.done = Some(done));
            return;
        }
        attempts += 1;
        let backoff = crate::transport::Backoff {
            base_ms: inner.config.retry_backoff_ms.max(10),
            max_ms: inner.config.retry_backoff_max_ms,
        };
        drop(inner);
        tokio::time::sleep(backoff.delay(attempts)).await;
    }
}

/// Whether nobody waits for the lookup of `topic` any more (and its `keep_until` passed): it
/// is then removed, under the map's lock so no one subscribes meanwhile, and `try_send` goes
/// on answering with what it last learnt.
fn lookup_abandoned(inner: &Inner, topic: &str, lookup: &TopicLookup) -> bool {
    // Nobody waits any more: end, under the map's lock so no one subscribes meanwhile.
    let mut lookups = inner
        .lookups
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let keep = *lookup
        .keep_until
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if lookup.state.receiver_count() == 0 && Instant::now() >= keep {
        // Given up: `try_send` goes on answering with what it last learnt.
        lookups.remove(topic);
        return true;
    }
    false
}

/// A Metadata answer `md` for the lookup of `topic`: the end (known, or a code retrying cannot
/// fix), or `None` to ask again (an unknown topic is asked to be created once, unless auto
/// topic creation is off).
async fn lookup_answer(
    inner: &Inner,
    topic: &str,
    lookup: &TopicLookup,
    md: &crate::conn::metadata::Metadata,
    wait: Duration,
    asked_creation: &mut bool,
) -> Option<Result<(), ProduceError>> {
    match md.topic(topic) {
        Some(t) if t.error_code.is_ok() && !t.partitions.is_empty() => {
            inner.lock().set_topic_metadata(t, md);
            inner.note_topic_error(topic, None);
            Some(Ok(()))
        }
        found => {
            let code = match found {
                Some(t) if !t.error_code.is_ok() => t.error_code,
                _ => ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            };
            lookup.state.send_modify(|s| s.last_code = Some(code));
            inner.note_topic_error(topic, Some(no_metadata(topic, code)));
            if !code.is_retriable() {
                return Some(Err(no_metadata(topic, code)));
            }
            if code == ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                && inner.config.allow_auto_topic_creation
                && !*asked_creation
            {
                *asked_creation = true;
                let _ = tokio::time::timeout(wait, inner.ask_topic_creation(topic)).await;
            }
            inner.transport.invalidate_topics([topic]);
            None
        }
    }
}

/// A Metadata request of the lookup of `topic` that failed with `e`: `None` to ask again
/// (retriable), else the end, with the topic's last code when one came.
fn lookup_failure(
    inner: &Inner,
    topic: &str,
    lookup: &TopicLookup,
    e: Error,
) -> Option<Result<(), ProduceError>> {
    if e.is_retriable() {
        let e = ProduceError::from(e);
        if lookup.state.borrow().last_code.is_none() {
            inner.note_topic_error(topic, Some(e.clone()));
        }
        lookup.state.send_modify(|s| s.last_error = Some(e));
        None
    } else {
        let code = lookup.state.borrow().last_code;
        let e = code.map_or_else(|| e.into(), |c| no_metadata(topic, c));
        inner.note_topic_error(topic, Some(e.clone()));
        Some(Err(e))
    }
}

/// What a lookup learnt so far, as the error of a record: the topic's last error code, else
/// the last client error.
fn lookup_error(topic: &str, state: &LookupState) -> Option<ProduceError> {
    state
        .last_code
        .map(|code| no_metadata(topic, code))
        .or_else(|| state.last_error.clone())
}

/// The topic of a prepared record: its own, or the writer's default (checked in `prepare`).
pub(super) fn topic_name<'a>(own: Option<&'a str>, config: &'a Config) -> &'a str {
    own.or(config.topic.as_deref()).unwrap_or_default()
}

impl Inner {
    /// The engine of a new writer over `transport` with `config`; `tasks` starts its tasks.
    pub(super) fn new(transport: Transport, config: Config, tasks: &'static Tasks) -> Arc<Inner> {
        let bytes = Semaphore::new(config.buffer_memory);
        let records = config.max_buffered_records.map(Semaphore::new);
        let mut state = State::new(config.idempotent);
        state.spares = accumulator::Spares::for_buffer(config.buffer_memory);
        state.limits = (config.buffer_memory, config.max_buffered_records);
        let routes = state.routes.clone();
        let fast_path = config.transactional_id.is_none();
        if config.transactional_id.is_some() {
            state.txn = Some(Txn::new());
        }
        Arc::new(Inner {
            state: Mutex::new(state),
            routes,
            fast_path,
            transport,
            config,
            bytes,
            records,
            stats: Stats::default(),
            buffered_meter: crate::ops::meter::Buffered::default(),
            meter: crate::ops::meter::ProduceMeter::default(),
            router: Notify::new(),
            notifies: Mutex::new(HashMap::new()),
            lookups: Mutex::new(HashMap::new()),
            topic_errors: Mutex::new(HashMap::new()),
            shutdown: watch::Sender::new(false),
            started: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            txn_op: tokio::sync::Mutex::new(()),
            txn_added: Notify::new(),
            tasks,
            #[cfg(test)]
            panic_requests: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tests: panics when a request task was asked to (`panic_requests`), to check that a
    /// task ending without its outcome gives everything back (`RequestGuard`).
    #[cfg(test)]
    pub(crate) fn panic_if_asked(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        if self
            .panic_requests
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            panic!("a request task panics, as asked by the test");
        }
    }

    /// Starts the router on first use (needs a tokio runtime).
    pub(super) fn ensure_started(self: &Arc<Self>) -> Result<(), ProduceError> {
        if self.started.load(Ordering::Acquire) {
            return Ok(());
        }
        let handle =
            tokio::runtime::Handle::try_current().map_err(|_| ProduceError::Closed(NO_RUNTIME))?;
        if !self.started.swap(true, Ordering::AcqRel) {
            handle.spawn((self.tasks.router)(self.clone()));
        }
        Ok(())
    }

    /// Checks the record and computes its size; `want_future`: the caller wants the record's
    /// [`DeliveryFuture`].
    #[inline(always)]
    pub(super) fn prepare<'a>(
        &self,
        r: ProducerRecordRef<'a>,
        want_future: bool,
    ) -> Result<Prepared<'a>, ProduceError> {
        let own_topic = match r.topic {
            Some(t) if !t.is_empty() => Some(t),
            Some(_) => return Err(ProduceError::NoTopic),
            None if self.config.topic.is_some() => None,
            None => return Err(ProduceError::NoTopic),
        };
        if self.closing.load(Ordering::Acquire) {
            return Err(ProduceError::Closed(CLOSE_CALLED));
        }
        // A negative partition is refused with the topic's partition count, once that is known.
        if let Some(ts) = r.timestamp
            && ts < 0
        {
            return Err(ProduceError::InvalidRecord(format!(
                "timestamp {ts} is negative (leave it unset for \"now\")"
            )));
        }
        // Sized once here: the buffer charge, the batch limit and the encoder all derive the
        // record's size from `PendingRecord::body`.
        let record = PendingRecord::new(
            r.timestamp.unwrap_or_else(now_ms),
            r.key,
            r.value,
            r.headers,
        )
        .map_err(|_| ProduceError::RecordTooLarge {
            size: usize::MAX,
            max: self.config.batch_size,
        })?;
        let size = record.cost();
        let alone_size = BATCH_HEADER_SIZE + size;
        let max = self.config.batch_size;
        let mut alone = false;
        if alone_size > max {
            let compressed = self.compressed_size(&record)?;
            if compressed > max {
                return Err(ProduceError::RecordTooLarge {
                    size: compressed,
                    max,
                });
            }
            alone = true;
        }
        // Buffer space is charged uncompressed: a record that compresses to fit a batch but
        // is larger than the whole buffer could never be taken (as Java's
        // RecordTooLargeException for `buffer.memory`), and would wait in `send` until
        // `max_block`.
        let room = self.config.buffer_memory.min(u32::MAX as usize);
        if size > room {
            return Err(ProduceError::RecordTooLarge { size, max: room });
        }
        Ok(Prepared {
            own_topic,
            partition: r.partition,
            record,
            cost: size,
            alone,
            want_future,
        })
    }

    /// `send`'s common case, room in the buffer and a known topic, without waiting: the
    /// record joins its partition's open batch under the partition's slot lock only
    /// ([`Inner::append_fast`]), else the writer's state lock is taken once (in `enqueue`); no
    /// clock or timer is read for `max_block`. Otherwise the checked record comes back to wait
    /// for its topic or for room.
    /// A plain function, so that the checked record stays on its stack (the `send` future
    /// keeps it only when it must wait). `enqueue` copies the record's key, value and headers
    /// into the batch; the caller's own are dropped (a [`ProducerRecord`]'s) after the
    /// writer's lock.
    pub(super) fn send_at_once<'a>(
        self: &Arc<Self>,
        record: ProducerRecordRef<'a>,
        want_future: bool,
    ) -> Result<AtOnce<'a>, ProduceError> {
        let mut prepared = self.prepare(record, want_future)?;
        if let Some(result) = self.append_fast(&mut prepared) {
            return Ok(AtOnce::Done(result));
        }
        if self.try_acquire_quietly(prepared.cost) {
            match self.enqueue(&prepared, true) {
                Enqueued::Done(result) => return Ok(AtOnce::Done(result)),
                Enqueued::UnknownTopic => {}
            }
        }
        Ok(AtOnce::Wait(prepared))
    }

    /// Appends the record to its partition's open batch under that partition's slot lock
    /// only, charging the slot's buffer credit (topped up in chunks): when the writer is not
    /// transactional, its topic and the partition's slot are known, the partition has a leader
    /// and an open batch the record fits in and does not fill, and the buffer has room now. `None`, with
    /// nothing done, otherwise: the caller takes the state lock (`enqueue`). A partition the
    /// balancer chose is kept in `p`, so the slow path does not ask the balancer twice.
    ///
    /// No clock read, no allocation, no atomic operation on memory other partitions' senders
    /// write (the routes are read through `arc-swap`'s thread-local debts).
    #[inline(always)]
    pub(super) fn append_fast(
        &self,
        p: &mut Prepared,
    ) -> Option<Result<Option<DeliveryFuture>, ProduceError>> {
        if !self.fast_path {
            return None;
        }
        self.append_routed(&self.routes.load(), p)
    }

    /// [`Inner::append_fast`] with the writer's `routes`.
    #[inline(always)]
    fn append_routed(
        &self,
        routes: &open::Routes,
        p: &mut Prepared,
    ) -> Option<Result<Option<DeliveryFuture>, ProduceError>> {
        let topic = topic_name(p.own_topic, &self.config);
        let t = routes.topics.get(topic)?;
        let partition = match p.partition {
            Some(x) => x,
            None => {
                let chosen = self.balance(topic, &t.partitions, &t.available, p).ok()?;
                p.partition = Some(chosen);
                chosen
            }
        };
        let slot = t.slots.get(usize::try_from(partition).ok()?)?.as_ref()?;
        let mut open = slot.lock();
        let open = &mut *open;
        if !open.routed {
            return None;
        }
        let size = {
            let batch = open.batch.as_ref()?;
            let size = open::fits(batch, &p.record, p.alone, &self.config)?;
            if open::would_fill(batch, size, &self.config) {
                return None;
            }
            size
        };
        if !self.top_up(open, p.cost, (routes.credit_bytes, routes.credit_records)) {
            return None;
        }
        let batch = open.batch.as_mut()?;
        let (future, _) = open::add_record(
            batch,
            &p.record,
            size,
            p.cost,
            false,
            &self.config,
            p.want_future,
        )
        .ok()?;
        open.credit_bytes -= p.cost;
        if self.records.is_some() {
            open.credit_records -= 1;
        }
        Some(Ok(future))
    }

    /// The record's size as a batch of its own with the writer's codec (for oversized
    /// records only).
    fn compressed_size(&self, r: &PendingRecord<'_>) -> Result<usize, ProduceError> {
        let c = self.config.compression;
        if c.compression() == kafkit_compress::Compression::None {
            return Ok(BATCH_HEADER_SIZE + r.cost());
        }
        let mut buf = BytesMut::new();
        let options = RecordBatchOptions::new()
            .compression(c.compression())
            .compression_level(c.level());
        let mut enc = RecordBatchEncoder::new(&mut buf, options).map_err(Error::from)?;
        enc.append_parts(r.timestamp, r.key, r.value, r.headers)
            .map_err(Error::from)?;
        Ok(enc.finish().map_err(Error::from)?)
    }

    pub(super) fn topic_known(&self, topic: &str) -> bool {
        self.lock()
            .topics
            .get(topic)
            .is_some_and(|t| !t.partitions.is_empty())
    }

    /// Waits until `topic`'s metadata lists partitions, or `deadline` (`max_block` from the
    /// send) passes: then [`ProduceError::BlockTimeout`] with the topic's last error as its
    /// cause. An error retrying cannot fix fails at once. Every caller waiting for one topic
    /// shares ONE lookup ([`Inner::topic_lookup`], [`lookup_loop`]): a thousand sends to a
    /// missing topic cost the Metadata requests of one, spaced by the KIP-580 backoff.
    pub(super) async fn learn_topic(
        self: &Arc<Self>,
        topic: &str,
        deadline: Instant,
        max_block: Duration,
    ) -> Result<(), ProduceError> {
        let mut rx = self.topic_lookup(topic, None);
        let waited = tokio::time::timeout_at(deadline.into(), async {
            rx.wait_for(|s| s.done.is_some())
                .await
                .map(|s| s.done.clone().unwrap_or(Ok(())))
        })
        .await;
        match waited {
            Ok(Ok(done)) => done,
            Ok(Err(_)) => Err(ProduceError::Closed(
                "it stopped while the topic's metadata was looked up",
            )),
            Err(_) => {
                let cause = lookup_error(topic, &rx.borrow()).unwrap_or(ProduceError::Client(
                    Arc::new(Error::Timeout {
                        operation: "Metadata",
                        timeout: max_block,
                    }),
                ));
                Err(ProduceError::BlockTimeout {
                    topic: topic.to_owned(),
                    max_block,
                    cause: Some(Box::new(cause)),
                })
            }
        }
    }

    /// Remembers what a lookup of `topic` learnt (`None`: the topic is known now).
    fn note_topic_error(&self, topic: &str, error: Option<ProduceError>) {
        let mut errors = self
            .topic_errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match error {
            Some(e) => {
                if errors.len() >= MAX_TOPIC_ERRORS && !errors.contains_key(topic) {
                    errors.clear();
                }
                errors.insert(topic.to_owned(), e);
            }
            None => {
                errors.remove(topic);
            }
        }
    }

    /// Subscribes to the pending lookup of `topic`, starting it when there is none. With
    /// `keep_for`, the lookup goes on at least that long even when nobody waits (`try_send`).
    pub(super) fn topic_lookup(
        self: &Arc<Self>,
        topic: &str,
        keep_for: Option<Duration>,
    ) -> watch::Receiver<LookupState> {
        let mut lookups = self
            .lookups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let keep_until = keep_for.map(|d| Instant::now() + d);
        if let Some(l) = lookups.get(topic) {
            if let Some(k) = keep_until {
                let mut until = l
                    .keep_until
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                *until = (*until).max(k);
            }
            return l.state.subscribe();
        }
        let lookup = Arc::new(TopicLookup {
            state: watch::Sender::new(LookupState::default()),
            keep_until: Mutex::new(keep_until.unwrap_or_else(Instant::now)),
        });
        let rx = lookup.state.subscribe();
        lookups.insert(topic.to_owned(), lookup.clone());
        tokio::spawn(lookup_loop(Arc::downgrade(self), topic.to_owned(), lookup));
        rx
    }

    /// A Metadata request with `allow_auto_topic_creation` for `topic` (v4+).
    async fn ask_topic_creation(&self, topic: &str) {
        let result: Result<(), Error> = async {
            let md = self.transport.metadata().await?;
            let node = md
                .brokers
                .first()
                .map(|b| b.node_id)
                .ok_or_else(|| Error::Protocol("the cluster lists no broker".into()))?;
            let conn = self.transport.conn(node, ConnKind::Admin).await?;
            let version = conn.version_for::<MetadataRequest>(None)?;
            let t =
                metadata_request::MetadataRequestTopic::default().with_name(Some(topic.to_owned()));
            let req = MetadataRequest::default()
                .with_topics(Some(vec![t]))
                .with_allow_auto_topic_creation(true);
            conn.request_at(&req, version, Duration::ZERO).await?;
            Ok(())
        }
        .await;
        if let Err(e) = result {
            tracing::debug!(error = %e, topic, "writer: auto topic creation request failed");
        }
    }

    /// Waits for `cost` bytes and a record of buffer space. Once this waits in a semaphore's
    /// queue, the slots' credit is given back ([`Inner::reclaim_credit`]): from then on the
    /// semaphore hands released room to its waiters first, so no slot can take a chunk ahead of
    /// this, and no room sits in a slot while this waits (room a slot took just before is given
    /// back too).
    ///
    /// Cancel safe: nothing is held when the future is dropped.
    pub(super) async fn acquire(&self, cost: usize) -> Result<(), ProduceError> {
        let closed = |_| ProduceError::Closed(CLOSE_CALLED);
        let n = u32::try_from(cost).unwrap_or(u32::MAX);
        // The byte permits are held (not forgotten) until the record permit comes: a caller
        // that gives up waiting, or a closed writer, hands them back on drop.
        let bytes = self
            .queued(self.bytes.acquire_many(n))
            .await
            .map_err(closed)?;
        if let Some(records) = &self.records {
            self.queued(records.acquire())
                .await
                .map_err(closed)?
                .forget();
        }
        bytes.forget();
        Ok(())
    }

    /// Awaits the semaphore acquisition `acquire`; when its first poll finds no room (the
    /// caller is then queued), gives the slots' credit back before waiting.
    async fn queued<F: std::future::Future>(&self, acquire: F) -> F::Output {
        let mut acquire = std::pin::pin!(acquire);
        let first = std::future::poll_fn(|cx| Poll::Ready(acquire.as_mut().poll(cx))).await;
        match first {
            Poll::Ready(out) => out,
            Poll::Pending => {
                self.reclaim_credit();
                acquire.await
            }
        }
    }

    pub(super) fn try_acquire(&self, cost: usize) -> Result<(), ProduceError> {
        let full = |e: TryAcquireError, st: &State| match e {
            TryAcquireError::Closed => ProduceError::Closed(CLOSE_CALLED),
            TryAcquireError::NoPermits => {
                let (buffered_records, buffered_bytes) = st.buffered();
                ProduceError::QueueFull {
                    buffered_records,
                    buffered_bytes,
                }
            }
        };
        if self.try_acquire_quietly(cost) {
            return Ok(());
        }
        // Room held as the slots' credit is room too.
        self.reclaim_credit();
        let n = u32::try_from(cost).unwrap_or(u32::MAX);
        match self.bytes.try_acquire_many(n) {
            Ok(p) => p.forget(),
            Err(e) => return Err(full(e, &self.lock())),
        }
        if let Some(records) = &self.records {
            match records.try_acquire() {
                Ok(p) => p.forget(),
                Err(e) => {
                    self.bytes.add_permits(n as usize);
                    return Err(full(e, &self.lock()));
                }
            }
        }
        Ok(())
    }

    /// Takes `cost` bytes and a record of buffer space if they are free now (atomic operations
    /// only, no lock); false, with nothing held, when not.
    fn try_acquire_quietly(&self, cost: usize) -> bool {
        let n = u32::try_from(cost).unwrap_or(u32::MAX);
        let Ok(bytes) = self.bytes.try_acquire_many(n) else {
            return false;
        };
        if let Some(records) = &self.records {
            match records.try_acquire() {
                Ok(p) => p.forget(),
                Err(_) => return false,
            }
        }
        bytes.forget();
        true
    }

    /// Gives every slot's credit back to the buffer's semaphores (slot locks only, one at a
    /// time).
    pub(super) fn reclaim_credit(&self) {
        let routes = self.routes.load();
        let (mut bytes, mut records) = (0, 0);
        for slot in routes.slots() {
            let mut open = slot.lock();
            bytes += std::mem::take(&mut open.credit_bytes);
            records += std::mem::take(&mut open.credit_records);
        }
        self.release(bytes, records);
    }

    /// Tops partition's slot `open` up to `cost` bytes and a record of credit, in chunks of
    /// `chunks` (bytes, records) taken from the buffer's semaphores; false, with the credit as
    /// it was, when the buffer has not that much room now.
    #[inline(always)]
    fn top_up(
        &self,
        open: &mut Open,
        cost: usize,
        (chunk_bytes, chunk_records): (usize, usize),
    ) -> bool {
        let take = |sem: &Semaphore, need: usize, chunk: usize| -> Option<usize> {
            let chunk = chunk.max(need);
            let ok = |n: usize| {
                u32::try_from(n)
                    .ok()
                    .and_then(|n| sem.try_acquire_many(n).ok())
                    .map(|p| p.forget())
            };
            ok(chunk)
                .map(|()| chunk)
                .or_else(|| ok(need).map(|()| need))
        };
        let mut took_bytes = 0;
        if open.credit_bytes < cost {
            let Some(n) = take(&self.bytes, cost - open.credit_bytes, chunk_bytes) else {
                return false;
            };
            took_bytes = n;
        }
        if let Some(records) = &self.records
            && open.credit_records == 0
        {
            let Some(n) = take(records, 1, chunk_records) else {
                self.bytes.add_permits(took_bytes);
                return false;
            };
            open.credit_records = n;
        }
        open.credit_bytes += took_bytes;
        true
    }

    pub(super) fn release(&self, cost: usize, records: usize) {
        self.bytes.add_permits(cost);
        if let Some(r) = &self.records {
            r.add_permits(records);
        }
    }

    /// Chooses the partition and appends; the buffer space is already held (and given back
    /// when the record is refused). With `want_unknown`, a record whose topic is not known
    /// comes back as [`Enqueued::UnknownTopic`] instead of failing. One lock of the state.
    pub(super) fn enqueue(self: &Arc<Self>, p: &Prepared, want_unknown: bool) -> Enqueued {
        let cost = p.cost;
        let result = self.enqueue_locked(&mut self.lock(), p, want_unknown);
        Enqueued::Done(match result {
            Ok(Some((fut, wake, leader, needs_id))) => {
                if wake {
                    if leader >= 0 {
                        self.broker_notify(leader).notify_one();
                    }
                    if leader < 0 || needs_id {
                        self.router.notify_one();
                    }
                }
                Ok(fut)
            }
            Ok(None) => {
                self.release(cost, 1);
                return Enqueued::UnknownTopic;
            }
            Err(e) => {
                self.release(cost, 1);
                Err(e)
            }
        })
    }

    /// [`Inner::enqueue`] under the lock: the topic (one look-up of its name), the partition,
    /// its leader when it had none, the append. Returns the record's future, whether to wake,
    /// the leader (-1: the router) and whether a producer id is needed; with `want_unknown`,
    /// `Ok(None)` (nothing done) when the record's topic has no partitions known.
    #[allow(clippy::type_complexity)]
    #[inline(always)]
    fn enqueue_locked(
        self: &Arc<Self>,
        st: &mut State,
        p: &Prepared,
        want_unknown: bool,
    ) -> Result<Option<(Option<DeliveryFuture>, bool, i32, bool)>, ProduceError> {
        let topic = topic_name(p.own_topic, &self.config);
        let t = st.topics.get(topic);
        if want_unknown && t.is_none_or(|t| t.partitions.is_empty()) {
            return Ok(None);
        }
        if st.closing {
            return Err(ProduceError::Closed(CLOSE_CALLED));
        }
        // A transactional writer takes records inside an open transaction only.
        if let Some(t) = &st.txn {
            t.check_send()?;
        }
        let t = t.ok_or_else(|| no_metadata(topic, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION))?;
        let partition = self.choose_partition(t, topic, p)?;
        // The partition's id from the topic already found (one hash of the name per record);
        // made on its first record.
        let known = usize::try_from(partition)
            .ok()
            .and_then(|i| t.ids.get(i).copied().flatten());
        let id = match known {
            Some(id) => id,
            None => st
                .part_id(topic, partition)
                .ok_or(BalanceError::UnknownPartition {
                    topic: topic.to_owned(),
                    partition,
                    count: 0,
                })?,
        };
        let learned = self.learn_leader(st, id, topic, partition);
        let (fut, wake) = st.append_with(
            id,
            &p.record,
            p.cost,
            p.alone,
            &self.config,
            Instant::now,
            p.want_future,
        )?;
        let add = first_in_transaction(st, id);
        let wake = wake || learned || add;
        let leader = st.parts[id].leader;
        let needs_id = matches!(st.producer.status, accumulator::ProducerStatus::Needed) || add;
        Ok(Some((fut, wake, leader, needs_id)))
    }

    /// The record's partition in `topic` (`t`): its own when the topic has it, else the
    /// balancer's choice.
    #[inline(always)]
    fn choose_partition(
        &self,
        t: &accumulator::TopicState,
        topic: &str,
        p: &Prepared,
    ) -> Result<i32, ProduceError> {
        Ok(match p.partition {
            Some(x) if usize::try_from(x).is_ok_and(|i| i < t.partitions.len()) => x,
            Some(x) => {
                return Err(BalanceError::UnknownPartition {
                    topic: topic.to_owned(),
                    partition: x,
                    count: t.partitions.len(),
                }
                .into());
            }
            None => self.balance(topic, &t.partitions, &t.available, p)?,
        })
    }

    /// The balancer's partition for record `p` of `topic` among `partitions` (`available`:
    /// those with a leader, for the default sticky balancer's keyless records).
    #[inline(always)]
    fn balance(
        &self,
        topic: &str,
        partitions: &[i32],
        available: &[i32],
        p: &Prepared,
    ) -> Result<i32, BalanceError> {
        let r = BalancerRecord::new(
            topic,
            p.record.key,
            p.record.key.map_or(0, <[u8]>::len) + p.record.value.map_or(0, <[u8]>::len),
        );
        match &self.config.sticky {
            // The default: keyless records among the partitions with a leader.
            Some(sticky) => sticky.balance_available(&r, partitions, available),
            None => self.config.balancer.balance(&r, partitions),
        }
    }

    /// Routes partition `id` (`partition` of `topic`) from the cached metadata when it was
    /// unrouted and the cache names its leader, starting that broker's sender if needed.
    /// Returns whether it learned the leader: the partition then joins that broker's
    /// partitions with whatever it has queued, so that broker's sender must look again even
    /// when it already runs (it may sleep with no deadline).
    #[inline(always)]
    fn learn_leader(
        self: &Arc<Self>,
        st: &mut State,
        id: PartId,
        topic: &str,
        partition: i32,
    ) -> bool {
        let mut spawn = None;
        let mut learned = false;
        if st.parts[id].leader < 0 {
            let leader = self.transport.cached_metadata().and_then(|md| {
                md.topic(topic)
                    .and_then(|t| t.partitions.iter().find(|x| x.partition == partition))
                    .map(|x| x.leader_id)
                    .filter(|l| *l >= 0 && md.broker(*l).is_some())
            });
            if let Some(l) = leader {
                learned = true;
                if st.set_leader(id, l) {
                    spawn = Some(l);
                }
            }
        }
        if let Some(l) = spawn {
            self.spawn_sender(st, l);
        }
        learned
    }

    /// The wake-up of broker `broker`'s sender.
    pub(crate) fn broker_notify(&self, broker: i32) -> Arc<Notify> {
        self.notifies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(broker)
            .or_default()
            .clone()
    }

    /// Starts broker `broker`'s sender (call with the lock held, after `set_leader` said so).
    pub(crate) fn spawn_sender(self: &Arc<Self>, st: &mut State, broker: i32) {
        let b = st.brokers.entry(broker).or_default();
        if b.has_sender || st.shutdown {
            return;
        }
        b.has_sender = true;
        tokio::spawn((self.tasks.sender)(self.clone(), broker));
    }

    /// Wakes every sender and the router.
    pub(super) fn wake_all(&self) {
        let notifies: Vec<Arc<Notify>> = self
            .notifies
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for n in notifies {
            n.notify_one();
        }
        self.router.notify_one();
    }

    /// Ends batches: resolves futures, runs callbacks, frees buffer space, counts.
    pub(crate) fn finish(&self, mut done: Vec<(Batch, Outcome)>) {
        self.finish_releasing(&mut done, &[]);
    }

    /// [`Inner::finish`] for the batches of an answered request: `held` are the partitions
    /// whose in-flight mark is one of these batches (`PartState::in_flight`). The marks go
    /// once the futures resolved, under the lock that keeps the ended batches' memory
    /// (`State::spares`): a mark still set would hold the batch's shared slot, which could then
    /// never be reused. `done` is left empty, its memory kept for the caller's next use.
    pub(crate) fn finish_releasing(&self, done: &mut Vec<(Batch, Outcome)>, held: &[PartId]) {
        if done.is_empty() {
            if !held.is_empty() {
                let mut st = self.lock();
                for &id in held {
                    st.parts[id].in_flight = None;
                }
            }
            return;
        }
        // Accounting first, so that whoever sees a future resolve also sees the buffer space
        // back and the counters updated. Each batch is ended by its one owner, once.
        let (records, cost) = self.count_ended(done);
        let (idle, txn_failed) = {
            let mut st = self.lock();
            st.buffered_records = st.buffered_records.saturating_sub(records);
            st.buffered_bytes = st.buffered_bytes.saturating_sub(cost);
            self.buffered_meter
                .report(st.buffered_records, st.buffered_bytes);
            let txn_failed = fail_transaction(&mut st, done);
            (st.closing && !st.has_buffered(), txn_failed)
        };
        self.release(cost, records);
        for (batch, outcome) in done.iter_mut() {
            let outcome = std::mem::replace(
                outcome,
                Outcome::Written {
                    base_offset: -1,
                    log_append_time: -1,
                },
            );
            batch.complete(outcome);
        }
        self.keep_ended(done, held);
        if txn_failed {
            // Unsent batches of the transaction fail now (`State::expire`).
            self.wake_all();
        }
        if idle {
            self.router.notify_one();
        }
    }

    /// The stats of the batches in `done` not ended yet (acked, failed); returns their records
    /// and buffer cost, to give back.
    #[inline(always)]
    fn count_ended(&self, done: &[(Batch, Outcome)]) -> (usize, usize) {
        let now = Instant::now();
        let (mut records, mut cost) = (0usize, 0usize);
        let mut sent = crate::ops::meter::SentTally::new(&self.meter);
        for (batch, outcome) in done {
            if batch.shared.is_done() {
                continue;
            }
            let n = batch.count();
            records += n;
            cost += batch.cost;
            match outcome {
                Outcome::Written { .. } => {
                    self.stats.acked(
                        n as u64,
                        batch.encoded.as_ref().map_or(0, |b| b.len() as u64),
                        now.saturating_duration_since(batch.created),
                    );
                    sent.add(&batch.shared.topic, n as u64, || None);
                }
                Outcome::Failed { error, .. } => {
                    sent.add(&batch.shared.topic, n as u64, || {
                        Some(crate::ops::otel::error_type(error.error_code()))
                    });
                    tracing::debug!(
                        topic = %batch.shared.topic,
                        partition = batch.shared.partition,
                        records = n,
                        %error,
                        "produce: batch failed"
                    );
                    self.stats.failed(n as u64);
                }
            }
        }
        (records, cost)
    }

    /// After the futures of `done` resolved: the in-flight marks of `held` go (a `flush` from
    /// now on has nothing to wait for here), and what the ended batches leave is kept for new
    /// ones (one lock per request, not per batch): in steady state a batch allocates nothing.
    #[inline(always)]
    fn keep_ended(&self, done: &mut Vec<(Batch, Outcome)>, held: &[PartId]) {
        let mut st = self.lock();
        // The futures have resolved: a `flush` from now on has nothing to wait for here.
        for &id in held {
            st.parts[id].in_flight = None;
        }
        if !st.ending.is_empty() {
            st.ending.retain(|b| !b.is_done());
        }
        for (batch, _) in done.drain(..) {
            if let Some(spare) = batch.into_spare() {
                st.spares.put(spare);
            }
        }
    }

    /// Honours a broker's `throttle_time_ms` (KIP-219): no request to it before then.
    pub(crate) fn throttle(&self, broker: i32, ms: i32) {
        let until = crate::time::after(
            Instant::now(),
            Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
        );
        if let Some(b) = self.lock().brokers.get_mut(&broker) {
            b.throttled_until = Some(until);
        }
    }

    pub(crate) fn shutdown_rx(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// No more records; everything buffered is sent at once. Returns the pending batches.
    pub(super) fn begin_close(&self) -> Vec<Arc<batch::BatchShared>> {
        let handles = {
            let mut st = self.lock();
            st.closing = true;
            self.closing.store(true, Ordering::Release);
            st.seal_all()
        };
        self.wake_all();
        handles
    }

    /// Stops the tasks. When `drained` is false, fails every batch still queued with
    /// [`ProduceError::Closed`]; returns the batches in flight (their requests fail them).
    pub(super) fn stop(&self, drained: bool) -> Vec<Arc<batch::BatchShared>> {
        let (done, in_flight) = {
            let mut st = self.lock();
            st.shutdown = true;
            let mut done = Vec::new();
            let mut in_flight = Vec::new();
            for id in 0..st.parts.len() {
                if let Some(b) = st.take_open(id) {
                    st.parts[id].batches.push_back(b);
                }
                let p = &mut st.parts[id];
                in_flight.extend(p.in_flight.iter().cloned());
                for b in p.batches.drain(..) {
                    let e =
                        ProduceError::Closed("the record was still pending at the close deadline");
                    done.push((b, Outcome::failed(e)));
                }
            }
            (done, in_flight)
        };
        if !drained || !done.is_empty() {
            tracing::debug!(batches = done.len(), "writer: close deadline passed");
        }
        self.finish(done);
        self.bytes.close();
        if let Some(r) = &self.records {
            r.close();
        }
        self.stop_tasks();
        in_flight
    }

    /// Tells every task to end.
    pub(crate) fn stop_tasks(&self) {
        self.shutdown.send_replace(true);
        self.wake_all();
    }
}

/// The partition's first record in the transaction: the router adds it (AddPartitionsToTxn)
/// before its batches may go. Returns whether it was queued for that.
#[inline(always)]
fn first_in_transaction(st: &mut State, id: PartId) -> bool {
    let mut add = false;
    if let Some(t) = &mut st.txn {
        if t.v2 {
            // KIP-890 part 2: the first Produce adds the partition; the transaction's
            // end needs EndTxn (Java's `transactionStarted` in `maybeAddPartition`).
            t.started = true;
        } else if !t.may_send(id) && !t.pending.contains(&id) {
            t.pending.push(id);
            add = true;
        }
    }
    add
}

/// A record of the transaction that failed makes it abortable (or fatal): Java's
/// `TransactionManager.handleFailedBatch`. Returns whether the transaction's state changed.
#[inline(always)]
fn fail_transaction(st: &mut State, done: &[(Batch, Outcome)]) -> bool {
    let mut txn_failed = false;
    if let Some(t) = &mut st.txn {
        // A record of the transaction that failed makes it abortable (or fatal):
        // Java's `TransactionManager.handleFailedBatch`.
        for (_, outcome) in done {
            if let Outcome::Failed { error, .. } = outcome
                && let Some(e) = record_failure(error)
            {
                if matches!(
                    error.error_code(),
                    Some(ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER | ErrorCode::UNKNOWN_PRODUCER_ID)
                ) {
                    t.bump_needed = true;
                }
                txn_failed |= t.fail(e);
            }
        }
    }
    txn_failed
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Batches still held fail through their own Drop.
        let st = self
            .state
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = std::mem::take(&mut st.parts);
    }
}
