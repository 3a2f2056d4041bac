//! A Produce answer read into the memory of the last one: the Writer's common case (every
//! partition written or refused with a bare code, no error message, no record errors, no tagged
//! fields) filled into a kept [`ProduceResponse`] with no allocation once its lists and names
//! have grown, where the generated decoder allocates the topic list, and a name and a partition
//! list per topic, for every answer. Any other answer (or bytes this reader does not accept) is
//! left to the generated decoder ([`read_answer`]), so what the Writer judges is always what
//! `ProduceResponse::decode` gives: the tests compare the two on random answers of every version.
//!
//! The wire format is the Produce response's (the protocol guide's "ProduceResponse"; flexible
//! from v9, KIP-482): `responses` (name, or topic id from v13 (KIP-516), partition responses: index, error code, base offset,
//! `log_append_time_ms` v2+, `log_start_offset` v5+, `record_errors` and `error_message` v8+),
//! `throttle_time_ms` v1+, and a tagged-fields section per struct from v9.

use bytes::Bytes;
use kafkit_protocol::messages::{ProduceResponse, produce_response};
use kafkit_protocol::{ErrorCode, Message};

/// Decodes the Produce answer `body` (the frame after its response header) at `version` into
/// `out`, reusing its memory when the answer is of the common shape (see the module docs), with
/// the generated decoder otherwise.
///
/// # Errors
/// The generated decoder's, for bytes it does not accept either.
pub(crate) fn read_answer(
    body: &mut Bytes,
    version: i16,
    out: &mut ProduceResponse,
) -> Result<(), kafkit_protocol::DecodeError> {
    if read_common(body, version, out).is_some() {
        return Ok(());
    }
    *out = ProduceResponse::decode(body, version)?;
    Ok(())
}

/// Reads `body` into `out` when the answer has the common shape; `None` otherwise (then `out`
/// holds a partial answer and must be overwritten). Never panics, whatever the bytes.
fn read_common(body: &[u8], version: i16, out: &mut ProduceResponse) -> Option<()> {
    if !ProduceResponse::VERSIONS.contains(version) {
        return None;
    }
    let flexible = version >= 9;
    let mut r = Reader { rest: body };
    let topics = r.array_len(flexible)?;
    // The answer's entries are filled in place: the kept ones first, new ones (a topic more than
    // any answer before) pushed.
    out.responses.truncate(topics);
    for i in 0..topics {
        if i == out.responses.len() {
            out.responses
                .push(produce_response::TopicProduceResponse::default());
        }
        let t = &mut out.responses[i];
        if version >= 13 {
            // Topic ids instead of names (KIP-516): the sender names the topics from its
            // request.
            t.topic_id = kafkit_protocol::Uuid(r.take(16)?.try_into().ok()?);
            t.name.clear();
        } else {
            let name = r.string(flexible)?;
            if t.name != name {
                t.name.clear();
                t.name.push_str(name);
            }
            t.topic_id = kafkit_protocol::Uuid::ZERO;
        }
        if !t.unknown_tagged_fields.is_empty() {
            t.unknown_tagged_fields.clear();
        }
        t.partition_responses.clear();
        let partitions = r.array_len(flexible)?;
        for _ in 0..partitions {
            let mut p = produce_response::PartitionProduceResponse::default();
            p.index = r.i32()?;
            p.error_code = ErrorCode(r.i16()?);
            p.base_offset = r.i64()?;
            if version >= 2 {
                p.log_append_time_ms = r.i64()?;
            }
            if version >= 5 {
                p.log_start_offset = r.i64()?;
            }
            if version >= 8 {
                // Record errors and an error message: the generated decoder's (they allocate,
                // and come only with a refusal).
                if r.array_len(flexible)? != 0 || !r.null_string(flexible)? {
                    return None;
                }
            }
            if flexible {
                r.no_tags()?;
            }
            t.partition_responses.push(p);
        }
        if flexible {
            r.no_tags()?;
        }
    }
    out.throttle_time_ms = if version >= 1 { r.i32()? } else { 0 };
    if flexible {
        r.no_tags()?;
    }
    out.node_endpoints.clear();
    if !out.unknown_tagged_fields.is_empty() {
        out.unknown_tagged_fields.clear();
    }
    Some(())
}

/// A cursor over the answer's bytes; every read checks what remains.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }

    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }

    /// An unsigned varint of at most 5 bytes (a `u32`), as the protocol's.
    fn uvarint(&mut self) -> Option<u32> {
        let mut value = 0u32;
        for i in 0..5 {
            let b = *self.take(1)?.first()?;
            let part = u32::from(b & 0x7f);
            if i == 4 && part > 0x0f {
                return None;
            }
            value |= part << (7 * i);
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// A non-null array's element count (a null one is the generated decoder's to refuse).
    fn array_len(&mut self, flexible: bool) -> Option<usize> {
        let n = if flexible {
            usize::try_from(self.uvarint()?.checked_sub(1)?).ok()?
        } else {
            usize::try_from(self.i32()?).ok()?
        };
        // Each element takes a byte at least: a count past what is left is refused before any
        // loop runs on it.
        (n <= self.rest.len()).then_some(n)
    }

    /// A non-null string (UTF-8, as the generated decoder requires).
    fn string(&mut self, flexible: bool) -> Option<&'a str> {
        let n = if flexible {
            usize::try_from(self.uvarint()?.checked_sub(1)?).ok()?
        } else {
            usize::try_from(self.i16()?).ok()?
        };
        std::str::from_utf8(self.take(n)?).ok()
    }

    /// Whether a nullable string is null (its bytes are skipped otherwise).
    fn null_string(&mut self, flexible: bool) -> Option<bool> {
        if flexible {
            Some(self.uvarint()? == 0)
        } else {
            Some(self.i16()? == -1)
        }
    }

    /// An empty tagged-fields section; `None` for any other.
    fn no_tags(&mut self) -> Option<()> {
        (self.uvarint()? == 0).then_some(())
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use kafkit_protocol::Message;
    use kafkit_protocol::arbitrary::{Arbitrary, Gen};
    use kafkit_protocol::messages::{ProduceResponse, produce_response};
    use proptest::prelude::*;

    use super::{read_answer, read_common};

    /// A written answer for `topics` topics of `parts` partitions each, as a broker sends it.
    fn written(topics: usize, parts: i32) -> ProduceResponse {
        let mut r = ProduceResponse::default();
        r.throttle_time_ms = 3;
        for t in 0..topics {
            let mut tp = produce_response::TopicProduceResponse::default();
            tp.name = format!("topic-{t}");
            tp.topic_id = kafkit_protocol::Uuid([u8::try_from(t).unwrap_or(0) + 1; 16]);
            for p in 0..parts {
                let mut pp = produce_response::PartitionProduceResponse::default();
                pp.index = p;
                pp.base_offset = i64::from(p) * 1000;
                pp.log_start_offset = 0;
                tp.partition_responses.push(pp);
            }
            r.responses.push(tp);
        }
        r
    }

    fn encode(r: &ProduceResponse, version: i16) -> Bytes {
        let mut buf = BytesMut::new();
        r.encode(&mut buf, version).expect("encodes");
        buf.freeze()
    }

    /// The common answer takes the kept path at every version, equals the generated decoder's,
    /// and a second answer into the same memory is read right too (fewer topics, other names).
    #[test]
    fn a_written_answer_is_read_in_place_at_every_version() {
        for version in 0..=13 {
            let mut out = ProduceResponse::default();
            for (topics, parts) in [(3, 5), (1, 2), (2, 0), (0, 0), (4, 1)] {
                let want = written(topics, parts);
                let bytes = encode(&want, version);
                let want = ProduceResponse::decode(&mut bytes.clone(), version).expect("decodes");
                assert!(
                    read_common(&bytes, version, &mut out).is_some(),
                    "v{version}"
                );
                assert_eq!(out, want, "v{version} {topics}x{parts}");
            }
        }
    }

    /// An answer with every optional part (record errors, messages, KIP-951 leader hints and
    /// endpoints, unknown tags at each level, more topics and partitions), then a common one into
    /// the same memory, at every version: nothing of the first is left.
    #[test]
    fn nothing_of_a_rich_answer_is_left_in_the_next_common_one() {
        let rich = |version: i16| {
            let mut r = written(4, 6);
            for (i, t) in r.responses.iter_mut().enumerate() {
                t.name = format!("rich-{i}");
                if version >= 9 {
                    t.unknown_tagged_fields.insert(7, Bytes::from_static(b"t"));
                }
                for p in &mut t.partition_responses {
                    p.error_code = kafkit_protocol::ErrorCode::NOT_LEADER_OR_FOLLOWER;
                    p.base_offset = 99;
                    p.log_append_time_ms = 1_234;
                    p.log_start_offset = 5;
                    if version >= 8 {
                        let mut e = produce_response::BatchIndexAndErrorMessage::default();
                        e.batch_index = 3;
                        e.batch_index_error_message = Some("bad".into());
                        p.record_errors.push(e);
                        p.error_message = Some("refused".into());
                    }
                    if version >= 10 {
                        p.current_leader.leader_id = 2;
                        p.current_leader.leader_epoch = 8;
                    }
                    if version >= 9 {
                        p.unknown_tagged_fields.insert(9, Bytes::from_static(b"p"));
                    }
                }
            }
            if version >= 10 {
                let mut n = produce_response::NodeEndpoint::default();
                n.node_id = 2;
                n.host = "h".into();
                n.port = 9092;
                r.node_endpoints.push(n);
            }
            if version >= 9 {
                r.unknown_tagged_fields.insert(5, Bytes::from_static(b"r"));
            }
            r.throttle_time_ms = if version >= 1 { 77 } else { 0 };
            r
        };
        for version in 0..=13 {
            for before in 0..=13 {
                let mut out = ProduceResponse::default();
                read_answer(&mut encode(&rich(before), before), before, &mut out).expect("reads");
                let mut common = written(2, 3);
                common.throttle_time_ms = if version >= 1 { 3 } else { 0 };
                let bytes = encode(&common, version);
                assert!(
                    read_common(&bytes, version, &mut out).is_some(),
                    "v{version}"
                );
                let want = ProduceResponse::decode(&mut bytes.clone(), version).expect("decodes");
                assert_eq!(out, want, "v{before} then v{version}");
            }
        }
    }

    /// Counts far past the bytes that follow (topics, partitions, record errors) are refused
    /// by both readers at once: no loop over them, no allocation of their size.
    #[test]
    fn counts_past_the_rest_are_refused() {
        let mut out = written(1, 1);
        let huge_i32 = [0x7f, 0xff, 0xff, 0xff];
        let huge_uvarint = [0xff, 0xff, 0xff, 0xff, 0x0f];
        for version in 0..=11i16 {
            let flexible = version >= 9;
            let count: &[u8] = if flexible { &huge_uvarint } else { &huge_i32 };
            // Topics, then one topic "t" with that many partitions.
            let mut one_topic = Vec::new();
            if flexible {
                one_topic.extend_from_slice(&[2, 2, b't']);
            } else {
                one_topic.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't']);
            }
            one_topic.extend_from_slice(count);
            for body in [count.to_vec(), one_topic] {
                assert!(
                    read_common(&body, version, &mut out).is_none(),
                    "v{version}"
                );
                assert!(
                    read_answer(&mut Bytes::from(body), version, &mut out).is_err(),
                    "v{version}"
                );
            }
        }
    }

    proptest! {
        /// Any answer of any version (record errors, messages, leader hints, endpoints, unknown
        /// tags included): `read_answer` gives what the generated decoder gives, into memory
        /// that held another answer.
        #[test]
        fn any_answer_reads_as_the_generated_decoder_reads_it(
            seed in any::<u64>(),
            before in any::<u64>(),
            version in 0i16..=11,
        ) {
            let mut g = Gen::new(seed);
            let want = ProduceResponse::arbitrary(&mut g, version);
            let bytes = encode(&want, version);
            let mut out = ProduceResponse::arbitrary(&mut Gen::new(before), version);
            read_answer(&mut bytes.clone(), version, &mut out).expect("reads");
            let decoded = ProduceResponse::decode(&mut bytes.clone(), version).expect("decodes");
            prop_assert_eq!(&out, &decoded);
            prop_assert_eq!(&out, &want);
        }

        /// Truncated or altered bytes never panic, and whenever the kept path accepts them its
        /// answer is the generated decoder's.
        #[test]
        fn damaged_answers_never_panic_and_agree_when_read(
            seed in any::<u64>(),
            version in 0i16..=11,
            cut in any::<prop::sample::Index>(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
            common in any::<bool>(),
        ) {
            let want = if common {
                written(2, 3)
            } else {
                ProduceResponse::arbitrary(&mut Gen::new(seed), version)
            };
            let mut bytes = encode(&want, version).to_vec();
            for (at, b) in flips {
                if !bytes.is_empty() {
                    let i = at.index(bytes.len());
                    bytes[i] = b;
                }
            }
            bytes.truncate(cut.index(bytes.len() + 1));
            let mut out = ProduceResponse::default();
            if read_common(&bytes, version, &mut out).is_some() {
                let decoded = ProduceResponse::decode(&mut Bytes::from(bytes.clone()), version);
                prop_assert_eq!(Some(&out), decoded.as_ref().ok());
            }
            let _ = read_answer(&mut Bytes::from(bytes), version, &mut out);
        }

        /// Random bytes: no panic.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), version in 0i16..=11) {
            let mut out = written(1, 1);
            let _ = read_answer(&mut Bytes::from(bytes), version, &mut out);
        }
    }
}
