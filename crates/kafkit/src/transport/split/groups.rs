//! Group APIs split by coordinator, and ListGroups sent to every broker.
//!
//! - DescribeGroups (key 15): groups grouped per coordinator (FindCoordinator, cached), one
//!   request per coordinator; answers matched by `group_id`.
//! - OffsetFetch (key 9): the multi-group form (KIP-709, v8+: `groups`) is batched per
//!   coordinator when the coordinator speaks v8+; an older coordinator gets one request per group
//!   in the single-group form (`group_id`, `topics`), and its answer (top-level `error_code`,
//!   `topics`) is turned into the group's entry. A caller's single-group request is answered in
//!   the single-group form, whichever form went on the wire.
//! - ListGroups (key 16): every broker in metadata, concurrently (`every.rs`); the groups are
//!   concatenated (broker order by node id; a group listed by two brokers during a coordinator
//!   move appears once). `error_code` is the first error any broker reported, so a partial
//!   listing is visible.
//!
//! - DeleteGroups (key 42), ConsumerGroupDescribe (key 69, KIP-848), ShareGroupDescribe (key 77,
//!   KIP-932), StreamsGroupDescribe (key 89, KIP-1071): groups per coordinator, like
//!   DescribeGroups. A DeleteGroups part whose answer was lost is not sent again (the deletion
//!   may have happened); its groups carry `NETWORK_EXCEPTION` / `REQUEST_TIMED_OUT`.
//! - DescribeTransactions (key 65, KIP-664): transactional ids per transaction coordinator.
//!
//! `NOT_COORDINATOR` and `COORDINATOR_NOT_AVAILABLE` drop the cached coordinator and retry;
//! `COORDINATOR_LOAD_IN_PROGRESS` retries after a backoff (KIP-699 kept lookups per group).

use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafkit_protocol::messages::describe_groups_response::DescribedGroup;
use kafkit_protocol::messages::describe_transactions_response::TransactionState;
use kafkit_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafkit_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafkit_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, DeleteGroupsRequest,
    DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    DescribeTransactionsRequest, DescribeTransactionsResponse, ListGroupsRequest,
    ListGroupsResponse, OffsetFetchRequest, OffsetFetchResponse, ShareGroupDescribeRequest,
    ShareGroupDescribeResponse, StreamsGroupDescribeRequest, StreamsGroupDescribeResponse,
};
use kafkit_protocol::messages::{
    consumer_group_describe_response, share_group_describe_response,
    streams_group_describe_response,
};

use super::every::EveryBroker;
use super::{Failure, ItemRetry, Route, SplitApi, coordinator_retry, key_hash, match_keyed};
use crate::transport::{ConnKind, CoordinatorType};

/// Implements [`SplitApi`] for an API keyed by id and sent to each id's coordinator: the
/// request's `ids` list is split one item per id, each item goes to the `$coordinator`
/// coordinator of its id, and the response's `answers` list is matched back by the answers'
/// `key` field. Coordinator errors are retried ([`coordinator_retry`]); further trait items
/// (e.g. `retry_failure`) follow the answer key.
macro_rules! by_coordinator {
    (
        $req:ident => $resp:ident, $coordinator:ident,
        ids: $ids:ident,
        answers: $answers:ident of $answer:ty, keyed by $key:ident;
        $($more:item)*
    ) => {
        impl SplitApi for $req {
            /// The id (group id or transactional id).
            type Item = String;
            type Answer = $answer;
            type Extra = ();
            const CONN: ConnKind = ConnKind::Admin;

            fn split(mut self) -> (Self, Vec<Self::Item>) {
                let ids = std::mem::take(&mut self.$ids);
                (self, ids)
            }

            fn target(item: &Self::Item) -> Route<'_> {
                Route::Coordinator(CoordinatorType::$coordinator, item)
            }

            fn build(template: &Self, items: &[&Self::Item], _version: i16) -> Self {
                let mut req = template.clone();
                req.$ids = items.iter().map(|id| (*id).clone()).collect();
                req
            }

            fn answers(
                resp: $resp,
                items: &[&Self::Item],
                _version: i16,
                _extra: &mut (),
            ) -> (Vec<Option<Self::Answer>>, i32) {
                let answers = match_keyed(
                    items,
                    resp.$answers,
                    |id: &String| key_hash(id),
                    |a: &Self::Answer| key_hash(&a.$key),
                    |id: &String, a: &Self::Answer| *id == a.$key,
                );
                (answers, resp.throttle_time_ms)
            }

            fn error_code(answer: &Self::Answer) -> ErrorCode {
                answer.error_code
            }

            fn failed(item: &Self::Item, code: ErrorCode) -> Self::Answer {
                let mut answer = <$answer>::default();
                answer.$key = item.clone();
                answer.error_code = code;
                answer
            }

            fn retry(_template: &Self, _item: &Self::Item, code: ErrorCode) -> ItemRetry {
                coordinator_retry(code)
            }

            $($more)*

            fn merge(
                _template: Self,
                answers: Vec<(Self::Item, Self::Answer)>,
                throttle_time_ms: i32,
                _extra: (),
            ) -> $resp {
                let mut resp = $resp::default().with_throttle_time_ms(throttle_time_ms);
                resp.$answers = answers.into_iter().map(|(_, a)| a).collect();
                resp
            }
        }
    };
}

by_coordinator! {
    DescribeGroupsRequest => DescribeGroupsResponse, Group,
    ids: groups,
    answers: groups of DescribedGroup, keyed by group_id;
}

/// One group of an OffsetFetch request.
#[derive(Debug, Clone)]
pub(crate) struct GroupItem {
    /// The group and the partitions asked for (`topics: None` = every committed partition).
    group: OffsetFetchRequestGroup,
    /// Whether the caller used the single-group form (`group_id`, `topics`), so the merged
    /// response uses it too.
    single: bool,
}

/// The first OffsetFetch version with the multi-group form (KIP-709).
const MULTI_GROUP_VERSION: i16 = 8;

impl SplitApi for OffsetFetchRequest {
    type Item = GroupItem;
    type Answer = OffsetFetchResponseGroup;
    type Extra = ();
    const CONN: ConnKind = ConnKind::Admin;

    fn split(mut self) -> (Self, Vec<Self::Item>) {
        let groups = std::mem::take(&mut self.groups);
        let items = if groups.is_empty() {
            let g = OffsetFetchRequestGroup::default()
                .with_group_id(std::mem::take(&mut self.group_id))
                .with_topics(self.topics.take().map(|topics| {
                    topics
                        .into_iter()
                        .map(|t| {
                            OffsetFetchRequestTopics::default()
                                .with_name(t.name)
                                .with_partition_indexes(t.partition_indexes)
                        })
                        .collect()
                }));
            vec![GroupItem {
                group: g,
                single: true,
            }]
        } else {
            groups
                .into_iter()
                .map(|group| GroupItem {
                    group,
                    single: false,
                })
                .collect()
        };
        self.group_id = String::new();
        self.topics = OffsetFetchRequest::default().topics;
        (self, items)
    }

    fn target(item: &Self::Item) -> Route<'_> {
        Route::Coordinator(CoordinatorType::Group, &item.group.group_id)
    }

    fn max_items(version: i16) -> usize {
        if version >= MULTI_GROUP_VERSION {
            usize::MAX
        } else {
            1
        }
    }

    /// v10 (KIP-848) names topics by id only, in the request and in the answer: items listing
    /// a topic without its id, or asking for every topic (the answer would carry ids only),
    /// go at v9 at most. The admin client's requests name topics, as Java's admin does.
    fn max_version(_template: &Self, items: &[&Self::Item]) -> Option<i16> {
        let by_name = items.iter().any(|i| match &i.group.topics {
            None => true,
            Some(topics) => topics.iter().any(|t| t.topic_id.is_zero()),
        });
        by_name.then_some(9)
    }

    fn build(template: &Self, items: &[&Self::Item], version: i16) -> Self {
        let mut req = OffsetFetchRequest::default().with_require_stable(template.require_stable);
        if version >= MULTI_GROUP_VERSION {
            req.groups = items.iter().map(|i| i.group.clone()).collect();
        } else if let Some(item) = items.first() {
            req.group_id = item.group.group_id.clone();
            req.topics = item.group.topics.as_ref().map(|topics| {
                topics
                    .iter()
                    .map(|t| {
                        OffsetFetchRequestTopic::default()
                            .with_name(t.name.clone())
                            .with_partition_indexes(t.partition_indexes.clone())
                    })
                    .collect()
            });
        }
        req
    }

    fn answers(
        resp: OffsetFetchResponse,
        items: &[&Self::Item],
        version: i16,
        _extra: &mut (),
    ) -> (Vec<Option<Self::Answer>>, i32) {
        if version >= MULTI_GROUP_VERSION {
            let answers = match_keyed(
                items,
                resp.groups,
                |i: &GroupItem| key_hash(&i.group.group_id),
                |a: &OffsetFetchResponseGroup| key_hash(&a.group_id),
                |i: &GroupItem, a: &OffsetFetchResponseGroup| i.group.group_id == a.group_id,
            );
            return (answers, resp.throttle_time_ms);
        }
        let mut answers: Vec<Option<Self::Answer>> = items.iter().map(|_| None).collect();
        if let Some(item) = items.first() {
            let g = OffsetFetchResponseGroup::default()
                .with_group_id(item.group.group_id.clone())
                .with_error_code(resp.error_code)
                .with_topics(
                    resp.topics
                        .into_iter()
                        .map(|t| {
                            OffsetFetchResponseTopics::default()
                                .with_name(t.name)
                                .with_partitions(
                                    t.partitions.into_iter().map(partition_to_group).collect(),
                                )
                        })
                        .collect(),
                );
            answers[0] = Some(g);
        }
        (answers, resp.throttle_time_ms)
    }

    fn error_code(answer: &Self::Answer) -> ErrorCode {
        answer.error_code
    }

    fn failed(item: &Self::Item, code: ErrorCode) -> Self::Answer {
        OffsetFetchResponseGroup::default()
            .with_group_id(item.group.group_id.clone())
            .with_error_code(code)
    }

    fn retry(_template: &Self, _item: &Self::Item, code: ErrorCode) -> ItemRetry {
        coordinator_retry(code)
    }

    fn merge(
        _template: Self,
        answers: Vec<(Self::Item, Self::Answer)>,
        throttle_time_ms: i32,
        _extra: (),
    ) -> OffsetFetchResponse {
        let mut resp = OffsetFetchResponse::default().with_throttle_time_ms(throttle_time_ms);
        let single = answers.len() == 1 && answers[0].0.single;
        if single {
            if let Some((_, g)) = answers.into_iter().next() {
                resp.error_code = g.error_code;
                resp.topics = g
                    .topics
                    .into_iter()
                    .map(|t| {
                        OffsetFetchResponseTopic::default()
                            .with_name(t.name)
                            .with_partitions(
                                t.partitions.into_iter().map(partition_to_single).collect(),
                            )
                    })
                    .collect();
            }
        } else {
            resp.groups = answers.into_iter().map(|(_, a)| a).collect();
        }
        resp
    }
}

/// A partition of the single-group OffsetFetch response as a partition of a group entry.
fn partition_to_group(p: OffsetFetchResponsePartition) -> OffsetFetchResponsePartitions {
    OffsetFetchResponsePartitions::default()
        .with_partition_index(p.partition_index)
        .with_committed_offset(p.committed_offset)
        .with_committed_leader_epoch(p.committed_leader_epoch)
        .with_metadata(p.metadata)
        .with_error_code(p.error_code)
}

/// A partition of a group entry as a partition of the single-group OffsetFetch response.
fn partition_to_single(p: OffsetFetchResponsePartitions) -> OffsetFetchResponsePartition {
    OffsetFetchResponsePartition::default()
        .with_partition_index(p.partition_index)
        .with_committed_offset(p.committed_offset)
        .with_committed_leader_epoch(p.committed_leader_epoch)
        .with_metadata(p.metadata)
        .with_error_code(p.error_code)
}

by_coordinator! {
    DeleteGroupsRequest => DeleteGroupsResponse, Group,
    ids: groups_names,
    answers: results of DeletableGroupResult, keyed by group_id;

    /// A deletion whose answer was lost may have happened: asking again would report
    /// `GROUP_ID_NOT_FOUND` for a group that was just deleted, so only a request that was never
    /// sent is retried.
    fn retry_failure(_template: &Self, _item: &Self::Item, failure: Failure) -> bool {
        failure == Failure::NotSent
    }
}

// The KIP-848-style group describe requests: `group_ids` in, `groups` out, like DescribeGroups.
by_coordinator! {
    ConsumerGroupDescribeRequest => ConsumerGroupDescribeResponse, Group,
    ids: group_ids,
    answers: groups of consumer_group_describe_response::DescribedGroup, keyed by group_id;
}

by_coordinator! {
    ShareGroupDescribeRequest => ShareGroupDescribeResponse, Group,
    ids: group_ids,
    answers: groups of share_group_describe_response::DescribedGroup, keyed by group_id;
}

by_coordinator! {
    StreamsGroupDescribeRequest => StreamsGroupDescribeResponse, Group,
    ids: group_ids,
    answers: groups of streams_group_describe_response::DescribedGroup, keyed by group_id;
}

by_coordinator! {
    DescribeTransactionsRequest => DescribeTransactionsResponse, Transaction,
    ids: transactional_ids,
    answers: transaction_states of TransactionState, keyed by transactional_id;
}

impl EveryBroker for ListGroupsRequest {
    fn error_code(resp: &ListGroupsResponse) -> ErrorCode {
        resp.error_code
    }

    fn failed(code: ErrorCode) -> ListGroupsResponse {
        ListGroupsResponse::default().with_error_code(code)
    }

    /// Groups concatenated by node id, each group id once; `error_code` the first non-`NONE`
    /// code by node id; `throttle_time_ms` the largest.
    fn merge(parts: Vec<(i32, ListGroupsResponse)>) -> ListGroupsResponse {
        let mut resp = ListGroupsResponse::default();
        let mut seen = std::collections::HashSet::new();
        for (_, part) in parts {
            resp.throttle_time_ms = resp.throttle_time_ms.max(part.throttle_time_ms);
            if resp.error_code.is_ok() {
                resp.error_code = part.error_code;
            }
            for g in part.groups {
                if seen.insert(g.group_id.clone()) {
                    resp.groups.push(g);
                }
            }
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use kafkit_protocol::Message;
    use kafkit_protocol::messages::list_groups_response::ListedGroup;

    use super::*;

    fn listed(id: &str) -> ListedGroup {
        let mut g = ListedGroup::default();
        g.group_id = id.into();
        g
    }

    /// OffsetFetch v10 names topics by id only, so a group asking for every topic
    /// (the answer would carry ids only) or naming a topic without its id stays at v9.
    #[test]
    fn offset_fetch_goes_at_v10_only_with_every_topic_id() {
        let item = |topics: Option<Vec<OffsetFetchRequestTopics>>| GroupItem {
            group: OffsetFetchRequestGroup::default()
                .with_group_id("g".into())
                .with_topics(topics),
            single: false,
        };
        let named = OffsetFetchRequestTopics::default().with_name("t".into());
        let with_id = named.clone().with_topic_id(kafkit_protocol::Uuid([3; 16]));
        let all = item(None);
        let by_name = item(Some(vec![named]));
        let by_id = item(Some(vec![with_id.clone()]));
        assert_eq!(
            OffsetFetchRequest::max_version(&OffsetFetchRequest::default(), &[&all]),
            Some(9)
        );
        assert_eq!(
            OffsetFetchRequest::max_version(&OffsetFetchRequest::default(), &[&by_name]),
            Some(9)
        );
        assert_eq!(
            OffsetFetchRequest::max_version(&OffsetFetchRequest::default(), &[&by_id]),
            None
        );
        assert_eq!(
            OffsetFetchRequest::max_version(&OffsetFetchRequest::default(), &[&by_id, &by_name]),
            Some(9)
        );
    }

    #[test]
    fn list_groups_concatenates_by_node_and_keeps_the_first_error() {
        let mut a = ListGroupsResponse::default();
        a.groups = vec![listed("a1"), listed("shared")];
        a.throttle_time_ms = 5;
        let mut b = ListGroupsResponse::default();
        b.groups = vec![listed("b1")];
        b.error_code = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS;
        let mut c = ListGroupsResponse::default();
        c.groups = vec![listed("shared"), listed("c1")];
        c.error_code = ErrorCode::NETWORK_EXCEPTION;
        let merged = ListGroupsRequest::merge(vec![(1, a), (2, b), (3, c)]);
        let ids: Vec<&str> = merged.groups.iter().map(|g| g.group_id.as_str()).collect();
        assert_eq!(ids, ["a1", "shared", "b1", "c1"]);
        assert_eq!(merged.error_code, ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
        assert_eq!(merged.throttle_time_ms, 5);
    }

    fn fetch_group(id: &str, topics: Option<&[(&str, &[i32])]>) -> OffsetFetchRequestGroup {
        let mut g = OffsetFetchRequestGroup::default();
        g.group_id = id.into();
        g.topics = topics.map(|ts| {
            ts.iter()
                .map(|(n, ps)| {
                    let mut t = OffsetFetchRequestTopics::default();
                    t.name = (*n).into();
                    t.partition_indexes = ps.to_vec();
                    t
                })
                .collect()
        });
        g
    }

    #[test]
    fn offset_fetch_batches_groups_from_v8_and_sends_one_group_per_request_below() {
        let mut req = OffsetFetchRequest::default();
        req.require_stable = true;
        req.groups = vec![
            fetch_group("g1", Some(&[("t", &[0, 1])])),
            fetch_group("g2", None),
        ];
        let (template, items) = req.split();
        assert_eq!(items.len(), 2);
        assert!(!items[0].single);
        assert_eq!(OffsetFetchRequest::max_items(8), usize::MAX);
        assert_eq!(OffsetFetchRequest::max_items(7), 1);
        let refs: Vec<&GroupItem> = items.iter().collect();
        let v8 = OffsetFetchRequest::build(&template, &refs, 8);
        assert_eq!(v8.groups.len(), 2);
        assert!(v8.group_id.is_empty() && v8.require_stable);
        assert!(v8.compute_size(8).is_ok(), "v8 form must encode at v8");
        let v7 = OffsetFetchRequest::build(&template, &refs[..1], 7);
        assert_eq!(v7.group_id, "g1");
        assert!(v7.groups.is_empty());
        let topics = v7.topics.as_ref().expect("topics");
        assert_eq!(topics[0].partition_indexes, [0, 1]);
        assert!(
            v7.compute_size(7).is_ok(),
            "single-group form must encode at v7"
        );
        // A null topic list (every partition) stays null in the single-group form.
        let v7b = OffsetFetchRequest::build(&template, &refs[1..], 7);
        assert_eq!(v7b.topics, None);
    }

    #[test]
    fn offset_fetch_single_group_caller_gets_the_single_group_form_back() {
        let mut req = OffsetFetchRequest::default();
        req.group_id = "g".into();
        let mut t = OffsetFetchRequestTopic::default();
        t.name = "t".into();
        t.partition_indexes = vec![2];
        req.topics = Some(vec![t]);
        let (template, items) = req.split();
        assert_eq!(items.len(), 1);
        assert!(items[0].single);
        let refs: Vec<&GroupItem> = items.iter().collect();
        // On a v8+ coordinator the request goes out in the multi-group form.
        let wire = OffsetFetchRequest::build(&template, &refs, 9);
        assert_eq!(wire.groups[0].group_id, "g");
        assert!(wire.compute_size(9).is_ok());
        // ... and the answer comes back in the caller's form.
        let mut resp = OffsetFetchResponse::default();
        let mut g = OffsetFetchResponseGroup::default();
        g.group_id = "g".into();
        let mut rt = OffsetFetchResponseTopics::default();
        rt.name = "t".into();
        let mut p = OffsetFetchResponsePartitions::default();
        p.partition_index = 2;
        p.committed_offset = 42;
        rt.partitions = vec![p];
        g.topics = vec![rt];
        resp.groups = vec![g];
        let (answers, _) = OffsetFetchRequest::answers(resp, &refs, 9, &mut ());
        let pairs: Vec<_> = items
            .into_iter()
            .zip(answers)
            .map(|(i, a)| (i, a.expect("answered")))
            .collect();
        let merged = OffsetFetchRequest::merge(template, pairs, 0, ());
        assert!(merged.groups.is_empty());
        assert_eq!(merged.topics[0].partitions[0].committed_offset, 42);
    }

    #[test]
    fn offset_fetch_old_answer_becomes_the_group_entry() {
        let items = [GroupItem {
            group: fetch_group("g", None),
            single: false,
        }];
        let refs: Vec<&GroupItem> = items.iter().collect();
        let mut resp = OffsetFetchResponse::default();
        resp.error_code = ErrorCode::GROUP_AUTHORIZATION_FAILED;
        let (answers, _) = OffsetFetchRequest::answers(resp, &refs, 7, &mut ());
        let a = answers[0].as_ref().expect("answered");
        assert_eq!(a.group_id, "g");
        assert_eq!(a.error_code, ErrorCode::GROUP_AUTHORIZATION_FAILED);
    }

    #[test]
    fn describe_groups_answers_by_group_id_and_fills_gaps() {
        let mut req = DescribeGroupsRequest::default();
        req.groups = vec!["a".into(), "b".into(), "c".into()];
        req.include_authorized_operations = true;
        let (template, items) = req.split();
        let refs: Vec<&String> = items.iter().collect();
        let sub = DescribeGroupsRequest::build(&template, &refs[..2], 5);
        assert_eq!(sub.groups, ["a", "b"]);
        assert!(sub.include_authorized_operations);
        let mut resp = DescribeGroupsResponse::default();
        let mut gb = DescribedGroup::default();
        gb.group_id = "b".into();
        gb.group_state = "Stable".into();
        resp.groups = vec![gb];
        let (answers, _) = DescribeGroupsRequest::answers(resp, &refs[..2], 5, &mut ());
        assert!(answers[0].is_none());
        assert_eq!(
            answers[1].as_ref().map(|g| g.group_state.as_str()),
            Some("Stable")
        );
        let f = DescribeGroupsRequest::failed(&items[2], ErrorCode::NOT_COORDINATOR);
        assert_eq!(f.group_id, "c");
        assert_eq!(f.error_code, ErrorCode::NOT_COORDINATOR);
    }
}
