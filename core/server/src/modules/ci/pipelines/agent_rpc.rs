//! The agent protocol, server side: `POST <ci mount>/agent/...` with an agent token.
//!
//! | call | body | answer |
//! |---|---|---|
//! | `POST /agent/next` | `AgentInfo` | 200 `Work`, or 204 after ~25 s without work |
//! | `POST /agent/workflows/{id}/init` | – | 204 |
//! | `POST /agent/workflows/{id}/steps` | `StepUpdate` | 204 |
//! | `POST /agent/workflows/{id}/logs` | `[LogLine]` | 204 (each line stored once) |
//! | `POST /agent/workflows/{id}/extend` | – | 204 (lease +60 s) |
//! | `GET  /agent/workflows/{id}/canceled` | – | 200 `{"canceled": bool}` after ≤ 25 s |
//! | `POST /agent/workflows/{id}/done` | `WorkflowDone` | 204 |
//! | `POST /agent/workflows/{id}/hand-over` | – | 204 (a stopping agent's workflow: noted in its running steps' logs, queued again) |
//!
//! 401 for a missing or unknown token, 409 when the agent does not hold the workflow's
//! lease (it expired and the workflow went to another agent, or it was never this agent's),
//! 400 for bad bodies. `canceled` answers only the agent the workflow is or was leased to
//! (also after a cancel ended the lease): for any other agent it is 404, as for a workflow
//! that does not exist.

use std::sync::Arc;

use serde_json::json;

use crate::auth;
use crate::ci::queue::AgentIdent;
use crate::http::router::SenderKnown;
use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::runner::protocol::{AgentInfo, LogLine, StepUpdate, WorkflowDone};
use crate::state::Ctx;
use crate::store::agents::{self, AgentRow};

/// Log batches can be large; everything else is small.
const LOG_BODY_LIMIT: usize = 8 * 1024 * 1024;

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope
        .post("/agent/next", next)
        .post("/agent/workflows/{workflow_id}/init", init)
        .post("/agent/workflows/{workflow_id}/steps", step)
        .route_guarded(
            crate::http::Method::POST,
            "/agent/workflows/{workflow_id}/logs",
            LOG_BODY_LIMIT,
            known_agent,
            logs,
        )
        .post("/agent/workflows/{workflow_id}/extend", extend)
        .get("/agent/workflows/{workflow_id}/canceled", canceled)
        .post("/agent/workflows/{workflow_id}/done", done)
        .post("/agent/workflows/{workflow_id}/hand-over", hand_over);
}

/// The agent a request's token belongs to: the one [`known_agent`] found from the head, else
/// one statement, on every call an agent makes, so `read_one` (on PostgreSQL, no transaction
/// and no hop off the runtime).
async fn agent(ctx: &Ctx, req: &Request) -> Result<Arc<AgentRow>, ApiError> {
    if let Some(row) = req.extensions.get::<Arc<AgentRow>>() {
        return Ok(row.clone());
    }
    let token = auth::bearer(req).ok_or_else(ApiError::unauthorized)?;
    ctx.ci
        .reads
        .read_one(move |c| agents::by_token(c, &token))
        .await?
        .map(Arc::new)
        .ok_or_else(ApiError::unauthorized)
}

async fn next(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let row = agent(&ctx, &req).await?;
    let info: AgentInfo = if req.body.is_empty() {
        AgentInfo::default()
    } else {
        req.json()?
    };
    ctx.ci.queue.record_info(&row, &info).await?;
    let ident = AgentIdent::new(&row, &info);
    match ctx.ci.queue.next(&ident).await? {
        Some(work) => Ok(Response::json(&work)),
        None => Ok(Response::empty(StatusCode::NO_CONTENT)),
    }
}

fn workflow_id(req: &Request) -> Result<i64, ApiError> {
    req.param_i64("workflow_id")
}

async fn init(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let row = agent(&ctx, &req).await?;
    ctx.ci.queue.init(row.agent.id, workflow_id(&req)?).await?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

async fn step(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let row = agent(&ctx, &req).await?;
    let update: StepUpdate = req.json()?;
    ctx.ci
        .queue
        .step(row.agent.id, workflow_id(&req)?, update)
        .await?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

/// The head check of log uploads (up to [`LOG_BODY_LIMIT`]): a request without a valid
/// agent token is refused before its body is read; an agent's batch is read outside the
/// budget for bodies of senders not yet known, so logs keep flowing during a flood.
async fn known_agent(ctx: Ctx, mut req: Request) -> Result<Request, ApiError> {
    let row = agent(&ctx, &req).await?;
    req.extensions.insert(SenderKnown);
    req.extensions.insert(row);
    Ok(req)
}

async fn logs(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let row = agent(&ctx, &req).await?;
    let lines: Vec<LogLine> = req.json_list()?;
    ctx.ci
        .queue
        .logs(row.agent.id, workflow_id(&req)?, lines)
        .await?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

async fn extend(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let row = agent(&ctx, &req).await?;
    ctx.ci
        .queue
        .extend(row.agent.id, workflow_id(&req)?)
        .await?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

async fn canceled(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let row = agent(&ctx, &req).await?;
    let canceled = ctx
        .ci
        .queue
        .wait_canceled(row.agent.id, workflow_id(&req)?)
        .await?;
    Ok(Response::json(&json!({ "canceled": canceled })))
}

async fn done(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let row = agent(&ctx, &req).await?;
    let done: WorkflowDone = req.json()?;
    ctx.ci
        .queue
        .done(row.agent.id, workflow_id(&req)?, done)
        .await?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

async fn hand_over(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let row = agent(&ctx, &req).await?;
    ctx.ci
        .queue
        .hand_over(row.agent.id, workflow_id(&req)?)
        .await?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}
