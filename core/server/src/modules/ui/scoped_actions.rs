//! The secret and registry forms of every settings page (a repository's, an organisation's,
//! the admin page's): add, edit and delete a secret, add and delete a registry, each by the
//! API's own handler for its scope ([`Level`]), so the scope's access rule is the API's.

use serde_json::{Value, json};

use super::forms::{self, Form};
use super::through_api::{Call, Gate, act, all_of, list_field};
use crate::ci::scoped::{Registries, Secrets};
use crate::http::{ApiError, Request, Response, Scope};
use crate::modules::ci::scoped::{self, Level};
use crate::state::Ctx;

/// Registers the forms below `base` (a settings page's path, its parameters those the
/// scope's API routes name: `{repo_id}`, `{org_id}` or none) for `level`.
pub fn routes(scope: &mut Scope<'_, Ctx>, base: &str, level: Level) {
    forms::post(scope, &format!("{base}/secrets"), move |ctx, req| {
        add_secret(ctx, req, level)
    });
    forms::post(scope, &format!("{base}/secrets/edit"), move |ctx, req| {
        edit_secret(ctx, req, level)
    });
    forms::post(scope, &format!("{base}/secrets/delete"), move |ctx, req| {
        delete_secret(ctx, req, level)
    });
    forms::post(scope, &format!("{base}/registries"), move |ctx, req| {
        add_registry(ctx, req, level)
    });
    forms::post(
        scope,
        &format!("{base}/registries/delete"),
        move |ctx, req| delete_registry(ctx, req, level),
    );
}

/// The settings page a form under it posted from, at section `anchor`.
fn back(req: &Request, collection: &str, anchor: &str) -> String {
    let marker = format!("/{collection}");
    let page = req
        .path
        .rfind(&marker)
        .map_or(req.path.as_str(), |at| &req.path[..at]);
    format!("{page}#{anchor}")
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

async fn add_secret(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let back = back(&req, "secrets", "secrets");
    act(
        ctx,
        req,
        Gate::Scoped(level),
        back,
        "Secret added.",
        |form, _| Ok(Call::body(secret_body(form))),
        move |ctx, req| scoped::create::<Secrets>(ctx, req, level),
    )
    .await
}

async fn edit_secret(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let back = back(&req, "secrets", "secrets");
    act(
        ctx,
        req,
        Gate::Scoped(level),
        back,
        "Secret saved.",
        |form, _| {
            let name = form.required("name")?.to_string();
            Ok(Call::body(secret_body(form)).param("secret", &name))
        },
        move |ctx, req| scoped::update::<Secrets>(ctx, req, level),
    )
    .await
}

async fn delete_secret(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let back = back(&req, "secrets", "secrets");
    act(
        ctx,
        req,
        Gate::Scoped(level),
        back,
        "Secret deleted.",
        |form, _| Ok(Call::body(json!({})).param("secret", form.required("name")?)),
        move |ctx, req| scoped::delete::<Secrets>(ctx, req, level),
    )
    .await
}

async fn add_registry(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let back = back(&req, "registries", "registries");
    act(
        ctx,
        req,
        Gate::Scoped(level),
        back,
        "Registry added.",
        |form, _| {
            Ok(Call::body(json!({
                "address": form.get("address").unwrap_or("").trim(),
                "username": form.get("username").unwrap_or("").trim(),
                "password": form.get("password").unwrap_or(""),
            })))
        },
        move |ctx, req| scoped::create::<Registries>(ctx, req, level),
    )
    .await
}

async fn delete_registry(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let back = back(&req, "registries", "registries");
    act(
        ctx,
        req,
        Gate::Scoped(level),
        back,
        "Registry deleted.",
        |form, _| Ok(Call::body(json!({})).param("registry", form.required("address")?)),
        move |ctx, req| scoped::delete::<Registries>(ctx, req, level),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::Method;

    #[test]
    fn a_form_goes_back_to_its_settings_section() {
        let req = Request::new(Method::POST, "/ci/repos/7/settings/secrets/edit");
        assert_eq!(
            back(&req, "secrets", "secrets"),
            "/ci/repos/7/settings#secrets"
        );
        let req = Request::new(Method::POST, "/admin/registries/delete");
        assert_eq!(back(&req, "registries", "registries"), "/admin#registries");
    }
}
