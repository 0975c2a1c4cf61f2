//! The wasmtime engine: async calls, epoch interruption for deadlines, the
//! pooling allocator, and compiled artifacts cached on disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances; deadlines are checked at this granularity.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// Largest linear memory any plugin may be given (the per-plugin cap is lower).
pub const MAX_MEMORY_BYTES: usize = 1 << 30;

/// An engine with room for `instances` live component instances.
pub fn build(instances: usize) -> anyhow::Result<Engine> {
    let mut config = base_config();
    let mut pool = PoolingAllocationConfig::default();
    let n = instances as u32;
    // A component holds a few core instances and usually one or two memories.
    pool.total_component_instances(n)
        .total_core_instances(n * 8)
        .total_memories(n * 2)
        .total_tables(n * 4)
        .max_memory_size(MAX_MEMORY_BYTES);
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    let engine = match Engine::new(&config) {
        Ok(e) => e,
        Err(e) => {
            // Some hosts refuse the large virtual reservation; run without pooling there.
            tracing::warn!(error = %e, "pooling allocator unavailable; instantiating on demand");
            Engine::new(&base_config())?
        }
    };
    start_ticker(&engine);
    Ok(engine)
}

fn base_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.cranelift_opt_level(wasmtime::OptLevel::Speed);
    // `perf` names plugin functions from /tmp/perf-PID.map when this is set.
    if std::env::var_os("MAP_GATEWAY_PERF_MAP").is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    config
}

/// One thread advances every engine's epoch; it holds only a weak handle.
fn start_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("wasm-epoch".into())
        .spawn(move || loop {
            std::thread::sleep(EPOCH_TICK);
            match weak.upgrade() {
                Some(e) => e.increment_epoch(),
                None => return,
            }
        })
        .expect("spawning the epoch thread");
}

/// Compile a component, or load it from the artifact cache. The cache key is
/// the component's bytes and the engine's settings, so a changed file or a
/// new gateway build compiles afresh.
pub fn load_component(engine: &Engine, path: &Path, cache_dir: &Path, name: &str) -> anyhow::Result<Arc<Component>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading plugin {}", path.display()))?;
    let mut hasher = Sha256::new();
    hasher.update(&bytes);
    std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut HashWriter(&mut hasher));
    let digest = hasher.finalize();
    let key: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    let artifact = cache_dir.join(format!("{name}-{key}.cwasm"));
    if artifact.exists() {
        // SAFETY: the file was written by `precompile_component` of an engine
        // with the same settings (its hash is part of the name), in our own data dir.
        match unsafe { Component::deserialize_file(engine, &artifact) } {
            Ok(c) => return Ok(Arc::new(c)),
            Err(e) => tracing::warn!(plugin = name, error = %e, "cached artifact unusable; recompiling"),
        }
    }
    let started = std::time::Instant::now();
    let compiled = engine
        .precompile_component(&bytes)
        .map_err(|e| anyhow::anyhow!("compiling plugin {name} ({}): {e:#}", path.display()))?;
    tracing::info!(plugin = name, ms = started.elapsed().as_millis() as u64, "compiled plugin");
    std::fs::create_dir_all(cache_dir)?;
    remove_stale(cache_dir, name, &artifact);
    // A name of its own: another gateway may be writing the same artifact.
    let tmp = artifact.with_extension(format!("{}.tmp", crate::ids::ulid()));
    std::fs::write(&tmp, &compiled)?;
    std::fs::rename(&tmp, &artifact)?;
    // SAFETY: just produced by this engine.
    Ok(Arc::new(unsafe { Component::deserialize(engine, &compiled)? }))
}

fn remove_stale(dir: &Path, name: &str, keep: &PathBuf) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let stale = p != *keep
            && p.extension().is_some_and(|x| x == "cwasm")
            && p.file_name().and_then(|f| f.to_str()).is_some_and(|f| f.strip_prefix(name).is_some_and(|rest| rest.starts_with('-') && rest.len() == 1 + 24 + 6));
        if stale {
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
