//! A consumer group member with the [`GroupReader`]: it subscribes to the `produce` example's
//! topic as a member of `kafkit-example-order-readers`, says which partitions the group
//! assigned it, prints records (the first few of each partition, then a count), commits after
//! each batch, and leaves the group once it has read to the end. A second run reads only what
//! was written since (the group's committed offsets); start two at once to see the partitions
//! split.
//!
//! ```sh
//! cargo xtask broker start   # a local broker on 127.0.0.1:19092
//! cargo run -p kafkit-examples --example produce
//! cargo run -p kafkit-examples --example group -- --bootstrap 127.0.0.1:19092
//! ```

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use kafkit::{AutoOffsetReset, GroupReader, Reader, Transport};

/// The `produce` example's topic.
const TOPIC: &str = "kafkit-example-orders";
const GROUP: &str = "kafkit-example-order-readers";
/// Records printed per partition; the rest are counted.
const SHOWN: usize = 3;

#[tokio::main]
async fn main() -> ExitCode {
    // An error is printed as a sentence (`error: ...`) and the exit status is 1.
    kafkit_examples::exit(run().await)
}

async fn run() -> Result<(), kafkit::Error> {
    let transport = Transport::builder(kafkit_examples::bootstrap()).build()?;

    // The member: commits by hand (after each batch), a new group starts at the earliest
    // offset. A 10 s session (Java's default is 45 s): tansu, the test broker, holds a new
    // member's first join about half the session timeout; Apache Kafka refuses a session
    // under its `group.min.session.timeout.ms` (6 s).
    let mut member = GroupReader::builder(transport.clone(), GROUP)
        .subscribe([TOPIC])
        .enable_auto_commit(false)
        .session_timeout(Duration::from_secs(10))
        .reader(Reader::builder(transport).auto_offset_reset(AutoOffsetReset::Earliest))
        .build()?;
    println!("joining group {GROUP}, waiting for an assignment...");

    let mut read: BTreeMap<i32, usize> = BTreeMap::new();
    let mut assigned = false;
    loop {
        // `next_batch` also carries out the join and the rebalances; wake up once a second
        // to look at the assignment and the lag.
        let batch = tokio::time::timeout(Duration::from_secs(1), member.next_batch()).await;
        let batch = match batch {
            Ok(batch) => batch?,
            Err(_) => Vec::new(),
        };
        let Some(took) = member.stats().first_assignment else {
            continue; // still joining
        };
        if !assigned {
            assigned = true;
            let owned: Vec<String> = member
                .assignment()
                .iter()
                .map(|(t, p)| format!("{t}/{p}"))
                .collect();
            let owned = if owned.is_empty() {
                "nothing".to_owned()
            } else {
                owned.join(" ")
            };
            println!("assigned after {:.1} s: {owned}", took.as_secs_f64());
        }
        for part in &batch {
            for record in &part.records {
                let n = read.entry(part.partition).or_insert(0);
                *n += 1;
                if *n <= SHOWN {
                    let value = record.value.as_deref().map(String::from_utf8_lossy);
                    println!(
                        "{TOPIC}/{} @{}: {}",
                        part.partition,
                        record.offset,
                        value.as_deref().unwrap_or("(null)")
                    );
                }
            }
        }
        // What was handed out counts as consumed: commit it.
        if !batch.is_empty() {
            member.commit().await?;
        }
        // Done when every owned partition is at its end (the lag is known after the first
        // Fetch answer).
        if member.lags().iter().all(|(_, _, lag)| *lag == Some(0)) {
            break;
        }
    }
    for (partition, n) in &read {
        println!("{TOPIC}/{partition}: {n} records");
    }
    println!(
        "read {} records, {} commits",
        read.values().sum::<usize>(),
        member.stats().commits
    );
    // Leaves the group (LeaveGroup), so the next run is assigned at once.
    member.close().await;
    println!("left group {GROUP}");
    Ok(())
}
