//! Writes the seed corpora of the fuzz targets in `fuzz/` (one directory per target) from what the
//! round-trip tests build: every generated message at every version (random values of
//! `kafkit_protocol::arbitrary`, as `tests/messages_roundtrip.rs`), record batches with every
//! codec, legacy message sets, compressed inputs, SASL server messages, and the first frames a
//! broker sends on a connection. The input layouts are those documented in each target.
//!
//! `cargo run -p kafkit-protocol --example fuzz_seeds -- fuzz/corpus` (what `cargo xtask fuzz`
//! runs first). Deterministic: the same files every run.

use std::path::{Path, PathBuf};

use bytes::{BufMut, Bytes, BytesMut};
use kafkit_compress::Compression;
use kafkit_protocol::arbitrary::{Arbitrary, Gen};
use kafkit_protocol::messages::api_versions_response::ApiVersion;
use kafkit_protocol::messages::{
    ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse, ResponseHeader,
};
use kafkit_protocol::records::{Record, RecordBatchEncoder, RecordBatchOptions};
use kafkit_protocol::{ApiKey, Message, Request};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

struct Out {
    dir: PathBuf,
    n: usize,
}

impl Out {
    fn new(root: &Path, target: &str) -> Result<Out> {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        Ok(Out { dir, n: 0 })
    }

    fn put(&mut self, name: &str, data: &[u8]) -> Result<()> {
        std::fs::write(self.dir.join(format!("seed-{name}")), data)?;
        self.n += 1;
        Ok(())
    }
}

fn prefix(kind: u8, key: u16, version: i16) -> BytesMut {
    let mut b = BytesMut::new();
    b.put_u8(kind);
    b.put_u16(key);
    b.put_i16(version);
    b
}

fn encoded<M: Message + Arbitrary>(seed: u64, version: i16) -> Result<BytesMut> {
    let mut g = Gen::new(seed ^ (version as u64).wrapping_mul(0x9e37_79b9));
    let value = M::arbitrary(&mut g, version);
    let mut buf = BytesMut::new();
    value.encode(&mut buf, version)?;
    Ok(buf)
}

fn request_seeds<R: Request + Arbitrary>(out: &mut Out) -> Result<()>
where
    R::Response: Arbitrary,
{
    let key = R::API_KEY as i16 as u16;
    for version in R::VERSIONS.min..=R::VERSIONS.max {
        let mut b = prefix(0, key, version);
        b.extend_from_slice(&encoded::<R>(1, version)?);
        out.put(&format!("{}-v{version}", R::NAME), &b)?;
        let body = encoded::<R::Response>(2, version)?;
        let mut b = prefix(1, key, version);
        b.extend_from_slice(&body);
        out.put(
            &format!("{}-v{version}", <R::Response as Message>::NAME),
            &b,
        )?;
        let mut b = prefix(2, key, version);
        let header = ResponseHeader::default().with_correlation_id(7);
        header.encode(&mut b, R::response_header_version(version))?;
        b.extend_from_slice(&body);
        out.put(
            &format!("{}-frame-v{version}", <R::Response as Message>::NAME),
            &b,
        )?;
    }
    Ok(())
}

fn message_seeds(root: &Path) -> Result<usize> {
    let mut out = Out::new(root, "messages")?;
    macro_rules! requests {
        ($module:ident, $req:ident, $resp:ident) => {
            request_seeds::<kafkit_protocol::messages::$req>(&mut out)?;
        };
    }
    kafkit_protocol::for_each_request!(requests);
    // Kind 3: every message by its index in `for_each_message!`; only the ones that are not an
    // API's request or response (headers, data schemas), which kinds 0 and 1 cover already.
    let mut index: u16 = 0;
    macro_rules! others {
        ($module:ident, $ty:ident) => {{
            type T = kafkit_protocol::messages::$ty;
            let name = <T as Message>::NAME;
            if !name.ends_with("Request") && !name.ends_with("Response")
                || name.starts_with("RequestHeader")
                || name.starts_with("ResponseHeader")
            {
                for version in T::VERSIONS.min..=T::VERSIONS.max {
                    let mut b = prefix(3, index, version);
                    b.extend_from_slice(&encoded::<T>(3, version)?);
                    out.put(&format!("{name}-v{version}"), &b)?;
                }
            }
            index += 1;
        }};
    }
    {
        kafkit_protocol::for_each_message!(others);
    }
    let _ = index;
    Ok(out.n)
}

fn batch(compression: Compression, records: &[Record], txn: bool) -> Result<BytesMut> {
    let mut buf = BytesMut::new();
    let mut options = RecordBatchOptions::new()
        .base_offset(1000)
        .compression(compression);
    if txn {
        options = options.transactional(true).producer(7, 1, 0);
    }
    let mut enc = RecordBatchEncoder::new(&mut buf, options)?;
    for r in records {
        enc.append(r)?;
    }
    enc.finish()?;
    Ok(buf)
}

/// CRC-32 (IEEE), the checksum of legacy messages.
fn crc32_ieee(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// One legacy message (protocol guide, "Message Sets").
fn legacy(offset: i64, magic: i8, attributes: i8, key: Option<&[u8]>, value: &[u8]) -> BytesMut {
    let mut body = BytesMut::new();
    body.put_i8(magic);
    body.put_i8(attributes);
    if magic == 1 {
        body.put_i64(1_600_000_000_000 + offset);
    }
    match key {
        Some(k) => {
            body.put_i32(k.len() as i32);
            body.extend_from_slice(k);
        }
        None => body.put_i32(-1),
    }
    body.put_i32(value.len() as i32);
    body.extend_from_slice(value);
    let mut m = BytesMut::new();
    m.put_i64(offset);
    m.put_i32(4 + body.len() as i32);
    m.put_u32(crc32_ieee(&body));
    m.extend_from_slice(&body);
    m
}

fn record_seeds(root: &Path) -> Result<usize> {
    let mut out = Out::new(root, "records")?;
    let records: Vec<Record> = (0..4)
        .map(|i| {
            Record::new(
                (i % 2 == 0).then(|| Bytes::from(format!("key-{i}"))),
                Some(Bytes::from(format!("value {i} value {i} value {i}"))),
            )
            .with_timestamp(1_700_000_000_000 + i)
            .with_header("h", Some(Bytes::from_static(b"v")))
        })
        .collect();
    for (i, compression) in Compression::ALL.into_iter().enumerate() {
        for txn in [false, true] {
            let b = batch(compression, &records, txn)?;
            // Mode 0 (raw, CRC verified), two batches in a row.
            let mut seed = vec![0, 0, 1];
            seed.extend_from_slice(&b);
            seed.extend_from_slice(&b);
            out.put(&format!("raw-{}-{txn}", compression.name()), &seed)?;
        }
        // Mode 1: the uncompressed records section, prefixed by its record count.
        let plain = batch(Compression::None, &records, false)?;
        let mut seed = vec![1, i as u8, 0];
        seed.extend_from_slice(&(records.len() as i32).to_be_bytes());
        seed.extend_from_slice(&plain[kafkit_protocol::records::BATCH_HEADER_SIZE..]);
        out.put(&format!("section-{}", compression.name()), &seed)?;
    }
    for magic in [0i8, 1] {
        let mut set = BytesMut::new();
        set.extend_from_slice(&legacy(10, magic, 0, Some(b"k0"), b"v0"));
        set.extend_from_slice(&legacy(11, magic, 0, None, b"v1"));
        let mut seed = vec![0, 0, 1];
        seed.extend_from_slice(&set);
        out.put(&format!("legacy-v{magic}"), &seed)?;
        // Mode 2: the same set as a compressed wrapper's inner messages (magic 1 uses relative
        // inner offsets).
        let mut inner = BytesMut::new();
        inner.extend_from_slice(&legacy(0, magic, 0, Some(b"k0"), b"v0"));
        inner.extend_from_slice(&legacy(1, magic, 0, None, b"v1"));
        for codec in 0..4u8 {
            let mut seed = vec![2, codec, magic as u8];
            seed.extend_from_slice(&inner);
            out.put(&format!("wrapper-v{magic}-{codec}"), &seed)?;
        }
    }
    Ok(out.n)
}

fn decompress_seeds(root: &Path) -> Result<usize> {
    let mut out = Out::new(root, "decompress")?;
    let texts: [&[u8]; 3] = [b"", b"hello kafka, hello kafka, hello kafka", &[7u8; 3000]];
    for (c, compression) in Compression::ALL[1..].iter().enumerate() {
        let codec = compression.codec()?;
        for (t, text) in texts.iter().enumerate() {
            let mut seed = vec![c as u8, 5];
            let mut buf = BytesMut::new();
            codec.compress(text, None, &mut buf)?;
            seed.extend_from_slice(&buf);
            out.put(&format!("{}-{t}", compression.name()), &seed)?;
        }
    }
    // Snappy's raw block form (no xerial framing) is accepted too.
    let mut raw = vec![1u8, 4];
    raw.extend_from_slice(&[0x05, 0x10, b'h', b'e', b'l', b'l', b'o']);
    out.put("snappy-raw", &raw)?;
    Ok(out.n)
}

fn sasl_seeds(root: &Path) -> Result<usize> {
    let mut out = Out::new(root, "sasl")?;
    let nonce = "fyko+d2lbbFgONRv9qkxdawL";
    let first = format!("r={nonce}3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096");
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        ("scram256", [&[0u8][..], first.as_bytes(), b"\0v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", b"\0"].concat()),
        ("scram512", [&[1u8][..], first.as_bytes(), b"\0e=invalid-proof"].concat()),
        ("scram-error", b"\0e=unknown-user".to_vec()),
        ("oauth-config", b"\x02eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9.\0alice\0traceid\0abc\0".to_vec()),
        ("oauth-answer", b"\x03{\"status\":\"invalid_token\",\"scope\":\"kafka\"}\0".to_vec()),
        ("msk-config", b"\x04us-east-1\0b-1.example.kafka.us-east-1.amazonaws.com\0AKIDEXAMPLE\0secret\0token\0kafkit/0.1".to_vec()),
        ("msk-answer", b"\x05{\"version\":\"2020_10_22\",\"request-id\":\"abc\"}\0\0alice\0pw\0".to_vec()),
    ];
    for (name, data) in seeds {
        out.put(name, &data)?;
    }
    Ok(out.n)
}

fn frame<R: Request>(version: i16, cid: i32, resp: &R::Response) -> Result<BytesMut> {
    let mut body = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(cid)
        .encode(&mut body, R::response_header_version(version))?;
    resp.encode(&mut body, version)?;
    let mut f = BytesMut::new();
    f.put_i32(body.len() as i32);
    f.extend_from_slice(&body);
    Ok(f)
}

fn conn_seeds(root: &Path) -> Result<usize> {
    let mut out = Out::new(root, "conn_frames")?;
    let av = ApiVersionsRequest::VERSIONS.max;
    let md = MetadataRequest::VERSIONS.max;
    let range = |key: ApiKey, min: i16, max: i16| {
        ApiVersion::default()
            .with_api_key(key as i16)
            .with_min_version(min)
            .with_max_version(max)
    };
    let versions = ApiVersionsResponse::default().with_api_keys(vec![
        range(ApiKey::ApiVersions, 0, av),
        range(ApiKey::Metadata, 0, md),
    ]);
    let mut g = Gen::new(11);
    let metadata = MetadataResponse::arbitrary(&mut g, md);
    let mut both = vec![3u8];
    both.extend_from_slice(&frame::<ApiVersionsRequest>(av, 0, &versions)?);
    both.extend_from_slice(&frame::<MetadataRequest>(md, 1, &metadata)?);
    out.put("versions-metadata", &both)?;
    // UNSUPPORTED_VERSION in the v0 format, then the retry's answer (KIP-511).
    let refused = ApiVersionsResponse::default()
        .with_error_code(kafkit_protocol::ErrorCode::UNSUPPORTED_VERSION)
        .with_api_keys(vec![range(ApiKey::ApiVersions, 0, 2)]);
    let mut retry = vec![3u8];
    retry.extend_from_slice(&frame::<ApiVersionsRequest>(0, 0, &refused)?);
    retry.extend_from_slice(&frame::<ApiVersionsRequest>(2, 1, &versions)?);
    out.put("versions-retry", &retry)?;
    out.put("http", b"\x03HTTP/1.1 400 Bad Request\r\n\r\n")?;
    out.put("huge", b"\x03\x7f\xff\xff\xff\0\0\0\0")?;
    Ok(out.n)
}

fn main() -> Result<()> {
    let root = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: fuzz_seeds <corpus directory>")?,
    );
    let counts = [
        ("messages", message_seeds(&root)?),
        ("records", record_seeds(&root)?),
        ("decompress", decompress_seeds(&root)?),
        ("sasl", sasl_seeds(&root)?),
        ("conn_frames", conn_seeds(&root)?),
    ];
    for (target, n) in counts {
        println!("{target}: {n} seeds in {}", root.join(target).display());
    }
    Ok(())
}
