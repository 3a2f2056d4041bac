//! The soak run of issue 19 (`cargo xtask soak`, and a short form in the `soak` test module):
//! many records through one [`Writer`] (idempotent, `acks=all`) read by a group of
//! [`GroupReader`] members while faults are injected, every record checked, and the process's
//! resident memory sampled every second.
//!
//! Two phases:
//! - **tansu**: the tansu built with SQLite storage (durable: its data survive a restart),
//!   reached only through a [`Relay`] (tansu advertises the relay's address). Faults, in turn:
//!   every connection cut by the relay; tansu killed (SIGKILL) and started again on the same
//!   database; a member killed (its runtime dropped: no LeaveGroup, no commit, connections
//!   closed, as a crashed process) and a new member started in its place.
//! - **mock**: librdkafka's mock cluster (3 brokers). Faults, in turn: a partition's leader moved
//!   to another broker; a broker down for 2 s and up again (the group coordinator included).
//! - **Apache Kafka**: the three-node KRaft cluster of `cargo xtask test`
//!   ([`crate::kafka_cluster`]), topics with three replicas and `min.insync.replicas=2`. Faults,
//!   in turn: a node that does not lead the KRaft quorum SIGKILLed and started again on its data;
//!   the quorum leader's node likewise; a member killed and a new one started. Each fault waits
//!   until every replica is back in sync, so no two nodes are ever down together.
//!
//! Each record's value starts with its index `i` (8 bytes, big endian) and goes to partition
//! `i % partitions`, so the indexes of one partition grow with its offsets. The check
//! ([`Check`]): every index read (none lost), no index at two offsets (no duplicate by the
//! producer), in each partition the indexes grow with the offset (order kept). An offset handed
//! out again (a new owner resuming at the last commit after a rebalance, as at-least-once allows)
//! is counted apart as a consumer duplicate and is no failure.
//!
//! Memory: a thread reads `/proc/self/statm` every second; a phase fails when its peak resident
//! size exceeds the size at its start by more than the configured buffers (the writer's
//! `buffer_memory`, each member's `queued_max_bytes` plus one fetch answer, the check's bitmap,
//! the mock's log) plus [`RSS_MARGIN`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kafkit::{
    Acks, AutoOffsetReset, GroupReader, ProducerRecord, Reader, RecordMetadata, Transport, Writer,
};
use tokio::sync::Notify;

use crate::kafka_cluster::KafkaCluster;
use crate::{
    GroupMock, OwnedTansu, Relay, create_topic, create_topic_replicated, mock_topic_spread,
    unique_topic,
};

/// Fixed allowance over the configured buffers: allocator slack, runtime, connections, the
/// librdkafka clients of the mock phase.
pub const RSS_MARGIN: u64 = 96 << 20;

/// The writer's `buffer_memory`.
const WRITER_BUFFER: usize = 16 << 20;
/// Each member's `queued_max_bytes`.
const MEMBER_QUEUE: usize = 4 << 20;
/// Each member's `fetch_max_bytes` (one answer may come on top of the queue).
const MEMBER_FETCH: i32 = 2 << 20;
/// librdkafka's mock keeps at most this many bytes of log per partition (`rdkafka_mock.c`,
/// `mpart->max_size`) and drops older segments.
const MOCK_LOG_PER_PARTITION: u64 = 5 << 20;
/// A phase fails when no record is acknowledged or read for this long.
const STALL: Duration = Duration::from_secs(90);

/// The members' session timeout and heartbeat interval on the broker of a phase.
#[derive(Clone, Copy, Debug)]
struct Liveness {
    session: Duration,
    heartbeat: Duration,
}

/// The mock and tansu with memory storage answer a heartbeat in milliseconds.
const FAST_BROKER: Liveness = Liveness {
    session: Duration::from_secs(6),
    heartbeat: Duration::from_millis(500),
};

/// The SQLite tansu (unoptimised build) answered heartbeats 0.5 to 3.4 s late while the
/// writer loaded it, and tansu 0.6.0 counts only Heartbeat requests (not JoinGroup or
/// SyncGroup) as a member's sign of life: a group that takes longer than the session to form
/// (tansu holds each follower's JoinGroup 3 s) has its members evicted, the generation bumped
/// and the join started over. At 6 s the group kept re-forming for minutes; Kafka's default
/// (`session.timeout.ms` 45 s) is longer than this. A killed member is noticed after it.
const SQLITE_BROKER: Liveness = Liveness {
    session: Duration::from_secs(30),
    heartbeat: Duration::from_secs(1),
};

/// What a soak run does.
#[derive(Clone, Debug)]
pub struct Options {
    /// Records of the tansu phase on memory storage.
    pub records: u64,
    /// Records of the tansu phase on SQLite storage (the one restarted).
    pub durable_records: u64,
    /// Records of the mock phase.
    pub mock_records: u64,
    /// Records of the Apache Kafka phase.
    pub kafka_records: u64,
    /// Partitions of each phase's topic.
    pub partitions: i32,
    /// Bytes of each record's value (at least 8: the index).
    pub value_bytes: usize,
    /// Group members.
    pub members: usize,
    /// Faults per phase, spread evenly over the records written.
    pub faults: usize,
}

impl Options {
    /// The full run: 10,000,000 records on tansu (memory), 200,000 on tansu (SQLite), whose
    /// unoptimised build writes and reads about 1,000 to 3,000 records a second, 1,000,000
    /// on the mock cluster and 2,000,000 on Apache Kafka (a phase the test runs; `cargo xtask
    /// soak` does not start Kafka yet).
    pub fn full() -> Options {
        Options {
            records: 10_000_000,
            durable_records: 200_000,
            mock_records: 1_000_000,
            kafka_records: 2_000_000,
            partitions: 6,
            value_bytes: 100,
            members: 3,
            faults: 12,
        }
    }

    /// The short form of `cargo xtask test`: 100,000 records on tansu (memory), 5,000 on
    /// tansu (SQLite), 50,000 on the mock, 500,000 on Apache Kafka's three nodes, 3 faults each.
    pub fn short() -> Options {
        Options {
            records: 100_000,
            durable_records: 5_000,
            mock_records: 50_000,
            kafka_records: 500_000,
            faults: 3,
            ..Options::full()
        }
    }

    /// `records` on tansu (memory), a fiftieth of it (at least 10,000) on tansu (SQLite) and a
    /// tenth (at least 10,000) on the mock.
    pub fn with_records(records: u64) -> Options {
        let faults = if records >= 1_000_000 { 12 } else { 3 };
        Options {
            records,
            durable_records: (records / 50).max(10_000).min(records),
            mock_records: (records / 10).max(10_000).min(records),
            kafka_records: (records / 5).max(10_000).min(records),
            faults,
            ..Options::full()
        }
    }
}

/// One phase's outcome.
#[derive(Clone, Debug, Default)]
pub struct PhaseReport {
    /// `tansu (SQLite)` or `mock`.
    pub name: String,
    /// Records written (acknowledged).
    pub acked: u64,
    /// Records the writer reported failed.
    pub produce_failures: u64,
    /// Distinct records read.
    pub read: u64,
    /// Records never read.
    pub lost: u64,
    /// An index read at a second offset.
    pub producer_duplicates: u64,
    /// Whether the broker drops an idempotent producer's retried batches (sequence numbers
    /// checked): tansu does; librdkafka's mock checks them only for a transactional producer
    /// (`rd_kafka_mock_validate_records` returns at once without a transactional id), so there a
    /// retry whose first attempt was appended before an outage is appended again. Producer
    /// duplicates fail a phase only where the broker checks.
    pub broker_dedupes: bool,
    /// An index read after a greater one of its partition.
    pub out_of_order: u64,
    /// A value that is no record of this run.
    pub malformed: u64,
    /// Offsets handed out again after a rebalance (allowed: at-least-once).
    pub consumer_duplicates: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// Batch retries of the writer.
    pub retries: u64,
    /// Joins completed by every member (each generation counts once per member).
    pub rebalances: u64,
    /// Commits that failed (retriable during faults).
    pub commit_errors: u64,
    /// Errors the members' `next_batch` returned.
    pub member_errors: u64,
    /// Resident size when the phase started, bytes.
    pub rss_start: u64,
    /// Largest resident size seen, bytes.
    pub rss_peak: u64,
    /// The largest allowed: start + buffers + margin.
    pub rss_limit: u64,
    /// Wall time.
    pub duration: Duration,
    /// Why it failed (empty: passed).
    pub failures: Vec<String>,
}

impl PhaseReport {
    fn judge(&mut self, expected: u64) {
        let mut f = Vec::new();
        if self.acked != expected {
            f.push(format!("{} of {expected} records acknowledged", self.acked));
        }
        let dups = if self.broker_dedupes {
            self.producer_duplicates
        } else {
            0
        };
        for (n, what) in [
            (self.produce_failures, "records failed to write"),
            (self.lost, "records lost"),
            (dups, "records duplicated by the producer"),
            (self.out_of_order, "records out of order"),
            (self.malformed, "malformed records"),
        ] {
            if n > 0 {
                f.push(format!("{n} {what}"));
            }
        }
        if self.rss_peak > self.rss_limit {
            f.push(format!(
                "peak RSS {} MiB over the limit of {} MiB",
                self.rss_peak >> 20,
                self.rss_limit >> 20
            ));
        }
        self.failures.extend(f);
    }
}

/// Whether `KAFKIT_SOAK_TRACE` is set: offset gaps and faults are then printed as they happen.
fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("KAFKIT_SOAK_TRACE").is_some())
}

/// The Markdown table of `reports`.
pub fn table(reports: &[PhaseReport]) -> String {
    let mut s = String::from(
        "| phase | records | read | lost | dup (producer) | order | dup (consumer, allowed) \
         | faults injected | writer retries | rebalances | commit errors | RSS start / peak / \
         limit | duration |\n|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|\n",
    );
    for r in reports {
        let faults: Vec<String> = r.faults.iter().map(|(k, n)| format!("{n} {k}")).collect();
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} MiB | {:.1} s |\n",
            r.name,
            r.acked,
            r.read,
            r.lost,
            r.producer_duplicates,
            r.out_of_order,
            r.consumer_duplicates,
            faults.join(", "),
            r.retries,
            r.rebalances,
            r.commit_errors,
            r.rss_start >> 20,
            r.rss_peak >> 20,
            r.rss_limit >> 20,
            r.duration.as_secs_f64()
        ));
    }
    s
}

// ----- the check ------------------------------------------------------------------------------

/// Every record read, checked against what was written (see the module docs).
pub struct Check {
    state: Mutex<CheckState>,
    /// Woken every few thousand records read.
    pub progress: Notify,
}

struct CheckState {
    records: u64,
    partitions: u64,
    /// Bit `i`: index `i` was read.
    seen: Vec<u64>,
    /// Per partition: the offset after the greatest read, and the index read there.
    next_offset: Vec<i64>,
    last_index: Vec<Option<u64>>,
    read: u64,
    consumer_duplicates: u64,
    producer_duplicates: u64,
    out_of_order: u64,
    malformed: u64,
}

impl Check {
    /// A check for `records` records over `partitions` partitions.
    pub fn new(records: u64, partitions: i32) -> Check {
        let p = usize::try_from(partitions).unwrap_or(0);
        Check {
            state: Mutex::new(CheckState {
                records,
                partitions: u64::try_from(partitions).unwrap_or(1).max(1),
                seen: vec![0; usize::try_from(records.div_ceil(64)).unwrap_or(0)],
                next_offset: vec![0; p],
                last_index: vec![None; p],
                read: 0,
                consumer_duplicates: 0,
                producer_duplicates: 0,
                out_of_order: 0,
                malformed: 0,
            }),
            progress: Notify::new(),
        }
    }

    /// Bytes the bitmap holds.
    pub fn bitmap_bytes(&self) -> u64 {
        (self.lock().seen.len() * 8) as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CheckState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the records of one partition handed out by a member, in offset order.
    pub fn take<'a>(
        &self,
        partition: i32,
        records: impl IntoIterator<Item = (i64, Option<&'a [u8]>)>,
    ) {
        let mut st = self.lock();
        let before = st.read;
        let Ok(p) = usize::try_from(partition) else {
            st.malformed += 1;
            return;
        };
        if p >= st.next_offset.len() {
            st.malformed += 1;
            return;
        }
        for (offset, value) in records {
            if offset < st.next_offset[p] {
                st.consumer_duplicates += 1;
                continue;
            }
            if offset > st.next_offset[p] && trace() {
                eprintln!(
                    "soak: gap: partition {p}: next {} then {offset}",
                    st.next_offset[p]
                );
            }
            st.next_offset[p] = offset + 1;
            let index = value
                .and_then(|v| v.get(..8))
                .map(|b| u64::from_be_bytes(b.try_into().unwrap_or([0xff; 8])));
            let Some(i) = index.filter(|i| *i < st.records && *i % st.partitions == p as u64)
            else {
                st.malformed += 1;
                continue;
            };
            let (word, bit) = ((i / 64) as usize, 1u64 << (i % 64));
            if st.seen[word] & bit != 0 {
                st.producer_duplicates += 1;
                if st.producer_duplicates <= 5 {
                    // For the diagnosis: where the second copy is (the first one's offset is
                    // not kept: the check holds a bitmap only).
                    eprintln!(
                        "soak: index {i} read again at partition {p} offset {offset} (read {} so far)",
                        st.read
                    );
                }
                continue;
            }
            if st.last_index[p].is_some_and(|last| i < last) {
                st.out_of_order += 1;
            }
            st.seen[word] |= bit;
            st.last_index[p] = Some(i);
            st.read += 1;
        }
        let tick = st.read / 4096 != before / 4096 || st.read == st.records;
        drop(st);
        if tick {
            self.progress.notify_waiters();
        }
    }

    /// Distinct records read so far.
    pub fn read(&self) -> u64 {
        self.lock().read
    }

    fn fill(&self, r: &mut PhaseReport) {
        let st = self.lock();
        r.read = st.read;
        r.lost = st.records - st.read.min(st.records);
        r.consumer_duplicates = st.consumer_duplicates;
        r.producer_duplicates = st.producer_duplicates;
        r.out_of_order = st.out_of_order;
        r.malformed = st.malformed;
    }
}

// ----- resident memory ------------------------------------------------------------------------

/// This process's resident size in bytes (`/proc/self/statm`, second field, in pages).
pub fn rss() -> u64 {
    let pages: u64 = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    pages * page_size()
}

fn page_size() -> u64 {
    static SIZE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("PAGESIZE")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
            .unwrap_or(4096)
    })
}

/// Gives the memory glibc's allocator holds free back to the system (`malloc_trim(0)`), so the
/// resident size measures what the process uses, not what the allocator keeps cached: glibc
/// keeps freed memory in per-thread arenas (up to 8 per core), and with the runtime's workers,
/// each member's thread and the blocking pool that was 95 of a 185 MiB peak in a fast run
/// (the same run under `MALLOC_ARENA_MAX=1`: 90 MiB). A leak or an unbounded buffer is memory
/// in use and still shows. Elsewhere (not glibc) a no-op.
#[allow(unsafe_code)]
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes a pad size and only releases free memory of the allocator's
    // own heaps; it has no preconditions and is thread-safe (glibc's arenas lock).
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Samples [`rss`] every second on a thread until dropped, after [`trim`]; keeps the peak.
struct Sampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start() -> Sampler {
        let peak = Arc::new(AtomicU64::new(rss()));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Acquire) {
                trim();
                p.fetch_max(rss(), Ordering::Relaxed);
                std::thread::park_timeout(Duration::from_secs(1));
            }
        });
        Sampler {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> u64 {
        self.stop_thread();
        trim();
        self.peak.fetch_max(rss(), Ordering::Relaxed);
        self.peak.load(Ordering::Relaxed)
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

// ----- group members --------------------------------------------------------------------------

/// Counters the members share.
#[derive(Default)]
struct MemberCounters {
    rebalances: AtomicU64,
    commit_errors: AtomicU64,
    errors: AtomicU64,
    /// The last error of `next_batch` and of `commit`, for the stall diagnosis.
    last_error: Mutex<Option<String>>,
    last_commit_error: Mutex<Option<String>>,
    /// Every member's handle, in start order (killed ones too), for the stall diagnosis.
    handles: Mutex<Vec<kafkit::GroupHandle>>,
}

impl MemberCounters {
    /// What a stalled phase prints: every member's state, generation and partitions, the last
    /// errors, and per partition the offset after the last record read.
    fn diagnosis(&self, check: &Check) -> String {
        let mut out = String::new();
        for (i, h) in self
            .handles
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .enumerate()
        {
            let s = h.stats();
            out.push_str(&format!(
                "  member {i}: {} generation {} id {} partitions {:?} rebalances {} commits {}\n",
                s.state,
                s.generation,
                s.member_id,
                s.assignment.iter().map(|(_, p)| *p).collect::<Vec<_>>(),
                s.rebalances,
                s.commits
            ));
            for p in h.reader_stats().partitions {
                out.push_str(&format!(
                    "    partition {}: {:?}{}{} position {:?} fetch offset {} high watermark {} \
                     node {:?} failures {} buffered {} B\n",
                    p.partition,
                    p.fetch_state,
                    if p.in_flight { " (in flight)" } else { "" },
                    if p.paused { " (paused)" } else { "" },
                    p.position,
                    p.fetch_offset,
                    p.high_watermark,
                    p.node,
                    p.failures,
                    p.buffered_bytes
                ));
            }
        }
        let last = |m: &Mutex<Option<String>>| {
            m.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
                .unwrap_or_default()
        };
        out.push_str(&format!(
            "  last member error: {}\n",
            last(&self.last_error)
        ));
        out.push_str(&format!(
            "  last commit error: {}\n",
            last(&self.last_commit_error)
        ));
        out.push_str(&format!(
            "  next offset read per partition: {:?}\n",
            check.lock().next_offset
        ));
        out
    }
}

/// One group member on a runtime of its own (one thread), so that killing it drops every task
/// it has at once: no LeaveGroup, no commit, its connections closed, as a process that crashed.
struct SoakMember {
    kill: Option<tokio::sync::oneshot::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SoakMember {
    fn start(
        bootstrap: String,
        group: String,
        topic: String,
        check: Arc<Check>,
        counters: Arc<MemberCounters>,
        liveness: Liveness,
    ) -> SoakMember {
        let (kill, killed) = tokio::sync::oneshot::channel::<bool>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("member runtime");
            rt.block_on(member_loop(
                bootstrap, group, topic, check, counters, liveness, killed,
            ));
            // Tasks still there (a killed member's) are dropped without running again.
            rt.shutdown_background();
        });
        SoakMember {
            kill: Some(kill),
            thread: Some(thread),
        }
    }

    /// Drops the member's runtime at once (`graceful` false) or closes it (LeaveGroup).
    fn stop(mut self, graceful: bool) {
        if let Some(k) = self.kill.take() {
            let _ = k.send(graceful);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn member_loop(
    bootstrap: String,
    group: String,
    topic: String,
    check: Arc<Check>,
    counters: Arc<MemberCounters>,
    liveness: Liveness,
    mut killed: tokio::sync::oneshot::Receiver<bool>,
) {
    let transport = soak_transport(&bootstrap);
    let reader = Reader::builder(transport.clone())
        .fetch_max_wait(Duration::from_millis(200))
        .fetch_max_bytes(MEMBER_FETCH)
        .max_partition_fetch_bytes(MEMBER_FETCH / 2)
        .queued_max_bytes(MEMBER_QUEUE)
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(500));
    let mut member = GroupReader::builder(transport, group)
        .subscribe([topic])
        .session_timeout(liveness.session)
        .heartbeat_interval(liveness.heartbeat)
        .rebalance_timeout(Duration::from_secs(20))
        .retry_backoff(Duration::from_millis(100))
        .enable_auto_commit(false)
        .reader(reader)
        .build()
        .expect("group member");
    counters
        .handles
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(member.handle());
    let mut rebalances = 0;
    let graceful = loop {
        let batch = tokio::select! {
            k = &mut killed => break k.unwrap_or(true),
            b = member.next_batch() => b,
        };
        let now = member.stats().rebalances;
        counters
            .rebalances
            .fetch_add(now.saturating_sub(rebalances), Ordering::Relaxed);
        rebalances = now;
        match batch {
            Ok(parts) => {
                for p in &parts {
                    check.take(
                        p.partition,
                        p.records.iter().map(|r| (r.offset, r.value.as_deref())),
                    );
                }
                if !parts.is_empty() {
                    let commit = tokio::select! {
                        k = &mut killed => break k.unwrap_or(true),
                        c = member.commit() => c,
                    };
                    if let Err(e) = commit {
                        counters.commit_errors.fetch_add(1, Ordering::Relaxed);
                        *counters
                            .last_commit_error
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
                    }
                }
            }
            Err(kafkit::Error::Group(kafkit::GroupError::Closed)) => break true,
            Err(e) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                *counters
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
            }
        }
    };
    if graceful {
        let _ = tokio::time::timeout(Duration::from_secs(20), member.close()).await;
    } else {
        // Killed: the member is dropped inside this poll and its tasks with the runtime, so
        // its close command is never carried out.
        std::mem::drop(member);
    }
}

fn soak_transport(bootstrap: &str) -> Transport {
    Transport::builder(bootstrap.split(','))
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(500))
        .default_api_timeout(Duration::from_secs(15))
        .build()
        .expect("transport")
}

// ----- the writer -----------------------------------------------------------------------------

struct Produced {
    acked: AtomicU64,
    failed: AtomicU64,
    progress: Notify,
}

fn soak_writer(bootstrap: &str, produced: &Arc<Produced>) -> Writer {
    let p = produced.clone();
    Writer::builder(soak_transport(bootstrap))
        .acks(Acks::All)
        .enable_idempotence(true)
        .linger(Duration::from_millis(5))
        .buffer_memory(WRITER_BUFFER)
        .request_timeout(Duration::from_secs(10))
        .delivery_timeout(Duration::from_secs(300))
        .max_block(Duration::from_secs(300))
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(500))
        .on_completion(
            move |_: &RecordMetadata, err: Option<&kafkit::ProduceError>| {
                if err.is_some() {
                    p.failed.fetch_add(1, Ordering::Relaxed);
                    p.progress.notify_waiters();
                } else if p.acked.fetch_add(1, Ordering::Relaxed) % 4096 == 4095 {
                    p.progress.notify_waiters();
                }
            },
        )
        .build()
        .expect("writer")
}

/// Sends records `0..records` (index `i` to partition `i % partitions`); the outcomes come
/// through the writer's completion callback.
/// Writes `records` records; with `max_lead`, record `i` waits until fewer than `max_lead`
/// records written are unread (`check`), so a broker that keeps a bounded log (the mock) never
/// deletes records the group has not read yet: that loss would be retention's, not the clients'.
async fn produce(
    writer: Writer,
    topic: String,
    opts: Options,
    records: u64,
    check: Arc<Check>,
    max_lead: Option<u64>,
) -> Writer {
    let topic: Arc<str> = topic.into();
    let pad = vec![b'.'; opts.value_bytes.saturating_sub(8)];
    let partitions = u64::try_from(opts.partitions).unwrap_or(1);
    for i in 0..records {
        if let Some(lead) = max_lead {
            while i.saturating_sub(check.read()) >= lead {
                // Bounded: the phase's stall check ends a run whose reads stop.
                let _ = tokio::time::timeout(Duration::from_millis(100), check.progress.notified())
                    .await;
            }
        }
        let mut value = Vec::with_capacity(8 + pad.len());
        value.extend_from_slice(&i.to_be_bytes());
        value.extend_from_slice(&pad);
        let p = i32::try_from(i % partitions).unwrap_or(0);
        let rec = ProducerRecord::new(&*topic, value).partition(p);
        if writer.send(rec).await.is_err() {
            // Refused before it was buffered (counted like a failed write).
            break;
        }
    }
    let _ = writer.flush().await;
    writer
}

/// Waits until `done()` holds, waking on `notify` (or every 500 ms); fails after [`STALL`]
/// without a change of `progress()`.
async fn wait_for(
    notify: &Notify,
    mut done: impl FnMut() -> bool,
    progress: impl Fn() -> u64,
    what: &str,
) -> Result<(), String> {
    let mut last = (progress(), Instant::now());
    loop {
        let notified = notify.notified();
        if done() {
            return Ok(());
        }
        let now = progress();
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > STALL {
            return Err(format!("{what}: no progress for {STALL:?} (at {now})"));
        }
        let _ = tokio::time::timeout(Duration::from_millis(500), notified).await;
    }
}

// ----- the phases -----------------------------------------------------------------------------

/// A fault a phase injects: its name for the table, and what injects it (on the test's
/// thread: the mock cluster is not `Send`).
struct Fault<'a> {
    kind: &'static str,
    inject: Box<dyn FnMut() -> std::pin::Pin<Box<dyn Future<Output = ()> + 'a>> + 'a>,
}

impl<'a> Fault<'a> {
    fn new<F>(kind: &'static str, inject: impl FnMut() -> F + 'a) -> Fault<'a>
    where
        F: Future<Output = ()> + 'a,
    {
        let mut inject = inject;
        Fault {
            kind,
            inject: Box::new(move || Box::pin(inject())),
        }
    }
}

/// Runs one phase: topic made, members started, records written while `faults` are injected in
/// turn, everything read, members closed.
#[allow(clippy::too_many_arguments)]
async fn phase<'a>(
    name: &str,
    bootstrap: &str,
    topic: &str,
    records: u64,
    opts: &Options,
    mut faults: Vec<Fault<'a>>,
    extra_bytes: u64,
    kill_members: bool,
    liveness: Liveness,
    max_lead: Option<u64>,
    broker_dedupes: bool,
) -> PhaseReport {
    let started = Instant::now();
    let check = Arc::new(Check::new(records, opts.partitions));
    let counters = Arc::new(MemberCounters::default());
    let group = unique_topic("soak-group");
    let start_member = || {
        SoakMember::start(
            bootstrap.to_owned(),
            group.clone(),
            topic.to_owned(),
            check.clone(),
            counters.clone(),
            liveness,
        )
    };
    let rss_start = rss();
    let sampler = Sampler::start();
    let mut members: Vec<SoakMember> = (0..opts.members).map(|_| start_member()).collect();
    let produced = Arc::new(Produced {
        acked: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        progress: Notify::new(),
    });
    let writer = soak_writer(bootstrap, &produced);
    let producer = tokio::spawn(produce(
        writer.clone(),
        topic.to_owned(),
        opts.clone(),
        records,
        check.clone(),
        max_lead,
    ));
    let ticker = {
        let (p, c, name) = (produced.clone(), check.clone(), name.to_owned());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(10));
            tick.tick().await;
            loop {
                tick.tick().await;
                eprintln!(
                    "soak: {name}: {:.0} s: {} written, {} read, RSS {} MiB",
                    started.elapsed().as_secs_f64(),
                    p.acked.load(Ordering::Relaxed),
                    c.read(),
                    rss() >> 20
                );
            }
        })
    };
    let mut report = PhaseReport {
        name: name.to_owned(),
        broker_dedupes,
        ..PhaseReport::default()
    };
    let kinds = faults.len() + usize::from(kill_members);
    let total = if kinds == 0 { 0 } else { opts.faults };
    let mut error = None;
    for k in 0..total {
        let at = records * (k as u64 + 1) / (total as u64 + 1);
        let p = &produced;
        if let Err(e) = wait_for(
            &p.progress,
            || p.acked.load(Ordering::Relaxed) + p.failed.load(Ordering::Relaxed) >= at,
            || p.acked.load(Ordering::Relaxed),
            "writing",
        )
        .await
        {
            error = Some(e);
            break;
        }
        let which = k % kinds;
        if which < faults.len() {
            let fault = &mut faults[which];
            (fault.inject)().await;
            *report.faults.entry(fault.kind).or_default() += 1;
        } else if !members.is_empty() {
            // Kill the oldest member, start a new one.
            let victim = members.remove(0);
            let _ = tokio::task::spawn_blocking(move || victim.stop(false)).await;
            members.push(start_member());
            *report
                .faults
                .entry("member killed and restarted")
                .or_default() += 1;
        }
    }
    let p = &produced;
    if error.is_none()
        && let Err(e) = wait_for(
            &p.progress,
            || p.acked.load(Ordering::Relaxed) + p.failed.load(Ordering::Relaxed) >= records,
            || p.acked.load(Ordering::Relaxed),
            "writing",
        )
        .await
    {
        error = Some(e);
    }
    if error.is_none()
        && let Err(e) = wait_for(
            &check.progress,
            || check.read() >= records,
            || check.read(),
            "reading",
        )
        .await
    {
        eprintln!(
            "soak: {name}: reading stalled:\n{}",
            counters.diagnosis(&check)
        );
        eprintln!(
            "soak: {name}: a fresh Reader from the earliest offsets (15 s):\n{}",
            reread(bootstrap, topic, opts.partitions).await
        );
        error = Some(e);
    }
    producer.abort();
    ticker.abort();
    let _ = tokio::time::timeout(
        Duration::from_secs(30),
        writer.close(Duration::from_secs(20)),
    )
    .await;
    let stats = writer.stats();
    let _ = tokio::task::spawn_blocking(move || {
        for m in members {
            m.stop(true);
        }
    })
    .await;
    report.rss_start = rss_start;
    report.rss_peak = sampler.finish();
    report.rss_limit = rss_start
        + WRITER_BUFFER as u64
        + opts.members as u64 * (MEMBER_QUEUE as u64 + MEMBER_FETCH as u64)
        + check.bitmap_bytes()
        + extra_bytes
        + RSS_MARGIN;
    report.acked = produced.acked.load(Ordering::Relaxed);
    report.produce_failures = produced.failed.load(Ordering::Relaxed);
    report.retries = stats.retries;
    report.rebalances = counters.rebalances.load(Ordering::Relaxed);
    report.commit_errors = counters.commit_errors.load(Ordering::Relaxed);
    report.member_errors = counters.errors.load(Ordering::Relaxed);
    check.fill(&mut report);
    report.duration = started.elapsed();
    report.failures.extend(error);
    report.judge(records);
    report
}

/// The Apache Kafka phase (see the module docs) on `cluster`. Needs a multi-thread runtime.
pub async fn kafka_phase(cluster: &KafkaCluster, opts: &Options) -> PhaseReport {
    let bootstrap = cluster.bootstrap();
    let topic = unique_topic("soak-kafka");
    create_topic_replicated(&bootstrap, &topic, opts.partitions, 3).await;
    let transport = soak_transport(&bootstrap);
    let turn = std::cell::Cell::new(0usize);
    let (topic_ref, partitions, transport) = (&topic, opts.partitions, &transport);
    let faults = vec![
        Fault::new("node SIGKILLed and restarted", move || {
            let n = turn.get();
            turn.set(n + 1);
            async move {
                let leader = cluster.quorum_leader(transport).await;
                let others: Vec<i32> = cluster
                    .nodes()
                    .iter()
                    .map(|node| node.id)
                    .filter(|&id| id != leader)
                    .collect();
                let victim = others[n % others.len()];
                if trace() {
                    eprintln!("soak: fault: node {victim} killed");
                }
                cluster.kill(victim).await;
                cluster.restart(victim).await;
                cluster.wait_in_sync(topic_ref, partitions).await;
            }
        }),
        Fault::new(
            "quorum leader SIGKILLed and restarted",
            move || async move {
                let leader = cluster.quorum_leader(transport).await;
                if trace() {
                    eprintln!("soak: fault: quorum leader {leader} killed");
                }
                cluster.kill(leader).await;
                cluster.restart(leader).await;
                cluster.wait_in_sync(topic_ref, partitions).await;
            },
        ),
    ];
    phase(
        "Apache Kafka (3 nodes)",
        &bootstrap,
        &topic,
        opts.kafka_records,
        opts,
        faults,
        0,
        true,
        FAST_BROKER,
        None,
        true,
    )
    .await
}

/// Which tansu the tansu phase runs on.
#[derive(Clone, Debug)]
pub enum Storage {
    /// The SQLite tansu at this path (durable: restarted during the run).
    Sqlite(std::path::PathBuf),
    /// The prebuilt tansu with memory storage (its data die with it: never restarted).
    Memory,
}

/// The tansu phase (see the module docs). Needs a multi-thread runtime.
pub async fn tansu_phase(storage: &Storage, opts: &Options) -> PhaseReport {
    let records = match storage {
        Storage::Sqlite(_) => opts.durable_records,
        Storage::Memory => opts.records,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("relay bind");
    let relay_addr = listener.local_addr().expect("relay addr").to_string();
    let (owned, name) = match storage {
        Storage::Sqlite(bin) => (
            OwnedTansu::start(bin, Some(&relay_addr), false).await,
            "tansu (SQLite, relay)",
        ),
        Storage::Memory => (
            OwnedTansu::start_memory(Some(&relay_addr)).await,
            "tansu (memory, relay)",
        ),
    };
    let relay = Relay::serve(listener, &owned.listen);
    let tansu = tokio::sync::Mutex::new(owned);
    let topic = unique_topic("soak");
    create_topic(relay.addr(), &topic, opts.partitions).await;
    let relay = &relay;
    let tansu = &tansu;
    let mut faults = vec![Fault::new("connections cut", move || async move {
        relay.cut_all();
    })];
    if matches!(storage, Storage::Sqlite(_)) {
        faults.push(Fault::new("tansu restarted", move || async move {
            tansu.lock().await.restart().await;
        }));
    }
    let liveness = match storage {
        Storage::Sqlite(_) => SQLITE_BROKER,
        Storage::Memory => FAST_BROKER,
    };
    phase(
        name,
        relay.addr(),
        &topic,
        records,
        opts,
        faults,
        0,
        true,
        liveness,
        None,
        true,
    )
    .await
}

/// The mock phase: a 3-broker librdkafka mock cluster, leader moves and broker outages (see
/// the module docs). Needs a multi-thread runtime; the cluster stays on the calling thread.
pub async fn mock_phase(opts: &Options) -> PhaseReport {
    let mock = GroupMock::new(3);
    mock.initial_rebalance_delay(Duration::from_millis(500));
    let topic = unique_topic("soak-mock");
    mock_topic_spread(&mock.cluster(), &topic, opts.partitions, 3);
    let bootstrap = mock.bootstrap();
    let moves = std::cell::Cell::new(0i32);
    let downs = std::cell::Cell::new(0i32);
    let (mock, topic_ref, partitions) = (&mock, &topic, opts.partitions);
    let faults = vec![
        Fault::new("leader moved", move || {
            let n = moves.get();
            moves.set(n + 1);
            async move {
                let p = n % partitions;
                // Partition p starts on broker p % 3 + 1: move it one broker on each time.
                let to = (p + n / partitions + 1) % 3 + 1;
                let _ = mock.cluster().partition_leader(topic_ref, p, Some(to));
                if trace() {
                    eprintln!("soak: fault: partition {p} leader -> {to}");
                }
            }
        }),
        Fault::new("broker down 2 s", move || {
            let n = downs.get();
            downs.set(n + 1);
            async move {
                let b = n % 3 + 1;
                let _ = mock.cluster().broker_down(b);
                if trace() {
                    eprintln!("soak: fault: broker {b} down");
                }
                // The outage itself: its length is the fault.
                tokio::time::sleep(Duration::from_secs(2)).await;
                let _ = mock.cluster().broker_up(b);
            }
        }),
    ];
    let extra = u64::try_from(opts.partitions).unwrap_or(0) * MOCK_LOG_PER_PARTITION;
    phase(
        "mock (3 brokers)",
        &bootstrap,
        &topic,
        opts.mock_records,
        opts,
        faults,
        extra,
        false,
        FAST_BROKER,
        // A third of what the mock's logs hold (value plus about 64 bytes of record and batch
        // overhead each): on a fast machine the writer otherwise ran 100,000 records per
        // partition ahead and the mock deleted unread records (log start past the position;
        // the readers reset to it, as Java's do).
        Some(
            u64::try_from(opts.partitions).unwrap_or(1) * MOCK_LOG_PER_PARTITION
                / (opts.value_bytes as u64 + 64)
                / 3,
        ),
        false,
    )
    .await
}

/// What a fresh Reader (no group) reads of every partition from the earliest offset in 15 s:
/// per partition the records, the next offset and the first gap in the offsets (stall diagnosis).
async fn reread(bootstrap: &str, topic: &str, partitions: i32) -> String {
    let reader = match Reader::builder(soak_transport(bootstrap)).build() {
        Ok(r) => r,
        Err(e) => return format!("  no reader: {e}"),
    };
    if let Err(e) =
        reader.assign((0..partitions).map(|p| (topic, p, kafkit::StartOffset::Earliest)))
    {
        return format!("  assign failed: {e}");
    }
    let n = usize::try_from(partitions).unwrap_or(0);
    let (mut count, mut next, mut gap) = (vec![0u64; n], vec![0i64; n], vec![None; n]);
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        let Ok(Ok(parts)) = tokio::time::timeout(Duration::from_secs(1), reader.next_batch()).await
        else {
            continue;
        };
        for p in parts {
            let i = usize::try_from(p.partition)
                .unwrap_or(0)
                .min(n.saturating_sub(1));
            for r in &p.records {
                if r.offset != next[i] && gap[i].is_none() {
                    gap[i] = Some((next[i], r.offset));
                }
                next[i] = r.offset + 1;
                count[i] += 1;
            }
        }
    }
    reader.close();
    (0..n)
        .map(|i| {
            format!(
                "  partition {i}: {} records, next offset {}, first gap {:?}\n",
                count[i], next[i], gap[i]
            )
        })
        .collect()
}
