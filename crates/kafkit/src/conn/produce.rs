//! Writing records: Produce (key 0) for one partition, and [`Conn::write_multi`], one Produce
//! request spanning many topics and partitions.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafkit_compress::{Compression, CompressionConfig};
use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::{ProduceRequest, ProduceResponse, produce_request};
use kafkit_protocol::records::Record;

use crate::conn::Conn;
use crate::conn::metadata::{Broker, Metadata};
use crate::conn::records;
use crate::error::{Error, Result};
use crate::time::wire_ms;

/// How many acknowledgements the leader waits for before answering a Produce request
/// (Java: `acks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Acks {
    /// `acks=0`: the broker sends no response at all; the call returns once the request is
    /// written to the socket and reports no offsets.
    None,
    /// `acks=1`: the leader answers after writing to its own log.
    Leader,
    /// `acks=all` (-1): the leader answers after every in-sync replica has the records (default,
    /// as in Java since 3.0).
    #[default]
    All,
}

impl Acks {
    /// The wire value: 0, 1 or -1.
    pub fn as_i16(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// Record batches for many topic-partitions, ready to be sent by [`Conn::write_multi`].
///
/// Each topic-partition holds one record batch (magic v2), encoded when it is added: either from
/// [`Record`]s ([`ProduceBatches::add_records`], compressed with the set's [`CompressionConfig`]:
/// codec and level, checked when the set is made) or as
/// bytes built elsewhere ([`ProduceBatches::add_batch`]). A topic-partition may appear once: Kafka
/// accepts exactly one batch per partition in a v3+ Produce request.
#[derive(Debug, Clone)]
pub struct ProduceBatches {
    compression: CompressionConfig,
    entries: Vec<Entry>,
}

#[derive(Debug, Clone)]
struct Entry {
    topic: String,
    partition: i32,
    batch: Bytes,
}

impl Default for ProduceBatches {
    /// An empty set without compression.
    fn default() -> Self {
        ProduceBatches::new(Compression::None)
    }
}

impl ProduceBatches {
    /// An empty set whose [`add_records`](Self::add_records) batches use `compression`: a
    /// [`Compression`] (at its default level) or a [`CompressionConfig`] with a level
    /// (KIP-390; an out-of-range level is refused by [`CompressionConfig::with_level`]).
    ///
    /// ```
    /// use kafkit::{Compression, CompressionConfig, ProduceBatches};
    ///
    /// let lz4 = ProduceBatches::new(Compression::Lz4);
    /// let zstd = ProduceBatches::new(CompressionConfig::with_level(Compression::Zstd, 6)?);
    /// assert_eq!(zstd.compression().level(), Some(6));
    /// # drop(lz4);
    /// # Ok::<(), kafkit::compress::CompressError>(())
    /// ```
    pub fn new(compression: impl Into<CompressionConfig>) -> Self {
        ProduceBatches {
            compression: compression.into(),
            entries: Vec::new(),
        }
    }

    /// The codec and level [`add_records`](Self::add_records) compresses with.
    pub fn compression(&self) -> CompressionConfig {
        self.compression
    }

    /// Encodes `records` into one batch for `topic`/`partition`. Record offsets are ignored (the
    /// broker assigns them); a record timestamp of -1 means "now" (the wall clock at encoding).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the topic name is empty, the partition is negative
    /// or already in the set, or `records` is empty; [`Error::Records`] / [`Error::Compression`] when the batch cannot be built.
    pub fn add_records(
        &mut self,
        topic: &str,
        partition: i32,
        records: &[Record],
    ) -> Result<&mut Self> {
        self.check_new(topic, partition)?;
        if records.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "no records for {topic}/{partition}"
            )));
        }
        let mut buf = BytesMut::new();
        records::encode_batch(&mut buf, records, self.compression)?;
        self.entries.push(Entry {
            topic: topic.to_owned(),
            partition,
            batch: buf.freeze(),
        });
        Ok(self)
    }

    /// Adds an already encoded record batch (magic v2) for `topic`/`partition`; sent as is.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when the topic name is empty, the partition is negative
    /// or already in the set, or `batch` is empty.
    pub fn add_batch(&mut self, topic: &str, partition: i32, batch: Bytes) -> Result<&mut Self> {
        self.check_new(topic, partition)?;
        if batch.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "empty batch for {topic}/{partition}"
            )));
        }
        self.entries.push(Entry {
            topic: topic.to_owned(),
            partition,
            batch,
        });
        Ok(self)
    }

    fn check_new(&self, topic: &str, partition: i32) -> Result<()> {
        if topic.is_empty() || partition < 0 {
            return Err(Error::InvalidArgument(format!(
                "no such partition: {topic:?}/{partition} (topic names are non-empty, partitions >= 0)"
            )));
        }
        if self
            .entries
            .iter()
            .any(|e| e.partition == partition && e.topic == topic)
        {
            return Err(Error::InvalidArgument(format!(
                "{topic}/{partition} already has a batch in this request"
            )));
        }
        Ok(())
    }

    /// Number of topic-partitions in the set.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the set holds no batch.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Total size of the encoded batches, in bytes.
    pub fn size_bytes(&self) -> usize {
        self.entries.iter().map(|e| e.batch.len()).sum()
    }

    /// The `(topic, partition)` pairs in the order they were added.
    pub fn partitions(&self) -> impl Iterator<Item = (&str, i32)> {
        self.entries.iter().map(|e| (e.topic.as_str(), e.partition))
    }
}

impl ProduceBatches {
    /// Splits the set by partition leader, using `metadata` (e.g. from [`Conn::metadata`] for
    /// the set's topics), so that each leader can get ONE [`Conn::write_multi`] call.
    ///
    /// Returns the groups, one per leader in node-id order, each keeping the set's compression
    /// and the entries' relative order; and, for entries no leader can take, a
    /// [`ProducedPartition`] with the reason: the topic's or partition's error code from the
    /// metadata, `UNKNOWN_TOPIC_OR_PARTITION` when the topic or partition is not listed, or
    /// `LEADER_NOT_AVAILABLE` when the leader is not among the listed brokers. Batches are
    /// shared, not copied.
    pub fn split_by_leader(
        &self,
        metadata: &Metadata,
    ) -> (Vec<(Broker, ProduceBatches)>, Vec<ProducedPartition>) {
        let mut groups: Vec<(Broker, ProduceBatches)> = Vec::new();
        let mut unroutable = Vec::new();
        for e in &self.entries {
            match metadata.leader_of(&e.topic, e.partition) {
                Ok(leader) => {
                    let group = match groups.iter().position(|(b, _)| b.node_id == leader.node_id) {
                        Some(i) => &mut groups[i].1,
                        None => {
                            groups.push((leader, ProduceBatches::new(self.compression)));
                            let last = groups.len() - 1;
                            &mut groups[last].1
                        }
                    };
                    group.entries.push(e.clone());
                }
                Err(err) => unroutable.push(ProducedPartition::unanswered(
                    &e.topic,
                    e.partition,
                    err.error_code()
                        .unwrap_or(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                    None,
                )),
            }
        }
        groups.sort_by_key(|(b, _)| b.node_id);
        (groups, unroutable)
    }
}

/// A per-record failure inside a rejected batch (Produce v8+, KIP-467).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordError {
    /// Index of the failing record within its batch.
    pub batch_index: i32,
    /// The broker's message for that record.
    pub message: Option<String>,
}

/// The outcome of a Produce request for one topic-partition.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProducedPartition {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// `NONE` when the batch was written; otherwise why not, e.g.
    /// `UNKNOWN_TOPIC_OR_PARTITION` (also for a partition index the topic lacks),
    /// `NOT_LEADER_OR_FOLLOWER`, `MESSAGE_TOO_LARGE`, `RECORD_LIST_TOO_LARGE`.
    pub error_code: ErrorCode,
    /// The broker's message (v8+), when it sent one.
    pub error_message: Option<String>,
    /// Offset given to the first record of the batch; -1 on failure or with [`Acks::None`].
    pub base_offset: i64,
    /// The broker's append time (ms) when the topic uses `LogAppendTime`, else -1 (v2+).
    pub log_append_time_ms: i64,
    /// The partition's log start offset after the append (v5+), -1 when unknown.
    pub log_start_offset: i64,
    /// Records that made the batch fail (v8+).
    pub record_errors: Vec<RecordError>,
}

impl ProducedPartition {
    /// Whether the batch was written.
    pub fn is_ok(&self) -> bool {
        self.error_code.is_ok()
    }

    /// `Ok(self)` when written, [`Error::Broker`] with the partition's code and message otherwise
    /// (retriable when the code is, e.g. `NOT_LEADER_OR_FOLLOWER`).
    pub fn into_result(self) -> Result<Self> {
        if self.is_ok() {
            Ok(self)
        } else {
            Err(Error::broker(
                "Produce",
                self.error_code,
                self.error_message.clone(),
            ))
        }
    }

    fn unanswered(
        topic: &str,
        partition: i32,
        error_code: ErrorCode,
        message: Option<String>,
    ) -> Self {
        ProducedPartition {
            topic: topic.to_owned(),
            partition,
            error_code,
            error_message: message,
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
            record_errors: Vec::new(),
        }
    }
}

impl Conn {
    /// Writes `records` to `topic`/`partition` in one batch (Produce API); this broker must lead
    /// the partition. `timeout` is how long the leader waits for replication under
    /// [`Acks::All`] (the request's `timeout_ms`; the Java producer sends its
    /// `request.timeout.ms` there), sent in whole milliseconds up to `i32::MAX`.
    ///
    /// Returns the partition's outcome; a broker-side failure is in its `error_code` (use
    /// [`ProducedPartition::into_result`]). With [`Acks::None`] nothing is awaited and the offsets
    /// are -1.
    ///
    /// # Errors
    ///
    /// Those of [`ProduceBatches::add_records`] and [`Conn::write_multi`].
    ///
    /// # Cancel safety
    ///
    /// As [`Conn::write_multi`]: not cancel safe once the request is written (the broker
    /// may still append the batch).
    pub async fn produce(
        &self,
        topic: &str,
        partition: i32,
        records: &[Record],
        acks: Acks,
        timeout: Duration,
    ) -> Result<ProducedPartition> {
        self.produce_compressed(
            topic,
            partition,
            records,
            CompressionConfig::NONE,
            acks,
            timeout,
        )
        .await
    }

    /// [`Conn::produce`] with the batch compressed as `compression` says: a [`Compression`]
    /// (default level) or a [`CompressionConfig`] (Java: `compression.type` and
    /// `compression.<type>.level`). zstd needs a broker with Produce v7+ (KIP-110).
    ///
    /// # Errors
    ///
    /// Those of [`Conn::produce`]; [`Error::Records`] when the codec is not built in.
    ///
    /// # Cancel safety
    ///
    /// As [`Conn::write_multi`]: not cancel safe once the request is written (the broker
    /// may still append the batch).
    pub async fn produce_compressed(
        &self,
        topic: &str,
        partition: i32,
        records: &[Record],
        compression: impl Into<CompressionConfig>,
        acks: Acks,
        timeout: Duration,
    ) -> Result<ProducedPartition> {
        let mut batches = ProduceBatches::new(compression);
        batches.add_records(topic, partition, records)?;
        let mut out = self.write_multi(&batches, acks, timeout).await?;
        out.pop()
            .ok_or_else(|| Error::Protocol("Produce answered no partition".into()))
    }

    /// Sends every batch of `batches` in ONE Produce request to this broker, which should lead
    /// all their partitions.
    ///
    /// Returns one [`ProducedPartition`] per entry of `batches`, in the same order. Partitions fail
    /// independently: an unknown topic or partition, a partition this broker does not lead, or a
    /// batch larger than the broker accepts is reported in that partition's `error_code` while
    /// the other partitions are written. A partition the broker leaves out of its answer is
    /// reported with `UNKNOWN_SERVER_ERROR`.
    ///
    /// An empty `batches` returns an empty `Vec` at once, without a network call. With
    /// [`Acks::None`] the call returns once the request is written: every entry reports `NONE`
    /// and offsets of -1. The batches name their topics, so the request goes at Produce v12 at
    /// most (v13 names topics by id only, KIP-516; the [`crate::Writer`] sends v13).
    ///
    /// `timeout` is the leader's replication wait under [`Acks::All`] (the request's
    /// `timeout_ms`, whole milliseconds up to `i32::MAX`); the call waits for the answer up to
    /// the dialer's `request_timeout` plus `timeout`.
    ///
    /// # Errors
    ///
    /// Of the whole request: [`Error::Timeout`] after `request_timeout + timeout`,
    /// [`Error::ConnectionClosed`], [`Error::UnsupportedVersion`], encode/decode errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: once the request is written, dropping the future does not take it
    /// back; the broker may still append the batches (the answer is then discarded).
    pub async fn write_multi(
        &self,
        batches: &ProduceBatches,
        acks: Acks,
        timeout: Duration,
    ) -> Result<Vec<ProducedPartition>> {
        if batches.is_empty() {
            return Ok(Vec::new());
        }
        let version = self.write_multi_version()?;
        let req = produce_request_of(batches, acks, timeout);
        let wait = timeout;
        if acks == Acks::None {
            self.send_no_answer(&req, version, wait).await?;
            return Ok(batches
                .entries
                .iter()
                .map(|e| {
                    ProducedPartition::unanswered(&e.topic, e.partition, ErrorCode::NONE, None)
                })
                .collect());
        }
        let resp = self.request_at(&req, version, wait).await?;
        Ok(produced(batches, resp))
    }

    /// [`Conn::write_multi`]'s Produce version: v3+ carries magic v2 batches (below that the
    /// wire needs legacy message sets); the batches name their topics, so v12 at most (v13
    /// names topics by id, KIP-516).
    fn write_multi_version(&self) -> Result<i16> {
        // v3+ carries magic v2 batches; below that the wire needs legacy message sets.
        // The batches name their topics: v12 at most (v13 names topics by id, KIP-516).
        let version = self.version_for::<ProduceRequest>(Some(PRODUCE_BY_NAME_MAX))?;
        if version < 3 {
            return Err(Error::UnsupportedVersion {
                api: kafkit_protocol::ApiKey::Produce,
                ours: kafkit_protocol::VersionRange {
                    min: 3,
                    max: crate::ops::versions::client_max_for::<ProduceRequest>(),
                },
                broker: self.broker_versions().get(kafkit_protocol::ApiKey::Produce),
            });
        }
        Ok(version)
    }
}

/// The highest Produce version that names topics (v13 names them by topic id, KIP-516): what
/// the split route and [`Conn::write_multi`], which know topics by name, send at most.
pub(crate) const PRODUCE_BY_NAME_MAX: i16 = 12;

/// The Produce request carrying every batch of `batches` (grouped by topic, in order).
fn produce_request_of(batches: &ProduceBatches, acks: Acks, timeout: Duration) -> ProduceRequest {
    let mut topic_data: Vec<produce_request::TopicProduceData> = Vec::new();
    for e in &batches.entries {
        let p = produce_request::PartitionProduceData::default()
            .with_index(e.partition)
            .with_records(Some(e.batch.clone()));
        match topic_data.iter_mut().find(|t| t.name == e.topic) {
            Some(t) => t.partition_data.push(p),
            None => {
                let t = produce_request::TopicProduceData::default()
                    .with_name(e.topic.clone())
                    .with_partition_data(vec![p]);
                topic_data.push(t);
            }
        }
    }
    ProduceRequest::default()
        .with_acks(acks.as_i16())
        .with_timeout_ms(wire_ms(timeout))
        .with_topic_data(topic_data)
}

/// One [`ProducedPartition`] per entry of `batches`, in their order, from the answer `resp`;
/// a partition the broker left out fails with `UNKNOWN_SERVER_ERROR`.
fn produced(batches: &ProduceBatches, resp: ProduceResponse) -> Vec<ProducedPartition> {
    let mut answered: Vec<ProducedPartition> = Vec::with_capacity(batches.len());
    for t in resp.responses {
        for p in t.partition_responses {
            answered.push(ProducedPartition {
                topic: t.name.clone(),
                partition: p.index,
                error_code: p.error_code,
                error_message: p.error_message,
                base_offset: p.base_offset,
                log_append_time_ms: p.log_append_time_ms,
                log_start_offset: p.log_start_offset,
                record_errors: p
                    .record_errors
                    .into_iter()
                    .map(|r| RecordError {
                        batch_index: r.batch_index,
                        message: r.batch_index_error_message,
                    })
                    .collect(),
            });
        }
    }
    batches
        .entries
        .iter()
        .map(|e| {
            answered
                .iter()
                .position(|a| a.partition == e.partition && a.topic == e.topic)
                .map(|i| answered.swap_remove(i))
                .unwrap_or_else(|| {
                    ProducedPartition::unanswered(
                        &e.topic,
                        e.partition,
                        ErrorCode::UNKNOWN_SERVER_ERROR,
                        Some("the broker did not answer for this partition".into()),
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_takes_one_batch() {
        let mut set = ProduceBatches::new(Compression::None);
        set.add_batch("t", 0, Bytes::from_static(b"x")).unwrap();
        set.add_batch("t", 1, Bytes::from_static(b"x")).unwrap();
        set.add_batch("u", 0, Bytes::from_static(b"x")).unwrap();
        let dup = set.add_batch("t", 1, Bytes::from_static(b"y"));
        assert!(matches!(dup, Err(Error::InvalidArgument(_))));
        assert_eq!(set.len(), 3);
        assert_eq!(
            set.partitions().collect::<Vec<_>>(),
            vec![("t", 0), ("t", 1), ("u", 0)]
        );
        assert!(matches!(
            set.add_records("v", 0, &[]),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn a_negative_partition_or_an_empty_topic_is_refused_before_the_wire() {
        let mut set = ProduceBatches::new(Compression::None);
        let record = [Record::new(None, Some(Bytes::from_static(b"v")))];
        assert!(matches!(
            set.add_records("t", -1, &record),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            set.add_batch("", 0, Bytes::from_static(b"x")),
            Err(Error::InvalidArgument(_))
        ));
        assert!(set.is_empty());
    }

    #[test]
    fn split_by_leader_groups_entries_and_reports_unroutable_ones() {
        use crate::conn::metadata::{PartitionMetadata, TopicMetadata};
        let broker = |id: i32| Broker {
            node_id: id,
            host: "h".into(),
            port: 9000 + id,
            rack: None,
        };
        let part = |p: i32, leader: i32, code: ErrorCode| PartitionMetadata {
            partition: p,
            error_code: code,
            leader_id: leader,
            leader_epoch: 0,
            replicas: vec![leader],
            isr: vec![leader],
            offline_replicas: vec![],
        };
        let md = Metadata {
            brokers: vec![broker(1), broker(2)],
            cluster_id: None,
            controller_id: 1,
            topics: vec![std::sync::Arc::new(TopicMetadata {
                name: "t".into(),
                topic_id: Default::default(),
                error_code: ErrorCode::NONE,
                is_internal: false,
                partitions: vec![
                    part(0, 2, ErrorCode::NONE),
                    part(1, 1, ErrorCode::NONE),
                    part(2, 2, ErrorCode::NONE),
                    part(3, 9, ErrorCode::NONE),
                    part(4, -1, ErrorCode::LEADER_NOT_AVAILABLE),
                ],
            })],
        };
        let mut set = ProduceBatches::new(Compression::None);
        for p in 0..6 {
            set.add_batch("t", p, Bytes::from_static(b"b")).unwrap();
        }
        set.add_batch("u", 0, Bytes::from_static(b"b")).unwrap();
        let (groups, unroutable) = set.split_by_leader(&md);
        let shape: Vec<(i32, Vec<(&str, i32)>)> = groups
            .iter()
            .map(|(b, g)| (b.node_id, g.partitions().collect()))
            .collect();
        assert_eq!(
            shape,
            vec![(1, vec![("t", 1)]), (2, vec![("t", 0), ("t", 2)])]
        );
        let bad: Vec<(&str, i32, ErrorCode)> = unroutable
            .iter()
            .map(|r| (r.topic.as_str(), r.partition, r.error_code))
            .collect();
        assert_eq!(
            bad,
            vec![
                ("t", 3, ErrorCode::LEADER_NOT_AVAILABLE),
                ("t", 4, ErrorCode::LEADER_NOT_AVAILABLE),
                ("t", 5, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
                ("u", 0, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
            ]
        );
    }

    #[test]
    fn acks_wire_values() {
        assert_eq!(Acks::None.as_i16(), 0);
        assert_eq!(Acks::Leader.as_i16(), 1);
        assert_eq!(Acks::All.as_i16(), -1);
    }
}
