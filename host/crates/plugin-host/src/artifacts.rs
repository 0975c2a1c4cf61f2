//! Where a plugin's compiled code comes from, first found first: this
//! node's disk cache, the artifacts the gateways of one PostgreSQL database
//! share (`store::Artifacts`), or the compiler (cranelift: seconds, tens of
//! them for a Python or JavaScript component). What is fetched or compiled
//! goes into the disk cache too. A key covers the component's bytes and the
//! engine's settings, so a changed file or another gateway build compiles
//! afresh (and `Component::deserialize` checks the engine again).
//!
//! Loading an artifact runs the machine code in it: it must come from a
//! source trusted like the gateway itself. The data directory is one. So is
//! the database: it already holds every plugin's state and the leases that
//! decide who writes it, so whoever can write to it controls what plugins
//! do; its credentials are guarded like the nodes'.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::Engine;

use map_store::{Artifacts, StoreError};

/// How long a node waits for another to finish compiling the same
/// component before it compiles on its own.
const TURN_WAIT: Duration = Duration::from_secs(120);
/// How long one read or write of a shared artifact may take.
const SHARED_IO: Duration = Duration::from_secs(60);

/// Where a loaded plugin's compiled code came from (`/admin/plugins`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// This node's disk cache.
    Cache,
    /// The artifacts shared on the database.
    Shared,
    /// Compiled by this node.
    Compiled,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Cache => "cache",
            Origin::Shared => "shared",
            Origin::Compiled => "compiled",
        }
    }
}

/// A component to load: its bytes, under a plugin name.
pub struct Source<'a> {
    pub engine: &'a Engine,
    pub name: &'a str,
    pub bytes: Vec<u8>,
    /// Hex SHA-256 of `bytes`.
    pub digest: &'a str,
    pub cache_dir: &'a Path,
    pub shared: Option<&'a Artifacts>,
}

/// The compiled component, and where it came from.
pub async fn load(src: Source<'_>) -> anyhow::Result<(Arc<Component>, Origin)> {
    let key = key(src.engine, &src.bytes);
    let file = src.cache_dir.join(format!("{}-{}.cwasm", src.name, &key[..24]));
    let (engine, name, path) = (src.engine.clone(), src.name.to_string(), file.clone());
    if let Some(c) = blocking(move || from_disk(&engine, &path, &name)).await? {
        return Ok((c, Origin::Cache));
    }
    let Some(shared) = src.shared else {
        let (component, _) = compile(&src, &file).await?;
        return Ok((component, Origin::Compiled));
    };
    if let Some(c) = from_shared(&src, &file, within(SHARED_IO, shared.get(&key)).await).await {
        return Ok((c, Origin::Shared));
    }
    // Nobody stored it yet: wait for the turn to compile it; whoever had the
    // turn before may have stored it meanwhile.
    let mut turn = match within(TURN_WAIT + SHARED_IO, shared.turn(&key, TURN_WAIT)).await {
        Ok(turn) => Some(turn),
        Err(e) => {
            tracing::warn!(plugin = src.name, error = %e, "no turn to compile for the shared store; compiling without one");
            None
        }
    };
    if let Some(t) = turn.as_mut() {
        if let Some(c) = from_shared(&src, &file, within(SHARED_IO, t.stored()).await).await {
            return Ok((c, Origin::Shared));
        }
    }
    let (component, artifact) = compile(&src, &file).await?;
    if let Some(t) = turn {
        match within(SHARED_IO, t.publish(src.name, src.digest, &artifact)).await {
            Ok(()) => tracing::info!(plugin = src.name, bytes = artifact.len(), "shared the compiled code"),
            Err(e) => tracing::warn!(plugin = src.name, error = %e, "sharing the compiled code failed"),
        }
    }
    Ok((component, Origin::Compiled))
}

/// A call to the shared store, bounded by `limit`: its result, or why there is none.
async fn within<T>(limit: Duration, call: impl std::future::Future<Output = Result<T, StoreError>>) -> Result<T, String> {
    match tokio::time::timeout(limit, call).await {
        Ok(r) => r.map_err(|e| e.to_string()),
        Err(_) => Err(format!("the database did not answer within {} s", limit.as_secs())),
    }
}

/// The cache key: hex SHA-256 of the component and the engine's compatibility hash.
fn key(engine: &Engine, bytes: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(bytes);
    std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut HashWriter(&mut hasher));
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> anyhow::Result<T> {
    // Compiling and mapping take a while; keep them off the async workers.
    tokio::task::spawn_blocking(f).await.context("a plugin load stopped")
}

fn from_disk(engine: &Engine, file: &Path, name: &str) -> Option<Arc<Component>> {
    if !file.exists() {
        return None;
    }
    // SAFETY: written by `precompile_component` into our own cache (see the module's note on trust).
    match unsafe { Component::deserialize_file(engine, file) } {
        Ok(c) => Some(Arc::new(c)),
        Err(e) => {
            tracing::warn!(plugin = name, error = %e, "cached artifact unusable; recompiling");
            None
        }
    }
}

/// A stored artifact that loads, also written to the disk cache. One that
/// does not (or a failed read) is logged and passed over: the caller compiles.
async fn from_shared(src: &Source<'_>, file: &Path, stored: Result<Option<Vec<u8>>, String>) -> Option<Arc<Component>> {
    let artifact = match stored {
        Ok(a) => a?,
        Err(e) => {
            tracing::warn!(plugin = src.name, error = %e, "reading shared compiled code failed; compiling here");
            return None;
        }
    };
    let (engine, name, file) = (src.engine.clone(), src.name.to_string(), file.to_path_buf());
    let loaded = blocking(move || {
        // SAFETY: stored by a gateway of this database (see the module's note on trust).
        let c = unsafe { Component::deserialize(&engine, &artifact) }?;
        write_disk(&file, &name, &artifact);
        anyhow::Ok(c)
    });
    match loaded.await.and_then(|r| r) {
        Ok(c) => {
            tracing::info!(plugin = src.name, "loaded compiled code from the shared store");
            Some(Arc::new(c))
        }
        Err(e) => {
            tracing::warn!(plugin = src.name, error = %format!("{e:#}"), "shared compiled code unusable; recompiling");
            None
        }
    }
}

/// Compile, write the disk cache: the component and its artifact.
async fn compile(src: &Source<'_>, file: &Path) -> anyhow::Result<(Arc<Component>, Arc<Vec<u8>>)> {
    let (engine, name, bytes, file) = (src.engine.clone(), src.name.to_string(), src.bytes.clone(), file.to_path_buf());
    blocking(move || {
        let started = std::time::Instant::now();
        let artifact = engine.precompile_component(&bytes)?;
        tracing::info!(plugin = %name, ms = started.elapsed().as_millis() as u64, "compiled plugin");
        write_disk(&file, &name, &artifact);
        // SAFETY: just produced by this engine.
        let component = unsafe { Component::deserialize(&engine, &artifact)? };
        Ok((Arc::new(component), Arc::new(artifact)))
    })
    .await?
}

/// Best effort: a cache that cannot be written costs a compile later.
fn write_disk(file: &Path, name: &str, artifact: &[u8]) {
    let Some(dir) = file.parent() else { return };
    let written = std::fs::create_dir_all(dir).and_then(|()| {
        remove_stale(dir, name, file);
        // A name of its own: another gateway may be writing the same artifact.
        let tmp = file.with_extension(format!("{}.tmp", map_protocol::ids::ulid()));
        std::fs::write(&tmp, artifact)?;
        std::fs::rename(&tmp, file)
    });
    if let Err(e) = written {
        tracing::warn!(plugin = name, error = %e, cache = %dir.display(), "writing the plugin cache failed");
    }
}

/// Other artifacts of the same plugin name (older versions).
fn remove_stale(dir: &Path, name: &str, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p: PathBuf = e.path();
        let ours =
            p.file_name().and_then(|f| f.to_str()).and_then(|f| f.strip_prefix(name)).is_some_and(|rest| rest.starts_with('-') && rest.len() == 1 + 24 + 6);
        if p != keep && ours && p.extension().is_some_and(|x| x == "cwasm") {
            let _ = std::fs::remove_file(p);
        }
    }
}

struct HashWriter<'a>(&'a mut Sha256);

impl std::hash::Hasher for HashWriter<'_> {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}
