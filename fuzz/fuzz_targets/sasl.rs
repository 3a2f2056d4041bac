//! kafkit-sasl with hostile servers and hostile configuration.
//!
//! Input: `mode: u8`, then fields separated by NUL bytes.
//! - mode % 6 == 0 / 1: SCRAM-SHA-256 / -512 with the fixed client nonce `NONCE`: fields 1 and 2
//!   are server-first and server-final (a useful server-first starts `r=<NONCE>...`);
//! - 2: OAUTHBEARER configuration: token, authzid, then extension key/value pairs;
//! - 3: OAUTHBEARER server answers after the initial response (field 1);
//! - 4: AWS_MSK_IAM configuration: region, host, access key id, secret, session token, user
//!   agent, signed at a fixed time; the payload must be a JSON object;
//! - 5: AWS_MSK_IAM and PLAIN server answers, PLAIN configuration (user, password, authzid).
//!
//! Checks: no panic; a session never continues after an error or `Done`.
#![no_main]

// Links the shared crate, and with it the allocation limit (`kafkit_fuzz::LimitedAlloc`).
use kafkit_fuzz as _;

use std::time::{Duration, SystemTime};

use kafkit_sasl::{
    AwsCredentials, AwsMskIam, Mechanism, OAuthBearer, Plain, SaslContext, Scram, ScramHash,
    Session, StaticCredentials, Step,
};
use libfuzzer_sys::fuzz_target;

const NONCE: &str = "fyko+d2lbbFgONRv9qkxdawL";

fn run(mech: &dyn Mechanism, ctx: &SaslContext, answers: &[&[u8]]) {
    let Ok(mut session) = mech.start(ctx) else {
        return;
    };
    drive(&mut *session, answers);
}

/// Steps `session` with an empty first challenge, then each answer; after `Done` or an error
/// every further step must fail.
fn drive(session: &mut dyn Session, answers: &[&[u8]]) {
    let mut over = false;
    for challenge in std::iter::once(&b""[..]).chain(answers.iter().copied()) {
        match session.step(challenge) {
            Ok(Step::Continue(_)) => assert!(!over, "a session continued after it ended"),
            Ok(Step::Done) => {
                assert!(!over, "a session finished twice");
                over = true;
            }
            Ok(_) => over = true,
            Err(_) => {
                over = true;
            }
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let fields: Vec<&[u8]> = rest.split(|b| *b == 0).collect();
    let field = |i: usize| fields.get(i).copied().unwrap_or(b"");
    let ctx = SaslContext::new("b-1.example.kafka.us-east-1.amazonaws.com", 9098);
    match mode % 6 {
        m @ (0 | 1) => {
            let hash = if m == 0 {
                ScramHash::Sha256
            } else {
                ScramHash::Sha512
            };
            let scram = Scram::new(hash, "user", "pencil").with_fixed_nonce(NONCE);
            run(&scram, &ctx, &[field(0), field(1), field(2)]);
        }
        2 => {
            let mut m = OAuthBearer::with_static_token(text(field(0)));
            if !field(1).is_empty() {
                m = m.with_authzid(text(field(1)));
            }
            for pair in fields.get(2..).unwrap_or_default().chunks(2) {
                let v = pair.get(1).copied().unwrap_or(b"");
                m = m.with_extension(text(pair[0]), text(v));
            }
            run(&m, &ctx, &[b"", field(0)]);
        }
        3 => {
            let m = OAuthBearer::with_static_token("eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.");
            run(&m, &ctx, &[field(0), field(1)]);
        }
        4 => {
            let mut creds = AwsCredentials::new(text(field(2)), text(field(3)));
            if !field(4).is_empty() {
                creds = creds.with_session_token(text(field(4)));
            }
            let m = AwsMskIam::new(text(field(0)), StaticCredentials::new(creds))
                .with_user_agent(text(field(5)))
                .with_fixed_time(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
            let ctx = SaslContext::new(text(field(1)), 9098);
            if let Ok(mut session) = m.start(&ctx) {
                match session.step(b"") {
                    Ok(Step::Continue(payload)) => {
                        let map: serde_json::Map<String, serde_json::Value> =
                            serde_json::from_slice(&payload).expect("the payload is a JSON object");
                        assert_eq!(map["version"], "2020_10_22");
                        assert_eq!(map["host"].as_str(), Some(ctx.host.as_str()));
                    }
                    other => panic!("AWS_MSK_IAM did not send its payload first: {other:?}"),
                }
            }
        }
        _ => {
            let creds =
                AwsCredentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY");
            let m = AwsMskIam::new("us-east-1", StaticCredentials::new(creds))
                .with_fixed_time(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
            run(&m, &ctx, &[field(0), field(1)]);
            let mut plain = Plain::new(text(field(2)), text(field(3)));
            if !field(4).is_empty() {
                plain = plain.with_authzid(text(field(4)));
            }
            run(&plain, &ctx, &[field(0), field(1)]);
        }
    }
});
