//! The architecture invariants of docs/DESIGN.md, checked against the sources.
//!
//! docs/DESIGN.md's section "Architecture invariants" holds one line per module of this crate, of
//! the form ``- `conn` never imports `dialer`, `transport`, ...``. The tests here read that list,
//! then every file under `src/`, and fail on a `crate::` path from one module into a module its
//! line forbids. A path through a `lib.rs` re-export (`crate::Writer`) counts as a path into the
//! module that defines the name (`writer`), so the re-exports hide no arrow. The same section's
//! rule for the leaf crates is checked against their `Cargo.toml` files.
//!
//! The check reads code only: comments, doc comments and string literals are skipped, so a doc
//! link to an upper floor (`[`crate::Writer`]`) is not an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crate's modules (the top-level `mod` items of lib.rs that live in files) and, for each,
/// the modules it may not name. Read from docs/DESIGN.md.
type Rules = BTreeMap<String, BTreeSet<String>>;

const DESIGN: &str = include_str!("../../../docs/DESIGN.md");
const LIB: &str = include_str!("lib.rs");

/// The section of DESIGN.md that holds the rules, up to the next heading of the same level.
fn section<'a>(doc: &'a str, heading: &str) -> &'a str {
    let start = doc
        .find(heading)
        .unwrap_or_else(|| panic!("docs/DESIGN.md has no `{heading}` section"));
    let body = &doc[start + heading.len()..];
    let end = body.find("\n## ").unwrap_or(body.len());
    &body[..end]
}

/// The words in backquotes of `text`, in order.
fn quoted(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Parses the lines ``- `m` never imports `a`, `b`.``: the module, then the names in backquotes
/// up to the end of the first sentence.
fn parse_rules(section: &str) -> Rules {
    let mut rules = Rules::new();
    for line in section.lines() {
        let Some(rest) = line.strip_prefix("- `") else {
            continue;
        };
        let Some((module, rest)) = rest.split_once('`') else {
            continue;
        };
        let Some(rest) = rest.trim_start().strip_prefix("never imports") else {
            continue;
        };
        let sentence = rest.split(". ").next().unwrap_or(rest);
        let forbidden = quoted(sentence).into_iter().map(str::to_string).collect();
        assert!(
            rules.insert(module.to_string(), forbidden).is_none(),
            "docs/DESIGN.md states the rule for `{module}` twice"
        );
    }
    rules
}

/// Removes comments and the contents of string and character literals, keeping line breaks, so
/// that what is left is code.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == b'/' && next == Some(b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && next == Some(b'*') {
            let mut depth = 0usize;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == b'r' && (next == Some(b'"') || next == Some(b'#')) && !ident_before(b, i) {
            // A raw string: r"..." or r#"..."#, with as many hashes at the end as at the start.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c as char);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                match b.get(j) {
                    None => break,
                    Some(b'"') if b[j + 1..].iter().take(hashes).filter(|&&h| h == b'#').count() == hashes => {
                        j += 1 + hashes;
                        break;
                    }
                    Some(b'\n') => out.push('\n'),
                    _ => {}
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                } else if b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            if next == Some(b'\\') {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
                out.push_str("' '");
            } else if b.get(i + 2) == Some(&b'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            // Multi-byte UTF-8 sequences are copied byte by byte through `char` boundaries.
            let ch = src[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Whether the byte before `i` continues an identifier (so `r` at `i` is not a raw string's `r`).
fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// The identifier at the start of `s` (after spaces and line breaks).
fn ident(s: &str) -> &str {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first segments named by a use tree's group body (`a::X, b::{Y, Z}, self`) at depth one.
fn group_heads(body: &str) -> Vec<&str> {
    let mut heads = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                heads.push(ident(&body[start..i]));
                return heads;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                heads.push(ident(&body[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    heads.push(ident(&body[start..]));
    heads
}

/// Every first segment after `crate::` in `code`, with its line number (1-based).
fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut rest = code;
    let mut offset = 0;
    while let Some(at) = rest.find("crate::") {
        let abs = offset + at;
        let before = code[..abs].chars().next_back();
        let after = &code[abs + "crate::".len()..];
        let line = code[..abs].matches('\n').count() + 1;
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            if let Some(body) = after.trim_start().strip_prefix('{') {
                for head in group_heads(body) {
                    found.push((line, head.to_string()));
                }
            } else {
                found.push((line, ident(after).to_string()));
            }
        }
        offset = abs + "crate::".len();
        rest = &code[offset..];
    }
    found.retain(|(_, h)| !h.is_empty() && h != "self");
    found
}

/// The names lib.rs re-exports, each with the first segment of its path (`Writer` -> `writer`,
/// `balancer` -> `kafkit_balancer`).
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let code = code_only(lib);
    let mut names = BTreeMap::new();
    for stmt in code.split(';') {
        let Some(at) = stmt.find("pub use ") else {
            continue;
        };
        let tree = &stmt[at + "pub use ".len()..];
        let root = ident(tree).to_string();
        // Every name the tree exports: the last identifier before each `,`, `}` or the end, or the
        // alias after `as`.
        for leaf in tree.split([',', '{', '}']) {
            let leaf = leaf.trim();
            if leaf.is_empty() {
                continue;
            }
            let name = match leaf.rsplit_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => leaf.rsplit("::").next().unwrap_or(leaf).trim(),
            };
            if !name.is_empty() && !name.ends_with("::") {
                names.insert(name.to_string(), root.clone());
            }
        }
    }
    names
}

/// The top module of a file under `src/` (`conn/core.rs` -> `conn`, `time.rs` -> `time`), or
/// `None` for lib.rs and this file.
fn module_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib" && name != "architecture").then(|| name.to_string())
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src/")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// One forbidden arrow: file, line, the module it names.
#[derive(Debug, PartialEq)]
struct Breach {
    file: String,
    line: usize,
    names: String,
}

/// Checks one file's code against the rules. `module` is the file's top module.
fn check_file(
    rules: &Rules,
    exports: &BTreeMap<String, String>,
    file: &str,
    module: &str,
    src: &str,
) -> Vec<Breach> {
    let forbidden = rules
        .get(module)
        .unwrap_or_else(|| panic!("docs/DESIGN.md has no invariant line for `{module}` ({file})"));
    let mut breaches = Vec::new();
    for (line, head) in crate_paths(&code_only(src)) {
        let target = if rules.contains_key(&head) {
            head.clone()
        } else if let Some(root) = exports.get(&head) {
            root.clone()
        } else {
            continue;
        };
        if target != module && forbidden.contains(&target) {
            breaches.push(Breach {
                file: file.to_string(),
                line,
                names: format!("crate::{head} ({target})"),
            });
        }
    }
    breaches
}

fn design_rules() -> Rules {
    parse_rules(section(DESIGN, "## Architecture invariants"))
}

#[test]
fn no_module_imports_a_module_its_floor_forbids() {
    let rules = design_rules();
    let exports = reexports(LIB);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut breaches = Vec::new();
    let mut seen = BTreeSet::new();
    for path in &files {
        let rel = path.strip_prefix(&src).expect("under src/");
        let Some(module) = module_of(rel) else {
            continue;
        };
        seen.insert(module.clone());
        let text = std::fs::read_to_string(path).expect("read a source file");
        breaches.extend(check_file(&rules, &exports, &rel.display().to_string(), &module, &text));
    }
    let unruled: Vec<_> = seen.iter().filter(|m| !rules.contains_key(*m)).collect();
    let stale: Vec<_> = rules.keys().filter(|m| !seen.contains(*m)).collect();
    let listed: String = breaches
        .iter()
        .map(|b| format!("\n  src/{}:{}: {}", b.file, b.line, b.names))
        .collect();
    assert!(
        unruled.is_empty() && stale.is_empty() && breaches.is_empty(),
        "modules without an invariant line: {unruled:?}; invariant lines for modules that do not \
         exist: {stale:?}; forbidden paths (docs/DESIGN.md, Architecture invariants):{listed}"
    );
}

#[test]
fn every_rule_names_only_modules_of_the_crate() {
    let rules = design_rules();
    for (module, forbidden) in &rules {
        for f in forbidden {
            assert!(rules.contains_key(f), "the rule for `{module}` names `{f}`, which has no rule of its own");
            assert_ne!(f, module, "the rule for `{module}` forbids itself");
        }
    }
    // What the rules allow must have no circle: a depth-first walk over "may import" edges never
    // meets a module that is still on its own path.
    fn walk<'a>(m: &'a str, rules: &'a Rules, path: &mut Vec<&'a str>, done: &mut BTreeSet<&'a str>) {
        if done.contains(m) {
            return;
        }
        assert!(!path.contains(&m), "the rules allow a circle: {path:?} -> {m}");
        path.push(m);
        for (other, _) in rules.iter().filter(|(o, _)| *o != m && !rules[m].contains(*o)) {
            walk(other, rules, path, done);
        }
        path.pop();
        done.insert(m);
    }
    let mut done = BTreeSet::new();
    for m in rules.keys() {
        walk(m, &rules, &mut Vec::new(), &mut done);
    }
}

#[test]
fn the_check_catches_forbidden_paths_and_ignores_comments() {
    let rules = parse_rules(
        "- `conn` never imports `writer`, `admin`. Prose with `group` after the sentence.\n\
         - `writer` never imports `admin`.\n- `admin` never imports `writer`.\n- `group` never imports `admin`.",
    );
    assert_eq!(rules["conn"], BTreeSet::from(["writer".into(), "admin".into()]));
    let exports = reexports("pub use writer::{Writer, record::{A as B}};\npub use admin::Client;\npub use kafkit_balancer as balancer;");
    assert_eq!(exports["Writer"], "writer");
    assert_eq!(exports["B"], "writer");
    assert_eq!(exports["balancer"], "kafkit_balancer");
    let src = "use crate::writer::Writer;\n\
               // use crate::admin::Client;\n\
               /// [`crate::admin::Client`]\n\
               let s = \"crate::admin\";\n\
               use crate::{group::X, Client as C};\n\
               fn f(_: &crate::Writer) {}\n\
               let c = 'x'; let l: &'static str = r#\"crate::admin\"#;\n\
               use crate::balancer;";
    let lines: Vec<_> = check_file(&rules, &exports, "conn/x.rs", "conn", src)
        .into_iter()
        .map(|b| (b.line, b.names))
        .collect();
    assert_eq!(
        lines,
        vec![
            (1, "crate::writer (writer)".to_string()),
            (5, "crate::Client (admin)".to_string()),
            (6, "crate::Writer (writer)".to_string()),
        ]
    );
}

/// The leaf crates: which workspace crates each may depend on (DESIGN.md, "Crates and the
/// direction of dependencies"). None may depend on `kafkit`, `kafkit-cli` or another leaf not
/// listed here.
#[test]
fn leaf_crates_never_depend_on_the_umbrella() {
    let allowed: &[(&str, &[&str])] = &[
        ("kafkit-protocol", &["kafkit-compress", "kafkit-pagebuf", "kafkit-protocol"]),
        ("kafkit-compress", &[]),
        ("kafkit-balancer", &[]),
        ("kafkit-group-balancer", &["kafkit-protocol"]),
        ("kafkit-sasl", &[]),
        ("kafkit-pagebuf", &[]),
    ];
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (name, ok) in allowed {
        let toml = std::fs::read_to_string(crates.join(name).join("Cargo.toml")).expect("leaf Cargo.toml");
        for line in toml.lines() {
            let dep = line.split(['=', '.', ' ']).next().unwrap_or("").trim();
            if dep.starts_with("kafkit") && line.contains('=') && !line.trim_start().starts_with("name") {
                assert!(ok.contains(&dep), "{name} depends on {dep}: {line}");
            }
        }
        let mut files = Vec::new();
        rust_files(&crates.join(name).join("src"), &mut files);
        for f in files {
            let code = code_only(&std::fs::read_to_string(&f).expect("leaf source"));
            for word in ["kafkit::", "kafkit_cli::"] {
                assert!(!code.contains(word), "{} names {word}", f.display());
            }
        }
    }
}
