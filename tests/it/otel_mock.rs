//! Tracing spans on OpenTelemetry's messaging conventions (`kafkit::OTEL_SEMCONV_VERSION`) on
//! librdkafka's mock cluster: a send, a group member's poll and its commit make spans with the
//! conventions' names and attributes, a W3C `traceparent` travels from a producer record to
//! the consumer, and with no subscriber interested in `kafkit::otel` no span is made.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use integration_tests::{mock_cluster, unique_topic};
use kafkit::{
    AutoOffsetReset, GroupReader, ProducerRecord, Reader, TraceParent, Transport, Writer,
};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

const GUARD: Duration = Duration::from_secs(30);

/// One span: its id, name and fields (values as strings).
type Made = (Id, &'static str, HashMap<String, String>);

/// Every `kafkit::otel` span made.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Made>>>);

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
    fn named(&self, name: &str) -> Vec<HashMap<String, String>> {
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

fn field<'a>(f: &'a HashMap<String, String>, k: &str) -> &'a str {
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
    let meta = tokio::time::timeout(GUARD, writer.produce(ProducerRecord::new(&*topic, "v")))
        .await
        .expect("in time")
        .expect("produced");
    writer.close(GUARD).await.expect("closed");
    // The consumer's path: a poll that hands out the record.
    let reader = Reader::builder(transport(&cluster.bootstrap_servers()))
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
    assert!(
        spans.0.lock().unwrap().is_empty(),
        "no kafkit::otel span is made"
    );
}
