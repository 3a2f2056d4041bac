//! Records, headers, batch headers and the attribute bits that describe them.

use bytes::Bytes;
use kafkit_compress::Compression;

/// What a record's timestamp means (batch attributes bit 3; KIP-32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimestampType {
    /// Magic 0 messages carry no timestamp; their records' timestamps are -1.
    NoTimestampType,
    /// The producer set the timestamp when it created the record (bit 3 clear).
    #[default]
    CreateTime,
    /// The broker set the timestamp when it appended the batch (bit 3 set); every record in the
    /// batch then has the batch's `maxTimestamp`.
    LogAppendTime,
}

/// A record header: a UTF-8 string key and a nullable byte value (KIP-82).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RecordHeader {
    /// The header key. Kafka writes it as a UTF-8 string; the decoder keeps the raw bytes (a
    /// zero-copy slice) and [`RecordHeader::key_str`] checks them.
    pub key: Bytes,
    /// The header value, `None` for a null value.
    pub value: Option<Bytes>,
}

impl RecordHeader {
    /// A header with `key` and `value`.
    pub fn new(key: impl Into<Bytes>, value: Option<Bytes>) -> Self {
        RecordHeader {
            key: key.into(),
            value,
        }
    }

    /// The key as a string, or `None` if its bytes are not valid UTF-8.
    pub fn key_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.key).ok()
    }
}

/// One record: what a producer sends and a consumer receives.
///
/// When decoded from an uncompressed batch, `key`, `value` and header bytes are slices of the
/// input buffer (no copy); from a compressed batch they are slices of the decompressed buffer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Record {
    /// The record's offset in its partition (batch `baseOffset` + the record's `offsetDelta`).
    /// Ignored by the encoder, which numbers records from the batch's base offset.
    pub offset: i64,
    /// Milliseconds since the Unix epoch; meaning given by the batch's [`TimestampType`];
    /// -1 for magic 0 messages.
    pub timestamp: i64,
    /// The key, `None` for a null key.
    pub key: Option<Bytes>,
    /// The value, `None` for a null value (a tombstone in a compacted topic).
    pub value: Option<Bytes>,
    /// The headers, in order (KIP-82; always empty for magic 0 and 1).
    pub headers: Vec<RecordHeader>,
}

impl Record {
    /// A record with `key` and `value`, timestamp -1, offset 0 and no headers.
    pub fn new(key: Option<Bytes>, value: Option<Bytes>) -> Self {
        Record {
            offset: 0,
            timestamp: -1,
            key,
            value,
            headers: Vec::new(),
        }
    }

    /// Sets the timestamp (ms since the Unix epoch).
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// Sets the offset.
    pub fn with_offset(mut self, offset: i64) -> Self {
        self.offset = offset;
        self
    }

    /// Appends a header.
    pub fn with_header(mut self, key: impl Into<Bytes>, value: Option<Bytes>) -> Self {
        self.headers.push(RecordHeader::new(key, value));
        self
    }

    /// If this record is a control record (its batch has [`RecordBatchHeader::is_control`] set),
    /// the kind of marker its key names; `None` if the key is too short or has an unknown version.
    ///
    /// A control record's key is `version: int16` (0) then `type: int16` (KIP-98).
    pub fn control_type(&self) -> Option<ControlRecordType> {
        let key = self.key.as_deref()?;
        let version = i16::from_be_bytes([*key.first()?, *key.get(1)?]);
        let kind = i16::from_be_bytes([*key.get(2)?, *key.get(3)?]);
        (version == 0).then_some(ControlRecordType::from_i16(kind))
    }
}

/// The kind of a control record (KIP-98 transaction markers; KIP-595/KIP-853 KRaft records).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ControlRecordType {
    /// Type 0: the transaction was aborted; a `read_committed` consumer drops its records.
    Abort,
    /// Type 1: the transaction was committed.
    Commit,
    /// Any other type (KRaft leader change, snapshot and voter records, ...), with its code.
    Other(i16),
}

impl ControlRecordType {
    /// The type for a control key's `type` field.
    pub fn from_i16(kind: i16) -> Self {
        match kind {
            0 => ControlRecordType::Abort,
            1 => ControlRecordType::Commit,
            other => ControlRecordType::Other(other),
        }
    }

    /// The control key's `type` field value.
    pub fn as_i16(self) -> i16 {
        match self {
            ControlRecordType::Abort => 0,
            ControlRecordType::Commit => 1,
            ControlRecordType::Other(v) => v,
        }
    }

    /// The 4-byte control record key for this type (version 0).
    pub fn key(self) -> [u8; 4] {
        let [a, b] = self.as_i16().to_be_bytes();
        [0, 0, a, b]
    }
}

/// Batch attribute bits (protocol guide, "Record Batch").
pub mod attributes {
    /// Bits 0-2: compression id.
    pub const COMPRESSION_MASK: i16 = 0x07;
    /// Bit 3: timestamp type (set = LogAppendTime).
    pub const TIMESTAMP_TYPE: i16 = 0x08;
    /// Bit 4: the batch is part of a transaction (KIP-98).
    pub const TRANSACTIONAL: i16 = 0x10;
    /// Bit 5: the batch holds control records (KIP-98).
    pub const CONTROL: i16 = 0x20;
    /// Bit 6: `baseTimestamp` holds the delete horizon (KIP-534).
    pub const DELETE_HORIZON: i16 = 0x40;
}

/// The header fields of a record batch (magic 2), or the equivalent of a legacy message
/// (magic 0 or 1, where producer and transaction fields take their "none" values).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RecordBatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Bytes after the `batchLength` field (legacy: the message size).
    pub batch_length: i32,
    /// Leader epoch of the broker that appended the batch, -1 if unknown (KIP-101);
    /// -1 for legacy messages.
    pub partition_leader_epoch: i32,
    /// Format version: 2 for record batches, 0 or 1 for legacy messages.
    pub magic: i8,
    /// Stored checksum: CRC-32C of `attributes..end` (magic 2) or CRC-32 of `magic..end`
    /// (magic 0/1).
    pub crc: u32,
    /// Raw `attributes` field.
    pub attributes: i16,
    /// Codec of the records section (attributes bits 0-2).
    pub compression: Compression,
    /// Meaning of record timestamps (bit 3).
    pub timestamp_type: TimestampType,
    /// Part of a transaction (bit 4).
    pub is_transactional: bool,
    /// Holds control records, e.g. transaction markers (bit 5). Consumers normally skip these.
    pub is_control: bool,
    /// `base_timestamp` is the delete horizon (bit 6; KIP-534).
    pub has_delete_horizon: bool,
    /// Offset of the last record minus `base_offset`.
    pub last_offset_delta: i32,
    /// Timestamp of the first record, or the delete horizon (ms).
    pub base_timestamp: i64,
    /// Largest record timestamp, or the log append time (ms).
    pub max_timestamp: i64,
    /// Idempotent/transactional producer id, -1 if none (KIP-98).
    pub producer_id: i64,
    /// Producer epoch, -1 if none.
    pub producer_epoch: i16,
    /// Sequence number of the first record, -1 if none.
    pub base_sequence: i32,
    /// Number of records the batch declares.
    pub record_count: i32,
}

impl RecordBatchHeader {
    /// Offset of the batch's last record (`base_offset + last_offset_delta`).
    pub fn last_offset(&self) -> i64 {
        self.base_offset
            .wrapping_add(i64::from(self.last_offset_delta))
    }

    /// Offset a consumer fetches next after this batch (`last_offset() + 1`).
    pub fn next_offset(&self) -> i64 {
        self.last_offset().wrapping_add(1)
    }
}

/// A decoded batch: its header and its records (decompressed).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RecordBatch {
    /// The batch header.
    pub header: RecordBatchHeader,
    /// The records, in offset order.
    pub records: Vec<Record>,
}
