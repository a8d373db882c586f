//! Agents: `/agents` (instance admins: every agent) and `/orgs/{org_id}/agents` (org admins:
//! that organisation's agents).
//!
//! Create reads only `name` (required, 422 if empty) and `no_schedule`, generates a random
//! token (sealed at rest, looked up by its SHA-256) and answers with the agent **including**
//! its token, which every route here shows again to those who manage the agent (upstream
//! does the same). Events record agents without their token. An org route naming an agent of
//! another organisation answers 404.

use serde::Deserialize;

use super::access::{must_admin, org};
use super::pagination::Page;
use crate::ci;
use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::state::Ctx;
use crate::store::StoreError;
use crate::store::agents::{
    self, Agent, AgentChange, AgentRow, ID_NOT_SET, SEAL_PURPOSE, validate_name,
};

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope
        .get("/agents", list)
        .post("/agents", create)
        .get("/agents/{agent_id}", get)
        .patch("/agents/{agent_id}", update)
        .delete("/agents/{agent_id}", delete)
        .get("/agents/{agent_id}/tasks", tasks)
        .get("/orgs/{org_id}/agents", org_list)
        .post("/orgs/{org_id}/agents", org_create)
        .patch("/orgs/{org_id}/agents/{agent_id}", org_update)
        .delete("/orgs/{org_id}/agents/{agent_id}", org_delete);
}

fn agent_not_found() -> ApiError {
    ApiError::not_found("Agent not found")
}

fn not_found(err: impl Into<ci::Error>) -> ApiError {
    match err.into() {
        ci::Error::Store(StoreError::NotFound) => agent_not_found(),
        other => other.into(),
    }
}

/// The agent as its managers see it: with the token opened. A token that cannot be opened
/// (the secrets key was replaced) renders empty rather than failing the whole response.
fn render(ctx: &Ctx, row: AgentRow) -> Agent {
    let mut agent = row.agent;
    match ctx.ci.seal.open(SEAL_PURPOSE, &row.sealed_token) {
        Ok(bytes) => agent.token = String::from_utf8(bytes).unwrap_or_default(),
        Err(err) => {
            tracing::warn!(agent = agent.id, %err, "cannot open the agent's token");
        }
    }
    agent
}

fn render_all(ctx: &Ctx, rows: Vec<AgentRow>) -> Vec<Agent> {
    rows.into_iter().map(|row| render(ctx, row)).collect()
}

/// The body of create and update (Woodpecker's `Agent`): only `name` and `no_schedule` are
/// read; everything else is reported by the agent itself.
#[derive(Debug, Default, Deserialize)]
struct AgentIn {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    no_schedule: Option<bool>,
}

async fn create_in(
    ctx: &Ctx,
    req: &Request,
    owner_id: i64,
    org_id: i64,
) -> Result<Agent, ApiError> {
    let body: AgentIn = req.json()?;
    let name = body.name.unwrap_or_default();
    validate_name(&name).map_err(ApiError::unprocessable)?;
    let no_schedule = body.no_schedule.unwrap_or(false);
    Ok(ci::agents::register(&ctx.ci, owner_id, org_id, name, no_schedule).await?)
}

fn change_from(req: &Request) -> Result<AgentChange, ApiError> {
    let body: AgentIn = req.json()?;
    if let Some(name) = &body.name {
        validate_name(name).map_err(ApiError::unprocessable)?;
    }
    Ok(AgentChange {
        name: body.name,
        no_schedule: body.no_schedule,
    })
}

/// `GET /agents` (admin): one page of every agent, by id.
async fn list(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let page = Page::from_request(&req);
    let rows = ctx
        .ci
        .reads
        .read(move |c| agents::list(c, page.page, page.per_page))
        .await?;
    Ok(Response::json(&render_all(&ctx, rows)))
}

/// `POST /agents` (admin): a global agent owned by the caller.
pub(crate) async fn create(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let admin = must_admin(&ctx, &req).await?;
    let agent = create_in(&ctx, &req, admin.user.id, ID_NOT_SET).await?;
    Ok(Response::json(&agent))
}

/// `GET /agents/{agent_id}` (admin).
async fn get(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let id = req.param_i64("agent_id")?;
    let row = ctx
        .ci
        .reads
        .read(move |c| agents::by_id(c, id))
        .await
        .map_err(not_found)?;
    Ok(Response::json(&render(&ctx, row)))
}

/// `PATCH /agents/{agent_id}` (admin): `name`, `no_schedule`.
async fn update(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let id = req.param_i64("agent_id")?;
    let change = change_from(&req)?;
    let row = ci::agents::update(&ctx.ci, id, change)
        .await
        .map_err(not_found)?;
    Ok(Response::json(&render(&ctx, row)))
}

/// `DELETE /agents/{agent_id}` (admin): 204.
pub(crate) async fn delete(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let id = req.param_i64("agent_id")?;
    ci::agents::remove(&ctx.ci, id).await.map_err(not_found)?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

/// `GET /agents/{agent_id}/tasks` (admin): the workflows the agent holds a lease on, as
/// upstream's `Task`; an unknown agent is 404.
async fn tasks(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let id = req.param_i64("agent_id")?;
    let list = ctx
        .ci
        .reads
        .read(move |c| {
            agents::by_id(c, id)?;
            crate::store::tasks::of_agent(c, id)?
                .iter()
                .map(|t| super::pipelines::admin::queue_task(c, t))
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(not_found)?;
    Ok(Response::json(&list))
}

/// `GET /orgs/{org_id}/agents` (org admin).
async fn org_list(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = org(&ctx, &req, true).await?;
    let org_id = access.org.id;
    let page = Page::from_request(&req);
    let rows = ctx
        .ci
        .reads
        .read(move |c| agents::list_for_org(c, org_id, page.page, page.per_page))
        .await?;
    Ok(Response::json(&render_all(&ctx, rows)))
}

/// `POST /orgs/{org_id}/agents` (org admin): an agent for that organisation's work only.
async fn org_create(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = org(&ctx, &req, true).await?;
    let agent = create_in(&ctx, &req, access.user.user.id, access.org.id).await?;
    Ok(Response::json(&agent))
}

/// The `{agent_id}` of an org route, which must belong to that organisation (404 otherwise).
async fn org_agent(ctx: &Ctx, req: &Request) -> Result<i64, ApiError> {
    let access = org(ctx, req, true).await?;
    let id = req.param_i64("agent_id")?;
    let row = ctx
        .ci
        .reads
        .read(move |c| agents::by_id(c, id))
        .await
        .map_err(not_found)?;
    if row.agent.org_id != access.org.id {
        return Err(agent_not_found());
    }
    Ok(id)
}

/// `PATCH /orgs/{org_id}/agents/{agent_id}` (org admin).
async fn org_update(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let id = org_agent(&ctx, &req).await?;
    let change = change_from(&req)?;
    let row = ci::agents::update(&ctx.ci, id, change)
        .await
        .map_err(not_found)?;
    Ok(Response::json(&render(&ctx, row)))
}

/// `DELETE /orgs/{org_id}/agents/{agent_id}` (org admin): 204.
async fn org_delete(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let id = org_agent(&ctx, &req).await?;
    ci::agents::remove(&ctx.ci, id).await.map_err(not_found)?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}
