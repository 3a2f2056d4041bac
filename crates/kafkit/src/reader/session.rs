//! A source's fetch session (KIP-227), after the Java client's `FetchSessionHandler`.
//!
//! ```text
//!  no session ──full Fetch, epoch 0──► broker answers session id S ≠ 0 ──► session S, epoch 1
//!      ▲          (every partition)          or 0: no session, stay full (epoch -1 if disabled)
//!      │
//!      │  FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR,
//!      │  a failed request, a change between names and topic ids
//!      └────────────────────────────────────────────────────────────── session S, epoch n
//!                                (the next full Fetch carries S with epoch 0, which closes S on
//!                                the broker, unless the broker said it has no S)
//!                                incremental Fetch: only partitions that are new or whose
//!                                fetch offset / epochs / max bytes changed; forgotten: those
//!                                the session holds that this round does not want; answered:
//!                                only partitions with data or a change; epoch n+1 (wraps to 1)
//! ```
//!
//! The session's partitions are always exactly the partitions wanted by the last request that
//! was answered, with the fetch data it carried: a partition the broker answers without having
//! been sent this round is one of them, at the offset the session holds.
//!
//! A session given up is closed, as Java's `FetchSessionHandler` closes it: the next full
//! request names it with epoch 0 (the broker removes it and makes a new one), and a closing
//! Reader sends its id with the final epoch, -1 ([`FetchSession::open_id`], `Shared::close`).
//! Otherwise the broker keeps it until its cache needs the slot.

use std::collections::HashMap;
use std::sync::Arc;

use kafkit_protocol::{ErrorCode, Uuid};

/// What the session holds for one partition (what a request last said about it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartData {
    /// The topic id (KIP-516), nil when unknown; kept so a forgotten partition can be named by
    /// id after its topic left the assignment.
    pub(crate) topic_id: Uuid,
    pub(crate) fetch_offset: i64,
    pub(crate) current_leader_epoch: i32,
    pub(crate) last_fetched_epoch: i32,
    pub(crate) max_bytes: i32,
}

/// A partition of a session: topic and partition.
pub(crate) type PartKey = (Arc<str>, i32);

/// What one request should carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SessionRequest {
    pub(crate) session_id: i32,
    pub(crate) epoch: i32,
    /// Whether every wanted partition is sent (a full request).
    pub(crate) full: bool,
    /// Indexes (into the wanted list) of the partitions to send.
    pub(crate) send: Vec<usize>,
    /// Partitions to forget (incremental requests only), with their topic ids.
    pub(crate) forget: Vec<(PartKey, Uuid)>,
}

/// The session state of one source.
#[derive(Debug)]
pub(crate) struct FetchSession {
    enabled: bool,
    /// 0: no session.
    id: i32,
    /// The epoch of the next incremental request (1.. once a session exists).
    epoch: i32,
    /// Whether the session's partitions were sent with topic ids (Fetch v13+).
    topic_ids: bool,
    parts: HashMap<PartKey, PartData>,
    /// The wanted partitions of the request in flight, with their data.
    pending: Option<(bool, HashMap<PartKey, PartData>)>,
    /// A session given up that the broker may still hold: the next full request names it
    /// (epoch 0), which closes it (0: none).
    close: i32,
}

/// What an answer did to the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Use the answer.
    Ok,
    /// The broker lost or refused the session: the answer carries no partition data; the next
    /// request is full.
    Reset,
}

impl FetchSession {
    /// `enabled`: whether to ask for sessions (KIP-227) at all.
    pub(crate) fn new(enabled: bool) -> Self {
        FetchSession {
            enabled,
            id: 0,
            epoch: 0,
            topic_ids: false,
            parts: HashMap::new(),
            pending: None,
            close: 0,
        }
    }

    /// The session id (0 when none).
    #[cfg(test)]
    pub(crate) fn id(&self) -> i32 {
        self.id
    }

    /// The id of the session the broker holds for us, as far as we know: the current one, or
    /// one given up and not closed yet (0: none). A closing Reader closes it.
    pub(crate) fn open_id(&self) -> i32 {
        if self.id != 0 { self.id } else { self.close }
    }

    /// Plans the next request for `wanted` (each partition with its fetch data, in request
    /// order). `end_unknown(i)`: whether `wanted[i]` must be answered whatever its news (its
    /// cursor has not learnt its log end since it was made); `topic_ids`: whether the request
    /// names topics by id (Fetch v13+); `versioned`: whether the negotiated Fetch version has
    /// sessions at all (v7+).
    ///
    /// A session answers an incremental request only for partitions with news (records, a
    /// moved high watermark or log start, an error), and sending a partition it holds again
    /// does not change that (the broker compares its answer with what it last answered). So a
    /// partition unassigned and assigned again (an eager rebalance gives a member its own
    /// partitions back at their committed offsets) at the log end, or at the offset the
    /// session holds, would never be answered: its log end stays unknown. When a wanted
    /// partition whose log end is unknown is one the session holds, the session starts over:
    /// a full request, which answers for every partition (the old session closed by it).
    pub(crate) fn plan(
        &mut self,
        wanted: &[(PartKey, PartData)],
        end_unknown: impl Fn(usize) -> bool,
        topic_ids: bool,
        versioned: bool,
    ) -> SessionRequest {
        if self.id != 0 && (topic_ids != self.topic_ids || !versioned) {
            self.forget_session(versioned);
        }
        if self.id != 0
            && wanted
                .iter()
                .enumerate()
                .any(|(i, (k, _))| end_unknown(i) && self.parts.contains_key(k))
        {
            tracing::debug!(
                session = self.id,
                "fetch session restarted: a partition it holds needs an answer"
            );
            self.forget_session(true);
        }
        let next: HashMap<PartKey, PartData> =
            wanted.iter().map(|(k, d)| (k.clone(), *d)).collect();
        let req = if self.id == 0 {
            SessionRequest {
                // A session given up is named, so that the broker closes it (KIP-227).
                session_id: if versioned {
                    std::mem::take(&mut self.close)
                } else {
                    0
                },
                // Epoch 0 asks for a new session; -1 (FINAL_EPOCH) asks for none.
                epoch: if self.enabled && versioned { 0 } else { -1 },
                full: true,
                send: (0..wanted.len()).collect(),
                forget: Vec::new(),
            }
        } else {
            let send = wanted
                .iter()
                .enumerate()
                .filter(|(_, (k, d))| self.parts.get(k) != Some(d))
                .map(|(i, _)| i)
                .collect();
            let mut forget: Vec<(PartKey, Uuid)> = self
                .parts
                .iter()
                .filter(|(k, _)| !next.contains_key(*k))
                .map(|(k, d)| (k.clone(), d.topic_id))
                .collect();
            forget.sort_by(|a, b| a.0.cmp(&b.0));
            SessionRequest {
                session_id: self.id,
                epoch: self.epoch,
                full: false,
                send,
                forget,
            }
        };
        self.topic_ids = topic_ids;
        self.pending = Some((req.full, next));
        req
    }

    /// Takes the answer's top-level error code and session id.
    pub(crate) fn answered(&mut self, error: ErrorCode, session_id: i32) -> Outcome {
        let Some((full, next)) = self.pending.take() else {
            return Outcome::Ok;
        };
        if error == ErrorCode::FETCH_SESSION_ID_NOT_FOUND
            || error == ErrorCode::INVALID_FETCH_SESSION_EPOCH
            || error == ErrorCode::FETCH_SESSION_TOPIC_ID_ERROR
        {
            tracing::debug!(session = self.id, %error, "fetch session reset");
            // A session the broker does not have needs no closing; the others do.
            self.forget_session(error != ErrorCode::FETCH_SESSION_ID_NOT_FOUND);
            return Outcome::Reset;
        }
        if !error.is_ok() {
            // Another whole-request error: the broker did not take this request's changes;
            // start over with a full request.
            self.forget_session(true);
            return Outcome::Ok;
        }
        if full {
            if self.enabled && session_id != 0 {
                self.id = session_id;
                self.epoch = 1;
            } else {
                self.id = 0;
            }
        } else {
            self.epoch = if self.epoch == i32::MAX {
                1
            } else {
                self.epoch + 1
            };
        }
        self.parts = next;
        Outcome::Ok
    }

    /// The request got no answer (connection lost, timeout): the broker's session state is
    /// unknown, so the next request is full (a new session; the old one expires on the broker).
    pub(crate) fn failed(&mut self) {
        self.pending = None;
        self.forget_session(true);
    }

    /// Drops the session; with `close`, the next full request names it so that the broker
    /// closes it.
    fn forget_session(&mut self, close: bool) {
        if close && self.id != 0 {
            self.close = self.id;
        }
        self.id = 0;
        self.epoch = 0;
        self.parts.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No wanted partition needs an answer whatever its news.
    fn none(_: usize) -> bool {
        false
    }

    fn part(t: &str, p: i32, offset: i64) -> (PartKey, PartData) {
        (
            (Arc::from(t), p),
            PartData {
                topic_id: Uuid::default(),
                fetch_offset: offset,
                current_leader_epoch: 0,
                last_fetched_epoch: -1,
                max_bytes: 1 << 20,
            },
        )
    }

    #[test]
    fn full_then_incremental_with_changes_and_forgotten_partitions() {
        let mut s = FetchSession::new(true);
        let wanted = vec![part("a", 0, 0), part("a", 1, 0), part("b", 0, 5)];
        let r = s.plan(&wanted, none, false, true);
        assert_eq!((r.session_id, r.epoch, r.full), (0, 0, true));
        assert_eq!(r.send, vec![0, 1, 2]);
        assert_eq!(s.answered(ErrorCode::NONE, 77), Outcome::Ok);
        assert_eq!(s.id(), 77);

        // a/0 moved, a/1 unchanged, b/0 no longer wanted.
        let wanted = vec![part("a", 0, 10), part("a", 1, 0)];
        let r = s.plan(&wanted, none, false, true);
        assert_eq!((r.session_id, r.epoch, r.full), (77, 1, false));
        assert_eq!(r.send, vec![0]);
        assert_eq!(r.forget, vec![((Arc::from("b"), 0), Uuid::default())]);
        assert_eq!(s.answered(ErrorCode::NONE, 77), Outcome::Ok);

        // Nothing changed: an empty incremental request at epoch 2.
        let r = s.plan(&wanted, none, false, true);
        assert_eq!((r.epoch, r.send.len(), r.forget.len()), (2, 0, 0));
        assert_eq!(s.answered(ErrorCode::NONE, 77), Outcome::Ok);

        // The broker lost the session: reset, then a full request creating a new one (the
        // lost one is not named: the broker has nothing to close).
        let r = s.plan(&wanted, none, false, true);
        assert_eq!(r.epoch, 3);
        assert_eq!(
            s.answered(ErrorCode::FETCH_SESSION_ID_NOT_FOUND, 0),
            Outcome::Reset
        );
        assert_eq!(s.open_id(), 0);
        let r = s.plan(&wanted, none, false, true);
        assert_eq!(
            (r.session_id, r.epoch, r.full, r.send.len()),
            (0, 0, true, 2)
        );
        assert_eq!(s.answered(ErrorCode::NONE, 78), Outcome::Ok);
        assert_eq!(s.id(), 78);
    }

    /// A session given up after an error (a failed request, INVALID_FETCH_SESSION_EPOCH, any
    /// other whole-request error, a change between names and topic ids) is named, with epoch
    /// 0, by the next full request, which closes it on the broker (Java's
    /// `FetchMetadata.nextCloseExisting`); until then a closing Reader closes it.
    #[test]
    fn a_session_given_up_is_closed_by_the_next_full_request() {
        let wanted = vec![part("a", 0, 0)];
        type GiveUp = fn(&mut FetchSession);
        let give_ups: [(&str, GiveUp); 3] = [
            ("no answer", |s| s.failed()),
            ("epoch refused", |s| {
                s.answered(ErrorCode::INVALID_FETCH_SESSION_EPOCH, 9);
            }),
            ("another error", |s| {
                s.answered(ErrorCode::UNKNOWN_SERVER_ERROR, 9);
            }),
        ];
        for (what, give_up) in give_ups {
            let mut s = FetchSession::new(true);
            s.plan(&wanted, none, false, true);
            s.answered(ErrorCode::NONE, 9);
            s.plan(&wanted, none, false, true);
            give_up(&mut s);
            assert_eq!(s.open_id(), 9, "{what}: still open on the broker");
            s.pending = None;
            let r = s.plan(&wanted, none, false, true);
            assert_eq!((r.session_id, r.epoch, r.full), (9, 0, true), "{what}");
            assert_eq!(s.open_id(), 0, "{what}: named once");
            s.answered(ErrorCode::NONE, 10);
            assert_eq!(s.open_id(), 10, "{what}");
        }
        // From names to topic ids: the very request that starts over closes the old session.
        let mut s = FetchSession::new(true);
        s.plan(&wanted, none, false, true);
        s.answered(ErrorCode::NONE, 9);
        let r = s.plan(&wanted, none, true, true);
        assert_eq!((r.session_id, r.epoch, r.full), (9, 0, true));
    }

    #[test]
    fn session_id_zero_means_full_fetches_forever() {
        let mut s = FetchSession::new(true);
        let wanted = vec![part("a", 0, 0)];
        for _ in 0..3 {
            let r = s.plan(&wanted, none, false, true);
            assert_eq!((r.session_id, r.epoch, r.full), (0, 0, true));
            assert_eq!(s.answered(ErrorCode::NONE, 0), Outcome::Ok);
        }
        let mut off = FetchSession::new(false);
        let r = off.plan(&wanted, none, false, true);
        assert_eq!(
            r.epoch, -1,
            "sessions disabled: FINAL_EPOCH, no session asked for"
        );
        assert_eq!(off.answered(ErrorCode::NONE, 5), Outcome::Ok);
        assert_eq!(off.id(), 0, "a session handed out anyway is not used");
        assert_eq!(off.plan(&wanted, none, false, false).epoch, -1);
    }

    #[test]
    fn epoch_errors_failures_and_id_mode_changes_start_over() {
        let mut s = FetchSession::new(true);
        let wanted = vec![part("a", 0, 0)];
        s.plan(&wanted, none, false, true);
        s.answered(ErrorCode::NONE, 9);
        s.plan(&wanted, none, false, true);
        assert_eq!(
            s.answered(ErrorCode::INVALID_FETCH_SESSION_EPOCH, 9),
            Outcome::Reset
        );
        assert!(s.plan(&wanted, none, false, true).full);
        s.answered(ErrorCode::NONE, 9);
        s.plan(&wanted, none, false, true);
        s.failed();
        assert!(
            s.plan(&wanted, none, false, true).full,
            "no answer: full again"
        );
        s.answered(ErrorCode::NONE, 9);
        let r = s.plan(&wanted, none, true, true);
        assert!(r.full, "names -> topic ids: a new session");
        // The epoch wraps to 1, never 0 (which would ask for a new session).
        s.answered(ErrorCode::NONE, 9);
        s.epoch = i32::MAX;
        s.plan(&wanted, none, true, true);
        s.answered(ErrorCode::NONE, 9);
        assert_eq!(s.epoch, 1);
    }

    /// A partition the session holds whose cursor was made again (unassigned and assigned at
    /// the offset the session holds, or at the log end) must be answered: the session starts
    /// over with a full request (closing the old one), as an incremental one would leave it
    /// out. A partition new to the session needs nothing of the kind (the broker answers a
    /// partition it adds).
    #[test]
    fn a_held_partition_whose_log_end_is_unknown_restarts_the_session() {
        let mut s = FetchSession::new(true);
        let wanted = vec![part("a", 0, 5), part("a", 1, 5)];
        s.plan(&wanted, none, false, true);
        s.answered(ErrorCode::NONE, 9);
        let r = s.plan(&wanted, none, false, true);
        assert_eq!((r.full, r.send.len()), (false, 0), "nothing changed");
        s.answered(ErrorCode::NONE, 9);

        // a/1 assigned again at the offset the session holds: a full request names the old
        // session (epoch 0), which closes it and opens a new one.
        let r = s.plan(&wanted, |i| i == 1, false, true);
        assert_eq!((r.session_id, r.epoch, r.full), (9, 0, true));
        assert_eq!(r.send, vec![0, 1]);
        s.answered(ErrorCode::NONE, 10);
        assert_eq!(s.id(), 10);

        // A partition the session does not hold yet is added incrementally, log end unknown
        // or not.
        let more = vec![part("a", 0, 5), part("a", 1, 5), part("b", 0, 0)];
        let r = s.plan(&more, |i| i == 2, false, true);
        assert_eq!((r.session_id, r.full, r.send.clone()), (10, false, vec![2]));
    }
}
