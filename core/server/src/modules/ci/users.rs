//! `/user` (the caller and its token) and `/users` (administration, admins only).

use serde::Deserialize;
use serde_json::{Value, json};

use super::access::{may_activate_in, must_admin, must_user};
use super::avatars;
use super::pagination::read_page;
use crate::auth::{random_secret, token};
use crate::ci;
use crate::ci::forge::{ForgePerm, RemoteRepo};
use crate::ci::users::home_list;
use crate::http::{ApiError, Request, Response, StatusCode};
use crate::state::Ctx;
use crate::store::pipelines::{self, ListFilter, Pipeline};
use crate::store::users::{self, NewUser, UserPatch, validate_login};
use crate::store::{StoreError, StoreResult, repos};

/// Longest email / avatar URL accepted (keeps rows and events small).
const MAX_FIELD: usize = 1024;

/// `GET /user`: the signed-in user.
pub async fn current(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let account = must_user(&ctx, &req).await?;
    Ok(Response::json(&avatars::shown(&ctx, account.user.clone())))
}

/// `POST /user/token`: the caller's current personal access token, as plain text.
pub async fn token(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let account = must_user(&ctx, &req).await?;
    let t = token::user_token(account.user.id, &ctx.token_key(&account));
    Ok(Response::text(StatusCode::OK, t))
}

/// `DELETE /user/token`: rotates the signing secret (revoking every older token) and returns
/// the new token.
pub async fn rotate_token(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let account = must_user(&ctx, &req).await?;
    let account = ci::users::rotate_token_seed(&ctx.ci, account.user.id).await?;
    let t = token::user_token(account.user.id, &ctx.token_key(&account));
    Ok(Response::text(StatusCode::OK, t))
}

/// `GET /user/feed`: the newest 50 pipelines of the repositories the caller may push to or
/// administer (upstream's Feed, `userPushOrAdminCondition`). With `?latest=true`, upstream's
/// `RepoListLatest` instead: each of those repositories that is active, by full name, with
/// its newest pipeline (a repository without one is its id and name alone).
pub async fn feed(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let user = must_user(&ctx, &req).await?.user.clone();
    if req.query_bool("latest")?.unwrap_or(false) {
        let list = ctx
            .ci
            .reads
            .read(move |c| home_list(c, &user, false, "", 0, usize::MAX))
            .await?;
        let feed: Vec<Value> = list
            .iter()
            .map(|(repo, newest)| match newest {
                Some(p) => feed_entry(repo.id, &repo.full_name, p),
                None => json!({"repo_id": repo.id, "full_name": repo.full_name}),
            })
            .collect();
        return Ok(Response::json(&feed));
    }
    let list = ctx
        .ci
        .reads
        .read(move |c| {
            let mut out = Vec::new();
            for row in repos::owned_by(c, user.id, user.org_id)? {
                for p in pipelines::list(c, row.repo.id, &ListFilter::default(), 1, 50)? {
                    out.push((row.repo.clone(), p));
                }
            }
            out.sort_by_key(|(_, p)| std::cmp::Reverse((p.created, p.id)));
            out.truncate(50);
            Ok(out)
        })
        .await?;
    let feed: Vec<Value> = list
        .into_iter()
        .map(|(repo, p)| feed_entry(repo.id, &repo.full_name, &p))
        .collect();
    Ok(Response::json(&feed))
}

/// One entry of upstream's `Feed`: a pipeline with its repository's id and full name (the
/// user feed and the admin's `/pipelines` both render it).
///
/// As upstream's, every field but `repo_id` is left out when it is empty or zero
/// (`omitempty`): a pipeline not started yet has no `started`.
pub(super) fn feed_entry(repo_id: i64, full_name: &str, p: &Pipeline) -> Value {
    let mut entry = json!({
        "repo_id": repo_id,
        "full_name": full_name,
        "id": p.id,
        "number": p.number,
        "event": p.event,
        "status": p.status,
        "created": p.created,
        "started": p.started,
        "finished": p.finished,
        "commit": p.commit.sha,
        "branch": p.commit.branch,
        "ref": p.commit.git_ref,
        "refspec": p.commit.refspec,
        "title": p.title,
        "message": p.commit.message,
        "author": p.commit.author,
        "author_avatar": p.commit.author_avatar,
        "author_email": p.commit.author_email,
        "tag_title": p.tag_title,
    });
    if let Some(fields) = entry.as_object_mut() {
        fields.retain(|key, value| {
            key == "repo_id" || !matches!(value, Value::String(s) if s.is_empty()) && value != 0
        });
    }
    entry
}

/// `GET /user/repos?all=&name=`: the home page's list, upstream's `GetRepos`. Without `all`,
/// the caller's active repositories with their newest pipeline (`RepoLastPipeline`), where
/// the caller may push or is admin (`repos::owned_by`: a repository one may only pull, a
/// public one included, is not theirs to list, and an instance admin does not get every
/// repository). With `all=true`, what the caller may add, as upstream's "add repository" page
/// lists it (`addable_repos`); on a forge that cannot list repositories, the caller's owned
/// ones, inactive included.
pub async fn repos_with_last_pipeline(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let account = must_user(&ctx, &req).await?;
    let all = matches!(req.query("all").as_deref(), Some("true") | Some("1"));
    let name = req.query("name").unwrap_or_default().to_lowercase();
    if all && let Some(listed) = forge_listing(&ctx, &req, &account).await? {
        let user = account.user.clone();
        let list = ctx
            .ci
            .reads
            .read(move |c| addable_repos(c, &user, &listed, &name))
            .await?;
        return Ok(Response::json(&list));
    }
    let user = account.user.clone();
    let list = ctx
        .ci
        .reads
        .read(move |c| {
            let mut out = Vec::new();
            for (repo, last) in home_list(c, &user, all, &name, 0, usize::MAX)? {
                let mut v = serde_json::to_value(&repo)?;
                if let Some(p) = last {
                    v["last_pipeline"] = serde_json::to_value(p)?;
                }
                out.push(v);
            }
            Ok(out)
        })
        .await?;
    Ok(Response::json(&list))
}

/// The forge's id and the repositories of the caller's forge (with the caller's permission,
/// when the forge lists them as the caller), or `None` when there is no forge to ask or its
/// driver cannot list (then the stored repositories are the list).
async fn forge_listing(
    ctx: &Ctx,
    req: &Request,
    account: &users::Account,
) -> Result<Option<(i64, Vec<(RemoteRepo, Option<ForgePerm>)>)>, ApiError> {
    let Ok(forge) = super::repos::pick_forge(ctx, req, account).await else {
        return Ok(None);
    };
    let forge_id = forge.row.forge.id;
    if let Ok(Some(driver)) = ctx.ci.tokens.as_user(&forge, account.user.id).await {
        let user_id = account.user.id;
        match ci::repos::sync_listed_perms(&ctx.ci, user_id, forge_id, driver.as_ref()).await {
            Ok(listed) => {
                let listed = listed.into_iter().map(|(r, p)| (r, Some(p))).collect();
                return Ok(Some((forge_id, listed)));
            }
            Err(ci::Error::Forge(crate::ci::forge::ForgeError::Unsupported(_))) => {}
            Err(err) => return Err(err.into()),
        }
    }
    let listed = forge.driver.list_repos().await?;
    Ok(listed.map(|l| (forge_id, l.into_iter().map(|r| (r, None)).collect())))
}

/// Upstream's `GET /user/repos?all=true`: every repository of the forge the user may add or
/// already has (stored ones with their `active` flag, others with id 0), a forge repository
/// whose name a different stored one of theirs holds marked `has_forge_name_conflict`, and
/// the user's stored repositories the forge no longer has marked `has_no_forge_repo`.
///
/// Where the forge lists the user's permission, upstream's filter decides: a repository they
/// cannot push to is left out, a stored one they can is listed, one not stored only when they
/// administer it on the forge (only then may they activate it). Where it cannot say (the
/// built-in git forge), the local rules stand in: stored ones the user owns here
/// ([`repos::owned_by`]) and whatever is in a namespace they may activate in.
fn addable_repos(
    c: &crate::store::Tx,
    user: &users::User,
    (forge_id, listed): &(i64, Vec<(RemoteRepo, Option<ForgePerm>)>),
    name: &str,
) -> StoreResult<Vec<repos::Repo>> {
    let forge_id = *forge_id;
    let wanted = |full_name: &str| name.is_empty() || full_name.to_lowercase().contains(name);
    let owned = repos::owned_by(c, user.id, user.org_id)?;
    let is_owned = |id: i64| owned.iter().any(|m| m.repo.id == id);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (remote, perm) in listed {
        let stored = repos::by_remote_id(c, forge_id, &remote.forge_remote_id)?;
        let (list_stored, may_add) = match perm {
            Some(perm) => (perm.push, perm.push && perm.admin),
            None => {
                let may_add = may_activate_in(c, user, forge_id, &remote.owner)?;
                let owns = stored.as_ref().is_some_and(|row| is_owned(row.repo.id));
                (may_add || owns, may_add)
            }
        };
        match stored {
            Some(row) if list_stored => {
                seen.insert(row.repo.id);
                if wanted(&row.repo.full_name) {
                    out.push(row.repo);
                }
            }
            Some(_) => {}
            None if may_add => {
                let mut repo = remote.new_repo(forge_id, 0);
                repo.active = false;
                if let Ok(other) = repos::by_full_name(c, &repo.full_name)
                    && other.repo.forge_id == forge_id
                    && is_owned(other.repo.id)
                {
                    repo.id = other.repo.id;
                    repo.has_forge_name_conflict = true;
                    seen.insert(other.repo.id);
                }
                if wanted(&repo.full_name) {
                    out.push(repo);
                }
            }
            None => {}
        }
    }
    for row in owned {
        if row.repo.forge_id == forge_id
            && !seen.contains(&row.repo.id)
            && wanted(&row.repo.full_name)
        {
            let mut repo = row.repo;
            repo.has_no_forge_repo = true;
            out.push(repo);
        }
    }
    Ok(out)
}

/// `POST /user/repos/refresh`: permissions of the built-in git forge are local, so there is
/// nothing to fetch; answers `"Ok"` as upstream.
pub async fn refresh_repos(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_user(&ctx, &req).await?;
    Ok(Response::json(&"Ok"))
}

/// `GET /users`: one page of users, by login.
pub async fn list(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let env = ctx.ci.settings.env_admins.clone();
    let list = read_page(&ctx, &req, move |c, page, per_page| {
        users::list(c, &env, page, per_page)
    })
    .await?;
    let list: Vec<_> = list.into_iter().map(|u| avatars::shown(&ctx, u)).collect();
    Ok(Response::json(&list))
}

/// The body of `POST /users`. Unknown fields (a whole `User` object, say) are ignored.
#[derive(Debug, Deserialize)]
struct UserIn {
    login: String,
    #[serde(default)]
    email: String,
    #[serde(default)]
    avatar_url: String,
    #[serde(default)]
    admin: bool,
    #[serde(default)]
    forge_id: i64,
    #[serde(default)]
    forge_remote_id: String,
}

/// `POST /users`: creates a user (and its personal organisation).
pub async fn create(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let body: UserIn = req.json()?;
    validate_login(&body.login).map_err(ApiError::bad_request)?;
    check_length("email", &body.email)?;
    check_length("avatar_url", &body.avatar_url)?;
    let new = NewUser {
        login: body.login,
        email: body.email,
        avatar_url: body.avatar_url,
        admin: body.admin,
        forge_id: body.forge_id,
        forge_remote_id: body.forge_remote_id,
        token_seed: random_secret(),
    };
    let account = ci::users::create(&ctx.ci, new).await?;
    Ok(Response::json(&avatars::shown(&ctx, account.user)))
}

/// `GET /users/{login}`.
pub async fn get(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let login = req.param("login").to_string();
    let forge_id = forge_filter(&req)?;
    let env = ctx.ci.settings.env_admins.clone();
    let account = ctx
        .ci
        .reads
        .read(move |c| users::by_login(c, &env, &login))
        .await
        .map_err(user_not_found)?;
    if forge_id.is_some_and(|f| f != account.user.forge_id) {
        return Err(ApiError::not_found("User not found"));
    }
    Ok(Response::json(&avatars::shown(&ctx, account.user)))
}

/// The body of `PATCH /users/{login}`: fields left out stay as they are.
#[derive(Debug, Deserialize)]
struct UserPatchIn {
    email: Option<String>,
    avatar_url: Option<String>,
    admin: Option<bool>,
}

/// `PATCH /users/{login}`: changes email, avatar or the admin flag.
pub async fn update(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let body: UserPatchIn = req.json()?;
    if let Some(email) = &body.email {
        check_length("email", email)?;
    }
    if let Some(avatar) = &body.avatar_url {
        check_length("avatar_url", avatar)?;
    }
    let patch = UserPatch {
        email: body.email,
        avatar_url: body.avatar_url,
        admin: body.admin,
    };
    let login = req.param("login").to_string();
    let user = ci::users::update(&ctx.ci, login, patch)
        .await
        .map_err(user_not_found)?;
    Ok(Response::json(&avatars::shown(&ctx, user)))
}

/// `DELETE /users/{login}`: 204.
pub async fn delete(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let login = req.param("login").to_string();
    ci::users::delete(&ctx.ci, login)
        .await
        .map_err(user_not_found)?;
    Ok(Response::empty(StatusCode::NO_CONTENT))
}

fn user_not_found(err: impl Into<ci::Error>) -> ApiError {
    match err.into() {
        ci::Error::Store(StoreError::NotFound) => ApiError::not_found("User not found"),
        other => other.into(),
    }
}

/// The optional `forge_id` query filter; non-numeric is 400.
fn forge_filter(req: &Request) -> Result<Option<i64>, ApiError> {
    req.query("forge_id")
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid forge_id {v:?}")))
        })
        .transpose()
}

fn check_length(field: &str, value: &str) -> Result<(), ApiError> {
    if value.len() > MAX_FIELD {
        return Err(ApiError::bad_request(format!(
            "{field} must be at most {MAX_FIELD} characters"
        )));
    }
    Ok(())
}
