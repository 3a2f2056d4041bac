//! TLS against Apache Kafka 4.4's own listeners: the one-node cluster's SSL listener
//! ([`integration_tests::kafka_ssl`], server authentication only) and MTLS listener
//! ([`integration_tests::kafka_mtls`], protocol SSL with `ssl.client.auth=required`), both with
//! PEM stores and certificates made by `cargo xtask broker start --kafka` (read with
//! [`integration_tests::kafka_tls`]). The bodies are those `secure_tansu` runs against its TLS
//! relay (module `tls_shared`); here the TLS peer is Java's, and Metadata, Produce and Fetch run
//! over it.

use std::time::Duration;

use bytes::Bytes;
use integration_tests::{BrokerKind, create_topic_with, kafka, kafka_mtls, kafka_ssl, kafka_tls};
use kafkit::{FetchParams, ProducerRecord, TlsConfig, Transport, Writer};

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

/// A client bootstrapped at the MTLS listener learns the node's address on that listener from
/// Metadata (Kafka advertises one address per listener) and dials it again over mutual TLS: a
/// Writer's records land and are read back.
#[tokio::test]
async fn a_writer_over_mutual_tls_follows_the_advertised_tls_address() {
    let pki = kafka_tls();
    let tls = TlsConfig::builder()
        .ca_pem(pki.ca_pem.clone())
        .client_cert_pem(pki.client_cert_pem.clone(), pki.client_key_pem.clone())
        .build()
        .unwrap();
    let dialer = tls_shared::tls_dialer(tls);
    let conn = dialer.dial(&kafka_mtls()).await.unwrap();
    let topic = create_topic_with(&conn, "mtls-writer", 1).await;
    let transport = Transport::builder([kafka_mtls()])
        .dialer(dialer)
        .build()
        .expect("transport");
    let writer = Writer::builder(transport.clone()).build().expect("writer");
    let records: Vec<_> = (0..10)
        .map(|i| ProducerRecord::new(topic.as_str(), format!("tls-{i}")))
        .collect();
    let acks = writer
        .write(records)
        .await
        .expect("written over mutual TLS");
    assert_eq!(acks.len(), 10);
    writer.close(Duration::from_secs(30)).await.expect("close");
    transport.close();
    let fetched = conn
        .fetch(&topic, 0, 0, &FetchParams::default())
        .await
        .expect("fetch")
        .into_result()
        .expect("partition fetched");
    let values: Vec<_> = fetched.records.iter().map(|r| r.value.clone()).collect();
    let want: Vec<_> = (0..10)
        .map(|i| Some(Bytes::from(format!("tls-{i}"))))
        .collect();
    assert_eq!(values, want);
    conn.close();
}
