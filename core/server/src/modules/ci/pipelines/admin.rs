//! Instance-admin views of the queue: `/queue/info`, `/queue/pause|resume`,
//! `/queue/norunningpipelines`, and `/pipelines` (pipelines that are pending or running).

use serde_json::{Value, json};

use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::modules::ci::access::must_admin;
use crate::modules::ci::users::feed_entry;
use crate::pipeline::status::Status;
use crate::state::Ctx;
use crate::store::pipelines;
use crate::store::tasks::{self, Task, TaskState};
use crate::store::{StoreResult, agents, repos};

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope
        .get("/queue/info", info)
        .post("/queue/pause", pause)
        .post("/queue/resume", resume)
        .get("/queue/norunningpipelines", wait_idle)
        .get("/pipelines", active_pipelines);
}

/// Upstream's `QueueTask` (a `Task` plus pipeline number and agent name) for a task row.
pub fn queue_task(c: &crate::store::Tx, t: &Task) -> StoreResult<Value> {
    let wf = pipelines::workflow(c, t.id)?;
    let p = pipelines::by_id(c, t.pipeline_id)?;
    let agent_name = if t.agent_id > 0 {
        agents::by_id(c, t.agent_id)
            .map(|a| a.agent.name)
            .unwrap_or_default()
    } else {
        String::new()
    };
    Ok(json!({
        "id": t.id.to_string(),
        "pid": wf.pid,
        "name": wf.name,
        "labels": t.labels,
        "dependencies": t.dependencies.iter().map(|d| d.to_string()).collect::<Vec<_>>(),
        "run_on": t.run_on,
        "dep_status": {},
        "agent_id": t.agent_id,
        "agent_name": agent_name,
        "pipeline_id": t.pipeline_id,
        "pipeline_number": p.pipeline.number,
        "repo_id": t.repo_id,
        "concurrency_limit": t.concurrency_limit,
        "concurrency_group": t.concurrency_group,
        "created": t.created,
    }))
}

/// `GET /queue/info`.
async fn info(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let paused = ctx.ci.queue.paused().await;
    let workers = ctx.ci.queue.free_workers();
    let (pending, running, waiting) = ctx
        .ci
        .reads
        .read(|c| {
            let mut groups: [Vec<Value>; 3] = Default::default();
            for t in tasks::list(c, None)? {
                let slot = match t.state {
                    TaskState::Pending => 0,
                    TaskState::Running => 1,
                    TaskState::Waiting => 2,
                };
                groups[slot].push(queue_task(c, &t)?);
            }
            let [p, r, w] = groups;
            Ok((p, r, w))
        })
        .await?;
    Ok(Response::json(&json!({
        "pending": pending,
        "running": running,
        "waiting_on_deps": waiting,
        "paused": paused,
        "stats": {
            "worker_count": workers,
            "pending_count": pending.len(),
            "waiting_on_deps_count": waiting.len(),
            "running_count": running.len(),
        },
    })))
}

pub(crate) async fn pause(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    ctx.ci.queue.pause().await?;
    tracing::info!("queue paused");
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

pub(crate) async fn resume(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    ctx.ci.queue.resume().await?;
    tracing::info!("queue resumed");
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

/// `GET /queue/norunningpipelines`: answers 204 once nothing is running.
async fn wait_idle(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    ctx.ci.queue.wait_idle().await?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

/// `GET /pipelines`: pending and running pipelines as `Feed` entries.
async fn active_pipelines(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let list = ctx
        .ci
        .reads
        .read(|c| {
            let mut out = Vec::new();
            for row in pipelines::with_status(c, &[Status::Pending, Status::Running])? {
                let repo = repos::by_id(c, row.repo_id)?;
                out.push(feed_entry(row.repo_id, &repo.repo.full_name, &row.pipeline));
            }
            Ok(out)
        })
        .await?;
    Ok(Response::json(&list))
}
