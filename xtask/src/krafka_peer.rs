//! krafka (a pure-Rust Kafka client on crates.io) as a peer of kafkit-bench: `peers/krafka`, a
//! Cargo package of its own (its own `[workspace]` and `Cargo.lock`, so the root workspace
//! never builds krafka's dependency graph), built in release mode into
//! `target/tools/krafka-peer/`. Cargo decides what is stale, so an unchanged tree builds in a
//! moment.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::broker::workspace_root;

/// Builds `kafkit-krafka-peer` (`cargo build --release --locked`) and returns the binary's path.
///
/// # Errors
///
/// When cargo cannot run or the build fails (cargo's own messages are on stderr); `--locked`
/// refuses a `Cargo.lock` that does not match `peers/krafka/Cargo.toml`.
pub fn build() -> Result<String, String> {
    let root = workspace_root();
    let manifest = Path::new("peers").join("krafka").join("Cargo.toml");
    let target_dir = Path::new("target").join("tools").join("krafka-peer");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    // `cargo run -p xtask` gives this process the variables of a running package
    // (CARGO_MANIFEST_DIR, CARGO_PKG_NAME...): ring's build script tracks CARGO_MANIFEST_DIR, so
    // passing them on would rebuild ring and all above it whenever the caller changes.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
            ]
            .contains(&name.as_ref())
        {
            command.env_remove(name.as_ref());
        }
    }
    // Cargo's progress goes to stderr; stdout stays for the path.
    let status = command
        .current_dir(&root)
        .args(["build", "--release", "--locked", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("krafka-peer: run cargo: {e}"))?;
    if !status.success() {
        return Err(format!(
            "krafka-peer: `cargo build --release --locked --manifest-path {}` failed ({status})",
            manifest.display()
        ));
    }
    let bin = root.join(&target_dir).join("release").join(format!(
        "kafkit-krafka-peer{}",
        std::env::consts::EXE_SUFFIX
    ));
    if !bin.is_file() {
        return Err(format!(
            "krafka-peer: {} is missing after the build",
            bin.display()
        ));
    }
    Ok(bin.display().to_string())
}
