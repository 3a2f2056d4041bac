//! Split and merge: requests whose parts belong to different brokers.
//!
//! A split request is a list of *items* (a topic-partition with its data, a group, a config
//! resource) plus top-level fields (acks, timeouts, flags). Each item has a [`Route`]: the leader
//! of its partition (from the metadata cache), the coordinator of its group (FindCoordinator,
//! cached), the broker it names, or any broker. One round of the driver ([`run`]):
//!
//! ```text
//!  caller's request ──split──▶ items[0..n] (caller's order)          answers[0..n]
//!                                 │ resolve target                       ▲
//!                                 ▼                                      │ match by key
//!                     node 1: [0, 3]   node 2: [1]   node 3: [2, 4] ──▶ one request per node,
//!                                                                        sent concurrently
//!  items whose answer is retriable ──invalidate metadata / coordinator, back off──▶ next round
//!  all answered, or deadline ──merge──▶ ONE response, items in the caller's order
//! ```
//!
//! Invariants:
//! - Every item of the caller's request gets exactly one answer in the merged response, in the
//!   caller's order: the broker's answer, or a synthesized one carrying an error code
//!   (`NETWORK_EXCEPTION` when its broker could not be reached or the connection died,
//!   `REQUEST_TIMED_OUT` when the deadline passed, the metadata's code when its partition has no
//!   leader, `UNKNOWN_SERVER_ERROR` when a broker's answer left it out). A partition listed
//!   twice is sent once; its later copies answer `INVALID_REQUEST` without being sent.
//! - [`run`] returns `Err` only when no item got any answer from a broker or from metadata
//!   (e.g. every broker is down); never for a batch where some parts succeeded.
//! - An item is retried only when its error says the broker did not act on it, or the API is
//!   read-only or idempotent: see [`SplitApi::retry`] and the Produce rules in `produce.rs`.
//! - The driver never waits past the deadline (`default_api_timeout` from the call's start).

mod configs;
mod every;
mod groups;
mod partitions;
pub(crate) mod produce;

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use kafkit_protocol::{ErrorCode, Request};
use tokio::task::JoinSet;
use tokio::time::Instant;

use kafkit_protocol::messages as m;

use super::retry::RetryClock;
use super::route::sealed;
use super::{ConnKind, CoordinatorType, Routed, SendOptions, Transport};
use crate::conn::metadata::{Metadata, TopicMetadata};
use crate::error::{Error, Result};

/// Where one item of a split request must be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route<'a> {
    /// The leader of `topic`/`partition`, from the metadata cache.
    Leader {
        /// The topic name.
        topic: &'a str,
        /// The partition index.
        partition: i32,
    },
    /// The coordinator of this kind for this key: a group id (FindCoordinator key type 0) or a
    /// transactional id (key type 1).
    Coordinator(CoordinatorType, &'a str),
    /// The broker with this node id.
    Broker(i32),
    /// Any broker: all such items of one round go to one broker in one request.
    AnyBroker,
}

/// What to do with an item whose answer carried an error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ItemRetry {
    /// Final: the answer goes to the caller.
    No,
    /// Retry after the backoff, routing as before.
    Backoff,
    /// Mark metadata stale (leaders moved), then retry after the backoff.
    RefreshMetadata,
    /// Forget the cached coordinator of the item's group, then retry after the backoff.
    RefreshCoordinator,
}

/// Why a part of the request got no answer from its broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Nothing was sent: the connection could not be opened (or the item had no broker).
    NotSent,
    /// The connection died after the request may have been written: the broker may have acted
    /// on it.
    Lost,
    /// No answer before the request timeout or the deadline: the broker may have acted on it.
    TimedOut,
}

impl Failure {
    /// The code the item carries in the merged response when this failure is final.
    pub(crate) fn code(self) -> ErrorCode {
        match self {
            Failure::NotSent | Failure::Lost => ErrorCode::NETWORK_EXCEPTION,
            Failure::TimedOut => ErrorCode::REQUEST_TIMED_OUT,
        }
    }
}

/// The retry policy shared by the split APIs, by error code.
///
/// - `NOT_LEADER_OR_FOLLOWER`, `LEADER_NOT_AVAILABLE`, `UNKNOWN_TOPIC_OR_PARTITION`: leaders
///   moved or the cache is stale; refresh metadata. (`UNKNOWN_TOPIC_OR_PARTITION` is retried only
///   while the metadata may be stale: once a fresh Metadata response also lacks the partition,
///   the driver stops; see [`run`].)
/// - `NOT_COORDINATOR`, `COORDINATOR_NOT_AVAILABLE`: the coordinator moved; look it up again.
/// - `COORDINATOR_LOAD_IN_PROGRESS`, `REQUEST_TIMED_OUT`: same broker, after a backoff.
///
/// Everything else is final.
pub(crate) fn default_retry(code: ErrorCode) -> ItemRetry {
    match code {
        ErrorCode::NOT_LEADER_OR_FOLLOWER
        | ErrorCode::LEADER_NOT_AVAILABLE
        | ErrorCode::UNKNOWN_TOPIC_OR_PARTITION => ItemRetry::RefreshMetadata,
        ErrorCode::NOT_COORDINATOR | ErrorCode::COORDINATOR_NOT_AVAILABLE => {
            ItemRetry::RefreshCoordinator
        }
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS | ErrorCode::REQUEST_TIMED_OUT => {
            ItemRetry::Backoff
        }
        _ => ItemRetry::No,
    }
}

/// The retry policy of the coordinator-routed APIs (DescribeGroups, OffsetFetch): the coordinator
/// codes and `REQUEST_TIMED_OUT` of [`default_retry`]; partition codes in a group's answer are final.
pub(crate) fn coordinator_retry(code: ErrorCode) -> ItemRetry {
    match default_retry(code) {
        ItemRetry::RefreshMetadata => ItemRetry::No,
        r => r,
    }
}

/// The retry policy of resources answered by a broker itself (DescribeConfigs): only
/// `REQUEST_TIMED_OUT`. A resource's `UNKNOWN_TOPIC_OR_PARTITION` means the topic does not exist
/// (no leader is involved), so it is final.
pub(crate) fn resource_retry(code: ErrorCode) -> ItemRetry {
    match code {
        ErrorCode::REQUEST_TIMED_OUT => ItemRetry::Backoff,
        _ => ItemRetry::No,
    }
}

/// A request that the split driver can take apart, route item by item and put back together.
///
/// Implemented for the partition-led APIs (Produce, ListOffsets, DeleteRecords,
/// OffsetForLeaderEpoch, DescribeProducers), the group APIs by coordinator (DescribeGroups,
/// OffsetFetch) and DescribeConfigs. Every function is pure, so each API's split and merge is unit
/// tested without a broker.
pub(crate) trait SplitApi: Request {
    /// One part of the request: a partition with its data, a group, a resource.
    type Item: Send + Sync + 'static;
    /// The answer to one item (a partition's result, a group's description...).
    type Answer: Send + 'static;
    /// Response-wide data gathered from every part (e.g. KIP-951 node endpoints), merged.
    type Extra: Default + Send + 'static;
    /// The connection pool the parts are sent on.
    const CONN: ConnKind;

    /// Takes the items out of `self`, in the caller's order; the returned template keeps the
    /// top-level fields.
    fn split(self) -> (Self, Vec<Self::Item>);

    /// Where `item` goes.
    fn target(item: &Self::Item) -> Route<'_>;

    /// The most items one request may carry at `version` (OffsetFetch below v8: one group).
    fn max_items(_version: i16) -> usize {
        usize::MAX
    }

    /// The highest version the part of `template` holding `items` may go at (`None`: the
    /// client's table). Produce: v12, since the split names topics and v13 names them by id
    /// only (KIP-516); OffsetFetch items naming a topic without its id stay below v10.
    fn max_version(_template: &Self, _items: &[&Self::Item]) -> Option<i16> {
        None
    }

    /// The request for one broker: `template`'s top-level fields and `items`, at `version`.
    fn build(template: &Self, items: &[&Self::Item], version: i16) -> Self;

    /// Takes a response apart: the answer to each of `items` (same order; `None` when the
    /// broker left it out), the response's `throttle_time_ms`, and response-wide data added to
    /// `extra`.
    fn answers(
        resp: Self::Response,
        items: &[&Self::Item],
        version: i16,
        extra: &mut Self::Extra,
    ) -> (Vec<Option<Self::Answer>>, i32);

    /// The error code of an answer (`NONE` on success).
    fn error_code(answer: &Self::Answer) -> ErrorCode;

    /// An answer for `item` carrying only `code` (items no broker answered).
    fn failed(item: &Self::Item, code: ErrorCode) -> Self::Answer;

    /// Whether and how an item whose answer carried `code` is retried.
    fn retry(_template: &Self, _item: &Self::Item, code: ErrorCode) -> ItemRetry {
        default_retry(code)
    }

    /// Whether an item whose part failed as `failure` (no answer) may be sent again. Read-only
    /// APIs: always.
    fn retry_failure(_template: &Self, _item: &Self::Item, _failure: Failure) -> bool {
        true
    }

    /// Applies a leader hint carried by `answer` (KIP-951) to the cache; true when it did, so
    /// the retry can skip a metadata refresh.
    fn apply_hint(
        _t: &Transport,
        _item: &Self::Item,
        _answer: &Self::Answer,
        _extra: &Self::Extra,
    ) -> bool {
        false
    }

    /// Extra time the broker may take before answering (Produce's `timeout_ms`), on top of the
    /// request timeout.
    fn extra_wait(_template: &Self) -> Duration {
        Duration::ZERO
    }

    /// Whether the broker answers at all (false for Produce with acks=0).
    fn expects_response(_template: &Self) -> bool {
        true
    }

    /// The merged response: `answers` in the caller's order (one per item), the largest
    /// `throttle_time_ms` of the parts, and the merged `extra`.
    fn merge(
        template: Self,
        answers: Vec<(Self::Item, Self::Answer)>,
        throttle_time_ms: i32,
        extra: Self::Extra,
    ) -> Self::Response;
}

// ---------------------------------------------------------------------------------------------
// Item model shared by the partition-keyed APIs.

/// One partition of a partition-keyed request: its topic name (shared by the topic's
/// partitions, so splitting allocates once per topic) and its per-partition body.
#[derive(Debug, Clone)]
pub(crate) struct PartItem<P> {
    /// The topic name.
    pub topic: Arc<str>,
    /// The partition's part of the request (e.g. `PartitionProduceData`).
    pub part: P,
}

/// Flattens `topics` (each `(name, partitions)`) into items, keeping the caller's order.
pub(crate) fn split_topics<P>(
    topics: impl IntoIterator<Item = (String, Vec<P>)>,
) -> Vec<PartItem<P>> {
    let mut items = Vec::new();
    for (name, parts) in topics {
        let topic: Arc<str> = Arc::from(name);
        items.extend(parts.into_iter().map(|part| PartItem {
            topic: Arc::clone(&topic),
            part,
        }));
    }
    items
}

/// Groups `items` by topic (first appearance order) and builds one topic entry per topic with
/// `make(name, partitions)`, cloning the partition bodies (their record bytes are shared, not
/// copied).
pub(crate) fn build_topics<P: Clone, T>(
    items: &[&PartItem<P>],
    mut make: impl FnMut(String, Vec<P>) -> T,
) -> Vec<T> {
    let mut groups: Vec<(&Arc<str>, Vec<P>)> = Vec::new();
    for it in items {
        match groups.iter_mut().rev().find(|(t, _)| **t == it.topic) {
            Some((_, parts)) => parts.push(it.part.clone()),
            None => groups.push((&it.topic, vec![it.part.clone()])),
        }
    }
    groups
        .into_iter()
        .map(|(t, parts)| make(t.to_string(), parts))
        .collect()
}

/// Matches the per-partition answers of a response (`topics`: `(name, answers)`) to `items` by
/// (topic, partition). Answers for partitions not asked for are dropped; items left unanswered
/// are `None`. A partition listed twice by the caller is answered once (the first).
pub(crate) fn match_partitions<P, A>(
    items: &[&PartItem<P>],
    item_partition: impl Fn(&P) -> i32,
    topics: impl IntoIterator<Item = (String, Vec<A>)>,
    answer_partition: impl Fn(&A) -> i32,
) -> Vec<Option<A>> {
    let mut out: Vec<Option<A>> = items.iter().map(|_| None).collect();
    let mut index: HashMap<(&str, i32), usize> = HashMap::with_capacity(items.len());
    for (i, it) in items.iter().enumerate() {
        index
            .entry((&*it.topic, item_partition(&it.part)))
            .or_insert(i);
    }
    for (name, answers) in topics {
        for a in answers {
            if let Some(&i) = index.get(&(name.as_str(), answer_partition(&a)))
                && out[i].is_none()
            {
                out[i] = Some(a);
            }
        }
    }
    out
}

/// Puts answers back into topic entries in the caller's order: consecutive items of the same
/// topic share one entry (`make(name, answers)`), so the merged response has the caller's shape.
pub(crate) fn merge_topics<P, A, T>(
    answers: Vec<(PartItem<P>, A)>,
    mut make: impl FnMut(String, Vec<A>) -> T,
) -> Vec<T> {
    let mut out = Vec::new();
    let mut current: Option<(Arc<str>, Vec<A>)> = None;
    for (item, answer) in answers {
        match &mut current {
            Some((topic, list)) if Arc::ptr_eq(topic, &item.topic) || *topic == item.topic => {
                list.push(answer);
            }
            _ => {
                if let Some((topic, list)) = current.take() {
                    out.push(make(topic.to_string(), list));
                }
                current = Some((item.topic, vec![answer]));
            }
        }
    }
    if let Some((topic, list)) = current {
        out.push(make(topic.to_string(), list));
    }
    out
}

/// Matches keyed answers (a group id, a resource) to `items`: each answer goes to the first
/// unanswered item that `same` pairs it with; answers matching no item are dropped.
/// `item_key` and `answer_key` hash the key of each side ([`key_hash`]); items are looked up by
/// that hash, so matching is linear in the number of items and answers.
pub(crate) fn match_keyed<I, A>(
    items: &[&I],
    answers: impl IntoIterator<Item = A>,
    item_key: impl Fn(&I) -> u64,
    answer_key: impl Fn(&A) -> u64,
    same: impl Fn(&I, &A) -> bool,
) -> Vec<Option<A>> {
    let mut out: Vec<Option<A>> = items.iter().map(|_| None).collect();
    let mut by_key: HashMap<u64, Vec<usize>> = HashMap::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        by_key.entry(item_key(item)).or_default().push(i);
    }
    for a in answers {
        let Some(candidates) = by_key.get(&answer_key(&a)) else {
            continue;
        };
        if let Some(&i) = candidates
            .iter()
            .find(|&&i| out[i].is_none() && same(items[i], &a))
        {
            out[i] = Some(a);
        }
    }
    out
}

/// The hash [`match_keyed`] looks items up by: equal keys (a `String` and a `&str` of the same
/// text included) hash equally within the process.
pub(crate) fn key_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

// ---------------------------------------------------------------------------------------------
// Routing one round.

/// Where the items of one round go, and the items that have no broker this round.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// (node id, indices of the items for it in the caller's order), nodes in order of first use.
    pub parts: Vec<(i32, Vec<usize>)>,
    /// Items without a broker this round, with the reason (the metadata's code, or
    /// `NETWORK_EXCEPTION` when no broker is known).
    pub unroutable: Vec<(usize, ErrorCode)>,
}

/// Groups the `pending` items by destination node: `resolve` gives each item's node id or the
/// code saying why it has none. Each node's list keeps the caller's order and is cut into chunks
/// of at most `max_items`.
pub(crate) fn plan(
    pending: &[usize],
    mut resolve: impl FnMut(usize) -> Result<i32, ErrorCode>,
) -> Plan {
    let mut out = Plan::default();
    for &i in pending {
        match resolve(i) {
            Ok(node) => match out.parts.iter_mut().find(|(n, _)| *n == node) {
                Some((_, list)) => list.push(i),
                None => out.parts.push((node, vec![i])),
            },
            Err(code) => out.unroutable.push((i, code)),
        }
    }
    out
}

/// The leader node of `topic`/`partition` in `md`, or why there is none.
pub(crate) fn leader_node(md: &Metadata, topic: &str, partition: i32) -> Result<i32, ErrorCode> {
    leader_in(md, md.topic(topic), partition)
}

/// `md`'s topics by name, so that routing many items costs one look-up each, not a scan of
/// every topic (requests may name tens of thousands of topics).
pub(crate) fn topic_index(md: &Metadata) -> HashMap<&str, &TopicMetadata> {
    let mut index = HashMap::with_capacity(md.topics.len());
    for t in &md.topics {
        index.entry(t.name.as_str()).or_insert(&**t);
    }
    index
}

/// [`leader_node`] for a topic already looked up (`None`: not in the metadata).
pub(crate) fn leader_in(
    md: &Metadata,
    topic: Option<&TopicMetadata>,
    partition: i32,
) -> Result<i32, ErrorCode> {
    let t = topic.ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?;
    if !t.error_code.is_ok() {
        return Err(t.error_code);
    }
    // Partitions are usually listed in index order: try that slot before scanning.
    let p = usize::try_from(partition)
        .ok()
        .and_then(|i| t.partitions.get(i))
        .filter(|p| p.partition == partition)
        .or_else(|| t.partitions.iter().find(|p| p.partition == partition))
        .ok_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)?;
    if !p.error_code.is_ok() && p.leader_id < 0 {
        return Err(p.error_code);
    }
    if p.leader_id < 0 || md.broker(p.leader_id).is_none() {
        return Err(ErrorCode::LEADER_NOT_AVAILABLE);
    }
    Ok(p.leader_id)
}

/// How a transport-level error of one part is seen by its items; `None` for errors a retry
/// cannot mend (bad version, encoding, TLS/SASL...).
fn classify(e: &Error) -> Option<Failure> {
    match e {
        Error::Connect { .. } | Error::ConnectTimeout { .. } | Error::UnknownBroker { .. } => {
            Some(Failure::NotSent)
        }
        Error::Io(_) | Error::ConnectionClosed { .. } if e.is_retriable() => Some(Failure::Lost),
        Error::Timeout { .. } => Some(Failure::TimedOut),
        Error::DeadlineExceeded { last, .. } => classify(last).or(Some(Failure::TimedOut)),
        _ => None,
    }
}

/// The per-item code for a part that failed with a non-retriable error (e.g. a broker that
/// speaks no common version while others do).
fn final_code(e: &Error) -> ErrorCode {
    match e {
        // UNSUPPORTED_VERSION: no common version, or a field the version cannot carry.
        Error::UnsupportedVersion { .. } | Error::Encode(_) => ErrorCode(35),
        Error::Sasl { code: Some(c), .. } | Error::Broker { code: c, .. } => *c,
        _ => classify(e).map_or(ErrorCode::UNKNOWN_SERVER_ERROR, Failure::code),
    }
}

/// The state of one item between rounds.
enum State<A> {
    /// Still to be sent (or sent again). `last`: the code it would end with at the deadline.
    Pending { last: ErrorCode },
    /// Answered (by a broker, or finally failed).
    Done(A),
}

/// Why a part got no response.
enum PartError {
    /// No connection (dial, or the node is unknown): nothing was sent.
    NoConn(Error),
    /// The request could not be sent, or no answer came back.
    Sent(Error),
}

/// The outcomes of one node's requests: `(item indices, version, response)`; `None` for
/// acks=0 Produce.
type PartResult<R> = Vec<(
    Vec<usize>,
    i16,
    Result<Option<<R as Request>::Response>, PartError>,
)>;

/// Sends the items `list` to `node`: one request, or several when the negotiated version caps
/// the items per request ([`SplitApi::max_items`]), sent together.
async fn send_part<R: SplitApi>(
    t: &Transport,
    node: i32,
    list: Vec<usize>,
    template: &R,
    items: &[R::Item],
    deadline: Instant,
) -> PartResult<R> {
    // A dial still going at the deadline sent nothing: NoConn, so that the items end with
    // NETWORK_EXCEPTION ("not written"), not REQUEST_TIMED_OUT ("may have been written").
    let conn = match tokio::time::timeout_at(deadline, t.conn(node, R::CONN)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return vec![(list, 0, Err(PartError::NoConn(e)))],
        Err(_) => {
            let e = Error::Timeout {
                operation: "connect",
                timeout: t.dialer().connect_timeout(),
            };
            return vec![(list, 0, Err(PartError::NoConn(e)))];
        }
    };
    let cap = {
        let refs: Vec<&R::Item> = list.iter().map(|&i| &items[i]).collect();
        R::max_version(template, &refs)
    };
    let version = match conn.version_for::<R>(cap) {
        Ok(v) => v,
        Err(e) => return vec![(list, 0, Err(PartError::Sent(e)))],
    };
    let max = R::max_items(version).max(1);
    let respond = R::expects_response(template);
    let opts = SendOptions {
        max_version: Some(version),
        extra_wait: R::extra_wait(template),
    };
    let mut sends = JoinSet::new();
    let mut out = Vec::new();
    for (n, chunk) in list.chunks(max).enumerate() {
        let refs: Vec<&R::Item> = chunk.iter().map(|&i| &items[i]).collect();
        let sub = R::build(template, &refs, version);
        let (t, conn, chunk) = (t.clone(), conn.clone(), chunk.to_vec());
        sends.spawn(async move {
            let r = if respond {
                t.send_to(node, R::CONN, &sub, opts).await.map(Some)
            } else {
                // acks=0: no response frame; done once the request is written.
                conn.send_no_answer(&sub, version, Duration::ZERO)
                    .await
                    .map(|_| None)
            };
            (n, chunk, r.map_err(PartError::Sent))
        });
    }
    while let Some(joined) = sends.join_next().await {
        if let Ok((n, chunk, r)) = joined {
            out.push((n, chunk, version, r));
        }
    }
    out.sort_by_key(|(n, ..)| *n);
    out.into_iter().map(|(_, c, v, r)| (c, v, r)).collect()
}

/// Sends `req` split by destination and merges the answers; see the module docs.
///
/// Each round is a few named phases of [`Split`]: the items still [`pending`](Split::pending),
/// what routing them needs ([`resolve`](Split::resolve): metadata and coordinators), one broker
/// per item ([`route`](Split::route)), the items with none
/// ([`settle_unroutable`](Split::settle_unroutable)), one request per broker and its answers
/// ([`send`](Split::send) -> [`settle_part`](Split::settle_part)), what to look up again
/// ([`refresh`](Split::refresh)) and the backoff ([`next_round`](Split::next_round)).
///
/// Errors: `Err` only when no item was answered at all, by a broker or by metadata (then the last
/// transport error, e.g. [`Error::Connect`] with every broker down, or
/// [`Error::UnsupportedVersion`]).
pub(crate) async fn run<R: SplitApi>(
    t: &Transport,
    req: R,
    timeout_ms: u64,
) -> Result<R::Response> {
    let mut split = Split::new(t, req, timeout_ms);
    loop {
        let pending = split.pending();
        if pending.is_empty() || Instant::now() >= split.deadline {
            break;
        }
        let routes = split.resolve(&pending).await;
        let plan = split.route(&pending, &routes);
        drop(routes);
        let mut follow = Followup {
            refresh_metadata: split.settle_unroutable(&plan.unroutable),
            stale_items: Vec::new(),
            refresh_coordinators: Vec::new(),
        };
        split.send(plan.parts, &mut follow).await;
        split.refresh(follow);
        if !split.next_round().await {
            break;
        }
    }
    split.into_response()
}

/// One call of the split driver: the caller's items, where each one stands, and what the
/// rounds have gathered so far.
struct Split<'t, R: SplitApi> {
    t: &'t Transport,
    /// The call's clock: its deadline, failed attempts and backoff.
    clock: RetryClock,
    deadline: Instant,
    timeout_ms: u64,
    /// The caller's request without its items (shared with the send tasks).
    template: Arc<R>,
    /// The caller's items in the caller's order (shared with the send tasks).
    items: Arc<Vec<R::Item>>,
    /// Per item: pending, or answered.
    states: Vec<State<R::Answer>>,
    /// Response-wide data merged from every answer.
    extra: R::Extra,
    /// The largest `throttle_time_ms` of the answers.
    throttle: i32,
    /// Whether any item was answered, by a broker or by metadata.
    answered_any: bool,
    /// The last retriable error: the call's error when nothing was answered.
    last_err: Option<Error>,
    /// The last error a retry cannot mend, preferred over `last_err`.
    fatal_err: Option<Error>,
    /// Whether metadata was marked stale before this round: a partition missing from a fresh
    /// Metadata response is final (UNKNOWN_TOPIC_OR_PARTITION), not retried.
    metadata_fresh: bool,
}

/// What routing one round's pending items needs: the metadata (when an item is routed by it)
/// and the coordinator of each group or transactional id (or the code saying why there is none).
struct Routes {
    metadata: Option<Arc<Metadata>>,
    coordinators: HashMap<(CoordinatorType, String), Result<i32, ErrorCode>>,
}

impl<'t, R: SplitApi> Split<'t, R> {
    /// Takes `req` apart; every item is pending, except the repeats of a partition.
    fn new(t: &'t Transport, req: R, timeout_ms: u64) -> Self {
        let clock = t.retry_within(R::API_KEY.name(), timeout_ms);
        let deadline = clock.deadline();
        let (template, items) = req.split();
        let n = items.len();
        let mut split = Split {
            t,
            clock,
            deadline,
            timeout_ms,
            template: Arc::new(template),
            items: Arc::new(items),
            states: (0..n)
                .map(|_| State::Pending {
                    last: ErrorCode::REQUEST_TIMED_OUT,
                })
                .collect(),
            extra: R::Extra::default(),
            throttle: 0,
            answered_any: n == 0,
            last_err: None,
            fatal_err: None,
            metadata_fresh: false,
        };
        split.answer_repeats();
        split
    }

    /// A partition listed twice: the first copy is sent, the later ones are answered at once
    /// with INVALID_REQUEST (as Kafka answers a repeated partition in ListOffsets) and never
    /// sent, so no copy is written twice while its caller is told it failed.
    fn answer_repeats(&mut self) {
        let mut seen: HashSet<(&str, i32)> = HashSet::new();
        for (i, item) in self.items.iter().enumerate() {
            if let Route::Leader { topic, partition } = R::target(item)
                && !seen.insert((topic, partition))
            {
                self.states[i] = State::Done(R::failed(item, ErrorCode::INVALID_REQUEST));
            }
        }
    }

    /// The items still to be sent, in the caller's order.
    fn pending(&self) -> Vec<usize> {
        (0..self.states.len())
            .filter(|&i| matches!(self.states[i], State::Pending { .. }))
            .collect()
    }

    /// Looks up what routing the `pending` items needs, within the deadline: the metadata,
    /// then the coordinators. A failed look-up is kept in `last_err`; its items come out of
    /// [`Split::route`] unroutable.
    async fn resolve(&mut self, pending: &[usize]) -> Routes {
        let metadata = self.fetch_metadata(pending).await;
        let coordinators = self.find_coordinators(pending).await;
        Routes {
            metadata,
            coordinators,
        }
    }

    /// The metadata of the pending items' topics, when any item is routed by metadata (a
    /// partition leader, a named broker, any broker).
    async fn fetch_metadata(&mut self, pending: &[usize]) -> Option<Arc<Metadata>> {
        let needs_metadata = pending.iter().any(|&i| {
            matches!(
                R::target(&self.items[i]),
                Route::Leader { .. } | Route::AnyBroker | Route::Broker(_)
            )
        });
        if !needs_metadata {
            return None;
        }
        let mut topics: Vec<&str> = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        for &i in pending {
            if let Route::Leader { topic, .. } = R::target(&self.items[i])
                && seen.insert(topic)
            {
                topics.push(topic);
            }
        }
        match tokio::time::timeout_at(self.deadline, self.t.metadata_for(&topics)).await {
            Ok(Ok(md)) => Some(md),
            Ok(Err(e)) => {
                self.last_err = Some(e);
                None
            }
            Err(_) => None,
        }
    }

    /// Coordinator lookups (FindCoordinator, cached), one per group, concurrently.
    async fn find_coordinators(
        &mut self,
        pending: &[usize],
    ) -> HashMap<(CoordinatorType, String), Result<i32, ErrorCode>> {
        let mut lookups = JoinSet::new();
        let mut coordinators: HashMap<(CoordinatorType, String), Result<i32, ErrorCode>> =
            HashMap::new();
        for &i in pending {
            if let Route::Coordinator(kind, key) = R::target(&self.items[i]) {
                let id = (kind, key.to_owned());
                if coordinators.contains_key(&id) {
                    continue;
                }
                coordinators.insert(id.clone(), Err(ErrorCode::REQUEST_TIMED_OUT));
                let t = self.t.clone();
                let deadline = self.deadline;
                lookups.spawn(async move {
                    let found = t.coordinator_once(id.0, &id.1);
                    let found = tokio::time::timeout_at(deadline, found).await;
                    (id, found)
                });
            }
        }
        while let Some(joined) = lookups.join_next().await {
            let Ok((g, found)) = joined else { continue };
            let r = match found {
                Ok(Ok(node)) => Ok(node),
                Ok(Err(e)) => {
                    let code = e
                        .error_code()
                        .unwrap_or_else(|| classify(&e).map_or(final_code(&e), Failure::code));
                    self.last_err = Some(e);
                    Err(code)
                }
                Err(_) => Err(ErrorCode::REQUEST_TIMED_OUT),
            };
            coordinators.insert(g, r);
        }
        coordinators
    }

    /// Groups the `pending` items by broker ([`plan`]): a partition's leader, a group's
    /// coordinator, the broker an item names; any-broker items go to the transport's preferred
    /// broker (an open connection first, recently failed brokers last), so a retry moves away
    /// from a broker that failed.
    fn route(&self, pending: &[usize], routes: &Routes) -> Plan {
        let metadata = &routes.metadata;
        let any_node = metadata
            .as_ref()
            .and_then(|md| self.t.broker_order(md).first().copied());
        let index = metadata.as_deref().map(topic_index);
        plan(pending, |i| match R::target(&self.items[i]) {
            Route::Leader { topic, partition } => match (metadata, &index) {
                (Some(md), Some(index)) => leader_in(md, index.get(topic).copied(), partition),
                _ => Err(ErrorCode::NETWORK_EXCEPTION),
            },
            Route::Coordinator(kind, key) => routes
                .coordinators
                .get(&(kind, key.to_owned()))
                .copied()
                .unwrap_or(Err(ErrorCode::COORDINATOR_NOT_AVAILABLE)),
            Route::Broker(id) => match metadata {
                Some(md) if md.broker(id).is_some() => Ok(id),
                Some(_) => Err(ErrorCode::BROKER_NOT_AVAILABLE),
                None => Err(ErrorCode::NETWORK_EXCEPTION),
            },
            Route::AnyBroker => any_node.ok_or(ErrorCode::NETWORK_EXCEPTION),
        })
    }

    /// The items [`Split::route`] found no broker for: final with their code, or pending again
    /// (a coordinator is forgotten here). Returns whether metadata must be refreshed first.
    fn settle_unroutable(&mut self, unroutable: &[(usize, ErrorCode)]) -> bool {
        let mut refresh_metadata = false;
        for &(i, code) in unroutable {
            let item = &self.items[i];
            let retry = match code {
                // Only a stale cache can be wrong about a partition that does not exist.
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION if self.metadata_fresh => ItemRetry::No,
                // A broker that a fresh Metadata does not list is not coming back soon.
                ErrorCode::BROKER_NOT_AVAILABLE if self.metadata_fresh => ItemRetry::No,
                ErrorCode::NETWORK_EXCEPTION | ErrorCode::BROKER_NOT_AVAILABLE => {
                    ItemRetry::RefreshMetadata
                }
                ErrorCode::REQUEST_TIMED_OUT => ItemRetry::Backoff,
                c => R::retry(&self.template, item, c),
            };
            match retry {
                ItemRetry::No => {
                    self.answered_any = true;
                    self.states[i] = State::Done(R::failed(item, code));
                }
                ItemRetry::RefreshMetadata => {
                    refresh_metadata = true;
                    self.states[i] = State::Pending { last: code };
                }
                ItemRetry::RefreshCoordinator => {
                    if let Route::Coordinator(kind, key) = R::target(item) {
                        self.t.invalidate_coordinator(kind, key);
                    }
                    self.states[i] = State::Pending { last: code };
                }
                ItemRetry::Backoff => self.states[i] = State::Pending { last: code },
            }
        }
        refresh_metadata
    }

    /// One task per node: connect, pick the version, build the node's request(s) (chunked
    /// when the version caps the items per request) and send them ([`send_part`]); all nodes
    /// concurrently, each within the deadline. Each request's outcome is settled as it comes
    /// ([`Split::settle_part`]), with what to refresh added to `follow`.
    async fn send(&mut self, parts: Vec<(i32, Vec<usize>)>, follow: &mut Followup) {
        let mut tasks: JoinSet<PartResult<R>> = JoinSet::new();
        for (node, list) in parts {
            let t = self.t.clone();
            let template = Arc::clone(&self.template);
            let items = Arc::clone(&self.items);
            let (deadline, timeout_ms) = (self.deadline, self.timeout_ms);
            tasks.spawn(async move {
                let sent = tokio::time::timeout_at(
                    deadline,
                    send_part::<R>(&t, node, list.clone(), &template, &items, deadline),
                )
                .await;
                match sent {
                    Ok(parts) => parts,
                    Err(_) => vec![(
                        list,
                        0,
                        Err(PartError::Sent(Error::Timeout {
                            operation: R::API_KEY.name(),
                            timeout: Duration::from_millis(timeout_ms),
                        })),
                    )],
                }
            });
        }
        while let Some(joined) = tasks.join_next().await {
            let Ok(parts) = joined else {
                continue;
            };
            for (list, version, result) in parts {
                self.settle_part(&list, version, result, follow);
            }
        }
    }

    /// Records the outcome of one request for the items `list`: for acks=0 Produce, success;
    /// a response, item by item ([`settle`]); no response, [`Split::fail_part`].
    fn settle_part(
        &mut self,
        list: &[usize],
        version: i16,
        result: Result<Option<R::Response>, PartError>,
        follow: &mut Followup,
    ) {
        match result {
            Ok(None) => {
                // acks=0: nothing to read back; the write succeeded.
                self.answered_any = true;
                for &i in list {
                    self.states[i] = State::Done(R::failed(&self.items[i], ErrorCode::NONE));
                }
            }
            Ok(Some(resp)) => {
                self.answered_any = true;
                let refs: Vec<&R::Item> = list.iter().map(|&i| &self.items[i]).collect();
                let (answers, throttle_ms) = R::answers(resp, &refs, version, &mut self.extra);
                self.throttle = self.throttle.max(throttle_ms);
                let (t, extra) = (self.t, &self.extra);
                settle::<R>(
                    &self.template,
                    &self.items,
                    &mut self.states,
                    list,
                    answers,
                    |item, answer| R::apply_hint(t, item, answer, extra),
                    follow,
                );
            }
            Err(err) => self.fail_part(list, err, follow),
        }
    }

    /// A request for the items `list` got no response: each item is pending again when the
    /// failure may be retried for it ([`fail_item`]), else final with the error's code; the
    /// error is kept for the call's result.
    fn fail_part(&mut self, list: &[usize], err: PartError, follow: &mut Followup) {
        let (e, failure) = match err {
            // No connection: nothing of this part was sent, whatever the error.
            PartError::NoConn(e) => (e, Some(Failure::NotSent)),
            PartError::Sent(e) => {
                let f = classify(&e);
                (e, f)
            }
        };
        let retriable = classify(&e).is_some();
        let failure = failure.unwrap_or(Failure::Lost);
        let code = if retriable {
            failure.code()
        } else {
            final_code(&e)
        };
        for &i in list {
            fail_item::<R>(
                &self.template,
                &self.items,
                &mut self.states,
                i,
                failure,
                code,
                retriable,
            );
            if retriable && matches!(R::target(&self.items[i]), Route::Coordinator(..)) {
                follow.refresh_coordinators.push(i);
            }
        }
        if retriable {
            follow.refresh_metadata = true;
            self.last_err = Some(e);
        } else {
            self.fatal_err = Some(e);
        }
    }

    /// Forgets the coordinators and marks the metadata stale as the round's answers asked.
    fn refresh(&mut self, follow: Followup) {
        for i in follow.refresh_coordinators {
            if let Route::Coordinator(kind, key) = R::target(&self.items[i]) {
                self.t.invalidate_coordinator(kind, key);
            }
        }
        self.metadata_fresh = follow.refresh_metadata || !follow.stale_items.is_empty();
        if follow.refresh_metadata {
            self.t.invalidate_metadata();
            return;
        }
        // Partition errors: only those partitions' topics are looked up again.
        let mut topics: Vec<&str> = Vec::new();
        for &i in &follow.stale_items {
            match R::target(&self.items[i]) {
                Route::Leader { topic, .. } => {
                    if !topics.contains(&topic) {
                        topics.push(topic);
                    }
                }
                _ => {
                    self.t.invalidate_metadata();
                    return;
                }
            }
        }
        self.t.invalidate_topics(topics);
    }

    /// Whether another round is due: some item is still pending, and the backoff (for the code
    /// a pending item last failed with) ended before the deadline.
    async fn next_round(&mut self) -> bool {
        let last_code = self.states.iter().find_map(|s| match s {
            State::Pending { last } => Some(*last),
            State::Done(_) => None,
        });
        let Some(last_code) = last_code else {
            return false;
        };
        self.clock
            .backoff(Error::broker(R::API_KEY.name(), last_code, None))
            .await
            .is_ok()
    }

    /// The call's result once no round is left: the merged response ([`finish`]), or, when
    /// nothing at all was answered, one error for the whole request, preferring one a retry
    /// cannot mend (e.g. UnsupportedVersion, returned as is).
    fn into_response(self) -> Result<R::Response> {
        if !self.answered_any {
            if let Some(e) = self.fatal_err {
                return Err(e);
            }
            if let Some(e) = self.last_err {
                return Err(self.clock.exceeded(e));
            }
        }
        let template = Arc::try_unwrap(self.template).unwrap_or_else(|t| (*t).clone());
        let items = match Arc::try_unwrap(self.items) {
            Ok(items) => items,
            // Every task has been joined, so this does not happen; answer without the caller's
            // items rather than panic.
            Err(_) => return Err(Error::Protocol("split items still shared".into())),
        };
        Ok(finish(
            template,
            items,
            self.states,
            self.throttle,
            self.extra,
        ))
    }
}

/// What the driver does after a round's answers are settled.
#[derive(Debug, Default)]
struct Followup {
    /// Mark the whole metadata stale before the next round (a broker failed, an item had no
    /// broker).
    refresh_metadata: bool,
    /// Items whose answer asked for fresh metadata: their topics are marked stale (only
    /// theirs, `Transport::invalidate_topics`).
    stale_items: Vec<usize>,
    /// Items whose group coordinator must be looked up again.
    refresh_coordinators: Vec<usize>,
}

/// Records the answers a broker gave to the items `list` (same order as `answers`): done when
/// fine or final, pending again (with what to refresh in `follow`) when [`SplitApi::retry`] says
/// so. An item the broker left out is final with `UNKNOWN_SERVER_ERROR`. `hint` applies a
/// KIP-951 leader hint and says whether the cache now knows the new leader.
fn settle<R: SplitApi>(
    template: &R,
    items: &[R::Item],
    states: &mut [State<R::Answer>],
    list: &[usize],
    answers: Vec<Option<R::Answer>>,
    mut hint: impl FnMut(&R::Item, &R::Answer) -> bool,
    follow: &mut Followup,
) {
    for (&i, answer) in list.iter().zip(answers) {
        let item = &items[i];
        let Some(answer) = answer else {
            states[i] = State::Done(R::failed(item, ErrorCode::UNKNOWN_SERVER_ERROR));
            continue;
        };
        let code = R::error_code(&answer);
        if code.is_ok() {
            states[i] = State::Done(answer);
            continue;
        }
        match R::retry(template, item, code) {
            ItemRetry::No => states[i] = State::Done(answer),
            ItemRetry::Backoff => states[i] = State::Pending { last: code },
            ItemRetry::RefreshMetadata => {
                if !hint(item, &answer) {
                    follow.stale_items.push(i);
                }
                states[i] = State::Pending { last: code };
            }
            ItemRetry::RefreshCoordinator => {
                follow.refresh_coordinators.push(i);
                states[i] = State::Pending { last: code };
            }
        }
    }
}

/// The merged response: each item with its answer, in the caller's order; an item still pending
/// carries the code it last failed with.
fn finish<R: SplitApi>(
    template: R,
    items: Vec<R::Item>,
    states: Vec<State<R::Answer>>,
    throttle_time_ms: i32,
    extra: R::Extra,
) -> R::Response {
    let answers: Vec<(R::Item, R::Answer)> = items
        .into_iter()
        .zip(states)
        .map(|(item, state)| {
            let answer = match state {
                State::Done(a) => a,
                State::Pending { last } => R::failed(&item, last),
            };
            (item, answer)
        })
        .collect();
    R::merge(template, answers, throttle_time_ms, extra)
}

/// Records a part failure for item `i`: pending again when the failure may be retried for this
/// item, else final with `code`.
fn fail_item<R: SplitApi>(
    template: &R,
    items: &[R::Item],
    states: &mut [State<R::Answer>],
    i: usize,
    failure: Failure,
    code: ErrorCode,
    retriable: bool,
) {
    if retriable && R::retry_failure(template, &items[i], failure) {
        states[i] = State::Pending { last: code };
    } else {
        states[i] = State::Done(R::failed(&items[i], code));
    }
}

// ---------------------------------------------------------------------------------------------
// The split routes of `Transport::round_trip`.

/// Implements [`Routed`] for request types sent through the split driver [`run`].
macro_rules! split_routes {
    ($($ty:ident),* $(,)?) => {$(
        impl sealed::Sealed for m::$ty {}
        impl Routed for m::$ty {
            async fn route(t: &Transport, req: Self, timeout_ms: u64) -> Result<Self::Response> {
                run(t, req, timeout_ms).await
            }
        }
    )*};
}

split_routes!(
    ProduceRequest,
    ListOffsetsRequest,
    DeleteRecordsRequest,
    OffsetForLeaderEpochRequest,
    DescribeProducersRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    OffsetFetchRequest,
    DeleteGroupsRequest,
    ConsumerGroupDescribeRequest,
    ShareGroupDescribeRequest,
    StreamsGroupDescribeRequest,
    DescribeTransactionsRequest,
);

/// Implements [`Routed`] for request types sent to every broker and merged
/// ([`every::round_trip_every`]).
macro_rules! every_broker_routes {
    ($($ty:ident),* $(,)?) => {$(
        impl sealed::Sealed for m::$ty {}
        impl Routed for m::$ty {
            async fn route(t: &Transport, req: Self, timeout_ms: u64) -> Result<Self::Response> {
                every::round_trip_every(t, req, timeout_ms).await
            }
        }
    )*};
}

every_broker_routes!(ListGroupsRequest, ListTransactionsRequest);

#[cfg(test)]
mod tests;
