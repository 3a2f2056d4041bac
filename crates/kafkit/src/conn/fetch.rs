//! Reading records: Fetch (key 1) for one partition or several in one request.

use std::time::Duration;

use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::{FetchRequest, FetchResponse, fetch_request, fetch_response};
use kafkit_protocol::records::{DecodeOptions, Record, RecordsError};

use crate::conn::Conn;
use crate::conn::records;
use crate::error::{Error, Result};
use crate::ops::offsets::IsolationLevel;
use crate::time::wire_ms;

/// Fetch v13+ names topics by id only (KIP-516); this client sends names, so it stops at v12.
const FETCH_MAX_VERSION_BY_NAME: i16 = 12;

/// Limits of a Fetch request (Java consumer names in parentheses).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FetchParams {
    /// How long the broker may wait for `min_bytes` to accumulate (`fetch.max.wait.ms`,
    /// default 500 ms; sent in whole milliseconds up to `i32::MAX`).
    pub max_wait: Duration,
    /// The least data the broker should gather before answering, in bytes
    /// (`fetch.min.bytes`, default 1).
    pub min_bytes: i32,
    /// The most data to return per partition, in bytes (`max.partition.fetch.bytes`,
    /// default 1 048 576; the request's `partition_max_bytes`). The broker returns at least one
    /// batch even if it is larger.
    pub max_partition_fetch_bytes: i32,
    /// The most data to return for the whole response, in bytes (`fetch.max.bytes`, default
    /// 52 428 800; Fetch v3+).
    pub fetch_max_bytes: i32,
    /// Which records may be read (`isolation.level`, default read uncommitted; Fetch v4+).
    pub isolation_level: IsolationLevel,
}

impl Default for FetchParams {
    fn default() -> Self {
        FetchParams {
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            max_partition_fetch_bytes: 1_048_576,
            fetch_max_bytes: 52_428_800,
            isolation_level: IsolationLevel::ReadUncommitted,
        }
    }
}

impl FetchParams {
    /// Sets `max_wait` (Java `fetch.max.wait.ms`).
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait;
        self
    }

    /// Sets `min_bytes` (bytes).
    pub fn min_bytes(mut self, bytes: i32) -> Self {
        self.min_bytes = bytes;
        self
    }

    /// Sets `max_partition_fetch_bytes` (bytes per partition; Java
    /// `max.partition.fetch.bytes`).
    pub fn max_partition_fetch_bytes(mut self, bytes: i32) -> Self {
        self.max_partition_fetch_bytes = bytes;
        self
    }

    /// Sets `fetch_max_bytes` (bytes per response; Java `fetch.max.bytes`).
    pub fn fetch_max_bytes(mut self, bytes: i32) -> Self {
        self.fetch_max_bytes = bytes;
        self
    }

    /// Sets the isolation level.
    pub fn isolation_level(mut self, level: IsolationLevel) -> Self {
        self.isolation_level = level;
        self
    }
}

/// What a Fetch request returned for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FetchedPartition {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// `NONE`, or why the read failed (e.g. `OFFSET_OUT_OF_RANGE`, `NOT_LEADER_OR_FOLLOWER`,
    /// `UNKNOWN_TOPIC_OR_PARTITION`). `CORRUPT_MESSAGE` (or `UNSUPPORTED_COMPRESSION_TYPE`)
    /// when the broker answered but a returned batch could not be read: see `records_error`.
    pub error_code: ErrorCode,
    /// The offset after the last fully replicated record.
    pub high_watermark: i64,
    /// The last stable offset (v4+; transactions), -1 when unknown.
    pub last_stable_offset: i64,
    /// The partition's log start offset (v5+), -1 when unknown.
    pub log_start_offset: i64,
    /// The offset to fetch next (Java `nextFetchOffset`): the next offset of the last whole
    /// batch returned, control batches (transaction markers), aborted transactional batches
    /// and batches emptied by compaction included; the requested offset when no whole batch
    /// came back (or the partition failed). A consumer that fetches from here never asks for
    /// the same offset again after a response that held only markers.
    pub next_offset: i64,
    /// The records at or after the requested offset, in offset order. Control records
    /// (transaction markers) are left out, and under `ReadCommitted` so are the records of
    /// aborted transactions (KIP-98). Keys, values and header values share the response
    /// buffer (no copy). When a batch could not be decoded, the records of the batches before
    /// it.
    pub records: Vec<Record>,
    /// Why a returned batch could not be decoded (CRC mismatch, malformed batch, codec not
    /// available), `None` when every batch was read. Only this partition is affected.
    pub records_error: Option<RecordsError>,
}

impl FetchedPartition {
    /// Decodes one partition of a Fetch answer (`p`, from a [`FetchRequest`] sent with
    /// [`Conn::request`], e.g. one that uses a fetch session) fetched from `fetch_offset`, as
    /// [`Conn::fetch_multi`] does: whole batches in offset order, records before
    /// `fetch_offset` dropped, control batches (transaction markers) left out and, under
    /// [`IsolationLevel::ReadCommitted`], the batches of the transactions that
    /// `p.aborted_transactions` lists as aborted (KIP-98; the same decision as the `Reader`'s,
    /// `conn/aborted.rs`); `next_offset` past every whole batch. The partition's index is
    /// `p.partition_index`. A batch that does not decode sets `records_error` and the code
    /// `CORRUPT_MESSAGE` (or `UNSUPPORTED_COMPRESSION_TYPE`); the records before it are kept.
    pub fn decode(
        topic: &str,
        fetch_offset: i64,
        isolation_level: IsolationLevel,
        p: fetch_response::PartitionData,
    ) -> FetchedPartition {
        let mut budget = DecodeOptions::new().decoded_budget();
        FetchedPartition::decode_within(topic, fetch_offset, isolation_level, p, &mut budget, false)
    }

    /// [`FetchedPartition::decode`] charging the decoded values to `budget` (what is left of
    /// one Fetch answer's decoded-memory budget). With `shared` (earlier partitions of the
    /// answer took part of it), a batch that does not fit is deferred instead of failed: the
    /// records of the whole batches before it, `next_offset` after them, no error, so the next
    /// Fetch from `next_offset` reads the rest.
    pub(crate) fn decode_within(
        topic: &str,
        fetch_offset: i64,
        isolation_level: IsolationLevel,
        p: fetch_response::PartitionData,
        budget: &mut usize,
        shared: bool,
    ) -> FetchedPartition {
        let mut f = FetchedPartition {
            topic: topic.to_owned(),
            partition: p.partition_index,
            error_code: p.error_code,
            high_watermark: p.high_watermark,
            last_stable_offset: p.last_stable_offset,
            log_start_offset: p.log_start_offset,
            next_offset: fetch_offset,
            records: Vec::new(),
            records_error: None,
        };
        if let Some(bytes) = &p.records {
            let aborted: Option<Vec<(i64, i64)>> =
                (isolation_level == IsolationLevel::ReadCommitted).then(|| {
                    p.aborted_transactions
                        .iter()
                        .flatten()
                        .map(|a| (a.producer_id, a.first_offset))
                        .collect()
                });
            let decoded = records::decode_records(
                bytes,
                fetch_offset,
                aborted.as_deref(),
                &mut f.records,
                budget,
            );
            match decoded {
                Ok(next) => f.next_offset = next,
                Err((next, RecordsError::DecodedTooLarge { .. })) if shared => f.next_offset = next,
                Err((_, e)) => {
                    f.error_code = if e.kafka_error_name() == Some("UNSUPPORTED_COMPRESSION_TYPE") {
                        ErrorCode::UNSUPPORTED_COMPRESSION_TYPE
                    } else {
                        ErrorCode::CORRUPT_MESSAGE
                    };
                    f.records_error = Some(e);
                }
            }
        }
        f
    }

    /// `Ok(self)` on success; [`Error::Records`] when a batch could not be decoded
    /// (`records_error`); [`Error::Broker`] with the partition's code otherwise.
    pub fn into_result(self) -> Result<Self> {
        if let Some(e) = self.records_error {
            Err(Error::Records(e))
        } else if self.error_code.is_ok() {
            Ok(self)
        } else {
            Err(Error::broker("Fetch", self.error_code, None))
        }
    }
}

impl Conn {
    /// Reads records of `topic`/`partition` starting at `offset` (Fetch API, no fetch session);
    /// this broker must lead the partition. Same as [`Conn::fetch_multi`] with one partition.
    ///
    /// Partition-level failures are in the result's `error_code`.
    ///
    /// # Errors
    ///
    /// Those of
    /// [`Conn::fetch_multi`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future abandons the request (it only reads); the connection
    /// stays usable and a late answer is discarded.
    pub async fn fetch(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        params: &FetchParams,
    ) -> Result<FetchedPartition> {
        let mut out = self
            .fetch_multi(&[(topic, partition, offset)], params)
            .await?;
        out.pop()
            .ok_or_else(|| Error::Protocol("Fetch answered no partition".into()))
    }

    /// Reads records of several partitions in ONE Fetch request (no fetch session, KIP-227);
    /// `partitions` holds `(topic, partition, fetch offset)` and this broker must lead them all.
    /// Each partition returns at most `params.max_partition_fetch_bytes`, the whole response at most
    /// `params.fetch_max_bytes` (the broker still returns a first batch that is larger).
    ///
    /// Returns one [`FetchedPartition`] per input entry, in input order; a partition the broker
    /// leaves out of its answer carries the response's top-level error code, or
    /// `UNKNOWN_SERVER_ERROR`. The call waits up to `request_timeout + params.max_wait`.
    ///
    /// A batch that cannot be decoded (e.g. CRC mismatch, or a codec this build lacks) fails only
    /// its partition: that entry gets `CORRUPT_MESSAGE` (or `UNSUPPORTED_COMPRESSION_TYPE`), the
    /// records before the batch, and the cause in `records_error`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a partition listed twice; and
    /// those of [`Conn::request`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future abandons the request (it only reads); the connection
    /// stays usable and a late answer is discarded.
    pub async fn fetch_multi(
        &self,
        partitions: &[(&str, i32, i64)],
        params: &FetchParams,
    ) -> Result<Vec<FetchedPartition>> {
        if partitions.is_empty() {
            return Err(Error::InvalidArgument("no partitions to fetch".into()));
        }
        let version = self.version_for::<FetchRequest>(Some(FETCH_MAX_VERSION_BY_NAME))?;
        let req = fetch_request(partitions, params)?;
        let resp = self.request_at(&req, version, params.max_wait).await?;
        Ok(fetched_partitions(partitions, params, resp))
    }
}

/// `fetch_multi`'s request: `partitions` (not empty) by name, without a fetch session
/// (KIP-227); a partition listed twice is refused.
fn fetch_request(partitions: &[(&str, i32, i64)], params: &FetchParams) -> Result<FetchRequest> {
    let mut req = FetchRequest::default()
        .with_replica_id(-1)
        .with_max_wait_ms(wire_ms(params.max_wait))
        .with_min_bytes(params.min_bytes)
        .with_max_bytes(params.fetch_max_bytes)
        .with_isolation_level(params.isolation_level.as_i8());
    // No fetch session (KIP-227): session id 0, epoch -1.
    req.session_id = 0;
    req.session_epoch = -1;
    for (i, &(topic, partition, offset)) in partitions.iter().enumerate() {
        if partitions[..i]
            .iter()
            .any(|&(t, p, _)| t == topic && p == partition)
        {
            return Err(Error::InvalidArgument(format!(
                "{topic}/{partition} listed twice"
            )));
        }
        let p = fetch_request::FetchPartition::default()
            .with_partition(partition)
            .with_fetch_offset(offset)
            .with_partition_max_bytes(params.max_partition_fetch_bytes);
        match req.topics.iter_mut().find(|t| t.topic == topic) {
            Some(t) => t.partitions.push(p),
            None => {
                let t = fetch_request::FetchTopic::default()
                    .with_topic(topic.to_owned())
                    .with_partitions(vec![p]);
                req.topics.push(t);
            }
        }
    }
    Ok(req)
}

/// `fetch_multi`'s answer: one [`FetchedPartition`] per entry of `partitions`, in that order;
/// a partition the answer leaves out carries the top-level error (or `UNKNOWN_SERVER_ERROR`).
fn fetched_partitions(
    partitions: &[(&str, i32, i64)],
    params: &FetchParams,
    resp: FetchResponse,
) -> Vec<FetchedPartition> {
    let top_error = resp.error_code;
    let mut answered: Vec<(String, fetch_response::PartitionData)> = resp
        .responses
        .into_iter()
        .flat_map(|t| {
            let topic = t.topic;
            t.partitions.into_iter().map(move |p| (topic.clone(), p))
        })
        .collect();
    let mut out = Vec::with_capacity(partitions.len());
    // One decoded-memory budget for the whole answer (`DecodeOptions::max_decoded_bytes`),
    // not one per partition: see `FetchedPartition::decode_within`.
    let full = DecodeOptions::new().decoded_budget();
    let mut budget = full;
    for &(topic, partition, offset) in partitions {
        let found = answered
            .iter()
            .position(|(t, p)| p.partition_index == partition && t == topic)
            .map(|i| answered.swap_remove(i).1);
        let Some(p) = found else {
            out.push(FetchedPartition {
                topic: topic.to_owned(),
                partition,
                error_code: if top_error.is_ok() {
                    ErrorCode::UNKNOWN_SERVER_ERROR
                } else {
                    top_error
                },
                high_watermark: -1,
                last_stable_offset: -1,
                log_start_offset: -1,
                next_offset: offset,
                records: Vec::new(),
                records_error: None,
            });
            continue;
        };
        let shared = budget < full;
        let f = FetchedPartition::decode_within(
            topic,
            offset,
            params.isolation_level,
            p,
            &mut budget,
            shared,
        );
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafkit_protocol::records::{RecordBatchEncoder, RecordBatchOptions};

    /// Two batches of 20 records; the offset of the second.
    fn two_batches() -> (Bytes, i64) {
        let mut buf = BytesMut::new();
        for base in [0, 20] {
            let mut enc =
                RecordBatchEncoder::new(&mut buf, RecordBatchOptions::new().base_offset(base))
                    .unwrap();
            for i in 0..20 {
                enc.append(&Record::new(
                    None,
                    Some(Bytes::from(format!("{}", base + i))),
                ))
                .unwrap();
            }
            enc.finish().unwrap();
        }
        (buf.freeze(), 20)
    }

    /// `fetch_multi`'s one budget per answer: a partition whose batches no longer fit what
    /// earlier partitions left is cut at a whole batch, without an error, and `next_offset`
    /// says where the next Fetch resumes; alone (the whole budget) it is a typed error.
    #[test]
    fn a_partition_past_the_answers_decoded_budget_is_deferred_not_failed() {
        let (data, second) = two_batches();
        let part = || {
            let mut p = fetch_response::PartitionData::default();
            p.records = Some(data.clone());
            p
        };
        // Room for the first batch only (20 records, a little over).
        let mut budget = 25 * std::mem::size_of::<Record>();
        let f = FetchedPartition::decode_within(
            "t",
            0,
            IsolationLevel::ReadUncommitted,
            part(),
            &mut budget,
            true,
        );
        assert!(f.error_code.is_ok() && f.records_error.is_none(), "{f:?}");
        assert_eq!(f.records.len(), 20);
        assert_eq!(
            f.next_offset, second,
            "the next Fetch reads the second batch"
        );
        assert!(budget < 5 * std::mem::size_of::<Record>(), "{budget} left");
        let mut budget = 25 * std::mem::size_of::<Record>();
        let f = FetchedPartition::decode_within(
            "t",
            0,
            IsolationLevel::ReadUncommitted,
            part(),
            &mut budget,
            false,
        );
        assert_eq!(f.error_code, ErrorCode::CORRUPT_MESSAGE);
        assert!(
            matches!(f.records_error, Some(RecordsError::DecodedTooLarge { .. })),
            "{:?}",
            f.records_error
        );
        assert_eq!(f.records.len(), 20, "the records before it are kept");
    }
}
