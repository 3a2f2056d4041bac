//! Shared pieces of the fuzz targets: the checks every decoded message goes through, and the
//! layout of each target's input (which the seed generator, `cargo run -p kafkit-protocol
//! --example fuzz_seeds`, writes in the same form).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;

use bytes::{Bytes, BytesMut};
use kafkit_protocol::Message;

/// The largest single allocation a target may make: 512 MiB, the memory limit.
///
/// libFuzzer's `-rss_limit_mb=512` also fails on one larger `malloc`, but only through the
/// sanitizer's allocator hooks: without a sanitizer (`cargo xtask fuzz --sanitizer none`) it only
/// samples the resident size, and a reservation that is never touched (`Vec::with_capacity` from a
/// length prefix) does not show there. This allocator checks every request itself, with or
/// without a sanitizer.
pub const MAX_ALLOCATION: usize = 512 << 20;

/// The system allocator, aborting the process (libFuzzer saves the input as a crash) on any single
/// allocation over [`MAX_ALLOCATION`]. Every target links this crate, so every target uses it.
pub struct LimitedAlloc;

impl LimitedAlloc {
    fn check(size: usize) {
        if size > MAX_ALLOCATION {
            // No formatting: that could allocate inside the allocator.
            let _ = std::io::stderr()
                .write_all(b"==kafkit-fuzz== a single allocation over 512 MiB was requested\n");
            std::process::abort();
        }
    }
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds `GlobalAlloc`'s contract;
// the only addition is a size check that aborts before allocating. Tested below
// (`cd fuzz && cargo +nightly test --lib`).
unsafe impl GlobalAlloc for LimitedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        // SAFETY: the caller's layout is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        // SAFETY: as in `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout (every allocation goes through here).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::check(new_size);
        // SAFETY: as in `dealloc`; `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: LimitedAlloc = LimitedAlloc;

/// Decodes `body` as `M` at `version` and, when that succeeds, checks what the decoder promises:
/// on error the buffer is not advanced; a decoded value encodes again at the same version, to
/// exactly `compute_size` bytes, and decodes back to a value that encodes to the same bytes (and is
/// equal, unless it holds a NaN float64).
pub fn check_message<M: Message>(body: &[u8], version: i16) {
    let whole = Bytes::copy_from_slice(body);
    let mut buf = whole.clone();
    let value = match M::decode(&mut buf, version) {
        Ok(v) => v,
        Err(_) => {
            assert_eq!(
                buf.len(),
                whole.len(),
                "{}: a failed decode advanced",
                M::NAME
            );
            return;
        }
    };
    assert!(buf.len() <= whole.len());
    let mut out = BytesMut::new();
    value
        .encode(&mut out, version)
        .unwrap_or_else(|e| panic!("{} v{version}: decoded value does not encode: {e}", M::NAME));
    let size = value
        .compute_size(version)
        .expect("compute_size after encode");
    assert_eq!(out.len(), size, "{} v{version}: compute_size", M::NAME);
    let out_bytes = out.freeze();
    let mut again = out_bytes.clone();
    let back = M::decode(&mut again, version).unwrap_or_else(|e| {
        panic!(
            "{} v{version}: re-encoded value does not decode: {e}",
            M::NAME
        )
    });
    assert!(
        again.is_empty(),
        "{} v{version}: bytes left after re-decode",
        M::NAME
    );
    // Compared by bytes, not only with `==`: a float64 field (AlterClientQuotas, DescribeClientQuotas
    // values) may hold NaN, which is never equal to itself although it round-trips bit for bit.
    let mut twice = BytesMut::new();
    back.encode(&mut twice, version).unwrap_or_else(|e| {
        panic!(
            "{} v{version}: re-decoded value does not encode: {e}",
            M::NAME
        )
    });
    assert_eq!(
        twice,
        out_bytes,
        "{} v{version}: encode(decode(encode(x))) != encode(x)",
        M::NAME
    );
    #[allow(clippy::eq_op)]
    if value == value {
        assert_eq!(
            back,
            value,
            "{} v{version}: decode(encode(x)) != x",
            M::NAME
        );
    }
}

/// Reads a big-endian `u16` from the front of `data`, or 0 past its end.
pub fn take_u16(data: &mut &[u8]) -> u16 {
    let mut b = [0u8; 2];
    for x in &mut b {
        if let Some((first, rest)) = data.split_first() {
            *x = *first;
            *data = rest;
        }
    }
    u16::from_be_bytes(b)
}

/// Reads one byte from the front of `data`, or 0 past its end.
pub fn take_u8(data: &mut &[u8]) -> u8 {
    match data.split_first() {
        Some((first, rest)) => {
            *data = rest;
            *first
        }
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::MAX_ALLOCATION;

    #[test]
    fn allocations_under_the_limit_work_through_every_entry_point() {
        let mut v: Vec<u8> = Vec::with_capacity(16);
        v.extend_from_slice(b"0123456789abcdef");
        v.reserve(1 << 20); // realloc
        v.extend(std::iter::repeat_n(7u8, 1 << 20));
        assert_eq!(v.len(), 16 + (1 << 20));
        let z = vec![0u8; 1 << 16]; // alloc_zeroed
        assert!(z.iter().all(|&b| b == 0));
    }

    #[test]
    fn a_single_allocation_over_the_limit_aborts() {
        if std::env::var_os("KAFKIT_FUZZ_ALLOC_CHILD").is_some() {
            let v: Vec<u8> = Vec::with_capacity(MAX_ALLOCATION + 1);
            // Not reached: the allocator aborts first.
            std::hint::black_box(&v);
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tests::a_single_allocation_over_the_limit_aborts", "--nocapture"])
            .env("KAFKIT_FUZZ_ALLOC_CHILD", "1")
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(6), "expected SIGABRT: {out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("over 512 MiB"));
    }
}
