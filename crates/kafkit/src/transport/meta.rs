//! What the transport reads from any response without knowing its type statically:
//! `throttle_time_ms` (KIP-219) and the error code that applies to the whole request.
//!
//! The tables dispatch on the request's API key and downcast once, so they work for every
//! generated request type through the plain `Request` bound.

use std::any::Any;

use kafkit_protocol::messages as m;
use kafkit_protocol::{ApiKey, ErrorCode, Request};

/// The `throttle_time_ms` of `resp` (0 when the response type has none), in ms.
pub(crate) fn throttle_time_ms<R: Request>(resp: &R::Response) -> i32 {
    let any: &dyn Any = resp;
    macro_rules! thr {
        ($($key:ident => $ty:ident),* $(,)?) => {
            match R::API_KEY {
                $(ApiKey::$key => any.downcast_ref::<m::$ty>().map_or(0, |r| r.throttle_time_ms),)*
                _ => 0,
            }
        };
    }
    thr! {
        AddOffsetsToTxn => AddOffsetsToTxnResponse,
        AddPartitionsToTxn => AddPartitionsToTxnResponse,
        AddRaftVoter => AddRaftVoterResponse,
        AllocateProducerIds => AllocateProducerIdsResponse,
        AlterClientQuotas => AlterClientQuotasResponse,
        AlterConfigs => AlterConfigsResponse,
        AlterPartitionReassignments => AlterPartitionReassignmentsResponse,
        AlterPartition => AlterPartitionResponse,
        AlterReplicaLogDirs => AlterReplicaLogDirsResponse,
        AlterUserScramCredentials => AlterUserScramCredentialsResponse,
        ApiVersions => ApiVersionsResponse,
        AssignReplicasToDirs => AssignReplicasToDirsResponse,
        BrokerHeartbeat => BrokerHeartbeatResponse,
        BrokerRegistration => BrokerRegistrationResponse,
        ConsumerGroupDescribe => ConsumerGroupDescribeResponse,
        ConsumerGroupHeartbeat => ConsumerGroupHeartbeatResponse,
        ControllerRegistration => ControllerRegistrationResponse,
        CreateAcls => CreateAclsResponse,
        CreateDelegationToken => CreateDelegationTokenResponse,
        CreatePartitions => CreatePartitionsResponse,
        CreateTopics => CreateTopicsResponse,
        DeleteAcls => DeleteAclsResponse,
        DeleteGroups => DeleteGroupsResponse,
        DeleteRecords => DeleteRecordsResponse,
        DeleteTopics => DeleteTopicsResponse,
        DescribeAcls => DescribeAclsResponse,
        DescribeClientQuotas => DescribeClientQuotasResponse,
        DescribeCluster => DescribeClusterResponse,
        DescribeConfigs => DescribeConfigsResponse,
        DescribeDelegationToken => DescribeDelegationTokenResponse,
        DescribeGroups => DescribeGroupsResponse,
        DescribeLogDirs => DescribeLogDirsResponse,
        DescribeProducers => DescribeProducersResponse,
        DescribeTopicPartitions => DescribeTopicPartitionsResponse,
        DescribeTransactions => DescribeTransactionsResponse,
        DescribeUserScramCredentials => DescribeUserScramCredentialsResponse,
        ElectLeaders => ElectLeadersResponse,
        EndTxn => EndTxnResponse,
        ExpireDelegationToken => ExpireDelegationTokenResponse,
        Fetch => FetchResponse,
        FetchSnapshot => FetchSnapshotResponse,
        FindCoordinator => FindCoordinatorResponse,
        GetTelemetrySubscriptions => GetTelemetrySubscriptionsResponse,
        Heartbeat => HeartbeatResponse,
        IncrementalAlterConfigs => IncrementalAlterConfigsResponse,
        InitProducerId => InitProducerIdResponse,
        JoinGroup => JoinGroupResponse,
        LeaveGroup => LeaveGroupResponse,
        ListClientMetricsResources => ListClientMetricsResourcesResponse,
        ListGroups => ListGroupsResponse,
        ListOffsets => ListOffsetsResponse,
        ListPartitionReassignments => ListPartitionReassignmentsResponse,
        ListTransactions => ListTransactionsResponse,
        Metadata => MetadataResponse,
        OffsetCommit => OffsetCommitResponse,
        OffsetDelete => OffsetDeleteResponse,
        OffsetFetch => OffsetFetchResponse,
        OffsetForLeaderEpoch => OffsetForLeaderEpochResponse,
        Produce => ProduceResponse,
        PushTelemetry => PushTelemetryResponse,
        RemoveRaftVoter => RemoveRaftVoterResponse,
        RenewDelegationToken => RenewDelegationTokenResponse,
        ShareAcknowledge => ShareAcknowledgeResponse,
        ShareFetch => ShareFetchResponse,
        ShareGroupDescribe => ShareGroupDescribeResponse,
        ShareGroupHeartbeat => ShareGroupHeartbeatResponse,
        SyncGroup => SyncGroupResponse,
        TxnOffsetCommit => TxnOffsetCommitResponse,
        UnregisterBroker => UnregisterBrokerResponse,
        UpdateFeatures => UpdateFeaturesResponse,
        UpdateRaftVoter => UpdateRaftVoterResponse,
    }
}

/// The top-level `error_code` of `resp` (`NONE` when the type has none).
fn top_level_error<R: Request>(resp: &R::Response) -> ErrorCode {
    let any: &dyn Any = resp;
    macro_rules! err {
        ($($key:ident => $ty:ident),* $(,)?) => {
            match R::API_KEY {
                $(ApiKey::$key => any.downcast_ref::<m::$ty>().map_or(ErrorCode::NONE, |r| r.error_code),)*
                _ => ErrorCode::NONE,
            }
        };
    }
    err! {
        AddOffsetsToTxn => AddOffsetsToTxnResponse,
        AddPartitionsToTxn => AddPartitionsToTxnResponse,
        AddRaftVoter => AddRaftVoterResponse,
        AllocateProducerIds => AllocateProducerIdsResponse,
        AlterPartitionReassignments => AlterPartitionReassignmentsResponse,
        AlterPartition => AlterPartitionResponse,
        ApiVersions => ApiVersionsResponse,
        AssignReplicasToDirs => AssignReplicasToDirsResponse,
        BeginQuorumEpoch => BeginQuorumEpochResponse,
        BrokerHeartbeat => BrokerHeartbeatResponse,
        BrokerRegistration => BrokerRegistrationResponse,
        ConsumerGroupHeartbeat => ConsumerGroupHeartbeatResponse,
        ControlledShutdown => ControlledShutdownResponse,
        ControllerRegistration => ControllerRegistrationResponse,
        CreateDelegationToken => CreateDelegationTokenResponse,
        DescribeAcls => DescribeAclsResponse,
        DescribeClientQuotas => DescribeClientQuotasResponse,
        DescribeCluster => DescribeClusterResponse,
        DescribeDelegationToken => DescribeDelegationTokenResponse,
        DescribeLogDirs => DescribeLogDirsResponse,
        DescribeQuorum => DescribeQuorumResponse,
        DescribeUserScramCredentials => DescribeUserScramCredentialsResponse,
        ElectLeaders => ElectLeadersResponse,
        EndQuorumEpoch => EndQuorumEpochResponse,
        EndTxn => EndTxnResponse,
        Envelope => EnvelopeResponse,
        ExpireDelegationToken => ExpireDelegationTokenResponse,
        Fetch => FetchResponse,
        FetchSnapshot => FetchSnapshotResponse,
        FindCoordinator => FindCoordinatorResponse,
        GetTelemetrySubscriptions => GetTelemetrySubscriptionsResponse,
        Heartbeat => HeartbeatResponse,
        InitProducerId => InitProducerIdResponse,
        JoinGroup => JoinGroupResponse,
        LeaderAndIsr => LeaderAndIsrResponse,
        LeaveGroup => LeaveGroupResponse,
        ListClientMetricsResources => ListClientMetricsResourcesResponse,
        ListGroups => ListGroupsResponse,
        ListPartitionReassignments => ListPartitionReassignmentsResponse,
        ListTransactions => ListTransactionsResponse,
        OffsetDelete => OffsetDeleteResponse,
        OffsetFetch => OffsetFetchResponse,
        PushTelemetry => PushTelemetryResponse,
        RemoveRaftVoter => RemoveRaftVoterResponse,
        RenewDelegationToken => RenewDelegationTokenResponse,
        SaslAuthenticate => SaslAuthenticateResponse,
        SaslHandshake => SaslHandshakeResponse,
        ShareAcknowledge => ShareAcknowledgeResponse,
        ShareFetch => ShareFetchResponse,
        ShareGroupHeartbeat => ShareGroupHeartbeatResponse,
        StopReplica => StopReplicaResponse,
        SyncGroup => SyncGroupResponse,
        UnregisterBroker => UnregisterBrokerResponse,
        UpdateFeatures => UpdateFeaturesResponse,
        UpdateMetadata => UpdateMetadataResponse,
        UpdateRaftVoter => UpdateRaftVoterResponse,
        Vote => VoteResponse,
    }
}

/// Codes that, on every item of an idempotent coordinator request (OffsetCommit,
/// TxnOffsetCommit, AddPartitionsToTxn v0-3), mean the whole request can be sent again.
const IDEMPOTENT_ITEM_CODES: &[ErrorCode] = &[
    ErrorCode::NOT_COORDINATOR,
    ErrorCode::COORDINATOR_NOT_AVAILABLE,
    ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode::REQUEST_TIMED_OUT,
    ErrorCode::CONCURRENT_TRANSACTIONS,
];

/// `NOT_CONTROLLER` on every item of a controller request: it went to a broker that is no
/// longer the controller; nothing was done.
const CONTROLLER_ITEM_CODES: &[ErrorCode] = &[ErrorCode::NOT_CONTROLLER];

/// The one code shared by every item of `codes`, when it is in `allowed`.
fn uniform(codes: impl IntoIterator<Item = ErrorCode>, allowed: &[ErrorCode]) -> Option<ErrorCode> {
    let mut codes = codes.into_iter();
    let first = codes.next()?;
    (allowed.contains(&first) && codes.all(|c| c == first)).then_some(first)
}

/// The error code that applies to the whole request `resp` answers, if any: its top-level
/// `error_code` when non-zero; otherwise, for the per-item responses of requests the transport
/// may resend whole, a coordinator or controller error carried by every item (the request
/// reached the wrong broker, so no item was processed). `None` means the response is an answer
/// to hand to the caller (per-item errors included).
pub(crate) fn whole_error<R: Request>(resp: &R::Response) -> Option<ErrorCode> {
    let top = top_level_error::<R>(resp);
    if !top.is_ok() {
        return Some(top);
    }
    let any: &dyn Any = resp;
    match R::API_KEY {
        ApiKey::OffsetCommit => any.downcast_ref::<m::OffsetCommitResponse>().and_then(|r| {
            uniform(
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
                IDEMPOTENT_ITEM_CODES,
            )
        }),
        ApiKey::TxnOffsetCommit => any
            .downcast_ref::<m::TxnOffsetCommitResponse>()
            .and_then(|r| {
                uniform(
                    r.topics
                        .iter()
                        .flat_map(|t| t.partitions.iter().map(|p| p.error_code)),
                    IDEMPOTENT_ITEM_CODES,
                )
            }),
        ApiKey::AddPartitionsToTxn => any
            .downcast_ref::<m::AddPartitionsToTxnResponse>()
            .and_then(|r| {
                uniform(
                    r.results_by_topic_v3_and_below.iter().flat_map(|t| {
                        t.results_by_partition
                            .iter()
                            .map(|p| p.partition_error_code)
                    }),
                    IDEMPOTENT_ITEM_CODES,
                )
            }),
        ApiKey::OffsetDelete => None,
        ApiKey::CreateTopics => any
            .downcast_ref::<m::CreateTopicsResponse>()
            .and_then(|r| uniform(r.topics.iter().map(|t| t.error_code), CONTROLLER_ITEM_CODES)),
        ApiKey::DeleteTopics => any.downcast_ref::<m::DeleteTopicsResponse>().and_then(|r| {
            uniform(
                r.responses.iter().map(|t| t.error_code),
                CONTROLLER_ITEM_CODES,
            )
        }),
        ApiKey::CreatePartitions => {
            any.downcast_ref::<m::CreatePartitionsResponse>()
                .and_then(|r| {
                    uniform(
                        r.results.iter().map(|t| t.error_code),
                        CONTROLLER_ITEM_CODES,
                    )
                })
        }
        ApiKey::CreateAcls => any.downcast_ref::<m::CreateAclsResponse>().and_then(|r| {
            uniform(
                r.results.iter().map(|t| t.error_code),
                CONTROLLER_ITEM_CODES,
            )
        }),
        _ => None,
    }
}

/// Whether `code` means the cached coordinator is wrong and must be looked up again
/// (`NOT_COORDINATOR`, `COORDINATOR_NOT_AVAILABLE`). `COORDINATOR_LOAD_IN_PROGRESS` keeps it:
/// the coordinator is right, only still loading its state.
pub(crate) fn drops_coordinator(code: ErrorCode) -> bool {
    code == ErrorCode::NOT_COORDINATOR || code == ErrorCode::COORDINATOR_NOT_AVAILABLE
}
