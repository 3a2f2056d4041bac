//! Unit tests of the page sharing that the `unsafe` code relies on: a writer and readers of one
//! page, pages reused only after their last reader, readers on other threads.

use std::thread;

use bytes::{Buf, BufMut};

use crate::{PagePool, PoolConfigError, Slice};

fn pool(page_size: usize, max_pages: usize) -> PagePool {
    match PagePool::builder()
        .page_size(page_size)
        .max_pages(max_pages)
        .build()
    {
        Ok(p) => p,
        Err(e) => panic!("pool: {e}"),
    }
}

#[test]
fn writing_on_after_split_leaves_the_slice_alone() {
    let pool = pool(64, 4);
    let mut buf = pool.buffer();
    buf.put_slice(b"first");
    let first = buf.split();
    // The next write goes into the same page, right after the bytes `first` covers.
    buf.put_slice(b"second");
    assert_eq!(pool.stats().in_use, 1);
    assert_eq!(first, &b"first"[..]);
    assert_eq!(buf.split(), &b"second"[..]);
}

#[test]
fn a_page_is_reused_only_after_its_last_slice_drops() {
    let pool = pool(8, 1);
    let mut buf = pool.buffer();
    buf.put_slice(b"abcdefgh"); // fills the one pooled page
    let held = buf.split();
    drop(buf);
    assert_eq!(pool.stats().in_use, 1);

    // Another buffer cannot get the held page: it writes into an overflow page.
    let mut other = pool.buffer();
    other.put_slice(b"zzzzzzzz");
    assert_eq!(pool.stats().overflow_in_use, 1);
    assert_eq!(held, &b"abcdefgh"[..]);
    drop(other);
    assert_eq!(pool.stats().overflow_in_use, 0);

    // Once released, the page's old bytes are overwritten by the next user, not the reverse.
    let bytes = held.clone().into_bytes();
    drop(held);
    assert_eq!(pool.stats().in_use, 1, "the Bytes still holds the page");
    drop(bytes);
    assert_eq!(pool.stats().idle, 1);
    let mut again = pool.buffer();
    again.put_slice(b"12345678");
    assert_eq!(again.split(), &b"12345678"[..]);
    assert_eq!(pool.stats().overflow_allocated, 1);
}

#[test]
fn readers_on_other_threads_while_the_writer_fills_the_page() {
    let pool = pool(4096, 4);
    let mut buf = pool.buffer();
    let mut readers = Vec::new();
    for i in 0..32u8 {
        buf.put_slice(&[i; 100]);
        let part = buf.split();
        readers.push(thread::spawn(move || {
            for _ in 0..100 {
                assert!(part.chunks().all(|c| c.iter().all(|&b| b == i)));
            }
            part.len()
        }));
    }
    let total: usize = readers
        .into_iter()
        .map(|r| r.join().expect("reader thread"))
        .sum();
    assert_eq!(total, 3200);
    drop(buf);
    let stats = pool.stats();
    assert_eq!((stats.in_use, stats.overflow_in_use), (0, 0));
}

#[test]
fn pages_outlive_the_pool_handle() {
    let pool = pool(16, 2);
    let mut buf = pool.buffer();
    buf.put_slice(b"outlives the pool");
    let slice = buf.freeze();
    let handle = pool.clone();
    drop(pool);
    assert_eq!(slice.contiguous().as_ref(), b"outlives the pool");
    assert_eq!(handle.stats().in_use, 2);
    drop(slice);
    assert_eq!(handle.stats().in_use, 0);
    assert_eq!(handle.stats().idle, 2);

    // With no handle left at all, the last slice still returns its pages without trouble.
    let mut buf = handle.buffer();
    buf.put_slice(b"no pool handle left");
    let slice = buf.freeze();
    drop(handle);
    assert_eq!(slice.contiguous().as_ref(), b"no pool handle left");
    drop(slice);
}

#[test]
fn put_u8_merges_into_one_segment_per_page() {
    let pool = pool(16, 4);
    let mut buf = pool.buffer();
    for b in 0..40u8 {
        buf.put_u8(b);
    }
    assert_eq!(buf.as_slice().page_count(), 3);
    let expected: Vec<u8> = (0..40).collect();
    assert_eq!(buf.as_slice(), &expected[..]);
}

#[test]
fn copy_to_bytes_shares_the_page_within_it_and_copies_across() {
    let pool = pool(8, 4);
    let mut buf = pool.buffer();
    buf.put_slice(b"0123456789");
    let page_start = buf.chunk().as_ptr();
    let within = buf.copy_to_bytes(4);
    assert_eq!(within.as_ptr(), page_start, "no copy inside a page");
    let across = buf.copy_to_bytes(6);
    assert_eq!(across, "456789");
    assert!(buf.is_empty());
}

#[test]
fn contiguous_borrows_within_a_page_and_copies_across() {
    let pool = pool(8, 4);
    let mut buf = pool.buffer();
    buf.put_slice(b"0123456789");
    assert!(matches!(
        buf.contiguous(2..6),
        Some(std::borrow::Cow::Borrowed(b"2345"))
    ));
    assert!(matches!(
        buf.contiguous(8..10),
        Some(std::borrow::Cow::Borrowed(b"89"))
    ));
    match buf.contiguous(6..10) {
        Some(std::borrow::Cow::Owned(v)) => assert_eq!(v, b"6789"),
        other => panic!("expected a copy, got {other:?}"),
    }
    assert!(buf.contiguous(6..11).is_none());
    assert!(buf.slice(..11).is_none());
    assert!(buf.split_to(11).is_none());
    assert_eq!(buf.len(), 10);
}

#[test]
fn chunks_vectored_lists_every_page() {
    let pool = pool(4, 8);
    let mut buf = pool.buffer();
    buf.put_slice(b"abcdefghij");
    let mut io = [std::io::IoSlice::new(&[]); 8];
    let n = buf.chunks_vectored(&mut io);
    assert_eq!(n, 3);
    let joined: Vec<u8> = io[..n].iter().flat_map(|s| s.iter().copied()).collect();
    assert_eq!(joined, b"abcdefghij");
}

#[test]
fn zero_copy_bytes_point_into_the_page() {
    let pool = pool(64, 1);
    let mut buf = pool.buffer();
    buf.put_slice(b"header");
    let slice = buf.split();
    let ptr = slice.chunks().next().map(<[u8]>::as_ptr);
    let bytes = slice.into_bytes();
    assert_eq!(Some(bytes.as_ptr()), ptr);
    let chunks: Vec<_> = {
        buf.put_slice(b"more");
        buf.split().into_chunks().collect()
    };
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].as_ptr(), unsafe_free_offset(ptr, 6));
}

/// `ptr + n` as an address comparison without dereferencing.
fn unsafe_free_offset(ptr: Option<*const u8>, n: usize) -> *const u8 {
    ptr.map_or(std::ptr::null(), |p| p.wrapping_add(n))
}

#[test]
fn bad_page_sizes_are_refused() {
    assert_eq!(
        PagePool::builder().page_size(0).build().err(),
        Some(PoolConfigError::PageSize(0))
    );
    assert!(
        PagePool::builder()
            .page_size(crate::MAX_PAGE_SIZE + 1)
            .build()
            .is_err()
    );
}

#[test]
fn a_pool_of_zero_pages_pools_nothing() {
    let pool = pool(8, 0);
    let mut buf = pool.buffer();
    buf.put_slice(&[1; 20]);
    assert_eq!(pool.stats().overflow_in_use, 3);
    drop(buf);
    let stats = pool.stats();
    assert_eq!(
        (
            stats.pooled,
            stats.overflow_in_use,
            stats.overflow_allocated
        ),
        (0, 0, 3)
    );
}

#[test]
fn release_idle_frees_only_idle_pages() {
    let pool = pool(8, 4);
    let mut a = pool.buffer();
    a.put_slice(&[1; 16]);
    let mut b = pool.buffer();
    b.put_slice(&[2; 8]);
    drop(a);
    assert_eq!(pool.release_idle(), 2);
    let stats = pool.stats();
    assert_eq!((stats.pooled, stats.idle, stats.in_use), (1, 0, 1));
    drop(b);
    assert_eq!(pool.stats().idle, 1);
}

#[test]
fn empty_slices_and_buffers() {
    let pool = pool(8, 1);
    let mut buf = pool.buffer();
    assert_eq!(pool.stats().pooled, 0, "no page before the first write");
    assert!(buf.split().is_empty());
    assert_eq!(Slice::new().into_bytes().len(), 0);
    assert_eq!(buf.chunk(), b"");
    assert_eq!(buf.contiguous(..).as_deref(), Some(&b""[..]));
}
