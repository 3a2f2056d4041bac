//! `kafkit groups list|describe|lag|reset-offsets|delete`: consumer groups through the admin
//! client, as aligned tables or `--json`. `list --type` and `describe --type` reach the other
//! group types of Kafka 4.x (KIP-848 consumer groups, KIP-932 share groups, KIP-1071 streams
//! groups). `reset-offsets` plans the new offsets and prints them
//! (a dry run) unless `--execute` is given, and refuses a group with active members, as Kafka's
//! `kafka-consumer-groups.sh --reset-offsets` does.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use kafkit::admin::OffsetAndMetadata;
use kafkit::admin::{ConsumerGroupDescription, GroupState, ListGroupOffsets, ListGroupsOptions};
use kafkit::{Client, IsolationLevel};
use serde_json::{Value, json};

use crate::conn::Conn;
use crate::out::{Described, Table, opt, print_json};
use crate::reset::{self, ResetScope, ResetWords, Tp};
use crate::{CmdResult, Failure};

/// `kafkit groups`.
#[derive(Debug, Subcommand)]
pub enum GroupsCmd {
    /// List the consumer groups of every broker (with --type: the groups of those types).
    List {
        /// Only groups of this type (ListGroups v5, KIP-848; repeatable). Without it: consumer
        /// groups (classic and KIP-848) and groups that only hold offsets.
        #[arg(long = "type", value_enum, value_name = "TYPE")]
        types: Vec<GroupType>,
        /// Only groups in this state, e.g. Stable, Empty (ListGroups v4+; repeatable).
        #[arg(long = "state", value_name = "STATE")]
        states: Vec<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Describe groups: state, assignor and each member with its assignment.
    Describe {
        /// The groups.
        #[arg(required = true)]
        groups: Vec<String>,
        /// The groups' type. auto: KIP-848 consumer groups (ConsumerGroupDescribe), and
        /// DescribeGroups for the others (classic groups), as Java's describeConsumerGroups.
        #[arg(long = "type", value_enum, default_value_t = DescribeType::Auto)]
        group_type: DescribeType,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// A group's committed offset, end offset and lag on each partition it committed for.
    Lag {
        /// The group.
        group: String,
        /// End offsets as read_committed consumers see them (the last stable offset).
        #[arg(long)]
        committed: bool,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Plan (and with --execute, commit) new offsets for an inactive group.
    ResetOffsets(ResetArgs),
    /// Delete groups (they must have no members).
    Delete {
        /// The groups.
        #[arg(required = true)]
        groups: Vec<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

/// A group type of `groups list --type` (ListGroups `TypesFilter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupType {
    /// Groups of the classic protocol (JoinGroup / SyncGroup).
    Classic,
    /// KIP-848 consumer groups.
    Consumer,
    /// KIP-932 share groups.
    Share,
    /// KIP-1071 streams groups.
    Streams,
}

impl GroupType {
    fn wire(self) -> &'static str {
        match self {
            GroupType::Classic => "classic",
            GroupType::Consumer => "consumer",
            GroupType::Share => "share",
            GroupType::Streams => "streams",
        }
    }
}

/// The type of the groups `groups describe` describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DescribeType {
    /// KIP-848 consumer groups, else classic ones.
    Auto,
    /// Classic groups (DescribeGroups).
    Classic,
    /// KIP-848 consumer groups only (ConsumerGroupDescribe).
    Consumer,
    /// Share groups (ShareGroupDescribe).
    Share,
    /// Streams groups (StreamsGroupDescribe).
    Streams,
}

/// `kafkit groups reset-offsets`.
#[derive(Debug, Args)]
pub struct ResetArgs {
    /// The group.
    group: String,
    #[command(flatten)]
    scope: ResetScope,
}

/// Runs `kafkit groups ...`.
pub async fn run(conn: &Conn, cmd: GroupsCmd) -> CmdResult {
    let admin = conn.admin()?;
    match cmd {
        GroupsCmd::List {
            types,
            states,
            json,
        } => list(&admin, &types, &states, json).await,
        GroupsCmd::Describe {
            groups,
            group_type,
            json,
        } => describe(&admin, &groups, group_type, json).await,
        GroupsCmd::Lag {
            group,
            committed,
            json,
        } => lag(&admin, &group, committed, json).await,
        GroupsCmd::ResetOffsets(a) => reset(&admin, a).await,
        GroupsCmd::Delete { groups, json } => delete(&admin, &groups, json).await,
    }
}

/// `groups list` (and `share-groups list`): the groups of `types` (none: consumer groups) in
/// `states` (none: all), sorted by name.
///
/// # Errors
///
/// [`Failure::Usage`] for an unknown state; [`Failure::Error`] when ListGroups fails or a
/// broker could not list its groups (the others' are printed).
pub async fn list(admin: &Client, types: &[GroupType], states: &[String], json: bool) -> CmdResult {
    let mut options = ListGroupsOptions::new();
    if !states.is_empty() {
        let parsed: Vec<GroupState> = states.iter().map(|s| GroupState::parse(s)).collect();
        if let Some(i) = parsed.iter().position(|s| *s == GroupState::Unknown) {
            return Err(Failure::Usage(format!(
                "--state {:?}: not a group state (Stable, Empty, PreparingRebalance, \
                 CompletingRebalance, Dead, Assigning, Reconciling, NotReady)",
                states[i]
            )));
        }
        options = options.in_states(parsed);
    }
    let mut r = if types.is_empty() {
        admin.list_consumer_groups(&options).await?
    } else {
        admin
            .list_groups(&options.with_types(types.iter().map(|t| t.wire())))
            .await?
    };
    r.groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    for (node, e) in &r.errors {
        eprintln!("kafkit: broker {node} could not list its groups: {e}");
    }
    let state = |s: Option<GroupState>| s.map_or("", GroupState::as_str);
    if json {
        print_json(&Value::Array(
            r.groups
                .iter()
                .map(|g| {
                    json!({
                        "group": g.group_id, "state": g.state.map(GroupState::as_str),
                        "protocol_type": g.protocol_type, "type": g.group_type,
                        "coordinator": g.coordinator,
                    })
                })
                .collect(),
        ));
    } else {
        let mut t = Table::new(&["GROUP", "STATE", "TYPE", "COORDINATOR"]);
        for g in &r.groups {
            t.row(vec![
                g.group_id.clone(),
                state(g.state).to_owned(),
                g.group_type.clone().unwrap_or_default(),
                g.coordinator.to_string(),
            ]);
        }
        t.print();
    }
    if !r.errors.is_empty() {
        return Err(Failure::Error(format!(
            "{} broker(s) could not list their groups",
            r.errors.len()
        )));
    }
    Ok(())
}

/// `topic:p,p` of an assignment, sorted.
fn assignment_text(d: &kafkit::admin::MemberDescription) -> String {
    let Some(a) = &d.assignment else {
        return String::new();
    };
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in a.iter() {
        by_topic.entry(t).or_default().push(p);
    }
    by_topic
        .into_iter()
        .map(|(t, mut ps)| {
            ps.sort_unstable();
            let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
            format!("{t}:{}", ps.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn description_json(d: &ConsumerGroupDescription) -> Value {
    json!({
        "group": d.group_id, "state": d.state.as_str(), "protocol_type": d.protocol_type,
        "protocol": d.protocol,
        "members": d.members.iter().map(|m| json!({
            "member_id": m.member_id, "group_instance_id": m.group_instance_id,
            "client_id": m.client_id, "host": m.client_host,
            "subscription": m.subscription.as_ref().map(|s| s.topics.clone()),
            "assignment": assignment_text(m),
        })).collect::<Vec<_>>(),
    })
}

/// `topic:p,p` of a KIP-848 / share assignment, sorted.
pub fn topics_text(a: &[kafkit::admin::TopicPartitions]) -> String {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for t in a {
        by_topic
            .entry(t.topic.as_str())
            .or_default()
            .extend(&t.partitions);
    }
    by_topic
        .into_iter()
        .map(|(t, mut ps)| {
            ps.sort_unstable();
            let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
            format!("{t}:{}", ps.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `subtopology:p,p` of streams tasks.
fn tasks_text(tasks: &[kafkit::admin::StreamsTasks]) -> String {
    tasks
        .iter()
        .map(|(id, ps)| {
            let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
            format!("{id}:{}", ps.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// One described group as rows of the describe table: (group, state, protocol or assignor,
/// [member, client id, host, assignment] per member) and its JSON.
struct GroupRows {
    group: String,
    state: GroupState,
    protocol: String,
    members: Vec<[String; 4]>,
    json: Value,
}

fn classic_rows(d: &ConsumerGroupDescription) -> GroupRows {
    GroupRows {
        group: d.group_id.clone(),
        state: d.state,
        protocol: d.protocol.clone(),
        members: d
            .members
            .iter()
            .map(|m| {
                [
                    m.member_id.clone(),
                    m.client_id.clone(),
                    m.client_host.clone(),
                    assignment_text(m),
                ]
            })
            .collect(),
        json: description_json(d),
    }
}

fn kip848_rows(d: &kafkit::admin::Kip848GroupDescription) -> GroupRows {
    GroupRows {
        group: d.group_id.clone(),
        state: d.state,
        protocol: d.assignor_name.clone(),
        members: d
            .members
            .iter()
            .map(|m| {
                [
                    m.member_id.clone(),
                    m.client_id.clone(),
                    m.client_host.clone(),
                    topics_text(&m.assignment),
                ]
            })
            .collect(),
        json: json!({
            "group": d.group_id, "state": d.state.as_str(), "type": "consumer",
            "assignor": d.assignor_name, "group_epoch": d.group_epoch,
            "assignment_epoch": d.assignment_epoch,
            "members": d.members.iter().map(|m| json!({
                "member_id": m.member_id, "group_instance_id": m.instance_id,
                "client_id": m.client_id, "host": m.client_host,
                "member_epoch": m.member_epoch,
                "subscription": m.subscribed_topic_names,
                "subscription_regex": m.subscribed_topic_regex,
                "assignment": topics_text(&m.assignment),
                "target_assignment": topics_text(&m.target_assignment),
                "classic_member": m.member_type == kafkit::admin::GroupMemberType::Classic,
            })).collect::<Vec<_>>(),
        }),
    }
}

fn share_rows(d: &kafkit::admin::ShareGroupDescription) -> GroupRows {
    GroupRows {
        group: d.group_id.clone(),
        state: d.state,
        protocol: d.assignor_name.clone(),
        members: d
            .members
            .iter()
            .map(|m| {
                [
                    m.member_id.clone(),
                    m.client_id.clone(),
                    m.client_host.clone(),
                    topics_text(&m.assignment),
                ]
            })
            .collect(),
        json: share_json(d),
    }
}

/// A described share group as `--json` prints it (`groups describe --type share`,
/// `share-groups describe`).
pub fn share_json(d: &kafkit::admin::ShareGroupDescription) -> Value {
    json!({
        "group": d.group_id, "state": d.state.as_str(), "type": "share",
        "assignor": d.assignor_name, "group_epoch": d.group_epoch,
        "assignment_epoch": d.assignment_epoch,
        "members": d.members.iter().map(|m| json!({
            "member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
            "member_epoch": m.member_epoch, "subscription": m.subscribed_topic_names,
            "assignment": topics_text(&m.assignment),
        })).collect::<Vec<_>>(),
    })
}

fn streams_rows(d: &kafkit::admin::StreamsGroupDescription) -> GroupRows {
    GroupRows {
        group: d.group_id.clone(),
        state: d.state,
        protocol: String::new(),
        members: d
            .members
            .iter()
            .map(|m| {
                [
                    m.member_id.clone(),
                    m.client_id.clone(),
                    m.client_host.clone(),
                    tasks_text(&m.active_tasks),
                ]
            })
            .collect(),
        json: json!({
            "group": d.group_id, "state": d.state.as_str(), "type": "streams",
            "group_epoch": d.group_epoch, "assignment_epoch": d.assignment_epoch,
            "topology_epoch": d.topology_epoch,
            "members": d.members.iter().map(|m| json!({
                "member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
                "process_id": m.process_id, "member_epoch": m.member_epoch,
                "active_tasks": tasks_text(&m.active_tasks),
                "standby_tasks": tasks_text(&m.standby_tasks),
                "warmup_tasks": tasks_text(&m.warmup_tasks),
            })).collect::<Vec<_>>(),
        }),
    }
}

type Rows = Vec<(String, Result<GroupRows, kafkit::Error>)>;

fn map_rows<T>(got: Vec<(String, Result<T, kafkit::Error>)>, f: impl Fn(&T) -> GroupRows) -> Rows {
    got.into_iter()
        .map(|(n, r)| (n, r.map(|d| f(&d))))
        .collect()
}

/// `auto`: ConsumerGroupDescribe, then DescribeGroups for the groups it does not know
/// (GROUP_ID_NOT_FOUND: classic groups, as Java's describeConsumerGroups does) or for all when
/// the brokers do not offer it.
async fn describe_auto(admin: &Client, names: &[&str]) -> Result<Rows, Failure> {
    let modern = match admin.describe_kip848_groups(names, false).await {
        Ok(got) => got,
        Err(kafkit::Error::UnsupportedVersion { .. }) => {
            let classic = admin.describe_consumer_groups(names, false).await?;
            return Ok(map_rows(classic, classic_rows));
        }
        Err(e) => return Err(e.into()),
    };
    // Kafka answers GROUP_ID_NOT_FOUND for a group that is not a KIP-848 group. tansu 0.6
    // answers every id, classic groups too, with no error and group epoch -1 (the schema's
    // default; a KIP-848 group's epoch is never negative): that is "not found" as well.
    let not_found = |r: &Result<kafkit::admin::Kip848GroupDescription, kafkit::Error>| match r {
        Err(e) => e.error_code() == Some(kafkit::ErrorCode::GROUP_ID_NOT_FOUND),
        Ok(d) => d.group_epoch < 0,
    };
    let others: Vec<&str> = modern
        .iter()
        .filter(|(_, r)| not_found(r))
        .map(|(n, _)| n.as_str())
        .collect();
    let mut classic: std::collections::HashMap<String, _> = if others.is_empty() {
        Default::default()
    } else {
        admin
            .describe_consumer_groups(&others, false)
            .await?
            .into_iter()
            .collect()
    };
    Ok(modern
        .into_iter()
        .map(|(n, r)| {
            let rows = if not_found(&r) {
                match classic.remove(&n) {
                    Some(c) => c.map(|d| classic_rows(&d)),
                    None => r.map(|d| kip848_rows(&d)),
                }
            } else {
                r.map(|d| kip848_rows(&d))
            };
            (n, rows)
        })
        .collect())
}

async fn describe(
    admin: &Client,
    groups: &[String],
    group_type: DescribeType,
    json: bool,
) -> CmdResult {
    let names: Vec<&str> = groups.iter().map(String::as_str).collect();
    let described: Rows = match group_type {
        DescribeType::Auto => describe_auto(admin, &names).await?,
        DescribeType::Classic => map_rows(
            admin.describe_consumer_groups(&names, false).await?,
            classic_rows,
        ),
        DescribeType::Consumer => map_rows(
            admin.describe_kip848_groups(&names, false).await?,
            kip848_rows,
        ),
        DescribeType::Share => map_rows(
            admin.describe_share_groups(&names, false).await?,
            share_rows,
        ),
        DescribeType::Streams => map_rows(
            admin.describe_streams_groups(&names, false).await?,
            streams_rows,
        ),
    };
    let header = [
        "GROUP",
        "STATE",
        "PROTOCOL",
        "MEMBER",
        "CLIENT-ID",
        "HOST",
        "ASSIGNMENT",
    ];
    let mut out = Described::new("group", "group(s)", &header);
    for (name, d) in described {
        let Some(d) = out.ok(&name, d) else { continue };
        out.push(d.json.clone());
        if d.members.is_empty() {
            out.table.row(vec![
                d.group.clone(),
                d.state.to_string(),
                d.protocol.clone(),
            ]);
        }
        for [member, client, host, assignment] in d.members {
            out.table.row(vec![
                d.group.clone(),
                d.state.to_string(),
                d.protocol.clone(),
                member,
                client,
                host,
                assignment,
            ]);
        }
    }
    out.print(json)
}

async fn lag(admin: &Client, group: &str, committed: bool, json: bool) -> CmdResult {
    let isolation = if committed {
        IsolationLevel::ReadCommitted
    } else {
        IsolationLevel::ReadUncommitted
    };
    let rows = admin.consumer_group_lag(group, isolation).await?;
    let mut failed = 0;
    let mut docs = Vec::new();
    let mut t = Table::new(&["TOPIC", "PARTITION", "COMMITTED", "END", "LAG"]);
    let mut total = 0i64;
    for ((topic, p), r) in rows {
        match r {
            Ok(l) => {
                total += l.lag.unwrap_or(0);
                docs.push(json!({
                    "topic": topic, "partition": p, "committed": l.committed,
                    "end": l.end_offset, "lag": l.lag,
                }));
                t.row(vec![
                    topic,
                    p.to_string(),
                    opt(l.committed),
                    l.end_offset.to_string(),
                    opt(l.lag),
                ]);
            }
            Err(e) => {
                failed += 1;
                eprintln!("kafkit: {topic}/{p}: {e}");
                docs.push(json!({"topic": topic, "partition": p, "error": e.to_string()}));
                t.row(vec![topic, p.to_string(), "error".into()]);
            }
        }
    }
    if json {
        print_json(&json!({"group": group, "partitions": docs, "total_lag": total}));
    } else if docs.is_empty() {
        println!("group {group} has no committed offsets");
    } else {
        t.print();
        println!("total lag: {total}");
    }
    if failed > 0 {
        return Err(Failure::Error(format!(
            "{failed} partition(s) could not be read"
        )));
    }
    Ok(())
}

/// The group must be inactive: no members, state Empty or Dead (Kafka's rule).
async fn check_inactive(admin: &Client, group: &str) -> Result<(), Failure> {
    let mut d = admin.describe_consumer_groups(&[group], false).await?;
    let d = match d.pop() {
        Some((_, d)) => d.map_err(|e| Failure::Error(format!("group {group}: {e}")))?,
        None => return Err(Failure::Error(format!("group {group}: no answer"))),
    };
    let idle = matches!(d.state, GroupState::Empty | GroupState::Dead);
    if idle && d.members.is_empty() {
        return Ok(());
    }
    Err(Failure::Error(format!(
        "group {group} is active (state {}, {} member(s)): offsets can only be reset while it has \
         no members; stop its consumers first",
        d.state,
        d.members.len()
    )))
}

/// How `groups reset-offsets` names a consumer group's offsets.
const RESET_WORDS: ResetWords = ResetWords {
    current: "CURRENT",
    new: "NEW",
    offsets: "committed offsets",
    apply: "commit these offsets",
};

async fn reset(admin: &Client, a: ResetArgs) -> CmdResult {
    // Every argument is checked before the cluster is asked anything (a usage error, exit 2).
    let parsed = a.scope.parse()?;
    check_inactive(admin, &a.group).await?;
    let committed = admin
        .list_consumer_group_offsets(&[ListGroupOffsets::all(a.group.clone())], false)
        .await?
        .pop()
        .map(|(_, r)| r)
        .ok_or_else(|| Failure::Error(format!("group {}: no answer", a.group)))?
        .map_err(|e| Failure::Error(format!("group {}: {e}", a.group)))?;
    let current: BTreeMap<Tp, Option<i64>> = committed
        .iter()
        .map(|(tp, r)| {
            (
                tp.clone(),
                r.as_ref().ok().and_then(|o| o.as_ref().map(|o| o.offset)),
            )
        })
        .collect();
    let known = current.keys().cloned().collect();
    let parts = reset::partitions(admin, &a.group, &a.scope, &parsed, known, &RESET_WORDS).await?;
    let plans = reset::plan(admin, &a.scope, &parsed, &parts, &current).await?;
    let mut results: BTreeMap<Tp, Result<(), String>> = BTreeMap::new();
    let offsets: Vec<(String, i32, OffsetAndMetadata)> = reset::to_apply(&plans)
        .into_iter()
        .map(|((t, p), o)| (t.to_owned(), p, OffsetAndMetadata::new(o)))
        .collect();
    if a.scope.execute && !offsets.is_empty() {
        for (tp, r) in admin
            .alter_consumer_group_offsets(&a.group, &offsets)
            .await?
        {
            results.insert(tp, r.map_err(|e| e.to_string()));
        }
    }
    reset::print(&a.group, &plans, &results, &a.scope, &RESET_WORDS)
}

async fn delete(admin: &Client, groups: &[String], json: bool) -> CmdResult {
    let names: Vec<&str> = groups.iter().map(String::as_str).collect();
    // Brokers refuse a group with members (NON_EMPTY_GROUP), but not every one does (tansu
    // 0.6 deletes it): check first, so a running consumer never loses its group.
    for (name, d) in admin.describe_consumer_groups(&names, false).await? {
        if let Ok(d) = d
            && !d.members.is_empty()
        {
            return Err(Failure::Error(format!(
                "group {name} has {} active member(s) (state {}): stop its consumers first; \
                 nothing was deleted",
                d.members.len(),
                d.state
            )));
        }
    }
    let results = admin.delete_consumer_groups(&names).await?;
    crate::out::outcomes("group", "deleted group", &results, json)
}
