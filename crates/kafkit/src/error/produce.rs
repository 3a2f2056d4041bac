//! Errors of the [`Writer`](crate::Writer): per record, per call, of its configuration and of
//! its transactions, with [`RecordMetadata`] (what a written record's `Ok` carries, inside
//! [`WriteErrors`]) and [`TransactionPhase`] (carried by [`TransactionError::InvalidState`]).
//! Like the rest of `error/`, this module imports only std, the leaf crates, external crates and
//! its siblings: the writer above it re-exports these types.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use kafkit_balancer::BalanceError;
use kafkit_protocol::ErrorCode;

use super::{Error, ErrorCategory};

/// Why one record could not be written (or a [`Writer`](crate::Writer) call could not be
/// served).
///
/// Every record handed to the writer ends in exactly one `Ok(RecordMetadata)` or one of these,
/// delivered through its [`DeliveryFuture`](crate::DeliveryFuture) (and the `on_completion`
/// callback). [`ProduceError::is_retriable`] says whether sending the record again later can
/// succeed; [`ProduceError::error_code`] gives the Kafka error code when there is one.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ProduceError {
    /// `try_send` found the buffer full (`buffer_memory` bytes or `max_buffered_records`
    /// records). Retriable: space frees up as records are acknowledged.
    #[error(
        "the writer's buffer is full ({buffered_records} records, {buffered_bytes} bytes buffered)"
    )]
    QueueFull {
        /// Records buffered (not yet acknowledged or failed) when the call was refused.
        buffered_records: usize,
        /// Bytes buffered when the call was refused.
        buffered_bytes: usize,
    },
    /// The writer was closed ([`Writer::close`](crate::Writer::close), or its last handle was
    /// dropped, or its runtime shut down) before the record could be acknowledged, or before
    /// it was taken (the text says which); whether the broker has a record that had been sent
    /// is unknown. Not retriable on this writer.
    #[error("the writer is closed: {0}")]
    Closed(&'static str),
    /// The record itself is invalid (e.g. a negative timestamp, which the Java client refuses
    /// too); it was not taken. Not retriable.
    #[error("invalid record: {0}")]
    InvalidRecord(String),
    /// The record names no topic and the writer has no default `topic`. Not retriable.
    #[error("the record names no topic and the writer has no default topic")]
    NoTopic,
    /// [`Writer::send_detached`](crate::Writer::send_detached) on a writer built without
    /// `on_completion`: the record's outcome would reach no one, so it was not taken. Not
    /// retriable (use `send`, or build the writer with a callback).
    #[error(
        "send_detached needs a writer built with on_completion (the outcome would be seen nowhere)"
    )]
    NoCompletionCallback,
    /// The record's encoded size (compressed when the writer compresses) is above the limit:
    /// `batch_size` (the largest record batch this writer sends, which the broker's
    /// `max.message.bytes` must accept). Kafka's `MESSAGE_TOO_LARGE`. Not retriable. Only that
    /// record fails; others of the same call are written.
    #[error("record of {size} bytes is larger than the {max} bytes allowed (MESSAGE_TOO_LARGE)")]
    RecordTooLarge {
        /// The record's size in bytes, as a batch of its own (compressed when applicable), or
        /// uncompressed when the limit is `buffer_memory` (the buffer is charged uncompressed).
        size: usize,
        /// The limit in bytes: `batch_size`, or `buffer_memory` for a record that would fit a
        /// batch once compressed but not the buffer.
        max: usize,
    },
    /// No partition could be chosen: the balancer refused, or the record's explicit partition is
    /// not one of the topic's partitions (`UNKNOWN_TOPIC_OR_PARTITION`).
    #[error("cannot choose a partition: {0}")]
    Partition(#[from] BalanceError),
    /// The record's topic name is not a legal Kafka topic name (1 to 249 characters of
    /// `[a-zA-Z0-9._-]`, not `.` or `..`; Kafka's `Topic.validate`), checked before anything is
    /// sent. Kafka's `INVALID_TOPIC_EXCEPTION`. Not retriable; the record was not taken.
    #[error(
        "invalid topic name {topic:?}: a topic name is 1 to 249 characters of [a-zA-Z0-9._-], \
         not \".\" or \"..\" (INVALID_TOPIC_EXCEPTION); the record was not sent"
    )]
    InvalidTopic {
        /// The name given.
        topic: String,
    },
    /// The cluster's metadata has no usable entry for the record's topic: the Metadata answer
    /// carried the topic error `code` (e.g. `UNKNOWN_TOPIC_OR_PARTITION` for a topic that does
    /// not exist and is not created, `TOPIC_AUTHORIZATION_FAILED`). The record was not sent.
    /// Retriable exactly when the code is; it is also the cause of a
    /// [`ProduceError::BlockTimeout`].
    #[error("no usable metadata for topic {topic:?}: {code}; the record was not sent")]
    TopicMetadata {
        /// The record's topic.
        topic: String,
        /// The topic's error code in the last Metadata answer.
        code: ErrorCode,
    },
    /// [`Writer::try_send`](crate::Writer::try_send) found the topic's metadata not known yet:
    /// its lookup runs in the background, and a later call can succeed. The record was not
    /// taken. Retriable; [`ProduceError::error_code`] gives `LEADER_NOT_AVAILABLE`, what Kafka
    /// answers for a topic whose partitions are not ready yet.
    #[error(
        "the metadata of topic {topic:?} is being fetched; try again (the record was not taken)"
    )]
    MetadataPending {
        /// The record's topic.
        topic: String,
    },
    /// The broker rejected the record's batch with an error that retrying does not fix (e.g.
    /// `TOPIC_AUTHORIZATION_FAILED`, `INVALID_RECORD`, `MESSAGE_TOO_LARGE`,
    /// `UNKNOWN_TOPIC_OR_PARTITION` after the delivery timeout), or with a retriable one the
    /// writer does not retry. `record_error` carries the broker's message for this very record
    /// (Produce v8+, KIP-467) when it named it; a record of a rejected batch that the broker did
    /// not name fails with `record_error: None`.
    #[error("broker refused the records: {code}{}{}",
        message.as_deref().map(|m| format!(": {m}")).unwrap_or_default(),
        record_error.as_deref().map(|m| format!(" (this record: {m})")).unwrap_or_default())]
    Broker {
        /// The partition's error code from the Produce response (never a local check nor a
        /// Metadata answer: those are [`ProduceError::InvalidTopic`] and
        /// [`ProduceError::TopicMetadata`]).
        code: ErrorCode,
        /// The broker's message for the batch, when it sent one.
        message: Option<String>,
        /// The broker's message for this record (KIP-467), when the broker named it.
        record_error: Option<String>,
    },
    /// The record was not acknowledged within `delivery_timeout` (Java: `delivery.timeout.ms`,
    /// KIP-91). `cause` is the last error seen while retrying, when there was one; when the
    /// record had been sent, the broker may or may not have it. Retriable (as a new record).
    #[error("record not acknowledged within the delivery timeout of {timeout:?}{}",
        cause.as_ref().map(|c| format!(" (last error: {c})")).unwrap_or_default())]
    DeliveryTimeout {
        /// The delivery timeout.
        timeout: Duration,
        /// The last error met while trying, if any.
        cause: Option<Box<ProduceError>>,
    },
    /// `send` waited `max_block` (Java `max.block.ms`) and the record was still not taken: the
    /// metadata of `topic` did not come (Java: "Topic not present in metadata after N ms"), or
    /// the buffer stayed full. `cause` says why: the topic's last error code as a
    /// [`ProduceError::TopicMetadata`] (e.g. `UNKNOWN_TOPIC_OR_PARTITION` for a topic that does
    /// not exist and is not created), the last client error as [`ProduceError::Client`] (e.g.
    /// [`Error::Connect`] naming the address that refused the connection), or
    /// [`ProduceError::QueueFull`]. The record was not taken. Retriable (Java's
    /// `TimeoutException` is).
    #[error("record for topic {topic:?} not taken within max_block of {max_block:?}{}",
        cause.as_ref().map(|c| format!(" ({c})")).unwrap_or_default())]
    BlockTimeout {
        /// The record's topic.
        topic: String,
        /// The `max_block` waited.
        max_block: Duration,
        /// What was still missing at the deadline, when known.
        cause: Option<Box<ProduceError>>,
    },
    /// A client error (connection, timeout, protocol, metadata) that is the reason a record
    /// failed, e.g. as the `cause` of [`ProduceError::DeliveryTimeout`], or an unsupported
    /// Produce / InitProducerId version.
    #[error("{0}")]
    Client(Arc<Error>),
    /// A transactional writer refused the record, or failed it, because of its transaction
    /// (KIP-98): `send` outside an open transaction ([`TransactionError::InvalidState`]), after
    /// an error of the transaction ([`TransactionError::Abortable`]: abort it), or of the
    /// writer ([`TransactionError::Fatal`], e.g. fenced by a newer writer of the same
    /// transactional id). Also what a transactional call's error becomes as a
    /// [`crate::Error`]. Retriable as the inner error says.
    #[error("{0}")]
    Transaction(TransactionError),
    /// The record was not sent: its transaction was aborted
    /// ([`Writer::abort_transaction`](crate::Writer::abort_transaction); Java
    /// `TransactionAbortedException`). Retriable: send it again in a new transaction.
    #[error("the record's transaction was aborted before it was sent")]
    TransactionAborted,
}

impl From<Error> for ProduceError {
    fn from(e: Error) -> Self {
        ProduceError::Client(Arc::new(e))
    }
}

impl ProduceError {
    /// Whether writing the same record again (as a new send) can succeed.
    pub fn is_retriable(&self) -> bool {
        match self {
            ProduceError::QueueFull { .. }
            | ProduceError::DeliveryTimeout { .. }
            | ProduceError::BlockTimeout { .. }
            | ProduceError::MetadataPending { .. }
            | ProduceError::TransactionAborted => true,
            ProduceError::Closed(_)
            | ProduceError::InvalidTopic { .. }
            | ProduceError::InvalidRecord(_)
            | ProduceError::NoTopic
            | ProduceError::NoCompletionCallback
            | ProduceError::RecordTooLarge { .. } => false,
            ProduceError::Partition(e) => e.is_retriable(),
            ProduceError::Broker { code, .. } | ProduceError::TopicMetadata { code, .. } => {
                code.is_retriable()
            }
            ProduceError::Client(e) => e.is_retriable(),
            ProduceError::Transaction(e) => e.is_retriable(),
        }
    }

    /// How the application recovers (KIP-1050, [`ErrorCategory`]): a transaction's error as
    /// [`TransactionError::category`] says; [`ProduceError::TransactionAborted`] retriable (the
    /// record may go into the next transaction); otherwise the category of
    /// [`ProduceError::error_code`] when it agrees with [`ProduceError::is_retriable`] (a
    /// record refused `NOT_LEADER_OR_FOLLOWER` is refresh-retriable, `TRANSACTION_ABORTABLE`
    /// abortable, `PRODUCER_FENCED` application-recoverable), else retriable or fatal as
    /// `is_retriable` says.
    ///
    /// [`TransactionError::category`]: TransactionError::category
    pub fn category(&self) -> ErrorCategory {
        match self {
            ProduceError::Transaction(e) => e.category(),
            ProduceError::Client(e) => e.category(),
            _ => ErrorCategory::from_parts(self.error_code(), self.is_retriable()),
        }
    }

    /// The Kafka error code behind this error, if any (`MESSAGE_TOO_LARGE` for
    /// [`ProduceError::RecordTooLarge`], `UNKNOWN_TOPIC_OR_PARTITION` for an unknown partition,
    /// `INVALID_TOPIC_EXCEPTION` for [`ProduceError::InvalidTopic`], `LEADER_NOT_AVAILABLE` for
    /// [`ProduceError::MetadataPending`], the broker's code for [`ProduceError::Broker`] and
    /// [`ProduceError::TopicMetadata`], the cause's code for a timeout).
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            ProduceError::RecordTooLarge { .. } => Some(ErrorCode::MESSAGE_TOO_LARGE),
            ProduceError::Partition(BalanceError::UnknownPartition { .. }) => {
                Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
            }
            ProduceError::Broker { code, .. } | ProduceError::TopicMetadata { code, .. } => {
                Some(*code)
            }
            ProduceError::InvalidTopic { .. } => Some(ErrorCode::INVALID_TOPIC_EXCEPTION),
            ProduceError::MetadataPending { .. } => Some(ErrorCode::LEADER_NOT_AVAILABLE),
            ProduceError::DeliveryTimeout { cause, .. }
            | ProduceError::BlockTimeout { cause, .. } => {
                cause.as_ref().and_then(|c| c.error_code())
            }
            ProduceError::Client(e) => e.error_code(),
            ProduceError::Transaction(e) => e.error_code(),
            _ => None,
        }
    }
}

/// The failures of one [`Writer::write`](crate::Writer::write) call: which records failed (their
/// index in the `records` given) and why. Records not listed were written.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WriteErrors {
    /// `(index in the call's records, why it failed)`, in index order.
    pub errors: Vec<(usize, ProduceError)>,
    /// Results of every record of the call, in order: the written ones' metadata and the failed
    /// ones' errors.
    pub results: Vec<Result<RecordMetadata, ProduceError>>,
}

impl WriteErrors {
    /// How many records failed.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// Whether no record failed (never true for a returned `Err`).
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    /// Whether writing the failed records again can succeed: true when every failed record's
    /// error is retriable ([`ProduceError::is_retriable`]).
    pub fn is_retriable(&self) -> bool {
        self.errors.iter().all(|(_, e)| e.is_retriable())
    }

    /// The category of the failures (KIP-1050): the first failed record's
    /// ([`ProduceError::category`]) that is not retriable, else the first one's.
    pub fn category(&self) -> ErrorCategory {
        let mut categories = self.errors.iter().map(|(_, e)| e.category());
        let first = categories.next().unwrap_or(ErrorCategory::Fatal);
        std::iter::once(first)
            .chain(categories)
            .find(|c| !c.is_retriable())
            .unwrap_or(first)
    }

    /// The Kafka error code of the first failed record that has one
    /// ([`ProduceError::error_code`]).
    pub fn error_code(&self) -> Option<ErrorCode> {
        self.errors.iter().find_map(|(_, e)| e.error_code())
    }
}

impl fmt::Display for WriteErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} records failed",
            self.errors.len(),
            self.results.len()
        )?;
        if let Some((i, e)) = self.errors.first() {
            write!(f, "; first: record {i}: {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for WriteErrors {}

/// A [`WriterBuilder`](crate::WriterBuilder) setting out of range, reported by `build`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriterConfigError {
    /// A setting is outside its allowed range.
    #[error("{name} = {value} {unit} is out of range: {allowed}")]
    OutOfRange {
        /// The setting (its builder method: the Java name in snake case without the unit
        /// suffix, e.g. `batch_size`, `linger`).
        name: &'static str,
        /// The value given, in `unit` (a time span in whole milliseconds).
        value: u64,
        /// The unit of `value`: `ms`, `bytes`, `records` or `requests`.
        unit: &'static str,
        /// What is allowed.
        allowed: &'static str,
    },
    /// Two settings contradict each other (e.g. `enable_idempotence(true)` with `acks` other
    /// than `all`, as in the Java client).
    #[error("conflicting settings: {0}")]
    Conflict(&'static str),
    /// `compression` names a codec this build of kafkit leaves out (its cargo feature, e.g.
    /// `gzip`, is off): every batch would fail. Kafka's `UNSUPPORTED_COMPRESSION_TYPE`.
    #[error(
        "compression = {compression}: this build has no {compression} codec (enable kafkit's \
         cargo feature \"{compression}\")"
    )]
    UnsupportedCompression {
        /// The codec asked for.
        compression: kafkit_compress::Compression,
    },
    /// The default `topic` is not a legal Kafka topic name (1 to 249 characters of
    /// `[a-zA-Z0-9._-]`, not `.` or `..`; the check the transport applies). Kafka's
    /// `INVALID_TOPIC_EXCEPTION`.
    #[error(
        "topic = {topic:?} is not a legal topic name: 1 to 249 characters of [a-zA-Z0-9._-], \
         not \".\" or \"..\""
    )]
    InvalidTopic {
        /// The name given.
        topic: String,
    },
}

/// Where an acknowledged record landed (Java `RecordMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordMetadata {
    /// The topic, shared with the batch the record went in (no copy per record).
    pub topic: Arc<str>,
    /// The partition.
    pub partition: i32,
    /// The record's offset; -1 with `acks=0` (no answer comes back) or when the broker reported
    /// the batch as a duplicate (`DUPLICATE_SEQUENCE_NUMBER`) without an offset.
    pub offset: i64,
    /// The record's timestamp: its create time, or the broker's append time when the topic uses
    /// `LogAppendTime` (ms since the Unix epoch).
    pub timestamp: i64,
}

/// Where a transactional [`Writer`](crate::Writer) stands (Java's `TransactionManager.State`), as
/// [`Writer::transaction_state`](crate::Writer::transaction_state) reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransactionPhase {
    /// Built; [`Writer::init_transactions`](crate::Writer::init_transactions) not called yet (or
    /// the writer is not transactional).
    Uninitialized,
    /// [`Writer::init_transactions`](crate::Writer::init_transactions) is under way, or timed out
    /// and may be called again.
    Initializing,
    /// A producer id is held and no transaction is open:
    /// [`Writer::begin_transaction`](crate::Writer::begin_transaction) may be called.
    Ready,
    /// A transaction is open: records may be sent, offsets added, then commit or abort.
    InTransaction,
    /// [`Writer::commit_transaction`](crate::Writer::commit_transaction) is under way (or timed
    /// out: call it again).
    CommittingTransaction,
    /// [`Writer::abort_transaction`](crate::Writer::abort_transaction) is under way (or timed out:
    /// call it again).
    AbortingTransaction,
    /// A record or a request of the open transaction failed: the application must call
    /// [`Writer::abort_transaction`](crate::Writer::abort_transaction), after which the writer goes
    /// on.
    AbortableError,
    /// The writer was fenced (another writer with the same transactional id initialized) or
    /// refused for good: every transactional call fails; close the writer.
    FatalError,
}

impl TransactionPhase {
    /// Java's name of the state (`UNINITIALIZED`, `IN_TRANSACTION`...).
    pub fn name(self) -> &'static str {
        match self {
            TransactionPhase::Uninitialized => "UNINITIALIZED",
            TransactionPhase::Initializing => "INITIALIZING",
            TransactionPhase::Ready => "READY",
            TransactionPhase::InTransaction => "IN_TRANSACTION",
            TransactionPhase::CommittingTransaction => "COMMITTING_TRANSACTION",
            TransactionPhase::AbortingTransaction => "ABORTING_TRANSACTION",
            TransactionPhase::AbortableError => "ABORTABLE_ERROR",
            TransactionPhase::FatalError => "FATAL_ERROR",
        }
    }
}

impl fmt::Display for TransactionPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a transactional call failed, in Java's three classes: fatal (the writer refuses further
/// transactional work), abortable (abort, then go on), or a timeout (the same call may be made
/// again; retriable errors such as `CONCURRENT_TRANSACTIONS`, `COORDINATOR_LOAD_IN_PROGRESS`
/// and `NOT_COORDINATOR` are retried inside the call until its timeout and end here only
/// then). Converts into [`crate::Error`] (as [`ProduceError::Transaction`]).
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TransactionError {
    /// The writer was built without a `transactional_id`.
    #[error("the writer is not transactional (no transactional_id)")]
    NotTransactional,
    /// The call does not fit the state the writer is in (Java `IllegalStateException`), e.g.
    /// `begin_transaction` twice, `send` outside a transaction. Nothing was sent.
    #[error("cannot {operation} in transaction state {state}")]
    InvalidState {
        /// The call (`begin_transaction`, `send`...).
        operation: &'static str,
        /// The state it found.
        state: TransactionPhase,
    },
    /// The writer cannot go on (Java `ProducerFencedException`, `AuthorizationException`...):
    /// `PRODUCER_FENCED`, `INVALID_PRODUCER_EPOCH` (a newer writer with the same transactional
    /// id initialized: this one is a zombie), `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`,
    /// `INVALID_TXN_STATE`, an unsupported version. Every later transactional call fails
    /// with it; close the writer. Not retriable.
    #[error("fatal transaction error{}: {message}; the writer refuses further transactional work",
        code.map(|c| format!(" ({c})")).unwrap_or_default())]
    Fatal {
        /// The broker's code, when one caused it.
        code: Option<ErrorCode>,
        /// What failed.
        message: String,
    },
    /// The open transaction cannot commit (a record failed, an offset commit was refused for the
    /// group's generation, a partition could not be added): call
    /// [`Writer::abort_transaction`](crate::Writer::abort_transaction), then begin a new one. Not
    /// retriable within the transaction.
    #[error("the transaction must be aborted{}: {message}",
        code.map(|c| format!(" ({c})")).unwrap_or_default())]
    Abortable {
        /// The broker's code, when one caused it.
        code: Option<ErrorCode>,
        /// What failed.
        message: String,
    },
    /// The call did not finish within its timeout (Java `TimeoutException`): the state is
    /// unchanged (`Initializing`, `CommittingTransaction`, `AbortingTransaction` stay), and the
    /// same call may be made again to resume. `last` is the last failure seen, if any.
    /// Retriable.
    #[error("{operation} did not finish within {timeout:?}{}; it may be called again",
        last.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default())]
    Timeout {
        /// The call.
        operation: &'static str,
        /// Its timeout.
        timeout: Duration,
        /// The last failure met while retrying.
        last: Option<Arc<Error>>,
    },
    /// An argument was refused before anything was sent (e.g. a negative offset, a partition
    /// given twice, an empty group id). Not retriable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The writer is closed, or there is no tokio runtime.
    #[error("the writer is closed: {0}")]
    Closed(&'static str),
}

impl TransactionError {
    /// Whether the writer refuses further transactional work (close it).
    pub fn is_fatal(&self) -> bool {
        matches!(self, TransactionError::Fatal { .. })
    }

    /// Whether the application must abort the open transaction (and may then go on).
    pub fn is_abortable(&self) -> bool {
        matches!(self, TransactionError::Abortable { .. })
    }

    /// Whether making the same call again may succeed (a [`TransactionError::Timeout`]).
    pub fn is_retriable(&self) -> bool {
        matches!(self, TransactionError::Timeout { .. })
    }

    /// How the application recovers (KIP-1050, [`ErrorCategory`]):
    /// [`TransactionError::Abortable`] is [`ErrorCategory::TransactionAbortable`] (abort, go
    /// on), [`TransactionError::Timeout`] [`ErrorCategory::Retriable`] (call again);
    /// [`TransactionError::Fatal`] is [`ErrorCategory::ApplicationRecoverable`] when its code
    /// is (`PRODUCER_FENCED`, `INVALID_PRODUCER_EPOCH`...: close the writer, build a new one),
    /// else [`ErrorCategory::Fatal`]; [`TransactionError::NotTransactional`] is
    /// [`ErrorCategory::InvalidConfiguration`]; the rest [`ErrorCategory::Fatal`].
    pub fn category(&self) -> ErrorCategory {
        match self {
            TransactionError::Abortable { .. } => ErrorCategory::TransactionAbortable,
            TransactionError::Timeout { .. } => ErrorCategory::Retriable,
            TransactionError::Fatal { code, .. } => match code.and_then(ErrorCategory::of) {
                Some(ErrorCategory::ApplicationRecoverable) => {
                    ErrorCategory::ApplicationRecoverable
                }
                _ => ErrorCategory::Fatal,
            },
            TransactionError::NotTransactional => ErrorCategory::InvalidConfiguration,
            TransactionError::InvalidState { .. }
            | TransactionError::InvalidArgument(_)
            | TransactionError::Closed(_) => ErrorCategory::Fatal,
        }
    }

    /// The Kafka error code behind the error, if any.
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self {
            TransactionError::Fatal { code, .. } | TransactionError::Abortable { code, .. } => {
                *code
            }
            TransactionError::Timeout { last, .. } => last.as_ref().and_then(|e| e.error_code()),
            _ => None,
        }
    }
}

impl From<TransactionError> for Error {
    fn from(e: TransactionError) -> Self {
        Error::Produce(ProduceError::Transaction(e))
    }
}
