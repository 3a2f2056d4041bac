use super::*;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::time::UNIX_EPOCH;

const HOST: &str = "b-1.demo.abc123.c2.kafka.us-west-2.amazonaws.com";
const REGION: &str = "us-west-2";
const KEY_ID: &str = "AKIDEXAMPLE";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const TOKEN: &str = "FwoGZXIvYXdzEXAMPLE/session+token==";
/// 2020-10-22T12:34:56Z.
const TIME_SECS: u64 = 1_603_370_096;
const AMZ_DATE: &str = "20201022T123456Z";

// ---- Test oracle: SigV4 written from AWS's "Signature Version 4 signing process" spec
// (create a canonical request, a string to sign, derive the signing key, sign), with hmac and
// sha2 directly. It shares no code with aws-sigv4.

fn hmac256(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as hmac::digest::KeyInit>::new_from_slice(key).unwrap();
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// URI-encodes every byte except the unreserved characters (A-Z a-z 0-9 - _ . ~).
fn uri_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> Vec<u8> {
    let k_date = hmac256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac256(&k_date, region.as_bytes());
    let k_service = hmac256(&k_region, service.as_bytes());
    hmac256(&k_service, b"aws4_request")
}

/// The expected x-amz-signature of the presigned `kafka-cluster:Connect` request.
fn oracle_signature(session_token: Option<&str>, expires: u64) -> String {
    let date = &AMZ_DATE[..8];
    let scope = format!("{date}/{REGION}/kafka-cluster/aws4_request");
    let mut query = vec![
        ("Action".to_owned(), "kafka-cluster:Connect".to_owned()),
        ("X-Amz-Algorithm".to_owned(), "AWS4-HMAC-SHA256".to_owned()),
        ("X-Amz-Credential".to_owned(), format!("{KEY_ID}/{scope}")),
        ("X-Amz-Date".to_owned(), AMZ_DATE.to_owned()),
        ("X-Amz-Expires".to_owned(), expires.to_string()),
        ("X-Amz-SignedHeaders".to_owned(), "host".to_owned()),
    ];
    if let Some(t) = session_token {
        query.push(("X-Amz-Security-Token".to_owned(), t.to_owned()));
    }
    query.sort();
    let canonical_query = query
        .iter()
        .map(|(k, v)| format!("{}={}", uri_encode(k), uri_encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let empty_payload_hash = hex(&Sha256::digest(b""));
    let canonical_request =
        format!("GET\n/\n{canonical_query}\nhost:{HOST}\n\nhost\n{empty_payload_hash}");
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{AMZ_DATE}\n{scope}\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    );
    let key = signing_key(SECRET, date, REGION, "kafka-cluster");
    hex(&hmac256(&key, string_to_sign.as_bytes()))
}

#[test]
fn oracle_derives_the_aws_documented_signing_key() {
    // The key-derivation example of AWS's SigV4 documentation (secret below, 20120215,
    // us-east-1, iam) checks the oracle itself.
    assert_eq!(
        hex(&signing_key(SECRET, "20120215", "us-east-1", "iam")),
        "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
    );
}

// ---- The mechanism under test.

fn mechanism(creds: AwsCredentials) -> AwsMskIam {
    AwsMskIam::new(REGION, StaticCredentials::new(creds))
        .with_user_agent("kafkit-sasl-test/1.0")
        .with_fixed_time(UNIX_EPOCH + Duration::from_secs(TIME_SECS))
}

fn payload_of(m: &AwsMskIam) -> serde_json::Map<String, serde_json::Value> {
    let mut s = m.start(&SaslContext::new(HOST, 9098)).unwrap();
    let Step::Continue(bytes) = s.step(&[]).unwrap() else {
        panic!("expected the payload")
    };
    match serde_json::from_slice(&bytes).unwrap() {
        serde_json::Value::Object(map) => map,
        other => panic!("payload is not an object: {other}"),
    }
}

fn field<'a>(map: &'a serde_json::Map<String, serde_json::Value>, k: &str) -> &'a str {
    map.get(k)
        .unwrap_or_else(|| panic!("missing field {k}"))
        .as_str()
        .unwrap_or_else(|| panic!("field {k} is not a string"))
}

#[test]
fn payload_has_every_field_and_the_independent_signature_with_session_token() {
    let map = payload_of(&mechanism(
        AwsCredentials::new(KEY_ID, SECRET).with_session_token(TOKEN),
    ));
    let mut keys: Vec<&str> = map.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "action",
            "host",
            "user-agent",
            "version",
            "x-amz-algorithm",
            "x-amz-credential",
            "x-amz-date",
            "x-amz-expires",
            "x-amz-security-token",
            "x-amz-signature",
            "x-amz-signedheaders",
        ]
    );
    assert_eq!(field(&map, "version"), "2020_10_22");
    assert_eq!(field(&map, "host"), HOST);
    assert_eq!(field(&map, "user-agent"), "kafkit-sasl-test/1.0");
    assert_eq!(field(&map, "action"), "kafka-cluster:Connect");
    assert_eq!(field(&map, "x-amz-algorithm"), "AWS4-HMAC-SHA256");
    assert_eq!(
        field(&map, "x-amz-credential"),
        "AKIDEXAMPLE/20201022/us-west-2/kafka-cluster/aws4_request"
    );
    assert_eq!(field(&map, "x-amz-date"), AMZ_DATE);
    assert_eq!(field(&map, "x-amz-signedheaders"), "host");
    assert_eq!(field(&map, "x-amz-expires"), "900");
    assert_eq!(field(&map, "x-amz-security-token"), TOKEN);
    assert_eq!(
        field(&map, "x-amz-signature"),
        oracle_signature(Some(TOKEN), 900)
    );
}

#[test]
fn signature_without_session_token_and_custom_expiry() {
    let map = payload_of(
        &mechanism(AwsCredentials::new(KEY_ID, SECRET)).with_expiry(Duration::from_secs(300)),
    );
    assert!(!map.contains_key("x-amz-security-token"));
    assert_eq!(map.len(), 10);
    assert_eq!(field(&map, "x-amz-expires"), "300");
    assert_eq!(field(&map, "x-amz-signature"), oracle_signature(None, 300));
    // A different secret gives a different signature (the oracle is not trivially equal).
    let other = payload_of(&mechanism(AwsCredentials::new(KEY_ID, "another-secret")));
    assert_ne!(
        field(&other, "x-amz-signature"),
        oracle_signature(None, 900)
    );
}

#[test]
fn broker_answer_is_checked() {
    let m = mechanism(AwsCredentials::new(KEY_ID, SECRET));
    let ctx = SaslContext::new(HOST, 9098);
    let mut s = m.start(&ctx).unwrap();
    s.step(&[]).unwrap();
    assert!(matches!(
        s.step(br#"{"version":"2020_10_22","request-id":"5b4e7d29-3c0f-4f5a-9a3e-5a6e0c7a9b11"}"#)
            .unwrap(),
        Step::Done
    ));
    assert!(matches!(s.step(&[]), Err(SaslError::UnexpectedStep { .. })));
    for bad in [
        &b""[..],
        b"not json",
        b"[]",
        br#"{"version":"1999","request-id":"x"}"#,
        br#"{"version":"2020_10_22"}"#,
    ] {
        let mut s = m.start(&ctx).unwrap();
        s.step(&[]).unwrap();
        assert!(
            matches!(s.step(bad), Err(SaslError::InvalidServerMessage { .. })),
            "{bad:?}"
        );
    }
}

#[test]
fn environment_provider_reads_the_standard_variables() {
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    };
    let c = EnvironmentCredentials::from_lookup(env(&[
        ("AWS_ACCESS_KEY_ID", "AKID"),
        ("AWS_SECRET_ACCESS_KEY", "sekrit"),
        ("AWS_SESSION_TOKEN", "tok"),
    ]))
    .unwrap();
    assert_eq!(c.access_key_id, "AKID");
    assert_eq!(c.secret_access_key.expose(), "sekrit");
    assert_eq!(c.session_token.as_ref().map(Secret::expose), Some("tok"));

    let c = EnvironmentCredentials::from_lookup(env(&[
        ("AWS_ACCESS_KEY_ID", "AKID"),
        ("AWS_SECRET_ACCESS_KEY", "sekrit"),
        ("AWS_SESSION_TOKEN", ""),
    ]))
    .unwrap();
    assert!(c.session_token.is_none());

    let err =
        EnvironmentCredentials::from_lookup(env(&[("AWS_ACCESS_KEY_ID", "AKID")])).unwrap_err();
    assert!(err.to_string().contains("AWS_SECRET_ACCESS_KEY"));
    assert!(EnvironmentCredentials::from_lookup(env(&[])).is_err());
}

#[test]
fn closure_provider_and_its_failure() {
    let m = AwsMskIam::new(REGION, || -> Result<AwsCredentials, BoxError> {
        Ok(AwsCredentials::new(KEY_ID, SECRET))
    })
    .with_fixed_time(UNIX_EPOCH + Duration::from_secs(TIME_SECS));
    let map = payload_of(&m);
    assert_eq!(field(&map, "x-amz-signature"), oracle_signature(None, 900));

    let m = AwsMskIam::new(REGION, || -> Result<AwsCredentials, BoxError> {
        Err("no instance profile".into())
    });
    let err = m.start(&SaslContext::new(HOST, 9098)).err().unwrap();
    assert!(matches!(err, SaslError::Credentials { .. }), "{err:?}");
    assert!(err.is_retriable());
}

#[test]
fn invalid_configuration_is_rejected() {
    let ok = || mechanism(AwsCredentials::new(KEY_ID, SECRET));
    let ctx = SaslContext::new(HOST, 9098);
    let cases = [
        (
            AwsMskIam::new("", StaticCredentials::new(AwsCredentials::new("a", "b"))),
            ctx.clone(),
        ),
        (
            AwsMskIam::new(
                "us-west-2\n",
                StaticCredentials::new(AwsCredentials::new("a", "b")),
            ),
            ctx.clone(),
        ),
        (ok(), SaslContext::new("", 9098)),
        (ok(), SaslContext::new("host/evil", 9098)),
        (ok().with_expiry(Duration::ZERO), ctx.clone()),
        (ok().with_expiry(Duration::from_secs(604_801)), ctx.clone()),
    ];
    for (m, c) in cases {
        let err = m.start(&c).err().expect("must fail");
        assert!(
            matches!(err, SaslError::InvalidConfig { .. }),
            "{m:?}: {err:?}"
        );
    }
    let err = AwsMskIam::new(REGION, StaticCredentials::new(AwsCredentials::new("", "x")))
        .start(&ctx)
        .err()
        .unwrap();
    assert!(matches!(err, SaslError::Credentials { .. }));
}

/// A tracing subscriber that keeps the text of every event and span field.
mod capture {
    use std::fmt::Write as _;
    use std::sync::{Arc, Mutex};
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    #[derive(Clone, Default)]
    pub struct Capture(pub Arc<Mutex<String>>);

    struct Text<'a>(&'a mut String);
    impl Visit for Text<'_> {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            let _ = writeln!(self.0, "{}={value:?}", field.name());
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            let _ = writeln!(self.0, "{}={value}", field.name());
        }
    }

    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, span: &Attributes<'_>) -> Id {
            span.record(&mut Text(&mut self.0.lock().unwrap()));
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, values: &Record<'_>) {
            values.record(&mut Text(&mut self.0.lock().unwrap()));
        }
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            event.record(&mut Text(&mut self.0.lock().unwrap()));
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }
}

#[test]
fn signing_logs_no_session_token_or_secret() {
    use aws_sigv4::http_request::{
        SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
    };
    let capture = capture::Capture::default();
    let dispatch = tracing::Dispatch::new(capture.clone());

    // Under `cargo test` other tests of the process run on other threads. While only one scoped
    // dispatcher is alive, tracing-core decides a callsite's interest from the default of the
    // thread that reaches it first, so one reached first by another test (no subscriber there)
    // is "never" for everyone: a second, silent dispatcher kept alive beside the capture makes
    // it ask every live one.
    let second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::new());
    drop(tracing::dispatcher::set_default(&second));

    // Control: aws-sigv4 called directly does log the canonical request, session token included,
    // and the capturing subscriber sees it. Callsites reached before this test ran keep their
    // cached interest: rebuild it with the capture alive, and try again a few times.
    let encoded_token = uri_encode(TOKEN);
    for _ in 0..5 {
        if capture.0.lock().unwrap().contains(&encoded_token) {
            break;
        }
        capture.0.lock().unwrap().clear();
        tracing::callsite::rebuild_interest_cache();
        control_sign(&dispatch);
    }
    fn control_sign(dispatch: &tracing::Dispatch) {
        tracing::dispatcher::with_default(dispatch, || {
            let identity = aws_credential_types::Credentials::new(
                KEY_ID,
                SECRET,
                Some(TOKEN.into()),
                None,
                "t",
            )
            .into();
            let mut settings = SigningSettings::default();
            settings.signature_location = SignatureLocation::QueryParams;
            settings.expires_in = Some(Duration::from_secs(900));
            let params = aws_sigv4::sign::v4::SigningParams::builder()
                .identity(&identity)
                .region(REGION)
                .name("kafka-cluster")
                .time(UNIX_EPOCH + Duration::from_secs(TIME_SECS))
                .settings(settings)
                .build()
                .unwrap()
                .into();
            let req = SignableRequest::new(
                "GET",
                format!("https://{HOST}/"),
                std::iter::once(("host", HOST)),
                SignableBody::Bytes(&[]),
            )
            .unwrap();
            sign(req, &params).unwrap();
        });
    }
    let control = std::mem::take(&mut *capture.0.lock().unwrap());
    assert!(
        control.contains(&encoded_token),
        "control: expected aws-sigv4 to log the token; captured: {control}"
    );

    // The mechanism signs with tracing switched off: nothing secret reaches the subscriber.
    tracing::dispatcher::with_default(&dispatch, || {
        let m = mechanism(AwsCredentials::new(KEY_ID, SECRET).with_session_token(TOKEN));
        let mut s = m.start(&SaslContext::new(HOST, 9098)).unwrap();
        s.step(&[]).unwrap();
    });
    let logged = capture.0.lock().unwrap().clone();
    for secret in [TOKEN, encoded_token.as_str(), SECRET] {
        assert!(!logged.contains(secret), "logged a secret: {logged}");
    }
}
