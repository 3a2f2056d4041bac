//! Counters of a [`Writer`](super::Writer), read with [`Writer::stats`](super::Writer::stats).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// A snapshot of a writer's counters since it was built.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct WriterStats {
    /// Records acknowledged (written).
    pub records: u64,
    /// Bytes of record batches acknowledged, as sent (compressed when compression is on).
    pub bytes: u64,
    /// Records that failed (any [`ProduceError`](super::ProduceError) after they were accepted).
    pub errors: u64,
    /// Batch retries after retriable errors.
    pub retries: u64,
    /// Produce requests sent, per broker node id.
    pub produce_requests: BTreeMap<i32, u64>,
    /// Record batches sent (each attempt counts once).
    pub batches: u64,
    /// Smallest batch sent, in bytes as sent (0 before the first).
    pub batch_bytes_min: u64,
    /// Mean batch size, in bytes as sent.
    pub batch_bytes_avg: f64,
    /// Largest batch sent, in bytes as sent.
    pub batch_bytes_max: u64,
    /// Mean records per batch.
    pub batch_records_avg: f64,
    /// Median time from a batch's first record to its acknowledgement, over acknowledged
    /// records (bucketed: within 10 %; zero before the first).
    pub latency_p50: Duration,
    /// 99th percentile of the same.
    pub latency_p99: Duration,
    /// Records buffered now (accepted, not yet acknowledged or failed).
    pub buffered_records: u64,
    /// Bytes buffered now.
    pub buffered_bytes: u64,
}

/// Latency histogram: bucket `i` holds latencies in `[b^i, b^(i+1))` µs with b = 2^(1/8).
const BUCKETS: usize = 8 * 40;

#[derive(Debug)]
pub(crate) struct Stats {
    records: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    retries: AtomicU64,
    batches: AtomicU64,
    batch_bytes_sum: AtomicU64,
    batch_bytes_min: AtomicU64,
    batch_bytes_max: AtomicU64,
    batch_records_sum: AtomicU64,
    requests: Mutex<BTreeMap<i32, u64>>,
    latency: Box<[AtomicU64]>,
    /// The KIP-714 windows (`writer/telemetry.rs` reports them).
    pub(crate) kip714: crate::telemetry::window::ProducerWindows,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            batch_bytes_sum: AtomicU64::new(0),
            batch_bytes_min: AtomicU64::new(u64::MAX),
            batch_bytes_max: AtomicU64::new(0),
            batch_records_sum: AtomicU64::new(0),
            requests: Mutex::new(BTreeMap::new()),
            latency: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            kip714: crate::telemetry::window::ProducerWindows::default(),
        }
    }
}

fn bucket_of(latency: Duration) -> usize {
    let us = latency.as_micros().max(1) as f64;
    ((us.log2() * 8.0) as usize).min(BUCKETS - 1)
}

fn bucket_mid(i: usize) -> Duration {
    Duration::from_secs_f64(2f64.powf((i as f64 + 0.5) / 8.0) / 1_000_000.0)
}

impl Stats {
    pub(crate) fn request(&self, broker: i32, batches: &[(u64, u64)]) {
        *self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(broker)
            .or_default() += 1;
        for &(bytes, records) in batches {
            self.batches.fetch_add(1, Relaxed);
            self.batch_bytes_sum.fetch_add(bytes, Relaxed);
            self.batch_records_sum.fetch_add(records, Relaxed);
            self.batch_bytes_min.fetch_min(bytes, Relaxed);
            self.batch_bytes_max.fetch_max(bytes, Relaxed);
        }
    }

    pub(crate) fn acked(&self, records: u64, bytes: u64, latency: Duration) {
        self.records.fetch_add(records, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
        self.latency[bucket_of(latency)].fetch_add(records, Relaxed);
    }

    pub(crate) fn failed(&self, records: u64) {
        self.errors.fetch_add(records, Relaxed);
    }

    pub(crate) fn retried(&self) {
        self.retries.fetch_add(1, Relaxed);
    }

    pub(crate) fn snapshot(&self, buffered_records: u64, buffered_bytes: u64) -> WriterStats {
        let batches = self.batches.load(Relaxed);
        let counts: Vec<u64> = self.latency.iter().map(|c| c.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        let pct = |q: f64| {
            if total == 0 {
                return Duration::ZERO;
            }
            let rank = ((total as f64) * q).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return bucket_mid(i);
                }
            }
            bucket_mid(BUCKETS - 1)
        };
        let per_batch = |sum: u64| {
            if batches == 0 {
                0.0
            } else {
                sum as f64 / batches as f64
            }
        };
        WriterStats {
            records: self.records.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            errors: self.errors.load(Relaxed),
            retries: self.retries.load(Relaxed),
            produce_requests: self
                .requests
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
            batches,
            batch_bytes_min: if batches == 0 {
                0
            } else {
                self.batch_bytes_min.load(Relaxed)
            },
            batch_bytes_avg: per_batch(self.batch_bytes_sum.load(Relaxed)),
            batch_bytes_max: self.batch_bytes_max.load(Relaxed),
            batch_records_avg: per_batch(self.batch_records_sum.load(Relaxed)),
            latency_p50: pct(0.5),
            latency_p99: pct(0.99),
            buffered_records,
            buffered_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_buckets() {
        let s = Stats::default();
        s.acked(98, 10, Duration::from_millis(2));
        s.acked(2, 10, Duration::from_millis(200));
        s.request(1, &[(100, 98), (300, 2)]);
        let snap = s.snapshot(0, 0);
        let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
        assert!(
            (1.8..2.2).contains(&ms(snap.latency_p50)),
            "{:?}",
            snap.latency_p50
        );
        assert!(
            (180.0..220.0).contains(&ms(snap.latency_p99)),
            "{:?}",
            snap.latency_p99
        );
        assert_eq!((snap.batch_bytes_min, snap.batch_bytes_max), (100, 300));
        assert_eq!(snap.batch_bytes_avg, 200.0);
        assert_eq!(snap.produce_requests.get(&1), Some(&1));
        assert_eq!(snap.records, 100);
    }
}
