//! The wasmtime engine and its epoch clock.
//!
//! Async support and epoch interruption are on: calls run on the caller's tokio task (a
//! fiber per call), a clock thread bumps the engine's epoch every [`TICK`] while calls run
//! ([`EpochClock`]), and at each tick a running guest yields to the runtime, or traps with
//! `Trap::Interrupt` once its call's deadline has passed (the callback is in `host.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
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

/// The serving engine and the clock that ticks its epoch.
pub(crate) fn new_engine() -> Result<(Engine, EpochClock), HostError> {
    let mut config = compile_config();
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling()));
    let engine = Engine::new(&config).map_err(|e| HostError::Engine(e.to_string()))?;
    let clock = EpochClock::start(&engine, IDLE_TICKS)?;
    Ok((engine, clock))
}

/// Ticks without a call before the clock stops (one second): steady traffic keeps it
/// running, an idle server stops waking up for it.
const IDLE_TICKS: u32 = 100;

/// Bumps the engine's epoch every [`TICK`] while calls run, and sleeps otherwise (an idle
/// server would else wake up a hundred times a second for nothing). A call holds a
/// [`Running`] guard from before its store exists until the store is dropped; the clock
/// never stops while a guard is held, so every guest's deadline is still enforced. The
/// thread holds only a weak reference to the engine and exits when the clock is dropped.
pub(crate) struct EpochClock {
    shared: Arc<ClockShared>,
}

struct ClockShared {
    state: Mutex<ClockState>,
    wake: Condvar,
    /// Epoch increments so far (tests and diagnostics).
    ticks: AtomicU64,
}

#[derive(Default)]
struct ClockState {
    /// Calls holding a [`Running`] guard.
    running: usize,
    /// Calls started since the clock last looked (short calls may begin and end between
    /// two ticks; they still count as traffic).
    started: u64,
    ticking: bool,
    closed: bool,
}

/// Held by a call while its store lives: the clock keeps ticking.
pub(crate) struct Running<'a> {
    shared: &'a ClockShared,
}

impl EpochClock {
    fn start(engine: &Engine, idle_ticks: u32) -> Result<Self, HostError> {
        let shared = Arc::new(ClockShared {
            state: Mutex::new(ClockState::default()),
            wake: Condvar::new(),
            ticks: AtomicU64::new(0),
        });
        let weak = engine.weak();
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || thread_shared.run(idle_ticks, || weak.upgrade()))
            .map_err(|e| HostError::Engine(format!("spawning the epoch ticker: {e}")))?;
        Ok(EpochClock { shared })
    }

    /// Marks a call as running until the guard drops; wakes the clock if it sleeps.
    pub(crate) fn running(&self) -> Running<'_> {
        let shared = &*self.shared;
        let mut state = shared.lock();
        state.running += 1;
        state.started += 1;
        if !state.ticking {
            state.ticking = true;
            shared.wake.notify_one();
        }
        Running { shared }
    }

    #[cfg(test)]
    fn ticks(&self) -> u64 {
        self.shared.ticks.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    fn is_ticking(&self) -> bool {
        self.shared.lock().ticking
    }
}

impl Drop for EpochClock {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.shared.lock().running -= 1;
    }
}

impl ClockShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, ClockState> {
        // The state stays consistent even if a holder panicked (plain counters).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn run(&self, idle_ticks: u32, engine: impl Fn() -> Option<Engine>) {
        let mut idle = 0u32;
        let mut seen = 0u64;
        loop {
            {
                let mut state = self.lock();
                if state.running == 0 && state.started == seen {
                    idle += 1;
                } else {
                    idle = 0;
                }
                seen = state.started;
                if idle >= idle_ticks {
                    // Only with no call running: `running()` sets `ticking` again under
                    // the same lock, so no call can start unseen.
                    state.ticking = false;
                }
                while !state.ticking && !state.closed {
                    state = self.wake.wait(state).unwrap_or_else(|e| e.into_inner());
                    idle = 0;
                    seen = state.started;
                }
                if state.closed {
                    return;
                }
            }
            std::thread::sleep(TICK);
            match engine() {
                Some(engine) => engine.increment_epoch(),
                None => return,
            }
            self.ticks.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticks_after(clock: &EpochClock, wait: Duration) -> u64 {
        let before = clock.ticks();
        std::thread::sleep(wait);
        clock.ticks() - before
    }

    #[test]
    fn the_clock_ticks_only_while_calls_run() {
        let engine = Engine::new(&compile_config()).unwrap();
        let clock = EpochClock::start(&engine, 3).unwrap();
        assert!(
            !clock.is_ticking(),
            "a new clock sleeps until the first call"
        );
        assert_eq!(ticks_after(&clock, TICK * 5), 0);

        let call = clock.running();
        // A call longer than the idle period keeps the clock going.
        assert!(ticks_after(&clock, TICK * 10) >= 5);
        drop(call);

        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while clock.is_ticking() {
            assert!(
                std::time::Instant::now() < deadline,
                "the clock never stopped"
            );
            std::thread::sleep(TICK);
        }
        assert_eq!(
            ticks_after(&clock, TICK * 5),
            0,
            "an idle clock does not tick"
        );

        // Calls too short to be seen running at a tick still count as traffic.
        let _short = clock.running();
        drop(_short);
        assert!(clock.is_ticking());
        assert!(ticks_after(&clock, TICK * 2) >= 1);
    }
}
