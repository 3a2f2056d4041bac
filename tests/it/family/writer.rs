//! The Writer end to end against tansu: every codec read back by librdkafka, a single record
//! acknowledged well within a second, try_send's queue-full error, and an oversized record
//! failing alone.

use super::{broker, dial};
use std::time::Duration;

use bytes::Bytes;
use integration_tests::{create_topic_with, peer_consume};
use kafkit::{
    Compression, ErrorCode, ProduceError, ProducerRecord, RecordHeader, Transport, WriteErrors,
    Writer,
};

fn transport() -> Transport {
    Transport::builder([broker()]).build().expect("transport")
}

async fn topic(prefix: &str, partitions: i32) -> String {
    let conn = dial("writer-tansu-admin").await;
    create_topic_with(&conn, prefix, partitions).await
}

fn record(topic: &str, i: usize) -> ProducerRecord {
    let mut r = ProducerRecord::new(topic, format!("value-{i}-{}", "x".repeat(i % 50)))
        .key(format!("key-{i}"))
        .header("i", i.to_string());
    r.headers.push(RecordHeader::new("null", None));
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_codec_round_trips_through_librdkafka() {
    for codec in Compression::ALL {
        let topic = topic(&format!("writer-codec-{codec}"), 3).await;
        let writer = Writer::builder(transport())
            .compression(codec)
            .build()
            .expect("writer");
        let n = 300;
        let records: Vec<ProducerRecord> = (0..n).map(|i| record(&topic, i)).collect();
        let acks = writer.write(records).await.expect("all written");
        assert_eq!(acks.len(), n);
        for (i, a) in acks.iter().enumerate() {
            assert_eq!(&*a.topic, topic);
            // Every record's metadata shares the writer's one copy of the topic name.
            assert!(
                std::sync::Arc::ptr_eq(&a.topic, &acks[0].topic),
                "record {i}"
            );
            // murmur2 of the key, as the Java client places keyed records.
            let want = kafkit_balancer::Murmur2::index(format!("key-{i}").as_bytes(), 3) as i32;
            assert_eq!(a.partition, want, "{codec}: record {i}");
            assert!(a.offset >= 0);
        }
        let got = peer_consume(&broker(), &topic, 3, n).await;
        assert_eq!(got.len(), n, "{codec}");
        for r in &got {
            let key = String::from_utf8(r.key.clone().expect("key")).expect("utf8");
            let i: usize = key["key-".len()..].parse().expect("index");
            let ack = &acks[i];
            assert_eq!(
                (r.partition, r.offset),
                (ack.partition, ack.offset),
                "{codec}: {key}"
            );
            assert_eq!(
                r.value.as_deref(),
                Some(format!("value-{i}-{}", "x".repeat(i % 50)).as_bytes()),
                "{codec}"
            );
            assert_eq!(
                r.headers,
                vec![
                    ("i".to_string(), Some(i.to_string().into_bytes())),
                    ("null".to_string(), None)
                ],
                "{codec}"
            );
        }
        writer.close(Duration::from_secs(10)).await.expect("close");
        let stats = writer.stats();
        assert_eq!(stats.records, n as u64, "{codec}");
        assert_eq!(stats.errors, 0, "{codec}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_record_with_default_settings_is_acknowledged_within_a_second() {
    let topic = topic("writer-single", 1).await;
    let writer = Writer::builder(transport()).build().expect("writer");
    // The very first record also waits for a connection and a producer id (InitProducerId).
    let first = writer
        .send(ProducerRecord::new(&topic, Bytes::from_static(b"first")))
        .await
        .expect("send");
    tokio::time::timeout(Duration::from_secs(1), first)
        .await
        .expect("the first record is acknowledged within 1 s")
        .expect("written");
    // With connections and the producer id in place: one linger plus one round trip.
    let fut = writer
        .send(ProducerRecord::new(&topic, Bytes::from_static(b"one")))
        .await
        .expect("send");
    let ack = tokio::time::timeout(Duration::from_secs(1), fut)
        .await
        .expect("acknowledged within 1 s (linger 5 ms + one round trip)")
        .expect("written");
    assert_eq!((ack.partition, ack.offset), (0, 1));
    // One line: send and wait.
    let ack = tokio::time::timeout(
        Duration::from_secs(1),
        writer.produce(ProducerRecord::new(&topic, "two").key("k")),
    )
    .await
    .expect("produced within 1 s")
    .expect("written");
    assert_eq!(
        (&*ack.topic, ack.partition, ack.offset),
        (topic.as_str(), 0, 2)
    );
    let read = peer_consume(&broker(), &topic, 1, 3).await;
    assert_eq!(read[2].key.as_deref(), Some(&b"k"[..]));
    assert_eq!(read[2].value.as_deref(), Some(&b"two"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_buffer_fails_try_send_at_once_and_makes_send_wait() {
    let topic = topic("writer-queue-full", 1).await;
    let writer = Writer::builder(transport())
        .linger(Duration::from_secs(60))
        .request_timeout(Duration::from_secs(5))
        .delivery_timeout(Duration::from_secs(120))
        .batch_size(1_024)
        .buffer_memory(4_096)
        .build()
        .expect("writer");
    let value = Bytes::from(vec![b'v'; 100]);
    let mut accepted = Vec::new();
    // The first send learns the topic's metadata.
    accepted.push(
        writer
            .send(ProducerRecord::new(&topic, value.clone()))
            .await
            .expect("send"),
    );
    let full = loop {
        match writer.try_send(ProducerRecord::new(&topic, value.clone())) {
            Ok(f) => accepted.push(f),
            Err(e) => break e,
        }
        assert!(accepted.len() < 1_000, "the buffer never filled");
    };
    assert!(
        matches!(full, ProduceError::QueueFull { buffered_records, .. } if buffered_records == accepted.len()),
        "{full:?} after {} records",
        accepted.len()
    );
    assert!(full.is_retriable());
    // send waits for room instead: still pending after being polled...
    let blocked = writer.send(ProducerRecord::new(&topic, value.clone()));
    tokio::pin!(blocked);
    tokio::select! {
        biased;
        r = &mut blocked => panic!("send did not wait for room: {r:?}"),
        () = tokio::task::yield_now() => {}
    }
    writer.flush().await.expect("flush");
    // ...and goes through once the flushed records free their space.
    let late = blocked.await.expect("room after the flush");
    let n = accepted.len();
    for (i, f) in accepted.into_iter().enumerate() {
        assert_eq!(f.await.expect("written").offset, i as i64);
    }
    writer.flush().await.expect("flush");
    assert_eq!(late.await.expect("written").offset, n as i64);
    // Space is back.
    let again = writer
        .try_send(ProducerRecord::new(&topic, value))
        .expect("room after the flush");
    writer.flush().await.expect("flush");
    again.await.expect("written");
}

/// `send` waits for room at most `max_block` (Java `max.block.ms`), then fails typed with the
/// full buffer as its cause; a send that gave up holds no buffer space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffer_that_stays_full_fails_send_after_max_block() {
    let topic = topic("writer-max-block-full", 1).await;
    let writer = Writer::builder(transport())
        .linger(Duration::from_secs(60))
        .batch_size(1_024)
        .buffer_memory(1_024)
        .max_buffered_records(3)
        .max_block(Duration::from_millis(50))
        .build()
        .expect("writer");
    let value = Bytes::from(vec![b'v'; 100]);
    // The topic's metadata first, written through: `max_block` also bounds that lookup, and on a
    // loaded machine one Metadata round trip can take longer than 50 ms.
    loop {
        match writer.send(ProducerRecord::new(&topic, value.clone())).await {
            Ok(f) => {
                writer.flush().await.expect("flush");
                f.await.expect("written");
                break;
            }
            Err(ProduceError::BlockTimeout { cause: Some(c), .. })
                if matches!(&*c, ProduceError::Client(_)) => {}
            Err(e) => panic!("the first record: {e:?}"),
        }
    }
    let mut accepted = Vec::new();
    for _ in 0..3 {
        let f = writer.send(ProducerRecord::new(&topic, value.clone()));
        accepted.push(f.await.expect("room for three"));
    }
    // Each of these takes the byte space it needs, then waits for a record slot until
    // max_block: ten of them would drain the 1 KiB if any kept its bytes.
    for _ in 0..10 {
        let started = tokio::time::Instant::now();
        let err = writer
            .send(ProducerRecord::new(&topic, value.clone()))
            .await
            .expect_err("no room");
        assert!(started.elapsed() >= Duration::from_millis(50));
        match &err {
            ProduceError::BlockTimeout {
                max_block,
                cause: Some(cause),
                ..
            } => {
                assert_eq!(*max_block, Duration::from_millis(50));
                assert!(
                    matches!(
                        **cause,
                        ProduceError::QueueFull {
                            buffered_records: 3,
                            ..
                        }
                    ),
                    "{cause:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(err.is_retriable());
    }
    writer.flush().await.expect("flush");
    for (i, f) in accepted.into_iter().enumerate() {
        assert_eq!(f.await.expect("written").offset, 1 + i as i64);
    }
    // All of the space is back: a record of nearly 1 KiB fits.
    let again = writer
        .try_send(ProducerRecord::new(&topic, vec![b'w'; 900]))
        .expect("the whole buffer is free after the flush");
    writer.flush().await.expect("flush");
    assert_eq!(again.await.expect("written").offset, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_record_fails_alone() {
    let topic = topic("writer-oversize", 1).await;
    let writer = Writer::builder(transport())
        .request_timeout(Duration::from_secs(2))
        .delivery_timeout(Duration::from_secs(3))
        .batch_size(64 * 1024)
        .build()
        .expect("writer");
    let small = |v: &'static [u8]| ProducerRecord::new(&topic, Bytes::from_static(v));
    let big = ProducerRecord::new(&topic, Bytes::from(vec![7u8; 100 * 1024]));
    let err: WriteErrors = writer
        .write(vec![small(b"a"), big, small(b"b")])
        .await
        .expect_err("the big record fails");
    assert_eq!(err.errors.len(), 1, "{:?}", err.errors);
    let (index, e) = &err.errors[0];
    assert_eq!(*index, 1);
    assert!(
        matches!(e, ProduceError::RecordTooLarge { size, max: 65_536 } if *size > 100 * 1024),
        "{e:?}"
    );
    assert_eq!(e.error_code(), Some(ErrorCode::MESSAGE_TOO_LARGE));
    let offsets: Vec<i64> = err
        .results
        .iter()
        .filter_map(|r| r.as_ref().ok().map(|m| m.offset))
        .collect();
    assert_eq!(offsets, vec![0, 1]);

    // Compressed, the same bytes fit: the size checked is the encoded (compressed) one.
    let zstd = Writer::builder(transport())
        .batch_size(64 * 1024)
        .compression(Compression::Zstd)
        .build()
        .expect("writer");
    let big = ProducerRecord::new(&topic, Bytes::from(vec![7u8; 100 * 1024]));
    let ack = zstd.send(big).await.expect("taken").await.expect("written");
    assert_eq!(ack.offset, 2);
    let got = peer_consume(&broker(), &topic, 1, 3).await;
    assert_eq!(got[2].value.as_ref().map(Vec::len), Some(100 * 1024));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_0_resolves_when_sent_and_the_records_arrive() {
    let topic = topic("writer-acks0", 2).await;
    let writer = Writer::builder(transport())
        .acks(kafkit::Acks::None)
        .build()
        .expect("writer");
    let records: Vec<ProducerRecord> = (0..50).map(|i| record(&topic, i)).collect();
    let acks = writer.write(records).await.expect("sent");
    assert!(
        acks.iter().all(|a| a.offset == -1),
        "acks=0 reports no offsets"
    );
    let got = peer_consume(&broker(), &topic, 2, 50).await;
    assert_eq!(got.len(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_writer_still_delivers_what_it_holds() {
    let topic = topic("writer-drop", 1).await;
    let writer = Writer::builder(transport())
        .linger(Duration::from_secs(60))
        .delivery_timeout(Duration::from_secs(90))
        .build()
        .expect("writer");
    let mut futures = Vec::new();
    for i in 0..20 {
        futures.push(writer.send(record(&topic, i)).await.expect("send"));
    }
    // Nothing is sent before the (long) linger; dropping the last handle sends it all.
    drop(writer);
    for (i, f) in futures.into_iter().enumerate() {
        let ack = tokio::time::timeout(Duration::from_secs(10), f)
            .await
            .expect("resolved after the drop")
            .expect("written");
        assert_eq!(ack.offset, i as i64);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_without_a_topic_go_to_the_default_topic_or_fail_typed() {
    let topic = topic("writer-default-topic", 1).await;
    let writer = Writer::builder(transport())
        .topic(&topic)
        .build()
        .expect("writer");
    let acks = writer
        .write(vec![
            ProducerRecord::to_default_topic(Bytes::from_static(b"a")),
            ProducerRecord::to_default_topic(Bytes::from_static(b"b")),
        ])
        .await
        .expect("written");
    assert_eq!(
        acks.iter()
            .map(|a| (&*a.topic, a.offset))
            .collect::<Vec<_>>(),
        vec![(topic.as_str(), 0), (topic.as_str(), 1)]
    );
    let no_default = Writer::builder(transport()).build().expect("writer");
    let err = no_default
        .send(ProducerRecord::to_default_topic(Bytes::new()))
        .await
        .expect_err("no topic");
    assert!(
        matches!(err, ProduceError::NoTopic) && !err.is_retriable(),
        "{err:?}"
    );

    // Refused alone, before buffering: a negative timestamp, a partition the topic lacks.
    let bad_ts = ProducerRecord::to_default_topic(Bytes::new()).timestamp(-5);
    let err = writer.send(bad_ts).await.expect_err("negative timestamp");
    assert!(matches!(err, ProduceError::InvalidRecord(_)), "{err:?}");
    for p in [-5, 1] {
        let err = writer
            .send(ProducerRecord::to_default_topic(Bytes::new()).partition(p))
            .await
            .expect_err("no such partition");
        assert!(
            matches!(&err, ProduceError::Partition(kafkit_balancer::BalanceError::UnknownPartition { partition, count: 1, .. }) if *partition == p),
            "{err:?}"
        );
        assert_eq!(
            err.error_code(),
            Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
        );
    }
    // A topic that does not exist (and is not created): its error code once max_block has
    // passed.
    let short = Writer::builder(transport())
        .allow_auto_topic_creation(false)
        .max_block(Duration::from_millis(500))
        .build()
        .expect("writer");
    let missing = integration_tests::unique_topic("writer-missing");
    let err = short
        .send(ProducerRecord::new(&missing, Bytes::new()))
        .await
        .expect_err("no such topic");
    assert_eq!(
        err.error_code(),
        Some(ErrorCode::UNKNOWN_TOPIC_OR_PARTITION),
        "{err:?}"
    );
    assert!(
        matches!(&err, ProduceError::BlockTimeout { topic, max_block, .. }
            if *topic == missing && *max_block == Duration::from_millis(500)),
        "{err:?}"
    );
    // The writer's own records still go through.
    let ack = writer
        .send(ProducerRecord::to_default_topic(Bytes::from_static(b"c")))
        .await
        .expect("send")
        .await
        .expect("written");
    assert_eq!(ack.offset, 2);
}
