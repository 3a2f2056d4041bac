//! Balancers that ignore the key: round-robin, least bytes, and a fixed (manual) choice.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{BalanceError, Balancer, Record, non_empty, unknown_partition};

/// Round-robin, as kafka-go's `RoundRobin`: the n-th call (counting from 0, over all topics)
/// picks `partitions[(n / chunk_size) % partitions.len()]`, so `chunk_size` consecutive records
/// go to one partition before it moves on. Keys are ignored (null and empty alike).
///
/// Lock-free: one atomic counter.
#[derive(Debug)]
pub struct RoundRobin {
    chunk_size: u64,
    counter: AtomicU64,
}

impl Default for RoundRobin {
    fn default() -> Self {
        Self::new()
    }
}

impl RoundRobin {
    /// One record per partition in turn (chunk size 1).
    pub fn new() -> Self {
        Self::with_chunk_size(1)
    }

    /// `chunk_size` records per partition in turn; 0 is taken as 1 (as kafka-go does).
    pub fn with_chunk_size(chunk_size: u32) -> Self {
        Self {
            chunk_size: u64::from(chunk_size.max(1)),
            counter: AtomicU64::new(0),
        }
    }
}

impl Balancer for RoundRobin {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        non_empty(record, partitions)?;
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let i = (n / self.chunk_size) % partitions.len() as u64;
        Ok(partitions[i as usize])
    }
}

/// Least bytes, as kafka-go's `LeastBytes`: picks the partition that has been given the fewest
/// bytes ([`Record::size`]) so far by this balancer, the first such in list order on a tie, and
/// adds the record's size to it. Keys are ignored (null and empty alike).
///
/// The counts are kept for the partition list last seen; a different list (another topic, or
/// partitions added or gone) starts them again from zero, as kafka-go does. Give each topic its
/// own `LeastBytes` when writing to several. One mutex; it allocates only when the list
/// changes.
#[derive(Debug, Default)]
pub struct LeastBytes {
    counters: Mutex<Vec<(i32, u64)>>,
}

impl LeastBytes {
    /// A balancer with no bytes counted yet.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Balancer for LeastBytes {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        non_empty(record, partitions)?;
        // A poisoned lock only means another thread panicked mid-update of plain counters.
        let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let same = counters.len() == partitions.len()
            && counters.iter().zip(partitions).all(|(c, p)| c.0 == *p);
        if !same {
            counters.clear();
            counters.extend(partitions.iter().map(|&p| (p, 0)));
        }
        let mut best = 0;
        for (i, c) in counters.iter().enumerate().skip(1) {
            if c.1 < counters[best].1 {
                best = i;
            }
        }
        let entry = &mut counters[best];
        entry.1 = entry.1.saturating_add(record.size as u64);
        Ok(entry.0)
    }
}

/// A fixed, explicit partition: every record goes to `partition`, as when a Java
/// `ProducerRecord` names its partition. Keys are ignored (null and empty alike).
///
/// # Errors
/// [`BalanceError::UnknownPartition`] when the partition is not in the list given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Manual {
    partition: i32,
}

impl Manual {
    /// Every record to `partition`.
    pub fn new(partition: i32) -> Self {
        Self { partition }
    }

    /// The partition this balancer picks.
    pub fn partition(&self) -> i32 {
        self.partition
    }
}

impl Balancer for Manual {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        non_empty(record, partitions)?;
        if partitions.contains(&self.partition) {
            Ok(self.partition)
        } else {
            Err(unknown_partition(record, self.partition, partitions))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picks(b: &dyn Balancer, partitions: &[i32], n: usize, size: usize) -> Vec<i32> {
        (0..n)
            .map(|_| b.balance(&Record::keyless("t", size), partitions).unwrap())
            .collect()
    }

    #[test]
    fn round_robin_cycles_in_chunks() {
        assert_eq!(
            picks(&RoundRobin::new(), &[4, 5, 6], 7, 1),
            [4, 5, 6, 4, 5, 6, 4]
        );
        assert_eq!(
            picks(&RoundRobin::with_chunk_size(2), &[4, 5, 6], 8, 1),
            [4, 4, 5, 5, 6, 6, 4, 4]
        );
        assert_eq!(
            picks(&RoundRobin::with_chunk_size(0), &[1, 2], 3, 1),
            [1, 2, 1]
        );
    }

    #[test]
    fn round_robin_is_shared_between_threads() {
        let rr = RoundRobin::new();
        let mut counts = [0u32; 4];
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| picks(&rr, &[0, 1, 2, 3], 1000, 1)))
                .collect();
            for h in hs {
                for p in h.join().unwrap() {
                    counts[p as usize] += 1;
                }
            }
        });
        assert_eq!(counts, [1000; 4]);
    }

    #[test]
    fn least_bytes_evens_out_bytes() {
        let lb = LeastBytes::new();
        let r = |size| {
            lb.balance(&Record::keyed("t", b"k", size), &[0, 1, 2])
                .unwrap()
        };
        assert_eq!(r(100), 0);
        assert_eq!(r(10), 1);
        assert_eq!(r(10), 2);
        assert_eq!(r(10), 1); // 1 and 2 both hold 10; first in list wins
        assert_eq!(r(200), 2);
        assert_eq!(r(1), 1);
        // A new list resets the counts.
        assert_eq!(lb.balance(&Record::keyless("t", 5), &[0, 1]), Ok(0));
        assert_eq!(lb.balance(&Record::keyless("t", 5), &[0, 1]), Ok(1));
    }

    #[test]
    fn manual_checks_the_list() {
        let m = Manual::new(3);
        assert_eq!(m.balance(&Record::keyless("t", 1), &[0, 3]), Ok(3));
        assert!(matches!(
            m.balance(&Record::keyed("t", b"k", 1), &[0, 1]),
            Err(BalanceError::UnknownPartition { partition: 3, .. })
        ));
        assert!(
            !m.balance(&Record::keyless("t", 1), &[0])
                .unwrap_err()
                .is_retriable()
        );
    }
}
