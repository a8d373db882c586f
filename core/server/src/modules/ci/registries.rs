//! Registry credentials at three scopes: `/registries` (instance admins),
//! `/orgs/{org_id}/registries` (org admins) and `/repos/{repo_id}/registries` (repo admins),
//! keyed by `address` (the `{registry}` path parameter, percent-decoded).
//!
//! Passwords are sealed before they reach the store and always render as `""`. Create needs
//! `address`, `username` and `password` (422 otherwise); duplicates are 409. PATCH changes
//! the non-empty fields it is given (a new `address` renames the entry, as upstream);
//! `readonly` is not writable (it marks registries from outside the database).

use serde::Deserialize;

use super::pagination::Page;
use super::secrets::{Level, path_text, resolve};
use crate::app::Ctx;
use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::store::StoreError;
use crate::store::registries::{
    self, MAX_FIELD, NewRegistry, RegistryChange, SEAL_PURPOSE, validate_address,
};

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    for (level, prefix) in Level::ALL {
        let all = format!("{prefix}/registries");
        let one = format!("{prefix}/registries/{{registry}}");
        scope
            .get(&all, move |ctx, req| list(ctx, req, level))
            .post(&all, move |ctx, req| create(ctx, req, level))
            .get(&one, move |ctx, req| get(ctx, req, level))
            .patch(&one, move |ctx, req| update(ctx, req, level))
            .delete(&one, move |ctx, req| delete(ctx, req, level));
    }
}

fn not_found(err: StoreError) -> ApiError {
    match err {
        StoreError::NotFound => ApiError::not_found("Registry not found"),
        other => other.into(),
    }
}

/// The body of create and update (Woodpecker's `Registry`); unknown fields are ignored.
#[derive(Debug, Default, Deserialize)]
struct RegistryIn {
    #[serde(default)]
    address: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

fn check_username(username: &str) -> Result<(), ApiError> {
    if username.is_empty() {
        return Err(ApiError::unprocessable(
            "invalid registry username: empty username",
        ));
    }
    if username.len() > MAX_FIELD || username.chars().any(char::is_control) {
        return Err(ApiError::unprocessable(format!(
            "invalid registry username: at most {MAX_FIELD} characters, no control characters"
        )));
    }
    Ok(())
}

/// `GET …/registries`: one page, by address.
async fn list(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level).await?;
    let page = Page::from_request(&req);
    let list = ctx
        .store
        .read(move |c| registries::list(c, scope, page.page, page.per_page))
        .await?;
    Ok(Response::json(&list))
}

/// `POST …/registries`: 200 with the new registry (password `""`).
async fn create(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level).await?;
    let body: RegistryIn = req.json()?;
    let address = body.address.unwrap_or_default();
    validate_address(&address).map_err(ApiError::unprocessable)?;
    let username = body.username.unwrap_or_default();
    check_username(&username)?;
    let password = body.password.unwrap_or_default();
    if password.is_empty() {
        return Err(ApiError::unprocessable(
            "invalid registry password: empty password",
        ));
    }
    let new = NewRegistry {
        address,
        username,
        sealed_password: ctx.seal.seal(SEAL_PURPOSE, password.as_bytes()),
    };
    let registry = ctx
        .store
        .write(move |c| registries::create(c, scope, &new))
        .await?;
    tracing::info!(
        registry = registry.address,
        org_id = scope.org_id,
        repo_id = scope.repo_id,
        "registry created"
    );
    Ok(Response::json(&registry))
}

/// `GET …/registries/{registry}`.
async fn get(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level).await?;
    let address = path_text(&req, "registry")?;
    let row = ctx
        .store
        .read(move |c| registries::find(c, scope, &address))
        .await
        .map_err(not_found)?;
    Ok(Response::json(&row.registry))
}

/// `PATCH …/registries/{registry}`.
async fn update(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level).await?;
    let address = path_text(&req, "registry")?;
    let body: RegistryIn = req.json()?;
    let new_address = body.address.filter(|a| !a.is_empty());
    if let Some(a) = &new_address {
        validate_address(a).map_err(ApiError::unprocessable)?;
    }
    let username = body.username.filter(|u| !u.is_empty());
    if let Some(u) = &username {
        check_username(u)?;
    }
    let change = RegistryChange {
        address: new_address,
        username,
        sealed_password: body
            .password
            .filter(|p| !p.is_empty())
            .map(|p| ctx.seal.seal(SEAL_PURPOSE, p.as_bytes())),
    };
    let registry = ctx
        .store
        .write(move |c| registries::update(c, scope, &address, &change))
        .await
        .map_err(not_found)?;
    Ok(Response::json(&registry))
}

/// `DELETE …/registries/{registry}`: 204.
async fn delete(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level).await?;
    let address = path_text(&req, "registry")?;
    let registry = ctx
        .store
        .write(move |c| registries::delete(c, scope, &address))
        .await
        .map_err(not_found)?;
    tracing::info!(
        registry = registry.address,
        org_id = scope.org_id,
        repo_id = scope.repo_id,
        "registry deleted"
    );
    Ok(Response::empty(StatusCode::NO_CONTENT))
}
