//! `cargo xtask demo`: builds and runs the `kafkit-demo` package (release profile, so the printed
//! throughput means something) with the given arguments.
//!
//! By default the demo starts its own broker (an in-process librdkafka mock cluster). With
//! `--kafka` this task first builds the demo, then starts a 3-broker Apache Kafka cluster on
//! free ports ([`Kafka::start`], the one `cargo xtask broker start --kafka --brokers 3` starts),
//! runs the demo against it with `--bootstrap`, and stops the cluster whatever the demo's
//! outcome.

use std::process::Command;

use crate::broker::Started;
use crate::codegen::repo_root;
use crate::kafka::{self, Kafka};

/// Runs `cargo run --release -p kafkit-demo -- ARGS` from the repository root; with `kafka`,
/// against a 3-broker Apache Kafka cluster of its own.
///
/// Errors: a message when cargo cannot be started, the demo exits non-zero (a mismatch or a
/// failure it printed), or (with `kafka`) Java or Maven is missing or the cluster cannot start.
pub fn run(args: &[String], kafka: bool) -> Result<(), String> {
    if !kafka {
        // `--quiet` hides cargo's progress, and the first release build takes minutes: say so.
        eprintln!("demo: building kafkit-demo (release; the first build takes several minutes)...");
        return run_demo(args);
    }
    if args
        .iter()
        .any(|a| a == "--bootstrap" || a.starts_with("--bootstrap="))
    {
        return Err(
            "demo: --kafka starts its own cluster; leave out --bootstrap (or leave out --kafka \
             to use the broker at --bootstrap)"
                .into(),
        );
    }
    // Fail in seconds on a machine that cannot run Kafka, before the long build: `java` says
    // what to install, `install` does too when Maven is needed and missing.
    let hint = |e: String| {
        format!(
            "demo --kafka: {e}\n(`cargo xtask demo` without --kafka needs neither Java nor Maven)"
        )
    };
    kafka::java().map_err(hint)?;
    kafka::install().map_err(hint)?;
    // Build before the cluster starts, so that it does not sit idle through the build.
    eprintln!("demo: building kafkit-demo (release; the first build takes several minutes)...");
    let status = cargo()
        .args(["build", "--quiet", "--release", "--package", "kafkit-demo"])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("building the demo failed ({status})"));
    }
    let port = crate::test::free_port()?;
    let cluster = Kafka {
        port,
        brokers: 3,
        jmx: false,
    };
    let (started, nodes) = cluster.start(true)?;
    if started == Started::AlreadyRunning {
        // A free port was just picked, so this is a race with another program; using a
        // cluster this task does not own would stop it at the end.
        return Err(format!(
            "demo: a broker answered on the free port {port} just picked; run the demo again"
        ));
    }
    let guard = StopOnDrop(cluster);
    eprintln!(
        "demo: if this is interrupted, stop the cluster with `cargo xtask broker stop --port {port}`"
    );
    let mut demo_args = vec![
        "--bootstrap".to_string(),
        Kafka::bootstrap(&nodes),
        "--broker-name".to_string(),
        format!(
            "Apache Kafka {} ({} brokers, KRaft)",
            kafka::KAFKA_VERSION,
            nodes.len()
        ),
    ];
    demo_args.extend(args.iter().cloned());
    let outcome = run_demo(&demo_args);
    drop(guard);
    outcome
}

/// Stops (and on success forgets) the cluster when dropped: on the demo's success, its
/// failure, and a panic alike.
struct StopOnDrop(Kafka);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        match self.0.stop() {
            Ok(()) => self.0.forget(),
            Err(e) => eprintln!(
                "demo: stopping Apache Kafka failed ({e}); its state is under {}",
                self.0.state_dir().display()
            ),
        }
    }
}

fn cargo() -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut c = Command::new(cargo);
    c.current_dir(repo_root());
    c
}

/// `cargo run --quiet --release -p kafkit-demo -- ARGS`.
fn run_demo(args: &[String]) -> Result<(), String> {
    let status = cargo()
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "kafkit-demo",
            "--",
        ])
        .args(args)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the demo failed ({status})"))
    }
}
