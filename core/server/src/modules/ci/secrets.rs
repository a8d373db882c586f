//! Secrets at three scopes: `/secrets` (instance admins), `/orgs/{org_id}/secrets` (org
//! admins) and `/repos/{repo_id}/secrets` (repo admins), each with list / create / get /
//! update / delete by name.
//!
//! Values are sealed before they reach the store and never come back: the API rendering has
//! no `value` field (upstream omits it the same way), nothing here logs one. Validation
//! failures are 422 (`invalid secret name|event|image|value: …`), duplicates 409, unknown
//! names 404, unparsable bodies 400. PATCH changes only what it is given; an empty `value`
//! keeps the stored one; `name` cannot be changed (as upstream).

use serde::Deserialize;

use super::access::{must_admin, org, repo_admin};
use super::pagination::Page;
use crate::app::Ctx;
use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::store::StoreError;
use crate::store::secrets::{
    self, MAX_NOTE, NewSecret, ResourceScope, SEAL_PURPOSE, SecretChange, validate_events,
    validate_images, validate_name,
};

/// Which of the three scopes a route serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    /// Instance admins.
    Global,
    /// Org admins of `{org_id}`.
    Org,
    /// Repo admins of `{repo_id}`.
    Repo,
}

impl Level {
    pub(super) const ALL: [(Level, &'static str); 3] = [
        (Level::Global, ""),
        (Level::Org, "/orgs/{org_id}"),
        (Level::Repo, "/repos/{repo_id}"),
    ];
}

/// Authorises the caller for `level` and names the scope: 401 anonymous; global: 403 for
/// non-admins; org: 404 unknown org, 403 non-org-admins; repo: 404 unknown or invisible repo,
/// 403 for readers who are not repo admins.
pub(super) async fn resolve(
    ctx: &Ctx,
    req: &Request,
    level: Level,
) -> Result<ResourceScope, ApiError> {
    match level {
        Level::Global => {
            must_admin(ctx, req).await?;
            Ok(ResourceScope::GLOBAL)
        }
        Level::Org => Ok(ResourceScope::org(org(ctx, req, true).await?.org.id)),
        Level::Repo => Ok(ResourceScope::repo(repo_admin(ctx, req).await?.row.repo.id)),
    }
}

/// A path parameter, percent-decoded (names and registry addresses may be escaped).
pub(super) fn path_text(req: &Request, name: &str) -> Result<String, ApiError> {
    let raw = req.param(name).as_bytes();
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hex = raw
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| ApiError::bad_request(format!("invalid escape in {name}")))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ApiError::bad_request(format!("{name} is not UTF-8")))
}

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    for (level, prefix) in Level::ALL {
        let all = format!("{prefix}/secrets");
        let one = format!("{prefix}/secrets/{{secret}}");
        scope
            .get(&all, move |ctx, req| list(ctx, req, level))
            .post(&all, move |ctx, req| create(ctx, req, level))
            .get(&one, move |ctx, req| get(ctx, req, level))
            .patch(&one, move |ctx, req| update(ctx, req, level))
            .delete(&one, move |ctx, req| delete(ctx, req, level));
    }
}

fn unprocessable(message: String) -> ApiError {
    ApiError::unprocessable(message)
}

fn not_found(err: StoreError) -> ApiError {
    match err {
        StoreError::NotFound => ApiError::not_found("Secret not found"),
        other => other.into(),
    }
}

/// `GET …/secrets`: one page, by name.
async fn list(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level).await?;
    let page = Page::from_request(&req);
    let list = ctx
        .store
        .read(move |c| secrets::list(c, scope, page.page, page.per_page))
        .await?;
    Ok(Response::json(&list))
}

/// The body of create and update (Woodpecker's `Secret` / `SecretPatch`). Unknown fields are
/// ignored; `null` counts as absent.
#[derive(Debug, Default, Deserialize)]
struct SecretIn {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    images: Option<Vec<String>>,
    #[serde(default)]
    events: Option<Vec<String>>,
    #[serde(default)]
    note: Option<String>,
}

fn check_note(note: &str) -> Result<(), ApiError> {
    if note.len() > MAX_NOTE {
        return Err(unprocessable(format!(
            "invalid secret note: longer than {MAX_NOTE} characters"
        )));
    }
    Ok(())
}

/// `POST …/secrets`: 200 with the new secret (without its value).
async fn create(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level).await?;
    let body: SecretIn = req.json()?;
    let events = validate_events(&body.events.unwrap_or_default()).map_err(unprocessable)?;
    let images = body.images.unwrap_or_default();
    validate_images(&images).map_err(unprocessable)?;
    let name = body.name.unwrap_or_default();
    validate_name(&name).map_err(unprocessable)?;
    let value = body.value.unwrap_or_default();
    if value.is_empty() {
        return Err(unprocessable("invalid secret value: empty value".into()));
    }
    let note = body.note.unwrap_or_default();
    check_note(&note)?;
    let new = NewSecret {
        name,
        sealed_value: ctx.seal.seal(SEAL_PURPOSE, value.as_bytes()),
        images,
        events,
        note,
    };
    let secret = ctx
        .store
        .write(move |c| secrets::create(c, scope, &new))
        .await?;
    tracing::info!(
        secret = secret.name,
        org_id = scope.org_id,
        repo_id = scope.repo_id,
        "secret created"
    );
    Ok(Response::json(&secret))
}

/// `GET …/secrets/{secret}`.
async fn get(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level).await?;
    let name = path_text(&req, "secret")?;
    let row = ctx
        .store
        .read(move |c| secrets::find(c, scope, &name))
        .await
        .map_err(not_found)?;
    Ok(Response::json(&row.secret))
}

/// `PATCH …/secrets/{secret}`: changes `value` (when non-empty), `events`, `images`, `note`.
async fn update(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level).await?;
    let name = path_text(&req, "secret")?;
    let body: SecretIn = req.json()?;
    let events = body
        .events
        .map(|e| validate_events(&e))
        .transpose()
        .map_err(unprocessable)?;
    if let Some(images) = &body.images {
        validate_images(images).map_err(unprocessable)?;
    }
    if let Some(note) = &body.note {
        check_note(note)?;
    }
    let change = SecretChange {
        sealed_value: body
            .value
            .filter(|v| !v.is_empty())
            .map(|v| ctx.seal.seal(SEAL_PURPOSE, v.as_bytes())),
        images: body.images,
        events,
        note: body.note,
    };
    let secret = ctx
        .store
        .write(move |c| secrets::update(c, scope, &name, &change))
        .await
        .map_err(not_found)?;
    Ok(Response::json(&secret))
}

/// `DELETE …/secrets/{secret}`: 204.
async fn delete(ctx: Ctx, req: Request, level: Level) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level).await?;
    let name = path_text(&req, "secret")?;
    let secret = ctx
        .store
        .write(move |c| secrets::delete(c, scope, &name))
        .await
        .map_err(not_found)?;
    tracing::info!(
        secret = secret.name,
        org_id = scope.org_id,
        repo_id = scope.repo_id,
        "secret deleted"
    );
    Ok(Response::empty(StatusCode::NO_CONTENT))
}
