//! DescribeConfigs (key 32) split by resource.
//!
//! A broker's own configuration lives on that broker: a `BROKER` (4) resource naming a node id
//! and every `BROKER_LOGGER` (8) resource go to that broker. Everything else (topics, the
//! cluster-wide broker defaults named by an empty `BROKER` name, groups, client metrics) can be
//! answered by any broker, and all of them go to one broker in one request. A resource whose
//! name is not a node id goes to any broker, which answers with its own error. Answers are matched
//! by (resource type, resource name). Reading configs is repeatable, so connection failures and
//! timeouts are retried (any-broker resources move to the next broker).

use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafkit_protocol::messages::describe_configs_response::DescribeConfigsResult;
use kafkit_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};

use super::{ItemRetry, Route, SplitApi, key_hash, match_keyed, resource_retry};
use crate::transport::ConnKind;

/// ConfigResource type `BROKER`.
pub(crate) const RESOURCE_BROKER: i8 = 4;
/// ConfigResource type `BROKER_LOGGER` (KIP-412).
pub(crate) const RESOURCE_BROKER_LOGGER: i8 = 8;

/// Where a config resource is answered.
pub(crate) fn resource_target(resource_type: i8, resource_name: &str) -> Route<'static> {
    match resource_type {
        RESOURCE_BROKER | RESOURCE_BROKER_LOGGER => resource_name
            .parse::<i32>()
            .map_or(Route::AnyBroker, Route::Broker),
        _ => Route::AnyBroker,
    }
}

impl SplitApi for DescribeConfigsRequest {
    type Item = DescribeConfigsResource;
    type Answer = DescribeConfigsResult;
    type Extra = ();
    const CONN: ConnKind = ConnKind::Admin;

    fn split(mut self) -> (Self, Vec<Self::Item>) {
        let resources = std::mem::take(&mut self.resources);
        (self, resources)
    }

    fn target(item: &Self::Item) -> Route<'_> {
        resource_target(item.resource_type, &item.resource_name)
    }

    fn build(template: &Self, items: &[&Self::Item], _version: i16) -> Self {
        let mut req = template.clone();
        req.resources = items.iter().map(|r| (*r).clone()).collect();
        req
    }

    fn answers(
        resp: DescribeConfigsResponse,
        items: &[&Self::Item],
        _version: i16,
        _extra: &mut (),
    ) -> (Vec<Option<Self::Answer>>, i32) {
        let answers = match_keyed(
            items,
            resp.results,
            |r: &DescribeConfigsResource| key_hash(&(r.resource_type, r.resource_name.as_str())),
            |a: &DescribeConfigsResult| key_hash(&(a.resource_type, a.resource_name.as_str())),
            |r: &DescribeConfigsResource, a: &DescribeConfigsResult| {
                r.resource_type == a.resource_type && r.resource_name == a.resource_name
            },
        );
        (answers, resp.throttle_time_ms)
    }

    fn error_code(answer: &Self::Answer) -> ErrorCode {
        answer.error_code
    }

    fn failed(item: &Self::Item, code: ErrorCode) -> Self::Answer {
        DescribeConfigsResult::default()
            .with_resource_type(item.resource_type)
            .with_resource_name(item.resource_name.clone())
            .with_error_code(code)
    }

    fn retry(_template: &Self, _item: &Self::Item, code: ErrorCode) -> ItemRetry {
        resource_retry(code)
    }

    fn merge(
        _template: Self,
        answers: Vec<(Self::Item, Self::Answer)>,
        throttle_time_ms: i32,
        _extra: (),
    ) -> DescribeConfigsResponse {
        DescribeConfigsResponse::default()
            .with_throttle_time_ms(throttle_time_ms)
            .with_results(answers.into_iter().map(|(_, a)| a).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_resources_go_to_their_broker_and_the_rest_anywhere() {
        assert_eq!(resource_target(RESOURCE_BROKER, "2"), Route::Broker(2));
        assert_eq!(
            resource_target(RESOURCE_BROKER_LOGGER, "3"),
            Route::Broker(3)
        );
        // Cluster-wide broker defaults: any broker.
        assert_eq!(resource_target(RESOURCE_BROKER, ""), Route::AnyBroker);
        assert_eq!(
            resource_target(RESOURCE_BROKER, "not-a-node"),
            Route::AnyBroker
        );
        assert_eq!(resource_target(2, "orders"), Route::AnyBroker);
        assert_eq!(resource_target(32, "group"), Route::AnyBroker);
    }

    #[test]
    fn answers_match_by_type_and_name() {
        let mut topic = DescribeConfigsResource::default();
        topic.resource_type = 2;
        topic.resource_name = "1".into();
        let mut broker = DescribeConfigsResource::default();
        broker.resource_type = RESOURCE_BROKER;
        broker.resource_name = "1".into();
        let items = [topic, broker];
        let refs: Vec<&DescribeConfigsResource> = items.iter().collect();
        let mut resp = DescribeConfigsResponse::default();
        let mut rb = DescribeConfigsResult::default();
        rb.resource_type = RESOURCE_BROKER;
        rb.resource_name = "1".into();
        rb.error_code = ErrorCode::NONE;
        let mut rt = DescribeConfigsResult::default();
        rt.resource_type = 2;
        rt.resource_name = "1".into();
        rt.error_code = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
        resp.results = vec![rb, rt];
        let (answers, _) = DescribeConfigsRequest::answers(resp, &refs, 4, &mut ());
        assert_eq!(
            answers[0].as_ref().map(|a| a.error_code),
            Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
        );
        assert_eq!(
            answers[1].as_ref().map(|a| a.resource_type),
            Some(RESOURCE_BROKER)
        );
    }
}
