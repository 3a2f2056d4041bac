//! Partition reassignment operations: list and alter partition reassignments
//! (ListPartitionReassignments key 46, AlterPartitionReassignments key 45; KIP-455).

use kafkit_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
    alter_partition_reassignments_request, list_partition_reassignments_request,
};

use super::Client;
use crate::error::Result;
use crate::ops::{ResourceResult, check_distinct, code_result, in_order};

/// A reassignment in progress (KIP-455).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionReassignment {
    /// The topic.
    pub topic: String,
    /// The partition index.
    pub partition: i32,
    /// The current replica set (node ids), including those being added.
    pub replicas: Vec<i32>,
    /// Replicas being added.
    pub adding_replicas: Vec<i32>,
    /// Replicas being removed.
    pub removing_replicas: Vec<i32>,
}

/// Groups `(topic, partition)` pairs by topic, topics in first-seen order.
fn by_topic<'a>(partitions: impl IntoIterator<Item = (&'a str, i32)>) -> Vec<(String, Vec<i32>)> {
    let mut out: Vec<(String, Vec<i32>)> = Vec::new();
    for (topic, p) in partitions {
        match out.iter_mut().find(|(t, _)| t == topic) {
            Some((_, ps)) => ps.push(p),
            None => out.push((topic.to_owned(), vec![p])),
        }
    }
    out
}

impl Client {
    /// The partition reassignments in progress, for `partitions` (`None`: all)
    /// (ListPartitionReassignments API). Partitions not being reassigned are not listed.
    ///
    /// # Errors
    ///
    /// [`crate::Error::Broker`] with the top-level code, [`crate::Error::UnsupportedVersion`]
    /// naming ListPartitionReassignments, and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn list_partition_reassignments(
        &self,
        partitions: Option<&[(&str, i32)]>,
    ) -> Result<Vec<PartitionReassignment>> {
        let req = ListPartitionReassignmentsRequest::default()
            .with_timeout_ms(self.timeout_ms())
            .with_topics(partitions.map(|ps| {
            by_topic(ps.iter().copied())
                .into_iter()
                .map(|(name, indexes)| {
                    list_partition_reassignments_request::ListPartitionReassignmentsTopics::default()
                        .with_name(name)
                        .with_partition_indexes(indexes)
                })
                .collect()
        }));
        let resp = self.transport().round_trip(req).await?;
        list_reassignments_result(resp)
    }

    /// Starts (`Some(replicas)`) or cancels (`None`) reassignments of partitions
    /// (AlterPartitionReassignments API). The broker waits up to [`Client::timeout`].
    ///
    /// Returns one `((topic, partition), result)` per partition in the given order (e.g.
    /// `NO_REASSIGNMENT_IN_PROGRESS` when cancelling nothing, `INVALID_REPLICA_ASSIGNMENT`).
    ///
    /// # Errors
    ///
    /// [`crate::Error::InvalidArgument`] for an empty list or a partition given twice,
    /// [`crate::Error::Broker`] with the top-level code, [`crate::Error::UnsupportedVersion`]
    /// naming AlterPartitionReassignments, and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    #[allow(clippy::type_complexity)]
    pub async fn alter_partition_reassignments(
        &self,
        reassignments: &[(&str, i32, Option<Vec<i32>>)],
    ) -> Result<Vec<((String, i32), ResourceResult<()>)>> {
        let keys: Vec<(String, i32)> = reassignments
            .iter()
            .map(|(t, p, _)| ((*t).to_owned(), *p))
            .collect();
        check_distinct("partition", &keys)?;
        let req = alter_reassignments_request_for(reassignments, self.timeout_ms());
        let resp = self.transport().round_trip(req).await?;
        alter_reassignments_results(keys, resp)
    }
}

/// The AlterPartitionReassignments request, topics in first-seen order.
pub(crate) fn alter_reassignments_request_for(
    reassignments: &[(&str, i32, Option<Vec<i32>>)],
    timeout_ms: i32,
) -> AlterPartitionReassignmentsRequest {
    let mut req = AlterPartitionReassignmentsRequest::default().with_timeout_ms(timeout_ms);
    for (topic, partition, replicas) in reassignments {
        let idx = match req.topics.iter().position(|t| t.name == *topic) {
            Some(i) => i,
            None => {
                let t = alter_partition_reassignments_request::ReassignableTopic::default()
                    .with_name((*topic).to_owned());
                req.topics.push(t);
                req.topics.len() - 1
            }
        };
        let p = alter_partition_reassignments_request::ReassignablePartition::default()
            .with_partition_index(*partition)
            .with_replicas(replicas.clone());
        req.topics[idx].partitions.push(p);
    }
    req
}

/// Per-partition results in the order of `keys`, or the top-level error.
#[allow(clippy::type_complexity)]
pub(crate) fn alter_reassignments_results(
    keys: Vec<(String, i32)>,
    resp: AlterPartitionReassignmentsResponse,
) -> Result<Vec<((String, i32), ResourceResult<()>)>> {
    code_result(
        "AlterPartitionReassignments",
        resp.error_code,
        resp.error_message,
    )?;
    let answers = resp.responses.into_iter().flat_map(|t| {
        let name = t.name;
        t.partitions.into_iter().map(move |p| {
            (
                (name.clone(), p.partition_index),
                code_result("AlterPartitionReassignments", p.error_code, p.error_message),
            )
        })
    });
    Ok(in_order("AlterPartitionReassignments", keys, answers))
}

/// The reassignments of a ListPartitionReassignments response, or its error.
pub(crate) fn list_reassignments_result(
    resp: ListPartitionReassignmentsResponse,
) -> Result<Vec<PartitionReassignment>> {
    code_result(
        "ListPartitionReassignments",
        resp.error_code,
        resp.error_message,
    )?;
    Ok(resp
        .topics
        .into_iter()
        .flat_map(|t| {
            let name = t.name;
            t.partitions
                .into_iter()
                .map(move |p| PartitionReassignment {
                    topic: name.clone(),
                    partition: p.partition_index,
                    replicas: p.replicas,
                    adding_replicas: p.adding_replicas,
                    removing_replicas: p.removing_replicas,
                })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use kafkit_protocol::ErrorCode;
    use kafkit_protocol::messages::{
        alter_partition_reassignments_response, list_partition_reassignments_response,
    };

    use super::*;

    #[test]
    fn requests_group_partitions_by_topic() {
        assert_eq!(
            by_topic([("a", 1), ("b", 0), ("a", 0)]),
            vec![("a".to_owned(), vec![1, 0]), ("b".to_owned(), vec![0])]
        );
        let req = alter_reassignments_request_for(
            &[("a", 0, Some(vec![1, 2])), ("b", 3, None), ("a", 1, None)],
            1_000,
        );
        assert_eq!(req.topics.len(), 2);
        assert_eq!(req.topics[0].partitions[0].replicas, Some(vec![1, 2]));
        assert_eq!(req.topics[0].partitions[1].partition_index, 1);
        assert_eq!(req.topics[1].partitions[0].replicas, None);
    }

    #[test]
    fn results_are_per_partition_in_order() {
        let mut resp = AlterPartitionReassignmentsResponse::default();
        let mut t = alter_partition_reassignments_response::ReassignableTopicResponse::default();
        t.name = "a".into();
        for (p, code) in [
            (1, ErrorCode::NO_REASSIGNMENT_IN_PROGRESS),
            (0, ErrorCode::NONE),
        ] {
            let mut r =
                alter_partition_reassignments_response::ReassignablePartitionResponse::default();
            r.partition_index = p;
            r.error_code = code;
            t.partitions.push(r);
        }
        resp.responses.push(t);
        let out =
            alter_reassignments_results(vec![("a".into(), 0), ("a".into(), 1)], resp).unwrap();
        assert!(out[0].1.is_ok());
        assert_eq!(
            out[1].1.as_ref().unwrap_err().error_code(),
            Some(ErrorCode::NO_REASSIGNMENT_IN_PROGRESS)
        );

        let mut resp = ListPartitionReassignmentsResponse::default();
        let mut t = list_partition_reassignments_response::OngoingTopicReassignment::default();
        t.name = "a".into();
        let mut p = list_partition_reassignments_response::OngoingPartitionReassignment::default();
        p.partition_index = 2;
        p.replicas = vec![1, 2, 3];
        p.adding_replicas = vec![3];
        p.removing_replicas = vec![1];
        t.partitions.push(p);
        resp.topics.push(t);
        let out = list_reassignments_result(resp).unwrap();
        assert_eq!((out[0].topic.as_str(), out[0].partition), ("a", 2));
        assert_eq!(out[0].adding_replicas, vec![3]);
        let mut resp = ListPartitionReassignmentsResponse::default();
        resp.error_code = ErrorCode::NOT_CONTROLLER;
        assert!(list_reassignments_result(resp).is_err());
    }
}
