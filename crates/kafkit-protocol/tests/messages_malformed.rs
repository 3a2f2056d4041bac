//! Malformed input: every strict prefix of a valid encoding fails to decode, huge length and
//! count prefixes fail without allocating, random bytes never panic.

use bytes::{BufMut, Bytes, BytesMut};
use kafkit_protocol::arbitrary::{Arbitrary, Gen};
use kafkit_protocol::messages::{MetadataRequest, ProduceRequest, RequestHeader};
use kafkit_protocol::{DecodeError, Message};
use proptest::prelude::*;

fn truncations<M: Message + Arbitrary>(seed: u64, cut: u64) -> Result<(), TestCaseError> {
    for version in M::VERSIONS.min..=M::VERSIONS.max {
        let mut g = Gen::new(seed);
        let value = M::arbitrary(&mut g, version);
        let mut buf = BytesMut::new();
        value
            .encode(&mut buf, version)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let full = buf.freeze();
        if full.is_empty() {
            continue;
        }
        // One random strict prefix plus the one-byte-short prefix.
        for len in [cut as usize % full.len(), full.len() - 1] {
            let mut b = full.slice(..len);
            let r = M::decode(&mut b, version);
            prop_assert!(
                r.is_err(),
                "{} v{} decoded a {}-byte prefix of {}",
                M::NAME,
                version,
                len,
                full.len()
            );
            prop_assert_eq!(b.len(), len, "buffer advanced on error");
        }
        // Garbage of the same length must not panic (any result is fine).
        let noise: Vec<u8> = (0..full.len()).map(|_| g.next_u64() as u8).collect();
        let _ = M::decode(&mut Bytes::from(noise), version);
    }
    Ok(())
}

macro_rules! truncation_test {
    ($module:ident, $ty:ident) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]
            #[test]
            fn $module(seed in any::<u64>(), cut in any::<u64>()) {
                truncations::<kafkit_protocol::messages::$ty>(seed, cut)?;
            }
        }
    };
}

mod truncated {
    use super::*;
    kafkit_protocol::for_each_message!(truncation_test);
}

/// Feeds every message decoder, at every version, 10 bytes that start with an absurd prefix.
macro_rules! absurd_test {
    ($module:ident, $ty:ident) => {
        #[test]
        fn $module() {
            type M = kafkit_protocol::messages::$ty;
            for version in M::VERSIONS.min..=M::VERSIONS.max {
                for prefix in [
                    &[0x7f, 0xff, 0xff, 0xff][..],
                    &[0xff, 0xff, 0xff, 0xff, 0x0f][..],
                    &[0x7f, 0xff][..],
                    &[0xfe, 0xff, 0xff, 0xff, 0x07][..],
                ] {
                    for offset in 0..4 {
                        let mut v = vec![0u8; offset];
                        v.extend_from_slice(prefix);
                        v.resize(offset + 10, 0);
                        let _ = M::decode(&mut Bytes::from(v), version);
                    }
                }
            }
        }
    };
}

mod absurd {
    use bytes::Bytes;
    use kafkit_protocol::Message;
    kafkit_protocol::for_each_message!(absurd_test);
}

#[test]
fn array_count_beyond_input_is_rejected_before_allocating() {
    // MetadataRequest v1: Topics is a nullable int32-counted array.
    let mut b = BytesMut::new();
    b.put_i32(i32::MAX);
    b.put_slice(&[0; 10]);
    let err = MetadataRequest::decode(&mut b.freeze(), 1).unwrap_err();
    assert!(
        matches!(err, DecodeError::LengthOutOfRange { length, remaining: 10 } if length == i64::from(i32::MAX)),
        "{err:?}"
    );

    // Compact form (v9): uvarint count 2^32-1 with 10 bytes left.
    let mut b = BytesMut::new();
    b.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    b.put_slice(&[0; 10]);
    let err = MetadataRequest::decode(&mut b.freeze(), 9).unwrap_err();
    assert!(
        matches!(err, DecodeError::LengthOutOfRange { .. }),
        "{err:?}"
    );
}

#[test]
fn string_length_beyond_input_is_rejected() {
    // ProduceRequest v3 starts with the nullable TransactionalId string.
    let mut b = BytesMut::new();
    b.put_i16(i16::MAX);
    b.put_slice(b"abc");
    let err = ProduceRequest::decode(&mut b.freeze(), 3).unwrap_err();
    assert_eq!(
        err,
        DecodeError::LengthOutOfRange {
            length: i64::from(i16::MAX),
            remaining: 3
        }
    );
}

#[test]
fn negative_length_other_than_null_is_invalid() {
    let mut b = BytesMut::new();
    b.put_i16(-2);
    let err = ProduceRequest::decode(&mut b.freeze(), 3).unwrap_err();
    assert!(matches!(err, DecodeError::InvalidValue { .. }), "{err:?}");
}

#[test]
fn invalid_utf8_is_rejected() {
    // RequestHeader v1: api key, version, correlation id, then ClientId.
    let mut b = BytesMut::new();
    b.put_i16(3);
    b.put_i16(1);
    b.put_i32(7);
    b.put_i16(2);
    b.put_slice(&[0xc3, 0x28]);
    let err = RequestHeader::decode(&mut b.freeze(), 1).unwrap_err();
    assert!(matches!(err, DecodeError::InvalidValue { .. }), "{err:?}");
}

#[test]
fn overlong_varint_is_rejected() {
    let mut b = Bytes::from_static(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
    assert!(MetadataRequest::decode(&mut b, 9).is_err());
}

#[test]
fn unsupported_version_is_an_error() {
    let mut b = Bytes::from_static(&[0; 16]);
    let err = ProduceRequest::decode(&mut b, 99).unwrap_err();
    assert!(
        matches!(err, DecodeError::UnsupportedVersion { version: 99, .. }),
        "{err:?}"
    );
    let mut out = BytesMut::new();
    assert!(ProduceRequest::default().encode(&mut out, -1).is_err());
    assert!(out.is_empty());
}

#[test]
fn tagged_field_size_must_match_its_value() {
    use kafkit_protocol::messages::FetchRequest;
    let mut f = FetchRequest::default();
    f.cluster_id = Some("c".into()); // tag 0 in v12+
    let mut b = BytesMut::new();
    f.encode(&mut b, 12).unwrap();
    // The request ends with: count 1, tag 0, size 2, compact string "c". Claim 3 bytes and add one.
    let n = b.len();
    assert_eq!(&b[n - 4..], &[0, 2, 2, b'c']);
    b[n - 3] = 3;
    b.put_u8(0);
    let err = FetchRequest::decode(&mut b.freeze(), 12).unwrap_err();
    assert!(matches!(err, DecodeError::InvalidValue { .. }), "{err:?}");
}
