//! Produce (key 0) split by partition leader: one request per leader broker, on the Produce pool.
//!
//! Retry rules (a retried Produce must not write a batch twice):
//! - A batch is *idempotent* when every record batch in its `records` is magic v2 with a
//!   producer id >= 0 (KIP-98; set by an idempotent or transactional producer after
//!   InitProducerId). The broker drops a repeated (producer id, epoch, sequence), so such a
//!   partition is retried on every retriable code of [`default_retry`] (`REQUEST_TIMED_OUT`
//!   included), on `NOT_ENOUGH_REPLICAS(_AFTER_APPEND)`, and after a lost connection or a
//!   timeout. A retry that reaches a broker which already has the batch is answered
//!   `DUPLICATE_SEQUENCE_NUMBER`; that answer goes to the caller as it is.
//! - Any other batch is retried only when the answer guarantees it was not written:
//!   `NOT_LEADER_OR_FOLLOWER`, `LEADER_NOT_AVAILABLE`, `UNKNOWN_TOPIC_OR_PARTITION`,
//!   `NOT_ENOUGH_REPLICAS` (refused before the append), or a connection that could not be
//!   opened (nothing sent). `REQUEST_TIMED_OUT`, `NOT_ENOUGH_REPLICAS_AFTER_APPEND`, a connection
//!   lost after sending and a timeout go to the caller (`REQUEST_TIMED_OUT` /
//!   `NETWORK_EXCEPTION`): the batch may be in the log.
//!
//! Leader hints (KIP-951): a `NOT_LEADER_OR_FOLLOWER` answer may carry `current_leader` and the
//! response `node_endpoints`; they are applied with `Transport::update_leader`, and when the
//! cache then names the new leader the retry goes there without a metadata refresh.
//!
//! acks=0: the broker sends no response; each partition of a request that was written to the
//! socket is reported with `NONE` and `base_offset` -1.

use std::time::Duration;

use bytes::Bytes;
use kafkit_protocol::ErrorCode;
use kafkit_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafkit_protocol::messages::produce_response::{
    NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafkit_protocol::messages::{ProduceRequest, ProduceResponse};
use kafkit_protocol::records::BATCH_HEADER_SIZE;

use super::{
    Failure, ItemRetry, PartItem, Route, SplitApi, build_topics, default_retry, match_partitions,
    merge_topics, split_topics,
};
use crate::conn::produce::PRODUCE_BY_NAME_MAX;
use crate::transport::{ConnKind, Transport};

/// Byte offsets in a v2 record batch header (Kafka protocol guide, "Record Batch").
const BATCH_LENGTH_AT: usize = 8;
const MAGIC_AT: usize = 16;
const PRODUCER_ID_AT: usize = 43;
/// The bytes before a batch's `batchLength` field counts from: baseOffset + batchLength.
const LOG_OVERHEAD: usize = 12;

/// Whether every record batch in `records` is magic v2 with a producer id >= 0, so the broker
/// deduplicates a resent copy. Reads only the batch headers; a truncated or malformed set is not
/// idempotent.
pub(crate) fn is_idempotent(records: Option<&Bytes>) -> bool {
    let Some(buf) = records else {
        return false;
    };
    let mut pos = 0usize;
    let mut batches = 0usize;
    while pos < buf.len() {
        let Some(header) = buf.get(pos..pos + BATCH_HEADER_SIZE) else {
            return false;
        };
        let mut len = [0u8; 4];
        len.copy_from_slice(&header[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4]);
        let Ok(batch_length) = usize::try_from(i32::from_be_bytes(len)) else {
            return false;
        };
        let mut pid = [0u8; 8];
        pid.copy_from_slice(&header[PRODUCER_ID_AT..PRODUCER_ID_AT + 8]);
        if header[MAGIC_AT] != 2 || i64::from_be_bytes(pid) < 0 {
            return false;
        }
        if batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD {
            return false;
        }
        pos = match pos.checked_add(LOG_OVERHEAD + batch_length) {
            Some(next) if next <= buf.len() => next,
            _ => return false,
        };
        batches += 1;
    }
    batches > 0
}

/// Codes after which a non-idempotent batch is known not to be in the log.
fn not_written(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NOT_LEADER_OR_FOLLOWER
            | ErrorCode::LEADER_NOT_AVAILABLE
            | ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
            | ErrorCode::NOT_ENOUGH_REPLICAS
    )
}

impl SplitApi for ProduceRequest {
    type Item = PartItem<PartitionProduceData>;
    type Answer = PartitionProduceResponse;
    type Extra = Vec<NodeEndpoint>;
    const CONN: ConnKind = ConnKind::Produce;

    fn split(mut self) -> (Self, Vec<Self::Item>) {
        let topics = std::mem::take(&mut self.topic_data);
        let items = split_topics(topics.into_iter().map(|t| (t.name, t.partition_data)));
        (self, items)
    }

    fn max_version(_template: &Self, _items: &[&Self::Item]) -> Option<i16> {
        Some(PRODUCE_BY_NAME_MAX)
    }

    fn target(item: &Self::Item) -> Route<'_> {
        Route::Leader {
            topic: &item.topic,
            partition: item.part.index,
        }
    }

    fn build(template: &Self, items: &[&Self::Item], _version: i16) -> Self {
        ProduceRequest::default()
            .with_transactional_id(template.transactional_id.clone())
            .with_acks(template.acks)
            .with_timeout_ms(template.timeout_ms)
            .with_topic_data(build_topics(items, |name, partition_data| {
                TopicProduceData::default()
                    .with_name(name)
                    .with_partition_data(partition_data)
            }))
    }

    fn answers(
        resp: ProduceResponse,
        items: &[&Self::Item],
        _version: i16,
        extra: &mut Self::Extra,
    ) -> (Vec<Option<Self::Answer>>, i32) {
        for e in resp.node_endpoints {
            if !extra.iter().any(|x| x.node_id == e.node_id) {
                extra.push(e);
            }
        }
        let answers = match_partitions(
            items,
            |p| p.index,
            resp.responses
                .into_iter()
                .map(|t| (t.name, t.partition_responses)),
            |a| a.index,
        );
        (answers, resp.throttle_time_ms)
    }

    fn error_code(answer: &Self::Answer) -> ErrorCode {
        answer.error_code
    }

    fn failed(item: &Self::Item, code: ErrorCode) -> Self::Answer {
        PartitionProduceResponse::default()
            .with_index(item.part.index)
            .with_error_code(code)
            .with_base_offset(-1)
    }

    fn retry(_template: &Self, item: &Self::Item, code: ErrorCode) -> ItemRetry {
        if is_idempotent(item.part.records.as_ref()) {
            match code {
                ErrorCode::NOT_ENOUGH_REPLICAS | ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND => {
                    ItemRetry::Backoff
                }
                c => default_retry(c),
            }
        } else if not_written(code) {
            match code {
                ErrorCode::NOT_ENOUGH_REPLICAS => ItemRetry::Backoff,
                _ => ItemRetry::RefreshMetadata,
            }
        } else {
            ItemRetry::No
        }
    }

    fn retry_failure(_template: &Self, item: &Self::Item, failure: Failure) -> bool {
        failure == Failure::NotSent || is_idempotent(item.part.records.as_ref())
    }

    fn apply_hint(
        t: &Transport,
        item: &Self::Item,
        answer: &Self::Answer,
        extra: &Self::Extra,
    ) -> bool {
        let leader = &answer.current_leader;
        if leader.leader_id < 0 {
            return false;
        }
        let endpoint = extra
            .iter()
            .find(|e| e.node_id == leader.leader_id)
            .map(|e| (e.host.as_str(), e.port));
        t.update_leader(
            &item.topic,
            item.part.index,
            leader.leader_id,
            leader.leader_epoch,
            endpoint,
        );
        // The hint counts only when the cache now routes the partition to the new leader.
        t.cached_metadata().is_some_and(|md| {
            super::leader_node(&md, &item.topic, item.part.index) == Ok(leader.leader_id)
        })
    }

    fn extra_wait(template: &Self) -> Duration {
        Duration::from_millis(u64::try_from(template.timeout_ms).unwrap_or(0))
    }

    fn expects_response(template: &Self) -> bool {
        template.acks != 0
    }

    fn merge(
        template: Self,
        answers: Vec<(Self::Item, Self::Answer)>,
        throttle_time_ms: i32,
        extra: Self::Extra,
    ) -> ProduceResponse {
        let _ = template;
        ProduceResponse::default()
            .with_throttle_time_ms(throttle_time_ms)
            .with_node_endpoints(extra)
            .with_responses(merge_topics(answers, |name, partition_responses| {
                TopicProduceResponse::default()
                    .with_name(name)
                    .with_partition_responses(partition_responses)
            }))
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafkit_protocol::records::{Record, RecordBatchEncoder, RecordBatchOptions};

    use super::*;

    fn batch(producer_id: Option<i64>) -> Bytes {
        let mut buf = BytesMut::new();
        let mut opts = RecordBatchOptions::new();
        if let Some(pid) = producer_id {
            opts = opts.producer(pid, 0, 0);
        }
        let mut enc = RecordBatchEncoder::new(&mut buf, opts).expect("encoder");
        enc.append(&Record::new(None, Some(Bytes::from_static(b"v"))))
            .expect("append");
        enc.finish().expect("finish");
        buf.freeze()
    }

    #[test]
    fn idempotence_is_read_from_every_batch_header() {
        assert!(is_idempotent(Some(&batch(Some(7)))));
        assert!(!is_idempotent(Some(&batch(None))));
        assert!(!is_idempotent(None));
        assert!(!is_idempotent(Some(&Bytes::new())));
        // Two batches: both must carry a producer id.
        let mut two = BytesMut::from(&batch(Some(7))[..]);
        two.extend_from_slice(&batch(None));
        assert!(!is_idempotent(Some(&two.freeze())));
        let mut two = BytesMut::from(&batch(Some(7))[..]);
        two.extend_from_slice(&batch(Some(7)));
        assert!(is_idempotent(Some(&two.freeze())));
        // Truncated: not idempotent (and no panic).
        let b = batch(Some(7));
        for cut in [1, 20, BATCH_HEADER_SIZE, b.len() - 1] {
            assert!(!is_idempotent(Some(&b.slice(..cut))), "cut at {cut}");
        }
    }

    fn item(records: Bytes) -> PartItem<PartitionProduceData> {
        let mut p = PartitionProduceData::default();
        p.index = 0;
        p.records = Some(records);
        PartItem {
            topic: "t".into(),
            part: p,
        }
    }

    #[test]
    fn plain_batches_are_retried_only_when_not_written() {
        let req = ProduceRequest::default();
        let plain = item(batch(None));
        let idem = item(batch(Some(3)));
        for code in [
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            ErrorCode::LEADER_NOT_AVAILABLE,
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        ] {
            assert_eq!(
                ProduceRequest::retry(&req, &plain, code),
                ItemRetry::RefreshMetadata
            );
            assert_eq!(
                ProduceRequest::retry(&req, &idem, code),
                ItemRetry::RefreshMetadata
            );
        }
        assert_eq!(
            ProduceRequest::retry(&req, &plain, ErrorCode::REQUEST_TIMED_OUT),
            ItemRetry::No
        );
        assert_eq!(
            ProduceRequest::retry(&req, &idem, ErrorCode::REQUEST_TIMED_OUT),
            ItemRetry::Backoff
        );
        assert_eq!(
            ProduceRequest::retry(&req, &plain, ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND),
            ItemRetry::No
        );
        assert_eq!(
            ProduceRequest::retry(&req, &plain, ErrorCode::MESSAGE_TOO_LARGE),
            ItemRetry::No
        );
        assert!(ProduceRequest::retry_failure(
            &req,
            &plain,
            Failure::NotSent
        ));
        assert!(!ProduceRequest::retry_failure(&req, &plain, Failure::Lost));
        assert!(!ProduceRequest::retry_failure(
            &req,
            &plain,
            Failure::TimedOut
        ));
        assert!(ProduceRequest::retry_failure(
            &req,
            &idem,
            Failure::TimedOut
        ));
        assert!(ProduceRequest::retry_failure(&req, &idem, Failure::Lost));
    }
}
