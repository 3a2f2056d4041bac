//! `--partitioner NAME` and `-X partitioner=NAME`: librdkafka's partitioner names, mapped to
//! kafkit-balancer's balancers, so that a keyed record lands on the partition kcat (or the Java
//! client) would have chosen for it.
//!
//! The default is librdkafka's (and so kcat's) `consistent_random`: a keyed record goes to
//! CRC-32 of its key modulo the partition count. A user moving from kcat finds their keys
//! where kcat put them; one moving from the Java client asks for `murmur2_random`.
//!
//! Records whose key a `*_random` partitioner does not hash (null keys; for
//! `consistent_random` empty keys too) stick to one partition until a batch's worth of bytes
//! went to it, as librdkafka's do while `sticky.partitioning.linger.ms` lasts: one random
//! partition per record would make one batch per record.

use kafkit::balancer::{BalanceError, Balancer, Crc32, Fnv1a, Murmur2, Record, UniformSticky};

use crate::Failure;

/// The partitioner of the CLI when neither `--partitioner` nor `-X partitioner` names one.
pub const DEFAULT: &str = "consistent_random";

/// Every name `--partitioner` and `-X partitioner` take, with what it does, in help order.
pub const NAMES: &[(&str, &str)] = &[
    (
        "consistent_random",
        "CRC-32 of the key; null and empty keys sticky (librdkafka's and kcat's default)",
    ),
    (
        "consistent",
        "CRC-32 of the key; null keys as the empty key",
    ),
    (
        "murmur2_random",
        "murmur2 of the key, as the Java client; null keys sticky",
    ),
    ("murmur2", "murmur2 of the key; null keys as the empty key"),
    ("fnv1a_random", "FNV-1a of the key; null keys sticky"),
    ("fnv1a", "FNV-1a of the key; null keys as the empty key"),
    (
        "random",
        "a random partition for each keyed record, whatever its key; null keys sticky",
    ),
];

/// librdkafka's `random`: the key is not looked at. Murmur2's `murmur2_random` places a
/// record without key on a uniformly random partition; every record is shown to it as one.
struct Random(Murmur2);

impl Balancer for Random {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        self.0
            .balance(&Record::keyless(record.topic, record.size), partitions)
    }
}

/// A hashing balancer for keys, and a sticky one for the keys it does not hash.
struct KeyedOrSticky<B> {
    keyed: B,
    sticky: UniformSticky,
    /// Whether an empty key counts as no key (librdkafka's `consistent_random`).
    empty_is_null: bool,
}

impl<B: Balancer> Balancer for KeyedOrSticky<B> {
    fn balance(&self, record: &Record<'_>, partitions: &[i32]) -> Result<i32, BalanceError> {
        match record.key {
            Some(k) if !(self.empty_is_null && k.is_empty()) => {
                self.keyed.balance(record, partitions)
            }
            _ => self.sticky.balance(record, partitions),
        }
    }
}

fn sticky<B: Balancer + 'static>(keyed: B, empty_is_null: bool) -> Box<dyn Balancer> {
    Box::new(KeyedOrSticky {
        keyed,
        sticky: UniformSticky::new(),
        empty_is_null,
    })
}

/// Checks a partitioner name (any case), returning the name as [`NAMES`] spells it.
///
/// # Errors
///
/// A usage error that lists the names, saying from where the name came (`from`: `-X
/// partitioner`, `--partitioner`).
pub fn check(name: &str, from: &str) -> Result<&'static str, Failure> {
    let wanted = name.trim().to_ascii_lowercase();
    NAMES
        .iter()
        .map(|(n, _)| *n)
        .find(|n| *n == wanted)
        .ok_or_else(|| {
            let names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
            Failure::Usage(format!(
                "invalid value {name:?} for {from}: expected one of {}",
                names.join(", ")
            ))
        })
}

/// The balancer of partitioner `name` (one of [`NAMES`], checked by [`check`]).
///
/// # Errors
///
/// As [`check`].
pub fn balancer(name: &str) -> Result<Box<dyn Balancer>, Failure> {
    Ok(match check(name, "partitioner")? {
        "consistent" => Box::new(Crc32::consistent()),
        "murmur2_random" => sticky(Murmur2::new(), false),
        "murmur2" => Box::new(Murmur2::new()),
        "fnv1a_random" => sticky(Fnv1a::new(), false),
        "fnv1a" => Box::new(Fnv1a::new()),
        "random" => sticky(Random(Murmur2::murmur2_random()), false),
        _ => sticky(Crc32::consistent(), true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit::balancer::{crc32, murmur2, to_positive};

    #[test]
    fn each_name_hashes_keys_as_librdkafka_does() {
        let parts: Vec<i32> = (0..6).collect();
        let at = |name: &str, key: &[u8]| {
            balancer(name)
                .unwrap()
                .balance(&Record::keyed("t", key, 10), &parts)
                .unwrap()
        };
        for key in [&b"customer-42"[..], b"a", b"zz-top"] {
            let crc = (crc32(key) % 6) as i32;
            let mm = (to_positive(murmur2(key)) % 6) as i32;
            assert_eq!(at("consistent_random", key), crc);
            assert_eq!(at("CONSISTENT", key), crc);
            assert_eq!(at("murmur2_random", key), mm);
            assert_eq!(at("murmur2", key), mm);
            assert_eq!(at("fnv1a", key), at("fnv1a_random", key));
        }
        // An empty key: consistent hashes it (CRC 0: partition 0), murmur2 too.
        assert_eq!(at("consistent", b""), 0);
        assert_eq!(at("murmur2", b""), (to_positive(murmur2(b"")) % 6) as i32);
    }

    #[test]
    fn random_ignores_the_key() {
        let parts: Vec<i32> = (0..6).collect();
        let b = balancer("random").unwrap();
        let seen: std::collections::HashSet<i32> = (0..200)
            .map(|_| b.balance(&Record::keyed("t", b"same", 10), &parts).unwrap())
            .collect();
        // One key, 200 records: every partition gets some (all on fewer than 6 has a
        // probability of about 6 * (5/6)^200, 10^-15).
        assert_eq!(seen.len(), 6, "{seen:?}");
    }

    #[test]
    fn keyless_records_of_random_partitioners_stick() {
        let parts: Vec<i32> = (0..6).collect();
        let b = balancer(DEFAULT).unwrap();
        let first = b.balance(&Record::keyless("t", 10), &parts).unwrap();
        for _ in 0..100 {
            assert_eq!(b.balance(&Record::keyless("t", 10), &parts).unwrap(), first);
        }
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let Err(Failure::Usage(m)) = check("java", "--partitioner") else {
            panic!("java accepted");
        };
        assert!(
            m.contains("consistent_random, consistent, murmur2_random"),
            "{m}"
        );
        assert_eq!(check("Random", "-X partitioner").ok(), Some("random"));
    }
}
