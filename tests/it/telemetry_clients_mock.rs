//! The clients' own KIP-714 engines (`enable_metrics_push`, on by default) against librdkafka's
//! mock cluster, which hands out subscriptions (GetTelemetrySubscriptions) and decodes every
//! PushTelemetry; a relay keeps the clients' telemetry frames, which the tests decode: the
//! Writer pushes Java's standard producer metrics, a group member (classic and KIP-848) the
//! consumer's with its `group_id` and `group_member_id` resource attributes, close ends with
//! the terminating push, and `enable_metrics_push(false)` sends no telemetry request at all.
//!
//! librdkafka's mock (2.12) has no share groups (no ShareGroupHeartbeat, ShareFetch): the
//! ShareReader's pushes are for the Apache Kafka tests.

use std::collections::BTreeMap;
use std::time::Duration;

use integration_tests::{RelayedMock, RelayedRequest, unique_topic};
use kafkit::protocol::Request as _;
use kafkit::protocol::messages::{GetTelemetrySubscriptionsRequest, PushTelemetryRequest};
use kafkit::telemetry::TelemetryError;
use kafkit::telemetry::otlp::{self, MetricsData};
use kafkit::{
    AutoOffsetReset, GroupProtocol, GroupReader, ProducerRecord, ReaderBuilder, Transport, Writer,
};

use super::telemetry_mock::{decode, from, own_transport, payload, subscribe_mock};

const GUARD: Duration = Duration::from_secs(30);
const P: &str = "org.apache.kafka.producer.";
const C: &str = "org.apache.kafka.consumer.";

type Frames = Vec<(RelayedRequest, Vec<u8>)>;

/// One data point: its labels and its value as a float.
type Point = (BTreeMap<String, String>, f64);

/// A push read back: its resource attributes and every data point by metric name.
struct Pushed {
    terminating: bool,
    instance: kafkit::protocol::Uuid,
    resource: BTreeMap<String, String>,
    points: BTreeMap<String, Vec<Point>>,
}

fn labels(kvs: &[otlp::KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            let v = kv.value.as_ref().map(|v| v.string_value.clone());
            (kv.key.clone(), v.unwrap_or_default())
        })
        .collect()
}

fn read(p: &PushTelemetryRequest) -> Pushed {
    let data: MetricsData = payload(p);
    let resource = data
        .resource_metrics
        .first()
        .and_then(|r| r.resource.as_ref())
        .map(|r| labels(&r.attributes))
        .unwrap_or_default();
    let mut points: BTreeMap<String, Vec<Point>> = BTreeMap::new();
    for m in data.metrics() {
        let dps = match &m.data {
            Some(otlp::Data::Gauge(g)) => &g.data_points,
            Some(otlp::Data::Sum(s)) => &s.data_points,
            None => continue,
        };
        for dp in dps {
            let v = match dp.value {
                Some(otlp::Value::AsDouble(v)) => v,
                Some(otlp::Value::AsInt(v)) => v as f64,
                None => continue,
            };
            points
                .entry(m.name.clone())
                .or_default()
                .push((labels(&dp.attributes), v));
        }
    }
    Pushed {
        terminating: p.terminating,
        instance: p.client_instance_id,
        resource,
        points,
    }
}

/// Every capture of `mock`'s relay so far, added to `frames`; waits (polling the capture, as
/// the relay has no signal) until `done` holds for the pushes read back, at most [`GUARD`].
async fn pushes_until(
    mock: &RelayedMock,
    frames: &mut Frames,
    client: &str,
    done: impl Fn(&[Pushed]) -> bool,
) -> Vec<Pushed> {
    let deadline = tokio::time::Instant::now() + GUARD;
    loop {
        frames.extend(mock.relays[0].take_captured());
        let pushes: Vec<Pushed> = decode::<PushTelemetryRequest>(frames, client)
            .iter()
            .map(read)
            .collect();
        if done(&pushes) {
            return pushes;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pushes awaited did not come: {} so far",
            pushes.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The largest value `name` took over `pushes` (None: never pushed).
fn max_of(pushes: &[Pushed], name: &str) -> Option<f64> {
    pushes
        .iter()
        .flat_map(|p| p.points.get(name).into_iter().flatten())
        .map(|(_, v)| *v)
        .reduce(f64::max)
}

/// Writes `n` records `v0`, `v1`... to `topic` with a Writer that pushes no metrics of its own
/// (only the client under test pushes).
async fn write_without_push(t: &Transport, topic: &str, n: usize) {
    let writer = Writer::builder(t.clone())
        .enable_metrics_push(false)
        .build()
        .expect("writer");
    for i in 0..n {
        writer
            .produce(ProducerRecord::new(topic, format!("v{i}")))
            .await
            .expect("written");
    }
}

fn capture_telemetry(mock: &RelayedMock) {
    mock.relays[0].capture(PushTelemetryRequest::API_KEY as i16);
    mock.relays[0].capture(GetTelemetrySubscriptionsRequest::API_KEY as i16);
}

fn create_topic(mock: &RelayedMock, topic: &str) {
    mock.cluster()
        .create_topic(topic, 1, 1)
        .expect("mock create_topic");
}

/// A Writer built with the defaults pushes Java's standard producer metrics under the
/// subscription's prefix (nothing else), with plausible values after writing (records waited
/// in the buffer, Produce requests to node 1 took time, a connection was made), under the id
/// `client_instance_id` gives; close ends with one terminating push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_pushes_the_standard_producer_metrics() {
    let mock = RelayedMock::start(1).await;
    subscribe_mock(&mock, 200, &[P]);
    capture_telemetry(&mock);
    let topic = unique_topic("telemetry-writer");
    create_topic(&mock, &topic);
    let (t, client) = own_transport(&mock);
    let writer = Writer::builder(t)
        .linger(Duration::from_millis(20))
        .build()
        .expect("writer");
    for i in 0..5 {
        writer
            .produce(ProducerRecord::new(&topic, format!("v{i}")))
            .await
            .expect("written");
    }
    let id = writer
        .client_instance_id(GUARD)
        .await
        .expect("the mock gives an id");
    assert!(!id.is_zero());
    let mut frames = Vec::new();
    pushes_until(&mock, &mut frames, &client, |p| {
        max_of(p, &format!("{P}record.queue.time.max")).is_some_and(|v| v > 0.0)
    })
    .await;
    writer.close(Duration::from_secs(5)).await.expect("closed");
    let pushes = pushes_until(&mock, &mut frames, &client, |p| {
        p.iter().any(|p| p.terminating)
    })
    .await;

    assert!(pushes.iter().all(|p| p.instance == id), "one instance id");
    for p in &pushes {
        for name in p.points.keys() {
            assert!(
                name.starts_with(P),
                "only what the subscription asks: {name}"
            );
        }
    }
    // Linger is 20 ms: each batch waited about that long before its send.
    let queue_max = max_of(&pushes, &format!("{P}record.queue.time.max")).expect("queue time");
    assert!(
        (5.0..GUARD.as_millis() as f64).contains(&queue_max),
        "{queue_max}"
    );
    let latency: Vec<&Point> = pushes
        .iter()
        .flat_map(|p| p.points.get(&format!("{P}node.request.latency.max")))
        .flatten()
        .collect();
    assert!(!latency.is_empty(), "Produce latencies per node");
    assert!(
        latency
            .iter()
            .all(|(l, v)| l.get("node_id").map(String::as_str) == Some("1") && *v >= 0.0),
        "{latency:?}"
    );
    // Delta sums (the mock asks for deltas): they add up to the connections made, at least one.
    let connections: f64 = pushes
        .iter()
        .flat_map(|p| p.points.get(&format!("{P}connection.creation.total")))
        .flatten()
        .map(|(_, v)| *v)
        .sum();
    assert!(connections >= 1.0, "{connections}");
    for name in ["produce.throttle.time.avg", "record.error.total"] {
        assert!(max_of(&pushes, &format!("{P}{name}")).is_some(), "{name}");
    }
    assert_eq!(
        max_of(&pushes, &format!("{P}record.error.total")),
        Some(0.0)
    );
    assert!(
        pushes.last().expect("pushes").terminating,
        "close pushes last"
    );
    assert_eq!(pushes.iter().filter(|p| p.terminating).count(), 1);
}

/// A group member (classic and KIP-848) pushes the consumer metrics, labelled with its group
/// id and, once it joined, its member id; close ends with the terminating push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_member_pushes_consumer_metrics_with_its_group_labels() {
    for protocol in [GroupProtocol::Classic, GroupProtocol::Consumer] {
        member_pushes(protocol).await;
    }
}

async fn member_pushes(protocol: GroupProtocol) {
    let mock = RelayedMock::start(1).await;
    subscribe_mock(&mock, 200, &[C]);
    // The classic protocol's first join waits the group's initial rebalance delay (3 s by
    // default on the mock).
    set_initial_rebalance_delay(&mock, Duration::from_millis(100));
    capture_telemetry(&mock);
    let topic = unique_topic("telemetry-group");
    let group = unique_topic("telemetry-g");
    create_topic(&mock, &topic);
    let (t, client) = own_transport(&mock);
    write_without_push(&t, &topic, 10).await;
    let mut member = GroupReader::builder(t.clone(), &group)
        .subscribe([topic.as_str()])
        .group_protocol(protocol)
        .enable_auto_commit(false)
        .reader(earliest(&t))
        .build()
        .expect("member");
    integration_tests::read_from_member(&mut member, 10, GUARD).await;
    member.commit().await.expect("committed");
    let member_id = member.stats().member_id;
    assert!(!member_id.is_empty());
    let id = member.client_instance_id(GUARD).await.expect("an id");
    let mut frames = Vec::new();
    pushes_until(&mock, &mut frames, &client, |p| {
        max_of(p, &format!("{C}coordinator.commit.latency.max")).is_some_and(|v| v > 0.0)
            && p.iter().any(|p| p.resource.contains_key("group_member_id"))
    })
    .await;
    member.close().await;
    let pushes = pushes_until(&mock, &mut frames, &client, |p| {
        p.iter().any(|p| p.terminating)
    })
    .await;

    assert!(pushes.iter().all(|p| p.instance == id), "{protocol:?}");
    for p in &pushes {
        assert_eq!(p.resource.get("group_id"), Some(&group), "{protocol:?}");
        if let Some(m) = p.resource.get("group_member_id") {
            assert_eq!(m, &member_id, "{protocol:?}");
        }
        for name in p.points.keys() {
            assert!(name.starts_with(C), "{name}");
        }
    }
    let last = pushes.last().expect("pushes");
    assert!(last.terminating, "{protocol:?}: close pushes last");
    assert_eq!(
        last.resource.get("group_member_id"),
        Some(&member_id),
        "{protocol:?}"
    );
    assert_eq!(
        max_of(&pushes, &format!("{C}coordinator.assigned.partitions")),
        Some(1.0),
        "{protocol:?}"
    );
    let consumed: f64 = pushes
        .iter()
        .flat_map(|p| {
            p.points
                .get(&format!("{C}fetch.manager.records.consumed.total"))
        })
        .flatten()
        .map(|(_, v)| *v)
        .sum();
    assert_eq!(
        consumed, 10.0,
        "{protocol:?}: the deltas add up to what was read"
    );
    for name in [
        "fetch.manager.fetch.latency.max",
        "node.request.latency.max",
        "coordinator.rebalance.latency.max",
        "coordinator.rebalance.latency.total",
        "connection.creation.total",
    ] {
        assert!(
            max_of(&pushes, &format!("{C}{name}")).is_some(),
            "{protocol:?}: {name}"
        );
    }
    assert!(
        max_of(&pushes, &format!("{C}coordinator.rebalance.latency.max")).is_some_and(|v| v > 0.0),
        "{protocol:?}: the join took time"
    );
}

/// A Reader without a group pushes too (as Java's consumer does), labelled with its rack;
/// `close_within` ends with the terminating push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_without_a_group_pushes_and_close_within_terminates() {
    let mock = RelayedMock::start(1).await;
    subscribe_mock(&mock, 200, &[C]);
    capture_telemetry(&mock);
    let topic = unique_topic("telemetry-reader");
    create_topic(&mock, &topic);
    let (t, client) = own_transport(&mock);
    write_without_push(&t, &topic, 4).await;
    let reader = kafkit::Reader::builder(t)
        .client_rack("rack-1")
        .build()
        .expect("reader");
    reader
        .assign([(topic.as_str(), 0, kafkit::StartOffset::Earliest)])
        .expect("assign");
    let mut seen = 0;
    while seen < 4 {
        let parts = tokio::time::timeout(GUARD, reader.next_batch())
            .await
            .expect("in time")
            .expect("a batch");
        seen += parts.iter().map(|p| p.records.len()).sum::<usize>();
    }
    let id = reader.client_instance_id(GUARD).await.expect("an id");
    let mut frames = Vec::new();
    pushes_until(&mock, &mut frames, &client, |p| {
        max_of(p, &format!("{C}fetch.manager.fetch.latency.max")).is_some_and(|v| v > 0.0)
    })
    .await;
    reader.close_within(Duration::from_secs(5)).await;
    let pushes = pushes_until(&mock, &mut frames, &client, |p| {
        p.iter().any(|p| p.terminating)
    })
    .await;
    assert!(pushes.iter().all(|p| p.instance == id));
    assert!(pushes.iter().all(|p| {
        p.resource.get("client_rack").map(String::as_str) == Some("rack-1")
            && !p.resource.contains_key("group_id")
    }));
    let consumed: f64 = pushes
        .iter()
        .flat_map(|p| {
            p.points
                .get(&format!("{C}fetch.manager.records.consumed.total"))
        })
        .flatten()
        .map(|(_, v)| *v)
        .sum();
    assert_eq!(consumed, 4.0);
    assert!(pushes.last().expect("pushes").terminating);
    assert!(
        reader.next_batch().await.is_err(),
        "close_within closed the Reader"
    );
}

/// With `enable_metrics_push(false)` a Writer, a group member and a Reader send no
/// GetTelemetrySubscriptions
/// (nor PushTelemetry) at all, and `client_instance_id` says push is off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_off_sends_no_telemetry_request() {
    let mock = RelayedMock::start(1).await;
    subscribe_mock(&mock, 100, &[P, C]);
    set_initial_rebalance_delay(&mock, Duration::from_millis(100));
    capture_telemetry(&mock);
    let topic = unique_topic("telemetry-off");
    create_topic(&mock, &topic);
    let (t, client) = own_transport(&mock);
    let writer = Writer::builder(t.clone())
        .enable_metrics_push(false)
        .build()
        .expect("writer");
    writer
        .produce(ProducerRecord::new(&topic, "v"))
        .await
        .expect("written");
    let mut member = GroupReader::builder(t.clone(), unique_topic("telemetry-off-g"))
        .subscribe([topic.as_str()])
        .enable_metrics_push(false)
        .reader(earliest(&t))
        .build()
        .expect("member");
    let record = tokio::time::timeout(GUARD, member.next())
        .await
        .expect("in time")
        .expect("a record")
        .expect("no error");
    assert_eq!(record.value.as_deref(), Some(&b"v"[..]));
    let reader = kafkit::Reader::builder(t.clone())
        .enable_metrics_push(false)
        .build()
        .expect("reader");
    reader
        .assign([(topic.as_str(), 0, kafkit::StartOffset::Earliest)])
        .expect("assign");
    let batch = tokio::time::timeout(GUARD, reader.next_batch())
        .await
        .expect("in time")
        .expect("a batch");
    assert_eq!(batch.iter().map(|p| p.records.len()).sum::<usize>(), 1);
    for got in [
        writer.client_instance_id(Duration::from_secs(1)).await,
        member.client_instance_id(Duration::from_secs(1)).await,
        reader.client_instance_id(Duration::from_secs(1)).await,
    ] {
        assert!(
            matches!(got, Err(kafkit::Error::Telemetry(TelemetryError::Disabled))),
            "{got:?}"
        );
    }
    writer.close(Duration::from_secs(5)).await.expect("closed");
    member.close().await;
    reader.close_within(Duration::from_secs(5)).await;
    // The clients ran for longer than the mock's push interval (100 ms): an engine would have
    // asked for its subscription by now.
    let frames: Vec<_> = mock.relays[0]
        .take_captured()
        .into_iter()
        .filter(|(_, frame)| from(frame, &client))
        .collect();
    assert!(frames.is_empty(), "{} telemetry requests", frames.len());
}

#[allow(unsafe_code)]
fn set_initial_rebalance_delay(mock: &RelayedMock, delay: Duration) {
    use rdkafka::producer::Producer as _;
    let ms = i32::try_from(delay.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: `mock.owner` owns the live mock cluster (pointer checked non-null); the setter
    // takes the cluster's lock itself.
    unsafe {
        let cluster =
            rdkafka::bindings::rd_kafka_handle_mock_cluster(mock.owner.client().native_ptr());
        assert!(!cluster.is_null());
        rdkafka::bindings::rd_kafka_mock_group_initial_rebalance_delay_ms(cluster, ms);
    }
}

/// The Reader of the members above: from the earliest offset.
fn earliest(t: &Transport) -> ReaderBuilder {
    kafkit::Reader::builder(t.clone()).auto_offset_reset(AutoOffsetReset::Earliest)
}
