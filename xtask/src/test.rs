//! `cargo xtask test`: the whole gate that CI runs, in order, stopping at the first failure.
//!
//! 1. `cargo fmt --all -- --check`
//! 2. `cargo clippy --workspace --all-targets -- -D warnings`
//! 3. `cargo xtask codegen --check` (generated code is up to date with the schemas)
//! 4. start tansu (see [`crate::broker`]) and export `KAFKA_TANSU_BOOTSTRAP`
//! 5. `cargo nextest run --workspace --no-fail-fast --profile ci` (unit and integration tests)
//! 6. `cargo test --workspace --doc`
//! 7. stop tansu, when step 4 started it (also after a failure)

use std::process::Command;
use std::time::Instant;

use crate::broker::{Broker, Started};

/// Name of the environment variable that tells integration tests where tansu listens.
pub const BOOTSTRAP_ENV: &str = "KAFKA_TANSU_BOOTSTRAP";

/// Runs the gate. `cli` is the xtask command tree, used to see whether `codegen --check`
/// exists yet. Returns an error naming the failed step.
pub fn run(cli: &clap::Command, port: u16) -> Result<(), String> {
    let started = Instant::now();
    step("fmt", cargo(&["fmt", "--all", "--", "--check"]))?;
    step(
        "clippy",
        cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    codegen_check(cli)?;

    let broker = Broker { port };
    let how = broker
        .start()
        .map_err(|e| format!("step broker start failed: {e}"))?;
    let tests = run_tests(&broker);
    if how == Started::Spawned
        && let Err(e) = broker.stop()
    {
        eprintln!("xtask test: could not stop the broker: {e}");
    }
    tests?;
    println!(
        "xtask test: all steps passed in {}s",
        started.elapsed().as_secs()
    );
    Ok(())
}

fn run_tests(broker: &Broker) -> Result<(), String> {
    let bootstrap = broker.bootstrap();
    println!("xtask test: {BOOTSTRAP_ENV}={bootstrap}");
    let with_env = |mut c: Command| {
        c.env(BOOTSTRAP_ENV, &bootstrap);
        c
    };
    step(
        "nextest",
        with_env(cargo(&[
            "nextest",
            "run",
            "--workspace",
            "--no-fail-fast",
            "--profile",
            "ci",
        ])),
    )
    .map_err(|e| format!("{e} (broker log: {})", broker.log_file().display()))?;
    step(
        "doc tests",
        with_env(cargo(&["test", "--workspace", "--doc"])),
    )
}

/// `codegen --check` is mandatory once the codegen subcommand has a `--check` flag.
fn codegen_check(cli: &clap::Command) -> Result<(), String> {
    let has_check = cli
        .find_subcommand("codegen")
        .is_some_and(|c| c.get_arguments().any(|a| a.get_long() == Some("check")));
    if !has_check {
        println!("xtask test: note: `codegen --check` does not exist yet; skipped");
        return Ok(());
    }
    let exe = std::env::current_exe().map_err(|e| format!("current exe: {e}"))?;
    let mut c = Command::new(exe);
    c.args(["codegen", "--check"]);
    step("codegen --check", c)
}

fn cargo(args: &[&str]) -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.args(args).current_dir(crate::broker::workspace_root());
    c
}

fn step(name: &str, mut cmd: Command) -> Result<(), String> {
    println!("xtask test: == {name} ==");
    let t = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("step {name} could not start: {e}"))?;
    if status.success() {
        println!("xtask test: {name} ok ({}s)", t.elapsed().as_secs());
        Ok(())
    } else {
        Err(format!("step {name} failed ({status})"))
    }
}
