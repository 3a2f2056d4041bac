//! Balancers that hash the key: the same key always maps to the same index of the partition
//! list. Keyless records (null keys) are hashed as an empty key or placed at random, per
//! balancer, as the client each one copies does.

use crate::hash::{crc32, fnv1a32, murmur2, to_positive};
use crate::rng::Rng;
use crate::{BalanceError, Balancer, Record, non_empty};

/// How a hashing balancer places a record whose key it does not hash.
fn random_pick(rng: &Rng, partitions: &[i32]) -> i32 {
    partitions[rng.below(partitions.len())]
}

/// Murmur2: the Java client's partition for keyed records, and librdkafka's `murmur2` and
/// `murmur2_random` partitioners.
///
/// Rule: index = `to_positive(murmur2(key)) % partitions.len()`, where [`to_positive`] clears
/// the sign bit (Java `Utils.toPositive`, librdkafka `& 0x7fffffff`); see [`murmur2`].
///
/// Keys: an empty key is hashed like any other (Java and both librdkafka variants agree).
/// A null key:
/// - [`Murmur2::new`] (librdkafka `murmur2`): hashed as the empty key, so every keyless record
///   goes to one partition;
/// - [`Murmur2::murmur2_random`] (librdkafka `murmur2_random`): a uniformly random partition for
///   each record. (librdkafka keeps its random choice for `sticky.partitioning.linger.ms`; this
///   matches it with that setting at 0.)
///
/// The Java client never hashes a null key: it uses its sticky partitioner, which is
/// [`UniformSticky`](crate::UniformSticky) (or [`Sticky`](crate::Sticky) before Kafka 3.3).
#[derive(Debug)]
pub struct Murmur2 {
    random_null_keys: bool,
    rng: Rng,
}

impl Default for Murmur2 {
    fn default() -> Self {
        Self::new()
    }
}

impl Murmur2 {
    /// librdkafka's `murmur2`: null keys hashed as the empty key.
    pub fn new() -> Self {
        Self {
            random_null_keys: false,
            rng: Rng::from_entropy(),
        }
    }

    /// librdkafka's `murmur2_random` (the Java client's keyed rule): null keys go to a random
    /// partition.
    pub fn murmur2_random() -> Self {
        Self {
            random_null_keys: true,
            ..Self::new()
        }
    }

    /// Seeds the random choice for null keys, so a run can be repeated (tests, simulations).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = Rng::with_seed(seed);
        self
    }

    /// The index into a list of `count` partitions (`count > 0`) that `key` maps to.
    ///
    /// ```
    /// // toPositive(-790332482) = 1357151166, and 1357151166 % 10 = 6.
    /// assert_eq!(kafkit_balancer::Murmur2::index(b"foobar", 10), 6);
    /// ```
    pub fn index(key: &[u8], count: usize) -> usize {
        to_positive(murmur2(key)) as usize % count
    }
}

impl Balancer for Murmur2 {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        non_empty(record, partitions)?;
        Ok(match record.key {
            Some(key) => partitions[Self::index(key, partitions.len())],
            None if self.random_null_keys => random_pick(&self.rng, partitions),
            None => partitions[Self::index(&[], partitions.len())],
        })
    }
}

/// CRC-32: librdkafka's `consistent` and `consistent_random` partitioners (`consistent_random`
/// is librdkafka's default), and kafka-go's `CRC32Balancer`.
///
/// Rule: index = `crc32(key) % partitions.len()`, computed unsigned; see [`crc32`].
///
/// Keys:
/// - [`Crc32::consistent`] (librdkafka `consistent`): null and empty keys both hash to CRC 0,
///   so they go to the first partition of the list;
/// - [`Crc32::consistent_random`] (librdkafka `consistent_random`): a null **or empty** key goes
///   to a uniformly random partition for each record (librdkafka keeps its random choice for
///   `sticky.partitioning.linger.ms`; this matches it with that setting at 0).
#[derive(Debug)]
pub struct Crc32 {
    random_empty_keys: bool,
    rng: Rng,
}

impl Crc32 {
    /// librdkafka's `consistent`: every key hashed, null and empty keys alike.
    pub fn consistent() -> Self {
        Self {
            random_empty_keys: false,
            rng: Rng::from_entropy(),
        }
    }

    /// librdkafka's `consistent_random`: null and empty keys go to a random partition.
    pub fn consistent_random() -> Self {
        Self {
            random_empty_keys: true,
            ..Self::consistent()
        }
    }

    /// Seeds the random choice for null and empty keys.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = Rng::with_seed(seed);
        self
    }

    /// The index into a list of `count` partitions (`count > 0`) that `key` maps to.
    pub fn index(key: &[u8], count: usize) -> usize {
        crc32(key) as usize % count
    }
}

impl Balancer for Crc32 {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        non_empty(record, partitions)?;
        let key = record.key.unwrap_or_default();
        if key.is_empty() && self.random_empty_keys {
            return Ok(random_pick(&self.rng, partitions));
        }
        Ok(partitions[Self::index(key, partitions.len())])
    }
}

/// FNV-1a: librdkafka's `fnv1a` and `fnv1a_random` partitioners.
///
/// Rule: `h = fnv1a32(key)` read as a signed 32-bit integer, made absolute (`i32::MIN` stays
/// `2^31`), then `% partitions.len()`. This equals Sarama's `NewHashPartitioner` for every
/// non-null key (see [`Hash`](struct@Hash)), which is what librdkafka set out to match.
///
/// Keys: an empty key is hashed like any other. A null key:
/// - [`Fnv1a::new`] (librdkafka `fnv1a`): hashed as the empty key;
/// - [`Fnv1a::fnv1a_random`] (librdkafka `fnv1a_random`): a uniformly random partition for each
///   record (librdkafka: with `sticky.partitioning.linger.ms` at 0).
#[derive(Debug)]
pub struct Fnv1a {
    random_null_keys: bool,
    rng: Rng,
}

impl Default for Fnv1a {
    fn default() -> Self {
        Self::new()
    }
}

impl Fnv1a {
    /// librdkafka's `fnv1a`: null keys hashed as the empty key.
    pub fn new() -> Self {
        Self {
            random_null_keys: false,
            rng: Rng::from_entropy(),
        }
    }

    /// librdkafka's `fnv1a_random`: null keys go to a random partition.
    pub fn fnv1a_random() -> Self {
        Self {
            random_null_keys: true,
            ..Self::new()
        }
    }

    /// Seeds the random choice for null keys.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = Rng::with_seed(seed);
        self
    }

    /// The index into a list of `count` partitions (`count > 0`) that `key` maps to.
    pub fn index(key: &[u8], count: usize) -> usize {
        abs_fnv1a(key) as usize % count
    }
}

/// `|fnv1a32(key) as i32|` as librdkafka's `rd_fnv1a` returns it (wrapping at `i32::MIN`).
fn abs_fnv1a(key: &[u8]) -> u32 {
    (fnv1a32(key) as i32).unsigned_abs()
}

impl Balancer for Fnv1a {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        non_empty(record, partitions)?;
        Ok(match record.key {
            Some(key) => partitions[Self::index(key, partitions.len())],
            None if self.random_null_keys => random_pick(&self.rng, partitions),
            None => partitions[Self::index(&[], partitions.len())],
        })
    }
}

/// Sarama's `NewHashPartitioner` (its default) and kafka-go's `Hash`.
///
/// Rule: `h = fnv1a32(key)` as a signed 32-bit integer; index = `|h % partitions.len()|`
/// (Go's `%` keeps the dividend's sign). For every key this picks the same index as [`Fnv1a`].
///
/// Keys: an empty (non-nil) key is hashed. A null key goes to a uniformly random partition, as
/// Sarama's random partitioner does (kafka-go instead round-robins null keys).
#[derive(Debug)]
pub struct Hash {
    rng: Rng,
}

impl Default for Hash {
    fn default() -> Self {
        Self::new()
    }
}

impl Hash {
    /// Sarama's hash partitioner.
    pub fn new() -> Self {
        Self {
            rng: Rng::from_entropy(),
        }
    }

    /// Seeds the random choice for null keys.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = Rng::with_seed(seed);
        self
    }

    /// The index into a list of `count` partitions (`count > 0`) that `key` maps to.
    pub fn index(key: &[u8], count: usize) -> usize {
        let h = i64::from(fnv1a32(key) as i32);
        // count fits in i64 on every platform Rust supports; the remainder's magnitude < count.
        (h % count as i64).unsigned_abs() as usize
    }
}

impl Balancer for Hash {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        non_empty(record, partitions)?;
        Ok(match record.key {
            Some(key) => partitions[Self::index(key, partitions.len())],
            None => random_pick(&self.rng, partitions),
        })
    }
}

/// Sarama's `NewReferenceHashPartitioner` and kafka-go's `ReferenceHash`.
///
/// Rule: `h = fnv1a32(key)` with the sign bit cleared ([`to_positive`]); index =
/// `h % partitions.len()`. Differs from [`Hash`](struct@Hash) for keys whose hash has the top bit set.
///
/// Keys: an empty (non-nil) key is hashed; a null key goes to a uniformly random partition, as
/// in Sarama.
#[derive(Debug)]
pub struct ReferenceHash {
    rng: Rng,
}

impl Default for ReferenceHash {
    fn default() -> Self {
        Self::new()
    }
}

impl ReferenceHash {
    /// Sarama's reference hash partitioner.
    pub fn new() -> Self {
        Self {
            rng: Rng::from_entropy(),
        }
    }

    /// Seeds the random choice for null keys.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = Rng::with_seed(seed);
        self
    }

    /// The index into a list of `count` partitions (`count > 0`) that `key` maps to.
    pub fn index(key: &[u8], count: usize) -> usize {
        to_positive(fnv1a32(key) as i32) as usize % count
    }
}

impl Balancer for ReferenceHash {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        non_empty(record, partitions)?;
        Ok(match record.key {
            Some(key) => partitions[Self::index(key, partitions.len())],
            None => random_pick(&self.rng, partitions),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [i32; 7] = [0, 1, 2, 3, 4, 5, 6];

    #[test]
    fn null_keys_hash_as_empty_unless_random() {
        let r = Record::keyless("t", 1);
        let e = Record::keyed("t", b"", 1);
        for _ in 0..20 {
            let m = Murmur2::new();
            assert_eq!(m.balance(&r, &ALL), m.balance(&e, &ALL));
            let f = Fnv1a::new();
            assert_eq!(f.balance(&r, &ALL), f.balance(&e, &ALL));
            assert_eq!(Crc32::consistent().balance(&r, &ALL), Ok(0));
            assert_eq!(Crc32::consistent().balance(&e, &ALL), Ok(0));
        }
        // murmur2("") = 0x106e08d9 = 275646681; 275646681 % 7 = 2.
        assert_eq!(Murmur2::new().balance(&r, &ALL), Ok(2));
        // |0x811c9dc5 as i32| = 2128831035; 2128831035 % 7 = 2.
        assert_eq!(Fnv1a::new().balance(&r, &ALL), Ok(2));
    }

    /// Counts, over 7000 draws, how often each partition is picked for `record`.
    fn spread(b: &dyn Balancer, record: &Record<'_>) -> [u32; 7] {
        let mut n = [0u32; 7];
        for _ in 0..7000 {
            n[b.balance(record, &ALL).unwrap() as usize] += 1;
        }
        n
    }

    #[test]
    fn random_variants_spread_null_keys() {
        let null = Record::keyless("t", 1);
        let empty = Record::keyed("t", b"", 1);
        let randoms: [&dyn Balancer; 5] = [
            &Murmur2::murmur2_random().with_seed(1),
            &Fnv1a::fnv1a_random().with_seed(2),
            &Crc32::consistent_random().with_seed(3),
            &Hash::new().with_seed(4),
            &ReferenceHash::new().with_seed(5),
        ];
        for (i, b) in randoms.into_iter().enumerate() {
            let n = spread(b, &null);
            assert!(n.iter().all(|&c| c > 800), "balancer {i}: {n:?}");
        }
        // consistent_random also randomises empty keys; the others hash them.
        let n = spread(&Crc32::consistent_random().with_seed(6), &empty);
        assert!(n.iter().all(|&c| c > 800), "{n:?}");
        let n = spread(&Murmur2::murmur2_random(), &empty);
        assert_eq!(n[2], 7000);
    }

    #[test]
    fn hash_and_reference_hash_differ_on_negative_hashes() {
        // fnv1a32("") = 0x811c9dc5: negative as i32 (-2128831035).
        // Hash: |-2128831035 % 7| = 2. ReferenceHash: (0x011c9dc5 = 18652613) % 7 = 0.
        assert_eq!(Hash::index(b"", 7), 2);
        assert_eq!(ReferenceHash::index(b"", 7), 0);
        assert_eq!(Fnv1a::index(b"", 7), 2);
        // For every key Hash and Fnv1a agree.
        for i in 0u32..5000 {
            let k = i.to_le_bytes();
            for n in [1, 2, 3, 7, 32, 1000] {
                assert_eq!(Hash::index(&k, n), Fnv1a::index(&k, n), "{i} {n}");
            }
        }
    }

    /// Sarama's `TestHashPartitionerWithHasherMinInt32` (partitioner_test.go) uses this key
    /// because its FNV-1a is 0x80000000, i32::MIN when read as signed.
    #[test]
    fn fnv1a_of_i32_min() {
        let key = b"1468509572224";
        assert_eq!(fnv1a32(key), 0x8000_0000);
        // Go: int32(MinInt32) % 50 = -48, negated 48. librdkafka: abs wraps to 2^31; 2^31 % 50 = 48.
        assert_eq!(Hash::index(key, 50), 48);
        assert_eq!(Fnv1a::index(key, 50), 48);
        // Reference: the sign bit cleared leaves 0.
        assert_eq!(ReferenceHash::index(key, 50), 0);
    }

    #[test]
    fn indexes_into_the_given_list() {
        let ids = [10, 20, 30];
        let r = Record::keyed("t", b"foobar", 1);
        // to_positive(murmur2("foobar")) = 1357151166; % 3 = 0.
        assert_eq!(Murmur2::new().balance(&r, &ids), Ok(10));
    }
}
