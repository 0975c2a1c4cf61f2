//! The resource limiter of an instance's store: linear memory up to the
//! plugin's `memory_mb`, tables up to a fixed size.

use wasmtime::ResourceLimiter;

/// The plugin asked for more linear memory than `memory_mb` allows.
#[derive(Debug)]
pub struct MemoryCapReached {
    pub desired: usize,
    pub limit: usize,
}

impl std::fmt::Display for MemoryCapReached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "memory would grow to {} bytes; the cap is {}", self.desired, self.limit)
    }
}

impl std::error::Error for MemoryCapReached {}

/// Caps linear memory; growing past the cap traps with `MemoryCapReached`
/// (a plugin that cannot grow is rarely able to recover).
pub struct Limiter {
    pub memory_bytes: usize,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let limit = maximum.map_or(self.memory_bytes, |m| m.min(self.memory_bytes));
        if desired > limit {
            return Err(MemoryCapReached { desired, limit }.into());
        }
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        Err(error.context(MemoryCapReached { desired: 0, limit: self.memory_bytes }))
    }

    fn table_growing(&mut self, _current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(maximum.is_none_or(|m| desired <= m) && desired <= 1_000_000)
    }

    fn instances(&self) -> usize {
        64
    }
}
