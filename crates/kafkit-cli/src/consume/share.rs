//! `kafkit consume --share-group GROUP TOPIC...`: a member of a KIP-932 share group, a
//! `kafkit::ShareReader` in explicit acknowledgement mode. The group hands each record to one
//! of its members; this one writes the records of each poll to stdout, then accepts those whose
//! bytes reached stdout and releases the others (the reader of the output gone, a write that
//! failed, those past `-c`), and commits the acknowledgements before it polls again. At `-c`,
//! on Ctrl-C or to a closed pipe it closes, which releases what it fetched and did not print:
//! the next member gets those records, their delivery count (`%d`) one higher.
//!
//! A share group has no offsets per member: `-o`, `-p`, `-e` and `--isolation` are refused (the
//! group's configs `share.auto.offset.reset` and `share.isolation.level` say where it starts and
//! what it reads).

use std::sync::Arc;
use std::time::Duration;

use kafkit::properties::{PropertyScope, lookup};
use kafkit::{AcknowledgeType, ShareError, ShareReader, ShareReaderBuilder, ShareRecord};

use super::{ConsumeArgs, Printer, brokers_of, leaders_of};
use crate::conn::Conn;
use crate::format::Format;
use crate::interrupt::Interrupt;
use crate::out::Progress;
use crate::{CmdResult, Failure};

/// How long one poll waits for records before the loop checks again.
const POLL: Duration = Duration::from_secs(1);

/// The most records one poll asks for when `-c` asks for fewer (Java's `max.poll.records`
/// default): what a poll fetches past the count is released, so it asks for no more.
const MAX_POLL_RECORDS: u64 = 500;

/// Runs `kafkit consume --share-group GROUP TOPIC...`.
pub(super) async fn run(
    conn: &Conn,
    a: &ConsumeArgs,
    group: &str,
    format: &Format,
    progress: &Progress,
    mut interrupt: Interrupt,
) -> CmdResult {
    refuse_flags(a)?;
    let mut conn = conn.clone();
    conn.set_for_flag("--share-group", "group.id", group)?;
    // A record is accepted once it was printed, so acknowledgements are the command's.
    if let Some(mode) = conn.props.get("share.acknowledgement.mode")
        && !mode.eq_ignore_ascii_case("explicit")
    {
        return Err(Failure::Usage(format!(
            "--share-group accepts each record once it is printed \
             (share.acknowledgement.mode=explicit), but -X or -F set \
             share.acknowledgement.mode={mode}: leave it out"
        )));
    }
    conn.props.set("share.acknowledgement.mode", "explicit");
    if let Some(n) = a.count
        && conn.props.get("max.poll.records").is_none()
    {
        conn.props
            .set("max.poll.records", n.clamp(1, MAX_POLL_RECORDS).to_string());
    }
    warn_ignored_settings(&conn);
    let transport = interrupt
        .or_exit("connecting to the cluster", conn.connected())
        .await?;
    let leaders = leaders_of(a, &transport).await;
    let brokers = brokers_of(&transport).await;
    let mut member = ShareReaderBuilder::from_properties(transport, &conn.props)?
        .topics(a.topics.iter().cloned())
        .build()?;
    eprintln!("kafkit: joining share group {group} (Ctrl-C leaves the group)...");
    let watch = tokio::spawn(crate::reach::watch(brokers));
    let mut p = Printer::new(a, format, progress, leaders);
    let r = read(&mut member, &mut p, conn.timeout, &mut interrupt).await;
    progress.finish();
    watch.abort();
    // Ending (at -c, an error, a closed pipe or Ctrl-C): leave the group, releasing what was
    // fetched and not printed; a (second) interrupt meanwhile exits at once.
    interrupt.exit_on_the_next();
    let closed = member.close(conn.timeout).await.map_err(Failure::from);
    r.and(closed)
}

/// The flags of a consumer that reads partitions from offsets it chooses: a share group
/// member reads what the group hands it.
fn refuse_flags(a: &ConsumeArgs) -> CmdResult {
    let why = if !a.partitions.is_empty() {
        "-p: the share group's coordinator assigns the TOPICs' partitions to its members"
    } else if a.offset.is_some() {
        "-o: a share group starts where its config share.auto.offset.reset says (latest \
         unless set; `kafkit share-groups reset-offsets` moves an empty group's start), and \
         each member reads what the group hands it"
    } else if a.exit_at_end {
        "-e: a share group member has no end of partition to reach (records come as the group \
         hands them out, and other members may hold the rest): use -c COUNT, or Ctrl-C"
    } else if a.isolation.is_some() {
        "--isolation: a share group's isolation level is its config share.isolation.level"
    } else {
        return Ok(());
    };
    Err(Failure::Usage(format!("--share-group does not take {why}")))
}

/// Says on stderr which settings given a share group member does not read (a Reader's,
/// a consumer group's), as `consume` without a group does for the group's.
fn warn_ignored_settings(conn: &Conn) {
    let reads = [PropertyScope::Transport, PropertyScope::Share];
    let mut names: Vec<&str> = Vec::new();
    for (name, _) in conn.props.iter() {
        let consumer_only = lookup(name).is_some_and(|i| {
            !i.scopes.iter().any(|s| reads.contains(s))
                && i.scopes
                    .iter()
                    .any(|s| matches!(s, PropertyScope::Reader | PropertyScope::Group))
        });
        if consumer_only && !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        return;
    }
    let hint = if names.iter().any(|n| {
        ["auto.offset.reset", "isolation.level"].contains(&lookup(n).map_or(*n, |i| i.name))
    }) {
        " (a share group's start and isolation level are its configs share.auto.offset.reset \
         and share.isolation.level)"
    } else {
        ""
    };
    eprintln!(
        "kafkit: warning: {} does not apply to a share group member: ignored{hint}",
        names.join(", ")
    );
}

/// Polls, prints, acknowledges and commits until `-c`'s count, Ctrl-C, or the reader of the
/// output is gone.
async fn read(
    member: &mut ShareReader,
    p: &mut Printer<'_>,
    timeout: Duration,
    interrupt: &mut Interrupt,
) -> CmdResult {
    let mut assigned = Vec::new();
    loop {
        if p.counted() {
            return Ok(());
        }
        let records = tokio::select! {
            r = member.poll(POLL) => r,
            () = interrupt.recv() => return Ok(()),
        };
        let records = match records {
            Ok(records) => records,
            // Only a stdout that blocked for max.poll.interval.ms: the member joins again.
            Err(e @ kafkit::Error::Share(ShareError::MaxPollIntervalExceeded { .. })) => {
                eprintln!("kafkit: warning: {e}");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        say_assignment(member, &mut assigned);
        if records.is_empty() {
            continue;
        }
        let written = print(member, p, &records);
        commit(member, timeout).await?;
        if !written? {
            return Ok(());
        }
    }
}

/// Writes `records` (those within `-c`'s count) to stdout, then acknowledges each: accepted
/// when its bytes reached stdout, else released to the group. Returns whether stdout is still
/// read (`false`: its reader is gone).
fn print(
    member: &ShareReader,
    p: &mut Printer<'_>,
    records: &[ShareRecord],
) -> Result<bool, Failure> {
    let mut formatted = 0;
    let mut failed = None;
    for r in records {
        if p.counted() {
            break;
        }
        if let Err(e) = p.record(r, Some(r.delivery_count())) {
            failed = Some(e);
            break;
        }
        formatted += 1;
    }
    let written = match failed {
        Some(e) => Err(e),
        None => p.flush(),
    };
    let (shown, rest) = records.split_at(formatted);
    let how = if matches!(written, Ok(true)) {
        AcknowledgeType::Accept
    } else {
        AcknowledgeType::Release
    };
    for r in shown {
        member.acknowledge(r, how)?;
    }
    for r in rest {
        member.acknowledge(r, AcknowledgeType::Release)?;
    }
    written
}

/// Sends the acknowledgements and waits for the answers; one the broker did not take is said
/// on stderr (those records, printed, will be delivered again).
async fn commit(member: &mut ShareReader, timeout: Duration) -> CmdResult {
    for outcome in member.commit(timeout).await? {
        if let Err(e) = &outcome.result {
            let offsets = match (outcome.offsets.first(), outcome.offsets.last()) {
                (Some(a), Some(b)) if a != b => format!(" offsets {a}..={b}"),
                (Some(a), _) => format!(" offset {a}"),
                _ => String::new(),
            };
            eprintln!(
                "kafkit: warning: share group {}: {}/{}{offsets}: the acknowledgement was not \
                 taken ({}); the group delivers those records again",
                member.group_id(),
                outcome.topic,
                outcome.partition,
                crate::conn::describe(e)
            );
        }
    }
    Ok(())
}

/// Prints the partitions the member fetches from on stderr when they change (`last`: those
/// printed before): `kafkit: share group G: assigned t/0, t/1`.
fn say_assignment(member: &ShareReader, last: &mut Vec<(Arc<str>, i32)>) {
    let mut now = member.assignment();
    now.sort();
    if now == *last {
        return;
    }
    let list = if now.is_empty() {
        "nothing".to_owned()
    } else {
        now.iter()
            .map(|(t, p)| format!("{t}/{p}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!("kafkit: share group {}: assigned {list}", member.group_id());
    *last = now;
}
