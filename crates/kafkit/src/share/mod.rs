//! Share groups (KIP-932): [`ShareReader`], a share group member. The public overview and the
//! example are on `ShareReader`; how it works is in docs/DESIGN.md ("ShareReader").

mod acks;
mod config;
mod fetch;
mod member;
mod session;
mod telemetry;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout_at};

pub use self::acks::AcknowledgeType;
pub use self::config::{AcknowledgementMode, ShareAcquireMode, ShareReaderBuilder};
pub use crate::error::share::ShareError;

use self::config::Config;
use self::fetch::Fetcher;
use self::member::Shared;
use self::session::Tip;
use crate::error::{Error, Result};
use crate::reader::ConsumerRecord;
use crate::transport::Transport;

/// A record a [`ShareReader`] acquired: the record (through `Deref`, as a
/// [`ConsumerRecord`]), how many times it was delivered, and until when this member holds it.
#[derive(Debug, Clone)]
pub struct ShareRecord {
    pub(crate) record: ConsumerRecord,
    pub(crate) delivery_count: u16,
    pub(crate) lock_deadline: std::time::Instant,
    pub(crate) tip: Tip,
    /// The reader that handed it out (`Shared::id`).
    pub(crate) reader: u64,
}

impl ShareRecord {
    /// How many times the record was delivered, this time included (1 the first time;
    /// KIP-932's `DeliveryCount`).
    pub fn delivery_count(&self) -> u16 {
        self.delivery_count
    }

    /// When the acquisition lock runs out (the answer's arrival plus the broker's
    /// `AcquisitionLockTimeoutMs`): unacknowledged by then, the record goes to another member.
    pub fn acquisition_lock_deadline(&self) -> std::time::Instant {
        self.lock_deadline
    }

    /// The record.
    pub fn record(&self) -> &ConsumerRecord {
        &self.record
    }

    /// The record, taken out.
    pub fn into_record(self) -> ConsumerRecord {
        self.record
    }
}

impl std::ops::Deref for ShareRecord {
    type Target = ConsumerRecord;

    fn deref(&self) -> &ConsumerRecord {
        &self.record
    }
}

/// The outcome of the acknowledgements of one partition that one request carried (Java's
/// `AcknowledgementCommitCallback` arguments): the offsets and whether the broker took them.
#[derive(Debug)]
#[non_exhaustive]
pub struct AcknowledgementCommit {
    /// The topic.
    pub topic: Arc<str>,
    /// The partition.
    pub partition: i32,
    /// The offsets acknowledged, ascending.
    pub offsets: Vec<i64>,
    /// `Ok` when the broker took them; else why not, e.g. [`Error::Broker`] with
    /// `INVALID_RECORD_STATE` (the records' locks ran out, or another member holds them) or
    /// `NOT_LEADER_OR_FOLLOWER`; a request that got no answer as `NETWORK_EXCEPTION` with the
    /// connection's error as its message.
    pub result: Result<()>,
}

/// Counters of a [`ShareReader`], since it was built.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShareStats {
    /// The member epoch (0 while joining, -1 after leaving).
    pub member_epoch: i32,
    /// Partitions assigned now.
    pub assigned_partitions: usize,
    /// ShareGroupHeartbeat requests sent.
    pub heartbeats: u64,
    /// ShareFetch requests sent.
    pub share_fetch_requests: u64,
    /// ShareAcknowledge requests sent.
    pub share_acknowledge_requests: u64,
    /// Rounds of requests: each sends at most one request per broker.
    pub fetch_rounds: u64,
    /// The most requests in flight at once, over all brokers (at most one per broker: with
    /// partitions led by N brokers, N once every broker was asked at once).
    pub max_requests_in_flight: u64,
    /// Records acquired from the brokers (handed out, or fetched and waiting in the reader).
    pub records_acquired: u64,
    /// Records handed to the application.
    pub records_delivered: u64,
    /// Acknowledgements the brokers took.
    pub acknowledgements_sent: u64,
    /// Acknowledgements refused or lost.
    pub acknowledgements_failed: u64,
}

/// A member of a share group (KIP-932, "queues for Kafka"); Java's `KafkaShareConsumer`. Built
/// with [`ShareReader::builder`].
///
/// The members of a share group share the partitions of their topics, and each record goes to
/// one member at a time: a ShareFetch *acquires* records for a lock period (the broker's
/// `share.record.lock.duration.ms`, [`ShareReader::acquisition_lock_timeout`]), and the member
/// then *acknowledges* each one: [`AcknowledgeType::Accept`] (done), `Release` (delivered again
/// at once, to any member), `Reject` (never again; to the group's dead-letter topic where one
/// is set, KIP-1191) or `Renew` (the lock renewed, KIP-1222). A record whose lock runs out is
/// delivered again, its [`ShareRecord::delivery_count`] one higher; past the group's delivery
/// count limit it is archived.
///
/// ```no_run
/// use std::time::Duration;
/// use kafkit::{AcknowledgeType, AcknowledgementMode, ShareReader, Transport};
///
/// # async fn run() -> kafkit::Result<()> {
/// let transport = Transport::builder(["localhost:9092"]).build()?;
/// let mut reader = ShareReader::builder(transport, "work")
///     .topics(["jobs"])
///     .acknowledgement_mode(AcknowledgementMode::Explicit)
///     .build()?;
/// for _ in 0..10 {
///     for record in reader.poll(Duration::from_secs(1)).await? {
///         let done = record.value.as_deref().is_some_and(|v| !v.is_empty());
///         let how = if done { AcknowledgeType::Accept } else { AcknowledgeType::Reject };
///         reader.acknowledge(&record, how)?;
///     }
///     for outcome in reader.commit(Duration::from_secs(5)).await? {
///         if let Err(e) = &outcome.result {
///             eprintln!("{}/{}: {e}", outcome.topic, outcome.partition);
///         }
///     }
/// }
/// reader.close(Duration::from_secs(5)).await
/// # }
/// ```
///
/// How it works: a task of its own heartbeats with the group coordinator
/// (ShareGroupHeartbeat; the coordinator assigns the partitions), and each poll sends one
/// ShareFetch to every broker that leads an assigned partition at once, at most one request
/// per broker at a time, each on a share session of its own (librdkafka's preview asks one
/// broker per poll). The acknowledgements ride on the next ShareFetch to the partition's
/// leader, or go in a ShareAcknowledge ([`ShareReader::commit`], [`ShareReader::close`]).
pub struct ShareReader {
    shared: Arc<Shared>,
    member: Option<JoinHandle<()>>,
    fetcher: Fetcher,
    closed: bool,
    /// Its KIP-714 engine (`share/telemetry.rs`); dropped with the reader.
    push: crate::telemetry::ClientPush,
}

impl std::fmt::Debug for ShareReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareReader")
            .field("group_id", &self.shared.config.group_id)
            .field("member_id", &self.shared.member_id)
            .finish_non_exhaustive()
    }
}

/// Acknowledges records of a [`ShareReader`] while something else holds the reader (its
/// [`ShareReader::stream`]). Cheap to clone.
#[derive(Clone)]
pub struct ShareAcknowledger {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ShareAcknowledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareAcknowledger").finish_non_exhaustive()
    }
}

impl ShareAcknowledger {
    /// As [`ShareReader::acknowledge`].
    ///
    /// # Errors
    ///
    /// As [`ShareReader::acknowledge`].
    pub fn acknowledge(&self, record: &ShareRecord, how: AcknowledgeType) -> Result<()> {
        acknowledge(&self.shared, record, how)
    }
}

fn acknowledge(shared: &Shared, record: &ShareRecord, how: AcknowledgeType) -> Result<()> {
    let group_id = || shared.config.group_id.clone();
    if shared.config.acknowledgement_mode == AcknowledgementMode::Implicit {
        return Err(ShareError::ImplicitMode {
            group_id: group_id(),
        }
        .into());
    }
    if shared.closed.load(Ordering::Acquire) {
        return Err(ShareError::Closed.into());
    }
    let mut acks = shared.acks();
    let r = if record.reader == shared.id {
        acks.get_mut(&record.tip)
            .ok_or("it was not handed out by this reader")
            .and_then(|p| p.acknowledge(record.offset, how))
    } else {
        Err("another reader handed it out")
    };
    if r.is_ok() {
        shared.stats.kip714.acknowledged(how.wire(), 1);
    }
    r.map_err(|why| {
        ShareError::NotAcknowledgeable {
            group_id: group_id(),
            topic: record.topic.to_string(),
            partition: record.partition,
            offset: record.offset,
            why,
        }
        .into()
    })
}

impl ShareReader {
    /// A builder for a member of `group_id` on `transport` (see [`ShareReaderBuilder`] for the
    /// settings).
    pub fn builder(transport: Transport, group_id: impl Into<String>) -> ShareReaderBuilder {
        ShareReaderBuilder::new(transport, group_id)
    }

    pub(crate) fn start(transport: Transport, config: Config, push: bool) -> ShareReader {
        let member_id = crate::group::random_member_id();
        let shared = Arc::new(Shared::new(transport, config, member_id));
        let member = tokio::spawn(member::run(shared.clone()));
        let push = crate::telemetry::ClientPush::start(
            push,
            &shared.transport,
            telemetry::source(&shared),
            Vec::new(),
        );
        ShareReader {
            shared,
            member: Some(member),
            fetcher: Fetcher::new(),
            closed: false,
            push,
        }
    }

    /// The group.
    pub fn group_id(&self) -> &str {
        &self.shared.config.group_id
    }

    /// The member id, made by this client when it was built (KIP-932).
    pub fn member_id(&self) -> &str {
        &self.shared.member_id
    }

    /// How long a record stays acquired, as the brokers last said (`None` before the first
    /// ShareFetch answer). Java's `acquisitionLockTimeoutMs`.
    pub fn acquisition_lock_timeout(&self) -> Option<Duration> {
        self.shared.state().lock_timeout
    }

    /// The partitions the coordinator assigned to this member now, as (topic, partition),
    /// sorted (Java `assignment`). A partition of a topic whose name the reader has not looked
    /// up yet (before the poll after the assignment) is left out.
    pub fn assignment(&self) -> Vec<(Arc<str>, i32)> {
        let tips = self.shared.state().assignment.clone();
        let mut named = self.fetcher.named(&tips);
        named.sort();
        named
    }

    /// A handle acknowledging records while the reader is borrowed (by its `stream`).
    pub fn acknowledger(&self) -> ShareAcknowledger {
        ShareAcknowledger {
            shared: self.shared.clone(),
        }
    }

    /// Replaces the subscription (Java `subscribe`); the next heartbeat carries it.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty list or an empty name.
    pub fn subscribe<I, S>(&self, topics: I) -> Result<()>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let topics: Vec<String> = topics.into_iter().map(Into::into).collect();
        if topics.is_empty() || topics.iter().any(String::is_empty) {
            return Err(Error::Config(
                "a share group member needs at least one topic, and no empty topic name".into(),
            ));
        }
        let mut st = self.shared.state();
        st.topics = topics;
        st.subscription_sent = false;
        drop(st);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// The reader's counters.
    pub fn stats(&self) -> ShareStats {
        let c = &self.shared.stats;
        let st = self.shared.state();
        ShareStats {
            member_epoch: st.epoch,
            assigned_partitions: st.assignment.len(),
            heartbeats: c.heartbeats.load(Ordering::Relaxed),
            share_fetch_requests: c.share_fetches.load(Ordering::Relaxed),
            share_acknowledge_requests: c.share_acknowledges.load(Ordering::Relaxed),
            fetch_rounds: c.rounds.load(Ordering::Relaxed),
            max_requests_in_flight: c.max_in_flight.load(Ordering::Relaxed),
            records_acquired: c.records_acquired.load(Ordering::Relaxed),
            records_delivered: c.records_delivered.load(Ordering::Relaxed),
            acknowledgements_sent: c.acknowledgements_sent.load(Ordering::Relaxed),
            acknowledgements_failed: c.acknowledgements_failed.load(Ordering::Relaxed),
        }
    }

    /// Records acquired for this member: at most `max_poll_records`, as soon as any broker
    /// answers with records, or none after `timeout` (Java `poll(Duration)`). In implicit mode
    /// it first accepts every record the poll before handed out.
    ///
    /// # Errors
    ///
    /// [`ShareError::UnacknowledgedRecords`] in explicit mode while records of the last poll
    /// are unacknowledged (nothing fetched); [`ShareError::MaxPollIntervalExceeded`] once after
    /// the member left for not polling; [`ShareError::Fatal`] when the member stopped;
    /// [`ShareError::Closed`] after `close`; [`Error::Broker`] (operation `ShareFetch`) once for
    /// a partition error the reader cannot follow by itself (`TOPIC_AUTHORIZATION_FAILED`,
    /// `INVALID_REQUEST`...; leader moves and unknown partitions are followed silently).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the requests go on in their own tasks, and records that came in are
    /// handed out by the next poll.
    ///
    /// # Tracing
    ///
    /// One `poll {topic}` span per call (`poll` when the records come from several topics),
    /// with the share group as `messaging.consumer.group.name` and the records handed out as
    /// `messaging.batch.message_count` (0 after a timeout); with `process_spans(true)` each
    /// record carries its `process {topic}` span.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ShareRecord>> {
        let max = usize::try_from(self.shared.config.max_poll_records).unwrap_or(usize::MAX);
        let mut span = crate::ops::otel::RefillSpan::default();
        span.start(Some(&self.shared.config.group_id));
        let out = self.poll_up_to(timeout, max).await;
        poll_ended(&mut span, &out, std::iter::empty());
        out
    }

    /// A poll handing out at most `max` records (the stream takes one at a time).
    async fn poll_up_to(&mut self, timeout: Duration, max: usize) -> Result<Vec<ShareRecord>> {
        self.begin_poll()?;
        let deadline = Instant::now() + timeout;
        loop {
            self.polling();
            self.fetcher.read_answers(&self.shared);
            if !self.fetcher.ready.is_empty() {
                // Handed out from what was fetched earlier, with no ShareFetch now for the
                // acknowledgements to ride on: those whose locks are half gone go at once
                // (a ShareAcknowledge), the others with the next ShareFetch, usually
                // milliseconds away (one request per fetch, not two, in the common case).
                let urgent = self.urgent_before();
                let _ = timeout_at(
                    deadline,
                    self.fetcher.send_all(&self.shared, false, Some(urgent)),
                )
                .await;
                return Ok(self.hand_out(max));
            }
            self.check()?;
            if let Some(e) = self.fetcher.error.take() {
                return Err(e);
            }
            if let Ok(Err(e)) = timeout_at(deadline, self.fetcher.route(&self.shared)).await {
                tracing::debug!(error = %e, "share reader: no metadata yet");
            }
            let _ = timeout_at(deadline, self.fetcher.send_all(&self.shared, true, None)).await;
            if !self.fetcher.in_flight() {
                // Nothing assigned (yet): wait for the member's next assignment.
                let wait = (Instant::now() + self.shared.config.retry_backoff).min(deadline);
                tokio::select! {
                    () = tokio::time::sleep_until(wait) => {}
                    () = self.shared.assigned.notified() => {}
                }
                if Instant::now() >= deadline {
                    return Ok(Vec::new());
                }
                continue;
            }
            if !self.fetcher.wait_answers(&self.shared, deadline).await {
                return Ok(Vec::new());
            }
        }
    }

    /// Acknowledgements of records whose locks run out before this are sent at once: half the
    /// acquisition lock timeout from now (30 s when no broker said yet).
    fn urgent_before(&self) -> std::time::Instant {
        let lock = self
            .shared
            .state()
            .lock_timeout
            .unwrap_or(Duration::from_secs(30));
        std::time::Instant::now() + lock / 2
    }

    /// The application is in a poll: the member's stall clock starts again (a poll longer than
    /// `max_poll_interval` is no stall; Java resets its poll timer on each round too).
    fn polling(&self) {
        self.shared.state().last_poll = Instant::now();
    }

    /// The checks and settling at the start of a poll.
    fn begin_poll(&mut self) -> Result<()> {
        self.check()?;
        let group_id = self.shared.config.group_id.clone();
        {
            let mut st = self.shared.state();
            st.last_poll = Instant::now();
            if st.left_for_poll {
                st.left_for_poll = false;
                drop(st);
                self.shared.wake.notify_one();
                return Err(ShareError::MaxPollIntervalExceeded {
                    group_id,
                    max_poll_interval: self.shared.config.max_poll_interval,
                }
                .into());
            }
        }
        let mut acks = self.shared.acks();
        match self.shared.config.acknowledgement_mode {
            AcknowledgementMode::Implicit => {
                let n: usize = acks
                    .values_mut()
                    .map(acks::PartAcks::accept_delivered)
                    .sum();
                self.shared
                    .stats
                    .kip714
                    .acknowledged(AcknowledgeType::Accept.wire(), n as u64);
            }
            AcknowledgementMode::Explicit => {
                let count: usize = acks.values().map(acks::PartAcks::unacknowledged).sum();
                if count > 0 {
                    return Err(ShareError::UnacknowledgedRecords { group_id, count }.into());
                }
            }
        }
        acks.retain(|_, p| !p.is_idle());
        Ok(())
    }

    /// Whether the reader can go on.
    fn check(&self) -> Result<()> {
        if self.closed {
            return Err(ShareError::Closed.into());
        }
        if let Some(e) = &self.shared.state().fatal {
            return Err(e.clone().into());
        }
        Ok(())
    }

    /// Hands out up to `max` of the fetched records.
    fn hand_out(&mut self, max: usize) -> Vec<ShareRecord> {
        let n = self.fetcher.ready.len().min(max);
        let mut out: Vec<ShareRecord> = self.fetcher.ready.drain(..n).collect();
        let mut acks = self.shared.acks();
        // Records come partition by partition: one look-up per run of one partition's records.
        let mut i = 0;
        while let Some(first) = out.get(i) {
            let part = acks.entry(first.tip).or_default();
            while let Some(r) = out.get(i).filter(|r| r.tip == first.tip) {
                part.deliver(r.offset, r.lock_deadline);
                i += 1;
            }
        }
        drop(acks);
        member::Counters::add(&self.shared.stats.records_delivered, n as u64);
        // `messaging.client.consumed.messages` (cargo feature `metrics`): one recording per run
        // of records of one topic.
        crate::ops::meter::consumed_messages(
            out.iter().map(|r| (&r.record.topic, 1)),
            Some(&self.shared.config.group_id),
        );
        if let Some(p) = &self.shared.config.process {
            for r in &mut out {
                let c = &r.record;
                r.record.span = p.span(
                    &c.topic,
                    c.partition,
                    c.offset,
                    c.key.as_deref(),
                    &c.headers,
                );
            }
        }
        out
    }

    /// Settles `record` (explicit mode): the acknowledgement goes with the next request to its
    /// partition's leader, or with [`ShareReader::commit`] (Java `acknowledge`). A record
    /// acknowledged again before it is sent takes the newer type. `Renew` keeps the record
    /// with this member, which still owes it a final acknowledgement.
    ///
    /// # Errors
    ///
    /// [`ShareError::ImplicitMode`] in implicit mode; [`ShareError::NotAcknowledgeable`] for a
    /// record this reader did not hand out (another reader's included) or whose
    /// acknowledgement was already sent; [`ShareError::Closed`] once the reader is closed.
    pub fn acknowledge(&self, record: &ShareRecord, how: AcknowledgeType) -> Result<()> {
        acknowledge(&self.shared, record, how)
    }

    /// Sends every acknowledgement made so far and waits for the answers, at most `timeout`
    /// (Java `commitSync(Duration)`). In implicit mode it first accepts every record the last
    /// poll handed out. Returns the outcome per partition and request of every acknowledgement
    /// answered since the commit started (those answered before went to the callback only);
    /// acknowledgements not answered by `timeout` stay pending and go with a later request.
    ///
    /// # Errors
    ///
    /// [`ShareError::Closed`] after `close`; [`ShareError::Fatal`] when the member stopped.
    /// Refused acknowledgements are not errors of the call: they are in the outcomes.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: requests in flight finish in their own tasks, and their outcomes go to
    /// the callback.
    pub async fn commit(&mut self, timeout: Duration) -> Result<Vec<AcknowledgementCommit>> {
        self.check()?;
        if self.shared.config.acknowledgement_mode == AcknowledgementMode::Implicit {
            let n: usize = self
                .shared
                .acks()
                .values_mut()
                .map(acks::PartAcks::accept_delivered)
                .sum();
            self.shared
                .stats
                .kip714
                .acknowledged(AcknowledgeType::Accept.wire(), n as u64);
        }
        let span = crate::ops::otel::settle_span(&self.shared.config.group_id);
        let started = crate::ops::meter::start();
        // Outcomes are kept for the caller only while a commit runs (the callback sees all).
        self.fetcher.settled = Some(Vec::new());
        let deadline = Instant::now() + timeout;
        self.settle(deadline).await;
        let settled = self.fetcher.settled.take().unwrap_or_default();
        end_settle_span(&span, &settled);
        crate::ops::meter::acknowledged(started, || {
            settled.iter().find_map(|c| c.result.as_ref().err())
        });
        Ok(settled)
    }

    /// Sends what is pending and waits for the answers, until nothing is pending or in flight,
    /// or `deadline`.
    async fn settle(&mut self, deadline: Instant) {
        loop {
            self.fetcher.read_answers(&self.shared);
            let pending = self.shared.acks().values().any(acks::PartAcks::has_pending);
            if !pending && !self.fetcher.in_flight() {
                return;
            }
            let _ = timeout_at(deadline, self.fetcher.route(&self.shared)).await;
            let _ = timeout_at(deadline, self.fetcher.send_all(&self.shared, false, None)).await;
            if !self.fetcher.in_flight() {
                // Nowhere to send what is pending yet (no leader known): try again shortly.
                let wait = (Instant::now() + self.shared.config.retry_backoff).min(deadline);
                tokio::time::sleep_until(wait).await;
            } else {
                self.fetcher.wait_answers(&self.shared, deadline).await;
            }
            if Instant::now() >= deadline {
                return;
            }
        }
    }

    /// The records, one by one (Java has no stream; each record is one poll of at most one
    /// record, waiting up to 1 s and repeated). Taking the next record settles the ones before
    /// as a poll does: in implicit mode they are accepted, in explicit mode each must be
    /// acknowledged first (through [`ShareReader::acknowledger`]) or the stream yields
    /// [`ShareError::UnacknowledgedRecords`]. The stream holds no records of its own: dropped,
    /// it leaves the fetched ones to the reader's next poll. Errors are yielded and the stream
    /// goes on, except after [`ShareError::Closed`] or [`ShareError::Fatal`], where it ends.
    pub fn stream(&mut self) -> ShareStream<'_> {
        ShareStream {
            idle: Some(self),
            running: None,
            ended: false,
            refill: crate::ops::otel::RefillSpan::default(),
        }
    }

    /// Leaves the group: releases every record handed out and not acknowledged (and those
    /// fetched and not handed out; in implicit mode the last poll's records too, as Java's
    /// `close` does: call [`ShareReader::commit`] first to accept them), sends what is pending with a ShareAcknowledge closing each
    /// share session (epoch -1: the broker releases what the member still holds), then leaves
    /// with a ShareGroupHeartbeat at epoch -1; all within `timeout` (Java `close(Duration)`).
    /// With metrics push on and a subscription that asks for metrics, the last KIP-714 push
    /// (`Terminating`) goes out in what is left of `timeout`.
    ///
    /// # Errors
    ///
    /// None today; the `Result` leaves room for one. What could not be sent in time is
    /// released by the brokers when the member's connections close or its locks run out.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped part way, the reader is closed without the rest (the member
    /// task still leaves the group).
    pub async fn close(mut self, timeout: Duration) -> Result<()> {
        self.closed = true;
        self.shared.closed.store(true, Ordering::Release);
        let deadline = Instant::now() + timeout;
        self.fetcher.drain(&self.shared, deadline).await;
        self.release_all();
        // Everything pending first (a session is opened where none is), then each session
        // closed: what is left goes with the closing request, or is reported as not sent.
        self.settle(deadline).await;
        self.fetcher.close_sessions(&self.shared, deadline).await;
        self.shared.state().closing = true;
        self.shared.wake.notify_one();
        if let Some(m) = self.member.take() {
            let _ = tokio::time::timeout_at(deadline, m).await;
        }
        // KIP-714's terminating push, in what is left of the timeout.
        self.push
            .close(deadline.saturating_duration_since(Instant::now()))
            .await;
        Ok(())
    }

    /// Releases everything the member holds: the records handed out and not acknowledged,
    /// and those fetched and not handed out.
    fn release_all(&mut self) {
        let mut acks = self.shared.acks();
        for r in self.fetcher.ready.drain(..) {
            acks.entry(r.tip)
                .or_default()
                .deliver(r.offset, r.lock_deadline);
        }
        acks.values_mut().for_each(acks::PartAcks::release_held);
    }
}

/// A poll of a [`ShareStream`] in progress, holding the reader until it ends.
type Polling<'a> =
    Pin<Box<dyn Future<Output = (&'a mut ShareReader, Result<Vec<ShareRecord>>)> + Send + 'a>>;

/// The records of a [`ShareReader`] as a [`futures_core::Stream`] of `Result<ShareRecord>`
/// ([`ShareReader::stream`]).
#[must_use = "streams do nothing unless polled"]
pub struct ShareStream<'a> {
    idle: Option<&'a mut ShareReader>,
    running: Option<Polling<'a>>,
    ended: bool,
    /// The poll span of a refill: from a poll that found nothing fetched to the records.
    refill: crate::ops::otel::RefillSpan,
}

impl std::fmt::Debug for ShareStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShareStream")
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl futures_core::Stream for ShareStream<'_> {
    type Item = Result<ShareRecord>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            let running = match &mut this.running {
                Some(f) => f,
                None => {
                    let Some(reader) = this.idle.take() else {
                        return Poll::Ready(None);
                    };
                    if reader.fetcher.ready.is_empty() {
                        // One poll span per refill of what was fetched, not per record.
                        this.refill.start(Some(&reader.shared.config.group_id));
                    }
                    this.running.insert(Box::pin(async move {
                        let r = reader.poll_up_to(Duration::from_secs(1), 1).await;
                        (reader, r)
                    }))
                }
            };
            let Poll::Ready((reader, r)) = running.as_mut().poll(cx) else {
                return Poll::Pending;
            };
            this.running = None;
            if !matches!(&r, Ok(records) if records.is_empty()) {
                // A refill that timed out empty goes on in the next poll, under the same span.
                poll_ended(&mut this.refill, &r, reader.fetcher.ready.iter());
            }
            this.idle = Some(reader);
            match r {
                Ok(mut records) => {
                    if let Some(record) = records.pop() {
                        return Poll::Ready(Some(Ok(record)));
                    }
                }
                Err(e) => {
                    this.ended = matches!(
                        &e,
                        Error::Share(ShareError::Closed | ShareError::Fatal { .. })
                    );
                    return Poll::Ready(Some(Err(e)));
                }
            }
        }
    }
}

impl Drop for ShareReader {
    /// Dropped without `close`: the member task leaves the group on its own; the connections
    /// close, and the brokers release what the member held.
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        if !self.closed {
            self.shared.state().closing = true;
            self.shared.wake.notify_one();
        }
    }
}

/// Ends a share `poll` span (`ops/otel.rs`): the records handed out and `more` fetched with
/// them (a stream's refill counts what it brought in), or `error.type`.
fn poll_ended<'a>(
    span: &mut crate::ops::otel::RefillSpan,
    out: &'a Result<Vec<ShareRecord>>,
    more: impl Iterator<Item = &'a ShareRecord>,
) {
    match out {
        Ok(records) => span.done(
            records
                .iter()
                .chain(more)
                .map(|r| (&*r.topic, r.partition, 1)),
        ),
        Err(e) => span.failed(e.error_code()),
    }
}

/// Ends a share `acknowledge` span (`ops/otel.rs`): the number of records acknowledged, and
/// `error.type` from the first partition the broker refused.
fn end_settle_span(span: &tracing::Span, settled: &[AcknowledgementCommit]) {
    if span.is_disabled() {
        return;
    }
    let count: usize = settled.iter().map(|c| c.offsets.len()).sum();
    span.record("messaging.batch.message_count", count as i64);
    if let Some(Err(e)) = settled.iter().map(|c| &c.result).find(|r| r.is_err()) {
        crate::ops::otel::record_error(span, e.error_code());
    }
}
