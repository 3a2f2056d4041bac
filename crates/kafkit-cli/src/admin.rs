//! `kafkit topics`, `configs`, `cluster`, `offsets`: the admin client, as aligned tables or
//! `--json`.

use clap::{Args, Subcommand};
use kafkit::admin::{
    AlterConfigOp, ConfigEntry, ConfigResource, DescribeConfigsOptions, NewPartitions, NewTopic,
};
use kafkit::{IsolationLevel, OffsetSpec};
use serde_json::{Value, json};

use crate::conn::Conn;
use crate::out::{Described, Table, print_json};
use crate::{CmdResult, Failure};

/// `kafkit topics`.
#[derive(Debug, Subcommand)]
pub enum TopicsCmd {
    /// List topics with their partition count and replication factor.
    List {
        /// Include internal topics (__consumer_offsets...).
        #[arg(long)]
        internal: bool,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Describe topics: each partition's leader, epoch, replicas, in-sync and offline replicas.
    Describe {
        /// The topics.
        #[arg(required = true)]
        topics: Vec<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Create a topic.
    Create {
        /// The topic.
        topic: String,
        /// Partitions (default: the broker's num.partitions).
        #[arg(short = 'p', long, default_value_t = -1, allow_negative_numbers = true)]
        partitions: i32,
        /// Replication factor (default: the broker's default.replication.factor).
        #[arg(short = 'r', long = "replication-factor", default_value_t = -1, allow_negative_numbers = true)]
        replication_factor: i16,
        /// A topic config, name=value (repeatable).
        #[arg(short = 'c', long = "config", value_name = "NAME=VALUE")]
        configs: Vec<String>,
        /// Only ask the broker whether it would create it.
        #[arg(long)]
        validate_only: bool,
        /// Succeed (exit 0, "exists topic NAME") when the topic exists already
        /// (TOPIC_ALREADY_EXISTS); its partitions and configs are not compared.
        #[arg(long)]
        if_not_exists: bool,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Delete topics.
    Delete {
        /// The topics.
        #[arg(required = true)]
        topics: Vec<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Add partitions and set or delete topic configs.
    Alter {
        /// The topic.
        topic: String,
        /// The new (larger) partition count.
        #[arg(short = 'p', long)]
        partitions: Option<i32>,
        #[command(flatten)]
        change: ConfigChange,
    },
}

/// What `topics alter` and `configs alter` change, and how they answer.
#[derive(Debug, Args)]
pub struct ConfigChange {
    /// Set a config, name=value (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
    /// Delete a config back to its default (repeatable).
    #[arg(long = "delete", value_name = "NAME")]
    delete: Vec<String>,
    /// Only ask the broker whether it would do it.
    #[arg(long)]
    validate_only: bool,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

impl ConfigChange {
    /// The --set and --delete operations.
    fn ops(&self) -> Result<Vec<AlterConfigOp>, Failure> {
        alter_ops(&self.set, &self.delete)
    }

    /// Prints the outcomes ("altered NAME", "would alter NAME" with --validate-only).
    fn report<T, E: std::fmt::Display>(&self, results: Vec<(String, Result<T, E>)>) -> CmdResult {
        let what = if self.validate_only {
            "would alter"
        } else {
            "altered"
        };
        outcomes(what, results, self.json)
    }
}

/// The resource of `kafkit configs`.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct ResourceArgs {
    /// A topic's configs (the same as --topic TOPIC).
    #[arg(value_name = "TOPIC")]
    name: Option<String>,
    /// A topic's configs.
    #[arg(long)]
    topic: Option<String>,
    /// A broker's configs (its node id).
    #[arg(long)]
    broker: Option<i32>,
    /// The cluster-wide broker defaults.
    #[arg(long)]
    broker_defaults: bool,
}

impl ResourceArgs {
    fn resource(&self) -> ConfigResource {
        match (self.topic.as_ref().or(self.name.as_ref()), self.broker) {
            (Some(t), _) => ConfigResource::topic(t.clone()),
            (None, Some(b)) => ConfigResource::broker(b),
            (None, None) => ConfigResource::broker_default(),
        }
    }
}

/// `kafkit configs`.
#[derive(Debug, Subcommand)]
pub enum ConfigsCmd {
    /// Describe the configs of a topic or broker (without --all: those not at their default).
    Describe {
        #[command(flatten)]
        resource: ResourceArgs,
        /// Every config, defaults included.
        #[arg(long)]
        all: bool,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Set or delete configs of a topic or broker (IncrementalAlterConfigs).
    Alter {
        #[command(flatten)]
        resource: ResourceArgs,
        #[command(flatten)]
        change: ConfigChange,
    },
    /// List the resources that have configs (ListConfigResources, KIP-1142).
    List {
        /// Only resources of this type (repeatable; default: every type).
        #[arg(long = "type", value_enum, value_name = "TYPE")]
        types: Vec<ResourceKind>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

/// A resource type of `configs list --type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ResourceKind {
    /// Topics.
    Topic,
    /// Brokers.
    Broker,
    /// Groups.
    Group,
    /// Client metrics subscriptions (KIP-714).
    ClientMetrics,
}

/// The name `configs list` prints for a resource type.
fn kind_name(t: kafkit::admin::ConfigResourceType) -> &'static str {
    use kafkit::admin::ConfigResourceType as T;
    match t {
        T::Topic => "topic",
        T::Broker => "broker",
        T::BrokerLogger => "broker-logger",
        T::ClientMetrics => "client-metrics",
        T::Group => "group",
        _ => "unknown",
    }
}

/// `kafkit cluster`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// List the fenced brokers too (DescribeCluster v2, KIP-1073).
    #[arg(long)]
    fenced: bool,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

/// `kafkit offsets`.
#[derive(Debug, Args)]
pub struct OffsetsArgs {
    /// The topic.
    topic: String,
    /// Only these partitions (comma-separated or repeated).
    #[arg(short = 'p', long = "partition", value_delimiter = ',')]
    partitions: Vec<i32>,
    /// Also the first offset at or after this timestamp (ms since the epoch).
    #[arg(long = "at", value_name = "TIMESTAMP")]
    at: Option<i64>,
    /// Offsets read_committed consumers see (the last stable offset as the end).
    #[arg(long)]
    committed: bool,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

fn pairs(items: &[String], what: &str) -> Result<Vec<(String, String)>, Failure> {
    items
        .iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
                .ok_or_else(|| Failure::Usage(format!("{what} takes name=value, got {s:?}")))
        })
        .collect()
}

/// Prints per-resource outcomes (`{"name", "ok"}` with --json); fails when any failed.
fn outcomes<T, E: std::fmt::Display>(
    what: &str,
    results: Vec<(String, Result<T, E>)>,
    json: bool,
) -> CmdResult {
    crate::out::outcomes("name", what, &results, json)
}

/// Runs `kafkit topics ...`.
pub async fn topics(conn: &Conn, cmd: TopicsCmd) -> CmdResult {
    let admin = conn.admin()?;
    match cmd {
        TopicsCmd::List { internal, json } => {
            let listed = admin.list_topics(internal).await?;
            let names: Vec<&str> = listed.iter().map(|t| t.name.as_str()).collect();
            let described = if names.is_empty() {
                Vec::new()
            } else {
                admin.describe_topics(&names, false).await?
            };
            let rows: Vec<(String, usize, usize, bool)> = described
                .into_iter()
                .filter_map(|(n, d)| d.ok().map(|d| (n, d)))
                .map(|(n, d)| {
                    let rf = d
                        .partitions
                        .iter()
                        .map(|p| p.replicas.len())
                        .max()
                        .unwrap_or(0);
                    (n, d.partitions.len(), rf, d.is_internal)
                })
                .collect();
            if json {
                print_json(&Value::Array(
                    rows.iter()
                        .map(|(n, p, rf, i)| {
                            json!({"name": n, "partitions": p, "replication_factor": rf, "internal": i})
                        })
                        .collect(),
                ));
            } else {
                let mut t = Table::new(&["TOPIC", "PARTITIONS", "REPLICATION"]);
                for (n, p, rf, _) in rows {
                    t.row(vec![n, p.to_string(), rf.to_string()]);
                }
                t.print();
            }
            Ok(())
        }
        TopicsCmd::Describe { topics, json } => {
            let names: Vec<&str> = topics.iter().map(String::as_str).collect();
            let described = admin.describe_topics(&names, false).await?;
            let header = [
                "TOPIC",
                "PARTITION",
                "LEADER",
                "EPOCH",
                "REPLICAS",
                "ISR",
                "OFFLINE",
            ];
            let mut out = Described::new("name", "topic(s)", &header);
            for (name, d) in described {
                let Some(d) = out.ok(&name, d) else { continue };
                let mut parts = Vec::new();
                for p in &d.partitions {
                    out.table.row(vec![
                        name.clone(),
                        p.partition.to_string(),
                        p.leader_id.to_string(),
                        p.leader_epoch.to_string(),
                        ids(&p.replicas),
                        ids(&p.isr),
                        ids(&p.offline_replicas),
                    ]);
                    parts.push(json!({
                        "partition": p.partition, "leader": p.leader_id,
                        "leader_epoch": p.leader_epoch, "replicas": p.replicas, "isr": p.isr,
                        "offline_replicas": p.offline_replicas,
                        "error": (!p.error_code.is_ok()).then(|| p.error_code.to_string()),
                    }));
                }
                out.push(json!({
                    "name": name, "topic_id": d.topic_id.to_string(), "internal": d.is_internal,
                    "partitions": parts,
                }));
            }
            out.print(json)
        }
        TopicsCmd::Create {
            topic,
            partitions,
            replication_factor,
            configs,
            validate_only,
            if_not_exists,
            json,
        } => {
            let mut nt = NewTopic::new(topic, partitions, replication_factor);
            for (k, v) in pairs(&configs, "--config")? {
                nt = nt.config(k, v);
            }
            let r = admin.create_topics(&[nt], validate_only).await?;
            let exists = |r: &kafkit::Result<_>| {
                r.as_ref().is_err_and(|e: &kafkit::Error| {
                    e.error_code() == Some(kafkit::ErrorCode::TOPIC_ALREADY_EXISTS)
                })
            };
            if if_not_exists && r.iter().all(|(_, r)| exists(r)) {
                let ok: Vec<(String, Result<(), kafkit::Error>)> =
                    r.into_iter().map(|(n, _)| (n, Ok(()))).collect();
                return outcomes("exists topic", ok, json);
            }
            if !if_not_exists && r.iter().any(|(_, r)| exists(r)) {
                eprintln!("kafkit: --if-not-exists accepts a topic that exists");
            }
            let what = if validate_only {
                "would create topic"
            } else {
                "created topic"
            };
            outcomes(what, r, json)
        }
        TopicsCmd::Delete { topics, json } => {
            let names: Vec<&str> = topics.iter().map(String::as_str).collect();
            outcomes("deleted topic", admin.delete_topics(&names).await?, json)
        }
        TopicsCmd::Alter {
            topic,
            partitions,
            change,
        } => {
            let validate_only = change.validate_only;
            if partitions.is_none() && change.set.is_empty() && change.delete.is_empty() {
                return Err(Failure::Usage(
                    "topics alter needs --partitions, --set or --delete".into(),
                ));
            }
            let ops = change.ops()?;
            let mut results = Vec::new();
            if let Some(n) = partitions {
                let r = admin
                    .create_partitions(
                        &[(topic.as_str(), NewPartitions::increase_to(n))],
                        validate_only,
                    )
                    .await?;
                results.extend(r.into_iter().map(|(n, r)| (format!("{n} (partitions)"), r)));
            }
            if !ops.is_empty() {
                let r = admin
                    .incremental_alter_configs(
                        &[(ConfigResource::topic(topic.clone()), ops)],
                        validate_only,
                    )
                    .await?;
                results.extend(
                    r.into_iter()
                        .map(|(_, r)| (format!("{topic} (configs)"), r)),
                );
            }
            change.report(results)
        }
    }
}

fn alter_ops(set: &[String], delete: &[String]) -> Result<Vec<AlterConfigOp>, Failure> {
    let mut ops: Vec<AlterConfigOp> = pairs(set, "--set")?
        .into_iter()
        .map(|(k, v)| AlterConfigOp::set(k, v))
        .collect();
    ops.extend(delete.iter().map(AlterConfigOp::delete));
    Ok(ops)
}

fn ids(v: &[i32]) -> String {
    v.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

fn entry_json(e: &ConfigEntry) -> Value {
    json!({
        "name": e.name, "value": e.value, "source": format!("{:?}", e.source),
        "default": e.is_default, "read_only": e.is_read_only, "sensitive": e.is_sensitive,
    })
}

/// Runs `kafkit configs ...`.
pub async fn configs(conn: &Conn, cmd: ConfigsCmd) -> CmdResult {
    let admin = conn.admin()?;
    match cmd {
        ConfigsCmd::List { types, json } => {
            use kafkit::admin::ConfigResourceType as T;
            let types: Vec<T> = types
                .iter()
                .map(|t| match t {
                    ResourceKind::Topic => T::Topic,
                    ResourceKind::Broker => T::Broker,
                    ResourceKind::Group => T::Group,
                    ResourceKind::ClientMetrics => T::ClientMetrics,
                })
                .collect();
            let mut resources = admin.list_config_resources(&types).await?;
            resources.sort();
            if json {
                print_json(&Value::Array(
                    resources
                        .iter()
                        .map(|r| json!({"type": kind_name(r.resource_type), "name": r.name}))
                        .collect(),
                ));
            } else {
                let mut t = Table::new(&["TYPE", "NAME"]);
                for r in &resources {
                    t.row(vec![kind_name(r.resource_type).to_owned(), r.name.clone()]);
                }
                t.print();
            }
            Ok(())
        }
        ConfigsCmd::Describe {
            resource,
            all,
            json,
        } => {
            let res = resource.resource();
            let mut r = admin
                .describe_configs(
                    std::slice::from_ref(&res),
                    DescribeConfigsOptions::default(),
                )
                .await?;
            let entries = match r.pop() {
                Some((_, entries)) => entries?,
                None => Vec::new(),
            };
            let shown: Vec<&ConfigEntry> =
                entries.iter().filter(|e| all || !e.is_default).collect();
            if json {
                print_json(&Value::Array(shown.iter().map(|e| entry_json(e)).collect()));
            } else {
                let mut t = Table::new(&["NAME", "VALUE", "SOURCE", "READ-ONLY"]);
                for e in shown {
                    let value = match (&e.value, e.is_sensitive) {
                        (_, true) => "(sensitive)".to_owned(),
                        (Some(v), false) => v.clone(),
                        (None, false) => "(null)".to_owned(),
                    };
                    t.row(vec![
                        e.name.clone(),
                        value,
                        format!("{:?}", e.source),
                        if e.is_read_only {
                            "yes".into()
                        } else {
                            "no".into()
                        },
                    ]);
                }
                t.print();
            }
            Ok(())
        }
        ConfigsCmd::Alter { resource, change } => {
            let ops = change.ops()?;
            if ops.is_empty() {
                return Err(Failure::Usage(
                    "configs alter needs --set or --delete".into(),
                ));
            }
            let res = resource.resource();
            let r = admin
                .incremental_alter_configs(&[(res, ops)], change.validate_only)
                .await?;
            let r = r
                .into_iter()
                .map(|(res, r)| (format!("{:?} {}", res.resource_type, res.name), r))
                .collect();
            change.report(r)
        }
    }
}

/// Runs `kafkit cluster`.
pub async fn cluster(conn: &Conn, a: ClusterArgs) -> CmdResult {
    let admin = conn.admin()?;
    let c = if a.fenced {
        admin
            .describe_cluster_with(
                kafkit::admin::DescribeClusterOptions::new().include_fenced_brokers(true),
            )
            .await?
    } else {
        admin.describe_cluster(false).await?
    };
    let fenced = |id: i32| c.fenced_brokers.contains(&id);
    // Features come from one broker's ApiVersions; a broker without v3 sends none.
    let features = admin.describe_features().await.ok();
    if a.json {
        print_json(&json!({
            "cluster_id": c.cluster_id,
            "controller_id": c.controller_id,
            "brokers": c.brokers.iter().map(|b| json!({
                "node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
                "fenced": fenced(b.node_id),
            })).collect::<Vec<_>>(),
            "features": features.as_ref().map(|f| f.finalized.iter().map(|x| json!({
                "name": x.name, "min_version_level": x.min_version_level,
                "max_version_level": x.max_version_level,
            })).collect::<Vec<_>>()),
        }));
        return Ok(());
    }
    println!(
        "cluster id: {}",
        c.cluster_id.as_deref().unwrap_or("(none)")
    );
    println!(
        "controller: {}",
        c.controller_id
            .map_or("(unknown)".into(), |i| i.to_string())
    );
    let mut header = vec!["BROKER", "HOST", "PORT", "RACK", "CONTROLLER"];
    if a.fenced {
        header.push("FENCED");
    }
    let mut t = Table::new(&header);
    for b in &c.brokers {
        let mut row = vec![
            b.node_id.to_string(),
            b.host.clone(),
            b.port.to_string(),
            b.rack.clone().unwrap_or_default(),
            if c.controller_id == Some(b.node_id) {
                "*".into()
            } else {
                String::new()
            },
        ];
        if a.fenced {
            row.push(if fenced(b.node_id) { "yes" } else { "no" }.into());
        }
        t.row(row);
    }
    t.print();
    if let Some(f) = features.filter(|f| !f.finalized.is_empty()) {
        let mut t = Table::new(&["FEATURE", "LEVEL"]);
        for x in &f.finalized {
            t.row(vec![x.name.clone(), x.max_version_level.to_string()]);
        }
        println!();
        t.print();
    }
    Ok(())
}

/// Runs `kafkit offsets`.
pub async fn offsets(conn: &Conn, a: OffsetsArgs) -> CmdResult {
    let admin = conn.admin()?;
    let mut d = admin.describe_topics(&[a.topic.as_str()], false).await?;
    let desc = match d.pop() {
        Some((_, d)) => d.map_err(|e| Failure::Error(format!("topic {}: {e}", a.topic)))?,
        None => return Err(Failure::Error(format!("topic {}: no answer", a.topic))),
    };
    let parts: Vec<i32> = desc
        .partitions
        .iter()
        .map(|p| p.partition)
        .filter(|p| a.partitions.is_empty() || a.partitions.contains(p))
        .collect();
    let isolation = if a.committed {
        IsolationLevel::ReadCommitted
    } else {
        IsolationLevel::ReadUncommitted
    };
    let mut specs = vec![OffsetSpec::Earliest, OffsetSpec::Latest];
    if let Some(ts) = a.at {
        specs.push(OffsetSpec::Timestamp(ts));
    }
    let mut columns: Vec<Vec<String>> = Vec::new();
    for spec in &specs {
        let ask: Vec<(&str, i32, OffsetSpec)> = parts
            .iter()
            .map(|p| (a.topic.as_str(), *p, *spec))
            .collect();
        let got = admin.list_offsets(&ask, isolation).await?;
        columns.push(
            got.into_iter()
                .map(|(_, r)| match r {
                    Ok(o) => o.offset.to_string(),
                    Err(e) => format!("error: {e}"),
                })
                .collect(),
        );
    }
    if a.json {
        let rows: Vec<Value> = parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let num = |c: usize| -> Value {
                    columns[c][i]
                        .parse::<i64>()
                        .map_or(Value::String(columns[c][i].clone()), Value::from)
                };
                let mut v =
                    json!({"topic": a.topic, "partition": p, "earliest": num(0), "latest": num(1)});
                if a.at.is_some() {
                    v["at"] = num(2);
                }
                v
            })
            .collect();
        print_json(&Value::Array(rows));
        return Ok(());
    }
    let mut header = vec!["TOPIC", "PARTITION", "EARLIEST", "LATEST"];
    if a.at.is_some() {
        header.push("AT");
    }
    let mut t = Table::new(&header);
    for (i, p) in parts.iter().enumerate() {
        let mut row = vec![a.topic.clone(), p.to_string()];
        row.extend(columns.iter().map(|c| c[i].clone()));
        t.row(row);
    }
    t.print();
    Ok(())
}
