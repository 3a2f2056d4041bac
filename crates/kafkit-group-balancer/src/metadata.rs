//! The consumer protocol metadata carried inside JoinGroup and SyncGroup: a member's
//! [`Subscription`] (JoinGroup `Metadata`) and its [`Assignment`] (SyncGroup `Assignment`).
//!
//! Both are a big-endian `i16` version followed by the `ConsumerProtocolSubscription` /
//! `ConsumerProtocolAssignment` message at that version (protocol guide, "Consumer groups";
//! KIP-429 added owned partitions in v1, KIP-792 the generation in v2, KIP-881 the rack in v3).
//! As in the Java client, a version newer than this library knows is read as the newest known
//! version: newer versions only append fields, which are then left unread.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafkit_protocol::messages::consumer_protocol_assignment as wire_assignment;
use kafkit_protocol::messages::consumer_protocol_subscription as wire_subscription;
use kafkit_protocol::messages::{ConsumerProtocolAssignment, ConsumerProtocolSubscription};
use kafkit_protocol::{DecodeError, EncodeError, Message};

/// The newest `ConsumerProtocolSubscription` version this crate writes and reads (3, KIP-881).
pub const SUBSCRIPTION_VERSION: i16 = 3;
/// The newest `ConsumerProtocolAssignment` version this crate writes and reads (3); the Java
/// client writes assignments at its newest version.
pub const ASSIGNMENT_VERSION: i16 = 3;
/// The generation id that means "unknown" (`GenerationId` default in the schema).
pub const DEFAULT_GENERATION: i32 = -1;

/// Errors while encoding or decoding consumer protocol metadata.
///
/// None of them can be helped by a retry: the same bytes fail the same way.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum MetadataError {
    /// The metadata is shorter than its 2-byte version prefix.
    #[error("consumer protocol metadata is {0} bytes, shorter than its 2-byte version prefix")]
    MissingVersion(usize),
    /// The version prefix is negative; Java rejects it the same way (`SchemaException`).
    #[error("unsupported consumer protocol metadata version {0}")]
    UnsupportedVersion(i16),
    /// The message after the version prefix is truncated or malformed.
    #[error("malformed consumer protocol metadata: {0}")]
    Decode(#[from] DecodeError),
    /// A value cannot be written at the requested version.
    #[error("cannot encode consumer protocol metadata: {0}")]
    Encode(#[from] EncodeError),
}

impl MetadataError {
    /// Always `false`: decoding or encoding the same input again fails the same way.
    pub const fn is_retriable(&self) -> bool {
        false
    }
}

/// The partitions of one topic, as the consumer protocol lists them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub struct TopicPartitions {
    /// Topic name.
    pub topic: String,
    /// Partition ids of `topic`.
    pub partitions: Vec<i32>,
}

impl TopicPartitions {
    /// The given partitions of `topic`.
    pub fn new(topic: impl Into<String>, partitions: impl Into<Vec<i32>>) -> Self {
        Self {
            topic: topic.into(),
            partitions: partitions.into(),
        }
    }
}

/// Number of partitions in a topic-grouped list.
pub(crate) fn count_partitions(list: &[TopicPartitions]) -> usize {
    list.iter().map(|t| t.partitions.len()).sum()
}

/// What a member sends when it joins: the topics it subscribes to and the state the assignors
/// need (consumer protocol `ConsumerProtocolSubscription`, versions 0-3).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Subscription {
    /// Topics the member subscribes to (v0+).
    pub topics: Vec<String>,
    /// Assignor-specific bytes, from [`GroupBalancer::user_data`](crate::GroupBalancer::user_data) (v0+).
    pub user_data: Option<Bytes>,
    /// Partitions the member owns as it joins (v1+, KIP-429); empty for eager members.
    pub owned_partitions: Vec<TopicPartitions>,
    /// The generation in which the member got `owned_partitions` (v2+); [`DEFAULT_GENERATION`]
    /// (-1) when unknown.
    pub generation_id: i32,
    /// The member's rack (`client.rack`, v3+, KIP-881); `None` when not set.
    pub rack_id: Option<String>,
}

impl Default for Subscription {
    fn default() -> Self {
        Self {
            topics: Vec::new(),
            user_data: None,
            owned_partitions: Vec::new(),
            generation_id: DEFAULT_GENERATION,
            rack_id: None,
        }
    }
}

impl Subscription {
    /// A subscription to `topics` with no user data, owned partitions, generation or rack.
    pub fn new<I, S>(topics: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            topics: topics.into_iter().map(Into::into).collect(),
            ..Self::default()
        }
    }

    /// Sets the assignor user data.
    pub fn with_user_data(mut self, user_data: impl Into<Option<Bytes>>) -> Self {
        self.user_data = user_data.into();
        self
    }

    /// Sets the partitions the member owns as it joins (KIP-429).
    pub fn with_owned_partitions(mut self, owned: Vec<TopicPartitions>) -> Self {
        self.owned_partitions = owned;
        self
    }

    /// Sets the generation of the owned partitions.
    pub fn with_generation_id(mut self, generation_id: i32) -> Self {
        self.generation_id = generation_id;
        self
    }

    /// Sets the member's rack (KIP-881).
    pub fn with_rack_id(mut self, rack_id: impl Into<String>) -> Self {
        self.rack_id = Some(rack_id.into());
        self
    }

    /// Encodes `[version: i16][ConsumerProtocolSubscription at version]`, the JoinGroup
    /// protocol metadata. Fields the version lacks are dropped (owned partitions below v1,
    /// generation below v2, rack below v3), as the Java client does.
    ///
    /// Errors: [`MetadataError::Encode`] for a version outside 0-3.
    pub fn encode(&self, version: i16) -> Result<Bytes, MetadataError> {
        let msg = ConsumerProtocolSubscription::default()
            .with_topics(self.topics.clone())
            .with_user_data(self.user_data.clone())
            .with_owned_partitions(
                self.owned_partitions
                    .iter()
                    .map(|t| {
                        wire_subscription::TopicPartition::default()
                            .with_topic(t.topic.clone())
                            .with_partitions(t.partitions.clone())
                    })
                    .collect(),
            )
            .with_generation_id(self.generation_id)
            .with_rack_id(self.rack_id.clone());
        let mut buf = BytesMut::with_capacity(2 + msg.compute_size(version)?);
        buf.put_i16(version);
        msg.encode(&mut buf, version)?;
        Ok(buf.freeze())
    }

    /// Decodes JoinGroup protocol metadata written by any client. A version above
    /// [`SUBSCRIPTION_VERSION`] is read as that version. A negative generation becomes
    /// [`DEFAULT_GENERATION`] and an empty rack `None`, as in the Java client.
    ///
    /// Errors: [`MetadataError::MissingVersion`], [`MetadataError::UnsupportedVersion`] (negative
    /// version), [`MetadataError::Decode`] for truncated or malformed bytes.
    pub fn decode(metadata: &Bytes) -> Result<Self, MetadataError> {
        let (version, mut rest) = split_version(metadata)?;
        let msg =
            ConsumerProtocolSubscription::decode(&mut rest, version.min(SUBSCRIPTION_VERSION))?;
        Ok(Self {
            topics: msg.topics,
            user_data: msg.user_data,
            owned_partitions: msg
                .owned_partitions
                .into_iter()
                .map(|t| TopicPartitions::new(t.topic, t.partitions))
                .collect(),
            generation_id: if msg.generation_id < 0 {
                DEFAULT_GENERATION
            } else {
                msg.generation_id
            },
            rack_id: msg.rack_id.filter(|r| !r.is_empty()),
        })
    }
}

/// What the leader hands a member: its partitions and assignor user data (consumer protocol
/// `ConsumerProtocolAssignment`, versions 0-3, which all share one layout).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Assignment {
    /// Assigned partitions, one entry per topic, sorted by topic then partition.
    pub partitions: Vec<TopicPartitions>,
    /// Assignor-specific bytes; `None` for every assignor in this crate.
    pub user_data: Option<Bytes>,
}

impl Assignment {
    /// An assignment of `partitions` with no user data.
    pub fn new(partitions: Vec<TopicPartitions>) -> Self {
        Self {
            partitions,
            user_data: None,
        }
    }

    /// Number of assigned partitions.
    pub fn len(&self) -> usize {
        count_partitions(&self.partitions)
    }

    /// Whether no partition is assigned.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether partition `partition` of `topic` is assigned.
    pub fn contains(&self, topic: &str, partition: i32) -> bool {
        self.partitions
            .iter()
            .any(|t| t.topic == topic && t.partitions.contains(&partition))
    }

    /// Every assigned `(topic, partition)`, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i32)> + '_ {
        self.partitions
            .iter()
            .flat_map(|t| t.partitions.iter().map(move |p| (t.topic.as_str(), *p)))
    }

    /// Encodes `[version: i16][ConsumerProtocolAssignment at version]`, the SyncGroup
    /// assignment bytes of one member.
    ///
    /// Errors: [`MetadataError::Encode`] for a version outside 0-3.
    pub fn encode(&self, version: i16) -> Result<Bytes, MetadataError> {
        let msg = ConsumerProtocolAssignment::default()
            .with_assigned_partitions(
                self.partitions
                    .iter()
                    .map(|t| {
                        wire_assignment::TopicPartition::default()
                            .with_topic(t.topic.clone())
                            .with_partitions(t.partitions.clone())
                    })
                    .collect(),
            )
            .with_user_data(self.user_data.clone());
        let mut buf = BytesMut::with_capacity(2 + msg.compute_size(version)?);
        buf.put_i16(version);
        msg.encode(&mut buf, version)?;
        Ok(buf.freeze())
    }

    /// Decodes SyncGroup assignment bytes written by any client. Empty bytes (what a broker
    /// returns to a member that got nothing) decode to an empty assignment, as in the Java
    /// client. A version above [`ASSIGNMENT_VERSION`] is read as that version.
    ///
    /// Errors: [`MetadataError::MissingVersion`], [`MetadataError::UnsupportedVersion`],
    /// [`MetadataError::Decode`].
    pub fn decode(assignment: &Bytes) -> Result<Self, MetadataError> {
        if assignment.is_empty() {
            return Ok(Self::default());
        }
        let (version, mut rest) = split_version(assignment)?;
        let msg = ConsumerProtocolAssignment::decode(&mut rest, version.min(ASSIGNMENT_VERSION))?;
        Ok(Self {
            partitions: msg
                .assigned_partitions
                .into_iter()
                .map(|t| TopicPartitions::new(t.topic, t.partitions))
                .collect(),
            user_data: msg.user_data,
        })
    }
}

fn split_version(bytes: &Bytes) -> Result<(i16, Bytes), MetadataError> {
    if bytes.len() < 2 {
        return Err(MetadataError::MissingVersion(bytes.len()));
    }
    let mut rest = bytes.clone();
    let version = rest.get_i16();
    if version < 0 {
        return Err(MetadataError::UnsupportedVersion(version));
    }
    Ok((version, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Subscription {
        Subscription::new(["t0", "t1"])
            .with_user_data(Bytes::from_static(b"ud"))
            .with_owned_partitions(vec![TopicPartitions::new("t0", vec![0, 2])])
            .with_generation_id(7)
            .with_rack_id("rack-a")
    }

    #[test]
    fn subscription_round_trips_at_every_version() {
        let s = sample();
        for v in 0..=SUBSCRIPTION_VERSION {
            let bytes = s.encode(v).unwrap();
            assert_eq!(i16::from_be_bytes([bytes[0], bytes[1]]), v);
            let back = Subscription::decode(&bytes).unwrap();
            assert_eq!(back.topics, s.topics);
            assert_eq!(back.user_data, s.user_data);
            let owned = if v >= 1 {
                s.owned_partitions.clone()
            } else {
                vec![]
            };
            assert_eq!(back.owned_partitions, owned, "v{v}");
            assert_eq!(back.generation_id, if v >= 2 { 7 } else { -1 }, "v{v}");
            assert_eq!(
                back.rack_id.as_deref(),
                (v >= 3).then_some("rack-a"),
                "v{v}"
            );
        }
    }

    #[test]
    fn subscription_v0_layout_is_exact() {
        // version 0, one topic "a", null user data.
        let bytes = Subscription::new(["a"]).encode(0).unwrap();
        assert_eq!(
            &bytes[..],
            &[0, 0, 0, 0, 0, 1, 0, 1, b'a', 0xff, 0xff, 0xff, 0xff]
        );
    }

    #[test]
    fn newer_version_reads_as_newest_known_and_ignores_appended_fields() {
        let mut raw = BytesMut::from(&sample().encode(3).unwrap()[..]);
        raw[0..2].copy_from_slice(&9i16.to_be_bytes());
        raw.extend_from_slice(&[1, 2, 3, 4]); // a field some future version appends
        let back = Subscription::decode(&raw.freeze()).unwrap();
        assert_eq!(back, sample());
    }

    #[test]
    fn bad_metadata_is_a_typed_error() {
        assert_eq!(
            Subscription::decode(&Bytes::from_static(&[0])),
            Err(MetadataError::MissingVersion(1))
        );
        assert_eq!(
            Subscription::decode(&Bytes::from_static(&[0xff, 0xfe])),
            Err(MetadataError::UnsupportedVersion(-2))
        );
        // Claims 1000 topics, has none.
        let err = Subscription::decode(&Bytes::from_static(&[0, 1, 0, 0, 0x03, 0xe8])).unwrap_err();
        assert!(matches!(err, MetadataError::Decode(_)), "{err:?}");
        assert!(!err.is_retriable());
        let mut full = sample().encode(3).unwrap().to_vec();
        for cut in 2..full.len() - 1 {
            full.truncate(cut);
            let _ = Subscription::decode(&Bytes::from(full.clone())); // must not panic
        }
    }

    #[test]
    fn empty_rack_and_negative_generation_normalise() {
        let mut s = sample();
        s.rack_id = Some(String::new());
        s.generation_id = -5;
        let back = Subscription::decode(&s.encode(3).unwrap()).unwrap();
        assert_eq!(back.rack_id, None);
        assert_eq!(back.generation_id, DEFAULT_GENERATION);
    }

    #[test]
    fn assignment_round_trips() {
        let a = Assignment::new(vec![
            TopicPartitions::new("t0", vec![0, 1]),
            TopicPartitions::new("t1", vec![2]),
        ]);
        for v in 0..=ASSIGNMENT_VERSION {
            let back = Assignment::decode(&a.encode(v).unwrap()).unwrap();
            assert_eq!(back, a);
        }
        assert_eq!(a.len(), 3);
        assert!(a.contains("t1", 2) && !a.contains("t1", 0));
        assert_eq!(
            a.iter().collect::<Vec<_>>(),
            [("t0", 0), ("t0", 1), ("t1", 2)]
        );
        assert_eq!(
            Assignment::decode(&Bytes::new()).unwrap(),
            Assignment::default()
        );
        assert!(Assignment::encode(&a, 4).is_err());
    }
}
