//! `kafkit-bench encode`: the Writer's CPU path without a network or a runtime
//! ([`kafkit::bench::encode_path`]: prepare, enqueue, plan, encode, build and encode the
//! Produce request, judge an answer, resolve the futures and run the completion callback), for
//! instruction counts under `valgrind --tool=callgrind`, which are stable on a loaded machine
//! where wall and CPU times are not. Also prints allocations per record (the bench's counting
//! allocator), which are exact here.
//!
//! Per-record figures: run twice with different `--records` and divide the difference
//! (`cargo xtask`-free; docs/benchmarks.md has the commands), so that the fixed cost (the
//! process, the writer, the first batches) drops out.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use clap::Args;
use kafkit::{Acks, Transport, Writer};

use crate::Codec;
use crate::alloc::Allocated;
use crate::cpu::CpuTime;

/// Options of `encode`.
#[derive(Args, Debug)]
pub struct EncodeArgs {
    /// Records to append and acknowledge.
    #[arg(long, default_value_t = 200_000)]
    records: u64,
    /// Partitions of the topic (record `i` to partition `i % partitions`).
    #[arg(long, default_value_t = 48)]
    partitions: i32,
    /// Brokers leading the partitions in turn.
    #[arg(long, default_value_t = 3)]
    brokers: i32,
    /// Records appended between two rounds of requests (a linger window's worth: the producer
    /// bench's mock case sends about 12,000 records per round of 3 requests).
    #[arg(long, default_value_t = 12_000)]
    round: u64,
    /// Bytes in each record value.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Most records in one batch.
    #[arg(long, default_value_t = 10_000)]
    batch_max_records: usize,
    /// Codec of every batch.
    #[arg(long, value_enum, default_value_t = Codec::None)]
    compression: Codec,
    /// Make each record's future (`Writer::send`'s path) instead of none (`send_detached`,
    /// what the producer bench uses).
    #[arg(long)]
    futures: bool,
}

/// Runs the path and prints what it did.
///
/// Errors: a message when the writer refuses the settings or a record.
pub fn run(a: &EncodeArgs) -> Result<bool, String> {
    let transport = Transport::builder(["127.0.0.1:1"])
        .build()
        .map_err(|e| format!("transport: {e}"))?;
    let acked = Arc::new(AtomicU64::new(0));
    let seen = acked.clone();
    let builder = Writer::builder(transport)
        .acks(Acks::Leader)
        .enable_idempotence(false)
        .compression(a.compression.compression())
        .linger(Duration::from_millis(5))
        .batch_size(1_000_000)
        .batch_max_records(a.batch_max_records)
        .buffer_memory(256 * 1024 * 1024)
        .max_buffered_records(usize::MAX >> 8)
        .on_completion(move |_, error| {
            if error.is_none() {
                seen.fetch_add(1, Ordering::Relaxed);
            }
        });
    let value = Bytes::from(crate::value_of(a.value_size));
    let alloc0 = Allocated::now();
    let cpu0 = CpuTime::now()?;
    let stats = kafkit::bench::encode_path(
        builder,
        (a.partitions, a.brokers),
        a.records,
        a.round,
        value,
        a.futures,
    )
    .map_err(|e| format!("encode path: {e}"))?;
    let cpu = CpuTime::now()?.since(cpu0);
    let allocated = Allocated::now().since(alloc0);
    let n = a.records.max(1) as f64;
    println!(
        "records={} acknowledged={} requests={} request_bytes={} allocs={} alloc_bytes={} \
         allocs_per_record={:.4} alloc_bytes_per_record={:.2} cpu_ns_per_record={:.0}",
        stats.records,
        acked.load(Ordering::Relaxed),
        stats.requests,
        stats.request_bytes,
        allocated.count,
        allocated.bytes,
        allocated.count as f64 / n,
        allocated.bytes as f64 / n,
        (cpu.user + cpu.system).as_secs_f64() * 1e9 / n,
    );
    Ok(stats.records == a.records && acked.load(Ordering::Relaxed) == a.records)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use kafkit::{Acks, Transport, Writer};

    use crate::alloc::Allocated;

    /// Allocations made by [`kafkit::bench::encode_path`] over `rounds` rounds of one request
    /// each (one broker), a batch of 10 records per partition in each.
    fn allocations(partitions: i32, rounds: u64) -> u64 {
        let per_round = u64::try_from(partitions).expect("positive") * 10;
        let transport = Transport::builder(["127.0.0.1:1"])
            .build()
            .expect("transport");
        let builder = Writer::builder(transport)
            .acks(Acks::Leader)
            .enable_idempotence(false)
            .linger(Duration::from_millis(5))
            .batch_size(1_000_000)
            .on_completion(|_, _| {});
        let value = Bytes::from(crate::value_of(100));
        let before = Allocated::now();
        let stats = kafkit::bench::encode_path(
            builder,
            (partitions, 1),
            per_round * rounds,
            per_round,
            value,
            false,
        )
        .expect("encode path");
        let count = Allocated::now().since(before).count;
        assert_eq!(stats.records, per_round * rounds);
        assert_eq!(stats.requests, rounds);
        count
    }

    /// Issue 17: in steady state a Produce request allocates nothing either: its lists (the
    /// plan's batches, the encoded batches, the verdicts, the request with its topic entries,
    /// the ended batches) are kept from one request to the next (`RequestLists`), and so are the
    /// frame, the splice list and the answer the path keeps as `Conn` and a broker would. Three
    /// rounds more of one request and 200 batches each allocate nothing at all (15-20 per
    /// request before). The least of three tries, as above.
    #[test]
    fn steady_state_requests_allocate_nothing() {
        let _one = crate::alloc::exclusive();
        for partitions in [48, 200] {
            let extra = (0..3)
                .map(|_| allocations(partitions, 6).saturating_sub(allocations(partitions, 3)))
                .min()
                .expect("three tries");
            assert_eq!(
                extra, 0,
                "{extra} allocations for 3 more requests of {partitions} batches"
            );
        }
    }

    /// Issue 17: in steady state a batch allocates nothing (its slot, records buffer and
    /// timestamps are an ended batch's, and handing its bytes to the request allocates no
    /// reference count); what is left is per request. Three rounds more of 200 batches each
    /// cost fewer than a quarter allocation per batch (they cost 3 per batch before). The
    /// least of three tries, as the counts are the process's (other tests may allocate at the
    /// same time under `cargo test`).
    #[test]
    fn steady_state_batches_allocate_nothing() {
        let _one = crate::alloc::exclusive();
        let partitions = 200;
        let extra = (0..3)
            .map(|_| allocations(partitions, 6).saturating_sub(allocations(partitions, 3)))
            .min()
            .expect("three tries");
        assert!(
            extra / 3 < u64::from(partitions.unsigned_abs()) / 4,
            "{extra} allocations for 3 more rounds of {partitions} batches"
        );
    }
}
