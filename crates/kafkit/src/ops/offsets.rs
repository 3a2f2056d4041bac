//! Offsets as typed operations: the committed offsets of a group (OffsetFetch, key 9;
//! OffsetCommit, key 8), the offsets of a log by time or position (ListOffsets, key 2), and the
//! group vocabulary a transaction commits offsets under (KIP-447). The group member, the
//! transactional writer, `transact`, the reader and the admin client all build and read these
//! requests here. Imports only `crate::ops`, `crate::error` and the leaf crates.

use std::collections::{HashMap, HashSet};

use kafkit_protocol::messages::{
    ListOffsetsRequest, ListOffsetsResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, OffsetFetchResponse, list_offsets_request, offset_commit_request,
    offset_fetch_request,
};
use kafkit_protocol::{ApiKey, ErrorCode, Message, VersionRange};

use super::{ResourceResult, code_result, missing, unsupported_from};
use crate::error::{Error, Result};

/// Which offset [`Conn::list_offsets`](crate::Conn::list_offsets) looks up for a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OffsetSpec {
    /// The log start offset (timestamp -2 on the wire).
    Earliest,
    /// The log end offset, i.e. the offset the next record gets (timestamp -1); under
    /// `ReadCommitted` the last stable offset.
    Latest,
    /// The earliest offset whose record timestamp is at or after this time (ms since the epoch).
    Timestamp(i64),
    /// The offset of the record with the largest timestamp (timestamp -3; KIP-734, ListOffsets
    /// v7+).
    MaxTimestamp,
    /// The local log start offset: the first offset the leader serves from its own disk
    /// (timestamp -4; KIP-405, ListOffsets v8+). Without tiered storage the log start offset,
    /// as [`OffsetSpec::Earliest`].
    EarliestLocal,
    /// The highest offset stored in remote (tiered) storage (timestamp -5; KIP-1005,
    /// ListOffsets v9+). Without tiered storage the broker answers offset -1 (unknown).
    LatestTiered,
    /// The earliest offset whose records are still waiting for the upload to remote storage
    /// (timestamp -6; KIP-1023, ListOffsets v11+, Apache Kafka 4.2+). Without tiered storage
    /// the broker answers offset -1 (unknown).
    EarliestPendingUpload,
}

impl OffsetSpec {
    /// The `Timestamp` value sent in the request.
    pub fn timestamp(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::Timestamp(t) => t,
            OffsetSpec::MaxTimestamp => -3,
            OffsetSpec::EarliestLocal => -4,
            OffsetSpec::LatestTiered => -5,
            OffsetSpec::EarliestPendingUpload => -6,
        }
    }

    /// The lowest ListOffsets version that understands this spec: 7 for
    /// [`OffsetSpec::MaxTimestamp`], 8 for [`OffsetSpec::EarliestLocal`], 9 for
    /// [`OffsetSpec::LatestTiered`], 11 for [`OffsetSpec::EarliestPendingUpload`], else 0.
    pub fn min_version(self) -> i16 {
        match self {
            OffsetSpec::MaxTimestamp => 7,
            OffsetSpec::EarliestLocal => 8,
            OffsetSpec::LatestTiered => 9,
            OffsetSpec::EarliestPendingUpload => 11,
            _ => 0,
        }
    }
}

/// Which records a reader may see (KIP-98 `isolation.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum IsolationLevel {
    /// Every record, including those of open or aborted transactions (wire value 0; default).
    #[default]
    ReadUncommitted,
    /// Only committed transactional records, up to the last stable offset (wire value 1).
    ReadCommitted,
}

impl IsolationLevel {
    /// The wire value (0 or 1).
    pub fn as_i8(self) -> i8 {
        match self {
            IsolationLevel::ReadUncommitted => 0,
            IsolationLevel::ReadCommitted => 1,
        }
    }
}

/// The answer for one partition of a ListOffsets request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedOffset {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// `NONE`, or why this partition failed (e.g. `NOT_LEADER_OR_FOLLOWER`,
    /// `UNKNOWN_TOPIC_OR_PARTITION`).
    pub error_code: ErrorCode,
    /// The offset found; -1 when no record matches a timestamp query.
    pub offset: i64,
    /// The timestamp of the record at `offset` (ms), -1 when not applicable.
    pub timestamp: i64,
    /// The leader epoch of that offset (v4+), -1 when unknown.
    pub leader_epoch: i32,
}

/// Builds a ListOffsets request (as a consumer: replica id -1) for `partitions` at `version`.
///
/// Errors: [`Error::InvalidArgument`] for an empty list or a partition listed twice;
/// [`Error::UnsupportedVersion`] for ListOffsets when `version` is below what a spec needs
/// ([`OffsetSpec::min_version`]) or `ReadCommitted` is asked below v2.
pub(crate) fn list_offsets_request<S: AsRef<str>>(
    partitions: &[(S, i32, OffsetSpec)],
    isolation_level: IsolationLevel,
    version: i16,
) -> Result<ListOffsetsRequest> {
    if partitions.is_empty() {
        return Err(Error::InvalidArgument("no partitions to look up".into()));
    }
    let need = partitions
        .iter()
        .map(|(_, _, s)| s.min_version())
        .chain((isolation_level == IsolationLevel::ReadCommitted).then_some(2))
        .max()
        .unwrap_or(0);
    if version < need {
        return Err(Error::UnsupportedVersion {
            api: ApiKey::ListOffsets,
            ours: VersionRange::new(
                need,
                super::versions::client_max_for::<ListOffsetsRequest>(),
            ),
            broker: Some(VersionRange::new(ListOffsetsRequest::VERSIONS.min, version)),
        });
    }
    // Linear in the number of partitions: lag and offset look-ups of big clusters ask for
    // tens of thousands of partitions at once.
    let mut topics: Vec<list_offsets_request::ListOffsetsTopic> = Vec::new();
    let mut topic_index: HashMap<&str, usize> = HashMap::new();
    let mut seen: HashSet<(&str, i32)> = HashSet::with_capacity(partitions.len());
    for (topic, partition, spec) in partitions {
        let (topic, partition) = (topic.as_ref(), *partition);
        if !seen.insert((topic, partition)) {
            return Err(Error::InvalidArgument(format!(
                "{topic}/{partition} listed twice"
            )));
        }
        let p = list_offsets_request::ListOffsetsPartition::default()
            .with_partition_index(partition)
            .with_timestamp(spec.timestamp());
        let i = *topic_index.entry(topic).or_insert_with(|| {
            let t = list_offsets_request::ListOffsetsTopic::default().with_name(topic.to_owned());
            topics.push(t);
            topics.len() - 1
        });
        topics[i].partitions.push(p);
    }
    let mut req = ListOffsetsRequest::default().with_replica_id(-1);
    // Only v2+ carries the isolation level; below that it must keep its default.
    if version >= 2 {
        req.isolation_level = isolation_level.as_i8();
    }
    req.topics = topics;
    Ok(req)
}

/// Maps a ListOffsets answer to one [`ListedOffset`] per entry of `partitions`, in that order
/// (the request groups partitions by topic, so the answer's order is not the caller's). A
/// partition left out of the answer gets `UNKNOWN_SERVER_ERROR`; a v0 answer's offset is the
/// first of its `old_style_offsets`.
pub(crate) fn list_offsets_results<S: AsRef<str>>(
    partitions: &[(S, i32, OffsetSpec)],
    resp: ListOffsetsResponse,
) -> Vec<ListedOffset> {
    // First answer per partition wins; looked up by key (linear, not a scan per partition).
    let mut answered: HashMap<(String, i32), ListedOffset> =
        HashMap::with_capacity(partitions.len());
    for t in resp.topics {
        for p in t.partitions {
            let offset = match p.old_style_offsets.first() {
                Some(&o) if p.offset == -1 => o,
                _ => p.offset,
            };
            let key = (t.name.clone(), p.partition_index);
            answered.entry(key).or_insert(ListedOffset {
                topic: t.name.clone(),
                partition: p.partition_index,
                error_code: p.error_code,
                offset,
                timestamp: p.timestamp,
                leader_epoch: p.leader_epoch,
            });
        }
    }
    partitions
        .iter()
        .map(|(topic, partition, _)| {
            let (topic, partition) = (topic.as_ref(), *partition);
            answered
                .remove(&(topic.to_owned(), partition))
                .unwrap_or_else(|| ListedOffset {
                    topic: topic.to_owned(),
                    partition,
                    error_code: ErrorCode::UNKNOWN_SERVER_ERROR,
                    offset: -1,
                    timestamp: -1,
                    leader_epoch: -1,
                })
        })
        .collect()
}

/// Which committed offsets of one group to read with
/// [`Client::list_consumer_group_offsets`](crate::Client::list_consumer_group_offsets) (Java
/// `ListConsumerGroupOffsetsSpec`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListGroupOffsets {
    /// The group id.
    pub group_id: String,
    /// The partitions to read, as `(topic, partition)`; `None` for every partition the group has
    /// committed offsets for.
    pub partitions: Option<Vec<(String, i32)>>,
}

impl ListGroupOffsets {
    /// Every committed offset of `group_id`.
    pub fn all(group_id: impl Into<String>) -> Self {
        ListGroupOffsets {
            group_id: group_id.into(),
            partitions: None,
        }
    }

    /// The committed offsets of `group_id` for these `(topic, partition)` pairs only; a
    /// partition without a commit comes back as `Ok(None)`.
    pub fn partitions<I, S>(group_id: impl Into<String>, partitions: I) -> Self
    where
        I: IntoIterator<Item = (S, i32)>,
        S: Into<String>,
    {
        ListGroupOffsets {
            group_id: group_id.into(),
            partitions: Some(partitions.into_iter().map(|(t, p)| (t.into(), p)).collect()),
        }
    }
}

/// A committed offset (Java `OffsetAndMetadata`): what
/// [`Client::list_consumer_group_offsets`](crate::Client::list_consumer_group_offsets) returns
/// and [`Client::alter_consumer_group_offsets`](crate::Client::alter_consumer_group_offsets)
/// takes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OffsetAndMetadata {
    /// The offset: the next record the group will read.
    pub offset: i64,
    /// The leader epoch of the record before `offset` (KIP-320), if known.
    pub leader_epoch: Option<i32>,
    /// A metadata string stored with the offset (`None` when empty).
    pub metadata: Option<String>,
}

impl OffsetAndMetadata {
    /// `offset` with no leader epoch and no metadata. An offset to commit is >= 0:
    /// [`Client::alter_consumer_group_offsets`](crate::Client::alter_consumer_group_offsets)
    /// refuses a negative one with [`Error::InvalidArgument`] before sending anything (Java's
    /// constructor throws `IllegalArgumentException`).
    pub fn new(offset: i64) -> Self {
        OffsetAndMetadata {
            offset,
            leader_epoch: None,
            metadata: None,
        }
    }

    /// Sets the leader epoch.
    pub fn leader_epoch(mut self, epoch: i32) -> Self {
        self.leader_epoch = Some(epoch);
        self
    }

    /// Sets the metadata string.
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = Some(metadata.into());
        self
    }
}

/// A group's committed offsets, one entry per `(topic, partition)`: `Ok(Some(..))` for a
/// commit, `Ok(None)` for no commit, or the partition's error (e.g. `UNSTABLE_OFFSET_COMMIT`
/// with `require_stable`, `UNKNOWN_TOPIC_OR_PARTITION`).
pub type CommittedOffsets = Vec<((String, i32), ResourceResult<Option<OffsetAndMetadata>>)>;

/// Groups `(topic, partition)` pairs by topic, keeping the first appearance order of topics.
pub(crate) fn by_topic(partitions: &[(String, i32)]) -> Vec<(String, Vec<i32>)> {
    let mut out: Vec<(String, Vec<i32>)> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (t, p) in partitions {
        let i = *index.entry(t.as_str()).or_insert_with(|| {
            out.push((t.clone(), Vec::new()));
            out.len() - 1
        });
        out[i].1.push(*p);
    }
    out
}

/// Builds an OffsetFetch request at `version` for `groups`.
///
/// v8+ (KIP-709) carries every group in one request; below v8 the request carries one group, so
/// `groups` must hold exactly one (callers send one request per group). `require_stable` needs
/// v7+ (KIP-447).
///
/// Errors: [`Error::InvalidArgument`] for several groups below v8 or no group;
/// [`Error::UnsupportedVersion`] for OffsetFetch when `require_stable` is set below v7, or when
/// every partition is asked for below v2 (v0 and v1 need an explicit partition list).
pub(crate) fn offset_fetch_request(
    groups: &[&ListGroupOffsets],
    require_stable: bool,
    version: i16,
) -> Result<OffsetFetchRequest> {
    if groups.is_empty() {
        return Err(Error::InvalidArgument("no group to read offsets of".into()));
    }
    if require_stable && version < 7 {
        return Err(unsupported_from::<OffsetFetchRequest>(7, version));
    }
    let mut req = OffsetFetchRequest::default().with_require_stable(require_stable);
    if version >= 8 {
        req.groups = groups
            .iter()
            .map(|g| {
                offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(g.group_id.clone())
                    .with_topics(g.partitions.as_ref().map(|ps| {
                        by_topic(ps)
                            .into_iter()
                            .map(|(name, partition_indexes)| {
                                offset_fetch_request::OffsetFetchRequestTopics::default()
                                    .with_name(name)
                                    .with_partition_indexes(partition_indexes)
                            })
                            .collect()
                    }))
            })
            .collect();
        return Ok(req);
    }
    let [g] = groups else {
        return Err(Error::InvalidArgument(format!(
            "OffsetFetch v{version} carries one group, {} given",
            groups.len()
        )));
    };
    if g.partitions.is_none() && version < 2 {
        return Err(unsupported_from::<OffsetFetchRequest>(2, version));
    }
    req.group_id.clone_from(&g.group_id);
    req.topics = g.partitions.as_ref().map(|ps| {
        by_topic(ps)
            .into_iter()
            .map(|(name, partition_indexes)| {
                offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(name)
                    .with_partition_indexes(partition_indexes)
            })
            .collect()
    });
    Ok(req)
}

/// One partition of an OffsetFetch answer, in either response shape.
fn committed(
    offset: i64,
    leader_epoch: i32,
    metadata: Option<String>,
    error_code: ErrorCode,
) -> ResourceResult<Option<OffsetAndMetadata>> {
    code_result("OffsetFetch", error_code, None)?;
    Ok((offset >= 0).then(|| OffsetAndMetadata {
        offset,
        leader_epoch: (leader_epoch >= 0).then_some(leader_epoch),
        metadata: metadata.filter(|m| !m.is_empty()),
    }))
}

/// Maps an OffsetFetch answer (either shape: `groups` from v8, top-level `topics` below) to one
/// result per entry of `groups`, in order: the group's error code fails the whole group; else
/// one entry per partition asked for (caller's order), or per partition with a commit when all
/// were asked for. Anything asked for but left out of the answer is an [`Error::Protocol`].
pub(crate) fn offset_fetch_results(
    groups: &[&ListGroupOffsets],
    resp: OffsetFetchResponse,
) -> Vec<(String, ResourceResult<CommittedOffsets>)> {
    // By group id, first answer wins (a scan per group was quadratic for thousands of groups).
    let mut by_group: HashMap<String, (ErrorCode, CommittedOffsets)> = HashMap::new();
    for (id, code, parts) in answered_groups(groups, resp) {
        by_group.entry(id).or_insert((code, parts));
    }
    groups
        .iter()
        .map(|g| {
            let answered = by_group.remove(&g.group_id);
            (g.group_id.clone(), group_result(g, answered))
        })
        .collect()
}

/// The groups of an OffsetFetch answer as `(group id, group error, partitions)`, from either
/// shape: `groups` from v8, or below v8 the top-level `error_code` and `topics` of the one
/// group asked about (the first of `groups`).
fn answered_groups(
    groups: &[&ListGroupOffsets],
    resp: OffsetFetchResponse,
) -> Vec<(String, ErrorCode, CommittedOffsets)> {
    // The two shapes' topics are different generated types with the same fields.
    macro_rules! committed_offsets {
        ($topics:expr) => {
            $topics
                .into_iter()
                .flat_map(|t| {
                    let name = t.name;
                    t.partitions.into_iter().map(move |p| {
                        let c = committed(
                            p.committed_offset,
                            p.committed_leader_epoch,
                            p.metadata,
                            p.error_code,
                        );
                        ((name.clone(), p.partition_index), c)
                    })
                })
                .collect()
        };
    }
    if resp.groups.is_empty() {
        // Pre-v8 shape: one group, the one asked about.
        let Some(g) = groups.first() else {
            return Vec::new();
        };
        return vec![(
            g.group_id.clone(),
            resp.error_code,
            committed_offsets!(resp.topics),
        )];
    }
    resp.groups
        .into_iter()
        .map(|g| (g.group_id, g.error_code, committed_offsets!(g.topics)))
        .collect()
}

/// The result for group `g` from its `answered` entry: the group's error code fails it whole;
/// else its partitions, in the caller's order when it listed them.
fn group_result(
    g: &ListGroupOffsets,
    answered: Option<(ErrorCode, CommittedOffsets)>,
) -> ResourceResult<CommittedOffsets> {
    let Some((code, parts)) = answered else {
        return Err(missing("OffsetFetch", &g.group_id));
    };
    code_result("OffsetFetch", code, None)?;
    let Some(asked) = &g.partitions else {
        return Ok(parts);
    };
    // By key, not a scan per partition: a group may ask for thousands.
    let mut parts: HashMap<(String, i32), _> = parts.into_iter().rev().collect();
    Ok(asked
        .iter()
        .map(|tp| {
            let r = parts
                .remove(tp)
                .unwrap_or_else(|| Err(missing("OffsetFetch", tp)));
            (tp.clone(), r)
        })
        .collect())
}

/// Builds an OffsetCommit request that commits `offsets` for `group_id` as an admin: generation
/// -1 and an empty member id, which brokers accept only while the group has no members (Java
/// `Admin.alterConsumerGroupOffsets`).
///
/// Errors: [`Error::InvalidArgument`] for an empty list.
pub(crate) fn offset_commit_request(
    group_id: &str,
    offsets: &[(String, i32, OffsetAndMetadata)],
) -> Result<OffsetCommitRequest> {
    if offsets.is_empty() {
        return Err(Error::InvalidArgument("no offsets to commit".into()));
    }
    // As Java's OffsetAndMetadata, which throws IllegalArgumentException for a negative
    // offset: a commit of -7 would move the group before the log's start.
    if let Some((topic, partition, om)) = offsets.iter().find(|(_, _, om)| om.offset < 0) {
        return Err(Error::InvalidArgument(format!(
            "offset {} for {topic}/{partition} is negative (an offset to commit is >= 0)",
            om.offset
        )));
    }
    let mut req = OffsetCommitRequest::default()
        .with_group_id(group_id.to_owned())
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(String::new());
    let mut topic_index: HashMap<&str, usize> = HashMap::new();
    for (topic, partition, om) in offsets {
        let p = offset_commit_request::OffsetCommitRequestPartition::default()
            .with_partition_index(*partition)
            .with_committed_offset(om.offset)
            .with_committed_leader_epoch(om.leader_epoch.unwrap_or(-1))
            .with_committed_metadata(Some(om.metadata.clone().unwrap_or_default()));
        let i = *topic_index.entry(topic.as_str()).or_insert_with(|| {
            let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
            t.name.clone_from(topic);
            req.topics.push(t);
            req.topics.len() - 1
        });
        req.topics[i].partitions.push(p);
    }
    Ok(req)
}

/// Maps an OffsetCommit answer to one result per entry of `offsets`, in order
/// (`UNKNOWN_MEMBER_ID` when the group has members, `OFFSET_METADATA_TOO_LARGE`...).
pub(crate) fn offset_commit_results(
    offsets: &[(String, i32, OffsetAndMetadata)],
    resp: OffsetCommitResponse,
) -> Vec<((String, i32), ResourceResult<()>)> {
    let answered: HashMap<(&str, i32), ErrorCode> = resp
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| ((t.name.as_str(), p.partition_index), p.error_code))
        })
        .collect();
    offsets
        .iter()
        .map(|(t, p, _)| {
            let tp = (t.clone(), *p);
            let r = match answered.get(&(t.as_str(), *p)) {
                Some(&c) => code_result("OffsetCommit", c, None),
                None => Err(missing("OffsetCommit", &tp)),
            };
            (tp, r)
        })
        .collect()
}

/// The consumer group a transaction's offsets belong to (Java `ConsumerGroupMetadata`): the
/// group id, and for a member of it (KIP-447) its generation, member id and group instance
/// id, which the group coordinator checks so a zombie member cannot commit. From
/// [`crate::GroupReader::group_metadata`], or [`ConsumerGroupMetadata::new`] for a group id
/// alone (generation -1, no member: the pre-KIP-447 form).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerGroupMetadata {
    /// The group id.
    pub group_id: String,
    /// The generation (classic) or member epoch (KIP-848); -1 when not a member.
    pub generation_id: i32,
    /// The member id; empty when not a member.
    pub member_id: String,
    /// The static member's instance id (KIP-345), if any.
    pub group_instance_id: Option<String>,
}

impl ConsumerGroupMetadata {
    /// The metadata of `group_id` with no member (generation -1, empty member id).
    pub fn new(group_id: impl Into<String>) -> Self {
        ConsumerGroupMetadata {
            group_id: group_id.into(),
            generation_id: -1,
            member_id: String::new(),
            group_instance_id: None,
        }
    }

    /// This metadata with the member's generation, member id and instance id.
    pub fn with_member(
        mut self,
        generation_id: i32,
        member_id: impl Into<String>,
        group_instance_id: Option<String>,
    ) -> Self {
        self.generation_id = generation_id;
        self.member_id = member_id.into();
        self.group_instance_id = group_instance_id;
        self
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use kafkit_protocol::EncodeError;
    use kafkit_protocol::messages::{offset_commit_response, offset_fetch_response};

    use super::*;

    /// Test helpers the admin client's tests share: a message's encoding at `version`, a
    /// result's error code, a topic-partition.
    pub(crate) fn encodes<M: Message>(m: &M, version: i16) -> std::result::Result<(), EncodeError> {
        let mut buf = bytes::BytesMut::new();
        m.encode(&mut buf, version)
    }

    pub(crate) fn code_of<T: std::fmt::Debug>(r: &ResourceResult<T>) -> Option<ErrorCode> {
        r.as_ref().err().and_then(Error::error_code)
    }

    pub(crate) fn tp(t: &str, p: i32) -> (String, i32) {
        (t.to_owned(), p)
    }

    #[test]
    fn offset_fetch_request_shapes_by_version() {
        let all = ListGroupOffsets::all("g1");
        let some = ListGroupOffsets::partitions("g2", [("t", 1), ("u", 0), ("t", 0)]);
        let v8 = offset_fetch_request(&[&all, &some], true, 8).expect("v8 batches");
        assert_eq!(v8.groups.len(), 2);
        assert_eq!(v8.groups[0].topics, None);
        let topics = v8.groups[1].topics.as_ref().expect("listed");
        assert_eq!(topics[0].name, "t");
        assert_eq!(topics[0].partition_indexes, [1, 0]);
        assert_eq!(topics[1].name, "u");
        encodes(&v8, 8).expect("encodes at v8");
        encodes(&v8, 7).expect_err("groups are not in v7");

        let v7 = offset_fetch_request(&[&some], true, 7).expect("one group at v7");
        assert_eq!(v7.group_id, "g2");
        assert_eq!(v7.topics.as_ref().map(Vec::len), Some(2));
        encodes(&v7, 7).expect("encodes at v7");
        assert!(matches!(
            offset_fetch_request(&[&all, &some], false, 7),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            offset_fetch_request(&[&all], true, 6),
            Err(Error::UnsupportedVersion {
                api: ApiKey::OffsetFetch,
                ..
            })
        ));
        let v2 = offset_fetch_request(&[&all], false, 2).expect("null topics from v2");
        assert_eq!(v2.topics, None);
        encodes(&v2, 2).expect("encodes at v2");
        assert!(offset_fetch_request(&[&all], false, 1).is_err());
        assert!(offset_fetch_request(&[], false, 8).is_err());
    }

    fn fetched_partition_v8(
        p: i32,
        offset: i64,
        code: ErrorCode,
    ) -> offset_fetch_response::OffsetFetchResponsePartitions {
        let mut rp = offset_fetch_response::OffsetFetchResponsePartitions::default();
        rp.partition_index = p;
        rp.committed_offset = offset;
        rp.committed_leader_epoch = -1;
        rp.error_code = code;
        rp
    }

    #[test]
    fn offset_fetch_results_batched_shape() {
        let all = ListGroupOffsets::all("g1");
        let some = ListGroupOffsets::partitions("g2", [("t", 1), ("t", 0), ("t", 2)]);
        let lost = ListGroupOffsets::all("g3");
        let denied = ListGroupOffsets::all("g4");
        let mut resp = OffsetFetchResponse::default();
        let mut g2 = offset_fetch_response::OffsetFetchResponseGroup::default();
        g2.group_id = "g2".into();
        let mut t = offset_fetch_response::OffsetFetchResponseTopics::default();
        t.name = "t".into();
        t.partitions
            .push(fetched_partition_v8(0, -1, ErrorCode::NONE));
        t.partitions.push(fetched_partition_v8(
            2,
            -1,
            ErrorCode::UNSTABLE_OFFSET_COMMIT,
        ));
        g2.topics.push(t);
        let mut g1 = offset_fetch_response::OffsetFetchResponseGroup::default();
        g1.group_id = "g1".into();
        let mut t = offset_fetch_response::OffsetFetchResponseTopics::default();
        t.name = "x".into();
        let mut p = fetched_partition_v8(3, 42, ErrorCode::NONE);
        p.committed_leader_epoch = 5;
        p.metadata = Some("meta".into());
        t.partitions.push(p);
        g1.topics.push(t);
        let mut g4 = offset_fetch_response::OffsetFetchResponseGroup::default();
        g4.group_id = "g4".into();
        g4.error_code = ErrorCode::GROUP_AUTHORIZATION_FAILED;
        resp.groups = vec![g2, g4, g1];
        let got = offset_fetch_results(&[&all, &some, &lost, &denied], resp);
        assert_eq!(got[0].0, "g1");
        let g1 = got[0].1.as_ref().expect("g1 read");
        assert_eq!(g1.len(), 1);
        assert_eq!(g1[0].0, tp("x", 3));
        let om = g1[0].1.as_ref().expect("ok").as_ref().expect("committed");
        assert_eq!(om.offset, 42);
        assert_eq!(om.leader_epoch, Some(5));
        assert_eq!(om.metadata.as_deref(), Some("meta"));
        // Caller's order; partition 1 was left out of the answer.
        let g2 = got[1].1.as_ref().expect("g2 read");
        assert_eq!(g2[0].0, tp("t", 1));
        assert!(matches!(g2[0].1, Err(Error::Protocol(_))));
        assert_eq!(g2[1].0, tp("t", 0));
        assert_eq!(*g2[1].1.as_ref().expect("ok"), None, "-1 means no commit");
        assert_eq!(code_of(&g2[2].1), Some(ErrorCode::UNSTABLE_OFFSET_COMMIT));
        assert!(matches!(got[2].1, Err(Error::Protocol(_))));
        assert_eq!(
            code_of(&got[3].1),
            Some(ErrorCode::GROUP_AUTHORIZATION_FAILED)
        );
    }

    #[test]
    fn offset_fetch_results_single_group_shape_with_group_error() {
        let some = ListGroupOffsets::partitions("g", [("t", 0)]);
        let mut resp = OffsetFetchResponse::default();
        resp.error_code = ErrorCode::GROUP_AUTHORIZATION_FAILED;
        let got = offset_fetch_results(&[&some], resp);
        assert_eq!(
            code_of(&got[0].1),
            Some(ErrorCode::GROUP_AUTHORIZATION_FAILED)
        );

        let mut resp = OffsetFetchResponse::default();
        let mut t = offset_fetch_response::OffsetFetchResponseTopic::default();
        t.name = "t".into();
        let mut p = offset_fetch_response::OffsetFetchResponsePartition::default();
        p.committed_offset = 7;
        t.partitions.push(p);
        resp.topics.push(t);
        let got = offset_fetch_results(&[&some], resp);
        let parts = got[0].1.as_ref().expect("read");
        assert_eq!(
            parts[0].1.as_ref().expect("ok").as_ref().map(|o| o.offset),
            Some(7)
        );
    }

    /// A negative offset (`OffsetAndMetadata::new(-7)`) is refused before anything is sent, as
    /// Java refuses it with IllegalArgumentException.
    #[test]
    fn a_negative_offset_is_refused_before_sending() {
        let offsets = vec![
            ("t".to_owned(), 0, OffsetAndMetadata::new(5)),
            ("t".to_owned(), 1, OffsetAndMetadata::new(-7)),
        ];
        let err = offset_commit_request("g", &offsets).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidArgument(m) if m.contains("-7") && m.contains("t/1")),
            "{err:?}"
        );
        assert!(offset_commit_request("g", &offsets[..1]).is_ok());
    }

    #[test]
    fn offset_commit_as_admin() {
        let offsets = vec![
            ("t".to_owned(), 0, OffsetAndMetadata::new(5).leader_epoch(2)),
            ("u".to_owned(), 1, OffsetAndMetadata::new(9).metadata("m")),
            ("t".to_owned(), 1, OffsetAndMetadata::new(6)),
        ];
        let req = offset_commit_request("g", &offsets).expect("request");
        assert_eq!(req.generation_id_or_member_epoch, -1);
        assert_eq!(req.member_id, "");
        assert_eq!(req.topics.len(), 2);
        assert_eq!(req.topics[0].partitions[0].committed_leader_epoch, 2);
        assert_eq!(
            req.topics[1].partitions[0].committed_metadata.as_deref(),
            Some("m")
        );
        for v in [2, 5, 8, 9] {
            encodes(&req, v).unwrap_or_else(|e| panic!("v{v}: {e}"));
        }
        assert!(offset_commit_request("g", &[]).is_err());

        let mut resp = OffsetCommitResponse::default();
        let mut t = offset_commit_response::OffsetCommitResponseTopic::default();
        t.name = "t".into();
        let mut p = offset_commit_response::OffsetCommitResponsePartition::default();
        p.partition_index = 1;
        p.error_code = ErrorCode::UNKNOWN_MEMBER_ID;
        t.partitions.push(p);
        let mut p = offset_commit_response::OffsetCommitResponsePartition::default();
        p.partition_index = 0;
        t.partitions.push(p);
        resp.topics.push(t);
        let got = offset_commit_results(&offsets, resp);
        assert_eq!(got[0].0, tp("t", 0));
        assert!(got[0].1.is_ok());
        assert!(matches!(got[1].1, Err(Error::Protocol(_))));
        assert_eq!(code_of(&got[2].1), Some(ErrorCode::UNKNOWN_MEMBER_ID));
    }
}
