//! `cargo xtask codegen`: generates `crates/kafkit-protocol/src/generated/` from Kafka's JSON
//! message schemas and `error-codes.tsv`.

mod merge;
mod message;
mod schema;
mod tables;
mod writer;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use schema::Schema;
use writer::{Code, w};

/// Options of the `codegen` subcommand.
pub struct Options {
    /// Directory holding the current `*.json` schemas (Apache Kafka 4.4) and `error-codes.tsv`.
    pub schemas: PathBuf,
    /// Directory holding the older schemas (trunk of October 2024) that still carry the versions
    /// Kafka 4.0 removed (KIP-896); `None` generates from `schemas` alone.
    pub old_schemas: Option<PathBuf>,
    /// Compare with the committed files instead of writing.
    pub check: bool,
}

/// The workspace root (parent of the xtask crate).
pub fn repo_root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(Path::to_path_buf).unwrap_or(here)
}

/// Runs the generator. Errors are human-readable messages.
pub fn run(opts: &Options) -> Result<(), String> {
    let files = generate(&opts.schemas, opts.old_schemas.as_deref())?;
    let out_dir = repo_root().join("crates/kafkit-protocol/src/generated");
    let tmp = std::env::temp_dir().join(format!("kafka-codegen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| format!("create {}: {e}", tmp.display()))?;
    for (name, text) in &files {
        std::fs::write(tmp.join(name), text).map_err(|e| format!("write {name}: {e}"))?;
    }
    rustfmt(&tmp, files.keys())?;
    let result = if opts.check {
        check(&tmp, &out_dir, &files)
    } else {
        install(&tmp, &out_dir, &files)
    };
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

fn rustfmt<'a>(dir: &Path, names: impl Iterator<Item = &'a String>) -> Result<(), String> {
    let names: Vec<&String> = names.collect();
    for chunk in names.chunks(64) {
        let status = Command::new("rustfmt")
            .args(["--edition", "2024"])
            .args(chunk.iter().map(|n| dir.join(n.as_str())))
            .status()
            .map_err(|e| format!("running rustfmt: {e}"))?;
        if !status.success() {
            return Err(format!("rustfmt failed ({status})"));
        }
    }
    Ok(())
}

fn check(tmp: &Path, out_dir: &Path, files: &BTreeMap<String, String>) -> Result<(), String> {
    let mut differing = Vec::new();
    for name in files.keys() {
        let new = std::fs::read(tmp.join(name)).map_err(|e| e.to_string())?;
        match std::fs::read(out_dir.join(name)) {
            Ok(old) if old == new => {}
            _ => differing.push(name.clone()),
        }
    }
    if let Ok(rd) = std::fs::read_dir(out_dir) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.ends_with(".rs") && !files.contains_key(&n) {
                differing.push(format!("{n} (stale, not generated)"));
            }
        }
    }
    if differing.is_empty() {
        println!("codegen: {} files up to date", files.len());
        Ok(())
    } else {
        Err(format!(
            "generated code is out of date; run `cargo xtask codegen`. Differing files:\n  {}",
            differing.join("\n  ")
        ))
    }
}

fn install(tmp: &Path, out_dir: &Path, files: &BTreeMap<String, String>) -> Result<(), String> {
    std::fs::create_dir_all(out_dir).map_err(|e| e.to_string())?;
    if let Ok(rd) = std::fs::read_dir(out_dir) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.ends_with(".rs") && !files.contains_key(&n) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let mut lines = 0;
    for name in files.keys() {
        let text = std::fs::read(tmp.join(name)).map_err(|e| e.to_string())?;
        lines += text.iter().filter(|b| **b == b'\n').count();
        let dst = out_dir.join(name);
        if std::fs::read(&dst).ok().as_deref() != Some(&text[..]) {
            std::fs::write(&dst, &text).map_err(|e| format!("write {}: {e}", dst.display()))?;
        }
    }
    println!(
        "codegen: wrote {} files ({lines} lines) to {}",
        files.len(),
        out_dir.display()
    );
    Ok(())
}

/// Reads every `*.json` schema of `dir`, sorted by file name.
fn load_schemas(dir: &Path) -> Result<Vec<Schema>, String> {
    let mut schemas = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    entries.sort();
    for p in &entries {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let s: Schema = schema::parse_schema(&text).map_err(|e| format!("{}: {e}", p.display()))?;
        schemas.push(s);
    }
    Ok(schemas)
}

/// The schemas to generate from: `dir`'s, merged with `old`'s older versions when given.
/// Schemas that speak no version (Kafka removed the API and `old` does not have it) are left out.
pub fn load_merged(dir: &Path, old: Option<&Path>) -> Result<Vec<Schema>, String> {
    let current = load_schemas(dir)?;
    let merged = match old {
        Some(old) => merge::merge_sets(&current, &load_schemas(old)?)?.0,
        None => current,
    };
    let mut out = Vec::new();
    for s in merged {
        if schema::parse_versions(&s.valid_versions)?.is_some() {
            out.push(s);
        }
    }
    Ok(out)
}

/// Produces every generated file: `name -> unformatted text`. `dir` holds the current schemas
/// and `error-codes.tsv`; `old` the older schemas whose dropped versions are kept.
pub fn generate(dir: &Path, old: Option<&Path>) -> Result<BTreeMap<String, String>, String> {
    let schemas = load_merged(dir, old)?;
    let by_name: HashMap<String, Schema> = schemas
        .iter()
        .map(|s| (s.name.clone(), s.clone()))
        .collect();
    let tsv_path = dir.join("error-codes.tsv");
    let tsv =
        std::fs::read_to_string(&tsv_path).map_err(|e| format!("{}: {e}", tsv_path.display()))?;
    let errors = tables::parse_error_codes(&tsv)?;
    let keys = tables::api_keys(&schemas);

    let mut files = BTreeMap::new();
    files.insert(
        "api_key.rs".to_string(),
        tables::gen_api_key(&keys, &by_name)?,
    );
    files.insert("error_code.rs".to_string(), tables::gen_error_code(&errors));

    let mut modules = Vec::new();
    for s in &schemas {
        let (module, text) = message::gen_message(s, &by_name)?;
        files.insert(format!("{module}.rs"), text);
        modules.push((module, s.name.clone(), s.kind.clone()));
    }
    modules.sort();

    let mut m = Code::new();
    m.line(tables::HEADER);
    m.module_doc("Every message type generated from the Kafka schemas, one module per schema, plus\n[`ApiKey`](api_key::ApiKey) and [`ErrorCode`](error_code::ErrorCode). Top-level message types\nare re-exported here; nested structs live in their message's module\n(e.g. `produce_request::TopicProduceData`).");
    m.blank();
    m.line("pub mod api_key;");
    m.line("pub mod error_code;");
    for (module, _, _) in &modules {
        w!(m, "pub mod {module};");
    }
    m.blank();
    for (module, name, _) in &modules {
        w!(m, "pub use {module}::{name};");
    }
    m.blank();
    m.doc("Calls `$callback!(module_name, TypeName)` once for every generated top-level message\n(requests, responses, headers and data schemas); used by tests to cover every message.");
    m.line("#[macro_export]");
    m.open("macro_rules! for_each_message {");
    m.open("($callback:ident) => {");
    for (module, name, _) in &modules {
        w!(m, "$callback!({module}, {name});");
    }
    m.close("};");
    m.close("}");
    m.blank();
    m.doc(
        "Calls `$callback!(module_name, RequestType, ResponseType)` once for every request type.",
    );
    m.line("#[macro_export]");
    m.open("macro_rules! for_each_request {");
    m.open("($callback:ident) => {");
    for (module, name, kind) in &modules {
        if kind == "request" {
            let base = name.trim_end_matches("Request");
            w!(m, "$callback!({module}, {name}, {base}Response);");
        }
    }
    m.close("};");
    m.close("}");
    files.insert("mod.rs".to_string(), m.finish());
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::message::snake;
    use super::schema::{Range, parse_schema, parse_versions, strip_comments};

    #[test]
    fn snake_case_names() {
        assert_eq!(snake("ClientId"), "client_id");
        assert_eq!(snake("ISRNodes"), "isr_nodes");
        assert_eq!(snake("ProducerIdStart"), "producer_id_start");
        assert_eq!(snake("TopicId"), "topic_id");
        assert_eq!(snake("ZkVersion"), "zk_version");
        assert_eq!(snake("Voter2Id"), "voter2_id");
    }

    #[test]
    fn version_specs() {
        assert_eq!(
            parse_versions("0+"),
            Ok(Some(Range {
                min: 0,
                max: i16::MAX
            }))
        );
        assert_eq!(parse_versions("1-3"), Ok(Some(Range { min: 1, max: 3 })));
        assert_eq!(parse_versions("2"), Ok(Some(Range { min: 2, max: 2 })));
        assert_eq!(parse_versions("none"), Ok(None));
        assert!(parse_versions("x").is_err());
    }

    #[test]
    fn comments_are_stripped_outside_strings() {
        let text = "{ // a comment\n  \"name\": \"http://x\", // another\n  \"type\": \"data\",\n  \"validVersions\": \"0\" }";
        let s = strip_comments(text);
        assert!(s.contains("http://x"));
        assert!(!s.contains("comment"));
        let schema = parse_schema(text).unwrap();
        assert_eq!(schema.name, "http://x");
    }

    #[test]
    fn tags_may_be_strings() {
        let text = r#"{"type": "data", "name": "X", "validVersions": "0", "flexibleVersions": "0+",
            "fields": [{"name": "A", "type": "int32", "versions": "0+", "taggedVersions": "0+", "tag": "3"}]}"#;
        let s = parse_schema(text).unwrap();
        assert_eq!(s.fields[0].tag, Some(3));
    }

    #[test]
    fn committed_schemas_generate() {
        let shared = super::repo_root().join("../shared");
        let (dir, old) = (
            shared.join("kafka-message-schemas-4.4"),
            shared.join("kafka-message-schemas"),
        );
        if !dir.exists() || !old.exists() {
            eprintln!("schemas not found under {}; skipped", shared.display());
            return;
        }
        let files = super::generate(&dir, Some(&old)).unwrap();
        // 95 pairs (API keys 0-94) + 2 headers + 11 data schemas, api_key, error_code, mod.
        assert_eq!(files.len(), 190 + 2 + 11 + 3);
        assert!(files["api_key.rs"].contains("Produce = 0,"));
        assert!(files["error_code.rs"].contains("NOT_LEADER_OR_FOLLOWER"));
        // The generator writes only what is used: no filler bindings, no lint allowances, no
        // constant conditions.
        for (name, text) in &files {
            for filler in [
                "let _ =", "#![allow", "#[allow", "if true", "if false", "&& true",
            ] {
                assert!(!text.contains(filler), "{name} contains `{filler}`");
            }
        }
        let hb = &files["heartbeat_response.rs"];
        assert!(hb.contains("pub error_code: ErrorCode,"));
        assert!(hb.contains("fn with_throttle_time_ms(mut self, value: i32) -> Self {"));
        assert!(hb.contains("impl Response for HeartbeatResponse {"));
    }
}
