//! This project's side of the share bench: one [`kafkit::ShareReader`] in implicit mode, in a
//! child process of the bench (`kafkit-bench share-read ...`), polling until the workload's
//! records came; prints one RESULT line (see [`super::ShareRun::to_line`]).

use std::time::{Duration, Instant};

use kafkit::{ShareReader, Transport};

use super::{Checker, STALL, ShareRun, ShareWorkload, process_cpu};
use crate::cpu::CpuTime;

/// Reads the workload's topic with a ShareReader and measures the window.
///
/// Errors: a message when the runtime, transport or reader cannot be made, a poll or the commit
/// fails, or no record comes for [`STALL`].
pub fn run(w: &ShareWorkload) -> Result<ShareRun, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    runtime.block_on(read(w))
}

async fn read(w: &ShareWorkload) -> Result<ShareRun, String> {
    let s = &w.settings;
    let transport = Transport::builder(w.bootstrap.split(','))
        .build()
        .map_err(|e| format!("transport: {e}"))?;
    let subscribed = Instant::now();
    let mut reader = ShareReader::builder(transport, w.group.clone())
        .topics([w.topic.clone()])
        .max_poll_records(s.max_poll_records)
        .fetch_max_wait(Duration::from_millis(s.fetch_max_wait_ms))
        .fetch_min_bytes(s.fetch_min_bytes)
        .fetch_max_bytes(s.fetch_max_bytes)
        .build()
        .map_err(|e| format!("share reader: {e}"))?;

    let mut check = Checker::new(w.partitions, w.value_size);
    let mut count = 0u64;
    let mut polls = 0u64;
    let mut first = None;
    // The count before the window, when it started, and the CPU time then.
    let mut window: Option<(u64, Instant, CpuTime, Option<Duration>)> = None;
    let mut end = None;
    let mut last = Instant::now();
    while count < w.records {
        let batch = reader
            .poll(Duration::from_secs(1))
            .await
            .map_err(|e| format!("poll after {count} records: {e}"))?;
        if batch.is_empty() {
            if last.elapsed() > STALL {
                return Err(format!(
                    "no record for {STALL:?} after {count} of {}",
                    w.records
                ));
            }
            continue;
        }
        last = Instant::now();
        first.get_or_insert(last);
        let n = batch.len() as u64;
        if window.is_none() && count + n > w.warmup_records {
            window = Some((
                count,
                Instant::now(),
                CpuTime::now()?,
                process_cpu(w.broker_pid),
            ));
        }
        if window.is_some() {
            polls += 1;
        }
        for r in &batch {
            check.record(
                r.partition,
                r.offset,
                r.value.as_deref(),
                r.delivery_count(),
            );
        }
        count += n;
        if count >= w.records
            && let Some((_, t0, cpu0, broker0)) = window
        {
            let broker = process_cpu(w.broker_pid)
                .zip(broker0)
                .map(|(b1, b0)| b1.saturating_sub(b0));
            end = Some((t0.elapsed(), CpuTime::now()?.since(cpu0), broker));
        }
    }
    let stats = reader.stats();
    let outcomes = reader
        .commit(Duration::from_secs(10))
        .await
        .map_err(|e| format!("commit: {e}"))?;
    if let Some(failed) = outcomes.iter().find(|o| o.result.is_err()) {
        eprintln!(
            "kafkit-bench share-read: commit of {}/{} failed: {:?}",
            failed.topic, failed.partition, failed.result
        );
    }
    reader
        .close(Duration::from_secs(10))
        .await
        .map_err(|e| format!("close: {e}"))?;
    let (from, _, _, _) = window.ok_or("no window")?;
    let (wall, cpu, broker_cpu) = end.ok_or("the window never closed")?;
    Ok(ShareRun {
        records: count - from,
        wall,
        cpu: cpu.user + cpu.system,
        cpu_split: Some(cpu),
        polls,
        bad: check.bad + count.saturating_sub(w.records),
        redelivered: check.redelivered,
        to_first: first.map_or(Duration::ZERO, |f| f - subscribed),
        share_fetches: Some(stats.share_fetch_requests),
        share_acknowledges: Some(stats.share_acknowledge_requests),
        broker_cpu,
    })
}
