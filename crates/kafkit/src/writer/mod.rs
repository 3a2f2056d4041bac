//! The [`Writer`]: a batching, idempotent producer that sends ONE Produce request per broker
//! for every ready batch of the partitions that broker leads, across all topics.
//!
//! ```text
//!  send(record) ──► balancer ──► accumulator: per topic-partition queue of batches
//!   (waits when the buffer        │  open batch ─ sealed at batch_size / batch_max_records /
//!    is full; try_send fails)     │  linger / flush / close
//!                                 ▼
//!        per broker: ONE sender ── gathers the oldest ready batch of every partition it
//!        leads (rotating the start) into one Produce request, ≤ max_in_flight requests out
//!                                 │
//!        response ─► written: futures resolve (offset = base offset + index)
//!                  ─► retriable: back to the head of its queue after retry_backoff
//!                     (leader hint or metadata refresh first), until delivery_timeout
//!                  ─► sequence error: new epoch (KIP-360), sequences restart, resend
//!                  ─► otherwise: the batch's records fail with the broker's error code
//! ```
//!
//! See docs/DESIGN.md ("Writer") for the invariants.

mod accumulator;
mod answer;
mod batch;
mod bench;
mod config;
mod encode;
mod inner;
mod lists;
mod open;
mod record;
mod router;
mod sender;
mod settle;
mod stats;
mod telemetry;
mod txn;
mod txn_state;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::error::produce::{
    ProduceError, RecordMetadata, TransactionError, TransactionPhase, WriteErrors,
    WriterConfigError,
};
pub use batch::DeliveryFuture;
#[doc(hidden)]
pub use bench::{EncodePathStats, encode_path};
pub use config::{CompletionCallback, WriterBuilder};
pub use record::{ProducerRecord, ProducerRecordRef};
pub use stats::WriterStats;

use accumulator::Plan;
use config::Config;
use inner::{AtOnce, Inner, Tasks, asked_future, check_topic_name, topic_name};

use crate::transport::Transport;

/// A batching producer over a [`Transport`] (kafka-go `Writer`, Java `KafkaProducer`).
///
/// Records go to a per-partition batch; every broker has one sender that puts every ready
/// batch of the partitions it leads, across all topics, into ONE Produce request. Idempotent
/// by default (KIP-98): retries neither duplicate nor reorder records, and each partition has
/// at most one batch in flight so its order holds across retries. Cheap to clone (an `Arc`
/// inside); dropping the last clone sends what is buffered (within the delivery timeout) and
/// then stops. Settings: [`WriterBuilder`].
///
/// ```no_run
/// use kafkit::{Acks, Compression, ProducerRecord, Transport, Writer};
/// use std::time::Duration;
///
/// # async fn run() -> Result<(), kafkit::Error> {
/// let transport = Transport::builder(["127.0.0.1:9092"]).build()?;
/// let writer = Writer::builder(transport)
///     .topic("orders")                 // for records that name no topic
///     .acks(Acks::All)
///     .linger(Duration::from_millis(5))
///     .compression(Compression::Lz4)
///     .build()?;
///
/// // One record: send it and wait for its offset.
/// let ack = writer.produce(ProducerRecord::new("orders", "v").key("k")).await?;
/// println!("written at {}/{}@{}", ack.topic, ack.partition, ack.offset);
///
/// // Without waiting: `send` hands the record over and returns the future of its outcome.
/// let pending = writer.send(ProducerRecord::to_default_topic("w")).await?;
/// # drop(pending);
///
/// // Many records: per-record results.
/// let records = (0..100).map(|i| ProducerRecord::to_default_topic(format!("v{i}")));
/// match writer.write(records.collect()).await {
///     Ok(acks) => assert_eq!(acks.len(), 100),
///     Err(failed) => for (i, e) in &failed.errors { eprintln!("record {i}: {e}") },
/// }
/// writer.close(Duration::from_secs(10)).await?;
/// # Ok(())
/// # }
/// ```
///
/// Transactions (KIP-98; Java's `initTransactions`, `beginTransaction`,
/// `sendOffsetsToTransaction`, `commitTransaction`, `abortTransaction`): the records and the
/// offsets are visible to `read_committed` readers all together, or not at all.
///
/// ```no_run
/// use kafkit::admin::OffsetAndMetadata;
/// use kafkit::{ConsumerGroupMetadata, ProducerRecord, Transport, Writer};
/// use std::time::Duration;
///
/// # async fn run() -> Result<(), kafkit::Error> {
/// let t = Duration::from_secs(30);
/// let writer = Writer::builder(Transport::builder(["127.0.0.1:9092"]).build()?)
///     .transactional_id("orders-enricher-1")
///     .build()?;
/// writer.init_transactions(t).await?; // fences older writers of the same id
/// writer.begin_transaction()?;
/// writer.send(ProducerRecord::new("enriched", "v")).await?;
/// let offsets = [("orders", 0, OffsetAndMetadata::new(42))];
/// let group = ConsumerGroupMetadata::new("enricher"); // or GroupReader::group_metadata()
/// writer.send_offsets_to_transaction(&offsets, &group, t).await?;
/// match writer.commit_transaction(t).await {
///     Ok(()) => {}
///     Err(e) if e.is_abortable() => writer.abort_transaction(t).await?,
///     Err(e) => return Err(e.into()), // fatal (fenced) or a timeout
/// }
/// # Ok(())
/// # }
/// ```
///
/// The builder checks its settings without I/O:
///
/// ```
/// use kafkit::{Acks, Transport, Writer, WriterConfigError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let transport = Transport::builder(["127.0.0.1:9092"]).build()?;
/// let err = Writer::builder(transport.clone()).acks(Acks::Leader).enable_idempotence(true).build();
/// assert!(matches!(err, Err(WriterConfigError::Conflict(_))));
/// let writer = Writer::builder(transport).linger(std::time::Duration::ZERO).build()?;
/// assert_eq!(writer.stats().records, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Writer {
    inner: Arc<Inner>,
    guard: Arc<DropGuard>,
}

/// `record` with a `traceparent` header from the writer's `traceparent_from` when it has one
/// and the record none (`ops/otel.rs`, `with_traceparent`); the new headers live in `slot`.
/// Unset, one branch.
#[inline]
fn with_traceparent<'a>(
    config: &config::Config,
    record: ProducerRecordRef<'a>,
    slot: &'a mut Option<Vec<kafkit_protocol::records::RecordHeader>>,
) -> ProducerRecordRef<'a> {
    let Some(source) = &config.traceparent_from else {
        return record;
    };
    match crate::ops::otel::with_traceparent(source, record.headers) {
        None => record,
        Some(headers) => ProducerRecordRef {
            headers: slot.insert(headers),
            ..record
        },
    }
}

/// Closes the writer gently when the last [`Writer`] clone goes away; its KIP-714 engine stops
/// with it (dropped: no terminating push).
#[derive(Debug)]
struct DropGuard {
    inner: Arc<Inner>,
    push: crate::telemetry::ClientPush,
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.inner.begin_close();
    }
}

/// The engine's tasks ([`Tasks`]): the router and one sender per broker.
static TASKS: Tasks = Tasks {
    router: |inner| Box::pin(router::router_loop(inner)),
    sender: |inner, broker| Box::pin(sender::sender_loop(inner, broker)),
};

impl Writer {
    /// A builder for a writer over `transport`, with the defaults of [`WriterBuilder`].
    pub fn builder(transport: Transport) -> WriterBuilder {
        WriterBuilder::new(transport)
    }

    pub(crate) fn start(transport: Transport, config: Config) -> Writer {
        Writer::start_with_push(transport, config, false)
    }

    /// [`Writer::start`], with its KIP-714 engine when `push` (fed by
    /// [`Writer::metric_source`], labelled with the transactional id).
    pub(crate) fn start_with_push(transport: Transport, config: Config, push: bool) -> Writer {
        let inner = Inner::new(transport, config, &TASKS);
        let push = crate::telemetry::ClientPush::start(
            push,
            &inner.transport,
            telemetry::source(&inner),
            Vec::new(),
        );
        Writer {
            guard: Arc::new(DropGuard {
                inner: inner.clone(),
                push,
            }),
            inner,
        }
    }

    /// Sends `record` and waits for its outcome: `send` and then its [`DeliveryFuture`], in
    /// one call (Java `producer.send(record).get()`, franz-go `ProduceSync`).
    ///
    /// # Errors
    ///
    /// Those of [`Writer::send`] (the record was not taken), then the record's own outcome
    /// (e.g. [`ProduceError::Broker`], [`ProduceError::DeliveryTimeout`]).
    ///
    /// # Cancel safety
    ///
    /// Dropped while `send` waits, the record is not taken (nothing is sent). Dropped after, the
    /// record stays with the writer and is written (or fails) as any other; only its outcome
    /// is not seen (use `on_completion` to see every outcome).
    pub async fn produce(&self, record: ProducerRecord) -> Result<RecordMetadata, ProduceError> {
        self.send(record).await?.await
    }

    /// Hands `record` to the writer and returns the future of its outcome. For the first record
    /// of a topic, waits for the topic's metadata (asking the broker to create a topic that
    /// does not exist, unless `allow_auto_topic_creation(false)`), then while the buffer is
    /// full (`buffer_memory`, `max_buffered_records`): both within `max_block` (Java
    /// `max.block.ms`, 60 s by default).
    ///
    /// # Errors
    ///
    /// The record was not taken: [`ProduceError::NoTopic`],
    /// [`ProduceError::InvalidRecord`] (negative timestamp),
    /// [`ProduceError::RecordTooLarge`], [`ProduceError::Partition`] (unknown partition,
    /// balancer refusal), [`ProduceError::InvalidTopic`] at once for an illegal topic name,
    /// [`ProduceError::BlockTimeout`] after `max_block` (with the topic's last error code as a
    /// [`ProduceError::TopicMetadata`], e.g. `UNKNOWN_TOPIC_OR_PARTITION`, the last client
    /// error, e.g. a refused connection naming the address, or [`ProduceError::QueueFull`] as
    /// its cause), [`ProduceError::TopicMetadata`] at once for a topic error retrying cannot
    /// fix (e.g. `TOPIC_AUTHORIZATION_FAILED`), [`ProduceError::Closed`] after `close`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it returns, the record was not taken (nothing is sent and
    /// no buffer space is held). The returned [`DeliveryFuture`] may be dropped too: the record
    /// is still written.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ProduceError> {
        let future = self.send_record((&record).into(), true).await?;
        asked_future(future)
    }

    /// [`Writer::send`] for a borrowed record: its key, value and headers are copied into the
    /// writer's batch when it takes the record (as a [`ProducerRecord`]'s are; the topic name is
    /// only looked up), so the caller keeps them and needs no [`Bytes`](bytes::Bytes) for a
    /// key or value (librdkafka's `rd_kafka_producev` with `RD_KAFKA_MSG_F_COPY`).
    ///
    /// # Errors
    ///
    /// Those of [`Writer::send`].
    ///
    /// # Cancel safety
    ///
    /// As [`Writer::send`]: dropped before it returns, the record was not taken.
    pub async fn send_ref(
        &self,
        record: ProducerRecordRef<'_>,
    ) -> Result<DeliveryFuture, ProduceError> {
        let future = self.send_record(record, true).await?;
        asked_future(future)
    }

    /// Hands `record` to the writer as [`Writer::send`] does, but makes no future: the
    /// record's outcome reaches only the writer's `on_completion` callback (as librdkafka's
    /// `rd_kafka_produce` with its delivery report callback, or Java's `send(record,
    /// callback)` with the future unused). It saves `send`'s per-record reference count on the
    /// batch and the future itself, for callers that learn every outcome from the callback.
    ///
    /// # Errors
    ///
    /// [`ProduceError::NoCompletionCallback`] when the writer was built without
    /// `on_completion` (the outcome would be seen nowhere); else those of [`Writer::send`].
    ///
    /// # Cancel safety
    ///
    /// As [`Writer::send`]: dropped before it returns, the record was not taken.
    pub async fn send_detached(&self, record: ProducerRecord) -> Result<(), ProduceError> {
        if self.inner.config.on_completion.is_none() {
            return Err(ProduceError::NoCompletionCallback);
        }
        self.send_record((&record).into(), false).await.map(drop)
    }

    /// [`Writer::send_detached`] for a borrowed record, copied as [`Writer::send_ref`] copies
    /// it: librdkafka's `rd_kafka_producev` with `RD_KAFKA_MSG_F_COPY` and a delivery report
    /// callback.
    ///
    /// # Errors
    ///
    /// Those of [`Writer::send_detached`].
    ///
    /// # Cancel safety
    ///
    /// As [`Writer::send`]: dropped before it returns, the record was not taken.
    pub async fn send_detached_ref(
        &self,
        record: ProducerRecordRef<'_>,
    ) -> Result<(), ProduceError> {
        if self.inner.config.on_completion.is_none() {
            return Err(ProduceError::NoCompletionCallback);
        }
        self.send_record(record, false).await.map(drop)
    }

    /// [`Writer::send`] and [`Writer::send_detached`] (and their borrowed forms): the record's
    /// future when `want_future`.
    async fn send_record(
        &self,
        record: ProducerRecordRef<'_>,
        want_future: bool,
    ) -> Result<Option<DeliveryFuture>, ProduceError> {
        let inner = &self.inner;
        inner.ensure_started()?;
        let mut traced = None;
        let record = with_traceparent(&inner.config, record, &mut traced);
        let prepared = match inner.send_at_once(record, want_future)? {
            AtOnce::Done(result) => return result,
            AtOnce::Wait(p) => p,
        };
        let max_block = Duration::from_millis(inner.config.max_block_ms);
        let deadline = Instant::now() + max_block;
        let topic = topic_name(prepared.own_topic, &inner.config);
        if !inner.topic_known(topic) {
            check_topic_name(topic)?;
            // A record a transactional writer would refuse is refused before any wait for
            // the topic's metadata (`enqueue` checks again, under the same lock as an abort).
            if let Some(t) = &inner.lock().txn {
                t.check_send()?;
            }
            inner.learn_topic(topic, deadline, max_block).await?;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        // A timeout polls the acquisition first: room that is there is taken even at zero.
        match tokio::time::timeout(left, inner.acquire(prepared.cost)).await {
            Ok(taken) => taken?,
            Err(_) => {
                let (buffered_records, buffered_bytes) = inner.lock().buffered();
                let full = ProduceError::QueueFull {
                    buffered_records,
                    buffered_bytes,
                };
                return Err(ProduceError::BlockTimeout {
                    topic: topic.to_owned(),
                    max_block,
                    cause: Some(Box::new(full)),
                });
            }
        }
        inner.enqueue(&prepared, false).into_result(&prepared)
    }

    /// Like [`Writer::send`] but never waits: fails at once with [`ProduceError::QueueFull`]
    /// when the buffer is full, and when the topic's metadata is not known yet (it is fetched
    /// in the background, for up to `request_timeout`, not `max_block`; a later call can
    /// succeed) with what its lookups learnt so far: [`ProduceError::TopicMetadata`] with the
    /// topic's last error code (e.g. `UNKNOWN_TOPIC_OR_PARTITION` once a lookup gave up, or a
    /// code retrying cannot fix), the last client error, or, before any answer,
    /// [`ProduceError::MetadataPending`].
    ///
    /// # Errors
    ///
    /// Those of [`Writer::send`] ([`ProduceError::InvalidTopic`] at once for an illegal
    /// name), and those above.
    pub fn try_send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ProduceError> {
        self.try_send_ref((&record).into())
    }

    /// [`Writer::try_send`] for a borrowed record, copied as [`Writer::send_ref`] copies it.
    ///
    /// # Errors
    ///
    /// Those of [`Writer::try_send`].
    pub fn try_send_ref(
        &self,
        record: ProducerRecordRef<'_>,
    ) -> Result<DeliveryFuture, ProduceError> {
        let inner = &self.inner;
        inner.ensure_started()?;
        let mut traced = None;
        let record = with_traceparent(&inner.config, record, &mut traced);
        let mut prepared = inner.prepare(record, true)?;
        // The common case without the state lock, as `send` (the partition's slot only).
        if let Some(result) = inner.append_fast(&mut prepared) {
            return asked_future(result?);
        }
        let topic = topic_name(prepared.own_topic, &inner.config);
        if !inner.topic_known(topic) {
            check_topic_name(topic)?;
            // A record a transactional writer would refuse is refused as `send` refuses it,
            // before any lookup of the topic (`enqueue` checks again).
            if let Some(t) = &inner.lock().txn {
                t.check_send()?;
            }
            // One background lookup per topic, shared with every other caller, kept going for
            // the request timeout (not `max_block`) when nobody waits for it.
            let keep = Duration::from_millis(inner.config.request_timeout_ms);
            drop(inner.topic_lookup(topic, Some(keep)));
            // What the lookups of this topic learnt so far (e.g. UNKNOWN_TOPIC_OR_PARTITION
            // once one gave up, TOPIC_AUTHORIZATION_FAILED), else "not known yet".
            let known = inner
                .topic_errors
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(topic)
                .cloned();
            return Err(known.unwrap_or_else(|| ProduceError::MetadataPending {
                topic: topic.to_owned(),
            }));
        }
        inner.try_acquire(prepared.cost)?;
        let future = inner.enqueue(&prepared, false).into_result(&prepared)?;
        asked_future(future)
    }

    /// Sends every record and waits for all of them. `Ok` with one [`RecordMetadata`] per
    /// record, in order, when all were written.
    ///
    /// # Errors
    ///
    /// [`WriteErrors`] names each failed record by its index in `records` and carries every
    /// record's result. Records that fail to be taken (e.g. too large) fail alone; the others
    /// are still written.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped midway, the records already taken are written (or fail) with
    /// their outcomes unseen, and the rest are never sent.
    pub async fn write(
        &self,
        records: Vec<ProducerRecord>,
    ) -> Result<Vec<RecordMetadata>, WriteErrors> {
        let mut pending = Vec::with_capacity(records.len());
        for r in records {
            pending.push(self.send(r).await);
        }
        let mut results = Vec::with_capacity(pending.len());
        for p in pending {
            results.push(match p {
                Ok(f) => f.await,
                Err(e) => Err(e),
            });
        }
        let errors: Vec<(usize, ProduceError)> = results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().err().map(|e| (i, e.clone())))
            .collect();
        if errors.is_empty() {
            Ok(results.into_iter().flatten().collect())
        } else {
            Err(WriteErrors { errors, results })
        }
    }

    /// Sends every buffered record now (no lingering) and waits until each has its outcome
    /// (written or failed: look at the records' futures for which). Records sent during the
    /// flush are not waited for.
    ///
    /// # Errors
    ///
    /// None today (`Ok` once every flushed record has its outcome); the `Result` leaves room
    /// for a writer that cannot flush.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future stops the wait only; the batches are sent anyway.
    pub async fn flush(&self) -> Result<(), ProduceError> {
        let handles = self.inner.lock().seal_all();
        self.inner.wake_all();
        batch::settle_all(handles).await;
        Ok(())
    }

    /// Stops taking records, sends what is buffered, and waits for the outcomes until
    /// `timeout` has passed (Java `KafkaProducer.close(Duration)`). Records still pending then
    /// fail with [`ProduceError::Closed`], and this returns `Err(ProduceError::Closed)`; `Ok`
    /// means every record handed to the writer had its outcome (written or failed) before the
    /// deadline. Later `send`s fail with [`ProduceError::Closed`]. With metrics push on
    /// ([`WriterBuilder::enable_metrics_push`]) and a subscription that asks for metrics, the
    /// last KIP-714 push (`Terminating`) goes out in what is left of `timeout`.
    ///
    /// # Errors
    ///
    /// [`ProduceError::Closed`] when records were still pending at the deadline.
    ///
    /// # Cancel safety
    ///
    /// The writer is closing from the first poll on: dropping the future then stops the wait,
    /// not the close; what is buffered is still sent within the delivery timeout.
    pub async fn close(&self, timeout: Duration) -> Result<(), ProduceError> {
        let deadline = crate::time::deadline_after(timeout);
        let handles = self.inner.begin_close();
        let in_time = tokio::time::timeout_at(deadline, batch::settle_all(handles))
            .await
            .is_ok();
        let in_flight = self.inner.stop(in_time);
        // Requests in flight see the shutdown and fail their records; give them the moment
        // they need to run.
        let grace = tokio::time::Instant::now() + Duration::from_millis(500);
        let _ = tokio::time::timeout_at(grace, batch::settle_all(in_flight)).await;
        // KIP-714's terminating push, with the final counts, in what is left of the timeout.
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        self.guard.push.close(left).await;
        if in_time {
            Ok(())
        } else {
            Err(ProduceError::Closed(
                "records still pending at the close deadline were failed",
            ))
        }
    }

    /// Counters since the writer was built: records, bytes, requests per broker, batch sizes,
    /// retries, errors, latency percentiles, what is buffered now.
    pub fn stats(&self) -> WriterStats {
        let (records, bytes) = self.inner.lock().buffered();
        let (records, bytes) = (records as u64, bytes as u64);
        self.inner.stats.snapshot(records, bytes)
    }

    /// The transport the writer sends through.
    pub fn transport(&self) -> &Transport {
        &self.inner.transport
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<Writer>();
    check::<DeliveryFuture>();
    check::<ProduceError>();
    let _ = Plan::default;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// `close` takes any timeout: `Duration::MAX` (the natural "no timeout") must not overflow
    /// when added to an instant.
    #[tokio::test]
    async fn close_takes_any_timeout() {
        for timeout in [Duration::MAX, Duration::ZERO] {
            let transport = Transport::builder(["127.0.0.1:1"]).build().unwrap();
            let writer = Writer::builder(transport).build().unwrap();
            // Nothing is buffered: every record had its outcome, even with no time at all.
            assert!(writer.close(timeout).await.is_ok(), "{timeout:?}");
            let refused = writer.send(ProducerRecord::new("t", "v")).await;
            assert!(
                matches!(refused, Err(ProduceError::Closed(_))),
                "{refused:?}"
            );
            // The cause is said once, not "the writer is closed: the writer is closing".
            assert_eq!(
                refused.unwrap_err().to_string(),
                "the writer is closed: close was called; it takes no more records"
            );
        }
    }

    /// With nothing listening at the bootstrap address, `send` ends after `max_block` with the
    /// transport's last error as the cause (the address, "connection refused"), not a bare
    /// `Timeout { operation: "Metadata" }`.
    #[tokio::test]
    async fn a_refused_bootstrap_is_the_cause_of_the_block_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let transport = Transport::builder([addr.as_str()]).build().unwrap();
        let writer = Writer::builder(transport)
            .max_block(Duration::from_millis(500))
            .build()
            .unwrap();
        let err = writer
            .send(ProducerRecord::new("orders", "v"))
            .await
            .unwrap_err();
        let ProduceError::BlockTimeout {
            cause: Some(cause), ..
        } = &err
        else {
            panic!("{err:?}");
        };
        let ProduceError::Client(e) = &**cause else {
            panic!("{cause:?}");
        };
        assert!(
            matches!(&**e, Error::Connect { addr: a, source } if a == &addr
                && source.kind() == std::io::ErrorKind::ConnectionRefused),
            "{e:?}"
        );
        assert!(err.to_string().contains(&addr), "{err}");
        assert!(err.is_retriable());
    }
}
