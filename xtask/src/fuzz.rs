//! `cargo xtask fuzz [--seconds N] [--runs N] [--target NAME]... [--sanitizer address|none]`: runs every libFuzzer target of `fuzz/`
//! in turn, one process at a time, and prints executions, coverage and the outcome of each.
//!
//! Needs the nightly toolchain (`rustup toolchain install nightly`) and cargo-fuzz
//! (`cargo install cargo-fuzz --locked`): libFuzzer's coverage instrumentation and the address
//! sanitizer are nightly-only `-Z` flags. `cargo xtask test` never builds `fuzz/` (its own
//! workspace, excluded from the main one). The seed corpora are written first by
//! `cargo run -p kafkit-protocol --example fuzz_seeds -- fuzz/corpus`; each run adds what it
//! finds to `fuzz/corpus/<target>` and leaves a crashing input in `fuzz/artifacts/<target>`.
//! Every run uses `-rss_limit_mb=512` (a larger single allocation is reported as a crash too)
//! and `-timeout=10` (`sasl`: 120, see [`timeout_seconds`]). See docs/reliability.md.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::codegen::repo_root;

/// The targets of `fuzz/Cargo.toml`, in the order they run.
pub const TARGETS: &[&str] = &["messages", "records", "decompress", "sasl", "conn_frames"];

/// What one target's run printed at its end.
#[derive(Default)]
struct Summary {
    executions: Option<u64>,
    exec_per_sec: Option<u64>,
    cov: Option<u64>,
    features: Option<u64>,
    corpus: Option<String>,
    peak_rss_mb: Option<u64>,
    outcome: String,
}

/// Runs `targets` (all of [`TARGETS`] when empty) for `seconds` each, or until `runs`
/// executions (libFuzzer's `-runs=N`) when that comes first, built with cargo-fuzz's
/// `sanitizer` (`address` or `none`).
///
/// Errors: a message when nightly or cargo-fuzz is missing, the seeds cannot be written, or a
/// target found a crash, a leak, a timeout or an out-of-memory (the input is in
/// `fuzz/artifacts/<target>/`).
pub fn run(
    seconds: u64,
    runs: Option<u64>,
    targets: &[String],
    sanitizer: &str,
) -> Result<(), String> {
    if !["address", "none"].contains(&sanitizer) {
        return Err(format!("unknown sanitizer {sanitizer}; address or none"));
    }
    let chosen: Vec<&str> = if targets.is_empty() {
        TARGETS.to_vec()
    } else {
        for t in targets {
            if !TARGETS.contains(&t.as_str()) {
                return Err(format!(
                    "unknown target {t}; targets: {}",
                    TARGETS.join(", ")
                ));
            }
        }
        targets.iter().map(String::as_str).collect()
    };
    let root = repo_root();
    let nightly = |args: &[&str]| {
        Command::new("cargo")
            .env_remove("RUSTUP_TOOLCHAIN")
            .current_dir(&root)
            .arg("+nightly")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !nightly(&["--version"]) {
        return Err("the nightly toolchain is missing: rustup toolchain install nightly".into());
    }
    if !nightly(&["fuzz", "--version"]) {
        return Err("cargo-fuzz is missing: cargo install cargo-fuzz --locked".into());
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let status = Command::new(cargo)
        .current_dir(&root)
        .args([
            "run",
            "--quiet",
            "-p",
            "kafkit-protocol",
            "--example",
            "fuzz_seeds",
            "--",
        ])
        .arg(root.join("fuzz/corpus"))
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("writing the seed corpora failed ({status})"));
    }
    let mut rows = Vec::new();
    for target in &chosen {
        match runs {
            Some(n) => {
                eprintln!("fuzz: {target} for {n} executions or {seconds} s (building it first)...")
            }
            None => eprintln!("fuzz: {target} for {seconds} s (building it first)..."),
        }
        rows.push((*target, run_one(target, seconds, runs, sanitizer)?));
    }
    println!("| target | executions | exec/s | cov | features | corpus | peak RSS | outcome |");
    println!("|---|---:|---:|---:|---:|---|---:|---|");
    let show = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
    for (t, s) in &rows {
        println!(
            "| {t} | {} | {} | {} | {} | {} | {} MB | {} |",
            show(s.executions),
            show(s.exec_per_sec),
            show(s.cov),
            show(s.features),
            s.corpus.as_deref().unwrap_or("?"),
            show(s.peak_rss_mb),
            s.outcome
        );
    }
    let failed: Vec<&str> = rows
        .iter()
        .filter(|(_, s)| s.outcome != "ok")
        .map(|(t, _)| *t)
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "targets failed: {} (inputs in fuzz/artifacts/)",
            failed.join(", ")
        ))
    }
}

/// The number after `key` in a libFuzzer status line (`cov: 123`).
fn field(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(key)? + key.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// libFuzzer's per-input time limit (wall clock) for `target`: 10 s, except `sasl`, where one
/// input may legitimately ask for up to `kafkit_sasl::MAX_ITERATIONS` (1,000,000) PBKDF2
/// iterations: about 1.9 s of CPU for 409,406 iterations under the address sanitizer, so 4.6 s
/// at the bound, which a loaded machine stretches past 10 s of wall time (the first 10 M run of
/// `sasl` stopped on exactly that: a timeout, not a hang).
fn timeout_seconds(target: &str) -> u64 {
    if target == "sasl" { 120 } else { 10 }
}

fn run_one(
    target: &str,
    seconds: u64,
    runs: Option<u64>,
    sanitizer: &str,
) -> Result<Summary, String> {
    let root = repo_root();
    let corpus = root.join("fuzz/corpus").join(target);
    let mut child = Command::new("cargo")
        .env_remove("RUSTUP_TOOLCHAIN")
        .current_dir(&root)
        .args(["+nightly", "fuzz", "run", "--sanitizer", sanitizer, target])
        .arg(&corpus)
        .args([
            "--",
            &format!("-max_total_time={seconds}"),
            "-rss_limit_mb=512",
            "-print_final_stats=1",
        ])
        .arg(format!("-timeout={}", timeout_seconds(target)))
        .args(runs.map(|n| format!("-runs={n}")))
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run cargo fuzz: {e}"))?;
    let mut s = Summary::default();
    let stderr = child.stderr.take().ok_or("no stderr")?;
    for line in BufReader::new(stderr).lines() {
        let line = line.map_err(|e| format!("reading cargo fuzz's output: {e}"))?;
        // New inputs are many and say little; everything else (pulses, errors, stack traces)
        // is shown.
        if !(line.contains("\tNEW ") || line.contains("\tREDUCE ")) {
            eprintln!("{line}");
        }
        if line.starts_with('#') && line.contains("cov: ") {
            s.cov = field(&line, "cov: ").or(s.cov);
            s.features = field(&line, "ft: ").or(s.features);
            s.corpus = line
                .split("corp: ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .map(str::to_string)
                .or(s.corpus.take());
            s.exec_per_sec = field(&line, "exec/s: ").or(s.exec_per_sec);
            s.peak_rss_mb = line
                .split("rss: ")
                .nth(1)
                .and_then(|r| r.trim_end_matches("Mb").trim().parse().ok())
                .or(s.peak_rss_mb);
        }
        if let Some(n) = field(&line, "stat::number_of_executed_units: ") {
            s.executions = Some(n);
        }
        if let Some(n) = field(&line, "stat::peak_rss_mb: ") {
            s.peak_rss_mb = Some(n);
        }
        if line.contains("ERROR: libFuzzer") || line.contains("ERROR: AddressSanitizer") {
            s.outcome = line.trim().to_string();
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for cargo fuzz: {e}"))?;
    if s.outcome.is_empty() {
        s.outcome = if status.success() {
            "ok".into()
        } else {
            format!("failed ({status})")
        };
    }
    Ok(s)
}
