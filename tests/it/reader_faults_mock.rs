//! The [`Reader`] under faults on the wire: librdkafka's mock cluster (3 brokers) with each
//! broker behind a fault relay of its own (`integration_tests::RelayedMock`: the brokers
//! advertise their relays, so every connection of the client goes through them; the relays
//! never answer, every byte read came from a broker):
//! - Fetch answers cut in the middle of their frame, and every connection cut while a long
//!   poll is out: the Reader reconnects, nothing is lost or repeated;
//! - a black-holed broker (frames dropped, connections open): the others keep flowing without
//!   waiting for it, its Fetch is given up after the request timeout (plus `fetch_max_wait`),
//!   its partitions stall, and they recover when it comes back;
//! - a batch corrupted on the wire in one partition: the others flow, that partition reports
//!   a typed error (CRC mismatch at the bad batch's offset) and reads again after a seek.

use std::collections::BTreeMap;
use std::time::Duration;

use integration_tests::{RelayedMock, mock_topic_spread, unique_topic, write_batches};
use kafkit::protocol::records::RecordsError;
use kafkit::{AutoOffsetReset, Broker, Dialer, Error, Reader, ReaderError, StartOffset, Transport};
use rdkafka::producer::Producer;

const GUARD: Duration = Duration::from_secs(30);
/// Fetch's API key (what the relay cuts).
const FETCH: i16 = 1;
/// The dialer's request timeout: a Fetch into a black hole gives up after this plus
/// `fetch_max_wait`.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
const FETCH_MAX_WAIT: Duration = Duration::from_millis(300);

fn transport(bootstrap: &str) -> Transport {
    Transport::builder(bootstrap.split(','))
        .dialer(
            Dialer::builder()
                .request_timeout(REQUEST_TIMEOUT)
                .connect_timeout(Duration::from_secs(2))
                .build(),
        )
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(250))
        .default_api_timeout(Duration::from_secs(5))
        .build()
        .expect("transport")
}

fn reader(bootstrap: &str) -> Reader {
    Reader::builder(transport(bootstrap))
        .fetch_max_wait(FETCH_MAX_WAIT)
        .auto_offset_reset(AutoOffsetReset::None)
        .retry_backoff(Duration::from_millis(50))
        .retry_backoff_max(Duration::from_millis(250))
        .max_poll_records(100_000)
        .build()
        .expect("reader")
}

fn values(p: i32, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{p}:{i}")).collect()
}

type Got = BTreeMap<i32, Vec<(i64, String)>>;

/// Reads until `n` records came, as partition -> (offset, value); fails on an error or after
/// the guard.
async fn read(reader: &Reader, n: usize, within: Duration) -> Got {
    let mut got = Got::new();
    let mut count = 0;
    let deadline = tokio::time::Instant::now() + within;
    while count < n {
        let batch = tokio::time::timeout_at(deadline, reader.next_batch())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{count} of {n} records within {within:?}: {got:?} {:?}",
                    reader.stats()
                )
            })
            .expect("next_batch");
        for p in batch {
            for r in &p.records {
                let v = String::from_utf8(r.value.as_deref().unwrap_or_default().to_vec())
                    .expect("utf-8");
                got.entry(p.partition).or_default().push((r.offset, v));
                count += 1;
            }
        }
    }
    got
}

fn merge(into: &mut Got, more: Got) {
    for (p, v) in more {
        into.entry(p).or_default().extend(v);
    }
}

/// Each partition holds exactly `values(p, 0..n)` at offsets `0..n`, once each, in order.
fn assert_exact(got: &Got, partitions: impl Iterator<Item = i32>, n: usize) {
    for p in partitions {
        let want: Vec<(i64, String)> = (0..n)
            .map(|i| (i64::try_from(i).unwrap(), format!("{p}:{i}")))
            .collect();
        assert_eq!(got.get(&p), Some(&want), "partition {p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_cut_mid_frame_and_connections_cut_mid_poll_lose_and_repeat_nothing() {
    let rm = RelayedMock::start(3).await;
    let cluster = rm.owner.client().mock_cluster().expect("mock");
    let bootstrap = rm.bootstrap();
    let topic = unique_topic("rfault-cut");
    mock_topic_spread(&cluster, &topic, 6, 3);
    let write = |from: usize, n: usize| {
        write_batches(
            &bootstrap,
            &topic,
            6,
            move |p| values(p, from..from + n),
            Broker::addr,
        )
    };
    write(0, 10).await;
    // The first two Fetch answers of every broker carry records (there are records at every
    // fetch offset): each is cut half way through its frame, and the connection with it.
    for id in 1..=3 {
        rm.relay(id).cut_within(FETCH, 2);
    }
    let reader = reader(&bootstrap);
    reader
        .assign((0..6).map(|p| (topic.as_str(), p, StartOffset::Earliest)))
        .expect("assign");
    let mut got = read(&reader, 60, GUARD).await;
    for id in 1..=3 {
        assert_eq!(
            rm.relay(id).cuts_within(),
            2,
            "broker {id}: both answers cut"
        );
    }
    assert!(reader.stats().fetch_errors >= 6, "{:?}", reader.stats());

    // At the log end a long poll is out on every broker; cut every connection under it.
    for round in 0..3 {
        let before: u64 = reader.stats().fetch_requests.values().sum();
        let deadline = tokio::time::Instant::now() + GUARD;
        while reader.stats().fetch_requests.values().sum::<u64>() < before + 3 {
            assert!(tokio::time::Instant::now() < deadline, "no new Fetch");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for id in 1..=3 {
            rm.relay(id).cut_all();
        }
        write(10 + round * 10, 10).await;
        merge(&mut got, read(&reader, 60, GUARD).await);
    }
    assert_exact(&got, 0..6, 40);
    for p in 0..6 {
        assert_eq!(reader.position(&topic, p).map(|p| p.offset), Some(40));
    }
}

/// Six partitions over the three brokers of a [`RelayedMock`] (partition p led by broker
/// p % 3 + 1: broker 1 leads 0 and 3), 10 records each written straight to the brokers, and a
/// Reader (through the relays) assigned every partition from the earliest offset.
struct SixPartitions {
    rm: RelayedMock,
    /// The brokers' own addresses, past the relays, by node id - 1.
    upstreams: Vec<String>,
    topic: String,
    reader: Reader,
}

impl SixPartitions {
    async fn start(prefix: &str) -> SixPartitions {
        let rm = RelayedMock::start(3).await;
        let topic = unique_topic(prefix);
        let upstreams: Vec<String> = {
            let cluster = rm.owner.client().mock_cluster().expect("mock");
            mock_topic_spread(&cluster, &topic, 6, 3);
            cluster
                .bootstrap_servers()
                .split(',')
                .map(str::to_owned)
                .collect()
        };
        let reader = reader(&rm.bootstrap());
        let six = SixPartitions {
            rm,
            upstreams,
            topic,
            reader,
        };
        six.write_direct(0..10).await;
        six.reader
            .assign((0..6).map(|p| (six.topic.as_str(), p, StartOffset::Earliest)))
            .expect("assign");
        six
    }

    /// Writes values `range` to every partition straight to the brokers, past the relays.
    async fn write_direct(&self, range: std::ops::Range<usize>) {
        let direct = |b: &Broker| self.upstreams[usize::try_from(b.node_id - 1).unwrap()].clone();
        let upstream = self.upstreams.join(",");
        write_batches(
            &upstream,
            &self.topic,
            6,
            |p| values(p, range.clone()),
            direct,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_broker_stalls_only_its_partitions_and_recovers() {
    let six = SixPartitions::start("rfault-hole").await;
    let (rm, reader) = (&six.rm, &six.reader);
    let mut got = read(reader, 60, GUARD).await;

    let errors = reader.stats().fetch_errors;
    rm.relay(1).black_hole(true);
    let holed = std::time::Instant::now();
    // Written past the relays, straight to the brokers: broker 1 has records its readers
    // cannot reach now.
    six.write_direct(10..20).await;
    let started = std::time::Instant::now();
    let flowing = read(reader, 40, Duration::from_secs(10)).await;
    let delivered = started.elapsed();
    eprintln!("brokers 2 and 3 delivered in {delivered:?}");
    assert!(
        flowing.keys().all(|p| p % 3 != 0),
        "nothing from the black-holed broker: {flowing:?}"
    );
    assert!(
        delivered < REQUEST_TIMEOUT,
        "brokers 2 and 3 did not wait for broker 1's Fetch to time out: {delivered:?}"
    );
    merge(&mut got, flowing);
    // Broker 1's Fetch out when the hole opened (sent about fetch_max_wait before, or
    // somewhat more on a loaded machine) times out after request_timeout + fetch_max_wait:
    // detected then, not at once, not never.
    let deadline = tokio::time::Instant::now() + GUARD;
    while reader.stats().fetch_errors == errors {
        assert!(tokio::time::Instant::now() < deadline, "never detected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let detected = holed.elapsed();
    eprintln!("the black hole was detected after {detected:?}");
    assert!(
        detected >= REQUEST_TIMEOUT / 2
            && detected < REQUEST_TIMEOUT + FETCH_MAX_WAIT + Duration::from_secs(1),
        "detected after {detected:?}"
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(1), reader.next_batch())
            .await
            .is_err(),
        "partitions 0 and 3 stall while broker 1 is a black hole"
    );
    let stats = reader.stats();
    for p in [0, 3] {
        assert_eq!(stats.partitions[p].position, Some(10), "{stats:?}");
    }

    rm.relay(1).black_hole(false);
    let started = std::time::Instant::now();
    let back = read(reader, 20, GUARD).await;
    eprintln!(
        "broker 1 delivered {:?} after it came back",
        started.elapsed()
    );
    assert!(back.keys().all(|p| p % 3 == 0), "{back:?}");
    merge(&mut got, back);
    assert_exact(&got, 0..6, 20);
}

/// A fetch connection that stops answering for good (its peer gone without a reset, new
/// connections fine) is given up after its Fetch times out, as Java's NetworkClient disconnects
/// a node whose request timed out: the Reader dials again and broker 1's partitions read on.
/// Before, it sent every Fetch on the dead connection again, each timing out: partitions 0 and
/// 3 never read another record (the mock soak's stall of a partition on a broker that went
/// down and came back looked the same).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_connection_that_stops_answering_is_given_up_after_a_timeout() {
    let six = SixPartitions::start("rfault-strand").await;
    let (rm, reader) = (&six.rm, &six.reader);
    let mut got = read(reader, 60, GUARD).await;
    rm.relay(1).strand_open_connections();
    six.write_direct(10..20).await;
    // One timed-out Fetch (request_timeout + fetch_max_wait), a backoff, a new connection.
    let started = std::time::Instant::now();
    let more = read(reader, 60, GUARD).await;
    eprintln!(
        "every partition read on {:?} after broker 1's connection stopped answering",
        started.elapsed()
    );
    merge(&mut got, more);
    assert_exact(&got, 0..6, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_corrupted_on_the_wire_fails_only_its_partition() {
    let rm = RelayedMock::start(3).await;
    let cluster = rm.owner.client().mock_cluster().expect("mock");
    let bootstrap = rm.bootstrap();
    let topic = unique_topic("rfault-crc");
    mock_topic_spread(&cluster, &topic, 3, 3);
    let write = |p: i32, vals: Vec<String>| {
        let b = bootstrap.clone();
        let t = topic.clone();
        async move {
            write_batches(
                &b,
                &t,
                3,
                move |q| if q == p { vals.clone() } else { vec![] },
                Broker::addr,
            )
            .await
        }
    };
    // Partition 0: a batch 0..5, a batch with the marked value at 5, a batch 6..10.
    write(0, values(0, 0..5)).await;
    write(0, vec!["0:5 CORRUPT-ME".to_owned()]).await;
    write(0, values(0, 6..10)).await;
    for p in 1..3 {
        write(p, values(p, 0..10)).await;
    }
    for id in 1..=3 {
        rm.relay(id).corrupt(b"CORRUPT-ME");
    }
    let reader = reader(&bootstrap);
    reader
        .assign((0..3).map(|p| (topic.as_str(), p, StartOffset::Earliest)))
        .expect("assign");
    let mut got = Got::new();
    let deadline = tokio::time::Instant::now() + GUARD;
    let err = loop {
        match tokio::time::timeout_at(deadline, reader.next_batch())
            .await
            .expect("an error within the guard")
        {
            Ok(parts) => {
                for p in parts {
                    for r in &p.records {
                        let v = String::from_utf8(r.value.as_deref().unwrap_or_default().to_vec())
                            .unwrap();
                        got.entry(p.partition).or_default().push((r.offset, v));
                    }
                }
            }
            Err(e) => break e,
        }
    };
    let corrupted: u64 = (1..=3).map(|id| rm.relay(id).corrupted()).sum();
    assert!(corrupted >= 1, "the relay flipped a byte");
    match &err {
        Error::Reader(ReaderError::Partition {
            partition,
            offset,
            source,
            ..
        }) => {
            assert_eq!((*partition, *offset), (0, 5));
            assert!(
                matches!(**source, Error::Records(RecordsError::CrcMismatch { .. })),
                "{source:?}"
            );
        }
        e => panic!("expected a partition error, got {e:?}"),
    }
    assert_eq!(
        err_partition(&err),
        Some((topic.clone(), 0)),
        "the error names its partition"
    );
    // The other partitions flow to their end; partition 0 delivered what came before.
    let need = 20
        - got
            .iter()
            .filter(|(p, _)| **p != 0)
            .map(|(_, v)| v.len())
            .sum::<usize>();
    merge(&mut got, read(&reader, need, GUARD).await);
    assert_eq!(
        got.get(&0).map(Vec::len),
        Some(5),
        "partition 0 stops at the bad batch: {got:?}"
    );
    assert_exact(&got, 1..3, 10);
    assert_eq!(reader.position(&topic, 0).map(|p| p.offset), Some(5));
    // Stopped: nothing more of partition 0, and the error is not repeated.
    assert!(
        tokio::time::timeout(Duration::from_millis(800), reader.next_batch())
            .await
            .is_err(),
        "a failed partition stays quiet until a seek"
    );
    // The wire is clean again: a seek to the bad batch reads it and the rest.
    for id in 1..=3 {
        rm.relay(id).corrupt(b"");
    }
    reader.seek(&topic, 0, StartOffset::At(5)).expect("seek");
    let rest = read(&reader, 5, GUARD).await;
    let vals: Vec<&str> = rest[&0].iter().map(|(_, v)| v.as_str()).collect();
    assert_eq!(vals, ["0:5 CORRUPT-ME", "0:6", "0:7", "0:8", "0:9"]);
}

fn err_partition(e: &Error) -> Option<(String, i32)> {
    match e {
        Error::Reader(r) => r.topic_partition().map(|(t, p)| (t.to_owned(), p)),
        _ => None,
    }
}
