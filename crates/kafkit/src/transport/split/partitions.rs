//! Read-only (or repeatable) partition-led APIs split by partition leader, on the Admin pool:
//! ListOffsets (key 2), DeleteRecords (key 21), OffsetForLeaderEpoch (key 23) and
//! DescribeProducers (key 61, KIP-664).
//!
//! Each is retried on the codes of [`default_retry`] and after any connection failure or
//! timeout: asking again for offsets or producer state changes nothing, and deleting records
//! below an offset twice deletes nothing more. ListOffsets also retries `OFFSET_NOT_AVAILABLE`
//! (the new leader's high watermark is not known yet, KIP-207). `FENCED_LEADER_EPOCH` and
//! `UNKNOWN_LEADER_EPOCH` go to the caller: the epoch is the caller's to update.

use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafkit_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafkit_protocol::messages::describe_producers_request::TopicRequest;
use kafkit_protocol::messages::describe_producers_response::{PartitionResponse, TopicResponse};
use kafkit_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafkit_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafkit_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafkit_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafkit_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, DescribeProducersRequest,
    DescribeProducersResponse, ListOffsetsRequest, ListOffsetsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};

use super::{
    ItemRetry, PartItem, Route, SplitApi, build_topics, default_retry, match_partitions,
    merge_topics, split_topics,
};
use crate::transport::ConnKind;

/// `OFFSET_NOT_AVAILABLE` (78): a new leader does not know its high watermark yet.
const OFFSET_NOT_AVAILABLE: ErrorCode = ErrorCode(78);

/// Implements [`SplitApi`] for a partition-led API: the request's `topics` are split one item
/// per partition, each item goes to its partition's leader, and the response's `topics` are
/// matched back by topic name and partition index. The request and response topics differ per
/// API only in their types and field names, given here; `index` reads a request partition's
/// index. An item that fails gets an answer with its index, the error code, and the `failed`
/// fields given. Retries follow [`default_retry`] unless a `retry` item says otherwise; further
/// trait items follow the `failed` line.
macro_rules! by_leader {
    (
        $req:ident => $resp:ident,
        request: $topic:ident {
            $name:ident, $parts:ident: $part:ty, index |$p:ident| $index:expr
        },
        answer: $answer_topic:ident {
            $answer_name:ident, partitions: $answer:ident at $answer_index:ident
        },
        failed: { $($field:ident: $value:expr),* };
        $($more:item)*
    ) => {
        impl SplitApi for $req {
            type Item = PartItem<$part>;
            type Answer = $answer;
            type Extra = ();
            const CONN: ConnKind = ConnKind::Admin;

            fn split(mut self) -> (Self, Vec<Self::Item>) {
                let topics = std::mem::take(&mut self.topics);
                let items = split_topics(topics.into_iter().map(|t| (t.$name, t.$parts)));
                (self, items)
            }

            fn target(item: &Self::Item) -> Route<'_> {
                let index = |$p: &$part| -> i32 { $index };
                Route::Leader {
                    topic: &item.topic,
                    partition: index(&item.part),
                }
            }

            fn build(template: &Self, items: &[&Self::Item], _version: i16) -> Self {
                let mut req = template.clone();
                req.topics = build_topics(items, |name, partitions| {
                    let mut topic = $topic::default();
                    topic.$name = name;
                    topic.$parts = partitions;
                    topic
                });
                req
            }

            fn answers(
                resp: $resp,
                items: &[&Self::Item],
                _version: i16,
                _extra: &mut (),
            ) -> (Vec<Option<Self::Answer>>, i32) {
                let answers = match_partitions(
                    items,
                    |$p: &$part| -> i32 { $index },
                    resp.topics.into_iter().map(|t| (t.$answer_name, t.partitions)),
                    |a| a.$answer_index,
                );
                (answers, resp.throttle_time_ms)
            }

            fn error_code(answer: &Self::Answer) -> ErrorCode {
                answer.error_code
            }

            fn failed(item: &Self::Item, code: ErrorCode) -> Self::Answer {
                let index = |$p: &$part| -> i32 { $index };
                let mut answer = $answer::default();
                answer.$answer_index = index(&item.part);
                $(answer.$field = $value;)*
                answer.error_code = code;
                answer
            }

            $($more)*

            fn merge(
                _template: Self,
                answers: Vec<(Self::Item, Self::Answer)>,
                throttle_time_ms: i32,
                _extra: (),
            ) -> $resp {
                $resp::default()
                    .with_throttle_time_ms(throttle_time_ms)
                    .with_topics(merge_topics(answers, |name, partitions| {
                        let mut topic = $answer_topic::default();
                        topic.$answer_name = name;
                        topic.partitions = partitions;
                        topic
                    }))
            }
        }
    };
}

by_leader! {
    ListOffsetsRequest => ListOffsetsResponse,
    request: ListOffsetsTopic {
        name, partitions: ListOffsetsPartition, index |p| p.partition_index
    },
    answer: ListOffsetsTopicResponse {
        name, partitions: ListOffsetsPartitionResponse at partition_index
    },
    failed: {};

    fn retry(_template: &Self, _item: &Self::Item, code: ErrorCode) -> ItemRetry {
        match code {
            OFFSET_NOT_AVAILABLE => ItemRetry::Backoff,
            c => default_retry(c),
        }
    }
}

by_leader! {
    DeleteRecordsRequest => DeleteRecordsResponse,
    request: DeleteRecordsTopic {
        name, partitions: DeleteRecordsPartition, index |p| p.partition_index
    },
    answer: DeleteRecordsTopicResult {
        name, partitions: DeleteRecordsPartitionResult at partition_index
    },
    failed: { low_watermark: -1 };

    fn extra_wait(template: &Self) -> std::time::Duration {
        std::time::Duration::from_millis(u64::try_from(template.timeout_ms).unwrap_or(0))
    }
}

by_leader! {
    OffsetForLeaderEpochRequest => OffsetForLeaderEpochResponse,
    request: OffsetForLeaderTopic {
        topic, partitions: OffsetForLeaderPartition, index |p| p.partition
    },
    answer: OffsetForLeaderTopicResult {
        topic, partitions: EpochEndOffset at partition
    },
    failed: {};
}

// The items are the partition indexes themselves.
by_leader! {
    DescribeProducersRequest => DescribeProducersResponse,
    request: TopicRequest {
        name, partition_indexes: i32, index |p| *p
    },
    answer: TopicResponse {
        name, partitions: PartitionResponse at partition_index
    },
    failed: {};
}
