//! A work queue with a share group (KIP-932, Apache Kafka 4.2 and later): 100 jobs written to
//! `kafkit-example-jobs`, and two [`ShareReader`] workers of the share group
//! `kafkit-example-workers` sharing them. Each record goes to one worker at a time; a worker
//! acknowledges each job: Accept when done, Release when it could not do it now (the job goes
//! back to the group at once and comes again, its delivery count one higher). Here every
//! tenth job fails on its first delivery and is released. The workers stop once every job of
//! this run was accepted, and close (leaving the group).
//!
//! ```sh
//! cargo xtask broker start   # Apache Kafka 4.4 on 127.0.0.1:19092 (tansu has no share groups)
//! cargo run -p kafkit-examples --example share
//! ```

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafkit::admin::{AlterConfigOp, ConfigResource, ConfigResourceType, NewTopic};
use kafkit::{
    AcknowledgeType, AcknowledgementMode, Client, ProducerRecord, ShareReader, Transport, Writer,
};

const TOPIC: &str = "kafkit-example-jobs";
const GROUP: &str = "kafkit-example-workers";
const JOBS: usize = 100;

#[tokio::main]
async fn main() -> ExitCode {
    kafkit_examples::exit(run().await)
}

async fn run() -> Result<(), kafkit::Error> {
    let transport = Transport::builder(kafkit_examples::bootstrap()).build()?;
    let admin = Client::new(transport.clone());
    kafkit_examples::ensure_topics(&admin, &[NewTopic::new(TOPIC, 3, 1)]).await?;
    // A new share group starts at the end of the log (`share.auto.offset.reset=latest`); this
    // one starts at the beginning, so the workers see the jobs written before they joined.
    let group = ConfigResource::new(ConfigResourceType::Group, GROUP);
    let set = AlterConfigOp::set("share.auto.offset.reset", "earliest");
    for (_, r) in admin
        .incremental_alter_configs(&[(group, vec![set])], false)
        .await?
    {
        r?;
    }

    // The jobs of this run carry its id, so a rerun counts its own.
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let writer = Writer::builder(transport.clone()).build()?;
    let jobs: Vec<ProducerRecord> = (0..JOBS)
        .map(|i| ProducerRecord::new(TOPIC, format!("{run}:{i}")).key(i.to_string()))
        .collect();
    writer.write(jobs).await?;
    writer.close(Duration::from_secs(10)).await?;
    println!("wrote {JOBS} jobs of run {run}");

    let done: Arc<Mutex<BTreeSet<usize>>> = Arc::default();
    let workers: Vec<_> = (1..=2)
        .map(|n| tokio::spawn(work(n, transport.clone(), run, done.clone())))
        .collect();
    let mut released = 0;
    for w in workers {
        released += w
            .await
            .map_err(|e| kafkit::Error::Protocol(e.to_string()))??;
    }
    let accepted = done.lock().map_or(0, |d| d.len());
    println!("accepted {accepted} of {JOBS} jobs, {released} released and delivered again");
    Ok(())
}

/// One worker: polls jobs, accepts them (releasing every tenth on its first delivery), until
/// every job of `run` is done. Returns how many jobs it released.
async fn work(
    n: usize,
    transport: Transport,
    run: u128,
    done: Arc<Mutex<BTreeSet<usize>>>,
) -> Result<usize, kafkit::Error> {
    let mut worker = ShareReader::builder(transport, GROUP)
        .topics([TOPIC])
        .acknowledgement_mode(AcknowledgementMode::Explicit)
        .build()?;
    let (mut accepted, mut released) = (0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(50);
    while done.lock().map_or(0, |d| d.len()) < JOBS && tokio::time::Instant::now() < deadline {
        for job in worker.poll(Duration::from_millis(500)).await? {
            let value = String::from_utf8_lossy(job.value.as_deref().unwrap_or_default());
            // A job of another run (an earlier one that stopped part way): accept it too.
            let mine = value
                .split_once(':')
                .filter(|(r, _)| *r == run.to_string())
                .and_then(|(_, i)| i.parse::<usize>().ok());
            let how = match mine {
                Some(i) if i % 10 == 0 && job.delivery_count() == 1 => AcknowledgeType::Release,
                _ => AcknowledgeType::Accept,
            };
            worker.acknowledge(&job, how)?;
            if how == AcknowledgeType::Release {
                released += 1;
            } else if let Some(i) = mine {
                accepted += 1;
                if let Ok(mut d) = done.lock() {
                    d.insert(i);
                }
            }
        }
        // Sends the acknowledgements now and reports each partition's outcome.
        for outcome in worker.commit(Duration::from_secs(10)).await? {
            if let Err(e) = outcome.result {
                eprintln!("worker {n}: {}/{}: {e}", outcome.topic, outcome.partition);
            }
        }
    }
    println!("worker {n}: accepted {accepted} jobs, released {released}");
    worker.close(Duration::from_secs(10)).await?;
    Ok(released)
}
