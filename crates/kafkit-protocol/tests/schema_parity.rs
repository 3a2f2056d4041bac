//! Parity of the generated code with Kafka's schemas, read here straight from the JSON files
//! (not through the generator): every API key and version of the schemas is generated, and
//! every generated one is in the schemas.
//!
//! The schemas are Apache Kafka 4.4's (`../shared/kafka-message-schemas-4.4`, the same files as
//! the `kafka-clients` 4.4.0 jar) plus the older set (`../shared/kafka-message-schemas`, trunk of
//! October 2024) whose versions Kafka 4.0 removed (KIP-896) and kafkit keeps
//! (docs/protocol-codegen.md, "Schema sources"). So a message's generated versions are the union
//! of its versions in both sets; requests and responses are matched by API key (a renamed API
//! is one message under its 4.4 name), headers and data schemas by name. Skipped, with a note,
//! where the schema directories are absent (a packaged crate).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kafkit_protocol::{ApiKey, Message, Request, VersionRange};

/// What a schema file says about versions.
struct Entry {
    name: String,
    versions: Option<(i16, i16)>,
    unstable: bool,
}

fn versions(spec: &str) -> Option<(i16, i16)> {
    let spec = spec.trim();
    if spec == "none" {
        return None;
    }
    let n = |s: &str| s.trim().parse::<i16>().expect("version number");
    Some(match (spec.strip_suffix('+'), spec.split_once('-')) {
        (Some(min), _) => (n(min), i16::MAX),
        (None, Some((a, b))) => (n(a), n(b)),
        (None, None) => (n(spec), n(spec)),
    })
}

/// `identity -> entry` of every schema in `dir`; identity is `request:0` or `data:Name`.
fn read_set(dir: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).expect("schema directory") {
        let path = e.expect("entry").path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("schema file");
        // Comments fill whole lines in these files.
        let json: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let v: serde_json::Value =
            serde_json::from_str(&json).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let kind = v["type"].as_str().expect("type").to_string();
        let name = v["name"].as_str().expect("name").to_string();
        let id = match v["apiKey"].as_i64() {
            Some(k) => format!("{kind}:{k}"),
            None => format!("{kind}:{name}"),
        };
        let entry = Entry {
            name,
            versions: versions(v["validVersions"].as_str().expect("validVersions")),
            unstable: v["latestVersionUnstable"].as_bool().unwrap_or(false),
        };
        out.insert(id, entry);
    }
    out
}

/// The versions a message must speak and whether its latest one is unstable.
type Expected = ((i16, i16), bool);

/// `name -> what the generated code must speak`.
fn expected() -> Option<BTreeMap<String, Expected>> {
    let shared = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
    let (current, old) = (
        shared.join("kafka-message-schemas-4.4"),
        shared.join("kafka-message-schemas"),
    );
    if !current.exists() || !old.exists() {
        eprintln!("schemas not found under {}; skipped", shared.display());
        return None;
    }
    let (current, mut old) = (read_set(&current), read_set(&old));
    let mut out = BTreeMap::new();
    for (id, c) in current {
        let o = old.remove(&id);
        let union = match (o.and_then(|o| o.versions), c.versions) {
            (None, None) => continue,
            (Some(r), None) | (None, Some(r)) => r,
            (Some(a), Some(b)) => {
                assert!(
                    a.1 >= b.0 - 1,
                    "{}: versions {a:?} and {b:?} leave a gap",
                    c.name
                );
                (a.0.min(b.0), a.1.max(b.1))
            }
        };
        out.insert(c.name, (union, c.unstable));
    }
    for (_, o) in old {
        if let Some(r) = o.versions {
            out.insert(o.name, (r, o.unstable));
        }
    }
    Some(out)
}

fn range((min, max): (i16, i16)) -> VersionRange {
    VersionRange::new(min, max)
}

#[test]
fn every_schema_version_is_generated_and_nothing_else() {
    let Some(expected) = expected() else {
        return;
    };
    let mut generated = BTreeMap::new();
    macro_rules! collect {
        ($module:ident, $ty:ident) => {{
            type M = kafkit_protocol::messages::$ty;
            generated.insert(M::NAME.to_string(), M::VERSIONS);
        }};
    }
    kafkit_protocol::for_each_message!(collect);
    let schema_names: Vec<&String> = expected.keys().collect();
    let generated_names: Vec<&String> = generated.keys().collect();
    assert_eq!(
        generated_names, schema_names,
        "generated vs schema messages"
    );
    for (name, (r, _)) in &expected {
        assert_eq!(generated[name], range(*r), "{name}");
    }
}

#[test]
fn api_keys_and_stable_versions_follow_the_schemas() {
    let Some(expected) = expected() else {
        return;
    };
    let requests: BTreeMap<&str, _> = expected
        .iter()
        .filter_map(|(n, e)| Some((n.strip_suffix("Request")?, e)))
        .filter(|(n, _)| !n.is_empty())
        .collect();
    assert_eq!(ApiKey::ALL.len(), requests.len());
    for key in ApiKey::ALL {
        let ((min, max), unstable) = requests[key.name()];
        assert_eq!(key.valid_versions(), range((*min, *max)), "{key}");
        let stable = if *unstable { max - 1 } else { *max };
        assert_eq!(key.latest_stable_version(), stable, "{key}");
    }
    let mut n = 0;
    macro_rules! check {
        ($module:ident, $req:ident, $resp:ident) => {{
            type Q = kafkit_protocol::messages::$req;
            assert_eq!(Q::LATEST_STABLE_VERSION, Q::API_KEY.latest_stable_version());
            n += 1;
        }};
    }
    kafkit_protocol::for_each_request!(check);
    assert_eq!(n, ApiKey::ALL.len());
    // The one unstable version of the 4.4 schemas.
    assert_eq!(ApiKey::InitProducerId.latest_stable_version(), 5);
    assert_eq!(ApiKey::InitProducerId.valid_versions().max, 6);
}
