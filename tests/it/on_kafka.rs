//! The broker-neutral modules of `family/` against Apache Kafka 4.4 (one KRaft node in combined
//! mode), started by `cargo xtask test` ([`integration_tests::kafka`]).

use integration_tests::BrokerKind;

/// The broker these modules run against.
#[allow(dead_code)]
pub const BROKER: BrokerKind = BrokerKind::Kafka;

/// Apache Kafka's bootstrap address.
pub fn broker() -> String {
    integration_tests::kafka()
}

/// Our own connection to Kafka, as `client_id`.
pub async fn dial(client_id: &str) -> kafkit::Conn {
    integration_tests::dial(&broker(), client_id).await
}

broker_family!();
