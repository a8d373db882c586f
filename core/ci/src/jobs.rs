//! The CI service layer's periodic jobs: lease expiry, agents' contact times, the cron
//! scheduler and the sweep of orphaned log lines. Started by the server when it serves.

use std::time::Duration;

use tokio::task::JoinHandle;

use super::{Services, create};
use crate::store::{crons, logs, now_unix, pipelines};

/// Starts every periodic job.
pub fn spawn(ci: &Services) -> Vec<JoinHandle<()>> {
    vec![
        tokio::spawn(every(ci.clone(), Duration::from_secs(2), |ci| async move {
            if let Err(err) = ci.queue.requeue(None).await {
                tracing::warn!(%err, "lease expiry failed");
            }
        })),
        tokio::spawn(every(
            ci.clone(),
            Duration::from_secs(15),
            |ci| async move {
                if let Err(err) = ci.queue.flush_contact().await {
                    tracing::warn!(%err, "could not store agent contact times");
                }
            },
        )),
        tokio::spawn(every(
            ci.clone(),
            Duration::from_secs(10),
            |ci| async move {
                run_due_crons(&ci).await;
            },
        )),
        tokio::spawn(every(
            ci.clone(),
            Duration::from_secs(600),
            |ci| async move {
                match sweep_orphan_logs(&ci).await {
                    Ok(0) => {}
                    Ok(removed) => tracing::info!(removed, "removed log lines of deleted steps"),
                    Err(err) => tracing::warn!(%err, "log sweep failed"),
                }
            },
        )),
    ]
}

/// Runs `f` every `period`, forever.
async fn every<F, Fut>(ci: Services, period: Duration, f: F)
where
    F: Fn(Services) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        f(ci.clone()).await;
    }
}

/// Removes the log lines of steps that no longer exist (at start and every ten minutes).
///
/// Deleting a pipeline or repository removes its steps in the main database and then their
/// lines in the logs database; the two cannot share a transaction, so a crash between them
/// leaves lines nobody can reach (step ids are never reused). Step ids are read from the
/// logs first and checked afterwards, so a step created meanwhile is never mistaken for a
/// deleted one. Returns the number of lines removed.
pub async fn sweep_orphan_logs(ci: &Services) -> Result<usize, crate::store::StoreError> {
    let mut after = 0;
    let mut removed = 0;
    loop {
        let ids = ci
            .logs
            .read_blocking(move |c| logs::step_ids_after(c, after, 500))
            .await?;
        let Some(&last) = ids.last() else {
            return Ok(removed);
        };
        let probe = ids.clone();
        let existing = ci
            .store
            .read_blocking(move |c| pipelines::existing_step_ids(c, &probe))
            .await?;
        let gone: Vec<i64> = ids
            .into_iter()
            .filter(|id| !existing.contains(id))
            .collect();
        if !gone.is_empty() {
            removed += ci.logs.write(move |c| logs::delete_steps(c, &gone)).await?;
        }
        after = last;
    }
}

/// Starts a pipeline for every cron job that is due (each job once per due time, even with
/// several servers on one database: the next time is claimed first). The next time is never
/// sooner than `pipeline.cron_min_interval_secs` after this one, whatever the stored schedule
/// says; a schedule that no longer parses runs at that minimum.
pub async fn run_due_crons(ci: &Services) {
    let due = match ci.store.read(|c| crons::due(c, now_unix(), 20)).await {
        Ok(due) => due,
        Err(err) => {
            tracing::warn!(%err, "cannot read due cron jobs");
            return;
        }
    };
    let min_interval = ci.settings.pipeline.cron_min_interval();
    for cron in due {
        let now = now_unix();
        let next = crons::next_exec_spaced(
            &cron.schedule,
            &cron.timezone,
            cron.next_exec,
            now,
            min_interval,
        )
        .unwrap_or_else(|err| {
            tracing::warn!(cron = cron.name, repo = cron.repo_id, %err, "unusable cron schedule");
            now.max(cron.next_exec).saturating_add(min_interval)
        });
        let (id, expected) = (cron.id, cron.next_exec);
        let claimed = ci
            .store
            .write(move |c| crons::claim(c, id, expected, next))
            .await;
        if !matches!(claimed, Ok(true)) {
            continue;
        }
        match create::from_cron(ci, &cron).await {
            Ok(outcome) => tracing::info!(
                cron = cron.name,
                repo = cron.repo_id,
                ?outcome,
                "cron job ran"
            ),
            Err(err) => {
                tracing::warn!(cron = cron.name, repo = cron.repo_id, error = %err, "cron job failed")
            }
        }
    }
}
