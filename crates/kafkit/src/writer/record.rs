//! What goes in ([`ProducerRecord`]); what comes back, [`RecordMetadata`](crate::RecordMetadata),
//! lives in `error/produce.rs` with the errors that carry it.

use bytes::Bytes;
use kafkit_protocol::records::RecordHeader;

/// A record to write (Java `ProducerRecord`, franz-go `kgo.Record`, kafka-go `Message`).
///
/// `topic: None` uses the writer's default `topic`; `partition: None` lets the writer's
/// balancer choose (murmur2 of the key for keyed records, uniform sticky for keyless ones, by
/// default); `timestamp: None` stamps the record with the wall clock when it is handed to the
/// writer (create time, ms since the Unix epoch). Keys, values and header values are
/// [`Bytes`] (anything `Into<Bytes>`: `&'static str`, `&'static [u8]`, `String`, `Vec<u8>`),
/// never copied on the way to the wire.
///
/// ```
/// use kafkit::ProducerRecord;
///
/// let r = ProducerRecord::new("orders", "v")
///     .key("k")
///     .partition(3)
///     .header("trace-id", "abc")
///     .timestamp(1_700_000_000_000);
/// assert_eq!(r.partition, Some(3));
/// assert_eq!(r.key.as_deref(), Some(&b"k"[..]));
/// assert_eq!(r.headers.len(), 1);
/// // A null value deletes the key from a compacted topic.
/// assert!(ProducerRecord::tombstone("orders", "k").value.is_none());
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
    /// A record of `value` for `topic`: no key, no headers, partition chosen by the balancer,
    /// timestamp "now" (Java `new ProducerRecord<>(topic, value)`).
    pub fn new(topic: impl Into<String>, value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            topic: Some(topic.into()),
            value: Some(value.into()),
            ..ProducerRecord::default()
        }
    }

    /// A record of `value` for the writer's default topic (`WriterBuilder::topic`).
    pub fn to_default_topic(value: impl Into<Bytes>) -> Self {
        ProducerRecord {
            value: Some(value.into()),
            ..ProducerRecord::default()
        }
    }

    /// A record with `key` and a null value for `topic`: on a compacted topic it deletes the
    /// key (Java `new ProducerRecord<>(topic, key, null)`).
    pub fn tombstone(topic: impl Into<String>, key: impl Into<Bytes>) -> Self {
        ProducerRecord {
            topic: Some(topic.into()),
            key: Some(key.into()),
            ..ProducerRecord::default()
        }
    }

    /// Sets the key (used by the default balancer to choose the partition: murmur2, as Java).
    pub fn key(mut self, key: impl Into<Bytes>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sends the record to partition `p` instead of letting the balancer choose.
    pub fn partition(mut self, p: i32) -> Self {
        self.partition = Some(p);
        self
    }

    /// Appends a header with key `key` and value `value` (KIP-82; keys may repeat). For a
    /// header with a null value, push a [`RecordHeader`] onto `headers`.
    pub fn header(mut self, key: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        self.headers
            .push(RecordHeader::new(key, Some(value.into())));
        self
    }

    /// Carries `parent` in the record's `traceparent` header (W3C Trace Context), in place of
    /// any already there, for the consumer's spans to link to the sender's.
    pub fn traceparent(mut self, parent: &crate::ops::otel::TraceParent) -> Self {
        parent.inject(&mut self.headers);
        self
    }

    /// Sets the create time (ms since the Unix epoch; a negative one is refused by `send` with
    /// `ProduceError::InvalidRecord`).
    pub fn timestamp(mut self, ms: i64) -> Self {
        self.timestamp = Some(ms);
        self
    }
}

/// A record whose topic, key, value and headers are borrowed from the caller
/// ([`Writer::send_ref`](super::Writer::send_ref) and its kin): the writer copies the key, value
/// and headers into its batch when it takes the record, as it copies a [`ProducerRecord`]'s (the
/// topic name is only looked up), so the caller keeps them and needs no [`Bytes`] for a key or
/// value (as librdkafka's `rd_kafka_producev` with `RD_KAFKA_MSG_F_COPY`; header values are
/// [`RecordHeader`]s, `Bytes` as in a `ProducerRecord`). The fields mean what
/// [`ProducerRecord`]'s do.
///
/// ```
/// use kafkit::{ProducerRecord, ProducerRecordRef};
///
/// let value = vec![7u8; 100];
/// let r = ProducerRecordRef::new("orders", &value).key(b"k").partition(3);
/// assert_eq!((r.topic, r.partition, r.value.map(<[u8]>::len)), (Some("orders"), Some(3), Some(100)));
/// // Any ProducerRecord can be lent as one.
/// let owned = ProducerRecord::new("orders", "v").key("k");
/// assert_eq!(ProducerRecordRef::from(&owned).key, Some(&b"k"[..]));
/// ```
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct ProducerRecordRef<'a> {
    /// The topic; `None` for the writer's default topic.
    pub topic: Option<&'a str>,
    /// The partition; `None` to let the balancer choose.
    pub partition: Option<i32>,
    /// The key (`None` = null key).
    pub key: Option<&'a [u8]>,
    /// The value (`None` = null value, a tombstone on compacted topics).
    pub value: Option<&'a [u8]>,
    /// Record headers (KIP-82), in order.
    pub headers: &'a [RecordHeader],
    /// Create time in ms since the Unix epoch; `None` for "now".
    pub timestamp: Option<i64>,
}

impl<'a> ProducerRecordRef<'a> {
    /// A record of `value` for `topic` ([`ProducerRecord::new`]).
    pub fn new(topic: &'a str, value: &'a [u8]) -> Self {
        ProducerRecordRef {
            topic: Some(topic),
            value: Some(value),
            ..ProducerRecordRef::default()
        }
    }

    /// A record of `value` for the writer's default topic ([`ProducerRecord::to_default_topic`]).
    pub fn to_default_topic(value: &'a [u8]) -> Self {
        ProducerRecordRef {
            value: Some(value),
            ..ProducerRecordRef::default()
        }
    }

    /// A record with `key` and a null value for `topic` ([`ProducerRecord::tombstone`]).
    pub fn tombstone(topic: &'a str, key: &'a [u8]) -> Self {
        ProducerRecordRef {
            topic: Some(topic),
            key: Some(key),
            ..ProducerRecordRef::default()
        }
    }

    /// Sets the key ([`ProducerRecord::key`]).
    pub fn key(mut self, key: &'a [u8]) -> Self {
        self.key = Some(key);
        self
    }

    /// Sends the record to partition `p` instead of letting the balancer choose.
    pub fn partition(mut self, p: i32) -> Self {
        self.partition = Some(p);
        self
    }

    /// Sets the headers (KIP-82), in order.
    pub fn headers(mut self, headers: &'a [RecordHeader]) -> Self {
        self.headers = headers;
        self
    }

    /// Sets the create time ([`ProducerRecord::timestamp`]).
    pub fn timestamp(mut self, ms: i64) -> Self {
        self.timestamp = Some(ms);
        self
    }
}

impl<'a> From<&'a ProducerRecord> for ProducerRecordRef<'a> {
    fn from(r: &'a ProducerRecord) -> Self {
        ProducerRecordRef {
            topic: r.topic.as_deref(),
            partition: r.partition,
            key: r.key.as_deref(),
            value: r.value.as_deref(),
            headers: &r.headers,
            timestamp: r.timestamp,
        }
    }
}
