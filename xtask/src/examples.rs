//! The `examples` step of `cargo xtask test`: builds the `kafkit-examples` programs once and
//! runs the built binaries against tansu and against the one-node Apache Kafka, checking that
//! each one's output says it did its job (not only that it exited 0).
//!
//! Per broker the runs go in three stages ([`STAGES`]): `produce` first (the `consume` and
//! `group` examples read what it wrote), then the others side by side (they use topics and
//! groups of their own), then `group` and `transact` again: a rerun must be assigned its
//! partitions at once, which it is only when the first run left the group (a member that
//! stayed holds the rebalance until its 10 s session times out). The two brokers' stages run
//! side by side. Each run has [`TIMEOUT`]; a failure prints the example's whole output.
//!
//! A broker ([`Target`]) comes with the environment its runs get: the Apache Kafka rig's
//! secured listeners (`KAFKIT_KAFKA_SASL_BOOTSTRAP`...), which the `security` example reads.
//! An example that needs a variable the target lacks ([`NEEDS_ENV`]) is skipped there, with a
//! line that says so.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The longest one example may run.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// A rerun of a group example must be assigned within this many seconds of its start: tansu
/// holds a new member's first join about half the 10 s session (5 s), Apache Kafka answers at
/// once; a previous member that did not leave holds the rebalance until its session times
/// out (10 s).
const RERUN_ASSIGNED_WITHIN_S: f64 = 9.0;

/// One run of an example: its name and what its stdout must show.
struct Run {
    example: &'static str,
    /// How the run is named in the report (`group (rerun)`).
    label: &'static str,
    check: fn(&str) -> Result<(), String>,
}

/// The runs per broker, stage by stage; the runs of a stage go side by side.
const STAGES: [&[Run]; 3] = [
    &[Run {
        example: "produce",
        label: "produce",
        check: check_produce,
    }],
    &[
        Run {
            example: "write_multi",
            label: "write_multi",
            check: check_write_multi,
        },
        Run {
            example: "admin",
            label: "admin",
            check: check_admin,
        },
        Run {
            example: "consume",
            label: "consume",
            check: check_consume,
        },
        Run {
            example: "group",
            label: "group",
            check: check_group,
        },
        Run {
            example: "transact",
            label: "transact",
            check: check_transact,
        },
        Run {
            example: "share",
            label: "share",
            check: check_share,
        },
        Run {
            example: "metrics_prometheus",
            label: "metrics_prometheus",
            check: check_metrics_prometheus,
        },
        Run {
            example: "security",
            label: "security",
            check: check_security,
        },
        Run {
            example: "throughput",
            label: "throughput",
            check: check_throughput,
        },
        Run {
            example: "from_rdkafka",
            label: "from_rdkafka",
            check: check_from_rdkafka,
        },
    ],
    &[
        Run {
            example: "group",
            label: "group (rerun)",
            check: check_group_rerun,
        },
        Run {
            example: "transact",
            label: "transact (rerun)",
            check: check_transact_rerun,
        },
    ],
];

/// Examples that need a broker feature tansu lacks (share groups, KIP-932; the Kafka rig's
/// SASL and TLS listeners): run on every broker but the one named `tansu`.
const NOT_ON_TANSU: &[&str] = &["share", "security"];

/// The environment variables an example needs from its [`Target`]: the Kafka rig's SASL
/// listener, its SSL and MTLS listeners and the folder of their certificates (see
/// `crate::test`'s `KAFKA_*_ENV`).
const NEEDS_ENV: &[(&str, &[&str])] = &[(
    "security",
    &[
        crate::test::KAFKA_SASL_BOOTSTRAP_ENV,
        crate::test::KAFKA_SSL_BOOTSTRAP_ENV,
        crate::test::KAFKA_MTLS_BOOTSTRAP_ENV,
        crate::test::KAFKA_TLS_DIR_ENV,
    ],
)];

/// A broker the examples run against.
pub struct Target<'a> {
    /// Its name in the report (`tansu`, `Apache Kafka`).
    pub name: &'a str,
    /// Its bootstrap address, passed as `--bootstrap`.
    pub bootstrap: &'a str,
    /// Environment variables every run against it gets (the secured listeners).
    pub env: Vec<(&'static str, String)>,
}

impl Target<'_> {
    /// The variables of [`NEEDS_ENV`] that `example` needs and this target lacks.
    fn missing(&self, example: &str) -> Vec<&'static str> {
        NEEDS_ENV
            .iter()
            .filter(|(e, _)| *e == example)
            .flat_map(|(_, names)| names.iter().copied())
            .filter(|n| !self.env.iter().any(|(k, v)| k == n && !v.is_empty()))
            .collect()
    }
}

/// Builds the examples (`cargo build --workspace --examples`, the features the test steps
/// build with, so nothing is compiled twice) and runs them against each of `brokers`. Returns
/// an error naming every run that failed.
pub fn run(brokers: &[Target<'_>]) -> Result<(), String> {
    let started = Instant::now();
    let binaries = build()?;
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = brokers
            .iter()
            .map(|target| {
                let binaries = &binaries;
                s.spawn(move || run_stages(target, binaries))
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec!["a run thread panicked".to_owned()])
            })
            .collect()
    });
    println!(
        "xtask test: step examples took {}s",
        started.elapsed().as_secs()
    );
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("step examples failed: {}", failures.join("; ")))
    }
}

/// The examples' executables by name, from cargo's JSON messages.
fn build() -> Result<Vec<(String, PathBuf)>, String> {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.args([
        "build",
        "--workspace",
        "--examples",
        "--message-format=json-render-diagnostics",
    ])
    .current_dir(crate::broker::workspace_root())
    .stdout(Stdio::piped());
    let mut child = c
        .spawn()
        .map_err(|e| format!("step examples: cargo build could not start: {e}"))?;
    let stdout = child.stdout.take().ok_or("step examples: no stdout")?;
    let mut out = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("step examples: reading cargo's output: {e}"))?;
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let is_example = msg["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "example"));
        let ours = msg["package_id"]
            .as_str()
            .is_some_and(|id| id.contains("kafkit-examples"));
        if let (true, true, Some(name), Some(exe)) = (
            is_example,
            ours,
            msg["target"]["name"].as_str(),
            msg["executable"].as_str(),
        ) {
            out.push((name.to_owned(), PathBuf::from(exe)));
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("step examples: cargo build: {e}"))?;
    if !status.success() {
        return Err(format!("step examples: cargo build failed ({status})"));
    }
    for stage in STAGES {
        for r in stage {
            if !out.iter().any(|(n, _)| n == r.example) {
                return Err(format!(
                    "step examples: cargo built no example named {}",
                    r.example
                ));
            }
        }
    }
    Ok(out)
}

/// The stages against one broker; stops at the first stage with a failure. Returns the
/// failures, each naming the broker and the run.
fn run_stages(target: &Target<'_>, binaries: &[(String, PathBuf)]) -> Vec<String> {
    let broker = target.name;
    for stage in STAGES {
        let failures: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = stage
                .iter()
                .filter(|r| !(broker == "tansu" && NOT_ON_TANSU.contains(&r.example)))
                .filter(|r| {
                    let missing = target.missing(r.example);
                    if !missing.is_empty() {
                        println!(
                            "xtask test: example {} on {broker}: skipped ({} not given)",
                            r.label,
                            missing.join(", ")
                        );
                    }
                    missing.is_empty()
                })
                .map(|r| {
                    let exe = binaries
                        .iter()
                        .find(|(n, _)| n == r.example)
                        .map(|(_, p)| p.as_path());
                    s.spawn(move || run_one(target, r, exe))
                })
                .collect();
            handles
                .into_iter()
                .filter_map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a run thread panicked".to_owned()))
                        .err()
                })
                .collect()
        });
        if !failures.is_empty() {
            return failures;
        }
    }
    Vec::new()
}

/// Runs one example to its end (or [`TIMEOUT`]) and checks its exit status and output.
fn run_one(target: &Target<'_>, run: &Run, exe: Option<&Path>) -> Result<(), String> {
    let broker = target.name;
    let fail = |why: String, output: &str| {
        let mut report = format!("{} on {broker}: {why}", run.label);
        if !output.is_empty() {
            println!("xtask test: --- {} on {broker}: output ---", run.label);
            print!("{output}");
            println!("xtask test: --- end of output ---");
        }
        report.truncate(report.trim_end().len());
        report
    };
    let exe = exe.ok_or_else(|| fail("not built".to_owned(), ""))?;
    let started = Instant::now();
    let mut child = Command::new(exe)
        .args(["--bootstrap", target.bootstrap])
        .env_remove("KAFKIT_BOOTSTRAP")
        .envs(target.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!("could not start: {e}"), ""))?;
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if started.elapsed() >= TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(fail(format!("wait: {e}"), "")),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let output = format!("{stdout}{stderr}");
    let took = started.elapsed().as_secs_f64();
    match status {
        None => return Err(fail(format!("still running after {TIMEOUT:?}"), &output)),
        Some(s) if !s.success() => return Err(fail(format!("exited with {s}"), &output)),
        Some(_) => {}
    }
    (run.check)(&stdout).map_err(|why| fail(why, &output))?;
    println!(
        "xtask test: example {} on {broker}: ok ({took:.1} s)",
        run.label
    );
    Ok(())
}

/// Reads a pipe to its end on a thread (so a full pipe never blocks the child).
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_string(&mut s);
        }
        s
    })
}

/// The number that follows `prefix` at the start of a line (the first such line).
fn number_after(out: &str, prefix: &str) -> Option<f64> {
    out.lines().find_map(|l| {
        let rest = l.trim_start().strip_prefix(prefix)?;
        let n: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        n.parse().ok()
    })
}

fn need(out: &str, text: &str) -> Result<(), String> {
    if out.contains(text) {
        Ok(())
    } else {
        Err(format!("its output has no \"{text}\""))
    }
}

fn at_least(out: &str, prefix: &str, min: f64) -> Result<f64, String> {
    match number_after(out, prefix) {
        Some(n) if n >= min => Ok(n),
        Some(n) => Err(format!("\"{prefix}{n}\": expected at least {min}")),
        None => Err(format!("its output has no line \"{prefix}N\"")),
    }
}

/// One record acknowledged, then 1000 whose per-partition offset ranges add up to 1000.
fn check_produce(out: &str) -> Result<(), String> {
    need(out, "1 record: kafkit-example-orders/")?;
    need(out, "1000 records:")?;
    let ranges: f64 = out
        .lines()
        .filter(|l| l.contains(" records at offsets "))
        .filter_map(|l| number_after(l.split_once(": ")?.1, ""))
        .sum();
    if ranges != 1000.0 {
        return Err(format!(
            "the per-partition offset ranges hold {ranges} records, not 1000"
        ));
    }
    Ok(())
}

fn check_write_multi(out: &str) -> Result<(), String> {
    need(out, "ONE Produce request")?;
    need(out, "wrote 8 partitions")
}

fn check_admin(out: &str) -> Result<(), String> {
    need(out, "retention.ms = 3600000")?;
    need(
        out,
        "kafkit-example-billing committed kafkit-example-payments/0 at 5",
    )?;
    need(
        out,
        "kafkit-example-billing on kafkit-example-payments/0: committed 5,",
    )
}

/// Every job of the run accepted, the ten failing ones released and delivered again.
fn check_share(out: &str) -> Result<(), String> {
    need(
        out,
        "accepted 100 of 100 jobs, 10 released and delivered again",
    )
}

/// A record written over each of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, TLS and
/// mutual TLS, and the six read back over mutual TLS.
fn check_security(out: &str) -> Result<(), String> {
    for how in [
        "PLAIN",
        "SCRAM-SHA-256",
        "SCRAM-SHA-512",
        "OAUTHBEARER",
        "TLS",
        "mTLS",
    ] {
        need(
            out,
            &format!("\n{how}: wrote kafkit-example-secure/0 at offset "),
        )?;
    }
    need(out, "read back 6 records over mutual TLS")
}

/// Its 50 000 records written and read back.
fn check_throughput(out: &str) -> Result<(), String> {
    need(out, "wrote 50000 records in ")?;
    need(out, "read 50000 records in ")
}

/// Its 10 records delivered one by one, then read back in its group and committed.
fn check_from_rdkafka(out: &str) -> Result<(), String> {
    let delivered = out
        .lines()
        .filter(|l| l.starts_with("delivered \"run "))
        .count();
    if delivered != 10 {
        return Err(format!("{delivered} deliveries printed, expected 10"));
    }
    need(out, "this run's 10 among them; committed and left")
}

/// Everything `produce` wrote (at least its 1001 records) read back.
fn check_consume(out: &str) -> Result<(), String> {
    at_least(out, "read ", 1001.0).map(drop)
}

/// Wrote and read back its 100 records, and the Prometheus scrape it printed says so: sent,
/// consumed, fetched and processed 100 for its topic, no lag left.
fn check_metrics_prometheus(out: &str) -> Result<(), String> {
    need(out, "wrote 100 records")?;
    need(out, "read 100 records")?;
    let topic = "\"kafkit-example-metrics\"";
    for metric in [
        "messaging_client_sent_messages{",
        "messaging_client_consumed_messages{",
        "messaging_process_duration_count{",
    ] {
        let line = out
            .lines()
            .find(|l| l.starts_with(metric) && l.contains(topic))
            .ok_or_else(|| format!("its scrape has no {metric}...}} line for the topic"))?;
        if !line.ends_with("} 100") {
            return Err(format!("\"{line}\": expected 100"));
        }
    }
    let fetched: f64 = out
        .lines()
        .filter(|l| l.starts_with("kafkit_fetch_records_total{") && l.contains(topic))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    if fetched < 100.0 {
        return Err(format!(
            "kafkit_fetch_records_total adds up to {fetched}, not 100"
        ));
    }
    need(out, "kafkit_connects_total{")?;
    need(out, "kafkit_consumer_lag{")
}

/// Assigned all 3 partitions, read at least what `produce` wrote since the group's last
/// commits, committed, left.
fn check_group(out: &str) -> Result<(), String> {
    let assigned = out
        .lines()
        .find(|l| l.starts_with("assigned after "))
        .ok_or("its output has no \"assigned after\" line")?;
    if assigned.matches("kafkit-example-orders/").count() != 3 {
        return Err(format!("\"{assigned}\": expected the 3 partitions"));
    }
    at_least(out, "read ", 1001.0)?;
    need(out, "left group")
}

fn check_group_rerun(out: &str) -> Result<(), String> {
    assigned_soon(out)?;
    need(out, "read 0 records")?;
    need(out, "left group")
}

/// The 1000 words it wrote committed in transactions, none aborted.
fn check_transact(out: &str) -> Result<(), String> {
    need(out, "assigned after ")?;
    at_least(out, "committed ", 1.0)?;
    at_least(out, "done: committed ", 1000.0)?;
    need(out, " 0 aborted")
}

fn check_transact_rerun(out: &str) -> Result<(), String> {
    assigned_soon(out)?;
    check_transact(out)
}

fn assigned_soon(out: &str) -> Result<(), String> {
    match number_after(out, "assigned after ") {
        Some(s) if s < RERUN_ASSIGNED_WITHIN_S => Ok(()),
        Some(s) => Err(format!(
            "a rerun assigned after {s} s (a member of the previous run still in the group?)"
        )),
        None => Err("its output has no \"assigned after\" line".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_scrape_must_count_the_100_records() {
        let t = "messaging_destination_name=\"kafkit-example-metrics\"";
        let good = format!(
            "wrote 100 records\nread 100 records\n--- scrape ---\n\
             messaging_client_sent_messages{{messaging_system=\"kafka\",{t}}} 100\n\
             messaging_client_consumed_messages{{{t}}} 100\n\
             messaging_process_duration_count{{{t}}} 100\n\
             kafkit_fetch_records_total{{node_id=\"1\",topic=\"kafkit-example-metrics\"}} 60\n\
             kafkit_fetch_records_total{{node_id=\"2\",topic=\"kafkit-example-metrics\"}} 40\n\
             kafkit_connects_total{{node_id=\"1\"}} 2\n\
             kafkit_consumer_lag{{topic=\"kafkit-example-metrics\",partition=\"0\"}} 0\n"
        );
        assert_eq!(check_metrics_prometheus(&good), Ok(()));
        let fewer = good.replace(
            "kafka\",messaging_destination_name=\"kafkit-example-metrics\"} 100",
            "kafka\",messaging_destination_name=\"kafkit-example-metrics\"} 99",
        );
        assert!(
            check_metrics_prometheus(&fewer)
                .unwrap_err()
                .contains("expected 100")
        );
        let unfetched = good.replace("} 40\n", "} 30\n");
        assert!(
            check_metrics_prometheus(&unfetched)
                .unwrap_err()
                .contains("90")
        );
    }

    #[test]
    fn produce_ranges_must_hold_1000() {
        let good = "1 record: kafkit-example-orders/0 at offset 0\n1000 records:\n  \
                    kafkit-example-orders/0: 200 records at offsets 1 to 200\n  \
                    kafkit-example-orders/1: 800 records at offsets 0 to 799\n";
        assert_eq!(check_produce(good), Ok(()));
        let short = good.replace("800 records", "700 records");
        assert!(check_produce(&short).unwrap_err().contains("900"));
    }

    #[test]
    fn transact_must_commit() {
        let zero =
            "assigned after 5.0 s: a/0\ndone: committed 0 records in 0 transactions, 0 aborted\n";
        assert!(check_transact(zero).is_err());
        let good = "assigned after 5.0 s: a/0\ncommitted 1000 records of 3 partitions\n\
                    done: committed 1000 records in 1 transactions, 0 aborted\n";
        assert_eq!(check_transact(good), Ok(()));
        let slow = good.replace("after 5.0", "after 10.3");
        assert!(check_transact_rerun(&slow).unwrap_err().contains("10.3"));
    }

    #[test]
    fn group_needs_its_partitions_and_records() {
        let good = "assigned after 0.1 s: kafkit-example-orders/0 kafkit-example-orders/1 \
                    kafkit-example-orders/2\nread 2002 records, 2 commits\nleft group g\n";
        assert_eq!(check_group(good), Ok(()));
        assert!(check_group(&good.replace("2002", "0")).is_err());
        assert!(check_group(&good.replace(" kafkit-example-orders/2", "")).is_err());
    }

    /// `security` runs only where the Kafka rig's four secured-listener variables are given.
    #[test]
    fn security_needs_the_secured_listeners() {
        let mut target = Target {
            name: "Apache Kafka",
            bootstrap: "127.0.0.1:9092",
            env: vec![(
                crate::test::KAFKA_SASL_BOOTSTRAP_ENV,
                "127.0.0.1:9093".into(),
            )],
        };
        assert_eq!(target.missing("security").len(), 3);
        assert!(target.missing("produce").is_empty());
        target.env.extend([
            (
                crate::test::KAFKA_SSL_BOOTSTRAP_ENV,
                "127.0.0.1:9094".into(),
            ),
            (
                crate::test::KAFKA_MTLS_BOOTSTRAP_ENV,
                "127.0.0.1:9095".into(),
            ),
            (crate::test::KAFKA_TLS_DIR_ENV, "/tmp/tls".into()),
        ]);
        assert!(target.missing("security").is_empty());
        let good = "created kafkit-example-secure (1 partitions)\n\
                    PLAIN: wrote kafkit-example-secure/0 at offset 0\n\
                    SCRAM-SHA-256: wrote kafkit-example-secure/0 at offset 1\n\
                    SCRAM-SHA-512: wrote kafkit-example-secure/0 at offset 2\n\
                    OAUTHBEARER: wrote kafkit-example-secure/0 at offset 3\n\
                    TLS: wrote kafkit-example-secure/0 at offset 4\n\
                    mTLS: wrote kafkit-example-secure/0 at offset 5\n\
                    read back 6 records over mutual TLS: over PLAIN, ...\n";
        assert_eq!(check_security(good), Ok(()));
        let no_tls = good.replace("\nTLS: wrote", "\nTLS: failed");
        assert!(check_security(&no_tls).unwrap_err().contains("TLS: wrote"));
    }

    /// Every example of the package runs in the step, and every run names one of them.
    #[test]
    fn the_stages_run_every_example() {
        let manifest =
            std::fs::read_to_string(crate::broker::workspace_root().join("examples/Cargo.toml"))
                .unwrap();
        let names: Vec<&str> = manifest
            .split("[[example]]")
            .skip(1)
            .filter_map(|block| block.split('"').nth(1))
            .collect();
        assert!(names.len() >= 6, "{names:?}");
        let run: Vec<&str> = STAGES
            .iter()
            .flat_map(|s| s.iter().map(|r| r.example))
            .collect();
        for n in &names {
            assert!(
                run.contains(n),
                "example {n} is not run by the examples step"
            );
        }
        for r in &run {
            assert!(names.contains(r), "{r} is not an example of the package");
        }
    }
}
