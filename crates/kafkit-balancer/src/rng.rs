//! A small lock-free random source for balancers that pick partitions at random.
//!
//! SplitMix64 over an atomic counter: each draw adds the golden-ratio increment and mixes the
//! result, so concurrent callers never wait on each other. Not for cryptography.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// Thread-safe pseudo-random numbers (SplitMix64).
#[derive(Debug)]
pub(crate) struct Rng {
    state: AtomicU64,
}

impl Rng {
    /// A generator seeded from the process's random hash keys (differs per instance).
    pub(crate) fn from_entropy() -> Self {
        Self::with_seed(RandomState::new().hash_one(0x006b_6166_6b61_u64))
    }

    /// A generator that repeats the same sequence for the same `seed`.
    pub(crate) fn with_seed(seed: u64) -> Self {
        Self {
            state: AtomicU64::new(seed),
        }
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(GOLDEN, Ordering::Relaxed)
            .wrapping_add(GOLDEN);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform index in `0..len` (`len > 0`), by the multiply-shift method.
    pub(crate) fn below(&self, len: usize) -> usize {
        ((u128::from(self.next_u64()) * len as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let rng = Rng::with_seed(7);
        let mut seen = [0u32; 5];
        for _ in 0..10_000 {
            seen[rng.below(5)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 1_500), "{seen:?}");
    }

    #[test]
    fn same_seed_same_sequence() {
        let a = Rng::with_seed(42);
        let b = Rng::with_seed(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(
            Rng::from_entropy().next_u64(),
            Rng::from_entropy().next_u64()
        );
    }
}
