//! PLAIN and OAUTHBEARER against the server sides of the `rsasl` crate, an independent SASL
//! implementation: the server must parse exactly what the client meant to send. (SCRAM runs
//! against rsasl in `src/scram/tests.rs`, where the RFC vectors are too.)

use std::io::Cursor;

use kafkit_sasl::{Mechanism, OAuthBearer, Plain, SaslContext, SaslError, Session, Step};
use rsasl::callback::{Context, Request, SessionCallback, SessionData};
use rsasl::mechanisms::oauthbearer::properties::{OAuthBearerError, OAuthBearerValidate};
use rsasl::prelude::{Mechname, SASLConfig, SASLServer, SessionError};
use rsasl::property::{AuthId, AuthzId, OAuthBearerKV, OAuthBearerToken, Password};
use rsasl::validate::{Validate, Validation, ValidationError};

/// What the server saw: (authzid, authid or token, password or extensions), and its verdict.
#[derive(Debug, PartialEq)]
struct Seen {
    authzid: Option<String>,
    identity: String,
    rest: Vec<(String, String)>,
    accepted: bool,
}

struct Record;
impl Validation for Record {
    type Value = Seen;
}

/// The server's account: user "alice" with password "alice-secret"; token "good.token".
/// rsasl hands over the whole `auth` value, scheme included (`Bearer good.token`).
struct Server;

impl SessionCallback for Server {
    fn callback(
        &self,
        _session_data: &SessionData,
        context: &Context,
        request: &mut Request,
    ) -> Result<(), SessionError> {
        if request.is::<OAuthBearerValidate>() {
            let ok = context.get_ref::<OAuthBearerToken>() == Some("Bearer good.token");
            let verdict = if ok {
                Ok(())
            } else {
                Err(OAuthBearerError::new("invalid_token", Some("kafka"), None))
            };
            request.satisfy::<OAuthBearerValidate>(&verdict)?;
        }
        Ok(())
    }

    fn validate(
        &self,
        session_data: &SessionData,
        context: &Context,
        validate: &mut Validate<'_>,
    ) -> Result<(), ValidationError> {
        // An empty authzid means none (PLAIN sends an empty field).
        let authzid = context
            .get_ref::<AuthzId>()
            .filter(|a| !a.is_empty())
            .map(str::to_owned);
        let seen = match session_data.mechanism().mechanism.as_str() {
            "PLAIN" => {
                let user = context.get_ref::<AuthId>().unwrap_or_default().to_owned();
                let pw = context.get_ref::<Password>().unwrap_or_default();
                Seen {
                    accepted: user == "alice" && pw == b"alice-secret",
                    authzid,
                    identity: user,
                    rest: vec![("password".into(), String::from_utf8_lossy(pw).into_owned())],
                }
            }
            _ => {
                let token = context.get_ref::<OAuthBearerToken>().unwrap_or_default();
                Seen {
                    accepted: token == "Bearer good.token",
                    authzid,
                    identity: token.to_owned(),
                    rest: context
                        .get_ref::<OAuthBearerKV>()
                        .unwrap_or_default()
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                }
            }
        };
        validate.with::<Record, _>(|| Ok(seen))?;
        Ok(())
    }
}

/// Runs the exchange; returns what the server recorded and how the client ended.
fn run(mech: &dyn Mechanism) -> (Option<Seen>, Result<(), SaslError>) {
    let config = SASLConfig::builder()
        .with_defaults()
        .with_callback(Server)
        .unwrap();
    let server = SASLServer::<Record>::new(config);
    let mut ss = server
        .start_suggested(Mechname::parse(mech.name().as_bytes()).unwrap())
        .unwrap();
    let mut client: Box<dyn Session> = mech.start(&SaslContext::new("localhost", 9092)).unwrap();
    let mut challenge = Vec::new();
    for _ in 0..4 {
        match client.step(&challenge) {
            Ok(Step::Continue(msg)) => {
                let mut out = Cursor::new(Vec::new());
                ss.step(Some(&msg), &mut out).expect("server step");
                challenge = out.into_inner();
            }
            Ok(Step::Done) => return (ss.validation(), Ok(())),
            Ok(_) => unreachable!("Step has two variants"),
            Err(e) => return (ss.validation(), Err(e)),
        }
    }
    panic!("the exchange does not end");
}

#[test]
fn plain_is_parsed_by_rsasl() {
    let (seen, client) = run(&Plain::new("alice", "alice-secret"));
    client.unwrap();
    assert_eq!(
        seen.unwrap(),
        Seen {
            authzid: None,
            identity: "alice".into(),
            rest: vec![("password".into(), "alice-secret".into())],
            accepted: true,
        }
    );

    let (seen, _) = run(&Plain::new("alice", "wrong").with_authzid("admin"));
    let seen = seen.unwrap();
    assert_eq!(seen.authzid.as_deref(), Some("admin"));
    assert!(!seen.accepted);
}

#[test]
fn oauthbearer_is_parsed_by_rsasl_with_extensions() {
    let (seen, client) = run(&OAuthBearer::with_static_token("good.token")
        .with_extension("logicalCluster", "lkc-1")
        .with_extension("traceId", "a b"));
    client.unwrap();
    let seen = seen.unwrap();
    assert!(seen.accepted);
    assert_eq!(seen.identity, "Bearer good.token");
    let mut ext = seen.rest;
    ext.sort();
    assert_eq!(
        ext,
        [
            ("logicalCluster".to_owned(), "lkc-1".to_owned()),
            ("traceId".to_owned(), "a b".to_owned()),
        ]
    );
}

#[test]
fn oauthbearer_server_error_json_fails_the_client() {
    let (_, client) = run(&OAuthBearer::with_static_token("bad.token").with_authzid("alice"));
    match client {
        Err(SaslError::AuthenticationFailed { reason, .. }) => {
            assert!(reason.contains("invalid_token"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}
