//! `kafkit-bench report --json FILE [--svg DIR]`: the tables and charts of a results file (the
//! JSON lines `--json` appends, such as those committed under `docs/bench/`). Runs are grouped
//! by bench, case, partition count and the settings that differ between runs (acks,
//! idempotence, transactions, compression); for each client the median and the range over its
//! repeats of records/s and of CPU µs per record, then kafkit against the best peer of each
//! case. With `--svg DIR` it draws `<bench>-<P>p-cross-records-per-second.svg` and
//! `<bench>-<P>p-cross-cpu-per-record.svg` for each partition count P (one bar per client per
//! case), for the producer, the consumer and the group case (`consumer-group`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use serde_json::Value;

use crate::svg;

/// Options of `report`.
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The results file (JSON lines, as `--json` writes them).
    #[arg(long)]
    json: PathBuf,
    /// Writes the charts into this directory.
    #[arg(long)]
    svg: Option<PathBuf>,
}

/// The clients in the order of the tables and charts (those with runs in the file).
const ORDER: [&str; 6] = [
    "kafkit",
    "librdkafka",
    "krafka",
    "franz-go",
    "kafka-go",
    "Java",
];

/// One case: what its runs share.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    bench: String,
    broker: String,
    case: String,
    partitions: i64,
    /// Records, senders or readers, value size: runs that differ in them are not merged.
    size: String,
    settings: String,
}

impl Key {
    fn of(v: &Value) -> Key {
        let s = &v["settings"];
        let text = |k: &str| s[k].as_str().unwrap_or_default().to_string();
        let settings = if v["bench"] == "producer" {
            let mut parts = vec![format!("acks={}", text("acks"))];
            if s["idempotence"].as_bool() == Some(true) {
                parts.push("idempotent".into());
            }
            if let Some(n) = s["transaction_records"].as_u64() {
                parts.push(format!("txn/{n}"));
            }
            parts.push(text("compression"));
            if let Some(rf) = s["replication_factor"].as_u64().filter(|rf| *rf > 1) {
                parts.push(format!("RF {rf}"));
            }
            parts.join(", ")
        } else {
            String::new()
        };
        Key {
            bench: v["bench"].as_str().unwrap_or_default().to_string(),
            broker: v["broker"].as_str().unwrap_or_default().to_string(),
            case: v["case"].as_str().unwrap_or_default().to_string(),
            partitions: v["partitions"].as_i64().unwrap_or_default(),
            size: format!(
                "{} records, {} task(s), {} bytes",
                v["records"].as_u64().unwrap_or_default(),
                v["tasks"].as_u64().unwrap_or(1),
                s["value_size"].as_u64().unwrap_or_default()
            ),
            settings,
        }
    }

    fn label(&self) -> String {
        let mut l = format!("{} p", self.partitions);
        // A transaction is acks=all and idempotent: the label says txn only.
        let settings = self.settings.replace("acks=all, idempotent, txn", "txn");
        if !settings.is_empty() {
            let _ = write!(l, ", {settings}");
        }
        if !self.case.starts_with("kafka") {
            l = format!("{} {l}", self.case);
        } else if let Some(n) = self
            .broker
            .split_once(" (")
            .and_then(|(_, b)| b.strip_suffix(" brokers)"))
        {
            // A cluster's cases beside the one broker's in the same charts.
            l = format!("{n} brokers, {l}");
        }
        l
    }
}

/// A client's runs of one case.
#[derive(Default, Debug)]
struct Cell {
    rates: Vec<f64>,
    cpu: Vec<f64>,
    requests: Vec<f64>,
    failed: usize,
    runs: usize,
    version: Option<String>,
    /// The first error, when every run failed (e.g. "n/a: ...").
    error: Option<String>,
}

/// (median, low, high) of `v` (None when empty).
fn spread(v: &[f64]) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        f64::midpoint(s[n / 2 - 1], s[n / 2])
    };
    Some((median, s[0], s[n - 1]))
}

type Cases = BTreeMap<Key, BTreeMap<String, Cell>>;

fn collect(runs: &[Value]) -> Cases {
    let mut cases: Cases = BTreeMap::new();
    for v in runs {
        let client = v["client"].as_str().unwrap_or("?").to_string();
        let cell = cases
            .entry(Key::of(v))
            .or_default()
            .entry(client)
            .or_default();
        cell.runs += 1;
        if v["version"].is_string() {
            cell.version = v["version"].as_str().map(str::to_string);
        }
        let ok = v["ok"].as_bool() == Some(true);
        match (v["records_per_s"].as_f64(), v["cpu_us_per_record"].as_f64()) {
            (Some(r), Some(c)) if ok => {
                cell.rates.push(r);
                cell.cpu.push(c);
                if let Some(q) = v["requests"].as_f64() {
                    cell.requests.push(q);
                }
            }
            _ => {
                cell.failed += 1;
                if cell.error.is_none() {
                    cell.error = v["error"].as_str().map(str::to_string);
                }
            }
        }
    }
    cases
}

fn clients_in(cases: &Cases) -> Vec<String> {
    let mut seen: Vec<String> = ORDER
        .iter()
        .filter(|c| cases.values().any(|m| m.contains_key(**c)))
        .map(|c| (*c).to_string())
        .collect();
    for m in cases.values() {
        for c in m.keys() {
            if !seen.contains(c) {
                seen.push(c.clone());
            }
        }
    }
    seen
}

fn fmt_rate(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else {
        format!("{:.0} k", v / 1e3)
    }
}

/// The Markdown tables of `runs`: every case's clients, then kafkit against the best peer.
fn tables(runs: &[Value]) -> String {
    let cases = collect(runs);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| bench | broker | case | client | version | records/s (median) | range | CPU µs / record (median) | range | requests (median) | runs |"
    );
    let _ = writeln!(
        out,
        "| --- | --- | --- | --- | --- | ---: | --- | ---: | --- | ---: | ---: |"
    );
    for (key, cells) in &cases {
        for client in clients_in(&cases) {
            let Some(cell) = cells.get(&client) else {
                continue;
            };
            let version = cell.version.as_deref().unwrap_or("-");
            let runs = if cell.failed > 0 {
                format!("{} ({} failed)", cell.runs, cell.failed)
            } else {
                cell.runs.to_string()
            };
            let head = format!(
                "| {} | {} | {} | {client} | {version} |",
                key.bench,
                key.broker,
                key.label()
            );
            match (spread(&cell.rates), spread(&cell.cpu)) {
                (Some(r), Some(c)) => {
                    let q =
                        spread(&cell.requests).map_or("-".to_string(), |q| format!("{:.0}", q.0));
                    let _ = writeln!(
                        out,
                        "{head} {} | {}–{} | {:.2} | {:.2}–{:.2} | {q} | {runs} |",
                        fmt_rate(r.0),
                        fmt_rate(r.1),
                        fmt_rate(r.2),
                        c.0,
                        c.1,
                        c.2
                    );
                }
                _ => {
                    let why = cell.error.as_deref().unwrap_or("failed").replace('|', "/");
                    let _ = writeln!(out, "{head} {why} | | | | | {runs} |");
                }
            }
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "| bench | case | best peer (records/s) | kafkit ÷ best peer, records/s | best peer (CPU) | best peer's CPU ÷ kafkit's | kafkit's failed runs |"
    );
    let _ = writeln!(out, "| --- | --- | --- | ---: | --- | ---: | ---: |");
    for (key, cells) in &cases {
        let median = |c: &Cell, f: fn(&Cell) -> &Vec<f64>| spread(f(c)).map(|s| s.0);
        let Some(ours) = cells.get("kafkit") else {
            continue;
        };
        let failed = format!("{} of {}", ours.failed, ours.runs);
        let (Some(our_rate), Some(our_cpu)) =
            (median(ours, |c| &c.rates), median(ours, |c| &c.cpu))
        else {
            let _ = writeln!(
                out,
                "| {} | {} | | every kafkit run failed | | | {failed} |",
                key.bench,
                key.label()
            );
            continue;
        };
        let peers = cells.iter().filter(|(n, _)| n.as_str() != "kafkit");
        let best_rate = peers
            .clone()
            .filter_map(|(n, c)| median(c, |c| &c.rates).map(|r| (n, r)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let best_cpu = peers
            .filter_map(|(n, c)| median(c, |c| &c.cpu).map(|r| (n, r)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some((rn, r)), Some((cn, c))) = (best_rate, best_cpu) {
            let _ = writeln!(
                out,
                "| {} | {} | {rn} | {:.2}x | {cn} | {:.2}x | {failed} |",
                key.bench,
                key.label(),
                our_rate / r,
                c / our_cpu
            );
        }
    }
    out
}

/// The bar charts of one bench, one pair per partition count (the counts differ by 10-50x in
/// records/s on one broker, which one scale would hide): records/s and CPU µs per record, one
/// bar per client per case.
fn charts(runs: &[Value], bench: &str) -> Vec<(String, String)> {
    let runs: Vec<Value> = runs
        .iter()
        .filter(|v| v["bench"] == bench)
        .cloned()
        .collect();
    let mut counts: Vec<i64> = runs
        .iter()
        .filter_map(|v| v["partitions"].as_i64())
        .collect();
    counts.sort_unstable();
    counts.dedup();
    let mut out = Vec::new();
    for p in counts {
        let of_p: Vec<Value> = runs
            .iter()
            .filter(|v| v["partitions"].as_i64() == Some(p))
            .cloned()
            .collect();
        out.extend(charts_of(&of_p, bench, p));
    }
    out
}

/// The two charts of `runs`, all of one bench and one partition count `p`.
fn charts_of(runs: &[Value], bench: &str, p: i64) -> Vec<(String, String)> {
    let cases = collect(runs);
    let clients = clients_in(&cases);
    let machine = runs[0]["machine"]["cores"].as_u64().unwrap_or(0);
    let mut brokers: Vec<&str> = runs.iter().filter_map(|v| v["broker"].as_str()).collect();
    brokers.sort_unstable();
    brokers.dedup();
    let note = format!(
        "{}; {machine} cores shared by the brokers and the client; median of the repeats, whisker: range",
        brokers.join(" and ")
    );
    let groups = |pick: fn(&Cell) -> &Vec<f64>| -> Vec<svg::BarGroup> {
        cases
            .iter()
            .map(|(key, cells)| svg::BarGroup {
                label: key.label(),
                values: clients
                    .iter()
                    .map(|c| cells.get(c).and_then(|cell| spread(pick(cell))))
                    .collect(),
                notes: clients
                    .iter()
                    .map(|c| match cells.get(c) {
                        Some(cell) if cell.failed > 0 && !pick(cell).is_empty() => {
                            format!(" ({} of {} runs failed)", cell.failed, cell.runs)
                        }
                        _ => String::new(),
                    })
                    .collect(),
            })
            .collect()
    };
    let title = |what: &str| {
        let b = match bench {
            "producer" => "Producer",
            "consumer-group" => "A group of 3, one leaving halfway",
            _ => "Consumer",
        };
        format!("{b}, {p} partitions: {what}")
    };
    vec![
        (
            format!("{bench}-{p}p-cross-records-per-second.svg"),
            svg::bar_chart(
                &title("records/s (higher is better)"),
                "records/s",
                &note,
                &clients,
                &groups(|c| &c.rates),
            ),
        ),
        (
            format!("{bench}-{p}p-cross-cpu-per-record.svg"),
            svg::bar_chart(
                &title("CPU µs per record (lower is better)"),
                "CPU µs / record (the client's process: user + system)",
                &note,
                &clients,
                &groups(|c| &c.cpu),
            ),
        ),
    ]
}

/// Prints the tables of the results file and, with `--svg`, writes the charts.
///
/// Errors: the file cannot be read, or a chart cannot be written.
pub fn run(args: &ReportArgs) -> Result<bool, String> {
    let runs = crate::json::read(&args.json)?;
    print!("{}", tables(&runs));
    if let Some(dir) = &args.svg {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        for bench in ["producer", "consumer", "consumer-group"] {
            for (file, svg) in charts(&runs, bench) {
                let path = dir.join(file);
                std::fs::write(&path, svg).map_err(|e| format!("write {}: {e}", path.display()))?;
                eprintln!("kafkit-bench: wrote {}", path.display());
            }
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(client: &str, rate: f64, cpu: f64) -> Value {
        json!({
            "bench": "producer", "broker": "Apache Kafka 4.4.0 (1 broker)", "case": "kafka",
            "partitions": 48, "client": client, "ok": true, "version": format!("{client}@1"),
            "records_per_s": rate, "cpu_us_per_record": cpu, "requests": 10,
            "machine": {"cores": 2},
            "settings": {"acks": "1", "idempotence": false, "compression": "none"},
        })
    }

    #[test]
    fn medians_ranges_and_the_best_peer() {
        let runs = vec![
            run("kafkit", 3e6, 0.3),
            run("kafkit", 2e6, 0.5),
            run("kafkit", 4e6, 0.4),
            run("librdkafka", 1e6, 1.5),
            run("franz-go", 1.5e6, 1.0),
            json!({"bench": "producer", "broker": "Apache Kafka 4.4.0 (1 broker)",
                   "case": "kafka", "partitions": 48, "client": "kafka-go", "ok": false,
                   "error": "n/a: the client cannot run this workload",
                   "settings": {"acks": "1", "idempotence": false, "compression": "none"}}),
        ];
        let t = tables(&runs);
        assert!(
            t.contains(
                "| kafkit | kafkit@1 | 3.00 M | 2.00 M–4.00 M | 0.40 | 0.30–0.50 | 10 | 3 |"
            ),
            "{t}"
        );
        assert!(
            t.contains("| kafka-go | - | n/a: the client cannot run this workload |"),
            "{t}"
        );
        // Best peer by rate: franz-go (1.5 M): 3.0 / 1.5 = 2x; by CPU: franz-go (1.0): 1.0 / 0.4.
        assert!(
            t.contains("| franz-go | 2.00x | franz-go | 2.50x | 0 of 3 |"),
            "{t}"
        );
        let c = charts(&runs, "producer");
        assert_eq!(c.len(), 2);
        assert!(c[0].1.contains("n/a") && c[0].1.contains("franz-go"));
        assert!(charts(&runs, "consumer").is_empty());
    }

    #[test]
    fn a_cluster_case_is_labelled_with_its_brokers_and_replicas() {
        let mut v = run("kafkit", 1e6, 0.2);
        v["broker"] = json!("Apache Kafka 4.4.0 (3 brokers)");
        v["settings"]["replication_factor"] = json!(3);
        assert_eq!(Key::of(&v).label(), "3 brokers, 48 p, acks=1, none, RF 3");
        assert_eq!(
            Key::of(&run("kafkit", 1e6, 0.2)).label(),
            "48 p, acks=1, none"
        );
    }

    #[test]
    fn the_group_case_has_charts_of_its_own() {
        let mut a = run("kafkit", 5e6, 0.13);
        let mut b = run("franz-go", 4e6, 0.18);
        for v in [&mut a, &mut b] {
            v["bench"] = json!("consumer-group");
        }
        let c = charts(&[a, b], "consumer-group");
        let names: Vec<&str> = c.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            names,
            [
                "consumer-group-48p-cross-records-per-second.svg",
                "consumer-group-48p-cross-cpu-per-record.svg"
            ]
        );
        assert!(c[0].1.contains("A group of 3"), "{}", c[0].1);
    }
}
