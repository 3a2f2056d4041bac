//! Shared pieces of the fuzz targets: the checks every decoded message goes through, and the
//! layout of each target's input (which the seed generator, `cargo run -p kafkit-protocol
//! --example fuzz_seeds`, writes in the same form).

use bytes::{Bytes, BytesMut};
use kafkit_protocol::Message;

/// Decodes `body` as `M` at `version` and, when that succeeds, checks what the decoder promises:
/// on error the buffer is not advanced; a decoded value encodes again at the same version, to
/// exactly `compute_size` bytes, and decodes back to a value that encodes to the same bytes (and is
/// equal, unless it holds a NaN float64).
pub fn check_message<M: Message>(body: &[u8], version: i16) {
    let whole = Bytes::copy_from_slice(body);
    let mut buf = whole.clone();
    let value = match M::decode(&mut buf, version) {
        Ok(v) => v,
        Err(_) => {
            assert_eq!(
                buf.len(),
                whole.len(),
                "{}: a failed decode advanced",
                M::NAME
            );
            return;
        }
    };
    assert!(buf.len() <= whole.len());
    let mut out = BytesMut::new();
    value
        .encode(&mut out, version)
        .unwrap_or_else(|e| panic!("{} v{version}: decoded value does not encode: {e}", M::NAME));
    let size = value
        .compute_size(version)
        .expect("compute_size after encode");
    assert_eq!(out.len(), size, "{} v{version}: compute_size", M::NAME);
    let out_bytes = out.freeze();
    let mut again = out_bytes.clone();
    let back = M::decode(&mut again, version).unwrap_or_else(|e| {
        panic!(
            "{} v{version}: re-encoded value does not decode: {e}",
            M::NAME
        )
    });
    assert!(
        again.is_empty(),
        "{} v{version}: bytes left after re-decode",
        M::NAME
    );
    // Compared by bytes, not only with `==`: a float64 field (AlterClientQuotas, DescribeClientQuotas
    // values) may hold NaN, which is never equal to itself although it round-trips bit for bit.
    let mut twice = BytesMut::new();
    back.encode(&mut twice, version).unwrap_or_else(|e| {
        panic!(
            "{} v{version}: re-decoded value does not encode: {e}",
            M::NAME
        )
    });
    assert_eq!(
        twice,
        out_bytes,
        "{} v{version}: encode(decode(encode(x))) != encode(x)",
        M::NAME
    );
    #[allow(clippy::eq_op)]
    if value == value {
        assert_eq!(
            back,
            value,
            "{} v{version}: decode(encode(x)) != x",
            M::NAME
        );
    }
}

/// Reads a big-endian `u16` from the front of `data`, or 0 past its end.
pub fn take_u16(data: &mut &[u8]) -> u16 {
    let mut b = [0u8; 2];
    for x in &mut b {
        if let Some((first, rest)) = data.split_first() {
            *x = *first;
            *data = rest;
        }
    }
    u16::from_be_bytes(b)
}

/// Reads one byte from the front of `data`, or 0 past its end.
pub fn take_u8(data: &mut &[u8]) -> u8 {
    match data.split_first() {
        Some((first, rest)) => {
            *data = rest;
            *first
        }
        None => 0,
    }
}
