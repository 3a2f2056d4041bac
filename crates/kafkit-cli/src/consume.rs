//! `kafkit consume`: records of assigned partitions printed with kcat's `-f` format (or as kcat
//! prints them without one), or as JSON lines; follows by default, `-e` exits at the end, `-c`
//! after a count.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use clap::{Args, ValueEnum};
use kafkit::{Client, IsolationLevel, OffsetSpec, Reader, StartOffset};

use crate::conn::Conn;
use crate::format::{Format, write_json};
use crate::out::Progress;
use crate::produce::unescape;
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
    /// Where to start: beginning, end, OFFSET, -N (N before the end), @TIMESTAMP (ms).
    #[arg(
        short = 'o',
        long,
        default_value = "beginning",
        allow_hyphen_values = true
    )]
    offset: String,
    /// Exit after COUNT records.
    #[arg(short = 'c', long)]
    count: Option<u64>,
    /// Exit when every partition is read to its end (default: follow).
    #[arg(short = 'e', long = "exit")]
    exit_at_end: bool,
    /// Output format, as kcat's -f: %t topic, %p partition, %o offset, %k key, %K key length,
    /// %s value, %S value length, %R value length (binary int32), %T timestamp (ms), %h headers
    /// (k=v,k=v), \n \t \r \xHH.
    #[arg(short = 'f', long = "format", value_name = "FMT")]
    format: Option<String>,
    /// Without -f: print the key and this separator before the value.
    #[arg(short = 'K', value_name = "SEP")]
    key_sep: Option<String>,
    /// Without -f: the delimiter after each record (default: newline).
    #[arg(short = 'D', value_name = "DELIM", default_value = "\\n")]
    delimiter: String,
    /// Print null keys and values as NULL (as kcat -Z).
    #[arg(short = 'Z')]
    null_word: bool,
    /// One JSON object per record (topic, partition, offset, timestamp, key, value, headers).
    #[arg(short = 'J', long = "json", conflicts_with = "format")]
    json: bool,
    /// Isolation level (isolation.level).
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
    let start = parse_start(&a.offset)?;
    let format = match &a.format {
        Some(f) => Format::parse(f, a.null_word).map_err(Failure::Usage)?,
        None => Format::kcat_default(
            a.key_sep.as_deref().map(unescape).as_deref(),
            &unescape(&a.delimiter),
            a.null_word,
        ),
    };
    let mut conn = conn.clone();
    if let Some(i) = a.isolation
        && conn.props.get("isolation.level").is_none()
    {
        let v = match i {
            Isolation::ReadCommitted => "read_committed",
            Isolation::ReadUncommitted => "read_uncommitted",
        };
        conn.props.set("isolation.level", v);
    }
    let transport = conn.transport()?;
    let admin = Client::new(transport.clone()).with_timeout(conn.timeout);
    let partitions = partitions_of(&admin, &a.topics, &a.partitions).await?;
    let starts = start_offsets(&admin, &partitions, start).await?;
    let mut reader = conn.reader(transport)?.build()?;
    reader.assign(
        starts
            .iter()
            .map(|((t, p), s)| (t.as_str(), *p, *s))
            .collect::<Vec<_>>(),
    )?;
    let stdout_tty = std::io::stdout().is_terminal();
    let progress = Progress::with_target("records", !stdout_tty && std::io::stderr().is_terminal());
    let r = read(&mut reader, &a, &format, &starts, &progress).await;
    progress.finish();
    reader.close();
    r
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
) -> CmdResult {
    let mut stdout = std::io::stdout();
    let mut out = Vec::with_capacity(64 * 1024);
    let mut seen: u64 = 0;
    let limit = a.count.unwrap_or(u64::MAX);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        if seen >= limit || (a.exit_at_end && at_end(reader, parts)) {
            return Ok(());
        }
        let batch = tokio::select! {
            b = reader.next_batch() => b?,
            _ = tick.tick() => continue,
        };
        for part in batch {
            for r in part.into_consumer_records() {
                if seen >= limit {
                    break;
                }
                if a.json {
                    write_json(&r, &mut out)?;
                } else {
                    format.write(&r, &mut out);
                }
                seen += 1;
                progress.inc(1);
            }
        }
        match stdout.write_all(&out).and_then(|()| stdout.flush()) {
            Ok(()) => {}
            // The reader of our output is gone (`| head`): done.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        out.clear();
    }
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
