//! The error type for record batch encoding and decoding.

use kafkit_compress::CompressError;

/// Errors from encoding or decoding record batches and legacy message sets.
///
/// Decoding errors describe bytes that are not a valid `records` field; they map to Kafka's
/// `CORRUPT_MESSAGE` (see [`RecordsError::kafka_error_name`]). Encoding errors describe input
/// that cannot be written (a field or batch over the protocol's `i32` size limits, a codec that is
/// not built in).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordsError {
    /// The data ended inside a batch or record: `needed` bytes were required to read `what`,
    /// only `remaining` were left. (A partial batch at the *end* of a records field is not an
    /// error: the decoder stops before it.)
    #[error("unexpected end of data reading {what}: needed {needed} bytes, {remaining} remain")]
    UnexpectedEof {
        /// The field being read.
        what: &'static str,
        /// Bytes the field needed.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// A varint or varlong ran past its maximum width (5 bytes for 32 bits, 10 for 64) or set bits
    /// beyond its width.
    #[error("malformed varint reading {what}")]
    MalformedVarint {
        /// The field being read.
        what: &'static str,
    },
    /// A length or count prefix is negative (other than -1 for null where allowed) or larger than
    /// the bytes that remain. Checked before anything is allocated.
    #[error("invalid {what} {length} with {remaining} bytes remaining")]
    InvalidLength {
        /// The field whose prefix is wrong.
        what: &'static str,
        /// The prefix value read.
        length: i64,
        /// Bytes that were left after the prefix.
        remaining: usize,
    },
    /// The batch's magic byte is not 0, 1 or 2.
    #[error("batch at offset {base_offset} has unknown magic {magic} (supported: 0, 1, 2)")]
    UnknownMagic {
        /// The batch's first offset.
        base_offset: i64,
        /// The magic byte read.
        magic: i8,
    },
    /// The batch length (or legacy message size) is smaller than the fixed header of its format.
    #[error("batch at offset {base_offset} has length {length}, below the minimum {min} bytes")]
    BatchTooSmall {
        /// The batch's first offset.
        base_offset: i64,
        /// The length field read, in bytes.
        length: i32,
        /// The smallest valid length for the format, in bytes.
        min: i32,
    },
    /// The stored checksum does not match the bytes (CRC-32C for magic 2, CRC-32 for magic 0/1).
    #[error(
        "batch at offset {base_offset} fails its checksum: stored {stored:#010x}, computed {computed:#010x}"
    )]
    CrcMismatch {
        /// The batch's first offset.
        base_offset: i64,
        /// The checksum in the batch.
        stored: u32,
        /// The checksum of the bytes received.
        computed: u32,
    },
    /// The record count is negative or more records than the remaining bytes could hold.
    #[error("batch at offset {base_offset} declares {count} records; at most {max} fit")]
    InvalidRecordCount {
        /// The batch's first offset.
        base_offset: i64,
        /// The count read.
        count: i32,
        /// The most records the remaining bytes could hold.
        max: usize,
    },
    /// A record's length prefix does not match the bytes its fields used.
    #[error("record in batch at offset {base_offset} declares {declared} bytes but uses {actual}")]
    RecordLengthMismatch {
        /// The batch's first offset.
        base_offset: i64,
        /// The record's length prefix.
        declared: i32,
        /// Bytes its fields took.
        actual: usize,
    },
    /// Bytes are left in a batch after its declared records.
    #[error("batch at offset {base_offset} has {extra} bytes after its last record")]
    TrailingBytes {
        /// The batch's first offset.
        base_offset: i64,
        /// Bytes left over.
        extra: usize,
    },
    /// A legacy compressed wrapper message is malformed: null value, nested compression, an
    /// inner magic that differs from the wrapper's, or an empty inner message set.
    #[error("legacy compressed message at offset {base_offset} is invalid: {reason}")]
    InvalidWrapper {
        /// The wrapper's offset.
        base_offset: i64,
        /// What is wrong.
        reason: &'static str,
    },
    /// The batch's codec is unknown or not built in, or decompression failed or exceeded the
    /// configured limit.
    #[error("batch at offset {base_offset}: {source}")]
    Compression {
        /// The batch's first offset (-1 when encoding before the first record).
        base_offset: i64,
        /// The codec error.
        #[source]
        source: CompressError,
    },
    /// A key, value, header or batch is larger than the `i32` length the protocol can express.
    #[error("{what} of {size} bytes exceeds the protocol limit of {max} bytes")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size in bytes.
        size: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The values decoded from one `records` field (decompressed sections, records, headers)
    /// would take more memory than the decoder's budget
    /// ([`DecodeOptions::max_decoded_bytes`](crate::records::DecodeOptions)): a hostile or
    /// pathological field of many tiny records.
    #[error(
        "decoding the batch at offset {base_offset} would take the records field past its \
         budget of {limit} bytes of decoded memory"
    )]
    DecodedTooLarge {
        /// The first offset of the batch being decoded.
        base_offset: i64,
        /// The budget in bytes.
        limit: usize,
    },
    /// The batch already holds `i32::MAX` records, the most an offset delta can address.
    #[error("record batch is full: offset delta would exceed i32::MAX")]
    BatchFull,
    /// The batch options ask for something this writer cannot do
    /// ([`RecordBatchBuilder`](crate::records::RecordBatchBuilder): a delete horizon).
    #[error("record batch options not supported here: {reason}")]
    InvalidOptions {
        /// What is not supported.
        reason: &'static str,
    },
}

impl RecordsError {
    /// The Kafka protocol error code name this error corresponds to, if any
    /// (`CORRUPT_MESSAGE` for malformed data, `UNSUPPORTED_COMPRESSION_TYPE` for a codec that is
    /// not built in, `MESSAGE_TOO_LARGE` for oversized input; from `error-codes.tsv`).
    pub fn kafka_error_name(&self) -> Option<&'static str> {
        match self {
            RecordsError::Compression { source, .. } => source.kafka_error_name(),
            RecordsError::TooLarge { .. } | RecordsError::DecodedTooLarge { .. } => {
                Some("MESSAGE_TOO_LARGE")
            }
            RecordsError::BatchFull | RecordsError::InvalidOptions { .. } => None,
            _ => Some("CORRUPT_MESSAGE"),
        }
    }

    /// Whether retrying can help. Only a checksum mismatch can: the bytes may have been damaged
    /// in transit, so fetching them again may succeed (Kafka marks `CORRUPT_MESSAGE` retriable).
    /// Structural errors and codec errors repeat on every attempt.
    pub fn is_retriable(&self) -> bool {
        matches!(self, RecordsError::CrcMismatch { .. })
    }
}
