//! The secret and registry forms of every settings page (a repository's, an organisation's,
//! the admin page's): add, edit and delete a secret, add and delete a registry, each by the
//! API's route of its scope (`/repos/{repo_id}/secrets`, `/orgs/{org_id}/secrets`,
//! `/secrets`, …), so the scope's access rule is the API's.

use std::sync::Arc;

use serde_json::{Value, json};

use super::forms::Form;
use super::host::UiHost;
use super::through_api::{self, Action, Call, Gate, PageHandler, all_of, item, list_field};
use crate::http::{ApiError, Method, Scope};

/// Registers the forms below `base` (a settings page's path, its parameters those the
/// scope's API routes name: `{repo_id}`, `{org_id}` or none), checked by the page's `gate`,
/// carried out below `api` (the scope's API prefix: `/repos/{repo_id}`, `/orgs/{org_id}`, or
/// `""` for the instance's).
pub fn routes<H: UiHost>(
    scope: &mut Scope<'_, Arc<H>>,
    base: &str,
    gate: Gate,
    api: &str,
    show: PageHandler<H>,
) {
    let secrets = format!("{api}/secrets");
    let secret = format!("{api}/secrets/{{secret}}");
    let registries = format!("{api}/registries");
    let registry = format!("{api}/registries/{{registry}}");
    let forms = [
        Action::new(
            "/secrets",
            "Secret added.",
            new_secret,
            Method::POST,
            secrets,
        ),
        Action::new(
            "/secrets/edit",
            "Secret saved.",
            edit_secret,
            Method::PATCH,
            secret.clone(),
        ),
        Action::new(
            "/secrets/delete",
            "Secret deleted.",
            item("secret", "name"),
            Method::DELETE,
            secret,
        ),
        Action::new(
            "/registries",
            "Registry added.",
            new_registry,
            Method::POST,
            registries,
        ),
        Action::new(
            "/registries/delete",
            "Registry deleted.",
            item("registry", "address"),
            Method::DELETE,
            registry,
        ),
    ];
    through_api::register(scope, base, gate, show, forms);
}

/// A secret's fields as `POST`/`PATCH …/secrets` take them (`value` only when given: an
/// edit without one keeps the stored value).
fn secret_body(form: &Form) -> Value {
    let mut body = json!({
        "name": form.get("name").unwrap_or("").trim(),
        "events": all_of(form, "events"),
        "images": list_field(form, "images"),
        "note": form.get("note").unwrap_or(""),
    });
    if let Some(value) = form.get("value").filter(|v| !v.is_empty()) {
        body["value"] = json!(value);
    }
    body
}

fn new_secret(form: &Form, _: bool) -> Result<Call, ApiError> {
    Ok(Call::body(secret_body(form)))
}

/// An edit names the secret it changes (`PATCH …/secrets/{secret}`).
fn edit_secret(form: &Form, _: bool) -> Result<Call, ApiError> {
    let name = form.required("name")?.to_string();
    Ok(Call::body(secret_body(form)).param("secret", &name))
}

fn new_registry(form: &Form, _: bool) -> Result<Call, ApiError> {
    Ok(Call::body(json!({
        "address": form.get("address").unwrap_or("").trim(),
        "username": form.get("username").unwrap_or("").trim(),
        "password": form.get("password").unwrap_or(""),
    })))
}
