//! The demo's group phase: after the [`Reader`](kafkit::Reader) read-back, `--group-members`
//! members of one consumer group ([`GroupReader`], the classic protocol with the
//! cooperative-sticky assignor, one [`Transport`] each) read every demo topic back
//! concurrently. Each record is compared with the one written and counted by its number, so
//! the phase checks that every record was handed out exactly once across the members
//! (commits and revocations included, should a rebalance happen while they read).
//!
//! Two choices keep a rebalance from handing out records twice, as a real application would
//! make them:
//! - The members start reading once the group is assembled: every member has joined the same
//!   generation (a member's own task joins the group; nothing is read before the application
//!   polls). A member that joins after others started reading makes the group rebalance, and
//!   what was read but not committed yet is read again by the partition's next owner unless
//!   the revocation's commit is accepted.
//! - Cooperative-sticky (KIP-429) rather than the default eager `range`: a rebalance takes
//!   from a member only the partitions that move, after the new assignment is known, and the
//!   member commits them then. With an eager assignor every member gives up everything when a
//!   rebalance starts and commits while the group is rebalancing: Apache Kafka accepts that
//!   commit from the ending generation, librdkafka's mock cluster refuses it
//!   (REBALANCE_IN_PROGRESS), so on the mock every record not committed yet was read twice.
//!
//! librdkafka's mock cluster also waits 3 s for a new group's first members, and then the
//! session timeout minus 1 s for the members to rejoin at every later rebalance (it does not
//! end a rebalance when every member has rejoined, as Kafka does). A follower whose SyncGroup
//! reaches it after the leader's is refused and rejoins, so on a loaded machine assembling the
//! group can take one such wait more.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kafkit::group_balancer::{CooperativeStickyAssignor, GroupBalancer};
use kafkit::{AutoOffsetReset, Dialer, GroupHandle, GroupReader, Reader, Transport};
use tokio::sync::watch;

use crate::{Args, DemoResult, Slot, same_record};

/// Longest wait for the group to hand out one more record before the demo gives up.
const STALL: Duration = Duration::from_secs(30);

/// Longest wait for the group to assemble before the members read anyway.
const ASSEMBLE: Duration = Duration::from_secs(60);

/// The members' session timeout: Kafka's smallest by default (`group.min.session.timeout.ms`),
/// which also shortens the mock's wait for rejoining members to 5 s.
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

/// What one member read.
pub(crate) struct MemberReport {
    /// The partitions it owned at the end (slot indices, sorted).
    pub(crate) assignment: Vec<usize>,
    /// Partitions it read records of (differs from `assignment` only after a rebalance).
    pub(crate) read_from: BTreeSet<usize>,
    /// Records handed out to it (duplicates included).
    pub(crate) records: usize,
    /// Records that differed from the ones written.
    pub(crate) mismatches: usize,
    /// Joins it completed (1 when the group never rebalanced).
    pub(crate) rebalances: u64,
    /// The generation it ended in.
    pub(crate) generation: i32,
    /// From its `build` to its first assignment.
    pub(crate) first_assignment: Option<Duration>,
    /// The assignor the coordinator chose.
    pub(crate) protocol: Option<String>,
    /// The generation it had joined when the members were told to read.
    pub(crate) start_generation: i32,
}

/// What the group phase measured.
pub(crate) struct GroupReport {
    pub(crate) group_id: String,
    pub(crate) members: Vec<MemberReport>,
    /// Records handed out more than once (the extra deliveries).
    pub(crate) duplicates: usize,
    /// Records no member handed out.
    pub(crate) missing: usize,
    /// From starting the members to every member joined in one generation (or
    /// [`ASSEMBLE`]), when they were told to read.
    pub(crate) assemble_time: Duration,
    /// Whether the group was assembled then (false: the wait ran out and they read anyway).
    pub(crate) assembled: bool,
    /// From telling the members to read to the last record handed out.
    pub(crate) read_time: Duration,
}

impl GroupReport {
    /// Every record handed out exactly once, and each equal to the one written.
    pub(crate) fn exactly_once(&self) -> bool {
        self.duplicates == 0 && self.at_least_once()
    }

    /// Every record handed out, each equal to the one written.
    pub(crate) fn at_least_once(&self) -> bool {
        self.missing == 0 && self.members.iter().all(|m| m.mismatches == 0)
    }

    /// Whether the group rebalanced after the members started reading.
    pub(crate) fn rebalanced(&self) -> bool {
        self.members
            .iter()
            .any(|m| m.generation != m.start_generation)
    }

    /// The demo's verdict: every record exactly once; or, when the group rebalanced while the
    /// members read, at least once. A rebalance re-reads what was not committed yet when the
    /// revocation's commit is refused (librdkafka's mock cluster refuses every OffsetCommit
    /// while a group rebalances, which matters to eager assignors only), and the automatic
    /// commit every 5 s has not run yet in a read this short.
    pub(crate) fn passed(&self) -> bool {
        self.exactly_once() || (self.rebalanced() && self.at_least_once())
    }
}

/// What the members share: per record number, how many times it was handed out.
struct Tally {
    seen: Vec<AtomicU8>,
    /// Records handed out at least once.
    distinct: AtomicUsize,
}

/// Starts the members, reads until every record was handed out, closes them (each commits
/// and leaves the group) and counts.
pub(crate) async fn read_back(
    args: &Args,
    bootstrap: &str,
    topics: &[String],
    slots: &[Slot],
    base_ts: i64,
    stamp: u128,
) -> DemoResult<GroupReport> {
    let group_id = format!("demo-{stamp}");
    let tally = Arc::new(Tally {
        seen: (0..args.records).map(|_| AtomicU8::new(0)).collect(),
        distinct: AtomicUsize::new(0),
    });
    let (done_tx, done_rx) = watch::channel(false);
    let (go_tx, go_rx) = watch::channel(false);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut handles = Vec::new();
    for m in 0..args.group_members {
        let transport = Transport::builder(bootstrap.split(',').map(str::trim))
            .dialer(
                Dialer::builder()
                    .client_id(format!("kafkit-demo-{m}"))
                    .build(),
            )
            .build()?;
        // Cooperative-sticky only: were `range` offered first (the default), the mock would
        // choose it, as it takes the leader's first protocol.
        let member = GroupReader::builder(transport.clone(), group_id.clone())
            .subscribe(topics.iter().cloned())
            .partition_assignment_strategy([
                Arc::new(CooperativeStickyAssignor::new()) as Arc<dyn GroupBalancer>
            ])
            .session_timeout(SESSION_TIMEOUT)
            .heartbeat_interval(Duration::from_secs(1))
            .reader(
                Reader::builder(transport)
                    .fetch_max_wait(Duration::from_millis(500))
                    .auto_offset_reset(AutoOffsetReset::Earliest),
            )
            .build()?;
        let job = MemberJob {
            index: tasks.len(),
            slots: slots
                .iter()
                .map(|s| (s.topic.clone(), s.partition))
                .collect(),
            stride: slots.len(),
            value_size: args.value_size,
            base_ts,
            tally: Arc::clone(&tally),
            done: done_rx.clone(),
            go: go_rx.clone(),
        };
        handles.push(member.handle());
        tasks.spawn(job.run(member));
    }
    // Let the members join, then tell them all to read.
    let assembled = assemble(&handles).await?;
    let assemble_time = started.elapsed();
    let reading = Instant::now();
    let _ = go_tx.send(true);
    // Wait until every record was handed out (or a member failed), then stop them all.
    let mut last = (0, Instant::now());
    let mut failure = None;
    loop {
        let distinct = tally.distinct.load(Ordering::Acquire);
        if distinct >= args.records {
            break;
        }
        if distinct > last.0 {
            last = (distinct, Instant::now());
        } else if last.1.elapsed() > STALL {
            failure = Some(format!(
                "the group handed out {distinct} of {} records (nothing new for {STALL:?})",
                args.records
            ));
            break;
        }
        if tasks.len() < args.group_members {
            failure = Some("a group member stopped before every record was read".to_string());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let read_time = reading.elapsed();
    let _ = done_tx.send(true);
    let mut members = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined? {
            Ok(m) => members.push(m),
            Err(e) => failure = Some(failure.unwrap_or_else(|| e.to_string())),
        }
    }
    if let Some(f) = failure {
        return Err(f.into());
    }
    members.sort_by_key(|(i, _)| *i);
    let (mut duplicates, mut missing) = (0, 0);
    for n in &tally.seen {
        match n.load(Ordering::Acquire) {
            0 => missing += 1,
            k => duplicates += usize::from(k - 1),
        }
    }
    Ok(GroupReport {
        group_id,
        members: members.into_iter().map(|(_, m)| m).collect(),
        duplicates,
        missing,
        assemble_time,
        assembled,
        read_time,
    })
}

/// Waits until every member has joined the same generation, or [`ASSEMBLE`] passed (then
/// they read anyway; the cooperative protocol keeps a later rebalance from reading twice).
/// Returns whether the group was assembled.
///
/// The members' own tasks join; a rebalance step (assign, revoke) waits for the member's next
/// poll. A member whose cooperative revocation waits for that poll counts as joined: once
/// they read, it finishes the revocation, and the partitions it gives up move at the next
/// generation while the others read.
async fn assemble(handles: &[GroupHandle]) -> DemoResult<bool> {
    let deadline = Instant::now() + ASSEMBLE;
    loop {
        let stats: Vec<_> = handles.iter().map(GroupHandle::stats).collect();
        let generation = stats.first().map_or(-1, |s| s.generation);
        if generation >= 0
            && stats
                .iter()
                .all(|s| s.state == "stable" && s.generation == generation)
        {
            return Ok(true);
        }
        if let Some((i, s)) = stats
            .iter()
            .enumerate()
            .find(|(_, s)| s.state == "failed" || s.state == "closed")
        {
            return Err(format!(
                "group member {} stopped ({}) before the group was assembled",
                i + 1,
                s.state
            )
            .into());
        }
        if Instant::now() > deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One member's read loop and what it needs to check records.
struct MemberJob {
    index: usize,
    /// Per slot: (topic, partition).
    slots: Vec<(String, i32)>,
    stride: usize,
    value_size: usize,
    base_ts: i64,
    tally: Arc<Tally>,
    done: watch::Receiver<bool>,
    /// Set when the group is assembled: the member starts reading.
    go: watch::Receiver<bool>,
}

/// What a member's task ends with: its index and report, or why it failed.
type MemberOutcome = Result<(usize, MemberReport), Box<dyn std::error::Error + Send + Sync>>;

impl MemberJob {
    /// Reads batches until told to stop, then closes the member (auto-commit, LeaveGroup).
    async fn run(mut self, mut member: GroupReader) -> MemberOutcome {
        let mut report = MemberReport {
            assignment: Vec::new(),
            read_from: BTreeSet::new(),
            records: 0,
            mismatches: 0,
            rebalances: 0,
            generation: -1,
            first_assignment: None,
            protocol: None,
            start_generation: -1,
        };
        let (mut done, mut go) = (self.done.clone(), self.go.clone());
        let told_to_read = tokio::select! {
            _ = done.wait_for(|d| *d) => false,
            _ = go.wait_for(|g| *g) => true,
        };
        let outcome = if told_to_read {
            report.start_generation = member.stats().generation;
            self.read(&mut member, &mut report).await
        } else {
            Ok(())
        };
        let stats = member.stats();
        report.assignment = stats
            .assignment
            .iter()
            .filter_map(|(t, p)| self.slot_of(t, *p))
            .collect();
        report.rebalances = stats.rebalances;
        report.generation = stats.generation;
        report.first_assignment = stats.first_assignment;
        report.protocol = stats.protocol;
        member.close().await;
        outcome.map(|()| (self.index, report))
    }

    async fn read(
        &mut self,
        member: &mut GroupReader,
        report: &mut MemberReport,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        loop {
            let parts = tokio::select! {
                _ = self.done.wait_for(|d| *d) => return Ok(()),
                batch = tokio::time::timeout(STALL, member.next_batch()) => match batch {
                    Ok(b) => b?,
                    // Idle: the others may still be reading (or waiting for their share).
                    Err(_) => continue,
                },
            };
            for part in &parts {
                let Some(s) = self.slot_of(&part.topic, part.partition) else {
                    return Err(format!(
                        "member {} got {}/{}, which the demo did not write",
                        self.index + 1,
                        part.topic,
                        part.partition
                    )
                    .into());
                };
                report.read_from.insert(s);
                for r in &part.records {
                    report.records += 1;
                    let Some(i) = usize::try_from(r.offset)
                        .ok()
                        .map(|k| s + k * self.stride)
                        .filter(|i| *i < self.tally.seen.len())
                    else {
                        report.mismatches += 1;
                        continue;
                    };
                    if !same_record(r, i, self.base_ts, self.value_size) {
                        report.mismatches += 1;
                        if report.mismatches <= 5 {
                            eprintln!(
                                "member {}: {}/{} offset {} differs from record {i} as written",
                                self.index + 1,
                                part.topic,
                                part.partition,
                                r.offset
                            );
                        }
                    }
                    if self.tally.seen[i].fetch_add(1, Ordering::AcqRel) == 0 {
                        self.tally.distinct.fetch_add(1, Ordering::AcqRel);
                    }
                }
            }
        }
    }

    fn slot_of(&self, topic: &str, partition: i32) -> Option<usize> {
        self.slots
            .iter()
            .position(|(t, p)| t == topic && *p == partition)
    }
}

/// `0-2,5` for the sorted partitions `[0, 1, 2, 5]`.
fn ranges(parts: &[i32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < parts.len() {
        let mut j = i;
        while j + 1 < parts.len() && parts[j + 1] == parts[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            parts[i].to_string()
        } else {
            format!("{}-{}", parts[i], parts[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// The member's partitions as `t0:0-2 t1:0-2` (topic index, partitions).
fn describe(assignment: &[usize], slots: &[Slot], topics: &[String]) -> String {
    let mut out = Vec::new();
    for (t, name) in topics.iter().enumerate() {
        let mut parts: Vec<i32> = assignment
            .iter()
            .filter_map(|s| slots.get(*s))
            .filter(|s| &s.topic == name)
            .map(|s| s.partition)
            .collect();
        parts.sort_unstable();
        if !parts.is_empty() {
            out.push(format!("t{t}:{}", ranges(&parts)));
        }
    }
    if out.is_empty() {
        "(none)".to_string()
    } else {
        out.join(" ")
    }
}

/// Prints the group phase: one line per member, then the totals.
pub(crate) fn print(g: &GroupReport, slots: &[Slot], topics: &[String]) {
    println!();
    let names: Vec<String> = topics
        .iter()
        .enumerate()
        .map(|(i, t)| format!("t{i} = {t}"))
        .collect();
    let protocol = g
        .members
        .iter()
        .find_map(|m| m.protocol.clone())
        .unwrap_or_else(|| "?".into());
    println!(
        "group read-back: {} members of group {} ({protocol} assignor; {})",
        g.members.len(),
        g.group_id,
        names.join(", ")
    );
    println!(
        "{:<7} {:<28} {:>9} {:>10} {:>11} {:>12}",
        "member", "partitions (at the end)", "records", "joined in", "generation", "rebalances"
    );
    for (i, m) in g.members.iter().enumerate() {
        let mut parts = describe(&m.assignment, slots, topics);
        let moved: Vec<usize> = m
            .read_from
            .iter()
            .filter(|s| !m.assignment.contains(s))
            .copied()
            .collect();
        if !moved.is_empty() {
            parts.push_str(&format!(" (also read {})", describe(&moved, slots, topics)));
        }
        println!(
            "{:<7} {:<28} {:>9} {:>10} {:>11} {:>12}",
            i + 1,
            parts,
            m.records,
            m.first_assignment
                .map_or_else(|| "-".into(), |d| format!("{:.2} s", d.as_secs_f64())),
            m.generation,
            m.rebalances
        );
    }
    let handed_out: usize = g.members.iter().map(|m| m.records).sum();
    let mismatches: usize = g.members.iter().map(|m| m.mismatches).sum();
    let generation = g
        .members
        .iter()
        .map(|m| m.start_generation)
        .max()
        .unwrap_or(-1);
    if g.assembled {
        println!(
            "group assembled in {:.2} s (every member joined generation {generation}); nobody \
             read a record before",
            g.assemble_time.as_secs_f64()
        );
    } else {
        println!(
            "group not assembled after {:.0} s: the members read anyway",
            g.assemble_time.as_secs_f64()
        );
    }
    println!(
        "group: {handed_out} records handed out in {:.3} s of reading: {} duplicates, {} \
         missing, {mismatches} mismatches{}",
        g.read_time.as_secs_f64(),
        g.duplicates,
        g.missing,
        if g.exactly_once() {
            "; every record read exactly once"
        } else {
            ""
        }
    );
}

#[cfg(test)]
mod tests {
    use super::ranges;

    #[test]
    fn ranges_join_consecutive_partitions() {
        assert_eq!(ranges(&[]), "");
        assert_eq!(ranges(&[3]), "3");
        assert_eq!(ranges(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
    }
}
