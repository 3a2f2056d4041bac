//! Cluster metadata: brokers, topics, partitions and their leaders (Metadata API, key 3).

use std::sync::Arc;

use kafkit_protocol::messages::metadata_response::{MetadataResponseBroker, MetadataResponseTopic};
use kafkit_protocol::messages::{MetadataRequest, MetadataResponse, metadata_request};
use kafkit_protocol::{ErrorCode, Uuid};

use crate::conn::Conn;
use crate::error::{Error, Result};

/// One broker of the cluster as listed in a Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Broker {
    /// The broker's node id (`broker.id` / `node.id`).
    pub node_id: i32,
    /// Advertised host name.
    pub host: String,
    /// Advertised port.
    pub port: i32,
    /// The rack (`broker.rack`), when set (Metadata v1+).
    pub rack: Option<String>,
}

impl Broker {
    /// `host:port`, ready for [`crate::Dialer::dial`]. IPv6 literals are bracketed.
    pub fn addr(&self) -> String {
        if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// One partition of a topic in a Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartitionMetadata {
    /// The partition index.
    pub partition: i32,
    /// The partition's error code (`NONE` when fine; e.g. `LEADER_NOT_AVAILABLE`).
    pub error_code: ErrorCode,
    /// Node id of the leader, -1 when there is none.
    pub leader_id: i32,
    /// The leader epoch (KIP-320), -1 when unknown.
    pub leader_epoch: i32,
    /// Node ids of all replicas.
    pub replicas: Vec<i32>,
    /// Node ids of the in-sync replicas.
    pub isr: Vec<i32>,
    /// Node ids of replicas that are offline.
    pub offline_replicas: Vec<i32>,
}

/// One topic in a Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicMetadata {
    /// The topic name.
    pub name: String,
    /// The topic id (KIP-516), all zeros when the broker does not send it.
    pub topic_id: Uuid,
    /// The topic's error code (e.g. `UNKNOWN_TOPIC_OR_PARTITION`).
    pub error_code: ErrorCode,
    /// Whether this is an internal topic such as `__consumer_offsets`.
    pub is_internal: bool,
    /// The partitions, sorted by index.
    pub partitions: Vec<PartitionMetadata>,
}

/// The answer to a Metadata request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metadata {
    /// Live brokers.
    pub brokers: Vec<Broker>,
    /// The cluster id (Metadata v2+), when known.
    pub cluster_id: Option<String>,
    /// Node id of the controller (Metadata v1+), -1 when unknown.
    pub controller_id: i32,
    /// The topics asked for (or every topic), in the broker's order. Each topic is shared
    /// (`Arc`) between successive snapshots of the transport's cache, so a leader hint copies
    /// only the topic it changes.
    pub topics: Vec<Arc<TopicMetadata>>,
}

impl Metadata {
    /// The broker with `node_id`.
    pub fn broker(&self, node_id: i32) -> Option<&Broker> {
        self.brokers.iter().find(|b| b.node_id == node_id)
    }

    /// The topic named `name`.
    pub fn topic(&self, name: &str) -> Option<&TopicMetadata> {
        self.topics.iter().find(|t| t.name == name).map(|t| &**t)
    }

    /// The leader of `topic`/`partition`.
    ///
    /// # Errors
    ///
    /// [`Error::Broker`] with the topic's or partition's error code, with
    /// `UNKNOWN_TOPIC_OR_PARTITION` when the topic or partition is missing, and
    /// `LEADER_NOT_AVAILABLE` when the leader is not among the listed brokers.
    pub fn leader_of(&self, topic: &str, partition: i32) -> Result<Broker> {
        let unknown = || Error::broker("Metadata", ErrorCode::UNKNOWN_TOPIC_OR_PARTITION, None);
        let t = self.topic(topic).ok_or_else(unknown)?;
        if !t.error_code.is_ok() {
            return Err(Error::broker("Metadata", t.error_code, None));
        }
        let p = t
            .partitions
            .iter()
            .find(|p| p.partition == partition)
            .ok_or_else(unknown)?;
        if !p.error_code.is_ok() {
            return Err(Error::broker("Metadata", p.error_code, None));
        }
        self.broker(p.leader_id)
            .cloned()
            .ok_or_else(|| Error::broker("Metadata", ErrorCode::LEADER_NOT_AVAILABLE, None))
    }
}

/// The one conversion of a Metadata answer, used by the connection, the transport, the group
/// member and the admin client. What it drops (the authorized operations of KIP-430) the admin
/// client reads from the answer before converting it.
impl From<MetadataResponse> for Metadata {
    fn from(resp: MetadataResponse) -> Self {
        Metadata {
            brokers: resp.brokers.into_iter().map(broker_from).collect(),
            cluster_id: resp.cluster_id,
            controller_id: resp.controller_id,
            topics: resp
                .topics
                .into_iter()
                .map(|t| Arc::new(topic_from(t)))
                .collect(),
        }
    }
}

/// One broker of a Metadata answer.
fn broker_from(b: MetadataResponseBroker) -> Broker {
    Broker {
        node_id: b.node_id,
        host: b.host,
        port: b.port,
        rack: b.rack,
    }
}

/// One topic of a Metadata answer, its partitions sorted by index.
pub(crate) fn topic_from(t: MetadataResponseTopic) -> TopicMetadata {
    let mut partitions: Vec<PartitionMetadata> = t
        .partitions
        .into_iter()
        .map(|p| PartitionMetadata {
            partition: p.partition_index,
            error_code: p.error_code,
            leader_id: p.leader_id,
            leader_epoch: p.leader_epoch,
            replicas: p.replica_nodes,
            isr: p.isr_nodes,
            offline_replicas: p.offline_replicas,
        })
        .collect();
    partitions.sort_by_key(|p| p.partition);
    TopicMetadata {
        name: t.name.unwrap_or_default(),
        topic_id: t.topic_id,
        error_code: t.error_code,
        is_internal: t.is_internal,
        partitions,
    }
}

/// The top-level error code of a Metadata answer (v13+, KIP-1102) from the broker at `addr`.
///
/// # Errors
///
/// [`Error::RebootstrapRequired`] for `REBOOTSTRAP_REQUIRED` (the client must bootstrap
/// again), [`Error::Broker`] for any other non-zero code.
pub(crate) fn top_level_error(addr: &str, resp: &MetadataResponse) -> Result<()> {
    match resp.error_code {
        ErrorCode::NONE => Ok(()),
        ErrorCode::REBOOTSTRAP_REQUIRED => Err(Error::RebootstrapRequired {
            operation: "Metadata",
            addr: addr.to_owned(),
            cluster_id: None,
            node_id: None,
        }),
        code => Err(Error::broker("Metadata", code, None)),
    }
}

impl Conn {
    /// Fetches cluster metadata (Metadata API): brokers, controller, and the topics named in
    /// `topics` (`None` = every topic). Topics are not created automatically
    /// (`allow_auto_topic_creation = false`, v4+).
    ///
    /// A topic that does not exist is listed with `UNKNOWN_TOPIC_OR_PARTITION` in its
    /// `error_code`; that is data, not an `Err`.
    ///
    /// # Errors
    ///
    /// Those of [`Conn::request`]; from v13 (KIP-1102) the answer's top-level error code:
    /// [`Error::RebootstrapRequired`] for `REBOOTSTRAP_REQUIRED`, [`Error::Broker`] for others.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future abandons the request (it only reads); the connection
    /// stays usable and a late answer is discarded.
    pub async fn metadata(&self, topics: Option<&[&str]>) -> Result<Metadata> {
        let version = self.version_for::<MetadataRequest>(None)?;
        let topics = match topics {
            // v0 has no null array: an empty list means every topic there.
            None if version == 0 => Some(Vec::new()),
            None => None,
            Some(names) => Some(
                names
                    .iter()
                    .map(|n| {
                        metadata_request::MetadataRequestTopic::default()
                            .with_name(Some((*n).to_owned()))
                    })
                    .collect(),
            ),
        };
        let req = MetadataRequest::default()
            .with_topics(topics)
            // Only v4+ carries the flag; below that the field must keep its default.
            .with_allow_auto_topic_creation(version < 4);
        let resp = self
            .request_at(&req, version, std::time::Duration::ZERO)
            .await?;
        top_level_error(self.addr(), &resp)?;
        Ok(Metadata::from(resp))
    }
}
