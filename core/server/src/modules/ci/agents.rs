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
use super::pagination::read_page;
use crate::ci;
use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::state::Ctx;
use crate::store::StoreError;
use crate::store::agents::{
    self, Agent, AgentChange, AgentRow, ID_NOT_SET, SEAL_PURPOSE, validate_name,
};

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope
        .get("/agents", |ctx, req| list(ctx, req, Manager::Admin))
        .post("/agents", |ctx, req| create(ctx, req, Manager::Admin))
        .get("/agents/{agent_id}", get)
        .patch("/agents/{agent_id}", |ctx, req| {
            update(ctx, req, Manager::Admin)
        })
        .delete("/agents/{agent_id}", |ctx, req| {
            delete(ctx, req, Manager::Admin)
        })
        .get("/agents/{agent_id}/tasks", tasks)
        .get("/orgs/{org_id}/agents", |ctx, req| {
            list(ctx, req, Manager::Org)
        })
        .post("/orgs/{org_id}/agents", |ctx, req| {
            create(ctx, req, Manager::Org)
        })
        .patch("/orgs/{org_id}/agents/{agent_id}", |ctx, req| {
            update(ctx, req, Manager::Org)
        })
        .delete("/orgs/{org_id}/agents/{agent_id}", |ctx, req| {
            delete(ctx, req, Manager::Org)
        });
}

/// Who manages the agent a route names: an instance admin (`/agents/{agent_id}`: any agent)
/// or an org admin (`/orgs/{org_id}/agents/{agent_id}`: that organisation's agents only).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Manager {
    Admin,
    Org,
}

/// The caller authorised as `by`, and the organisation it manages agents of: its id for an
/// org admin, [`ID_NOT_SET`] for an instance admin (whose agents are global).
async fn manager(ctx: &Ctx, req: &Request, by: Manager) -> Result<(i64, i64), ApiError> {
    Ok(match by {
        Manager::Admin => (must_admin(ctx, req).await?.user.id, ID_NOT_SET),
        Manager::Org => {
            let access = org(ctx, req, true).await?;
            (access.user.user.id, access.org.id)
        }
    })
}

/// The route's `{agent_id}` once the caller is authorised as `by`. An admin route passes any
/// id on (an unknown one is the call's own 404); an org route must name an agent of that
/// organisation (404 otherwise, as for an unknown one).
async fn managed_agent(ctx: &Ctx, req: &Request, by: Manager) -> Result<i64, ApiError> {
    let (_, org_id) = manager(ctx, req, by).await?;
    let id = req.param_i64("agent_id")?;
    if matches!(by, Manager::Org) && agent_row(ctx, id).await?.agent.org_id != org_id {
        return Err(agent_not_found());
    }
    Ok(id)
}

/// Agent `id` with its sealed token; 404 when there is none.
async fn agent_row(ctx: &Ctx, id: i64) -> Result<AgentRow, ApiError> {
    ctx.ci
        .reads
        .read(move |c| agents::by_id(c, id))
        .await
        .map_err(not_found)
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

/// `GET /agents` (admin): one page of every agent, by id; `GET /orgs/{org_id}/agents` (org
/// admin): of that organisation's.
async fn list(ctx: Ctx, req: Request, by: Manager) -> Result<Response, ApiError> {
    let (_, org_id) = manager(&ctx, &req, by).await?;
    let rows = read_page(&ctx, &req, move |c, page, per_page| match by {
        Manager::Admin => agents::list(c, page, per_page),
        Manager::Org => agents::list_for_org(c, org_id, page, per_page),
    })
    .await?;
    Ok(Response::json(&render_all(&ctx, rows)))
}

/// `POST /agents` (admin): a global agent owned by the caller; `POST /orgs/{org_id}/agents`
/// (org admin): an agent for that organisation's work only.
pub(crate) async fn create(ctx: Ctx, req: Request, by: Manager) -> Result<Response, ApiError> {
    let (owner_id, org_id) = manager(&ctx, &req, by).await?;
    let agent = create_in(&ctx, &req, owner_id, org_id).await?;
    Ok(Response::json(&agent))
}

/// `GET /agents/{agent_id}` (admin).
async fn get(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let row = agent_row(&ctx, req.param_i64("agent_id")?).await?;
    Ok(Response::json(&render(&ctx, row)))
}

/// `PATCH /agents/{agent_id}` (admin) and `/orgs/{org_id}/agents/{agent_id}` (org admin):
/// `name`, `no_schedule`.
async fn update(ctx: Ctx, req: Request, by: Manager) -> Result<Response, ApiError> {
    let id = managed_agent(&ctx, &req, by).await?;
    let change = change_from(&req)?;
    let row = ci::agents::update(&ctx.ci, id, change)
        .await
        .map_err(not_found)?;
    Ok(Response::json(&render(&ctx, row)))
}

/// `DELETE /agents/{agent_id}` (admin) and `/orgs/{org_id}/agents/{agent_id}` (org admin):
/// 204.
pub(crate) async fn delete(ctx: Ctx, req: Request, by: Manager) -> Result<Response, ApiError> {
    let id = managed_agent(&ctx, &req, by).await?;
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
