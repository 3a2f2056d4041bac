//! Hooks for the benches (docs/benchmarks.md), out of the production path: the Writer's CPU
//! path without a network or a runtime ([`encode_path`]), driving the phases as a sender
//! would. Re-exported, hidden, by `lib.rs`'s `bench` module.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafkit_protocol::Message;
use kafkit_protocol::messages::{ProduceRequest, ProduceResponse, produce_response};

use super::encode::{build_request, encode_batches, release_request_bytes};
use super::inner::Inner;
use super::sender::{count_request, plan_request};
use super::settle::{apply, judge};
use crate::error::Error;
use crate::error::produce::ProduceError;
use crate::ops::meter;

/// What [`encode_path`] did.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EncodePathStats {
    /// Records appended and acknowledged.
    pub records: u64,
    /// Produce requests built and encoded.
    pub requests: u64,
    /// Bytes of encoded Produce request bodies.
    pub request_bytes: u64,
}

/// Not part of the API (the benches' instruction counts, docs/benchmarks.md): runs the Writer's
/// CPU path for `records` records without a network or a runtime. Each record goes through
/// `try_send`'s steps (prepare, buffer permits, enqueue: the partition's batch), record `i` to
/// partition `i % partitions`, the partitions led by brokers `0..brokers` in turn. After every
/// `round` records each broker's plan is taken as its sender would once the linger passed:
/// the batches encoded (compressed), the Produce request built and encoded (version 9, as
/// `Conn` would frame it), then an answer (every partition written, made here, not decoded)
/// judged and applied, which resolves the futures and runs the `on_completion` callback.
/// `builder` gives the settings (its transport is never used); its default topic is set.
/// `futures`: each record's [`DeliveryFuture`](super::DeliveryFuture) is made and dropped
/// (`send`, `try_send`), else none is (`send_detached`).
///
/// # Errors
///
/// A record or setting the writer refuses, or a request that cannot be encoded.
#[doc(hidden)]
pub fn encode_path(
    builder: super::WriterBuilder,
    (partitions, brokers): (i32, i32),
    records: u64,
    round: u64,
    value: Bytes,
    futures: bool,
) -> Result<EncodePathStats, ProduceError> {
    let (partitions, brokers) = (partitions.max(1), brokers.max(1));
    let (_writer, inner) = offline_writer(builder, partitions, brokers)?;
    let mut stats = EncodePathStats::default();
    let mut kept = EncodeRoundLists::default();
    let round = round.max(1);
    for i in 0..records {
        let p = i32::try_from(i % partitions as u64).unwrap_or(0);
        // `send`'s way in: the slot's open batch without the state lock, else the state lock.
        let record = super::ProducerRecordRef::to_default_topic(&value).partition(p);
        match inner.send_at_once(record, futures)? {
            super::inner::AtOnce::Done(result) => drop(result?),
            super::inner::AtOnce::Wait(prepared) => {
                if inner.try_acquire(prepared.cost).is_err() {
                    encode_round(&inner, brokers, &mut kept, &mut stats)?;
                    inner.try_acquire(prepared.cost)?;
                }
                drop(inner.enqueue(&prepared, false).into_result(&prepared)?);
            }
        }
        if (i + 1) % round == 0 {
            encode_round(&inner, brokers, &mut kept, &mut stats)?;
        }
    }
    inner.lock().seal_all();
    encode_round(&inner, brokers, &mut kept, &mut stats)?;
    stats.records = inner.stats.snapshot(0, 0).records;
    Ok(stats)
}

/// [`encode_path`]'s writer: `builder`'s, with its default topic set to one of `partitions`
/// partitions, partition `p` led by broker `p % brokers`, and no tasks (the caller plays the
/// senders' part). The [`Writer`](super::Writer) is returned to be kept alive.
fn offline_writer(
    builder: super::WriterBuilder,
    partitions: i32,
    brokers: i32,
) -> Result<(super::Writer, Arc<Inner>), ProduceError> {
    const TOPIC: &str = "encode-path";
    let builder = builder.topic(TOPIC);
    let transport = builder.transport_ref().clone();
    let config = builder
        .validate()
        .map_err(|e| ProduceError::InvalidRecord(format!("the settings are refused: {e}")))?;
    let writer = super::Writer::start(transport, config);
    let inner = writer.inner.clone();
    {
        let mut st = inner.lock();
        st.set_partition_count(TOPIC, usize::try_from(partitions).unwrap_or(1));
        for p in 0..partitions {
            let id = st
                .part_id(TOPIC, p)
                .expect("the partition was just counted");
            st.set_leader(id, p % brokers);
        }
        // No sender tasks: the caller plays their part.
        for b in st.brokers.values_mut() {
            b.has_sender = true;
        }
    }
    Ok((writer, inner))
}

/// What [`encode_path`] keeps from one request to the next, as `Conn` and a broker would: the
/// request frame, its splice list, and the answer.
#[derive(Default)]
struct EncodeRoundLists {
    frame: bytes::BytesMut,
    splices: Vec<kafkit_protocol::splice::Splice>,
    answer: ProduceResponse,
}

/// One round of [`encode_path`]: every broker's requests until none has a batch left.
fn encode_round(
    inner: &Arc<Inner>,
    brokers: i32,
    kept: &mut EncodeRoundLists,
    stats: &mut EncodePathStats,
) -> Result<(), ProduceError> {
    let config = &inner.config;
    for broker in 0..brokers {
        loop {
            // As the sender would plan once the batches lingered.
            let at = Instant::now() + Duration::from_millis(config.linger_ms + 1);
            let (plan, lists) = plan_request(&mut inner.lock(), broker, at, config);
            inner.finish(plan.done);
            let Some(mut lists) = lists else {
                break;
            };
            encode_batches(
                config.compression,
                config.transactional_id.is_some(),
                &mut lists,
                plan.producer_id,
                plan.producer_epoch,
            );
            build_request(config, &mut lists);
            // What the sender records of a request (stats, KIP-714, the `metrics` feature's
            // batches), then its duration once answered.
            count_request(inner, broker, &lists);
            let started = meter::start();
            kept.frame.clear();
            // As `Conn` encodes a request: the batches stay out of the frame (vectored writes).
            let splices = std::mem::take(&mut kept.splices);
            let (encoded, splices) =
                kafkit_protocol::splice::collect_into(crate::conn::SPLICE_MIN, splices, || {
                    lists.produce.encode(&mut kept.frame, 9)
                });
            kept.splices = splices;
            encoded.map_err(|e| ProduceError::from(Error::from(e)))?;
            stats.requests += 1;
            stats.request_bytes += (kept.frame.len()
                + kept.splices.iter().map(|s| s.data.len()).sum::<usize>())
                as u64;
            // Written by now, as `Conn` would have: the batches' bytes are not held past here,
            // so the ended batches' buffers can be reused (`Batch::into_spare`).
            kept.splices.clear();
            answer_every_partition(&lists.produce, &mut kept.answer);
            release_request_bytes(&mut lists.produce);
            inner.meter.request_ended(started, || None);
            judge(inner, broker, Ok(Some(&kept.answer)), &mut lists);
            apply(inner, broker, lists);
        }
    }
    Ok(())
}

/// Fills `answer` with a written entry (base offset 0) for every partition of `produce`, in
/// its order, reusing the entries of the last answer.
fn answer_every_partition(produce: &ProduceRequest, answer: &mut ProduceResponse) {
    answer.responses.truncate(produce.topic_data.len());
    for (i, t) in produce.topic_data.iter().enumerate() {
        if i == answer.responses.len() {
            answer.responses.push(Default::default());
        }
        let r = &mut answer.responses[i];
        if r.name != t.name {
            r.name.clone_from(&t.name);
        }
        r.partition_responses.clear();
        r.partition_responses
            .extend(t.partition_data.iter().map(|p| {
                produce_response::PartitionProduceResponse::default()
                    .with_index(p.index)
                    .with_base_offset(0)
            }));
    }
}

#[cfg(test)]
pub(super) mod tests {
    use crate::{Transport, Writer};

    /// An offline writer of one partition led by broker 0 (`offline_writer`), with a
    /// completion callback (so its batches keep timestamps too).
    pub(crate) fn offline() -> (Writer, std::sync::Arc<super::Inner>) {
        offline_of(1, |b| {
            b.acks(crate::conn::produce::Acks::Leader)
                .on_completion(|_, _| {})
        })
    }

    /// An offline writer of `partitions` partitions led by broker 0, not idempotent, with the
    /// settings `f` adds.
    fn offline_of(
        partitions: i32,
        f: impl FnOnce(crate::writer::WriterBuilder) -> crate::writer::WriterBuilder,
    ) -> (Writer, std::sync::Arc<super::Inner>) {
        let t = Transport::builder(["127.0.0.1:1"])
            .build()
            .expect("transport");
        let b = f(Writer::builder(t).enable_idempotence(false));
        super::offline_writer(b, partitions, 1).expect("offline writer")
    }

    /// Appends `n` records to the partition as `try_send` does; their futures.
    pub(crate) fn append(
        inner: &std::sync::Arc<super::Inner>,
        n: usize,
    ) -> Vec<crate::writer::DeliveryFuture> {
        (0..n)
            .map(|_| {
                let r = crate::writer::ProducerRecordRef::to_default_topic(b"value");
                let p = inner.prepare(r.partition(0), true).expect("prepared");
                inner.try_acquire(p.cost).expect("buffer space");
                inner
                    .enqueue(&p, false)
                    .into_result(&p)
                    .expect("appended")
                    .expect("a future was asked for")
            })
            .collect()
    }

    /// The open batch's shared slot and records memory, as addresses.
    fn open_batch(inner: &super::Inner) -> (usize, usize) {
        let st = inner.lock();
        let open = st.parts[0].slot.lock();
        let b = open.batch.as_ref().expect("an open batch");
        (
            std::sync::Arc::as_ptr(&b.shared) as usize,
            b.records_ptr() as usize,
        )
    }

    /// One request of the open batch, answered (written at offset 0) and applied.
    fn round(inner: &std::sync::Arc<super::Inner>) {
        let mut stats = super::EncodePathStats::default();
        let mut kept = super::EncodeRoundLists::default();
        super::encode_round(inner, 1, &mut kept, &mut stats).expect("round");
        assert_eq!(stats.requests, 1);
    }

    /// An answered batch's in-flight mark held its shared slot when the batch ended,
    /// so no slot was ever reused (an allocation per batch). Once the futures are gone, the
    /// next batch is made of the slot and the buffer of the one that ended.
    #[test]
    fn an_answered_batch_leaves_its_slot_and_buffer_to_the_next_one() {
        let (_w, inner) = offline();
        drop(append(&inner, 3));
        round(&inner);
        // A batch of the same size again: its buffer, from the first one's spare, has room.
        drop(append(&inner, 3));
        let second = open_batch(&inner);
        round(&inner);
        {
            let st = inner.lock();
            assert!(
                st.parts[0].in_flight.is_none(),
                "the mark went with the answer"
            );
            assert_eq!(st.spares.len(), 1);
            let spare = st.spares.last().expect("the ended batch's spare");
            assert!(spare.has_slot() && spare.has_buffer());
        }
        drop(append(&inner, 1));
        assert_eq!(open_batch(&inner), second, "the same slot and buffer");
        assert_eq!(inner.lock().spares.len(), 0);
    }

    /// A slot that a record's future still holds is not reused (the future reads the outcome
    /// from it); the buffer is.
    #[test]
    fn a_slot_a_future_holds_is_not_reused() {
        let (_w, inner) = offline();
        drop(append(&inner, 3));
        round(&inner);
        let mut futures = append(&inner, 3);
        let kept = futures.pop().expect("three futures");
        drop(futures);
        let second = open_batch(&inner);
        round(&inner);
        {
            let st = inner.lock();
            let spare = st.spares.last().expect("the ended batch's spare");
            assert!(!spare.has_slot() && spare.has_buffer());
        }
        drop(append(&inner, 1));
        let third = open_batch(&inner);
        assert_ne!(third.0, second.0, "a new slot");
        assert_eq!(third.1, second.1, "the same buffer");
        let mut kept = std::pin::pin!(kept);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match std::future::Future::poll(kept.as_mut(), &mut cx) {
            std::task::Poll::Ready(Ok(md)) => assert_eq!((md.partition, md.offset), (0, 2)),
            other => panic!("{other:?}"),
        }
    }

    /// `send`'s way in for partition `p` of an offline writer, as `Writer::send_ref`.
    fn send_at_once(
        inner: &std::sync::Arc<super::Inner>,
        p: i32,
        value: &[u8],
    ) -> Option<crate::writer::DeliveryFuture> {
        let r = crate::writer::ProducerRecordRef::to_default_topic(value).partition(p);
        match inner.send_at_once(r, true).expect("taken") {
            super::super::inner::AtOnce::Done(r) => r.expect("appended"),
            super::super::inner::AtOnce::Wait(_) => panic!("the record had to wait"),
        }
    }

    /// A record that joins its partition's open batch takes that partition's slot lock only:
    /// it is taken while another thread holds the writer's state lock (before the slots, every
    /// record took the state lock and this waited).
    #[test]
    fn a_record_joins_the_open_batch_while_the_state_lock_is_held() {
        let (_w, inner) = offline_of(2, |b| b.linger(std::time::Duration::from_secs(60)));
        // The first record starts the batch (state lock), the second joins it (slot lock).
        drop(send_at_once(&inner, 0, b"first"));
        let held = inner.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        let sender = {
            let inner = inner.clone();
            std::thread::spawn(move || {
                drop(send_at_once(&inner, 0, b"second"));
                let _ = tx.send(());
            })
        };
        let joined = rx.recv_timeout(std::time::Duration::from_secs(10));
        drop(held);
        sender.join().expect("the sending thread");
        assert!(joined.is_ok(), "the record waited for the state lock");
        let st = inner.lock();
        assert_eq!(st.buffered().0, 2);
        assert_eq!(st.open_batches, 1);
    }

    /// The fast path charges the slot's credit, taken from the buffer in chunks; that credit is
    /// room all the same: `try_send` of a record as large as what is left, credit included,
    /// gets it (the slots give their credit back first).
    #[test]
    fn room_held_as_a_slot_s_credit_is_given_back_to_a_record_that_needs_it() {
        let (_w, inner) = offline_of(2, |b| {
            b.batch_size(1 << 20)
                .buffer_memory(1 << 20)
                .linger(std::time::Duration::from_secs(60))
        });
        drop(send_at_once(&inner, 0, b"first"));
        drop(send_at_once(&inner, 0, b"second"));
        let (_, buffered) = inner.lock().buffered();
        let free = inner.bytes.available_permits();
        let credit = inner.lock().parts[0].slot.lock().credit_bytes;
        assert!(credit > 0, "the second record took a chunk of credit");
        assert_eq!(free + credit + buffered, 1 << 20, "no byte lost or made");
        // More than the semaphore has, less than it has with the credit back.
        inner
            .try_acquire(free + credit)
            .expect("room, credit included");
        assert_eq!(inner.lock().parts[0].slot.lock().credit_bytes, 0);
        assert_eq!(inner.bytes.available_permits(), 0);
        inner.release(free + credit, 1);
    }

    /// A partition without a leader never takes the fast path (the state lock may learn the
    /// leader from cached metadata, and must wake its sender).
    #[test]
    fn an_unrouted_partition_takes_the_state_lock() {
        let (_w, inner) = offline();
        drop(send_at_once(&inner, 0, b"first"));
        {
            let mut st = inner.lock();
            st.set_leader(0, -1);
            assert!(!st.parts[0].slot.lock().routed);
        }
        let mut p = inner
            .prepare(
                crate::writer::ProducerRecordRef::to_default_topic(b"second").partition(0),
                true,
            )
            .expect("prepared");
        assert!(inner.append_fast(&mut p).is_none());
        inner.lock().set_leader(0, 0);
        assert!(inner.append_fast(&mut p).is_some());
    }
}
