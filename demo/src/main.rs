//! The main job, run by `cargo xtask demo`.
//!
//! It starts an embedded broker (by default an in-process librdkafka mock cluster of 3 brokers;
//! `--bootstrap HOST:PORT` uses a running broker such as tansu instead), creates 2 topics of 8
//! partitions, writes 100,000 records with [`Conn::write_multi`] grouped by partition leader (one
//! Produce request per broker per round), reads every record back with the [`Reader`] (every
//! partition assigned from offset 0; one Fetch request per broker per round), checks each key,
//! value, header, timestamp and offset, and prints a table of Produce and Fetch requests per
//! broker. Then `--group-members` (default 3) members of one consumer group ([`GroupReader`],
//! see `group.rs`) read every record back concurrently: the demo prints each member's
//! partitions and record count and checks that every record was read exactly once across
//! them (at least once when a member joined late and the group rebalanced while they read).
//! The exit code is non-zero on any mismatch or error.
//!
//! [`GroupReader`]: kafkit::GroupReader

mod group;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use clap::Parser;
use kafkit::admin::NewTopic;
use kafkit::{
    Acks, AutoOffsetReset, Compression, Conn, Dialer, IsolationLevel, OffsetSpec, ProduceBatches,
    ProducedPartition, Reader, ReaderError, StartOffset, Transport,
};
use kafkit_protocol::ApiKey;
use kafkit_protocol::records::{Record, RecordHeader};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

/// Command-line options of the demo.
#[derive(Parser, Debug)]
#[command(
    name = "kafkit-demo",
    about = "Write across topics and partitions with one Produce request per broker, read back, verify"
)]
struct Args {
    /// A running broker to use (HOST:PORT[,HOST:PORT...]). Default: an in-process librdkafka
    /// mock cluster of 3 brokers.
    #[arg(long)]
    bootstrap: Option<String>,
    /// What to call the broker at --bootstrap in the output (`cargo xtask demo --kafka` names
    /// its Apache Kafka cluster).
    #[arg(long, requires = "bootstrap")]
    broker_name: Option<String>,
    /// Records to write in all.
    #[arg(long, default_value_t = 100_000)]
    records: usize,
    /// Number of topics.
    #[arg(long, default_value_t = 2)]
    topics: usize,
    /// Partitions per topic.
    #[arg(long, default_value_t = 8)]
    partitions: i32,
    /// Size of each record value, bytes.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Records per partition in one Produce request (the batch of that partition in one round).
    #[arg(long, default_value_t = 1_000)]
    batch_records: usize,
    /// Members of the consumer group that reads everything back after the Reader (0: no
    /// group phase).
    #[arg(long, default_value_t = 3)]
    group_members: usize,
}

/// One topic-partition of the demo and the leader that holds it.
struct Slot {
    topic: String,
    partition: i32,
    leader: i32,
}

/// What the demo measured.
#[derive(Default)]
struct Report {
    records_written: usize,
    records_read: usize,
    mismatches: usize,
    bytes_written: usize,
    rounds: usize,
    write_time: Duration,
    read_time: Duration,
    brokers: BTreeMap<i32, BrokerStats>,
    /// The group phase (none with `--group-members 0`), with the topics and partitions it read.
    group: Option<(group::GroupReport, Vec<Slot>, Vec<String>)>,
}

/// Per-broker counts of the write and read phases.
#[derive(Default)]
struct BrokerStats {
    addr: String,
    partitions: usize,
    /// Produce requests the connection sent (its own counter).
    produce_requests: u64,
    /// `write_multi` calls made to this broker.
    write_multi_calls: u64,
    /// Fetch requests the Reader sent to this broker (`ReaderStats::fetch_requests`).
    fetch_requests: u64,
    records: usize,
}

type DemoResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() -> ExitCode {
    let started = Instant::now();
    let args = Args::parse();
    if args.topics == 0 || args.partitions <= 0 || args.batch_records == 0 {
        eprintln!("demo: --topics, --partitions and --batch-records must be positive");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("demo: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The mock cluster runs on librdkafka's own thread; the handle stays on this one.
    let mock = match &args.bootstrap {
        Some(_) => None,
        None => match MockCluster::new(3) {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("demo: cannot start the librdkafka mock cluster: {e}");
                return ExitCode::FAILURE;
            }
        },
    };
    let (bootstrap, broker_kind) = match (&args.bootstrap, &mock) {
        (Some(b), _) => (
            b.clone(),
            match &args.broker_name {
                Some(name) => format!("{name} at {b}"),
                None => format!("broker at {b}"),
            },
        ),
        (None, Some(m)) => (
            m.bootstrap_servers(),
            "embedded librdkafka mock cluster, 3 brokers".to_string(),
        ),
        (None, None) => unreachable!("a mock cluster is made when no bootstrap is given"),
    };
    println!("kafkit-demo: {broker_kind}");
    match runtime.block_on(run(&args, &bootstrap, mock.as_ref())) {
        Ok(report) => {
            print_report(&args, &report);
            print_summary(&args, &report, started.elapsed());
            let group_ok = report.group.as_ref().is_none_or(|(g, _, _)| g.passed());
            if report.mismatches == 0 && report.records_read == args.records && group_ok {
                println!(
                    "OK: every record read back equal{}",
                    match &report.group {
                        Some((g, _, _)) if g.exactly_once() => ", and once across the group",
                        Some(_) => ", and at least once across the group",
                        None => "",
                    }
                );
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "FAILED: {} mismatches, {} of {} records read back{}",
                    report.mismatches,
                    report.records_read,
                    args.records,
                    if group_ok {
                        ""
                    } else {
                        "; the group missed records, or read some twice without a rebalance"
                    }
                );
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Creates the topics, writes, reads back and verifies.
async fn run(
    args: &Args,
    bootstrap: &str,
    mock: Option<&MockCluster<'static, DefaultProducerContext>>,
) -> DemoResult<Report> {
    let dialer = Dialer::builder().client_id("kafkit-demo").build();
    let admin = dial_any(&dialer, bootstrap).await?;
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let topics: Vec<String> = (0..args.topics)
        .map(|t| format!("demo-{stamp}-{t}"))
        .collect();
    create_topics(&admin, mock, &topics, args.partitions).await?;
    let slots = wait_for_leaders(&dialer, &admin, &topics, args.partitions).await?;

    // One connection per leader.
    let metadata = admin
        .metadata(Some(&topics.iter().map(String::as_str).collect::<Vec<_>>()))
        .await?;
    let mut conns: BTreeMap<i32, Conn> = BTreeMap::new();
    let mut report = Report::default();
    for slot in &slots {
        if let std::collections::btree_map::Entry::Vacant(entry) = conns.entry(slot.leader) {
            let broker = metadata
                .broker(slot.leader)
                .ok_or_else(|| format!("leader {} is not in the metadata", slot.leader))?;
            let conn = dialer.dial(&broker.addr()).await?;
            report.brokers.insert(
                slot.leader,
                BrokerStats {
                    addr: broker.addr(),
                    ..BrokerStats::default()
                },
            );
            entry.insert(conn);
        }
        if let Some(b) = report.brokers.get_mut(&slot.leader) {
            b.partitions += 1;
        }
    }
    let produce_before: BTreeMap<i32, u64> = conns
        .iter()
        .map(|(id, c)| (*id, c.requests_sent(ApiKey::Produce)))
        .collect();

    // Write: record i goes to slot i % slots; each round sends, to every broker, one Produce
    // request holding the next chunk of every partition that broker leads.
    let base_ts = i64::try_from(stamp)?;
    let per_slot: Vec<usize> = (0..slots.len())
        .map(|s| records_in_slot(args.records, slots.len(), s))
        .collect();
    let max_per_slot = per_slot.iter().copied().max().unwrap_or(0);
    let rounds = max_per_slot.div_ceil(args.batch_records);
    let started = Instant::now();
    for round in 0..rounds {
        let mut tasks = tokio::task::JoinSet::new();
        for (leader, conn) in &conns {
            let mut batches = ProduceBatches::new(Compression::None);
            let mut records_here = 0;
            for (s, slot) in slots
                .iter()
                .enumerate()
                .filter(|(_, sl)| sl.leader == *leader)
            {
                let from = round * args.batch_records;
                let to = per_slot[s].min(from + args.batch_records);
                if from >= to {
                    continue;
                }
                let records: Vec<Record> = (from..to)
                    .map(|k| make_record(s + k * slots.len(), base_ts, args.value_size))
                    .collect();
                report.bytes_written += records
                    .iter()
                    .map(|r| {
                        r.value.as_ref().map_or(0, Bytes::len)
                            + r.key.as_ref().map_or(0, Bytes::len)
                    })
                    .sum::<usize>();
                records_here += records.len();
                batches.add_records(&slot.topic, slot.partition, &records)?;
            }
            if batches.is_empty() {
                continue;
            }
            if let Some(b) = report.brokers.get_mut(leader) {
                b.records += records_here;
                b.write_multi_calls += 1;
            }
            let conn = conn.clone();
            tasks.spawn(async move {
                conn.write_multi(&batches, Acks::All, Duration::from_secs(30))
                    .await
            });
        }
        while let Some(joined) = tasks.join_next().await {
            let produced: Vec<ProducedPartition> = joined??;
            for p in produced {
                let p = p.into_result()?;
                if !slots
                    .iter()
                    .any(|sl| sl.topic == p.topic && sl.partition == p.partition)
                {
                    return Err(format!(
                        "the broker answered for {}/{}, which the demo did not write",
                        p.topic, p.partition
                    )
                    .into());
                }
                let expected = i64::try_from(round * args.batch_records)?;
                if p.base_offset != expected {
                    report.mismatches += 1;
                    eprintln!(
                        "{}/{}: base offset {} where {} was expected",
                        p.topic, p.partition, p.base_offset, expected
                    );
                }
            }
        }
    }
    report.write_time = started.elapsed();
    report.rounds = rounds;
    report.records_written = args.records;
    for (id, conn) in &conns {
        let sent =
            conn.requests_sent(ApiKey::Produce) - produce_before.get(id).copied().unwrap_or(0);
        if let Some(b) = report.brokers.get_mut(id) {
            b.produce_requests = sent;
            if sent != b.write_multi_calls {
                report.mismatches += 1;
                eprintln!(
                    "broker {id}: {sent} Produce requests for {} write_multi calls",
                    b.write_multi_calls
                );
            }
        }
    }

    // Read back and verify every record.
    let started = Instant::now();
    let (read, bad, fetches) = read_back(args, bootstrap, &slots, &per_slot, base_ts).await?;
    report.records_read = read;
    report.mismatches += bad;
    for (id, n) in fetches {
        report.brokers.entry(id).or_default().fetch_requests = n;
    }
    report.read_time = started.elapsed();

    // Read back again with a consumer group.
    if args.group_members > 0 {
        let g = group::read_back(args, bootstrap, &topics, &slots, base_ts, stamp).await?;
        report.group = Some((g, slots, topics));
    }
    Ok(report)
}

/// Dials the first broker of the comma-separated `bootstrap` list that answers.
async fn dial_any(dialer: &Dialer, bootstrap: &str) -> DemoResult<Conn> {
    let mut last_err = None;
    for addr in bootstrap
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        match dialer.dial(addr).await {
            Ok(conn) => return Ok(conn),
            Err(e) => {
                eprintln!("demo: {addr}: {e}");
                last_err = Some(e);
            }
        }
    }
    Err(match last_err {
        Some(e) => format!("no broker of {bootstrap:?} answered (last: {e})").into(),
        None => format!("empty --bootstrap list {bootstrap:?}").into(),
    })
}

/// How many of `total` records land in slot `s` of `slots` when record i goes to slot i % slots.
fn records_in_slot(total: usize, slots: usize, s: usize) -> usize {
    total / slots + usize::from(s < total % slots)
}

/// Record number `i`: key `key-<i>`, a value of `value_size` bytes that starts with `i`, header
/// `index` = i (8 bytes, big-endian), timestamp `base_ts + i` ms.
fn make_record(i: usize, base_ts: i64, value_size: usize) -> Record {
    let mut r = Record::new(
        Some(Bytes::from(format!("key-{i}"))),
        Some(make_value(i, value_size)),
    );
    r.timestamp = base_ts + i64::try_from(i).unwrap_or(i64::MAX - base_ts);
    r.headers.push(RecordHeader::new(
        "index",
        Some(Bytes::copy_from_slice(&(i as u64).to_be_bytes())),
    ));
    r
}

/// Whether `r` has the key, value, timestamp and headers of record number `i` as written.
fn same_record(r: &Record, i: usize, base_ts: i64, value_size: usize) -> bool {
    let want = make_record(i, base_ts, value_size);
    r.key == want.key
        && r.value == want.value
        && r.timestamp == want.timestamp
        && r.headers == want.headers
}

fn make_value(i: usize, value_size: usize) -> Bytes {
    let mut v = BytesMut::with_capacity(value_size);
    let tag = format!("value-{i}:");
    for (n, b) in tag
        .bytes()
        .chain((0..).map(|n: usize| b'a' + (n % 26) as u8))
        .enumerate()
    {
        if n == value_size {
            break;
        }
        v.put_u8(b);
    }
    v.freeze()
}

/// Reads every partition of `slots` back with one [`Reader`] (assigned from offset 0, with no
/// reset policy, so a log that lost its start is an error) until every record is back, and
/// compares each with the record the demo wrote there. Returns (records read, mismatches, Fetch
/// requests per broker).
async fn read_back(
    args: &Args,
    bootstrap: &str,
    slots: &[Slot],
    per_slot: &[usize],
    base_ts: i64,
) -> DemoResult<(usize, usize, BTreeMap<i32, u64>)> {
    let transport = Transport::builder(bootstrap.split(',').map(str::trim))
        .dialer(Dialer::builder().client_id("kafkit-demo").build())
        .build()?;
    let reader = Reader::builder(transport)
        .fetch_max_wait(Duration::from_millis(500))
        .auto_offset_reset(AutoOffsetReset::None)
        .build()?;
    reader.assign(
        slots
            .iter()
            .map(|s| (s.topic.as_str(), s.partition, StartOffset::At(0))),
    )?;
    // Per slot: the next offset expected.
    let index: HashMap<(&str, i32), usize> = slots
        .iter()
        .enumerate()
        .map(|(i, s)| ((s.topic.as_str(), s.partition), i))
        .collect();
    let mut next = vec![0i64; slots.len()];
    let expected: usize = per_slot.iter().sum();
    let stride = slots.len();
    let (mut read, mut bad) = (0usize, 0usize);
    while read < expected {
        let parts = match tokio::time::timeout(Duration::from_secs(30), reader.next_batch()).await {
            Err(_) => {
                return Err(format!(
                    "only {read} of {expected} records could be read (nothing for 30 s)"
                )
                .into());
            }
            Ok(Err(kafkit::Error::Reader(ReaderError::OffsetOutOfRange {
                topic,
                partition,
                offset,
                log_start_offset,
                ..
            }))) => {
                return Err(format!(
                    "{topic}/{partition}: offset {offset} is no longer in the broker's log (log \
                     start offset {log_start_offset}); librdkafka's mock cluster keeps only the \
                     last 5 MiB of each partition, so use more --partitions, fewer --records or a \
                     real broker (--bootstrap)"
                )
                .into());
            }
            Ok(r) => r?,
        };
        for part in &parts {
            let Some(&s) = index.get(&(&*part.topic, part.partition)) else {
                return Err(format!(
                    "the Reader returned {}/{}, which the demo did not assign",
                    part.topic, part.partition
                )
                .into());
            };
            for r in &part.records {
                if r.offset != next[s] {
                    bad += 1;
                    eprintln!(
                        "{}/{}: offset {} where {} was expected",
                        part.topic, part.partition, r.offset, next[s]
                    );
                }
                let i = s + usize::try_from(r.offset)? * stride;
                if !same_record(r, i, base_ts, args.value_size) {
                    bad += 1;
                    if bad <= 5 {
                        let want = make_record(i, base_ts, args.value_size);
                        eprintln!(
                            "{}/{} offset {}: read {r:?}, wrote {want:?}",
                            part.topic, part.partition, r.offset
                        );
                    }
                }
                read += 1;
                next[s] = r.offset + 1;
            }
        }
    }
    for (s, slot) in slots.iter().enumerate() {
        if usize::try_from(next[s])? != per_slot[s] {
            bad += 1;
            eprintln!(
                "{}/{}: read up to offset {} of {}",
                slot.topic, slot.partition, next[s], per_slot[s]
            );
        }
    }
    let stats = reader.stats();
    reader.close();
    Ok((read, bad, stats.fetch_requests))
}

/// Creates the topics: on the mock cluster with its own call (it has no CreateTopics API) and the
/// leaders spread over its brokers; on a real broker with CreateTopics.
async fn create_topics(
    admin: &Conn,
    mock: Option<&MockCluster<'static, DefaultProducerContext>>,
    topics: &[String],
    partitions: i32,
) -> DemoResult<()> {
    match mock {
        Some(m) => {
            for t in topics {
                m.create_topic(t, partitions, 1)?;
                for p in 0..partitions {
                    m.partition_leader(t, p, Some(p % 3 + 1))?;
                }
            }
        }
        None => {
            // What a real cluster would use: three copies where there are three brokers (the
            // 3-broker Kafka cluster also insists on two in sync for acks=all).
            let brokers = admin.metadata(Some(&[])).await?.brokers.len();
            let replicas = i16::try_from(brokers.clamp(1, 3))?;
            let new: Vec<NewTopic> = topics
                .iter()
                .map(|t| NewTopic::new(t.clone(), partitions, replicas))
                .collect();
            for (_, result) in admin.create_topics(&new, false).await? {
                result?;
            }
        }
    }
    Ok(())
}

/// Asks for metadata until every partition of `topics` has a leader, then asks each leader for
/// the end offsets of its partitions until it answers them all without an error (30 s at most).
///
/// Apache Kafka answers CreateTopics once its controller has the topics, and Metadata from a
/// cache that may list a leader before that broker's replica manager leads: until then
/// Produce is answered NOT_LEADER_OR_FOLLOWER. ListOffsets goes the way Produce does.
async fn wait_for_leaders(
    dialer: &Dialer,
    admin: &Conn,
    topics: &[String],
    partitions: i32,
) -> DemoResult<Vec<Slot>> {
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (slots, md) = loop {
        let md = admin.metadata(Some(&names)).await?;
        let mut slots = Vec::new();
        for t in topics {
            for p in 0..partitions {
                if let Some(pm) = md
                    .topic(t)
                    .and_then(|tm| tm.partitions.iter().find(|pm| pm.partition == p))
                    .filter(|pm| pm.error_code.is_ok() && pm.leader_id >= 0)
                {
                    slots.push(Slot {
                        topic: t.clone(),
                        partition: p,
                        leader: pm.leader_id,
                    });
                }
            }
        }
        if slots.len() == topics.len() * usize::try_from(partitions)? {
            break (slots, md);
        }
        if Instant::now() > deadline {
            return Err("the topics' partitions have no leader after 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let leaders: BTreeSet<i32> = slots.iter().map(|s| s.leader).collect();
    for leader in leaders {
        let broker = md
            .broker(leader)
            .ok_or_else(|| format!("leader {leader} is not in the metadata"))?;
        let conn = dialer.dial(&broker.addr()).await?;
        let led: Vec<(&str, i32, OffsetSpec)> = slots
            .iter()
            .filter(|s| s.leader == leader)
            .map(|s| (s.topic.as_str(), s.partition, OffsetSpec::Latest))
            .collect();
        loop {
            match conn
                .list_offsets(&led, IsolationLevel::ReadUncommitted)
                .await
            {
                Ok(answers) if answers.iter().all(|a| a.error_code.is_ok()) => break,
                _ if Instant::now() > deadline => {
                    return Err(format!(
                        "broker {leader} does not lead its partitions of the demo topics after 30 s"
                    )
                    .into());
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
    Ok(slots)
}

/// `100,000` for 100000.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What a user should conclude, in plain words: records written, read back, read by the
/// group (exactly once, or how many twice and why), and the time taken.
fn print_summary(args: &Args, r: &Report, total: Duration) {
    let brokers = r.brokers.len();
    let partitions: usize = r.brokers.values().map(|b| b.partitions).sum();
    let produce: u64 = r.brokers.values().map(|b| b.produce_requests).sum();
    let fetch: u64 = r.brokers.values().map(|b| b.fetch_requests).sum();
    println!();
    println!("In short:");
    println!(
        "- written: {} records to {partitions} partitions on {brokers} brokers in {:.2} s, with \
         {produce} Produce requests (one per broker per round; one per partition per round would \
         be {})",
        thousands(r.records_written),
        r.write_time.as_secs_f64(),
        partitions * r.rounds
    );
    println!(
        "- read back: {} of {} records in {:.2} s with {fetch} Fetch requests, {}",
        thousands(r.records_read),
        thousands(r.records_written),
        r.read_time.as_secs_f64(),
        if r.mismatches == 0 {
            "each equal to the record written".to_string()
        } else {
            format!("{} mismatches", r.mismatches)
        }
    );
    if let Some((g, _, _)) = &r.group {
        let handed_out: usize = g.members.iter().map(|m| m.records).sum();
        println!(
            "- consumer group: {} members {} in {:.2} s, then read {} records for the {} written \
             in {:.2} s: {}",
            g.members.len(),
            if g.assembled {
                "joined"
            } else {
                "had not all joined"
            },
            g.assemble_time.as_secs_f64(),
            thousands(handed_out),
            thousands(r.records_written),
            g.read_time.as_secs_f64(),
            group_verdict(g)
        );
        if args.bootstrap.is_none() && g.assemble_time > Duration::from_secs(4) {
            println!(
                "  (the wait is librdkafka's mock cluster: it holds a new group's first join 3 s, \
                 and each later rebalance the session timeout minus 1 s, 5 s here, even when \
                 every member has rejoined; a member whose SyncGroup reaches it after the \
                 leader's must rejoin, which a loaded machine makes likely)"
            );
        }
    }
    println!("- total time: {:.1} s", total.as_secs_f64());
}

/// The group's outcome in words.
fn group_verdict(g: &group::GroupReport) -> String {
    let mismatches: usize = g.members.iter().map(|m| m.mismatches).sum();
    if mismatches > 0 {
        return format!("{mismatches} records differed from the ones written: a defect");
    }
    if g.missing > 0 {
        return format!(
            "{} records were never handed out: a defect",
            thousands(g.missing)
        );
    }
    if g.duplicates == 0 && g.rebalanced() {
        return "every record exactly once (no duplicates, none missing), though the group \
                rebalanced while its members read: a partition moves only after its last \
                owner committed what it read"
            .to_string();
    }
    if g.duplicates == 0 {
        return "every record exactly once (no duplicates, none missing)".to_string();
    }
    if g.rebalanced() {
        format!(
            "none missing, but {} read twice: the group rebalanced while its members read, and \
             the partitions' next owners read again what had not been committed yet",
            thousands(g.duplicates)
        )
    } else {
        format!(
            "none missing, but {} read twice without a rebalance: a defect",
            thousands(g.duplicates)
        )
    }
}

fn print_report(args: &Args, r: &Report) {
    let mb = r.bytes_written as f64 / 1_000_000.0;
    let wsec = r.write_time.as_secs_f64().max(1e-9);
    let rsec = r.read_time.as_secs_f64().max(1e-9);
    println!();
    println!(
        "{} topics x {} partitions, {} records of {} value bytes, {} records per partition per request",
        args.topics, args.partitions, args.records, args.value_size, args.batch_records
    );
    println!(
        "{:<8} {:<22} {:>10} {:>17} {:>15} {:>10}",
        "broker", "address", "partitions", "Produce requests", "Fetch requests", "records"
    );
    for (id, b) in &r.brokers {
        println!(
            "{id:<8} {:<22} {:>10} {:>17} {:>15} {:>10}",
            b.addr, b.partitions, b.produce_requests, b.fetch_requests, b.records
        );
    }
    println!(
        "{:<8} {:<22} {:>10} {:>17} {:>15} {:>10}",
        "total",
        "",
        r.brokers.values().map(|b| b.partitions).sum::<usize>(),
        r.brokers.values().map(|b| b.produce_requests).sum::<u64>(),
        r.brokers.values().map(|b| b.fetch_requests).sum::<u64>(),
        r.records_written
    );
    println!();
    println!("rounds (write_multi calls per broker): {}", r.rounds);
    let mock_note = if args.bootstrap.is_none() {
        " (librdkafka's mock cluster answers at most one batch per partition per Fetch)"
    } else {
        ""
    };
    println!(
        "read rounds: the Reader sends one Fetch request per broker per round, covering every \
         partition that broker leads; the largest partition holds {} batches{mock_note}, so at \
         most {} rounds, plus the Fetch in flight at the end (one Fetch per partition per round \
         would be {} in all)",
        r.rounds,
        r.rounds,
        r.brokers.values().map(|b| b.partitions).sum::<usize>() * r.rounds
    );
    println!(
        "written: {} records, {:.1} MB of keys+values in {:.3} s: {:.0} records/s, {:.1} MB/s",
        r.records_written,
        mb,
        wsec,
        r.records_written as f64 / wsec,
        mb / wsec
    );
    println!(
        "read back: {} records in {:.3} s: {:.0} records/s; mismatches: {}",
        r.records_read,
        rsec,
        r.records_read as f64 / rsec,
        r.mismatches
    );
    if let Some((g, slots, topics)) = &r.group {
        group::print(g, slots, topics);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_args(bootstrap: Option<String>) -> Args {
        Args {
            bootstrap,
            broker_name: None,
            records: 5_000,
            topics: 2,
            partitions: 8,
            value_size: 100,
            batch_records: 100,
            group_members: 3,
        }
    }

    /// Checks a demo report: every record read back equal, each broker got exactly one
    /// Produce request per round in which it had data, and the Reader fetched from each.
    fn assert_clean(args: &Args, report: &Report) {
        assert_eq!(report.mismatches, 0);
        assert_eq!(report.records_written, args.records);
        assert_eq!(report.records_read, args.records);
        // 5,000 records over 16 partitions: 313 or 312 per partition, 100 per request: 4 rounds.
        assert_eq!(report.rounds, 4);
        for (id, b) in &report.brokers {
            assert_eq!(b.produce_requests, b.write_multi_calls, "broker {id}");
            assert_eq!(
                b.produce_requests, 4,
                "broker {id}: one Produce request per round"
            );
            // One Fetch per broker per round: at most one round per batch of the largest
            // partition (the mock answers one batch per partition), plus one in flight at the
            // end and one retry; one Fetch per partition would be 4 for each of 4-6 partitions.
            assert!(
                (1..=report.rounds as u64 + 2).contains(&b.fetch_requests),
                "broker {id}: {} Fetch requests for {} partitions of {} batches",
                b.fetch_requests,
                b.partitions,
                report.rounds
            );
        }
        assert_eq!(
            report.brokers.values().map(|b| b.partitions).sum::<usize>(),
            16
        );
        // The group: three members, each with a share, the shares disjoint and covering the 16
        // partitions, every record handed out once.
        let (g, _, _) = report.group.as_ref().expect("the group phase ran");
        assert_eq!(g.members.len(), 3);
        // The members read once every one of them joined the same generation, so nothing is
        // read twice; should the wait run out (60 s), cooperative-sticky still moves only
        // committed partitions, and nothing may be missing in any case.
        assert!(
            g.passed(),
            "{} duplicates, {} missing, rebalanced: {}",
            g.duplicates,
            g.missing,
            g.rebalanced()
        );
        if g.assembled {
            assert!(
                g.exactly_once(),
                "{} duplicates after the group was assembled",
                g.duplicates
            );
        }
        let mut owned: Vec<usize> = g
            .members
            .iter()
            .flat_map(|m| m.assignment.clone())
            .collect();
        assert!(
            g.members
                .iter()
                .all(|m| !m.assignment.is_empty() && m.records > 0)
        );
        owned.sort_unstable();
        assert_eq!(
            owned,
            (0..16).collect::<Vec<_>>(),
            "each partition owned by one member"
        );
        // Every record handed out once; a rebalance while they read (the group not assembled
        // in time) may hand out again what was not committed yet (the verdict above checked
        // that nothing is missing).
        let handed_out = g.members.iter().map(|m| m.records).sum::<usize>();
        if g.rebalanced() {
            assert!(handed_out >= args.records, "{handed_out} handed out");
        } else {
            assert_eq!(handed_out, args.records);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn demo_on_the_mock_cluster_spreads_leaders_and_verifies_every_record() {
        let mock = MockCluster::new(3).expect("mock cluster");
        let args = small_args(None);
        let report = run(&args, &mock.bootstrap_servers(), Some(&mock))
            .await
            .expect("demo run");
        assert_eq!(report.brokers.len(), 3, "leaders on all three brokers");
        assert_clean(&args, &report);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bootstrap_list_skips_a_dead_broker() {
        let mock = MockCluster::new(3).expect("mock cluster");
        let dead = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let dead_addr = dead.local_addr().expect("addr");
        drop(dead);
        let bootstrap = format!("{dead_addr},{}", mock.bootstrap_servers());
        let args = small_args(None);
        let report = run(&args, &bootstrap, Some(&mock)).await.expect("demo run");
        assert_clean(&args, &report);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mock_log_limit_is_explained() {
        // One partition of 6,000 records of 1,000 bytes: more than the 5 MiB the mock keeps.
        let mock = MockCluster::new(3).expect("mock cluster");
        let args = Args {
            topics: 1,
            partitions: 1,
            records: 6_000,
            value_size: 1_000,
            ..small_args(None)
        };
        let err = run(&args, &mock.bootstrap_servers(), Some(&mock))
            .await
            .err()
            .expect("the first records are gone")
            .to_string();
        assert!(err.contains("keeps only the last 5 MiB"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn demo_on_tansu_verifies_every_record() {
        let bootstrap = integration_tests::tansu();
        let args = small_args(Some(bootstrap.clone()));
        let report = run(&args, &bootstrap, None).await.expect("demo run");
        assert_clean(&args, &report);
    }
}
