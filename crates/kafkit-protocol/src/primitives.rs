//! Wire primitives of the Kafka protocol (protocol guide, "Protocol Primitive Types"):
//! big-endian integers, unsigned varints, zig-zag varints, and the field codec that the
//! generated messages use for strings, bytes, arrays, UUIDs and nested structs in both the
//! classic and the compact (flexible, KIP-482) encodings.
//!
//! Decoders are `nom` parsers over byte slices ([`PResult`]). Every length or count prefix is
//! checked against the bytes that remain before anything is allocated.

use std::collections::BTreeMap;
use std::fmt;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};

/// Result of a primitive parser: the rest of the input and the value, or a [`DecodeError`].
pub type PResult<'a, T> = nom::IResult<&'a [u8], T, DecodeError>;

/// Tagged fields (KIP-482) that this library does not know, keyed by tag, holding each field's
/// raw bytes. They are kept when decoding and written back, in tag order, when encoding.
pub type TaggedFields = BTreeMap<u32, Bytes>;

/// A 128-bit UUID as sent on the wire (16 bytes, big-endian), e.g. a topic ID (KIP-516).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// The all-zero UUID, which Kafka uses for "no topic ID".
    pub const ZERO: Uuid = Uuid([0; 16]);

    /// Whether this is the all-zero UUID.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uuid({self})")
    }
}

impl fmt::Display for Uuid {
    /// Formats as the canonical 8-4-4-4-12 lowercase hex form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl From<[u8; 16]> for Uuid {
    fn from(b: [u8; 16]) -> Self {
        Uuid(b)
    }
}

fn truncated(needed: usize, remaining: usize) -> nom::Err<DecodeError> {
    nom::Err::Error(DecodeError::Truncated { needed, remaining })
}

fn invalid(field: &'static str, reason: &'static str) -> nom::Err<DecodeError> {
    nom::Err::Error(DecodeError::InvalidValue { field, reason })
}

fn out_of_range(length: i64, remaining: usize) -> nom::Err<DecodeError> {
    nom::Err::Error(DecodeError::LengthOutOfRange { length, remaining })
}

/// Splits `n` bytes off the front of `i`. Errors: [`DecodeError::Truncated`].
pub fn take(i: &[u8], n: usize) -> PResult<'_, &[u8]> {
    if i.len() < n {
        return Err(truncated(n, i.len()));
    }
    let (a, b) = i.split_at(n);
    Ok((b, a))
}

fn take_array<const N: usize>(i: &[u8]) -> PResult<'_, [u8; N]> {
    let (rest, a) = take(i, N)?;
    let mut out = [0u8; N];
    out.copy_from_slice(a);
    Ok((rest, out))
}

/// Reads a big-endian `i8`.
pub fn read_i8(i: &[u8]) -> PResult<'_, i8> {
    take_array::<1>(i).map(|(r, b)| (r, i8::from_be_bytes(b)))
}
/// Reads a big-endian `i16`.
pub fn read_i16(i: &[u8]) -> PResult<'_, i16> {
    take_array::<2>(i).map(|(r, b)| (r, i16::from_be_bytes(b)))
}
/// Reads a big-endian `u16`.
pub fn read_u16(i: &[u8]) -> PResult<'_, u16> {
    take_array::<2>(i).map(|(r, b)| (r, u16::from_be_bytes(b)))
}
/// Reads a big-endian `i32`.
pub fn read_i32(i: &[u8]) -> PResult<'_, i32> {
    take_array::<4>(i).map(|(r, b)| (r, i32::from_be_bytes(b)))
}
/// Reads a big-endian `u32`.
pub fn read_u32(i: &[u8]) -> PResult<'_, u32> {
    take_array::<4>(i).map(|(r, b)| (r, u32::from_be_bytes(b)))
}
/// Reads a big-endian `i64`.
pub fn read_i64(i: &[u8]) -> PResult<'_, i64> {
    take_array::<8>(i).map(|(r, b)| (r, i64::from_be_bytes(b)))
}
/// Reads a big-endian IEEE 754 `f64`.
pub fn read_f64(i: &[u8]) -> PResult<'_, f64> {
    take_array::<8>(i).map(|(r, b)| (r, f64::from_be_bytes(b)))
}

/// Reads an unsigned varint of at most 5 bytes (protocol `UNSIGNED_VARINT`).
///
/// Errors: [`DecodeError::Truncated`], or [`DecodeError::InvalidValue`] for more than 5 bytes.
pub fn read_uvarint(i: &[u8]) -> PResult<'_, u32> {
    let mut value: u32 = 0;
    for (n, &b) in i.iter().enumerate().take(5) {
        value |= u32::from(b & 0x7f) << (7 * n);
        if b & 0x80 == 0 {
            if n == 4 && b > 0x0f {
                return Err(invalid("unsigned varint", "value does not fit in 32 bits"));
            }
            return Ok((&i[n + 1..], value));
        }
    }
    if i.len() >= 5 {
        Err(invalid("unsigned varint", "longer than 5 bytes"))
    } else {
        Err(truncated(i.len() + 1, i.len()))
    }
}

/// Reads an unsigned varint of at most 10 bytes as `u64` (protocol `UNSIGNED_VARLONG`).
pub fn read_uvarlong(i: &[u8]) -> PResult<'_, u64> {
    let mut value: u64 = 0;
    for (n, &b) in i.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * n);
        if b & 0x80 == 0 {
            if n == 9 && b > 0x01 {
                return Err(invalid("unsigned varlong", "value does not fit in 64 bits"));
            }
            return Ok((&i[n + 1..], value));
        }
    }
    if i.len() >= 10 {
        Err(invalid("unsigned varlong", "longer than 10 bytes"))
    } else {
        Err(truncated(i.len() + 1, i.len()))
    }
}

/// Reads a zig-zag varint (protocol `VARINT`, used in record batches).
pub fn read_varint(i: &[u8]) -> PResult<'_, i32> {
    let (rest, u) = read_uvarint(i)?;
    Ok((rest, ((u >> 1) as i32) ^ -((u & 1) as i32)))
}

/// Reads a zig-zag varlong (protocol `VARLONG`, used in record batches).
pub fn read_varlong(i: &[u8]) -> PResult<'_, i64> {
    let (rest, u) = read_uvarlong(i)?;
    Ok((rest, ((u >> 1) as i64) ^ -((u & 1) as i64)))
}

/// Appends `v` as an unsigned varint (1 to 5 bytes).
pub fn write_uvarint(buf: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// Appends `v` as an unsigned varlong (1 to 10 bytes).
pub fn write_uvarlong(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// Appends `v` as a zig-zag varint.
pub fn write_varint(buf: &mut BytesMut, v: i32) {
    write_uvarint(buf, ((v << 1) ^ (v >> 31)) as u32);
}

/// Appends `v` as a zig-zag varlong.
pub fn write_varlong(buf: &mut BytesMut, v: i64) {
    write_uvarlong(buf, ((v << 1) ^ (v >> 63)) as u64);
}

/// Encoded size in bytes of `v` as an unsigned varint.
pub const fn uvarint_size(v: u32) -> usize {
    match v {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        0x20_0000..=0x0fff_ffff => 4,
        _ => 5,
    }
}

/// Encoded size in bytes of `v` as an unsigned varlong.
pub const fn uvarlong_size(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Encoded size in bytes of `v` as a zig-zag varint.
pub const fn varint_size(v: i32) -> usize {
    uvarint_size(((v << 1) ^ (v >> 31)) as u32)
}

/// Encoded size in bytes of `v` as a zig-zag varlong.
pub const fn varlong_size(v: i64) -> usize {
    uvarlong_size(((v << 1) ^ (v >> 63)) as u64)
}

// ---------------------------------------------------------------------------------------------
// Field codec used by generated code.

/// Where a field is being encoded or decoded: the version, whether the compact encoding applies
/// to this field, whether null is allowed, and names for error messages.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ctx {
    pub version: i16,
    pub flexible: bool,
    pub nullable: bool,
    pub message: &'static str,
    pub field: &'static str,
}

impl Ctx {
    fn too_long(&self, len: usize, max: usize) -> EncodeError {
        EncodeError::TooLong {
            message: self.message,
            field: self.field,
            len,
            max,
        }
    }
    fn null_not_allowed(&self) -> EncodeError {
        EncodeError::NullNotAllowed {
            message: self.message,
            field: self.field,
            version: self.version,
        }
    }
    fn elem(self) -> Ctx {
        Ctx {
            nullable: false,
            ..self
        }
    }
}

/// One encodable struct (a message or a nested struct of one): all versions in one type.
pub(crate) trait Wire: Sized + Default {
    /// The struct's schema name, for error messages.
    const STRUCT_NAME: &'static str;
    /// Smallest possible encoding, used to bound array counts before allocating.
    const MIN_SIZE: usize = 1;

    /// The codec context of one field of this struct.
    fn ctx(version: i16, flexible: bool, nullable: bool, field: &'static str) -> Ctx {
        Ctx {
            version,
            flexible,
            nullable,
            message: Self::STRUCT_NAME,
            field,
        }
    }

    /// The error for a non-ignorable field set at a version that lacks it.
    fn not_supported(field: &'static str, version: i16) -> EncodeError {
        EncodeError::FieldNotSupportedAtVersion {
            message: Self::STRUCT_NAME,
            field,
            version,
        }
    }

    fn write(&self, buf: &mut BytesMut, version: i16) -> Result<(), EncodeError>;
    fn size(&self, version: i16) -> Result<usize, EncodeError>;
    fn read<'a>(src: &Bytes, i: &'a [u8], version: i16) -> PResult<'a, Self>;
}

/// Encoding of one field type under a [`Ctx`].
pub(crate) trait FieldCodec: Sized {
    /// Smallest possible encoding of one value, used to bound array counts before allocating.
    const MIN_SIZE: usize;
    fn write(&self, buf: &mut BytesMut, c: Ctx) -> Result<(), EncodeError>;
    fn size(&self, c: Ctx) -> Result<usize, EncodeError>;
    fn read<'a>(src: &Bytes, i: &'a [u8], c: Ctx) -> PResult<'a, Self>;

    /// Writes a present value of a nullable field (structs add a presence marker).
    fn write_present(&self, buf: &mut BytesMut, c: Ctx) -> Result<(), EncodeError> {
        self.write(buf, c)
    }
    fn present_size(&self, c: Ctx) -> Result<usize, EncodeError> {
        self.size(c)
    }
    /// Writes null for a field of this type.
    fn write_null(buf: &mut BytesMut, c: Ctx) -> Result<(), EncodeError> {
        let _ = buf;
        Err(c.null_not_allowed())
    }
    fn null_size(c: Ctx) -> usize {
        let _ = c;
        0
    }
    /// Reads a value that may be null (only called when `c.nullable`).
    fn read_nullable<'a>(src: &Bytes, i: &'a [u8], c: Ctx) -> PResult<'a, Option<Self>> {
        let (i, v) = Self::read(src, i, c)?;
        Ok((i, Some(v)))
    }
}

macro_rules! int_codec {
    ($t:ty, $n:expr, $put:ident, $read:ident) => {
        impl FieldCodec for $t {
            const MIN_SIZE: usize = $n;
            fn write(&self, buf: &mut BytesMut, _c: Ctx) -> Result<(), EncodeError> {
                buf.$put(*self);
                Ok(())
            }
            fn size(&self, _c: Ctx) -> Result<usize, EncodeError> {
                Ok($n)
            }
            fn read<'a>(_src: &Bytes, i: &'a [u8], _c: Ctx) -> PResult<'a, Self> {
                $read(i)
            }
        }
    };
}

int_codec!(i8, 1, put_i8, read_i8);
int_codec!(i16, 2, put_i16, read_i16);
int_codec!(u16, 2, put_u16, read_u16);
int_codec!(i32, 4, put_i32, read_i32);
int_codec!(u32, 4, put_u32, read_u32);
int_codec!(i64, 8, put_i64, read_i64);
int_codec!(f64, 8, put_f64, read_f64);

/// Error codes travel as `int16`; any value, known or not, decodes and encodes unchanged.
impl FieldCodec for crate::ErrorCode {
    const MIN_SIZE: usize = 2;
    fn write(&self, buf: &mut BytesMut, _c: Ctx) -> Result<(), EncodeError> {
        buf.put_i16(self.0);
        Ok(())
    }
    fn size(&self, _c: Ctx) -> Result<usize, EncodeError> {
        Ok(2)
    }
    fn read<'a>(_src: &Bytes, i: &'a [u8], _c: Ctx) -> PResult<'a, Self> {
        read_i16(i).map(|(i, v)| (i, crate::ErrorCode(v)))
    }
}

impl FieldCodec for bool {
    const MIN_SIZE: usize = 1;
    fn write(&self, buf: &mut BytesMut, _c: Ctx) -> Result<(), EncodeError> {
        buf.put_u8(u8::from(*self));
        Ok(())
    }
    fn size(&self, _c: Ctx) -> Result<usize, EncodeError> {
        Ok(1)
    }
    fn read<'a>(_src: &Bytes, i: &'a [u8], _c: Ctx) -> PResult<'a, Self> {
        let (i, b) = read_i8(i)?;
        Ok((i, b != 0))
    }
}

impl FieldCodec for Uuid {
    const MIN_SIZE: usize = 16;
    fn write(&self, buf: &mut BytesMut, _c: Ctx) -> Result<(), EncodeError> {
        buf.put_slice(&self.0);
        Ok(())
    }
    fn size(&self, _c: Ctx) -> Result<usize, EncodeError> {
        Ok(16)
    }
    fn read<'a>(_src: &Bytes, i: &'a [u8], _c: Ctx) -> PResult<'a, Self> {
        let (i, b) = take_array::<16>(i)?;
        Ok((i, Uuid(b)))
    }
}

/// Writes a length prefix for a string (`int16`), bytes (`int32`) or compact value (uvarint
/// of length + 1). `len == None` writes null.
fn write_len(
    buf: &mut BytesMut,
    len: Option<usize>,
    c: Ctx,
    short: bool,
) -> Result<(), EncodeError> {
    match (len, c.flexible) {
        (None, true) => buf.put_u8(0),
        (None, false) if short => buf.put_i16(-1),
        (None, false) => buf.put_i32(-1),
        (Some(n), true) => {
            // A compact string keeps the classic int16 limit: Kafka's own serializers refuse
            // longer ones on both sides, so a broker would drop the connection.
            let max = if short {
                i16::MAX as usize
            } else {
                u32::MAX as usize - 1
            };
            if n > max {
                return Err(c.too_long(n, max));
            }
            write_uvarint(buf, n as u32 + 1);
        }
        (Some(n), false) if short => {
            if n > i16::MAX as usize {
                return Err(c.too_long(n, i16::MAX as usize));
            }
            buf.put_i16(n as i16);
        }
        (Some(n), false) => {
            if n > i32::MAX as usize {
                return Err(c.too_long(n, i32::MAX as usize));
            }
            buf.put_i32(n as i32);
        }
    }
    Ok(())
}

fn len_size(len: Option<usize>, c: Ctx, short: bool) -> usize {
    match (len, c.flexible) {
        (None, true) => 1,
        (Some(n), true) => uvarint_size((n as u32).saturating_add(1)),
        (_, false) if short => 2,
        (_, false) => 4,
    }
}

/// Reads a length prefix; `None` means null (-1, or 0 in compact form). Negative lengths other
/// than -1 are invalid. The length is NOT yet checked against the remaining input.
fn read_len<'a>(i: &'a [u8], c: Ctx, short: bool) -> PResult<'a, Option<usize>> {
    if c.flexible {
        let (i, n) = read_uvarint(i)?;
        Ok((i, n.checked_sub(1).map(|n| n as usize)))
    } else {
        let (i, n) = if short {
            let (i, n) = read_i16(i)?;
            (i, i32::from(n))
        } else {
            read_i32(i)?
        };
        match n {
            -1 => Ok((i, None)),
            n if n < 0 => Err(invalid(c.field, "negative length")),
            n => Ok((i, Some(n as usize))),
        }
    }
}

/// Reads a length prefix and checks it against the remaining input: `Some((rest, data))`.
fn read_sized<'a>(i: &'a [u8], c: Ctx, short: bool) -> PResult<'a, Option<&'a [u8]>> {
    let (i, len) = read_len(i, c, short)?;
    match len {
        None => Ok((i, None)),
        Some(n) if n > i.len() => Err(out_of_range(n as i64, i.len())),
        Some(n) => {
            let (data, rest) = i.split_at(n);
            Ok((rest, Some(data)))
        }
    }
}

impl FieldCodec for String {
    const MIN_SIZE: usize = 1;
    fn write(&self, buf: &mut BytesMut, c: Ctx) -> Result<(), EncodeError> {
        write_len(buf, Some(self.len()), c, true)?;
        buf.put_slice(self.as_bytes());
        Ok(())
    }
    fn size(&self, c: Ctx) -> Result<usize, EncodeError> {
        Ok(len_size(Some(self.len()), c, true) + self.len())
    }
    fn read<'a>(src: &Bytes, i: &'a [u8], c: Ctx) -> PResult<'a, Self> {
        match Self::read_nullable(src, i, c)? {
            (i, Some(s)) => Ok((i, s)),
            (_, None) => Err(invalid(c.field, "null for a non-nullable string")),
        }
    }
    fn write_null(buf: &mut BytesMut, c: Ctx) -> Result<(), EncodeError> {
        write_len(buf, None, c, true)
    }
    fn null_size(c: Ctx) -> usize {
        len_size(None, c, true)
    }
    fn read_nullable<'a>(_src: &Bytes, i: &'a [u8], c: Ctx) -> PResult<'a, Option<Self>> {
        let (i, data) = read_sized(i, c, true)?;
        match data {
            None => Ok((i, None)),
            Some(d) => match std::str::from_utf8(d) {
                Ok(s) => Ok((i, Some(s.to_owned()))),
                Err(_) => Err(invalid(c.field, "string is not valid UTF-8")),
            },
        }
    }
}

impl FieldCodec for Bytes {
    const MIN_SIZE: usize = 1;
    fn write(&self, buf: &mut BytesMut, c: Ctx) -> Result<(), EncodeError> {
        write_len(buf, Some(self.len()), c, false)?;
        // Inside `splice::collect` a long payload is noted, not copied (vectored writes).
        if !crate::splice::offer(buf.len(), self) {
            buf.put_slice(self);
        }
        Ok(())
    }
    fn size(&self, c: Ctx) -> Result<usize, EncodeError> {
        Ok(len_size(Some(self.len()), c, false) + self.len())
    }
    fn read<'a>(src: &Bytes, i: &'a [u8], c: Ctx) -> PResult<'a, Self> {
        match Self::read_nullable(src, i, c)? {
            (i, Some(s)) => Ok((i, s)),
            (_, None) => Err(invalid(c.field, "null for non-nullable bytes")),
        }
    }
    fn write_null(buf: &mut BytesMut, c: Ctx) -> Result<(), EncodeError> {
        write_len(buf, None, c, false)
    }
    fn null_size(c: Ctx) -> usize {
        len_size(None, c, false)
    }
    fn read_nullable<'a>(src: &Bytes, i: &'a [u8], c: Ctx) -> PResult<'a, Option<Self>> {
        let (i, data) = read_sized(i, c, false)?;
        Ok((i, data.map(|d| src.slice_ref(d))))
    }
}

impl<T: FieldCodec> FieldCodec for Vec<T> {
    const MIN_SIZE: usize = 1;
    fn write(&self, buf: &mut BytesMut, c: Ctx) -> Result<(), EncodeError> {
        write_len(buf, Some(self.len()), c, false)?;
        let e = c.elem();
        for v in self {
            v.write(buf, e)?;
        }
        Ok(())
    }
    fn size(&self, c: Ctx) -> Result<usize, EncodeError> {
        let e = c.elem();
        let mut n = len_size(Some(self.len()), c, false);
        for v in self {
            n += v.size(e)?;
        }
        Ok(n)
    }
    fn read<'a>(src: &Bytes, i: &'a [u8], c: Ctx) -> PResult<'a, Self> {
        match Self::read_nullable(src, i, c)? {
            (i, Some(s)) => Ok((i, s)),
            (_, None) => Err(invalid(c.field, "null for a non-nullable array")),
        }
    }
    fn write_null(buf: &mut BytesMut, c: Ctx) -> Result<(), EncodeError> {
        write_len(buf, None, c, false)
    }
    fn null_size(c: Ctx) -> usize {
        len_size(None, c, false)
    }
    fn read_nullable<'a>(src: &Bytes, i: &'a [u8], c: Ctx) -> PResult<'a, Option<Self>> {
        let (mut i, len) = read_len(i, c, false)?;
        let Some(n) = len else {
            return Ok((i, None));
        };
        // Every element takes at least MIN_SIZE (>= 1) bytes: reject counts the input cannot
        // hold before allocating anything.
        if n.saturating_mul(T::MIN_SIZE.max(1)) > i.len() {
            return Err(out_of_range(n as i64, i.len()));
        }
        let e = c.elem();
        // The count is bounded by the input, but an element can be much larger in memory than
        // on the wire: preallocate at most 64 KiB and let the vector grow past that.
        let cap = n.min((64 * 1024) / std::mem::size_of::<T>().max(1));
        let mut out = Vec::with_capacity(cap);
        for _ in 0..n {
            let (rest, v) = T::read(src, i, e)?;
            out.push(v);
            i = rest;
        }
        Ok((i, Some(out)))
    }
}

impl<T: FieldCodec> FieldCodec for Option<T> {
    const MIN_SIZE: usize = 1;
    fn write(&self, buf: &mut BytesMut, c: Ctx) -> Result<(), EncodeError> {
        match self {
            Some(v) if c.nullable => v.write_present(buf, c),
            Some(v) => v.write(buf, c),
            None if c.nullable => T::write_null(buf, c),
            None => Err(c.null_not_allowed()),
        }
    }
    fn size(&self, c: Ctx) -> Result<usize, EncodeError> {
        match self {
            Some(v) if c.nullable => v.present_size(c),
            Some(v) => v.size(c),
            None if c.nullable => Ok(T::null_size(c)),
            None => Err(c.null_not_allowed()),
        }
    }
    fn read<'a>(src: &Bytes, i: &'a [u8], c: Ctx) -> PResult<'a, Self> {
        if c.nullable {
            T::read_nullable(src, i, c)
        } else {
            let (i, v) = T::read(src, i, c)?;
            Ok((i, Some(v)))
        }
    }
}

impl<T: Wire> FieldCodec for T {
    const MIN_SIZE: usize = <T as Wire>::MIN_SIZE;
    fn write(&self, buf: &mut BytesMut, c: Ctx) -> Result<(), EncodeError> {
        Wire::write(self, buf, c.version)
    }
    fn size(&self, c: Ctx) -> Result<usize, EncodeError> {
        Wire::size(self, c.version)
    }
    fn read<'a>(src: &Bytes, i: &'a [u8], c: Ctx) -> PResult<'a, Self> {
        Wire::read(src, i, c.version)
    }
    fn write_present(&self, buf: &mut BytesMut, c: Ctx) -> Result<(), EncodeError> {
        buf.put_i8(1);
        Wire::write(self, buf, c.version)
    }
    fn present_size(&self, c: Ctx) -> Result<usize, EncodeError> {
        Ok(1 + Wire::size(self, c.version)?)
    }
    fn write_null(buf: &mut BytesMut, _c: Ctx) -> Result<(), EncodeError> {
        buf.put_i8(-1);
        Ok(())
    }
    fn null_size(_c: Ctx) -> usize {
        1
    }
    fn read_nullable<'a>(src: &Bytes, i: &'a [u8], c: Ctx) -> PResult<'a, Option<Self>> {
        let (i, marker) = read_i8(i)?;
        if marker < 0 {
            return Ok((i, None));
        }
        let (i, v) = Wire::read(src, i, c.version)?;
        Ok((i, Some(v)))
    }
}

// ---------------------------------------------------------------------------------------------
// Tagged fields (KIP-482).

/// Size of a known tagged field: tag, length and value.
pub(crate) fn tagged_size<T: FieldCodec>(tag: u32, v: &T, c: Ctx) -> Result<usize, EncodeError> {
    let n = v.size(c)?;
    Ok(uvarint_size(tag) + uvarint_size(n as u32) + n)
}

/// Writes a known tagged field: tag, length and value.
pub(crate) fn write_tagged<T: FieldCodec>(
    buf: &mut BytesMut,
    tag: u32,
    v: &T,
    c: Ctx,
) -> Result<(), EncodeError> {
    let n = v.size(c)?;
    if n > u32::MAX as usize {
        return Err(c.too_long(n, u32::MAX as usize));
    }
    write_uvarint(buf, tag);
    write_uvarint(buf, n as u32);
    v.write(buf, c)
}

/// Size of all unknown tagged fields.
pub(crate) fn unknown_tagged_size(fields: &TaggedFields) -> usize {
    fields
        .iter()
        .map(|(t, b)| uvarint_size(*t) + uvarint_size(b.len() as u32) + b.len())
        .sum()
}

/// Size of a tagged-field section holding only unknown fields: count, then the fields.
pub(crate) fn unknown_tagged_section_size(fields: &TaggedFields) -> usize {
    uvarint_size(fields.len() as u32) + unknown_tagged_size(fields)
}

/// Writes a tagged-field section holding only unknown fields, in tag order.
pub(crate) fn write_unknown_tagged(buf: &mut BytesMut, fields: &TaggedFields) {
    write_uvarint(buf, fields.len() as u32);
    write_unknown_rest(buf, &mut fields.iter().peekable());
}

/// Writes the unknown tagged fields whose tag is below `below`, in tag order.
pub(crate) fn write_unknown_below(
    buf: &mut BytesMut,
    it: &mut std::iter::Peekable<std::collections::btree_map::Iter<'_, u32, Bytes>>,
    below: u32,
) {
    while let Some((t, b)) = it.next_if(|(t, _)| **t < below) {
        write_uvarint(buf, *t);
        write_uvarint(buf, b.len() as u32);
        buf.put_slice(b);
    }
}

/// Writes the rest of the unknown tagged fields.
pub(crate) fn write_unknown_rest(
    buf: &mut BytesMut,
    it: &mut std::iter::Peekable<std::collections::btree_map::Iter<'_, u32, Bytes>>,
) {
    for (t, b) in it {
        write_uvarint(buf, *t);
        write_uvarint(buf, b.len() as u32);
        buf.put_slice(b);
    }
}

/// Reads one tag header and its data: `(tag, data)`, the data checked against the input.
pub(crate) fn read_tag(i: &[u8]) -> PResult<'_, (u32, &[u8])> {
    let (i, tag) = read_uvarint(i)?;
    let (i, n) = read_uvarint(i)?;
    let n = n as usize;
    if n > i.len() {
        return Err(out_of_range(n as i64, i.len()));
    }
    let (data, rest) = i.split_at(n);
    Ok((rest, (tag, data)))
}

/// Decodes a known tagged field's value from its data, which it must fill exactly.
pub(crate) fn read_tagged_value<T: FieldCodec>(
    src: &Bytes,
    data: &[u8],
    c: Ctx,
) -> Result<T, nom::Err<DecodeError>> {
    let (rest, v) = T::read(src, data, c)?;
    if !rest.is_empty() {
        return Err(invalid(
            c.field,
            "tagged field size does not match its value",
        ));
    }
    Ok(v)
}

/// Reads a tagged-field section holding only unknown fields.
pub(crate) fn read_unknown_tagged<'a>(
    src: &Bytes,
    i: &'a [u8],
    out: &mut TaggedFields,
) -> PResult<'a, ()> {
    let (mut i, n) = read_uvarint(i)?;
    for _ in 0..n {
        let (rest, (tag, data)) = read_tag(i)?;
        out.insert(tag, src.slice_ref(data));
        i = rest;
    }
    Ok((i, ()))
}

// ---------------------------------------------------------------------------------------------
// Message-level helpers.

pub(crate) fn encode_message<M: crate::Message + Wire>(
    m: &M,
    buf: &mut BytesMut,
    version: i16,
) -> Result<(), EncodeError> {
    check_encode_version::<M>(version)?;
    let start = buf.len();
    let r = Wire::write(m, buf, version);
    if r.is_err() {
        buf.truncate(start);
        crate::splice::forget_after(start);
    }
    r
}

pub(crate) fn message_size<M: crate::Message + Wire>(
    m: &M,
    version: i16,
) -> Result<usize, EncodeError> {
    check_encode_version::<M>(version)?;
    Wire::size(m, version)
}

fn check_encode_version<M: crate::Message>(version: i16) -> Result<(), EncodeError> {
    if M::VERSIONS.contains(version) {
        Ok(())
    } else {
        Err(EncodeError::UnsupportedVersion {
            message: M::NAME,
            version,
            supported: M::VERSIONS,
        })
    }
}

pub(crate) fn decode_message<M: crate::Message + Wire>(
    buf: &mut Bytes,
    version: i16,
) -> Result<M, DecodeError> {
    if !M::VERSIONS.contains(version) {
        return Err(DecodeError::UnsupportedVersion {
            message: M::NAME,
            version,
            supported: M::VERSIONS,
        });
    }
    let (consumed, value) = {
        let input: &[u8] = buf;
        match <M as Wire>::read(buf, input, version) {
            Ok((rest, v)) => (input.len() - rest.len(), v),
            Err(nom::Err::Error(e) | nom::Err::Failure(e)) => return Err(e),
            Err(nom::Err::Incomplete(_)) => {
                return Err(DecodeError::Truncated {
                    needed: 1,
                    remaining: input.len(),
                });
            }
        }
    };
    buf.advance(consumed);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn uvarint_round_trip(v in any::<u32>()) {
            let mut b = BytesMut::new();
            write_uvarint(&mut b, v);
            prop_assert_eq!(b.len(), uvarint_size(v));
            let (rest, back) = read_uvarint(&b).unwrap();
            prop_assert!(rest.is_empty());
            prop_assert_eq!(back, v);
        }

        #[test]
        fn varlong_round_trip(v in any::<i64>()) {
            let mut b = BytesMut::new();
            write_varlong(&mut b, v);
            prop_assert_eq!(b.len(), varlong_size(v));
            let (rest, back) = read_varlong(&b).unwrap();
            prop_assert!(rest.is_empty());
            prop_assert_eq!(back, v);
        }

        #[test]
        fn varint_round_trip(v in any::<i32>()) {
            let mut b = BytesMut::new();
            write_varint(&mut b, v);
            prop_assert_eq!(b.len(), varint_size(v));
            prop_assert_eq!(read_varint(&b).unwrap().1, v);
        }

        #[test]
        fn varint_decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..12)) {
            let _ = read_uvarint(&bytes);
            let _ = read_uvarlong(&bytes);
            let _ = read_varint(&bytes);
            let _ = read_varlong(&bytes);
        }
    }

    #[test]
    fn varint_known_encodings() {
        let mut b = BytesMut::new();
        write_varint(&mut b, -1);
        write_varint(&mut b, 1);
        write_uvarint(&mut b, 300);
        assert_eq!(&b[..], &[0x01, 0x02, 0xac, 0x02]);
        assert_eq!(uvarlong_size(0), 1);
        assert_eq!(uvarlong_size(u64::MAX), 10);
    }

    #[test]
    fn varint_errors() {
        assert!(matches!(
            read_uvarint(&[0x80, 0x80]),
            Err(nom::Err::Error(DecodeError::Truncated { .. }))
        ));
        assert!(matches!(
            read_uvarint(&[0xff, 0xff, 0xff, 0xff, 0x1f]),
            Err(nom::Err::Error(DecodeError::InvalidValue { .. }))
        ));
        assert!(matches!(
            read_uvarint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]),
            Err(nom::Err::Error(DecodeError::InvalidValue { .. }))
        ));
        assert!(read_i32(&[1, 2, 3]).is_err());
    }

    #[test]
    fn uuid_display() {
        let u = Uuid([
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
            0xcd, 0xef,
        ]);
        assert_eq!(u.to_string(), "12345678-9abc-def0-0123-456789abcdef");
        assert!(Uuid::ZERO.is_zero());
    }
}
