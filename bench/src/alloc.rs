//! A counting global allocator: every allocation (and reallocation) made by Rust code in the
//! bench's processes is counted with its size, so a client run can report allocations and bytes
//! allocated per record in steady state. librdkafka allocates with C's `malloc`, which this does
//! not see: the counts are reported for this project's client only.

// The allocator only forwards to `System` and bumps two atomics; see the SAFETY comments.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts allocations, then hands every call to [`System`].
pub struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the counting is two relaxed atomic additions, which neither allocate
// nor unwind.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's guarantees for `layout` are passed on as they are.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as `dealloc`, and the caller's guarantees for `new_size` are passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn note(size: usize) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(size as u64, Ordering::Relaxed);
}

/// Allocations (a reallocation counts as one) and bytes asked for, since the process started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Allocated {
    /// Calls to `alloc`, `alloc_zeroed` and `realloc`.
    pub count: u64,
    /// Bytes those calls asked for (a `realloc` counts its new size).
    pub bytes: u64,
}

impl Allocated {
    /// The counts now.
    pub fn now() -> Allocated {
        Allocated {
            count: ALLOCATIONS.load(Ordering::Relaxed),
            bytes: BYTES.load(Ordering::Relaxed),
        }
    }

    /// What was allocated between `earlier` and `self`.
    pub fn since(self, earlier: Allocated) -> Allocated {
        Allocated {
            count: self.count.saturating_sub(earlier.count),
            bytes: self.bytes.saturating_sub(earlier.bytes),
        }
    }
}

/// Held by every test of this binary: the counts are the process's, and `cargo test` runs the
/// tests on parallel threads of one process (nextest runs each in a process of its own), so a
/// test counting its allocations must not share the process with another one allocating.
#[cfg(test)]
pub(crate) fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::Allocated;

    // The bench's own allocator (main.rs) is the global one in its tests too.
    #[test]
    fn a_vector_is_counted_with_its_size() {
        let _one = super::exclusive();
        let before = Allocated::now();
        let v: Vec<u8> = Vec::with_capacity(4_096);
        let after = Allocated::now().since(before);
        drop(std::hint::black_box(v));
        assert!(after.count >= 1, "{after:?}");
        assert!(after.bytes >= 4_096, "{after:?}");
    }
}
