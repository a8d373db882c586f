//! The admin page's forms, each carried out by the REST handler of the same change
//! (`through_api`): users (`/api/users`), agents (`/api/agents`; the new agent's token is
//! shown on the answer to its form, once), the queue (`/api/queue/pause|resume`) and the
//! instance's secrets and registries (`scoped_actions`, the global scope).

use serde_json::{Value, json};

use super::admin::{NewAgent, admin_page};
use super::forms;
use super::scoped_actions;
use super::through_api::{self, Call, Gate, act, checked};
use crate::http::{ApiError, Request, Response, Scope};
use crate::modules::ci::pipelines::admin as queue;
use crate::modules::ci::scoped::Level;
use crate::modules::ci::{agents, users};
use crate::state::Ctx;

/// The form routes below `<root>/admin`.
pub fn routes(scope: &mut Scope<'_, Ctx>) {
    forms::post(scope, "/admin/users", add_user);
    forms::post(scope, "/admin/users/delete", delete_user);
    forms::post(scope, "/admin/users/admin", set_admin);
    forms::post(scope, "/admin/agents", add_agent);
    forms::post(scope, "/admin/agents/delete", delete_agent);
    forms::post(scope, "/admin/queue/pause", pause);
    forms::post(scope, "/admin/queue/resume", resume);
    scoped_actions::routes(scope, "/admin", Level::Global);
}

/// The admin page (from the post's path, so a root path is kept) at section `anchor`.
fn section(req: &Request, anchor: &str) -> String {
    const PAGE: &str = "/admin";
    let end = req
        .path
        .rfind(PAGE)
        .map_or(req.path.len(), |at| at + PAGE.len());
    format!("{}#{anchor}", &req.path[..end])
}

async fn add_user(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let back = section(&req, "users");
    act(
        ctx,
        req,
        Gate::Admin,
        back,
        "User added.",
        |form, _| {
            Ok(Call::body(json!({
                "login": form.get("login").unwrap_or("").trim(),
                "email": form.get("email").unwrap_or("").trim(),
                "admin": checked(form, "admin"),
            })))
        },
        users::create,
    )
    .await
}

async fn delete_user(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let back = section(&req, "users");
    act(
        ctx,
        req,
        Gate::Admin,
        back,
        "User deleted.",
        |form, _| Ok(Call::body(json!({})).param("login", form.required("login")?)),
        users::delete,
    )
    .await
}

/// `POST /admin/users/admin`: `admin=true|false` for `login` (`PATCH /api/users/{login}`).
async fn set_admin(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let back = section(&req, "users");
    act(
        ctx,
        req,
        Gate::Admin,
        back,
        "Role changed.",
        |form, _| {
            let admin = match form.required("admin")? {
                "true" => true,
                "false" => false,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "admin must be true or false, not {other:?}"
                    )));
                }
            };
            Ok(Call::body(json!({ "admin": admin })).param("login", form.required("login")?))
        },
        users::update,
    )
    .await
}

/// `POST /admin/agents`: registers an agent and answers with the admin page showing its
/// token (not a redirect: the token is shown on this answer only, never kept for a later
/// page).
async fn add_agent(ctx: Ctx, mut req: Request) -> Result<Response, ApiError> {
    let posted = match through_api::read(&ctx, &mut req, "Administration", Gate::Admin).await {
        Ok(posted) => posted,
        Err(page) => return Ok(page),
    };
    let call = Ok(Call::body(json!({
        "name": posted.form.get("name").unwrap_or("").trim(),
        "no_schedule": checked(&posted.form, "no_schedule"),
    })));
    let frame = posted.frame;
    let created = match through_api::call(&ctx, req, frame.clone(), call, |ctx, req| {
        agents::create(ctx, req, agents::Manager::Admin)
    })
    .await
    {
        Ok(created) => created,
        Err(page) => return Ok(page),
    };
    let agent: Value = serde_json::from_slice(&created.body).map_err(ApiError::internal)?;
    let new = NewAgent {
        name: agent["name"].as_str().unwrap_or_default().to_string(),
        token: agent["token"].as_str().unwrap_or_default().to_string(),
    };
    tracing::info!(agent = %new.name, "ui: agent registered, its token shown once");
    admin_page(&ctx, frame, Some(new)).await
}

async fn delete_agent(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let back = section(&req, "agents");
    act(
        ctx,
        req,
        Gate::Admin,
        back,
        "Agent deleted.",
        |form, _| Ok(Call::body(json!({})).param("agent_id", form.required("id")?)),
        |ctx, req| agents::delete(ctx, req, agents::Manager::Admin),
    )
    .await
}

async fn pause(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let back = section(&req, "queue");
    act(
        ctx,
        req,
        Gate::Admin,
        back,
        "Queue paused.",
        |_, _| Ok(Call::body(json!({}))),
        queue::pause,
    )
    .await
}

async fn resume(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let back = section(&req, "queue");
    act(
        ctx,
        req,
        Gate::Admin,
        back,
        "Queue resumed.",
        |_, _| Ok(Call::body(json!({}))),
        queue::resume,
    )
    .await
}
