//! `Conn::write_multi`: batches for several topics and partitions in ONE Produce request to the
//! broker that leads them. The batches are split by partition leader first, so each leader gets
//! one request, whatever the number of topics and partitions.
//!
//! ```sh
//! cargo xtask broker start   # a local broker on 127.0.0.1:19092
//! cargo run -p kafkit-examples --example write_multi -- --bootstrap 127.0.0.1:19092
//! ```

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

use kafkit::admin::NewTopic;
use kafkit::{Acks, Bytes, Client, Compression, Dialer, ProduceBatches, Record, Transport};

const TOPICS: [&str; 2] = ["kafkit-example-clicks", "kafkit-example-views"];
const PARTITIONS: i32 = 4;

#[tokio::main]
async fn main() -> ExitCode {
    // An error is printed as a sentence (`error: ...`) and the exit status is 1.
    kafkit_examples::exit(run().await)
}

async fn run() -> Result<(), kafkit::Error> {
    let bootstrap = kafkit_examples::bootstrap();

    // The topics (made on the first run, with the admin client: it waits until their
    // partitions have leaders).
    let new: Vec<NewTopic> = TOPICS
        .iter()
        .map(|t| NewTopic::new(*t, PARTITIONS, 1))
        .collect();
    let admin = Client::new(Transport::builder(bootstrap.clone()).build()?);
    kafkit_examples::ensure_topics(&admin, &new).await?;

    // Every partition to write, until each has its batch: `write_multi` answers per
    // partition, and a retriable error (e.g. NOT_LEADER_OR_FOLLOWER while a new partition's
    // leader takes over) is sent again after fresh metadata. A few rounds at most.
    let dialer = Dialer::builder().client_id("kafkit-example").build();
    let conn = dialer.dial(&bootstrap[0]).await?;
    let mut pending: BTreeSet<(String, i32)> = TOPICS
        .iter()
        .flat_map(|t| (0..PARTITIONS).map(move |p| (t.to_string(), p)))
        .collect();
    for round in 1..=5 {
        if round > 1 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Where the partitions' leaders are.
        let metadata = conn.metadata(Some(&TOPICS)).await?;

        // One batch of 10 records per topic-partition, LZ4-compressed.
        let mut batches = ProduceBatches::new(Compression::Lz4);
        for (topic, partition) in &pending {
            let records: Vec<Record> = (0..10)
                .map(|i| Record::new(None, Some(Bytes::from(format!("{topic}/{partition}/{i}")))))
                .collect();
            batches.add_records(topic, *partition, &records)?;
        }

        // Split by leader: each leader gets ONE Produce request for all of its partitions.
        let (per_leader, unroutable) = batches.split_by_leader(&metadata);
        for p in &unroutable {
            println!(
                "{}/{}: no leader yet ({})",
                p.topic, p.partition, p.error_code
            );
        }
        for (leader, batches) in per_leader {
            let conn = dialer.dial(&leader.addr()).await?;
            let written = conn
                .write_multi(&batches, Acks::All, Duration::from_secs(30))
                .await?;
            conn.close();
            println!(
                "broker {} ({}): ONE Produce request, {} partitions",
                leader.node_id,
                leader.addr(),
                written.len()
            );
            for p in written {
                if p.error_code.is_ok() {
                    println!(
                        "  {}/{}: 10 records at base offset {}",
                        p.topic, p.partition, p.base_offset
                    );
                    pending.remove(&(p.topic.clone(), p.partition));
                } else if p.error_code.is_retriable() {
                    println!(
                        "  {}/{}: {}, sent again",
                        p.topic, p.partition, p.error_code
                    );
                } else {
                    return Err(kafkit::Error::InvalidArgument(format!(
                        "{}/{}: {}",
                        p.topic, p.partition, p.error_code
                    )));
                }
            }
        }
        if pending.is_empty() {
            break;
        }
    }
    conn.close();
    if !pending.is_empty() {
        return Err(kafkit::Error::InvalidArgument(format!(
            "{} partitions not written after 5 rounds",
            pending.len()
        )));
    }
    println!("wrote {} partitions", TOPICS.len() as i32 * PARTITIONS);
    Ok(())
}
