//! Compress and decompress throughput per codec through the registry
//! (`codec_by_id(..).compress/decompress`), beside the same work done by calling the underlying
//! library directly, on a 256 KiB records section of JSON-like values.
//!
//! Run: `cargo bench -p kafkit-compress --bench codecs -- --warm-up-time 1 --measurement-time 3`.
//! Throughput is in bytes of uncompressed input per second for both directions.

use std::hint::black_box;
use std::io::{Read, Write};
use std::time::Instant;

use bytes::BytesMut;
use criterion::{Criterion, Throughput, criterion_main};
use kafkit_compress::{Compression, codec_by_id};

/// A records section like a producer's: per record a few varint-ish header bytes, a key and a
/// JSON value of 150-250 bytes, until `size` bytes.
fn records_section(size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 512);
    let mut i = 0u64;
    while out.len() < size {
        let value = format!(
            r#"{{"order_id":{},"customer":"cust-{:05}","status":"{}","amount":{}.{:02},"currency":"EUR","items":[{{"sku":"SKU-{:04}","qty":{}}}],"ts":"2026-11-29T23:{:02}:{:02}Z"}}"#,
            100_000 + i,
            i * 7919 % 50_000,
            ["NEW", "PAID", "SHIPPED", "CANCELLED"][(i % 4) as usize],
            i * 31 % 1000,
            i % 100,
            i * 13 % 9000,
            1 + i % 5,
            i % 60,
            i * 7 % 60
        );
        let key = format!("cust-{:05}", i * 7919 % 50_000);
        out.extend_from_slice(&[0x80, 0x02, 0x00, (i % 128) as u8, (i % 64) as u8]);
        out.push(key.len() as u8 * 2);
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(&(value.len() as u16).to_le_bytes());
        out.extend_from_slice(value.as_bytes());
        out.push(0);
        i += 1;
    }
    out.truncate(size);
    out
}

/// Compresses `input` by calling the codec's library directly, the way the registry's codec
/// does (same format, same settings), into `out`.
fn direct_compress(c: Compression, input: &[u8], out: &mut Vec<u8>) {
    match c {
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::default());
            enc.write_all(input).unwrap();
            enc.finish().unwrap();
        }
        Compression::Snappy => {
            let mut enc = snap::raw::Encoder::new();
            out.extend_from_slice(&[
                0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
            ]);
            for block in input.chunks(32 * 1024) {
                let at = out.len();
                out.resize(at + 4 + snap::raw::max_compress_len(block.len()), 0);
                let n = enc.compress(block, &mut out[at + 4..]).unwrap();
                out.truncate(at + 4 + n);
                out[at..at + 4].copy_from_slice(&(n as u32).to_be_bytes());
            }
        }
        Compression::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new()
                .block_size(lz4_flex::frame::BlockSize::Max64KB)
                .block_mode(lz4_flex::frame::BlockMode::Independent);
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
            enc.write_all(input).unwrap();
            enc.finish().unwrap();
        }
        Compression::Zstd => {
            out.reserve(zstd::zstd_safe::compress_bound(input.len()));
            zstd::zstd_safe::compress(out, input, 3).unwrap();
        }
        _ => unreachable!(),
    }
}

/// Decompresses `input` by calling the codec's library directly into `out`.
fn direct_decompress(c: Compression, input: &[u8], out: &mut Vec<u8>) {
    match c {
        Compression::Gzip => {
            flate2::bufread::MultiGzDecoder::new(input)
                .read_to_end(out)
                .unwrap();
        }
        Compression::Snappy => {
            let mut dec = snap::raw::Decoder::new();
            let mut rest = &input[16..];
            while !rest.is_empty() {
                let n = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
                let block = &rest[4..4 + n];
                let len = snap::raw::decompress_len(block).unwrap();
                let at = out.len();
                out.resize(at + len, 0);
                dec.decompress(block, &mut out[at..]).unwrap();
                rest = &rest[4 + n..];
            }
        }
        Compression::Lz4 => {
            lz4_flex::frame::FrameDecoder::new(input)
                .read_to_end(out)
                .unwrap();
        }
        Compression::Zstd => {
            let n = zstd::zstd_safe::get_frame_content_size(input)
                .unwrap()
                .unwrap() as usize;
            out.reserve(n);
            zstd::zstd_safe::decompress(out, input).unwrap();
        }
        _ => unreachable!(),
    }
}

/// On a shared, busy machine criterion's back-to-back groups see different loads. This runs the
/// registry and the direct call alternately (which goes first alternates too), `ROUNDS` times
/// each, and prints the ratio of their fastest runs (the run least disturbed by other processes), which is what docs/benchmarks.md
/// reports as the overhead.
fn interleaved(c: Compression, input: &[u8], compressed: &[u8]) {
    const ROUNDS: usize = 300;
    let codec = codec_by_id(c.id()).unwrap();
    let mut out = BytesMut::with_capacity(input.len() * 2);
    let mut vout = Vec::with_capacity(input.len() * 2);
    let mut best = [f64::MAX; 4];
    let mut time = |slot: usize, f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        best[slot] = best[slot].min(t.elapsed().as_secs_f64());
    };
    for round in 0..ROUNDS {
        // Whichever runs first after the other direction pays for colder caches: alternate.
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for &who in &order {
            if who == 0 {
                time(0, &mut || {
                    out.clear();
                    codec.compress(black_box(input), None, &mut out).unwrap();
                });
            } else {
                time(1, &mut || {
                    vout.clear();
                    direct_compress(c, black_box(input), &mut vout);
                });
            }
        }
        for &who in &order {
            if who == 0 {
                time(2, &mut || {
                    out.clear();
                    codec
                        .decompress(black_box(compressed), 64 << 20, &mut out)
                        .unwrap();
                });
            } else {
                time(3, &mut || {
                    vout.clear();
                    direct_decompress(c, black_box(compressed), &mut vout);
                });
            }
        }
    }
    let mib = input.len() as f64 / f64::from(1 << 20);
    eprintln!(
        "interleaved {c}: compress registry {:.0} MiB/s direct {:.0} MiB/s ratio {:.3}; \
         decompress registry {:.0} MiB/s direct {:.0} MiB/s ratio {:.3}",
        mib / best[0],
        mib / best[1],
        best[0] / best[1],
        mib / best[2],
        mib / best[3],
        best[2] / best[3],
    );
}

fn codecs(cr: &mut Criterion) {
    let input = records_section(256 * 1024);
    for c in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let codec = codec_by_id(c.id()).unwrap();
        let mut compressed = BytesMut::new();
        codec.compress(&input, None, &mut compressed).unwrap();
        // The direct calls must produce and read the same format.
        let mut direct = Vec::new();
        direct_compress(c, &input, &mut direct);
        let mut check = Vec::new();
        direct_decompress(c, &compressed, &mut check);
        assert_eq!(check, input, "{c}: direct decoder disagrees");

        let mut g = cr.benchmark_group(format!("{c}"));
        g.throughput(Throughput::Bytes(input.len() as u64));
        let mut out = BytesMut::with_capacity(input.len() * 2);
        g.bench_function("compress/registry", |b| {
            b.iter(|| {
                out.clear();
                codec_by_id(c.id())
                    .unwrap()
                    .compress(black_box(&input), None, &mut out)
                    .unwrap();
            })
        });
        let mut vout = Vec::with_capacity(input.len() * 2);
        g.bench_function("compress/direct", |b| {
            b.iter(|| {
                vout.clear();
                direct_compress(c, black_box(&input), &mut vout);
            })
        });
        g.bench_function("decompress/registry", |b| {
            b.iter(|| {
                out.clear();
                codec_by_id(c.id())
                    .unwrap()
                    .decompress(black_box(&compressed), 64 << 20, &mut out)
                    .unwrap();
            })
        });
        g.bench_function("decompress/direct", |b| {
            b.iter(|| {
                vout.clear();
                direct_decompress(c, black_box(&compressed), &mut vout);
            })
        });
        g.finish();
        interleaved(c, &input, &compressed);
        eprintln!(
            "{c}: {} -> {} bytes (ratio {:.2})",
            input.len(),
            compressed.len(),
            input.len() as f64 / compressed.len() as f64
        );
    }
}

/// `criterion_group!` makes an undocumented `pub fn`; keep it in its own module.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::codecs);
}

criterion_main!(group::benches);
