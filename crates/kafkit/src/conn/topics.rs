//! Topic administration on one connection: CreateTopics (key 19) and DeleteTopics (key 20).
//!
//! Both must reach the controller (`Routing::Controller`); with KRaft brokers any broker forwards
//! them (KIP-590), so sending them on any connection works. They take and answer the same
//! shapes as the admin client's [`Client::create_topics`](crate::Client::create_topics) and
//! [`Client::delete_topics`](crate::Client::delete_topics), and build and read the requests
//! with the same functions.

use kafkit_protocol::messages::{CreateTopicsRequest, DeleteTopicsRequest};

use crate::conn::Conn;
use crate::error::Result;
use crate::ops::topics::{
    CreatedTopic, NewTopic, check_new_topics, create_topics_request, create_topics_results,
    delete_topics_request, delete_topics_results, merge_create_results,
};
use crate::ops::{ResourceResult, check_distinct};

impl Conn {
    /// Creates `topics` (CreateTopics API, KIP-4) through this connection's broker; with
    /// `validate_only` the controller only checks the request (KIP-108, v1+). The broker waits
    /// for the creation up to the connection's request timeout
    /// ([`Conn::request_timeout`]); the client waits that long again for the answer.
    ///
    /// Returns one `(topic name, result)` per topic in the given order: a failure of one topic
    /// (`TOPIC_ALREADY_EXISTS`, `INVALID_REPLICATION_FACTOR`...) does not fail the others.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty list or a name
    /// given twice, and those of [`Conn::request`].
    ///
    /// # Cancel safety
    /// Dropping the future abandons the wait, not the request: the broker may still create
    /// the topics.
    pub async fn create_topics(
        &self,
        topics: &[NewTopic],
        validate_only: bool,
    ) -> Result<Vec<(String, ResourceResult<CreatedTopic>)>> {
        let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
        check_distinct("topic", &names)?;
        let (send, refused) = check_new_topics(topics);
        if send.is_empty() {
            return Ok(merge_create_results(names, refused, Vec::new()));
        }
        let version = self.version_for::<CreateTopicsRequest>(None)?;
        let wait = self.request_timeout();
        let sent = send.iter().map(|t| t.name.clone()).collect();
        let req = create_topics_request(send, validate_only, crate::time::wire_ms(wait));
        let resp = self.request_at(&req, version, wait).await?;
        let answered = create_topics_results(sent, resp);
        Ok(merge_create_results(names, refused, answered))
    }

    /// Deletes the topics named in `names` (DeleteTopics API) through this connection's
    /// broker, which waits up to the connection's request timeout for the deletion.
    ///
    /// Returns one `(topic name, result)` per topic in the given order (e.g.
    /// `UNKNOWN_TOPIC_OR_PARTITION` for a missing one).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty list or a name
    /// given twice, and those of [`Conn::request`].
    ///
    /// # Cancel safety
    /// Dropping the future abandons the wait, not the request: the broker may still delete
    /// the topics.
    pub async fn delete_topics(&self, names: &[&str]) -> Result<Vec<(String, ResourceResult<()>)>> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        check_distinct("topic", &names)?;
        let version = self.version_for::<DeleteTopicsRequest>(None)?;
        let wait = self.request_timeout();
        let req = delete_topics_request(&names, version, crate::time::wire_ms(wait));
        let resp = self.request_at(&req, version, wait).await?;
        Ok(delete_topics_results(names, resp))
    }
}
