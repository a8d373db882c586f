//! Gitea and Forgejo speak the same webhook payloads and the same `/api/v1`; this crate holds
//! that shared code, and the two adapters differ only in the headers they recognise.
//!
//! | event header   | action                                   | Woodlark event          |
//! |----------------|------------------------------------------|-------------------------|
//! | `push`         | to `refs/heads/*`                        | `push`                  |
//! | `create`       | `ref_type: tag`                          | `tag`                   |
//! | `pull_request` | opened, reopened, synchronized           | `pull-request`          |
//! | `pull_request` | closed (merged or not)                   | `pull-request-closed`   |
//! | `pull_request` | edited, label_updated, milestoned, …     | `pull-request-metadata` |
//! | `release`      | published                                | `release`               |
//!
//! Tag pushes also arrive as `push` to `refs/tags/*`; they are ignored because the `create`
//! event carries the tag (as Woodpecker does). Branch deletions are ignored.

use woodlark_plugin_sdk::forge::oauth;
use woodlark_plugin_sdk::forge::*;
use woodlark_plugin_sdk::http;
use woodlark_plugin_sdk::json::{array_at, bool_at, first_str, rfc3339_to_unix, str_at, u64_at};
use woodlark_plugin_sdk::serde_json::{Value, json};

const ZERO_SHA: &str = "0000000000000000000000000000000000000000";

/// Parses a Gitea-style hook. `event_headers` and `signature_headers` are tried in order
/// (Forgejo sends both its own and Gitea's names).
pub fn parse_hook(
    req: HookRequest,
    event_headers: &[&str],
    signature_headers: &[&str],
) -> Result<Outcome, PluginError> {
    let event = event_headers
        .iter()
        .find_map(|h| header(&req.headers, h))
        .ok_or_else(|| invalid(format!("missing {} header", event_headers[0])))?
        .to_string();
    let signature = signature_headers
        .iter()
        .find_map(|h| header(&req.headers, h));
    let verified = verify_hmac(Algorithm::HmacSha256, signature, &req.body)?;
    let v = json_payload(&req)?;
    let parsed = match event.as_str() {
        "push" => push(&v),
        "create" => create(&v),
        "pull_request" => pull_request(&v),
        "release" => release(&v),
        other => Err(format!("event {other:?} is not handled")),
    };
    Ok(match parsed {
        Ok(p) => build(repo_of(&v["repository"]), p, verified),
        Err(reason) => ignored(reason),
    })
}

fn user_login(u: &Value) -> String {
    first_str(u, &["/login", "/username"])
}

/// Gitea sometimes sends avatar URLs relative to the instance; make them absolute.
fn avatar(repo_url: &str, url: String) -> String {
    if url.starts_with('/') {
        // https://host/owner/name -> https://host
        let origin: String = repo_url
            .splitn(4, '/')
            .take(3)
            .collect::<Vec<_>>()
            .join("/");
        format!("{origin}{url}")
    } else {
        url
    }
}

pub fn repo_of(r: &Value) -> Repo {
    let mut repo = repo();
    repo.forge_remote_id = str_at(r, "/id");
    repo.owner = user_login(&r["owner"]);
    repo.name = str_at(r, "/name");
    repo.full_name = str_at(r, "/full_name");
    repo.forge_url = str_at(r, "/html_url");
    repo.avatar_url = avatar(
        &repo.forge_url,
        first_str(r, &["/avatar_url", "/owner/avatar_url"]),
    );
    repo.clone_url = str_at(r, "/clone_url");
    repo.clone_url_ssh = str_at(r, "/ssh_url");
    repo.default_branch = str_at(r, "/default_branch");
    // A repository of a limited or private owner is not public either.
    let owner_visibility = str_at(r, "/owner/visibility");
    repo.private =
        bool_at(r, "/private") || !(owner_visibility.is_empty() || owner_visibility == "public");
    repo
}

fn push(v: &Value) -> Result<Pipeline, String> {
    let git_ref = str_at(v, "/ref");
    if git_ref.starts_with("refs/tags/") {
        return Err("tag push (the create event carries tags)".into());
    }
    if str_at(v, "/after") == ZERO_SHA {
        return Err("branch deleted".into());
    }
    let commits = array_at(v, "/commits");
    // Message and link as Woodpecker takes them: the first listed commit (its own page when
    // it is the only one, else the compare view), or the head commit when none is listed.
    let (head, link) = match commits {
        [] => (&v["head_commit"], str_at(v, "/head_commit/url")),
        [only] => (only, str_at(only, "/url")),
        [first, ..] => (first, str_at(v, "/compare_url")),
    };
    let repo_url = str_at(v, "/repository/html_url");
    let mut p = pipeline(Event::Push);
    p.commit = str_at(v, "/after");
    p.git_ref = git_ref.clone();
    p.branch = short_ref(&git_ref).to_string();
    p.message = str_at(head, "/message");
    p.timestamp = rfc3339_to_unix(&str_at(head, "/timestamp"));
    p.author = first_str(v, &["/sender/login", "/sender/username", "/pusher/login"]);
    p.author_email = str_at(v, "/sender/email");
    p.author_avatar = avatar(&repo_url, str_at(v, "/sender/avatar_url"));
    p.sender = user_login(&v["sender"]);
    p.forge_url = link;
    let mut listed = commits.to_vec();
    if v["head_commit"].is_object() {
        listed.push(v["head_commit"].clone());
    }
    p.changed_files = changed_files(&listed);
    Ok(p)
}

fn create(v: &Value) -> Result<Pipeline, String> {
    let ref_type = str_at(v, "/ref_type");
    if ref_type != "tag" {
        return Err(format!(
            "create event for a {ref_type} (only tags trigger pipelines)"
        ));
    }
    let tag = str_at(v, "/ref");
    let tag = short_ref(&tag).to_string();
    let repo_url = str_at(v, "/repository/html_url");
    let mut p = pipeline(Event::Tag);
    p.commit = str_at(v, "/sha");
    p.git_ref = format!("refs/tags/{tag}");
    p.message = format!("created tag {tag}");
    p.author = user_login(&v["sender"]);
    p.author_email = str_at(v, "/sender/email");
    p.author_avatar = avatar(&repo_url, str_at(v, "/sender/avatar_url"));
    p.sender = user_login(&v["sender"]);
    p.forge_url = format!("{repo_url}/src/tag/{tag}");
    Ok(p)
}

fn pull_request(v: &Value) -> Result<Pipeline, String> {
    let action = str_at(v, "/action");
    let event = match action.as_str() {
        "opened" | "reopened" | "synchronized" => Event::PullRequest,
        "closed" => Event::PullRequestClosed,
        "edited" | "label_updated" | "label_cleared" | "milestoned" | "demilestoned"
        | "assigned" | "unassigned" => Event::PullRequestMetadata,
        other => return Err(format!("pull_request action {other:?} is not handled")),
    };
    let pr = &v["pull_request"];
    let number = u64_at(pr, "/number")
        .or_else(|| u64_at(v, "/number"))
        .unwrap_or(0);
    let repo_url = str_at(v, "/repository/html_url");
    let mut p = pipeline(event);
    // Metadata reasons are Gitea's action names (`label_updated`, `label_cleared`, ...), as
    // Woodpecker passes them on; a merged close says `merged`.
    p.event_reason = match event {
        Event::PullRequestClosed if bool_at(pr, "/merged") => vec!["merged".into()],
        _ => vec![action.clone()],
    };
    p.commit = str_at(pr, "/head/sha");
    p.git_ref = format!("refs/pull/{number}/head");
    p.branch = str_at(pr, "/base/ref");
    p.refspec = format!("{}:{}", str_at(pr, "/head/ref"), str_at(pr, "/base/ref"));
    p.title = str_at(pr, "/title");
    p.message = str_at(pr, "/title");
    p.timestamp = rfc3339_to_unix(&str_at(pr, "/updated_at"));
    p.author = user_login(&pr["user"]);
    p.author_email = str_at(v, "/sender/email");
    p.author_avatar = avatar(&repo_url, str_at(pr, "/user/avatar_url"));
    p.sender = user_login(&v["sender"]);
    p.forge_url = str_at(pr, "/html_url");
    p.pr_number = Some(number);
    // After `label_cleared` the payload may still list the old labels; none are left.
    if action != "label_cleared" {
        p.pr_labels = array_at(pr, "/labels")
            .iter()
            .map(|l| str_at(l, "/name"))
            .collect();
    }
    p.from_fork = str_at(pr, "/head/repo_id") != str_at(pr, "/base/repo_id");
    Ok(p)
}

fn release(v: &Value) -> Result<Pipeline, String> {
    let action = str_at(v, "/action");
    if action != "published" {
        return Err(format!(
            "release action {action:?} is not handled (only \"published\")"
        ));
    }
    let r = &v["release"];
    let tag = str_at(r, "/tag_name");
    let title = first_str(r, &["/name", "/tag_name"]);
    let repo_url = str_at(v, "/repository/html_url");
    let mut p = pipeline(Event::Release);
    p.event_reason = vec![action];
    p.git_ref = format!("refs/tags/{tag}");
    p.branch = str_at(r, "/target_commitish");
    p.title = title.clone();
    p.message = format!("created release {title}");
    p.timestamp = rfc3339_to_unix(&first_str(r, &["/published_at", "/created_at"]));
    // The account that published it, as Woodpecker records it.
    p.author = user_login(&v["sender"]);
    p.author_email = str_at(v, "/sender/email");
    p.author_avatar = avatar(&repo_url, str_at(v, "/sender/avatar_url"));
    p.sender = user_login(&v["sender"]);
    p.forge_url = str_at(r, "/html_url");
    p.release = Some(ReleaseInfo {
        tag,
        title,
        prerelease: bool_at(r, "/prerelease"),
    });
    Ok(p)
}

// ---- API (/api/v1) ----

fn api(ctx: &ApiContext) -> String {
    format!("{}/api/v1", ctx.forge_url.trim_end_matches('/'))
}

pub fn repo_info(ctx: ApiContext, full_name: String) -> Result<Repo, PluginError> {
    let url = format!("{}/repos/{}", api(&ctx), full_name);
    let v = ApiClient::token(&ctx).get_found(&url, || no_repo(&full_name))?;
    Ok(repo_of(&v))
}

pub fn file_at(
    ctx: ApiContext,
    full_name: String,
    commit: String,
    path: String,
) -> Result<Option<Vec<u8>>, PluginError> {
    let url = format!(
        "{}/repos/{}/raw/{}?ref={}",
        api(&ctx),
        full_name,
        http::encode_path(&path),
        http::encode(&commit)
    );
    ApiClient::token(&ctx).raw_file(&url, Vec::new(), "raw file API")
}

pub fn dir_at(
    ctx: ApiContext,
    full_name: String,
    commit: String,
    path: String,
) -> Result<Vec<String>, PluginError> {
    let url = contents_url(&api(&ctx), &full_name, &path, &commit);
    ApiClient::token(&ctx).contents_files(&url)
}

pub fn branches(ctx: ApiContext, full_name: String) -> Result<Vec<String>, PluginError> {
    let url = format!("{}/repos/{}/branches?limit=50", api(&ctx), full_name);
    ApiClient::token(&ctx).names(&url, "", "/name")
}

pub fn post_status(
    ctx: ApiContext,
    full_name: String,
    commit: String,
    status: CommitStatus,
) -> Result<(), PluginError> {
    let url = format!("{}/repos/{}/statuses/{}", api(&ctx), full_name, commit);
    ApiClient::token(&ctx).post_status(&url, &STATUS_FORMAT, status)
}

/// GitHub's statuses API as Gitea and Forgejo serve it, with upstream's mapping: a killed
/// pipeline is a `failure` (not GitHub's `error`).
pub const STATUS_FORMAT: StatusFormat = StatusFormat {
    killed: "failure",
    ..StatusFormat::GITHUB
};

/// `GET /repos/{o}/{r}/pulls/{n}/files`, 50 a page (Gitea's default maximum).
pub fn pr_changed_files(
    ctx: ApiContext,
    full_name: String,
    pr_number: u64,
) -> Result<Vec<String>, PluginError> {
    FileListApi::new(
        "token",
        "pull request",
        60,
        "",
        ["/filename", "/previous_filename"],
    )
    .fetch(
        &ctx,
        &full_name,
        pr_number,
        |page| {
            format!(
                "{}/repos/{full_name}/pulls/{pr_number}/files?limit=50&page={page}",
                api(&ctx)
            )
        },
        |_, items| items == 50,
    )
}

pub fn branch_head(
    ctx: ApiContext,
    full_name: String,
    branch: String,
) -> Result<CommitInfo, PluginError> {
    let url = format!(
        "{}/repos/{}/branches/{}",
        api(&ctx),
        full_name,
        http::encode(&branch)
    );
    let v = ApiClient::token(&ctx).get_found(&url, || no_branch(&full_name, &branch))?;
    Ok(CommitInfo {
        sha: str_at(&v, "/commit/id"),
        message: str_at(&v, "/commit/message"),
        author: first_str(&v, &["/commit/author/name", "/commit/author/username"]),
        author_email: str_at(&v, "/commit/author/email"),
        author_avatar: String::new(),
        timestamp: rfc3339_to_unix(&str_at(&v, "/commit/timestamp")),
        forge_url: str_at(&v, "/commit/url"),
    })
}

/// Creates (replacing one with the same URL) or, without `create`, deletes the repository's
/// webhook calling `url`. `kind` is the hook type the forge expects (`gitea`, `forgejo`).
pub fn set_hook(
    ctx: &ApiContext,
    full_name: &str,
    url: &str,
    create: Option<(&str, &str)>,
) -> Result<(), PluginError> {
    let list_url = format!("{}/repos/{}/hooks", api(ctx), full_name);
    let body = create.map(|(kind, secret)| {
        json!({
            "type": kind,
            "active": true,
            "branch_filter": "*",
            "events": ["push", "create", "delete", "pull_request", "release"],
            "config": {"url": url, "content_type": "json", "secret": secret},
        })
    });
    HookApi::new(list_url, auth_header(ctx, "token")).replace(url, body.as_ref())
}

// ---- Sign-in and the user's view (contract 0.2.0) ----

/// Gitea's default `MAX_RESPONSE_ITEMS`: the largest page an instance serves unless its
/// operator raised it.
const MAX_PER_PAGE: u32 = 50;

/// `limit` as Gitea takes it: 1 to 50 (0: 50).
fn limit(n: u32) -> u32 {
    if n == 0 {
        MAX_PER_PAGE
    } else {
        n.min(MAX_PER_PAGE)
    }
}

/// A URL Gitea gave relative to the instance (avatars), made absolute on `forge_url`.
fn absolute(forge_url: &str, url: String) -> String {
    if url.starts_with('/') {
        format!("{}{url}", forge_url.trim_end_matches('/'))
    } else {
        url
    }
}

/// `GET /user`.
pub fn current_user(ctx: ApiContext) -> Result<ForgeUser, PluginError> {
    let url = format!("{}/user", api(&ctx));
    let user = ApiClient::token(&ctx).get_found(&url, || denied("no user for this token"))?;
    Ok(ForgeUser {
        remote_id: str_at(&user, "/id"),
        login: user_login(&user),
        email: str_at(&user, "/email"),
        avatar_url: absolute(&ctx.forge_url, str_at(&user, "/avatar_url")),
    })
}

/// `permissions` of a Gitea repository object (absent: no access).
fn perm_of(v: &Value) -> Perm {
    Perm {
        pull: bool_at(v, "/permissions/pull"),
        push: bool_at(v, "/permissions/push"),
        admin: bool_at(v, "/permissions/admin"),
    }
}

/// `GET /user/repos?limit&page`: the user's own, collaborative and organisations'
/// repositories with the user's permissions; archived ones are left out, as upstream.
pub fn user_repos(
    ctx: ApiContext,
    page: u32,
    per_page: u32,
) -> Result<Vec<RepoWithPerm>, PluginError> {
    let url = format!(
        "{}/user/repos?limit={}&page={}",
        api(&ctx),
        limit(per_page),
        page.max(1)
    );
    let list = ApiClient::token(&ctx).get_or_null(&url)?;
    Ok(array_at(&list, "")
        .iter()
        .filter(|r| !bool_at(r, "/archived"))
        .map(|r| RepoWithPerm {
            repo: repo_of(r),
            perm: perm_of(r),
        })
        .collect())
}

/// `GET /repos/{o}/{n}` → `permissions`; 404 (a private repository the user cannot see) is
/// no access.
pub fn repo_perm(ctx: ApiContext, full_name: String) -> Result<Perm, PluginError> {
    let url = format!("{}/repos/{}", api(&ctx), full_name);
    Ok(ApiClient::token(&ctx)
        .get_for_access(&url)?
        .map_or_else(|| perm_of(&Value::Null), |v| perm_of(&v)))
}

/// `GET /user/orgs?limit&page`.
pub fn user_orgs(ctx: ApiContext, page: u32, per_page: u32) -> Result<Vec<Team>, PluginError> {
    let url = format!(
        "{}/user/orgs?limit={}&page={}",
        api(&ctx),
        limit(per_page),
        page.max(1)
    );
    let list = ApiClient::token(&ctx).get_or_null(&url)?;
    Ok(array_at(&list, "")
        .iter()
        .map(|o| Team {
            login: first_str(o, &["/name", "/username"]),
            avatar_url: absolute(&ctx.forge_url, str_at(o, "/avatar_url")),
        })
        .collect())
}

/// As upstream: `GET /orgs/{org}/members/{login}` (204: a member, 404: not), then for a
/// member `GET /users/{login}/orgs/{org}/permissions` (admin: `is_admin` or `is_owner`).
pub fn org_membership(ctx: ApiContext, org: String, login: String) -> Result<OrgPerm, PluginError> {
    let (org, login) = (http::encode(&org), http::encode(&login));
    let client = ApiClient::token(&ctx);
    let url = format!("{}/orgs/{org}/members/{login}", api(&ctx));
    let mut hs = vec![woodlark_plugin_sdk::headers::text(
        "accept",
        "application/json",
    )];
    if let Some(auth) = client.authorization() {
        hs.push(woodlark_plugin_sdk::headers::text("authorization", auth));
    }
    let member = match http::send(&http::request("GET", &url, hs))?.status {
        204 => true,
        // 404 not a member; 302 or 403 when the caller cannot see the org's members at all.
        302 | 403 | 404 => false,
        s => return Err(http::status_error(&url, s)),
    };
    if !member {
        return Ok(OrgPerm {
            member: false,
            admin: false,
        });
    }
    let url = format!("{}/users/{login}/orgs/{org}/permissions", api(&ctx));
    let perm = client.get_or_null(&url)?;
    Ok(OrgPerm {
        member,
        admin: bool_at(&perm, "/is_admin") || bool_at(&perm, "/is_owner"),
    })
}

/// `GET /repos/{o}/{n}/pulls?state=open&limit&page`; 404 (a repository without commits)
/// is none, as upstream.
pub fn pull_requests(
    ctx: ApiContext,
    full_name: String,
    page: u32,
    per_page: u32,
) -> Result<Vec<PullRequestInfo>, PluginError> {
    let url = format!(
        "{}/repos/{}/pulls?state=open&limit={}&page={}",
        api(&ctx),
        full_name,
        limit(per_page),
        page.max(1)
    );
    let list = ApiClient::token(&ctx).get_or_null(&url)?;
    Ok(array_at(&list, "")
        .iter()
        .filter_map(|p| {
            Some(PullRequestInfo {
                number: u64_at(p, "/number")?,
                title: str_at(p, "/title"),
            })
        })
        .collect())
}

/// The token as password (Gitea takes an access token in place of a password for any user
/// name). Upstream sends the user's login as login; the contract gives no login here, and
/// Gitea checks the token, not the name, so the token stands in for it. Anonymous (empty)
/// without a token.
pub fn netrc(ctx: ApiContext, clone_url: String) -> Result<NetrcInfo, PluginError> {
    let (login, password) = if ctx.token.is_empty() {
        (String::new(), String::new())
    } else {
        (ctx.token.clone(), ctx.token)
    };
    oauth::netrc_for(&clone_url, login, password)
}

/// The Gitea family's OAuth 2 endpoints (no scopes: Gitea grants what the app was given).
pub const OAUTH: oauth::Endpoints = oauth::Endpoints {
    authorize: "/login/oauth/authorize",
    token: "/login/oauth/access_token",
    scope: "",
    basic_auth: false,
    default_root: "",
};

/// The API half of a Gitea-family [`ForgeAdapter`] impl: every method but `recognize` and
/// `parse_hook` (which differ by event and signature headers), forwarding to this crate.
/// `$hook_type` is the webhook `type` the forge's API expects (`"gitea"`, `"forgejo"`).
///
/// ```ignore
/// impl ForgeAdapter for Gitea {
///     fn recognize(headers: &[Header]) -> bool { … }
///     fn parse_hook(req: HookRequest) -> Result<Outcome, PluginError> { … }
///     gitea_hooks::gitea_api_methods!("gitea");
/// }
/// ```
#[macro_export]
macro_rules! gitea_api_methods {
    ($hook_type:literal) => {
        const OAUTH: Option<oauth::Endpoints> = Some($crate::OAUTH);

        fn repo_info(ctx: ApiContext, full_name: String) -> Result<Repo, PluginError> {
            $crate::repo_info(ctx, full_name)
        }

        fn file_at(
            ctx: ApiContext,
            full_name: String,
            commit: String,
            path: String,
        ) -> Result<Option<Vec<u8>>, PluginError> {
            $crate::file_at(ctx, full_name, commit, path)
        }

        fn dir_at(
            ctx: ApiContext,
            full_name: String,
            commit: String,
            path: String,
        ) -> Result<Vec<String>, PluginError> {
            $crate::dir_at(ctx, full_name, commit, path)
        }

        fn branches(ctx: ApiContext, full_name: String) -> Result<Vec<String>, PluginError> {
            $crate::branches(ctx, full_name)
        }

        fn post_status(
            ctx: ApiContext,
            full_name: String,
            commit: String,
            status: CommitStatus,
        ) -> Result<(), PluginError> {
            $crate::post_status(ctx, full_name, commit, status)
        }

        fn branch_head(
            ctx: ApiContext,
            full_name: String,
            branch: String,
        ) -> Result<CommitInfo, PluginError> {
            $crate::branch_head(ctx, full_name, branch)
        }

        fn create_hook(
            ctx: ApiContext,
            full_name: String,
            url: String,
            secret: String,
        ) -> Result<(), PluginError> {
            $crate::set_hook(&ctx, &full_name, &url, Some(($hook_type, &secret)))
        }

        fn delete_hook(ctx: ApiContext, full_name: String, url: String) -> Result<(), PluginError> {
            $crate::set_hook(&ctx, &full_name, &url, None)
        }

        fn changed_files(
            ctx: ApiContext,
            full_name: String,
            pr_number: u64,
        ) -> Result<Vec<String>, PluginError> {
            $crate::pr_changed_files(ctx, full_name, pr_number)
        }
        fn current_user(ctx: ApiContext) -> Result<ForgeUser, PluginError> {
            $crate::current_user(ctx)
        }

        fn user_repos(
            ctx: ApiContext,
            page: u32,
            per_page: u32,
        ) -> Result<Vec<RepoWithPerm>, PluginError> {
            $crate::user_repos(ctx, page, per_page)
        }

        fn repo_perm(ctx: ApiContext, full_name: String) -> Result<Perm, PluginError> {
            $crate::repo_perm(ctx, full_name)
        }

        fn user_orgs(ctx: ApiContext, page: u32, per_page: u32) -> Result<Vec<Team>, PluginError> {
            $crate::user_orgs(ctx, page, per_page)
        }

        fn org_membership(
            ctx: ApiContext,
            org: String,
            login: String,
        ) -> Result<OrgPerm, PluginError> {
            $crate::org_membership(ctx, org, login)
        }

        fn pull_requests(
            ctx: ApiContext,
            full_name: String,
            page: u32,
            per_page: u32,
        ) -> Result<Vec<PullRequestInfo>, PluginError> {
            $crate::pull_requests(ctx, full_name, page, per_page)
        }

        fn netrc(ctx: ApiContext, clone_url: String) -> Result<NetrcInfo, PluginError> {
            $crate::netrc(ctx, clone_url)
        }
    };
}
