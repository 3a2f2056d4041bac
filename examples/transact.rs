//! Consume-transform-produce, exactly once: a [`GroupTransactSession`] reads `words` as a
//! member of the group `kafkit-example-upper`, writes each word upper-cased to `WORDS`, and
//! commits the output and the input offsets in one transaction every 500 records or 100 ms.
//! A rebalance aborts the open transaction and the member rewinds to the committed offsets,
//! so a `read_committed` reader of `WORDS` sees each word once, whatever happens. Start two
//! or three of these at once and stop some to watch the partitions move; each stops after
//! 10 s without input.
//!
//! ```sh
//! cargo xtask broker start   # a local broker on 127.0.0.1:19092
//! cargo run -p kafkit-examples --example transact -- --bootstrap 127.0.0.1:19092
//! ```
//!
//! Each instance needs its own transactional id (here from `--id N`, default 1); reuse it
//! when restarting a crashed instance, so the new one fences the old one and aborts the
//! transaction it left open.

use std::time::Duration;

use kafkit::admin::NewTopic;
use kafkit::transact::{GroupTransactSession, TransactionOutcome};
use kafkit::{
    AutoOffsetReset, Client, ConsumerRecord, ErrorCode, GroupReader, ProducerRecord, Reader,
    Transport, Writer,
};

const INPUT: &str = "kafkit-example-words";
const OUTPUT: &str = "kafkit-example-WORDS";
const GROUP: &str = "kafkit-example-upper";

#[tokio::main]
async fn main() -> Result<(), kafkit::Error> {
    let transport = Transport::builder(kafkit_examples::bootstrap()).build()?;
    let args: Vec<String> = std::env::args().collect();
    let id = args
        .iter()
        .position(|a| a == "--id")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| "1".to_owned());

    // The topics (made on the first run), and some words to work on.
    let admin = Client::new(transport.clone());
    for (name, result) in admin
        .create_topics(
            &[NewTopic::new(INPUT, 3, 1), NewTopic::new(OUTPUT, 3, 1)],
            false,
        )
        .await?
    {
        match result {
            Ok(_) => println!("created {name}"),
            Err(e) if e.error_code() == Some(ErrorCode::TOPIC_ALREADY_EXISTS) => {}
            Err(e) => return Err(e),
        }
    }
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

    // The member (auto-commit and the isolation level are the session's business) and the
    // transactional writer.
    let member = GroupReader::builder(transport.clone(), GROUP)
        .subscribe([INPUT])
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

    // Rounds until 10 s pass without a commit; then the open transaction is committed.
    let mut idle = tokio::time::Instant::now();
    loop {
        match session.process_once(&mut upper).await? {
            Some(TransactionOutcome::Committed {
                records,
                partitions,
            }) => {
                println!("committed {records} records of {partitions} partitions");
                idle = tokio::time::Instant::now();
            }
            Some(TransactionOutcome::Aborted { records, reason }) => {
                println!("aborted {records} records ({reason:?}); rewound");
            }
            _ => {}
        }
        if idle.elapsed() > Duration::from_secs(10) {
            break;
        }
    }
    println!("{:?}", session.stats());
    session.close().await
}
