//! Tracing spans named and shaped after OpenTelemetry's messaging semantic conventions
//! ([`OTEL_SEMCONV_VERSION`], the Kafka page), and W3C Trace Context's `traceparent`
//! ([`TraceParent`]).
//!
//! The spans are plain `tracing` spans under the target [`OTEL_TARGET`] at INFO: a
//! `tracing-opentelemetry` layer maps them (`otel.name` is the span name the conventions ask
//! for, `send {topic}`, and `otel.kind` its kind); the library itself has no OpenTelemetry
//! dependency. Every attribute a sampler may read is set when the span is made; what is known
//! only at the end (`error.type`, a poll's record count) is declared `Empty` and recorded later.
//! A span macro checks its callsite's interest before it evaluates a field: with no subscriber
//! interested in `kafkit::otel` at INFO, each builder here costs a load and a branch, and
//! the callers skip their loops when the first span comes back disabled.
//!
//! This floor holds the vocabulary because the writer, the reader, the group member and the
//! share group member all make these spans and none of them may import another.

use std::sync::Arc;

use kafkit_protocol::ErrorCode;
use kafkit_protocol::records::RecordHeader;
use tracing::Span;

/// The OpenTelemetry semantic conventions version whose messaging span names and attributes
/// kafkit's spans follow (the Kafka page, `docs/messaging/kafka.md`). The messaging
/// conventions are still marked *Development*: a newer version is adopted deliberately.
pub const OTEL_SEMCONV_VERSION: &str = "1.44.0";

/// The `tracing` target of every span this module makes: a filter such as
/// `kafkit::otel=info` turns them on without the rest of kafkit's events.
pub const OTEL_TARGET: &str = "kafkit::otel";

/// `error.type` for a failure: the Kafka error code's name (`NOT_LEADER_OR_FOLLOWER`) when
/// there is one, else the conventions' fallback `_OTHER` (low cardinality, as they ask).
pub(crate) fn error_type(code: Option<ErrorCode>) -> &'static str {
    match code {
        Some(c) if c != ErrorCode::NONE => c.name(),
        _ => "_OTHER",
    }
}

/// Records `error.type` on `span` (a no-op on a disabled span).
pub(crate) fn record_error(span: &Span, code: Option<ErrorCode>) {
    if !span.is_disabled() {
        span.record("error.type", error_type(code));
    }
}

/// Where a span's requests go: the broker's advertised host and port, the cluster id; each
/// `None` when the metadata does not have it yet.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Server<'a> {
    pub(crate) address: Option<&'a str>,
    pub(crate) port: Option<i64>,
    pub(crate) cluster_id: Option<&'a str>,
}

/// The producer's `send {topic}` span for one partition's batch of `count` records in one
/// Produce request (kind PRODUCER, operation type `send`).
#[inline]
pub(crate) fn send_span(topic: &str, partition: i32, count: usize, server: Server<'_>) -> Span {
    tracing::info_span!(
        target: "kafkit::otel",
        "send",
        otel.name = %format_args!("send {topic}"),
        otel.kind = "producer",
        messaging.system = "kafka",
        messaging.operation.name = "send",
        "messaging.operation.type" = "send",
        messaging.destination.name = topic,
        messaging.destination.partition.id = %partition,
        messaging.batch.message_count = count as i64,
        server.address = server.address,
        server.port = server.port,
        messaging.kafka.cluster.id = server.cluster_id,
        "error.type" = tracing::field::Empty,
    )
}

/// A consumer's `poll` span (kind CLIENT, operation type `receive`): made when the poll
/// starts; [`poll_done`] names the topic once the records are known.
#[inline]
pub(crate) fn poll_span(group: Option<&str>) -> Span {
    tracing::info_span!(
        target: "kafkit::otel",
        "poll",
        otel.name = "poll",
        otel.kind = "client",
        messaging.system = "kafka",
        messaging.operation.name = "poll",
        "messaging.operation.type" = "receive",
        messaging.consumer.group.name = group,
        messaging.destination.name = tracing::field::Empty,
        messaging.destination.partition.id = tracing::field::Empty,
        messaging.batch.message_count = tracing::field::Empty,
        "error.type" = tracing::field::Empty,
    )
}

/// Ends a poll span's attributes: the record count, and the destination when every record
/// came from one topic (`poll {topic}`; several topics keep the name `poll`, as the
/// conventions name an operation without a single destination) and its partition when one.
pub(crate) fn poll_done<'a>(span: &Span, parts: impl Iterator<Item = (&'a str, i32, usize)>) {
    if span.is_disabled() {
        return;
    }
    let (mut count, mut topic, mut partition, mut one_topic, mut one_part) =
        (0usize, None::<&str>, None, true, true);
    for (t, p, n) in parts {
        count += n;
        match topic {
            None => (topic, partition) = (Some(t), Some(p)),
            Some(seen) if seen != t => (one_topic, one_part) = (false, false),
            Some(_) => one_part &= partition == Some(p),
        }
    }
    span.record("messaging.batch.message_count", count as i64);
    if let (Some(t), true) = (topic, one_topic) {
        span.record("otel.name", format_args!("poll {t}").to_string());
        span.record("messaging.destination.name", t);
        if let (Some(p), true) = (partition, one_part) {
            span.record("messaging.destination.partition.id", p.to_string());
        }
    }
}

/// A group member's `commit` span for one OffsetCommit request (kind CLIENT, operation type
/// `settle`); the topic and partition only when the commit names one.
#[inline]
pub(crate) fn commit_span(
    group: &str,
    topic: Option<&str>,
    partition: Option<i32>,
    server: Server<'_>,
) -> Span {
    tracing::info_span!(
        target: "kafkit::otel",
        "commit",
        otel.name = %topic.map_or_else(|| "commit".to_owned(), |t| format!("commit {t}")),
        otel.kind = "client",
        messaging.system = "kafka",
        messaging.operation.name = "commit",
        "messaging.operation.type" = "settle",
        messaging.consumer.group.name = group,
        messaging.destination.name = topic,
        messaging.destination.partition.id = partition.map(|p| p as i64),
        server.address = server.address,
        server.port = server.port,
        messaging.kafka.cluster.id = server.cluster_id,
        "error.type" = tracing::field::Empty,
    )
}

/// A share group member's acknowledgement span (`ShareReader::commit`, kind CLIENT,
/// operation name `acknowledge`, type `settle`).
#[inline]
pub(crate) fn settle_span(group: &str) -> Span {
    tracing::info_span!(
        target: "kafkit::otel",
        "acknowledge",
        otel.name = "acknowledge",
        otel.kind = "client",
        messaging.system = "kafka",
        messaging.operation.name = "acknowledge",
        "messaging.operation.type" = "settle",
        messaging.consumer.group.name = group,
        messaging.batch.message_count = tracing::field::Empty,
        "error.type" = tracing::field::Empty,
    )
}

/// The per-record `process {topic}` span (kind CONSUMER, operation type `process`), with the
/// record's partition, offset and key (when UTF-8: a key with no canonical string form is
/// left out, as the conventions ask).
#[inline]
pub(crate) fn process_span(
    group: Option<&str>,
    topic: &str,
    partition: i32,
    offset: i64,
    key: Option<&[u8]>,
) -> Span {
    tracing::info_span!(
        target: "kafkit::otel",
        "process",
        otel.name = %format_args!("process {topic}"),
        otel.kind = "consumer",
        messaging.system = "kafka",
        messaging.operation.name = "process",
        "messaging.operation.type" = "process",
        messaging.consumer.group.name = group,
        messaging.destination.name = topic,
        messaging.destination.partition.id = %partition,
        messaging.kafka.offset = offset,
        messaging.kafka.message.key = key.and_then(|k| std::str::from_utf8(k).ok()),
        "error.type" = tracing::field::Empty,
    )
}

/// The poll span of an API that hands out one record at a time (the `Stream`s,
/// `GroupReader::next`): one span per refill of its buffer, not per record. Made when the
/// refill starts (the first poll that finds the buffer empty), kept across `Pending`, and
/// ended with what the refill brought in ([`RefillSpan::done`]) or its error. Holds nothing
/// between refills; with no subscriber interested it holds a disabled span.
#[derive(Debug, Default)]
pub(crate) struct RefillSpan(Option<Span>);

impl RefillSpan {
    /// Starts the refill's `poll` span unless one is running.
    #[inline]
    pub(crate) fn start(&mut self, group: Option<&str>) {
        if self.0.is_none() {
            self.0 = Some(poll_span(group));
        }
    }

    /// Ends the running span (if any) with the records the refill brought in: `(topic,
    /// partition, count)` per part, as [`poll_done`].
    pub(crate) fn done<'a>(&mut self, parts: impl Iterator<Item = (&'a str, i32, usize)>) {
        if let Some(span) = self.0.take() {
            poll_done(&span, parts);
        }
    }

    /// Ends the running span (if any) with `error.type`.
    pub(crate) fn failed(&mut self, code: Option<ErrorCode>) {
        if let Some(span) = self.0.take() {
            record_error(&span, code);
        }
    }
}

/// The application's hook for a consumer's process spans: called with each `process {topic}`
/// span the reader makes (`process_spans(true)` on `ReaderBuilder`, `GroupReaderBuilder` or
/// `ShareReaderBuilder`) whose record carries a valid `traceparent`, before the record is
/// handed out, so the application can make the producer's span the parent
/// (`tracing_opentelemetry::OpenTelemetrySpanExt::set_parent`) or a link (`add_link`). It runs
/// on the task that takes the record: keep it short, never block.
pub type TraceParentHook = Arc<dyn Fn(&Span, &TraceParent) + Send + Sync>;

/// The application's source of the trace context a Writer puts in records that carry no
/// `traceparent` header (`WriterBuilder::traceparent_from`): called once per such record when
/// the writer takes it, on the caller's task (so `tracing::Span::current()` is the caller's
/// span); `None` leaves the record as it is.
pub type TraceParentSource = Arc<dyn Fn() -> Option<TraceParent> + Send + Sync>;

/// `headers` with a `traceparent` from `source` appended: `None` (nothing to change) when
/// they already have a `traceparent` header (even a malformed one: a second one would make
/// both ambiguous) or the source gives none.
pub(crate) fn with_traceparent(
    source: &TraceParentSource,
    headers: &[RecordHeader],
) -> Option<Vec<RecordHeader>> {
    if headers
        .iter()
        .any(|h| &h.key[..] == TraceParent::HEADER.as_bytes())
    {
        return None;
    }
    let tp = source()?;
    let mut out = Vec::with_capacity(headers.len() + 1);
    out.extend_from_slice(headers);
    out.push(RecordHeader::new(
        TraceParent::HEADER,
        Some(bytes::Bytes::from(tp.to_string())),
    ));
    Some(out)
}

/// A consumer's per-record process spans, when its builder turned them on: the group for
/// `messaging.consumer.group.name` (a member's), and the application's [`TraceParentHook`].
/// Cloned per partition answer handed out (two reference counts), used per record.
#[derive(Clone, Default)]
pub(crate) struct ProcessSpans {
    pub(crate) group: Option<Arc<str>>,
    pub(crate) hook: Option<TraceParentHook>,
}

impl std::fmt::Debug for ProcessSpans {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessSpans")
            .field("group", &self.group)
            .field("hook", &self.hook.is_some())
            .finish()
    }
}

impl ProcessSpans {
    /// The process span of one record; none (no allocation) when no subscriber is
    /// interested. The hook is called when the record carries a valid `traceparent`.
    pub(crate) fn span(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        key: Option<&[u8]>,
        headers: &[RecordHeader],
    ) -> RecordSpan {
        let span = process_span(self.group.as_deref(), topic, partition, offset, key);
        if span.is_disabled() {
            return RecordSpan::default();
        }
        if let Some(hook) = &self.hook
            && let Some(tp) = TraceParent::from_headers(headers)
        {
            hook(&span, &tp);
        }
        RecordSpan(Some(Box::new(span)))
    }
}

/// The process span a record carries, if any (boxed: a record without one pays one
/// pointer). Not part of the record's value: two records equal but for their spans are equal.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecordSpan(pub(crate) Option<Box<Span>>);

impl PartialEq for RecordSpan {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for RecordSpan {}

/// A W3C Trace Context `traceparent` (<https://www.w3.org/TR/trace-context/#traceparent-header>):
/// the trace id, the parent span id and the trace flags a producer puts in a record's
/// header `traceparent` for the consumer's spans to link to.
///
/// Written as version `00`: `00-{trace_id:32 hex}-{parent_id:16 hex}-{flags:2 hex}`.
///
/// ```
/// use kafkit::TraceParent;
/// let tp = TraceParent::parse(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
/// assert!(tp.sampled());
/// assert_eq!(tp.to_string(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
/// assert_eq!(TraceParent::parse(b"garbage"), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// The trace id (never all zeros).
    pub trace_id: [u8; 16],
    /// The id of the span that sent the record (never all zeros).
    pub parent_id: [u8; 8],
    /// The trace flags (bit 0: sampled).
    pub flags: u8,
}

impl TraceParent {
    /// The header key: `traceparent`.
    pub const HEADER: &'static str = "traceparent";

    /// A traceparent of these ids and flags; `None` when either id is all zeros (invalid).
    pub fn new(trace_id: [u8; 16], parent_id: [u8; 8], flags: u8) -> Option<Self> {
        let valid = trace_id != [0; 16] && parent_id != [0; 8];
        valid.then_some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// Whether the sampled flag is set.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// Parses a header value; `None` for anything the W3C format refuses: a wrong length or
    /// separator, upper-case or non-hex digits, version `ff`, all-zero ids, or a version `00`
    /// value with trailing data. A higher version is read by its first four fields, as the
    /// specification asks, when what follows starts with `-`.
    pub fn parse(value: &[u8]) -> Option<Self> {
        if value.len() < 55 || value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
            return None;
        }
        let version = hex::<1>(&value[0..2])?[0];
        let rest_ok = match version {
            0xff => false,
            0 => value.len() == 55,
            _ => value.len() == 55 || value[55] == b'-',
        };
        if !rest_ok {
            return None;
        }
        let trace_id = hex::<16>(&value[3..35])?;
        let parent_id = hex::<8>(&value[36..52])?;
        let flags = hex::<1>(&value[53..55])?[0];
        TraceParent::new(trace_id, parent_id, flags)
    }

    /// The traceparent of `headers`: `None` when there is no `traceparent` header, more than
    /// one (ambiguous), a null one, or one that does not parse.
    pub fn from_headers(headers: &[RecordHeader]) -> Option<Self> {
        let mut found = headers
            .iter()
            .filter(|h| &h.key[..] == Self::HEADER.as_bytes());
        let first = found.next()?;
        if found.next().is_some() {
            return None;
        }
        TraceParent::parse(first.value.as_deref()?)
    }

    /// Puts this traceparent in `headers`, in place of any `traceparent` already there.
    pub fn inject(&self, headers: &mut Vec<RecordHeader>) {
        headers.retain(|h| &h.key[..] != Self::HEADER.as_bytes());
        headers.push(RecordHeader::new(
            Self::HEADER,
            Some(bytes::Bytes::from(self.to_string())),
        ));
    }
}

impl std::fmt::Display for TraceParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("00-")?;
        self.trace_id
            .iter()
            .try_for_each(|b| write!(f, "{b:02x}"))?;
        f.write_str("-")?;
        self.parent_id
            .iter()
            .try_for_each(|b| write!(f, "{b:02x}"))?;
        write!(f, "-{:02x}", self.flags)
    }
}

/// `N` bytes from `2 * N` lower-case hex digits (the format allows no upper case).
fn hex<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *o = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_round_trips() {
        let tp = TraceParent::parse(GOOD.as_bytes()).unwrap();
        assert_eq!(tp.trace_id[0], 0x4b);
        assert_eq!(tp.parent_id[7], 0xb7);
        assert!(tp.sampled());
        assert_eq!(tp.to_string(), GOOD);
        let unsampled = TraceParent { flags: 0, ..tp };
        assert!(!unsampled.sampled());
        assert_eq!(
            TraceParent::parse(unsampled.to_string().as_bytes()),
            Some(unsampled)
        );
    }

    #[test]
    fn malformed_traceparents_are_none() {
        let bad: &[&[u8]] = &[
            b"",
            b"00",
            &GOOD.as_bytes()[..54],
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", // upper case
            b"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", // not hex
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero parent id
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // separator
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", // v00 trailing
            b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", // v01 bad tail
            "00-4bf92f3577b34da6a3ce929d0e0e473é-00f067aa0ba902b7-01".as_bytes(), // non-ASCII
            &[0xff; 80],
        ];
        for b in bad {
            assert_eq!(
                TraceParent::parse(b),
                None,
                "{:?}",
                String::from_utf8_lossy(b)
            );
        }
        // A later version with more fields is read by its first four (forward compatibility).
        let v1 = b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        assert!(TraceParent::parse(v1).is_some());
    }

    #[test]
    fn headers_carry_one_traceparent() {
        let tp = TraceParent::parse(GOOD.as_bytes()).unwrap();
        let mut headers = vec![
            RecordHeader::new("other", Some(bytes::Bytes::from_static(b"x"))),
            RecordHeader::new("traceparent", Some(bytes::Bytes::from_static(b"stale"))),
        ];
        assert_eq!(TraceParent::from_headers(&headers), None);
        tp.inject(&mut headers);
        assert_eq!(headers.len(), 2);
        assert_eq!(TraceParent::from_headers(&headers), Some(tp));
        // Two traceparents are ambiguous; a null one is none.
        headers.push(RecordHeader::new(
            "traceparent",
            Some(bytes::Bytes::from(GOOD)),
        ));
        assert_eq!(TraceParent::from_headers(&headers), None);
        let null = [RecordHeader::new("traceparent", None)];
        assert_eq!(TraceParent::from_headers(&null), None);
        assert_eq!(TraceParent::from_headers(&[]), None);
    }

    #[test]
    fn error_types_are_code_names() {
        assert_eq!(
            error_type(Some(ErrorCode::NOT_LEADER_OR_FOLLOWER)),
            "NOT_LEADER_OR_FOLLOWER"
        );
        assert_eq!(error_type(None), "_OTHER");
        assert_eq!(error_type(Some(ErrorCode::NONE)), "_OTHER");
    }

    #[test]
    fn the_writers_source_fills_only_a_missing_traceparent() {
        let tp = TraceParent::parse(GOOD.as_bytes()).unwrap();
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = Arc::clone(&calls);
        let source: TraceParentSource = Arc::new(move || {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Some(tp)
        });
        let other = RecordHeader::new("other", Some(bytes::Bytes::from_static(b"x")));
        let filled = with_traceparent(&source, std::slice::from_ref(&other)).unwrap();
        assert_eq!(filled.len(), 2);
        assert_eq!(
            filled[0], other,
            "the record's headers come first, in order"
        );
        assert_eq!(TraceParent::from_headers(&filled), Some(tp));
        // A record with a traceparent of its own keeps it, malformed or not, and the source
        // is not asked.
        let own = [RecordHeader::new(
            "traceparent",
            Some(bytes::Bytes::from_static(b"x")),
        )];
        assert_eq!(with_traceparent(&source, &own), None);
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 1);
        let nothing: TraceParentSource = Arc::new(|| None);
        assert_eq!(with_traceparent(&nothing, &[]), None);
    }

    #[test]
    fn a_records_span_is_not_part_of_its_value() {
        let none = tracing::subscriber::NoSubscriber::default();
        tracing::subscriber::with_default(none, || {
            assert_eq!(
                RecordSpan::default(),
                RecordSpan(Some(Box::new(Span::none())))
            );
        });
    }

    #[test]
    fn with_no_subscriber_no_span_is_built() {
        // With no subscriber interested every builder returns a disabled span (and evaluates
        // none of its fields).
        let none = tracing::subscriber::NoSubscriber::default();
        tracing::subscriber::with_default(none, || {
            assert!(send_span("t", 0, 1, Server::default()).is_disabled());
            assert!(poll_span(Some("g")).is_disabled());
            assert!(commit_span("g", None, None, Server::default()).is_disabled());
            assert!(settle_span("g").is_disabled());
            assert!(process_span(None, "t", 0, 0, None).is_disabled());
            // Process spans on, nobody interested: no span, no allocation, no hook call.
            let hook: TraceParentHook = Arc::new(|_, _| panic!("not called"));
            let spans = ProcessSpans {
                group: Some(Arc::from("g")),
                hook: Some(hook),
            };
            let tp = [RecordHeader::new(
                "traceparent",
                Some(bytes::Bytes::from(GOOD)),
            )];
            assert!(spans.span("t", 0, 0, None, &tp).0.is_none());
            let mut refill = RefillSpan::default();
            refill.start(Some("g"));
            refill.done(std::iter::once(("t", 0, 1)));
            assert!(refill.0.is_none(), "ended");
        });
    }
}
