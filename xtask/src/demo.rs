//! `cargo xtask demo`: builds and runs the `kafkit-demo` package (release profile, so the printed
//! throughput means something) with the given arguments.

use std::process::Command;

use crate::codegen::repo_root;

/// Runs `cargo run --release -p kafkit-demo -- ARGS` from the repository root.
///
/// Errors: a message when cargo cannot be started or the demo exits non-zero (a mismatch or a
/// failure it printed).
pub fn run(args: &[String]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    // `--quiet` hides cargo's progress, and the first release build takes minutes: say so.
    eprintln!("demo: building kafkit-demo (release; the first build takes several minutes)...");
    let status = Command::new(cargo)
        .current_dir(repo_root())
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
