//! Acting on other producers' transactions: fence producers (InitProducerId per transactional
//! id at its transaction coordinator, KIP-618) and abort a hanging transaction (WriteTxnMarkers
//! to a partition's leader, the admin side of KIP-664).

use std::time::Duration;

use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
    write_txn_markers_request,
};
use tokio::task::JoinSet;

use super::Client;
use crate::error::{Error, Result};
use crate::ops::{ResourceResult, check_distinct, code_result, in_order, missing};

/// A producer id and epoch as a coordinator handed them out (Java `ProducerIdAndEpoch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ProducerIdAndEpoch {
    /// The producer id.
    pub producer_id: i64,
    /// The producer epoch.
    pub producer_epoch: i16,
}

/// The transaction to abort on one partition (Java `AbortTransactionSpec`): what
/// [`Client::describe_producers`] reports for the producer whose transaction hangs there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct AbortTransactionSpec {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The producer id of the open transaction ([`super::ProducerState::producer_id`]).
    pub producer_id: i64,
    /// The producer epoch of the open transaction ([`super::ProducerState::producer_epoch`]).
    pub producer_epoch: i16,
    /// The transaction coordinator's epoch written with the marker
    /// ([`super::ProducerState::coordinator_epoch`]; 0 when it reports none, as Kafka's
    /// `kafka-transactions.sh abort` does: no coordinator wrote a marker for this producer yet).
    pub coordinator_epoch: i32,
}

impl AbortTransactionSpec {
    /// The abort of `producer_id`/`producer_epoch`'s transaction on `topic`/`partition`, with
    /// `coordinator_epoch` (`None`: 0).
    pub fn new(
        topic: impl Into<String>,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: Option<i32>,
    ) -> Self {
        AbortTransactionSpec {
            topic: topic.into(),
            partition,
            producer_id,
            producer_epoch,
            coordinator_epoch: coordinator_epoch.unwrap_or(0).max(0),
        }
    }

    /// The abort of the transaction `state` has open on `topic`/`partition` (the answer of
    /// [`Client::describe_producers`] for that partition).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `state` shows no open transaction, or its epoch does
    /// not fit the protocol's 16 bits.
    pub fn from_producer_state(
        topic: impl Into<String>,
        partition: i32,
        state: &super::ProducerState,
    ) -> Result<Self> {
        let topic = topic.into();
        if state.current_transaction_start_offset.is_none() {
            return Err(Error::InvalidArgument(format!(
                "producer {} has no open transaction on {topic}/{partition}",
                state.producer_id
            )));
        }
        let epoch = i16::try_from(state.producer_epoch).map_err(|_| {
            Error::InvalidArgument(format!(
                "producer epoch {} out of range",
                state.producer_epoch
            ))
        })?;
        Ok(Self::new(
            topic,
            partition,
            state.producer_id,
            epoch,
            state.coordinator_epoch,
        ))
    }
}

/// The InitProducerId request that fences `transactional_id`: no producer id or epoch (as a
/// new producer's `initTransactions`), so the coordinator bumps the epoch and aborts an open
/// transaction.
pub(crate) fn fence_request(transactional_id: &str, timeout: Duration) -> InitProducerIdRequest {
    InitProducerIdRequest::default()
        .with_transactional_id(Some(transactional_id.to_owned()))
        .with_transaction_timeout_ms(crate::time::wire_ms(timeout))
        .with_producer_id(-1)
        .with_producer_epoch(-1)
}

/// Maps an InitProducerId answer: the new id and epoch, or the code
/// (`TRANSACTIONAL_ID_AUTHORIZATION_FAILED`, `CLUSTER_AUTHORIZATION_FAILED`...).
pub(crate) fn fence_result(resp: InitProducerIdResponse) -> ResourceResult<ProducerIdAndEpoch> {
    code_result("InitProducerId", resp.error_code, None)?;
    Ok(ProducerIdAndEpoch {
        producer_id: resp.producer_id,
        producer_epoch: resp.producer_epoch,
    })
}

/// The WriteTxnMarkers request that aborts `spec`'s transaction on its one partition. The
/// marker's `TransactionVersion` (v2+, KIP-1228) stays 0, as Java's admin client sends it: the
/// partition leader then accepts a marker whose epoch equals the producer's current one (a
/// transaction version 2 marker must carry a higher epoch, which only the coordinator knows).
pub(crate) fn abort_request(spec: &AbortTransactionSpec) -> WriteTxnMarkersRequest {
    let topic = write_txn_markers_request::WritableTxnMarkerTopic::default()
        .with_name(spec.topic.clone())
        .with_partition_indexes(vec![spec.partition]);
    let marker = write_txn_markers_request::WritableTxnMarker::default()
        .with_producer_id(spec.producer_id)
        .with_producer_epoch(spec.producer_epoch)
        .with_transaction_result(false)
        .with_topics(vec![topic])
        .with_coordinator_epoch(spec.coordinator_epoch);
    WriteTxnMarkersRequest::default().with_markers(vec![marker])
}

/// Maps a WriteTxnMarkers answer to `spec`'s partition: `Ok` when the abort marker was
/// written, else its code (`INVALID_PRODUCER_EPOCH`, `TRANSACTION_COORDINATOR_FENCED`,
/// `NOT_LEADER_OR_FOLLOWER`...); [`Error::Protocol`] when the answer is not about exactly that
/// producer and partition.
pub(crate) fn abort_result(
    spec: &AbortTransactionSpec,
    resp: WriteTxnMarkersResponse,
) -> ResourceResult<()> {
    let what = (spec.producer_id, spec.topic.as_str(), spec.partition);
    let [marker] =
        <[_; 1]>::try_from(resp.markers).map_err(|_| missing("WriteTxnMarkers", what))?;
    if marker.producer_id != spec.producer_id {
        return Err(missing("WriteTxnMarkers", what));
    }
    let [topic] =
        <[_; 1]>::try_from(marker.topics).map_err(|_| missing("WriteTxnMarkers", what))?;
    let [p] = <[_; 1]>::try_from(topic.partitions).map_err(|_| missing("WriteTxnMarkers", what))?;
    if topic.name != spec.topic || p.partition_index != spec.partition {
        return Err(missing("WriteTxnMarkers", what));
    }
    code_result("WriteTxnMarkers", p.error_code, None)
}

/// Whether a WriteTxnMarkers partition error means the leader moved (ask metadata again).
fn leader_moved(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NOT_LEADER_OR_FOLLOWER
            | ErrorCode::REPLICA_NOT_AVAILABLE
            | ErrorCode::BROKER_NOT_AVAILABLE
            | ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
            | ErrorCode::LEADER_NOT_AVAILABLE
    )
}

impl Client {
    /// Fences the producers of `transactional_ids` (Java `Admin.fenceProducers`, KIP-618): an
    /// InitProducerId with no producer id or epoch for each id at its transaction coordinator
    /// (FindCoordinator first; the ids concurrently), as a new producer of the id would. The
    /// coordinator bumps the epoch and aborts the id's open transaction; the producer that held
    /// the id gets `PRODUCER_FENCED` (or `INVALID_PRODUCER_EPOCH`) on its next call, a fatal
    /// error for a transactional [`crate::Writer`].
    ///
    /// `transaction_timeout` is the timeout the coordinator records with the new epoch (Java's
    /// `FenceProducersOptions.timeoutMs`, by default the request timeout); `None`: the client's
    /// [`Client::timeout`].
    ///
    /// Returns, per id in order, the producer id and the bumped epoch, or the id's error
    /// (`TRANSACTIONAL_ID_AUTHORIZATION_FAILED`, `CLUSTER_AUTHORIZATION_FAILED`, or a retriable
    /// code such as `CONCURRENT_TRANSACTIONS` that outlasted the client's timeout).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list, an empty id or an id given twice.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped future may have fenced some of the ids already.
    pub async fn fence_producers(
        &self,
        transactional_ids: &[&str],
        transaction_timeout: Option<Duration>,
    ) -> Result<Vec<(String, ResourceResult<ProducerIdAndEpoch>)>> {
        check_distinct("transactional id", transactional_ids)?;
        if transactional_ids.iter().any(|id| id.is_empty()) {
            return Err(Error::InvalidArgument("an empty transactional id".into()));
        }
        let timeout = transaction_timeout.unwrap_or(self.timeout());
        let mut tasks = JoinSet::new();
        for id in transactional_ids {
            let client = self.clone();
            let id = (*id).to_owned();
            tasks.spawn(async move {
                let resp = client
                    .transport()
                    .round_trip_within(fence_request(&id, timeout), client.timeout())
                    .await;
                (id, resp.and_then(fence_result))
            });
        }
        let mut answers = Vec::with_capacity(transactional_ids.len());
        while let Some(joined) = tasks.join_next().await {
            answers.push(
                joined.map_err(|e| Error::Protocol(format!("InitProducerId task failed: {e}")))?,
            );
        }
        let keys = transactional_ids.iter().map(|s| (*s).to_owned()).collect();
        Ok(in_order("InitProducerId", keys, answers))
    }

    /// Aborts a transaction left open on one partition (Java `Admin.abortTransaction`, the tool
    /// of KIP-664 for hanging transactions): writes an abort marker for `spec`'s producer id
    /// and epoch with WriteTxnMarkers, sent to the partition's leader (asking metadata again
    /// when the leader moved, within the client's timeout). The partition's last stable offset
    /// then moves past the transaction, and `read_committed` readers never see its records.
    /// Take `spec` from [`Client::describe_producers`]
    /// ([`AbortTransactionSpec::from_producer_state`]). The transaction coordinator is not
    /// told: use this only for a transaction no coordinator will complete.
    ///
    /// # Errors
    ///
    /// [`Error::Broker`] with the partition's code: `INVALID_PRODUCER_EPOCH` (the producer's
    /// epoch on the partition is newer than `spec`'s), `TRANSACTION_COORDINATOR_FENCED` (a
    /// newer coordinator epoch wrote there), `CLUSTER_AUTHORIZATION_FAILED`,
    /// `UNKNOWN_TOPIC_OR_PARTITION` or `NOT_LEADER_OR_FOLLOWER` when the client's timeout
    /// passed; [`Error::UnsupportedVersion`] for WriteTxnMarkers when the leader does not offer
    /// it to clients; [`Error::Protocol`] for an answer about another partition.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped future may have had the marker written.
    pub async fn abort_transaction(&self, spec: &AbortTransactionSpec) -> Result<()> {
        let deadline = tokio::time::Instant::now() + self.timeout();
        let req = abort_request(spec);
        loop {
            let attempt = async {
                let md = self
                    .transport()
                    .metadata_for(&[spec.topic.as_str()])
                    .await?;
                let leader = md.leader_of(&spec.topic, spec.partition)?;
                let resp = self.transport().round_trip_to(leader.node_id, &req).await?;
                abort_result(spec, resp)
            };
            let err = match attempt.await {
                Ok(()) => return Ok(()),
                Err(e) if e.error_code().is_some_and(leader_moved) => e,
                Err(e) => return Err(e),
            };
            if tokio::time::Instant::now() + Duration::from_millis(100) >= deadline {
                return Err(err);
            }
            self.transport().invalidate_metadata();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit_protocol::Message;
    use kafkit_protocol::messages::write_txn_markers_response;

    #[test]
    fn fence_request_names_no_producer() {
        let req = fence_request("tx", Duration::from_secs(5));
        assert_eq!(req.transactional_id.as_deref(), Some("tx"));
        assert_eq!((req.producer_id, req.producer_epoch), (-1, -1));
        assert_eq!(req.transaction_timeout_ms, 5_000);
        let huge = fence_request("tx", Duration::from_secs(u64::MAX / 4));
        assert_eq!(huge.transaction_timeout_ms, i32::MAX);
        let mut resp = InitProducerIdResponse::default();
        resp.producer_id = 9;
        resp.producer_epoch = 3;
        assert_eq!(
            fence_result(resp.clone()).expect("fenced"),
            ProducerIdAndEpoch {
                producer_id: 9,
                producer_epoch: 3
            }
        );
        resp.error_code = ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
        assert_eq!(
            fence_result(resp).unwrap_err().error_code(),
            Some(ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        );
    }

    fn answer(pid: i64, topic: &str, partition: i32, code: ErrorCode) -> WriteTxnMarkersResponse {
        let p = write_txn_markers_response::WritableTxnMarkerPartitionResult::default()
            .with_partition_index(partition)
            .with_error_code(code);
        let t = write_txn_markers_response::WritableTxnMarkerTopicResult::default()
            .with_name(topic.into())
            .with_partitions(vec![p]);
        let m = write_txn_markers_response::WritableTxnMarkerResult::default()
            .with_producer_id(pid)
            .with_topics(vec![t]);
        WriteTxnMarkersResponse::default().with_markers(vec![m])
    }

    #[test]
    fn abort_request_and_answers() {
        let spec = AbortTransactionSpec::new("t", 2, 7, 4, None);
        assert_eq!(spec.coordinator_epoch, 0);
        let req = abort_request(&spec);
        let m = &req.markers[0];
        assert_eq!((m.producer_id, m.producer_epoch), (7, 4));
        assert!(!m.transaction_result, "an abort");
        assert_eq!(m.coordinator_epoch, 0);
        assert_eq!(m.topics[0].name, "t");
        assert_eq!(m.topics[0].partition_indexes, [2]);
        assert_eq!(m.transaction_version, 0);
        for v in WriteTxnMarkersRequest::VERSIONS.min..=WriteTxnMarkersRequest::VERSIONS.max {
            let mut buf = bytes::BytesMut::new();
            req.encode(&mut buf, v).expect("encodes");
        }

        assert!(abort_result(&spec, answer(7, "t", 2, ErrorCode::NONE)).is_ok());
        assert_eq!(
            abort_result(&spec, answer(7, "t", 2, ErrorCode::INVALID_PRODUCER_EPOCH))
                .unwrap_err()
                .error_code(),
            Some(ErrorCode::INVALID_PRODUCER_EPOCH)
        );
        for wrong in [
            answer(8, "t", 2, ErrorCode::NONE),
            answer(7, "u", 2, ErrorCode::NONE),
        ] {
            assert!(matches!(
                abort_result(&spec, wrong),
                Err(Error::Protocol(_))
            ));
        }
        assert!(matches!(
            abort_result(&spec, WriteTxnMarkersResponse::default()),
            Err(Error::Protocol(_))
        ));
        assert!(leader_moved(ErrorCode::NOT_LEADER_OR_FOLLOWER));
        assert!(!leader_moved(ErrorCode::INVALID_PRODUCER_EPOCH));
    }

    #[test]
    fn abort_spec_from_a_producer_state() {
        let mut state = crate::admin::ProducerState {
            producer_id: 5,
            producer_epoch: 2,
            last_sequence: 0,
            last_timestamp: None,
            coordinator_epoch: Some(3),
            current_transaction_start_offset: Some(10),
        };
        let spec = AbortTransactionSpec::from_producer_state("t", 0, &state).expect("open");
        assert_eq!(
            (
                spec.producer_id,
                spec.producer_epoch,
                spec.coordinator_epoch
            ),
            (5, 2, 3)
        );
        state.producer_epoch = 70_000;
        assert!(AbortTransactionSpec::from_producer_state("t", 0, &state).is_err());
        state.producer_epoch = 2;
        state.current_transaction_start_offset = None;
        assert!(matches!(
            AbortTransactionSpec::from_producer_state("t", 0, &state),
            Err(Error::InvalidArgument(_))
        ));
    }
}
