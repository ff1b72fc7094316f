//! The shape ARCHITECTURE.md promises, checked on the source tree: no two files of `src/` import
//! each other, the store and the exporter import nothing above them, and no production file of
//! the rooms the issue split (ingest, the derivation, the store) grows past its size.
//!
//! Imports are read from the text: every `crate::…` and `super::…` path outside comments and
//! outside the file's `#[cfg(test)] mod tests`, resolved to the deepest module file that exists.
//! A `mod.rs` re-exporting its own children is a facade, not an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path, `[]` for the crate root.
type Module = Vec<String>;

struct Tree {
    /// Every module file of `src/`, by module path.
    files: BTreeMap<Module, PathBuf>,
}

impl Tree {
    fn read() -> Tree {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = BTreeMap::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
                let path = entry.expect("a directory entry").path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let rel = path.strip_prefix(&root).expect("under src/");
                    let mut module: Module = rel
                        .with_extension("")
                        .iter()
                        .map(|c| c.to_string_lossy().into_owned())
                        .collect();
                    if module.last().is_some_and(|l| l == "mod") {
                        module.pop();
                    }
                    if module == ["lib"] || module == ["main"] {
                        module.clear();
                    }
                    files.insert(module, path);
                }
            }
        }
        Tree { files }
    }

    fn resolve(&self, mut path: Module) -> Option<Module> {
        while !path.is_empty() {
            if self.files.contains_key(&path) {
                return Some(path);
            }
            path.pop();
        }
        None
    }

    /// Module → modules its production code names.
    fn imports(&self) -> BTreeMap<Module, BTreeSet<Module>> {
        let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
        for (module, path) in &self.files {
            let text = production(&std::fs::read_to_string(path).expect("readable source"));
            let facade = path.ends_with("mod.rs") || path.ends_with("lib.rs");
            let base: Module = module[..module.len().saturating_sub(1)].to_vec();
            for target in paths(&text, &base) {
                let Some(found) = self.resolve(target) else {
                    continue;
                };
                if &found == module || (facade && found.starts_with(module)) {
                    continue;
                }
                edges.entry(module.clone()).or_default().insert(found);
            }
        }
        edges
    }

    fn name(&self, module: &Module) -> String {
        self.files[module]
            .to_string_lossy()
            .split("/src/")
            .last()
            .map(|s| format!("src/{s}"))
            .unwrap_or_default()
    }
}

/// The text before the file's unit tests, without line comments.
fn production(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Every `crate::a::b` / `super::a` path in `text`, as module paths (`base` is what `super`
/// names), braces expanded one level.
fn paths(text: &str, base: &Module) -> Vec<Module> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    // Both needles are 7 bytes long.
    for (start, kind) in [("crate::", true), ("super::", false)]
        .iter()
        .flat_map(|(needle, k)| text.match_indices(needle).map(move |(i, _)| (i, *k)))
    {
        if start > 0 && ident_char(bytes[start - 1]) {
            continue;
        }
        let mut at = start + "crate::".len();
        let mut segments: Module = if kind { Vec::new() } else { base.clone() };
        loop {
            let from = at;
            while at < bytes.len() && ident_char(bytes[at]) {
                at += 1;
            }
            if from == at {
                break;
            }
            let segment = &text[from..at];
            if segment == "super" {
                segments.pop();
            } else {
                segments.push(segment.to_owned());
            }
            if text[at..].starts_with("::{") {
                let close = text[at..].find('}').map_or(text.len(), |i| at + i);
                for item in text[at + 3..close].split(',') {
                    let first = item.trim().split("::").next().unwrap_or("");
                    if first.starts_with(|c: char| c.is_ascii_lowercase()) && first != "self" {
                        let mut p = segments.clone();
                        p.push(first.to_owned());
                        out.push(p);
                    }
                }
                break;
            }
            if text[at..].starts_with("::") {
                at += 2;
            } else {
                break;
            }
        }
        out.push(segments);
    }
    out
}

#[test]
fn no_two_files_import_each_other() {
    let tree = Tree::read();
    let edges = tree.imports();
    let mut mutual = Vec::new();
    for (a, targets) in &edges {
        for b in targets {
            if a < b && edges.get(b).is_some_and(|t| t.contains(a)) {
                mutual.push(format!("{} <-> {}", tree.name(a), tree.name(b)));
            }
        }
    }
    assert!(
        mutual.is_empty(),
        "files that import each other:\n{}",
        mutual.join("\n")
    );
}

/// Test files that may import a layer above theirs, and which layer: the exporter's client test
/// sends to stepline's own gRPC receiver as a real backend that records the bytes it received
/// (the receiver's sink trait names ingest's outcome and error types).
const TEST_BACKENDS: [(&str, &str); 2] = [
    ("src/exporter/client_tests.rs", "receiver"),
    ("src/exporter/client_tests.rs", "ingest"),
];

#[test]
fn the_store_and_the_exporter_import_nothing_above_them() {
    let above: [(&str, &[&str]); 2] = [
        (
            "store",
            &[
                "interpreter",
                "ingest",
                "continuation",
                "exporter",
                "api",
                "receiver",
                "service",
                "media",
            ],
        ),
        (
            "exporter",
            &[
                "interpreter",
                "ingest",
                "continuation",
                "receiver",
                "api",
                "service",
                "media",
            ],
        ),
    ];
    let tree = Tree::read();
    let mut wrong = Vec::new();
    for (module, targets) in tree.imports() {
        for (layer, forbidden) in above {
            if module.first().is_some_and(|m| m == layer) {
                for t in &targets {
                    let name = tree.name(&module);
                    let backend = t
                        .first()
                        .is_some_and(|f| TEST_BACKENDS.contains(&(name.as_str(), f.as_str())));
                    if !backend && t.first().is_some_and(|f| forbidden.contains(&f.as_str())) {
                        wrong.push(format!("{} -> {}", tree.name(&module), tree.name(t)));
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that point up:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_split_rooms_stay_small() {
    const MAX_PRODUCTION_LINES: usize = 650;
    let tree = Tree::read();
    let mut big = Vec::new();
    for (module, path) in &tree.files {
        let room = module.first().map(String::as_str);
        if !matches!(room, Some("ingest" | "store" | "records" | "outbox")) {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("readable source");
        let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
        let lines = text[..end].lines().count();
        if lines > MAX_PRODUCTION_LINES && !path.to_string_lossy().ends_with("tests.rs") {
            big.push(format!("{}: {lines} lines", tree.name(module)));
        }
    }
    assert!(
        big.is_empty(),
        "production files over {MAX_PRODUCTION_LINES} lines:\n{}",
        big.join("\n")
    );
}

#[test]
fn the_reader_finds_the_imports_it_checks() {
    // The checks above pass vacuously if the reader finds nothing: it must see the ingest →
    // store edge every write takes.
    let tree = Tree::read();
    let edges = tree.imports();
    let ingest_to_store = edges
        .iter()
        .filter(|(m, _)| m.first().is_some_and(|f| f == "ingest"))
        .any(|(_, t)| t.iter().any(|t| t.first().is_some_and(|f| f == "store")));
    assert!(
        ingest_to_store,
        "no ingest → store import found: the reader is broken"
    );
    assert!(
        tree.files.len() > 50,
        "found only {} files",
        tree.files.len()
    );
}
