//! Zstandard (id 4, KIP-110) through the zstd crate (libzstd).

use std::cell::RefCell;
use std::io::Cursor;

use bytes::{Bytes, BytesMut};

use crate::bounded::{corrupt, read_bounded};
use crate::{Codec, CompressError, Compression};

thread_local! {
    /// This thread's compression context, kept from one call to the next. A context made per
    /// call (`ZSTD_compress`) zeroes its tables each time: that `memset` was 39 % of the
    /// instructions of writing zstd batches of 48 partitions (`kafkit-bench encode --compression
    /// zstd` under callgrind). A reused context keeps its largest workspace (sized by the
    /// largest input and level it compressed) until the thread ends. The bytes written are the
    /// same.
    static CCTX: RefCell<Option<zstd::zstd_safe::CCtx<'static>>> = const { RefCell::new(None) };
}

/// Compresses `input` at `level` to the end of `out` with this thread's kept context; with a
/// fresh one when it cannot be had (made, or borrowed: the thread is ending).
fn compress_reusing(
    out: &mut Cursor<&mut Vec<u8>>,
    input: &[u8],
    level: i32,
) -> zstd::zstd_safe::SafeResult {
    let kept = CCTX.try_with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            *slot = zstd::zstd_safe::CCtx::try_create();
        }
        let cctx = slot.as_mut()?;
        Some(cctx.compress(&mut *out, input, level))
    });
    match kept {
        Ok(Some(result)) => result,
        _ => zstd::zstd_safe::compress(out, input, level),
    }
}

/// The `zstd` codec (Kafka id 4; brokers accept it from Produce v7, send it from Fetch v10).
///
/// Writes one zstd frame with its content size; reads one or more concatenated frames (in one
/// call when the first frame declares its size, else streaming). Levels
/// follow KIP-390's `compression.zstd.level`: libzstd's range (-131072 to 22), default 3.
/// Working memory while decoding is libzstd's window, at most 128 MiB (its default limit,
/// window log 27), besides the bounded output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZstdCodec;

impl Codec for ZstdCodec {
    fn compression(&self) -> Compression {
        Compression::Zstd
    }

    fn compress(
        &self,
        input: &[u8],
        level: Option<i32>,
        out: &mut BytesMut,
    ) -> Result<(), CompressError> {
        let level = Compression::Zstd
            .validate_level(level)?
            .unwrap_or(ZSTD_DEFAULT_LEVEL);
        let mut buf = Vec::from(std::mem::take(out));
        let at = buf.len();
        buf.reserve(zstd::zstd_safe::compress_bound(input.len()));
        let mut cursor = Cursor::new(&mut buf);
        cursor.set_position(at as u64);
        let result = compress_reusing(&mut cursor, input, level);
        *out = BytesMut::from(Bytes::from(buf));
        match result {
            Ok(_) => Ok(()),
            Err(code) => Err(corrupt(
                Compression::Zstd,
                zstd::zstd_safe::get_error_name(code),
            )),
        }
    }

    fn decompress(
        &self,
        input: &[u8],
        max_output: usize,
        out: &mut BytesMut,
    ) -> Result<(), CompressError> {
        let declared = zstd::zstd_safe::get_frame_content_size(input)
            .ok()
            .flatten()
            .and_then(|n| usize::try_from(n).ok());
        if let Some(n) = declared.filter(|&n| n <= max_output)
            && one_shot(input, n, max_output, out)
        {
            return Ok(());
        }
        // Streaming: frames without a content size (the Java producer's), several frames, or
        // input the one-shot call refused (the stream then reports why).
        let dec = zstd::stream::read::Decoder::with_buffer(input)
            .map_err(|e| corrupt(Compression::Zstd, e))?;
        read_bounded(
            dec,
            max_output,
            declared.unwrap_or(0),
            out,
            Compression::Zstd,
        )
    }
}

/// Decodes `input` in one call into room for the `declared` bytes its first frame announces
/// (at most `max_output`). Returns `false`, leaving `out` as it was, when that does not work.
fn one_shot(input: &[u8], declared: usize, max_output: usize, out: &mut BytesMut) -> bool {
    let mut buf = Vec::from(std::mem::take(out));
    let at = buf.len();
    buf.reserve_exact(declared);
    let mut cursor = Cursor::new(&mut buf);
    cursor.set_position(at as u64);
    let ok = matches!(zstd::zstd_safe::decompress(&mut cursor, input), Ok(n) if n <= max_output);
    if !ok {
        buf.truncate(at);
    }
    *out = BytesMut::from(Bytes::from(buf));
    ok
}

/// Kafka's default zstd level (KIP-390), libzstd's own default.
pub(crate) const ZSTD_DEFAULT_LEVEL: i32 = 3;
