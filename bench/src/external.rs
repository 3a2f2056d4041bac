//! The peers that are programs of their own (issue 38): krafka (`peers/krafka`, a Rust program on
//! the krafka crate), franz-go and kafka-go (`peers/go`, one Go program hosting both) and the
//! Java client (`peers/java`, kafka-clients). Each runs one producer or consumer workload per
//! child process and prints the same `RESULT ...` line as this program's own child runs (the
//! contract is in `peers/README.md`), so every client is measured the same way: the records over
//! the client's own window, its process's CPU time over that window (`getrusage`, or
//! `/proc/self/stat` for the JVM), every record checked.
//!
//! Where the programs are: `KAFKIT_KRAFKA_PEER` (the krafka binary), `KAFKIT_GO_PEER` (the Go
//! binary), `KAFKIT_JAVA_PEER_CP` (the Java peer's class path, run with `java`, or
//! `KAFKIT_JAVA`). `cargo xtask bench` builds those the clients asked for and sets them.

use std::path::PathBuf;

use crate::{Client, RunResult};

/// Environment variable naming the krafka peer's binary.
pub const KRAFKA_ENV: &str = "KAFKIT_KRAFKA_PEER";
/// Environment variable naming the Go peer's binary (franz-go and kafka-go).
pub const GO_ENV: &str = "KAFKIT_GO_PEER";
/// Environment variable holding the Java peer's class path.
pub const JAVA_CP_ENV: &str = "KAFKIT_JAVA_PEER_CP";
/// Environment variable naming the `java` program (default: `java` on PATH).
pub const JAVA_ENV: &str = "KAFKIT_JAVA";

/// The exit code with which a peer says it cannot run the workload as asked (kafka-go has no
/// idempotence nor transactions): the table shows "n/a" for it.
pub const UNSUPPORTED_EXIT: i32 = 3;

/// The text of a run's error when the client cannot run the workload as asked.
pub const NOT_SUPPORTED: &str = "n/a: the client cannot run this workload";

/// Whether `client` is run as a program of its own.
pub fn is_external(client: Client) -> bool {
    !matches!(client, Client::Ours | Client::Rdkafka)
}

/// The program and its leading arguments for `client` running `mode` (`produce`, `consume` or
/// `group`).
///
/// Errors: the environment variable naming the program is not set.
fn command(client: Client, mode: &str) -> Result<(PathBuf, Vec<String>), String> {
    let var = |name: &str| {
        std::env::var(name).map_err(|_| {
            format!(
                "{} needs {name} (cargo xtask bench sets it; or `cargo xtask {}`)",
                client.name(),
                match client {
                    Client::Krafka => "krafka-peer",
                    Client::FranzGo | Client::KafkaGo => "go-peer",
                    _ => "java-peer",
                }
            )
        })
    };
    let lead = |cmd: &str| vec![cmd.to_string(), "--client".into(), client.name().into()];
    match client {
        Client::Krafka => Ok((PathBuf::from(var(KRAFKA_ENV)?), lead(mode))),
        Client::FranzGo | Client::KafkaGo => Ok((PathBuf::from(var(GO_ENV)?), lead(mode))),
        Client::Java => {
            let cp = var(JAVA_CP_ENV)?;
            let java = std::env::var(JAVA_ENV).unwrap_or_else(|_| "java".to_string());
            let mut args = vec!["-cp".to_string(), cp, "kafkit.peer.Main".into()];
            args.push(format!("{mode}-bench"));
            Ok((PathBuf::from(java), args))
        }
        Client::Ours | Client::Rdkafka => Err(format!("{} is not external", client.name())),
    }
}

/// Runs `client` on the workload of `args`, a child command line of this program (`client ...`
/// for the producer, `read ...` for the consumer): the same flags go to the peer's `produce` or
/// `consume`.
///
/// Errors: the program is not there or fails; [`NOT_SUPPORTED`] when it says it cannot run the
/// workload ([`UNSUPPORTED_EXIT`]).
pub fn run(client: Client, args: &[String]) -> Result<RunResult, String> {
    let (mode, rest) = match args.split_first() {
        Some((first, rest)) if first == "client" => ("produce", rest),
        Some((first, rest)) if first == "read" => ("consume", rest),
        _ => return Err(format!("no peer mode for {args:?}")),
    };
    // The child line names the client first (`--client NAME`): the peer's own lead says it.
    let rest: Vec<String> = match rest {
        [flag, _, tail @ ..] if flag == "--client" => tail.to_vec(),
        _ => rest.to_vec(),
    };
    let (exe, mut full) = command(client, mode)?;
    full.extend(rest);
    match crate::exe_result_line(&exe, client.name(), &full) {
        Ok(line) => RunResult::parse(&line),
        Err(e) if e.ends_with(&format!("(exit code {UNSUPPORTED_EXIT})")) => {
            Err(NOT_SUPPORTED.to_string())
        }
        Err(e) => Err(e),
    }
}

/// Runs `client`'s group of members on the workload of `args` (the flags of a `group-read`
/// child line, without `--client`): the peer's `group` subcommand (Java: `group-bench`), which
/// prints a `GROUP ...` line (peers/README.md).
///
/// Errors: as [`run`]; [`NOT_SUPPORTED`] when the client has no group consumer, or not with the
/// assignor asked for.
pub fn run_group(client: Client, args: &[String]) -> Result<String, String> {
    let (exe, mut full) = command(client, "group")?;
    full.extend(args.iter().cloned());
    match crate::exe_line_with(&exe, client.name(), &full, "GROUP ") {
        Err(e) if e.ends_with(&format!("(exit code {UNSUPPORTED_EXIT})")) => {
            Err(NOT_SUPPORTED.to_string())
        }
        other => other,
    }
}

/// How many `request` requests (`Produce`, `Fetch`) the brokers whose JMX addresses `jmx` lists
/// have handled since they started (their request metrics, summed over the brokers and the
/// versions), read by the Java peer's `broker-requests` (`KAFKIT_JAVA_PEER_CP`). Read before and
/// after a run, the difference is the run's requests (the bench's own checks send neither).
///
/// Errors: the Java peer is not there or cannot read a broker.
pub fn broker_requests(jmx: &str, request: &str) -> Result<u64, String> {
    let cp = std::env::var(JAVA_CP_ENV)
        .map_err(|_| format!("--kafka-jmx needs {JAVA_CP_ENV} (cargo xtask bench sets it)"))?;
    let java = std::env::var(JAVA_ENV).unwrap_or_else(|_| "java".to_string());
    let out = std::process::Command::new(&java)
        .args([
            "-cp",
            &cp,
            "kafkit.peer.Main",
            "broker-requests",
            "--jmx",
            jmx,
        ])
        .args(["--request", request])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("run {java} (broker-requests): {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.lines().find_map(|l| l.strip_prefix("REQUESTS ")) {
        Some(n) if out.status.success() => n
            .trim()
            .parse()
            .map_err(|e| format!("broker-requests printed {n}: {e}")),
        _ => Err(format!("broker-requests failed ({})", out.status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_programs_of_their_own_are_external() {
        assert!(!is_external(Client::Ours));
        assert!(!is_external(Client::Rdkafka));
        for c in [
            Client::Krafka,
            Client::FranzGo,
            Client::KafkaGo,
            Client::Java,
        ] {
            assert!(is_external(c));
        }
    }

    #[test]
    fn a_missing_program_is_named_with_how_to_build_it() {
        let e = run(
            Client::FranzGo,
            &["client".into(), "--client".into(), "franz-go".into()],
        );
        if std::env::var_os(GO_ENV).is_none() {
            let e = e.expect_err("an error");
            assert!(e.contains(GO_ENV) && e.contains("go-peer"), "{e}");
        }
        assert!(run(Client::Java, &["encode".into()]).is_err());
    }
}
