//! Commits and committed offsets of a member: OffsetCommit with the member's generation (or
//! KIP-848 member epoch), member id and instance id, and OffsetFetch of newly assigned
//! partitions. The requests are built and read by the shared operations
//! (`ops/offsets.rs`: `offset_commit_request`, `offset_commit_results`,
//! `offset_fetch_request`, `offset_fetch_results`); this file adds what a member puts in
//! them and what it does with the answers.
//!
//! From OffsetCommit / OffsetFetch v10 (KIP-848, Kafka 4.1+) topics are named by id. A member
//! names them by id when it knows every topic's id (the transport's cached metadata, less ids
//! the coordinator answered `UNKNOWN_TOPIC_ID` for) and sends v10; else it caps the version at
//! 9 and names them (Java's `CommitRequestManager`: `forTopicIdsOrNames` or `forTopicNames`).
//! The admin client's requests name topics and go at v9 at most, as Java's admin does.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kafkit_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
};
use kafkit_protocol::{ErrorCode, Uuid};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::group::GroupError;
use crate::error::{Error, Result};
use crate::ops::offsets::{
    CommittedOffsets, ListGroupOffsets, OffsetAndMetadata, offset_commit_request,
    offset_commit_results, offset_fetch_request, offset_fetch_results,
};
use crate::reader::{AutoOffsetReset, StartOffset};

/// One partition's offset to commit: `(topic, partition, offset and metadata)`.
pub(crate) type Offset = (String, i32, OffsetAndMetadata);

/// Who commits: what OffsetCommit carries besides the offsets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Identity {
    /// The classic generation, or the KIP-848 member epoch; -1 outside the group.
    pub(crate) generation: i32,
    pub(crate) member_id: String,
    pub(crate) instance_id: Option<String>,
}

/// A commit the application (or auto-commit) asked for, until it is answered.
pub(crate) struct CommitRequest {
    pub(crate) offsets: Vec<Offset>,
    /// Where the outcome goes (`None`: nobody waits, e.g. auto-commit).
    pub(crate) reply: Option<oneshot::Sender<Result<()>>>,
    /// After this, a commit still waiting for a rebalance or a coordinator fails.
    pub(crate) deadline: Instant,
    /// When it was asked for (commit latency).
    pub(crate) asked: Instant,
    /// Whether it is the automatic commit (logged, not reported).
    pub(crate) auto: bool,
    /// Its place in the order the member was asked for commits (set by `Member::commit`): a
    /// partition is sent only by the newest commit that names it.
    pub(crate) seq: u64,
}

impl CommitRequest {
    /// Answers the requester (if one waits).
    pub(crate) fn answer(self, outcome: Result<()>) {
        if let Err(e) = &outcome {
            if self.auto {
                tracing::warn!(error = %e, "auto-commit failed");
            } else {
                tracing::debug!(error = %e, "commit failed");
            }
        }
        if let Some(r) = self.reply {
            let _ = r.send(outcome);
        }
    }
}

/// Ends a `commit` span (`ops/otel.rs`): `error.type` is the first partition's error code,
/// or the failure's, when the commit did not go through.
pub(crate) fn end_commit_span<T>(span: &tracing::Span, r: &Result<(OffsetCommitResponse, T)>) {
    let code = match r {
        Ok((resp, _)) => resp
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.error_code)
            .find(|c| *c != ErrorCode::NONE),
        Err(e) => Some(e.error_code().unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR)),
    };
    if let Some(code) = code {
        crate::ops::otel::record_error(span, Some(code));
    }
}

/// The OffsetCommit of `offsets` for `group_id` as `who` (generation or member epoch).
///
/// Errors: [`Error::InvalidArgument`] for an empty list.
pub(crate) fn commit_request(
    group_id: &str,
    who: &Identity,
    offsets: &[Offset],
) -> Result<OffsetCommitRequest> {
    Ok(offset_commit_request(group_id, offsets)?
        .with_generation_id_or_member_epoch(who.generation)
        .with_member_id(who.member_id.clone())
        .with_group_instance_id(who.instance_id.clone()))
}

/// The first OffsetCommit / OffsetFetch version that names topics by id, not by name
/// (KIP-848; Apache Kafka 4.1).
pub(crate) const FIRST_TOPIC_ID_VERSION: i16 = 10;

/// Topic name -> id as the member knows them: the transport's cached metadata, less `bad`
/// (ids a coordinator answered `UNKNOWN_TOPIC_ID` for: the topic was deleted, or recreated
/// with a new id the cache has not learned yet).
pub(crate) fn known_ids(
    md: Option<&crate::conn::metadata::Metadata>,
    bad: &HashSet<Uuid>,
) -> HashMap<String, Uuid> {
    md.map(|md| {
        md.topics
            .iter()
            .filter(|t| !t.topic_id.is_zero() && !bad.contains(&t.topic_id))
            .map(|t| (t.name.clone(), t.topic_id))
            .collect()
    })
    .unwrap_or_default()
}

/// Puts the topic ids of `ids` into an OffsetCommit; `true` when every topic got one (the
/// request may then go at v10, where the names are left out).
pub(crate) fn commit_topic_ids(req: &mut OffsetCommitRequest, ids: &HashMap<String, Uuid>) -> bool {
    let mut all = true;
    for t in &mut req.topics {
        match ids.get(&t.name) {
            Some(id) => t.topic_id = *id,
            None => all = false,
        }
    }
    all
}

/// Puts the topic ids of `ids` into an OffsetFetch (the v8+ multi-group form); `true` when
/// every topic got one.
pub(crate) fn fetch_topic_ids(req: &mut OffsetFetchRequest, ids: &HashMap<String, Uuid>) -> bool {
    let mut all = true;
    for g in &mut req.groups {
        for t in g.topics.iter_mut().flatten() {
            match ids.get(&t.name) {
                Some(id) => t.topic_id = *id,
                None => all = false,
            }
        }
    }
    all && req.groups.iter().all(|g| g.topics.is_some())
}

/// Names the topics of a v10 OffsetCommit answer (which carries ids only) by the ids the
/// request carried; a topic already named, or with an id the request did not carry, is left.
pub(crate) fn name_commit_answer(resp: &mut OffsetCommitResponse, ids: &HashMap<String, Uuid>) {
    let names: HashMap<Uuid, &String> = ids.iter().map(|(n, id)| (*id, n)).collect();
    for t in &mut resp.topics {
        if t.name.is_empty()
            && let Some(n) = names.get(&t.topic_id)
        {
            t.name = (*n).clone();
        }
    }
}

/// As [`name_commit_answer`], for a v10 OffsetFetch answer.
pub(crate) fn name_fetch_answer(resp: &mut OffsetFetchResponse, ids: &HashMap<String, Uuid>) {
    let names: HashMap<Uuid, &String> = ids.iter().map(|(n, id)| (*id, n)).collect();
    for g in &mut resp.groups {
        for t in &mut g.topics {
            if t.name.is_empty()
                && let Some(n) = names.get(&t.topic_id)
            {
                t.name = (*n).clone();
            }
        }
    }
}

/// The ids of the topics whose partitions an OffsetCommit answer refused with
/// `UNKNOWN_TOPIC_ID` (the member stops using them until its metadata has others).
pub(crate) fn unknown_commit_ids(resp: &OffsetCommitResponse) -> Vec<Uuid> {
    resp.topics
        .iter()
        .filter(|t| {
            !t.topic_id.is_zero()
                && t.partitions
                    .iter()
                    .any(|p| p.error_code == ErrorCode::UNKNOWN_TOPIC_ID)
        })
        .map(|t| t.topic_id)
        .collect()
}

/// As [`unknown_commit_ids`], for an OffsetFetch answer.
pub(crate) fn unknown_fetch_ids(resp: &OffsetFetchResponse) -> Vec<Uuid> {
    resp.groups
        .iter()
        .flat_map(|g| &g.topics)
        .filter(|t| {
            !t.topic_id.is_zero()
                && t.partitions
                    .iter()
                    .any(|p| p.error_code == ErrorCode::UNKNOWN_TOPIC_ID)
        })
        .map(|t| t.topic_id)
        .collect()
}

/// What an OffsetCommit answer means for the request: done, or what to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CommitOutcome {
    /// Every partition committed.
    Done,
    /// Send again later (`REBALANCE_IN_PROGRESS` until the rebalance ends, a coordinator
    /// that moved or is loading, `STALE_MEMBER_EPOCH` until the next heartbeat).
    Again { code: ErrorCode, relocate: bool },
    /// Failed with this code (the generation is gone, or an error no retry fixes).
    Failed {
        code: ErrorCode,
        message: Option<String>,
    },
}

/// Judges an OffsetCommit answer (one code per partition; the first failure decides).
pub(crate) fn judge_commit(offsets: &[Offset], resp: OffsetCommitResponse) -> CommitOutcome {
    let mut first: Option<Error> = None;
    for (_, r) in offset_commit_results(offsets, resp) {
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    }
    match first {
        None => CommitOutcome::Done,
        Some(e) => judge_code(e.error_code().unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR), e),
    }
}

/// Judges a commit that got no answer (a connection failure, a timeout).
pub(crate) fn judge_failure(e: Error) -> CommitOutcome {
    match e.error_code() {
        Some(code) => judge_code(code, e),
        // The member closed the coordinator's connection under the commit (the coordinator
        // was lost: a heartbeat's failure, a broker down): sent again to the coordinator
        // found next, within the commit's deadline, as Java retries a commit cut by a
        // disconnect. A member's own close waits for its commits before it closes anything.
        None if matches!(
            e,
            Error::ConnectionClosed {
                cause: crate::error::CloseCause::ClosedByClient,
                ..
            }
        ) =>
        {
            CommitOutcome::Again {
                code: ErrorCode::NETWORK_EXCEPTION,
                relocate: true,
            }
        }
        None if e.is_retriable() => CommitOutcome::Again {
            code: ErrorCode::NETWORK_EXCEPTION,
            relocate: true,
        },
        None => CommitOutcome::Failed {
            code: ErrorCode::UNKNOWN_SERVER_ERROR,
            message: Some(e.to_string()),
        },
    }
}

fn judge_code(code: ErrorCode, e: Error) -> CommitOutcome {
    match code {
        // Stale metadata (a topic id the coordinator does not know, v10): sent again once the
        // member has stopped using the id (`Member::bad_ids`), by name or by a newer id.
        ErrorCode::REBALANCE_IN_PROGRESS
        | ErrorCode::STALE_MEMBER_EPOCH
        | ErrorCode::UNKNOWN_TOPIC_ID => CommitOutcome::Again {
            code,
            relocate: false,
        },
        ErrorCode::NOT_COORDINATOR | ErrorCode::COORDINATOR_NOT_AVAILABLE => CommitOutcome::Again {
            code,
            relocate: true,
        },
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
        | ErrorCode::REQUEST_TIMED_OUT
        | ErrorCode::NETWORK_EXCEPTION => CommitOutcome::Again {
            code,
            relocate: false,
        },
        _ => CommitOutcome::Failed {
            code,
            message: match e {
                Error::Broker { message, .. } => message,
                other => Some(other.to_string()),
            },
        },
    }
}

/// The typed error of a failed commit.
pub(crate) fn commit_failed(group_id: &str, code: ErrorCode, message: Option<String>) -> Error {
    Error::Group(GroupError::CommitFailed {
        group_id: group_id.to_owned(),
        code,
        message,
    })
}

/// The OffsetFetch of `partitions` for `group_id` at `version`, with `require_stable`
/// (KIP-447) when asked and the version has it (v7+): an older coordinator is asked without
/// it, as Java's `OffsetFetchRequest.Builder` does unless told to throw.
///
/// Errors: those of `ops::offsets::offset_fetch_request` (none for one group with its
/// partitions listed).
pub(crate) fn fetch_request(
    group_id: &str,
    partitions: &[(Arc<str>, i32)],
    require_stable: bool,
    version: i16,
) -> Result<(ListGroupOffsets, OffsetFetchRequest)> {
    let spec = ListGroupOffsets::partitions(
        group_id,
        partitions.iter().map(|(t, p)| (t.to_string(), *p)),
    );
    let stable = require_stable && version >= 7;
    if require_stable && !stable {
        tracing::debug!(
            group = group_id,
            version,
            "OffsetFetch below v7: committed offsets read without require_stable"
        );
    }
    let req = offset_fetch_request(&[&spec], stable, version)?;
    Ok((spec, req))
}

/// Start offsets of partitions, and partitions whose committed offset could not be read.
pub(crate) type Starts = (Vec<(String, i32, Start)>, Vec<(String, i32, ErrorCode)>);

/// Where an assigned partition starts, or the error the application gets for it instead (it
/// is not fetched until the application seeks it).
pub(crate) type Start = std::result::Result<StartOffset, Error>;

/// Where each partition starts: its committed offset (with its leader epoch, validated by
/// the Reader, KIP-320), else `reset`'s end. A partition whose answer is an error is
/// returned in the second list with its code (`UNSTABLE_OFFSET_COMMIT`: ask again).
pub(crate) fn start_offsets(
    spec: &ListGroupOffsets,
    resp: OffsetFetchResponse,
    reset: AutoOffsetReset,
) -> Result<Starts> {
    let mut results = offset_fetch_results(&[spec], resp);
    let (_, group) = results
        .pop()
        .ok_or_else(|| Error::Protocol("OffsetFetch: no answer for the group".into()))?;
    let parts: CommittedOffsets = group?;
    let mut ok = Vec::with_capacity(parts.len());
    let mut failed = Vec::new();
    for ((topic, partition), r) in parts {
        match r {
            Ok(Some(om)) => {
                let start = match om.leader_epoch {
                    Some(e) => StartOffset::AtEpoch {
                        offset: om.offset,
                        leader_epoch: e,
                    },
                    None => StartOffset::At(om.offset),
                };
                ok.push((topic, partition, Ok(start)));
            }
            Ok(None) => {
                let start = reset_start(reset).ok_or_else(|| no_offset(&topic, partition));
                ok.push((topic, partition, start));
            }
            Err(e) => failed.push((
                topic,
                partition,
                e.error_code().unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR),
            )),
        }
    }
    Ok((ok, failed))
}

/// Where a partition without a committed offset starts (Java `auto.offset.reset`); `None`
/// for `none`: the application gets [`no_offset`] for it instead (Java throws
/// `NoOffsetForPartitionException`).
pub(crate) fn reset_start(reset: AutoOffsetReset) -> Option<StartOffset> {
    match reset {
        AutoOffsetReset::Earliest => Some(StartOffset::Earliest),
        AutoOffsetReset::Latest => Some(StartOffset::Latest),
        AutoOffsetReset::None => None,
    }
}

/// The error a partition without a committed offset gets under `auto_offset_reset = none`.
pub(crate) fn no_offset(topic: &str, partition: i32) -> Error {
    Error::Reader(crate::reader::ReaderError::NoOffsetForPartition {
        topic: topic.to_owned(),
        partition,
    })
}

/// The error a partition whose committed offset cannot be read gets (it is not started:
/// Java's poll fails instead of guessing a position).
pub(crate) fn unreadable(topic: &str, partition: i32, code: ErrorCode) -> Error {
    Error::Reader(crate::reader::ReaderError::Partition {
        topic: topic.to_owned(),
        partition,
        offset: -1,
        source: Box::new(Error::Broker {
            operation: "OffsetFetch",
            code,
            message: Some("the committed offset cannot be read".into()),
        }),
    })
}

/// The backoff after `failures` consecutive failures: `base` doubled, at most 1 s (KIP-580
/// without jitter; the group's requests are few).
pub(crate) fn backoff(base: Duration, failures: u32) -> Duration {
    base.saturating_mul(1 << failures.min(10))
        .min(Duration::from_secs(1).max(base))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit_protocol::messages::{OffsetCommitResponse, offset_commit_response};

    /// A commit whose coordinator connection the member closed under it (the coordinator
    /// lost) is sent again to the next coordinator, not failed as UNKNOWN_SERVER_ERROR (seen
    /// on the gate: `group_faults_mock::coordinator_broker_down_the_group_recovers_without_
    /// double_ownership`).
    #[test]
    fn a_commit_cut_by_the_members_own_close_of_the_connection_goes_again() {
        let e = Error::ConnectionClosed {
            addr: "127.0.0.1:9092".into(),
            cause: crate::error::CloseCause::ClosedByClient,
        };
        assert!(matches!(
            judge_failure(e),
            CommitOutcome::Again {
                code: ErrorCode::NETWORK_EXCEPTION,
                relocate: true
            }
        ));
    }

    fn answer(codes: &[(i32, ErrorCode)]) -> OffsetCommitResponse {
        OffsetCommitResponse::default().with_topics(vec![
            offset_commit_response::OffsetCommitResponseTopic::default()
                .with_name("t".into())
                .with_partitions(
                    codes
                        .iter()
                        .map(|(p, c)| {
                            offset_commit_response::OffsetCommitResponsePartition::default()
                                .with_partition_index(*p)
                                .with_error_code(*c)
                        })
                        .collect(),
                ),
        ])
    }

    #[test]
    fn commit_carries_the_generation_and_answers_are_judged() {
        let who = Identity {
            generation: 7,
            member_id: "m".into(),
            instance_id: Some("i".into()),
        };
        let offsets = vec![
            (
                "t".to_string(),
                0,
                OffsetAndMetadata::new(5).leader_epoch(2),
            ),
            ("t".to_string(), 1, OffsetAndMetadata::new(9)),
        ];
        let req = commit_request("g", &who, &offsets).unwrap();
        assert_eq!(req.generation_id_or_member_epoch, 7);
        assert_eq!(req.member_id, "m");
        assert_eq!(req.group_instance_id.as_deref(), Some("i"));
        assert_eq!(req.topics[0].partitions[0].committed_leader_epoch, 2);
        assert!(commit_request("g", &who, &[]).is_err());

        let ok = answer(&[(0, ErrorCode::NONE), (1, ErrorCode::NONE)]);
        assert_eq!(judge_commit(&offsets, ok), CommitOutcome::Done);
        let rebalancing = answer(&[(0, ErrorCode::NONE), (1, ErrorCode::REBALANCE_IN_PROGRESS)]);
        assert!(matches!(
            judge_commit(&offsets, rebalancing),
            CommitOutcome::Again {
                code: ErrorCode::REBALANCE_IN_PROGRESS,
                relocate: false
            }
        ));
        let moved = answer(&[
            (0, ErrorCode::NOT_COORDINATOR),
            (1, ErrorCode::NOT_COORDINATOR),
        ]);
        assert!(matches!(
            judge_commit(&offsets, moved),
            CommitOutcome::Again { relocate: true, .. }
        ));
        let gone = answer(&[(0, ErrorCode::ILLEGAL_GENERATION), (1, ErrorCode::NONE)]);
        assert!(matches!(
            judge_commit(&offsets, gone),
            CommitOutcome::Failed {
                code: ErrorCode::ILLEGAL_GENERATION,
                ..
            }
        ));
        let missing = answer(&[(0, ErrorCode::NONE)]);
        assert!(matches!(
            judge_commit(&offsets, missing),
            CommitOutcome::Failed { .. }
        ));
    }

    /// Topic ids go in when every topic has one (v10), the answer (ids only) is
    /// named back, and ids answered UNKNOWN_TOPIC_ID are found and then left out.
    #[test]
    fn topic_ids_fill_requests_and_name_answers() {
        use kafkit_protocol::messages::{
            OffsetFetchResponse, offset_fetch_request, offset_fetch_response,
        };
        let (t, u) = (Uuid([1; 16]), Uuid([2; 16]));
        let mut ids: HashMap<String, Uuid> = [("t".to_string(), t)].into();
        let who = Identity::default();
        let offsets = vec![
            ("t".to_string(), 0, OffsetAndMetadata::new(5)),
            ("u".to_string(), 0, OffsetAndMetadata::new(6)),
        ];
        let mut req = commit_request("g", &who, &offsets).unwrap();
        assert!(!commit_topic_ids(&mut req, &ids), "u has no id: names, v9");
        ids.insert("u".into(), u);
        assert!(
            commit_topic_ids(&mut req, &ids),
            "every topic has an id: v10"
        );
        assert_eq!(
            req.topics.iter().map(|t| t.topic_id).collect::<Vec<_>>(),
            [t, u]
        );
        // The v10 answer carries ids only.
        let mut resp = OffsetCommitResponse::default().with_topics(
            [(t, ErrorCode::NONE), (u, ErrorCode::UNKNOWN_TOPIC_ID)]
                .into_iter()
                .map(|(id, code)| {
                    offset_commit_response::OffsetCommitResponseTopic::default()
                        .with_topic_id(id)
                        .with_partitions(vec![
                            offset_commit_response::OffsetCommitResponsePartition::default()
                                .with_error_code(code),
                        ])
                })
                .collect(),
        );
        assert_eq!(unknown_commit_ids(&resp), [u]);
        name_commit_answer(&mut resp, &ids);
        assert!(matches!(
            judge_commit(&offsets, resp),
            CommitOutcome::Again {
                code: ErrorCode::UNKNOWN_TOPIC_ID,
                relocate: false
            }
        ));
        // The refused id is not used again: the topic goes by name.
        let topic = |name: &str, id: Uuid| {
            Arc::new(crate::conn::metadata::TopicMetadata {
                name: name.into(),
                topic_id: id,
                error_code: ErrorCode::NONE,
                is_internal: false,
                partitions: Vec::new(),
            })
        };
        let md = crate::conn::metadata::Metadata {
            brokers: Vec::new(),
            cluster_id: None,
            controller_id: -1,
            topics: vec![topic("t", t), topic("u", u)],
        };
        let known = known_ids(Some(&md), &[u].into());
        assert_eq!(known, [("t".to_string(), t)].into());

        // OffsetFetch (v8+ form).
        let (_, mut fetch) = fetch_request("g", &[(Arc::from("t"), 0)], false, 10).unwrap();
        assert!(fetch_topic_ids(&mut fetch, &known));
        let topics: Vec<&offset_fetch_request::OffsetFetchRequestTopics> =
            fetch.groups[0].topics.iter().flatten().collect();
        assert_eq!(topics[0].topic_id, t);
        let mut answer = OffsetFetchResponse::default().with_groups(vec![
            offset_fetch_response::OffsetFetchResponseGroup::default()
                .with_group_id("g".into())
                .with_topics(vec![
                    offset_fetch_response::OffsetFetchResponseTopics::default()
                        .with_topic_id(t)
                        .with_partitions(vec![
                            offset_fetch_response::OffsetFetchResponsePartitions::default()
                                .with_committed_offset(7),
                        ]),
                ]),
        ]);
        assert!(unknown_fetch_ids(&answer).is_empty());
        name_fetch_answer(&mut answer, &known);
        assert_eq!(answer.groups[0].topics[0].name, "t");
    }

    #[test]
    fn backoff_doubles_to_a_second() {
        let b = Duration::from_millis(100);
        assert_eq!(backoff(b, 0), b);
        assert_eq!(backoff(b, 2), Duration::from_millis(400));
        assert_eq!(backoff(b, 20), Duration::from_secs(1));
    }
}
