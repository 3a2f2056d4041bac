//! What the producer and consumer benches print and draw when `--tasks` lists several counts:
//! per case, the scaling table (each client's records/s, CPU µs per record, the system time's
//! share of the CPU and records/s against its 1-task run, by task count) and the two charts of
//! records/s and CPU per record against the task count (`producer-tasks-*.svg`,
//! `consumer-tasks-*.svg`).

use crate::{Client, RunResult, svg};

/// What the tasks of a bench do, in its table's and charts' words.
pub struct Words {
    /// `sending` or `consuming`.
    pub verb: &'static str,
    /// How each client's tasks share it, in brackets after the table's heading.
    pub sharing: &'static str,
    /// The charts' file prefix (`producer`: `producer-tasks-*.svg`).
    pub file: &'static str,
    /// The charts' title (`Producer`: `Producer throughput by sending tasks`).
    pub title: &'static str,
    /// What a run's `failed` counts (`failed`, `bad`).
    pub failed: &'static str,
    /// The charts' x axis (`sending tasks / threads (log scale)`).
    pub axis: &'static str,
}

/// Records/s, CPU µs per record and the system time's share of the CPU.
#[derive(Clone, Copy, Debug)]
pub struct Rates {
    /// Records delivered (producer) or read (consumer) per second.
    pub records_s: f64,
    /// User + system CPU µs per record.
    pub cpu_us: f64,
    /// System time over user + system time (0 to 1).
    pub system: f64,
}

/// The rates of a run that delivered records.
pub fn rates(r: &RunResult) -> Option<Rates> {
    if r.delivered == 0 {
        return None;
    }
    let secs = r.wall.as_secs_f64().max(1e-9);
    let cpu = (r.cpu.user + r.cpu.system).as_secs_f64();
    let system = if cpu > 0.0 {
        r.cpu.system.as_secs_f64() / cpu
    } else {
        0.0
    };
    Some(Rates {
        records_s: r.delivered as f64 / secs,
        cpu_us: cpu * 1e6 / r.delivered as f64,
        system,
    })
}

/// How a client fared at one task count.
pub enum Outcome {
    /// It delivered records at these rates; `failed` of them (or of its runs' records) failed.
    Measured {
        /// The rates (of the run, or the medians of its runs).
        rates: Rates,
        /// Records that failed (producer) or were bad (consumer).
        failed: u64,
    },
    /// It ran but delivered nothing.
    Nothing,
    /// It failed: why.
    Failed(String),
}

impl Outcome {
    /// The outcome of one run.
    pub fn of(result: &Result<RunResult, String>) -> Outcome {
        match result {
            Ok(r) => match rates(r) {
                Some(rates) => Outcome::Measured {
                    rates,
                    failed: r.failed,
                },
                None => Outcome::Nothing,
            },
            Err(e) => Outcome::Failed(e.clone()),
        }
    }

    fn rates(&self) -> Option<Rates> {
        match self {
            Outcome::Measured { rates, .. } => Some(*rates),
            _ => None,
        }
    }
}

/// One client at one task count.
pub struct Entry {
    /// The client.
    pub client: Client,
    /// Its tasks (ours) or threads (librdkafka).
    pub tasks: u64,
    /// How it fared.
    pub outcome: Outcome,
}

/// One case's entries, in run order.
pub struct CaseRuns {
    /// The table's heading after `Scaling with ... tasks: ` (`case mock, 48 partitions, ...`).
    pub heading: String,
    /// The case in a chart legend, when several cases share a chart (`mock 48`).
    pub legend: String,
    /// The case in a chart title, when it is the chart's only one (`mock (48 partitions)`).
    pub title: String,
    /// Every client's runs, by task count.
    pub entries: Vec<Entry>,
}

impl CaseRuns {
    /// Whether the case ran with more than one task count.
    fn scaled(&self) -> bool {
        self.entries
            .first()
            .is_some_and(|first| self.entries.iter().any(|e| e.tasks != first.tasks))
    }
}

/// Prints, per case run with several task counts, the scaling table: each client's runs by task
/// count (in the order of `clients`), records/s and CPU per record, and records/s against the
/// client's 1-task run.
pub fn print_tables(words: &Words, clients: &[Client], cases: &[CaseRuns]) {
    for case in cases.iter().filter(|c| c.scaled()) {
        println!();
        println!(
            "Scaling with {} tasks: {} ({}).",
            words.verb, case.heading, words.sharing
        );
        println!();
        println!(
            "| tasks | client | records/s | CPU µs / record | system share of CPU | records/s vs 1 task |"
        );
        println!("| ---: | --- | ---: | ---: | ---: | ---: |");
        for &client in clients {
            let mine: Vec<&Entry> = case.entries.iter().filter(|e| e.client == client).collect();
            let one = mine
                .iter()
                .find(|e| e.tasks == 1)
                .and_then(|e| e.outcome.rates())
                .map(|r| r.records_s);
            for e in mine {
                let head = format!("| {} | {} |", e.tasks, e.client.name());
                match &e.outcome {
                    Outcome::Measured { rates, failed } => {
                        let failed = if *failed > 0 {
                            format!(" ({failed} {})", words.failed)
                        } else {
                            String::new()
                        };
                        let relative = one.map_or_else(
                            || "n/a".to_string(),
                            |one| format!("{:.2}x", rates.records_s / one),
                        );
                        println!(
                            "{head} {:.0}{failed} | {:.2} | {:.0} % | {relative} |",
                            rates.records_s,
                            rates.cpu_us,
                            rates.system * 100.0
                        );
                    }
                    Outcome::Nothing => println!("{head} none delivered | | | |"),
                    Outcome::Failed(e) => {
                        println!("{head} failed: {} | | | |", e.replace('|', "/"))
                    }
                }
            }
        }
    }
}

/// One chart to write.
pub struct Chart {
    /// Its file name.
    pub file: String,
    /// Its title.
    pub title: String,
    /// The x axis's label.
    pub x_label: &'static str,
    /// The y axis's label.
    pub y_label: &'static str,
    /// The line under the title (the machine, the load).
    pub note: String,
    /// Its lines.
    pub series: Vec<svg::Series>,
    /// Where the x axis is ticked (none: at 1, 2 and 5 times the powers of ten).
    pub ticks: Vec<f64>,
}

/// The two charts of records/s and CPU µs per record against the task count, one line per client
/// (and case, when several cases ran with more than one task count); none with fewer than two
/// counts in `tasks`.
pub fn task_charts(words: &Words, tasks: &[u64], cases: &[CaseRuns]) -> Vec<Chart> {
    if tasks.len() < 2 {
        return Vec::new();
    }
    let scaled: Vec<&CaseRuns> = cases.iter().filter(|c| c.scaled()).collect();
    let (mut rate, mut cpu) = (Vec::new(), Vec::new());
    for case in &scaled {
        for e in &case.entries {
            let name = if scaled.len() == 1 {
                who(e.client).to_string()
            } else {
                format!("{}, {}", who(e.client), case.legend)
            };
            add_point(
                &mut rate,
                &mut cpu,
                &name,
                e.client,
                e.tasks as f64,
                e.outcome.rates(),
            );
        }
    }
    let what = match scaled.as_slice() {
        [case] => format!(", {}", case.title),
        _ => String::new(),
    };
    let ticks: Vec<f64> = tasks.iter().map(|&t| t as f64).collect();
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let note = format!("{cores} cores; {}", load_average());
    vec![
        Chart {
            file: format!("{}-tasks-records-per-second.svg", words.file),
            title: format!("{} throughput by {} tasks{what}", words.title, words.verb),
            x_label: words.axis,
            y_label: "records/s",
            note: note.clone(),
            series: rate,
            ticks: ticks.clone(),
        },
        Chart {
            file: format!("{}-tasks-cpu-per-record.svg", words.file),
            title: format!(
                "{} CPU per record by {} tasks{what}",
                words.title, words.verb
            ),
            x_label: words.axis,
            y_label: "CPU µs / record",
            note,
            series: cpu,
            ticks,
        },
    ]
}

/// Writes `charts` into `dir` (made if missing).
pub fn write_charts(dir: &std::path::Path, charts: Vec<Chart>) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for c in charts {
        let text = svg::line_chart(&c.title, c.x_label, c.y_label, &c.note, &c.series, &c.ticks);
        let path = dir.join(&c.file);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        eprintln!("kafkit-bench: wrote {}", path.display());
    }
    Ok(())
}

/// `load average 1.00 0.80 0.70`, from `/proc/loadavg`.
pub fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    format!("load average {}", load.join(" "))
}

/// A client's name in the charts.
pub fn who(c: Client) -> &'static str {
    c.label()
}

/// Adds `rates`' records/s and CPU µs per record at `x` to the series `name` of `rate` and `cpu`
/// (nothing without rates: a run that failed or delivered nothing).
pub fn add_point(
    rate: &mut Vec<svg::Series>,
    cpu: &mut Vec<svg::Series>,
    name: &str,
    client: Client,
    x: f64,
    rates: Option<Rates>,
) {
    let Some(r) = rates else {
        return;
    };
    for (list, y) in [(rate, r.records_s), (cpu, r.cpu_us)] {
        match list.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((x, y)),
            None => list.push(svg::Series {
                name: name.to_string(),
                ours: client == Client::Ours,
                points: vec![(x, y)],
            }),
        }
    }
}
