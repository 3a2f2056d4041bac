//! Sticky balancers for keyless records: the Java client's defaults since Kafka 2.4 (KIP-480)
//! and 3.3 (KIP-794). Keyless records stay on one partition so they fill batches quickly, and the
//! partition changes now and then to spread the load; keyed records are hashed with murmur2 and
//! never follow the sticky choice.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::keyed::Murmur2;
use crate::rng::Rng;
use crate::{BalanceError, Balancer, Record, non_empty};

/// The Java client's default `batch.size`: 16384 bytes. [`UniformSticky`] moves on after this
/// many bytes of keyless records have gone to its partition.
pub const DEFAULT_BATCH_SIZE: usize = 16_384;

/// A topic's sticky partition: its id and where it was in the partition list.
#[derive(Clone, Copy, Debug)]
struct Current {
    partition: i32,
    index: usize,
}

impl Current {
    /// Whether this choice is still in `partitions` (where it was, or anywhere).
    fn locate(&mut self, partitions: &[i32]) -> bool {
        if partitions.get(self.index) == Some(&self.partition) {
            return true;
        }
        match partitions.iter().position(|&p| p == self.partition) {
            Some(i) => {
                self.index = i;
                true
            }
            None => false,
        }
    }
}

/// Random pick from `partitions` (non-empty), avoiding `avoid` when there is another choice.
fn pick(rng: &Rng, partitions: &[i32], avoid: Option<i32>) -> Current {
    let n = partitions.len();
    let index = match avoid.and_then(|a| partitions.iter().position(|&p| p == a)) {
        // One of the other n - 1, uniformly.
        Some(skip) if n > 1 => {
            let i = rng.below(n - 1);
            if i >= skip { i + 1 } else { i }
        }
        _ => rng.below(n),
    };
    Current {
        partition: partitions[index],
        index,
    }
}

/// Locks `m`, ignoring poisoning (the state is a plain choice; a panic elsewhere leaves it valid).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The sticky partitioner of KIP-480, the Java client's default for keyless records from
/// Kafka 2.4 to 3.2 (`DefaultPartitioner` / `UniformStickyPartitioner`).
///
/// - Keyed record (including an empty key): [`Murmur2`] over the partition list, exactly the
///   Java keyed rule; it neither follows nor moves the sticky partition.
/// - Null key: the topic's sticky partition, picked at random from the list on first use. It
///   changes only when the writer reports that a batch for it was completed
///   ([`Sticky::on_new_batch`]), or when it leaves the list; the next one is random among the
///   others.
///
/// One mutex over a per-topic map; a topic's first keyless record allocates its entry.
#[derive(Debug)]
pub struct Sticky {
    rng: Rng,
    topics: Mutex<HashMap<String, Current>>,
}

impl Default for Sticky {
    fn default() -> Self {
        Self::new()
    }
}

impl Sticky {
    /// A sticky balancer with random choices seeded from the process's entropy.
    pub fn new() -> Self {
        Self {
            rng: Rng::from_entropy(),
            topics: Mutex::new(HashMap::new()),
        }
    }

    /// Seeds the random choices, so a run can be repeated (tests, simulations).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = Rng::with_seed(seed);
        self
    }

    /// Reports that the batch for `prev_partition` of `topic` is complete (Java's
    /// `Partitioner.onNewBatch`). If that partition is the topic's sticky partition, a new one
    /// is picked at random from `partitions`, not `prev_partition` unless it is the only one.
    /// Returns the topic's sticky partition afterwards, or `None` if `partitions` is empty.
    pub fn on_new_batch(
        &self,
        topic: &str,
        prev_partition: i32,
        partitions: &[i32],
    ) -> Option<i32> {
        if partitions.is_empty() {
            return None;
        }
        let mut topics = lock(&self.topics);
        match topics.get_mut(topic) {
            Some(cur) => {
                if cur.partition == prev_partition || !cur.locate(partitions) {
                    *cur = pick(&self.rng, partitions, Some(prev_partition));
                }
                Some(cur.partition)
            }
            None => {
                let cur = pick(&self.rng, partitions, Some(prev_partition));
                topics.insert(topic.to_string(), cur);
                Some(cur.partition)
            }
        }
    }
}

impl Sticky {
    /// Places `record` with the Java client's two partition lists: a keyed record is hashed over
    /// `all` (every partition of the topic, ascending); a keyless one sticks among `available`
    /// (the partitions with a leader), or among `all` when none is available. Java's
    /// `DefaultPartitioner` does the same. [`Balancer::balance`] is this with one list for both.
    ///
    /// # Errors
    /// [`BalanceError::NoPartitions`] when `all` is empty (and, for a keyless record, `available`
    /// too).
    pub fn balance_available(
        &self,
        record: &Record<'_>,
        all: &[i32],
        available: &[i32],
    ) -> Result<i32, BalanceError> {
        if let Some(key) = record.key {
            non_empty(record, all)?;
            return Ok(all[Murmur2::index(key, all.len())]);
        }
        let partitions = if available.is_empty() { all } else { available };
        non_empty(record, partitions)?;
        let mut topics = lock(&self.topics);
        if let Some(cur) = topics.get_mut(record.topic) {
            if !cur.locate(partitions) {
                *cur = pick(&self.rng, partitions, None);
            }
            return Ok(cur.partition);
        }
        let cur = pick(&self.rng, partitions, None);
        topics.insert(record.topic.to_string(), cur);
        Ok(cur.partition)
    }
}

impl Balancer for Sticky {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        self.balance_available(record, partitions, partitions)
    }
}

/// Per-topic state of [`UniformSticky`].
#[derive(Clone, Copy, Debug)]
struct Uniform {
    current: Current,
    /// Bytes of keyless records sent to `current` since it was chosen.
    produced: u64,
}

/// The uniform sticky partitioner of KIP-794, the Java client's default for keyless records
/// since Kafka 3.3 (`BuiltInPartitioner`).
///
/// - Keyed record (including an empty key): [`Murmur2`] over the partition list, the Java keyed
///   rule; it neither follows nor moves the sticky partition, and its bytes are not counted.
///   With [`UniformSticky::ignore_keys`] (Java `partitioner.ignore.keys=true`) keys are ignored
///   and every record is placed as a keyless one.
/// - Null key: the topic's sticky partition, picked at random on first use. Each keyless
///   record's [`Record::size`] is added to a byte count; once the count reaches `batch_size`
///   (Java `batch.size`, default [`DEFAULT_BATCH_SIZE`]) after a record, the next record gets a
///   new partition picked uniformly at random from the list (it may be the same one, as in
///   Java) and the count restarts. A sticky partition that leaves the list is replaced at once.
///
/// Not implemented: Java's adaptive partitioning (weighting the random pick by each broker's
/// queue length, `partitioner.adaptive.partitioning.enable`) and
/// `partitioner.availability.timeout.ms`; this behaves as Java with adaptive partitioning off,
/// choosing among the partitions it is given.
#[derive(Debug)]
pub struct UniformSticky {
    batch_size: u64,
    ignore_keys: bool,
    rng: Rng,
    topics: Mutex<HashMap<String, Uniform>>,
}

impl Default for UniformSticky {
    fn default() -> Self {
        Self::new()
    }
}

impl UniformSticky {
    /// Switches partition after [`DEFAULT_BATCH_SIZE`] bytes; keys are hashed.
    pub fn new() -> Self {
        Self {
            batch_size: DEFAULT_BATCH_SIZE as u64,
            ignore_keys: false,
            rng: Rng::from_entropy(),
            topics: Mutex::new(HashMap::new()),
        }
    }

    /// Switches partition after `bytes` bytes of keyless records (Java `batch.size`); 0 is
    /// taken as 1, i.e. a new partition for every record.
    pub fn batch_size(mut self, bytes: usize) -> Self {
        self.batch_size = (bytes as u64).max(1);
        self
    }

    /// When `true`, keys are ignored and every record is placed as a keyless one (Java
    /// `partitioner.ignore.keys`, default `false`).
    pub fn ignore_keys(mut self, ignore: bool) -> Self {
        self.ignore_keys = ignore;
        self
    }

    /// Seeds the random choices, so a run can be repeated (tests, simulations).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = Rng::with_seed(seed);
        self
    }
}

impl UniformSticky {
    /// Places `record` with the Java client's two partition lists: a keyed record is hashed over
    /// `all` (every partition of the topic, ascending); a keyless one (or any record with
    /// [`UniformSticky::ignore_keys`]) sticks among `available` (the partitions with a leader),
    /// or among `all` when none is available, as Java's `BuiltInPartitioner` does.
    /// [`Balancer::balance`] is this with one list for both.
    ///
    /// # Errors
    /// [`BalanceError::NoPartitions`] when `all` is empty (and, for a keyless record, `available`
    /// too).
    pub fn balance_available(
        &self,
        record: &Record<'_>,
        all: &[i32],
        available: &[i32],
    ) -> Result<i32, BalanceError> {
        if let Some(key) = record.key
            && !self.ignore_keys
        {
            non_empty(record, all)?;
            return Ok(all[Murmur2::index(key, all.len())]);
        }
        let partitions = if available.is_empty() { all } else { available };
        non_empty(record, partitions)?;
        let mut topics = lock(&self.topics);
        if let Some(state) = topics.get_mut(record.topic) {
            return Ok(self.advance(state, record, partitions));
        }
        let mut state = Uniform {
            current: pick(&self.rng, partitions, None),
            produced: 0,
        };
        let chosen = self.advance(&mut state, record, partitions);
        topics.insert(record.topic.to_string(), state);
        Ok(chosen)
    }
}

impl Balancer for UniformSticky {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        self.balance_available(record, partitions, partitions)
    }
}

impl UniformSticky {
    /// Places one keyless record with `state` and counts its bytes.
    fn advance(&self, state: &mut Uniform, record: &Record<'_>, partitions: &[i32]) -> i32 {
        if !state.current.locate(partitions) {
            *state = Uniform {
                current: pick(&self.rng, partitions, None),
                produced: 0,
            };
        }
        let chosen = state.current.partition;
        state.produced = state.produced.saturating_add(record.size as u64);
        if state.produced >= self.batch_size {
            *state = Uniform {
                current: pick(&self.rng, partitions, None),
                produced: 0,
            };
        }
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: [i32; 4] = [0, 1, 2, 3];

    #[test]
    fn sticky_stays_until_a_new_batch() {
        let s = Sticky::new().with_seed(9);
        let first = s.balance(&Record::keyless("a", 10), &P).unwrap();
        for _ in 0..100 {
            assert_eq!(s.balance(&Record::keyless("a", 10), &P), Ok(first));
        }
        // A completed batch on another partition changes nothing.
        let other = (first + 1) % 4;
        assert_eq!(s.on_new_batch("a", other, &P), Some(first));
        // On the sticky one it moves elsewhere.
        let next = s.on_new_batch("a", first, &P).unwrap();
        assert_ne!(next, first);
        assert_eq!(s.balance(&Record::keyless("a", 10), &P), Ok(next));
        // A single partition stays.
        assert_eq!(s.on_new_batch("b", 7, &[7]), Some(7));
        assert_eq!(s.on_new_batch("b", 7, &[]), None);
    }

    #[test]
    fn sticky_partition_leaving_the_list_is_replaced() {
        let s = Sticky::new().with_seed(3);
        let first = s.balance(&Record::keyless("a", 10), &P).unwrap();
        let rest: Vec<i32> = P.iter().copied().filter(|&p| p != first).collect();
        let next = s.balance(&Record::keyless("a", 10), &rest).unwrap();
        assert_ne!(next, first);
        assert_eq!(s.balance(&Record::keyless("a", 10), &P), Ok(next));

        let u = UniformSticky::new().with_seed(3);
        let first = u.balance(&Record::keyless("a", 10), &P).unwrap();
        let rest: Vec<i32> = P.iter().copied().filter(|&p| p != first).collect();
        assert_ne!(u.balance(&Record::keyless("a", 10), &rest), Ok(first));
    }

    #[test]
    fn uniform_sticky_switches_after_batch_size_bytes() {
        let u = UniformSticky::new().batch_size(100).with_seed(1);
        let mut switches = 0;
        let mut prev = u.balance(&Record::keyless("t", 30), &P).unwrap();
        let mut run = 30;
        for _ in 0..10_000 {
            let p = u.balance(&Record::keyless("t", 30), &P).unwrap();
            if run >= 100 {
                // The previous record filled the batch: a new (random, maybe equal) pick.
                run = 0;
                switches += usize::from(p != prev);
            } else {
                assert_eq!(p, prev, "moved before 100 bytes");
            }
            run += 30;
            prev = p;
        }
        // 2500 picks, each a different partition with probability 3/4.
        assert!((1700..2000).contains(&switches), "{switches}");
    }

    #[test]
    fn keyed_over_all_keyless_over_available() {
        let all: Vec<i32> = (0..8).collect();
        let available = [2, 5];
        let s = Sticky::new().with_seed(4);
        let u = UniformSticky::new().batch_size(1).with_seed(4);
        for i in 0..500u32 {
            let k = i.to_le_bytes();
            let want = Murmur2::index(&k, 8) as i32;
            let keyed = Record::keyed("t", &k, 10);
            assert_eq!(s.balance_available(&keyed, &all, &available), Ok(want));
            assert_eq!(u.balance_available(&keyed, &all, &available), Ok(want));
            let keyless = Record::keyless("t", 10);
            assert!(available.contains(&s.balance_available(&keyless, &all, &available).unwrap()));
            assert!(available.contains(&u.balance_available(&keyless, &all, &available).unwrap()));
            // Nothing available: all partitions are used.
            assert!(all.contains(&u.balance_available(&keyless, &all, &[]).unwrap()));
        }
        assert!(matches!(
            u.balance_available(&Record::keyless("t", 1), &[], &[]),
            Err(BalanceError::NoPartitions { .. })
        ));
    }

    #[test]
    fn shared_between_threads() {
        let u = UniformSticky::new().batch_size(1000);
        let s = Sticky::new();
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (u, s) = (&u, &s);
                scope.spawn(move || {
                    for i in 0..5000u32 {
                        let topic = if i % 2 == 0 { "even" } else { "odd" };
                        let p = u.balance(&Record::keyless(topic, 100), &P).unwrap();
                        assert!(P.contains(&p));
                        let q = s.balance(&Record::keyless(topic, 100), &P).unwrap();
                        if i % 100 == t {
                            s.on_new_batch(topic, q, &P);
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn topics_are_independent() {
        let u = UniformSticky::new().batch_size(1000).with_seed(5);
        let a = u.balance(&Record::keyless("a", 999), &P).unwrap();
        for i in 0..50 {
            u.balance(&Record::keyless(&format!("x{i}"), 999), &P)
                .unwrap();
        }
        assert_eq!(u.balance(&Record::keyless("a", 1), &P), Ok(a));
    }

    #[test]
    fn ignore_keys_places_keyed_records_as_keyless() {
        let u = UniformSticky::new().ignore_keys(true).with_seed(2);
        let first = u.balance(&Record::keyed("t", b"k1", 1), &P).unwrap();
        for i in 0..200u32 {
            let k = i.to_le_bytes();
            assert_eq!(u.balance(&Record::keyed("t", &k, 1), &P), Ok(first));
        }
    }
}
