//! Produce with the [`Writer`]: one record, waiting for its offset, then a thousand keyed
//! records in one `write` call, batched per partition and sent as one Produce request per
//! broker per linger window.
//!
//! ```sh
//! cargo xtask broker start   # a local broker on 127.0.0.1:19092
//! cargo run -p kafkit-examples --example produce -- --bootstrap 127.0.0.1:19092
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use kafkit::admin::NewTopic;
use kafkit::{Client, ErrorCode, ProducerRecord, Transport, Writer};

const TOPIC: &str = "kafkit-example-orders";

#[tokio::main]
async fn main() -> Result<(), kafkit::Error> {
    let transport = Transport::builder(kafkit_examples::bootstrap()).build()?;

    // The topic: 3 partitions, made on the first run and found on the next ones.
    let admin = Client::new(transport.clone());
    for (name, result) in admin
        .create_topics(&[NewTopic::new(TOPIC, 3, 1)], false)
        .await?
    {
        match result {
            Ok(created) => println!("created {name} ({} partitions)", created.num_partitions),
            Err(e) if e.error_code() == Some(ErrorCode::TOPIC_ALREADY_EXISTS) => {}
            Err(e) => return Err(e),
        }
    }

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
    let mut per_partition = BTreeMap::new();
    for ack in &acks {
        *per_partition.entry(ack.partition).or_insert(0) += 1;
    }
    println!("{} records: per partition {per_partition:?}", acks.len());

    let stats = writer.stats();
    println!(
        "{} records in {} batches, Produce requests per broker: {:?}",
        stats.records, stats.batches, stats.produce_requests
    );
    writer.close(Duration::from_secs(10)).await?;
    Ok(())
}
