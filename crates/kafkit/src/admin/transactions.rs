//! Transactions: DescribeTransactions (key 65, by transaction coordinator) and
//! ListTransactions (key 66, every broker), both from KIP-664.

use std::collections::HashMap;
use std::time::Duration;

use kafkit_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ListTransactionsRequest,
    ListTransactionsResponse,
};

use super::Client;
use super::groups::to_every_broker;
use crate::error::{Error, Result};
use crate::ops::{ResourceResult, check_distinct, code_result, missing, unsupported_from};
use crate::transport::CoordinatorType;

/// The state of a transactional producer at its coordinator (Java `TransactionState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransactionState {
    /// A state this library does not know.
    Unknown,
    /// No transaction open (`Empty`).
    Empty,
    /// A transaction is open (`Ongoing`).
    Ongoing,
    /// Commit requested, markers being written (`PrepareCommit`).
    PrepareCommit,
    /// Abort requested, markers being written (`PrepareAbort`).
    PrepareAbort,
    /// The last transaction committed (`CompleteCommit`).
    CompleteCommit,
    /// The last transaction aborted (`CompleteAbort`).
    CompleteAbort,
    /// The transactional id expired (`Dead`).
    Dead,
    /// A newer producer fenced this one; its transaction is being aborted (`PrepareEpochFence`).
    PrepareEpochFence,
}

impl TransactionState {
    const ALL: [TransactionState; 8] = [
        TransactionState::Empty,
        TransactionState::Ongoing,
        TransactionState::PrepareCommit,
        TransactionState::PrepareAbort,
        TransactionState::CompleteCommit,
        TransactionState::CompleteAbort,
        TransactionState::Dead,
        TransactionState::PrepareEpochFence,
    ];

    /// Parses a coordinator's state name (case-insensitive); unknown names give
    /// [`TransactionState::Unknown`].
    pub fn parse(name: &str) -> TransactionState {
        Self::ALL
            .into_iter()
            .find(|s| s.as_str().eq_ignore_ascii_case(name))
            .unwrap_or(TransactionState::Unknown)
    }

    /// The name used on the wire (e.g. `"Ongoing"`).
    pub fn as_str(self) -> &'static str {
        match self {
            TransactionState::Unknown => "Unknown",
            TransactionState::Empty => "Empty",
            TransactionState::Ongoing => "Ongoing",
            TransactionState::PrepareCommit => "PrepareCommit",
            TransactionState::PrepareAbort => "PrepareAbort",
            TransactionState::CompleteCommit => "CompleteCommit",
            TransactionState::CompleteAbort => "CompleteAbort",
            TransactionState::Dead => "Dead",
            TransactionState::PrepareEpochFence => "PrepareEpochFence",
        }
    }
}

impl std::fmt::Display for TransactionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A transactional id as its coordinator describes it (Java `TransactionDescription`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransactionDescription {
    /// The transactional id.
    pub transactional_id: String,
    /// The transaction coordinator that answered (broker id; -1 when no longer known).
    pub coordinator: i32,
    /// The transaction state.
    pub state: TransactionState,
    /// The transaction timeout (Java `transaction.timeout.ms`).
    pub transaction_timeout: Duration,
    /// When the open transaction started (ms since the epoch); `None` when none is open.
    pub transaction_start_time_ms: Option<i64>,
    /// The producer id.
    pub producer_id: i64,
    /// The producer epoch.
    pub producer_epoch: i16,
    /// The partitions in the open transaction, as `(topic, partition)`.
    pub topic_partitions: Vec<(String, i32)>,
}

/// Builds a DescribeTransactions request for `ids`.
pub(crate) fn describe_transactions_request(ids: &[&str]) -> DescribeTransactionsRequest {
    DescribeTransactionsRequest::default()
        .with_transactional_ids(ids.iter().map(|s| (*s).to_owned()).collect())
}

/// Maps a DescribeTransactions answer to one result per id, in order (coordinator unset): the description, or its error (`TRANSACTIONAL_ID_NOT_FOUND`,
/// `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`, `COORDINATOR_NOT_AVAILABLE`...).
pub(crate) fn describe_transactions_results(
    ids: &[&str],
    resp: DescribeTransactionsResponse,
) -> Vec<(String, ResourceResult<TransactionDescription>)> {
    let mut answered: HashMap<String, ResourceResult<TransactionDescription>> = resp
        .transaction_states
        .into_iter()
        .map(|s| {
            let id = s.transactional_id;
            let d = code_result("DescribeTransactions", s.error_code, None).map(|()| {
                TransactionDescription {
                    transactional_id: id.clone(),
                    coordinator: -1,
                    state: TransactionState::parse(&s.transaction_state),
                    transaction_timeout: Duration::from_millis(
                        u64::try_from(s.transaction_timeout_ms).unwrap_or(0),
                    ),
                    transaction_start_time_ms: (s.transaction_start_time_ms >= 0)
                        .then_some(s.transaction_start_time_ms),
                    producer_id: s.producer_id,
                    producer_epoch: s.producer_epoch,
                    topic_partitions: s
                        .topics
                        .into_iter()
                        .flat_map(|t| {
                            let topic = t.topic;
                            t.partitions.into_iter().map(move |p| (topic.clone(), p))
                        })
                        .collect(),
                }
            });
            (id, d)
        })
        .collect();
    ids.iter()
        .map(|&id| {
            let r = answered
                .remove(id)
                .unwrap_or_else(|| Err(missing("DescribeTransactions", id)));
            (id.to_owned(), r)
        })
        .collect()
}

/// Filters for [`Client::list_transactions`] (Java `ListTransactionsOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListTransactionsOptions {
    /// Only transactions in one of these states (empty: any).
    pub states: Vec<TransactionState>,
    /// Only these producer ids (empty: any).
    pub producer_ids: Vec<i64>,
    /// Only transactions running longer than this (KIP-994, ListTransactions v1+; sent in whole
    /// milliseconds); `None`: no duration filter.
    pub longer_than: Option<Duration>,
    /// Only transactional ids that match this regular expression (Java regex syntax, matched
    /// by the coordinator; KIP-1152, ListTransactions v2+); `None`: any id.
    pub transactional_id_pattern: Option<String>,
}

impl ListTransactionsOptions {
    /// No filter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps only transactions in one of `states`.
    pub fn in_states(mut self, states: impl IntoIterator<Item = TransactionState>) -> Self {
        self.states = states.into_iter().collect();
        self
    }

    /// Keeps only the given producer ids.
    pub fn producer_ids(mut self, ids: impl IntoIterator<Item = i64>) -> Self {
        self.producer_ids = ids.into_iter().collect();
        self
    }

    /// Keeps only transactions open for longer than `duration` (Java
    /// `ListTransactionsOptions.filterOnDuration`; needs ListTransactions v1, KIP-994).
    pub fn longer_than(mut self, duration: Duration) -> Self {
        self.longer_than = Some(duration);
        self
    }

    /// Keeps only transactional ids matching the regular expression `pattern` (Java
    /// `ListTransactionsOptions.filterOnTransactionalIdPattern`; needs ListTransactions v2,
    /// KIP-1152). An empty pattern is no filter, as in Java.
    pub fn transactional_id_pattern(mut self, pattern: impl Into<String>) -> Self {
        self.transactional_id_pattern = Some(pattern.into()).filter(|p| !p.is_empty());
        self
    }
}

/// One transactional id as a broker listed it (Java `TransactionListing`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransactionListing {
    /// The transactional id.
    pub transactional_id: String,
    /// Its producer id.
    pub producer_id: i64,
    /// Its state.
    pub state: TransactionState,
    /// The broker that listed it: its transaction coordinator.
    pub coordinator: i32,
}

/// The answer of [`Client::list_transactions`].
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct ListTransactionsResult {
    /// Every transactional id the reachable brokers listed.
    pub transactions: Vec<TransactionListing>,
    /// State filters some broker did not know (ListTransactions `UnknownStateFilters`).
    pub unknown_state_filters: Vec<String>,
    /// `(broker id, why)` for each broker that could not list its transactions.
    pub errors: Vec<(i32, Error)>,
}

/// Builds a ListTransactions request for `options` at `version`.
///
/// Errors: [`Error::UnsupportedVersion`] for ListTransactions when a duration filter is set
/// below v1, or a transactional id pattern below v2.
pub(crate) fn list_transactions_request(
    options: &ListTransactionsOptions,
    version: i16,
) -> Result<ListTransactionsRequest> {
    if options.longer_than.is_some() && version < 1 {
        return Err(unsupported_from::<ListTransactionsRequest>(1, version));
    }
    if options.transactional_id_pattern.is_some() && version < 2 {
        return Err(unsupported_from::<ListTransactionsRequest>(2, version));
    }
    let mut req = ListTransactionsRequest::default()
        .with_state_filters(
            options
                .states
                .iter()
                .map(|s| s.as_str().to_owned())
                .collect(),
        )
        .with_producer_id_filters(options.producer_ids.clone())
        .with_transactional_id_pattern(options.transactional_id_pattern.clone());
    if let Some(d) = options.longer_than {
        req.duration_filter = crate::time::wire_ms_i64(d);
    }
    Ok(req)
}

/// Maps one broker's ListTransactions answer; its top-level error fails that broker.
pub(crate) fn list_transactions_results(
    broker: i32,
    resp: ListTransactionsResponse,
) -> Result<(Vec<TransactionListing>, Vec<String>)> {
    let code = resp.error_code;
    if !code.is_ok() {
        return Err(Error::broker("ListTransactions", code, None));
    }
    Ok((
        resp.transaction_states
            .into_iter()
            .map(|s| TransactionListing {
                transactional_id: s.transactional_id,
                producer_id: s.producer_id,
                state: TransactionState::parse(&s.transaction_state),
                coordinator: broker,
            })
            .collect(),
        resp.unknown_state_filters,
    ))
}

impl Client {
    /// Describes transactional ids (DescribeTransactions, KIP-664), each at its transaction
    /// coordinator (one request per coordinator, the transport's split route).
    ///
    /// Returns one result per id, in order (`TRANSACTIONAL_ID_NOT_FOUND`...).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty list or an id given twice;
    /// [`Error::UnsupportedVersion`] for DescribeTransactions when the brokers do not offer it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn describe_transactions(
        &self,
        transactional_ids: &[&str],
    ) -> Result<Vec<(String, ResourceResult<TransactionDescription>)>> {
        check_distinct("transactional id", transactional_ids)?;
        let resp = self
            .transport()
            .round_trip(describe_transactions_request(transactional_ids))
            .await?;
        let mut out = describe_transactions_results(transactional_ids, resp);
        // The split route does not say who answered; the coordinator cache does.
        for (id, r) in &mut out {
            if let Ok(d) = r {
                d.coordinator = self
                    .transport()
                    .cached_coordinator(CoordinatorType::Transaction, id)
                    .unwrap_or(-1);
            }
        }
        Ok(out)
    }

    /// Lists the transactional ids of every broker (ListTransactions, KIP-664), filtered by
    /// state, producer id and (KIP-994, v1+) duration; each broker lists those it coordinates.
    ///
    /// Returns the listings and, in [`ListTransactionsResult::errors`], each broker that could
    /// not answer (e.g. [`Error::UnsupportedVersion`] for ListTransactions).
    ///
    /// # Errors
    ///
    /// Only when no broker answered at all (the first broker's error) or there is no
    /// metadata.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read ([the `Client`'s cancel safety](crate::admin::Client#cancel-safety)).
    pub async fn list_transactions(
        &self,
        options: &ListTransactionsOptions,
    ) -> Result<ListTransactionsResult> {
        let options = options.clone();
        let answers = to_every_broker(self.transport(), move |v| {
            list_transactions_request(&options, v)
        })
        .await?;
        let mut out = ListTransactionsResult::default();
        let mut answered = false;
        for (node, r) in answers {
            match r.and_then(|(_, resp)| {
                answered = true;
                list_transactions_results(node, resp)
            }) {
                Ok((list, unknown)) => {
                    out.transactions.extend(list);
                    for u in unknown {
                        if !out.unknown_state_filters.contains(&u) {
                            out.unknown_state_filters.push(u);
                        }
                    }
                }
                Err(e) => out.errors.push((node, e)),
            }
        }
        if !answered && !out.errors.is_empty() {
            return Err(out.errors.swap_remove(0).1);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit_protocol::messages::{describe_transactions_response, list_transactions_response};
    use kafkit_protocol::{ApiKey, ErrorCode, Message};

    #[test]
    fn transaction_state_names_round_trip() {
        for s in TransactionState::ALL {
            assert_eq!(TransactionState::parse(s.as_str()), s);
        }
        assert_eq!(TransactionState::parse("Frozen"), TransactionState::Unknown);
    }

    #[test]
    fn describe_transactions_maps_in_order() {
        let req = describe_transactions_request(&["a", "b"]);
        assert_eq!(req.transactional_ids, ["a", "b"]);
        let mut resp = DescribeTransactionsResponse::default();
        let mut s = describe_transactions_response::TransactionState::default();
        s.transactional_id = "b".into();
        s.transaction_state = "Ongoing".into();
        s.transaction_start_time_ms = 5;
        s.transaction_timeout_ms = 60_000;
        s.producer_id = 9;
        let mut t = describe_transactions_response::TopicData::default();
        t.topic = "x".into();
        t.partitions = vec![0, 2];
        s.topics.push(t);
        resp.transaction_states.push(s);
        let mut s = describe_transactions_response::TransactionState::default();
        s.transactional_id = "a".into();
        s.error_code = ErrorCode::TRANSACTIONAL_ID_NOT_FOUND;
        resp.transaction_states.push(s);
        let got = describe_transactions_results(&["a", "b", "c"], resp);
        assert_eq!(
            got[0].1.as_ref().err().and_then(Error::error_code),
            Some(ErrorCode::TRANSACTIONAL_ID_NOT_FOUND)
        );
        let b = got[1].1.as_ref().expect("b described");
        assert_eq!(b.state, TransactionState::Ongoing);
        assert_eq!(b.transaction_timeout, Duration::from_secs(60));
        assert_eq!(b.transaction_start_time_ms, Some(5));
        assert_eq!(
            b.topic_partitions,
            [("x".to_owned(), 0), ("x".to_owned(), 2)]
        );
        assert!(matches!(got[2].1, Err(Error::Protocol(_))));
    }

    #[test]
    fn list_transactions_filters_and_versions() {
        let opts = ListTransactionsOptions::new()
            .in_states([TransactionState::Ongoing])
            .producer_ids([4]);
        let req = list_transactions_request(&opts, 0).expect("v0");
        assert_eq!(req.state_filters, ["Ongoing"]);
        assert_eq!(req.duration_filter, -1);
        let mut buf = bytes::BytesMut::new();
        req.encode(&mut buf, 0).expect("encodes at v0");
        let long = opts.longer_than(Duration::from_secs(60));
        match list_transactions_request(&long, 0) {
            Err(Error::UnsupportedVersion { api, .. }) => assert_eq!(api, ApiKey::ListTransactions),
            other => panic!("duration filter needs v1: {other:?}"),
        }
        assert_eq!(
            list_transactions_request(&long, 1)
                .expect("v1")
                .duration_filter,
            60_000
        );
        let pattern = ListTransactionsOptions::new().transactional_id_pattern("^app-.*");
        match list_transactions_request(&pattern, 1) {
            Err(Error::UnsupportedVersion { api, ours, .. }) => {
                assert_eq!(api, ApiKey::ListTransactions);
                assert_eq!(ours.min, 2);
            }
            other => panic!("a pattern needs v2: {other:?}"),
        }
        let req = list_transactions_request(&pattern, 2).expect("v2");
        assert_eq!(req.transactional_id_pattern.as_deref(), Some("^app-.*"));
        req.encode(&mut buf, 2).expect("encodes at v2");
        let empty = ListTransactionsOptions::new().transactional_id_pattern("");
        assert_eq!(empty.transactional_id_pattern, None);

        let mut resp = ListTransactionsResponse::default();
        let mut s = list_transactions_response::TransactionState::default();
        s.transactional_id = "t".into();
        s.producer_id = 4;
        s.transaction_state = "Ongoing".into();
        resp.transaction_states.push(s);
        resp.unknown_state_filters = vec!["Bogus".into()];
        let (list, unknown) = list_transactions_results(2, resp.clone()).expect("ok");
        assert_eq!(list[0].coordinator, 2);
        assert_eq!(list[0].state, TransactionState::Ongoing);
        assert_eq!(unknown, ["Bogus"]);
        resp.error_code = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS;
        assert!(list_transactions_results(2, resp).is_err());
    }
}
