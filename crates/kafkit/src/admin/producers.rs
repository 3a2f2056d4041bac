//! Active producers per partition: DescribeProducers (key 61, KIP-664), sent to each partition's
//! leader.

use std::collections::{HashMap, HashSet};

use kafkit_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, describe_producers_request,
};

use super::Client;
use crate::error::{Error, Result};
use crate::ops::{ResourceResult, code_result, missing};

/// One producer with state on a partition (Java `ProducerState`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProducerState {
    /// The producer id.
    pub producer_id: i64,
    /// The producer epoch.
    pub producer_epoch: i32,
    /// The last sequence number written to the partition; -1 when none.
    pub last_sequence: i32,
    /// The timestamp of its last write (ms since the epoch); `None` when unknown.
    pub last_timestamp: Option<i64>,
    /// The epoch of the transaction coordinator that last wrote a marker; `None` when none.
    pub coordinator_epoch: Option<i32>,
    /// The first offset of its open transaction on this partition; `None` when no transaction
    /// is open (a hanging transaction shows here, KIP-664).
    pub current_transaction_start_offset: Option<i64>,
}

/// The producers of one partition as its leader describes them, or the partition's error.
pub type PartitionProducers = ResourceResult<Vec<ProducerState>>;

/// Builds a DescribeProducers request for `partitions` (`(topic, partition)` pairs).
///
/// Errors: [`Error::InvalidArgument`] for an empty list or a partition listed twice.
pub(crate) fn describe_producers_request<S: AsRef<str>>(
    partitions: &[(S, i32)],
) -> Result<DescribeProducersRequest> {
    if partitions.is_empty() {
        return Err(Error::InvalidArgument("no partitions to describe".into()));
    }
    let mut req = DescribeProducersRequest::default();
    let mut topic_index: HashMap<&str, usize> = HashMap::new();
    let mut seen: HashSet<(&str, i32)> = HashSet::with_capacity(partitions.len());
    for (topic, partition) in partitions {
        let (topic, partition) = (topic.as_ref(), *partition);
        if !seen.insert((topic, partition)) {
            return Err(Error::InvalidArgument(format!(
                "{topic}/{partition} listed twice"
            )));
        }
        let i = *topic_index.entry(topic).or_insert_with(|| {
            let t = describe_producers_request::TopicRequest::default().with_name(topic.to_owned());
            req.topics.push(t);
            req.topics.len() - 1
        });
        req.topics[i].partition_indexes.push(partition);
    }
    Ok(req)
}

/// Maps a DescribeProducers answer to one result per `(topic, partition)`, in order: the
/// partition's active producers, or its error (`NOT_LEADER_OR_FOLLOWER`,
/// `UNKNOWN_TOPIC_OR_PARTITION`, `TOPIC_AUTHORIZATION_FAILED`, `NETWORK_EXCEPTION` when the
/// leader was unreachable...).
pub(crate) fn describe_producers_results<S: AsRef<str>>(
    partitions: &[(S, i32)],
    resp: DescribeProducersResponse,
) -> Vec<((String, i32), PartitionProducers)> {
    let mut answered: HashMap<(String, i32), ResourceResult<Vec<ProducerState>>> = HashMap::new();
    for t in resp.topics {
        for p in t.partitions {
            let r = code_result("DescribeProducers", p.error_code, p.error_message).map(|()| {
                p.active_producers
                    .into_iter()
                    .map(|s| ProducerState {
                        producer_id: s.producer_id,
                        producer_epoch: s.producer_epoch,
                        last_sequence: s.last_sequence,
                        last_timestamp: (s.last_timestamp >= 0).then_some(s.last_timestamp),
                        coordinator_epoch: (s.coordinator_epoch >= 0)
                            .then_some(s.coordinator_epoch),
                        current_transaction_start_offset: (s.current_txn_start_offset >= 0)
                            .then_some(s.current_txn_start_offset),
                    })
                    .collect()
            });
            answered.insert((t.name.clone(), p.partition_index), r);
        }
    }
    partitions
        .iter()
        .map(|(t, p)| {
            let tp = (t.as_ref().to_owned(), *p);
            let r = answered
                .remove(&tp)
                .unwrap_or_else(|| Err(missing("DescribeProducers", &tp)));
            (tp, r)
        })
        .collect()
}

impl Client {
    /// Describes the producers with state on each `(topic, partition)` (DescribeProducers,
    /// KIP-664), asking each partition's leader (one request per broker): useful to find
    /// hanging transactions.
    ///
    /// Returns one result per partition, in order.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a partition given twice;
    /// [`Error::UnsupportedVersion`] for DescribeProducers when the brokers do not offer it;
    /// otherwise only when no partition got any answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_producers<S: AsRef<str>>(
        &self,
        partitions: &[(S, i32)],
    ) -> Result<Vec<((String, i32), PartitionProducers)>> {
        let req = describe_producers_request(partitions)?;
        self.version::<DescribeProducersRequest>().await?;
        let resp = self.transport().round_trip(req).await?;
        Ok(describe_producers_results(partitions, resp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit_protocol::messages::describe_producers_response;
    use kafkit_protocol::{ErrorCode, Message};

    #[test]
    fn describe_producers_builds_and_maps() {
        let parts = [("t", 0), ("u", 2), ("t", 1)];
        let req = describe_producers_request(&parts).expect("request");
        assert_eq!(req.topics.len(), 2);
        assert_eq!(req.topics[0].partition_indexes, [0, 1]);
        let mut buf = bytes::BytesMut::new();
        req.encode(&mut buf, 0).expect("encodes");
        assert!(describe_producers_request(&[("t", 0), ("t", 0)]).is_err());

        let mut resp = DescribeProducersResponse::default();
        let mut t = describe_producers_response::TopicResponse::default();
        t.name = "t".into();
        let mut p = describe_producers_response::PartitionResponse::default();
        p.partition_index = 1;
        let mut s = describe_producers_response::ProducerState::default();
        s.producer_id = 7;
        s.producer_epoch = 1;
        s.last_sequence = 3;
        s.last_timestamp = 1_000;
        s.coordinator_epoch = -1;
        s.current_txn_start_offset = 40;
        p.active_producers.push(s);
        t.partitions.push(p);
        let mut p = describe_producers_response::PartitionResponse::default();
        p.partition_index = 0;
        p.error_code = ErrorCode::NOT_LEADER_OR_FOLLOWER;
        t.partitions.push(p);
        resp.topics.push(t);
        let got = describe_producers_results(&parts, resp);
        assert_eq!(
            got[0].1.as_ref().err().and_then(Error::error_code),
            Some(ErrorCode::NOT_LEADER_OR_FOLLOWER)
        );
        assert!(matches!(got[1].1, Err(Error::Protocol(_))));
        assert_eq!(got[2].0, ("t".to_owned(), 1));
        let s = &got[2].1.as_ref().expect("described")[0];
        assert_eq!(s.producer_id, 7);
        assert_eq!(s.last_timestamp, Some(1_000));
        assert_eq!(s.coordinator_epoch, None);
        assert_eq!(s.current_transaction_start_offset, Some(40));
    }
}
