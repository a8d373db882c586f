//! `/repos`: activation from a forge, settings, ownership, hooks, branches and permissions.

use serde::Deserialize;

use super::access::{self, RepoAccess, Require, may_activate_in, must_admin, must_user, repo_by};
use super::pagination::{Page, read_page};
use crate::ci;
use crate::ci::forge::DriverError;
use crate::ci::forge::drivers::ForgeHandle;
use crate::ci::forge::{self};
use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::pipeline::event::WebhookEvent;
use crate::state::{AppState, Ctx};
use crate::store::forges;
use crate::store::repos::{self, APPROVAL_MODES, RepoRow, Trusted, Visibility};
use crate::store::users::Account;
use crate::store::{StoreError, StoreResult};

/// Longest pipeline timeout (minutes) a repo admin may set; above it needs an instance admin.
pub const MAX_TIMEOUT: i64 = 120;

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope
        .get("/repos", list)
        .post("/repos", activate)
        .post("/repos/repair", repair_all)
        .get("/repos/lookup/{*full_name}", lookup)
        .get("/repos/{repo_id}", get)
        .patch("/repos/{repo_id}", update)
        .delete("/repos/{repo_id}", delete)
        .get("/repos/{repo_id}/permissions", permissions)
        .get("/repos/{repo_id}/branches", |ctx, req| {
            from_forge(ctx, req, ForgeList::Branches)
        })
        .get("/repos/{repo_id}/pull_requests", |ctx, req| {
            from_forge(ctx, req, ForgeList::PullRequests)
        })
        .post("/repos/{repo_id}/chown", chown)
        .post("/repos/{repo_id}/repair", repair)
        .post("/repos/{repo_id}/move", move_repo);
}

/// `GET /repos` (admin): every repository, `?active=true|false` filters.
async fn list(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let active = req.query_bool("active")?;
    let list = read_page(&ctx, &req, move |c, page, per_page| {
        repos::list(c, active, page, per_page)
    })
    .await?;
    Ok(Response::json(&list))
}

/// The forge a request means: `?forge_id=`, else the user's own forge, else the only one.
pub(super) async fn pick_forge(
    ctx: &Ctx,
    req: &Request,
    user: &Account,
) -> Result<std::sync::Arc<ForgeHandle>, ApiError> {
    let explicit = match req.query("forge_id").filter(|v| !v.is_empty()) {
        Some(v) => Some(
            v.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid forge_id {v:?}")))?,
        ),
        None => None,
    };
    let own = user.user.forge_id;
    let picked = ctx
        .ci
        .reads
        .read(move |c| {
            if let Some(id) = explicit {
                return Ok(Some(id));
            }
            if own > 0 && forges::by_id(c, own).is_ok() {
                return Ok(Some(own));
            }
            let all = forges::list(c, 1, 2)?;
            Ok(match all.as_slice() {
                [only] => Some(only.id),
                _ => None,
            })
        })
        .await?
        .ok_or_else(|| {
            ApiError::bad_request(
                "no forge given: pass forge_id (the server has no forge, or several)",
            )
        })?;
    match ctx.ci.drivers.get(picked).await {
        Err(DriverError::Store(StoreError::NotFound)) => {
            Err(ApiError::not_found("Forge not found"))
        }
        other => Ok(other?),
    }
}

/// `POST /repos?forge_remote_id=&forge_id=`: activates a repository; the caller becomes its
/// owner. 409 if it is active already.
pub(crate) async fn activate(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let account = must_user(&ctx, &req).await?;
    let remote_id = req
        .query("forge_remote_id")
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::bad_request("forge_remote_id is required"))?;
    let forge = pick_forge(&ctx, &req, &account).await?;
    let forge_id = forge.row.forge.id;
    let as_user = ctx.ci.tokens.as_user(&forge, account.user.id).await?;
    let driver = as_user.clone().unwrap_or_else(|| forge.driver.clone());
    let remote = ci::repos::find_remote(driver.as_ref(), &remote_id).await?;
    // The forge's own id (a plugin forge may be asked by full name and answer with a number).
    let remote_id = remote.forge_remote_id.clone();

    // Who may activate: instance admins, the owner of the namespace, admins of its org.
    let user = account.user.clone();
    let owner = remote.owner.clone();
    let rid = remote_id.clone();
    let (existing, allowed) = ctx
        .ci
        .reads
        .read(move |c| {
            let existing = repos::by_remote_id(c, forge_id, &rid)?;
            let allowed = may_activate_in(c, &user, forge_id, &owner)?;
            Ok((existing, allowed))
        })
        .await?;
    // Or whoever the forge, asked as them, says administers the repository (the forge's
    // own token speaks for nobody).
    let forge_admin = match &as_user {
        Some(as_user) => ci::repos::forge_admin(as_user.as_ref(), &remote).await,
        None => false,
    };
    if !allowed && !forge_admin {
        return Err(namespace_denied(&remote.owner));
    }
    let row = ci::repos::activate(&ctx.ci, &forge, remote, existing, account.user.id).await?;
    Ok(Response::json(&row.repo))
}

async fn get(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    // Read before the access decision: the row it returns is at least this new.
    let generation = ctx.ci.reads.identity_generation();
    let access = access::repo(&ctx, &req).await?;
    let repo = &access.row.repo;
    let body = ctx
        .rendered
        .repos
        .get_or_render(repo.id, generation, async {
            serde_json::to_string(repo).map_err(ApiError::internal)
        })
        .await?;
    Ok(Response::json_text(body))
}

/// `GET /repos/lookup/{owner/name}`.
async fn lookup(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let full_name = req.param("full_name").trim_matches('/').to_string();
    let user = access::current(&ctx, &req).await?;
    let access = repo_by(&ctx, user, move |c| repos::by_full_name(c, &full_name)).await?;
    Ok(Response::json(&access.row.repo))
}

/// `GET /repos/{id}/permissions`: the caller's permission.
async fn permissions(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo(&ctx, &req).await?;
    Ok(Response::json(&access.perm))
}

/// Body of `PATCH /repos/{id}` (Woodpecker's `RepoPatch`): every field optional; unknown
/// fields are ignored as upstream does, so a client may send back the body of a GET.
#[derive(Debug, Deserialize)]
struct RepoPatch {
    config_file: Option<String>,
    timeout: Option<i64>,
    visibility: Option<String>,
    require_approval: Option<String>,
    approval_allowed_users: Option<Vec<String>>,
    allow_pr: Option<bool>,
    allow_deploy: Option<bool>,
    cancel_previous_pipeline_events: Option<Vec<String>>,
    netrc_trusted: Option<Vec<String>>,
    trusted: Option<TrustedPatch>,
    config_extension_endpoint: Option<String>,
    config_extension_exclusive: Option<bool>,
    config_extension_netrc: Option<bool>,
    registry_extension_endpoint: Option<String>,
    registry_extension_netrc: Option<bool>,
    secret_extension_endpoint: Option<String>,
    secret_extension_netrc: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct TrustedPatch {
    network: Option<bool>,
    volumes: Option<bool>,
    security: Option<bool>,
}

/// `PATCH /repos/{id}` (repo admin; `trusted` and long timeouts need an instance admin).
pub(crate) async fn update(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo_admin(&ctx, &req).await?;
    let instance_admin = access.user()?.user.admin;
    let patch: RepoPatch = req.json()?;
    let mut repo = access.row.repo.clone();

    if let Some(v) = patch.visibility {
        let Some(visibility) = Visibility::parse(&v) else {
            let known: Vec<&str> = Visibility::ALL.iter().map(|v| v.as_str()).collect();
            return Err(ApiError::bad_request(format!(
                "invalid visibility {v:?}: expected one of {}",
                known.join(", ")
            )));
        };
        repo.private = visibility != Visibility::Public;
        repo.visibility = visibility;
    }
    if let Some(v) = patch.require_approval {
        if !APPROVAL_MODES.contains(&v.as_str()) {
            return Err(ApiError::bad_request(format!(
                "invalid require_approval {v:?}: expected one of {}",
                APPROVAL_MODES.join(", ")
            )));
        }
        repo.require_approval = v;
    }
    if let Some(t) = patch.timeout {
        if t < 1 {
            return Err(ApiError::bad_request("timeout must be at least 1 minute"));
        }
        if t > MAX_TIMEOUT && t != repo.timeout && !instance_admin {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                format!("a timeout above {MAX_TIMEOUT} minutes needs an instance admin"),
            ));
        }
        repo.timeout = t;
    }
    if let Some(trusted) = patch.trusted {
        let wanted = Trusted {
            network: trusted.network.unwrap_or(repo.trusted.network),
            volumes: trusted.volumes.unwrap_or(repo.trusted.volumes),
            security: trusted.security.unwrap_or(repo.trusted.security),
        };
        // Sending the current values back (a client echoing a GET) changes nothing.
        if wanted != repo.trusted && !instance_admin {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "changing trusted settings needs an instance admin",
            ));
        }
        repo.trusted = wanted;
    }
    if let Some(events) = patch.cancel_previous_pipeline_events {
        if let Some(bad) = events.iter().find(|e| !WebhookEvent::is_known(e)) {
            return Err(ApiError::bad_request(format!(
                "invalid event {bad:?} in cancel_previous_pipeline_events"
            )));
        }
        repo.cancel_previous_pipeline_events = events;
    }
    if let Some(v) = patch.config_file {
        if v.starts_with('/') || v.split('/').any(|p| p == "..") {
            return Err(ApiError::bad_request(
                "config_file must be a relative path inside the repository",
            ));
        }
        repo.config_file = v;
    }
    set(
        &mut repo.approval_allowed_users,
        patch.approval_allowed_users,
    );
    set(&mut repo.allow_pr, patch.allow_pr);
    set(&mut repo.allow_deploy, patch.allow_deploy);
    set(&mut repo.netrc_trusted, patch.netrc_trusted);
    set(
        &mut repo.config_extension_endpoint,
        patch.config_extension_endpoint,
    );
    set(
        &mut repo.config_extension_exclusive,
        patch.config_extension_exclusive,
    );
    set(
        &mut repo.config_extension_netrc,
        patch.config_extension_netrc,
    );
    set(
        &mut repo.registry_extension_endpoint,
        patch.registry_extension_endpoint,
    );
    set(
        &mut repo.registry_extension_netrc,
        patch.registry_extension_netrc,
    );
    set(
        &mut repo.secret_extension_endpoint,
        patch.secret_extension_endpoint,
    );
    set(
        &mut repo.secret_extension_netrc,
        patch.secret_extension_netrc,
    );

    let row = ci::repos::save(&ctx.ci, repo).await?;
    Ok(Response::json(&row.repo))
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

/// `DELETE /repos/{id}` (repo admin): deactivates (removes the hook) and returns the repo;
/// with `?remove=true` also deletes it and everything that belongs to it.
async fn delete(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo_admin(&ctx, &req).await?;
    let remove = req.query_bool("remove")?.unwrap_or(false);
    let repo = ci::repos::deactivate(&ctx.ci, access.row.repo.clone(), remove).await?;
    Ok(Response::json(&repo))
}

fn namespace_denied(owner: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        format!("Access denied: only admins of {owner:?} may put repositories there"),
    )
}

/// A list a repository's forge keeps, which the API pages itself.
#[derive(Debug, Clone, Copy)]
enum ForgeList {
    /// `GET /repos/{id}/branches`: branch names.
    Branches,
    /// `GET /repos/{id}/pull_requests`: open pull requests.
    PullRequests,
}

/// `GET /repos/{id}/branches` and `/pull_requests`: asked of the forge as the caller, then
/// paginated here.
async fn from_forge(ctx: Ctx, req: Request, list: ForgeList) -> Result<Response, ApiError> {
    let access = access::repo(&ctx, &req).await?;
    let page = Page::from_request(&req);
    Ok(match list {
        ForgeList::Branches => Response::json(&paginate(branches_of(&ctx, &access).await?, page)),
        ForgeList::PullRequests => {
            Response::json(&paginate(pull_requests_of(&ctx, &access).await?, page))
        }
    })
}

/// The repository's branch names as the forge gives them to the caller (the API's
/// `/branches` and the UI's manual-run form).
pub async fn branches_of(ctx: &AppState, access: &RepoAccess) -> Result<Vec<String>, ApiError> {
    let driver = caller_driver(ctx, access).await?;
    Ok(driver.branches(&access.row.repo).await?)
}

/// The repository's open pull requests as its forge lists them to the caller (the API's
/// `/pull_requests` and the built-in UI's pull-requests page).
pub async fn pull_requests_of(
    ctx: &AppState,
    access: &RepoAccess,
) -> Result<Vec<forge::PullRequest>, ApiError> {
    let driver = caller_driver(ctx, access).await?;
    Ok(driver.pull_requests(&access.row.repo).await?)
}

/// The repository's forge driver, acting as the caller (see `Tokens::for_caller`).
pub(crate) async fn caller_driver(
    ctx: &AppState,
    access: &RepoAccess,
) -> Result<std::sync::Arc<dyn forge::ForgeDriver>, ApiError> {
    let forge = ctx.ci.drivers.get(access.row.repo.forge_id).await?;
    let caller = access.user.as_ref().map(|a| a.user.id);
    Ok(ctx.ci.tokens.for_caller(&forge, caller, &access.row).await)
}

fn paginate<T>(all: Vec<T>, page: Page) -> Vec<T> {
    let skip = (page.page as usize - 1).saturating_mul(page.per_page as usize);
    all.into_iter()
        .skip(skip)
        .take(page.per_page as usize)
        .collect()
}

/// `POST /repos/{id}/chown` (repo admin): the caller becomes the repository's owner user.
async fn chown(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo_admin(&ctx, &req).await?;
    let user_id = access.user()?.user.id;
    let row = ci::repos::chown(&ctx.ci, access.row.repo.clone(), user_id).await?;
    Ok(Response::json(&row.repo))
}

/// `POST /repos/{id}/repair` (repo admin): 204.
async fn repair(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo_admin(&ctx, &req).await?;
    if !access.row.repo.active {
        return Err(ApiError::unprocessable("Repository is not active"));
    }
    ci::repos::repair(&ctx.ci, std::sync::Arc::unwrap_or_clone(access.row)).await?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

/// `POST /repos/repair` (admin): repairs every active repository; 204 when all worked.
async fn repair_all(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let rows: Vec<RepoRow> = ctx
        .ci
        .reads
        .read(|c| -> StoreResult<Vec<RepoRow>> {
            let mut out = Vec::new();
            let mut page = 1;
            loop {
                let batch = repos::list(c, Some(true), page, 50)?;
                for repo in &batch {
                    out.push(repos::by_id(c, repo.id)?);
                }
                if batch.len() < 50 {
                    break;
                }
                page += 1;
            }
            Ok(out)
        })
        .await?;
    let mut failed = Vec::new();
    for row in rows {
        let name = row.repo.full_name.clone();
        if let Err(err) = ci::repos::repair(&ctx.ci, row).await {
            let err = ApiError::from(err);
            tracing::warn!(repo = name, error = %err.message, "repair failed");
            failed.push(format!("{name}: {}", err.message));
        }
    }
    if failed.is_empty() {
        Ok(Response::empty(StatusCode::NO_CONTENT))
    } else {
        Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!(
                "some repositories could not be repaired: {}",
                failed.join("; ")
            ),
        ))
    }
}

/// `POST /repos/{id}/move?to=owner/name` (repo admin, allowed to activate repositories in
/// the target namespace, and — asked as the caller — an admin of `to` on the forge: 403
/// otherwise): the repository now lives at `to` on its forge; names, URLs and the hook
/// follow. 204.
async fn move_repo(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let access = access::repo_admin(&ctx, &req).await?;
    let to = req
        .query("to")
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::bad_request("to is required (the new owner/name)"))?;
    let RepoAccess { row, user, .. } = access;
    let user = user.ok_or_else(ApiError::unauthorized)?.user.clone();
    let forge = ctx.ci.drivers.get(row.repo.forge_id).await?;
    // Looked up as the caller, as activation does: the forge's own credentials may see
    // repositories the caller cannot.
    let as_user = ctx.ci.tokens.as_user(&forge, user.id).await?;
    let driver = forge.driver.clone();
    let remote = as_user.as_ref().unwrap_or(&driver).repo(&to).await?;
    let forge_id = row.repo.forge_id;
    if let Some(as_user) = &as_user {
        ci::repos::must_administer(
            as_user.as_ref(),
            &remote.new_repo(forge_id, 0),
            "moving a repository to",
        )
        .await?;
    }
    let owner = remote.owner.clone();
    let remote_id = remote.forge_remote_id.clone();
    let (taken, allowed) = ctx
        .ci
        .reads
        .read(move |c| {
            let taken = repos::by_remote_id(c, forge_id, &remote_id)?;
            Ok((taken, may_activate_in(c, &user, forge_id, &owner)?))
        })
        .await?;
    if !allowed {
        return Err(namespace_denied(&remote.owner));
    }
    if taken.is_some_and(|other| other.repo.id != row.repo.id) {
        return Err(ApiError::conflict(
            "another repository is already registered there",
        ));
    }
    ci::repos::move_to(
        &ctx.ci,
        &driver,
        std::sync::Arc::unwrap_or_clone(row),
        remote,
    )
    .await?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}
