//! The wasmtime engine and its epoch ticker.
//!
//! Epoch interruption is on: a ticker thread bumps the engine's epoch every [`TICK`], and
//! each call's store gets a deadline of `timeout / TICK + 1` ticks, after which the guest
//! traps with `Trap::Interrupt`. The ticker holds only a weak reference and exits when the
//! engine is dropped.

use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::error::HostError;

/// Epoch tick length.
pub(crate) const TICK: Duration = Duration::from_millis(10);

/// Native stack a guest may use (deep recursion traps instead of crashing the server).
const MAX_WASM_STACK: usize = 1 << 20;

/// Component instances alive at once across all plugins (calls in flight; each plugin's
/// `max_concurrency` bounds its share). A call beyond it fails rather than waits.
const POOLED_COMPONENTS: u32 = 256;

/// Every call instantiates afresh, so instances come from a pool: their memories and tables
/// are slots reserved once and reset copy-on-write between calls, instead of a fresh
/// `mmap` + initialisation + `munmap` per call. Slots are sized for the largest memory a
/// plugin may be granted (`memory_mb` ≤ 4096; the store limiter enforces each plugin's own
/// limit); the reservation is address space, not memory.
fn pooling() -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(POOLED_COMPONENTS)
        .total_core_instances(POOLED_COMPONENTS * 4)
        .total_memories(POOLED_COMPONENTS * 2)
        .total_tables(POOLED_COMPONENTS * 4)
        .max_memory_size(4096 << 20);
    pool
}

pub(crate) fn new_engine() -> Result<Engine, HostError> {
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .max_wasm_stack(MAX_WASM_STACK)
        .cranelift_opt_level(wasmtime::OptLevel::Speed)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pooling()));
    let engine = Engine::new(&config).map_err(|e| HostError::Engine(e.to_string()))?;
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("wasm-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .map_err(|e| HostError::Engine(format!("spawning the epoch ticker: {e}")))?;
    Ok(engine)
}

/// Ticks for a timeout, rounded up, plus one so a deadline never fires early.
pub(crate) fn deadline_ticks(timeout: Duration) -> u64 {
    let t = TICK.as_millis().max(1);
    (timeout.as_millis().div_ceil(t) as u64).saturating_add(1)
}
