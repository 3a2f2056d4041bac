//! The rules by which an answer changes a cursor, next to the state they change: `apply_one`
//! (a Fetch answer's partition, the one place a fetch answer moves a cursor) and `truncated`
//! (the KIP-320 truncation decision, for validation answers and Fetch answers with a diverging
//! epoch alike). Both run under the Reader's state lock and leave what must happen outside it
//! in a [`Followup`]. Imports `cursor.rs`, `config.rs`, `stats.rs`, `work.rs` (`Planned`,
//! `Answer`, `Followup`) and `crate::error`; never the facade, `shared.rs` or a task file.

use std::sync::Arc;

use kafkit_protocol::ErrorCode;
use tokio::time::Instant;

use super::config::{AutoOffsetReset, Config};
use super::cursor::{Cursor, CursorState, Position, StartOffset, State};
use super::stats::Counters;
use super::work::{Answer, Followup, Planned};
use crate::error::Error;
use crate::error::reader::ReaderError;
use crate::ops::meter;

/// `apply` for one partition, under the lock: the one place a fetch answer changes a cursor.
pub(crate) fn apply_one(
    st: &mut State,
    config: &Config,
    node: i32,
    planned: &Planned,
    answer: Answer,
    fu: &mut Followup,
    counters: &Counters,
) {
    let now = Instant::now();
    let replica = answer.preferred_read_replica;
    let named = (replica >= 0 && replica != node).then(|| st.brokers.contains(&replica));
    let Some(c) = st.cursor_mut(&planned.topic, planned.partition) else {
        return;
    };
    if answer.error != ErrorCode::NONE {
        tracing::debug!(topic = %planned.topic, partition = planned.partition, offset = planned.data.fetch_offset, error = %answer.error, failures = c.failures, "fetch answered an error for a partition");
    }
    match answer.error {
        ErrorCode::NONE => answered(st, config, node, planned, answer, named, now, fu, counters),
        ErrorCode::OFFSET_OUT_OF_RANGE => out_of_range(st, config, planned, &answer, now, fu),
        ErrorCode::NOT_LEADER_OR_FOLLOWER
        | ErrorCode::LEADER_NOT_AVAILABLE
        | ErrorCode::FENCED_LEADER_EPOCH
        | ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        | ErrorCode::UNKNOWN_TOPIC_ID
        | ErrorCode::INCONSISTENT_TOPIC_ID
        | ErrorCode::REPLICA_NOT_AVAILABLE
        | ErrorCode::KAFKA_STORAGE_ERROR
        | ErrorCode::OFFSET_NOT_AVAILABLE => leader_moved(c, config, planned, &answer, now, fu),
        code if code.is_retriable()
            || code == ErrorCode::UNKNOWN_LEADER_EPOCH
            || code == ErrorCode::UNKNOWN_SERVER_ERROR =>
        {
            // UNKNOWN_SERVER_ERROR too: Java's fetcher logs it and fetches again.
            back_off(c, config, now);
            if code == ErrorCode::UNKNOWN_LEADER_EPOCH {
                fu.metadata_stale = true;
                fu.wake_manager = true;
            }
        }
        ErrorCode::TOPIC_AUTHORIZATION_FAILED => refused(st, config, planned, &answer, now, fu),
        code => {
            let offset = c.fetch.offset;
            let source = Error::broker("Fetch", code, None);
            let error = partition_error(planned, offset, source);
            st.fail(&planned.topic, planned.partition, error);
            fu.queued = true;
        }
    }
}

/// A partition's answer with records (or none): watermarks, the preferred replica, a
/// diverging epoch (to `truncated`), then the records queued and the position moved.
#[allow(clippy::too_many_arguments)]
fn answered(
    st: &mut State,
    config: &Config,
    node: i32,
    planned: &Planned,
    answer: Answer,
    named: Option<bool>,
    now: Instant,
    fu: &mut Followup,
    counters: &Counters,
) {
    let (topic, partition) = (&planned.topic, planned.partition);
    let Some(c) = st.cursor_mut(topic, partition) else {
        return;
    };
    c.failures = 0;
    c.refusal_reported = false;
    note_watermarks(c, &answer);
    if let Some(listed) = named {
        let until = now + config.preferred_replica_recheck;
        match c.prefer_replica(answer.preferred_read_replica, until, listed) {
            Some(node) => fu.nodes.push(node),
            None => {
                // Metadata may not list a new broker yet: the manager asks for it.
                st.replica_lookup_wanted = true;
                fu.wake_manager = true;
            }
        }
    }
    if let Some((epoch, end)) = answer.diverging {
        let leader = EpochEnd {
            via: Check::Fetch,
            epoch: Some(epoch),
            end_offset: Some(end),
        };
        truncated(st, config, topic, partition, leader, fu);
        return;
    }
    let next = answer.next;
    let fetched = meter::ENABLED.then(|| fetched_counts(&answer));
    if let Some(r) = answer.records {
        Counters::add(&counters.fetched, r.records.len() as u64);
        st.push_records(r);
        fu.queued = true;
    }
    let Some(c) = st.cursor_mut(topic, partition) else {
        return;
    };
    c.advance(next);
    if let Some(n) = fetched {
        note_fetched(c, node, planned, n);
    }
    if let Some((offset, e)) = answer.decode_error {
        c.fetch = Position::new(offset, c.fetch.leader_epoch);
        let error = partition_error(planned, offset, Error::Records(e));
        st.fail(topic, partition, error);
        fu.queued = true;
    } else if answer.too_large {
        let offset = c.fetch.offset;
        let error = Error::Reader(ReaderError::RecordTooLarge {
            topic: topic.to_string(),
            partition,
            offset,
            max_partition_fetch_bytes: planned.data.max_bytes,
        });
        st.fail(topic, partition, error);
        fu.queued = true;
    }
}

/// Records and batches an answer delivers (for the partition's meter).
#[inline(always)]
fn fetched_counts(answer: &Answer) -> (usize, usize) {
    answer
        .records
        .as_ref()
        .map_or((0, 0), |r| (r.records.len(), r.spans.len()))
}

/// The partition's meter after an answer (cargo feature `metrics`): what `node` delivered, and
/// the lag, high watermark minus the fetch position now.
#[inline(always)]
fn note_fetched(c: &mut Cursor, node: i32, planned: &Planned, fetched: (usize, usize)) {
    let lag = if c.high_watermark >= 0 {
        c.high_watermark - c.fetch.offset
    } else {
        -1
    };
    c.meter
        .fetched(node, &planned.topic, planned.partition, fetched, lag);
}

/// The watermarks an answer carries (those it knows).
fn note_watermarks(c: &mut Cursor, answer: &Answer) {
    if answer.high_watermark >= 0 {
        c.high_watermark = answer.high_watermark;
    }
    if answer.last_stable_offset >= 0 {
        c.last_stable_offset = answer.last_stable_offset;
    }
    if answer.log_start_offset >= 0 {
        c.log_start_offset = answer.log_start_offset;
    }
}

/// `OFFSET_OUT_OF_RANGE`: ask the leader (from a replica), wait for queued records, reset by
/// the policy, or fail the partition.
fn out_of_range(
    st: &mut State,
    config: &Config,
    planned: &Planned,
    answer: &Answer,
    now: Instant,
    fu: &mut Followup,
) {
    let (topic, partition) = (&planned.topic, planned.partition);
    let Some(c) = st.cursor_mut(topic, partition) else {
        return;
    };
    if planned.from_replica {
        // A follower may lag: always ask the leader before resetting.
        c.preferred = None;
        fu.nodes.extend(c.leader);
    } else if planned.data.fetch_offset != c.fetch.offset {
        // Answer to an older position: nothing to do.
    } else if c.queued_items > 0 {
        // Records fetched before this position still wait for the application: a reset
        // now would drop them. Java fetches a partition only once its buffered records
        // are consumed, so its reset never meets them: ask again once they are handed
        // out (taking them wakes the source; the backoff bounds the asking meanwhile).
        back_off(c, config, now);
    } else if st.reset_by_policy(topic, partition, config.auto_offset_reset) {
        fu.wake_manager = true;
    } else {
        let error = Error::Reader(ReaderError::OffsetOutOfRange {
            topic: topic.to_string(),
            partition,
            offset: planned.data.fetch_offset,
            log_start_offset: answer.log_start_offset,
            high_watermark: answer.high_watermark,
        });
        st.fail(topic, partition, error);
        fu.queued = true;
    }
}

/// The broker no longer serves the partition: back to the leader (from a replica), to the
/// leader the answer names (KIP-951), or to metadata.
fn leader_moved(
    c: &mut Cursor,
    config: &Config,
    planned: &Planned,
    answer: &Answer,
    now: Instant,
    fu: &mut Followup,
) {
    if planned.from_replica {
        // Back to the leader at once (KIP-392).
        c.preferred = None;
        fu.nodes.extend(c.leader);
        return;
    }
    let (leader, epoch) = answer.current_leader;
    if leader >= 0 && epoch > c.leader_epoch {
        // KIP-951: the new leader came with the answer; no metadata round trip.
        c.leader = Some(leader);
        c.leader_epoch = epoch;
        let topic = Arc::clone(&planned.topic);
        fu.hints.push((topic, planned.partition, leader, epoch));
        fu.nodes.push(leader);
        if c.fetch.leader_epoch.is_some() && c.state == CursorState::Fetching {
            c.state = CursorState::Validate;
            fu.wake_manager = true;
        }
    } else {
        c.leader = None;
        back_off(c, config, now);
        fu.metadata_stale = true;
        fu.wake_manager = true;
    }
}

/// `TOPIC_AUTHORIZATION_FAILED`: Java raises it from poll and fetches again (ACLs may still be
/// propagating): the partition is reported once per run of refusals and tried again after a
/// backoff.
fn refused(
    st: &mut State,
    config: &Config,
    planned: &Planned,
    answer: &Answer,
    now: Instant,
    fu: &mut Followup,
) {
    let Some(c) = st.cursor_mut(&planned.topic, planned.partition) else {
        return;
    };
    back_off(c, config, now);
    if !c.refusal_reported {
        c.refusal_reported = true;
        let offset = c.fetch.offset;
        let source = Error::broker("Fetch", answer.error, None);
        let error = partition_error(planned, offset, source);
        st.warn(&planned.topic, planned.partition, error);
        fu.queued = true;
    }
}

/// One more failure of the cursor: not fetched again before the backoff's end.
fn back_off(c: &mut Cursor, config: &Config, now: Instant) {
    c.failures += 1;
    c.retry_at = Some(now + config.backoff().delay(c.failures));
}

/// The planned partition's error at `offset`, caused by `source`.
fn partition_error(planned: &Planned, offset: i64, source: Error) -> Error {
    Error::Reader(ReaderError::Partition {
        topic: planned.topic.to_string(),
        partition: planned.partition,
        offset,
        source: Box::new(source),
    })
}

/// What [`truncated`] judges: the leader's log holds `epoch` up to `end_offset` (`None`s: it
/// knows no such epoch), as `via` said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EpochEnd {
    pub(crate) via: Check,
    pub(crate) epoch: Option<i32>,
    pub(crate) end_offset: Option<i64>,
}

/// Where the [`EpochEnd`] that [`truncated`] judges came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// An OffsetForLeaderEpoch answer for the fetch position's epoch (validation).
    Validation,
    /// A Fetch answer's `diverging_epoch`: the broker found the `last_fetched_epoch` sent
    /// with the fetch offset inconsistent with its log.
    Fetch,
}

/// The truncation decision (KIP-320; Java `SubscriptionState.maybeCompleteValidation` and the
/// fetcher's diverging-epoch handling), one place for validation answers and Fetch answers
/// that carry a diverging epoch: the leader's log holds `epoch` up to `end_offset`.
/// - `end_offset` at or past the fetch position: the position is valid; fetch on, with the
///   leader's `epoch` as the last fetched epoch (KIP-595's rule for a follower: a Fetch that
///   sent the old one would get the same diverging answer forever). When a Fetch answer names
///   the very epoch that was sent (a broker that contradicts itself), the next Fetch sends no
///   epoch at all, as Java's consumer never does.
/// - below it, but at or past the application's position (records fetched before the fetch
///   position still wait in the queue): only the queued records at or past `end_offset` are
///   dropped, the ones before it are still handed out, and fetching goes on at `end_offset`.
///   No error and no reset: nothing handed out was lost.
/// - below the application's position: the log was truncated under records already handed
///   out. With a reset policy the partition continues at `end_offset` (behind the version
///   barrier: what is still queued is dropped); with `None` it fails with
///   [`ReaderError::LogTruncation`] naming the range.
/// - the leader knows no such epoch (`None`s): reset by the policy, or fail the same way
///   without a diverging offset.
pub(crate) fn truncated(
    st: &mut State,
    config: &Config,
    topic: &Arc<str>,
    partition: i32,
    leader: EpochEnd,
    fu: &mut Followup,
) {
    let Some(c) = st.cursor_mut(topic, partition) else {
        return;
    };
    let pos = c.fetch;
    let lost = Truncation {
        topic,
        partition,
        pos,
        leader,
    };
    let (Some(epoch), Some(end)) = (leader.epoch, leader.end_offset) else {
        // The leader knows no such epoch.
        if st.reset_by_policy(topic, partition, config.auto_offset_reset) {
            fu.wake_manager = true;
        } else {
            st.fail(topic, partition, lost.error());
            fu.queued = true;
        }
        return;
    };
    if end >= pos.offset {
        c.state = CursorState::Fetching;
        c.failures = 0;
        c.fetch.leader_epoch = match leader.via {
            Check::Fetch if pos.leader_epoch == Some(epoch) => None,
            _ => Some(epoch),
        };
        return;
    }
    let handed_out = c.position.map_or(pos.offset, |p| p.offset);
    if end >= handed_out {
        trim_prefetched(st, topic, partition, pos, epoch, end);
    } else {
        truncated_under_handed_out(st, config, lost, epoch, end, fu);
    }
}

/// A divergence found by [`truncated`] at `pos` of `topic`/`partition`.
#[derive(Clone, Copy)]
struct Truncation<'a> {
    topic: &'a Arc<str>,
    partition: i32,
    pos: Position,
    leader: EpochEnd,
}

impl Truncation<'_> {
    /// The partition's `LogTruncation` error.
    fn error(&self) -> Error {
        Error::Reader(ReaderError::LogTruncation {
            topic: self.topic.to_string(),
            partition: self.partition,
            offset: self.pos.offset,
            last_epoch: self.pos.leader_epoch,
            diverging_epoch: self.leader.epoch,
            end_offset: self.leader.end_offset,
        })
    }
}

/// [`truncated`]: the divergence lies in records fetched but not handed out yet: trim them
/// there (Java, which fetches a partition only once its buffered records were consumed, never
/// meets this case; it would keep the valid ones too).
fn trim_prefetched(
    st: &mut State,
    topic: &Arc<str>,
    partition: i32,
    pos: Position,
    epoch: i32,
    end: i64,
) {
    tracing::debug!(
        topic = &**topic,
        partition,
        offset = pos.offset,
        end,
        epoch,
        "reader: diverging log end within the prefetched records; trimmed there"
    );
    if let Some(c) = st.cursor_mut(topic, partition) {
        c.state = CursorState::Fetching;
        c.failures = 0;
        c.fetch = Position::new(end, Some(epoch));
    }
    st.trim(topic, partition, end);
}

/// [`truncated`]: the log was truncated under records already handed out: continue at `end`
/// by the reset policy, or fail the partition.
fn truncated_under_handed_out(
    st: &mut State,
    config: &Config,
    lost: Truncation<'_>,
    epoch: i32,
    end: i64,
    fu: &mut Followup,
) {
    let (topic, partition) = (lost.topic, lost.partition);
    tracing::warn!(
        topic = &**topic,
        partition,
        offset = lost.pos.offset,
        end,
        epoch,
        "reader: log truncation detected"
    );
    if config.auto_offset_reset == AutoOffsetReset::None {
        st.fail(topic, partition, lost.error());
        fu.queued = true;
    } else {
        st.seek(topic, partition, StartOffset::At(end));
        if let Some(c) = st.cursor_mut(topic, partition) {
            c.set_position(Position::new(end, Some(epoch)));
        }
    }
}
