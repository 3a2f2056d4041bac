//! The error type of every mechanism. No variant ever carries a secret.

/// Why an exchange failed. Messages never contain passwords, tokens or keys.
#[derive(thiserror::Error, Debug)]
#[non_exhaustive]
pub enum SaslError {
    /// The server rejected the credentials (Kafka's `SASL_AUTHENTICATION_FAILED`, or an error
    /// carried in the mechanism's own answer, such as SCRAM `e=` or the OAUTHBEARER error JSON).
    /// Not retriable with the same credentials.
    #[error("{mechanism}: authentication failed: {reason}")]
    AuthenticationFailed {
        /// The mechanism name.
        mechanism: &'static str,
        /// What the server said (never a secret).
        reason: String,
    },
    /// A SCRAM server sent a signature that does not match the one derived from the password:
    /// it cannot prove it knows the credentials, so the client must not trust it (RFC 5802 §3).
    /// Not retriable.
    #[error("{mechanism}: the server signature does not match; the server is not trusted")]
    ServerSignatureMismatch {
        /// The mechanism name.
        mechanism: &'static str,
    },
    /// The server's message does not follow the mechanism's grammar. Not retriable.
    #[error("{mechanism}: invalid server message: {reason}")]
    InvalidServerMessage {
        /// The mechanism name.
        mechanism: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The credentials source failed (token provider, AWS credentials provider, environment).
    /// Retriable: a later attempt may get credentials.
    #[error("{mechanism}: could not get credentials: {reason}")]
    Credentials {
        /// The mechanism name.
        mechanism: &'static str,
        /// Why (never the secret itself).
        reason: String,
    },
    /// The configuration cannot be used, e.g. a user name that SASLprep prohibits or that
    /// contains a NUL byte. Not retriable.
    #[error("{mechanism}: invalid configuration: {reason}")]
    InvalidConfig {
        /// The mechanism name.
        mechanism: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// [`crate::Session::step`] was called after the exchange had finished or failed.
    #[error("{mechanism}: step called after the exchange finished")]
    UnexpectedStep {
        /// The mechanism name.
        mechanism: &'static str,
    },
}

impl SaslError {
    /// Whether trying again (a new exchange, maybe on a new connection) can help.
    pub fn is_retriable(&self) -> bool {
        matches!(self, SaslError::Credentials { .. })
    }
}
