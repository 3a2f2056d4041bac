//! The acknowledgement state of one share partition on this member (KIP-932): which records
//! the application holds unacknowledged, which acknowledgements wait to be sent, and the
//! `AcknowledgementBatches` they are sent as. No I/O.

use std::collections::{BTreeMap, BTreeSet};

/// How the application settles a record it was handed (KIP-932; KIP-1222 adds `Renew`).
/// Java's `AcknowledgeType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AcknowledgeType {
    /// Processed: the record is done for this group (the wire's 1).
    Accept,
    /// Not processed: the record is available again at once, for any member, with its
    /// delivery count kept (the wire's 2).
    Release,
    /// Not processable: the record is archived and never delivered again (to the group's
    /// dead-letter topic where one is configured, KIP-1191) (the wire's 3).
    Reject,
    /// Still being processed: the acquisition lock is renewed and the record stays with this
    /// member; it still needs a final acknowledgement (KIP-1222, ShareFetch / ShareAcknowledge
    /// v2; the wire's 4).
    Renew,
}

/// The wire's "Gap": an offset of an acquired range that holds no record the application can
/// see (a transaction marker, a record compacted away).
pub(crate) const GAP: i8 = 0;

impl AcknowledgeType {
    /// The wire value (`AcknowledgeTypes` of ShareFetch / ShareAcknowledge).
    pub(crate) fn wire(self) -> i8 {
        match self {
            AcknowledgeType::Accept => 1,
            AcknowledgeType::Release => 2,
            AcknowledgeType::Reject => 3,
            AcknowledgeType::Renew => 4,
        }
    }

    /// Java's name (`ACCEPT`, `RELEASE`, `REJECT`, `RENEW`).
    pub fn name(self) -> &'static str {
        match self {
            AcknowledgeType::Accept => "ACCEPT",
            AcknowledgeType::Release => "RELEASE",
            AcknowledgeType::Reject => "REJECT",
            AcknowledgeType::Renew => "RENEW",
        }
    }
}

/// The wire value of a Renew acknowledgement.
pub(crate) const RENEW: i8 = 4;

/// One `AcknowledgementBatch`: a run of consecutive offsets, with one type for all of them or
/// one per offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AckRange {
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) types: Vec<i8>,
}

/// Acknowledgements taken out of a partition to be sent: the batches, and the offsets with
/// their types (to put back if the request is refused before the broker read it, and to
/// report which offsets an answer settles).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Outgoing {
    pub(crate) ranges: Vec<AckRange>,
    pub(crate) offsets: BTreeMap<i64, i8>,
}

impl Outgoing {
    /// Whether a Renew is among them (the request then sets `IsRenewAck`).
    pub(crate) fn has_renew(&self) -> bool {
        self.offsets.values().any(|t| *t == RENEW)
    }
}

/// One share partition's acknowledgement state.
#[derive(Debug, Default)]
pub(crate) struct PartAcks {
    /// Handed to the application, not acknowledged.
    delivered: BTreeSet<i64>,
    /// Renewed (a Renew was sent): still with the application, which owes a final
    /// acknowledgement; does not hold up an explicit-mode poll.
    renewed: BTreeSet<i64>,
    /// Acknowledged (or gaps), waiting to be sent: offset -> wire type.
    pending: BTreeMap<i64, i8>,
}

impl PartAcks {
    /// A record handed to the application.
    pub(crate) fn deliver(&mut self, offset: i64) {
        self.delivered.insert(offset);
    }

    /// An acquired offset with no record to hand out: acknowledged as a gap.
    pub(crate) fn gap(&mut self, offset: i64) {
        self.pending.insert(offset, GAP);
    }

    /// An acquired offset whose record could not be handed out (it did not decode, or did not
    /// come whole): released for another delivery.
    pub(crate) fn release_unseen(&mut self, offset: i64) {
        self.pending.insert(offset, AcknowledgeType::Release.wire());
    }

    /// The application's acknowledgement of `offset`. A record acknowledged again before its
    /// acknowledgement is sent takes the newer type.
    ///
    /// Errors: why it cannot be acknowledged (not handed out here, or already sent).
    pub(crate) fn acknowledge(
        &mut self,
        offset: i64,
        t: AcknowledgeType,
    ) -> Result<(), &'static str> {
        let known = self.delivered.remove(&offset)
            || self.renewed.remove(&offset)
            || self.pending.get(&offset).is_some_and(|w| *w != GAP);
        if !known {
            return Err(
                "it was not handed out by this reader, or its acknowledgement was already sent",
            );
        }
        self.pending.insert(offset, t.wire());
        Ok(())
    }

    /// Implicit mode: every delivered record is accepted. Returns how many.
    pub(crate) fn accept_delivered(&mut self) -> usize {
        let n = self.delivered.len();
        for o in std::mem::take(&mut self.delivered) {
            self.pending.insert(o, AcknowledgeType::Accept.wire());
        }
        n
    }

    /// Closing: every record still with the application (delivered or renewed) is released.
    pub(crate) fn release_held(&mut self) {
        let held = std::mem::take(&mut self.delivered)
            .into_iter()
            .chain(std::mem::take(&mut self.renewed));
        for o in held {
            self.pending.insert(o, AcknowledgeType::Release.wire());
        }
    }

    /// Records delivered and not acknowledged (renewed ones not counted).
    pub(crate) fn unacknowledged(&self) -> usize {
        self.delivered.len()
    }

    /// Whether acknowledgements wait to be sent.
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether a Renew waits to be sent.
    pub(crate) fn has_pending_renew(&self) -> bool {
        self.pending.values().any(|t| *t == RENEW)
    }

    /// Whether nothing is held or pending (the partition's state can be dropped).
    pub(crate) fn is_idle(&self) -> bool {
        self.delivered.is_empty() && self.renewed.is_empty() && self.pending.is_empty()
    }

    /// Takes the pending acknowledgements out as batches. Renewed offsets stay held.
    pub(crate) fn take(&mut self) -> Outgoing {
        let offsets = std::mem::take(&mut self.pending);
        for (o, t) in &offsets {
            if *t == RENEW {
                self.renewed.insert(*o);
            }
        }
        Outgoing {
            ranges: ranges(&offsets),
            offsets,
        }
    }

    /// Puts back acknowledgements a refused request carried (the broker did not read them),
    /// unless newer ones were made meanwhile.
    pub(crate) fn put_back(&mut self, out: Outgoing) {
        for (o, t) in out.offsets {
            if t == RENEW {
                self.renewed.remove(&o);
            }
            self.pending.entry(o).or_insert(t);
        }
    }
}

/// The `AcknowledgementBatches` of `offsets`: one batch per run of consecutive offsets, with a
/// single type when the whole run has one, else one type per offset.
pub(crate) fn ranges(offsets: &BTreeMap<i64, i8>) -> Vec<AckRange> {
    let mut out: Vec<AckRange> = Vec::new();
    for (&o, &t) in offsets {
        match out.last_mut() {
            Some(r) if r.last + 1 == o => {
                r.last = o;
                r.types.push(t);
            }
            _ => out.push(AckRange {
                first: o,
                last: o,
                types: vec![t],
            }),
        }
    }
    for r in &mut out {
        if r.types.iter().all(|t| *t == r.types[0]) {
            r.types.truncate(1);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_become_batches_with_one_type_when_they_share_it() {
        let m: BTreeMap<i64, i8> = [(3, 1), (4, 1), (5, 1), (7, 2), (8, 1), (10, 0)].into();
        assert_eq!(
            ranges(&m),
            vec![
                AckRange {
                    first: 3,
                    last: 5,
                    types: vec![1]
                },
                AckRange {
                    first: 7,
                    last: 8,
                    types: vec![2, 1]
                },
                AckRange {
                    first: 10,
                    last: 10,
                    types: vec![0]
                },
            ]
        );
        assert!(ranges(&BTreeMap::new()).is_empty());
    }

    #[test]
    fn only_handed_out_records_are_acknowledged_and_renewed_ones_stay_held() {
        let mut p = PartAcks::default();
        p.deliver(1);
        p.deliver(2);
        p.gap(3);
        assert_eq!(p.unacknowledged(), 2);
        assert!(
            p.acknowledge(9, AcknowledgeType::Accept).is_err(),
            "never handed out"
        );
        assert!(
            p.acknowledge(3, AcknowledgeType::Accept).is_err(),
            "a gap is no record"
        );
        p.acknowledge(1, AcknowledgeType::Reject).unwrap();
        p.acknowledge(1, AcknowledgeType::Accept).unwrap(); // changed before it is sent
        p.acknowledge(2, AcknowledgeType::Renew).unwrap();
        assert_eq!(p.unacknowledged(), 0);
        let out = p.take();
        assert!(out.has_renew());
        assert_eq!(out.offsets, [(1, 1), (2, 4), (3, 0)].into());
        assert!(
            p.acknowledge(1, AcknowledgeType::Accept).is_err(),
            "already sent"
        );
        assert!(!p.is_idle(), "the renewed record is still held");
        p.acknowledge(2, AcknowledgeType::Accept).unwrap();
        assert_eq!(p.take().offsets, [(2, 1)].into());
        assert!(p.is_idle());
    }

    #[test]
    fn implicit_accepts_and_close_releases_what_is_held() {
        let mut p = PartAcks::default();
        p.deliver(5);
        p.deliver(6);
        assert_eq!(p.accept_delivered(), 2);
        p.deliver(7);
        p.acknowledge(7, AcknowledgeType::Renew).unwrap();
        let _ = p.take();
        p.deliver(8);
        p.release_held();
        assert_eq!(p.take().offsets, [(7, 2), (8, 2)].into());
    }

    #[test]
    fn refused_acknowledgements_go_back_unless_replaced() {
        let mut p = PartAcks::default();
        p.deliver(1);
        p.deliver(2);
        p.acknowledge(1, AcknowledgeType::Accept).unwrap();
        p.acknowledge(2, AcknowledgeType::Renew).unwrap();
        let out = p.take();
        p.acknowledge(2, AcknowledgeType::Reject).unwrap();
        p.put_back(out);
        assert_eq!(p.take().offsets, [(1, 1), (2, 3)].into());
    }
}
