//! The peer side of the consumer bench: librdkafka's consumer (`rdkafka::consumer::BaseConsumer`,
//! polled from the reading thread) with an explicit assignment of every partition at the
//! beginning and the Reader's fetch settings.
//!
//! With `--tasks N` (N > 1), N OS threads poll the one consumer at once: librdkafka's API is
//! thread-safe ("the calling application may call any of the API functions from any of its own
//! threads at any time", INTRODUCTION.md, "Threads and callbacks"; only the batch consume calls
//! must not run concurrently, and `BaseConsumer::poll` polls one message at a time), and rdkafka's
//! `BaseConsumer` is `Sync`. Each thread checks the records it is handed ([`Check`]) and adds one
//! to a shared count per record (it cannot know otherwise when the topic is read); the thread
//! whose record completes the count stops the clock, and the others stop at their next poll
//! (100 ms at most). One thread polls on the calling thread, as before.
//!
//! Fetch requests are counted by librdkafka itself: its statistics JSON has, per broker, a `req`
//! map of requests sent by API name; the run sums `req["Fetch"]` over every broker in the first
//! emission after the last record, once the partitions are unassigned (so the idle long polls at
//! the log end that follow are not counted; one Fetch per broker may still have been in flight,
//! as it may be for the Reader).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::Message;
use rdkafka::statistics::Statistics;
use rdkafka::{Offset, TopicPartitionList};

use super::{Check, ReadWorkload, STALL};
use crate::RunResult;
use crate::cpu::CpuTime;

/// How often librdkafka emits statistics (ms); each emission (a JSON document with every
/// partition, parsed on the polling thread) costs some CPU, so not too often.
const STATS_INTERVAL_MS: u64 = 1_000;

/// Keeps the latest statistics: (emissions so far, Fetch requests in the latest emission).
#[derive(Default)]
struct Context {
    stats: Mutex<(u64, u64)>,
}

impl ClientContext for Context {
    fn stats(&self, statistics: Statistics) {
        let fetch: i64 = statistics
            .brokers
            .values()
            .filter_map(|b| b.req.get("Fetch"))
            .sum();
        if let Ok(mut s) = self.stats.lock() {
            s.0 += 1;
            s.1 = u64::try_from(fetch).unwrap_or(0);
        }
    }
}

impl ConsumerContext for Context {}

/// librdkafka's settings equivalent to the Reader's in [`super::ours`].
pub(super) fn config(w: &ReadWorkload) -> ClientConfig {
    let s = &w.settings;
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &w.bootstrap)
        .set("client.id", "kafkit-bench-rdkafka")
        // librdkafka refuses `assign` without a group id (UNKNOWN_GROUP); the group is never
        // joined (explicit assignment) and nothing is committed or stored.
        .set("group.id", "kafkit-bench-read")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("fetch.min.bytes", s.fetch_min_bytes.to_string())
        .set("fetch.wait.max.ms", s.fetch_max_wait_ms.to_string())
        .set(
            "max.partition.fetch.bytes",
            s.max_partition_fetch_bytes.to_string(),
        )
        .set("fetch.max.bytes", s.fetch_max_bytes.to_string())
        .set(
            "queued.max.messages.kbytes",
            s.queued_max_kbytes.to_string(),
        )
        .set("check.crcs", s.check_crcs.to_string())
        .set(
            "queued.min.messages",
            s.rdkafka_queued_min_messages.to_string(),
        )
        .set(
            "fetch.queue.backoff.ms",
            s.rdkafka_fetch_queue_backoff_ms.to_string(),
        )
        .set("statistics.interval.ms", STATS_INTERVAL_MS.to_string());
    c
}

/// Reads the workload's topic with librdkafka and measures it.
///
/// Errors: a message when the consumer cannot be made or assigned, a poll returns an error, or
/// no record comes for [`STALL`].
pub fn run(w: &ReadWorkload) -> Result<RunResult, String> {
    let consumer: BaseConsumer<Context> = config(w)
        .create_with_context(Context::default())
        .map_err(|e| format!("rdkafka consumer: {e}"))?;
    // Learn the topic's leaders before the clock starts, as the Reader does.
    consumer
        .fetch_metadata(Some(&w.topic), Duration::from_secs(30))
        .map_err(|e| format!("rdkafka metadata: {e}"))?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..w.partitions {
        tpl.add_partition_offset(&w.topic, p, Offset::Beginning)
            .map_err(|e| format!("assign list: {e}"))?;
    }
    let mut checks: Vec<Check> = (0..w.tasks.max(1)).map(|_| Check::new(w)).collect();

    let cpu0 = CpuTime::now()?;
    let t0 = Instant::now();
    consumer.assign(&tpl).map_err(|e| format!("assign: {e}"))?;
    let run = Run {
        records: w.records,
        read: Padded(AtomicU64::new(0)),
        done: Padded(AtomicBool::new(false)),
        end: Mutex::new(None),
        t0,
        cpu0,
    };
    let checks = if let [check] = &mut checks[..] {
        poll_share(&consumer, &run, check);
        checks
    } else {
        let (consumer, run) = (&consumer, &run);
        std::thread::scope(|scope| {
            let threads: Vec<_> = checks
                .into_iter()
                .map(|mut check| {
                    scope.spawn(move || {
                        poll_share(consumer, run, &mut check);
                        check
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|h| {
                    h.join()
                        .map_err(|_| "rdkafka: a reading thread panicked".to_string())
                })
                .collect::<Result<Vec<Check>, String>>()
        })?
    };
    let end = run.end.lock().ok().and_then(|mut e| e.take());
    let (wall, cpu) =
        end.unwrap_or_else(|| Err("the reading threads ended without a result".into()))?;

    // The request count: the first statistics emitted once nothing is fetched any more.
    consumer.unassign().map_err(|e| format!("unassign: {e}"))?;
    let seen = consumer.context().stats.lock().map_or(0, |s| s.0);
    let deadline = Instant::now() + Duration::from_millis(3 * STATS_INTERVAL_MS);
    let mut fetch_requests = None;
    while Instant::now() < deadline {
        let _ = consumer.poll(Duration::from_millis(50));
        if let Ok(s) = consumer.context().stats.lock()
            && s.0 > seen
        {
            fetch_requests = Some(s.1);
            break;
        }
    }
    let tally = Check::finish(checks);
    Ok(RunResult {
        delivered: tally.read,
        failed: tally.bad,
        first_error: tally.first_error,
        wall,
        cpu,
        requests: fetch_requests,
        bytes: tally.bytes,
        allocated: None,
        version: Some(crate::rdkafka_version()),
    })
}

/// A value alone on its cache line(s), so that the per-record count does not slow the reads of
/// the flag beside it.
#[repr(align(128))]
struct Padded<T>(T);

/// How the run ended: its time and CPU once every record was read, or the first error.
type End = Result<(Duration, CpuTime), String>;

/// What the polling threads share.
struct Run {
    /// Records in the topic.
    records: u64,
    /// Records read by all threads so far.
    read: Padded<AtomicU64>,
    /// Set with `end`: the threads stop.
    done: Padded<AtomicBool>,
    /// Set once, by the thread that read the last record or met the first error.
    end: Mutex<Option<End>>,
    /// When the clock started, and the CPU time then.
    t0: Instant,
    cpu0: CpuTime,
}

impl Run {
    /// Ends the run with `end` unless it has ended already.
    fn end(&self, end: End) {
        if let Ok(mut e) = self.end.lock()
            && e.is_none()
        {
            *e = Some(end);
        }
        self.done.0.store(true, Ordering::Relaxed);
    }
}

/// One polling thread: polls the consumer until the run ends, checking every record it is
/// handed. The thread whose record completes the count ends the run; one that finds no record
/// read by any thread for [`STALL`] ends it with an error.
fn poll_share(consumer: &BaseConsumer<Context>, run: &Run, check: &mut Check) {
    // The records read by all threads when this one last polled in vain, and since when none
    // came.
    let mut seen = 0;
    let mut idle_since: Option<Instant> = None;
    while !run.done.0.load(Ordering::Relaxed) {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                check.record(m.partition(), m.offset(), m.payload());
                if run.read.0.fetch_add(1, Ordering::Relaxed) + 1 == run.records {
                    let wall = run.t0.elapsed();
                    run.end(CpuTime::now().map(|cpu| (wall, cpu.since(run.cpu0))));
                }
            }
            Some(Err(e)) => {
                run.end(Err(format!("poll: {e}")));
                break;
            }
            None => {
                let read = run.read.0.load(Ordering::Relaxed);
                if read != seen {
                    (seen, idle_since) = (read, None);
                }
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() > STALL {
                    run.end(Err(format!(
                        "no record for {STALL:?} after {read} of {} records",
                        run.records
                    )));
                    break;
                }
            }
        }
    }
}
