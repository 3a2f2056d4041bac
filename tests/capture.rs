//! `cargo xtask capture`: real traffic recorded as fuzz seeds (issue 19).
//!
//! Runs librdkafka (producers with every codec, an idempotent one, a transactional one that
//! commits and one that aborts, a group consumer, admin) and our clients (Writer with every
//! codec, Reader, GroupReader, admin Client) against the prebuilt tansu (memory storage), every
//! connection through a recording [`Relay`] (tansu advertises the relay), then writes what the
//! relay carried as seed files in the input formats of `fuzz/fuzz_targets/`:
//! - `messages/`: each request as `[0, api key, version] + body` (the request header removed,
//!   kind 0) and each response frame as `[2, api key, version] + frame body` (response header
//!   and response, kind 2: as the connection reads it), key and version big endian, the version
//!   being the request's;
//! - `records/`: each `records` field of a Produce request or a Fetch answer, as
//!   `[0, 0, 1] + records` (mode 0: the field as is; flag 1: CRCs verified);
//! - `conn_frames/`: each connection's responses as one stream, `[3] + frames` (limit 3:
//!   `max_response_size` 1 MiB), as a broker sends them.
//!
//! Files are named `capture-<fnv64 of the content>`, so a second capture adds only what is new.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use kafkit::{
    AutoOffsetReset, Client, Compression, GroupReader, ProducerRecord, Reader, Transport, Writer,
};
use kafkit_protocol::Message as _;
use kafkit_protocol::messages::{FetchRequest, ProduceRequest, RequestHeader};
use rdkafka::producer::{FutureProducer, Producer as _};
use rdkafka::util::Timeout;

use crate::{
    OwnedTansu, PEER_TIMEOUT, RecordedFrame, Relay, create_topic, peer_consume, peer_send,
    producer_config, txn_producer, unique_topic,
};

/// Seed files written per target.
#[derive(Debug, Default, Clone)]
pub struct Written {
    /// Target name -> (files new, files already there).
    pub targets: BTreeMap<&'static str, (usize, usize)>,
    /// Frames the relay carried.
    pub frames: usize,
    /// Request and response frames that kafkit-protocol decoded back (a check that the seeds
    /// carry the right key and version), and those it could not.
    pub decoded: (usize, usize),
}

/// Runs the traffic and writes the seeds under `out` (`out/<target>/capture-*`).
///
/// # Errors
/// When a seed file cannot be written.
///
/// # Panics
/// When tansu cannot be started or a client step fails (the traffic is the test's own).
pub async fn run(out: &Path) -> Result<Written, String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("relay bind");
    let relay_addr = listener.local_addr().expect("relay addr").to_string();
    let tansu = OwnedTansu::start_memory(Some(&relay_addr)).await;
    let relay = Relay::serve(listener, &tansu.listen);
    relay.record(true);
    let bootstrap = relay.addr().to_owned();
    peer_traffic(&bootstrap).await;
    our_traffic(&bootstrap).await;
    relay.record(false);
    let frames = relay.take_recorded();
    drop(tansu);
    write_seeds(out, &frames)
}

async fn peer_traffic(bootstrap: &str) {
    let topic = unique_topic("capture-peer");
    create_topic(bootstrap, &topic, 3).await;
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let producer: FutureProducer = producer_config(bootstrap)
            .set("compression.codec", codec)
            .set("linger.ms", "5")
            .set(
                "enable.idempotence",
                if codec == "zstd" { "true" } else { "false" },
            )
            .create()
            .expect("peer producer");
        let keys: Vec<String> = (0..30).map(|i| format!("key-{i}")).collect();
        let values: Vec<String> = (0..30)
            .map(|i| format!("{codec}-value-{i}-{}", "x".repeat(i)))
            .collect();
        let mut sends = Vec::new();
        for (i, (key, value)) in (0i32..).zip(keys.iter().zip(&values)) {
            let headers = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
                key: "h",
                value: Some(codec),
            });
            let rec = rdkafka::producer::FutureRecord::to(&topic)
                .partition(i % 3)
                .key(key)
                .payload(value)
                .headers(headers);
            sends.push(producer.send(rec, Timeout::After(PEER_TIMEOUT)));
        }
        for s in sends {
            s.await.expect("peer delivery");
        }
    }
    // Transactions: one committed, one aborted (control batches in the log).
    let txn = txn_producer(bootstrap, &unique_topic("capture-txn"));
    for commit in [true, false] {
        txn.begin_transaction().expect("begin");
        for p in 0..3 {
            peer_send(
                &txn,
                &topic,
                p,
                if commit { "committed" } else { "aborted" },
            )
            .await;
        }
        if commit {
            txn.commit_transaction(Timeout::After(PEER_TIMEOUT))
                .expect("commit");
        } else {
            txn.abort_transaction(Timeout::After(PEER_TIMEOUT))
                .expect("abort");
        }
    }
    drop(txn);
    peer_consume(bootstrap, &topic, 3, 150).await;
    // A group member of librdkafka's for a few seconds (JoinGroup, SyncGroup, heartbeats,
    // OffsetCommit / OffsetFetch).
    let group =
        crate::peer_group_consumer(bootstrap, &unique_topic("capture-g"), "range", false, 6000);
    let peer = crate::Peer::start("capture-peer", &group, &[&topic], true);
    let deadline = tokio::time::Instant::now() + PEER_TIMEOUT;
    while peer.count() < 150 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::task::spawn_blocking(move || peer.close())
        .await
        .expect("peer close");
}

async fn our_traffic(bootstrap: &str) {
    let transport = Transport::builder([bootstrap]).build().expect("transport");
    let topic = unique_topic("capture-ours");
    create_topic(bootstrap, &topic, 3).await;
    for codec in Compression::ALL {
        let writer = Writer::builder(transport.clone())
            .compression(codec)
            .linger(Duration::from_millis(5))
            .build()
            .expect("writer");
        let records = (0..30).map(|i| {
            ProducerRecord::new(&topic, format!("{codec}-{i}-{}", "y".repeat(i)))
                .key(format!("k{i}"))
                .header("codec", codec.to_string())
        });
        writer.write(records.collect()).await.expect("written");
        writer.close(PEER_TIMEOUT).await.expect("close");
    }
    let admin = Client::new(transport.clone());
    let _ = admin.list_topics(false).await;
    let _ = admin.describe_cluster(false).await;
    let mut member = GroupReader::builder(transport.clone(), unique_topic("capture-ours-g"))
        .subscribe([topic.clone()])
        .session_timeout(Duration::from_secs(6))
        .heartbeat_interval(Duration::from_millis(300))
        .reader(
            Reader::builder(transport)
                .fetch_max_wait(Duration::from_millis(100))
                .auto_offset_reset(AutoOffsetReset::Earliest),
        )
        .build()
        .expect("group member");
    let mut read = 0;
    let deadline = tokio::time::Instant::now() + PEER_TIMEOUT;
    while read < 150 {
        match tokio::time::timeout_at(deadline, member.next_batch()).await {
            Ok(Ok(parts)) => {
                read += parts.iter().map(|p| p.records.len()).sum::<usize>();
                let _ = member.commit().await;
            }
            Ok(Err(e)) => panic!("capture group member: {e}"),
            Err(_) => panic!("capture group member: {read} of 150 records within 30 s"),
        }
    }
    member.close().await;
}

/// The request header's length and the (api key, version) of a request frame.
fn request_header(frame: &[u8]) -> Option<(i16, i16, i32, usize)> {
    let h = frame.get(4..12)?;
    let key = i16::from_be_bytes([h[0], h[1]]);
    let version = i16::from_be_bytes([h[2], h[3]]);
    let correlation_id = i32::from_be_bytes([h[4], h[5], h[6], h[7]]);
    let header_version = header_version(key, version)?;
    let mut body = Bytes::copy_from_slice(&frame[4..]);
    let before = body.len();
    RequestHeader::decode(&mut body, header_version).ok()?;
    Some((key, version, correlation_id, 4 + before - body.len()))
}

/// The request header version of API `key` at `version` (None: an API we do not know).
fn header_version(key: i16, version: i16) -> Option<i16> {
    macro_rules! find {
        ($module:ident, $req:ident, $resp:ident) => {
            if key == <kafkit_protocol::messages::$req as kafkit_protocol::Request>::API_KEY as i16
            {
                return Some(
                    <kafkit_protocol::messages::$req as kafkit_protocol::Request>::request_header_version(
                        version,
                    ),
                );
            }
        };
    }
    kafkit_protocol::for_each_request!(find);
    None
}

/// Whether the body of a request (`request`) or a response frame body decodes as API `key`
/// at `version`.
fn decodes(key: i16, version: i16, body: &[u8], request: bool) -> bool {
    macro_rules! try_decode {
        ($module:ident, $req:ident, $resp:ident) => {
            if key == <kafkit_protocol::messages::$req as kafkit_protocol::Request>::API_KEY as i16
            {
                let mut b = Bytes::copy_from_slice(body);
                return if request {
                    kafkit_protocol::messages::$req::decode(&mut b, version).is_ok() && b.is_empty()
                } else {
                    kafkit_protocol::decode_response_frame::<kafkit_protocol::messages::$req>(
                        b, version,
                    )
                    .is_ok()
                };
            }
        };
    }
    kafkit_protocol::for_each_request!(try_decode);
    false
}

/// FNV-1a, 64 bits: a stable name for a seed's content.
fn fnv64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn write_seeds(out: &Path, frames: &[RecordedFrame]) -> Result<Written, String> {
    let mut written = Written {
        frames: frames.len(),
        ..Written::default()
    };
    let mut put = |target: &'static str, data: &[u8]| -> Result<(), String> {
        let dir = out.join(target);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let path = dir.join(format!("capture-{:016x}", fnv64(data)));
        let entry = written.targets.entry(target).or_default();
        if path.exists() {
            entry.1 += 1;
            return Ok(());
        }
        std::fs::write(&path, data).map_err(|e| format!("write {}: {e}", path.display()))?;
        entry.0 += 1;
        Ok(())
    };
    // (connection, correlation id) -> (api key, version).
    let mut asked: HashMap<(u64, i32), (i16, i16)> = HashMap::new();
    let mut streams: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut decoded = (0, 0);
    let tally = |d: &mut (usize, usize), ok: bool| {
        if ok {
            d.0 += 1;
        } else {
            d.1 += 1;
        }
    };
    for f in frames {
        if f.request {
            let Some((key, version, correlation_id, header)) = request_header(&f.frame) else {
                continue;
            };
            asked.insert((f.conn, correlation_id), (key, version));
            tally(
                &mut decoded,
                decodes(key, version, &f.frame[header..], true),
            );
            let mut seed = vec![0u8];
            seed.extend_from_slice(&key.to_be_bytes());
            seed.extend_from_slice(&version.to_be_bytes());
            seed.extend_from_slice(&f.frame[header..]);
            put("messages", &seed)?;
            if key == ProduceRequest::API_KEY_I16 {
                let mut body = Bytes::copy_from_slice(&f.frame[header..]);
                if let Ok(req) = ProduceRequest::decode(&mut body, version) {
                    for t in &req.topic_data {
                        for p in &t.partition_data {
                            if let Some(r) = p.records.as_ref().filter(|r| !r.is_empty()) {
                                put("records", &[&[0u8, 0, 1][..], r].concat())?;
                            }
                        }
                    }
                }
            }
        } else {
            streams
                .entry(f.conn)
                .or_default()
                .extend_from_slice(&f.frame);
            let Some(c) = f.frame.get(4..8) else { continue };
            let correlation_id = i32::from_be_bytes([c[0], c[1], c[2], c[3]]);
            let Some(&(key, version)) = asked.get(&(f.conn, correlation_id)) else {
                continue;
            };
            tally(&mut decoded, decodes(key, version, &f.frame[4..], false));
            let mut seed = vec![2u8];
            seed.extend_from_slice(&key.to_be_bytes());
            seed.extend_from_slice(&version.to_be_bytes());
            seed.extend_from_slice(&f.frame[4..]);
            put("messages", &seed)?;
            if key == FetchRequest::API_KEY_I16
                && let Ok((_, resp)) = kafkit_protocol::decode_response_frame::<FetchRequest>(
                    Bytes::copy_from_slice(&f.frame[4..]),
                    version,
                )
            {
                for t in &resp.responses {
                    for p in &t.partitions {
                        if let Some(r) = p.records.as_ref().filter(|r| !r.is_empty()) {
                            put("records", &[&[0u8, 0, 1][..], r].concat())?;
                        }
                    }
                }
            }
        }
    }
    for stream in streams.values() {
        put("conn_frames", &[&[3u8][..], stream].concat())?;
    }
    written.decoded = decoded;
    Ok(written)
}

/// API keys as `i16`.
trait ApiKeyI16 {
    const API_KEY_I16: i16;
}

impl<R: kafkit_protocol::Request> ApiKeyI16 for R {
    const API_KEY_I16: i16 = R::API_KEY as i16;
}
