//! What the Reader's phases hand one another: a source's plan and its decoded answer
//! ([`Plan`], [`Planned`], [`Answer`]), the manager's round of work ([`Work`], [`ResetItem`],
//! [`ValidateItem`]) and what a phase under the lock leaves to do outside it ([`Followup`]).
//! The state (`shared.rs`), the task files (`source.rs`, `offsets.rs`) and the answer rules
//! (`apply.rs`) import this file, never each other's task file; it imports only the cursor,
//! record and session vocabulary below it.

use std::sync::Arc;

use kafkit_protocol::records::RecordsError;
use kafkit_protocol::{ErrorCode, Uuid};
use tokio::time::Instant;

use super::cursor::Position;
use super::record::{Barrier, PartitionRecords};
use super::session::PartData;
use crate::ops::offsets::OffsetSpec;

/// One partition of a planned Fetch.
#[derive(Debug, Clone)]
pub(crate) struct Planned {
    pub(crate) topic: Arc<str>,
    pub(crate) topic_id: Uuid,
    pub(crate) partition: i32,
    /// The cursor's version when planned.
    pub(crate) version: u64,
    pub(crate) data: PartData,
    /// The epoch of the last record before `data.fetch_offset`.
    pub(crate) last_epoch: Option<i32>,
    /// Whether this broker is the partition's preferred read replica (not its leader).
    pub(crate) from_replica: bool,
    /// Whether no answer since the cursor was made told its log end (high watermark -1): the
    /// fetch session must answer for it ([`FetchSession::plan`](super::session::FetchSession::plan)).
    pub(crate) end_unknown: bool,
    pub(crate) barrier: Barrier,
}

/// What a round does.
pub(crate) enum Plan {
    /// Fetch these partitions under request id `id`.
    Fetch { id: u64, parts: Vec<Planned> },
    /// Nothing to fetch: wait for a wake-up, at most until then.
    Wait(Option<Instant>),
    /// The reader is closed.
    Stop,
}

/// One partition of an answer, decoded outside the lock.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) error: ErrorCode,
    pub(crate) high_watermark: i64,
    pub(crate) last_stable_offset: i64,
    pub(crate) log_start_offset: i64,
    pub(crate) preferred_read_replica: i32,
    /// KIP-951 `current_leader`: (leader id, leader epoch), -1 when absent.
    pub(crate) current_leader: (i32, i32),
    /// KIP-320 `diverging_epoch` (Fetch v12+): (epoch, end offset) when the broker saw the
    /// last fetched epoch diverge from its log.
    pub(crate) diverging: Option<(i32, i64)>,
    pub(crate) records: Option<PartitionRecords>,
    /// The position after the whole batches read.
    pub(crate) next: Position,
    /// A batch that did not decode, with its offset.
    pub(crate) decode_error: Option<(i64, RecordsError)>,
    /// Bytes came back but not one whole batch, from a broker before KIP-74.
    pub(crate) too_large: bool,
    /// A batch did not fit the decoded-memory budget that the answer's earlier partitions
    /// left: it and the rest wait for the next Fetch (from `next`).
    pub(crate) deferred: bool,
}

/// A partition awaiting an offset reset.
#[derive(Debug)]
pub(crate) struct ResetItem {
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
    pub(crate) spec: OffsetSpec,
    pub(crate) version: u64,
    pub(crate) leader_epoch: i32,
}

/// A partition awaiting validation.
#[derive(Debug)]
pub(crate) struct ValidateItem {
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
    pub(crate) version: u64,
    pub(crate) leader_epoch: i32,
    pub(crate) last_epoch: i32,
}

/// What one manager round has to do.
#[derive(Debug, Default)]
pub(crate) struct Work {
    pub(crate) id: u64,
    pub(crate) route: Vec<Arc<str>>,
    pub(crate) resets: Vec<ResetItem>,
    pub(crate) validations: Vec<ValidateItem>,
    /// The earliest backoff end among cursors with work.
    pub(crate) next_due: Option<Instant>,
    /// A preferred read replica missing from metadata: `route` every topic with metadata
    /// asked afresh (the brokers listed may have changed).
    pub(crate) replica_lookup: bool,
}

/// What `apply` leaves to do after the lock is released.
#[derive(Debug, Default)]
pub(crate) struct Followup {
    /// KIP-951 leader hints for the transport's cache: (topic, partition, leader, epoch).
    pub(crate) hints: Vec<(Arc<str>, i32, i32, i32)>,
    /// Node endpoints of the answer (KIP-951), for the hints.
    pub(crate) metadata_stale: bool,
    /// The manager has work (routes, resets, validations).
    pub(crate) wake_manager: bool,
    /// Brokers that now serve partitions (sources to start or wake).
    pub(crate) nodes: Vec<i32>,
    /// Records were queued.
    pub(crate) queued: bool,
}
