//! Resources that live at three scopes — secrets and registries — served by one handler flow.
//!
//! Each resource is reachable as `{prefix}/{collection}` and `{prefix}/{collection}/{key}`
//! where the prefix picks the scope (`Level`): `""` for instance admins,
//! `/orgs/{org_id}` for org admins and `/repos/{repo_id}` for repo admins. The global scope's
//! reads (list and get one) are open to every signed-in user, as upstream's ("global secrets
//! can be read without actual values by any user"): the upstream UI's repository and
//! organisation pages list them beside their own, and the rendering never carries a value or a
//! password. This module owns everything the scopes have in common:
//!
//! - `resolve`: authorise the caller for the level and the kind of call ([`Use`]) and name
//!   the [`ResourceScope`];
//! - `routes`: list (paged) / create / get / update / delete for every level;
//! - the 404 for unknown keys (`ScopedResource::NOT_FOUND`) and the audit log lines.
//!
//! A resource says only what differs, by implementing `ScopedResource` for the service's
//! record (`ci::scoped::Secrets`, `Registries`): how a request body becomes a validated new
//! item or change (its 422s) and its value in clear; the `ci::scoped::ScopedRecord` side
//! names the store functions that read and write it, and writes (and sealing) go through
//! `ci::scoped`.

use super::access::{must_admin, must_user, org, repo_admin};
use super::pagination::read_page;
use crate::ci::{self, scoped::ScopedRecord};
use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::state::Ctx;
use crate::store::StoreError;
use crate::store::secrets::ResourceScope;

/// Which of the three scopes a route serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// Instance admins; every signed-in user reads.
    Global,
    /// Org admins of `{org_id}`.
    Org,
    /// Repo admins of `{repo_id}`.
    Repo,
}

impl Level {
    /// Every level with the route prefix that selects it.
    pub(super) const ALL: [(Level, &'static str); 3] = [
        (Level::Global, ""),
        (Level::Org, "/orgs/{org_id}"),
        (Level::Repo, "/repos/{repo_id}"),
    ];
}

/// What a call does with a scope's items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// List or get one: never a value or password (the renderings have none).
    Read,
    /// Create, update or delete.
    Write,
}

/// Authorises the caller for `level` and names the scope: 401 anonymous; global: any user
/// may read, 403 for non-admins' writes; org: 404 unknown org, 403 non-org-admins; repo: 404
/// unknown or invisible repo, 403 for readers who are not repo admins.
pub(crate) async fn resolve(
    ctx: &Ctx,
    req: &Request,
    level: Level,
    usage: Use,
) -> Result<ResourceScope, ApiError> {
    match level {
        Level::Global => {
            match usage {
                Use::Read => must_user(ctx, req).await?,
                Use::Write => must_admin(ctx, req).await?,
            };
            Ok(ResourceScope::GLOBAL)
        }
        Level::Org => Ok(ResourceScope::org(org(ctx, req, true).await?.org.id)),
        Level::Repo => Ok(ResourceScope::repo(repo_admin(ctx, req).await?.row.repo.id)),
    }
}

/// One kind of scoped resource as the API serves it: where it is routed and how a request
/// becomes a validated new item or change, with its value in clear. What it is and where the store keeps it is its
/// [`ScopedRecord`] side. Implementors are unit structs; nothing is instantiated.
pub(crate) trait ScopedResource: ScopedRecord {
    /// The collection's path segment (`secrets`).
    const COLLECTION: &'static str;
    /// The key's path parameter (`secret`; the router has percent-decoded it once, so a
    /// `%` or `/` in a registry's address arrives as sent).
    const KEY_PARAM: &'static str;
    /// The 404 message for an unknown key (`Secret not found`).
    const NOT_FOUND: &'static str;

    /// The create body, validated (422s), and its value; 400 for an unparsable body.
    fn new_from(req: &Request) -> Result<(Self::New, String), ApiError>;
    /// The update body, validated: only what it is given (an empty value keeps the old).
    fn change_from(req: &Request) -> Result<(Self::Change, Option<String>), ApiError>;
}

/// Registers list / create / get / update / delete of `R` at every [`Level`].
pub(super) fn routes<R: ScopedResource>(scope: &mut Scope<'_, Ctx>) {
    for (level, prefix) in Level::ALL {
        let all = format!("{prefix}/{}", R::COLLECTION);
        let one = format!("{prefix}/{}/{{{}}}", R::COLLECTION, R::KEY_PARAM);
        scope
            .get(&all, move |ctx, req| list::<R>(ctx, req, level))
            .post(&all, move |ctx, req| create::<R>(ctx, req, level))
            .get(&one, move |ctx, req| get::<R>(ctx, req, level))
            .patch(&one, move |ctx, req| update::<R>(ctx, req, level))
            .delete(&one, move |ctx, req| delete::<R>(ctx, req, level));
    }
}

fn not_found<R: ScopedResource>(err: impl Into<ci::Error>) -> ApiError {
    match err.into() {
        ci::Error::Store(StoreError::NotFound) => ApiError::not_found(R::NOT_FOUND),
        other => other.into(),
    }
}

/// `GET …/{collection}`: one page, in key order.
async fn list<R: ScopedResource>(
    ctx: Ctx,
    req: Request,
    level: Level,
) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level, Use::Read).await?;
    let list = read_page(&ctx, &req, move |c, page, per_page| {
        R::list(c, scope, page, per_page)
    })
    .await?;
    Ok(Response::json(&list))
}

/// `POST …/{collection}`: 200 with the new item; 409 for a duplicate key.
pub(crate) async fn create<R: ScopedResource>(
    ctx: Ctx,
    req: Request,
    level: Level,
) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level, Use::Write).await?;
    let (new, value) = R::new_from(&req)?;
    let item = ci::scoped::create::<R>(&ctx.ci, scope, new, &value).await?;
    Ok(Response::json(&item))
}

/// `GET …/{collection}/{key}`.
async fn get<R: ScopedResource>(
    ctx: Ctx,
    req: Request,
    level: Level,
) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level, Use::Read).await?;
    let key = req.param(R::KEY_PARAM).to_string();
    let item = ctx
        .ci
        .reads
        .read(move |c| R::find(c, scope, &key))
        .await
        .map_err(not_found::<R>)?;
    Ok(Response::json(&item))
}

/// `PATCH …/{collection}/{key}`.
pub(crate) async fn update<R: ScopedResource>(
    ctx: Ctx,
    req: Request,
    level: Level,
) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level, Use::Write).await?;
    let key = req.param(R::KEY_PARAM).to_string();
    let (change, value) = R::change_from(&req)?;
    let item = ci::scoped::update::<R>(&ctx.ci, scope, key, change, value.as_deref())
        .await
        .map_err(not_found::<R>)?;
    Ok(Response::json(&item))
}

/// `DELETE …/{collection}/{key}`: 204.
pub(crate) async fn delete<R: ScopedResource>(
    ctx: Ctx,
    req: Request,
    level: Level,
) -> Result<Response, ApiError> {
    let scope = resolve(&ctx, &req, level, Use::Write).await?;
    let key = req.param(R::KEY_PARAM).to_string();
    ci::scoped::delete::<R>(&ctx.ci, scope, key)
        .await
        .map_err(not_found::<R>)?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}
