//! The Reader's manager task: leaders, offset resets and position validation, each batched
//! into one request per broker through the transport's split routes (like the Writer batches
//! Produce).
//!
//! A round of named phases: `Shared::manager_work` (under the lock: the topics with unrouted
//! partitions, the partitions awaiting a reset, those awaiting validation; the latter two
//! marked in flight) -> `route` (metadata: leaders and epochs, topic ids; a re-created topic
//! is reset) -> `reset` (ListOffsets: earliest, latest, by timestamp, always from the leader)
//! -> `validate` (OffsetForLeaderEpoch, KIP-320: is the position still in the leader's log?
//! `truncated` decides) -> wait for a wake-up, a backoff's end or the periodic check.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::{
    ListOffsetsRequest, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
    offset_for_leader_epoch_request,
};
use tokio::time::Instant;

use super::apply::{Check, EpochEnd, truncated};
use super::config::Config;
use super::cursor::{Cursor, CursorState, Position, State};
use super::shared::Shared;
use super::work::{Followup, ResetItem, ValidateItem};
use crate::conn::metadata::{Metadata, TopicMetadata};
use crate::error::Error;
use crate::error::reader::ReaderError;
use crate::ops::offsets::{ListedOffset, OffsetSpec, list_offsets_request, list_offsets_results};
use crate::transport::Backoff;

/// Every this often the manager looks at fresh-enough metadata for every assigned topic
/// (leaders that moved without an error, re-created topics), as the Writer's router does.
const PERIODIC: Duration = Duration::from_secs(30);

/// A partition's ListOffsets or OffsetForLeaderEpoch answer is a retriable code: back off, and
/// when the code says the leader is `stale`, forget it and ask for fresh metadata.
fn retry_later(c: &mut Cursor, b: &Backoff, now: Instant, stale: bool, fu: &mut Followup) {
    c.failures += 1;
    c.retry_at = Some(now + b.delay(c.failures));
    if stale {
        c.leader = None;
        fu.metadata_stale = true;
    }
    fu.wake_manager = true;
}

/// A partition's answer to `api` is a code no retry fixes: the partition fails at `offset`
/// with that broker error (ReaderError::Partition), the others go on.
fn fail_partition(
    st: &mut State,
    topic: &Arc<str>,
    partition: i32,
    offset: i64,
    api: &'static str,
    code: ErrorCode,
) {
    let source = Box::new(Error::broker(api, code, None));
    let error = ReaderError::Partition {
        topic: topic.to_string(),
        partition,
        offset,
        source,
    };
    st.fail(topic, partition, Error::Reader(error));
}

/// The manager task.
pub(crate) async fn run(shared: Arc<Shared>) {
    let mut last_check = Instant::now();
    while let Some(work) = shared.manager_work() {
        let periodic = last_check.elapsed() >= PERIODIC;
        let busy = !work.route.is_empty()
            || !work.resets.is_empty()
            || !work.validations.is_empty()
            || work.replica_lookup;
        if !work.route.is_empty() || periodic || work.replica_lookup {
            let topics = if periodic || work.replica_lookup {
                shared.topics()
            } else {
                work.route.clone()
            };
            if work.replica_lookup {
                let names: Vec<&str> = topics.iter().map(|t| &**t).collect();
                shared.transport.invalidate_topics(names);
            }
            route(&shared, &topics).await;
            last_check = Instant::now();
            if !work.route.is_empty() {
                // Newly routed partitions may need a reset or a validation now; those still
                // unrouted carry a backoff, so going round again cannot spin.
                continue;
            }
        }
        if !work.resets.is_empty() {
            reset(&shared, work.id, work.resets).await;
        }
        if !work.validations.is_empty() {
            validate(&shared, work.id, work.validations).await;
        }
        let now = Instant::now();
        let mut until = last_check + PERIODIC;
        if let Some(due) = work.next_due {
            until = until.min(due);
        }
        if busy {
            // Whatever is left after a busy round waits at least the first backoff: a failing
            // metadata or offset look-up cannot spin.
            until = until.max(now + shared.config.retry_backoff.max(Duration::from_millis(10)));
        }
        let _ = tokio::time::timeout_at(until, shared.manager_wake.notified()).await;
    }
}

/// `route`: leaders, leader epochs and topic ids from metadata.
async fn route(shared: &Arc<Shared>, topics: &[Arc<str>]) {
    if topics.is_empty() {
        return;
    }
    let names: Vec<&str> = topics.iter().map(|t| &**t).collect();
    match shared.transport.metadata_for(&names).await {
        Ok(md) => {
            let fu = {
                let mut st = shared.lock();
                apply_metadata(&mut st, &shared.config, &md, topics)
            };
            shared.follow(fu);
        }
        Err(e) => {
            tracing::debug!(error = %e, "reader: metadata failed");
            let mut st = shared.lock();
            let b = shared.config.backoff();
            let now = Instant::now();
            for (_, _, c) in st.cursors_mut() {
                if c.leader.is_none() {
                    c.failures += 1;
                    c.retry_at = Some(now + b.delay(c.failures));
                }
            }
        }
    }
}

/// Applies metadata to the cursors of `topics`, under the lock.
pub(crate) fn apply_metadata(
    st: &mut State,
    config: &Config,
    md: &Metadata,
    topics: &[Arc<str>],
) -> Followup {
    let mut fu = Followup::default();
    let b = config.backoff();
    let now = Instant::now();
    st.brokers = md.brokers.iter().map(|b| b.node_id).collect();
    note_listed_replicas(st, md, now, &mut fu);
    for name in topics {
        if !st.topics.contains_key(name) {
            continue;
        }
        let tm = md.topic(name);
        let code = tm.map_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, |t| t.error_code);
        if !code.is_ok() {
            topic_not_routed(st, name, code, &b, now, &mut fu);
            continue;
        }
        let Some(tm) = tm else { continue };
        note_topic_id(st, config, name, tm, &mut fu);
        let Some(tc) = st.topics.get_mut(name) else {
            continue;
        };
        for (p, c) in tc.partitions.iter_mut() {
            route_partition(c, *p, tm, md, &b, now, &mut fu);
        }
    }
    fu.nodes.sort_unstable();
    fu.nodes.dedup();
    fu
}

/// `apply_metadata`: a preferred read replica remembered while metadata did not list it,
/// listed now.
fn note_listed_replicas(st: &mut State, md: &Metadata, now: Instant, fu: &mut Followup) {
    for (_, _, c) in st.cursors_mut() {
        if let Some((replica, until)) = c.unlisted_replica
            && until > now
            && md.broker(replica).is_some()
        {
            fu.nodes.extend(c.prefer_replica(replica, until, true));
        }
    }
}

/// `apply_metadata`: metadata answered topic `name` with `code`: its unrouted partitions back
/// off (a retriable code), or every partition fails.
fn topic_not_routed(
    st: &mut State,
    name: &Arc<str>,
    code: ErrorCode,
    b: &Backoff,
    now: Instant,
    fu: &mut Followup,
) {
    let Some(tc) = st.topics.get_mut(name) else {
        return;
    };
    if code.is_retriable() {
        for c in tc.partitions.values_mut() {
            if c.leader.is_none() {
                c.failures += 1;
                c.retry_at = Some(now + b.delay(c.failures));
            }
        }
        return;
    }
    let parts: Vec<i32> = tc
        .partitions
        .iter()
        .filter(|(_, c)| c.state != CursorState::Failed)
        .map(|(p, _)| *p)
        .collect();
    for p in parts {
        let offset = st.cursor(name, p).map_or(-1, |c| c.fetch.offset);
        fail_partition(st, name, p, offset, "Metadata", code);
        fu.queued = true;
    }
}

/// `apply_metadata`: the topic id metadata gives `name`. A topic deleted and created again
/// keeps its name and gets a new id (KIP-516): its partitions are reset by the policy (or
/// fail) and routed afresh.
fn note_topic_id(
    st: &mut State,
    config: &Config,
    name: &Arc<str>,
    tm: &TopicMetadata,
    fu: &mut Followup,
) {
    let Some(tc) = st.topics.get_mut(name) else {
        return;
    };
    let recreated = !tc.topic_id.is_zero() && !tm.topic_id.is_zero() && tc.topic_id != tm.topic_id;
    let old_id = tc.topic_id;
    if !tm.topic_id.is_zero() {
        tc.topic_id = tm.topic_id;
    }
    if !recreated {
        return;
    }
    tracing::warn!(topic = &**name, %old_id, new_id = %tm.topic_id, "reader: topic re-created");
    let parts: Vec<i32> = tc.partitions.keys().copied().collect();
    for p in parts {
        if st.reset_by_policy(name, p, config.auto_offset_reset) {
            fu.wake_manager = true;
        } else {
            st.fail(
                name,
                p,
                Error::Reader(ReaderError::TopicRecreated {
                    topic: name.to_string(),
                    old_id,
                    new_id: tm.topic_id,
                }),
            );
            fu.queued = true;
        }
        if let Some(c) = st.cursor_mut(name, p) {
            c.leader = None;
            c.leader_epoch = -1;
        }
    }
}

/// `apply_metadata`: the leader and epoch metadata gives partition `p` (KIP-320: a new epoch
/// means validating the position), or a backoff and fresh metadata when it gives none.
fn route_partition(
    c: &mut Cursor,
    p: i32,
    tm: &TopicMetadata,
    md: &Metadata,
    b: &Backoff,
    now: Instant,
    fu: &mut Followup,
) {
    let pm = tm.partitions.iter().find(|pm| pm.partition == p);
    let leader = pm
        .filter(|pm| pm.error_code.is_ok() || pm.leader_id >= 0)
        .map(|pm| (pm.leader_id, pm.leader_epoch))
        .filter(|(l, _)| *l >= 0 && md.broker(*l).is_some());
    let Some((leader, epoch)) = leader else {
        c.leader = None;
        c.failures += 1;
        c.retry_at = Some(now + b.delay(c.failures));
        // The next look-up asks the cluster again, not the cached answer: a leader
        // missing from it (no leader, or a broker the answer did not list) stays
        // missing there until `metadata_max_age` (Java's `requestUpdate` on a
        // partition without a leader).
        fu.metadata_stale = true;
        return;
    };
    if epoch >= 0 && epoch < c.leader_epoch {
        // Older than what a KIP-951 hint already told: keep the hint.
        return;
    }
    let moved = c.leader_epoch >= 0 && epoch > c.leader_epoch;
    if c.leader != Some(leader) || c.leader_epoch != epoch {
        c.leader = Some(leader);
        c.leader_epoch = epoch;
        if moved && c.state == CursorState::Fetching && c.fetch.leader_epoch.is_some() {
            // KIP-320: after a leader change, check the position is still in the log.
            c.state = CursorState::Validate;
            fu.wake_manager = true;
        }
    }
    if c.leader.is_some() {
        c.retry_at = c.retry_at.filter(|_| c.state != CursorState::Fetching);
    }
    fu.nodes.push(leader);
}

/// `reset`: one ListOffsets (split per leader by the transport) for every partition awaiting
/// a reset.
async fn reset(shared: &Arc<Shared>, id: u64, items: Vec<ResetItem>) {
    let parts: Vec<(&str, i32, OffsetSpec)> = items
        .iter()
        .map(|i| (&*i.topic, i.partition, i.spec))
        .collect();
    let result = list_offsets(shared, &items, &parts).await;
    let mut fu = Followup::default();
    let b = shared.config.backoff();
    let now = Instant::now();
    {
        let mut st = shared.lock();
        match result {
            Ok(listed) => {
                for (i, l) in items.iter().zip(listed) {
                    reset_one(&mut st, id, i, &l, &b, now, &mut fu);
                }
            }
            Err(e) => reset_failed(&mut st, id, &items, e, &b, now, &mut fu),
        }
    }
    shared.follow(fu);
}

/// `reset`'s request: ListOffsets for `parts`, each with its cursor's leader epoch.
async fn list_offsets(
    shared: &Arc<Shared>,
    items: &[ResetItem],
    parts: &[(&str, i32, OffsetSpec)],
) -> Result<Vec<ListedOffset>, Error> {
    let mut req = list_offsets_request(
        parts,
        shared.config.isolation_level,
        crate::ops::versions::client_max_for::<ListOffsetsRequest>(),
    )?;
    let epochs: HashMap<(&str, i32), i32> = items
        .iter()
        .map(|i| ((&*i.topic, i.partition), i.leader_epoch))
        .collect();
    for t in &mut req.topics {
        for p in &mut t.partitions {
            p.current_leader_epoch = epochs
                .get(&(t.name.as_str(), p.partition_index))
                .copied()
                .unwrap_or(-1);
        }
    }
    let resp = shared
        .transport
        .round_trip_within(req, shared.transport.default_api_timeout())
        .await?;
    Ok(list_offsets_results(parts, resp))
}

/// `reset`: the ListOffsets request failed: its partitions back off; a failure no retry fixes
/// is reported.
fn reset_failed(
    st: &mut State,
    id: u64,
    items: &[ResetItem],
    e: Error,
    b: &Backoff,
    now: Instant,
    fu: &mut Followup,
) {
    tracing::debug!(error = %e, "reader: ListOffsets failed");
    for i in items {
        if let Some(c) = st.answered(&i.topic, i.partition, id) {
            c.failures += 1;
            c.retry_at = Some(now + b.delay(c.failures));
        }
    }
    if !e.is_retriable() {
        st.report(e);
        fu.queued = true;
    }
}

/// `reset`: one partition's ListOffsets answer (dropped when the cursor moved on since).
fn reset_one(
    st: &mut State,
    id: u64,
    i: &ResetItem,
    l: &ListedOffset,
    b: &Backoff,
    now: Instant,
    fu: &mut Followup,
) {
    let Some(c) = st.answered(&i.topic, i.partition, id) else {
        return;
    };
    if c.version != i.version || c.state != CursorState::Reset(i.spec) {
        return;
    }
    match l.error_code {
        ErrorCode::NONE if l.offset < 0 => {
            // No record at or after the timestamp: the log end.
            c.state = CursorState::Reset(OffsetSpec::Latest);
            fu.wake_manager = true;
        }
        ErrorCode::NONE => {
            let epoch = (l.leader_epoch >= 0).then_some(l.leader_epoch);
            c.set_position(Position::new(l.offset, epoch));
            c.state = CursorState::Fetching;
            c.failures = 0;
            c.retry_at = None;
            fu.nodes.extend(c.fetch_node(now));
        }
        code if code.is_retriable() => {
            let stale = code.is_invalid_metadata() || code == ErrorCode::FENCED_LEADER_EPOCH;
            retry_later(c, b, now, stale, fu);
        }
        code => {
            let offset = c.fetch.offset;
            fail_partition(st, &i.topic, i.partition, offset, "ListOffsets", code);
            fu.queued = true;
        }
    }
}

/// A partition's OffsetForLeaderEpoch answer: (error, leader epoch, end offset).
type EpochAnswers = HashMap<(String, i32), (ErrorCode, i32, i64)>;

/// `validate`: one OffsetForLeaderEpoch (split per leader) for every partition whose position
/// must be checked against its leader's log (KIP-320).
async fn validate(shared: &Arc<Shared>, id: u64, items: Vec<ValidateItem>) {
    let req = offset_for_leader_epoch(&items);
    let result = shared
        .transport
        .round_trip_within(req, shared.transport.default_api_timeout())
        .await;
    let mut fu = Followup::default();
    let now = Instant::now();
    {
        let mut st = shared.lock();
        let answers: EpochAnswers = match result {
            Ok(resp) => epoch_answers(resp),
            Err(Error::UnsupportedVersion { .. }) => {
                cannot_validate(&mut st, id, &items, now, &mut fu);
                drop(st);
                shared.follow(fu);
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, "reader: OffsetForLeaderEpoch failed");
                HashMap::new()
            }
        };
        for i in &items {
            validate_one(&mut st, &shared.config, id, i, &answers, now, &mut fu);
        }
    }
    shared.follow(fu);
}

/// `validate`'s request: each partition's current leader epoch and the epoch of its position.
fn offset_for_leader_epoch(items: &[ValidateItem]) -> OffsetForLeaderEpochRequest {
    let mut req = OffsetForLeaderEpochRequest::default().with_replica_id(-1);
    for i in items {
        let p = offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
            .with_partition(i.partition)
            .with_current_leader_epoch(i.leader_epoch)
            .with_leader_epoch(i.last_epoch);
        match req.topics.iter_mut().find(|t| *t.topic == *i.topic) {
            Some(t) => t.partitions.push(p),
            None => req.topics.push(
                offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                    .with_topic(i.topic.to_string())
                    .with_partitions(vec![p]),
            ),
        }
    }
    req
}

/// `validate`: the answer by partition.
fn epoch_answers(resp: OffsetForLeaderEpochResponse) -> EpochAnswers {
    resp.topics
        .into_iter()
        .flat_map(|t| {
            let topic = t.topic;
            t.partitions.into_iter().map(move |p| {
                (
                    (topic.clone(), p.partition),
                    (p.error_code, p.leader_epoch, p.end_offset),
                )
            })
        })
        .collect()
}

/// `validate`: a broker without OffsetForLeaderEpoch v2+ cannot validate: fetch as is.
fn cannot_validate(
    st: &mut State,
    id: u64,
    items: &[ValidateItem],
    now: Instant,
    fu: &mut Followup,
) {
    for i in items {
        // The answer is taken (not in flight) whatever the cursor's state now.
        if let Some(c) = st.answered(&i.topic, i.partition, id)
            && c.version == i.version
            && c.state == CursorState::Validate
        {
            c.state = CursorState::Fetching;
            fu.nodes.extend(c.fetch_node(now));
        }
    }
}

/// `validate`: one partition's answer (dropped when the cursor moved on since); a partition
/// the answer left out is retried as if it timed out.
fn validate_one(
    st: &mut State,
    config: &Config,
    id: u64,
    i: &ValidateItem,
    answers: &EpochAnswers,
    now: Instant,
    fu: &mut Followup,
) {
    let Some(c) = st.answered(&i.topic, i.partition, id) else {
        return;
    };
    if c.version != i.version || c.state != CursorState::Validate {
        return;
    }
    let code = answers
        .get(&(i.topic.to_string(), i.partition))
        .map_or(ErrorCode::REQUEST_TIMED_OUT, |a| a.0);
    match code {
        ErrorCode::NONE => {
            let (_, epoch, end) = answers[&(i.topic.to_string(), i.partition)];
            let leader = EpochEnd {
                via: Check::Validation,
                epoch: (epoch >= 0).then_some(epoch),
                end_offset: (end >= 0).then_some(end),
            };
            truncated(st, config, &i.topic, i.partition, leader, fu);
            if let Some(c) = st.cursor(&i.topic, i.partition) {
                fu.nodes.extend(c.fetch_node(now));
            }
        }
        code if code.is_retriable() || code == ErrorCode::UNKNOWN_LEADER_EPOCH => {
            let stale = code.is_invalid_metadata()
                || code == ErrorCode::FENCED_LEADER_EPOCH
                || code == ErrorCode::UNKNOWN_LEADER_EPOCH;
            retry_later(c, &config.backoff(), now, stale, fu);
        }
        code => {
            let offset = c.fetch.offset;
            let api = "OffsetForLeaderEpoch";
            fail_partition(st, &i.topic, i.partition, offset, api, code);
            fu.queued = true;
        }
    }
}
