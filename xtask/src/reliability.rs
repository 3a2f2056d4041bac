//! `cargo xtask soak` and `cargo xtask capture`: run the `reliability` program of the
//! integration tests (`tests/bin/reliability.rs`; the code is `integration_tests::soak` and
//! `integration_tests::capture`), debug build, after making sure both tansu builds it starts
//! are there: the prebuilt one with memory storage ([`crate::broker::tansu_binary`], installed
//! into `target/tools/` when missing) and the SQLite one ([`crate::sasl_broker::ensure`], built
//! once per machine). See docs/reliability.md.

use std::process::Command;

use crate::codegen::repo_root;
use crate::{broker, sasl_broker};

/// Runs `reliability <command> ARGS`.
///
/// Errors: a message when a tansu build is missing and cannot be made, cargo cannot be
/// started, or the program fails (a soak phase failed, a capture found no traffic).
pub fn run(command: &str, args: &[String]) -> Result<(), String> {
    let memory = broker::tansu_binary()?;
    let sqlite = sasl_broker::ensure(false)?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    eprintln!("{command}: building the integration tests' reliability program (debug)...");
    let status = Command::new(cargo)
        .current_dir(repo_root())
        .env(broker::TANSU_BIN_ENV, &memory)
        .env(sasl_broker::BIN_ENV, &sqlite)
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
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{command} failed ({status})"))
    }
}
