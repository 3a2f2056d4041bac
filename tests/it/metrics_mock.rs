//! The `metrics` cargo feature on librdkafka's mock cluster: a Writer writes N records and a
//! group member reads them back (timing each record with a `ProcessMeter`), commits and closes,
//! then the transport closes its connections, all under a `metrics-exporter-prometheus`
//! recorder; the scraped text is checked against what was sent, read and closed.
//!
//! The recorder is this thread's own (`metrics::with_local_recorder`) and the client runs on a
//! current-thread runtime inside it: every recording of this test, and none of any other test
//! of the process, reaches it, so per-broker counters can be checked exactly.

use std::sync::Arc;
use std::time::Duration;

use integration_tests::{GroupMock, unique_topic};
use kafkit::meter::ProcessMeter;
use kafkit::protocol::ApiKey;
use kafkit::{AutoOffsetReset, GroupReader, ProducerRecord, Reader, Transport, Writer};
use metrics_exporter_prometheus::PrometheusBuilder;

const RECORDS: u64 = 250;
const PARTITIONS: i32 = 3;
const NODES: [i32; 3] = [1, 2, 3];

/// The sum of the samples of `metric` whose label set has every `label="value"` of `labels`
/// (the exporter writes dots as underscores), and how many lines matched.
pub(crate) fn sum(text: &str, metric: &str, labels: &[(&str, &str)]) -> (f64, usize) {
    let mut total = 0.0;
    let mut lines = 0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, set) = series.split_once('{').unwrap_or((series, ""));
        if name != metric {
            continue;
        }
        if labels
            .iter()
            .all(|(k, v)| set.contains(&format!("{k}=\"{v}\"")))
        {
            total += value.parse::<f64>().expect("a sample value");
            lines += 1;
        }
    }
    (total, lines)
}

/// The value of one series (the sum of the matching lines, asserting there is one).
pub(crate) fn one(text: &str, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let (v, lines) = sum(text, metric, labels);
    assert_eq!(lines, 1, "one {metric} series for {labels:?}:\n{text}");
    v
}

/// What the run saw through the clients' own counters, to check the scrape against.
struct Seen {
    topic: String,
    /// The member's group.
    group: String,
    /// Produce requests, from `WriterStats::produce_requests`.
    produce_requests: u64,
    /// Requests per node (Produce, Fetch) from `Transport::requests_sent`.
    requests: Vec<(i32, u64, u64)>,
}

async fn run(cluster_bootstrap: String, topic: String) -> Seen {
    let transport = Transport::builder(cluster_bootstrap.split(','))
        .retry_backoff(Duration::from_millis(50))
        .build()
        .expect("transport");
    let writer = Writer::builder(transport.clone())
        .linger(Duration::from_millis(5))
        .build()
        .expect("writer");
    let mut pending = Vec::new();
    for i in 0..RECORDS {
        let record = ProducerRecord::new(&topic, format!("v{i}")).partition((i % 3) as i32);
        pending.push(writer.send(record).await.expect("send"));
    }
    for f in pending {
        f.await.expect("written");
    }
    let produce_requests = writer.stats().produce_requests.values().sum();
    writer.close(Duration::from_secs(10)).await.expect("close");

    let group = unique_topic("metrics-group");
    let mut member = GroupReader::builder(transport.clone(), &group)
        .subscribe([topic.as_str()])
        .enable_auto_commit(false)
        .session_timeout(Duration::from_secs(2))
        .heartbeat_interval(Duration::from_millis(300))
        .reader(
            Reader::builder(transport.clone())
                .fetch_max_wait(Duration::from_millis(100))
                .auto_offset_reset(AutoOffsetReset::Earliest),
        )
        .build()
        .expect("member");
    let mut read = 0;
    let mut meters: Vec<(Arc<str>, ProcessMeter)> = Vec::new();
    while read < RECORDS {
        let batch = tokio::time::timeout(Duration::from_secs(30), member.next_batch())
            .await
            .expect("records within 30 s")
            .expect("next_batch");
        for part in &batch {
            if !meters.iter().any(|(t, _)| *t == part.topic) {
                meters.push((
                    part.topic.clone(),
                    ProcessMeter::new(&part.topic, Some(&group)),
                ));
            }
            let meter = &meters
                .iter()
                .find(|(t, _)| *t == part.topic)
                .expect("made")
                .1;
            for record in &part.records {
                let _timer = meter.start();
                assert!(record.value.as_ref().is_some_and(|v| v.starts_with(b"v")));
            }
            read += part.records.len() as u64;
        }
    }
    assert_eq!(read, RECORDS);
    member.commit().await.expect("commit");
    member.close().await;
    // The member's own connections (fetch, coordinator) are closed and counted now.
    let requests = NODES
        .iter()
        .map(|&n| {
            (
                n,
                transport.requests_sent(n, ApiKey::Produce),
                transport.requests_sent(n, ApiKey::Fetch),
            )
        })
        .collect();
    // Every pooled connection closes now: each counts as a disconnect.
    transport.close();
    Seen {
        topic,
        group,
        produce_requests,
        requests,
    }
}

#[test]
fn the_scraped_text_matches_what_was_sent_read_and_closed() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let mock = GroupMock::new(3);
    mock.initial_rebalance_delay(Duration::from_millis(100));
    let topic = unique_topic("metrics");
    mock.cluster()
        .create_topic(&topic, PARTITIONS, 1)
        .expect("mock create_topic");
    let bootstrap = mock.bootstrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let seen = metrics::with_local_recorder(&recorder, || {
        kafkit::meter::describe_metrics();
        rt.block_on(run(bootstrap, topic))
    });
    let text = handle.render();
    let topic = seen.topic.as_str();
    let dest = ("messaging_destination_name", topic);

    // The conventions' counters: every record sent once, consumed once, processed once.
    let (sent, lines) = sum(&text, "messaging_client_sent_messages", &[dest]);
    assert_eq!(
        (sent, lines),
        (RECORDS as f64, 1),
        "sent, no error.type: {text}"
    );
    let sent_ok = one(
        &text,
        "messaging_client_sent_messages",
        &[
            dest,
            ("messaging_system", "kafka"),
            ("messaging_operation_name", "send"),
        ],
    );
    assert_eq!(sent_ok, RECORDS as f64);
    let consumed = one(
        &text,
        "messaging_client_consumed_messages",
        &[
            dest,
            ("messaging_operation_name", "poll"),
            ("messaging_consumer_group_name", &seen.group),
        ],
    );
    assert_eq!(consumed, RECORDS as f64, "consumed: {text}");
    let processed = one(
        &text,
        "messaging_process_duration_count",
        &[
            dest,
            ("messaging_operation_name", "process"),
            ("messaging_consumer_group_name", &seen.group),
        ],
    );
    assert_eq!(processed, RECORDS as f64, "processed: {text}");

    // Operation durations, one per request of each kind.
    let duration = |name: &str, kind: &str| {
        sum(
            &text,
            "messaging_client_operation_duration_count",
            &[
                ("messaging_operation_name", name),
                ("messaging_operation_type", kind),
            ],
        )
        .0
    };
    assert_eq!(
        duration("send", "send"),
        seen.produce_requests as f64,
        "{text}"
    );
    let fetches: u64 = seen.requests.iter().map(|r| r.2).sum();
    let polls = duration("poll", "receive");
    assert!(
        polls >= 1.0 && polls <= fetches as f64,
        "{polls} Fetch timed, {fetches} sent: {text}"
    );
    assert_eq!(duration("commit", "settle"), 1.0, "{text}");
    assert!(!text.contains("error_type"), "no failure: {text}");

    // Produce and fetch records and batches per node and topic: every record once.
    let t = ("topic", topic);
    let (produced, _) = sum(&text, "kafkit_produce_records_total", &[t]);
    assert_eq!(produced, RECORDS as f64, "{text}");
    let (produce_batches, _) = sum(&text, "kafkit_produce_batches_total", &[t]);
    assert!(
        (f64::from(PARTITIONS)..=RECORDS as f64).contains(&produce_batches),
        "{text}"
    );
    let (fetched, _) = sum(&text, "kafkit_fetch_records_total", &[t]);
    assert_eq!(fetched, RECORDS as f64, "{text}");
    let (fetch_batches, _) = sum(&text, "kafkit_fetch_batches_total", &[t]);
    assert_eq!(
        fetch_batches, produce_batches,
        "each batch fetched once: {text}"
    );
    // Read to the end: no lag on any partition.
    for p in 0..PARTITIONS {
        let p = p.to_string();
        let lag = one(&text, "kafkit_consumer_lag", &[t, ("partition", &p)]);
        assert_eq!(lag, 0.0, "partition {p}: {text}");
    }
    // Nothing buffered once the Writer closed.
    assert_eq!(one(&text, "kafkit_buffered_produce_records", &[]), 0.0);
    assert_eq!(one(&text, "kafkit_buffered_produce_bytes", &[]), 0.0);

    // The connections: each broker dialled, written to and read from; every request frame
    // at least a header (size, api key and version, correlation id, client id length: 12
    // bytes), every value read back; each connection opened is closed by `Transport::close`.
    let mut values = 0.0;
    for &(n, produce, fetch) in &seen.requests {
        let node = n.to_string();
        let at = [("node_id", node.as_str())];
        let requests = one(&text, "kafkit_requests_total", &at);
        assert!(
            requests >= (produce + fetch) as f64 && requests >= 1.0,
            "node {n}: {requests} requests, {produce} Produce + {fetch} Fetch: {text}"
        );
        let written = one(&text, "kafkit_write_bytes_total", &at);
        assert!(written >= 12.0 * requests, "node {n}: {text}");
        values += one(&text, "kafkit_read_bytes_total", &at);
        let connects = one(&text, "kafkit_connects_total", &at);
        assert!(connects >= 1.0, "node {n}: {text}");
        let disconnects = one(&text, "kafkit_disconnects_total", &at);
        assert_eq!(disconnects, connects, "node {n}: {text}");
    }
    let value_bytes: f64 = (0..RECORDS).map(|i| format!("v{i}").len() as f64).sum();
    assert!(values >= value_bytes, "read {values} bytes: {text}");
    let (written, _) = sum(&text, "kafkit_write_bytes_total", &[]);
    assert!(written >= value_bytes, "wrote {written} bytes: {text}");
    // The mock does not throttle.
    assert_eq!(
        sum(&text, "kafkit_request_throttled_seconds_count", &[]).1,
        0
    );
}

/// The Reader's `Stream` counts the records it takes to yield as consumed (no group label).
#[test]
fn the_readers_stream_counts_what_it_yields() {
    use futures_core::Stream;
    use kafkit::StartOffset;

    const N: u64 = 50;
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let mock = GroupMock::new(1);
    let topic = unique_topic("metrics-stream");
    mock.cluster()
        .create_topic(&topic, 1, 1)
        .expect("mock create_topic");
    let bootstrap = mock.bootstrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    metrics::with_local_recorder(&recorder, || {
        rt.block_on(async {
            let transport = Transport::builder(bootstrap.split(','))
                .build()
                .expect("transport");
            let writer = Writer::builder(transport.clone()).build().expect("writer");
            let records = (0..N)
                .map(|i| ProducerRecord::new(&topic, format!("v{i}")))
                .collect();
            writer.write(records).await.expect("written");
            writer.close(Duration::from_secs(10)).await.expect("close");
            let mut reader = Reader::builder(transport).build().expect("reader");
            reader
                .assign([(topic.as_str(), 0, StartOffset::Earliest)])
                .expect("assign");
            for _ in 0..N {
                let next = std::future::poll_fn(|cx| std::pin::Pin::new(&mut reader).poll_next(cx));
                tokio::time::timeout(Duration::from_secs(30), next)
                    .await
                    .expect("a record within 30 s")
                    .expect("not ended")
                    .expect("a record");
            }
            reader.close();
        });
    });
    let text = handle.render();
    let dest = ("messaging_destination_name", topic.as_str());
    let consumed = one(&text, "messaging_client_consumed_messages", &[dest]);
    assert_eq!(consumed, N as f64, "{text}");
    assert!(!text.contains("messaging_consumer_group_name"), "{text}");
    let (fetched, _) = sum(&text, "kafkit_fetch_records_total", &[("topic", &topic)]);
    assert_eq!(fetched, N as f64, "{text}");
}
