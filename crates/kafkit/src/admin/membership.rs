//! Cluster membership: unregister a broker (UnregisterBroker, key 64, KIP-500) and change the
//! KRaft controller quorum (AddRaftVoter key 80, RemoveRaftVoter key 81, KIP-853). Each is sent
//! to any broker, which forwards it to the active controller.

use kafkit_protocol::Uuid;
use kafkit_protocol::messages::{
    AddRaftVoterRequest, AddRaftVoterResponse, RemoveRaftVoterRequest, RemoveRaftVoterResponse,
    UnregisterBrokerRequest, UnregisterBrokerResponse, add_raft_voter_request,
};

use super::Client;
use crate::error::{Error, Result};
use crate::ops::{check_distinct, code_result};

/// One endpoint of a controller joining the quorum (Java `RaftVoterEndpoint`): the
/// controller listener `name` (e.g. `CONTROLLER`) at `host`:`port`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RaftVoterEndpoint {
    /// The listener name.
    pub name: String,
    /// The host.
    pub host: String,
    /// The port.
    pub port: u16,
}

impl RaftVoterEndpoint {
    /// The endpoint `name` at `host`:`port`.
    pub fn new(name: impl Into<String>, host: impl Into<String>, port: u16) -> Self {
        RaftVoterEndpoint {
            name: name.into(),
            host: host.into(),
            port,
        }
    }
}

/// Builds the AddRaftVoter request; `timeout_ms` bounds how long the controller waits for the
/// new voter to catch up.
///
/// Errors: [`Error::InvalidArgument`] without endpoints or with a listener named twice.
pub(crate) fn add_raft_voter_request(
    voter_id: i32,
    voter_directory_id: Uuid,
    endpoints: &[RaftVoterEndpoint],
    cluster_id: Option<&str>,
    timeout_ms: i32,
) -> Result<AddRaftVoterRequest> {
    if endpoints.is_empty() {
        return Err(Error::InvalidArgument(
            "a voter needs at least one endpoint".into(),
        ));
    }
    let names: Vec<&str> = endpoints.iter().map(|e| e.name.as_str()).collect();
    check_distinct("listener", &names)?;
    Ok(AddRaftVoterRequest::default()
        .with_cluster_id(cluster_id.map(str::to_owned))
        .with_timeout_ms(timeout_ms)
        .with_voter_id(voter_id)
        .with_voter_directory_id(voter_directory_id)
        .with_listeners(
            endpoints
                .iter()
                .map(|e| {
                    add_raft_voter_request::Listener::default()
                        .with_name(e.name.clone())
                        .with_host(e.host.clone())
                        .with_port(e.port)
                })
                .collect(),
        ))
}

impl Client {
    /// Removes broker `broker_id`'s registration from the cluster metadata (UnregisterBroker,
    /// KIP-500; Java `Admin.unregisterBroker`): for a broker that was shut down for good, so
    /// its id no longer shows as a fenced broker. Sent to any broker, which forwards it to the
    /// controller.
    ///
    /// # Errors
    ///
    /// [`Error::Broker`] with the controller's code: `BROKER_ID_NOT_REGISTERED` for an id
    /// that is not registered, `CLUSTER_AUTHORIZATION_FAILED`...; [`Error::UnsupportedVersion`]
    /// for UnregisterBroker when the brokers do not offer it (ZooKeeper mode).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped future may have unregistered the broker.
    pub async fn unregister_broker(&self, broker_id: i32) -> Result<()> {
        let req = UnregisterBrokerRequest::default().with_broker_id(broker_id);
        let resp: UnregisterBrokerResponse = self
            .transport()
            .round_trip_within(req, self.timeout())
            .await?;
        code_result("UnregisterBroker", resp.error_code, resp.error_message)
    }

    /// Adds controller `voter_id` (its metadata log directory id `voter_directory_id`,
    /// reachable at `endpoints`) to the KRaft quorum's voters (AddRaftVoter, KIP-853; Java
    /// `Admin.addRaftVoter`). The controller answers once the new voter has caught up and the
    /// new voter set is committed, or after the client's timeout. `cluster_id`: the cluster the
    /// caller means (`None`: not checked).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] without endpoints or with a listener named twice;
    /// [`Error::Broker`] with the controller's code: `UNSUPPORTED_VERSION` when the quorum is
    /// static (`kraft.version` 0, `controller.quorum.voters`), `DUPLICATE_VOTER`,
    /// `INCONSISTENT_CLUSTER_ID`, `REQUEST_TIMED_OUT` (the voter did not catch up)...;
    /// [`Error::UnsupportedVersion`] for AddRaftVoter when the brokers do not offer it.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped future may have changed the quorum.
    pub async fn add_raft_voter(
        &self,
        voter_id: i32,
        voter_directory_id: Uuid,
        endpoints: &[RaftVoterEndpoint],
        cluster_id: Option<&str>,
    ) -> Result<()> {
        let req = add_raft_voter_request(
            voter_id,
            voter_directory_id,
            endpoints,
            cluster_id,
            self.timeout_ms(),
        )?;
        let resp: AddRaftVoterResponse = self
            .transport()
            .round_trip_within(req, self.timeout())
            .await?;
        code_result("AddRaftVoter", resp.error_code, resp.error_message)
    }

    /// Removes controller `voter_id` (metadata log directory id `voter_directory_id`) from the
    /// KRaft quorum's voters (RemoveRaftVoter, KIP-853; Java `Admin.removeRaftVoter`).
    /// `cluster_id`: the cluster the caller means (`None`: not checked).
    ///
    /// # Errors
    ///
    /// [`Error::Broker`] with the controller's code: `UNSUPPORTED_VERSION` when the quorum is
    /// static (`kraft.version` 0), `VOTER_NOT_FOUND`, `INCONSISTENT_CLUSTER_ID`...;
    /// [`Error::UnsupportedVersion`] for RemoveRaftVoter when the brokers do not offer it.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped future may have changed the quorum.
    pub async fn remove_raft_voter(
        &self,
        voter_id: i32,
        voter_directory_id: Uuid,
        cluster_id: Option<&str>,
    ) -> Result<()> {
        let req = RemoveRaftVoterRequest::default()
            .with_cluster_id(cluster_id.map(str::to_owned))
            .with_voter_id(voter_id)
            .with_voter_directory_id(voter_directory_id);
        let resp: RemoveRaftVoterResponse = self
            .transport()
            .round_trip_within(req, self.timeout())
            .await?;
        code_result("RemoveRaftVoter", resp.error_code, resp.error_message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit_protocol::Message;

    #[test]
    fn add_raft_voter_request_checks_and_encodes() {
        let dir = Uuid([7; 16]);
        let ep = [RaftVoterEndpoint::new("CONTROLLER", "h", 9093)];
        let req = add_raft_voter_request(4, dir, &ep, Some("c"), 5_000).expect("request");
        assert_eq!((req.voter_id, req.voter_directory_id), (4, dir));
        assert_eq!(req.listeners[0].port, 9093);
        assert_eq!(req.cluster_id.as_deref(), Some("c"));
        for v in AddRaftVoterRequest::VERSIONS.min..=AddRaftVoterRequest::VERSIONS.max {
            let mut buf = bytes::BytesMut::new();
            req.encode(&mut buf, v).expect("encodes");
        }
        assert!(matches!(
            add_raft_voter_request(4, dir, &[], None, 1),
            Err(Error::InvalidArgument(_))
        ));
        let twice = [ep[0].clone(), RaftVoterEndpoint::new("CONTROLLER", "g", 1)];
        assert!(matches!(
            add_raft_voter_request(4, dir, &twice, None, 1),
            Err(Error::InvalidArgument(_))
        ));
    }
}
