//! The broker-neutral modules of `family/` against tansu (one node, memory storage), started by
//! `cargo xtask test` ([`integration_tests::tansu`]).

use integration_tests::BrokerKind;

/// The broker these modules run against.
#[allow(dead_code)]
pub const BROKER: BrokerKind = BrokerKind::Tansu;

/// tansu's bootstrap address.
pub fn broker() -> String {
    integration_tests::tansu()
}

/// Our own connection to tansu, as `client_id`.
pub async fn dial(client_id: &str) -> kafkit::Conn {
    integration_tests::dial(&broker(), client_id).await
}

broker_family!();
