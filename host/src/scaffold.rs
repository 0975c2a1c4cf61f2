//! `map-gateway plugin new NAME [--lang rust|python|js]`: writes a plugin
//! project that builds with one command and loads as is, with two methods
//! (a store write that emits an event, and a read) and a README with the
//! build and the `[plugins.NAME]` stanza.
//!
//! - Rust: on the plugin SDK (`map-plugin-sdk`), with the SDK workspace's
//!   `Cargo.lock`, so the first build uses the versions the SDK is tested with.
//! - Python (componentize-py) and JavaScript (componentize-js): the sources
//!   in `scaffold/python` and `scaffold/js`, a `build.sh`, and a copy of the
//!   gateway's `wit/` (what those toolchains bind against).
//!
//! Each depends on its language's SDK package, found as `sdk` says.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// The language of a new plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

/// What `plugin new` creates.
#[derive(Clone)]
pub struct Project {
    /// Plugin name: the `[plugins.NAME]` key, the crate name, the method namespace.
    pub name: String,
    pub dir: PathBuf,
    pub sdk: Sdk,
    pub lang: Lang,
}

mod files;
mod sdk;
use files::{JS, PYTHON, WIT};
pub use sdk::Sdk;

/// A plugin name: 1 to 64 of `a-z`, `0-9` and `-`, starting with a letter,
/// not ending with `-`, and not `map` (whose methods belong to the core).
pub fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        bail!("plugin name {name:?}: use 1 to 64 lower-case letters, digits and '-', starting with a letter (e.g. notes or task-board)");
    }
    if name == "map" {
        bail!("plugin name \"map\": the map/ methods belong to the gateway's core");
    }
    Ok(())
}

/// Write the project. Refuses a `dir` that exists and is not empty, and an
/// SDK path that is neither a checkout's SDK nor a folder of packages.
pub fn create(name: &str, dir: Option<PathBuf>, sdk: Option<PathBuf>, lang: Lang) -> anyhow::Result<Project> {
    check_name(name)?;
    let sdk = Sdk::find(sdk)?;
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    if dir.exists() && std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?.next().is_some() {
        bail!("{} exists and is not empty", dir.display());
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let project = Project { name: name.to_string(), dir, sdk, lang };
    match lang {
        Lang::Rust => write_rust(&project)?,
        Lang::Python => write_sources(&project, &PYTHON, ".venv/\n.sdk/\n__pycache__/\n*.wasm\n")?,
        Lang::Js => write_sources(&project, &JS, "node_modules/\n*.wasm\n")?,
    }
    Ok(project)
}

/// The Python or JavaScript sources with the name and the contract's
/// version filled in, `wit/`, a README.
fn write_sources(p: &Project, files: &[(&str, &str)], ignore: &str) -> anyhow::Result<()> {
    let version = contract_version()?;
    for (file, text) in WIT {
        let path = p.dir.join(file);
        std::fs::create_dir_all(path.parent().expect("wit/"))?;
        write(&path, text)?;
    }
    for (file, text) in files {
        let path = p.dir.join(file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let (python_path, python_package) = p.sdk.python(&version)?;
        let text = p
            .fill(text, &version)
            .replace("@SDK_JS@", &p.sdk.js(&version)?)
            .replace("@SDK_PYTHON_PATH@", &shell_word(&python_path))
            .replace("@SDK_PYTHON@", &shell_word(&python_package));
        write(&path, &text)?;
        if file.ends_with(".sh") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    write(&p.dir.join("README.md"), &readme(p))?;
    write(&p.dir.join(".gitignore"), ignore)
}

/// The version `wit/package.wit` gives the package `map-gateway:plugin`
/// (JavaScript imports name it: `map-gateway:plugin/store@…`), so the
/// sources match the `wit/` copied beside them.
pub fn contract_version() -> anyhow::Result<String> {
    let text = WIT.iter().find(|(f, _)| *f == "wit/package.wit").map(|(_, t)| *t).context("no wit/package.wit")?;
    let version = text.lines().find_map(|l| l.trim().strip_prefix("package map-gateway:plugin@")?.strip_suffix(';'));
    version.map(str::to_string).context("wit/package.wit declares no `package map-gateway:plugin@…;`")
}

fn write_rust(project: &Project) -> anyhow::Result<()> {
    std::fs::create_dir_all(project.dir.join("src"))?;
    write(&project.dir.join("Cargo.toml"), &cargo_toml(project, &contract_version()?)?)?;
    write(&project.dir.join("src/lib.rs"), &lib_rs(project))?;
    write(&project.dir.join("README.md"), &readme(project))?;
    write(&project.dir.join(".gitignore"), "/target\n")?;
    // The SDK workspace's lock file: the versions the SDK is built and
    // tested with (cargo drops the entries this project does not use).
    if let Some(lock) = project.sdk.cargo_lock() {
        write(&project.dir.join("Cargo.lock"), &lock)?;
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

impl Project {
    /// The first of the 1000 error codes the plugin starts with: from 90000
    /// up, where the MAP registry puts extensions it does not list, at a
    /// place drawn from the name (90000 + 1000 × (FNV-1a-32 of the name mod
    /// 900)), so that two new plugins rarely share one; the gateway refuses
    /// overlapping ranges in a tenant.
    pub fn error_base(&self) -> i64 {
        let hash = self.name.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
        90_000 + 1000 * i64::from(hash % 900)
    }

    /// A template with the plugin's name, contract version and error codes filled in.
    fn fill(&self, text: &str, contract_version: &str) -> String {
        let base = self.error_base();
        text.replace("@NAME@", &self.name)
            .replace("@CONTRACT_VERSION@", contract_version)
            .replace("@ERR_FIRST@", &base.to_string())
            .replace("@ERR_NOT_FOUND@", &(base + 1).to_string())
            .replace("@ERR_LAST@", &(base + 999).to_string())
    }

    /// The plugin folder of the checkout whose SDK the project uses (`run.sh` loads it).
    pub fn dist(&self) -> PathBuf {
        self.sdk.dist()
    }

    /// The crate's library name (`-` becomes `_`), which names the `.wasm`.
    pub fn lib_name(&self) -> String {
        self.name.replace('-', "_")
    }

    /// Where the build puts the component.
    pub fn wasm(&self) -> PathBuf {
        match self.lang {
            Lang::Rust => self.dir.join("target/wasm32-wasip2/release").join(format!("{}.wasm", self.lib_name())),
            Lang::Python | Lang::Js => self.dir.join(format!("{}.wasm", self.name)),
        }
    }

    /// The one command that builds it, run in the project's folder.
    pub fn build_command(&self) -> &'static str {
        match self.lang {
            Lang::Rust => "cargo build --release --target wasm32-wasip2",
            Lang::Python | Lang::Js => "./build.sh",
        }
    }
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// A path as one word for a POSIX shell: bare when it is plain, else in single quotes.
fn shell_word(s: &str) -> String {
    if s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn cargo_toml(p: &Project, version: &str) -> anyhow::Result<String> {
    let (dependency, patch) = p.sdk.rust(version)?;
    Ok(format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2021"
publish = false
description = "A map-gateway plugin"

[lib]
# A Wasm component: build with `cargo build --release --target wasm32-wasip2`.
crate-type = ["cdylib"]

[dependencies]
{dependency}
serde = {{ version = "1", features = ["derive"] }}
serde_json = "1"

[profile.release]
opt-level = "s"
lto = true
codegen-units = 1
strip = true

# A project of its own, also when it sits inside another cargo workspace.
[workspace]
{patch}"#,
        name = p.name,
    ))
}

fn lib_rs(p: &Project) -> String {
    const TEMPLATE: &str = r#"//! The `@NAME@` extension for map-gateway: `@NAME@/put` stores an item and
//! emits `@NAME@.put`, `@NAME@/get` reads one back. Built on the Rust plugin
//! SDK (map-plugin-sdk): see its crate docs for the store, batches,
//! errors, events and the other worlds (observers, HTTP, gRPC, timers).

use map_plugin_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The error codes this extension answers with, besides JSON-RPC's: 1000
/// from 90000 up, as the MAP registry asks of extensions it does not list.
/// The gateway refuses a range that overlaps another extension's in a
/// tenant (and says which): move it then.
const ERRORS: ErrorRange = ErrorRange::new(@ERR_FIRST@, @ERR_LAST@);
const ITEM_NOT_FOUND: i64 = ERRORS.code(@ERR_NOT_FOUND@);

/// What is stored, as JSON, in the collection `items`, under its id.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Item {
    id: String,
    text: String,
    /// The participant that stored it.
    created_by: String,
    /// Unix milliseconds.
    created_at: u64,
}

const ITEMS: Collection<Item> = Collection::new("items");

/// `@NAME@/put {text}`: the stored item.
#[derive(Deserialize)]
struct Put {
    text: String,
}

fn put(call: &Call) -> Result<Reply> {
    // Missing or malformed params answer -32602 with serde's message.
    let params: Put = call.params()?;
    let (id, now) = ids::new_id_at("item");
    let item = Item { id, text: params.text, created_by: call.caller.participant_id.clone(), created_at: now };
    ITEMS.put(&item.id, &item)?;
    events::emit("@NAME@.put", &json!({ "itemId": item.id, "createdBy": item.created_by }));
    Reply::json(&item)
}

/// `@NAME@/get {itemId}`: the item, or error @ERR_NOT_FOUND@.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Get {
    item_id: String,
}

fn get(call: &Call) -> Result<Reply> {
    let params: Get = call.params()?;
    match ITEMS.get(&params.item_id)? {
        Some(item) => Reply::json(&item),
        None => Err(Error::new(ITEM_NOT_FOUND, format!("No item {}", params.item_id)).with_details(json!({ "itemId": params.item_id }))),
    }
}

struct Plugin;

impl Extension for Plugin {
    const ERRORS: ErrorRange = ERRORS;
    const METHODS: Methods = Methods::new(&[("@NAME@/put", put), ("@NAME@/get", get)]);

    fn describe() -> Describe {
        // An extension outside the MAP registry: the name x-@NAME@, the URI
        // x-@NAME@:1, capabilities {"enabled": true} under "x-@NAME@".
        Describe::new("x-@NAME@", env!("CARGO_PKG_VERSION"))
    }
}

map_plugin_sdk::export_extension!(Plugin);
"#;
    p.fill(TEMPLATE, "")
}

fn readme(p: &Project) -> String {
    const TEMPLATE: &str = include_str!("scaffold/readme.md.in");
    let (intro, build, next) = readme_texts(p);
    let text = TEMPLATE.replace("@INTRO@", &intro).replace("@BUILD@", build).replace("@NEXT@", next);
    p.fill(&text, "")
        .replace("@LIB@", &p.lib_name())
        .replace("@WASM@", &toml_str(&p.wasm().to_string_lossy()))
        .replace("@WASM_SH@", &shell_word(&p.wasm().to_string_lossy()))
        .replace("@DIST@", &shell_word(&p.dist().to_string_lossy()))
}

/// The README's language-specific parts: its introduction, how to build, where to go next.
fn readme_texts(p: &Project) -> (String, &'static str, &'static str) {
    match p.lang {
        Lang::Rust => (
            format!("on the Rust plugin SDK (`map-plugin-sdk`, from {})", p.sdk.describe()),
            "```sh\nrustup target add wasm32-wasip2     # once\ncargo build --release --target wasm32-wasip2\n```\n\nThe component is `target/wasm32-wasip2/release/@LIB@.wasm`.",
            "- `src/lib.rs`: add a method by writing a handler `fn(&Call) -> Result<Reply>`\n  and listing it in `METHODS`.\n- The SDK's crate documentation (`cargo doc --open -p map-plugin-sdk`):\n  typed collections and ranges, atomic batches with compare-and-swap and\n  counters, ids, errors, events, configuration, and the export macros for\n  observers, timers, HTTP and gRPC.\n- The contract itself is the WIT in the gateway's `wit/` folder.",
        ),
        Lang::Python => (
            "in Python, built into a Wasm component with `componentize-py`".to_string(),
            "```sh\n./build.sh      # installs componentize-py in .venv the first time\n```\n\nThe component is `@NAME@.wasm` (about 18 MB: it carries CPython). The\ngateway compiles it once at the first start (10 to 20 s) and keeps the result\nin its artifact cache; later starts take a fraction of a second. Give it\n`memory_mb = 64` (a Python instance starts at about 13 MB).",
            "- `app.py`: add a method with `@ext.method(\"@NAME@/…\")`, its params a\n  dataclass. Import modules at the top only, and call the host only inside calls.\n- `map_plugin` is the Python plugin SDK (the package `map-gateway-plugin-sdk`,\n  found where build.sh says; its docstrings say what each call does): typed collections, pages, atomic batches with compare-and-swap and\n  counters, events, router calls, config, metrics, timers, observers.\n- `wit/` is a copy of the gateway's contract: every import and its\n  guarantees are documented there.",
        ),
        Lang::Js => (
            "in JavaScript on the JavaScript plugin SDK (`@map-gateway/plugin-sdk`), built into a Wasm component with `componentize-js`".to_string(),
            "```sh\n./build.sh      # npm installs componentize-js and esbuild the first time\n```\n\nThe component is `@NAME@.wasm` (about 12 MB: it carries the JavaScript\nengine). The gateway compiles it once at the first start (about 20 s) and\nkeeps the result in its artifact cache; later starts take a fraction of a\nsecond.",
            "- `plugin.js`: add a method by writing a handler `(call) => result` and\n  listing it in `methods`.\n- `node_modules/@map-gateway/plugin-sdk` is the JavaScript plugin SDK (its\n  README and `index.d.ts` say what each call does): JSON collections, pages,\n  atomic batches with compare-and-swap and counters, errors, events, router\n  calls, config, metrics, timers, observers, resources, `fetch`.\n- `wit/` is a copy of the gateway's contract: every import and its\n  guarantees are documented there; `build.mjs` names the world.",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["notes", "task-board", "a1"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "Notes", "1x", "x-", "a_b", "a/b", "map", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn templates_name_the_plugin_everywhere() {
        let p = Project { name: "task-board".into(), dir: PathBuf::from("/tmp/tb"), sdk: Sdk::Checkout("/src/plugins".into()), lang: Lang::Rust };
        let lib = lib_rs(&p);
        assert!(lib.contains(r#"("task-board/put", put)"#) && !lib.contains("@NAME@"));
        assert!(cargo_toml(&p, "1.2.3").unwrap().contains(r#"map-plugin-sdk = { path = "/src/plugins/sdk" }"#));
        let registry = Project { sdk: Sdk::Registry, ..p.clone() };
        assert!(cargo_toml(&registry, "1.2.3").unwrap().contains("map-plugin-sdk = \"1.2.3\"\n"));
        let readme = readme(&p);
        assert!(readme.contains(r#"path = "/tmp/tb/target/wasm32-wasip2/release/task_board.wasm""#), "{readme}");
        assert!(!readme.match_indices('@').any(|(at, _)| readme[at + 1..].starts_with(|c: char| c.is_ascii_uppercase())), "a placeholder is left: {readme}");
        assert!(readme.contains(r#"capabilities["x-task-board"]"#) && readme.contains("client.serverCapabilities['x-task-board']"), "{readme}");
        let base = p.error_base();
        assert!(lib.contains(&format!("ErrorRange::new({base}, {})", base + 999)) && lib.contains(&format!("ERRORS.code({})", base + 1)), "{lib}");
        assert!(lib.contains(r#"Describe::new("x-task-board""#));
    }

    #[test]
    fn error_ranges_are_drawn_from_the_name_above_90000() {
        let base = |name: &str| Project { name: name.into(), dir: PathBuf::new(), sdk: Sdk::Registry, lang: Lang::Rust }.error_base();
        // FNV-1a-32: stable across builds and platforms (the README names the rule).
        assert_eq!(base("notes"), 496_000);
        assert_ne!(base("notes"), base("todo"));
        for name in ["a", "notes", "task-board", "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"] {
            assert!((90_000..=989_000).contains(&base(name)) && base(name) % 1000 == 0, "{name}: {}", base(name));
        }
    }
}
