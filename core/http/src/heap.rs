//! Giving the heap back after a connection flood.
//!
//! Each connection's hyper buffers and task are allocated on whichever runtime thread
//! accepted or polled it, and glibc keeps what they free in that thread's arena: after
//! thousands of connections close, the pages stay resident (fragmented between live
//! allocations, so glibc's automatic trim of an arena's top does not reach them).
//! `malloc_trim(0)` hands every free page of every arena back. It walks the arenas under
//! their locks, so it runs rarely: once the open connections fell back well below a flood's
//! peak, at most once per [`MIN_INTERVAL`], and never while the server is quiet (the watcher
//! sleeps until a flood wakes it: no timer when idle).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::metrics::Metrics;

/// Open connections that count as a flood worth trimming after (about 4 MB of buffers).
pub const FLOOD_MARK: u64 = 256;
/// Trims at most this often.
pub const MIN_INTERVAL: Duration = Duration::from_secs(10);
/// How often the open count is looked at while a flood lasts.
const POLL: Duration = Duration::from_secs(1);

/// Hands the heap's free pages back to the kernel (glibc only; elsewhere nothing to do).
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Whether a flood that peaked at `peak` open connections is over enough to trim at `open`.
pub fn flood_receded(peak: u64, open: u64) -> bool {
    peak >= FLOOD_MARK && open <= peak / 4
}

/// Runs until dropped: waits for `flood` (notified by the accept loop when the open count
/// reaches [`FLOOD_MARK`]), then trims once the count has fallen back.
pub async fn trim_after_floods(metrics: Arc<Metrics>, flood: Arc<Notify>) {
    let mut last_trim: Option<Instant> = None;
    loop {
        flood.notified().await;
        let mut peak = metrics.connections.open.load(Ordering::Relaxed);
        loop {
            tokio::time::sleep(POLL).await;
            let open = metrics.connections.open.load(Ordering::Relaxed);
            peak = peak.max(open);
            let rested = last_trim.is_none_or(|t| t.elapsed() >= MIN_INTERVAL);
            if flood_receded(peak, open) && rested {
                let started = Instant::now();
                tokio::task::spawn_blocking(release_free_heap).await.ok();
                tracing::debug!(
                    peak,
                    open,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "returned free heap after a connection flood"
                );
                last_trim = Some(Instant::now());
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_only_after_a_real_flood_has_receded() {
        assert!(!flood_receded(10, 0), "no flood");
        assert!(!flood_receded(4096, 2000), "still flooded");
        assert!(flood_receded(4096, 1024));
        assert!(flood_receded(FLOOD_MARK, 0));
    }
}
