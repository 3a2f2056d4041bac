//! krafka (a pure-Rust Kafka client on crates.io) as a peer of kafkit-bench: `kafkit-krafka-peer
//! produce|consume|group --name value ...` runs one workload of the bench's peer contract
//! (peers/README.md) and prints one `RESULT` (`GROUP`) line on stdout (everything else goes to
//! stderr).
//!
//! - `produce`: record i (no key, a value of V bytes where byte j is `b'a' + j % 26`) to
//!   partition `i % N` through `Producer::enqueue`, whose delivery handles a second task awaits
//!   and counts; `flush` at the end. With `--txn-records K`, a `TransactionalProducer`
//!   (`"bench-" + topic`) sends K records per transaction: begin, enqueue K, commit. The window
//!   runs from just before the first enqueue to the last acknowledgement.
//! - `consume`: a consumer without a group, every partition assigned and sought to offset 0,
//!   polled until R records came back, each checked (its offset the previous one of its
//!   partition + 1, its value the expected bytes). The window runs from the assign to the poll
//!   that returned the last record.
//! - `group`: `--members` krafka group consumers (classic protocol, each with its own `Kafka`
//!   connections, `group.id` G, the `--assignor` as its only assignment strategy, auto-commit
//!   on with krafka's default 5 s, `auto_offset_reset` earliest), all made and subscribed
//!   before any polls (krafka joins the group in `poll`), each then polled by a task of its
//!   own. A rebalance listener tells a shared `Progress` (the bench's own, from
//!   bench/src/consumer/group.rs) what each member owns; every record handed out is checked
//!   and counted by its number. Once `--leave-at` of the records were handed out, the last
//!   member leaves with `close` (commit, revoke, LeaveGroup). The run ends when every record
//!   came or none new for 20 s; every member is closed, and the `GROUP` line gives the times
//!   from the members' creation and the CPU time of the whole run.
//!
//! `requests`: `-` for `produce` (krafka counts acknowledged batches, not Produce requests);
//! the growth of `ConsumerMetrics::fetches` (Fetch requests sent) for `consume`.
//!
//! Exit code 0 once the run happened (failed records included, a `group` run that stalled too),
//! 2 when it could not (bad flags, no broker, no topic, a group member that cannot be made),
//! with the reason on stderr.

use std::collections::{BTreeSet, HashMap};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use krafka::consumer::{
    AutoOffsetReset, Consumer, ConsumerBuilder, ConsumerRebalanceListener,
    PartitionAssignmentStrategy, TopicPartition,
};
use krafka::producer::{Acks, DeliveryHandle, Producer, ProducerBuilder, TransactionalProducer};
use krafka::{Compression, Kafka, KafkaBuilder, Record};
use tokio::sync::mpsc;

/// The krafka release this peer is built on (`Cargo.toml` pins it).
const VERSION: &str = "krafka@0.28.1";

/// The contract's give-up time: no record for this long ends a consume run.
const STALL: Duration = Duration::from_secs(20);

/// krafka's default request timeout, which `delivery_timeout` must cover with `linger`.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Flags the `produce` workload applies.
const PRODUCE_FLAGS: &[&str] = &[
    "client",
    "bootstrap",
    "topic",
    "partitions",
    "records",
    "txn-records",
    "value-size",
    "linger-ms",
    "batch-size",
    "max-in-flight",
    "buffer-memory",
    "delivery-timeout-ms",
    "compression",
    "tasks",
    "acks",
    "idempotence",
];
/// `produce` flags krafka has no setting for.
const PRODUCE_IGNORED: &[&str] = &["batch-max-records", "max-buffered-records"];

/// Flags the `consume` workload applies.
const CONSUME_FLAGS: &[&str] = &[
    "client",
    "bootstrap",
    "topic",
    "partitions",
    "records",
    "value-size",
    "tasks",
    "fetch-min-bytes",
    "fetch-max-wait-ms",
    "max-partition-fetch-bytes",
    "fetch-max-bytes",
    "queued-max-kbytes",
];
/// `consume` flags krafka has no setting for (`check-crcs`: krafka checks every batch's CRC).
const CONSUME_IGNORED: &[&str] = &[
    "check-crcs",
    "rdkafka-queued-min-messages",
    "rdkafka-fetch-queue-backoff-ms",
];

/// Flags the `group` workload applies (`tasks`: each member is one consumer; ignored).
const GROUP_FLAGS: &[&str] = &[
    "client",
    "bootstrap",
    "topic",
    "partitions",
    "records",
    "value-size",
    "tasks",
    "fetch-min-bytes",
    "fetch-max-wait-ms",
    "max-partition-fetch-bytes",
    "fetch-max-bytes",
    "queued-max-kbytes",
    "group-id",
    "members",
    "assignor",
    "session-timeout-ms",
    "heartbeat-interval-ms",
    "leave-at",
];

/// A run that could not happen; the text goes to stderr and the exit code is 2.
type CannotRun = String;

/// What the RESULT line reports.
struct Outcome {
    delivered: u64,
    failed: u64,
    wall: Duration,
    cpu: (u64, u64),
    requests: Option<u64>,
    bytes: u64,
    error: Option<String>,
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("krafka peer: tokio runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async {
        let Some(command) = argv.first() else {
            return Err(
                "usage: kafkit-krafka-peer produce|consume|group --name value ...".to_owned(),
            );
        };
        let args = &argv[1..];
        match command.as_str() {
            "produce" => Ok(produce(Args::parse(args, PRODUCE_FLAGS, PRODUCE_IGNORED)?)
                .await?
                .line()),
            "consume" => Ok(consume(Args::parse(args, CONSUME_FLAGS, CONSUME_IGNORED)?)
                .await?
                .line()),
            "group" => group(Args::parse(args, GROUP_FLAGS, CONSUME_IGNORED)?).await,
            other => Err(format!(
                "unknown command {other}: produce, consume or group"
            )),
        }
    });
    match result {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("krafka peer: {e}");
            ExitCode::from(2)
        }
    }
}

impl Outcome {
    fn line(&self) -> String {
        let requests = self
            .requests
            .map_or_else(|| "-".to_owned(), |r| r.to_string());
        let mut line = format!(
            "RESULT delivered={} failed={} wall_us={} user_us={} sys_us={} requests={requests} \
             bytes={} version={VERSION}",
            self.delivered,
            self.failed,
            self.wall.as_micros(),
            self.cpu.0,
            self.cpu.1,
            self.bytes,
        );
        if let Some(e) = &self.error {
            line.push_str(" error=");
            line.push_str(&e.replace(['\n', '\r'], " "));
        }
        line
    }
}

/// The flags of one run: `--name value`, and `--futures` / `--owned` without a value.
struct Args(HashMap<String, String>);

impl Args {
    fn parse(argv: &[String], known: &[&str], ignored: &[&str]) -> Result<Self, CannotRun> {
        let mut values = HashMap::new();
        let mut unapplied = BTreeSet::new();
        let mut it = argv.iter();
        while let Some(arg) = it.next() {
            let Some(name) = arg.strip_prefix("--") else {
                return Err(format!("expected --name value at {arg}"));
            };
            if name == "futures" || name == "owned" {
                continue;
            }
            if !known.contains(&name) && !ignored.contains(&name) {
                return Err(format!("unknown flag --{name}"));
            }
            let value = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
            if ignored.contains(&name) {
                unapplied.insert(name.to_owned());
            }
            values.insert(name.to_owned(), value.clone());
        }
        for name in unapplied {
            eprintln!("krafka peer: --{name} has no krafka setting; ignored");
        }
        Ok(Self(values))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    fn need(&self, name: &str) -> Result<&str, CannotRun> {
        self.get(name)
            .ok_or_else(|| format!("--{name} is required"))
    }

    fn num<T: std::str::FromStr>(&self, name: &str, otherwise: T) -> Result<T, CannotRun> {
        match self.get(name) {
            None => Ok(otherwise),
            Some(v) => v.parse().map_err(|_| format!("--{name} {v}: not a number")),
        }
    }

    fn bool(&self, name: &str, otherwise: bool) -> Result<bool, CannotRun> {
        match self.get(name) {
            None => Ok(otherwise),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(v) => Err(format!("--{name} {v}: true or false")),
        }
    }
}

/// Record value: `size` bytes, byte j is `b'a' + j % 26`.
fn value(size: usize) -> Bytes {
    (0..size).map(|j| b'a' + (j % 26) as u8).collect()
}

/// This process's user and system CPU time in microseconds, every thread
/// (`getrusage(RUSAGE_SELF)`).
fn cpu_us() -> (u64, u64) {
    // SAFETY: getrusage writes one `rusage` into the zeroed struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return (0, 0);
    }
    let us = |t: libc::timeval| {
        u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000 + u64::try_from(t.tv_usec).unwrap_or(0)
    };
    (us(usage.ru_utime), us(usage.ru_stime))
}

fn cpu_since(before: (u64, u64)) -> (u64, u64) {
    let after = cpu_us();
    (
        after.0.saturating_sub(before.0),
        after.1.saturating_sub(before.1),
    )
}

/// Connects, so an unreachable bootstrap ends the run before it starts.
async fn connect(builder: KafkaBuilder) -> Result<Kafka, CannotRun> {
    builder
        .client_id("kafkit-bench-krafka")
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))
}

/// Checks that the topic has at least `partitions` partitions.
fn enough_partitions(topic: &str, have: usize, partitions: usize) -> Result<(), CannotRun> {
    if have < partitions {
        return Err(format!(
            "topic {topic} has {have} partitions, fewer than --partitions {partitions}"
        ));
    }
    Ok(())
}

// ----- produce -------------------------------------------------------------------------------

/// The `produce` settings after the checks.
struct ProduceRun {
    topic: String,
    partitions: i32,
    records: u64,
    txn_records: u64,
    value: Bytes,
    tasks: u64,
}

async fn produce(a: Args) -> Result<Outcome, CannotRun> {
    let run = ProduceRun {
        topic: a.need("topic")?.to_owned(),
        partitions: a.num("partitions", 0)?,
        records: a.num("records", 0)?,
        txn_records: a.num("txn-records", 0)?,
        value: value(a.num("value-size", 100)?),
        tasks: a.num("tasks", 1)?,
    };
    if run.partitions <= 0 || run.tasks == 0 {
        return Err("--partitions and --tasks must be > 0".to_owned());
    }
    let txn = run.txn_records > 0;
    let (acks, idempotent) = if txn {
        (Acks::All, true)
    } else {
        let acks = match a.get("acks").unwrap_or("1") {
            "0" => Acks::None,
            "1" => Acks::Leader,
            "all" | "-1" => Acks::All,
            other => return Err(format!("--acks {other}: 0, 1 or all")),
        };
        (acks, a.bool("idempotence", false)?)
    };
    let compression = match a.get("compression").unwrap_or("none") {
        "none" => Compression::None,
        "gzip" => Compression::Gzip,
        "snappy" => Compression::Snappy,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        other => {
            return Err(format!(
                "--compression {other}: none, gzip, snappy, lz4 or zstd"
            ));
        }
    };
    let linger = Duration::from_millis(a.num("linger-ms", 5)?);

    let mut kafka = Kafka::builder(a.need("bootstrap")?);
    if let Some(n) = a.get("max-in-flight") {
        // The transport's per-connection cap; the producer keeps at most 5 Produce requests
        // in flight per broker on its own (one batch per partition), whatever this says.
        kafka = kafka.max_in_flight_requests(a.num("max-in-flight", 5)?);
        if n.parse::<usize>().is_ok_and(|n| n > 5) {
            eprintln!(
                "krafka peer: --max-in-flight {n}: krafka's producer sends at most 5 requests \
                 per broker"
            );
        }
    }
    let mut request_timeout = REQUEST_TIMEOUT;
    let mut delivery = None;
    if a.get("delivery-timeout-ms").is_some() {
        // krafka, like Java, rejects delivery_timeout < linger + request_timeout: a shorter
        // delivery timeout shortens the request timeout (down to 1 s), and below that the
        // delivery timeout grows to fit.
        let mut d = Duration::from_millis(a.num("delivery-timeout-ms", 120_000)?);
        if d < linger + request_timeout {
            request_timeout = d.saturating_sub(linger).max(Duration::from_secs(1));
            d = d.max(linger + request_timeout);
            eprintln!(
                "krafka peer: delivery_timeout must be >= linger + request_timeout: runs \
                 delivery_timeout={d:?} request_timeout={request_timeout:?}"
            );
        }
        delivery = Some(d);
    }
    kafka = kafka.request_timeout(request_timeout);
    if request_timeout < Duration::from_secs(10) {
        kafka = kafka.connect_timeout(request_timeout);
    }
    let kafka = connect(kafka).await?;

    let mut builder = kafka
        .producer()
        .acks(acks)
        .idempotent(idempotent)
        .compression(compression)
        .linger(linger);
    if a.get("batch-size").is_some() {
        builder = builder.batch_size(a.num("batch-size", 16_384)?);
    }
    if a.get("buffer-memory").is_some() {
        builder = builder.buffer_memory(a.num("buffer-memory", 32 << 20)?);
    }
    if let Some(d) = delivery {
        builder = builder.delivery_timeout(d);
    }
    if txn {
        if run.tasks > 1 {
            eprintln!(
                "krafka peer: --tasks {} with transactions: runs 1",
                run.tasks
            );
        }
        produce_txn(builder, &run).await
    } else {
        produce_plain(builder, run).await
    }
}

/// The acknowledgement count of a plain run: a task awaits every delivery handle in enqueue
/// order, so it ends with the last acknowledgement.
#[derive(Default)]
struct Acked {
    delivered: u64,
    failed: u64,
    error: Option<String>,
}

impl Acked {
    fn fail(&mut self, error: impl std::fmt::Display) {
        self.failed += 1;
        if self.error.is_none() {
            self.error = Some(error.to_string());
        }
    }

    fn settle(&mut self, outcome: krafka::Result<krafka::producer::RecordMetadata>) {
        match outcome {
            Ok(_) => self.delivered += 1,
            Err(e) => self.fail(e),
        }
    }
}

async fn produce_plain(builder: ProducerBuilder, run: ProduceRun) -> Result<Outcome, CannotRun> {
    let producer = Arc::new(
        builder
            .build()
            .await
            .map_err(|e| format!("producer: {e}"))?,
    );
    let have = producer
        .partitions_for(&run.topic)
        .await
        .map_err(|e| format!("metadata of {}: {e}", run.topic))?
        .len();
    enough_partitions(&run.topic, have, run.partitions as usize)?;

    let (handles, mut settled) = mpsc::unbounded_channel::<DeliveryHandle>();
    let collector = tokio::spawn(async move {
        let mut acked = Acked::default();
        while let Some(handle) = settled.recv().await {
            acked.settle(handle.await);
        }
        acked
    });
    let run = Arc::new(run);
    let cpu0 = cpu_us();
    let t0 = Instant::now();
    let mut senders = Vec::new();
    for task in 0..run.tasks {
        let (producer, run, handles) = (Arc::clone(&producer), Arc::clone(&run), handles.clone());
        senders.push(tokio::spawn(async move {
            send_slice(&producer, &run, task, &handles).await
        }));
    }
    drop(handles);
    let mut acked = Acked::default();
    for sender in senders {
        match sender.await {
            Ok(refused) => {
                acked.failed += refused.failed;
                acked.error = acked.error.or(refused.error);
            }
            Err(e) => acked.fail(format!("sender task: {e}")),
        }
    }
    let _ = producer.flush().await;
    let settled = collector
        .await
        .map_err(|e| format!("acknowledgement task: {e}"))?;
    let wall = t0.elapsed();
    let cpu = cpu_since(cpu0);
    let _ = producer
        .close_with(krafka::CloseOptions::new().timeout(Duration::from_secs(10)))
        .await;
    Ok(Outcome {
        delivered: settled.delivered,
        failed: settled.failed + acked.failed,
        wall,
        cpu,
        requests: None,
        bytes: 0,
        error: acked.error.or(settled.error),
    })
}

/// Enqueues records `task, task + tasks, ...`; returns the refused ones.
async fn send_slice(
    producer: &Producer,
    run: &ProduceRun,
    task: u64,
    handles: &mpsc::UnboundedSender<DeliveryHandle>,
) -> Acked {
    let mut refused = Acked::default();
    let mut i = task;
    while i < run.records {
        let record = Record::new(run.topic.as_str(), run.value.clone())
            .partition((i % run.partitions as u64) as i32);
        match producer.enqueue(record).await {
            Ok(handle) => {
                let _ = handles.send(handle);
            }
            Err(e) => refused.fail(e),
        }
        i += run.tasks;
    }
    refused
}

async fn produce_txn(builder: ProducerBuilder, run: &ProduceRun) -> Result<Outcome, CannotRun> {
    let producer = builder
        .build_transactional(format!("bench-{}", run.topic))
        .await
        .map_err(|e| format!("transactional producer: {e}"))?;
    let have = producer
        .partitions_for(&run.topic)
        .await
        .map_err(|e| format!("metadata of {}: {e}", run.topic))?
        .len();
    enough_partitions(&run.topic, have, run.partitions as usize)?;

    let mut acked = Acked::default();
    let cpu0 = cpu_us();
    let t0 = Instant::now();
    let mut from = 0;
    while from < run.records {
        let to = run.records.min(from + run.txn_records);
        if let Err(fatal) = transaction(&producer, run, from, to, &mut acked).await {
            acked.failed += run.records - to;
            acked.error.get_or_insert(fatal);
            break;
        }
        from = to;
    }
    let wall = t0.elapsed();
    let cpu = cpu_since(cpu0);
    let _ = producer
        .close_with(krafka::CloseOptions::new().timeout(Duration::from_secs(10)))
        .await;
    Ok(Outcome {
        delivered: acked.delivered,
        failed: acked.failed,
        wall,
        cpu,
        requests: None,
        bytes: 0,
        error: acked.error,
    })
}

/// One transaction of records `from..to`: begin, enqueue, commit, then count the handles. A
/// commit that fails counts the transaction's records as failed and aborts; `Err` when even
/// that fails (the producer cannot go on).
async fn transaction(
    producer: &TransactionalProducer,
    run: &ProduceRun,
    from: u64,
    to: u64,
    acked: &mut Acked,
) -> Result<(), String> {
    let mut handles = Vec::with_capacity((to - from) as usize);
    let mut committed = producer.begin();
    if committed.is_ok() {
        for i in from..to {
            let record = Record::new(run.topic.as_str(), run.value.clone())
                .partition((i % run.partitions as u64) as i32);
            match producer.enqueue(record).await {
                Ok(handle) => handles.push(handle),
                Err(e) => acked.fail(e),
            }
        }
        committed = producer.commit().await;
    }
    let mut written = Acked::default();
    for handle in handles {
        written.settle(handle.await);
    }
    if let Some(e) = written.error.take() {
        acked.error.get_or_insert(e);
    }
    match committed {
        Ok(()) => {
            acked.delivered += written.delivered;
            acked.failed += written.failed;
            Ok(())
        }
        Err(e) => {
            // Nothing of an aborted transaction is delivered.
            acked.failed += written.delivered + written.failed;
            acked
                .error
                .get_or_insert_with(|| format!("commit of records {from}..{to}: {e}"));
            producer
                .abort()
                .await
                .map_err(|abort| format!("abort after a failed commit: {abort}"))
        }
    }
}

// ----- consume -------------------------------------------------------------------------------

/// The fetch flags of `consume` and `group`, as krafka settings (only those given are set).
struct FetchSettings {
    min_bytes: Option<i32>,
    max_wait: Option<Duration>,
    max_partition_bytes: Option<i32>,
    max_bytes: Option<i32>,
    /// `--queued-max-kbytes` as a record cap.
    max_buffered_records: Option<i32>,
}

impl FetchSettings {
    fn from_args(a: &Args, value_size: usize) -> Result<Self, CannotRun> {
        let given = |name: &str| a.get(name).is_some();
        let mut max_buffered_records = None;
        if given("queued-max-kbytes") {
            // krafka caps its fetched-but-not-polled buffer in records, not bytes: the records
            // of this value size that fit the byte budget (at least one poll's worth).
            let kbytes: u64 = a.num("queued-max-kbytes", 0)?;
            let cap = (kbytes * 1024 / value_size.max(1) as u64).clamp(10_000, i32::MAX as u64);
            eprintln!(
                "krafka peer: --queued-max-kbytes {kbytes}: max_buffered_records {cap} (krafka \
                 counts records)"
            );
            max_buffered_records = Some(cap as i32);
        }
        Ok(Self {
            min_bytes: given("fetch-min-bytes")
                .then(|| a.num("fetch-min-bytes", 1))
                .transpose()?,
            max_wait: given("fetch-max-wait-ms")
                .then(|| a.num("fetch-max-wait-ms", 500).map(Duration::from_millis))
                .transpose()?,
            max_partition_bytes: given("max-partition-fetch-bytes")
                .then(|| a.num("max-partition-fetch-bytes", 1 << 20))
                .transpose()?,
            max_bytes: given("fetch-max-bytes")
                .then(|| a.num("fetch-max-bytes", 50 << 20))
                .transpose()?,
            max_buffered_records,
        })
    }

    /// `builder` with these settings and polls of up to 10 000 records.
    fn apply(&self, mut builder: ConsumerBuilder) -> ConsumerBuilder {
        builder = builder.max_poll_records(10_000);
        if let Some(b) = self.min_bytes {
            builder = builder.fetch_min_bytes(b);
        }
        if let Some(w) = self.max_wait {
            builder = builder.fetch_max_wait(w);
        }
        if let Some(b) = self.max_partition_bytes {
            builder = builder.max_partition_fetch_bytes(b);
        }
        if let Some(b) = self.max_bytes {
            builder = builder.fetch_max_bytes(b);
        }
        if let Some(r) = self.max_buffered_records {
            builder = builder.max_buffered_records(r);
        }
        builder
    }
}

async fn consume(a: Args) -> Result<Outcome, CannotRun> {
    let topic = a.need("topic")?.to_owned();
    let partitions: i32 = a.num("partitions", 0)?;
    let records: u64 = a.num("records", 0)?;
    let value_size: usize = a.num("value-size", 100)?;
    let tasks: u64 = a.num("tasks", 1)?;
    if partitions <= 0 || tasks == 0 {
        return Err("--partitions and --tasks must be > 0".to_owned());
    }
    if tasks > 1 {
        eprintln!("krafka peer: --tasks {tasks}: one consumer reads; runs 1");
    }
    let fetch = FetchSettings::from_args(&a, value_size)?;
    let kafka = connect(Kafka::builder(a.need("bootstrap")?)).await?;
    let builder = fetch.apply(
        kafka
            .consumer_without_group()
            .enable_auto_commit(false)
            .auto_offset_reset(AutoOffsetReset::Earliest),
    );
    let consumer = builder
        .build()
        .await
        .map_err(|e| format!("consumer: {e}"))?;
    let have = consumer
        .fetch_metadata(Some(&topic))
        .await
        .map_err(|e| format!("metadata of {topic}: {e}"))?
        .topics
        .first()
        .map_or(0, krafka::TopicInfo::partition_count);
    enough_partitions(&topic, have, partitions as usize)?;

    let expected = value(value_size);
    let n = partitions as usize;
    let holds: Vec<i64> = (0..n as u64)
        .map(|p| (records / n as u64 + u64::from(p < records % n as u64)) as i64)
        .collect();
    let mut next = vec![0i64; n];
    let (mut delivered, mut bad, mut came, mut bytes) = (0u64, 0u64, 0u64, 0u64);
    let mut error: Option<String> = None;

    let fetches0 = consumer.metrics().consumer.fetches;
    let cpu0 = cpu_us();
    let t0 = Instant::now();
    consumer
        .assign(&topic, (0..partitions).collect())
        .await
        .map_err(|e| format!("assign: {e}"))?;
    for p in 0..partitions {
        consumer
            .seek(&topic, p, 0)
            .await
            .map_err(|e| format!("seek: {e}"))?;
    }
    let mut last = t0;
    // CPU time and fetches as of the last record: a run that gives up after 20 s without one
    // reports its window without the wait.
    let (mut cpu, mut fetches1) = ((0, 0), fetches0);
    while came < records {
        let batch = match consumer.poll(Duration::from_millis(200)).await {
            Ok(batch) => batch,
            Err(e) => {
                error.get_or_insert_with(|| format!("poll: {e}"));
                Vec::new()
            }
        };
        let now = Instant::now();
        if batch.is_empty() {
            if now - last > STALL {
                error.get_or_insert_with(|| {
                    format!(
                        "no record for 20 s: {} of {records} missing",
                        records - came
                    )
                });
                break;
            }
            continue;
        }
        last = now;
        for r in batch {
            came += 1;
            let wrong = if r.partition < 0 || r.partition >= partitions {
                Some(format!(
                    "record from partition {} of {partitions}",
                    r.partition
                ))
            } else {
                let p = r.partition as usize;
                let expect = next[p];
                next[p] = r.offset + 1;
                if r.offset != expect || r.offset >= holds[p] {
                    Some(format!(
                        "partition {p}: offset {}, expected {expect} (holds {})",
                        r.offset, holds[p]
                    ))
                } else if r.value.as_deref() != Some(&expected[..]) {
                    Some(format!(
                        "partition {p} offset {}: value of {} is not the expected one",
                        r.offset,
                        r.value
                            .as_ref()
                            .map_or_else(|| "null".to_owned(), |v| format!("{} bytes", v.len()))
                    ))
                } else {
                    None
                }
            };
            match wrong {
                None => {
                    delivered += 1;
                    bytes += value_size as u64;
                }
                Some(w) => {
                    bad += 1;
                    error.get_or_insert(w);
                }
            }
        }
        cpu = cpu_since(cpu0);
        fetches1 = consumer.metrics().consumer.fetches;
    }
    let wall = last - t0;
    let requests = fetches1 - fetches0;
    let _ = consumer
        .close_with(krafka::CloseOptions::new().timeout(Duration::from_secs(5)))
        .await;
    Ok(Outcome {
        delivered,
        failed: bad + records.saturating_sub(came),
        wall,
        cpu,
        requests: Some(requests),
        bytes,
        error,
    })
}

// ----- group ---------------------------------------------------------------------------------

/// When the run's events happened, from the members' creation.
#[derive(Clone, Debug, Default)]
struct Timeline {
    /// Every member assigned, every partition owned once.
    assigned: Option<Duration>,
    /// The last member started to leave.
    leave: Option<Duration>,
    /// The remaining members own every partition.
    owned: Option<Duration>,
    /// ... and each has handed out a record since.
    resumed: Option<Duration>,
    /// The last record.
    done: Option<Duration>,
}

/// What the members of a group run share: their assignments, the per-record tally, the
/// timeline (the bench's own `Progress`, bench/src/consumer/group.rs, for krafka's members).
struct Progress {
    t0: Instant,
    partitions: i32,
    value: Bytes,
    leave_after: u64,
    /// Per member: the partitions it owns (from its rebalance listener).
    owned: Mutex<Vec<BTreeSet<i32>>>,
    /// Per member: whether it is still in the group.
    active: Mutex<Vec<bool>>,
    /// Per member, once the remaining members own everything: it handed out a record since.
    resumed: Mutex<Vec<bool>>,
    awaiting_resume: AtomicBool,
    timeline: Mutex<Timeline>,
    /// Per record number (`offset * partitions + partition`): how often it was handed out.
    seen: Vec<AtomicU8>,
    distinct: AtomicU64,
    delivered: AtomicU64,
    bad: AtomicU64,
    first_error: Mutex<Option<String>>,
    /// Set when the members should stop (every record read, or the stall).
    stop: AtomicBool,
    /// The first error a poll or a close returned (the run goes on; reported with the result).
    trouble: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Progress {
    fn new(run: &GroupRun) -> Self {
        let n = run.members;
        Self {
            t0: Instant::now(),
            partitions: run.partitions,
            value: value(run.value_size),
            leave_after: ((run.records as f64) * run.leave_at.clamp(0.0, 1.0)) as u64,
            owned: Mutex::new(vec![BTreeSet::new(); n]),
            active: Mutex::new(vec![true; n]),
            resumed: Mutex::new(vec![false; n]),
            awaiting_resume: AtomicBool::new(false),
            timeline: Mutex::new(Timeline::default()),
            seen: (0..run.records).map(|_| AtomicU8::new(0)).collect(),
            distinct: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            bad: AtomicU64::new(0),
            first_error: Mutex::new(None),
            stop: AtomicBool::new(false),
            trouble: Mutex::new(None),
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// A poll or close error: said on stderr, the first kept for the result.
    fn trouble(&self, what: String) {
        eprintln!("krafka peer: {what}");
        lock(&self.trouble).get_or_insert(what);
    }

    /// Waits until every record was handed out or nothing new came for [`STALL`] (looking
    /// every 10 ms); then tells the members to stop.
    ///
    /// Errors: the stall, said with the timeline so far.
    async fn wait(&self) -> Result<(), String> {
        let mut last = (self.distinct(), Instant::now());
        let outcome = loop {
            if self.finished() {
                break Ok(());
            }
            let d = self.distinct();
            if d != last.0 {
                last = (d, Instant::now());
            } else if last.1.elapsed() > STALL {
                break Err(format!(
                    "no new record for {STALL:?} after {d} of {} ({:?})",
                    self.records(),
                    lock(&self.timeline)
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        self.stop();
        outcome
    }

    fn records(&self) -> u64 {
        self.seen.len() as u64
    }

    fn distinct(&self) -> u64 {
        self.distinct.load(Ordering::Acquire)
    }

    /// Whether the last member should leave now (`member` is the last and the share is read).
    fn should_leave(&self, member: usize) -> bool {
        member + 1 == lock(&self.active).len() && self.distinct() >= self.leave_after
    }

    fn finished(&self) -> bool {
        self.distinct() >= self.records()
    }

    /// `member`'s listener was given these partitions.
    fn assigned(&self, member: usize, partitions: impl IntoIterator<Item = i32>) {
        if let Some(o) = lock(&self.owned).get_mut(member) {
            o.extend(partitions);
        }
        self.check_ownership();
    }

    /// `member`'s listener had these partitions revoked (or lost).
    fn revoked(&self, member: usize, partitions: impl IntoIterator<Item = i32>) {
        if let Some(o) = lock(&self.owned).get_mut(member) {
            for p in partitions {
                o.remove(&p);
            }
        }
    }

    /// The last member starts to leave (before its close).
    fn leaving(&self, member: usize) {
        if let Some(a) = lock(&self.active).get_mut(member) {
            *a = false;
        }
        lock(&self.timeline).leave = Some(self.t0.elapsed());
    }

    /// The timeline's `assigned` or `owned` when the active members own every partition,
    /// each once, and each owns some.
    fn check_ownership(&self) {
        let owned = lock(&self.owned);
        let active = lock(&self.active);
        let members: Vec<&BTreeSet<i32>> = owned
            .iter()
            .zip(active.iter())
            .filter(|(_, a)| **a)
            .map(|(o, _)| o)
            .collect();
        let total: usize = members.iter().map(|o| o.len()).sum();
        let union: BTreeSet<i32> = members.iter().flat_map(|o| o.iter().copied()).collect();
        let whole = members.iter().all(|o| !o.is_empty())
            && total == union.len()
            && union.len() == usize::try_from(self.partitions).unwrap_or(0);
        if !whole {
            return;
        }
        let now = self.t0.elapsed();
        let mut t = lock(&self.timeline);
        if t.assigned.is_none() {
            t.assigned = Some(now);
        } else if t.leave.is_some() && t.owned.is_none() {
            t.owned = Some(now);
            self.awaiting_resume.store(true, Ordering::Release);
        }
    }

    /// One record handed out to `member`: its value is checked and it is counted.
    fn record(&self, member: usize, partition: i32, offset: i64, value: Option<&[u8]>) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
        let index = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(partition).ok())
            .and_then(|(o, p)| {
                o.checked_mul(usize::try_from(self.partitions).ok()?)?
                    .checked_add(p)
            })
            .filter(|i| *i < self.seen.len() && partition < self.partitions);
        let Some(i) = index else {
            self.fail(format!(
                "partition {partition} offset {offset}: no such record"
            ));
            return;
        };
        if value != Some(&self.value[..]) {
            self.fail(format!(
                "partition {partition} offset {offset}: another value"
            ));
        }
        if self.seen[i].fetch_add(1, Ordering::AcqRel) == 0 {
            let d = self.distinct.fetch_add(1, Ordering::AcqRel) + 1;
            if d == self.records() {
                lock(&self.timeline).done = Some(self.t0.elapsed());
            }
        }
        if self.awaiting_resume.load(Ordering::Acquire) {
            self.note_resume(member);
        }
    }

    fn note_resume(&self, member: usize) {
        let active = lock(&self.active).clone();
        let mut resumed = lock(&self.resumed);
        if let Some(r) = resumed.get_mut(member) {
            *r = true;
        }
        if resumed.iter().zip(&active).all(|(r, a)| *r || !*a) {
            self.awaiting_resume.store(false, Ordering::Release);
            lock(&self.timeline)
                .resumed
                .get_or_insert(self.t0.elapsed());
        }
    }

    fn fail(&self, what: String) {
        self.bad.fetch_add(1, Ordering::Relaxed);
        lock(&self.first_error).get_or_insert(what);
    }

    /// The GROUP line: `stalled` is why the run ended early, if it did.
    fn line(&self, cpu: (u64, u64), stalled: Option<String>) -> String {
        let duplicates: u64 = self
            .seen
            .iter()
            .map(|n| u64::from(n.load(Ordering::Acquire).saturating_sub(1)))
            .sum();
        let missing = self.records() - self.distinct().min(self.records());
        let mut error = lock(&self.first_error).clone();
        if error.is_none() {
            error = stalled;
        }
        if missing > 0 && error.is_none() {
            error = Some(format!("{missing} records never handed out"));
        }
        let trouble = lock(&self.trouble).clone();
        error = match (error, trouble) {
            (Some(e), Some(t)) => Some(format!("{e}; first client error: {t}")),
            (e, t) => e.or(t),
        };
        let t = lock(&self.timeline).clone();
        let us =
            |d: Option<Duration>| d.map_or_else(|| "-".to_owned(), |d| d.as_micros().to_string());
        let mut line = format!(
            "GROUP assigned={} leave={} owned={} resumed={} done={} delivered={} duplicates={} \
             failed={} user_us={} sys_us={} version={VERSION}",
            us(t.assigned),
            us(t.leave),
            us(t.owned),
            us(t.resumed),
            us(t.done),
            self.delivered.load(Ordering::Acquire),
            duplicates,
            self.bad.load(Ordering::Acquire) + missing,
            cpu.0,
            cpu.1,
        );
        if let Some(e) = error {
            line.push_str(" error=");
            line.push_str(&e.replace(['\n', '\r'], " "));
        }
        line
    }
}

/// Tells the run's [`Progress`] what krafka's rebalance callbacks say a member owns.
struct Ownership {
    member: usize,
    topic: String,
    progress: Arc<Progress>,
}

impl Ownership {
    fn of<'a>(&'a self, partitions: &'a [TopicPartition]) -> impl Iterator<Item = i32> + 'a {
        partitions
            .iter()
            .filter(|tp| tp.topic == self.topic)
            .map(|tp| tp.partition)
    }
}

impl ConsumerRebalanceListener for Ownership {
    async fn on_partitions_assigned(&self, partitions: &[TopicPartition]) {
        self.progress.assigned(self.member, self.of(partitions));
    }

    async fn on_partitions_revoked(&self, partitions: &[TopicPartition]) {
        self.progress.revoked(self.member, self.of(partitions));
    }

    async fn on_partitions_lost(&self, partitions: &[TopicPartition]) {
        self.progress.revoked(self.member, self.of(partitions));
    }
}

/// The `group` settings after the checks.
struct GroupRun {
    bootstrap: String,
    topic: String,
    partitions: i32,
    records: u64,
    value_size: usize,
    group_id: String,
    members: usize,
    assignor: PartitionAssignmentStrategy,
    session_timeout: Duration,
    heartbeat_interval: Duration,
    leave_at: f64,
    fetch: FetchSettings,
}

async fn group(a: Args) -> Result<String, CannotRun> {
    let value_size: usize = a.num("value-size", 100)?;
    let assignor = match a.get("assignor").unwrap_or("range") {
        "range" => PartitionAssignmentStrategy::Range,
        "roundrobin" => PartitionAssignmentStrategy::RoundRobin,
        "cooperative-sticky" => PartitionAssignmentStrategy::CooperativeSticky,
        other => {
            return Err(format!(
                "--assignor {other}: range, roundrobin or cooperative-sticky"
            ));
        }
    };
    let run = Arc::new(GroupRun {
        bootstrap: a.need("bootstrap")?.to_owned(),
        topic: a.need("topic")?.to_owned(),
        partitions: a.num("partitions", 0)?,
        records: a.num("records", 0)?,
        value_size,
        group_id: a.need("group-id")?.to_owned(),
        members: a.num("members", 3)?,
        assignor,
        session_timeout: Duration::from_millis(a.num("session-timeout-ms", 6_000)?),
        heartbeat_interval: Duration::from_millis(a.num("heartbeat-interval-ms", 500)?),
        leave_at: a.num("leave-at", 0.5)?,
        fetch: FetchSettings::from_args(&a, value_size)?,
    });
    if run.partitions <= 0 || run.members == 0 {
        return Err("--partitions and --members must be > 0".to_owned());
    }

    // The topic's partitions, looked up before the clock starts (a missing topic ends the run
    // here rather than after a 20 s wait).
    let probe = connect(Kafka::builder(run.bootstrap.as_str()))
        .await?
        .consumer_without_group()
        .build()
        .await
        .map_err(|e| format!("consumer: {e}"))?;
    let have = probe
        .fetch_metadata(Some(&run.topic))
        .await
        .map_err(|e| format!("metadata of {}: {e}", run.topic))?
        .topics
        .first()
        .map_or(0, krafka::TopicInfo::partition_count);
    let _ = probe.close().await;
    enough_partitions(&run.topic, have, run.partitions as usize)?;

    let cpu0 = cpu_us();
    let progress = Arc::new(Progress::new(&run));
    // Every member is made (connected, built, subscribed) before any polls: krafka joins the
    // group in `poll`, so the members join together rather than in the order their
    // connections came up.
    let making: Vec<_> = (0..run.members)
        .map(|m| tokio::spawn(make_member(m, Arc::clone(&run), Arc::clone(&progress))))
        .collect();
    let mut consumers = Vec::new();
    let mut unmade = None;
    for (m, task) in making.into_iter().enumerate() {
        match task.await {
            Ok(Ok(c)) => consumers.push(c),
            Ok(Err(e)) => unmade = unmade.or(Some(e)),
            Err(e) => unmade = unmade.or(Some(format!("member {m}'s task: {e}"))),
        }
    }
    if let Some(why) = unmade {
        // A member could not be made: the run cannot happen.
        for c in consumers {
            let _ = c
                .close_with(krafka::CloseOptions::new().timeout(Duration::from_secs(5)))
                .await;
        }
        return Err(why);
    }
    let members: Vec<_> = consumers
        .into_iter()
        .enumerate()
        .map(|(m, c)| tokio::spawn(drive(m, c, Arc::clone(&progress))))
        .collect();
    let stalled = progress.wait().await.err();
    for (m, task) in members.into_iter().enumerate() {
        if let Err(e) = task.await {
            progress.trouble(format!("member {m}'s task: {e}"));
        }
    }
    let cpu = cpu_since(cpu0);
    Ok(progress.line(cpu, stalled))
}

/// Member `m`: its own connections and group consumer, subscribed to the topic.
async fn make_member(
    m: usize,
    run: Arc<GroupRun>,
    progress: Arc<Progress>,
) -> Result<Consumer, String> {
    let kafka = Kafka::builder(run.bootstrap.as_str())
        .client_id(format!("kafkit-bench-krafka-{m}"))
        .connect()
        .await
        .map_err(|e| format!("member {m}: connect: {e}"))?;
    let consumer = run
        .fetch
        .apply(
            kafka
                .consumer(run.group_id.as_str())
                .auto_offset_reset(AutoOffsetReset::Earliest)
                .enable_auto_commit(true)
                .partition_assignment_strategy(run.assignor)
                .session_timeout(run.session_timeout)
                .heartbeat_interval(run.heartbeat_interval)
                .rebalance_listener(Ownership {
                    member: m,
                    topic: run.topic.clone(),
                    progress,
                }),
        )
        .build()
        .await
        .map_err(|e| format!("member {m}: consumer: {e}"))?;
    consumer
        .subscribe([run.topic.as_str()])
        .await
        .map_err(|e| format!("member {m}: subscribe {}: {e}", run.topic))?;
    Ok(consumer)
}

/// Member `m`'s loop: poll until told to stop (or, for the last member, until its share of
/// the records is handed out), then close the krafka way (`close`: commit, revoke,
/// LeaveGroup).
async fn drive(m: usize, consumer: Consumer, progress: Arc<Progress>) {
    while !progress.stopped() {
        if progress.should_leave(m) {
            progress.leaving(m);
            break;
        }
        match consumer.poll(Duration::from_millis(100)).await {
            Ok(batch) => {
                for r in batch {
                    progress.record(m, r.partition, r.offset, r.value.as_deref());
                }
            }
            Err(e) => {
                progress.trouble(format!("member {m}: poll: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    if let Err(e) = consumer
        .close_with(krafka::CloseOptions::new().timeout(Duration::from_secs(30)))
        .await
    {
        progress.trouble(format!("member {m}: close: {e}"));
    }
}
