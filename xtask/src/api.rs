//! `cargo xtask api`: the public API of each published library crate, listed in `api/<crate>.txt`
//! (one item per line with its path and signature, sorted, no ids or file paths), so that every
//! change to what a user can name is a visible diff in review. `cargo xtask api --check` (a step
//! of `cargo xtask test`) fails, printing the diff, when a listing is out of date.
//!
//! How: rustdoc's JSON output (`cargo doc --no-deps --all-features` with `--output-format json`),
//! read by the `public-api` crate (cargo-public-api's library). The JSON output is unstable, so
//! stable rustdoc writes it only with `RUSTC_BOOTSTRAP=1`; no nightly toolchain is needed. Each
//! `public-api` release reads one JSON format version: [`FORMAT_VERSION`] is the one it reads, and
//! a toolchain that writes another fails here with what to change.
//!
//! The listing leaves out blanket impls (`impl<T> From<T> for T` and its kin, the same for every
//! type) and keeps the auto traits (`Send`, `Sync`, `Unpin`, ...): a type that stops being
//! `Send` breaks its users.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The published crates with a library, in dependency order: [`crate::test::PACKAGED`] without
/// kafkit-cli, a binary only (a test keeps the two lists together).
pub const LIBRARIES: [&str; 7] = [
    "kafkit-compress",
    "kafkit-pagebuf",
    "kafkit-protocol",
    "kafkit-balancer",
    "kafkit-group-balancer",
    "kafkit-sasl",
    "kafkit",
];

/// Paths whose impls are left out of a listing, with their crate: kafkit-protocol's generated
/// messages (reachable as `generated` and `messages`). Their types, fields, variants and
/// constants are listed; their impls (the `with_<field>` setters, one per field, the derives and
/// auto traits every message has, `Request` / `Message`) are written by one generator from one
/// template, so a change to them is a change to `xtask/src/codegen` and to the committed
/// generated code, reviewed there; listed, they would be 50,000 lines of the 61,000.
const IMPLS_LEFT_OUT: [(&str, &[&str]); 1] = [(
    "kafkit-protocol",
    &[
        "kafkit_protocol::generated::",
        "kafkit_protocol::messages::",
    ],
)];

/// Generated modules whose impls are listed all the same: `ApiKey` and `ErrorCode` are
/// vocabulary with methods of their own (`is_retriable`, names), used by every crate above.
const IMPLS_KEPT: [&str; 2] = ["::api_key::", "::error_code::"];

/// The rustdoc JSON format version that the pinned `public-api` (0.52.1, on rustdoc-types 0.57)
/// reads: the one rustc 1.95's rustdoc writes.
pub const FORMAT_VERSION: u64 = 57;

/// The folder of the listings, relative to the repository root.
const DIR: &str = "api";

/// Writes `api/<crate>.txt` for every crate of [`LIBRARIES`], or with `check` compares them with
/// the committed files and fails, printing a diff, where one differs.
pub fn run(check: bool) -> Result<(), String> {
    let started = Instant::now();
    let root = crate::broker::workspace_root();
    let json_dir = rustdoc_json(&root)?;
    let dir = root.join(DIR);
    if !check {
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    let mut stale = Vec::new();
    for name in LIBRARIES {
        let json = json_dir.join(format!("{}.json", name.replace('-', "_")));
        let listing = listing(name, &json)?;
        let path = dir.join(format!("{name}.txt"));
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed == listing {
            continue;
        }
        if check {
            println!("api: {DIR}/{name}.txt is out of date:");
            print!("{}", diff(&committed, &listing));
            stale.push(name);
        } else {
            std::fs::write(&path, &listing)
                .map_err(|e| format!("write {}: {e}", path.display()))?;
            println!(
                "api: wrote {DIR}/{name}.txt ({} items)",
                listing.lines().count()
            );
        }
    }
    if !stale.is_empty() {
        return Err(format!(
            "the public API of {} changed (the diff is above, `-` committed, `+` now): if that is \
             meant, run `cargo xtask api` and commit api/ (a change that removes or alters a line \
             breaks users: see README's Versioning)",
            stale.join(", ")
        ));
    }
    println!("api: ok ({}s)", started.elapsed().as_secs());
    Ok(())
}

/// Runs rustdoc once for all of [`LIBRARIES`] with every feature, writing JSON, and returns the
/// folder that holds `<crate_name>.json`.
fn rustdoc_json(root: &Path) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut c = Command::new(&cargo);
    c.args(["doc", "--no-deps", "--all-features", "--lib", "--quiet"]);
    for name in LIBRARIES {
        c.args(["-p", name]);
    }
    // Only rustdoc's flags: the check builds of the dependencies are those of `cargo doc`.
    c.env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTDOCFLAGS", "-Z unstable-options --output-format json")
        .current_dir(root);
    let status = c
        .status()
        .map_err(|e| format!("api: cargo doc could not start: {e}"))?;
    if !status.success() {
        return Err(format!("api: cargo doc (rustdoc JSON) failed ({status})"));
    }
    Ok(target_dir(&cargo, root)?.join("doc"))
}

/// Cargo's target folder, as `cargo metadata` reports it (`CARGO_TARGET_DIR` and config
/// included).
fn target_dir(cargo: &std::ffi::OsStr, root: &Path) -> Result<PathBuf, String> {
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .output()
        .map_err(|e| format!("api: cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!("api: cargo metadata failed ({})", out.status));
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("api: cargo metadata's JSON: {e}"))?;
    meta["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| "api: cargo metadata gave no target_directory".to_owned())
}

/// The listing of crate `name` from its rustdoc JSON: one item per line, ending with a newline.
fn listing(name: &str, json: &Path) -> Result<String, String> {
    let version = format_version(json)?;
    if version != FORMAT_VERSION {
        return Err(format!(
            "api: {} is rustdoc JSON format {version}, and the pinned public-api reads format \
             {FORMAT_VERSION}: pin the public-api release that reads {version} in the root \
             Cargo.toml (its rustdoc-types dependency says which) and update FORMAT_VERSION in \
             xtask/src/api.rs",
            json.display()
        ));
    }
    let api = public_api::Builder::from_rustdoc_json(json)
        .omit_blanket_impls(true)
        .build()
        .map_err(|e| format!("api: read {}: {e}", json.display()))?;
    let left_out: &[&str] = IMPLS_LEFT_OUT
        .iter()
        .find(|(c, _)| *c == name)
        .map_or(&[], |(_, paths)| paths);
    let lines: Vec<(_, _, String)> = api
        .items()
        .map(|i| (i.id(), i.parent_id(), i.to_string()))
        .collect();
    let impls: std::collections::HashSet<_> = lines
        .iter()
        .filter(|(_, _, l)| l.starts_with("impl"))
        .map(|(id, _, _)| *id)
        .collect();
    // public-api's own order: sorted, an item followed by its impls and their items.
    let mut text = String::new();
    for (id, parent, line) in &lines {
        let in_impl = impls.contains(id) || parent.is_some_and(|p| impls.contains(&p));
        let generated = left_out.iter().any(|p| line.contains(p))
            && !IMPLS_KEPT.iter().any(|k| line.contains(k));
        if in_impl && generated {
            continue;
        }
        text.push_str(line);
        text.push('\n');
    }
    Ok(text)
}

/// The `format_version` field of a rustdoc JSON file.
fn format_version(json: &Path) -> Result<u64, String> {
    let text =
        std::fs::read_to_string(json).map_err(|e| format!("api: read {}: {e}", json.display()))?;
    // The field is at the end of the file; a full parse here would read the file twice.
    let key = "\"format_version\":";
    let at = text
        .rfind(key)
        .ok_or_else(|| format!("api: {} has no format_version", json.display()))?;
    let digits: String = text[at + key.len()..]
        .chars()
        .skip_while(|c| c.is_whitespace())
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .map_err(|e| format!("api: {}: format_version: {e}", json.display()))
}

/// The lines only in `old` (`-`), then those only in `new` (`+`), each in its listing's order.
/// A listing is public-api's grouped order (an item, then its impls and their items), one line per
/// item, so what was removed and what was added is the whole change; a move alone is named.
fn diff(old: &str, new: &str) -> String {
    let (mut in_old, mut in_new) = (counts(old), counts(new));
    let mut out = String::new();
    for l in old.lines() {
        if in_new.get(l).is_some_and(|n| *n > 0) {
            *in_new.entry(l).or_default() -= 1;
        } else {
            out.push_str(&format!("-{l}\n"));
        }
    }
    for l in new.lines() {
        if in_old.get(l).is_some_and(|n| *n > 0) {
            *in_old.entry(l).or_default() -= 1;
        } else {
            out.push_str(&format!("+{l}\n"));
        }
    }
    if out.is_empty() && old != new {
        out.push_str("(the same lines in another order)\n");
    }
    out
}

/// How many times each line occurs in `text`.
fn counts(text: &str) -> std::collections::HashMap<&str, i64> {
    let mut m = std::collections::HashMap::new();
    for l in text.lines() {
        *m.entry(l).or_default() += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::{LIBRARIES, diff};

    #[test]
    fn every_published_library_is_listed() {
        let published: Vec<&str> = crate::test::PACKAGED
            .into_iter()
            .filter(|c| *c != "kafkit-cli")
            .collect();
        assert_eq!(LIBRARIES.to_vec(), published);
    }

    #[test]
    fn diff_marks_removed_and_added_lines() {
        let old = "pub fn a()\npub fn b()\npub fn d()\n";
        let new = "pub fn a()\npub fn c()\npub fn d()\npub fn e()\n";
        assert_eq!(diff(old, new), "-pub fn b()\n+pub fn c()\n+pub fn e()\n");
        assert_eq!(diff(new, new), "");
        assert_eq!(diff("", "pub fn a()\n"), "+pub fn a()\n");
        assert_eq!(
            diff("a\nb\n", "b\na\n"),
            "(the same lines in another order)\n"
        );
    }
}
