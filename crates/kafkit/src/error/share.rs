//! [`ShareError`]: what a share group member reports, inside [`crate::Error::Share`].

use std::time::Duration;

use kafkit_protocol::ErrorCode;

/// Why a [`crate::ShareReader`] (a share group member, KIP-932) refused a call or could not go
/// on. Carried by [`crate::Error::Share`].
///
/// Most share group errors never reach the application: coordinator moves, loading
/// coordinators, fenced member epochs, lost share sessions and leader moves are handled inside
/// (the member joins again, the session is opened again, the partition is fetched from its new
/// leader). Acknowledgements the broker refuses are reported per partition, not as a
/// `ShareError` ([`crate::AcknowledgementCommit`]).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ShareError {
    /// `acknowledgement_mode` is explicit and records the last poll handed out are still
    /// unacknowledged: acknowledge each of them before polling again (Java's
    /// `IllegalStateException` from `KafkaShareConsumer.poll`). Nothing was fetched.
    #[error(
        "group {group_id}: {count} record(s) of the last poll are not acknowledged (share.acknowledgement.mode=explicit): acknowledge each before polling again"
    )]
    UnacknowledgedRecords {
        /// The group.
        group_id: String,
        /// How many delivered records are unacknowledged.
        count: usize,
    },
    /// The record cannot be acknowledged: it was not handed out by this reader, its
    /// acknowledgement was already sent, or (`AcknowledgeType::Renew`) it is not acquired any
    /// more. Nothing was changed (Java's `IllegalStateException` from `acknowledge`).
    #[error("group {group_id}: {topic}/{partition} offset {offset} cannot be acknowledged: {why}")]
    NotAcknowledgeable {
        /// The group.
        group_id: String,
        /// The record's topic.
        topic: String,
        /// The record's partition.
        partition: i32,
        /// The record's offset.
        offset: i64,
        /// Why, in words.
        why: &'static str,
    },
    /// `acknowledge` was called with `acknowledgement_mode` implicit, where each poll accepts
    /// what the one before it handed out (Java's `IllegalStateException`). Use
    /// `AcknowledgementMode::Explicit` to acknowledge records one by one.
    #[error("group {group_id}: acknowledge needs share.acknowledgement.mode=explicit")]
    ImplicitMode {
        /// The group.
        group_id: String,
    },
    /// The application did not poll for longer than `max_poll_interval`: the member left the
    /// group (its acquired records go back to the others when their locks run out) and joins
    /// again now that the application polls. Reported once, on the first poll after.
    #[error(
        "group {group_id}: the application did not poll for more than max_poll_interval ({max_poll_interval:?}): the member left the group and joins again"
    )]
    MaxPollIntervalExceeded {
        /// The group.
        group_id: String,
        /// The configured `max_poll_interval`.
        max_poll_interval: Duration,
    },
    /// The coordinator refused the member for a reason no retry fixes
    /// (`GROUP_AUTHORIZATION_FAILED`, `TOPIC_AUTHORIZATION_FAILED`, `GROUP_MAX_SIZE_REACHED`,
    /// `INVALID_REQUEST`, `GROUP_ID_NOT_FOUND` for a group of another type...), or a broker
    /// refused the share session for good (`SHARE_SESSION_LIMIT_REACHED` after retries): the
    /// member stopped.
    #[error("group {group_id}: {operation} failed: {code}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Fatal {
        /// The group.
        group_id: String,
        /// The request that failed (`ShareGroupHeartbeat`, `ShareFetch`...).
        operation: &'static str,
        /// Its error code.
        code: ErrorCode,
        /// The broker's message, if any.
        message: Option<String>,
    },
    /// The reader was closed or its member task ended.
    #[error("the share group member is closed")]
    Closed,
}

impl ShareError {
    /// Whether the same call can succeed later: `MaxPollIntervalExceeded` (the member joins
    /// again) and `UnacknowledgedRecords` (after the records are acknowledged). The others are
    /// final.
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            ShareError::MaxPollIntervalExceeded { .. } | ShareError::UnacknowledgedRecords { .. }
        )
    }

    /// The Kafka error code behind the error, if any (the refusal's code).
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            ShareError::Fatal { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl From<ShareError> for super::Error {
    fn from(e: ShareError) -> Self {
        super::Error::Share(e)
    }
}
