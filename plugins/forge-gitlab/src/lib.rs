//! GitLab forge adapter (gitlab.com and self-managed).
//!
//! Recognises `X-Gitlab-Event`. The payload's `object_kind` decides:
//!
//! | `object_kind`   | condition                                        | Woodlark event          |
//! |-----------------|--------------------------------------------------|-------------------------|
//! | `push`          | branch not deleted, with commits                 | `push`                  |
//! | `tag_push`      | tag not deleted (commit: `checkout_sha`)         | `tag`                   |
//! | `merge_request` | open, reopen; update with new commits while open | `pull-request`          |
//! | `merge_request` | action close, merge                              | `pull-request-closed`   |
//! | `merge_request` | update without new commits (labels, title, …)    | `pull-request-metadata` |
//! | `release`       | action create                                    | `release`               |
//!
//! Authentication: GitLab sends the hook's secret token verbatim in `X-Gitlab-Token`; with a
//! `hook-secret` configured it is compared by the host (`signing.equals`).
//! API: `<forge-url>/api/v4` with `Authorization: Bearer <token>`.
//!
//! Sign-in and the user's view (contract 0.2.0), as Woodpecker's GitLab forge does it:
//!
//! | function         | request                                                               |
//! |------------------|-----------------------------------------------------------------------|
//! | `authorize-url`  | `<oauth host or forge>/oauth/authorize`, scope `api`                  |
//! | `exchange-code`  | POST `<forge>/oauth/token` (tokens expire after two hours)            |
//! | `refresh-token`  | the same, `grant_type=refresh_token`                                  |
//! | `current-user`   | GET `/user`                                                           |
//! | `user-repos`     | GET `/projects?membership=true&min_access_level=30&archived=false`    |
//! | `repo-perm`      | GET `/projects/{path}` → `permissions` (404: no access)               |
//! | `user-orgs`      | GET `/groups?all_available=false&min_access_level=30`                 |
//! | `org-membership` | GET `/groups?search=`, then `/groups/{id}/members/all` (owner: admin) |
//! | `pull-requests`  | GET `/projects/{path}/merge_requests?state=opened` (number: `iid`)    |
//! | `netrc`          | no request: clone host, `oauth2`, the token                           |
//!
//! Permissions as upstream converts them: the higher of `project_access` and `group_access`;
//! when a project shows neither, the user's inherited membership
//! (`/projects/{id}/members/all/{user id}`). Pull: reporter (20) or a private or internal
//! project; push: developer (30); admin: maintainer (40).

use woodlark_plugin_sdk::forge::oauth;
use woodlark_plugin_sdk::forge::*;
use woodlark_plugin_sdk::http;
use woodlark_plugin_sdk::json::{array_at, first_str, rfc3339_to_unix, str_at, u64_at};
use woodlark_plugin_sdk::serde_json::{Value, json};

const ZERO_SHA: &str = "0000000000000000000000000000000000000000";

/// Commit statuses: GitLab's state names; the context is the status's `name`.
const STATUS: StatusFormat = StatusFormat {
    pending: "pending",
    running: "running",
    success: "success",
    failure: "failed",
    error: "failed",
    killed: "canceled",
    context: &["name"],
    link: "target_url",
};

/// A repository tree listing: a bare array whose files are `blob`s.
const TREE: Listing = Listing {
    items: "",
    file_type: "blob",
    path: "/path",
};

struct GitLab;

woodlark_plugin_sdk::forge_adapter!(GitLab);

impl ForgeAdapter for GitLab {
    const OAUTH: Option<oauth::Endpoints> = Some(oauth::Endpoints {
        authorize: "/oauth/authorize",
        token: "/oauth/token",
        scope: SCOPE,
        basic_auth: false,
        default_root: "",
    });

    fn recognize(headers: &[Header]) -> bool {
        header(headers, "x-gitlab-event").is_some()
    }

    fn parse_hook(req: HookRequest) -> Result<Outcome, PluginError> {
        required_header(&req.headers, "X-Gitlab-Event")?;
        let verified = verify_token(header(&req.headers, "x-gitlab-token"))?;
        let v = json_payload(&req)?;
        let kind = str_at(&v, "/object_kind");
        let parsed = match kind.as_str() {
            "push" | "tag_push" => push(&v),
            "merge_request" => merge_request(&v),
            "release" => release(&v),
            other => Err(format!("object_kind {other:?} is not handled")),
        };
        Ok(match parsed {
            Ok(p) => build(repo_of(&v["project"]), p, verified),
            Err(reason) => ignored(reason),
        })
    }

    fn repo_info(ctx: ApiContext, full_name: String) -> Result<Repo, PluginError> {
        let url = format!("{}/projects/{}", api(&ctx), http::encode(&full_name));
        let v = ApiClient::bearer(&ctx)
            .get_found(&url, || invalid(format!("project {full_name} not found")))?;
        Ok(repo_of(&v))
    }

    fn file_at(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        path: String,
    ) -> Result<Option<Vec<u8>>, PluginError> {
        let url = format!(
            "{}/projects/{}/repository/files/{}/raw?ref={}",
            api(&ctx),
            http::encode(&full_name),
            http::encode(&path),
            http::encode(&commit)
        );
        ApiClient::bearer(&ctx).raw_file(&url, Vec::new(), "GitLab files API")
    }

    fn dir_at(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        path: String,
    ) -> Result<Vec<String>, PluginError> {
        let url = format!(
            "{}/projects/{}/repository/tree?path={}&ref={}&per_page=100",
            api(&ctx),
            http::encode(&full_name),
            http::encode(&path),
            http::encode(&commit)
        );
        ApiClient::bearer(&ctx).files(&url, &TREE)
    }

    fn branches(ctx: ApiContext, full_name: String) -> Result<Vec<String>, PluginError> {
        let url = format!(
            "{}/projects/{}/repository/branches?per_page=100",
            api(&ctx),
            http::encode(&full_name)
        );
        ApiClient::bearer(&ctx).names(&url, "", "/name")
    }

    fn post_status(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        status: CommitStatus,
    ) -> Result<(), PluginError> {
        let url = format!(
            "{}/projects/{}/statuses/{}",
            api(&ctx),
            http::encode(&full_name),
            commit
        );
        ApiClient::bearer(&ctx).post_status(&url, &STATUS, status)
    }

    fn branch_head(
        ctx: ApiContext,
        full_name: String,
        branch: String,
    ) -> Result<CommitInfo, PluginError> {
        let url = format!(
            "{}/projects/{}/repository/branches/{}",
            api(&ctx),
            http::encode(&full_name),
            http::encode(&branch)
        );
        let v = ApiClient::bearer(&ctx).get_found(&url, || no_branch(&full_name, &branch))?;
        Ok(CommitInfo {
            sha: str_at(&v, "/commit/id"),
            message: str_at(&v, "/commit/message"),
            author: str_at(&v, "/commit/author_name"),
            author_email: str_at(&v, "/commit/author_email"),
            author_avatar: String::new(),
            timestamp: rfc3339_to_unix(&first_str(
                &v,
                &["/commit/committed_date", "/commit/authored_date"],
            )),
            forge_url: str_at(&v, "/commit/web_url"),
        })
    }

    /// GitLab sends the secret back as `X-Gitlab-Token`, which `parse-hook` compares.
    fn create_hook(
        ctx: ApiContext,
        full_name: String,
        url: String,
        secret: String,
    ) -> Result<(), PluginError> {
        let body = json!({
            "url": url,
            "token": secret,
            "push_events": true,
            "tag_push_events": true,
            "merge_requests_events": true,
            "releases_events": true,
            "deployment_events": true,
            "enable_ssl_verification": true,
        });
        hooks(&ctx, &full_name).replace(&url, Some(&body))
    }

    fn delete_hook(ctx: ApiContext, full_name: String, url: String) -> Result<(), PluginError> {
        hooks(&ctx, &full_name).replace(&url, None)
    }

    /// `GET /projects/:id/merge_requests/:iid/diffs` (old and new path of each diff).
    fn changed_files(
        ctx: ApiContext,
        full_name: String,
        pr_number: u64,
    ) -> Result<Vec<String>, PluginError> {
        let project = http::encode(&full_name);
        FileListApi::new("Bearer", "merge request", 50, "", ["/new_path", "/old_path"]).fetch(
            &ctx,
            &full_name,
            pr_number,
            |page| {
                format!(
                    "{}/projects/{project}/merge_requests/{pr_number}/diffs?per_page=100&page={page}",
                    api(&ctx)
                )
            },
            |_, items| items == 100,
        )
    }
    fn current_user(ctx: ApiContext) -> Result<ForgeUser, PluginError> {
        let user = ApiClient::bearer(&ctx).get_found(&format!("{}/user", api(&ctx)), || {
            denied("GitLab: no user for this token")
        })?;
        Ok(ForgeUser {
            remote_id: str_at(&user, "/id"),
            login: str_at(&user, "/username"),
            email: str_at(&user, "/email"),
            avatar_url: absolute(&ctx, str_at(&user, "/avatar_url")),
        })
    }

    fn user_repos(
        ctx: ApiContext,
        page: u32,
        per_page_: u32,
    ) -> Result<Vec<RepoWithPerm>, PluginError> {
        let url = format!(
            "{}/projects?membership=true&min_access_level={DEVELOPER}&archived=false&per_page={}&page={}",
            api(&ctx),
            per_page(per_page_),
            page.max(1)
        );
        let client = ApiClient::bearer(&ctx);
        let list = client.get_or_null(&url)?;
        let mut user_id = None;
        let mut repos = Vec::new();
        for project in array_at(&list, "") {
            let Some(level) = access_level(&ctx, &client, project, &mut user_id)? else {
                // Not even an inherited member: upstream leaves the project out.
                continue;
            };
            repos.push(RepoWithPerm {
                repo: api_repo_of(&ctx, project),
                perm: perm_of(project, level),
            });
        }
        Ok(repos)
    }

    fn repo_perm(ctx: ApiContext, full_name: String) -> Result<Perm, PluginError> {
        let url = format!("{}/projects/{}", api(&ctx), http::encode(&full_name));
        let client = ApiClient::bearer(&ctx);
        let Some(project) = client.get_for_access(&url)? else {
            return Ok(no_perm());
        };
        Ok(match access_level(&ctx, &client, &project, &mut None)? {
            Some(level) => perm_of(&project, level),
            None => no_perm(),
        })
    }

    fn user_orgs(ctx: ApiContext, page: u32, per_page_: u32) -> Result<Vec<Team>, PluginError> {
        let url = format!(
            "{}/groups?all_available=false&min_access_level={DEVELOPER}&per_page={}&page={}",
            api(&ctx),
            per_page(per_page_),
            page.max(1)
        );
        let list = ApiClient::bearer(&ctx).get_or_null(&url)?;
        Ok(array_at(&list, "")
            .iter()
            .map(|g| Team {
                login: str_at(g, "/full_path"),
                avatar_url: absolute(&ctx, str_at(g, "/avatar_url")),
            })
            .collect())
    }

    /// As upstream: the group found by searching for `org`, then its members (inherited
    /// ones too) paged through for `login`; an owner (50) is an org admin.
    fn org_membership(ctx: ApiContext, org: String, login: String) -> Result<OrgPerm, PluginError> {
        let client = ApiClient::bearer(&ctx);
        let url = format!(
            "{}/groups?search={}&per_page={MAX_PER_PAGE}",
            api(&ctx),
            http::encode(&org)
        );
        let groups = client.get_or_null(&url)?;
        let group = array_at(&groups, "")
            .iter()
            .find(|g| str_at(g, "/full_path") == org || str_at(g, "/name") == org);
        let Some(gid) = group.map(|g| str_at(g, "/id")) else {
            return Ok(not_member());
        };
        for page in 1..=MAX_MEMBER_PAGES {
            let url = format!(
                "{}/groups/{gid}/members/all?per_page={MAX_PER_PAGE}&page={page}",
                api(&ctx)
            );
            let members = client.get_or_null(&url)?;
            let members = array_at(&members, "");
            if let Some(m) = members.iter().find(|m| str_at(m, "/username") == login) {
                return Ok(OrgPerm {
                    member: true,
                    admin: u64_at(m, "/access_level").unwrap_or(0) >= OWNER,
                });
            }
            if members.len() < MAX_PER_PAGE as usize {
                break;
            }
        }
        Ok(not_member())
    }

    fn pull_requests(
        ctx: ApiContext,
        full_name: String,
        page: u32,
        per_page_: u32,
    ) -> Result<Vec<PullRequestInfo>, PluginError> {
        let url = format!(
            "{}/projects/{}/merge_requests?state=opened&per_page={}&page={}",
            api(&ctx),
            http::encode(&full_name),
            per_page(per_page_),
            page.max(1)
        );
        let list = ApiClient::bearer(&ctx)
            .get_found(&url, || invalid(format!("project {full_name} not found")))?;
        Ok(array_at(&list, "")
            .iter()
            .filter_map(|mr| {
                Some(PullRequestInfo {
                    number: u64_at(mr, "/iid")?,
                    title: str_at(mr, "/title"),
                })
            })
            .collect())
    }

    /// As upstream: login `oauth2`, the token as password; anonymous without a token.
    fn netrc(ctx: ApiContext, clone_url: String) -> Result<NetrcInfo, PluginError> {
        let (login, password) = if ctx.token.is_empty() {
            (String::new(), String::new())
        } else {
            ("oauth2".to_string(), ctx.token)
        };
        oauth::netrc_for(&clone_url, login, password)
    }
}

/// The OAuth scope asked for at sign-in (the whole API: hooks, statuses, repositories).
const SCOPE: &str = "api";

/// The largest page GitLab serves.
const MAX_PER_PAGE: u32 = 100;

/// A bound on the group member pages read for one membership check.
const MAX_MEMBER_PAGES: u32 = 50;

/// GitLab's access levels.
const REPORTER: u64 = 20;
const DEVELOPER: u64 = 30;
const MAINTAINER: u64 = 40;
const OWNER: u64 = 50;

/// `per_page` as GitLab takes it: 1 to 100 (0: 100).
fn per_page(n: u32) -> u32 {
    if n == 0 {
        MAX_PER_PAGE
    } else {
        n.min(MAX_PER_PAGE)
    }
}

/// A URL GitLab gave relative to the instance (avatars), made absolute as upstream does.
fn absolute(ctx: &ApiContext, url: String) -> String {
    if url.is_empty() || url.starts_with("http") {
        url
    } else {
        format!(
            "{}/{}",
            ctx.forge_url.trim_end_matches('/'),
            url.trim_start_matches('/')
        )
    }
}

/// A project of the REST API, its avatar made absolute.
fn api_repo_of(ctx: &ApiContext, project: &Value) -> Repo {
    let mut repo = repo_of(project);
    repo.avatar_url = absolute(ctx, repo.avatar_url);
    repo
}

/// The user's access level on `project`: the higher of the `permissions` the project shows;
/// when it shows none, the inherited membership (`None`: not a member at all).
/// `user_id` caches the caller's GitLab id across projects.
fn access_level(
    ctx: &ApiContext,
    client: &ApiClient,
    project: &Value,
    user_id: &mut Option<String>,
) -> Result<Option<u64>, PluginError> {
    let embedded = ["/permissions/project_access", "/permissions/group_access"]
        .iter()
        .filter_map(|p| u64_at(project, &format!("{p}/access_level")))
        .max()
        .unwrap_or(0);
    if embedded > 0 {
        return Ok(Some(embedded));
    }
    let uid = match user_id {
        Some(id) => id.clone(),
        None => {
            let user = client.get_found(&format!("{}/user", api(ctx)), || {
                denied("GitLab: no user for this token")
            })?;
            user_id.insert(str_at(&user, "/id")).clone()
        }
    };
    let url = format!(
        "{}/projects/{}/members/all/{uid}",
        api(ctx),
        str_at(project, "/id")
    );
    Ok(client
        .get(&url)?
        .map(|m| u64_at(&m, "/access_level").unwrap_or(0)))
}

/// Upstream's permissions for an access level (a private or internal project is readable to
/// anyone who sees it).
fn perm_of(project: &Value, level: u64) -> Perm {
    let visibility = str_at(project, "/visibility");
    Perm {
        pull: visibility == "private" || visibility == "internal" || level >= REPORTER,
        push: level >= DEVELOPER,
        admin: level >= MAINTAINER,
    }
}

fn no_perm() -> Perm {
    Perm {
        pull: false,
        push: false,
        admin: false,
    }
}

fn not_member() -> OrgPerm {
    OrgPerm {
        member: false,
        admin: false,
    }
}

fn api(ctx: &ApiContext) -> String {
    format!("{}/api/v4", ctx.forge_url.trim_end_matches('/'))
}

/// The project's webhooks (`{"id", "url"}` items).
fn hooks(ctx: &ApiContext, full_name: &str) -> HookApi {
    let list_url = format!("{}/projects/{}/hooks", api(ctx), http::encode(full_name));
    HookApi::new(list_url, auth_header(ctx, "Bearer")).url_at("/url")
}

/// A GitLab `project` object (webhook or API shape).
fn repo_of(p: &Value) -> Repo {
    let full = first_str(p, &["/path_with_namespace"]);
    let (owner, name) = full.rsplit_once('/').unwrap_or(("", full.as_str()));
    let mut repo = repo();
    repo.forge_remote_id = str_at(p, "/id");
    repo.owner = owner.to_string();
    repo.name = if name.is_empty() {
        str_at(p, "/path")
    } else {
        name.to_string()
    };
    repo.full_name = full.clone();
    repo.avatar_url = str_at(p, "/avatar_url");
    repo.forge_url = str_at(p, "/web_url");
    repo.clone_url = first_str(p, &["/git_http_url", "/http_url_to_repo", "/http_url"]);
    repo.clone_url_ssh = first_str(p, &["/git_ssh_url", "/ssh_url_to_repo", "/ssh_url"]);
    repo.default_branch = str_at(p, "/default_branch");
    // visibility_level: 0 private, 10 internal, 20 public (API: "visibility" string).
    repo.private = match u64_at(p, "/visibility_level") {
        Some(level) => level < 20,
        None => str_at(p, "/visibility") != "public",
    };
    repo
}

fn push(v: &Value) -> Result<Pipeline, String> {
    let git_ref = str_at(v, "/ref");
    let is_tag = str_at(v, "/object_kind") == "tag_push";
    if str_at(v, "/after") == ZERO_SHA || str_at(v, "/checkout_sha").is_empty() {
        return Err(if is_tag {
            "tag deleted"
        } else {
            "branch deleted"
        }
        .into());
    }
    // A branch created without new commits: nothing new to build (as Woodpecker decides).
    if !is_tag && u64_at(v, "/total_commits_count") == Some(0) {
        return Err("push without commits".into());
    }
    let commits = array_at(v, "/commits");
    let checkout = str_at(v, "/checkout_sha");
    let tagged = commits.iter().find(|c| str_at(c, "/id") == checkout);
    let head = if is_tag {
        tagged.unwrap_or(&Value::Null)
    } else {
        tagged.or(commits.last()).unwrap_or(&Value::Null)
    };
    let mut p = pipeline(if is_tag { Event::Tag } else { Event::Push });
    // `checkout_sha` is the commit even for an annotated tag, whose `after` is the tag object.
    p.commit = checkout;
    p.git_ref = git_ref.clone();
    p.message = str_at(head, "/message");
    if p.message.is_empty() && is_tag {
        // Tag pushes rarely list commits: the annotated tag's message, else a line saying so.
        p.message = str_at(v, "/message");
        if p.message.is_empty() {
            p.message = format!("created tag {}", short_ref(&git_ref));
        }
    }
    p.timestamp = rfc3339_to_unix(&str_at(head, "/timestamp"));
    p.author = str_at(v, "/user_username");
    // The commit's author, as Woodpecker takes it; the pusher's address when none is listed.
    p.author_email = str_at(head, "/author/email");
    if p.author_email.is_empty() {
        p.author_email = str_at(v, "/user_email");
    }
    if p.author_email == "[REDACTED]" {
        p.author_email.clear();
    }
    p.author_avatar = str_at(v, "/user_avatar");
    p.sender = str_at(v, "/user_username");
    p.forge_url = if is_tag {
        format!(
            "{}/-/tags/{}",
            str_at(v, "/project/web_url"),
            short_ref(&git_ref)
        )
    } else {
        str_at(head, "/url")
    };
    if !is_tag {
        p.branch = short_ref(&git_ref).to_string();
        p.changed_files = changed_files(commits);
    }
    Ok(p)
}

fn merge_request(v: &Value) -> Result<Pipeline, String> {
    let mr = &v["object_attributes"];
    let action = str_at(mr, "/action");
    let (event, reason) = match action.as_str() {
        "open" => (Event::PullRequest, vec!["opened".to_string()]),
        "reopen" => (Event::PullRequest, vec!["reopened".to_string()]),
        // New commits on an open MR (`oldrev` is set only then): a normal PR run.
        "update" if !str_at(mr, "/oldrev").is_empty() && str_at(mr, "/state") == "opened" => {
            (Event::PullRequest, vec!["synchronize".to_string()])
        }
        "update" => {
            let reasons = metadata_reasons(&v["changes"]);
            if reasons.is_empty() {
                return Err("merge request update without supported changes".into());
            }
            (Event::PullRequestMetadata, reasons)
        }
        "close" => (Event::PullRequestClosed, vec!["closed".to_string()]),
        "merge" => (Event::PullRequestClosed, vec!["merged".to_string()]),
        other => return Err(format!("merge_request action {other:?} is not handled")),
    };
    let iid = u64_at(mr, "/iid").unwrap_or(0);
    let mut p = pipeline(event);
    p.event_reason = reason;
    p.commit = first_str(mr, &["/last_commit/id"]);
    p.git_ref = format!("refs/merge-requests/{iid}/head");
    // The source branch, as Woodpecker sets it for merge requests.
    p.branch = str_at(mr, "/source_branch");
    p.refspec = format!(
        "{}:{}",
        str_at(mr, "/source_branch"),
        str_at(mr, "/target_branch")
    );
    p.title = str_at(mr, "/title");
    p.message = first_str(mr, &["/last_commit/message", "/title"]);
    p.timestamp = rfc3339_to_unix(&first_str(mr, &["/last_commit/timestamp"]));
    p.author = first_str(v, &["/user/username"]);
    p.author_email = first_str(mr, &["/last_commit/author/email"]);
    p.author_avatar = str_at(v, "/user/avatar_url");
    p.sender = str_at(v, "/user/username");
    p.forge_url = str_at(mr, "/url");
    p.pr_number = Some(iid);
    p.pr_labels = array_at(v, "/labels")
        .iter()
        .map(|l| str_at(l, "/title"))
        .collect();
    p.from_fork = str_at(mr, "/source_project_id") != str_at(mr, "/target_project_id");
    Ok(p)
}

/// What an MR `update` without new commits changed, named as Woodpecker names it, in its
/// order: assigned, unassigned, milestoned, demilestoned, title_edited, description_edited,
/// label_added / label_cleared / label_updated, review_requested.
fn metadata_reasons(changes: &Value) -> Vec<String> {
    let present = |field: &str, side: &str| -> bool {
        match changes.pointer(&format!("/{field}/{side}")) {
            None | Some(Value::Null) => false,
            Some(Value::Array(a)) => !a.is_empty(),
            Some(Value::String(s)) => !s.is_empty(),
            Some(Value::Number(n)) => n.as_u64() != Some(0),
            Some(_) => true,
        }
    };
    let count = |side: &str| array_at(changes, &format!("/reviewers/{side}")).len();
    let mut out = Vec::new();
    let mut add = |cond: bool, reason: &str| {
        if cond {
            out.push(reason.to_string());
        }
    };
    add(present("assignees", "current"), "assigned");
    add(present("assignees", "previous"), "unassigned");
    add(present("milestone_id", "current"), "milestoned");
    add(present("milestone_id", "previous"), "demilestoned");
    add(
        present("title", "current") || present("title", "previous"),
        "title_edited",
    );
    add(
        present("description", "current") || present("description", "previous"),
        "description_edited",
    );
    let labels = (present("labels", "current"), present("labels", "previous"));
    add(labels == (true, false), "label_added");
    add(labels == (false, true), "label_cleared");
    add(labels == (true, true), "label_updated");
    add(count("current") > count("previous"), "review_requested");
    out
}

fn release(v: &Value) -> Result<Pipeline, String> {
    let action = str_at(v, "/action");
    if action != "create" {
        return Err(format!(
            "release action {action:?} is not handled (only \"create\")"
        ));
    }
    let tag = str_at(v, "/tag");
    let title = first_str(v, &["/name", "/tag"]);
    let mut p = pipeline(Event::Release);
    p.event_reason = vec!["created".into()];
    p.commit = str_at(v, "/commit/id");
    p.git_ref = format!("refs/tags/{tag}");
    p.title = title.clone();
    p.message = format!("created release {title}");
    p.timestamp = rfc3339_to_unix(&first_str(v, &["/released_at", "/created_at"]));
    // GitLab does not say who released; Woodpecker takes the commit's author for both.
    p.author = first_str(v, &["/commit/author/name"]);
    p.author_email = str_at(v, "/commit/author/email");
    p.sender = p.author.clone();
    p.forge_url = str_at(v, "/url");
    p.release = Some(ReleaseInfo {
        tag,
        title,
        prerelease: false,
    });
    Ok(p)
}
