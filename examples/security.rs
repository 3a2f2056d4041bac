//! Secured connections (docs/guide/security.md): writes a record over each of SASL PLAIN,
//! SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER, over TLS and over mutual TLS, then reads the
//! six back over mutual TLS. Security is set on a `Dialer`; the `Transport` built with it
//! secures every connection of the clients on it.
//!
//! It needs the listeners of the Apache Kafka broker that `cargo xtask broker start --kafka`
//! runs (it prints their addresses and the folder of its certificates), given in the
//! environment:
//! - `KAFKIT_KAFKA_SASL_BOOTSTRAP`: the SASL_PLAINTEXT listener (PLAIN with the broker's JAAS
//!   users, SCRAM users made here, OAUTHBEARER with Kafka's unsecured validator);
//! - `KAFKIT_KAFKA_SSL_BOOTSTRAP` and `KAFKIT_KAFKA_MTLS_BOOTSTRAP`: the SSL listeners, server
//!   authentication only and client certificate required;
//! - `KAFKIT_KAFKA_TLS_DIR`: the folder of `ca.pem`, `client.pem` and `client-key.pem`;
//!
//! and `--bootstrap` (or `KAFKIT_BOOTSTRAP`): its PLAINTEXT listener, where the topic and the
//! SCRAM user are made. The PLAIN user is `KAFKIT_PLAIN_USER` / `KAFKIT_PLAIN_PASSWORD`, by
//! default the rig's test user.
//!
//! ```sh
//! cargo xtask broker start --kafka
//! KAFKIT_KAFKA_SASL_BOOTSTRAP=127.0.0.1:... KAFKIT_KAFKA_SSL_BOOTSTRAP=127.0.0.1:... \
//!   KAFKIT_KAFKA_MTLS_BOOTSTRAP=127.0.0.1:... KAFKIT_KAFKA_TLS_DIR=.broker/kafka-19092/tls \
//!   cargo run -p kafkit-examples --example security
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use kafkit::admin::{NewTopic, ScramMechanism, UserScramCredentialAlteration};
use kafkit::sasl::{Plain, Scram};
use kafkit::{
    Client, Dialer, ProducerRecord, Properties, Reader, StartOffset, TlsConfig, Transport,
    TransportBuilder, Writer,
};

const TOPIC: &str = "kafkit-example-secure";
const SCRAM_USER: &str = "kafkit-example-scram";
const SCRAM_PASSWORD: &str = "kafkit-example-scram-pw";

#[tokio::main]
async fn main() -> ExitCode {
    kafkit_examples::exit(run().await)
}

/// An environment variable the example needs.
fn need(name: &str) -> Result<String, kafkit::Error> {
    std::env::var(name).map_err(|_| {
        kafkit::Error::InvalidArgument(format!(
            "{name} is not set: give the listeners of `cargo xtask broker start --kafka`"
        ))
    })
}

async fn run() -> Result<(), kafkit::Error> {
    let sasl = need("KAFKIT_KAFKA_SASL_BOOTSTRAP")?;
    let ssl = need("KAFKIT_KAFKA_SSL_BOOTSTRAP")?;
    let mtls = need("KAFKIT_KAFKA_MTLS_BOOTSTRAP")?;
    let tls_dir = PathBuf::from(need("KAFKIT_KAFKA_TLS_DIR")?);
    let plain_user = std::env::var("KAFKIT_PLAIN_USER").unwrap_or_else(|_| "kafkit-plain".into());
    let plain_password =
        std::env::var("KAFKIT_PLAIN_PASSWORD").unwrap_or_else(|_| "kafkit-plain-pw".into());

    // The topic and a SCRAM user (both hashes), made on the PLAINTEXT listener.
    let plaintext = Transport::builder(kafkit_examples::bootstrap()).build()?;
    let admin = Client::new(plaintext.clone());
    kafkit_examples::ensure_topics(&admin, &[NewTopic::new(TOPIC, 1, 1)]).await?;
    // One request per mechanism: a request may alter a user's credentials once only.
    for mechanism in [ScramMechanism::ScramSha256, ScramMechanism::ScramSha512] {
        let upsert =
            UserScramCredentialAlteration::upsertion(SCRAM_USER, mechanism, 4096, SCRAM_PASSWORD);
        for (user, result) in admin.alter_user_scram_credentials(&[upsert]).await? {
            result?;
            println!("SCRAM credentials of {user} set ({mechanism:?})");
        }
    }
    plaintext.close();

    // SASL_PLAINTEXT: a mechanism on the dialer.
    let dialer = Dialer::builder()
        .sasl(Plain::new(plain_user, plain_password))
        .build();
    let first = write("PLAIN", &sasl, dialer).await?;
    // The broker learns a new SCRAM credential a moment after the controller took it.
    let dialer = Dialer::builder()
        .sasl(Scram::sha256(SCRAM_USER, SCRAM_PASSWORD))
        .build();
    until_logged_in(&sasl, &dialer).await?;
    write("SCRAM-SHA-256", &sasl, dialer).await?;
    let dialer = Dialer::builder()
        .sasl(Scram::sha512(SCRAM_USER, SCRAM_PASSWORD))
        .build();
    until_logged_in(&sasl, &dialer).await?;
    write("SCRAM-SHA-512", &sasl, dialer).await?;

    // OAUTHBEARER from librdkafka's properties: an unsecured JWT, for test clusters only (a
    // real cluster takes a token from a `TokenProvider`, see the guide).
    let mut props = Properties::new();
    props
        .set("bootstrap.servers", sasl.as_str())
        .set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanism", "OAUTHBEARER")
        .set("enable.sasl.oauthbearer.unsecure.jwt", "true")
        .set("sasl.oauthbearer.config", "principal=kafkit-example");
    let transport = TransportBuilder::from_properties(&props)?.build()?;
    write_on("OAUTHBEARER", transport).await?;

    // SSL: the broker's certificate checked against the rig's CA.
    let ca = std::fs::read(tls_dir.join("ca.pem"))?;
    let tls = TlsConfig::builder().ca_pem(ca.clone()).build()?;
    write("TLS", &ssl, Dialer::builder().tls(tls).build()).await?;

    // Mutual TLS: the client presents its certificate too.
    let mutual = || -> Result<Dialer, kafkit::Error> {
        let tls = TlsConfig::builder()
            .ca_pem(ca.clone())
            .client_cert_pem(
                std::fs::read(tls_dir.join("client.pem"))?,
                std::fs::read(tls_dir.join("client-key.pem"))?,
            )
            .build()?;
        Ok(Dialer::builder().tls(tls).build())
    };
    write("mTLS", &mtls, mutual()?).await?;

    // Read the six records back over mutual TLS.
    let transport = Transport::builder([mtls.as_str()])
        .dialer(mutual()?)
        .build()?;
    let reader = Reader::builder(transport).build()?;
    reader.assign([(TOPIC, 0, StartOffset::At(first))])?;
    let mut read = Vec::new();
    while read.len() < 6 {
        let batch = tokio::time::timeout(Duration::from_secs(10), reader.next_batch())
            .await
            .map_err(|_| kafkit::Error::InvalidArgument("no record for 10 s".to_owned()))??;
        for part in batch {
            for record in &part.records {
                let value = record.value.as_deref().unwrap_or_default();
                read.push(String::from_utf8_lossy(value).into_owned());
            }
        }
    }
    reader.close();
    println!(
        "read back {} records over mutual TLS: {}",
        read.len(),
        read.join(", ")
    );
    Ok(())
}

/// Writes one record over `addr` with `dialer`; returns its offset.
async fn write(how: &str, addr: &str, dialer: Dialer) -> Result<i64, kafkit::Error> {
    let transport = Transport::builder([addr]).dialer(dialer).build()?;
    write_on(how, transport).await
}

async fn write_on(how: &str, transport: Transport) -> Result<i64, kafkit::Error> {
    let writer = Writer::builder(transport.clone()).build()?;
    let meta = writer
        .produce(ProducerRecord::new(TOPIC, format!("over {how}")))
        .await?;
    writer.close(Duration::from_secs(10)).await?;
    transport.close();
    println!(
        "{how}: wrote {}/{} at offset {}",
        meta.topic, meta.partition, meta.offset
    );
    Ok(meta.offset)
}

/// Waits (at most 30 s) until a connection with `dialer` logs in at `addr`.
async fn until_logged_in(addr: &str, dialer: &Dialer) -> Result<(), kafkit::Error> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match dialer.dial(addr).await {
            Ok(conn) => {
                conn.close();
                return Ok(());
            }
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e),
        }
    }
}
