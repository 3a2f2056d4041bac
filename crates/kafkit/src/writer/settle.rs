//! The settle phase of a Produce request: its result judged into one verdict per batch
//! ([`judge`]), and the verdicts applied to the writer's state ([`apply`], [`Settling`]):
//! written, retried (KIP-951 leader hints first), split, or a producer epoch bump
//! (KIP-360). With `accumulator::sequence_fate` this is the canonical Produce retry rule.
//! Imports the lists passed between phases (`lists.rs`), the state and the engine
//! (`inner.rs`), never a task file.

use std::sync::Arc;
use std::time::Instant;

use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::{ProduceResponse, produce_response};

use super::accumulator::{Ending, ProducerStatus, State, may_have_appended};
use super::batch::{Batch, Outcome, PartId};
use super::inner::Inner;
use super::lists::{RequestLists, SendError, Verdict};
use crate::error::Error;
use crate::error::produce::ProduceError;

/// Most request lists kept ([`RequestLists`]): more than the requests a writer has in flight
/// at once (brokers x `max_in_flight`) only after a burst of brokers.
const MAX_REQUEST_LISTS: usize = 64;

/// Keeps `lists` for the next request (emptied; the bound drops the rest).
pub(super) fn keep_lists(st: &mut State, mut lists: RequestLists) {
    if st.request_lists.len() >= MAX_REQUEST_LISTS {
        return;
    }
    lists.request.clear();
    lists.parts.clear();
    lists.sent.clear();
    lists.verdicts.clear();
    lists.sizes.clear();
    lists.hints.clear();
    lists.topic_ids.clear();
    lists.done.clear();
    lists.held.clear();
    lists.wake_brokers.clear();
    lists.stale.clear();
    st.request_lists.push(lists);
}

/// Turns the request's result into one verdict per batch (`lists.sent` into `lists.verdicts`):
/// every batch written (acks=0), every batch retried or failed alike (no response:
/// [`judge_failure`]), or each batch by its partition's answer ([`judge_response`]).
pub(super) fn judge(
    inner: &Inner,
    broker: i32,
    result: Result<Option<&ProduceResponse>, &SendError>,
    lists: &mut RequestLists,
) {
    // One verdict per batch: grown once, not once per doubling.
    lists.verdicts.reserve(lists.sent.len());
    match result {
        Ok(Some(resp)) => judge_response(inner, broker, resp, lists),
        Ok(None) => {
            for (id, batch, _) in lists.sent.drain(..) {
                let v = Verdict::Done(Outcome::Written {
                    base_offset: -1,
                    log_append_time: -1,
                });
                lists.verdicts.push((id, batch, v));
            }
        }
        Err(e) => {
            for (id, mut batch, _) in lists.sent.drain(..) {
                // Whatever the verdict, the batch remembers that the broker may have it.
                batch.maybe_written |= e.maybe_written;
                lists.verdicts.push((id, batch, judge_failure(e)));
            }
        }
    }
}

/// The verdict for each batch of a request that got no response.
fn judge_failure(e: &SendError) -> Verdict {
    if e.retriable {
        Verdict::Retry {
            error: e.error.clone(),
            unroute: e.unroute,
            hint: None,
            maybe_written: e.maybe_written,
        }
    } else {
        Verdict::Done(Outcome::failed(e.error.clone()))
    }
}

/// Honours the response's throttle time and matches each batch of `lists.sent` to its
/// partition's answer ([`judge_partition`]), into `lists.verdicts`; a partition the broker left
/// out fails with `UNKNOWN_SERVER_ERROR`.
fn judge_response(inner: &Inner, broker: i32, resp: &ProduceResponse, lists: &mut RequestLists) {
    if resp.throttle_time_ms > 0 {
        inner.meter.throttled(broker, resp.throttle_time_ms);
        inner.throttle(broker, resp.throttle_time_ms);
    }
    for ep in &resp.node_endpoints {
        tracing::trace!(node = ep.node_id, host = %ep.host, port = ep.port, "produce: leader endpoint hint");
    }
    let RequestLists {
        sent,
        verdicts,
        hints,
        ..
    } = lists;
    hints.clear();
    let mut index = AnswerIndex::new(&resp.responses);
    for (id, batch, _) in sent.drain(..) {
        let answer = index.take(&batch.shared.topic, batch.shared.partition);
        let Some(p) = answer else {
            let error = ProduceError::Broker {
                code: ErrorCode::UNKNOWN_SERVER_ERROR,
                message: Some("the broker did not answer for this partition".into()),
                record_error: None,
            };
            verdicts.push((id, batch, Verdict::Done(Outcome::failed(error))));
            continue;
        };
        let v = judge_partition(inner, &batch, p);
        if let Verdict::Retry {
            hint: Some((leader, epoch)),
            ..
        } = &v
        {
            hints.push((verdicts.len(), *leader, *epoch));
        }
        verdicts.push((id, batch, v));
    }
    apply_leader_hints(inner, &resp.node_endpoints, hints, verdicts);
}

/// Finds each sent batch's partition in a Produce answer. A broker answers in the request's
/// order, so the answer is read in its own order (one cursor per topic, no map); the first
/// partition out of that order turns the rest into a map of the entries not taken yet. Each
/// entry is taken at most once.
struct AnswerIndex<'a> {
    topics: &'a [produce_response::TopicProduceResponse],
    /// Per topic (up to [`AnswerIndex::CURSORS`]), its next partition entry in order.
    cursors: [usize; AnswerIndex::CURSORS],
    /// The topic of the last look-up (a request carries its topics' batches together).
    last: usize,
    /// Once the order broke: (topic's place, partition) -> entry, for what is left.
    map:
        Option<rustc_hash::FxHashMap<(usize, i32), &'a produce_response::PartitionProduceResponse>>,
    /// Once the order broke: each topic name's first place (look-ups stay O(1) however many
    /// topics an answer names).
    places: rustc_hash::FxHashMap<&'a str, usize>,
}

impl<'a> AnswerIndex<'a> {
    /// Topics read in order; an answer with more starts as a map.
    const CURSORS: usize = 8;

    fn new(topics: &'a [produce_response::TopicProduceResponse]) -> Self {
        let mut index = AnswerIndex {
            topics,
            cursors: [0; Self::CURSORS],
            last: 0,
            map: None,
            places: rustc_hash::FxHashMap::default(),
        };
        if topics.len() > Self::CURSORS {
            index.switch_to_map();
        }
        index
    }

    /// The place of `topic` in the answer (its first entry, as a map keeps the first).
    fn topic(&mut self, topic: &str) -> Option<usize> {
        if self.topics.get(self.last).is_some_and(|t| t.name == topic) {
            return Some(self.last);
        }
        let i = if self.map.is_some() {
            *self.places.get(topic)?
        } else {
            // At most `CURSORS` topics.
            self.topics.iter().position(|t| t.name == topic)?
        };
        self.last = i;
        Some(i)
    }

    /// Switches to the map: every entry not taken yet, keyed by its topic's first place.
    fn switch_to_map(&mut self) {
        let mut map = rustc_hash::FxHashMap::default();
        for (i, t) in self.topics.iter().enumerate() {
            let first = *self.places.entry(t.name.as_str()).or_insert(i);
            let from = self.cursors.get(i).copied().unwrap_or(0);
            for p in t.partition_responses.iter().skip(from) {
                map.entry((first, p.index)).or_insert(p);
            }
        }
        self.map = Some(map);
    }

    /// The answer for `partition` of `topic`, once.
    fn take(
        &mut self,
        topic: &str,
        partition: i32,
    ) -> Option<&'a produce_response::PartitionProduceResponse> {
        let t = self.topic(topic)?;
        if self.map.is_none() {
            let topics = self.topics;
            let at = self.cursors[t];
            if let Some(p) = topics[t].partition_responses.get(at)
                && p.index == partition
            {
                self.cursors[t] = at + 1;
                return Some(p);
            }
            self.switch_to_map();
        }
        self.map.as_mut()?.remove(&(t, partition))
    }
}

/// The verdict for `batch` from its partition's answer `p`: written (a duplicate sequence
/// included), an epoch bump (sequence errors, idempotent only), a split (too large, more than
/// one record), a retry (retriable codes; a KIP-951 leader hint goes to the transport's cache
/// first, see [`apply_leader_hint`]), or failed.
fn judge_partition(
    inner: &Inner,
    batch: &Batch,
    p: &produce_response::PartitionProduceResponse,
) -> Verdict {
    let code = p.error_code;
    let error = || ProduceError::Broker {
        code,
        message: p.error_message.clone(),
        record_error: None,
    };
    if code.is_ok() || code == ErrorCode::DUPLICATE_SEQUENCE_NUMBER {
        Verdict::Done(Outcome::Written {
            base_offset: p.base_offset,
            log_append_time: p.log_append_time_ms,
        })
    } else if inner.config.idempotent
        && inner.config.transactional_id.is_none()
        && (code == ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER
            || code == ErrorCode::UNKNOWN_PRODUCER_ID)
    {
        // A transactional producer fails the batch instead: the transaction becomes
        // abortable and its abort bumps the epoch through the coordinator (KIP-360).
        Verdict::Bump(error())
    } else if (code == ErrorCode::MESSAGE_TOO_LARGE || code == ErrorCode::RECORD_LIST_TOO_LARGE)
        && batch.count() > 1
    {
        // Above the topic's max.message.bytes: halve until each record stands alone, so
        // only a record too large by itself fails (as the Java client does).
        Verdict::Split(error())
    } else if code.is_retriable() {
        Verdict::Retry {
            error: error(),
            unroute: code.is_invalid_metadata(),
            hint: (p.current_leader.leader_id >= 0)
                .then_some((p.current_leader.leader_id, p.current_leader.leader_epoch)),
            // Only a code that leaves the append open marks the batch: the others prove the
            // broker refused it before appending (a retry with a new epoch is then safe).
            maybe_written: may_have_appended(code),
        }
    } else {
        Verdict::Done(Outcome::Failed {
            error: error(),
            record_errors: p
                .record_errors
                .iter()
                .map(|r| (r.batch_index, r.batch_index_error_message.clone()))
                .collect(),
        })
    }
}

/// Tells the transport's metadata cache every KIP-951 leader hint of one response at once
/// (`hints`: the verdict's index, leader id and epoch), with the endpoints the response carried:
/// one new cache snapshot per response, not one per partition.
fn apply_leader_hints(
    inner: &Inner,
    endpoints: &[produce_response::NodeEndpoint],
    hints: &[(usize, i32, i32)],
    verdicts: &[(PartId, Batch, Verdict)],
) {
    if hints.is_empty() {
        return;
    }
    let leader_hints: Vec<crate::transport::LeaderHint<'_>> = hints
        .iter()
        .map(|&(i, leader_id, leader_epoch)| {
            let shared = &verdicts[i].1.shared;
            crate::transport::LeaderHint {
                topic: &shared.topic,
                partition: shared.partition,
                leader_id,
                leader_epoch,
            }
        })
        .collect();
    let endpoints: Vec<(i32, &str, i32)> = endpoints
        .iter()
        .map(|e| (e.node_id, e.host.as_str(), e.port))
        .collect();
    let applied = inner.transport.update_leaders(&leader_hints, &endpoints);
    tracing::debug!(
        hints = hints.len(),
        applied,
        "produce: leader hints (KIP-951)"
    );
}

/// Applies `lists.verdicts` under the lock ([`Settling::verdict`]), then ends the finished
/// batches and wakes whoever has work ([`Settling::release`], which keeps the lists for the
/// next request).
pub(super) fn apply(inner: &Arc<Inner>, broker: i32, mut lists: RequestLists) {
    let mut verdicts = std::mem::take(&mut lists.verdicts);
    let mut settling = Settling::new(inner, broker, verdicts.len(), lists);
    {
        let mut st = inner.lock();
        if let Some(b) = st.brokers.get_mut(&broker) {
            b.in_flight = b.in_flight.saturating_sub(1);
        }
        for (id, batch, verdict) in verdicts.drain(..) {
            settling.verdict(&mut st, id, batch, verdict);
        }
    }
    settling.lists.verdicts = verdicts;
    let lists = &mut settling.lists;
    inner.finish_releasing(&mut lists.done, &lists.held);
    settling.release();
}

/// Applying one request's verdicts: what they decided that is left to do once the writer's
/// lock is released.
struct Settling<'a> {
    inner: &'a Arc<Inner>,
    now: Instant,
    /// The request's lists, of which `done` (batches that ended; their futures resolve after
    /// the lock is released), `held` (the partitions of the batches in `done` ended by a
    /// verdict, not by expiry: they stay "in flight" until their futures resolve, so a `flush`
    /// that starts now waits for them too; [`Inner::finish_releasing`] clears the marks),
    /// `wake_brokers` (senders with work: the request's broker, new leaders) and `stale`
    /// (topics whose metadata was marked stale already: once per response is enough).
    lists: RequestLists,
    /// The router has work: a leader to find, or a producer epoch to bump.
    wake_router: bool,
    /// The broker that answered.
    broker: i32,
}

impl<'a> Settling<'a> {
    /// For the verdicts of `batches` batches, with `lists` (the lists that take one entry per
    /// batch grow once, at their size, and not at all once they have grown).
    fn new(inner: &'a Arc<Inner>, broker: i32, batches: usize, mut lists: RequestLists) -> Self {
        lists.done.clear();
        lists.done.reserve(batches);
        lists.held.clear();
        lists.held.reserve(batches);
        lists.wake_brokers.clear();
        lists.wake_brokers.push(broker);
        lists.stale.clear();
        Settling {
            inner,
            now: Instant::now(),
            lists,
            wake_router: false,
            broker,
        }
    }

    /// Applies one batch's verdict to the state `st`.
    fn verdict(&mut self, st: &mut State, id: PartId, mut batch: Batch, verdict: Verdict) {
        if matches!(verdict, Verdict::Done(_)) {
            self.lists.held.push(id);
        } else {
            st.parts[id].in_flight = None;
        }
        match verdict {
            Verdict::Done(outcome) => {
                let ending = match outcome {
                    Outcome::Written { .. } => Ending::Written,
                    Outcome::Failed { .. } => Ending::Failed,
                };
                self.wake_router |= st.settle_sequence(id, &batch, ending);
                self.lists.done.push((batch, outcome));
            }
            Verdict::Retry {
                error,
                unroute,
                hint,
                maybe_written,
            } => {
                self.inner.stats.retried();
                batch.maybe_written |= maybe_written;
                self.wake_router |= st.settle_sequence(id, &batch, Ending::Resend);
                self.retry(st, id, batch, error, hint, unroute);
            }
            Verdict::Split(error) => self.split(st, id, batch, &error),
            Verdict::Bump(error) => self.bump(st, id, batch, error),
        }
    }

    /// A retriable failure: to the leader the response named when the writer knows that broker
    /// (KIP-951; no backoff needed), else back to the router when the leader must be found
    /// again (`unroute`), and back in its partition's queue.
    fn retry(
        &mut self,
        st: &mut State,
        id: PartId,
        batch: Batch,
        error: ProduceError,
        hint: Option<(i32, i32)>,
        unroute: bool,
    ) {
        let inner = self.inner;
        tracing::debug!(
            topic = %batch.shared.topic,
            partition = batch.shared.partition,
            %error,
            "produce: retrying batch"
        );
        let known = hint.filter(|(leader, _)| {
            st.brokers.contains_key(leader)
                || inner
                    .transport
                    .cached_metadata()
                    .is_some_and(|m| m.broker(*leader).is_some())
        });
        if let Some((leader, _)) = known {
            if st.set_leader(id, leader) {
                inner.spawn_sender(st, leader);
            }
            self.lists.wake_brokers.push(leader);
        } else if unroute {
            // Only this batch's topic is looked up again (once per response).
            if !self.lists.stale.contains(&batch.shared.topic) {
                inner.transport.invalidate_topics([&*batch.shared.topic]);
                self.lists.stale.push(batch.shared.topic.clone());
            }
            st.set_leader(id, -1);
            self.wake_router = true;
        }
        self.wake_router |= st.requeue(
            id,
            batch,
            error,
            self.now,
            &inner.config,
            &mut self.lists.done,
        );
        if known.is_some_and(|(leader, _)| leader != self.broker) {
            // The response named a new leader (KIP-951): no backoff needed. A hint naming the
            // broker that just refused the batch keeps the backoff (as Java's, which skips it
            // only when the leader changed): retried at once it would refuse again, in a loop.
            st.parts[id].retry_at = None;
        }
    }

    /// The broker found the batch too large: its two halves go back to the head of the queue.
    fn split(&mut self, st: &mut State, id: PartId, mut batch: Batch, error: &ProduceError) {
        self.inner.stats.retried();
        tracing::debug!(
            topic = %batch.shared.topic,
            partition = batch.shared.partition,
            records = batch.count(),
            %error,
            "produce: splitting a batch the broker found too large"
        );
        // (A split's sequences fare as a failure's: the same whether or not it splits.)
        self.wake_router |= st.settle_sequence(id, &batch, Ending::Split);
        let (first, second) = match batch.split() {
            Ok(halves) => halves,
            Err(e) => {
                // Its own records section did not decode again (not expected): the batch ends
                // with the error rather than being sent as it is again.
                tracing::error!(error = %e, "produce: a batch to split could not be split");
                st.ending.push(batch.shared.clone());
                self.lists
                    .done
                    .push((batch, Outcome::failed(Error::from(e).into())));
                return;
            }
        };
        let part = &mut st.parts[id];
        part.batches.push_front(second);
        part.batches.push_front(first);
        st.relist(id);
    }

    /// A sequence error: the router bumps the producer epoch (KIP-360) unless an earlier
    /// error of this generation did already, and the batch goes back in its queue.
    fn bump(&mut self, st: &mut State, id: PartId, batch: Batch, error: ProduceError) {
        if st.settle_sequence(id, &batch, Ending::SequenceError) {
            tracing::info!(%error, "produce: sequence error; bumping the producer epoch (KIP-360)");
            self.wake_router = true;
        }
        self.inner.stats.retried();
        let config = &self.inner.config;
        self.wake_router |= st.requeue(id, batch, error, self.now, config, &mut self.lists.done);
    }

    /// After the ended batches' futures resolved and their partitions were freed
    /// ([`Inner::finish_releasing`]): the router and senders with work are woken, and the lists
    /// are kept for the next request.
    fn release(mut self) {
        let lists = &mut self.lists;
        {
            let st = self.inner.lock();
            if matches!(st.producer.status, ProducerStatus::Needed) {
                // A bump may be waiting for this request to be over.
                self.wake_router = true;
            }
            for &id in &lists.held {
                let leader = st.parts[id].leader;
                if leader >= 0 && !lists.wake_brokers.contains(&leader) {
                    lists.wake_brokers.push(leader);
                }
            }
        }
        if self.wake_router {
            self.inner.router.notify_one();
        }
        for &b in &lists.wake_brokers {
            self.inner.broker_notify(b).notify_one();
        }
        // Not in the lock above: the senders are woken after it is released.
        let lists = std::mem::take(&mut self.lists);
        keep_lists(&mut self.inner.lock(), lists);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::writer::ProduceError;
    use crate::writer::bench::tests::{append, offline};

    /// An answer of `topics`, each with its partitions' entries (base offset = 100 x
    /// partition + the topic's place, to tell entries apart).
    fn answer(topics: &[(&str, &[i32])]) -> Vec<super::produce_response::TopicProduceResponse> {
        use super::produce_response::{PartitionProduceResponse, TopicProduceResponse};
        topics
            .iter()
            .enumerate()
            .map(|(i, (name, parts))| {
                TopicProduceResponse::default()
                    .with_name((*name).to_string())
                    .with_partition_responses(
                        parts
                            .iter()
                            .map(|&p| {
                                PartitionProduceResponse::default()
                                    .with_index(p)
                                    .with_base_offset(i64::from(p) * 100 + i as i64)
                            })
                            .collect(),
                    )
            })
            .collect()
    }

    #[test]
    fn answers_are_found_in_order_out_of_order_and_only_once() {
        let resp = answer(&[("a", &[0, 1, 2]), ("b", &[5, 6]), ("a", &[9])]);
        let offset = |p: Option<&super::produce_response::PartitionProduceResponse>| {
            p.map(|p| p.base_offset)
        };
        // In the answer's order: every entry, then nothing more.
        let mut ix = super::AnswerIndex::new(&resp);
        for (t, p, want) in [
            ("a", 0, 0),
            ("a", 1, 100),
            ("a", 2, 200),
            ("b", 5, 501),
            ("b", 6, 601),
        ] {
            assert_eq!(offset(ix.take(t, p)), Some(want), "{t}/{p}");
        }
        assert!(ix.map.is_none(), "read in order, no map");
        // A repeated topic name: its later entries are found too (under its first place).
        assert_eq!(offset(ix.take("a", 9)), Some(902));
        assert_eq!(offset(ix.take("a", 0)), None, "taken once");
        assert_eq!(offset(ix.take("c", 0)), None, "a topic not in the answer");

        // Out of order: what the cursors passed is not found again; the rest is.
        let mut ix = super::AnswerIndex::new(&resp);
        assert_eq!(offset(ix.take("a", 0)), Some(0));
        assert_eq!(offset(ix.take("b", 6)), Some(601));
        assert!(ix.map.is_some());
        assert_eq!(offset(ix.take("a", 0)), None, "taken before the map");
        for (t, p, want) in [("a", 2, 200), ("b", 5, 501), ("a", 1, 100), ("a", 9, 902)] {
            assert_eq!(offset(ix.take(t, p)), Some(want), "{t}/{p}");
        }
        assert_eq!(offset(ix.take("b", 6)), None, "taken once");
        assert_eq!(
            offset(ix.take("a", 3)),
            None,
            "a partition not in the answer"
        );

        // More topics than cursors: a map from the start, every entry found once.
        let names: Vec<String> = (0..20).map(|i| format!("t{i}")).collect();
        let many: Vec<(&str, &[i32])> = names.iter().map(|n| (n.as_str(), &[3][..])).collect();
        let resp = answer(&many);
        let mut ix = super::AnswerIndex::new(&resp);
        assert!(ix.map.is_some());
        for (i, n) in names.iter().enumerate().rev() {
            assert_eq!(offset(ix.take(n, 3)), Some(300 + i as i64), "{n}");
            assert_eq!(offset(ix.take(n, 3)), None, "{n} once");
        }
    }

    /// A retried batch whose delivery timeout has passed ends in `State::requeue`
    /// (`DeliveryTimeout`). Between `apply`'s lock and `Inner::finish_releasing` its partition
    /// is no longer marked in flight and the batch is in no queue: a `flush` that starts then
    /// (`State::seal_all`) still gets a handle on it (`State::ending`), so it waits for the
    /// record's outcome (and `commit_transaction`, which flushes and then checks the
    /// transaction's error, sees the failure). The handle goes once the batch ended.
    #[test]
    fn a_flush_sees_a_retried_batch_that_expires_before_it_ends() {
        let (_w, inner) = offline();
        let futures = append(&inner, 1);
        let config = &inner.config;
        let at = std::time::Instant::now() + Duration::from_millis(config.linger_ms + 1);
        let mut request = inner.lock().plan(0, at, config).request;
        assert_eq!(request.len(), 1);
        let (id, mut batch) = request.pop().expect("one batch");
        // Its delivery timeout has passed by the time its retriable answer comes.
        batch.deadline = std::time::Instant::now();
        let mut settling = super::Settling::new(&inner, 0, 1, super::RequestLists::default());
        {
            let mut st = inner.lock();
            if let Some(b) = st.brokers.get_mut(&0) {
                b.in_flight = b.in_flight.saturating_sub(1);
            }
            let error = ProduceError::Broker {
                code: super::ErrorCode::NOT_LEADER_OR_FOLLOWER,
                message: None,
                record_error: None,
            };
            let verdict = super::Verdict::Retry {
                error,
                unroute: false,
                hint: None,
                maybe_written: false,
            };
            settling.verdict(&mut st, id, batch, verdict);
        }
        assert_eq!(settling.lists.done.len(), 1, "expired when requeued");
        let ending = settling.lists.done[0].0.shared.clone();
        // A flush that starts now, as `Writer::flush` does.
        let handles = inner.lock().seal_all();
        let pending = !ending.is_done();
        let waited_for = handles.iter().any(|h| std::sync::Arc::ptr_eq(h, &ending));
        let lists = &mut settling.lists;
        inner.finish_releasing(&mut lists.done, &lists.held);
        settling.release();
        drop(futures);
        assert!(pending, "the record has no outcome yet");
        assert!(
            waited_for,
            "flush has nothing to wait for while the record's outcome is pending"
        );
        assert!(ending.is_done());
        assert!(
            inner.lock().ending.is_empty(),
            "an ended batch's handle goes"
        );
    }
}
