//! Formats every configuration, credential, step and error type that holds or handles a secret
//! (`{:?}`, `{:#?}`, and `Display` for errors) and checks that no secret appears.

#[cfg(feature = "aws-msk-iam")]
use std::time::{Duration, UNIX_EPOCH};

#[cfg(feature = "aws-msk-iam")]
use kafkit_sasl::{AwsCredentials, AwsMskIam, BoxError, EnvironmentCredentials, StaticCredentials};
use kafkit_sasl::{
    Mechanism, OAuthBearer, Plain, SaslContext, SaslError, Scram, Secret, StaticToken, Step,
};

const PASSWORD: &str = "Pa55w0rd-do-not-print";
const TOKEN: &str = "eyJhbGciOiJub25lIn0.c2VjcmV0LXRva2Vu.sig";
const AWS_SECRET: &str = "wJalrXUtnFEMI/SECRETKEY/doNotPrint";
const AWS_SESSION: &str = "FwoGZXIvSESSIONTOKEN/doNotPrint==";
const EXT_VALUE: &str = "ext-value-do-not-print";

const SECRETS: [&str; 5] = [PASSWORD, TOKEN, AWS_SECRET, AWS_SESSION, EXT_VALUE];

fn ctx() -> SaslContext {
    SaslContext::new("b-1.example.com", 9096)
}

fn assert_clean(what: &str, text: &str) {
    for secret in SECRETS {
        // Also look for a distinctive part, in case a secret is printed partly or escaped.
        let part = &secret[..secret.len().min(12)];
        assert!(
            !text.contains(secret) && !text.contains(part),
            "{what} leaks a secret: {text}"
        );
    }
}

fn check_debug<T: std::fmt::Debug>(what: &str, value: &T) {
    assert_clean(what, &format!("{value:?}"));
    assert_clean(what, &format!("{value:#?}"));
}

fn check_error(what: &str, err: &SaslError) {
    check_debug(what, err);
    assert_clean(what, &err.to_string());
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        assert_clean(what, &s.to_string());
        source = s.source();
    }
}

#[cfg(feature = "aws-msk-iam")]
fn aws_creds() -> AwsCredentials {
    AwsCredentials::new("AKIDEXAMPLE", AWS_SECRET).with_session_token(AWS_SESSION)
}

#[cfg(feature = "aws-msk-iam")]
fn msk() -> AwsMskIam {
    AwsMskIam::new("us-east-1", StaticCredentials::new(aws_creds()))
        .with_fixed_time(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
}

#[test]
fn configs_and_credentials_never_print_secrets() {
    check_debug("Secret", &Secret::new(PASSWORD));
    check_debug("Plain", &Plain::new("alice", PASSWORD).with_authzid("bob"));
    check_debug("Scram sha256", &Scram::sha256("alice", PASSWORD));
    check_debug(
        "Scram sha512 token",
        &Scram::sha512("tokenid", PASSWORD).with_token_auth(true),
    );
    check_debug(
        "OAuthBearer",
        &OAuthBearer::with_static_token(TOKEN).with_extension("logicalCluster", EXT_VALUE),
    );
    check_debug("StaticToken", &StaticToken::new(TOKEN));
    #[cfg(feature = "aws-msk-iam")]
    check_debug("AwsCredentials", &aws_creds());
    #[cfg(feature = "aws-msk-iam")]
    check_debug("StaticCredentials", &StaticCredentials::new(aws_creds()));
    #[cfg(feature = "aws-msk-iam")]
    check_debug("EnvironmentCredentials", &EnvironmentCredentials::new());
    #[cfg(feature = "aws-msk-iam")]
    check_debug("AwsMskIam", &msk());
    // Through the trait object, as the client holds it.
    let mechs: Vec<Box<dyn Mechanism>> = vec![
        Box::new(Plain::new("alice", PASSWORD)),
        Box::new(Scram::sha256("alice", PASSWORD)),
        Box::new(OAuthBearer::with_static_token(TOKEN)),
        #[cfg(feature = "aws-msk-iam")]
        Box::new(msk()),
    ];
    for m in &mechs {
        check_debug(m.name(), m);
    }
}

#[test]
fn client_messages_are_not_printed_by_step_debug() {
    let mechs: Vec<Box<dyn Mechanism>> = vec![
        Box::new(Plain::new("alice", PASSWORD)),
        Box::new(OAuthBearer::with_static_token(TOKEN).with_extension("k", EXT_VALUE)),
        #[cfg(feature = "aws-msk-iam")]
        Box::new(msk()),
    ];
    for m in &mechs {
        let step = m.start(&ctx()).unwrap().step(&[]).unwrap();
        assert!(matches!(step, Step::Continue(_)));
        check_debug("Step", &step);
    }
}

#[test]
fn errors_never_print_secrets() {
    let mut errors: Vec<(&str, SaslError)> = Vec::new();

    // Configuration errors about the secret itself.
    errors.push((
        "PLAIN NUL password",
        Plain::new("alice", format!("{PASSWORD}\0"))
            .start(&ctx())
            .err()
            .unwrap(),
    ));
    errors.push((
        "OAUTHBEARER bad token",
        OAuthBearer::with_static_token(format!("{TOKEN} x"))
            .start(&ctx())
            .err()
            .unwrap(),
    ));
    errors.push((
        "OAUTHBEARER bad extension value",
        OAuthBearer::with_static_token(TOKEN)
            .with_extension("key", format!("{EXT_VALUE}\u{1}"))
            .start(&ctx())
            .err()
            .unwrap(),
    ));
    #[cfg(feature = "aws-msk-iam")]
    errors.push((
        "AWS bad region",
        AwsMskIam::new("bad region", StaticCredentials::new(aws_creds()))
            .start(&ctx())
            .err()
            .unwrap(),
    ));
    #[cfg(feature = "aws-msk-iam")]
    errors.push((
        "AWS provider failure",
        AwsMskIam::new("us-east-1", || -> Result<AwsCredentials, BoxError> {
            Err("metadata service timed out".into())
        })
        .start(&ctx())
        .err()
        .unwrap(),
    ));

    // SCRAM failures after the password has been used.
    let server_first = "r=fixednonceSERVER,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    for last in [&b"v=AAAA"[..], b"e=invalid-proof", b"garbage"] {
        let mut s = Scram::sha256("alice", PASSWORD)
            .with_fixed_nonce("fixednonce")
            .start(&ctx())
            .unwrap();
        s.step(&[]).unwrap();
        s.step(server_first.as_bytes()).unwrap();
        errors.push(("SCRAM final", s.step(last).unwrap_err()));
    }

    // OAUTHBEARER server error.
    let mut s = OAuthBearer::with_static_token(TOKEN).start(&ctx()).unwrap();
    s.step(&[]).unwrap();
    errors.push((
        "OAUTHBEARER server error",
        s.step(br#"{"status":"invalid_token"}"#).unwrap_err(),
    ));

    for (what, err) in &errors {
        check_error(what, err);
    }
}
