//! SASL mechanisms for Kafka as pure state machines: this crate does no I/O.
//!
//! A [`Mechanism`] holds the configuration and the source of credentials; [`Mechanism::start`]
//! gives a [`Session`], the state machine of one exchange. The client sends the bytes each
//! [`Session::step`] returns in a SaslAuthenticate request (or raw frames after a v0
//! SaslHandshake) and feeds the broker's answer back into the next `step`, until [`Step::Done`].
//!
//! ```
//! use kafkit_sasl::{Mechanism, Plain, SaslContext, Step};
//!
//! let mech = Plain::new("alice", "alice-secret");
//! assert_eq!(mech.name(), "PLAIN");
//! let mut session = mech.start(&SaslContext::new("broker-1.example", 9092))?;
//! // First call: no challenge yet. PLAIN sends authzid NUL authcid NUL password.
//! let Step::Continue(first) = session.step(&[])? else { unreachable!() };
//! assert_eq!(first, b"\0alice\0alice-secret");
//! // The broker answers with empty bytes on success; the exchange is then complete.
//! assert!(matches!(session.step(&[])?, Step::Done));
//! // Debug output never shows the password.
//! assert!(!format!("{mech:?}").contains("alice-secret"));
//! # Ok::<(), kafkit_sasl::SaslError>(())
//! ```
//!
//! Mechanisms: [`Plain`] (RFC 4616), [`Scram`] (SCRAM-SHA-256 and SCRAM-SHA-512, RFC 5802 and
//! RFC 7677), [`OAuthBearer`] (RFC 7628 with KIP-342 extensions), `AwsMskIam` (Amazon MSK IAM
//! access control, SigV4; cargo feature `aws-msk-iam`, on by default).
// docs.rs builds with `--cfg docsrs` (Cargo.toml): nightly rustdoc then marks each item behind a
// cargo feature with that feature (`doc_cfg` shows the `#[cfg]` of an item by itself).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod error;
#[cfg(feature = "aws-msk-iam")]
mod msk_iam;
mod oauthbearer;
mod plain;
mod scram;
mod secret;

pub use error::SaslError;
#[cfg(feature = "aws-msk-iam")]
pub use msk_iam::{
    AwsCredentials, AwsCredentialsProvider, AwsMskIam, DEFAULT_EXPIRY, EnvironmentCredentials,
    MSK_IAM_ACTION, MSK_IAM_SERVICE, MSK_IAM_VERSION, StaticCredentials,
};
pub use oauthbearer::{OAuthBearer, StaticToken, TokenProvider};
pub use plain::Plain;
pub use scram::{MAX_ITERATIONS, MIN_ITERATIONS, Scram, ScramHash};
pub use secret::Secret;

/// The error type credential providers return; its text goes into [`SaslError::Credentials`],
/// so it must never contain a secret.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a mechanism may need to know about the connection it authenticates.
///
/// AWS_MSK_IAM signs the broker host name; the others ignore it.
#[non_exhaustive]
#[derive(Debug, Clone)]
pub struct SaslContext {
    /// The broker's host name as dialed (not resolved), e.g. `b-1.mycluster.kafka.us-east-1.amazonaws.com`.
    pub host: String,
    /// The broker's TCP port.
    pub port: u16,
}

impl SaslContext {
    /// A context for a connection to `host:port`.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Self {
            host: host.into(),
            port,
        }
    }
}

/// A SASL mechanism: its configuration and the source of its credentials.
///
/// Implementations never print secrets in `Debug`.
pub trait Mechanism: Send + Sync + std::fmt::Debug {
    /// The name sent in SaslHandshake, e.g. `"PLAIN"`, `"SCRAM-SHA-256"`, `"AWS_MSK_IAM"`,
    /// `"OAUTHBEARER"`.
    fn name(&self) -> &'static str;

    /// Starts one authentication exchange (a fresh one for each connection and for each
    /// KIP-368 re-authentication).
    ///
    /// # Errors
    /// [`SaslError::Credentials`] when the credentials source fails (token provider, AWS
    /// credentials), [`SaslError::InvalidConfig`] when the configuration cannot be used.
    fn start(&self, ctx: &SaslContext) -> Result<Box<dyn Session>, SaslError>;
}

/// The state machine of one exchange.
pub trait Session: Send {
    /// Advances the exchange.
    ///
    /// `challenge` is the server's last message (`auth_bytes` of the last SaslAuthenticate
    /// response), empty on the first call. Returns the next client message, or
    /// [`Step::Done`] when the exchange is complete and the client sends nothing more.
    ///
    /// # Errors
    /// [`SaslError::AuthenticationFailed`] when the server's answer says the exchange failed,
    /// [`SaslError::ServerSignatureMismatch`] when a SCRAM server cannot prove it knows the
    /// password, [`SaslError::InvalidServerMessage`] for a malformed answer,
    /// [`SaslError::UnexpectedStep`] when called again after `Done` or an error.
    fn step(&mut self, challenge: &[u8]) -> Result<Step, SaslError>;
}

/// What the client does next.
///
/// `Debug` shows only the length of a message: PLAIN and OAUTHBEARER messages carry the
/// password or token.
#[non_exhaustive]
pub enum Step {
    /// Send these bytes in the next SaslAuthenticate request and call [`Session::step`] with the
    /// server's answer.
    Continue(Vec<u8>),
    /// The exchange is finished; the client sends nothing more.
    Done,
}

impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Continue(msg) => write!(f, "Continue(<{} bytes>)", msg.len()),
            Step::Done => f.write_str("Done"),
        }
    }
}

/// The example of this crate's README.md, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
