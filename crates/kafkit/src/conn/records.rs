//! Glue between the client and `kafkit_protocol::records`: one batch per produce entry, and
//! the records of a fetch response.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use kafkit_compress::CompressionConfig;
use kafkit_protocol::records::{
    DecodeOptions, Record, RecordBatchDecoder, RecordBatchEncoder, RecordBatchOptions, RecordsError,
};

use crate::error::Result;
use crate::reader::aborted::{AbortedFilter, Verdict};

/// Milliseconds since the Unix epoch (0 if the clock is before 1970).
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

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
/// the records of aborted transactions are dropped too (`reader/aborted.rs`, as the Java
/// consumer does). Skipped batches still move the next offset past them, so a fetch that
/// returns only markers does not answer the same offset again. A trailing partial batch is
/// ignored. On a batch that does not decode, the records before it stay in `out` and the
/// error is returned with the next offset of the last whole batch read. Decoded values are charged to `budget` (bytes left of the caller's
/// decoded-memory budget, `DecodeOptions::max_decoded_bytes`): past it the batch fails with
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
    let mut next_offset = from_offset;
    let options = DecodeOptions::new().max_decoded_bytes(*budget);
    let mut decoder = RecordBatchDecoder::with_options(data.clone(), options);
    let result = decode_into(
        &mut decoder,
        from_offset,
        &mut filter,
        &mut next_offset,
        out,
    );
    *budget = budget.saturating_sub(decoder.decoded_bytes());
    result.map(|()| next_offset).map_err(|e| (next_offset, e))
}

fn decode_into(
    decoder: &mut RecordBatchDecoder,
    from_offset: i64,
    filter: &mut AbortedFilter,
    next_offset: &mut i64,
    out: &mut Vec<Record>,
) -> Result<(), RecordsError> {
    for batch in decoder {
        let batch = batch?;
        let h = &batch.header;
        let control = h
            .is_control
            .then(|| batch.records.first().and_then(Record::control_type))
            .flatten();
        *next_offset = (*next_offset).max(h.next_offset());
        if filter.judge(h, control) != Verdict::Keep {
            continue;
        }
        out.extend(
            batch
                .records
                .into_iter()
                .filter(|r| r.offset >= from_offset),
        );
    }
    Ok(())
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
