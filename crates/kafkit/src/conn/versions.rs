//! The highest version of each API this client sends: one table, read by [`Conn::version_for`]
//! and by every place that names "our" range in an error.
//!
//! The generated messages speak more (`R::VERSIONS`, Apache Kafka 4.4's schemas merged with the
//! versions 4.0 removed); a version is raised here only together with the client code that fills
//! in what it adds (topic ids in Produce 13, transactions v2...). No entry may exceed the
//! generated `Request::LATEST_STABLE_VERSION`: a version still under development
//! (`latestVersionUnstable`) is never picked by default.
//!
//! [`Conn::version_for`]: super::Conn::version_for

use kafkit_protocol::{ApiKey, Request, VersionRange};

use crate::error::{Error, Result};

/// `(API, highest version the client sends)`, in API key order. The values are the maxima of the
/// October 2024 schemas kafkit spoke before the 4.4 schemas; new 4.x APIs, which the client
/// does not send, are at their latest stable version.
const CLIENT_MAX: &[(ApiKey, i16)] = &[
    (ApiKey::Produce, 13),
    (ApiKey::Fetch, 18),
    (ApiKey::ListOffsets, 11),
    (ApiKey::Metadata, 13),
    (ApiKey::LeaderAndIsr, 7),
    (ApiKey::StopReplica, 4),
    (ApiKey::UpdateMetadata, 8),
    (ApiKey::ControlledShutdown, 3),
    (ApiKey::OffsetCommit, 10),
    (ApiKey::OffsetFetch, 10),
    (ApiKey::FindCoordinator, 6),
    (ApiKey::JoinGroup, 9),
    (ApiKey::Heartbeat, 4),
    (ApiKey::LeaveGroup, 5),
    (ApiKey::SyncGroup, 5),
    (ApiKey::DescribeGroups, 5),
    (ApiKey::ListGroups, 5),
    (ApiKey::SaslHandshake, 1),
    (ApiKey::ApiVersions, 5),
    (ApiKey::CreateTopics, 7),
    (ApiKey::DeleteTopics, 6),
    (ApiKey::DeleteRecords, 2),
    (ApiKey::InitProducerId, 5),
    (ApiKey::OffsetForLeaderEpoch, 4),
    (ApiKey::AddPartitionsToTxn, 5),
    (ApiKey::AddOffsetsToTxn, 4),
    (ApiKey::EndTxn, 5),
    (ApiKey::WriteTxnMarkers, 1),
    (ApiKey::TxnOffsetCommit, 6),
    (ApiKey::DescribeAcls, 3),
    (ApiKey::CreateAcls, 3),
    (ApiKey::DeleteAcls, 3),
    (ApiKey::DescribeConfigs, 4),
    (ApiKey::AlterConfigs, 2),
    (ApiKey::AlterReplicaLogDirs, 2),
    (ApiKey::DescribeLogDirs, 5),
    (ApiKey::SaslAuthenticate, 2),
    (ApiKey::CreatePartitions, 3),
    (ApiKey::CreateDelegationToken, 3),
    (ApiKey::RenewDelegationToken, 2),
    (ApiKey::ExpireDelegationToken, 2),
    (ApiKey::DescribeDelegationToken, 3),
    (ApiKey::DeleteGroups, 3),
    (ApiKey::ElectLeaders, 2),
    (ApiKey::IncrementalAlterConfigs, 1),
    (ApiKey::AlterPartitionReassignments, 0),
    (ApiKey::ListPartitionReassignments, 0),
    (ApiKey::OffsetDelete, 0),
    (ApiKey::DescribeClientQuotas, 1),
    (ApiKey::AlterClientQuotas, 1),
    (ApiKey::DescribeUserScramCredentials, 0),
    (ApiKey::AlterUserScramCredentials, 0),
    (ApiKey::Vote, 1),
    (ApiKey::BeginQuorumEpoch, 1),
    (ApiKey::EndQuorumEpoch, 1),
    (ApiKey::DescribeQuorum, 2),
    (ApiKey::AlterPartition, 3),
    (ApiKey::UpdateFeatures, 2),
    (ApiKey::Envelope, 0),
    (ApiKey::FetchSnapshot, 1),
    (ApiKey::DescribeCluster, 2),
    (ApiKey::DescribeProducers, 0),
    (ApiKey::BrokerRegistration, 4),
    (ApiKey::BrokerHeartbeat, 1),
    (ApiKey::UnregisterBroker, 0),
    (ApiKey::DescribeTransactions, 0),
    (ApiKey::ListTransactions, 2),
    (ApiKey::AllocateProducerIds, 0),
    (ApiKey::ConsumerGroupHeartbeat, 1),
    (ApiKey::ConsumerGroupDescribe, 1),
    (ApiKey::ControllerRegistration, 0),
    (ApiKey::GetTelemetrySubscriptions, 0),
    (ApiKey::PushTelemetry, 0),
    (ApiKey::AssignReplicasToDirs, 0),
    (ApiKey::ListConfigResources, 1),
    (ApiKey::DescribeTopicPartitions, 0),
    (ApiKey::ShareGroupHeartbeat, 0),
    (ApiKey::ShareGroupDescribe, 1),
    (ApiKey::ShareFetch, 0),
    (ApiKey::ShareAcknowledge, 0),
    (ApiKey::AddRaftVoter, 0),
    (ApiKey::RemoveRaftVoter, 0),
    (ApiKey::UpdateRaftVoter, 0),
    (ApiKey::InitializeShareGroupState, 0),
    (ApiKey::ReadShareGroupState, 0),
    (ApiKey::WriteShareGroupState, 0),
    (ApiKey::DeleteShareGroupState, 0),
    (ApiKey::ReadShareGroupStateSummary, 0),
    // New in 4.x and not sent by this library: the latest stable version.
    (ApiKey::StreamsGroupHeartbeat, 1),
    (ApiKey::StreamsGroupDescribe, 1),
    (ApiKey::DescribeShareGroupOffsets, 1),
    (ApiKey::AlterShareGroupOffsets, 0),
    (ApiKey::DeleteShareGroupOffsets, 0),
    (ApiKey::StreamsGroupTopologyDescriptionUpdate, 0),
    (ApiKey::UnregisterController, 0),
];

/// The highest version of `api` the client sends; `None` for an API missing from the table
/// (a test keeps it complete).
pub(crate) fn client_max(api: ApiKey) -> Option<i16> {
    CLIENT_MAX.iter().find(|(k, _)| *k == api).map(|(_, v)| *v)
}

/// The highest version of `R` the client sends: its table entry, never above the generated
/// latest stable version.
pub(crate) fn client_max_for<R: Request>() -> i16 {
    client_max(R::API_KEY).map_or(R::LATEST_STABLE_VERSION, |v| {
        v.min(R::LATEST_STABLE_VERSION)
    })
}

/// The version to send `R` at: the highest in both the client's range (up to its table entry,
/// capped at `cap`) and `broker`'s (`None`: the broker does not offer the API).
///
/// # Errors
///
/// [`Error::UnsupportedVersion`] naming the API and both ranges when they do not overlap.
pub(crate) fn choose<R: Request>(broker: Option<VersionRange>, cap: Option<i16>) -> Result<i16> {
    let max = client_max_for::<R>();
    let ours = VersionRange {
        min: R::VERSIONS.min,
        max: cap.map_or(max, |c| c.min(max)),
    };
    broker
        .and_then(|b| b.intersect(&ours))
        .map(|r| r.max)
        .ok_or(Error::UnsupportedVersion {
            api: R::API_KEY,
            ours,
            broker,
        })
}

/// [`choose`] with the unstable opt-in ([`crate::DialerBuilder::unstable_api_versions`], Java's
/// `unstable.api.versions.enable`): an API whose table entry is its latest stable version may go
/// on to the versions the schema marks `latestVersionUnstable` (up to `R::VERSIONS.max`); every
/// other API keeps its table entry, since the client does not yet fill what the newer stable
/// versions add. Without the opt-in this is [`choose`].
///
/// # Errors
///
/// As [`choose`].
pub(crate) fn choose_opt_in<R: Request>(
    broker: Option<VersionRange>,
    cap: Option<i16>,
    unstable: bool,
) -> Result<i16> {
    let at_stable_top = client_max(R::API_KEY).is_some_and(|v| v >= R::LATEST_STABLE_VERSION);
    if !unstable || !at_stable_top || R::VERSIONS.max <= R::LATEST_STABLE_VERSION {
        return choose::<R>(broker, cap);
    }
    let ours = VersionRange {
        min: R::VERSIONS.min,
        max: cap.map_or(R::VERSIONS.max, |c| c.min(R::VERSIONS.max)),
    };
    broker
        .and_then(|b| b.intersect(&ours))
        .map(|r| r.max)
        .ok_or(Error::UnsupportedVersion {
            api: R::API_KEY,
            ours,
            broker,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every API is in the table once, in key order, within what the generated code speaks and
    /// not above its latest stable version.
    #[test]
    fn the_table_covers_every_api_within_its_stable_versions() {
        let keys: Vec<ApiKey> = CLIENT_MAX.iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ApiKey::ALL);
        for (api, max) in CLIENT_MAX {
            let valid = api.valid_versions();
            assert!(valid.contains(*max), "{api}: {max} outside {valid:?}");
            assert!(
                *max <= api.latest_stable_version(),
                "{api}: {max} is above the latest stable version"
            );
        }
    }

    /// What the client negotiates with a broker that offers every version the generated code
    /// has (Kafka 4.4 and above, unstable versions enabled) is the table, for every request.
    #[test]
    fn negotiation_follows_the_table() {
        let mut n = 0;
        macro_rules! check {
            ($module:ident, $req:ident, $resp:ident) => {{
                type Q = kafkit_protocol::messages::$req;
                let all = <Q as kafkit_protocol::Message>::VERSIONS;
                let chosen = choose::<Q>(Some(all), None).unwrap();
                assert_eq!(Some(chosen), client_max(Q::API_KEY), "{}", Q::API_KEY);
                // A cap below the table wins; a broker short of the table is followed.
                assert_eq!(choose::<Q>(Some(all), Some(all.min)).unwrap(), all.min);
                let short = VersionRange::new(all.min, all.min);
                assert_eq!(choose::<Q>(Some(short), None).unwrap(), all.min);
                assert!(choose::<Q>(None, None).is_err());
                n += 1;
            }};
        }
        kafkit_protocol::for_each_request!(check);
        assert_eq!(n, CLIENT_MAX.len());
    }

    /// Transactions v2 (KIP-890 part 2) and the producer's topic ids are written: Produce 13,
    /// TxnOffsetCommit 6. What is not written yet stays below.
    #[test]
    fn maxima_of_the_client_features_not_yet_written() {
        assert_eq!(client_max(ApiKey::Produce), Some(13));
        assert_eq!(client_max(ApiKey::TxnOffsetCommit), Some(6));
        assert_eq!(client_max(ApiKey::InitProducerId), Some(5));
    }

    /// The unstable opt-in: InitProducerId v6 (unstable in 4.4) only with it, and only where the
    /// broker offers it; APIs without unstable versions are unchanged either way.
    #[test]
    fn unstable_versions_only_with_the_opt_in() {
        use kafkit_protocol::Message;
        use kafkit_protocol::messages::{InitProducerIdRequest, ProduceRequest};
        let all = InitProducerIdRequest::VERSIONS;
        assert_eq!(all.max, 6);
        assert_eq!(InitProducerIdRequest::LATEST_STABLE_VERSION, 5);
        assert_eq!(
            choose_opt_in::<InitProducerIdRequest>(Some(all), None, false).unwrap(),
            5
        );
        assert_eq!(
            choose_opt_in::<InitProducerIdRequest>(Some(all), None, true).unwrap(),
            6
        );
        // A broker without the unstable version, and a cap, are still followed.
        let stable = VersionRange::new(0, 5);
        assert_eq!(
            choose_opt_in::<InitProducerIdRequest>(Some(stable), None, true).unwrap(),
            5
        );
        assert_eq!(
            choose_opt_in::<InitProducerIdRequest>(Some(all), Some(4), true).unwrap(),
            4
        );
        assert!(choose_opt_in::<InitProducerIdRequest>(None, None, true).is_err());
        // Produce has no unstable version, and its table entry is below its latest stable one.
        let produce = ProduceRequest::VERSIONS;
        assert_eq!(
            choose_opt_in::<ProduceRequest>(Some(produce), None, true).unwrap(),
            choose::<ProduceRequest>(Some(produce), None).unwrap()
        );
    }

    /// KIP-1242 (ApiVersions 5: cluster id and node id) and KIP-1102 (Metadata 13: top-level
    /// error code, REBOOTSTRAP_REQUIRED) are written, so both are at 4.4's maximum.
    #[test]
    fn rebootstrap_versions_are_raised() {
        assert_eq!(client_max(ApiKey::ApiVersions), Some(5));
        assert_eq!(client_max(ApiKey::Metadata), Some(13));
    }
}
