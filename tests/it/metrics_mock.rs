//! The `metrics` cargo feature on librdkafka's mock cluster: a Writer writes N records and a
//! Reader reads them back under `metrics-exporter-prometheus`; the scraped text says N sent
//! and N consumed for the topic, and times the Produce requests.

use std::sync::OnceLock;
use std::time::Duration;

use integration_tests::{mock_cluster, unique_topic};
use kafkit::{ProducerRecord, Reader, StartOffset, Transport, Writer};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

const RECORDS: u64 = 250;
const PARTITIONS: i32 = 3;

/// The process-wide Prometheus recorder (a process has one global recorder; each test's
/// unique topic keeps its series apart).
fn prometheus() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::set_global_recorder(recorder).expect("no other global recorder");
        kafkit::meter::describe_metrics();
        handle
    })
}

/// The sum of the samples of `metric` whose label set has every `label="value"` of `labels`
/// (the exporter writes dots as underscores), and how many lines matched.
fn sum(text: &str, metric: &str, labels: &[(&str, &str)]) -> (f64, usize) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scraped_text_counts_what_was_sent_and_consumed() {
    let handle = prometheus();
    let cluster = mock_cluster(3);
    let topic = unique_topic("metrics");
    cluster
        .create_topic(&topic, PARTITIONS, 1)
        .expect("mock create_topic");
    let transport = Transport::builder(cluster.bootstrap_servers().split(','))
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
    writer.close(Duration::from_secs(10)).await.expect("close");

    let reader = Reader::builder(transport).build().expect("reader");
    reader
        .assign((0..PARTITIONS).map(|p| (topic.as_str(), p, StartOffset::Earliest)))
        .expect("assign");
    let mut read = 0;
    while read < RECORDS {
        let batch = tokio::time::timeout(Duration::from_secs(30), reader.next_batch())
            .await
            .expect("records within 30 s")
            .expect("next_batch");
        read += batch.iter().map(|p| p.records.len() as u64).sum::<u64>();
    }
    reader.close();

    let text = handle.render();
    let dest = ("messaging_destination_name", topic.as_str());
    let (sent, lines) = sum(&text, "messaging_client_sent_messages", &[dest]);
    assert_eq!(sent, RECORDS as f64, "sent: {text}");
    assert_eq!(lines, 1, "no error.type series: {text}");
    let (sent_ok, _) = sum(
        &text,
        "messaging_client_sent_messages",
        &[
            dest,
            ("messaging_system", "kafka"),
            ("messaging_operation_name", "send"),
        ],
    );
    assert_eq!(sent_ok, RECORDS as f64, "{text}");
    let (consumed, _) = sum(
        &text,
        "messaging_client_consumed_messages",
        &[dest, ("messaging_operation_name", "poll")],
    );
    assert_eq!(consumed, RECORDS as f64, "consumed: {text}");
    // The transport side: at least every record in a Produce request, a batch per partition.
    let (produced, _) = sum(&text, "kafkit_produce_records_total", &[("topic", &topic)]);
    assert!(produced >= RECORDS as f64, "{text}");
    let (batches, _) = sum(&text, "kafkit_produce_batches_total", &[("topic", &topic)]);
    assert!(batches >= f64::from(PARTITIONS), "{text}");
    // A Produce request's duration is timed (a summary: its count is the requests timed).
    let (timed, _) = sum(
        &text,
        "messaging_client_operation_duration_count",
        &[("messaging_operation_name", "send")],
    );
    assert!(timed >= 1.0, "{text}");
    let (connects, _) = sum(&text, "kafkit_connects_total", &[]);
    assert!(connects >= 1.0, "{text}");
}
