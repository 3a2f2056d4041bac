//! Read with the [`Reader`]: the partitions are chosen by hand (no consumer group), each read
//! from its earliest offset to the end it had when the example started, and the records are
//! printed (the first few of each partition, then a count). Run the `produce` example first:
//! this reads what it wrote.
//!
//! ```sh
//! cargo xtask broker start   # a local broker on 127.0.0.1:19092
//! cargo run -p kafkit-examples --example produce
//! cargo run -p kafkit-examples --example consume -- --bootstrap 127.0.0.1:19092
//! ```

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use kafkit::{Reader, StartOffset, Transport};

/// The `produce` example's topic.
const TOPIC: &str = "kafkit-example-orders";
/// Records printed per partition; the rest are counted.
const SHOWN: usize = 3;

#[tokio::main]
async fn main() -> ExitCode {
    // An error is printed as a sentence (`error: ...`) and the exit status is 1.
    kafkit_examples::exit(run().await)
}

async fn run() -> Result<(), kafkit::Error> {
    let transport = Transport::builder(kafkit_examples::bootstrap()).build()?;

    // The topic's partitions, from the metadata.
    let metadata = transport.metadata_for(&[TOPIC]).await?;
    let topic = metadata
        .topic(TOPIC)
        .filter(|t| t.error_code.is_ok())
        .ok_or_else(|| {
            kafkit::Error::InvalidArgument(format!(
                "topic {TOPIC} does not exist: run the produce example first"
            ))
        })?;
    let partitions: Vec<i32> = topic.partitions.iter().map(|p| p.partition).collect();

    // Assign every partition, from its earliest offset.
    let reader = Reader::builder(transport).build()?;
    reader.assign(
        partitions
            .iter()
            .map(|p| (TOPIC, *p, StartOffset::Earliest)),
    )?;
    let list: Vec<String> = partitions.iter().map(i32::to_string).collect();
    println!(
        "reading {TOPIC} partitions {} from the earliest offset",
        list.join(",")
    );

    // Read until every partition is at the end it had in its first Fetch answer (the high
    // watermark), waiting at most 10 s for a record.
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    let mut read: BTreeMap<i32, usize> = partitions.iter().map(|p| (*p, 0)).collect();
    loop {
        let batch = tokio::time::timeout(Duration::from_secs(10), reader.next_batch()).await;
        let Ok(batch) = batch else {
            return Err(kafkit::Error::InvalidArgument(
                "no record for 10 s before the end of the partitions".to_owned(),
            ));
        };
        for part in batch? {
            ends.entry(part.partition).or_insert(part.high_watermark);
            for record in &part.records {
                let n = read.entry(part.partition).or_insert(0);
                *n += 1;
                if *n <= SHOWN {
                    let key = record.key.as_deref().map(String::from_utf8_lossy);
                    let value = record.value.as_deref().map(String::from_utf8_lossy);
                    println!(
                        "{TOPIC}/{} @{}: {}={}",
                        part.partition,
                        record.offset,
                        key.as_deref().unwrap_or("(null)"),
                        value.as_deref().unwrap_or("(null)")
                    );
                }
            }
        }
        // A partition is done at its end; an empty one once its lag is known to be 0.
        let done = partitions.iter().all(|p| match ends.get(p) {
            Some(end) => reader
                .position(TOPIC, *p)
                .is_some_and(|pos| pos.offset >= *end),
            None => reader.lag(TOPIC, *p) == Some(0),
        });
        if done {
            break;
        }
    }
    reader.close();
    for (partition, n) in &read {
        println!("{TOPIC}/{partition}: {n} records");
    }
    println!("read {} records", read.values().sum::<usize>());
    Ok(())
}
