//! [`Slice`]: a read-only, refcounted run of bytes over one or more pages.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::collections::vec_deque;
use std::fmt;
use std::io::IoSlice;
use std::ops::{Bound, RangeBounds};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::page::{Seg, WriteCursor};

/// A read-only run of bytes over one or more pages of a [`PagePool`](crate::PagePool).
///
/// A slice holds a reference on each page it covers, so the bytes stay valid (and the pages stay
/// out of the pool) until the last slice of a page drops. Cloning and sub-slicing
/// ([`slice`](Self::slice), [`split_to`](Self::split_to)) copy no bytes: they count references
/// (a slice over one page makes no allocation; one over several pages allocates its list of
/// pages). [`Buf`] reads from the front and lets go of pages as they are consumed.
///
/// Bytes that span a page boundary are not contiguous in memory. The methods that need
/// contiguous bytes say what they do then: [`contiguous`](Self::contiguous) and
/// [`into_bytes`](Self::into_bytes) copy only when the slice spans pages;
/// [`chunks`](Self::chunks) and [`into_chunks`](Self::into_chunks) never copy.
#[derive(Clone, Default)]
pub struct Slice {
    segs: Segs,
    len: usize,
}

/// The pages of a slice: none or one without an allocation.
#[derive(Clone, Default)]
enum Segs {
    #[default]
    Zero,
    One(Seg),
    Many(VecDeque<Seg>),
}

/// Iterator over the segments of a [`Segs`].
enum SegIter<'a> {
    One(Option<&'a Seg>),
    Many(vec_deque::Iter<'a, Seg>),
}

impl<'a> Iterator for SegIter<'a> {
    type Item = &'a Seg;

    fn next(&mut self) -> Option<&'a Seg> {
        match self {
            SegIter::One(s) => s.take(),
            SegIter::Many(it) => it.next(),
        }
    }
}

/// `range` as `(start, end)` within `0..len`, or `None` when it does not fit.
pub(crate) fn bounds(range: impl RangeBounds<usize>, len: usize) -> Option<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1)?,
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    (start <= end && end <= len).then_some((start, end))
}

impl Slice {
    /// An empty slice (no page).
    pub fn new() -> Slice {
        Slice::default()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the slice has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many contiguous pieces (page parts) the bytes are in: 0 when empty, 1 when the slice
    /// lies in one page.
    pub fn page_count(&self) -> usize {
        match &self.segs {
            Segs::Zero => 0,
            Segs::One(_) => 1,
            Segs::Many(v) => v.len(),
        }
    }

    /// Whether the bytes are contiguous in memory (at most one page), so that
    /// [`contiguous`](Self::contiguous) and [`into_bytes`](Self::into_bytes) do not copy.
    pub fn is_contiguous(&self) -> bool {
        self.page_count() <= 1
    }

    fn iter(&self) -> SegIter<'_> {
        match &self.segs {
            Segs::Zero => SegIter::One(None),
            Segs::One(s) => SegIter::One(Some(s)),
            Segs::Many(v) => SegIter::Many(v.iter()),
        }
    }

    /// The contiguous pieces of the slice, in order, without copying.
    pub fn chunks(&self) -> impl Iterator<Item = &[u8]> {
        self.iter().map(Seg::as_slice)
    }

    /// The contiguous pieces of the slice as [`Bytes`], in order, without copying the bytes:
    /// each `Bytes` holds a reference on its page (`Bytes::from_owner`; one small allocation per
    /// piece).
    pub fn into_chunks(self) -> impl Iterator<Item = Bytes> {
        let segs: VecDeque<Seg> = match self.segs {
            Segs::Zero => VecDeque::new(),
            Segs::One(s) => VecDeque::from([s]),
            Segs::Many(v) => v,
        };
        segs.into_iter().map(Bytes::from_owner)
    }

    /// The bytes as one contiguous slice: borrowed, without a copy, when the slice lies in one
    /// page; copied into a new `Vec` when it spans pages.
    pub fn contiguous(&self) -> Cow<'_, [u8]> {
        let mut it = self.iter();
        match (it.next(), it.next()) {
            (None, _) => Cow::Borrowed(&[]),
            (Some(one), None) => Cow::Borrowed(one.as_slice()),
            _ => {
                let mut out = Vec::with_capacity(self.len);
                for seg in self.iter() {
                    out.extend_from_slice(seg.as_slice());
                }
                Cow::Owned(out)
            }
        }
    }

    /// The bytes as [`Bytes`]: without a copy when the slice lies in one page (the `Bytes` holds
    /// the page, `Bytes::from_owner`); copied when it spans pages.
    pub fn into_bytes(self) -> Bytes {
        match self.segs {
            Segs::Zero => Bytes::new(),
            Segs::One(seg) => Bytes::from_owner(seg),
            Segs::Many(ref v) if v.len() == 1 => Bytes::from_owner(v[0].clone()),
            Segs::Many(_) => Bytes::from(self.contiguous().into_owned()),
        }
    }

    /// The bytes `range` (relative to the start of this slice) as a new slice, without copying.
    /// `None` when the range does not lie within `0..len()`.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Option<Slice> {
        let (start, end) = bounds(range, self.len)?;
        let mut out = Slice::new();
        let mut offset = 0;
        for seg in self.iter() {
            let seg_end = offset + seg.len();
            if seg_end > start && offset < end {
                let from = start.saturating_sub(offset);
                let to = end.min(seg_end) - offset;
                out.push(seg.narrow(from, to));
            }
            if seg_end >= end {
                break;
            }
            offset = seg_end;
        }
        Some(out)
    }

    /// Removes the first `n` bytes and returns them as a slice, without copying. `None` (and
    /// nothing removed) when `n > len()`.
    pub fn split_to(&mut self, n: usize) -> Option<Slice> {
        let head = self.slice(..n)?;
        self.advance(n);
        Some(head)
    }

    /// Appends a segment, merging it into the last one when it continues it.
    pub(crate) fn push(&mut self, seg: Seg) {
        if seg.len() == 0 {
            return;
        }
        self.len += seg.len();
        match &mut self.segs {
            Segs::Zero => self.segs = Segs::One(seg),
            Segs::One(last) => {
                if !last.try_merge(&seg) {
                    let last = last.clone();
                    self.segs = Segs::Many(VecDeque::from([last, seg]));
                }
            }
            Segs::Many(v) => {
                let merged = v.back_mut().is_some_and(|last| last.try_merge(&seg));
                if !merged {
                    v.push_back(seg);
                }
            }
        }
    }

    /// Makes the next `n` bytes written through `cursor` part of this slice, at its end.
    #[inline]
    pub(crate) fn commit(&mut self, cursor: &mut WriteCursor, n: usize) {
        let back = match &mut self.segs {
            Segs::Zero => None,
            Segs::One(last) => Some(last),
            Segs::Many(v) => v.back_mut(),
        };
        match cursor.commit(n, back) {
            None => self.len += n,
            Some(seg) => self.push(seg),
        }
    }

    #[inline]
    fn front(&self) -> Option<&Seg> {
        match &self.segs {
            Segs::Zero => None,
            Segs::One(s) => Some(s),
            Segs::Many(v) => v.front(),
        }
    }

    /// Drops the front segment.
    fn pop_front(&mut self) {
        match &mut self.segs {
            Segs::Zero => {}
            Segs::One(_) => self.segs = Segs::Zero,
            Segs::Many(v) => {
                v.pop_front();
                if v.is_empty() {
                    self.segs = Segs::Zero;
                }
            }
        }
    }

    #[inline]
    fn front_mut(&mut self) -> Option<&mut Seg> {
        match &mut self.segs {
            Segs::Zero => None,
            Segs::One(s) => Some(s),
            Segs::Many(v) => v.front_mut(),
        }
    }
}

impl Buf for Slice {
    #[inline]
    fn remaining(&self) -> usize {
        self.len
    }

    #[inline]
    fn chunk(&self) -> &[u8] {
        self.front().map_or(&[], Seg::as_slice)
    }

    /// Consumes `cnt` bytes from the front; a page is let go as soon as it is consumed.
    ///
    /// # Panics
    ///
    /// When `cnt > remaining()`, as `Buf` allows.
    #[inline]
    fn advance(&mut self, mut cnt: usize) {
        assert!(
            cnt <= self.len,
            "advance({cnt}) past the {} remaining bytes",
            self.len
        );
        self.len -= cnt;
        while cnt > 0 {
            let Some(front) = self.front_mut() else {
                break;
            };
            if cnt < front.len() {
                front.advance(cnt);
                break;
            }
            cnt -= front.len();
            self.pop_front();
        }
    }

    /// Copies the next `dst.len()` bytes into `dst`.
    ///
    /// # Panics
    ///
    /// When `dst.len() > remaining()`, as `Buf` allows.
    #[inline]
    fn copy_to_slice(&mut self, dst: &mut [u8]) {
        assert!(
            dst.len() <= self.len,
            "copy_to_slice({}) past the {} remaining bytes",
            dst.len(),
            self.len
        );
        let mut filled = 0;
        while filled < dst.len() {
            let Some(front) = self.front_mut() else {
                break;
            };
            let chunk = front.as_slice();
            let n = chunk.len().min(dst.len() - filled);
            dst[filled..filled + n].copy_from_slice(&chunk[..n]);
            filled += n;
            if n < chunk.len() {
                front.advance(n);
            } else {
                self.pop_front();
            }
        }
        self.len -= filled;
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, seg) in dst.iter_mut().zip(self.iter()) {
            *slot = IoSlice::new(seg.as_slice());
            n += 1;
        }
        n
    }

    /// The next `len` bytes as [`Bytes`]: without a copy when they lie in the front page, copied
    /// when they span pages.
    ///
    /// # Panics
    ///
    /// When `len > remaining()`, as `Buf` allows.
    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        assert!(
            len <= self.len,
            "copy_to_bytes({len}) past the {} remaining bytes",
            self.len
        );
        match self.front() {
            Some(front) if front.len() >= len => {
                let head = front.narrow(0, len);
                self.advance(len);
                Bytes::from_owner(head)
            }
            _ => {
                let mut out = BytesMut::with_capacity(len);
                out.put((&mut *self).take(len));
                out.freeze()
            }
        }
    }
}

impl From<Slice> for Bytes {
    /// Same as [`Slice::into_bytes`]: no copy unless the slice spans pages.
    fn from(slice: Slice) -> Bytes {
        slice.into_bytes()
    }
}

impl PartialEq for Slice {
    /// Compares the bytes, wherever the page boundaries are.
    fn eq(&self, other: &Slice) -> bool {
        self.len == other.len && {
            let mut a = self.clone();
            let mut b = other.clone();
            while a.has_remaining() {
                let n = a.chunk().len().min(b.chunk().len());
                if a.chunk()[..n] != b.chunk()[..n] {
                    return false;
                }
                a.advance(n);
                b.advance(n);
            }
            true
        }
    }
}

impl Eq for Slice {}

impl PartialEq<[u8]> for Slice {
    fn eq(&self, other: &[u8]) -> bool {
        if self.len != other.len() {
            return false;
        }
        let mut rest = other;
        for chunk in self.chunks() {
            let (head, tail) = rest.split_at(chunk.len());
            if head != chunk {
                return false;
            }
            rest = tail;
        }
        true
    }
}

impl PartialEq<&[u8]> for Slice {
    fn eq(&self, other: &&[u8]) -> bool {
        *self == **other
    }
}

impl fmt::Debug for Slice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slice")
            .field("len", &self.len)
            .field("pages", &self.page_count())
            .finish()
    }
}
