//! rust-rdkafka's two most common programs, ported (docs/guide/from-rust-rdkafka.md): a
//! `FutureProducer` that awaits each delivery (`send(record, timeout).await`), then a
//! `StreamConsumer` in a group that reads with `recv()`, commits with
//! `commit_message(&m, CommitMode::Async)` and, at the end, `commit_consumer_state(Sync)`.
//!
//! The producer writes 10 keyed records of this run (their values name the run) to the 3
//! partitions of `kafkit-example-rdkafka`; the member of `kafkit-example-rdkafka-group` reads
//! until it has seen those 10 (a rerun finds the earlier runs' records committed), commits and
//! leaves.
//!
//! ```sh
//! cargo xtask broker start   # a local broker on 127.0.0.1:19092
//! cargo run -p kafkit-examples --example from_rdkafka -- --bootstrap 127.0.0.1:19092
//! ```

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kafkit::admin::NewTopic;
use kafkit::{AutoOffsetReset, Client, GroupReader, ProducerRecord, Transport, Writer};

const TOPIC: &str = "kafkit-example-rdkafka";
const GROUP: &str = "kafkit-example-rdkafka-group";
const RECORDS: usize = 10;

#[tokio::main]
async fn main() -> ExitCode {
    kafkit_examples::exit(run().await)
}

async fn run() -> Result<(), kafkit::Error> {
    // ClientConfig::new().set("bootstrap.servers", ...): the transport holds the connections
    // that the producer, the consumer and the admin client share.
    let transport = Transport::builder(kafkit_examples::bootstrap()).build()?;
    let admin = Client::new(transport.clone());
    kafkit_examples::ensure_topics(&admin, &[NewTopic::new(TOPIC, 3, 1)]).await?;
    let run_id = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());

    // FutureProducer: `producer.send(FutureRecord::to(TOPIC).key(k).payload(v), timeout).await`.
    // `Writer::send` hands the record over (waiting for buffer room, at most `max_block`) and
    // gives its delivery future; awaiting it right away is the FutureProducer way (one record
    // at a time: hand several over before awaiting for throughput, docs/guide/producing.md).
    let writer = Writer::builder(transport.clone()).build()?;
    let mut sent = BTreeSet::new();
    for i in 0..RECORDS {
        let value = format!("run {run_id} record {i}");
        let record = ProducerRecord::new(TOPIC, value.clone()).key(format!("key-{i}"));
        let delivered = writer.send(record).await?.await?;
        println!(
            "delivered {value:?} to partition {} at offset {}",
            delivered.partition, delivered.offset
        );
        sent.insert(value);
    }
    writer.close(Duration::from_secs(10)).await?;

    // StreamConsumer: "group.id", "enable.auto.commit": "false", "auto.offset.reset":
    // "earliest", `subscribe(&[TOPIC])`, then `recv().await` in a loop. A 10 s session: Apache
    // Kafka refuses one under its group.min.session.timeout.ms (6 s).
    let mut member = GroupReader::builder(transport, GROUP)
        .subscribe([TOPIC])
        .auto_offset_reset(AutoOffsetReset::Earliest)
        .enable_auto_commit(false)
        .session_timeout(Duration::from_secs(10))
        .build()?;
    let mut consumed = 0;
    while !sent.is_empty() {
        let Ok(next) = tokio::time::timeout(Duration::from_secs(30), member.next()).await else {
            eprintln!("no record for 30 s; {} of this run's not read", sent.len());
            break;
        };
        let Some(record) = next else { break };
        let record = record?;
        consumed += 1;
        let value = String::from_utf8_lossy(record.value.as_deref().unwrap_or_default());
        sent.remove(value.as_ref());
        // commit_message(&m, CommitMode::Async): the commit goes out, its outcome not awaited.
        drop(member.commit_async());
    }
    // commit_consumer_state(CommitMode::Sync), then leave the group (librdkafka's close).
    member.commit().await?;
    member.close().await;
    if !sent.is_empty() {
        return Err(kafkit::Error::Config(format!(
            "{} records of this run never came back",
            sent.len()
        )));
    }
    println!("consumed {consumed} records, this run's {RECORDS} among them; committed and left");
    Ok(())
}
