//! The acknowledgement state of one share partition on this member (KIP-932): which records
//! the application holds unacknowledged, which acknowledgements wait to be sent, and the
//! `AcknowledgementBatches` they are sent as. No I/O.

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

/// A run of consecutive offsets sharing a type (`ty`; unused in sets of offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) first: i64,
    pub(crate) last: i64,
    pub(crate) ty: i8,
}

/// Offsets as sorted, disjoint runs, each with a type; adjacent runs of one type are merged.
/// Records come in offset order, so a partition's offsets are a few runs whatever their
/// number: adding the next offset extends the last run, with no allocation per record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Runs(Vec<Run>);

impl Runs {
    /// The index of the first run that ends at or after `o`.
    fn at(&self, o: i64) -> usize {
        self.0.partition_point(|r| r.last < o)
    }

    /// Whether `o` is in a run.
    pub(crate) fn contains(&self, o: i64) -> bool {
        self.0.get(self.at(o)).is_some_and(|r| r.first <= o)
    }

    /// The type of `o`, if it is in a run.
    pub(crate) fn get(&self, o: i64) -> Option<i8> {
        self.0
            .get(self.at(o))
            .filter(|r| r.first <= o)
            .map(|r| r.ty)
    }

    /// Sets `first..=last` to `ty`, over whatever was there.
    pub(crate) fn set(&mut self, first: i64, last: i64, ty: i8) {
        self.remove_range(first, last);
        let i = self.at(first);
        self.0.insert(i, Run { first, last, ty });
        self.merge_around(i);
    }

    /// Sets the offsets of `first..=last` not in a run to `ty`; those in one keep theirs.
    pub(crate) fn fill(&mut self, first: i64, last: i64, ty: i8) {
        let mut from = first;
        let mut i = self.at(first);
        while from <= last {
            match self.0.get(i) {
                Some(r) if r.first <= from => {
                    from = r.last.saturating_add(1);
                    i += 1;
                }
                next => {
                    let to = next.map_or(last, |r| last.min(r.first - 1));
                    self.set(from, to, ty);
                    from = to.saturating_add(1);
                    i = self.at(from);
                }
            }
            if from == i64::MAX {
                break;
            }
        }
    }

    /// Removes `o`; whether it was there.
    pub(crate) fn remove(&mut self, o: i64) -> bool {
        let had = self.contains(o);
        if had {
            self.remove_range(o, o);
        }
        had
    }

    /// Removes `first..=last` (splitting the runs at its ends).
    fn remove_range(&mut self, first: i64, last: i64) {
        let i = self.at(first);
        let mut j = i;
        let mut keep: [Option<Run>; 2] = [None, None];
        while let Some(r) = self.0.get(j).filter(|r| r.first <= last) {
            if r.first < first {
                keep[0] = Some(Run {
                    last: first - 1,
                    ..*r
                });
            }
            if r.last > last {
                keep[1] = Some(Run {
                    first: last + 1,
                    ..*r
                });
            }
            j += 1;
        }
        self.0.splice(i..j, keep.into_iter().flatten());
    }

    /// Merges run `i` with its neighbours when they touch it and share its type.
    fn merge_around(&mut self, i: usize) {
        if i + 1 < self.0.len() {
            let (a, b) = (self.0[i], self.0[i + 1]);
            if a.last.checked_add(1) == Some(b.first) && a.ty == b.ty {
                self.0[i].last = b.last;
                self.0.remove(i + 1);
            }
        }
        if i > 0 {
            let (a, b) = (self.0[i - 1], self.0[i]);
            if a.last.checked_add(1) == Some(b.first) && a.ty == b.ty {
                self.0[i - 1].last = b.last;
                self.0.remove(i);
            }
        }
    }

    /// How many offsets.
    pub(crate) fn count(&self) -> usize {
        self.0
            .iter()
            .map(|r| {
                usize::try_from(r.last.saturating_sub(r.first))
                    .map_or(usize::MAX, |n| n.saturating_add(1))
            })
            .fold(0, usize::saturating_add)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The runs, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Run> {
        self.0.iter()
    }

    fn take(&mut self) -> Runs {
        std::mem::take(self)
    }
}

/// Acknowledgements taken out of a partition to be sent: their runs (to put back if the
/// request is refused before the broker read it, and to report which offsets an answer
/// settles) and the `AcknowledgementBatches` they go as.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Outgoing {
    pub(crate) ranges: Vec<AckRange>,
    pub(crate) runs: Runs,
}

impl Outgoing {
    /// Whether a Renew is among them (the request then sets `IsRenewAck`).
    pub(crate) fn has_renew(&self) -> bool {
        self.runs.iter().any(|r| r.ty == RENEW)
    }

    /// Whether there is nothing to send.
    pub(crate) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The offsets of records acknowledged (gaps left out), ascending.
    pub(crate) fn acknowledged(&self) -> Vec<i64> {
        self.runs
            .iter()
            .filter(|r| r.ty != GAP)
            .flat_map(|r| r.first..=r.last)
            .collect()
    }
}

/// One share partition's acknowledgement state.
#[derive(Debug, Default)]
pub(crate) struct PartAcks {
    /// Handed to the application, not acknowledged.
    delivered: Runs,
    /// Renewed (a Renew was sent): still with the application, which owes a final
    /// acknowledgement; does not hold up an explicit-mode poll.
    renewed: Runs,
    /// Acknowledged (or gaps), waiting to be sent, with their wire types.
    pending: Runs,
    /// The earliest acquisition lock deadline of the records handed out since the state was
    /// last idle: how long the acknowledgements may wait for a ShareFetch to ride on.
    deadline: Option<std::time::Instant>,
}

impl PartAcks {
    /// A record handed to the application, its lock running out at `deadline`.
    pub(crate) fn deliver(&mut self, offset: i64, deadline: std::time::Instant) {
        self.delivered.set(offset, offset, 0);
        self.deadline = Some(self.deadline.map_or(deadline, |d| d.min(deadline)));
    }

    /// Whether acknowledgements wait whose records' locks run out before `before`.
    pub(crate) fn is_urgent(&self, before: std::time::Instant) -> bool {
        self.has_pending() && self.deadline.is_some_and(|d| d <= before)
    }

    /// An acquired offset with no record to hand out: acknowledged as a gap.
    pub(crate) fn gap(&mut self, offset: i64) {
        self.pending.set(offset, offset, GAP);
    }

    /// An acquired offset whose record could not be handed out (it did not decode, or did not
    /// come whole): released for another delivery.
    pub(crate) fn release_unseen(&mut self, offset: i64) {
        self.pending
            .set(offset, offset, AcknowledgeType::Release.wire());
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
        let known = self.delivered.remove(offset)
            || self.renewed.remove(offset)
            || self.pending.get(offset).is_some_and(|w| w != GAP);
        if !known {
            return Err(
                "it was not handed out by this reader, or its acknowledgement was already sent",
            );
        }
        self.pending.set(offset, offset, t.wire());
        Ok(())
    }

    /// Implicit mode: every delivered record is accepted. Returns how many.
    pub(crate) fn accept_delivered(&mut self) -> usize {
        let n = self.delivered.count();
        for r in self.delivered.take().0 {
            self.pending
                .set(r.first, r.last, AcknowledgeType::Accept.wire());
        }
        n
    }

    /// Closing: every record still with the application (delivered or renewed) is released.
    pub(crate) fn release_held(&mut self) {
        let held = self
            .delivered
            .take()
            .0
            .into_iter()
            .chain(self.renewed.take().0);
        for r in held {
            self.pending
                .set(r.first, r.last, AcknowledgeType::Release.wire());
        }
    }

    /// Records delivered and not acknowledged (renewed ones not counted).
    pub(crate) fn unacknowledged(&self) -> usize {
        self.delivered.count()
    }

    /// Whether acknowledgements wait to be sent.
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Whether a Renew waits to be sent.
    pub(crate) fn has_pending_renew(&self) -> bool {
        self.pending.iter().any(|r| r.ty == RENEW)
    }

    /// Whether nothing is held or pending (the partition's state can be dropped).
    pub(crate) fn is_idle(&self) -> bool {
        self.delivered.is_empty() && self.renewed.is_empty() && self.pending.is_empty()
    }

    /// Takes the pending acknowledgements out as batches. Renewed offsets stay held.
    pub(crate) fn take(&mut self) -> Outgoing {
        let runs = self.pending.take();
        for r in runs.iter().filter(|r| r.ty == RENEW) {
            self.renewed.set(r.first, r.last, 0);
        }
        if self.delivered.is_empty() && self.renewed.is_empty() {
            self.deadline = None;
        }
        Outgoing {
            ranges: ranges(&runs),
            runs,
        }
    }

    /// Puts back acknowledgements a refused request carried (the broker did not read them),
    /// unless newer ones were made meanwhile.
    pub(crate) fn put_back(&mut self, out: Outgoing) {
        for r in out.runs.iter() {
            if r.ty == RENEW {
                self.renewed.remove_range(r.first, r.last);
            }
            self.pending.fill(r.first, r.last, r.ty);
        }
    }
}

/// The `AcknowledgementBatches` of `runs`: one batch per run, with its one type.
pub(crate) fn ranges(runs: &Runs) -> Vec<AckRange> {
    runs.iter()
        .map(|r| AckRange {
            first: r.first,
            last: r.last,
            types: vec![r.ty],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (offset, type) of `out`.
    fn pairs(out: &Outgoing) -> Vec<(i64, i8)> {
        out.runs
            .iter()
            .flat_map(|r| (r.first..=r.last).map(move |o| (o, r.ty)))
            .collect()
    }

    fn far() -> std::time::Instant {
        std::time::Instant::now() + std::time::Duration::from_secs(30)
    }

    fn runs(r: &Runs) -> Vec<(i64, i64, i8)> {
        r.iter().map(|r| (r.first, r.last, r.ty)).collect()
    }

    #[test]
    fn runs_split_merge_and_fill() {
        let mut r = Runs::default();
        for o in 0..10_000 {
            r.set(o, o, 1);
        }
        assert_eq!(
            runs(&r),
            vec![(0, 9_999, 1)],
            "records in order are one run"
        );
        r.set(5, 5, 2);
        assert_eq!(runs(&r), vec![(0, 4, 1), (5, 5, 2), (6, 9_999, 1)]);
        r.set(5, 5, 1);
        assert_eq!(runs(&r), vec![(0, 9_999, 1)], "merged back");
        assert!(r.remove(0) && r.remove(9_999) && !r.remove(0));
        assert!(r.remove(500));
        assert_eq!(runs(&r), vec![(1, 499, 1), (501, 9_998, 1)]);
        assert_eq!(r.count(), 9_997);
        assert!(!r.contains(500) && r.contains(501) && r.get(1) == Some(1));
        r.fill(0, 600, 3);
        assert_eq!(
            runs(&r),
            vec![(0, 0, 3), (1, 499, 1), (500, 500, 3), (501, 9_998, 1)]
        );
        r.set(0, 20_000, 0);
        assert_eq!(runs(&r), vec![(0, 20_000, 0)]);
        let mut e = Runs::default();
        e.fill(i64::MAX - 1, i64::MAX, 1);
        e.set(i64::MAX, i64::MAX, 1);
        e.set(i64::MIN, i64::MIN, 1);
        assert_eq!(
            runs(&e),
            vec![(i64::MIN, i64::MIN, 1), (i64::MAX - 1, i64::MAX, 1)]
        );
        assert_eq!(e.count(), 3);
        assert!(e.remove(i64::MIN) && e.remove(i64::MAX));
    }

    #[test]
    fn runs_become_batches_with_one_type_each() {
        let mut r = Runs::default();
        for (o, t) in [(3, 1), (4, 1), (5, 1), (7, 2), (8, 1), (10, 0)] {
            r.set(o, o, t);
        }
        assert_eq!(
            ranges(&r),
            vec![
                AckRange {
                    first: 3,
                    last: 5,
                    types: vec![1]
                },
                AckRange {
                    first: 7,
                    last: 7,
                    types: vec![2]
                },
                AckRange {
                    first: 8,
                    last: 8,
                    types: vec![1]
                },
                AckRange {
                    first: 10,
                    last: 10,
                    types: vec![0]
                },
            ]
        );
        assert!(ranges(&Runs::default()).is_empty());
    }

    #[test]
    fn only_handed_out_records_are_acknowledged_and_renewed_ones_stay_held() {
        let mut p = PartAcks::default();
        p.deliver(1, far());
        p.deliver(2, far());
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
        assert!(p.has_pending_renew());
        let out = p.take();
        assert!(out.has_renew());
        assert_eq!(pairs(&out), vec![(1, 1), (2, 4), (3, 0)]);
        assert_eq!(out.acknowledged(), vec![1, 2], "gaps are no records");
        assert!(
            p.acknowledge(1, AcknowledgeType::Accept).is_err(),
            "already sent"
        );
        assert!(!p.is_idle(), "the renewed record is still held");
        p.acknowledge(2, AcknowledgeType::Accept).unwrap();
        assert_eq!(pairs(&p.take()), vec![(2, 1)]);
        assert!(p.is_idle());
    }

    #[test]
    fn implicit_accepts_and_close_releases_what_is_held() {
        let mut p = PartAcks::default();
        p.deliver(5, far());
        p.deliver(6, far());
        assert_eq!(p.accept_delivered(), 2);
        p.deliver(7, far());
        p.acknowledge(7, AcknowledgeType::Renew).unwrap();
        let _ = p.take();
        p.deliver(8, far());
        p.release_held();
        assert_eq!(pairs(&p.take()), vec![(7, 2), (8, 2)]);
    }

    /// Acknowledgements are urgent once the earliest lock of their records is near.
    #[test]
    fn urgency_follows_the_earliest_lock_until_the_state_is_idle() {
        let now = std::time::Instant::now();
        let mut p = PartAcks::default();
        p.deliver(1, now + std::time::Duration::from_secs(10));
        p.deliver(2, now + std::time::Duration::from_secs(20));
        assert!(
            !p.is_urgent(now + std::time::Duration::from_secs(15)),
            "nothing pending"
        );
        p.accept_delivered();
        assert!(p.is_urgent(now + std::time::Duration::from_secs(15)));
        assert!(!p.is_urgent(now + std::time::Duration::from_secs(5)));
        let _ = p.take();
        p.deliver(3, now + std::time::Duration::from_secs(40));
        p.accept_delivered();
        assert!(
            !p.is_urgent(now + std::time::Duration::from_secs(15)),
            "the old lock is done with"
        );
    }

    #[test]
    fn refused_acknowledgements_go_back_unless_replaced() {
        let mut p = PartAcks::default();
        p.deliver(1, far());
        p.deliver(2, far());
        p.acknowledge(1, AcknowledgeType::Accept).unwrap();
        p.acknowledge(2, AcknowledgeType::Renew).unwrap();
        let out = p.take();
        p.acknowledge(2, AcknowledgeType::Reject).unwrap();
        p.put_back(out);
        assert_eq!(pairs(&p.take()), vec![(1, 1), (2, 3)]);
    }
}
