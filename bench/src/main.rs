//! `kafkit-bench`, run by `cargo xtask bench producer`, `consumer`, `share` and `cross`: this
//! project's Writer and Reader against other clients on the same broker, in the same run, and
//! its ShareReader against Java's `KafkaShareConsumer` (see [`share`]). The clients: kafkit and
//! librdkafka run in child processes of this program; krafka, franz-go, kafka-go and the Java
//! client are programs of their own (`peers/`, see [`external`]) printing the same result line.
//! The consumer bench is in [`consumer`]; `report` makes the tables and charts of a results file
//! ([`report`], [`json`]); this file holds the producer bench and what the benches share (child
//! runs, their result line, topic creation).
//!
//! Producer cases (each client writes its own fresh topic):
//! - `kafka`: `--records` records to a topic of each count of `--kafka-partitions` (default 48 and
//!   1,000) on Apache Kafka (`--kafka HOST:PORT`, one broker; skipped without it), every client;
//! - `kafka-txn`: the same as transactions of `--txn-records` records, `--partitions` partitions;
//! - `tansu`: `--records` records (default 1,000,000) of `--value-size` bytes (default 100) to a
//!   topic of `--partitions` partitions on tansu (`--tansu HOST:PORT`; skipped without it);
//! - `mock`: the same on librdkafka's mock cluster of 3 brokers, started in this process;
//! - `wide`: `--wide-records` records spread over `--wide-partitions` partitions (default 1,000)
//!   on the mock cluster, to count Produce requests;
//! - `txn`: the `mock` workload written by transactional producers (KIP-98: `transactional.id`,
//!   acks=all, idempotence on), committing every `--txn-records` records (default 10,000):
//!   `init_transactions`, then `begin_transaction` ... `commit_transaction` per chunk.
//!
//! On Kafka each topic is waited for (every partition led and answering ListOffsets) before a
//! client starts, and deleted after its run.
//!
//! Record `i` goes to partition `i % partitions` for every client, so all see the same spread
//! and none depends on its partitioner. acks (`--acks`, default 1), idempotence (`--idempotence`,
//! default off), compression, linger, batch size, batch record limit, in-flight limit, buffer
//! limits and delivery timeout are set to the same values on every client, as far as each takes
//! them (see [`Settings`] and `peers/README.md`). `--repeat N` runs every case N times, the
//! clients' order rotating; `--json FILE` appends every run to a results file.
//!
//! Each client run is a child process of this one (`kafkit-bench client ...`), so its CPU time
//! (`getrusage(RUSAGE_SELF)` from the first send to the last acknowledgement) counts that client
//! alone, never the mock brokers, which live in this parent process. After each run the parent
//! checks with librdkafka's consumer that the topic's end offsets add up to the records written.
//!
//! `--tasks N` sends from N senders at once, record `i` from sender `i % N`: N tokio tasks sharing
//! one Writer (ours), N OS threads sharing one librdkafka producer (the peer). A list
//! (`--tasks 1,2,4,8,16`) runs every case once per count, for each client (both clients of a count
//! one after the other), adds a column of task counts to the table and prints a scaling table per
//! case: records/s, CPU µs per record, the system time's share of the CPU and records/s against
//! the client's 1-task run; with `--svg` it also draws records/s and CPU per record by task count
//! (`producer-tasks-*.svg`).
//! The `txn` case always sends from one task (a transaction is the records in order).
//!
//! The consumer bench (`kafkit-bench consumer`, see [`consumer`]) takes `--tasks` the same way:
//! N tokio tasks sharing one Reader (ours), N OS threads polling one librdkafka consumer (the
//! peer), the same scaling table and, with `--svg DIR`, `consumer-tasks-*.svg` ([`scaling`] holds
//! both benches' table and charts). Its options: `--cases tansu,mock,kafka`, `--partitions
//! 6,48,1000`, `--records`, `--value-size`, `--tansu HOST:PORT`, `--kafka HOST:PORT`, `--clients`,
//! `--repeat`, `--json FILE`, `--fill-linger-ms`,
//! `--tasks`, `--svg`, the fetch settings of both clients (`--fetch-min-bytes`,
//! `--fetch-max-wait-ms`, `--max-partition-fetch-bytes`, `--fetch-max-bytes`,
//! `--queued-max-kbytes`, `--check-crcs`, `--rdkafka-queued-min-messages`,
//! `--rdkafka-fetch-queue-backoff-ms`) and `--group` with its settings (`--members`,
//! `--assignor`, `--session-timeout-ms`, `--heartbeat-interval-ms`, `--leave-at`).
//!
//! `KAFKIT_BENCH_TRACE=FILTER` (e.g. `kafkit=debug`) prints kafkit's tracing on stderr.
//!
//! The result is a Markdown table on stdout; progress goes to stderr. The exit code is non-zero
//! when a run failed or lost records (a client that cannot run a workload, "n/a", is not a
//! failure).

mod alloc;
mod consumer;
mod cpu;
mod encode;
mod external;
mod json;
mod meter;
mod ours;
mod peer;
mod report;
mod scaling;
mod share;
mod svg;

/// Counts every allocation of Rust code (see [`alloc`]).
#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;

use std::fmt::Write as _;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

use crate::cpu::CpuTime;

/// Command line.
#[derive(Parser, Debug)]
#[command(
    name = "kafkit-bench",
    about = "This project's Writer and Reader against librdkafka's producer and consumer, same broker, same run"
)]
struct Cli {
    /// Install `metrics-exporter-prometheus`'s recorder first, so kafkit's metrics are
    /// recorded (needs this program built with `--features metrics`; `meter` passes it to
    /// its child runs).
    #[arg(long, global = true)]
    prometheus: bool,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the producer benchmark and print a Markdown table.
    Producer(ProducerArgs),
    /// Run the consumer benchmark and print Markdown tables.
    Consumer(consumer::ConsumerArgs),
    /// The Writer's CPU path without a network (for callgrind instruction counts).
    Encode(encode::EncodeArgs),
    /// Run the share group benchmark (ShareReader against Java's KafkaShareConsumer on Apache
    /// Kafka) and print Markdown tables.
    Share(share::ShareArgs),
    /// What kafkit's metrics cost per record: the Writer and the Reader with the `metrics`
    /// feature off, on, and on with the Prometheus recorder, alternating in one run.
    Meter(meter::MeterArgs),
    /// The tables and charts of a results file (`--json`): every client per case, and kafkit
    /// against the best peer.
    Report(report::ReportArgs),
    /// One producer run in this process, for the parent (`producer`); prints one RESULT line.
    #[command(hide = true)]
    Client {
        /// Which client produces.
        #[arg(long, value_enum)]
        client: Client,
        #[command(flatten)]
        workload: Workload,
    },
    /// One consumer run in this process, for the parent (`consumer`); prints one RESULT line.
    #[command(hide = true)]
    Read {
        /// Which client reads.
        #[arg(long, value_enum)]
        client: Client,
        #[command(flatten)]
        workload: consumer::ReadWorkload,
    },
    /// One share group member run in this process, for the parent (`share`); prints one
    /// RESULT line.
    #[command(hide = true)]
    ShareRead(share::ShareWorkload),
    /// One group run in this process, for the parent (`consumer --group`); prints one GROUP
    /// line.
    #[command(hide = true)]
    GroupRead {
        /// Whose members form the group.
        #[arg(long, value_enum)]
        client: Client,
        #[command(flatten)]
        workload: consumer::group::GroupWorkload,
    },
}

/// Options of `producer`.
#[derive(Args, Debug)]
struct ProducerArgs {
    /// Records per client in the `tansu` and `mock` cases.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Partitions of the topic in the `tansu` and `mock` cases. On the mock cluster each
    /// partition keeps at most 5 MiB of log (older batches are dropped, end offsets stay), so
    /// this also spreads the data.
    #[arg(long, default_value_t = 48)]
    partitions: i32,
    /// Records per client in the `wide` case (default: `--records`).
    #[arg(long)]
    wide_records: Option<u64>,
    /// Partitions of the topic in the `wide` case, spread over the 3 mock brokers; a list
    /// (`200,1000`) runs the case once per count (more points on the charts).
    #[arg(long, value_delimiter = ',', default_values_t = [1_000])]
    wide_partitions: Vec<i32>,
    /// Writes the charts (`producer-records-per-second.svg`, `producer-cpu-per-record.svg`)
    /// into this directory (`cargo xtask bench producer` passes `docs/img`).
    #[arg(long)]
    svg: Option<std::path::PathBuf>,
    /// Records per transaction in the `txn` case (a commit after each).
    #[arg(long, default_value_t = 10_000)]
    txn_records: u64,
    /// tansu's bootstrap address; without it the `tansu` case is skipped.
    #[arg(long)]
    tansu: Option<String>,
    /// Apache Kafka's bootstrap address (one broker); without it the `kafka` and `kafka-txn`
    /// cases are skipped.
    #[arg(long)]
    kafka: Option<String>,
    /// Partitions of the topic in the `kafka` case; a list runs the case once per count.
    #[arg(long, value_delimiter = ',', default_values_t = [48, 1_000])]
    kafka_partitions: Vec<i32>,
    /// Replicas of each partition of the `kafka` cases' topics (a cluster of at least as many
    /// brokers: `cargo xtask broker start --kafka --brokers 3`, every node's address in
    /// `--kafka`).
    #[arg(long, default_value_t = 1)]
    replication_factor: i16,
    /// The `kafka` cases' brokers' JMX addresses (`host:port,...`: `cargo xtask broker start
    /// --kafka` prints them): the Produce requests of a client that does not count its own
    /// (krafka) are read from the brokers' request metrics before and after its run (the Java
    /// peer's `broker-requests`, `KAFKIT_JAVA_PEER_CP`).
    #[arg(long)]
    kafka_jmx: Option<String>,
    /// Runs of every case and client; the clients' order rotates between repeats.
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Appends every run, as one JSON object per line, to this file (see `json.rs`).
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Cases to run (default: every one but the `kafka` ones).
    #[arg(long, value_enum, value_delimiter = ',')]
    cases: Vec<Case>,
    /// Clients to run, in this order (default: ours then rdkafka).
    #[arg(long, value_enum, value_delimiter = ',')]
    clients: Vec<Client>,
    /// Senders at once: tokio tasks sharing one Writer (ours), OS threads sharing one
    /// librdkafka producer (record `i` is sent by sender `i % tasks`). A list (`1,2,4,8,16`)
    /// runs every case once per count, for each client, and adds the scaling table (and with
    /// `--svg` its charts); the `txn` case always sends from one.
    #[arg(long, value_delimiter = ',', default_values_t = [1])]
    tasks: Vec<u64>,
    #[command(flatten)]
    settings: Settings,
}

/// A benchmark case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Case {
    /// tansu, one broker.
    Tansu,
    /// librdkafka's mock cluster, 3 brokers.
    Mock,
    /// Many partitions over the 3 mock brokers.
    Wide,
    /// Transactional producers on the 3 mock brokers, a commit every `--txn-records`.
    Txn,
    /// Apache Kafka, one broker (`--kafka`), each partition count of `--kafka-partitions`.
    Kafka,
    /// Transactional producers on Apache Kafka, `--partitions` partitions, a commit every
    /// `--txn-records`.
    #[value(name = "kafka-txn")]
    KafkaTxn,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Tansu => "tansu",
            Case::Mock => "mock",
            Case::Wide => "wide",
            Case::Txn => "txn",
            Case::Kafka => "kafka",
            Case::KafkaTxn => "kafka-txn",
        }
    }

    /// Whether the case writes transactions.
    fn transactional(self) -> bool {
        matches!(self, Case::Txn | Case::KafkaTxn)
    }
}

/// A client under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Client {
    /// This project's `kafkit::Writer` (producer bench) or `kafkit::Reader` (consumer bench).
    Ours,
    /// librdkafka's producer or consumer (rdkafka crate).
    Rdkafka,
    /// krafka's producer or consumer (a pure-Rust client on crates.io; `peers/krafka`).
    Krafka,
    /// franz-go's `kgo.Client` (`peers/go`).
    #[value(name = "franz-go")]
    FranzGo,
    /// segmentio/kafka-go's Writer or Reader (`peers/go`).
    #[value(name = "kafka-go")]
    KafkaGo,
    /// The Java client's KafkaProducer or KafkaConsumer (kafka-clients; `peers/java`).
    Java,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::Ours => "ours",
            Client::Rdkafka => "rdkafka",
            Client::Krafka => "krafka",
            Client::FranzGo => "franz-go",
            Client::KafkaGo => "kafka-go",
            Client::Java => "java",
        }
    }

    /// The client's name in tables and charts.
    fn label(self) -> &'static str {
        match self {
            Client::Ours => "kafkit",
            Client::Rdkafka => "librdkafka",
            Client::Krafka => "krafka",
            Client::FranzGo => "franz-go",
            Client::KafkaGo => "kafka-go",
            Client::Java => "Java",
        }
    }
}

/// Producer settings applied to both clients (Java / librdkafka config names in brackets).
#[derive(Args, Clone, Debug)]
pub struct Settings {
    /// Bytes in each record value (no key, no headers).
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// How long a batch waits for more records, ms [linger.ms].
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// Largest batch of one partition, bytes [batch.size].
    #[arg(long, default_value_t = 1_000_000)]
    pub batch_size: usize,
    /// Most records in one batch [batch.num.messages].
    #[arg(long, default_value_t = 10_000)]
    pub batch_max_records: usize,
    /// Produce requests in flight per broker connection [max.in.flight.requests.per.connection].
    #[arg(long, default_value_t = 5)]
    pub max_in_flight: usize,
    /// Bytes of records buffered before a send waits [buffer.memory /
    /// queue.buffering.max.kbytes].
    #[arg(long, default_value_t = 32 * 1024 * 1024)]
    pub buffer_memory: usize,
    /// Records buffered before a send waits [queue.buffering.max.messages].
    #[arg(long, default_value_t = 100_000)]
    pub max_buffered_records: usize,
    /// Time a record may take from send to acknowledgement, ms [delivery.timeout.ms /
    /// message.timeout.ms].
    #[arg(long, default_value_t = 120_000)]
    pub delivery_timeout_ms: u64,
    /// Codec of every batch, the same for both clients [compression.type].
    #[arg(long, value_enum, default_value_t = Codec::None)]
    pub compression: Codec,
    /// Acknowledgements asked of the broker (the `txn` case always asks all) [acks].
    #[arg(long, value_enum, default_value_t = AcksArg::One)]
    pub acks: AcksArg,
    /// Idempotent writes (needs `--acks all`; the `txn` case is always idempotent)
    /// [enable.idempotence].
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub idempotence: bool,
    /// This project's Writer only: `send` each record and drop its future, instead of
    /// `send_detached` (no future; the outcome reaches the completion callback, as librdkafka's
    /// delivery report).
    #[arg(long)]
    pub futures: bool,
    /// This project's Writer only: hand it each record as a `ProducerRecord` (the value a
    /// `Bytes` cloned per record) instead of a `ProducerRecordRef` borrowing the value (which
    /// the writer copies, as librdkafka copies the payload it is lent, `RD_KAFKA_MSG_F_COPY`).
    #[arg(long)]
    pub owned: bool,
}

/// The acknowledgements a producer asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum AcksArg {
    /// `acks=1`: the leader's.
    #[value(name = "1")]
    One,
    /// `acks=all`: every in-sync replica's.
    All,
}

impl AcksArg {
    /// Kafka's spelling (`1`, `all`).
    pub fn name(self) -> &'static str {
        match self {
            AcksArg::One => "1",
            AcksArg::All => "all",
        }
    }
}

/// A batch codec both clients support.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Codec {
    /// No compression.
    None,
    /// LZ4 frames.
    Lz4,
    /// Zstandard.
    Zstd,
    /// Snappy (xerial framing).
    Snappy,
    /// GZIP.
    Gzip,
}

impl Codec {
    /// Kafka's name of the codec (`compression.type`).
    pub fn name(self) -> &'static str {
        self.compression().name()
    }

    /// The Writer's codec.
    pub fn compression(self) -> kafkit::Compression {
        match self {
            Codec::None => kafkit::Compression::None,
            Codec::Lz4 => kafkit::Compression::Lz4,
            Codec::Zstd => kafkit::Compression::Zstd,
            Codec::Snappy => kafkit::Compression::Snappy,
            Codec::Gzip => kafkit::Compression::Gzip,
        }
    }
}

/// What one client run writes.
#[derive(Args, Clone, Debug)]
pub struct Workload {
    /// Bootstrap servers, `host:port[,host:port...]`.
    #[arg(long)]
    pub bootstrap: String,
    /// Topic to write (it exists already).
    #[arg(long)]
    pub topic: String,
    /// Partitions of the topic; record `i` goes to partition `i % partitions`.
    #[arg(long)]
    pub partitions: i32,
    /// Records to write.
    #[arg(long)]
    pub records: u64,
    /// Transactional (acks=all, idempotent) with a commit every this many records; 0: plain
    /// acks=1 writes without idempotence.
    #[arg(long, default_value_t = 0)]
    pub txn_records: u64,
    /// Senders at once: tokio tasks sharing one Writer (ours), OS threads sharing one producer
    /// (librdkafka); record `i` is sent by sender `i % tasks`. The `txn` case sends from one.
    #[arg(long, default_value_t = 1)]
    pub tasks: u64,
    #[command(flatten)]
    /// Producer settings.
    pub settings: Settings,
}

impl Workload {
    /// The value every record carries.
    pub fn value(&self) -> Vec<u8> {
        value_of(self.settings.value_size)
    }

    /// The command-line arguments that make a child process run this workload.
    fn to_args(&self) -> Vec<String> {
        let s = &self.settings;
        [
            ("--bootstrap", self.bootstrap.clone()),
            ("--topic", self.topic.clone()),
            ("--partitions", self.partitions.to_string()),
            ("--records", self.records.to_string()),
            ("--txn-records", self.txn_records.to_string()),
            ("--value-size", s.value_size.to_string()),
            ("--linger-ms", s.linger_ms.to_string()),
            ("--batch-size", s.batch_size.to_string()),
            ("--batch-max-records", s.batch_max_records.to_string()),
            ("--max-in-flight", s.max_in_flight.to_string()),
            ("--buffer-memory", s.buffer_memory.to_string()),
            ("--max-buffered-records", s.max_buffered_records.to_string()),
            ("--delivery-timeout-ms", s.delivery_timeout_ms.to_string()),
            ("--compression", s.compression.name().to_string()),
            ("--acks", s.acks.name().to_string()),
            ("--idempotence", s.idempotence.to_string()),
            ("--tasks", self.tasks.to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v])
        .chain(s.futures.then(|| "--futures".to_string()))
        .chain(s.owned.then(|| "--owned".to_string()))
        .collect()
    }
}

/// The value of every record both benches write: `size` bytes, `abc...zabc...`.
pub fn value_of(size: usize) -> Vec<u8> {
    (0..size).map(|i| b'a' + (i % 26) as u8).collect()
}

/// What one client run measured.
#[derive(Clone, Debug, Default)]
pub struct RunResult {
    /// Records acknowledged by the broker (producer), or read (consumer).
    pub delivered: u64,
    /// Records that failed (producer), or that were not the ones expected (consumer: a wrong
    /// value, an offset out of order, a partition with too few or too many records).
    pub failed: u64,
    /// The first failure, if any.
    pub first_error: Option<String>,
    /// From the first send to the last acknowledgement (producer), from `assign` to the last
    /// record (consumer).
    pub wall: Duration,
    /// CPU time of the client's process over `wall`.
    pub cpu: CpuTime,
    /// Produce (producer) or Fetch (consumer) requests sent, over all brokers (None when the
    /// client did not say).
    pub requests: Option<u64>,
    /// Value bytes read (consumer; 0 for the producer).
    pub bytes: u64,
    /// Allocations made by Rust code in steady state (after the first tenth of the records),
    /// with the records sent over that span; `None` when not measured.
    pub allocated: Option<(alloc::Allocated, u64)>,
    /// The client library and its version, `name@version` (None: the child did not say).
    pub version: Option<String>,
}

const RESULT_PREFIX: &str = "RESULT ";

impl RunResult {
    /// One line for the parent: `RESULT key=value ...` (the error last, as it may hold spaces).
    fn to_line(&self) -> String {
        let mut line = format!(
            "{RESULT_PREFIX}delivered={} failed={} wall_us={} user_us={} sys_us={} requests={} bytes={}",
            self.delivered,
            self.failed,
            self.wall.as_micros(),
            self.cpu.user.as_micros(),
            self.cpu.system.as_micros(),
            self.requests
                .map_or_else(|| "-".to_string(), |n| n.to_string()),
            self.bytes,
        );
        if let Some((a, n)) = &self.allocated {
            let _ = write!(
                line,
                " allocs={} alloc_bytes={} alloc_records={n}",
                a.count, a.bytes
            );
        }
        if let Some(v) = &self.version {
            let _ = write!(line, " version={v}");
        }
        if let Some(e) = &self.first_error {
            let _ = write!(line, " error={}", e.replace('\n', " "));
        }
        line
    }

    /// Reads a line made by [`RunResult::to_line`].
    fn parse(line: &str) -> Result<RunResult, String> {
        let rest = line
            .strip_prefix(RESULT_PREFIX)
            .ok_or_else(|| format!("not a result line: {line}"))?;
        let (fields, error) = match rest.split_once(" error=") {
            Some((f, e)) => (f, Some(e.to_string())),
            None => (rest, None),
        };
        let mut r = RunResult {
            first_error: error,
            ..RunResult::default()
        };
        for kv in fields.split_whitespace() {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("bad field {kv}"))?;
            let num = || v.parse::<u64>().map_err(|e| format!("bad {k}={v}: {e}"));
            match k {
                "delivered" => r.delivered = num()?,
                "failed" => r.failed = num()?,
                "wall_us" => r.wall = Duration::from_micros(num()?),
                "user_us" => r.cpu.user = Duration::from_micros(num()?),
                "sys_us" => r.cpu.system = Duration::from_micros(num()?),
                "requests" => r.requests = v.parse().ok(),
                "bytes" => r.bytes = num()?,
                "allocs" => r.allocated.get_or_insert_default().0.count = num()?,
                "alloc_bytes" => r.allocated.get_or_insert_default().0.bytes = num()?,
                "alloc_records" => r.allocated.get_or_insert_default().1 = num()?,
                "version" => r.version = Some(v.to_string()),
                _ => {}
            }
        }
        Ok(r)
    }
}

fn main() -> ExitCode {
    if std::env::var_os("KAFKIT_BENCH_TRACE").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env(
                "KAFKIT_BENCH_TRACE",
            ))
            .with_writer(std::io::stderr)
            .init();
    }
    let cli = Cli::parse();
    if cli.prometheus
        && let Err(e) = meter::install_prometheus()
    {
        eprintln!("kafkit-bench: {e}");
        return ExitCode::FAILURE;
    }
    match cli.command {
        Cmd::Client { client, workload } => {
            let result = match client {
                Client::Ours => ours::run(&workload),
                Client::Rdkafka => peer::run(&workload),
                other => Err(own_program(other)),
            };
            if let Some(line) = meter::scrape_summary() {
                eprintln!("{line}");
            }
            match result {
                Ok(r) => {
                    println!("{}", r.to_line());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("kafkit-bench client {}: {e}", client.name());
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Read { client, workload } => {
            let result = match client {
                Client::Ours => consumer::ours::run(&workload),
                Client::Rdkafka => consumer::peer::run(&workload),
                other => Err(own_program(other)),
            };
            if let Some(line) = meter::scrape_summary() {
                eprintln!("{line}");
            }
            match result {
                Ok(r) => {
                    println!("{}", r.to_line());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("kafkit-bench read {}: {e}", client.name());
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::GroupRead { client, workload } => {
            let result = match client {
                Client::Ours => consumer::group_ours::run(&workload),
                Client::Rdkafka => consumer::group_peer::run(&workload),
                other => Err(own_program(other)),
            };
            match result {
                Ok(r) => {
                    println!("{}", r.to_line());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("kafkit-bench group-read {}: {e}", client.name());
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::ShareRead(workload) => match share::run_ours(&workload) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("kafkit-bench share-read: {e}");
                ExitCode::FAILURE
            }
        },
        Cmd::Share(args) => exit_code(share::run(&args)),
        Cmd::Producer(args) => exit_code(producer(&args)),
        Cmd::Encode(args) => exit_code(encode::run(&args)),
        Cmd::Meter(args) => exit_code(meter::run(&args)),
        Cmd::Consumer(args) => exit_code(consumer::run(&args)),
        Cmd::Report(args) => exit_code(report::run(&args)),
    }
}

/// This project's client and its version, for the result line.
pub fn ours_version() -> String {
    format!("kafkit@{}", env!("CARGO_PKG_VERSION"))
}

/// librdkafka's version (the library linked in), for the result line.
pub fn rdkafka_version() -> String {
    format!("librdkafka@{}", rdkafka::util::get_rdkafka_version().1)
}

/// Why an external client cannot run inside this program.
fn own_program(client: Client) -> String {
    format!(
        "{} runs as a program of its own (see bench/src/external.rs)",
        client.name()
    )
}

/// The exit code of a bench: failure when a run failed (`Ok(false)`) or the bench could not run.
fn exit_code(outcome: Result<bool, String>) -> ExitCode {
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("kafkit-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One row of the table.
struct Row {
    case: Case,
    broker: String,
    client: Client,
    /// Senders at once (tasks of ours, threads of librdkafka).
    tasks: u64,
    partitions: i32,
    records: u64,
    /// The run's result, or why it failed.
    result: Result<RunResult, String>,
}

/// Runs every case and prints the table. Ok(false) when some run failed or lost records.
fn producer(args: &ProducerArgs) -> Result<bool, String> {
    let cases = if args.cases.is_empty() {
        vec![Case::Tansu, Case::Mock, Case::Wide, Case::Txn]
    } else {
        args.cases.clone()
    };
    let clients = if args.clients.is_empty() {
        vec![Client::Ours, Client::Rdkafka]
    } else {
        args.clients.clone()
    };
    if args.partitions <= 0
        || args.wide_partitions.iter().any(|p| *p <= 0)
        || args.kafka_partitions.iter().any(|p| *p <= 0)
        || args.settings.value_size == 0
        || args.tasks.contains(&0)
        || args.repeat == 0
    {
        return Err(
            "--partitions, --wide-partitions, --kafka-partitions, --value-size, --tasks and \
             --repeat must be positive"
                .into(),
        );
    }
    // One run of a case per partition count (`wide` and `kafka` may have several).
    let runs: Vec<(Case, Option<i32>)> = cases
        .iter()
        .flat_map(|&c| match c {
            Case::Wide => args.wide_partitions.iter().map(|&p| (c, Some(p))).collect(),
            Case::Kafka => args
                .kafka_partitions
                .iter()
                .map(|&p| (c, Some(p)))
                .collect(),
            _ => vec![(c, None)],
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let mock: Option<MockCluster<'static, DefaultProducerContext>> = if cases
        .iter()
        .any(|c| matches!(c, Case::Mock | Case::Wide | Case::Txn))
    {
        Some(MockCluster::new(3).map_err(|e| format!("mock cluster: {e}"))?)
    } else {
        None
    };
    let kafka_broker = args.kafka.as_deref().map(kafka_label);

    let mut rows = Vec::new();
    for &(case, many) in &runs {
        let (bootstrap, broker, partitions, records) = match case {
            Case::Tansu => match &args.tansu {
                Some(b) => (
                    b.clone(),
                    "tansu 0.6 (1 broker)".to_string(),
                    args.partitions,
                    args.records,
                ),
                None => {
                    eprintln!("kafkit-bench: no --tansu given, skipping the tansu case");
                    continue;
                }
            },
            Case::Kafka | Case::KafkaTxn => match (&args.kafka, &kafka_broker) {
                (Some(b), Some(name)) => (
                    b.clone(),
                    name.clone(),
                    many.unwrap_or(args.partitions),
                    args.records,
                ),
                _ => {
                    eprintln!(
                        "kafkit-bench: no --kafka given, skipping the {} case",
                        case.name()
                    );
                    continue;
                }
            },
            Case::Mock | Case::Wide | Case::Txn => {
                let Some(m) = &mock else { continue };
                let (p, n) = if let Some(p) = many {
                    (p, args.wide_records.unwrap_or(args.records))
                } else {
                    (args.partitions, args.records)
                };
                (
                    m.bootstrap_servers(),
                    "librdkafka mock (3 brokers)".to_string(),
                    p,
                    n,
                )
            }
        };
        // Every task count, each for every client in turn (so all clients of a count run
        // under the same load), `--repeat` times with the clients' order rotated; a
        // transaction is the records in order, sent from one task.
        let task_counts: &[u64] = if case.transactional() {
            &[1]
        } else {
            &args.tasks
        };
        for repeat in 0..args.repeat {
            let mut order = clients.clone();
            order.rotate_left(repeat as usize % clients.len().max(1));
            for &tasks in task_counts {
                for &client in &order {
                    let row = produce_once(
                        args,
                        &runtime,
                        mock.as_ref(),
                        ProduceRun {
                            case,
                            broker: &broker,
                            bootstrap: &bootstrap,
                            client,
                            tasks,
                            partitions,
                            records,
                            serial: rows.len(),
                        },
                    );
                    if let Some(path) = &args.json {
                        json::append(path, &producer_json(args, &row, repeat))?;
                    }
                    rows.push(row);
                }
            }
        }
    }
    print_table(args, &rows);
    if args.tasks.len() > 1 {
        scaling::print_tables(&SENDING, &clients, &case_runs(&rows));
    }
    if let Some(dir) = &args.svg {
        write_charts(dir, &args.tasks, &rows)?;
    }
    Ok(rows
        .iter()
        .all(|r| matches!(&r.result, Ok(x) if x.failed == 0) || is_not_supported(&r.result)))
}

/// Whether a run's error says the client cannot run the workload (not a failure of the bench).
fn is_not_supported(r: &Result<RunResult, String>) -> bool {
    matches!(r, Err(e) if e == external::NOT_SUPPORTED)
}

/// One producer run: which case, broker, client and sizes.
struct ProduceRun<'a> {
    case: Case,
    broker: &'a str,
    bootstrap: &'a str,
    client: Client,
    tasks: u64,
    partitions: i32,
    records: u64,
    /// The run's number in this bench (in its topic's name).
    serial: usize,
}

/// Creates a fresh topic, runs the client on it in a child process and checks that every record
/// is in the topic.
fn produce_once(
    args: &ProducerArgs,
    runtime: &tokio::runtime::Runtime,
    mock: Option<&MockCluster<'static, DefaultProducerContext>>,
    run: ProduceRun<'_>,
) -> Row {
    let ProduceRun {
        case,
        client,
        tasks,
        partitions,
        records,
        ..
    } = run;
    let topic = format!(
        "bench-{}-{}-{}-{}",
        case.name(),
        client.name(),
        std::process::id(),
        run.serial
    );
    eprintln!(
        "kafkit-bench: {} / {} / {tasks} task(s): {records} records to {topic} ({partitions} partitions)",
        case.name(),
        client.name()
    );
    let workload = Workload {
        bootstrap: run.bootstrap.to_string(),
        topic: topic.clone(),
        partitions,
        records,
        txn_records: if case.transactional() {
            args.txn_records.max(1)
        } else {
            0
        },
        tasks,
        settings: args.settings.clone(),
    };
    let on_mock = mock.filter(|_| matches!(case, Case::Mock | Case::Wide | Case::Txn));
    let replicas = if matches!(case, Case::Kafka | Case::KafkaTxn) {
        args.replication_factor
    } else {
        1
    };
    let result = create_topic(
        runtime,
        on_mock,
        run.bootstrap,
        &topic,
        partitions,
        replicas,
    )
    .and_then(|()| {
        let mut child = vec![
            "client".to_string(),
            "--client".into(),
            client.name().into(),
        ];
        child.extend(workload.to_args());
        // The brokers' count, for a client that does not say how many requests it sent.
        let jmx = args
            .kafka_jmx
            .as_deref()
            .filter(|_| matches!(case, Case::Kafka | Case::KafkaTxn) && client == Client::Krafka);
        // A side figure: when it cannot be read the run stands, its requests unknown.
        let count = |j: &str| {
            external::broker_requests(j, "Produce")
                .map_err(|e| eprintln!("kafkit-bench: the brokers' request count: {e}"))
                .ok()
        };
        let before = jmx.and_then(count);
        let mut r = run_child(client, &child)?;
        if let (Some(j), Some(before), None) = (jmx, before, r.requests) {
            r.requests = count(j).map(|after| after.saturating_sub(before));
        }
        Ok(r)
    })
    .and_then(|r| {
        // On Kafka a transaction's commit marker takes an offset in each partition it wrote;
        // the broker writes the last transaction's markers after EndTxn answers, so the end
        // offsets are read until they hold them (10 s at most).
        let markers = if case == Case::KafkaTxn {
            commit_markers(records, workload.txn_records, partitions)
        } else {
            0
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let end = loop {
            let end = match case {
                // tansu 0.6 under-reports end offsets (ListOffsets latest) after many
                // batches: count the records instead.
                Case::Tansu => count_records(&workload, records)?,
                _ => offsets_sum(runtime, run.bootstrap, &topic, kafkit::OffsetSpec::Latest)?,
            };
            if end >= records + markers || std::time::Instant::now() >= deadline {
                break end;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if r.failed == 0 && (r.delivered != records || end != records + markers) {
            return Err(format!(
                "{} of {records} acknowledged, end offsets add up to {end}",
                r.delivered
            ));
        }
        Ok(r)
    });
    if let Err(e) = &result {
        eprintln!(
            "kafkit-bench: {} / {} / {tasks} task(s): {e}",
            case.name(),
            client.name()
        );
    }
    if matches!(case, Case::Kafka | Case::KafkaTxn) {
        // One broker holds every run's topic: thousands of partitions left behind would slow
        // the runs after (each has its log and index files).
        delete_topic(runtime, run.bootstrap, &topic);
    }
    Row {
        case,
        broker: run.broker.to_string(),
        client,
        tasks,
        partitions,
        records,
        result,
    }
}

/// One producer row as JSON: the case, the client, the settings every client was given, the
/// machine and the figures.
fn producer_json(args: &ProducerArgs, row: &Row, repeat: u32) -> serde_json::Value {
    let s = &args.settings;
    let txn = row.case.transactional();
    json::merge(&[
        serde_json::json!({
            "bench": "producer",
            "unix_time": json::now(),
            "commit": std::env::var("KAFKIT_BENCH_COMMIT").ok(),
            "machine": json::machine(),
            "broker": row.broker,
            "case": row.case.name(),
            "client": row.client.label(),
            "partitions": row.partitions,
            "records": row.records,
            "tasks": row.tasks,
            "repeat": repeat,
            "settings": {
                "value_size": s.value_size,
                "acks": if txn { "all" } else { s.acks.name() },
                "idempotence": txn || s.idempotence,
                "transaction_records": if txn { Some(args.txn_records.max(1)) } else { None },
                "compression": s.compression.name(),
                "replication_factor": if matches!(row.case, Case::Kafka | Case::KafkaTxn) {
                    args.replication_factor
                } else {
                    1
                },
                "linger_ms": s.linger_ms,
                "batch_size": s.batch_size,
                "batch_max_records": s.batch_max_records,
                "max_in_flight": s.max_in_flight,
                "buffer_memory": s.buffer_memory,
                "max_buffered_records": s.max_buffered_records,
                "delivery_timeout_ms": s.delivery_timeout_ms,
            },
        }),
        json::figures(&row.result),
    ])
}

/// A connection to the first broker of the list `bootstrap`, as `client_id`.
///
/// Errors: the dial's, with the address.
async fn dial_first(bootstrap: &str, client_id: &str) -> Result<kafkit::Conn, String> {
    let first = bootstrap.split(',').next().unwrap_or_default();
    kafkit::Dialer::builder()
        .client_id(client_id)
        .build()
        .dial(first)
        .await
        .map_err(|e| format!("dial {first}: {e}"))
}

/// Deletes `topic` (DeleteTopics through a connection to `bootstrap`); a failure is only
/// printed: the run's figures stand.
pub(crate) fn delete_topic(runtime: &tokio::runtime::Runtime, bootstrap: &str, topic: &str) {
    let outcome: Result<(), String> = runtime.block_on(async {
        let conn = dial_first(bootstrap, "kafkit-bench-admin").await?;
        for (_, r) in conn
            .delete_topics(&[topic])
            .await
            .map_err(|e| format!("DeleteTopics: {e}"))?
        {
            r.map_err(|e| format!("DeleteTopics {topic}: {e}"))?;
        }
        Ok(())
    });
    if let Err(e) = outcome {
        eprintln!("kafkit-bench: could not delete {topic}: {e}");
    }
}

/// The Kafka version of the rig's broker, for the tables (`cargo xtask bench` sets
/// `KAFKIT_BENCH_KAFKA_VERSION` to the version it started).
fn kafka_version() -> String {
    std::env::var("KAFKIT_BENCH_KAFKA_VERSION").unwrap_or_else(|_| "4.4.0".to_string())
}

/// The transaction markers a transactional run leaves in the log on Apache Kafka: one commit
/// marker in each partition a transaction wrote (record `i` to partition `i % partitions`, a
/// commit every `per_txn` records). librdkafka's mock writes none.
fn commit_markers(records: u64, per_txn: u64, partitions: i32) -> u64 {
    let per_txn = per_txn.max(1);
    let partitions = u64::try_from(partitions).unwrap_or(1).max(1);
    (0..records.div_ceil(per_txn))
        .map(|t| (records - t * per_txn).min(per_txn).min(partitions))
        .sum()
}

/// The results' name of the Apache Kafka cluster at `bootstrap`: its version and its number of
/// brokers, one per address given (`--kafka` names every node of a cluster).
fn kafka_label(bootstrap: &str) -> String {
    let n = bootstrap
        .split(',')
        .filter(|a| !a.trim().is_empty())
        .count();
    let brokers = if n == 1 {
        "1 broker".to_string()
    } else {
        format!("{n} brokers")
    };
    format!("Apache Kafka {} ({brokers})", kafka_version())
}

/// Creates `topic`: on the mock cluster (`mock`) with partition `p` led by broker `p % 3 + 1`;
/// else at `bootstrap` (tansu) through CreateTopics.
fn create_topic(
    runtime: &tokio::runtime::Runtime,
    mock: Option<&MockCluster<'static, DefaultProducerContext>>,
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    replicas: i16,
) -> Result<(), String> {
    match mock {
        Some(m) => {
            // With one replica the mock puts partition p on broker p % 3 + 1 by itself
            // (setting leaders one by one costs about 0.2 s per partition).
            m.create_topic(topic, partitions, 1)
                .map_err(|e| format!("mock create_topic: {e}"))?;
            Ok(())
        }
        None => runtime
            .block_on(async {
                let conn = dial_first(bootstrap, "kafkit-bench-admin").await?;
                let results = conn
                    .create_topics(
                        &[kafkit::admin::NewTopic::new(topic, partitions, replicas)],
                        false,
                    )
                    .await
                    .map_err(|e| format!("CreateTopics: {e}"))?;
                for (_, r) in results {
                    r.map_err(|e| format!("CreateTopics {topic}: {e}"))?;
                }
                Ok(())
            })
            .and_then(|()| wait_usable(runtime, bootstrap, topic, partitions)),
    }
}

/// Waits (up to 30 s) until every partition of the new `topic` has a leader that answers
/// ListOffsets, so that no client's window includes the topic's creation (Kafka elects the
/// leaders of a new topic's partitions after CreateTopics answers).
///
/// Errors: the topic is not usable after 30 s.
fn wait_usable(
    runtime: &tokio::runtime::Runtime,
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> Result<(), String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let led = runtime.block_on(async {
            let conn = dial_first(bootstrap, "kafkit-bench-check").await?;
            let md = conn
                .metadata(Some(&[topic]))
                .await
                .map_err(|e| format!("metadata: {e}"))?;
            Ok::<bool, String>(md.topic(topic).is_some_and(|t| {
                t.partitions.len() == usize::try_from(partitions).unwrap_or(0)
                    && t.partitions.iter().all(|p| p.leader_id >= 0)
            }))
        });
        let last = match led {
            Ok(true) => match offsets_sum(runtime, bootstrap, topic, kafkit::OffsetSpec::Latest) {
                Ok(_) => return Ok(()),
                Err(e) => e,
            },
            Ok(false) => "partitions without a leader".to_string(),
            Err(e) => e,
        };
        if std::time::Instant::now() >= deadline {
            return Err(format!("{topic} not usable after 30 s: {last}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `client` in a child process: this program with `args` (a `client` or `read`
/// subcommand), which prints one RESULT line. With `KAFKIT_BENCH_CHILD_WRAPPER` set (say to
/// `heaptrack`), the child runs under that program: `wrapper <this program> args...`.
fn run_child(client: Client, args: &[String]) -> Result<RunResult, String> {
    if external::is_external(client) {
        return external::run(client, args);
    }
    RunResult::parse(&child_result_line(client.name(), args)?)
}

/// Runs this program with `args` in a child process (under `KAFKIT_BENCH_CHILD_WRAPPER` when
/// set, see [`run_child`]) and returns the RESULT line it printed; `name` names the run in
/// errors.
fn child_result_line(name: &str, args: &[String]) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    exe_result_line(&exe, name, args)
}

/// Runs `exe` with `args` (under `KAFKIT_BENCH_CHILD_WRAPPER` when set: `wrapper exe args...`)
/// and returns the RESULT line it printed; `name` names the run in errors. `meter` runs other
/// builds of this program with it. A child that has not ended after [`child_timeout`] is
/// killed and the run fails (a peer hung after its window must not hold the bench).
pub(crate) fn exe_result_line(
    exe: &std::path::Path,
    name: &str,
    args: &[String],
) -> Result<String, String> {
    exe_result_line_within(exe, name, args, child_timeout(), RESULT_PREFIX)
}

/// [`exe_result_line`] for a line starting with `prefix` (a group run's `GROUP `).
pub(crate) fn exe_line_with(
    exe: &std::path::Path,
    name: &str,
    args: &[String],
    prefix: &str,
) -> Result<String, String> {
    exe_result_line_within(exe, name, args, child_timeout(), prefix)
}

/// [`exe_result_line`] with the time limit `limit`, for the line starting with `prefix`.
fn exe_result_line_within(
    exe: &std::path::Path,
    name: &str,
    args: &[String],
    limit: Duration,
    prefix: &str,
) -> Result<String, String> {
    let mut command = match std::env::var_os("KAFKIT_BENCH_CHILD_WRAPPER") {
        Some(wrapper) => {
            let mut c = Command::new(wrapper);
            c.arg(exe);
            c
        }
        None => Command::new(exe),
    };
    let mut child = command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("start the {name} run: {e}"))?;
    let mut pipe = child.stdout.take().ok_or("no stdout pipe")?;
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut pipe, &mut out);
        out
    });
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the {name} run did not end within {limit:?}: killed"
                ));
            }
            Err(e) => return Err(format!("wait for the {name} run: {e}")),
        }
    };
    let stdout = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(match status.code() {
            Some(code) => format!("the {name} run failed (exit code {code})"),
            None => format!("the {name} run failed ({status})"),
        });
    }
    stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .map(str::to_string)
        .ok_or_else(|| format!("the {name} run printed no result"))
}

/// How long a child run may take: `KAFKIT_BENCH_CHILD_TIMEOUT` seconds, default 600.
fn child_timeout() -> Duration {
    std::env::var("KAFKIT_BENCH_CHILD_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(600), Duration::from_secs)
}

/// The sum over the topic's partitions of their `spec` offsets (ListOffsets to each partition's
/// leader): with `Latest` the end offsets, with `Earliest` the log start offsets.
fn offsets_sum(
    runtime: &tokio::runtime::Runtime,
    bootstrap: &str,
    topic: &str,
    spec: kafkit::OffsetSpec,
) -> Result<u64, String> {
    use kafkit::{Dialer, IsolationLevel};
    runtime.block_on(async {
        let dialer = Dialer::builder().client_id("kafkit-bench-check").build();
        let first = bootstrap.split(',').next().unwrap_or_default();
        let conn = dialer
            .dial(first)
            .await
            .map_err(|e| format!("dial {first}: {e}"))?;
        let md = conn
            .metadata(Some(&[topic]))
            .await
            .map_err(|e| format!("metadata: {e}"))?;
        let tm = md
            .topic(topic)
            .ok_or_else(|| format!("{topic} is not in metadata"))?;
        let mut total = 0u64;
        for b in &md.brokers {
            let parts: Vec<(&str, i32, kafkit::OffsetSpec)> = tm
                .partitions
                .iter()
                .filter(|p| p.leader_id == b.node_id)
                .map(|p| (topic, p.partition, spec))
                .collect();
            if parts.is_empty() {
                continue;
            }
            let leader = dialer
                .dial(&b.addr())
                .await
                .map_err(|e| format!("dial {}: {e}", b.addr()))?;
            let listed = leader
                .list_offsets(&parts, IsolationLevel::ReadUncommitted)
                .await
                .map_err(|e| format!("ListOffsets: {e}"))?;
            for l in listed {
                if l.error_code != kafkit::ErrorCode::NONE {
                    return Err(format!(
                        "{spec:?} offset of {}/{}: {:?}",
                        l.topic, l.partition, l.error_code
                    ));
                }
                total += u64::try_from(l.offset).unwrap_or(0);
            }
        }
        Ok(total)
    })
}

/// Reads the topic from the start with librdkafka's consumer and counts its records: until
/// `expected` have come and then 1 s more (to see any extra), or until none came for 10 s.
fn count_records(w: &Workload, expected: u64) -> Result<u64, String> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{Offset, TopicPartitionList};
    use std::time::Instant;

    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &w.bootstrap)
        .set("group.id", "kafkit-bench-check")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("fetch.wait.max.ms", "100")
        .create()
        .map_err(|e| format!("rdkafka consumer: {e}"))?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..w.partitions {
        tpl.add_partition_offset(&w.topic, p, Offset::Beginning)
            .map_err(|e| format!("assign: {e}"))?;
    }
    consumer.assign(&tpl).map_err(|e| format!("assign: {e}"))?;
    let mut count = 0u64;
    let mut last = Instant::now();
    let mut complete_at = None;
    loop {
        let idle = last.elapsed();
        if idle > Duration::from_secs(10)
            || complete_at.is_some_and(|t: Instant| t.elapsed() > Duration::from_secs(1))
        {
            return Ok(count);
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(_)) => {
                count += 1;
                last = Instant::now();
                if count == expected {
                    complete_at = Some(last);
                }
            }
            Some(Err(e)) => return Err(format!("consume {}: {e}", w.topic)),
            None => {}
        }
    }
}

/// Prints the Markdown table of `rows` to stdout.
fn print_table(args: &ProducerArgs, rows: &[Row]) {
    let cmd: Vec<String> = std::env::args().skip(1).collect();
    println!("Command: `kafkit-bench {}`", cmd.join(" "));
    let s = &args.settings;
    println!(
        "Settings (every client): value {} bytes, acks={}, compression {}, idempotence {}, \
         linger {} ms, batch {} bytes / {} records, {} in flight per connection, \
         buffer {} bytes / {} records; each client sends from {} sender(s) (ours: tokio tasks \
         sharing one Writer; librdkafka: threads sharing one producer), ours with {} ({}).",
        s.value_size,
        s.acks.name(),
        s.compression.name(),
        if s.idempotence { "on" } else { "off" },
        s.linger_ms,
        s.batch_size,
        s.batch_max_records,
        s.max_in_flight,
        s.buffer_memory,
        s.max_buffered_records,
        task_list(&args.tasks),
        match (s.futures, s.owned) {
            (true, true) => "send (each future dropped)",
            (true, false) => "send_ref (each future dropped)",
            (false, true) => "send_detached",
            (false, false) => "send_detached_ref",
        },
        if s.owned {
            "a ProducerRecord per record, its value a Bytes clone"
        } else {
            "the value lent and copied, as librdkafka is lent it"
        }
    );
    if rows.iter().any(|r| r.case == Case::Txn) {
        println!(
            "The txn case: transactional producers (acks=all, idempotence on), a commit every {} \
             records, the time including every commit.",
            args.txn_records.max(1)
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!(
        "Machine: {cores} cores; load average before the table: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!();
    // A column of task counts only when the run had several (the one-count table is unchanged).
    let by_tasks = args.tasks.len() > 1;
    let (tasks_head, tasks_align) = if by_tasks {
        (" tasks |", " ---: |")
    } else {
        ("", "")
    };
    println!(
        "| case | broker | client |{tasks_head} partitions | records | time (s) | records/s | MB/s | CPU s (user + sys) | CPU µs / record | Produce requests | allocs / record | alloc bytes / record |"
    );
    println!(
        "| --- | --- | --- |{tasks_align} ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for row in rows {
        let tasks = if by_tasks {
            format!(" {} |", row.tasks)
        } else {
            String::new()
        };
        let head = format!(
            "| {} | {} | {} |{tasks} {} | {} |",
            row.case.name(),
            row.broker,
            row.client.name(),
            row.partitions,
            row.records
        );
        match &row.result {
            Ok(r) => {
                let secs = r.wall.as_secs_f64().max(1e-9);
                let cpu = r.cpu.user + r.cpu.system;
                let failed = if r.failed > 0 {
                    format!(
                        " ({} failed: {})",
                        r.failed,
                        r.first_error.as_deref().unwrap_or("?")
                    )
                } else {
                    String::new()
                };
                let (allocs, alloc_bytes) = match &r.allocated {
                    Some((a, n)) if *n > 0 => (
                        format!("{:.3}", a.count as f64 / *n as f64),
                        format!("{:.1}", a.bytes as f64 / *n as f64),
                    ),
                    // librdkafka allocates with C's malloc, which the counter does not see.
                    _ => ("n/a".to_string(), "n/a".to_string()),
                };
                println!(
                    "{head} {:.2}{failed} | {:.0} | {:.1} | {:.2} ({:.2} + {:.2}) | {:.2} | {} | {allocs} | {alloc_bytes} |",
                    secs,
                    r.delivered as f64 / secs,
                    (r.delivered as f64 * s.value_size as f64) / secs / 1e6,
                    cpu.as_secs_f64(),
                    r.cpu.user.as_secs_f64(),
                    r.cpu.system.as_secs_f64(),
                    cpu.as_secs_f64() * 1e6 / (r.delivered.max(1) as f64),
                    r.requests
                        .map_or_else(|| "?".to_string(), |n| n.to_string()),
                );
            }
            Err(e) => println!("{head} failed: {} | | | | | | | |", e.replace('|', "/")),
        }
    }
}

/// The producer's words in the scaling table and charts.
const SENDING: scaling::Words = scaling::Words {
    verb: "sending",
    sharing: "ours: tokio tasks sharing one Writer; librdkafka: threads sharing one producer",
    file: "producer",
    title: "Producer",
    failed: "failed",
    axis: "sending tasks / threads (log scale)",
};

/// The runs of each case (a case and its partition count), in run order, for the scaling table
/// and charts.
fn case_runs(rows: &[Row]) -> Vec<scaling::CaseRuns> {
    let mut runs: Vec<(&Row, scaling::CaseRuns)> = Vec::new();
    for row in rows {
        let same = |r: &Row| {
            r.case == row.case && r.partitions == row.partitions && r.records == row.records
        };
        let entry = scaling::Entry {
            client: row.client,
            tasks: row.tasks,
            outcome: scaling::Outcome::of(&row.result),
        };
        match runs.iter_mut().find(|(first, _)| same(first)) {
            Some((_, run)) => run.entries.push(entry),
            None => runs.push((
                row,
                scaling::CaseRuns {
                    heading: format!(
                        "case {}, {}, {} partitions, {} records",
                        row.case.name(),
                        row.broker,
                        row.partitions,
                        row.records
                    ),
                    legend: format!("{} {}", row.case.name(), row.partitions),
                    title: format!("{} ({} partitions)", row.case.name(), row.partitions),
                    entries: vec![entry],
                },
            )),
        }
    }
    runs.into_iter().map(|(_, run)| run).collect()
}

/// `1,2,4`: the task counts as given.
fn task_list(tasks: &[u64]) -> String {
    tasks
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Writes the charts of `rows` into `dir`: records/s and CPU µs per record against the
/// partition count, one line per client and broker (the runs of the first task count in
/// `tasks`); with several task counts also both against the task count, one line per client (and
/// case run, when several had more than one task count).
fn write_charts(dir: &std::path::Path, tasks: &[u64], rows: &[Row]) -> Result<(), String> {
    let first_tasks = tasks.first().copied().unwrap_or(1);
    let (mut rate, mut cpu) = (Vec::new(), Vec::new());
    for row in rows.iter().filter(|r| r.tasks == first_tasks) {
        let broker = match row.case {
            Case::Tansu => "tansu",
            Case::Kafka | Case::KafkaTxn => "kafka",
            Case::Mock | Case::Wide | Case::Txn => "mock",
        };
        let name = format!("{}, {broker}", scaling::who(row.client));
        let rates = row.result.as_ref().ok().and_then(scaling::rates);
        scaling::add_point(
            &mut rate,
            &mut cpu,
            &name,
            row.client,
            f64::from(row.partitions),
            rates,
        );
    }
    let load = scaling::load_average();
    let note = if tasks.len() > 1 {
        format!("{first_tasks} sending task(s); {load}")
    } else {
        load
    };
    let mut charts = vec![
        scaling::Chart {
            file: "producer-records-per-second.svg".to_string(),
            title: "Producer throughput".to_string(),
            x_label: "partitions (log scale)",
            y_label: "records/s",
            note: note.clone(),
            series: rate,
            ticks: Vec::new(),
        },
        scaling::Chart {
            file: "producer-cpu-per-record.svg".to_string(),
            title: "Producer CPU per record".to_string(),
            x_label: "partitions (log scale)",
            y_label: "CPU µs / record",
            note,
            series: cpu,
            ticks: Vec::new(),
        },
    ];
    charts.extend(scaling::task_charts(&SENDING, tasks, &case_runs(rows)));
    scaling::write_charts(dir, charts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_leaves_a_marker_in_each_partition_it_wrote() {
        // 3 transactions of 10 records over 4 partitions: 4 markers each.
        assert_eq!(commit_markers(30, 10, 4), 12);
        // The last transaction has 2 records: 2 partitions.
        assert_eq!(commit_markers(22, 10, 4), 10);
        // More partitions than records per transaction.
        assert_eq!(commit_markers(20, 10, 48), 20);
        assert_eq!(commit_markers(0, 10, 4), 0);
    }

    #[test]
    fn a_child_run_says_its_exit_code_and_is_killed_past_its_limit() {
        let sh = std::path::Path::new("/bin/sh");
        let run = |script: &str, limit: Duration| {
            exe_result_line_within(
                sh,
                "sh",
                &["-c".to_string(), script.to_string()],
                limit,
                RESULT_PREFIX,
            )
        };
        let e = run("exit 3", Duration::from_secs(10)).expect_err("exit 3");
        assert!(e.ends_with("(exit code 3)"), "{e}");
        let e = run("exit 30", Duration::from_secs(10)).expect_err("exit 30");
        assert!(!e.ends_with("(exit code 3)"), "{e}");
        let e = run("sleep 5", Duration::from_millis(200)).expect_err("killed");
        assert!(e.contains("killed"), "{e}");
        let ok = run(
            "echo noise; echo 'RESULT delivered=1'",
            Duration::from_secs(10),
        );
        assert_eq!(ok.as_deref(), Ok("RESULT delivered=1"));
    }

    #[test]
    fn a_result_line_reads_back_with_its_version() {
        let r = RunResult {
            delivered: 5,
            version: Some("franz-go@v1.22.3".into()),
            first_error: Some("one bad".into()),
            ..RunResult::default()
        };
        let back = RunResult::parse(&r.to_line()).expect("parses");
        assert_eq!(back.version.as_deref(), Some("franz-go@v1.22.3"));
        assert_eq!(back.first_error.as_deref(), Some("one bad"));
        assert_eq!(back.delivered, 5);
    }

    #[test]
    fn every_client_has_a_name_the_command_line_takes() {
        for c in [
            Client::Ours,
            Client::Rdkafka,
            Client::Krafka,
            Client::FranzGo,
            Client::KafkaGo,
            Client::Java,
        ] {
            assert_eq!(Client::from_str(c.name(), false), Ok(c));
        }
    }
}
