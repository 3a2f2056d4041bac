//! The decompressors of kafkit-compress with their size bound.
//!
//! Input: `codec: u8` (gzip, snappy, lz4, zstd: `codec % 4`), `bound: u8` (an index into
//! `BOUNDS`; bit 7 puts 3 bytes in the output buffer first), then the compressed input.
//!
//! Checks: decompression never appends more than the bound, and the buffer's capacity never
//! passes what was in it plus the bound plus one byte (the documented memory bound); what
//! decompresses compresses and decompresses back to the same bytes.
#![no_main]

use bytes::BytesMut;
use kafkit_compress::Compression;
use kafkit_fuzz::take_u8;
use libfuzzer_sys::fuzz_target;

const BOUNDS: [usize; 8] = [0, 1, 7, 100, 4096, 65_536, 1 << 20, 16 << 20];

fuzz_target!(|data: &[u8]| {
    let mut d = data;
    let compression = Compression::ALL[1 + usize::from(take_u8(&mut d)) % 4];
    let b = take_u8(&mut d);
    let bound = BOUNDS[usize::from(b & 7)];
    let codec = compression.codec().expect("every codec is built in");
    let mut out = BytesMut::new();
    if b & 0x80 != 0 {
        out.extend_from_slice(b"xyz");
    }
    let start = out.len();
    let result = codec.decompress(d, bound, &mut out);
    assert!(
        out.capacity() <= start + bound + 1 || out.capacity() <= 64,
        "{compression:?}: capacity {} for a bound of {bound}",
        out.capacity()
    );
    if result.is_err() {
        return;
    }
    assert!(
        out.len() - start <= bound,
        "{compression:?}: {} > {bound}",
        out.len() - start
    );
    assert_eq!(
        &out[..start],
        &b"xyz"[..start],
        "{compression:?}: prefix changed"
    );
    let plain = &out[start..];
    let mut again = BytesMut::new();
    codec.compress(plain, None, &mut again).expect("compress");
    let mut back = BytesMut::new();
    codec
        .decompress(&again, plain.len(), &mut back)
        .expect("decompress what was compressed");
    assert_eq!(&back[..], plain, "{compression:?}: round trip");
});
