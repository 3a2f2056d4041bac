//! This project's side of the consumer bench: [`kafkit::Reader`] over a [`kafkit::Transport`],
//! every partition assigned at the earliest offset, read with `next_batch` (records grouped per
//! partition, as fetched).
//!
//! With `--tasks N`, N tokio tasks read at once from the one Reader, each calling `next_batch`
//! in a loop (it takes `&self`, so the Reader is shared as an `Arc<Reader>`; every task waiting
//! is woken when records arrive, and whichever polls first takes them). Each task checks what it
//! was handed ([`Check`]); the task whose records complete the count stops the clock, and the
//! Reader is then closed, which ends the others' `next_batch` waits. One task reads the same way
//! (a spawned task, as the producer bench's sender).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kafkit::{Reader, StartOffset, Transport};
use tokio::sync::watch;

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

/// How the run ended: its time and CPU once every record was read, or the first error.
type End = Result<(Duration, CpuTime), String>;

/// What the reading tasks share.
struct Run {
    reader: Reader,
    /// Records in the topic.
    records: u64,
    /// Records read by all tasks so far (added once per `next_batch`).
    read: AtomicU64,
    /// Set once, by the task that read the last record or met the first error.
    end: watch::Sender<Option<End>>,
    /// When the clock started, and the CPU time then.
    t0: Instant,
    cpu0: CpuTime,
}

impl Run {
    /// Ends the run with `end` unless it has ended already.
    fn end(&self, end: End) {
        self.end.send_if_modified(|e| {
            if e.is_some() {
                return false;
            }
            *e = Some(end);
            true
        });
    }

    fn ended(&self) -> bool {
        self.end.borrow().is_some()
    }
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
        .fetch_sessions(crate::consumer::fetch_sessions())
        .build()
        .map_err(|e| format!("reader: {e}"))?;
    let tasks = w.tasks.max(1);
    let checks: Vec<Check> = (0..tasks).map(|_| Check::new(w)).collect();
    let (end, mut ended) = watch::channel(None);

    let cpu0 = CpuTime::now()?;
    let t0 = Instant::now();
    reader
        .assign((0..w.partitions).map(|p| (w.topic.as_str(), p, StartOffset::Earliest)))
        .map_err(|e| format!("assign: {e}"))?;
    let run = Arc::new(Run {
        reader,
        records: w.records,
        read: AtomicU64::new(0),
        end,
        t0,
        cpu0,
    });
    let readers: Vec<_> = checks
        .into_iter()
        .map(|check| tokio::spawn(consume(Arc::clone(&run), check)))
        .collect();
    let end = ended
        .wait_for(Option::is_some)
        .await
        .map_err(|_| "the reading tasks ended without a result".to_string())?
        .clone();

    let stats = run.reader.stats();
    run.reader.close();
    let mut checks = Vec::new();
    for r in readers {
        checks.push(r.await.map_err(|e| format!("reading task: {e}"))?);
    }
    let (wall, cpu) = end.unwrap_or(Err("no end".to_string()))?;
    let tally = Check::finish(checks);
    Ok(RunResult {
        delivered: tally.read,
        failed: tally.bad,
        first_error: tally.first_error,
        wall,
        cpu,
        requests: Some(stats.fetch_requests.values().sum()),
        bytes: tally.bytes,
        allocated: None,
        version: Some(crate::ours_version()),
    })
}

/// One reading task: `next_batch` until the Reader is closed (after the last record) or fails,
/// checking every record it is handed. The task whose records complete the count ends the run;
/// one that waits [`STALL`] twice without any task having read a record in between ends it with
/// an error.
async fn consume(run: Arc<Run>, mut check: Check) -> Check {
    // The records read by all tasks when this one last waited in vain.
    let mut seen = 0;
    loop {
        let parts = match tokio::time::timeout(STALL, run.reader.next_batch()).await {
            Ok(Ok(parts)) => parts,
            // Closed once the run ended, or a failure.
            Ok(Err(e)) => {
                if !run.ended() {
                    run.end(Err(format!("next_batch: {e}")));
                }
                return check;
            }
            Err(_) => {
                let read = run.read.load(Ordering::Relaxed);
                if read == seen {
                    run.end(Err(format!(
                        "no record for {STALL:?} after {read} of {} records",
                        run.records
                    )));
                    return check;
                }
                seen = read;
                continue;
            }
        };
        let mut n = 0;
        for part in &parts {
            n += part.records.len() as u64;
            for r in &part.records {
                check.record(part.partition, r.offset, r.value.as_deref());
            }
        }
        let before = run.read.fetch_add(n, Ordering::Relaxed);
        if before < run.records && before + n >= run.records {
            let wall = run.t0.elapsed();
            run.end(CpuTime::now().map(|cpu| (wall, cpu.since(run.cpu0))));
        }
    }
}
