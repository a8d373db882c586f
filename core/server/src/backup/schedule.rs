//! Scheduled backups (`[storage] backup_dir`, `backup_every_hours`, `backup_keep`): the
//! server backs itself up as `woodlark backup` does (never with the key), into
//! `<backup_dir>/woodlark-<UTC time>`, and keeps the newest `backup_keep`.
//!
//! The copy runs on the blocking pool, never on the runtime's threads, and holds no lock a
//! request waits for (`woodlark_store::backup`). A failure is logged at error level and
//! counted in `/metrics`; the next backup is tried at the next interval. The first one is
//! due an interval after the newest backup already in the directory (at once if there is
//! none or it is older), so restarts neither skip nor repeat backups.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use super::{Error, Pace, Taken, take};
use crate::config::Config;
use crate::config::backups::interval;
use crate::store::backup::{MANIFEST_FILE, Manifest};

/// The name every scheduled backup's directory starts with.
const PREFIX: &str = "woodlark-";

/// What `/metrics` shows of the scheduled backups.
#[derive(Default, Debug)]
pub struct BackupCounts {
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
    /// Unix seconds of the last success (0: none yet).
    pub last_success_unix: AtomicI64,
}

impl BackupCounts {
    /// `/metrics` lines: name, help, value.
    pub fn metrics(&self) -> [(&'static str, &'static str, f64); 3] {
        [
            (
                "woodlark_backups_total",
                "Scheduled backups written ([storage] backup_dir).",
                self.succeeded.load(Ordering::Relaxed) as f64,
            ),
            (
                "woodlark_backup_failures_total",
                "Scheduled backups that failed (the log says why).",
                self.failed.load(Ordering::Relaxed) as f64,
            ),
            (
                "woodlark_backup_last_success_timestamp_seconds",
                "Unix time of the last scheduled backup written (0: none since start).",
                self.last_success_unix.load(Ordering::Relaxed) as f64,
            ),
        ]
    }
}

/// Backs up every interval, forever (`storage.backup_dir` set).
pub async fn run(config: Config, counts: Arc<BackupCounts>) {
    let storage = &config.storage;
    let every = interval(storage);
    let dir = storage.backup_dir.clone();
    // The task is aborted when the server stops: a copy under way then ends at its next
    // step (and is removed) instead of holding the process's exit.
    let stopping = StopOnDrop(Arc::default());
    let pace = Pace {
        stop: Some(stopping.0.clone()),
        ..Pace::default()
    };
    let newest = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || newest_taken_ms(&dir)
    })
    .await
    .ok()
    .flatten();
    if let Some(at) = newest {
        let due = at.saturating_add(every.as_millis() as i64);
        let wait = due.saturating_sub(woodlark_stdx::now_unix_ms()).max(0);
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (settings, pace) = (config.clone(), pace.clone());
        let outcome = tokio::task::spawn_blocking(move || once(&settings, &pace)).await;
        match outcome {
            Ok(Ok((taken, pruned))) => {
                counts.succeeded.fetch_add(1, Ordering::Relaxed);
                counts
                    .last_success_unix
                    .store(woodlark_stdx::now_unix(), Ordering::Relaxed);
                tracing::info!(
                    backup = %taken.dir.display(),
                    rows = taken.manifest.rows(),
                    trimmed_lines = taken.trimmed_lines,
                    longest_step_ms = taken.longest_step().as_secs_f64() * 1000.0,
                    pruned = pruned.len(),
                    "scheduled backup written"
                );
            }
            Ok(Err(err)) => failed(&counts, &dir, &err.to_string(), every),
            Err(err) => failed(&counts, &dir, &err.to_string(), every),
        }
    }
}

/// Sets its flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn failed(counts: &BackupCounts, dir: &Path, err: &str, every: Duration) {
    counts.failed.fetch_add(1, Ordering::Relaxed);
    tracing::error!(
        backup_dir = %dir.display(),
        error = err,
        retry_in_secs = every.as_secs(),
        "scheduled backup failed"
    );
}

/// One scheduled backup into `storage.backup_dir`, then the pruning; returns the backup and
/// the directories removed.
pub fn once(config: &Config, pace: &Pace) -> Result<(Taken, Vec<PathBuf>), Error> {
    let storage = &config.storage;
    let dir = &storage.backup_dir;
    super::private_dir(dir)?;
    let stamp = crate::timefmt::rfc3339_millis(woodlark_stdx::now_unix_ms()).replace(':', "");
    let mut target = dir.join(format!("{PREFIX}{stamp}"));
    let mut n = 1;
    while target.exists() {
        n += 1;
        target = dir.join(format!("{PREFIX}{stamp}-{n}"));
    }
    let taken = take(config, &target, false, pace)?;
    let pruned = prune(dir, storage.backup_keep as usize)?;
    Ok((taken, pruned))
}

/// The scheduled backups in `dir` (directories named `woodlark-…` with a manifest), oldest
/// first: their names sort by time.
fn backups_in(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(super::io(dir)(e)),
    };
    for entry in entries {
        let path = entry.map_err(super::io(dir))?.path();
        let named = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(PREFIX));
        if named && path.join(MANIFEST_FILE).is_file() {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Removes all but the newest `keep` scheduled backups of `dir`; returns those removed.
pub fn prune(dir: &Path, keep: usize) -> Result<Vec<PathBuf>, Error> {
    let all = backups_in(dir)?;
    let excess = all.len().saturating_sub(keep);
    let mut removed = Vec::with_capacity(excess);
    for old in all.into_iter().take(excess) {
        std::fs::remove_dir_all(&old).map_err(super::io(&old))?;
        removed.push(old);
    }
    Ok(removed)
}

/// When the newest scheduled backup in `dir` was taken (unix ms), if there is one.
fn newest_taken_ms(dir: &Path) -> Option<i64> {
    let newest = backups_in(dir).ok()?.pop()?;
    Manifest::read(&newest).ok().map(|m| m.created_unix_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_keeps_the_newest_backups_and_nothing_else_is_touched() {
        let dir = tempfile::tempdir().unwrap();
        let names = [
            "woodlark-2026-01-01T000000.000Z",
            "woodlark-2026-01-02T000000.000Z",
            "woodlark-2026-01-03T000000.000Z",
            "woodlark-2026-01-03T000000.000Z-2",
        ];
        for name in names {
            std::fs::create_dir(dir.path().join(name)).unwrap();
            std::fs::write(dir.path().join(name).join(MANIFEST_FILE), "{}").unwrap();
        }
        // Not a scheduled backup: an operator's own, and a half-written one.
        std::fs::create_dir(dir.path().join("before-upgrade")).unwrap();
        std::fs::create_dir(dir.path().join("woodlark-2020-01-01T000000.000Z")).unwrap();
        let removed = prune(dir.path(), 2).unwrap();
        let removed: Vec<_> = removed
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(removed, &names[..2]);
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "before-upgrade",
                "woodlark-2020-01-01T000000.000Z",
                names[2],
                names[3]
            ]
        );
        assert!(prune(&dir.path().join("none"), 1).unwrap().is_empty());
    }
}
