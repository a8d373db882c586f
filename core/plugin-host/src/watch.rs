//! Hot reload: the plugin directory is watched (non-recursively) with a debounced `notify`
//! watcher; any settled burst of events that touches a `*.wasm` path (or a watcher error,
//! after which events may have been lost) triggers a full [`reload`](crate::PluginHost::reload)
//! on a dedicated thread, so compiling never blocks the async runtime.
//!
//! Replacing a plugin safely: write `name.wasm.tmp` (or any non-`.wasm` name), then rename
//! it over `name.wasm`. A half-written file that fails to load keeps the previous version
//! and is retried on the next change.

use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Weak};
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};

use crate::error::HostError;
use crate::host::Inner;

/// Keeps the watcher alive; dropping it stops watching (and ends the reload thread).
pub(crate) struct Watcher {
    _debouncer: Debouncer<notify::RecommendedWatcher, RecommendedCache>,
}

fn touches_wasm(paths: &[std::path::PathBuf]) -> bool {
    paths
        .iter()
        .any(|p| p.extension().is_some_and(|e| e == "wasm"))
}

pub(crate) fn spawn(inner: &Arc<Inner>) -> Result<Watcher, HostError> {
    let dir = inner.dir().to_path_buf();
    let werr = |message: String| HostError::Watch {
        path: dir.display().to_string(),
        message,
    };
    std::fs::create_dir_all(&dir).map_err(|e| werr(e.to_string()))?;
    let debounce = Duration::from_millis(inner_debounce(inner));
    let (tx, rx) = mpsc::channel::<()>();
    let mut debouncer = new_debouncer(debounce, None, move |res: DebounceEventResult| match res {
        Ok(events) => {
            if events.iter().any(|e| touches_wasm(&e.event.paths)) {
                let _ = tx.send(());
            }
        }
        Err(errors) => {
            for e in &errors {
                tracing::warn!(error = %e, "plugin directory watcher error; rescanning");
            }
            let _ = tx.send(());
        }
    })
    .map_err(|e| werr(e.to_string()))?;
    debouncer
        .watch(Path::new(&dir), RecursiveMode::NonRecursive)
        .map_err(|e| werr(e.to_string()))?;
    let weak: Weak<Inner> = Arc::downgrade(inner);
    std::thread::Builder::new()
        .name("plugin-reload".into())
        .spawn(move || {
            while rx.recv().is_ok() {
                while rx.try_recv().is_ok() {} // coalesce queued triggers
                let Some(inner) = weak.upgrade() else { break };
                let report = inner.reload();
                tracing::debug!(changes = ?report, "plugin directory rescanned");
            }
        })
        .map_err(|e| werr(e.to_string()))?;
    tracing::info!(dir = %dir.display(), debounce_ms = debounce.as_millis() as u64, "watching plugin directory");
    Ok(Watcher {
        _debouncer: debouncer,
    })
}

fn inner_debounce(inner: &Inner) -> u64 {
    inner.debounce_ms()
}
