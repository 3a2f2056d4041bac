//! The golden partition table of `kafkit-balancer`
//! (`crates/kafkit-balancer/testdata/librdkafka-partitions.tsv`): which partition librdkafka's
//! `murmur2`, `consistent` and `fnv1a` partitioners give each key, for 1, 3, 7, 32 and 1000
//! partitions.
//!
//! librdkafka's choice is established by producing each key with the rdkafka crate (librdkafka
//! 2.12.1) to a topic of the mock cluster, with `partitioner` set, and reading the partition of
//! the delivery report (the partition the broker appended the record to).
//!
//! - `regenerate_golden_table` (ignored) writes the table. Regenerate with
//!   `cargo nextest run -p integration-tests -E 'test(/^balancer_golden::/)' --run-ignored only`
//!   (or `cargo test -p integration-tests --test integration -- --ignored balancer_golden::`).
//! - `librdkafka_agrees_with_table_and_balancers` replays a sample of the table's keys against
//!   librdkafka now and checks librdkafka, the table and our balancers all agree, so a changed
//!   librdkafka or a stale table fails CI. The full table is checked against our balancers by
//!   `crates/kafkit-balancer/tests/golden.rs`, with no broker.

use std::fmt::Write as _;

use integration_tests::{PEER_TIMEOUT, mock_cluster, producer_config, unique_topic};
use kafkit_balancer::{Balancer, Crc32, Fnv1a, Murmur2, Record};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{DefaultProducerContext, FutureProducer, FutureRecord};

/// Partition counts of the table's columns.
const COUNTS: [i32; 5] = [1, 3, 7, 32, 1000];
/// librdkafka partitioners of the table, in column order.
const PARTITIONERS: [&str; 3] = ["murmur2", "consistent", "fnv1a"];

const TABLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../crates/kafkit-balancer/testdata/librdkafka-partitions.tsv"
);

/// Deterministic pseudo-random bytes (xorshift64), so the key set is the same on every run.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The table's keys: null, empty, all 256 one-byte keys, non-ASCII UTF-8, ASCII ids, random
/// binary keys of 2 to 64 bytes, and long keys of 100 to 1025 bytes. 1,101 keys.
fn golden_keys() -> Vec<Option<Vec<u8>>> {
    let mut keys: Vec<Option<Vec<u8>>> = vec![None, Some(Vec::new())];
    keys.extend((0..=255u8).map(|b| Some(vec![b])));
    let words = [
        "é",
        "ß",
        "ñandú",
        "naïve café",
        "Ωμέγα",
        "ключ",
        "日本語",
        "中文键",
        "한국어",
        "עברית",
        "العربية",
        "हिन्दी",
        "🦀",
        "😀😃😄",
        "ｆｕｌｌｗｉｄｔｈ",
        "Ünïcödé",
    ];
    for w in words {
        keys.push(Some(w.as_bytes().to_vec()));
    }
    for i in 0..64 {
        let w = words[i % words.len()];
        keys.push(Some(format!("{w}-{i}").into_bytes()));
    }
    // Sarama's partitioner_test.go: FNV-1a of this key is 0x80000000, i32::MIN as a signed int.
    keys.push(Some(b"1468509572224".to_vec()));
    keys.extend((0..200).map(|i| Some(format!("user-{i}").into_bytes())));
    keys.extend((0..100).map(|i| Some(format!("order:{i:08}").into_bytes())));
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    for _ in 0..451 {
        let len = 2 + (rng.next() % 63) as usize;
        keys.push(Some((0..len).map(|_| rng.next() as u8).collect()));
    }
    for len in [100, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1025] {
        keys.push(Some((0..len).map(|_| rng.next() as u8).collect()));
    }
    keys
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex key"))
        .collect()
}

/// The table's text form of a key: `null`, `empty`, or lowercase hex.
fn key_text(key: Option<&[u8]>) -> String {
    match key {
        None => "null".into(),
        Some([]) => "empty".into(),
        Some(k) => hex(k),
    }
}

/// Produces every key to a fresh `partitions`-partition topic with librdkafka's `partitioner`
/// and returns the partition each landed in, in key order.
async fn librdkafka_partitions(
    cluster: &MockCluster<'static, DefaultProducerContext>,
    partitioner: &str,
    partitions: i32,
    keys: &[Option<Vec<u8>>],
) -> Vec<i32> {
    let topic = unique_topic(&format!("golden-{partitioner}-{partitions}"));
    cluster
        .create_topic(&topic, partitions, 1)
        .expect("mock create_topic");
    let producer: FutureProducer = producer_config(&cluster.bootstrap_servers())
        .set("partitioner", partitioner)
        .set("linger.ms", "5")
        .create()
        .expect("librdkafka producer");
    let mut pending = Vec::with_capacity(keys.len());
    for key in keys {
        let mut rec: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&topic).payload(b"v");
        if let Some(k) = key {
            rec = rec.key(k.as_slice());
        }
        let fut = producer
            .send_result(rec)
            .unwrap_or_else(|(e, _)| panic!("enqueue to {topic}: {e}"));
        pending.push(fut);
    }
    let mut out = Vec::with_capacity(keys.len());
    for fut in pending {
        let delivery = tokio::time::timeout(PEER_TIMEOUT, fut)
            .await
            .unwrap_or_else(|_| panic!("no delivery report from {topic} within 30 s"))
            .expect("delivery future cancelled")
            .unwrap_or_else(|(e, _)| panic!("produce to {topic}: {e}"));
        out.push(delivery.partition);
    }
    out
}

/// `result[partitioner][count][key]`: librdkafka's partition for each key.
async fn librdkafka_table(keys: &[Option<Vec<u8>>]) -> Vec<Vec<Vec<i32>>> {
    let cluster = mock_cluster(1);
    let mut table = Vec::new();
    for name in PARTITIONERS {
        let mut per_count = Vec::new();
        for n in COUNTS {
            per_count.push(librdkafka_partitions(&cluster, name, n, keys).await);
        }
        table.push(per_count);
    }
    table
}

/// Our balancer for the librdkafka partitioner of column `i`.
fn ours(i: usize) -> Box<dyn Balancer> {
    match PARTITIONERS[i] {
        "murmur2" => Box::new(Murmur2::new()),
        "consistent" => Box::new(Crc32::consistent()),
        _ => Box::new(Fnv1a::new()),
    }
}

#[tokio::test]
#[ignore = "writes crates/kafkit-balancer/testdata/librdkafka-partitions.tsv; run to regenerate"]
async fn regenerate_golden_table() {
    let keys = golden_keys();
    let table = librdkafka_table(&keys).await;
    let mut out = String::new();
    out.push_str(
        "# Which partition librdkafka 2.12.1 (rdkafka crate 0.39) gives each key with the\n\
         # `partitioner` setting murmur2, consistent and fnv1a, for topics of 1, 3, 7, 32 and 1000\n\
         # partitions. Made by producing every key to librdkafka's mock cluster and reading the\n\
         # partition of each delivery report: tests/it/balancer_golden.rs, regenerate with\n\
         # `cargo nextest run -p integration-tests -E 'test(/^balancer_golden::/)' --run-ignored only`.\n\
         # Columns (tab-separated): key (`null`, `empty` or hex), then for each partitioner the\n\
         # partitions for the 5 partition counts, space-separated.\n\
         # key\tmurmur2 1 3 7 32 1000\tconsistent 1 3 7 32 1000\tfnv1a 1 3 7 32 1000\n",
    );
    for (k, key) in keys.iter().enumerate() {
        out.push_str(&key_text(key.as_deref()));
        for per_count in &table {
            out.push('\t');
            let cells: Vec<String> = per_count.iter().map(|col| col[k].to_string()).collect();
            out.push_str(&cells.join(" "));
        }
        out.push('\n');
    }
    std::fs::write(TABLE, out).expect("write the golden table");
}

/// One row of the table: the key (`None` = null) and `[partitioner][count]` partitions.
type Row = (Option<Vec<u8>>, Vec<Vec<i32>>);

/// Reads the committed table.
fn read_table() -> Vec<Row> {
    let text = std::fs::read_to_string(TABLE).expect("read the golden table");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let mut cols = line.split('\t');
            let key = match cols.next().expect("key column") {
                "null" => None,
                "empty" => Some(Vec::new()),
                h => Some(unhex(h)),
            };
            let parts = cols
                .map(|c| {
                    c.split(' ')
                        .map(|p| p.parse().expect("partition"))
                        .collect()
                })
                .collect();
            (key, parts)
        })
        .collect()
}

#[tokio::test]
async fn librdkafka_agrees_with_table_and_balancers() {
    let table = read_table();
    assert!(table.len() >= 1000, "table has {} keys", table.len());
    // null, empty, Sarama's i32::MIN key, and every 25th key: 47 keys x 15 topics.
    let sample: Vec<_> = table
        .iter()
        .enumerate()
        .filter(|(i, row)| *i < 2 || i % 25 == 0 || row.0.as_deref() == Some(b"1468509572224"))
        .map(|(_, row)| row)
        .collect();
    let keys: Vec<Option<Vec<u8>>> = sample.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(keys.len(), 47);
    let live = librdkafka_table(&keys).await;
    for (p, per_count) in live.iter().enumerate() {
        let balancer = ours(p);
        for (c, col) in per_count.iter().enumerate() {
            let all: Vec<i32> = (0..COUNTS[c]).collect();
            for (k, &got) in col.iter().enumerate() {
                let key = keys[k].as_deref();
                let what = format!(
                    "{} with {} partitions, key {}",
                    PARTITIONERS[p],
                    COUNTS[c],
                    key_text(key)
                );
                assert_eq!(got, sample[k].1[p][c], "librdkafka vs table: {what}");
                let mine = balancer.balance(&Record::new("t", key, 1), &all);
                assert_eq!(mine, Ok(got), "ours vs librdkafka: {what}");
            }
        }
    }
}
