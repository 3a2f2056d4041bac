//! Glue between the client and `kafka_protocol::records`: one batch per produce entry, and
//! the records of a fetch response.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use kafka_compress::Compression;
use kafka_protocol::records::{Record, RecordBatchDecoder, RecordBatchEncoder, RecordBatchOptions};

use crate::error::Result;

/// Milliseconds since the Unix epoch (0 if the clock is before 1970).
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Appends one magic v2 batch holding `records` to `buf`. A negative record timestamp becomes
/// the current time (as the Java producer does for records without a timestamp).
pub(crate) fn encode_batch(
    buf: &mut BytesMut,
    records: &[Record],
    compression: Compression,
) -> Result<()> {
    let options = RecordBatchOptions::new().compression(compression);
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
/// `from_offset` to `out` (control records are skipped; a trailing partial batch is ignored).
pub(crate) fn decode_records(data: &Bytes, from_offset: i64, out: &mut Vec<Record>) -> Result<()> {
    for batch in RecordBatchDecoder::new(data.clone()) {
        let batch = batch?;
        if batch.header.is_control {
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
