//! AWS_MSK_IAM: Amazon MSK's IAM access control, a SigV4-presigned `kafka-cluster:Connect`
//! request sent as JSON in one SASL message.
//!
//! Exchange: `step("")` gives the signed JSON payload; `step(answer)` checks that the broker's
//! answer is the JSON object MSK sends on success (it carries `version` and `request-id`) and
//! gives [`Step::Done`]. A broker that rejects the signature answers SaslAuthenticate with
//! `SASL_AUTHENTICATION_FAILED` instead, which the client reports.
//!
//! The payload is the query of a SigV4 presigned `GET https://<broker host>/?Action=kafka-cluster%3AConnect`
//! (service `kafka-cluster`, signed header `host`, payload hash of the empty body, default
//! expiry 900 s), as a flat JSON object with lower-case keys: `version` (`2020_10_22`), `host`,
//! `user-agent`, `action`, `x-amz-algorithm`, `x-amz-credential`, `x-amz-date`,
//! `x-amz-signedheaders`, `x-amz-expires`, `x-amz-signature`, and `x-amz-security-token` when
//! the credentials carry a session token.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::{BoxError, Mechanism, SaslContext, SaslError, Secret, Session, Step};

const NAME: &str = "AWS_MSK_IAM";
/// The payload version MSK expects.
pub const MSK_IAM_VERSION: &str = "2020_10_22";
/// The SigV4 service name MSK signs with.
pub const MSK_IAM_SERVICE: &str = "kafka-cluster";
/// The action every connection asks for.
pub const MSK_IAM_ACTION: &str = "kafka-cluster:Connect";
/// How long the signed payload stays valid unless configured: 900 s, as AWS's own clients use.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(900);

/// AWS credentials: an access key id, its secret, and a session token for temporary
/// (STS) credentials.
///
/// `Debug` shows the access key id (an identifier, not a secret), never the secret key or the
/// session token.
#[derive(Clone)]
#[non_exhaustive]
pub struct AwsCredentials {
    /// The access key id, e.g. `AKIA...` or `ASIA...`.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: Secret,
    /// The session token of temporary credentials.
    pub session_token: Option<Secret>,
}

impl AwsCredentials {
    /// Long-term credentials (no session token).
    pub fn new(access_key_id: impl Into<String>, secret_access_key: impl Into<Secret>) -> Self {
        Self {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token: None,
        }
    }

    /// Adds the session token of temporary credentials.
    pub fn with_session_token(mut self, token: impl Into<Secret>) -> Self {
        self.session_token = Some(token.into());
        self
    }
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &self.secret_access_key)
            .field("session_token", &self.session_token.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Gives AWS credentials for each authentication.
///
/// It runs inside [`Mechanism::start`], synchronously: a provider backed by STS or instance
/// metadata should cache and refresh elsewhere. Implemented by [`StaticCredentials`],
/// [`EnvironmentCredentials`] and any `Fn() -> Result<AwsCredentials, BoxError> + Send + Sync`
/// closure. The error's text goes into [`SaslError::Credentials`], so it must hold no secret.
pub trait AwsCredentialsProvider: Send + Sync {
    /// The credentials to sign with now.
    ///
    /// # Errors
    /// Whatever stopped the provider from getting credentials.
    fn credentials(&self) -> Result<AwsCredentials, BoxError>;
}

impl<F> AwsCredentialsProvider for F
where
    F: Fn() -> Result<AwsCredentials, BoxError> + Send + Sync,
{
    fn credentials(&self) -> Result<AwsCredentials, BoxError> {
        self()
    }
}

/// Always the same credentials.
#[derive(Debug, Clone)]
pub struct StaticCredentials(AwsCredentials);

impl StaticCredentials {
    /// A provider of these credentials.
    pub fn new(credentials: AwsCredentials) -> Self {
        Self(credentials)
    }
}

impl AwsCredentialsProvider for StaticCredentials {
    fn credentials(&self) -> Result<AwsCredentials, BoxError> {
        Ok(self.0.clone())
    }
}

/// Reads `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and (if set) `AWS_SESSION_TOKEN` from
/// the environment at each authentication, the way the AWS SDKs' environment provider does.
#[derive(Debug, Clone, Default)]
pub struct EnvironmentCredentials;

impl EnvironmentCredentials {
    /// The environment provider.
    pub fn new() -> Self {
        Self
    }

    /// The credentials found through `lookup` (the environment, or a map in tests).
    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<AwsCredentials, BoxError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let id = get("AWS_ACCESS_KEY_ID").ok_or("AWS_ACCESS_KEY_ID is not set")?;
        let secret = get("AWS_SECRET_ACCESS_KEY").ok_or("AWS_SECRET_ACCESS_KEY is not set")?;
        let mut creds = AwsCredentials::new(id.trim(), secret.trim());
        if let Some(token) = get("AWS_SESSION_TOKEN") {
            creds = creds.with_session_token(token.trim());
        }
        Ok(creds)
    }
}

impl AwsCredentialsProvider for EnvironmentCredentials {
    /// # Errors
    /// When `AWS_ACCESS_KEY_ID` or `AWS_SECRET_ACCESS_KEY` is unset, empty or not Unicode.
    fn credentials(&self) -> Result<AwsCredentials, BoxError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }
}

/// The AWS_MSK_IAM mechanism: signs a `kafka-cluster:Connect` request for the broker host with
/// SigV4 (through `aws-sigv4`).
///
/// `Debug` shows the region, user agent and expiry, never credentials.
#[derive(Clone)]
pub struct AwsMskIam {
    region: String,
    provider: Arc<dyn AwsCredentialsProvider>,
    user_agent: String,
    expiry: Duration,
    fixed_time: Option<SystemTime>,
}

impl fmt::Debug for AwsMskIam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsMskIam")
            .field("region", &self.region)
            .field("provider", &"<credentials provider>")
            .field("user_agent", &self.user_agent)
            .field("expiry", &self.expiry)
            .finish()
    }
}

impl AwsMskIam {
    /// AWS_MSK_IAM for the cluster's `region` (e.g. `us-east-1`), with credentials from
    /// `provider` (a [`AwsCredentialsProvider`] or a closure).
    pub fn new(region: impl Into<String>, provider: impl AwsCredentialsProvider + 'static) -> Self {
        Self {
            region: region.into(),
            provider: Arc::new(provider),
            user_agent: format!("kafkit-sasl-rust/{}", env!("CARGO_PKG_VERSION")),
            expiry: DEFAULT_EXPIRY,
            fixed_time: None,
        }
    }

    /// Sets the `user-agent` field (default `kafkit-sasl-rust/<version>`).
    pub fn with_user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// Sets how long the signature stays valid (`x-amz-expires`, whole seconds, 1 s to 7 days;
    /// default [`DEFAULT_EXPIRY`]).
    pub fn with_expiry(mut self, expiry: Duration) -> Self {
        self.expiry = expiry;
        self
    }

    /// Signs as of this time instead of the system clock. Only for tests that compare a
    /// signature with a known one.
    pub fn with_fixed_time(mut self, time: SystemTime) -> Self {
        self.fixed_time = Some(time);
        self
    }

    /// The region signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// Builds the signed JSON payload for `host`.
    fn payload(&self, host: &str) -> Result<Vec<u8>, SaslError> {
        let bad = |reason: String| SaslError::InvalidConfig {
            mechanism: NAME,
            reason,
        };
        if self.region.is_empty()
            || !self
                .region
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(bad(format!(
                "region {:?} is not an AWS region",
                self.region
            )));
        }
        if host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        {
            return Err(bad(format!("broker host {host:?} is not a DNS name")));
        }
        let secs = self.expiry.as_secs();
        if !(1..=604_800).contains(&secs) {
            return Err(bad(format!("expiry {secs} s outside 1..=604800")));
        }
        let creds = self
            .provider
            .credentials()
            .map_err(|e| SaslError::Credentials {
                mechanism: NAME,
                reason: format!("the AWS credentials provider failed: {e}"),
            })?;
        if creds.access_key_id.is_empty() || creds.secret_access_key.is_empty() {
            return Err(SaslError::Credentials {
                mechanism: NAME,
                reason: "the access key id or secret access key is empty".into(),
            });
        }
        let session_token = creds.session_token.as_ref().map(|t| t.expose().to_owned());
        let identity = aws_credential_types::Credentials::new(
            creds.access_key_id.clone(),
            creds.secret_access_key.expose().to_owned(),
            session_token,
            None,
            "kafkit-sasl",
        )
        .into();

        use aws_sigv4::http_request::{
            SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
        };
        let mut settings = SigningSettings::default();
        settings.signature_location = SignatureLocation::QueryParams;
        settings.expires_in = Some(Duration::from_secs(secs));
        let time = self.fixed_time.unwrap_or_else(SystemTime::now);
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(MSK_IAM_SERVICE)
            .time(time)
            .settings(settings)
            .build()
            .map_err(|e| bad(format!("signing parameters: {e}")))?
            .into();
        let uri = format!("https://{host}/?Action=kafka-cluster%3AConnect");
        let request = SignableRequest::new(
            "GET",
            uri,
            std::iter::once(("host", host)),
            SignableBody::Bytes(&[]),
        )
        .map_err(|e| bad(format!("cannot sign a request for host {host:?}: {e}")))?;
        // aws-sigv4 logs the canonical request at TRACE level, and with temporary credentials
        // that request holds the session token: sign with this thread's tracing switched off.
        let signed = tracing::dispatcher::with_default(&tracing::Dispatch::none(), || {
            sign(request, &params)
        });
        let (instructions, _signature) = signed
            .map_err(|e| bad(format!("SigV4 signing failed: {e}")))?
            .into_parts();

        let mut map = serde_json::Map::new();
        let mut put = |k: &str, v: &str| {
            map.insert(k.to_owned(), serde_json::Value::String(v.to_owned()));
        };
        put("version", MSK_IAM_VERSION);
        put("host", host);
        put("user-agent", &self.user_agent);
        put("action", MSK_IAM_ACTION);
        for (k, v) in instructions.params() {
            put(&k.to_ascii_lowercase(), v);
        }
        serde_json::to_vec(&serde_json::Value::Object(map))
            .map_err(|e| bad(format!("cannot encode the payload: {e}")))
    }
}

impl Mechanism for AwsMskIam {
    fn name(&self) -> &'static str {
        NAME
    }

    /// # Errors
    /// [`SaslError::Credentials`] when the provider fails or gives empty keys;
    /// [`SaslError::InvalidConfig`] for an invalid region, broker host or expiry.
    fn start(&self, ctx: &SaslContext) -> Result<Box<dyn Session>, SaslError> {
        let payload = self.payload(&ctx.host)?;
        Ok(Box::new(MskIamSession {
            state: State::Initial(payload),
        }))
    }
}

enum State {
    Initial(Vec<u8>),
    Sent,
    Finished,
}

struct MskIamSession {
    state: State,
}

impl Session for MskIamSession {
    fn step(&mut self, challenge: &[u8]) -> Result<Step, SaslError> {
        match std::mem::replace(&mut self.state, State::Finished) {
            State::Initial(payload) => {
                self.state = State::Sent;
                Ok(Step::Continue(payload))
            }
            State::Sent => {
                let invalid = |reason: &str| SaslError::InvalidServerMessage {
                    mechanism: NAME,
                    reason: reason.to_owned(),
                };
                let value: serde_json::Value = serde_json::from_slice(challenge)
                    .map_err(|_| invalid("the broker's answer is not JSON"))?;
                let obj = value
                    .as_object()
                    .ok_or_else(|| invalid("the broker's answer is not a JSON object"))?;
                match obj.get("version").and_then(|v| v.as_str()) {
                    Some(MSK_IAM_VERSION) => {}
                    _ => return Err(invalid("the broker's answer lacks version 2020_10_22")),
                }
                if obj.get("request-id").and_then(|v| v.as_str()).is_none() {
                    return Err(invalid("the broker's answer lacks request-id"));
                }
                Ok(Step::Done)
            }
            State::Finished => Err(SaslError::UnexpectedStep { mechanism: NAME }),
        }
    }
}

#[cfg(test)]
mod tests;
