//! The host's modules depend in one direction, the one `lib.rs` and the
//! README draw: each module may use only the modules after it in `LAYERS`.
//! Reads every `crate::…` path in `host/src`, so a new import against the
//! direction (or a cycle) fails here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Top to bottom.
/// `scaffold` belongs to the binary (`plugin new`) and uses no other module.
const LAYERS: &[&str] = &["scaffold", "app", "transport", "acp", "plugins", "cluster", "journal", "core", "tenants", "store", "rpc", "ids", "metrics", "telemetry", "config"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Module names a source text reaches through `crate::` (including `use crate::{a, b}`).
fn references(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            for part in inner.split(',') {
                found.insert(ident(part.trim()));
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found.retain(|m| !m.is_empty() && m != "self");
    found
}

#[test]
fn modules_depend_only_downward() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
    let mut seen = BTreeSet::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().to_string();
        let module = first.trim_end_matches(".rs").to_string();
        if module == "main" || module == "lib" {
            continue;
        }
        let rank = LAYERS.iter().position(|m| *m == module).unwrap_or_else(|| panic!("module {module} ({}) is not in LAYERS: place it", rel.display()));
        seen.insert(module.clone());
        let text = std::fs::read_to_string(&file).unwrap();
        for target in references(&text) {
            if target == module {
                continue;
            }
            match LAYERS.iter().position(|m| *m == target) {
                Some(t) if t > rank => {}
                Some(_) => violations.push(format!("{}: {module} uses crate::{target}, which is above it", rel.display())),
                None => violations.push(format!("{}: crate::{target} is not a module in LAYERS", rel.display())),
            }
        }
    }
    assert!(violations.is_empty(), "imports against the direction:\n{}", violations.join("\n"));
    assert_eq!(seen.len(), LAYERS.len(), "every layer has code: {seen:?}");
}

#[test]
fn the_reader_sees_grouped_imports() {
    let refs = references("use crate::{core::Gateway, rpc::RpcError};\nlet x = crate::store::digest_hex(b);");
    assert_eq!(refs, ["core", "rpc", "store"].iter().map(|s| s.to_string()).collect());
}
