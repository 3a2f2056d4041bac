//! The transaction part of the writer's state (`State::txn`, under the writer's lock):
//! where a transactional writer stands ([`Txn`]) and how an error moves it (fatal or
//! abortable codes, a record's failure), and the Produce version cap of the classic flow.
//! The accumulator, the engine and the sender import this file; it imports only the error
//! vocabulary, never the transactional calls (`txn.rs`).

use std::collections::HashSet;

use kafkit_protocol::ErrorCode;

use super::batch::PartId;
use crate::error::produce::{ProduceError, TransactionError, TransactionPhase};

/// Highest Produce version of a transactional writer on the classic flow: a broker reads v12+
/// in a transaction as KIP-890 part 2's implicit AddPartitionsToTxn.
pub(super) const PRODUCE_CLASSIC_MAX: i16 = 11;

/// The transaction part of the writer's state (under the writer's lock).
#[derive(Debug)]
pub(crate) struct Txn {
    pub(crate) state: TransactionPhase,
    /// The error of `AbortableError` and `FatalError`.
    pub(crate) error: Option<TransactionError>,
    /// Partitions in the open transaction (AddPartitionsToTxn answered).
    pub(crate) added: HashSet<PartId>,
    /// Partitions with records that wait for AddPartitionsToTxn (one request for all).
    pub(crate) pending: Vec<PartId>,
    /// An AddPartitionsToTxn is in flight (an end waits for it: the coordinator must know
    /// every partition before EndTxn, and EndTxn must not overtake it).
    pub(crate) adding: bool,
    /// Counts transaction ends: an AddPartitionsToTxn answered after its transaction ended
    /// adds nothing to the next one.
    pub(crate) round: u64,
    /// Partitions or offsets went into the transaction: its end needs an EndTxn.
    pub(crate) started: bool,
    /// The group of an AddOffsetsToTxn sent without an answer (lost, timed out, cancelled):
    /// the coordinator may have begun the transaction with it, so the end sends it again
    /// before deciding on EndTxn (see [`Writer::send_offsets_to_transaction`]).
    pub(crate) offsets_unanswered: Option<String>,
    /// Unsent batches fail at once with this (an abort, an abortable or fatal error).
    pub(crate) fail_unsent: Option<ProduceError>,
    /// The producer's sequences broke or a maybe-written batch failed: the abort bumps the
    /// epoch through the transaction coordinator (KIP-360) before the next transaction.
    pub(crate) bump_needed: bool,
    /// KIP-890 part 2 (`transaction.version` >= 2 and the versions allow it): partitions are
    /// added implicitly by Produce, and EndTxn bumps the epoch.
    pub(crate) v2: bool,
}

impl Txn {
    pub(crate) fn new() -> Self {
        Txn {
            state: TransactionPhase::Uninitialized,
            error: None,
            added: HashSet::new(),
            pending: Vec::new(),
            adding: false,
            round: 0,
            started: false,
            offsets_unanswered: None,
            fail_unsent: None,
            bump_needed: false,
            v2: false,
        }
    }

    /// Whether partition `id`'s batches may be sent now: it was added to the open transaction
    /// (implicitly with KIP-890).
    pub(crate) fn may_send(&self, id: PartId) -> bool {
        self.v2 || self.added.contains(&id)
    }

    /// A new transaction, or the end of one: nothing added, nothing failed.
    pub(super) fn clear(&mut self) {
        self.round += 1;
        self.added.clear();
        self.pending.clear();
        self.started = false;
        self.offsets_unanswered = None;
        self.fail_unsent = None;
        self.error = None;
    }

    /// Records `e` (abortable or fatal) as the transaction's error: the state moves to
    /// `AbortableError` (from an open or committing transaction) or `FatalError`, and unsent
    /// batches fail with it. An abortable error never replaces a fatal one. Returns whether
    /// the state changed (the senders must look again).
    pub(crate) fn fail(&mut self, e: TransactionError) -> bool {
        match (&e, self.state) {
            (_, TransactionPhase::FatalError) => false,
            (TransactionError::Fatal { .. }, _) => {
                self.state = TransactionPhase::FatalError;
                self.fail_unsent = Some(ProduceError::Transaction(e.clone()));
                self.error = Some(e);
                true
            }
            (
                TransactionError::Abortable { .. },
                TransactionPhase::InTransaction | TransactionPhase::CommittingTransaction,
            ) => {
                self.state = TransactionPhase::AbortableError;
                self.fail_unsent = Some(ProduceError::Transaction(e.clone()));
                self.error = Some(e);
                true
            }
            _ => false,
        }
    }

    /// EndTxn went through. A call resumed after the KIP-360 bump that follows failed or
    /// timed out runs only the bump, as Java does: EndTxn sent again with the old epoch after
    /// a bump the coordinator carried out (its answer lost) would be fenced.
    pub(super) fn ended(&mut self) -> Result<(), TransactionError> {
        self.started = false;
        self.offsets_unanswered = None;
        Ok(())
    }

    /// The transaction's end is over (`committed` or aborted; `upgrade`: it moved to KIP-890
    /// part 2's flow, `next_v2` the next one's): nothing added, no bump left to do after an
    /// abort or an upgrade, and `Ready`.
    pub(super) fn end_done(
        &mut self,
        committed: bool,
        upgrade: bool,
        next_v2: bool,
    ) -> Result<(), TransactionError> {
        self.clear();
        if !committed || upgrade {
            self.bump_needed = false;
        }
        self.v2 = next_v2;
        self.state = TransactionPhase::Ready;
        Ok(())
    }

    /// Whether `operation` (`send_offsets_to_transaction`) may add offsets now (an open
    /// transaction), and if so whether on KIP-890 part 2's flow.
    pub(super) fn offsets_allowed(
        &self,
        operation: &'static str,
    ) -> Result<bool, TransactionError> {
        match self.state {
            TransactionPhase::InTransaction => Ok(self.v2),
            TransactionPhase::AbortableError | TransactionPhase::FatalError => Err(self
                .error
                .clone()
                .unwrap_or(TransactionError::InvalidState {
                    operation,
                    state: self.state,
                })),
            state => Err(TransactionError::InvalidState { operation, state }),
        }
    }

    /// `commit_transaction` begins (or resumes): `CommittingTransaction`, unless the state
    /// refuses it.
    pub(super) fn enter_commit(&mut self) -> Result<(), TransactionError> {
        const OP: &str = "commit_transaction";
        match self.state {
            TransactionPhase::InTransaction | TransactionPhase::CommittingTransaction => {
                self.state = TransactionPhase::CommittingTransaction;
                Ok(())
            }
            TransactionPhase::AbortableError | TransactionPhase::FatalError => Err(self
                .error
                .clone()
                .unwrap_or(TransactionError::InvalidState {
                    operation: OP,
                    state: self.state,
                })),
            state => Err(TransactionError::InvalidState {
                operation: OP,
                state,
            }),
        }
    }

    /// `abort_transaction` begins (or resumes): `AbortingTransaction`, with the unsent records
    /// failing, unless the state refuses it. A commit that timed out (`CommittingTransaction`)
    /// refuses it, as Java does: its EndTxn may have reached the coordinator, so only the
    /// commit called again can tell how it ended.
    pub(super) fn enter_abort(&mut self) -> Result<(), TransactionError> {
        match self.state {
            TransactionPhase::InTransaction
            | TransactionPhase::AbortableError
            | TransactionPhase::AbortingTransaction => {
                self.state = TransactionPhase::AbortingTransaction;
                // Unsent records fail now; an abortable error failed them already.
                self.fail_unsent = Some(ProduceError::TransactionAborted);
                self.pending.clear();
                Ok(())
            }
            _ => Err(self.refused("abort_transaction")),
        }
    }

    /// Why `operation` cannot run in this state: the writer's fatal error after one, else
    /// [`TransactionError::InvalidState`].
    pub(super) fn refused(&self, operation: &'static str) -> TransactionError {
        match self.state {
            TransactionPhase::FatalError => self.error.clone().unwrap_or(TransactionError::Fatal {
                code: None,
                message: "the writer failed earlier".into(),
            }),
            state => TransactionError::InvalidState { operation, state },
        }
    }

    /// Whether a record may be taken now, and if not why (Java `failIfNotReadyForSend`).
    pub(crate) fn check_send(&self) -> Result<(), ProduceError> {
        match self.state {
            TransactionPhase::InTransaction => Ok(()),
            TransactionPhase::AbortableError | TransactionPhase::FatalError => {
                Err(ProduceError::Transaction(self.error.clone().unwrap_or(
                    TransactionError::InvalidState {
                        operation: "send",
                        state: self.state,
                    },
                )))
            }
            state => Err(ProduceError::Transaction(TransactionError::InvalidState {
                operation: "send",
                state,
            })),
        }
    }
}

/// Codes that make a transactional writer fatal: it was fenced by a newer writer of its
/// transactional id, or is not allowed, or the coordinator found its state broken.
pub(crate) fn is_fatal_code(code: ErrorCode) -> bool {
    [
        ErrorCode::PRODUCER_FENCED,
        ErrorCode::INVALID_PRODUCER_EPOCH,
        ErrorCode::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode::CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode::INVALID_TXN_STATE,
        ErrorCode::UNSUPPORTED_VERSION,
        ErrorCode::UNSUPPORTED_FOR_MESSAGE_FORMAT,
        ErrorCode::INVALID_TRANSACTION_TIMEOUT,
    ]
    .contains(&code)
}

/// The error of `operation` answered with the non-retriable `code`: fatal for the fatal
/// codes (and for every code outside a transaction, `in_txn` false: InitProducerId), else
/// abortable.
pub(crate) fn code_error(operation: &str, code: ErrorCode, in_txn: bool) -> TransactionError {
    let message = format!("{operation} answered {code}");
    if is_fatal_code(code) || !in_txn {
        TransactionError::Fatal {
            code: Some(code),
            message,
        }
    } else {
        TransactionError::Abortable {
            code: Some(code),
            message,
        }
    }
}

/// The record's error as the transaction sees it: `None` for a record failed by the
/// transaction itself (an abort, an earlier error), else the abortable or fatal error it makes.
pub(crate) fn record_failure(e: &ProduceError) -> Option<TransactionError> {
    match e {
        ProduceError::Transaction(_) | ProduceError::TransactionAborted => None,
        other => {
            let code = other.error_code();
            let message = format!("a record of the transaction failed: {other}");
            Some(match code {
                Some(c) if is_fatal_code(c) => TransactionError::Fatal {
                    code: Some(c),
                    message,
                },
                _ => TransactionError::Abortable { code, message },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_machine_moves_as_java_s() {
        let mut t = Txn::new();
        assert!(matches!(
            t.check_send(),
            Err(ProduceError::Transaction(TransactionError::InvalidState {
                state: TransactionPhase::Uninitialized,
                ..
            }))
        ));
        let abortable = TransactionError::Abortable {
            code: None,
            message: "x".into(),
        };
        // Nothing open: an abortable error has nothing to abort.
        t.state = TransactionPhase::Ready;
        assert!(!t.fail(abortable.clone()));
        t.state = TransactionPhase::InTransaction;
        assert!(t.check_send().is_ok());
        assert!(t.fail(abortable.clone()));
        assert_eq!(t.state, TransactionPhase::AbortableError);
        assert!(matches!(
            t.check_send(),
            Err(ProduceError::Transaction(
                TransactionError::Abortable { .. }
            ))
        ));
        let fatal = TransactionError::Fatal {
            code: Some(ErrorCode::PRODUCER_FENCED),
            message: "fenced".into(),
        };
        assert!(t.fail(fatal));
        assert_eq!(t.state, TransactionPhase::FatalError);
        // Fatal stays fatal.
        assert!(!t.fail(abortable));
        assert_eq!(t.state, TransactionPhase::FatalError);
        assert_eq!(
            t.check_send().unwrap_err().error_code(),
            Some(ErrorCode::PRODUCER_FENCED)
        );
    }

    /// After `commit_transaction` timed out (the state stays
    /// `CommittingTransaction`) the commit must be called again: `abort_transaction` is refused,
    /// as Java refuses it ("the previous call to commitTransaction timed out and must be
    /// retried"). The EndTxn(commit) may have reached the coordinator; an abort would then be
    /// refused by it, or, worse, the commit's outcome be unknown to the application. Once the
    /// commit's failure made the transaction abortable, the abort goes.
    #[test]
    fn abort_is_refused_after_a_commit_timed_out() {
        let mut t = Txn::new();
        t.state = TransactionPhase::CommittingTransaction;
        assert!(
            matches!(
                t.enter_abort(),
                Err(TransactionError::InvalidState {
                    state: TransactionPhase::CommittingTransaction,
                    ..
                })
            ),
            "abort after a timed-out commit"
        );
        assert_eq!(t.state, TransactionPhase::CommittingTransaction);
        assert!(t.enter_commit().is_ok(), "the commit is resumed");
        assert!(t.fail(TransactionError::Abortable {
            code: None,
            message: "x".into(),
        }));
        assert!(t.enter_abort().is_ok(), "an abortable commit is aborted");
    }
}
