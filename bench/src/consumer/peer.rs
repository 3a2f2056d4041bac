//! The peer side of the consumer bench: librdkafka's consumer (`rdkafka::consumer::BaseConsumer`,
//! polled from the reading thread) with an explicit assignment of every partition at the
//! beginning and the Reader's fetch settings.
//!
//! Fetch requests are counted by librdkafka itself: its statistics JSON has, per broker, a `req`
//! map of requests sent by API name; the run sums `req["Fetch"]` over every broker in the first
//! emission after the last record, once the partitions are unassigned (so the idle long polls at
//! the log end that follow are not counted; one Fetch per broker may still have been in flight,
//! as it may be for the Reader).

use std::sync::Mutex;
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
    let mut check = Check::new(w);

    let cpu0 = CpuTime::now()?;
    let t0 = Instant::now();
    consumer.assign(&tpl).map_err(|e| format!("assign: {e}"))?;
    let mut idle_since: Option<Instant> = None;
    while check.read < w.records {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                idle_since = None;
                check.record(m.partition(), m.offset(), m.payload());
            }
            Some(Err(e)) => return Err(format!("poll: {e}")),
            None => {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() > STALL {
                    return Err(format!(
                        "no record for {STALL:?} after {} of {} records",
                        check.read, w.records
                    ));
                }
            }
        }
    }
    let wall = t0.elapsed();
    let cpu = CpuTime::now()?.since(cpu0);

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
    let failed = check.finish();
    Ok(RunResult {
        delivered: check.read,
        failed,
        first_error: check.first_error.take(),
        wall,
        cpu,
        requests: fetch_requests,
        bytes: check.bytes,
        allocated: None,
    })
}
