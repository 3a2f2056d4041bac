//! The error code that applies to a whole request, read from its answer.
//!
//! The top-level `error_code` and `throttle_time_ms` of any response come from the generated
//! [`Response`] accessors. What this module adds is the transport's rule for the few requests it
//! may resend whole: a coordinator or controller error carried by every item means the request
//! reached the wrong broker. The simple routes (`route.rs`) name the item rule of each request
//! type that has one (`items = ...`).

use kafkit_protocol::messages as m;
use kafkit_protocol::{ErrorCode, Response};

/// Codes that, on every item of an idempotent coordinator request (OffsetCommit,
/// TxnOffsetCommit, AddPartitionsToTxn v0-3), mean the whole request can be sent again.
const IDEMPOTENT_ITEM_CODES: &[ErrorCode] = &[
    ErrorCode::NOT_COORDINATOR,
    ErrorCode::COORDINATOR_NOT_AVAILABLE,
    ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode::REQUEST_TIMED_OUT,
    ErrorCode::CONCURRENT_TRANSACTIONS,
];

/// `NOT_CONTROLLER` on every item of a controller request: it went to a broker that is no
/// longer the controller; nothing was done.
const CONTROLLER_ITEM_CODES: &[ErrorCode] = &[ErrorCode::NOT_CONTROLLER];

/// The one code shared by every item of `codes`, when it is in `allowed`.
fn uniform(codes: impl IntoIterator<Item = ErrorCode>, allowed: &[ErrorCode]) -> Option<ErrorCode> {
    let mut codes = codes.into_iter();
    let first = codes.next()?;
    (allowed.contains(&first) && codes.all(|c| c == first)).then_some(first)
}

/// The error code that applies to the whole request `resp` answers, if any: its top-level
/// `error_code` when non-zero; otherwise what `items` finds (for the per-item responses of
/// requests the transport may resend whole: a coordinator or controller error carried by every
/// item, so no item was processed). `None` means the response is an answer to hand to the
/// caller (per-item errors included).
pub(crate) fn whole_error<S: Response>(
    resp: &S,
    items: fn(&S) -> Option<ErrorCode>,
) -> Option<ErrorCode> {
    match resp.error_code() {
        Some(top) if !top.is_ok() => Some(top),
        _ => items(resp),
    }
}

/// No per-item rule: only a top-level code applies to the whole request.
pub(crate) fn no_items<S>(_: &S) -> Option<ErrorCode> {
    None
}

/// OffsetCommit: a coordinator error on every partition.
pub(crate) fn offset_commit_items(r: &m::OffsetCommitResponse) -> Option<ErrorCode> {
    uniform(
        r.topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
        IDEMPOTENT_ITEM_CODES,
    )
}

/// TxnOffsetCommit: a coordinator error on every partition.
pub(crate) fn txn_offset_commit_items(r: &m::TxnOffsetCommitResponse) -> Option<ErrorCode> {
    uniform(
        r.topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
        IDEMPOTENT_ITEM_CODES,
    )
}

/// AddPartitionsToTxn v0-3 (what a client sends): a coordinator error on every partition.
pub(crate) fn add_partitions_to_txn_items(r: &m::AddPartitionsToTxnResponse) -> Option<ErrorCode> {
    uniform(
        r.results_by_topic_v3_and_below.iter().flat_map(|t| {
            t.results_by_partition
                .iter()
                .map(|p| p.partition_error_code)
        }),
        IDEMPOTENT_ITEM_CODES,
    )
}

/// CreateTopics: `NOT_CONTROLLER` on every topic.
pub(crate) fn create_topics_items(r: &m::CreateTopicsResponse) -> Option<ErrorCode> {
    uniform(r.topics.iter().map(|t| t.error_code), CONTROLLER_ITEM_CODES)
}

/// DeleteTopics: `NOT_CONTROLLER` on every topic.
pub(crate) fn delete_topics_items(r: &m::DeleteTopicsResponse) -> Option<ErrorCode> {
    uniform(
        r.responses.iter().map(|t| t.error_code),
        CONTROLLER_ITEM_CODES,
    )
}

/// CreatePartitions: `NOT_CONTROLLER` on every topic.
pub(crate) fn create_partitions_items(r: &m::CreatePartitionsResponse) -> Option<ErrorCode> {
    uniform(
        r.results.iter().map(|t| t.error_code),
        CONTROLLER_ITEM_CODES,
    )
}

/// CreateAcls: `NOT_CONTROLLER` on every creation.
pub(crate) fn create_acls_items(r: &m::CreateAclsResponse) -> Option<ErrorCode> {
    uniform(
        r.results.iter().map(|t| t.error_code),
        CONTROLLER_ITEM_CODES,
    )
}

/// Whether `code` means the cached coordinator is wrong and must be looked up again
/// (`NOT_COORDINATOR`, `COORDINATOR_NOT_AVAILABLE`). `COORDINATOR_LOAD_IN_PROGRESS` keeps it:
/// the coordinator is right, only still loading its state.
pub(crate) fn drops_coordinator(code: ErrorCode) -> bool {
    code == ErrorCode::NOT_COORDINATOR || code == ErrorCode::COORDINATOR_NOT_AVAILABLE
}
