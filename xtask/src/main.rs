//! `cargo xtask`: the project's tasks (codegen, api, broker, test, demo, bench, fuzz, soak, capture).

mod api;
mod bench;
mod broker;
mod codegen;
mod demo;
mod examples;
mod fuzz;
mod go_peer;
mod java_peer;
mod kafka;
mod kafka_telemetry;
mod kafka_tls;
mod krafka_peer;
mod no_c;
mod reliability;
mod sasl_broker;
mod test;

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "Project tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate crates/kafkit-protocol/src/generated from Kafka's JSON schemas.
    Codegen {
        /// Directory with the current schema `*.json` files and `error-codes.tsv` (default:
        /// ../shared/kafka-message-schemas-4.4 relative to the repository root: Apache Kafka 4.4,
        /// the same files as the `kafka-clients` 4.4.0 jar).
        #[arg(long)]
        schemas: Option<PathBuf>,
        /// Directory with the older schemas whose versions Kafka 4.0 removed (KIP-896) and that
        /// are kept (default: ../shared/kafka-message-schemas, trunk of October 2024).
        #[arg(long)]
        old_schemas: Option<PathBuf>,
        /// Regenerate into a temporary directory and fail if the committed files differ.
        #[arg(long)]
        check: bool,
    },
    /// Start, stop or query a local broker: Apache Kafka 4.4 (KRaft) where Java and Maven are
    /// present, else tansu.
    Broker {
        #[command(subcommand)]
        action: BrokerAction,
        /// TCP port on 127.0.0.1.
        #[arg(long, global = true, default_value_t = broker::DEFAULT_PORT)]
        port: u16,
    },
    /// Run the main job: write 100,000 records over 2 topics x 8 partitions with one Produce
    /// request per broker per round, read them back and verify them, then read them again with a
    /// consumer group of 3 (default broker: an embedded 3-broker librdkafka mock cluster).
    Demo {
        /// Start a 3-broker Apache Kafka 4.4 cluster (KRaft, free ports; needs Java 17+ and, for
        /// the first download, Maven), run the demo on it, and stop it at the end.
        #[arg(long)]
        kafka: bool,
        /// Arguments passed to the demo (see `cargo xtask demo -- --help`), e.g. `--bootstrap HOST:PORT`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run a benchmark that compares this project with librdkafka or the Java client (release
    /// build).
    Bench {
        #[command(subcommand)]
        which: BenchKind,
    },
    /// Run every libFuzzer target of fuzz/ in turn (needs nightly and cargo-fuzz), after writing
    /// the seed corpora; prints executions, coverage and outcome per target.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Stop each target after this many executions (libFuzzer's `-runs=N`), or at
        /// `--seconds`, whichever comes first.
        #[arg(long)]
        runs: Option<u64>,
        /// Run only this target (repeatable): messages, records, decompress, sasl, conn_frames.
        #[arg(long)]
        target: Vec<String>,
        /// cargo-fuzz's sanitizer: `address` (the default) or `none` (coverage only, about
        /// 2 to 4 times the executions per second; Rust's own bounds and overflow checks stay).
        #[arg(long, default_value = "address")]
        sanitizer: String,
    },
    /// Soak run: records through an idempotent Writer (acks=all), read by a group of 3
    /// GroupReader members, while faults are injected (tansu memory phase: connections cut,
    /// members killed; tansu SQLite phase: tansu restarted too; mock phase: leader moves and
    /// broker outages; Apache Kafka phase, on a three-node cluster started for it: nodes
    /// SIGKILLed and restarted); checks every record and the resident memory, prints a table.
    Soak {
        /// Arguments passed on: `--records N` (tansu memory phase, default 10,000,000),
        /// `--durable-records N` (SQLite phase, default N/50, at least 10,000),
        /// `--mock-records N` (default N/10), `--faults N` (per phase); 0 records skip a phase.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Record real traffic (librdkafka and kafkit clients against tansu through a recording
    /// relay) and write it as seed files into fuzz/corpus/<target>/ (messages, records,
    /// conn_frames).
    Capture {
        /// Arguments passed on, e.g. `--out DIR` (default fuzz/corpus).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Build the Java peer of the tests (peers/java, on kafka-clients 4.4) with Maven unless it
    /// is built, and print its class path (for KAFKIT_JAVA_PEER_CP).
    JavaPeer,
    /// Build the Go peer of the benches (peers/go, on franz-go and segmentio/kafka-go) with the
    /// `go` on PATH unless it is built, and print the binary's path.
    GoPeer,
    /// Build the krafka peer of the benchmarks (peers/krafka, a Cargo package of its own on
    /// krafka 0.28) in release mode into target/tools/krafka-peer and print its path.
    KrafkaPeer,
    /// Build the examples (package kafkit-examples) and run each against running brokers,
    /// checking its output, as the gate's `examples` step does (e.g. `cargo xtask examples
    /// --tansu 127.0.0.1:19092 --kafka 127.0.0.1:29092`). The `security` example runs on Kafka
    /// when KAFKIT_KAFKA_SASL_BOOTSTRAP, KAFKIT_KAFKA_SSL_BOOTSTRAP, KAFKIT_KAFKA_MTLS_BOOTSTRAP
    /// and KAFKIT_KAFKA_TLS_DIR give the rig's secured listeners (`broker start --kafka` prints
    /// them), and is skipped otherwise.
    Examples {
        /// tansu's bootstrap address (`HOST:PORT`).
        #[arg(long)]
        tansu: Option<String>,
        /// Apache Kafka's bootstrap address (`HOST:PORT`).
        #[arg(long)]
        kafka: Option<String>,
    },
    /// Write the public API of each published library crate to api/<crate>.txt (from rustdoc's
    /// JSON on the stable toolchain), or with --check fail, printing the diff, where a committed
    /// listing is out of date (part of `cargo xtask test`).
    Api {
        /// Compare with the committed listings instead of writing them.
        #[arg(long)]
        check: bool,
    },
    /// Build the `kafkit` command line (and library) with the `pure-rust` features in
    /// target/no-c with the C compiler hidden (CC=false, no cc/gcc/clang/c++ on PATH), run
    /// kafkit-compress's tests with its pure codecs, as the gate's `no-c` step does.
    NoC {
        /// kafkit-cli's features instead (`--features default` must fail: it needs C).
        #[arg(long, default_value = no_c::PURE_FEATURES)]
        features: String,
        /// Target folder (default: target/no-c of the workspace); use a fresh one to time a
        /// cold build.
        #[arg(long)]
        target_dir: Option<PathBuf>,
    },
    /// Run the CI gate: fmt, clippy, codegen --check, cargo package of the published crates, api
    /// --check, no-c, then all tests against tansu and Apache Kafka.
    Test {
        /// TCP port on 127.0.0.1 for tansu (default: a free port, with a broker of its own).
        #[arg(long)]
        port: Option<u16>,
    },
}

#[derive(Subcommand)]
enum BenchKind {
    /// Writer against librdkafka's producer: 1,000,000 records of 100 bytes, acks=1, on tansu
    /// (started on a free port unless `--tansu HOST:PORT` is given) and on a 3-broker mock
    /// cluster, plus 1,000 partitions over 3 brokers; prints a Markdown table.
    Producer {
        /// Arguments passed to the bench (see `cargo run -p kafkit-bench -- producer --help`),
        /// e.g. `--records 100000`, `--cases mock,wide`, `--clients rdkafka`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Every client (kafkit, librdkafka, krafka, franz-go, kafka-go, Java) on one Apache Kafka
    /// 4.4 node of its own: the producer cases (48 partitions without compression, idempotent,
    /// lz4 and zstd; 1,000 partitions with acks=1 and idempotent; transactions), the consumer
    /// cases (6, 48 and 1,000 partitions) and the group case; every run appended to a results
    /// file (default `docs/bench/kafka-<date>.jsonl`), then its tables and charts
    /// (`docs/img/*-cross-*.svg`). See docs/benchmarks.md.
    Cross {
        /// Records per run at 6 and 48 partitions (1,000 partitions and transactions: 3/10 and
        /// 1/2 of it).
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        /// Runs per client per case (the 1,000-partition and transactional cases: at most 2).
        #[arg(long, default_value_t = 3)]
        repeat: u32,
        /// The results file to append to.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
        /// Where the charts go (default `docs/img`).
        #[arg(long)]
        svg: Option<std::path::PathBuf>,
    },
    /// Reader against librdkafka's consumer: a topic of 1,000,000 records of 100 bytes filled
    /// once, read from the beginning by each client with an explicit assignment and the same
    /// fetch settings, on tansu (started on a free port unless `--tansu HOST:PORT` is given) and
    /// on a 3-broker mock cluster, with 6, 48 and 1,000 partitions; prints Markdown tables.
    Consumer {
        /// Arguments passed to the bench (see `cargo run -p kafkit-bench -- consumer --help`),
        /// e.g. `--repeat 3`, `--partitions 48`, `--cases mock`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// ShareReader against the Java client's KafkaShareConsumer (KIP-932 share groups): a topic
    /// of 1,000,000 records of 100 bytes over 12 partitions filled once, read by one
    /// implicit-mode member of a new share group per client and round (5 rounds, the clients
    /// alternating), on a one-node Apache Kafka 4.4 (started on a free port unless
    /// `--bootstrap HOST:PORT` is given); builds the Java peer; prints Markdown tables.
    Share {
        /// Arguments passed to the bench (see `cargo run -p kafkit-bench -- share --help`),
        /// e.g. `--rounds 7`, `--records 200000`, `--clients java,ours`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand)]
enum BrokerAction {
    /// Start a broker in the background (installs it if missing; succeeds if one already
    /// answers on the port): Apache Kafka where Java and Maven are present, else tansu.
    Start {
        /// Apache Kafka 4.4 (KRaft, from Maven Central; needs Java 17+ and Maven).
        #[arg(long, conflicts_with = "tansu")]
        kafka: bool,
        /// tansu (a Kafka-compatible broker in Rust, memory storage).
        #[arg(long)]
        tansu: bool,
        /// Number of Kafka nodes: 1 (combined broker and controller) or 3 (one quorum of
        /// three, replication factor 3, min.insync.replicas=2). Node i listens on port + i.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=3))]
        brokers: u32,
        /// Open each Kafka node's JMX (the broker's metrics, read by the benches'
        /// `--kafka-jmx`) on a free loopback port, without authentication: any local user can
        /// then act as the broker's user, so only on a machine of your own.
        #[arg(long)]
        jmx: bool,
    },
    /// Stop the broker (Kafka or tansu) started by `start` on the port.
    Stop,
    /// Print `running <bootstrap>` or `stopped`.
    Status {
        /// Also print the API versions the broker advertises.
        #[arg(long, short)]
        verbose: bool,
    },
    /// Build (once per machine) the tansu with SQLite storage that the SASL login tests start
    /// themselves, and print its path.
    InstallSasl,
}

/// `broker start`: Apache Kafka when asked for, or by default where Java and Maven are present;
/// tansu when asked for or when Kafka cannot run here.
fn start_broker(
    port: u16,
    kafka: bool,
    tansu: bool,
    brokers: u32,
    jmx: bool,
) -> Result<(), String> {
    let use_kafka = kafka || (!tansu && kafka::available());
    if !use_kafka {
        if !tansu {
            println!(
                "broker: Java 17+ and Maven are not both on this machine, so this is tansu, not \
                 Apache Kafka (install them for the reference broker; --tansu hides this note)"
            );
        }
        return broker::Broker { port }.start().map(drop);
    }
    kafka::Kafka { port, brokers, jmx }.start(false).map(drop)
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Codegen {
            schemas,
            old_schemas,
            check,
        } => {
            let shared = codegen::repo_root().join("../shared");
            let schemas = schemas.unwrap_or_else(|| shared.join("kafka-message-schemas-4.4"));
            let old_schemas = old_schemas.unwrap_or_else(|| shared.join("kafka-message-schemas"));
            codegen::run(&codegen::Options {
                schemas,
                old_schemas: Some(old_schemas),
                check,
            })
        }
        Command::Broker { action, port } => {
            let b = broker::Broker { port };
            let k = kafka::Kafka {
                port,
                brokers: 0,
                jmx: false,
            };
            match action {
                BrokerAction::Start {
                    kafka,
                    tansu,
                    brokers,
                    jmx,
                } => start_broker(port, kafka, tansu, brokers, jmx),
                BrokerAction::Stop => {
                    // A port holds Kafka or tansu: "not running" only when neither was there.
                    let kafka_here = !k.nodes().is_empty();
                    k.stop().and_then(|()| {
                        if kafka_here && !b.has_pid_file() {
                            Ok(())
                        } else {
                            b.stop()
                        }
                    })
                }
                BrokerAction::Status { verbose } => {
                    if k.status() {
                        Ok(())
                    } else {
                        b.status(verbose).map(drop)
                    }
                }
                BrokerAction::InstallSasl => {
                    sasl_broker::ensure(false).map(|bin| println!("{}", bin.display()))
                }
            }
        }
        Command::Demo { kafka, args } => demo::run(&args, kafka),
        Command::Bench {
            which: BenchKind::Producer { args },
        } => bench::run("producer", &args),
        Command::Bench {
            which: BenchKind::Consumer { args },
        } => bench::run("consumer", &args),
        Command::Bench {
            which: BenchKind::Share { args },
        } => bench::run_share(&args),
        Command::Bench {
            which:
                BenchKind::Cross {
                    records,
                    repeat,
                    json,
                    svg,
                },
        } => bench::run_cross(&bench::CrossPlan {
            records,
            repeat,
            json,
            svg,
        }),
        Command::Fuzz {
            seconds,
            runs,
            target,
            sanitizer,
        } => fuzz::run(seconds, runs, &target, &sanitizer),
        Command::Soak { args } => reliability::run("soak", &args),
        Command::Capture { mut args } => {
            if !args.iter().any(|a| a == "--out") {
                let out = codegen::repo_root().join("fuzz/corpus");
                args.extend(["--out".to_string(), out.display().to_string()]);
            }
            reliability::run("capture", &args)
        }
        Command::JavaPeer => java_peer::build().map(|cp| println!("{cp}")),
        Command::GoPeer => go_peer::build().map(|bin| println!("{}", bin.display())),
        Command::KrafkaPeer => krafka_peer::build().map(|bin| println!("{bin}")),
        Command::Examples { tansu, kafka } => {
            // The Kafka rig's secured listeners (the `security` example), from this process's
            // environment when set: `cargo xtask broker start --kafka` prints them.
            let secure: Vec<(&'static str, String)> = [
                test::KAFKA_SASL_BOOTSTRAP_ENV,
                test::KAFKA_SSL_BOOTSTRAP_ENV,
                test::KAFKA_MTLS_BOOTSTRAP_ENV,
                test::KAFKA_TLS_DIR_ENV,
            ]
            .into_iter()
            .filter_map(|n| Some((n, std::env::var(n).ok()?)))
            .collect();
            let brokers: Vec<examples::Target<'_>> = [
                ("tansu", tansu.as_deref(), Vec::new()),
                ("Apache Kafka", kafka.as_deref(), secure),
            ]
            .into_iter()
            .filter_map(|(name, addr, env)| {
                Some(examples::Target {
                    name,
                    bootstrap: addr?,
                    env,
                })
            })
            .collect();
            if brokers.is_empty() {
                Err("examples: give --tansu HOST:PORT and/or --kafka HOST:PORT".to_owned())
            } else {
                examples::run(&brokers)
            }
        }
        Command::Api { check } => api::run(check),
        Command::NoC {
            features,
            target_dir,
        } => no_c::run(&features, &no_c::target_dir(target_dir)),
        Command::Test { port } => test::run(&Cli::command(), port),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
