//! The `metrics` cargo feature on Apache Kafka, for what librdkafka's mock cluster cannot show:
//! a ShareReader (KIP-932) counts the records it hands out as
//! `messaging.client.consumed.messages` of its share group, and times its acknowledgements as
//! `messaging.client.operation.duration` (`acknowledge`, `settle`).
//!
//! As in `metrics_mock`, the recorder is this thread's own (`metrics::with_local_recorder`) and
//! the clients run on a current-thread runtime inside it, so no other test's recordings reach
//! it.

use std::time::Duration;

use kafkit::AcknowledgementMode;
use metrics_exporter_prometheus::PrometheusBuilder;

use super::metrics_mock::{one, sum};
use super::share_kafka::{reader, topic_and_group, transport, write_on};

const RECORDS: usize = 12;
const T: Duration = Duration::from_secs(60);

#[test]
fn a_share_reader_counts_what_it_hands_out_and_times_its_acknowledgements() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (topic, group) = metrics::with_local_recorder(&recorder, || {
        rt.block_on(async {
            let (topic, group) = topic_and_group("metrics-share", 2).await;
            write_on(&transport(), &topic, 2, RECORDS / 2, "m").await;
            let mut share = reader(&group, &topic, AcknowledgementMode::Implicit);
            let mut got = 0;
            let deadline = tokio::time::Instant::now() + T;
            while got < RECORDS {
                assert!(tokio::time::Instant::now() < deadline, "{got} of {RECORDS}");
                got += share
                    .poll(Duration::from_secs(1))
                    .await
                    .expect("poll")
                    .len();
            }
            assert_eq!(got, RECORDS, "no record twice");
            share.commit(T).await.expect("commit");
            share.close(T).await.expect("close");
            (topic, group)
        })
    });
    let text = handle.render();
    let consumed = one(
        &text,
        "messaging_client_consumed_messages",
        &[
            ("messaging_destination_name", topic.as_str()),
            ("messaging_consumer_group_name", group.as_str()),
        ],
    );
    assert_eq!(consumed, RECORDS as f64, "consumed: {text}");
    let (acks, lines) = sum(
        &text,
        "messaging_client_operation_duration_count",
        &[
            ("messaging_operation_name", "acknowledge"),
            ("messaging_operation_type", "settle"),
        ],
    );
    assert!(lines >= 1 && acks >= 1.0, "acknowledge durations: {text}");
}
