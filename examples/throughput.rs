//! Throughput settings (docs/guide/tuning.md): writes 50 000 records of 100 bytes to the 6
//! partitions of `kafkit-example-throughput` with a Writer tuned for throughput (a longer
//! linger, lz4 batches, a larger buffer), prints records/s and how few Produce requests carried
//! them (one per broker per linger window, whatever the number of partitions), then reads them
//! back with a Reader tuned the same way (fuller Fetch answers, a deeper prefetch, larger
//! polls) and prints its rate.
//!
//! ```sh
//! cargo run --release -p kafkit-examples --example throughput -- --bootstrap 127.0.0.1:19092
//! ```

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kafkit::admin::NewTopic;
use kafkit::{Client, Compression, ProducerRecord, Reader, StartOffset, Transport, Writer};

const TOPIC: &str = "kafkit-example-throughput";
const RECORDS: usize = 50_000;
const SIZE: usize = 100;

#[tokio::main]
async fn main() -> ExitCode {
    kafkit_examples::exit(run().await)
}

async fn run() -> Result<(), kafkit::Error> {
    let transport = Transport::builder(kafkit_examples::bootstrap()).build()?;
    let admin = Client::new(transport.clone());
    kafkit_examples::ensure_topics(&admin, &[NewTopic::new(TOPIC, 6, 1)]).await?;

    // Java: linger.ms=20, compression.type=lz4, buffer.memory=67108864.
    let writer = Writer::builder(transport.clone())
        .linger(Duration::from_millis(20))
        .compression(Compression::Lz4)
        .buffer_memory(64 * 1024 * 1024)
        .build()?;
    let payload = "x".repeat(SIZE);
    let started = Instant::now();
    // Hand every record over first, then wait for the outcomes: the writer batches what is
    // in its buffer, where waiting for each record would send one at a time.
    let mut pending = Vec::with_capacity(RECORDS);
    for i in 0..RECORDS {
        let record = ProducerRecord::new(TOPIC, payload.clone()).key(format!("key-{}", i % 1000));
        pending.push(writer.send(record).await?);
    }
    // The first offset of this run per partition, to read back from.
    let mut from: BTreeMap<i32, i64> = BTreeMap::new();
    for delivery in pending {
        let meta = delivery.await?;
        let first = from.entry(meta.partition).or_insert(meta.offset);
        *first = (*first).min(meta.offset);
    }
    let took = started.elapsed().as_secs_f64();
    let stats = writer.stats();
    writer.close(Duration::from_secs(10)).await?;
    let requests: u64 = stats.produce_requests.values().sum();
    println!(
        "wrote {RECORDS} records in {took:.2} s: {:.0} records/s, {:.1} MB/s",
        RECORDS as f64 / took,
        (RECORDS * SIZE) as f64 / took / 1e6
    );
    println!(
        "{} batches of {} partitions in {requests} Produce requests ({:.0} records per request)",
        stats.batches,
        from.len(),
        RECORDS as f64 / requests.max(1) as f64
    );

    // Java: fetch.min.bytes=65536, fetch.max.wait.ms=100, max.partition.fetch.bytes=4194304,
    // max.poll.records=5000; librdkafka: queued.max.messages.kbytes=131072.
    let reader = Reader::builder(transport)
        .fetch_min_bytes(64 * 1024)
        .fetch_max_wait(Duration::from_millis(100))
        .max_partition_fetch_bytes(4 * 1024 * 1024)
        .queued_max_bytes(128 * 1024 * 1024)
        .max_poll_records(5000)
        .build()?;
    reader.assign(from.iter().map(|(p, o)| (TOPIC, *p, StartOffset::At(*o))))?;
    let started = Instant::now();
    let mut read = 0;
    while read < RECORDS {
        let batch = tokio::time::timeout(Duration::from_secs(10), reader.next_batch())
            .await
            .map_err(|_| kafkit::Error::InvalidArgument("no record for 10 s".to_owned()))??;
        read += batch.iter().map(|p| p.records.len()).sum::<usize>();
    }
    let took = started.elapsed().as_secs_f64();
    let fetches: u64 = reader.stats().fetch_requests.values().sum();
    reader.close();
    println!(
        "read {read} records in {took:.2} s: {:.0} records/s, in {fetches} Fetch requests",
        read as f64 / took
    );
    Ok(())
}
