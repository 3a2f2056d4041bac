//! The key hash functions other Kafka clients partition with, as plain functions.
//!
//! Each one is written from the algorithm's definition and checked against values published by
//! the client that uses it (see the unit tests below and `tests/golden.rs`).

/// Seed of Kafka's murmur2 (`Utils.murmur2` in the Java client, `rd_murmur2` in librdkafka).
const MURMUR2_SEED: u32 = 0x9747_b28c;
/// Multiplier of MurmurHash2.
const MURMUR2_M: u32 = 0x5bd1_e995;
/// Shift of MurmurHash2.
const MURMUR2_R: u32 = 24;

/// MurmurHash2 (32-bit) of `data` as the Java client computes it for keyed records
/// (`org.apache.kafka.common.utils.Utils.murmur2`, seed `0x9747b28c`), returned as Java's
/// signed `int`.
///
/// Words are read little-endian, 4 bytes at a time; the 1 to 3 trailing bytes are folded in
/// as MurmurHash2 defines. librdkafka's `rd_murmur2` gives the same 32 bits (as unsigned).
/// The empty input hashes to `0x106e08d9` (275646681).
///
/// ```
/// // Kafka's UtilsTest.testMurmur2 lists this value for "foobar".
/// assert_eq!(kafkit_balancer::murmur2(b"foobar"), -790_332_482);
/// ```
pub fn murmur2(data: &[u8]) -> i32 {
    // Lengths past u32::MAX wrap, as Java's int length cannot exceed it anyway.
    let mut h = MURMUR2_SEED ^ (data.len() as u32);
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        let mut k = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        k = k.wrapping_mul(MURMUR2_M);
        k ^= k >> MURMUR2_R;
        k = k.wrapping_mul(MURMUR2_M);
        h = h.wrapping_mul(MURMUR2_M);
        h ^= k;
    }
    let tail = words.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if let Some(&b) = tail.first() {
        h ^= u32::from(b);
        h = h.wrapping_mul(MURMUR2_M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(MURMUR2_M);
    h ^= h >> 15;
    h as i32
}

/// Java's `Utils.toPositive`: clears the sign bit (`n & 0x7fffffff`), so `i32::MIN` maps to 0.
/// Not the absolute value.
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// FNV-1a offset basis (32-bit).
const FNV_OFFSET: u32 = 0x811c_9dc5;
/// FNV-1a prime (32-bit).
const FNV_PRIME: u32 = 0x0100_0193;

/// 32-bit FNV-1a of `data` (offset basis `0x811c9dc5`, prime `0x01000193`), as Go's
/// `hash/fnv.New32a` computes it; Sarama, kafka-go and librdkafka's `fnv1a` partitioner hash
/// keys with it. The empty input hashes to the offset basis.
///
/// ```
/// // librdkafka's unit test of rd_fnv1a lists 0x0d33c4e1 for "kafka".
/// assert_eq!(kafkit_balancer::fnv1a32(b"kafka"), 0x0d33_c4e1);
/// ```
pub fn fnv1a32(data: &[u8]) -> u32 {
    let mut h = FNV_OFFSET;
    for &b in data {
        h ^= u32::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// CRC-32 lookup tables (IEEE 802.3, reflected polynomial `0xedb88320`) for slicing-by-8,
/// built at compile time: `CRC32_TABLES[0]` is the classic byte table, `CRC32_TABLES[k]` advances
/// a byte's contribution past `k` more zero bytes.
const CRC32_TABLES: [[u32; 256]; 8] = crc32_tables();

const fn crc32_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            bit += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

/// CRC-32 (IEEE 802.3, the zlib / Ethernet CRC; Go's `crc32.ChecksumIEEE`) of `data`, as
/// librdkafka's `consistent` partitioner (`rd_crc32`) and kafka-go's `CRC32Balancer` hash keys.
/// This is not CRC-32C (Castagnoli), which record batches use. The empty input gives 0.
///
/// ```
/// // The CRC-32 check value: the CRC of the ASCII digits "123456789".
/// assert_eq!(kafkit_balancer::crc32(b"123456789"), 0xcbf4_3926);
/// ```
pub fn crc32(data: &[u8]) -> u32 {
    let t = &CRC32_TABLES;
    let mut c = !0u32;
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let lo = u32::from_le_bytes([w[0], w[1], w[2], w[3]]) ^ c;
        let hi = u32::from_le_bytes([w[4], w[5], w[6], w[7]]);
        c = t[7][(lo & 0xff) as usize]
            ^ t[6][((lo >> 8) & 0xff) as usize]
            ^ t[5][((lo >> 16) & 0xff) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xff) as usize]
            ^ t[2][((hi >> 8) & 0xff) as usize]
            ^ t[1][((hi >> 16) & 0xff) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &b in words.remainder() {
        c = t[0][((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values of the Java client's `Utils.murmur2`, from Apache Kafka's
    /// `clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java` (`testMurmur2`).
    const KAFKA_UTILS_TEST: &[(&[u8], i32)] = &[
        (b"21", -973_932_308),
        (b"foobar", -790_332_482),
        (b"a-little-bit-long-string", -985_981_536),
        (b"a-little-bit-longer-string", -1_486_304_829),
        (
            b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
        ),
        (b"abc", 479_470_107),
    ];

    /// Values of the Java client's murmur2 that librdkafka checks `rd_murmur2` against, from
    /// librdkafka 2.12.1 `src/rdmurmur2.c` (`unittest_murmur2`, array `java_murmur2_results`).
    /// The keys "1234" and "PreAmbleWillBeRemoved,ThePrePartThatIs" appear with 0..=3 leading
    /// bytes dropped there (to test unaligned reads), and so here.
    const LIBRDKAFKA_UNITTEST: &[(&[u8], u32)] = &[
        (b"kafka", 0xd067_cf64),
        (b"giberish123456789", 0x8f55_2b0c),
        (b"1234", 0x9fc9_7b14),
        (b"234", 0xe7c0_09ca),
        (b"34", 0x8739_30da),
        (b"4", 0x5a4b_5ca1),
        (b"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x7842_4f1c),
        (b"reAmbleWillBeRemoved,ThePrePartThatIs", 0x4a62_b377),
        (b"eAmbleWillBeRemoved,ThePrePartThatIs", 0xe0e4_e09e),
        (b"AmbleWillBeRemoved,ThePrePartThatIs", 0x62b8_b43f),
        (b"", 0x106e_08d9),
    ];

    #[test]
    fn murmur2_matches_kafka_utils_test() {
        for (key, want) in KAFKA_UTILS_TEST {
            assert_eq!(murmur2(key), *want, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn murmur2_matches_librdkafka_unit_test_values() {
        for (key, want) in LIBRDKAFKA_UNITTEST {
            assert_eq!(
                murmur2(key) as u32,
                *want,
                "{}",
                String::from_utf8_lossy(key)
            );
        }
    }

    /// FNV-1a values from librdkafka 2.12.1 `src/rdfnv1a.c` (`unittest_fnv1a`, array
    /// `golang_hashfnv_results`, obtained there from Go's `hash/fnv`). librdkafka compares them
    /// with its hash after taking the absolute value of the signed result, so this test does too.
    const GO_FNV1A_ABS: &[(&[u8], i32)] = &[
        (b"kafka", 0x0d33_c4e1),
        (b"giberish123456789", 0x77a5_8295),
        (b"1234", 0x023b_dd03),
        (b"234", 0x2dea_3cd2),
        (b"34", 0x740f_a83e),
        (b"4", 0x310c_a263),
        (b"PreAmbleWillBeRemoved,ThePrePartThatIs", 0x65cb_d69c),
        (b"reAmbleWillBeRemoved,ThePrePartThatIs", 0x6e49_c79a),
        (b"eAmbleWillBeRemoved,ThePrePartThatIs", 0x69ee_d356),
        (b"AmbleWillBeRemoved,ThePrePartThatIs", 0x6abc_c023),
        (b"", 0x7ee3_623b),
    ];

    #[test]
    fn fnv1a_matches_go_hash_fnv_values_librdkafka_checks() {
        for (key, want) in GO_FNV1A_ABS {
            let h = fnv1a32(key) as i32;
            assert_eq!(h.wrapping_abs(), *want, "{}", String::from_utf8_lossy(key));
        }
        // The empty input hashes to the offset basis, whose i32 is negative.
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
    }

    #[test]
    fn crc32_known_values() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414f_a339
        );
    }

    /// The plain bit-at-a-time CRC-32, to check the sliced one against.
    fn crc32_bitwise(data: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in data {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }

    #[test]
    fn sliced_crc32_equals_bitwise_for_every_length_and_offset() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 131 + 7) as u8).collect();
        for start in 0..8 {
            for end in start..data.len() {
                let d = &data[start..end];
                assert_eq!(crc32(d), crc32_bitwise(d), "{start}..{end}");
            }
        }
    }

    #[test]
    fn to_positive_clears_the_sign_bit() {
        assert_eq!(to_positive(i32::MIN), 0);
        assert_eq!(to_positive(-1), i32::MAX);
        assert_eq!(to_positive(5), 5);
    }
}
