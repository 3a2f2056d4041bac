//! Requests sent to every broker and merged into one response: ListGroups (key 16) and
//! ListTransactions (key 66, KIP-664). Each broker only knows the groups or transactions it
//! coordinates, so a cluster-wide listing needs all of them.
//!
//! Each broker is asked concurrently. A broker whose coordinator is still loading
//! (`COORDINATOR_LOAD_IN_PROGRESS`, `COORDINATOR_NOT_AVAILABLE`) or whose connection fails is
//! asked again after a backoff until the deadline. A broker that never answers adds
//! `NETWORK_EXCEPTION` (or `REQUEST_TIMED_OUT`) as its part's `error_code`, so the merged response
//! says the listing is partial.

use std::time::Duration;

use kafkit_protocol::messages::{ListTransactionsRequest, ListTransactionsResponse};
use kafkit_protocol::{ErrorCode, Request};
use tokio::task::JoinSet;

use super::classify;
use crate::error::{Error, Result};
use crate::transport::{ConnKind, RetryClock, SendOptions, Transport};

/// A request answered by every broker, whose answers are merged.
pub(crate) trait EveryBroker: Request + Clone {
    /// The response's whole-request error code.
    fn error_code(resp: &Self::Response) -> ErrorCode;
    /// A response carrying only `code` (a broker that never answered).
    fn failed(code: ErrorCode) -> Self::Response;
    /// The merged response of `parts` (node id, answer), sorted by node id.
    fn merge(parts: Vec<(i32, Self::Response)>) -> Self::Response;
}

/// Whether a broker's whole-request error is worth asking again.
fn retriable(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS | ErrorCode::COORDINATOR_NOT_AVAILABLE
    )
}

/// Sends `req` to every broker in metadata and merges the answers with [`EveryBroker::merge`].
///
/// Errors: `Err` when no broker answered (the last error, `DeadlineExceeded` for connection
/// failures), or when metadata could not be had.
pub(crate) async fn round_trip_every<R: EveryBroker>(
    t: &Transport,
    req: R,
    timeout_ms: u64,
) -> Result<R::Response> {
    let api = R::API_KEY.name();
    let retry = t.retry_within(api, timeout_ms);
    let md = match tokio::time::timeout_at(retry.deadline(), t.metadata()).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(retry.exceeded(Error::Timeout {
                operation: "Metadata",
                timeout: Duration::from_millis(timeout_ms),
            }));
        }
    };
    let mut tasks: JoinSet<(i32, Result<R::Response>)> = JoinSet::new();
    for b in &md.brokers {
        let node = b.node_id;
        let t = t.clone();
        let req = req.clone();
        let retry = t.retry_within(api, timeout_ms);
        tasks.spawn(async move { (node, ask_one(&t, node, &req, retry).await) });
    }
    let mut parts = Vec::new();
    let mut last_err = None;
    let mut failed: Vec<(i32, ErrorCode)> = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let Ok((node, r)) = joined else { continue };
        match r {
            Ok(resp) => parts.push((node, resp)),
            Err(e) => {
                let code = classify(&e).map_or(ErrorCode::UNKNOWN_SERVER_ERROR, |f| f.code());
                failed.push((node, code));
                last_err = Some(e);
            }
        }
    }
    if parts.is_empty()
        && let Some(e) = last_err
    {
        return Err(e);
    }
    parts.extend(
        failed
            .into_iter()
            .map(|(node, code)| (node, R::failed(code))),
    );
    parts.sort_by_key(|(node, _)| *node);
    Ok(R::merge(parts))
}

/// `req` on one broker, asked again on retriable answers and connection failures until
/// `retry`'s deadline.
async fn ask_one<R: EveryBroker>(
    t: &Transport,
    node: i32,
    req: &R,
    mut retry: RetryClock,
) -> Result<R::Response> {
    let api = R::API_KEY.name();
    loop {
        let once = t.send_to(node, ConnKind::Admin, req, SendOptions::default());
        let result = match tokio::time::timeout_at(retry.deadline(), once).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout {
                operation: api,
                timeout: Duration::ZERO,
            }),
        };
        let (last, answer) = match result {
            Ok(resp) if retriable(R::error_code(&resp)) => {
                (Error::broker(api, R::error_code(&resp), None), Some(resp))
            }
            Err(e) if classify(&e).is_some() => (e, None),
            done => return done,
        };
        if let Err(e) = retry.backoff(last).await {
            // Out of time: the broker's own last answer says more than the exhausted retry.
            return answer.ok_or(e);
        }
    }
}

impl EveryBroker for ListTransactionsRequest {
    fn error_code(resp: &ListTransactionsResponse) -> ErrorCode {
        resp.error_code
    }

    fn failed(code: ErrorCode) -> ListTransactionsResponse {
        ListTransactionsResponse::default().with_error_code(code)
    }

    /// Transactions concatenated by node id, each transactional id once; the unknown state
    /// filters of every broker, each once; `error_code` the first non-`NONE` code.
    fn merge(parts: Vec<(i32, ListTransactionsResponse)>) -> ListTransactionsResponse {
        let mut resp = ListTransactionsResponse::default();
        let mut seen = std::collections::HashSet::new();
        for (_, part) in parts {
            resp.throttle_time_ms = resp.throttle_time_ms.max(part.throttle_time_ms);
            if resp.error_code.is_ok() {
                resp.error_code = part.error_code;
            }
            for f in part.unknown_state_filters {
                if !resp.unknown_state_filters.contains(&f) {
                    resp.unknown_state_filters.push(f);
                }
            }
            for s in part.transaction_states {
                if seen.insert(s.transactional_id.clone()) {
                    resp.transaction_states.push(s);
                }
            }
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use kafkit_protocol::messages::list_transactions_response::TransactionState;

    use super::*;

    fn state(id: &str) -> TransactionState {
        let mut s = TransactionState::default();
        s.transactional_id = id.into();
        s
    }

    #[test]
    fn list_transactions_concatenates_and_keeps_the_first_error() {
        let mut a = ListTransactionsResponse::default();
        a.transaction_states = vec![state("t1")];
        a.unknown_state_filters = vec!["Bogus".into()];
        let mut b = ListTransactionsResponse::default();
        b.error_code = ErrorCode::NETWORK_EXCEPTION;
        let mut c = ListTransactionsResponse::default();
        c.transaction_states = vec![state("t1"), state("t3")];
        c.unknown_state_filters = vec!["Bogus".into()];
        c.throttle_time_ms = 9;
        let merged = ListTransactionsRequest::merge(vec![(1, a), (2, b), (3, c)]);
        let ids: Vec<&str> = merged
            .transaction_states
            .iter()
            .map(|s| s.transactional_id.as_str())
            .collect();
        assert_eq!(ids, ["t1", "t3"]);
        assert_eq!(merged.unknown_state_filters, ["Bogus"]);
        assert_eq!(merged.error_code, ErrorCode::NETWORK_EXCEPTION);
        assert_eq!(merged.throttle_time_ms, 9);
    }
}
