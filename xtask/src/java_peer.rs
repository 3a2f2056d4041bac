//! The Java client as a test peer: `peers/java` (a small program on `kafka-clients` 4.4, see its
//! `Main.java`) built with Maven into `target/tools/java-peer-<hash>/`, where `<hash>` is a
//! digest of the sources, so an edit builds a new folder and an unchanged tree is built once.
//!
//! The build runs in a scratch copy of `peers/java` (`mvn dependency:copy-dependencies compile`:
//! the classes in `target/classes`, every runtime jar in `lib/`) that is renamed into place only
//! when the classes are there, so a half-done build is never used. The tests get the class path
//! in [`CLASS_PATH_ENV`] (`cargo xtask test` exports it; `cargo xtask java-peer` prints it).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::broker::{Result, workspace_root};

/// Environment variable holding the Java peer's class path, read by the integration tests
/// (`integration_tests::JavaPeer`) and kafkit-compress's `java_interop` test.
pub const CLASS_PATH_ENV: &str = "KAFKIT_JAVA_PEER_CP";

/// Builds the Java peer unless this source tree was built before, and returns its class path
/// (`<dir>/target/classes:<dir>/lib/*`).
pub fn build() -> Result<String> {
    let sources = workspace_root().join("peers").join("java");
    let tools = workspace_root().join("target").join("tools");
    let hash = tree_hash(&sources)?;
    let dir = tools.join(format!("java-peer-{hash:016x}"));
    if built(&dir) {
        return Ok(class_path(&dir));
    }
    let needs =
        |e: String| format!("the Java peer (peers/java) is built with a JDK and Maven: {e}");
    crate::kafka::java().map_err(needs)?;
    let mvn = crate::kafka::maven().map_err(needs)?;
    let scratch = tools.join(format!(".java-peer-{hash:016x}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    copy_tree(&sources, &scratch)?;
    println!(
        "java-peer: building {} with Maven into {}",
        sources.display(),
        dir.display()
    );
    let out = Command::new(&mvn)
        .current_dir(&scratch)
        .args(["-B", "-q", "dependency:copy-dependencies"])
        .args(["-DoutputDirectory=lib", "-DincludeScope=runtime", "compile"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run mvn: {e}"))?;
    if !out.status.success() || !built(&scratch) {
        let _ = fs::remove_dir_all(&scratch);
        return Err(format!(
            "java-peer: the Maven build of {} failed ({}); it needs a JDK 17+ (javac; Debian: \
             `apt-get install openjdk-17-jdk-headless maven`) and Maven Central:\n{}{}",
            sources.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    publish(&scratch, &dir, "java-peer-", built)?;
    Ok(class_path(&dir))
}

/// Whether `dir` holds a finished build: the main class and the client jar.
fn built(dir: &Path) -> bool {
    dir.join("target/classes/kafkit/peer/Main.class").is_file()
        && fs::read_dir(dir.join("lib")).is_ok_and(|mut entries| {
            entries.any(|e| {
                e.is_ok_and(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("kafka-clients-")
                })
            })
        })
}

fn class_path(dir: &Path) -> String {
    format!(
        "{}:{}/*",
        dir.join("target").join("classes").display(),
        dir.join("lib").display()
    )
}

/// Moves a finished build from `scratch` to `dir` (its final name, `<prefix><hash>`), where
/// another run may have put the same build meanwhile (then `scratch` goes and `dir` stays, when
/// `built` says it is whole), and removes the builds of earlier source trees (`<prefix>*`
/// beside `dir`). Used by the Java peer and the broker's KIP-714 receiver
/// (`kafka_telemetry.rs`).
pub fn publish(scratch: &Path, dir: &Path, prefix: &str, built: fn(&Path) -> bool) -> Result<()> {
    if let Err(e) = fs::rename(scratch, dir) {
        let _ = fs::remove_dir_all(scratch);
        if !built(dir) {
            return Err(format!("rename into {}: {e}", dir.display()));
        }
    }
    let Some(Ok(entries)) = dir.parent().map(fs::read_dir) else {
        return Ok(());
    };
    for e in entries.flatten() {
        let path = e.path();
        if path != dir && e.file_name().to_string_lossy().starts_with(prefix) {
            let _ = fs::remove_dir_all(path);
        }
    }
    Ok(())
}

/// The files of the source tree, relative to `root`, sorted; Maven's own `target/` (from a
/// build run by hand in the tree) is left out.
fn files(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let entries =
            fs::read_dir(root.join(&rel)).map_err(|e| format!("read {}: {e}", rel.display()))?;
        for e in entries {
            let e = e.map_err(|e| format!("read {}: {e}", rel.display()))?;
            let child = rel.join(e.file_name());
            if child == Path::new("target") {
                continue;
            }
            if e.file_type().map_err(|e| e.to_string())?.is_dir() {
                stack.push(child);
            } else {
                out.push(child);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// FNV-1a (64 bits) over every file's relative path and contents: stable across Rust
/// releases, unlike `DefaultHasher`.
pub(crate) fn tree_hash(root: &Path) -> Result<u64> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for rel in files(root)? {
        let data = fs::read(root.join(&rel)).map_err(|e| format!("read {}: {e}", rel.display()))?;
        eat(rel.to_string_lossy().as_bytes());
        eat(&[0]);
        eat(&(data.len() as u64).to_le_bytes());
        eat(&data);
    }
    Ok(h)
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    for rel in files(from)? {
        let dest = to.join(&rel);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(|e| format!("create {}: {e}", parent.display()))?;
        }
        fs::copy(from.join(&rel), &dest).map_err(|e| format!("copy {}: {e}", rel.display()))?;
    }
    Ok(())
}
