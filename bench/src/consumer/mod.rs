//! `kafkit-bench consumer`, run by `cargo xtask bench consumer`: this project's Reader against
//! librdkafka's consumer, reading the same pre-filled topic in the same run.
//!
//! Cases: each broker of `--cases` (`tansu`: one tansu at `--tansu HOST:PORT`, skipped without
//! it; `mock`: librdkafka's mock cluster of 3 brokers, started in this process) times each
//! partition count of `--partitions` (default 6, 48 and 1,000). For each case one topic is
//! created and filled once with this project's Writer: `--records` records (default 1,000,000)
//! of `--value-size` bytes (default 100, no key, no headers), record `i` to partition
//! `i % partitions`, uncompressed, with `--fill-linger-ms` (default 100) so that even 1,000
//! partitions get batches of hundreds of records (the tables give the mean). The mock keeps at most 5 MiB of log per partition (older batches are
//! dropped), so a case whose partitions would hold more is given fewer records (the table says
//! how many); the fill is then checked (log start offsets 0, end offsets adding up).
//!
//! Then each client reads the whole topic from the beginning, `--repeat` times (the order of the
//! two clients alternates between repeats), each run in a child process of this one
//! (`kafkit-bench read ...`): an explicit assignment of every partition at the earliest offset,
//! the same fetch settings for both ([`FetchSettings`]), until every record is back. Each record
//! is checked the same way by both ([`Check`]): every offset of every partition is read exactly
//! once (with one reader: each record's offset is the one after the previous record of its
//! partition), and its value is compared byte for byte with the value written (which also
//! touches every byte, so no client can skip decoding). CPU time is the child's
//! `getrusage(RUSAGE_SELF)` from `assign` to the last record; Fetch requests are the Reader's
//! `ReaderStats::fetch_requests` and librdkafka's statistics (`brokers.*.req.Fetch`).
//!
//! `--tasks N` reads with N readers at once: N tokio tasks sharing one Reader, each calling
//! `next_batch` (ours, [`ours`]), N OS threads polling one librdkafka consumer (the peer,
//! [`peer`]). Each checks the records it is handed; after the run their checks together must
//! cover every offset of every partition exactly once ([`Check::finish`]), and the records read
//! must add up to the topic's. A list (`--tasks 1,2,4,8,16`) runs every case once per count (per
//! repeat), for each client (both clients of a count one after the other), adds a column of task
//! counts to both tables and prints a scaling table per case: records/s, CPU µs per record, the
//! system time's share of the CPU and records/s against the client's 1-task run (the medians
//! over the repeats); with `--svg DIR` it also draws records/s and CPU per record by task count
//! (`consumer-tasks-*.svg`). The group runs (`--group`) take no `--tasks`.
//!
//! The result is two Markdown tables on stdout (every run, then the median and range per case);
//! progress goes to stderr. The exit code is non-zero when a run failed or read wrong records.
//!
//! With `--group`, groups of members read the topic instead (see [`group`]): time to the first
//! assignment, records/s, and the rebalance when one member leaves.

pub mod group;
pub mod group_ours;
pub mod group_peer;
pub mod ours;
pub mod peer;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, ValueEnum};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

use crate::{Client, RunResult};

/// The mock cluster's log limit per partition (`rd_kafka_mock_partition_init`: 5 MiB), less a
/// margin for the batch it may overshoot by.
const MOCK_PARTITION_BYTES: u64 = 9 * (1 << 20) / 2;

/// Bytes a record of the fill takes in the log besides its value (record header varints and
/// its share of the batch header), an upper bound for the mock's limit.
const RECORD_OVERHEAD: u64 = 12;

/// Options of `consumer`.
#[derive(Args, Debug)]
pub struct ConsumerArgs {
    /// Records in each case's topic (fewer on the mock when its partitions cannot hold them).
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Bytes in each record value (no key, no headers).
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Partition counts: one case per broker and count (default 6,48,1000; with `--group` 48).
    #[arg(long, value_delimiter = ',')]
    partitions: Vec<i32>,
    /// tansu's bootstrap address; without it the `tansu` cases are skipped.
    #[arg(long)]
    tansu: Option<String>,
    /// Apache Kafka's bootstrap address (one broker); without it the `kafka` cases are skipped.
    #[arg(long)]
    kafka: Option<String>,
    /// Appends every run, as one JSON object per line, to this file (see `json.rs`).
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Brokers to run on (default: tansu and mock).
    #[arg(long, value_enum, value_delimiter = ',')]
    cases: Vec<ReadCase>,
    /// Clients to run, in this order in the first repeat (default: ours then rdkafka); the
    /// order rotates by one in every repeat.
    #[arg(long, value_enum, value_delimiter = ',')]
    clients: Vec<Client>,
    /// Runs of each client per case.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// The Writer's linger while filling, ms: it sets the batch sizes both clients read. With
    /// 1,000 partitions, 5 ms gives batches of about 5 records, and the mock cluster, which
    /// answers at most one batch per partition per Fetch, then sets both clients' speed.
    #[arg(long, default_value_t = 100)]
    fill_linger_ms: u64,
    /// Readers at once: tokio tasks sharing one Reader, each calling `next_batch` (ours), OS
    /// threads polling one librdkafka consumer (the peer). A list (`1,2,4,8,16`) runs every case
    /// once per count (per repeat), for each client, adds a column of task counts to the tables
    /// and prints the scaling table (and with `--svg` its charts). Not with `--group`.
    #[arg(long, value_delimiter = ',', default_values_t = [1])]
    tasks: Vec<u64>,
    /// With several `--tasks`: writes the charts of records/s and CPU per record by task count
    /// (`consumer-tasks-records-per-second.svg`, `consumer-tasks-cpu-per-record.svg`) into this
    /// directory.
    #[arg(long)]
    svg: Option<std::path::PathBuf>,
    #[command(flatten)]
    settings: FetchSettings,
    /// Groups of members (this project's GroupReader, librdkafka's group consumer) read the
    /// topic instead of one consumer with every partition assigned.
    #[arg(long)]
    group: bool,
    #[command(flatten)]
    group_settings: group::GroupSettings,
}

/// A broker to read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReadCase {
    /// tansu, one broker.
    Tansu,
    /// librdkafka's mock cluster, 3 brokers.
    Mock,
    /// Apache Kafka, one broker (`--kafka`).
    Kafka,
}

impl ReadCase {
    fn name(self) -> &'static str {
        match self {
            ReadCase::Tansu => "tansu",
            ReadCase::Mock => "mock",
            ReadCase::Kafka => "kafka",
        }
    }

    /// The broker, for the JSON of a run.
    fn broker(self) -> String {
        match self {
            ReadCase::Tansu => "tansu 0.6 (1 broker)".to_string(),
            ReadCase::Mock => "librdkafka mock (3 brokers)".to_string(),
            ReadCase::Kafka => format!("Apache Kafka {} (1 broker)", crate::kafka_version()),
        }
    }
}

/// Fetch settings applied to both clients (Java / librdkafka names in brackets).
#[derive(Args, Clone, Debug)]
pub struct FetchSettings {
    /// Least data a broker gathers before answering a Fetch, bytes [fetch.min.bytes].
    #[arg(long, default_value_t = 1)]
    pub fetch_min_bytes: i32,
    /// Longest time a broker holds a Fetch, ms [fetch.max.wait.ms / fetch.wait.max.ms].
    #[arg(long, default_value_t = 500)]
    pub fetch_max_wait_ms: u64,
    /// Most data per partition in one Fetch answer, bytes [max.partition.fetch.bytes].
    #[arg(long, default_value_t = 1 << 20)]
    pub max_partition_fetch_bytes: i32,
    /// Most data in one Fetch answer, bytes [fetch.max.bytes].
    #[arg(long, default_value_t = 50 << 20)]
    pub fetch_max_bytes: i32,
    /// Most fetched, undelivered data held, KiB [queued.max.messages.kbytes; the Reader's
    /// queued_max_bytes].
    #[arg(long, default_value_t = 64 << 10)]
    pub queued_max_kbytes: usize,
    /// Verify each batch's CRC-32C [check.crcs] (librdkafka's default is off, Java's and the
    /// Reader's on).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub check_crcs: bool,
    /// librdkafka only: its record-count queue limit [queued.min.messages]. The Reader has none
    /// (only the byte limit), so the default is librdkafka's maximum, leaving the byte limit as
    /// the one limit for both. librdkafka's own default, 100,000, counts the records of every
    /// assigned partition together and stalls the fetcher as soon as they pass it.
    #[arg(long, default_value_t = 10_000_000)]
    pub rdkafka_queued_min_messages: u64,
    /// librdkafka only: how long a partition is not fetched after its queue was over a limit,
    /// ms [fetch.queue.backoff.ms]. The Reader fetches again as soon as the application takes
    /// records; librdkafka's default, 1,000, left it idle for most of each run.
    #[arg(long, default_value_t = 10)]
    pub rdkafka_fetch_queue_backoff_ms: u64,
}

/// What one consumer run reads.
#[derive(Args, Clone, Debug)]
pub struct ReadWorkload {
    /// Bootstrap servers, `host:port[,host:port...]`.
    #[arg(long)]
    pub bootstrap: String,
    /// Topic to read (filled already).
    #[arg(long)]
    pub topic: String,
    /// Partitions of the topic (all are assigned, or subscribed).
    #[arg(long)]
    pub partitions: i32,
    /// Records in the topic (record `i` in partition `i % partitions`).
    #[arg(long)]
    pub records: u64,
    /// Bytes of every value.
    #[arg(long)]
    pub value_size: usize,
    /// Readers at once: tokio tasks sharing one Reader (ours), OS threads polling one consumer
    /// (librdkafka). The group runs read with one per member.
    #[arg(long, default_value_t = 1)]
    pub tasks: u64,
    #[command(flatten)]
    pub settings: FetchSettings,
}

impl ReadWorkload {
    pub(crate) fn to_args(&self) -> Vec<String> {
        let s = &self.settings;
        [
            ("--bootstrap", self.bootstrap.clone()),
            ("--topic", self.topic.clone()),
            ("--partitions", self.partitions.to_string()),
            ("--records", self.records.to_string()),
            ("--value-size", self.value_size.to_string()),
            ("--tasks", self.tasks.to_string()),
            ("--fetch-min-bytes", s.fetch_min_bytes.to_string()),
            ("--fetch-max-wait-ms", s.fetch_max_wait_ms.to_string()),
            (
                "--max-partition-fetch-bytes",
                s.max_partition_fetch_bytes.to_string(),
            ),
            ("--fetch-max-bytes", s.fetch_max_bytes.to_string()),
            ("--queued-max-kbytes", s.queued_max_kbytes.to_string()),
            ("--check-crcs", s.check_crcs.to_string()),
            (
                "--rdkafka-queued-min-messages",
                s.rdkafka_queued_min_messages.to_string(),
            ),
            (
                "--rdkafka-fetch-queue-backoff-ms",
                s.rdkafka_fetch_queue_backoff_ms.to_string(),
            ),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v])
        .collect()
    }
}

/// Whether this project's Reader uses fetch sessions (KIP-227): on, unless
/// `KAFKIT_BENCH_FETCH_SESSIONS=false` (a diagnostic: the children inherit it; the peers ignore it).
pub fn fetch_sessions() -> bool {
    std::env::var("KAFKIT_BENCH_FETCH_SESSIONS").map_or(true, |v| v != "false")
}

/// Longest time a run waits for its next record before it gives up.
pub const STALL: Duration = Duration::from_secs(20);

/// The per-record check both clients make, and what it counted: one per reading task (each
/// sees only the records handed to it), put together by [`Check::finish`] after the run.
pub struct Check {
    value: Vec<u8>,
    /// The offset after the last record read per partition (where its current run ends).
    next: Vec<i64>,
    /// Where each partition's current run of consecutive offsets began.
    start: Vec<i64>,
    /// Earlier runs of consecutive offsets read, `(partition, first, end)` with `end` exclusive:
    /// with several tasks, a partition's records come to each in stretches, the others reading
    /// the stretches in between. With one task, a run ends only at a wrong offset.
    runs: Vec<(usize, i64, i64)>,
    /// Records per partition in the topic.
    expected: Vec<i64>,
    /// Records read.
    pub read: u64,
    /// Value bytes read.
    pub bytes: u64,
    /// Records that were not the ones expected (a wrong value, a partition not assigned).
    pub bad: u64,
    /// The first of them.
    pub first_error: Option<String>,
}

/// What the checks of a run's tasks found together.
#[derive(Debug, Default)]
pub struct Tally {
    /// Records read.
    pub read: u64,
    /// Value bytes read.
    pub bytes: u64,
    /// Records (or stretches of offsets) that were not the ones expected: a wrong value, offsets
    /// missing or read twice, a partition not read to its end.
    pub bad: u64,
    /// The first of them.
    pub first_error: Option<String>,
}

impl Tally {
    #[cold]
    fn fail(&mut self, what: std::fmt::Arguments<'_>) {
        self.bad += 1;
        if self.first_error.is_none() {
            self.first_error = Some(what.to_string());
        }
    }
}

impl Check {
    /// A check of `w`'s topic: every partition from offset 0.
    pub fn new(w: &ReadWorkload) -> Check {
        let parts = usize::try_from(w.partitions).unwrap_or(0);
        let n = w.records;
        let p = parts as u64;
        Check {
            value: crate::value_of(w.value_size),
            next: vec![0; parts],
            start: vec![0; parts],
            runs: Vec::new(),
            expected: (0..p)
                .map(|i| i64::try_from(n / p + u64::from(i < n % p)).unwrap_or(i64::MAX))
                .collect(),
            read: 0,
            bytes: 0,
            bad: 0,
            first_error: None,
        }
    }

    /// One record: its value must be the one written; its offset is noted (a run of its
    /// partition goes on when it follows the previous record's, else a new run starts), and
    /// [`Check::finish`] checks that the runs of every task cover each partition exactly once.
    #[inline]
    pub fn record(&mut self, partition: i32, offset: i64, value: Option<&[u8]>) {
        self.read += 1;
        let Some(p) = usize::try_from(partition)
            .ok()
            .filter(|&p| p < self.next.len())
        else {
            self.fail(format_args!("a record of partition {partition}"));
            return;
        };
        if offset != self.next[p] {
            self.jump(p, offset);
        }
        self.next[p] = offset + 1;
        match value {
            Some(v) => {
                self.bytes += v.len() as u64;
                if v != self.value.as_slice() {
                    self.fail(format_args!(
                        "partition {partition} offset {offset}: another value"
                    ));
                }
            }
            None => self.fail(format_args!(
                "partition {partition} offset {offset}: no value"
            )),
        }
    }

    /// Partition `p`'s current run ends; a new one starts at `offset`.
    fn jump(&mut self, p: usize, offset: i64) {
        if self.next[p] > self.start[p] {
            self.runs.push((p, self.start[p], self.next[p]));
        }
        self.start[p] = offset;
    }

    /// After the run, the checks of all its tasks: every offset of every partition must have
    /// been read exactly once, from 0 to the partition's end.
    pub fn finish(checks: Vec<Check>) -> Tally {
        let mut tally = Tally::default();
        let Some(expected) = checks.first().map(|c| c.expected.clone()) else {
            return tally;
        };
        let mut runs: Vec<Vec<(i64, i64)>> = vec![Vec::new(); expected.len()];
        for c in checks {
            tally.read += c.read;
            tally.bytes += c.bytes;
            tally.bad += c.bad;
            if tally.first_error.is_none() {
                tally.first_error = c.first_error;
            }
            for (p, first, end) in c.runs {
                runs[p].push((first, end));
            }
            for (p, runs) in runs.iter_mut().enumerate() {
                if c.next[p] > c.start[p] {
                    runs.push((c.start[p], c.next[p]));
                }
            }
        }
        for (p, mut runs) in runs.into_iter().enumerate() {
            runs.sort_unstable();
            // Every offset below `at` was read.
            let mut at = 0;
            for (first, end) in runs {
                if first > at {
                    tally.fail(format_args!(
                        "partition {p}: offsets {at}..{first} not read"
                    ));
                } else if first < at {
                    tally.fail(format_args!(
                        "partition {p}: offsets {first}..{} read twice",
                        end.min(at)
                    ));
                }
                at = at.max(end);
            }
            if at != expected[p] {
                tally.fail(format_args!(
                    "partition {p}: read to offset {at} of {}",
                    expected[p]
                ));
            }
        }
        tally
    }

    #[cold]
    fn fail(&mut self, what: std::fmt::Arguments<'_>) {
        self.bad += 1;
        if self.first_error.is_none() {
            self.first_error = Some(what.to_string());
        }
    }
}

/// One run in the tables.
struct Row {
    case: ReadCase,
    partitions: i32,
    records: u64,
    repeat: usize,
    client: Client,
    /// Reading tasks (ours) or threads (librdkafka).
    tasks: u64,
    /// The 1-minute load average just before the run.
    load: f64,
    /// Mean records per batch in the topic (from the Writer's stats while filling).
    batch_records: f64,
    result: Result<RunResult, String>,
}

/// One consumer row as JSON: the case, the client, the fetch settings every client was given,
/// the machine and the figures.
fn row_json(args: &ConsumerArgs, row: &Row) -> serde_json::Value {
    let s = &args.settings;
    crate::json::merge(&[
        serde_json::json!({
            "bench": "consumer",
            "unix_time": crate::json::now(),
            "commit": std::env::var("KAFKIT_BENCH_COMMIT").ok(),
            "machine": crate::json::machine(),
            "broker": row.case.broker(),
            "case": row.case.name(),
            "client": row.client.label(),
            "partitions": row.partitions,
            "records": row.records,
            "tasks": row.tasks,
            "repeat": row.repeat,
            "batch_records": row.batch_records,
            "settings": {
                "value_size": args.value_size,
                "fetch_min_bytes": s.fetch_min_bytes,
                "fetch_max_wait_ms": s.fetch_max_wait_ms,
                "max_partition_fetch_bytes": s.max_partition_fetch_bytes,
                "fetch_max_bytes": s.fetch_max_bytes,
                "queued_max_kbytes": s.queued_max_kbytes,
                "check_crcs": s.check_crcs,
            },
        }),
        crate::json::figures(&row.result),
    ])
}

/// The 1-minute load average.
pub(crate) fn load_now() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Records a case reads: `records`, or on the mock what its partitions can hold (rounded down
/// to 10,000).
fn case_records(case: ReadCase, args: &ConsumerArgs, partitions: i32) -> u64 {
    if case != ReadCase::Mock {
        return args.records;
    }
    let per_partition = MOCK_PARTITION_BYTES / (args.value_size as u64 + RECORD_OVERHEAD);
    let fits = per_partition * u64::try_from(partitions).unwrap_or(0);
    if fits >= args.records {
        args.records
    } else {
        (fits / 10_000 * 10_000).max(per_partition.min(fits))
    }
}

/// Runs every case and prints the tables. Ok(false) when some run failed or read wrong records.
pub fn run(args: &ConsumerArgs) -> Result<bool, String> {
    let cases = if args.cases.is_empty() {
        vec![ReadCase::Tansu, ReadCase::Mock]
    } else {
        args.cases.clone()
    };
    let clients = if args.clients.is_empty() {
        vec![Client::Ours, Client::Rdkafka]
    } else {
        args.clients.clone()
    };
    let partitions = match (&args.partitions[..], args.group) {
        ([], false) => vec![6, 48, 1000],
        ([], true) => vec![48],
        (p, _) => p.to_vec(),
    };
    if partitions.iter().any(|p| *p <= 0)
        || args.value_size == 0
        || args.repeat == 0
        || args.tasks.is_empty()
        || args.tasks.contains(&0)
    {
        return Err("--partitions, --value-size, --repeat and --tasks must be positive".into());
    }
    if args.group && args.tasks != [1] {
        return Err(
            "--tasks is for the Reader runs: a group's members read with one task each".into(),
        );
    }
    if args.group
        && (args.group_settings.members == 0
            || !(0.0..=1.0).contains(&args.group_settings.leave_at))
    {
        return Err("--members must be positive and --leave-at between 0 and 1".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let mock: Option<MockCluster<'static, DefaultProducerContext>> =
        if cases.contains(&ReadCase::Mock) {
            Some(MockCluster::new(3).map_err(|e| format!("mock cluster: {e}"))?)
        } else {
            None
        };

    let mut rows = Vec::new();
    let mut group_rows = Vec::new();
    let mut fill_failed = false;
    for &case in &cases {
        let (bootstrap, on_mock) = match case {
            ReadCase::Tansu => match &args.tansu {
                Some(b) => (b.clone(), None),
                None => {
                    eprintln!("kafkit-bench: no --tansu given, skipping the tansu cases");
                    continue;
                }
            },
            ReadCase::Mock => match &mock {
                Some(m) => (m.bootstrap_servers(), Some(m)),
                None => continue,
            },
            ReadCase::Kafka => match &args.kafka {
                Some(b) => (b.clone(), None),
                None => {
                    eprintln!("kafkit-bench: no --kafka given, skipping the kafka cases");
                    continue;
                }
            },
        };
        for &partitions in &partitions {
            let records = case_records(case, args, partitions);
            let topic = format!(
                "bench-read-{}-{partitions}-{}",
                case.name(),
                std::process::id()
            );
            eprintln!(
                "kafkit-bench: {} / {partitions} partitions: filling {topic} with {records} records",
                case.name()
            );
            let linger = Duration::from_millis(args.fill_linger_ms);
            let filled = crate::create_topic(&runtime, on_mock, &bootstrap, &topic, partitions, 1)
                .and_then(|()| {
                    runtime.block_on(fill(
                        &bootstrap,
                        &topic,
                        partitions,
                        records,
                        args.value_size,
                        linger,
                        1_000_000,
                    ))
                })
                .and_then(|batch_records| match case {
                    ReadCase::Mock | ReadCase::Kafka => {
                        check_fill(&runtime, &bootstrap, &topic, records).map(|()| batch_records)
                    }
                    // tansu 0.6 under-reports end offsets after many batches (see the
                    // producer bench); every run checks every record instead.
                    ReadCase::Tansu => Ok(batch_records),
                });
            let batch_records = match filled {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("kafkit-bench: {} / {partitions}: fill: {e}", case.name());
                    fill_failed = true;
                    continue;
                }
            };
            let workload = ReadWorkload {
                bootstrap: bootstrap.clone(),
                topic,
                partitions,
                records,
                value_size: args.value_size,
                tasks: 1,
                settings: args.settings.clone(),
            };
            if args.group {
                group_rows.extend(run_groups(args, case, &clients, &workload));
                if case == ReadCase::Kafka {
                    crate::delete_topic(&runtime, &bootstrap, &workload.topic);
                }
                continue;
            }
            for repeat in 0..args.repeat {
                let mut order = clients.clone();
                order.rotate_left(repeat % clients.len().max(1));
                // Every task count, each for every client in turn (so both clients of a count
                // run under the same load).
                let each = args
                    .tasks
                    .iter()
                    .flat_map(|&t| order.iter().map(move |&c| (t, c)));
                for (tasks, client) in each {
                    eprintln!(
                        "kafkit-bench: {} / {partitions} / run {} / {} / {tasks} task(s): reading {records} records",
                        case.name(),
                        repeat + 1,
                        client.name()
                    );
                    let load = load_now();
                    let mut child =
                        vec!["read".to_string(), "--client".into(), client.name().into()];
                    child.extend(
                        ReadWorkload {
                            tasks,
                            ..workload.clone()
                        }
                        .to_args(),
                    );
                    let result = crate::run_child(client, &child).and_then(|r| {
                        if r.failed == 0 && r.delivered != records {
                            return Err(format!("{} of {records} records read", r.delivered));
                        }
                        Ok(r)
                    });
                    if let Err(e) = &result {
                        eprintln!("kafkit-bench: {} / {}: {e}", case.name(), client.name());
                    }
                    let row = Row {
                        case,
                        partitions,
                        records,
                        repeat,
                        client,
                        tasks,
                        load,
                        batch_records,
                        result,
                    };
                    if let Some(path) = &args.json {
                        crate::json::append(path, &row_json(args, &row))?;
                    }
                    rows.push(row);
                }
            }
            if case == ReadCase::Kafka {
                // One broker holds every case's topic (see the producer bench).
                crate::delete_topic(&runtime, &bootstrap, &workload.topic);
            }
        }
    }
    if args.group {
        print_header(args);
        group::print_table(&args.group_settings, &args.settings, &group_rows);
        return Ok(!fill_failed
            && group_rows.iter().all(|r| {
                matches!(&r.result, Ok(x) if x.failed == 0)
                    || matches!(&r.result, Err(e) if e == crate::external::NOT_SUPPORTED)
            }));
    }
    print_tables(args, &rows);
    if args.tasks.len() > 1 {
        crate::scaling::print_tables(&CONSUMING, &clients, &case_runs(&rows));
        if let Some(dir) = &args.svg {
            let charts = crate::scaling::task_charts(&CONSUMING, &args.tasks, &case_runs(&rows));
            crate::scaling::write_charts(dir, charts)?;
        }
    }
    Ok(!fill_failed
        && rows.iter().all(|r| {
            matches!(&r.result, Ok(x) if x.failed == 0) || crate::is_not_supported(&r.result)
        }))
}

/// The group runs of one case: each client's group, `--repeat` times (the order alternates),
/// each in a fresh group on the same filled topic.
fn run_groups(
    args: &ConsumerArgs,
    case: ReadCase,
    clients: &[Client],
    workload: &ReadWorkload,
) -> Vec<group::GroupRow> {
    let mut rows = Vec::new();
    for repeat in 0..args.repeat {
        let mut order = clients.to_vec();
        if repeat % 2 == 1 {
            order.reverse();
        }
        for &client in &order {
            eprintln!(
                "kafkit-bench: {} / {} partitions / run {} / {}: a group of {} reads {} records",
                case.name(),
                workload.partitions,
                repeat + 1,
                client.name(),
                args.group_settings.members,
                workload.records
            );
            let w = group::GroupWorkload {
                read: workload.clone(),
                group_id: format!(
                    "bench-group-{}-{}-{}-{}",
                    case.name(),
                    client.name(),
                    repeat,
                    std::process::id()
                ),
                group: args.group_settings.clone(),
            };
            let load = load_now();
            let result = group::run_child(client, &w);
            if let Err(e) = &result {
                eprintln!("kafkit-bench: {} / {}: {e}", case.name(), client.name());
            }
            let row = group::GroupRow {
                case: case.name(),
                partitions: workload.partitions,
                client,
                repeat,
                records: workload.records,
                load,
                result,
            };
            if let Some(path) = &args.json
                && let Err(e) =
                    crate::json::append(path, &row.to_json(&args.group_settings, &case.broker()))
            {
                eprintln!("kafkit-bench: {e}");
            }
            rows.push(row);
        }
    }
    rows
}

/// Fills `topic` with the Writer: record `i` to partition `i % partitions`, batches of at most
/// `batch_size` bytes (and 10,000 records). Returns the mean records per batch. The share bench
/// fills its topic with it too.
pub(crate) async fn fill(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    records: u64,
    value_size: usize,
    linger: Duration,
    batch_size: usize,
) -> Result<f64, String> {
    use kafkit::{Acks, Compression, ProducerRecord, Transport, Writer};

    let transport = Transport::builder(bootstrap.split(','))
        .build()
        .map_err(|e| format!("transport: {e}"))?;
    let failed = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let (f, fe) = (failed.clone(), first_error.clone());
    let writer = Writer::builder(transport.clone())
        .topic(topic.to_string())
        .acks(Acks::Leader)
        .enable_idempotence(false)
        .compression(Compression::None)
        .linger(linger)
        .batch_size(batch_size)
        .batch_max_records(10_000)
        .on_completion(move |_, error| {
            if let Some(e) = error {
                f.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut first) = fe.lock()
                    && first.is_none()
                {
                    *first = Some(e.to_string());
                }
            }
        })
        .build()
        .map_err(|e| format!("writer: {e}"))?;
    transport
        .metadata_for(&[topic])
        .await
        .map_err(|e| format!("metadata: {e}"))?;
    let value = kafkit::Bytes::from(crate::value_of(value_size));
    let parts = u64::try_from(partitions).map_err(|_| "bad partition count")?;
    for i in 0..records {
        let partition = i32::try_from(i % parts).map_err(|_| "bad partition")?;
        let record = ProducerRecord::to_default_topic(value.clone()).partition(partition);
        drop(
            writer
                .send(record)
                .await
                .map_err(|e| format!("send refused record {i}: {e}"))?,
        );
    }
    writer.flush().await.map_err(|e| format!("flush: {e}"))?;
    let batch_records = writer.stats().batch_records_avg;
    writer
        .close(Duration::from_secs(30))
        .await
        .map_err(|e| format!("close: {e}"))?;
    let failed = failed.load(Ordering::Relaxed);
    if failed > 0 {
        let first = first_error.lock().ok().and_then(|e| e.clone());
        return Err(format!(
            "{failed} records not written: {}",
            first.unwrap_or_default()
        ));
    }
    Ok(batch_records)
}

/// The mock kept the whole fill: log start offsets all 0, end offsets adding up to `records`.
fn check_fill(
    runtime: &tokio::runtime::Runtime,
    bootstrap: &str,
    topic: &str,
    records: u64,
) -> Result<(), String> {
    let start = crate::offsets_sum(runtime, bootstrap, topic, kafkit::OffsetSpec::Earliest)?;
    let end = crate::offsets_sum(runtime, bootstrap, topic, kafkit::OffsetSpec::Latest)?;
    if start != 0 || end != records {
        return Err(format!(
            "the mock holds offsets {start}..{end} (summed over partitions) of {records} records \
             written: fewer records (--records) or more partitions"
        ));
    }
    Ok(())
}

/// The median of `v` (sorted in place); NaN when empty.
pub(crate) fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        f64::midpoint(v[n / 2 - 1], v[n / 2])
    }
}

/// Records per second and CPU µs per record of a successful run.
fn rates(r: &RunResult) -> (f64, f64) {
    let secs = r.wall.as_secs_f64().max(1e-9);
    let cpu = (r.cpu.user + r.cpu.system).as_secs_f64();
    (
        r.delivered as f64 / secs,
        cpu * 1e6 / (r.delivered.max(1) as f64),
    )
}

/// Prints the command, the settings, the fill and the machine.
fn print_header(args: &ConsumerArgs) {
    let cmd: Vec<String> = std::env::args().skip(1).collect();
    println!("Command: `kafkit-bench {}`", cmd.join(" "));
    let s = &args.settings;
    println!(
        "Settings (both clients): {}; value {} bytes; \
         fetch.min.bytes={}, fetch.max.wait.ms={}, max.partition.fetch.bytes={}, \
         fetch.max.bytes={}, queued.max.messages.kbytes={} (Reader: queued_max_bytes), \
         check.crcs={}; librdkafka also queued.min.messages={}, fetch.queue.backoff.ms={}.",
        if args.group {
            "a group subscribes to the topic (see below)"
        } else {
            "assign every partition at the earliest offset"
        },
        args.value_size,
        s.fetch_min_bytes,
        s.fetch_max_wait_ms,
        s.max_partition_fetch_bytes,
        s.fetch_max_bytes,
        s.queued_max_kbytes,
        s.check_crcs,
        s.rdkafka_queued_min_messages,
        s.rdkafka_fetch_queue_backoff_ms,
    );
    if args.tasks != [1] {
        println!(
            "Each client reads with {} task(s) ({}).",
            crate::task_list(&args.tasks),
            CONSUMING.sharing
        );
    }
    println!(
        "Fill: this project's Writer, uncompressed, acks=1, linger {} ms, at most 10,000 records \
         per batch; record i in partition i % partitions.",
        args.fill_linger_ms
    );
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!("Machine: {cores} cores; load = 1-minute load average just before each run.");
    println!();
}

/// Prints the table of every run and the summary table to stdout.
fn print_tables(args: &ConsumerArgs, rows: &[Row]) {
    print_header(args);
    // A column of task counts only when the run had several (the one-count tables are as
    // before).
    let by_tasks = args.tasks.len() > 1;
    let (tasks_head, tasks_align) = if by_tasks {
        (" tasks |", " ---: |")
    } else {
        ("", "")
    };
    println!(
        "| case | partitions | records | run | client |{tasks_head} load | time (s) | records/s | MB/s | CPU s (user + sys) | CPU µs / record | Fetch requests |"
    );
    println!(
        "| --- | ---: | ---: | ---: | --- |{tasks_align} ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for row in rows {
        let tasks = if by_tasks {
            format!(" {} |", row.tasks)
        } else {
            String::new()
        };
        let head = format!(
            "| {} | {} | {} | {} | {} |{tasks} {:.1} |",
            row.case.name(),
            row.partitions,
            row.records,
            row.repeat + 1,
            row.client.name(),
            row.load
        );
        match &row.result {
            Ok(r) => {
                let (rps, cpu_us) = rates(r);
                let secs = r.wall.as_secs_f64().max(1e-9);
                let cpu = r.cpu.user + r.cpu.system;
                let bad = if r.failed > 0 {
                    format!(
                        " ({} bad: {})",
                        r.failed,
                        r.first_error.as_deref().unwrap_or("?")
                    )
                } else {
                    String::new()
                };
                println!(
                    "{head} {secs:.2}{bad} | {rps:.0} | {:.1} | {:.2} ({:.2} + {:.2}) | {cpu_us:.2} | {} |",
                    r.bytes as f64 / secs / 1e6,
                    cpu.as_secs_f64(),
                    r.cpu.user.as_secs_f64(),
                    r.cpu.system.as_secs_f64(),
                    r.requests
                        .map_or_else(|| "?".to_string(), |n| n.to_string()),
                );
            }
            Err(e) => println!("{head} failed: {} | | | | | |", e.replace('|', "/")),
        }
    }
    println!();
    print_summary(rows, by_tasks);
}

/// Per case (and task count, with `by_tasks`): each client's median (and range) of records/s,
/// CPU per record and Fetch requests over its runs, and the ratios of the medians.
fn print_summary(rows: &[Row], by_tasks: bool) {
    let (tasks_head, tasks_align) = if by_tasks {
        (" tasks |", " ---: |")
    } else {
        ("", "")
    };
    println!(
        "| case | partitions | records | records / batch | client |{tasks_head} runs | load | records/s median (range) | CPU µs / record median (range) | Fetch requests median (range) |"
    );
    println!("| --- | ---: | ---: | ---: | --- |{tasks_align} ---: | --- | ---: | ---: | ---: |");
    let mut cases: Vec<(ReadCase, i32, u64, u64)> = Vec::new();
    for r in rows {
        if !cases.contains(&(r.case, r.partitions, r.records, r.tasks)) {
            cases.push((r.case, r.partitions, r.records, r.tasks));
        }
    }
    // Each case's task counts together, in the order run.
    let order: Vec<(ReadCase, i32, u64)> = cases.iter().fold(Vec::new(), |mut o, c| {
        if !o.contains(&(c.0, c.1, c.2)) {
            o.push((c.0, c.1, c.2));
        }
        o
    });
    cases.sort_by_key(|c| order.iter().position(|o| *o == (c.0, c.1, c.2)));
    let mut ratios = String::new();
    for (case, partitions, records, tasks) in cases {
        let mut medians: Vec<(Client, f64, f64)> = Vec::new();
        for client in [Client::Ours, Client::Rdkafka] {
            let runs: Vec<(&Row, &RunResult)> = rows
                .iter()
                .filter(|r| {
                    r.case == case
                        && r.partitions == partitions
                        && r.client == client
                        && r.tasks == tasks
                })
                .filter_map(|r| match &r.result {
                    Ok(x) if x.failed == 0 => Some((r, x)),
                    _ => None,
                })
                .collect();
            if runs.is_empty() {
                continue;
            }
            let mut rps: Vec<f64> = runs.iter().map(|(_, x)| rates(x).0).collect();
            let mut cpu: Vec<f64> = runs.iter().map(|(_, x)| rates(x).1).collect();
            let mut req: Vec<f64> = runs
                .iter()
                .filter_map(|(_, x)| x.requests.map(|n| n as f64))
                .collect();
            let loads: Vec<f64> = runs.iter().map(|(r, _)| r.load).collect();
            let range = |v: &[f64], digits: usize| match (v.first(), v.last()) {
                (Some(a), Some(b)) => format!("{a:.digits$}-{b:.digits$}"),
                _ => "?".into(),
            };
            let (m_rps, m_cpu, m_req) = (median(&mut rps), median(&mut cpu), median(&mut req));
            let (lo, hi) = loads
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), l| {
                    (lo.min(*l), hi.max(*l))
                });
            let tasks_cell = if by_tasks {
                format!(" {tasks} |")
            } else {
                String::new()
            };
            println!(
                "| {} | {partitions} | {records} | {:.0} | {} |{tasks_cell} {} | {lo:.1}-{hi:.1} | {m_rps:.0} ({}) | {m_cpu:.2} ({}) | {m_req:.0} ({}) |",
                case.name(),
                runs[0].0.batch_records,
                client.name(),
                runs.len(),
                range(&rps, 0),
                range(&cpu, 2),
                range(&req, 0),
            );
            medians.push((client, m_rps, m_cpu));
        }
        if let [
            (Client::Ours, o_rps, o_cpu),
            (Client::Rdkafka, r_rps, r_cpu),
        ] = medians[..]
        {
            let tasks = if by_tasks {
                format!(" / {tasks} task(s)")
            } else {
                String::new()
            };
            let _ = writeln!(
                ratios,
                "- {} / {partitions} partitions{tasks}: ours reads {:.2}x librdkafka's records/s with {:.2}x less CPU per record",
                case.name(),
                o_rps / r_rps,
                r_cpu / o_cpu
            );
        }
    }
    if !ratios.is_empty() {
        println!();
        print!("{ratios}");
    }
}

/// The consumer's words in the scaling table and charts.
const CONSUMING: crate::scaling::Words = crate::scaling::Words {
    verb: "consuming",
    sharing: "ours: tokio tasks sharing one Reader, each calling next_batch; librdkafka: threads \
              polling one BaseConsumer",
    file: "consumer",
    title: "Consumer",
    failed: "bad",
    axis: "consuming tasks / threads (log scale)",
};

/// Each case's runs by client and task count, for the scaling table and charts: per client and
/// count, the medians over its repeats (of the runs that read; those that failed count only
/// when none read).
fn case_runs(rows: &[Row]) -> Vec<crate::scaling::CaseRuns> {
    use crate::scaling::{CaseRuns, Entry, Outcome, Rates};
    let mut cases: Vec<(ReadCase, i32, u64)> = Vec::new();
    for r in rows {
        if !cases.contains(&(r.case, r.partitions, r.records)) {
            cases.push((r.case, r.partitions, r.records));
        }
    }
    cases
        .into_iter()
        .map(|(case, partitions, records)| {
            let mine: Vec<&Row> = rows
                .iter()
                .filter(|r| r.case == case && r.partitions == partitions && r.records == records)
                .collect();
            let mut counts: Vec<(Client, u64)> = Vec::new();
            for r in &mine {
                if !counts.contains(&(r.client, r.tasks)) {
                    counts.push((r.client, r.tasks));
                }
            }
            let repeats = mine.iter().map(|r| r.repeat).max().map_or(0, |m| m + 1);
            let entries = counts
                .into_iter()
                .map(|(client, tasks)| {
                    let runs: Vec<&Row> = mine
                        .iter()
                        .copied()
                        .filter(|r| r.client == client && r.tasks == tasks)
                        .collect();
                    let ok: Vec<&RunResult> =
                        runs.iter().filter_map(|r| r.result.as_ref().ok()).collect();
                    let rates: Vec<Rates> =
                        ok.iter().filter_map(|r| crate::scaling::rates(r)).collect();
                    let outcome = if ok.is_empty() {
                        Outcome::Failed(
                            runs.iter()
                                .find_map(|r| r.result.as_ref().err().cloned())
                                .unwrap_or_default(),
                        )
                    } else if rates.is_empty() {
                        Outcome::Nothing
                    } else {
                        let med = |f: fn(&Rates) -> f64| {
                            median(&mut rates.iter().map(f).collect::<Vec<_>>())
                        };
                        Outcome::Measured {
                            rates: Rates {
                                records_s: med(|r| r.records_s),
                                cpu_us: med(|r| r.cpu_us),
                                system: med(|r| r.system),
                            },
                            failed: ok.iter().map(|r| r.failed).sum(),
                        }
                    };
                    Entry {
                        client,
                        tasks,
                        outcome,
                    }
                })
                .collect();
            let runs = if repeats > 1 {
                format!(", the median of {repeats} runs each")
            } else {
                String::new()
            };
            CaseRuns {
                heading: format!(
                    "case {}, {partitions} partitions, {records} records{runs}",
                    case.name()
                ),
                legend: format!("{} {partitions}", case.name()),
                title: format!("{} ({partitions} partitions)", case.name()),
                entries,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(partitions: i32, records: u64) -> ReadWorkload {
        ReadWorkload {
            bootstrap: String::new(),
            topic: String::new(),
            partitions,
            records,
            value_size: 3,
            tasks: 1,
            settings: FetchSettings {
                fetch_min_bytes: 1,
                fetch_max_wait_ms: 500,
                max_partition_fetch_bytes: 1 << 20,
                fetch_max_bytes: 50 << 20,
                queued_max_kbytes: 1024,
                check_crcs: true,
                rdkafka_queued_min_messages: 1,
                rdkafka_fetch_queue_backoff_ms: 10,
            },
        }
    }

    #[test]
    fn checks_of_several_tasks_cover_every_offset_once() {
        // 2 partitions of 5 records, read by two tasks in interleaved stretches.
        let w = workload(2, 10);
        let value = crate::value_of(3);
        let mut checks = [Check::new(&w), Check::new(&w)];
        for (task, p, offsets) in [(0, 0, 0..2), (1, 0, 2..3), (0, 0, 3..5), (1, 1, 0..5)] {
            for o in offsets {
                checks[task].record(p, o, Some(&value));
            }
        }
        let tally = Check::finish(checks.into());
        assert_eq!(
            (tally.read, tally.bytes, tally.bad),
            (10, 30, 0),
            "{tally:?}"
        );
    }

    #[test]
    fn a_gap_a_repeat_and_a_short_partition_are_bad() {
        let w = workload(2, 10);
        let value = crate::value_of(3);
        let (mut a, mut b) = (Check::new(&w), Check::new(&w));
        for o in [0, 1, 3, 4] {
            a.record(0, o, Some(&value));
        }
        for o in [0, 1, 2] {
            b.record(1, o, Some(&value));
        }
        a.record(1, 2, Some(&value));
        a.record(1, 3, Some(b"xyz"));
        let tally = Check::finish(vec![a, b]);
        // Partition 0 misses offset 2; partition 1 has offset 2 twice, a wrong value, and
        // stops at 4 of 5.
        assert_eq!(tally.bad, 4, "{tally:?}");
        assert_eq!(
            tally.first_error.as_deref(),
            Some("partition 1 offset 3: another value")
        );

        // One task reading out of order is caught the same way.
        let mut one = Check::new(&w);
        for (p, o) in [(0, 0), (0, 1), (0, 2), (0, 1), (0, 2), (0, 3), (0, 4)] {
            one.record(p, o, Some(&value));
        }
        for o in 0..5 {
            one.record(1, o, Some(&value));
        }
        let tally = Check::finish(vec![one]);
        assert_eq!(tally.bad, 1, "{tally:?}");
        assert_eq!(
            tally.first_error.as_deref(),
            Some("partition 0: offsets 1..3 read twice")
        );
    }
}
