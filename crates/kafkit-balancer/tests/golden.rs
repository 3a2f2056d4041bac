//! Golden vectors: for each key of `testdata/librdkafka-partitions.tsv` (1,101 keys: null, empty,
//! every 1-byte key, non-ASCII UTF-8, ASCII ids, random binary, long keys up to 1025 bytes) and
//! partition counts 1, 3, 7, 32 and 1000, our [`Murmur2`], [`Crc32`] and [`Fnv1a`] pick the
//! partition librdkafka's `murmur2`, `consistent` and `fnv1a` partitioners picked.
//!
//! The table was made by producing each key with librdkafka on its mock cluster and reading the
//! partition back (`tests/it/balancer_golden.rs` in the workspace's `integration-tests` package,
//! which also says how to regenerate it).

use kafkit_balancer::{Balancer, Crc32, Fnv1a, Hash, Murmur2, Record};

const COUNTS: [i32; 5] = [1, 3, 7, 32, 1000];
const TABLE: &str = include_str!("../testdata/librdkafka-partitions.tsv");

/// One row: the key and, per partitioner (murmur2, consistent, fnv1a), the partition for each
/// count of [`COUNTS`].
struct Row {
    key: Option<Vec<u8>>,
    partitions: [[i32; 5]; 3],
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex {s}");
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex key"))
        .collect()
}

fn rows() -> Vec<Row> {
    TABLE
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), 4, "row {line}");
            let key = match cols[0] {
                "null" => None,
                "empty" => Some(Vec::new()),
                h => Some(unhex(h)),
            };
            let mut partitions = [[0; 5]; 3];
            for (p, col) in cols[1..].iter().enumerate() {
                let v: Vec<i32> = col
                    .split(' ')
                    .map(|x| x.parse().expect("partition"))
                    .collect();
                partitions[p] = v.try_into().expect("5 partition counts");
            }
            Row { key, partitions }
        })
        .collect()
}

/// Checks `balancer` against column `col` of every row; returns how many choices were checked.
fn check(name: &str, balancer: &dyn Balancer, col: usize) -> usize {
    let rows = rows();
    let mut checked = 0;
    for (c, &n) in COUNTS.iter().enumerate() {
        let all: Vec<i32> = (0..n).collect();
        for row in &rows {
            let got = balancer.balance(&Record::new("golden", row.key.as_deref(), 1), &all);
            assert_eq!(
                got,
                Ok(row.partitions[col][c]),
                "{name}, {n} partitions, key {:?}",
                row.key
            );
            checked += 1;
        }
    }
    checked
}

#[test]
fn table_covers_the_required_keys() {
    let rows = rows();
    assert!(rows.len() >= 1000, "{} keys", rows.len());
    let keys: Vec<Option<&[u8]>> = rows.iter().map(|r| r.key.as_deref()).collect();
    assert!(keys.contains(&None));
    assert!(keys.contains(&Some(&[][..])));
    assert_eq!(
        keys.iter()
            .filter(|k| k.is_some_and(|k| k.len() == 1))
            .count(),
        256
    );
    assert!(keys.iter().any(|k| k.is_some_and(|k| k.len() > 1000)));
    let non_ascii_utf8 = keys
        .iter()
        .filter(|k| k.is_some_and(|k| !k.is_ascii() && std::str::from_utf8(k).is_ok()))
        .count();
    assert!(non_ascii_utf8 >= 50, "{non_ascii_utf8}");
}

#[test]
fn murmur2_matches_librdkafka_murmur2() {
    assert_eq!(check("murmur2", &Murmur2::new(), 0), 5 * rows().len());
}

#[test]
fn crc32_matches_librdkafka_consistent() {
    assert_eq!(
        check("consistent", &Crc32::consistent(), 1),
        5 * rows().len()
    );
}

#[test]
fn fnv1a_matches_librdkafka_fnv1a() {
    assert_eq!(check("fnv1a", &Fnv1a::new(), 2), 5 * rows().len());
}

/// librdkafka's `fnv1a` was written to match Sarama's default hash partitioner, so for every
/// non-null key our Sarama [`Hash`] must land where librdkafka did.
#[test]
fn sarama_hash_matches_librdkafka_fnv1a_for_non_null_keys() {
    let hash = Hash::new();
    for (c, &n) in COUNTS.iter().enumerate() {
        let all: Vec<i32> = (0..n).collect();
        for row in rows() {
            let Some(key) = row.key.as_deref() else {
                continue;
            };
            assert_eq!(
                hash.balance(&Record::keyed("golden", key, 1), &all),
                Ok(row.partitions[2][c]),
                "{n} partitions, key {key:?}"
            );
        }
    }
}

/// The `_random` variants hash every non-null key (and for `murmur2_random`/`fnv1a_random` the
/// empty key too) exactly as the plain ones.
#[test]
fn random_variants_hash_keys_like_the_plain_ones() {
    let variants: [(&dyn Balancer, usize); 3] = [
        (&Murmur2::murmur2_random(), 0),
        (&Crc32::consistent_random(), 1),
        (&Fnv1a::fnv1a_random(), 2),
    ];
    for (b, col) in variants {
        for (c, &n) in COUNTS.iter().enumerate() {
            let all: Vec<i32> = (0..n).collect();
            for row in rows() {
                match row.key.as_deref() {
                    None => {}
                    Some([]) if col == 1 => {}
                    Some(key) => assert_eq!(
                        b.balance(&Record::keyed("golden", key, 1), &all),
                        Ok(row.partitions[col][c])
                    ),
                }
            }
        }
    }
}
