//! [`ReaderError`]: what the Reader reports for one partition (or for itself), inside
//! [`crate::Error::Reader`].

use kafkit_protocol::{ErrorCode, Uuid};

use super::Error;

/// A partition the Reader stopped fetching, and why; or the Reader itself closed. Carried by
/// [`Error::Reader`]. After a partition error the other partitions keep flowing; the failed one
/// is fetched again after [`crate::Reader::seek`] (or a new `assign`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReaderError {
    /// The position is outside the log (`OFFSET_OUT_OF_RANGE`) and `auto_offset_reset` is
    /// `None`. The offsets the broker reported tell where the log is.
    #[error(
        "{topic}/{partition}: offset {offset} is out of range (log start {log_start_offset}, high watermark {high_watermark}) and auto_offset_reset is none"
    )]
    OffsetOutOfRange {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The offset that was fetched.
        offset: i64,
        /// The log start offset in the answer (-1 when unknown).
        log_start_offset: i64,
        /// The high watermark in the answer (-1 when unknown).
        high_watermark: i64,
    },
    /// The log was truncated below the position (an unclean leader election, KIP-320): the
    /// records in `end_offset..offset` that this consumer saw are gone (Java
    /// `LogTruncationException`). Reported when `auto_offset_reset` is `None`; otherwise the
    /// Reader continues at `end_offset` (or resets when no diverging offset is known).
    #[error(
        "{topic}/{partition}: log truncation detected at offset {offset} (last fetched epoch {last_epoch:?}); the leader's log ends at {end_offset:?} in epoch {diverging_epoch:?}"
    )]
    LogTruncation {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The position that was validated.
        offset: i64,
        /// The leader epoch of the last record read before it.
        last_epoch: Option<i32>,
        /// The largest epoch the leader has at or below `last_epoch`, `None` when it has none.
        diverging_epoch: Option<i32>,
        /// Where that epoch ends on the leader: the lost range is `end_offset..offset`; `None`
        /// when the leader knows no such epoch.
        end_offset: Option<i64>,
    },
    /// The topic was deleted and created again (its topic id changed, KIP-516) and
    /// `auto_offset_reset` is `None`.
    #[error("topic {topic} was re-created (topic id {old_id} is now {new_id})")]
    TopicRecreated {
        /// The topic.
        topic: String,
        /// The id the Reader knew.
        old_id: Uuid,
        /// The id it has now.
        new_id: Uuid,
    },
    /// A batch is larger than `max_partition_fetch_bytes` and the broker returned only part of
    /// it (brokers before KIP-74 do so): raise the limit (Java `RecordTooLargeException`).
    #[error(
        "{topic}/{partition}: the batch at offset {offset} is larger than max_partition_fetch_bytes ({max_partition_fetch_bytes})"
    )]
    RecordTooLarge {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The offset of the batch.
        offset: i64,
        /// The limit, in bytes.
        max_partition_fetch_bytes: i32,
    },
    /// A partition failed for a reason no retry fixes: a broker error code for it
    /// (`TOPIC_AUTHORIZATION_FAILED`, `CORRUPT_MESSAGE`...), or a batch that does not decode
    /// (a CRC mismatch, a codec this build lacks, a batch over `max_batch_decompressed_bytes`).
    /// The records before the bad batch were delivered; the position is at the bad batch.
    #[error("{topic}/{partition} at offset {offset}: {source}")]
    Partition {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The position the failure is at.
        offset: i64,
        /// Why ([`Error::Broker`] with the code, [`Error::Records`] for a bad batch).
        #[source]
        source: Box<Error>,
    },
    /// A Fetch request to a broker failed for a reason a retry does not fix (e.g. a response
    /// larger than the dialer's `max_response_size`). The Reader keeps retrying after the
    /// backoff, and reports it once: not again after each retry, only after that broker has
    /// answered a Fetch since (a change from answering to failing).
    #[error("Fetch to broker {node} failed: {source}")]
    Fetch {
        /// The broker's node id.
        node: i32,
        /// The cause.
        #[source]
        source: Box<Error>,
    },
    /// A group member's partition has no committed offset to start from and
    /// `auto_offset_reset` is `None` (Java `NoOffsetForPartitionException`). The partition is
    /// not fetched until the application seeks it.
    #[error("{topic}/{partition} has no committed offset and auto_offset_reset is none")]
    NoOffsetForPartition {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
    },
    /// The Reader was closed.
    #[error("the reader is closed")]
    Closed,
}

impl ReaderError {
    /// The topic and partition this error is about, `None` for reader-wide errors.
    pub fn topic_partition(&self) -> Option<(&str, i32)> {
        match self {
            ReaderError::OffsetOutOfRange {
                topic, partition, ..
            }
            | ReaderError::LogTruncation {
                topic, partition, ..
            }
            | ReaderError::RecordTooLarge {
                topic, partition, ..
            }
            | ReaderError::Partition {
                topic, partition, ..
            }
            | ReaderError::NoOffsetForPartition { topic, partition } => Some((topic, *partition)),
            ReaderError::TopicRecreated { .. }
            | ReaderError::Fetch { .. }
            | ReaderError::Closed => None,
        }
    }

    /// The Kafka error code behind it, if any (`OFFSET_OUT_OF_RANGE`, `MESSAGE_TOO_LARGE`, the
    /// wrapped error's).
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            ReaderError::OffsetOutOfRange { .. } => Some(ErrorCode::OFFSET_OUT_OF_RANGE),
            ReaderError::RecordTooLarge { .. } => Some(ErrorCode::MESSAGE_TOO_LARGE),
            ReaderError::Partition { source, .. } | ReaderError::Fetch { source, .. } => {
                source.error_code()
            }
            ReaderError::LogTruncation { .. }
            | ReaderError::TopicRecreated { .. }
            | ReaderError::NoOffsetForPartition { .. }
            | ReaderError::Closed => None,
        }
    }

    /// Whether the same read can succeed later without the application doing anything: only
    /// [`ReaderError::Fetch`] with a retriable cause (the Reader retries it itself).
    pub fn is_retriable(&self) -> bool {
        matches!(self, ReaderError::Fetch { source, .. } if source.is_retriable())
    }
}

impl From<ReaderError> for Error {
    fn from(e: ReaderError) -> Self {
        Error::Reader(e)
    }
}
