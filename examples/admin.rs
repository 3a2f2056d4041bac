//! The admin [`Client`]: create a topic, describe it and its configuration, commit offsets for a
//! consumer group and read the group's lag.
//!
//! ```sh
//! cargo xtask broker start   # a local broker on 127.0.0.1:19092
//! cargo run -p kafkit-examples --example admin -- --bootstrap 127.0.0.1:19092
//! ```

use std::process::ExitCode;
use std::time::Duration;

use kafkit::admin::{ConfigResource, NewTopic, OffsetAndMetadata};
use kafkit::{Client, IsolationLevel, ProducerRecord, Transport, Writer};

const TOPIC: &str = "kafkit-example-payments";
const GROUP: &str = "kafkit-example-billing";

#[tokio::main]
async fn main() -> ExitCode {
    // An error is printed as a sentence (`error: ...`) and the exit status is 1.
    kafkit_examples::exit(run().await)
}

async fn run() -> Result<(), kafkit::Error> {
    let transport = Transport::builder(kafkit_examples::bootstrap()).build()?;
    let admin = Client::new(transport.clone());

    // Create (per-topic results, so one failing topic never hides the others; see
    // `ensure_topics` in src/lib.rs), then wait until the partitions have leaders.
    let topic = NewTopic::new(TOPIC, 2, 1).config("retention.ms", "3600000");
    kafkit_examples::ensure_topics(&admin, &[topic]).await?;

    // Describe the topic and its configuration.
    for (name, description) in admin.describe_topics(&[TOPIC], false).await? {
        let description = description?;
        println!("{name} (id {}):", description.topic_id);
        for p in &description.partitions {
            let replicas: Vec<String> = p.replicas.iter().map(i32::to_string).collect();
            println!(
                "  partition {} leader {} replicas {}",
                p.partition,
                p.leader_id,
                replicas.join(",")
            );
        }
    }
    let resources = [ConfigResource::topic(TOPIC)];
    for (resource, entries) in admin
        .describe_configs(&resources, Default::default())
        .await?
    {
        let entries = entries?;
        let retention = entries.iter().find(|e| e.name == "retention.ms");
        println!(
            "{}: {} config entries, retention.ms = {}",
            resource.name,
            entries.len(),
            retention
                .and_then(|e| e.value.as_deref())
                .unwrap_or("(none)")
        );
    }

    // Some records, so that there is something to lag behind.
    let writer = Writer::builder(transport).build()?;
    let records = (0..20)
        .map(|i| ProducerRecord::new(TOPIC, format!("payment {i}")).key(format!("payer-{i}")))
        .collect();
    writer.write(records).await?;
    writer.close(Duration::from_secs(10)).await?;

    // Commit offset 5 on partition 0 for a group (as a consumer would), then read its lag.
    // (Against tansu, the test broker, end offsets come out low: its ListOffsets answers the last
    // batch's base offset + 1, e.g. 1 for one batch of 20 records, where Fetch's high watermark
    // says 20. A Kafka broker answers 20.)
    let commits = [(TOPIC.to_owned(), 0, OffsetAndMetadata::new(5))];
    for ((topic, partition), result) in admin.alter_consumer_group_offsets(GROUP, &commits).await? {
        result?;
        println!("{GROUP} committed {topic}/{partition} at 5");
    }
    for ((topic, partition), lag) in admin
        .consumer_group_lag(GROUP, IsolationLevel::ReadUncommitted)
        .await?
    {
        let lag = lag?;
        let committed = lag.committed.map_or("none".to_owned(), |o| o.to_string());
        let behind = lag.lag.map_or("-".to_owned(), |l| l.to_string());
        println!(
            "{GROUP} on {topic}/{partition}: committed {committed}, end {}, lag {behind}",
            lag.end_offset
        );
    }
    Ok(())
}
