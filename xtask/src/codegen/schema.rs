//! The JSON message schema model (Kafka's `clients/src/main/resources/common/message/*.json`).

use serde::Deserialize;

/// One schema file.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Schema {
    pub api_key: Option<i16>,
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub valid_versions: String,
    pub flexible_versions: Option<String>,
    /// The highest version is still under development: a released broker serves it only with
    /// `unstable.api.versions.enable=true`.
    #[serde(default)]
    pub latest_version_unstable: bool,
    #[serde(default)]
    pub fields: Vec<Field>,
    #[serde(default)]
    pub common_structs: Vec<StructDef>,
}

/// A field of a message or struct.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Field {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub versions: Option<String>,
    pub nullable_versions: Option<String>,
    pub tagged_versions: Option<String>,
    #[serde(default, deserialize_with = "de_tag")]
    pub tag: Option<u32>,
    pub default: Option<serde_json::Value>,
    #[serde(default)]
    pub ignorable: bool,
    pub flexible_versions: Option<String>,
    #[serde(default)]
    pub fields: Vec<Field>,
}

/// Tags appear both as numbers and as strings (`"tag": "0"`).
fn de_tag<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let v: Option<serde_json::Value> = Option::deserialize(d)?;
    match v {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom("bad tag")),
        Some(serde_json::Value::String(s)) => {
            s.trim().parse().map(Some).map_err(serde::de::Error::custom)
        }
        Some(_) => Err(serde::de::Error::custom("bad tag")),
    }
}

/// A named struct from `commonStructs`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StructDef {
    pub name: String,
    #[serde(default)]
    pub fields: Vec<Field>,
}

/// An inclusive version range; `None` from [`parse_versions`] means "none".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub min: i16,
    pub max: i16,
}

impl Range {
    pub fn intersect(&self, o: &Range) -> Option<Range> {
        let min = self.min.max(o.min);
        let max = self.max.min(o.max);
        (min <= max).then_some(Range { min, max })
    }

    pub fn describe(&self) -> String {
        if self.max == i16::MAX {
            format!("{}+", self.min)
        } else if self.min == self.max {
            format!("{}", self.min)
        } else {
            format!("{}-{}", self.min, self.max)
        }
    }
}

/// Parses `"0+"`, `"1-3"`, `"2"` or `"none"`.
pub fn parse_versions(s: &str) -> Result<Option<Range>, String> {
    let s = s.trim();
    if s == "none" {
        return Ok(None);
    }
    let num = |t: &str| {
        t.trim()
            .parse::<i16>()
            .map_err(|e| format!("bad version `{s}`: {e}"))
    };
    if let Some(min) = s.strip_suffix('+') {
        return Ok(Some(Range {
            min: num(min)?,
            max: i16::MAX,
        }));
    }
    if let Some((a, b)) = s.split_once('-') {
        return Ok(Some(Range {
            min: num(a)?,
            max: num(b)?,
        }));
    }
    let v = num(s)?;
    Ok(Some(Range { min: v, max: v }))
}

/// Removes `//` line comments (outside string literals) so serde_json can parse the file.
pub fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let mut in_str = false;
        let mut escaped = false;
        let mut cut = line.len();
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if in_str {
                if escaped {
                    escaped = false;
                } else if b == b'\\' {
                    escaped = true;
                } else if b == b'"' {
                    in_str = false;
                }
            } else if b == b'"' {
                in_str = true;
            } else if b == b'/' && bytes.get(i + 1) == Some(&b'/') {
                cut = i;
                break;
            }
            i += 1;
        }
        out.push_str(&line[..cut]);
        out.push('\n');
    }
    out
}

/// Parses one schema file's text.
pub fn parse_schema(text: &str) -> Result<Schema, String> {
    // Going through `Value` tolerates duplicated keys (one upstream file repeats `versions`).
    let v: serde_json::Value =
        serde_json::from_str(&strip_comments(text)).map_err(|e| e.to_string())?;
    serde_json::from_value(v).map_err(|e| e.to_string())
}
