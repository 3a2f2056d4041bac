//! Partition offsets: ListOffsets (key 2) across partition leaders, and DeleteRecords (key 21).
//!
//! The ListOffsets request builder and answer mapper are shared with [`crate::Conn::list_offsets`]
//! and the reader (in `crate::ops::offsets`); DeleteRecords's are here.

use std::collections::{HashMap, HashSet};

use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, ListOffsetsRequest, delete_records_request,
};

use super::Client;
use crate::error::{Error, Result};
use crate::ops::offsets::{list_offsets_request, list_offsets_results};
use crate::ops::{ResourceResult, code_result, missing};
use crate::{IsolationLevel, ListedOffset, OffsetSpec};

/// One partition's answer of [`Client::list_offsets`] (Java `ListOffsetsResultInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OffsetInfo {
    /// The offset found; -1 when no record matches a timestamp query.
    pub offset: i64,
    /// The timestamp of the record at `offset` (ms since the epoch), `None` when not
    /// applicable (earliest / latest on most brokers).
    pub timestamp: Option<i64>,
    /// The leader epoch of that record (ListOffsets v4+), `None` when unknown.
    pub leader_epoch: Option<i32>,
}

/// Turns a [`ListedOffset`] into a keyed result: its error code fails it.
pub(crate) fn offset_info(l: ListedOffset) -> ((String, i32), ResourceResult<OffsetInfo>) {
    let r = code_result("ListOffsets", l.error_code, None).map(|()| OffsetInfo {
        offset: l.offset,
        timestamp: (l.timestamp >= 0).then_some(l.timestamp),
        leader_epoch: (l.leader_epoch >= 0).then_some(l.leader_epoch),
    });
    ((l.topic, l.partition), r)
}

/// The offset DeleteRecords understands as "the high watermark": delete every record.
pub const DELETE_TO_HIGH_WATERMARK: i64 = -1;

/// Builds a DeleteRecords request: delete the records of each `(topic, partition)` before
/// `offset` ([`DELETE_TO_HIGH_WATERMARK`] for all), waiting up to `timeout_ms` for the replicas.
///
/// Errors: [`Error::InvalidArgument`] for an empty list, a partition listed twice, or an offset
/// below -1.
pub(crate) fn delete_records_request<S: AsRef<str>>(
    partitions: &[(S, i32, i64)],
    timeout_ms: i32,
) -> Result<DeleteRecordsRequest> {
    if partitions.is_empty() {
        return Err(Error::InvalidArgument(
            "no partitions to delete records of".into(),
        ));
    }
    let mut req = DeleteRecordsRequest::default().with_timeout_ms(timeout_ms);
    let mut topic_index: HashMap<&str, usize> = HashMap::new();
    let mut seen: HashSet<(&str, i32)> = HashSet::with_capacity(partitions.len());
    for (topic, partition, offset) in partitions {
        let (topic, partition, offset) = (topic.as_ref(), *partition, *offset);
        if offset < DELETE_TO_HIGH_WATERMARK {
            return Err(Error::InvalidArgument(format!(
                "{topic}/{partition}: cannot delete records before offset {offset}"
            )));
        }
        if !seen.insert((topic, partition)) {
            return Err(Error::InvalidArgument(format!(
                "{topic}/{partition} listed twice"
            )));
        }
        let p = delete_records_request::DeleteRecordsPartition::default()
            .with_partition_index(partition)
            .with_offset(offset);
        let i = *topic_index.entry(topic).or_insert_with(|| {
            let t =
                delete_records_request::DeleteRecordsTopic::default().with_name(topic.to_owned());
            req.topics.push(t);
            req.topics.len() - 1
        });
        req.topics[i].partitions.push(p);
    }
    Ok(req)
}

/// Maps a DeleteRecords answer to one result per entry of `partitions`, in order: the
/// partition's new log start offset (low watermark), or its error (`OFFSET_OUT_OF_RANGE` for an
/// offset past the high watermark, `POLICY_VIOLATION` for a compacted topic,
/// `NOT_LEADER_OR_FOLLOWER`, `NETWORK_EXCEPTION` when the leader was unreachable...).
pub(crate) fn delete_records_results<S: AsRef<str>>(
    partitions: &[(S, i32, i64)],
    resp: DeleteRecordsResponse,
) -> Vec<((String, i32), ResourceResult<i64>)> {
    let answered: HashMap<(&str, i32), (i64, ErrorCode)> = resp
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    (t.name.as_str(), p.partition_index),
                    (p.low_watermark, p.error_code),
                )
            })
        })
        .collect();
    partitions
        .iter()
        .map(|(t, p, _)| {
            let tp = (t.as_ref().to_owned(), *p);
            let r = match answered.get(&(t.as_ref(), *p)) {
                Some(&(low, c)) => code_result("DeleteRecords", c, None).map(|()| low),
                None => Err(missing("DeleteRecords", &tp)),
            };
            (tp, r)
        })
        .collect()
}

impl Client {
    /// Looks up offsets (ListOffsets) for each `(topic, partition, spec)`: the earliest, the
    /// latest, the first at or after a timestamp, or the one with the largest timestamp
    /// ([`OffsetSpec::MaxTimestamp`], KIP-734). Partitions are grouped by leader, one request
    /// per broker sent concurrently (the transport's split route), leaders refreshed and
    /// retried when they moved. `ReadCommitted` makes `Latest` the last stable offset.
    ///
    /// Returns one result per entry of `partitions`, in order.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a partition given twice;
    /// [`Error::UnsupportedVersion`] for ListOffsets when a spec or the isolation level needs a
    /// newer version than the brokers speak (max timestamp: v7, earliest local: v8, latest
    /// tiered: v9, earliest pending upload: v11; read committed: v2); otherwise
    /// only when no partition got any answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn list_offsets<S: AsRef<str>>(
        &self,
        partitions: &[(S, i32, OffsetSpec)],
        isolation_level: IsolationLevel,
    ) -> Result<Vec<((String, i32), ResourceResult<OffsetInfo>)>> {
        let version = self.version::<ListOffsetsRequest>().await?;
        let req = list_offsets_request(partitions, isolation_level, version)?;
        let resp = self.transport().round_trip(req).await?;
        Ok(list_offsets_results(partitions, resp)
            .into_iter()
            .map(offset_info)
            .collect())
    }

    /// Deletes the records of each `(topic, partition, offset)` before `offset`
    /// (DeleteRecords, KIP-107): the partition's log start offset moves up to `offset`
    /// ([`DELETE_TO_HIGH_WATERMARK`] for every record). Sent to each partition's leader, one
    /// request per broker. The brokers wait up to [`Client::timeout`] for the replicas.
    ///
    /// Returns one result per entry of `partitions`, in order: the new low watermark, or the
    /// partition's error.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list, a partition given twice or an
    /// offset below -1; [`Error::UnsupportedVersion`] for DeleteRecords when the brokers do
    /// not offer it; otherwise only when no partition got any answer.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn delete_records<S: AsRef<str>>(
        &self,
        partitions: &[(S, i32, i64)],
    ) -> Result<Vec<((String, i32), ResourceResult<i64>)>> {
        let req = delete_records_request(partitions, self.timeout_ms())?;
        self.version::<DeleteRecordsRequest>().await?;
        let resp = self.transport().round_trip(req).await?;
        Ok(delete_records_results(partitions, resp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit_protocol::messages::{
        ListOffsetsResponse, delete_records_response, list_offsets_response,
    };
    use kafkit_protocol::{ApiKey, ErrorCode, Message};

    #[test]
    fn list_offsets_specs_and_versions() {
        let parts = [
            ("t", 0, OffsetSpec::Earliest),
            ("t", 1, OffsetSpec::Latest),
            ("u", 0, OffsetSpec::Timestamp(1_700_000_000_000)),
            ("u", 1, OffsetSpec::MaxTimestamp),
        ];
        let req = list_offsets_request(&parts, IsolationLevel::ReadCommitted, 7).expect("v7");
        assert_eq!(req.replica_id, -1);
        assert_eq!(req.isolation_level, 1);
        let ts: Vec<i64> = req
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.timestamp))
            .collect();
        assert_eq!(ts, [-2, -1, 1_700_000_000_000, -3]);
        let mut buf = bytes::BytesMut::new();
        req.encode(&mut buf, 7).expect("encodes at v7");
        match list_offsets_request(&parts, IsolationLevel::ReadUncommitted, 6) {
            Err(Error::UnsupportedVersion { api, ours, .. }) => {
                assert_eq!(api, ApiKey::ListOffsets);
                assert_eq!(ours.min, 7);
            }
            other => panic!("max timestamp needs v7: {other:?}"),
        }
        assert!(list_offsets_request(&parts[..3], IsolationLevel::ReadCommitted, 1).is_err());
        assert!(list_offsets_request(&parts[..3], IsolationLevel::ReadUncommitted, 1).is_ok());
        let twice = [("t", 0, OffsetSpec::Earliest), ("t", 0, OffsetSpec::Latest)];
        assert!(matches!(
            list_offsets_request(&twice, IsolationLevel::ReadUncommitted, 7),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn list_offsets_results_in_caller_order() {
        let parts = [
            ("t", 1, OffsetSpec::Latest),
            ("u", 0, OffsetSpec::Earliest),
            ("t", 0, OffsetSpec::Latest),
        ];
        let mut resp = ListOffsetsResponse::default();
        for (name, ps) in [("t", vec![(0, 5), (1, 9)]), ("u", vec![])] {
            let mut t = list_offsets_response::ListOffsetsTopicResponse::default();
            t.name = name.into();
            for (p, o) in ps {
                let mut rp = list_offsets_response::ListOffsetsPartitionResponse::default();
                rp.partition_index = p;
                rp.offset = o;
                t.partitions.push(rp);
            }
            resp.topics.push(t);
        }
        let got: Vec<_> = list_offsets_results(&parts, resp)
            .into_iter()
            .map(offset_info)
            .collect();
        assert_eq!(got[0].0, ("t".to_owned(), 1));
        assert_eq!(got[0].1.as_ref().map(|i| i.offset).ok(), Some(9));
        assert_eq!(got[0].1.as_ref().map(|i| i.timestamp).ok(), Some(None));
        assert_eq!(
            got[1].1.as_ref().err().and_then(Error::error_code),
            Some(ErrorCode::UNKNOWN_SERVER_ERROR)
        );
        assert_eq!(got[2].1.as_ref().map(|i| i.offset).ok(), Some(5));
    }

    #[test]
    fn delete_records_builds_and_maps() {
        let parts = [("t", 0, 5), ("t", 1, DELETE_TO_HIGH_WATERMARK), ("u", 0, 1)];
        let req = delete_records_request(&parts, 1_000).expect("request");
        assert_eq!(req.timeout_ms, 1_000);
        assert_eq!(req.topics.len(), 2);
        assert_eq!(req.topics[0].partitions[1].offset, -1);
        assert!(delete_records_request(&[("t", 0, -2)], 1).is_err());
        assert!(delete_records_request(&[("t", 0, 1), ("t", 0, 2)], 1).is_err());
        assert!(delete_records_request::<&str>(&[], 1).is_err());

        let mut resp = DeleteRecordsResponse::default();
        let mut t = delete_records_response::DeleteRecordsTopicResult::default();
        t.name = "t".into();
        let mut p = delete_records_response::DeleteRecordsPartitionResult::default();
        p.partition_index = 1;
        p.low_watermark = 12;
        t.partitions.push(p);
        let mut p = delete_records_response::DeleteRecordsPartitionResult::default();
        p.partition_index = 0;
        p.low_watermark = -1;
        p.error_code = ErrorCode::OFFSET_OUT_OF_RANGE;
        t.partitions.push(p);
        resp.topics.push(t);
        let got = delete_records_results(&parts, resp);
        assert_eq!(got[0].0, ("t".to_owned(), 0));
        assert_eq!(
            got[0].1.as_ref().err().and_then(Error::error_code),
            Some(ErrorCode::OFFSET_OUT_OF_RANGE)
        );
        assert_eq!(got[1].1.as_ref().ok(), Some(&12));
        assert!(matches!(got[2].1, Err(Error::Protocol(_))));
    }

    /// A big cluster's look-up (every partition of 30 000 topics, e.g. for consumer group lag)
    /// is built and mapped back in linear time: the former duplicate check and topic grouping
    /// scanned everything seen so far for each partition, which took minutes at this size.
    #[test]
    fn many_topics_build_and_map_back_in_linear_time() {
        let n = 30_000;
        let names: Vec<String> = (0..n).map(|i| format!("topic-{i}")).collect();
        let specs: Vec<(&str, i32, OffsetSpec)> = names
            .iter()
            .rev()
            .flat_map(|t| {
                [
                    (t.as_str(), 1, OffsetSpec::Latest),
                    (t.as_str(), 0, OffsetSpec::Earliest),
                ]
            })
            .collect();
        let req =
            list_offsets_request(&specs, IsolationLevel::ReadUncommitted, 7).expect("request");
        assert_eq!(req.topics.len(), n, "one entry per topic");
        assert_eq!(
            req.topics[0].name,
            format!("topic-{}", n - 1),
            "first appearance order"
        );
        assert_eq!(req.topics[0].partitions.len(), 2);

        let mut resp = ListOffsetsResponse::default();
        for t in &names {
            let mut rt = list_offsets_response::ListOffsetsTopicResponse::default();
            rt.name = t.clone();
            for p in 0..2 {
                let mut rp = list_offsets_response::ListOffsetsPartitionResponse::default();
                rp.partition_index = p;
                rp.offset = i64::from(p) + 10;
                rt.partitions.push(rp);
            }
            resp.topics.push(rt);
        }
        let got = list_offsets_results(&specs, resp);
        assert_eq!(got.len(), 2 * n);
        assert!(got.iter().zip(&specs).all(|(g, (t, p, _))| g.topic == *t
            && g.partition == *p
            && g.offset == i64::from(*p) + 10));

        let deletes: Vec<(&str, i32, i64)> = specs.iter().map(|(t, p, _)| (*t, *p, 5)).collect();
        assert_eq!(
            delete_records_request(&deletes, 1)
                .expect("request")
                .topics
                .len(),
            n
        );
        let mut twice = deletes.clone();
        twice.push(deletes[7]);
        assert!(matches!(
            delete_records_request(&twice, 1),
            Err(Error::InvalidArgument(_))
        ));
        let pairs: Vec<(&str, i32)> = specs.iter().map(|(t, p, _)| (*t, *p)).collect();
        let req = crate::admin::producers::describe_producers_request(&pairs).expect("request");
        assert_eq!(req.topics.len(), n);
    }
}
