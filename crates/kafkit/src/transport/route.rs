//! The [`Routed`] trait and the simple routes: any broker, the controller, the group or
//! transaction coordinator of the id a request carries. Split routes (one request per broker,
//! merged back) live in `split*.rs`.

use std::time::Duration;

use kafkit_protocol::messages as m;
use kafkit_protocol::{ErrorCode, Request};

use super::meta::{self, no_items};
use super::{CoordinatorType, Transport};
use crate::error::Result;

/// Where a simple route sends its request.
#[derive(Debug, Clone)]
pub(crate) enum Route {
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
///   DescribeTopicPartitions, ListConfigResources, Add/RemoveRaftVoter, UnregisterBroker;
/// - the controller (any broker when it is unknown; KRaft brokers forward, KIP-590):
///   CreateTopics, DeleteTopics, CreatePartitions, CreateAcls, ElectLeaders,
///   AlterPartitionReassignments, ListPartitionReassignments, UpdateFeatures;
/// - the group coordinator of the request's `group_id`: JoinGroup, SyncGroup, Heartbeat,
///   LeaveGroup, OffsetCommit, TxnOffsetCommit, OffsetDelete, ConsumerGroupHeartbeat,
///   ShareGroupHeartbeat, Describe/Alter/DeleteShareGroupOffsets (DescribeShareGroupOffsets:
///   its first group's coordinator; the admin client asks for one group at a time);
/// - the transaction coordinator of the request's `transactional_id` (KIP-98): InitProducerId
///   with a transactional id, AddPartitionsToTxn (client versions 0-3), AddOffsetsToTxn,
///   EndTxn;
/// - split across brokers and merged (partition leaders, broker resources, several
///   coordinators): see the `split` routes (Produce, ListOffsets, DeleteRecords,
///   OffsetForLeaderEpoch, DescribeProducers, DescribeConfigs, ListGroups, DescribeGroups,
///   ConsumerGroupDescribe, ShareGroupDescribe, StreamsGroupDescribe, OffsetFetch...).
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

/// The first expression, or the second when it is given (the optional parts of a route).
macro_rules! given_or {
    ($default:expr) => {
        $default
    };
    ($default:expr, $given:expr) => {
        $given
    };
}

/// Implements [`Routed`] for simple routes: `Type => target_fn` where `target_fn(&req)`
/// returns the [`Route`] and the optional version cap; then, optionally, `wait = f` (how long
/// the broker may hold the request, when it is not the request's `timeout_ms`) and `items = f`
/// (the per-item error that applies to the whole request, see [`meta::whole_error`]).
macro_rules! simple_routes {
    ($($ty:ident => $target:expr $(, wait = $wait:expr)? $(, items = $items:expr)?;)*) => {
        $(
            impl sealed::Sealed for m::$ty {}
            impl Routed for m::$ty {
                async fn route(t: &Transport, req: Self, timeout_ms: u64) -> Result<Self::Response> {
                    #[allow(clippy::redundant_closure_call)]
                    let (target, max_version): (Route, Option<i16>) = ($target)(&req);
                    let wait: fn(&Self) -> Duration = given_or!(broker_wait $(, $wait)?);
                    let items: fn(&Self::Response) -> Option<ErrorCode> =
                        given_or!(no_items $(, $items)?);
                    let opts = SendOptions { max_version, extra_wait: wait(&req) };
                    t.route_simple(&req, target, opts, items, timeout_ms).await
                }
            }
        )*

        /// Every simple route: (API, the schema's routing, where a default request goes).
        #[cfg(test)]
        fn simple_route_table() -> Vec<(kafkit_protocol::ApiKey, kafkit_protocol::Routing, Route)> {
            vec![$({
                #[allow(clippy::redundant_closure_call)]
                let (target, _) = ($target)(&m::$ty::default());
                (<m::$ty as Request>::API_KEY, <m::$ty as Request>::ROUTING, target)
            }),*]
        }
    };
}

/// A wait in ms from a request field as a [`Duration`]; none for negative values (`-1`: the
/// broker's default).
fn wait_ms(ms: i32) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// How long the broker may hold `req` before it answers, added to the request timeout of the
/// connection: the request's `timeout_ms` where the schema has one (controller operations,
/// DeleteRecords...), else nothing.
fn broker_wait<R: Request>(req: &R) -> Duration {
    req.timeout_ms().map_or(Duration::ZERO, wait_ms)
}

/// A JoinGroup waits for the rebalance: its `rebalance_timeout_ms`, or `session_timeout_ms` at
/// v0 (which has no rebalance timeout).
fn join_group_wait(r: &m::JoinGroupRequest) -> Duration {
    wait_ms(r.rebalance_timeout_ms.max(r.session_timeout_ms))
}

fn any<R>(_: &R) -> (Route, Option<i16>) {
    (Route::Any, None)
}

fn controller<R>(_: &R) -> (Route, Option<i16>) {
    (Route::Controller, None)
}

/// An OffsetCommit goes to the group's coordinator; from v10 it names topics by id only
/// (KIP-848), so a request with a topic whose id is not filled in goes at v9 at most (Java's
/// `OffsetCommitRequest.Builder.forTopicNames`, which its admin client uses).
fn offset_commit_target(r: &m::OffsetCommitRequest) -> (Route, Option<i16>) {
    let (target, _) = group(&r.group_id);
    let by_name = r.topics.iter().any(|t| t.topic_id.is_zero());
    (target, by_name.then_some(9))
}

fn group(id: &str) -> (Route, Option<i16>) {
    (
        Route::Coordinator(CoordinatorType::Group, id.to_owned()),
        None,
    )
}

fn txn(id: &str) -> (Route, Option<i16>) {
    (
        Route::Coordinator(CoordinatorType::Transaction, id.to_owned()),
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
    ListConfigResourcesRequest => any;
    AddRaftVoterRequest => any;
    RemoveRaftVoterRequest => any;
    UnregisterBrokerRequest => any;
    // KIP-714 client metrics (crate::telemetry).
    GetTelemetrySubscriptionsRequest => any;
    PushTelemetryRequest => any;
    // The controller.
    CreateTopicsRequest => controller, items = meta::create_topics_items;
    DeleteTopicsRequest => controller, items = meta::delete_topics_items;
    CreatePartitionsRequest => controller, items = meta::create_partitions_items;
    CreateAclsRequest => controller, items = meta::create_acls_items;
    ElectLeadersRequest => controller;
    AlterPartitionReassignmentsRequest => controller;
    ListPartitionReassignmentsRequest => controller;
    UpdateFeaturesRequest => controller;
    // The group coordinator.
    JoinGroupRequest => |r: &m::JoinGroupRequest| group(&r.group_id), wait = join_group_wait;
    SyncGroupRequest => |r: &m::SyncGroupRequest| group(&r.group_id);
    HeartbeatRequest => |r: &m::HeartbeatRequest| group(&r.group_id);
    LeaveGroupRequest => |r: &m::LeaveGroupRequest| group(&r.group_id);
    OffsetCommitRequest => offset_commit_target, items = meta::offset_commit_items;
    TxnOffsetCommitRequest => |r: &m::TxnOffsetCommitRequest| group(&r.group_id),
        items = meta::txn_offset_commit_items;
    OffsetDeleteRequest => |r: &m::OffsetDeleteRequest| group(&r.group_id);
    ConsumerGroupHeartbeatRequest => |r: &m::ConsumerGroupHeartbeatRequest| group(&r.group_id);
    ShareGroupHeartbeatRequest => |r: &m::ShareGroupHeartbeatRequest| group(&r.group_id);
    DescribeShareGroupOffsetsRequest => |r: &m::DescribeShareGroupOffsetsRequest| {
        group(r.groups.first().map_or("", |g| g.group_id.as_str()))
    };
    AlterShareGroupOffsetsRequest => |r: &m::AlterShareGroupOffsetsRequest| group(&r.group_id);
    DeleteShareGroupOffsetsRequest => |r: &m::DeleteShareGroupOffsetsRequest| group(&r.group_id);
    // The transaction coordinator.
    InitProducerIdRequest => |r: &m::InitProducerIdRequest| match r.transactional_id.as_deref() {
        Some(id) if !id.is_empty() => txn(id),
        _ => (Route::Any, None),
    };
    // Versions 4+ are the brokers' batched form (KIP-890); a client sends 0-3.
    AddPartitionsToTxnRequest => |r: &m::AddPartitionsToTxnRequest| {
        let (target, _) = txn(&r.v3_and_below_transactional_id);
        (target, Some(3))
    }, items = meta::add_partitions_to_txn_items;
    AddOffsetsToTxnRequest => |r: &m::AddOffsetsToTxnRequest| txn(&r.transactional_id);
    EndTxnRequest => |r: &m::EndTxnRequest| txn(&r.transactional_id);
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit_protocol::{ApiKey, Routing};

    /// An OffsetCommit with a topic lacking its id (the admin client's) stays at v9;
    /// one with every id (a group member's) may go at v10.
    #[test]
    fn offset_commit_goes_at_v10_only_with_every_topic_id() {
        use m::offset_commit_request::OffsetCommitRequestTopic;
        let named = OffsetCommitRequestTopic::default().with_name("t".into());
        let with_id = named.clone().with_topic_id(kafkit_protocol::Uuid([3; 16]));
        let req = |topics| m::OffsetCommitRequest::default().with_topics(topics);
        assert_eq!(offset_commit_target(&req(vec![named.clone()])).1, Some(9));
        assert_eq!(
            offset_commit_target(&req(vec![with_id.clone(), named])).1,
            Some(9)
        );
        assert_eq!(offset_commit_target(&req(vec![with_id])).1, None);
    }

    #[test]
    fn broker_side_waits_extend_the_request_timeout() {
        let join = m::JoinGroupRequest::default()
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(300_000);
        assert_eq!(join_group_wait(&join), Duration::from_secs(300));
        // v0: no rebalance timeout (-1), the session timeout bounds the wait.
        let join_v0 = m::JoinGroupRequest::default().with_session_timeout_ms(10_000);
        assert_eq!(join_group_wait(&join_v0), Duration::from_secs(10));
        let create = m::CreateTopicsRequest::default().with_timeout_ms(5_000);
        assert_eq!(broker_wait(&create), Duration::from_secs(5));
        assert_eq!(broker_wait(&create.with_timeout_ms(-1)), Duration::ZERO);
        let list = m::ListPartitionReassignmentsRequest::default().with_timeout_ms(2_000);
        assert_eq!(broker_wait(&list), Duration::from_secs(2));
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
                Route::Any => "any",
                Route::Controller => "controller",
                Route::Coordinator(CoordinatorType::Group, _) => "group",
                Route::Coordinator(CoordinatorType::Transaction, _) => "txn",
                Route::Coordinator(CoordinatorType::Share, _) => "share",
            };
            assert_eq!(got, expected, "{api:?}");
        }
    }
}
