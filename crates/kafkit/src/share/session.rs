//! A share session with one broker (KIP-932): its epoch and the partitions it holds, and what
//! the next ShareFetch or ShareAcknowledge lists. No I/O.
//!
//! Epoch 0 opens a session (a ShareFetch listing every partition to fetch; it may carry no
//! acknowledgement), each later request carries the next epoch (1, 2, ... wrapping to 1 after
//! `i32::MAX`) and lists only the partitions it adds or acknowledges, with those it removes as
//! `ForgottenTopicsData`; -1 closes the session. The requests of one member to one broker go
//! on one connection, which the broker answers in order, so the epoch moves on when a
//! request is built, not when it is answered; an answer saying the session is gone
//! (`SHARE_SESSION_NOT_FOUND`, `INVALID_SHARE_SESSION_EPOCH`) or a lost connection starts
//! over at 0.

use std::collections::BTreeSet;

use kafkit_protocol::Uuid;

/// A partition of a share session: (topic id, partition).
pub(crate) type Tip = (Uuid, i32);

/// The closing epoch.
pub(crate) const FINAL_EPOCH: i32 = -1;

/// One broker's share session, as this member sees it.
#[derive(Debug, Default)]
pub(crate) struct Session {
    /// The epoch of the next request; 0 when no session is open.
    epoch: i32,
    /// The partitions the session holds once the requests sent so far are read.
    members: BTreeSet<Tip>,
}

/// What the next ShareFetch to a broker sends.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct FetchPlan {
    /// `ShareSessionEpoch`.
    pub(crate) epoch: i32,
    /// Partitions to list (besides those listed for their acknowledgements).
    pub(crate) add: Vec<Tip>,
    /// `ForgottenTopicsData`.
    pub(crate) forget: Vec<Tip>,
}

impl Session {
    /// Whether a session is open (acknowledgements may be sent).
    pub(crate) fn is_open(&self) -> bool {
        self.epoch > 0
    }

    /// Whether the session holds `tip`.
    pub(crate) fn holds(&self, tip: &Tip) -> bool {
        self.is_open() && self.members.contains(tip)
    }

    /// The next ShareFetch, fetching `wanted`; the session then holds exactly `wanted`.
    pub(crate) fn next_fetch(&mut self, wanted: &BTreeSet<Tip>) -> FetchPlan {
        let plan = if self.epoch == 0 {
            FetchPlan {
                epoch: 0,
                add: wanted.iter().copied().collect(),
                forget: Vec::new(),
            }
        } else {
            FetchPlan {
                epoch: self.epoch,
                add: wanted.difference(&self.members).copied().collect(),
                forget: self.members.difference(wanted).copied().collect(),
            }
        };
        self.members = wanted.clone();
        self.epoch = next_epoch(self.epoch);
        plan
    }

    /// The epoch of a ShareAcknowledge sent now, `None` when no session is open (a session is
    /// opened by a ShareFetch; acknowledgements wait for it).
    pub(crate) fn next_ack(&mut self) -> Option<i32> {
        self.is_open().then(|| {
            let e = self.epoch;
            self.epoch = next_epoch(e);
            e
        })
    }

    /// Closes the session: the epoch of its last request (-1), `None` when none is open.
    pub(crate) fn close(&mut self) -> Option<i32> {
        let open = self.is_open();
        self.reset();
        open.then_some(FINAL_EPOCH)
    }

    /// The broker lost the session (or the connection broke): the next ShareFetch opens a new
    /// one listing every partition.
    pub(crate) fn reset(&mut self) {
        self.epoch = 0;
        self.members.clear();
    }
}

/// The epoch after `e`: 0 -> 1 -> ... -> `i32::MAX` -> 1.
fn next_epoch(e: i32) -> i32 {
    if e == i32::MAX { 1 } else { e + 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(p: i32) -> Tip {
        (Uuid([1; 16]), p)
    }

    #[test]
    fn a_session_opens_lists_changes_only_and_starts_over_when_lost() {
        let mut s = Session::default();
        assert_eq!(s.next_ack(), None, "no session to acknowledge in");
        let wanted: BTreeSet<Tip> = [t(0), t(1)].into();
        assert_eq!(
            s.next_fetch(&wanted),
            FetchPlan {
                epoch: 0,
                add: vec![t(0), t(1)],
                forget: vec![]
            }
        );
        assert!(s.holds(&t(1)));
        assert_eq!(
            s.next_fetch(&wanted),
            FetchPlan {
                epoch: 1,
                add: vec![],
                forget: vec![]
            }
        );
        assert_eq!(s.next_ack(), Some(2));
        let moved: BTreeSet<Tip> = [t(1), t(2)].into();
        assert_eq!(
            s.next_fetch(&moved),
            FetchPlan {
                epoch: 3,
                add: vec![t(2)],
                forget: vec![t(0)]
            }
        );
        s.reset();
        assert_eq!(s.next_fetch(&moved).epoch, 0);
        assert_eq!(s.close(), Some(FINAL_EPOCH));
        assert_eq!(s.close(), None, "closed already");
    }

    #[test]
    fn the_epoch_wraps_to_one() {
        assert_eq!(next_epoch(0), 1);
        assert_eq!(next_epoch(i32::MAX), 1);
    }
}
