//! Record batches (magic 2) and legacy message sets (magic 0 and 1): the `records` field of
//! Produce requests and Fetch responses.
//!
//! Formats follow the protocol guide's "Record Batch" and "Message Sets" sections: magic 2 comes
//! from KIP-98 (idempotence and transactions, CRC-32C, varint records, headers from KIP-82),
//! magic 1 from KIP-32 (timestamps) and magic 0 is the original format (CRC-32).
//!
//! - [`RecordBatchEncoder`] writes a magic 2 batch into a `BytesMut`, computing each record's size
//!   before writing it and back-patching the length and CRC.
//! - [`RecordBatchBuilder`] owns a magic 2 batch under construction: each record is encoded into
//!   its records section when appended, and the header (and compression) is written around the
//!   section when the batch is built, as often as its producer fields change
//!   ([`put_record_batch`] does the same for a section held elsewhere).
//! - [`RecordBatchDecoder`] iterates the batches of a `records` field, verifying checksums,
//!   decompressing through [`kafkit_compress`] with a size bound, and stopping cleanly at a partial
//!   batch at the end. Uncompressed keys, values and headers are zero-copy slices of the input.
//!
//! ```
//! use bytes::{Bytes, BytesMut};
//! use kafkit_protocol::records::{
//!     Record, RecordBatchEncoder, RecordBatchOptions, decode_record_batches,
//! };
//!
//! # fn main() -> Result<(), kafkit_protocol::records::RecordsError> {
//! let mut buf = BytesMut::new();
//! let options = RecordBatchOptions::new().producer(7, 0, 0);
//! let mut batch = RecordBatchEncoder::new(&mut buf, options)?;
//! for i in 0..3u8 {
//!     let record = Record::new(Some(Bytes::from(vec![i])), Some(Bytes::from_static(b"value")))
//!         .with_timestamp(1_700_000_000_000 + i64::from(i))
//!         .with_header("trace", None);
//!     batch.append(&record)?;
//! }
//! batch.finish()?;
//!
//! let batches = decode_record_batches(buf.freeze())?;
//! assert_eq!(batches.len(), 1);
//! assert_eq!(batches[0].header.producer_id, 7);
//! assert_eq!(batches[0].records.len(), 3);
//! assert_eq!(batches[0].records[2].offset, 2);
//! assert_eq!(batches[0].records[2].key.as_deref(), Some(&[2u8][..]));
//! # Ok(())
//! # }
//! ```

mod builder;
mod decode;
mod encode;
mod error;
mod types;
mod wire;

#[cfg(test)]
mod tests;

pub use builder::{RecordBatchBuilder, prefetch_write, put_record_batch};
pub use decode::{DecodeOptions, LOG_OVERHEAD, RecordBatchDecoder, decode_record_batches};
pub use encode::{
    RecordBatchEncoder, RecordBatchOptions, encoded_record_body_size, encoded_record_size,
    encoded_record_size_at,
};
pub use error::RecordsError;
pub use types::{
    ControlRecordType, Record, RecordBatch, RecordBatchHeader, RecordHeader, TimestampType,
    attributes,
};
pub use wire::{put_varint, put_varlong, varint_size, varlong_size};

/// Bytes of a magic 2 batch header, from `baseOffset` through the record count (61).
pub const BATCH_HEADER_SIZE: usize = 61;
