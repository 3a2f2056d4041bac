//! This project's side of the consumer bench: [`kafkit::Reader`] over a [`kafkit::Transport`],
//! every partition assigned at the earliest offset, read with `next_batch` (records grouped per
//! partition, as fetched).

use std::time::{Duration, Instant};

use kafkit::{Reader, StartOffset, Transport};

use super::{Check, ReadWorkload, STALL};
use crate::RunResult;
use crate::cpu::CpuTime;

/// Reads the workload's topic with the Reader and measures it.
///
/// Errors: a message when the runtime, transport or reader cannot be made, the topic's metadata
/// cannot be read, the Reader reports an error, or no record comes for [`STALL`].
pub fn run(w: &ReadWorkload) -> Result<RunResult, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    runtime.block_on(read(w))
}

async fn read(w: &ReadWorkload) -> Result<RunResult, String> {
    let s = &w.settings;
    let transport = Transport::builder(w.bootstrap.split(','))
        .build()
        .map_err(|e| format!("transport: {e}"))?;
    // Learn the topic's leaders before the clock starts, as the peer does.
    transport
        .metadata_for(&[w.topic.as_str()])
        .await
        .map_err(|e| format!("metadata: {e}"))?;
    let reader = Reader::builder(transport)
        .fetch_min_bytes(s.fetch_min_bytes)
        .fetch_max_wait(Duration::from_millis(s.fetch_max_wait_ms))
        .max_partition_fetch_bytes(s.max_partition_fetch_bytes)
        .fetch_max_bytes(s.fetch_max_bytes)
        .queued_max_bytes(s.queued_max_kbytes * 1024)
        .check_crcs(s.check_crcs)
        .build()
        .map_err(|e| format!("reader: {e}"))?;
    let mut check = Check::new(w);

    let cpu0 = CpuTime::now()?;
    let t0 = Instant::now();
    reader
        .assign((0..w.partitions).map(|p| (w.topic.as_str(), p, StartOffset::Earliest)))
        .map_err(|e| format!("assign: {e}"))?;
    while check.read < w.records {
        let parts = tokio::time::timeout(STALL, reader.next_batch())
            .await
            .map_err(|_| {
                format!(
                    "no record for {STALL:?} after {} of {} records",
                    check.read, w.records
                )
            })?
            .map_err(|e| format!("next_batch: {e}"))?;
        for part in &parts {
            for r in &part.records {
                check.record(part.partition, r.offset, r.value.as_deref());
            }
        }
    }
    let wall = t0.elapsed();
    let cpu = CpuTime::now()?.since(cpu0);

    let stats = reader.stats();
    reader.close();
    let failed = check.finish();
    Ok(RunResult {
        delivered: check.read,
        failed,
        first_error: check.first_error.take(),
        wall,
        cpu,
        requests: Some(stats.fetch_requests.values().sum()),
        bytes: check.bytes,
        allocated: None,
    })
}
