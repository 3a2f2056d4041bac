//! The highest version of each API this client sends: one table, read by the connection's
//! version negotiation (`conn::versions::choose`) and by every place that names "our" range in
//! an error. Imports only the leaf crates.
//!
//! The generated messages speak more (`R::VERSIONS`, Apache Kafka 4.4's schemas merged with the
//! versions 4.0 removed); a version is raised here only together with the client code that fills
//! in what it adds (topic ids in Produce 13, transactions v2...). No entry may exceed the
//! generated `Request::LATEST_STABLE_VERSION`: a version still under development
//! (`latestVersionUnstable`) is never picked by default.

use kafkit_protocol::{ApiKey, Request};

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
    (ApiKey::ShareGroupHeartbeat, 1),
    (ApiKey::ShareGroupDescribe, 1),
    (ApiKey::ShareFetch, 2),
    (ApiKey::ShareAcknowledge, 2),
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

    /// Transactions v2 (KIP-890 part 2) and the producer's topic ids are written: Produce 13,
    /// TxnOffsetCommit 6. What is not written yet stays below.
    #[test]
    fn maxima_of_the_client_features_not_yet_written() {
        assert_eq!(client_max(ApiKey::Produce), Some(13));
        assert_eq!(client_max(ApiKey::TxnOffsetCommit), Some(6));
        assert_eq!(client_max(ApiKey::InitProducerId), Some(5));
    }

    /// KIP-1242 (ApiVersions 5: cluster id and node id) and KIP-1102 (Metadata 13: top-level
    /// error code, REBOOTSTRAP_REQUIRED) are written, so both are at 4.4's maximum.
    #[test]
    fn rebootstrap_versions_are_raised() {
        assert_eq!(client_max(ApiKey::ApiVersions), Some(5));
        assert_eq!(client_max(ApiKey::Metadata), Some(13));
    }
}
