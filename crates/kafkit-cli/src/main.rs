//! `kafkit`: a command line for Apache Kafka on the kafkit client (produce, consume with kcat's
//! `-f` formats, topics, configs, consumer groups, share groups, ACLs, cluster, features, the
//! KRaft quorum, delegation tokens, offsets, transactions, perf, shell completions).
//!
//! Exit codes: 0 success (also a `consume`, or a `produce` outside a transaction, ended by
//! Ctrl-C), 1 an error (broker, network, a record that failed), 2 a usage error (bad arguments,
//! an unknown or invalid `-X` property), as clap reports its own; 130 a second Ctrl-C while the
//! first one's clean end runs.

mod acls;
mod admin;
mod conn;
mod consume;
mod format;
mod groups;
mod interrupt;
mod kraft;
mod out;
mod partitioner;
mod perf;
mod produce;
mod reach;
mod reset;
mod settings;
mod share_groups;
mod transactions;
mod verbose;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// Exit code of a usage error (clap uses the same).
const EXIT_USAGE: u8 = 2;

const AFTER_HELP: &str = "\
Connection: -b HOST[:PORT][,HOST[:PORT]] (or KAFKIT_BROKERS; the port defaults to 9092); -X name=value takes the Java / librdkafka
config names (linger.ms, acks, security.protocol, ssl.ca.location, sasl.mechanism, sasl.jaas.config,
fetch.max.wait.ms, isolation.level, partitioner...); `kafkit -X list` prints every name with its default
and unit (message.max.bytes is librdkafka's max.request.size). -F FILE reads them from a file, which
the flags and -X override (a Java client's serializers, client.dns.lookup... are ignored with a
warning); a flag (--tls, produce -z,
consume --isolation, consume -G and -X group.id...) and a -X that disagree are refused. consume with
-X group.id=G and no -G is a member of group G, as with -G G; group settings (session.timeout.ms,
enable.auto.commit...) without a group are ignored with a warning, as librdkafka ignores them.

Ctrl-C ends consume cleanly: a -G member commits what it printed and leaves the group (exit 0), a
--share-group member leaves and releases to the group what it did not print;
in produce it stops reading: what was read is written (exit 0), a transaction is aborted (exit 1).
A second Ctrl-C exits at once (130), and so does the first one while connecting.

Diagnostics: -v / -vv (or -X debug=broker,protocol,cgrp,...: librdkafka's names) print the
client's tracing on stderr.

Exit codes: 0 success, 1 error (broker, network, a failed record), 2 usage error, 130 interrupted
twice.";

/// A command line for Apache Kafka.
#[derive(Debug, Parser)]
#[command(name = "kafkit", version, about, after_help = AFTER_HELP)]
struct Cli {
    /// Print what the client does on stderr: -v connections, requests and group changes
    /// (DEBUG), -vv every request and answer (TRACE). RUST_LOG, when set, chooses instead.
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(flatten)]
    conn: conn::ConnArgs,
    /// The command (none only with `-X list`).
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Produce records read from stdin (or files), one per line.
    Produce(produce::ProduceArgs),
    /// Consume records and print them (kcat's -f format, or JSON lines).
    Consume(consume::ConsumeArgs),
    /// List, describe, create, delete and alter topics.
    #[command(subcommand)]
    Topics(admin::TopicsCmd),
    /// Describe and alter topic and broker configs; list the resources that have configs.
    #[command(subcommand)]
    Configs(admin::ConfigsCmd),
    /// List, describe, delete consumer groups; their lag; reset their offsets.
    #[command(subcommand)]
    Groups(groups::GroupsCmd),
    /// List, describe and delete KIP-932 share groups; reset and delete their start offsets.
    #[command(subcommand)]
    ShareGroups(share_groups::ShareGroupsCmd),
    /// List, create and delete ACLs.
    #[command(subcommand)]
    Acls(acls::AclsCmd),
    /// The brokers (--fenced: fenced ones too), the controller and the cluster id.
    Cluster(admin::ClusterArgs),
    /// Describe the cluster's feature levels, or update them (KIP-584).
    #[command(subcommand)]
    Features(kraft::FeaturesCmd),
    /// The KRaft metadata quorum: leader, voters, observers and their lag.
    Quorum(kraft::QuorumArgs),
    /// Create, describe, renew and expire delegation tokens (needs a SASL connection).
    #[command(subcommand)]
    Tokens(kraft::TokensCmd),
    /// Earliest, latest (or at a timestamp) offsets of a topic's partitions.
    Offsets(admin::OffsetsArgs),
    /// List and describe transactions, find and abort hanging ones, fence producers (KIP-664).
    #[command(subcommand)]
    Transactions(transactions::TransactionsCmd),
    /// Producer and consumer performance tests.
    #[command(subcommand)]
    Perf(perf::PerfCmd),
    /// Print a shell completion script (e.g. `kafkit completions bash > ~/.local/share/bash-completion/completions/kafkit`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Why a command failed: a usage error (exit 2) or any other (exit 1).
#[derive(Debug)]
pub enum Failure {
    /// Bad arguments or properties.
    Usage(String),
    /// The command ran and failed.
    Error(String),
}

impl From<kafkit::Error> for Failure {
    fn from(e: kafkit::Error) -> Self {
        match e {
            kafkit::Error::Properties(p) => Failure::Usage(settings::property_error(&p)),
            // A setting the builders refuse (a bootstrap address without a port, a range...).
            kafkit::Error::Config(m) => Failure::Usage(format!(
                "invalid configuration: {}",
                settings::in_java_words(&m)
            )),
            e => Failure::Error(conn::describe(&e)),
        }
    }
}

impl From<kafkit::PropertyError> for Failure {
    fn from(e: kafkit::PropertyError) -> Self {
        Failure::Usage(settings::property_error(&e))
    }
}

impl From<kafkit::WriterConfigError> for Failure {
    fn from(e: kafkit::WriterConfigError) -> Self {
        Failure::Usage(format!(
            "invalid producer configuration: {}",
            settings::in_java_words(&e.to_string())
        ))
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Error(format!("I/O error: {e}"))
    }
}

/// The result of a command.
pub type CmdResult = Result<(), Failure>;

fn main() -> ExitCode {
    out::exit_quietly_when_stdout_closes();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            if e.kind() == clap::error::ErrorKind::UnknownArgument
                && let Some(hint) = kcat_mode_hint(std::env::args().skip(1))
            {
                eprintln!("kafkit: {hint}");
                eprintln!("Try 'kafkit --help' for more information.");
                return ExitCode::from(EXIT_USAGE);
            }
            e.exit();
        }
    };
    if let Err(msg) = verbose::install(cli.verbose, conn::debug_contexts(&cli.conn.props)) {
        eprintln!("kafkit: {msg}");
        eprintln!("Try 'kafkit --help' for more information.");
        return ExitCode::from(EXIT_USAGE);
    }
    if cli.conn.props.iter().any(|x| x.trim() == "list") {
        // kcat's `-X list`: every name, no connection needed (nor -b).
        return stdout_or_failure(settings::list().as_bytes());
    }
    let Some(cmd) = cli.cmd else {
        Cli::command()
            .error(
                clap::error::ErrorKind::MissingSubcommand,
                "a command is needed (or -X list)",
            )
            .exit();
    };
    if let Cmd::Completions { shell } = cmd {
        // No connection needed (nor -b).
        // Written whole, then to stdout: a closed pipe (`| head -1`) ends it quietly.
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "kafkit", &mut script);
        return stdout_or_failure(&script);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kafkit: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(cli.conn, cmd));
    // Do not wait for background tasks (a Reader's fetch tasks) at exit.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprintln!("kafkit: {msg}");
            eprintln!("Try 'kafkit --help' for more information.");
            ExitCode::from(EXIT_USAGE)
        }
        Err(Failure::Error(msg)) => {
            eprintln!("kafkit: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// kcat's mode flags (`kcat -C -b ... -t T`), which kafkit takes as commands: the command to
/// use for the first one in `args`, when there is one (clap would only say "unexpected
/// argument").
fn kcat_mode_hint(args: impl Iterator<Item = String>) -> Option<String> {
    args.take_while(|a| a != "--").find_map(|a| {
        let (mode, instead) = match a.as_str() {
            "-C" => ("-C (consume)", "`kafkit consume TOPIC`"),
            "-P" => ("-P (produce)", "`kafkit produce TOPIC`"),
            "-L" => ("-L (metadata)", "`kafkit topics list` or `kafkit cluster`"),
            "-Q" => ("-Q (query offsets)", "`kafkit offsets TOPIC`"),
            _ => return None,
        };
        Some(format!(
            "kcat's mode flag {mode} is a command in kafkit: use {instead} (see kafkit --help)"
        ))
    })
}

/// Writes `bytes` to stdout: success also when its reader is gone (`| head -1`).
fn stdout_or_failure(bytes: &[u8]) -> ExitCode {
    match out::write_stdout(bytes) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kafkit: writing to stdout: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(conn: conn::ConnArgs, cmd: Cmd) -> CmdResult {
    let conn = conn.resolve()?;
    match cmd {
        Cmd::Produce(a) => produce::run(&conn, a).await,
        Cmd::Consume(a) => consume::run(&conn, a).await,
        Cmd::Topics(c) => admin::topics(&conn, c).await,
        Cmd::Configs(c) => admin::configs(&conn, c).await,
        Cmd::Cluster(a) => admin::cluster(&conn, a).await,
        Cmd::Features(c) => kraft::features(&conn, c).await,
        Cmd::Quorum(a) => kraft::quorum(&conn, a).await,
        Cmd::Tokens(c) => kraft::tokens(&conn, c).await,
        Cmd::Offsets(a) => admin::offsets(&conn, a).await,
        Cmd::Groups(c) => groups::run(&conn, c).await,
        Cmd::ShareGroups(c) => share_groups::run(&conn, c).await,
        Cmd::Acls(c) => acls::run(&conn, c).await,
        Cmd::Transactions(c) => transactions::run(&conn, c).await,
        Cmd::Perf(c) => perf::run(&conn, c).await,
        Cmd::Completions { .. } => Ok(()),
    }
}
