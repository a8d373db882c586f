//! The forms of a repository's settings page, each carried out by the REST handler of the
//! same change (`through_api`): general settings (`PATCH /api/repos/{id}`), crons
//! (`…/cron`, and running one now), and the secrets and registries (`scoped_actions`). On
//! success the browser goes back to the section it posted from with a message; a refusal is
//! the API's status and message as a page, with nothing changed.

use serde_json::{Map, Value, json};

use super::forms::{self, Form};
use super::scoped_actions;
use super::through_api::{Call, Gate, act, all_of, checked, number};
use crate::http::{ApiError, Request, Response, Scope};
use crate::modules::ci::scoped::Level;
use crate::modules::ci::{crons, pipelines, repos};
use crate::state::Ctx;

/// The form routes below `<root>/repos/{repo_id}/settings`.
pub fn routes(scope: &mut Scope<'_, Ctx>) {
    let base = "/repos/{repo_id}/settings";
    forms::post(scope, base, general);
    scoped_actions::routes(scope, base, Level::Repo);
    forms::post(scope, &format!("{base}/crons"), add_cron);
    forms::post(scope, &format!("{base}/crons/delete"), delete_cron);
    forms::post(scope, &format!("{base}/crons/run"), run_cron);
}

/// The settings page a form under it posted from, at section `anchor`.
fn section(req: &Request, anchor: &str) -> String {
    const PAGE: &str = "/settings";
    let end = req
        .path
        .rfind(PAGE)
        .map_or(req.path.len(), |at| at + PAGE.len());
    format!("{}#{anchor}", &req.path[..end])
}

/// `POST …/settings`: the general form as `PATCH /api/repos/{id}` takes it. Unticked boxes
/// are `false` (a form leaves them out); the trusted flags are sent when the caller is an
/// instance admin (the only ones the form lets change them) or when the post names one, so
/// the API refuses anyone else who tries.
async fn general(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let back = section(&req, "general");
    act(
        ctx,
        req,
        Gate::RepoAdmin,
        back,
        "Settings saved.",
        |form, instance_admin| Ok(Call::body(general_body(form, instance_admin)?)),
        repos::update,
    )
    .await
}

fn general_body(form: &Form, instance_admin: bool) -> Result<Value, ApiError> {
    let mut body = Map::new();
    let config_file = form.get("config_file").unwrap_or("").trim();
    body.insert("config_file".into(), json!(config_file));
    body.insert("timeout".into(), json!(number(form, "timeout")?));
    for field in ["visibility", "require_approval"] {
        if let Some(v) = form.get(field) {
            body.insert(field.into(), json!(v));
        }
    }
    body.insert("allow_pr".into(), json!(checked(form, "allow_pr")));
    body.insert("allow_deploy".into(), json!(checked(form, "allow_deploy")));
    body.insert(
        "cancel_previous_pipeline_events".into(),
        json!(all_of(form, "cancel_previous_pipeline_events")),
    );
    let flags = ["trusted_network", "trusted_volumes", "trusted_security"];
    if instance_admin || flags.iter().any(|f| checked(form, f)) {
        body.insert(
            "trusted".into(),
            json!({
                "network": checked(form, "trusted_network"),
                "volumes": checked(form, "trusted_volumes"),
                "security": checked(form, "trusted_security"),
            }),
        );
    }
    Ok(Value::Object(body))
}

async fn add_cron(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let back = section(&req, "crons");
    act(
        ctx,
        req,
        Gate::RepoAdmin,
        back,
        "Cron added.",
        |form, _| {
            Ok(Call::body(json!({
                "name": form.get("name").unwrap_or("").trim(),
                "schedule": form.get("schedule").unwrap_or(""),
                "timezone": form.get("timezone").unwrap_or(""),
                "branch": form.get("branch").unwrap_or("").trim(),
            })))
        },
        crons::create,
    )
    .await
}

/// The cron a delete or run form names, as the `{cron}` path parameter.
fn cron_call(form: &Form) -> Result<Call, ApiError> {
    Ok(Call::body(json!({})).param("cron", form.required("id")?))
}

async fn delete_cron(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let back = section(&req, "crons");
    act(
        ctx,
        req,
        Gate::RepoAdmin,
        back,
        "Cron deleted.",
        |form, _| cron_call(form),
        crons::delete,
    )
    .await
}

/// `POST …/crons/run`: a pipeline from the cron now (`POST /api/repos/{id}/cron/{cron}`).
async fn run_cron(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let back = section(&req, "crons");
    act(
        ctx,
        req,
        Gate::RepoAdmin,
        back,
        "The cron's pipeline was started.",
        |form, _| cron_call(form),
        pipelines::run_cron_now,
    )
    .await
}
