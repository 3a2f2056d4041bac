//! The page pool: lends fixed-size pages, takes them back, counts them.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::PageBuf;
use crate::page::{Page, WriteCursor};

/// Page size of [`PagePool::new`]: 64 KiB, kafka-go's `pageSize` (`protocol/buffer.go`).
pub const DEFAULT_PAGE_SIZE: usize = 64 * 1024;

/// Pool bound of [`PagePool::new`]: 512 pages, with the default page size 32 MiB, the Java
/// producer's default `buffer.memory`.
pub const DEFAULT_MAX_PAGES: usize = 512;

/// The largest page size a pool accepts: 1 GiB.
pub const MAX_PAGE_SIZE: usize = 1 << 30;

/// A pool of fixed-size pages that [`PageBuf`]s write into.
///
/// Cloning is cheap and gives another handle to the same pool. A pool is safe to share between
/// threads; taking or returning a page holds one short lock.
///
/// # The bound, and what happens when the pool is exhausted
///
/// The pool owns at most [`max_pages`](Self::max_pages) pages, allocated lazily (a page's
/// memory is allocated zeroed the first time it is needed, and reused after that). When all of
/// them are lent out, the pool does not fail and does not wait: it allocates an *overflow page*
/// of the same size, which is freed, not pooled, when its last slice drops. So a buffer can
/// always grow, and the memory the pool keeps between uses never exceeds
/// `max_pages * page_size`. This is what kafka-go's `pageBuffer` and franz-go's buffer pools do
/// (both draw from a Go `sync.Pool`, which allocates when empty and never refuses);
/// [`PoolStats::overflow_allocated`] counts the overflow pages, so a pool that is too small
/// shows in its statistics rather than in errors.
///
/// # Examples
///
/// ```
/// use bytes::BufMut;
/// use kafkit_pagebuf::PagePool;
///
/// # fn main() -> Result<(), kafkit_pagebuf::PoolConfigError> {
/// let pool = PagePool::builder().page_size(4).max_pages(1).build()?;
/// let mut buf = pool.buffer();
/// buf.put_slice(b"12345678"); // two pages: the pool's one and an overflow page
/// assert_eq!(pool.stats().in_use, 1);
/// assert_eq!(pool.stats().overflow_in_use, 1);
/// drop(buf);
/// assert_eq!(pool.stats().idle, 1); // the pooled page is back; the overflow page is freed
/// assert_eq!(pool.stats().overflow_in_use, 0);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PagePool {
    shared: Arc<Shared>,
}

/// What the pool's handles and pages share.
pub(crate) struct Shared {
    page_size: usize,
    max_pages: usize,
    state: Mutex<State>,
}

/// Counters and idle pages, under one lock so that [`PagePool::stats`] is a consistent snapshot.
#[derive(Default)]
struct State {
    /// Idle pooled pages.
    free: Vec<Box<[u8]>>,
    /// Pooled pages allocated and not released by `release_idle` (idle or lent).
    pooled: usize,
    /// Overflow pages alive now.
    overflow_in_use: usize,
    /// Overflow pages allocated since the pool was made.
    overflow_allocated: u64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock is held cannot leave the counters half-updated (each update is
        // one statement), so a poisoned lock is still good to use.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a page back from a `Page` that is being dropped.
    pub(crate) fn release(&self, mem: Box<[u8]>, pooled: bool) {
        let mut state = self.lock();
        if pooled {
            state.free.push(mem);
        } else {
            state.overflow_in_use -= 1;
            drop(state);
            drop(mem);
        }
    }
}

impl PagePool {
    /// A pool with [`DEFAULT_PAGE_SIZE`] pages, bounded at [`DEFAULT_MAX_PAGES`].
    pub fn new() -> PagePool {
        PagePool::with_config(DEFAULT_PAGE_SIZE, DEFAULT_MAX_PAGES)
    }

    /// A builder for a pool with another page size or bound.
    pub fn builder() -> PagePoolBuilder {
        PagePoolBuilder {
            page_size: DEFAULT_PAGE_SIZE,
            max_pages: DEFAULT_MAX_PAGES,
        }
    }

    fn with_config(page_size: usize, max_pages: usize) -> PagePool {
        PagePool {
            shared: Arc::new(Shared {
                page_size,
                max_pages,
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Size of every page in bytes.
    pub fn page_size(&self) -> usize {
        self.shared.page_size
    }

    /// The most pages the pool owns (idle and lent together); see the type's documentation for
    /// what happens beyond it.
    pub fn max_pages(&self) -> usize {
        self.shared.max_pages
    }

    /// A new, empty buffer that takes its pages from this pool. Makes no allocation until the
    /// first byte is written.
    pub fn buffer(&self) -> PageBuf {
        PageBuf::new(self)
    }

    /// A snapshot of the pool's counters.
    pub fn stats(&self) -> PoolStats {
        let state = self.shared.lock();
        PoolStats {
            page_size: self.shared.page_size,
            max_pages: self.shared.max_pages,
            pooled: state.pooled,
            idle: state.free.len(),
            in_use: state.pooled - state.free.len(),
            overflow_in_use: state.overflow_in_use,
            overflow_allocated: state.overflow_allocated,
        }
    }

    /// Frees the idle pages (the memory of pages in use is not touched) and returns how many
    /// were freed. The pool allocates again, up to its bound, when it next needs pages.
    pub fn release_idle(&self) -> usize {
        let idle = {
            let mut state = self.shared.lock();
            let idle = std::mem::take(&mut state.free);
            state.pooled -= idle.len();
            idle
        };
        idle.len()
    }

    /// Lends a page: an idle one, else a new pooled one while under the bound, else an overflow
    /// page. Allocation happens outside the lock.
    pub(crate) fn acquire(&self) -> WriteCursor {
        let (mem, pooled) = {
            let mut state = self.shared.lock();
            if let Some(mem) = state.free.pop() {
                (Some(mem), true)
            } else if state.pooled < self.shared.max_pages {
                state.pooled += 1;
                (None, true)
            } else {
                state.overflow_in_use += 1;
                state.overflow_allocated += 1;
                (None, false)
            }
        };
        let mem = mem.unwrap_or_else(|| vec![0u8; self.shared.page_size].into_boxed_slice());
        Page::new_cursor(mem, pooled, Arc::clone(&self.shared))
    }
}

impl Default for PagePool {
    /// Same as [`PagePool::new`].
    fn default() -> PagePool {
        PagePool::new()
    }
}

impl fmt::Debug for PagePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PagePool")
            .field("stats", &self.stats())
            .finish()
    }
}

/// Settings of a [`PagePool`], from [`PagePool::builder`].
#[derive(Clone, Debug)]
pub struct PagePoolBuilder {
    page_size: usize,
    max_pages: usize,
}

impl PagePoolBuilder {
    /// Size of every page in bytes, 1 to [`MAX_PAGE_SIZE`]; default [`DEFAULT_PAGE_SIZE`].
    /// A buffer's data is contiguous within a page, so a decoder that needs contiguous fields
    /// copies less with larger pages; smaller pages waste less memory per buffer.
    pub fn page_size(mut self, page_size: usize) -> PagePoolBuilder {
        self.page_size = page_size;
        self
    }

    /// The most pages the pool owns, idle and lent together; default [`DEFAULT_MAX_PAGES`].
    /// 0 is allowed and pools nothing: every page is an overflow page, freed after use.
    pub fn max_pages(mut self, max_pages: usize) -> PagePoolBuilder {
        self.max_pages = max_pages;
        self
    }

    /// Makes the pool. No page is allocated until a buffer needs one.
    ///
    /// # Errors
    ///
    /// [`PoolConfigError::PageSize`] when the page size is 0 or above [`MAX_PAGE_SIZE`].
    pub fn build(self) -> Result<PagePool, PoolConfigError> {
        if self.page_size == 0 || self.page_size > MAX_PAGE_SIZE {
            return Err(PoolConfigError::PageSize(self.page_size));
        }
        Ok(PagePool::with_config(self.page_size, self.max_pages))
    }
}

/// A [`PagePoolBuilder`] setting out of range.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolConfigError {
    /// The page size (in bytes) is 0 or above [`MAX_PAGE_SIZE`].
    PageSize(usize),
    /// The page sizes of a [`SizeClassPool`](crate::SizeClassPool) are empty or not strictly
    /// increasing.
    ClassOrder,
}

impl fmt::Display for PoolConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolConfigError::PageSize(size) => write!(
                f,
                "page size {size} is out of range: it must be 1 to {MAX_PAGE_SIZE} bytes"
            ),
            PoolConfigError::ClassOrder => {
                write!(
                    f,
                    "size classes must be one or more strictly increasing page sizes"
                )
            }
        }
    }
}

impl std::error::Error for PoolConfigError {}

/// Counters of a [`PagePool`] at one moment, from [`PagePool::stats`].
///
/// `pooled == idle + in_use` and `pooled <= max_pages` always hold; when every buffer and slice
/// of the pool is gone, `in_use` and `overflow_in_use` are 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Size of every page in bytes.
    pub page_size: usize,
    /// The pool's bound in pages.
    pub max_pages: usize,
    /// The pool's own pages allocated now, idle or lent (at most `max_pages`).
    pub pooled: usize,
    /// The pool's own pages waiting to be lent.
    pub idle: usize,
    /// The pool's own pages lent to a buffer or held by a slice.
    pub in_use: usize,
    /// Overflow pages (allocated beyond the bound, freed after use) alive now.
    pub overflow_in_use: usize,
    /// Overflow pages allocated since the pool was made: more than 0 means the bound was reached.
    pub overflow_allocated: u64,
}
