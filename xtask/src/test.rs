//! `cargo xtask test`: the whole gate that CI runs, in order, stopping at the first failure.
//!
//! 1. `cargo fmt --all -- --check`
//! 2. `cargo clippy --workspace --all-targets -- -D warnings`
//! 3. `kafkit` without default features and with each of its features alone ([`FEATURES`]):
//!    `cargo clippy -p kafkit --lib --no-default-features [--features F] -- -D warnings`, the
//!    library only (a check, no code generation), so a `cfg` slip fails here and not for a user
//! 4. `cargo xtask codegen --check` (generated code is up to date with the schemas)
//! 5. `cargo publish --dry-run` of every published crate ([`PACKAGED`], in dependency order) in
//!    one invocation: each is packed as crates.io would take it and built alone from the packed
//!    sources, its workspace dependencies taken from the packages packed before it (cargo's local
//!    overlay), and the upload is skipped, so what `cargo publish` would refuse fails here. Then `cargo xtask api --check` (see [`crate::api`]): the committed public API
//!    listings in `api/` match the code, else the step fails and prints the diff.
//!    Then `no-c`, the build without a C compiler (see [`crate::no_c`], also `cargo xtask
//!    no-c`): in target/no-c, with `CC=false CXX=false` and a PATH without cc/gcc/clang/c++,
//!    `cargo build -p kafkit-cli --bin kafkit --no-default-features --features pure-rust` (the
//!    `kafkit` library with the same features), kafkit-compress's unit tests with only its pure
//!    codecs (ruzstd reads and writes the zstd batches), and the built binary's `--version`
//! 6. start tansu (see [`crate::broker`]) and export `KAFKIT_TANSU_BOOTSTRAP`; without `--port`
//!    the broker gets a free port of its own, so runs from several checkouts do not share or stop
//!    each other's broker; export the SQLite-capable tansu the SASL login tests start themselves
//!    (`KAFKIT_TANSU_SQLITE_BIN`, see [`crate::sasl_broker`]: built in the background from step 1
//!    on when this machine has none yet), or, when it cannot be built,
//!    `KAFKIT_TANSU_SQLITE_UNAVAILABLE` with the reason, which those tests then print as a skip.
//!    Then Apache Kafka 4.4 (see [`crate::kafka`]) on free ports: one KRaft node, exported as
//!    `KAFKIT_KAFKA_BOOTSTRAP` (the `on_kafka::` family and the Kafka-only modules run against
//!    it), and three nodes of one quorum, exported as `KAFKIT_KAFKA3_BOOTSTRAP` and
//!    `KAFKIT_KAFKA3_STATE` (the tests that kill nodes), the one node's log as
//!    `KAFKIT_KAFKA_LOG` and its SASL_PLAINTEXT listener as `KAFKIT_KAFKA_SASL_BOOTSTRAP` (the
//!    `sasl_kafka::` tests), its SSL and MTLS listeners as `KAFKIT_KAFKA_SSL_BOOTSTRAP` and
//!    `KAFKIT_KAFKA_MTLS_BOOTSTRAP` with their certificates' folder as `KAFKIT_KAFKA_TLS_DIR`
//!    (the `secure_kafka::` tests). A machine without Java or Maven fails
//!    here with what to install (the Kafka tests are never skipped). Export the Java peer's
//!    class path (`KAFKIT_JAVA_PEER_CP`, see [`crate::java_peer`]: built with Maven at the
//!    start, before step 1, when its sources changed)
//!    Then the examples (see [`crate::examples`]): `cargo build --workspace --examples`, then
//!    each built `kafkit-examples` binary against tansu and against the one-node Kafka, with a
//!    timeout each, its output checked (the produce example's offsets, the consumers reading
//!    what it wrote, the transact example's committed records, a rerun assigned at once); the
//!    `security` example gets the one-node Kafka's SASL and TLS listeners as above
//! 7. `cargo nextest run --workspace --no-fail-fast --profile ci` (unit and integration tests)
//! 8. `cargo test --workspace --doc`, and kafkit-compress's `java_interop` (ignored by default:
//!    it needs the Java codec jars, which the Java peer's class path holds)
//! 9. `kafkit` without default features: `cargo test -p kafkit --no-default-features --lib
//!    writer::config::tests` (the settings whose check depends on the features: a codec left
//!    out is refused by `WriterBuilder::build`) and `cargo test -p kafkit --no-default-features
//!    --doc` (no doc example may need a feature it does not gate on); then the same unit tests
//!    and `tls::` with `--features zstd-pure,tls-graviola` (the pure twins, which the C features
//!    hide in the default build: zstd taken through ruzstd, a graviola TLS handshake)
//! 10. stop tansu and Kafka, when steps 6 and 6b started them (also after a failure)
//!
//! The last line is the plain total of steps 7 to 9: `tests: N passed, N failed, N skipped`.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::broker::{Broker, Started};
use crate::kafka::Kafka;
use crate::sasl_broker;

/// The cargo features of `kafkit` that step 3 builds one at a time (beside none at all).
/// `metrics` is off by default; the integration tests turn it on for the workspace build
/// (tests/Cargo.toml), so step 2 lints it with the other defaults and step 3's builds without
/// default features leave it out. `zstd-pure` and `tls-graviola` are the pure-Rust twins of
/// `zstd` and `tls`; `rustls` alone is TLS with no crypto provider built in; `pure-rust`, all
/// the twins together, is step 5's no-C build.
pub const FEATURES: [&str; 10] = [
    "gzip",
    "snappy",
    "lz4",
    "zstd",
    "zstd-pure",
    "tls",
    "tls-graviola",
    "rustls",
    "aws-msk-iam",
    "metrics",
];

/// The published crates, in dependency order (the order `cargo publish` must take them; cargo
/// finds the same order itself). bench, demo, examples, tests and xtask are `publish = false`.
/// The gate's `cargo publish --dry-run -p ...` takes them in this order and stops before each
/// upload. A cold target folder takes about 4 minutes on 2 shared cores (160 s of CPU), a warm
/// one 1-2 minutes.
pub const PACKAGED: [&str; 8] = [
    "kafkit-compress",
    "kafkit-pagebuf",
    "kafkit-protocol",
    "kafkit-balancer",
    "kafkit-group-balancer",
    "kafkit-sasl",
    "kafkit",
    "kafkit-cli",
];

/// Name of the environment variable that tells integration tests where tansu listens.
pub const BOOTSTRAP_ENV: &str = "KAFKIT_TANSU_BOOTSTRAP";

/// Name of the environment variable that tells integration tests where Apache Kafka listens.
pub const KAFKA_BOOTSTRAP_ENV: &str = "KAFKIT_KAFKA_BOOTSTRAP";

/// The one-node cluster's log file (its fetch sessions are logged), for the integration tests.
pub const KAFKA_LOG_ENV: &str = "KAFKIT_KAFKA_LOG";

/// The one-node cluster's relayed listener: `LISTEN,TARGET` (a test's relay binds LISTEN, the
/// address the listener advertises, and forwards to TARGET).
pub const KAFKA_RELAY_ENV: &str = "KAFKIT_KAFKA_RELAY";

/// The one-node cluster's SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, sessions
/// of [`crate::kafka::SASL_SESSION_MS`]), for the SASL tests.
pub const KAFKA_SASL_BOOTSTRAP_ENV: &str = "KAFKIT_KAFKA_SASL_BOOTSTRAP";

/// The one-node cluster's SSL listener (TLS, server authentication only), for the TLS tests.
pub const KAFKA_SSL_BOOTSTRAP_ENV: &str = "KAFKIT_KAFKA_SSL_BOOTSTRAP";

/// The one-node cluster's MTLS listener (TLS, a client certificate signed by the test CA
/// required), for the TLS tests.
pub const KAFKA_MTLS_BOOTSTRAP_ENV: &str = "KAFKIT_KAFKA_MTLS_BOOTSTRAP";

/// The folder of the one-node cluster's TLS files (`ca.pem`, `client.pem`, `client-key.pem`; see
/// [`crate::kafka_tls`]), for the TLS tests.
pub const KAFKA_TLS_DIR_ENV: &str = "KAFKIT_KAFKA_TLS_DIR";

/// The three-node cluster's bootstrap list, for the integration tests.
pub const KAFKA3_BOOTSTRAP_ENV: &str = "KAFKIT_KAFKA3_BOOTSTRAP";

/// The three-node cluster's state folder (pid files, command lines), for the tests that kill
/// and restart its nodes.
pub const KAFKA3_STATE_ENV: &str = "KAFKIT_KAFKA3_STATE";

/// Name of the environment variable that gives the tests the Java peer's class path.
pub const JAVA_PEER_ENV: &str = crate::java_peer::CLASS_PATH_ENV;

/// Test counts read from the runners' summary lines.
#[derive(Clone, Debug, Default)]
struct Counts {
    passed: u64,
    failed: u64,
    skipped: u64,
    /// Why tests failed: each panic's `thread '..' panicked at` line and its message, repeated
    /// after the summary so that the tail of the output (all a CI log may keep) says why.
    reasons: Vec<String>,
    /// The panic being read: its lines so far.
    reading: Option<String>,
}

/// At most this many failure reasons are kept, each of at most [`REASON_LINES`] lines.
const MAX_REASONS: usize = 20;
const REASON_LINES: usize = 6;

impl Counts {
    /// Adds what one output line reports: nextest's `Summary [..] N tests run: N passed, N failed,
    /// N skipped` or libtest's `test result: ok. N passed; N failed; N ignored; ...`.
    fn add_line(&mut self, line: &str) {
        self.read_reason(line);
        let tail = if let Some((_, t)) = line.split_once(" run: ") {
            if !line.trim_start().starts_with("Summary") {
                return;
            }
            t
        } else if let Some(t) = line.strip_prefix("test result: ") {
            // Only libtest's own line; nextest echoes failed tests' output indented.
            t.split_once(". ").map_or(t, |(_, rest)| rest)
        } else {
            return;
        };
        for part in tail.split([',', ';']) {
            let mut words = part.split_whitespace();
            let (Some(n), Some(what)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            match what {
                "passed" => self.passed += n,
                "failed" | "timed" => self.failed += n,
                "skipped" | "ignored" => self.skipped += n,
                _ => {}
            }
        }
    }

    /// Keeps a panic's first line and message (up to a blank line, the backtrace or
    /// [`REASON_LINES`] lines).
    fn read_reason(&mut self, line: &str) {
        let line = line.trim_end();
        let starts = line.starts_with("thread '") && line.contains(" panicked at ");
        if let Some(r) = &mut self.reading {
            let ends = starts
                || line.is_empty()
                || line.starts_with("stack backtrace:")
                || line.starts_with("note: ")
                || line.starts_with("---- ")
                || r.lines().count() >= REASON_LINES;
            if !ends {
                r.push('\n');
                r.push_str(line);
                return;
            }
            let done = self.reading.take().unwrap_or_default();
            if self.reasons.len() < MAX_REASONS {
                self.reasons.push(done);
            }
        }
        if starts {
            self.reading = Some(line.to_owned());
        }
    }

    /// Adds `other`'s counts and reasons (a finished panic included).
    fn merge(&mut self, mut other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.skipped += other.skipped;
        other.read_reason("");
        for r in other.reasons {
            if self.reasons.len() < MAX_REASONS {
                self.reasons.push(r);
            }
        }
    }
}

/// Runs the gate. `cli` is the xtask command tree, used to see whether `codegen --check`
/// exists yet; `port` is tansu's port (`None`: a free one). Returns an error naming the failed
/// step.
pub fn run(cli: &clap::Command, port: Option<u16>) -> Result<(), String> {
    let started = Instant::now();
    // Java, Maven and Kafka's jars first: a machine that cannot run Kafka fails in seconds.
    crate::kafka::java()?;
    crate::kafka::install()?;
    let java_peer = crate::java_peer::build()?;
    let sasl_tansu = SaslTansu::start();
    step("fmt", cargo(&["fmt", "--all", "--", "--check"]))?;
    step(
        "clippy",
        cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    feature_checks()?;
    codegen_check(cli)?;
    step("package", package())?;
    api_check()?;
    println!("xtask test: == no-c ==");
    let t = Instant::now();
    crate::no_c::run(crate::no_c::PURE_FEATURES, &crate::no_c::target_dir(None))?;
    println!("xtask test: no-c ok ({}s)", t.elapsed().as_secs());
    // Compile the test binaries now, so that the compile overlaps the SQLite tansu build
    // (when it is still running) instead of waiting for it; the run below reuses them.
    if has_nextest() {
        step(
            "build tests",
            cargo(&[
                "nextest",
                "run",
                "--workspace",
                "--profile",
                "ci",
                "--no-run",
            ]),
        )?;
    }

    let port = match port {
        Some(p) => p,
        None => free_port()?,
    };
    let broker = Broker { port };
    let how = broker
        .start()
        .map_err(|e| format!("step broker start failed: {e}"))?;
    let kafka = Kafka {
        port: free_port()?,
        brokers: 1,
        jmx: false,
    };
    let kafka3 = Kafka {
        port: free_port()?,
        brokers: 3,
        jmx: false,
    };
    // The two clusters start side by side (each start is mostly JVM warm-up).
    let (kafka_started, kafka3_started) = std::thread::scope(|s| {
        let three = s.spawn(|| kafka3.start(true));
        let one = kafka.start(true);
        (
            one,
            three
                .join()
                .unwrap_or_else(|_| Err("the start thread panicked".into())),
        )
    });
    let mut counts = Counts::default();
    let sasl_env = sasl_tansu.finish();
    let tests = match (&kafka_started, &kafka3_started) {
        (Ok((_, nodes)), Ok((_, nodes3))) => {
            let env = KafkaEnv {
                bootstrap: Kafka::bootstrap(nodes),
                sasl_bootstrap: Kafka::sasl_bootstrap(nodes),
                ssl_bootstrap: Kafka::ssl_bootstrap(nodes),
                mtls_bootstrap: Kafka::mtls_bootstrap(nodes),
                tls_dir: kafka.tls_dir().display().to_string(),
                log: kafka.node_log(nodes[0].id).display().to_string(),
                relay: format!(
                    "127.0.0.1:{},127.0.0.1:{}",
                    nodes[0].relay_port, nodes[0].relayed_port
                ),
                bootstrap3: Kafka::bootstrap(nodes3),
                state3: kafka3.state_dir().display().to_string(),
                java_peer: java_peer.clone(),
            };
            run_tests(&broker, &env, &sasl_env, &mut counts)
        }
        (Err(e), _) | (_, Err(e)) => Err(format!("step kafka start failed: {e}")),
    };
    if how == Started::Spawned
        && let Err(e) = broker.stop()
    {
        eprintln!("xtask test: could not stop the broker: {e}");
    }
    if tests.is_ok() && how == Started::Spawned {
        broker.forget();
    }
    for (cluster, started) in [(&kafka, &kafka_started), (&kafka3, &kafka3_started)] {
        if let Ok((Started::Spawned, _)) = started {
            match cluster.stop() {
                Ok(()) if tests.is_ok() => cluster.forget(),
                Ok(()) => {}
                Err(e) => eprintln!("xtask test: could not stop Apache Kafka: {e}"),
            }
        }
    }
    match &tests {
        Ok(()) => println!(
            "xtask test: all steps passed in {}s",
            started.elapsed().as_secs()
        ),
        Err(e) => println!("xtask test: {e}"),
    }
    if !counts.reasons.is_empty() {
        println!("xtask test: why tests failed (first {MAX_REASONS} panics):");
        for r in &counts.reasons {
            println!("{r}");
        }
    }
    println!(
        "tests: {} passed, {} failed, {} skipped",
        counts.passed, counts.failed, counts.skipped
    );
    tests
}

/// Whether `cargo nextest` is installed.
fn has_nextest() -> bool {
    cargo(&["nextest", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Where the Apache Kafka clusters of the run are, for the tests' environment.
struct KafkaEnv {
    bootstrap: String,
    /// Empty when the node has no SASL listener (a cluster started by an older xtask).
    sasl_bootstrap: String,
    /// Empty, as `mtls_bootstrap`, when the node has no TLS listeners (an older xtask's cluster).
    ssl_bootstrap: String,
    mtls_bootstrap: String,
    tls_dir: String,
    log: String,
    relay: String,
    bootstrap3: String,
    state3: String,
    /// The Java peer's class path.
    java_peer: String,
}

fn run_tests(
    broker: &Broker,
    kafka: &KafkaEnv,
    sasl_env: &(&str, String),
    counts: &mut Counts,
) -> Result<(), String> {
    let bootstrap = broker.bootstrap();
    println!("xtask test: {BOOTSTRAP_ENV}={bootstrap}");
    println!("xtask test: {KAFKA_BOOTSTRAP_ENV}={}", kafka.bootstrap);
    println!(
        "xtask test: {KAFKA_SASL_BOOTSTRAP_ENV}={}",
        kafka.sasl_bootstrap
    );
    println!(
        "xtask test: {KAFKA_SSL_BOOTSTRAP_ENV}={}",
        kafka.ssl_bootstrap
    );
    println!(
        "xtask test: {KAFKA_MTLS_BOOTSTRAP_ENV}={}",
        kafka.mtls_bootstrap
    );
    println!("xtask test: {KAFKA_TLS_DIR_ENV}={}", kafka.tls_dir);
    println!("xtask test: {KAFKA_LOG_ENV}={}", kafka.log);
    println!("xtask test: {KAFKA_RELAY_ENV}={}", kafka.relay);
    println!("xtask test: {KAFKA3_BOOTSTRAP_ENV}={}", kafka.bootstrap3);
    println!("xtask test: {KAFKA3_STATE_ENV}={}", kafka.state3);
    println!("xtask test: {JAVA_PEER_ENV}={}", kafka.java_peer);
    let with_env = |mut c: Command| {
        c.env(BOOTSTRAP_ENV, &bootstrap);
        c.env(KAFKA_BOOTSTRAP_ENV, &kafka.bootstrap);
        c.env(KAFKA_SASL_BOOTSTRAP_ENV, &kafka.sasl_bootstrap);
        c.env(KAFKA_SSL_BOOTSTRAP_ENV, &kafka.ssl_bootstrap);
        c.env(KAFKA_MTLS_BOOTSTRAP_ENV, &kafka.mtls_bootstrap);
        c.env(KAFKA_TLS_DIR_ENV, &kafka.tls_dir);
        c.env(KAFKA_LOG_ENV, &kafka.log);
        c.env(KAFKA_RELAY_ENV, &kafka.relay);
        c.env(KAFKA3_BOOTSTRAP_ENV, &kafka.bootstrap3);
        c.env(KAFKA3_STATE_ENV, &kafka.state3);
        c.env(JAVA_PEER_ENV, &kafka.java_peer);
        c.env(sasl_env.0, &sasl_env.1);
        c
    };
    // The examples, built once and run against tansu and the one-node Kafka (their output
    // checked), before the test binaries load the machine.
    let tansu = crate::examples::Target {
        name: "tansu",
        bootstrap: &bootstrap,
        env: Vec::new(),
    };
    let apache = crate::examples::Target {
        name: "Apache Kafka",
        bootstrap: &kafka.bootstrap,
        env: vec![
            (KAFKA_SASL_BOOTSTRAP_ENV, kafka.sasl_bootstrap.clone()),
            (KAFKA_SSL_BOOTSTRAP_ENV, kafka.ssl_bootstrap.clone()),
            (KAFKA_MTLS_BOOTSTRAP_ENV, kafka.mtls_bootstrap.clone()),
            (KAFKA_TLS_DIR_ENV, kafka.tls_dir.clone()),
        ],
    };
    crate::examples::run(&[tansu, apache])?;
    if !has_nextest() {
        // Fallback for machines without cargo-nextest: libtest runs everything, doc tests included.
        println!("xtask test: note: cargo-nextest is not installed; running `cargo test` instead");
        let all = cargo(&["test", "--workspace", "--no-fail-fast"]);
        step_counted("cargo test", with_env(all), counts)
            .map_err(|e| format!("{e} (broker log: {})", broker.log_file().display()))?;
        return step_counted("java_interop", with_env(java_interop()), counts);
    }
    let mut nextest = cargo(&[
        "nextest",
        "run",
        "--workspace",
        "--no-fail-fast",
        "--profile",
        "ci",
    ]);
    if sasl_env.0 == sasl_broker::UNAVAILABLE_ENV {
        // Counted as skipped in the summary, next to the warning printed earlier.
        nextest.args([
            "-E",
            &format!("not test(/^{}::/)", sasl_broker::TEST_MODULE),
        ]);
    }
    step_counted("nextest", with_env(nextest), counts)
        .map_err(|e| format!("{e} (broker log: {})", broker.log_file().display()))?;
    let doc = cargo(&["test", "--workspace", "--doc"]);
    step_counted("doc tests", with_env(doc), counts)?;
    step_counted("java_interop", with_env(java_interop()), counts)?;
    // Without default features: the settings that depend on what is built in (a left-out codec
    // is refused by WriterBuilder::build) and every doc example (none may need a feature).
    let lib = cargo(&[
        "test",
        "-p",
        "kafkit",
        "--no-default-features",
        "--lib",
        NO_DEFAULT_FEATURES_TESTS,
    ]);
    step_counted("kafkit --no-default-features unit tests", lib, counts)?;
    // The pure-Rust twins of `zstd` and `tls`, which the default build never runs (the C ones
    // win): a zstd Writer is taken, and graviola completes and verifies a TLS handshake.
    let pure = cargo(&[
        "test",
        "-p",
        "kafkit",
        "--no-default-features",
        "--features",
        PURE_TWINS,
        "--lib",
        "--",
        NO_DEFAULT_FEATURES_TESTS,
        "tls::",
    ]);
    step_counted(
        "kafkit --features zstd-pure,tls-graviola unit tests",
        pure,
        counts,
    )?;
    let doc = cargo(&["test", "-p", "kafkit", "--no-default-features", "--doc"]);
    step_counted("kafkit --no-default-features doc tests", doc, counts)
}

/// kafkit-compress's `java_interop` (ignored by default): our codecs against the Java client's
/// codec libraries, the jars of the Java peer's class path.
fn java_interop() -> Command {
    cargo(&[
        "test",
        "-p",
        "kafkit-compress",
        "--test",
        "java_interop",
        "--",
        "--ignored",
    ])
}

/// The unit tests of `kafkit` that step 9 runs without default features (a libtest filter):
/// those whose outcome depends on the features.
pub const NO_DEFAULT_FEATURES_TESTS: &str = "writer::config::tests";

/// The features step 9 also runs [`NO_DEFAULT_FEATURES_TESTS`] and the TLS tests with: the
/// pure-Rust zstd and TLS, each of which its C twin hides when both are on.
pub const PURE_TWINS: &str = "zstd-pure,tls-graviola";

/// The SQLite-capable tansu for the SASL login tests: found at once, or built on a thread
/// while the gate's first steps run.
enum SaslTansu {
    Ready(Result<std::path::PathBuf, String>),
    Building(std::thread::JoinHandle<Result<std::path::PathBuf, String>>),
}

impl SaslTansu {
    fn start() -> SaslTansu {
        match sasl_broker::existing() {
            Ok(Some(bin)) => SaslTansu::Ready(Ok(bin)),
            Err(e) => SaslTansu::Ready(Err(e)),
            Ok(None) => {
                println!(
                    "xtask test: building the SQLite tansu for the SASL tests in the background \
                     (once per machine; log in {})",
                    sasl_broker::cache_dir()
                        .map_or_else(|| "?".into(), |d| d.display().to_string())
                );
                SaslTansu::Building(std::thread::spawn(|| sasl_broker::ensure(true)))
            }
        }
    }

    /// Waits for the build and returns the environment variable to give the tests.
    fn finish(self) -> (&'static str, String) {
        let result = match self {
            SaslTansu::Ready(r) => r,
            SaslTansu::Building(handle) => {
                println!("xtask test: waiting for the SQLite tansu build");
                handle
                    .join()
                    .unwrap_or_else(|_| Err("the build thread panicked".into()))
            }
        };
        match result {
            Ok(bin) => {
                println!("xtask test: {}={}", sasl_broker::BIN_ENV, bin.display());
                (sasl_broker::BIN_ENV, bin.display().to_string())
            }
            Err(reason) => {
                println!(
                    "xtask test: WARNING: no SQLite tansu, the SASL login tests will be SKIPPED: \
                     {reason}"
                );
                (sasl_broker::UNAVAILABLE_ENV, reason)
            }
        }
    }
}

/// `kafkit`'s library without default features, then with each of [`FEATURES`] alone.
fn feature_checks() -> Result<(), String> {
    let features = std::iter::once(None).chain(FEATURES.iter().map(Some));
    for feature in features {
        let mut args = vec!["clippy", "-p", "kafkit", "--lib", "--no-default-features"];
        if let Some(f) = feature {
            args.extend(["--features", f]);
        }
        args.extend(["--", "-D", "warnings"]);
        let name = match feature {
            Some(f) => format!("kafkit --features {f} alone"),
            None => "kafkit --no-default-features".to_owned(),
        };
        step(&name, cargo(&args))?;
    }
    Ok(())
}

/// `cargo publish --dry-run` of [`PACKAGED`], in one invocation: cargo packs them in dependency
/// order and verifies each by building it from its package, resolving the workspace dependencies
/// through the packages just made, then skips the upload. `--allow-dirty`: the gate checks what
/// would be packed from the working tree, committed or not.
fn package() -> Command {
    let mut args = vec!["publish", "--dry-run", "--allow-dirty"];
    for name in PACKAGED {
        args.extend(["-p", name]);
    }
    cargo(&args)
}

/// `cargo xtask api --check`: the committed public API listings are up to date.
fn api_check() -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("current exe: {e}"))?;
    let mut c = Command::new(exe);
    c.args(["api", "--check"]);
    step("api --check", c)
}

/// `codegen --check` is mandatory once the codegen subcommand has a `--check` flag.
fn codegen_check(cli: &clap::Command) -> Result<(), String> {
    let has_check = cli
        .find_subcommand("codegen")
        .is_some_and(|c| c.get_arguments().any(|a| a.get_long() == Some("check")));
    if !has_check {
        println!("xtask test: note: `codegen --check` does not exist yet; skipped");
        return Ok(());
    }
    let exe = std::env::current_exe().map_err(|e| format!("current exe: {e}"))?;
    let mut c = Command::new(exe);
    c.args(["codegen", "--check"]);
    step("codegen --check", c)
}

/// A TCP port on 127.0.0.1 that nothing listens on right now (the OS picks it).
pub fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("find a free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("find a free port: {e}"))
}

fn cargo(args: &[&str]) -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.args(args).current_dir(crate::broker::workspace_root());
    c
}

fn step(name: &str, mut cmd: Command) -> Result<(), String> {
    println!("xtask test: == {name} ==");
    let t = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| format!("step {name} could not start: {e}"))?;
    finish(name, t, status)
}

/// Like [`step`], but copies the command's stdout and stderr through line by line and adds the
/// test counts they report to `counts`.
fn step_counted(name: &str, mut cmd: Command, counts: &mut Counts) -> Result<(), String> {
    println!("xtask test: == {name} ==");
    let t = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("step {name} could not start: {e}"))?;
    let out = child.stdout.take().map(|s| tee(s, false));
    let err = child.stderr.take().map(|s| tee(s, true));
    let status = child
        .wait()
        .map_err(|e| format!("step {name}: wait: {e}"))?;
    for handle in [out, err].into_iter().flatten() {
        if let Ok(c) = handle.join() {
            counts.merge(c);
        }
    }
    finish(name, t, status)
}

/// Copies `src` to our stdout (or stderr) in a thread, counting test results on the way.
fn tee(src: impl Read + Send + 'static, to_stderr: bool) -> std::thread::JoinHandle<Counts> {
    std::thread::spawn(move || {
        let mut counts = Counts::default();
        let mut reader = BufReader::new(src);
        let mut line = Vec::new();
        while matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            counts.add_line(&String::from_utf8_lossy(&line));
            let _ = if to_stderr {
                std::io::stderr().write_all(&line)
            } else {
                std::io::stdout().write_all(&line)
            };
            line.clear();
        }
        counts
    })
}

fn finish(name: &str, t: Instant, status: std::process::ExitStatus) -> Result<(), String> {
    if status.success() {
        println!("xtask test: {name} ok ({}s)", t.elapsed().as_secs());
        Ok(())
    } else {
        Err(format!("step {name} failed ({status})"))
    }
}

#[cfg(test)]
mod tests {
    use super::Counts;

    #[test]
    fn counts_nextest_and_libtest_summaries() {
        let mut c = Counts::default();
        c.add_line("     Summary [   1.726s] 5 tests run: 3 passed, 1 failed, 2 skipped");
        c.add_line("     Summary [  60.001s] 2 tests run: 1 passed, 1 timed out, 0 skipped");
        c.add_line("test result: ok. 4 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out");
        c.add_line(
            "test result: FAILED. 0 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out",
        );
        c.add_line("a line that says 7 passed but is no summary");
        c.add_line("    test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured");
        c.add_line("        PASS [   0.830s] (1/2) tests run: 9 passed");
        assert_eq!((c.passed, c.failed, c.skipped), (8, 4, 3));
    }

    #[test]
    fn keeps_each_panic_and_its_message() {
        let mut c = Counts::default();
        for line in [
            "test a ... FAILED",
            "thread 'a' (12) panicked at tests/a.rs:3:5:",
            "room for three: BlockTimeout",
            "stack backtrace:",
            "   0: core::panicking",
            "thread 'b' panicked at tests/b.rs:9:1:",
            "assertion `left == right` failed",
            "  left: 1",
        ] {
            c.add_line(line);
        }
        let mut total = Counts::default();
        total.merge(c);
        assert_eq!(
            total.reasons,
            [
                "thread 'a' (12) panicked at tests/a.rs:3:5:\nroom for three: BlockTimeout",
                "thread 'b' panicked at tests/b.rs:9:1:\nassertion `left == right` failed\n  left: 1",
            ]
        );
    }
}
