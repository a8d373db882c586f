//! `POST /hook`: forges report pushes here.
//!
//! The URL a repository registers with its forge carries a hook token (`?access_token=`) that
//! names the repository and is signed with that repository's own key, so the repository — and
//! with it the forge driver that must parse the body — is known before the body is read; the
//! body is never sniffed. For the built-in `git` forge the body is what git gives a
//! `post-receive` hook: one `<old-sha> <new-sha> <ref>` line per updated ref.

use woodlark_plugin_host::{HookOutcome, HookRequest, PluginError};

use super::pipelines::created_response;
use crate::app::Ctx;
use crate::auth::{self, token};
use crate::ci::create::{self, Created, Trigger};
use crate::ci::forge::plugin::plugin_for;
use crate::ci::forge::{self, ForgeDriver, ForgeError};
use crate::http::{ApiError, Request, Response, Scope, StatusCode};
use crate::pipeline::event::WebhookEvent;
use crate::pipeline::types::Commit;
use crate::store::forges::ForgeRow;
use crate::store::repos::{self, Repo, RepoRow};
use crate::store::{forges, now_unix};

/// Webhook bodies can be large (GitHub sends up to 25 MB).
pub const HOOK_BODY_LIMIT: usize = 25 * 1024 * 1024;

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope.route_with_limit(crate::http::Method::POST, "/hook", HOOK_BODY_LIMIT, receive);
}

/// One ref update from a `post-receive` hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefUpdate {
    pub old: String,
    pub new: String,
    pub git_ref: String,
}

impl RefUpdate {
    /// A deleted ref (new sha all zeros) starts nothing.
    pub fn is_delete(&self) -> bool {
        self.new.bytes().all(|b| b == b'0')
    }
}

/// Parses git's `<old> <new> <ref>` lines; anything else is an error naming the line.
pub fn parse_ref_updates(body: &[u8]) -> Result<Vec<RefUpdate>, String> {
    let text = std::str::from_utf8(body).map_err(|_| "body is not UTF-8".to_string())?;
    let is_sha =
        |s: &str| (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit());
    let mut out = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            [old, new, r] if is_sha(old) && is_sha(new) && r.starts_with("refs/") => {
                out.push(RefUpdate {
                    old: old.to_string(),
                    new: new.to_string(),
                    git_ref: r.to_string(),
                })
            }
            _ => {
                return Err(format!(
                    "line {}: expected '<old-sha> <new-sha> <ref>'",
                    n + 1
                ));
            }
        }
    }
    if out.is_empty() {
        return Err("no ref updates in the body".into());
    }
    Ok(out)
}

/// The hook token of a request: Bearer, then `X-Gitlab-Token`, then `?access_token=`.
fn hook_token(req: &Request) -> Option<String> {
    if let Some(t) = req
        .header("authorization")
        .and_then(|v| v.trim().strip_prefix("Bearer "))
    {
        return Some(t.trim().to_string());
    }
    if let Some(t) = req.header("x-gitlab-token") {
        return Some(t.trim().to_string());
    }
    auth::bearer(req)
}

/// Finds and verifies the repository a hook token names.
async fn repo_of(ctx: &Ctx, req: &Request) -> Result<RepoRow, ApiError> {
    let bad_token = || ApiError::bad_request("failure to parse token from hook");
    let raw = hook_token(req).ok_or_else(bad_token)?;
    let (forge_id, remote_id) = token::hook_token_subject(&raw).ok_or_else(bad_token)?;
    let row = ctx
        .store
        .read(move |c| repos::by_remote_id(c, forge_id, &remote_id))
        .await?
        .ok_or_else(bad_token)?;
    token::verify(&raw, row.hash.as_bytes(), now_unix()).ok_or_else(bad_token)?;
    Ok(row)
}

async fn receive(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    if hook_token(&req).is_none() {
        // No token in the URL: a forge-wide webhook, recognised and verified by a plugin.
        let Some(plugin) = ctx.plugins.recognize(&plugin_headers(&req)).await else {
            return Err(ApiError::bad_request("failure to parse token from hook"));
        };
        return plugin_hook(&ctx, &req, &plugin, None).await;
    }
    let row = repo_of(&ctx, &req).await?;
    if !row.repo.active {
        return Ok(Response::empty(StatusCode::NO_CONTENT));
    }
    let forge_id = row.repo.forge_id;
    let forge = ctx.store.read(move |c| forges::by_id(c, forge_id)).await?;
    if forge.forge.kind != "git" {
        let plugin = plugin_for(&ctx.plugins, &forge.forge)
            .ok_or_else(|| ForgeError::NoDriver(forge.forge.kind.clone()))?;
        return plugin_hook(&ctx, &req, &plugin, Some((row, forge))).await;
    }
    let updates = parse_ref_updates(&req.body)
        .map_err(|why| ApiError::bad_request(format!("failure to parse hook: {why}")))?;
    let pushed: Vec<&RefUpdate> = updates.iter().filter(|u| !u.is_delete()).collect();
    tracing::info!(
        repo = row.repo.full_name,
        refs = updates.len(),
        "push received from git hook"
    );
    if pushed.is_empty() {
        return Ok(Response::text(
            StatusCode::OK,
            "ignoring hook: only deleted refs\n",
        ));
    }
    let driver = forge::driver_from(&ctx.ci, &forge)?;
    let mut last = None;
    for update in pushed {
        let trigger = push_trigger(driver.as_ref(), &row.repo, update).await?;
        last = Some(
            create::with_driver(&ctx.ci, &row, &forge.forge.kind, driver.as_ref(), trigger).await?,
        );
    }
    Ok(match last {
        Some(Created::NoConfig) => Response::text(StatusCode::NO_CONTENT, ""),
        Some(created) => created_response(created),
        None => Response::empty(StatusCode::NO_CONTENT),
    })
}

fn plugin_headers(req: &Request) -> Vec<(String, Vec<u8>)> {
    req.headers
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.as_bytes().to_vec()))
        .collect()
}

/// A hook parsed by a forge-adapter plugin. With `expected` (from the hook token) the hook
/// must be about that repository; without, the plugin must have verified the forge's
/// signature, and the repository is found by its forge id among the forges the plugin serves.
async fn plugin_hook(
    ctx: &Ctx,
    req: &Request,
    plugin: &str,
    expected: Option<(RepoRow, ForgeRow)>,
) -> Result<Response, ApiError> {
    let path = if req.query.is_empty() {
        req.path.clone()
    } else {
        format!("{}?{}", req.path, req.query)
    };
    let outcome = ctx
        .plugins
        .parse_hook(
            plugin,
            HookRequest {
                method: req.method.as_str().to_string(),
                path_and_query: path,
                headers: plugin_headers(req),
                body: req.body.to_vec(),
            },
        )
        .await
        .map_err(|e| match e {
            PluginError::NotLoaded(_) => ApiError::from(ForgeError::NoDriver(plugin.to_string())),
            e if e.is_fault() => {
                tracing::warn!(plugin, error = %e, "forge adapter failed");
                ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    format!("forge adapter failed: {e}"),
                )
            }
            e => ApiError::bad_request(format!("failure to parse hook: {e}")),
        })?;
    let build = match outcome {
        HookOutcome::Ignored(reason) => {
            return Ok(Response::text(
                StatusCode::OK,
                format!("forge driver: explicit ignored event: {reason}\n"),
            ));
        }
        HookOutcome::Build(build) => build,
    };
    let remote_id = build.repo.forge_remote_id.clone();
    let (row, forge) = match expected {
        Some((row, forge)) => {
            if row.repo.forge_remote_id != remote_id {
                return Err(ApiError::bad_request(
                    "failure to parse hook: the hook is about another repository",
                ));
            }
            (row, forge)
        }
        None => {
            if !build.signature_verified {
                return Err(ApiError::bad_request(
                    "failure to parse hook: no hook token and no verified signature (grant the plugin the forge's webhook secret)",
                ));
            }
            let host = ctx.plugins.clone();
            let plugin = plugin.to_string();
            let found = ctx
                .store
                .read(move |c| {
                    for f in forges::list(c, 1, 50)? {
                        if plugin_for(&host, &f).as_deref() == Some(plugin.as_str())
                            && let Some(row) = repos::by_remote_id(c, f.id, &remote_id)?
                        {
                            return Ok(Some((row, forges::by_id(c, f.id)?)));
                        }
                    }
                    Ok(None)
                })
                .await?;
            match found {
                Some(found) => found,
                None => return Ok(Response::empty(StatusCode::NO_CONTENT)),
            }
        }
    };
    if !row.repo.active {
        return Ok(Response::empty(StatusCode::NO_CONTENT));
    }
    let p = &build.pipeline;
    let event = webhook_event(p.event);
    if event.is_pull_request() && !row.repo.allow_pr {
        return Ok(Response::empty(StatusCode::NO_CONTENT));
    }
    // The plugin's record crosses the WIT boundary as its own type; from here on it is the
    // pipeline's commit record.
    let mut trigger = Trigger {
        event,
        event_reason: p.event_reason.clone(),
        commit: Commit {
            sha: p.commit.clone(),
            branch: p.branch.clone(),
            git_ref: p.git_ref.clone(),
            refspec: p.refspec.clone(),
            message: p.message.clone(),
            author: p.author.clone(),
            author_email: p.author_email.clone(),
            author_avatar: p.author_avatar.clone(),
            sender: p.sender.clone(),
            forge_url: p.forge_url.clone(),
            timestamp: p.timestamp,
            changed_files: p.changed_files.clone(),
        },
        deploy_to: p.deploy_to.clone(),
        ..Trigger::default()
    };
    if trigger.commit.changed_files.is_empty()
        && trigger.event.is_pull_request()
        && let Some(number) = p.pr_number
    {
        trigger.commit.changed_files = pr_changed_files(ctx, &row, &forge, plugin, number).await;
    }
    tracing::info!(
        repo = row.repo.full_name,
        plugin,
        event = %trigger.event,
        "hook parsed by plugin"
    );
    let created = create::from_forge_at(&ctx.ci, &row, &forge, trigger).await?;
    Ok(match created {
        Created::NoConfig => Response::empty(StatusCode::NO_CONTENT),
        other => created_response(other),
    })
}

/// A plugin's event (the WIT enum) as the pipeline's.
fn webhook_event(event: woodlark_plugin_host::Event) -> WebhookEvent {
    use woodlark_plugin_host::Event;
    match event {
        Event::Push => WebhookEvent::Push,
        Event::PullRequest => WebhookEvent::PullRequest,
        Event::PullRequestClosed => WebhookEvent::PullRequestClosed,
        Event::PullRequestMetadata => WebhookEvent::PullRequestMetadata,
        Event::Tag => WebhookEvent::Tag,
        Event::Release => WebhookEvent::Release,
        Event::Deployment => WebhookEvent::Deployment,
    }
}

/// The files pull request `number` changes, asked of the forge because the hook did not list
/// them. A failure costs only `when: path` precision, never the hook: it is logged and the
/// list stays empty (as upstream does).
async fn pr_changed_files(
    ctx: &Ctx,
    row: &RepoRow,
    forge: &ForgeRow,
    plugin: &str,
    number: u64,
) -> Vec<String> {
    let asked = match forge::driver_from(&ctx.ci, forge) {
        Ok(driver) => driver.pr_changed_files(&row.repo, number).await,
        Err(e) => Err(e),
    };
    asked.unwrap_or_else(|err| {
        tracing::warn!(
            repo = row.repo.full_name,
            plugin,
            pr = number,
            error = %err,
            "changed files of the pull request not fetched; going on without them"
        );
        Vec::new()
    })
}

/// The pipeline trigger of one pushed ref (a branch push or a tag), with the commit's details
/// and changed files asked of the forge.
async fn push_trigger(
    driver: &dyn ForgeDriver,
    repo: &Repo,
    update: &RefUpdate,
) -> Result<Trigger, ForgeError> {
    let (commit, changed) = driver.pushed(repo, &update.old, &update.new).await?;
    let (event, branch) = match update.git_ref.strip_prefix("refs/tags/") {
        Some(_) => (WebhookEvent::Tag, repo.default_branch.clone()),
        None => (
            WebhookEvent::Push,
            update
                .git_ref
                .strip_prefix("refs/heads/")
                .unwrap_or(&update.git_ref)
                .to_string(),
        ),
    };
    Ok(Trigger {
        event,
        commit: Commit {
            branch,
            git_ref: update.git_ref.clone(),
            sender: commit.author.clone(),
            forge_url: repo.forge_url.clone(),
            changed_files: changed,
            ..commit
        },
        ..Trigger::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_post_receive_lines() {
        let a = "a".repeat(40);
        let z = "0".repeat(40);
        let body = format!("{z} {a} refs/heads/main\n{a} {z} refs/tags/v1\n");
        let updates = parse_ref_updates(body.as_bytes()).unwrap();
        assert_eq!(updates.len(), 2);
        assert!(!updates[0].is_delete());
        assert!(updates[1].is_delete());
        assert!(parse_ref_updates(b"").is_err());
        assert!(parse_ref_updates(b"x y z").is_err());
        assert!(parse_ref_updates(format!("{a} {a} main").as_bytes()).is_err());
    }
}
