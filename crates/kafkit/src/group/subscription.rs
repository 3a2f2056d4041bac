//! What a member reads: topic names, or a pattern matched against the cluster's topics; and
//! the snapshot of partition counts that tells the member when to rejoin (Java
//! `SubscriptionState` + `ConsumerMetadata`).

use std::collections::BTreeMap;

use kafkit_protocol::messages::MetadataRequest;

use crate::conn::metadata::Metadata;
use crate::error::{Error, Result};
use crate::transport::Transport;

/// A subscription: topic names (sorted, distinct) or a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Subscription {
    Topics(Vec<String>),
    Pattern(String),
}

/// Topic name -> partition count of the subscribed topics that exist: what the member
/// subscribed with. A change (a topic created, deleted, or grown) makes the member rejoin.
pub(crate) type Snapshot = BTreeMap<String, i32>;

impl Subscription {
    /// The pattern as a whole-name regular expression (Java `Pattern.matcher(topic).matches()`).
    ///
    /// Errors: [`Error::Config`] for an invalid pattern.
    pub(crate) fn compile(pattern: &str) -> Result<regex::Regex> {
        regex::Regex::new(&format!("^(?:{pattern})$"))
            .map_err(|e| Error::Config(format!("group: subscribe_pattern {pattern:?}: {e}")))
    }

    /// The subscribed topics that exist now, with their partition counts. For names, one
    /// Metadata request for those topics; for a pattern, one for every topic of the cluster.
    ///
    /// Errors: those of the Metadata request.
    pub(crate) async fn resolve(&self, transport: &Transport) -> Result<Snapshot> {
        match self {
            Subscription::Topics(topics) => {
                let names: Vec<&str> = topics.iter().map(String::as_str).collect();
                let md = transport.metadata_for(&names).await?;
                Ok(counts(&md, |t| {
                    topics.binary_search_by(|x| x.as_str().cmp(t)).is_ok()
                }))
            }
            Subscription::Pattern(p) => {
                let re = Self::compile(p)?;
                let md = all_topics(transport).await?;
                Ok(counts(&md, |t| re.is_match(t)))
            }
        }
    }
}

/// Every topic of the cluster (Metadata with a null topic list).
pub(crate) async fn all_topics(transport: &Transport) -> Result<Metadata> {
    let resp = transport
        .round_trip(MetadataRequest::default().with_topics(None))
        .await?;
    Ok(Metadata::from(resp))
}

fn counts(md: &Metadata, wanted: impl Fn(&str) -> bool) -> Snapshot {
    md.topics
        .iter()
        .filter(|t| t.error_code.is_ok() && !t.is_internal && !t.partitions.is_empty())
        .filter(|t| wanted(&t.name))
        .map(|t| {
            (
                t.name.clone(),
                i32::try_from(t.partitions.len()).unwrap_or(i32::MAX),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_names() {
        let re = Subscription::compile("orders-.*").unwrap();
        assert!(re.is_match("orders-eu"));
        assert!(!re.is_match("old-orders-eu"));
        let re = Subscription::compile("a|b").unwrap();
        assert!(re.is_match("a") && re.is_match("b") && !re.is_match("ab"));
        assert!(Subscription::compile("(").is_err());
    }
}
