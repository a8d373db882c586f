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

use super::access::{Require, repo_admin};
use super::pagination::read_page;
use crate::ci;
use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::state::Ctx;
use crate::store::StoreError;
use crate::store::crons::{self, CronChange, DEFAULT_TIMEZONE, MAX_FIELD, NewCron, parse_timezone};

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope
        .get("/repos/{repo_id}/cron", list)
        .post("/repos/{repo_id}/cron", create)
        .get("/repos/{repo_id}/cron/{cron}", get)
        .patch("/repos/{repo_id}/cron/{cron}", update)
        .delete("/repos/{repo_id}/cron/{cron}", delete);
}

fn not_found(err: impl Into<ci::Error>) -> ApiError {
    match err.into() {
        ci::Error::Store(StoreError::NotFound) => ApiError::not_found("Cron not found"),
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

/// `GET /repos/{repo_id}/cron`: one page, by name.
async fn list(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let repo = repo_admin(&ctx, &req).await?.row.repo.id;
    let list = read_page(&ctx, &req, move |c, page, per_page| {
        crons::list(c, repo, page, per_page)
    })
    .await?;
    Ok(Response::json(&list))
}

/// `POST /repos/{repo_id}/cron`: 200 with the new cron.
pub(crate) async fn create(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = repo_admin(&ctx, &req).await?;
    let creator_id = access.user()?.user.id;
    let body: CronIn = req.json()?;
    let name = body.name.unwrap_or_default();
    check_name(&name)?;
    let timezone = timezone_or_default(body.timezone)?;
    let schedule = body.schedule.unwrap_or_default().trim().to_string();
    let next = ci::crons::next_run(&ctx.ci, schedule.clone(), timezone.clone()).await?;
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
    let cron = ci::crons::create(&ctx.ci, new).await?;
    Ok(Response::json(&cron))
}

/// `GET /repos/{repo_id}/cron/{cron}`.
async fn get(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let repo = repo_admin(&ctx, &req).await?.row.repo.id;
    let id = cron_id(&req)?;
    let cron = ctx
        .ci
        .reads
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
        ci::crons::next_run(&ctx.ci, s.clone(), tz).await?;
    }
    if let Some(branch) = &body.branch {
        check_branch(branch)?;
    }
    if let Some(variables) = &body.variables {
        super::pipelines::check_variables(variables)?;
    }
    let change = CronChange {
        name,
        creator_id: Some(creator_id),
        next_exec: None,
        schedule,
        timezone,
        branch: body.branch,
        enabled: body.enabled,
        variables: body.variables,
    };
    let cron = ci::crons::update(&ctx.ci, repo, id, change)
        .await
        .map_err(not_found)?;
    Ok(Response::json(&cron))
}

/// `DELETE /repos/{repo_id}/cron/{cron}`: 204.
pub(crate) async fn delete(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let repo = repo_admin(&ctx, &req).await?.row.repo.id;
    let id = cron_id(&req)?;
    ci::crons::delete(&ctx.ci, repo, id)
        .await
        .map_err(not_found)?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}
