//! [`GroupReaderBuilder`]: every setting of a [`GroupReader`] (a consumer group member), with
//! its default, unit and range.
//!
//! Time spans are [`Duration`]s, sent in whole milliseconds. The ranges are checked by
//! [`GroupReaderBuilder::build`] (`Config::validate`, in this file), which names the setting in
//! an [`Error::Config`]. The fetching settings are the [`ReaderBuilder`]'s (see
//! [`GroupReaderBuilder::reader`]).
//!
//! | Setting | Default | Unit, range | Java / librdkafka name | What it does |
//! |---|---|---|---|---|
//! | `group_id` | (required) | non-empty | `group.id` | The consumer group. |
//! | `group_protocol` | classic | classic, consumer | `group.protocol` | `Classic`: JoinGroup / SyncGroup / Heartbeat with a client-side assignor; `Consumer`: KIP-848 ConsumerGroupHeartbeat with a server-side assignor (falls back to classic, with a typed error, when the coordinator lacks it). |
//! | `group_instance_id` | none | non-empty | `group.instance.id` | Static membership (KIP-345): a restart within `session_timeout` keeps the assignment without a rebalance; the member does not leave the group when closed. |
//! | `session_timeout` | 45 s | `Duration`, 1 ms..=2^31-1 ms | `session.timeout.ms` | How long the coordinator waits for a heartbeat before it drops the member (classic). Also: no heartbeat answered for this long, and the member counts its partitions as lost. |
//! | `heartbeat_interval` | 3 s | `Duration`, 1 ms..< `session_timeout` | `heartbeat.interval.ms` | Time between two heartbeats (classic; with KIP-848 the coordinator's interval is used). |
//! | `rebalance_timeout` | `max_poll_interval` | `Duration`, 1 ms..=2^31-1 ms | (Java sends `max.poll.interval.ms`) | How long the coordinator waits for every member to rejoin during a rebalance (JoinGroup's `rebalance_timeout_ms`, KIP-848's `RebalanceTimeoutMs`); also the longest time the member waits for the application to finish a revocation. |
//! | `max_poll_interval` | 300 s | `Duration`, 1 ms..=2^31-1 ms | `max.poll.interval.ms` | The application must poll (the `Stream` or `next_batch`) at least this often; past it the member leaves the group, reports its partitions lost and `GroupError::MaxPollIntervalExceeded`, and rejoins on the next poll. |
//! | `enable_auto_commit` | true | | `enable.auto.commit` | Commit what the application consumed every `auto_commit_interval`, on revocation and on close. |
//! | `enable_auto_offset_store` | true | | `enable.auto.offset.store` (librdkafka) | true: what a commit sends for a partition is the application's position (after the last record handed out). false: only what the application stored with `GroupReader::store_offset` / `store_offsets` is committed, by auto-commit, `commit` and on revocation (librdkafka's at-least-once pattern: store a record's offset once it is processed). |
//! | `auto_offset_reset` | (the Reader's: latest) | earliest, latest, none | `auto.offset.reset` | Where a partition without a committed offset starts; set here or on the `ReaderBuilder` (this one wins). |
//! | `auto_commit_interval` | 5 s | `Duration`, 1 ms..=1 day | `auto.commit.interval.ms` | Time between two automatic commits. |
//! | `partition_assignment_strategy` | range, cooperative-sticky | non-empty list | `partition.assignment.strategy` | The assignors offered in JoinGroup, in order of preference (classic); the coordinator picks one every member offers. All must be eager, or all cooperative (KIP-429), except in an eager -> cooperative upgrade, where the protocol is the chosen assignor's. |
//! | `group_remote_assignor` | none (the broker's default) | `uniform`, `range` | `group.remote.assignor` | The server-side assignor (KIP-848). |
//! | `subscription` | (required) | topic names, or a regular expression | `subscribe(topics)` / `subscribe(Pattern)` | What the member reads. A pattern matches whole topic names (Java `Pattern.matches`), internal topics excluded; with KIP-848 it is sent to the coordinator (RE2J syntax). |
//! | `metadata_max_age` | 5 min | `Duration`, 100 ms..=1 day | `metadata.max.age.ms` / `topic.metadata.refresh.interval.ms` | How often the member looks for partitions added to its topics and for new topics matching its pattern (a change makes it rejoin). |
//! | `require_stable_offsets` | true | | `require.stable.offsets` (Java: always on) | OffsetFetch with `require_stable` (KIP-447): wait for pending transactional commits before reading committed offsets, so a new owner never reads the offset a stalled member's pending TxnOffsetCommit is about to replace. A coordinator below OffsetFetch v7 is asked without it, as Java does. |
//! | `retry_backoff` | 100 ms | `Duration`, 1 ms..=1 h | `retry.backoff.ms` | First wait after a failed group request; doubles per failure up to 1 s (KIP-580). |
//! | `close_timeout` | 30 s | `Duration`, 0..=1 day | (Java `close()`'s default) | The longest `GroupReader::close` takes as a whole: the pending step, the closing auto-commit, the revoked callback and the LeaveGroup; past it the member stops without waiting further. |
//! | `enable_metrics_push` | true | bool | `enable.metrics.push` | Pushes the member's metrics to the cluster (KIP-714), labelled with the group, instance and member ids. |

use std::sync::Arc;
use std::time::Duration;

use kafkit_group_balancer::{
    CooperativeStickyAssignor, GroupBalancer, RangeAssignor, RebalanceProtocol,
};

use super::subscription::Subscription;
use super::{GroupReader, RebalanceListener};
use crate::error::{Error, Result};
use crate::reader::{AutoOffsetReset, ReaderBuilder};
use crate::transport::Transport;

/// Which group protocol a member speaks (Java `group.protocol`, KIP-848).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum GroupProtocol {
    /// JoinGroup / SyncGroup / Heartbeat / LeaveGroup, the leader running the assignor.
    #[default]
    Classic,
    /// ConsumerGroupHeartbeat (KIP-848): the coordinator assigns, incrementally. A
    /// coordinator that does not offer it makes the member report
    /// [`GroupError::ProtocolFallback`](crate::GroupError::ProtocolFallback) and go on with
    /// the classic protocol.
    Consumer,
    /// The consumer protocol where the coordinator offers ConsumerGroupHeartbeat (its
    /// ApiVersions answer: Apache Kafka 4.0+), else the classic protocol, without reporting
    /// the choice as an error. Not in Java (which has `classic` and `consumer` only); the
    /// settings of both protocols apply ([`GroupReaderBuilder::group_remote_assignor`] and
    /// [`GroupReaderBuilder::partition_assignment_strategy`]).
    /// [`GroupStats::group_protocol`](crate::GroupStats::group_protocol) says which one runs.
    Auto,
}

/// What closing a [`GroupReader`] does with its group membership (KIP-1092, Java
/// `CloseOptions.GroupMembershipOperation`).
///
/// | | dynamic member | static member (`group_instance_id`) |
/// |---|---|---|
/// | `Default` | leaves (LeaveGroup; KIP-848 epoch -1) | stays until its session times out (KIP-848: epoch -2) |
/// | `LeaveGroup` | leaves | leaves for good (LeaveGroup v3+ with its instance id; KIP-848 epoch -1) |
/// | `RemainInGroup` | stays until its session times out (nothing sent) | as `Default` |
///
/// A member that stays keeps its partitions until the coordinator times it out, so the
/// group does not rebalance if the member comes back within the session timeout (a static
/// member with the same instance id; a KIP-848 dynamic member only by joining anew).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum GroupMembershipOperation {
    /// Static members stay, dynamic members leave (what `close()` has always done).
    #[default]
    Default,
    /// Every member leaves the group, static ones too.
    LeaveGroup,
    /// No member sends a leave (a static KIP-848 member sends its epoch -2, "back soon").
    RemainInGroup,
}

/// How [`GroupReader::close_with`] closes a member (KIP-1092, Java `CloseOptions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CloseOptions {
    /// What happens to the membership (default: [`GroupMembershipOperation::Default`]).
    pub group_membership_operation: GroupMembershipOperation,
    /// The longest the close takes as a whole; `None`: the member's
    /// [`GroupReaderBuilder::close_timeout`] (30 s by default).
    pub timeout: Option<Duration>,
}

impl CloseOptions {
    /// The defaults: [`GroupMembershipOperation::Default`], the member's `close_timeout`.
    pub fn new() -> Self {
        CloseOptions::default()
    }

    /// Sets what happens to the membership (Java `CloseOptions.groupMembershipOperation`).
    pub fn group_membership_operation(mut self, op: GroupMembershipOperation) -> Self {
        self.group_membership_operation = op;
        self
    }

    /// Sets the longest the close takes (Java `CloseOptions.timeout`).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// The settings a [`GroupReader`] runs with (validated).
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) group_id: String,
    pub(crate) group_protocol: GroupProtocol,
    pub(crate) group_instance_id: Option<String>,
    pub(crate) session_timeout: Duration,
    pub(crate) heartbeat_interval: Duration,
    /// `None`: `max_poll_interval` (see [`Config::rebalance_timeout`]).
    pub(crate) rebalance_timeout: Option<Duration>,
    pub(crate) max_poll_interval: Duration,
    pub(crate) enable_auto_commit: bool,
    pub(crate) enable_auto_offset_store: bool,
    pub(crate) auto_commit_interval: Duration,
    pub(crate) assignors: Vec<Arc<dyn GroupBalancer>>,
    pub(crate) group_remote_assignor: Option<String>,
    pub(crate) subscription: Option<Subscription>,
    pub(crate) metadata_max_age: Duration,
    pub(crate) require_stable_offsets: bool,
    pub(crate) retry_backoff: Duration,
    pub(crate) close_timeout: Duration,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.assignors.iter().map(|a| a.protocol_name()).collect();
        f.debug_struct("Config")
            .field("group_id", &self.group_id)
            .field("group_protocol", &self.group_protocol)
            .field("group_instance_id", &self.group_instance_id)
            .field("session_timeout", &self.session_timeout)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("rebalance_timeout", &self.rebalance_timeout)
            .field("max_poll_interval", &self.max_poll_interval)
            .field("enable_auto_commit", &self.enable_auto_commit)
            .field("enable_auto_offset_store", &self.enable_auto_offset_store)
            .field("auto_commit_interval", &self.auto_commit_interval)
            .field("partition_assignment_strategy", &names)
            .field("group_remote_assignor", &self.group_remote_assignor)
            .field("subscription", &self.subscription)
            .field("metadata_max_age", &self.metadata_max_age)
            .field("require_stable_offsets", &self.require_stable_offsets)
            .field("retry_backoff", &self.retry_backoff)
            .field("close_timeout", &self.close_timeout)
            .finish()
    }
}

impl Config {
    fn new(group_id: String) -> Self {
        Config {
            group_id,
            group_protocol: GroupProtocol::Classic,
            group_instance_id: None,
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(3),
            rebalance_timeout: None,
            max_poll_interval: Duration::from_secs(300),
            enable_auto_commit: true,
            enable_auto_offset_store: true,
            auto_commit_interval: Duration::from_secs(5),
            assignors: vec![
                Arc::new(RangeAssignor::new()),
                Arc::new(CooperativeStickyAssignor::new()),
            ],
            group_remote_assignor: None,
            subscription: None,
            metadata_max_age: Duration::from_secs(300),
            require_stable_offsets: true,
            retry_backoff: Duration::from_millis(100),
            close_timeout: Duration::from_secs(30),
        }
    }

    /// The rebalance timeout sent (JoinGroup, KIP-848's first heartbeat) and the longest wait
    /// for a revocation: as set, else `max_poll_interval`, which Java sends: an eager
    /// revocation waits for the application's next poll, and a member given less than that
    /// drops out of the rebalance.
    pub(crate) fn rebalance_timeout(&self) -> Duration {
        self.rebalance_timeout.unwrap_or(self.max_poll_interval)
    }

    /// The rebalance protocol: cooperative only when every offered assignor is (Java's rule:
    /// the highest protocol all assignors support).
    pub(crate) fn rebalance_protocol(&self) -> RebalanceProtocol {
        if self
            .assignors
            .iter()
            .all(|a| a.rebalance_protocol() == RebalanceProtocol::Cooperative)
        {
            RebalanceProtocol::Cooperative
        } else {
            RebalanceProtocol::Eager
        }
    }

    /// Checks every range of the settings table; the error names the setting.
    fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(Error::Config(format!("group: {what}")));
        let wire = |d: Duration| d >= Duration::from_millis(1) && d <= MAX_WIRE_SPAN;
        if self.group_id.is_empty() {
            return bad("group_id must not be empty");
        }
        if self.group_instance_id.as_deref() == Some("") {
            return bad("group_instance_id must not be empty");
        }
        if !wire(self.session_timeout) {
            return bad("session_timeout must be 1 ms..=2^31-1 ms");
        }
        if self.heartbeat_interval.is_zero() || self.heartbeat_interval >= self.session_timeout {
            return bad("heartbeat_interval must be at least 1 ms and below session_timeout");
        }
        if !wire(self.rebalance_timeout()) {
            return bad("rebalance_timeout must be 1 ms..=2^31-1 ms");
        }
        if !wire(self.max_poll_interval) {
            return bad("max_poll_interval must be 1 ms..=2^31-1 ms");
        }
        if self.auto_commit_interval.is_zero() || self.auto_commit_interval > DAY {
            return bad("auto_commit_interval must be 1 ms..=1 day");
        }
        if self.assignors.is_empty() {
            return bad("partition_assignment_strategy must name at least one assignor");
        }
        let mut names: Vec<&str> = self.assignors.iter().map(|a| a.protocol_name()).collect();
        names.sort_unstable();
        if names.windows(2).any(|w| w[0] == w[1]) {
            return bad("partition_assignment_strategy names an assignor twice");
        }
        match &self.subscription {
            None => return bad("subscription: call subscribe or subscribe_pattern"),
            Some(Subscription::Topics(t)) if t.is_empty() => {
                return bad("subscription: at least one topic");
            }
            Some(_) => {}
        }
        if self.metadata_max_age < Duration::from_millis(100) || self.metadata_max_age > DAY {
            return bad("metadata_max_age must be 100 ms..=1 day");
        }
        if self.close_timeout > DAY {
            return bad("close_timeout must be at most 1 day");
        }
        if self.retry_backoff.is_zero() || self.retry_backoff > Duration::from_secs(3600) {
            return bad("retry_backoff must be 1 ms..=1 h");
        }
        Ok(())
    }
}

/// The largest time span the protocol carries in milliseconds (`i32::MAX` ms, ~24.8 days).
const MAX_WIRE_SPAN: Duration = Duration::from_millis(i32::MAX as u64);
const DAY: Duration = Duration::from_secs(86_400);

/// Builds a [`GroupReader`]: a member of consumer group `group_id`. Every setting, with its
/// default, unit, range and Java / librdkafka name:
///
/// | Setting | Default | Unit, range | Java / librdkafka name |
/// |---|---|---|---|
/// | [`group_protocol`](Self::group_protocol) | classic | classic, consumer, auto | `group.protocol` |
/// | [`group_instance_id`](Self::group_instance_id) | none | | `group.instance.id` |
/// | [`session_timeout`](Self::session_timeout) | 45 s | 1 ms..=2^31-1 ms | `session.timeout.ms` |
/// | [`heartbeat_interval`](Self::heartbeat_interval) | 3 s | < `session_timeout` | `heartbeat.interval.ms` |
/// | [`rebalance_timeout`](Self::rebalance_timeout) | `max_poll_interval` | 1 ms..=2^31-1 ms | (JoinGroup `RebalanceTimeoutMs`; Java sends `max.poll.interval.ms`) |
/// | [`max_poll_interval`](Self::max_poll_interval) | 300 s | 1 ms..=2^31-1 ms | `max.poll.interval.ms` |
/// | [`enable_auto_commit`](Self::enable_auto_commit) | true | | `enable.auto.commit` |
/// | [`enable_auto_offset_store`](Self::enable_auto_offset_store) | true | | `enable.auto.offset.store` (librdkafka) |
/// | [`auto_offset_reset`](Self::auto_offset_reset) | the Reader's (latest) | earliest, latest, none | `auto.offset.reset` |
/// | [`auto_commit_interval`](Self::auto_commit_interval) | 5 s | 1 ms..=1 day | `auto.commit.interval.ms` |
/// | [`partition_assignment_strategy`](Self::partition_assignment_strategy) | range, cooperative-sticky | | `partition.assignment.strategy` |
/// | [`group_remote_assignor`](Self::group_remote_assignor) | broker default | uniform, range | `group.remote.assignor` |
/// | [`subscribe`](Self::subscribe) / [`subscribe_pattern`](Self::subscribe_pattern) | (required) | | `subscribe` |
/// | [`metadata_max_age`](Self::metadata_max_age) | 5 min | 100 ms..=1 day | `metadata.max.age.ms` |
/// | [`require_stable_offsets`](Self::require_stable_offsets) | true | | `require.stable.offsets` |
/// | [`retry_backoff`](Self::retry_backoff) | 100 ms | 1 ms..=1 h | `retry.backoff.ms` |
/// | [`close_timeout`](Self::close_timeout) | 30 s | 0..=1 day | (Java `close()`'s default) |
///
/// The table with a sentence per setting is at the top of `group/config.rs`. Fetching is the
/// [`ReaderBuilder`]'s: pass one with [`GroupReaderBuilder::reader`].
///
/// ```
/// use kafkit::{GroupProtocol, GroupReader, Transport};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), kafkit::Error> {
/// // The member's task starts on the current tokio runtime and joins in the background.
/// let transport = Transport::builder(["127.0.0.1:9092"]).build()?;
/// let member = GroupReader::builder(transport.clone(), "orders-app")
///     .subscribe(["orders"])
///     .session_timeout(Duration::from_secs(10))
///     .heartbeat_interval(Duration::from_secs(1))
///     .build()?;
/// assert!(member.assignment().is_empty());
/// // A subscription is required.
/// assert!(GroupReader::builder(transport, "g").group_protocol(GroupProtocol::Consumer).build().is_err());
/// # Ok(())
/// # }
/// ```
#[must_use]
pub struct GroupReaderBuilder {
    transport: Transport,
    reader: Option<ReaderBuilder>,
    /// Set on this builder: overrides the Reader builder's.
    auto_offset_reset: Option<AutoOffsetReset>,
    listener: Option<Arc<dyn RebalanceListener>>,
    config: Config,
    /// Per-record process spans, handed to the Reader's with the group's name.
    process_spans: bool,
    on_traceparent: Option<crate::ops::otel::TraceParentHook>,
    enable_metrics_push: bool,
}

impl std::fmt::Debug for GroupReaderBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupReaderBuilder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl GroupReaderBuilder {
    pub(crate) fn new(transport: Transport, group_id: impl Into<String>) -> Self {
        GroupReaderBuilder {
            transport,
            reader: None,
            auto_offset_reset: None,
            listener: None,
            config: Config::new(group_id.into()),
            process_spans: false,
            on_traceparent: None,
            enable_metrics_push: true,
        }
    }

    /// Whether the member pushes its metrics to the cluster (KIP-714; Java's
    /// `enable.metrics.push`, default true), with the resource attributes `group_id`,
    /// `group_instance_id`, `group_member_id` and `client_rack`. On, the member runs a
    /// [`Telemetry`](crate::telemetry::Telemetry) engine fed by [`GroupReader::metric_source`]:
    /// it asks for a subscription (GetTelemetrySubscriptions) in the background, pushes what
    /// the operator subscribed to at the interval the broker gives, and a last time on
    /// [`GroupReader::close`]. Off, nothing is sent and [`GroupReader::client_instance_id`]
    /// fails.
    pub fn enable_metrics_push(mut self, on: bool) -> Self {
        self.enable_metrics_push = on;
        self
    }

    /// The fetching settings (fetch sizes and waits, `max_poll_records`, `auto_offset_reset`
    /// for partitions without a committed offset, `isolation_level`, `client_rack`, which is
    /// also sent to the coordinator as the member's rack). Default: [`ReaderBuilder`]'s
    /// defaults on this builder's transport.
    pub fn reader(mut self, reader: ReaderBuilder) -> Self {
        self.reader = Some(reader);
        self
    }

    /// Makes a `process {topic}` span for every record handed out as a
    /// [`ConsumerRecord`](crate::ConsumerRecord) (the `Stream`, [`GroupReader::next`],
    /// `into_consumer_records` of `next_batch`'s records), with this group as
    /// `messaging.consumer.group.name`: see [`ReaderBuilder::process_spans`] (on when either
    /// builder turns it on). Default false.
    pub fn process_spans(mut self, on: bool) -> Self {
        self.process_spans = on;
        self
    }

    /// The hook for process spans of records that carry a valid `traceparent`: see
    /// [`ReaderBuilder::on_traceparent`] (set here, it replaces the Reader builder's).
    /// Default none.
    pub fn on_traceparent(
        mut self,
        hook: impl Fn(&tracing::Span, &crate::TraceParent) + Send + Sync + 'static,
    ) -> Self {
        self.on_traceparent = Some(Arc::new(hook));
        self
    }

    /// The rebalance callbacks (Java `ConsumerRebalanceListener`). Default none.
    pub fn rebalance_listener(mut self, listener: Arc<dyn RebalanceListener>) -> Self {
        self.listener = Some(listener);
        self
    }

    /// Reads these topics (Java `subscribe(Collection)`); replaces an earlier subscription.
    pub fn subscribe<I, S>(mut self, topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.subscription = Some(Subscription::Topics(topic_list(topics)));
        self
    }

    /// Reads every topic whose whole name matches `pattern` (Java `subscribe(Pattern)`),
    /// internal topics excluded; new matching topics are picked up within `metadata_max_age`.
    /// Replaces an earlier subscription. With KIP-848 the pattern is evaluated by the
    /// coordinator (RE2J syntax).
    ///
    /// The pattern is checked by [`GroupReaderBuilder::build`].
    pub fn subscribe_pattern(mut self, pattern: impl Into<String>) -> Self {
        self.config.subscription = Some(Subscription::Pattern(pattern.into()));
        self
    }

    /// The group protocol (Java `group.protocol`). Default classic.
    pub fn group_protocol(mut self, protocol: GroupProtocol) -> Self {
        self.config.group_protocol = protocol;
        self
    }

    /// Static membership (Java `group.instance.id`, KIP-345). Default none.
    pub fn group_instance_id(mut self, id: impl Into<String>) -> Self {
        self.config.group_instance_id = Some(id.into());
        self
    }

    /// How long the coordinator keeps a silent member (Java `session.timeout.ms`). Default
    /// 45 s.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.config.session_timeout = timeout;
        self
    }

    /// Time between heartbeats (Java `heartbeat.interval.ms`). Default 3 s.
    pub fn heartbeat_interval(mut self, interval: Duration) -> Self {
        self.config.heartbeat_interval = interval;
        self
    }

    /// How long a rebalance may take (JoinGroup's rebalance timeout, KIP-848's
    /// `RebalanceTimeoutMs`), also the longest wait for the application to finish a
    /// revocation. Default: [`max_poll_interval`](Self::max_poll_interval), as Java sends
    /// `max.poll.interval.ms` (an eager revocation waits for the next poll).
    pub fn rebalance_timeout(mut self, timeout: Duration) -> Self {
        self.config.rebalance_timeout = Some(timeout);
        self
    }

    /// Longest time between two polls before the member leaves the group (Java
    /// `max.poll.interval.ms`). Default 300 s. A poll that waits for records counts for as
    /// long as the application awaits it; one it drops (a timeout around `next_batch`) ends
    /// there.
    pub fn max_poll_interval(mut self, interval: Duration) -> Self {
        self.config.max_poll_interval = interval;
        self
    }

    /// Whether consumed offsets are committed automatically (Java `enable.auto.commit`).
    /// Default true.
    pub fn enable_auto_commit(mut self, enabled: bool) -> Self {
        self.config.enable_auto_commit = enabled;
        self
    }

    /// Whether the application's position is stored for the next commit as records are
    /// handed out (librdkafka `enable.auto.offset.store`). Default true. With false, a commit
    /// (automatic, [`GroupReader::commit`], on revocation and on close) sends only the
    /// offsets stored with [`GroupReader::store_offset`] / [`GroupReader::store_offsets`]:
    /// librdkafka's at-least-once pattern, where a record's offset is stored once it is
    /// processed, so a crash before that reads it again. Stored offsets of a partition are
    /// forgotten when it is revoked or lost.
    #[doc(alias = "enable.auto.offset.store")]
    pub fn enable_auto_offset_store(mut self, enabled: bool) -> Self {
        self.config.enable_auto_offset_store = enabled;
        self
    }

    /// Where a partition without a committed offset starts (Java `auto.offset.reset`):
    /// [`AutoOffsetReset::Earliest`], [`AutoOffsetReset::Latest`] (the default) or
    /// [`AutoOffsetReset::None`] (the poll returns `NoOffsetForPartition`). The same setting
    /// as [`ReaderBuilder::auto_offset_reset`], without building a `ReaderBuilder`; set here it
    /// wins over the one of [`GroupReaderBuilder::reader`], in whichever order they are called.
    #[doc(alias = "auto.offset.reset")]
    pub fn auto_offset_reset(mut self, reset: AutoOffsetReset) -> Self {
        self.auto_offset_reset = Some(reset);
        self
    }

    /// Time between automatic commits (Java `auto.commit.interval.ms`). Default 5 s.
    pub fn auto_commit_interval(mut self, interval: Duration) -> Self {
        self.config.auto_commit_interval = interval;
        self
    }

    /// The assignors offered in JoinGroup, most preferred first (Java
    /// `partition.assignment.strategy`). Default `[range, cooperative-sticky]` (Java's).
    pub fn partition_assignment_strategy(
        mut self,
        assignors: impl IntoIterator<Item = Arc<dyn GroupBalancer>>,
    ) -> Self {
        self.config.assignors = assignors.into_iter().collect();
        self
    }

    /// The server-side assignor for KIP-848 (`uniform`, `range`; Java
    /// `group.remote.assignor`). Default: the broker's.
    pub fn group_remote_assignor(mut self, name: impl Into<String>) -> Self {
        self.config.group_remote_assignor = Some(name.into());
        self
    }

    /// The longest [`GroupReader::close`] takes as a whole (Java's `close()` waits 30 s at
    /// most): the pending rebalance step, the closing auto-commit, the revoked callback and
    /// the LeaveGroup share it; past it the member stops without waiting further (the
    /// coordinator then drops it after its session timeout). Default 30 s.
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.config.close_timeout = timeout;
        self
    }

    /// How often subscribed topics are checked for new partitions and the pattern for new
    /// topics (Java `metadata.max.age.ms`). Default 5 min.
    pub fn metadata_max_age(mut self, age: Duration) -> Self {
        self.config.metadata_max_age = age;
        self
    }

    /// Whether committed offsets are read with `require_stable` (KIP-447; librdkafka
    /// `require.stable.offsets`). Default true, as Java always asks (franz-go's transactional
    /// session too): the coordinator answers `UNSTABLE_OFFSET_COMMIT` (asked again) while a
    /// transactional commit of the partition is pending, so a member taking over a partition
    /// from a stalled one does not read the offset before that commit and transform the same
    /// input twice. A coordinator without it (OffsetFetch below v7, Kafka before 2.5) is asked
    /// without it, as Java's `OffsetFetchRequest.Builder` does.
    pub fn require_stable_offsets(mut self, stable: bool) -> Self {
        self.config.require_stable_offsets = stable;
        self
    }

    /// First wait after a failed group request (Java `retry.backoff.ms`). Default 100 ms.
    pub fn retry_backoff(mut self, backoff: Duration) -> Self {
        self.config.retry_backoff = backoff;
        self
    }

    /// The settings a transactional session ([`crate::transact`]) needs: offsets are
    /// committed only inside transactions (auto-commit off) and the input is read
    /// `read_committed`. The application's listener is taken out and returned, for the
    /// session's listener to call after its own work.
    pub(crate) fn for_transactions(mut self) -> (Self, Option<Arc<dyn RebalanceListener>>) {
        self.config.enable_auto_commit = false;
        let reader = self
            .reader
            .take()
            .unwrap_or_else(|| ReaderBuilder::new(self.transport.clone()));
        self.reader =
            Some(reader.isolation_level(crate::ops::offsets::IsolationLevel::ReadCommitted));
        let user = self.listener.take();
        (self, user)
    }

    /// The member. No I/O happens here: the member's task starts on the current tokio
    /// runtime and joins the group at once; records come through the `Stream` or
    /// [`GroupReader::next_batch`].
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming a setting outside its range, an invalid pattern, or no tokio
    /// runtime.
    pub fn build(self) -> Result<GroupReader> {
        self.config.validate()?;
        if let Some(Subscription::Pattern(p)) = &self.config.subscription {
            Subscription::compile(p)?;
        }
        let mut reader = self
            .reader
            .unwrap_or_else(|| ReaderBuilder::new(self.transport.clone()));
        if let Some(reset) = self.auto_offset_reset {
            reader = reader.auto_offset_reset(reset);
        }
        // The member's engine reports the Reader's metrics: the Reader has none of its own.
        let reader = reader
            .member_process_spans(
                &self.config.group_id,
                self.process_spans,
                self.on_traceparent,
            )
            .enable_metrics_push(false)
            .build()?;
        GroupReader::start(
            self.transport,
            reader,
            self.config,
            self.listener,
            self.enable_metrics_push,
        )
    }
}

/// Topic names sorted and without duplicates, as a subscription keeps them.
pub(crate) fn topic_list<I, S>(topics: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut t: Vec<String> = topics.into_iter().map(Into::into).collect();
    t.sort();
    t.dedup();
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_table_and_ranges_are_checked() {
        let mut c = Config::new("g".into());
        assert_eq!(c.session_timeout, Duration::from_secs(45));
        assert_eq!(c.heartbeat_interval, Duration::from_secs(3));
        assert_eq!(c.rebalance_timeout(), Duration::from_secs(300));
        assert_eq!(c.max_poll_interval, Duration::from_secs(300));
        assert_eq!(c.auto_commit_interval, Duration::from_secs(5));
        assert_eq!(c.close_timeout, Duration::from_secs(30));
        assert!(c.enable_auto_commit);
        let names: Vec<&str> = c.assignors.iter().map(|a| a.protocol_name()).collect();
        assert_eq!(names, ["range", "cooperative-sticky"]);
        assert_eq!(c.rebalance_protocol(), RebalanceProtocol::Eager);
        assert!(c.validate().is_err(), "no subscription");
        c.subscription = Some(Subscription::Topics(vec!["t".into()]));
        assert!(c.validate().is_ok());
        type Spoil = Box<dyn Fn(&mut Config)>;
        let bad: Vec<Spoil> = vec![
            Box::new(|c| c.group_id.clear()),
            Box::new(|c| c.heartbeat_interval = c.session_timeout),
            Box::new(|c| c.session_timeout = Duration::from_secs(30 * 86_400)),
            Box::new(|c| c.auto_commit_interval = Duration::ZERO),
            Box::new(|c| c.assignors.clear()),
            Box::new(|c| c.assignors.push(Arc::new(RangeAssignor::new()))),
            Box::new(|c| c.subscription = Some(Subscription::Topics(Vec::new()))),
            Box::new(|c| c.group_instance_id = Some(String::new())),
        ];
        for (i, f) in bad.iter().enumerate() {
            let mut c2 = c.clone();
            f(&mut c2);
            assert!(matches!(c2.validate(), Err(Error::Config(_))), "case {i}");
        }
        c.assignors = vec![Arc::new(CooperativeStickyAssignor::new())];
        assert_eq!(c.rebalance_protocol(), RebalanceProtocol::Cooperative);
    }

    /// The rebalance timeout a member sends (JoinGroup, KIP-848's first
    /// heartbeat) is `max_poll_interval` unless set, as Java sends `max.poll.interval.ms`: an
    /// eager revocation waits for the application's next poll, which may take that long, and
    /// a shorter rebalance timeout drops a slow member out of every rebalance.
    #[test]
    fn the_rebalance_timeout_is_max_poll_interval_unless_set() {
        let transport = crate::transport::Transport::builder(["127.0.0.1:9"])
            .build()
            .expect("transport");
        let b = || GroupReader::builder(transport.clone(), "g").subscribe(["t"]);
        assert_eq!(
            b().config.rebalance_timeout(),
            Duration::from_secs(300),
            "default"
        );
        let c = b().max_poll_interval(Duration::from_secs(120)).config;
        assert_eq!(c.rebalance_timeout(), Duration::from_secs(120), "follows");
        let c = b()
            .max_poll_interval(Duration::from_secs(120))
            .rebalance_timeout(Duration::from_secs(10))
            .config;
        assert_eq!(c.rebalance_timeout(), Duration::from_secs(10), "set");
    }

    /// Committed offsets are read with `require_stable` (KIP-447) unless the
    /// application turns it off, as Java always asks: a new owner of a partition then waits
    /// for a transactional commit of the old owner still pending instead of reading the offset
    /// before it (and transforming its input again). A transactional session's member asks for
    /// it too. A coordinator too old for it (OffsetFetch below v7) is asked without it, as
    /// Java's `OffsetFetchRequest.Builder` does, rather than refused.
    #[test]
    fn committed_offsets_are_read_stable_by_default() {
        let transport = crate::transport::Transport::builder(["127.0.0.1:9"])
            .build()
            .expect("transport");
        let parts: Vec<(Arc<str>, i32)> = vec![(Arc::from("t"), 0)];
        let plain = GroupReader::builder(transport.clone(), "g").subscribe(["t"]);
        let (txn, _) = GroupReader::builder(transport, "g")
            .subscribe(["t"])
            .for_transactions();
        for (what, b) in [("a member", plain), ("a transactional member", txn)] {
            let stable = b.config.require_stable_offsets;
            let (_, req) =
                super::super::commit::fetch_request("g", &parts, stable, 8).expect("request");
            assert!(req.require_stable, "{what} reads committed offsets stable");
            let (_, old) = super::super::commit::fetch_request("g", &parts, stable, 6)
                .expect("an older coordinator is asked without require_stable");
            assert!(!old.require_stable);
        }
    }
}
