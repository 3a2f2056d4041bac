//! Consume-transform-produce, exactly once: a [`GroupTransactSession`] reads `words` as a
//! member of the group `kafkit-example-upper`, writes each word upper-cased to `WORDS`, and
//! commits the output and the input offsets in one transaction every 500 records or 100 ms.
//! A rebalance aborts the open transaction and the member rewinds to the committed offsets,
//! so a `read_committed` reader of `WORDS` sees each word once, whatever happens. Start two
//! or three of these at once and stop some to watch the partitions move; each stops 10 s
//! after its last commit (counted from its first assignment: a broker may hold a new
//! member's first join for a while, tansu about half the session timeout), commits what is
//! open and leaves the group, so the next run joins at once.
//!
//! ```sh
//! cargo xtask broker start   # a local broker on 127.0.0.1:19092
//! cargo run -p kafkit-examples --example transact -- --bootstrap 127.0.0.1:19092
//! ```
//!
//! Each instance needs its own transactional id (here from `--id N`, default 1); reuse it
//! when restarting a crashed instance, so the new one fences the old one and aborts the
//! transaction it left open.

use std::process::ExitCode;
use std::time::Duration;

use kafkit::admin::NewTopic;
use kafkit::transact::{AbortReason, GroupTransactSession, TransactionOutcome};
use kafkit::{
    AutoOffsetReset, Client, ConsumerRecord, GroupReader, ProducerRecord, Reader, Transport, Writer,
};

const INPUT: &str = "kafkit-example-words";
const OUTPUT: &str = "kafkit-example-WORDS";
const GROUP: &str = "kafkit-example-upper";

/// How long the example runs on after its last commit.
const IDLE: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> ExitCode {
    // An error is printed as a sentence (`error: ...`) and the exit status is 1.
    kafkit_examples::exit(run().await)
}

async fn run() -> Result<(), kafkit::Error> {
    let transport = Transport::builder(kafkit_examples::bootstrap()).build()?;
    let args: Vec<String> = std::env::args().collect();
    let id = args
        .iter()
        .position(|a| a == "--id")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| "1".to_owned());

    // The topics (made on the first run), and some words to work on.
    let admin = Client::new(transport.clone());
    kafkit_examples::ensure_topics(
        &admin,
        &[NewTopic::new(INPUT, 3, 1), NewTopic::new(OUTPUT, 3, 1)],
    )
    .await?;
    let words = Writer::builder(transport.clone()).build()?;
    let mut written = Vec::with_capacity(1000);
    for i in 0..1000 {
        let record = ProducerRecord::new(INPUT, format!("word-{i}")).key(format!("{i}"));
        written.push(words.send(record).await?);
    }
    for delivery in written {
        delivery.await?;
    }
    words.close(Duration::from_secs(10)).await?;
    println!("wrote 1000 words to {INPUT}");

    // The member (auto-commit and the isolation level are the session's business) and the
    // transactional writer. A 10 s session (Java's default is 45 s): tansu, the test broker,
    // holds a new member's first join about half the session timeout; Apache Kafka refuses
    // a session under its `group.min.session.timeout.ms` (6 s).
    let member = GroupReader::builder(transport.clone(), GROUP)
        .subscribe([INPUT])
        .session_timeout(Duration::from_secs(10))
        .require_stable_offsets(true)
        .reader(Reader::builder(transport.clone()).auto_offset_reset(AutoOffsetReset::Earliest));
    let writer = Writer::builder(transport)
        .transactional_id(format!("{GROUP}-{id}"))
        .linger(Duration::from_millis(5))
        .build()?;
    let mut session = GroupTransactSession::builder(member, writer)
        .commit_every(500)
        .commit_interval(Duration::from_millis(100))
        .build()?;

    // The transform: one output record per input record, keyed as the input.
    let mut upper = |r: &ConsumerRecord, out: &mut Vec<ProducerRecord>| {
        let value = r.value.as_deref().unwrap_or_default().to_ascii_uppercase();
        let mut record = ProducerRecord::new(OUTPUT, value);
        if let Some(key) = &r.key {
            record = record.key(key.clone());
        }
        out.push(record);
    };

    // Rounds until IDLE passes without a commit. The clock starts at the first assignment:
    // until then the member is joining, and the rounds only drive the join.
    println!("joining group {GROUP}, waiting for an assignment...");
    let mut idle: Option<tokio::time::Instant> = None;
    loop {
        let outcome = session.process_once(&mut upper).await?;
        if idle.is_none()
            && let Some(took) = session.member().stats().first_assignment
        {
            let owned = partitions(&session.member().assignment());
            println!("assigned after {:.1} s: {owned}", took.as_secs_f64());
            idle = Some(tokio::time::Instant::now());
        }
        match outcome {
            Some(TransactionOutcome::Committed {
                records,
                partitions,
            }) => {
                println!("committed {records} records of {partitions} partitions");
                idle = Some(tokio::time::Instant::now());
            }
            Some(TransactionOutcome::Aborted { records, reason }) => {
                let why = match reason {
                    AbortReason::Rebalance => "a rebalance".to_owned(),
                    AbortReason::Error(e) => e.to_string(),
                    AbortReason::Interrupted => "an interrupted round".to_owned(),
                    _ => "another reason".to_owned(),
                };
                println!("aborted {records} records ({why}); rewound to the committed offsets");
                // The assignment may have changed: say it again.
                println!("assigned: {}", partitions(&session.member().assignment()));
            }
            _ => {}
        }
        if idle.is_some_and(|t| t.elapsed() > IDLE) {
            break;
        }
    }
    // Commits what is open and leaves the group.
    session.commit().await?;
    let stats = session.stats();
    println!(
        "done: committed {} records in {} transactions, {} aborted",
        stats.records_committed, stats.committed, stats.aborted
    );
    session.close().await
}

/// `topic/partition` pairs as one line.
fn partitions(assignment: &[(String, i32)]) -> String {
    if assignment.is_empty() {
        return "nothing".to_owned();
    }
    let names: Vec<String> = assignment.iter().map(|(t, p)| format!("{t}/{p}")).collect();
    names.join(" ")
}
