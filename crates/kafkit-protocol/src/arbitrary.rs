//! Random message values for property tests (enabled by the `arbitrary` feature).
//!
//! [`Gen`] is a small deterministic generator seeded from a `u64` (e.g. one drawn by proptest);
//! every generated message type implements [`Arbitrary`], which fills exactly the fields that
//! exist at the requested version and leaves the others at their defaults, so that
//! `decode(encode(x)) == x` holds for every value it returns.
//!
//! ```
//! use kafkit_protocol::arbitrary::{Arbitrary, Gen};
//! use kafkit_protocol::Message;
//! use kafkit_protocol::messages::MetadataRequest;
//!
//! let mut g = Gen::new(7);
//! let req = MetadataRequest::arbitrary(&mut g, 12);
//! let mut buf = bytes::BytesMut::new();
//! req.encode(&mut buf, 12).unwrap();
//! let back = MetadataRequest::decode(&mut buf.freeze(), 12).unwrap();
//! assert_eq!(back, req);
//! ```

use bytes::Bytes;

use crate::ErrorCode;
use crate::primitives::{TaggedFields, Uuid};

/// A deterministic pseudo-random generator (SplitMix64) with knobs for message generation.
#[derive(Debug, Clone)]
pub struct Gen {
    state: u64,
    /// Whether to add unknown tagged fields (tags 10000 and up) to flexible structs. Default
    /// `true`; turn off when comparing with implementations that drop unknown tags.
    pub unknown_tags: bool,
    /// Largest number of elements in a generated array. Default 3.
    pub max_len: usize,
    depth: u32,
}

impl Gen {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Gen {
            state: seed,
            unknown_tags: true,
            max_len: 3,
            depth: 0,
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A random number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// `true` with probability 1/`n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// A random value of field type `T`; `nullable` says whether null is allowed at `version`.
    pub(crate) fn field<T: ArbField>(&mut self, nullable: bool, version: i16) -> T {
        T::arb(self, nullable, version)
    }

    /// 0 to 2 unknown tagged fields (none when [`Gen::unknown_tags`] is off).
    pub(crate) fn unknown_tagged_fields(&mut self) -> TaggedFields {
        let mut out = TaggedFields::new();
        if !self.unknown_tags || !self.one_in(3) {
            return out;
        }
        for _ in 0..=self.below(2) {
            let tag = 10_000 + self.below(1000) as u32;
            let b: Bytes = ArbField::arb(self, false, 0);
            out.insert(tag, b);
        }
        out
    }
}

/// A message type (or nested struct) that can produce a random value valid at a version.
pub trait Arbitrary: Sized {
    /// A random value whose fields are set only where `version` carries them.
    fn arbitrary(g: &mut Gen, version: i16) -> Self;
}

/// A field type that can produce a random value.
pub(crate) trait ArbField: Sized {
    fn arb(g: &mut Gen, nullable: bool, version: i16) -> Self;
}

macro_rules! arb_int {
    ($($t:ty),*) => {$(
        impl ArbField for $t {
            fn arb(g: &mut Gen, _n: bool, _v: i16) -> Self {
                // Favour small and boundary values now and then.
                match g.below(4) {
                    0 => 0 as $t,
                    1 => <$t>::MAX,
                    2 => <$t>::MIN,
                    _ => g.next_u64() as $t,
                }
            }
        }
    )*};
}
arb_int!(i8, i16, u16, i32, u32, i64);

impl ArbField for ErrorCode {
    /// Known codes and unknown ones (any `i16`), which must round-trip unchanged too.
    fn arb(g: &mut Gen, n: bool, v: i16) -> Self {
        ErrorCode(i16::arb(g, n, v))
    }
}

impl ArbField for f64 {
    fn arb(g: &mut Gen, _n: bool, _v: i16) -> Self {
        (g.next_u64() % 1_000_000) as f64 / 7.0 - 1000.0
    }
}

impl ArbField for bool {
    fn arb(g: &mut Gen, _n: bool, _v: i16) -> Self {
        g.one_in(2)
    }
}

impl ArbField for Uuid {
    fn arb(g: &mut Gen, _n: bool, _v: i16) -> Self {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&g.next_u64().to_be_bytes());
        b[8..].copy_from_slice(&g.next_u64().to_be_bytes());
        Uuid(b)
    }
}

impl ArbField for String {
    fn arb(g: &mut Gen, _n: bool, _v: i16) -> Self {
        const ALPHABET: &[&str] = &["a", "b", "z", "0", "-", ".", "_", "é", "€", "🦀"];
        let len = g.below(8) as usize;
        let mut s = String::new();
        for _ in 0..len {
            s.push_str(ALPHABET[g.below(ALPHABET.len() as u64) as usize]);
        }
        s
    }
}

impl ArbField for Bytes {
    fn arb(g: &mut Gen, _n: bool, _v: i16) -> Self {
        let len = g.below(12) as usize;
        let v: Vec<u8> = (0..len).map(|_| g.next_u64() as u8).collect();
        Bytes::from(v)
    }
}

impl<T: ArbField> ArbField for Vec<T> {
    fn arb(g: &mut Gen, _n: bool, version: i16) -> Self {
        // Keep nesting shallow so values stay small.
        let max = if g.depth > 3 { 0 } else { g.max_len as u64 + 1 };
        let len = g.below(max) as usize;
        g.depth += 1;
        let v = (0..len).map(|_| T::arb(g, false, version)).collect();
        g.depth -= 1;
        v
    }
}

impl<T: ArbField> ArbField for Option<T> {
    fn arb(g: &mut Gen, nullable: bool, version: i16) -> Self {
        if nullable && g.one_in(3) {
            None
        } else {
            Some(T::arb(g, false, version))
        }
    }
}

impl<T: Arbitrary> ArbField for T {
    fn arb(g: &mut Gen, _n: bool, version: i16) -> Self {
        T::arbitrary(g, version)
    }
}
