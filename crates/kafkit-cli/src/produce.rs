//! `kafkit produce`: records from stdin or files, one per line (or per `-D` delimiter), as
//! kcat `-P -K SEP -H k=v -p N` does, or JSON lines (`--format json`).
//!
//! Ctrl-C (SIGINT) or SIGTERM stops reading: the records read so far are written (exit 0, as
//! kcat), or, in a transaction, the transaction is aborted (exit 1).

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
    /// Record delimiter, one byte (default: newline; \t, \n, \0 and \xHH escapes).
    #[arg(short = 'D', value_name = "DELIM", default_value = "\\n")]
    delimiter: String,
    /// A header for every record, key=value (repeatable).
    #[arg(short = 'H', value_name = "KEY=VALUE")]
    headers: Vec<String>,
    /// The partition (default: the key's hash, sticky for records without key).
    #[arg(short = 'p', long)]
    partition: Option<i32>,
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
    ok: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

/// A byte delimiter from `-D`'s text (kcat's escapes).
pub fn parse_delimiter(s: &str) -> Result<u8, Failure> {
    let b = match s {
        "\\n" => b'\n',
        "\\t" => b'\t',
        "\\r" => b'\r',
        "\\0" => 0,
        s if s.starts_with("\\x") && s.len() == 4 => u8::from_str_radix(&s[2..], 16)
            .map_err(|_| Failure::Usage(format!("bad delimiter {s:?}")))?,
        s if s.len() == 1 => s.as_bytes()[0],
        s => {
            return Err(Failure::Usage(format!(
                "the delimiter must be one byte, got {s:?}"
            )));
        }
    };
    Ok(b)
}

/// Escapes of a separator (`\t`, `\n`...) as kcat reads them.
pub fn unescape(s: &str) -> String {
    s.replace("\\t", "\t")
        .replace("\\n", "\n")
        .replace("\\r", "\r")
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
        let Some(v) = v else { continue };
        match conn.props.get(name) {
            None => {
                conn.props.set(name, v);
            }
            Some(set) if set == v => {}
            Some(set) => {
                return Err(Failure::Usage(format!(
                    "{flag} says {name}={v} but -X or -F set {name}={set}"
                )));
            }
        }
    }
    conn.props.check()?;
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
    let transport = conn.connected().await?;
    let outcomes = Arc::new(Outcomes::default());
    let seen = outcomes.clone();
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
                seen.failed.fetch_add(1, Ordering::Relaxed);
                let mut first = seen.first_error.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert_with(|| e.to_string());
            }
        })
        .build()?;
    let transactional = conn.props.get("transactional.id").is_some();
    if transactional {
        writer
            .init_transactions(conn.timeout)
            .await
            .map_err(|e| Failure::Error(format!("initializing transactions: {e}")))?;
        writer
            .begin_transaction()
            .map_err(|e| Failure::Error(format!("beginning the transaction: {e}")))?;
    }
    let input = Input {
        topic: a.topic,
        key_sep: a.key_sep.map(|s| unescape(&s).into_bytes()),
        headers,
        partition: a.partition,
        null_empty: a.null_empty,
        format: a.format,
    };
    let sent = if a.files.is_empty() {
        read_records(tokio::io::stdin(), delim, &input, &writer, &mut interrupt).await
    } else {
        let mut r = Ok(Ended::Input);
        for f in &a.files {
            // A file that cannot be opened ends the input as bad input does: what was read is
            // written, a transaction is aborted.
            r = match tokio::fs::File::open(f).await {
                Ok(file) => read_records(file, delim, &input, &writer, &mut interrupt).await,
                Err(e) => Err(Failure::Error(format!("cannot open {f}: {e}"))),
            };
            if !matches!(r, Ok(Ended::Input)) {
                break;
            }
        }
        r
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
    let closed = writer.close(Duration::from_secs(300)).await;
    progress.finish();
    sent?;
    closed.map_err(|e| Failure::Error(format!("closing the writer: {e}")))?;
    let failed = outcomes.failed.load(Ordering::Relaxed);
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

/// Reads `input` split at `delim` and sends each piece: one buffer, records are slices of it.
/// An interrupt stops it between reads (every record split off so far was sent).
async fn read_records(
    mut input: impl AsyncRead + Unpin,
    delim: u8,
    spec: &Input,
    writer: &Writer,
    interrupt: &mut Interrupt,
) -> Result<Ended, Failure> {
    const CHUNK: usize = 64 * 1024;
    let mut buf = BytesMut::with_capacity(CHUNK);
    let mut scanned = 0;
    loop {
        while let Some(pos) = buf[scanned..].iter().position(|&b| b == delim) {
            let mut line = buf.split_to(scanned + pos + 1).freeze();
            line.truncate(line.len() - 1);
            scanned = 0;
            send(writer, spec.record(line)?).await?;
        }
        scanned = buf.len();
        buf.reserve(CHUNK);
        let n = tokio::select! {
            n = input.read_buf(&mut buf) => n?,
            () = interrupt.recv() => return Ok(Ended::Interrupted),
        };
        if n == 0 {
            if !buf.is_empty() {
                send(writer, spec.record(buf.split().freeze())?).await?;
            }
            return Ok(Ended::Input);
        }
    }
}

async fn send(writer: &Writer, r: ProducerRecord) -> CmdResult {
    // The outcome is counted by the completion callback; the future itself is not needed.
    writer
        .send(r)
        .await
        .map(drop)
        .map_err(|e| Failure::Error(format!("cannot produce: {e}")))
}
