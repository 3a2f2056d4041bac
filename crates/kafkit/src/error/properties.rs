//! [`PropertyError`]: why a list of Java / librdkafka style settings
//! ([`Properties`](crate::Properties)) could not configure a builder. Imports only std and
//! external crates, like the rest of `error/`.

use std::io;
use std::sync::Arc;

/// Why [`Properties`](crate::Properties) could not configure a builder.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PropertyError {
    /// An assignment was not `name=value` (e.g. a `-X` argument without `=`).
    #[error("expected name=value, got {0:?}")]
    Malformed(String),
    /// No row of the table has this name.
    #[error("unknown property {name:?}{}", suggestion.map(|s| format!(" (did you mean {s:?}?)")).unwrap_or_default())]
    Unknown {
        /// The name as given.
        name: String,
        /// The closest known name, when one is close (a typo).
        suggestion: Option<&'static str>,
    },
    /// A Java / librdkafka name kafkit knows but does not implement.
    #[error("property {name:?} is not supported: {reason}")]
    Unsupported {
        /// The name as given.
        name: String,
        /// Why, or what to use instead.
        reason: &'static str,
    },
    /// The value does not parse as the name's kind.
    #[error("invalid value {value} for {name}: expected {expected}")]
    InvalidValue {
        /// The name as given.
        name: String,
        /// The value, quoted, or `<redacted>` for secret names.
        value: String,
        /// What the name takes.
        expected: String,
    },
    /// Another property needed by this one is missing.
    #[error("{name} needs {needs}")]
    Missing {
        /// The property that cannot work alone (or the builder's required one).
        name: &'static str,
        /// What is missing.
        needs: &'static str,
    },
    /// Two properties contradict each other.
    #[error("{name} conflicts with {other}: {reason}")]
    Conflict {
        /// One property.
        name: &'static str,
        /// The other.
        other: &'static str,
        /// Why they cannot go together.
        reason: &'static str,
    },
    /// A file named by a property could not be read.
    #[error("{name}: cannot read {path}: {source}")]
    File {
        /// The property.
        name: &'static str,
        /// The path as given.
        path: String,
        /// The I/O error.
        source: Arc<io::Error>,
    },
    /// The TLS settings were read but rustls refused them (bad PEM, key not matching).
    #[error("TLS settings: {0}")]
    Tls(String),
}
