//! A process-wide CPU sampling profiler, switched by algod's pprof rates.
//!
//! algod's `PUT /debug/settings/pprof` sets the Go runtime's mutex and block profile rates.
//! Woodlark has no Go runtime; a non-zero rate instead turns on a real sampler: the kernel
//! delivers `SIGPROF` [`FREQUENCY_HZ`] times per second of CPU time, and pprof-rs records the
//! interrupted thread's stack (with a signal-safe unwinder, skipping samples taken inside libc
//! and the unwinder's own libraries, which could deadlock). [`Profiler::profile`] encodes what
//! was sampled as a pprof `Profile` protobuf — what `go tool pprof`, `pprof` and speedscope read.
//!
//! The timer is per process, so the profiler is too ([`global`]). Several holders may want it at
//! once (each in-process server is one); it runs while at least one does, and when the last lets
//! go, its final profile is kept so it can still be downloaded after profiling is turned off.

use std::sync::Mutex;

use pprof::protos::Message;

/// Samples per second of CPU time (a prime, so sampling does not lock step with periodic work).
pub const FREQUENCY_HZ: i32 = 99;

/// Shared objects whose code a sample must not unwind through (pprof-rs's blocklist).
const BLOCKLIST: &[&str] = &["libc", "libgcc", "pthread", "vdso"];

#[derive(Debug, thiserror::Error)]
#[error("profiler: {0}")]
pub struct ProfilerError(String);

impl From<pprof::Error> for ProfilerError {
    fn from(e: pprof::Error) -> Self {
        ProfilerError(e.to_string())
    }
}

pub struct Profiler {
    inner: Mutex<Inner>,
}

struct Inner {
    holders: usize,
    running: Option<pprof::ProfilerGuard<'static>>,
    /// The encoded profile of the last run, once it stopped.
    last: Option<Vec<u8>>,
}

/// Whether a profile comes from the running sampler or from the last, finished run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileState {
    Running,
    Stopped,
}

static GLOBAL: Profiler = Profiler {
    inner: Mutex::new(Inner {
        holders: 0,
        running: None,
        last: None,
    }),
};

/// The process's profiler.
pub fn global() -> &'static Profiler {
    &GLOBAL
}

impl Profiler {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves `Inner` consistent (every field is replaced
        // whole), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a holder; the first one starts sampling.
    pub fn acquire(&self) -> Result<(), ProfilerError> {
        let mut inner = self.lock();
        if inner.running.is_none() {
            let guard = pprof::ProfilerGuardBuilder::default()
                .frequency(FREQUENCY_HZ)
                .blocklist(BLOCKLIST)
                .build()?;
            inner.running = Some(guard);
            tracing::info!(frequency_hz = FREQUENCY_HZ, "CPU profiler started");
        }
        inner.holders += 1;
        Ok(())
    }

    /// Drops a holder; when none is left, sampling stops and the final profile is kept.
    /// Symbolizes the samples, so call it off the async threads.
    pub fn release(&self) {
        let mut inner = self.lock();
        inner.holders = inner.holders.saturating_sub(1);
        if inner.holders > 0 {
            return;
        }
        if let Some(running) = inner.running.take() {
            match encode(&running) {
                Ok(bytes) => inner.last = Some(bytes),
                Err(e) => tracing::warn!(error = %e, "could not keep the final CPU profile"),
            }
            tracing::info!("CPU profiler stopped");
        }
    }

    /// Whether the sampler is running.
    pub fn running(&self) -> bool {
        self.lock().running.is_some()
    }

    /// The pprof-encoded profile of the running sampler (everything since it started) or, when
    /// it is off, of the last run; `None` if it never ran. Symbolizes, so call it off the async
    /// threads.
    pub fn profile(&self) -> Result<Option<(ProfileState, Vec<u8>)>, ProfilerError> {
        let inner = self.lock();
        match (&inner.running, &inner.last) {
            (Some(running), _) => Ok(Some((ProfileState::Running, encode(running)?))),
            (None, Some(last)) => Ok(Some((ProfileState::Stopped, last.clone()))),
            (None, None) => Ok(None),
        }
    }
}

fn encode(guard: &pprof::ProfilerGuard<'static>) -> Result<Vec<u8>, ProfilerError> {
    let report = guard.report().build()?;
    let profile = report.pprof()?;
    let mut out = Vec::with_capacity(profile.encoded_len());
    profile
        .encode(&mut out)
        .map_err(|e| ProfilerError(e.to_string()))?;
    Ok(out)
}
