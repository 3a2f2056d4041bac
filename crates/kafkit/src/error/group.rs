//! [`GroupError`]: what a group member reports, inside [`crate::Error::Group`].

use std::time::Duration;

use kafkit_protocol::{ApiKey, ErrorCode};

/// Why a [`crate::GroupReader`] (a consumer group member) could not go on, or what it must
/// tell the application. Carried by [`crate::Error::Group`].
///
/// Most group errors never reach the application: coordinator moves, loading coordinators,
/// rebalances, expired generations and lost connections are handled inside (the member finds
/// the coordinator again, rejoins, and reports lost partitions through the rebalance events).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum GroupError {
    /// Another member with the same `group_instance_id` joined (static membership, KIP-345):
    /// this member was fenced (`FENCED_INSTANCE_ID`) and stopped; it does not rejoin (Java
    /// `FencedInstanceIdException`, fatal in librdkafka too).
    #[error(
        "group {group_id}: fenced: another member joined with group_instance_id {group_instance_id:?}"
    )]
    FencedInstanceId {
        /// The group.
        group_id: String,
        /// The instance id both members use.
        group_instance_id: String,
    },
    /// The application did not poll (the `Stream` or `next_batch`) for longer than
    /// `max_poll_interval`: the member left the group, its partitions were reported lost and
    /// it rejoins now that the application polls again (Java's "poll timeout has expired",
    /// librdkafka `MAX_POLL_EXCEEDED`). Reported once, on the first poll after.
    #[error(
        "group {group_id}: the application did not poll for more than max_poll_interval ({max_poll_interval:?}): the member left the group and rejoins"
    )]
    MaxPollIntervalExceeded {
        /// The group.
        group_id: String,
        /// The configured `max_poll_interval`.
        max_poll_interval: Duration,
    },
    /// `group_protocol = consumer` (KIP-848) but the coordinator does not offer `api`
    /// (ConsumerGroupHeartbeat): the member falls back to the classic protocol and goes on.
    /// Reported once.
    #[error(
        "group {group_id}: the coordinator does not offer {api:?} (KIP-848 group_protocol = consumer); falling back to the classic protocol"
    )]
    ProtocolFallback {
        /// The group.
        group_id: String,
        /// The API the coordinator lacks.
        api: ApiKey,
    },
    /// A commit was refused for the member's generation or epoch (`ILLEGAL_GENERATION`,
    /// `UNKNOWN_MEMBER_ID`, `STALE_MEMBER_EPOCH`, `FENCED_INSTANCE_ID`), or its partitions
    /// were revoked before it could be retried after a rebalance (`REBALANCE_IN_PROGRESS`).
    /// The positions are kept: the next commit carries them (Java `CommitFailedException`;
    /// with `REBALANCE_IN_PROGRESS` Java's `RebalanceInProgressException`, retriable).
    #[error("group {group_id}: commit failed: {code}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    CommitFailed {
        /// The group.
        group_id: String,
        /// The error code of the first partition (or of the request) that failed.
        code: ErrorCode,
        /// Why, when known.
        message: Option<String>,
    },
    /// The coordinator refused the member for a reason no retry fixes
    /// (`GROUP_AUTHORIZATION_FAILED`, `INCONSISTENT_GROUP_PROTOCOL`, `INVALID_SESSION_TIMEOUT`,
    /// `GROUP_MAX_SIZE_REACHED`, `UNSUPPORTED_ASSIGNOR`, `UNRELEASED_INSTANCE_ID`...): the member
    /// stopped.
    #[error("group {group_id}: {operation} failed: {code}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Fatal {
        /// The group.
        group_id: String,
        /// The request that failed (`JoinGroup`, `ConsumerGroupHeartbeat`...).
        operation: &'static str,
        /// Its error code.
        code: ErrorCode,
        /// The broker's message, if any.
        message: Option<String>,
    },
    /// The coordinator refused the member's topic pattern (`INVALID_REGULAR_EXPRESSION`,
    /// KIP-848's server-side subscription: ConsumerGroupHeartbeat v1 with a pattern that is not
    /// a valid RE2/J expression). The member stopped (Java `InvalidRegularExpression`, thrown
    /// from `poll`, fatal).
    #[error("group {group_id}: invalid regular expression {pattern:?}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    InvalidRegularExpression {
        /// The group.
        group_id: String,
        /// The pattern subscribed to.
        pattern: String,
        /// The coordinator's message, if any.
        message: Option<String>,
    },
    /// The call names a partition the member does not own now ([`crate::GroupReader::seek`],
    /// `pause`, `resume`, `store_offset`): Java's `IllegalStateException` "No current
    /// assignment for partition", librdkafka's `RD_KAFKA_RESP_ERR__STATE` /
    /// `__UNKNOWN_PARTITION`. Nothing was changed. A rebalance may have taken it since the
    /// application last looked: [`crate::GroupReader::assignment`] says what is owned.
    #[error("group {group_id}: {topic}/{partition} is not assigned to this member")]
    PartitionNotAssigned {
        /// The group.
        group_id: String,
        /// The topic named.
        topic: String,
        /// The partition named.
        partition: i32,
    },
    /// The member was closed ([`crate::GroupReader::close`]) or its task ended.
    #[error("the group member is closed")]
    Closed,
}

impl GroupError {
    /// Whether the same call can succeed later: `MaxPollIntervalExceeded` (the member rejoins),
    /// `ProtocolFallback` (the member goes on with the classic protocol), and a commit refused
    /// with `REBALANCE_IN_PROGRESS`. The others are final.
    pub fn is_retriable(&self) -> bool {
        match self {
            GroupError::MaxPollIntervalExceeded { .. } | GroupError::ProtocolFallback { .. } => {
                true
            }
            GroupError::CommitFailed { code, .. } => *code == ErrorCode::REBALANCE_IN_PROGRESS,
            GroupError::FencedInstanceId { .. }
            | GroupError::Fatal { .. }
            | GroupError::InvalidRegularExpression { .. }
            | GroupError::PartitionNotAssigned { .. }
            | GroupError::Closed => false,
        }
    }

    /// The Kafka error code behind the error, if any (`FENCED_INSTANCE_ID`, the commit's or
    /// the refusal's code; `UNSUPPORTED_VERSION` for a protocol fallback).
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            GroupError::FencedInstanceId { .. } => Some(ErrorCode::FENCED_INSTANCE_ID),
            GroupError::CommitFailed { code, .. } | GroupError::Fatal { code, .. } => Some(*code),
            GroupError::ProtocolFallback { .. } => Some(ErrorCode::UNSUPPORTED_VERSION),
            GroupError::InvalidRegularExpression { .. } => {
                Some(ErrorCode::INVALID_REGULAR_EXPRESSION)
            }
            GroupError::MaxPollIntervalExceeded { .. }
            | GroupError::PartitionNotAssigned { .. }
            | GroupError::Closed => None,
        }
    }
}

impl From<GroupError> for super::Error {
    fn from(e: GroupError) -> Self {
        super::Error::Group(e)
    }
}
