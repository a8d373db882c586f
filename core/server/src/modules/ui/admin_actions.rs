//! The admin page's forms, each carried out by the REST handler of the same change
//! (`through_api`): users (`/api/users`), agents (`/api/agents`; the new agent's token is
//! shown on the answer to its form, once), the queue (`/api/queue/pause|resume`) and the
//! instance's secrets and registries (`scoped_actions`, the global scope).

use serde_json::{Value, json};

use super::admin::{NewAgent, admin_page};
use super::forms::{self, Form};
use super::scoped_actions;
use super::through_api::{self, Action, Call, Gate, Origin, PageHandler, checked, item, nothing};
use crate::http::{ApiError, Request, Response, Scope};
use crate::modules::ci::pipelines::admin as queue;
use crate::modules::ci::scoped::Level;
use crate::modules::ci::{agents, users};
use crate::state::Ctx;

/// The form routes below `<root>/admin`.
pub fn routes(scope: &mut Scope<'_, Ctx>) {
    let delete_agent = |ctx: Ctx, req: Request| agents::delete(ctx, req, agents::Manager::Admin);
    let rows = [
        Action::new("/users", "User added.", new_user, users::create),
        Action::new(
            "/users/delete",
            "User deleted.",
            item("login", "login"),
            users::delete,
        ),
        Action::new("/users/admin", "Role changed.", role, users::update),
        Action::new(
            "/agents/delete",
            "Agent deleted.",
            item("agent_id", "id"),
            delete_agent,
        ),
        Action::new("/queue/pause", "Queue paused.", nothing, queue::pause),
        Action::new("/queue/resume", "Queue resumed.", nothing, queue::resume),
    ];
    let show = through_api::page_handler(super::admin::show);
    through_api::register(scope, "/admin", Gate::Admin, (), show.clone(), rows);
    scoped_actions::routes(scope, "/admin", Level::Global, show.clone());
    forms::post(scope, "/admin/agents", move |ctx, req| {
        add_agent(ctx, req, show.clone())
    });
}

fn new_user(form: &Form, _: bool) -> Result<Call, ApiError> {
    Ok(Call::body(json!({
        "login": form.get("login").unwrap_or("").trim(),
        "email": form.get("email").unwrap_or("").trim(),
        "admin": checked(form, "admin"),
    })))
}

/// `admin=true|false` for `login` (`PATCH /api/users/{login}`).
fn role(form: &Form, _: bool) -> Result<Call, ApiError> {
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
}

/// `POST /admin/agents`: registers an agent and answers with the admin page showing its
/// token (not a redirect: the token is shown on this answer only, never kept for a later
/// page).
async fn add_agent(ctx: Ctx, mut req: Request, show: PageHandler) -> Result<Response, ApiError> {
    let posted = match through_api::read(&ctx, &mut req, "Administration", Gate::Admin).await {
        Ok(posted) => posted,
        Err(page) => return Ok(page),
    };
    let call = Call::body(json!({
        "name": posted.form.get("name").unwrap_or("").trim(),
        "no_schedule": checked(&posted.form, "no_schedule"),
    }));
    let origin = Origin::of(&req, "/agents");
    let created = through_api::through(&ctx, req, call, |ctx, req| {
        agents::create(ctx, req, agents::Manager::Admin)
    })
    .await;
    let created = match created {
        Ok(created) => created,
        Err(err) => {
            return Ok(through_api::refused(&ctx, origin, "agents", posted, &show, err).await);
        }
    };
    let frame = posted.frame;
    let agent: Value = serde_json::from_slice(&created.body).map_err(ApiError::internal)?;
    let new = NewAgent {
        name: agent["name"].as_str().unwrap_or_default().to_string(),
        token: agent["token"].as_str().unwrap_or_default().to_string(),
    };
    tracing::info!(agent = %new.name, "ui: agent registered, its token shown once");
    admin_page(&ctx, frame, Some(new)).await
}
