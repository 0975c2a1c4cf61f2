//! Each crate of the host depends in one direction inside itself, and the
//! crates on each other in one direction (Cargo refuses a circle between
//! crates). Inside a crate, no circle between the files of one directory
//! (the crate's `src` included; a sub-directory counts as one file of its
//! parent, and a `lib.rs` or `mod.rs` is a file like any other: it declares
//! modules and re-exports, and whatever else it holds is a dependency like
//! any). The gateway's own modules also keep the order of `GATEWAY_LAYERS`,
//! the one its `lib.rs` and the book's architecture page draw. Every file is
//! parsed as Rust: `use` items with their nested groups,
//! `crate::`/`super::`/`self::` paths in code and in macro bodies. A name
//! reached through a re-export counts as a dependency on where it is
//! defined, so `crate::core::X` re-exported from `crate::ids` is a dependency
//! on `ids`; and no top-level module re-exports another's items, so imports
//! say where things live.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use proc_macro2::{Spacing, TokenStream, TokenTree};
use syn::visit::{self, Visit};
use syn::{Item, UseTree, Visibility};

/// The crates of the host, each by its folder under `host/`, bottom to top.
const CRATES: &[&str] = &["crates/protocol", "crates/config", "crates/observe", "crates/store", "crates/core", "crates/cluster", "crates/plugin-host", "."];

/// The gateway's top-level modules, top to bottom.
/// `fuzzing` holds the fuzz targets, over every module below it.
/// `install`, `scaffold` and `health` belong to the binary (`plugin install`,
/// `plugin new`, `health`); `install` uses `scaffold`'s name rule, the others no other module.
const GATEWAY_LAYERS: &[&str] =
    &["fuzzing", "install", "scaffold", "health", "app", "transport", "federation", "acp", "journal", "token_client", "telemetry", "framing", "memory"];

/// Circles between files of one directory that are tolerated for a while:
/// each entry is one circle's files exactly, as `crate-folder/src/…` (a
/// sub-directory as `dir/`). A circle not listed fails; so does an entry
/// that no longer occurs. Most of these run through a `lib.rs` or `mod.rs`
/// that holds types its files share besides declaring them; moving those
/// types into files of their own removes the entry (as the core's `lib.rs`
/// did: `conn` and `gateway` hold what it held).
const KNOWN_CYCLES: &[&[&str]] = &[
    &["config/src/credentials.rs", "config/src/lib.rs", "config/src/plugins.rs", "config/src/tenants.rs"],
    &[
        "store/src/artifacts.rs",
        "store/src/breaker.rs",
        "store/src/cache.rs",
        "store/src/group_commit.rs",
        "store/src/leases.rs",
        "store/src/lib.rs",
        "store/src/ops.rs",
        "store/src/postgres.rs",
        "store/src/rollouts.rs",
        "store/src/sqlite.rs",
        "store/src/sqlite_ops.rs",
    ],
    // The tenant, its registry and the send path know each other (a tenant
    // holds its registry; sending reads the registry and queues on the tenant).
    &[
        "core/src/address.rs",
        "core/src/agent_permissions.rs",
        "core/src/conn.rs",
        "core/src/directory.rs",
        "core/src/extensions.rs",
        "core/src/federation.rs",
        "core/src/permissions.rs",
        "core/src/registry.rs",
        "core/src/send.rs",
        "core/src/tenant.rs",
    ],
    // The request path dispatches to the method handlers, which act on the gateway.
    &["core/src/gateway.rs", "core/src/lifecycle.rs", "core/src/methods/", "core/src/reloads.rs"],
    &["core/src/credentials/providers/mod.rs", "core/src/credentials/providers/oauth2.rs", "core/src/credentials/providers/static_secrets.rs"],
    &["core/src/events/filter.rs", "core/src/events/mod.rs"],
    &["core/src/fabric/local.rs", "core/src/fabric/log.rs", "core/src/fabric/mod.rs", "core/src/fabric/subscription.rs"],
    &[
        "cluster/src/asks.rs",
        "cluster/src/checkpoints.rs",
        "cluster/src/deliveries.rs",
        "cluster/src/directory/",
        "cluster/src/event_log.rs",
        "cluster/src/lib.rs",
        "cluster/src/nats_fabric.rs",
        "cluster/src/presence.rs",
        "cluster/src/rollout.rs",
    ],
    &["cluster/src/directory/apply.rs", "cluster/src/directory/mod.rs", "cluster/src/directory/publish.rs"],
    &["plugin-host/src/calls/", "plugin-host/src/lib.rs", "plugin-host/src/loading.rs", "plugin-host/src/set.rs"],
    &["plugin-host/src/calls/mod.rs", "plugin-host/src/calls/observer.rs", "plugin-host/src/calls/placement.rs", "plugin-host/src/calls/resources.rs"],
    &["src/federation/inbound.rs", "src/federation/link.rs", "src/federation/mod.rs"],
    &["src/transport/acp.rs", "src/transport/body.rs", "src/transport/http.rs", "src/transport/mod.rs", "src/transport/plugin_http.rs", "src/transport/ws.rs"],
];

/// A path inside the crate, without the leading `crate`: `["core", "registry"]`.
type ModPath = Vec<String>;

/// What one `use` leaf binds: a name, every public name of a module (`*`), or nothing (`as _`).
#[derive(Clone, PartialEq)]
enum Bind {
    Name(String),
    Glob,
    Anonymous,
}

/// A module (a file, or a `mod x { … }` inside one): where it is, what it
/// defines and what it imports, paths as written.
#[derive(Default)]
struct Module {
    file: String,
    defined: BTreeSet<String>,
    uses: Vec<(Bind, Vec<String>)>,
}

/// A path named in a file: by a `use` (then `public` says whether it is a
/// re-export) or in code.
struct Named {
    file: String,
    scope: ModPath,
    path: Vec<String>,
    public_use: bool,
}

/// What the checker knows of a crate: its modules and every path its files name.
#[derive(Default)]
struct Crate {
    modules: BTreeMap<ModPath, Module>,
    named: Vec<Named>,
}

/// A file using another: `via` is the path as written.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Dep {
    from: String,
    to: String,
    via: String,
}

/// The module a source file holds, from its path under `src`; `None` for
/// `main.rs`, a crate of its own.
fn module_of(rel: &str) -> Option<ModPath> {
    let mut parts: Vec<String> = rel.trim_end_matches(".rs").split('/').map(String::from).collect();
    match parts.as_slice() {
        [only] if only == "main" => return None,
        [only] if only == "lib" => return Some(Vec::new()),
        _ => {}
    }
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    Some(parts)
}

/// Reads source files (paths relative to `src`, with `/`) into a `Crate`.
fn read_crate(files: &[(String, String)]) -> Crate {
    let mut krate = Crate::default();
    for (rel, text) in files {
        let Some(scope) = module_of(rel) else { continue };
        let parsed = syn::parse_file(text).unwrap_or_else(|e| panic!("{rel}: {e}"));
        read_items(&mut krate, rel, &scope, &parsed.items);
    }
    krate
}

fn read_items(krate: &mut Crate, file: &str, scope: &ModPath, items: &[Item]) {
    krate.modules.entry(scope.clone()).or_default().file = file.to_string();
    for item in items {
        if let Some(name) = item_name(item) {
            krate.modules.get_mut(scope).unwrap().defined.insert(name);
        }
        match item {
            Item::Use(u) => read_use(krate, file, scope, u),
            Item::Mod(m) => {
                if let Some((_, inner)) = &m.content {
                    let mut inner_scope = scope.clone();
                    inner_scope.push(m.ident.to_string());
                    read_items(krate, file, &inner_scope, inner);
                }
            }
            other => Paths { krate, file, scope }.visit_item(other),
        }
    }
}

fn item_name(item: &Item) -> Option<String> {
    let ident = match item {
        Item::Const(i) => &i.ident,
        Item::Enum(i) => &i.ident,
        Item::Fn(i) => &i.sig.ident,
        Item::Macro(i) => i.ident.as_ref()?,
        Item::Mod(i) => &i.ident,
        Item::Static(i) => &i.ident,
        Item::Struct(i) => &i.ident,
        Item::Trait(i) => &i.ident,
        Item::TraitAlias(i) => &i.ident,
        Item::Type(i) => &i.ident,
        Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

fn read_use(krate: &mut Crate, file: &str, scope: &ModPath, u: &syn::ItemUse) {
    if u.leading_colon.is_some() {
        return; // `::name` is always another crate
    }
    let mut leaves = Vec::new();
    use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
    let public_use = !matches!(u.vis, Visibility::Inherited);
    for (bind, path) in leaves {
        krate.modules.entry(scope.clone()).or_default().uses.push((bind, path.clone()));
        krate.named.push(Named { file: file.to_string(), scope: scope.clone(), path, public_use });
    }
}

/// Every leaf of a `use` tree, groups nested to any depth: `a::{b, c::{d, self}}`.
fn use_leaves(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Bind, Vec<String>)>) {
    let leaf = |prefix: &[String], ident: &syn::Ident| {
        let mut path = prefix.to_vec();
        if ident != "self" {
            path.push(ident.to_string());
        }
        path
    };
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) => {
            let path = leaf(prefix, &n.ident);
            out.push((Bind::Name(path.last().cloned().unwrap_or_default()), path));
        }
        UseTree::Rename(r) => {
            let bind = if r.rename == "_" { Bind::Anonymous } else { Bind::Name(r.rename.to_string()) };
            out.push((bind, leaf(prefix, &r.ident)));
        }
        UseTree::Glob(_) => out.push((Bind::Glob, prefix.clone())),
        UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(t, prefix, out);
            }
        }
    }
}

/// Collects the multi-segment paths in code (`crate::x::y()`, `super::T`,
/// `child::f`), including those inside macro invocations, and `use` items in blocks.
struct Paths<'a> {
    krate: &'a mut Crate,
    file: &'a str,
    scope: &'a ModPath,
}

impl Paths<'_> {
    fn note(&mut self, path: Vec<String>) {
        if path.len() >= 2 {
            self.krate.named.push(Named { file: self.file.to_string(), scope: self.scope.clone(), path, public_use: false });
        }
    }

    /// Paths in a macro's tokens, which syn leaves unparsed: `ident :: ident …`.
    fn scan(&mut self, tokens: TokenStream) {
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tokens.len() {
            match &tokens[i] {
                TokenTree::Group(g) => self.scan(g.stream()),
                TokenTree::Ident(first) => {
                    let mut path = vec![first.to_string()];
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(TokenTree::Ident(next))) =
                        (tokens.get(i + 1), tokens.get(i + 2), tokens.get(i + 3))
                    {
                        if !(a.as_char() == ':' && a.spacing() == Spacing::Joint && b.as_char() == ':') {
                            break;
                        }
                        path.push(next.to_string());
                        i += 3;
                    }
                    self.note(path);
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() {
            self.note(p.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        visit::visit_macro(self, m);
        self.scan(m.tokens.clone());
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        read_use(self.krate, self.file, self.scope, u);
    }

    // A module declared inside a function body is rare; its paths would be
    // read against the wrong scope, so they are left out.
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {}

    // `pub(in crate::x)` restricts visibility; it uses nothing.
    fn visit_visibility(&mut self, _: &'ast Visibility) {}
}

impl Crate {
    /// A path as written in `scope`, made absolute; `None` when it leads
    /// out of the crate (another crate, the prelude) or to a name defined in
    /// `scope` itself.
    fn absolute(&self, scope: &[String], path: &[String], depth: usize) -> Option<ModPath> {
        // `crate::`, `self::`, `super::super::`, …
        let mut base: Option<ModPath> = None;
        let mut rest = path;
        while let Some((first, tail)) = rest.split_first() {
            match first.as_str() {
                "crate" if base.is_none() => base = Some(Vec::new()),
                "self" if base.is_none() => base = Some(scope.to_vec()),
                "super" => base.get_or_insert_with(|| scope.to_vec()).pop().map(drop)?,
                _ => break,
            }
            rest = tail;
        }
        if let Some(base) = base {
            return Some([base.as_slice(), rest].concat());
        }
        let first = path.first()?;
        if self.modules.contains_key(&[scope, &path[..1]].concat()) {
            return Some([scope, path].concat());
        }
        if depth >= 16 {
            return None;
        }
        // A name this scope imports: `use crate::rpc; … rpc::codes::X`.
        let module = self.modules.get(scope)?;
        let (_, imported) = module.uses.iter().find(|(b, _)| *b == Bind::Name(first.clone()))?;
        let imported = self.absolute(scope, imported, depth + 1)?;
        Some([imported.as_slice(), &path[1..]].concat())
    }

    /// The file that defines what an absolute path names, seeing through
    /// re-exports and imports of the modules on the way.
    fn resolve(&self, path: &[String], depth: usize) -> Option<String> {
        if depth > 16 {
            return None;
        }
        let known = (0..=path.len()).rev().find(|n| self.modules.contains_key(&path[..*n]))?;
        let (module_path, rest) = path.split_at(known);
        let module = &self.modules[module_path];
        let Some(name) = rest.first() else { return Some(module.file.clone()) };
        if module.defined.contains(name) {
            return Some(module.file.clone());
        }
        if let Some((_, imported)) = module.uses.iter().find(|(b, _)| *b == Bind::Name(name.clone())) {
            let target = self.absolute(module_path, imported, 0)?;
            return self.resolve(&[target.as_slice(), &rest[1..]].concat(), depth + 1);
        }
        for (_, glob) in module.uses.iter().filter(|(b, _)| *b == Bind::Glob) {
            let Some(source) = self.absolute(module_path, glob, 0) else { continue };
            if self.modules.get(&source).is_some_and(|m| m.defined.contains(name) || m.uses.iter().any(|(b, _)| *b == Bind::Name(name.clone()))) {
                return self.resolve(&[source.as_slice(), rest].concat(), depth + 1);
            }
        }
        // Not found (made by a macro, say): the module's own file.
        Some(module.file.clone())
    }

    /// Every use of one file by another.
    fn deps(&self) -> Vec<Dep> {
        let mut deps = BTreeSet::new();
        for n in &self.named {
            let Some(target) = self.absolute(&n.scope, &n.path, 0) else { continue };
            let Some(to) = self.resolve(&target, 0) else { continue };
            if to != n.file {
                deps.insert(Dep { from: n.file.clone(), to, via: n.path.join("::") });
            }
        }
        deps.into_iter().collect()
    }

    /// Re-exports (`pub use`, `pub(crate) use`, …) of another top-level
    /// module's items: they hide where a dependency goes.
    fn foreign_reexports(&self) -> Vec<String> {
        let mut found = Vec::new();
        for n in self.named.iter().filter(|n| n.public_use) {
            let Some(own) = top_level(&n.file) else { continue };
            let Some(target) = self.absolute(&n.scope, &n.path, 0) else { continue };
            if target.first().is_some_and(|t| *t != own) {
                found.push(format!("{}: re-exports crate::{}; import it from where it lives", n.file, target.join("::")));
            }
        }
        found
    }
}

/// The top-level module a file belongs to; `None` for the crate root.
fn top_level(file: &str) -> Option<String> {
    let first = file.split('/').next()?.trim_end_matches(".rs");
    (first != "lib" && first != "main").then(|| first.to_string())
}

/// Uses against the layer order, and files outside every layer.
fn layer_violations(deps: &[Dep], files: &[String], layers: &[&str]) -> Vec<String> {
    let rank = |m: &str| layers.iter().position(|l| *l == m);
    let mut found = Vec::new();
    for file in files {
        if let Some(m) = top_level(file).filter(|m| rank(m).is_none()) {
            found.push(format!("{file}: module {m} is not in LAYERS: place it"));
        }
    }
    for d in deps {
        let (Some(from), Some(to)) = (top_level(&d.from), top_level(&d.to)) else { continue };
        if let (Some(f), Some(t)) = (rank(&from), rank(&to)) {
            if t < f {
                found.push(format!("{}: {from} uses {} ({}), which is above it", d.from, d.via, d.to));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// A circle between files of one directory: its files, and the paths that tie them.
#[derive(Debug)]
struct Cycle {
    files: BTreeSet<String>,
    ties: Vec<String>,
}

/// The node a file is in the graph of directory `dir` (`""` for `src`
/// itself): itself when it is directly in `dir`, `dir/sub/` when it is
/// further down; `None` outside `dir`.
fn node_in(dir: &str, file: &str) -> Option<String> {
    let rest = if dir.is_empty() { file } else { file.strip_prefix(dir)?.strip_prefix('/')? };
    match rest.split_once('/') {
        Some((sub, _)) if dir.is_empty() => Some(format!("{sub}/")),
        Some((sub, _)) => Some(format!("{dir}/{sub}/")),
        None => Some(file.to_string()),
    }
}

/// Every circle between files of one directory (`src` included): the
/// strongly connected groups of more than one file.
fn cycles(deps: &[Dep]) -> Vec<Cycle> {
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeMap<String, BTreeSet<String>>>> = BTreeMap::new();
    for d in deps {
        let parts: Vec<&str> = d.from.split('/').collect();
        for depth in 0..parts.len() {
            let dir = parts[..depth].join("/");
            let (Some(a), Some(b)) = (node_in(&dir, &d.from), node_in(&dir, &d.to)) else { continue };
            if a != b {
                graphs.entry(dir).or_default().entry(a).or_default().entry(b).or_default().insert(d.via.clone());
            }
        }
    }
    let mut found = Vec::new();
    for graph in graphs.values() {
        for group in strongly_connected(graph) {
            let mut ties = Vec::new();
            for a in &group {
                for (b, via) in graph[a].iter().filter(|(b, _)| group.contains(*b)) {
                    ties.push(format!("{a} -> {b}: {}", via.iter().cloned().collect::<Vec<_>>().join(", ")));
                }
            }
            found.push(Cycle { files: group, ties });
        }
    }
    found
}

/// Tarjan's algorithm; only groups of two or more nodes.
fn strongly_connected(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<BTreeSet<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        index: BTreeMap<&'g str, (usize, usize)>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        groups: Vec<BTreeSet<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let n = s.index.len();
        s.index.insert(v, (n, n));
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flat_map(|e| e.keys()) {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let low = s.index[w.as_str()].1.min(s.index[v].1);
                s.index.get_mut(v).unwrap().1 = low;
            } else if s.on_stack.contains(w.as_str()) {
                let low = s.index[w.as_str()].0.min(s.index[v].1);
                s.index.get_mut(v).unwrap().1 = low;
            }
        }
        if s.index[v].0 == s.index[v].1 {
            let mut group = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                group.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if group.len() > 1 {
                s.groups.push(group);
            }
        }
    }
    let mut s = State { graph, index: BTreeMap::new(), stack: Vec::new(), on_stack: BTreeSet::new(), groups: Vec::new() };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.groups
}

/// Circles measured against the list of known ones: what fails (a circle
/// not listed, an entry that no longer occurs) and what is only reported.
fn judge_cycles(found: &[Cycle], known: &[&[&str]]) -> (Vec<String>, Vec<String>) {
    let known: Vec<BTreeSet<String>> = known.iter().map(|k| k.iter().map(|f| f.to_string()).collect()).collect();
    let describe = |c: &Cycle| format!("{}\n    {}", c.files.iter().cloned().collect::<Vec<_>>().join(", "), c.ties.join("\n    "));
    let mut failures = Vec::new();
    let mut reported = Vec::new();
    for c in found {
        if known.contains(&c.files) {
            reported.push(format!("known, to be removed: {}", describe(c)));
        } else {
            failures.push(format!("files import each other: {}", describe(c)));
        }
    }
    for k in &known {
        if !found.iter().any(|c| c.files == *k) {
            failures.push(format!("KNOWN_CYCLES lists a circle that no longer occurs: {k:?}; remove the entry"));
        }
    }
    (failures, reported)
}

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

/// A crate's Rust files (its folder under `host/`): path relative to its
/// `src` (with `/`), and text.
fn sources(krate: &str) -> Vec<(String, String)> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(krate).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut out: Vec<(String, String)> = files
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(&src).unwrap().components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect::<Vec<_>>().join("/");
            (rel, std::fs::read_to_string(f).unwrap())
        })
        .collect();
    out.sort();
    out
}

/// A file as `KNOWN_CYCLES` and the messages name it.
fn in_crate(krate: &str, file: &str) -> String {
    match krate {
        "." => format!("src/{file}"),
        _ => format!("{}/src/{file}", krate.trim_start_matches("crates/")),
    }
}

#[test]
fn the_gateways_modules_depend_only_downward() {
    let sources = sources(".");
    let files: Vec<String> = sources.iter().map(|(f, _)| f.clone()).filter(|f| f != "main.rs").collect();
    let deps = read_crate(&sources).deps();
    let violations = layer_violations(&deps, &files, GATEWAY_LAYERS);
    assert!(violations.is_empty(), "imports against the direction:\n{}", violations.join("\n"));
    let seen: BTreeSet<String> = files.iter().filter_map(|f| top_level(f)).collect();
    assert_eq!(seen.len(), GATEWAY_LAYERS.len(), "every layer has code: {seen:?}");
}

#[test]
fn every_crate_is_checked() {
    let mut found: Vec<String> = std::fs::read_dir(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates"))
        .unwrap()
        .flatten()
        .map(|e| format!("crates/{}", e.file_name().to_string_lossy()))
        .collect();
    found.push(".".into());
    found.sort();
    let mut listed: Vec<String> = CRATES.iter().map(|c| c.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed, "CRATES lists every crate under host/");
}

#[test]
fn no_module_of_the_gateway_re_exports_another() {
    let found = read_crate(&sources(".")).foreign_reexports();
    assert!(found.is_empty(), "re-exports across top-level modules:\n{}", found.join("\n"));
}

#[test]
fn files_of_one_directory_depend_in_one_direction() {
    let mut found = Vec::new();
    for krate in CRATES {
        for mut c in cycles(&read_crate(&sources(krate)).deps()) {
            c.files = c.files.iter().map(|f| in_crate(krate, f)).collect();
            found.push(c);
        }
    }
    let (failures, reported) = judge_cycles(&found, KNOWN_CYCLES);
    for r in &reported {
        eprintln!("{r}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// The checker itself, on small crates made here.

fn tree(files: &[(&str, &str)]) -> Crate {
    read_crate(&files.iter().map(|(f, t)| (f.to_string(), t.to_string())).collect::<Vec<_>>())
}

fn edges(krate: &Crate) -> BTreeSet<(String, String)> {
    krate.deps().into_iter().map(|d| (d.from, d.to)).collect()
}

fn pairs(list: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

#[test]
fn a_circle_between_two_files_of_one_module_fails() {
    let krate = tree(&[
        ("lib.rs", "mod m;"),
        ("m/mod.rs", "mod a; mod b;"),
        ("m/a.rs", "use super::b::Bee; pub struct Ay;"),
        ("m/b.rs", "pub struct Bee; fn f() -> crate::m::a::Ay { todo!() }"),
    ]);
    let found = cycles(&krate.deps());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].files, ["m/a.rs", "m/b.rs"].iter().map(|s| s.to_string()).collect());
    assert!(found[0].ties.iter().any(|t| t.contains("super::b::Bee")) && found[0].ties.iter().any(|t| t.contains("crate::m::a::Ay")), "{found:?}");
    let (failures, _) = judge_cycles(&found, &[]);
    assert_eq!(failures.len(), 1, "{failures:?}");
    // Listed as known, it is only reported; a listed circle that is gone fails.
    let (failures, reported) = judge_cycles(&found, &[&["m/a.rs", "m/b.rs"]]);
    assert!(failures.is_empty() && reported.len() == 1, "{failures:?} {reported:?}");
    let (failures, _) = judge_cycles(&[], &[&["m/a.rs", "m/b.rs"]]);
    assert_eq!(failures.len(), 1, "{failures:?}");
}

#[test]
fn a_mod_rs_that_holds_what_its_files_use_is_in_the_circle() {
    let krate =
        tree(&[("lib.rs", "mod m;"), ("m/mod.rs", "mod a; pub struct Shared; fn run() { a::f() }"), ("m/a.rs", "pub fn f() { let _ = super::Shared; }")]);
    let found = cycles(&krate.deps());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].files, ["m/a.rs", "m/mod.rs"].iter().map(|s| s.to_string()).collect());
}

#[test]
fn a_sub_directory_is_one_file_of_its_parent() {
    let krate = tree(&[
        ("lib.rs", "mod m;"),
        ("m/mod.rs", "mod a; mod sub;"),
        ("m/a.rs", "pub fn f() { super::sub::x::g() }"),
        ("m/sub/mod.rs", "pub mod x; pub mod y;"),
        ("m/sub/x.rs", "pub fn g() { super::y::h() }"),
        ("m/sub/y.rs", "pub fn h() { crate::m::a::f() }"),
    ]);
    let found = cycles(&krate.deps());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].files, ["m/a.rs", "m/sub/"].iter().map(|s| s.to_string()).collect());
}

#[test]
fn a_nested_use_group_is_read_completely() {
    let krate = tree(&[
        ("lib.rs", "mod a; mod b; mod c; mod d; mod e;"),
        ("a.rs", "use crate::{b::{Bee, c::{self as _, C}}, d};\nfn f() { e::g(); }\nuse crate::e;"),
        ("b.rs", "pub struct Bee; pub mod c { pub struct C; }"),
        ("c.rs", ""),
        ("d.rs", ""),
        ("e.rs", "pub fn g() {}"),
    ]);
    assert_eq!(edges(&krate), pairs(&[("a.rs", "b.rs"), ("a.rs", "d.rs"), ("a.rs", "e.rs")]));
}

#[test]
fn paths_in_code_and_macros_count() {
    let krate = tree(&[
        ("lib.rs", "mod m; mod ids;"),
        ("ids.rs", "pub fn now() -> u64 { 0 }"),
        ("m/mod.rs", "mod a; mod b; mod c;"),
        ("m/a.rs", "fn f() { println!(\"{}\", crate::ids::now()); }"),
        ("m/b.rs", "fn f() -> self::super::c::T { todo!() }"),
        ("m/c.rs", "pub struct T; #[cfg(test)] mod tests { use super::*; use super::super::a; }"),
    ]);
    assert_eq!(edges(&krate), pairs(&[("m/a.rs", "ids.rs"), ("m/b.rs", "m/c.rs"), ("m/c.rs", "m/a.rs")]));
}

#[test]
fn a_re_export_is_seen_through() {
    let krate = tree(&[
        ("lib.rs", "mod core; mod ids;"),
        ("ids.rs", "pub fn now() -> u64 { 0 }"),
        ("core/mod.rs", "pub(crate) use crate::ids; pub use inner::Thing; mod inner; mod user;"),
        ("core/inner.rs", "pub struct Thing;"),
        ("core/user.rs", "use crate::core::ids::now; use super::Thing;"),
    ]);
    assert_eq!(
        edges(&krate),
        pairs(&[("core/mod.rs", "ids.rs"), ("core/mod.rs", "core/inner.rs"), ("core/user.rs", "ids.rs"), ("core/user.rs", "core/inner.rs")])
    );
    let found = krate.foreign_reexports();
    assert!(found.len() == 1 && found[0].contains("core/mod.rs") && found[0].contains("crate::ids"), "{found:?}");
}

#[test]
fn an_upward_import_between_layers_fails() {
    let krate =
        tree(&[("lib.rs", "mod high; mod low;"), ("high.rs", "use crate::low::f;"), ("low/mod.rs", "mod x;"), ("low/x.rs", "fn g() { crate::high::h() }")]);
    let files: Vec<String> = ["lib.rs", "high.rs", "low/mod.rs", "low/x.rs"].iter().map(|s| s.to_string()).collect();
    let found = layer_violations(&krate.deps(), &files, &["high", "low"]);
    assert!(found.len() == 1 && found[0].starts_with("low/x.rs: low uses crate::high::h"), "{found:?}");
    assert!(layer_violations(&krate.deps(), &files, &["high"]).iter().any(|v| v.contains("module low is not in LAYERS")));
}
