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

impl SplitApi for ListOffsetsRequest {
    type Item = PartItem<ListOffsetsPartition>;
    type Answer = ListOffsetsPartitionResponse;
    type Extra = ();
    const CONN: ConnKind = ConnKind::Admin;

    fn split(mut self) -> (Self, Vec<Self::Item>) {
        let topics = std::mem::take(&mut self.topics);
        let items = split_topics(topics.into_iter().map(|t| (t.name, t.partitions)));
        (self, items)
    }

    fn target(item: &Self::Item) -> Route<'_> {
        Route::Leader {
            topic: &item.topic,
            partition: item.part.partition_index,
        }
    }

    fn build(template: &Self, items: &[&Self::Item], _version: i16) -> Self {
        let mut req = template.clone();
        req.topics = build_topics(items, |name, partitions| {
            ListOffsetsTopic::default()
                .with_name(name)
                .with_partitions(partitions)
        });
        req
    }

    fn answers(
        resp: ListOffsetsResponse,
        items: &[&Self::Item],
        _version: i16,
        _extra: &mut (),
    ) -> (Vec<Option<Self::Answer>>, i32) {
        let answers = match_partitions(
            items,
            |p| p.partition_index,
            resp.topics.into_iter().map(|t| (t.name, t.partitions)),
            |a| a.partition_index,
        );
        (answers, resp.throttle_time_ms)
    }

    fn error_code(answer: &Self::Answer) -> ErrorCode {
        answer.error_code
    }

    fn failed(item: &Self::Item, code: ErrorCode) -> Self::Answer {
        ListOffsetsPartitionResponse::default()
            .with_partition_index(item.part.partition_index)
            .with_error_code(code)
    }

    fn retry(_template: &Self, _item: &Self::Item, code: ErrorCode) -> ItemRetry {
        match code {
            OFFSET_NOT_AVAILABLE => ItemRetry::Backoff,
            c => default_retry(c),
        }
    }

    fn merge(
        _template: Self,
        answers: Vec<(Self::Item, Self::Answer)>,
        throttle_time_ms: i32,
        _extra: (),
    ) -> ListOffsetsResponse {
        ListOffsetsResponse::default()
            .with_throttle_time_ms(throttle_time_ms)
            .with_topics(merge_topics(answers, |name, partitions| {
                ListOffsetsTopicResponse::default()
                    .with_name(name)
                    .with_partitions(partitions)
            }))
    }
}

impl SplitApi for DeleteRecordsRequest {
    type Item = PartItem<DeleteRecordsPartition>;
    type Answer = DeleteRecordsPartitionResult;
    type Extra = ();
    const CONN: ConnKind = ConnKind::Admin;

    fn split(mut self) -> (Self, Vec<Self::Item>) {
        let topics = std::mem::take(&mut self.topics);
        let items = split_topics(topics.into_iter().map(|t| (t.name, t.partitions)));
        (self, items)
    }

    fn target(item: &Self::Item) -> Route<'_> {
        Route::Leader {
            topic: &item.topic,
            partition: item.part.partition_index,
        }
    }

    fn build(template: &Self, items: &[&Self::Item], _version: i16) -> Self {
        let mut req = template.clone();
        req.topics = build_topics(items, |name, partitions| {
            DeleteRecordsTopic::default()
                .with_name(name)
                .with_partitions(partitions)
        });
        req
    }

    fn answers(
        resp: DeleteRecordsResponse,
        items: &[&Self::Item],
        _version: i16,
        _extra: &mut (),
    ) -> (Vec<Option<Self::Answer>>, i32) {
        let answers = match_partitions(
            items,
            |p| p.partition_index,
            resp.topics.into_iter().map(|t| (t.name, t.partitions)),
            |a| a.partition_index,
        );
        (answers, resp.throttle_time_ms)
    }

    fn error_code(answer: &Self::Answer) -> ErrorCode {
        answer.error_code
    }

    fn failed(item: &Self::Item, code: ErrorCode) -> Self::Answer {
        DeleteRecordsPartitionResult::default()
            .with_partition_index(item.part.partition_index)
            .with_low_watermark(-1)
            .with_error_code(code)
    }

    fn extra_wait(template: &Self) -> std::time::Duration {
        std::time::Duration::from_millis(u64::try_from(template.timeout_ms).unwrap_or(0))
    }

    fn merge(
        _template: Self,
        answers: Vec<(Self::Item, Self::Answer)>,
        throttle_time_ms: i32,
        _extra: (),
    ) -> DeleteRecordsResponse {
        DeleteRecordsResponse::default()
            .with_throttle_time_ms(throttle_time_ms)
            .with_topics(merge_topics(answers, |name, partitions| {
                DeleteRecordsTopicResult::default()
                    .with_name(name)
                    .with_partitions(partitions)
            }))
    }
}

impl SplitApi for OffsetForLeaderEpochRequest {
    type Item = PartItem<OffsetForLeaderPartition>;
    type Answer = EpochEndOffset;
    type Extra = ();
    const CONN: ConnKind = ConnKind::Admin;

    fn split(mut self) -> (Self, Vec<Self::Item>) {
        let topics = std::mem::take(&mut self.topics);
        let items = split_topics(topics.into_iter().map(|t| (t.topic, t.partitions)));
        (self, items)
    }

    fn target(item: &Self::Item) -> Route<'_> {
        Route::Leader {
            topic: &item.topic,
            partition: item.part.partition,
        }
    }

    fn build(template: &Self, items: &[&Self::Item], _version: i16) -> Self {
        let mut req = template.clone();
        req.topics = build_topics(items, |name, partitions| {
            OffsetForLeaderTopic::default()
                .with_topic(name)
                .with_partitions(partitions)
        });
        req
    }

    fn answers(
        resp: OffsetForLeaderEpochResponse,
        items: &[&Self::Item],
        _version: i16,
        _extra: &mut (),
    ) -> (Vec<Option<Self::Answer>>, i32) {
        let answers = match_partitions(
            items,
            |p| p.partition,
            resp.topics.into_iter().map(|t| (t.topic, t.partitions)),
            |a| a.partition,
        );
        (answers, resp.throttle_time_ms)
    }

    fn error_code(answer: &Self::Answer) -> ErrorCode {
        answer.error_code
    }

    fn failed(item: &Self::Item, code: ErrorCode) -> Self::Answer {
        EpochEndOffset::default()
            .with_partition(item.part.partition)
            .with_error_code(code)
    }

    fn merge(
        _template: Self,
        answers: Vec<(Self::Item, Self::Answer)>,
        throttle_time_ms: i32,
        _extra: (),
    ) -> OffsetForLeaderEpochResponse {
        OffsetForLeaderEpochResponse::default()
            .with_throttle_time_ms(throttle_time_ms)
            .with_topics(merge_topics(answers, |name, partitions| {
                OffsetForLeaderTopicResult::default()
                    .with_topic(name)
                    .with_partitions(partitions)
            }))
    }
}

impl SplitApi for DescribeProducersRequest {
    /// The partition index.
    type Item = PartItem<i32>;
    type Answer = PartitionResponse;
    type Extra = ();
    const CONN: ConnKind = ConnKind::Admin;

    fn split(mut self) -> (Self, Vec<Self::Item>) {
        let topics = std::mem::take(&mut self.topics);
        let items = split_topics(topics.into_iter().map(|t| (t.name, t.partition_indexes)));
        (self, items)
    }

    fn target(item: &Self::Item) -> Route<'_> {
        Route::Leader {
            topic: &item.topic,
            partition: item.part,
        }
    }

    fn build(template: &Self, items: &[&Self::Item], _version: i16) -> Self {
        let mut req = template.clone();
        req.topics = build_topics(items, |name, partition_indexes| {
            TopicRequest::default()
                .with_name(name)
                .with_partition_indexes(partition_indexes)
        });
        req
    }

    fn answers(
        resp: DescribeProducersResponse,
        items: &[&Self::Item],
        _version: i16,
        _extra: &mut (),
    ) -> (Vec<Option<Self::Answer>>, i32) {
        let answers = match_partitions(
            items,
            |p| *p,
            resp.topics.into_iter().map(|t| (t.name, t.partitions)),
            |a| a.partition_index,
        );
        (answers, resp.throttle_time_ms)
    }

    fn error_code(answer: &Self::Answer) -> ErrorCode {
        answer.error_code
    }

    fn failed(item: &Self::Item, code: ErrorCode) -> Self::Answer {
        PartitionResponse::default()
            .with_partition_index(item.part)
            .with_error_code(code)
    }

    fn merge(
        _template: Self,
        answers: Vec<(Self::Item, Self::Answer)>,
        throttle_time_ms: i32,
        _extra: (),
    ) -> DescribeProducersResponse {
        DescribeProducersResponse::default()
            .with_throttle_time_ms(throttle_time_ms)
            .with_topics(merge_topics(answers, |name, partitions| {
                TopicResponse::default()
                    .with_name(name)
                    .with_partitions(partitions)
            }))
    }
}
