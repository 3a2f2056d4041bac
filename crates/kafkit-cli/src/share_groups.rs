//! `kafkit share-groups list|describe|reset-offsets|delete|delete-offsets`: KIP-932 share
//! groups through the admin client, as Kafka's `kafka-share-groups.sh` does them, as aligned
//! tables or `--json`. A share group's position on a partition is its start offset: the first
//! record not yet delivered and acknowledged. `reset-offsets` plans new start offsets and prints
//! them (a dry run) unless `--execute` is given; it, `delete` and `delete-offsets` refuse a group
//! with members, as the broker does (NON_EMPTY_GROUP).

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use kafkit::admin::{GroupState, ShareGroupDescription, ShareGroupOffset};
use kafkit::{Client, ErrorCode};
use serde_json::{Value, json};

use crate::conn::Conn;
use crate::groups::{GroupType, share_json, topics_text};
use crate::out::{Described, Table, opt};
use crate::reset::{self, ResetScope, ResetWords, Tp};
use crate::{CmdResult, Failure};

/// `kafkit share-groups`.
#[derive(Debug, Subcommand)]
pub enum ShareGroupsCmd {
    /// List the share groups of every broker (ListGroups with the type share).
    List {
        /// Only groups in this state: Empty, Stable or Dead (repeatable).
        #[arg(long = "state", value_name = "STATE")]
        states: Vec<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Describe share groups: state, assignor and each member with its assignment; with
    /// --offsets also each partition's start offset and lag.
    Describe {
        /// The share groups.
        #[arg(required = true)]
        groups: Vec<String>,
        /// Each partition's start offset and lag too (DescribeShareGroupOffsets).
        #[arg(long)]
        offsets: bool,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Plan (and with --execute, set) the start offsets of a share group with no members.
    ResetOffsets(ShareResetArgs),
    /// Delete share groups (they must have no members).
    Delete {
        /// A share group (repeatable).
        #[arg(long = "group", value_name = "GROUP", required = true)]
        groups: Vec<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Delete a share group's start offsets on whole topics (it must have no members).
    DeleteOffsets {
        /// The share group.
        #[arg(long)]
        group: String,
        /// A topic (repeatable).
        #[arg(long = "topic", value_name = "TOPIC", required = true)]
        topics: Vec<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

/// `kafkit share-groups reset-offsets`.
#[derive(Debug, Args)]
pub struct ShareResetArgs {
    /// The share group.
    #[arg(long)]
    group: String,
    #[command(flatten)]
    scope: ResetScope,
}

/// Runs `kafkit share-groups ...`.
pub async fn run(conn: &Conn, cmd: ShareGroupsCmd) -> CmdResult {
    let admin = conn.admin()?;
    match cmd {
        ShareGroupsCmd::List { states, json } => {
            crate::groups::list(&admin, &[GroupType::Share], &states, json).await
        }
        ShareGroupsCmd::Describe {
            groups,
            offsets,
            json,
        } => describe(&admin, &groups, offsets, json).await,
        ShareGroupsCmd::ResetOffsets(a) => reset(&admin, a).await,
        ShareGroupsCmd::Delete { groups, json } => delete(&admin, &groups, json).await,
        ShareGroupsCmd::DeleteOffsets {
            group,
            topics,
            json,
        } => delete_offsets(&admin, &group, &topics, json).await,
    }
}

/// Whether `e` is the broker's `code`.
fn is(e: &kafkit::Error, code: ErrorCode) -> bool {
    e.error_code() == Some(code)
}

/// The refusal of a change to a share group with members (the broker's NON_EMPTY_GROUP), with
/// its state and members when known.
fn not_empty(group: &str, change: &str, found: Option<(GroupState, usize)>) -> Failure {
    let found = found.map_or_else(String::new, |(state, n)| {
        format!(", state {state}, {n} member(s)")
    });
    Failure::Error(format!(
        "share group {group} is not empty (NON_EMPTY_GROUP{found}): {change} only while it has \
         no members; stop its share consumers first"
    ))
}

/// What ShareGroupDescribe's GROUP_ID_NOT_FOUND means: the group does not exist, or is of
/// another type.
const NOT_A_SHARE_GROUP: &str =
    "not a share group (GROUP_ID_NOT_FOUND): it does not exist or is of another type";

/// "group G is not a share group...".
fn not_a_share_group(group: &str) -> String {
    format!("group {group} is {NOT_A_SHARE_GROUP}")
}

/// A share group's start offsets on every partition it has state for, sorted.
async fn start_offsets(
    admin: &Client,
    group: &str,
) -> Result<Vec<(Tp, Result<ShareGroupOffset, kafkit::Error>)>, kafkit::Error> {
    let mut got = admin.list_share_group_offsets(group, None).await?;
    got.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(got)
}

/// The `--offsets` rows and documents of one group.
fn offset_rows(
    group: &str,
    offsets: &[(Tp, Result<ShareGroupOffset, kafkit::Error>)],
    table: &mut Table,
) -> Vec<Value> {
    offsets
        .iter()
        .map(|((topic, p), r)| match r {
            Ok(o) => {
                table.row(vec![
                    group.to_owned(),
                    topic.clone(),
                    p.to_string(),
                    opt(o.start_offset),
                    opt(o.lag),
                ]);
                json!({
                    "topic": topic, "partition": p, "start_offset": o.start_offset,
                    "leader_epoch": o.leader_epoch, "lag": o.lag,
                })
            }
            Err(e) => {
                eprintln!("kafkit: {group}: {topic}/{p}: {e}");
                table.row(vec![
                    group.to_owned(),
                    topic.clone(),
                    p.to_string(),
                    "error".into(),
                ]);
                json!({"topic": topic, "partition": p, "error": e.to_string()})
            }
        })
        .collect()
}

/// The member rows of one described group (the group and its state alone when it has none).
fn member_rows(d: &ShareGroupDescription, table: &mut Table) {
    let head = [
        d.group_id.clone(),
        d.state.to_string(),
        d.assignor_name.clone(),
    ];
    if d.members.is_empty() {
        table.row(head.to_vec());
    }
    for m in &d.members {
        let partitions: usize = m.assignment.iter().map(|t| t.partitions.len()).sum();
        let mut row = head.to_vec();
        row.extend([
            m.member_id.clone(),
            m.client_host.clone(),
            m.client_id.clone(),
            partitions.to_string(),
            topics_text(&m.assignment),
        ]);
        table.row(row);
    }
}

async fn describe(admin: &Client, groups: &[String], offsets: bool, json: bool) -> CmdResult {
    let names: Vec<&str> = groups.iter().map(String::as_str).collect();
    let header = [
        "GROUP",
        "STATE",
        "ASSIGNOR",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
        "#PARTITIONS",
        "ASSIGNMENT",
    ];
    let mut out = Described::new("group", "share group(s)", &header);
    let mut offsets_table = Table::new(&["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]);
    let mut failed_partitions = 0;
    for (name, d) in admin.describe_share_groups(&names, false).await? {
        let d = d.map_err(|e| {
            if is(&e, ErrorCode::GROUP_ID_NOT_FOUND) {
                NOT_A_SHARE_GROUP.to_owned()
            } else {
                e.to_string()
            }
        });
        let Some(d) = out.ok(&name, d) else { continue };
        let mut doc = share_json(&d);
        if offsets {
            let Some(parts) = out.ok(&name, start_offsets(admin, &name).await) else {
                continue;
            };
            failed_partitions += parts.iter().filter(|(_, r)| r.is_err()).count();
            doc["offsets"] = Value::Array(offset_rows(&name, &parts, &mut offsets_table));
        }
        member_rows(&d, &mut out.table);
        out.push(doc);
    }
    let printed = out.print(json);
    if offsets && !json && !offsets_table.is_empty() {
        println!();
        offsets_table.print();
    }
    printed?;
    if failed_partitions > 0 {
        return Err(Failure::Error(format!(
            "{failed_partitions} partition(s) could not be described"
        )));
    }
    Ok(())
}

/// The group must have no members (state Empty or Dead), as `kafka-share-groups.sh` checks; a
/// group not found has none (AlterShareGroupOffsets makes it, as Kafka's tool lets it).
async fn check_empty(admin: &Client, group: &str) -> Result<(), Failure> {
    let d = match admin.describe_share_groups(&[group], false).await?.pop() {
        Some((_, Ok(d))) => d,
        Some((_, Err(e))) if is(&e, ErrorCode::GROUP_ID_NOT_FOUND) => return Ok(()),
        Some((_, Err(e))) => return Err(Failure::Error(format!("share group {group}: {e}"))),
        None => return Err(Failure::Error(format!("share group {group}: no answer"))),
    };
    if matches!(d.state, GroupState::Empty | GroupState::Dead) && d.members.is_empty() {
        return Ok(());
    }
    Err(not_empty(
        group,
        "its start offsets can be reset",
        Some((d.state, d.members.len())),
    ))
}

/// How `share-groups reset-offsets` names a share group's offsets.
const RESET_WORDS: ResetWords = ResetWords {
    current: "START-OFFSET",
    new: "NEW-OFFSET",
    offsets: "start offsets",
    apply: "set these start offsets",
};

async fn reset(admin: &Client, a: ShareResetArgs) -> CmdResult {
    // Every argument is checked before the cluster is asked anything (a usage error, exit 2).
    let parsed = a.scope.parse()?;
    check_empty(admin, &a.group).await?;
    let current: BTreeMap<Tp, Option<i64>> = match start_offsets(admin, &a.group).await {
        Ok(got) => got
            .into_iter()
            .map(|(tp, r)| (tp, r.ok().and_then(|o| o.start_offset)))
            .collect(),
        Err(e) if is(&e, ErrorCode::GROUP_ID_NOT_FOUND) => BTreeMap::new(),
        Err(e) => return Err(Failure::Error(format!("share group {}: {e}", a.group))),
    };
    let known = current.keys().cloned().collect();
    let parts = reset::partitions(admin, &a.group, &a.scope, &parsed, known, &RESET_WORDS).await?;
    let plans = reset::plan(admin, &a.scope, &parsed, &parts, &current).await?;
    let offsets = reset::to_apply(&plans);
    let mut results: BTreeMap<Tp, Result<(), String>> = BTreeMap::new();
    if a.scope.execute && !offsets.is_empty() {
        // A member that joined since the check: the broker refuses the whole request.
        let altered = match admin.alter_share_group_offsets(&a.group, &offsets).await {
            Err(e) if is(&e, ErrorCode::NON_EMPTY_GROUP) => {
                return Err(not_empty(&a.group, "its start offsets can be reset", None));
            }
            r => r?,
        };
        for (tp, r) in altered {
            results.insert(tp, r.map_err(|e| e.to_string()));
        }
    }
    reset::print(&a.group, &plans, &results, &a.scope, &RESET_WORDS)
}

async fn delete(admin: &Client, groups: &[String], json: bool) -> CmdResult {
    let names: Vec<&str> = groups.iter().map(String::as_str).collect();
    // DeleteGroups deletes a group of any type: check first that each is a share group with
    // no members, so that nothing else is deleted (and nothing at all when one is refused).
    for (name, d) in admin.describe_share_groups(&names, false).await? {
        match d {
            Ok(d) if !d.members.is_empty() => {
                return Err(not_empty(
                    &name,
                    "it can be deleted (nothing was deleted)",
                    Some((d.state, d.members.len())),
                ));
            }
            Ok(_) => {}
            Err(e) if is(&e, ErrorCode::GROUP_ID_NOT_FOUND) => {
                return Err(Failure::Error(format!(
                    "{}; nothing was deleted",
                    not_a_share_group(&name)
                )));
            }
            Err(e) => return Err(Failure::Error(format!("share group {name}: {e}"))),
        }
    }
    let results = admin.delete_consumer_groups(&names).await?;
    crate::out::outcomes("group", "deleted share group", &results, json)
}

async fn delete_offsets(admin: &Client, group: &str, topics: &[String], json: bool) -> CmdResult {
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let results = match admin.delete_share_group_offsets(group, &names).await {
        Err(e) if is(&e, ErrorCode::NON_EMPTY_GROUP) => {
            return Err(not_empty(group, "its start offsets can be deleted", None));
        }
        Err(e) if is(&e, ErrorCode::GROUP_ID_NOT_FOUND) => {
            return Err(Failure::Error(not_a_share_group(group)));
        }
        r => r?,
    };
    crate::out::outcomes(
        "topic",
        "deleted the start offsets of the share group on topic",
        &results,
        json,
    )
}
