//! The encode phase of a Produce request: its batches encoded (compressed off the runtime's
//! workers when there is compressing to do) and the request built from them. Imports the
//! lists passed between phases (`lists.rs`) and the batch vocabulary, never a task file.

use kafkit_protocol::messages::{ProduceRequest, produce_request};

use super::batch::Outcome;
use super::config::Config;
use super::lists::{RequestLists, Verdict};
use crate::error::Error;

/// Drops the request's references to its batches' bytes, keeping its topic entries and their
/// lists' memory for the next request.
pub(super) fn release_request_bytes(produce: &mut ProduceRequest) {
    for t in &mut produce.topic_data {
        t.partition_data.clear();
    }
}

/// Encodes every batch of `lists.request` into `lists.sent` (record batch v2 with the producer
/// fields and, for a transactional writer, the transactional bit; compressed with the writer's
/// codec; a batch encoded by an earlier attempt keeps its bytes). A batch that cannot be
/// encoded gets its verdict at once, in `lists.verdicts`.
pub(super) fn encode_batches(
    compression: kafkit_compress::CompressionConfig,
    transactional: bool,
    lists: &mut RequestLists,
    pid: i64,
    epoch: i16,
) {
    let RequestLists {
        request,
        sent,
        verdicts,
        ..
    } = lists;
    sent.reserve(request.len());
    for (id, mut batch) in request.drain(..) {
        let seq = batch.sequence.map_or(-1, |(_, s)| s);
        match batch.encode(compression, pid, epoch, seq, transactional) {
            Ok(bytes) => sent.push((id, batch, bytes)),
            Err(e) => {
                let v = Verdict::Done(Outcome::failed(Error::from(e).into()));
                verdicts.push((id, batch, v));
            }
        }
    }
}

/// [`encode_batches`], off the runtime's workers when there is compressing to do: the batches
/// not encoded yet go to tokio's blocking pool in up to one group per core (by size), so one
/// broker's zstd or gzip work can use every core and never holds up the I/O tasks. Without
/// compression (a header and a CRC per batch: the records were encoded when appended) or with
/// nothing left to encode (a retry), on the calling task, with the request's kept lists; the
/// groups are lists of their own (a compressed batch allocates its output anyway). False when
/// an encoding task panicked (its batches dropped, failing their records).
pub(super) async fn encode_off_runtime(
    compression: kafkit_compress::CompressionConfig,
    transactional: bool,
    lists: &mut RequestLists,
    pid: i64,
    epoch: i16,
) -> bool {
    let to_encode: usize = lists
        .request
        .iter()
        .filter(|(_, b)| b.encoded.is_none())
        .map(|(_, b)| b.size)
        .sum();
    if compression.compression() == kafkit_compress::Compression::None || to_encode == 0 {
        encode_batches(compression, transactional, lists, pid, epoch);
        return true;
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let share = to_encode.div_ceil(cores).max(1);
    let mut groups: Vec<RequestLists> = vec![RequestLists::default()];
    let mut filled = 0usize;
    for (id, batch) in lists.request.drain(..) {
        if filled >= share && groups.len() < cores {
            groups.push(RequestLists::default());
            filled = 0;
        }
        if batch.encoded.is_none() {
            filled += batch.size;
        }
        groups
            .last_mut()
            .expect("one group at least")
            .request
            .push((id, batch));
    }
    let tasks: Vec<_> = groups
        .into_iter()
        .map(|mut g| {
            tokio::task::spawn_blocking(move || {
                encode_batches(compression, transactional, &mut g, pid, epoch);
                g
            })
        })
        .collect();
    for t in tasks {
        let Ok(mut g) = t.await else {
            return false;
        };
        lists.sent.append(&mut g.sent);
        lists.verdicts.append(&mut g.verdicts);
    }
    true
}

/// Fills `lists.produce`, the Produce request carrying the encoded batches `lists.sent`
/// (grouped by topic, in order), and `lists.sizes` with each batch's `(bytes, records)` for the
/// stats; returns the request's record bytes in all. The topic entries of the last request are
/// filled again (their names rewritten only when the topic differs, their partition lists
/// cleared), so in steady state nothing is allocated here.
pub(super) fn build_request(config: &Config, lists: &mut RequestLists) -> usize {
    let RequestLists {
        sent,
        sizes,
        produce,
        topics,
        topic_ids,
        ..
    } = lists;
    // Every entry of the last request back to the kept ones, the first topic's last, so that
    // it is the first taken again (most requests carry one topic, the same each time).
    topics.extend(produce.topic_data.drain(..).rev());
    sizes.clear();
    sizes.reserve(sent.len());
    let mut total = 0usize;
    for (i, (_, batch, bytes)) in sent.iter().enumerate() {
        sizes.push((bytes.len() as u64, batch.count() as u64));
        total += bytes.len();
        let p = produce_request::PartitionProduceData::default()
            .with_index(batch.shared.partition)
            .with_records(Some(bytes.clone()));
        let topic = &*batch.shared.topic;
        if let Some(t) = produce
            .topic_data
            .iter_mut()
            .rev()
            .find(|t| t.name == topic)
        {
            t.partition_data.push(p);
            continue;
        }
        let mut t = topics.pop().unwrap_or_default();
        if t.name != topic {
            t.name.clear();
            t.name.push_str(topic);
        }
        // Both the name and the id: the version, chosen with the connection, picks one.
        t.topic_id = topic_ids
            .iter()
            .find(|(n, _)| **n == *topic)
            .map_or(kafkit_protocol::Uuid::ZERO, |(_, id)| *id);
        t.partition_data.clear();
        // The first topic's list has room for every batch left (most requests carry one
        // topic); a later topic's grows as needed, so that many topics do not each reserve
        // the whole request.
        if produce.topic_data.is_empty() {
            t.partition_data.reserve(sent.len() - i);
        }
        t.partition_data.push(p);
        produce.topic_data.push(t);
    }
    if produce.transactional_id != config.transactional_id {
        produce
            .transactional_id
            .clone_from(&config.transactional_id);
    }
    produce.acks = config.acks.as_i16();
    produce.timeout_ms = i32::try_from(config.request_timeout_ms).unwrap_or(i32::MAX);
    total
}
