//! Topic operations: create, delete, list and describe topics, create partitions.
//!
//! CreateTopics (key 19), DeleteTopics (key 20, by id from v6, KIP-516), CreatePartitions
//! (key 37, KIP-195) go to the controller; Metadata (key 3) answers list and describe.

use kafkit_protocol::Uuid;
use kafkit_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, DeleteTopicsRequest, MetadataRequest,
    MetadataResponse, create_partitions_request, delete_topics_request, metadata_request,
};

use super::Client;
use super::acls::{AclOperation, operations_from_bits};
use crate::conn::metadata::{PartitionMetadata, topic_from};
use crate::error::{Error, Result};
use crate::ops::topics::{
    CreatedTopic, NewTopic, check_new_topics, create_topics_request, create_topics_results,
    delete_topics_request, delete_topics_results, merge_create_results,
};
use crate::ops::{ResourceResult, check_distinct, code_result, in_order};

/// A topic as listed by [`Client::list_topics`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicListing {
    /// The topic name.
    pub name: String,
    /// The topic id (KIP-516; Metadata v10+), all zeros when the broker does not send it.
    pub topic_id: Uuid,
    /// Whether the topic is internal (e.g. `__consumer_offsets`).
    pub is_internal: bool,
}

/// A topic as described by [`Client::describe_topics`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicDescription {
    /// The topic name.
    pub name: String,
    /// The topic id (KIP-516; Metadata v10+), all zeros when the broker does not send it.
    pub topic_id: Uuid,
    /// Whether the topic is internal (e.g. `__consumer_offsets`).
    pub is_internal: bool,
    /// The partitions, sorted by index: leader, leader epoch, replicas, in-sync replicas and
    /// offline replicas (node ids), and each partition's own error code.
    pub partitions: Vec<PartitionMetadata>,
    /// The operations the caller may perform on the topic (KIP-430), when asked for and sent
    /// (Metadata v8+); `None` otherwise.
    pub authorized_operations: Option<Vec<AclOperation>>,
}

/// The new partition count of a topic for [`Client::create_partitions`] (KIP-195). Partitions
/// can only be added: `total_count` is the count after the change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NewPartitions {
    /// The total number of partitions after the increase.
    pub total_count: i32,
    /// Replica broker ids for each new partition (outer: one entry per partition added, in
    /// order; inner: broker ids, the first the preferred leader), or `None` to let the
    /// controller place them.
    pub assignments: Option<Vec<Vec<i32>>>,
}

impl NewPartitions {
    /// Increase to `total_count` partitions, placed by the controller.
    pub fn increase_to(total_count: i32) -> NewPartitions {
        NewPartitions {
            total_count,
            assignments: None,
        }
    }

    /// Increase to `total_count` partitions with the given replica placement for the new
    /// partitions (one broker-id list per added partition).
    pub fn increase_to_with_assignments(
        total_count: i32,
        assignments: Vec<Vec<i32>>,
    ) -> NewPartitions {
        NewPartitions {
            total_count,
            assignments: Some(assignments),
        }
    }
}

impl Client {
    /// Creates `topics` (CreateTopics API, KIP-4); with `validate_only` the controller only
    /// checks the request (KIP-108, v1+) and reports what it would create.
    ///
    /// Returns one `(topic name, result)` per topic in the given order; a failed topic (e.g.
    /// `TOPIC_ALREADY_EXISTS`, `INVALID_REPLICATION_FACTOR`, `POLICY_VIOLATION`) does not fail
    /// the others. The broker waits up to [`Client::timeout`] for the creation. As Java's admin
    /// client, each topic is checked before sending: an illegal name (1 to 249 characters of
    /// `[a-zA-Z0-9._-]`, not `.` or `..`), partitions below 1 (other than -1, the broker's
    /// default) or a replication factor below 1 (other than -1) make that topic's result an
    /// [`Error::NotSent`] (`INVALID_TOPIC_EXCEPTION`, `INVALID_PARTITIONS`,
    /// `INVALID_REPLICATION_FACTOR`); the others are sent.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a name given twice,
    /// [`Error::UnsupportedVersion`] when the broker has no CreateTopics, [`Error::Encode`]
    /// naming `validate_only` when the broker only speaks v0, and the transport's errors when
    /// no broker answered.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn create_topics(
        &self,
        topics: &[NewTopic],
        validate_only: bool,
    ) -> Result<Vec<(String, ResourceResult<CreatedTopic>)>> {
        let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
        check_distinct("topic", &names)?;
        let (send, refused) = check_new_topics(topics);
        let answered = if send.is_empty() {
            Vec::new()
        } else {
            let sent = send.iter().map(|t| t.name.clone()).collect();
            let req = create_topics_request(send, validate_only, self.timeout_ms());
            create_topics_results(sent, self.transport().round_trip(req).await?)
        };
        Ok(merge_create_results(names, refused, answered))
    }

    /// Deletes the topics named in `names` (DeleteTopics API).
    ///
    /// Returns one `(topic name, result)` per topic in the given order (e.g.
    /// `UNKNOWN_TOPIC_OR_PARTITION` for a missing one). The broker waits up to
    /// [`Client::timeout`] for the deletion.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a name given twice,
    /// [`Error::UnsupportedVersion`], and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn delete_topics(&self, names: &[&str]) -> Result<Vec<(String, ResourceResult<()>)>> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        check_distinct("topic", &names)?;
        let version = self.version::<DeleteTopicsRequest>().await?;
        let req = delete_topics_request(&names, version, self.timeout_ms());
        let resp = self.transport().round_trip(req).await?;
        Ok(delete_topics_results(names, resp))
    }

    /// Deletes the topics with the given ids (DeleteTopics v6+, KIP-516).
    ///
    /// Returns one `(topic id, result)` per id in the given order (e.g. `UNKNOWN_TOPIC_ID`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or an id given twice,
    /// [`Error::UnsupportedVersion`] when the broker has no DeleteTopics v6, and the
    /// transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn delete_topics_by_id(
        &self,
        ids: &[Uuid],
    ) -> Result<Vec<(Uuid, ResourceResult<()>)>> {
        check_distinct("topic id", ids)?;
        let version = self.version::<DeleteTopicsRequest>().await?;
        if version < 6 {
            return Err(Error::UnsupportedVersion {
                api: kafkit_protocol::ApiKey::DeleteTopics,
                ours: kafkit_protocol::VersionRange::new(
                    6,
                    crate::ops::versions::client_max_for::<DeleteTopicsRequest>(),
                ),
                broker: Some(kafkit_protocol::VersionRange::new(0, version)),
            });
        }
        let req = DeleteTopicsRequest::default()
            .with_timeout_ms(self.timeout_ms())
            .with_topics(
                ids.iter()
                    .map(|id| delete_topics_request::DeleteTopicState::default().with_topic_id(*id))
                    .collect(),
            );
        let resp = self.transport().round_trip(req).await?;
        let answers = resp.responses.into_iter().map(|t| {
            (
                t.topic_id,
                code_result("DeleteTopics", t.error_code, t.error_message),
            )
        });
        Ok(in_order("DeleteTopics", ids.to_vec(), answers))
    }

    /// Lists the topics of the cluster (Metadata API for every topic), sorted by name;
    /// internal topics (`__consumer_offsets`, `__transaction_state`...) only when
    /// `list_internal`.
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedVersion`] and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn list_topics(&self, list_internal: bool) -> Result<Vec<TopicListing>> {
        let resp = self.fetch_metadata(None, false).await?;
        let mut out: Vec<TopicListing> = resp
            .topics
            .into_iter()
            .filter(|t| t.error_code.is_ok() && (list_internal || !t.is_internal))
            .map(|t| TopicListing {
                name: t.name.unwrap_or_default(),
                topic_id: t.topic_id,
                is_internal: t.is_internal,
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Describes the topics named in `names` (Metadata API, fresh from a broker, not the
    /// transport's cache): partitions with leaders, replicas and in-sync replicas, topic id,
    /// and with `include_authorized_operations` the caller's allowed operations (KIP-430,
    /// Metadata v8+).
    ///
    /// Returns one `(topic name, result)` per name in the given order; a missing topic is
    /// `Err` with `UNKNOWN_TOPIC_OR_PARTITION`. Topics are never auto-created by this call.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a name given twice,
    /// [`Error::UnsupportedVersion`], and the transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_topics(
        &self,
        names: &[&str],
        include_authorized_operations: bool,
    ) -> Result<Vec<(String, ResourceResult<TopicDescription>)>> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        check_distinct("topic", &names)?;
        let resp = self
            .fetch_metadata(Some(&names), include_authorized_operations)
            .await?;
        Ok(describe_topics_results(names, resp))
    }

    /// Increases the partition count of topics (CreatePartitions API, KIP-195); with
    /// `validate_only` the controller only checks the request.
    ///
    /// Returns one `(topic name, result)` per topic in the given order (e.g.
    /// `INVALID_PARTITIONS` when the count does not grow). The broker waits up to
    /// [`Client::timeout`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or a topic given twice,
    /// [`Error::UnsupportedVersion`] naming CreatePartitions when the broker lacks it, and the
    /// transport's errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a change ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn create_partitions(
        &self,
        new_partitions: &[(&str, NewPartitions)],
        validate_only: bool,
    ) -> Result<Vec<(String, ResourceResult<()>)>> {
        let names: Vec<String> = new_partitions
            .iter()
            .map(|(n, _)| (*n).to_owned())
            .collect();
        check_distinct("topic", &names)?;
        let req = create_partitions_request_for(new_partitions, validate_only, self.timeout_ms());
        let resp = self.transport().round_trip(req).await?;
        Ok(create_partitions_results(names, resp))
    }

    /// Sends a Metadata request for `topics` (`None`: every topic) through the transport,
    /// without creating topics.
    pub(crate) async fn fetch_metadata(
        &self,
        topics: Option<&[String]>,
        include_topic_authorized_operations: bool,
    ) -> Result<MetadataResponse> {
        let version = self.version::<MetadataRequest>().await?;
        let req = metadata_request_for(topics, include_topic_authorized_operations, version);
        self.transport().round_trip(req).await
    }
}

/// The Metadata request for `topics` (`None`: every topic) at `version`, never creating
/// topics.
pub(crate) fn metadata_request_for(
    topics: Option<&[String]>,
    include_topic_authorized_operations: bool,
    version: i16,
) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(match topics {
            // v0 has no null array: an empty list means every topic there.
            None if version == 0 => Some(Vec::new()),
            None => None,
            Some(names) => Some(
                names
                    .iter()
                    .map(|n| {
                        metadata_request::MetadataRequestTopic::default().with_name(Some(n.clone()))
                    })
                    .collect(),
            ),
        })
        // Only v4+ carries the flag; below that the field must keep its default.
        .with_allow_auto_topic_creation(version < 4)
        .with_include_topic_authorized_operations(
            include_topic_authorized_operations && version >= 8,
        )
}

/// Maps a Metadata response to per-topic descriptions in the order of `names`.
pub(crate) fn describe_topics_results(
    names: Vec<String>,
    resp: MetadataResponse,
) -> Vec<(String, ResourceResult<TopicDescription>)> {
    let answers = resp.topics.into_iter().map(|t| {
        let authorized_operations = operations_from_bits(t.topic_authorized_operations);
        let t = topic_from(t);
        let result = code_result("Metadata", t.error_code, None).map(|()| TopicDescription {
            name: t.name.clone(),
            topic_id: t.topic_id,
            is_internal: t.is_internal,
            partitions: t.partitions,
            authorized_operations,
        });
        (t.name, result)
    });
    in_order("Metadata", names, answers)
}

/// The CreatePartitions request for `new_partitions`.
pub(crate) fn create_partitions_request_for(
    new_partitions: &[(&str, NewPartitions)],
    validate_only: bool,
    timeout_ms: i32,
) -> CreatePartitionsRequest {
    CreatePartitionsRequest::default()
        .with_timeout_ms(timeout_ms)
        .with_validate_only(validate_only)
        .with_topics(
            new_partitions
                .iter()
                .map(|(name, np)| {
                    create_partitions_request::CreatePartitionsTopic::default()
                        .with_name((*name).to_owned())
                        .with_count(np.total_count)
                        .with_assignments(np.assignments.as_ref().map(|a| {
                            a.iter()
                                .map(|brokers| {
                                    let mut x =
                                    create_partitions_request::CreatePartitionsAssignment::default(
                                    );
                                    x.broker_ids = brokers.clone();
                                    x
                                })
                                .collect()
                        }))
                })
                .collect(),
        )
}

/// Maps a CreatePartitions response to per-topic results in the order of `names`.
pub(crate) fn create_partitions_results(
    names: Vec<String>,
    resp: CreatePartitionsResponse,
) -> Vec<(String, ResourceResult<()>)> {
    let answers = resp.results.into_iter().map(|t| {
        (
            t.name,
            code_result("CreatePartitions", t.error_code, t.error_message),
        )
    });
    in_order("CreatePartitions", names, answers)
}

#[cfg(test)]
mod tests {
    use kafkit_protocol::ErrorCode;
    use kafkit_protocol::messages::metadata_response;

    use super::*;

    #[test]
    fn describe_topics_maps_partitions_sorted_and_missing_topics() {
        let mut resp = MetadataResponse::default();
        let mut t = metadata_response::MetadataResponseTopic::default();
        t.name = Some("t".into());
        t.topic_authorized_operations = (1 << 3) | (1 << 8);
        for i in [1, 0] {
            let mut p = metadata_response::MetadataResponsePartition::default();
            p.partition_index = i;
            p.leader_id = 10 + i;
            p.replica_nodes = vec![10 + i, 20];
            p.isr_nodes = vec![10 + i];
            t.partitions.push(p);
        }
        let mut missing = metadata_response::MetadataResponseTopic::default();
        missing.name = Some("gone".into());
        missing.error_code = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
        resp.topics = vec![t, missing];
        let out = describe_topics_results(vec!["gone".into(), "t".into()], resp);
        assert_eq!(
            out[0].1.as_ref().unwrap_err().error_code(),
            Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
        );
        let d = out[1].1.as_ref().expect("described");
        assert_eq!(d.partitions[0].partition, 0);
        assert_eq!(d.partitions[1].leader_id, 11);
        assert_eq!(d.partitions[1].replicas, vec![11, 20]);
        assert_eq!(
            d.authorized_operations,
            Some(vec![AclOperation::Read, AclOperation::Describe])
        );
    }

    #[test]
    fn create_partitions_request_and_results() {
        let req = create_partitions_request_for(
            &[
                ("a", NewPartitions::increase_to(4)),
                (
                    "b",
                    NewPartitions::increase_to_with_assignments(2, vec![vec![1, 2]]),
                ),
            ],
            false,
            1_000,
        );
        assert_eq!(req.topics[0].count, 4);
        assert!(req.topics[0].assignments.is_none());
        let assignments = req.topics[1].assignments.as_ref().expect("assignments");
        assert_eq!(assignments[0].broker_ids, vec![1, 2]);

        let mut resp = CreatePartitionsResponse::default();
        for (name, code) in [("b", ErrorCode::INVALID_PARTITIONS), ("a", ErrorCode::NONE)] {
            let mut r = kafkit_protocol::messages::create_partitions_response::CreatePartitionsTopicResult::default();
            r.name = name.into();
            r.error_code = code;
            resp.results.push(r);
        }
        let out = create_partitions_results(vec!["a".into(), "b".into()], resp);
        assert!(out[0].1.is_ok());
        assert_eq!(
            out[1].1.as_ref().unwrap_err().error_code(),
            Some(ErrorCode::INVALID_PARTITIONS)
        );
    }
}
