//! Tracing spans of a share group member (KIP-932) on Apache Kafka 4.4 (librdkafka's mock
//! cluster has no share groups): `ShareReader::poll` makes a `poll {topic}` span per call with
//! the share group and the records handed out, its `stream()` one per refill, and
//! `process_spans(true)` gives every record its `process {topic}` span, whose hook gets the
//! record's `traceparent`. The collecting layer is `otel_mock`'s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_core::Stream;
use kafkit::{ProducerRecord, ShareReader, ShareRecord, TraceParent, Writer};
use tracing_subscriber::layer::SubscriberExt;

use crate::otel_mock::{Spans, field};
use crate::share_kafka::{topic_and_group, transport};

/// The bound on every wait of these tests.
const T: Duration = Duration::from_secs(60);

const TP: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Writes `n` records `v0`.. to `topic` in one batch, each with the traceparent `TP` from the
/// Writer's `traceparent_from`.
async fn write(topic: &str, n: usize) {
    let tp = TraceParent::parse(TP).expect("traceparent");
    let w = Writer::builder(transport())
        .linger(Duration::from_millis(200))
        .traceparent_from(move || Some(tp))
        .build()
        .expect("writer");
    let records = (0..n)
        .map(|i| ProducerRecord::new(topic, format!("v{i}")).key(format!("k{i}")))
        .collect();
    tokio::time::timeout(T, w.write(records))
        .await
        .expect("in time")
        .expect("written");
    w.close(Duration::from_secs(10)).await.expect("close");
}

/// The poll spans of `group`.
fn polls(spans: &Spans, group: &str) -> Vec<HashMap<String, String>> {
    spans
        .named("poll")
        .into_iter()
        .filter(|p| p.get("messaging.consumer.group.name").map(String::as_str) == Some(group))
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn otel_share_poll_and_stream_make_poll_and_process_spans() {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(spans.clone());
    let _guard = tracing::subscriber::set_default(subscriber);
    let (topic, group) = topic_and_group("otel-share", 1).await;
    write(&topic, 3).await;

    let hooked: Arc<Mutex<Vec<TraceParent>>> = Arc::default();
    let seen = Arc::clone(&hooked);
    let mut reader = ShareReader::builder(transport(), &*group)
        .topics([&*topic])
        .process_spans(true)
        .on_traceparent(move |_, tp| seen.lock().unwrap().push(*tp))
        .build()
        .expect("share reader");
    // `poll`: one span per call, the records it handed out counted.
    let deadline = tokio::time::Instant::now() + T;
    let mut got: Vec<ShareRecord> = Vec::new();
    while got.len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of 3 records",
            got.len()
        );
        got.extend(reader.poll(Duration::from_secs(1)).await.expect("poll"));
    }
    assert_eq!(got.len(), 3);
    assert!(
        got.iter().all(|r| r.span().is_some()),
        "each record has its span"
    );
    let tp = TraceParent::parse(TP).expect("traceparent");
    assert_eq!(*hooked.lock().unwrap(), vec![tp; 3]);
    let poll = polls(&spans, &group);
    let counts: Vec<i64> = poll
        .iter()
        .map(|p| {
            field(p, "messaging.batch.message_count")
                .parse()
                .expect("a count")
        })
        .collect();
    assert_eq!(counts.iter().sum::<i64>(), 3, "{poll:?}");
    for p in poll
        .iter()
        .filter(|p| field(p, "messaging.batch.message_count") != "0")
    {
        assert_eq!(field(p, "otel.name"), format!("poll {topic}"));
        assert_eq!(field(p, "otel.kind"), "client");
        assert_eq!(field(p, "messaging.operation.type"), "receive");
        assert_eq!(field(p, "messaging.destination.name"), topic);
    }
    let process = spans.named("process");
    assert_eq!(process.len(), 3, "{process:?}");
    for p in &process {
        assert_eq!(field(p, "otel.name"), format!("process {topic}"));
        assert_eq!(field(p, "messaging.consumer.group.name"), group);
    }
    drop(got);

    // `stream()`: one span for the refill that brought both records in, not one per record.
    write(&topic, 2).await;
    let before = polls(&spans, &group).len();
    let streamed = tokio::time::timeout(T, async {
        let mut s = reader.stream();
        let mut out = Vec::new();
        while out.len() < 2 {
            let next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut s).poll_next(cx)).await;
            out.push(next.expect("an item").expect("a record"));
        }
        out
    })
    .await
    .expect("records in time");
    assert!(streamed.iter().all(|r| r.span().is_some()));
    let refills: Vec<_> = polls(&spans, &group).split_off(before);
    assert_eq!(refills.len(), 1, "one poll span per refill: {refills:?}");
    assert_eq!(field(&refills[0], "messaging.batch.message_count"), "2");
    assert_eq!(spans.named("process").len(), 5);
    drop(streamed);
    reader.close(Duration::from_secs(10)).await.expect("close");
}
