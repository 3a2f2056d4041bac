//! [`SizeClassPool`]: pools of pages in a few sizes, for buffers whose length is known before
//! they are written (a response frame after its size prefix).

use std::fmt;
use std::sync::Arc;

use crate::pool::{PagePool, PoolConfigError, PoolStats};
use crate::{MAX_PAGE_SIZE, PageBuf};

/// Pools of pages in a few sizes (*size classes*), so that a buffer whose length is known before
/// it is written fits in one page of the smallest class that holds it: its bytes are
/// contiguous (a decoder reads them in place, [`Slice::into_bytes`](crate::Slice::into_bytes)
/// copies nothing) and at most one class step of the page is left unused.
///
/// Each class is a [`PagePool`] of its own, bounded at `max_bytes_per_class / page_size` pages
/// (at least 0: a class larger than the bound pools nothing, and its pages are overflow pages,
/// freed after use). So the memory kept between uses is at most `classes x max_bytes_per_class`,
/// and only what the workload has actually needed at once. A length above the largest class
/// has no class ([`buffer_for`](Self::buffer_for) returns `None`): the caller allocates it the
/// ordinary way.
///
/// Cloning is cheap and gives another handle to the same pools.
///
/// # Examples
///
/// ```
/// use bytes::BufMut;
/// use kafkit_pagebuf::SizeClassPool;
///
/// # fn main() -> Result<(), kafkit_pagebuf::PoolConfigError> {
/// let pools = SizeClassPool::new(&[16, 64], 128)?;
/// let mut buf = pools.buffer_for(40).expect("a class holds 40 bytes");
/// assert_eq!(buf.pool().page_size(), 64); // the smallest class that holds 40 bytes
/// buf.put_slice(&[7; 40]);
/// let bytes = buf.freeze().into_bytes(); // one page: no copy
/// assert_eq!(pools.classes()[1].stats().in_use, 1);
/// drop(bytes);
/// assert_eq!(pools.classes()[1].stats().idle, 1);
/// assert!(pools.buffer_for(65).is_none()); // above the largest class
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SizeClassPool {
    classes: Arc<[PagePool]>,
    max_bytes_per_class: usize,
}

impl SizeClassPool {
    /// Pools for the page sizes `sizes` (strictly increasing, each 1 to [`MAX_PAGE_SIZE`]), each
    /// keeping at most `max_bytes_per_class` bytes of pages (rounded down to whole pages).
    ///
    /// # Errors
    ///
    /// [`PoolConfigError::PageSize`] for a size of 0 or above [`MAX_PAGE_SIZE`];
    /// [`PoolConfigError::ClassOrder`] when the sizes are empty or not strictly increasing.
    pub fn new(
        sizes: &[usize],
        max_bytes_per_class: usize,
    ) -> Result<SizeClassPool, PoolConfigError> {
        if sizes.is_empty() || sizes.windows(2).any(|w| w[0] >= w[1]) {
            return Err(PoolConfigError::ClassOrder);
        }
        let classes = sizes
            .iter()
            .map(|&size| {
                if size == 0 || size > MAX_PAGE_SIZE {
                    return Err(PoolConfigError::PageSize(size));
                }
                PagePool::builder()
                    .page_size(size)
                    .max_pages(max_bytes_per_class / size)
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SizeClassPool {
            classes: classes.into(),
            max_bytes_per_class,
        })
    }

    /// The pools, smallest pages first.
    pub fn classes(&self) -> &[PagePool] {
        &self.classes
    }

    /// The page size of the largest class: the longest buffer [`buffer_for`](Self::buffer_for)
    /// serves.
    pub fn largest(&self) -> usize {
        self.classes.last().map_or(0, PagePool::page_size)
    }

    /// The bound of each class in bytes, as given to [`new`](Self::new).
    pub fn max_bytes_per_class(&self) -> usize {
        self.max_bytes_per_class
    }

    /// The pool of the smallest class whose pages hold `len` bytes; `None` above the largest.
    pub fn pool_for(&self, len: usize) -> Option<&PagePool> {
        self.classes.iter().find(|p| p.page_size() >= len)
    }

    /// An empty buffer whose first page, taken when the first byte is written, holds `len`
    /// bytes: the first `len` bytes written are contiguous. `None` when `len` is above the
    /// largest class.
    pub fn buffer_for(&self, len: usize) -> Option<PageBuf> {
        self.pool_for(len).map(PagePool::buffer)
    }

    /// A snapshot of every class's counters, smallest pages first.
    pub fn stats(&self) -> Vec<PoolStats> {
        self.classes.iter().map(PagePool::stats).collect()
    }

    /// Frees the idle pages of every class ([`PagePool::release_idle`]); returns how many.
    pub fn release_idle(&self) -> usize {
        self.classes.iter().map(PagePool::release_idle).sum()
    }
}

impl fmt::Debug for SizeClassPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SizeClassPool")
            .field(
                "classes",
                &self
                    .classes
                    .iter()
                    .map(PagePool::page_size)
                    .collect::<Vec<_>>(),
            )
            .field("max_bytes_per_class", &self.max_bytes_per_class)
            .finish()
    }
}
