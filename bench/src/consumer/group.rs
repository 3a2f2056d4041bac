//! `kafkit-bench consumer --group`: a group of `--members` (default 3) of this project's
//! [`kafkit::GroupReader`] against a group of as many librdkafka consumers (`BaseConsumer` with
//! `group.id`, `subscribe`), reading the same pre-filled topic (48 partitions by default) in the
//! same run.
//!
//! Each client run is a child process (`kafkit-bench group-read ...`) holding the whole group
//! (one connection set per member; librdkafka members are polled by a thread each, ours are
//! tasks on one multi-threaded tokio runtime) in a fresh group, so every member starts at the
//! earliest offset. A run has three phases, all timed from the moment the members are created:
//! 1. **join**: until every member has been given partitions (its assigned callback ran) and
//!    together they own every partition exactly once;
//! 2. **read**: the members read; once `--leave-at` of the records (default half) have been
//!    handed out, the last member leaves the group (ours: `GroupReader::close`, which commits and
//!    sends LeaveGroup; librdkafka: `close_queue`, polling until closed, which does the same);
//! 3. **rebalance**: from that leave until the remaining members own every partition between
//!    them (`owned`), and each of them has handed out a record since (`resumed`); they then read
//!    to the end.
//!
//! Every record is checked (its value byte for byte) and counted by its number, so the run
//! reports records handed out twice (a member left or lost partitions before committing them:
//! both clients commit on revoke and close, so this should be 0) and fails when one is missing.
//! Both clients get the same settings ([`GroupSettings`] and the consumer bench's
//! [`FetchSettings`](super::FetchSettings)); auto-commit is on with its default interval (5 s).

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};

use super::{ReadWorkload, STALL};
use crate::Client;
use crate::cpu::CpuTime;

/// Group settings applied to both clients (Java / librdkafka names in brackets).
#[derive(Args, Clone, Debug)]
pub struct GroupSettings {
    /// Members in each client's group.
    #[arg(long, default_value_t = 3)]
    pub members: usize,
    /// The assignor both clients offer [partition.assignment.strategy].
    #[arg(long, value_enum, default_value_t = Assignor::Range)]
    pub assignor: Assignor,
    /// Session timeout, ms [session.timeout.ms]. librdkafka's mock cluster waits this minus
    /// 1 s for members to rejoin after one leaves.
    #[arg(long, default_value_t = 6_000)]
    pub session_timeout_ms: u64,
    /// Heartbeat interval, ms [heartbeat.interval.ms]: how soon a member hears of a rebalance.
    #[arg(long, default_value_t = 500)]
    pub heartbeat_interval_ms: u64,
    /// The share of the records handed out when the last member leaves (0 to 1).
    #[arg(long, default_value_t = 0.5)]
    pub leave_at: f64,
}

impl GroupSettings {
    fn to_args(&self) -> Vec<String> {
        [
            ("--members", self.members.to_string()),
            ("--assignor", self.assignor.name().to_string()),
            ("--session-timeout-ms", self.session_timeout_ms.to_string()),
            (
                "--heartbeat-interval-ms",
                self.heartbeat_interval_ms.to_string(),
            ),
            ("--leave-at", self.leave_at.to_string()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_string(), v])
        .collect()
    }

    /// The record count after which the last member leaves.
    pub fn leave_after(&self, records: u64) -> u64 {
        ((records as f64) * self.leave_at.clamp(0.0, 1.0)) as u64
    }
}

/// An assignor both clients have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Assignor {
    /// `range` (eager).
    Range,
    /// `roundrobin` (eager).
    Roundrobin,
    /// `cooperative-sticky` (KIP-429: only what moves is revoked).
    CooperativeSticky,
}

impl Assignor {
    /// The protocol name (librdkafka's setting value).
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::Roundrobin => "roundrobin",
            Assignor::CooperativeSticky => "cooperative-sticky",
        }
    }
}

/// What one group run reads.
#[derive(Args, Clone, Debug)]
pub struct GroupWorkload {
    #[command(flatten)]
    pub read: ReadWorkload,
    /// The group id (fresh per run).
    #[arg(long)]
    pub group_id: String,
    #[command(flatten)]
    pub group: GroupSettings,
}

impl GroupWorkload {
    fn to_args(&self) -> Vec<String> {
        let mut a = self.read.to_args();
        a.extend(["--group-id".to_string(), self.group_id.clone()]);
        a.extend(self.group.to_args());
        a
    }
}

/// When the run's events happened, from the members' creation.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// Every member assigned, every partition owned once.
    pub assigned: Option<Duration>,
    /// The last member started to leave.
    pub leave: Option<Duration>,
    /// The remaining members own every partition.
    pub owned: Option<Duration>,
    /// ... and each has handed out a record since.
    pub resumed: Option<Duration>,
    /// The last record.
    pub done: Option<Duration>,
}

/// What the members of one run share: their assignments, the per-record tally, the timeline.
pub struct Progress {
    t0: Instant,
    partitions: i32,
    value: Vec<u8>,
    leave_after: u64,
    /// Per member: the partitions it owns (from its callbacks).
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
    /// Set when the members should stop (every record read, or one failed).
    stop: AtomicBool,
    /// Why a member failed.
    aborted: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Progress {
    /// The shared state of a run of `w`, its clock started now.
    pub fn new(w: &GroupWorkload) -> Progress {
        let n = w.group.members;
        Progress {
            t0: Instant::now(),
            partitions: w.read.partitions,
            value: crate::value_of(w.read.value_size),
            leave_after: w.group.leave_after(w.read.records),
            owned: Mutex::new(vec![BTreeSet::new(); n]),
            active: Mutex::new(vec![true; n]),
            resumed: Mutex::new(vec![false; n]),
            awaiting_resume: AtomicBool::new(false),
            timeline: Mutex::new(Timeline::default()),
            seen: (0..w.read.records).map(|_| AtomicU8::new(0)).collect(),
            distinct: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            bad: AtomicU64::new(0),
            first_error: Mutex::new(None),
            stop: AtomicBool::new(false),
            aborted: Mutex::new(None),
        }
    }

    /// Whether the members should stop reading and close.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Tells every member to stop.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// A member failed: the run stops and reports `why`.
    pub fn abort(&self, why: String) {
        lock(&self.aborted).get_or_insert(why);
        self.stop();
    }

    /// Blocks until every record was handed out, a member failed or nothing new came for
    /// [`STALL`] (polling every 10 ms); then tells the members to stop.
    ///
    /// Errors: why a member failed, or the stall.
    pub fn wait(&self) -> Result<(), String> {
        let mut last = (self.distinct(), Instant::now());
        let outcome = loop {
            if self.finished() {
                break Ok(());
            }
            if let Some(why) = lock(&self.aborted).clone() {
                break Err(why);
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
            std::thread::sleep(Duration::from_millis(10));
        };
        self.stop();
        outcome
    }

    /// Records in the topic.
    pub fn records(&self) -> u64 {
        self.seen.len() as u64
    }

    /// Records handed out at least once.
    pub fn distinct(&self) -> u64 {
        self.distinct.load(Ordering::Acquire)
    }

    /// Whether the last member should leave now (`member` is the last and the share is read).
    pub fn should_leave(&self, member: usize) -> bool {
        member + 1 == lock(&self.active).len() && self.distinct() >= self.leave_after
    }

    /// Whether every record was handed out.
    pub fn finished(&self) -> bool {
        self.distinct() >= self.records()
    }

    /// `member`'s callback added these partitions.
    pub fn assigned(&self, member: usize, partitions: impl IntoIterator<Item = i32>) {
        if let Some(o) = lock(&self.owned).get_mut(member) {
            o.extend(partitions);
        }
        self.check_ownership();
    }

    /// `member`'s callback took these partitions away.
    pub fn revoked(&self, member: usize, partitions: impl IntoIterator<Item = i32>) {
        if let Some(o) = lock(&self.owned).get_mut(member) {
            for p in partitions {
                o.remove(&p);
            }
        }
    }

    /// The last member starts to leave (before its close).
    pub fn leaving(&self, member: usize) {
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
    #[inline]
    pub fn record(&self, member: usize, partition: i32, offset: i64, value: Option<&[u8]>) {
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
            self.fail(format_args!(
                "partition {partition} offset {offset}: no such record"
            ));
            return;
        };
        if value != Some(self.value.as_slice()) {
            self.fail(format_args!(
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

    #[cold]
    fn note_resume(&self, member: usize) {
        let active = lock(&self.active).clone();
        let mut resumed = lock(&self.resumed);
        if let Some(r) = resumed.get_mut(member) {
            *r = true;
        }
        let all = resumed.iter().zip(&active).all(|(r, a)| *r || !*a);
        if all {
            self.awaiting_resume.store(false, Ordering::Release);
            let mut t = lock(&self.timeline);
            t.resumed.get_or_insert(self.t0.elapsed());
        }
    }

    #[cold]
    fn fail(&self, what: std::fmt::Arguments<'_>) {
        self.bad.fetch_add(1, Ordering::Relaxed);
        let mut first = lock(&self.first_error);
        if first.is_none() {
            *first = Some(what.to_string());
        }
    }

    /// The run's result.
    pub fn result(&self, cpu: CpuTime) -> GroupResult {
        let duplicates = self
            .seen
            .iter()
            .map(|n| u64::from(n.load(Ordering::Acquire).saturating_sub(1)))
            .sum();
        let missing = self.records() - self.distinct().min(self.records());
        let mut first_error = lock(&self.first_error).clone();
        if missing > 0 && first_error.is_none() {
            first_error = Some(format!("{missing} records never handed out"));
        }
        GroupResult {
            timeline: lock(&self.timeline).clone(),
            delivered: self.delivered.load(Ordering::Acquire),
            duplicates,
            failed: self.bad.load(Ordering::Acquire) + missing,
            first_error,
            cpu,
            version: None,
        }
    }
}

/// What one group run measured.
#[derive(Clone, Debug, Default)]
pub struct GroupResult {
    pub timeline: Timeline,
    /// Records handed out (duplicates included).
    pub delivered: u64,
    /// Extra deliveries of records handed out before.
    pub duplicates: u64,
    /// Wrong or missing records.
    pub failed: u64,
    pub first_error: Option<String>,
    /// CPU time of the child process over the whole run (all members).
    pub cpu: CpuTime,
    /// The library and its version, when the run says (the peers' `version=`).
    pub version: Option<String>,
}

const GROUP_PREFIX: &str = "GROUP ";

impl GroupResult {
    /// `GROUP key=value ...` for the parent (times in µs, `-` when the event did not happen).
    pub fn to_line(&self) -> String {
        let us =
            |d: Option<Duration>| d.map_or_else(|| "-".to_string(), |d| d.as_micros().to_string());
        let t = &self.timeline;
        let mut line = format!(
            "{GROUP_PREFIX}assigned={} leave={} owned={} resumed={} done={} delivered={} duplicates={} failed={} user_us={} sys_us={}",
            us(t.assigned),
            us(t.leave),
            us(t.owned),
            us(t.resumed),
            us(t.done),
            self.delivered,
            self.duplicates,
            self.failed,
            self.cpu.user.as_micros(),
            self.cpu.system.as_micros(),
        );
        if let Some(e) = &self.first_error {
            line.push_str(" error=");
            line.push_str(&e.replace('\n', " "));
        }
        line
    }

    fn parse(line: &str) -> Result<GroupResult, String> {
        let rest = line
            .strip_prefix(GROUP_PREFIX)
            .ok_or_else(|| format!("not a group result line: {line}"))?;
        let (fields, error) = match rest.split_once(" error=") {
            Some((f, e)) => (f, Some(e.to_string())),
            None => (rest, None),
        };
        let mut r = GroupResult {
            first_error: error,
            ..GroupResult::default()
        };
        for kv in fields.split_whitespace() {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("bad field {kv}"))?;
            let time = || v.parse::<u64>().ok().map(Duration::from_micros);
            let num = || v.parse::<u64>().map_err(|e| format!("bad {k}={v}: {e}"));
            match k {
                "assigned" => r.timeline.assigned = time(),
                "leave" => r.timeline.leave = time(),
                "owned" => r.timeline.owned = time(),
                "resumed" => r.timeline.resumed = time(),
                "done" => r.timeline.done = time(),
                "delivered" => r.delivered = num()?,
                "duplicates" => r.duplicates = num()?,
                "failed" => r.failed = num()?,
                "user_us" => r.cpu.user = Duration::from_micros(num()?),
                "sys_us" => r.cpu.system = Duration::from_micros(num()?),
                "version" => r.version = Some(v.to_string()),
                _ => {}
            }
        }
        Ok(r)
    }
}

/// Runs one client's group in a child process: `kafkit-bench group-read --client C ...`.
///
/// The clients that are programs of their own run their peer's `group` subcommand instead
/// ([`crate::external::run_group`]), which prints the same line.
pub fn run_child(client: Client, w: &GroupWorkload) -> Result<GroupResult, String> {
    if crate::external::is_external(client) {
        return GroupResult::parse(&crate::external::run_group(client, &w.to_args())?);
    }
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let mut args = vec![
        "group-read".to_string(),
        "--client".into(),
        client.name().into(),
    ];
    args.extend(w.to_args());
    let out = std::process::Command::new(exe)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("start the {} group run: {e}", client.name()))?;
    if !out.status.success() {
        return Err(format!(
            "the {} group run failed ({})",
            client.name(),
            out.status
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with(GROUP_PREFIX))
        .ok_or_else(|| format!("the {} group run printed no result", client.name()))?;
    GroupResult::parse(line)
}

/// One group run in the table.
pub struct GroupRow {
    pub case: &'static str,
    pub partitions: i32,
    pub client: Client,
    pub repeat: usize,
    pub records: u64,
    pub load: f64,
    pub result: Result<GroupResult, String>,
}

impl GroupRow {
    /// The row as JSON (`--json`): the case, the client, the group settings, the machine, the
    /// timeline (s) and the figures (records/s over the whole read, the rebalance included; CPU
    /// µs per record handed out).
    pub fn to_json(&self, w: &GroupSettings, broker: &str) -> serde_json::Value {
        let s = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        let head = serde_json::json!({
            "bench": "consumer-group",
            "unix_time": crate::json::now(),
            "commit": std::env::var("KAFKIT_BENCH_COMMIT").ok(),
            "machine": crate::json::machine(),
            "broker": broker,
            "case": self.case,
            "client": self.client.label(),
            "partitions": self.partitions,
            "records": self.records,
            "repeat": self.repeat,
            "settings": {
                "members": w.members,
                "leave_at": w.leave_at,
                "session_timeout_ms": w.session_timeout_ms,
                "heartbeat_interval_ms": w.heartbeat_interval_ms,
            },
        });
        let figures = match &self.result {
            Ok(r) => {
                let t = &r.timeline;
                let read = between(t.assigned, t.done);
                let cpu = (r.cpu.user + r.cpu.system).as_secs_f64();
                serde_json::json!({
                    "ok": r.failed == 0,
                    "version": r.version,
                    "error": r.first_error,
                    "delivered": r.delivered,
                    "failed": r.failed,
                    "duplicates": r.duplicates,
                    "join_s": s(t.assigned),
                    "rebalance_owned_s": s(between(t.leave, t.owned)),
                    "rebalance_resumed_s": s(between(t.leave, t.resumed)),
                    "all_read_s": s(read),
                    "records_per_s": read.map(|d| self.records as f64 / d.as_secs_f64().max(1e-9)),
                    "cpu_us_per_record": cpu * 1e6 / (r.delivered.max(1) as f64),
                })
            }
            Err(e) => serde_json::json!({ "ok": false, "error": e }),
        };
        crate::json::merge(&[head, figures])
    }
}

fn secs(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".into(), |d| format!("{:.2}", d.as_secs_f64()))
}

fn between(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    b?.checked_sub(a?)
}

/// Prints the settings and the table of group runs.
pub fn print_table(w: &GroupSettings, settings: &super::FetchSettings, rows: &[GroupRow]) {
    println!(
        "Group runs: {} members per client, each run in a fresh group; settings \
         (both clients): partition.assignment.strategy={}, session.timeout.ms={}, \
         heartbeat.interval.ms={}, enable.auto.commit=true (auto.commit.interval.ms=5000), \
         auto.offset.reset=earliest, fetch.max.wait.ms={}, max.partition.fetch.bytes={}, \
         queued.max.messages.kbytes={}; the last member leaves after {:.0}% of the records.",
        w.members,
        w.assignor.name(),
        w.session_timeout_ms,
        w.heartbeat_interval_ms,
        settings.fetch_max_wait_ms,
        settings.max_partition_fetch_bytes,
        settings.queued_max_kbytes,
        w.leave_at * 100.0
    );
    println!(
        "Times in seconds: join = members created -> all assigned; rebalance = leave -> the \
         others own every partition (owned) and each has handed out a record (resumed); \
         records/s over the whole read (all assigned -> last record, the rebalance included) \
         and over the read before the leave."
    );
    println!();
    println!(
        "| case | partitions | records | run | client | load | join (s) | records/s before the leave | rebalance: owned (s) | resumed (s) | all read (s) | records/s overall | duplicates | CPU µs / record |"
    );
    println!(
        "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for row in rows {
        let head = format!(
            "| {} | {} | {} | {} | {} | {:.1} |",
            row.case,
            row.partitions,
            row.records,
            row.repeat + 1,
            row.client.name(),
            row.load
        );
        match &row.result {
            Ok(r) => {
                let t = &r.timeline;
                let before = between(t.assigned, t.leave)
                    .map(|d| (w.leave_after(row.records) as f64) / d.as_secs_f64().max(1e-9));
                let read = between(t.assigned, t.done);
                let overall = read.map(|d| row.records as f64 / d.as_secs_f64().max(1e-9));
                let cpu = (r.cpu.user + r.cpu.system).as_secs_f64();
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
                    "{head} {} | {} | {} | {} | {}{bad} | {} | {} | {:.2} |",
                    secs(t.assigned),
                    before.map_or_else(|| "-".into(), |v| format!("{v:.0}")),
                    secs(between(t.leave, t.owned)),
                    secs(between(t.leave, t.resumed)),
                    secs(read),
                    overall.map_or_else(|| "-".into(), |v| format!("{v:.0}")),
                    r.duplicates,
                    cpu * 1e6 / (r.delivered.max(1) as f64),
                );
            }
            Err(e) => println!("{head} failed: {} | | | | | | | |", e.replace('|', "/")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_line_reads_back() {
        let r = GroupResult {
            timeline: Timeline {
                assigned: Some(Duration::from_millis(3_100)),
                leave: Some(Duration::from_millis(4_000)),
                owned: None,
                resumed: None,
                done: Some(Duration::from_millis(9_000)),
            },
            delivered: 10,
            duplicates: 1,
            failed: 2,
            first_error: Some("partition 3 offset 4: another value".into()),
            cpu: CpuTime::default(),
            version: None,
        };
        let back = GroupResult::parse(&r.to_line()).expect("parse");
        assert_eq!(back.timeline.assigned, r.timeline.assigned);
        assert_eq!(back.timeline.owned, None);
        assert_eq!(back.timeline.done, r.timeline.done);
        assert_eq!((back.delivered, back.duplicates, back.failed), (10, 1, 2));
        assert_eq!(back.first_error, r.first_error);
    }

    #[test]
    fn a_peer_line_with_a_version_reads_back() {
        let line = "GROUP assigned=3000000 leave=4000000 owned=4500000 resumed=4600000 \
                    done=9000000 delivered=100 duplicates=0 failed=0 user_us=5 sys_us=6 \
                    version=franz-go@v1.22.3";
        let r = GroupResult::parse(line).expect("parse");
        assert_eq!(r.version.as_deref(), Some("franz-go@v1.22.3"));
        assert_eq!(r.timeline.resumed, Some(Duration::from_millis(4_600)));
        assert_eq!(r.cpu.system, Duration::from_micros(6));
        assert_eq!(r.first_error, None);
    }
}
