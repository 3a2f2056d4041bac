//! `kafkit features`, `kafkit quorum`, `kafkit tokens`: cluster features (KIP-584), the KRaft
//! metadata quorum (KIP-595) and delegation tokens (KIP-48), as aligned tables or `--json`.

use std::time::Duration;

use base64::Engine as _;
use clap::{Args, Subcommand, ValueEnum};
use kafkit::admin::{
    CreateDelegationTokenOptions, FeatureUpdate, FeatureUpgradeType, KafkaPrincipal,
};
use serde_json::{Value, json};

use crate::conn::Conn;
use crate::out::{Table, outcomes, print_json};
use crate::{CmdResult, Failure};

/// `kafkit features`.
#[derive(Debug, Subcommand)]
pub enum FeaturesCmd {
    /// The finalized feature levels and what the answering broker supports.
    Describe {
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Change finalized feature levels (UpdateFeatures); --validate-only only asks.
    Update {
        /// A feature and its new level, NAME=LEVEL (repeatable).
        #[arg(long = "feature", value_name = "NAME=LEVEL", required = true)]
        features: Vec<String>,
        /// How the levels may move.
        #[arg(long, value_enum, default_value_t = UpgradeType::Upgrade)]
        upgrade_type: UpgradeType,
        /// Only ask the controller whether it would do it.
        #[arg(long)]
        validate_only: bool,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
}

/// `--upgrade-type` of `features update`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum UpgradeType {
    /// Only upgrades.
    Upgrade,
    /// A downgrade that keeps metadata.
    SafeDowngrade,
    /// A downgrade that may lose metadata.
    UnsafeDowngrade,
}

/// Runs `kafkit features ...`.
pub async fn features(conn: &Conn, cmd: FeaturesCmd) -> CmdResult {
    let admin = conn.admin()?;
    match cmd {
        FeaturesCmd::Describe { json } => {
            let f = admin.describe_features().await?;
            if json {
                print_json(&json!({
                    "finalized_epoch": f.finalized_epoch,
                    "finalized": f.finalized.iter().map(|x| json!({
                        "name": x.name, "min_version_level": x.min_version_level,
                        "max_version_level": x.max_version_level,
                    })).collect::<Vec<_>>(),
                    "supported": f.supported.iter().map(|x| json!({
                        "name": x.name, "min_version": x.min_version,
                        "max_version": x.max_version,
                    })).collect::<Vec<_>>(),
                }));
                return Ok(());
            }
            let mut t = Table::new(&["FEATURE", "FINALIZED", "SUPPORTED"]);
            let mut names: Vec<&str> = f
                .supported
                .iter()
                .map(|s| s.name.as_str())
                .chain(f.finalized.iter().map(|x| x.name.as_str()))
                .collect();
            names.sort_unstable();
            names.dedup();
            for name in names {
                let fin = f.finalized.iter().find(|x| x.name == name);
                let sup = f.supported.iter().find(|x| x.name == name);
                t.row(vec![
                    name.to_owned(),
                    fin.map_or_else(|| "-".into(), |x| x.max_version_level.to_string()),
                    sup.map_or_else(
                        || "-".into(),
                        |s| format!("{}-{}", s.min_version, s.max_version),
                    ),
                ]);
            }
            t.print();
            Ok(())
        }
        FeaturesCmd::Update {
            features,
            upgrade_type,
            validate_only,
            json,
        } => {
            let kind = match upgrade_type {
                UpgradeType::Upgrade => FeatureUpgradeType::Upgrade,
                UpgradeType::SafeDowngrade => FeatureUpgradeType::SafeDowngrade,
                UpgradeType::UnsafeDowngrade => FeatureUpgradeType::UnsafeDowngrade,
            };
            let mut updates = Vec::with_capacity(features.len());
            for f in &features {
                let (name, level) = f.split_once('=').ok_or_else(|| {
                    Failure::Usage(format!("--feature {f:?}: expected NAME=LEVEL"))
                })?;
                let level: i16 = level.parse().map_err(|_| {
                    Failure::Usage(format!("--feature {f:?}: the level is not a number"))
                })?;
                updates.push((name, FeatureUpdate::new(level, kind)));
            }
            let results = admin.update_features(&updates, validate_only).await?;
            let what = if validate_only {
                "would update"
            } else {
                "updated"
            };
            outcomes("feature", what, &results, json)
        }
    }
}

/// `kafkit quorum`.
#[derive(Debug, Args)]
pub struct QuorumArgs {
    /// JSON output.
    #[arg(long)]
    json: bool,
}

/// Runs `kafkit quorum`: the metadata quorum's leader, voters and observers with their lag.
pub async fn quorum(conn: &Conn, a: QuorumArgs) -> CmdResult {
    let admin = conn.admin()?;
    let q = admin.describe_metadata_quorum().await?;
    let lags = q.lags();
    let lag_of = |id: i32| lags.iter().find(|(r, _)| *r == id).and_then(|(_, l)| *l);
    let rows: Vec<(&str, &kafkit::admin::QuorumReplica)> = q
        .voters
        .iter()
        .map(|r| ("voter", r))
        .chain(q.observers.iter().map(|r| ("observer", r)))
        .collect();
    if a.json {
        print_json(&json!({
            "leader_id": q.leader_id, "leader_epoch": q.leader_epoch,
            "high_watermark": q.high_watermark,
            "replicas": rows.iter().map(|(role, r)| json!({
                "replica_id": r.replica_id, "role": role,
                "log_end_offset": r.log_end_offset, "lag": lag_of(r.replica_id),
                "last_fetch_timestamp": r.last_fetch_timestamp,
                "last_caught_up_timestamp": r.last_caught_up_timestamp,
            })).collect::<Vec<_>>(),
        }));
        return Ok(());
    }
    println!("leader: {} (epoch {})", q.leader_id, q.leader_epoch);
    println!("high watermark: {}", q.high_watermark);
    let mut t = Table::new(&["REPLICA", "ROLE", "LOG-END-OFFSET", "LAG"]);
    let opt = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    for (role, r) in rows {
        t.row(vec![
            r.replica_id.to_string(),
            if r.replica_id == q.leader_id {
                "leader".to_owned()
            } else {
                role.to_owned()
            },
            opt(r.log_end_offset),
            opt(lag_of(r.replica_id)),
        ]);
    }
    t.print();
    Ok(())
}

/// `kafkit tokens` (needs an authenticated connection: `-X security.protocol=SASL_PLAINTEXT
/// -X sasl.mechanism=...`).
#[derive(Debug, Subcommand)]
pub enum TokensCmd {
    /// Create a delegation token owned by the logged-in user; prints its id and HMAC (base64).
    Create {
        /// A principal that may renew it, TYPE:NAME (e.g. User:bob; repeatable).
        #[arg(long = "renewer", value_name = "TYPE:NAME")]
        renewers: Vec<String>,
        /// Its maximum lifetime in ms (default: the broker's delegation.token.max.lifetime.ms).
        #[arg(long, value_name = "MS")]
        max_lifetime_ms: Option<u64>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Describe the tokens the logged-in user may see (or those of --owner).
    Describe {
        /// Only the tokens of this owner, TYPE:NAME (repeatable).
        #[arg(long = "owner", value_name = "TYPE:NAME")]
        owners: Vec<String>,
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Renew a token; prints its new expiry (ms since the epoch).
    Renew {
        /// The token's HMAC, base64 (as `tokens create` prints it).
        #[arg(long)]
        hmac: String,
        /// By this many ms (default: the broker's delegation.token.expiry.time.ms).
        #[arg(long, value_name = "MS")]
        period_ms: Option<u64>,
    },
    /// Expire a token (at once, or after --period-ms); prints its new expiry.
    Expire {
        /// The token's HMAC, base64.
        #[arg(long)]
        hmac: String,
        /// In this many ms (default: at once; the token is deleted).
        #[arg(long, value_name = "MS")]
        period_ms: Option<u64>,
    },
}

fn principal(s: &str) -> Result<KafkaPrincipal, Failure> {
    match s.split_once(':') {
        Some((t, n)) if !t.is_empty() && !n.is_empty() => {
            let mut p = KafkaPrincipal::user(n);
            p.principal_type = t.to_owned();
            Ok(p)
        }
        _ => Err(Failure::Usage(format!(
            "{s:?}: expected a principal TYPE:NAME (e.g. User:bob)"
        ))),
    }
}

fn hmac(s: &str) -> Result<Vec<u8>, Failure> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|e| Failure::Usage(format!("--hmac: not base64: {e}")))
}

fn token_json(t: &kafkit::admin::DelegationToken) -> Value {
    json!({
        "token_id": t.token_id,
        "hmac": base64::engine::general_purpose::STANDARD.encode(&t.hmac),
        "owner": t.owner.to_string(), "requester": t.token_requester.to_string(),
        "renewers": t.renewers.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "issue_timestamp_ms": t.issue_timestamp_ms,
        "expiry_timestamp_ms": t.expiry_timestamp_ms,
        "max_timestamp_ms": t.max_timestamp_ms,
    })
}

/// Runs `kafkit tokens ...`.
pub async fn tokens(conn: &Conn, cmd: TokensCmd) -> CmdResult {
    let admin = conn.admin()?;
    match cmd {
        TokensCmd::Create {
            renewers,
            max_lifetime_ms,
            json,
        } => {
            let mut opts = CreateDelegationTokenOptions::new().renewers(
                renewers
                    .iter()
                    .map(|r| principal(r))
                    .collect::<Result<Vec<_>, _>>()?,
            );
            if let Some(ms) = max_lifetime_ms {
                opts = opts.max_lifetime(Duration::from_millis(ms));
            }
            let t = admin.create_delegation_token(&opts).await?;
            if json {
                print_json(&token_json(&t));
            } else {
                println!("token id: {}", t.token_id);
                println!(
                    "hmac: {}",
                    base64::engine::general_purpose::STANDARD.encode(&t.hmac)
                );
                println!("owner: {}", t.owner);
                println!(
                    "expires: {} (max {})",
                    t.expiry_timestamp_ms, t.max_timestamp_ms
                );
            }
            Ok(())
        }
        TokensCmd::Describe { owners, json } => {
            let owners = owners
                .iter()
                .map(|o| principal(o))
                .collect::<Result<Vec<_>, _>>()?;
            let tokens = admin
                .describe_delegation_token((!owners.is_empty()).then_some(owners.as_slice()))
                .await?;
            if json {
                print_json(&Value::Array(tokens.iter().map(token_json).collect()));
                return Ok(());
            }
            let mut t = Table::new(&["TOKEN-ID", "OWNER", "RENEWERS", "EXPIRY", "MAX"]);
            for tok in &tokens {
                t.row(vec![
                    tok.token_id.clone(),
                    tok.owner.to_string(),
                    tok.renewers
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                    tok.expiry_timestamp_ms.to_string(),
                    tok.max_timestamp_ms.to_string(),
                ]);
            }
            t.print();
            Ok(())
        }
        TokensCmd::Renew { hmac: h, period_ms } => {
            let expiry = admin
                .renew_delegation_token(&hmac(&h)?, period_ms.map(Duration::from_millis))
                .await?;
            println!("{expiry}");
            Ok(())
        }
        TokensCmd::Expire { hmac: h, period_ms } => {
            let expiry = admin
                .expire_delegation_token(&hmac(&h)?, period_ms.map(Duration::from_millis))
                .await?;
            println!("{expiry}");
            Ok(())
        }
    }
}
