//! One page of memory, its single writer ([`WriteCursor`]) and its readers ([`Seg`]).
//!
//! This is the only module with `unsafe` memory access (besides the `unsafe impl BufMut`, whose
//! contract rests on the guarantees made here). The invariant that makes it sound:
//!
//! - A page's memory is a heap block of `cap` bytes, zeroed when it is first allocated, so every
//!   byte of it is always initialised (safe code cannot de-initialise bytes through
//!   `UninitSlice`).
//! - A page has at most one [`WriteCursor`], made once when the page leaves the pool and never
//!   cloned. The cursor has a position `pos` that only moves forward; it alone touches the bytes
//!   in `[pos, cap)`, and only through `&mut self`.
//! - Every [`Seg`] covers a range that lies below the cursor's `pos` at the time the segment (or
//!   the segment it was narrowed from) was made: a segment is born only from
//!   [`WriteCursor::commit`], and narrowing never widens. Those bytes are never written again
//!   while the page is alive, so any number of threads may read them.
//! - The memory goes back to the pool only in `Page`'s `Drop`, which runs after the last
//!   `Arc<Page>` (held by the cursor and by every segment) is gone; the `Arc`'s release/acquire
//!   ordering makes every read happen before the memory is handed to the next writer.

#![allow(unsafe_code)]

use std::ptr::{self, NonNull};
use std::sync::Arc;

use bytes::buf::UninitSlice;

use crate::pool::Shared;

/// A fixed-size block of memory lent by a pool. Shared through `Arc` by its cursor and segments.
pub(crate) struct Page {
    /// Start of the block, from `Box::leak` of a `Box<[u8]>` of exactly `cap` bytes.
    ptr: NonNull<u8>,
    cap: usize,
    /// Whether the block is one of the pool's own pages (back to the idle list on drop) or an
    /// overflow page allocated beyond the pool's bound (freed on drop).
    pooled: bool,
    pool: Arc<Shared>,
}

// SAFETY: a `Page` owns its heap block (like a `Box<[u8]>`, which is Send and Sync). Shared
// access from several threads is sound by the module invariant: readers only see bytes below the
// writer's position, which no one writes again, and the single writer works through `&mut` of a
// cursor that is not `Clone`.
unsafe impl Send for Page {}
// SAFETY: see `Send` above; `&Page` gives no access to the bytes by itself.
unsafe impl Sync for Page {}

impl Page {
    /// Wraps a block as a page and returns its one and only write cursor.
    pub(crate) fn new_cursor(mem: Box<[u8]>, pooled: bool, pool: Arc<Shared>) -> WriteCursor {
        let cap = mem.len();
        let ptr = NonNull::from(Box::leak(mem)).cast::<u8>();
        WriteCursor {
            page: Arc::new(Page {
                ptr,
                cap,
                pooled,
                pool,
            }),
            pos: 0,
        }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `cap` come from `Box::leak` of a `Box<[u8]>` of `cap` bytes in
        // `new_cursor`, and this is the only place that rebuilds the box, once. `drop` runs after
        // the last `Arc<Page>` is gone, so no cursor, segment or borrowed slice of the block
        // remains.
        let mem =
            unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.cap)) };
        self.pool.release(mem, self.pooled);
    }
}

/// The single writer of a page: writes go to `[pos, cap)`.
pub(crate) struct WriteCursor {
    page: Arc<Page>,
    pos: usize,
}

impl WriteCursor {
    /// Bytes left to write in this page.
    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.page.cap - self.pos
    }

    /// The unwritten rest of the page, `[pos, cap)`.
    #[inline]
    pub(crate) fn spare(&mut self) -> &mut UninitSlice {
        let len = self.remaining();
        // SAFETY: `pos <= cap`, so the range is inside the block. By the module invariant no
        // segment covers any byte at or after `pos`, and this cursor is the page's only writer;
        // the `&mut self` borrow keeps the slice from outliving the next `commit`, which is what
        // moves `pos` past the bytes written through it.
        unsafe { UninitSlice::from_raw_parts_mut(self.page.ptr.as_ptr().add(self.pos), len) }
    }

    /// Marks the next `n` bytes as written and makes them readable: `back` (the segment that
    /// ends the buffer's data) grows when it ends exactly at `pos` on this page, and `None` is
    /// returned; otherwise a new segment is returned.
    ///
    /// Panics when `n` exceeds [`remaining`](Self::remaining) (the `BufMut::advance_mut`
    /// contract).
    #[inline]
    pub(crate) fn commit(&mut self, n: usize, back: Option<&mut Seg>) -> Option<Seg> {
        assert!(
            n <= self.remaining(),
            "advance_mut({n}) past the {} bytes of spare capacity",
            self.remaining()
        );
        let start = self.pos;
        self.pos += n;
        if let Some(back) = back
            && Arc::ptr_eq(&back.page, &self.page)
            && back.end == start
        {
            back.end = self.pos;
            return None;
        }
        Some(Seg {
            page: Arc::clone(&self.page),
            start,
            end: self.pos,
        })
    }
}

/// Written bytes `[start, end)` of one page, shared read-only.
#[derive(Clone)]
pub(crate) struct Seg {
    page: Arc<Page>,
    start: usize,
    end: usize,
}

impl Seg {
    /// The bytes of the segment.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `start <= end <= cap`, and the range lies below the writer's position (module
        // invariant), so it is initialised, inside the block and never written while this
        // segment holds the page alive.
        unsafe { std::slice::from_raw_parts(self.page.ptr.as_ptr().add(self.start), self.len()) }
    }

    /// Length in bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }

    /// The part `[from, to)` of this segment, relative to its start. `from <= to <= len()`.
    pub(crate) fn narrow(&self, from: usize, to: usize) -> Seg {
        debug_assert!(from <= to && to <= self.len());
        let to = to.min(self.len());
        Seg {
            page: Arc::clone(&self.page),
            start: self.start + from.min(to),
            end: self.start + to,
        }
    }

    /// Drops the first `n` bytes (at most `len()`).
    #[inline]
    pub(crate) fn advance(&mut self, n: usize) {
        self.start += n.min(self.len());
    }

    /// Appends `next` when it continues this segment on the same page; says whether it did.
    pub(crate) fn try_merge(&mut self, next: &Seg) -> bool {
        if Arc::ptr_eq(&self.page, &next.page) && self.end == next.start {
            self.end = next.end;
            true
        } else {
            false
        }
    }
}

impl AsRef<[u8]> for Seg {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}
