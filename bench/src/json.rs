//! Every run as one JSON object per line (`--json FILE`, appended): the client and its version,
//! the broker, the case, the settings each client was given, the machine, and the figures. The
//! committed results under `docs/bench/` are such files; `kafkit-bench report` prints their
//! tables and draws their charts.

use std::io::Write as _;
use std::path::Path;

use serde_json::{Value, json};

use crate::RunResult;

/// The machine the run is on: cores, CPU model, load average at the time.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown", |(_, m)| m.trim())
        .to_string();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    json!({
        "cores": std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        "cpu": model,
        "load": load.join(" "),
    })
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The figures of one run, or its error: records, failures, time, CPU, requests, and the rates
/// derived from them (records/s, CPU µs per record).
pub fn figures(result: &Result<RunResult, String>) -> Value {
    match result {
        Ok(r) => {
            let secs = r.wall.as_secs_f64().max(1e-9);
            let cpu = r.cpu.user + r.cpu.system;
            let per = |v: f64| {
                if r.delivered == 0 {
                    Value::Null
                } else {
                    json!(v / r.delivered as f64)
                }
            };
            json!({
                "ok": r.failed == 0,
                "error": r.first_error,
                "version": r.version,
                "delivered": r.delivered,
                "failed": r.failed,
                "wall_us": u64::try_from(r.wall.as_micros()).unwrap_or(u64::MAX),
                "user_us": u64::try_from(r.cpu.user.as_micros()).unwrap_or(u64::MAX),
                "sys_us": u64::try_from(r.cpu.system.as_micros()).unwrap_or(u64::MAX),
                "requests": r.requests,
                "bytes": r.bytes,
                "records_per_s": r.delivered as f64 / secs,
                "cpu_us_per_record": per(cpu.as_secs_f64() * 1e6),
            })
        }
        Err(e) => json!({ "ok": false, "error": e }),
    }
}

/// Merges the objects `parts` into one (later keys win).
pub fn merge(parts: &[Value]) -> Value {
    let mut out = serde_json::Map::new();
    for p in parts {
        if let Value::Object(m) = p {
            out.extend(m.clone());
        }
    }
    Value::Object(out)
}

/// Appends `record` as one line to `path` (created when missing).
///
/// Errors: the file cannot be opened or written.
pub fn append(path: &Path, record: &Value) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    writeln!(f, "{record}").map_err(|e| format!("write {}: {e}", path.display()))
}

/// Every run in the JSON-lines file `path` (blank lines skipped).
///
/// Errors: the file cannot be read, or a line is not a JSON object.
pub fn read(path: &Path) -> Result<Vec<Value>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<Value>(l)
                .ok()
                .filter(Value::is_object)
                .ok_or_else(|| format!("{}:{}: not a JSON object", path.display(), i + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cpu::CpuTime;

    #[test]
    fn a_run_reads_back_with_its_rates() {
        let r = RunResult {
            delivered: 1_000,
            wall: Duration::from_millis(500),
            cpu: CpuTime {
                user: Duration::from_millis(3),
                system: Duration::from_millis(1),
            },
            requests: Some(7),
            version: Some("kafkit@0.1.0".into()),
            ..RunResult::default()
        };
        let v = merge(&[json!({"client": "ours", "partitions": 48}), figures(&Ok(r))]);
        let dir = std::env::temp_dir().join(format!("kafkit-bench-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("runs.jsonl");
        let _ = std::fs::remove_file(&file);
        append(&file, &v).unwrap();
        append(&file, &figures(&Err("n/a".into()))).unwrap();
        let back = read(&file).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0]["records_per_s"], json!(2000.0));
        assert_eq!(back[0]["cpu_us_per_record"], json!(4.0));
        assert_eq!(back[0]["requests"], json!(7));
        assert_eq!(back[0]["client"], json!("ours"));
        assert_eq!(back[1]["ok"], json!(false));
        std::fs::write(&file, "{}\nnot json\n").unwrap();
        assert!(read(&file).unwrap_err().contains(":2:"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
