//! `cargo xtask capture` end to end (see `integration_tests::capture`): librdkafka's and our
//! clients' traffic with tansu, recorded by the relay, becomes seed files for the `messages`,
//! `records` and `conn_frames` fuzz targets, and every recorded request and response decodes
//! back with the key and version its seed names.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_traffic_becomes_seeds_that_decode_back() {
    let out = std::env::temp_dir().join(integration_tests::unique_topic("kafkit-capture"));
    let written = integration_tests::capture::run(&out).await.expect("seeds");
    let _ = std::fs::remove_dir_all(&out);
    for target in ["messages", "records", "conn_frames"] {
        let (new, _) = written.targets.get(target).copied().unwrap_or_default();
        assert!(new > 0, "{target}: {:?}", written.targets);
    }
    assert!(written.decoded.0 > 100, "{:?}", written.decoded);
    assert_eq!(written.decoded.1, 0, "every frame decodes back");
}
