//! OAUTHBEARER (RFC 7628) with SASL extensions (KIP-342); Kafka: KIP-255.
//!
//! Exchange: `step("")` gives the client initial response
//! `n,[a=<authzid>],^Aauth=Bearer <token>^A<key>=<value>^A...^A^A` (`^A` is 0x01);
//! `step(answer)`: an empty answer means success ([`Step::Done`]); a non-empty one is the
//! server's error JSON (RFC 7628 §3.2.2), reported as [`SaslError::AuthenticationFailed`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::{BoxError, Mechanism, SaslContext, SaslError, Secret, Session, Step};

const NAME: &str = "OAUTHBEARER";
const SEP: u8 = 0x01;

/// Gives the bearer token for each authentication (each connection and each KIP-368
/// re-authentication).
///
/// It runs inside [`Mechanism::start`], synchronously, so it should return a cached token and
/// refresh it elsewhere (for example on a background task) before it expires.
///
/// Any `Fn() -> Result<Secret, BoxError> + Send + Sync` closure is a provider. The error's
/// text is put into [`SaslError::Credentials`], so it must not contain the token or a client
/// secret.
pub trait TokenProvider: Send + Sync {
    /// The current token (a compact JWT or any RFC 6750 `b64token`).
    ///
    /// # Errors
    /// Whatever stopped the provider from getting a token.
    fn token(&self) -> Result<Secret, BoxError>;
}

impl<F> TokenProvider for F
where
    F: Fn() -> Result<Secret, BoxError> + Send + Sync,
{
    fn token(&self) -> Result<Secret, BoxError> {
        self()
    }
}

/// A provider that always gives the same token (tests, short-lived tools).
#[derive(Debug, Clone)]
pub struct StaticToken(Secret);

impl StaticToken {
    /// A provider of this token.
    pub fn new(token: impl Into<Secret>) -> Self {
        Self(token.into())
    }
}

impl TokenProvider for StaticToken {
    fn token(&self) -> Result<Secret, BoxError> {
        Ok(self.0.clone())
    }
}

/// The OAUTHBEARER mechanism (RFC 7628, Kafka KIP-255) with SASL extensions (KIP-342).
///
/// `Debug` shows the extension names, never the token or extension values.
#[derive(Clone)]
pub struct OAuthBearer {
    provider: Arc<dyn TokenProvider>,
    extensions: BTreeMap<String, String>,
    authzid: Option<String>,
}

impl fmt::Debug for OAuthBearer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthBearer")
            .field("provider", &"<token provider>")
            .field("extensions", &self.extensions.keys().collect::<Vec<_>>())
            .field("authzid", &self.authzid)
            .finish()
    }
}

impl OAuthBearer {
    /// OAUTHBEARER taking tokens from `provider` (a [`TokenProvider`] or a closure).
    pub fn new(provider: impl TokenProvider + 'static) -> Self {
        Self {
            provider: Arc::new(provider),
            extensions: BTreeMap::new(),
            authzid: None,
        }
    }

    /// OAUTHBEARER with one fixed token.
    pub fn with_static_token(token: impl Into<Secret>) -> Self {
        Self::new(StaticToken::new(token))
    }

    /// Adds a SASL extension (KIP-342), e.g. `logicalCluster` or `identityPoolId` for
    /// Confluent Cloud. A second value for the same key replaces the first.
    ///
    /// Keys must be 1+ ASCII letters and not `auth`; values 1+ characters from
    /// `%x21-7E`, space, tab, CR, LF (RFC 7628 §3.1). [`Mechanism::start`] checks them.
    pub fn with_extension(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.extensions.insert(key.into(), value.into());
        self
    }

    /// Sets the authorization identity sent in the GS2 header (`a=`); none by default.
    pub fn with_authzid(mut self, authzid: impl Into<String>) -> Self {
        self.authzid = Some(authzid.into());
        self
    }
}

fn valid_token(t: &str) -> bool {
    // RFC 6750 §2.1 b64token: 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
    let body = t.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

fn valid_key(k: &str) -> bool {
    !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphabetic()) && k != "auth"
}

fn valid_value(v: &str) -> bool {
    !v.is_empty()
        && v.bytes()
            .all(|b| (0x21..=0x7e).contains(&b) || b" \t\r\n".contains(&b))
}

impl Mechanism for OAuthBearer {
    fn name(&self) -> &'static str {
        NAME
    }

    /// # Errors
    /// [`SaslError::Credentials`] when the provider fails; [`SaslError::InvalidConfig`] when the
    /// token is not an RFC 6750 `b64token`, an extension key or value breaks the KIP-342 rules,
    /// or the authzid contains `,` or `=` or a control character.
    fn start(&self, _ctx: &SaslContext) -> Result<Box<dyn Session>, SaslError> {
        let bad = |reason: String| SaslError::InvalidConfig {
            mechanism: NAME,
            reason,
        };
        for (k, v) in &self.extensions {
            if !valid_key(k) {
                return Err(bad(format!(
                    "extension key {k:?} must be ASCII letters and not \"auth\""
                )));
            }
            if !valid_value(v) {
                // The value is not echoed: it might be sensitive.
                return Err(bad(format!(
                    "the value of extension {k:?} is empty or has characters outside %x21-7E, space, tab, CR, LF"
                )));
            }
        }
        if let Some(a) = &self.authzid
            && (a.is_empty() || a.chars().any(|c| c == ',' || c == '=' || c.is_control()))
        {
            return Err(bad(
                "the authzid must be non-empty without ',', '=' or control characters".into(),
            ));
        }
        let token = self.provider.token().map_err(|e| SaslError::Credentials {
            mechanism: NAME,
            reason: format!("the token provider failed: {e}"),
        })?;
        if !valid_token(token.expose()) {
            return Err(bad(
                "the token is not an RFC 6750 b64token (letters, digits, -._~+/ then '=')".into(),
            ));
        }
        let mut msg = Vec::with_capacity(64 + token.expose().len());
        msg.extend_from_slice(b"n,");
        if let Some(a) = &self.authzid {
            msg.extend_from_slice(b"a=");
            msg.extend_from_slice(a.as_bytes());
        }
        msg.push(b',');
        msg.push(SEP);
        msg.extend_from_slice(b"auth=Bearer ");
        msg.extend_from_slice(token.expose().as_bytes());
        for (k, v) in &self.extensions {
            msg.push(SEP);
            msg.extend_from_slice(k.as_bytes());
            msg.push(b'=');
            msg.extend_from_slice(v.as_bytes());
        }
        msg.push(SEP);
        msg.push(SEP);
        Ok(Box::new(OAuthBearerSession {
            state: State::Initial(msg),
        }))
    }
}

enum State {
    Initial(Vec<u8>),
    Sent,
    Finished,
}

struct OAuthBearerSession {
    state: State,
}

/// Reads the `status` (and `scope`) of the RFC 7628 §3.2.2 error JSON for the error message.
fn describe_error(answer: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(answer) {
        Ok(serde_json::Value::Object(map)) => {
            let field = |k: &str| map.get(k).and_then(|v| v.as_str()).map(str::to_owned);
            let mut s = format!(
                "server error status {}",
                field("status").unwrap_or_else(|| "<none>".into())
            );
            if let Some(scope) = field("scope") {
                s.push_str(&format!(", scope {scope:?}"));
            }
            s.chars().take(300).collect()
        }
        _ => format!(
            "the server answered with {} bytes that are not the RFC 7628 error JSON",
            answer.len()
        ),
    }
}

impl Session for OAuthBearerSession {
    fn step(&mut self, challenge: &[u8]) -> Result<Step, SaslError> {
        match std::mem::replace(&mut self.state, State::Finished) {
            State::Initial(msg) => {
                self.state = State::Sent;
                Ok(Step::Continue(msg))
            }
            State::Sent if challenge.is_empty() => Ok(Step::Done),
            State::Sent => Err(SaslError::AuthenticationFailed {
                mechanism: NAME,
                reason: describe_error(challenge),
            }),
            State::Finished => Err(SaslError::UnexpectedStep { mechanism: NAME }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JWT: &str = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.";

    fn ctx() -> SaslContext {
        SaslContext::new("localhost", 9092)
    }

    fn first(m: &OAuthBearer) -> Vec<u8> {
        match m.start(&ctx()).unwrap().step(&[]).unwrap() {
            Step::Continue(msg) => msg,
            Step::Done => panic!("expected a message"),
        }
    }

    #[test]
    fn initial_response_without_extensions() {
        let m = OAuthBearer::with_static_token(JWT);
        assert_eq!(
            first(&m),
            format!("n,,\x01auth=Bearer {JWT}\x01\x01").into_bytes()
        );
    }

    #[test]
    fn initial_response_with_extensions_and_authzid() {
        let m = OAuthBearer::with_static_token("abc")
            .with_extension("logicalCluster", "lkc-123")
            .with_extension("identityPoolId", "pool 1")
            .with_authzid("alice");
        // Extensions in key order (BTreeMap), each preceded by 0x01.
        assert_eq!(
            first(&m),
            b"n,a=alice,\x01auth=Bearer abc\x01identityPoolId=pool 1\x01logicalCluster=lkc-123\x01\x01"
        );
    }

    #[test]
    fn closure_provider_is_called_per_start() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let m = OAuthBearer::new(move || -> Result<Secret, BoxError> {
            let n = c.fetch_add(1, Ordering::SeqCst);
            Ok(Secret::new(format!("token{n}")))
        });
        assert!(first(&m).windows(6).any(|w| w == b"token0"));
        assert!(first(&m).windows(6).any(|w| w == b"token1"));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn provider_failure_is_a_retriable_credentials_error() {
        let m = OAuthBearer::new(|| -> Result<Secret, BoxError> { Err("idp unreachable".into()) });
        let err = m.start(&ctx()).err().unwrap();
        assert!(matches!(err, SaslError::Credentials { .. }), "{err:?}");
        assert!(err.is_retriable());
        assert!(err.to_string().contains("idp unreachable"));
    }

    #[test]
    fn success_and_error_answers() {
        let m = OAuthBearer::with_static_token(JWT);
        let mut s = m.start(&ctx()).unwrap();
        s.step(&[]).unwrap();
        assert!(matches!(s.step(&[]).unwrap(), Step::Done));
        assert!(matches!(s.step(&[]), Err(SaslError::UnexpectedStep { .. })));

        let mut s = m.start(&ctx()).unwrap();
        s.step(&[]).unwrap();
        let err = s
            .step(br#"{"status":"invalid_token","scope":"kafka","openid-configuration":"x"}"#)
            .unwrap_err();
        match err {
            SaslError::AuthenticationFailed { reason, .. } => {
                assert!(
                    reason.contains("invalid_token") && reason.contains("kafka"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }

        let mut s = m.start(&ctx()).unwrap();
        s.step(&[]).unwrap();
        assert!(matches!(
            s.step(b"\xff not json"),
            Err(SaslError::AuthenticationFailed { .. })
        ));
    }

    #[test]
    fn invalid_configuration_is_rejected() {
        let cases = [
            OAuthBearer::with_static_token("has space"),
            OAuthBearer::with_static_token(""),
            OAuthBearer::with_static_token("tok\x01en"),
            OAuthBearer::with_static_token("abc").with_extension("auth", "x"),
            OAuthBearer::with_static_token("abc").with_extension("bad key", "x"),
            OAuthBearer::with_static_token("abc").with_extension("k1", "x"),
            OAuthBearer::with_static_token("abc").with_extension("key", ""),
            OAuthBearer::with_static_token("abc").with_extension("key", "a\x01b"),
            OAuthBearer::with_static_token("abc").with_authzid("a,b"),
        ];
        for m in cases {
            let err = m.start(&ctx()).err().expect("must fail");
            assert!(
                matches!(err, SaslError::InvalidConfig { .. }),
                "{m:?}: {err:?}"
            );
        }
    }
}
