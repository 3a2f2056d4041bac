//! The admin client: typed cluster administration over a [`crate::Transport`], with the Java
//! Admin client's operation names in snake_case (`create_topics`, `describe_configs`,
//! `describe_acls`...).
//!
//! One module per operation family, so missing coverage shows in the file list:
//!
//! | module            | operations |
//! |-------------------|------------|
//! | `topics`          | create/delete/list/describe topics, create partitions |
//! | `configs`         | describe configs, alter configs (legacy), incremental alter configs |
//! | `acls`            | describe/create/delete ACLs |
//! | `quotas`          | describe/alter client quotas |
//! | `scram`           | describe/alter user SCRAM credentials |
//! | `reassignments`   | list/alter partition reassignments |
//! | `cluster`         | describe cluster, describe/update features, describe log dirs, elect leaders |
//! | `groups`          | consumer groups, their offsets and lag |
//! | `offsets`         | list offsets, delete records |
//! | `producers`       | describe producers |
//! | `transactions`    | describe/list transactions |
//!
//! # Results
//!
//! Every batch operation answers per resource (topic, config resource, ACL filter, user...), in
//! the caller's order: a [`ResourceResult`] for each, so one failing resource never hides the
//! others' outcome. The operation itself returns `Err` only when nothing could be answered (no
//! broker reachable before the deadline, an API the broker does not offer:
//! [`Error::UnsupportedVersion`] naming the API, invalid arguments).

mod acls;
mod cluster;
mod configs;
mod quotas;
mod reassignments;
mod scram;
mod topics;

use kafka_protocol::ErrorCode;

use crate::error::{Error, Result};

/// The outcome for one resource of a batch admin operation: the value on success, or the error
/// for this resource alone.
///
/// The error is [`Error::Broker`] when the broker answered with an error code for this resource
/// (its `code` names it, e.g. `TOPIC_ALREADY_EXISTS`; `is_retriable` says whether trying again
/// can help), or `NETWORK_EXCEPTION` / `REQUEST_TIMED_OUT` when the broker owning this part could
/// not be reached by the deadline.
pub type ResourceResult<T> = Result<T>;

/// `Ok(())` for `NONE`, else [`Error::Broker`] carrying `code` and the broker's message (an empty
/// message counts as none).
#[allow(dead_code)] // used by the operation modules as they land
pub(crate) fn code_result(
    operation: &'static str,
    code: i16,
    message: Option<String>,
) -> ResourceResult<()> {
    let code = ErrorCode(code);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_result_keeps_code_and_message() {
        assert!(code_result("CreateTopics", 0, Some("ignored".into())).is_ok());
        let err = code_result("CreateTopics", 36, Some("exists".into())).unwrap_err();
        assert_eq!(err.error_code(), Some(ErrorCode::TOPIC_ALREADY_EXISTS));
        assert!(err.to_string().contains("exists"), "{err}");
        let err = code_result("CreateTopics", 36, Some(String::new())).unwrap_err();
        assert!(matches!(err, Error::Broker { message: None, .. }));
    }
}
