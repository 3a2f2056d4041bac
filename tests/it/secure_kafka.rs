//! TLS against Apache Kafka 4.4's own listeners: the one-node cluster's SSL listener
//! ([`integration_tests::kafka_ssl`], server authentication only) and MTLS listener
//! ([`integration_tests::kafka_mtls`], protocol SSL with `ssl.client.auth=required`), both with
//! PEM stores and certificates made by `cargo xtask broker start --kafka` (read with
//! [`integration_tests::kafka_tls`]). The bodies are those `secure_tansu` runs against its TLS
//! relay (module `tls_shared`); here the TLS peer is Java's, and Metadata, Produce and Fetch run
//! over it.

use integration_tests::{BrokerKind, kafka, kafka_mtls, kafka_ssl, kafka_tls};

use crate::sasl_shared::real_work;
use crate::tls_shared;

/// The port of the first address of a bootstrap list `127.0.0.1:<port>,...`.
fn port_of(bootstrap: &str) -> u16 {
    let first = bootstrap.split(',').next().unwrap_or_default();
    first
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {bootstrap:?}"))
}

#[tokio::test]
async fn tls_with_the_ca_given_connects_and_without_it_fails_verification() {
    let pki = kafka_tls();
    let conn = tls_shared::ca_given_connects_and_others_fail_verification(
        port_of(&kafka_ssl()),
        &pki.ca_pem,
    )
    .await;
    real_work(&conn, "tls-kafka").await;
    conn.close();
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let pki = kafka_tls();
    let conn = tls_shared::mutual_tls_needs_the_client_certificate(
        &kafka_mtls(),
        &pki.ca_pem,
        &pki.client_cert_pem,
        &pki.client_key_pem,
    )
    .await;
    real_work(&conn, "mtls-kafka").await;
    conn.close();
}

#[tokio::test]
async fn tls_dialer_on_a_plaintext_listener_says_so() {
    tls_shared::tls_dialer_on_a_plaintext_listener_says_so(
        BrokerKind::Kafka,
        &kafka(),
        &kafka_tls().ca_pem,
    )
    .await;
}

#[tokio::test]
async fn plaintext_dialer_on_a_tls_listener_says_so() {
    for addr in [kafka_ssl(), kafka_mtls()] {
        tls_shared::plaintext_dialer_on_a_tls_listener_says_so(&addr).await;
    }
}
