//! Human output: aligned tables, `--json` documents, per-resource outcomes, and the live
//! progress line (stderr, terminals only).

use std::fmt::Display;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{Value, json};

use crate::{CmdResult, Failure};

/// Makes a closed stdout (`kafkit ... | head -1`) end the command quietly, exit 0, as kcat
/// does, wherever it is written: Rust ignores SIGPIPE, so a `println!` to a pipe whose reader
/// is gone panics ("failed printing to stdout: Broken pipe"); this hook turns that panic into
/// the exit. Every other panic is reported as before.
pub fn exit_quietly_when_stdout_closes() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        report(info);
    }));
}

/// Writes `bytes` to stdout; `false` when its reader is gone (the caller then ends quietly).
///
/// # Errors
///
/// Any other write error.
pub fn write_stdout(bytes: &[u8]) -> std::io::Result<bool> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e),
    }
}

/// Prints a `--json` document, indented.
pub fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// What a `describe` command found: the `--json` documents, each failure reported as it
/// comes, and the table the caller fills.
#[derive(Debug)]
pub struct Described {
    /// What the documents name, e.g. "name" or "group".
    key: &'static str,
    /// What is described, for the failure, e.g. "topic(s)".
    what: &'static str,
    docs: Vec<Value>,
    failed: usize,
    /// The human output.
    pub table: Table,
}

impl Described {
    /// An empty description of `what`s, documents named by `key`, a table with `header`.
    pub fn new(key: &'static str, what: &'static str, header: &[&str]) -> Described {
        Described {
            key,
            what,
            docs: Vec::new(),
            failed: 0,
            table: Table::new(header),
        }
    }

    /// The description of `name`, or `None` when it failed: the error is printed on stderr
    /// and kept as a `{KEY: name, "error"}` document.
    pub fn ok<T, E: Display>(&mut self, name: &str, r: Result<T, E>) -> Option<T> {
        match r {
            Ok(d) => Some(d),
            Err(e) => {
                self.failed += 1;
                eprintln!("kafkit: {name}: {e}");
                self.docs
                    .push(json!({self.key: name, "error": e.to_string()}));
                None
            }
        }
    }

    /// Adds a `--json` document.
    pub fn push(&mut self, doc: Value) {
        self.docs.push(doc);
    }

    /// Prints the documents (with `json`) or the table; fails when any description failed.
    /// When every one failed the table is not printed: a header with no rows above the error
    /// only says less clearly that nothing was found.
    pub fn print(self, json: bool) -> CmdResult {
        if json {
            print_json(&Value::Array(self.docs));
        } else if self.failed == 0 || !self.table.is_empty() {
            self.table.print();
        }
        if self.failed > 0 {
            return Err(Failure::Error(format!(
                "{} {} could not be described",
                self.failed, self.what
            )));
        }
        Ok(())
    }
}

/// Prints the outcome of each named resource of a command that changes things (`DONE NAME`
/// on stdout, or the error on stderr; with `json` one `{KEY: name, "ok"[, "error"]}` each);
/// fails when any failed.
pub fn outcomes<T, E: Display>(
    key: &str,
    done: &str,
    results: &[(String, Result<T, E>)],
    json: bool,
) -> CmdResult {
    let failed = results.iter().filter(|(_, r)| r.is_err()).count();
    if json {
        print_json(&Value::Array(
            results
                .iter()
                .map(|(n, r)| match r {
                    Ok(_) => json!({key: n, "ok": true}),
                    Err(e) => json!({key: n, "ok": false, "error": e.to_string()}),
                })
                .collect(),
        ));
    } else {
        for (n, r) in results {
            match r {
                Ok(_) => println!("{done} {n}"),
                Err(e) => eprintln!("kafkit: {n}: {e}"),
            }
        }
    }
    if failed > 0 {
        return Err(Failure::Error(format!(
            "{failed} of {} failed",
            results.len()
        )));
    }
    Ok(())
}

/// An offset or lag, or `-` where there is none (as Kafka's tools print it).
pub fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// A table printed with each column as wide as its widest cell.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with this header row.
    pub fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![header.iter().map(|s| (*s).to_owned()).collect()],
        }
    }

    /// Whether it has no row but its header.
    pub fn is_empty(&self) -> bool {
        self.rows.len() <= 1
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, columns separated by two spaces, no trailing spaces.
    pub fn render(&self) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..cols)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for r in &self.rows {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                if c + 1 < r.len() {
                    let pad = widths[c] - cell.chars().count();
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }

    /// Prints the table to stdout.
    pub fn print(&self) {
        print!("{}", self.render());
    }
}

/// A live progress line with a count and its rate, on stderr when it is a terminal (hidden
/// otherwise). Cheap to clone and to count from any thread.
#[derive(Debug, Clone)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A progress line counting `what` (e.g. "records").
    pub fn new(what: &str) -> Progress {
        Progress::with_target(what, std::io::stderr().is_terminal())
    }

    /// As [`Progress::new`], drawn only when `visible`.
    pub fn with_target(what: &str, visible: bool) -> Progress {
        let target = if visible {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(None, target);
        // The rate as a whole number ("1234/s"): indicatif's {per_sec} prints four decimals.
        let template = format!("{{elapsed}} {{human_pos}} {what} ({{rate}}) {{msg}}");
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style.with_key(
                "rate",
                |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{}", whole_rate(state.per_sec()));
                },
            ));
        }
        if visible {
            bar.enable_steady_tick(Duration::from_millis(250));
        }
        Progress { bar }
    }

    /// Counts `n` more.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    /// Removes the line.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// A rate per second as a whole number: `1234/s` (a rate that is not a finite number,
/// before the first count, is 0).
pub fn whole_rate(per_sec: f64) -> String {
    let n = if per_sec.is_finite() && per_sec > 0.0 {
        per_sec.round() as u64
    } else {
        0
    };
    format!("{n}/s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_whole_numbers() {
        assert_eq!(whole_rate(1234.5678), "1235/s");
        assert_eq!(whole_rate(0.2), "0/s");
        assert_eq!(whole_rate(f64::NAN), "0/s");
        assert_eq!(whole_rate(f64::INFINITY), "0/s");
    }

    #[test]
    fn tables_align_columns() {
        let mut t = Table::new(&["NAME", "PARTITIONS"]);
        t.row(vec!["orders-long".into(), "3".into()]);
        t.row(vec!["a".into(), "12".into()]);
        assert_eq!(
            t.render(),
            "NAME         PARTITIONS\norders-long  3\na            12\n"
        );
    }
}
