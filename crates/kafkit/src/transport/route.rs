//! The [`Routed`] trait and the simple routes: any broker, the controller, the group or
//! transaction coordinator of the id a request carries. Split routes (one request per broker,
//! merged back) live in `split*.rs`.

use std::any::Any;
use std::time::Duration;

use kafkit_protocol::messages as m;
use kafkit_protocol::{ApiKey, Request};

use super::{CoordinatorType, Transport};
use crate::error::Result;

/// Where a simple route sends its request.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// Any broker (the least recently failed, rotating).
    Any,
    /// The controller from metadata, any broker when unknown (KRaft brokers forward).
    Controller,
    /// The coordinator of this key.
    Coordinator(CoordinatorType, String),
}

/// How [`Transport::send_to`] sends one request.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SendOptions {
    /// The highest version to use (`None`: the highest both sides speak).
    pub(crate) max_version: Option<i16>,
    /// Time the request asks the broker to wait, added to the request timeout (Produce
    /// `timeout_ms`, Fetch `max_wait_ms`).
    pub(crate) extra_wait: Duration,
}

pub(crate) mod sealed {
    /// Keeps [`super::Routed`] implemented only inside this crate.
    pub trait Sealed {}
}

/// Request types [`Transport::round_trip`] knows how to route: implemented in this crate for
/// every generated request a client sends (sealed).
///
/// Routes (Kafka protocol guide; `Request::ROUTING` of each type):
/// - any broker: Metadata, ApiVersions, DescribeCluster, FindCoordinator, InitProducerId
///   without a transactional id, DescribeAcls, DeleteAcls, Describe/AlterClientQuotas,
///   Describe/AlterUserScramCredentials, delegation tokens, DescribeQuorum,
///   DescribeTopicPartitions, ListClientMetricsResources, Add/RemoveRaftVoter, UnregisterBroker;
/// - the controller (any broker when it is unknown; KRaft brokers forward, KIP-590):
///   CreateTopics, DeleteTopics, CreatePartitions, CreateAcls, ElectLeaders,
///   AlterPartitionReassignments, ListPartitionReassignments, UpdateFeatures;
/// - the group coordinator of the request's `group_id`: JoinGroup, SyncGroup, Heartbeat,
///   LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetDelete, ConsumerGroupHeartbeat,
///   ShareGroupHeartbeat;
/// - the transaction coordinator of the request's `transactional_id` (KIP-98): InitProducerId
///   with a transactional id, AddPartitionsToTxn (client versions 0-3), AddOffsetsToTxn,
///   EndTxn;
/// - split across brokers and merged (partition leaders, broker resources, several
///   coordinators): see the `split` routes (Produce, ListOffsets, DeleteRecords,
///   OffsetForLeaderEpoch, DescribeProducers, DescribeConfigs, ListGroups, DescribeGroups,
///   OffsetFetch...).
pub trait Routed: Request + sealed::Sealed + Send + Sync + 'static {
    /// Sends `req` through `t` with a deadline of `timeout_ms` from now. Called by
    /// [`Transport::round_trip`]; not meant to be called directly.
    #[doc(hidden)]
    fn route(
        t: &Transport,
        req: Self,
        timeout_ms: u64,
    ) -> impl Future<Output = Result<Self::Response>> + Send;
}

/// Implements [`Routed`] for simple routes: `Type => target_fn` where `target_fn(&req)`
/// returns the [`Target`] and the optional version cap.
macro_rules! simple_routes {
    ($($ty:ident => $target:expr;)*) => {
        $(
            impl sealed::Sealed for m::$ty {}
            impl Routed for m::$ty {
                async fn route(t: &Transport, req: Self, timeout_ms: u64) -> Result<Self::Response> {
                    #[allow(clippy::redundant_closure_call)]
                    let (target, max_version): (Target, Option<i16>) = ($target)(&req);
                    let opts = SendOptions { max_version, extra_wait: broker_wait(&req) };
                    t.route_simple(&req, target, opts, timeout_ms).await
                }
            }
        )*

        /// Every simple route: (API, the schema's routing, where a default request goes).
        #[cfg(test)]
        fn simple_route_table() -> Vec<(kafkit_protocol::ApiKey, kafkit_protocol::Routing, Target)> {
            vec![$({
                #[allow(clippy::redundant_closure_call)]
                let (target, _) = ($target)(&m::$ty::default());
                (<m::$ty as Request>::API_KEY, <m::$ty as Request>::ROUTING, target)
            }),*]
        }
    };
}

/// How long the broker may hold `req` before it answers, added to the request timeout of the
/// connection: a JoinGroup waits for the rebalance (`rebalance_timeout_ms`, or
/// `session_timeout_ms` at v0), controller operations wait up to their `timeout_ms`.
fn broker_wait<R: Request>(req: &R) -> Duration {
    let any: &dyn Any = req;
    macro_rules! timeout_ms {
        ($ty:ident) => {
            any.downcast_ref::<m::$ty>().map(|r| r.timeout_ms)
        };
    }
    let ms = match R::API_KEY {
        ApiKey::JoinGroup => any
            .downcast_ref::<m::JoinGroupRequest>()
            .map(|r| r.rebalance_timeout_ms.max(r.session_timeout_ms)),
        ApiKey::CreateTopics => timeout_ms!(CreateTopicsRequest),
        ApiKey::DeleteTopics => timeout_ms!(DeleteTopicsRequest),
        ApiKey::CreatePartitions => timeout_ms!(CreatePartitionsRequest),
        ApiKey::ElectLeaders => timeout_ms!(ElectLeadersRequest),
        ApiKey::AlterPartitionReassignments => timeout_ms!(AlterPartitionReassignmentsRequest),
        ApiKey::UpdateFeatures => timeout_ms!(UpdateFeaturesRequest),
        _ => None,
    };
    Duration::from_millis(ms.and_then(|v| u64::try_from(v).ok()).unwrap_or(0))
}

fn any<R>(_: &R) -> (Target, Option<i16>) {
    (Target::Any, None)
}

fn controller<R>(_: &R) -> (Target, Option<i16>) {
    (Target::Controller, None)
}

fn group(id: &str) -> (Target, Option<i16>) {
    (
        Target::Coordinator(CoordinatorType::Group, id.to_owned()),
        None,
    )
}

fn txn(id: &str) -> (Target, Option<i16>) {
    (
        Target::Coordinator(CoordinatorType::Transaction, id.to_owned()),
        None,
    )
}

simple_routes! {
    // Any broker.
    MetadataRequest => any;
    ApiVersionsRequest => any;
    DescribeClusterRequest => any;
    FindCoordinatorRequest => any;
    DescribeAclsRequest => any;
    DeleteAclsRequest => any;
    DescribeClientQuotasRequest => any;
    AlterClientQuotasRequest => any;
    DescribeUserScramCredentialsRequest => any;
    AlterUserScramCredentialsRequest => any;
    CreateDelegationTokenRequest => any;
    RenewDelegationTokenRequest => any;
    ExpireDelegationTokenRequest => any;
    DescribeDelegationTokenRequest => any;
    DescribeQuorumRequest => any;
    DescribeTopicPartitionsRequest => any;
    ListClientMetricsResourcesRequest => any;
    AddRaftVoterRequest => any;
    RemoveRaftVoterRequest => any;
    UnregisterBrokerRequest => any;
    // The controller.
    CreateTopicsRequest => controller;
    DeleteTopicsRequest => controller;
    CreatePartitionsRequest => controller;
    CreateAclsRequest => controller;
    ElectLeadersRequest => controller;
    AlterPartitionReassignmentsRequest => controller;
    ListPartitionReassignmentsRequest => controller;
    UpdateFeaturesRequest => controller;
    // The group coordinator.
    JoinGroupRequest => |r: &m::JoinGroupRequest| group(&r.group_id);
    SyncGroupRequest => |r: &m::SyncGroupRequest| group(&r.group_id);
    HeartbeatRequest => |r: &m::HeartbeatRequest| group(&r.group_id);
    LeaveGroupRequest => |r: &m::LeaveGroupRequest| group(&r.group_id);
    OffsetCommitRequest => |r: &m::OffsetCommitRequest| group(&r.group_id);
    TxnOffsetCommitRequest => |r: &m::TxnOffsetCommitRequest| group(&r.group_id);
    OffsetDeleteRequest => |r: &m::OffsetDeleteRequest| group(&r.group_id);
    ConsumerGroupHeartbeatRequest => |r: &m::ConsumerGroupHeartbeatRequest| group(&r.group_id);
    ShareGroupHeartbeatRequest => |r: &m::ShareGroupHeartbeatRequest| group(&r.group_id);
    // The transaction coordinator.
    InitProducerIdRequest => |r: &m::InitProducerIdRequest| match r.transactional_id.as_deref() {
        Some(id) if !id.is_empty() => txn(id),
        _ => (Target::Any, None),
    };
    // Versions 4+ are the brokers' batched form (KIP-890); a client sends 0-3.
    AddPartitionsToTxnRequest => |r: &m::AddPartitionsToTxnRequest| {
        let (target, _) = txn(&r.v3_and_below_transactional_id);
        (target, Some(3))
    };
    AddOffsetsToTxnRequest => |r: &m::AddOffsetsToTxnRequest| txn(&r.transactional_id);
    EndTxnRequest => |r: &m::EndTxnRequest| txn(&r.transactional_id);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit_protocol::Routing;

    #[test]
    fn broker_side_waits_extend_the_request_timeout() {
        let mut join = m::JoinGroupRequest::default();
        join.session_timeout_ms = 10_000;
        join.rebalance_timeout_ms = 300_000;
        assert_eq!(broker_wait(&join), Duration::from_secs(300));
        let mut create = m::CreateTopicsRequest::default();
        create.timeout_ms = 5_000;
        assert_eq!(broker_wait(&create), Duration::from_secs(5));
        create.timeout_ms = -1;
        assert_eq!(broker_wait(&create), Duration::ZERO);
        assert_eq!(broker_wait(&m::HeartbeatRequest::default()), Duration::ZERO);
    }

    /// The simple routes agree with each request's `Request::ROUTING`, except where the client
    /// knows better.
    #[test]
    fn routes_agree_with_the_schema_routing() {
        let table = simple_route_table();
        assert!(table.len() >= 40, "{}", table.len());
        for (api, routing, target) in table {
            let expected = match (api, routing) {
                // Sent on every connection at setup; as a routed request any broker answers.
                (ApiKey::ApiVersions, Routing::Connection) => "any",
                // Without a transactional id (the default) InitProducerId is for an idempotent
                // producer: any broker.
                (ApiKey::InitProducerId, _) => "any",
                // The Java admin client sends UpdateFeatures to the controller.
                (ApiKey::UpdateFeatures, Routing::AnyBroker) => "controller",
                (_, Routing::AnyBroker) => "any",
                (_, Routing::Controller) => "controller",
                (_, Routing::GroupCoordinator) => "group",
                (_, Routing::TransactionCoordinator) => "txn",
                other => panic!("unexpected simple route {other:?}"),
            };
            let got = match target {
                Target::Any => "any",
                Target::Controller => "controller",
                Target::Coordinator(CoordinatorType::Group, _) => "group",
                Target::Coordinator(CoordinatorType::Transaction, _) => "txn",
                Target::Coordinator(CoordinatorType::Share, _) => "share",
            };
            assert_eq!(got, expected, "{api:?}");
        }
    }
}
