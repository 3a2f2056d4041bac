//! Sticky balancers over many batches: the load spreads evenly (within 5% of the mean per
//! partition), and keyed records never follow the sticky partition.
//!
//! A small simulated writer fills one batch per partition; keyless records go where the balancer
//! says, and a batch is closed once it holds `BATCH` bytes. The random choices are seeded, so
//! each run is the same.

use kafkit_balancer::{Balancer, Murmur2, Record, Sticky, UniformSticky};

const BATCH: usize = 4096;
const PARTITIONS: i32 = 8;
/// Batches closed per run: 100,000 over 8 partitions, about 12,500 each, so one standard
/// deviation of a partition's share is under 1% and 5% is a margin of over 5 of them.
const BATCHES: usize = 100_000;

/// Deterministic record sizes from 50 to 649 bytes.
struct Sizes(u64);

impl Sizes {
    fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        50 + (self.0 % 600) as usize
    }
}

/// Writes keyless records until `BATCHES` batches are closed; `on_batch_closed` hears about each
/// closed batch. Returns bytes written per partition.
fn simulate(b: &dyn Balancer, mut on_batch_closed: impl FnMut(i32)) -> Vec<u64> {
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let mut open = vec![0usize; PARTITIONS as usize];
    let mut bytes = vec![0u64; PARTITIONS as usize];
    let mut sizes = Sizes(0x9e37_79b9);
    let mut closed = 0;
    while closed < BATCHES {
        let size = sizes.next();
        let p = b.balance(&Record::keyless("load", size), &all).unwrap();
        let i = p as usize;
        open[i] += size;
        bytes[i] += size as u64;
        if open[i] >= BATCH {
            open[i] = 0;
            closed += 1;
            on_batch_closed(p);
        }
    }
    bytes
}

fn assert_even(name: &str, bytes: &[u64]) {
    let mean = bytes.iter().sum::<u64>() as f64 / bytes.len() as f64;
    for (p, &b) in bytes.iter().enumerate() {
        let off = (b as f64 - mean).abs() / mean;
        assert!(
            off <= 0.05,
            "{name}: partition {p} got {b} bytes, mean {mean:.0} ({:.1}% off)",
            off * 100.0
        );
    }
}

#[test]
fn sticky_spreads_evenly_over_many_batches() {
    let s = Sticky::new().with_seed(11);
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let mut switches = 0;
    let bytes = simulate(&s, |p| {
        // The writer tells the balancer each time a batch completes (KIP-480's onNewBatch).
        let next = s.on_new_batch("load", p, &all).unwrap();
        switches += usize::from(next != p);
    });
    assert_eq!(
        switches, BATCHES,
        "each closed batch moves the sticky partition"
    );
    assert_even("Sticky", &bytes);
}

#[test]
fn uniform_sticky_spreads_evenly_over_many_batches() {
    let u = UniformSticky::new().batch_size(BATCH).with_seed(12);
    let bytes = simulate(&u, |_| {});
    assert_even("UniformSticky", &bytes);
}

/// Keys whose murmur2 partition (of 8) differs from `sticky`.
fn keys_off(sticky: i32) -> impl Iterator<Item = Vec<u8>> {
    (0u32..)
        .map(|i| format!("key-{i}").into_bytes())
        .filter(move |k| Murmur2::index(k, PARTITIONS as usize) as i32 != sticky)
}

#[test]
fn keyed_records_never_follow_the_sticky_partition() {
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let sticky = Sticky::new().with_seed(1);
    let uniform = UniformSticky::new().batch_size(1 << 20).with_seed(2);
    let balancers: [&dyn Balancer; 2] = [&sticky, &uniform];
    for b in balancers {
        let stuck = b.balance(&Record::keyless("t", 100), &all).unwrap();
        for key in keys_off(stuck).take(2000) {
            let want = Murmur2::index(&key, all.len()) as i32;
            // Big keyed records: with UniformSticky they must not count toward its batch size.
            assert_eq!(
                b.balance(&Record::keyed("t", &key, 1 << 19), &all),
                Ok(want)
            );
            assert_ne!(want, stuck);
            // The empty key is a key too.
            assert_eq!(
                b.balance(&Record::keyed("t", b"", 1), &all),
                Ok(Murmur2::index(b"", all.len()) as i32)
            );
        }
        // The keyless choice did not move.
        assert_eq!(b.balance(&Record::keyless("t", 100), &all), Ok(stuck));
    }
}
