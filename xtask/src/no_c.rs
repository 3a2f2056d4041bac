//! `cargo xtask no-c`: proves that `kafkit` and its command line build without a C compiler.
//!
//! The build runs in a target folder of its own (`target/no-c`: a warm folder would reuse
//! artifacts a C compiler made) with the C compiler hidden:
//!
//! - `CC=false` and `CXX=false`, and the per-target variants (`CC_<target>`, `TARGET_CC`, ...)
//!   removed, so a build script that compiles C through the `cc` crate fails;
//! - a PATH of symbolic links to everything on the caller's PATH except C and C++ compilers
//!   ([`is_c_compiler`]: `cc`, `gcc`, `clang`, `c++` and their versioned or prefixed names);
//! - rustc still needs a linker (on Linux it calls `cc` to link): it gets one through
//!   `CARGO_TARGET_<host>_LINKER`, a script that runs the real `cc` only to link and refuses any
//!   call that would compile or assemble a source file.
//!
//! What is built: the `kafkit` binary of kafkit-cli with `--no-default-features --features
//! pure-rust` (which builds the `kafkit` library with the same features), then kafkit-compress's
//! unit tests with its pure codecs only (`gzip,snappy,lz4,zstd-pure`: ruzstd reads and writes
//! the zstd batches), then the built binary's `--version`.
//!
//! `cargo xtask no-c --features default` runs the same build with kafkit-cli's default features,
//! which must fail (ring's and zstd-sys's build scripts need the C compiler): the check can fail.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// kafkit-cli's (and kafkit's) features that need no C compiler.
pub const PURE_FEATURES: &str = "pure-rust";

/// kafkit-compress's codecs that need no C compiler, for its unit tests.
const PURE_CODECS: &str = "gzip,snappy,lz4,zstd-pure";

/// Whether the program `name` is a C or C++ compiler (or preprocessor) to hide: one of
/// `cc`, `c++`, `cpp`, `gcc`, `g++`, `clang`, `clang++`, `c89`, `c99`, `tcc`, alone or as a part of
/// a name split at `-` (`x86_64-linux-gnu-gcc-12`, `clang-18`).
pub fn is_c_compiler(name: &str) -> bool {
    const COMPILERS: [&str; 10] = [
        "cc", "c++", "cpp", "gcc", "g++", "clang", "clang++", "c89", "c99", "tcc",
    ];
    name.split('-').any(|part| COMPILERS.contains(&part))
}

/// The `no-c` target folder: `target/no-c` of the workspace, or `dir` when given.
pub fn target_dir(dir: Option<PathBuf>) -> PathBuf {
    dir.unwrap_or_else(|| crate::broker::workspace_root().join("target").join("no-c"))
}

/// Runs the check with kafkit-cli's `features` (`--no-default-features --features F`) in
/// `target`. Returns an error naming the part that failed.
pub fn run(features: &str, target: &Path) -> Result<(), String> {
    let started = Instant::now();
    let env = Env::prepare(target)?;
    env.cargo(&[
        "build",
        "-p",
        "kafkit-cli",
        "--bin",
        "kafkit",
        "--no-default-features",
        "--features",
        features,
    ])?;
    env.cargo(&[
        "test",
        "-p",
        "kafkit-compress",
        "--lib",
        "--no-default-features",
        "--features",
        PURE_CODECS,
    ])?;
    let bin = target.join("debug").join("kafkit");
    let status = Command::new(&bin)
        .arg("--version")
        .status()
        .map_err(|e| format!("no-c: run {}: {e}", bin.display()))?;
    if !status.success() {
        return Err(format!("no-c: {} --version: {status}", bin.display()));
    }
    println!(
        "xtask no-c: kafkit-cli --features {features} built and kafkit-compress's pure codecs \
         tested without a C compiler in {}s",
        started.elapsed().as_secs()
    );
    Ok(())
}

/// The environment of the builds: a PATH without C compilers and a link-only linker.
struct Env {
    target: PathBuf,
    path: OsString,
    /// `CARGO_TARGET_<HOST>_LINKER` and the link-only script, when a `cc` was found to link with.
    linker: Option<(String, PathBuf)>,
}

impl Env {
    fn prepare(target: &Path) -> Result<Env, String> {
        let tools = target.join("tools");
        let bin = tools.join("bin");
        if tools.exists() {
            std::fs::remove_dir_all(&tools).map_err(|e| format!("no-c: clear {tools:?}: {e}"))?;
        }
        std::fs::create_dir_all(&bin).map_err(|e| format!("no-c: create {bin:?}: {e}"))?;
        let mut real_cc = None;
        let mut linked = std::collections::HashSet::new();
        let old_path = std::env::var_os("PATH").unwrap_or_default();
        for dir in std::env::split_paths(&old_path) {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(text) = name.to_str() else { continue };
                if is_c_compiler(text) {
                    if text == "cc" && real_cc.is_none() {
                        real_cc = Some(entry.path());
                    }
                    continue;
                }
                if linked.insert(name.clone()) {
                    symlink(&entry.path(), &bin.join(&name))?;
                }
            }
        }
        let linker = match real_cc {
            Some(cc) => Some((linker_var()?, link_only_script(&tools, &cc)?)),
            None => {
                println!("xtask no-c: note: no `cc` on PATH; rustc's own linker choice stands");
                None
            }
        };
        Ok(Env {
            target: target.to_path_buf(),
            path: std::env::join_paths([&bin]).map_err(|e| format!("no-c: PATH: {e}"))?,
            linker,
        })
    }

    fn cargo(&self, args: &[&str]) -> Result<(), String> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut c = Command::new(cargo);
        c.args(args)
            .arg("--target-dir")
            .arg(&self.target)
            .current_dir(crate::broker::workspace_root());
        for (key, _) in std::env::vars_os() {
            let Some(key) = key.to_str() else { continue };
            let compiler = ["CC_", "CXX_", "TARGET_C", "HOST_C", "CFLAGS", "CXXFLAGS"]
                .iter()
                .any(|p| key.starts_with(p));
            let linker = key.starts_with("CARGO_TARGET_") && key.ends_with("_LINKER");
            if compiler || linker || key == "CARGO_TARGET_DIR" || key == "RUSTC_LINKER" {
                c.env_remove(key);
            }
        }
        c.env("PATH", &self.path)
            .env("CC", "false")
            .env("CXX", "false");
        if let Some((var, script)) = &self.linker {
            c.env(var, script);
        }
        let shown = format!("cargo {}", args.join(" "));
        println!("xtask no-c: {shown} (no C compiler)");
        let status = c
            .status()
            .map_err(|e| format!("no-c: {shown} could not start: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "no-c: {shown} failed without a C compiler ({status})"
            ))
        }
    }
}

/// `CARGO_TARGET_<HOST TRIPLE>_LINKER` for the host rustc builds for.
fn linker_var() -> Result<String, String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .arg("-vV")
        .output()
        .map_err(|e| format!("no-c: rustc -vV: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let host = text
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .ok_or("no-c: rustc -vV names no host")?;
    Ok(format!(
        "CARGO_TARGET_{}_LINKER",
        host.to_uppercase().replace(['-', '.'], "_")
    ))
}

/// Writes `tools/link-only`: runs `cc` for rustc's link step, and fails on any call that
/// compiles, assembles or preprocesses (a `-c`, `-S` or `-E`, or a C, C++ or assembly source).
fn link_only_script(tools: &Path, cc: &Path) -> Result<PathBuf, String> {
    let script = tools.join("link-only");
    let text = format!(
        "#!/bin/sh\n\
         # Written by `cargo xtask no-c`: a linker for rustc that compiles nothing.\n\
         for a in \"$@\"; do\n\
         \x20 case \"$a\" in\n\
         \x20   -c|-S|-E|*.c|*.cc|*.cpp|*.cxx|*.s|*.S)\n\
         \x20     echo \"no-c: refused to compile ($a): this build must need no C compiler\" >&2\n\
         \x20     exit 1;;\n\
         \x20 esac\n\
         done\n\
         exec '{}' \"$@\"\n",
        cc.display()
    );
    std::fs::write(&script, text).map_err(|e| format!("no-c: write {script:?}: {e}"))?;
    set_executable(&script)?;
    Ok(script)
}

#[cfg(unix)]
fn symlink(from: &Path, to: &Path) -> Result<(), String> {
    std::os::unix::fs::symlink(from, to).map_err(|e| format!("no-c: link {to:?}: {e}"))
}

#[cfg(unix)]
fn set_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("no-c: chmod {path:?}: {e}"))
}

#[cfg(not(unix))]
fn symlink(_: &Path, _: &Path) -> Result<(), String> {
    Err("no-c: runs on Unix only (it builds a PATH of symbolic links)".into())
}

#[cfg(not(unix))]
fn set_executable(_: &Path) -> Result<(), String> {
    Err("no-c: runs on Unix only".into())
}

#[cfg(test)]
mod tests {
    use super::is_c_compiler;

    #[test]
    fn c_compilers_are_hidden_and_other_tools_kept() {
        for name in [
            "cc",
            "gcc",
            "g++",
            "c++",
            "clang",
            "clang++",
            "clang-18",
            "gcc-12",
            "x86_64-linux-gnu-gcc-12",
            "aarch64-linux-gnu-g++",
            "cpp",
        ] {
            assert!(is_c_compiler(name), "{name}");
        }
        for name in [
            "cargo", "rustc", "ld", "ccache", "c++filt", "git", "perl", "make", "cmake", "ar",
        ] {
            assert!(!is_c_compiler(name), "{name}");
        }
    }
}
