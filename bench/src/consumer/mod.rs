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
//! is checked the same way by both ([`Check`]): its offset is the one after the previous record
//! of its partition, and its value is compared byte for byte with the value written (which also
//! touches every byte, so no client can skip decoding). CPU time is the child's
//! `getrusage(RUSAGE_SELF)` from `assign` to the last record; Fetch requests are the Reader's
//! `ReaderStats::fetch_requests` and librdkafka's statistics (`brokers.*.req.Fetch`).
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
    /// Brokers to run on (default: tansu and mock).
    #[arg(long, value_enum, value_delimiter = ',')]
    cases: Vec<ReadCase>,
    /// Clients to run, in this order in the first repeat (default: ours then rdkafka); the
    /// order is reversed in every other repeat.
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
}

impl ReadCase {
    fn name(self) -> &'static str {
        match self {
            ReadCase::Tansu => "tansu",
            ReadCase::Mock => "mock",
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
    #[command(flatten)]
    pub settings: FetchSettings,
}

impl ReadWorkload {
    fn to_args(&self) -> Vec<String> {
        let s = &self.settings;
        [
            ("--bootstrap", self.bootstrap.clone()),
            ("--topic", self.topic.clone()),
            ("--partitions", self.partitions.to_string()),
            ("--records", self.records.to_string()),
            ("--value-size", self.value_size.to_string()),
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

/// Longest time a run waits for its next record before it gives up.
pub const STALL: Duration = Duration::from_secs(20);

/// The per-record check both clients make, and what it counted.
pub struct Check {
    value: Vec<u8>,
    /// The next offset expected per partition.
    next: Vec<i64>,
    /// Records per partition in the topic.
    expected: Vec<i64>,
    /// Records read.
    pub read: u64,
    /// Value bytes read.
    pub bytes: u64,
    /// Records that were not the ones expected.
    pub bad: u64,
    /// The first of them.
    pub first_error: Option<String>,
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
            expected: (0..p)
                .map(|i| i64::try_from(n / p + u64::from(i < n % p)).unwrap_or(i64::MAX))
                .collect(),
            read: 0,
            bytes: 0,
            bad: 0,
            first_error: None,
        }
    }

    /// One record: its offset must follow the previous one of its partition, its value must be
    /// the one written.
    #[inline]
    pub fn record(&mut self, partition: i32, offset: i64, value: Option<&[u8]>) {
        self.read += 1;
        let Some(next) = usize::try_from(partition)
            .ok()
            .and_then(|p| self.next.get_mut(p))
        else {
            self.fail(format_args!("a record of partition {partition}"));
            return;
        };
        let expected = *next;
        *next = offset + 1;
        if offset != expected {
            self.fail(format_args!(
                "partition {partition}: offset {offset} where {expected} was next"
            ));
        }
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

    /// After the run: every partition must have been read to its end. Returns the records
    /// found bad in all.
    pub fn finish(&mut self) -> u64 {
        for p in 0..self.next.len() {
            let (got, want) = (self.next[p], self.expected[p]);
            if got != want {
                self.fail(format_args!(
                    "partition {p}: read to offset {got} of {want}"
                ));
            }
        }
        self.bad
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
    /// The 1-minute load average just before the run.
    load: f64,
    /// Mean records per batch in the topic (from the Writer's stats while filling).
    batch_records: f64,
    result: Result<RunResult, String>,
}

/// The 1-minute load average.
fn load_now() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Records a case reads: `records`, or on the mock what its partitions can hold (rounded down
/// to 10,000).
fn case_records(case: ReadCase, args: &ConsumerArgs, partitions: i32) -> u64 {
    if case == ReadCase::Tansu {
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
    if partitions.iter().any(|p| *p <= 0) || args.value_size == 0 || args.repeat == 0 {
        return Err("--partitions, --value-size and --repeat must be positive".into());
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
            let filled = crate::create_topic(&runtime, on_mock, &bootstrap, &topic, partitions)
                .and_then(|()| {
                    runtime.block_on(fill(
                        &bootstrap,
                        &topic,
                        partitions,
                        records,
                        args.value_size,
                        linger,
                    ))
                })
                .and_then(|batch_records| match case {
                    ReadCase::Mock => {
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
                settings: args.settings.clone(),
            };
            if args.group {
                group_rows.extend(run_groups(args, case, &clients, &workload));
                continue;
            }
            for repeat in 0..args.repeat {
                let mut order = clients.clone();
                if repeat % 2 == 1 {
                    order.reverse();
                }
                for &client in &order {
                    eprintln!(
                        "kafkit-bench: {} / {partitions} / run {} / {}: reading {records} records",
                        case.name(),
                        repeat + 1,
                        client.name()
                    );
                    let load = load_now();
                    let mut child =
                        vec!["read".to_string(), "--client".into(), client.name().into()];
                    child.extend(workload.to_args());
                    let result = crate::run_child(client, &child).and_then(|r| {
                        if r.failed == 0 && r.delivered != records {
                            return Err(format!("{} of {records} records read", r.delivered));
                        }
                        Ok(r)
                    });
                    if let Err(e) = &result {
                        eprintln!("kafkit-bench: {} / {}: {e}", case.name(), client.name());
                    }
                    rows.push(Row {
                        case,
                        partitions,
                        records,
                        repeat,
                        client,
                        load,
                        batch_records,
                        result,
                    });
                }
            }
        }
    }
    if args.group {
        print_header(args);
        group::print_table(&args.group_settings, &args.settings, &group_rows);
        return Ok(!fill_failed
            && group_rows
                .iter()
                .all(|r| matches!(&r.result, Ok(x) if x.failed == 0)));
    }
    print_tables(args, &rows);
    Ok(!fill_failed
        && rows
            .iter()
            .all(|r| matches!(&r.result, Ok(x) if x.failed == 0)))
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
            rows.push(group::GroupRow {
                case: case.name(),
                partitions: workload.partitions,
                client,
                repeat,
                records: workload.records,
                load,
                result,
            });
        }
    }
    rows
}

/// Fills `topic` with the Writer: record `i` to partition `i % partitions`. Returns the mean
/// records per batch.
async fn fill(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    records: u64,
    value_size: usize,
    linger: Duration,
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
        .batch_size(1_000_000)
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
fn median(v: &mut [f64]) -> f64 {
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
    println!(
        "| case | partitions | records | run | client | load | time (s) | records/s | MB/s | CPU s (user + sys) | CPU µs / record | Fetch requests |"
    );
    println!("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in rows {
        let head = format!(
            "| {} | {} | {} | {} | {} | {:.1} |",
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
    print_summary(rows);
}

/// Per case: each client's median (and range) of records/s, CPU per record and Fetch requests
/// over its runs, and the ratios of the medians.
fn print_summary(rows: &[Row]) {
    println!(
        "| case | partitions | records | records / batch | client | runs | load | records/s median (range) | CPU µs / record median (range) | Fetch requests median (range) |"
    );
    println!("| --- | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: |");
    let mut cases: Vec<(ReadCase, i32, u64)> = Vec::new();
    for r in rows {
        if !cases.contains(&(r.case, r.partitions, r.records)) {
            cases.push((r.case, r.partitions, r.records));
        }
    }
    let mut ratios = String::new();
    for (case, partitions, records) in cases {
        let mut medians: Vec<(Client, f64, f64)> = Vec::new();
        for client in [Client::Ours, Client::Rdkafka] {
            let runs: Vec<(&Row, &RunResult)> = rows
                .iter()
                .filter(|r| r.case == case && r.partitions == partitions && r.client == client)
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
            println!(
                "| {} | {partitions} | {records} | {:.0} | {} | {} | {lo:.1}-{hi:.1} | {m_rps:.0} ({}) | {m_cpu:.2} ({}) | {m_req:.0} ({}) |",
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
            let _ = writeln!(
                ratios,
                "- {} / {partitions} partitions: ours reads {:.2}x librdkafka's records/s with {:.2}x less CPU per record",
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
