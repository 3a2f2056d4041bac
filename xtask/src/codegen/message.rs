//! Generation of one module per message schema.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use super::schema::{Field, Range, Schema, parse_versions};
use super::tables::{HEADER, routing};

/// snake_case of a schema name (`ClientId` -> `client_id`, `ISRNodes` -> `isr_nodes`).
pub fn snake(s: &str) -> String {
    let c: Vec<char> = s.chars().collect();
    let mut o = String::new();
    for i in 0..c.len() {
        let ch = c[i];
        if ch.is_ascii_uppercase() {
            let prev_lower = i > 0 && (c[i - 1].is_ascii_lowercase() || c[i - 1].is_ascii_digit());
            let acronym_end = i > 0
                && c[i - 1].is_ascii_uppercase()
                && c.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if prev_lower || acronym_end {
                o.push('_');
            }
            o.push(ch.to_ascii_lowercase());
        } else {
            o.push(ch);
        }
    }
    o
}

fn ident(s: &str) -> String {
    let n = snake(s);
    match n.as_str() {
        "type" | "match" | "ref" | "struct" | "enum" | "fn" | "mod" | "use" | "loop" | "move"
        | "where" | "async" | "await" | "dyn" | "box" | "in" | "as" | "static" | "const"
        | "impl" | "trait" | "pub" | "yield" | "final" | "macro" | "override" | "virtual"
        | "abstract" | "become" | "do" | "try" | "gen" | "priv" | "unsafe" | "typeof"
        | "unsized" | "loop_" => format!("r#{n}"),
        _ => n,
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Ty {
    Prim(&'static str),
    Str,
    Bytes,
    Records,
    Uuid,
    Array(Box<Ty>),
    Struct(String),
}

fn parse_ty(t: &str) -> Ty {
    if let Some(inner) = t.strip_prefix("[]") {
        return Ty::Array(Box::new(parse_ty(inner)));
    }
    match t {
        "bool" => Ty::Prim("bool"),
        "int8" => Ty::Prim("i8"),
        "int16" => Ty::Prim("i16"),
        "uint16" => Ty::Prim("u16"),
        "int32" => Ty::Prim("i32"),
        "uint32" => Ty::Prim("u32"),
        "int64" => Ty::Prim("i64"),
        "float64" => Ty::Prim("f64"),
        "string" => Ty::Str,
        "bytes" => Ty::Bytes,
        "records" => Ty::Records,
        "uuid" => Ty::Uuid,
        other => Ty::Struct(other.to_string()),
    }
}

fn base_rust(t: &Ty) -> String {
    match t {
        Ty::Prim(p) => p.to_string(),
        Ty::Str => "String".into(),
        Ty::Bytes => "Bytes".into(),
        Ty::Records => "Option<Bytes>".into(),
        Ty::Uuid => "Uuid".into(),
        Ty::Array(inner) => format!("Vec<{}>", base_rust(inner)),
        Ty::Struct(s) => s.clone(),
    }
}

struct GenField {
    json: String,
    name: String,
    ty: Ty,
    rust: String,
    versions: Option<Range>,
    nullable: Option<Range>,
    tagged: Option<Range>,
    tag: Option<u32>,
    ignorable: bool,
    flex_override: Option<Option<Range>>,
    default: String,
    default_doc: String,
}

struct GenStruct {
    name: String,
    fields: Vec<GenField>,
}

struct Ctx<'a> {
    msg: &'a Schema,
    valid: Range,
    flexible: Option<Range>,
    structs: Vec<GenStruct>,
    seen: HashMap<String, ()>,
    commons: BTreeMap<String, Vec<Field>>,
}

fn parse_opt(s: &Option<String>, what: &str) -> Result<Option<Range>, String> {
    match s {
        None => Ok(None),
        Some(s) => parse_versions(s).map_err(|e| format!("{what}: {e}")),
    }
}

fn parse_int(s: &str) -> Result<i128, String> {
    let s = s.trim();
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let v = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        i128::from_str_radix(h, 16)
    } else {
        body.parse::<i128>()
    }
    .map_err(|e| format!("bad integer default `{s}`: {e}"))?;
    Ok(if neg { -v } else { v })
}

fn default_for(f: &Field, ty: &Ty, is_option: bool) -> Result<(String, String), String> {
    let raw: Option<String> = match &f.default {
        None => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(v) => Some(v.to_string()),
    };
    let wrap = |e: String| if is_option { format!("Some({e})") } else { e };
    if raw.as_deref() == Some("null") && is_option {
        return Ok(("None".into(), "null".into()));
    }
    let out = match ty {
        Ty::Prim("bool") => {
            let v = raw.as_deref().unwrap_or("false");
            if v != "true" && v != "false" {
                return Err(format!("bad bool default `{v}` for {}", f.name));
            }
            (v.to_string(), v.to_string())
        }
        Ty::Prim("f64") => {
            let v: f64 = match &raw {
                Some(s) => s
                    .parse()
                    .map_err(|e| format!("bad float default for {}: {e}", f.name))?,
                None => 0.0,
            };
            (format!("{v:?}"), format!("{v}"))
        }
        Ty::Prim(p) => {
            let v = match &raw {
                Some(s) => parse_int(s)?,
                None => 0,
            };
            let (lo, hi): (i128, i128) = match *p {
                "i8" => (i8::MIN.into(), i8::MAX.into()),
                "i16" => (i16::MIN.into(), i16::MAX.into()),
                "u16" => (0, u16::MAX.into()),
                "i32" => (i32::MIN.into(), i32::MAX.into()),
                "u32" => (0, u32::MAX.into()),
                _ => (i64::MIN.into(), i64::MAX.into()),
            };
            if v < lo || v > hi {
                return Err(format!("default {v} out of range for {}", f.name));
            }
            let lit = if v == lo && v < 0 {
                format!("{p}::MIN")
            } else {
                v.to_string()
            };
            (lit, v.to_string())
        }
        Ty::Str => match raw.as_deref() {
            None | Some("") => (wrap("String::new()".into()), "empty string".into()),
            Some(s) => (wrap(format!("String::from({s:?})")), format!("{s:?}")),
        },
        Ty::Bytes => (wrap("Bytes::new()".into()), "empty".into()),
        Ty::Records => ("None".into(), "null".into()),
        Ty::Uuid => ("Uuid::ZERO".into(), "all-zero UUID".into()),
        Ty::Array(inner) => (
            wrap(format!("Vec::<{}>::new()", base_rust(inner))),
            "empty".into(),
        ),
        Ty::Struct(s) => (
            wrap(format!("{s}::default()")),
            "all fields at their defaults".into(),
        ),
    };
    Ok(out)
}

impl<'a> Ctx<'a> {
    /// Condition string for `version` in `r`, simplified against the message's valid versions.
    fn cond(&self, r: Option<Range>) -> String {
        match r.and_then(|r| r.intersect(&self.valid)) {
            None => "false".into(),
            Some(x) if x == self.valid => "true".into(),
            Some(x) if x.min <= self.valid.min => format!("version <= {}", x.max),
            Some(x) if x.max >= self.valid.max => format!("version >= {}", x.min),
            Some(x) if x.min == x.max => format!("version == {}", x.min),
            Some(x) => format!("({}..={}).contains(&version)", x.min, x.max),
        }
    }

    fn add_struct(&mut self, name: &str, fields: &[Field]) -> Result<(), String> {
        if self.seen.contains_key(name) {
            return Ok(());
        }
        self.seen.insert(name.to_string(), ());
        let idx = self.structs.len();
        self.structs.push(GenStruct {
            name: name.to_string(),
            fields: Vec::new(),
        });
        let mut out = Vec::new();
        for f in fields {
            out.push(self.field(f)?);
        }
        self.structs[idx].fields = out;
        Ok(())
    }

    fn field(&mut self, f: &Field) -> Result<GenField, String> {
        let ty = parse_ty(&f.ty);
        // Register nested struct definitions.
        let inner = match &ty {
            Ty::Array(b) => match b.as_ref() {
                Ty::Struct(s) => Some(s.clone()),
                _ => None,
            },
            Ty::Struct(s) => Some(s.clone()),
            _ => None,
        };
        if let Some(s) = inner {
            if !f.fields.is_empty() {
                self.add_struct(&s, &f.fields)?;
            } else if let Some(fs) = self.commons.get(&s).cloned() {
                self.add_struct(&s, &fs)?;
            } else if !self.seen.contains_key(&s) {
                return Err(format!("{}: unknown struct type {s}", f.name));
            }
        }
        let versions = parse_opt(&f.versions, &f.name)?;
        let nullable = parse_opt(&f.nullable_versions, &f.name)?;
        let tagged = parse_opt(&f.tagged_versions, &f.name)?;
        let flex_override = match &f.flexible_versions {
            None => None,
            Some(s) => Some(parse_versions(s)?),
        };
        let is_option = nullable.is_some() && !matches!(ty, Ty::Records | Ty::Prim(_) | Ty::Uuid);
        let mut rust = base_rust(&ty);
        if is_option {
            rust = format!("Option<{rust}>");
        }
        let (default, default_doc) = default_for(f, &ty, is_option || ty == Ty::Records)?;
        Ok(GenField {
            json: f.name.clone(),
            name: ident(&f.name),
            ty,
            rust,
            versions,
            nullable,
            tagged,
            tag: f.tag,
            ignorable: f.ignorable,
            flex_override,
            default,
            default_doc,
        })
    }

    /// Versions where the field is encoded as a regular (untagged) field.
    fn regular(&self, f: &GenField) -> Option<Range> {
        if f.tag.is_some() { None } else { f.versions }
    }

    /// Versions where the field is encoded as a tagged field.
    fn tagged(&self, f: &GenField) -> Option<Range> {
        match (f.tag, f.tagged, f.versions) {
            (Some(_), Some(t), Some(v)) => t.intersect(&v),
            _ => None,
        }
    }

    fn flex_expr(&self, f: &GenField) -> String {
        match &f.flex_override {
            Some(r) => self.cond(*r),
            None => "flexible".into(),
        }
    }
}

/// The negation of a condition made by `Ctx::cond`.
fn negate(cond: &str) -> String {
    if let Some(n) = cond.strip_prefix("version >= ")
        && !n.contains(' ')
    {
        return format!("version < {n}");
    }
    if let Some(n) = cond.strip_prefix("version <= ")
        && !n.contains(' ')
    {
        return format!("version > {n}");
    }
    format!("!({cond})")
}

fn field_doc(c: &Ctx, f: &GenField) -> String {
    let mut parts = Vec::new();
    parts.push(format!(
        "Schema field `{}` ({}).",
        f.json,
        match &f.ty {
            Ty::Prim(p) => p.to_string(),
            Ty::Str => "string".into(),
            Ty::Bytes => "bytes".into(),
            Ty::Records => "records: raw record-batch bytes".into(),
            Ty::Uuid => "uuid".into(),
            Ty::Array(_) => "array".into(),
            Ty::Struct(_) => "struct".into(),
        }
    ));
    match (c.regular(f), c.tagged(f)) {
        (Some(r), _) => parts.push(format!("Versions: {}.", r.describe())),
        (None, Some(t)) => parts.push(format!(
            "Tagged field, tag {}, in versions {}.",
            f.tag.unwrap_or_default(),
            t.describe()
        )),
        (None, None) => parts.push("Not sent in any version.".into()),
    }
    if let Some(n) = f.nullable {
        parts.push(format!("Nullable in versions {}.", n.describe()));
    }
    parts.push(format!("Default: {}.", f.default_doc));
    if f.ignorable {
        parts.push("Ignorable: silently dropped at versions that lack it.".into());
    } else {
        parts.push(
            "Not ignorable: a non-default value at a version that lacks it fails to encode.".into(),
        );
    }
    if let Some(o) = &f.flex_override {
        parts.push(format!(
            "Uses the compact encoding only in versions {}.",
            o.map(|r| r.describe()).unwrap_or_else(|| "none".into())
        ));
    }
    parts.join(" ")
}

fn gen_struct(c: &Ctx, s: &GenStruct, top: bool, o: &mut String) {
    let flex_cond = c.cond(c.flexible);
    let has_tags = c.flexible.is_some();
    let nm = &s.name;
    // Declaration.
    if top {
        let kind = match c.msg.kind.as_str() {
            "request" => "Request",
            "response" => "Response",
            "header" => "Header",
            _ => "Data",
        };
        let _ = write!(o, "/// {kind} message `{nm}`");
        if let Some(k) = c.msg.api_key {
            let _ = write!(o, " (API key {k})");
        }
        let _ = writeln!(
            o,
            ".\n///\n/// Valid versions: {}. Flexible (compact) versions: {}.",
            c.valid.describe(),
            c.flexible
                .map(|r| r.describe())
                .unwrap_or_else(|| "none".into())
        );
    } else {
        let _ = writeln!(
            o,
            "/// Struct `{nm}` of [`{}`]; shares its versions.",
            c.msg.name
        );
    }
    o.push_str("#[derive(Debug, Clone, PartialEq)]\n#[non_exhaustive]\n");
    let _ = writeln!(o, "pub struct {nm} {{");
    for f in &s.fields {
        let _ = writeln!(
            o,
            "    /// {}\n    pub {}: {},",
            field_doc(c, f),
            f.name,
            f.rust
        );
    }
    if has_tags {
        o.push_str("    /// Tagged fields this library does not know, kept to be written back (KIP-482).\n    pub unknown_tagged_fields: TaggedFields,\n");
    }
    o.push_str("}\n\n");

    // Default.
    let _ = writeln!(
        o,
        "impl Default for {nm} {{\n    fn default() -> Self {{\n        Self {{"
    );
    for f in &s.fields {
        let _ = writeln!(o, "            {}: {},", f.name, f.default);
    }
    if has_tags {
        o.push_str("            unknown_tagged_fields: TaggedFields::new(),\n");
    }
    o.push_str("        }\n    }\n}\n\n");

    let ctx = |f: &GenField, flex: &str| {
        format!(
            "Self::ctx(version, {flex}, {}, \"{}\")",
            c.cond(f.nullable),
            f.name.trim_start_matches("r#")
        )
    };
    let absent_check = |f: &GenField, present: &str, o: &mut String| {
        if !f.ignorable && present != "true" {
            let _ = writeln!(
                o,
                "        if {} && self.{} != {} {{\n            return Err(Self::not_supported(\"{}\", version));\n        }}",
                negate(present),
                f.name,
                f.default,
                f.name.trim_start_matches("r#")
            );
        }
    };
    let present_any = |f: &GenField| -> String {
        let r = c.cond(c.regular(f));
        let t = c.cond(c.tagged(f));
        match (r.as_str(), t.as_str()) {
            ("false", t) => t.to_string(),
            (r, "false") => r.to_string(),
            ("true", _) | (_, "true") => "true".into(),
            (r, t) => format!("({r}) || ({t})"),
        }
    };
    let mut tagged: Vec<&GenField> = s.fields.iter().filter(|f| c.tagged(f).is_some()).collect();
    tagged.sort_by_key(|f| f.tag);
    let uses_flex = has_tags
        || s.fields.iter().any(|f| {
            f.flex_override.is_none()
                && matches!(f.ty, Ty::Str | Ty::Bytes | Ty::Records | Ty::Array(_))
        });
    let _ = uses_flex;
    let flex_line = "@@FLEX@@\n".to_string();

    // Wire impl.
    let _ = writeln!(
        o,
        "impl Wire for {nm} {{\n    const STRUCT_NAME: &'static str = \"{nm}\";\n"
    );
    // write
    let _ = writeln!(
        o,
        "    fn write(&self, buf: &mut BytesMut, version: i16) -> Result<(), EncodeError> {{"
    );
    o.push_str(&flex_line);
    o.push_str("        let _ = (&buf, version);\n");
    for f in &s.fields {
        let reg = c.cond(c.regular(f));
        absent_check(f, &present_any(f), o);
        if reg != "false" {
            let call = format!(
                "FieldCodec::write(&self.{}, buf, {})?;",
                f.name,
                ctx(f, &c.flex_expr(f))
            );
            if reg == "true" {
                let _ = writeln!(o, "        {call}");
            } else {
                let _ = writeln!(o, "        if {reg} {{\n            {call}\n        }}");
            }
        }
    }
    if has_tags {
        let m = if tagged.is_empty() { "" } else { "mut " };
        let _ = writeln!(
            o,
            "        if flexible {{\n            let {m}n = self.unknown_tagged_fields.len();"
        );
        for (k, f) in tagged.iter().enumerate() {
            let _ = writeln!(
                o,
                "            let t{k} = {} && self.{} != {};\n            n += usize::from(t{k});",
                c.cond(c.tagged(f)),
                f.name,
                f.default
            );
        }
        o.push_str("            p::write_uvarint(buf, n as u32);\n            let mut unknown = self.unknown_tagged_fields.iter().peekable();\n");
        for (k, f) in tagged.iter().enumerate() {
            let tag = f.tag.unwrap_or_default();
            let _ = writeln!(
                o,
                "            if t{k} {{\n                p::write_unknown_below(buf, &mut unknown, {tag});\n                p::write_tagged(buf, {tag}, &self.{}, {})?;\n            }}",
                f.name,
                ctx(f, "true")
            );
        }
        o.push_str("            p::write_unknown_rest(buf, &mut unknown);\n        }\n");
    }
    o.push_str("        Ok(())\n    }\n\n");
    // size
    let _ = writeln!(
        o,
        "    fn size(&self, version: i16) -> Result<usize, EncodeError> {{"
    );
    o.push_str(&flex_line);
    o.push_str("        let _ = version;\n");
    o.push_str("        let mut n = 0usize;\n");
    for f in &s.fields {
        let reg = c.cond(c.regular(f));
        absent_check(f, &present_any(f), o);
        if reg != "false" {
            let call = format!(
                "n += FieldCodec::size(&self.{}, {})?;",
                f.name,
                ctx(f, &c.flex_expr(f))
            );
            if reg == "true" {
                let _ = writeln!(o, "        {call}");
            } else {
                let _ = writeln!(o, "        if {reg} {{\n            {call}\n        }}");
            }
        }
    }
    if has_tags {
        let m = if tagged.is_empty() { "" } else { "mut " };
        let _ = writeln!(
            o,
            "        if flexible {{\n            let {m}k = self.unknown_tagged_fields.len();\n            let {m}s = p::unknown_tagged_size(&self.unknown_tagged_fields);"
        );
        for f in &tagged {
            let _ = writeln!(
                o,
                "            if {} && self.{} != {} {{\n                k += 1;\n                s += p::tagged_size({}, &self.{}, {})?;\n            }}",
                c.cond(c.tagged(f)),
                f.name,
                f.default,
                f.tag.unwrap_or_default(),
                f.name,
                ctx(f, "true")
            );
        }
        o.push_str("            n += p::uvarint_size(k as u32) + s;\n        }\n");
    }
    o.push_str("        Ok(n)\n    }\n\n");
    // read
    let _ = writeln!(
        o,
        "    fn read<'a>(src: &Bytes, i: &'a [u8], version: i16) -> PResult<'a, Self> {{"
    );
    o.push_str(&flex_line);
    o.push_str("        let _ = (src, version);\n        let mut this = Self::default();\n");
    for f in &s.fields {
        let reg = c.cond(c.regular(f));
        if reg == "false" {
            continue;
        }
        let call = format!("FieldCodec::read(src, i, {})?", ctx(f, &c.flex_expr(f)));
        if reg == "true" {
            let _ = writeln!(
                o,
                "        let (i, v) = {call};\n        this.{} = v;",
                f.name
            );
        } else {
            let _ = writeln!(
                o,
                "        let i = if {reg} {{\n            let (i, v) = {call};\n            this.{} = v;\n            i\n        }} else {{\n            i\n        }};",
                f.name
            );
        }
    }
    if has_tags {
        if tagged.is_empty() {
            o.push_str("        let i = if flexible {\n            p::read_unknown_tagged(src, i, &mut this.unknown_tagged_fields)?.0\n        } else {\n            i\n        };\n");
        } else {
            o.push_str("        let i = if flexible {\n            let (mut i, k) = p::read_uvarint(i)?;\n            for _ in 0..k {\n                let (rest, (tag, data)) = p::read_tag(i)?;\n                i = rest;\n                match tag {\n");
            for f in &tagged {
                let _ = writeln!(
                    o,
                    "                    {} if {} => this.{} = p::read_tagged_value(src, data, {})?,",
                    f.tag.unwrap_or_default(),
                    c.cond(c.tagged(f)),
                    f.name,
                    ctx(f, "true")
                );
            }
            o.push_str("                    _ => {\n                        this.unknown_tagged_fields.insert(tag, src.slice_ref(data));\n                    }\n                }\n            }\n            i\n        } else {\n            i\n        };\n");
        }
    }
    o.push_str("        Ok((i, this))\n    }\n}\n\n");
    let body = std::mem::take(o);
    let mut out = String::new();
    // Emit `let flexible` only in functions that use it.
    for (n, part) in body.split("@@FLEX@@\n").enumerate() {
        if n > 0 {
            let rest_fn = part.split("\n    fn ").next().unwrap_or(part);
            if rest_fn.contains("flexible") {
                let _ = writeln!(out, "        let flexible = {flex_cond};");
            }
        }
        out.push_str(part);
    }
    *o = out;

    // Arbitrary.
    let _ = writeln!(
        o,
        "#[cfg(feature = \"arbitrary\")]\nimpl crate::arbitrary::Arbitrary for {nm} {{\n    fn arbitrary(g: &mut crate::arbitrary::Gen, version: i16) -> Self {{"
    );
    o.push_str("        let mut this = Self::default();\n");
    for f in &s.fields {
        let p = present_any(f);
        if p == "false" {
            continue;
        }
        let call = format!(
            "this.{} = g.field({}, version);",
            f.name,
            c.cond(f.nullable)
        );
        if p == "true" {
            let _ = writeln!(o, "        {call}");
        } else {
            let _ = writeln!(o, "        if {p} {{\n            {call}\n        }}");
        }
    }
    if has_tags && flex_cond != "false" {
        let _ = writeln!(
            o,
            "        if {flex_cond} {{\n            g.unknown_tags(&mut this.unknown_tagged_fields);\n        }}"
        );
    }
    o.push_str("        let _ = version;\n        this\n    }\n}\n\n");
}

/// Generates the module text for one schema; returns `(module name, text)`.
pub fn gen_message(
    msg: &Schema,
    by_name: &HashMap<String, Schema>,
) -> Result<(String, String), String> {
    let valid = parse_versions(&msg.valid_versions)?.ok_or("validVersions none")?;
    let flexible = match &msg.flexible_versions {
        Some(s) => parse_versions(s)?,
        None => None,
    };
    let mut commons = BTreeMap::new();
    for s in &msg.common_structs {
        commons.insert(s.name.clone(), s.fields.clone());
    }
    let mut c = Ctx {
        msg,
        valid,
        flexible,
        structs: Vec::new(),
        seen: HashMap::new(),
        commons,
    };
    c.add_struct(&msg.name, &msg.fields)
        .map_err(|e| format!("{}: {e}", msg.name))?;
    let module = snake(&msg.name);
    let mut o = String::from(HEADER);
    let _ = writeln!(
        o,
        "//! `{}`: the message type and its nested structs.\n",
        msg.name
    );
    o.push_str("#![allow(unused_imports, clippy::needless_update, clippy::nonminimal_bool, clippy::overly_complex_bool_expr, clippy::bool_comparison, clippy::manual_range_contains, clippy::comparison_to_empty, clippy::partialeq_to_none, clippy::field_reassign_with_default, clippy::derivable_impls)]\n\n");
    o.push_str("use bytes::{Bytes, BytesMut};\n\nuse crate::error::{DecodeError, EncodeError};\nuse crate::primitives::{self as p, Ctx, FieldCodec, PResult, TaggedFields, Uuid, Wire};\nuse crate::protocol::{ApiKey, Message, Request, Routing, VersionRange};\n\n");
    let structs = std::mem::take(&mut c.structs);
    for (n, s) in structs.iter().enumerate() {
        gen_struct(&c, s, n == 0, &mut o);
    }
    // Message impl.
    let range = |r: Range| {
        format!(
            "VersionRange::new({}, {})",
            r.min,
            if r.max == i16::MAX {
                "i16::MAX".into()
            } else {
                r.max.to_string()
            }
        )
    };
    let _ = writeln!(
        o,
        "impl Message for {n} {{\n    const NAME: &'static str = \"{n}\";\n    const VERSIONS: VersionRange = {};\n    const FLEXIBLE_VERSIONS: Option<VersionRange> = {};\n",
        range(valid),
        flexible
            .map(|r| format!("Some({})", range(r)))
            .unwrap_or_else(|| "None".into()),
        n = msg.name
    );
    o.push_str("    fn encode(&self, buf: &mut BytesMut, version: i16) -> Result<(), EncodeError> {\n        p::encode_message(self, buf, version)\n    }\n\n");
    o.push_str("    fn compute_size(&self, version: i16) -> Result<usize, EncodeError> {\n        p::message_size(self, version)\n    }\n\n");
    o.push_str("    fn decode(buf: &mut Bytes, version: i16) -> Result<Self, DecodeError> {\n        p::decode_message(buf, version)\n    }\n}\n");
    if msg.kind == "request" {
        let key = msg.api_key.ok_or("request without apiKey")?;
        let base = msg.name.strip_suffix("Request").ok_or("request name")?;
        let resp = format!("{base}Response");
        if !by_name.contains_key(&resp) {
            return Err(format!("{}: no {resp}", msg.name));
        }
        let req_hdr = if key == 7 {
            "if version == 0 {\n            0\n        } else if Self::is_flexible(version) {\n            2\n        } else {\n            1\n        }".to_string()
        } else {
            "if Self::is_flexible(version) { 2 } else { 1 }".to_string()
        };
        let resp_hdr = if key == 18 {
            "let _ = version;\n        0".to_string()
        } else {
            "if Self::is_flexible(version) { 1 } else { 0 }".to_string()
        };
        let _ = writeln!(
            o,
            "\nimpl Request for {n} {{\n    const API_KEY: ApiKey = ApiKey::{base};\n    type Response = super::{}::{resp};\n    const ROUTING: Routing = Routing::{};\n\n    fn request_header_version(version: i16) -> i16 {{\n        {req_hdr}\n    }}\n\n    fn response_header_version(version: i16) -> i16 {{\n        {resp_hdr}\n    }}\n}}",
            snake(&resp),
            routing(key),
            n = msg.name
        );
    }
    Ok((module, o))
}
