//! Byte-for-byte agreement with the crates.io `kafka-protocol` crate (`kprs`) for the core
//! APIs, at every version both support.
//!
//! Direction 1: a random value of ours is encoded by us, decoded by kprs and re-encoded by kprs;
//! the bytes must be identical. Direction 2: those kprs-made bytes are decoded by us, must give
//! back the original value, and re-encode to the same bytes. Values carry no unknown tagged
//! fields (kprs keeps them differently).

use bytes::BytesMut;
use kafkit_protocol::Message;
use kafkit_protocol::arbitrary::{Arbitrary, Gen};
use proptest::prelude::*;

fn compare<M, K>(seed: u64) -> Result<(), TestCaseError>
where
    M: Message + Arbitrary,
    K: kprs::protocol::Message
        + kprs::protocol::Encodable
        + kprs::protocol::Decodable
        + std::fmt::Debug,
{
    let ours = M::VERSIONS;
    let theirs = kafkit_protocol::VersionRange::new(K::VERSIONS.min, K::VERSIONS.max);
    let Some(common) = ours.intersect(&theirs) else {
        return Err(TestCaseError::fail(format!(
            "{}: no common versions",
            M::NAME
        )));
    };
    for version in common.min..=common.max {
        let mut g = Gen::new(seed);
        g.unknown_tags = false;
        let value = M::arbitrary(&mut g, version);
        let mut ours_buf = BytesMut::new();
        value
            .encode(&mut ours_buf, version)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let ours_bytes = ours_buf.freeze();

        let mut input = ours_bytes.clone();
        let k = K::decode(&mut input, version).map_err(|e| {
            TestCaseError::fail(format!("{} v{version}: kprs decode: {e:?}", M::NAME))
        })?;
        prop_assert!(
            input.is_empty(),
            "{} v{}: kprs left {} bytes",
            M::NAME,
            version,
            input.len()
        );
        let mut theirs_buf = BytesMut::new();
        k.encode(&mut theirs_buf, version).map_err(|e| {
            TestCaseError::fail(format!("{} v{version}: kprs encode: {e:?}", M::NAME))
        })?;
        let theirs_bytes = theirs_buf.freeze();
        prop_assert_eq!(
            &ours_bytes[..],
            &theirs_bytes[..],
            "{} v{}: ours vs kprs bytes",
            M::NAME,
            version
        );

        let mut input = theirs_bytes.clone();
        let back = M::decode(&mut input, version).map_err(|e| {
            TestCaseError::fail(format!(
                "{} v{version}: our decode of kprs bytes: {e}",
                M::NAME
            ))
        })?;
        prop_assert_eq!(&back, &value, "{} v{}", M::NAME, version);
        let mut again = BytesMut::new();
        back.encode(&mut again, version)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&again[..], &theirs_bytes[..]);
    }
    Ok(())
}

/// Differential check on damaged input: overwrite bytes of a valid encoding; whenever both
/// crates accept the result, they must have consumed the same bytes and must re-encode it to the
/// same bytes. Returns how many inputs both accepted.
fn mutated<M, K>(seed: u64) -> Result<usize, TestCaseError>
where
    M: Message + Arbitrary,
    K: kprs::protocol::Message
        + kprs::protocol::Encodable
        + kprs::protocol::Decodable
        + std::fmt::Debug,
{
    let theirs = kafkit_protocol::VersionRange::new(K::VERSIONS.min, K::VERSIONS.max);
    let Some(common) = M::VERSIONS.intersect(&theirs) else {
        return Ok(0);
    };
    let mut both = 0;
    for version in common.min..=common.max {
        let mut g = Gen::new(seed);
        g.unknown_tags = false;
        let value = M::arbitrary(&mut g, version);
        let mut buf = BytesMut::new();
        value
            .encode(&mut buf, version)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        if buf.is_empty() {
            continue;
        }
        for _ in 0..4 {
            let mut damaged = buf.clone();
            for _ in 0..=g.below(2) {
                let at = g.below(damaged.len() as u64) as usize;
                damaged[at] = g.next_u64() as u8;
            }
            let damaged = damaged.freeze();
            let mut a = damaged.clone();
            let mut b = damaged.clone();
            // kprs preallocates from unchecked counts (it aborts on some damaged inputs), so it
            // only sees inputs that our decoder, which checks every count, accepted.
            let Ok(ours) = M::decode(&mut a, version) else {
                continue;
            };
            let Ok(kp) = K::decode(&mut b, version) else {
                continue;
            };
            // Both must have stopped at the same place.
            prop_assert_eq!(
                a.len(),
                b.len(),
                "{} v{}: consumed lengths differ",
                M::NAME,
                version
            );
            let mut x = BytesMut::new();
            ours.encode(&mut x, version)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let mut y = BytesMut::new();
            if kp.encode(&mut y, version).is_err() {
                continue;
            }
            prop_assert_eq!(
                &x[..],
                &y[..],
                "{} v{}: re-encodings of damaged input differ",
                M::NAME,
                version
            );
            both += 1;
        }
    }
    Ok(both)
}

macro_rules! damaged {
    ($($name:ident: $ty:ident),* $(,)?) => {
        mod damaged {
            use super::*;
            proptest! {
                #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
                $(
                    #[test]
                    fn $name(seed in any::<u64>()) {
                        mutated::<kafkit_protocol::messages::$ty, kprs::messages::$ty>(seed)?;
                    }
                )*
            }
        }
    };
}

damaged! {
    produce_request: ProduceRequest,
    produce_response: ProduceResponse,
    fetch_request: FetchRequest,
    fetch_response: FetchResponse,
    metadata_request: MetadataRequest,
    metadata_response: MetadataResponse,
    api_versions_request: ApiVersionsRequest,
    api_versions_response: ApiVersionsResponse,
    list_offsets_request: ListOffsetsRequest,
    list_offsets_response: ListOffsetsResponse,
    create_topics_request: CreateTopicsRequest,
    create_topics_response: CreateTopicsResponse,
    join_group_request: JoinGroupRequest,
    join_group_response: JoinGroupResponse,
    sync_group_request: SyncGroupRequest,
    sync_group_response: SyncGroupResponse,
    offset_commit_request: OffsetCommitRequest,
    offset_commit_response: OffsetCommitResponse,
    offset_fetch_request: OffsetFetchRequest,
    offset_fetch_response: OffsetFetchResponse,
}

macro_rules! interop {
    ($cases:expr; $($name:ident: $ty:ident),* $(,)?) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: $cases, ..ProptestConfig::default() })]
            $(
                #[test]
                fn $name(seed in any::<u64>()) {
                    compare::<kafkit_protocol::messages::$ty, kprs::messages::$ty>(seed)?;
                }
            )*
        }
    };
}

// The core APIs, with more cases each.
interop! {
    64;
    produce_request: ProduceRequest,
    produce_response: ProduceResponse,
    fetch_request: FetchRequest,
    fetch_response: FetchResponse,
    metadata_request: MetadataRequest,
    metadata_response: MetadataResponse,
    api_versions_request: ApiVersionsRequest,
    api_versions_response: ApiVersionsResponse,
    list_offsets_request: ListOffsetsRequest,
    list_offsets_response: ListOffsetsResponse,
    create_topics_request: CreateTopicsRequest,
    create_topics_response: CreateTopicsResponse,
    join_group_request: JoinGroupRequest,
    join_group_response: JoinGroupResponse,
    sync_group_request: SyncGroupRequest,
    sync_group_response: SyncGroupResponse,
    offset_commit_request: OffsetCommitRequest,
    offset_commit_response: OffsetCommitResponse,
    offset_fetch_request: OffsetFetchRequest,
    offset_fetch_response: OffsetFetchResponse,
}

/// Every message both crates have (kprs 0.18 dropped the ZooKeeper-era inter-broker APIs and
/// has no Streams group APIs), headers and data schemas included, compared at the versions both
/// speak (so the share-group APIs at v1, which kprs starts at), except:
/// - LeaderChangeMessage, VotersRecord: kprs lets the decoded `Version` field replace the version
///   it decodes with, so it misreads these.
mod all {
    use super::*;
    interop! {
        16;
        add_offsets_to_txn_request: AddOffsetsToTxnRequest,
        add_offsets_to_txn_response: AddOffsetsToTxnResponse,
        add_partitions_to_txn_request: AddPartitionsToTxnRequest,
        add_partitions_to_txn_response: AddPartitionsToTxnResponse,
        add_raft_voter_request: AddRaftVoterRequest,
        add_raft_voter_response: AddRaftVoterResponse,
        allocate_producer_ids_request: AllocateProducerIdsRequest,
        allocate_producer_ids_response: AllocateProducerIdsResponse,
        alter_client_quotas_request: AlterClientQuotasRequest,
        alter_client_quotas_response: AlterClientQuotasResponse,
        alter_configs_request: AlterConfigsRequest,
        alter_configs_response: AlterConfigsResponse,
        alter_partition_reassignments_request: AlterPartitionReassignmentsRequest,
        alter_partition_reassignments_response: AlterPartitionReassignmentsResponse,
        alter_partition_request: AlterPartitionRequest,
        alter_partition_response: AlterPartitionResponse,
        alter_replica_log_dirs_request: AlterReplicaLogDirsRequest,
        alter_replica_log_dirs_response: AlterReplicaLogDirsResponse,
        alter_user_scram_credentials_request: AlterUserScramCredentialsRequest,
        alter_user_scram_credentials_response: AlterUserScramCredentialsResponse,
        api_versions_request: ApiVersionsRequest,
        api_versions_response: ApiVersionsResponse,
        assign_replicas_to_dirs_request: AssignReplicasToDirsRequest,
        assign_replicas_to_dirs_response: AssignReplicasToDirsResponse,
        begin_quorum_epoch_request: BeginQuorumEpochRequest,
        begin_quorum_epoch_response: BeginQuorumEpochResponse,
        broker_heartbeat_request: BrokerHeartbeatRequest,
        broker_heartbeat_response: BrokerHeartbeatResponse,
        broker_registration_request: BrokerRegistrationRequest,
        broker_registration_response: BrokerRegistrationResponse,
        consumer_group_describe_request: ConsumerGroupDescribeRequest,
        consumer_group_describe_response: ConsumerGroupDescribeResponse,
        consumer_group_heartbeat_request: ConsumerGroupHeartbeatRequest,
        consumer_group_heartbeat_response: ConsumerGroupHeartbeatResponse,
        consumer_protocol_assignment: ConsumerProtocolAssignment,
        consumer_protocol_subscription: ConsumerProtocolSubscription,
        controller_registration_request: ControllerRegistrationRequest,
        controller_registration_response: ControllerRegistrationResponse,
        create_acls_request: CreateAclsRequest,
        create_acls_response: CreateAclsResponse,
        create_delegation_token_request: CreateDelegationTokenRequest,
        create_delegation_token_response: CreateDelegationTokenResponse,
        create_partitions_request: CreatePartitionsRequest,
        create_partitions_response: CreatePartitionsResponse,
        create_topics_request: CreateTopicsRequest,
        create_topics_response: CreateTopicsResponse,
        default_principal_data: DefaultPrincipalData,
        delete_acls_request: DeleteAclsRequest,
        delete_acls_response: DeleteAclsResponse,
        delete_groups_request: DeleteGroupsRequest,
        delete_groups_response: DeleteGroupsResponse,
        delete_records_request: DeleteRecordsRequest,
        delete_records_response: DeleteRecordsResponse,
        delete_share_group_state_request: DeleteShareGroupStateRequest,
        delete_share_group_state_response: DeleteShareGroupStateResponse,
        delete_topics_request: DeleteTopicsRequest,
        delete_topics_response: DeleteTopicsResponse,
        describe_acls_request: DescribeAclsRequest,
        describe_acls_response: DescribeAclsResponse,
        describe_client_quotas_request: DescribeClientQuotasRequest,
        describe_client_quotas_response: DescribeClientQuotasResponse,
        describe_cluster_request: DescribeClusterRequest,
        describe_cluster_response: DescribeClusterResponse,
        describe_configs_request: DescribeConfigsRequest,
        describe_configs_response: DescribeConfigsResponse,
        describe_delegation_token_request: DescribeDelegationTokenRequest,
        describe_delegation_token_response: DescribeDelegationTokenResponse,
        describe_groups_request: DescribeGroupsRequest,
        describe_groups_response: DescribeGroupsResponse,
        describe_log_dirs_request: DescribeLogDirsRequest,
        describe_log_dirs_response: DescribeLogDirsResponse,
        describe_producers_request: DescribeProducersRequest,
        describe_producers_response: DescribeProducersResponse,
        describe_quorum_request: DescribeQuorumRequest,
        describe_quorum_response: DescribeQuorumResponse,
        describe_topic_partitions_request: DescribeTopicPartitionsRequest,
        describe_topic_partitions_response: DescribeTopicPartitionsResponse,
        describe_transactions_request: DescribeTransactionsRequest,
        describe_transactions_response: DescribeTransactionsResponse,
        describe_user_scram_credentials_request: DescribeUserScramCredentialsRequest,
        describe_user_scram_credentials_response: DescribeUserScramCredentialsResponse,
        elect_leaders_request: ElectLeadersRequest,
        elect_leaders_response: ElectLeadersResponse,
        end_quorum_epoch_request: EndQuorumEpochRequest,
        end_quorum_epoch_response: EndQuorumEpochResponse,
        end_txn_request: EndTxnRequest,
        end_txn_response: EndTxnResponse,
        envelope_request: EnvelopeRequest,
        envelope_response: EnvelopeResponse,
        expire_delegation_token_request: ExpireDelegationTokenRequest,
        expire_delegation_token_response: ExpireDelegationTokenResponse,
        fetch_request: FetchRequest,
        fetch_response: FetchResponse,
        fetch_snapshot_request: FetchSnapshotRequest,
        fetch_snapshot_response: FetchSnapshotResponse,
        find_coordinator_request: FindCoordinatorRequest,
        find_coordinator_response: FindCoordinatorResponse,
        get_telemetry_subscriptions_request: GetTelemetrySubscriptionsRequest,
        get_telemetry_subscriptions_response: GetTelemetrySubscriptionsResponse,
        heartbeat_request: HeartbeatRequest,
        heartbeat_response: HeartbeatResponse,
        incremental_alter_configs_request: IncrementalAlterConfigsRequest,
        incremental_alter_configs_response: IncrementalAlterConfigsResponse,
        init_producer_id_request: InitProducerIdRequest,
        init_producer_id_response: InitProducerIdResponse,
        initialize_share_group_state_request: InitializeShareGroupStateRequest,
        initialize_share_group_state_response: InitializeShareGroupStateResponse,
        join_group_request: JoinGroupRequest,
        join_group_response: JoinGroupResponse,
        k_raft_version_record: KRaftVersionRecord,
        leave_group_request: LeaveGroupRequest,
        leave_group_response: LeaveGroupResponse,
        list_groups_request: ListGroupsRequest,
        list_groups_response: ListGroupsResponse,
        list_offsets_request: ListOffsetsRequest,
        list_offsets_response: ListOffsetsResponse,
        list_partition_reassignments_request: ListPartitionReassignmentsRequest,
        list_partition_reassignments_response: ListPartitionReassignmentsResponse,
        list_transactions_request: ListTransactionsRequest,
        list_transactions_response: ListTransactionsResponse,
        metadata_request: MetadataRequest,
        metadata_response: MetadataResponse,
        offset_commit_request: OffsetCommitRequest,
        offset_commit_response: OffsetCommitResponse,
        offset_delete_request: OffsetDeleteRequest,
        offset_delete_response: OffsetDeleteResponse,
        offset_fetch_request: OffsetFetchRequest,
        offset_fetch_response: OffsetFetchResponse,
        offset_for_leader_epoch_request: OffsetForLeaderEpochRequest,
        offset_for_leader_epoch_response: OffsetForLeaderEpochResponse,
        produce_request: ProduceRequest,
        produce_response: ProduceResponse,
        push_telemetry_request: PushTelemetryRequest,
        push_telemetry_response: PushTelemetryResponse,
        read_share_group_state_request: ReadShareGroupStateRequest,
        read_share_group_state_response: ReadShareGroupStateResponse,
        read_share_group_state_summary_request: ReadShareGroupStateSummaryRequest,
        remove_raft_voter_request: RemoveRaftVoterRequest,
        remove_raft_voter_response: RemoveRaftVoterResponse,
        renew_delegation_token_request: RenewDelegationTokenRequest,
        renew_delegation_token_response: RenewDelegationTokenResponse,
        request_header: RequestHeader,
        response_header: ResponseHeader,
        sasl_authenticate_request: SaslAuthenticateRequest,
        sasl_authenticate_response: SaslAuthenticateResponse,
        sasl_handshake_request: SaslHandshakeRequest,
        sasl_handshake_response: SaslHandshakeResponse,
        snapshot_footer_record: SnapshotFooterRecord,
        snapshot_header_record: SnapshotHeaderRecord,
        sync_group_request: SyncGroupRequest,
        sync_group_response: SyncGroupResponse,
        txn_offset_commit_request: TxnOffsetCommitRequest,
        txn_offset_commit_response: TxnOffsetCommitResponse,
        unregister_broker_request: UnregisterBrokerRequest,
        unregister_broker_response: UnregisterBrokerResponse,
        update_features_request: UpdateFeaturesRequest,
        update_features_response: UpdateFeaturesResponse,
        update_raft_voter_request: UpdateRaftVoterRequest,
        update_raft_voter_response: UpdateRaftVoterResponse,
        vote_request: VoteRequest,
        vote_response: VoteResponse,
        write_share_group_state_request: WriteShareGroupStateRequest,
        write_share_group_state_response: WriteShareGroupStateResponse,
        write_txn_markers_request: WriteTxnMarkersRequest,
        write_txn_markers_response: WriteTxnMarkersResponse,
        alter_share_group_offsets_request: AlterShareGroupOffsetsRequest,
        alter_share_group_offsets_response: AlterShareGroupOffsetsResponse,
        delete_share_group_offsets_request: DeleteShareGroupOffsetsRequest,
        delete_share_group_offsets_response: DeleteShareGroupOffsetsResponse,
        describe_share_group_offsets_request: DescribeShareGroupOffsetsRequest,
        describe_share_group_offsets_response: DescribeShareGroupOffsetsResponse,
        end_txn_marker: EndTxnMarker,
        list_config_resources_request: ListConfigResourcesRequest,
        list_config_resources_response: ListConfigResourcesResponse,
        read_share_group_state_summary_response: ReadShareGroupStateSummaryResponse,
        share_acknowledge_request: ShareAcknowledgeRequest,
        share_acknowledge_response: ShareAcknowledgeResponse,
        share_fetch_request: ShareFetchRequest,
        share_fetch_response: ShareFetchResponse,
        share_group_describe_request: ShareGroupDescribeRequest,
        share_group_describe_response: ShareGroupDescribeResponse,
        share_group_heartbeat_request: ShareGroupHeartbeatRequest,
        share_group_heartbeat_response: ShareGroupHeartbeatResponse,
    }
}

/// The damaged-input check is only meaningful when both decoders often accept the damage.
#[test]
fn damaged_inputs_are_often_accepted_by_both() {
    let mut n = 0;
    for seed in 0..50 {
        n += mutated::<kafkit_protocol::messages::FetchResponse, kprs::messages::FetchResponse>(
            seed,
        )
        .unwrap();
        n += mutated::<kafkit_protocol::messages::MetadataResponse, kprs::messages::MetadataResponse>(
            seed,
        )
        .unwrap();
    }
    assert!(
        n > 100,
        "only {n} damaged inputs were accepted by both decoders"
    );
}
