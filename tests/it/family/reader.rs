//! The [`Reader`] against tansu (one node): what the Writer wrote with every codec (headers,
//! null keys and values, timestamps) and what librdkafka's producer wrote read back equal;
//! fetch sessions (tansu answers session id 0 to a request for a new session, so the Reader
//! keeps sending full fetches, which the test checks either way); idle at the log end, at most
//! one Fetch per `fetch_max_wait`.

use super::{BROKER, broker, dial};
use integration_tests::BrokerKind;
use std::time::Duration;

use bytes::Bytes;
use integration_tests::{PeerSend, create_topic_with, peer_produce};
use kafkit::protocol::records::TimestampType;
use kafkit::{Compression, ProducerRecord, Reader, StartOffset, Transport, Writer};

const GUARD: Duration = Duration::from_secs(30);

fn transport() -> Transport {
    Transport::builder([broker()]).build().expect("transport")
}

async fn topic(prefix: &str, partitions: i32) -> String {
    let conn = dial("reader-tansu-admin").await;
    create_topic_with(&conn, prefix, partitions).await
}

fn reader() -> Reader {
    Reader::builder(transport())
        .fetch_max_wait(Duration::from_millis(200))
        .max_poll_records(100_000)
        .build()
        .expect("reader")
}

/// Reads `n` records as ConsumerRecords, sorted by (partition, offset).
async fn read_all(reader: &Reader, n: usize) -> Vec<kafkit::ConsumerRecord> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + GUARD;
    while out.len() < n {
        let parts = tokio::time::timeout_at(deadline, reader.next_batch())
            .await
            .unwrap_or_else(|_| panic!("{} of {n} records: {:?}", out.len(), reader.stats()))
            .expect("next_batch");
        for p in parts {
            out.extend(p.into_consumer_records());
        }
    }
    out.sort_by_key(|r| (r.partition, r.offset));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_writer_wrote_with_every_codec_reads_back_equal() {
    for codec in Compression::ALL {
        let topic = topic(&format!("reader-codec-{codec}"), 2).await;
        let writer = Writer::builder(transport())
            .compression(codec)
            .build()
            .expect("writer");
        let n = 200usize;
        let records: Vec<ProducerRecord> = (0..n)
            .map(|i| {
                let mut r = if i % 7 == 3 {
                    ProducerRecord::tombstone(&topic, format!("k{i}"))
                } else {
                    ProducerRecord::new(&topic, format!("v{i}"))
                };
                if i % 5 != 0 {
                    r = r.key(format!("k{i}"));
                }
                r.partition(i32::try_from(i % 2).unwrap())
                    .header("i", i.to_string())
                    .timestamp(1_700_000_000_000 + i64::try_from(i).unwrap())
            })
            .collect();
        writer.write(records).await.expect("written");
        let reader = reader();
        reader
            .assign((0..2).map(|p| (topic.as_str(), p, StartOffset::Earliest)))
            .expect("assign");
        let got = read_all(&reader, n).await;
        let mut want: Vec<usize> = (0..n).collect();
        want.sort_by_key(|i| (i % 2, *i));
        for (r, i) in got.iter().zip(want) {
            assert_eq!(&*r.topic, topic);
            assert_eq!(r.partition, i32::try_from(i % 2).unwrap(), "{codec}");
            let tombstone = i % 7 == 3;
            assert_eq!(
                r.value,
                (!tombstone).then(|| Bytes::from(format!("v{i}"))),
                "{codec} {i}"
            );
            let keyed = i % 5 != 0 || tombstone;
            assert_eq!(
                r.key,
                keyed.then(|| Bytes::from(format!("k{i}"))),
                "{codec} {i}"
            );
            assert_eq!(r.headers.len(), 1);
            assert_eq!(
                r.headers[0].value.as_deref(),
                Some(i.to_string().as_bytes())
            );
            assert_eq!(r.timestamp, 1_700_000_000_000 + i64::try_from(i).unwrap());
            assert_eq!(r.timestamp_type, TimestampType::CreateTime);
        }
        for p in 0..2 {
            assert_eq!(reader.position(&topic, p).map(|p| p.offset), Some(100));
        }
        let stats = reader.stats();
        let requests: u64 = stats.fetch_requests.values().sum();
        match BROKER {
            // tansu hands out no fetch session (session id 0): every request is a full one.
            BrokerKind::Tansu => assert_eq!(stats.incremental_fetches, 0, "{stats:?}"),
            // Kafka opens a session with the first (full) Fetch; the later ones are incremental.
            BrokerKind::Kafka => assert_eq!(stats.incremental_fetches, requests - 1, "{stats:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_librdkafka_wrote_reads_back_equal_and_idle_does_not_spin() {
    let topic = topic("reader-peer", 3).await;
    let headers: &[(&str, &[u8])] = &[("h1", b"x"), ("h2", b"")];
    let sends: Vec<PeerSend<'_>> = (0..30)
        .map(|i| PeerSend {
            partition: i % 3,
            key: (i % 4 != 0).then_some(b"key".as_slice()),
            value: (i % 6 != 0).then_some(b"value".as_slice()),
            headers,
        })
        .collect();
    let placed = peer_produce(&broker(), &topic, &sends).await;
    let reader = reader();
    reader
        .assign((0..3).map(|p| (topic.as_str(), p, StartOffset::Earliest)))
        .expect("assign");
    let got = read_all(&reader, 30).await;
    for (s, (p, o)) in sends.iter().zip(&placed) {
        let r = got
            .iter()
            .find(|r| r.partition == *p && r.offset == *o)
            .unwrap_or_else(|| panic!("{p}/{o} not read"));
        assert_eq!(r.key.as_deref(), s.key);
        assert_eq!(r.value.as_deref(), s.value);
        let hs: Vec<(&[u8], Option<&[u8]>)> = r
            .headers
            .iter()
            .map(|h| (&h.key[..], h.value.as_deref()))
            .collect();
        assert_eq!(
            hs,
            vec![(&b"h1"[..], Some(&b"x"[..])), (&b"h2"[..], Some(&b""[..]))]
        );
    }
    // Idle at the log end: a broker that answers an empty long poll early cannot make the
    // reader spin (at most one Fetch per fetch_max_wait = 200 ms, so ~10 in 2 s).
    let before = reader.stats().fetch_requests.values().sum::<u64>();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = reader.stats().fetch_requests.values().sum::<u64>();
    assert!(
        (1..=13).contains(&(after - before)),
        "{} Fetch requests in 2 s idle",
        after - before
    );
}

/// Writes `values` to partition 0 of `topic` with one Produce (our `Conn`).
async fn produce(topic: &str, values: &[String]) {
    let conn = dial("reader-tansu-produce").await;
    let records: Vec<kafkit::Record> = values
        .iter()
        .map(|v| kafkit::Record::new(None, Some(Bytes::from(v.clone()))))
        .collect();
    conn.produce(topic, 0, &records, kafkit::Acks::All, GUARD)
        .await
        .expect("produce")
        .into_result()
        .expect("written");
}

/// Deletes `topic` and creates it again (same name, a new topic id).
async fn recreate(topic: &str) {
    let conn = dial("reader-tansu-recreate").await;
    let id_of = |md: &kafkit::Metadata| md.topic(topic).map(|t| t.topic_id);
    let old_id = id_of(&conn.metadata(Some(&[topic])).await.expect("metadata"));
    for (_, r) in conn.delete_topics(&[topic]).await.expect("DeleteTopics") {
        r.expect("deleted");
    }
    let created = loop {
        let answer = conn
            .create_topics(&[kafkit::admin::NewTopic::new(topic, 1, 1)], false)
            .await
            .expect("CreateTopics");
        match answer.into_iter().next().expect("one topic").1 {
            // Kafka removes a deleted topic's name in the background.
            Err(e) if e.error_code() == Some(kafkit::ErrorCode::TOPIC_ALREADY_EXISTS) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => break r,
        }
    };
    created.expect("created again");
    // Kafka's broker learns the new topic a moment after CreateTopics answers.
    let deadline = tokio::time::Instant::now() + GUARD;
    while id_of(&conn.metadata(Some(&[topic])).await.expect("metadata")) == old_id {
        assert!(tokio::time::Instant::now() < deadline, "the new topic never listed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    integration_tests::wait_for_topic(&conn, topic, 1).await;
}

fn values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_deleted_and_created_again_is_reset_by_policy_or_typed() {
    let topic = topic("reader-recreate", 1).await;
    produce(&topic, &values("old", 3)).await;
    let lenient = Reader::builder(transport())
        .fetch_max_wait(Duration::from_millis(200))
        .auto_offset_reset(kafkit::AutoOffsetReset::Earliest)
        .build()
        .expect("reader");
    let strict = Reader::builder(transport())
        .fetch_max_wait(Duration::from_millis(200))
        .auto_offset_reset(kafkit::AutoOffsetReset::None)
        .build()
        .expect("reader");
    for r in [&lenient, &strict] {
        r.assign([(topic.as_str(), 0, StartOffset::Earliest)])
            .expect("assign");
        let got: Vec<_> = read_all(r, 3).await.into_iter().map(|r| r.value).collect();
        assert_eq!(got.len(), 3);
    }
    recreate(&topic).await;
    // More records in the new topic than the old position (3): a Reader that kept fetching
    // by name from offset 3 would skip new0..new2.
    produce(&topic, &values("new", 5)).await;
    let got: Vec<Option<Bytes>> = read_all(&lenient, 5)
        .await
        .into_iter()
        .map(|r| r.value)
        .collect();
    let want: Vec<Option<Bytes>> = values("new", 5)
        .into_iter()
        .map(|v| Some(Bytes::from(v)))
        .collect();
    assert_eq!(got, want, "reset to the new topic's start");
    let err = tokio::time::timeout(GUARD, strict.next_batch())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no error within {GUARD:?}; the strict Reader's partitions: {:?}",
                strict.stats().partitions
            )
        })
        .expect_err("re-created");
    match err {
        kafkit::Error::Reader(kafkit::ReaderError::TopicRecreated {
            topic: t,
            old_id,
            new_id,
        }) => {
            assert_eq!(t, topic);
            assert_ne!(old_id, new_id);
        }
        e => panic!("expected TopicRecreated, got {e:?}"),
    }
}
