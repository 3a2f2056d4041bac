//! What goes in ([`ProducerRecord`]) and what comes back ([`RecordMetadata`]).

use bytes::Bytes;
use kafkit_protocol::records::RecordHeader;

/// A record to write (Java `ProducerRecord`, kafka-go `Message`).
///
/// `topic: None` uses the writer's default `topic`; `partition: None` lets the writer's
/// balancer choose (murmur2 of the key for keyed records, uniform sticky for keyless ones, by
/// default); `timestamp: None` stamps the record with the wall clock when it is handed to the
/// writer (create time, ms since the Unix epoch).
///
/// ```
/// use bytes::Bytes;
/// use kafkit::ProducerRecord;
///
/// let r = ProducerRecord::new("orders", Some(Bytes::from_static(b"k")), Some(Bytes::from_static(b"v")))
///     .to_partition(3)
///     .header("trace-id", Some(Bytes::from_static(b"abc")))
///     .timestamp(1_700_000_000_000);
/// assert_eq!(r.partition, Some(3));
/// assert_eq!(r.headers.len(), 1);
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ProducerRecord {
    /// The topic; `None` for the writer's default topic.
    pub topic: Option<String>,
    /// The partition; `None` to let the balancer choose.
    pub partition: Option<i32>,
    /// The key (`None` = null key).
    pub key: Option<Bytes>,
    /// The value (`None` = null value, a tombstone on compacted topics).
    pub value: Option<Bytes>,
    /// Record headers (KIP-82), in order.
    pub headers: Vec<RecordHeader>,
    /// Create time in ms since the Unix epoch; `None` for "now".
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    /// A record for `topic` with `key` and `value`, no headers, partition chosen by the
    /// balancer, timestamp "now".
    pub fn new(topic: impl Into<String>, key: Option<Bytes>, value: Option<Bytes>) -> Self {
        ProducerRecord {
            topic: Some(topic.into()),
            key,
            value,
            ..ProducerRecord::default()
        }
    }

    /// A record for the writer's default topic.
    pub fn to_default_topic(key: Option<Bytes>, value: Option<Bytes>) -> Self {
        ProducerRecord {
            key,
            value,
            ..ProducerRecord::default()
        }
    }

    /// Sends the record to partition `p` instead of letting the balancer choose.
    pub fn to_partition(mut self, p: i32) -> Self {
        self.partition = Some(p);
        self
    }

    /// Appends a header with key `k` and value `v` (`None` = null value).
    pub fn header(mut self, k: impl Into<Bytes>, v: Option<Bytes>) -> Self {
        self.headers.push(RecordHeader::new(k, v));
        self
    }

    /// Sets the create time (ms since the Unix epoch; a negative one is refused by `send` with
    /// `ProduceError::InvalidRecord`).
    pub fn timestamp(mut self, ms: i64) -> Self {
        self.timestamp = Some(ms);
        self
    }
}

/// Where an acknowledged record landed (Java `RecordMetadata`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordMetadata {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The record's offset; -1 with `acks=0` (no answer comes back) or when the broker reported
    /// the batch as a duplicate (`DUPLICATE_SEQUENCE_NUMBER`) without an offset.
    pub offset: i64,
    /// The record's timestamp: its create time, or the broker's append time when the topic uses
    /// `LogAppendTime` (ms since the Unix epoch).
    pub timestamp: i64,
}
