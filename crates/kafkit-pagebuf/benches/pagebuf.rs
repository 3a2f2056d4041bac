//! Write-then-read of 1 KiB to 16 MiB through a `PageBuf` (64 KiB pages from a warm pool) beside
//! `BytesMut`, fresh (grows by reallocating and copying, as a buffer made per request does) and
//! reused (cleared and written again, its capacity kept: the best case for `BytesMut`).
//!
//! One iteration writes `size` bytes in 128-byte pieces (about a small record each) with
//! `put_slice`, then reads them back in 128-byte pieces with `copy_to_slice`, as a decoder would.
//!
//! Run: `cargo bench -p kafkit-pagebuf` (criterion; not run by `cargo xtask test`). Throughput is
//! in bytes written (and read) per second.

use std::hint::black_box;

use bytes::{Buf, BufMut, BytesMut};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_main};
use kafkit_pagebuf::PagePool;

const PIECE: usize = 128;
const SIZES: [usize; 5] = [1 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20];

fn write_then_read<B: BufMut + Buf>(buf: &mut B, size: usize, piece: &[u8; PIECE]) -> u8 {
    let mut left = size;
    while left > 0 {
        let n = left.min(PIECE);
        buf.put_slice(&piece[..n]);
        left -= n;
    }
    let mut out = [0u8; PIECE];
    let mut acc = 0u8;
    while buf.has_remaining() {
        let n = buf.remaining().min(PIECE);
        buf.copy_to_slice(&mut out[..n]);
        acc ^= out[n - 1];
    }
    acc
}

fn bench(c: &mut Criterion) {
    let piece: [u8; PIECE] = std::array::from_fn(|i| i as u8);
    let mut group = c.benchmark_group("write_then_read");
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        if size >= 4 << 20 {
            group.sample_size(20);
        }
        // 16 MiB needs 256 pages of 64 KiB: a pool bounded at 512 keeps them all warm.
        let pool = PagePool::new();
        group.bench_with_input(BenchmarkId::new("pagebuf", size), &size, |b, &size| {
            b.iter(|| {
                let mut buf = pool.buffer();
                black_box(write_then_read(&mut buf, size, &piece))
            })
        });
        group.bench_with_input(
            BenchmarkId::new("bytesmut_fresh", size),
            &size,
            |b, &size| {
                b.iter(|| {
                    let mut buf = BytesMut::new();
                    black_box(write_then_read(&mut buf, size, &piece))
                })
            },
        );
        let mut reused = BytesMut::new();
        group.bench_with_input(
            BenchmarkId::new("bytesmut_reused", size),
            &size,
            |b, &size| {
                b.iter(|| {
                    reused.clear();
                    black_box(write_then_read(&mut reused, size, &piece))
                })
            },
        );
        let stats = pool.stats();
        assert_eq!(
            stats.in_use, 0,
            "every page back after the bench: {stats:?}"
        );
        assert_eq!(
            stats.overflow_allocated, 0,
            "the pool was big enough: {stats:?}"
        );
    }
    group.finish();
}

/// `criterion_group!` makes an undocumented `pub fn`; keep it in its own module.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}
criterion_main!(group::benches);
