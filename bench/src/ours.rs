//! This project's side: [`kafkit::Writer`] over a [`kafkit::Transport`], with the
//! settings of [`crate::peer`]. Records name no topic (the writer's default topic), so a send
//! allocates nothing for the topic; outcomes are counted by the `on_completion` callback (as
//! librdkafka's delivery callback counts the peer's), and the record futures are dropped.
//!
//! With `--tasks N`, N tasks send at once (record `i` by task `i % N`), sharing one Writer.
//! Allocations are counted (the bench's global allocator) from the moment the first tenth of
//! the records was sent to the last acknowledgement: the steady state, after the connections,
//! the partition queues and the batch vectors have grown.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

use bytes::Bytes;
use kafkit::{Acks, ProducerRecord, ProducerRecordRef, Transport, Writer};

use crate::alloc::Allocated;
use crate::cpu::CpuTime;
use crate::{RunResult, Workload};

/// Outcomes seen by the completion callback.
#[derive(Default)]
struct Outcomes {
    delivered: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

/// Produces the workload with the Writer and measures it.
///
/// Errors: a message when the runtime, transport or writer cannot be made, the topic's
/// metadata cannot be read, or a send is refused.
pub fn run(w: &Workload) -> Result<RunResult, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    runtime.block_on(produce(w))
}

async fn produce(w: &Workload) -> Result<RunResult, String> {
    let s = &w.settings;
    let transport = Transport::builder(w.bootstrap.split(','))
        .build()
        .map_err(|e| format!("transport: {e}"))?;
    let outcomes = Arc::new(Outcomes::default());
    let seen = outcomes.clone();
    let builder = Writer::builder(transport.clone()).topic(w.topic.clone());
    let builder = if w.txn_records > 0 {
        // Transactional: acks=all and idempotence, as librdkafka's.
        builder
            .transactional_id(format!("kafkit-bench-{}", w.topic))
            .transaction_timeout(Duration::from_millis(s.delivery_timeout_ms))
    } else {
        let acks = match s.acks {
            crate::AcksArg::One => Acks::Leader,
            crate::AcksArg::All => Acks::All,
        };
        builder.acks(acks).enable_idempotence(s.idempotence)
    };
    let writer = builder
        .compression(s.compression.compression())
        .linger(Duration::from_millis(s.linger_ms))
        .batch_size(s.batch_size)
        .batch_max_records(s.batch_max_records)
        .max_in_flight_requests_per_connection(s.max_in_flight)
        .buffer_memory(s.buffer_memory)
        .max_buffered_records(s.max_buffered_records)
        .delivery_timeout(Duration::from_millis(s.delivery_timeout_ms))
        .on_completion(move |_, error| match error {
            None => {
                seen.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Some(e) => {
                seen.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut first) = seen.first_error.lock()
                    && first.is_none()
                {
                    *first = Some(e.to_string());
                }
            }
        })
        .build()
        .map_err(|e| format!("writer: {e}"))?;
    // Learn the topic's leaders before the clock starts, as the peer does.
    transport
        .metadata_for(&[w.topic.as_str()])
        .await
        .map_err(|e| format!("metadata: {e}"))?;
    let value = Bytes::from(w.value());
    let partitions = u64::try_from(w.partitions).map_err(|_| "bad partition count")?;
    const TXN_TIMEOUT: Duration = Duration::from_secs(60);
    let txn = w.txn_records > 0;
    if txn {
        writer
            .init_transactions(TXN_TIMEOUT)
            .await
            .map_err(|e| format!("init_transactions: {e}"))?;
    }

    let tasks = if txn { 1 } else { w.tasks.max(1) };
    let warm = w.records / 10;
    // The steady state starts once `warm` records were sent: the tasks count what they sent
    // in steps of `COUNT_EVERY` (an atomic per record would be the bench's cost, counted as
    // the client's), and the step that reaches `warm` notes the allocator's count and the
    // records sent so far (exact with one task; with more, the others' unreported part of a
    // step, fewer than `COUNT_EVERY` records each, is counted as after it).
    const COUNT_EVERY: u64 = 256;
    let sent = Arc::new(AtomicU64::new(0));
    let steady: Arc<Mutex<Option<(Allocated, u64)>>> = Arc::new(Mutex::new(None));

    let cpu0 = CpuTime::now()?;
    let t0 = Instant::now();
    let mut senders = Vec::new();
    for task in 0..tasks {
        let (writer, value, sent, steady) =
            (writer.clone(), value.clone(), sent.clone(), steady.clone());
        let (records, txn_records, futures, owned) = (
            w.records,
            w.txn_records,
            w.settings.futures,
            w.settings.owned,
        );
        senders.push(tokio::spawn(async move {
            let mut i = task;
            let mut unreported = 0;
            while i < records {
                // The txn case runs one task: its transactions are the records in order.
                if txn_records > 0 && i % txn_records == 0 {
                    if i > 0 {
                        writer
                            .commit_transaction(TXN_TIMEOUT)
                            .await
                            .map_err(|e| format!("commit_transaction: {e}"))?;
                    }
                    writer
                        .begin_transaction()
                        .map_err(|e| format!("begin_transaction: {e}"))?;
                }
                let partition = i32::try_from(i % partitions).map_err(|_| "bad partition")?;
                // The value is lent and copied into the batch, as librdkafka copies the payload
                // it is lent, unless `--owned` asks for a `ProducerRecord` (a `Bytes` clone per
                // record). The outcome reaches the callback (as librdkafka's delivery report): no
                // future is made, unless `--futures` asks for `send`'s path.
                let taken = if owned {
                    let record =
                        ProducerRecord::to_default_topic(value.clone()).partition(partition);
                    if futures {
                        writer.send(record).await.map(drop)
                    } else {
                        writer.send_detached(record).await
                    }
                } else {
                    let record = ProducerRecordRef::to_default_topic(&value).partition(partition);
                    if futures {
                        writer.send_ref(record).await.map(drop)
                    } else {
                        writer.send_detached_ref(record).await
                    }
                };
                taken.map_err(|e| format!("send refused record {i}: {e}"))?;
                unreported += 1;
                if unreported == COUNT_EVERY {
                    unreported = 0;
                    let before = sent.fetch_add(COUNT_EVERY, Ordering::Relaxed);
                    if before < warm
                        && before + COUNT_EVERY >= warm
                        && let Ok(mut s) = steady.lock()
                    {
                        *s = Some((Allocated::now(), before + COUNT_EVERY));
                    }
                }
                i += tasks;
            }
            Ok::<(), String>(())
        }));
    }
    for s in senders {
        s.await.map_err(|e| format!("sending task: {e}"))??;
    }
    if txn {
        writer
            .commit_transaction(TXN_TIMEOUT)
            .await
            .map_err(|e| format!("commit_transaction: {e}"))?;
    } else {
        writer.flush().await.map_err(|e| format!("flush: {e}"))?;
    }
    // Every outcome has reached the callback (which may run just after the futures resolve).
    let settled = Instant::now();
    while outcomes.delivered.load(Ordering::Relaxed) + outcomes.failed.load(Ordering::Relaxed)
        < w.records
        && settled.elapsed() < std::time::Duration::from_secs(10)
    {
        tokio::task::yield_now().await;
    }
    let allocated = steady
        .lock()
        .ok()
        .and_then(|s| *s)
        .map(|(from, at)| (Allocated::now().since(from), w.records.saturating_sub(at)));
    let wall = t0.elapsed();
    let cpu = CpuTime::now()?.since(cpu0);

    let stats = writer.stats();
    writer
        .close(Duration::from_secs(10))
        .await
        .map_err(|e| format!("close: {e}"))?;
    Ok(RunResult {
        delivered: outcomes.delivered.load(Ordering::Relaxed),
        failed: outcomes.failed.load(Ordering::Relaxed),
        first_error: outcomes.first_error.lock().ok().and_then(|e| e.clone()),
        wall,
        cpu,
        requests: Some(stats.produce_requests.values().sum()),
        bytes: 0,
        allocated,
        version: Some(crate::ours_version()),
    })
}
