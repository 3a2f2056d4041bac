//! `cargo xtask bench producer [ARGS]` and `cargo xtask bench consumer [ARGS]`: build and run
//! the `kafkit-bench` package (release profile) against tansu and librdkafka's mock cluster, and
//! print its Markdown tables.
//!
//! Unless the arguments name a broker (`--tansu HOST:PORT`) or leave the tansu case out
//! (`--cases` without `tansu`), a tansu of its own is started on a free port first and stopped
//! afterwards. The mock cluster runs inside the bench program. The producer bench also writes
//! its SVG charts into `docs/img/` (unless the arguments give `--svg DIR`), which
//! docs/benchmarks.md shows. See `bench/src/main.rs` and docs/benchmarks.md.

use std::process::Command;

use crate::broker::{Broker, Started};
use crate::codegen::repo_root;

/// Runs `cargo run --release -p kafkit-bench -- BENCH [--tansu ADDR] ARGS`, where `bench` is
/// `producer` or `consumer`.
///
/// Errors: a message when tansu cannot be started, cargo cannot be run, or the bench exits
/// non-zero (a run failed, lost records or read wrong ones).
pub fn run(bench: &str, args: &[String]) -> Result<(), String> {
    let own_broker = needs_tansu(args) && !args.iter().any(|a| a.starts_with("--tansu"));
    let mut broker = None;
    let mut bench_args = vec![bench.to_string()];
    if own_broker {
        let b = Broker {
            port: crate::test::free_port()?,
        };
        let how = b.start()?;
        bench_args.extend(["--tansu".to_string(), b.bootstrap()]);
        broker = Some((b, how));
    }
    bench_args.extend(args.iter().cloned());
    if bench == "producer" && !args.iter().any(|a| a.starts_with("--svg")) {
        let dir = repo_root().join("docs").join("img");
        bench_args.extend(["--svg".to_string(), dir.display().to_string()]);
    }

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    eprintln!("bench: building kafkit-bench (release; the first build takes several minutes)...");
    let status = Command::new(cargo)
        .current_dir(repo_root())
        .args([
            "run",
            "--quiet",
            "--release",
            "--package",
            "kafkit-bench",
            "--",
        ])
        .args(&bench_args)
        .status();

    if let Some((b, Started::Spawned)) = &broker {
        if let Err(e) = b.stop() {
            eprintln!("bench: could not stop the broker: {e}");
        } else {
            b.forget();
        }
    }
    let status = status.map_err(|e| format!("cannot run cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the bench failed ({status})"))
    }
}

/// Whether the tansu case is selected: no `--cases`, or a `--cases` list naming `tansu`.
fn needs_tansu(args: &[String]) -> bool {
    let mut cases = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(v) = a.strip_prefix("--cases=") {
            cases = Some(v.to_string());
        } else if a == "--cases" {
            cases = it.next().cloned();
        }
    }
    cases.is_none_or(|c| c.split(',').any(|c| c.trim() == "tansu"))
}

#[cfg(test)]
mod tests {
    use super::needs_tansu;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn tansu_is_needed_unless_left_out() {
        assert!(needs_tansu(&args(&[])));
        assert!(needs_tansu(&args(&["--records", "1000"])));
        assert!(needs_tansu(&args(&["--cases", "mock,tansu"])));
        assert!(needs_tansu(&args(&["--cases=tansu"])));
        assert!(!needs_tansu(&args(&["--cases", "mock,wide"])));
        assert!(!needs_tansu(&args(&["--cases=wide"])));
    }
}
