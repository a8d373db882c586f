//! Pipelines: the API over them, their creation, and the agent protocol's endpoints (the
//! queue they call, the embedded agent and the log bus are the service layer, `crate::ci`).
//!
//! - this file: `/repos/{id}/pipelines…` (list, get, latest, manual run, restart, cancel,
//!   approve, decline, delete, config, metadata) and `/repos/{id}/logs…`;
//! - [`create`]: trigger → config → compiled, stored, queued pipeline;
//! - [`agent_rpc`]: the agent protocol's HTTP endpoints;
//! - [`admin`]: `/queue/*` and `/pipelines` for instance admins;

pub mod admin;
pub mod agent_rpc;
mod log_reads;

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use super::access::{self, RepoAccess, Require};
use super::pagination::Page;
use woodlark_stdx::{Classify, Fault};

use crate::ci;
use crate::ci::create::{self, Created, Trigger};
use crate::http::{ApiError, HeaderValue, Request, Response, Scope, StatusCode, header};
use crate::pipeline::event::WebhookEvent;
use crate::pipeline::status::{self, Status};
use crate::pipeline::types::Commit;
use crate::state::Ctx;
use crate::state::rendered::PipelinePage;
use crate::store::pipelines::{self, ListFilter, Pipeline, PipelineRow};
use crate::store::{Domain, StoreError};

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope
        .get("/repos/{repo_id}/pipelines", list)
        .post("/repos/{repo_id}/pipelines", run_manual)
        .get("/repos/{repo_id}/pipelines/latest", latest)
        .get("/repos/{repo_id}/pipelines/{number}", get)
        .post("/repos/{repo_id}/pipelines/{number}", restart)
        .delete("/repos/{repo_id}/pipelines/{number}", delete)
        .post("/repos/{repo_id}/pipelines/{number}/cancel", cancel)
        .post("/repos/{repo_id}/pipelines/{number}/approve", approve)
        .post("/repos/{repo_id}/pipelines/{number}/decline", decline)
        .get("/repos/{repo_id}/pipelines/{number}/config", config)
        .get("/repos/{repo_id}/pipelines/{number}/metadata", metadata)
        .get("/repos/{repo_id}/logs/{number}/{step_id}", step_logs)
        .delete("/repos/{repo_id}/logs/{number}/{step_id}", delete_step_logs)
        .get(
            "/repos/{repo_id}/logs/{number}/{step_id}/download",
            download_logs,
        )
        .delete("/repos/{repo_id}/logs/{number}", delete_pipeline_logs)
        .post("/repos/{repo_id}/cron/{cron}", run_cron_now);
    admin::routes(scope);
    agent_rpc::routes(scope);
}

fn pipeline_not_found(err: StoreError) -> ApiError {
    match err {
        StoreError::NotFound => ApiError::not_found("Pipeline not found"),
        other => other.into(),
    }
}

fn number_param(req: &Request) -> Result<i64, ApiError> {
    req.param_i64("number")
}

async fn load(ctx: &Ctx, repo_id: i64, number: i64) -> Result<PipelineRow, ApiError> {
    ctx.ci
        .reads
        .read(move |c| pipelines::full(c, repo_id, number))
        .await
        .map_err(pipeline_not_found)
}

/// RFC 3339 → unix seconds (for `before`/`after`).
fn parse_time(name: &str, raw: &str) -> Result<i64, ApiError> {
    crate::timefmt::parse_rfc3339(raw).ok_or_else(|| {
        ApiError::bad_request(format!("invalid {name} {raw:?}: expected an RFC 3339 time"))
    })
}

/// `GET /repos/{id}/pipelines`: newest first, without workflows.
async fn list(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo(&ctx, &req).await?;
    let repo_id = access.row.repo.id;
    // Keyed by the raw query: a page in the cache was rendered from a query that parsed, so
    // a hit needs no parsing at all (a bad query is answered 400 and never kept).
    let key = PipelinePage::List {
        repo_id,
        query: req.query.clone(),
    };
    let generation = ctx.ci.reads.generation(Domain::Pipelines);
    let list = ctx
        .rendered
        .pipelines
        .get_or_render(key, generation, async {
            let (filter, page) = (list_filter(&req)?, Page::from_request(&req));
            // One statement: on PostgreSQL it needs no transaction (two round trips fewer).
            let json = ctx
                .ci
                .reads
                .read_one(move |c| {
                    pipelines::list_json(c, repo_id, &filter, page.page, page.per_page)
                })
                .await?;
            Ok::<_, ApiError>(json)
        });
    Ok(Response::json_text(list.await?))
}

/// The list filters of `GET /repos/{id}/pipelines` (`branch`, `event` comma-separated,
/// `status`, `ref` as a substring, `before`/`after` RFC 3339); the built-in UI's pipeline
/// list reads the same. 400 for a status or time it does not know.
pub(crate) fn list_filter(req: &Request) -> Result<ListFilter, ApiError> {
    let status = req.query("status").filter(|s| !s.is_empty());
    if let Some(s) = &status
        && status::Status::parse(s).is_none()
    {
        return Err(ApiError::bad_request(format!("invalid status {s:?}")));
    }
    Ok(ListFilter {
        branch: req.query("branch").filter(|s| !s.is_empty()),
        events: req
            .query("event")
            .map(|e| {
                e.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default(),
        status,
        git_ref: req
            .query("ref")
            .filter(|s| !s.is_empty())
            .map(|r| format!("%{r}%")),
        before: req
            .query("before")
            .filter(|s| !s.is_empty())
            .map(|v| parse_time("before", &v))
            .transpose()?,
        after: req
            .query("after")
            .filter(|s| !s.is_empty())
            .map(|v| parse_time("after", &v))
            .transpose()?,
    })
}

async fn get(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo(&ctx, &req).await?;
    let (repo_id, number) = (access.row.repo.id, number_param(&req)?);
    let key = PipelinePage::One { repo_id, number };
    let generation = ctx.ci.reads.generation(Domain::Pipelines);
    let json = ctx
        .rendered
        .pipelines
        .get_or_render(key, generation, async {
            ctx.ci
                .reads
                .read(move |c| pipelines::full_json(c, repo_id, number))
                .await
        });
    Ok(Response::json_text(json.await.map_err(pipeline_not_found)?))
}

/// `GET /repos/{id}/pipelines/latest?branch=`: the newest push pipeline of the branch
/// (default branch when none given), with its workflows.
async fn latest(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo(&ctx, &req).await?;
    let branch = req
        .query("branch")
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| access.row.repo.default_branch.clone());
    let repo_id = access.row.repo.id;
    let row = ctx
        .ci
        .reads
        .read(move |c| {
            let row = pipelines::latest(c, repo_id, Some(&branch), Some("push"))?;
            pipelines::full(c, repo_id, row.pipeline.number)
        })
        .await
        .map_err(pipeline_not_found)?;
    Ok(Response::json(&row.pipeline))
}

/// The answer to a trigger, as upstream: the pipeline, or 204 with `Pipeline-Filtered`.
pub fn created_response(created: Created) -> Response {
    match created {
        Created::Pipeline(p) => Response::json(&*p),
        Created::Filtered | Created::SkipCi => Response::empty(StatusCode::NO_CONTENT).with_header(
            header::HeaderName::from_static("pipeline-filtered"),
            HeaderValue::from_static("true"),
        ),
        Created::NoConfig => Response::empty(StatusCode::NO_CONTENT),
        // A webhook replayed (its pipeline deleted since): answered as a duplicate is, 200.
        Created::Replayed => Response::text(
            StatusCode::OK,
            "ignoring hook: this delivery was received before\n",
        ),
    }
}

/// `PipelineOptions`: what a manual run asks for (the API's JSON body).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PipelineOptions {
    /// Empty: the repository's default branch.
    pub branch: String,
    pub message: String,
    pub variables: BTreeMap<String, String>,
}

/// Pipeline variables a request gives (a manual run's body, a restart's query): 400 with
/// the reason for a bad name or value, a reserved `CI_*` name, or too many.
pub fn check_variables(variables: &BTreeMap<String, String>) -> Result<(), ApiError> {
    crate::pipeline::variables::check(variables).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// `POST /repos/{id}/pipelines`: a manual run of a branch's head.
///
/// As upstream's `CreatePipeline`: the branch head is read as the user who asked (their
/// forge token: a private repository's branch is visible to them, not to the forge's app
/// alone; a user without a token from this forge reads it as the repository's owner, as the
/// config files are read), and only the commit's id comes from it. Author, e-mail and avatar
/// are the user's and the message says it was a manual run (`MANUAL PIPELINE @ <branch>`, or
/// `MANUAL: <message> @ <branch>` when one was given), so the pipeline list shows who started
/// it rather than whoever made the commit.
async fn run_manual(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo_push(&ctx, &req).await?;
    let opts: PipelineOptions = if req.body.is_empty() {
        PipelineOptions::default()
    } else {
        req.json()?
    };
    Ok(created_response(run_manual_as(&ctx, &access, opts).await?))
}

/// A manual run as `POST /repos/{id}/pipelines` makes it, for a caller `access::repo_push`
/// let through.
async fn run_manual_as(
    ctx: &Ctx,
    access: &RepoAccess,
    opts: PipelineOptions,
) -> Result<Created, ApiError> {
    check_variables(&opts.variables)?;
    let repo = access.row.clone();
    let branch = if opts.branch.is_empty() {
        repo.repo.default_branch.clone()
    } else {
        opts.branch.clone()
    };
    let user = access.user()?.user.clone();
    let forge = ctx.ci.drivers.get(repo.repo.forge_id).await?;
    let driver = ctx.ci.tokens.for_caller(&forge, Some(user.id), &repo).await;
    let head = driver.branch_head(&repo.repo, &branch).await?;
    let short = head.sha[..head.sha.len().min(12)].to_string();
    let message = if opts.message.is_empty() {
        format!("MANUAL PIPELINE @ {branch}")
    } else {
        format!("MANUAL: {} @ {branch}", opts.message)
    };
    let avatar = crate::modules::ci::avatars::shown(ctx, user.clone()).avatar_url;
    let trigger = Trigger {
        event: WebhookEvent::Manual,
        commit: Commit {
            sha: head.sha,
            git_ref: format!("refs/heads/{branch}"),
            branch,
            message,
            author: user.login.clone(),
            author_email: user.email.clone(),
            author_avatar: avatar,
            sender: user.login.clone(),
            forge_url: repo.repo.forge_url.clone(),
            timestamp: crate::store::now_unix(),
            ..Commit::default()
        },
        variables: opts.variables,
        by_user: user.login.clone(),
        ..Trigger::default()
    };
    match create::from_forge(&ctx.ci, &repo, trigger).await? {
        Created::NoConfig => Err(ApiError::not_found(format!(
            "no pipeline config found in {} at {} (looked for .woodpecker/*.yaml, .woodpecker.yaml, .woodpecker.yml{})",
            repo.repo.full_name,
            short,
            if repo.repo.config_file.is_empty() {
                String::new()
            } else {
                format!(" and {}", repo.repo.config_file)
            }
        ))),
        other => Ok(other),
    }
}

/// `POST /repos/{id}/pipelines/{n}`: a new pipeline from the stored configs of pipeline `n`.
async fn restart(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo_push(&ctx, &req).await?;
    let params = form_urlencoded::parse(req.query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let created = restart_as(&ctx, &access, number_param(&req)?, params).await?;
    Ok(created_response(created))
}

/// A restart of pipeline `number` as `POST /repos/{id}/pipelines/{n}` makes it, for a caller
/// `access::repo_push` let through; `params`: the API's query (`event`, which may only make
/// it a deployment, `deploy_to` with it, `deploy_task`, and variables by name).
async fn restart_as(
    ctx: &Ctx,
    access: &RepoAccess,
    number: i64,
    params: Vec<(String, String)>,
) -> Result<Created, ApiError> {
    let old = load(ctx, access.row.repo.id, number).await?.pipeline;
    if old.status == Status::Blocked {
        return Err(ApiError::bad_request(
            "cannot restart a pipeline that waits for approval",
        ));
    }
    let (mut event_param, mut deploy_to_param) = (None, None);
    let mut deploy_task = old.deploy_task.clone();
    let mut variables = old.variables.clone();
    for (k, v) in params {
        match k.as_str() {
            "event" => event_param = Some(v),
            "deploy_to" => deploy_to_param = Some(v),
            "deploy_task" => deploy_task = v,
            "access_token" | "fork" => {}
            _ => {
                variables.insert(k, v);
            }
        }
    }
    // As upstream: the event may only be turned into a deployment, whose target `deploy_to`
    // then names.
    let (event, deploy_to) = match event_param {
        None => (old.event, old.deploy_to.clone()),
        Some(v) if WebhookEvent::parse(&v) == Some(WebhookEvent::Deployment) => (
            WebhookEvent::Deployment,
            deploy_to_param.unwrap_or_else(|| old.deploy_to.clone()),
        ),
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "invalid event {v:?}: a restart can only be made a deployment"
            )));
        }
    };
    check_variables(&variables)?;
    if event == WebhookEvent::Deployment && !access.row.repo.allow_deploy {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "deployments are not enabled for this repository (allow_deploy)",
        ));
    }
    let pipeline_id = old.id;
    let files: Vec<_> = ctx
        .ci
        .reads
        .read(move |c| pipelines::configs(c, pipeline_id))
        .await?
        .into_iter()
        .map(|(_, f)| f)
        .collect();
    if files.is_empty() {
        return Err(ApiError::not_found(
            "the pipeline has no stored config to restart from",
        ));
    }
    let user = access.user()?.user.clone();
    let trigger = Trigger {
        event,
        event_reason: old.event_reason.clone(),
        commit: Commit {
            sender: user.login.clone(),
            ..old.commit.clone()
        },
        deploy_to,
        deploy_task,
        title: old.title.clone(),
        pr_labels: old.pr_labels.clone(),
        prerelease: old.is_prerelease,
        cron: old.cron.clone(),
        variables,
        parent: old.number,
        rerun_count: old.rerun_count + 1,
        // A user with push access asked: not held for approval (as upstream's restart).
        by_user: user.login,
        from_fork: old.from_fork,
        verified_sender: String::new(),
        // A restart is a new run, not the delivery again.
        delivery: Default::default(),
    };
    Ok(create::create(&ctx.ci, &access.row, trigger, files).await?)
}

/// `DELETE /repos/{id}/pipelines/{n}`: refused (422) while the pipeline is active.
async fn delete(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo_admin(&ctx, &req).await?;
    let row = load(&ctx, access.row.repo.id, number_param(&req)?).await?;
    ci::pipelines::delete(&ctx.ci, &row).await?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

/// `POST …/cancel`: 204.
async fn cancel(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo_push(&ctx, &req).await?;
    cancel_as(&ctx, &access, number_param(&req)?).await?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

/// Cancels pipeline `number` as `POST …/cancel` does, for a caller `access::repo_push` let
/// through.
async fn cancel_as(ctx: &Ctx, access: &RepoAccess, number: i64) -> Result<(), ApiError> {
    let row = load(ctx, access.row.repo.id, number).await?;
    let login = access.user()?.user.login.clone();
    // Upstream answers 400 for a pipeline that can no longer be canceled.
    ctx.ci
        .queue
        .cancel(row.pipeline.id, &login)
        .await
        .map_err(|e| match e.fault() {
            Fault::Conflict(message) => ApiError::bad_request(message),
            _ => ApiError::from(e),
        })?;
    Ok(())
}

/// `POST …/approve`: a blocked pipeline goes to the queue.
async fn approve(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo_push(&ctx, &req).await?;
    let updated = decide_as(&ctx, &access, number_param(&req)?, Decision::Approve).await?;
    Ok(Response::json(&updated.pipeline))
}

/// `POST …/decline`: a blocked pipeline, its workflows and steps become `declined`.
async fn decline(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo_push(&ctx, &req).await?;
    let updated = decide_as(&ctx, &access, number_param(&req)?, Decision::Decline).await?;
    Ok(Response::json(&updated.pipeline))
}

/// What is decided about a pipeline held for approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Decline,
}

/// Approves or declines pipeline `number` as `POST …/approve` and `…/decline` do, for a
/// caller `access::repo_push` let through.
async fn decide_as(
    ctx: &Ctx,
    access: &RepoAccess,
    number: i64,
    decision: Decision,
) -> Result<PipelineRow, ApiError> {
    let row = load(ctx, access.row.repo.id, number).await?;
    let login = access.user()?.user.login.clone();
    Ok(match decision {
        Decision::Approve => ci::pipelines::approve(&ctx.ci, &access.row, &row, login).await?,
        Decision::Decline => {
            ci::pipelines::decline(&ctx.ci, access.row.repo.id, &row, login).await?
        }
    })
}

/// `GET …/config`: `[{hash, name, data}]` with `data` base64, as upstream.
async fn config(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo(&ctx, &req).await?;
    let row = load(&ctx, access.row.repo.id, number_param(&req)?).await?;
    let files = configs_of(&ctx, row.pipeline.id).await?;
    let out: Vec<Value> = files
        .into_iter()
        .map(|(hash, f)| json!({"hash": hash, "name": f.name, "data": STANDARD.encode(f.data)}))
        .collect();
    Ok(Response::json(&out))
}

/// The config files pipeline `pipeline_id` was compiled from, with their hashes (the API's
/// `…/config` and the UI's config page).
pub async fn configs_of(
    ctx: &crate::state::AppState,
    pipeline_id: i64,
) -> Result<Vec<(String, crate::pipeline::types::ConfigFile)>, ApiError> {
    Ok(ctx
        .ci
        .reads
        .read(move |c| pipelines::configs(c, pipeline_id))
        .await?)
}

fn meta_pipeline(p: &Pipeline) -> Value {
    json!({
        "number": p.number,
        "created": p.created,
        "started": p.started,
        "finished": p.finished,
        "status": p.status,
        "event": p.event,
        "event_reason": p.event_reason,
        "forge_url": p.commit.forge_url,
        "target": p.deploy_to,
        "task": p.deploy_task,
        "commit": {
            "sha": p.commit.sha,
            "ref": p.commit.git_ref,
            "refspec": p.commit.refspec,
            "branch": p.commit.branch,
            "message": p.commit.message,
            "timestamp": p.commit.timestamp,
            "author": {"name": p.commit.author, "email": p.commit.author_email},
            "changed_files": p.commit.changed_files,
            "labels": p.pr_labels,
            "milestone": p.pr_milestone,
            "draft": p.pr_draft,
        },
        "parent": p.parent,
        "rerun_count": p.rerun_count,
        "cron": p.cron,
        "author": p.commit.author,
        "avatar": p.commit.author_avatar,
    })
}

/// `GET …/metadata`: upstream's `metadata.Metadata` for the pipeline.
async fn metadata(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo(&ctx, &req).await?;
    let number = number_param(&req)?;
    let repo_id = access.row.repo.id;
    let (row, prev) = ctx
        .ci
        .reads
        .read(move |c| {
            let row = pipelines::by_number(c, repo_id, number)?;
            let prev = pipelines::list(
                c,
                repo_id,
                &ListFilter {
                    branch: Some(row.pipeline.commit.branch.clone()),
                    ..ListFilter::default()
                },
                1,
                50,
            )?
            .into_iter()
            .find(|p| p.number < number);
            Ok((row, prev))
        })
        .await
        .map_err(pipeline_not_found)?;
    let r = &access.row.repo;
    let forge_id = r.forge_id;
    let forge_type = ctx
        .ci
        .reads
        .read(move |c| crate::store::forges::by_id(c, forge_id))
        .await
        .map(|f| f.forge.kind.as_str())
        .unwrap_or_default();
    // Upstream's `id` is an optional string it leaves empty (so absent); not sent.
    let meta = json!({
        "repo": {
            "id": r.id,
            "org_id": r.org_id,
            "name": r.name,
            "owner": r.owner,
            "remote_id": r.forge_remote_id,
            "forge_url": r.forge_url,
            "clone_url": r.clone_url,
            "clone_url_ssh": r.clone_url_ssh,
            "private": r.private,
            "default_branch": r.default_branch,
            "trusted": r.trusted,
        },
        "curr": meta_pipeline(&row.pipeline),
        "prev": prev.as_ref().map(meta_pipeline).unwrap_or_else(|| json!({})),
        "workflow": {},
        "step": {},
        "sys": {
            "name": "woodlark",
            "host": ctx.public_url().split("://").nth(1).unwrap_or("").to_string(),
            "url": ctx.public_url(),
            "arch": create::platform(),
            "version": crate::ci::version_string(),
        },
        "forge": {"type": forge_type, "url": r.forge_url},
    });
    Ok(Response::json(&meta))
}

/// The step `step_id` of pipeline `number` of the repository (404 otherwise).
async fn find_step(
    ctx: &Ctx,
    req: &Request,
) -> Result<(RepoAccess, PipelineRow, pipelines::Step), ApiError> {
    let access = access::repo(ctx, req).await?;
    let row = load(ctx, access.row.repo.id, number_param(req)?).await?;
    let step_id = req.param_i64("step_id")?;
    let step = row
        .pipeline
        .workflows
        .iter()
        .flatten()
        .flat_map(|w| w.children.iter())
        .find(|s| s.id == step_id)
        .cloned()
        .ok_or_else(|| ApiError::not_found("Step not found"))?;
    Ok((access, row, step))
}

/// `GET /repos/{id}/logs/{n}/{step_id}`: every stored line, in order, streamed a page at a
/// time.
async fn step_logs(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let (_, _, step) = find_step(&ctx, &req).await?;
    let mut response = Response::json_text(Bytes::new());
    response.stream = Some(log_reads::stream(
        ctx.ci.log_reads.clone(),
        step.id,
        log_reads::Format::Json,
    ));
    Ok(response)
}

/// `GET …/download`: the log as a text attachment, streamed a page at a time.
async fn download_logs(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let (access, row, step) = find_step(&ctx, &req).await?;
    let text = Bytes::new();
    let name = format!(
        "{}-{}-{}.log",
        access.row.repo.name, row.pipeline.number, step.name
    )
    .replace(
        |c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')),
        "_",
    );
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
        .unwrap_or(HeaderValue::from_static("attachment"));
    let mut response = Response::new(StatusCode::OK, "text/plain; charset=utf-8", text)
        .with_header(header::CONTENT_DISPOSITION, disposition);
    response.stream = Some(log_reads::stream(
        ctx.ci.log_reads.clone(),
        step.id,
        log_reads::Format::Text,
    ));
    Ok(response)
}

/// `DELETE /repos/{id}/logs/{n}/{step_id}`: refused while the step runs.
async fn delete_step_logs(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let (access, _, step) = find_step(&ctx, &req).await?;
    access.require_push()?;
    ci::pipelines::delete_step_log(&ctx.ci, &step).await?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

/// `POST /repos/{id}/cron/{cron}`: runs a cron job now (repo admin).
pub(crate) async fn run_cron_now(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo_admin(&ctx, &req).await?;
    let id = req.param_i64("cron")?;
    let repo_id = access.row.repo.id;
    let cron = ctx
        .ci
        .reads
        .read(move |c| crate::store::crons::find(c, repo_id, id))
        .await
        .map_err(|e| match e {
            StoreError::NotFound => ApiError::not_found("Cron not found"),
            other => other.into(),
        })?;
    match create::from_cron(&ctx.ci, &cron).await? {
        Created::NoConfig => Err(ApiError::not_found(
            "no pipeline config found on the cron job's branch",
        )),
        other => Ok(created_response(other)),
    }
}

/// `DELETE /repos/{id}/logs/{n}`: every step's log; refused while the pipeline is active.
async fn delete_pipeline_logs(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo_push(&ctx, &req).await?;
    let row = load(&ctx, access.row.repo.id, number_param(&req)?).await?;
    ci::pipelines::delete_logs(&ctx.ci, &row).await?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}
