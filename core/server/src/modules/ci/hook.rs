//! `POST /hook`: forges report pushes here.
//!
//! The URL a repository registers with its forge carries a hook token (`?access_token=`) that
//! names the repository and is signed with that repository's own key, so the repository — and
//! with it the forge driver that must parse the body — is known before the body is read; the
//! body is never sniffed. Forges served by plugins register one webhook per repository
//! without a token, signed with the forge's secret; its URL names the forge
//! (`?forge=<id>`), so only that forge's adapter parses it (a delivery without either is
//! offered to every loaded adapter's `recognize`). All of that is known from the request's
//! head, so it is checked before the body is read ([`check_head`]). What a delivery means for
//! pipelines is the service layer's ([`crate::ci::hooks`]); this handler authenticates it and
//! renders the outcome.

use std::sync::Arc;

use woodlark_plugin_host::HookRequest;

use super::pipelines::created_response;
use crate::auth::{self, token};
use crate::ci::create::Created;
use crate::ci::forge::drivers::ForgeHandle;
use crate::ci::forge::plugin::FORGE_PARAM;
use crate::ci::hooks::{self, HookScope, PluginHook};
use crate::http::router::SenderKnown;
use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::state::Ctx;
use crate::store::now_unix;
use crate::store::repos::{self, RepoRow};

/// Webhook bodies can be large (GitHub sends up to 25 MB).
pub const HOOK_BODY_LIMIT: usize = 25 * 1024 * 1024;

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope.route_guarded(
        crate::http::Method::POST,
        "/hook",
        HOOK_BODY_LIMIT,
        check_head,
        receive,
    );
}

/// Where a delivery goes, found from the request's head alone (see [`check_head`]).
#[derive(Clone)]
enum Target {
    /// A hook token named an inactive repository: accepted, and nothing happens.
    Inactive,
    /// The built-in git forge's `post-receive` hook, by its verified hook token.
    Git(Box<RepoRow>, Arc<ForgeHandle>),
    /// A delivery for forge-adapter plugin `.0`.
    Plugin(String, HookScope),
}

/// Runs before the body is read (up to 25 MB, from anyone): a request naming no forge or
/// repository here, with a token that does not verify, or that no adapter recognises is
/// refused without a byte of it read. A verified hook token makes the sender known; every
/// other delivery is only checked by its plugin, so its body counts against the server's
/// budget for unauthenticated bodies (`server.unauthenticated_body_budget_bytes`).
async fn check_head(ctx: Ctx, mut req: Request) -> Result<Request, ApiError> {
    let target = target_of(&ctx, &req).await?;
    if !matches!(
        target,
        Target::Plugin(_, HookScope::Forge(_) | HookScope::Any)
    ) {
        req.extensions.insert(SenderKnown);
    }
    req.extensions.insert(target);
    Ok(req)
}

/// The delivery's [`Target`] by its hook token, else its `?forge=`, else the adapter that
/// recognises its headers.
async fn target_of(ctx: &Ctx, req: &Request) -> Result<Target, ApiError> {
    if hook_token(req).is_some() {
        let row = repo_of(ctx, req).await?;
        if !row.repo.active {
            return Ok(Target::Inactive);
        }
        let forge = ctx.ci.drivers.get(row.repo.forge_id).await?;
        return Ok(match forge.plugin().map(str::to_string) {
            Some(plugin) => Target::Plugin(plugin, HookScope::Repo(Box::new(row), forge)),
            None => Target::Git(Box::new(row), forge),
        });
    }
    // No token in the URL: a forge-wide webhook, verified by a plugin. The URL names its
    // forge when activation registered it; else every adapter is asked whether the request
    // is its forge's (a plugin call each).
    if let Some(forge) = req.query(FORGE_PARAM) {
        let forge_id: i64 = forge.parse().map_err(|_| {
            ApiError::bad_request(format!("failure to parse hook: invalid forge id {forge:?}"))
        })?;
        let forge = ctx.ci.drivers.get(forge_id).await?;
        let Some(plugin) = forge.plugin().map(str::to_string) else {
            return Err(ApiError::bad_request(format!(
                "failure to parse hook: forge {forge_id} is a git forge; its hooks carry a hook token"
            )));
        };
        return Ok(Target::Plugin(plugin, HookScope::Forge(forge)));
    }
    match ctx.ci.plugins.recognize(&plugin_headers(req)).await {
        Some(plugin) => Ok(Target::Plugin(plugin, HookScope::Any)),
        None => Err(ApiError::bad_request("failure to parse token from hook")),
    }
}

/// The hook token of a request: Bearer, then `X-Gitlab-Token`, then `?access_token=`. An
/// `X-Gitlab-Token` that is no hook token is the forge's webhook secret, left for the GitLab
/// adapter to check.
fn hook_token(req: &Request) -> Option<String> {
    if let Some(t) = req
        .header("authorization")
        .and_then(|v| v.trim().strip_prefix("Bearer "))
    {
        return Some(t.trim().to_string());
    }
    if let Some(t) = req
        .header("x-gitlab-token")
        .map(str::trim)
        .filter(|t| token::hook_token_subject(t).is_some())
    {
        return Some(t.to_string());
    }
    auth::bearer(req)
}

/// Finds and verifies the repository a hook token names.
async fn repo_of(ctx: &Ctx, req: &Request) -> Result<RepoRow, ApiError> {
    let bad_token = || ApiError::bad_request("failure to parse token from hook");
    let raw = hook_token(req).ok_or_else(bad_token)?;
    let (forge_id, remote_id) = token::hook_token_subject(&raw).ok_or_else(bad_token)?;
    let row = ctx
        .ci
        .reads
        .read_one(move |c| repos::by_remote_id(c, forge_id, &remote_id))
        .await?
        .ok_or_else(bad_token)?;
    token::verify(&raw, row.hash.as_bytes(), now_unix()).ok_or_else(bad_token)?;
    Ok(row)
}

async fn receive(ctx: Ctx, mut req: Request) -> Result<Response, ApiError> {
    let target = match req.extensions.remove::<Target>() {
        Some(target) => target,
        None => target_of(&ctx, &req).await?,
    };
    let (row, forge) = match target {
        Target::Inactive => return Ok(Response::empty(StatusCode::NO_CONTENT)),
        Target::Plugin(plugin, scope) => return plugin_hook(&ctx, &req, &plugin, scope).await,
        Target::Git(row, forge) => (row, forge),
    };
    let updates = hooks::parse_ref_updates(&req.body)
        .map_err(|why| ApiError::bad_request(format!("failure to parse hook: {why}")))?;
    Ok(
        match hooks::git_push(&ctx.ci, &row, &forge, &updates).await? {
            None => Response::text(StatusCode::OK, "ignoring hook: only deleted refs\n"),
            Some(Created::NoConfig) => Response::text(StatusCode::NO_CONTENT, ""),
            Some(created) => created_response(created),
        },
    )
}

fn plugin_headers(req: &Request) -> Vec<(String, Vec<u8>)> {
    req.headers
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
        .collect()
}

/// A webhook for forge-adapter `plugin` (see [`hooks::from_plugin`]).
async fn plugin_hook(
    ctx: &Ctx,
    req: &Request,
    plugin: &str,
    scope: HookScope,
) -> Result<Response, ApiError> {
    let path = if req.query.is_empty() {
        req.path.clone()
    } else {
        format!("{}?{}", req.path, req.query)
    };
    let request = HookRequest {
        method: req.method.as_str().to_string(),
        path_and_query: path,
        headers: plugin_headers(req),
        body: req.body.to_vec(),
    };
    Ok(
        match hooks::from_plugin(&ctx.ci, plugin, request, scope).await? {
            PluginHook::Ignored(reason) => Response::text(
                StatusCode::OK,
                format!("forge driver: explicit ignored event: {reason}\n"),
            ),
            PluginHook::NotOurs(why) => {
                Response::text(StatusCode::OK, format!("ignoring hook: {why}\n"))
            }
            PluginHook::Created(Created::NoConfig) => Response::empty(StatusCode::NO_CONTENT),
            PluginHook::Created(created) => created_response(created),
        },
    )
}
