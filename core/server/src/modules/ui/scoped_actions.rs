//! The secret and registry forms of every settings page (a repository's, an organisation's,
//! the admin page's): add, edit and delete a secret, add and delete a registry, each by the
//! API's own handler for its scope ([`Level`]), so the scope's access rule is the API's.

use serde_json::{Value, json};

use super::forms::Form;
use super::through_api::{self, Action, Call, Gate, PageHandler, all_of, item, list_field};
use crate::ci::scoped::{Registries, Secrets};
use crate::http::{ApiError, Scope};
use crate::modules::ci::scoped::{Level, create, delete, update};
use crate::state::Ctx;

/// Registers the forms below `base` (a settings page's path, its parameters those the
/// scope's API routes name: `{repo_id}`, `{org_id}` or none) for `level`; `show` is the
/// page's `GET`.
pub fn routes(scope: &mut Scope<'_, Ctx>, base: &str, level: Level, show: PageHandler) {
    let forms = [
        Action::new("/secrets", "Secret added.", new_secret, create::<Secrets>),
        Action::new(
            "/secrets/edit",
            "Secret saved.",
            edit_secret,
            update::<Secrets>,
        ),
        Action::new(
            "/secrets/delete",
            "Secret deleted.",
            item("secret", "name"),
            delete::<Secrets>,
        ),
        Action::new(
            "/registries",
            "Registry added.",
            new_registry,
            create::<Registries>,
        ),
        Action::new(
            "/registries/delete",
            "Registry deleted.",
            item("registry", "address"),
            delete::<Registries>,
        ),
    ];
    through_api::register(scope, base, Gate::Scoped(level), level, show, forms);
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
