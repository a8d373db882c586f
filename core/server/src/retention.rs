//! Retention: the jobs that delete what has aged out — events past `events.retention_days` or
//! beyond `events.max_events`, step log lines past `storage.log_retention_days`. Deletes go in
//! batches, so a big backlog never holds the store's one writer for long.

use std::time::Duration;

use crate::config::EventsConfig;
use crate::store::{Store, StoreResult, events, logs, now_unix_ms};

/// Rows deleted per write.
const PRUNE_BATCH: usize = 5_000;

/// Applies event retention every `events.prune_interval_secs`, forever.
pub async fn events(store: Store, settings: EventsConfig) {
    if settings.retention_days == 0 && settings.max_events == 0 {
        return;
    }
    let mut tick = tokio::time::interval(Duration::from_secs(settings.prune_interval_secs));
    // The first tick fires at once; start-up is no time to hold the writer.
    tick.tick().await;
    loop {
        tick.tick().await;
        if let Err(err) = prune_events(&store, &settings).await {
            tracing::warn!(%err, "event retention failed; will retry");
        }
    }
}

/// One event retention pass; returns the number of events removed.
pub async fn prune_events(store: &Store, settings: &EventsConfig) -> StoreResult<usize> {
    let older_than = (settings.retention_days > 0)
        .then(|| now_unix_ms() - (settings.retention_days as i64) * 86_400_000);
    let keep = (settings.max_events > 0).then_some(settings.max_events);
    let mut total = 0;
    loop {
        let removed = store
            .write(move |c| events::prune(c, older_than, keep, PRUNE_BATCH))
            .await?;
        total += removed;
        if removed < PRUNE_BATCH {
            break;
        }
    }
    if total > 0 {
        tracing::info!(removed = total, "old events removed");
    }
    Ok(total)
}

/// Removes step log lines older than `days` every five minutes, forever (`days` > 0).
pub async fn step_logs(logs_store: Store, days: u64) {
    let mut tick = tokio::time::interval(Duration::from_secs(300));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let cutoff = now_unix_ms() - (days as i64) * 86_400_000;
        loop {
            match logs_store
                .write(move |c| logs::prune(c, cutoff, PRUNE_BATCH))
                .await
            {
                Ok(PRUNE_BATCH) => continue,
                Ok(_) => break,
                Err(err) => {
                    tracing::warn!(%err, "log retention failed");
                    break;
                }
            }
        }
    }
}
