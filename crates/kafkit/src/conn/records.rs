//! Glue between the client and `kafkit_protocol::records`: one batch per produce entry, and
//! the records of a fetch response (the one batch walker, shared by the Reader and
//! `Conn::fetch_multi`). Imports `kafkit_protocol`, `aborted.rs`, `crate::error` and `crate::time` only.

use bytes::{Bytes, BytesMut};
use kafkit_compress::CompressionConfig;
use kafkit_protocol::records::{
    ControlRecordType, DecodeOptions, Record, RecordBatch, RecordBatchDecoder, RecordBatchEncoder,
    RecordBatchHeader, RecordBatchOptions, RecordsError,
};

use super::aborted::{AbortedFilter, Verdict};
use crate::error::Result;
use crate::time::now_ms;

/// Appends one magic v2 batch holding `records` to `buf`, compressed as `compression` says. A
/// negative record timestamp becomes the current time (as the Java producer does for records
/// without a timestamp).
pub(crate) fn encode_batch(
    buf: &mut BytesMut,
    records: &[Record],
    compression: CompressionConfig,
) -> Result<()> {
    let options = RecordBatchOptions::new()
        .compression(compression.compression())
        .compression_level(compression.level());
    let mut batch = RecordBatchEncoder::new(buf, options)?;
    let mut now = None;
    for r in records {
        let ts = if r.timestamp < 0 {
            *now.get_or_insert_with(now_ms)
        } else {
            r.timestamp
        };
        batch.append_parts(ts, r.key.as_deref(), r.value.as_deref(), &r.headers)?;
    }
    batch.finish()?;
    Ok(())
}

/// Decodes the batches of a Fetch `records` field and appends the data records at or after
/// `from_offset` to `out`. Returns the offset to fetch next: the next offset of the last whole
/// batch read (Java `nextFetchOffset`), or `from_offset` when no whole batch was returned.
///
/// Control batches (transaction markers) are skipped. When `aborted` is `Some` (a
/// `read_committed` fetch: the response's aborted transactions as `(producer id, first offset)`),
/// the records of aborted transactions are dropped too (`conn/aborted.rs`, as the Java
/// consumer does). Skipped batches still move the next offset past them, so a fetch that
/// returns only markers does not answer the same offset again. A trailing partial batch is
/// ignored. On a batch that does not decode, the records before it stay in `out` and the
/// error is returned with the next offset of the last whole batch read. Decoded values are
/// charged to `budget` (bytes left of the caller's decoded-memory budget,
/// `DecodeOptions::max_decoded_bytes`): past it the batch fails with
/// `RecordsError::DecodedTooLarge`.
pub(crate) fn decode_records(
    data: &Bytes,
    from_offset: i64,
    aborted: Option<&[(i64, i64)]>,
    out: &mut Vec<Record>,
    budget: &mut usize,
) -> Result<i64, (i64, RecordsError)> {
    let mut filter = match aborted {
        Some(list) => AbortedFilter::read_committed(list.iter().copied()),
        None => AbortedFilter::read_uncommitted(),
    };
    let walked = walk_batches(
        data,
        DecodeOptions::new(),
        budget,
        from_offset,
        &mut filter,
        |_, kept| {
            if let Some(mut records) = kept {
                out.append(&mut records);
            }
        },
    );
    match walked.error {
        None => Ok(walked.next_offset),
        Some(e) => Err((walked.next_offset, e)),
    }
}

/// How a walk over one partition's batches ended.
#[derive(Debug)]
pub(crate) struct Walked {
    /// The next offset of the last whole batch walked (Java `nextFetchOffset`), or the fetch
    /// offset when no whole batch was read.
    pub(crate) next_offset: i64,
    /// Whole batches decoded, those wholly behind the position included.
    pub(crate) whole: usize,
    /// The batch that stopped the walk: it did not decode, or did not fit the budget
    /// (`RecordsError::DecodedTooLarge`). The batches before it were walked.
    pub(crate) error: Option<RecordsError>,
    /// The bytes not decoded: after a walk without an error, a trailing partial batch (0 if
    /// there was none).
    pub(crate) partial_bytes: usize,
}

/// The one walker over the batches of a Fetch `records` field, shared by the Reader's source
/// (`reader/source.rs`, `decode_partition`) and `Conn::fetch_multi` (`decode_records`): whole
/// batches in offset order, each judged by `filter` (markers, and under `read_committed` the
/// batches of aborted transactions, are passed over), the position moved past every whole
/// batch. Decoding starts at `options` with at most `budget` decoded bytes; what was decoded is
/// charged to `budget` when the walk ends.
///
/// `on_batch` sees every whole batch that ends past the position, in order, before the
/// position moves past it: with `Some(records)` (those at or after `from_offset`; a compressed
/// legacy wrapper may start before it) when the batch is to be delivered, `None` when it is a
/// marker or aborted. A batch wholly behind the position (one already read) is judged but not
/// shown. The walk stops at the first batch that does not decode or fit (`Walked::error`).
#[inline(always)]
pub(crate) fn walk_batches(
    data: &Bytes,
    options: DecodeOptions,
    budget: &mut usize,
    from_offset: i64,
    filter: &mut AbortedFilter,
    mut on_batch: impl FnMut(&RecordBatchHeader, Option<Vec<Record>>),
) -> Walked {
    let mut decoder =
        RecordBatchDecoder::with_options(data.clone(), options.max_decoded_bytes(*budget));
    let mut walked = Walked {
        next_offset: from_offset,
        whole: 0,
        error: None,
        partial_bytes: 0,
    };
    for batch in decoder.by_ref() {
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                walked.error = Some(e);
                break;
            }
        };
        walked.whole += 1;
        let verdict = filter.judge(&batch.header, control_type(&batch));
        let h = &batch.header;
        if h.next_offset() <= walked.next_offset {
            continue;
        }
        let next = h.next_offset();
        let kept = (verdict == Verdict::Keep).then(|| at_or_after(batch.records, from_offset));
        on_batch(&batch.header, kept);
        walked.next_offset = next;
    }
    *budget = budget.saturating_sub(decoder.decoded_bytes());
    walked.partial_bytes = decoder.partial_bytes();
    walked
}

/// The type of a control batch's first record (`None` for data batches and empty ones).
#[inline(always)]
fn control_type(batch: &RecordBatch) -> Option<ControlRecordType> {
    batch
        .header
        .is_control
        .then(|| batch.records.first().and_then(Record::control_type))
        .flatten()
}

/// The records of a batch at or after `from`. Only a batch holding records before it (a
/// compressed legacy wrapper) is filtered; the others are handed on whole, without a copy.
#[inline(always)]
fn at_or_after(mut records: Vec<Record>, from: i64) -> Vec<Record> {
    if records.iter().any(|r| r.offset < from) {
        records.retain(|r| r.offset >= from);
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafkit_protocol::records::{ControlRecordType, RecordBatchOptions};

    fn batch(
        buf: &mut BytesMut,
        base: i64,
        producer: Option<i64>,
        control: Option<ControlRecordType>,
        n: i64,
    ) {
        let mut opts = RecordBatchOptions::new().base_offset(base);
        if let Some(pid) = producer {
            opts = opts.producer(pid, 0, 0).transactional(true);
        }
        if control.is_some() {
            opts = opts.control(true);
        }
        let mut enc = RecordBatchEncoder::new(buf, opts).unwrap();
        for i in 0..n {
            let key = control.map(|c| Bytes::copy_from_slice(&c.key()));
            let value = Bytes::from((base + i).to_string());
            enc.append(&Record::new(key, Some(value)).with_timestamp(1))
                .unwrap();
        }
        enc.finish().unwrap();
    }

    /// No decoded-memory limit.
    fn unbounded() -> usize {
        usize::MAX
    }

    fn values(out: &[Record]) -> Vec<i64> {
        out.iter().map(|r| r.offset).collect()
    }

    /// Offsets: 0-1 plain, 2-3 producer 7 (aborted), 4-5 producer 8 (committed), 6 abort
    /// marker of 7, 7 commit marker of 8, 8 plain.
    fn log() -> Bytes {
        let mut buf = BytesMut::new();
        batch(&mut buf, 0, None, None, 2);
        batch(&mut buf, 2, Some(7), None, 2);
        batch(&mut buf, 4, Some(8), None, 2);
        batch(&mut buf, 6, Some(7), Some(ControlRecordType::Abort), 1);
        batch(&mut buf, 7, Some(8), Some(ControlRecordType::Commit), 1);
        batch(&mut buf, 8, None, None, 1);
        buf.freeze()
    }

    #[test]
    fn read_uncommitted_keeps_every_data_record_but_no_markers() {
        let mut out = Vec::new();
        assert_eq!(
            decode_records(&log(), 0, None, &mut out, &mut unbounded()).unwrap(),
            9
        );
        assert_eq!(values(&out), vec![0, 1, 2, 3, 4, 5, 8]);
    }

    #[test]
    fn read_committed_drops_aborted_transactions() {
        let mut out = Vec::new();
        assert_eq!(
            decode_records(&log(), 0, Some(&[(7, 2)]), &mut out, &mut unbounded()).unwrap(),
            9
        );
        assert_eq!(values(&out), vec![0, 1, 4, 5, 8]);
    }

    #[test]
    fn markers_alone_still_move_the_next_offset() {
        // Only the two markers (offsets 6 and 7): no record, but the next offset passes them,
        // so a consumer at a marker at the log tail does not fetch offset 6 again.
        let data = log();
        let batches = kafkit_protocol::records::decode_record_batches(data.clone()).unwrap();
        let start: usize = batches[..3]
            .iter()
            .map(|b| 12 + usize::try_from(b.header.batch_length).unwrap())
            .sum();
        let len: usize = batches[3..5]
            .iter()
            .map(|b| 12 + usize::try_from(b.header.batch_length).unwrap())
            .sum();
        let markers = data.slice(start..start + len);
        for aborted in [None, Some(&[(7, 2)][..])] {
            let mut out = Vec::new();
            assert_eq!(
                decode_records(&markers, 6, aborted, &mut out, &mut unbounded()).unwrap(),
                8
            );
            assert!(out.is_empty());
        }
        let mut out = Vec::new();
        assert_eq!(
            decode_records(&Bytes::new(), 6, None, &mut out, &mut unbounded()).unwrap(),
            6,
            "nothing returned: the offset stays"
        );
    }

    #[test]
    fn records_before_the_fetch_offset_are_dropped() {
        let mut out = Vec::new();
        decode_records(&log(), 5, None, &mut out, &mut unbounded()).unwrap();
        assert_eq!(values(&out), vec![5, 8]);
    }

    /// A batch repeated in one answer (or one overlapping what was already walked) gives its
    /// records once: the walker skips a batch that ends at or before the position it reached,
    /// as the Java consumer skips records below its next fetch offset.
    #[test]
    fn a_repeated_batch_gives_its_records_once() {
        let mut buf = BytesMut::new();
        batch(&mut buf, 0, None, None, 3);
        batch(&mut buf, 0, None, None, 3);
        batch(&mut buf, 3, None, None, 2);
        let mut out = Vec::new();
        assert_eq!(
            decode_records(&buf.freeze(), 1, None, &mut out, &mut unbounded()).unwrap(),
            5
        );
        assert_eq!(values(&out), vec![1, 2, 3, 4]);
    }

    #[test]
    fn negative_timestamps_become_now() {
        let mut buf = BytesMut::new();
        encode_batch(
            &mut buf,
            &[
                Record::new(None, None),
                Record::new(None, None).with_timestamp(5),
            ],
            CompressionConfig::NONE,
        )
        .unwrap();
        let mut out = Vec::new();
        decode_records(&buf.freeze(), 0, None, &mut out, &mut unbounded()).unwrap();
        assert!(out[0].timestamp > 1_600_000_000_000);
        assert_eq!(out[1].timestamp, 5);
    }

    #[test]
    fn every_codec_and_a_level_round_trip() {
        use kafkit_compress::Compression;
        let records: Vec<Record> = (0..50u8)
            .map(|i| {
                Record::new(None, Some(Bytes::from(vec![b'v'; 100 + usize::from(i)])))
                    .with_timestamp(i64::from(i))
            })
            .collect();
        for c in Compression::ALL {
            for config in [
                CompressionConfig::new(c),
                c.default_level().map_or(CompressionConfig::new(c), |l| {
                    CompressionConfig::with_level(c, l).unwrap()
                }),
            ] {
                let mut buf = BytesMut::new();
                encode_batch(&mut buf, &records, config).unwrap();
                assert_eq!(i16::from(buf[22]) & 7, i16::from(c.id()), "{c} attributes");
                let mut out = Vec::new();
                decode_records(&buf.freeze(), 0, None, &mut out, &mut unbounded()).unwrap();
                assert_eq!(out.len(), records.len());
                assert_eq!(out[49].value, records[49].value, "{c}");
            }
        }
    }
}
