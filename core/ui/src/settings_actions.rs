//! The forms of a repository's settings page, each carried out by the REST handler of the
//! same change (`through_api`): general settings (`PATCH /api/repos/{id}`), crons
//! (`…/cron`, and running one now), and the secrets and registries (`scoped_actions`). On
//! success the browser goes back to the section it posted from with a message; a refusal of
//! what was typed shows the page again with the typed fields (`refused`), nothing changed.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::forms::Form;
use super::host::UiHost;
use super::scoped_actions;
use super::through_api::{self, Action, Call, Gate, all_of, checked, item, number};
use crate::http::{ApiError, Method, Scope};

/// The form routes below `<root>/repos/{repo_id}/settings`.
pub fn routes<H: UiHost>(scope: &mut Scope<'_, Arc<H>>) {
    let base = "/repos/{repo_id}/settings";
    let (repo, cron) = ("/repos/{repo_id}", "/repos/{repo_id}/cron/{cron}");
    let rows = [
        Action::new("", "Settings saved.", general, Method::PATCH, repo),
        Action::new(
            "/crons",
            "Cron added.",
            new_cron,
            Method::POST,
            "/repos/{repo_id}/cron",
        ),
        Action::new(
            "/crons/delete",
            "Cron deleted.",
            item("cron", "id"),
            Method::DELETE,
            cron,
        ),
        // `POST /api/repos/{id}/cron/{cron}`: a pipeline from the cron now.
        Action::new(
            "/crons/run",
            "The cron's pipeline was started.",
            item("cron", "id"),
            Method::POST,
            cron,
        ),
    ];
    let show = through_api::page_handler(super::settings::show::<H>);
    through_api::register(scope, base, Gate::RepoAdmin, show.clone(), rows);
    scoped_actions::routes(scope, base, Gate::RepoAdmin, repo, show);
}

/// The general form as `PATCH /api/repos/{id}` takes it. Unticked boxes are `false` (a form
/// leaves them out); the trusted flags are sent when the caller is an instance admin (the
/// only ones the form lets change them) or when the post names one, so the API refuses
/// anyone else who tries.
fn general(form: &Form, instance_admin: bool) -> Result<Call, ApiError> {
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
    Ok(Call::body(Value::Object(body)))
}

fn new_cron(form: &Form, _: bool) -> Result<Call, ApiError> {
    Ok(Call::body(json!({
        "name": form.get("name").unwrap_or("").trim(),
        "schedule": form.get("schedule").unwrap_or(""),
        "timezone": form.get("timezone").unwrap_or(""),
        "branch": form.get("branch").unwrap_or("").trim(),
    })))
}
