//! `kafkit transactions list|describe|describe-producers|abort|fence`: transactional ids and
//! hanging transactions through the admin client, like Apache Kafka's
//! `kafka-transactions.sh` (KIP-664), as aligned tables or `--json`.

use clap::Subcommand;
use kafkit::admin::{AbortTransactionSpec, ListTransactionsOptions, TransactionState};
use serde_json::{Value, json};

use crate::conn::Conn;
use crate::out::{Described, Table, outcomes, print_json};
use crate::{CmdResult, Failure};

/// `kafkit transactions`.
#[derive(Debug, Subcommand)]
pub enum TransactionsCmd {
    /// List the transactional ids every broker coordinates (ListTransactions).
    List {
        /// Only ids in this state, e.g. Ongoing (repeatable).
        #[arg(long = "state", value_name = "STATE")]
        states: Vec<String>,
        /// Only this producer id (repeatable).
        #[arg(long = "producer-id", value_name = "ID")]
        producer_ids: Vec<i64>,
        /// Only transactions open longer than this (e.g. 30s, 5m; KIP-994).
        #[arg(long, value_name = "DURATION", value_parser = crate::conn::parse_duration)]
        longer_than: Option<std::time::Duration>,
        /// Only transactional ids matching this Java regular expression (KIP-1152).
        #[arg(long, value_name = "REGEX")]
        pattern: Option<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Describe transactional ids at their coordinators (DescribeTransactions).
    Describe {
        /// The transactional ids.
        #[arg(required = true)]
        transactional_ids: Vec<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// The producers with state on a partition and their open transactions (DescribeProducers).
    DescribeProducers {
        /// The topic.
        #[arg(long)]
        topic: String,
        /// The partition.
        #[arg(long)]
        partition: i32,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Abort a hanging transaction on a partition (WriteTxnMarkers; needs cluster action
    /// rights): the one starting at --start-offset, or the one of --producer-id,
    /// --producer-epoch and --coordinator-epoch.
    Abort {
        /// The topic.
        #[arg(long)]
        topic: String,
        /// The partition.
        #[arg(long)]
        partition: i32,
        /// The first offset of the open transaction (as `describe-producers` shows it).
        #[arg(long, conflicts_with_all = ["producer_id", "producer_epoch", "coordinator_epoch"])]
        start_offset: Option<i64>,
        /// The producer id (with --producer-epoch and --coordinator-epoch).
        #[arg(long, requires_all = ["producer_epoch", "coordinator_epoch"])]
        producer_id: Option<i64>,
        /// The producer epoch.
        #[arg(long, requires = "producer_id")]
        producer_epoch: Option<i16>,
        /// The coordinator epoch (-1 as 0, as `describe-producers` shows no coordinator).
        #[arg(long, requires = "producer_id", allow_hyphen_values = true)]
        coordinator_epoch: Option<i32>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Fence the producers of transactional ids (InitProducerId, KIP-618): their open
    /// transactions are aborted and their next calls fail.
    Fence {
        /// The transactional ids.
        #[arg(required = true)]
        transactional_ids: Vec<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `kafkit transactions ...`.
pub async fn run(conn: &Conn, cmd: TransactionsCmd) -> CmdResult {
    let admin = conn.admin()?;
    match cmd {
        TransactionsCmd::List {
            states,
            producer_ids,
            longer_than,
            pattern,
            json,
        } => {
            let mut parsed = Vec::with_capacity(states.len());
            for s in &states {
                match TransactionState::parse(s) {
                    TransactionState::Unknown => {
                        return Err(Failure::Usage(format!(
                            "--state {s:?}: not a transaction state"
                        )));
                    }
                    st => parsed.push(st),
                }
            }
            let mut options = ListTransactionsOptions::new()
                .in_states(parsed)
                .producer_ids(producer_ids);
            if let Some(d) = longer_than {
                options = options.longer_than(d);
            }
            if let Some(p) = pattern {
                options = options.transactional_id_pattern(p);
            }
            let mut listed = admin.list_transactions(&options).await?;
            listed
                .transactions
                .sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
            for (node, e) in &listed.errors {
                eprintln!("kafkit: broker {node}: {e}");
            }
            if json {
                print_json(&Value::Array(
                    listed
                        .transactions
                        .iter()
                        .map(|t| {
                            json!({
                                "transactional_id": t.transactional_id, "producer_id": t.producer_id,
                                "state": t.state.as_str(), "coordinator": t.coordinator,
                            })
                        })
                        .collect(),
                ));
            } else {
                let mut t =
                    Table::new(&["TRANSACTIONAL_ID", "COORDINATOR", "PRODUCER_ID", "STATE"]);
                for x in &listed.transactions {
                    t.row(vec![
                        x.transactional_id.clone(),
                        x.coordinator.to_string(),
                        x.producer_id.to_string(),
                        x.state.to_string(),
                    ]);
                }
                t.print();
            }
            if !listed.errors.is_empty() {
                return Err(Failure::Error(format!(
                    "{} broker(s) could not list their transactions",
                    listed.errors.len()
                )));
            }
            Ok(())
        }
        TransactionsCmd::Describe {
            transactional_ids,
            json,
        } => {
            let ids: Vec<&str> = transactional_ids.iter().map(String::as_str).collect();
            let mut out = Described::new(
                "transactional_id",
                "transactional id(s)",
                &[
                    "TRANSACTIONAL_ID",
                    "COORDINATOR",
                    "PRODUCER_ID",
                    "EPOCH",
                    "STATE",
                    "TIMEOUT_MS",
                    "START_MS",
                    "PARTITIONS",
                ],
            );
            for (id, r) in admin.describe_transactions(&ids).await? {
                let Some(d) = out.ok(&id, r) else { continue };
                let parts: Vec<String> = d
                    .topic_partitions
                    .iter()
                    .map(|(t, p)| format!("{t}-{p}"))
                    .collect();
                let timeout_ms =
                    u64::try_from(d.transaction_timeout.as_millis()).unwrap_or(u64::MAX);
                out.push(json!({
                    "transactional_id": id, "coordinator": d.coordinator,
                    "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
                    "state": d.state.as_str(), "transaction_timeout_ms": timeout_ms,
                    "transaction_start_time_ms": d.transaction_start_time_ms,
                    "topic_partitions": parts,
                }));
                out.table.row(vec![
                    id,
                    d.coordinator.to_string(),
                    d.producer_id.to_string(),
                    d.producer_epoch.to_string(),
                    d.state.to_string(),
                    timeout_ms.to_string(),
                    d.transaction_start_time_ms
                        .map_or_else(|| "-".into(), |t| t.to_string()),
                    if parts.is_empty() {
                        "-".into()
                    } else {
                        parts.join(",")
                    },
                ]);
            }
            out.print(json)
        }
        TransactionsCmd::DescribeProducers {
            topic,
            partition,
            json,
        } => {
            let mut got = admin
                .describe_producers(&[(topic.as_str(), partition)])
                .await?;
            let ((_, _), r) = got
                .pop()
                .ok_or_else(|| Failure::Error("no answer for the partition".into()))?;
            let states = r?;
            let opt = |v: Option<i64>| v.map_or_else(|| "-".into(), |v| v.to_string());
            if json {
                print_json(&Value::Array(
                    states
                        .iter()
                        .map(|s| {
                            json!({
                                "producer_id": s.producer_id, "producer_epoch": s.producer_epoch,
                                "last_sequence": s.last_sequence, "last_timestamp": s.last_timestamp,
                                "coordinator_epoch": s.coordinator_epoch,
                                "current_transaction_start_offset": s.current_transaction_start_offset,
                            })
                        })
                        .collect(),
                ));
                return Ok(());
            }
            let mut t = Table::new(&[
                "PRODUCER_ID",
                "EPOCH",
                "LAST_SEQUENCE",
                "LAST_TIMESTAMP",
                "COORDINATOR_EPOCH",
                "TXN_START_OFFSET",
            ]);
            for s in &states {
                t.row(vec![
                    s.producer_id.to_string(),
                    s.producer_epoch.to_string(),
                    s.last_sequence.to_string(),
                    opt(s.last_timestamp),
                    opt(s.coordinator_epoch.map(i64::from)),
                    opt(s.current_transaction_start_offset),
                ]);
            }
            t.print();
            Ok(())
        }
        TransactionsCmd::Abort {
            topic,
            partition,
            start_offset,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            json,
        } => {
            let spec = match (start_offset, producer_id, producer_epoch) {
                (Some(start), _, _) => {
                    let mut got = admin
                        .describe_producers(&[(topic.as_str(), partition)])
                        .await?;
                    let (_, r) = got
                        .pop()
                        .ok_or_else(|| Failure::Error("no answer for the partition".into()))?;
                    let states = r?;
                    let state = states
                        .iter()
                        .find(|s| s.current_transaction_start_offset == Some(start))
                        .ok_or_else(|| {
                            Failure::Error(format!(
                                "no open transaction starts at offset {start} on {topic}-{partition}"
                            ))
                        })?;
                    AbortTransactionSpec::from_producer_state(topic.as_str(), partition, state)?
                }
                (None, Some(id), Some(epoch)) => AbortTransactionSpec::new(
                    topic.as_str(),
                    partition,
                    id,
                    epoch,
                    coordinator_epoch,
                ),
                _ => {
                    return Err(Failure::Usage(
                        "name the transaction with --start-offset, or with --producer-id, \
                         --producer-epoch and --coordinator-epoch"
                            .into(),
                    ));
                }
            };
            let name = format!("{topic}-{partition}");
            let r = admin.abort_transaction(&spec).await;
            if json {
                let mut doc = json!({
                    "partition": name, "producer_id": spec.producer_id,
                    "producer_epoch": spec.producer_epoch, "coordinator_epoch": spec.coordinator_epoch,
                    "ok": r.is_ok(),
                });
                if let Err(e) = &r {
                    doc["error"] = json!(e.to_string());
                }
                print_json(&doc);
            } else if r.is_ok() {
                println!(
                    "aborted the transaction of producer {} (epoch {}) on {name}",
                    spec.producer_id, spec.producer_epoch
                );
            }
            r.map_err(Failure::from)
        }
        TransactionsCmd::Fence {
            transactional_ids,
            json,
        } => {
            let ids: Vec<&str> = transactional_ids.iter().map(String::as_str).collect();
            let results = admin.fence_producers(&ids, None).await?;
            if !json {
                for (id, r) in &results {
                    if let Ok(p) = r {
                        println!(
                            "fenced {id} (producer id {}, epoch {})",
                            p.producer_id, p.producer_epoch
                        );
                    } else if let Err(e) = r {
                        eprintln!("kafkit: {id}: {e}");
                    }
                }
                let failed = results.iter().filter(|(_, r)| r.is_err()).count();
                if failed > 0 {
                    return Err(Failure::Error(format!(
                        "{failed} of {} failed",
                        results.len()
                    )));
                }
                return Ok(());
            }
            outcomes("transactional_id", "fenced", &results, true)
        }
    }
}
