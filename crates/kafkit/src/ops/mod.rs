//! The typed operations more than one client sends, without I/O: their inputs, the request
//! builders (`<api>_request` builds the request) and the answer readers (`<api>_results` maps
//! the answer to one result per thing asked, in the caller's order), the result vocabulary
//! they share ([`ResourceResult`], [`code_result`], [`in_order`]...), and the table of the
//! versions this client sends (`versions`).
//!
//! The connection ([`crate::Conn`]), the reader, the group member, the transactional writer,
//! `transact` and the admin client all call these; none of them owns them. This floor may import only `crate::error`,
//! `crate::time` and the leaf crates (`kafkit-protocol`...): never `conn` or anything above it,
//! so the clients above share one definition of each operation.

pub(crate) mod configs;
pub mod meter;
pub(crate) mod offsets;
pub(crate) mod otel;
pub(crate) mod topics;
pub(crate) mod versions;

use std::collections::HashMap;
use std::hash::Hash;

use kafkit_protocol::ErrorCode;

use crate::error::{Error, Result};

/// The outcome for one resource of a batch admin operation: the value on success, or the error
/// for this resource alone.
///
/// The error is [`Error::Broker`] when the broker answered with an error code for this resource
/// (its `code` names it, e.g. `TOPIC_ALREADY_EXISTS`; `is_retriable` says whether trying again
/// can help), or `NETWORK_EXCEPTION` / `REQUEST_TIMED_OUT` when the broker owning this part could
/// not be reached by the deadline, or the error of the request that carried this part when it
/// went to a broker of its own (e.g. a broker config resource).
pub type ResourceResult<T> = Result<T>;

/// `Ok(())` for `NONE`, else [`Error::Broker`] carrying `code` and the broker's message (an empty
/// message counts as none).
pub(crate) fn code_result(
    operation: &'static str,
    code: ErrorCode,
    message: Option<String>,
) -> ResourceResult<()> {
    if code.is_ok() {
        Ok(())
    } else {
        Err(Error::broker(
            operation,
            code,
            message.filter(|m| !m.is_empty()),
        ))
    }
}

/// Puts `answers` (keyed results in the broker's order) into the order of `keys` (the caller's
/// order). A key the broker did not answer gets [`Error::Protocol`] naming `operation`; answers
/// for keys not asked are dropped. `keys` must be distinct (see [`check_distinct`]).
pub(crate) fn in_order<K, T>(
    operation: &'static str,
    keys: Vec<K>,
    answers: impl IntoIterator<Item = (K, ResourceResult<T>)>,
) -> Vec<(K, ResourceResult<T>)>
where
    K: Eq + Hash + std::fmt::Debug,
{
    let mut by_key: HashMap<K, ResourceResult<T>> = HashMap::new();
    for (k, r) in answers {
        by_key.entry(k).or_insert(r);
    }
    keys.into_iter()
        .map(|k| {
            let r = by_key.remove(&k).unwrap_or_else(|| {
                Err(Error::Protocol(format!(
                    "the {operation} response has no result for {k:?}"
                )))
            });
            (k, r)
        })
        .collect()
}

/// [`Error::InvalidArgument`] when `keys` is empty or names a resource twice (brokers reject
/// such batches as a whole with `INVALID_REQUEST`).
pub(crate) fn check_distinct<K: Eq + Hash + std::fmt::Debug>(what: &str, keys: &[K]) -> Result<()> {
    if keys.is_empty() {
        return Err(Error::InvalidArgument(format!("no {what} given")));
    }
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    for k in keys {
        if !seen.insert(k) {
            return Err(Error::InvalidArgument(format!("{what} {k:?} given twice")));
        }
    }
    Ok(())
}

/// `n` copies of `e`, for the resources of one request that failed as a whole (e.g. the one
/// broker it went to was down). Variants that cannot be copied exactly keep their message and
/// whether they are retriable.
pub(crate) fn error_for_each(e: Error, n: usize) -> Vec<Error> {
    let mut out: Vec<Error> = (1..n).map(|_| copy_error(&e)).collect();
    if n > 0 {
        out.insert(0, e);
    }
    out
}

fn copy_error(e: &Error) -> Error {
    match e {
        Error::Timeout { operation, timeout } => Error::Timeout {
            operation,
            timeout: *timeout,
        },
        Error::ConnectTimeout { addr, timeout } => Error::ConnectTimeout {
            addr: addr.clone(),
            timeout: *timeout,
        },
        Error::UnsupportedVersion { api, ours, broker } => Error::UnsupportedVersion {
            api: *api,
            ours: *ours,
            broker: *broker,
        },
        Error::Broker {
            operation,
            code,
            message,
        } => Error::broker(operation, *code, message.clone()),
        Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
        Error::NotSent {
            operation,
            code,
            reason,
        } => Error::NotSent {
            operation,
            code: *code,
            reason: reason.clone(),
        },
        Error::Protocol(m) => Error::Protocol(m.clone()),
        other if other.is_retriable() => Error::Io(std::io::Error::other(other.to_string())),
        other => Error::Protocol(other.to_string()),
    }
}

/// Defines a `#[non_exhaustive]` enum of Kafka wire codes with `code()` and `from_code()`.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident : $repr:ty {
            $( $(#[$vmeta:meta])* $variant:ident = $code:expr ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// The value sent on the wire.
            pub fn code(self) -> $repr {
                match self {
                    $( $name::$variant => $code ),+
                }
            }

            /// The variant for the wire value `code`, `None` for a value this library does not
            /// know.
            pub fn from_code(code: $repr) -> Option<Self> {
                match code {
                    $( c if c == $code => Some($name::$variant), )+
                    _ => None,
                }
            }
        }
    };
}
pub(crate) use wire_enum;

/// [`Error::Protocol`]: the `operation` answer has no result for `what`.
pub(crate) fn missing(operation: &str, what: impl std::fmt::Debug) -> Error {
    Error::Protocol(format!(
        "the {operation} response has no result for {what:?}"
    ))
}

/// [`Error::UnsupportedVersion`] for `R` when a feature needs version `need` and the broker
/// speaks at most `have`.
pub(crate) fn unsupported_from<R: kafkit_protocol::Request>(need: i16, have: i16) -> Error {
    Error::UnsupportedVersion {
        api: R::API_KEY,
        ours: kafkit_protocol::VersionRange::new(need, versions::client_max_for::<R>()),
        broker: Some(kafkit_protocol::VersionRange::new(R::VERSIONS.min, have)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_result_keeps_code_and_message() {
        assert!(code_result("CreateTopics", ErrorCode::NONE, Some("ignored".into())).is_ok());
        let err = code_result(
            "CreateTopics",
            ErrorCode::TOPIC_ALREADY_EXISTS,
            Some("exists".into()),
        )
        .unwrap_err();
        assert_eq!(err.error_code(), Some(ErrorCode::TOPIC_ALREADY_EXISTS));
        assert!(err.to_string().contains("exists"), "{err}");
        let err = code_result(
            "CreateTopics",
            ErrorCode::TOPIC_ALREADY_EXISTS,
            Some(String::new()),
        )
        .unwrap_err();
        assert!(matches!(err, Error::Broker { message: None, .. }));
    }

    #[test]
    fn in_order_follows_the_caller_and_flags_missing_answers() {
        let answers = vec![
            ("b".to_owned(), Ok(2)),
            ("zzz".to_owned(), Ok(9)),
            ("a".to_owned(), Ok(1)),
        ];
        let out = in_order(
            "Test",
            vec!["a".to_owned(), "b".into(), "c".into()],
            answers,
        );
        let keys: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, vec!["a", "b", "c"]);
        assert_eq!(*out[0].1.as_ref().unwrap(), 1);
        assert_eq!(*out[1].1.as_ref().unwrap(), 2);
        match &out[2].1 {
            Err(Error::Protocol(m)) => assert!(m.contains("Test") && m.contains("\"c\""), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn check_distinct_refuses_empty_and_repeated_keys() {
        assert!(check_distinct("topic", &["a", "b"]).is_ok());
        assert!(matches!(
            check_distinct::<&str>("topic", &[]),
            Err(Error::InvalidArgument(_))
        ));
        let err = check_distinct("topic", &["a", "b", "a"]).unwrap_err();
        assert!(err.to_string().contains("\"a\" given twice"), "{err}");
    }

    #[test]
    fn error_for_each_keeps_kind_and_retriability() {
        let copies = error_for_each(
            Error::broker("X", ErrorCode::NOT_CONTROLLER, Some("m".into())),
            3,
        );
        assert_eq!(copies.len(), 3);
        assert!(
            copies
                .iter()
                .all(|e| e.error_code() == Some(ErrorCode::NOT_CONTROLLER) && e.is_retriable())
        );
        let io = error_for_each(Error::Io(std::io::Error::other("reset")), 2);
        assert!(io.iter().all(Error::is_retriable));
        assert!(io[1].to_string().contains("reset"));
        let bad = error_for_each(
            Error::Sasl {
                addr: "h:1".into(),
                mechanism: "PLAIN".into(),
                code: None,
                message: "bad".into(),
            },
            2,
        );
        assert!(bad.iter().all(|e| !e.is_retriable()));
        assert!(error_for_each(Error::Protocol("x".into()), 0).is_empty());
    }
}
