//! `Conn::write_multi`: batches for several topics and partitions in ONE Produce request to the
//! broker that leads them. The batches are split by partition leader first, so each leader gets
//! one request, whatever the number of topics and partitions.
//!
//! ```sh
//! cargo xtask broker start   # a local broker on 127.0.0.1:19092
//! cargo run -p kafkit-examples --example write_multi -- --bootstrap 127.0.0.1:19092
//! ```

use std::time::Duration;

use kafkit::admin::NewTopic;
use kafkit::{Acks, Bytes, Compression, Dialer, ErrorCode, ProduceBatches, Record};

const TOPICS: [&str; 2] = ["kafkit-example-clicks", "kafkit-example-views"];
const PARTITIONS: i32 = 4;

#[tokio::main]
async fn main() -> Result<(), kafkit::Error> {
    let bootstrap = kafkit_examples::bootstrap();
    let dialer = Dialer::builder().client_id("kafkit-example").build();
    let conn = dialer.dial(&bootstrap[0]).await?;

    // The topics (made on the first run), then where their partitions' leaders are.
    let new: Vec<NewTopic> = TOPICS
        .iter()
        .map(|t| NewTopic::new(*t, PARTITIONS, 1))
        .collect();
    for (name, result) in conn.create_topics(&new, false).await? {
        match result {
            Ok(_) => println!("created {name}"),
            Err(e) if e.error_code() == Some(ErrorCode::TOPIC_ALREADY_EXISTS) => {}
            Err(e) => return Err(e),
        }
    }
    let metadata = conn.metadata(Some(&TOPICS)).await?;

    // One batch of 10 records per topic-partition: 8 batches, LZ4-compressed.
    let mut batches = ProduceBatches::new(Compression::Lz4);
    for topic in TOPICS {
        for partition in 0..PARTITIONS {
            let records: Vec<Record> = (0..10)
                .map(|i| Record::new(None, Some(Bytes::from(format!("{topic}/{partition}/{i}")))))
                .collect();
            batches.add_records(topic, partition, &records)?;
        }
    }

    let (per_leader, unroutable) = batches.split_by_leader(&metadata);
    for p in &unroutable {
        println!("{}/{}: no leader ({})", p.topic, p.partition, p.error_code);
    }
    for (leader, batches) in per_leader {
        let conn = dialer.dial(&leader.addr()).await?;
        let written = conn
            .write_multi(&batches, Acks::All, Duration::from_secs(30))
            .await?;
        println!(
            "broker {} ({}): ONE Produce request, {} partitions",
            leader.node_id,
            leader.addr(),
            written.len()
        );
        for p in written {
            println!(
                "  {}/{}: {} at base offset {}",
                p.topic, p.partition, p.error_code, p.base_offset
            );
        }
        conn.close();
    }
    conn.close();
    Ok(())
}
