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
        ApiClient::bearer(&ctx).post_status(&url, &StatusFormat::BITBUCKET, status)
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
