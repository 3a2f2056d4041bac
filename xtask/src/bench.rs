//! `cargo xtask bench producer [ARGS]` and `cargo xtask bench consumer [ARGS]`: build and run
//! the `kafkit-bench` package (release profile) and print its Markdown tables. The cases: tansu
//! and librdkafka's mock cluster (kafkit against librdkafka), and Apache Kafka (`--cases kafka`,
//! `kafka-txn`: every client `--clients` names, kafkit, librdkafka, krafka, franz-go, kafka-go,
//! Java). `cargo xtask bench share [ARGS]` runs the share group bench against Apache Kafka and the
//! Java peer ([`run_share`]); `cargo xtask bench cross` runs every client on every Kafka case into
//! a results file with its tables and charts ([`run_cross`]).
//!
//! Unless the arguments name a broker (`--tansu HOST:PORT`, `--kafka HOST:PORT`) or leave its
//! cases out, a tansu (and for the `kafka` cases a one-node Apache Kafka 4.4) of its own is started
//! on a free port first and stopped afterwards; the peers the clients name are built first
//! ([`peer_env`]). The mock cluster runs inside the bench program. The producer bench on tansu and
//! the mock writes its SVG charts into `docs/img/` (unless the arguments give `--svg DIR` or name
//! a Kafka case, whose charts come from `report`). See `bench/src/main.rs` and docs/benchmarks.md.

use std::process::Command;

use crate::broker::{Broker, Started};
use crate::codegen::repo_root;

/// Runs `cargo run --release -p kafkit-bench -- BENCH [--tansu ADDR] ARGS`, where `bench` is
/// `producer` or `consumer`.
///
/// Errors: a message when tansu cannot be started, cargo cannot be run, or the bench exits
/// non-zero (a run failed, lost records or read wrong ones).
pub fn run(bench: &str, args: &[String]) -> Result<(), String> {
    let own_broker = needs_tansu(args) && !args.iter().any(|a| a.starts_with("--tansu"));
    let mut broker = None;
    let mut bench_args = vec![bench.to_string()];
    let env = peer_env(args)?;
    if own_broker {
        let b = Broker {
            port: crate::test::free_port()?,
        };
        let how = b.start()?;
        bench_args.extend(["--tansu".to_string(), b.bootstrap()]);
        broker = Some((b, how));
    }
    let mut kafka = None;
    if needs_kafka(args) && !has_option(args, "--kafka") {
        let (k, how, bootstrap, jmx) = start_kafka(1)?;
        bench_args.extend(["--kafka".to_string(), bootstrap]);
        if !jmx.is_empty() && bench == "producer" {
            bench_args.extend(["--kafka-jmx".to_string(), jmx]);
        }
        kafka = Some((k, how));
    }
    bench_args.extend(args.iter().cloned());
    if bench == "producer" && !args.iter().any(|a| a.starts_with("--svg")) && !needs_kafka(args) {
        let dir = repo_root().join("docs").join("img");
        bench_args.extend(["--svg".to_string(), dir.display().to_string()]);
    }

    let status = cargo_run_bench(&bench_args, &env);

    if let Some((b, Started::Spawned)) = &broker {
        if let Err(e) = b.stop() {
            eprintln!("bench: could not stop the broker: {e}");
        } else {
            b.forget();
        }
    }
    stop_kafka(kafka.as_ref());
    status
}

/// A one-node Apache Kafka 4.4 of the bench's own on a free port, and its bootstrap address.
///
/// Errors: Kafka cannot be installed or started.
fn start_kafka(brokers: u32) -> Result<(crate::kafka::Kafka, Started, String, String), String> {
    let k = crate::kafka::Kafka {
        port: crate::test::free_port()?,
        brokers,
        // The brokers' request counts, for a client that does not count its requests.
        jmx: true,
    };
    // Node i on port + i for one node; a cluster's nodes each on a free port of the OS's.
    let (how, nodes) = k.start(brokers > 1)?;
    let bootstrap = crate::kafka::Kafka::bootstrap(&nodes);
    let jmx = crate::kafka::Kafka::jmx_addresses(&nodes);
    Ok((k, how, bootstrap, jmx))
}

/// Stops the Kafka [`start_kafka`] started (one that was running already is left alone).
fn stop_kafka(kafka: Option<&(crate::kafka::Kafka, Started)>) {
    if let Some((k, Started::Spawned)) = kafka {
        if let Err(e) = k.stop() {
            eprintln!("bench: could not stop Apache Kafka: {e}");
        } else {
            k.forget();
        }
    }
}

/// The environment that tells the bench where the external peers the arguments ask for are
/// (`--clients` naming krafka, franz-go, kafka-go or java), building each first; the commit
/// being measured (`KAFKIT_BENCH_COMMIT`) for the results file.
///
/// Errors: a peer cannot be built (its toolchain is missing, or its build fails).
fn peer_env(args: &[String]) -> Result<Vec<(&'static str, String)>, String> {
    let clients = option_value(args, "--clients").unwrap_or_default();
    let wants = |name: &str| clients.split(',').any(|c| c.trim() == name);
    let mut env = Vec::new();
    // The Java peer also reads the brokers' request counts for krafka, whose producer does not
    // count its requests (`broker-requests`, over JMX).
    if (wants("java") || wants("krafka"))
        && std::env::var_os(crate::java_peer::CLASS_PATH_ENV).is_none()
    {
        env.push((crate::java_peer::CLASS_PATH_ENV, crate::java_peer::build()?));
    }
    if (wants("franz-go") || wants("kafka-go")) && std::env::var_os(GO_PEER_ENV).is_none() {
        env.push((GO_PEER_ENV, crate::go_peer::build()?.display().to_string()));
    }
    if wants("krafka") && std::env::var_os(KRAFKA_PEER_ENV).is_none() {
        env.push((KRAFKA_PEER_ENV, crate::krafka_peer::build()?));
    }
    if let Ok(out) = Command::new("git")
        .current_dir(repo_root())
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        && out.status.success()
    {
        let mut commit = String::from_utf8_lossy(&out.stdout).trim().to_string();
        // A tree with changes is not the commit: say so in the results.
        let dirty = Command::new("git")
            .current_dir(repo_root())
            .args(["status", "--porcelain", "--untracked-files=no"])
            .output()
            .is_ok_and(|o| !o.stdout.is_empty());
        if dirty {
            commit.push_str("-dirty");
        }
        env.push(("KAFKIT_BENCH_COMMIT", commit));
    }
    Ok(env)
}

/// Environment variable naming the Go peer's binary, read by the bench.
const GO_PEER_ENV: &str = "KAFKIT_GO_PEER";
/// Environment variable naming the krafka peer's binary, read by the bench.
const KRAFKA_PEER_ENV: &str = "KAFKIT_KRAFKA_PEER";

/// Whether `--cases` names a case on Apache Kafka (`kafka`, `kafka-txn`).
fn needs_kafka(args: &[String]) -> bool {
    option_value(args, "--cases")
        .is_some_and(|c| c.split(',').any(|c| c.trim().starts_with("kafka")))
}

/// `cargo xtask bench share [ARGS]`: `kafkit-bench share --bootstrap ADDR ARGS` with the Java
/// peer's class path in `KAFKIT_JAVA_PEER_CP`. Unless the arguments name a broker
/// (`--bootstrap`), a one-node Apache Kafka 4.4 of its own is started on a free port first and
/// stopped afterwards; unless they give `--java-cp` or leave the Java client out (`--clients
/// ours`), the Java peer is built first (`cargo xtask java-peer`). The broker's process id goes
/// with `--broker-pid`, so each run measures the broker's CPU over its window too.
///
/// Errors: a message when Kafka or the Java peer cannot be had, cargo cannot be run, or the
/// bench fails.
pub fn run_share(args: &[String]) -> Result<(), String> {
    let mut env = Vec::new();
    if !has_option(args, "--java-cp")
        && option_value(args, "--clients").is_none_or(|c| c.contains("java"))
    {
        env.push((crate::java_peer::CLASS_PATH_ENV, crate::java_peer::build()?));
    }
    let mut bench_args = vec!["share".to_string()];
    let mut kafka = None;
    if !has_option(args, "--bootstrap") {
        let (k, how, bootstrap, _) = start_kafka(1)?;
        bench_args.extend(["--bootstrap".to_string(), bootstrap]);
        // The node's CPU over each run's window goes into the tables.
        let pid_file = k.state_dir().join("node-1").join("kafka.pid");
        if let Ok(pid) = std::fs::read_to_string(pid_file) {
            bench_args.extend(["--broker-pid".to_string(), pid.trim().to_string()]);
        }
        kafka = Some((k, how));
    }
    bench_args.extend(args.iter().cloned());
    let status = cargo_run_bench(&bench_args, &env);
    stop_kafka(kafka.as_ref());
    status
}

/// What `cargo xtask bench cross` runs.
pub struct CrossPlan {
    /// Records per run at 6 and 48 partitions.
    pub records: u64,
    /// Runs per client per case.
    pub repeat: u32,
    /// The results file (default `docs/bench/kafka-<date>.jsonl`).
    pub json: Option<std::path::PathBuf>,
    /// The charts' directory (default `docs/img`).
    pub svg: Option<std::path::PathBuf>,
}

/// Every client of the cross-client bench.
const CROSS_CLIENTS: &str = "ours,rdkafka,krafka,franz-go,kafka-go,java";

/// The bench runs of `cargo xtask bench cross`, in order: each a `kafkit-bench` command line
/// without its broker and results file.
fn cross_runs(plan: &CrossPlan) -> Vec<Vec<String>> {
    let n = plan.records.max(1);
    let (r, r2) = (plan.repeat.max(1), plan.repeat.clamp(1, 2));
    let producer = |extra: &[&str], partitions: &str, records: u64, repeat: u32| {
        let mut a: Vec<String> = ["producer", "--cases", "kafka", "--clients", CROSS_CLIENTS]
            .iter()
            .map(ToString::to_string)
            .collect();
        a.extend(["--kafka-partitions".into(), partitions.into()]);
        a.extend(["--records".into(), records.to_string()]);
        a.extend(["--repeat".into(), repeat.to_string()]);
        a.extend(extra.iter().map(ToString::to_string));
        a
    };
    let idem = ["--acks", "all", "--idempotence", "true"];
    let consumer = |partitions: &str, records: u64, repeat: u32| -> Vec<String> {
        ["consumer", "--cases", "kafka", "--clients", CROSS_CLIENTS]
            .iter()
            .map(ToString::to_string)
            .chain([
                "--partitions".into(),
                partitions.into(),
                "--records".into(),
                records.to_string(),
                "--repeat".into(),
                repeat.to_string(),
            ])
            .collect()
    };
    let wide = (n * 3 / 10).max(1);
    let mut txn = producer(&[], "48", (n / 2).max(1), r2);
    txn[2] = "kafka-txn".into();
    txn.extend([
        "--partitions".into(),
        "48".into(),
        "--txn-records".into(),
        "10000".into(),
    ]);
    let group: Vec<String> = [
        "consumer",
        "--cases",
        "kafka",
        "--clients",
        CROSS_CLIENTS,
        "--group",
        "--partitions",
        "48",
    ]
    .iter()
    .map(ToString::to_string)
    .chain([
        "--records".into(),
        (n * 5).to_string(),
        "--repeat".into(),
        r2.to_string(),
    ])
    .collect();
    vec![
        producer(&[], "48", n, r),
        producer(&idem, "48", n, r),
        producer(&["--compression", "lz4"], "48", n, r2),
        producer(&["--compression", "zstd"], "48", n, r2),
        producer(&[], "1000", wide, r2),
        producer(&idem, "1000", wide, r2),
        txn,
        consumer("6,48", n, r),
        consumer("1000", wide, r2),
        group,
    ]
}

/// The bench runs of `cargo xtask bench cross` on a cluster of three Kafka nodes (after the one
/// node's): the producer with acks=all and idempotence to 48 partitions of three replicas each,
/// where one Produce request per broker carries a third of the partitions.
fn cluster_runs(plan: &CrossPlan) -> Vec<Vec<String>> {
    let producer: Vec<String> = [
        "producer",
        "--cases",
        "kafka",
        "--clients",
        CROSS_CLIENTS,
        "--kafka-partitions",
        "48",
        "--replication-factor",
        "3",
        "--acks",
        "all",
        "--idempotence",
        "true",
    ]
    .iter()
    .map(ToString::to_string)
    .chain([
        "--records".into(),
        plan.records.max(1).to_string(),
        "--repeat".into(),
        plan.repeat.max(1).to_string(),
    ])
    .collect();
    vec![producer]
}

/// `cargo xtask bench cross`: builds the peers, starts one Kafka node, warms it up (one untimed
/// run of two clients), runs [`cross_runs`] against it with every run appended to the results
/// file, stops it, does the same with a cluster of three nodes and [`cluster_runs`], and prints
/// the tables of the file and writes its charts (`kafkit-bench report`).
///
/// Errors: a peer or Kafka cannot be had, or a bench run failed (every case runs regardless, and
/// its runs stay in the results file).
pub fn run_cross(plan: &CrossPlan) -> Result<(), String> {
    let clients = vec!["--clients".to_string(), CROSS_CLIENTS.to_string()];
    let env = peer_env(&clients)?;
    let json = plan.json.clone().unwrap_or_else(|| {
        let date = Command::new("date")
            .arg("+%Y-%m-%d")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        repo_root()
            .join("docs")
            .join("bench")
            .join(format!("kafka-{date}.jsonl"))
    });
    let svg = plan
        .svg
        .clone()
        .unwrap_or_else(|| repo_root().join("docs").join("img"));
    let (k, how, bootstrap, jmx) = start_kafka(1)?;
    let kafka = Some((k, how));
    let with_broker = |mut args: Vec<String>, record: bool| {
        args.extend(["--kafka".to_string(), bootstrap.clone()]);
        if !jmx.is_empty() && args.first().is_some_and(|a| a == "producer") {
            args.extend(["--kafka-jmx".to_string(), jmx.clone()]);
        }
        if record {
            args.extend(["--json".to_string(), json.display().to_string()]);
        }
        args
    };
    let warm_up: Vec<String> = [
        "producer",
        "--cases",
        "kafka",
        "--clients",
        "ours,rdkafka",
        "--kafka-partitions",
        "48",
    ]
    .iter()
    .map(ToString::to_string)
    .chain(["--records".into(), plan.records.to_string()])
    .collect();
    // Every case runs even when one before it failed (its failed runs are in the results).
    let mut failed = Vec::new();
    let warmed = cargo_run_bench(&with_broker(warm_up.clone(), false), &env);
    if warmed.is_ok() {
        for run in cross_runs(plan) {
            if let Err(e) = cargo_run_bench(&with_broker(run.clone(), true), &env) {
                failed.push(format!("{}: {e}", run[..3].join(" ")));
            }
        }
    }
    stop_kafka(kafka.as_ref());
    warmed?;
    // The cluster's case: three nodes of their own, warmed up the same way.
    let (k3, how3, bootstrap3, jmx3) = start_kafka(3)?;
    let cluster = Some((k3, how3));
    let on_cluster = |mut args: Vec<String>, record: bool| {
        args.extend(["--kafka".to_string(), bootstrap3.clone()]);
        if !jmx3.is_empty() && args.first().is_some_and(|a| a == "producer") {
            args.extend(["--kafka-jmx".to_string(), jmx3.clone()]);
        }
        if record {
            args.extend(["--json".to_string(), json.display().to_string()]);
        }
        args
    };
    let mut warm_up3 = warm_up.clone();
    warm_up3.extend(["--replication-factor".into(), "3".into()]);
    let warmed3 = cargo_run_bench(&on_cluster(warm_up3, false), &env);
    if warmed3.is_ok() {
        for run in cluster_runs(plan) {
            if let Err(e) = cargo_run_bench(&on_cluster(run.clone(), true), &env) {
                failed.push(format!("3 nodes: {}: {e}", run[..3].join(" ")));
            }
        }
    }
    stop_kafka(cluster.as_ref());
    warmed3?;
    cargo_run_bench(
        &[
            "report".to_string(),
            "--json".into(),
            json.display().to_string(),
            "--svg".into(),
            svg.display().to_string(),
        ],
        &env,
    )?;
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("some runs failed: {}", failed.join("; ")))
    }
}

/// `cargo run --release -p kafkit-bench -- ARGS` with `env` set.
///
/// Errors: cargo cannot be run, or the bench exits non-zero.
fn cargo_run_bench(bench_args: &[String], env: &[(&str, String)]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    eprintln!("bench: building kafkit-bench (release; the first build takes several minutes)...");
    let status = Command::new(cargo)
        .current_dir(repo_root())
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "kafkit-bench",
            "--",
        ])
        .args(bench_args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the bench failed ({status})"))
    }
}

/// Whether `name` is among the arguments (`--name value` or `--name=value`).
fn has_option(args: &[String], name: &str) -> bool {
    args.iter()
        .any(|a| a == name || a.strip_prefix(name).is_some_and(|r| r.starts_with('=')))
}

/// The value of `--name value` or `--name=value`, the last one given.
fn option_value(args: &[String], name: &str) -> Option<String> {
    let mut value = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == name {
            value = it.next().cloned();
        } else if let Some(v) = a.strip_prefix(name).and_then(|r| r.strip_prefix('=')) {
            value = Some(v.to_string());
        }
    }
    value
}

/// Whether the tansu case is selected: no `--cases`, or a `--cases` list naming `tansu`.
fn needs_tansu(args: &[String]) -> bool {
    let mut cases = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(v) = a.strip_prefix("--cases=") {
            cases = Some(v.to_string());
        } else if a == "--cases" {
            cases = it.next().cloned();
        }
    }
    cases.is_none_or(|c| c.split(',').any(|c| c.trim() == "tansu"))
}

#[cfg(test)]
mod tests {
    use super::{has_option, needs_tansu, option_value};

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_cross_bench_covers_every_case_the_docs_name() {
        let plan = super::CrossPlan {
            records: 1_000,
            repeat: 3,
            json: None,
            svg: None,
        };
        let runs = super::cross_runs(&plan);
        let lines: Vec<String> = runs.iter().map(|r| r.join(" ")).collect();
        let has = |needle: &str| lines.iter().any(|l| l.contains(needle));
        assert!(has("--kafka-partitions 48 --records 1000 --repeat 3"));
        assert!(has("--acks all --idempotence true"));
        assert!(has("--compression lz4") && has("--compression zstd"));
        assert!(has("--kafka-partitions 1000 --records 300 --repeat 2"));
        assert!(has("--cases kafka-txn") && has("--txn-records 10000"));
        assert!(has("consumer --cases kafka") && has("--partitions 6,48"));
        assert!(has("--group --partitions 48 --records 5000"));
        let cluster: Vec<String> = super::cluster_runs(&plan)
            .iter()
            .map(|r| r.join(" "))
            .collect();
        assert!(
            cluster.iter().any(|l| l.contains("--replication-factor 3")
                && l.contains("--acks all --idempotence true")
                && l.contains(super::CROSS_CLIENTS)),
            "{cluster:?}"
        );
        for l in &lines {
            assert!(
                l.contains(&format!("--clients {}", super::CROSS_CLIENTS)),
                "{l}"
            );
        }
    }

    #[test]
    fn kafka_is_needed_when_a_case_names_it() {
        assert!(!super::needs_kafka(&args(&[])));
        assert!(!super::needs_kafka(&args(&["--cases", "mock,tansu"])));
        assert!(super::needs_kafka(&args(&["--cases", "kafka"])));
        assert!(super::needs_kafka(&args(&["--cases=mock,kafka-txn"])));
    }

    #[test]
    fn tansu_is_needed_unless_left_out() {
        assert!(needs_tansu(&args(&[])));
        assert!(needs_tansu(&args(&["--records", "1000"])));
        assert!(needs_tansu(&args(&["--cases", "mock,tansu"])));
        assert!(needs_tansu(&args(&["--cases=tansu"])));
        assert!(!needs_tansu(&args(&["--cases", "mock,wide"])));
        assert!(!needs_tansu(&args(&["--cases=wide"])));
    }

    #[test]
    fn options_are_found_in_both_spellings() {
        let a = args(&["--records", "10", "--clients=ours", "--bootstrap", "h:1"]);
        assert!(has_option(&a, "--bootstrap"));
        assert!(!has_option(&a, "--java-cp"));
        assert!(!has_option(&args(&["--bootstrapx"]), "--bootstrap"));
        assert_eq!(option_value(&a, "--clients").as_deref(), Some("ours"));
        assert_eq!(option_value(&a, "--records").as_deref(), Some("10"));
        assert_eq!(option_value(&a, "--rounds"), None);
    }
}
