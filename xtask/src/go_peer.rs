//! The Go clients as bench peers: `peers/go` (one program on franz-go and segmentio/kafka-go,
//! see its README) built with the `go` on PATH into `target/tools/go-peer-<hash>/kafkit-go-peer`,
//! where `<hash>` is a digest of the sources (java_peer's [`tree_hash`]), so an edit builds a new
//! folder and an unchanged tree is built once.
//!
//! Nothing is installed outside `target/tools`: the module cache, the build cache and GOPATH are
//! under `target/tools/go/`, and `GOFLAGS=-mod=readonly` builds exactly the versions that go.mod
//! and go.sum pin (the modules come from the Go module proxy on the first build). The binary is
//! linked into a scratch folder that is renamed into place only when it is there, so a half-done
//! build is never used. `cargo xtask go-peer` prints the binary's path on its last line.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::broker::{Result, workspace_root};
use crate::java_peer::{publish, tree_hash};

/// The binary's file name inside its `go-peer-<hash>` folder.
const BINARY: &str = "kafkit-go-peer";

/// Builds the Go peer unless this source tree was built before, and returns the binary's path.
pub fn build() -> Result<PathBuf> {
    let sources = workspace_root().join("peers").join("go");
    let tools = workspace_root().join("target").join("tools");
    let hash = tree_hash(&sources)?;
    let dir = tools.join(build_dir_name(hash));
    if built(&dir) {
        return Ok(dir.join(BINARY));
    }
    let go = go()?;
    let scratch = tools.join(format!(".{}-{}", build_dir_name(hash), std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch).map_err(|e| format!("create {}: {e}", scratch.display()))?;
    println!(
        "go-peer: building {} with {go} into {}",
        sources.display(),
        dir.display()
    );
    let out = Command::new(&go)
        .current_dir(&sources)
        .envs(go_env(&tools.join("go")))
        .args(["build", "-o"])
        .arg(scratch.join(BINARY))
        .arg(".")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run {go} build: {e}"))?;
    if !out.status.success() || !built(&scratch) {
        let _ = fs::remove_dir_all(&scratch);
        return Err(format!(
            "go-peer: `go build` of {} failed ({}); it needs Go 1.26+ and, for the first build, \
             the Go module proxy:\n{}{}",
            sources.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    publish(&scratch, &dir, "go-peer-", built)?;
    Ok(dir.join(BINARY))
}

/// `go-peer-<hash, 16 hex digits>`: the folder of one source tree's build under `target/tools`.
fn build_dir_name(hash: u64) -> String {
    format!("go-peer-{hash:016x}")
}

/// The environment of `go build`: every cache under `root` (`target/tools/go`), the versions of
/// go.mod and go.sum only, and a static binary (no C toolchain needed; both clients are pure Go).
fn go_env(root: &Path) -> Vec<(&'static str, PathBuf)> {
    vec![
        ("GOMODCACHE", root.join("mod")),
        ("GOCACHE", root.join("cache")),
        ("GOPATH", root.join("path")),
        ("GOFLAGS", PathBuf::from("-mod=readonly")),
        ("CGO_ENABLED", PathBuf::from("0")),
    ]
}

/// Whether `dir` holds a finished build.
fn built(dir: &Path) -> bool {
    dir.join(BINARY).is_file()
}

/// The `go` program on PATH; fails with what to install.
fn go() -> Result<String> {
    match Command::new("go")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => Ok("go".to_string()),
        _ => Err(
            "the Go peer (peers/go) is built with Go 1.26 or later, and `go` is not on PATH: \
             install it from https://go.dev/dl/ (or the distribution's golang package) and put \
             its bin/ on PATH"
                .to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_dir_name_is_the_hash_in_sixteen_hex_digits() {
        assert_eq!(build_dir_name(0xabc), "go-peer-0000000000000abc");
        assert_eq!(build_dir_name(u64::MAX), "go-peer-ffffffffffffffff");
    }

    #[test]
    fn go_env_keeps_every_cache_under_the_tools_folder() {
        let root = Path::new("/repo/target/tools/go");
        for (name, value) in go_env(root) {
            match name {
                "GOMODCACHE" | "GOCACHE" | "GOPATH" => assert!(value.starts_with(root), "{name}"),
                "GOFLAGS" => assert_eq!(value, Path::new("-mod=readonly")),
                "CGO_ENABLED" => assert_eq!(value, Path::new("0")),
                other => panic!("unexpected variable {other}"),
            }
        }
    }
}
