//! KIP-714 client metrics against Apache Kafka 4.4, where the broker shows what it received.
//!
//! Every node xtask starts has the tests' receiver plugin among its `metric.reporters`
//! (`peers/broker-telemetry`, see docs/testing.md): without one, Kafka serves no
//! GetTelemetrySubscriptions or PushTelemetry. The plugin appends each push the broker hands it
//! to `<node dir>/telemetry/pushes.jsonl`, one JSON line with the client instance id, the request
//! context (client id, software, address), the resource attributes and every metric decoded with
//! the OTLP classes Kafka ships. Each test makes a client-metrics subscription of its own
//! (IncrementalAlterConfigs on a CLIENT_METRICS resource, as `kafka-configs.sh --entity-type
//! client-metrics` does) whose `match` names only its own client ids, so clients of other tests
//! never push, and reads the lines of its client ids only.
//!
//! - a Writer's metrics, through a [`Telemetry`] engine over `writer.metric_source()`, arrive for
//!   exactly our instance id, with only the selected names, deltas (Kafka always asks for delta
//!   temporality) that add up to what was written, our resource label, and one terminating push;
//! - a subscription whose prefixes select none of our metrics gets pushes without metrics;
//! - an engine with push disabled sends nothing while an enabled one beside it pushes;
//! - Java's producer and consumer (the Java peer) push under the same subscription; the names
//!   they push are printed, and every `org.apache.kafka.` name kafkit pushes is one of them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use integration_tests::{JavaPeer, create_topic, kafka, unique_topic};
use kafkit::admin::{AlterConfigOp, ConfigResource, ConfigResourceType};
use kafkit::protocol::messages::GetTelemetrySubscriptionsRequest;
use kafkit::telemetry::Telemetry;
use kafkit::{Client, Dialer, Error, ProducerRecord, Transport, Writer};
use serde_json::Value;

/// Upper bound of a wait that should end in seconds.
const GUARD: Duration = Duration::from_secs(30);

/// The subscriptions' push interval, in ms (Kafka takes 100 ms up to an hour).
const INTERVAL_MS: u64 = 500;

/// The Writer's metrics the main test subscribes to: the one Java name it pushes, and two of
/// kafkit's own counters. Its other metrics (`kafkit.producer.batch.*`, `.buffered.*`,
/// `.produce.request.total`) must not be pushed.
const SELECTED: [&str; 3] = [
    "org.apache.kafka.producer.",
    "kafkit.producer.record.",
    "kafkit.producer.byte.",
];

/// The file the one node's receiver appends pushes to: beside `KAFKIT_KAFKA_LOG` (set by
/// `cargo xtask test`), else in the folder `cargo xtask broker --port P start` made for the
/// port of `KAFKIT_KAFKA_BOOTSTRAP`.
fn push_log() -> PathBuf {
    if let Some(log) = std::env::var_os(integration_tests::KAFKA_LOG_ENV) {
        let log = PathBuf::from(log);
        if let Some(dir) = log.parent() {
            return dir.join("telemetry").join("pushes.jsonl");
        }
    }
    let bootstrap = kafka();
    let port = bootstrap
        .split(',')
        .next()
        .and_then(|a| a.rsplit(':').next())
        .unwrap_or_default()
        .to_owned();
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(".broker")
        .join(format!("kafka-{port}"))
        .join("node-1")
        .join("telemetry")
        .join("pushes.jsonl")
}

fn transport(client_id: &str) -> Transport {
    Transport::builder([kafka()])
        .dialer(Dialer::builder().client_id(client_id).build())
        .retry_backoff(Duration::from_millis(50))
        .default_api_timeout(Duration::from_secs(10))
        .build()
        .expect("transport")
}

fn admin() -> Client {
    Client::new(transport("kafkit-telemetry-admin")).with_timeout(Duration::from_secs(10))
}

/// Kafka's text form of an instance id (`Uuid.toString`: base64url without padding).
fn kafka_uuid(id: kafkit::protocol::Uuid) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.0)
}

/// A client-metrics subscription named `name`: `metrics` pushed every [`INTERVAL_MS`] by the
/// clients whose id matches the regular expression `client_ids`. Returns once the broker hands
/// it to a client of that id (a GetTelemetrySubscriptions of a throwaway instance, which never
/// pushes), so the engines started next get it at their first ask.
async fn subscribe(name: &str, metrics: &[&str], client_ids: &str, probe_client_id: &str) {
    let resource = ConfigResource::new(ConfigResourceType::ClientMetrics, name);
    let ops = vec![
        AlterConfigOp::set("metrics", metrics.join(",")),
        AlterConfigOp::set("interval.ms", INTERVAL_MS.to_string()),
        AlterConfigOp::set("match", format!("client_id={client_ids}")),
    ];
    let results = admin()
        .incremental_alter_configs(&[(resource, ops)], false)
        .await
        .expect("IncrementalAlterConfigs");
    for (r, result) in results {
        result.unwrap_or_else(|e| panic!("client-metrics subscription {r:?}: {e}"));
    }
    let probe = transport(probe_client_id);
    let wanted: BTreeSet<String> = metrics.iter().map(|m| (*m).to_owned()).collect();
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let answer = probe
            .round_trip_within(
                GetTelemetrySubscriptionsRequest::default(),
                Duration::from_secs(5),
            )
            .await;
        match &answer {
            Ok(r) if r.requested_metrics.iter().cloned().collect::<BTreeSet<_>>() == wanted => {
                assert_eq!(r.push_interval_ms, INTERVAL_MS as i32);
                return;
            }
            Err(Error::UnsupportedVersion { .. }) => panic!(
                "the broker serves no GetTelemetrySubscriptions: its metric.reporters lacks the \
                 KIP-714 receiver (see xtask/src/kafka_telemetry.rs; was it started by this \
                 xtask?)"
            ),
            _ => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "subscription {name} not served within {GUARD:?}: {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Removes the subscription (deleting every config of a client-metrics resource removes it).
async fn unsubscribe(name: &str) {
    let resource = ConfigResource::new(ConfigResourceType::ClientMetrics, name);
    let ops = ["metrics", "interval.ms", "match"]
        .map(AlterConfigOp::delete)
        .to_vec();
    let _ = admin()
        .incremental_alter_configs(&[(resource, ops)], false)
        .await;
}

/// The pushes the broker received from clients whose id `keep` accepts, in arrival order. A
/// last line without its newline (being written) is left for the next read.
fn pushes(keep: impl Fn(&str) -> bool) -> Vec<Value> {
    let text = std::fs::read_to_string(push_log()).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    whole
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line of the receiver"))
        .filter(|p| keep(client_id(p)))
        .collect()
}

fn client_id(push: &Value) -> &str {
    push["broker_attributes"]["client_id"]
        .as_str()
        .unwrap_or_default()
}

/// Waits (up to [`GUARD`]) until the pushes of `id` satisfy `done`, and returns them.
async fn wait_for(what: &str, id: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        let got = pushes(|c| c == id);
        if done(&got) {
            return got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {GUARD:?} in {}; pushes of {id}: {got:#?}",
            push_log().display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn terminated(p: &[Value]) -> bool {
    p.iter().any(|p| p["terminating"] == true)
}

/// The names of the metrics in `pushes`.
fn names(pushes: &[Value]) -> BTreeSet<String> {
    pushes
        .iter()
        .flat_map(|p| p["metrics"].as_array().cloned().unwrap_or_default())
        .filter_map(|m| m["name"].as_str().map(str::to_owned))
        .collect()
}

/// The sum over `pushes` of the values of metric `name` (its deltas).
fn total(pushes: &[Value], name: &str) -> i64 {
    pushes
        .iter()
        .flat_map(|p| p["metrics"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["name"] == name)
        .flat_map(|m| m["points"].as_array().cloned().unwrap_or_default())
        .map(|pt| pt["value"].as_i64().expect("an integer counter"))
        .sum()
}

const ACKED: &str = "kafkit.producer.record.acked.total";
const BYTES: &str = "kafkit.producer.byte.acked.total";
const ERRORS: &str = "org.apache.kafka.producer.record.error.total";

async fn write(writer: &Writer, topic: &str, n: usize) {
    for i in 0..n {
        writer
            .produce(ProducerRecord::new(topic, format!("v{i}")).partition(0))
            .await
            .expect("written");
    }
}

/// A Writer's metrics reach the broker's receiver: for our instance id only, the selected
/// names only, deltas adding up to the records and bytes written, our resource label, the
/// broker's view of the client (id, software, address), and one terminating push, the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_pushes_reach_the_broker_with_the_selected_metrics() {
    let id = unique_topic("kafkit-telemetry");
    subscribe(&id, &SELECTED, &regex_literal(&id), &id).await;
    let topic = unique_topic("telemetry");
    create_topic(&kafka(), &topic, 1).await;

    let transport = transport(&id);
    let writer = Writer::builder(transport.clone())
        .linger(Duration::from_millis(1))
        .build()
        .expect("writer");
    let rack = format!("rack-{}", id.rsplit('-').next().unwrap_or("a"));
    let telemetry = Telemetry::builder(transport)
        .source(writer.metric_source())
        .resource_label("client_rack", rack.as_str())
        .build()
        .expect("engine");
    let instance = kafka_uuid(
        telemetry
            .client_instance_id(GUARD)
            .await
            .expect("an instance id"),
    );

    write(&writer, &topic, 10).await;
    wait_for("10 records acknowledged", &id, |p| total(p, ACKED) == 10).await;
    write(&writer, &topic, 7).await;
    wait_for("17 records acknowledged", &id, |p| total(p, ACKED) == 17).await;
    telemetry.close(Duration::from_secs(10)).await;
    let got = wait_for("the terminating push", &id, terminated).await;
    let stats = writer.stats();
    unsubscribe(&id).await;
    println!("a line of {}: {}", push_log().display(), got[got.len() - 1]);

    let wanted: BTreeSet<String> = [ERRORS, ACKED, BYTES].map(str::to_owned).into();
    for (i, p) in got.iter().enumerate() {
        assert_eq!(p["client_instance_id"], instance.as_str(), "push {i}: {p}");
        // Kafka 4.4's `PushTelemetryRequest.metricsContentType()` for KIP-714's OTLP protobuf.
        assert_eq!(p["content_type"], "OTLP", "push {i}");
        assert_eq!(p["push_interval_ms"], INTERVAL_MS, "push {i}");
        assert!(p.get("error").is_none(), "push {i}: {p}");
        let a = &p["broker_attributes"];
        assert_eq!(a["client_software_name"], "kafkit", "push {i}: {a}");
        assert!(
            !a["client_software_version"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "push {i}: {a}"
        );
        assert_eq!(a["client_source_address"], "127.0.0.1", "push {i}: {a}");
        assert_eq!(a["security_protocol"], "PLAINTEXT", "push {i}: {a}");
        assert_eq!(
            p["resource"],
            serde_json::json!({ "client_rack": rack }),
            "push {i}"
        );
        assert_eq!(names(std::slice::from_ref(p)), wanted, "push {i}: {p}");
        for m in p["metrics"].as_array().expect("metrics") {
            assert_eq!(m["type"], "sum", "{m}");
            assert_eq!(m["monotonic"], true, "{m}");
            // Kafka 4.4 always asks for deltas (GetTelemetrySubscriptions DeltaTemporality).
            assert_eq!(m["temporality"], "delta", "{m}");
        }
    }
    assert_eq!(total(&got, ACKED), 17);
    assert_eq!(
        u64::try_from(total(&got, BYTES)).ok(),
        Some(stats.bytes),
        "{stats:?}"
    );
    assert_eq!(total(&got, ERRORS), 0);
    let terminating: Vec<usize> = (0..got.len())
        .filter(|&i| got[i]["terminating"] == true)
        .collect();
    assert_eq!(
        terminating,
        [got.len() - 1],
        "one terminating push, the last"
    );
    assert!(got.len() >= 3, "pushes at the interval before the close");
}

/// A subscription whose prefixes select none of the Writer's metrics: the engine still pushes
/// at the interval (the subscription asks for something), and no push carries a metric.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_selecting_none_of_ours_gets_no_metrics() {
    let id = unique_topic("kafkit-telemetry-none");
    subscribe(
        &id,
        &["org.apache.kafka.consumer."],
        &regex_literal(&id),
        &id,
    )
    .await;
    let topic = unique_topic("telemetry-none");
    create_topic(&kafka(), &topic, 1).await;
    let transport = transport(&id);
    let writer = Writer::builder(transport.clone())
        .linger(Duration::from_millis(1))
        .build()
        .expect("writer");
    let telemetry = Telemetry::builder(transport)
        .source(writer.metric_source())
        .build()
        .expect("engine");
    telemetry
        .client_instance_id(GUARD)
        .await
        .expect("an instance id");
    write(&writer, &topic, 5).await;
    wait_for("two pushes", &id, |p| p.len() >= 2).await;
    telemetry.close(Duration::from_secs(10)).await;
    let got = wait_for("the terminating push", &id, terminated).await;
    unsubscribe(&id).await;
    assert!(names(&got).is_empty(), "{got:#?}");
}

/// An engine built with `enable_metrics_push(false)` has no instance id and sends nothing,
/// while an enabled engine under the same subscription pushes at the interval and ends with its
/// terminating push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_with_push_disabled_sends_nothing() {
    let base = unique_topic("kafkit-telemetry-off");
    let (off_id, on_id) = (format!("{base}-off"), format!("{base}-on"));
    subscribe(
        &base,
        &["org.apache.kafka.", "kafkit."],
        &format!("{}-.*", regex_literal(&base)),
        &format!("{base}-probe"),
    )
    .await;
    let topic = unique_topic("telemetry-off");
    create_topic(&kafka(), &topic, 1).await;
    let mut engines = Vec::new();
    let mut writers = Vec::new();
    for (id, on) in [(&off_id, false), (&on_id, true)] {
        let transport = transport(id);
        let writer = Writer::builder(transport.clone())
            .linger(Duration::from_millis(1))
            .build()
            .expect("writer");
        let telemetry = Telemetry::builder(transport)
            .source(writer.metric_source())
            .enable_metrics_push(on)
            .build()
            .expect("engine");
        write(&writer, &topic, 3).await;
        writers.push(writer);
        engines.push(telemetry);
    }
    let off = engines[0].client_instance_id(GUARD).await;
    assert!(
        matches!(off, Err(Error::InvalidArgument(_))),
        "no instance id with push off: {off:?}"
    );
    engines[1]
        .client_instance_id(GUARD)
        .await
        .expect("an instance id");
    wait_for("three pushes of the enabled engine", &on_id, |p| {
        p.len() >= 3
    })
    .await;
    for e in &engines {
        e.close(Duration::from_secs(10)).await;
    }
    wait_for("the enabled engine's terminating push", &on_id, terminated).await;
    unsubscribe(&base).await;
    let off_pushes = pushes(|c| c == off_id);
    assert!(off_pushes.is_empty(), "{off_pushes:#?}");
}

/// Java's `KafkaProducer` and `KafkaConsumer` (the Java peer) push under a subscription of
/// every `org.apache.kafka.` metric; a kafkit Writer pushes beside them. The names Java pushes
/// are printed (run with `--nocapture`), and every `org.apache.kafka.` name kafkit pushes must be
/// one of them: kafkit borrows a Java name only for a metric that means what Java's means.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafkits_java_names_are_names_java_pushes() {
    let base = unique_topic("kafkit-telemetry-java");
    let (producer_id, consumer_id, kafkit_id) = (
        format!("{base}-producer"),
        format!("{base}-consumer"),
        format!("{base}-kafkit"),
    );
    subscribe(
        &base,
        &["org.apache.kafka."],
        &format!("{}-.*", regex_literal(&base)),
        &format!("{base}-probe"),
    )
    .await;
    let topic = unique_topic("telemetry-java");
    create_topic(&kafka(), &topic, 1).await;
    let bootstrap = kafka();

    let mut producer = JavaPeer::start(
        "producer",
        "produce",
        &[
            ("bootstrap", &bootstrap),
            ("topic", &topic),
            ("count", "20"),
            ("client-id", &producer_id),
            ("hold", "true"),
        ],
    );
    let mut consumer = JavaPeer::start(
        "consumer",
        "consume-group",
        &[
            ("bootstrap", &bootstrap),
            ("topic", &topic),
            ("group", &base),
            ("client-id", &consumer_id),
        ],
    );
    let transport = transport(&kafkit_id);
    let writer = Writer::builder(transport.clone())
        .linger(Duration::from_millis(1))
        .build()
        .expect("writer");
    let telemetry = Telemetry::builder(transport)
        .source(writer.metric_source())
        .build()
        .expect("engine");
    write(&writer, &topic, 5).await;
    producer
        .wait_until("done", GUARD, |p| {
            p.events().iter().any(|e| e["event"] == "done")
        })
        .await;
    consumer
        .wait_until("25 records consumed", GUARD, |c| c.count() >= 25)
        .await;
    // A push of each at the interval, then each closes with its terminating push.
    for id in [&producer_id, &consumer_id, &kafkit_id] {
        wait_for("a push", id, |p| !p.is_empty()).await;
    }
    producer.close(GUARD).await;
    consumer.close(GUARD).await;
    telemetry.close(Duration::from_secs(10)).await;
    let mut java = BTreeMap::new();
    // Kafka 4.4's KafkaProducer sends no terminating push when nothing else is in flight: its
    // Sender thread stops polling the network client (where the telemetry sender runs) as soon
    // as no record or request is pending. Its pushes before the close are all it sends.
    java.insert(producer_id.clone(), names(&pushes(|c| c == producer_id)));
    let got = wait_for("the consumer's terminating push", &consumer_id, terminated).await;
    java.insert(consumer_id.clone(), names(&got));
    let ours = names(&wait_for("the terminating push", &kafkit_id, terminated).await);
    unsubscribe(&base).await;

    for (id, names) in &java {
        println!("{} metric names pushed by Java's {id}:", names.len());
        for n in names {
            println!("  {n}");
        }
    }
    let all_java: BTreeSet<&String> = java.values().flatten().collect();
    assert!(
        all_java
            .iter()
            .any(|n| n.starts_with("org.apache.kafka.producer."))
            && all_java
                .iter()
                .any(|n| n.starts_with("org.apache.kafka.consumer.")),
        "Java's producer and consumer pushed their metrics: {all_java:?}"
    );
    println!("kafkit's pushed names: {ours:?}");
    assert!(!ours.is_empty(), "kafkit pushed under org.apache.kafka.");
    let strangers: Vec<&String> = ours.iter().filter(|n| !all_java.contains(n)).collect();
    assert!(
        strangers.is_empty(),
        "kafkit pushes org.apache.kafka. names Java does not: {strangers:?}"
    );
}

/// `s` as a regular expression that matches only itself (Kafka's `match` values are Java
/// regular expressions; our ids hold letters, digits, '-', '.' and '_').
fn regex_literal(s: &str) -> String {
    s.replace('.', "\\.")
}
