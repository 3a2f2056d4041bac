//! `kafkit-bench meter`: what kafkit's metrics (cargo feature `metrics`, docs/observability.md)
//! cost the Writer and the Reader per record, measured in one run on librdkafka's mock
//! cluster (3 brokers, in this process). Three modes, each a child process of this one:
//!
//! - `off`: the program built without the feature (`--baseline PATH`): the recording calls
//!   are compiled out;
//! - `on`: this program (built with `--features metrics`), no recorder installed: the calls run
//!   against the facade's no-op recorder;
//! - `prometheus`: this program with `--prometheus`: `metrics-exporter-prometheus`'s recorder
//!   installed, its upkeep run every 5 s, as an application would.
//!
//! Each round runs the producer (`--records` records to a topic of `--partitions` partitions,
//! one topic per mode written again every round, the producer bench's settings) and then the consumer (one topic filled once, read
//! whole from the earliest offset) in every mode, the modes' order rotated per round so that
//! none always runs first. The table gives each mode's medians over the rounds: CPU ns per
//! record and records per second, with the CPU against the `off` mode (or `on` without a
//! baseline).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

use crate::consumer::{FetchSettings, ReadWorkload, median};
use crate::{RunResult, Settings, Workload};

/// Options of `meter`.
#[derive(Args, Debug)]
pub struct MeterArgs {
    /// Rounds; each runs every mode once for each bench, in an order rotated per round.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Records per producer run, and in the consumer's topic.
    #[arg(long, default_value_t = 500_000)]
    pub records: u64,
    /// Partitions of each topic (16 per mock broker by default).
    #[arg(long, default_value_t = 48)]
    pub partitions: i32,
    /// This program built without kafkit's `metrics` feature: its runs are the `off` mode.
    /// Without it the `off` mode is left out.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Benches to run (default: both).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub benches: Vec<Bench>,
    #[command(flatten)]
    pub settings: Settings,
    #[command(flatten)]
    pub fetch: FetchSettings,
}

/// One of the two benches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Bench {
    /// The Writer (`client --client ours`).
    Producer,
    /// The Reader (`read --client ours`).
    Consumer,
}

/// How a run records metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Off,
    On,
    Prometheus,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Off => "off (feature not built)",
            Mode::On => "on, no recorder",
            Mode::Prometheus => "on, Prometheus recorder",
        }
    }
}

/// One run's outcome.
struct Sample {
    bench: Bench,
    mode: Mode,
    result: RunResult,
}

/// Runs the rounds and prints the table. Ok(false) when a run failed or lost records.
pub fn run(args: &MeterArgs) -> Result<bool, String> {
    if args.rounds == 0 || args.records == 0 || args.partitions <= 0 {
        return Err("--rounds, --records and --partitions must be positive".into());
    }
    let own = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let mut modes = vec![Mode::On, Mode::Prometheus];
    if args.baseline.is_some() {
        modes.insert(0, Mode::Off);
    }
    let benches = if args.benches.is_empty() {
        vec![Bench::Producer, Bench::Consumer]
    } else {
        args.benches.clone()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    let mock: MockCluster<'static, DefaultProducerContext> =
        MockCluster::new(3).map_err(|e| format!("mock cluster: {e}"))?;
    let bootstrap = mock.bootstrap_servers();

    // The consumer's topic, filled once.
    let read_topic = format!("bench-meter-read-{}", std::process::id());
    if benches.contains(&Bench::Consumer) {
        crate::create_topic(
            &runtime,
            Some(&mock),
            &bootstrap,
            &read_topic,
            args.partitions,
            1,
        )?;
        eprintln!(
            "kafkit-bench meter: filling {read_topic} with {} records",
            args.records
        );
        runtime.block_on(crate::consumer::fill(
            &bootstrap,
            &read_topic,
            args.partitions,
            args.records,
            args.settings.value_size,
            Duration::from_millis(5),
            1_000_000,
        ))?;
    }

    let mut samples = Vec::new();
    let mut ok = true;
    for round in 0..args.rounds {
        let mut order = modes.clone();
        order.rotate_left(round % modes.len());
        for &bench in &benches {
            for &mode in &order {
                let exe = match mode {
                    Mode::Off => args.baseline.as_deref().unwrap_or(&own),
                    Mode::On | Mode::Prometheus => &own,
                };
                let mut child: Vec<String> = match bench {
                    Bench::Producer => {
                        // One topic per mode, written again each round: the mock keeps at
                        // most 5 MiB per partition, so memory stays bounded over any number
                        // of rounds.
                        let topic = format!("bench-meter-write-{}-{mode:?}", std::process::id());
                        if round == 0 {
                            crate::create_topic(
                                &runtime,
                                Some(&mock),
                                &bootstrap,
                                &topic,
                                args.partitions,
                                1,
                            )?;
                        }
                        let w = Workload {
                            bootstrap: bootstrap.clone(),
                            topic,
                            partitions: args.partitions,
                            records: args.records,
                            txn_records: 0,
                            tasks: 1,
                            settings: args.settings.clone(),
                        };
                        let mut a = vec!["client".to_string(), "--client".into(), "ours".into()];
                        a.extend(w.to_args());
                        a
                    }
                    Bench::Consumer => {
                        let w = ReadWorkload {
                            bootstrap: bootstrap.clone(),
                            topic: read_topic.clone(),
                            partitions: args.partitions,
                            records: args.records,
                            value_size: args.settings.value_size,
                            tasks: 1,
                            settings: args.fetch.clone(),
                        };
                        let mut a = vec!["read".to_string(), "--client".into(), "ours".into()];
                        a.extend(w.to_args());
                        a
                    }
                };
                if mode == Mode::Prometheus {
                    child.push("--prometheus".into());
                }
                let load = crate::consumer::load_now();
                match run_exe(exe, &child) {
                    Ok(r) if r.failed == 0 && r.delivered == args.records => {
                        let (ns, rps) = rates(&r);
                        eprintln!(
                            "kafkit-bench meter: round {} / {bench:?} / {}: {ns:.0} CPU ns/record, {rps:.0} records/s (load {load:.1})",
                            round + 1,
                            mode.name()
                        );
                        samples.push(Sample {
                            bench,
                            mode,
                            result: r,
                        });
                    }
                    Ok(r) => {
                        ok = false;
                        eprintln!(
                            "kafkit-bench meter: {bench:?} / {}: {} of {} records, {} failed: {}",
                            mode.name(),
                            r.delivered,
                            args.records,
                            r.failed,
                            r.first_error.unwrap_or_default()
                        );
                    }
                    Err(e) => {
                        ok = false;
                        eprintln!("kafkit-bench meter: {bench:?} / {}: {e}", mode.name());
                    }
                }
            }
        }
    }
    print_table(args, &benches, &modes, &samples);
    Ok(ok)
}

/// CPU ns per record and records per second of a run.
fn rates(r: &RunResult) -> (f64, f64) {
    let cpu = (r.cpu.user + r.cpu.system).as_secs_f64();
    let records = r.delivered.max(1) as f64;
    (
        cpu * 1e9 / records,
        records / r.wall.as_secs_f64().max(1e-9),
    )
}

fn print_table(args: &MeterArgs, benches: &[Bench], modes: &[Mode], samples: &[Sample]) {
    println!(
        "{} rounds, {} records of {} bytes, {} partitions on the mock cluster (3 brokers); medians\n",
        args.rounds, args.records, args.settings.value_size, args.partitions
    );
    println!(
        "| bench | metrics | runs | CPU ns / record | records/s | CPU vs {} |",
        modes[0].name()
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    for &bench in benches {
        let mut base = None;
        for &mode in modes {
            let (mut cpu, mut rps): (Vec<f64>, Vec<f64>) = samples
                .iter()
                .filter(|s| s.bench == bench && s.mode == mode)
                .map(|s| rates(&s.result))
                .unzip();
            let n = cpu.len();
            let (cpu, rps) = (median(&mut cpu), median(&mut rps));
            let base = *base.get_or_insert(cpu);
            println!(
                "| {} | {} | {n} | {cpu:.0} | {rps:.0} | {:+.1} % |",
                match bench {
                    Bench::Producer => "producer",
                    Bench::Consumer => "consumer",
                },
                mode.name(),
                (cpu / base - 1.0) * 100.0
            );
        }
    }
}

/// Runs `exe` with `args` and reads its RESULT line; under `KAFKIT_BENCH_CHILD_WRAPPER` when
/// set (`wrapper exe args...`, say a script running `perf record`), as the other benches' runs.
fn run_exe(exe: &Path, args: &[String]) -> Result<RunResult, String> {
    let line = crate::exe_result_line(exe, &exe.display().to_string(), args)?;
    RunResult::parse(&line)
}

/// The installed recorder's handle (`--prometheus`).
#[cfg(feature = "metrics")]
static PROMETHEUS: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
    std::sync::OnceLock::new();

/// With `--prometheus`, a line for stderr after a run (outside its measured span): how many
/// series the scrape holds and the messages it counted sent and consumed, showing that the
/// recorder did record.
pub fn scrape_summary() -> Option<String> {
    #[cfg(feature = "metrics")]
    if let Some(handle) = PROMETHEUS.get() {
        let text = handle.render();
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty());
        let (mut series, mut sent, mut consumed) = (0, 0.0, 0.0);
        for line in samples {
            series += 1;
            let value = line
                .rsplit_once(' ')
                .and_then(|(_, v)| v.parse::<f64>().ok())
                .unwrap_or(0.0);
            if line.starts_with("messaging_client_sent_messages{") {
                sent += value;
            } else if line.starts_with("messaging_client_consumed_messages{") {
                consumed += value;
            }
        }
        return Some(format!(
            "kafkit-bench: Prometheus scrape after the run: {series} samples, {sent} messages sent, {consumed} consumed"
        ));
    }
    None
}

/// `--prometheus`: installs `metrics-exporter-prometheus`'s recorder for this process, with a
/// thread that runs its upkeep every 5 s (as an application must, see the exporter's
/// `install_recorder`).
///
/// Errors: the program was built without the `metrics` feature, or a recorder is installed.
pub fn install_prometheus() -> Result<(), String> {
    #[cfg(feature = "metrics")]
    {
        let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
            .install_recorder()
            .map_err(|e| format!("Prometheus recorder: {e}"))?;
        kafkit::meter::describe_metrics();
        let upkeep = handle.clone();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(5));
                upkeep.run_upkeep();
            }
        });
        let _ = PROMETHEUS.set(handle);
        Ok(())
    }
    #[cfg(not(feature = "metrics"))]
    Err("--prometheus: kafkit-bench was built without its `metrics` feature".into())
}
