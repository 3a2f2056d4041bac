//! SASL against Apache Kafka 4.4: the one-node cluster's SASL_PLAINTEXT listener
//! ([`integration_tests::kafka_sasl`], started by `cargo xtask test`) with PLAIN, SCRAM-SHA-256,
//! SCRAM-SHA-512 and OAUTHBEARER, and sessions of [`KAFKA_SASL_SESSION`] (KIP-368
//! `connections.max.reauth.ms` on that listener).
//!
//! SCRAM users are created by our admin client with AlterUserScramCredentials (KIP-554) on the
//! PLAINTEXT listener, one set per test (unique names: the broker is shared). The broker-neutral
//! bodies are those of `sasl_tansu` (module `sasl_shared`). What only Kafka shows lives here:
//! PLAIN; OAUTHBEARER with Kafka's unsecured validator (an unsigned JWT), the token's expiry
//! bounding the session; re-authentication accepted in time and a busy connection kept past its
//! sessions; a v0 (raw token) connection, which cannot re-authenticate, closed by the broker once
//! its session expired; re-authentication more often than once a second refused.

use std::time::Duration;

use integration_tests::{
    BrokerKind, KAFKA_PLAIN_USERS, KAFKA_SASL_SESSION, kafka, kafka_sasl, unique_topic,
};
use kafkit::admin::{ScramMechanism, UserScramCredentialAlteration};
use kafkit::sasl::{OAuthBearer, Plain, ScramHash};
use kafkit::{Client, CloseCause, Dialer, Error, ErrorCode, Transport};
use kafkit_protocol::ApiKey;

use crate::sasl_shared::{
    SaslBroker, User, handshake_v0_logs_in, real_work, scram_dialer, scram_logins_work,
    wrong_password_and_unknown_user_fail,
};

/// The shared bodies' view of Kafka's SASL listener.
fn sasl_broker() -> SaslBroker {
    SaslBroker {
        kind: BrokerKind::Kafka,
        addr: kafka_sasl(),
        session_lifetime: KAFKA_SASL_SESSION,
    }
}

/// A user name no other test of this run (or an earlier run on the same broker) uses.
fn user(prefix: &str) -> String {
    unique_topic(prefix)
}

/// Creates `users` with our admin client's AlterUserScramCredentials on Kafka's PLAINTEXT
/// listener, then waits until each can log in on the SASL listener: the broker applies the
/// credential from its metadata log a moment after the controller answered.
async fn create_users(users: &[User]) {
    let transport = Transport::builder([kafka()]).build().expect("transport");
    let admin = Client::new(transport.clone());
    let alterations: Vec<_> = users
        .iter()
        .map(|(hash, name, password)| {
            let mechanism = match hash {
                ScramHash::Sha256 => ScramMechanism::ScramSha256,
                _ => ScramMechanism::ScramSha512,
            };
            UserScramCredentialAlteration::upsertion(name.as_str(), mechanism, 4096, *password)
        })
        .collect();
    let results = admin
        .alter_user_scram_credentials(&alterations)
        .await
        .expect("AlterUserScramCredentials");
    assert_eq!(results.len(), users.len(), "{results:?}");
    for (user, result) in &results {
        assert!(result.is_ok(), "{user}: {result:?}");
    }
    transport.close();
    let addr = kafka_sasl();
    for (hash, name, password) in users {
        // No event tells a client that the broker's credential cache has the user: try the
        // login, within 30 s.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            match scram_dialer(*hash, name, password)
                .build()
                .dial(&addr)
                .await
            {
                Ok(conn) => {
                    conn.close();
                    break;
                }
                Err(e) if tokio::time::Instant::now() < deadline => {
                    assert_eq!(
                        e.error_code(),
                        Some(ErrorCode::SASL_AUTHENTICATION_FAILED),
                        "{e:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("{name} cannot log in 30 s after its creation: {e}"),
            }
        }
    }
}

#[tokio::test]
async fn scram_sha256_and_sha512_log_in_and_work() {
    let users = [
        (ScramHash::Sha256, user("alice"), "alice-pw-256"),
        (ScramHash::Sha512, user("bob"), "bob-pw-512"),
    ];
    create_users(&users).await;
    scram_logins_work(&sasl_broker(), &users).await;
}

#[tokio::test]
async fn wrong_password_and_unknown_user_are_typed_failures() {
    let carol = user("carol");
    create_users(&[(ScramHash::Sha256, carol.clone(), "carol-right-pw")]).await;
    wrong_password_and_unknown_user_fail(&sasl_broker(), &carol, "carol-right-pw").await;
}

#[tokio::test]
async fn plain_logs_in_and_works_and_a_wrong_password_is_a_typed_failure() {
    let addr = kafka_sasl();
    for (name, password) in KAFKA_PLAIN_USERS {
        let conn = Dialer::builder()
            .client_id("sasl-kafka-plain")
            .sasl(Plain::new(name, password))
            .build()
            .dial(&addr)
            .await
            .unwrap_or_else(|e| panic!("PLAIN login of {name}: {e}"));
        assert_eq!(conn.sasl_mechanism(), Some("PLAIN"));
        // PLAIN is one message: one SaslAuthenticate after the handshake.
        assert_eq!(conn.requests_sent(ApiKey::SaslHandshake), 1);
        assert_eq!(conn.requests_sent(ApiKey::SaslAuthenticate), 1);
        assert_eq!(conn.sasl_session_lifetime(), Some(KAFKA_SASL_SESSION));
        real_work(&conn, "sasl-plain").await;
        conn.close();
    }
    let wrong = "plain-wrong-never-shown";
    for name in [KAFKA_PLAIN_USERS[0].0, "nobody-of-kafkit"] {
        let err = Dialer::builder()
            .sasl(Plain::new(name, wrong))
            .build()
            .dial(&addr)
            .await
            .unwrap_err();
        match &err {
            Error::Sasl {
                code, mechanism, ..
            } => {
                assert_eq!(*code, Some(ErrorCode::SASL_AUTHENTICATION_FAILED), "{err}");
                assert_eq!(mechanism, "PLAIN");
            }
            other => panic!("{name}: expected Error::Sasl, got {other:?}"),
        }
        assert!(!err.is_retriable(), "{err}");
        assert!(!format!("{err} {err:?}").contains(wrong), "{err:?}");
        assert!(
            err.to_string().contains("Invalid username or password"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn handshake_v0_logs_in_and_the_broker_closes_it_when_its_session_expires() {
    let dave = user("dave");
    create_users(&[(ScramHash::Sha512, dave.clone(), "dave-pw")]).await;
    let conn = handshake_v0_logs_in(&sasl_broker(), &dave, "dave-pw").await;

    // Kafka 4.4 still takes SaslHandshake v0 and raw tokens, and still ends the session after
    // connections.max.reauth.ms, but a client that used raw tokens was told no lifetime and
    // cannot re-authenticate (KIP-368 needs SaslAuthenticate v1). The broker then closes the
    // connection at its first request after the expiry. Waiting out the broker's clock is the
    // event here.
    // The session began before the login returned, so it has ended a lifetime after now.
    tokio::time::sleep(KAFKA_SASL_SESSION + Duration::from_millis(100)).await;
    let err = conn.metadata(None).await.unwrap_err();
    assert!(
        matches!(err, Error::ConnectionClosed { .. }),
        "expected the broker to close the expired connection, got {err:?}"
    );
    assert_eq!(conn.requests_sent(ApiKey::SaslHandshake), 1);
    assert_eq!(conn.sasl_reauthentications(), 0);

    // A wrong password over raw tokens: raw framing has no error code, and Kafka sends no SCRAM
    // `e=` message either; it closes the connection (KIP-152 added SaslAuthenticate for that
    // reason). The client can only report the close, during the exchange.
    let err = scram_dialer(ScramHash::Sha512, &dave, "dave-wrong-never-shown")
        .sasl_handshake_max_version(0)
        .build()
        .dial(&kafka_sasl())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ConnectionClosed {
                cause: CloseCause::Eof,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!format!("{err} {err:?}").contains("dave-wrong-never-shown"));
}

#[tokio::test]
async fn reauthentication_keeps_a_busy_connection_past_its_session() {
    let erin = user("erin");
    create_users(&[(ScramHash::Sha256, erin.clone(), "erin-pw")]).await;
    let started = tokio::time::Instant::now();
    let conn = scram_dialer(ScramHash::Sha256, &erin, "erin-pw")
        .build()
        .dial(&kafka_sasl())
        .await
        .unwrap();
    assert_eq!(conn.sasl_session_lifetime(), Some(KAFKA_SASL_SESSION));

    // Requests flow the whole time: the client holds new ones back while it re-authenticates
    // (Kafka closes a connection that sends another request inside the exchange), and
    // re-authenticates before each session expires (Kafka closes an expired connection at its
    // next request). Two re-authentications take the connection through two sessions.
    let mut requests = 0u64;
    while conn.sasl_reauthentications() < 2 {
        conn.metadata(None).await.unwrap_or_else(|e| {
            panic!("request {requests} on the re-authenticating connection: {e:?}")
        });
        requests += 1;
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "two re-authentications did not happen within 60 s (lifetime {KAFKA_SASL_SESSION:?})"
        );
        // Paced, so that the log of a failure stays short; the point is that requests keep
        // coming across each re-authentication.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(started.elapsed() > KAFKA_SASL_SESSION);
    // Each re-authentication: SaslHandshake v1 and two SaslAuthenticate, a new lifetime granted.
    assert_eq!(conn.requests_sent(ApiKey::SaslHandshake), 3);
    assert_eq!(conn.requests_sent(ApiKey::SaslAuthenticate), 6);
    assert_eq!(conn.sasl_session_lifetime(), Some(KAFKA_SASL_SESSION));
    real_work(&conn, "sasl-reauth").await;
    assert!(!conn.is_closed());
    assert!(!format!("{conn:?}").contains("erin-pw"));
}

#[tokio::test]
async fn reauthentication_more_often_than_once_a_second_is_refused_and_closes_the_connection() {
    let frank = user("frank");
    create_users(&[(ScramHash::Sha256, frank.clone(), "frank-pw")]).await;
    // The cap makes the client re-authenticate at once and again right after. Kafka allows one
    // re-authentication a second per connection (KafkaChannel's MIN_REAUTH_INTERVAL_ONE_SECOND):
    // it answers a faster SaslHandshake as an ordinary request, ILLEGAL_SASL_STATE.
    let conn = scram_dialer(ScramHash::Sha256, &frank, "frank-pw")
        .sasl_max_reauth_interval(Duration::from_millis(1))
        .build()
        .dial(&kafka_sasl())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), conn.closed())
        .await
        .expect("the refused re-authentication closed the connection");
    // One re-authentication went through (the first may follow the login at once); the next
    // one's SaslHandshake was refused. (A machine that stalls over a second between two lets
    // one more through: the count is not pinned.)
    let reauthenticated = conn.sasl_reauthentications();
    assert!(reauthenticated >= 1);
    assert_eq!(
        conn.requests_sent(ApiKey::SaslHandshake),
        reauthenticated + 2
    );
    match conn.metadata(None).await.unwrap_err() {
        Error::ConnectionClosed {
            cause: CloseCause::ReauthenticationFailed(why),
            ..
        } => assert!(why.contains("ILLEGAL_SASL_STATE"), "{why}"),
        other => panic!("expected a re-authentication close, got {other:?}"),
    }
}

/// An unsecured JWT (`alg: none`, no signature) for `sub`, expiring `expires_in_s` seconds from
/// now (negative: in the past): the token Kafka's default OAUTHBEARER validator accepts.
fn unsecured_jwt(sub: &str, expires_in_s: i64) -> String {
    use base64::Engine as _;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970");
    let now = i64::try_from(now.as_secs()).expect("seconds fit i64");
    let claims = serde_json::json!({
        "sub": sub,
        "iat": now.min(now + expires_in_s),
        "exp": now + expires_in_s,
    });
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!(
        "{}.{}.",
        b64.encode(br#"{"alg":"none"}"#),
        b64.encode(claims.to_string())
    )
}

#[tokio::test]
async fn oauthbearer_logs_in_and_the_token_expiry_bounds_the_session() {
    let addr = kafka_sasl();
    let dial = |token: String| {
        Dialer::builder()
            .client_id("sasl-kafka-oauthbearer")
            .sasl(OAuthBearer::with_static_token(token))
            .build()
    };
    // A token valid for an hour: the listener's 10 s session is the shorter bound.
    let conn = dial(unsecured_jwt("kafkit-oauth", 3600))
        .dial(&addr)
        .await
        .expect("OAUTHBEARER login");
    assert_eq!(conn.sasl_mechanism(), Some("OAUTHBEARER"));
    assert_eq!(conn.requests_sent(ApiKey::SaslAuthenticate), 1);
    assert_eq!(conn.sasl_session_lifetime(), Some(KAFKA_SASL_SESSION));
    real_work(&conn, "sasl-oauthbearer").await;
    conn.close();

    // A token that expires within 4 s (`exp` is in whole seconds): the session ends with it
    // (KIP-368: the lifetime is the sooner of the token's expiry and connections.max.reauth.ms).
    let conn = dial(unsecured_jwt("kafkit-oauth", 4))
        .dial(&addr)
        .await
        .expect("OAUTHBEARER login with a short token");
    let lifetime = conn.sasl_session_lifetime().expect("a session lifetime");
    assert!(
        lifetime > Duration::ZERO && lifetime <= Duration::from_secs(4),
        "{lifetime:?}"
    );
    conn.close();

    // An expired token is refused, typed, and its text is not shown.
    let expired = unsecured_jwt("kafkit-oauth", -60);
    let secret_part = expired.split('.').nth(1).expect("claims").to_string();
    let err = dial(expired).dial(&addr).await.unwrap_err();
    match &err {
        Error::Sasl {
            code, mechanism, ..
        } => {
            assert_eq!(*code, Some(ErrorCode::SASL_AUTHENTICATION_FAILED), "{err}");
            assert_eq!(mechanism, "OAUTHBEARER");
        }
        other => panic!("expected Error::Sasl, got {other:?}"),
    }
    assert!(!err.is_retriable(), "{err}");
    assert!(!format!("{err} {err:?}").contains(&secret_part), "{err:?}");
    // Kafka answers the token with RFC 7628's error challenge (`{"status":"invalid_token"}`),
    // the client ends the exchange with %x01 and reports the status.
    assert!(err.to_string().contains("invalid_token"), "{err}");
}
