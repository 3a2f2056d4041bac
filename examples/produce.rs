//! Produce with the [`Writer`]: one record, waiting for its offset, then a thousand keyed
//! records in one `write` call, batched per partition and sent as one Produce request per
//! broker per linger window.
//!
//! ```sh
//! cargo xtask broker start   # a local broker on 127.0.0.1:19092
//! cargo run -p kafkit-examples --example produce -- --bootstrap 127.0.0.1:19092
//! ```

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use kafkit::admin::NewTopic;
use kafkit::{Client, ProducerRecord, Transport, Writer};

/// The topic; the `consume` and `group` examples read it.
const TOPIC: &str = "kafkit-example-orders";

#[tokio::main]
async fn main() -> ExitCode {
    // An error is printed as a sentence (`error: ...`) and the exit status is 1.
    kafkit_examples::exit(run().await)
}

async fn run() -> Result<(), kafkit::Error> {
    let transport = Transport::builder(kafkit_examples::bootstrap()).build()?;

    // The topic: 3 partitions, made on the first run and found on the next ones.
    let admin = Client::new(transport.clone());
    kafkit_examples::ensure_topics(&admin, &[NewTopic::new(TOPIC, 3, 1)]).await?;

    let writer = Writer::builder(transport)
        .linger(Duration::from_millis(5))
        .build()?;

    // One record: `produce` sends it and waits until the broker has it.
    let record = ProducerRecord::new(TOPIC, "first order").key("customer-1");
    let ack = writer.produce(record).await?;
    println!(
        "1 record: {}/{} at offset {}",
        ack.topic, ack.partition, ack.offset
    );

    // Many records: a record's key chooses its partition (murmur2, as the Java client does), so
    // every order of one customer lands on the same partition.
    let records = (0..1000)
        .map(|i| {
            ProducerRecord::new(TOPIC, format!("order {i}")).key(format!("customer-{}", i % 10))
        })
        .collect();
    let acks = writer.write(records).await?;
    // Each partition's range of offsets (the Writer acknowledges each record).
    let mut per_partition: BTreeMap<i32, (i64, i64, u32)> = BTreeMap::new();
    for ack in &acks {
        let e = per_partition
            .entry(ack.partition)
            .or_insert((ack.offset, ack.offset, 0));
        e.0 = e.0.min(ack.offset);
        e.1 = e.1.max(ack.offset);
        e.2 += 1;
    }
    println!("{} records:", acks.len());
    for (partition, (first, last, n)) in per_partition {
        println!("  {TOPIC}/{partition}: {n} records at offsets {first} to {last}");
    }

    let stats = writer.stats();
    println!("{} records in {} batches", stats.records, stats.batches);
    for (broker, requests) in &stats.produce_requests {
        println!("  broker {broker}: {requests} Produce requests");
    }
    writer.close(Duration::from_secs(10)).await?;
    Ok(())
}
