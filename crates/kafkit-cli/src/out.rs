//! Human output: aligned tables, and the live progress line (stderr, terminals only).

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

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
        let template = format!("{{elapsed}} {{human_pos}} {what} ({{per_sec}}) {{msg}}");
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style);
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

#[cfg(test)]
mod tests {
    use super::*;

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
