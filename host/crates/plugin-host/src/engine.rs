//! The wasmtime engine: async calls, epoch interruption for deadlines, the
//! pooling allocator. Compiled components come from `artifacts`.

use std::time::Duration;

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
    pool.total_component_instances(n).total_core_instances(n * 8).total_memories(n * 2).total_tables(n * 4).max_memory_size(MAX_MEMORY_BYTES);
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
