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
//! API: repository info (by GitHub's numeric id, `GET /repositories/{id}`, or by full name),
//! files and folders at a commit, branches and their heads, commit statuses, the files a
//! pull request changes, and webhooks (`create-hook` replaces a hook with the same URL; the
//! hook's secret is the forge's webhook secret, checked again by `parse-hook`).
//!
//! Sign-in and the user's view (contract 0.2.0), as Woodpecker's GitHub forge does it:
//!
//! | function         | request                                                          |
//! |------------------|------------------------------------------------------------------|
//! | `authorize-url`  | `<oauth host or forge>/login/oauth/authorize` (scopes [`SCOPES`]) |
//! | `exchange-code`  | POST `<forge>/login/oauth/access_token`                          |
//! | `refresh-token`  | the same, `grant_type=refresh_token` (GitHub App user tokens)    |
//! | `current-user`   | GET `/user` (+ `/user/emails` when `/user` shows no e-mail)      |
//! | `user-repos`     | GET `/user/repos?per_page&page` (archived ones left out)         |
//! | `repo-perm`      | GET `/repos/{o}/{n}` → `permissions`                             |
//! | `user-orgs`      | GET `/user/orgs?per_page&page`                                   |
//! | `org-membership` | GET `/orgs/{org}/memberships/{login}` (404: not a member)        |
//! | `pull-requests`  | GET `/repos/{o}/{n}/pulls?state=open&per_page&page`              |
//! | `netrc`          | no request: clone host, the token as login, `x-oauth-basic`      |

use woodlark_plugin_sdk::forge::oauth;
use woodlark_plugin_sdk::forge::*;
use woodlark_plugin_sdk::json::{bool_at, rfc3339_to_unix, str_at, u64_at};
use woodlark_plugin_sdk::serde_json::Value;
use woodlark_plugin_sdk::serde_json::json;
use woodlark_plugin_sdk::{config, headers, http};

struct GitHub;

woodlark_plugin_sdk::forge_adapter!(GitHub);

impl ForgeAdapter for GitHub {
    const OAUTH: Option<oauth::Endpoints> = Some(oauth::Endpoints {
        authorize: "/login/oauth/authorize",
        token: "/login/oauth/access_token",
        scope: SCOPES,
        basic_auth: false,
        default_root: "",
    });

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

    /// `full_name` is either `owner/name` or GitHub's numeric id for the repository (the
    /// `forge_remote_id` the server stores and the web UI activates by).
    fn repo_info(ctx: ApiContext, full_name: String) -> Result<Repo, PluginError> {
        let url = repo_url(&api_url(&ctx), &full_name);
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
    fn current_user(ctx: ApiContext) -> Result<ForgeUser, PluginError> {
        let api = api_url(&ctx);
        let client = ApiClient::bearer(&ctx);
        let user = client.get_found(&format!("{api}/user"), || {
            denied("GitHub: no user for this token")
        })?;
        let mut email = str_at(&user, "/email");
        if email.is_empty() {
            let emails = client.get_or_null(&format!("{api}/user/emails"))?;
            email = primary_email(woodlark_plugin_sdk::json::array_at(&emails, ""), &api);
        }
        Ok(ForgeUser {
            remote_id: str_at(&user, "/id"),
            login: str_at(&user, "/login"),
            email,
            avatar_url: str_at(&user, "/avatar_url"),
        })
    }

    fn user_repos(
        ctx: ApiContext,
        page: u32,
        per_page_: u32,
    ) -> Result<Vec<RepoWithPerm>, PluginError> {
        let url = format!(
            "{}/user/repos?per_page={}&page={}",
            api_url(&ctx),
            per_page(per_page_),
            page.max(1)
        );
        let list = ApiClient::bearer(&ctx).get_or_null(&url)?;
        Ok(woodlark_plugin_sdk::json::array_at(&list, "")
            .iter()
            .filter(|r| !bool_at(r, "/archived"))
            .map(|r| RepoWithPerm {
                repo: github_hooks::repo_of(r),
                perm: perm_of(r),
            })
            .collect())
    }

    fn repo_perm(ctx: ApiContext, full_name: String) -> Result<Perm, PluginError> {
        let url = format!("{}/repos/{}", api_url(&ctx), full_name);
        // 404 is what GitHub answers for a private repository the user cannot see.
        Ok(ApiClient::bearer(&ctx)
            .get_for_access(&url)?
            .map(|v| perm_of(&v))
            .unwrap_or(Perm {
                pull: false,
                push: false,
                admin: false,
            }))
    }

    fn user_orgs(ctx: ApiContext, page: u32, per_page_: u32) -> Result<Vec<Team>, PluginError> {
        let url = format!(
            "{}/user/orgs?per_page={}&page={}",
            api_url(&ctx),
            per_page(per_page_),
            page.max(1)
        );
        let list = ApiClient::bearer(&ctx).get_or_null(&url)?;
        Ok(woodlark_plugin_sdk::json::array_at(&list, "")
            .iter()
            .map(|o| Team {
                login: str_at(o, "/login"),
                avatar_url: str_at(o, "/avatar_url"),
            })
            .collect())
    }

    fn org_membership(ctx: ApiContext, org: String, login: String) -> Result<OrgPerm, PluginError> {
        let url = format!(
            "{}/orgs/{}/memberships/{}",
            api_url(&ctx),
            http::encode(&org),
            http::encode(&login)
        );
        Ok(match ApiClient::bearer(&ctx).get_for_access(&url)? {
            Some(m) => OrgPerm {
                member: str_at(&m, "/state") == "active",
                admin: str_at(&m, "/role") == "admin",
            },
            None => OrgPerm {
                member: false,
                admin: false,
            },
        })
    }

    fn pull_requests(
        ctx: ApiContext,
        full_name: String,
        page: u32,
        per_page_: u32,
    ) -> Result<Vec<PullRequestInfo>, PluginError> {
        let url = format!(
            "{}/repos/{}/pulls?state=open&per_page={}&page={}",
            api_url(&ctx),
            full_name,
            per_page(per_page_),
            page.max(1)
        );
        let list = ApiClient::bearer(&ctx).get_found(&url, || no_repo(&full_name))?;
        Ok(woodlark_plugin_sdk::json::array_at(&list, "")
            .iter()
            .filter_map(|p| {
                Some(PullRequestInfo {
                    number: u64_at(p, "/number")?,
                    title: str_at(p, "/title"),
                })
            })
            .collect())
    }

    /// As Woodpecker: the token as login, `x-oauth-basic` as password; anonymous (empty)
    /// without a token.
    fn netrc(ctx: ApiContext, clone_url: String) -> Result<NetrcInfo, PluginError> {
        let (login, password) = if ctx.token.is_empty() {
            (String::new(), String::new())
        } else {
            (ctx.token, "x-oauth-basic".to_string())
        };
        oauth::netrc_for(&clone_url, login, password)
    }
}

/// The OAuth scopes asked for at sign-in: private repositories and their hooks and
/// statuses, the user's e-mail addresses, org membership.
const SCOPES: &str = "repo repo:status user:email read:org";

/// The largest page GitHub serves.
const MAX_PER_PAGE: u32 = 100;

/// `per_page` as GitHub takes it: 1 to 100 (0: 100).
fn per_page(n: u32) -> u32 {
    if n == 0 {
        MAX_PER_PAGE
    } else {
        n.min(MAX_PER_PAGE)
    }
}

/// `permissions` of a GitHub repository object (absent: no access).
fn perm_of(v: &Value) -> Perm {
    Perm {
        pull: bool_at(v, "/permissions/pull"),
        push: bool_at(v, "/permissions/push"),
        admin: bool_at(v, "/permissions/admin"),
    }
}

/// The address GitHub's `/user/emails` marks primary and verified; on Enterprise (any API
/// but api.github.com) the first one when none is, as Woodpecker picks it.
fn primary_email(emails: &[Value], api: &str) -> String {
    let primary = emails
        .iter()
        .find(|e| bool_at(e, "/primary") && bool_at(e, "/verified"));
    match primary {
        Some(e) => str_at(e, "/email"),
        None if api != "https://api.github.com" => emails
            .first()
            .map(|e| str_at(e, "/email"))
            .unwrap_or_default(),
        None => String::new(),
    }
}

/// Where a repository is looked up: by its id (`GET /repositories/{id}`, as upstream's
/// GitHub forge does: an id stays the same when the repository is renamed or moved, a name
/// does not) when `repo` is all digits, else by full name (`GET /repos/{owner}/{name}`).
fn repo_url(api: &str, repo: &str) -> String {
    if !repo.is_empty() && repo.bytes().all(|b| b.is_ascii_digit()) {
        format!("{api}/repositories/{repo}")
    } else {
        format!("{api}/repos/{repo}")
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

#[cfg(test)]
mod tests {
    use super::repo_url;

    #[test]
    fn repositories_are_looked_up_by_id_when_given_one() {
        let api = "https://api.github.com";
        assert_eq!(repo_url(api, "42"), format!("{api}/repositories/42"));
        assert_eq!(repo_url(api, "octo/app"), format!("{api}/repos/octo/app"));
        // A name that merely starts with digits is a name.
        assert_eq!(repo_url(api, "42/app"), format!("{api}/repos/42/app"));
        assert_eq!(repo_url(api, ""), format!("{api}/repos/"));
    }
}
