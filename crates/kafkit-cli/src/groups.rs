//! `kafkit groups list|describe|lag|reset-offsets|delete`: consumer groups through the admin
//! client, as aligned tables or `--json`. `list --type` and `describe --type` reach the other
//! group types of Kafka 4.x (KIP-848 consumer groups, KIP-932 share groups, KIP-1071 streams
//! groups). `reset-offsets` plans the new offsets and prints them
//! (a dry run) unless `--execute` is given, and refuses a group with active members, as Kafka's
//! `kafka-consumer-groups.sh --reset-offsets` does.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use kafkit::admin::{CommittedOffsets, OffsetAndMetadata};
use kafkit::admin::{ConsumerGroupDescription, GroupState, ListGroupOffsets, ListGroupsOptions};
use kafkit::{Client, IsolationLevel, OffsetSpec};
use serde_json::{Value, json};

use crate::conn::Conn;
use crate::out::{Described, Table, print_json};
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

/// Where `reset-offsets` moves each partition.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct ResetTo {
    /// To each partition's log start offset.
    #[arg(long)]
    to_earliest: bool,
    /// To each partition's end offset.
    #[arg(long)]
    to_latest: bool,
    /// To this offset (kept within each partition's earliest..=latest).
    #[arg(long, value_name = "OFFSET")]
    to_offset: Option<i64>,
    /// To the first offset at or after this time: ms since the epoch, or
    /// YYYY-MM-DDTHH:MM:SS[.sss] (UTC, an optional trailing Z).
    #[arg(long, value_name = "TIME")]
    to_datetime: Option<String>,
    /// By N from the committed offset (negative: back; kept within earliest..=latest).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    shift_by: Option<i64>,
}

/// `kafkit groups reset-offsets`.
#[derive(Debug, Args)]
pub struct ResetArgs {
    /// The group.
    group: String,
    /// A topic, or TOPIC:P,P for some of its partitions (repeatable).
    #[arg(
        long = "topic",
        value_name = "TOPIC[:P,P]",
        required_unless_present = "all_topics"
    )]
    topics: Vec<String>,
    /// Every topic the group has committed offsets for.
    #[arg(long, conflicts_with = "topics")]
    all_topics: bool,
    #[command(flatten)]
    to: ResetTo,
    /// Commit the new offsets (without it: a dry run that changes nothing).
    #[arg(long)]
    execute: bool,
    /// JSON output.
    #[arg(long)]
    json: bool,
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

async fn list(admin: &Client, types: &[GroupType], states: &[String], json: bool) -> CmdResult {
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
fn topics_text(a: &[kafkit::admin::TopicPartitions]) -> String {
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
        json: json!({
            "group": d.group_id, "state": d.state.as_str(), "type": "share",
            "assignor": d.assignor_name, "group_epoch": d.group_epoch,
            "assignment_epoch": d.assignment_epoch,
            "members": d.members.iter().map(|m| json!({
                "member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
                "member_epoch": m.member_epoch, "subscription": m.subscribed_topic_names,
                "assignment": topics_text(&m.assignment),
            })).collect::<Vec<_>>(),
        }),
    }
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

fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
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

/// `--topic TOPIC[:P,P]`.
fn parse_topic(s: &str) -> Result<(String, Vec<i32>), Failure> {
    let Some((t, ps)) = s.split_once(':') else {
        return Ok((s.to_owned(), Vec::new()));
    };
    let parts = ps
        .split(',')
        .map(|p| p.trim().parse::<i32>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| {
            Failure::Usage(format!(
                "--topic {s:?}: expected TOPIC or TOPIC:P,P with partition numbers"
            ))
        })?;
    if t.is_empty() {
        return Err(Failure::Usage(format!("--topic {s:?}: no topic name")));
    }
    Ok((t.to_owned(), parts))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `--to-datetime`: ms since the epoch, or `YYYY-MM-DDTHH:MM:SS[.sss][Z]` in UTC.
pub fn parse_datetime(s: &str) -> Result<i64, Failure> {
    let bad = || {
        Failure::Usage(format!(
            "--to-datetime {s:?}: expected ms since the epoch or YYYY-MM-DDTHH:MM:SS[.sss] (UTC)"
        ))
    };
    if let Ok(ms) = s.parse::<i64>() {
        return if ms >= 0 { Ok(ms) } else { Err(bad()) };
    }
    let s2 = s.strip_suffix('Z').unwrap_or(s);
    let (date, time) = s2.split_once('T').ok_or_else(bad)?;
    let num = |x: &str, len: usize| -> Result<i64, Failure> {
        if x.len() != len || !x.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        x.parse().map_err(|_| bad())
    };
    let d: Vec<&str> = date.split('-').collect();
    let (time, frac) = time.split_once('.').unwrap_or((time, ""));
    let t: Vec<&str> = time.split(':').collect();
    if d.len() != 3 || t.len() != 3 || frac.len() > 3 {
        return Err(bad());
    }
    let (y, mo, da) = (num(d[0], 4)?, num(d[1], 2)?, num(d[2], 2)?);
    let (h, mi, se) = (num(t[0], 2)?, num(t[1], 2)?, num(t[2], 2)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&da) || h > 23 || mi > 59 || se > 60 {
        return Err(bad());
    }
    let ms = if frac.is_empty() {
        0
    } else {
        num(frac, frac.len())? * 10i64.pow(3 - frac.len() as u32)
    };
    let secs = days_from_civil(y, mo, da) * 86_400 + h * 3600 + mi * 60 + se;
    Ok(secs * 1000 + ms)
}

/// One partition's plan.
struct Plan {
    topic: String,
    partition: i32,
    current: Option<i64>,
    new: Result<i64, String>,
}

/// The partitions to reset: those named (all of a topic's without a list), or with
/// `--all-topics` every partition the group committed for.
async fn reset_partitions(
    admin: &Client,
    all_topics: bool,
    named: &[(String, Vec<i32>)],
    committed: &CommittedOffsets,
) -> Result<Vec<(String, i32)>, Failure> {
    if all_topics {
        let mut v: Vec<(String, i32)> = committed.iter().map(|(tp, _)| tp.clone()).collect();
        v.sort();
        return Ok(v);
    }
    let names: Vec<&str> = named.iter().map(|(t, _)| t.as_str()).collect();
    let mut names_dedup = names.clone();
    names_dedup.sort_unstable();
    names_dedup.dedup();
    let described = admin.describe_topics(&names_dedup, false).await?;
    let mut out = Vec::new();
    for (t, only) in named {
        let d = described
            .iter()
            .find(|(n, _)| n == t)
            .map(|(_, d)| d)
            .ok_or_else(|| Failure::Error(format!("topic {t}: no answer")))?;
        let d = d
            .as_ref()
            .map_err(|e| Failure::Error(format!("topic {t}: {e}")))?;
        for p in only {
            if !d.partitions.iter().any(|m| m.partition == *p) {
                return Err(Failure::Error(format!(
                    "topic {t} has no partition {p} ({} partitions)",
                    d.partitions.len()
                )));
            }
        }
        out.extend(
            d.partitions
                .iter()
                .map(|m| m.partition)
                .filter(|p| only.is_empty() || only.contains(p))
                .map(|p| (t.clone(), p)),
        );
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// `(topic, partition) -> offset` under `spec` for `parts` (errors as text).
async fn offsets_at(
    admin: &Client,
    parts: &[(String, i32)],
    spec: OffsetSpec,
) -> Result<BTreeMap<(String, i32), Result<i64, String>>, Failure> {
    let ask: Vec<(&str, i32, OffsetSpec)> =
        parts.iter().map(|(t, p)| (t.as_str(), *p, spec)).collect();
    Ok(admin
        .list_offsets(&ask, IsolationLevel::ReadUncommitted)
        .await?
        .into_iter()
        .map(|(tp, r)| (tp, r.map(|o| o.offset).map_err(|e| e.to_string())))
        .collect())
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

async fn reset(admin: &Client, a: ResetArgs) -> CmdResult {
    // Every argument is checked before the cluster is asked anything (a usage error, exit 2).
    let named: Vec<(String, Vec<i32>)> = a
        .topics
        .iter()
        .map(|s| parse_topic(s))
        .collect::<Result<_, _>>()?;
    let at_ms =
        a.to.to_datetime
            .as_deref()
            .map(parse_datetime)
            .transpose()?;
    check_inactive(admin, &a.group).await?;
    let committed = admin
        .list_consumer_group_offsets(&[ListGroupOffsets::all(a.group.clone())], false)
        .await?
        .pop()
        .map(|(_, r)| r)
        .ok_or_else(|| Failure::Error(format!("group {}: no answer", a.group)))?
        .map_err(|e| Failure::Error(format!("group {}: {e}", a.group)))?;
    let parts = reset_partitions(admin, a.all_topics, &named, &committed).await?;
    if parts.is_empty() {
        return Err(Failure::Error(format!(
            "group {} has no committed offsets to reset (name the topics with --topic)",
            a.group
        )));
    }
    let current: BTreeMap<(String, i32), Option<i64>> = committed
        .iter()
        .map(|(tp, r)| {
            (
                tp.clone(),
                r.as_ref().ok().and_then(|o| o.as_ref().map(|o| o.offset)),
            )
        })
        .collect();
    let earliest = offsets_at(admin, &parts, OffsetSpec::Earliest).await?;
    let latest = offsets_at(admin, &parts, OffsetSpec::Latest).await?;
    let at = match at_ms {
        Some(ms) => Some(offsets_at(admin, &parts, OffsetSpec::Timestamp(ms)).await?),
        None => None,
    };
    let mut plans = Vec::new();
    for tp in &parts {
        let cur = current.get(tp).copied().flatten();
        let answer = |m: &BTreeMap<(String, i32), Result<i64, String>>| {
            m.get(tp)
                .cloned()
                .unwrap_or_else(|| Err("no ListOffsets answer".into()))
        };
        let (lo, hi) = (answer(&earliest), answer(&latest));
        let new = lo.and_then(|lo| {
            hi.and_then(|hi| {
                let clamp = |o: i64| o.clamp(lo, hi.max(lo));
                if a.to.to_earliest {
                    Ok(lo)
                } else if a.to.to_latest {
                    Ok(hi)
                } else if let Some(o) = a.to.to_offset {
                    Ok(clamp(o))
                } else if let Some(n) = a.to.shift_by {
                    cur.map(|c| clamp(c.saturating_add(n)))
                        .ok_or_else(|| "no committed offset to shift".to_owned())
                } else {
                    // --to-datetime: no record at or after it means the end (as Kafka does).
                    match at.as_ref().and_then(|m| m.get(tp)) {
                        Some(Ok(o)) if *o >= 0 => Ok(*o),
                        Some(Ok(_)) | None => Ok(hi),
                        Some(Err(e)) => Err(e.clone()),
                    }
                }
            })
        });
        plans.push(Plan {
            topic: tp.0.clone(),
            partition: tp.1,
            current: cur,
            new,
        });
    }
    let mut results: BTreeMap<(String, i32), Result<(), String>> = BTreeMap::new();
    if a.execute {
        let offsets: Vec<(String, i32, OffsetAndMetadata)> = plans
            .iter()
            .filter_map(|p| {
                p.new
                    .as_ref()
                    .ok()
                    .map(|o| (p.topic.clone(), p.partition, OffsetAndMetadata::new(*o)))
            })
            .collect();
        if !offsets.is_empty() {
            for (tp, r) in admin
                .alter_consumer_group_offsets(&a.group, &offsets)
                .await?
            {
                results.insert(tp, r.map_err(|e| e.to_string()));
            }
        }
    }
    let mut failed = 0;
    let mut docs = Vec::new();
    let mut t = Table::new(&["GROUP", "TOPIC", "PARTITION", "CURRENT", "NEW"]);
    for p in &plans {
        let key = (p.topic.clone(), p.partition);
        let outcome = match (&p.new, results.get(&key)) {
            (Err(e), _) | (Ok(_), Some(Err(e))) => Some(e.clone()),
            _ => None,
        };
        if let Some(e) = &outcome {
            failed += 1;
            eprintln!("kafkit: {}/{}: {e}", p.topic, p.partition);
        }
        docs.push(json!({
            "topic": p.topic, "partition": p.partition, "current": p.current,
            "new": p.new.as_ref().ok(), "error": outcome,
        }));
        t.row(vec![
            a.group.clone(),
            p.topic.clone(),
            p.partition.to_string(),
            opt(p.current),
            p.new
                .as_ref()
                .map_or_else(|_| "error".into(), i64::to_string),
        ]);
    }
    if a.json {
        print_json(&json!({"group": a.group, "executed": a.execute, "partitions": docs}));
    } else {
        t.print();
    }
    if !a.execute {
        eprintln!("kafkit: dry run, nothing changed: add --execute to commit these offsets");
    }
    if failed > 0 {
        return Err(Failure::Error(format!(
            "{failed} partition(s) could not be reset"
        )));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetimes_parse_as_utc() {
        assert_eq!(parse_datetime("0").ok(), Some(0));
        assert_eq!(
            parse_datetime("1700000000000").ok(),
            Some(1_700_000_000_000)
        );
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20").ok(),
            Some(1_700_000_000_000)
        );
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20.5Z").ok(),
            Some(1_700_000_000_500)
        );
        assert_eq!(parse_datetime("1970-01-01T00:00:00.001").ok(), Some(1));
        assert_eq!(
            parse_datetime("2000-03-01T00:00:00").ok(),
            Some(951_868_800_000)
        );
        for bad in [
            "-1",
            "2023-13-01T00:00:00",
            "2023-1-01T00:00:00",
            "yesterday",
            "2023-11-14",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn topics_take_partition_lists() {
        assert_eq!(parse_topic("t").ok(), Some(("t".into(), vec![])));
        assert_eq!(
            parse_topic("a.b:0,2").ok(),
            Some(("a.b".into(), vec![0, 2]))
        );
        assert!(parse_topic("t:x").is_err());
        assert!(parse_topic(":1").is_err());
    }
}
