//! The contract's version is written once, in `wit/package.wit`. What has
//! to spell it again (JavaScript imports, the SDK's crate version, docs
//! naming the package) must name that version; this reads every tracked
//! file and lists each mention that does not.
//!
//! The rules, for every tracked file outside the frozen folders
//! (`wit/v<version>/`, each a package of its own):
//!
//! - the package or one of its interfaces with a version
//!   (`map-gateway:plugin@…`, `map-gateway:plugin/store@…`) names the
//!   current version or a frozen one;
//! - wit-bindgen's export macro names (`__export_…_<x>_<y>_<z>_cabi`) carry
//!   the current version;
//! - a bare version of the current `<major>.<minor>` line is history: an
//!   older release, or the current one only as the release something came
//!   with (`(<version>)`, `added in <version>`, `→ <version>`). A later one
//!   does not exist. Elsewhere the current contract is named as the package
//!   (the first rule checks it) or without a number. Manifests and lock
//!   files list dependencies, so this rule skips them;
//! - the SDK is versioned with the contract: `plugins/sdk/Cargo.toml` and
//!   every `Cargo.lock` entry of `map-plugin-sdk`.

use std::path::{Path, PathBuf};
use std::process::Command;

const PACKAGE: &str = "map-gateway:plugin";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A release number `x.y.z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Version(u64, u64, u64);

impl Version {
    fn parse(s: &str) -> Option<Version> {
        let mut parts = s.split('.').map(|p| if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) { None } else { p.parse().ok() });
        let v = Version(parts.next()??, parts.next()??, parts.next()??);
        parts.next().is_none().then_some(v)
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The current version and the frozen ones.
struct Contract {
    current: Version,
    frozen: Vec<Version>,
}

/// The version `wit/package.wit` declares; no other file of `wit/` may
/// declare the package.
fn contract(root: &Path) -> Contract {
    let wit = root.join("wit");
    let mut declared = Vec::new();
    let mut frozen = Vec::new();
    for entry in std::fs::read_dir(&wit).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().to_string();
        if path.is_dir() {
            frozen.extend(name.strip_prefix('v').and_then(Version::parse));
        } else if name.ends_with(".wit") {
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines() {
                if let Some(rest) = line.trim().strip_prefix("package ") {
                    declared.push((name.clone(), rest.trim_end_matches(';').to_string()));
                }
            }
        }
    }
    assert_eq!(declared.len(), 1, "the package is declared once, in wit/package.wit: {declared:?}");
    let (file, package) = &declared[0];
    assert_eq!(file, "package.wit", "the package is declared in wit/package.wit");
    let version = package.strip_prefix(&format!("{PACKAGE}@")).unwrap_or_else(|| panic!("wit/package.wit declares {package}, not {PACKAGE}@<version>"));
    let current = Version::parse(version).unwrap_or_else(|| panic!("wit/package.wit: {version} is not a version"));
    Contract { current, frozen }
}

/// The line of byte `at`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// Dependency lists: their versions are not the contract's.
fn is_manifest(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    matches!(name, "Cargo.toml" | "Cargo.lock" | "package.json" | "package-lock.json" | "pyproject.toml") || name.starts_with("requirements")
}

/// The mentions in `text` that do not match `contract`, as `line: what`.
fn mismatches(path: &str, text: &str, contract: &Contract) -> Vec<String> {
    let mut out = Vec::new();
    let current = contract.current;

    // `map-gateway:plugin@v` and `map-gateway:plugin/iface@v`.
    for (at, _) in text.match_indices(PACKAGE) {
        let rest = &text[at + PACKAGE.len()..];
        let rest = match rest.strip_prefix('/') {
            Some(r) => r.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '-'),
            None => rest,
        };
        let Some(rest) = rest.strip_prefix('@').filter(|r| r.starts_with(|c: char| c.is_ascii_digit())) else { continue };
        let token: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '.').collect();
        let token = token.trim_end_matches('.');
        match Version::parse(token) {
            Some(v) if v == current || contract.frozen.contains(&v) => {}
            _ => out.push(format!("{}: {PACKAGE}…@{token}, not @{current}", line_of(text, at))),
        }
    }

    // wit-bindgen's `__export_<interface>_<x>_<y>_<z>_cabi`.
    for (at, _) in text.match_indices("__export_") {
        let ident: String = text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        let Some(stem) = ident.strip_suffix("_cabi") else { continue };
        let parts: Vec<&str> = stem.rsplitn(4, '_').collect();
        if parts.len() < 4 {
            continue;
        }
        if let Some(v) = Version::parse(&format!("{}.{}.{}", parts[2], parts[1], parts[0])) {
            if v != current {
                out.push(format!("{}: {ident} carries {v}, not {current}", line_of(text, at)));
            }
        }
    }

    // Bare versions of the current line.
    if !is_manifest(path) {
        let bytes = text.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            if !bytes[at].is_ascii_digit() || (at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || matches!(bytes[at - 1], b'.' | b'@' | b'_' | b'-'))) {
                at += 1;
                continue;
            }
            let end = at + bytes[at..].iter().take_while(|b| b.is_ascii_digit() || **b == b'.').count();
            let token = text[at..end].trim_end_matches('.');
            let after = &text[at + token.len()..];
            let next = at.max(end);
            if after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                at = next;
                continue;
            }
            if let Some(v) = Version::parse(token).filter(|v| (v.0, v.1) == (current.0, current.1)) {
                let before: String = text[..at].chars().rev().take(12).collect::<Vec<_>>().into_iter().rev().collect::<String>().to_lowercase();
                let since = (before.ends_with('(') && after.starts_with(')')) || before.ends_with("added in ") || before.ends_with("→ ");
                if v > current {
                    out.push(format!("{}: {v} is later than the contract ({current})", line_of(text, at)));
                } else if v == current && !since {
                    out.push(format!(
                        "{}: a bare {v} names the current contract: write the package (`{PACKAGE}@{v}`) or say \"the current package\"",
                        line_of(text, at)
                    ));
                }
            }
            at = next;
        }
    }

    // The SDK's version, in its manifest and in lock files.
    if path == "plugins/sdk/Cargo.toml" || path.ends_with("Cargo.lock") {
        let sdk_block = path.ends_with("Cargo.lock");
        let mut in_sdk = !sdk_block;
        for (i, line) in text.lines().enumerate() {
            if sdk_block && line.starts_with("name = ") {
                in_sdk = line == "name = \"map-plugin-sdk\"";
            }
            if let Some(v) = line.strip_prefix("version = \"").and_then(|r| r.strip_suffix('"')) {
                if in_sdk && Version::parse(v) != Some(current) {
                    out.push(format!("{}: map-plugin-sdk {v}, not {current} (the SDK is versioned with the contract)", i + 1));
                }
                in_sdk = false;
            }
        }
    }
    out
}

#[test]
fn every_mention_of_the_contract_version_matches_wit() {
    let root = repo();
    let contract = contract(&root);
    let listed = Command::new("git").args(["ls-files", "-z"]).current_dir(&root).output().expect("run git ls-files");
    assert!(listed.status.success(), "git ls-files: {}", String::from_utf8_lossy(&listed.stderr));
    let mut found = Vec::new();
    let mut read = 0;
    for path in String::from_utf8(listed.stdout).unwrap().split('\0').filter(|p| !p.is_empty()) {
        let mut parts = path.split('/');
        let frozen = parts.next() == Some("wit") && parts.next().and_then(|d| d.strip_prefix('v')).and_then(Version::parse).is_some();
        if frozen {
            continue;
        }
        // Binary files (and files deleted but not yet staged) hold no mention.
        let Ok(text) = std::fs::read_to_string(root.join(path)) else { continue };
        read += 1;
        found.extend(mismatches(path, &text, &contract).into_iter().map(|m| format!("{path}:{m}")));
    }
    assert!(read > 100, "only {read} tracked files were read");
    assert!(found.is_empty(), "mentions that do not match wit/package.wit ({}):\n{}", contract.current, found.join("\n"));
}

/// The samples spell the package as `PKG` and the macro prefix as `EXP`, so
/// this file itself holds no mention for the test above to read.
fn sample(text: &str) -> String {
    text.replace("PKG", PACKAGE).replace("EXP", "__export")
}

#[test]
fn the_rules_catch_stale_mentions_and_let_history_be() {
    let contract = Contract { current: Version(7, 4, 2), frozen: vec![Version(6, 0, 0), Version(7, 4, 0)] };
    let good = sample(
        "import * as store from 'PKG/store@7.4.2';\n\
         The package is `PKG@7.4.2`; 6.0.0 components (`PKG@6.0.0`) load; `PKG/store@…`.\n\
         `metrics` (7.4.2), added in 7.4.2, 7.4.1 → 7.4.2; 7.4.1 added `emit-for`; any 7.4.x; WASI 7.4; 17.4.2; 7.4.2.1; v7.4.27\n\
         EXP_ns_pkg_rpc_7_4_2_cabi! EXP_world_plugin_cabi!",
    );
    assert_eq!(mismatches("README.md", &good, &contract), Vec::<String>::new());
    let stale = sample(
        "import { emit } from 'PKG/events@7.4.1';\n\
         built against PKG@7.5.0\n\
         EXP_ns_pkg_rpc_7_4_1_cabi!\n\
         each delegates to its 7.4.2 counterpart\n\
         7.4.3 adds",
    );
    let found = mismatches("notes.js", &stale, &contract);
    assert_eq!(found.iter().map(|m| m.split(':').next().unwrap()).collect::<Vec<_>>(), ["1", "2", "3", "4", "5"], "{found:#?}");
    let manifest = "[package]\nname = \"map-plugin-sdk\"\nversion = \"7.4.1\"\n\n[dependencies]\nserde = \"7.4.9\"\n";
    assert_eq!(mismatches("plugins/sdk/Cargo.toml", manifest, &contract).len(), 1);
    let lock = "version = 4\n\n[[package]]\nname = \"map-plugin-sdk\"\nversion = \"7.4.2\"\n\n[[package]]\nname = \"other\"\nversion = \"7.4.9\"\n";
    assert_eq!(mismatches("plugins/Cargo.lock", lock, &contract), Vec::<String>::new());
}
