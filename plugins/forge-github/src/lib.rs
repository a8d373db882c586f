//! GitHub forge adapter.
//!
//! Recognises requests by `X-GitHub-Event` (and not Gitea/Forgejo/Gogs, which send that header
//! too for compatibility). Payloads arrive as JSON or form-encoded (`payload=` field).
//!
//! | `X-GitHub-Event` | action                                  | Woodlark event            |
//! |------------------|-----------------------------------------|---------------------------|
//! | `push`           | to `refs/heads/*`                       | `push`                    |
//! | `push`           | to `refs/tags/*`                        | `tag`                     |
//! | `pull_request`   | opened, reopened, synchronize           | `pull-request`            |
//! | `pull_request`   | closed (merged or not)                  | `pull-request-closed`     |
//! | `pull_request`   | labeled, edited, milestoned, locked, …  | `pull-request-metadata`   |
//! | `release`        | released                                | `release`                 |
//! | `deployment`     | (any)                                   | `deployment`              |
//!
//! A deployment's `ref` becomes a full ref: `refs/heads/<ref>` for a bare name, the default
//! branch when it is (a prefix of) the deployed commit, as Woodpecker decides.
//!
//! Everything else (ping, branch deletion, other actions) is ignored with a reason.
//! Signature: `X-Hub-Signature-256` (HMAC-SHA256) when the instance config names a
//! `hook-secret`. Config keys: `hook-secret`, `api-url` (default `https://api.github.com`).
//!
//! API: repository info, files and folders at a commit, branches and their heads, commit
//! statuses, the files a pull request changes, and webhooks (`create-hook` replaces a hook with the same URL; the hook's secret is
//! the forge's webhook secret, checked again by `parse-hook`).

use woodlark_plugin_sdk::forge::*;
use woodlark_plugin_sdk::json::{rfc3339_to_unix, str_at};
use woodlark_plugin_sdk::serde_json::json;
use woodlark_plugin_sdk::{config, headers, http};

struct GitHub;

woodlark_plugin_sdk::forge_adapter!(GitHub);

impl ForgeAdapter for GitHub {
    fn recognize(headers: &[Header]) -> bool {
        header(headers, "x-github-event").is_some()
            && ["x-gitea-event", "x-forgejo-event", "x-gogs-event"]
                .iter()
                .all(|h| header(headers, h).is_none())
    }

    fn parse_hook(req: HookRequest) -> Result<Outcome, PluginError> {
        let event = required_header(&req.headers, "X-GitHub-Event")?;
        let verified = verify_hmac_sha256(&req, "x-hub-signature-256")?;
        Ok(match github_hooks::parse_payload(event, &req)? {
            Outcome::Build(mut b) => {
                b.signature_verified = verified;
                Outcome::Build(b)
            }
            other => other,
        })
    }

    fn repo_info(ctx: ApiContext, full_name: String) -> Result<Repo, PluginError> {
        let url = format!("{}/repos/{}", api_url(&ctx), full_name);
        let v = ApiClient::bearer(&ctx).get_found(&url, || no_repo(&full_name))?;
        Ok(github_hooks::repo_of(&v))
    }

    fn file_at(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        path: String,
    ) -> Result<Option<Vec<u8>>, PluginError> {
        let url = contents_url(&api_url(&ctx), &full_name, &path, &commit);
        let raw = vec![headers::text("accept", "application/vnd.github.raw")];
        ApiClient::bearer(&ctx).raw_file(&url, raw, "GitHub contents API")
    }

    fn dir_at(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        path: String,
    ) -> Result<Vec<String>, PluginError> {
        let url = contents_url(&api_url(&ctx), &full_name, &path, &commit);
        ApiClient::bearer(&ctx).contents_files(&url)
    }

    fn branches(ctx: ApiContext, full_name: String) -> Result<Vec<String>, PluginError> {
        let url = format!(
            "{}/repos/{}/branches?per_page=100",
            api_url(&ctx),
            full_name
        );
        ApiClient::bearer(&ctx).names(&url, "", "/name")
    }

    fn post_status(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        status: CommitStatus,
    ) -> Result<(), PluginError> {
        let url = format!("{}/repos/{}/statuses/{}", api_url(&ctx), full_name, commit);
        ApiClient::bearer(&ctx).post_status(&url, &StatusFormat::GITHUB, status)
    }

    fn branch_head(
        ctx: ApiContext,
        full_name: String,
        branch: String,
    ) -> Result<CommitInfo, PluginError> {
        let url = format!(
            "{}/repos/{}/branches/{}",
            api_url(&ctx),
            full_name,
            http::encode(&branch)
        );
        let v = ApiClient::bearer(&ctx).get_found(&url, || no_branch(&full_name, &branch))?;
        Ok(CommitInfo {
            sha: str_at(&v, "/commit/sha"),
            message: str_at(&v, "/commit/commit/message"),
            author: str_at(&v, "/commit/commit/author/name"),
            author_email: str_at(&v, "/commit/commit/author/email"),
            author_avatar: str_at(&v, "/commit/author/avatar_url"),
            timestamp: rfc3339_to_unix(&str_at(&v, "/commit/commit/author/date")),
            forge_url: str_at(&v, "/commit/html_url"),
        })
    }

    fn create_hook(
        ctx: ApiContext,
        full_name: String,
        url: String,
        secret: String,
    ) -> Result<(), PluginError> {
        let body = json!({
            "name": "web",
            "active": true,
            "events": ["push", "pull_request", "create", "delete", "release", "deployment"],
            "config": {"url": url, "content_type": "json", "secret": secret, "insecure_ssl": "0"},
        });
        hooks(&ctx, &full_name).replace(&url, Some(&body))
    }

    fn delete_hook(ctx: ApiContext, full_name: String, url: String) -> Result<(), PluginError> {
        hooks(&ctx, &full_name).replace(&url, None)
    }

    /// `GET /repos/{o}/{r}/pulls/{n}/files`, 100 a page; GitHub lists at most 3000 files.
    fn changed_files(
        ctx: ApiContext,
        full_name: String,
        pr_number: u64,
    ) -> Result<Vec<String>, PluginError> {
        FileListApi::new(
            "Bearer",
            "pull request",
            30,
            "",
            ["/filename", "/previous_filename"],
        )
        .fetch(
            &ctx,
            &full_name,
            pr_number,
            |page| {
                format!(
                    "{}/repos/{full_name}/pulls/{pr_number}/files?per_page=100&page={page}",
                    api_url(&ctx)
                )
            },
            |_, items| items == 100,
        )
    }
}

/// The repository's webhooks.
fn hooks(ctx: &ApiContext, full_name: &str) -> HookApi {
    let list_url = format!("{}/repos/{}/hooks", api_url(ctx), full_name);
    HookApi::new(list_url, auth_header(ctx, "Bearer"))
}

/// The REST API root: `api-url` from config, else derived from the forge URL
/// (`https://github.com` → `https://api.github.com`, GHES → `<url>/api/v3`).
fn api_url(ctx: &ApiContext) -> String {
    if let Some(u) = config::get("api-url") {
        return u.trim_end_matches('/').to_string();
    }
    let base = ctx.forge_url.trim_end_matches('/');
    if base.is_empty() || base == "https://github.com" {
        "https://api.github.com".to_string()
    } else {
        format!("{base}/api/v3")
    }
}
