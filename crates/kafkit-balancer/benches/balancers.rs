//! Nanoseconds per partition choice for each balancer, with 16-byte keys and 32 partitions.
//!
//! Run: `cargo bench -p kafkit-balancer --bench balancers -- --warm-up-time 1 --measurement-time 3`.
//! Each iteration places one record; keys rotate through 1024 pseudo-random 16-byte keys so no
//! result can be computed once and reused. The `keyless` rows place null-key records (the sticky
//! path of the sticky balancers).

use std::hint::black_box;

use criterion::{Criterion, criterion_main};
use kafkit_balancer::{
    Balancer, Crc32, Fnv1a, Hash, LeastBytes, Manual, Murmur2, Record, ReferenceHash, RoundRobin,
    Sticky, UniformSticky, balancer_fn, crc32, fnv1a32, murmur2,
};

const PARTITIONS: i32 = 32;

fn keys() -> Vec<[u8; 16]> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..1024)
        .map(|_| {
            let mut k = [0u8; 16];
            for chunk in k.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes());
            }
            k
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let keys = keys();
    let partitions: Vec<i32> = (0..PARTITIONS).collect();
    let balancers: Vec<(&str, Box<dyn Balancer>)> = vec![
        ("Murmur2", Box::new(Murmur2::new())),
        ("Crc32", Box::new(Crc32::consistent())),
        ("Fnv1a", Box::new(Fnv1a::new())),
        ("Hash", Box::new(Hash::new())),
        ("ReferenceHash", Box::new(ReferenceHash::new())),
        ("RoundRobin", Box::new(RoundRobin::new())),
        ("LeastBytes", Box::new(LeastBytes::new())),
        ("Manual", Box::new(Manual::new(7))),
        ("Sticky", Box::new(Sticky::new())),
        ("UniformSticky", Box::new(UniformSticky::new())),
        (
            "balancer_fn",
            Box::new(balancer_fn(|r: &Record<'_>, p: &[i32]| {
                Ok(p[r.key.map_or(0, <[u8]>::len) % p.len()])
            })),
        ),
    ];

    let mut g = c.benchmark_group("balance 16-byte key, 32 partitions");
    for (name, b) in &balancers {
        let mut i = 0usize;
        g.bench_function(*name, |bench| {
            bench.iter(|| {
                i = (i + 1) & 1023;
                let r = Record::keyed("bench", &keys[i], 100);
                black_box(b.balance(black_box(&r), &partitions))
            })
        });
    }
    for (name, b) in balancers.iter().filter(|(n, _)| n.contains("Sticky")) {
        g.bench_function(format!("{name} keyless"), |bench| {
            bench.iter(|| {
                let r = Record::keyless("bench", 100);
                black_box(b.balance(black_box(&r), &partitions))
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("hash 16 bytes");
    let mut i = 0usize;
    let mut next = || {
        i = (i + 1) & 1023;
        &keys[i]
    };
    g.bench_function("murmur2", |b| {
        b.iter(|| black_box(murmur2(black_box(next()))))
    });
    g.bench_function("crc32", |b| b.iter(|| black_box(crc32(black_box(next())))));
    g.bench_function("fnv1a32", |b| {
        b.iter(|| black_box(fnv1a32(black_box(next()))))
    });
    g.finish();
}

/// `criterion_group!` makes an undocumented `pub fn`; keep it in its own module.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}
criterion_main!(group::benches);
