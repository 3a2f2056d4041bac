//! The types one Produce request's phases pass to each other: its kept lists
//! ([`RequestLists`]), each batch's verdict ([`Verdict`]) and a whole-request failure
//! ([`SendError`]). The phase files (`encode.rs`, `settle.rs`, `sender.rs`) and the state
//! (`accumulator.rs`) import this file, never each other's task file; it imports only the
//! batch and error vocabulary below it.

use std::sync::Arc;

use bytes::Bytes;
use kafkit_protocol::messages::{ProduceRequest, ProduceResponse, produce_request};

use super::batch::{Batch, Outcome, PartId};
use crate::error::Error;
use crate::error::produce::ProduceError;

/// How one batch of a request ended.
pub(super) enum Verdict {
    Done(Outcome),
    /// Retriable: send again after the backoff. `unroute`: find the leader again first;
    /// `hint`: the new leader (id, epoch) from the response (KIP-951).
    Retry {
        error: ProduceError,
        unroute: bool,
        hint: Option<(i32, i32)>,
        maybe_written: bool,
    },
    /// A sequence error: new epoch (KIP-360), then send again.
    Bump(ProduceError),
    /// The broker found the batch too large: send it again as two halves.
    Split(ProduceError),
}

/// The lists one Produce request goes through, kept from one request to the next (in
/// `State::request_lists`: taken with the plan, given back once the request's outcome was
/// applied, both under the writer's lock that those steps take anyway), so that in steady state
/// a request allocates none of them: they have grown to the largest request by then. Each is
/// empty between requests; the Produce request keeps its topic entries (names and partition
/// lists, emptied) to fill again.
#[derive(Default)]
pub(crate) struct RequestLists {
    /// The plan's batches (`Plan::request`).
    pub(super) request: Vec<(PartId, Batch)>,
    /// [`RequestGuard`](super::sender::RequestGuard)'s: each batch's partition, record count and buffer cost.
    pub(super) parts: Vec<(PartId, usize, usize)>,
    /// The encoded batches with their bytes ([`encode_batches`](super::encode::encode_batches)).
    pub(super) sent: Vec<(PartId, Batch, Bytes)>,
    /// One verdict per batch ([`judge`](super::settle::judge)).
    pub(super) verdicts: Vec<(PartId, Batch, Verdict)>,
    /// Each sent batch's `(bytes, records)`, for the stats.
    pub(super) sizes: Vec<(u64, u64)>,
    /// The Produce request ([`build_request`](super::encode::build_request)); between requests its topics' partition lists
    /// are empty (no batch's bytes are held).
    pub(super) produce: ProduceRequest,
    /// Topic entries of an earlier request that had more topics, kept to be filled again.
    pub(super) topics: Vec<produce_request::TopicProduceData>,
    /// The answer, read into the last one's memory (`answer::read_answer`).
    pub(super) answer: ProduceResponse,
    /// `settle::judge_response`'s KIP-951 leader hints.
    pub(super) hints: Vec<(usize, i32, i32)>,
    /// The request's topics with their ids from the writer's metadata (`sender::produce_max`).
    pub(super) topic_ids: Vec<(Arc<str>, kafkit_protocol::Uuid)>,
    /// `settle::Settling`'s lists.
    pub(super) done: Vec<(Batch, Outcome)>,
    pub(super) held: Vec<PartId>,
    pub(super) wake_brokers: Vec<i32>,
    pub(super) stale: Vec<Arc<str>>,
}

impl std::fmt::Debug for RequestLists {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestLists")
            .field("request", &self.request.capacity())
            .field("sent", &self.sent.capacity())
            .field("topics", &self.produce.topic_data.len())
            .finish_non_exhaustive()
    }
}

/// A whole-request failure.
pub(super) struct SendError {
    pub(super) error: ProduceError,
    pub(super) maybe_written: bool,
    pub(super) retriable: bool,
    pub(super) unroute: bool,
}

impl SendError {
    /// A failure before the request was handed to the connection: nothing was written.
    pub(super) fn not_sent(e: Error) -> Self {
        SendError {
            retriable: e.is_retriable(),
            unroute: true,
            error: e.into(),
            maybe_written: false,
        }
    }

    /// A failure of the request itself: written, unless the error says it never left
    /// (encoding, size).
    pub(super) fn of_request(e: Error) -> Self {
        let maybe_written = !matches!(
            e,
            Error::Encode(_) | Error::RequestTooLarge { .. } | Error::UnsupportedVersion { .. }
        );
        SendError {
            retriable: e.is_retriable(),
            unroute: true,
            error: e.into(),
            maybe_written,
        }
    }
}
