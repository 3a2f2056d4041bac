//! The three-node Apache Kafka cluster that `cargo xtask test` starts (`xtask/src/kafka.rs`):
//! where it is, and the faults a test may cause on it, a node killed with SIGKILL and started
//! again on its data, as an operator's crash and restart would.
//!
//! Each node is a combined broker and controller; the three controllers form one KRaft quorum,
//! so any one node may die (the quorum's leader included) and two still elect. Topics get three
//! replicas and `min.insync.replicas=2`.
//!
//! The cluster's folder (`KAFKIT_KAFKA3_STATE`) holds `cluster` (a line per node: id, client
//! port, controller port) and `node-<id>/` with `kafka.pid`, `kafka.log` and `command` (the
//! node's Java command line, one argument per line). A restarted node's pid replaces the old one,
//! so `cargo xtask test` stops whatever runs at the end.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use kafkit_protocol::messages::DescribeQuorumRequest;
use kafkit_protocol::messages::describe_quorum_request::{PartitionData, TopicData};

/// Environment variable naming the three-node cluster's state folder, set by `cargo xtask test`.
pub const KAFKA3_STATE_ENV: &str = "KAFKIT_KAFKA3_STATE";

/// Environment variable holding the three-node cluster's bootstrap list, set by
/// `cargo xtask test`.
pub const KAFKA3_BOOTSTRAP_ENV: &str = "KAFKIT_KAFKA3_BOOTSTRAP";

/// How long a killed node may take to vanish, and a restarted one to answer.
const NODE_TIMEOUT: Duration = Duration::from_secs(60);

/// One node of the cluster.
#[derive(Clone, Debug)]
pub struct KafkaNode {
    /// `node.id`.
    pub id: i32,
    /// Its client port on 127.0.0.1.
    pub port: u16,
    /// Its RELAYED listener's port (the listener itself), where a test's relay forwards.
    pub relayed_port: u16,
    /// The port its RELAYED listener advertises (a test's relay binds it).
    pub relay_port: u16,
    dir: PathBuf,
}

impl KafkaNode {
    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.dir.join("kafka.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

/// One test at a time on the cluster, across every module of the test binary: a node killed by
/// one must not fail another.
static EXCLUSIVE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The three-node cluster, held by one test at a time. The nodes it restarted are its
/// children, reaped when they die. Dropped, it starts again every node it left dead (a test that
/// failed between a kill and its restart), so the next test finds the cluster whole.
#[derive(Debug)]
pub struct KafkaCluster {
    nodes: Vec<KafkaNode>,
    children: Mutex<Vec<Child>>,
    _exclusive: tokio::sync::MutexGuard<'static, ()>,
}

impl KafkaCluster {
    /// The cluster `cargo xtask test` started, once no other test holds it.
    ///
    /// # Panics
    /// When [`KAFKA3_STATE_ENV`] is unset or its folder lists no node (the test fails, it is not
    /// skipped), with a message saying how to start one.
    pub async fn acquire() -> KafkaCluster {
        let exclusive = EXCLUSIVE.lock().await;
        let state = std::env::var_os(KAFKA3_STATE_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                panic!(
                    "this test needs the three-node Apache Kafka cluster: run it via `cargo \
                     xtask test`, or start one with `cargo xtask broker start --kafka --brokers \
                     3 --port 19092` and set {KAFKA3_STATE_ENV}=.broker/kafka-19092"
                )
            });
        let table = std::fs::read_to_string(state.join("cluster"))
            .unwrap_or_else(|e| panic!("{}: {e}", state.join("cluster").display()));
        let nodes: Vec<KafkaNode> = table
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let id: i32 = w.next()?.parse().ok()?;
                let port: u16 = w.next()?.parse().ok()?;
                let _controller: u16 = w.next()?.parse().ok()?;
                let relayed_port: u16 = w.next()?.parse().ok()?;
                let relay_port: u16 = w.next()?.parse().ok()?;
                Some(KafkaNode {
                    id,
                    port,
                    relayed_port,
                    relay_port,
                    dir: state.join(format!("node-{id}")),
                })
            })
            .collect();
        assert!(!nodes.is_empty(), "{}: no node", state.display());
        KafkaCluster {
            nodes,
            children: Mutex::new(Vec::new()),
            _exclusive: exclusive,
        }
    }

    /// Every node's address, comma-separated.
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(KafkaNode::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The nodes, in id order.
    pub fn nodes(&self) -> &[KafkaNode] {
        &self.nodes
    }

    fn node(&self, id: i32) -> &KafkaNode {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// Whether node `id`'s process runs (not a zombie).
    pub fn is_alive(&self, id: i32) -> bool {
        self.reap();
        self.node(id).pid().is_some_and(alive)
    }

    /// Kills node `id` with SIGKILL (no controlled shutdown, no flush) and waits until its
    /// process is gone.
    ///
    /// # Panics
    /// When the node does not run, or outlives the signal by 60 s.
    pub async fn kill(&self, id: i32) {
        let pid = self
            .node(id)
            .pid()
            .filter(|p| alive(*p))
            .unwrap_or_else(|| panic!("node {id} does not run"));
        let status = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -KILL {pid}: {status}");
        let deadline = tokio::time::Instant::now() + NODE_TIMEOUT;
        while {
            self.reap();
            alive(pid)
        } {
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {id} outlived SIGKILL"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts node `id` again on its data (its recorded command line; the log is appended to) and
    /// waits until it answers ApiVersions.
    ///
    /// # Panics
    /// When it runs already, cannot be spawned, or does not answer within 60 s.
    pub async fn restart(&self, id: i32) {
        assert!(!self.is_alive(id), "node {id} runs already");
        self.spawn(id);
        let node = self.node(id);
        let deadline = tokio::time::Instant::now() + NODE_TIMEOUT;
        loop {
            let dialed = kafkit::Dialer::builder()
                .client_id("kafka-cluster-restart")
                .build()
                .dial(&node.addr())
                .await;
            if dialed.is_ok() {
                return;
            }
            assert!(self.is_alive(id), "node {id} died while starting");
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {id} did not answer within {NODE_TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Spawns node `id` from its recorded command line, its output appended to its log, and
    /// records its pid.
    fn spawn(&self, id: i32) {
        let node = self.node(id);
        let command = std::fs::read_to_string(node.dir.join("command")).expect("command file");
        let args: Vec<&str> = command.lines().filter(|l| !l.is_empty()).collect();
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(node.dir.join("kafka.log"))
            .expect("log file");
        let err = log.try_clone().expect("log file");
        let child = Command::new(args[0])
            .args(&args[1..])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("restart node {id}: {e}"));
        std::fs::write(node.dir.join("kafka.pid"), format!("{}\n", child.id())).expect("pid");
        self.children
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(child);
    }

    /// The node whose controller leads the KRaft quorum (DescribeQuorum on
    /// `__cluster_metadata`, KIP-595), asked through `transport`.
    ///
    /// # Panics
    /// When no node answers with a leader.
    pub async fn quorum_leader(&self, transport: &kafkit::Transport) -> i32 {
        let mut request = DescribeQuorumRequest::default();
        let mut topic = TopicData::default();
        topic.topic_name = "__cluster_metadata".into();
        topic.partitions = vec![PartitionData::default()];
        request.topics = vec![topic];
        let answer = transport.round_trip(request).await.expect("DescribeQuorum");
        assert!(answer.error_code.is_ok(), "{answer:?}");
        let leader = answer.topics[0].partitions[0].leader_id;
        assert!(leader >= 0, "{answer:?}");
        leader
    }

    /// Waits until every partition of `topic` has a leader and all its replicas in sync, as
    /// the metadata of every live node says.
    ///
    /// # Panics
    /// When 60 s pass first.
    pub async fn wait_in_sync(&self, topic: &str, partitions: i32) {
        let deadline = tokio::time::Instant::now() + NODE_TIMEOUT;
        for node in &self.nodes {
            let conn = crate::dial(&node.addr(), "kafka-cluster-isr").await;
            loop {
                let ready = conn.metadata(Some(&[topic])).await.is_ok_and(|md| {
                    md.topic(topic).is_some_and(|t| {
                        t.partitions.len() == usize::try_from(partitions).unwrap_or(0)
                            && t.partitions.iter().all(|p| {
                                p.leader_id >= 0
                                    && !p.replicas.is_empty()
                                    && p.isr.len() == p.replicas.len()
                            })
                    })
                });
                if ready {
                    break;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{topic}: replicas not in sync within {NODE_TIMEOUT:?} (node {})",
                    node.id
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Reaps the restarted nodes that died.
    fn reap(&self) {
        let mut children = self
            .children
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        children.retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_))));
    }
}

impl Drop for KafkaCluster {
    fn drop(&mut self) {
        let dead: Vec<i32> = self
            .nodes
            .iter()
            .map(|n| n.id)
            .filter(|&id| !self.is_alive(id))
            .collect();
        for id in dead {
            eprintln!("kafka_cluster: node {id} was left dead; starting it again");
            self.spawn(id);
        }
    }
}

/// Whether `pid` runs and is not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}
