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
        let next = b.get(i + 1).copied();
        i = match (b[i], next) {
            (b'/', Some(b'/')) => skip_line_comment(b, i),
            (b'/', Some(b'*')) => skip_block_comment(b, i, &mut out),
            (b'r', Some(b'"' | b'#')) if !ident_before(b, i) => raw_string(b, i, &mut out),
            (b'"', _) => string(b, i, &mut out),
            (b'\'', _) => char_or_lifetime(b, i, &mut out),
            _ => {
                let ch = src[i..].chars().next().unwrap_or(' ');
                out.push(ch);
                i + ch.len_utf8()
            }
        };
    }
    out
}

/// From `//` at `i` to the end of the line (the line break is kept).
fn skip_line_comment(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i] != b'\n' {
        i += 1;
    }
    i
}

/// From `/*` at `i` past its (nested) closing `*/`, keeping the line breaks inside.
fn skip_block_comment(b: &[u8], mut i: usize, out: &mut String) -> usize {
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
    i
}

/// A raw string at `i` (`r"..."` or `r#"..."#`, as many hashes at the end as at the start),
/// written as `""`; an `r` that starts no raw string is copied.
fn raw_string(b: &[u8], i: usize, out: &mut String) -> usize {
    let mut j = i + 1;
    let mut hashes = 0;
    while b.get(j) == Some(&b'#') {
        hashes += 1;
        j += 1;
    }
    if b.get(j) != Some(&b'"') {
        out.push('r');
        return i + 1;
    }
    j += 1;
    while j < b.len() {
        let closes =
            b[j] == b'"' && b[j + 1..].iter().take_while(|&&h| h == b'#').count() >= hashes;
        if closes {
            j += 1 + hashes;
            break;
        }
        if b[j] == b'\n' {
            out.push('\n');
        }
        j += 1;
    }
    out.push_str("\"\"");
    j
}

/// A string literal at `i`, written as `""` (line breaks inside kept).
fn string(b: &[u8], mut i: usize, out: &mut String) -> usize {
    i += 1;
    while i < b.len() && b[i] != b'"' {
        if b[i] == b'\\' {
            i += 1;
        } else if b[i] == b'\n' {
            out.push('\n');
        }
        i += 1;
    }
    out.push_str("\"\"");
    i + 1
}

/// A character literal at `i` (`'x'`, `'\n'`, `'\u{1F600}'`), written as `' '`, or a lifetime's
/// quote, copied.
fn char_or_lifetime(b: &[u8], mut i: usize, out: &mut String) -> usize {
    if b.get(i + 1) == Some(&b'\\') {
        // The escape's first character may itself be a quote (`'\''`).
        i += 3;
        while i < b.len() && b[i] != b'\'' {
            i += 1;
        }
        out.push_str("' '");
        i + 1
    } else if b.get(i + 2) == Some(&b'\'') {
        out.push_str("' '");
        i + 3
    } else {
        out.push('\'');
        i + 1
    }
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

/// The first segment after each `prefix` in `code` (`crate::`, `super::`, `crate::reader::`),
/// with its line number (1-based); a use tree's group gives one per member. A `prefix` that
/// continues a path (`super::super::`, which leaves the folder) is skipped, as are `self` and
/// `super` heads.
fn heads_after(code: &str, prefix: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find(prefix) {
        let abs = from + at;
        from = abs + prefix.len();
        let before = code[..abs].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let line = code[..abs].matches('\n').count() + 1;
        let rest = &code[from..];
        if let Some(body) = rest.trim_start().strip_prefix('{') {
            found.extend(group_heads(body).into_iter().map(|h| (line, h.to_string())));
        } else {
            found.push((line, ident(rest).to_string()));
        }
    }
    found.retain(|(_, h)| !h.is_empty() && h != "super" && h != "self");
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
    for (line, head) in heads_after(&code_only(src), "crate::") {
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
        breaches.extend(check_file(
            &rules,
            &exports,
            &rel.display().to_string(),
            &module,
            &text,
        ));
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
            assert!(
                rules.contains_key(f),
                "the rule for `{module}` names `{f}`, which has no rule of its own"
            );
            assert_ne!(f, module, "the rule for `{module}` forbids itself");
        }
    }
    // What the rules allow must have no circle: a depth-first walk over "may import" edges never
    // meets a module that is still on its own path.
    fn walk<'a>(
        m: &'a str,
        rules: &'a Rules,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if done.contains(m) {
            return;
        }
        assert!(
            !path.contains(&m),
            "the rules allow a circle: {path:?} -> {m}"
        );
        path.push(m);
        for (other, _) in rules
            .iter()
            .filter(|(o, _)| *o != m && !rules[m].contains(*o))
        {
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
    assert_eq!(
        rules["conn"],
        BTreeSet::from(["writer".into(), "admin".into()])
    );
    let exports = reexports(
        "pub use writer::{Writer, record::{A as B}};\npub use admin::Client;\npub use kafkit_balancer as balancer;",
    );
    assert_eq!(exports["Writer"], "writer");
    assert_eq!(exports["B"], "writer");
    assert_eq!(exports["balancer"], "kafkit_balancer");
    let src = "use crate::writer::Writer;\n\
               // use crate::admin::Client;\n\
               /// [`crate::admin::Client`]\n\
               let s = \"crate::admin\";\n\
               use crate::{group::X, Client as C};\n\
               fn f(_: &crate::Writer) {}\n\
               let c = 'x'; let q = '\\''; let l: &'static str = r#\"crate::admin\"#;\n\
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
/// listed here. A crate may name itself: a dev-dependency on itself turns features on for its
/// own tests (kafkit-protocol's `arbitrary`, kafkit-compress's `zstd-pure`).
#[test]
fn leaf_crates_never_depend_on_the_umbrella() {
    let allowed: &[(&str, &[&str])] = &[
        (
            "kafkit-protocol",
            &["kafkit-compress", "kafkit-pagebuf", "kafkit-protocol"],
        ),
        ("kafkit-compress", &["kafkit-compress"]),
        ("kafkit-balancer", &[]),
        ("kafkit-group-balancer", &["kafkit-protocol"]),
        ("kafkit-sasl", &[]),
        ("kafkit-pagebuf", &[]),
    ];
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (name, ok) in allowed {
        let toml =
            std::fs::read_to_string(crates.join(name).join("Cargo.toml")).expect("leaf Cargo.toml");
        for line in toml.lines() {
            let dep = line.split(['=', '.', ' ']).next().unwrap_or("").trim();
            if dep.starts_with("kafkit")
                && line.contains('=')
                && !line.trim_start().starts_with("name")
            {
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

/// The longest a function of the library may run, in lines from `fn` to its closing brace
/// (tests excepted). DESIGN.md's reading guide promises functions of about a screen: a longer
/// operation is a chain of named phases.
const FN_MAX_LINES: usize = 80;

/// Every function body in `code` (already [`code_only`]) outside `#[cfg(test)]` modules: name,
/// first line (1-based) and length in lines.
fn function_lengths(code: &str) -> Vec<(String, usize, usize)> {
    let b = code.as_bytes();
    let line_at = |i: usize| code[..i].matches('\n').count() + 1;
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        // Skip a test module whole: `#[cfg(test)]`, then `mod name {` ... its closing brace.
        if code[i..].starts_with("#[cfg(test)]") {
            let after = &code[i + "#[cfg(test)]".len()..];
            let trimmed = after.trim_start();
            if trimmed.starts_with("mod ")
                && let Some(open) = trimmed.find(['{', ';'])
            {
                let start = i + "#[cfg(test)]".len() + (after.len() - trimmed.len()) + open;
                if b[start] == b'{' {
                    i = matching_brace(b, start).map_or(b.len(), |e| e + 1);
                    continue;
                }
            }
        }
        let is_fn = code[i..].starts_with("fn ")
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'));
        if !is_fn {
            i += 1;
            continue;
        }
        let name = ident(&code[i + 3..]).to_string();
        // The signature ends at the first `{` (a body) or `;` (a declaration) outside brackets.
        let mut depth = 0i32;
        let mut j = i + 3;
        let mut body = None;
        while j < b.len() {
            match b[j] {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b'{' if depth == 0 => {
                    body = Some(j);
                    break;
                }
                b';' if depth == 0 => break,
                _ => {}
            }
            j += 1;
        }
        if let Some(open) = body
            && let Some(close) = matching_brace(b, open)
        {
            found.push((name, line_at(i), line_at(close) - line_at(i) + 1));
        }
        i += 3;
    }
    found
}

/// The index of the `}` that closes the `{` at `open`.
fn matching_brace(b: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (k, &c) in b.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(k);
                }
            }
            _ => {}
        }
    }
    None
}

#[test]
fn no_function_runs_over_a_screen() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut long = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(&src).expect("under src/");
        let code = code_only(&std::fs::read_to_string(path).expect("read a source file"));
        for (name, line, len) in function_lengths(&code) {
            if len > FN_MAX_LINES {
                long.push(format!(
                    "\n  src/{}:{line}: {name} ({len} lines)",
                    rel.display()
                ));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {FN_MAX_LINES} lines (name their phases):{}",
        long.concat()
    );
}

#[test]
fn function_lengths_skip_tests_and_declarations() {
    let code = "trait T {\n    fn decl(&self)\n        -> u8;\n}\nfn short() {\n    let x = 1;\n}\n\
                #[cfg(test)]\nmod tests {\n    fn in_test() {\n    }\n}\nfn after<T: Fn() -> u8>(t: [u8; 2]) -> u8 {\n    0\n}\n";
    assert_eq!(
        function_lengths(code),
        vec![("short".to_string(), 5, 3), ("after".to_string(), 13, 3)]
    );
}

/// `code` without its `#[cfg(test)]` modules (their `super::` paths name the file itself, and
/// tests may reach anywhere).
fn without_test_modules(code: &str) -> String {
    let b = code.as_bytes();
    let mut out = String::with_capacity(code.len());
    let mut i = 0;
    while let Some(at) = code[i..].find("#[cfg(test)]") {
        let start = i + at;
        out.push_str(&code[i..start]);
        let after = start + "#[cfg(test)]".len();
        let rest = code[after..].trim_start();
        let open = rest
            .starts_with("mod ")
            .then(|| rest.find(['{', ';']))
            .flatten()
            .map(|o| after + (code[after..].len() - rest.len()) + o)
            .filter(|&o| b[o] == b'{');
        i = match open.and_then(|o| matching_brace(b, o)) {
            Some(close) => close + 1,
            None => {
                out.push_str("#[cfg(test)]");
                after
            }
        };
    }
    out.push_str(&code[i..]);
    out
}

/// The circles among the files of one folder (`mod.rs` and the folder's parent left out: a
/// facade wires its children, and a child may name the facade it builds). `files` maps each
/// child file's module name to its code.
fn sibling_circle(folder: &str, files: &BTreeMap<String, String>) -> Option<Vec<String>> {
    let names: BTreeSet<&str> = files.keys().map(String::as_str).collect();
    let crate_prefix = format!("crate::{}::", folder.replace('/', "::"));
    let edges: BTreeMap<&str, BTreeSet<String>> = files
        .iter()
        .map(|(name, code)| {
            let mut to: BTreeSet<String> = heads_after(code, "super::")
                .into_iter()
                .chain(heads_after(code, &crate_prefix))
                .map(|(_, head)| head)
                .collect();
            to.retain(|t| t != name && names.contains(t.as_str()));
            (name.as_str(), to)
        })
        .collect();
    fn visit<'a>(
        n: &'a str,
        edges: &'a BTreeMap<&'a str, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(k) = path.iter().position(|p| *p == n) {
            let mut circle: Vec<String> = path[k..].iter().map(|s| s.to_string()).collect();
            circle.push(n.to_string());
            return Some(circle);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n);
        for m in &edges[n] {
            if let Some(c) = visit(m, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n);
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|n| visit(n, &edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_circle_among_the_files_of_a_module() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    // Folder (relative to src/, "/"-separated) -> child module name -> its code.
    let mut folders: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for path in &files {
        let rel = path.strip_prefix(&src).expect("under src/");
        let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) else {
            continue;
        };
        let Some(name) = rel.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if name == "mod" {
            continue;
        }
        let code = without_test_modules(&code_only(&std::fs::read_to_string(path).expect("read")));
        let folder = parent.to_str().expect("utf-8 path").replace('\\', "/");
        folders
            .entry(folder)
            .or_default()
            .insert(name.to_string(), code);
    }
    let circles: Vec<String> = folders
        .iter()
        .filter_map(|(folder, files)| {
            sibling_circle(folder, files).map(|c| format!("\n  {folder}/: {}", c.join(" -> ")))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "import circles among a module's files:{}",
        circles.concat()
    );
}

#[test]
fn the_sibling_check_finds_a_circle_and_ignores_tests() {
    let files = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(n, c)| (n.to_string(), without_test_modules(&code_only(c))))
            .collect()
    };
    let circle = files(&[
        ("a", "use super::b::X;"),
        ("b", "use crate::w::{c::Y, mod_x};"),
        ("c", "fn f() { super::a::g(); }"),
    ]);
    assert_eq!(
        sibling_circle("w", &circle),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    let line = files(&[
        ("a", "use super::b::X;"),
        (
            "b",
            "use super::super::a::Z; // leaves the folder\n#[cfg(test)]\nmod tests {\n    use super::super::a::T;\n}",
        ),
    ]);
    assert_eq!(sibling_circle("w", &line), None);
}
