//! [`PageBuf`]: a growable buffer of pooled pages, written with `BufMut`, read with `Buf`.

use std::borrow::Cow;
use std::fmt;
use std::io::IoSlice;
use std::ops::RangeBounds;

use bytes::buf::UninitSlice;
use bytes::{Buf, BufMut, Bytes};

use crate::page::WriteCursor;
use crate::pool::PagePool;
use crate::slice::{Slice, bounds};

/// A buffer of pages from a [`PagePool`]: written at the end with [`BufMut`], read from the
/// front with [`Buf`], and cut into [`Slice`]s without copying.
///
/// Writes fill the last page and take a new page from the pool when it is full, so a buffer
/// never reallocates or moves bytes it holds (unlike `BytesMut` or `Vec`, which copy everything
/// when they grow). The bytes written so far (the *data*: written and not yet read or split off)
/// can be read in place, sliced, or handed out with [`split`](Self::split) /
/// [`split_to`](Self::split_to) while writing goes on into the same page. A page goes back to
/// the pool when the buffer is done with it and its last slice drops.
///
/// # Examples
///
/// ```
/// use bytes::{Buf, BufMut};
/// use kafkit_pagebuf::PagePool;
///
/// let pool = PagePool::new();
/// let mut buf = pool.buffer();
/// buf.put_i32(5);
/// buf.put_slice(b"hello");
/// assert_eq!(buf.get_i32(), 5);
/// let hello = buf.split(); // no copy; the buffer is empty and can be written again
/// assert_eq!(hello, &b"hello"[..]);
/// ```
pub struct PageBuf {
    pool: PagePool,
    data: Slice,
    /// The page being written, while it has room.
    tail: Option<WriteCursor>,
}

impl PageBuf {
    /// An empty buffer over `pool`'s pages (same as [`PagePool::buffer`]).
    pub fn new(pool: &PagePool) -> PageBuf {
        PageBuf {
            pool: pool.clone(),
            data: Slice::new(),
            tail: None,
        }
    }

    /// The pool the pages come from.
    pub fn pool(&self) -> &PagePool {
        &self.pool
    }

    /// Length of the data in bytes (written, not yet read or split off).
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether there is no data.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The data, borrowed: for [`Slice::chunks`], comparisons, or a clone that outlives the
    /// buffer.
    pub fn as_slice(&self) -> &Slice {
        &self.data
    }

    /// The data `range` as a new slice, without copying; the buffer keeps its data. `None` when
    /// the range does not lie within `0..len()`.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Option<Slice> {
        self.data.slice(range)
    }

    /// The data `range` as one contiguous slice, for a decoder that needs a field in one piece:
    /// borrowed when the range lies in one page, copied when it spans pages. `None` when the
    /// range does not lie within `0..len()`.
    pub fn contiguous(&self, range: impl RangeBounds<usize>) -> Option<Cow<'_, [u8]>> {
        let (start, end) = bounds(range, self.len())?;
        let mut offset = 0;
        for chunk in self.data.chunks() {
            let chunk_end = offset + chunk.len();
            if start >= offset && end <= chunk_end {
                return Some(Cow::Borrowed(&chunk[start - offset..end - offset]));
            }
            if chunk_end > start {
                break;
            }
            offset = chunk_end;
        }
        let view = self.data.slice(start..end)?;
        Some(Cow::Owned(view.contiguous().into_owned()))
    }

    /// Removes all the data and returns it as a slice, without copying. Writing goes on into the
    /// same page: later writes are not part of the returned slice.
    pub fn split(&mut self) -> Slice {
        std::mem::take(&mut self.data)
    }

    /// Removes the first `n` bytes of data and returns them as a slice, without copying. `None`
    /// (and nothing removed) when `n > len()`.
    pub fn split_to(&mut self, n: usize) -> Option<Slice> {
        self.data.split_to(n)
    }

    /// Ends writing and returns the data as a slice. The unwritten rest of the last page is
    /// given up; the page returns to the pool when the slice drops.
    pub fn freeze(self) -> Slice {
        self.data
    }

    /// Drops the data. The page being written is kept for the next writes.
    pub fn clear(&mut self) {
        self.data = Slice::new();
    }
}

impl Buf for PageBuf {
    #[inline]
    fn remaining(&self) -> usize {
        self.data.remaining()
    }

    #[inline]
    fn chunk(&self) -> &[u8] {
        self.data.chunk()
    }

    /// Consumes `cnt` bytes of data; a page is let go as soon as it is consumed.
    ///
    /// # Panics
    ///
    /// When `cnt > remaining()`, as `Buf` allows.
    #[inline]
    fn advance(&mut self, cnt: usize) {
        self.data.advance(cnt);
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        self.data.chunks_vectored(dst)
    }

    #[inline]
    fn copy_to_slice(&mut self, dst: &mut [u8]) {
        self.data.copy_to_slice(dst);
    }

    /// The next `len` bytes as [`Bytes`]: without a copy when they lie in one page, copied when
    /// they span pages.
    ///
    /// # Panics
    ///
    /// When `len > remaining()`, as `Buf` allows.
    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        self.data.copy_to_bytes(len)
    }
}

// SAFETY: `chunk_mut` returns the unwritten rest of the buffer's own last page, which only this
// buffer's cursor may write (see `page.rs`), and `advance_mut` makes exactly the `cnt` bytes the
// caller wrote part of the data (the cursor refuses more than its spare room). Page memory is
// zeroed when allocated, so even bytes a caller claims without writing are initialised.
#[allow(unsafe_code)]
unsafe impl BufMut for PageBuf {
    #[inline]
    fn remaining_mut(&self) -> usize {
        usize::MAX - self.len()
    }

    /// Marks `cnt` bytes of [`chunk_mut`](BufMut::chunk_mut) as written.
    ///
    /// # Panics
    ///
    /// When `cnt` is more than the last `chunk_mut` returned, as `BufMut` allows.
    #[inline]
    unsafe fn advance_mut(&mut self, cnt: usize) {
        if cnt == 0 {
            return;
        }
        let Some(tail) = self.tail.as_mut() else {
            panic!("advance_mut({cnt}) without spare capacity: call chunk_mut first");
        };
        self.data.commit(tail, cnt);
        if tail.remaining() == 0 {
            self.tail = None;
        }
    }

    /// The unwritten rest of the last page; takes a page from the pool when there is none.
    #[inline]
    fn chunk_mut(&mut self) -> &mut UninitSlice {
        let pool = &self.pool;
        self.tail.get_or_insert_with(|| pool.acquire()).spare()
    }

    /// Copies `src` into the last page and as many new pages as it needs.
    #[inline]
    fn put_slice(&mut self, mut src: &[u8]) {
        while !src.is_empty() {
            let dst = self.chunk_mut();
            let n = dst.len().min(src.len());
            dst[..n].copy_from_slice(&src[..n]);
            // SAFETY: the `n` bytes of `chunk_mut` were just written.
            unsafe { self.advance_mut(n) };
            src = &src[n..];
        }
    }
}

impl std::io::Write for PageBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.put_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageBuf")
            .field("len", &self.len())
            .field("pages", &self.data.page_count())
            .field(
                "spare",
                &self.tail.as_ref().map_or(0, WriteCursor::remaining),
            )
            .finish()
    }
}
