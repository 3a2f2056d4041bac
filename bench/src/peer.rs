//! The peer side: librdkafka's producer (`rdkafka::producer::BaseProducer`, polled from the
//! sending thread) with the same settings as the Writer.
//!
//! With `--tasks N` (N > 1), N OS threads send at once (record `i` by thread `i % N`), sharing
//! the one producer (librdkafka's producer is thread-safe); each polls it as the single sender
//! does (every 1,024 of its records, and while the queue is full). One sender runs on the calling
//! thread, as before.
//!
//! Produce requests are counted by librdkafka itself: its statistics JSON has, per broker, a
//! `req` map of requests sent by API name; the run sums `req["Produce"]` over every broker.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;

use crate::cpu::CpuTime;
use crate::{RunResult, Workload};

/// How often librdkafka emits statistics (ms). Each emission costs some CPU (a JSON document
/// with every partition), so not too often; the final count is read from the first emission
/// after the flush.
const STATS_INTERVAL_MS: u64 = 1_000;

/// Longest wait for a transaction call.
const TXN_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest wait for the flush at the end of a run.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(600);

/// Counts deliveries and keeps the latest statistics.
#[derive(Default)]
struct Context {
    delivered: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
    /// (emissions so far, Produce requests in the latest emission).
    stats: Mutex<(u64, u64)>,
}

impl ClientContext for Context {
    fn stats(&self, statistics: Statistics) {
        let produce: i64 = statistics
            .brokers
            .values()
            .filter_map(|b| b.req.get("Produce"))
            .sum();
        if let Ok(mut s) = self.stats.lock() {
            s.0 += 1;
            s.1 = u64::try_from(produce).unwrap_or(0);
        }
    }
}

impl ProducerContext for Context {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut first) = self.first_error.lock()
                    && first.is_none()
                {
                    *first = Some(e.to_string());
                }
            }
        }
    }
}

/// librdkafka's settings equivalent to the Writer's in [`crate::ours`].
fn config(w: &Workload) -> ClientConfig {
    let s = &w.settings;
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &w.bootstrap)
        .set("client.id", "kafkit-bench-rdkafka")
        .set("acks", s.acks.name())
        .set("enable.idempotence", s.idempotence.to_string())
        .set("compression.type", s.compression.name())
        .set("linger.ms", s.linger_ms.to_string())
        .set("batch.size", s.batch_size.to_string())
        .set("batch.num.messages", s.batch_max_records.to_string())
        .set(
            "max.in.flight.requests.per.connection",
            s.max_in_flight.to_string(),
        )
        .set(
            "queue.buffering.max.kbytes",
            (s.buffer_memory / 1024).to_string(),
        )
        .set(
            "queue.buffering.max.messages",
            s.max_buffered_records.to_string(),
        )
        .set("message.timeout.ms", s.delivery_timeout_ms.to_string())
        .set("statistics.interval.ms", STATS_INTERVAL_MS.to_string());
    if w.txn_records > 0 {
        // librdkafka refuses a message.timeout.ms above transaction.timeout.ms: both clients
        // get the delivery timeout as their transaction timeout.
        c.set("transactional.id", format!("rdkafka-bench-{}", w.topic))
            .set("transaction.timeout.ms", s.delivery_timeout_ms.to_string())
            .set("acks", "all")
            .set("enable.idempotence", "true");
    }
    c
}

/// Produces the workload with librdkafka and measures it.
///
/// Errors: a message when the producer cannot be made, a send fails for another reason than a
/// full queue, or the flush times out.
pub fn run(w: &Workload) -> Result<RunResult, String> {
    let producer: BaseProducer<Context> = config(w)
        .create_with_context(Context::default())
        .map_err(|e| format!("rdkafka producer: {e}"))?;
    // Learn the topic's leaders before the clock starts, as the Writer does.
    producer
        .client()
        .fetch_metadata(Some(&w.topic), Duration::from_secs(30))
        .map_err(|e| format!("rdkafka metadata: {e}"))?;
    let value = w.value();
    let txn = w.txn_records > 0;
    let txn_timeout = Timeout::After(TXN_TIMEOUT);
    if txn {
        producer
            .init_transactions(txn_timeout)
            .map_err(|e| format!("rdkafka init_transactions: {e}"))?;
    }

    let tasks = if txn { 1 } else { w.tasks.max(1) };
    let cpu0 = CpuTime::now()?;
    let t0 = Instant::now();
    if tasks == 1 {
        send_share(&producer, w, &value, 0, 1)?;
    } else {
        let (producer, value) = (&producer, &value[..]);
        std::thread::scope(|scope| {
            let threads: Vec<_> = (0..tasks)
                .map(|t| scope.spawn(move || send_share(producer, w, value, t, tasks)))
                .collect();
            threads.into_iter().try_for_each(|h| {
                h.join()
                    .map_err(|_| "rdkafka: a sending thread panicked".to_string())?
            })
        })?;
    }
    if txn {
        producer
            .commit_transaction(txn_timeout)
            .map_err(|e| format!("rdkafka commit_transaction: {e}"))?;
    } else {
        producer
            .flush(Timeout::After(FLUSH_TIMEOUT))
            .map_err(|e| format!("rdkafka flush: {e}"))?;
    }
    let wall = t0.elapsed();
    let cpu = CpuTime::now()?.since(cpu0);

    // The request count: the first statistics emitted after the flush.
    let seen = producer.context().stats.lock().map_or(0, |s| s.0);
    let deadline = Instant::now() + Duration::from_millis(3 * STATS_INTERVAL_MS);
    let mut produce_requests = None;
    while Instant::now() < deadline {
        producer.poll(Duration::from_millis(50));
        if let Ok(s) = producer.context().stats.lock()
            && s.0 > seen
        {
            produce_requests = Some(s.1);
            break;
        }
    }
    let ctx = producer.context();
    Ok(RunResult {
        delivered: ctx.delivered.load(Ordering::Relaxed),
        failed: ctx.failed.load(Ordering::Relaxed),
        first_error: ctx.first_error.lock().ok().and_then(|e| e.clone()),
        wall,
        cpu,
        requests: produce_requests,
        bytes: 0,
        allocated: None,
        version: Some(crate::rdkafka_version()),
    })
}

/// Sends the records `first`, `first + step`, ... of the workload (all of them with `first` 0 and
/// `step` 1, committing every `txn_records` when the workload is transactional), polling the
/// producer every 1,024 of them and while its queue is full.
///
/// Errors: a send that fails for another reason than a full queue, or a transaction call.
fn send_share(
    producer: &BaseProducer<Context>,
    w: &Workload,
    value: &[u8],
    first: u64,
    step: u64,
) -> Result<(), String> {
    let partitions = u64::try_from(w.partitions).map_err(|_| "bad partition count")?;
    let txn = w.txn_records > 0;
    let txn_timeout = Timeout::After(TXN_TIMEOUT);
    let mut sent = 0u64;
    let mut i = first;
    while i < w.records {
        if txn && i.is_multiple_of(w.txn_records) {
            if i > 0 {
                producer
                    .commit_transaction(txn_timeout)
                    .map_err(|e| format!("rdkafka commit_transaction: {e}"))?;
            }
            producer
                .begin_transaction()
                .map_err(|e| format!("rdkafka begin_transaction: {e}"))?;
        }
        let partition = i32::try_from(i % partitions).map_err(|_| "bad partition")?;
        let mut record = BaseRecord::<(), [u8], ()>::to(&w.topic)
            .partition(partition)
            .payload(value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(1));
                }
                Err((e, _)) => return Err(format!("rdkafka send: {e}")),
            }
        }
        if sent.is_multiple_of(1024) {
            producer.poll(Duration::ZERO);
        }
        sent += 1;
        i += step;
    }
    Ok(())
}
