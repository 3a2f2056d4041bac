//! The KIP-714 receiver of the test brokers: `peers/broker-telemetry` (one Java class,
//! `kafkit.broker.TelemetryPushLog`), a `MetricsReporter` that is also a
//! `ClientTelemetryExporterProvider` (Kafka 4.2's exporter interface; the older
//! `ClientTelemetry` / `ClientTelemetryReceiver` pair is deprecated for removal in 5.0). An Apache
//! Kafka broker serves GetTelemetrySubscriptions and PushTelemetry, and lists them in ApiVersions,
//! only when such a plugin is among its `metric.reporters`; every node [`crate::kafka`] starts has
//! it, and appends each push it receives as one JSON line to [`push_log`] (see docs/testing.md).
//!
//! The class is compiled with `javac` against the broker's own jars (no Maven: it needs nothing
//! else; Jackson and the shaded OTLP protobuf classes come with Kafka) into
//! `target/tools/kafka-telemetry-<Kafka version>-<hash>/classes`, where `<hash>` is the digest of
//! the sources ([`crate::java_peer::tree_hash`]), so an edit builds a new folder and an unchanged
//! tree is compiled once (under a second). The build goes to a scratch folder renamed into place
//! when the class is there, so a half-done build is never used.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::broker::{Result, workspace_root};
use crate::kafka::KAFKA_VERSION;

/// The plugin's class, as `metric.reporters` names it.
pub const CLASS: &str = "kafkit.broker.TelemetryPushLog";

/// The broker property the plugin reads its file from (`TelemetryPushLog.FILE_CONFIG`).
pub const FILE_PROPERTY: &str = "kafkit.telemetry.push.log";

/// The file a node's plugin appends pushes to, in the node's folder. It does not exist until
/// the first push.
pub fn push_log(node_dir: &Path) -> PathBuf {
    node_dir.join("telemetry").join("pushes.jsonl")
}

/// Compiles the plugin unless this source tree was compiled before, and returns the folder of
/// its classes (for the broker's class path).
///
/// # Errors
/// When `javac` is missing or the compile fails (the message says which).
pub fn build(lib: &Path) -> Result<PathBuf> {
    let sources = workspace_root().join("peers").join("broker-telemetry");
    let tools = workspace_root().join("target").join("tools");
    let hash = crate::java_peer::tree_hash(&sources)?;
    let dir = tools.join(format!("kafka-telemetry-{KAFKA_VERSION}-{hash:016x}"));
    if built(&dir) {
        return Ok(dir.join("classes"));
    }
    let javac = javac();
    // Unique per call: `cargo xtask test` starts its two clusters from two threads of one process.
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let scratch = tools.join(format!(
        ".kafka-telemetry-{KAFKA_VERSION}-{hash:016x}-{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch).map_err(|e| format!("create {}: {e}", scratch.display()))?;
    let java_files: Vec<PathBuf> = java_sources(&sources)?;
    println!(
        "broker: compiling the KIP-714 receiver ({}) into {}",
        sources.display(),
        dir.display()
    );
    let out = Command::new(&javac)
        .args(["--release", "17", "-nowarn", "-cp"])
        .arg(format!("{}/*", lib.display()))
        .arg("-d")
        .arg(scratch.join("classes"))
        .args(&java_files)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run {javac}: {e} (a JDK 17+ is needed, not only a JRE)"))?;
    if !out.status.success() || !built(&scratch) {
        let _ = fs::remove_dir_all(&scratch);
        return Err(format!(
            "broker: javac of {} failed ({}):\n{}{}",
            sources.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    crate::java_peer::publish(&scratch, &dir, "kafka-telemetry-", built)?;
    Ok(dir.join("classes"))
}

/// Whether `dir` holds a finished build.
fn built(dir: &Path) -> bool {
    dir.join("classes")
        .join(CLASS.replace('.', "/") + ".class")
        .is_file()
}

/// `javac` beside `$KAFKIT_JAVA` when that names a `java` program, else `javac` on PATH.
fn javac() -> String {
    std::env::var(crate::kafka::JAVA_ENV)
        .ok()
        .map(PathBuf::from)
        .and_then(|java| Some(java.parent()?.join("javac")))
        .filter(|javac| javac.is_file())
        .map_or_else(|| "javac".to_string(), |p| p.display().to_string())
}

/// Every `.java` file under `root`, sorted.
fn java_sources(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = fs::read_dir(&dir).map_err(|e| format!("read {}: {e}", dir.display()))?;
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "java") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}
