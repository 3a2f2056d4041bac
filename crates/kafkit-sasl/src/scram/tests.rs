use super::*;

fn ctx() -> SaslContext {
    SaslContext::new("localhost", 9092)
}

fn cont(step: Step) -> Vec<u8> {
    match step {
        Step::Continue(m) => m,
        Step::Done => panic!("expected a client message, got Done"),
    }
}

/// RFC 7677 §3: the SCRAM-SHA-256 example exchange (user "user", password "pencil").
const RFC7677_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
const RFC7677_SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const RFC7677_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const RFC7677_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

fn rfc7677_session(password: &str) -> Box<dyn Session> {
    Scram::sha256("user", password)
        .with_fixed_nonce(RFC7677_NONCE)
        .start(&ctx())
        .unwrap()
}

#[test]
fn rfc7677_sha256_example_exchange() {
    let mut s = rfc7677_session("pencil");
    assert_eq!(
        cont(s.step(&[]).unwrap()),
        b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    );
    let client_final = cont(s.step(RFC7677_SERVER_FIRST.as_bytes()).unwrap());
    assert_eq!(
        String::from_utf8(client_final).unwrap(),
        RFC7677_CLIENT_FINAL
    );
    assert!(matches!(
        s.step(RFC7677_SERVER_FINAL.as_bytes()).unwrap(),
        Step::Done
    ));
    assert!(matches!(s.step(&[]), Err(SaslError::UnexpectedStep { .. })));
}

#[test]
fn rfc5802_sha1_example_exchange() {
    // RFC 5802 §5: the SCRAM-SHA-1 example (user "user", password "pencil"), run through the
    // same code with the test-only SHA-1 hash.
    let mut s = Scram::new(ScramHash::Sha1, "user", "pencil")
        .with_fixed_nonce("fyko+d2lbbFgONRv9qkxdawL")
        .start(&ctx())
        .unwrap();
    assert_eq!(
        cont(s.step(&[]).unwrap()),
        b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
    );
    let client_final = cont(
        s.step(b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096")
            .unwrap(),
    );
    assert_eq!(
        String::from_utf8(client_final).unwrap(),
        "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    );
    assert!(matches!(
        s.step(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=").unwrap(),
        Step::Done
    ));
}

#[test]
fn wrong_password_rejects_the_genuine_server_signature() {
    // With the wrong password, the client's own ServerKey differs, so the RFC's genuine
    // server-final does not verify: the client fails rather than reporting success.
    let mut s = rfc7677_session("pencil2");
    s.step(&[]).unwrap();
    let client_final = cont(s.step(RFC7677_SERVER_FIRST.as_bytes()).unwrap());
    assert_ne!(
        String::from_utf8(client_final).unwrap(),
        RFC7677_CLIENT_FINAL
    );
    assert!(matches!(
        s.step(RFC7677_SERVER_FINAL.as_bytes()),
        Err(SaslError::ServerSignatureMismatch {
            mechanism: "SCRAM-SHA-256"
        })
    ));
}

#[test]
fn forged_server_signature_fails() {
    for forged in [
        "v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
        "v=",
        "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl9",
    ] {
        let mut s = rfc7677_session("pencil");
        s.step(&[]).unwrap();
        s.step(RFC7677_SERVER_FIRST.as_bytes()).unwrap();
        let err = s.step(forged.as_bytes()).unwrap_err();
        assert!(
            matches!(
                err,
                SaslError::ServerSignatureMismatch { .. } | SaslError::InvalidServerMessage { .. }
            ),
            "{forged}: {err:?}"
        );
    }
}

#[test]
fn server_error_attribute_is_an_authentication_failure() {
    let mut s = rfc7677_session("pencil");
    s.step(&[]).unwrap();
    s.step(RFC7677_SERVER_FIRST.as_bytes()).unwrap();
    let err = s.step(b"e=invalid-proof").unwrap_err();
    assert!(
        matches!(&err, SaslError::AuthenticationFailed { reason, .. } if reason == "invalid-proof"),
        "{err:?}"
    );
    assert!(!err.is_retriable());
}

#[test]
fn malformed_server_first_is_rejected() {
    let cases = [
        // Nonce does not extend ours.
        "r=otherNonce123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        // Nonce equal to ours (no server part).
        "r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        // Missing attributes / wrong order.
        "r=rOprNGfwEbeRWgbNEkqOxyz",
        "s=W22ZaJ0SNY7soEsUEjb6gQ==,r=rOprNGfwEbeRWgbNEkqOxyz,i=4096",
        // Bad salt, bad / out-of-range iteration counts.
        "r=rOprNGfwEbeRWgbNEkqOxyz,s=not base64!,i=4096",
        "r=rOprNGfwEbeRWgbNEkqOxyz,s=,i=4096",
        "r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=many",
        "r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=1",
        "r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4294967295",
        // Mandatory extension.
        "m=ext,r=rOprNGfwEbeRWgbNEkqOxyz,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        "",
    ];
    for case in cases {
        let mut s = rfc7677_session("pencil");
        s.step(&[]).unwrap();
        let err = s.step(case.as_bytes()).unwrap_err();
        assert!(
            matches!(err, SaslError::InvalidServerMessage { .. }),
            "{case:?}: {err:?}"
        );
    }
    let mut s = rfc7677_session("pencil");
    s.step(&[]).unwrap();
    assert!(matches!(
        s.step(b"\xff\xfe"),
        Err(SaslError::InvalidServerMessage { .. })
    ));
}

#[test]
fn user_name_is_saslprepped_and_escaped() {
    let first = |user: &str| {
        let mut s = Scram::sha512(user, "pw")
            .with_fixed_nonce("abc")
            .start(&ctx())
            .unwrap();
        String::from_utf8(cont(s.step(&[]).unwrap())).unwrap()
    };
    assert_eq!(first("us=er,x"), "n,,n=us=3Der=2Cx,r=abc");
    // RFC 4013 §3 examples: SOFT HYPHEN maps to nothing; ROMAN NUMERAL NINE (NFKC) becomes "IX".
    assert_eq!(first("I\u{00AD}X"), "n,,n=IX,r=abc");
    assert_eq!(first("\u{2168}"), "n,,n=IX,r=abc");
    // Non-ASCII space maps to an ASCII space.
    assert_eq!(first("a\u{00A0}b"), "n,,n=a b,r=abc");
    // Prohibited (control character) and empty names are configuration errors.
    for bad in ["a\u{0007}b", ""] {
        let err = Scram::sha256(bad, "pw").start(&ctx()).err().unwrap();
        assert!(matches!(err, SaslError::InvalidConfig { .. }), "{err:?}");
    }
}

#[test]
fn token_auth_adds_the_extension() {
    let mut s = Scram::sha256("tokenid", "hmac")
        .with_token_auth(true)
        .with_fixed_nonce("abc")
        .start(&ctx())
        .unwrap();
    assert_eq!(
        cont(s.step(&[]).unwrap()),
        b"n,,n=tokenid,r=abc,tokenauth=true"
    );
}

#[test]
fn random_nonces_differ_and_are_valid() {
    let m = Scram::sha256("user", "pencil");
    let a = cont(m.start(&ctx()).unwrap().step(&[]).unwrap());
    let b = cont(m.start(&ctx()).unwrap().step(&[]).unwrap());
    assert_ne!(a, b);
    let a = String::from_utf8(a).unwrap();
    let nonce = a.strip_prefix("n,,n=user,r=").unwrap();
    assert_eq!(nonce.len(), 32);
    assert!(!nonce.contains(','));
}

#[test]
fn bad_fixed_nonce_is_a_config_error() {
    for n in ["", "a,b", "caf\u{e9}"] {
        let err = Scram::sha256("u", "p")
            .with_fixed_nonce(n)
            .start(&ctx())
            .err()
            .unwrap();
        assert!(matches!(err, SaslError::InvalidConfig { .. }), "{n:?}");
    }
}

/// A full exchange against rsasl's SCRAM server (an independent implementation).
mod against_rsasl {
    use super::*;
    use rsasl::callback::{Context, Request, SessionCallback, SessionData};
    use rsasl::mechanisms::scram::properties::ScramStoredPassword;
    use rsasl::prelude::{Mechname, SASLConfig, SASLServer, SessionError};
    use rsasl::property::AuthId;
    use rsasl::validate::Validation;
    use std::io::Cursor;

    struct NoValidation;
    impl Validation for NoValidation {
        type Value = ();
    }

    /// The server's credential store: one user, keys derived from its password as RFC 5802 §3
    /// describes (computed here with the RustCrypto crates directly, not with kafkit-sasl).
    struct Store {
        user: &'static str,
        salt: Vec<u8>,
        iterations: u32,
        stored_key: Vec<u8>,
        server_key: Vec<u8>,
    }

    impl Store {
        fn new(hash: ScramHash, user: &'static str, password: &str) -> Self {
            macro_rules! keys {
                ($d:ty, $n:literal, $password:expr, $salt:expr, $i:expr) => {{
                    let salted =
                        pbkdf2::pbkdf2_hmac_array::<$d, $n>($password.as_bytes(), $salt, $i);
                    let mac = |data: &[u8]| {
                        let mut m = <Hmac<$d> as hmac::digest::KeyInit>::new_from_slice(&salted)
                            .expect("any key length");
                        m.update(data);
                        m.finalize().into_bytes().to_vec()
                    };
                    let stored = <$d>::digest(mac(b"Client Key")).to_vec();
                    (stored, mac(b"Server Key"))
                }};
            }
            let salt = b"kafkit-sasl test salt".to_vec();
            let iterations = 4096;
            let (stored_key, server_key) = match hash {
                ScramHash::Sha256 => keys!(Sha256, 32, password, &salt, iterations),
                ScramHash::Sha512 => keys!(Sha512, 64, password, &salt, iterations),
                ScramHash::Sha1 => unreachable!("rsasl's server is used for SHA-2 only"),
            };
            Self {
                user,
                salt,
                iterations,
                stored_key,
                server_key,
            }
        }
    }

    impl SessionCallback for Store {
        fn callback(
            &self,
            _session_data: &SessionData,
            context: &Context,
            request: &mut Request,
        ) -> Result<(), SessionError> {
            if context.get_ref::<AuthId>() == Some(self.user) {
                request.satisfy::<ScramStoredPassword>(&ScramStoredPassword::new(
                    self.iterations,
                    &self.salt,
                    &self.stored_key,
                    &self.server_key,
                ))?;
            }
            Ok(())
        }
    }

    /// What happened to the exchange.
    #[derive(Debug)]
    enum Outcome {
        /// The client finished and the server accepted.
        Accepted,
        /// The client failed with this error; `server_final` is what the server last sent.
        ClientFailed(SaslError),
    }

    /// Runs `client` against rsasl's server; `tamper` may rewrite the server's final message.
    fn exchange(
        hash: ScramHash,
        client_password: &str,
        tamper: impl Fn(Vec<u8>) -> Vec<u8>,
    ) -> Outcome {
        let config = SASLConfig::builder()
            .with_defaults()
            .with_callback(Store::new(hash, "alice", "alice-secret"))
            .unwrap();
        let server = SASLServer::<NoValidation>::new(config);
        let mut server_session = server
            .start_suggested(Mechname::parse(hash.mechanism_name().as_bytes()).unwrap())
            .unwrap();
        let mut client = Scram::new(hash, "alice", client_password)
            .start(&ctx())
            .unwrap();

        let mut challenge = Vec::new();
        let mut round = 0;
        loop {
            round += 1;
            assert!(round < 5, "the exchange does not end");
            let msg = match client.step(&challenge) {
                Ok(Step::Continue(m)) => m,
                Ok(Step::Done) => return Outcome::Accepted,
                Err(e) => return Outcome::ClientFailed(e),
            };
            let mut out = Cursor::new(Vec::new());
            let state = server_session
                .step(Some(&msg), &mut out)
                .expect("rsasl server step");
            challenge = out.into_inner();
            if state.is_finished() {
                challenge = tamper(challenge);
            }
        }
    }

    #[test]
    fn correct_password_completes_both_sides() {
        for hash in [ScramHash::Sha256, ScramHash::Sha512] {
            let outcome = exchange(hash, "alice-secret", |m| {
                assert!(m.starts_with(b"v="), "server rejected: {m:?}");
                m
            });
            assert!(
                matches!(outcome, Outcome::Accepted),
                "{hash:?}: {outcome:?}"
            );
        }
    }

    #[test]
    fn wrong_password_is_rejected_by_the_server() {
        for hash in [ScramHash::Sha256, ScramHash::Sha512] {
            let outcome = exchange(hash, "not-the-password", |m| m);
            assert!(
                matches!(
                    &outcome,
                    Outcome::ClientFailed(SaslError::AuthenticationFailed { reason, .. })
                        if reason == "invalid-proof"
                ),
                "{hash:?}: {outcome:?}"
            );
        }
    }

    #[test]
    fn forged_server_signature_is_detected() {
        for hash in [ScramHash::Sha256, ScramHash::Sha512] {
            // Flip one bit of the decoded signature and re-encode it.
            let outcome = exchange(hash, "alice-secret", |m| {
                let sig = m.strip_prefix(b"v=").expect("server accepted the proof");
                let mut raw = B64.decode(sig).unwrap();
                raw[0] ^= 1;
                format!("v={}", B64.encode(raw)).into_bytes()
            });
            assert!(
                matches!(
                    outcome,
                    Outcome::ClientFailed(SaslError::ServerSignatureMismatch { .. })
                ),
                "{hash:?}: {outcome:?}"
            );
        }
    }
}

#[test]
fn salted_password_is_pbkdf2_of_the_hash() {
    // RFC 7914 §11 PBKDF2-HMAC-SHA256 vector (P = "passwd", S = "salt", c = 1): its first
    // 32 bytes, one SHA-256 block.
    let salted = ScramHash::Sha256.salted_password(b"passwd", b"salt", 1);
    let hex: String = salted.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        hex,
        "55ac046e56e3089fec1691c22544b605f94185216dde0465e68b9d57c20dacbc"
    );
    assert_eq!(
        ScramHash::Sha512
            .salted_password(b"passwd", b"salt", 4096)
            .len(),
        64
    );
}
