//! Tests for record batch encoding and decoding, including hand-built wire bytes.

use bytes::{BufMut, Bytes, BytesMut};
use kafkit_compress::{Codec, CompressError, Compression};
use proptest::prelude::*;

use super::wire::crc32_ieee;
use super::*;

/// A stand-in codec for paths that only run with compression: XORs every byte, so compressed
/// bytes differ from the input, and honours `max_output`. It reports itself as LZ4.
#[derive(Debug)]
struct XorCodec;

impl Codec for XorCodec {
    fn compression(&self) -> Compression {
        Compression::Lz4
    }
    fn level_range(&self) -> Option<std::ops::RangeInclusive<i32>> {
        None
    }
    fn compress(
        &self,
        input: &[u8],
        _level: Option<i32>,
        out: &mut BytesMut,
    ) -> Result<(), CompressError> {
        out.extend(input.iter().map(|b| b ^ 0x5a));
        Ok(())
    }
    fn decompress(
        &self,
        input: &[u8],
        max_output: usize,
        out: &mut BytesMut,
    ) -> Result<(), CompressError> {
        if input.len() > max_output {
            return Err(CompressError::OutputLimitExceeded {
                compression: Compression::Lz4,
                limit: max_output,
            });
        }
        out.extend(input.iter().map(|b| b ^ 0x5a));
        Ok(())
    }
}

fn xor_lookup(c: Compression) -> Result<&'static dyn Codec, CompressError> {
    match c {
        Compression::None => c.codec(),
        _ => Ok(&XorCodec),
    }
}

/// A build with only the `none` codec: every other codec is unsupported.
fn none_only_lookup(c: Compression) -> Result<&'static dyn Codec, CompressError> {
    match c {
        Compression::None => c.codec(),
        _ => Err(CompressError::UnsupportedCodec { compression: c }),
    }
}

fn encode(options: RecordBatchOptions, records: &[Record]) -> BytesMut {
    let mut buf = BytesMut::new();
    let mut enc = RecordBatchEncoder::new(&mut buf, options).unwrap();
    for r in records {
        enc.append(r).unwrap();
    }
    enc.finish().unwrap();
    buf
}

fn rec(ts: i64, key: Option<&'static [u8]>, value: Option<&'static [u8]>) -> Record {
    Record::new(key.map(Bytes::from_static), value.map(Bytes::from_static)).with_timestamp(ts)
}

fn decode_one(data: Bytes) -> Result<RecordBatch, RecordsError> {
    let mut batches = decode_record_batches(data)?;
    assert_eq!(batches.len(), 1);
    Ok(batches.remove(0))
}

/// Recomputes the CRC-32C of a magic 2 batch starting at `at` after a test edited it.
fn fix_crc(buf: &mut [u8], at: usize) {
    let len = i32::from_be_bytes(buf[at + 8..at + 12].try_into().unwrap()) as usize;
    let crc = crc32c::crc32c(&buf[at + 21..at + 12 + len]);
    buf[at + 17..at + 21].copy_from_slice(&crc.to_be_bytes());
}

fn zigzag_varint(buf: &mut BytesMut, v: i32) {
    // Written independently of `wire::put_varint`.
    let mut u = ((v << 1) ^ (v >> 31)) as u32;
    while u >= 0x80 {
        buf.put_u8((u as u8 & 0x7f) | 0x80);
        u >>= 7;
    }
    buf.put_u8(u as u8);
}

/// Builds a magic 2 batch by hand from the protocol guide's field list.
fn hand_built_v2(base_offset: i64, attributes: i16, count: i32, records: &[u8]) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_i64(base_offset);
    b.put_i32((49 + records.len()) as i32); // batchLength
    b.put_i32(5); // partitionLeaderEpoch
    b.put_i8(2); // magic
    b.put_u32(0); // crc, below
    b.put_i16(attributes);
    b.put_i32(count - 1); // lastOffsetDelta
    b.put_i64(1_000); // baseTimestamp
    b.put_i64(1_010); // maxTimestamp
    b.put_i64(99); // producerId
    b.put_i16(3); // producerEpoch
    b.put_i32(12); // baseSequence
    b.put_i32(count);
    b.put_slice(records);
    fix_crc(&mut b, 0);
    b
}

#[test]
fn hand_built_v2_batch_decodes() {
    // Record 0: key "k", value "v1", one header ("h", null). Record 1: null key, value "v2",
    // timestamp delta 10, offset delta 1.
    let mut recs = BytesMut::new();
    let mut body = BytesMut::new();
    body.put_i8(0);
    zigzag_varint(&mut body, 0); // timestamp delta (varlong, same bytes for small values)
    zigzag_varint(&mut body, 0); // offset delta
    zigzag_varint(&mut body, 1);
    body.put_slice(b"k");
    zigzag_varint(&mut body, 2);
    body.put_slice(b"v1");
    zigzag_varint(&mut body, 1); // header count
    zigzag_varint(&mut body, 1);
    body.put_slice(b"h");
    zigzag_varint(&mut body, -1);
    zigzag_varint(&mut recs, body.len() as i32);
    recs.put_slice(&body);
    let mut body = BytesMut::new();
    body.put_i8(0);
    zigzag_varint(&mut body, 10);
    zigzag_varint(&mut body, 1);
    zigzag_varint(&mut body, -1);
    zigzag_varint(&mut body, 2);
    body.put_slice(b"v2");
    zigzag_varint(&mut body, 0);
    zigzag_varint(&mut recs, body.len() as i32);
    recs.put_slice(&body);

    let attrs = attributes::TRANSACTIONAL;
    let data = hand_built_v2(500, attrs, 2, &recs).freeze();
    let batch = decode_one(data.clone()).unwrap();
    let h = &batch.header;
    assert_eq!(
        (
            h.base_offset,
            h.partition_leader_epoch,
            h.magic,
            h.record_count
        ),
        (500, 5, 2, 2)
    );
    assert_eq!(
        (h.producer_id, h.producer_epoch, h.base_sequence),
        (99, 3, 12)
    );
    assert!(h.is_transactional && !h.is_control && !h.has_delete_horizon);
    assert_eq!(h.timestamp_type, TimestampType::CreateTime);
    assert_eq!(h.compression, Compression::None);
    assert_eq!(h.next_offset(), 502);
    let r = &batch.records;
    assert_eq!((r[0].offset, r[0].timestamp), (500, 1_000));
    assert_eq!(r[0].key.as_deref(), Some(&b"k"[..]));
    assert_eq!(r[0].value.as_deref(), Some(&b"v1"[..]));
    assert_eq!(r[0].headers, vec![RecordHeader::new("h", None)]);
    assert_eq!(r[0].headers[0].key_str(), Some("h"));
    assert_eq!((r[1].offset, r[1].timestamp), (501, 1_010));
    assert_eq!(r[1].key, None);
    assert!(r[1].headers.is_empty());

    // Zero-copy: the value points into the input buffer.
    let input = data.as_ptr_range();
    let value = r[1].value.as_ref().unwrap().as_ptr();
    assert!(input.contains(&value));

    // The encoder produces the same bytes for the same batch.
    let options = RecordBatchOptions::new()
        .base_offset(500)
        .partition_leader_epoch(5)
        .producer(99, 3, 12)
        .transactional(true);
    let again = encode(
        options,
        &[
            rec(1_000, Some(b"k"), Some(b"v1")).with_header("h", None),
            rec(1_010, None, Some(b"v2")),
        ],
    );
    assert_eq!(&again[..], &data[..]);
}

#[test]
fn crc_mismatch_is_a_retriable_error() {
    let mut buf = encode(
        RecordBatchOptions::new(),
        &[rec(1, Some(b"key"), Some(b"value"))],
    );
    let last = buf.len() - 2;
    buf[last] ^= 0xff;
    let data = buf.freeze();
    let err = decode_one(data.clone()).unwrap_err();
    assert!(
        matches!(err, RecordsError::CrcMismatch { base_offset: 0, .. }),
        "{err}"
    );
    assert!(err.is_retriable());
    assert_eq!(err.kafka_error_name(), Some("CORRUPT_MESSAGE"));
    // With verification off the damaged bytes decode.
    let batches = RecordBatchDecoder::with_options(data, DecodeOptions::new().verify_crc(false))
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    assert_eq!(batches[0].records.len(), 1);
}

#[test]
fn partial_batch_at_end_stops_cleanly() {
    let mut buf = encode(RecordBatchOptions::new(), &[rec(1, None, Some(b"one"))]);
    let first_len = buf.len();
    buf.extend_from_slice(&encode(
        RecordBatchOptions::new().base_offset(1),
        &[rec(2, None, Some(b"two")), rec(3, None, Some(b"three"))],
    ));
    let full = buf.freeze();
    for cut in [
        first_len + 1,
        first_len + 11,
        first_len + 12,
        full.len() - 1,
    ] {
        let mut dec = RecordBatchDecoder::new(full.slice(..cut));
        let batch = dec.next().unwrap().unwrap();
        assert_eq!(batch.records[0].value.as_deref(), Some(&b"one"[..]));
        assert!(dec.next().is_none(), "cut at {cut}");
        assert_eq!(dec.partial_bytes(), cut - first_len);
    }
    assert_eq!(decode_record_batches(full).unwrap().len(), 2);
    assert!(decode_record_batches(Bytes::new()).unwrap().is_empty());
}

#[test]
fn absurd_record_count_is_rejected_before_allocating() {
    let data = hand_built_v2(0, 0, i32::MAX, &[0; 7]).freeze();
    let err = decode_one(data).unwrap_err();
    assert_eq!(
        err,
        RecordsError::InvalidRecordCount {
            base_offset: 0,
            count: i32::MAX,
            max: 1
        }
    );
    let negative = hand_built_v2(0, 0, -5, &[]).freeze();
    assert!(matches!(
        decode_one(negative),
        Err(RecordsError::InvalidRecordCount { count: -5, .. })
    ));
}

#[test]
fn absurd_varint_lengths_are_rejected() {
    let cases: [(&str, Vec<i32>); 4] = [
        // record length itself
        ("record length", vec![i32::MAX]),
        // key length 2^31-1 inside a small record
        ("record key length", vec![8, 0, 0, 0, i32::MAX]),
        // value length 2^31-1
        ("record value length", vec![8, 0, 0, 0, -1, i32::MAX]),
        // header count 2^31-1
        ("header count", vec![8, 0, 0, 0, -1, -1, i32::MAX]),
    ];
    for (what, fields) in cases {
        let mut recs = BytesMut::new();
        for (i, f) in fields.iter().enumerate() {
            if i == 1 {
                recs.put_i8(0); // attributes are a plain byte
                continue;
            }
            zigzag_varint(&mut recs, *f);
        }
        recs.put_bytes(0, 8);
        let data = hand_built_v2(0, 0, 1, &recs).freeze();
        match decode_one(data) {
            Err(RecordsError::InvalidLength {
                what: w, length, ..
            }) => {
                assert_eq!((w, length), (what, i64::from(i32::MAX)));
            }
            other => panic!("{what}: {other:?}"),
        }
    }
}

#[test]
fn record_length_mismatch_and_trailing_bytes() {
    // A record declaring 9 bytes whose fields use 7.
    let mut recs = BytesMut::new();
    zigzag_varint(&mut recs, 9);
    recs.put_slice(&[0, 0, 0, 1, 1, 0, 0, 0, 0]);
    assert!(matches!(
        decode_one(hand_built_v2(0, 0, 1, &recs).freeze()),
        Err(RecordsError::RecordLengthMismatch {
            declared: 9,
            actual: 6,
            ..
        })
    ));
    let mut recs = BytesMut::new();
    zigzag_varint(&mut recs, 6);
    recs.put_slice(&[0, 0, 0, 1, 1, 0]);
    recs.put_slice(&[0xaa; 3]);
    assert_eq!(
        decode_one(hand_built_v2(0, 0, 1, &recs).freeze()),
        Err(RecordsError::TrailingBytes {
            base_offset: 0,
            extra: 3
        })
    );
}

#[test]
fn bad_lengths_magic_and_codecs() {
    let mut b = BytesMut::new();
    b.put_i64(3);
    b.put_i32(-1);
    b.put_bytes(0, 20);
    assert!(matches!(
        decode_one(b.freeze()),
        Err(RecordsError::BatchTooSmall { length: -1, .. })
    ));

    let mut b = hand_built_v2(9, 0, 0, &[]);
    b[16] = 3;
    assert_eq!(
        decode_one(b.freeze()),
        Err(RecordsError::UnknownMagic {
            base_offset: 9,
            magic: 3
        })
    );

    // Garbage where gzip data should be is corrupt; a codec missing from the build is unsupported.
    let err = decode_one(hand_built_v2(0, 1, 1, &[0; 8]).freeze()).unwrap_err();
    assert!(matches!(
        err,
        RecordsError::Compression {
            source: CompressError::Corrupt {
                compression: Compression::Gzip,
                ..
            },
            ..
        }
    ));
    assert_eq!(err.kafka_error_name(), Some("CORRUPT_MESSAGE"));
    let err = RecordBatchDecoder::with_options(
        hand_built_v2(0, 1, 1, &[0; 8]).freeze(),
        DecodeOptions::new().with_lookup(none_only_lookup),
    )
    .next()
    .unwrap()
    .unwrap_err();
    assert_eq!(
        err,
        RecordsError::Compression {
            base_offset: 0,
            source: CompressError::UnsupportedCodec {
                compression: Compression::Gzip
            }
        }
    );
    assert_eq!(err.kafka_error_name(), Some("UNSUPPORTED_COMPRESSION_TYPE"));
    assert!(matches!(
        decode_one(hand_built_v2(0, 6, 1, &[0; 8]).freeze()),
        Err(RecordsError::Compression {
            source: CompressError::UnknownCodecId(6),
            ..
        })
    ));

    let mut out = BytesMut::new();
    let err = RecordBatchEncoder::new(
        &mut out,
        RecordBatchOptions::new()
            .compression(Compression::Zstd)
            .with_lookup(none_only_lookup),
    )
    .unwrap_err();
    assert!(matches!(
        err,
        RecordsError::Compression {
            source: CompressError::UnsupportedCodec { .. },
            ..
        }
    ));
    assert!(out.is_empty());
}

#[test]
fn compressed_batches_go_through_the_codec_with_a_size_bound() {
    let records = [
        rec(10, Some(b"a"), Some(b"first value")),
        rec(12, None, None).with_header("x", Some(Bytes::from_static(b"y"))),
    ];
    let options = RecordBatchOptions::new()
        .compression(Compression::Lz4)
        .with_lookup(xor_lookup);
    let mut buf = BytesMut::new();
    let mut enc = RecordBatchEncoder::new(&mut buf, options).unwrap();
    for r in &records {
        enc.append(r).unwrap();
    }
    let uncompressed = enc.size_in_bytes();
    let written = enc.finish().unwrap();
    assert_eq!(written, uncompressed); // the XOR codec keeps sizes
    let plain = encode(RecordBatchOptions::new(), &records);
    assert_ne!(
        &buf[61..],
        &plain[61..],
        "records section must be transformed"
    );

    let data = buf.freeze();
    let batches = RecordBatchDecoder::with_options(
        data.clone(),
        DecodeOptions::new().with_lookup(xor_lookup),
    )
    .collect::<Result<Vec<_>, _>>()
    .unwrap();
    assert_eq!(batches[0].header.compression, Compression::Lz4);
    assert_eq!(
        batches[0].records[0].value.as_deref(),
        Some(&b"first value"[..])
    );
    assert_eq!(batches[0].records[1].headers[0].key_str(), Some("x"));

    let limited = RecordBatchDecoder::with_options(
        data,
        DecodeOptions::new()
            .with_lookup(xor_lookup)
            .max_decompressed_bytes(10),
    )
    .next()
    .unwrap();
    assert!(matches!(
        limited,
        Err(RecordsError::Compression {
            source: CompressError::OutputLimitExceeded { limit: 10, .. },
            ..
        })
    ));
}

#[test]
fn control_batches_are_flagged() {
    let marker = Record::new(
        Some(Bytes::copy_from_slice(&ControlRecordType::Commit.key())),
        Some(Bytes::from_static(&[0, 0, 0, 0, 0, 7])),
    )
    .with_timestamp(55);
    let options = RecordBatchOptions::new()
        .transactional(true)
        .control(true)
        .producer(1, 0, -1);
    let batch = decode_one(encode(options, &[marker]).freeze()).unwrap();
    assert!(batch.header.is_control && batch.header.is_transactional);
    assert_eq!(
        batch.records[0].control_type(),
        Some(ControlRecordType::Commit)
    );
    assert_eq!(
        rec(0, Some(b"\0\0\0\0"), None).control_type(),
        Some(ControlRecordType::Abort)
    );
    assert_eq!(rec(0, Some(b"\0\x01\0\0"), None).control_type(), None);
    assert_eq!(rec(0, Some(b"\0"), None).control_type(), None);
}

#[test]
fn encoder_sizes_are_exact_and_drop_cleans_up() {
    let mut buf = BytesMut::from(&b"prefix"[..]);
    {
        let mut enc = RecordBatchEncoder::new(&mut buf, RecordBatchOptions::new()).unwrap();
        let headers = [RecordHeader::new("a", Some(Bytes::from_static(b"bb")))];
        for i in 0..50 {
            let value = vec![7u8; i * 3];
            let predicted = enc
                .size_with(1000 + i as i64 * 300, Some(b"key"), Some(&value), &headers)
                .unwrap();
            enc.append_parts(1000 + i as i64 * 300, Some(b"key"), Some(&value), &headers)
                .unwrap();
            assert_eq!(enc.size_in_bytes(), predicted);
        }
        let size = enc.size_in_bytes();
        assert_eq!(enc.finish().unwrap(), size);
    }
    assert_eq!(&buf[..6], b"prefix");
    let batch_len = buf.len() - 6;

    // Dropped without finish: the partial batch disappears.
    {
        let mut enc = RecordBatchEncoder::new(&mut buf, RecordBatchOptions::new()).unwrap();
        enc.append(&rec(1, None, Some(b"x"))).unwrap();
    }
    assert_eq!(buf.len(), 6 + batch_len);
    // Finished empty: nothing written.
    let enc = RecordBatchEncoder::new(&mut buf, RecordBatchOptions::new()).unwrap();
    assert_eq!(enc.finish().unwrap(), 0);
    assert_eq!(buf.len(), 6 + batch_len);

    assert_eq!(
        encoded_record_size(0, 0, None, None, &[]).unwrap(),
        7 // length, attributes, two deltas, two null lengths, header count
    );
}

/// Builds a legacy message (magic 0 or 1) by hand from the protocol guide's "Message Sets" format.
fn legacy(
    offset: i64,
    magic: i8,
    attributes: i8,
    timestamp: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> BytesMut {
    let mut body = BytesMut::new();
    body.put_i8(magic);
    body.put_i8(attributes);
    if magic == 1 {
        body.put_i64(timestamp);
    }
    for field in [key, value] {
        match field {
            None => body.put_i32(-1),
            Some(b) => {
                body.put_i32(b.len() as i32);
                body.put_slice(b);
            }
        }
    }
    let mut m = BytesMut::new();
    m.put_i64(offset);
    m.put_i32(body.len() as i32 + 4);
    m.put_u32(crc32_ieee(&body));
    m.put_slice(&body);
    m
}

#[test]
fn legacy_v0_message_set_decodes() {
    let mut set = legacy(10, 0, 0, 0, Some(b"k0"), Some(b"v0"));
    set.extend_from_slice(&legacy(11, 0, 0, 0, None, Some(b"v1")));
    set.extend_from_slice(&legacy(12, 0, 0, 0, Some(b"k2"), None));
    let batches = decode_record_batches(set.freeze()).unwrap();
    assert_eq!(batches.len(), 3);
    let got: Vec<_> = batches
        .iter()
        .map(|b| {
            let r = &b.records[0];
            (
                b.header.magic,
                r.offset,
                r.timestamp,
                r.key.clone(),
                r.value.clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                0,
                10,
                -1,
                Some(Bytes::from_static(b"k0")),
                Some(Bytes::from_static(b"v0"))
            ),
            (0, 11, -1, None, Some(Bytes::from_static(b"v1"))),
            (0, 12, -1, Some(Bytes::from_static(b"k2")), None),
        ]
    );
    assert_eq!(
        batches[0].header.timestamp_type,
        TimestampType::NoTimestampType
    );
    assert_eq!(batches[0].header.producer_id, -1);
}

#[test]
fn legacy_v1_message_set_decodes_with_timestamps() {
    let mut set = legacy(0, 1, 0, 1_600_000_000_000, Some(b"a"), Some(b"x"));
    // Bit 3: log append time.
    set.extend_from_slice(&legacy(1, 1, 0x08, 1_600_000_000_500, None, Some(b"y")));
    let batches = decode_record_batches(set.freeze()).unwrap();
    assert_eq!(batches[0].records[0].timestamp, 1_600_000_000_000);
    assert_eq!(batches[0].header.timestamp_type, TimestampType::CreateTime);
    assert_eq!(batches[1].records[0].offset, 1);
    assert_eq!(
        batches[1].header.timestamp_type,
        TimestampType::LogAppendTime
    );
    assert_eq!(batches[1].records[0].value.as_deref(), Some(&b"y"[..]));
}

#[test]
fn legacy_crc_and_size_errors() {
    let mut m = legacy(4, 1, 0, 5, None, Some(b"value"));
    let last = m.len() - 1;
    m[last] ^= 1;
    assert!(matches!(
        decode_one(m.freeze()),
        Err(RecordsError::CrcMismatch { base_offset: 4, .. })
    ));
    // A magic 1 message too short for its timestamp.
    let mut m = legacy(4, 0, 0, 0, None, None);
    m[16] = 1;
    assert!(matches!(
        decode_one(m.freeze()),
        Err(RecordsError::BatchTooSmall { min: 22, .. })
    ));
    // Value length past the end.
    let mut m = legacy(4, 0, 0, 0, None, Some(b"abc"));
    let at = m.len() - 7;
    m[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
    let crc = crc32_ieee(&m[16..]);
    m[12..16].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        decode_one(m.freeze()),
        Err(RecordsError::InvalidLength { length, .. }) if length == i64::from(i32::MAX)
    ));
}

fn xor(data: &[u8]) -> Vec<u8> {
    data.iter().map(|b| b ^ 0x5a).collect()
}

#[test]
fn legacy_compressed_wrappers_expand() {
    // Magic 1: inner offsets are relative; the wrapper holds the last absolute offset (102).
    let mut inner = legacy(0, 1, 0, 7, None, Some(b"a"));
    inner.extend_from_slice(&legacy(1, 1, 0, 8, None, Some(b"b")));
    inner.extend_from_slice(&legacy(2, 1, 0, 9, Some(b"k"), Some(b"c")));
    // Attributes 3 = lz4, served by the XOR stand-in.
    let wrapper = legacy(102, 1, 3, 9, None, Some(&xor(&inner)));
    let options = DecodeOptions::new().with_lookup(xor_lookup);
    let batch = RecordBatchDecoder::with_options(wrapper.clone().freeze(), options)
        .next()
        .unwrap()
        .unwrap();
    let got: Vec<_> = batch
        .records
        .iter()
        .map(|r| (r.offset, r.timestamp))
        .collect();
    assert_eq!(got, vec![(100, 7), (101, 8), (102, 9)]);
    assert_eq!(batch.header.base_offset, 100);
    assert_eq!(batch.header.last_offset(), 102);
    assert_eq!(batch.header.record_count, 3);

    // Log append time: every inner record takes the wrapper's timestamp.
    let wrapper_lat = legacy(102, 1, 3 | 0x08, 999, None, Some(&xor(&inner)));
    let batch = RecordBatchDecoder::with_options(wrapper_lat.freeze(), options)
        .next()
        .unwrap()
        .unwrap();
    assert!(batch.records.iter().all(|r| r.timestamp == 999));

    // Magic 0: inner offsets are absolute.
    let mut inner0 = legacy(40, 0, 0, 0, None, Some(b"a"));
    inner0.extend_from_slice(&legacy(41, 0, 0, 0, None, Some(b"b")));
    let wrapper0 = legacy(41, 0, 3, 0, None, Some(&xor(&inner0)));
    let batch = RecordBatchDecoder::with_options(wrapper0.freeze(), options)
        .next()
        .unwrap()
        .unwrap();
    let offsets: Vec<_> = batch.records.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, vec![40, 41]);

    // Invalid wrappers: magic mismatch, nested compression, null value, truncated inner set.
    let bad_inner = [
        legacy(0, 0, 0, 0, None, Some(b"a")),
        legacy(0, 1, 3, 0, None, Some(b"a")),
    ];
    for inner in bad_inner {
        let w = legacy(5, 1, 3, 0, None, Some(&xor(&inner)));
        assert!(matches!(
            RecordBatchDecoder::with_options(w.freeze(), options).next(),
            Some(Err(RecordsError::InvalidWrapper { base_offset: 5, .. }))
        ));
    }
    let w = legacy(5, 1, 3, 0, None, None);
    assert!(matches!(
        RecordBatchDecoder::with_options(w.freeze(), options).next(),
        Some(Err(RecordsError::InvalidWrapper { .. }))
    ));
    let w = legacy(5, 1, 3, 0, None, Some(&xor(&inner[..inner.len() - 1])));
    assert!(matches!(
        RecordBatchDecoder::with_options(w.freeze(), options).next(),
        Some(Err(RecordsError::UnexpectedEof { .. }))
    ));

    // Without the codec in the build, a compressed legacy wrapper is an unsupported-codec error.
    assert!(matches!(
        RecordBatchDecoder::with_options(
            wrapper.freeze(),
            DecodeOptions::new().with_lookup(none_only_lookup)
        )
        .next()
        .unwrap(),
        Err(RecordsError::Compression {
            source: CompressError::UnsupportedCodec {
                compression: Compression::Lz4
            },
            ..
        })
    ));
}

/// Legacy wrappers (magic 0 and 1) compressed with the real gzip, snappy and lz4 codecs, in the
/// byte layouts other clients wrote: snappy both xerial-framed (Java) and raw (librdkafka), lz4
/// with the pre-KIP-57 header checksum for magic 0 (Kafka 0.8/0.9, librdkafka) and the fixed one
/// for magic 1.
#[test]
fn legacy_message_sets_with_real_codecs_decode() {
    fn compressed(c: Compression, data: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        c.codec().unwrap().compress(data, None, &mut out).unwrap();
        out.to_vec()
    }
    for magic in [0i8, 1] {
        // Magic 0 inner offsets are absolute; magic 1 inner offsets are relative (0, 1, 2).
        let first = if magic == 0 { 200 } else { 0 };
        let mut inner = legacy(first, magic, 0, 1_000, Some(b"k1"), Some(b"one"));
        inner.extend_from_slice(&legacy(first + 1, magic, 0, 1_001, None, Some(b"two")));
        inner.extend_from_slice(&legacy(first + 2, magic, 0, 1_002, Some(b"k3"), None));

        let mut lz4 = compressed(Compression::Lz4, &inner);
        // Java's frame header: FLG 0x60, BD 0x40; checksum 0x82, or 0x1a when the magic
        // number was hashed too (the pre-KIP-57 bug, still written for magic 0).
        assert_eq!(&lz4[4..7], &[0x60, 0x40, 0x82]);
        if magic == 0 {
            lz4[6] = 0x1a;
        }
        let raw_snappy = {
            let mut enc = snap::raw::Encoder::new();
            enc.compress_vec(&inner).unwrap()
        };
        let payloads = [
            (1, compressed(Compression::Gzip, &inner)),
            (2, compressed(Compression::Snappy, &inner)),
            (2, raw_snappy),
            (3, lz4),
        ];
        for (codec, payload) in payloads {
            let wrapper = legacy(202, magic, codec, 1_002, None, Some(&payload));
            let batch = decode_one(wrapper.freeze())
                .unwrap_or_else(|e| panic!("magic {magic} codec {codec}: {e}"));
            assert_eq!(batch.header.magic, magic);
            assert_eq!(batch.header.compression.id(), codec as u8);
            let got: Vec<_> = batch
                .records
                .iter()
                .map(|r| (r.offset, r.key.clone(), r.value.clone()))
                .collect();
            let b = |s: &'static [u8]| Some(Bytes::from_static(s));
            assert_eq!(
                got,
                vec![
                    (200, b(b"k1"), b(b"one")),
                    (201, None, b(b"two")),
                    (202, b(b"k3"), None),
                ],
                "magic {magic} codec {codec}"
            );
        }
    }
}

#[test]
fn mixed_formats_in_one_records_field() {
    let mut set = legacy(0, 0, 0, 0, None, Some(b"old"));
    set.extend_from_slice(&legacy(1, 1, 0, 5, None, Some(b"newer")));
    set.extend_from_slice(&encode(
        RecordBatchOptions::new().base_offset(2),
        &[rec(6, None, Some(b"newest"))],
    ));
    let batches = decode_record_batches(set.freeze()).unwrap();
    let magics: Vec<_> = batches.iter().map(|b| b.header.magic).collect();
    assert_eq!(magics, vec![0, 1, 2]);
    assert_eq!(batches[2].records[0].offset, 2);
}

#[derive(Debug, Clone)]
struct Case {
    base_offset: i64,
    partition_leader_epoch: i32,
    producer: (i64, i16, i32),
    transactional: bool,
    control: bool,
    log_append: bool,
    delete_horizon: Option<i64>,
    compressed: bool,
    records: Vec<Record>,
}

fn arb_bytes() -> impl Strategy<Value = Option<Bytes>> {
    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..48).prop_map(Bytes::from))
}

fn arb_record() -> impl Strategy<Value = Record> {
    (
        any::<i64>(),
        arb_bytes(),
        arb_bytes(),
        proptest::collection::vec(("[a-z]{0,8}", arb_bytes()), 0..4),
    )
        .prop_map(|(timestamp, key, value, headers)| Record {
            offset: 0,
            timestamp,
            key,
            value,
            headers: headers
                .into_iter()
                .map(|(k, v)| RecordHeader::new(k, v))
                .collect(),
        })
}

fn arb_case() -> impl Strategy<Value = Case> {
    (
        (0..i64::MAX / 2, any::<i32>(), any::<(i64, i16, i32)>()),
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        proptest::option::of(any::<i64>()),
        proptest::collection::vec(arb_record(), 1..24),
    )
        .prop_map(
            |(
                (base_offset, partition_leader_epoch, producer),
                (transactional, control, log_append, compressed),
                delete_horizon,
                records,
            )| Case {
                base_offset,
                partition_leader_epoch,
                producer,
                transactional,
                control,
                log_append,
                delete_horizon,
                compressed,
                records,
            },
        )
}

proptest! {
    #[test]
    fn round_trip(case in arb_case()) {
        let options = RecordBatchOptions::new()
            .base_offset(case.base_offset)
            .partition_leader_epoch(case.partition_leader_epoch)
            .producer(case.producer.0, case.producer.1, case.producer.2)
            .transactional(case.transactional)
            .control(case.control)
            .timestamp_type(if case.log_append { TimestampType::LogAppendTime } else { TimestampType::CreateTime })
            .delete_horizon_ms(case.delete_horizon)
            .compression(if case.compressed { Compression::Lz4 } else { Compression::None })
            .with_lookup(xor_lookup);
        let data = encode(options, &case.records).freeze();
        let batches = RecordBatchDecoder::with_options(data.clone(), DecodeOptions::new().with_lookup(xor_lookup))
            .collect::<Result<Vec<_>, _>>();
        let batches = batches.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(batches.len(), 1);
        let b = &batches[0];
        let h = &b.header;
        let n = case.records.len();
        let max_ts = case.records.iter().map(|r| r.timestamp).max().unwrap_or(-1);
        prop_assert_eq!(h.base_offset, case.base_offset);
        prop_assert_eq!(h.batch_length as usize, data.len() - 12);
        prop_assert_eq!(h.partition_leader_epoch, case.partition_leader_epoch);
        prop_assert_eq!(h.magic, 2);
        prop_assert_eq!((h.producer_id, h.producer_epoch, h.base_sequence), case.producer);
        prop_assert_eq!(h.is_transactional, case.transactional);
        prop_assert_eq!(h.is_control, case.control);
        prop_assert_eq!(h.has_delete_horizon, case.delete_horizon.is_some());
        prop_assert_eq!(h.timestamp_type == TimestampType::LogAppendTime, case.log_append);
        prop_assert_eq!(h.compression == Compression::Lz4, case.compressed);
        prop_assert_eq!(h.record_count as usize, n);
        prop_assert_eq!(h.last_offset_delta as usize, n - 1);
        prop_assert_eq!(h.max_timestamp, max_ts);
        prop_assert_eq!(h.base_timestamp, case.delete_horizon.unwrap_or(case.records[0].timestamp));
        prop_assert_eq!(b.records.len(), n);
        for (i, (got, want)) in b.records.iter().zip(&case.records).enumerate() {
            prop_assert_eq!(got.offset, case.base_offset + i as i64);
            let ts = if case.log_append { max_ts } else { want.timestamp };
            prop_assert_eq!(got.timestamp, ts);
            prop_assert_eq!(&got.key, &want.key);
            prop_assert_eq!(&got.value, &want.value);
            prop_assert_eq!(&got.headers, &want.headers);
        }
    }

    #[test]
    fn decoder_never_panics_on_garbage(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        for item in RecordBatchDecoder::new(Bytes::from(data)) {
            let _ = item;
        }
    }

    #[test]
    fn decoder_never_panics_on_damaged_batches(
        records in proptest::collection::vec(arb_record(), 1..6),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut buf = encode(RecordBatchOptions::new(), &records);
        for (at, x) in flips {
            let i = at.index(buf.len());
            buf[i] ^= x;
        }
        let options = DecodeOptions::new().verify_crc(false);
        for item in RecordBatchDecoder::with_options(buf.freeze(), options) {
            let _ = item;
        }
    }
}

/// Records whose header keys are distinct within each record (the `kprs` crate keeps headers in a
/// map, so duplicates could not be compared) and whose timestamps are plausible epoch
/// milliseconds (`kprs` 0.18 overflows on timestamp deltas beyond `i64`, which ours wrap).
fn arb_records_unique_headers() -> impl Strategy<Value = Vec<Record>> {
    proptest::collection::vec(arb_record(), 1..16).prop_map(|mut records| {
        for r in &mut records {
            r.timestamp = r.timestamp.rem_euclid(1 << 45);
            for (i, h) in r.headers.iter_mut().enumerate() {
                h.key = Bytes::from(format!("h{i}"));
            }
        }
        records
    })
}

fn kprs_headers(r: &kprs::records::Record) -> Vec<RecordHeader> {
    r.headers
        .iter()
        .map(|(k, v)| RecordHeader::new(Bytes::from(k.clone()), v.clone()))
        .collect()
}

proptest! {
    /// Our encoder's bytes decode with the crates.io `kafka-protocol` crate to the same records.
    #[test]
    fn kprs_decodes_our_batches(
        records in arb_records_unique_headers(),
        base_offset in 0..i64::MAX / 2,
        producer in (0..i64::MAX, 0..i16::MAX, 0..i32::MAX / 2),
        transactional in any::<bool>(),
    ) {
        let options = RecordBatchOptions::new()
            .base_offset(base_offset)
            .producer(producer.0, producer.1, producer.2)
            .transactional(transactional);
        let mut data = encode(options, &records).freeze();
        let sets = kprs::records::RecordBatchDecoder::decode_all(&mut data)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(sets.len(), 1);
        let theirs = &sets[0].records;
        prop_assert_eq!(theirs.len(), records.len());
        for (i, (t, o)) in theirs.iter().zip(&records).enumerate() {
            prop_assert_eq!(t.offset, base_offset + i as i64);
            prop_assert_eq!(t.timestamp, o.timestamp);
            prop_assert_eq!(&t.key, &o.key);
            prop_assert_eq!(&t.value, &o.value);
            prop_assert_eq!(kprs_headers(t), o.headers.clone());
            prop_assert_eq!(t.producer_id, producer.0);
            prop_assert_eq!(t.producer_epoch, producer.1);
            prop_assert_eq!(t.sequence, producer.2.wrapping_add(i as i32));
            prop_assert_eq!(t.transactional, transactional);
        }
    }

    /// Batches encoded by the crates.io `kafka-protocol` crate decode with ours.
    #[test]
    fn we_decode_kprs_batches(records in arb_records_unique_headers(), base_offset in 0..i64::MAX / 2) {
        let theirs: Vec<kprs::records::Record> = records
            .iter()
            .enumerate()
            .map(|(i, r)| kprs::records::Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: 11,
                producer_epoch: 2,
                timestamp_type: kprs::records::TimestampType::Creation,
                offset: base_offset + i as i64,
                sequence: i as i32,
                timestamp: r.timestamp,
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r
                    .headers
                    .iter()
                    .map(|h| {
                        let key = kprs::protocol::StrBytes::from_utf8(h.key.clone()).expect("ascii key");
                        (key, h.value.clone())
                    })
                    .collect(),
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = kprs::records::RecordEncodeOptions {
            version: 2,
            compression: kprs::records::Compression::None,
        };
        kprs::records::RecordBatchEncoder::encode(&mut buf, theirs.iter(), &options)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let batches = decode_record_batches(buf.freeze())
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let ours: Vec<&Record> = batches.iter().flat_map(|b| &b.records).collect();
        prop_assert_eq!(ours.len(), records.len());
        for (i, (o, want)) in ours.iter().zip(&records).enumerate() {
            prop_assert_eq!(o.offset, base_offset + i as i64);
            prop_assert_eq!(o.timestamp, want.timestamp);
            prop_assert_eq!(&o.key, &want.key);
            prop_assert_eq!(&o.value, &want.value);
            prop_assert_eq!(&o.headers, &want.headers);
        }
        prop_assert!(batches.iter().all(|b| b.header.producer_id == 11 && b.header.producer_epoch == 2));
    }
}

proptest! {
    /// Cutting a valid records field anywhere yields exactly the batches that end before the cut,
    /// never an error: the tail is a partial batch.
    #[test]
    fn any_cut_yields_the_whole_batches_before_it(
        batches in proptest::collection::vec(proptest::collection::vec(arb_record(), 1..5), 1..5),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut data = BytesMut::new();
        let mut ends = Vec::new();
        let mut next_offset = 0i64;
        for records in &batches {
            data.extend_from_slice(&encode(RecordBatchOptions::new().base_offset(next_offset), records));
            next_offset += records.len() as i64;
            ends.push(data.len());
        }
        let data = data.freeze();
        let cut = cut.index(data.len() + 1);
        let mut dec = RecordBatchDecoder::new(data.slice(..cut));
        let got = dec.by_ref().collect::<Result<Vec<_>, _>>();
        let got = got.map_err(|e| TestCaseError::fail(e.to_string()))?;
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        prop_assert_eq!(got.len(), whole);
        let consumed = if whole == 0 { 0 } else { ends[whole - 1] };
        prop_assert_eq!(dec.partial_bytes(), cut - consumed);
    }

    /// Damaged legacy message sets give errors or records, never a panic.
    #[test]
    fn legacy_decoder_never_panics_on_damaged_sets(
        values in proptest::collection::vec(proptest::option::of(proptest::collection::vec(any::<u8>(), 0..20)), 1..5),
        magic in 0i8..2,
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut set = BytesMut::new();
        for (i, v) in values.iter().enumerate() {
            set.extend_from_slice(&legacy(i as i64, magic, 0, 5, None, v.as_deref()));
        }
        // A wrapper around the same set, through the XOR stand-in codec.
        let inner = set.clone();
        set.extend_from_slice(&legacy(99, magic, 3, 5, None, Some(&xor(&inner))));
        for (at, x) in flips {
            let i = at.index(set.len());
            set[i] ^= x;
        }
        let options = DecodeOptions::new().verify_crc(false).with_lookup(xor_lookup);
        for item in RecordBatchDecoder::with_options(set.freeze(), options) {
            let _ = item;
        }
    }
}

proptest! {
    /// A record sized once (its body at deltas of 0) has the size `encoded_record_size` gives
    /// at any deltas, and a batch appended with those sizes is byte for byte the batch
    /// `append_parts` writes.
    #[test]
    fn sized_once_matches_sized_each_time(
        records in proptest::collection::vec(arb_record(), 1..24),
        offset_delta in any::<i32>(),
        timestamp_delta in any::<i64>(),
    ) {
        let mut plain = BytesMut::new();
        let mut sized = BytesMut::new();
        let mut a = RecordBatchEncoder::new(&mut plain, RecordBatchOptions::new()).unwrap();
        let mut b = RecordBatchEncoder::new(&mut sized, RecordBatchOptions::new()).unwrap();
        for r in &records {
            let (k, v, h) = (r.key.as_deref(), r.value.as_deref(), &r.headers[..]);
            let body = encoded_record_body_size(k, v, h).unwrap();
            prop_assert_eq!(
                encoded_record_size_at(body, offset_delta, timestamp_delta),
                encoded_record_size(offset_delta, timestamp_delta, k, v, h).unwrap()
            );
            prop_assert_eq!(encoded_record_size_at(body, 0, 0), encoded_record_size(0, 0, k, v, h).unwrap());
            a.append_parts(r.timestamp, k, v, h).unwrap();
            b.append_parts_sized(r.timestamp, k, v, h, body).unwrap();
            prop_assert_eq!(a.size_in_bytes(), b.size_in_bytes());
        }
        a.finish().unwrap();
        b.finish().unwrap();
        prop_assert_eq!(plain, sized);
    }
}

// RecordBatchBuilder: the incremental, owned form of the encoder.

/// The codecs built into this test binary (all default features).
const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// `records` appended to a builder, each sized first, checking that the batch grows by exactly
/// the size `encoded_record_size_at` gives for the record at its deltas.
fn built(records: &[Record]) -> RecordBatchBuilder {
    let mut b = RecordBatchBuilder::new();
    for (i, r) in records.iter().enumerate() {
        let body =
            encoded_record_body_size(r.key.as_deref(), r.value.as_deref(), &r.headers).unwrap();
        let delta = r.timestamp.wrapping_sub(records[0].timestamp);
        let expected = encoded_record_size_at(body, i as i32, delta);
        assert_eq!(
            expected,
            encoded_record_size(
                i as i32,
                delta,
                r.key.as_deref(),
                r.value.as_deref(),
                &r.headers
            )
            .unwrap()
        );
        let before = b.size_in_bytes();
        let at = b
            .append_parts_sized(
                r.timestamp,
                r.key.as_deref(),
                r.value.as_deref(),
                &r.headers,
                body,
            )
            .unwrap();
        assert_eq!(at, i as i32);
        assert_eq!(b.size_in_bytes() - before, expected, "record {i}");
    }
    b
}

fn batch_options(
    compression: Compression,
    base_offset: i64,
    producer: (i64, i16, i32),
    flags: (bool, bool, bool),
) -> RecordBatchOptions {
    RecordBatchOptions::new()
        .base_offset(base_offset)
        .compression(compression)
        .producer(producer.0, producer.1, producer.2)
        .transactional(flags.0)
        .control(flags.1)
        .timestamp_type(if flags.2 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        })
}

proptest! {
    /// A batch built record by record is byte for byte the encoder's, with every codec, and
    /// again after its producer fields change (a re-encode); `put_record_batch` around its
    /// section gives the same bytes.
    #[test]
    fn a_built_batch_is_the_encoders_batch(
        records in proptest::collection::vec(arb_record(), 1..24),
        codec in 0..CODECS.len(),
        base_offset in any::<i64>(),
        epoch in any::<i32>(),
        producer in any::<(i64, i16, i32)>(),
        bumped in any::<(i64, i16, i32)>(),
        flags in any::<(bool, bool, bool)>(),
    ) {
        let compression = CODECS[codec];
        let mut b = built(&records);
        prop_assert_eq!(b.record_count() as usize, records.len());
        prop_assert_eq!(b.base_timestamp(), Some(records[0].timestamp));
        prop_assert_eq!(b.max_timestamp(), records.iter().map(|r| r.timestamp).max().unwrap());
        for p in [producer, bumped, producer] {
            let options = batch_options(compression, base_offset, p, flags).partition_leader_epoch(epoch);
            let want = encode(options, &records).freeze();
            let got = b.build(&options).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&got, &want);
            let mut out = BytesMut::from(&b"prefix"[..]);
            let n = put_record_batch(
                &mut out,
                &options,
                b.records(),
                b.record_count(),
                records[0].timestamp,
                b.max_timestamp(),
            )
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(n, want.len());
            prop_assert_eq!(&out[6..], &want[..]);
            if compression == Compression::None {
                prop_assert_eq!(b.size_in_bytes(), want.len());
            }
        }
    }

    /// Records appended after a build (whose bytes are still held, or dropped) join the same
    /// batch: the next build is the encoder's batch of all of them.
    #[test]
    fn appending_after_a_build_continues_the_batch(
        first in proptest::collection::vec(arb_record(), 1..8),
        more in proptest::collection::vec(arb_record(), 1..8),
        hold in any::<bool>(),
    ) {
        let mut b = built(&first);
        let options = RecordBatchOptions::new().producer(1, 2, 3);
        let held = b.build(&options).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let before = held.clone();
        if !hold {
            drop(held);
        }
        for r in &more {
            b.append_parts(r.timestamp, r.key.as_deref(), r.value.as_deref(), &r.headers)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        let all: Vec<Record> = first.iter().chain(&more).cloned().collect();
        let got = b.build(&options).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(got, encode(options, &all).freeze());
        // The bytes handed out before are unchanged.
        prop_assert_eq!(before, encode(options, &first).freeze());
    }

    /// Decoding a built batch gives back each record, with negative timestamp deltas and null
    /// keys and values.
    #[test]
    fn a_built_batch_decodes_to_its_records(records in proptest::collection::vec(arb_record(), 1..24)) {
        let mut b = built(&records);
        let data = b.build(&RecordBatchOptions::new()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let batch = decode_one(data).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(batch.records.len(), records.len());
        for (i, (got, want)) in batch.records.iter().zip(&records).enumerate() {
            prop_assert_eq!(got.offset, i as i64);
            prop_assert_eq!(got.timestamp, want.timestamp);
            prop_assert_eq!(&got.key, &want.key);
            prop_assert_eq!(&got.value, &want.value);
            prop_assert_eq!(&got.headers, &want.headers);
        }
    }

    /// Any claimed body size either is the record's (and the record is written) or is refused
    /// with nothing written: never a panic, never a corrupt batch.
    #[test]
    fn a_wrong_body_size_is_refused_with_nothing_written(
        record in arb_record(),
        claimed in prop_oneof![Just(0usize), Just(1), 2..200usize, Just(usize::MAX)],
    ) {
        let mut b = built(std::slice::from_ref(&record));
        let size = b.size_in_bytes();
        let body = encoded_record_body_size(record.key.as_deref(), record.value.as_deref(), &record.headers).unwrap();
        let r = b.append_parts_sized(record.timestamp, record.key.as_deref(), record.value.as_deref(), &record.headers, claimed);
        if claimed == body {
            prop_assert_eq!(r, Ok(1));
        } else {
            prop_assert!(matches!(r, Err(RecordsError::RecordLengthMismatch { .. })), "{:?}", r);
            prop_assert_eq!(b.size_in_bytes(), size);
            prop_assert_eq!(b.record_count(), 1);
        }
        let data = b.build(&RecordBatchOptions::new()).unwrap();
        prop_assert!(decode_one(data).is_ok());
    }
}

#[test]
fn an_empty_builder_builds_nothing() {
    let mut b = RecordBatchBuilder::with_capacity(4096);
    assert_eq!(
        (b.record_count(), b.size_in_bytes()),
        (0, BATCH_HEADER_SIZE)
    );
    assert_eq!((b.base_timestamp(), b.max_timestamp()), (None, -1));
    assert!(b.records().is_empty());
    for c in CODECS {
        let options = RecordBatchOptions::new().compression(c);
        assert_eq!(b.build(&options), Ok(Bytes::new()));
    }
    let mut out = BytesMut::new();
    assert_eq!(
        put_record_batch(&mut out, &RecordBatchOptions::new(), &[], 0, 0, -1),
        Ok(0)
    );
    assert!(out.is_empty());
}

#[test]
fn builder_errors_are_typed_and_leave_nothing_behind() {
    let mut b = built(&[rec(5, None, Some(b"v"))]);
    let horizon = RecordBatchOptions::new().delete_horizon_ms(Some(9));
    assert!(matches!(
        b.build(&horizon),
        Err(RecordsError::InvalidOptions { .. })
    ));
    let mut out = BytesMut::from(&b"keep"[..]);
    assert!(matches!(
        put_record_batch(&mut out, &horizon, b.records(), 1, 5, 5),
        Err(RecordsError::InvalidOptions { .. })
    ));
    assert!(matches!(
        put_record_batch(&mut out, &RecordBatchOptions::new(), b.records(), -1, 5, 5),
        Err(RecordsError::InvalidRecordCount { count: -1, .. })
    ));
    // A codec that is not built in.
    let lz4 = RecordBatchOptions::new()
        .compression(Compression::Lz4)
        .with_lookup(none_only_lookup);
    assert!(matches!(
        b.build(&lz4),
        Err(RecordsError::Compression { .. })
    ));
    assert!(matches!(
        put_record_batch(&mut out, &lz4, b.records(), 1, 5, 5),
        Err(RecordsError::Compression { .. })
    ));
    assert_eq!(&out[..], b"keep");
    // A body size no record has is refused, nothing written.
    let size = b.size_in_bytes();
    assert!(
        b.append_parts_sized(5, None, None, &[], usize::MAX)
            .is_err()
    );
    assert_eq!(b.size_in_bytes(), size);
    // Still a good batch.
    let data = b.build(&RecordBatchOptions::new()).unwrap();
    assert_eq!(decode_one(data).unwrap().records.len(), 1);
}

#[test]
fn an_uncompressed_build_hands_out_its_buffer_without_copying() {
    let mut b = RecordBatchBuilder::with_capacity(1024);
    for i in 0..10 {
        b.append_parts(100 - i, Some(b"k"), Some(b"value"), &[])
            .unwrap();
    }
    let records_at = b.records().as_ptr();
    let data = b.build(&RecordBatchOptions::new()).unwrap();
    assert_eq!(data[BATCH_HEADER_SIZE..].as_ptr(), records_at);
    assert_eq!(b.records().as_ptr(), records_at);
    // Built again with the first bytes gone: the same buffer, a new header.
    drop(data);
    let again = b
        .build(&RecordBatchOptions::new().producer(1, 1, 1))
        .unwrap();
    assert_eq!(again[BATCH_HEADER_SIZE..].as_ptr(), records_at);
    assert_eq!(decode_one(again).unwrap().header.base_sequence, 1);
}

#[test]
fn a_taken_buffer_builds_the_next_batch_in_the_same_memory() {
    let first = [rec(5, Some(b"k"), Some(b"first value"))];
    let second = [rec(9, None, Some(b"v2")), rec(12, Some(b"k2"), None)];
    let options = RecordBatchOptions::new().producer(7, 0, 3);
    // Bytes of the uncompressed build still held: the buffer is shared, not handed out.
    let mut b = built(&first);
    let held = b.build(&options).unwrap();
    assert!(b.take_buffer().is_none());
    assert_eq!((b.record_count(), b.size_in_bytes()), (0, 0));
    drop(held);
    // Once they drop, the buffer comes back empty, and a batch built in it is byte-identical
    // to one built in fresh memory.
    let mut b = built(&first);
    let bytes = b.build(&options).unwrap();
    let at = bytes.as_ptr();
    drop(bytes);
    let buffer = b.take_buffer().expect("nothing else holds the buffer");
    assert!(buffer.is_empty());
    let mut again = RecordBatchBuilder::from_buffer(buffer, 0);
    let mut fresh = RecordBatchBuilder::new();
    for r in &second {
        for x in [&mut again, &mut fresh] {
            x.append_parts(
                r.timestamp,
                r.key.as_deref(),
                r.value.as_deref(),
                &r.headers,
            )
            .unwrap();
        }
    }
    let reused = again.build(&options).unwrap();
    assert_eq!(reused.as_ptr(), at, "the same memory");
    assert_eq!(reused, fresh.build(&options).unwrap());
    assert_eq!(decode_one(reused).unwrap().records.len(), 2);
    // Compressed builds never share the buffer: it is always handed back.
    let mut c = built(&first);
    let zipped = c
        .build(&RecordBatchOptions::new().compression(Compression::Lz4))
        .unwrap();
    assert!(c.take_buffer().is_some());
    drop(zipped);
}
