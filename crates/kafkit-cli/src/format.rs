//! Output of consumed records: kcat's `-f` format strings (`%t %p %o %k %K %s %S %R %T %h`,
//! `\n \r \t \xHH`; and kafkit's `%d`, a share group record's delivery count, which kcat has
//! no token for) and JSON lines, written without allocating per record (one output buffer).

use std::collections::HashMap;
use std::io::{self, Write};

use kafkit::ConsumerRecord;
use kafkit::protocol::records::TimestampType;
use serde_json::{Map, Value};

/// One piece of a format string.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(Vec<u8>),
    Topic,
    Partition,
    Offset,
    Key,
    KeyLen,
    Value,
    ValueLen,
    ValueLenBinary,
    Timestamp,
    Headers,
    /// `%d`: how many times a share group delivered the record (KIP-932).
    DeliveryCount,
}

/// A compiled kcat `-f` format string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    pieces: Vec<Piece>,
    /// What a null key or value prints (kcat: empty, or `NULL` with `-Z`).
    null: &'static [u8],
}

impl Format {
    /// Compiles `fmt` as kcat does: `%X` tokens, backslash escapes, anything else literal (an
    /// unknown `%X` is kept as it is).
    pub fn parse(fmt: &str, null_as_word: bool) -> Result<Format, String> {
        let mut pieces = Vec::new();
        let mut lit = Vec::new();
        let b = fmt.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'%' if i + 1 < b.len() => {
                    let piece = match b[i + 1] {
                        b't' => Piece::Topic,
                        b'p' => Piece::Partition,
                        b'o' => Piece::Offset,
                        b'k' => Piece::Key,
                        b'K' => Piece::KeyLen,
                        b's' => Piece::Value,
                        b'S' => Piece::ValueLen,
                        b'R' => Piece::ValueLenBinary,
                        b'T' => Piece::Timestamp,
                        b'h' => Piece::Headers,
                        b'd' => Piece::DeliveryCount,
                        b'%' => {
                            lit.push(b'%');
                            i += 2;
                            continue;
                        }
                        _ => {
                            lit.push(b'%');
                            i += 1;
                            continue;
                        }
                    };
                    if !lit.is_empty() {
                        pieces.push(Piece::Literal(std::mem::take(&mut lit)));
                    }
                    pieces.push(piece);
                    i += 2;
                }
                b'\\' => i += escape(&b[i..], &mut lit)?,
                c => {
                    lit.push(c);
                    i += 1;
                }
            }
        }
        if !lit.is_empty() {
            pieces.push(Piece::Literal(lit));
        }
        Ok(Format {
            pieces,
            null: if null_as_word { b"NULL" } else { b"" },
        })
    }

    /// kcat's output without `-f`: the value, or the key, `key_sep` and the value with `-K`;
    /// then `delimiter` (both already unescaped, by [`unescape`]).
    pub fn kcat_default(key_sep: Option<&[u8]>, delimiter: &[u8], null_as_word: bool) -> Format {
        let mut pieces = Vec::new();
        if let Some(sep) = key_sep {
            pieces.push(Piece::Key);
            pieces.push(Piece::Literal(sep.to_vec()));
        }
        pieces.push(Piece::Value);
        pieces.push(Piece::Literal(delimiter.to_vec()));
        Format {
            pieces,
            null: if null_as_word { b"NULL" } else { b"" },
        }
    }

    /// Whether it prints `%d`, a share group record's delivery count.
    pub fn has_delivery_count(&self) -> bool {
        self.pieces.contains(&Piece::DeliveryCount)
    }

    /// Appends `r` formatted to `out`; `delivery_count` is a share group record's (`%d`
    /// prints nothing without one).
    pub fn write(&self, r: &ConsumerRecord, delivery_count: Option<u16>, out: &mut Vec<u8>) {
        for p in &self.pieces {
            match p {
                Piece::Literal(l) => out.extend_from_slice(l),
                Piece::Topic => out.extend_from_slice(r.topic.as_bytes()),
                Piece::Partition => push_int(out, i64::from(r.partition)),
                Piece::Offset => push_int(out, r.offset),
                Piece::Key => out.extend_from_slice(r.key.as_deref().unwrap_or(self.null)),
                Piece::KeyLen => push_len(out, r.key.as_deref()),
                Piece::Value => out.extend_from_slice(r.value.as_deref().unwrap_or(self.null)),
                Piece::ValueLen => push_len(out, r.value.as_deref()),
                Piece::ValueLenBinary => {
                    let n = r
                        .value
                        .as_ref()
                        .map_or(-1, |v| i32::try_from(v.len()).unwrap_or(i32::MAX));
                    out.extend_from_slice(&n.to_be_bytes());
                }
                Piece::Timestamp => push_int(out, r.timestamp),
                Piece::DeliveryCount => {
                    if let Some(n) = delivery_count {
                        push_int(out, i64::from(n));
                    }
                }
                Piece::Headers => {
                    for (i, h) in r.headers.iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        out.extend_from_slice(&h.key);
                        out.push(b'=');
                        out.extend_from_slice(h.value.as_deref().unwrap_or(self.null));
                    }
                }
            }
        }
    }
}

/// One backslash escape at the start of `s` (`s[0]` is the backslash), as kcat reads them in
/// `-f`, `-K` and `-D`: `\n`, `\r`, `\t`, `\0`, `\\` and `\xHH`; any other is kept as it is.
/// Appends its bytes to `out` and returns how many bytes of `s` it took.
fn escape(s: &[u8], out: &mut Vec<u8>) -> Result<usize, String> {
    let byte = match s.get(1) {
        None => {
            out.push(b'\\');
            return Ok(1);
        }
        Some(b'n') => b'\n',
        Some(b'r') => b'\r',
        Some(b't') => b'\t',
        Some(b'0') => 0,
        Some(b'\\') => b'\\',
        Some(b'x') => {
            let hex = s.get(2..4).unwrap_or(&s[2..]);
            let text = String::from_utf8_lossy(hex);
            let byte = std::str::from_utf8(hex)
                .ok()
                .filter(|h| h.len() == 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad escape \\x{text}: expected two hex digits"))?;
            out.push(byte);
            return Ok(4);
        }
        Some(&other) => {
            out.extend([b'\\', other]);
            return Ok(2);
        }
    };
    out.push(byte);
    Ok(2)
}

/// `s` with its backslash escapes read (see [`escape`]): produce's and consume's `-K` and
/// `-D`, so that both read a separator the same way.
pub fn unescape(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            i += escape(&b[i..], &mut out)?;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

fn push_int(out: &mut Vec<u8>, n: i64) {
    // `write!` into a Vec cannot fail.
    let _ = write!(out, "{n}");
}

fn push_len(out: &mut Vec<u8>, b: Option<&[u8]>) {
    push_int(out, b.map_or(-1, |b| b.len() as i64));
}

/// Bytes as a JSON string (lossy for invalid UTF-8), `null` for `None`.
fn json_bytes(b: Option<&[u8]>) -> Value {
    b.map_or(Value::Null, |b| {
        Value::String(String::from_utf8_lossy(b).into_owned())
    })
}

/// One record as a JSON object: topic, partition, offset, timestamp, timestamp_type, key,
/// value, headers (`[[key, value], ...]`, keeping order and repeats).
pub fn json_record(r: &ConsumerRecord) -> Value {
    let mut m = Map::new();
    m.insert("topic".into(), Value::String(r.topic.to_string()));
    m.insert("partition".into(), r.partition.into());
    m.insert("offset".into(), r.offset.into());
    m.insert("timestamp".into(), r.timestamp.into());
    m.insert(
        "timestamp_type".into(),
        Value::String(format!("{:?}", r.timestamp_type)),
    );
    m.insert("key".into(), json_bytes(r.key.as_deref()));
    m.insert("value".into(), json_bytes(r.value.as_deref()));
    m.insert(
        "headers".into(),
        Value::Array(
            r.headers
                .iter()
                .map(|h| {
                    Value::Array(vec![
                        json_bytes(Some(&h.key)),
                        json_bytes(h.value.as_deref()),
                    ])
                })
                .collect(),
        ),
    );
    Value::Object(m)
}

/// `--json-shape`: the field names of `-J`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum JsonShape {
    /// kcat's `-J`: topic, partition, offset, tstype (create, logappend, none), ts, broker
    /// (the partition's leader when the command started), headers as a flat [k, v, k, v]
    /// array (present when the record has headers), key, payload.
    Kcat,
    /// kafkit's: topic, partition, offset, timestamp, timestamp_type, key, value, headers as
    /// [[k, v], ...].
    Kafkit,
}

/// How `-J` writes records.
#[derive(Debug, Clone)]
pub struct JsonOut {
    /// The field names.
    pub shape: JsonShape,
    /// Keys, values and header values as base64 (standard alphabet, padded) rather than
    /// text (binary bytes survive; text is UTF-8 with invalid bytes replaced).
    pub base64: bool,
    /// The leader of each partition (kcat's `broker`), -1 when unknown.
    pub leaders: HashMap<(String, i32), i32>,
}

impl JsonOut {
    fn bytes(&self, b: Option<&[u8]>) -> Value {
        if self.base64 {
            use base64::Engine as _;
            b.map_or(Value::Null, |b| {
                Value::String(base64::engine::general_purpose::STANDARD.encode(b))
            })
        } else {
            json_bytes(b)
        }
    }

    /// One record as kcat's `-J` object.
    fn kcat(&self, r: &ConsumerRecord) -> Value {
        let mut m = Map::new();
        m.insert("topic".into(), Value::String(r.topic.to_string()));
        m.insert("partition".into(), r.partition.into());
        m.insert("offset".into(), r.offset.into());
        let tstype = match r.timestamp_type {
            TimestampType::CreateTime => Some("create"),
            TimestampType::LogAppendTime => Some("logappend"),
            // NoTimestampType, and any type a later protocol adds (the enum is
            // non-exhaustive): kcat prints "none" for what it cannot name.
            _ => None,
        };
        match tstype {
            Some(t) => {
                m.insert("tstype".into(), Value::String(t.into()));
                m.insert("ts".into(), r.timestamp.into());
            }
            None => {
                m.insert("tstype".into(), Value::String("none".into()));
            }
        }
        let broker = self
            .leaders
            .get(&(r.topic.to_string(), r.partition))
            .copied()
            .unwrap_or(-1);
        m.insert("broker".into(), broker.into());
        if !r.headers.is_empty() {
            let mut flat = Vec::with_capacity(r.headers.len() * 2);
            for h in &r.headers {
                flat.push(json_bytes(Some(&h.key)));
                flat.push(self.bytes(h.value.as_deref()));
            }
            m.insert("headers".into(), Value::Array(flat));
        }
        m.insert("key".into(), self.bytes(r.key.as_deref()));
        m.insert("payload".into(), self.bytes(r.value.as_deref()));
        Value::Object(m)
    }

    /// Appends `r` as one JSON line; a share group record's `delivery_count` is its last field.
    pub fn write(
        &self,
        r: &ConsumerRecord,
        delivery_count: Option<u16>,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        let mut v = match self.shape {
            JsonShape::Kcat => self.kcat(r),
            JsonShape::Kafkit if !self.base64 => json_record(r),
            JsonShape::Kafkit => {
                let mut v = json_record(r);
                v["key"] = self.bytes(r.key.as_deref());
                v["value"] = self.bytes(r.value.as_deref());
                v["headers"] = Value::Array(
                    r.headers
                        .iter()
                        .map(|h| {
                            Value::Array(vec![
                                json_bytes(Some(&h.key)),
                                self.bytes(h.value.as_deref()),
                            ])
                        })
                        .collect(),
                );
                v
            }
        };
        if let (Some(n), Value::Object(m)) = (delivery_count, &mut v) {
            m.insert("delivery_count".into(), n.into());
        }
        serde_json::to_writer(&mut *out, &v)?;
        out.push(b'\n');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kcat_tokens_and_escapes() {
        let f = Format::parse("%t[%p]@%o %k=%s %% %z\\t\\x41\\n", false).unwrap();
        assert!(!f.has_delivery_count());
        assert_eq!(
            f.pieces,
            vec![
                Piece::Topic,
                Piece::Literal(b"[".to_vec()),
                Piece::Partition,
                Piece::Literal(b"]@".to_vec()),
                Piece::Offset,
                Piece::Literal(b" ".to_vec()),
                Piece::Key,
                Piece::Literal(b"=".to_vec()),
                Piece::Value,
                Piece::Literal(b" % %z\tA\n".to_vec()),
            ]
        );
        assert!(Format::parse("\\xZZ", false).is_err());
        let f = Format::parse("%o:%d", false).unwrap();
        assert!(f.has_delivery_count());
        assert_eq!(
            f.pieces,
            vec![
                Piece::Offset,
                Piece::Literal(b":".to_vec()),
                Piece::DeliveryCount
            ]
        );
        // -K and -D of produce and consume read the same escapes as -f.
        assert_eq!(
            unescape("\\0\\t\\x1e\\\\a\\q\\").unwrap(),
            b"\0\t\x1e\\a\\q\\"
        );
        assert!(unescape("\\x4").unwrap_err().contains("bad escape"));
        assert_eq!(
            Format::parse("%s\\0", false).unwrap().pieces,
            vec![Piece::Value, Piece::Literal(vec![0])]
        );
        assert_eq!(
            Format::kcat_default(Some(b":"), b"\n", true).pieces,
            vec![
                Piece::Key,
                Piece::Literal(b":".to_vec()),
                Piece::Value,
                Piece::Literal(b"\n".to_vec())
            ]
        );
    }
}
