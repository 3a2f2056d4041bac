//! Low-level pieces used by the record codecs: zigzag varints (protocol guide, "Record"; the
//! same encoding as protobuf's `sint32`/`sint64`), a bounds-checked reader, and CRC-32 (IEEE)
//! for legacy messages.

use bytes::{BufMut, BytesMut};

use super::RecordsError;

/// Zigzag-maps a signed 32-bit value so small magnitudes get small unsigned codes.
#[inline]
const fn zigzag32(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

/// Zigzag-maps a signed 64-bit value.
#[inline]
const fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Bytes needed for `u` as an unsigned base-128 varint (1-10).
#[inline]
const fn uvarint_size(u: u64) -> usize {
    let bits = 64 - (u | 1).leading_zeros() as usize;
    // ceil(bits / 7) for bits in 1..=64, as a multiply and a shift (`div_ceil` costs a
    // division's multiply, a remainder and a branch; this runs several times per record).
    (bits * 9 + 64) / 64
}

/// Bytes the zigzag varint encoding of `v` takes (1-5).
#[inline]
pub const fn varint_size(v: i32) -> usize {
    uvarint_size(zigzag32(v) as u64)
}

/// Bytes the zigzag varlong encoding of `v` takes (1-10).
#[inline]
pub const fn varlong_size(v: i64) -> usize {
    uvarint_size(zigzag64(v))
}

#[inline(always)]
fn put_uvarint(buf: &mut BytesMut, u: u64) {
    // Fixed-size writes for the common 1-3 byte cases compile to plain stores; a slice of
    // variable length would cost a `memmove` call per varint.
    if u < 1 << 7 {
        buf.put_u8(u as u8);
    } else if u < 1 << 14 {
        buf.put_slice(&[(u as u8) | 0x80, (u >> 7) as u8]);
    } else if u < 1 << 21 {
        buf.put_slice(&[(u as u8) | 0x80, ((u >> 7) as u8) | 0x80, (u >> 14) as u8]);
    } else {
        put_uvarint_long(buf, u);
    }
}

#[inline(never)]
fn put_uvarint_long(buf: &mut BytesMut, mut u: u64) {
    let mut tmp = [0u8; 10];
    let mut n = 0;
    while u >= 0x80 {
        tmp[n] = (u as u8) | 0x80;
        u >>= 7;
        n += 1;
    }
    tmp[n] = u as u8;
    buf.put_slice(&tmp[..=n]);
}

/// Appends the zigzag varint encoding of `v`.
#[inline]
pub fn put_varint(buf: &mut BytesMut, v: i32) {
    put_uvarint(buf, u64::from(zigzag32(v)));
}

/// Appends the zigzag varlong encoding of `v`.
#[inline]
pub fn put_varlong(buf: &mut BytesMut, v: i64) {
    put_uvarint(buf, zigzag64(v));
}

/// A cursor over a byte slice whose reads check bounds and return [`RecordsError`].
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    #[inline]
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not yet consumed.
    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    #[inline]
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], RecordsError> {
        let bytes = self
            .buf
            .get(self.pos..self.pos + N)
            .ok_or(RecordsError::UnexpectedEof {
                what,
                needed: N,
                remaining: self.remaining(),
            })?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        self.pos += N;
        Ok(out)
    }

    #[inline]
    pub(crate) fn i8(&mut self, what: &'static str) -> Result<i8, RecordsError> {
        self.array::<1>(what).map(i8::from_be_bytes)
    }

    #[inline]
    pub(crate) fn i16(&mut self, what: &'static str) -> Result<i16, RecordsError> {
        self.array::<2>(what).map(i16::from_be_bytes)
    }

    #[inline]
    pub(crate) fn i32(&mut self, what: &'static str) -> Result<i32, RecordsError> {
        self.array::<4>(what).map(i32::from_be_bytes)
    }

    #[inline]
    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, RecordsError> {
        self.array::<4>(what).map(u32::from_be_bytes)
    }

    #[inline]
    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, RecordsError> {
        self.array::<8>(what).map(i64::from_be_bytes)
    }

    /// Skips `n` bytes and returns their range in the underlying slice.
    #[inline]
    pub(crate) fn skip(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Result<std::ops::Range<usize>, RecordsError> {
        if n > self.remaining() {
            return Err(RecordsError::UnexpectedEof {
                what,
                needed: n,
                remaining: self.remaining(),
            });
        }
        let start = self.pos;
        self.pos += n;
        Ok(start..self.pos)
    }

    /// Reads an unsigned base-128 varint of at most `max_bytes` bytes, rejecting bits past
    /// `bits`.
    #[inline]
    fn uvarint(&mut self, bits: u32, what: &'static str) -> Result<u64, RecordsError> {
        let mut value: u64 = 0;
        let mut shift: u32 = 0;
        loop {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(RecordsError::UnexpectedEof {
                    what,
                    needed: 1,
                    remaining: 0,
                });
            };
            self.pos += 1;
            let low = u64::from(b & 0x7f);
            if shift > 0 && shift + 7 > bits && (low >> (bits - shift)) != 0 {
                return Err(RecordsError::MalformedVarint { what });
            }
            value |= low << shift;
            if b & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
            if shift >= bits {
                return Err(RecordsError::MalformedVarint { what });
            }
        }
    }

    /// Reads a zigzag varint (at most 5 bytes).
    #[inline]
    pub(crate) fn varint(&mut self, what: &'static str) -> Result<i32, RecordsError> {
        let u = self.uvarint(32, what)? as u32;
        Ok(((u >> 1) as i32) ^ -((u & 1) as i32))
    }

    /// Reads a zigzag varlong (at most 10 bytes).
    #[inline]
    pub(crate) fn varlong(&mut self, what: &'static str) -> Result<i64, RecordsError> {
        let u = self.uvarint(64, what)?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }
}

/// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320) lookup table, used by legacy messages.
const CRC32_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

/// CRC-32 (IEEE) of `data`, as stored in magic 0 and 1 messages.
pub(crate) fn crc32_ieee(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc = CRC32_TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn crc32_check_value() {
        assert_eq!(crc32_ieee(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32_ieee(b""), 0);
    }

    #[test]
    fn known_varint_encodings() {
        // Zigzag: 0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3, 63 -> 126, -64 -> 127, 64 -> 128 (2 bytes).
        let cases: [(i32, &[u8]); 6] = [
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for (v, bytes) in cases {
            let mut b = BytesMut::new();
            put_varint(&mut b, v);
            assert_eq!(&b[..], bytes, "{v}");
            assert_eq!(varint_size(v), bytes.len());
            assert_eq!(Reader::new(bytes).varint("t"), Ok(v));
        }
    }

    /// Byte-at-a-time reference encoder for unsigned varints.
    fn reference_uvarint(mut u: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (u & 0x7f) as u8;
            u >>= 7;
            if u == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    #[test]
    fn every_varint_width_matches_the_reference() {
        for shift in 0..64 {
            for delta in [-1i64, 0, 1] {
                let u = (1u64 << shift).wrapping_add(delta as u64);
                let mut b = BytesMut::new();
                put_uvarint(&mut b, u);
                assert_eq!(&b[..], &reference_uvarint(u)[..], "{u:#x}");
                assert_eq!(b.len(), uvarint_size(u));
            }
        }
    }

    #[test]
    fn overlong_varints_are_errors() {
        let six = [0x80u8, 0x80, 0x80, 0x80, 0x80, 0x00];
        assert_eq!(
            Reader::new(&six).varint("t"),
            Err(RecordsError::MalformedVarint { what: "t" })
        );
        // Fifth byte with bits beyond 32.
        let wide = [0xffu8, 0xff, 0xff, 0xff, 0x1f];
        assert_eq!(
            Reader::new(&wide).varint("t"),
            Err(RecordsError::MalformedVarint { what: "t" })
        );
        let eleven = [0xffu8; 11];
        assert!(Reader::new(&eleven).varlong("t").is_err());
        assert!(matches!(
            Reader::new(&[0x80]).varint("t"),
            Err(RecordsError::UnexpectedEof { .. })
        ));
    }

    proptest! {
        #[test]
        fn varint_round_trip(v in any::<i32>(), w in any::<i64>()) {
            let mut b = BytesMut::new();
            put_varint(&mut b, v);
            prop_assert_eq!(b.len(), varint_size(v));
            put_varlong(&mut b, w);
            prop_assert_eq!(b.len(), varint_size(v) + varlong_size(w));
            let mut r = Reader::new(&b);
            prop_assert_eq!(r.varint("v"), Ok(v));
            prop_assert_eq!(r.varlong("w"), Ok(w));
            prop_assert_eq!(r.remaining(), 0);
        }

        #[test]
        fn reader_never_panics(data in proptest::collection::vec(any::<u8>(), 0..32)) {
            let mut r = Reader::new(&data);
            while r.varlong("x").is_ok() {}
            let mut r = Reader::new(&data);
            while r.varint("x").is_ok() {}
        }
    }
}
