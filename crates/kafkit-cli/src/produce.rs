//! `kafkit produce`: records from stdin or files, one per line (or per `-D` delimiter), as
//! kcat `-P -K SEP -H k=v -p N` does, or JSON lines (`--format json`).
//!
//! Ctrl-C (SIGINT) or SIGTERM stops reading: the records read so far are written (exit 0, as
//! kcat), or, in a transaction, the transaction is aborted (exit 1). While connecting it exits
//! at once (130).
//!
//! Failures are reported as they happen, never only at the end: the first record that fails
//! for good (its error after the writer's retries) is printed at once and ends the command
//! (reading stops, what was read gets two seconds to be acknowledged, exit 1); later failures
//! are counted on one line a second. When records wait and no broker of the cluster accepts a
//! connection any more, the command says so within about two seconds and exits 1, as kcat
//! does, instead of waiting for the delivery timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use clap::{Args, ValueEnum};
use kafkit::{ProducerRecord, Writer};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::conn::Conn;
use crate::interrupt::Interrupt;
use crate::out::Progress;
use crate::{CmdResult, Failure};

/// How input lines are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InputFormat {
    /// The line is the value (with -K: key, separator, value).
    Text,
    /// The line is a JSON object: {"key", "value", "headers": {k: v} or [[k, v]], "partition",
    /// "timestamp"}.
    Json,
}

/// `kafkit produce` arguments.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// The topic.
    topic: String,
    /// Files to read instead of stdin, one record per line each.
    files: Vec<String>,
    /// Key separator: a line is KEY<SEP>VALUE (no separator: no key).
    #[arg(short = 'K', value_name = "SEP")]
    key_sep: Option<String>,
    /// Record delimiter, one byte (default: newline; \n, \r, \t, \0, \\ and \xHH escapes, as
    /// consume's -D).
    #[arg(short = 'D', value_name = "DELIM", default_value = "\\n")]
    delimiter: String,
    /// A header for every record, key=value (repeatable).
    #[arg(short = 'H', value_name = "KEY=VALUE")]
    headers: Vec<String>,
    /// The partition (default: the partitioner's choice).
    #[arg(short = 'p', long)]
    partition: Option<i32>,
    /// How a record without -p finds its partition (-X partitioner; librdkafka's names):
    /// consistent_random (the default, as kcat and librdkafka: CRC-32 of the key, null and
    /// empty keys sticky), consistent (CRC-32, null keys as empty), murmur2_random (as the
    /// Java client: murmur2 of the key, null keys sticky), murmur2 (null keys as empty),
    /// fnv1a_random, fnv1a, random (a random partition per keyed record). A sticky record stays
    /// on one partition for a batch's worth of bytes.
    #[arg(long, value_name = "NAME")]
    partitioner: Option<String>,
    /// Compression codec: none, gzip, snappy, lz4, zstd (compression.type).
    #[arg(short = 'z', long, value_name = "CODEC")]
    compression: Option<String>,
    /// Acknowledgements: 0, 1, all (acks).
    #[arg(long)]
    acks: Option<String>,
    /// Idempotent writes (enable.idempotence=true; the default with acks=all).
    #[arg(long, conflicts_with = "no_idempotent")]
    idempotent: bool,
    /// No producer id and sequences (enable.idempotence=false).
    #[arg(long)]
    no_idempotent: bool,
    /// Empty values (and keys) are sent as null.
    #[arg(short = 'Z')]
    null_empty: bool,
    /// Input format.
    #[arg(long, value_enum, default_value = "text")]
    format: InputFormat,
    /// Write every record in one transaction with this id (transactional.id), committed at
    /// the end of the input and aborted if a record or the input fails.
    #[arg(long, value_name = "ID")]
    transactional_id: Option<String>,
    /// At the end, print what was written as JSON (topic, records, failed).
    #[arg(long)]
    json: bool,
}

/// Outcomes counted by the writer's completion callback.
#[derive(Default)]
struct Outcomes {
    /// Records handed to the writer.
    sent: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
    /// Woken at each failure.
    failing: tokio::sync::Notify,
}

impl Outcomes {
    fn first_error(&self) -> String {
        self.first_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or_default()
    }

    /// Records handed to the writer without an outcome yet.
    fn waiting(&self) -> u64 {
        let done = self.ok.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed);
        self.sent.load(Ordering::Relaxed).saturating_sub(done)
    }
}

/// How long the writer gets for what was read once the command gives up (a record failed for
/// good, the cluster unreachable).
const GIVE_UP_CLOSE: Duration = Duration::from_secs(2);

/// Why the input stops being read before its end, from the outcomes: the first record that
/// failed, or the cluster unreachable while records wait (no acknowledgement for a second and
/// no broker of `brokers` accepting a TCP connection). Checked at each failure and every
/// second; never returns otherwise.
async fn watch(outcomes: &Outcomes, brokers: &[String]) -> String {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    let mut last_ok = outcomes.ok.load(Ordering::Relaxed);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = outcomes.failing.notified() => {}
        }
        if outcomes.failed.load(Ordering::Relaxed) > 0 {
            return format!("a record failed: {}", outcomes.first_error());
        }
        let ok = outcomes.ok.load(Ordering::Relaxed);
        let waiting = outcomes.waiting();
        if waiting > 0
            && ok == last_ok
            && let Err(why) = crate::reach::any(brokers).await
        {
            return format!("cannot reach the cluster: {why} ({waiting} records waiting)");
        }
        last_ok = ok;
    }
}

/// Prints, at most once a second, how many records failed since the last line, with the
/// first error among them (the writer's callback runs on its task: printing there would
/// print a line per record).
async fn report_failures(outcomes: Arc<Outcomes>, recent: Arc<Mutex<Option<String>>>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut reported = 0;
    loop {
        outcomes.failing.notified().await;
        tick.tick().await;
        let failed = outcomes.failed.load(Ordering::Relaxed);
        let first = recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if failed > reported {
            eprintln!(
                "kafkit: {} record(s) failed ({failed} in all): {}",
                failed - reported,
                first.unwrap_or_default()
            );
            reported = failed;
        }
    }
}

/// A byte delimiter from `-D`'s text, its escapes read as consume's -D reads them.
pub fn parse_delimiter(s: &str) -> Result<u8, Failure> {
    match crate::format::unescape(s).map_err(Failure::Usage)?[..] {
        [b] => Ok(b),
        _ => Err(Failure::Usage(format!(
            "the delimiter must be one byte, got {s:?}"
        ))),
    }
}

/// Runs `kafkit produce`.
pub async fn run(conn: &Conn, a: ProduceArgs) -> CmdResult {
    let mut interrupt = Interrupt::new()?;
    let mut conn = conn.clone();
    for (flag, name, v) in [
        ("-z", "compression.type", a.compression.clone()),
        ("--acks", "acks", a.acks.clone()),
        (
            if a.idempotent {
                "--idempotent"
            } else {
                "--no-idempotent"
            },
            "enable.idempotence",
            (a.idempotent || a.no_idempotent).then(|| a.idempotent.to_string()),
        ),
        (
            "--transactional-id",
            "transactional.id",
            a.transactional_id.clone(),
        ),
    ] {
        if let Some(v) = v {
            conn.set_for_flag(flag, name, &v)?;
        }
    }
    conn.props.check()?;
    if let Some(name) = &a.partitioner {
        let name = crate::partitioner::check(name, "--partitioner")?;
        match conn.partitioner {
            Some(set) if set != name => {
                return Err(Failure::Usage(format!(
                    "--partitioner says {name} but -X or -F set partitioner={set}"
                )));
            }
            _ => conn.partitioner = Some(name),
        }
    }
    let delim = parse_delimiter(&a.delimiter)?;
    let headers = a
        .headers
        .iter()
        .map(|h| {
            h.split_once('=')
                .map(|(k, v)| (Bytes::from(k.to_owned()), Bytes::from(v.to_owned())))
                .ok_or_else(|| Failure::Usage(format!("a header is key=value, got {h:?}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let transport = interrupt
        .or_exit("connecting to the cluster", conn.connected())
        .await?;
    let brokers: Vec<String> = transport
        .metadata()
        .await?
        .brokers
        .iter()
        .map(|b| b.addr())
        .collect();
    let outcomes = Arc::new(Outcomes::default());
    let seen = outcomes.clone();
    let recent: Arc<Mutex<Option<String>>> = Arc::default();
    let recent_seen = recent.clone();
    let progress = Progress::new("records");
    let bar = progress.clone();
    let writer = conn
        .writer(transport)?
        .on_completion(move |_, err| match err {
            None => {
                seen.ok.fetch_add(1, Ordering::Relaxed);
                bar.inc(1);
            }
            Some(e) => {
                let e = crate::conn::describe_produce(e);
                {
                    let mut first = seen.first_error.lock().unwrap_or_else(|p| p.into_inner());
                    first.get_or_insert_with(|| e.clone());
                }
                recent_seen
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(e);
                seen.failed.fetch_add(1, Ordering::Relaxed);
                seen.failing.notify_waiters();
            }
        })
        .build()?;
    let transactional = conn.props.get("transactional.id").is_some();
    let reporter = tokio::spawn(report_failures(outcomes.clone(), recent));
    if transactional {
        interrupt
            .or_exit(
                "initializing transactions",
                writer.init_transactions(conn.timeout),
            )
            .await
            .map_err(|e| Failure::Error(format!("initializing transactions: {e}")))?;
        writer
            .begin_transaction()
            .map_err(|e| Failure::Error(format!("beginning the transaction: {e}")))?;
    }
    let input = Input {
        topic: a.topic,
        key_sep: a
            .key_sep
            .map(|s| crate::format::unescape(&s))
            .transpose()
            .map_err(Failure::Usage)?,
        headers,
        partition: a.partition,
        null_empty: a.null_empty,
        format: a.format,
    };
    let reading = async {
        if a.files.is_empty() {
            let stdin = tokio::io::stdin();
            return read_records(
                (stdin, "stdin"),
                delim,
                &input,
                &writer,
                &outcomes,
                &mut interrupt,
            )
            .await;
        }
        let mut r = Ok(Ended::Input);
        for f in &a.files {
            // A file that cannot be opened ends the input as bad input does: what was read is
            // written, a transaction is aborted.
            r = match tokio::fs::File::open(f).await {
                Ok(file) => {
                    read_records((file, f), delim, &input, &writer, &outcomes, &mut interrupt).await
                }
                Err(e) => Err(Failure::Error(format!("cannot open {f}: {e}"))),
            };
            if !matches!(r, Ok(Ended::Input)) {
                break;
            }
        }
        r
    };
    // The first record failed for good, or the cluster gone, ends the reading at once.
    let mut gave_up = None;
    let sent = tokio::select! {
        r = reading => r,
        why = watch(&outcomes, &brokers) => {
            eprintln!("kafkit: {why}; stopping");
            // The summary at the end counts what the close fails.
            reporter.abort();
            gave_up = Some(why.clone());
            Err(Failure::Error(why))
        }
    };
    // From here a (second) interrupt exits at once.
    interrupt.exit_on_the_next();
    let sent = match sent {
        Ok(Ended::Interrupted) if transactional => {
            Err(Failure::Error("interrupted (Ctrl-C)".into()))
        }
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    };
    let sent = if transactional {
        end_transaction(&writer, sent, &outcomes, conn.timeout).await
    } else {
        sent
    };
    let closed = writer
        .close(if gave_up.is_some() {
            GIVE_UP_CLOSE
        } else {
            Duration::from_secs(300)
        })
        .await;
    progress.finish();
    reporter.abort();
    let failed = outcomes.failed.load(Ordering::Relaxed);
    let waiting = outcomes.waiting();
    if let Some(why) = gave_up
        && !transactional
    {
        let sent = outcomes.sent.load(Ordering::Relaxed);
        return Err(Failure::Error(format!(
            "{} of {sent} records not written ({why})",
            failed + waiting
        )));
    }
    sent?;
    closed.map_err(|e| Failure::Error(format!("closing the writer: {e}")))?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "topic": input.topic, "records": outcomes.ok.load(Ordering::Relaxed),
                "failed": failed,
            })
        );
    }
    if failed > 0 {
        let first = outcomes
            .first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_default();
        return Err(Failure::Error(format!(
            "{failed} of {} records failed; the first: {first}",
            failed + outcomes.ok.load(Ordering::Relaxed)
        )));
    }
    Ok(())
}

/// Commits the transaction when the input was read and every record written so far was
/// acknowledged; aborts it otherwise (the error says which, and why).
async fn end_transaction(
    writer: &kafkit::Writer,
    sent: CmdResult,
    outcomes: &Outcomes,
    timeout: Duration,
) -> CmdResult {
    let why = match &sent {
        Err(Failure::Error(m) | Failure::Usage(m)) => Some(m.clone()),
        Ok(()) if outcomes.failed.load(Ordering::Relaxed) > 0 => Some("a record failed".into()),
        Ok(()) => None,
    };
    let why = match why {
        Some(w) => w,
        None => match writer.commit_transaction(timeout).await {
            Ok(()) => return Ok(()),
            Err(e) => format!("the commit failed: {e}"),
        },
    };
    match writer.abort_transaction(timeout).await {
        Ok(()) => Err(Failure::Error(format!("transaction aborted: {why}"))),
        Err(e) => Err(Failure::Error(format!(
            "{why}; aborting the transaction failed too: {e}"
        ))),
    }
}

/// What every record of the input shares.
struct Input {
    topic: String,
    key_sep: Option<Vec<u8>>,
    headers: Vec<(Bytes, Bytes)>,
    partition: Option<i32>,
    null_empty: bool,
    format: InputFormat,
}

impl Input {
    fn record(&self, line: Bytes) -> Result<ProducerRecord, Failure> {
        let mut r = match self.format {
            InputFormat::Text => self.text_record(line),
            InputFormat::Json => self.json_record(&line)?,
        };
        for (k, v) in &self.headers {
            r = r.header(k.clone(), v.clone());
        }
        if let Some(p) = self.partition
            && r.partition.is_none()
        {
            r = r.partition(p);
        }
        Ok(r)
    }

    fn text_record(&self, line: Bytes) -> ProducerRecord {
        let (key, value) = match &self.key_sep {
            Some(sep) => match find(&line, sep) {
                Some(at) => (Some(line.slice(..at)), line.slice(at + sep.len()..)),
                None => (None, line),
            },
            None => (None, line),
        };
        let mut r = ProducerRecord::new(self.topic.clone(), value);
        if self.null_empty && r.value.as_ref().is_some_and(Bytes::is_empty) {
            r.value = None;
        }
        if let Some(k) = key
            && !(self.null_empty && k.is_empty())
        {
            r = r.key(k);
        }
        r
    }

    fn json_record(&self, line: &[u8]) -> Result<ProducerRecord, Failure> {
        let v: Value = serde_json::from_slice(line)
            .map_err(|e| Failure::Error(format!("input line is not JSON: {e}")))?;
        let Value::Object(m) = v else {
            return Err(Failure::Error("input line is not a JSON object".into()));
        };
        let topic = m
            .get("topic")
            .and_then(Value::as_str)
            .unwrap_or(&self.topic);
        let mut r = ProducerRecord::new(topic.to_owned(), Bytes::new());
        r.value = json_bytes(m.get("value"));
        if let Some(k) = json_bytes(m.get("key")) {
            r = r.key(k);
        }
        match m.get("headers") {
            Some(Value::Object(h)) => {
                for (k, v) in h {
                    r.headers
                        .push(kafkit::RecordHeader::new(k.clone(), json_bytes(Some(v))));
                }
            }
            Some(Value::Array(h)) => {
                for pair in h {
                    let (k, v) = match pair.as_array().map(Vec::as_slice) {
                        Some([k, v]) => (k, v),
                        _ => {
                            return Err(Failure::Error(
                                "headers must be {\"k\": \"v\"} or [[\"k\", \"v\"]]".into(),
                            ));
                        }
                    };
                    r.headers.push(kafkit::RecordHeader::new(
                        json_bytes(Some(k)).unwrap_or_default(),
                        json_bytes(Some(v)),
                    ));
                }
            }
            None | Some(Value::Null) => {}
            Some(_) => return Err(Failure::Error("headers must be an object or array".into())),
        }
        if let Some(p) = m.get("partition").and_then(Value::as_i64) {
            r = r.partition(i32::try_from(p).map_err(|_| Failure::Error("bad partition".into()))?);
        }
        if let Some(t) = m.get("timestamp").and_then(Value::as_i64) {
            r = r.timestamp(t);
        }
        Ok(r)
    }
}

/// A JSON value as bytes: strings as they are, `null` as none, anything else as JSON text.
fn json_bytes(v: Option<&Value>) -> Option<Bytes> {
    match v? {
        Value::Null => None,
        Value::String(s) => Some(Bytes::from(s.clone())),
        other => Some(Bytes::from(other.to_string())),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Why reading stopped.
enum Ended {
    /// The end of the input.
    Input,
    /// Ctrl-C or SIGTERM.
    Interrupted,
}

/// Reads `input` (named `name` in errors: a file, or stdin) split at `delim` and sends each
/// piece: one buffer, records are slices of it. A piece that is no record (bad JSON) is named
/// by `name` and its line (or record) number. An interrupt stops it between reads (every
/// record split off so far was sent).
async fn read_records(
    (mut input, name): (impl AsyncRead + Unpin, &str),
    delim: u8,
    spec: &Input,
    writer: &Writer,
    outcomes: &Outcomes,
    interrupt: &mut Interrupt,
) -> Result<Ended, Failure> {
    const CHUNK: usize = 64 * 1024;
    let mut buf = BytesMut::with_capacity(CHUNK);
    let mut scanned = 0;
    let mut number = 0u64;
    let what = if delim == b'\n' { "line" } else { "record" };
    let record = |line: Bytes, number: u64| {
        spec.record(line).map_err(|e| match e {
            Failure::Error(m) => Failure::Error(format!("{name}: {what} {number}: {m}")),
            e @ Failure::Usage(_) => e,
        })
    };
    loop {
        while let Some(pos) = buf[scanned..].iter().position(|&b| b == delim) {
            let mut line = buf.split_to(scanned + pos + 1).freeze();
            line.truncate(line.len() - 1);
            scanned = 0;
            number += 1;
            send(writer, record(line, number)?, outcomes).await?;
        }
        scanned = buf.len();
        buf.reserve(CHUNK);
        let n = tokio::select! {
            n = input.read_buf(&mut buf) => n?,
            () = interrupt.recv() => return Ok(Ended::Interrupted),
        };
        if n == 0 {
            if !buf.is_empty() {
                send(writer, record(buf.split().freeze(), number + 1)?, outcomes).await?;
            }
            return Ok(Ended::Input);
        }
    }
}

async fn send(writer: &Writer, r: ProducerRecord, outcomes: &Outcomes) -> CmdResult {
    // The outcome is counted by the completion callback; the future itself is not needed.
    writer.send(r).await.map(drop).map_err(|e| {
        Failure::Error(format!(
            "cannot produce: {}",
            crate::conn::describe_produce(&e)
        ))
    })?;
    outcomes.sent.fetch_add(1, Ordering::Relaxed);
    Ok(())
}
