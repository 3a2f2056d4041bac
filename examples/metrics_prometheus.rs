//! Metrics through the `metrics` facade, exported as Prometheus text: kafkit with the cargo
//! feature `metrics` records, the application installs the exporter
//! (`metrics-exporter-prometheus`) and decides how to serve it. This writes 100 records to the
//! topic `kafkit-example-metrics`, reads them back with a [`Reader`] (timing each record with a
//! [`ProcessMeter`]), closes both and prints the scrape: the conventions' metrics
//! (`messaging_client_*`, `messaging_process_duration`) and the transport's (`kafkit_*`,
//! per broker). docs/observability.md lists every name.
//!
//! A service would serve the text on `/metrics` instead of printing it: the exporter's
//! `http-listener` feature (`PrometheusBuilder::with_http_listener`) or its `handle.render()`
//! from the service's own HTTP route.
//!
//! ```toml
//! kafkit = { version = "0.1", features = ["metrics"] }
//! metrics-exporter-prometheus = { version = "0.18", default-features = false }
//! ```
//!
//! ```sh
//! cargo xtask broker start   # a local broker on 127.0.0.1:19092
//! cargo run -p kafkit-examples --example metrics_prometheus -- --bootstrap 127.0.0.1:19092
//! ```

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use kafkit::admin::NewTopic;
use kafkit::meter::ProcessMeter;
use kafkit::{Client, ProducerRecord, Reader, StartOffset, Transport, Writer};
use metrics_exporter_prometheus::PrometheusBuilder;

/// The topic (made on the first run; each run reads back only what it wrote).
const TOPIC: &str = "kafkit-example-metrics";
/// Records written and read.
const RECORDS: usize = 100;

#[tokio::main]
async fn main() -> ExitCode {
    // The recorder first: what kafkit records before it is installed goes nowhere.
    let handle = match PrometheusBuilder::new().install_recorder() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: cannot install the Prometheus recorder: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Descriptions and units (`# HELP` lines); optional.
    kafkit::meter::describe_metrics();
    let result = run().await;
    if result.is_ok() {
        println!("--- scrape ---");
        print!("{}", handle.render());
    }
    // An error is printed as a sentence (`error: ...`) and the exit status is 1.
    kafkit_examples::exit(result)
}

async fn run() -> Result<(), kafkit::Error> {
    let transport = Transport::builder(kafkit_examples::bootstrap()).build()?;
    let admin = Client::new(transport.clone());
    kafkit_examples::ensure_topics(&admin, &[NewTopic::new(TOPIC, 3, 1)]).await?;

    // Write: each record's offset tells where this run's records start per partition.
    let writer = Writer::builder(transport.clone())
        .linger(Duration::from_millis(5))
        .build()?;
    let records = (0..RECORDS)
        .map(|i| ProducerRecord::new(TOPIC, format!("reading {i}")).partition((i % 3) as i32))
        .collect();
    let acks = writer.write(records).await?;
    let mut from: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    for ack in &acks {
        let e = from
            .entry(ack.partition)
            .or_insert((ack.offset, ack.offset + 1));
        e.0 = e.0.min(ack.offset);
        e.1 = e.1.max(ack.offset + 1);
    }
    writer.close(Duration::from_secs(10)).await?;
    println!("wrote {} records", acks.len());

    // Read them back, from this run's first offset to its last, timing each record's
    // processing (`messaging.process.duration`): the meter looks its histogram up once.
    let reader = Reader::builder(transport.clone()).build()?;
    reader.assign(
        from.iter()
            .map(|(p, (first, _))| (TOPIC, *p, StartOffset::At(*first))),
    )?;
    let topic: Arc<str> = Arc::from(TOPIC);
    let meter = ProcessMeter::new(&topic, None);
    let mut left: BTreeMap<i32, i64> = from.iter().map(|(p, (_, end))| (*p, *end)).collect();
    let mut read = 0;
    while !left.is_empty() {
        let batch = tokio::time::timeout(Duration::from_secs(10), reader.next_batch())
            .await
            .map_err(|_| kafkit::Error::InvalidArgument("no record for 10 s".to_owned()))??;
        for part in batch {
            for record in &part.records {
                let _timer = meter.start();
                // The processing: here, only a check.
                if record.value.is_none() {
                    return Err(kafkit::Error::InvalidArgument(
                        "a record without value".into(),
                    ));
                }
                read += 1;
            }
            if left
                .get(&part.partition)
                .is_some_and(|end| part.next_offset >= *end)
            {
                left.remove(&part.partition);
            }
        }
    }
    reader.close();
    println!("read {read} records");
    // Closing the connections counts them as disconnects.
    transport.close();
    Ok(())
}
