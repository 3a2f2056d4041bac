use super::*;
use proptest::prelude::*;

/// Every codec other than `none`, as built by default.
const CODECS: [Compression; 4] = [
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// Every level worth trying for `c`: all of gzip's and lz4's, zstd's -10..=22 plus its minimum.
fn levels(c: Compression) -> Vec<Option<i32>> {
    let mut v = vec![None];
    match c {
        Compression::Gzip => v.extend((1..=9).chain([-1]).map(Some)),
        Compression::Lz4 => v.extend((1..=17).map(Some)),
        Compression::Zstd => v.extend((-10..=22).chain([-131_072]).map(Some)),
        _ => {}
    }
    v
}

/// JSON-like text: compressible, like real record values.
fn sample(len: usize) -> Vec<u8> {
    let mut s = Vec::with_capacity(len + 64);
    let mut i = 0u64;
    while s.len() < len {
        s.extend_from_slice(
            format!(
                r#"{{"id":{i},"user":"u{}","ok":{}}},"#,
                i * 7919 % 1000,
                i.is_multiple_of(3)
            )
            .as_bytes(),
        );
        i += 1;
    }
    s.truncate(len);
    s
}

fn round_trip(c: Compression, level: Option<i32>, data: &[u8]) -> Vec<u8> {
    let codec = c.codec().unwrap();
    let mut z = BytesMut::from(&b"head"[..]);
    codec.compress(data, level, &mut z).unwrap();
    assert_eq!(&z[..4], b"head", "compress must append");
    let mut d = BytesMut::from(&b"out"[..]);
    codec.decompress(&z[4..], data.len(), &mut d).unwrap();
    assert_eq!(&d[..3], b"out", "decompress must append");
    d[3..].to_vec()
}

#[test]
fn ids_and_names_round_trip() {
    for c in Compression::ALL {
        assert_eq!(Compression::from_id(c.id()), Ok(c));
        assert_eq!(Compression::from_name(c.name()), Ok(c));
        assert_eq!(c.name().parse::<Compression>(), Ok(c));
        assert_eq!(c.to_string(), c.name());
        let codec = codec_by_id(c.id()).unwrap();
        assert_eq!((codec.id(), codec.name()), (c.id(), c.name()));
        assert_eq!(codec_by_name(c.name()).unwrap().compression(), c);
        assert_eq!(codec.level_range(), c.level_range());
        assert!(c.is_supported());
    }
    assert_eq!(Compression::from_name("GZIP"), Ok(Compression::Gzip));
    assert_eq!(
        [0u8, 1, 2, 3, 4].map(|i| Compression::from_id(i).map(|c| c.name())),
        [Ok("none"), Ok("gzip"), Ok("snappy"), Ok("lz4"), Ok("zstd")]
    );
}

#[test]
fn unknown_ids_and_names_are_errors() {
    for id in 5..=u8::MAX {
        assert_eq!(
            Compression::from_id(id),
            Err(CompressError::UnknownCodecId(id))
        );
        assert_eq!(
            codec_by_id(id).unwrap_err(),
            CompressError::UnknownCodecId(id)
        );
    }
    assert_eq!(
        codec_by_name("brotli").unwrap_err(),
        CompressError::UnknownCodecName("brotli".into())
    );
    let err = codec_by_id(7).unwrap_err();
    assert_eq!(err.kafka_error_name(), Some("CORRUPT_MESSAGE"));
    assert!(!err.is_retriable());
}

#[test]
fn attribute_bits_pick_the_codec() {
    // Timestamp type, transactional and control bits must not change the codec.
    assert_eq!(
        Compression::from_attributes(0b11_1011),
        Ok(Compression::Lz4)
    );
    assert_eq!(Compression::from_attributes(0x0004), Ok(Compression::Zstd));
    assert_eq!(
        Compression::from_attributes(0x0006),
        Err(CompressError::UnknownCodecId(6))
    );
}

#[test]
fn levels_follow_kip_390() {
    let check = |c: Compression, l: i32| CompressionConfig::with_level(c, l).map(|x| x.level());
    assert_eq!(check(Compression::Gzip, -1), Ok(Some(-1)));
    assert_eq!(check(Compression::Gzip, 9), Ok(Some(9)));
    assert_eq!(check(Compression::Lz4, 17), Ok(Some(17)));
    assert_eq!(check(Compression::Zstd, -131_072), Ok(Some(-131_072)));
    assert_eq!(check(Compression::Zstd, 22), Ok(Some(22)));
    for (c, bad) in [
        (Compression::None, 1),
        (Compression::Snappy, 1),
        (Compression::Gzip, 0),
        (Compression::Gzip, 10),
        (Compression::Gzip, -2),
        (Compression::Lz4, 0),
        (Compression::Lz4, 18),
        (Compression::Zstd, 23),
        (Compression::Zstd, -131_073),
    ] {
        let want = CompressError::InvalidLevel {
            compression: c,
            level: bad,
        };
        assert_eq!(CompressionConfig::with_level(c, bad), Err(want.clone()));
        // The codec refuses it too, before touching the output.
        let mut out = BytesMut::new();
        assert_eq!(
            c.codec().unwrap().compress(b"x", Some(bad), &mut out),
            Err(want)
        );
        assert!(out.is_empty());
    }
    assert_eq!(Compression::Gzip.default_level(), Some(-1));
    assert_eq!(Compression::Lz4.default_level(), Some(9));
    assert_eq!(Compression::Zstd.default_level(), Some(3));
    assert_eq!(Compression::Snappy.default_level(), None);
    for c in Compression::ALL {
        assert_eq!(c.validate_level(c.default_level()), Ok(c.default_level()));
        assert_eq!(CompressionConfig::from(c).level(), None);
    }
    assert_eq!(CompressionConfig::default(), CompressionConfig::NONE);
}

#[test]
fn every_codec_and_level_round_trips_a_batch() {
    let data = sample(40_000);
    for c in CODECS {
        for level in levels(c) {
            assert_eq!(round_trip(c, level, &data), data, "{c} level {level:?}");
        }
        assert_eq!(round_trip(c, None, b""), b"", "{c} empty");
    }
}

#[test]
fn levels_change_the_output_where_the_library_has_levels() {
    let data = sample(100_000);
    for c in [Compression::Gzip, Compression::Zstd] {
        let size = |l| {
            let mut z = BytesMut::new();
            c.codec().unwrap().compress(&data, Some(l), &mut z).unwrap();
            z.len()
        };
        let (lo, hi) = if c == Compression::Gzip {
            (1, 9)
        } else {
            (1, 19)
        };
        assert!(
            size(hi) < size(lo),
            "{c}: level {hi} should beat level {lo}"
        );
    }
}

#[test]
fn none_codec_appends_and_keeps_existing_bytes() {
    let codec = codec_by_id(0).unwrap();
    assert_eq!(codec.level_range(), None);
    let mut out = BytesMut::from(&b"prefix:"[..]);
    codec.compress(b"abc", None, &mut out).unwrap();
    codec.decompress(b"def", 3, &mut out).unwrap();
    assert_eq!(&out[..], b"prefix:abcdef");
    assert_eq!(
        codec.decompress(b"abcd", 3, &mut BytesMut::new()),
        Err(CompressError::OutputLimitExceeded {
            compression: Compression::None,
            limit: 3
        })
    );
}

// ---- formats other clients write ----

#[test]
fn snappy_writes_xerial_framing_with_32k_blocks() {
    let data = sample(70_000);
    let mut z = BytesMut::new();
    SnappyCodec.compress(&data, None, &mut z).unwrap();
    assert_eq!(&z[..8], &snappy::XERIAL_MAGIC);
    assert_eq!(&z[8..16], &[0, 0, 0, 1, 0, 0, 0, 1]);
    // Walk the blocks: 32 KiB, 32 KiB, the rest.
    let mut rest = &z[16..];
    let mut sizes = Vec::new();
    while !rest.is_empty() {
        let n = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        sizes.push(snap::raw::decompress_len(&rest[4..4 + n]).unwrap());
        rest = &rest[4 + n..];
    }
    assert_eq!(sizes, vec![32_768, 32_768, 70_000 - 65_536]);
}

#[test]
fn snappy_reads_raw_blocks_as_librdkafka_writes_them() {
    let data = sample(50_000);
    let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
    let mut d = BytesMut::new();
    SnappyCodec.decompress(&raw, data.len(), &mut d).unwrap();
    assert_eq!(&d[..], &data[..]);
}

#[test]
fn lz4_writes_the_java_frame_and_reads_the_legacy_checksum() {
    let data = sample(100_000);
    let mut z = BytesMut::new();
    Lz4Codec.compress(&data, None, &mut z).unwrap();
    assert_eq!(&z[..4], &[0x04, 0x22, 0x4d, 0x18]);
    // FLG: version 01, independent blocks, no checksums, no content size; BD: 64 KiB blocks.
    assert_eq!(z[4], 0b0110_0000);
    assert_eq!(z[5], 0x40);
    let proper = z[6];
    let mut legacy = z.to_vec();
    lz4::break_header_checksum(&mut legacy);
    assert_ne!(
        legacy[6], proper,
        "the two checksums differ for this header"
    );
    let mut d = BytesMut::new();
    Lz4Codec.decompress(&legacy, data.len(), &mut d).unwrap();
    assert_eq!(&d[..], &data[..]);
    // A checksum that is neither is corrupt.
    legacy[6] = !(legacy[6] ^ proper) ^ legacy[6];
    legacy[6] = legacy[6].wrapping_add(1);
    if legacy[6] == proper {
        legacy[6] = legacy[6].wrapping_add(1);
    }
    let err = Lz4Codec.decompress(&legacy, data.len(), &mut BytesMut::new());
    assert!(matches!(err, Err(CompressError::Corrupt { .. })), "{err:?}");
}

#[test]
fn gzip_reads_concatenated_members() {
    let mut z = BytesMut::new();
    GzipCodec.compress(b"hello ", None, &mut z).unwrap();
    GzipCodec.compress(b"world", Some(1), &mut z).unwrap();
    let mut d = BytesMut::new();
    GzipCodec.decompress(&z, 11, &mut d).unwrap();
    assert_eq!(&d[..], b"hello world");
}

#[test]
fn zstd_reads_a_streamed_frame_without_content_size() {
    // The Java producer streams (no content size in the frame header).
    let data = sample(100_000);
    let mut enc = ::zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
    std::io::Write::write_all(&mut enc, &data).unwrap();
    let z = enc.finish().unwrap();
    let mut d = BytesMut::new();
    ZstdCodec.decompress(&z, data.len(), &mut d).unwrap();
    assert_eq!(&d[..], &data[..]);
}

#[test]
fn zstd_with_a_kept_context_writes_what_a_fresh_context_writes() {
    // One thread, one kept context: inputs of different sizes and levels, large then small
    // (the context keeps the larger workspace), each frame byte-identical to libzstd's
    // one-shot compression with a context of its own, and read back.
    let cases = [
        (sample(300_000), 3),
        (sample(1_000), 1),
        (sample(70_000), 19),
        (sample(10), -5),
        (Vec::new(), 3),
    ];
    for (data, level) in &cases {
        let mut kept = BytesMut::from(&b"prefix"[..]);
        ZstdCodec.compress(data, Some(*level), &mut kept).unwrap();
        let mut want = Vec::with_capacity(::zstd::zstd_safe::compress_bound(data.len()));
        ::zstd::zstd_safe::compress(&mut want, data, *level).unwrap();
        assert_eq!(&kept[..6], b"prefix", "appended after what the buffer held");
        assert_eq!(&kept[6..], &want[..], "level {level}, {} bytes", data.len());
        let mut d = BytesMut::new();
        ZstdCodec
            .decompress(&kept[6..], data.len(), &mut d)
            .unwrap();
        assert_eq!(&d[..], &data[..]);
    }
}

#[test]
fn lz4_frames_are_what_lz4_flex_reads_with_java_s_header() {
    use std::io::Read as _;
    // Pseudo-random bytes do not shrink: stored blocks.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..150_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let inputs = [
        Vec::new(),
        vec![7u8],
        sample(65_536),
        sample(300_001),
        noise,
    ];
    // The header lz4_flex's frame encoder writes for the same frame settings (Java's).
    let mut reference = Vec::new();
    {
        use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
        let info = FrameInfo::new()
            .block_size(BlockSize::Max64KB)
            .block_mode(BlockMode::Independent);
        let mut enc = FrameEncoder::with_frame_info(info, &mut reference);
        std::io::Write::write_all(&mut enc, b"x").unwrap();
        enc.finish().unwrap();
    }
    for data in &inputs {
        let mut z = BytesMut::from(&b"ab"[..]);
        Lz4Codec.compress(data, None, &mut z).unwrap();
        assert_eq!(&z[..2], b"ab", "appended after what the buffer held");
        let frame = &z[2..];
        assert_eq!(&frame[..7], &reference[..7], "the frame header");
        assert_eq!(&frame[frame.len() - 4..], &[0, 0, 0, 0], "the end mark");
        let mut back = Vec::new();
        lz4_flex::frame::FrameDecoder::new(frame)
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, *data, "{} bytes, read by lz4_flex", data.len());
        let mut d = BytesMut::new();
        Lz4Codec.decompress(frame, data.len(), &mut d).unwrap();
        assert_eq!(&d[..], &data[..], "{} bytes, read by the codec", data.len());
    }
    // Blocks that do not shrink are stored: the frame is the input plus the header, a size per
    // block (3 here) and the end mark.
    let mut z = BytesMut::new();
    Lz4Codec.compress(&inputs[4], None, &mut z).unwrap();
    assert!(z.len() <= inputs[4].len() + 7 + 4 * 3 + 4, "{}", z.len());
    assert_eq!(z[7 + 3] & 0x80, 0x80, "the first block is stored");
}

// ---- bad input ----

#[test]
fn truncated_and_corrupt_payloads_are_typed_errors() {
    let data = sample(100_000);
    for c in CODECS {
        let codec = c.codec().unwrap();
        let mut z = BytesMut::new();
        codec.compress(&data, None, &mut z).unwrap();
        for cut in [1, 5, z.len() / 2, z.len() - 1] {
            let r = codec.decompress(&z[..cut], data.len(), &mut BytesMut::new());
            assert!(
                matches!(&r, Err(CompressError::Corrupt { compression, .. }) if *compression == c),
                "{c} cut at {cut}: {r:?}"
            );
        }
        // Flip bytes in the middle of the payload: an error or (at worst) different data,
        // never a panic and never more than the limit.
        let mut bad = z.to_vec();
        let mid = bad.len() / 2;
        for b in &mut bad[mid..mid + 8] {
            *b ^= 0xa5;
        }
        let mut out = BytesMut::new();
        if codec.decompress(&bad, data.len(), &mut out).is_ok() {
            assert_ne!(&out[..], &data[..], "{c}: corruption went unnoticed");
        }
        assert!(out.capacity() <= data.len() + 1 + 64, "{c}");
        // Not this codec's format at all.
        let r = codec.decompress(b"definitely not compressed", 1 << 20, &mut BytesMut::new());
        assert!(
            matches!(r, Err(CompressError::Corrupt { .. })),
            "{c}: {r:?}"
        );
        let err = r.unwrap_err();
        assert_eq!(err.kafka_error_name(), Some("CORRUPT_MESSAGE"));
    }
}

/// Compressed 1 GiB of zeros for `c`, built from one compressed 1 MiB piece repeated (gzip members,
/// snappy xerial blocks, zstd frames, lz4 independent blocks), so the test stays fast.
fn gib_of_zeros(c: Compression) -> Vec<u8> {
    const MIB: usize = 1 << 20;
    let zeros = vec![0u8; MIB];
    let codec = c.codec().unwrap();
    match c {
        Compression::Gzip | Compression::Zstd => {
            let mut one = BytesMut::new();
            codec.compress(&zeros, None, &mut one).unwrap();
            one.repeat(1024)
        }
        Compression::Snappy => {
            let mut one = BytesMut::new();
            codec.compress(&zeros, None, &mut one).unwrap();
            let mut v = one[..16].to_vec();
            let blocks = &one[16..];
            for _ in 0..1024 {
                v.extend_from_slice(blocks);
            }
            v
        }
        Compression::Lz4 => {
            // Independent blocks of zeros compress identically: repeat the 1 MiB frame's blocks.
            let mut one = BytesMut::new();
            codec.compress(&zeros, None, &mut one).unwrap();
            let (header, blocks) = one[..one.len() - 4].split_at(7);
            let mut v = header.to_vec();
            for _ in 0..1024 {
                v.extend_from_slice(blocks);
            }
            v.extend_from_slice(&[0; 4]); // end mark
            v
        }
        _ => unreachable!(),
    }
}

#[test]
fn a_decompression_bomb_stops_at_the_limit() {
    const LIMIT: usize = 4 << 20;
    for c in CODECS {
        let bomb = gib_of_zeros(c);
        // Snappy cannot do better than about 21:1, so its GiB of zeros is about 48 MiB.
        let most = if c == Compression::Snappy {
            64 << 20
        } else {
            8 << 20
        };
        assert!(bomb.len() < most, "{c} bomb is {} bytes", bomb.len());
        let mut out = BytesMut::new();
        let r = c.codec().unwrap().decompress(&bomb, LIMIT, &mut out);
        assert_eq!(
            r,
            Err(CompressError::OutputLimitExceeded {
                compression: c,
                limit: LIMIT
            }),
            "{c}"
        );
        assert!(
            out.capacity() <= LIMIT + 1,
            "{c}: output grew to {} bytes",
            out.capacity()
        );
    }
    // A raw snappy block declaring 4 GiB is refused from its header alone.
    let mut raw = vec![0xff, 0xff, 0xff, 0xff, 0x0f];
    raw.extend_from_slice(&[0; 16]);
    let r = SnappyCodec.decompress(&raw, LIMIT, &mut BytesMut::new());
    assert!(
        matches!(r, Err(CompressError::OutputLimitExceeded { .. })),
        "{r:?}"
    );
}

#[test]
fn declared_sizes_do_not_reserve_the_whole_bound() {
    const LIMIT: usize = 64 << 20;
    // A gzip trailer claiming 4 GiB on a few bytes of payload.
    let mut z = BytesMut::new();
    GzipCodec.compress(b"tiny", None, &mut z).unwrap();
    let n = z.len();
    z[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut out = BytesMut::new();
    let r = GzipCodec.decompress(&z, LIMIT, &mut out);
    assert!(matches!(r, Err(CompressError::Corrupt { .. })), "{r:?}");
    assert!(
        out.capacity() < 1 << 20,
        "reserved {} bytes",
        out.capacity()
    );
    // A raw snappy block whose declared length is past the bound is refused before any write.
    let mut raw = vec![0x80, 0x80, 0x80, 0x40]; // varint 128 MiB
    raw.extend_from_slice(&[0; 8]);
    let mut out = BytesMut::new();
    let r = SnappyCodec.decompress(&raw, LIMIT, &mut out);
    assert!(
        matches!(r, Err(CompressError::OutputLimitExceeded { .. })),
        "{r:?}"
    );
    assert_eq!(out.capacity(), 0);
}

#[test]
fn the_limit_is_exact() {
    let data = sample(10_000);
    for c in Compression::ALL {
        let codec = c.codec().unwrap();
        let mut z = BytesMut::new();
        codec.compress(&data, None, &mut z).unwrap();
        let mut d = BytesMut::new();
        codec.decompress(&z, data.len(), &mut d).unwrap();
        assert_eq!(d.len(), data.len());
        let r = codec.decompress(&z, data.len() - 1, &mut BytesMut::new());
        assert!(
            matches!(r, Err(CompressError::OutputLimitExceeded { limit, .. }) if limit == data.len() - 1),
            "{c}: {r:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn decompress_inverts_compress(
        data in proptest::collection::vec(any::<u8>(), 0..20_000),
        json in 0usize..70_000,
        which in 0usize..5,
        pick in any::<prop::sample::Index>(),
    ) {
        let c = Compression::ALL[which];
        let levels = levels(c);
        let level = levels[pick.index(levels.len())];
        for input in [data, sample(json)] {
            let codec = c.codec().unwrap();
            let mut z = BytesMut::new();
            codec.compress(&input, level, &mut z).unwrap();
            let mut d = BytesMut::new();
            codec.decompress(&z, input.len(), &mut d).unwrap();
            prop_assert_eq!(&d[..], &input[..]);
        }
    }

    #[test]
    fn every_level_in_range_round_trips(
        c in prop::sample::select(vec![Compression::Gzip, Compression::Lz4, Compression::Zstd]),
        pick in any::<prop::sample::Index>(),
        json in 0usize..20_000,
    ) {
        // Any level of the whole KIP-390 range (zstd's reaches -131072), not just the listed ones.
        let range = c.level_range().unwrap();
        let span = usize::try_from(range.end() - range.start()).unwrap() + 1;
        let level = range.start() + i32::try_from(pick.index(span)).unwrap();
        let input = sample(json);
        prop_assert_eq!(round_trip(c, Some(level), &input), input);
    }

    #[test]
    fn garbage_never_panics_or_exceeds_the_limit(
        data in proptest::collection::vec(any::<u8>(), 0..2_000),
        which in 0usize..5,
        limit in 0usize..100_000,
    ) {
        let c = Compression::ALL[which];
        let mut out = BytesMut::new();
        let r = c.codec().unwrap().decompress(&data, limit, &mut out);
        let bound = if r.is_ok() { limit } else { limit + 1 };
        prop_assert!(out.len() <= bound);
        prop_assert!(out.capacity() <= (limit + 1).max(data.len()) + 64 * 1024);
    }

    #[test]
    fn any_attribute_value_is_a_codec_or_a_typed_error(attrs in any::<i16>()) {
        match Compression::from_attributes(attrs) {
            Ok(c) => prop_assert_eq!(i16::from(c.id()), attrs & 7),
            Err(e) => prop_assert_eq!(e, CompressError::UnknownCodecId((attrs & 7) as u8)),
        }
    }
}
