//! The aborted-transaction filter of a `read_committed` fetch (KIP-98): which transactional
//! batches belong to an aborted transaction, given the response's aborted-transactions list.
//!
//! The same decision as the Java consumer's `CompletedFetch` (`abortedProducerIds`,
//! `consumeAbortedTransactionsUpTo`, `isBatchAborted`): the broker lists, per partition, every
//! aborted transaction that overlaps the returned range as `(producer id, first offset)`. Walking
//! the batches in offset order, a producer's transaction is "aborting" from its first offset
//! until its abort marker (a control batch of that producer whose record is `Abort`); a data
//! batch of a producer that is aborting at that point is dropped. Markers themselves are never
//! delivered, in either isolation level. `records.rs`'s batch walker, which the Reader's source and
//! `Conn::fetch_multi` share, asks it about every whole batch. It imports only
//! `kafkit_protocol::records`.

use kafkit_protocol::records::{ControlRecordType, RecordBatchHeader};

/// What to do with one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A data batch to deliver.
    Keep,
    /// A control batch (transaction marker, or another control record): never delivered; the
    /// position still moves past it.
    Control,
    /// A data batch of an aborted transaction (`read_committed` only): dropped; the position
    /// moves past it.
    Aborted,
}

/// The filter's state while walking one partition's batches in offset order.
#[derive(Debug, Default)]
pub(crate) struct AbortedFilter {
    /// Whether the fetch is `read_committed` (otherwise only markers are left out).
    read_committed: bool,
    /// Aborted transactions whose first offset is not reached yet, sorted by first offset
    /// descending, so the next one to start is at the end.
    pending: Vec<(i64, i64)>,
    /// Producers whose aborted transaction is open at the current batch (few at a time).
    aborting: Vec<i64>,
}

impl AbortedFilter {
    /// A filter for a `read_uncommitted` fetch: markers are left out, nothing else.
    pub(crate) fn read_uncommitted() -> Self {
        AbortedFilter::default()
    }

    /// A filter for a `read_committed` fetch whose answer listed `aborted` as
    /// `(producer id, first offset)` pairs (the list is bounded by the response that held it).
    pub(crate) fn read_committed(aborted: impl IntoIterator<Item = (i64, i64)>) -> Self {
        let mut pending: Vec<(i64, i64)> = aborted.into_iter().collect();
        pending.sort_unstable_by_key(|&(_, first)| std::cmp::Reverse(first));
        AbortedFilter {
            read_committed: true,
            pending,
            aborting: Vec::new(),
        }
    }

    /// The verdict for the next batch in offset order. `control` is the type of the batch's
    /// first record when the batch is a control batch (`None` if it has none or for data
    /// batches).
    pub(crate) fn judge(
        &mut self,
        h: &RecordBatchHeader,
        control: Option<ControlRecordType>,
    ) -> Verdict {
        if self.read_committed && h.is_transactional {
            while let Some(&(producer_id, first)) = self.pending.last() {
                if first > h.last_offset() {
                    break;
                }
                if !self.aborting.contains(&producer_id) {
                    self.aborting.push(producer_id);
                }
                self.pending.pop();
            }
            if h.is_control {
                if control == Some(ControlRecordType::Abort) {
                    self.aborting.retain(|&p| p != h.producer_id);
                }
                return Verdict::Control;
            }
            if self.aborting.contains(&h.producer_id) {
                return Verdict::Aborted;
            }
        }
        if h.is_control {
            Verdict::Control
        } else {
            Verdict::Keep
        }
    }
}
