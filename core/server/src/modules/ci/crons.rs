//! `/repos/{repo_id}/cron`: a repository's cron jobs (repo admins). `{cron}` is the cron id.
//!
//! Create needs `name` (unique per repository, 409) and a valid `schedule` (422; the syntax
//! is documented in `store::crons`) whose runs are at least `pipeline.cron_min_interval_secs`
//! apart (400 otherwise, as for an update that sets a schedule or timezone); `timezone` is an
//! IANA name (default `UTC`, unknown → 422); `branch` empty means the default branch;
//! `enabled` defaults to true; `variables` is an object of strings checked as a manual run's
//! are (400: `pipeline::variables`). `next_exec` is computed
//! in the cron's timezone and recomputed whenever the schedule or timezone changes or the
//! cron is re-enabled. As upstream, PATCH ignores an empty `name` or `schedule` and makes the
//! caller the cron's `creator_id`. Running a cron now (`POST /repos/{repo_id}/cron/{cron}`)
//! belongs to the pipelines issue.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::access::repo_admin;
use super::pagination::Page;
use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::state::Ctx;
use crate::store::crons::{
    self, Cron, CronChange, DEFAULT_TIMEZONE, MAX_FIELD, NewCron, check_interval, next_exec,
    parse_timezone,
};
use crate::store::{StoreError, now_unix};

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope
        .get("/repos/{repo_id}/cron", list)
        .post("/repos/{repo_id}/cron", create)
        .get("/repos/{repo_id}/cron/{cron}", get)
        .patch("/repos/{repo_id}/cron/{cron}", update)
        .delete("/repos/{repo_id}/cron/{cron}", delete);
}

fn not_found(err: StoreError) -> ApiError {
    match err {
        StoreError::NotFound => ApiError::not_found("Cron not found"),
        other => other.into(),
    }
}

fn cron_id(req: &Request) -> Result<i64, ApiError> {
    let raw = req.param("cron");
    raw.parse::<i64>()
        .map_err(|_| ApiError::bad_request(format!("Error parsing cron id {raw:?}")))
}

/// The body of create and update (Woodpecker's `Cron` / `CronPatch`); read-only fields
/// (`id`, `repo_id`, `creator_id`, `next_exec`, `created`) are ignored.
#[derive(Debug, Default, Deserialize)]
struct CronIn {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    schedule: Option<String>,
    #[serde(default)]
    timezone: Option<String>,
    #[serde(default)]
    branch: Option<String>,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    variables: Option<BTreeMap<String, String>>,
}

fn check_name(name: &str) -> Result<(), ApiError> {
    if name.trim().is_empty() {
        return Err(ApiError::unprocessable("name is required"));
    }
    if name.len() > MAX_FIELD || name.chars().any(char::is_control) {
        return Err(ApiError::unprocessable(format!(
            "name must be at most {MAX_FIELD} characters without control characters"
        )));
    }
    Ok(())
}

fn check_branch(branch: &str) -> Result<(), ApiError> {
    if branch.len() > MAX_FIELD || branch.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ApiError::unprocessable(format!(
            "invalid branch {branch:?}: at most {MAX_FIELD} characters, no whitespace"
        )));
    }
    Ok(())
}

/// A timezone as given, or the default when empty: 422 for an unknown one.
fn timezone_or_default(timezone: Option<String>) -> Result<String, ApiError> {
    let tz = timezone
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| DEFAULT_TIMEZONE.to_string());
    parse_timezone(&tz).map_err(ApiError::unprocessable)?;
    Ok(tz)
}

/// [`next_exec`] of a schedule that runs no more often than `min_interval` allows: an
/// unusable schedule or timezone is 422, one that runs too often 400.
fn next_within_limit(
    schedule: &str,
    timezone: &str,
    now: i64,
    min_interval: i64,
) -> Result<i64, ApiError> {
    let next = next_exec(schedule, timezone, now).map_err(ApiError::unprocessable)?;
    check_interval(schedule, timezone, now, min_interval).map_err(ApiError::bad_request)?;
    Ok(next)
}

/// [`next_within_limit`] off the async runtime (a pattern that rarely matches can take a
/// while to search).
async fn compute_next(
    ctx: &Ctx,
    schedule: String,
    timezone: String,
    now: i64,
) -> Result<i64, ApiError> {
    let min_interval = ctx.ci.settings.pipeline.cron_min_interval();
    tokio::task::spawn_blocking(move || next_within_limit(&schedule, &timezone, now, min_interval))
        .await
        .map_err(ApiError::internal)?
}

/// `GET /repos/{repo_id}/cron`: one page, by name.
async fn list(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let repo = repo_admin(&ctx, &req).await?.row.repo.id;
    let page = Page::from_request(&req);
    let list = ctx
        .ci
        .store
        .read(move |c| crons::list(c, repo, page.page, page.per_page))
        .await?;
    Ok(Response::json(&list))
}

/// `POST /repos/{repo_id}/cron`: 200 with the new cron.
async fn create(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = repo_admin(&ctx, &req).await?;
    let creator_id = access.user()?.user.id;
    let body: CronIn = req.json()?;
    let name = body.name.unwrap_or_default();
    check_name(&name)?;
    let timezone = timezone_or_default(body.timezone)?;
    let schedule = body.schedule.unwrap_or_default().trim().to_string();
    let next = compute_next(&ctx, schedule.clone(), timezone.clone(), now_unix()).await?;
    let branch = body.branch.unwrap_or_default();
    check_branch(&branch)?;
    let variables = body.variables.unwrap_or_default();
    super::pipelines::check_variables(&variables)?;
    let new = NewCron {
        name,
        repo_id: access.row.repo.id,
        creator_id,
        next_exec: next,
        schedule,
        timezone,
        branch,
        enabled: body.enabled.unwrap_or(true),
        variables,
    };
    let cron = ctx.ci.store.write(move |c| crons::create(c, &new)).await?;
    tracing::info!(
        cron = cron.id,
        repo = cron.repo_id,
        name = cron.name,
        "cron created"
    );
    Ok(Response::json(&cron))
}

/// `GET /repos/{repo_id}/cron/{cron}`.
async fn get(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let repo = repo_admin(&ctx, &req).await?.row.repo.id;
    let id = cron_id(&req)?;
    let cron = ctx
        .ci
        .store
        .read(move |c| crons::find(c, repo, id))
        .await
        .map_err(not_found)?;
    Ok(Response::json(&cron))
}

/// `PATCH /repos/{repo_id}/cron/{cron}`.
async fn update(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = repo_admin(&ctx, &req).await?;
    let creator_id = access.user()?.user.id;
    let repo = access.row.repo.id;
    let id = cron_id(&req)?;
    let body: CronIn = req.json()?;
    let name = body.name.filter(|n| !n.is_empty());
    if let Some(name) = &name {
        check_name(name)?;
    }
    let schedule = body
        .schedule
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let timezone = body
        .timezone
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    if let Some(tz) = &timezone {
        parse_timezone(tz).map_err(ApiError::unprocessable)?;
    }
    // Validate a new schedule here, so the write below only evaluates usable ones.
    if let Some(s) = &schedule {
        let tz = timezone
            .clone()
            .unwrap_or_else(|| DEFAULT_TIMEZONE.to_string());
        compute_next(&ctx, s.clone(), tz, now_unix()).await?;
    }
    if let Some(branch) = &body.branch {
        check_branch(branch)?;
    }
    if let Some(variables) = &body.variables {
        super::pipelines::check_variables(variables)?;
    }
    let enabled = body.enabled;
    let branch = body.branch;
    let variables = body.variables;
    // Merge with the stored cron and recompute `next_exec` inside the write, so two updates
    // cannot interleave between read and write. A schedule error aborts without writing; the
    // frequency is checked again when the schedule or timezone changes, with the zone and
    // schedule that will be stored (re-enabling a cron stored before the minimum existed is
    // left to the scheduler's floor).
    let now = now_unix();
    let min_interval = ctx.ci.settings.pipeline.cron_min_interval();
    let outcome = ctx
        .ci
        .store
        .write(move |c| -> Result<Result<Cron, ApiError>, StoreError> {
            let current = crons::find(c, repo, id)?;
            let retimed = schedule.is_some() || timezone.is_some();
            let reschedule = retimed || (enabled == Some(true) && !current.enabled);
            let next = if reschedule {
                let s = schedule.as_deref().unwrap_or(&current.schedule);
                let tz = timezone.as_deref().unwrap_or(&current.timezone);
                let next = if retimed {
                    next_within_limit(s, tz, now, min_interval)
                } else {
                    next_exec(s, tz, now).map_err(ApiError::unprocessable)
                };
                match next {
                    Ok(next) => Some(next),
                    Err(refusal) => return Ok(Err(refusal)),
                }
            } else {
                None
            };
            let change = CronChange {
                name,
                creator_id: Some(creator_id),
                next_exec: next,
                schedule,
                timezone,
                branch,
                enabled,
                variables,
            };
            crons::update(c, repo, id, &change).map(Ok)
        })
        .await
        .map_err(not_found)?;
    let cron = outcome?;
    Ok(Response::json(&cron))
}

/// `DELETE /repos/{repo_id}/cron/{cron}`: 204.
async fn delete(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let repo = repo_admin(&ctx, &req).await?.row.repo.id;
    let id = cron_id(&req)?;
    let cron = ctx
        .ci
        .store
        .write(move |c| crons::delete(c, repo, id))
        .await
        .map_err(not_found)?;
    tracing::info!(cron = cron.id, repo = cron.repo_id, "cron deleted");
    Ok(Response::empty(StatusCode::NO_CONTENT))
}
