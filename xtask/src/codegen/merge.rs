//! Merging two schema sets: the current one (Apache Kafka 4.4) and an older one that still holds
//! the versions Kafka 4.0 removed (KIP-896).
//!
//! For every message the merged schema speaks the versions of both: those the current file has,
//! as that file says, and the older versions that only the old file still has, as the old file
//! says. Fields are matched by name within each struct; a field only the old file has keeps its
//! place relative to its old neighbours, so the wire order at every version is the one of the
//! file that defines that version. `wire_fields` flattens a schema at one version; the tests
//! compare the merge against both inputs with it.

use std::collections::HashMap;

use super::schema::{Field, Range, Schema, StructDef, parse_versions};

/// Which file a message's versions come from after the merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// Schema name (after the merge: the current name, e.g. `ListConfigResourcesRequest`).
    pub name: String,
    /// Versions taken from the old file (below the current file's lowest version).
    pub old: Option<Range>,
    /// Versions taken from the current file.
    pub current: Option<Range>,
}

/// The identity of a schema across the two sets: requests and responses by API key (so a
/// renamed API, ListClientMetricsResources -> ListConfigResources, is one message), headers and
/// data schemas by name.
fn identity(s: &Schema) -> String {
    match (s.kind.as_str(), s.api_key) {
        ("request" | "response", Some(k)) => format!("{}:{k}", s.kind),
        _ => format!("{}:{}", s.kind, s.name),
    }
}

/// Merges `old` into `current`. Schemas only the old set has are dropped unless no current schema
/// shares their identity (none today). Returns the merged schemas (sorted by name) and where
/// each message's versions came from.
pub fn merge_sets(
    current: &[Schema],
    old: &[Schema],
) -> Result<(Vec<Schema>, Vec<Provenance>), String> {
    let old_by_id: HashMap<String, &Schema> = old.iter().map(|s| (identity(s), s)).collect();
    let mut merged = Vec::new();
    let mut provenance = Vec::new();
    for s in current {
        let (m, p) = match old_by_id.get(&identity(s)) {
            Some(o) => merge(o, s).map_err(|e| format!("{}: {e}", s.name))?,
            None => (
                s.clone(),
                Provenance {
                    name: s.name.clone(),
                    old: None,
                    current: parse_versions(&s.valid_versions)?,
                },
            ),
        };
        merged.push(m);
        provenance.push(p);
    }
    let current_ids: std::collections::HashSet<String> = current.iter().map(identity).collect();
    for o in old {
        if !current_ids.contains(&identity(o)) {
            merged.push(o.clone());
            provenance.push(Provenance {
                name: o.name.clone(),
                old: parse_versions(&o.valid_versions)?,
                current: None,
            });
        }
    }
    merged.sort_by(|a, b| a.name.cmp(&b.name));
    provenance.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((merged, provenance))
}

/// Merges one message: the current file, plus the old file's versions below the current file's
/// lowest (all of them when the current file has `"validVersions": "none"`).
fn merge(old: &Schema, current: &Schema) -> Result<(Schema, Provenance), String> {
    let old_valid = parse_versions(&old.valid_versions)?;
    let cur_valid = parse_versions(&current.valid_versions)?;
    let keep = match (old_valid, cur_valid) {
        (None, _) => None,
        (Some(o), None) => Some(o),
        (Some(o), Some(c)) => o.intersect(&Range {
            min: i16::MIN,
            max: c.min.saturating_sub(1),
        }),
    };
    let Some(keep) = keep else {
        let p = Provenance {
            name: current.name.clone(),
            old: None,
            current: cur_valid,
        };
        return Ok((current.clone(), p));
    };
    let Some(cur) = cur_valid else {
        // Kafka removed the API; the old file speaks all of it.
        let p = Provenance {
            name: old.name.clone(),
            old: Some(keep),
            current: None,
        };
        return Ok((old.clone(), p));
    };
    if old.name != current.name {
        return Err(format!(
            "renamed from {} and versions below {} dropped: not supported",
            old.name, cur.min
        ));
    }
    // Where the current file starts: a field range from it counts from here up.
    let upper = Range {
        min: cur.min,
        max: i16::MAX,
    };
    let flexible = join(
        &old.flexible_versions,
        &current.flexible_versions,
        keep,
        upper,
    )?;
    let mut m = current.clone();
    m.valid_versions = Range {
        min: keep.min,
        max: cur.max,
    }
    .describe();
    m.flexible_versions = flexible;
    m.fields = merge_fields(&old.fields, &current.fields, keep, upper)?;
    let mut structs = Vec::new();
    for c in &current.common_structs {
        match old.common_structs.iter().find(|o| o.name == c.name) {
            Some(o) => structs.push(StructDef {
                name: c.name.clone(),
                fields: merge_fields(&o.fields, &c.fields, keep, upper)?,
            }),
            None => structs.push(c.clone()),
        }
    }
    for o in &old.common_structs {
        if !current.common_structs.iter().any(|c| c.name == o.name) {
            let fields = restrict_fields(&o.fields, keep)?;
            structs.push(StructDef {
                name: o.name.clone(),
                fields,
            });
        }
    }
    m.common_structs = structs;
    let p = Provenance {
        name: current.name.clone(),
        old: Some(keep),
        current: Some(cur),
    };
    Ok((m, p))
}

/// The union of `old ∩ keep` and `current ∩ upper`, as a version spec (`None` = none). Both
/// parts must touch: a field cannot skip versions.
fn join(
    old: &Option<String>,
    current: &Option<String>,
    keep: Range,
    upper: Range,
) -> Result<Option<String>, String> {
    let part = |s: &Option<String>, within: Range| -> Result<Option<Range>, String> {
        Ok(match s {
            Some(s) => parse_versions(s)?.and_then(|r| r.intersect(&within)),
            None => None,
        })
    };
    let lo = part(old, keep)?;
    let hi = part(current, upper)?;
    let r = match (lo, hi) {
        (None, None) => None,
        (Some(r), None) | (None, Some(r)) => Some(r),
        (Some(a), Some(b)) => {
            if a.max.saturating_add(1) != b.min {
                return Err(format!(
                    "versions {} (old) and {} (current) leave a gap",
                    a.describe(),
                    b.describe()
                ));
            }
            Some(Range {
                min: a.min,
                max: b.max,
            })
        }
    };
    Ok(r.map(|r| r.describe()))
}

/// A field of the old file limited to `keep` (`None` when it has no version there).
fn restrict(f: &Field, keep: Range) -> Result<Option<Field>, String> {
    // With no current part, `join` is just `old ∩ keep`; the upper range is not read.
    let only = |s: &Option<String>| join(s, &None, keep, keep);
    let Some(versions) = only(&f.versions)? else {
        return Ok(None);
    };
    let mut r = f.clone();
    r.versions = Some(versions);
    r.nullable_versions = only(&f.nullable_versions)?;
    r.tagged_versions = only(&f.tagged_versions)?;
    if r.tagged_versions.is_none() {
        r.tag = None;
    }
    r.fields = restrict_fields(&f.fields, keep)?;
    Ok(Some(r))
}

fn restrict_fields(fields: &[Field], keep: Range) -> Result<Vec<Field>, String> {
    let mut out = Vec::new();
    for f in fields {
        if let Some(r) = restrict(f, keep)? {
            out.push(r);
        }
    }
    Ok(out)
}

/// Merges the fields of one struct. The current file's fields come in its order; a field only
/// the old file has (limited to `keep`) goes right after the old field that preceded it.
fn merge_fields(
    old: &[Field],
    current: &[Field],
    keep: Range,
    upper: Range,
) -> Result<Vec<Field>, String> {
    let mut out: Vec<Field> = Vec::new();
    for c in current {
        let Some(o) = old.iter().find(|o| o.name == c.name) else {
            let mut c = c.clone();
            // A field the old file lacks has no version below `upper`, whatever the current
            // file's spec says (`0+` in a file that starts at v3).
            match join(&None, &c.versions, keep, upper)? {
                Some(v) => c.versions = Some(v),
                None => continue,
            }
            c.nullable_versions = join(&None, &c.nullable_versions, keep, upper)?;
            c.tagged_versions = join(&None, &c.tagged_versions, keep, upper)?;
            out.push(c);
            continue;
        };
        let versions = join(&o.versions, &c.versions, keep, upper)
            .map_err(|e| format!("field {}: {e}", c.name))?;
        let Some(versions) = versions else {
            continue;
        };
        let old_part = join(&o.versions, &None, keep, upper)?.is_some();
        if old_part && o.ty != c.ty {
            return Err(format!(
                "field {}: type {} (old) vs {} (current)",
                c.name, o.ty, c.ty
            ));
        }
        let mut m = c.clone();
        m.versions = Some(versions);
        m.nullable_versions = join(&o.nullable_versions, &c.nullable_versions, keep, upper)
            .map_err(|e| format!("field {} nullable: {e}", c.name))?;
        m.tagged_versions = join(&o.tagged_versions, &c.tagged_versions, keep, upper)
            .map_err(|e| format!("field {} tagged: {e}", c.name))?;
        if m.tag.is_none() {
            m.tag = o.tag;
        }
        m.fields = merge_fields(&o.fields, &c.fields, keep, upper)
            .map_err(|e| format!("{}.{e}", c.name))?;
        out.push(m);
    }
    // Old-only fields, in old order, each after its nearest preceding old field already placed.
    let mut anchor: Option<usize> = None;
    for o in old {
        if let Some(i) = out.iter().position(|f| f.name == o.name) {
            anchor = Some(i);
            continue;
        }
        let Some(r) = restrict(o, keep)? else {
            continue;
        };
        let at = anchor.map_or(0, |i| i + 1);
        out.insert(at, r);
        anchor = Some(at);
    }
    Ok(out)
}

/// One field as it appears on the wire at a version: its dotted path, type, whether it may be
/// null and whether (and with which tag) it is tagged. Used to compare schemas.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireField {
    pub path: String,
    pub ty: String,
    pub nullable: bool,
    pub tag: Option<u32>,
}

/// The fields of `s` at `version`, depth first in wire order (tagged fields in schema order).
#[cfg(test)]
pub fn wire_fields(s: &Schema, version: i16) -> Result<Vec<WireField>, String> {
    let structs: HashMap<&str, &[Field]> = s
        .common_structs
        .iter()
        .map(|d| (d.name.as_str(), d.fields.as_slice()))
        .collect();
    let mut out = Vec::new();
    flatten(&s.fields, version, &structs, "", &mut out)?;
    Ok(out)
}

#[cfg(test)]
fn flatten(
    fields: &[Field],
    version: i16,
    structs: &HashMap<&str, &[Field]>,
    prefix: &str,
    out: &mut Vec<WireField>,
) -> Result<(), String> {
    let has = |s: &Option<String>| -> Result<bool, String> {
        Ok(match s {
            Some(s) => parse_versions(s)?.is_some_and(|r| r.min <= version && version <= r.max),
            None => false,
        })
    };
    for f in fields {
        if !has(&f.versions)? {
            continue;
        }
        let path = format!("{prefix}{}", f.name);
        let tagged = has(&f.tagged_versions)?;
        out.push(WireField {
            path: path.clone(),
            ty: f.ty.clone(),
            nullable: has(&f.nullable_versions)?,
            tag: if tagged { f.tag } else { None },
        });
        let inner = f.ty.trim_start_matches("[]");
        let sub: &[Field] = if f.fields.is_empty() {
            structs.get(inner).copied().unwrap_or(&[])
        } else {
            &f.fields
        };
        flatten(sub, version, structs, &format!("{path}."), out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets() -> Option<(Vec<Schema>, Vec<Schema>)> {
        let shared = super::super::repo_root().join("../shared");
        let (cur, old) = (
            shared.join("kafka-message-schemas-4.4"),
            shared.join("kafka-message-schemas"),
        );
        if !cur.exists() || !old.exists() {
            eprintln!("schemas not found under {}; skipped", shared.display());
            return None;
        }
        Some((
            super::super::load_schemas(&cur).unwrap(),
            super::super::load_schemas(&old).unwrap(),
        ))
    }

    /// At every version the merged schema puts on the wire exactly what the file that defines
    /// that version says: the old file below the current file's lowest version, the current
    /// file from there up.
    #[test]
    fn merged_schemas_match_their_sources_at_every_version() {
        let Some((current, old)) = sets() else {
            return;
        };
        let (merged, provenance) = merge_sets(&current, &old).unwrap();
        let find = |set: &[Schema], name: &str| set.iter().find(|s| s.name == name).cloned();
        let mut checked = 0;
        for p in &provenance {
            let m = find(&merged, &p.name).unwrap();
            for (range, set) in [(p.old, &old), (p.current, &current)] {
                let Some(range) = range else { continue };
                let src = find(set, &p.name).unwrap();
                for v in range.min..=range.max {
                    assert_eq!(
                        wire_fields(&m, v).unwrap(),
                        wire_fields(&src, v).unwrap(),
                        "{} v{v}",
                        p.name
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 700, "{checked} versions checked");
    }

    #[test]
    fn dropped_versions_come_back_from_the_old_file() {
        let Some((current, old)) = sets() else {
            return;
        };
        let (merged, provenance) = merge_sets(&current, &old).unwrap();
        let get = |n: &str| provenance.iter().find(|p| p.name == n).unwrap();
        let produce = get("ProduceRequest");
        assert_eq!(produce.old, Some(Range { min: 0, max: 2 }));
        assert_eq!(produce.current, Some(Range { min: 3, max: 13 }));
        let s = merged.iter().find(|s| s.name == "ProduceRequest").unwrap();
        assert_eq!(s.valid_versions, "0-13");
        // The renamed API is one message under its new name.
        assert!(
            merged
                .iter()
                .all(|s| s.name != "ListClientMetricsResourcesRequest")
        );
        assert!(get("ListConfigResourcesRequest").old.is_none());
        // A field only the old file has keeps its place: ListOffsets v0's MaxNumOffsets.
        let lo = merged
            .iter()
            .find(|s| s.name == "ListOffsetsRequest")
            .unwrap();
        let v0: Vec<String> = wire_fields(lo, 0)
            .unwrap()
            .into_iter()
            .map(|f| f.path)
            .collect();
        assert_eq!(
            v0.last().map(String::as_str),
            Some("Topics.Partitions.MaxNumOffsets")
        );
    }
}
