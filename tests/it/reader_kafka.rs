//! The Reader's fetch sessions (KIP-227) against Apache Kafka, the only broker here that hands
//! them out (tansu and the mock answer session id 0). What the broker did with each session is
//! read from its log (`integration_tests::kafka_log`: `FetchManager` at TRACE names the
//! partitions each incremental request added, updated and removed, and each session removed).
//! A fault relay in front of Kafka (`integration_tests::kafka_relay`) damages an answer.

use std::time::Duration;

use integration_tests::{create_topic, kafka, kafka_log_line, unique_topic};
use kafkit::{ProducerRecord, Reader, StartOffset, Transport, Writer};

const T: Duration = Duration::from_secs(30);

fn transport() -> Transport {
    Transport::builder([kafka()]).build().expect("transport")
}

async fn write(topic: &str, partition: i32, n: usize) {
    let w = Writer::builder(transport()).build().expect("writer");
    let records = (0..n)
        .map(|i| ProducerRecord::new(topic, format!("v{i}")).partition(partition))
        .collect();
    w.write(records).await.expect("written");
    w.close(Duration::from_secs(10)).await.expect("close");
}

async fn read(reader: &Reader, n: usize) {
    let mut got = 0;
    while got < n {
        let batch = tokio::time::timeout(T, reader.next_batch())
            .await
            .expect("records within the bound")
            .expect("next_batch");
        got += batch.iter().map(|p| p.records.len()).sum::<usize>();
    }
    assert_eq!(got, n);
}

/// The session id of the incremental request line `line` of Kafka's log.
fn session_of(line: &str) -> String {
    line.split("session id ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .expect("a session id")
        .to_string()
}

/// A partition unassigned from a Reader is forgotten by its session: the next incremental Fetch
/// names it among the partitions to remove, and the session goes on with the other one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unassigned_partition_is_forgotten_by_the_session() {
    let topic = unique_topic("reader-forget");
    create_topic(&kafka(), &topic, 2).await;
    write(&topic, 0, 5).await;
    write(&topic, 1, 5).await;
    let reader = Reader::builder(transport())
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    reader
        .assign((0..2).map(|p| (topic.as_str(), p, StartOffset::Earliest)))
        .expect("assign");
    read(&reader, 10).await;
    reader.unassign([(topic.as_str(), 1)]);
    write(&topic, 0, 3).await;
    read(&reader, 3).await;
    let removed = format!(":{topic}-1]");
    let line = kafka_log_line(|l| {
        l.contains("Created a new incremental FetchContext for session id")
            && l.contains("removed [")
            && l.contains(&removed)
    })
    .await;
    assert_ne!(session_of(&line), "0", "{line}");
    reader.close();
}

/// Closing a Reader closes its fetch session on the broker (a full Fetch with the session's id
/// and the final epoch, as Java's consumer sends on close), so the broker's session cache does
/// not hold it until it expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_reader_closes_its_fetch_session() {
    let topic = unique_topic("reader-close-session");
    create_topic(&kafka(), &topic, 1).await;
    write(&topic, 0, 5).await;
    let reader = Reader::builder(transport())
        .fetch_max_wait(Duration::from_millis(100))
        .build()
        .expect("reader");
    reader
        .assign([(topic.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    read(&reader, 5).await;
    write(&topic, 0, 1).await;
    read(&reader, 1).await;
    let incremental = kafka_log_line(|l| {
        l.contains("Created a new incremental FetchContext for session id")
            && l.contains(&format!(":{topic}-0"))
    })
    .await;
    let session = session_of(&incremental);
    reader.close();
    let closed = format!("Removed fetch session {session}.");
    kafka_log_line(|l| l.contains(&closed) && l.contains("Will not try to create a new session"))
        .await;
}

/// A session given up after a failed request is closed by the next full Fetch (its id with
/// epoch 0, Java's `nextCloseExisting`): through the relay in front of Kafka, one Fetch answer is
/// made undecodable; the broker logs the session removed, and the Reader reads on in a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_given_up_after_a_failed_fetch_is_closed() {
    let (_one, relay) = integration_tests::kafka_relay().await;
    let topic = unique_topic("reader-session-error");
    create_topic(relay.addr(), &topic, 1).await;
    write(&topic, 0, 5).await;
    let reader = Reader::builder(
        Transport::builder([relay.addr()])
            .build()
            .expect("transport"),
    )
    .fetch_max_wait(Duration::from_millis(100))
    .build()
    .expect("reader");
    reader
        .assign([(topic.as_str(), 0, StartOffset::Earliest)])
        .expect("assign");
    read(&reader, 5).await;
    let incremental = kafka_log_line(|l| {
        l.contains("Created a new incremental FetchContext for session id")
            && l.contains(&format!(":{topic}-0"))
    })
    .await;
    let session = session_of(&incremental);
    const FETCH: i16 = 1;
    relay.fault_next_response(FETCH, integration_tests::ResponseFault::Undecodable);
    write(&topic, 0, 3).await;
    // The undecodable answer is reported once (no retry mends a decode error); then the Reader
    // fetches on, in a new session.
    let (mut got, mut errors) = (0, 0);
    while got < 3 {
        match tokio::time::timeout(T, reader.next_batch())
            .await
            .expect("records within the bound")
        {
            Ok(batch) => got += batch.iter().map(|p| p.records.len()).sum::<usize>(),
            Err(e) => {
                errors += 1;
                assert!(
                    matches!(e, kafkit::Error::Reader(kafkit::ReaderError::Fetch { .. })),
                    "{e}"
                );
            }
        }
    }
    assert_eq!((got, errors), (3, 1));
    let closed = format!("Removed fetch session {session}.");
    let line = kafka_log_line(|l| l.contains(&closed)).await;
    assert!(
        line.contains("Created a new full FetchContext with"),
        "closed by a full Fetch that opens a new session: {line}"
    );
    reader.close();
}
