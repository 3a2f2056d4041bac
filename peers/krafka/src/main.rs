//! krafka (a pure-Rust Kafka client on crates.io) as a peer of kafkit-bench: `kafkit-krafka-peer
//! produce|consume --name value ...` runs one workload of the bench's peer contract and prints
//! one `RESULT` line on stdout (everything else goes to stderr).
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
//!
//! `requests`: `-` for `produce` (krafka counts acknowledged batches, not Produce requests);
//! the growth of `ConsumerMetrics::fetches` (Fetch requests sent) for `consume`.
//!
//! Exit code 0 once the run happened (failed records included), 2 when it could not (bad flags,
//! no broker, no topic), with the reason on stderr.

use std::collections::{BTreeSet, HashMap};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use krafka::consumer::AutoOffsetReset;
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
            return Err("usage: kafkit-krafka-peer produce|consume --name value ...".to_owned());
        };
        match command.as_str() {
            "produce" => produce(Args::parse(&argv[1..], PRODUCE_FLAGS, PRODUCE_IGNORED)?).await,
            "consume" => consume(Args::parse(&argv[1..], CONSUME_FLAGS, CONSUME_IGNORED)?).await,
            other => Err(format!("unknown command {other}: produce or consume")),
        }
    });
    match result {
        Ok(outcome) => {
            println!("{}", outcome.line());
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
    let kafka = connect(Kafka::builder(a.need("bootstrap")?)).await?;
    let mut builder = kafka
        .consumer_without_group()
        .enable_auto_commit(false)
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .max_poll_records(10_000);
    if a.get("fetch-min-bytes").is_some() {
        builder = builder.fetch_min_bytes(a.num("fetch-min-bytes", 1)?);
    }
    if a.get("fetch-max-wait-ms").is_some() {
        builder = builder.fetch_max_wait(Duration::from_millis(a.num("fetch-max-wait-ms", 500)?));
    }
    if a.get("max-partition-fetch-bytes").is_some() {
        builder = builder.max_partition_fetch_bytes(a.num("max-partition-fetch-bytes", 1 << 20)?);
    }
    if a.get("fetch-max-bytes").is_some() {
        builder = builder.fetch_max_bytes(a.num("fetch-max-bytes", 50 << 20)?);
    }
    if a.get("queued-max-kbytes").is_some() {
        // krafka caps its fetched-but-not-polled buffer in records, not bytes: the records of
        // this value size that fit the byte budget (at least one poll's worth).
        let kbytes: u64 = a.num("queued-max-kbytes", 0)?;
        let cap = (kbytes * 1024 / value_size.max(1) as u64).clamp(10_000, i32::MAX as u64);
        eprintln!(
            "krafka peer: --queued-max-kbytes {kbytes}: max_buffered_records {cap} (krafka \
             counts records)"
        );
        builder = builder.max_buffered_records(cap as i32);
    }
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
