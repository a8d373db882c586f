//! Who is calling, and the HTTP side of what they may do: token → user, and Woodpecker's
//! refusal statuses. The rules themselves (permissions, visibility, organisation standing,
//! who may activate where) are `woodlark_ci::access`'s; this module finds the caller, keeps
//! answers in the access cache and turns a decision into a status.
//!
//! - An absent, malformed or revoked token makes the caller anonymous.
//! - Routes that need a user answer 401 to anonymous callers; admin routes 403 to non-admins.
//! - Repositories: a caller without pull permission gets 401 when anonymous and **404** when
//!   signed in (not 403, so private repositories do not leak); a repo-admin route answers 403
//!   to a caller who may pull but is not a repo admin.
//! - Organisations: members and admins as computed by [`org_perm`]; instance admins are both.
//!
//! Every authenticated request asks "whose token is this?" and most then ask "what may they
//! do on this repository?" (the events feed: "which repositories may they read?"). These
//! answers are cached in [`AccessCache`] for one identity
//! generation of the store (see `store::cache`): a token rotation, a deleted user, a changed
//! permission or forge tokens forgotten is seen by the next request, and a cache hit costs no database read, no key
//! derivation and no signature check.

use std::sync::Arc;

use crate::store::Tx;
use serde_json::Value;

use crate::auth::{self, session, token};
use crate::ci;
use crate::ci::access::{
    OrgDecision, OrgNeed, RepoDecision, RepoNeed, decide_org, decide_repo, repo_with_perm,
};
pub use crate::ci::access::{OrgPerm, may_activate_in, org_perm, repo_perm};
use crate::ci::access_cache::{Readable, Verified};
use crate::http::{ApiError, Request, StatusCode};
use crate::state::AppState;
use crate::store::orgs::{self, Org};
use crate::store::repos::{self, Perm, RepoRow};
use crate::store::users::{self, Account, User};
use crate::store::{StoreError, StoreResult, forge_tokens, now_unix};

/// The signed-in user, if the request carries a valid personal access token or browser
/// session token (`sess`, normally from the `user_sess` cookie; see `auth::session`).
///
/// A session must also prove, on every method but GET/HEAD/OPTIONS, that the request comes
/// from our own page: `X-CSRF-TOKEN` must hold the CSRF token `/web-config.js` handed out for
/// that session. Without it the request is refused with 401 (not downgraded to anonymous), as
/// upstream does. Personal access tokens need no CSRF header, wherever they are carried.
pub async fn current(ctx: &AppState, req: &Request) -> Result<Option<Arc<Account>>, ApiError> {
    current_at(ctx, req, ctx.ci.reads.identity_generation()).await
}

/// [`current`], with the token's verification cached under `generation` (read before any
/// read whose result is cached alongside).
async fn current_at(
    ctx: &AppState,
    req: &Request,
    generation: u64,
) -> Result<Option<Arc<Account>>, ApiError> {
    let Some(raw) = auth::bearer(req) else {
        return Ok(None);
    };
    let now = now_unix();
    let verified = match ctx.access_cache.tokens.get(raw.as_str(), generation) {
        Some(verified) => verified,
        None => match verify(ctx, &raw, now).await? {
            Some(verified) => {
                ctx.access_cache
                    .tokens
                    .insert(raw, generation, verified.clone());
                verified
            }
            None => return Ok(None),
        },
    };
    if verified.expires.is_some_and(|exp| exp < now) {
        return Ok(None);
    }
    let user_id = verified.account.user.id;
    if verified.session && !session::csrf_ok(req, &verified.claims, user_id, &verified.key, now) {
        return Err(ApiError::unauthorized());
    }
    Ok(Some(verified.account))
}

/// Checks a personal access token or session token against its user's key; `None` when it
/// names nobody, names a deleted user or does not verify.
async fn verify(ctx: &AppState, raw: &str, now: i64) -> Result<Option<Verified>, ApiError> {
    let Some(session::Subject { user_id, session }) = session::subject(raw) else {
        return Ok(None);
    };
    let env = ctx.ci.settings.env_admins.clone();
    let (account, tokens_from) = match ctx
        .ci
        .reads
        .read(move |c| {
            let account = users::by_id(c, &env, user_id)?;
            let tokens_from = if session {
                forge_tokens::get(c, user_id)?.map(|t| t.forge_id)
            } else {
                None
            };
            Ok((account, tokens_from))
        })
        .await
    {
        Ok(found) => found,
        Err(StoreError::NotFound) => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    let key = ctx.token_key(&account);
    let Some(claims) = token::verify(raw, key.as_bytes(), now) else {
        return Ok(None);
    };
    // A session made by signing in through a forge ends with the tokens that forge gave
    // (forgotten when it refused them: `ci::forge::acting::Tokens::forget`).
    if let Some(forge) = session::forge_of(&claims)
        && tokens_from != Some(forge)
    {
        return Ok(None);
    }
    Ok(Some(Verified {
        account: Arc::new(account),
        expires: claims.get("exp").and_then(Value::as_i64),
        claims: Arc::new(claims),
        key: key.into(),
        session,
    }))
}

/// What the signed-in caller may read: `readable` holds the ids of the repositories and
/// organisations (`repos::readable_ids`), `None` for an instance admin, who may read
/// everything. 401 for anonymous callers.
pub async fn readable_by_caller(ctx: &AppState, req: &Request) -> Result<CallerReads, ApiError> {
    let generation = ctx.ci.reads.identity_generation();
    let account = current_at(ctx, req, generation)
        .await?
        .ok_or_else(ApiError::unauthorized)?;
    let user_id = account.user.id;
    if !ci::access::reads_only_what_is_shared(&account.user) {
        return Ok(CallerReads {
            user_id,
            readable: None,
        });
    }
    if let Some(ids) = ctx.access_cache.readable.get(&user_id, generation) {
        return Ok(CallerReads {
            user_id,
            readable: Some(ids),
        });
    }
    let own_org = account.user.org_id;
    let ids = Arc::new(
        ctx.ci
            .reads
            .read(move |c| repos::readable_ids(c, user_id, own_org))
            .await?,
    );
    ctx.access_cache
        .readable
        .insert(user_id, generation, ids.clone());
    Ok(CallerReads {
        user_id,
        readable: Some(ids),
    })
}

/// [`readable_by_caller`]'s answer.
pub struct CallerReads {
    pub user_id: i64,
    /// `None`: an instance admin.
    pub readable: Option<Arc<Readable>>,
}

/// The signed-in user, or 401.
pub async fn must_user(ctx: &AppState, req: &Request) -> Result<Arc<Account>, ApiError> {
    current(ctx, req).await?.ok_or_else(ApiError::unauthorized)
}

/// A signed-in instance admin: 401 without a user, 403 for a non-admin.
pub async fn must_admin(ctx: &AppState, req: &Request) -> Result<Arc<Account>, ApiError> {
    let account = must_user(ctx, req).await?;
    if !account.user.admin {
        return Err(denied("admin permission"));
    }
    Ok(account)
}

/// The 403 for a caller who lacks `what` (a permission or membership), naming it.
fn denied(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        format!("Access denied: {what} required"),
    )
}

pub use crate::ci::access::{OrgAccess, RepoAccess};

/// A [`RepoAccess`]'s decisions as the API answers them (401 sign in, 404 hidden, 403
/// denied), for the handlers that need more than pull.
pub trait Require {
    /// The caller must be a repo admin: 401 anonymous, 403 otherwise (they can already see
    /// the repo).
    fn require_admin(&self) -> Result<(), ApiError>;
    /// The caller must be signed in and allowed to push: 401 anonymous, 403 otherwise.
    fn require_push(&self) -> Result<(), ApiError>;
    /// The caller must be signed in (some repo reads of public repos need no user).
    fn user(&self) -> Result<&Arc<Account>, ApiError>;
}

impl Require for RepoAccess {
    fn require_admin(&self) -> Result<(), ApiError> {
        refused(self.decide(RepoNeed::Admin))
    }

    fn require_push(&self) -> Result<(), ApiError> {
        refused(self.decide(RepoNeed::Push))
    }

    fn user(&self) -> Result<&Arc<Account>, ApiError> {
        self.user.as_ref().ok_or_else(ApiError::unauthorized)
    }
}

/// Loads the repository named by the `repo_id` path parameter and checks pull permission
/// (a permission from the forge is read again after `ci::repos::PERM_TTL_SECS`).
pub async fn repo(ctx: &AppState, req: &Request) -> Result<RepoAccess, ApiError> {
    repo_within(ctx, req, ci::repos::PERM_TTL_SECS).await
}

/// [`repo`], with a permission from the forge read again when `max_age` seconds old.
async fn repo_within(ctx: &AppState, req: &Request, max_age: i64) -> Result<RepoAccess, ApiError> {
    let id = req.param_i64("repo_id")?;
    let generation = ctx.ci.reads.identity_generation();
    let user = current_at(ctx, req, generation).await?;
    let key = (user.as_ref().map_or(0, |a| a.user.id), id);
    let found = match ctx.access_cache.repos.get(&key, generation) {
        Some(found) => Ok(found),
        None => {
            let u = user.as_ref().map(|a| a.user.clone());
            let found = ctx
                .ci
                .reads
                .read(move |c| repo_with_perm(c, u.as_ref(), |c| repos::by_id(c, id)))
                .await
                .map(|(row, perm)| (Arc::new(row), perm));
            if let Ok(found) = &found {
                ctx.access_cache
                    .repos
                    .insert(key, generation, found.clone());
            }
            found
        }
    };
    let u = user.as_ref().map(|a| &a.user);
    let found = ci::access::with_synced_perm(&ctx.ci, u, found, max_age).await;
    checked(user, found)
}

/// Like [`repo`] but also requires repo admin (secrets, registries, cron, settings), with a
/// permission from the forge no older than `ci::repos::RECHECK_SECS`.
pub async fn repo_admin(ctx: &AppState, req: &Request) -> Result<RepoAccess, ApiError> {
    let access = repo_within(ctx, req, ci::repos::RECHECK_SECS).await?;
    access.require_admin()?;
    Ok(access)
}

/// Like [`repo`] but also requires push (run, restart, cancel, approve or decline
/// pipelines), with a permission from the forge no older than `ci::repos::RECHECK_SECS`.
pub async fn repo_push(ctx: &AppState, req: &Request) -> Result<RepoAccess, ApiError> {
    let access = repo_within(ctx, req, ci::repos::RECHECK_SECS).await?;
    access.require_push()?;
    Ok(access)
}

/// Loads a repository with `find` and checks the caller may pull it.
pub async fn repo_by<F>(
    ctx: &AppState,
    user: Option<Arc<Account>>,
    find: F,
) -> Result<RepoAccess, ApiError>
where
    F: FnMut(&Tx) -> StoreResult<RepoRow> + Send + 'static,
{
    let mut find = find;
    let u = user.as_ref().map(|a| a.user.clone());
    let found = ctx
        .ci
        .reads
        .read(move |c| repo_with_perm(c, u.as_ref(), &mut find))
        .await
        .map(|(row, perm)| (Arc::new(row), perm));
    let u = user.as_ref().map(|a| &a.user);
    let found = ci::access::with_synced_perm(&ctx.ci, u, found, ci::repos::PERM_TTL_SECS).await;
    checked(user, found)
}

/// The caller's access to a repository they looked up, or 404/401 when they may not pull it.
fn checked(
    user: Option<Arc<Account>>,
    found: StoreResult<(Arc<RepoRow>, Perm)>,
) -> Result<RepoAccess, ApiError> {
    let (row, perm) = match found {
        Ok(found) => found,
        Err(StoreError::NotFound) => return Err(repo_not_found()),
        Err(err) => return Err(err.into()),
    };
    refused(decide_repo(user.is_some(), &perm, RepoNeed::Pull))?;
    Ok(RepoAccess { user, row, perm })
}

/// A repository decision as the API answers it: 401 sign in, 404 hidden, 403 denied.
fn refused(decision: RepoDecision) -> Result<(), ApiError> {
    match decision {
        RepoDecision::Allowed => Ok(()),
        RepoDecision::SignIn => Err(ApiError::unauthorized()),
        // Pull is never denied but hidden; the arm keeps the match whole.
        RepoDecision::Hidden | RepoDecision::Denied(RepoNeed::Pull) => Err(repo_not_found()),
        RepoDecision::Denied(RepoNeed::Push) => Err(denied("push permission")),
        RepoDecision::Denied(RepoNeed::Admin) => Err(denied("repository admin permission")),
    }
}

pub fn repo_not_found() -> ApiError {
    ApiError::not_found("Repository not found")
}

/// `ci::access::with_forge_membership` for a handler.
pub async fn with_forge_membership(
    ctx: &AppState,
    user: Option<&User>,
    org: &Org,
    perm: OrgPerm,
    max_age: std::time::Duration,
) -> OrgPerm {
    ci::access::with_forge_membership(&ctx.ci, user, org, perm, max_age).await
}

/// Loads the organisation named by the `org_id` path parameter; the caller must be a member
/// (`need_admin`: an org admin, their membership on the forge no older than
/// `ci::orgs::MEMBERSHIP_RECHECK`: admins manage the org's secrets and agents). 400 bad id,
/// 401 anonymous, 404 unknown, 403 not allowed.
pub async fn org(ctx: &AppState, req: &Request, need_admin: bool) -> Result<OrgAccess, ApiError> {
    let id = req.param_i64("org_id")?;
    let user = must_user(ctx, req).await?;
    org_of(ctx, user, id, need_admin).await
}

/// [`org`] for organisation `id` and a signed-in `user` (a page that names the organisation
/// through a repository asks the same question): 404 unknown, 403 not allowed.
pub async fn org_of(
    ctx: &AppState,
    user: Arc<Account>,
    id: i64,
    need_admin: bool,
) -> Result<OrgAccess, ApiError> {
    let u = user.user.clone();
    let found = ctx
        .ci
        .reads
        .read(move |c| {
            let org = orgs::by_id(c, id)?;
            let perm = org_perm(c, Some(&u), &org)?;
            Ok((org, perm))
        })
        .await;
    let (org, perm) = match found {
        Ok(found) => found,
        Err(StoreError::NotFound) => return Err(ApiError::not_found("Organization not found")),
        Err(err) => return Err(err.into()),
    };
    let (need, max_age) = if need_admin {
        (OrgNeed::Admin, ci::orgs::MEMBERSHIP_RECHECK)
    } else {
        (OrgNeed::Member, ci::orgs::MEMBERSHIP_TTL)
    };
    let perm = with_forge_membership(ctx, Some(&user.user), &org, perm, max_age).await;
    match decide_org(perm, need) {
        OrgDecision::Allowed => Ok(OrgAccess { user, org, perm }),
        OrgDecision::Denied(OrgNeed::Admin) => Err(denied("organization admin permission")),
        OrgDecision::Denied(OrgNeed::Member) => Err(denied("organization membership")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::App;
    use crate::config::Config;
    use crate::http::{HeaderValue, Method};
    use crate::logging::{LogControl, LogLevel};
    use crate::state::Ctx;
    use crate::store::users::NewUser;

    /// A built (not serving) app on a temporary data dir, and one user's account.
    async fn app_with_user() -> (tempfile::TempDir, App, Account) {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[server]\ndata_dir = {:?}\n[runner]\nenabled = false\n",
            dir.path().display().to_string()
        );
        let config = Config::from_toml(&text, "t.toml", &[]).unwrap();
        let app = App::build(config, LogControl::detached(LogLevel::Warn)).unwrap();
        let new = NewUser {
            login: "alice".into(),
            token_seed: auth::random_secret(),
            ..NewUser::default()
        };
        let account = app
            .state()
            .ci
            .store_for_tests()
            .write(move |c| users::create(c, &Default::default(), &new))
            .await
            .unwrap();
        (dir, app, account)
    }

    fn request(method: Method, cookie: &str, csrf: Option<&str>) -> Request {
        let mut req = Request::new(method, "/api/user");
        req.headers.insert(
            "cookie",
            HeaderValue::from_str(&format!("user_sess={cookie}")).unwrap(),
        );
        if let Some(c) = csrf {
            req.headers
                .insert("x-csrf-token", HeaderValue::from_str(c).unwrap());
        }
        req
    }

    async fn who(ctx: &Ctx, req: Request) -> Result<Option<String>, StatusCode> {
        current(ctx, &req)
            .await
            .map(|a| a.map(|a| a.user.login.clone()))
            .map_err(|e| e.status)
    }

    #[tokio::test]
    async fn sessions_need_csrf_on_writes_and_pats_do_not() {
        let (_dir, app, account) = app_with_user().await;
        let ctx = app.state();
        let key = ctx.token_key(&account);
        let (id, hash) = (account.user.id, key.as_str());
        let sess = session::session_token(id, hash, now_unix(), 3600);
        let csrf = session::csrf_token(&sess, id, hash);
        let alice = Ok(Some("alice".to_string()));

        assert_eq!(who(ctx, request(Method::GET, &sess, None)).await, alice);
        assert_eq!(
            who(ctx, request(Method::POST, &sess, None)).await,
            Err(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            who(ctx, request(Method::DELETE, &sess, Some("nonsense"))).await,
            Err(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            who(ctx, request(Method::POST, &sess, Some(&csrf))).await,
            alice
        );

        // A personal access token in the cookie needs no CSRF header (as upstream).
        let pat = token::user_token(id, hash);
        assert_eq!(who(ctx, request(Method::POST, &pat, None)).await, alice);

        // Expired sessions and sessions signed with another secret are anonymous.
        let expired = session::session_token(id, hash, now_unix() - 7200, 3600);
        assert_eq!(
            who(ctx, request(Method::GET, &expired, None)).await,
            Ok(None)
        );
        let forged = session::session_token(id, "not-the-hash", now_unix(), 3600);
        assert_eq!(
            who(ctx, request(Method::GET, &forged, None)).await,
            Ok(None)
        );

        // Neither CSRF tokens nor login links authenticate anyone.
        assert_eq!(who(ctx, request(Method::GET, &csrf, None)).await, Ok(None));
        let link = session::login_link_token(id, hash, now_unix());
        assert_eq!(who(ctx, request(Method::GET, &link, None)).await, Ok(None));
    }

    /// The cache never outlives a change: each answer below follows a write the caller has
    /// just seen acknowledged, with the previous answer cached.
    #[tokio::test]
    async fn cached_answers_follow_every_identity_change() {
        let (_dir, app, account) = app_with_user().await;
        let ctx = app.state();
        let id = account.user.id;
        let pat = token::user_token(id, &ctx.token_key(&account));
        let get = |t: &str| {
            let mut req = Request::new(Method::GET, "/api/user");
            req.headers.insert(
                "authorization",
                HeaderValue::from_str(&format!("Bearer {t}")).unwrap(),
            );
            req
        };
        let admin_flag =
            |r: Result<Option<Arc<Account>>, ApiError>| r.ok().flatten().map(|a| a.user.admin);
        assert_eq!(admin_flag(current(ctx, &get(&pat)).await), Some(false));
        assert_eq!(
            admin_flag(current(ctx, &get(&pat)).await),
            Some(false),
            "from the cache"
        );
        assert_eq!(ctx.access_cache.tokens.len(), 1);

        // A change of the user shows at once.
        let env = ctx.ci.settings.env_admins.clone();
        ctx.ci
            .store_for_tests()
            .write(move |c| {
                let patch = users::UserPatch {
                    admin: Some(true),
                    ..Default::default()
                };
                users::update(c, &env, "alice", &patch)
            })
            .await
            .unwrap();
        assert_eq!(admin_flag(current(ctx, &get(&pat)).await), Some(true));

        // What the caller may read follows a new public repository at once.
        let readable = |ctx: &Ctx, t: String| {
            let ctx = ctx.clone();
            async move {
                readable_by_caller(&ctx, &get(&t))
                    .await
                    .ok()
                    .and_then(|reads| reads.readable)
                    .map(|ids| ids.0.len())
            }
        };
        ctx.ci
            .store_for_tests()
            .write(move |c| {
                let patch = users::UserPatch {
                    admin: Some(false),
                    ..Default::default()
                };
                users::update(c, &Default::default(), "alice", &patch).map(|_| ())
            })
            .await
            .unwrap();
        assert_eq!(readable(ctx, pat.clone()).await, Some(0));
        assert_eq!(readable(ctx, pat.clone()).await, Some(0), "from the cache");
        let org_id = account.user.org_id;
        ctx.ci
            .store_for_tests()
            .write(move |c| repos::insert_bare(c, org_id, id, "alice/x"))
            .await
            .unwrap();
        assert_eq!(readable(ctx, pat.clone()).await, Some(1));
        let env = ctx.ci.settings.env_admins.clone();
        ctx.ci
            .store_for_tests()
            .write(move |c| {
                let patch = users::UserPatch {
                    admin: Some(true),
                    ..Default::default()
                };
                users::update(c, &env, "alice", &patch).map(|_| ())
            })
            .await
            .unwrap();

        // Rotating the token seed revokes the cached token.
        let env = ctx.ci.settings.env_admins.clone();
        let rotated = ctx
            .ci
            .store_for_tests()
            .write(move |c| users::set_token_seed(c, &env, id, "new-seed"))
            .await
            .unwrap();
        assert_eq!(admin_flag(current(ctx, &get(&pat)).await), None);
        let new_pat = token::user_token(id, &ctx.token_key(&rotated));
        assert_eq!(admin_flag(current(ctx, &get(&new_pat)).await), Some(true));

        // Deleting the user ends it too.
        let env = ctx.ci.settings.env_admins.clone();
        ctx.ci
            .store_for_tests()
            .write(move |c| users::delete(c, &env, "alice"))
            .await
            .unwrap();
        assert_eq!(admin_flag(current(ctx, &get(&new_pat)).await), None);

        // Bad tokens are never cached.
        assert_eq!(admin_flag(current(ctx, &get("not.a.token")).await), None);
        assert!(ctx.access_cache.tokens.len() <= 2);
    }
}
