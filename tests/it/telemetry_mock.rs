//! KIP-714 client metrics against librdkafka's mock cluster, which implements the subscription
//! side (GetTelemetrySubscriptions: instance id, zstd/lz4/gzip/snappy, the push interval and
//! the requested prefixes set here) and decodes every PushTelemetry payload, aborting on one it
//! cannot read. A relay keeps our PushTelemetry frames, which the test decodes itself: the
//! payload must be the OTLP `MetricsData` of the values the source reported.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use integration_tests::{RelayedMock, RelayedRequest, unique_topic};
use kafkit::compress::Compression;
use kafkit::protocol::Request as _;
use kafkit::protocol::messages::{GetTelemetrySubscriptionsRequest, PushTelemetryRequest};
use kafkit::telemetry::otlp::{self, MetricsData};
use kafkit::telemetry::{Metric, MetricSource, Telemetry};
use kafkit::{Dialer, Transport};

const ERRORS: &str = "org.apache.kafka.producer.record.error.total";
const BATCH: &str = "org.apache.kafka.producer.batch.size.avg";

/// A source whose counter the test moves between pushes.
struct Source(AtomicI64);

impl MetricSource for Source {
    fn collect(&self, out: &mut Vec<Metric>) {
        out.push(Metric::counter(ERRORS, self.0.load(Ordering::SeqCst)).label("node_id", "1"));
        out.push(Metric::gauge(BATCH, 512.0));
        out.push(Metric::counter("kafkit.not.asked.for", 1));
    }
}

/// Sets the mock's push interval and requested metric prefixes.
#[allow(unsafe_code)]
pub(super) fn subscribe_mock(mock: &RelayedMock, interval_ms: i64, prefixes: &[&str]) {
    use rdkafka::bindings as rd;
    use rdkafka::producer::Producer as _;
    let owned: Vec<std::ffi::CString> = prefixes
        .iter()
        .map(|p| std::ffi::CString::new(*p).expect("no NUL"))
        .collect();
    let mut ptrs: Vec<*mut std::ffi::c_char> =
        owned.iter().map(|c| c.as_ptr().cast_mut()).collect();
    // SAFETY: `mock.owner` owns the live mock cluster (pointer checked non-null); librdkafka
    // copies the strings (rd_strdup) during the call and keeps no pointer into `owned`, which
    // outlives it.
    unsafe {
        let cluster = rd::rd_kafka_handle_mock_cluster(mock.owner.client().native_ptr());
        assert!(!cluster.is_null());
        rd::rd_kafka_mock_telemetry_set_push_interval(cluster, interval_ms);
        rd::rd_kafka_mock_telemetry_set_requested_metrics(cluster, ptrs.as_mut_ptr(), ptrs.len());
    }
}

/// Makes broker 1 answer its next PushTelemetry with `code`.
#[allow(unsafe_code)]
fn push_error(mock: &RelayedMock, code: rdkafka::types::RDKafkaRespErr) {
    use rdkafka::bindings as rd;
    use rdkafka::producer::Producer as _;
    // SAFETY: as in `subscribe_mock`; the variadic pair is (error code as a C int, rtt 0 ms),
    // copied by librdkafka.
    unsafe {
        let cluster = rd::rd_kafka_handle_mock_cluster(mock.owner.client().native_ptr());
        assert!(!cluster.is_null());
        rd::rd_kafka_mock_broker_push_request_error_rtts(
            cluster,
            1,
            PushTelemetryRequest::API_KEY as i16,
            1,
            code as std::ffi::c_int,
            0,
        );
    }
}

pub(super) fn decode<R: kafkit::protocol::Request>(
    frames: &[(RelayedRequest, Vec<u8>)],
    client: &str,
) -> Vec<R> {
    frames
        .iter()
        .filter(|(r, frame)| r.api_key == R::API_KEY as i16 && from(frame, client))
        .map(|(_, frame)| {
            let mut buf = bytes::Bytes::from(frame.clone());
            buf.advance(4);
            let (_api, version, _correlation) = (buf.get_i16(), buf.get_i16(), buf.get_i32());
            let n = usize::try_from(buf.get_i16()).unwrap_or(0);
            buf.advance(n);
            if R::request_header_version(version) >= 2 {
                assert_eq!(buf.get_u8(), 0, "no tagged fields in our request headers");
            }
            R::decode(&mut buf, version).expect("a request of ours")
        })
        .collect()
}

/// A transport through the mock's first relay whose requests carry a client id of its own,
/// unique to the test, and that id. The tests read only the frames with it ([`from`]): the
/// mock hands every client the same instance id, and others send telemetry through the relay
/// too (the mock's owner, a librdkafka client, pushes its own KIP-714 metrics there).
pub(super) fn own_transport(mock: &RelayedMock) -> (Transport, String) {
    let client = unique_topic("telemetry-client");
    let transport = Transport::builder([mock.relays[0].addr()])
        .dialer(Dialer::builder().client_id(&client).build())
        .build()
        .expect("transport");
    (transport, client)
}

/// The client id in a captured request frame's header (None: a frame too short to hold one).
pub(super) fn client_id(frame: &[u8]) -> Option<&[u8]> {
    // size (4), api key (2), version (2), correlation id (4), client id (i16 length + bytes).
    let len = frame.get(12..14)?;
    let n = usize::try_from(i16::from_be_bytes([len[0], len[1]])).ok()?;
    frame.get(14..14 + n)
}

/// Whether a captured request frame was sent with the client id `client`.
pub(super) fn from(frame: &[u8], client: &str) -> bool {
    client_id(frame) == Some(client.as_bytes())
}

/// A push's payload, decompressed and decoded.
pub(super) fn payload(p: &PushTelemetryRequest) -> MetricsData {
    let compression = Compression::from_id(u8::try_from(p.compression_type).expect("an id"))
        .expect("a known codec");
    let raw = if compression == Compression::None {
        p.metrics.to_vec()
    } else {
        let mut out = BytesMut::new();
        compression
            .codec()
            .expect("codec")
            .decompress(&p.metrics, 1 << 20, &mut out)
            .expect("decompresses");
        out.to_vec()
    };
    MetricsData::from_bytes(&raw).expect("an OTLP MetricsData")
}

/// The counter's (value, temporality) and whether the gauge and the unasked metric are there.
fn read(data: &MetricsData) -> (Option<(i64, i32)>, bool, bool) {
    let mut sum = None;
    let (mut gauge, mut other) = (false, false);
    for m in data.metrics() {
        match (&m.data, m.name.as_str()) {
            (Some(otlp::Data::Sum(s)), ERRORS) => {
                assert!(s.is_monotonic);
                let dp = &s.data_points[0];
                assert_eq!(dp.attributes, [otlp::KeyValue::string("node_id", "1")]);
                if let Some(otlp::Value::AsInt(v)) = dp.value {
                    sum = Some((v, s.aggregation_temporality));
                }
            }
            (Some(otlp::Data::Gauge(g)), BATCH) => {
                gauge = g.data_points[0].value == Some(otlp::Value::AsDouble(512.0));
            }
            _ => other = true,
        }
    }
    (sum, gauge, other)
}

async fn wait_for_pushes(
    mock: &RelayedMock,
    frames: &mut Vec<(RelayedRequest, Vec<u8>)>,
    client: &str,
    n: usize,
) {
    for _ in 0..100 {
        frames.extend(mock.relays[0].take_captured());
        if decode::<PushTelemetryRequest>(frames, client).len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("fewer than {n} pushes arrived");
}

/// Pushes arrive at the mock's interval, compressed as it accepts (zstd first), carry the
/// selected metrics only, counters as deltas (the mock asks for delta temporality), and close
/// sends a terminating push.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_reach_the_mock_and_decode_to_the_values_sent() {
    let mock = RelayedMock::start(1).await;
    subscribe_mock(&mock, 200, &["org.apache.kafka.producer."]);
    mock.relays[0].capture(PushTelemetryRequest::API_KEY as i16);
    mock.relays[0].capture(GetTelemetrySubscriptionsRequest::API_KEY as i16);
    let (transport, client) = own_transport(&mock);
    let source = Arc::new(Source(AtomicI64::new(5)));
    let telemetry = Telemetry::builder(transport)
        .source(source.clone())
        .resource_label("client_rack", "rack-a")
        .build()
        .expect("engine");
    let id = telemetry
        .client_instance_id(Duration::from_secs(10))
        .await
        .expect("an id");
    assert!(!id.is_zero(), "the mock gives an instance id");

    let mut frames = Vec::new();
    wait_for_pushes(&mock, &mut frames, &client, 1).await;
    source.0.store(12, Ordering::SeqCst);
    wait_for_pushes(&mock, &mut frames, &client, 3).await;
    telemetry.close(Duration::from_secs(5)).await;
    frames.extend(mock.relays[0].take_captured());

    let pushes = decode::<PushTelemetryRequest>(&frames, &client);
    let expected = Compression::Zstd;
    let mut total = 0;
    for (i, p) in pushes.iter().enumerate() {
        assert_eq!(p.client_instance_id, id);
        if expected.is_supported() {
            assert_eq!(p.compression_type, expected.id() as i8, "push {i}");
        }
        let data = payload(p);
        let resource = data.resource_metrics[0]
            .resource
            .as_ref()
            .expect("resource");
        assert_eq!(
            resource.attributes,
            [otlp::KeyValue::string("client_rack", "rack-a")]
        );
        let (sum, gauge, other) = read(&data);
        let (delta, temporality) = sum.expect("the counter");
        assert_eq!(temporality, otlp::DELTA, "the mock asks for deltas");
        assert!(gauge && !other, "push {i}: selected metrics only");
        total += delta;
    }
    // Deltas add up to the counter's last value: 5 at first, 7 more after the move.
    assert_eq!(total, 12, "{pushes:?}");
    assert!(
        pushes.last().expect("pushes").terminating,
        "close ends with a terminating push"
    );
    assert_eq!(pushes.iter().filter(|p| p.terminating).count(), 1);
}

/// UNKNOWN_SUBSCRIPTION_ID makes the engine ask for a subscription again, with the instance id
/// it has; TELEMETRY_TOO_LARGE skips the push and the next ones carry fewer metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_pushes_resubscribe_or_shrink() {
    use rdkafka::types::RDKafkaRespErr as E;
    let mock = RelayedMock::start(1).await;
    subscribe_mock(&mock, 150, &["*"]);
    mock.relays[0].capture(PushTelemetryRequest::API_KEY as i16);
    mock.relays[0].capture(GetTelemetrySubscriptionsRequest::API_KEY as i16);
    push_error(&mock, E::RD_KAFKA_RESP_ERR_UNKNOWN_SUBSCRIPTION_ID);
    push_error(&mock, E::RD_KAFKA_RESP_ERR_TELEMETRY_TOO_LARGE);
    let (transport, client) = own_transport(&mock);
    let telemetry = Telemetry::builder(transport)
        .source(Arc::new(Source(AtomicI64::new(1))))
        .build()
        .expect("engine");
    let id = telemetry
        .client_instance_id(Duration::from_secs(10))
        .await
        .expect("an id");
    let mut frames = Vec::new();
    wait_for_pushes(&mock, &mut frames, &client, 3).await;
    telemetry.close(Duration::from_secs(5)).await;
    frames.extend(mock.relays[0].take_captured());

    let subs = decode::<GetTelemetrySubscriptionsRequest>(&frames, &client);
    assert!(
        subs[0].client_instance_id.is_zero(),
        "the first ask has no id"
    );
    // The ask after the first push (refused UNKNOWN_SUBSCRIPTION_ID) names the instance. (An
    // ask before it may be a retry of a failed first one, under load: still without an id.)
    let first_push = frames
        .iter()
        .position(|(r, f)| r.api_key == PushTelemetryRequest::API_KEY as i16 && from(f, &client))
        .expect("a push");
    let again = decode::<GetTelemetrySubscriptionsRequest>(&frames[first_push..], &client);
    assert!(
        !again.is_empty(),
        "asked again after UNKNOWN_SUBSCRIPTION_ID: {subs:?}"
    );
    assert_eq!(
        again[0].client_instance_id, id,
        "the ask after the refused push names the instance"
    );
    let counts: Vec<usize> = decode::<PushTelemetryRequest>(&frames, &client)
        .iter()
        .map(|p| payload(p).metrics().count())
        .collect();
    // "*" selects all three metrics; the push refused as too large (the second) halves the
    // count of the ones after it.
    assert_eq!(counts[..3], [3, 3, 1], "{counts:?}");
}
