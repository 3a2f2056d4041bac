//! Topic creation and deletion as typed operations: [`NewTopic`] in, CreateTopics (key 19) and
//! DeleteTopics (key 20) requests built and their answers read per topic. The admin client and
//! [`Conn::create_topics`](crate::Conn::create_topics) send them. Imports only `crate::ops`,
//! `crate::error` and the leaf crates.

use kafkit_protocol::messages::{
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    create_topics_request, delete_topics_request,
};
use kafkit_protocol::{ErrorCode, Uuid};

use super::configs::{ConfigEntry, ConfigSource, ConfigType};
use super::{ResourceResult, code_result, in_order};
use crate::error::Error;

/// A topic to create with [`Client::create_topics`](crate::Client::create_topics) or
/// [`Conn::create_topics`](crate::Conn::create_topics).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NewTopic {
    /// The topic name.
    pub name: String,
    /// Number of partitions; -1 = the broker's `num.partitions` (CreateTopics v4+).
    pub num_partitions: i32,
    /// Replication factor; -1 = the broker's `default.replication.factor` (v4+).
    pub replication_factor: i16,
    /// Topic configs (`cleanup.policy`, `retention.ms`, ...), name and value.
    pub configs: Vec<(String, String)>,
}

impl NewTopic {
    /// A topic named `name` with `num_partitions` partitions of `replication_factor` replicas.
    pub fn new(name: impl Into<String>, num_partitions: i32, replication_factor: i16) -> Self {
        NewTopic {
            name: name.into(),
            num_partitions,
            replication_factor,
            configs: Vec::new(),
        }
    }

    /// Adds the topic config `name` = `value`.
    pub fn config(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.configs.push((name.into(), value.into()));
        self
    }
}

/// What the broker reports about a topic it created (or would create, with `validate_only`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CreatedTopic {
    /// The topic id (KIP-516; CreateTopics v7+), all zeros when the broker does not send it.
    pub topic_id: Uuid,
    /// The number of partitions (CreateTopics v5+, KIP-525), -1 when not sent.
    pub num_partitions: i32,
    /// The replication factor (v5+), -1 when not sent.
    pub replication_factor: i16,
    /// The topic's configs as created (v5+; empty when not sent or not authorized to see them).
    pub configs: Vec<ConfigEntry>,
}

/// Whether `name` is a legal Kafka topic name: 1 to 249 characters of `[a-zA-Z0-9._-]`, not
/// `.` or `..` (the broker's own check; see Kafka's `Topic.validate`).
pub(crate) fn is_valid_topic_name(name: &str) -> bool {
    (1..=249).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The DeleteTopics request for `names` at `version`: v6+ (KIP-516) names topics in `topics`
/// (by name or id), earlier versions in `topic_names`.
pub(crate) fn delete_topics_request(
    names: &[String],
    version: i16,
    timeout_ms: i32,
) -> DeleteTopicsRequest {
    let mut req = DeleteTopicsRequest::default().with_timeout_ms(timeout_ms);
    if version >= 6 {
        req.topics = names
            .iter()
            .map(|n| delete_topics_request::DeleteTopicState::default().with_name(Some(n.clone())))
            .collect();
    } else {
        req.topic_names = names.to_vec();
    }
    req
}

/// The CreateTopics request for `topics`.
pub(crate) fn create_topics_request<'a>(
    topics: impl IntoIterator<Item = &'a NewTopic>,
    validate_only: bool,
    timeout_ms: i32,
) -> CreateTopicsRequest {
    CreateTopicsRequest::default()
        .with_timeout_ms(timeout_ms)
        .with_validate_only(validate_only)
        .with_topics(
            topics
                .into_iter()
                .map(|t| {
                    create_topics_request::CreatableTopic::default()
                        .with_name(t.name.clone())
                        .with_num_partitions(t.num_partitions)
                        .with_replication_factor(t.replication_factor)
                        .with_configs(
                            t.configs
                                .iter()
                                .map(|(k, v)| {
                                    create_topics_request::CreatableTopicConfig::default()
                                        .with_name(k.clone())
                                        .with_value(Some(v.clone()))
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

/// Maps a CreateTopics response to per-topic results in the order of `names`.
pub(crate) fn create_topics_results(
    names: Vec<String>,
    resp: CreateTopicsResponse,
) -> Vec<(String, ResourceResult<CreatedTopic>)> {
    let answers = resp.topics.into_iter().map(|t| {
        let result =
            code_result("CreateTopics", t.error_code, t.error_message).map(|()| CreatedTopic {
                topic_id: t.topic_id,
                num_partitions: t.num_partitions,
                replication_factor: t.replication_factor,
                configs: t
                    .configs
                    .unwrap_or_default()
                    .into_iter()
                    .map(|c| {
                        let source = ConfigSource::from_code(c.config_source)
                            .unwrap_or(ConfigSource::Unknown);
                        ConfigEntry {
                            name: c.name,
                            value: c.value,
                            source,
                            is_default: source == ConfigSource::DefaultConfig,
                            is_read_only: c.read_only,
                            is_sensitive: c.is_sensitive,
                            synonyms: Vec::new(),
                            config_type: ConfigType::Unknown,
                            documentation: None,
                        }
                    })
                    .collect(),
            });
        (t.name, result)
    });
    in_order("CreateTopics", names, answers)
}

/// Why `t` cannot be created, checked before sending as Java's admin client and the broker
/// would: a legal topic name (the transport's check), partitions >= 1 or -1 (the broker's
/// default), replication factor >= 1 or -1.
fn refusal(t: &NewTopic) -> Option<Error> {
    let refused = |code: ErrorCode, reason: String| {
        Some(Error::NotSent {
            operation: "CreateTopics",
            code,
            reason,
        })
    };
    if !is_valid_topic_name(&t.name) {
        return refused(
            ErrorCode::INVALID_TOPIC_EXCEPTION,
            format!(
                "{:?} is not a legal topic name (1 to 249 characters of [a-zA-Z0-9._-], not \
                 \".\" or \"..\")",
                t.name
            ),
        );
    }
    if t.num_partitions < 1 && t.num_partitions != -1 {
        return refused(
            ErrorCode::INVALID_PARTITIONS,
            format!(
                "topic {:?}: {} partitions (expected at least 1, or -1 for the broker's default)",
                t.name, t.num_partitions
            ),
        );
    }
    if t.replication_factor < 1 && t.replication_factor != -1 {
        return refused(
            ErrorCode::INVALID_REPLICATION_FACTOR,
            format!(
                "topic {:?}: replication factor {} (expected at least 1, or -1 for the \
                 broker's default)",
                t.name, t.replication_factor
            ),
        );
    }
    None
}

/// Checks each of `topics` ([`refusal`]): the ones to send, and per topic (in order) its
/// refusal, if any.
pub(crate) fn check_new_topics(topics: &[NewTopic]) -> (Vec<&NewTopic>, Vec<Option<Error>>) {
    let refused: Vec<Option<Error>> = topics.iter().map(refusal).collect();
    let send = topics
        .iter()
        .zip(&refused)
        .filter(|(_, r)| r.is_none())
        .map(|(t, _)| t)
        .collect();
    (send, refused)
}

/// One result per topic in the caller's order: the refusals of [`check_new_topics`], and the
/// broker's `answered` results (in order) for the topics that were sent.
pub(crate) fn merge_create_results(
    names: Vec<String>,
    refused: Vec<Option<Error>>,
    answered: Vec<(String, ResourceResult<CreatedTopic>)>,
) -> Vec<(String, ResourceResult<CreatedTopic>)> {
    let mut answered = answered.into_iter();
    names
        .into_iter()
        .zip(refused)
        .map(|(name, refused)| match refused {
            Some(e) => (name, Err(e)),
            None => answered.next().unwrap_or_else(|| {
                let e = Error::Protocol(format!("CreateTopics: no answer for topic {name:?}"));
                (name, Err(e))
            }),
        })
        .collect()
}

/// Maps a DeleteTopics response (by name) to per-topic results in the order of `names`.
pub(crate) fn delete_topics_results(
    names: Vec<String>,
    resp: DeleteTopicsResponse,
) -> Vec<(String, ResourceResult<()>)> {
    let answers = resp.responses.into_iter().map(|t| {
        (
            t.name.unwrap_or_default(),
            code_result("DeleteTopics", t.error_code, t.error_message),
        )
    });
    in_order("DeleteTopics", names, answers)
}

#[cfg(test)]
mod tests {
    use kafkit_protocol::messages::create_topics_response;

    use super::*;

    #[test]
    fn create_topics_request_carries_every_topic_and_flag() {
        let topics = [
            NewTopic::new("a", 3, 1).config("retention.ms", "1000"),
            NewTopic::new("b", -1, -1),
        ];
        let req = create_topics_request(&topics, true, 5_000);
        assert!(req.validate_only);
        assert_eq!(req.timeout_ms, 5_000);
        assert_eq!(req.topics.len(), 2);
        assert_eq!(req.topics[0].name, "a");
        assert_eq!(req.topics[0].num_partitions, 3);
        assert_eq!(req.topics[0].configs[0].name, "retention.ms");
        assert_eq!(req.topics[0].configs[0].value.as_deref(), Some("1000"));
        assert_eq!(req.topics[1].replication_factor, -1);
    }

    /// `NewTopic::new("", 1, 1)`, -5 partitions and a replication factor of 0 are refused per
    /// topic, as Java's admin client refuses them (tansu would create a topic named ""); the
    /// other topics are sent.
    #[test]
    fn illegal_topics_are_refused_one_by_one_and_the_others_sent() {
        let topics = [
            NewTopic::new("", 1, 1),
            NewTopic::new("ok", -1, -1),
            NewTopic::new("few", -5, 1),
            NewTopic::new("bad name", 1, 1),
            NewTopic::new("none", 1, 0),
            NewTopic::new("fine", 3, 1),
        ];
        let (send, refused) = check_new_topics(&topics);
        let sent: Vec<&str> = send.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(sent, ["ok", "fine"]);
        let codes: Vec<Option<ErrorCode>> = refused
            .iter()
            .map(|r| r.as_ref().and_then(Error::error_code))
            .collect();
        assert_eq!(
            codes,
            [
                Some(ErrorCode::INVALID_TOPIC_EXCEPTION),
                None,
                Some(ErrorCode::INVALID_PARTITIONS),
                Some(ErrorCode::INVALID_TOPIC_EXCEPTION),
                Some(ErrorCode::INVALID_REPLICATION_FACTOR),
                None,
            ]
        );
        let created = || CreatedTopic {
            topic_id: Uuid::default(),
            num_partitions: 1,
            replication_factor: 1,
            configs: Vec::new(),
        };
        let answered = vec![
            ("ok".to_owned(), Ok(created())),
            ("fine".to_owned(), Ok(created())),
        ];
        let names = topics.iter().map(|t| t.name.clone()).collect();
        let out = merge_create_results(names, refused, answered);
        let shape: Vec<(&str, bool)> = out.iter().map(|(n, r)| (n.as_str(), r.is_ok())).collect();
        assert_eq!(
            shape,
            [
                ("", false),
                ("ok", true),
                ("few", false),
                ("bad name", false),
                ("none", false),
                ("fine", true)
            ]
        );
        let err = out[2].1.as_ref().unwrap_err();
        assert!(matches!(err, Error::NotSent { .. }), "{err:?}");
        assert!(!err.is_retriable());
        assert!(err.to_string().contains("not sent"), "{err}");
    }

    #[test]
    fn create_topics_results_keep_each_error_and_the_callers_order() {
        let mut resp = CreateTopicsResponse::default();
        // The broker answers in another order; one topic failed.
        let mut b = create_topics_response::CreatableTopicResult::default();
        b.name = "b".into();
        b.error_code = ErrorCode::TOPIC_ALREADY_EXISTS;
        b.error_message = Some("exists".into());
        let mut a = create_topics_response::CreatableTopicResult::default();
        a.name = "a".into();
        a.num_partitions = 3;
        a.replication_factor = 1;
        a.topic_id = Uuid([7; 16]);
        resp.topics = vec![b, a];
        let out = create_topics_results(vec!["a".into(), "b".into(), "c".into()], resp);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].0, "a");
        let created = out[0].1.as_ref().expect("a created");
        assert_eq!(
            (created.num_partitions, created.topic_id),
            (3, Uuid([7; 16]))
        );
        assert_eq!(out[1].0, "b");
        let err = out[1].1.as_ref().expect_err("b failed");
        assert_eq!(err.error_code(), Some(ErrorCode::TOPIC_ALREADY_EXISTS));
        assert!(!err.is_retriable());
        // A topic the broker did not mention is an error of its own, not a panic.
        assert!(matches!(out[2].1, Err(Error::Protocol(_))));
    }

    #[test]
    fn topic_name_rule() {
        assert!(is_valid_topic_name("orders.v1_eu-west"));
        assert!(is_valid_topic_name(&"x".repeat(249)));
        for bad in ["", ".", "..", "a b", "é", "a/b"] {
            assert!(!is_valid_topic_name(bad), "{bad:?}");
        }
        assert!(!is_valid_topic_name(&"x".repeat(250)));
    }
}
