//! `cargo xtask broker start --kafka`: Apache Kafka 4.4 (KRaft) on this machine, the reference
//! broker of the tests.
//!
//! Kafka is a set of jars on Maven Central. `install` resolves `org.apache.kafka:kafka_2.13` and its
//! runtime dependencies (plus `log4j-slf4j-impl`, so that the broker's slf4j logging reaches log4j
//! 2 and its log file) with Maven into `target/tools/kafka-<version>/lib/`: a scratch folder is
//! filled and then renamed, so a half-done download is never used. Java 17 or later and Maven must
//! be on PATH; without them `start` fails with a message saying what to install.
//!
//! A cluster is one node in combined mode (`process.roles=broker,controller`), or three combined
//! nodes whose controllers form one quorum of three (a test can kill any node, the one that leads
//! the quorum included, and two still elect). Each node gets a client port and a controller port on
//! 127.0.0.1; its storage is formatted afresh (`kafka.tools.StorageTool format`) at every start, at
//! 4.4's production feature levels (`transaction.version`, `group.version`, `share.version` as the
//! format tool chooses them). Readiness is a Metadata answer that lists every broker.
//!
//! Every node also has a SASL_PLAINTEXT listener ([`Node::sasl_port`]) with PLAIN (the users of
//! [`PLAIN_USERS`], from the listener's JAAS configuration), SCRAM-SHA-256 and SCRAM-SHA-512
//! (users created by the tests with AlterUserScramCredentials, KIP-554, on the PLAINTEXT
//! listener) and OAUTHBEARER (Kafka's unsecured validator: any unsigned JWT with a subject and an
//! unexpired `exp`), whose sessions last [`SASL_SESSION_MS`] (KIP-368 `connections.max.reauth.ms`, on
//! that listener only): a client must re-authenticate within it, or the broker closes the
//! connection at its next request. The PLAINTEXT listener stays the bootstrap of everything else.
//!
//! Every node also has two TLS listeners, with certificates made at start in the cluster's `tls/`
//! folder ([`Kafka::tls_dir`], see [`crate::kafka_tls`]): `SSL` ([`Node::ssl_port`], server
//! authentication only) and `MTLS` ([`Node::mtls_port`], protocol SSL with
//! `ssl.client.auth=required`: the client must present a certificate signed by the test CA). Both
//! use PEM key and trust stores (`ssl.keystore.type=PEM`, KIP-651).
//!
//! Every node also has the tests' KIP-714 receiver among its `metric.reporters` (see
//! [`crate::kafka_telemetry`]; without one Kafka serves no client metrics), which appends each
//! push it receives to `node-<id>/telemetry/pushes.jsonl`.
//!
//! Run state lives in `.broker/kafka-<first client port>/`: `cluster` (one line per node: id,
//! client port, controller port, relayed port, relay port, SASL port, SSL port, MTLS port; a
//! column an older xtask did not write reads as absent), `tls/`, and per node `node-<id>/` with `server.properties`, `data/`,
//! `kafka.log`, `kafka.pid` and `command` (the Java command line, one argument per line, which a
//! test reads to restart a node it killed).

use std::fmt::Write as _;
use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::broker::{Result, Started, is_alive, probe, signal, workspace_root};

/// The Apache Kafka release the tests run against.
pub const KAFKA_VERSION: &str = "4.4.0";

/// The log4j release whose slf4j 1.x binding is added to the broker's class path (the one
/// `kafka_2.13` itself depends on for log4j-core).
const LOG4J_VERSION: &str = "2.25.5";

/// The KRaft cluster id of the cluster whose first node listens on `port`: the 16 bytes
/// `kafkit-test-` and the port in four hex digits, base64url without padding. Each cluster has
/// its own (the one-node and three-node clusters of `cargo xtask test` are two clusters, and a
/// client that moves from one to the other must see two ids: KIP-1242's check,
/// `rebootstrap_kafka`); the same port gives the same id on every start.
fn cluster_id(port: u16) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let raw = format!("kafkit-test-{port:04x}");
    let bytes = raw.as_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// How long `start` waits for Metadata to list every broker.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// How long `stop` waits for a node to exit after SIGTERM before sending SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// Socket timeout of one Metadata probe (connect, write and read each).
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Largest Metadata answer the probe reads, in bytes.
const MAX_PROBE_RESPONSE: usize = 1 << 20;

/// The PLAIN users of the SASL_PLAINTEXT listener: name and password. Test credentials only.
pub const PLAIN_USERS: [(&str, &str); 2] = [
    ("kafkit-plain", "kafkit-plain-pw"),
    ("kafkit-plain-2", "kafkit-plain-2-pw"),
];

/// The session lifetime of the SASL_PLAINTEXT listener, in milliseconds (KIP-368
/// `connections.max.reauth.ms`): short enough for a test to see a re-authentication, long
/// enough for a test's work to fit in one session on a loaded machine.
pub const SASL_SESSION_MS: u64 = 10_000;

/// Environment variable naming the `java` program (default: `java` on PATH).
pub const JAVA_ENV: &str = "KAFKIT_JAVA";

/// One node of a cluster: its id and ports on 127.0.0.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    /// `node.id` (1, 2, 3).
    pub id: u32,
    /// The PLAINTEXT listener clients use.
    pub port: u16,
    /// The CONTROLLER listener of the KRaft quorum.
    pub controller_port: u16,
    /// The RELAYED listener: the node listens on it and advertises [`Node::relay_port`], where a
    /// test's fault relay (`integration_tests::Relay`) forwards to it, so that every connection of
    /// a client bootstrapped there goes through the relay.
    pub relayed_port: u16,
    /// The port the RELAYED listener advertises (a test's relay binds it).
    pub relay_port: u16,
    /// The SASL_PLAINTEXT listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512); `None` in the state
    /// of a cluster started before it existed.
    pub sasl_port: Option<u16>,
    /// The SSL listener (TLS, server authentication only); `None` in the state of a cluster
    /// started before it existed.
    pub ssl_port: Option<u16>,
    /// The MTLS listener (TLS with a client certificate required); `None` as for
    /// [`Node::ssl_port`].
    pub mtls_port: Option<u16>,
    /// The JMX (RMI) port, bound to 127.0.0.1, without authentication: the broker's own
    /// metrics, such as its request counts, which the benches read
    /// (`kafkit.peer.Main broker-requests`); `None` as for [`Node::ssl_port`].
    pub jmx_port: Option<u16>,
}

/// An Apache Kafka cluster of ours, named by its first node's client port.
#[derive(Clone, Debug)]
pub struct Kafka {
    /// The first node's client port: names the state folder.
    pub port: u16,
    /// Number of nodes (1 or 3).
    pub brokers: u32,
    /// Whether `start` opens each node's JMX ([`Node::jmx_port`]): for the benches only (JMX
    /// without authentication lets any local user act as the broker's user).
    pub jmx: bool,
}

impl Kafka {
    /// The cluster's folder under `.broker/`.
    pub fn state_dir(&self) -> PathBuf {
        workspace_root()
            .join(".broker")
            .join(format!("kafka-{}", self.port))
    }

    fn node_dir(&self, id: u32) -> PathBuf {
        self.state_dir().join(format!("node-{id}"))
    }

    /// Node `id`'s log file (its stdout and stderr).
    pub fn node_log(&self, id: u32) -> PathBuf {
        self.node_dir(id).join("kafka.log")
    }

    /// The nodes as recorded by the last `start` (empty when none was recorded).
    pub fn nodes(&self) -> Vec<Node> {
        let text = fs::read_to_string(self.state_dir().join("cluster")).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace().map(|x| x.parse::<u64>().ok());
                let mut next = || w.next().flatten();
                let (id, port, cport, relayed, relay) =
                    (next()?, next()?, next()?, next()?, next()?);
                Some(Node {
                    id: u32::try_from(id).ok()?,
                    port: u16::try_from(port).ok()?,
                    controller_port: u16::try_from(cport).ok()?,
                    relayed_port: u16::try_from(relayed).ok()?,
                    relay_port: u16::try_from(relay).ok()?,
                    sasl_port: optional_port(next()),
                    ssl_port: optional_port(next()),
                    mtls_port: optional_port(next()),
                    jmx_port: optional_port(next()),
                })
            })
            .collect()
    }

    /// `127.0.0.1:<port>,...` of every node.
    pub fn bootstrap(nodes: &[Node]) -> String {
        nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `127.0.0.1:<sasl port>,...` of every node that has a SASL_PLAINTEXT listener (empty
    /// when none has).
    pub fn sasl_bootstrap(nodes: &[Node]) -> String {
        listener_bootstrap(nodes, |n| n.sasl_port)
    }

    /// `127.0.0.1:<ssl port>,...` of every node that has an SSL listener (empty when none has).
    pub fn ssl_bootstrap(nodes: &[Node]) -> String {
        listener_bootstrap(nodes, |n| n.ssl_port)
    }

    /// `127.0.0.1:<mtls port>,...` of every node that has an MTLS listener (empty when none
    /// has).
    pub fn mtls_bootstrap(nodes: &[Node]) -> String {
        listener_bootstrap(nodes, |n| n.mtls_port)
    }

    /// `127.0.0.1:<JMX port>,...` of every node with JMX (empty when none).
    pub fn jmx_addresses(nodes: &[Node]) -> String {
        listener_bootstrap(nodes, |n| n.jmx_port)
    }

    /// The folder of the TLS listeners' certificates (`ca.pem`, `client.pem`, `client-key.pem`,
    /// ...; see [`crate::kafka_tls`]).
    pub fn tls_dir(&self) -> PathBuf {
        self.state_dir().join("tls")
    }

    /// Starts the cluster unless a broker already answers on `port`.
    ///
    /// `free_ports`: pick every port the OS offers (tests); otherwise node `i` (0-based) listens
    /// on `port + i`. Controller ports are always free ones the OS offers. Installs Kafka first when missing,
    /// formats fresh storage, starts the nodes and waits (up to 120 s) until Metadata lists all.
    pub fn start(&self, free_ports: bool) -> Result<(Started, Vec<Node>)> {
        let first = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        if let Ok(n) = metadata_brokers(first) {
            let nodes = self.nodes();
            println!(
                "broker: a broker already answers at 127.0.0.1:{} ({n} broker(s)); left as it is",
                self.port
            );
            return Ok((Started::AlreadyRunning, nodes));
        }
        let _ = self.stop();
        let lib = install()?;
        let java = java()?;
        // The KIP-714 receiver: without it the broker serves no client metrics, which only the
        // telemetry tests need, so a failed compile (a JRE without javac) is a note, not a stop.
        let telemetry = match crate::kafka_telemetry::build(&lib) {
            Ok(classes) => Some(classes),
            Err(e) => {
                eprintln!(
                    "broker: note: {e}\nbroker: starting without the KIP-714 receiver (the \
                     telemetry_kafka tests will fail)"
                );
                None
            }
        };
        let class_path = class_path(&lib, telemetry.as_deref());
        let nodes = self.pick_ports(free_ports)?;
        let _ = fs::remove_dir_all(self.state_dir());
        fs::create_dir_all(self.state_dir())
            .map_err(|e| format!("create {}: {e}", self.state_dir().display()))?;
        let mut table = String::new();
        for n in &nodes {
            let _ = writeln!(
                table,
                "{} {} {} {} {} {} {} {} {}",
                n.id,
                n.port,
                n.controller_port,
                n.relayed_port,
                n.relay_port,
                n.sasl_port.unwrap_or_default(),
                n.ssl_port.unwrap_or_default(),
                n.mtls_port.unwrap_or_default(),
                n.jmx_port.unwrap_or_default()
            );
        }
        fs::write(self.state_dir().join("cluster"), table)
            .map_err(|e| format!("write cluster file: {e}"))?;
        fs::write(self.state_dir().join("log4j2.properties"), LOG4J2)
            .map_err(|e| format!("write log4j2.properties: {e}"))?;
        crate::kafka_tls::make(&self.tls_dir())?;

        // Format every node's storage at once: each format is a JVM start (about 2 s).
        let mut formats = Vec::new();
        for n in &nodes {
            let dir = self.node_dir(n.id);
            for data in ["data", "data2"] {
                fs::create_dir_all(dir.join(data))
                    .map_err(|e| format!("create {}: {e}", dir.display()))?;
            }
            fs::write(
                dir.join("server.properties"),
                server_properties(n, &nodes, &dir, &self.tls_dir(), telemetry.is_some()),
            )
            .map_err(|e| format!("write server.properties: {e}"))?;
            let child = Command::new(&java)
                .args([
                    "-Xmx256m",
                    "-XX:+UseSerialGC",
                    "-XX:TieredStopAtLevel=1",
                    "-cp",
                ])
                .arg(&class_path)
                .args(["kafka.tools.StorageTool", "format", "-t"])
                .arg(cluster_id(self.port))
                .arg("-c")
                .arg(dir.join("server.properties"))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("run {java} (StorageTool format): {e}"))?;
            formats.push((n.id, child));
        }
        for (id, child) in formats {
            let out = child
                .wait_with_output()
                .map_err(|e| format!("StorageTool format of node {id}: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "broker: StorageTool format of node {id} failed ({}):\n{}{}",
                    out.status,
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }

        let mut children = Vec::new();
        for n in &nodes {
            let dir = self.node_dir(n.id);
            let mut command: Vec<String> = [
                java.as_str(),
                "-Xms128m",
                "-Xmx512m",
                "-XX:+UseSerialGC",
                "-Djava.awt.headless=true",
            ]
            .map(str::to_string)
            .into();
            command.push(format!("-Dkafka.logs.dir={}", dir.display()));
            if let Some(jmx) = n.jmx_port {
                // JMX on loopback only, one port for the registry and the connections.
                command.extend([
                    "-Dcom.sun.management.jmxremote".to_string(),
                    format!("-Dcom.sun.management.jmxremote.port={jmx}"),
                    format!("-Dcom.sun.management.jmxremote.rmi.port={jmx}"),
                    "-Dcom.sun.management.jmxremote.host=127.0.0.1".to_string(),
                    "-Djava.rmi.server.hostname=127.0.0.1".to_string(),
                    "-Dcom.sun.management.jmxremote.authenticate=false".to_string(),
                    "-Dcom.sun.management.jmxremote.ssl=false".to_string(),
                ]);
            }
            command.push(format!(
                "-Dlog4j2.configurationFile={}",
                self.state_dir().join("log4j2.properties").display()
            ));
            command.push("-cp".into());
            command.push(class_path.clone());
            command.push("kafka.Kafka".into());
            command.push(dir.join("server.properties").display().to_string());
            fs::write(dir.join("command"), command.join("\n") + "\n")
                .map_err(|e| format!("write command file: {e}"))?;
            let child = spawn_node(&dir, &command)?;
            children.push((n.id, child));
        }

        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            for (id, child) in &mut children {
                if let Ok(Some(status)) = child.try_wait() {
                    let tail = log_tail(&self.node_dir(*id).join("kafka.log"));
                    let _ = self.stop();
                    return Err(format!(
                        "broker: Kafka node {id} exited during start-up ({status}); log:\n{tail}"
                    ));
                }
            }
            let ready = nodes.iter().all(|n| {
                metadata_brokers(SocketAddr::from((Ipv4Addr::LOCALHOST, n.port)))
                    .is_ok_and(|c| c == nodes.len())
            });
            if ready {
                break;
            }
            if Instant::now() >= deadline {
                let tail = log_tail(&self.node_dir(nodes[0].id).join("kafka.log"));
                let _ = self.stop();
                return Err(format!(
                    "broker: Metadata did not list all {} broker(s) within {}s; node {} log:\n{tail}",
                    nodes.len(),
                    READY_TIMEOUT.as_secs(),
                    nodes[0].id
                ));
            }
            sleep(Duration::from_millis(100));
        }
        println!(
            "broker: Apache Kafka {KAFKA_VERSION} started at {} ({} node(s), KRaft; logs under {})",
            Kafka::bootstrap(&nodes),
            nodes.len(),
            self.state_dir().display()
        );
        println!(
            "broker: SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER unsecured; \
             sessions of {SASL_SESSION_MS} ms) at {}",
            Kafka::sasl_bootstrap(&nodes)
        );
        println!(
            "broker: SSL (TLS) at {} and MTLS (TLS, client certificate required) at {}; CA, \
             client certificate and key in {} (ca.pem, client.pem, client-key.pem)",
            Kafka::ssl_bootstrap(&nodes),
            Kafka::mtls_bootstrap(&nodes),
            self.tls_dir().display()
        );
        if self.jmx {
            println!(
                "broker: JMX (the broker's metrics; no authentication, loopback only) at {}",
                Kafka::jmx_addresses(&nodes)
            );
        }
        Ok((Started::Spawned, nodes))
    }

    fn pick_ports(&self, free_ports: bool) -> Result<Vec<Node>> {
        let mut nodes = Vec::new();
        // Listeners held open until every port is chosen, so the OS hands out distinct ones.
        let mut held = Vec::new();
        for i in 0..self.brokers {
            // Controller ports are the OS's choice: nobody dials them but the nodes.
            let (controller_port, lc) = free_port()?;
            let (relayed_port, lr) = free_port()?;
            let (relay_port, lp) = free_port()?;
            let (sasl_port, ls) = free_port()?;
            let (ssl_port, lt) = free_port()?;
            let (mtls_port, lm) = free_port()?;
            held.extend([lc, lr, lp, ls, lt, lm]);
            let jmx_port = if self.jmx {
                let (p, lj) = free_port()?;
                held.push(lj);
                Some(p)
            } else {
                None
            };
            let port = if free_ports && i > 0 {
                let (a, la) = free_port()?;
                held.push(la);
                a
            } else {
                let i16 = u16::try_from(i).map_err(|_| "too many brokers".to_string())?;
                self.port + i16
            };
            nodes.push(Node {
                id: i + 1,
                port,
                controller_port,
                relayed_port,
                relay_port,
                sasl_port: Some(sasl_port),
                ssl_port: Some(ssl_port),
                mtls_port: Some(mtls_port),
                jmx_port,
            });
        }
        Ok(nodes)
    }

    /// Stops every node of the cluster (SIGTERM, then SIGKILL after 20 s). Succeeds when
    /// nothing runs.
    pub fn stop(&self) -> Result<()> {
        let nodes = self.nodes();
        if nodes.is_empty() {
            return Ok(());
        }
        let pids: Vec<u32> = nodes
            .iter()
            .filter_map(|n| read_pid(&self.node_dir(n.id)))
            .filter(|p| is_kafka(*p))
            .collect();
        for &pid in &pids {
            signal(pid, "TERM")?;
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        for &pid in &pids {
            while is_alive(pid) {
                if Instant::now() >= deadline {
                    signal(pid, "KILL")?;
                    sleep(Duration::from_millis(200));
                    break;
                }
                sleep(Duration::from_millis(50));
            }
        }
        for n in &nodes {
            let _ = fs::remove_file(self.node_dir(n.id).join("kafka.pid"));
        }
        if !pids.is_empty() {
            println!("broker: Apache Kafka stopped ({} node(s))", pids.len());
        }
        Ok(())
    }

    /// Prints `running <bootstrap>` or `stopped`. Returns whether it runs.
    pub fn status(&self) -> bool {
        let nodes = self.nodes();
        let live: Vec<Node> = nodes
            .iter()
            .copied()
            .filter(|n| read_pid(&self.node_dir(n.id)).is_some_and(is_kafka))
            .collect();
        if live.is_empty() {
            return false;
        }
        println!(
            "running Apache Kafka {KAFKA_VERSION} {} ({} of {} node(s) alive)",
            Kafka::bootstrap(&nodes),
            live.len(),
            nodes.len()
        );
        true
    }

    /// Removes the cluster's folder (logs and data); call after a successful stop.
    pub fn forget(&self) {
        let _ = fs::remove_dir_all(self.state_dir());
    }
}

/// Spawns one node from its command line, in its own process group, logging to `kafka.log`,
/// and records its pid.
fn spawn_node(dir: &Path, command: &[String]) -> Result<Child> {
    let log = fs::File::create(dir.join("kafka.log")).map_err(|e| format!("create log: {e}"))?;
    let log_err = log.try_clone().map_err(|e| format!("log file: {e}"))?;
    let child = Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // Own process group: a Ctrl-C meant for the caller does not reach the broker.
        .process_group(0)
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", command[0]))?;
    fs::write(dir.join("kafka.pid"), format!("{}\n", child.id()))
        .map_err(|e| format!("write pid file: {e}"))?;
    Ok(child)
}

/// The node's `server.properties`: a combined broker and controller on 127.0.0.1, with the
/// replication settings of a real cluster of this size (replication factor 3 and
/// `min.insync.replicas=2` on three nodes), test-friendly timings, and the SASL_PLAINTEXT, SSL
/// and MTLS listeners (see the module's documentation) with the certificates in `tls`.
fn server_properties(
    node: &Node,
    nodes: &[Node],
    dir: &Path,
    tls: &Path,
    telemetry: bool,
) -> String {
    let voters = nodes
        .iter()
        .map(|n| format!("{}@127.0.0.1:{}", n.id, n.controller_port))
        .collect::<Vec<_>>()
        .join(",");
    let rf = nodes.len().min(3);
    let min_isr = if rf >= 3 { 2 } else { 1 };
    format!(
        "# Written by `cargo xtask broker start --kafka`; see xtask/src/kafka.rs.
process.roles=broker,controller
node.id={id}
controller.quorum.voters={voters}
# RELAYED: for a test's fault relay, which listens on the advertised port and forwards here.
# SASL_PLAINTEXT: the SASL tests' listener. SSL and MTLS: the TLS tests' listeners.
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport},RELAYED://127.0.0.1:{relayed},SASL_PLAINTEXT://127.0.0.1:{sasl},SSL://127.0.0.1:{ssl},MTLS://127.0.0.1:{mtls}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},RELAYED://127.0.0.1:{relay},SASL_PLAINTEXT://127.0.0.1:{sasl},SSL://127.0.0.1:{ssl},MTLS://127.0.0.1:{mtls}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,RELAYED:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,MTLS:SSL
# TLS with PEM stores (KIP-651): the key store file holds the unencrypted PKCS#8 key, then the
# certificate for 127.0.0.1 and localhost; MTLS trusts the test CA and requires a client
# certificate signed by it.
listener.name.ssl.ssl.keystore.type=PEM
listener.name.ssl.ssl.keystore.location={keystore}
listener.name.mtls.ssl.keystore.type=PEM
listener.name.mtls.ssl.keystore.location={keystore}
listener.name.mtls.ssl.truststore.type=PEM
listener.name.mtls.ssl.truststore.location={ca}
listener.name.mtls.ssl.client.auth=required
# PLAIN users come from the JAAS configuration; SCRAM users from the cluster's metadata, where the
# tests put them (AlterUserScramCredentials on the PLAINTEXT listener; there is no authorizer).
listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
# OAUTHBEARER with Kafka's default server callback, the unsecured validator: an `alg: none` JWT
# with a `sub` and an unexpired `exp` is accepted (the session ends at `exp` at the latest).
listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"kafkit-broker\";
# KIP-368: a session lasts this long; the client re-authenticates within it, or the connection is
# closed at its next request.
listener.name.sasl_plaintext.connections.max.reauth.ms={sasl_session_ms}
# Delegation tokens (KIP-48): the key that signs them; a test-only secret. Tokens are created,
# renewed and described over the SASL_PLAINTEXT listener (PLAINTEXT connections are refused).
delegation.token.secret.key=kafkit-test-delegation-token-secret
# Two log dirs (JBOD, KIP-858) on the same volume, so the admin tests can move a replica from one
# to the other (AlterReplicaLogDirs, KIP-113); the metadata log lives in the first.
log.dirs={data},{data2}
num.partitions=1
default.replication.factor={rf}
min.insync.replicas={min_isr}
offsets.topic.replication.factor={rf}
offsets.topic.num.partitions=10
transaction.state.log.replication.factor={rf}
transaction.state.log.min.isr={min_isr}
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor={rf}
share.coordinator.state.topic.min.isr={min_isr}
# A test's group starts at once; a real cluster waits 3 s for more members.
group.initial.rebalance.delay.ms=0
# A SIGKILLed node is fenced after 4 s (the default waits 9 s for its heartbeats).
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=4000
# Timed-out transactions are aborted within a second (the default looks every 10 s).
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
# Small machines: fewer threads than a production broker's defaults.
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
{telemetry}",
        id = node.id,
        port = node.port,
        cport = node.controller_port,
        relayed = node.relayed_port,
        relay = node.relay_port,
        sasl = node.sasl_port.unwrap_or_default(),
        ssl = node.ssl_port.unwrap_or_default(),
        mtls = node.mtls_port.unwrap_or_default(),
        keystore = tls.join(crate::kafka_tls::SERVER_KEYSTORE).display(),
        ca = tls.join(crate::kafka_tls::CA).display(),
        plain_users = PLAIN_USERS
            .iter()
            .map(|(user, password)| format!("user_{user}=\"{password}\""))
            .collect::<Vec<_>>()
            .join(" "),
        sasl_session_ms = SASL_SESSION_MS,
        data = dir.join("data").display(),
        data2 = dir.join("data2").display(),
        telemetry = if telemetry {
            telemetry_properties(dir)
        } else {
            String::new()
        },
    )
}

/// The KIP-714 lines of `server.properties`: the receiver among the metric reporters (without
/// one the broker serves no GetTelemetrySubscriptions or PushTelemetry), and its file.
fn telemetry_properties(dir: &Path) -> String {
    format!(
        "# KIP-714: the tests' telemetry receiver (xtask/src/kafka_telemetry.rs) makes the broker
# serve client metrics, and appends every push it receives to this file as a JSON line.
metric.reporters={class}
{property}={file}
",
        class = crate::kafka_telemetry::CLASS,
        property = crate::kafka_telemetry::FILE_PROPERTY,
        file = crate::kafka_telemetry::push_log(dir).display(),
    )
}

/// log4j 2 configuration of every node: INFO to stdout (the node's `kafka.log`), the chattiest
/// loggers at WARN, and the fetch sessions (KIP-227) at TRACE: each session made, each
/// incremental request with the partitions it added, updated and forgot, each session removed,
/// which tests read back (`integration_tests::kafka_log`).
const LOG4J2: &str = "status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.fetch.name = org.apache.kafka.server.FetchManager
logger.fetch.level = TRACE
logger.sessions.name = org.apache.kafka.server.FetchSessionCacheShard
logger.sessions.level = DEBUG
";

/// A port column of the `cluster` file: absent (an older file) or 0 reads as `None`.
fn optional_port(column: Option<u64>) -> Option<u16> {
    column
        .and_then(|p| u16::try_from(p).ok())
        .filter(|&p| p != 0)
}

/// `127.0.0.1:<port>,...` of the listener `port` picks, for every node that has it.
fn listener_bootstrap(nodes: &[Node], port: impl Fn(&Node) -> Option<u16>) -> String {
    nodes
        .iter()
        .filter_map(port)
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `<lib>/*`: the JVM's wildcard class path of every jar in `lib`, then the KIP-714 receiver's
/// classes when there are some.
fn class_path(lib: &Path, telemetry: Option<&Path>) -> String {
    match telemetry {
        Some(classes) => format!("{}/*:{}", lib.display(), classes.display()),
        None => format!("{}/*", lib.display()),
    }
}

/// The `java` program: `$KAFKIT_JAVA`, else `java` on PATH; fails with what to install.
pub fn java() -> Result<String> {
    let java = std::env::var(JAVA_ENV).unwrap_or_else(|_| "java".to_string());
    match Command::new(&java)
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => Ok(java),
        _ => Err(format!(
            "Apache Kafka needs Java 17 or later: install a JDK (Debian: `apt-get install \
             openjdk-17-jdk-headless maven`) or set {JAVA_ENV} to a java program; `cargo xtask \
             broker start --tansu` runs the tansu broker instead"
        )),
    }
}

/// Whether Java and Maven are both on this machine (what `broker start` checks to choose Kafka).
pub fn available() -> bool {
    java().is_ok() && maven().is_ok()
}

/// The `mvn` program; fails with what to install.
pub fn maven() -> Result<String> {
    match Command::new("mvn")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => Ok("mvn".to_string()),
        _ => Err(
            "Apache Kafka is installed from Maven Central with Maven: install it (Debian: \
                  `apt-get install maven`), or start tansu with `cargo xtask broker start --tansu`"
                .to_string(),
        ),
    }
}

/// The folder of Kafka's jars, resolved from Maven Central into `target/tools/kafka-<version>/lib`
/// when missing (a scratch folder renamed when whole).
pub fn install() -> Result<PathBuf> {
    let tools = workspace_root().join("target").join("tools");
    let dir = tools.join(format!("kafka-{KAFKA_VERSION}"));
    let lib = dir.join("lib");
    let marker = lib.join(format!("kafka_2.13-{KAFKA_VERSION}.jar"));
    if marker.is_file() {
        return Ok(lib);
    }
    let mvn = maven()?;
    let scratch = tools.join(format!(".kafka-{KAFKA_VERSION}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch).map_err(|e| format!("create {}: {e}", scratch.display()))?;
    println!(
        "broker: resolving Apache Kafka {KAFKA_VERSION} from Maven Central into {} (once per \
         machine)",
        dir.display()
    );
    let pom = format!(
        r#"<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kafkit.tools</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{KAFKA_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{LOG4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
"#
    );
    fs::write(scratch.join("pom.xml"), pom).map_err(|e| format!("write pom.xml: {e}"))?;
    let out = Command::new(&mvn)
        .current_dir(&scratch)
        .args(["-B", "-q", "dependency:copy-dependencies"])
        .args(["-DoutputDirectory=lib", "-DincludeScope=runtime"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run mvn: {e}"))?;
    if !out.status.success()
        || !scratch
            .join("lib")
            .join(marker.file_name().unwrap_or_default())
            .is_file()
    {
        let _ = fs::remove_dir_all(&scratch);
        return Err(format!(
            "broker: Maven could not resolve org.apache.kafka:kafka_2.13:{KAFKA_VERSION} ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let _ = fs::remove_dir_all(&dir);
    match fs::rename(&scratch, &dir) {
        Ok(()) => Ok(lib),
        // Another run installed it meanwhile.
        Err(_) if marker.is_file() => {
            let _ = fs::remove_dir_all(&scratch);
            Ok(lib)
        }
        Err(e) => Err(format!("rename into {}: {e}", dir.display())),
    }
}

fn read_pid(dir: &Path) -> Option<u32> {
    fs::read_to_string(dir.join("kafka.pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether `pid` is a live process whose command line runs `kafka.Kafka`.
fn is_kafka(pid: u32) -> bool {
    is_alive(pid)
        && fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains("kafka.Kafka"))
            .unwrap_or(false)
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// A free TCP port on 127.0.0.1 and the listener holding it (drop it to free the port).
fn free_port() -> Result<(u16, std::net::TcpListener)> {
    let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("find a free port: {e}"))?;
    let port = l
        .local_addr()
        .map_err(|e| format!("find a free port: {e}"))?
        .port();
    Ok((port, l))
}

/// Sends Metadata v4 for no topic (an empty array: brokers only) and returns how many brokers
/// the answer lists. Kafka answers `UNSUPPORTED_VERSION` before it serves Metadata, so the
/// version is first checked with [`probe`].
///
/// Request v4: header v1 (api_key INT16 = 3, api_version INT16, correlation_id INT32,
/// client_id STRING), topics ARRAY (empty), allow_auto_topic_creation BOOLEAN. Response v4:
/// correlation_id INT32, throttle_time_ms INT32, brokers ARRAY of (node_id INT32, host STRING,
/// port INT32, rack NULLABLE_STRING), ...
pub fn metadata_brokers(addr: SocketAddr) -> Result<usize> {
    const VERSION: i16 = 4;
    const CORRELATION_ID: i32 = 0x6b61_666c;
    const CLIENT_ID: &[u8] = b"xtask";
    let apis = probe(addr)?;
    if !apis
        .iter()
        .any(|a| a.api_key == 3 && (a.min_version..=a.max_version).contains(&VERSION))
    {
        return Err("the broker does not serve Metadata v4".into());
    }
    let mut s =
        TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(PROBE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(PROBE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut body = Vec::with_capacity(32);
    body.extend_from_slice(&3i16.to_be_bytes());
    body.extend_from_slice(&VERSION.to_be_bytes());
    body.extend_from_slice(&CORRELATION_ID.to_be_bytes());
    body.extend_from_slice(&(CLIENT_ID.len() as i16).to_be_bytes());
    body.extend_from_slice(CLIENT_ID);
    body.extend_from_slice(&0i32.to_be_bytes()); // topics: empty array
    body.push(0); // allow_auto_topic_creation: false
    let mut req = (body.len() as i32).to_be_bytes().to_vec();
    req.extend_from_slice(&body);
    s.write_all(&req).map_err(|e| format!("write: {e}"))?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len)
        .map_err(|e| format!("read size: {e}"))?;
    let len = usize::try_from(i32::from_be_bytes(len))
        .ok()
        .filter(|l| (12..=MAX_PROBE_RESPONSE).contains(l))
        .ok_or("bad Metadata response size")?;
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf)
        .map_err(|e| format!("read body: {e}"))?;
    let mut r = Reader { buf: &buf, at: 0 };
    if r.i32()? != CORRELATION_ID {
        return Err("Metadata correlation id mismatch".into());
    }
    let _throttle = r.i32()?;
    let count = r.i32()?;
    let count = usize::try_from(count).map_err(|_| "negative broker count".to_string())?;
    for _ in 0..count {
        let _node_id = r.i32()?;
        r.string()?;
        let _port = r.i32()?;
        r.string()?;
    }
    Ok(count)
}

/// A bounds-checked reader of big-endian Kafka primitives.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or("Metadata answer cut short")?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn i32(&mut self) -> Result<i32> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Skips a STRING or NULLABLE_STRING (length -1 is null).
    fn string(&mut self) -> Result<()> {
        let b = self.take(2)?;
        let n = i16::from_be_bytes([b[0], b[1]]);
        if n > 0 {
            self.take(n as usize)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every node's properties name the KIP-714 receiver and its file in the node's folder when
    /// it was built, and neither when it was not; the class path ends with its classes.
    #[test]
    fn nodes_get_the_telemetry_receiver() {
        let node = Node {
            id: 1,
            port: 1,
            controller_port: 2,
            relayed_port: 3,
            relay_port: 4,
            sasl_port: Some(5),
            ssl_port: Some(6),
            mtls_port: Some(7),
            jmx_port: Some(8),
        };
        let dir = Path::new("/state/node-1");
        let with = server_properties(&node, &[node], dir, Path::new("/tls"), true);
        assert!(with.contains("\nmetric.reporters=kafkit.broker.TelemetryPushLog\n"));
        assert!(
            with.contains("\nkafkit.telemetry.push.log=/state/node-1/telemetry/pushes.jsonl\n")
        );
        let without = server_properties(&node, &[node], dir, Path::new("/tls"), false);
        assert!(!without.contains("metric.reporters") && !without.contains("push.log"));
        assert_eq!(
            class_path(Path::new("/lib"), Some(Path::new("/t/classes"))),
            "/lib/*:/t/classes"
        );
        assert_eq!(class_path(Path::new("/lib"), None), "/lib/*");
    }

    /// The id of port 1 (`kafkit-test-0001`) is the one every cluster had before; ids of other
    /// ports differ and are 22 base64url characters (16 bytes).
    #[test]
    fn cluster_ids_differ_per_port() {
        assert_eq!(cluster_id(1), "a2Fma2l0LXRlc3QtMDAwMQ");
        assert_ne!(cluster_id(19092), cluster_id(19192));
        assert_eq!(cluster_id(29392).len(), 22);
    }
}
