//! Property tests: random sequences of writes, reads, slices and drops on a `PageBuf`, checked
//! step by step against a plain `Vec<u8>` model, and the pool's accounting at the end (every
//! page back, nothing pooled beyond the bound).

use bytes::{Buf, BufMut, Bytes};
use kafkit_pagebuf::{PagePool, SizeClassPool, Slice};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Write(Vec<u8>),
    PutU8(u8),
    PutU32(u32),
    /// Consume `n % (len + 1)` bytes with `Buf::advance`.
    Advance(usize),
    /// `Buf::copy_to_slice` of `n % (len + 1)` bytes, compared with the model.
    Read(usize),
    /// `Buf::copy_to_bytes` of `n % (len + 1)` bytes; the `Bytes` is kept.
    CopyToBytes(usize),
    Split,
    SplitTo(usize),
    /// A slice of the data (not consumed), from `a % (len + 1)` to `b % (len + 1)` in order.
    Slice(usize, usize),
    /// A slice of a kept slice.
    SubSlice(usize, usize, usize),
    /// Read part of a kept slice through `Buf::copy_to_slice`.
    ReadKept(usize, usize),
    /// Turn a kept slice into `Bytes` (or into one `Bytes` per page).
    IntoBytes(usize, bool),
    /// A contiguous view of the data, compared with the model.
    Contiguous(usize, usize),
    DropKept(usize),
    Clear,
    /// Drop the buffer (its data and tail page) and start a new one.
    NewBuffer,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..80).prop_map(Op::Write),
        2 => any::<u8>().prop_map(Op::PutU8),
        1 => any::<u32>().prop_map(Op::PutU32),
        2 => any::<usize>().prop_map(Op::Advance),
        2 => any::<usize>().prop_map(Op::Read),
        1 => any::<usize>().prop_map(Op::CopyToBytes),
        1 => Just(Op::Split),
        2 => any::<usize>().prop_map(Op::SplitTo),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Op::Slice(a, b)),
        1 => (any::<usize>(), any::<usize>(), any::<usize>()).prop_map(|(i, a, b)| Op::SubSlice(i, a, b)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(i, n)| Op::ReadKept(i, n)),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(i, c)| Op::IntoBytes(i, c)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Op::Contiguous(a, b)),
        2 => any::<usize>().prop_map(Op::DropKept),
        1 => Just(Op::Clear),
        1 => Just(Op::NewBuffer),
    ]
}

/// Something handed out by the buffer, with the bytes it must hold.
enum Kept {
    Slice(Slice, Vec<u8>),
    Bytes(Bytes, Vec<u8>),
    Chunks(Vec<Bytes>, Vec<u8>),
}

impl Kept {
    fn check(&self) {
        match self {
            Kept::Slice(s, m) => {
                assert_eq!(s.len(), m.len());
                assert_eq!(s, &m[..]);
                assert_eq!(s.chunks().map(<[u8]>::len).sum::<usize>(), m.len());
            }
            Kept::Bytes(b, m) => assert_eq!(&b[..], &m[..]),
            Kept::Chunks(c, m) => assert_eq!(c.concat(), *m),
        }
    }
}

fn ordered(a: usize, b: usize, len: usize) -> (usize, usize) {
    let (a, b) = (a % (len + 1), b % (len + 1));
    (a.min(b), a.max(b))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn page_buffer_matches_a_vec(
        page_size in 1usize..48,
        max_pages in 0usize..6,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let pool = PagePool::builder().page_size(page_size).max_pages(max_pages).build().unwrap();
        let mut buf = pool.buffer();
        let mut model: Vec<u8> = Vec::new();
        let mut kept: Vec<Kept> = Vec::new();

        for op in ops {
            match op {
                Op::Write(bytes) => {
                    buf.put_slice(&bytes);
                    model.extend_from_slice(&bytes);
                }
                Op::PutU8(b) => {
                    buf.put_u8(b);
                    model.push(b);
                }
                Op::PutU32(v) => {
                    buf.put_u32(v);
                    model.extend_from_slice(&v.to_be_bytes());
                }
                Op::Advance(n) => {
                    let n = n % (model.len() + 1);
                    buf.advance(n);
                    model.drain(..n);
                }
                Op::Read(n) => {
                    let n = n % (model.len() + 1);
                    let mut out = vec![0u8; n];
                    buf.copy_to_slice(&mut out);
                    let expected: Vec<u8> = model.drain(..n).collect();
                    prop_assert_eq!(out, expected);
                }
                Op::CopyToBytes(n) => {
                    let n = n % (model.len() + 1);
                    let b = buf.copy_to_bytes(n);
                    kept.push(Kept::Bytes(b, model.drain(..n).collect()));
                }
                Op::Split => {
                    kept.push(Kept::Slice(buf.split(), std::mem::take(&mut model)));
                }
                Op::SplitTo(n) => {
                    // Beyond the data it is refused and nothing changes.
                    if n % 4 == 0 {
                        prop_assert!(buf.split_to(model.len() + 1).is_none());
                    }
                    let n = n % (model.len() + 1);
                    let s = buf.split_to(n).unwrap();
                    kept.push(Kept::Slice(s, model.drain(..n).collect()));
                }
                Op::Slice(a, b) => {
                    let (a, b) = ordered(a, b, model.len());
                    kept.push(Kept::Slice(buf.slice(a..b).unwrap(), model[a..b].to_vec()));
                }
                Op::SubSlice(i, a, b) => {
                    if kept.is_empty() { continue; }
                    let i = i % kept.len();
                    if let Kept::Slice(s, m) = &kept[i] {
                        let (a, b) = ordered(a, b, m.len());
                        // An inclusive range too, when there is a last byte to include.
                        let sub = if b > a { s.slice(a..=b - 1) } else { s.slice(a..b) };
                        prop_assert!(s.slice(a..m.len() + 1).is_none());
                        kept.push(Kept::Slice(sub.unwrap(), m[a..b].to_vec()));
                    }
                }
                Op::ReadKept(i, n) => {
                    if kept.is_empty() { continue; }
                    let i = i % kept.len();
                    if let Kept::Slice(s, m) = &mut kept[i] {
                        let n = n % (m.len() + 1);
                        let mut out = vec![0u8; n];
                        s.copy_to_slice(&mut out);
                        let expected: Vec<u8> = m.drain(..n).collect();
                        prop_assert_eq!(out, expected);
                    }
                }
                Op::IntoBytes(i, chunks) => {
                    if kept.is_empty() { continue; }
                    let i = i % kept.len();
                    if let Kept::Slice(s, m) = kept.swap_remove(i) {
                        let contiguous = s.is_contiguous();
                        let first = s.chunks().next().map(<[u8]>::as_ptr);
                        if chunks {
                            let c: Vec<Bytes> = s.into_chunks().collect();
                            kept.push(Kept::Chunks(c, m));
                        } else {
                            let b = s.into_bytes();
                            // One page: the Bytes points into it (no copy).
                            if contiguous && !b.is_empty() {
                                prop_assert_eq!(Some(b.as_ptr()), first);
                            }
                            kept.push(Kept::Bytes(b, m));
                        }
                    }
                }
                Op::Contiguous(a, b) => {
                    let (a, b) = ordered(a, b, model.len());
                    let view = buf.contiguous(a..b).unwrap();
                    prop_assert_eq!(&view[..], &model[a..b]);
                }
                Op::DropKept(i) => {
                    if !kept.is_empty() {
                        let i = i % kept.len();
                        kept.swap_remove(i);
                    }
                }
                Op::Clear => {
                    buf.clear();
                    model.clear();
                }
                Op::NewBuffer => {
                    buf = pool.buffer();
                    model.clear();
                }
            }

            prop_assert_eq!(buf.len(), model.len());
            prop_assert_eq!(buf.as_slice(), &model[..]);
            prop_assert_eq!(buf.chunk(), &model[..buf.chunk().len()]);
            for k in &kept {
                k.check();
            }
            let stats = pool.stats();
            prop_assert!(stats.pooled <= max_pages);
            prop_assert_eq!(stats.pooled, stats.idle + stats.in_use);
        }

        drop(buf);
        drop(kept);
        let stats = pool.stats();
        prop_assert_eq!(stats.in_use, 0, "every pooled page is back: {:?}", stats);
        prop_assert_eq!(stats.overflow_in_use, 0, "every overflow page is freed: {:?}", stats);
        prop_assert_eq!(stats.idle, stats.pooled);
    }

    /// Vectored chunks of the data are the data, in order, one per page part.
    #[test]
    fn chunks_vectored_is_the_data(
        page_size in 1usize..32,
        writes in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..50), 0..20),
        skip in any::<usize>(),
    ) {
        let pool = PagePool::builder().page_size(page_size).max_pages(4).build().unwrap();
        let mut buf = pool.buffer();
        let mut model = Vec::new();
        for w in &writes {
            buf.put_slice(w);
            model.extend_from_slice(w);
        }
        let skip = skip % (model.len() + 1);
        buf.advance(skip);
        let mut io = vec![std::io::IoSlice::new(&[]); buf.as_slice().page_count() + 1];
        let n = buf.chunks_vectored(&mut io);
        prop_assert_eq!(n, buf.as_slice().page_count());
        let joined: Vec<u8> = io[..n].iter().flat_map(|s| s.iter().copied()).collect();
        prop_assert_eq!(&joined[..], &model[skip..]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A buffer from a size class holds its length in one page of the smallest class that
    /// fits, the bytes come back as one `Bytes` pointing into that page, and every page is back
    /// in its pool (or freed, beyond the bound) once the `Bytes` are dropped.
    #[test]
    fn size_classes_read_each_length_into_one_page(
        max_bytes in 0usize..200,
        lens in proptest::collection::vec(0usize..80, 1..40),
        keep in proptest::collection::vec(any::<bool>(), 40),
    ) {
        let pools = SizeClassPool::new(&[8, 32, 64], max_bytes).unwrap();
        let mut kept = Vec::new();
        for (i, len) in lens.iter().copied().enumerate() {
            let Some(mut buf) = pools.buffer_for(len) else {
                prop_assert!(len > 64);
                continue;
            };
            let class = buf.pool().page_size();
            prop_assert_eq!(Some(class), [8, 32, 64].into_iter().find(|&c| c >= len));
            let data: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
            buf.put_slice(&data);
            let slice = buf.freeze();
            prop_assert!(slice.is_contiguous());
            let first = slice.chunks().next().map(<[u8]>::as_ptr);
            let bytes = slice.into_bytes();
            if len > 0 {
                prop_assert_eq!(Some(bytes.as_ptr()), first);
            }
            prop_assert_eq!(&bytes[..], &data[..]);
            if keep[i % keep.len()] {
                kept.push((bytes, data));
            }
        }
        for s in pools.stats() {
            prop_assert!(s.pooled <= s.max_pages);
            prop_assert_eq!(s.max_pages, max_bytes / s.page_size);
        }
        for (bytes, data) in &kept {
            prop_assert_eq!(&bytes[..], &data[..]);
        }
        drop(kept);
        for s in pools.stats() {
            prop_assert_eq!((s.in_use, s.overflow_in_use), (0, 0));
        }
    }
}

#[test]
fn size_classes_refuse_unordered_or_bad_sizes() {
    use kafkit_pagebuf::PoolConfigError;
    assert_eq!(
        SizeClassPool::new(&[], 1).err(),
        Some(PoolConfigError::ClassOrder)
    );
    assert_eq!(
        SizeClassPool::new(&[8, 8], 1).err(),
        Some(PoolConfigError::ClassOrder)
    );
    assert_eq!(
        SizeClassPool::new(&[16, 8], 1).err(),
        Some(PoolConfigError::ClassOrder)
    );
    assert_eq!(
        SizeClassPool::new(&[0, 8], 1).err(),
        Some(PoolConfigError::PageSize(0))
    );
}
