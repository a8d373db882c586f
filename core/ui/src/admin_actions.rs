//! The admin page's forms, each carried out by the REST handler of the same change
//! (`through_api`): users (`/api/users`), agents (`/api/agents`; the new agent's token is
//! shown on the answer to its form, once), the queue (`/api/queue/pause|resume`) and the
//! instance's secrets and registries (`scoped_actions`, the global scope).

use std::sync::Arc;

use serde_json::{Value, json};

use super::admin::{NewAgent, admin_page};
use super::forms::{self, Form};
use super::host::UiHost;
use super::scoped_actions;
use super::through_api::{self, Action, Call, Gate, Origin, PageHandler, checked, item, nothing};
use crate::http::{ApiError, Method, Request, Response, Scope};

/// The form routes below `<root>/admin`.
pub fn routes<H: UiHost>(scope: &mut Scope<'_, Arc<H>>) {
    let user = "/users/{login}";
    let rows = [
        Action::new("/users", "User added.", new_user, Method::POST, "/users"),
        Action::new(
            "/users/delete",
            "User deleted.",
            item("login", "login"),
            Method::DELETE,
            user,
        ),
        Action::new("/users/admin", "Role changed.", role, Method::PATCH, user),
        Action::new(
            "/agents/delete",
            "Agent deleted.",
            item("agent_id", "id"),
            Method::DELETE,
            "/agents/{agent_id}",
        ),
        Action::new(
            "/queue/pause",
            "Queue paused.",
            nothing,
            Method::POST,
            "/queue/pause",
        ),
        Action::new(
            "/queue/resume",
            "Queue resumed.",
            nothing,
            Method::POST,
            "/queue/resume",
        ),
    ];
    let show = through_api::page_handler(super::admin::show::<H>);
    through_api::register(scope, "/admin", Gate::Admin, show.clone(), rows);
    scoped_actions::routes(scope, "/admin", Gate::Admin, "", show.clone());
    forms::post(scope, "/admin/agents", move |host, req| {
        add_agent(host, req, show.clone())
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
async fn add_agent<H: UiHost>(
    host: Arc<H>,
    mut req: Request,
    show: PageHandler<H>,
) -> Result<Response, ApiError> {
    let posted = match through_api::read(&host, &mut req, "Administration", Gate::Admin).await {
        Ok(posted) => posted,
        Err(page) => return Ok(page),
    };
    let call = Call::body(json!({
        "name": posted.form.get("name").unwrap_or("").trim(),
        "no_schedule": checked(&posted.form, "no_schedule"),
    }));
    let origin = Origin::of(&req, "/agents");
    let created = match through_api::send(&host, req, Method::POST, "/agents", call).await {
        Ok(created) => created,
        Err(err) => {
            return Ok(through_api::refused(&host, origin, "agents", posted, &show, err).await);
        }
    };
    let frame = posted.frame;
    let agent: Value = serde_json::from_slice(&created.body).map_err(ApiError::internal)?;
    let new = NewAgent {
        name: agent["name"].as_str().unwrap_or_default().to_string(),
        token: agent["token"].as_str().unwrap_or_default().to_string(),
    };
    tracing::info!(agent = %new.name, "ui: agent registered, its token shown once");
    admin_page(&host, frame, Some(new)).await
}
