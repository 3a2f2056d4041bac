//! Pooled page buffers: write a request or read a response into fixed-size pages, hand out parts
//! of it as refcounted slices without copying, and give the pages back to the pool when the last
//! slice drops.
//!
//! ```
//! use bytes::{Buf, BufMut, Bytes};
//! use kafkit_pagebuf::PagePool;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Small pages to show the boundaries; the default is 64 KiB pages, at most 512 pooled.
//! let pool = PagePool::builder().page_size(16).max_pages(8).build()?;
//!
//! let mut buf = pool.buffer();
//! buf.put_u32(11); // a length prefix
//! buf.put_slice(b"record one and record two");
//! assert_eq!(buf.len(), 29);
//!
//! // Read with `Buf`, then take the next 10 bytes as a slice: no copy, the page is shared.
//! assert_eq!(buf.get_u32(), 11);
//! let first = buf.split_to(10).ok_or("short")?;
//! assert!(first.is_contiguous());
//! let bytes: Bytes = first.into_bytes(); // still no copy: the Bytes holds the page
//! assert_eq!(bytes, "record one");
//!
//! // The rest spans two pages: a contiguous view of it is copied (and only such a view is).
//! let rest = buf.split();
//! assert_eq!(rest.page_count(), 2);
//! assert_eq!(&rest.contiguous()[..], b" and record two");
//!
//! // Pages return to the pool when the buffer and the last slice of them are gone.
//! drop((buf, bytes, rest));
//! let stats = pool.stats();
//! assert_eq!((stats.in_use, stats.idle), (0, 2));
//! # Ok(())
//! # }
//! ```
//!
//! # The pieces
//!
//! - [`PagePool`]: lends pages of one size, up to a bound; beyond it, it allocates overflow pages
//!   that are freed after use (it never fails or waits; see the type for why).
//! - [`PageBuf`]: a buffer of pages, [`bytes::BufMut`] to write and [`bytes::Buf`] to read. It
//!   never moves bytes it holds: growing takes another page.
//! - [`Slice`]: a read-only run of bytes over one or more pages, cheap to clone and sub-slice,
//!   [`Buf`](bytes::Buf) to read, and a [`Bytes`](bytes::Bytes) without a copy when it lies in
//!   one page ([`Slice::into_bytes`], built on `Bytes::from_owner`), or one `Bytes` per page
//!   ([`Slice::into_chunks`]). [`bytes::Buf::chunks_vectored`] gives the pages as `IoSlice`s for a
//!   vectored write.
//! - [`SizeClassPool`]: pools of a few page sizes, so that a buffer whose length is known first
//!   (a response frame after its size prefix) lies in one page of the smallest size that holds
//!   it, contiguous and shared without a copy.
//!
//! # When bytes are copied
//!
//! Only where contiguous bytes are asked for and the bytes span a page boundary:
//! [`Slice::contiguous`], [`Slice::into_bytes`], [`PageBuf::contiguous`] and
//! `Buf::copy_to_bytes` copy in that case, and borrow or share otherwise. With 64 KiB pages a
//! decoder's fields rarely straddle one.
//!
//! The design follows kafka-go's `pageBuffer` (`protocol/buffer.go`: a list of refcounted,
//! pooled 64 KiB pages) with Rust's `bytes` traits as the interface.
// docs.rs builds with `--cfg docsrs` (Cargo.toml): nightly rustdoc then marks each item behind a
// cargo feature with that feature (`doc_cfg` shows the `#[cfg]` of an item by itself).
#![cfg_attr(docsrs, feature(doc_cfg))]

mod buf;
mod classes;
mod page;
mod pool;
mod slice;

pub use buf::PageBuf;
pub use classes::SizeClassPool;
pub use pool::{
    DEFAULT_MAX_PAGES, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, PagePool, PagePoolBuilder,
    PoolConfigError, PoolStats,
};
pub use slice::Slice;

#[cfg(test)]
mod tests;
