//! The short form of the soak run (`cargo xtask soak` runs the full one, see
//! `integration_tests::soak`): an idempotent writer and a group of 3 members under faults, each
//! phase checked for records lost, duplicated by the producer or out of order, and for resident
//! memory within the configured buffers plus a margin:
//! - 100,000 records on tansu (memory storage) behind a relay: connections cut, a member killed;
//! - 5,000 on the SQLite tansu behind a relay: tansu killed and restarted on its database,
//!   connections cut, a member killed;
//! - 50,000 on librdkafka's mock cluster: leaders moved, a broker down 2 s;
//! - 500,000 on Apache Kafka's three-node cluster: a node SIGKILLed and restarted, then the KRaft
//!   quorum leader's node, then a member killed.

use integration_tests::kafka_cluster::KafkaCluster;
use integration_tests::soak::{
    Options, PhaseReport, Storage, kafka_phase, mock_phase, table, tansu_phase,
};
use integration_tests::sqlite_tansu_bin;

fn check(report: &PhaseReport) {
    println!("{}", table(std::slice::from_ref(report)));
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.read, report.acked, "every record read");
    assert!(
        report.faults.values().sum::<u32>() >= 3,
        "faults injected: {:?}",
        report.faults
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_soak_on_tansu_loses_and_duplicates_nothing_under_cuts_and_a_killed_member() {
    check(&tansu_phase(&Storage::Memory, &Options::short()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_soak_on_sqlite_tansu_loses_and_duplicates_nothing_across_broker_restarts() {
    let Some(bin) = sqlite_tansu_bin() else {
        return;
    };
    let report = tansu_phase(&Storage::Sqlite(bin), &Options::short()).await;
    check(&report);
    assert_eq!(report.faults.get("tansu restarted"), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_soak_on_the_mock_loses_and_duplicates_nothing_under_leader_moves_and_outages() {
    check(&mock_phase(&Options::short()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_soak_on_kafka_loses_and_duplicates_nothing_across_killed_nodes() {
    let cluster = KafkaCluster::acquire().await;
    let report = kafka_phase(&cluster, &Options::short()).await;
    check(&report);
    assert_eq!(report.faults.get("node SIGKILLed and restarted"), Some(&1));
    assert_eq!(
        report.faults.get("quorum leader SIGKILLed and restarted"),
        Some(&1)
    );
}
