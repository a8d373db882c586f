//! Bitbucket Data Center (formerly Bitbucket Server) forge adapter.
//!
//! Recognises `X-Event-Key` together with `X-Request-Id` (Bitbucket Cloud sends
//! `X-Hook-UUID` / `X-Request-UUID` instead; `forge-bitbucket` serves it).
//!
//! | `X-Event-Key`                                   | Woodlark event        | reason             |
//! |-------------------------------------------------|-----------------------|--------------------|
//! | `repo:refs_changed`, branch updated or added    | `push`                |                    |
//! | `repo:refs_changed`, tag added                  | `tag`                 |                    |
//! | `pr:opened`, `pr:from_ref_updated`, `pr:modified` | `pull-request`      | `opened`, ...      |
//! | `pr:merged`, `pr:declined`, `pr:deleted`        | `pull-request-closed` | `merged`, ...      |
//!
//! Only the first change of a push counts (as Woodpecker does); a deleted branch or tag is
//! ignored, and so is every other event (`diagnostics:ping`, comments, reviews).
//! Signature: `X-Hub-Signature` (`sha256=<hex>` HMAC of the body) when the instance config
//! names a `hook-secret`.
//!
//! Links (commit pages, avatars) are built on the server's web root: config `url`, else the
//! one the payload's repository links point at.
//!
//! API: REST 1.0 at `<forge-url>/rest/api/1.0` with `Authorization: Bearer <token>` (an HTTP
//! access token); repositories are named `PROJECT/repo-slug`.
//!
//! Sign-in and the user's view (contract 0.2.0), as Woodpecker's Data Center forge does it
//! (OAuth 2 incoming application links, Bitbucket DC 7.21+/8.x):
//!
//! | function         | request                                                                  |
//! |------------------|--------------------------------------------------------------------------|
//! | `authorize-url`  | `<oauth host or url>/rest/oauth2/latest/authorize`, scopes [`SCOPES`]    |
//! | `exchange-code`  | POST `<url>/rest/oauth2/latest/token`                                    |
//! | `refresh-token`  | the same, `grant_type=refresh_token`                                     |
//! | `current-user`   | GET `/plugins/servlet/applinks/whoami` (the slug), `/users/{slug}`       |
//! | `user-repos`     | GET `/repos?permission=REPO_WRITE&start&limit`; admin: `REPO_ADMIN`      |
//! | `repo-perm`      | visible: pull; listed for `REPO_WRITE`: push; webhooks readable: admin   |
//! | `user-orgs`      | GET `/projects?start&limit` (keys)                                       |
//! | `org-membership` | admin: the project's user permissions readable; member: a writable repo  |
//! | `pull-requests`  | GET `/projects/{k}/repos/{s}/pull-requests?state=OPEN&start&limit`       |
//! | `netrc`          | the machine account of config `git-username` / `git-password` (as       |
//! |                  | upstream), else `x-token-auth` and the user's token                      |

use woodlark_plugin_sdk::forge::oauth;
use woodlark_plugin_sdk::forge::*;
use woodlark_plugin_sdk::json::{array_at, first_str, rfc3339_to_unix, str_at, u64_at};
use woodlark_plugin_sdk::serde_json::{Value, json};
use woodlark_plugin_sdk::{config, http};

const ZERO_SHA: &str = "0000000000000000000000000000000000000000";

/// The events `create-hook` subscribes to.
const EVENTS: [&str; 7] = [
    "repo:refs_changed",
    "pr:opened",
    "pr:from_ref_updated",
    "pr:modified",
    "pr:merged",
    "pr:declined",
    "pr:deleted",
];

/// Build statuses (`rest/build-status/1.0`): Cloud's, without a "stopped" state.
const STATUS: StatusFormat = StatusFormat {
    killed: "FAILED",
    ..StatusFormat::BITBUCKET
};

/// A `browse` folder listing: `children.values` whose files are `FILE`s, each named relative
/// to the folder.
const BROWSE: Listing = Listing {
    items: "/children/values",
    file_type: "FILE",
    path: "/path/toString",
};

struct BitbucketDc;

woodlark_plugin_sdk::forge_adapter!(BitbucketDc);

impl ForgeAdapter for BitbucketDc {
    const OAUTH: Option<oauth::Endpoints> = Some(oauth::Endpoints {
        authorize: "/rest/oauth2/latest/authorize",
        token: "/rest/oauth2/latest/token",
        scope: SCOPES,
        basic_auth: false,
        default_root: "",
    });

    fn recognize(headers: &[Header]) -> bool {
        header(headers, "x-event-key").is_some() && header(headers, "x-request-id").is_some()
    }

    fn parse_hook(req: HookRequest) -> Result<Outcome, PluginError> {
        let key = required_header(&req.headers, "X-Event-Key")?;
        let verified = verify_hmac_sha256(&req, "x-hub-signature")?;
        let v = json_payload(&req)?;
        let (parsed, repo) = match key {
            "repo:refs_changed" => (push(&v), &v["repository"]),
            k if EVENTS.contains(&k) => (
                pull_request(k, &v),
                &v["pullRequest"]["toRef"]["repository"],
            ),
            "diagnostics:ping" => (Err("ping event".to_string()), &Value::Null),
            other => (Err(format!("event {other:?} is not handled")), &Value::Null),
        };
        Ok(match parsed {
            Ok(p) => build(repo_of(repo), p, verified),
            Err(reason) => ignored(reason),
        })
    }

    fn repo_info(ctx: ApiContext, full_name: String) -> Result<Repo, PluginError> {
        let base = repo_api(&ctx, &full_name)?;
        let client = ApiClient::bearer(&ctx);
        let v = client.get_found(&base, || no_repo(&full_name))?;
        let mut repo = repo_of(&v);
        // The default branch is not part of the repository resource. An empty repository
        // has none (404), which is not an error.
        if let Some(b) = client.get(&format!("{base}/default-branch"))? {
            repo.default_branch = str_at(&b, "/displayId");
        }
        Ok(repo)
    }

    fn file_at(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        path: String,
    ) -> Result<Option<Vec<u8>>, PluginError> {
        let url = format!(
            "{}/raw/{}?at={}",
            repo_api(&ctx, &full_name)?,
            http::encode_path(&path),
            http::encode(&commit)
        );
        ApiClient::bearer(&ctx).raw_file(&url, Vec::new(), "Bitbucket raw file API")
    }

    fn dir_at(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        path: String,
    ) -> Result<Vec<String>, PluginError> {
        let dir = path.trim_matches('/');
        let url = format!(
            "{}/browse/{}?at={}&limit=1000",
            repo_api(&ctx, &full_name)?,
            http::encode_path(dir),
            http::encode(&commit)
        );
        let names = ApiClient::bearer(&ctx).files(&url, &BROWSE)?;
        // Entries are named relative to the folder.
        Ok(names.iter().map(|name| format!("{dir}/{name}")).collect())
    }

    fn branches(ctx: ApiContext, full_name: String) -> Result<Vec<String>, PluginError> {
        let base = repo_api(&ctx, &full_name)?;
        let client = ApiClient::bearer(&ctx);
        paged(20, |page| {
            let url = format!("{base}/branches?limit=500&start={}", (page - 1) * 500);
            let v = client.get_or_null(&url)?;
            let names = array_at(&v, "/values")
                .iter()
                .map(|b| str_at(b, "/displayId"))
                .collect();
            Ok((names, more_pages(&v)))
        })
    }

    fn post_status(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        status: CommitStatus,
    ) -> Result<(), PluginError> {
        let _ = split_name(&full_name)?;
        let url = format!(
            "{}/rest/build-status/1.0/commits/{}",
            web_root(&ctx),
            http::encode(&commit)
        );
        let body = build_status(status);
        http::send_json("POST", &url, auth_header(&ctx, "Bearer").as_deref(), &body).map(|_| ())
    }

    /// The newest commit reachable from `refs/heads/<branch>`.
    fn branch_head(
        ctx: ApiContext,
        full_name: String,
        branch: String,
    ) -> Result<CommitInfo, PluginError> {
        let base = repo_api(&ctx, &full_name)?;
        let url = format!(
            "{base}/commits?until={}&limit=1",
            http::encode(&format!("refs/heads/{branch}"))
        );
        let v = ApiClient::bearer(&ctx).get_found(&url, || no_branch(&full_name, &branch))?;
        let c = array_at(&v, "/values")
            .first()
            .ok_or_else(|| no_branch(&full_name, &branch))?;
        let (key, slug) = split_name(&full_name)?;
        let sha = str_at(c, "/id");
        Ok(CommitInfo {
            forge_url: commit_url(&web_root(&ctx), key, slug, &sha),
            sha,
            message: str_at(c, "/message"),
            author: str_at(c, "/author/name"),
            author_email: str_at(c, "/author/emailAddress"),
            author_avatar: String::new(),
            timestamp: millis_to_unix(c, "/authorTimestamp"),
        })
    }

    /// Bitbucket signs deliveries with `configuration.secret` (`X-Hub-Signature`).
    fn create_hook(
        ctx: ApiContext,
        full_name: String,
        url: String,
        secret: String,
    ) -> Result<(), PluginError> {
        hooks(&ctx, &full_name)?.replace(&url, Some(&hook(&url, &secret)))
    }

    fn delete_hook(ctx: ApiContext, full_name: String, url: String) -> Result<(), PluginError> {
        hooks(&ctx, &full_name)?.replace(&url, None)
    }

    /// `GET .../pull-requests/{id}/changes` (path and, for moves, source path).
    fn changed_files(
        ctx: ApiContext,
        full_name: String,
        pr_number: u64,
    ) -> Result<Vec<String>, PluginError> {
        let base = repo_api(&ctx, &full_name)?;
        FileListApi::new(
            "Bearer",
            "pull request",
            20,
            "/values",
            ["/path/toString", "/srcPath/toString"],
        )
        .fetch(
            &ctx,
            &full_name,
            pr_number,
            |page| {
                format!(
                    "{base}/pull-requests/{pr_number}/changes?limit=500&start={}",
                    (page - 1) * 500
                )
            },
            |v, _| more_pages(v),
        )
    }
    /// The scopes are the configuration's ([`scopes`]), the endpoints the trait's.
    fn authorize_url(client: OauthClient, state: String) -> Result<String, PluginError> {
        let oauth = Self::OAUTH.ok_or_else(|| unsupported("authorize-url"))?;
        Ok(oauth.authorize_url(&client, &scopes(), &state))
    }

    /// As upstream: the slug from `whoami` (plain text; `@` read as `_`), then the user.
    fn current_user(ctx: ApiContext) -> Result<ForgeUser, PluginError> {
        let root = web_root(&ctx);
        let url = format!("{root}/plugins/servlet/applinks/whoami");
        let resp = http::send(&http::request("GET", &url, auth_headers(&ctx)))?;
        let slug = String::from_utf8_lossy(&resp.body).trim().replace('@', "_");
        if resp.status != 200 || slug.is_empty() {
            return Err(denied(format!(
                "Bitbucket: no user for this token (HTTP {})",
                resp.status
            )));
        }
        let url = format!("{root}/rest/api/1.0/users/{}", http::encode(&slug));
        let user = ApiClient::bearer(&ctx)
            .get_found(&url, || denied(format!("Bitbucket: no user {slug}")))?;
        let slug = first_str(&user, &["/slug", "/name"]);
        Ok(ForgeUser {
            remote_id: str_at(&user, "/id"),
            avatar_url: format!("{root}/users/{}/avatar.png", http::encode(&slug)),
            login: slug,
            email: str_at(&user, "/emailAddress"),
        })
    }

    fn user_repos(
        ctx: ApiContext,
        page: u32,
        per_page: u32,
    ) -> Result<Vec<RepoWithPerm>, PluginError> {
        let client = ApiClient::bearer(&ctx);
        let list = client.get_or_null(&format!(
            "{}/rest/api/1.0/repos?permission=REPO_WRITE&{}",
            web_root(&ctx),
            paging(page, per_page)
        ))?;
        let repos = array_at(&list, "/values");
        if repos.is_empty() {
            return Ok(Vec::new());
        }
        let admin_ids = admin_repo_ids(&ctx, &client)?;
        Ok(repos
            .iter()
            .map(|r| RepoWithPerm {
                repo: repo_of(r),
                perm: Perm {
                    pull: true,
                    push: true,
                    admin: admin_ids.contains(&str_at(r, "/id")),
                },
            })
            .collect())
    }

    fn repo_perm(ctx: ApiContext, full_name: String) -> Result<Perm, PluginError> {
        let base = repo_api(&ctx, &full_name)?;
        let client = ApiClient::bearer(&ctx);
        let Some(repo) = client.get_for_access(&base)? else {
            return Ok(no_perm());
        };
        let (key, slug) = split_name(&full_name)?;
        let writable = client.get_or_null(&format!(
            "{}/rest/api/1.0/repos?projectkey={}&name={}&permission=REPO_WRITE&limit=100",
            web_root(&ctx),
            http::encode(key),
            http::encode(slug)
        ))?;
        let id = str_at(&repo, "/id");
        let push = array_at(&writable, "/values")
            .iter()
            .any(|r| str_at(r, "/id") == id);
        // As upstream: whoever may read the webhooks administers the repository.
        let admin = push && status_of(&ctx, &format!("{base}/webhooks?limit=1"))? == 200;
        Ok(Perm {
            pull: true,
            push,
            admin,
        })
    }

    fn user_orgs(ctx: ApiContext, page: u32, per_page: u32) -> Result<Vec<Team>, PluginError> {
        let root = web_root(&ctx);
        let list = ApiClient::bearer(&ctx).get_or_null(&format!(
            "{root}/rest/api/1.0/projects?{}",
            paging(page, per_page)
        ))?;
        Ok(array_at(&list, "/values")
            .iter()
            .map(|p| {
                let key = str_at(p, "/key");
                Team {
                    avatar_url: format!(
                        "{root}/rest/api/1.0/projects/{}/avatar.png",
                        http::encode(&key)
                    ),
                    login: key,
                }
            })
            .collect())
    }

    /// As upstream (the caller's own membership; `login` is the caller): a project admin may
    /// read the project's user permissions; a member can write to one of its repositories.
    fn org_membership(
        ctx: ApiContext,
        org: String,
        _login: String,
    ) -> Result<OrgPerm, PluginError> {
        let root = web_root(&ctx);
        let key = http::encode(&org);
        let perms_url = format!("{root}/rest/api/1.0/projects/{key}/permissions/users?limit=1");
        if status_of(&ctx, &perms_url)? == 200 {
            return Ok(OrgPerm {
                member: true,
                admin: true,
            });
        }
        let writable = ApiClient::bearer(&ctx).get_or_null(&format!(
            "{root}/rest/api/1.0/repos?projectkey={key}&permission=REPO_WRITE&archived=ACTIVE&limit=1"
        ))?;
        Ok(OrgPerm {
            member: !array_at(&writable, "/values").is_empty(),
            admin: false,
        })
    }

    fn pull_requests(
        ctx: ApiContext,
        full_name: String,
        page: u32,
        per_page: u32,
    ) -> Result<Vec<PullRequestInfo>, PluginError> {
        let url = format!(
            "{}/pull-requests?state=OPEN&{}",
            repo_api(&ctx, &full_name)?,
            paging(page, per_page)
        );
        let list = ApiClient::bearer(&ctx).get_found(&url, || no_repo(&full_name))?;
        Ok(array_at(&list, "/values")
            .iter()
            .filter_map(|p| {
                Some(PullRequestInfo {
                    number: u64_at(p, "/id")?,
                    title: str_at(p, "/title"),
                })
            })
            .collect())
    }

    fn netrc(ctx: ApiContext, clone_url: String) -> Result<NetrcInfo, PluginError> {
        let machine = (
            config::get("git-username").filter(|u| !u.is_empty()),
            config::get("git-password").filter(|p| !p.is_empty()),
        );
        let (login, password) = match machine {
            (Some(user), Some(password)) => (user, password),
            _ if ctx.token.is_empty() => (String::new(), String::new()),
            _ => ("x-token-auth".to_string(), ctx.token),
        };
        oauth::netrc_for(&clone_url, login, password)
    }
}

/// The OAuth scopes asked for at sign-in, as upstream: repositories read, write and admin,
/// plus `PROJECT_ADMIN` with config `oauth-project-admin-scope = "true"`.
const SCOPES: &str = "REPO_READ REPO_WRITE REPO_ADMIN";

/// The largest page asked for.
const MAX_LIMIT: u32 = 100;

/// A bound on the `REPO_ADMIN` pages read to mark admin repositories.
const MAX_ADMIN_PAGES: u32 = 20;

fn scopes() -> String {
    match config::get("oauth-project-admin-scope").as_deref() {
        Some("true") => format!("{SCOPES} PROJECT_ADMIN"),
        _ => SCOPES.to_string(),
    }
}

/// `start=…&limit=…` for a page (from 1) of `per_page` (0: 100, at most 100).
fn paging(page: u32, per_page: u32) -> String {
    let limit = if per_page == 0 {
        MAX_LIMIT
    } else {
        per_page.min(MAX_LIMIT)
    };
    format!("start={}&limit={limit}", (page.max(1) - 1) * limit)
}

fn auth_headers(ctx: &ApiContext) -> Vec<Header> {
    auth_header(ctx, "Bearer")
        .map(|a| vec![woodlark_plugin_sdk::headers::text("authorization", &a)])
        .unwrap_or_default()
}

/// The status of a GET, for the probes whose answer is only "allowed or not".
fn status_of(ctx: &ApiContext, url: &str) -> Result<u16, PluginError> {
    let mut hs = auth_headers(ctx);
    hs.push(woodlark_plugin_sdk::headers::text(
        "accept",
        "application/json",
    ));
    Ok(http::send(&http::request("GET", url, hs))?.status)
}

/// The ids of the repositories the user administers (`REPO_ADMIN`), every page.
fn admin_repo_ids(ctx: &ApiContext, client: &ApiClient) -> Result<Vec<String>, PluginError> {
    let mut ids = Vec::new();
    let mut start = 0;
    for _ in 0..MAX_ADMIN_PAGES {
        let v = client.get_or_null(&format!(
            "{}/rest/api/1.0/repos?permission=REPO_ADMIN&start={start}&limit={MAX_LIMIT}",
            web_root(ctx)
        ))?;
        ids.extend(array_at(&v, "/values").iter().map(|r| str_at(r, "/id")));
        match u64_at(&v, "/nextPageStart") {
            Some(next) if more_pages(&v) => start = next,
            _ => break,
        }
    }
    Ok(ids)
}

fn no_perm() -> Perm {
    Perm {
        pull: false,
        push: false,
        admin: false,
    }
}

/// `PROJECT/slug` → (`PROJECT`, `slug`).
fn split_name(full_name: &str) -> Result<(&str, &str), PluginError> {
    full_name
        .split_once('/')
        .filter(|(k, s)| !k.is_empty() && !s.is_empty() && !s.contains('/'))
        .ok_or_else(|| invalid(format!("{full_name:?} is not PROJECT/repository")))
}

/// The server's web root from the API context.
fn web_root(ctx: &ApiContext) -> String {
    ctx.forge_url.trim_end_matches('/').to_string()
}

/// `<root>/rest/api/1.0/projects/{key}/repos/{slug}`.
fn repo_api(ctx: &ApiContext, full_name: &str) -> Result<String, PluginError> {
    let (key, slug) = split_name(full_name)?;
    Ok(format!(
        "{}/rest/api/1.0/projects/{}/repos/{}",
        web_root(ctx),
        http::encode(key),
        http::encode(slug)
    ))
}

/// The repository's webhooks (a paged `{"values": [{"id", "url"}]}` list).
fn hooks(ctx: &ApiContext, full_name: &str) -> Result<HookApi, PluginError> {
    let list_url = format!("{}/webhooks", repo_api(ctx, full_name)?);
    Ok(HookApi::new(list_url, auth_header(ctx, "Bearer"))
        .items_at("/values")
        .url_at("/url"))
}

/// A build status as upstream posts it: the state, key (and `parent`, the same), name,
/// link and description, the ref built, when the pipeline started (milliseconds) and, once
/// it finished, how long it took.
fn build_status(status: CommitStatus) -> Value {
    let (branch, started, finished) = (status.branch.clone(), status.started, status.finished);
    let mut body = STATUS.body(status);
    body["parent"] = body["key"].clone();
    if !branch.is_empty() {
        body["ref"] = format!("refs/heads/{branch}").into();
    }
    if started > 0 {
        body["dateAdded"] = (started * 1000).into();
        if finished >= started {
            body["duration"] = ((finished - started) * 1000).into();
        }
    }
    body
}

/// The webhook `create-hook` registers: every event in [`EVENTS`], signed with `secret`.
fn hook(url: &str, secret: &str) -> Value {
    json!({
        "name": "woodlark",
        "url": url,
        "active": true,
        "events": EVENTS,
        "configuration": {"secret": secret},
    })
}

/// Whether a REST 1.0 page says another one follows.
fn more_pages(v: &Value) -> bool {
    v.pointer("/isLastPage").and_then(Value::as_bool) == Some(false)
}

/// Milliseconds since the epoch (Bitbucket's timestamps) → seconds; 0 when absent.
fn millis_to_unix(v: &Value, ptr: &str) -> i64 {
    v.pointer(ptr)
        .and_then(Value::as_i64)
        .map_or(0, |ms| ms / 1000)
}

fn commit_url(root: &str, key: &str, slug: &str, sha: &str) -> String {
    format!("{root}/projects/{key}/repos/{slug}/commits/{sha}")
}

/// The web root links are built on: config `url`, else what the repository's own links
/// point at (`<root>/projects/...` or `<root>/scm/...`).
fn link_root(repo: &Value) -> String {
    if let Some(u) = config::get("url").filter(|u| !u.is_empty()) {
        return u.trim_end_matches('/').to_string();
    }
    let own = str_at(repo, "/links/self/0/href");
    if let Some((root, _)) = own.split_once("/projects/") {
        return root.to_string();
    }
    let clone = clone_link(repo, "http");
    clone
        .split_once("/scm/")
        .map(|(root, _)| root.to_string())
        .unwrap_or_default()
}

/// The clone link named `name` (`http` or `ssh`), without credentials.
fn clone_link(repo: &Value, name: &str) -> String {
    let href = array_at(repo, "/links/clone")
        .iter()
        .find(|l| l["name"] == name)
        .map(|l| str_at(l, "/href"))
        .unwrap_or_default();
    // The HTTP link carries the viewing user's name; the SSH one must keep `git@`.
    if name == "http" {
        strip_userinfo(&href)
    } else {
        href
    }
}

/// `https://user@host/x` → `https://host/x`.
fn strip_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://{host}{path}"),
        None => url.to_string(),
    }
}

/// A REST 1.0 / webhook `repository` object.
fn repo_of(r: &Value) -> Repo {
    let key = str_at(r, "/project/key");
    let slug = str_at(r, "/slug");
    let mut repo = repo();
    repo.forge_remote_id = str_at(r, "/id");
    repo.owner = key.clone();
    repo.name = slug.clone();
    repo.full_name = format!("{key}/{slug}");
    repo.forge_url = str_at(r, "/links/self/0/href");
    repo.clone_url = clone_link(r, "http");
    repo.clone_url_ssh = clone_link(r, "ssh");
    // Cloning always needs credentials here (Woodpecker marks these repositories private).
    repo.private = true;
    repo
}

/// The actor's name as Woodpecker shows it: at most 40 characters.
fn author_label(name: &str) -> String {
    if name.chars().count() > 40 {
        format!("{}...", name.chars().take(37).collect::<String>())
    } else {
        name.to_string()
    }
}

/// Author, e-mail, avatar, sender and time: the actor and the event's date.
fn credit(p: &mut Pipeline, v: &Value, root: &str) {
    let actor = &v["actor"];
    p.author = author_label(&str_at(actor, "/name"));
    p.author_email = str_at(actor, "/emailAddress");
    let slug = first_str(actor, &["/slug", "/name"]);
    if !slug.is_empty() && !root.is_empty() {
        p.author_avatar = format!("{root}/users/{slug}/avatar.png");
    }
    p.sender = str_at(actor, "/name");
    p.timestamp = rfc3339_to_unix(&str_at(v, "/date"));
}

fn push(v: &Value) -> Result<Pipeline, String> {
    let change = array_at(v, "/changes")
        .first()
        .ok_or_else(|| "push without changes".to_string())?;
    let git_ref = first_str(change, &["/refId", "/ref/id"]);
    let is_tag = git_ref.starts_with("refs/tags/");
    let to = str_at(change, "/toHash");
    if to.is_empty() || to == ZERO_SHA || str_at(change, "/type") == "DELETE" {
        return Err(if is_tag {
            "tag deleted"
        } else {
            "branch deleted"
        }
        .into());
    }
    let r = &v["repository"];
    let (root, key, slug) = (link_root(r), str_at(r, "/project/key"), str_at(r, "/slug"));
    let mut p = pipeline(if is_tag { Event::Tag } else { Event::Push });
    p.forge_url = if is_tag {
        format!(
            "{root}/projects/{key}/repos/{slug}/browse?at={}",
            http::encode(&git_ref)
        )
    } else {
        commit_url(&root, &key, &slug, &to)
    };
    p.commit = to;
    if !is_tag {
        p.branch = first_str(change, &["/ref/displayId"]);
        if p.branch.is_empty() {
            p.branch = short_ref(&git_ref).to_string();
        }
    }
    p.git_ref = git_ref;
    credit(&mut p, v, &root);
    Ok(p)
}

fn pull_request(key: &str, v: &Value) -> Result<Pipeline, String> {
    let pr = &v["pullRequest"];
    let event = match key {
        "pr:merged" | "pr:declined" | "pr:deleted" => Event::PullRequestClosed,
        _ => Event::PullRequest,
    };
    let id = u64_at(pr, "/id").ok_or_else(|| "pull request without an id".to_string())?;
    let (from, to) = (&pr["fromRef"], &pr["toRef"]);
    let src_repo = &from["repository"];
    let root = link_root(&to["repository"]);
    let mut p = pipeline(event);
    p.event_reason = vec![key.trim_start_matches("pr:").to_string()];
    p.commit = str_at(from, "/latestCommit");
    p.git_ref = format!("refs/pull-requests/{id}/from");
    p.branch = str_at(from, "/displayId");
    p.refspec = format!("{}:{}", p.branch, str_at(to, "/displayId"));
    p.title = str_at(pr, "/title");
    p.message = p.title.clone();
    p.forge_url = commit_url(
        &root,
        &str_at(src_repo, "/project/key"),
        &str_at(src_repo, "/slug"),
        &p.commit,
    );
    p.pr_number = Some(id);
    p.from_fork = str_at(src_repo, "/id") != str_at(&to["repository"], "/id");
    credit(&mut p, v, &root);
    Ok(p)
}
