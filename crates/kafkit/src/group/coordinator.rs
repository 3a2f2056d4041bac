//! The member's own connection to its group coordinator (Java's coordinator connection, node id
//! `Integer.MAX_VALUE - id`; librdkafka's `rkcg_coord`): found with FindCoordinator through the
//! transport's coordinator cache, dialled with `Transport::dial_unpooled`, never pooled.
//!
//! Why its own: a broker answers the requests of one connection in order, one at a time, and
//! holds a JoinGroup until the rebalance ends (up to the rebalance timeout). On a shared
//! connection that JoinGroup would hold up every Heartbeat, commit and Fetch behind it, of this
//! member and of every other member and Reader of the transport.

use std::time::Duration;

use kafkit_protocol::{ErrorCode, Request};

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::transport::{CoordinatorType, Transport};

/// The coordinator of one member's group and the member's connection to it.
pub(crate) struct Coordinator {
    transport: Transport,
    group_id: String,
    current: Option<(i32, Conn)>,
}

impl Coordinator {
    pub(crate) fn new(transport: Transport, group_id: String) -> Self {
        Coordinator {
            transport,
            group_id,
            current: None,
        }
    }

    /// The live connection to the coordinator, if there is one.
    pub(crate) fn connected(&self) -> Option<(i32, Conn)> {
        self.current
            .as_ref()
            .filter(|(_, c)| !c.is_closed())
            .map(|(n, c)| (*n, c.clone()))
    }

    /// A future finding the coordinator (one FindCoordinator through the transport's cache;
    /// the transport retries within its default API timeout) and dialling a connection of the
    /// member's own; hand its answer to [`Coordinator::set`].
    pub(crate) fn find(&self) -> impl Future<Output = Result<(i32, Conn)>> + Send + 'static {
        let transport = self.transport.clone();
        let group_id = self.group_id.clone();
        async move {
            let node = transport
                .coordinator(CoordinatorType::Group, &group_id)
                .await?;
            let conn = transport.dial_unpooled(node).await?;
            tracing::debug!(group = %group_id, node, "coordinator connection");
            Ok((node, conn))
        }
    }

    /// Keeps a connection found by [`Coordinator::find`].
    pub(crate) fn set(&mut self, node: i32, conn: Conn) {
        self.close();
        self.current = Some((node, conn));
    }

    /// Forgets the coordinator (after `NOT_COORDINATOR`, `COORDINATOR_NOT_AVAILABLE`, or a
    /// connection failure): the cached one is dropped and the connection closed, so the next
    /// [`Coordinator::find`] looks it up again.
    pub(crate) fn lost(&mut self) {
        self.transport
            .invalidate_coordinator(CoordinatorType::Group, &self.group_id);
        self.close();
    }

    /// Closes the connection (its request counts go to the transport).
    pub(crate) fn close(&mut self) {
        if let Some((node, conn)) = self.current.take() {
            conn.close();
            self.transport.retire_unpooled(node, &conn);
        }
    }

    /// A future sending `req` on `conn` (see [`send`]).
    pub(crate) fn send<R>(
        &self,
        node: i32,
        conn: Conn,
        req: R,
        extra_wait: Duration,
    ) -> impl Future<Output = Result<(i16, R::Response)>> + Send + 'static
    where
        R: Request + Send + Sync + 'static,
        R::Response: Send,
    {
        send(self.transport.clone(), node, conn, req, extra_wait)
    }

    /// A future sending `req` on `conn` at `version` (chosen by the caller, e.g. capped below
    /// the topic-id versions when a topic's id is unknown).
    pub(crate) fn send_at<R>(
        &self,
        node: i32,
        conn: Conn,
        req: R,
        version: i16,
    ) -> impl Future<Output = Result<(i16, R::Response)>> + Send + 'static
    where
        R: Request + Send + Sync + 'static,
        R::Response: Send,
    {
        let transport = self.transport.clone();
        async move {
            let resp = transport
                .request_on(node, &conn, &req, version, Duration::ZERO)
                .await?;
            Ok((version, resp))
        }
    }

    /// The transport.
    pub(crate) fn transport(&self) -> &Transport {
        &self.transport
    }
}

/// A future sending `req` on `conn` (to `node`) at the highest common version. `extra_wait`
/// is the broker-side wait (a JoinGroup's rebalance timeout). It owns everything it needs, so
/// the member's loop can await it alongside its other work.
pub(crate) async fn send<R>(
    transport: Transport,
    node: i32,
    conn: Conn,
    req: R,
    extra_wait: Duration,
) -> Result<(i16, R::Response)>
where
    R: Request + Send + Sync + 'static,
    R::Response: Send,
{
    let version = preferred_version::<R>(&conn)?;
    let resp = transport
        .request_on(node, &conn, &req, version, extra_wait)
        .await?;
    Ok((version, resp))
}

/// The version a member sends `R` at. For the classic group requests: the highest common
/// version up to the one librdkafka sends (JoinGroup v5, SyncGroup v3, Heartbeat v3,
/// LeaveGroup v2: the newest without flexible encoding), else the highest common one. Those
/// versions carry everything the member uses but KIP-814's `skip_assignment` (JoinGroup v9)
/// and KIP-800's reasons, every broker since Kafka 2.4 accepts them, and librdkafka's mock
/// cluster, which advertises the flexible versions but parses only the older shapes
/// (`rdkafka_mock_handlers.c` reads their arrays with 32-bit counts and LeaveGroup as v0-2),
/// answers them. Every other request: the highest common version.
///
/// Errors: [`Error::UnsupportedVersion`] when there is no common version.
pub(crate) fn preferred_version<R: Request>(conn: &Conn) -> Result<i16> {
    use kafkit_protocol::ApiKey;
    let prefer = match R::API_KEY {
        ApiKey::JoinGroup => Some(5),
        ApiKey::SyncGroup | ApiKey::Heartbeat => Some(3),
        ApiKey::LeaveGroup => Some(2),
        _ => None,
    };
    match prefer {
        Some(cap) => conn
            .version_for::<R>(Some(cap))
            .or_else(|_| conn.version_for::<R>(None)),
        None => conn.version_for::<R>(None),
    }
}

/// What a group error code asks of the member (Java `AbstractCoordinator`'s handlers,
/// librdkafka `rd_kafka_cgrp_handle_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// `NONE`.
    Ok,
    /// Find the coordinator again (`NOT_COORDINATOR`, `COORDINATOR_NOT_AVAILABLE`).
    Relocate,
    /// Try again after a backoff (`COORDINATOR_LOAD_IN_PROGRESS`, `REQUEST_TIMED_OUT`,
    /// `NETWORK_EXCEPTION`, other retriable codes).
    Retry,
    /// Rejoin the group keeping the member id (`REBALANCE_IN_PROGRESS`).
    Rejoin,
    /// The generation is gone: partitions are lost; rejoin (`ILLEGAL_GENERATION`,
    /// `FENCED_MEMBER_EPOCH`).
    Reset,
    /// The member id is gone: partitions are lost; rejoin with a new id
    /// (`UNKNOWN_MEMBER_ID`).
    ResetMemberId,
    /// Static member fenced (`FENCED_INSTANCE_ID`): stop.
    Fenced,
    /// Anything else: stop with a typed error.
    Fatal,
}

/// The [`Verdict`] of a group error code.
pub(crate) fn verdict(code: ErrorCode) -> Verdict {
    match code {
        ErrorCode::NONE => Verdict::Ok,
        ErrorCode::NOT_COORDINATOR | ErrorCode::COORDINATOR_NOT_AVAILABLE => Verdict::Relocate,
        ErrorCode::REBALANCE_IN_PROGRESS => Verdict::Rejoin,
        ErrorCode::ILLEGAL_GENERATION | ErrorCode::FENCED_MEMBER_EPOCH => Verdict::Reset,
        ErrorCode::UNKNOWN_MEMBER_ID => Verdict::ResetMemberId,
        ErrorCode::FENCED_INSTANCE_ID => Verdict::Fenced,
        c if c.is_retriable() => Verdict::Retry,
        _ => Verdict::Fatal,
    }
}

/// What a failed request (no answer) asks of the member: a connection failure or timeout
/// relocates (the coordinator may have moved or died), anything else is fatal.
pub(crate) fn failure_verdict(e: &Error) -> Verdict {
    match e {
        Error::Broker { code, .. } => verdict(*code),
        e if e.is_retriable() => Verdict::Relocate,
        _ => Verdict::Fatal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_what_java_does() {
        assert_eq!(verdict(ErrorCode::NOT_COORDINATOR), Verdict::Relocate);
        assert_eq!(
            verdict(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS),
            Verdict::Retry
        );
        assert_eq!(verdict(ErrorCode::REBALANCE_IN_PROGRESS), Verdict::Rejoin);
        assert_eq!(verdict(ErrorCode::ILLEGAL_GENERATION), Verdict::Reset);
        assert_eq!(
            verdict(ErrorCode::UNKNOWN_MEMBER_ID),
            Verdict::ResetMemberId
        );
        assert_eq!(verdict(ErrorCode::FENCED_INSTANCE_ID), Verdict::Fenced);
        assert_eq!(
            verdict(ErrorCode::GROUP_AUTHORIZATION_FAILED),
            Verdict::Fatal
        );
        assert_eq!(
            verdict(ErrorCode::INCONSISTENT_GROUP_PROTOCOL),
            Verdict::Fatal
        );
    }
}
