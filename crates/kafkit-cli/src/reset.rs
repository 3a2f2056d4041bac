//! What `groups reset-offsets` and `share-groups reset-offsets` share: the scope and target
//! arguments, the partitions they name, the plan (each partition's new offset, from
//! ListOffsets) and its output. A consumer group's current offset is its committed offset; a
//! share group's is its start offset (KIP-932). What differs stays with each command: the check
//! that the group is inactive, where the current offsets come from, and the request that applies
//! the plan (OffsetCommit or AlterShareGroupOffsets).

use std::collections::BTreeMap;

use clap::Args;
use kafkit::{Client, IsolationLevel, OffsetSpec};
use serde_json::json;

use crate::out::{Table, opt, print_json};
use crate::{CmdResult, Failure};

/// `(topic, partition)`.
pub type Tp = (String, i32);

/// Where `reset-offsets` moves each partition.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct ResetTo {
    /// To each partition's log start offset.
    #[arg(long)]
    to_earliest: bool,
    /// To each partition's end offset.
    #[arg(long)]
    to_latest: bool,
    /// To this offset (kept within each partition's earliest..=latest).
    #[arg(long, value_name = "OFFSET")]
    to_offset: Option<i64>,
    /// To the first offset at or after this time: ms since the epoch, or
    /// YYYY-MM-DDTHH:MM:SS[.sss] (UTC, an optional trailing Z).
    #[arg(long, value_name = "TIME")]
    to_datetime: Option<String>,
    /// By N from the current offset (a consumer group's committed offset, a share group's
    /// start offset; negative: back; kept within earliest..=latest).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    shift_by: Option<i64>,
}

/// The partitions, target and mode of a `reset-offsets`: everything but the group.
#[derive(Debug, Args)]
pub struct ResetScope {
    /// A topic, or TOPIC:P,P for some of its partitions (repeatable).
    #[arg(
        long = "topic",
        value_name = "TOPIC[:P,P]",
        required_unless_present = "all_topics"
    )]
    topics: Vec<String>,
    /// Every topic the group has offsets for (committed offsets; a share group's start
    /// offsets).
    #[arg(long, conflicts_with = "topics")]
    all_topics: bool,
    #[command(flatten)]
    to: ResetTo,
    /// Apply the new offsets (without it: a dry run that changes nothing).
    #[arg(long)]
    pub execute: bool,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

/// How a reset names the group's offsets in its table and messages.
#[derive(Debug)]
pub struct ResetWords {
    /// The header of the current offset's column (`CURRENT`, `START-OFFSET`).
    pub current: &'static str,
    /// The header of the new offset's column.
    pub new: &'static str,
    /// What the group's offsets are, e.g. "committed offsets".
    pub offsets: &'static str,
    /// What `--execute` does with the plan, e.g. "commit these offsets".
    pub apply: &'static str,
}

/// One partition's plan.
#[derive(Debug)]
pub struct Plan {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The group's current offset there, when it has one.
    pub current: Option<i64>,
    /// The new offset, or why there is none.
    pub new: Result<i64, String>,
}

/// A reset's arguments, checked before the cluster is asked anything (usage errors, exit 2).
#[derive(Debug)]
pub struct Parsed {
    /// The topics named, each with the partitions named (none: all of them).
    named: Vec<(String, Vec<i32>)>,
    /// `--to-datetime` in ms since the epoch.
    at_ms: Option<i64>,
}

impl ResetScope {
    /// Checks the topics and the time given.
    ///
    /// # Errors
    ///
    /// [`Failure::Usage`] for a bad `--topic` or `--to-datetime`.
    pub fn parse(&self) -> Result<Parsed, Failure> {
        let named = self
            .topics
            .iter()
            .map(|s| parse_topic(s))
            .collect::<Result<_, _>>()?;
        let at_ms = self
            .to
            .to_datetime
            .as_deref()
            .map(parse_datetime)
            .transpose()?;
        Ok(Parsed { named, at_ms })
    }
}

/// `--topic TOPIC[:P,P]`.
fn parse_topic(s: &str) -> Result<(String, Vec<i32>), Failure> {
    let Some((t, ps)) = s.split_once(':') else {
        return Ok((s.to_owned(), Vec::new()));
    };
    let parts = ps
        .split(',')
        .map(|p| p.trim().parse::<i32>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| {
            Failure::Usage(format!(
                "--topic {s:?}: expected TOPIC or TOPIC:P,P with partition numbers"
            ))
        })?;
    if t.is_empty() {
        return Err(Failure::Usage(format!("--topic {s:?}: no topic name")));
    }
    Ok((t.to_owned(), parts))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `--to-datetime`: ms since the epoch, or `YYYY-MM-DDTHH:MM:SS[.sss][Z]` in UTC.
///
/// # Errors
///
/// [`Failure::Usage`] for any other text.
pub fn parse_datetime(s: &str) -> Result<i64, Failure> {
    let bad = || {
        Failure::Usage(format!(
            "--to-datetime {s:?}: expected ms since the epoch or YYYY-MM-DDTHH:MM:SS[.sss] (UTC)"
        ))
    };
    if let Ok(ms) = s.parse::<i64>() {
        return if ms >= 0 { Ok(ms) } else { Err(bad()) };
    }
    let s2 = s.strip_suffix('Z').unwrap_or(s);
    let (date, time) = s2.split_once('T').ok_or_else(bad)?;
    let num = |x: &str, len: usize| -> Result<i64, Failure> {
        if x.len() != len || !x.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        x.parse().map_err(|_| bad())
    };
    let d: Vec<&str> = date.split('-').collect();
    let (time, frac) = time.split_once('.').unwrap_or((time, ""));
    let t: Vec<&str> = time.split(':').collect();
    if d.len() != 3 || t.len() != 3 || frac.len() > 3 {
        return Err(bad());
    }
    let (y, mo, da) = (num(d[0], 4)?, num(d[1], 2)?, num(d[2], 2)?);
    let (h, mi, se) = (num(t[0], 2)?, num(t[1], 2)?, num(t[2], 2)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&da) || h > 23 || mi > 59 || se > 60 {
        return Err(bad());
    }
    let ms = if frac.is_empty() {
        0
    } else {
        num(frac, frac.len())? * 10i64.pow(3 - frac.len() as u32)
    };
    let secs = days_from_civil(y, mo, da) * 86_400 + h * 3600 + mi * 60 + se;
    Ok(secs * 1000 + ms)
}

/// The partitions to reset: those named (all of a topic's without a list), or with
/// `--all-topics` every one in `known` (where the group has offsets).
///
/// # Errors
///
/// [`Failure::Error`] for a topic that cannot be described, a partition it does not have, or
/// nothing to reset.
pub async fn partitions(
    admin: &Client,
    group: &str,
    scope: &ResetScope,
    parsed: &Parsed,
    known: Vec<Tp>,
    words: &ResetWords,
) -> Result<Vec<Tp>, Failure> {
    let mut parts = if scope.all_topics {
        known
    } else {
        named_partitions(admin, &parsed.named).await?
    };
    parts.sort();
    parts.dedup();
    if parts.is_empty() {
        return Err(Failure::Error(format!(
            "group {group} has no {} to reset (name the topics with --topic)",
            words.offsets
        )));
    }
    Ok(parts)
}

/// Each named topic's partitions (all of them without a list), checked against its metadata.
async fn named_partitions(
    admin: &Client,
    named: &[(String, Vec<i32>)],
) -> Result<Vec<Tp>, Failure> {
    let mut names: Vec<&str> = named.iter().map(|(t, _)| t.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let described = admin.describe_topics(&names, false).await?;
    let mut out = Vec::new();
    for (t, only) in named {
        let d = described
            .iter()
            .find(|(n, _)| n == t)
            .map(|(_, d)| d)
            .ok_or_else(|| Failure::Error(format!("topic {t}: no answer")))?;
        let d = d
            .as_ref()
            .map_err(|e| Failure::Error(format!("topic {t}: {e}")))?;
        for p in only {
            if !d.partitions.iter().any(|m| m.partition == *p) {
                return Err(Failure::Error(format!(
                    "topic {t} has no partition {p} ({} partitions)",
                    d.partitions.len()
                )));
            }
        }
        out.extend(
            d.partitions
                .iter()
                .map(|m| m.partition)
                .filter(|p| only.is_empty() || only.contains(p))
                .map(|p| (t.clone(), p)),
        );
    }
    Ok(out)
}

/// `(topic, partition) -> offset` under `spec` for `parts` (errors as text).
async fn offsets_at(
    admin: &Client,
    parts: &[Tp],
    spec: OffsetSpec,
) -> Result<BTreeMap<Tp, Result<i64, String>>, Failure> {
    let ask: Vec<(&str, i32, OffsetSpec)> =
        parts.iter().map(|(t, p)| (t.as_str(), *p, spec)).collect();
    Ok(admin
        .list_offsets(&ask, IsolationLevel::ReadUncommitted)
        .await?
        .into_iter()
        .map(|(tp, r)| (tp, r.map(|o| o.offset).map_err(|e| e.to_string())))
        .collect())
}

/// The new offset of one partition whose log runs `lo..=hi`, from `current` and (for
/// `--to-datetime`) ListOffsets' answer `at` for the time.
fn new_offset(
    to: &ResetTo,
    current: Option<i64>,
    lo: i64,
    hi: i64,
    at: Option<&Result<i64, String>>,
) -> Result<i64, String> {
    let clamp = |o: i64| o.clamp(lo, hi.max(lo));
    if to.to_earliest {
        Ok(lo)
    } else if to.to_latest {
        Ok(hi)
    } else if let Some(o) = to.to_offset {
        Ok(clamp(o))
    } else if let Some(n) = to.shift_by {
        current
            .map(|c| clamp(c.saturating_add(n)))
            .ok_or_else(|| "no current offset to shift".to_owned())
    } else {
        // --to-datetime: no record at or after it means the end (as Kafka does).
        match at {
            Some(Ok(o)) if *o >= 0 => Ok(*o),
            Some(Ok(_)) | None => Ok(hi),
            Some(Err(e)) => Err(e.clone()),
        }
    }
}

/// Plans each partition of `parts`: its current offset (from `current`) and its new one.
///
/// # Errors
///
/// The ListOffsets request's; a partition's own error is kept in its plan.
pub async fn plan(
    admin: &Client,
    scope: &ResetScope,
    parsed: &Parsed,
    parts: &[Tp],
    current: &BTreeMap<Tp, Option<i64>>,
) -> Result<Vec<Plan>, Failure> {
    let earliest = offsets_at(admin, parts, OffsetSpec::Earliest).await?;
    let latest = offsets_at(admin, parts, OffsetSpec::Latest).await?;
    let at = match parsed.at_ms {
        Some(ms) => Some(offsets_at(admin, parts, OffsetSpec::Timestamp(ms)).await?),
        None => None,
    };
    let answer = |m: &BTreeMap<Tp, Result<i64, String>>, tp: &Tp| {
        m.get(tp)
            .cloned()
            .unwrap_or_else(|| Err("no ListOffsets answer".into()))
    };
    Ok(parts
        .iter()
        .map(|tp| {
            let cur = current.get(tp).copied().flatten();
            let (lo, hi) = (answer(&earliest, tp), answer(&latest, tp));
            let at_tp = at.as_ref().and_then(|m| m.get(tp));
            let new = lo.and_then(|lo| hi.and_then(|hi| new_offset(&scope.to, cur, lo, hi, at_tp)));
            Plan {
                topic: tp.0.clone(),
                partition: tp.1,
                current: cur,
                new,
            }
        })
        .collect())
}

/// The offsets of the plans that have one, to apply.
pub fn to_apply(plans: &[Plan]) -> Vec<((&str, i32), i64)> {
    plans
        .iter()
        .filter_map(|p| {
            p.new
                .as_ref()
                .ok()
                .map(|o| ((p.topic.as_str(), p.partition), *o))
        })
        .collect()
}

/// Prints the plans (`results`: each applied partition's outcome, empty for a dry run) as a
/// table or `--json`; a dry run says so on stderr.
///
/// # Errors
///
/// [`Failure::Error`] when a partition could not be planned or applied.
pub fn print(
    group: &str,
    plans: &[Plan],
    results: &BTreeMap<Tp, Result<(), String>>,
    scope: &ResetScope,
    words: &ResetWords,
) -> CmdResult {
    let mut failed = 0;
    let mut docs = Vec::new();
    let mut t = Table::new(&["GROUP", "TOPIC", "PARTITION", words.current, words.new]);
    for p in plans {
        let key = (p.topic.clone(), p.partition);
        let outcome = match (&p.new, results.get(&key)) {
            (Err(e), _) | (Ok(_), Some(Err(e))) => Some(e.clone()),
            _ => None,
        };
        if let Some(e) = &outcome {
            failed += 1;
            eprintln!("kafkit: {}/{}: {e}", p.topic, p.partition);
        }
        docs.push(json!({
            "topic": p.topic, "partition": p.partition, "current": p.current,
            "new": p.new.as_ref().ok(), "error": outcome,
        }));
        t.row(vec![
            group.to_owned(),
            p.topic.clone(),
            p.partition.to_string(),
            opt(p.current),
            p.new
                .as_ref()
                .map_or_else(|_| "error".into(), i64::to_string),
        ]);
    }
    if scope.json {
        print_json(&json!({"group": group, "executed": scope.execute, "partitions": docs}));
    } else {
        t.print();
    }
    if !scope.execute {
        eprintln!(
            "kafkit: dry run, nothing changed: add --execute to {}",
            words.apply
        );
    }
    if failed > 0 {
        return Err(Failure::Error(format!(
            "{failed} partition(s) could not be reset"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_parse_as_utc() {
        assert_eq!(parse_datetime("0").ok(), Some(0));
        assert_eq!(
            parse_datetime("1700000000000").ok(),
            Some(1_700_000_000_000)
        );
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20").ok(),
            Some(1_700_000_000_000)
        );
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20.5Z").ok(),
            Some(1_700_000_000_500)
        );
        assert_eq!(parse_datetime("1970-01-01T00:00:00.001").ok(), Some(1));
        assert_eq!(
            parse_datetime("2000-03-01T00:00:00").ok(),
            Some(951_868_800_000)
        );
        for bad in [
            "-1",
            "2023-13-01T00:00:00",
            "2023-1-01T00:00:00",
            "yesterday",
            "2023-11-14",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn topics_take_partition_lists() {
        assert_eq!(parse_topic("t").ok(), Some(("t".into(), vec![])));
        assert_eq!(
            parse_topic("a.b:0,2").ok(),
            Some(("a.b".into(), vec![0, 2]))
        );
        assert!(parse_topic("t:x").is_err());
        assert!(parse_topic(":1").is_err());
    }

    #[test]
    fn new_offsets_stay_within_the_log() {
        let to = |f: fn(&mut ResetTo)| {
            let mut t = ResetTo {
                to_earliest: false,
                to_latest: false,
                to_offset: None,
                to_datetime: None,
                shift_by: None,
            };
            f(&mut t);
            t
        };
        let earliest = to(|t| t.to_earliest = true);
        assert_eq!(new_offset(&earliest, Some(7), 2, 9, None), Ok(2));
        let latest = to(|t| t.to_latest = true);
        assert_eq!(new_offset(&latest, None, 2, 9, None), Ok(9));
        let offset = to(|t| t.to_offset = Some(99));
        assert_eq!(new_offset(&offset, None, 2, 9, None), Ok(9));
        let back = to(|t| t.shift_by = Some(-10));
        assert_eq!(new_offset(&back, Some(5), 2, 9, None), Ok(2));
        assert!(new_offset(&back, None, 2, 9, None).is_err());
        let at = to(|t| t.to_datetime = Some("0".into()));
        assert_eq!(new_offset(&at, None, 2, 9, Some(&Ok(4))), Ok(4));
        assert_eq!(
            new_offset(&at, None, 2, 9, Some(&Ok(-1))),
            Ok(9),
            "after every record"
        );
    }
}
