//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (cargo feature `metrics`):
//! every metric's name, kind, unit and labels are declared here, once, and the clients call
//! the recording functions below. The application installs a recorder (an exporter such as
//! `metrics-exporter-prometheus`) and may call [`describe_metrics`] after it for the
//! descriptions and units.
//!
//! Two families: OpenTelemetry's messaging conventions ([`crate::OTEL_SEMCONV_VERSION`]),
//! `messaging.client.*` and `messaging.process.duration`, and transport metrics after franz-go's
//! kprom, `kafkit.*`.
//!
//! Without the feature every function here is an empty `#[inline(always)]` body and every
//! handle ([`ProcessMeter`], the Writer's, the connection's and partition's caches) an empty
//! struct: the clients' calls compile to nothing and kafkit does not depend on `metrics`. With
//! it, the Writer's path allocates nothing per request (Issue 17's steady state holds): the
//! operation duration of a success has static labels (a key built without allocating), and
//! the Writer's handles (per topic and node, its Produce duration, its buffered gauges) are
//! made at first need (`ProduceMeter`, `Buffered`). Elsewhere a call either builds a metric key (a label vector: one
//! allocation) and asks the installed recorder, once per poll, commit or failure, or uses a
//! handle cached per connection or partition (no lookup at all); never per record.
//!
//! This floor holds the vocabulary because the writer, the reader, the group member and the
//! connections all record and none of them may import another.

/// `messaging.client.operation.duration`: histogram, seconds; labels `messaging.system`,
/// `messaging.operation.name` and `messaging.operation.type` (`send` for a Produce
/// request, `poll` / `receive` for a Fetch, `commit` / `settle` for an OffsetCommit,
/// `acknowledge` / `settle` for a share group's acknowledgements), `error.type` on a failure.
pub const OPERATION_DURATION: &str = "messaging.client.operation.duration";
/// `messaging.client.sent.messages`: counter, `{message}`; labels `messaging.system`,
/// `messaging.operation.name` = `send`, `messaging.destination.name`, `error.type` on a
/// failure. Counted once per batch when its outcome is known (written or failed).
pub const SENT_MESSAGES: &str = "messaging.client.sent.messages";
/// `messaging.client.consumed.messages`: counter, `{message}`; labels `messaging.system`,
/// `messaging.operation.name` = `poll`, `messaging.destination.name`,
/// `messaging.consumer.group.name` for a group member. Counted per partition per poll.
pub const CONSUMED_MESSAGES: &str = "messaging.client.consumed.messages";
/// `messaging.process.duration`: histogram, seconds; labels `messaging.system`,
/// `messaging.operation.name` = `process`, `messaging.destination.name`,
/// `messaging.consumer.group.name` when given. The application's processing time, recorded by
/// a [`ProcessMeter`]'s timer.
pub const PROCESS_DURATION: &str = "messaging.process.duration";
/// `kafkit.connects.total`: counter; label `node_id`. Connections opened and pooled by the
/// transport under a node id (kprom's `connects_total`); a bootstrap connection counts when
/// it is kept as a node's connection.
pub const CONNECTS: &str = "kafkit.connects.total";
/// `kafkit.connect.errors.total`: counter; label `node_id` (kprom's `connect_errors_total`).
pub const CONNECT_ERRORS: &str = "kafkit.connect.errors.total";
/// `kafkit.disconnects.total`: counter; label `node_id` (kprom's `disconnects_total`):
/// pooled connections closed, by either side.
pub const DISCONNECTS: &str = "kafkit.disconnects.total";
/// `kafkit.write.bytes.total`: counter, bytes; label `node_id` (kprom's `write_bytes_total`):
/// request frames written to a pooled connection, size prefix included.
pub const WRITE_BYTES: &str = "kafkit.write.bytes.total";
/// `kafkit.read.bytes.total`: counter, bytes; label `node_id` (kprom's `read_bytes_total`):
/// response frames read from a pooled connection, size prefix included.
pub const READ_BYTES: &str = "kafkit.read.bytes.total";
/// `kafkit.requests.total`: counter; label `node_id`: requests written to a pooled connection.
pub const REQUESTS: &str = "kafkit.requests.total";
/// `kafkit.request.throttled.seconds`: histogram, seconds; label `node_id` (kprom's
/// `request_throttled_seconds`): each response's `throttle_time_ms` above 0 (KIP-219).
pub const THROTTLED: &str = "kafkit.request.throttled.seconds";
/// `kafkit.produce.records.total`: counter; labels `node_id`, `topic` (kprom's
/// `produce_records_total`): records in Produce requests, retries included.
pub const PRODUCE_RECORDS: &str = "kafkit.produce.records.total";
/// `kafkit.produce.batches.total`: counter; labels `node_id`, `topic` (kprom's
/// `produce_batches_total`).
pub const PRODUCE_BATCHES: &str = "kafkit.produce.batches.total";
/// `kafkit.buffered.produce.records`: gauge; no label: records the Writers of the process hold,
/// accepted and not yet acknowledged or failed (kprom's `buffered_produce_records_total`),
/// sampled when each Produce request ends.
pub const BUFFERED_RECORDS: &str = "kafkit.buffered.produce.records";
/// `kafkit.buffered.produce.bytes`: gauge, bytes; as [`BUFFERED_RECORDS`] (kprom's
/// `buffered_produce_bytes`).
pub const BUFFERED_BYTES: &str = "kafkit.buffered.produce.bytes";
/// `kafkit.fetch.records.total`: counter; labels `node_id`, `topic` (kprom's
/// `fetch_records_total`): records a Fetch answer delivered to the reader's buffer.
pub const FETCH_RECORDS: &str = "kafkit.fetch.records.total";
/// `kafkit.fetch.batches.total`: counter; labels `node_id`, `topic` (kprom's
/// `fetch_batches_total`): record batches with delivered records.
pub const FETCH_BATCHES: &str = "kafkit.fetch.batches.total";
/// `kafkit.consumer.lag`: gauge, `{message}`; labels `topic`, `partition`: the high watermark
/// of the partition's last Fetch answer minus the reader's fetch position after it.
pub const LAG: &str = "kafkit.consumer.lag";

/// Whether this build records metrics (the cargo feature `metrics`): callers skip their loops
/// without it.
pub(crate) const ENABLED: bool = cfg!(feature = "metrics");

/// The `messaging.system` value.
#[cfg(feature = "metrics")]
const SYSTEM: &str = "kafka";

/// Every metric: name, kind, unit, description (`describe_metrics` reads it; the docs table in
/// docs/observability.md mirrors it).
pub const METRICS: &[(&str, Kind, &str, &str)] = &[
    (
        OPERATION_DURATION,
        Kind::Histogram,
        "s",
        "Duration of a messaging operation: a Produce (send), Fetch (poll), OffsetCommit \
         (commit) or share acknowledgement (acknowledge) request.",
    ),
    (
        SENT_MESSAGES,
        Kind::Counter,
        "{message}",
        "Messages the producer attempted to send (counted when their batch ends).",
    ),
    (
        CONSUMED_MESSAGES,
        Kind::Counter,
        "{message}",
        "Messages handed to the application by a poll.",
    ),
    (
        PROCESS_DURATION,
        Kind::Histogram,
        "s",
        "Duration of the application's processing of a message (kafkit::meter::ProcessMeter).",
    ),
    (
        CONNECTS,
        Kind::Counter,
        "{connection}",
        "Connections opened to a broker.",
    ),
    (
        CONNECT_ERRORS,
        Kind::Counter,
        "{connection}",
        "Connections to a broker that failed to open.",
    ),
    (
        DISCONNECTS,
        Kind::Counter,
        "{connection}",
        "Connections to a broker closed.",
    ),
    (
        WRITE_BYTES,
        Kind::Counter,
        "By",
        "Bytes of request frames written to a broker.",
    ),
    (
        READ_BYTES,
        Kind::Counter,
        "By",
        "Bytes of response frames read from a broker.",
    ),
    (
        REQUESTS,
        Kind::Counter,
        "{request}",
        "Requests written to a broker.",
    ),
    (
        THROTTLED,
        Kind::Histogram,
        "s",
        "Throttle time a broker asked for in a response (KIP-219).",
    ),
    (
        PRODUCE_RECORDS,
        Kind::Counter,
        "{record}",
        "Records in Produce requests sent to a broker, retries included.",
    ),
    (
        PRODUCE_BATCHES,
        Kind::Counter,
        "{batch}",
        "Record batches in Produce requests sent to a broker, retries included.",
    ),
    (
        BUFFERED_RECORDS,
        Kind::Gauge,
        "{record}",
        "Records buffered in Writers, not yet acknowledged or failed.",
    ),
    (
        BUFFERED_BYTES,
        Kind::Gauge,
        "By",
        "Bytes of records buffered in Writers.",
    ),
    (
        FETCH_RECORDS,
        Kind::Counter,
        "{record}",
        "Records fetched from a broker into the reader's buffer.",
    ),
    (
        FETCH_BATCHES,
        Kind::Counter,
        "{batch}",
        "Record batches fetched from a broker into the reader's buffer.",
    ),
    (
        LAG,
        Kind::Gauge,
        "{message}",
        "High watermark minus fetch position of a partition, after its last Fetch answer.",
    ),
];

/// A metric's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// A monotonic sum.
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// A distribution of values.
    Histogram,
}

/// A timed messaging operation of `messaging.client.operation.duration`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    /// A Produce request (recorded by the Writer's [`ProduceMeter::request_ended`], which names
    /// it only with the feature on).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    Send,
    /// A Fetch request.
    Poll,
    /// A group member's OffsetCommit request.
    Commit,
    /// A share group member's acknowledgements (`ShareReader::commit`).
    Acknowledge,
}

impl Op {
    /// `messaging.operation.name` and `messaging.operation.type`.
    #[cfg(feature = "metrics")]
    fn labels(self) -> (&'static str, &'static str) {
        match self {
            Op::Send => ("send", "send"),
            Op::Poll => ("poll", "receive"),
            Op::Commit => ("commit", "settle"),
            Op::Acknowledge => ("acknowledge", "settle"),
        }
    }
}

/// When an operation started: an `Instant` with the feature, `()` without (nothing is read).
#[cfg(feature = "metrics")]
pub(crate) type Started = std::time::Instant;
/// When an operation started: an `Instant` with the feature, nothing without (no clock read).
#[cfg(not(feature = "metrics"))]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started;

/// Declares every metric of [`METRICS`] (description and unit) to the installed recorder. Call
/// it once after installing the recorder; recording works without it, exporters then show no
/// description. Without the cargo feature `metrics` it does nothing.
pub fn describe_metrics() {
    #[cfg(feature = "metrics")]
    for &(name, kind, unit, description) in METRICS {
        let unit = match unit {
            "s" => Some(metrics::Unit::Seconds),
            "By" => Some(metrics::Unit::Bytes),
            _ => None,
        };
        let description = metrics::SharedString::const_str(description);
        metrics::with_recorder(|r| match kind {
            Kind::Counter => r.describe_counter(name.into(), unit, description),
            Kind::Gauge => r.describe_gauge(name.into(), unit, description),
            Kind::Histogram => r.describe_histogram(name.into(), unit, description),
        });
    }
}

/// The start of a timed operation.
#[inline(always)]
pub(crate) fn start() -> Started {
    #[cfg(feature = "metrics")]
    return std::time::Instant::now();
    #[cfg(not(feature = "metrics"))]
    Started
}

/// Records one operation's duration since `started`, with `error.type` when it failed
/// (`error` is asked only with the feature on). A success's labels are all static
/// ([`succeeded`]): its key is built without allocating; a failure builds one (rare).
#[inline(always)]
#[allow(unused_variables)]
pub(crate) fn operation_duration(
    op: Op,
    started: Started,
    error: impl FnOnce() -> Option<&'static str>,
) {
    #[cfg(feature = "metrics")]
    {
        let secs = started.elapsed().as_secs_f64();
        match error() {
            None => succeeded(op).record(secs),
            Some(e) => {
                let (name, kind) = op.labels();
                metrics::histogram!(OPERATION_DURATION,
                    "messaging.system" => SYSTEM, "messaging.operation.name" => name,
                    "messaging.operation.type" => kind, "error.type" => e)
                .record(secs);
            }
        }
    }
}

/// `op`'s duration histogram without `error.type`: every label a literal (those of
/// [`Op::labels`]), so that `metrics`' macro makes a static key (no label vector) and the
/// recorder is asked on each call, as a recorder installed late expects.
#[cfg(feature = "metrics")]
fn succeeded(op: Op) -> metrics::Histogram {
    match op {
        Op::Send => metrics::histogram!(OPERATION_DURATION, "messaging.system" => "kafka",
            "messaging.operation.name" => "send", "messaging.operation.type" => "send"),
        Op::Poll => metrics::histogram!(OPERATION_DURATION, "messaging.system" => "kafka",
            "messaging.operation.name" => "poll", "messaging.operation.type" => "receive"),
        Op::Commit => metrics::histogram!(OPERATION_DURATION, "messaging.system" => "kafka",
            "messaging.operation.name" => "commit", "messaging.operation.type" => "settle"),
        Op::Acknowledge => metrics::histogram!(OPERATION_DURATION, "messaging.system" => "kafka",
            "messaging.operation.name" => "acknowledge", "messaging.operation.type" => "settle"),
    }
}

/// Records an OffsetCommit's duration (`op` = [`Op::Commit`]): `error.type` when the request
/// failed, or the first partition's error code.
#[inline(always)]
#[allow(unused_variables)]
pub(crate) fn settled<T>(
    op: Op,
    started: Started,
    r: &crate::error::Result<(kafkit_protocol::messages::OffsetCommitResponse, T)>,
) {
    operation_duration(op, started, || {
        let code = match r {
            Ok((resp, _)) => resp
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| p.error_code)
                .find(|c| !c.is_ok())?,
            Err(e) => e
                .error_code()
                .unwrap_or(kafkit_protocol::ErrorCode::UNKNOWN_SERVER_ERROR),
        };
        Some(crate::ops::otel::error_type(Some(code)))
    });
}

/// Records a share group member's acknowledgement round (`ShareReader::commit`), with
/// `error.type` of the first partition the broker refused (`first_error`, asked only with the
/// feature on).
#[inline(always)]
#[allow(unused_variables)]
pub(crate) fn acknowledged<'a>(
    started: Started,
    first_error: impl FnOnce() -> Option<&'a crate::error::Error>,
) {
    operation_duration(Op::Acknowledge, started, || {
        first_error().map(|e| crate::ops::otel::error_type(e.error_code()))
    });
}

/// Sums `messaging.client.sent.messages` over a run of ended batches of the same topic and
/// outcome (`writer/inner.rs`, `count_ended`): recorded through the Writer's
/// [`ProduceMeter`] when the topic or outcome changes and when dropped, so a request's batches
/// of one topic record once, not once per batch.
pub(crate) struct SentTally<'a> {
    #[cfg(feature = "metrics")]
    meter: &'a ProduceMeter,
    #[cfg(feature = "metrics")]
    run: Option<(&'a std::sync::Arc<str>, Option<&'static str>, u64)>,
    #[cfg(not(feature = "metrics"))]
    _meter: std::marker::PhantomData<&'a ProduceMeter>,
}

impl<'a> SentTally<'a> {
    /// A tally recording through `meter`.
    #[inline(always)]
    #[allow(unused_variables)]
    pub(crate) fn new(meter: &'a ProduceMeter) -> SentTally<'a> {
        SentTally {
            #[cfg(feature = "metrics")]
            meter,
            #[cfg(feature = "metrics")]
            run: None,
            #[cfg(not(feature = "metrics"))]
            _meter: std::marker::PhantomData,
        }
    }

    /// One batch of `count` messages of `topic` ended, failed with `error` (asked only with
    /// the feature on).
    #[inline(always)]
    #[allow(unused_variables)]
    pub(crate) fn add(
        &mut self,
        topic: &'a std::sync::Arc<str>,
        count: u64,
        error: impl FnOnce() -> Option<&'static str>,
    ) {
        #[cfg(feature = "metrics")]
        {
            let error = error();
            match &mut self.run {
                Some((t, e, n)) if *e == error && same_topic(t, topic) => *n += count,
                run => {
                    if let Some((t, e, n)) = run.replace((topic, error, count)) {
                        self.meter.sent_messages(t, n, e);
                    }
                }
            }
        }
    }
}

impl Drop for SentTally<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        if let Some((t, e, n)) = self.run.take() {
            self.meter.sent_messages(t, n, e);
        }
    }
}

/// Counts `count` messages of one batch of `topic` as failed with `error.type` `error` (a
/// key built per call: failures are rare; the successes' counter is cached by
/// [`ProduceMeter`]).
#[cfg(feature = "metrics")]
fn sent_failed(topic: &std::sync::Arc<str>, count: u64, error: &'static str) {
    let topic = metrics::SharedString::from(std::sync::Arc::clone(topic));
    metrics::counter!(SENT_MESSAGES,
        "messaging.system" => SYSTEM, "messaging.operation.name" => "send",
        "messaging.destination.name" => topic, "error.type" => error)
    .increment(count);
}

/// Counts the messages a poll handed out (of `group`'s member, when one): `(topic, count)` per
/// partition, one recording per run of partitions of the same topic (a poll of 1,000
/// partitions of one topic records once).
#[inline(always)]
#[allow(unused_variables)]
pub(crate) fn consumed_messages<'a>(
    parts: impl Iterator<Item = (&'a std::sync::Arc<str>, u64)>,
    group: Option<&str>,
) {
    #[cfg(feature = "metrics")]
    for (topic, count) in runs(parts) {
        consumed_of(topic, count, group);
    }
}

/// Sums the counts of consecutive items of the same topic: one `(topic, sum)` per run.
#[cfg(feature = "metrics")]
fn runs<'a>(
    items: impl Iterator<Item = (&'a std::sync::Arc<str>, u64)>,
) -> impl Iterator<Item = (&'a std::sync::Arc<str>, u64)> {
    let mut items = items.peekable();
    std::iter::from_fn(move || {
        let (topic, mut sum) = items.next()?;
        while let Some((_, n)) = items.next_if(|(t, _)| same_topic(t, topic)) {
            sum += n;
        }
        Some((topic, sum))
    })
}

/// Whether two topic names are the same (the same `Arc` first: the common case).
#[cfg(feature = "metrics")]
fn same_topic(a: &std::sync::Arc<str>, b: &std::sync::Arc<str>) -> bool {
    std::sync::Arc::ptr_eq(a, b) || **a == **b
}

/// `consumed_messages` of one topic.
#[cfg(feature = "metrics")]
fn consumed_of(topic: &std::sync::Arc<str>, count: u64, group: Option<&str>) {
    {
        let topic = metrics::SharedString::from(std::sync::Arc::clone(topic));
        match group {
            None => metrics::counter!(CONSUMED_MESSAGES,
                "messaging.system" => SYSTEM, "messaging.operation.name" => "poll",
                "messaging.destination.name" => topic)
            .increment(count),
            Some(g) => metrics::counter!(CONSUMED_MESSAGES,
                "messaging.system" => SYSTEM, "messaging.operation.name" => "poll",
                "messaging.destination.name" => topic,
                "messaging.consumer.group.name" => g.to_owned())
            .increment(count),
        }
    }
}

/// A node id as a label value.
#[cfg(feature = "metrics")]
fn node_label(node: i32) -> metrics::SharedString {
    metrics::SharedString::from(node.to_string())
}

/// Counts a connection to `node` the transport failed to open.
#[inline(always)]
#[allow(unused_variables)]
pub(crate) fn connect_error(node: i32) {
    #[cfg(feature = "metrics")]
    metrics::counter!(CONNECT_ERRORS, "node_id" => node_label(node)).increment(1);
}

/// Records a response's `throttle_time_ms` from `node` (nothing for 0 or less).
#[inline(always)]
#[allow(unused_variables)]
pub(crate) fn throttled(node: i32, ms: i32) {
    #[cfg(feature = "metrics")]
    if ms > 0 {
        metrics::histogram!(THROTTLED, "node_id" => node_label(node))
            .record(f64::from(ms) / 1000.0);
    }
}

/// A connection's handles (`conn/core.rs`): empty until the transport pools the connection
/// under a node id ([`ConnMeter::set_node`], counted as a connect); then bytes, requests and
/// the close count under that `node_id`, each a cached handle (no key built per request).
#[derive(Default)]
pub(crate) struct ConnMeter {
    #[cfg(feature = "metrics")]
    handles: std::sync::OnceLock<ConnHandles>,
}

#[cfg(feature = "metrics")]
struct ConnHandles {
    written: metrics::Counter,
    read: metrics::Counter,
    requests: metrics::Counter,
    disconnects: metrics::Counter,
}

impl std::fmt::Debug for ConnMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnMeter")
    }
}

impl ConnMeter {
    /// Names the connection's node and counts it as a connect (the first call wins: a
    /// connection serves one node).
    #[inline(always)]
    #[allow(unused_variables)]
    pub(crate) fn set_node(&self, node: i32) {
        #[cfg(feature = "metrics")]
        self.handles.get_or_init(|| {
            let node = node_label(node);
            metrics::counter!(CONNECTS, "node_id" => node.clone()).increment(1);
            ConnHandles {
                written: metrics::counter!(WRITE_BYTES, "node_id" => node.clone()),
                read: metrics::counter!(READ_BYTES, "node_id" => node.clone()),
                requests: metrics::counter!(REQUESTS, "node_id" => node.clone()),
                disconnects: metrics::counter!(DISCONNECTS, "node_id" => node),
            }
        });
    }

    /// `requests` request frames of `bytes` bytes in all were written.
    #[inline(always)]
    #[allow(unused_variables)]
    pub(crate) fn wrote(&self, requests: usize, bytes: usize) {
        #[cfg(feature = "metrics")]
        if let Some(h) = self.handles.get() {
            h.requests.increment(requests as u64);
            h.written.increment(bytes as u64);
        }
    }

    /// A response frame of `bytes` bytes was read.
    #[inline(always)]
    #[allow(unused_variables)]
    pub(crate) fn read(&self, bytes: usize) {
        #[cfg(feature = "metrics")]
        if let Some(h) = self.handles.get() {
            h.read.increment(bytes as u64);
        }
    }

    /// The connection closed (called once per connection).
    #[inline(always)]
    pub(crate) fn closed(&self) {
        #[cfg(feature = "metrics")]
        if let Some(h) = self.handles.get() {
            h.disconnects.increment(1);
        }
    }
}

/// A partition's handles (`reader/cursor.rs`): fetch records and batches of the partition's
/// topic from the node that answered, and its lag; made at the first answer, made again when
/// another node answers.
#[derive(Default)]
pub(crate) struct PartitionMeter {
    #[cfg(feature = "metrics")]
    handles: Option<Box<PartitionHandles>>,
}

#[cfg(feature = "metrics")]
struct PartitionHandles {
    node: i32,
    records: metrics::Counter,
    batches: metrics::Counter,
    lag: metrics::Gauge,
    /// The lag last set (-1: none yet): an unchanged lag is not set again.
    last_lag: i64,
}

impl std::fmt::Debug for PartitionMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PartitionMeter")
    }
}

impl PartitionMeter {
    /// One Fetch answer of `topic`'s `partition` from `node`: `records` records in `batches`
    /// batches delivered, `lag` = high watermark - fetch position (not set when negative:
    /// the answer had no watermark).
    #[inline(always)]
    #[allow(unused_variables)]
    pub(crate) fn fetched(
        &mut self,
        node: i32,
        topic: &std::sync::Arc<str>,
        partition: i32,
        (records, batches): (usize, usize),
        lag: i64,
    ) {
        #[cfg(feature = "metrics")]
        {
            let h = match &mut self.handles {
                Some(h) if h.node == node => h,
                slot => slot.insert(Box::new(PartitionHandles::new(node, topic, partition))),
            };
            if records > 0 {
                h.records.increment(records as u64);
                h.batches.increment(batches as u64);
            }
            if lag >= 0 && lag != h.last_lag {
                h.lag.set(lag as f64);
                h.last_lag = lag;
            }
        }
    }
}

#[cfg(feature = "metrics")]
impl PartitionHandles {
    fn new(node: i32, topic: &std::sync::Arc<str>, partition: i32) -> PartitionHandles {
        let label = node_label(node);
        let topic = metrics::SharedString::from(std::sync::Arc::clone(topic));
        PartitionHandles {
            node,
            records: metrics::counter!(FETCH_RECORDS, "node_id" => label.clone(), "topic" => topic.clone()),
            batches: metrics::counter!(FETCH_BATCHES, "node_id" => label, "topic" => topic.clone()),
            lag: metrics::gauge!(LAG, "topic" => topic, "partition" => partition.to_string()),
            last_lag: -1,
        }
    }
}

/// A Writer's handles (`writer/inner.rs`), made at first sight and kept for the Writer's life:
/// per topic, `messaging.client.sent.messages` without `error.type` and, per node under it,
/// `kafkit.produce.records.total` and `kafkit.produce.batches.total`; per node,
/// `kafkit.request.throttled.seconds`. A request finds them under one lock by the topic's name
/// (hashing the `str`, no key built, no allocation once seen), which keeps Issue 17's steady
/// state (a Produce request allocates nothing) with the feature on. As with [`ConnMeter`],
/// handles made before the application installs its recorder go nowhere for the Writer's life.
#[derive(Default)]
pub(crate) struct ProduceMeter {
    #[cfg(feature = "metrics")]
    handles: std::sync::Mutex<ProduceHandles>,
    /// The Produce requests' duration without `error.type` (a recorder such as Prometheus'
    /// allocates a handle each time it is asked: asked once).
    #[cfg(feature = "metrics")]
    send_ok: std::sync::OnceLock<metrics::Histogram>,
}

#[cfg(feature = "metrics")]
#[derive(Default)]
struct ProduceHandles {
    topics: std::collections::HashMap<std::sync::Arc<str>, TopicHandles>,
    nodes: Vec<NodeHandles>,
}

/// A topic's handles: its label, its sent messages (made at the first success) and its
/// produce records and batches per node (a short list: a topic's leaders).
#[cfg(feature = "metrics")]
struct TopicHandles {
    label: metrics::SharedString,
    sent_ok: Option<metrics::Counter>,
    produced: Vec<(i32, metrics::Counter, metrics::Counter)>,
}

/// A node's label and its throttle histogram (made at the first throttled answer).
#[cfg(feature = "metrics")]
struct NodeHandles {
    node: i32,
    label: metrics::SharedString,
    throttled: Option<metrics::Histogram>,
}

impl std::fmt::Debug for ProduceMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProduceMeter")
    }
}

impl ProduceMeter {
    /// Records a Produce request's duration since `started` ([`operation_duration`] of
    /// [`Op::Send`], the success's histogram kept).
    #[inline(always)]
    #[allow(unused_variables)]
    pub(crate) fn request_ended(
        &self,
        started: Started,
        error: impl FnOnce() -> Option<&'static str>,
    ) {
        #[cfg(feature = "metrics")]
        match error() {
            None => self
                .send_ok
                .get_or_init(|| succeeded(Op::Send))
                .record(started.elapsed().as_secs_f64()),
            Some(e) => operation_duration(Op::Send, started, || Some(e)),
        }
    }

    /// Counts a Produce request's batches to `node`: `(topic, records)` per batch, one
    /// increment per run of batches of the same topic.
    #[inline(always)]
    #[allow(unused_variables)]
    pub(crate) fn produce_batches<'a>(
        &self,
        node: i32,
        batches: impl Iterator<Item = (&'a std::sync::Arc<str>, u64)>,
    ) {
        #[cfg(feature = "metrics")]
        {
            let Ok(mut h) = self.handles.lock() else {
                return;
            };
            let mut batches = batches.peekable();
            while let Some((topic, mut records)) = batches.next() {
                let mut count = 1;
                while let Some((_, n)) = batches.next_if(|(t, _)| same_topic(t, topic)) {
                    records += n;
                    count += 1;
                }
                let (records_counter, batches_counter) = h.produced(node, topic);
                records_counter.increment(records);
                batches_counter.increment(count);
            }
        }
    }

    /// Counts `count` messages of `topic` as sent, failed with `error.type` `error` when one.
    #[cfg(feature = "metrics")]
    fn sent_messages(&self, topic: &std::sync::Arc<str>, count: u64, error: Option<&'static str>) {
        if let Some(e) = error {
            return sent_failed(topic, count, e);
        }
        let Ok(mut h) = self.handles.lock() else {
            return;
        };
        let t = h.topic(topic);
        t.sent_ok
            .get_or_insert_with(|| {
                metrics::counter!(SENT_MESSAGES,
                    "messaging.system" => SYSTEM, "messaging.operation.name" => "send",
                    "messaging.destination.name" => t.label.clone())
            })
            .increment(count);
    }

    /// Records a Produce response's `throttle_time_ms` from `node` (nothing for 0 or less).
    #[inline(always)]
    #[allow(unused_variables)]
    pub(crate) fn throttled(&self, node: i32, ms: i32) {
        #[cfg(feature = "metrics")]
        if ms > 0 {
            let Ok(mut h) = self.handles.lock() else {
                return;
            };
            let n = h.node(node);
            n.throttled
                .get_or_insert_with(|| metrics::histogram!(THROTTLED, "node_id" => n.label.clone()))
                .record(f64::from(ms) / 1000.0);
        }
    }
}

#[cfg(feature = "metrics")]
impl ProduceHandles {
    /// `topic`'s handles, made at its first sight.
    fn topic(&mut self, topic: &std::sync::Arc<str>) -> &mut TopicHandles {
        topic_of(&mut self.topics, topic)
    }

    /// `node`'s label and throttle histogram, made at its first sight.
    fn node(&mut self, node: i32) -> &mut NodeHandles {
        node_of(&mut self.nodes, node)
    }

    /// The produce records and batches counters of `topic` to `node`, made at first sight.
    fn produced(
        &mut self,
        node: i32,
        topic: &std::sync::Arc<str>,
    ) -> (&metrics::Counter, &metrics::Counter) {
        let t = topic_of(&mut self.topics, topic);
        let i = match t.produced.iter().position(|(n, ..)| *n == node) {
            Some(i) => i,
            None => {
                let node_id = node_of(&mut self.nodes, node).label.clone();
                let topic = t.label.clone();
                t.produced.push((
                    node,
                    metrics::counter!(PRODUCE_RECORDS, "node_id" => node_id.clone(), "topic" => topic.clone()),
                    metrics::counter!(PRODUCE_BATCHES, "node_id" => node_id, "topic" => topic),
                ));
                t.produced.len() - 1
            }
        };
        let (_, records, batches) = &t.produced[i];
        (records, batches)
    }
}

/// `topic`'s entry of `topics`, made at its first sight. The entry's key is the topic's own
/// `Arc` (a reference count, no allocation); the map hashes the name.
#[cfg(feature = "metrics")]
fn topic_of<'m>(
    topics: &'m mut std::collections::HashMap<std::sync::Arc<str>, TopicHandles>,
    topic: &std::sync::Arc<str>,
) -> &'m mut TopicHandles {
    topics
        .entry(std::sync::Arc::clone(topic))
        .or_insert_with(|| TopicHandles {
            label: metrics::SharedString::from(std::sync::Arc::clone(topic)),
            sent_ok: None,
            produced: Vec::new(),
        })
}

/// `node`'s entry of `nodes` (a Writer's brokers: a short list), made at its first sight.
#[cfg(feature = "metrics")]
fn node_of(nodes: &mut Vec<NodeHandles>, node: i32) -> &mut NodeHandles {
    let i = match nodes.iter().position(|n| n.node == node) {
        Some(i) => i,
        None => {
            nodes.push(NodeHandles {
                node,
                label: node_label(node),
                throttled: None,
            });
            nodes.len() - 1
        }
    };
    &mut nodes[i]
}

/// A Writer's share of the buffered gauges (`writer/inner.rs`): the values it last reported,
/// so that each report adds its change and the gauges sum over every Writer of the process,
/// and the gauges' handles, made at the first report (a key without labels still allocates
/// when a recorder such as Prometheus' retains it: not once per request).
#[derive(Default)]
pub(crate) struct Buffered {
    #[cfg(feature = "metrics")]
    last: std::sync::Mutex<(usize, usize)>,
    #[cfg(feature = "metrics")]
    gauges: std::sync::OnceLock<(metrics::Gauge, metrics::Gauge)>,
}

impl std::fmt::Debug for Buffered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Buffered")
    }
}

impl Buffered {
    /// The Writer now holds `records` records of `bytes` bytes (once per ended request).
    #[inline(always)]
    #[allow(unused_variables)]
    pub(crate) fn report(&self, records: usize, bytes: usize) {
        #[cfg(feature = "metrics")]
        {
            let Ok(mut last) = self.last.lock() else {
                return;
            };
            let (r0, b0) = std::mem::replace(&mut *last, (records, bytes));
            let (r, b) = self.gauges.get_or_init(|| {
                (
                    metrics::gauge!(BUFFERED_RECORDS),
                    metrics::gauge!(BUFFERED_BYTES),
                )
            });
            r.increment(records as f64 - r0 as f64);
            b.increment(bytes as f64 - b0 as f64);
        }
    }
}

impl Drop for Buffered {
    fn drop(&mut self) {
        // A Writer dropped with records still buffered takes them out of the gauges.
        self.report(0, 0);
    }
}

/// The application's processing time of messages of one topic, as
/// `messaging.process.duration` (OpenTelemetry's messaging conventions): make one per topic
/// (or per batch) with [`ProcessMeter::new`], then time each message with
/// [`ProcessMeter::start`], whose guard records when dropped. The histogram's handle is looked
/// up once, in `new`: timing a message reads the clock twice and records one value, with no
/// allocation. Without the cargo feature `metrics` both are empty and read no clock.
///
/// ```
/// # async fn run(reader: kafkit::Reader) -> kafkit::Result<()> {
/// use kafkit::meter::ProcessMeter;
/// for part in reader.next_batch().await? {
///     let meter = ProcessMeter::new(&part.topic, None);
///     for record in &part.records {
///         let _timer = meter.start(); // recorded when it goes out of scope
///         let _ = record.value.as_ref(); // ... process the record ...
///     }
/// }
/// # Ok(()) }
/// ```
pub struct ProcessMeter {
    #[cfg(feature = "metrics")]
    histogram: metrics::Histogram,
}

impl std::fmt::Debug for ProcessMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProcessMeter")
    }
}

impl ProcessMeter {
    /// The meter of messages of `topic`, read by a member of `group` (when one), labelled
    /// `messaging.destination.name` and `messaging.consumer.group.name`.
    #[allow(unused_variables)]
    pub fn new(topic: &std::sync::Arc<str>, group: Option<&str>) -> ProcessMeter {
        #[cfg(feature = "metrics")]
        {
            let topic = metrics::SharedString::from(std::sync::Arc::clone(topic));
            let histogram = match group {
                None => metrics::histogram!(PROCESS_DURATION,
                    "messaging.system" => SYSTEM, "messaging.operation.name" => "process",
                    "messaging.destination.name" => topic),
                Some(g) => metrics::histogram!(PROCESS_DURATION,
                    "messaging.system" => SYSTEM, "messaging.operation.name" => "process",
                    "messaging.destination.name" => topic,
                    "messaging.consumer.group.name" => g.to_owned()),
            };
            ProcessMeter { histogram }
        }
        #[cfg(not(feature = "metrics"))]
        ProcessMeter {}
    }

    /// Starts timing one message; the guard records the time since when dropped.
    #[inline]
    pub fn start(&self) -> ProcessTimer<'_> {
        ProcessTimer {
            meter: self,
            started: start(),
        }
    }

    /// Records one message's processing time measured by the caller.
    #[inline]
    #[allow(unused_variables)]
    pub fn record(&self, took: std::time::Duration) {
        #[cfg(feature = "metrics")]
        self.histogram.record(took.as_secs_f64());
    }
}

/// A running [`ProcessMeter::start`] timer: records `messaging.process.duration` when dropped.
#[must_use = "the timer records when dropped: bind it (`let _timer = ...`) for the processing"]
pub struct ProcessTimer<'a> {
    #[allow(dead_code)]
    meter: &'a ProcessMeter,
    #[allow(dead_code)]
    started: Started,
}

impl std::fmt::Debug for ProcessTimer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProcessTimer")
    }
}

impl Drop for ProcessTimer<'_> {
    #[inline]
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        self.meter.record(self.started.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_declared_once() {
        let mut names: Vec<&str> = METRICS.iter().map(|m| m.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), METRICS.len());
        // Counters of the kafkit family end in `.total`, as kprom's (and Prometheus') do.
        for &(name, kind, ..) in METRICS {
            if name.starts_with("kafkit.") {
                assert_eq!(kind == Kind::Counter, name.ends_with(".total"), "{name}");
            }
        }
    }

    /// `succeeded`'s literal labels are `Op::labels`' (written twice so that the key is
    /// static): each op's success registers exactly these.
    #[cfg(feature = "metrics")]
    #[test]
    fn a_success_has_its_ops_labels() {
        use std::sync::Mutex;

        /// Keeps the key of every histogram registered.
        #[derive(Default)]
        struct Keys(Mutex<Vec<metrics::Key>>);
        impl metrics::Recorder for Keys {
            fn describe_counter(
                &self,
                _: metrics::KeyName,
                _: Option<metrics::Unit>,
                _: metrics::SharedString,
            ) {
            }
            fn describe_gauge(
                &self,
                _: metrics::KeyName,
                _: Option<metrics::Unit>,
                _: metrics::SharedString,
            ) {
            }
            fn describe_histogram(
                &self,
                _: metrics::KeyName,
                _: Option<metrics::Unit>,
                _: metrics::SharedString,
            ) {
            }
            fn register_counter(
                &self,
                _: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Counter {
                metrics::Counter::noop()
            }
            fn register_gauge(
                &self,
                _: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Gauge {
                metrics::Gauge::noop()
            }
            fn register_histogram(
                &self,
                key: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Histogram {
                self.0.lock().expect("keys").push(key.clone());
                metrics::Histogram::noop()
            }
        }
        let keys = Keys::default();
        for op in [Op::Send, Op::Poll, Op::Commit, Op::Acknowledge] {
            metrics::with_local_recorder(&keys, || operation_duration(op, start(), || None));
            let key = keys.0.lock().expect("keys").pop().expect("a histogram");
            let (name, kind) = op.labels();
            let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
            assert_eq!(key.name(), OPERATION_DURATION);
            assert_eq!(
                labels,
                [
                    ("messaging.system", SYSTEM),
                    ("messaging.operation.name", name),
                    ("messaging.operation.type", kind)
                ],
                "{op:?}"
            );
        }
    }

    #[cfg(feature = "metrics")]
    #[test]
    fn recordings_reach_the_local_recorder() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU64, Ordering};

        /// Sums every counter increment, whatever its key, and counts the registrations.
        #[derive(Default)]
        struct Sum(Arc<AtomicU64>, Arc<AtomicU64>);
        struct Handle(Arc<AtomicU64>);
        impl metrics::CounterFn for Handle {
            fn increment(&self, v: u64) {
                self.0.fetch_add(v, Ordering::Relaxed);
            }
            fn absolute(&self, _: u64) {}
        }
        impl metrics::Recorder for Sum {
            fn describe_counter(
                &self,
                _: metrics::KeyName,
                _: Option<metrics::Unit>,
                _: metrics::SharedString,
            ) {
            }
            fn describe_gauge(
                &self,
                _: metrics::KeyName,
                _: Option<metrics::Unit>,
                _: metrics::SharedString,
            ) {
            }
            fn describe_histogram(
                &self,
                _: metrics::KeyName,
                _: Option<metrics::Unit>,
                _: metrics::SharedString,
            ) {
            }
            fn register_counter(
                &self,
                key: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Counter {
                assert_eq!(key.name(), SENT_MESSAGES);
                self.1.fetch_add(1, Ordering::Relaxed);
                metrics::Counter::from_arc(Arc::new(Handle(Arc::clone(&self.0))))
            }
            fn register_gauge(
                &self,
                _: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Gauge {
                metrics::Gauge::noop()
            }
            fn register_histogram(
                &self,
                _: &metrics::Key,
                _: &metrics::Metadata<'_>,
            ) -> metrics::Histogram {
                metrics::Histogram::noop()
            }
        }
        let sum = Sum::default();
        let (seen, registered) = (Arc::clone(&sum.0), Arc::clone(&sum.1));
        let topic: Arc<str> = Arc::from("t");
        metrics::with_local_recorder(&sum, || {
            let meter = ProduceMeter::default();
            meter.sent_messages(&topic, 3, None);
            meter.sent_messages(&topic, 4, Some("REQUEST_TIMED_OUT"));
            // The success's counter is the Writer's, made once; a failure builds its key.
            meter.sent_messages(&topic, 5, None);
        });
        assert_eq!(seen.load(Ordering::Relaxed), 12);
        assert_eq!(registered.load(Ordering::Relaxed), 2);

        // A tally records once per run of batches of one topic and outcome: t t t (ok),
        // t (failed), u, t (ok again) are four recordings of 1 + 2 + 3, 4, 5, 6, with three
        // registrations (t's and u's successes, t's failure).
        let other: Arc<str> = Arc::from("u");
        let same_name: Arc<str> = Arc::from("t");
        metrics::with_local_recorder(&sum, || {
            let meter = ProduceMeter::default();
            let mut tally = SentTally::new(&meter);
            tally.add(&topic, 1, || None);
            tally.add(&topic, 2, || None);
            tally.add(&same_name, 3, || None);
            tally.add(&topic, 4, || Some("REQUEST_TIMED_OUT"));
            tally.add(&other, 5, || None);
            tally.add(&topic, 6, || None);
        });
        assert_eq!(seen.load(Ordering::Relaxed), 12 + 21);
        assert_eq!(registered.load(Ordering::Relaxed), 2 + 3);
    }
}
