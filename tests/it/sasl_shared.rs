//! The broker-neutral SASL test bodies, run by `sasl_tansu` (a SQLite tansu per test) and
//! `sasl_kafka` (Apache Kafka 4.4's SASL_PLAINTEXT listener): logins with each SCRAM hash and
//! real work on the connection, a wrong password and an unknown user as typed failures, and
//! SaslHandshake v0 with raw tokens. Each body takes a [`SaslBroker`]: where the brokers differ,
//! the body follows Kafka and names tansu's quirk (docs/testing.md).

use std::time::Duration;

use bytes::Bytes;
use integration_tests::{BrokerKind, create_topic_with};
use kafkit::sasl::{Scram, ScramHash};
use kafkit::{Acks, Conn, Dialer, Error, ErrorCode, FetchParams};
use kafkit_protocol::ApiKey;
use kafkit_protocol::records::Record;

/// A broker with SASL, and the users a test made on it.
pub(crate) struct SaslBroker {
    /// Which broker it is.
    pub kind: BrokerKind,
    /// Its SASL listener.
    pub addr: String,
    /// The session lifetime it grants at each SaslAuthenticate (KIP-368).
    pub session_lifetime: Duration,
}

/// A SCRAM user: hash, name, password.
pub(crate) type User = (ScramHash, String, &'static str);

/// A dialer that logs in as `user` with SCRAM over `hash`.
pub(crate) fn scram_dialer(hash: ScramHash, user: &str, password: &str) -> kafkit::DialerBuilder {
    Dialer::builder()
        .client_id("sasl-test")
        .connect_timeout(Duration::from_secs(10))
        .sasl(Scram::new(hash, user, password))
}

const TIMEOUT: Duration = Duration::from_secs(30);

/// Metadata, a new topic, a produce and a fetch of what was produced, all on `conn`.
pub(crate) async fn real_work(conn: &Conn, prefix: &str) {
    let md = conn.metadata(None).await.expect("metadata");
    assert!(!md.brokers.is_empty());
    let topic = create_topic_with(conn, prefix, 1).await;
    let records: Vec<Record> = (0..3)
        .map(|i| {
            Record::new(
                Some(Bytes::from(format!("k{i}"))),
                Some(Bytes::from(format!("v{i}"))),
            )
        })
        .collect();
    let produced = conn
        .produce(&topic, 0, &records, Acks::All, TIMEOUT)
        .await
        .expect("produce")
        .into_result()
        .expect("partition accepted the records");
    assert_eq!(produced.base_offset, 0);
    let fetched = conn
        .fetch(&topic, 0, 0, &FetchParams::default())
        .await
        .expect("fetch")
        .into_result()
        .expect("partition fetched");
    let values: Vec<_> = fetched.records.iter().map(|r| r.value.clone()).collect();
    let sent: Vec<_> = records.iter().map(|r| r.value.clone()).collect();
    assert_eq!(values, sent);
}

/// A connection without SASL is refused real work; each of `users` logs in with its SCRAM hash
/// over SaslHandshake v1 + SaslAuthenticate, is granted the broker's session lifetime, and does
/// real work on the connection.
pub(crate) async fn scram_logins_work(broker: &SaslBroker, users: &[User]) {
    let bare = Dialer::builder().build().dial(&broker.addr).await.unwrap();
    let refused = bare.metadata(None).await;
    assert!(refused.is_err(), "{refused:?}");
    for (hash, user, password) in users {
        let conn = scram_dialer(*hash, user, password)
            .build()
            .dial(&broker.addr)
            .await
            .unwrap_or_else(|e| panic!("{} login of {user}: {e}", hash.mechanism_name()));
        assert_eq!(conn.sasl_mechanism(), Some(hash.mechanism_name()));
        // Handshake v1, then client-first and client-final in two SaslAuthenticate requests
        // (the second answer carried the server signature, which the client verified).
        assert_eq!(conn.requests_sent(ApiKey::SaslHandshake), 1);
        assert_eq!(conn.requests_sent(ApiKey::SaslAuthenticate), 2);
        // The client keeps the lifetime it was granted (KIP-368).
        assert_eq!(conn.sasl_session_lifetime(), Some(broker.session_lifetime));
        real_work(&conn, &format!("sasl-{}", hash.mechanism_name())).await;
        conn.close();
    }
}

/// `user` has a SCRAM-SHA-256 credential with `password` and none for SCRAM-SHA-512: a wrong
/// password, the hash `user` has no credential for and a user the broker does not know are each
/// refused as `Error::Sasl` with SASL_AUTHENTICATION_FAILED that shows no password; the right
/// password still logs in after them.
pub(crate) async fn wrong_password_and_unknown_user_fail(
    broker: &SaslBroker,
    user: &str,
    password: &str,
) {
    let wrong = "wrong-pw-never-shown";
    // tansu's message is the SCRAM server-final `e=` value (RFC 5802); Apache Kafka says the
    // credentials were invalid, the same for both (it does not tell a prober which users exist).
    let (bad_proof, unknown) = match broker.kind {
        BrokerKind::Tansu => ("invalid-proof", "unknown-user"),
        BrokerKind::Kafka => ("invalid credentials", "invalid credentials"),
    };
    let cases = [
        (ScramHash::Sha256, user, bad_proof),
        (ScramHash::Sha512, user, unknown),
        (ScramHash::Sha256, "nobody-of-kafkit", unknown),
    ];
    for (hash, user, why) in cases {
        let err = scram_dialer(hash, user, wrong)
            .build()
            .dial(&broker.addr)
            .await
            .unwrap_err();
        match &err {
            Error::Sasl {
                code, mechanism, ..
            } => {
                assert_eq!(*code, Some(ErrorCode::SASL_AUTHENTICATION_FAILED), "{err}");
                assert_eq!(mechanism, hash.mechanism_name());
            }
            other => panic!(
                "{user}/{}: expected Error::Sasl, got {other:?}",
                hash.mechanism_name()
            ),
        }
        assert!(!err.is_retriable(), "{err}");
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains(wrong), "{shown}");
        assert!(err.to_string().contains(why), "{err}");
    }
    let conn = scram_dialer(ScramHash::Sha256, user, password)
        .build()
        .dial(&broker.addr)
        .await
        .unwrap();
    conn.metadata(None).await.unwrap();
}

/// `user` (SCRAM-SHA-512, `password`) logs in over SaslHandshake v0: the SCRAM messages go as
/// raw size-prefixed tokens, with no SaslAuthenticate and no session lifetime, and the
/// connection serves a request.
pub(crate) async fn handshake_v0_logs_in(broker: &SaslBroker, user: &str, password: &str) -> Conn {
    let conn = scram_dialer(ScramHash::Sha512, user, password)
        .sasl_handshake_max_version(0)
        .build()
        .dial(&broker.addr)
        .await
        .expect("login with SaslHandshake v0");
    assert_eq!(conn.requests_sent(ApiKey::SaslHandshake), 1);
    assert_eq!(conn.requests_sent(ApiKey::SaslAuthenticate), 0);
    // Raw tokens carry no session lifetime, so the client cannot know when to re-authenticate.
    assert_eq!(conn.sasl_session_lifetime(), None);
    conn.metadata(None)
        .await
        .expect("metadata after a v0 login");
    conn
}
