//! Bounded decompression into a [`BytesMut`]: the shared core of every streaming codec.

use std::io::Read;

use bytes::{Bytes, BytesMut};

use crate::{CompressError, Compression};

/// Smallest growth step of the output buffer, in bytes.
const MIN_GROWTH: usize = 32 * 1024;

/// Appends everything `reader` yields to `out`, refusing to produce more than `max_output` bytes.
///
/// `size_hint` (bytes; 0 when unknown) sizes the first allocation; it is never trusted beyond
/// `max_output`. The buffer grows geometrically but its capacity never passes
/// `out.len() + max_output + 1` (one byte past the limit is how an overflow is detected), so a
/// decompression bomb costs at most that much memory.
///
/// # Errors
/// [`CompressError::OutputLimitExceeded`] past `max_output`; [`CompressError::Corrupt`] when the
/// reader fails (the codec's error text is kept as the reason).
pub(crate) fn read_bounded<R: Read>(
    mut reader: R,
    max_output: usize,
    size_hint: usize,
    out: &mut BytesMut,
    compression: Compression,
) -> Result<(), CompressError> {
    let mut buf: Vec<u8> = Vec::from(std::mem::take(out));
    let start = buf.len();
    let limit = start.saturating_add(max_output).saturating_add(1);
    if size_hint > 0 {
        // One byte more than the hint lets a correct hint finish without a second allocation.
        buf.reserve_exact(size_hint.saturating_add(1).min(limit - start));
    }
    let result = loop {
        if buf.len() >= limit {
            break Err(CompressError::OutputLimitExceeded {
                compression,
                limit: max_output,
            });
        }
        if buf.len() == buf.capacity() {
            let grow = (buf.len() - start).max(MIN_GROWTH).min(limit - buf.len());
            buf.reserve_exact(grow);
        }
        let room = buf.capacity().min(limit) - buf.len();
        // `Take` stops the reader at the spare capacity, so `read_to_end` never reallocates.
        match (&mut reader).take(room as u64).read_to_end(&mut buf) {
            Ok(n) if n < room => break Ok(()),
            Ok(_) => {}
            Err(e) => break Err(corrupt(compression, e)),
        }
    };
    *out = BytesMut::from(Bytes::from(buf));
    result
}

/// A [`CompressError::Corrupt`] for `compression` carrying `err`'s text.
pub(crate) fn corrupt(compression: Compression, err: impl std::fmt::Display) -> CompressError {
    CompressError::Corrupt {
        compression,
        reason: err.to_string(),
    }
}
