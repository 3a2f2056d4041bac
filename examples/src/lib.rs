//! The examples' shared pieces ([`bootstrap`], [`ensure_topics`], [`exit`]), and the README
//! examples and the guides' code blocks (docs/guide/) as doc tests: this package depends on
//! `kafkit` and `tokio` only, so they compile the way a user's project would.
//!
//! Run an example against a local broker (`cargo xtask broker start` listens on 127.0.0.1:19092):
//!
//! ```sh
//! cargo run -p kafkit-examples --example produce -- --bootstrap 127.0.0.1:19092
//! KAFKIT_BOOTSTRAP=127.0.0.1:19092 cargo run -p kafkit-examples --example admin
//! ```
//!
//! `cargo xtask test` runs every example against tansu and Apache Kafka and checks its output
//! (`xtask/src/examples.rs`; by hand: `cargo xtask examples --tansu HOST:PORT --kafka
//! HOST:PORT`): a change to what an example prints may need a change to its check there.

use std::process::ExitCode;
use std::time::Duration;

use kafkit::admin::NewTopic;
use kafkit::{Client, ErrorCode};
use tokio::time::Instant;

/// Where `cargo xtask broker start` runs its broker.
pub const DEFAULT_BOOTSTRAP: &str = "127.0.0.1:19092";

/// The bootstrap address(es) of the cluster, comma-separated `host:port`: the value after
/// `--bootstrap` on the command line, else the `KAFKIT_BOOTSTRAP` environment variable, else
/// [`DEFAULT_BOOTSTRAP`].
pub fn bootstrap() -> Vec<String> {
    let args: Vec<String> = std::env::args().collect();
    let list = args
        .iter()
        .position(|a| a == "--bootstrap")
        .and_then(|i| args.get(i + 1).cloned())
        .or_else(|| std::env::var("KAFKIT_BOOTSTRAP").ok())
        .unwrap_or_else(|| DEFAULT_BOOTSTRAP.to_owned());
    list.split(',')
        .map(|a| a.trim().to_owned())
        .filter(|a| !a.is_empty())
        .collect()
}

/// Creates `topics` (each found on a later run is kept as it is) and waits until every
/// partition of each has a leader, so that the next request finds the topic ready: a broker
/// answers CreateTopics before the new partitions' leaders are known everywhere (Apache Kafka
/// answers a Metadata request just after it with `UNKNOWN_TOPIC_OR_PARTITION` or
/// `LEADER_NOT_AVAILABLE`). Prints a line per topic it created.
///
/// # Errors
///
/// A topic the broker refused (other than `TOPIC_ALREADY_EXISTS`), the transport's errors, and
/// [`kafkit::Error::InvalidArgument`] when a topic still has a partition without a leader
/// after 30 s.
///
/// # Cancel safety
///
/// Not cancel safe: a CreateTopics request already sent may still be carried out.
pub async fn ensure_topics(admin: &Client, topics: &[NewTopic]) -> Result<(), kafkit::Error> {
    for (name, result) in admin.create_topics(topics, false).await? {
        match result {
            Ok(created) => println!("created {name} ({} partitions)", created.num_partitions),
            Err(e) if e.error_code() == Some(ErrorCode::TOPIC_ALREADY_EXISTS) => {}
            Err(e) => return Err(e),
        }
    }
    let names: Vec<&str> = topics.iter().map(|t| t.name.as_str()).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut waiting = None;
        for (name, description) in admin.describe_topics(&names, false).await? {
            match description {
                Ok(d)
                    if !d.partitions.is_empty()
                        && d.partitions.iter().all(|p| p.leader_id >= 0) => {}
                Ok(_) => waiting = Some(format!("{name}: a partition has no leader yet")),
                Err(e) if e.is_retriable() => waiting = Some(format!("{name}: {e}")),
                Err(e) => return Err(e),
            }
        }
        match waiting {
            None => return Ok(()),
            Some(why) if Instant::now() >= deadline => {
                return Err(kafkit::Error::InvalidArgument(format!(
                    "the topics are not ready after 30 s ({why})"
                )));
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The exit status of an example: on an error, prints it (its `Display`, on stderr) and
/// returns failure, where `main` returning the error would print its `Debug`.
pub fn exit(result: Result<(), kafkit::Error>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The repository README's example, compiled by `cargo test --doc` with only this package's
/// dependencies (kafkit, tokio; the logging snippet: tracing-subscriber, a dev-dependency).
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct RootReadme;

/// The `kafkit` crate's README example (what crates.io shows), compiled the same way.
#[cfg(doctest)]
#[doc = include_str!("../../crates/kafkit/README.md")]
pub struct KafkitReadme;

/// The guides' examples (docs/guide/), compiled the same way: each guide's code blocks are doc
/// tests here, so a guide cannot drift from the API.
#[cfg(doctest)]
pub mod guides {
    /// docs/guide/README.md
    #[doc = include_str!("../../docs/guide/README.md")]
    pub struct GuideIndex;
    /// docs/guide/producing.md
    #[doc = include_str!("../../docs/guide/producing.md")]
    pub struct GuideProducing;
    /// docs/guide/consuming.md
    #[doc = include_str!("../../docs/guide/consuming.md")]
    pub struct GuideConsuming;
    /// docs/guide/groups.md
    #[doc = include_str!("../../docs/guide/groups.md")]
    pub struct GuideGroups;
    /// docs/guide/transactions.md
    #[doc = include_str!("../../docs/guide/transactions.md")]
    pub struct GuideTransactions;
    /// docs/guide/share-groups.md
    #[doc = include_str!("../../docs/guide/share-groups.md")]
    pub struct GuideShareGroups;
    /// docs/guide/security.md
    #[doc = include_str!("../../docs/guide/security.md")]
    pub struct GuideSecurity;
    /// docs/guide/observability.md
    #[doc = include_str!("../../docs/guide/observability.md")]
    pub struct GuideObservability;
    /// docs/guide/tuning.md
    #[doc = include_str!("../../docs/guide/tuning.md")]
    pub struct GuideTuning;
    /// docs/guide/from-rust-rdkafka.md
    #[doc = include_str!("../../docs/guide/from-rust-rdkafka.md")]
    pub struct GuideFromRustRdkafka;
}
