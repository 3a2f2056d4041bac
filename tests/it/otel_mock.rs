//! Tracing spans on OpenTelemetry's messaging conventions (`kafkit::OTEL_SEMCONV_VERSION`) on
//! librdkafka's mock cluster: a send, a group member's poll and its commit make spans with the
//! conventions' names and attributes, a W3C `traceparent` travels from a producer record to
//! the consumer, and with no subscriber interested in `kafkit::otel` no span is made. The
//! one-record-at-a-time APIs (the `Stream`s, `GroupReader::next`) make one poll span per
//! refill; per-record process spans come only when asked; the Writer's `traceparent_from`
//! puts the header on the wire and the readers' `on_traceparent` gets it, wired to a real
//! OpenTelemetry SDK tracer with the code docs/observability.md shows. (`ShareReader` needs
//! Apache Kafka: `otel_kafka.rs`.)

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_core::Stream;
use integration_tests::{mock_cluster, unique_topic};
use kafkit::{
    AutoOffsetReset, ConsumerRecord, GroupReader, ProducerRecord, Reader, StartOffset, TraceParent,
    Transport, Writer,
};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

const GUARD: Duration = Duration::from_secs(30);

/// One span: its id, name and fields (values as strings).
type Made = (Id, &'static str, HashMap<String, String>);

/// Every `kafkit::otel` span made.
#[derive(Clone, Default)]
pub(crate) struct Spans(Arc<Mutex<Vec<Made>>>);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _: Context<'_, S>) {
        if attrs.metadata().target() != kafkit::OTEL_TARGET {
            return;
        }
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        let name = attrs.metadata().name();
        self.0.lock().unwrap().push((id.clone(), name, fields));
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        let mut all = self.0.lock().unwrap();
        if let Some((_, _, fields)) = all.iter_mut().rev().find(|(i, _, _)| i == id) {
            values.record(&mut Fields(fields));
        }
    }
}

impl Spans {
    pub(crate) fn named(&self, name: &str) -> Vec<HashMap<String, String>> {
        let all = self.0.lock().unwrap();
        all.iter()
            .filter(|(_, n, _)| *n == name)
            .map(|(_, _, f)| f.clone())
            .collect()
    }
}

fn transport(bootstrap: &str) -> Transport {
    Transport::builder(bootstrap.split(','))
        .retry_backoff(Duration::from_millis(50))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport")
}

pub(crate) fn field<'a>(f: &'a HashMap<String, String>, k: &str) -> &'a str {
    f.get(k)
        .map(String::as_str)
        .unwrap_or_else(|| panic!("no {k} in {f:?}"))
}

// On one thread, so that the thread's subscriber sees the spans of the client's tasks.
#[tokio::test(flavor = "current_thread")]
async fn send_poll_and_commit_make_the_conventions_spans() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let cluster = mock_cluster(1);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("otel");
    cluster.create_topic(&topic, 1, 1).expect("topic");

    let writer = Writer::builder(transport(&bootstrap))
        .build()
        .expect("writer");
    let parent = TraceParent::parse(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        .expect("traceparent");
    let record = ProducerRecord::new(&*topic, "v")
        .key("k")
        .traceparent(&parent);
    tokio::time::timeout(GUARD, writer.produce(record))
        .await
        .expect("in time")
        .expect("produced");
    writer.close(GUARD).await.expect("closed");

    let send = spans.named("send");
    assert_eq!(send.len(), 1, "{send:?}");
    let s = &send[0];
    assert_eq!(field(s, "otel.name"), format!("send {topic}"));
    assert_eq!(field(s, "otel.kind"), "producer");
    assert_eq!(field(s, "messaging.system"), "kafka");
    assert_eq!(field(s, "messaging.operation.name"), "send");
    assert_eq!(field(s, "messaging.operation.type"), "send");
    assert_eq!(field(s, "messaging.destination.name"), topic);
    assert_eq!(field(s, "messaging.destination.partition.id"), "0");
    assert_eq!(field(s, "messaging.batch.message_count"), "1");
    assert!(!field(s, "server.address").is_empty());
    assert!(!s.contains_key("error.type"), "{s:?}");

    let t = transport(&bootstrap);
    let mut member = GroupReader::builder(t.clone(), "otel-group")
        .subscribe([&*topic])
        .enable_auto_commit(false)
        .reader(Reader::builder(t).auto_offset_reset(AutoOffsetReset::Earliest))
        .build()
        .expect("member");
    let parts = tokio::time::timeout(GUARD, async {
        loop {
            let parts = member.next_batch().await.expect("poll");
            if parts.iter().any(|p| !p.records.is_empty()) {
                break parts;
            }
        }
    })
    .await
    .expect("records in time");
    let got = &parts[0].records[0];
    assert_eq!(TraceParent::from_headers(&got.headers), Some(parent));
    tokio::time::timeout(GUARD, member.commit())
        .await
        .expect("in time")
        .expect("committed");
    member.close().await;

    let poll = spans.named("poll");
    let p = poll
        .iter()
        .find(|p| p.get("messaging.batch.message_count").map(String::as_str) == Some("1"))
        .unwrap_or_else(|| panic!("no poll span with the record: {poll:?}"));
    assert_eq!(field(p, "otel.name"), format!("poll {topic}"));
    assert_eq!(field(p, "otel.kind"), "client");
    assert_eq!(field(p, "messaging.operation.name"), "poll");
    assert_eq!(field(p, "messaging.operation.type"), "receive");
    assert_eq!(field(p, "messaging.consumer.group.name"), "otel-group");
    assert_eq!(field(p, "messaging.destination.name"), topic);
    assert_eq!(field(p, "messaging.destination.partition.id"), "0");

    let commit = spans.named("commit");
    let c = commit
        .iter()
        .find(|c| c.get("messaging.destination.name") == Some(&topic))
        .unwrap_or_else(|| panic!("no commit span of the topic: {commit:?}"));
    assert_eq!(field(c, "otel.name"), format!("commit {topic}"));
    assert_eq!(field(c, "messaging.operation.name"), "commit");
    assert_eq!(field(c, "messaging.operation.type"), "settle");
    assert_eq!(field(c, "messaging.consumer.group.name"), "otel-group");
    assert_eq!(field(c, "messaging.destination.partition.id"), "0");
    assert!(!field(c, "server.address").is_empty());
    assert!(!c.contains_key("error.type"), "{c:?}");
}

/// A layer that turns `kafkit::otel` off, as a filter without it does.
struct WithoutOtel(Spans);

impl<S: tracing::Subscriber> Layer<S> for WithoutOtel {
    fn enabled(&self, metadata: &tracing::Metadata<'_>, _: Context<'_, S>) -> bool {
        metadata.target() != kafkit::OTEL_TARGET
    }
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        self.0.on_new_span(attrs, id, ctx);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn with_no_subscriber_interested_no_span_is_made() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(WithoutOtel(spans.clone()));
    let _guard = tracing::subscriber::set_default(subscriber);
    let cluster = mock_cluster(1);
    let topic = unique_topic("otel-off");
    cluster.create_topic(&topic, 1, 1).expect("topic");
    let writer = Writer::builder(transport(&cluster.bootstrap_servers()))
        .build()
        .expect("writer");
    let tp = TraceParent::parse(TP_HOOK).expect("traceparent");
    let record = ProducerRecord::new(&*topic, "v").traceparent(&tp);
    let meta = tokio::time::timeout(GUARD, writer.produce(record))
        .await
        .expect("in time")
        .expect("produced");
    writer.close(GUARD).await.expect("closed");
    // The consumer's path: a poll that hands out the record, process spans asked for.
    let hooked = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&hooked);
    let reader = Reader::builder(transport(&cluster.bootstrap_servers()))
        .process_spans(true)
        .on_traceparent(move |_, _| {
            count.fetch_add(1, Ordering::Relaxed);
        })
        .build()
        .expect("reader");
    reader
        .assign([(
            &*meta.topic,
            meta.partition,
            kafkit::StartOffset::At(meta.offset),
        )])
        .expect("assigned");
    let parts = tokio::time::timeout(GUARD, reader.next_batch())
        .await
        .expect("in time")
        .expect("polled");
    assert_eq!(parts.iter().map(|p| p.records.len()).sum::<usize>(), 1);
    reader.close();
    let records: Vec<ConsumerRecord> = parts
        .into_iter()
        .flat_map(kafkit::PartitionRecords::into_consumer_records)
        .collect();
    assert!(records.iter().all(|r| r.span().is_none()));
    assert_eq!(hooked.load(Ordering::Relaxed), 0, "no span, no hook");
    assert!(
        spans.0.lock().unwrap().is_empty(),
        "no kafkit::otel span is made"
    );
}

const TP_HOOK: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TP_OWN: &[u8] = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";

/// Writes `records` to `topic` through `writer` in one batch (a linger long enough for all of
/// them), then closes the writer.
async fn write_one_batch(writer: Writer, records: Vec<ProducerRecord>) {
    tokio::time::timeout(GUARD, writer.write(records))
        .await
        .expect("in time")
        .expect("written");
    writer.close(GUARD).await.expect("closed");
}

/// Three records of `topic` with keys `k0`..`k2`, the last with a traceparent of its own.
fn three(topic: &str) -> Vec<ProducerRecord> {
    let own = TraceParent::parse(TP_OWN).expect("traceparent");
    vec![
        ProducerRecord::new(topic, "v0").key("k0"),
        ProducerRecord::new(topic, "v1").key("k1"),
        ProducerRecord::new(topic, "v2").key("k2").traceparent(&own),
    ]
}

/// The next `n` records of a `Stream`.
async fn take<S>(stream: &mut S, n: usize) -> Vec<ConsumerRecord>
where
    S: Stream<Item = kafkit::Result<ConsumerRecord>> + Unpin,
{
    tokio::time::timeout(GUARD, async {
        let mut got = Vec::new();
        while got.len() < n {
            match std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await {
                Some(Ok(r)) => got.push(r),
                other => panic!("a record, not {other:?}"),
            }
        }
        got
    })
    .await
    .expect("records in time")
}

/// The process spans' (offset, key, group) in offset order; each names `topic` and partition 0.
fn process_spans(spans: &Spans, topic: &str) -> Vec<(String, String, Option<String>)> {
    let mut out: Vec<_> = spans
        .named("process")
        .iter()
        .map(|p| {
            assert_eq!(field(p, "otel.name"), format!("process {topic}"));
            assert_eq!(field(p, "otel.kind"), "consumer");
            assert_eq!(field(p, "messaging.operation.type"), "process");
            assert_eq!(field(p, "messaging.destination.name"), topic);
            assert_eq!(field(p, "messaging.destination.partition.id"), "0");
            (
                field(p, "messaging.kafka.offset").to_owned(),
                field(p, "messaging.kafka.message.key").to_owned(),
                p.get("messaging.consumer.group.name").cloned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// The Reader's `Stream` makes one poll span for the partition answer it refills from, not one
/// per record; with `process_spans(true)` every record carries its process span, and
/// `on_traceparent` gets each with the record's traceparent: the Writer's `traceparent_from`
/// filled the two records without one (on the wire: read back here) and left the third's.
#[tokio::test(flavor = "current_thread")]
async fn otel_stream_polls_per_refill_and_process_spans_get_the_traceparent() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let cluster = mock_cluster(1);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("otel-stream");
    cluster.create_topic(&topic, 1, 1).expect("topic");

    let hook_tp = TraceParent::parse(TP_HOOK).expect("traceparent");
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&asked);
    let writer = Writer::builder(transport(&bootstrap))
        .linger(Duration::from_millis(200))
        .traceparent_from(move || {
            counter.fetch_add(1, Ordering::Relaxed);
            Some(hook_tp)
        })
        .build()
        .expect("writer");
    write_one_batch(writer, three(&topic)).await;
    assert_eq!(
        asked.load(Ordering::Relaxed),
        2,
        "asked for the records without a traceparent only"
    );

    /// What the hook got: the span's id and the traceparent.
    type Hooked = Vec<(Option<Id>, TraceParent)>;
    let seen: Arc<Mutex<Hooked>> = Arc::default();
    let hook_seen = Arc::clone(&seen);
    let mut reader = Reader::builder(transport(&bootstrap))
        .process_spans(true)
        .on_traceparent(move |span, tp| hook_seen.lock().unwrap().push((span.id(), *tp)))
        .build()
        .expect("reader");
    reader
        .assign([(&*topic, 0, StartOffset::Earliest)])
        .expect("assigned");
    let got = take(&mut reader, 3).await;
    reader.close();

    // The headers as the broker kept them.
    let own = TraceParent::parse(TP_OWN).expect("traceparent");
    let on_wire: Vec<Option<TraceParent>> = got.iter().map(ConsumerRecord::traceparent).collect();
    assert_eq!(on_wire, vec![Some(hook_tp), Some(hook_tp), Some(own)]);
    // Each record carries its own span, and the hook got that span with its traceparent.
    let ids: Vec<Option<Id>> = got
        .iter()
        .map(|r| r.span().expect("a process span").id())
        .collect();
    assert!(ids.iter().all(Option::is_some), "{ids:?}");
    let expected: Vec<(Option<Id>, TraceParent)> =
        ids.into_iter().zip(on_wire.into_iter().flatten()).collect();
    assert_eq!(*seen.lock().unwrap(), expected);
    let k = |o: &str, k: &str| (o.to_owned(), k.to_owned(), None);
    assert_eq!(
        process_spans(&spans, &topic),
        vec![k("0", "k0"), k("1", "k1"), k("2", "k2")]
    );

    let poll = spans.named("poll");
    assert_eq!(
        poll.len(),
        1,
        "one poll span per refill, not per record: {poll:?}"
    );
    assert_eq!(field(&poll[0], "otel.name"), format!("poll {topic}"));
    assert_eq!(field(&poll[0], "messaging.batch.message_count"), "3");
    assert!(!poll[0].contains_key("messaging.consumer.group.name"));
}

/// A member reading with `GroupReader::next`: one poll span (with the group) per refill, and
/// no process span unless asked; asked on the group builder, each record's process span
/// names the group.
#[tokio::test(flavor = "current_thread")]
async fn otel_group_next_polls_per_refill_and_process_spans_are_off_by_default() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let cluster = mock_cluster(1);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("otel-next");
    cluster.create_topic(&topic, 1, 1).expect("topic");
    let writer = Writer::builder(transport(&bootstrap))
        .linger(Duration::from_millis(200))
        .build()
        .expect("writer");
    write_one_batch(writer, three(&topic)).await;

    let member = |group: &str, on: bool| {
        let t = transport(&bootstrap);
        GroupReader::builder(t.clone(), group)
            .subscribe([&*topic])
            .enable_auto_commit(false)
            .process_spans(on)
            .reader(Reader::builder(t).auto_offset_reset(AutoOffsetReset::Earliest))
            .build()
            .expect("member")
    };
    let next3 = |mut m: GroupReader| async move {
        let got = tokio::time::timeout(GUARD, async {
            let mut got = Vec::new();
            while got.len() < 3 {
                got.push(m.next().await.expect("not closed").expect("a record"));
            }
            got
        })
        .await
        .expect("records in time");
        m.close().await;
        got
    };

    let off = next3(member("otel-off-group", false)).await;
    assert!(off.iter().all(|r| r.span().is_none()), "no span when off");
    assert!(
        spans.named("process").is_empty(),
        "no process span when off"
    );
    let polls = |group: &str| -> Vec<HashMap<String, String>> {
        spans
            .named("poll")
            .into_iter()
            .filter(|p| p.get("messaging.consumer.group.name").map(String::as_str) == Some(group))
            .collect()
    };
    let poll = polls("otel-off-group");
    assert_eq!(
        poll.len(),
        1,
        "one poll span per refill, not per record: {poll:?}"
    );
    assert_eq!(field(&poll[0], "otel.name"), format!("poll {topic}"));
    assert_eq!(field(&poll[0], "messaging.batch.message_count"), "3");

    let on = next3(member("otel-on-group", true)).await;
    assert!(
        on.iter().all(|r| r.span().is_some()),
        "each record has its span"
    );
    let g = |o: &str, k: &str| (o.to_owned(), k.to_owned(), Some("otel-on-group".to_owned()));
    assert_eq!(
        process_spans(&spans, &topic),
        vec![g("0", "k0"), g("1", "k1"), g("2", "k2")]
    );
    assert_eq!(polls("otel-on-group").len(), 1);
}

/// The OpenTelemetry SDK's finished spans.
#[derive(Debug, Clone, Default)]
struct Exported(Arc<Mutex<Vec<opentelemetry_sdk::trace::SpanData>>>);

impl opentelemetry_sdk::trace::SpanExporter for Exported {
    fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> impl std::future::Future<Output = opentelemetry_sdk::error::OTelSdkResult> + Send {
        self.0.lock().unwrap().extend(batch);
        std::future::ready(Ok(()))
    }
}

/// The hooks wired to `tracing-opentelemetry` with the code of docs/observability.md: the
/// Writer carries the sending span's context, and the reader's process spans get it as their
/// parent (`set_parent`) or as a link (`add_link`).
#[tokio::test(flavor = "current_thread")]
async fn otel_traceparent_hooks_wire_to_tracing_opentelemetry() {
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
        TracerProvider as _,
    };
    use tracing::Instrument as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    let exported = Exported::default();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_simple_exporter(exported.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("otel_mock")));
    let _guard = tracing::subscriber::set_default(subscriber);
    let cluster = mock_cluster(1);
    let bootstrap = cluster.bootstrap_servers();
    let topic = unique_topic("otel-sdk");
    cluster.create_topic(&topic, 1, 1).expect("topic");

    // docs/observability.md, "Trace context in records": the producer side.
    let writer = Writer::builder(transport(&bootstrap))
        .traceparent_from(|| {
            let cx = tracing::Span::current().context();
            let sc = cx.span().span_context().clone();
            TraceParent::new(
                sc.trace_id().to_bytes(),
                sc.span_id().to_bytes(),
                sc.trace_flags().to_u8(),
            )
        })
        .build()
        .expect("writer");
    let app = tracing::info_span!("app send");
    let sent = app.context().span().span_context().clone();
    assert!(sent.is_valid() && sent.is_sampled());
    tokio::time::timeout(GUARD, writer.produce(ProducerRecord::new(&*topic, "v")))
        .instrument(app.clone())
        .await
        .expect("in time")
        .expect("produced");
    writer.close(GUARD).await.expect("closed");
    drop(app);

    // The consumer side: the parent, or a link.
    let remote = |tp: &TraceParent| {
        SpanContext::new(
            TraceId::from_bytes(tp.trace_id),
            SpanId::from_bytes(tp.parent_id),
            TraceFlags::new(tp.flags),
            true,
            TraceState::default(),
        )
    };
    let parenting = Reader::builder(transport(&bootstrap))
        .process_spans(true)
        .on_traceparent(move |span, tp| {
            let _ =
                span.set_parent(opentelemetry::Context::new().with_remote_span_context(remote(tp)));
        })
        .build()
        .expect("reader");
    let linking = Reader::builder(transport(&bootstrap))
        .process_spans(true)
        .on_traceparent(move |span, tp| span.add_link(remote(tp)))
        .build()
        .expect("reader");
    for mut reader in [parenting, linking] {
        reader
            .assign([(&*topic, 0, StartOffset::Earliest)])
            .expect("assigned");
        let got = take(&mut reader, 1).await;
        let tp = got[0].traceparent().expect("the header is on the wire");
        assert_eq!(tp.trace_id, sent.trace_id().to_bytes());
        assert_eq!(tp.parent_id, sent.span_id().to_bytes());
        assert!(tp.sampled());
        reader.close();
        // Dropping the record ends its process span: exported at once.
    }

    let done = exported.0.lock().unwrap().clone();
    let process: Vec<_> = done
        .iter()
        .filter(|s| s.name == format!("process {topic}"))
        .collect();
    assert_eq!(
        process.len(),
        2,
        "{:?}",
        done.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let parented = process
        .iter()
        .find(|s| s.parent_span_id == sent.span_id())
        .unwrap_or_else(|| panic!("a process span under the sender's: {process:?}"));
    assert_eq!(parented.span_context.trace_id(), sent.trace_id());
    assert!(parented.parent_span_is_remote);
    assert_eq!(parented.span_kind, opentelemetry::trace::SpanKind::Consumer);
    let linked = process
        .iter()
        .find(|s| {
            s.links.iter().any(|l| {
                let (at, remote) = (&l.span_context, l.span_context.is_remote());
                (at.trace_id(), at.span_id(), remote) == (sent.trace_id(), sent.span_id(), true)
            })
        })
        .unwrap_or_else(|| panic!("a process span linked to the sender's: {process:?}"));
    assert_ne!(
        linked.span_context.trace_id(),
        sent.trace_id(),
        "a trace of its own"
    );
    let send = done
        .iter()
        .find(|s| s.name == format!("send {topic}"))
        .expect("the send span");
    assert_eq!(send.span_kind, opentelemetry::trace::SpanKind::Producer);
}
