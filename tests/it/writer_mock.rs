//! The Writer against librdkafka's mock cluster: 3 brokers, 2 topics x 100 partitions. Each
//! flush sends exactly ONE Produce request per broker, carrying every partition that broker
//! leads, across both topics; every record is acknowledged with consecutive offsets.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use integration_tests::{mock_cluster, unique_topic};
use kafkit::{ProducerRecord, Transport, Writer};
use kafkit_protocol::ApiKey;

const BROKERS: i32 = 3;
const PARTITIONS: i32 = 100;
const ROUNDS: usize = 4;
const PER_PARTITION: usize = 2;

#[tokio::test(flavor = "current_thread")]
async fn one_produce_request_per_broker_per_flush_across_topics_and_partitions() {
    let cluster = mock_cluster(BROKERS);
    let topics = [unique_topic("writer-mock-a"), unique_topic("writer-mock-b")];
    // The mock places replicas (leader first) round-robin from a random broker, so every
    // broker leads about a third of each topic. (Setting 200 leaders one by one with
    // `mock_topic_spread` takes the mock most of a minute.)
    for t in &topics {
        cluster
            .create_topic(t, PARTITIONS, BROKERS)
            .expect("mock create_topic");
    }
    let transport = Transport::builder(cluster.bootstrap_servers().split(','))
        .build()
        .expect("transport");
    // A linger far longer than the test: only flush() makes batches ready, so each round is
    // one "linger window" whose end is known exactly.
    let completions = Arc::new(AtomicU64::new(0));
    let seen = completions.clone();
    let writer = Writer::builder(transport.clone())
        .linger(Duration::from_secs(60))
        .request_timeout(Duration::from_secs(10))
        .delivery_timeout(Duration::from_secs(70))
        .on_completion(move |md, err| {
            // Count only: a panic here would run on the writer's task, not the test's.
            if err.is_none() && md.offset >= 0 {
                seen.fetch_add(1, Ordering::Relaxed);
            }
        })
        .build()
        .expect("writer");

    let mut acked: BTreeMap<(String, i32), Vec<i64>> = BTreeMap::new();
    for round in 0..ROUNDS {
        let mut futures = Vec::new();
        for t in &topics {
            for p in 0..PARTITIONS {
                for k in 0..PER_PARTITION {
                    let value = Bytes::from(format!("{t}/{p}/{round}/{k}"));
                    let f = writer
                        .send(ProducerRecord::new(t, value).partition(p))
                        .await
                        .expect("send");
                    futures.push(f);
                }
            }
        }
        writer.flush().await.expect("flush");
        // flush returns once every record sent before it has its outcome, callback included.
        assert_eq!(
            completions.load(Ordering::Relaxed),
            ((round + 1) * PER_PARTITION * PARTITIONS as usize * topics.len()) as u64,
            "round {round}: callbacks run by the time flush returns"
        );
        for f in futures {
            let md = f.await.expect("every record is acknowledged");
            acked
                .entry((md.topic.to_string(), md.partition))
                .or_default()
                .push(md.offset);
        }
        let stats = writer.stats();
        for node in 1..=BROKERS {
            assert_eq!(
                stats.produce_requests.get(&node).copied(),
                Some(round as u64 + 1),
                "round {round}: Produce requests to broker {node}: {:?}",
                stats.produce_requests
            );
            assert_eq!(
                transport.requests_sent(node, ApiKey::Produce),
                round as u64 + 1,
                "round {round}: Produce requests the transport sent to broker {node}"
            );
        }
    }

    // Every partition of both topics got all its records, at consecutive offsets from 0.
    assert_eq!(acked.len(), topics.len() * PARTITIONS as usize);
    let want: Vec<i64> = (0..(ROUNDS * PER_PARTITION) as i64).collect();
    for ((t, p), offsets) in &acked {
        assert_eq!(offsets, &want, "{t}/{p}");
    }
    let stats = writer.stats();
    assert_eq!(
        stats.records,
        (ROUNDS * PER_PARTITION * PARTITIONS as usize * topics.len()) as u64
    );
    assert_eq!(stats.errors, 0);
    // One batch per partition per round.
    assert_eq!(
        stats.batches,
        (ROUNDS * PARTITIONS as usize * topics.len()) as u64
    );
    // The callback ran once per record, each time with its offset and no error.
    assert_eq!(completions.load(Ordering::Relaxed), stats.records);
    writer.close(Duration::from_secs(10)).await.expect("close");
}

/// A batch the broker refuses as too large (`MESSAGE_TOO_LARGE`, e.g. above the topic's
/// `max.message.bytes`) is split and resent until each record stands alone; a single record the
/// broker refuses fails alone with that code, and the partition carries on in order.
#[tokio::test(flavor = "current_thread")]
async fn a_batch_refused_as_too_large_is_split_and_only_a_lone_record_fails() {
    use kafkit::{ErrorCode, ProduceError};
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    let cluster = mock_cluster(1);
    let topic = unique_topic("writer-mock-split");
    cluster
        .create_topic(&topic, 1, 1)
        .expect("mock create_topic");
    let transport = Transport::builder(cluster.bootstrap_servers().split(','))
        .build()
        .expect("transport");
    let writer = Writer::builder(transport)
        .linger(Duration::from_secs(60))
        .request_timeout(Duration::from_secs(5))
        .delivery_timeout(Duration::from_secs(70))
        .build()
        .expect("writer");
    let send = |v: &'static str| {
        writer.send(ProducerRecord::new(
            &topic,
            Bytes::from_static(v.as_bytes()),
        ))
    };
    // The first two Produce requests are refused: the batch of 4, then its first half of 2.
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
        ],
    );
    let mut futures = Vec::new();
    for v in ["a", "b", "c", "d"] {
        futures.push(send(v).await.expect("send"));
    }
    writer.flush().await.expect("flush");
    let mut offsets = Vec::new();
    for f in futures {
        offsets.push(f.await.expect("written after the split").offset);
    }
    assert_eq!(offsets, vec![0, 1, 2, 3]);
    assert!(writer.stats().retries >= 2);

    // A record alone that the broker refuses fails with MESSAGE_TOO_LARGE; the next is written.
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );
    let lone = send("e").await.expect("send");
    writer.flush().await.expect("flush");
    let err = lone.await.expect_err("refused");
    assert!(
        matches!(
            err,
            ProduceError::Broker {
                code: ErrorCode::MESSAGE_TOO_LARGE,
                ..
            }
        ),
        "{err:?}"
    );
    let next = send("f").await.expect("send");
    writer.flush().await.expect("flush");
    assert_eq!(next.await.expect("written").offset, 4);
    writer.close(Duration::from_secs(5)).await.expect("close");
}

/// Idempotence left at its default goes away when the cluster refuses a producer id
/// (`CLUSTER_AUTHORIZATION_FAILED` on InitProducerId); asked for explicitly, the records fail
/// with that error instead.
#[tokio::test(flavor = "current_thread")]
async fn a_refused_producer_id_turns_default_idempotence_off_but_fails_explicit_idempotence() {
    use kafkit::{ErrorCode, ProduceError};
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    let cluster = mock_cluster(1);
    let topic = unique_topic("writer-mock-pid");
    cluster
        .create_topic(&topic, 1, 1)
        .expect("mock create_topic");
    let transport = Transport::builder(cluster.bootstrap_servers().split(','))
        .build()
        .expect("transport");
    let refuse = || {
        cluster.request_errors(
            RDKafkaApiKey::InitProducerId,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED],
        );
    };
    let record = || ProducerRecord::new(&topic, Bytes::from_static(b"v"));

    refuse();
    let default = Writer::builder(transport.clone()).build().expect("writer");
    let ack = default.send(record()).await.expect("send").await;
    assert_eq!(ack.expect("written without idempotence").offset, 0);

    refuse();
    let explicit = Writer::builder(transport)
        .enable_idempotence(true)
        .build()
        .expect("writer");
    let err = explicit
        .send(record())
        .await
        .expect("send")
        .await
        .expect_err("no producer id");
    assert_eq!(
        err.error_code(),
        Some(ErrorCode::CLUSTER_AUTHORIZATION_FAILED),
        "{err:?}"
    );
    assert!(matches!(err, ProduceError::Client(_)), "{err:?}");
}

/// With the default balancer, keyless records go only to partitions whose leader is up (Java's
/// uniform sticky partitioner over available partitions, KIP-794); keyed ones keep their
/// murmur2 partition.
#[tokio::test(flavor = "current_thread")]
async fn keyless_records_avoid_partitions_without_a_live_leader() {
    let cluster = mock_cluster(3);
    let topic = unique_topic("writer-mock-available");
    cluster
        .create_topic(&topic, 6, 1)
        .expect("mock create_topic");
    let transport = Transport::builder(cluster.bootstrap_servers().split(','))
        .build()
        .expect("transport");
    let md = transport.metadata_for(&[&topic]).await.expect("metadata");
    let down_leads: Vec<i32> = md
        .topic(&topic)
        .expect("topic")
        .partitions
        .iter()
        .filter(|p| p.leader_id == 2)
        .map(|p| p.partition)
        .collect();
    assert!(!down_leads.is_empty(), "broker 2 leads some partition");
    cluster.broker_down(2).expect("broker down");
    transport.invalidate_metadata();

    let writer = Writer::builder(transport)
        .request_timeout(Duration::from_secs(1))
        .delivery_timeout(Duration::from_secs(2))
        // Switch partitions often, so many choices are made.
        .batch_size(1_024)
        .build()
        .expect("writer");
    let mut futures = Vec::new();
    for _ in 0..200 {
        let r = ProducerRecord::new(&topic, Bytes::from(vec![b'v'; 100]));
        futures.push(writer.send(r).await.expect("send"));
    }
    let mut used = std::collections::BTreeSet::new();
    for f in futures {
        let md = f.await.expect("written to a live leader");
        used.insert(md.partition);
    }
    assert!(
        used.iter().all(|p| !down_leads.contains(p)),
        "{used:?} vs {down_leads:?}"
    );
    assert!(used.len() > 1, "the sticky choice moved on: {used:?}");
    cluster.broker_up(2).expect("broker up");
}

/// As the Java producer and librdkafka's: a record for a topic that does not exist asks the
/// broker to create it (`allow_auto_topic_creation` is on by default) and is then written.
#[tokio::test(flavor = "current_thread")]
async fn a_record_for_a_missing_topic_creates_it_by_default() {
    let cluster = mock_cluster(1);
    let topic = unique_topic("writer-mock-auto-create");
    let transport = Transport::builder(cluster.bootstrap_servers().split(','))
        .build()
        .expect("transport");
    let md = transport.metadata_for(&[&topic]).await.expect("metadata");
    assert_eq!(
        md.topic(&topic).map(|t| t.error_code),
        Some(kafkit::ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
        "the topic does not exist before the first record"
    );
    let writer = Writer::builder(transport.clone()).build().expect("writer");
    let ack = tokio::time::timeout(
        Duration::from_secs(20),
        writer.produce(ProducerRecord::new(&topic, "created")),
    )
    .await
    .expect("within 20 s")
    .expect("the topic was created and the record written");
    assert_eq!((&*ack.topic, ack.offset), (topic.as_str(), 0));
    transport.invalidate_metadata();
    let md = transport.metadata_for(&[&topic]).await.expect("metadata");
    let t = md.topic(&topic).expect("listed");
    assert!(t.error_code.is_ok() && !t.partitions.is_empty(), "{t:?}");
}

/// Without auto creation, a record for a missing topic fails after `max_block` (Java
/// `max.block.ms`) with a typed error naming the topic's error code; it was never taken.
#[tokio::test(flavor = "current_thread")]
async fn a_topic_whose_metadata_never_comes_fails_after_max_block() {
    use kafkit::{ErrorCode, ProduceError};

    let cluster = mock_cluster(1);
    let topic = unique_topic("writer-mock-max-block");
    let transport = Transport::builder(cluster.bootstrap_servers().split(','))
        .build()
        .expect("transport");
    let writer = Writer::builder(transport.clone())
        .allow_auto_topic_creation(false)
        .max_block(Duration::from_millis(400))
        .build()
        .expect("writer");
    let started = tokio::time::Instant::now();
    let err = writer
        .produce(ProducerRecord::new(&topic, "v"))
        .await
        .expect_err("no such topic");
    let waited = started.elapsed();
    match &err {
        ProduceError::BlockTimeout {
            topic: t,
            max_block,
            cause: Some(cause),
        } => {
            assert_eq!(t, &topic);
            assert_eq!(*max_block, Duration::from_millis(400));
            assert!(
                matches!(
                    **cause,
                    ProduceError::TopicMetadata {
                        code: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                        ..
                    }
                ),
                "{cause:?}"
            );
            // Issue: it read "broker refused the records: UNKNOWN_TOPIC_OR_PARTITION", though
            // no record was ever sent.
            let text = err.to_string();
            assert!(!text.contains("refused"), "{text}");
            assert!(
                text.contains("no usable metadata for topic")
                    && text.contains("UNKNOWN_TOPIC_OR_PARTITION"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        err.error_code(),
        Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
    assert!(err.is_retriable(), "a timeout, as Java's");
    assert!(waited >= Duration::from_millis(400), "waited {waited:?}");
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    assert_eq!(
        writer.stats().buffered_records,
        0,
        "the record was not taken"
    );
    // The topic was never asked to be created.
    let md = transport.metadata_for(&[&topic]).await.expect("metadata");
    assert_eq!(
        md.topic(&topic).map(|t| t.error_code),
        Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
}

/// Issue: a dialer with `request_timeout(Duration::MAX)` made the Writer's sender task panic
/// (request timeout + the Produce wait overflowed), so `produce` failed with `Closed`.
#[tokio::test(flavor = "current_thread")]
async fn a_dialer_without_request_timeout_still_produces() {
    let cluster = mock_cluster(1);
    let topic = unique_topic("writer-mock-spans");
    cluster
        .create_topic(&topic, 1, 1)
        .expect("mock create_topic");
    let dialer = kafkit::Dialer::builder()
        .request_timeout(Duration::MAX)
        .build();
    let transport = Transport::builder(cluster.bootstrap_servers().split(','))
        .dialer(dialer)
        .build()
        .expect("transport");
    let writer = Writer::builder(transport).build().expect("writer");
    let written = tokio::time::timeout(
        Duration::from_secs(30),
        writer.produce(ProducerRecord::new(&topic, "v")),
    )
    .await
    .expect("an outcome")
    .expect("written");
    assert_eq!(written.offset, 0);
    writer.close(Duration::MAX).await.expect("closed in time");
}

/// Issue: `try_send` to a topic that can never resolve answered a retriable
/// LEADER_NOT_AVAILABLE "is being fetched; try again" on every call, forever: for an illegal
/// name (which `send` refuses at once) and for a missing topic with auto creation off.
#[tokio::test(flavor = "current_thread")]
async fn try_send_answers_what_the_topic_lookup_learnt() {
    use kafkit::{ErrorCode, ProduceError};

    let cluster = mock_cluster(1);
    let topic = unique_topic("writer-mock-try-send");
    let transport = Transport::builder(cluster.bootstrap_servers().split(','))
        .build()
        .expect("transport");
    let writer = Writer::builder(transport)
        .allow_auto_topic_creation(false)
        .max_block(Duration::from_millis(300))
        .build()
        .expect("writer");
    for bad in ["bad name", ""] {
        let err = writer
            .try_send(ProducerRecord::new(bad, "v"))
            .expect_err("an illegal name");
        let sent = writer.send(ProducerRecord::new(bad, "v")).await;
        if bad.is_empty() {
            // An empty name is no name at all (kafka-go's rule for an empty topic).
            assert!(matches!(err, ProduceError::NoTopic), "{err:?}");
            continue;
        }
        assert!(
            matches!(err, ProduceError::InvalidTopic { ref topic } if topic == bad),
            "{err:?}"
        );
        assert_eq!(err.error_code(), Some(ErrorCode::INVALID_TOPIC_EXCEPTION));
        assert!(!err.is_retriable());
        assert!(
            matches!(sent, Err(ProduceError::InvalidTopic { .. })),
            "send says the same: {sent:?}"
        );
    }
    // The first call starts the lookup: nothing is known yet.
    let first = writer
        .try_send(ProducerRecord::new(&topic, "v"))
        .expect_err("not known yet");
    assert!(
        matches!(first, ProduceError::MetadataPending { topic: ref t } if t == &topic),
        "{first:?}"
    );
    assert_eq!(first.error_code(), Some(ErrorCode::LEADER_NOT_AVAILABLE));
    assert!(first.is_retriable());
    // `send` shares that lookup; once it has given up, the lookup has an answer.
    let sent = writer.send(ProducerRecord::new(&topic, "v")).await;
    assert!(
        matches!(sent, Err(ProduceError::BlockTimeout { .. })),
        "{sent:?}"
    );
    for _ in 0..3 {
        let again = writer
            .try_send(ProducerRecord::new(&topic, "v"))
            .expect_err("still missing");
        assert!(
            matches!(
                again,
                ProduceError::TopicMetadata {
                    code: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    ..
                }
            ),
            "{again:?}"
        );
        assert!(!again.to_string().contains("try again"), "{again}");
    }
}

/// `send_detached` makes no future: every record's outcome reaches the `on_completion`
/// callback, written ones with consecutive offsets and a refused one with the broker's code,
/// by the time `flush` returns. A writer without a callback refuses `send_detached` (the
/// outcome would be seen nowhere) and takes nothing.
#[tokio::test(flavor = "current_thread")]
async fn send_detached_reports_every_outcome_through_the_callback() {
    use kafkit::{ErrorCode, ProduceError};
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    use std::sync::Mutex;

    let cluster = mock_cluster(1);
    let topic = unique_topic("writer-mock-detached");
    cluster
        .create_topic(&topic, 2, 1)
        .expect("mock create_topic");
    let transport = Transport::builder(cluster.bootstrap_servers().split(','))
        .build()
        .expect("transport");

    let bare = Writer::builder(transport.clone())
        .build()
        .expect("writer without a callback");
    let refused = bare
        .send_detached(ProducerRecord::new(&topic, Bytes::from_static(b"x")))
        .await
        .expect_err("no callback, no detached send");
    assert!(
        matches!(refused, ProduceError::NoCompletionCallback),
        "{refused:?}"
    );
    assert!(!refused.is_retriable());
    assert_eq!(bare.stats().records, 0, "nothing was taken");
    bare.close(Duration::from_secs(5)).await.expect("close");

    // (partition, offset, error code) of every outcome, in callback order.
    type Seen = Vec<(i32, i64, Option<ErrorCode>)>;
    let outcomes: Arc<Mutex<Seen>> = Arc::default();
    let seen = outcomes.clone();
    let writer = Writer::builder(transport)
        .linger(Duration::from_secs(60))
        .request_timeout(Duration::from_secs(5))
        .delivery_timeout(Duration::from_secs(70))
        .on_completion(move |md, err| {
            if let Ok(mut s) = seen.lock() {
                s.push((md.partition, md.offset, err.and_then(|e| e.error_code())));
            }
        })
        .build()
        .expect("writer");
    for i in 0..10 {
        writer
            .send_detached(
                ProducerRecord::new(&topic, Bytes::from(format!("v{i}"))).partition(i % 2),
            )
            .await
            .expect("taken");
    }
    // Refused at once, as `send` would: the partition does not exist.
    let err = writer
        .send_detached(ProducerRecord::new(&topic, Bytes::from_static(b"z")).partition(7))
        .await
        .expect_err("unknown partition");
    assert_eq!(
        err.error_code(),
        Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
    writer.flush().await.expect("flush");
    {
        let mut got = outcomes.lock().expect("outcomes").clone();
        got.sort();
        let want: Seen = (0..2)
            .flat_map(|p| (0..5).map(move |o| (p, o, None)))
            .collect();
        assert_eq!(got, want, "every record written, each reported once");
    }

    // A batch the broker refuses with an error retrying cannot fix: its record fails, and
    // the callback says why.
    cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED],
    );
    writer
        .send_detached(ProducerRecord::new(&topic, Bytes::from_static(b"refused")).partition(0))
        .await
        .expect("taken");
    writer.flush().await.expect("flush");
    let last = outcomes.lock().expect("outcomes").last().copied();
    assert_eq!(
        last,
        Some((0, -1, Some(ErrorCode::TOPIC_AUTHORIZATION_FAILED))),
        "the refused record's outcome"
    );
    assert_eq!(outcomes.lock().expect("outcomes").len(), 11);
    writer.close(Duration::from_secs(5)).await.expect("close");
}

/// Borrowed records (`send_ref`, `send_detached_ref`, `try_send_ref`) are copied when the
/// writer takes them: the caller reuses one key buffer, one value buffer and one header list for
/// every record, rewriting them between sends, and each record reads back (with librdkafka)
/// with its own key, value, header and timestamp, in order. A borrowed record's errors are an
/// owned one's: a partition that does not exist is refused and nothing is taken.
#[tokio::test(flavor = "current_thread")]
async fn borrowed_records_are_copied_when_taken() {
    use integration_tests::peer_consume;
    use kafkit::{ErrorCode, ProducerRecordRef};
    use kafkit_protocol::records::RecordHeader;

    const N: usize = 60;
    let cluster = mock_cluster(1);
    let topic = unique_topic("writer-mock-ref");
    cluster
        .create_topic(&topic, 1, 1)
        .expect("mock create_topic");
    let bootstrap = cluster.bootstrap_servers();
    let transport = Transport::builder(bootstrap.split(','))
        .build()
        .expect("transport");
    let completed = Arc::new(AtomicU64::new(0));
    let seen = completed.clone();
    let writer = Writer::builder(transport)
        .linger(Duration::from_secs(60))
        .request_timeout(Duration::from_secs(5))
        .on_completion(move |_, err| {
            if err.is_none() {
                seen.fetch_add(1, Ordering::Relaxed);
            }
        })
        .build()
        .expect("writer");
    // The first send learns the topic (`try_send_ref` would only start the lookup).
    let (mut key, mut value) = (Vec::new(), Vec::new());
    let mut headers = vec![RecordHeader::new("h", Some(Bytes::new()))];
    let mut futures = Vec::new();
    for i in 0..N {
        key.clear();
        key.extend_from_slice(format!("k{i}").as_bytes());
        value.clear();
        value.extend_from_slice(format!("value {i} ").repeat(i % 7 + 1).as_bytes());
        headers[0].value = Some(Bytes::from(format!("h{i}")));
        let record = ProducerRecordRef::new(&topic, &value)
            .key(&key)
            .headers(&headers)
            .timestamp(1_700_000_000_000 + i as i64);
        match i % 3 {
            0 => futures.push(writer.send_ref(record).await.expect("send_ref")),
            1 => writer
                .send_detached_ref(record)
                .await
                .expect("send_detached_ref"),
            _ => futures.push(writer.try_send_ref(record).expect("try_send_ref")),
        }
    }
    let refused = writer
        .send_ref(ProducerRecordRef::new(&topic, b"x").partition(3))
        .await
        .expect_err("no partition 3");
    assert_eq!(
        refused.error_code(),
        Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
    writer.flush().await.expect("flush");
    assert_eq!(completed.load(Ordering::Relaxed), N as u64);
    for f in futures {
        f.await.expect("written");
    }
    let got = peer_consume(&bootstrap, &topic, 1, N).await;
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.offset, i as i64);
        assert_eq!(r.key.as_deref(), Some(format!("k{i}").as_bytes()));
        assert_eq!(
            r.value.as_deref(),
            Some(format!("value {i} ").repeat(i % 7 + 1).as_bytes())
        );
        assert_eq!(
            r.headers,
            vec![("h".to_string(), Some(format!("h{i}").into_bytes()))]
        );
        assert_eq!(r.timestamp_ms, Some(1_700_000_000_000 + i as i64));
    }
    assert_eq!(
        writer.stats().records,
        N as u64,
        "the refused one was not taken"
    );
    writer.close(Duration::from_secs(5)).await.expect("close");
}
