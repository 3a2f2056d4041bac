//! The integration tests: one test binary (one librdkafka link), one module per area. They run
//! against real brokers: tansu (started by `cargo xtask test`, or `cargo xtask broker start`) and
//! librdkafka's in-process mock cluster; shared helpers live in the `integration_tests` library
//! (`tests/lib.rs`). `cargo nextest run -p integration-tests -E 'test(/^writer_mock::/)'` runs one module.
//!
//! The broker-neutral modules live in `family/` and are compiled twice, once under [`on_tansu`]
//! and once under [`on_kafka`] (Apache Kafka 4.4): one body, two brokers. Each family module reads
//! its broker from its parent (`super::broker()`, `super::BROKER`); where tansu and Kafka differ,
//! the test follows Kafka and names tansu's quirk (docs/testing.md).

// The family files are compiled twice on purpose (one body, two brokers).
#![allow(clippy::duplicate_mod)]

/// Declares the family modules (`tests/it/family/*.rs`) inside the module that calls it, which
/// defines `broker()`, `dial()` and `BROKER` for them.
macro_rules! broker_family {
    () => {
        #[path = "family/admin_groups.rs"]
        pub(crate) mod admin_groups;
        #[path = "family/compression_interop.rs"]
        pub(crate) mod compression_interop;
        #[path = "family/conn.rs"]
        pub(crate) mod conn;
        #[path = "family/group.rs"]
        pub(crate) mod group;
        #[path = "family/group_commits.rs"]
        pub(crate) mod group_commits;
        #[path = "family/group_daily.rs"]
        pub(crate) mod group_daily;
        #[path = "family/group_static.rs"]
        pub(crate) mod group_static;
        #[path = "family/group_upgrade.rs"]
        pub(crate) mod group_upgrade;
        #[path = "family/reader.rs"]
        pub(crate) mod reader;
        #[path = "family/reader_txn.rs"]
        pub(crate) mod reader_txn;
        #[path = "family/transact.rs"]
        pub(crate) mod transact;
        #[path = "family/transport.rs"]
        pub(crate) mod transport;
        #[path = "family/transport_split.rs"]
        pub(crate) mod transport_split;
        #[path = "family/writer.rs"]
        pub(crate) mod writer;
        #[path = "family/writer_txn.rs"]
        pub(crate) mod writer_txn;
    };
}

mod admin44_kafka;
mod admin_groups_mock;
mod admin_kafka;
mod admin_mock;
mod admin_tansu;
mod balancer_golden;
mod capture;
mod conn_mock;
mod durability_kafka;
mod group_assign_peer;
mod group_coordinator;
mod group_daily_kafka;
mod group_faults_mock;
mod group_kafka;
mod group_mock;
mod group_pattern_mock;
mod group_stats_mock;
mod group_transport_mock;
mod group_upgrade_mock;
mod java_peer_kafka;
mod metrics_kafka;
mod metrics_mock;
mod on_kafka;
mod on_tansu;
mod otel_kafka;
mod otel_mock;
mod peer_smoke;
mod produce_ids_kafka;
mod reader_faults_mock;
mod reader_kafka;
mod reader_mock;
mod rebootstrap_kafka;
mod sasl_kafka;
mod sasl_shared;
mod sasl_tansu;
mod secure_kafka;
mod secure_tansu;
mod share_java_kafka;
mod share_kafka;
mod share_review_kafka;
mod soak;
mod telemetry_clients_mock;
mod telemetry_kafka;
mod telemetry_mock;
mod tls_shared;
mod transact_mock;
mod transport_mock;
mod transport_split_mock;
mod txn_v2_kafka;
mod writer_faults_mock;
mod writer_harden;
mod writer_kafka;
mod writer_many_senders_mock;
mod writer_mock;
mod writer_txn_mock;
