//! Generation of one module per message schema: the structs, their builder setters, the `Wire`
//! codec, `Arbitrary`, and the `Message` / `Request` / `Response` impls with the accessors the
//! schema supports (`throttle_time_ms`, top-level `error_code`, `timeout_ms`).

use std::collections::{BTreeMap, HashSet};

use super::schema::{Field, Range, Schema, parse_versions};
use super::tables::{HEADER, routing};
use super::writer::{Code, w};

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
        | "unsized" => format!("r#{n}"),
        _ => n,
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Ty {
    Prim(&'static str),
    /// An `int16` error-code field (`ErrorCode`, `PartitionErrorCode`...), typed `ErrorCode`.
    ErrorCode,
    Str,
    Bytes,
    Records,
    Uuid,
    Array(Box<Ty>),
    Struct(String),
}

fn parse_ty(t: &str, name: &str) -> Ty {
    if let Some(inner) = t.strip_prefix("[]") {
        return Ty::Array(Box::new(parse_ty(inner, "")));
    }
    match t {
        "int16" if name.ends_with("ErrorCode") => Ty::ErrorCode,
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
        Ty::ErrorCode => "ErrorCode".into(),
        Ty::Str => "String".into(),
        Ty::Bytes => "Bytes".into(),
        Ty::Records => "Option<Bytes>".into(),
        Ty::Uuid => "Uuid".into(),
        Ty::Array(inner) => format!("Vec<{}>", base_rust(inner)),
        Ty::Struct(s) => s.clone(),
    }
}

fn mentions(t: &Ty, what: &Ty) -> bool {
    match t {
        Ty::Array(inner) => mentions(inner, what),
        t => t == what,
    }
}

struct GenField {
    /// The Rust field name (a raw identifier for keywords).
    name: String,
    ty: Ty,
    rust: String,
    versions: Option<Range>,
    nullable: Option<Range>,
    tagged: Option<Range>,
    tag: Option<u32>,
    ignorable: bool,
    flex_override: Option<Option<Range>>,
    /// The default as a Rust expression.
    default: String,
    /// The default for the docs, `None` when it is the type's obvious empty value.
    default_doc: Option<String>,
    /// Whether `default` is what `Default::default()` gives for the Rust type.
    type_default: bool,
}

impl GenField {
    /// The name without `r#`, for error messages and setter names.
    fn bare(&self) -> &str {
        self.name.trim_start_matches("r#")
    }

    /// The name of the local that holds the field while decoding (shadows no parameter).
    fn local(&self) -> String {
        match self.name.as_str() {
            "version" | "src" | "i" | "flexible" | "rest" | "tag" | "data" | "n_tags" => {
                format!("{}_", self.name)
            }
            n => n.to_string(),
        }
    }

    /// An expression that is true when `self.<field>` differs from its default.
    fn non_default(&self) -> String {
        let x = format!("self.{}", self.name);
        match (&self.ty, self.default.as_str()) {
            (Ty::Prim("bool"), "false") => x,
            (Ty::Prim("bool"), _) => format!("!{x}"),
            (_, "None") => format!("{x}.is_some()"),
            (Ty::Str | Ty::Bytes | Ty::Array(_), d) if d.ends_with("::new()") => {
                format!("!{x}.is_empty()")
            }
            (Ty::ErrorCode, "ErrorCode::NONE") => format!("!{x}.is_ok()"),
            (Ty::Uuid, _) => format!("!{x}.is_zero()"),
            (_, d) => format!("{x} != {d}"),
        }
    }
}

struct GenStruct {
    name: String,
    fields: Vec<GenField>,
}

/// A condition on `version`, simplified when it is made so that no `if true` is written.
#[derive(Debug, Clone, PartialEq)]
enum Cond {
    Always,
    Never,
    /// An expression and its negation.
    Expr(String, String),
}

impl Cond {
    fn text(&self) -> &str {
        match self {
            Cond::Always => "true",
            Cond::Never => "false",
            Cond::Expr(e, _) => e,
        }
    }

    fn not(&self) -> Cond {
        match self {
            Cond::Always => Cond::Never,
            Cond::Never => Cond::Always,
            Cond::Expr(e, n) => Cond::Expr(n.clone(), e.clone()),
        }
    }

    fn or(&self, o: &Cond) -> Cond {
        match (self, o) {
            (Cond::Always, _) | (_, Cond::Always) => Cond::Always,
            (Cond::Never, x) | (x, Cond::Never) => x.clone(),
            (Cond::Expr(a, na), Cond::Expr(b, nb)) => {
                Cond::Expr(format!("({a}) || ({b})"), format!("({na}) && ({nb})"))
            }
        }
    }

    /// `self && runtime` as a Rust expression, `None` when it is always false.
    fn and(&self, runtime: &str) -> Option<String> {
        match self {
            Cond::Always => Some(runtime.to_string()),
            Cond::Never => None,
            Cond::Expr(e, _) => Some(format!("{e} && {runtime}")),
        }
    }
}

/// Per-schema generation state.
struct Ctx<'a> {
    msg: &'a Schema,
    valid: Range,
    flexible: Option<Range>,
    structs: Vec<GenStruct>,
    seen: HashSet<String>,
    commons: BTreeMap<String, Vec<Field>>,
}

/// What a module's code refers to, so that it imports exactly that.
#[derive(Default)]
struct Uses {
    field_codec: bool,
    uuid: bool,
    error_code: bool,
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

/// `(Rust default, doc text or None, is the type's Default)` of a field.
fn default_for(
    f: &Field,
    ty: &Ty,
    is_option: bool,
) -> Result<(String, Option<String>, bool), String> {
    let raw: Option<String> = match &f.default {
        None => None,
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(v) => Some(v.to_string()),
    };
    let wrap = |e: String| if is_option { format!("Some({e})") } else { e };
    if (raw.as_deref() == Some("null") && is_option) || *ty == Ty::Records {
        return Ok(("None".into(), Some("null".into()), true));
    }
    let int = |p: &str| -> Result<(String, i128), String> {
        let v = match &raw {
            Some(s) => parse_int(s)?,
            None => 0,
        };
        let (lo, hi): (i128, i128) = match p {
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
        Ok((lit, v))
    };
    let out = match ty {
        Ty::Prim("bool") => {
            let v = raw.as_deref().unwrap_or("false");
            if v != "true" && v != "false" {
                return Err(format!("bad bool default `{v}` for {}", f.name));
            }
            (v.to_string(), Some(v.to_string()), v == "false")
        }
        Ty::Prim("f64") => {
            let v: f64 = match &raw {
                Some(s) => s
                    .parse()
                    .map_err(|e| format!("bad float default for {}: {e}", f.name))?,
                None => 0.0,
            };
            (format!("{v:?}"), Some(format!("{v}")), v == 0.0)
        }
        Ty::Prim(p) => {
            let (lit, v) = int(p)?;
            (lit, Some(v.to_string()), v == 0)
        }
        Ty::ErrorCode => match int("i16")? {
            (_, 0) => ("ErrorCode::NONE".into(), None, true),
            (lit, v) => (format!("ErrorCode({lit})"), Some(v.to_string()), false),
        },
        Ty::Str => match raw.as_deref() {
            None | Some("") => (
                wrap("String::new()".into()),
                Some("\"\"".into()),
                !is_option,
            ),
            Some(s) => (
                wrap(format!("String::from({s:?})")),
                Some(format!("{s:?}")),
                false,
            ),
        },
        Ty::Bytes => (wrap("Bytes::new()".into()), None, !is_option),
        Ty::Records => unreachable!("handled above"),
        Ty::Uuid => ("Uuid::ZERO".into(), None, true),
        Ty::Array(inner) => (
            wrap(format!("Vec::<{}>::new()", base_rust(inner))),
            None,
            !is_option,
        ),
        Ty::Struct(s) => (wrap(format!("{s}::default()")), None, !is_option),
    };
    Ok(out)
}

impl Ctx<'_> {
    /// Whether `version` lies in `r`, simplified against the message's valid versions.
    fn cond(&self, r: Option<Range>) -> Cond {
        let Some(x) = r.and_then(|r| r.intersect(&self.valid)) else {
            return Cond::Never;
        };
        let (e, n) = if x == self.valid {
            return Cond::Always;
        } else if x.min <= self.valid.min {
            (
                format!("version <= {}", x.max),
                format!("version > {}", x.max),
            )
        } else if x.max >= self.valid.max {
            (
                format!("version >= {}", x.min),
                format!("version < {}", x.min),
            )
        } else if x.min == x.max {
            (
                format!("version == {}", x.min),
                format!("version != {}", x.min),
            )
        } else {
            let r = format!("({}..={}).contains(&version)", x.min, x.max);
            (r.clone(), format!("!{r}"))
        };
        Cond::Expr(e, n)
    }

    /// The message's flexible versions.
    fn flex(&self) -> Cond {
        self.cond(self.flexible)
    }

    fn add_struct(&mut self, name: &str, fields: &[Field]) -> Result<(), String> {
        if !self.seen.insert(name.to_string()) {
            return Ok(());
        }
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
        let ty = parse_ty(&f.ty, &f.name);
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
            } else if !self.seen.contains(&s) {
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
        let is_option = nullable.is_some()
            && !matches!(ty, Ty::Records | Ty::Prim(_) | Ty::Uuid | Ty::ErrorCode);
        let mut rust = base_rust(&ty);
        if is_option {
            rust = format!("Option<{rust}>");
        }
        let (default, default_doc, type_default) = default_for(f, &ty, is_option)?;
        Ok(GenField {
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
            type_default,
        })
    }

    /// Versions where the field is encoded as a regular (untagged) field.
    fn regular(&self, f: &GenField) -> Cond {
        if f.tag.is_some() {
            Cond::Never
        } else {
            self.cond(f.versions)
        }
    }

    /// The versions where the field is a tagged field.
    fn tagged_range(f: &GenField) -> Option<Range> {
        match (f.tag, f.tagged, f.versions) {
            (Some(_), Some(t), Some(v)) => t.intersect(&v),
            _ => None,
        }
    }

    /// Versions where the field is encoded as a tagged field.
    fn tagged(&self, f: &GenField) -> Cond {
        self.cond(Self::tagged_range(f))
    }

    /// [`Ctx::tagged`] inside the tagged-field section, which only flexible versions have:
    /// `Always` when the field is tagged in every flexible version.
    fn tagged_in_section(&self, f: &GenField) -> Cond {
        let flex = self.flexible.and_then(|r| r.intersect(&self.valid));
        let tagged = Self::tagged_range(f).and_then(|r| r.intersect(&self.valid));
        match (flex, tagged) {
            (Some(fl), Some(t)) if t.min <= fl.min && t.max >= fl.max => Cond::Always,
            _ => self.tagged(f),
        }
    }

    /// Versions where the field is sent at all.
    fn present(&self, f: &GenField) -> Cond {
        self.regular(f).or(&self.tagged(f))
    }

    /// Whether the field uses the compact encoding, as an expression: the field's own
    /// `flexibleVersions` when it has them, else the message's (`flexible`).
    fn field_flex(&self, f: &GenField) -> String {
        match &f.flex_override {
            Some(r) => self.cond(*r).text().to_string(),
            None => match self.flex() {
                Cond::Expr(..) => "flexible".into(),
                c => c.text().to_string(),
            },
        }
    }

    /// The codec context of field `f` (`Self::ctx(..)`), compact as `flex`.
    fn ctx(&self, f: &GenField, flex: &str) -> String {
        format!(
            "Self::ctx(version, {flex}, {}, \"{}\")",
            self.cond(f.nullable).text(),
            f.bare()
        )
    }

    /// The known tagged fields that some valid version carries, in tag order.
    fn tagged_fields<'s>(&self, s: &'s GenStruct) -> Vec<&'s GenField> {
        let mut v: Vec<&GenField> = s
            .fields
            .iter()
            .filter(|f| self.tagged(f) != Cond::Never)
            .collect();
        v.sort_by_key(|f| f.tag);
        v
    }
}

/// The compact field doc: versions, nullability, default, `ignorable`, encoding override.
fn field_doc(c: &Ctx, f: &GenField) -> String {
    let mut parts = Vec::new();
    match (&f.tag, Ctx::tagged_range(f), f.versions) {
        (Some(tag), Some(t), _) => parts.push(format!("tag {tag}, v{}", t.describe())),
        (None, _, Some(r)) if c.regular(f) != Cond::Never => {
            parts.push(format!("v{}", r.describe()))
        }
        _ => parts.push("in no version".into()),
    }
    if let Some(n) = f.nullable {
        parts.push(format!("nullable v{}", n.describe()));
    }
    // The default, when it is not the type's empty value or the field is nullable (where a
    // reader cannot tell null from empty otherwise).
    if let Some(d) = &f.default_doc
        && (!f.type_default || f.nullable.is_some())
    {
        parts.push(format!("default {d}"));
    }
    if f.ignorable {
        parts.push("ignorable".into());
    }
    match &f.flex_override {
        None => {}
        Some(None) => parts.push("never compact".into()),
        Some(Some(r)) => parts.push(format!("compact v{}", r.describe())),
    }
    let mut s = parts.join("; ");
    s.push('.');
    s
}

/// `if cond { body }`, or `body` alone when `cond` always holds, or nothing.
fn when(o: &mut Code, cond: &Cond, body: &str) {
    match cond {
        Cond::Never => {}
        Cond::Always => o.line(body),
        Cond::Expr(e, _) => {
            o.open(&format!("if {e} {{"));
            o.line(body);
            o.close("}");
        }
    }
}

fn gen_decl(c: &Ctx, s: &GenStruct, top: bool, o: &mut Code) {
    let nm = &s.name;
    let has_tags = c.flexible.is_some();
    if top {
        let kind = match c.msg.kind.as_str() {
            "request" => "Request",
            "response" => "Response",
            "header" => "Header",
            _ => "Data",
        };
        let key = c
            .msg
            .api_key
            .map(|k| format!(" (API key {k})"))
            .unwrap_or_default();
        o.doc(&format!(
            "{kind} message `{nm}`{key}.\n\nValid versions: {}. Flexible (compact) versions: {}.",
            c.valid.describe(),
            c.flexible
                .map(|r| r.describe())
                .unwrap_or_else(|| "none".into())
        ));
    } else {
        o.doc(&format!(
            "Struct `{nm}` of [`{}`]; shares its versions.",
            c.msg.name
        ));
    }
    let derivable = s.fields.iter().all(|f| f.type_default);
    let derive_default = if derivable { ", Default" } else { "" };
    w!(o, "#[derive(Debug, Clone, PartialEq{derive_default})]");
    o.line("#[non_exhaustive]");
    o.open(&format!("pub struct {nm} {{"));
    for f in &s.fields {
        o.doc(&field_doc(c, f));
        w!(o, "pub {}: {},", f.name, f.rust);
    }
    if has_tags {
        o.doc("Tagged fields this library does not know, kept to be written back (KIP-482).");
        o.line("pub unknown_tagged_fields: TaggedFields,");
    }
    o.close("}");
    o.blank();

    if !derivable {
        o.open(&format!("impl Default for {nm} {{"));
        o.open("fn default() -> Self {");
        o.open("Self {");
        for f in &s.fields {
            w!(o, "{}: {},", f.name, f.default);
        }
        if has_tags {
            o.line("unknown_tagged_fields: TaggedFields::new(),");
        }
        o.close("}");
        o.close("}");
        o.close("}");
        o.blank();
    }

    // Builder setters.
    o.open(&format!("impl {nm} {{"));
    let mut setter = |name: &str, bare: &str, ty: &str| {
        o.doc(&format!("Sets `{bare}`."));
        o.open(&format!(
            "pub fn with_{bare}(mut self, value: {ty}) -> Self {{"
        ));
        w!(o, "self.{name} = value;");
        o.line("self");
        o.close("}");
    };
    for f in &s.fields {
        setter(&f.name, f.bare(), &f.rust);
    }
    if has_tags {
        setter(
            "unknown_tagged_fields",
            "unknown_tagged_fields",
            "TaggedFields",
        );
    }
    o.close("}");
    o.blank();
}

/// The checks that a non-ignorable field holds its default at the versions without it.
fn absent_checks(c: &Ctx, f: &GenField, o: &mut Code) {
    if f.ignorable {
        return;
    }
    if let Some(cond) = c.present(f).not().and(&f.non_default()) {
        o.open(&format!("if {cond} {{"));
        w!(
            o,
            "return Err(Self::not_supported(\"{}\", version));",
            f.bare()
        );
        o.close("}");
    }
}

/// Writes the tagged-field section `body` where the message has one: nowhere, always, or in
/// flexible versions only.
fn tag_section(o: &mut Code, flex: &Cond, body: impl Fn(&mut Code)) {
    match flex {
        Cond::Never => {}
        Cond::Always => body(o),
        Cond::Expr(..) => {
            o.open("if flexible {");
            body(o);
            o.close("}");
        }
    }
}

/// The parameter name for `version` in `write` and `size`: `_version` when neither a field nor
/// the flexible versions need it.
fn encode_version_param(c: &Ctx, s: &GenStruct) -> &'static str {
    let uses = matches!(c.flex(), Cond::Expr(..))
        || s.fields
            .iter()
            .any(|f| c.present(f) != Cond::Never || !f.ignorable);
    if uses { "version" } else { "_version" }
}

/// `Wire::write`: the absent-field checks, the regular fields, then the tagged fields.
fn gen_write(c: &Ctx, s: &GenStruct, uses: &mut Uses, o: &mut Code) {
    let flex = c.flex();
    let tagged = c.tagged_fields(s);
    let encodes = s.fields.iter().any(|f| c.regular(f) != Cond::Never);
    let buf = if encodes || flex != Cond::Never {
        "buf"
    } else {
        "_buf"
    };
    o.open(&format!(
        "fn write(&self, {buf}: &mut BytesMut, {}: i16) -> Result<(), EncodeError> {{",
        encode_version_param(c, s)
    ));
    if let Cond::Expr(e, _) = &flex {
        w!(o, "let flexible = {e};");
    }
    for f in &s.fields {
        absent_checks(c, f, o);
        let reg = c.regular(f);
        if reg != Cond::Never {
            uses.field_codec = true;
            let call = format!(
                "FieldCodec::write(&self.{}, buf, {})?;",
                f.name,
                c.ctx(f, &c.field_flex(f))
            );
            when(o, &reg, &call);
        }
    }
    tag_section(o, &flex, |o| {
        if tagged.is_empty() {
            o.line("p::write_unknown_tagged(buf, &self.unknown_tagged_fields);");
            return;
        }
        let mut count = vec!["self.unknown_tagged_fields.len()".to_string()];
        for (k, f) in tagged.iter().enumerate() {
            let cond = c
                .tagged_in_section(f)
                .and(&f.non_default())
                .unwrap_or_default();
            w!(o, "let t{k} = {cond};");
            count.push(format!("usize::from(t{k})"));
        }
        w!(o, "let n = {};", count.join(" + "));
        o.line("p::write_uvarint(buf, n as u32);");
        o.line("let mut unknown = self.unknown_tagged_fields.iter().peekable();");
        for (k, f) in tagged.iter().enumerate() {
            let tag = f.tag.unwrap_or_default();
            o.open(&format!("if t{k} {{"));
            w!(o, "p::write_unknown_below(buf, &mut unknown, {tag});");
            w!(
                o,
                "p::write_tagged(buf, {tag}, &self.{}, {})?;",
                f.name,
                c.ctx(f, "true")
            );
            o.close("}");
        }
        o.line("p::write_unknown_rest(buf, &mut unknown);");
    });
    o.line("Ok(())");
    o.close("}");
    o.blank();
}

/// `Wire::size`: the same checks and conditions as [`gen_write`], counting instead of writing.
fn gen_size(c: &Ctx, s: &GenStruct, o: &mut Code) {
    let flex = c.flex();
    let tagged = c.tagged_fields(s);
    let sized = flex != Cond::Never || s.fields.iter().any(|f| c.regular(f) != Cond::Never);
    o.open(&format!(
        "fn size(&self, {}: i16) -> Result<usize, EncodeError> {{",
        encode_version_param(c, s)
    ));
    if let Cond::Expr(e, _) = &flex {
        w!(o, "let flexible = {e};");
    }
    if sized {
        o.line("let mut n = 0usize;");
    }
    for f in &s.fields {
        absent_checks(c, f, o);
        let reg = c.regular(f);
        if reg != Cond::Never {
            let call = format!(
                "n += FieldCodec::size(&self.{}, {})?;",
                f.name,
                c.ctx(f, &c.field_flex(f))
            );
            when(o, &reg, &call);
        }
    }
    tag_section(o, &flex, |o| {
        if tagged.is_empty() {
            o.line("n += p::unknown_tagged_section_size(&self.unknown_tagged_fields);");
            return;
        }
        o.line("let mut count = self.unknown_tagged_fields.len();");
        o.line("let mut tagged = p::unknown_tagged_size(&self.unknown_tagged_fields);");
        for f in &tagged {
            let cond = c
                .tagged_in_section(f)
                .and(&f.non_default())
                .unwrap_or_default();
            o.open(&format!("if {cond} {{"));
            o.line("count += 1;");
            w!(
                o,
                "tagged += p::tagged_size({}, &self.{}, {})?;",
                f.tag.unwrap_or_default(),
                f.name,
                c.ctx(f, "true")
            );
            o.close("}");
        }
        o.line("n += p::uvarint_size(count as u32) + tagged;");
    });
    o.line(if sized { "Ok(n)" } else { "Ok(0)" });
    o.close("}");
    o.blank();
}

/// `Wire::read`: each field into a local, the tagged-field section, then the struct.
fn gen_read(c: &Ctx, s: &GenStruct, o: &mut Code) {
    let flex = c.flex();
    let tagged = c.tagged_fields(s);
    let reads = s.fields.iter().any(|f| c.regular(f) != Cond::Never);
    let uses_src = reads || flex != Cond::Never;
    let uses_version = reads || !tagged.is_empty() || matches!(flex, Cond::Expr(..));
    o.open(&format!(
        "fn read<'a>({}: &Bytes, i: &'a [u8], {}: i16) -> PResult<'a, Self> {{",
        if uses_src { "src" } else { "_src" },
        if uses_version { "version" } else { "_version" },
    ));
    if let Cond::Expr(e, _) = &flex {
        w!(o, "let flexible = {e};");
    }
    for f in &s.fields {
        let reg = c.regular(f);
        let local = f.local();
        let call = format!("FieldCodec::read(src, i, {})?", c.ctx(f, &c.field_flex(f)));
        match &reg {
            Cond::Never if c.tagged(f) != Cond::Never => {
                w!(o, "let mut {local} = {};", f.default);
            }
            Cond::Never => {}
            Cond::Always => w!(o, "let (i, {local}) = {call};"),
            Cond::Expr(e, _) => {
                o.open(&format!("let (i, {local}) = if {e} {{"));
                o.line(&call);
                o.reopen("} else {");
                w!(o, "(i, {})", f.default);
                o.close("};");
            }
        }
    }
    let section = |o: &mut Code| {
        if tagged.is_empty() {
            o.line("p::read_unknown_tagged(src, i, &mut unknown_tagged_fields)?.0");
            return;
        }
        o.line("let (mut i, n_tags) = p::read_uvarint(i)?;");
        o.open("for _ in 0..n_tags {");
        o.line("let (rest, (tag, data)) = p::read_tag(i)?;");
        o.line("i = rest;");
        o.open("match tag {");
        for f in &tagged {
            let guard = match c.tagged_in_section(f) {
                Cond::Expr(e, _) => format!(" if {e}"),
                _ => String::new(),
            };
            w!(
                o,
                "{}{guard} => {} = p::read_tagged_value(src, data, {})?,",
                f.tag.unwrap_or_default(),
                f.local(),
                c.ctx(f, "true")
            );
        }
        o.open("_ => {");
        o.line("unknown_tagged_fields.insert(tag, src.slice_ref(data));");
        o.close("}");
        o.close("}");
        o.close("}");
        o.line("i");
    };
    match &flex {
        Cond::Never => {}
        Cond::Always if tagged.is_empty() => {
            o.line("let mut unknown_tagged_fields = TaggedFields::new();");
            o.line("let i = p::read_unknown_tagged(src, i, &mut unknown_tagged_fields)?.0;");
        }
        Cond::Always => {
            o.line("let mut unknown_tagged_fields = TaggedFields::new();");
            o.open("let i = {");
            section(o);
            o.close("};");
        }
        Cond::Expr(..) => {
            o.line("let mut unknown_tagged_fields = TaggedFields::new();");
            o.open("let i = if flexible {");
            section(o);
            o.reopen("} else {");
            o.line("i");
            o.close("};");
        }
    }
    o.open("let this = Self {");
    for f in &s.fields {
        let local = f.local();
        if c.present(f) == Cond::Never {
            w!(o, "{}: {},", f.name, f.default);
        } else if local == f.name {
            w!(o, "{local},");
        } else {
            w!(o, "{}: {local},", f.name);
        }
    }
    if flex != Cond::Never {
        o.line("unknown_tagged_fields,");
    }
    o.close("};");
    o.line("Ok((i, this))");
    o.close("}");
}

fn gen_arbitrary(c: &Ctx, s: &GenStruct, o: &mut Code) {
    let nm = &s.name;
    let flex = c.flex();
    let any_field = s.fields.iter().any(|f| c.present(f) != Cond::Never);
    let uses_g = any_field || flex != Cond::Never;
    let uses_version = any_field || matches!(flex, Cond::Expr(..));
    o.line("#[cfg(feature = \"arbitrary\")]");
    o.open(&format!("impl crate::arbitrary::Arbitrary for {nm} {{"));
    o.open(&format!(
        "fn arbitrary({}: &mut crate::arbitrary::Gen, {}: i16) -> Self {{",
        if uses_g { "g" } else { "_g" },
        if uses_version { "version" } else { "_version" },
    ));
    o.open("Self {");
    for f in &s.fields {
        let call = format!("g.field({}, version)", c.cond(f.nullable).text());
        match c.present(f) {
            Cond::Never => w!(o, "{}: {},", f.name, f.default),
            Cond::Always => w!(o, "{}: {call},", f.name),
            Cond::Expr(e, _) => w!(
                o,
                "{}: if {e} {{ {call} }} else {{ {} }},",
                f.name,
                f.default
            ),
        }
    }
    match &flex {
        Cond::Never => {}
        Cond::Always => o.line("unknown_tagged_fields: g.unknown_tagged_fields(),"),
        Cond::Expr(e, _) => w!(
            o,
            "unknown_tagged_fields: if {e} {{ g.unknown_tagged_fields() }} else {{ TaggedFields::new() }},"
        ),
    }
    o.close("}");
    o.close("}");
    o.close("}");
    o.blank();
}

fn gen_struct(c: &Ctx, s: &GenStruct, top: bool, uses: &mut Uses, o: &mut Code) {
    for f in &s.fields {
        uses.uuid |= mentions(&f.ty, &Ty::Uuid);
        uses.error_code |= mentions(&f.ty, &Ty::ErrorCode);
    }
    gen_decl(c, s, top, o);
    o.open(&format!("impl Wire for {} {{", s.name));
    w!(o, "const STRUCT_NAME: &'static str = \"{}\";", s.name);
    o.blank();
    gen_write(c, s, uses, o);
    gen_size(c, s, o);
    gen_read(c, s, o);
    o.close("}");
    o.blank();
    gen_arbitrary(c, s, o);
}

/// A top-level `int32` / `ErrorCode` field with this snake-case name, if the message has one.
fn top_field<'s>(top: &'s GenStruct, name: &str, ty: &Ty) -> Option<&'s GenField> {
    top.fields.iter().find(|f| f.name == name && f.ty == *ty)
}

/// Generates the module text for one schema; returns `(module name, text)`.
pub fn gen_message(
    msg: &Schema,
    by_name: &std::collections::HashMap<String, Schema>,
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
        seen: HashSet::new(),
        commons,
    };
    c.add_struct(&msg.name, &msg.fields)
        .map_err(|e| format!("{}: {e}", msg.name))?;
    let module = snake(&msg.name);
    let structs = std::mem::take(&mut c.structs);
    let mut uses = Uses::default();
    let mut body = Code::new();
    for (n, s) in structs.iter().enumerate() {
        gen_struct(&c, s, n == 0, &mut uses, &mut body);
    }
    let top = &structs[0];
    gen_message_impl(&c, &mut body);
    let is_request = msg.kind == "request";
    let is_response = msg.kind == "response";
    if is_request {
        gen_request_impl(&c, top, by_name, &mut body)?;
    }
    if is_response {
        let throttle = top_field(top, "throttle_time_ms", &Ty::Prim("i32"));
        let error = top_field(top, "error_code", &Ty::ErrorCode);
        uses.error_code |= error.is_some();
        let head = format!("impl Response for {} {{", msg.name);
        body.blank();
        if throttle.is_none() && error.is_none() {
            body.line(&format!("{head}}}"));
        } else {
            body.open(&head);
            if throttle.is_some() {
                body.open("fn throttle_time_ms(&self) -> Option<i32> {");
                body.line("Some(self.throttle_time_ms)");
                body.close("}");
            }
            if error.is_some() {
                body.open("fn error_code(&self) -> Option<ErrorCode> {");
                body.line("Some(self.error_code)");
                body.close("}");
            }
            body.close("}");
        }
    }

    let mut o = Code::new();
    o.line(HEADER.trim_end());
    o.blank();
    o.module_doc(&format!(
        "`{}`: the message type and its nested structs.",
        msg.name
    ));
    o.blank();
    o.line("use bytes::{Bytes, BytesMut};");
    o.blank();
    o.line("use crate::error::{DecodeError, EncodeError};");
    if uses.error_code {
        o.line("use crate::generated::error_code::ErrorCode;");
    }
    let mut prims = vec!["self as p"];
    if uses.field_codec {
        prims.push("FieldCodec");
    }
    prims.push("PResult");
    if c.flexible.is_some() {
        prims.push("TaggedFields");
    }
    if uses.uuid {
        prims.push("Uuid");
    }
    prims.push("Wire");
    w!(o, "use crate::primitives::{{{}}};", prims.join(", "));
    let mut proto = vec![];
    if is_request {
        proto.push("ApiKey");
    }
    proto.push("Message");
    if is_request {
        proto.extend(["Request", "Routing"]);
    }
    if is_response {
        proto.push("Response");
    }
    proto.push("VersionRange");
    w!(o, "use crate::protocol::{{{}}};", proto.join(", "));
    o.blank();
    let mut text = o.finish();
    text.push_str(&body.finish());
    Ok((module, text))
}

fn gen_message_impl(c: &Ctx, o: &mut Code) {
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
    o.open(&format!("impl Message for {} {{", c.msg.name));
    w!(o, "const NAME: &'static str = \"{}\";", c.msg.name);
    w!(o, "const VERSIONS: VersionRange = {};", range(c.valid));
    w!(
        o,
        "const FLEXIBLE_VERSIONS: Option<VersionRange> = {};",
        c.flexible
            .map(|r| format!("Some({})", range(r)))
            .unwrap_or_else(|| "None".into())
    );
    o.blank();
    o.open("fn encode(&self, buf: &mut BytesMut, version: i16) -> Result<(), EncodeError> {");
    o.line("p::encode_message(self, buf, version)");
    o.close("}");
    o.blank();
    o.open("fn compute_size(&self, version: i16) -> Result<usize, EncodeError> {");
    o.line("p::message_size(self, version)");
    o.close("}");
    o.blank();
    o.open("fn decode(buf: &mut Bytes, version: i16) -> Result<Self, DecodeError> {");
    o.line("p::decode_message(buf, version)");
    o.close("}");
    o.close("}");
}

fn gen_request_impl(
    c: &Ctx,
    top: &GenStruct,
    by_name: &std::collections::HashMap<String, Schema>,
    o: &mut Code,
) -> Result<(), String> {
    let msg = c.msg;
    let key = msg.api_key.ok_or("request without apiKey")?;
    let base = msg.name.strip_suffix("Request").ok_or("request name")?;
    let resp = format!("{base}Response");
    if !by_name.contains_key(&resp) {
        return Err(format!("{}: no {resp}", msg.name));
    }
    o.blank();
    o.open(&format!("impl Request for {} {{", msg.name));
    w!(o, "const API_KEY: ApiKey = ApiKey::{base};");
    w!(o, "type Response = super::{}::{resp};", snake(&resp));
    w!(o, "const ROUTING: Routing = Routing::{};", routing(key));
    // A version still under development (`latestVersionUnstable`) is generated but not stable.
    let stable = if msg.latest_version_unstable {
        c.valid.max - 1
    } else {
        c.valid.max
    };
    w!(o, "const LATEST_STABLE_VERSION: i16 = {stable};");
    o.blank();
    o.open("fn request_header_version(version: i16) -> i16 {");
    if key == 7 {
        // ControlledShutdown v0 uses request header v0 (no client id).
        o.line("if version == 0 { 0 } else if Self::is_flexible(version) { 2 } else { 1 }");
    } else {
        o.line("if Self::is_flexible(version) { 2 } else { 1 }");
    }
    o.close("}");
    o.blank();
    if key == 18 {
        // ApiVersions responses always use header v0 (KIP-511).
        o.open("fn response_header_version(_version: i16) -> i16 {");
        o.line("0");
    } else {
        o.open("fn response_header_version(version: i16) -> i16 {");
        o.line("if Self::is_flexible(version) { 1 } else { 0 }");
    }
    o.close("}");
    if top_field(top, "timeout_ms", &Ty::Prim("i32")).is_some() {
        o.blank();
        o.open("fn timeout_ms(&self) -> Option<i32> {");
        o.line("Some(self.timeout_ms)");
        o.close("}");
    }
    o.close("}");
    Ok(())
}
