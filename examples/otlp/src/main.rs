//! kafkit's metrics (cargo feature `metrics`) exported with OpenTelemetry OTLP over
//! HTTP/protobuf: a [`metrics::Recorder`] that turns each `metrics` series into an OpenTelemetry
//! instrument and its labels into attributes ([`OtelRecorder`], about 150 lines an application
//! can copy), the SDK's periodic reader and the OTLP exporter. It writes 100 records to the topic
//! `kafkit-example-otlp`, reads them back, and shuts the meter provider down, which exports
//! what was recorded once more.
//!
//! ```sh
//! cd examples/otlp
//! cargo run -- --bootstrap 127.0.0.1:19092 --endpoint http://127.0.0.1:4318/v1/metrics
//! ```
//!
//! The endpoint is an OpenTelemetry Collector's OTLP/HTTP receiver (or any backend that takes
//! OTLP/HTTP: Prometheus with `--web.enable-otlp-receiver` at `/api/v1/otlp/v1/metrics`, ...).
//! kafkit's metric names are OpenTelemetry's own (`messaging.client.sent.messages`) and are
//! kept as they are, dots included.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafkit::{ProducerRecord, Reader, StartOffset, Transport, Writer};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, SharedString, Unit};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Meter, MeterProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::metrics::SdkMeterProvider;

const TOPIC: &str = "kafkit-example-otlp";
const RECORDS: usize = 100;

/// A `metrics` recorder over an OpenTelemetry [`Meter`]: one instrument per metric name (made
/// at its first series, with the unit and description `describe_*` gave), one handle per
/// series holding its attributes, so recording is one call into the SDK.
struct OtelRecorder {
    meter: Meter,
    /// Units and descriptions by metric name, from `describe_*`.
    described: Mutex<HashMap<String, (Option<Unit>, SharedString)>>,
    counters: Mutex<HashMap<String, opentelemetry::metrics::Counter<u64>>>,
    gauges: Mutex<HashMap<String, opentelemetry::metrics::Gauge<f64>>>,
    histograms: Mutex<HashMap<String, opentelemetry::metrics::Histogram<f64>>>,
}

/// OpenTelemetry's unit string (UCUM) for a `metrics` unit.
fn ucum(unit: Unit) -> &'static str {
    match unit {
        Unit::Seconds => "s",
        Unit::Milliseconds => "ms",
        Unit::Bytes => "By",
        Unit::Count => "1",
        _ => unit.as_canonical_label(),
    }
}

/// A series' labels as attributes.
fn attributes(key: &Key) -> Vec<KeyValue> {
    key.labels()
        .map(|l| KeyValue::new(l.key().to_owned(), l.value().to_owned()))
        .collect()
}

impl OtelRecorder {
    fn new(meter: Meter) -> OtelRecorder {
        OtelRecorder {
            meter,
            described: Mutex::default(),
            counters: Mutex::default(),
            gauges: Mutex::default(),
            histograms: Mutex::default(),
        }
    }

    /// The unit and description given for `name`, if any.
    fn described(&self, name: &str) -> (Option<&'static str>, String) {
        let described = self.described.lock().unwrap_or_else(|e| e.into_inner());
        match described.get(name) {
            Some((unit, text)) => (unit.map(ucum), text.to_string()),
            None => (None, String::new()),
        }
    }

    fn describe(&self, name: KeyName, unit: Option<Unit>, description: SharedString) {
        self.described
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.as_str().to_owned(), (unit, description));
    }
}

/// A counter series: the instrument and the series' attributes.
struct OtelCounter(opentelemetry::metrics::Counter<u64>, Vec<KeyValue>);

impl metrics::CounterFn for OtelCounter {
    fn increment(&self, value: u64) {
        self.0.add(value, &self.1);
    }
    fn absolute(&self, _: u64) {
        // OpenTelemetry's counters only add; kafkit never sets a counter's absolute value.
    }
}

/// A gauge series: the value kept here (the facade's gauges add and subtract, OpenTelemetry's
/// record a value).
struct OtelGauge(opentelemetry::metrics::Gauge<f64>, Vec<KeyValue>, AtomicU64);

impl OtelGauge {
    fn update(&self, f: impl Fn(f64) -> f64) {
        let mut now = 0.0;
        let _ = self
            .2
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |bits| {
                now = f(f64::from_bits(bits));
                Some(now.to_bits())
            });
        self.0.record(now, &self.1);
    }
}

impl metrics::GaugeFn for OtelGauge {
    fn increment(&self, value: f64) {
        self.update(|v| v + value);
    }
    fn decrement(&self, value: f64) {
        self.update(|v| v - value);
    }
    fn set(&self, value: f64) {
        self.update(|_| value);
    }
}

/// A histogram series.
struct OtelHistogram(opentelemetry::metrics::Histogram<f64>, Vec<KeyValue>);

impl metrics::HistogramFn for OtelHistogram {
    fn record(&self, value: f64) {
        self.0.record(value, &self.1);
    }
}

impl metrics::Recorder for OtelRecorder {
    fn describe_counter(&self, name: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(name, unit, description);
    }
    fn describe_gauge(&self, name: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(name, unit, description);
    }
    fn describe_histogram(&self, name: KeyName, unit: Option<Unit>, description: SharedString) {
        self.describe(name, unit, description);
    }

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let name = key.name().to_owned();
        let (unit, description) = self.described(&name);
        let instrument = self
            .counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.clone())
            .or_insert_with(|| {
                let b = self.meter.u64_counter(name).with_description(description);
                match unit {
                    Some(u) => b.with_unit(u).build(),
                    None => b.build(),
                }
            })
            .clone();
        Counter::from_arc(Arc::new(OtelCounter(instrument, attributes(key))))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let name = key.name().to_owned();
        let (unit, description) = self.described(&name);
        let instrument = self
            .gauges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.clone())
            .or_insert_with(|| {
                let b = self.meter.f64_gauge(name).with_description(description);
                match unit {
                    Some(u) => b.with_unit(u).build(),
                    None => b.build(),
                }
            })
            .clone();
        Gauge::from_arc(Arc::new(OtelGauge(
            instrument,
            attributes(key),
            AtomicU64::new(0f64.to_bits()),
        )))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let name = key.name().to_owned();
        let (unit, description) = self.described(&name);
        let instrument = self
            .histograms
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.clone())
            .or_insert_with(|| {
                let b = self.meter.f64_histogram(name).with_description(description);
                match unit {
                    Some(u) => b.with_unit(u).build(),
                    None => b.build(),
                }
            })
            .clone();
        Histogram::from_arc(Arc::new(OtelHistogram(instrument, attributes(key))))
    }
}

/// The value after `--name` on the command line, else `default`.
fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_owned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint = arg("--endpoint", "http://127.0.0.1:4318/v1/metrics");
    let bootstrap = arg("--bootstrap", "127.0.0.1:19092");

    // The SDK: OTLP over HTTP with protobuf bodies, exported every 5 s and at shutdown.
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_endpoint(&endpoint)
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(Duration::from_secs(5))
        .build()?;
    let provider = SdkMeterProvider::builder()
        .with_periodic_exporter(exporter)
        .build();
    // The bridge, installed as the process's recorder before kafkit records anything.
    metrics::set_global_recorder(OtelRecorder::new(provider.meter("kafkit")))?;
    kafkit::meter::describe_metrics();

    let result = run(&bootstrap).await;
    // Exports what was recorded, then stops the reader's thread.
    let shutdown = tokio::task::spawn_blocking(move || provider.shutdown()).await?;
    result?;
    shutdown?;
    println!("exported to {endpoint}");
    Ok(())
}

async fn run(bootstrap: &str) -> Result<(), kafkit::Error> {
    let transport = Transport::builder(bootstrap.split(',')).build()?;
    let admin = kafkit::Client::new(transport.clone());
    for (name, r) in admin
        .create_topics(&[kafkit::admin::NewTopic::new(TOPIC, 1, 1)], false)
        .await?
    {
        match r {
            Ok(_) => println!("created {name}"),
            Err(e) if e.error_code() == Some(kafkit::ErrorCode::TOPIC_ALREADY_EXISTS) => {}
            Err(e) => return Err(e),
        }
    }
    let writer = Writer::builder(transport.clone()).build()?;
    let records = (0..RECORDS)
        .map(|i| ProducerRecord::new(TOPIC, format!("reading {i}")).partition(0))
        .collect();
    let acks = writer.write(records).await?;
    writer.close(Duration::from_secs(10)).await?;
    let first = acks.iter().map(|a| a.offset).min().unwrap_or(0);
    let end = acks.iter().map(|a| a.offset + 1).max().unwrap_or(0);
    println!("wrote {} records", acks.len());

    let reader = Reader::builder(transport.clone()).build()?;
    reader.assign([(TOPIC, 0, StartOffset::At(first))])?;
    let mut read = 0;
    while read < RECORDS {
        let batch = tokio::time::timeout(Duration::from_secs(10), reader.next_batch())
            .await
            .map_err(|_| kafkit::Error::InvalidArgument("no record for 10 s".to_owned()))??;
        for part in batch {
            read += part.records.iter().filter(|r| r.offset < end).count();
        }
    }
    reader.close();
    transport.close();
    println!("read {read} records");
    Ok(())
}
