//! `/orgs`: organisations (namespaces that own repositories) and the caller's standing in them.

use super::access::{self, current, must_admin, must_user, org_perm};
use super::pagination::read_page;
use crate::ci;
use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::state::Ctx;
use crate::store::StoreError;
use crate::store::orgs;

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope
        .get("/orgs", list)
        .get("/orgs/lookup/{*org_full_name}", lookup)
        // The API documents the singular spelling; clients use both.
        .get("/org/lookup/{*org_full_name}", lookup)
        .get("/orgs/{org_id}", get)
        .delete("/orgs/{org_id}", delete)
        .get("/orgs/{org_id}/permissions", permissions);
}

/// `GET /orgs` (admin).
async fn list(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let list = read_page(&ctx, &req, orgs::list).await?;
    Ok(Response::json(&list))
}

/// `GET /orgs/{id}` (members).
async fn get(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::org(&ctx, &req, false).await?;
    Ok(Response::json(&access.org))
}

/// `DELETE /orgs/{id}` (instance admin): only an organisation without repositories.
async fn delete(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let id = req.param_i64("org_id")?;
    ci::orgs::delete(&ctx.ci, id).await.map_err(org_not_found)?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

/// `GET /orgs/{id}/permissions`: `{member, admin}` of the caller (both false if anonymous).
async fn permissions(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let id = req.param_i64("org_id")?;
    let user = current(&ctx, &req).await?.map(|a| a.user.clone());
    let u = user.clone();
    let (org, perm) = ctx
        .ci
        .reads
        .read(move |c| {
            let org = orgs::by_id(c, id)?;
            let perm = org_perm(c, u.as_ref(), &org)?;
            Ok((org, perm))
        })
        .await
        .map_err(org_not_found)?;
    let perm =
        access::with_forge_membership(&ctx, user.as_ref(), &org, perm, ci::orgs::MEMBERSHIP_TTL)
            .await;
    Ok(Response::json(&perm))
}

/// `GET /orgs/lookup/{name}`: the organisation of that name, for its members (404 otherwise).
async fn lookup(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let user = must_user(&ctx, &req).await?.user.clone();
    let name = req.param("org_full_name").trim_matches('/').to_string();
    let u = user.clone();
    let (org, perm) = ctx
        .ci
        .reads
        .read(move |c| {
            let org = orgs::by_any_name(c, &name)?;
            let perm = org_perm(c, Some(&u), &org)?;
            Ok((org, perm))
        })
        .await
        .map_err(org_not_found)?;
    let perm =
        access::with_forge_membership(&ctx, Some(&user), &org, perm, ci::orgs::MEMBERSHIP_TTL)
            .await;
    if perm.member {
        Ok(Response::json(&org))
    } else {
        Err(ApiError::not_found("Organization not found"))
    }
}

fn org_not_found(err: impl Into<ci::Error>) -> ApiError {
    match err.into() {
        ci::Error::Store(StoreError::NotFound) => ApiError::not_found("Organization not found"),
        other => other.into(),
    }
}
