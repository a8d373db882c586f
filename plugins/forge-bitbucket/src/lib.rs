//! Bitbucket Cloud forge adapter.
//!
//! Recognises `X-Event-Key` together with Bitbucket's `X-Hook-UUID` or a `repo:`/`pullrequest:`
//! event key, but not with `X-Request-Id` (Bitbucket Data Center, `forge-bitbucket-dc`).
//!
//! | `X-Event-Key`                                   | Woodlark event        |
//! |-------------------------------------------------|-----------------------|
//! | `repo:push`, new branch head                    | `push`                |
//! | `repo:push`, new tag                            | `tag`                 |
//! | `pullrequest:created`, `pullrequest:updated`    | `pull-request`        |
//! | `pullrequest:fulfilled` (merged), `:rejected`   | `pull-request-closed` |
//!
//! A PR's branch is its source branch; a merged PR builds the merge commit on the destination
//! branch (`refs/heads/<destination>`), as Woodpecker does.
//!
//! A push carries a list of changes; the first one with a new branch/tag head is used (as
//! Woodpecker does). Deleted branches are ignored. Signature: optional `X-Hub-Signature`
//! (`sha256=<hex>` HMAC of the body) when the instance config names a `hook-secret`.
//! API: `https://api.bitbucket.org/2.0` (config `api-url`) with `Authorization: Bearer <token>`.
//!
//! Sign-in and the user's view (contract 0.2.0), as Woodpecker's Bitbucket forge does it:
//!
//! | function         | request                                                                      |
//! |------------------|------------------------------------------------------------------------------|
//! | `authorize-url`  | `<oauth host or forge>/site/oauth2/authorize` (forge: `https://bitbucket.org`) |
//! | `exchange-code`  | POST `<forge>/site/oauth2/access_token`, client id and secret as Basic auth  |
//! | `refresh-token`  | the same, `grant_type=refresh_token` (access tokens last two hours)          |
//! | `current-user`   | GET `/user` and the primary address of `/user/emails`                         |
//! | `user-repos`     | GET `/user/permissions/repositories?pagelen&page` (read, write, admin)       |
//! | `repo-perm`      | GET `/user/workspaces/{ws}/permissions/repositories?q=repository.full_name=` |
//! | `user-orgs`      | GET `/user/workspaces?pagelen&page` (slugs)                                  |
//! | `org-membership` | GET `/workspaces/{ws}/permissions`, paged by `next` (owner: admin)           |
//! | `pull-requests`  | GET `/repositories/{o}/{n}/pullrequests` (open ones)                         |
//! | `netrc`          | no request: clone host, `x-token-auth`, the token                            |
//!
//! Statuses: `INPROGRESS`, `SUCCESSFUL`, `FAILED`, `STOPPED`; the context is the `name`, and
//! the `key` too when it fits Bitbucket's 40 characters (else a shortened, still unique key);
//! a push's or pull request's status carries its branch as `refname`, as upstream sends it.

use woodlark_plugin_sdk::forge::oauth;
use woodlark_plugin_sdk::forge::*;
use woodlark_plugin_sdk::json::{array_at, first_str, rfc3339_to_unix, str_at, u64_at};
use woodlark_plugin_sdk::serde_json::{Value, json};
use woodlark_plugin_sdk::{config, http};

/// A `src` folder listing: a page of `values` whose files are `commit_file`s.
const SRC: Listing = Listing {
    items: "/values",
    file_type: "commit_file",
    path: "/path",
};

struct Bitbucket;

woodlark_plugin_sdk::forge_adapter!(Bitbucket);

impl ForgeAdapter for Bitbucket {
    const OAUTH: Option<oauth::Endpoints> = Some(oauth::Endpoints {
        authorize: "/site/oauth2/authorize",
        token: "/site/oauth2/access_token",
        scope: "",
        basic_auth: true,
        default_root: WEB,
    });

    fn recognize(headers: &[Header]) -> bool {
        // Bitbucket Data Center sends `X-Event-Key` too, with `X-Request-Id`.
        if header(headers, "x-request-id").is_some() {
            return false;
        }
        match header(headers, "x-event-key") {
            Some(key) => {
                header(headers, "x-hook-uuid").is_some()
                    || key.starts_with("repo:")
                    || key.starts_with("pullrequest:")
            }
            None => false,
        }
    }

    fn parse_hook(req: HookRequest) -> Result<Outcome, PluginError> {
        let key = required_header(&req.headers, "X-Event-Key")?;
        let verified = verify_hmac_sha256(&req, "x-hub-signature")?;
        let v = json_payload(&req)?;
        let parsed = match key {
            "repo:push" => push(&v),
            "pullrequest:created"
            | "pullrequest:updated"
            | "pullrequest:fulfilled"
            | "pullrequest:rejected" => pull_request(key, &v),
            other => Err(format!("event {other:?} is not handled")),
        };
        Ok(match parsed {
            Ok(p) => build(repo_of(&v["repository"]), p, verified),
            Err(reason) => ignored(reason),
        })
    }

    fn repo_info(ctx: ApiContext, full_name: String) -> Result<Repo, PluginError> {
        let url = format!("{}/repositories/{}", api(), full_name);
        let v = ApiClient::bearer(&ctx).get_found(&url, || no_repo(&full_name))?;
        Ok(repo_of(&v))
    }

    fn file_at(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        path: String,
    ) -> Result<Option<Vec<u8>>, PluginError> {
        let url = format!(
            "{}/repositories/{}/src/{}/{}",
            api(),
            full_name,
            commit,
            http::encode_path(&path)
        );
        ApiClient::bearer(&ctx).raw_file(&url, Vec::new(), "Bitbucket src API")
    }

    fn dir_at(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        path: String,
    ) -> Result<Vec<String>, PluginError> {
        let url = format!(
            "{}/repositories/{}/src/{}/{}/?pagelen=100",
            api(),
            full_name,
            commit,
            http::encode_path(path.trim_end_matches('/'))
        );
        ApiClient::bearer(&ctx).files(&url, &SRC)
    }

    fn branches(ctx: ApiContext, full_name: String) -> Result<Vec<String>, PluginError> {
        let url = format!(
            "{}/repositories/{}/refs/branches?pagelen=100",
            api(),
            full_name
        );
        ApiClient::bearer(&ctx).names(&url, "/values", "/name")
    }

    fn post_status(
        ctx: ApiContext,
        full_name: String,
        commit: String,
        status: CommitStatus,
    ) -> Result<(), PluginError> {
        let url = format!(
            "{}/repositories/{}/commit/{}/statuses/build",
            api(),
            full_name,
            commit
        );
        // As upstream: a push's or pull request's status names the branch it built.
        let refname = (status.event == "push" || status.event.starts_with("pull_request"))
            .then(|| status.branch.clone())
            .filter(|b| !b.is_empty());
        let mut body = StatusFormat::BITBUCKET.body(status);
        body["key"] = status_key(&str_at(&body, "/key")).into();
        if let Some(refname) = refname {
            body["refname"] = refname.into();
        }
        http::send_json("POST", &url, auth_header(&ctx, "Bearer").as_deref(), &body).map(|_| ())
    }

    fn branch_head(
        ctx: ApiContext,
        full_name: String,
        branch: String,
    ) -> Result<CommitInfo, PluginError> {
        let url = format!(
            "{}/repositories/{}/refs/branches/{}",
            api(),
            full_name,
            http::encode(&branch)
        );
        let v = ApiClient::bearer(&ctx).get_found(&url, || no_branch(&full_name, &branch))?;
        // `author.raw` is "Name <email>".
        let raw = str_at(&v, "/target/author/raw");
        let (name, email) = match raw.split_once(" <") {
            Some((n, e)) => (n.to_string(), e.trim_end_matches('>').to_string()),
            None => (raw.clone(), String::new()),
        };
        let display = str_at(&v, "/target/author/user/display_name");
        Ok(CommitInfo {
            sha: str_at(&v, "/target/hash"),
            message: str_at(&v, "/target/message"),
            author: if display.is_empty() { name } else { display },
            author_email: email,
            author_avatar: str_at(&v, "/target/author/user/links/avatar/href"),
            timestamp: rfc3339_to_unix(&str_at(&v, "/target/date")),
            forge_url: str_at(&v, "/target/links/html/href"),
        })
    }

    /// Bitbucket signs deliveries with the hook's secret (`X-Hub-Signature`).
    fn create_hook(
        ctx: ApiContext,
        full_name: String,
        url: String,
        secret: String,
    ) -> Result<(), PluginError> {
        hooks(&ctx, &full_name).replace(&url, Some(&hook(&url, &secret)))
    }

    fn delete_hook(ctx: ApiContext, full_name: String, url: String) -> Result<(), PluginError> {
        hooks(&ctx, &full_name).replace(&url, None)
    }

    /// `GET /repositories/{full}/pullrequests/{id}/diffstat` (old and new path of each entry),
    /// following its `next` pages.
    fn changed_files(
        ctx: ApiContext,
        full_name: String,
        pr_number: u64,
    ) -> Result<Vec<String>, PluginError> {
        FileListApi::new("Bearer", "pull request", 50, "/values", ["/new/path", "/old/path"]).fetch(
            &ctx,
            &full_name,
            pr_number,
            |page| {
                format!(
                    "{}/repositories/{full_name}/pullrequests/{pr_number}/diffstat?pagelen=100&page={page}",
                    api()
                )
            },
            |v, _| !str_at(v, "/next").is_empty(),
        )
    }
    fn current_user(ctx: ApiContext) -> Result<ForgeUser, PluginError> {
        let client = ApiClient::bearer(&ctx);
        let user = client.get_found(&format!("{}/user", api()), || {
            denied("Bitbucket: no user for this token")
        })?;
        let emails = client.get_or_null(&format!("{}/user/emails", api()))?;
        let email = array_at(&emails, "/values")
            .iter()
            .find(|e| e["is_primary"] == true)
            .map(|e| str_at(e, "/email"))
            .unwrap_or_default();
        Ok(ForgeUser {
            remote_id: str_at(&user, "/uuid"),
            login: first_str(&user, &["/username", "/nickname"]),
            email,
            avatar_url: str_at(&user, "/links/avatar/href"),
        })
    }

    fn user_repos(
        ctx: ApiContext,
        page: u32,
        per_page: u32,
    ) -> Result<Vec<RepoWithPerm>, PluginError> {
        let url = format!(
            "{}/user/permissions/repositories?pagelen={}&page={}",
            api(),
            page_len(per_page, 100),
            page.max(1)
        );
        let list = ApiClient::bearer(&ctx).get_or_null(&url)?;
        Ok(array_at(&list, "/values")
            .iter()
            .map(|p| RepoWithPerm {
                repo: repo_of(&p["repository"]),
                perm: perm_of(&str_at(p, "/permission")),
            })
            .collect())
    }

    /// As upstream: the workspace's permission list filtered to the repository; none listed
    /// (or 404) is no access.
    fn repo_perm(ctx: ApiContext, full_name: String) -> Result<Perm, PluginError> {
        let workspace = full_name.split('/').next().unwrap_or_default();
        let url = format!(
            "{}/user/workspaces/{}/permissions/repositories?q={}",
            api(),
            http::encode(workspace),
            http::encode(&format!("repository.full_name=\"{full_name}\""))
        );
        let list = ApiClient::bearer(&ctx)
            .get_for_access(&url)?
            .unwrap_or(Value::Null);
        Ok(array_at(&list, "/values")
            .first()
            .map_or_else(|| perm_of(""), |p| perm_of(&str_at(p, "/permission"))))
    }

    fn user_orgs(ctx: ApiContext, page: u32, per_page: u32) -> Result<Vec<Team>, PluginError> {
        let url = format!(
            "{}/user/workspaces?pagelen={}&page={}",
            api(),
            page_len(per_page, 100),
            page.max(1)
        );
        let list = ApiClient::bearer(&ctx).get_or_null(&url)?;
        Ok(array_at(&list, "/values")
            .iter()
            .map(|a| &a["workspace"])
            .filter(|w| w.is_object())
            .map(|w| Team {
                login: str_at(w, "/slug"),
                avatar_url: str_at(w, "/links/avatar/href"),
            })
            .collect())
    }

    /// As upstream: the workspace's members, following `next`, for one whose nickname is
    /// `login`; `owner` is an admin.
    fn org_membership(ctx: ApiContext, org: String, login: String) -> Result<OrgPerm, PluginError> {
        let client = ApiClient::bearer(&ctx);
        let mut url = format!(
            "{}/workspaces/{}/permissions?pagelen=100",
            api(),
            http::encode(&org)
        );
        for _ in 0..MAX_MEMBER_PAGES {
            let page = client.get_or_null(&url)?;
            let found = array_at(&page, "/values").iter().find(|m| {
                str_at(m, "/user/nickname") == login || str_at(m, "/user/username") == login
            });
            if let Some(m) = found {
                let permission = str_at(m, "/permission");
                return Ok(OrgPerm {
                    member: !permission.is_empty(),
                    admin: permission == "owner",
                });
            }
            url = str_at(&page, "/next");
            if url.is_empty() {
                break;
            }
        }
        Ok(OrgPerm {
            member: false,
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
            "{}/repositories/{}/pullrequests?state=OPEN&pagelen={}&page={}",
            api(),
            full_name,
            page_len(per_page, 50),
            page.max(1)
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

    /// As upstream: `x-token-auth` and the token; anonymous without a token.
    fn netrc(ctx: ApiContext, clone_url: String) -> Result<NetrcInfo, PluginError> {
        let (login, password) = if ctx.token.is_empty() {
            (String::new(), String::new())
        } else {
            ("x-token-auth".to_string(), ctx.token)
        };
        oauth::netrc_for(&clone_url, login, password)
    }
}

/// Bitbucket Cloud's web root, where browsers sign in and tokens are issued.
const WEB: &str = "https://bitbucket.org";

/// A bound on the workspace member pages read for one membership check.
const MAX_MEMBER_PAGES: u32 = 50;

/// The longest build status `key` Bitbucket takes.
const MAX_KEY_LEN: usize = 40;

/// `pagelen` as the endpoint takes it: 1 to `max` (0: `max`).
fn page_len(n: u32, max: u32) -> u32 {
    if n == 0 { max } else { n.min(max) }
}

/// Upstream's permissions for Bitbucket's `admin`, `write` and `read` (anything listed can
/// read; nothing listed: no access).
fn perm_of(permission: &str) -> Perm {
    Perm {
        pull: !permission.is_empty(),
        push: matches!(permission, "write" | "admin"),
        admin: permission == "admin",
    }
}

/// The status `key` for `context`: the context itself when it fits 40 characters, else its
/// first 31 characters, `~` and 8 hex digits of its FNV-1a hash, so that two long contexts
/// sharing a prefix keep separate statuses.
fn status_key(context: &str) -> String {
    if context.chars().count() <= MAX_KEY_LEN {
        return context.to_string();
    }
    let hash = context.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let prefix: String = context.chars().take(MAX_KEY_LEN - 9).collect();
    format!("{prefix}~{hash:08x}")
}

fn api() -> String {
    config::get("api-url")
        .map(|u| u.trim_end_matches('/').to_string())
        .unwrap_or_else(|| "https://api.bitbucket.org/2.0".to_string())
}

/// The repository's webhooks (a paged `{"values": [{"uuid", "url"}]}` list).
fn hooks(ctx: &ApiContext, full_name: &str) -> HookApi {
    let list_url = format!("{}/repositories/{}/hooks", api(), full_name);
    HookApi::new(list_url, auth_header(ctx, "Bearer"))
        .items_at("/values")
        .url_at("/url")
        .id_at("/uuid")
}

/// The webhook `create-hook` registers: push and pull-request events, signed with `secret`.
fn hook(url: &str, secret: &str) -> Value {
    json!({
        "description": "woodlark",
        "url": url,
        "active": true,
        "secret": secret,
        "events": [
            "repo:push",
            "pullrequest:created",
            "pullrequest:updated",
            "pullrequest:fulfilled",
            "pullrequest:rejected",
        ],
    })
}

fn repo_of(r: &Value) -> Repo {
    let full = str_at(r, "/full_name");
    let (owner, name) = full.split_once('/').unwrap_or(("", full.as_str()));
    let web = first_str(r, &["/links/html/href"]);
    let mut repo = repo();
    repo.forge_remote_id = str_at(r, "/uuid");
    repo.owner = owner.to_string();
    repo.name = name.to_string();
    repo.full_name = full.clone();
    repo.avatar_url = first_str(r, &["/owner/links/avatar/href", "/links/avatar/href"]);
    repo.forge_url = web.clone();
    let origin = if web.is_empty() {
        "https://bitbucket.org".to_string()
    } else {
        web.trim_end_matches(&format!("/{full}")).to_string()
    };
    repo.clone_url = format!("{origin}/{full}.git");
    let host = origin
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    repo.clone_url_ssh = format!("git@{host}:{full}.git");
    repo.default_branch = str_at(r, "/mainbranch/name");
    repo.private = r
        .pointer("/is_private")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    repo
}

/// `Jane Doe <jane@example.com>` → `jane@example.com`.
fn email_of(raw: &str) -> String {
    match (raw.find('<'), raw.rfind('>')) {
        (Some(a), Some(b)) if a < b => raw[a + 1..b].to_string(),
        _ => String::new(),
    }
}

fn actor_login(a: &Value) -> String {
    first_str(a, &["/nickname", "/username", "/display_name"])
}

fn push(v: &Value) -> Result<Pipeline, String> {
    for change in array_at(v, "/push/changes") {
        let new = &change["new"];
        let hash = str_at(new, "/target/hash");
        if hash.is_empty() {
            continue; // deletion
        }
        let name = str_at(new, "/name");
        let kind = str_at(new, "/type");
        let (event, git_ref) = match kind.as_str() {
            "tag" | "annotated_tag" | "bookmark" => (Event::Tag, format!("refs/tags/{name}")),
            _ => (Event::Push, format!("refs/heads/{name}")),
        };
        let target = &new["target"];
        let mut p = pipeline(event);
        p.commit = hash;
        p.git_ref = git_ref;
        if event == Event::Push {
            p.branch = name.clone();
        }
        p.message = str_at(target, "/message");
        p.timestamp = rfc3339_to_unix(&str_at(target, "/date"));
        p.author = actor_login(&v["actor"]);
        p.author_email = email_of(&str_at(target, "/author/raw"));
        p.author_avatar = str_at(v, "/actor/links/avatar/href");
        p.sender = actor_login(&v["actor"]);
        p.forge_url = first_str(target, &["/links/html/href"]);
        return Ok(p);
    }
    Err("push without a new branch or tag head (deletion)".into())
}

fn pull_request(key: &str, v: &Value) -> Result<Pipeline, String> {
    let pr = &v["pullrequest"];
    let state = str_at(pr, "/state");
    // The PR's state decides, as in Woodpecker; the key only names the reason.
    let merged = state == "MERGED" || key == "pullrequest:fulfilled";
    let (event, reason) = match (key, state.as_str()) {
        (_, "MERGED") | ("pullrequest:fulfilled", _) => (Event::PullRequestClosed, "merged"),
        (_, "DECLINED") | ("pullrequest:rejected", _) => (Event::PullRequestClosed, "declined"),
        ("pullrequest:created", _) => (Event::PullRequest, "opened"),
        _ => (Event::PullRequest, "synchronize"),
    };
    let id = u64_at(pr, "/id").unwrap_or(0);
    let src = str_at(pr, "/source/branch/name");
    let dst = str_at(pr, "/destination/branch/name");
    let mut p = pipeline(event);
    p.event_reason = vec![reason.to_string()];
    p.commit = str_at(pr, "/source/commit/hash");
    p.git_ref = format!("refs/pull-requests/{id}/from");
    // The source branch, as Woodpecker sets it.
    p.branch = src.clone();
    if merged {
        // A merged PR builds its merge commit on the destination branch.
        p.commit = str_at(pr, "/merge_commit/hash");
        p.git_ref = format!("refs/heads/{dst}");
        p.branch = dst.clone();
    }
    p.refspec = format!("{src}:{dst}");
    p.title = str_at(pr, "/title");
    p.message = str_at(pr, "/title");
    p.timestamp = rfc3339_to_unix(&str_at(pr, "/updated_on"));
    // Woodpecker credits the account that triggered the event.
    p.author = actor_login(&v["actor"]);
    p.author_avatar = str_at(v, "/actor/links/avatar/href");
    p.sender = actor_login(&v["actor"]);
    p.forge_url = str_at(pr, "/links/html/href");
    p.pr_number = Some(id);
    p.from_fork = first_str(
        pr,
        &["/source/repository/uuid", "/source/repository/full_name"],
    ) != first_str(
        pr,
        &[
            "/destination/repository/uuid",
            "/destination/repository/full_name",
        ],
    );
    Ok(p)
}
