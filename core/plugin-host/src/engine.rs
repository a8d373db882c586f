//! The wasmtime engine and its epoch ticker.
//!
//! Async support and epoch interruption are on: calls run on the caller's tokio task (a
//! fiber per call), a ticker thread bumps the engine's epoch every [`TICK`], and at each
//! tick a running guest yields to the runtime, or traps with `Trap::Interrupt` once its
//! call's deadline has passed (the callback is in `host.rs`). The ticker holds only a weak
//! reference and exits when the engine is dropped.

use std::time::Duration;

use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::error::HostError;

/// Epoch tick length.
pub(crate) const TICK: Duration = Duration::from_millis(10);

/// Native stack a guest may use (deep recursion traps instead of crashing the server).
const MAX_WASM_STACK: usize = 1 << 20;

/// Component instances alive at once across all plugins (calls in flight; each plugin's
/// `max_concurrency` bounds its share). A call beyond it fails rather than waits.
const POOLED_COMPONENTS: u32 = 256;

/// Dirty pages of a memory slot reset in place (copied back from the image or zeroed) when a
/// call ends, found with Linux's `PAGEMAP_SCAN`; dirty pages beyond it are `madvise`d away.
const MEMORY_KEEP_RESIDENT: usize = 512 << 10;

/// The same for a table slot (a plugin's tables are a few KiB).
const TABLE_KEEP_RESIDENT: usize = 64 << 10;

/// Every call instantiates afresh, so instances come from a pool: their memories and tables
/// are slots reserved once and reset copy-on-write between calls, instead of a fresh
/// `mmap` + initialisation + `munmap` per call. Slots are sized for the largest memory a
/// plugin may be granted (`memory_mb` ≤ 4096; the store limiter enforces each plugin's own
/// limit); the reservation is address space, not memory. Async calls take their fiber
/// stacks from the pool too.
///
/// Where `PAGEMAP_SCAN` is available (Linux ≥ 6.7), the pages a call dirtied are reset in
/// place and stay resident ([`MEMORY_KEEP_RESIDENT`], [`TABLE_KEEP_RESIDENT`]): no `madvise`
/// with its TLB shootdowns when the store drops, and no page faults when the next call of
/// the same plugin reuses the slot. Without the scan, keeping memory resident would mean
/// `memset`ting the lowest addresses of every slot, for a Rust guest its untouched stack,
/// so it stays off there.
fn pooling() -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(POOLED_COMPONENTS)
        .total_core_instances(POOLED_COMPONENTS * 4)
        .total_memories(POOLED_COMPONENTS * 2)
        .total_tables(POOLED_COMPONENTS * 4)
        .total_stacks(POOLED_COMPONENTS)
        .max_memory_size(4096 << 20);
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        pool.pagemap_scan(Enabled::Yes)
            .linear_memory_keep_resident(MEMORY_KEEP_RESIDENT)
            .table_keep_resident(TABLE_KEEP_RESIDENT);
    }
    pool
}

/// What the code is compiled for; the serving engine adds the pooling allocator.
fn compile_config() -> Config {
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .max_wasm_stack(MAX_WASM_STACK)
        .cranelift_opt_level(wasmtime::OptLevel::Speed);
    // For profiling: `perf` can then name the JIT code (`/tmp/perf-<pid>.map`, written as
    // code loads; off by default because the file only grows).
    if std::env::var_os("WOODLARK_WASM_PERFMAP").is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    config
}

/// An engine that only compiles, to be dropped afterwards: Cranelift keeps its compilation
/// contexts (grown to the largest function it has compiled) for as long as its engine
/// lives, so compiling with the serving engine would keep them for the life of the server.
/// It compiles on the calling thread: parallel compilation runs on a thread pool that
/// outlives the engine, and each pool thread keeps the memory compilation freed in its own
/// malloc arena (with both, a first start sat at ~46 MB resident instead of ~35 MB; see
/// docs/benchmarks.md, "rss"). Its code loads into the serving engine when both have the
/// same [`Engine::precompile_compatibility_hash`].
pub(crate) fn compile_engine() -> Result<Engine, HostError> {
    let mut config = compile_config();
    config.parallel_compilation(false);
    Engine::new(&config).map_err(|e| HostError::Engine(e.to_string()))
}

pub(crate) fn new_engine() -> Result<Engine, HostError> {
    let mut config = compile_config();
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling()));
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
