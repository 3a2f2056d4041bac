//! `kafkit-bench share`, run by `cargo xtask bench share`: this project's [`kafkit::ShareReader`]
//! against the Java client's `KafkaShareConsumer` (KIP-932 share groups) on the same Apache
//! Kafka broker, in the same run.
//!
//! The topic (`--partitions`, default 12) is created and filled once, before anything is timed,
//! with this project's Writer: `--records` records (default 1,000,000) of `--value-size` bytes
//! (default 100, no key, no headers), record `i` to partition `i % partitions`, uncompressed,
//! in batches of at most `--fill-batch-bytes` (default 16,384, the Java producer's
//! `batch.size`) with `--fill-linger-ms` (default 5, its `linger.ms`); the tables give the mean
//! records per batch. `--topic NAME` reads an existing, filled topic instead.
//!
//! Then `--warmup-rounds` rounds (default 1, left out of the medians: the broker's JVM warms
//! up too) and `--rounds` rounds (default 5); in each, every client of `--clients` (default ours, then
//! java; the order reversed in every other round, so that neither always runs first) reads the
//! whole topic once as the only member of a share group made for that run, whose group config
//! `share.auto.offset.reset=earliest` is set beforehand (IncrementalAlterConfigs on the group).
//! Both members run in implicit acknowledgement mode (each poll accepts the records of the one
//! before; a commit and a close after the last record) with the same fetch settings
//! ([`ShareSettings`]), each in a process of its own: ours a child of this one (`kafkit-bench
//! share-read`, [`ours`]), Java's the Java peer (`kafkit.peer.Main share-bench`, [`java`]).
//!
//! The measured window is the same for both: from the poll that first hands records to the
//! application (with `--warmup-records K`, the poll that brings the count past K) to the poll
//! that brings it to `--records`; the records of the first poll count. Joining the group,
//! the first ShareFetch, starting the JVM and loading its classes fall before it. CPU is the
//! client process's over the window: ours `getrusage(RUSAGE_SELF)` (user + system, every
//! thread), Java's `OperatingSystemMXBean::getProcessCpuTime` (every thread of the JVM, its JIT
//! compiler and garbage collector too). Each client checks every record the same way
//! ([`Checker`] and the peer's copy of it): its partition, an offset not seen before, the value's
//! length; a delivery count above 1 is counted as a redelivery. ShareFetch requests are ours
//! from `ShareStats::share_fetch_requests` and Java's from its `fetch-total` metric, both over
//! the member's whole life (the join's first fetches too).
//!
//! The output is two Markdown tables on stdout (every run, then each client's median and range
//! over the rounds); progress goes to stderr. The exit code is non-zero when a run failed or
//! read wrong records.

pub mod java;
pub mod ours;

use std::fmt::Write as _;
use std::time::Duration;

use clap::{Args, ValueEnum};
use kafkit::admin::{AlterConfigOp, ConfigResource, ConfigResourceType};

use crate::consumer::median;
use crate::cpu::CpuTime;

/// How long a client may go without a record before its run fails.
pub const STALL: Duration = Duration::from_secs(60);

/// Environment variable with the Java peer's class path (`cargo xtask java-peer` prints it).
pub const JAVA_PEER_CP_ENV: &str = "KAFKIT_JAVA_PEER_CP";

/// Options of `share`.
#[derive(Args, Debug)]
pub struct ShareArgs {
    /// Apache Kafka's bootstrap address, `host:port[,host:port...]` (4.2 or later: share
    /// groups on).
    #[arg(long)]
    bootstrap: String,
    /// Records in the topic; each run reads them all.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Partitions of the topic.
    #[arg(long, default_value_t = 12)]
    partitions: i32,
    /// Bytes in each record value (no key, no headers).
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Rounds: each client reads the topic once per round, with a new share group.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Rounds run first and left out of the medians (the broker's JVM warms up too: on a
    /// fresh broker its CPU per record falls by half or more over the first runs).
    #[arg(long, default_value_t = 1)]
    warmup_rounds: usize,
    /// Clients, in this order in the first round (default: ours, java); the order is reversed
    /// in every other round.
    #[arg(long, value_enum, value_delimiter = ',')]
    clients: Vec<ShareClient>,
    /// The window opens at the poll that brings the count past this many records (0: the
    /// first poll with records).
    #[arg(long, default_value_t = 0)]
    warmup_records: u64,
    /// The fill's linger, ms (the Java producer's default `linger.ms`).
    #[arg(long, default_value_t = 5)]
    fill_linger_ms: u64,
    /// The fill's largest batch, bytes (the Java producer's default `batch.size`).
    #[arg(long, default_value_t = 16_384)]
    fill_batch_bytes: usize,
    /// Read this topic (filled already with `--records` records of `--value-size` bytes over
    /// `--partitions` partitions) instead of creating and filling one.
    #[arg(long)]
    topic: Option<String>,
    /// The Java peer's class path (default: the `KAFKIT_JAVA_PEER_CP` environment variable;
    /// `cargo xtask java-peer` builds the peer and prints it).
    #[arg(long)]
    java_cp: Option<String>,
    /// The broker's process id (`.broker/kafka-PORT/node-1/kafka.pid`): each run also
    /// measures the broker's CPU time over its window (`cargo xtask bench share` passes it
    /// for the broker it starts).
    #[arg(long, default_value_t = 0)]
    broker_pid: u32,
    /// Options for the JVM of the Java runs, whitespace-separated (default: none, the JVM's
    /// own defaults).
    #[arg(long, allow_hyphen_values = true)]
    java_opts: Option<String>,
    #[command(flatten)]
    settings: ShareSettings,
}

/// A share consumer under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ShareClient {
    /// This project's `kafkit::ShareReader`.
    Ours,
    /// The Java client's `KafkaShareConsumer` (kafka-clients 4.4, the Java peer).
    Java,
}

impl ShareClient {
    fn name(self) -> &'static str {
        match self {
            ShareClient::Ours => "ours",
            ShareClient::Java => "java",
        }
    }
}

/// Consumer settings given to both clients (Java config names in brackets; the defaults are
/// both clients' own).
#[derive(Args, Clone, Debug)]
pub struct ShareSettings {
    /// Records one poll hands out at most, and asks each ShareFetch for [max.poll.records].
    #[arg(long, default_value_t = 500)]
    pub max_poll_records: usize,
    /// How long the broker may hold a ShareFetch for `fetch_min_bytes`, ms [fetch.max.wait.ms].
    #[arg(long, default_value_t = 500)]
    pub fetch_max_wait_ms: u64,
    /// Bytes the broker waits for before it answers a ShareFetch [fetch.min.bytes].
    #[arg(long, default_value_t = 1)]
    pub fetch_min_bytes: i32,
    /// The most bytes of one ShareFetch answer [fetch.max.bytes].
    #[arg(long, default_value_t = 50 * 1024 * 1024)]
    pub fetch_max_bytes: i32,
}

/// What one client run reads: the arguments of `kafkit-bench share-read` and of the Java
/// peer's `share-bench` (the same names).
#[derive(Args, Clone, Debug)]
pub struct ShareWorkload {
    /// Bootstrap servers.
    #[arg(long)]
    pub bootstrap: String,
    /// The topic (filled).
    #[arg(long)]
    pub topic: String,
    /// The share group (new, `share.auto.offset.reset=earliest` set).
    #[arg(long)]
    pub group: String,
    /// Partitions of the topic.
    #[arg(long)]
    pub partitions: i32,
    /// Records to read.
    #[arg(long)]
    pub records: u64,
    /// Bytes of every value.
    #[arg(long)]
    pub value_size: usize,
    /// Records read before the window opens.
    #[arg(long, default_value_t = 0)]
    pub warmup_records: u64,
    /// The broker's process id: its CPU time over the window is measured too (0: not).
    #[arg(long, default_value_t = 0)]
    pub broker_pid: u32,
    #[command(flatten)]
    pub settings: ShareSettings,
}

impl ShareWorkload {
    /// `--name value` pairs for a child run (ours or the Java peer's).
    pub fn to_args(&self) -> Vec<String> {
        let s = &self.settings;
        [
            ("--bootstrap", self.bootstrap.clone()),
            ("--topic", self.topic.clone()),
            ("--group", self.group.clone()),
            ("--partitions", self.partitions.to_string()),
            ("--records", self.records.to_string()),
            ("--value-size", self.value_size.to_string()),
            ("--warmup-records", self.warmup_records.to_string()),
            ("--broker-pid", self.broker_pid.to_string()),
            ("--max-poll-records", s.max_poll_records.to_string()),
            ("--fetch-max-wait-ms", s.fetch_max_wait_ms.to_string()),
            ("--fetch-min-bytes", s.fetch_min_bytes.to_string()),
            ("--fetch-max-bytes", s.fetch_max_bytes.to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v])
        .collect()
    }
}

/// What one client's run measured, over its window.
#[derive(Clone, Debug, Default)]
pub struct ShareRun {
    /// Records handed out in the window.
    pub records: u64,
    /// The window's wall time.
    pub wall: Duration,
    /// The process's CPU time over the window.
    pub cpu: Duration,
    /// User and system time (ours; the JVM gives the sum only).
    pub cpu_split: Option<CpuTime>,
    /// Polls in the window that handed out records.
    pub polls: u64,
    /// Records that failed the check (or came beyond the count).
    pub bad: u64,
    /// Records delivered more than once (delivery count above 1).
    pub redelivered: u64,
    /// From building the member (subscribing) to the first records.
    pub to_first: Duration,
    /// ShareFetch requests over the member's life.
    pub share_fetches: Option<u64>,
    /// ShareAcknowledge requests over the member's life (ours).
    pub share_acknowledges: Option<u64>,
    /// The broker process's CPU time over the window (with `--broker-pid`; clock ticks of
    /// 10 ms).
    pub broker_cpu: Option<Duration>,
}

impl ShareRun {
    /// One line for the parent: `RESULT key=value ...` (the producer and consumer benches'
    /// prefix; its own fields).
    pub fn to_line(&self) -> String {
        let opt = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |n| n.to_string());
        let (user, sys) = self
            .cpu_split
            .map_or((0, 0), |c| (c.user.as_nanos(), c.system.as_nanos()));
        format!(
            "{}records={} wall_ns={} cpu_ns={} user_ns={user} sys_ns={sys} polls={} bad={} redelivered={} to_first_ms={} share_fetches={} share_acknowledges={} broker_cpu_ms={}",
            crate::RESULT_PREFIX,
            self.records,
            self.wall.as_nanos(),
            self.cpu.as_nanos(),
            self.polls,
            self.bad,
            self.redelivered,
            self.to_first.as_millis(),
            opt(self.share_fetches),
            opt(self.share_acknowledges),
            opt(self.broker_cpu.map(|d| d.as_millis() as u64)),
        )
    }

    /// Reads a line made by [`ShareRun::to_line`].
    fn parse(line: &str) -> Result<ShareRun, String> {
        let rest = line
            .strip_prefix(crate::RESULT_PREFIX)
            .ok_or_else(|| format!("not a result line: {line}"))?;
        let mut r = ShareRun::default();
        let mut split = CpuTime::default();
        for kv in rest.split_whitespace() {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("bad field {kv}"))?;
            let num = || v.parse::<u64>().map_err(|e| format!("bad {k}={v}: {e}"));
            match k {
                "records" => r.records = num()?,
                "wall_ns" => r.wall = Duration::from_nanos(num()?),
                "cpu_ns" => r.cpu = Duration::from_nanos(num()?),
                "user_ns" => split.user = Duration::from_nanos(num()?),
                "sys_ns" => split.system = Duration::from_nanos(num()?),
                "polls" => r.polls = num()?,
                "bad" => r.bad = num()?,
                "redelivered" => r.redelivered = num()?,
                "to_first_ms" => r.to_first = Duration::from_millis(num()?),
                "share_fetches" => r.share_fetches = v.parse().ok(),
                "share_acknowledges" => r.share_acknowledges = v.parse().ok(),
                "broker_cpu_ms" => r.broker_cpu = v.parse().ok().map(Duration::from_millis),
                _ => {}
            }
        }
        r.cpu_split = Some(split);
        Ok(r)
    }

    /// Records per second and CPU ns per record.
    fn rates(&self) -> (f64, f64) {
        let secs = self.wall.as_secs_f64().max(1e-9);
        (
            self.records as f64 / secs,
            self.cpu.as_secs_f64() * 1e9 / self.records.max(1) as f64,
        )
    }
}

/// The CPU time (user + system) process `pid` has used, from `/proc/PID/stat` (in clock ticks,
/// taken as 10 ms: Linux's `USER_HZ` of 100); `None` when unreadable or `pid` is 0. The Java
/// peer reads it the same way.
pub fn process_cpu(pid: u32) -> Option<Duration> {
    if pid == 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces:
    // state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((user + system) * 10))
}

/// Checks each record a member is handed: its partition is the topic's, its offset was not
/// handed out before, its value has the workload's length. The Java peer does the same.
pub struct Checker {
    /// A bit per offset, per partition.
    seen: Vec<Vec<u64>>,
    value_size: usize,
    /// Records that failed.
    pub bad: u64,
    /// Records whose delivery count was above 1.
    pub redelivered: u64,
}

impl Checker {
    /// A checker for `partitions` partitions of `value_size`-byte values.
    pub fn new(partitions: i32, value_size: usize) -> Checker {
        Checker {
            seen: vec![Vec::new(); usize::try_from(partitions).unwrap_or(0)],
            value_size,
            bad: 0,
            redelivered: 0,
        }
    }

    /// Checks one record.
    pub fn record(&mut self, partition: i32, offset: i64, value: Option<&[u8]>, delivery: u16) {
        if delivery > 1 {
            self.redelivered += 1;
        }
        let slot = usize::try_from(partition)
            .ok()
            .and_then(|p| self.seen.get_mut(p))
            .zip(usize::try_from(offset).ok());
        let Some((bits, offset)) = slot else {
            self.bad += 1;
            return;
        };
        let (word, bit) = (offset / 64, 1u64 << (offset % 64));
        if bits.len() <= word {
            bits.resize(word + 1, 0);
        }
        if bits[word] & bit != 0 || value.map(<[u8]>::len) != Some(self.value_size) {
            self.bad += 1;
        }
        bits[word] |= bit;
    }
}

/// The child run of ours (`kafkit-bench share-read`): measures and prints the RESULT line.
///
/// Errors: the run's error.
pub fn run_ours(w: &ShareWorkload) -> Result<String, String> {
    ours::run(w).map(|r| r.to_line())
}

/// One row of the tables.
struct Row {
    /// 1, 2, ...; warm-up rounds 0, -1, ...
    round: i64,
    client: ShareClient,
    /// The load average (1 min) before the run.
    load: f64,
    result: Result<ShareRun, String>,
}

/// Fills the topic, runs every round and prints the tables. Ok(false) when a run failed or
/// read wrong records.
///
/// Errors: a message when the topic cannot be made or filled, or no Java class path is known.
pub fn run(args: &ShareArgs) -> Result<bool, String> {
    let clients = if args.clients.is_empty() {
        vec![ShareClient::Ours, ShareClient::Java]
    } else {
        args.clients.clone()
    };
    if args.partitions <= 0 || args.value_size == 0 || args.records == 0 || args.rounds == 0 {
        return Err("--partitions, --value-size, --records and --rounds must be positive".into());
    }
    let java_cp = match (&args.java_cp, std::env::var(JAVA_PEER_CP_ENV)) {
        (Some(cp), _) => cp.clone(),
        (None, Ok(cp)) => cp,
        (None, Err(_)) if !clients.contains(&ShareClient::Java) => String::new(),
        (None, Err(_)) => {
            return Err(format!(
                "the java client needs the Java peer's class path: --java-cp or {JAVA_PEER_CP_ENV} \
                 (`cargo xtask java-peer` prints it; `cargo xtask bench share` passes it)"
            ));
        }
    };
    let java_opts: Vec<String> = args
        .java_opts
        .as_deref()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;

    let pid = std::process::id();
    let (topic, batch_records) = match &args.topic {
        Some(t) => (t.clone(), None),
        None => {
            let topic = format!("bench-share-{pid}");
            eprintln!(
                "kafkit-bench share: filling {topic} ({} partitions) with {} records",
                args.partitions, args.records
            );
            crate::create_topic(&runtime, None, &args.bootstrap, &topic, args.partitions, 1)?;
            let batch = runtime.block_on(crate::consumer::fill(
                &args.bootstrap,
                &topic,
                args.partitions,
                args.records,
                args.value_size,
                Duration::from_millis(args.fill_linger_ms),
                args.fill_batch_bytes,
            ))?;
            (topic, Some(batch))
        }
    };
    let end = crate::offsets_sum(
        &runtime,
        &args.bootstrap,
        &topic,
        kafkit::OffsetSpec::Latest,
    )?;
    if end != args.records {
        return Err(format!(
            "{topic}'s end offsets add up to {end}, not {} records",
            args.records
        ));
    }

    let mut rows = Vec::new();
    for i in 0..args.warmup_rounds + args.rounds {
        // Warm-up rounds are numbered 0, -1, ... and left out of the medians.
        let round = i as i64 + 1 - args.warmup_rounds as i64;
        let mut order = clients.clone();
        if i % 2 == 1 {
            order.reverse();
        }
        for client in order {
            let group = format!("bench-share-{pid}-{i}-{}", client.name());
            let w = ShareWorkload {
                bootstrap: args.bootstrap.clone(),
                topic: topic.clone(),
                group: group.clone(),
                partitions: args.partitions,
                records: args.records,
                value_size: args.value_size,
                warmup_records: args.warmup_records,
                broker_pid: args.broker_pid,
                settings: args.settings.clone(),
            };
            let load = crate::consumer::load_now();
            eprintln!(
                "kafkit-bench share: round {round} / {}: group {group} (load {load:.2})",
                client.name()
            );
            let result = runtime
                .block_on(set_earliest(&args.bootstrap, &group))
                .and_then(|()| match client {
                    ShareClient::Ours => {
                        let mut child = vec!["share-read".to_string()];
                        child.extend(w.to_args());
                        crate::child_result_line("ours", &child).and_then(|l| ShareRun::parse(&l))
                    }
                    ShareClient::Java => java::run(&w, &java_cp, &java_opts),
                })
                .and_then(|r| {
                    if r.bad > 0 {
                        Err(format!("{} records failed the check", r.bad))
                    } else {
                        Ok(r)
                    }
                });
            if let Err(e) = &result {
                eprintln!("kafkit-bench share: round {round} / {}: {e}", client.name());
            }
            rows.push(Row {
                round,
                client,
                load,
                result,
            });
        }
    }
    print_tables(args, &topic, batch_records, &java_opts, &rows);
    Ok(rows.iter().all(|r| r.result.is_ok()))
}

/// Sets the share group's `share.auto.offset.reset` to `earliest`, before any member joins
/// (Kafka's default, `latest`, would skip the fill).
async fn set_earliest(bootstrap: &str, group: &str) -> Result<(), String> {
    let transport = kafkit::Transport::builder(bootstrap.split(','))
        .build()
        .map_err(|e| format!("transport: {e}"))?;
    let ops = vec![AlterConfigOp::set("share.auto.offset.reset", "earliest")];
    let answers = kafkit::Client::new(transport)
        .incremental_alter_configs(
            &[(ConfigResource::new(ConfigResourceType::Group, group), ops)],
            false,
        )
        .await
        .map_err(|e| format!("IncrementalAlterConfigs: {e}"))?;
    for (_, r) in answers {
        r.map_err(|e| format!("group config of {group}: {e}"))?;
    }
    Ok(())
}

/// Prints the settings, every run, then each client's medians.
fn print_tables(
    args: &ShareArgs,
    topic: &str,
    batch_records: Option<f64>,
    java_opts: &[String],
    rows: &[Row],
) {
    let cmd: Vec<String> = std::env::args().skip(1).collect();
    println!("Command: `kafkit-bench {}`", cmd.join(" "));
    let s = &args.settings;
    let batches = batch_records.map(|b| args.records as f64 / b.max(1.0));
    println!(
        "Topic {topic}: {} records of {} bytes over {} partitions{}. Both clients: one share \
         group member per run (a new group each, share.auto.offset.reset=earliest), implicit \
         acknowledgement, max.poll.records {}, fetch.max.wait.ms {}, fetch.min.bytes {}, \
         fetch.max.bytes {}; the window from the poll that first brings the count past {} to \
         the {}th record. Java: kafka-clients 4.4 KafkaShareConsumer, byte-array deserializers, \
         JVM options: {}.",
        args.records,
        args.value_size,
        args.partitions,
        batch_records.map_or_else(String::new, |b| format!(
            ", written in batches of {b:.0} records on average"
        )),
        s.max_poll_records,
        s.fetch_max_wait_ms,
        s.fetch_min_bytes,
        s.fetch_max_bytes,
        args.warmup_records,
        args.records,
        if java_opts.is_empty() {
            "none".to_string()
        } else {
            java_opts.join(" ")
        },
    );
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!("Machine: {cores} cores.");
    println!();
    println!(
        "| round | client | load | records | time (s) | records/s | CPU ms (user + sys) | CPU ns / record | polls | records / poll | ShareFetch | ShareFetch / batch | ShareAcknowledge | first record after (ms) | broker CPU ms | broker cores busy | broker CPU ns / record |"
    );
    println!(
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    let per_batch = |n: Option<u64>| match (n, batches) {
        (Some(n), Some(b)) => format!("{:.2}", n as f64 / b),
        _ => "?".into(),
    };
    let opt = |n: Option<u64>| n.map_or_else(|| "?".to_string(), |n| n.to_string());
    for row in rows {
        let head = format!(
            "| {} | {} | {:.1} |",
            row.round,
            row.client.name(),
            row.load
        );
        match &row.result {
            Ok(r) => {
                let (rps, ns) = r.rates();
                let cpu = match r.cpu_split {
                    Some(c) => format!(
                        "{:.0} ({:.0} + {:.0})",
                        r.cpu.as_secs_f64() * 1e3,
                        c.user.as_secs_f64() * 1e3,
                        c.system.as_secs_f64() * 1e3
                    ),
                    None => format!("{:.0}", r.cpu.as_secs_f64() * 1e3),
                };
                let broker = r.broker_cpu.map_or_else(
                    || "? | ? | ?".to_string(),
                    |b| {
                        format!(
                            "{:.0} | {:.2} | {:.0}",
                            b.as_secs_f64() * 1e3,
                            b.as_secs_f64() / r.wall.as_secs_f64().max(1e-9),
                            b.as_secs_f64() * 1e9 / r.records.max(1) as f64
                        )
                    },
                );
                println!(
                    "{head} {} | {:.3} | {rps:.0} | {cpu} | {ns:.0} | {} | {:.0} | {} | {} | {} | {} | {broker} |",
                    r.records,
                    r.wall.as_secs_f64(),
                    r.polls,
                    r.records as f64 / r.polls.max(1) as f64,
                    opt(r.share_fetches),
                    per_batch(r.share_fetches),
                    opt(r.share_acknowledges),
                    r.to_first.as_millis(),
                );
            }
            Err(e) => println!(
                "{head} failed: {} | | | | | | | | | | | | | |",
                e.replace('|', "/")
            ),
        }
    }
    println!();
    println!("Rounds below 1 warm up, and are left out of the medians:");
    println!();
    println!(
        "| client | runs | records/s median (range) | CPU ns / record median (range) | ShareFetch median | ShareFetch / batch median | records / poll median | first record after (ms) median | broker CPU ns / record median |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut medians = Vec::new();
    let mut clients: Vec<ShareClient> = Vec::new();
    for r in rows {
        if !clients.contains(&r.client) {
            clients.push(r.client);
        }
    }
    for client in clients {
        let runs: Vec<&ShareRun> = rows
            .iter()
            .filter(|r| r.client == client && r.round > 0)
            .filter_map(|r| r.result.as_ref().ok())
            .collect();
        if runs.is_empty() {
            continue;
        }
        let mut rps: Vec<f64> = runs.iter().map(|r| r.rates().0).collect();
        let mut ns: Vec<f64> = runs.iter().map(|r| r.rates().1).collect();
        let mut fetches: Vec<f64> = runs
            .iter()
            .filter_map(|r| r.share_fetches.map(|n| n as f64))
            .collect();
        let mut per_poll: Vec<f64> = runs
            .iter()
            .map(|r| r.records as f64 / r.polls.max(1) as f64)
            .collect();
        let mut first: Vec<f64> = runs
            .iter()
            .map(|r| r.to_first.as_secs_f64() * 1e3)
            .collect();
        let mut broker: Vec<f64> = runs
            .iter()
            .filter_map(|r| {
                r.broker_cpu
                    .map(|b| b.as_secs_f64() * 1e9 / r.records.max(1) as f64)
            })
            .collect();
        let (m_rps, m_ns) = (median(&mut rps), median(&mut ns));
        let m_fetches = median(&mut fetches);
        let range = |v: &[f64]| match (v.first(), v.last()) {
            (Some(a), Some(b)) => format!("{a:.0}-{b:.0}"),
            _ => "?".into(),
        };
        let fetch_per_batch =
            batches.map_or_else(|| "?".into(), |b| format!("{:.2}", m_fetches / b));
        println!(
            "| {} | {} | {m_rps:.0} ({}) | {m_ns:.0} ({}) | {m_fetches:.0} | {fetch_per_batch} | {:.0} | {:.0} | {:.0} |",
            client.name(),
            runs.len(),
            range(&rps),
            range(&ns),
            median(&mut per_poll),
            median(&mut first),
            median(&mut broker),
        );
        medians.push((client, m_rps, m_ns));
    }
    if let [
        (ShareClient::Ours, o_rps, o_ns),
        (ShareClient::Java, j_rps, j_ns),
    ]
    | [
        (ShareClient::Java, j_rps, j_ns),
        (ShareClient::Ours, o_rps, o_ns),
    ] = medians[..]
    {
        let mut line = String::new();
        let _ = write!(
            line,
            "\nMedians: ours reads {:.2}x Java's records/s with {:.2}x the CPU per record.",
            o_rps / j_rps,
            o_ns / j_ns
        );
        println!("{line}");
    }
}
