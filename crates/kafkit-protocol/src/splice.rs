//! Encoding without copying large payloads: bytes and records fields spliced out of the buffer.
//!
//! A Produce request is mostly record batches that already sit in [`Bytes`]. Copying them into
//! the request buffer (on every attempt, retries included) costs a pass over every payload byte.
//! Inside [`collect`], every `bytes` or `records` field of at least `min_len` bytes that any
//! [`Message::encode`](crate::Message::encode) on this thread writes gets its length prefix in
//! the buffer as usual, but its payload is only noted as a [`Splice`] (a refcounted clone of the
//! field's `Bytes`): the buffer holds everything else. On the wire the payload follows the
//! buffer's bytes up to [`Splice::at`]; a vectored write (`writev`) sends the pieces in order
//! without joining them.
//!
//! The sizes [`Message::compute_size`](crate::Message::compute_size) reports are unchanged (they
//! are the sizes on the wire). Positions are offsets into the one buffer the encoding writes to:
//! encode into a single buffer inside one [`collect`] call.
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use kafkit_protocol::Message;
//! use kafkit_protocol::messages::ProduceRequest;
//! use kafkit_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
//!
//! let batch = Bytes::from(vec![7u8; 4096]);
//! let req = ProduceRequest::default().with_acks(-1).with_timeout_ms(30_000).with_topic_data(
//!     vec![TopicProduceData::default().with_name("t".into()).with_partition_data(vec![
//!         PartitionProduceData::default().with_index(0).with_records(Some(batch.clone())),
//!     ])],
//! );
//! let mut head = BytesMut::new();
//! let (r, splices) = kafkit_protocol::splice::collect(1024, || req.encode(&mut head, 9));
//! r.unwrap();
//! assert_eq!(splices.len(), 1);
//! assert_eq!(splices[0].data.as_ptr(), batch.as_ptr()); // the batch itself, not a copy
//! assert_eq!(head.len() + 4096, req.compute_size(9).unwrap());
//!
//! // Joined, the pieces are exactly the plain encoding.
//! let mut plain = BytesMut::new();
//! req.encode(&mut plain, 9).unwrap();
//! assert_eq!(kafkit_protocol::splice::join(&head, &splices), plain.to_vec());
//! ```

use std::cell::RefCell;

use bytes::Bytes;

/// A payload left out of an encoded buffer: on the wire, `data` follows the buffer's first
/// `at` bytes (and precedes the rest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splice {
    /// Offset in the buffer after which `data` goes; splices are in increasing `at` order
    /// (equal offsets keep their order).
    pub at: usize,
    /// The field's payload: a refcounted clone of the message's `Bytes`, no copy.
    pub data: Bytes,
}

struct Collector {
    min_len: usize,
    splices: Vec<Splice>,
}

thread_local! {
    static ACTIVE: RefCell<Option<Collector>> = const { RefCell::new(None) };
}

/// Runs `f` with splicing on for this thread and returns its result with the payloads left out
/// of the buffer (see the [module docs](self)): every bytes or records field of at least
/// `min_len` bytes (`min_len` 0 splices every non-empty one) that `f` encodes.
///
/// A nested call collects on its own and restores the outer collection when it returns (also
/// when `f` panics). An encoding that fails truncates its buffer to where it started and drops
/// the splices it had noted, so the splices always match the buffer.
pub fn collect<T>(min_len: usize, f: impl FnOnce() -> T) -> (T, Vec<Splice>) {
    collect_into(min_len, Vec::new(), f)
}

/// [`collect`] into `splices` (emptied first) instead of a new list: a caller that keeps the
/// list from one encoding to the next (clearing it once the payloads are written) reuses its
/// memory, so that, once it has grown to the most splices an encoding takes, collecting
/// allocates nothing.
pub fn collect_into<T>(
    min_len: usize,
    mut splices: Vec<Splice>,
    f: impl FnOnce() -> T,
) -> (T, Vec<Splice>) {
    struct Restore(Option<Option<Collector>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(prev) = self.0.take() {
                ACTIVE.with(|a| *a.borrow_mut() = prev);
            }
        }
    }
    let prev = ACTIVE.with(|a| {
        splices.clear();
        a.borrow_mut().replace(Collector {
            min_len: min_len.max(1),
            splices,
        })
    });
    let restore = Restore(Some(prev));
    let out = f();
    let mine = ACTIVE.with(|a| a.borrow_mut().take());
    drop(restore);
    (out, mine.map(|c| c.splices).unwrap_or_default())
}

/// The bytes on the wire for `head` with `splices` put back: what the plain encoding writes.
/// For tests and for writers that cannot write vectored; `splices` must be in `at` order and
/// within `head`.
pub fn join(head: &[u8], splices: &[Splice]) -> Vec<u8> {
    let total = head.len() + splices.iter().map(|s| s.data.len()).sum::<usize>();
    let mut out = Vec::with_capacity(total);
    let mut from = 0;
    for s in splices {
        let at = s.at.clamp(from, head.len());
        out.extend_from_slice(&head[from..at]);
        out.extend_from_slice(&s.data);
        from = at;
    }
    out.extend_from_slice(&head[from..]);
    out
}

/// Notes `data`, about to be written at offset `at`, as a splice when a collection is active
/// and it is long enough. Returns whether it was taken (the caller then writes nothing).
pub(crate) fn offer(at: usize, data: &Bytes) -> bool {
    ACTIVE.with(|a| match a.borrow_mut().as_mut() {
        Some(c) if data.len() >= c.min_len => {
            c.splices.push(Splice {
                at,
                data: data.clone(),
            });
            true
        }
        _ => false,
    })
}

/// Drops the splices noted after offset `start` (an encoding that began there failed and its
/// buffer was truncated back to `start`).
pub(crate) fn forget_after(start: usize) {
    ACTIVE.with(|a| {
        if let Some(c) = a.borrow_mut().as_mut() {
            c.splices.retain(|s| s.at <= start);
        }
    });
}

/// The bytes of the splices noted after offset `start` (part of a frame that began there).
pub(crate) fn spliced_len_after(start: usize) -> usize {
    ACTIVE.with(|a| {
        a.borrow().as_ref().map_or(0, |c| {
            c.splices
                .iter()
                .filter(|s| s.at > start)
                .map(|s| s.data.len())
                .sum()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;
    use crate::messages::{ProduceRequest, produce_request};
    use bytes::BytesMut;
    use proptest::prelude::*;

    fn produce(batches: &[usize]) -> ProduceRequest {
        let parts = batches
            .iter()
            .enumerate()
            .map(|(i, n)| {
                produce_request::PartitionProduceData::default()
                    .with_index(i as i32)
                    .with_records(Some(Bytes::from(vec![i as u8; *n])))
            })
            .collect();
        ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(1000)
            .with_topic_data(vec![
                produce_request::TopicProduceData::default()
                    .with_name("topic".into())
                    .with_partition_data(parts),
            ])
    }

    proptest! {
        /// Every version, any batch sizes and threshold: the joined pieces equal the plain
        /// encoding, and exactly the fields at or over the threshold are spliced, uncopied.
        #[test]
        fn joined_pieces_are_the_plain_encoding(
            sizes in proptest::collection::vec(0usize..3000, 0..12),
            min_len in 0usize..2000,
            version in 3i16..=11,
        ) {
            let req = produce(&sizes);
            let mut plain = BytesMut::new();
            req.encode(&mut plain, version).unwrap();
            let mut head = BytesMut::new();
            head.extend_from_slice(b"hdr");
            let (r, splices) = collect(min_len, || req.encode(&mut head, version));
            r.unwrap();
            let expect = sizes.iter().filter(|n| **n >= min_len.max(1)).count();
            prop_assert_eq!(splices.len(), expect);
            let parts = &req.topic_data[0].partition_data;
            for s in &splices {
                prop_assert!(parts.iter().any(|p| p.records.as_ref().unwrap().as_ptr() == s.data.as_ptr()));
            }
            let joined = join(&head, &splices);
            prop_assert_eq!(&joined[..3], b"hdr");
            prop_assert_eq!(&joined[3..], &plain[..]);
        }
    }

    #[test]
    fn a_request_frame_counts_its_spliced_payloads_in_its_size() {
        let req = produce(&[3000, 10, 5000]);
        let mut plain = BytesMut::new();
        crate::write_request_frame(&mut plain, &req, 9, 7, Some("c")).unwrap();
        let mut head = BytesMut::new();
        let (r, splices) = collect(1000, || {
            crate::write_request_frame(&mut head, &req, 9, 7, Some("c"))
        });
        r.unwrap();
        assert_eq!(splices.len(), 2);
        assert_eq!(join(&head, &splices), plain.to_vec());
    }

    #[test]
    fn outside_a_collection_nothing_is_spliced() {
        let req = produce(&[5000]);
        let mut buf = BytesMut::new();
        req.encode(&mut buf, 9).unwrap();
        assert_eq!(buf.len(), req.compute_size(9).unwrap());
    }

    #[test]
    fn a_failed_encoding_drops_its_splices_and_a_nested_collection_restores_the_outer_one() {
        let good = produce(&[2000]);
        // A second topic whose name is too long to encode: the first topic's batch was noted
        // before the encoding failed.
        let mut bad = produce(&[2000]);
        let mut second = bad.topic_data[0].clone();
        second.name = "n".repeat(40_000);
        bad.topic_data.push(second);
        let mut buf = BytesMut::new();
        let ((), outer) = collect(100, || {
            good.encode(&mut buf, 9).unwrap();
            let len = buf.len();
            assert!(bad.encode(&mut buf, 9).is_err());
            assert_eq!(buf.len(), len, "truncated back");
            let (_, inner) = collect(100, || good.encode(&mut BytesMut::new(), 9));
            assert_eq!(inner.len(), 1);
        });
        assert_eq!(outer.len(), 1, "only the good request's batch: {outer:?}");
        assert_eq!(join(&buf, &outer).len(), good.compute_size(9).unwrap());
    }

    #[test]
    fn a_panic_inside_ends_the_collection() {
        let r = std::panic::catch_unwind(|| collect(1, || panic!("boom")));
        assert!(r.is_err());
        let req = produce(&[5000]);
        let mut buf = BytesMut::new();
        req.encode(&mut buf, 9).unwrap();
        assert_eq!(
            buf.len(),
            req.compute_size(9).unwrap(),
            "no collection left on"
        );
    }
}
