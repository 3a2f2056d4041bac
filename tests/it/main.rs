//! The integration tests: one test binary (one librdkafka link), one module per area. They run
//! against real brokers: tansu (started by `cargo xtask test`, or `cargo xtask broker start`) and
//! librdkafka's in-process mock cluster; shared helpers live in the `integration_tests` library
//! (`tests/lib.rs`). `cargo nextest run -p integration-tests -E 'test(/^writer_mock::/)'` runs one module.

mod admin_groups_mock;
mod admin_groups_tansu;
mod admin_mock;
mod admin_tansu;
mod balancer_golden;
mod capture;
mod compression_interop;
mod conn_mock;
mod conn_tansu;
mod group_assign_peer;
mod group_commits_tansu;
mod group_coordinator_tansu;
mod group_faults_mock;
mod group_mock;
mod group_pattern_mock;
mod group_static_tansu;
mod group_stats_mock;
mod group_tansu;
mod group_transport_mock;
mod group_upgrade_mock;
mod group_upgrade_tansu;
mod peer_smoke;
mod reader_faults_mock;
mod reader_mock;
mod reader_tansu;
mod reader_txn_tansu;
mod sasl_tansu;
mod secure_tansu;
mod soak;
mod transact_tansu;
mod transport_mock;
mod transport_split_mock;
mod transport_split_tansu;
mod transport_tansu;
mod writer_faults_mock;
mod writer_harden;
mod writer_mock;
mod writer_tansu;
mod writer_txn_mock;
mod writer_txn_tansu;
