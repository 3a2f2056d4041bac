//! `kafkit acls list|create|delete`: ACL bindings through DescribeAcls, CreateAcls and
//! DeleteAcls (KIP-140; prefixed patterns KIP-290), with the options of Kafka's
//! `kafka-acls.sh` (a resource, `--principal`, `--operation`, `--host`, allow or deny).
//!
//! A cluster without an authorizer, or a broker without the API, gets a message that says so
//! (exit 1), not a raw error code.

use clap::{Args, Subcommand, ValueEnum};
use kafkit::Error;
use kafkit::ErrorCode;
use kafkit::admin::{
    AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType,
    ResourcePattern, ResourceType,
};
use serde_json::{Value, json};

use crate::conn::Conn;
use crate::out::{Table, print_json};
use crate::{CmdResult, Failure};

/// `--operation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "PascalCase")]
pub enum Operation {
    /// Every operation.
    All,
    /// Read.
    Read,
    /// Write.
    Write,
    /// Create.
    Create,
    /// Delete.
    Delete,
    /// Alter.
    Alter,
    /// Describe.
    Describe,
    /// Cluster actions (broker to broker).
    ClusterAction,
    /// Describe configs.
    DescribeConfigs,
    /// Alter configs.
    AlterConfigs,
    /// Idempotent produce.
    IdempotentWrite,
}

impl Operation {
    fn op(self) -> AclOperation {
        match self {
            Operation::All => AclOperation::All,
            Operation::Read => AclOperation::Read,
            Operation::Write => AclOperation::Write,
            Operation::Create => AclOperation::Create,
            Operation::Delete => AclOperation::Delete,
            Operation::Alter => AclOperation::Alter,
            Operation::Describe => AclOperation::Describe,
            Operation::ClusterAction => AclOperation::ClusterAction,
            Operation::DescribeConfigs => AclOperation::DescribeConfigs,
            Operation::AlterConfigs => AclOperation::AlterConfigs,
            Operation::IdempotentWrite => AclOperation::IdempotentWrite,
        }
    }
}

/// `--pattern`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    /// The name is the resource's name (`*`: every resource of the type).
    Literal,
    /// The name is a prefix of resource names.
    Prefixed,
    /// (list, delete) Every binding that applies to the named resource.
    Match,
    /// (list, delete) Literal and prefixed bindings.
    Any,
}

/// The resource of an ACL (at most one).
#[derive(Debug, Args)]
#[group(multiple = false)]
pub struct Resource {
    /// A topic (`*` for every topic).
    #[arg(long)]
    topic: Option<String>,
    /// A consumer group (`*` for every group).
    #[arg(long)]
    group: Option<String>,
    /// A transactional id.
    #[arg(long)]
    transactional_id: Option<String>,
    /// The cluster.
    #[arg(long)]
    cluster: bool,
}

impl Resource {
    fn get(&self) -> Option<(ResourceType, String)> {
        if let Some(t) = &self.topic {
            Some((ResourceType::Topic, t.clone()))
        } else if let Some(g) = &self.group {
            Some((ResourceType::Group, g.clone()))
        } else if let Some(x) = &self.transactional_id {
            Some((ResourceType::TransactionalId, x.clone()))
        } else if self.cluster {
            Some((ResourceType::Cluster, "kafka-cluster".into()))
        } else {
            None
        }
    }
}

/// The options of `list` and `delete`: a filter.
#[derive(Debug, Args)]
pub struct FilterArgs {
    #[command(flatten)]
    resource: Resource,
    /// How the resource name matches (default: literal for delete, any for list).
    #[arg(long, value_enum)]
    pattern: Option<Pattern>,
    /// Only bindings of this principal (e.g. User:alice).
    #[arg(long)]
    principal: Option<String>,
    /// Only bindings of this operation.
    #[arg(long, value_enum)]
    operation: Option<Operation>,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

/// `kafkit acls`.
#[derive(Debug, Subcommand)]
pub enum AclsCmd {
    /// List the ACL bindings matching the options (all without any).
    List(FilterArgs),
    /// Create bindings: PRINCIPAL may (or, with --deny, may not) do OPERATIONs on a resource.
    Create {
        #[command(flatten)]
        resource: Resource,
        /// literal or prefixed.
        #[arg(long, value_enum, default_value = "literal")]
        pattern: Pattern,
        /// The principal, e.g. User:alice.
        #[arg(long, required = true)]
        principal: String,
        /// The operations (comma-separated or repeated).
        #[arg(long, value_enum, value_delimiter = ',', required = true)]
        operation: Vec<Operation>,
        /// The client host (default: any).
        #[arg(long, default_value = "*")]
        host: String,
        /// Deny instead of allow.
        #[arg(long)]
        deny: bool,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Delete the bindings matching the options (a resource is required).
    Delete(FilterArgs),
}

fn pattern_type(p: Pattern) -> PatternType {
    match p {
        Pattern::Literal => PatternType::Literal,
        Pattern::Prefixed => PatternType::Prefixed,
        Pattern::Match => PatternType::Match,
        Pattern::Any => PatternType::Any,
    }
}

fn filter(a: &FilterArgs, default_pattern: Pattern) -> AclBindingFilter {
    let mut f = AclBindingFilter::any();
    if let Some((rt, name)) = a.resource.get() {
        f = f.resource(rt, name, pattern_type(a.pattern.unwrap_or(default_pattern)));
    } else if let Some(p) = a.pattern {
        f.pattern_type = pattern_type(p);
    }
    if let Some(p) = &a.principal {
        f = f.principal(p.clone());
    }
    if let Some(o) = a.operation {
        f.operation = o.op();
    }
    f
}

/// A message for an ACL operation's failure that says what the cluster lacks.
fn acl_failure(api: &str, e: Error) -> Failure {
    match &e {
        Error::UnsupportedVersion { broker: None, .. } => Failure::Error(format!(
            "the cluster does not support ACLs: the broker does not offer {api}"
        )),
        Error::Broker { code, .. } if *code == ErrorCode::SECURITY_DISABLED => {
            Failure::Error(format!(
                "the cluster has no authorizer configured, so it keeps no ACLs ({api}: {code})"
            ))
        }
        Error::Decode(_) => Failure::Error(format!(
            "the broker's {api} answer could not be read, so its ACL support cannot be trusted: {e}"
        )),
        _ => Failure::from(e),
    }
}

fn binding_row(b: &AclBinding) -> Vec<String> {
    vec![
        format!("{:?}", b.pattern.resource_type),
        b.pattern.name.clone(),
        format!("{:?}", b.pattern.pattern_type),
        b.entry.principal.clone(),
        b.entry.host.clone(),
        format!("{:?}", b.entry.operation),
        format!("{:?}", b.entry.permission_type),
    ]
}

const HEADER: [&str; 7] = [
    "RESOURCE",
    "NAME",
    "PATTERN",
    "PRINCIPAL",
    "HOST",
    "OPERATION",
    "PERMISSION",
];

fn binding_json(b: &AclBinding) -> Value {
    let r = binding_row(b);
    json!({
        "resource_type": r[0], "name": r[1], "pattern_type": r[2], "principal": r[3],
        "host": r[4], "operation": r[5], "permission": r[6],
    })
}

/// Runs `kafkit acls ...`.
pub async fn run(conn: &Conn, cmd: AclsCmd) -> CmdResult {
    let admin = conn.admin()?;
    match cmd {
        AclsCmd::List(a) => {
            let found = admin
                .describe_acls(&filter(&a, Pattern::Any))
                .await
                .map_err(|e| acl_failure("DescribeAcls", e))?;
            if a.json {
                print_json(&Value::Array(found.iter().map(binding_json).collect()));
            } else {
                let mut t = Table::new(&HEADER);
                for b in &found {
                    t.row(binding_row(b));
                }
                t.print();
            }
            Ok(())
        }
        AclsCmd::Create {
            resource,
            pattern,
            principal,
            operation,
            host,
            deny,
            json,
        } => {
            let Some((rt, name)) = resource.get() else {
                return Err(Failure::Usage(
                    "acls create needs a resource: --topic, --group, --transactional-id or --cluster"
                        .into(),
                ));
            };
            if !matches!(pattern, Pattern::Literal | Pattern::Prefixed) {
                return Err(Failure::Usage(
                    "acls create takes --pattern literal or prefixed".into(),
                ));
            }
            let permission = if deny {
                AclPermissionType::Deny
            } else {
                AclPermissionType::Allow
            };
            let bindings: Vec<AclBinding> = operation
                .iter()
                .map(|o| {
                    AclBinding::new(
                        ResourcePattern::new(rt, name.clone(), pattern_type(pattern)),
                        AccessControlEntry::new(
                            principal.clone(),
                            host.clone(),
                            o.op(),
                            permission,
                        ),
                    )
                })
                .collect();
            let mut results = admin
                .create_acls(&bindings)
                .await
                .map_err(|e| acl_failure("CreateAcls", e))?;
            // Kafka without an authorizer answers SECURITY_DISABLED for each binding (DescribeAcls
            // and DeleteAcls answer it once): a fact of the cluster, said once as for those.
            if let Some(i) = results.iter().position(|(_, r)| {
                matches!(r, Err(Error::Broker { code, .. }) if *code == ErrorCode::SECURITY_DISABLED)
            }) && let (_, Err(e)) = results.swap_remove(i)
            {
                return Err(acl_failure("CreateAcls", e));
            }
            let failed = results.iter().filter(|(_, r)| r.is_err()).count();
            report(
                "created",
                results.iter().map(|(b, r)| (b, r.as_ref().err())),
                json,
            );
            if failed > 0 {
                return Err(Failure::Error(format!(
                    "{failed} of {} ACL(s) could not be created",
                    results.len()
                )));
            }
            Ok(())
        }
        AclsCmd::Delete(a) => {
            if a.resource.get().is_none() {
                return Err(Failure::Usage(
                    "acls delete needs a resource: --topic, --group, --transactional-id or --cluster"
                        .into(),
                ));
            }
            let results = admin
                .delete_acls(&[filter(&a, Pattern::Literal)])
                .await
                .map_err(|e| acl_failure("DeleteAcls", e))?;
            let mut failed = 0;
            let mut deleted = Vec::new();
            for (_, r) in results {
                match r {
                    Ok(matched) => deleted.extend(matched),
                    Err(e) => return Err(acl_failure("DeleteAcls", e)),
                }
            }
            failed += deleted.iter().filter(|(_, r)| r.is_err()).count();
            report(
                "deleted",
                deleted.iter().map(|(b, r)| (b, r.as_ref().err())),
                a.json,
            );
            if failed > 0 {
                return Err(Failure::Error(format!(
                    "{failed} of {} ACL(s) could not be deleted",
                    deleted.len()
                )));
            }
            Ok(())
        }
    }
}

/// Prints each binding with its outcome.
fn report<'a>(
    what: &str,
    results: impl Iterator<Item = (&'a AclBinding, Option<&'a Error>)>,
    json: bool,
) {
    let results: Vec<_> = results.collect();
    if json {
        print_json(&Value::Array(
            results
                .iter()
                .map(|(b, e)| {
                    let mut v = binding_json(b);
                    v["ok"] = Value::Bool(e.is_none());
                    if let Some(e) = e {
                        v["error"] = Value::String(e.to_string());
                    }
                    v
                })
                .collect(),
        ));
        return;
    }
    let mut t = Table::new(&HEADER);
    for (b, e) in &results {
        match e {
            None => t.row(binding_row(b)),
            Some(e) => eprintln!("kafkit: {}: {e}", binding_row(b).join(" ")),
        }
    }
    if results.iter().any(|(_, e)| e.is_none()) {
        println!("{what}:");
        t.print();
    }
}
