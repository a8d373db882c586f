//! Hot reload: the plugin directory is watched (non-recursively) with a `notify` watcher; any
//! burst of events that touches a `*.wasm` path (or a watcher error, after which events may
//! have been lost) triggers a full [`reload`](crate::PluginHost::reload) on a dedicated
//! thread once the burst has settled (no such event for `debounce_ms`), so compiling never
//! blocks the async runtime. The thread sleeps until an event comes: an idle server does
//! not wake up for the watcher (a polling debouncer ticked ~13 times a second).
//!
//! Replacing a plugin safely: write `name.wasm.tmp` (or any non-`.wasm` name), then rename
//! it over `name.wasm`. A half-written file that fails to load keeps the previous version
//! and is retried on the next change.

use std::path::Path;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::time::Duration;

use notify::{RecursiveMode, Watcher as _};

use crate::error::HostError;
use crate::host::Inner;

/// Keeps the watcher alive; dropping it stops watching (and ends the reload thread).
pub(crate) struct Watcher {
    _watcher: notify::RecommendedWatcher,
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
    let mut watcher =
        notify::recommended_watcher(move |res: notify::Result<notify::Event>| match res {
            Ok(event) => {
                if touches_wasm(&event.paths) {
                    let _ = tx.send(());
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "plugin directory watcher error; rescanning");
                let _ = tx.send(());
            }
        })
        .map_err(|e| werr(e.to_string()))?;
    watcher
        .watch(Path::new(&dir), RecursiveMode::NonRecursive)
        .map_err(|e| werr(e.to_string()))?;
    let weak: Weak<Inner> = Arc::downgrade(inner);
    std::thread::Builder::new()
        .name("plugin-reload".into())
        .spawn(move || {
            while settled(&rx, debounce) {
                let Some(inner) = weak.upgrade() else { break };
                let report = inner.reload();
                tracing::debug!(changes = ?report, "plugin directory rescanned");
            }
        })
        .map_err(|e| werr(e.to_string()))?;
    tracing::info!(dir = %dir.display(), debounce_ms = debounce.as_millis() as u64, "watching plugin directory");
    Ok(Watcher { _watcher: watcher })
}

/// Waits for a trigger, then until none has come for `quiet`. False once the watcher is
/// gone (its callback held the sender).
fn settled(rx: &Receiver<()>, quiet: Duration) -> bool {
    if rx.recv().is_err() {
        return false;
    }
    loop {
        match rx.recv_timeout(quiet) {
            Ok(()) => continue,
            Err(RecvTimeoutError::Timeout) => return true,
            Err(RecvTimeoutError::Disconnected) => return false,
        }
    }
}

fn inner_debounce(inner: &Inner) -> u64 {
    inner.debounce_ms()
}
