//! `cargo xtask soak` and `cargo xtask capture` run this program (docs/reliability.md):
//!
//! - `reliability soak [--records N] [--durable-records N] [--mock-records N]
//!   [--kafka-records N] [--faults N]`: the soak run of `integration_tests::soak` (a count of 0
//!   skips its phase; the Kafka phase runs on the three-node cluster named by
//!   `KAFKIT_KAFKA3_BOOTSTRAP` / `KAFKIT_KAFKA3_STATE`, which `cargo xtask soak` starts); prints
//!   its table and fails when a phase failed;
//! - `reliability capture --out DIR`: see `integration_tests::capture`.

use std::process::ExitCode;

use integration_tests::kafka_cluster::KafkaCluster;
use integration_tests::soak::{Options, Storage, kafka_phase, mock_phase, table, tansu_phase};

fn usage() -> ExitCode {
    eprintln!(
        "usage: reliability soak [--records N] [--durable-records N] [--mock-records N] \
         [--kafka-records N] [--faults N]\n       reliability capture --out DIR"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    match args.first().map(String::as_str) {
        Some("soak") => rt.block_on(soak(&args[1..])),
        Some("capture") => match args.get(1..) {
            Some([flag, out]) if flag == "--out" => rt.block_on(capture(std::path::Path::new(out))),
            _ => usage(),
        },
        _ => usage(),
    }
}

fn number(args: &[String], i: usize) -> Option<u64> {
    args.get(i + 1)?.replace('_', "").parse().ok()
}

async fn soak(args: &[String]) -> ExitCode {
    let (mut records, mut durable, mut mock, mut kafka, mut faults) =
        (None, None, None, None, None);
    let mut i = 0;
    while i < args.len() {
        let slot = match args[i].as_str() {
            "--records" => &mut records,
            "--durable-records" => &mut durable,
            "--mock-records" => &mut mock,
            "--kafka-records" => &mut kafka,
            "--faults" => &mut faults,
            _ => return usage(),
        };
        let Some(n) = number(args, i) else {
            return usage();
        };
        *slot = Some(n);
        i += 2;
    }
    let mut opts = records.map_or_else(Options::full, Options::with_records);
    opts.durable_records = durable.unwrap_or(opts.durable_records);
    opts.mock_records = mock.unwrap_or(opts.mock_records);
    opts.kafka_records = kafka.unwrap_or(opts.kafka_records);
    if let Some(n) = faults {
        opts.faults = usize::try_from(n).unwrap_or(usize::MAX);
    }
    let Some(bin) = integration_tests::sqlite_tansu_bin() else {
        return ExitCode::FAILURE;
    };
    println!(
        "soak: {} records on tansu (memory), {} on tansu (SQLite, {}), {} on the mock cluster, \
         {} on Apache Kafka (3 nodes); {} faults per phase, {} members",
        opts.records,
        opts.durable_records,
        bin.display(),
        opts.mock_records,
        opts.kafka_records,
        opts.faults,
        opts.members
    );
    let mut reports = Vec::new();
    let phases = [
        (opts.records, 0),
        (opts.durable_records, 1),
        (opts.mock_records, 2),
        (opts.kafka_records, 3),
    ];
    for (n, which) in phases {
        if n == 0 {
            continue;
        }
        let report = match which {
            0 => tansu_phase(&Storage::Memory, &opts).await,
            1 => tansu_phase(&Storage::Sqlite(bin.clone()), &opts).await,
            2 => mock_phase(&opts).await,
            _ => kafka_phase(&KafkaCluster::acquire().await, &opts).await,
        };
        reports.push(report);
        println!("{}", table(&reports));
    }
    let mut ok = true;
    for r in &reports {
        for f in &r.failures {
            eprintln!("soak: {}: FAILED: {f}", r.name);
            ok = false;
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn capture(out: &std::path::Path) -> ExitCode {
    match integration_tests::capture::run(out).await {
        Ok(w) => {
            println!(
                "capture: {} frames recorded; seed files written under {}:",
                w.frames,
                out.display()
            );
            println!("| target | new | already there |\n|---|---:|---:|");
            for (t, (new, old)) in &w.targets {
                println!("| {t} | {new} | {old} |");
            }
            println!(
                "capture: {} requests and responses decode back, {} do not",
                w.decoded.0, w.decoded.1
            );
            if w.targets.len() < 3 {
                eprintln!("capture: expected seeds for messages, records and conn_frames");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("capture: {e}");
            ExitCode::FAILURE
        }
    }
}
