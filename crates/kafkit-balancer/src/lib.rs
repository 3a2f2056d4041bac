//! Partition balancers: choose which partition of a topic a record is written to, the same way
//! the Java client, librdkafka, Sarama and kafka-go do, so a keyed record lands on the same
//! partition whichever client wrote it.
//!
//! ```
//! use kafkit_balancer::{Balancer, Murmur2, Record, UniformSticky};
//!
//! let partitions: Vec<i32> = (0..6).collect(); // every partition of the topic, ascending
//!
//! // The Java client's choice for a keyed record: murmur2 of the key, made positive, modulo 6.
//! let java = Murmur2::new();
//! let p = java.balance(&Record::keyed("orders", b"customer-42", 100), &partitions)?;
//! assert_eq!(p, (kafkit_balancer::to_positive(kafkit_balancer::murmur2(b"customer-42")) % 6));
//!
//! // The Java default since 3.3 (KIP-794): keyed records as above, keyless records stick to
//! // one partition until a batch's worth of bytes (16384) has gone to it.
//! let default = UniformSticky::new();
//! let a = default.balance(&Record::keyless("orders", 100), &partitions)?;
//! let b = default.balance(&Record::keyless("orders", 100), &partitions)?;
//! assert_eq!(a, b);
//! # Ok::<(), kafkit_balancer::BalanceError>(())
//! ```
//!
//! # Choosing
//!
//! | Balancer | Matches | Keyed record | Null key |
//! |---|---|---|---|
//! | [`UniformSticky`] | Java ≥ 3.3 default (KIP-794) | murmur2 | sticky, switches after `batch_size` bytes |
//! | [`Sticky`] | Java 2.4–3.2 default (KIP-480) | murmur2 | sticky, switches on each new batch |
//! | [`Murmur2`] | Java keyed records; librdkafka `murmur2` / `murmur2_random` | murmur2 | hashed as empty / random |
//! | [`Crc32`] | librdkafka `consistent` / `consistent_random`; kafka-go `CRC32Balancer` | CRC-32 | hashed as empty / random |
//! | [`Fnv1a`] | librdkafka `fnv1a` / `fnv1a_random` | FNV-1a | hashed as empty / random |
//! | [`Hash`](struct@Hash) | Sarama `NewHashPartitioner`; kafka-go `Hash` | FNV-1a | random |
//! | [`ReferenceHash`] | Sarama `NewReferenceHashPartitioner`; kafka-go `ReferenceHash` | FNV-1a, sign bit cleared | random |
//! | [`RoundRobin`] | kafka-go `RoundRobin` | ignored | ignored |
//! | [`LeastBytes`] | kafka-go `LeastBytes` | ignored | ignored |
//! | [`Manual`] | an explicit partition on the record | ignored | ignored |
//!
//! # The partition list
//!
//! Every balancer chooses among the `partitions` slice it is given and returns one of its
//! elements. Key-hashing balancers return `partitions[hash % partitions.len()]`, so to agree with
//! other clients pass **every partition of the topic in ascending order** (`0..n`), as the Java
//! client and librdkafka do for keyed records, even while some have no leader; passing only the
//! available ones (what kafka-go's `Writer` does) moves keys whenever availability changes.
//! The Java client places keyless records among the partitions that have a leader, and keyed ones
//! among all; [`Sticky::balance_available`] and [`UniformSticky::balance_available`] take both
//! lists to do exactly that.
// docs.rs builds with `--cfg docsrs` (Cargo.toml): nightly rustdoc then marks each item behind a
// cargo feature with that feature (`doc_cfg` shows the `#[cfg]` of an item by itself).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod hash;
mod keyed;
mod rng;
mod simple;
mod sticky;

use std::sync::Arc;

pub use hash::{crc32, fnv1a32, murmur2, to_positive};
pub use keyed::{Crc32, Fnv1a, Hash, Murmur2, ReferenceHash};
pub use simple::{LeastBytes, Manual, RoundRobin};
pub use sticky::{DEFAULT_BATCH_SIZE, Sticky, UniformSticky};

/// What a balancer may look at to place one record.
///
/// Built with [`Record::new`], [`Record::keyed`] or [`Record::keyless`]; the fields are public for
/// reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record<'a> {
    /// The topic the record is written to. Stateful balancers ([`Sticky`], [`UniformSticky`])
    /// keep their state per topic.
    pub topic: &'a str,
    /// The serialized key: `None` for a null key. `Some(&[])` (an empty key) is not null: the
    /// Java client, librdkafka's `murmur2`/`fnv1a` and Sarama hash it like any other key.
    pub key: Option<&'a [u8]>,
    /// Bytes the record adds to its batch, in bytes. The key and value lengths added together
    /// are a good enough estimate. Read by [`LeastBytes`] and [`UniformSticky`].
    pub size: usize,
}

impl<'a> Record<'a> {
    /// A record of `topic` with `key` (`None` = null key) and `size` bytes.
    pub fn new(topic: &'a str, key: Option<&'a [u8]>, size: usize) -> Self {
        Self { topic, key, size }
    }

    /// A record of `topic` with a (non-null) `key` and `size` bytes.
    pub fn keyed(topic: &'a str, key: &'a [u8], size: usize) -> Self {
        Self::new(topic, Some(key), size)
    }

    /// A record of `topic` with a null key and `size` bytes.
    pub fn keyless(topic: &'a str, size: usize) -> Self {
        Self::new(topic, None, size)
    }
}

/// Why a balancer could not choose a partition. These are local errors: no Kafka error code
/// goes with them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BalanceError {
    /// The partition list was empty (the topic's metadata lists no partition yet, or none is
    /// available). Retriable: a later metadata refresh may list some.
    #[error("no partition to choose from for topic {topic:?}")]
    NoPartitions {
        /// The record's topic.
        topic: String,
    },
    /// The partition chosen (by [`Manual`] or a function given to [`balancer_fn`]) is not in the
    /// partition list. Not retriable (the Java client rejects such a record the same way).
    #[error(
        "partition {partition} is not among the {count} partitions offered for topic {topic:?}"
    )]
    UnknownPartition {
        /// The record's topic.
        topic: String,
        /// The partition that was chosen.
        partition: i32,
        /// How many partitions were offered.
        count: usize,
    },
}

impl BalanceError {
    /// Whether trying again later (after a metadata refresh) can succeed.
    pub fn is_retriable(&self) -> bool {
        matches!(self, Self::NoPartitions { .. })
    }
}

/// Chooses a partition for a record.
///
/// `partitions` lists the partitions to choose from (see the crate docs on what to pass); the
/// result is always one of its elements. Implementations are `Send + Sync`: one balancer is
/// shared by every task writing through a producer, and stateful ones synchronise internally.
///
/// # Errors
/// [`BalanceError::NoPartitions`] when `partitions` is empty; [`BalanceError::UnknownPartition`]
/// when a fixed choice is not in `partitions`.
pub trait Balancer: Send + Sync {
    /// Picks the partition `record` goes to, from `partitions`.
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError>;
}

impl<B: Balancer + ?Sized> Balancer for &B {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        (**self).balance(record, partitions)
    }
}

impl<B: Balancer + ?Sized> Balancer for Box<B> {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        (**self).balance(record, partitions)
    }
}

impl<B: Balancer + ?Sized> Balancer for Arc<B> {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        (**self).balance(record, partitions)
    }
}

/// A [`Balancer`] made from a function; see [`balancer_fn`].
#[derive(Clone, Debug)]
pub struct BalancerFn<F>(F);

/// Makes a [`Balancer`] of `f`, which gets the record and the partition list and returns the
/// partition. An empty list is answered with [`BalanceError::NoPartitions`] without calling `f`,
/// and a result that is not in the list becomes [`BalanceError::UnknownPartition`].
///
/// ```
/// use kafkit_balancer::{Balancer, Record, balancer_fn};
///
/// // Everything to the last partition.
/// let last = balancer_fn(|_record, partitions| Ok(partitions[partitions.len() - 1]));
/// assert_eq!(last.balance(&Record::keyless("t", 1), &[0, 1, 2]), Ok(2));
/// ```
pub fn balancer_fn<F>(f: F) -> BalancerFn<F>
where
    F: Fn(&Record<'_>, &[i32]) -> Result<i32, BalanceError> + Send + Sync,
{
    BalancerFn(f)
}

impl<F> Balancer for BalancerFn<F>
where
    F: Fn(&Record<'_>, &[i32]) -> Result<i32, BalanceError> + Send + Sync,
{
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        non_empty(record, partitions)?;
        let p = (self.0)(record, partitions)?;
        if partitions.contains(&p) {
            Ok(p)
        } else {
            Err(unknown_partition(record, p, partitions))
        }
    }
}

/// `Err(NoPartitions)` when `partitions` is empty.
fn non_empty(record: &Record<'_>, partitions: &[i32]) -> Result<(), BalanceError> {
    if partitions.is_empty() {
        Err(BalanceError::NoPartitions {
            topic: record.topic.to_string(),
        })
    } else {
        Ok(())
    }
}

fn unknown_partition(record: &Record<'_>, partition: i32, partitions: &[i32]) -> BalanceError {
    BalanceError::UnknownPartition {
        topic: record.topic.to_string(),
        partition,
        count: partitions.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balancer_fn_checks_its_function() {
        let b = balancer_fn(|_, _| Ok(7));
        let r = Record::keyless("t", 1);
        assert_eq!(b.balance(&r, &[5, 7]), Ok(7));
        assert_eq!(
            b.balance(&r, &[0, 1]),
            Err(BalanceError::UnknownPartition {
                topic: "t".into(),
                partition: 7,
                count: 2
            })
        );
        let err = b.balance(&r, &[]).unwrap_err();
        assert!(matches!(err, BalanceError::NoPartitions { .. }));
        assert!(err.is_retriable());
    }

    #[test]
    fn balancers_work_through_pointers_and_trait_objects() {
        let all: Vec<Box<dyn Balancer>> = vec![
            Box::new(RoundRobin::new()),
            Box::new(LeastBytes::new()),
            Box::new(Hash::new()),
            Box::new(ReferenceHash::new()),
            Box::new(Crc32::consistent()),
            Box::new(Murmur2::new()),
            Box::new(Fnv1a::new()),
            Box::new(Sticky::new()),
            Box::new(UniformSticky::new()),
            Box::new(Manual::new(2)),
        ];
        let shared = Arc::new(all);
        for b in shared.iter() {
            let p = (&b)
                .balance(&Record::keyed("t", b"k", 1), &[0, 1, 2])
                .unwrap();
            assert!((0..3).contains(&p));
            assert!(matches!(
                b.balance(&Record::keyed("t", b"k", 1), &[]),
                Err(BalanceError::NoPartitions { .. })
            ));
        }
    }
}

/// The example of this crate's README.md, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
