//! Offset look-up by time: ListOffsets (key 2).

use std::collections::{HashMap, HashSet};

use kafkit_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse, list_offsets_request};
use kafkit_protocol::{ApiKey, ErrorCode, Message, VersionRange};

use crate::conn::Conn;
use crate::error::{Error, Result};

/// Which offset [`Conn::list_offsets`] looks up for a partition.
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

impl Conn {
    /// Looks up offsets (ListOffsets API) for each `(topic, partition, spec)` in `partitions`;
    /// this broker must lead them all.
    ///
    /// Returns one [`ListedOffset`] per entry of `partitions`, in the same order (as
    /// [`Conn::write_multi`] and [`Conn::fetch_multi`] do); per-partition failures are in its
    /// `error_code`, and a partition the broker leaves out of its answer is reported with
    /// `UNKNOWN_SERVER_ERROR`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a
    /// partition listed twice (a request names each partition once),
    /// [`Error::UnsupportedVersion`] when the broker's ListOffsets is too old for a spec
    /// ([`OffsetSpec::min_version`]) or for `ReadCommitted` (v2), and those of
    /// [`Conn::request`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future abandons the request (it only reads); the connection
    /// stays usable and a late answer is discarded.
    pub async fn list_offsets(
        &self,
        partitions: &[(&str, i32, OffsetSpec)],
        isolation_level: IsolationLevel,
    ) -> Result<Vec<ListedOffset>> {
        let version = self.version_for::<ListOffsetsRequest>(None)?;
        let req = list_offsets_request(partitions, isolation_level, version)?;
        let resp = self
            .request_at(&req, version, std::time::Duration::ZERO)
            .await?;
        Ok(list_offsets_results(partitions, resp))
    }
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
