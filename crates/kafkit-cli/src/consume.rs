//! `kafkit consume`: records of assigned partitions printed with kcat's `-f` format (or as kcat
//! prints them without one), or as JSON lines; follows by default, `-e` exits at the end, `-c`
//! after a count. With `-G GROUP` it is a member of a consumer group instead: the group's
//! coordinator assigns the partitions of the subscribed topics, and the offsets of the records
//! printed are committed (every 5 s, when partitions are revoked, and at exit). With
//! `--share-group GROUP` it is a member of a KIP-932 share group (`share.rs`): each record
//! printed is accepted, what was not printed is released to the group's other members.
//!
//! While no broker of the cluster accepts a connection it says so on stderr (at once, then
//! every 10 s) and goes on trying, as kcat does.
//!
//! Ctrl-C (SIGINT) or SIGTERM ends it as `-c` or `-e` would: what was formatted is written, a
//! group member commits what it printed and leaves its group, exit 0 (a second one exits at
//! once, 130).

mod share;

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, ValueEnum};
use kafkit::admin::OffsetAndMetadata;
use kafkit::properties::PropertyScope;
use kafkit::{
    Client, ConsumerRecord, GroupHandle, GroupReader, GroupReaderBuilder, IsolationLevel,
    ListenerFuture, OffsetSpec, PartitionRecords, Reader, RebalanceListener, StartOffset,
};

use crate::conn::Conn;
use crate::format::unescape;
use crate::format::{Format, JsonOut, JsonShape};
use crate::interrupt::Interrupt;
use crate::out::Progress;
use crate::{CmdResult, Failure};

/// `--isolation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Isolation {
    /// Every record, including open and aborted transactions'.
    ReadUncommitted,
    /// Committed records only, up to the last stable offset.
    ReadCommitted,
}

/// `kafkit consume` arguments.
#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// The topics.
    #[arg(required = true)]
    topics: Vec<String>,
    /// Only these partitions (comma-separated or repeated).
    #[arg(short = 'p', long = "partition", value_delimiter = ',')]
    partitions: Vec<i32>,
    /// Where to start: beginning (default), end, OFFSET, -N (N before the end), @TIMESTAMP
    /// (ms). With -G: where partitions without a committed offset start (beginning or end).
    #[arg(short = 'o', long, allow_hyphen_values = true)]
    offset: Option<String>,
    /// Read as a member of this consumer group (the TOPICs are its subscription) and commit
    /// the offsets of the records printed. `-X group.id=GROUP` without -G does the same; a
    /// -X group.id that names another group is refused. Group settings (session.timeout.ms,
    /// enable.auto.commit, group.instance.id...) without a group are ignored with a warning.
    #[arg(
        short = 'G',
        long = "group",
        value_name = "GROUP",
        conflicts_with = "partitions"
    )]
    group: Option<String>,
    /// Read as a member of this share group (KIP-932; the TOPICs are its subscription): the
    /// group hands each record to one of its members, and this one accepts each record once it
    /// is printed; what it did not print (past -c, on Ctrl-C, to a closed pipe) goes back to
    /// the group. A new group starts at its config share.auto.offset.reset (latest unless set).
    /// -f's %d prints how many times the group delivered the record. -X takes the share
    /// consumer's names (max.poll.records, share.acquire.mode...). Not with -o, -p, -e or
    /// --isolation.
    #[arg(long = "share-group", value_name = "GROUP", conflicts_with = "group")]
    share_group: Option<String>,
    /// Exit after COUNT records.
    #[arg(short = 'c', long)]
    count: Option<u64>,
    /// Exit when every partition is read to its end (default: follow).
    #[arg(short = 'e', long = "exit")]
    exit_at_end: bool,
    /// Output format, as kcat's -f: %t topic, %p partition, %o offset, %k key, %K key length,
    /// %s value, %S value length, %R value length (binary int32), %T timestamp (ms), %h headers
    /// (k=v,k=v), %d delivery count (--share-group only), \n \t \r \xHH.
    #[arg(short = 'f', long = "format", value_name = "FMT")]
    format: Option<String>,
    /// Without -f: print the key and this separator before the value.
    #[arg(short = 'K', value_name = "SEP")]
    key_sep: Option<String>,
    /// Without -f: the delimiter after each record (default: newline; the escapes of produce's
    /// -D).
    #[arg(short = 'D', value_name = "DELIM", default_value = "\\n")]
    delimiter: String,
    /// Print null keys and values as NULL (as kcat -Z).
    #[arg(short = 'Z')]
    null_word: bool,
    /// One JSON object per record, in kcat's -J shape by default (topic, partition, offset,
    /// tstype, ts, broker, headers as [k, v, ...], key, payload).
    #[arg(short = 'J', long = "json", conflicts_with = "format")]
    json: bool,
    /// The field names of -J: kcat's (default) or kafkit's own (timestamp, timestamp_type,
    /// value, headers as [[k, v], ...]).
    #[arg(long, value_enum, default_value = "kcat", requires = "json")]
    json_shape: JsonShape,
    /// With -J: keys, values and header values in base64, so binary bytes survive.
    #[arg(long, requires = "json")]
    base64: bool,
    /// Isolation level (isolation.level; a -X that disagrees is refused).
    #[arg(long, value_enum)]
    isolation: Option<Isolation>,
}

/// Where to start, as `-o` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// `beginning`.
    Beginning,
    /// `end`.
    End,
    /// An absolute offset.
    At(i64),
    /// N records before the end.
    FromEnd(i64),
    /// The first record at or after this time (ms).
    Timestamp(i64),
}

/// Parses `-o`.
pub fn parse_start(s: &str) -> Result<Start, Failure> {
    let bad = || {
        Failure::Usage(format!(
            "-o {s:?}: expected beginning, end, OFFSET, -N or @TIMESTAMP"
        ))
    };
    Ok(match s {
        "beginning" | "earliest" | "smallest" => Start::Beginning,
        "end" | "latest" | "largest" => Start::End,
        s if s.starts_with('@') || s.starts_with("s@") => {
            Start::Timestamp(s.trim_start_matches('s')[1..].parse().map_err(|_| bad())?)
        }
        s if s.starts_with('-') => Start::FromEnd(s[1..].parse::<i64>().map_err(|_| bad())?),
        s => Start::At(s.parse::<i64>().map_err(|_| bad())?),
    })
}

/// Runs `kafkit consume`.
pub async fn run(conn: &Conn, a: ConsumeArgs) -> CmdResult {
    // From here on Ctrl-C ends the command cleanly (what was printed is committed).
    let mut interrupt = Interrupt::new()?;
    let format = match &a.format {
        Some(f) => Format::parse(f, a.null_word).map_err(Failure::Usage)?,
        None => Format::kcat_default(
            a.key_sep
                .as_deref()
                .map(unescape)
                .transpose()
                .map_err(Failure::Usage)?
                .as_deref(),
            &unescape(&a.delimiter).map_err(Failure::Usage)?,
            a.null_word,
        ),
    };
    let stdout_tty = std::io::stdout().is_terminal();
    let progress = Progress::with_target("records", !stdout_tty && std::io::stderr().is_terminal());
    if let Some(group) = &a.share_group {
        return share::run(conn, &a, group, &format, &progress, interrupt).await;
    }
    if format.has_delivery_count() {
        return Err(Failure::Usage(
            "-f's %d is a share group record's delivery count: it needs --share-group GROUP".into(),
        ));
    }
    let start = parse_start(a.offset.as_deref().unwrap_or("beginning"))?;
    let mut conn = conn.clone();
    if let Some(i) = a.isolation {
        let v = match i {
            Isolation::ReadCommitted => "read_committed",
            Isolation::ReadUncommitted => "read_uncommitted",
        };
        conn.set_for_flag("--isolation", "isolation.level", v)?;
    }
    if let Some(group) = group_of(&mut conn, &a)? {
        return run_group(&conn, &a, &group, start, &format, &progress, interrupt).await;
    }
    warn_member_only_settings(&conn, &[PropertyScope::Transport, PropertyScope::Reader]);
    let transport = conn.transport()?;
    let admin = Client::new(transport.clone()).with_timeout(conn.timeout);
    let partitions = interrupt
        .or_exit(
            "connecting to the cluster",
            partitions_of(&admin, &a.topics, &a.partitions),
        )
        .await?;
    let starts = interrupt
        .or_exit(
            "looking up the start offsets",
            start_offsets(&admin, &partitions, start),
        )
        .await?;
    if let Start::At(o) = start {
        let reset = conn.props.get("auto.offset.reset").unwrap_or("latest");
        interrupt
            .or_exit(
                "looking up the end offsets",
                warn_past_the_end(&admin, &partitions, o, reset),
            )
            .await?;
    }
    let leaders = leaders_of(&a, &transport).await;
    let watch = tokio::spawn(crate::reach::watch(brokers_of(&transport).await));
    let mut reader = conn.reader(transport)?.build()?;
    reader.assign(
        starts
            .iter()
            .map(|((t, p), s)| (t.as_str(), *p, *s))
            .collect::<Vec<_>>(),
    )?;
    let r = read(
        &mut reader,
        &a,
        &format,
        &starts,
        &progress,
        leaders,
        &mut interrupt,
    )
    .await;
    progress.finish();
    watch.abort();
    interrupt.exit_on_the_next();
    reader.close();
    r
}

/// The group to join: -G's, or `-X group.id`'s (or `-F`'s) without -G, as librdkafka's
/// consumer joins the group its `group.id` names.
///
/// # Errors
///
/// A usage error when -G and `group.id` name different groups, or `group.id` comes with -p.
fn group_of(conn: &mut Conn, a: &ConsumeArgs) -> Result<Option<String>, Failure> {
    match (&a.group, conn.props.get("group.id")) {
        (Some(g), _) => {
            conn.set_for_flag("-G", "group.id", g)?;
            Ok(Some(g.clone()))
        }
        (None, Some(g)) if !a.partitions.is_empty() => Err(Failure::Usage(format!(
            "-X group.id={g} makes consume a member of group {g}, whose coordinator assigns \
             the partitions: leave out -p, or group.id"
        ))),
        (None, Some(g)) => Ok(Some(g.to_owned())),
        (None, None) => Ok(None),
    }
}

/// Says on stderr, in one line per kind of member, which settings given apply only to a
/// (share) group member and are ignored by this consume, whose builders read the scopes
/// `reads` (librdkafka accepts and ignores them; a word is kinder).
fn warn_member_only_settings(conn: &Conn, reads: &[PropertyScope]) {
    let mut by_who: Vec<(&str, Vec<&str>)> = Vec::new();
    for (name, _) in conn.props.iter() {
        let Some(info) = kafkit::properties::lookup(name) else {
            continue;
        };
        if info.scopes.iter().any(|s| reads.contains(s)) {
            continue;
        }
        let who = match (
            info.scopes.contains(&PropertyScope::Group),
            info.scopes.contains(&PropertyScope::Share),
        ) {
            (true, true) => "a group member (-G GROUP or --share-group GROUP)",
            (true, false) => "a group member (-G GROUP)",
            (false, true) => "a share group member (--share-group GROUP)",
            (false, false) => continue,
        };
        match by_who.iter_mut().find(|(w, _)| *w == who) {
            Some((_, names)) if !names.contains(&name) => names.push(name),
            Some(_) => {}
            None => by_who.push((who, vec![name])),
        }
    }
    for (who, names) in by_who {
        eprintln!(
            "kafkit: warning: {} applies only to {who}: ignored",
            names.join(", ")
        );
    }
}

/// The addresses of the cluster's brokers (for [`crate::reach::watch`]); none when the
/// metadata cannot be read (then nothing is watched).
async fn brokers_of(transport: &kafkit::Transport) -> Vec<String> {
    transport.metadata().await.map_or_else(
        |_| Vec::new(),
        |m| m.brokers.iter().map(|b| b.addr()).collect(),
    )
}

/// The leader of each partition of the topics (kcat's `broker` in `-J`), when `-J` prints
/// it; empty otherwise, or when the metadata cannot be read (`broker` is then -1, as kcat
/// prints an unknown one).
async fn leaders_of(a: &ConsumeArgs, transport: &kafkit::Transport) -> HashMap<(String, i32), i32> {
    if !a.json {
        return HashMap::new();
    }
    let names: Vec<&str> = a.topics.iter().map(String::as_str).collect();
    let Ok(meta) = transport.metadata_for(&names).await else {
        return HashMap::new();
    };
    meta.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| ((t.name.clone(), p.partition), p.leader_id))
        })
        .collect()
}

/// Every `(topic, partition)` to read: each topic's partitions (only `only` when given).
async fn partitions_of(
    admin: &Client,
    topics: &[String],
    only: &[i32],
) -> Result<Vec<(String, i32)>, Failure> {
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let mut out = Vec::new();
    for (name, d) in admin.describe_topics(&names, false).await? {
        let d = d.map_err(|e| Failure::Error(format!("topic {name}: {e}")))?;
        for p in &d.partitions {
            if only.is_empty() || only.contains(&p.partition) {
                out.push((name.clone(), p.partition));
            }
        }
        for p in only {
            if !d.partitions.iter().any(|m| m.partition == *p) {
                return Err(Failure::Error(format!(
                    "topic {name} has no partition {p} ({} partitions)",
                    d.partitions.len()
                )));
            }
        }
    }
    Ok(out)
}

async fn start_offsets(
    admin: &Client,
    partitions: &[(String, i32)],
    start: Start,
) -> Result<Vec<((String, i32), StartOffset)>, Failure> {
    let so = match start {
        Start::Beginning => StartOffset::Earliest,
        Start::End => StartOffset::Latest,
        Start::At(o) => StartOffset::At(o),
        Start::Timestamp(t) => StartOffset::Timestamp(t),
        Start::FromEnd(n) => return from_end(admin, partitions, n).await,
    };
    Ok(partitions.iter().map(|tp| (tp.clone(), so)).collect())
}

/// Says on stderr, per partition, when `-o OFFSET` is past the end of its log: the broker
/// answers OFFSET_OUT_OF_RANGE and `auto.offset.reset` (`reset`, the Reader's default latest)
/// decides where reading starts, which the user did not ask for.
async fn warn_past_the_end(
    admin: &Client,
    partitions: &[(String, i32)],
    offset: i64,
    reset: &str,
) -> CmdResult {
    let ask: Vec<(&str, i32, OffsetSpec)> = partitions
        .iter()
        .map(|(t, p)| (t.as_str(), *p, OffsetSpec::Latest))
        .collect();
    let then = match reset.to_ascii_lowercase().as_str() {
        "earliest" | "smallest" | "beginning" => "reading from the start of the log",
        "none" | "error" => "it fails",
        _ => "reading from the end",
    };
    for ((t, p), end) in admin
        .list_offsets(&ask, IsolationLevel::ReadUncommitted)
        .await?
    {
        if let Ok(end) = end
            && offset > end.offset
        {
            eprintln!(
                "kafkit: {t}/{p}: offset {offset} is past the end of the log (end offset {}); \
                 auto.offset.reset={reset}: {then}",
                end.offset
            );
        }
    }
    Ok(())
}

/// `-N`: N records before each partition's end (never before its start).
async fn from_end(
    admin: &Client,
    partitions: &[(String, i32)],
    n: i64,
) -> Result<Vec<((String, i32), StartOffset)>, Failure> {
    let ask = |spec| -> Vec<(&str, i32, OffsetSpec)> {
        partitions
            .iter()
            .map(|(t, p)| (t.as_str(), *p, spec))
            .collect()
    };
    let ends = admin
        .list_offsets(&ask(OffsetSpec::Latest), IsolationLevel::ReadUncommitted)
        .await?;
    let begins = admin
        .list_offsets(&ask(OffsetSpec::Earliest), IsolationLevel::ReadUncommitted)
        .await?;
    let mut out = Vec::new();
    for ((tp, end), (_, begin)) in ends.into_iter().zip(begins) {
        let end = end.map_err(|e| Failure::Error(format!("{}/{}: {e}", tp.0, tp.1)))?;
        let begin = begin.map_err(|e| Failure::Error(format!("{}/{}: {e}", tp.0, tp.1)))?;
        out.push((tp, StartOffset::At((end.offset - n).max(begin.offset))));
    }
    Ok(out)
}

async fn read(
    reader: &mut Reader,
    a: &ConsumeArgs,
    format: &Format,
    parts: &[((String, i32), StartOffset)],
    progress: &Progress,
    leaders: HashMap<(String, i32), i32>,
    interrupt: &mut Interrupt,
) -> CmdResult {
    let mut p = Printer::new(a, format, progress, leaders);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        if p.counted() || (a.exit_at_end && at_end(reader, parts)) {
            return Ok(());
        }
        let batch = tokio::select! {
            b = reader.next_batch() => b?,
            _ = tick.tick() => continue,
            () = interrupt.recv() => return Ok(()),
        };
        for part in batch {
            p.part(part)?;
        }
        if !p.flush()? {
            return Ok(());
        }
    }
}

/// Formats records to stdout, as -f or -J says, counting them against -c.
struct Printer<'a> {
    format: &'a Format,
    progress: &'a Progress,
    /// `-J`'s writer.
    json: Option<JsonOut>,
    out: Vec<u8>,
    /// The records formatted (what -c counts).
    seen: u64,
    /// The records in `out`: counted by the progress line once written.
    unwritten: u64,
    limit: u64,
}

impl<'a> Printer<'a> {
    fn new(
        a: &'a ConsumeArgs,
        format: &'a Format,
        progress: &'a Progress,
        leaders: HashMap<(String, i32), i32>,
    ) -> Printer<'a> {
        Printer {
            format,
            progress,
            json: a.json.then_some(JsonOut {
                shape: a.json_shape,
                base64: a.base64,
                leaders,
            }),
            out: Vec::with_capacity(64 * 1024),
            seen: 0,
            unwritten: 0,
            limit: a.count.unwrap_or(u64::MAX),
        }
    }

    /// Whether -c COUNT records were formatted.
    fn counted(&self) -> bool {
        self.seen >= self.limit
    }

    /// Formats a partition's records until -c's count; returns the offset after the last one
    /// formatted (`None` when none was).
    fn part(&mut self, part: PartitionRecords) -> Result<Option<i64>, Failure> {
        let mut next = None;
        for r in part.into_consumer_records() {
            if self.counted() {
                break;
            }
            self.record(&r, None)?;
            next = Some(r.offset + 1);
        }
        Ok(next)
    }

    /// Formats one record (with a share group's delivery count) and counts it.
    fn record(&mut self, r: &ConsumerRecord, delivery_count: Option<u16>) -> Result<(), Failure> {
        if let Some(json) = &self.json {
            json.write(r, delivery_count, &mut self.out)?;
        } else {
            self.format.write(r, delivery_count, &mut self.out);
        }
        self.seen += 1;
        self.unwritten += 1;
        Ok(())
    }

    /// Writes what was formatted to stdout; `false` when the reader of our output is gone
    /// (`| head`).
    fn flush(&mut self) -> Result<bool, Failure> {
        let r = crate::out::write_stdout(&self.out);
        self.out.clear();
        if matches!(r, Ok(true)) {
            self.progress.inc(self.unwritten);
        }
        self.unwritten = 0;
        Ok(r?)
    }
}

/// The offsets after the records printed, per partition: what a group member commits.
type Printed = Arc<Mutex<HashMap<(String, i32), i64>>>;

fn printed_offsets(
    printed: &Printed,
    only: Option<&[(String, i32)]>,
) -> Vec<(String, i32, OffsetAndMetadata)> {
    let m = printed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    m.iter()
        .filter(|(tp, _)| only.is_none_or(|o| o.contains(tp)))
        .map(|((t, p), o)| (t.clone(), *p, OffsetAndMetadata::new(*o)))
        .collect()
}

/// Commits the printed offsets of partitions taken away in a rebalance (auto-commit is off:
/// a batch cut short by `-c` must not be committed past its last printed record).
struct CommitOnRevoke(Printed);

impl RebalanceListener for CommitOnRevoke {
    fn on_partitions_revoked(
        &self,
        group: GroupHandle,
        partitions: Vec<(String, i32)>,
    ) -> ListenerFuture {
        let offsets = printed_offsets(&self.0, Some(&partitions));
        let printed = Arc::clone(&self.0);
        Box::pin(async move {
            if !offsets.is_empty()
                && let Err(e) = group.commit_offsets(&offsets).await
            {
                eprintln!("kafkit: committing revoked partitions: {e}");
            }
            let mut m = printed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for tp in &partitions {
                m.remove(tp);
            }
        })
    }

    fn on_partitions_lost(
        &self,
        _group: GroupHandle,
        partitions: Vec<(String, i32)>,
    ) -> ListenerFuture {
        // Another member may own them now: nothing is committed.
        let mut m = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for tp in &partitions {
            m.remove(tp);
        }
        Box::pin(async {})
    }
}

/// How often a group member commits what it printed (Java's auto.commit.interval.ms default).
const COMMIT_INTERVAL: Duration = Duration::from_secs(5);

/// `kafkit consume -G GROUP TOPIC...`.
async fn run_group(
    conn: &Conn,
    a: &ConsumeArgs,
    group: &str,
    start: Start,
    format: &Format,
    progress: &Progress,
    mut interrupt: Interrupt,
) -> CmdResult {
    let mut conn = conn.clone();
    // -o (or, without it and without -X auto.offset.reset, its default: beginning).
    if a.offset.is_some() || conn.props.get("auto.offset.reset").is_none() {
        let reset = match start {
            Start::Beginning => "earliest",
            Start::End => "latest",
            _ => {
                return Err(Failure::Usage(
                    "with -G, -o takes beginning or end (where partitions without a committed \
                     offset start)"
                        .into(),
                ));
            }
        };
        conn.set_for_flag("-o", "auto.offset.reset", reset)?;
    }
    conn.props.set("group.id", group);
    warn_member_only_settings(
        &conn,
        &[
            PropertyScope::Transport,
            PropertyScope::Reader,
            PropertyScope::Group,
        ],
    );
    let transport = interrupt
        .or_exit("connecting to the cluster", conn.connected())
        .await?;
    let leaders = leaders_of(a, &transport).await;
    let brokers = brokers_of(&transport).await;
    let printed: Printed = Arc::default();
    // The -X group settings (session.timeout.ms...) apply; the commits are this command's.
    let mut member = GroupReaderBuilder::from_properties(transport, &conn.props)?
        .subscribe(a.topics.iter().cloned())
        .enable_auto_commit(false)
        .rebalance_listener(Arc::new(CommitOnRevoke(Arc::clone(&printed))))
        .build()?;
    // Say what it waits for: a first join can take seconds (the coordinator's
    // group.initial.rebalance.delay.ms; tansu holds a new member's JoinGroup about half its
    // session), then the assignment is printed by `read_group`.
    // Said once the settings passed the builder's checks.
    let session = conn.props.get("session.timeout.ms").unwrap_or("45000");
    eprintln!(
        "kafkit: joining group {group} (session.timeout.ms={session}; Ctrl-C leaves the group)..."
    );
    let watch = tokio::spawn(crate::reach::watch(brokers));
    let r = read_group(
        &mut member,
        a,
        format,
        &printed,
        progress,
        leaders,
        &mut interrupt,
    )
    .await;
    progress.finish();
    watch.abort();
    // Ending (at -c, -e, an error or Ctrl-C): commit what was printed and leave the group; a
    // (second) interrupt meanwhile exits at once.
    interrupt.exit_on_the_next();
    let committed = commit_printed(&member, &printed).await;
    member.close().await;
    r.and(committed)
}

async fn commit_printed(member: &GroupReader, printed: &Printed) -> CmdResult {
    let offsets = printed_offsets(printed, None);
    if offsets.is_empty() {
        return Ok(());
    }
    member
        .commit_offsets(&offsets)
        .await
        .map_err(|e| Failure::Error(format!("committing offsets: {}", crate::conn::describe(&e))))
}

async fn read_group(
    member: &mut GroupReader,
    a: &ConsumeArgs,
    format: &Format,
    printed: &Printed,
    progress: &Progress,
    leaders: HashMap<(String, i32), i32>,
    interrupt: &mut Interrupt,
) -> CmdResult {
    let mut p = Printer::new(a, format, progress, leaders);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut commit = tokio::time::interval(COMMIT_INTERVAL);
    commit.tick().await;
    let mut rebalances = 0;
    loop {
        say_assignment(member, &mut rebalances);
        if p.counted() || (a.exit_at_end && group_at_end(member)) {
            return Ok(());
        }
        let batch = tokio::select! {
            b = member.next_batch() => b?,
            _ = tick.tick() => continue,
            () = interrupt.recv() => return Ok(()),
            _ = commit.tick() => {
                commit_printed(member, printed).await?;
                continue;
            }
        };
        let mut done = Vec::new();
        for part in batch {
            let tp = (part.topic.to_string(), part.partition);
            if let Some(next) = p.part(part)? {
                done.push((tp, next));
            }
        }
        // Only records whose bytes reached stdout count as printed (and are committed): when
        // the reader of our output is gone (`| head -1`) this buffer's records were not shown.
        if !p.flush()? {
            return Ok(());
        }
        printed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(done);
    }
}

/// Prints the member's assignment on stderr after each rebalance it went through (`rebalances`
/// is the count already printed): `kafkit: group G (generation N): assigned t/0, t/1`.
fn say_assignment(member: &GroupReader, rebalances: &mut u64) {
    let stats = member.stats();
    if stats.rebalances <= *rebalances {
        return;
    }
    *rebalances = stats.rebalances;
    let mut owned = stats.assignment;
    owned.sort();
    let list = if owned.is_empty() {
        "nothing (the group has more members than partitions)".to_owned()
    } else {
        owned
            .iter()
            .map(|(t, p)| format!("{t}/{p}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!(
        "kafkit: group {} (generation {}): assigned {list}",
        member.group_id(),
        stats.generation
    );
}

/// Whether the member owns partitions and has read each to its end.
fn group_at_end(member: &GroupReader) -> bool {
    let owned = member.assignment();
    !owned.is_empty()
        && owned
            .iter()
            .all(|(t, p)| member.lag(t, *p).is_some_and(|l| l <= 0))
}

/// Whether every partition's position is at its high watermark (last stable offset under
/// read_committed), as the last Fetch answers said.
fn at_end(reader: &Reader, parts: &[((String, i32), StartOffset)]) -> bool {
    parts
        .iter()
        .all(|((t, p), _)| reader.lag(t, *p).is_some_and(|l| l <= 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_parse_as_kcat_takes_them() {
        assert_eq!(parse_start("beginning").ok(), Some(Start::Beginning));
        assert_eq!(parse_start("end").ok(), Some(Start::End));
        assert_eq!(parse_start("42").ok(), Some(Start::At(42)));
        assert_eq!(parse_start("-5").ok(), Some(Start::FromEnd(5)));
        assert_eq!(
            parse_start("@1700000000000").ok(),
            Some(Start::Timestamp(1_700_000_000_000))
        );
        assert_eq!(parse_start("s@17").ok(), Some(Start::Timestamp(17)));
        assert!(parse_start("soon").is_err());
        assert!(parse_start("-x").is_err());
    }
}
