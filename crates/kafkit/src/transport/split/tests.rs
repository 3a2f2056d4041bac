//! Unit tests of the split model: routing by a leader lookup, per-node requests, matching
//! answers, and the merged response in the caller's order. No broker needed.

use bytes::Bytes;
use kafkit_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafkit_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafkit_protocol::messages::{ProduceRequest, ProduceResponse};
use kafkit_protocol::{ErrorCode, Uuid};

use super::*;
use crate::conn::metadata::{Broker, PartitionMetadata, TopicMetadata};

/// A cluster of brokers 1..=3; topic `a` has partitions 0..3 led by `p % 3 + 1`, topic `b`
/// partitions 0..2 led by 3, 1; `a`/3 is leaderless.
fn metadata() -> Metadata {
    let part = |partition: i32, leader_id: i32| PartitionMetadata {
        partition,
        error_code: if leader_id < 0 {
            ErrorCode::LEADER_NOT_AVAILABLE
        } else {
            ErrorCode::NONE
        },
        leader_id,
        leader_epoch: 0,
        replicas: vec![],
        isr: vec![],
        offline_replicas: vec![],
    };
    let topic = |name: &str, partitions: Vec<PartitionMetadata>| {
        std::sync::Arc::new(TopicMetadata {
            name: name.into(),
            topic_id: Uuid::default(),
            error_code: ErrorCode::NONE,
            is_internal: false,
            partitions,
        })
    };
    Metadata {
        brokers: (1..=3)
            .map(|id| Broker {
                node_id: id,
                host: "localhost".into(),
                port: 9090 + id,
                rack: None,
            })
            .collect(),
        cluster_id: None,
        controller_id: 1,
        topics: vec![
            topic("a", vec![part(0, 1), part(1, 2), part(2, 3), part(3, -1)]),
            topic("b", vec![part(0, 3), part(1, 1)]),
        ],
    }
}

fn produce(topics: &[(&str, &[i32])]) -> ProduceRequest {
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 1_000;
    req.topic_data = topics
        .iter()
        .map(|(name, parts)| {
            let mut t = TopicProduceData::default();
            t.name = (*name).into();
            t.partition_data = parts
                .iter()
                .map(|&p| {
                    let mut d = PartitionProduceData::default();
                    d.index = p;
                    d.records = Some(Bytes::from(vec![p as u8]));
                    d
                })
                .collect();
            t
        })
        .collect();
    req
}

/// The broker's answer to a per-node request: every partition it was sent, at offset
/// `100 * node + partition`, except those in `skip`.
fn answer(node: i32, sub: &ProduceRequest, skip: &[(&str, i32)]) -> ProduceResponse {
    let mut resp = ProduceResponse::default();
    // Answer topics in reverse order: matching must not depend on the broker's order.
    for t in sub.topic_data.iter().rev() {
        let mut rt = TopicProduceResponse::default();
        rt.name = t.name.clone();
        for p in &t.partition_data {
            if skip.contains(&(t.name.as_str(), p.index)) {
                continue;
            }
            let mut rp = PartitionProduceResponse::default();
            rp.index = p.index;
            rp.base_offset = i64::from(100 * node + p.index);
            rt.partition_responses.push(rp);
        }
        resp.responses.push(rt);
    }
    resp
}

#[test]
fn leader_lookup_by_index_agrees_with_a_scan_whatever_the_partition_order() {
    let mut md = metadata();
    // Partitions listed out of index order: the slot of the index is not the partition.
    std::sync::Arc::make_mut(&mut md.topics[1])
        .partitions
        .reverse();
    let index = topic_index(&md);
    for (topic, partition) in [
        ("a", 0),
        ("a", 2),
        ("a", 3),
        ("a", 9),
        ("a", -1),
        ("b", 0),
        ("b", 1),
        ("c", 0),
    ] {
        assert_eq!(
            leader_in(&md, index.get(topic).copied(), partition),
            leader_node(&md, topic, partition),
            "{topic}/{partition}"
        );
    }
    assert_eq!(leader_in(&md, index.get("b").copied(), 0), Ok(3));
    assert_eq!(leader_in(&md, index.get("b").copied(), 1), Ok(1));
    assert_eq!(
        leader_in(&md, index.get("a").copied(), -1),
        Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
}

#[test]
fn leader_lookup_gives_codes_for_unroutable_partitions() {
    let md = metadata();
    assert_eq!(leader_node(&md, "a", 1), Ok(2));
    assert_eq!(
        leader_node(&md, "a", 3),
        Err(ErrorCode::LEADER_NOT_AVAILABLE)
    );
    assert_eq!(
        leader_node(&md, "a", 9),
        Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
    assert_eq!(
        leader_node(&md, "nope", 0),
        Err(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
}

#[test]
fn split_groups_items_per_leader_in_the_callers_order() {
    let md = metadata();
    let (template, items) = produce(&[("b", &[1, 0]), ("a", &[2, 0, 1, 3])]).split();
    assert!(template.topic_data.is_empty());
    assert_eq!(template.acks, -1);
    let pending: Vec<usize> = (0..items.len()).collect();
    let plan = plan(&pending, |i| match ProduceRequest::target(&items[i]) {
        Route::Leader { topic, partition } => leader_node(&md, topic, partition),
        _ => unreachable!("produce items go to leaders"),
    });
    // Items: 0=b/1(1) 1=b/0(3) 2=a/2(3) 3=a/0(1) 4=a/1(2) 5=a/3(none)
    assert_eq!(
        plan.parts,
        vec![(1, vec![0, 3]), (3, vec![1, 2]), (2, vec![4])]
    );
    assert_eq!(plan.unroutable, vec![(5, ErrorCode::LEADER_NOT_AVAILABLE)]);

    // The request for broker 3 holds b/0 and a/2, topic by topic, with the template's fields.
    let refs: Vec<_> = plan.parts[1].1.iter().map(|&i| &items[i]).collect();
    let sub = ProduceRequest::build(&template, &refs, 9);
    assert_eq!(sub.acks, -1);
    assert_eq!(sub.timeout_ms, 1_000);
    let shape: Vec<(&str, Vec<i32>)> = sub
        .topic_data
        .iter()
        .map(|t| {
            (
                t.name.as_str(),
                t.partition_data.iter().map(|p| p.index).collect(),
            )
        })
        .collect();
    assert_eq!(shape, vec![("b", vec![0]), ("a", vec![2])]);
    // The record bytes are shared with the caller's request, not copied.
    assert_eq!(
        sub.topic_data[0].partition_data[0].records.as_deref(),
        Some(&[0u8][..])
    );
}

#[test]
fn build_puts_a_topics_partitions_in_one_entry() {
    let (template, items) = produce(&[("a", &[0]), ("b", &[0]), ("a", &[1])]).split();
    let refs: Vec<_> = items.iter().collect();
    let sub = ProduceRequest::build(&template, &refs, 9);
    let names: Vec<&str> = sub.topic_data.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(sub.topic_data[0].partition_data.len(), 2);
}

#[test]
fn merge_keeps_the_callers_order_and_fills_unanswered_items() {
    let md = metadata();
    let (template, items) = produce(&[("b", &[1, 0]), ("a", &[2, 0, 1, 3])]).split();
    let pending: Vec<usize> = (0..items.len()).collect();
    let plan = plan(&pending, |i| match ProduceRequest::target(&items[i]) {
        Route::Leader { topic, partition } => leader_node(&md, topic, partition),
        _ => unreachable!(),
    });
    let mut states: Vec<State<PartitionProduceResponse>> = (0..items.len())
        .map(|_| State::Pending {
            last: ErrorCode::REQUEST_TIMED_OUT,
        })
        .collect();
    let mut extra = Vec::new();
    let mut follow = Followup::default();
    // Answers arrive in reverse node order; broker 2 leaves a/1 out of its answer.
    for (node, list) in plan.parts.iter().rev() {
        let refs: Vec<_> = list.iter().map(|&i| &items[i]).collect();
        let sub = ProduceRequest::build(&template, &refs, 9);
        let resp = answer(*node, &sub, &[("a", 1)]);
        let (answers, _) = ProduceRequest::answers(resp, &refs, 9, &mut extra);
        settle::<ProduceRequest>(
            &template,
            &items,
            &mut states,
            list,
            answers,
            |_, _| false,
            &mut follow,
        );
    }
    assert!(!follow.refresh_metadata && follow.stale_items.is_empty());
    // a/3 had no leader and is still pending with that code at the deadline.
    for (i, code) in &plan.unroutable {
        states[*i] = State::Pending { last: *code };
    }
    let merged = finish(template, items, states, 7, extra);
    assert_eq!(merged.throttle_time_ms, 7);
    let got: Vec<(&str, i32, i16, i64)> = merged
        .responses
        .iter()
        .flat_map(|t| {
            t.partition_responses
                .iter()
                .map(move |p| (t.name.as_str(), p.index, p.error_code.0, p.base_offset))
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("b", 1, 0, 101),
            ("b", 0, 0, 300),
            ("a", 2, 0, 302),
            ("a", 0, 0, 100),
            ("a", 1, ErrorCode::UNKNOWN_SERVER_ERROR.0, -1),
            ("a", 3, ErrorCode::LEADER_NOT_AVAILABLE.0, -1),
        ]
    );
    // Same topic entries as the caller sent: b then a.
    assert_eq!(merged.responses.len(), 2);
}

#[test]
fn retriable_answers_stay_pending_and_ask_for_a_refresh() {
    let (template, items) = produce(&[("a", &[0, 1])]).split();
    let mut states: Vec<State<PartitionProduceResponse>> = (0..2)
        .map(|_| State::Pending {
            last: ErrorCode::REQUEST_TIMED_OUT,
        })
        .collect();
    let mut moved = PartitionProduceResponse::default();
    moved.index = 0;
    moved.error_code = ErrorCode::NOT_LEADER_OR_FOLLOWER;
    let mut too_large = PartitionProduceResponse::default();
    too_large.index = 1;
    too_large.error_code = ErrorCode::MESSAGE_TOO_LARGE;
    let mut follow = Followup::default();
    settle::<ProduceRequest>(
        &template,
        &items,
        &mut states,
        &[0, 1],
        vec![Some(moved.clone()), Some(too_large)],
        |_, _| false,
        &mut follow,
    );
    assert!(
        !follow.refresh_metadata,
        "a partition error: its topic only"
    );
    assert_eq!(follow.stale_items, [0]);
    assert!(matches!(
        states[0],
        State::Pending {
            last: ErrorCode::NOT_LEADER_OR_FOLLOWER
        }
    ));
    assert!(matches!(&states[1], State::Done(a) if a.error_code == ErrorCode::MESSAGE_TOO_LARGE));
    // With a leader hint that the cache took, no metadata refresh is needed.
    let mut follow = Followup::default();
    settle::<ProduceRequest>(
        &template,
        &items,
        &mut states,
        &[0],
        vec![Some(moved)],
        |_, _| true,
        &mut follow,
    );
    assert!(!follow.refresh_metadata && follow.stale_items.is_empty());
}

#[test]
fn match_partitions_ignores_extra_answers_and_duplicates() {
    let items = split_topics(vec![("t".to_string(), vec![0, 1, 1])]);
    let refs: Vec<_> = items.iter().collect();
    let answers = match_partitions(
        &refs,
        |p| *p,
        vec![("t".to_string(), vec![(1, "one"), (0, "zero"), (7, "stray")])],
        |a| a.0,
    );
    assert_eq!(
        answers,
        vec![Some((0, "zero")), Some((1, "one")), None],
        "a partition listed twice is answered once"
    );
}

#[test]
fn failures_map_to_network_exception_or_request_timed_out() {
    assert_eq!(Failure::NotSent.code(), ErrorCode::NETWORK_EXCEPTION);
    assert_eq!(Failure::Lost.code(), ErrorCode::NETWORK_EXCEPTION);
    assert_eq!(Failure::TimedOut.code(), ErrorCode::REQUEST_TIMED_OUT);
    let refused = Error::Connect {
        addr: "x:1".into(),
        source: std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
    };
    assert_eq!(classify(&refused), Some(Failure::NotSent));
    let timeout = Error::Timeout {
        operation: "Produce",
        timeout: std::time::Duration::from_millis(5),
    };
    assert_eq!(classify(&timeout), Some(Failure::TimedOut));
    assert_eq!(classify(&Error::Protocol("x".into())), None);
}

#[test]
fn default_retry_table() {
    for (code, want) in [
        (
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            ItemRetry::RefreshMetadata,
        ),
        (ErrorCode::LEADER_NOT_AVAILABLE, ItemRetry::RefreshMetadata),
        (
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
            ItemRetry::RefreshMetadata,
        ),
        (ErrorCode::NOT_COORDINATOR, ItemRetry::RefreshCoordinator),
        (
            ErrorCode::COORDINATOR_NOT_AVAILABLE,
            ItemRetry::RefreshCoordinator,
        ),
        (ErrorCode::COORDINATOR_LOAD_IN_PROGRESS, ItemRetry::Backoff),
        (ErrorCode::REQUEST_TIMED_OUT, ItemRetry::Backoff),
        (ErrorCode::TOPIC_AUTHORIZATION_FAILED, ItemRetry::No),
        (ErrorCode::UNKNOWN_SERVER_ERROR, ItemRetry::No),
    ] {
        assert_eq!(default_retry(code), want, "{code}");
    }
}

#[test]
fn group_and_resource_apis_do_not_retry_partition_codes() {
    // A group's or a config resource's UNKNOWN_TOPIC_OR_PARTITION names a missing topic, not a
    // moved leader: retrying could only wait for the deadline.
    assert_eq!(
        coordinator_retry(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
        ItemRetry::No
    );
    assert_eq!(
        coordinator_retry(ErrorCode::NOT_COORDINATOR),
        ItemRetry::RefreshCoordinator
    );
    assert_eq!(
        coordinator_retry(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS),
        ItemRetry::Backoff
    );
    assert_eq!(
        resource_retry(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
        ItemRetry::No
    );
    assert_eq!(
        resource_retry(ErrorCode::REQUEST_TIMED_OUT),
        ItemRetry::Backoff
    );
}

#[test]
fn keyed_answers_match_their_items_in_any_order_and_repeats_fill_in_turn() {
    let items: Vec<String> = ["g1", "g2", "g1", "g3"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let refs: Vec<&String> = items.iter().collect();
    // Answers out of order, one for an unknown key, both copies of g1, none for g3.
    let answers = vec![("g2", 2), ("zz", 9), ("g1", 10), ("g1", 11)];
    let out = super::match_keyed(
        &refs,
        answers,
        |g: &String| super::key_hash(g.as_str()),
        |a: &(&str, i32)| super::key_hash(a.0),
        |g: &String, a: &(&str, i32)| g == a.0,
    );
    assert_eq!(
        out,
        vec![Some(("g1", 10)), Some(("g2", 2)), Some(("g1", 11)), None]
    );
}
