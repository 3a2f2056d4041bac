//! `kafkit perf produce|consume`: Kafka's producer and consumer perf tools in one command:
//! records/s, MB/s and (produce) the latency from send to acknowledgement, p50/p99/p999/max,
//! with a live progress line on a terminal.

use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use kafkit::{Bytes, Client, ProducerRecordRef, StartOffset};
use serde_json::json;

use crate::conn::Conn;
use crate::out::Progress;
use crate::{CmdResult, Failure};

/// `kafkit perf`.
#[derive(Debug, Subcommand)]
pub enum PerfCmd {
    /// Write records as fast as acknowledged (or at --throughput) and report rates and latency.
    Produce(PerfProduceArgs),
    /// Read a topic from the beginning and report rates.
    Consume(PerfConsumeArgs),
}

/// `kafkit perf produce`.
#[derive(Debug, Args)]
pub struct PerfProduceArgs {
    /// The topic.
    topic: String,
    /// Records to write.
    #[arg(short = 'n', long, default_value_t = 100_000)]
    records: u64,
    /// Value size in bytes (checked against batch.size and buffer.memory before anything is
    /// made; with compression a record may exceed batch.size once compressed to fit).
    #[arg(short = 's', long = "record-size", default_value_t = 100)]
    record_size: usize,
    /// At most this many records per second (default: no limit).
    #[arg(long)]
    throughput: Option<u64>,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

/// `kafkit perf consume`.
#[derive(Debug, Args)]
pub struct PerfConsumeArgs {
    /// The topic.
    topic: String,
    /// Records to read, reported exactly (default: up to the end of every partition; with -n
    /// it waits until N are written).
    #[arg(short = 'n', long)]
    records: Option<u64>,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

/// Runs `kafkit perf ...`.
pub async fn run(conn: &Conn, cmd: PerfCmd) -> CmdResult {
    match cmd {
        PerfCmd::Produce(a) => produce(conn, a).await,
        PerfCmd::Consume(a) => consume(conn, a).await,
    }
}

/// The value at quantile `q` of sorted `v`.
fn quantile(v: &[u32], q: f64) -> u32 {
    if v.is_empty() {
        return 0;
    }
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

fn ms(us: u32) -> f64 {
    f64::from(us) / 1000.0
}

/// Bytes a record adds to a batch besides its value, at most: the batch header (61) when it
/// is alone, and the record's own length, attributes, deltas, key and header counts (varints).
const RECORD_OVERHEAD: u64 = 61 + 21;

/// A property of `conn` as a number, or `default` when it is not set (the table checked it).
fn number(conn: &Conn, name: &str, default: u64) -> u64 {
    conn.props
        .get(name)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Checks `-s SIZE` against the writer's limits before the payload is made: an uncompressed
/// record must fit a batch (`batch.size`) and any record the buffer (`buffer.memory`).
fn check_record_size(conn: &Conn, size: usize) -> CmdResult {
    let size = size as u64;
    let batch = number(conn, "batch.size", 1_048_576);
    let buffer = match conn.props.get("queue.buffering.max.kbytes") {
        Some(_) => number(conn, "queue.buffering.max.kbytes", 32_768).saturating_mul(1024),
        None => number(conn, "buffer.memory", 33_554_432),
    };
    let compression = conn
        .props
        .get("compression.type")
        .or_else(|| conn.props.get("compression.codec"))
        .unwrap_or("none");
    let needed = size.saturating_add(RECORD_OVERHEAD);
    if compression.eq_ignore_ascii_case("none") && needed > batch {
        return Err(Failure::Usage(format!(
            "-s {size}: a record with that value takes up to {needed} bytes of a batch, more \
             than batch.size={batch}: lower -s, or raise -X batch.size (at most 1073741824) \
             and -X buffer.memory with it"
        )));
    }
    if needed > buffer {
        return Err(Failure::Usage(format!(
            "-s {size}: a record with that value takes up to {needed} bytes, more than \
             buffer.memory={buffer}: lower -s or raise -X buffer.memory"
        )));
    }
    Ok(())
}

async fn produce(conn: &Conn, a: PerfProduceArgs) -> CmdResult {
    if a.records == 0 {
        return Err(Failure::Usage("--records must be at least 1".into()));
    }
    check_record_size(conn, a.record_size)?;
    let transport = conn.connected().await?;
    let writer = conn.writer(transport)?.build()?;
    // One payload, shared by every record (a Bytes clone is a reference count).
    let payload = Bytes::from(
        (0..a.record_size)
            .map(|i| b'a' + (i % 26) as u8)
            .collect::<Vec<_>>(),
    );
    let progress = Progress::new("records");
    // Outcomes are awaited in send order by a second task, which stamps each latency.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, kafkit::DeliveryFuture)>();
    let bar = progress.clone();
    let records = a.records;
    let waiter = tokio::spawn(async move {
        let mut lat: Vec<u32> = Vec::with_capacity(usize::try_from(records).unwrap_or(0));
        let mut failed = 0u64;
        let mut first_error = None;
        while let Some((sent, fut)) = rx.recv().await {
            match fut.await {
                Ok(_) => {
                    let us = sent.elapsed().as_micros();
                    lat.push(u32::try_from(us).unwrap_or(u32::MAX));
                    bar.inc(1);
                }
                Err(e) => {
                    failed += 1;
                    first_error.get_or_insert_with(|| crate::conn::describe_produce(&e));
                }
            }
        }
        (lat, failed, first_error)
    });
    let start = Instant::now();
    for i in 0..a.records {
        if let Some(rate) = a.throughput.filter(|r| *r > 0) {
            let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        // Lent, not owned: the writer copies the payload into its batch either way, and a
        // `ProducerRecord` would cost a topic name and a reference count per record.
        let fut = writer
            .send_ref(ProducerRecordRef::new(&a.topic, &payload))
            .await
            .map_err(|e| {
                Failure::Error(format!(
                    "cannot produce: {}",
                    crate::conn::describe_produce(&e)
                ))
            })?;
        if tx.send((Instant::now(), fut)).is_err() {
            break;
        }
    }
    drop(tx);
    writer
        .flush()
        .await
        .map_err(|e| Failure::Error(format!("flush: {e}")))?;
    let (mut lat, failed, first_error) = waiter
        .await
        .map_err(|e| Failure::Error(format!("latency task: {e}")))?;
    let elapsed = start.elapsed();
    progress.finish();
    let stats = writer.stats();
    let _ = writer.close(Duration::from_secs(30)).await;
    lat.sort_unstable();
    let ok = lat.len() as u64;
    let secs = elapsed.as_secs_f64().max(1e-9);
    let bytes = ok as f64 * a.record_size as f64;
    let (p50, p99, p999, max) = (
        quantile(&lat, 0.5),
        quantile(&lat, 0.99),
        quantile(&lat, 0.999),
        lat.last().copied().unwrap_or(0),
    );
    if a.json {
        println!(
            "{}",
            json!({
                "records": ok, "failed": failed, "seconds": secs,
                "records_per_sec": ok as f64 / secs, "mb_per_sec": bytes / secs / 1e6,
                "latency_ms": {"p50": ms(p50), "p99": ms(p99), "p999": ms(p999), "max": ms(max)},
                "produce_requests": stats.produce_requests.values().sum::<u64>(),
                "batches": stats.batches, "batch_records_avg": stats.batch_records_avg,
            })
        );
    } else {
        println!(
            "{ok} records sent in {secs:.2} s: {:.0} records/s, {:.2} MB/s; latency ms p50 {:.2}, \
             p99 {:.2}, p999 {:.2}, max {:.2}; {} Produce requests, {:.1} records per batch",
            ok as f64 / secs,
            bytes / secs / 1e6,
            ms(p50),
            ms(p99),
            ms(p999),
            ms(max),
            stats.produce_requests.values().sum::<u64>(),
            stats.batch_records_avg
        );
    }
    if failed > 0 {
        return Err(Failure::Error(format!(
            "{failed} records failed; the first: {}",
            first_error.unwrap_or_default()
        )));
    }
    Ok(())
}

async fn consume(conn: &Conn, a: PerfConsumeArgs) -> CmdResult {
    let transport = conn.transport()?;
    let admin = Client::new(transport.clone()).with_timeout(conn.timeout);
    let mut d = admin.describe_topics(&[a.topic.as_str()], false).await?;
    let desc = match d.pop() {
        Some((_, d)) => d.map_err(|e| Failure::Error(format!("topic {}: {e}", a.topic)))?,
        None => return Err(Failure::Error(format!("topic {}: no answer", a.topic))),
    };
    let reader = conn.reader(transport)?.build()?;
    let parts: Vec<i32> = desc.partitions.iter().map(|p| p.partition).collect();
    reader.assign(
        parts
            .iter()
            .map(|p| (a.topic.as_str(), *p, StartOffset::Earliest))
            .collect::<Vec<_>>(),
    )?;
    let progress = Progress::new("records");
    let limit = a.records.unwrap_or(u64::MAX);
    let (mut n, mut bytes) = (0u64, 0u64);
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let at_end = |reader: &kafkit::Reader| {
        a.records.is_none()
            && parts
                .iter()
                .all(|p| reader.lag(&a.topic, *p).is_some_and(|l| l <= 0))
    };
    while n < limit && !at_end(&reader) {
        let batch = tokio::select! {
            b = reader.next_batch() => b?,
            _ = tick.tick() => continue,
        };
        // Only the records asked for are counted (a batch may hold more).
        for part in &batch {
            let take = usize::try_from(limit - n).unwrap_or(usize::MAX);
            for r in part.records.iter().take(take) {
                n += 1;
                bytes += r.value.as_ref().map_or(0, |v| v.len() as u64)
                    + r.key.as_ref().map_or(0, |k| k.len() as u64);
                progress.inc(1);
            }
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    progress.finish();
    let fetches: u64 = reader.stats().fetch_requests.values().sum();
    reader.close();
    if a.json {
        println!(
            "{}",
            json!({
                "records": n, "bytes": bytes, "seconds": secs,
                "records_per_sec": n as f64 / secs, "mb_per_sec": bytes as f64 / secs / 1e6,
                "fetch_requests": fetches,
            })
        );
    } else {
        println!(
            "{n} records ({:.2} MB) read in {secs:.2} s: {:.0} records/s, {:.2} MB/s, {fetches} Fetch requests",
            bytes as f64 / 1e6,
            n as f64 / secs,
            bytes as f64 / secs / 1e6
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_pick_the_rank() {
        let v: Vec<u32> = (1..=1000).collect();
        assert_eq!(quantile(&v, 0.5), 500);
        assert_eq!(quantile(&v, 0.99), 990);
        assert_eq!(quantile(&v, 0.999), 999);
        assert_eq!(quantile(&[], 0.5), 0);
        assert_eq!(quantile(&[7], 0.999), 7);
    }
}
