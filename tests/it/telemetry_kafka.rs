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
//! - a Writer's metrics, through a [`Telemetry`] engine over `writer.metric_source()` (the
//!   Writer's own engine off), arrive for exactly our instance id, with only the selected
//!   names, deltas (Kafka always asks for delta temporality) that add up to what was written,
//!   our resource label, and one terminating push;
//! - a subscription whose prefixes select none of our metrics gets pushes without metrics;
//! - push off (a Writer's `enable_metrics_push(false)`, an engine's) sends nothing and gives
//!   `TelemetryError::Disabled`, while a default Writer beside it pushes;
//! - the clients' own engines (on by default): a transactional Writer, a KIP-848 and a classic
//!   group member, and a ShareReader (librdkafka's mock has no share groups) push under their
//!   `client_instance_id()` with their resource attributes, the subscribed standard names,
//!   counters adding up to what they wrote, read or acknowledged, and one terminating push,
//!   the last, after `close`;
//! - Java's producer, consumer and share consumer (the Java peer) push under the same
//!   subscription; the names they push are printed, and every `org.apache.kafka.` name
//!   kafkit's Writer, GroupReader and ShareReader push is one the Java client of its kind
//!   pushes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use integration_tests::{JavaPeer, create_topic, kafka, unique_topic};
use kafkit::admin::{AlterConfigOp, ConfigResource, ConfigResourceType};
use kafkit::protocol::messages::GetTelemetrySubscriptionsRequest;
use kafkit::telemetry::{Telemetry, TelemetryError};
use kafkit::{
    AcknowledgeType, AcknowledgementMode, AutoOffsetReset, Client, Dialer, Error, GroupProtocol,
    GroupReader, ProducerRecord, Reader, ShareReader, Transport, Writer,
};

use super::share_kafka;
use serde_json::Value;

/// Upper bound of a wait that should end in seconds.
const GUARD: Duration = Duration::from_secs(30);

/// The subscriptions' push interval, in ms (Kafka takes 100 ms up to an hour).
const INTERVAL_MS: u64 = 500;

/// The Writer's metrics the main test subscribes to: Java's standard producer names, and two
/// of kafkit's own counters. Its other metrics (`kafkit.producer.batch.*`, `.buffered.*`,
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
    // The Writer's own engine off: this test is of an engine built over its source (a public
    // API), which alone pushes under this client id.
    let writer = Writer::builder(transport.clone())
        .linger(Duration::from_millis(1))
        .enable_metrics_push(false)
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

    // Java's standard producer names the Writer reports (`org.apache.kafka.producer.` selects
    // them all), and kafkit's two selected counters; never its `batch.*`, `buffered.*` or
    // `produce.request.total`. The latencies per node come only in a push whose interval had
    // a Produce answer; the rest are in every push.
    let every: BTreeSet<String> = [ERRORS, ACKED, BYTES]
        .into_iter()
        .map(str::to_owned)
        .chain(
            [
                "connection.creation.total",
                "connection.creation.rate",
                "produce.throttle.time.avg",
                "produce.throttle.time.max",
                "record.queue.time.avg",
                "record.queue.time.max",
            ]
            .map(|n| format!("org.apache.kafka.producer.{n}")),
        )
        .collect();
    let per_node: BTreeSet<String> = ["avg", "max"]
        .map(|n| format!("org.apache.kafka.producer.node.request.latency.{n}"))
        .into();
    let wanted: BTreeSet<String> = every.union(&per_node).cloned().collect();
    assert_eq!(names(&got), wanted, "the selected names, all of them");
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
        let these = names(std::slice::from_ref(p));
        assert!(
            these.is_superset(&every) && these.is_subset(&wanted),
            "push {i}: {these:?}"
        );
        for m in p["metrics"].as_array().expect("metrics") {
            if !m["name"].as_str().unwrap_or_default().ends_with(".total") {
                assert_eq!(m["type"], "gauge", "{m}");
                continue;
            }
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
        .enable_metrics_push(false)
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

/// A Writer built with `enable_metrics_push(false)`, and an engine built over its source with
/// `enable_metrics_push(false)`, have no instance id (`TelemetryError::Disabled`) and send
/// nothing, while a Writer with the default (on) under the same subscription pushes at the
/// interval and ends with its terminating push at `close`.
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
    let off = Writer::builder(transport(&off_id))
        .linger(Duration::from_millis(1))
        .enable_metrics_push(false)
        .build()
        .expect("writer");
    let off_engine = Telemetry::builder(transport(&off_id))
        .source(off.metric_source())
        .enable_metrics_push(false)
        .build()
        .expect("engine");
    let on = Writer::builder(transport(&on_id))
        .linger(Duration::from_millis(1))
        .build()
        .expect("writer");
    write(&off, &topic, 3).await;
    write(&on, &topic, 3).await;
    for got in [
        off.client_instance_id(GUARD).await,
        off_engine.client_instance_id(GUARD).await,
    ] {
        assert!(
            matches!(got, Err(Error::Telemetry(TelemetryError::Disabled))),
            "no instance id with push off: {got:?}"
        );
    }
    on.client_instance_id(GUARD).await.expect("an instance id");
    wait_for("three pushes of the enabled Writer", &on_id, |p| {
        p.len() >= 3
    })
    .await;
    off_engine.close(Duration::from_secs(10)).await;
    off.close(Duration::from_secs(10)).await.expect("closed");
    on.close(Duration::from_secs(10)).await.expect("closed");
    wait_for("the enabled Writer's terminating push", &on_id, terminated).await;
    unsubscribe(&base).await;
    let off_pushes = pushes(|c| c == off_id);
    assert!(off_pushes.is_empty(), "{off_pushes:#?}");
}

/// Java's `KafkaProducer`, `KafkaConsumer` (KIP-848) and `KafkaShareConsumer` (the Java peer)
/// push under a subscription of every `org.apache.kafka.` metric; kafkit's Writer, GroupReader
/// (KIP-848) and ShareReader push beside them through their own engines. The names Java pushes
/// are printed (run with `--nocapture`), and every `org.apache.kafka.` name each kafkit client
/// pushes must be one the Java client of its kind pushes: kafkit borrows a Java name only for a
/// metric that means what Java's means.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafkits_java_names_are_names_java_pushes() {
    let base = unique_topic("kafkit-telemetry-java");
    let id = |who: &str| format!("{base}-{who}");
    subscribe(
        &base,
        &["org.apache.kafka."],
        &format!("{}-.*", regex_literal(&base)),
        &id("probe"),
    )
    .await;
    let topic = unique_topic("telemetry-java");
    create_topic(&kafka(), &topic, 2).await;
    let share_group = id("share");
    share_kafka::group_configs(&share_kafka::transport(), &share_group, &[]).await;
    let bootstrap = kafka();

    let mut producer = JavaPeer::start(
        "producer",
        "produce",
        &[
            ("bootstrap", &bootstrap),
            ("topic", &topic),
            ("count", "20"),
            ("partition", "0"),
            ("client-id", &id("jproducer")),
            ("hold", "true"),
        ],
    );
    let mut consumer = JavaPeer::start(
        "consumer",
        "consume-group",
        &[
            ("bootstrap", &bootstrap),
            ("topic", &topic),
            ("group", &id("jgroup")),
            ("protocol", "consumer"),
            ("client-id", &id("jconsumer")),
        ],
    );
    let mut share_consumer = JavaPeer::start(
        "share-consumer",
        "share-consume",
        &[
            ("bootstrap", &bootstrap),
            ("topic", &topic),
            ("group", &share_group),
            ("client-id", &id("jshare")),
        ],
    );
    let writer = Writer::builder(transport(&id("kwriter")))
        .linger(Duration::from_millis(1))
        .build()
        .expect("writer");
    let t = transport(&id("kgroup"));
    let mut member = GroupReader::builder(t.clone(), id("kgroup"))
        .subscribe([topic.as_str()])
        .group_protocol(GroupProtocol::Consumer)
        .reader(Reader::builder(t).auto_offset_reset(AutoOffsetReset::Earliest))
        .build()
        .expect("member");
    let mut share = ShareReader::builder(transport(&id("kshare")), &share_group)
        .topics([topic.as_str()])
        .build()
        .expect("share reader");
    for i in 0..20 {
        writer
            .produce(ProducerRecord::new(&topic, format!("k{i}")).partition(i % 2))
            .await
            .expect("written");
    }
    producer
        .wait_until("done", GUARD, |p| {
            p.events().iter().any(|e| e["event"] == "done")
        })
        .await;
    consumer
        .wait_until("40 records consumed", GUARD, |c| c.count() >= 40)
        .await;
    let deadline = tokio::time::Instant::now() + GUARD;
    integration_tests::read_from_member(&mut member, 40, GUARD).await;
    // The share group's 40 records are shared by the two share consumers: poll until they
    // have them all between them (each may have all, or none).
    let mut shared = 0;
    while shared + share_consumer.count() < 40 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{shared} + {} of 40 in the share group",
            share_consumer.count()
        );
        shared += share
            .poll(Duration::from_millis(200))
            .await
            .expect("poll")
            .len();
    }
    // A push of each at the interval, then each closes.
    for who in [
        "jproducer",
        "jconsumer",
        "jshare",
        "kwriter",
        "kgroup",
        "kshare",
    ] {
        wait_for("a push", &id(who), |p| !p.is_empty()).await;
    }
    // One more interval with its push, so that every client pushed what reading measured.
    tokio::time::sleep(Duration::from_millis(2 * INTERVAL_MS)).await;
    producer.close(GUARD).await;
    consumer.close(GUARD).await;
    share_consumer.close(GUARD).await;
    writer.close(Duration::from_secs(10)).await.expect("closed");
    member.close().await;
    share.close(Duration::from_secs(10)).await.expect("closed");
    // Kafka 4.4's KafkaProducer sends no terminating push when nothing else is in flight: its
    // Sender thread stops polling the network client (where the telemetry sender runs) as soon
    // as no record or request is pending. Its pushes before the close are all it sends.
    let java_producer = names(&pushes(|c| c == id("jproducer")));
    let java_consumer = names(&wait_for("a terminating push", &id("jconsumer"), terminated).await);
    // The share consumer's pushes so far, its terminating one if it sent it by now.
    let java_share = names(&pushes(|c| c == id("jshare")));
    let mut ours = BTreeMap::new();
    for who in ["kwriter", "kgroup", "kshare"] {
        let got = wait_for("a terminating push", &id(who), terminated).await;
        let pushed: BTreeSet<String> = names(&got)
            .into_iter()
            .filter(|n| n.starts_with("org.apache.kafka."))
            .collect();
        ours.insert(who, pushed);
    }
    unsubscribe(&base).await;

    for (who, names) in [
        ("KafkaProducer", &java_producer),
        ("KafkaConsumer", &java_consumer),
        ("KafkaShareConsumer", &java_share),
    ] {
        println!("{} metric names pushed by Java's {who}:", names.len());
        for n in names {
            println!("  {n}");
        }
    }
    for (who, java, prefix) in [
        ("kwriter", &java_producer, "org.apache.kafka.producer."),
        ("kgroup", &java_consumer, "org.apache.kafka.consumer."),
        ("kshare", &java_share, "org.apache.kafka.consumer."),
    ] {
        assert!(
            java.iter().any(|n| n.starts_with(prefix)),
            "Java's client beside {who} pushed its metrics: {java:?}"
        );
        let ours = &ours[who];
        println!("kafkit's {who} pushed: {ours:?}");
        assert!(!ours.is_empty(), "{who} pushed under org.apache.kafka.");
        let strangers: Vec<&String> = ours.iter().filter(|n| !java.contains(*n)).collect();
        assert!(
            strangers.is_empty(),
            "kafkit's {who} pushes org.apache.kafka. names its Java peer does not: {strangers:?}"
        );
    }
}

/// The sum over `pushes` of the points of counter `name` whose labels include `labels`.
fn total_where(pushes: &[Value], name: &str, labels: &[(&str, &str)]) -> i64 {
    pushes
        .iter()
        .flat_map(|p| p["metrics"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["name"] == name)
        .flat_map(|m| m["points"].as_array().cloned().unwrap_or_default())
        .filter(|pt| labels.iter().all(|(k, v)| pt["attributes"][*k] == *v))
        .map(|pt| pt["value"].as_i64().expect("an integer counter"))
        .sum()
}

/// What every client's own engine must show in `got` (its pushes, closed): our instance id
/// only, from kafkit, names only under the subscription's `prefixes`, every name of `must`
/// among them, and exactly one terminating push, the last. `before_close` is how many pushes
/// had arrived when the client's close began: none of them terminated.
fn check_own_engine(
    what: &str,
    got: &[Value],
    instance: &str,
    prefixes: &[&str],
    must: &[&str],
    before_close: usize,
) {
    assert!(got.len() >= 2, "{what}: pushes at the interval: {got:#?}");
    for (i, p) in got.iter().enumerate() {
        assert_eq!(p["client_instance_id"], instance, "{what}: push {i}: {p}");
        assert_eq!(
            p["broker_attributes"]["client_software_name"], "kafkit",
            "{what}: push {i}"
        );
        assert!(p.get("error").is_none(), "{what}: push {i}: {p}");
        for n in names(std::slice::from_ref(p)) {
            assert!(
                prefixes.iter().any(|x| n.starts_with(x)),
                "{what}: push {i} carries {n}, which the subscription does not select"
            );
        }
    }
    let all = names(got);
    for n in must {
        assert!(all.contains(*n), "{what}: {n} never pushed: {all:?}");
    }
    let terminating: Vec<usize> = (0..got.len())
        .filter(|&i| got[i]["terminating"] == true)
        .collect();
    assert_eq!(
        terminating,
        [got.len() - 1],
        "{what}: one terminating push, the last"
    );
    assert!(
        before_close < got.len(),
        "{what}: the terminating push came after close began"
    );
}

/// A transactional Writer built with the defaults pushes through its own engine (no
/// `Telemetry` of ours): its `client_instance_id()` on every push, the `transactional_id`
/// resource attribute, Java's standard producer names under the subscription's
/// `org.apache.kafka.producer.` (and kafkit's selected counters), deltas adding up to the 12
/// records and bytes committed in two transactions, no error, and exactly one terminating push,
/// the last, sent by `close`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writers_own_engine_pushes_its_producer_metrics() {
    let id = unique_topic("kafkit-telemetry-own-writer");
    let prefixes = ["org.apache.kafka.producer.", "kafkit.producer.record."];
    subscribe(&id, &prefixes, &regex_literal(&id), &id).await;
    let topic = unique_topic("telemetry-own-writer");
    create_topic(&kafka(), &topic, 1).await;
    let txn = format!("{id}-txn");
    let writer = Writer::builder(transport(&id))
        .linger(Duration::from_millis(1))
        .transactional_id(txn.as_str())
        .build()
        .expect("writer");
    let instance = kafka_uuid(writer.client_instance_id(GUARD).await.expect("an id"));
    writer.init_transactions(GUARD).await.expect("init");
    for n in [5, 7] {
        writer.begin_transaction().expect("begin");
        write(&writer, &topic, n).await;
        writer.commit_transaction(GUARD).await.expect("commit");
    }
    wait_for("12 records acknowledged", &id, |p| total(p, ACKED) == 12).await;
    let before_close = pushes(|c| c == id).len();
    let stats = writer.stats();
    writer.close(Duration::from_secs(10)).await.expect("closed");
    let got = wait_for("the terminating push", &id, terminated).await;
    unsubscribe(&id).await;

    check_own_engine(
        "writer",
        &got,
        &instance,
        &prefixes,
        &[
            "org.apache.kafka.producer.connection.creation.total",
            "org.apache.kafka.producer.node.request.latency.max",
            "org.apache.kafka.producer.record.queue.time.max",
            ERRORS,
            ACKED,
        ],
        before_close,
    );
    for (i, p) in got.iter().enumerate() {
        assert_eq!(
            p["resource"],
            serde_json::json!({ "transactional_id": txn }),
            "push {i}"
        );
    }
    assert_eq!(total(&got, ACKED), 12);
    assert_eq!(total(&got, ERRORS), 0);
    assert!(
        total(&got, "org.apache.kafka.producer.connection.creation.total") >= 1,
        "connections made"
    );
    assert_eq!(stats.records, 12, "{stats:?}");
}

/// A group member of `protocol` built with the defaults pushes through its own engine: its
/// `client_instance_id()`, `group_id` and `group_member_id` (the member's id; on the
/// terminating push too), Java's standard consumer names only
/// (`org.apache.kafka.consumer.`), records consumed adding up to the 10 read, one assigned
/// partition, a commit latency, and exactly one terminating push, the last, sent by `close`.
async fn a_members_own_engine_pushes(protocol: GroupProtocol, tag: &str) {
    let id = unique_topic(&format!("kafkit-telemetry-{tag}"));
    let c = "org.apache.kafka.consumer.";
    subscribe(&id, &[c], &regex_literal(&id), &id).await;
    let topic = unique_topic(&format!("telemetry-{tag}"));
    create_topic(&kafka(), &topic, 1).await;
    let writer = Writer::builder(transport("kafkit-telemetry-writer"))
        .linger(Duration::from_millis(1))
        .build()
        .expect("writer");
    write(&writer, &topic, 10).await;
    writer.close(Duration::from_secs(10)).await.expect("closed");
    let t = transport(&id);
    let group = format!("{id}-g");
    let mut member = GroupReader::builder(t.clone(), &group)
        .subscribe([topic.as_str()])
        .group_protocol(protocol)
        .enable_auto_commit(false)
        .reader(Reader::builder(t).auto_offset_reset(AutoOffsetReset::Earliest))
        .build()
        .expect("member");
    let seen = integration_tests::read_from_member(&mut member, 10, GUARD).await;
    assert_eq!(seen, 10);
    member.commit().await.expect("committed");
    let member_id = member.stats().member_id;
    assert!(!member_id.is_empty());
    let instance = kafka_uuid(member.client_instance_id(GUARD).await.expect("an id"));
    let consumed = format!("{c}fetch.manager.records.consumed.total");
    let commit = format!("{c}coordinator.commit.latency.max");
    wait_for("10 records consumed, a commit", &id, |p| {
        total(p, &consumed) == 10
            && p.iter()
                .flat_map(|p| p["metrics"].as_array().cloned().unwrap_or_default())
                .any(|m| {
                    m["name"] == commit.as_str()
                        && m["points"][0]["value"].as_f64().is_some_and(|v| v > 0.0)
                })
    })
    .await;
    let before_close = pushes(|x| x == id).len();
    member.close().await;
    let got = wait_for("the terminating push", &id, terminated).await;
    unsubscribe(&id).await;

    check_own_engine(
        tag,
        &got,
        &instance,
        &[c],
        &[
            &consumed,
            &commit,
            &format!("{c}coordinator.assigned.partitions"),
            &format!("{c}coordinator.rebalance.latency.max"),
            &format!("{c}fetch.manager.fetch.latency.max"),
            &format!("{c}node.request.latency.max"),
            &format!("{c}connection.creation.total"),
        ],
        before_close,
    );
    for (i, p) in got.iter().enumerate() {
        assert_eq!(p["resource"]["group_id"], group.as_str(), "{tag}: push {i}");
        if let Some(m) = p["resource"].get("group_member_id") {
            assert_eq!(m, member_id.as_str(), "{tag}: push {i}");
        }
    }
    assert_eq!(
        got[got.len() - 1]["resource"]["group_member_id"],
        member_id.as_str(),
        "{tag}: the terminating push names the member"
    );
    assert_eq!(total(&got, &consumed), 10, "{tag}");
    let assigned: Vec<f64> = got
        .iter()
        .flat_map(|p| p["metrics"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["name"] == format!("{c}coordinator.assigned.partitions"))
        .filter_map(|m| m["points"][0]["value"].as_f64())
        .collect();
    assert!(assigned.contains(&1.0), "{tag}: {assigned:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kip848_members_own_engine_pushes_its_consumer_metrics() {
    a_members_own_engine_pushes(GroupProtocol::Consumer, "kip848").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_members_own_engine_pushes_its_consumer_metrics() {
    a_members_own_engine_pushes(GroupProtocol::Classic, "classic").await;
}

/// A ShareReader (KIP-932; explicit mode, each record accepted, then a commit) built with the
/// defaults pushes through its own engine: its `client_instance_id()`, `group_id` and
/// `group_member_id` (the member's id), the share consumer's names only, records consumed and
/// acknowledgements sent adding up to the 12 read and accepted (no acknowledgement error;
/// kafkit's own `acknowledgement.total{type=accept}` too), and exactly one terminating push,
/// the last, sent by `close`. librdkafka's mock has no share groups: this is its only test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_readers_own_engine_pushes_its_share_consumer_metrics() {
    let id = unique_topic("kafkit-telemetry-share");
    let prefixes = ["org.apache.kafka.consumer.", "kafkit.consumer.share."];
    subscribe(&id, &prefixes, &regex_literal(&id), &id).await;
    let (topic, group) = share_kafka::topic_and_group("telemetry-share", 2).await;
    share_kafka::write_on(&share_kafka::transport(), &topic, 2, 6, "t").await;
    let mut reader = ShareReader::builder(transport(&id), &group)
        .topics([topic.as_str()])
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .build()
        .expect("share reader");
    let instance = kafka_uuid(reader.client_instance_id(GUARD).await.expect("an id"));
    let mut read = 0;
    let deadline = tokio::time::Instant::now() + GUARD;
    while read < 12 {
        assert!(tokio::time::Instant::now() < deadline, "{read} of 12");
        let got = reader.poll(Duration::from_secs(1)).await.expect("poll");
        for r in &got {
            reader
                .acknowledge(r, AcknowledgeType::Accept)
                .expect("acknowledge");
        }
        read += got.len();
        if !got.is_empty() {
            reader
                .commit(Duration::from_secs(10))
                .await
                .expect("commit");
        }
    }
    assert_eq!(read, 12);
    let member_id = reader.member_id().to_owned();
    let s = "org.apache.kafka.consumer.share.fetch.manager.";
    let consumed = format!("{s}records.consumed.total");
    let sent = format!("{s}acknowledgements.send.total");
    wait_for("12 consumed and acknowledged", &id, |p| {
        total(p, &consumed) == 12 && total(p, &sent) == 12
    })
    .await;
    let before_close = pushes(|x| x == id).len();
    let stats = reader.stats();
    reader.close(Duration::from_secs(10)).await.expect("closed");
    let got = wait_for("the terminating push", &id, terminated).await;
    unsubscribe(&id).await;

    check_own_engine(
        "share",
        &got,
        &instance,
        &prefixes,
        &[
            &consumed,
            &sent,
            &format!("{s}acknowledgements.error.total"),
            &format!("{s}fetch.latency.max"),
            // Java's share consumer names its network client's metrics as KafkaConsumer's.
            "org.apache.kafka.consumer.connection.creation.total",
            "org.apache.kafka.consumer.node.request.latency.max",
            "kafkit.consumer.share.acknowledgement.total",
        ],
        before_close,
    );
    for (i, p) in got.iter().enumerate() {
        assert_eq!(
            p["resource"],
            serde_json::json!({ "group_id": group, "group_member_id": member_id }),
            "push {i}"
        );
    }
    assert_eq!(total(&got, &consumed), 12);
    assert_eq!(total(&got, &sent), 12);
    assert_eq!(total(&got, &format!("{s}acknowledgements.error.total")), 0);
    assert_eq!(
        total_where(
            &got,
            "kafkit.consumer.share.acknowledgement.total",
            &[("type", "accept")]
        ),
        12
    );
    assert_eq!(stats.acknowledgements_failed, 0, "{stats:?}");
}

/// `s` as a regular expression that matches only itself (Kafka's `match` values are Java
/// regular expressions; our ids hold letters, digits, '-', '.' and '_').
fn regex_literal(s: &str) -> String {
    s.replace('.', "\\.")
}
