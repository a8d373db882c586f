//! Cron jobs: creating, changing and removing a repository's schedules.
//!
//! `next_exec` is computed in the cron's timezone whenever the schedule or timezone changes
//! or the cron is re-enabled, never sooner than `pipeline.cron_min_interval_secs` allows
//! between runs. An update merges with the stored cron and recomputes inside its write, so
//! two updates cannot interleave between read and write. The scheduler is `ci::jobs`.

use super::{Error, Services};
use crate::store::crons::{self, Cron, CronChange, NewCron, check_interval, next_exec};
use crate::store::{StoreError, now_unix};

/// The next run of a schedule that runs no more often than `min_interval` allows: an
/// unusable schedule or timezone is unprocessable, one that runs too often invalid.
pub fn next_within_limit(
    schedule: &str,
    timezone: &str,
    now: i64,
    min_interval: i64,
) -> Result<i64, Error> {
    let next = next_exec(schedule, timezone, now).map_err(Error::Unprocessable)?;
    check_interval(schedule, timezone, now, min_interval).map_err(Error::Invalid)?;
    Ok(next)
}

/// [`next_within_limit`] from now, off the async runtime (a pattern that rarely matches can
/// take a while to search).
pub async fn next_run(ci: &Services, schedule: String, timezone: String) -> Result<i64, Error> {
    let min_interval = ci.settings.pipeline.cron_min_interval();
    let now = now_unix();
    tokio::task::spawn_blocking(move || next_within_limit(&schedule, &timezone, now, min_interval))
        .await
        .map_err(|e| Error::Internal(format!("cron schedule: {e}")))?
}

/// Stores a new cron (its `next_exec` computed by the caller with [`next_run`]).
pub async fn create(ci: &Services, new: NewCron) -> Result<Cron, Error> {
    let max = ci.settings.pipeline.max_crons_per_repo;
    let cron = ci.store.write(move |c| crons::create(c, &new, max)).await?;
    tracing::info!(
        cron = cron.id,
        repo = cron.repo_id,
        name = cron.name,
        "cron created"
    );
    Ok(cron)
}

/// What an update may change; `None` keeps the stored value. `next_exec` is ignored: it is
/// recomputed here.
pub async fn update(ci: &Services, repo: i64, id: i64, change: CronChange) -> Result<Cron, Error> {
    let now = now_unix();
    let min_interval = ci.settings.pipeline.cron_min_interval();
    ci.store
        .write(move |c| -> Result<Result<Cron, Error>, StoreError> {
            let current = crons::find(c, repo, id)?;
            let retimed = change.schedule.is_some() || change.timezone.is_some();
            let reschedule = retimed || (change.enabled == Some(true) && !current.enabled);
            let next = if reschedule {
                let s = change.schedule.as_deref().unwrap_or(&current.schedule);
                let tz = change.timezone.as_deref().unwrap_or(&current.timezone);
                // Re-enabling a cron stored before the minimum existed is left to the
                // scheduler's floor; a new schedule or zone must respect it.
                let next = if retimed {
                    next_within_limit(s, tz, now, min_interval)
                } else {
                    next_exec(s, tz, now).map_err(Error::Unprocessable)
                };
                match next {
                    Ok(next) => Some(next),
                    Err(refusal) => return Ok(Err(refusal)),
                }
            } else {
                None
            };
            let change = CronChange {
                next_exec: next,
                ..change
            };
            crons::update(c, repo, id, &change).map(Ok)
        })
        .await?
}

/// Removes cron `id` of `repo`.
pub async fn delete(ci: &Services, repo: i64, id: i64) -> Result<Cron, Error> {
    let cron = ci.store.write(move |c| crons::delete(c, repo, id)).await?;
    tracing::info!(cron = cron.id, repo = cron.repo_id, "cron deleted");
    Ok(cron)
}
