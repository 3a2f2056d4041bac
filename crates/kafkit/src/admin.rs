//! Topic administration on one connection: CreateTopics (key 19) and DeleteTopics (key 20).
//!
//! Both must reach the controller (`Routing::Controller`); with KRaft brokers any broker forwards
//! them (KIP-590), so sending them on any connection works.

use std::time::Duration;

use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::{
    CreateTopicsRequest, DeleteTopicsRequest, create_topics_request, delete_topics_request,
};

use crate::conn::Conn;
use crate::error::{Error, Result};

/// A topic to create with [`Conn::create_topics`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NewTopic {
    /// The topic name.
    pub name: String,
    /// Number of partitions; -1 = the broker's `num.partitions` (CreateTopics v4+).
    pub num_partitions: i32,
    /// Replication factor; -1 = the broker's `default.replication.factor` (v4+).
    pub replication_factor: i16,
    /// Topic configs (`cleanup.policy`, `retention.ms`, ...), name and value.
    pub configs: Vec<(String, String)>,
}

impl NewTopic {
    /// A topic named `name` with `num_partitions` partitions of `replication_factor` replicas.
    pub fn new(name: impl Into<String>, num_partitions: i32, replication_factor: i16) -> Self {
        NewTopic {
            name: name.into(),
            num_partitions,
            replication_factor,
            configs: Vec::new(),
        }
    }

    /// Adds the topic config `name` = `value`.
    pub fn config(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.configs.push((name.into(), value.into()));
        self
    }
}

/// The outcome for one topic of a CreateTopics or DeleteTopics request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicResult {
    /// The topic name.
    pub name: String,
    /// `NONE` on success, else why it failed (e.g. `TOPIC_ALREADY_EXISTS`,
    /// `UNKNOWN_TOPIC_OR_PARTITION`, `INVALID_REPLICATION_FACTOR`).
    pub error_code: ErrorCode,
    /// The broker's message, when it sent one.
    pub error_message: Option<String>,
}

impl TopicResult {
    /// `Ok(())` on success, [`Error::Broker`] with this topic's code otherwise.
    pub fn into_result(self, operation: &'static str) -> Result<()> {
        if self.error_code.is_ok() {
            Ok(())
        } else {
            Err(Error::broker(
                operation,
                self.error_code,
                self.error_message,
            ))
        }
    }
}

impl Conn {
    /// Creates `topics` (CreateTopics API), waiting up to `timeout_ms` on the broker side for
    /// the creation to complete.
    ///
    /// Returns one [`TopicResult`] per topic: a failure of one topic (already exists, bad
    /// replication factor...) does not fail the call.
    ///
    /// Errors: [`Error::InvalidArgument`] for an empty list, and those of [`Conn::request`].
    pub async fn create_topics(
        &self,
        topics: &[NewTopic],
        timeout_ms: i32,
    ) -> Result<Vec<TopicResult>> {
        if topics.is_empty() {
            return Err(Error::InvalidArgument("no topics to create".into()));
        }
        let version = self.version_for::<CreateTopicsRequest>(None)?;
        let mut req = CreateTopicsRequest::default();
        req.timeout_ms = timeout_ms;
        req.topics = topics
            .iter()
            .map(|t| {
                let mut c = create_topics_request::CreatableTopic::default();
                c.name = t.name.clone();
                c.num_partitions = t.num_partitions;
                c.replication_factor = t.replication_factor;
                c.configs = t
                    .configs
                    .iter()
                    .map(|(k, v)| {
                        let mut cfg = create_topics_request::CreatableTopicConfig::default();
                        cfg.name = k.clone();
                        cfg.value = Some(v.clone());
                        cfg
                    })
                    .collect();
                c
            })
            .collect();
        let resp = self
            .request_at(&req, version, broker_wait(timeout_ms))
            .await?;
        Ok(resp
            .topics
            .into_iter()
            .map(|t| TopicResult {
                name: t.name,
                error_code: t.error_code,
                error_message: t.error_message,
            })
            .collect())
    }

    /// Deletes the topics named in `names` (DeleteTopics API), waiting up to `timeout_ms` on the
    /// broker side.
    ///
    /// Returns one [`TopicResult`] per topic (e.g. `UNKNOWN_TOPIC_OR_PARTITION` for a missing
    /// one); errors: [`Error::InvalidArgument`] for an empty list, and those of
    /// [`Conn::request`].
    pub async fn delete_topics(&self, names: &[&str], timeout_ms: i32) -> Result<Vec<TopicResult>> {
        if names.is_empty() {
            return Err(Error::InvalidArgument("no topics to delete".into()));
        }
        let version = self.version_for::<DeleteTopicsRequest>(None)?;
        let mut req = DeleteTopicsRequest::default();
        req.timeout_ms = timeout_ms;
        // v6 (KIP-516) names topics in `topics` (name or id); earlier versions in `topic_names`.
        if version >= 6 {
            req.topics = names
                .iter()
                .map(|n| {
                    let mut s = delete_topics_request::DeleteTopicState::default();
                    s.name = Some((*n).to_owned());
                    s
                })
                .collect();
        } else {
            req.topic_names = names.iter().map(|n| (*n).to_owned()).collect();
        }
        let resp = self
            .request_at(&req, version, broker_wait(timeout_ms))
            .await?;
        Ok(resp
            .responses
            .into_iter()
            .map(|t| TopicResult {
                name: t.name.unwrap_or_default(),
                error_code: t.error_code,
                error_message: t.error_message,
            })
            .collect())
    }
}

/// The broker-side wait to add to the client-side request timeout.
pub(crate) fn broker_wait(timeout_ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0))
}
