//! Share-group offsets (KIP-932): DescribeShareGroupOffsets (key 90, v1 with the lag of
//! KIP-1226), AlterShareGroupOffsets (key 91) and DeleteShareGroupOffsets (key 92), each sent to
//! the group's coordinator. A share group's "offset" per partition is its start offset: the
//! first record not yet delivered and acknowledged.
//!
//! Alter and delete need the group empty (no members): otherwise `NON_EMPTY_GROUP` for the whole
//! request.

use std::collections::HashMap;

use kafkit_protocol::messages::{
    AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse, DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse, alter_share_group_offsets_request,
    delete_share_group_offsets_request, describe_share_group_offsets_request,
};

use super::Client;
use crate::error::{Error, Result};
use crate::ops::{ResourceResult, check_distinct, code_result, missing};

/// A share group's position on one partition (Java `SharePartitionOffsetInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShareGroupOffset {
    /// The start offset: the first record not yet delivered and acknowledged; `None` when the
    /// group has no state for the partition yet.
    pub start_offset: Option<i64>,
    /// The leader epoch of the start offset, when known.
    pub leader_epoch: Option<i32>,
    /// Records from the start offset to the end of the log (v1+, KIP-1226), when known.
    pub lag: Option<i64>,
}

/// `(topic, partition)`.
type Tp = (String, i32);

/// The DescribeShareGroupOffsets request for `group` (`None`: every partition it has state for).
pub(crate) fn describe_share_offsets_request(
    group: &str,
    partitions: Option<&[(&str, i32)]>,
) -> DescribeShareGroupOffsetsRequest {
    let topics = partitions.map(|ps| {
        let mut by_topic: Vec<(String, Vec<i32>)> = Vec::new();
        for (t, p) in ps {
            match by_topic.iter_mut().find(|(n, _)| n == t) {
                Some((_, v)) => v.push(*p),
                None => by_topic.push(((*t).to_owned(), vec![*p])),
            }
        }
        by_topic
            .into_iter()
            .map(|(t, ps)| {
                describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestTopic::default()
                    .with_topic_name(t)
                    .with_partitions(ps)
            })
            .collect()
    });
    DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(group.to_owned())
            .with_topics(topics),
    ])
}

/// The partitions of a DescribeShareGroupOffsets answer for `group`: every one listed (in the
/// caller's order when `asked`), or the group's error.
pub(crate) fn share_offsets_from(
    group: &str,
    asked: Option<&[(&str, i32)]>,
    resp: DescribeShareGroupOffsetsResponse,
) -> Result<Vec<(Tp, ResourceResult<ShareGroupOffset>)>> {
    let g = resp
        .groups
        .into_iter()
        .find(|g| g.group_id == group)
        .ok_or_else(|| missing("DescribeShareGroupOffsets", group))?;
    code_result("DescribeShareGroupOffsets", g.error_code, g.error_message)?;
    let known = |v: i64| Some(v).filter(|v| *v >= 0);
    let mut answered: Vec<(Tp, ResourceResult<ShareGroupOffset>)> = Vec::new();
    for t in g.topics {
        for p in t.partitions {
            let r =
                code_result("DescribeShareGroupOffsets", p.error_code, p.error_message).map(|()| {
                    ShareGroupOffset {
                        start_offset: known(p.start_offset),
                        leader_epoch: Some(p.leader_epoch).filter(|e| *e >= 0),
                        lag: known(p.lag),
                    }
                });
            answered.push(((t.topic_name.clone(), p.partition_index), r));
        }
    }
    let Some(asked) = asked else {
        return Ok(answered);
    };
    let mut by_key: HashMap<Tp, ResourceResult<ShareGroupOffset>> = answered.into_iter().collect();
    Ok(asked
        .iter()
        .map(|(t, p)| {
            let key = ((*t).to_owned(), *p);
            let r = by_key
                .remove(&key)
                .unwrap_or_else(|| Err(missing("DescribeShareGroupOffsets", &key)));
            (key, r)
        })
        .collect())
}

/// The AlterShareGroupOffsets request setting each partition's start offset.
pub(crate) fn alter_share_offsets_request(
    group: &str,
    offsets: &[((&str, i32), i64)],
) -> AlterShareGroupOffsetsRequest {
    let mut topics: Vec<alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic> =
        Vec::new();
    for ((t, p), offset) in offsets {
        let part =
            alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition::default()
                .with_partition_index(*p)
                .with_start_offset(*offset);
        match topics.iter_mut().find(|x| x.topic_name == *t) {
            Some(x) => x.partitions.push(part),
            None => topics.push(
                alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic::default()
                    .with_topic_name((*t).to_owned())
                    .with_partitions(vec![part]),
            ),
        }
    }
    AlterShareGroupOffsetsRequest::default()
        .with_group_id(group.to_owned())
        .with_topics(topics)
}

/// One result per partition of `offsets`, in order, from an AlterShareGroupOffsets answer.
pub(crate) fn alter_share_offsets_results(
    offsets: &[((&str, i32), i64)],
    resp: AlterShareGroupOffsetsResponse,
) -> Result<Vec<(Tp, ResourceResult<()>)>> {
    code_result(
        "AlterShareGroupOffsets",
        resp.error_code,
        resp.error_message,
    )?;
    let mut by_key: HashMap<Tp, ResourceResult<()>> = HashMap::new();
    for t in resp.responses {
        for p in t.partitions {
            by_key.insert(
                (t.topic_name.clone(), p.partition_index),
                code_result("AlterShareGroupOffsets", p.error_code, p.error_message),
            );
        }
    }
    Ok(offsets
        .iter()
        .map(|((t, p), _)| {
            let key = ((*t).to_owned(), *p);
            let r = by_key
                .remove(&key)
                .unwrap_or_else(|| Err(missing("AlterShareGroupOffsets", &key)));
            (key, r)
        })
        .collect())
}

/// One result per topic of `topics`, in order, from a DeleteShareGroupOffsets answer.
pub(crate) fn delete_share_offsets_results(
    topics: &[&str],
    resp: DeleteShareGroupOffsetsResponse,
) -> Result<Vec<(String, ResourceResult<()>)>> {
    code_result(
        "DeleteShareGroupOffsets",
        resp.error_code,
        resp.error_message,
    )?;
    let mut by_topic: HashMap<String, ResourceResult<()>> = resp
        .responses
        .into_iter()
        .map(|t| {
            let r = code_result("DeleteShareGroupOffsets", t.error_code, t.error_message);
            (t.topic_name, r)
        })
        .collect();
    Ok(topics
        .iter()
        .map(|t| {
            let r = by_topic
                .remove(*t)
                .unwrap_or_else(|| Err(missing("DeleteShareGroupOffsets", t)));
            ((*t).to_owned(), r)
        })
        .collect())
}

impl Client {
    /// A share group's start offsets (DescribeShareGroupOffsets, KIP-932; Java
    /// `Admin.listShareGroupOffsets`), for `partitions` (`None`: every partition the group has
    /// state for), at the group's coordinator.
    ///
    /// Returns one result per partition (in the given order; the broker's for `None`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a partition given twice;
    /// [`Error::Broker`] with the group's code (`GROUP_ID_NOT_FOUND`...);
    /// [`Error::UnsupportedVersion`] naming DescribeShareGroupOffsets; the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    #[allow(clippy::type_complexity)]
    pub async fn list_share_group_offsets(
        &self,
        group: &str,
        partitions: Option<&[(&str, i32)]>,
    ) -> Result<Vec<((String, i32), ResourceResult<ShareGroupOffset>)>> {
        if let Some(ps) = partitions {
            check_distinct("partition", ps)?;
        }
        let req = describe_share_offsets_request(group, partitions);
        let resp = self.transport().round_trip(req).await?;
        share_offsets_from(group, partitions, resp)
    }

    /// Sets an empty share group's start offset on partitions (AlterShareGroupOffsets,
    /// KIP-932; Java `Admin.alterShareGroupOffsets`).
    ///
    /// Returns one result per partition, in the given order.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list, a partition given twice or a negative
    /// offset (nothing sent); [`Error::Broker`] with the top-level code (`NON_EMPTY_GROUP`
    /// while the group has members, `GROUP_ID_NOT_FOUND`...);
    /// [`Error::UnsupportedVersion`] naming AlterShareGroupOffsets; the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a request already sent may still move the offsets (its answer is then
    /// lost); nothing is retried.
    #[allow(clippy::type_complexity)]
    pub async fn alter_share_group_offsets(
        &self,
        group: &str,
        offsets: &[((&str, i32), i64)],
    ) -> Result<Vec<((String, i32), ResourceResult<()>)>> {
        let keys: Vec<(&str, i32)> = offsets.iter().map(|(k, _)| *k).collect();
        check_distinct("partition", &keys)?;
        if let Some(((t, p), o)) = offsets.iter().find(|(_, o)| *o < 0) {
            return Err(Error::InvalidArgument(format!(
                "start offset {o} of {t}-{p} is negative"
            )));
        }
        let req = alter_share_offsets_request(group, offsets);
        let resp = self.transport().round_trip(req).await?;
        alter_share_offsets_results(offsets, resp)
    }

    /// Deletes an empty share group's state for whole topics (DeleteShareGroupOffsets,
    /// KIP-932; Java `Admin.deleteShareGroupOffsets`).
    ///
    /// Returns one result per topic, in the given order.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a topic given twice; [`Error::Broker`]
    /// with the top-level code (`NON_EMPTY_GROUP`, `GROUP_ID_NOT_FOUND`...);
    /// [`Error::UnsupportedVersion`] naming DeleteShareGroupOffsets; the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a request already sent may still delete the state.
    pub async fn delete_share_group_offsets(
        &self,
        group: &str,
        topics: &[&str],
    ) -> Result<Vec<(String, ResourceResult<()>)>> {
        check_distinct("topic", topics)?;
        let req = DeleteShareGroupOffsetsRequest::default()
            .with_group_id(group.to_owned())
            .with_topics(
                topics
                    .iter()
                    .map(|t| {
                        delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic::default()
                            .with_topic_name((*t).to_owned())
                    })
                    .collect(),
            );
        let resp = self.transport().round_trip(req).await?;
        delete_share_offsets_results(topics, resp)
    }
}

#[cfg(test)]
mod tests {
    use kafkit_protocol::ErrorCode;
    use kafkit_protocol::messages::{
        alter_share_group_offsets_response, delete_share_group_offsets_response,
        describe_share_group_offsets_response,
    };

    use super::*;

    #[test]
    fn describe_groups_partitions_by_topic_and_maps_in_order() {
        let req = describe_share_offsets_request("g", Some(&[("a", 1), ("b", 0), ("a", 0)]));
        let topics = req.groups[0].topics.as_ref().unwrap();
        assert_eq!(topics[0].partitions, vec![1, 0]);
        assert_eq!(topics[1].topic_name, "b");
        assert!(
            describe_share_offsets_request("g", None).groups[0]
                .topics
                .is_none()
        );

        let mut p = describe_share_group_offsets_response::DescribeShareGroupOffsetsResponsePartition::default();
        p.partition_index = 1;
        p.start_offset = 7;
        p.leader_epoch = -1;
        p.lag = 3;
        let mut unknown = describe_share_group_offsets_response::DescribeShareGroupOffsetsResponsePartition::default();
        unknown.partition_index = 0;
        unknown.start_offset = -1;
        unknown.lag = -1;
        let mut t =
            describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseTopic::default(
            );
        t.topic_name = "a".into();
        t.partitions = vec![unknown, p];
        let mut g =
            describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup::default(
            );
        g.group_id = "g".into();
        g.topics = vec![t];
        let mut resp = DescribeShareGroupOffsetsResponse::default();
        resp.groups = vec![g];
        let got = share_offsets_from("g", Some(&[("a", 1), ("a", 0), ("b", 0)]), resp).unwrap();
        let first = got[0].1.as_ref().unwrap();
        assert_eq!(
            (first.start_offset, first.leader_epoch, first.lag),
            (Some(7), None, Some(3))
        );
        assert_eq!(got[1].1.as_ref().unwrap().start_offset, None);
        assert!(matches!(got[2].1, Err(Error::Protocol(_))));

        let mut g =
            describe_share_group_offsets_response::DescribeShareGroupOffsetsResponseGroup::default(
            );
        g.group_id = "g".into();
        g.error_code = ErrorCode::GROUP_ID_NOT_FOUND;
        let mut resp = DescribeShareGroupOffsetsResponse::default();
        resp.groups = vec![g];
        let e = share_offsets_from("g", None, resp).unwrap_err();
        assert_eq!(e.error_code(), Some(ErrorCode::GROUP_ID_NOT_FOUND));
    }

    #[test]
    fn alter_and_delete_map_per_item_and_top_level() {
        let offsets = [(("a", 0), 5), (("a", 1), 6)];
        let req = alter_share_offsets_request("g", &offsets);
        assert_eq!(req.topics.len(), 1);
        assert_eq!(req.topics[0].partitions[1].start_offset, 6);
        let mut resp = AlterShareGroupOffsetsResponse::default();
        let mut t =
            alter_share_group_offsets_response::AlterShareGroupOffsetsResponseTopic::default();
        t.topic_name = "a".into();
        let mut p =
            alter_share_group_offsets_response::AlterShareGroupOffsetsResponsePartition::default();
        p.partition_index = 1;
        p.error_code = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
        t.partitions.push(p);
        resp.responses.push(t);
        let got = alter_share_offsets_results(&offsets, resp).unwrap();
        assert!(matches!(got[0].1, Err(Error::Protocol(_))));
        assert_eq!(
            got[1].1.as_ref().unwrap_err().error_code(),
            Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
        );
        let mut busy = AlterShareGroupOffsetsResponse::default();
        busy.error_code = ErrorCode::NON_EMPTY_GROUP;
        assert_eq!(
            alter_share_offsets_results(&offsets, busy)
                .unwrap_err()
                .error_code(),
            Some(ErrorCode::NON_EMPTY_GROUP)
        );

        let mut resp = DeleteShareGroupOffsetsResponse::default();
        let mut t =
            delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic::default();
        t.topic_name = "a".into();
        resp.responses.push(t);
        let got = delete_share_offsets_results(&["a", "b"], resp).unwrap();
        assert!(got[0].1.is_ok());
        assert!(got[1].1.is_err());
    }
}
