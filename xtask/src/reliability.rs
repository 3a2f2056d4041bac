//! `cargo xtask soak` and `cargo xtask capture`: run the `reliability` program of the
//! integration tests (`tests/bin/reliability.rs`; the code is `integration_tests::soak` and
//! `integration_tests::capture`), debug build, after making sure both tansu builds it starts
//! are there: the prebuilt one with memory storage ([`crate::broker::tansu_binary`], installed
//! into `target/tools/` when missing) and the SQLite one ([`crate::sasl_broker::ensure`], built
//! once per machine). For `soak`, unless `--kafka-records 0` is given, it also starts a
//! three-node Apache Kafka cluster ([`crate::kafka`]) for the Kafka phase, exports it as the
//! tests do (`KAFKIT_KAFKA3_BOOTSTRAP`, `KAFKIT_KAFKA3_STATE`) and stops it afterwards. See
//! docs/reliability.md.

use std::process::Command;

use crate::broker::Started;
use crate::codegen::repo_root;
use crate::kafka::Kafka;
use crate::test::{KAFKA3_BOOTSTRAP_ENV, KAFKA3_STATE_ENV, free_port};
use crate::{broker, sasl_broker};

/// Runs `reliability <command> ARGS`.
///
/// Errors: a message when a tansu build is missing and cannot be made, cargo cannot be
/// started, or the program fails (a soak phase failed, a capture found no traffic).
pub fn run(command: &str, args: &[String]) -> Result<(), String> {
    let memory = broker::tansu_binary()?;
    let sqlite = sasl_broker::ensure(false)?;
    let kafka_phase = command == "soak" && !skips_kafka(args);
    let kafka = if kafka_phase {
        crate::kafka::java()?;
        let cluster = Kafka {
            port: free_port()?,
            brokers: 3,
            jmx: false,
        };
        let (started, nodes) = cluster.start(true)?;
        Some((cluster, started, Kafka::bootstrap(&nodes)))
    } else {
        None
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    eprintln!("{command}: building the integration tests' reliability program (debug)...");
    let mut cmd = Command::new(cargo);
    cmd.current_dir(repo_root())
        .env(broker::TANSU_BIN_ENV, &memory)
        .env(sasl_broker::BIN_ENV, &sqlite);
    if let Some((cluster, _, bootstrap)) = &kafka {
        cmd.env(KAFKA3_BOOTSTRAP_ENV, bootstrap)
            .env(KAFKA3_STATE_ENV, cluster.state_dir());
    }
    let status = cmd
        .args([
            "run",
            "--quiet",
            "-p",
            "integration-tests",
            "--bin",
            "reliability",
            "--",
            command,
        ])
        .args(args)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"));
    if let Some((cluster, Started::Spawned, _)) = &kafka {
        match cluster.stop() {
            // Its logs stay for a look when the run failed.
            Ok(()) if matches!(&status, Ok(s) if s.success()) => cluster.forget(),
            Ok(()) => {}
            Err(e) => eprintln!("{command}: could not stop Apache Kafka: {e}"),
        }
    }
    let status = status?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{command} failed ({status})"))
    }
}

/// Whether the soak's arguments say `--kafka-records 0`.
fn skips_kafka(args: &[String]) -> bool {
    args.windows(2)
        .any(|w| w[0] == "--kafka-records" && w[1].replace('_', "").parse::<u64>() == Ok(0))
}

#[cfg(test)]
mod tests {
    use super::skips_kafka;

    #[test]
    fn only_a_zero_kafka_record_count_skips_the_cluster() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(skips_kafka(&args(&[
            "--records",
            "10",
            "--kafka-records",
            "0"
        ])));
        assert!(!skips_kafka(&args(&["--kafka-records", "1_000"])));
        assert!(!skips_kafka(&args(&["--records", "0"])));
        assert!(!skips_kafka(&args(&[])));
    }
}
