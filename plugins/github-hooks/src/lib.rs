//! The GitHub adapter's webhook parsing, free of host calls: shared by the `forge-github`
//! component and the native benchmark baseline (`plugins/bench-native`). See `forge-github`
//! for the event table.

use woodlark_plugin_sdk::forge::*;
use woodlark_plugin_sdk::json::{
    Flag, Lenient, List, StrItem, Text, array_at, bool_at, first_str, rfc3339_to_unix, str_at,
    u64_at,
};
use woodlark_plugin_sdk::serde::Deserialize;
use woodlark_plugin_sdk::serde_json::Value;

/// The pure part of `parse-hook` (no host calls, so it also runs natively): payload →
/// outcome, with `signature_verified: false`.
///
/// Pushes, the hook sent most, are deserialized into typed structs (only the fields read,
/// strings borrowed from the body); the rarer events go through a `Value` tree.
pub fn parse_payload(event: &str, req: &HookRequest) -> Result<Outcome, PluginError> {
    if event == "push" {
        let bytes = payload_bytes(req)?;
        let Lenient(mut v) = payload_as::<Lenient<PushJson>>(&bytes)?;
        let Lenient(repository) = std::mem::take(&mut v.repository);
        return Ok(match push(v) {
            Ok(p) => build(repository.into(), p, false),
            Err(reason) => ignored(reason),
        });
    }
    let v = json_payload(req)?;
    let parsed = match event {
        "pull_request" => pull_request(&v),
        "release" => release(&v),
        "deployment" => deployment(&v),
        "ping" => Err("ping event".to_string()),
        other => Err(format!("event {other:?} is not handled")),
    };
    Ok(match parsed {
        Ok(p) => build(repo_of(&v["repository"]), p, false),
        Err(reason) => ignored(reason),
    })
}

/// A GitHub `repository` object (webhook or REST shape).
pub fn repo_of(r: &Value) -> Repo {
    Lenient::<RepoJson>::deserialize(r)
        .map(|Lenient(r)| r.into())
        .unwrap_or_else(|_| repo())
}

/// The fields of a `repository` object that [`Repo`] takes (missing or mistyped ones read
/// as empty, see `woodlark_plugin_sdk::json`).
#[derive(Default, Clone, Deserialize)]
#[serde(crate = "woodlark_plugin_sdk::serde", default)]
struct RepoJson<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    owner: Lenient<OwnerJson<'a>>,
    #[serde(borrow)]
    name: Text<'a>,
    #[serde(borrow)]
    full_name: Text<'a>,
    #[serde(borrow)]
    html_url: Text<'a>,
    #[serde(borrow)]
    clone_url: Text<'a>,
    #[serde(borrow)]
    ssh_url: Text<'a>,
    #[serde(borrow)]
    default_branch: Text<'a>,
    #[serde(borrow)]
    master_branch: Text<'a>,
    private: Flag,
}

#[derive(Default, Clone, Deserialize)]
#[serde(crate = "woodlark_plugin_sdk::serde", default)]
struct OwnerJson<'a> {
    #[serde(borrow)]
    login: Text<'a>,
    #[serde(borrow)]
    name: Text<'a>,
    #[serde(borrow)]
    avatar_url: Text<'a>,
}

/// The first non-empty of two fields (as `first_str`).
fn first(a: Text<'_>, b: Text<'_>) -> String {
    if a.as_str().is_empty() {
        b.into_string()
    } else {
        a.into_string()
    }
}

impl From<RepoJson<'_>> for Repo {
    fn from(r: RepoJson<'_>) -> Repo {
        let Lenient(owner) = r.owner;
        let mut repo = repo();
        repo.forge_remote_id = r.id.into_string();
        repo.owner = first(owner.login, owner.name);
        repo.name = r.name.into_string();
        repo.full_name = r.full_name.into_string();
        repo.avatar_url = owner.avatar_url.into_string();
        repo.forge_url = r.html_url.into_string();
        repo.clone_url = r.clone_url.into_string();
        repo.clone_url_ssh = r.ssh_url.into_string();
        repo.default_branch = first(r.default_branch, r.master_branch);
        repo.private = r.private.0;
        repo
    }
}

/// The fields of a push hook the parser reads.
#[derive(Default, Deserialize)]
#[serde(crate = "woodlark_plugin_sdk::serde", default)]
struct PushJson<'a> {
    deleted: Flag,
    #[serde(rename = "ref", borrow)]
    git_ref: Text<'a>,
    #[serde(borrow)]
    after: Text<'a>,
    #[serde(borrow)]
    base_ref: Text<'a>,
    #[serde(borrow)]
    compare: Text<'a>,
    #[serde(borrow)]
    head_commit: Lenient<HeadCommitJson<'a>>,
    #[serde(borrow)]
    sender: Lenient<UserJson<'a>>,
    #[serde(borrow)]
    commits: List<Lenient<CommitFilesJson<'a>>>,
    #[serde(borrow)]
    repository: Lenient<RepoJson<'a>>,
}

#[derive(Default, Deserialize)]
#[serde(crate = "woodlark_plugin_sdk::serde", default)]
struct HeadCommitJson<'a> {
    #[serde(borrow)]
    id: Text<'a>,
    #[serde(borrow)]
    message: Text<'a>,
    #[serde(borrow)]
    timestamp: Text<'a>,
    #[serde(borrow)]
    url: Text<'a>,
    #[serde(borrow)]
    author: Lenient<AuthorJson<'a>>,
}

#[derive(Default, Deserialize)]
#[serde(crate = "woodlark_plugin_sdk::serde", default)]
struct AuthorJson<'a> {
    #[serde(borrow)]
    email: Text<'a>,
    #[serde(borrow)]
    username: Text<'a>,
}

#[derive(Default, Deserialize)]
#[serde(crate = "woodlark_plugin_sdk::serde", default)]
struct UserJson<'a> {
    #[serde(borrow)]
    login: Text<'a>,
    #[serde(borrow)]
    avatar_url: Text<'a>,
}

#[derive(Default, Deserialize)]
#[serde(crate = "woodlark_plugin_sdk::serde", default)]
struct CommitFilesJson<'a> {
    #[serde(borrow)]
    added: List<StrItem<'a>>,
    #[serde(borrow)]
    modified: List<StrItem<'a>>,
    #[serde(borrow)]
    removed: List<StrItem<'a>>,
}

fn push(v: PushJson<'_>) -> Result<Pipeline, String> {
    if v.deleted.0 {
        return Err("branch or tag deleted".into());
    }
    let Lenient(head) = v.head_commit;
    let Lenient(author) = head.author;
    let Lenient(sender) = v.sender;
    let git_ref = v.git_ref.into_string();
    let mut p = pipeline(Event::Push);
    p.commit = first(head.id, v.after);
    p.message = head.message.into_string();
    p.timestamp = rfc3339_to_unix(head.timestamp.as_str());
    p.author = first(sender.login.clone(), author.username);
    p.author_email = author.email.into_string();
    p.author_avatar = sender.avatar_url.into_string();
    p.sender = sender.login.into_string();
    // The head commit's page, as Woodpecker links it (the compare view when there is none).
    p.forge_url = first(head.url, v.compare);
    if git_ref.starts_with("refs/tags/") {
        p.event = Event::Tag;
        // A tag's base branch, when GitHub knows it, lets `when: branch` filters work.
        p.branch = v
            .base_ref
            .as_str()
            .strip_prefix("refs/heads/")
            .unwrap_or("")
            .to_string();
    } else {
        p.branch = short_ref(&git_ref).to_string();
        let mut files: Vec<String> = v
            .commits
            .0
            .into_iter()
            .flat_map(|Lenient(c)| [c.added.0, c.modified.0, c.removed.0])
            .flatten()
            .filter_map(|StrItem(f)| f.map(|f| f.into_owned()))
            .collect();
        files.sort();
        files.dedup();
        p.changed_files = files;
    }
    p.git_ref = git_ref;
    Ok(p)
}

fn pull_request(v: &Value) -> Result<Pipeline, String> {
    let action = str_at(v, "/action");
    let event = match action.as_str() {
        "opened" | "reopened" | "synchronize" => Event::PullRequest,
        "closed" => Event::PullRequestClosed,
        "assigned" | "converted_to_draft" | "demilestoned" | "edited" | "labeled" | "locked"
        | "milestoned" | "ready_for_review" | "unassigned" | "unlabeled" | "unlocked" => {
            Event::PullRequestMetadata
        }
        other => return Err(format!("pull_request action {other:?} is not handled")),
    };
    let pr = &v["pull_request"];
    let number = u64_at(pr, "/number")
        .or_else(|| u64_at(v, "/number"))
        .unwrap_or(0);
    let mut p = pipeline(event);
    p.pr_labels = array_at(pr, "/labels")
        .iter()
        .map(|l| str_at(l, "/name"))
        .collect();
    p.event_reason = vec![pull_reason(
        event,
        &action,
        &p.pr_labels,
        bool_at(pr, "/merged"),
    )];
    p.commit = str_at(pr, "/head/sha");
    p.git_ref = format!("refs/pull/{number}/head");
    p.branch = str_at(pr, "/base/ref");
    p.refspec = format!("{}:{}", str_at(pr, "/head/ref"), str_at(pr, "/base/ref"));
    p.title = str_at(pr, "/title");
    p.message = str_at(pr, "/title");
    p.timestamp = rfc3339_to_unix(&str_at(pr, "/updated_at"));
    p.author = str_at(pr, "/user/login");
    p.author_avatar = str_at(pr, "/user/avatar_url");
    p.sender = str_at(v, "/sender/login");
    p.forge_url = str_at(pr, "/html_url");
    p.pr_number = Some(number);
    p.from_fork = str_at(pr, "/head/repo/id") != str_at(pr, "/base/repo/id");
    Ok(p)
}

/// The event reason of a pull request hook: label changes are named like the other forges
/// name them (`label_updated`, or `label_cleared` when no label is left), other metadata
/// actions keep GitHub's name, a merged close is `merged`, the rest the action itself.
fn pull_reason(event: Event, action: &str, labels: &[String], merged: bool) -> String {
    match (event, action) {
        (Event::PullRequestMetadata, "labeled" | "unlabeled") if labels.is_empty() => {
            "label_cleared".into()
        }
        (Event::PullRequestMetadata, "labeled" | "unlabeled") => "label_updated".into(),
        (Event::PullRequestClosed, _) if merged => "merged".into(),
        _ => action.to_string(),
    }
}

fn release(v: &Value) -> Result<Pipeline, String> {
    let action = str_at(v, "/action");
    if action != "released" {
        return Err(format!(
            "release action {action:?} is not handled (only \"released\")"
        ));
    }
    let r = &v["release"];
    let tag = str_at(r, "/tag_name");
    let title = first_str(r, &["/name", "/tag_name"]);
    let mut p = pipeline(Event::Release);
    p.event_reason = vec![action];
    p.git_ref = format!("refs/tags/{tag}");
    p.branch = str_at(r, "/target_commitish");
    p.title = title.clone();
    p.message = format!("created release {title}");
    p.timestamp = rfc3339_to_unix(&first_str(r, &["/published_at", "/created_at"]));
    p.author = str_at(r, "/author/login");
    p.author_avatar = str_at(r, "/author/avatar_url");
    p.sender = str_at(v, "/sender/login");
    p.forge_url = str_at(r, "/html_url");
    p.release = Some(ReleaseInfo {
        tag,
        title,
        prerelease: bool_at(r, "/prerelease"),
    });
    Ok(p)
}

fn deployment(v: &Value) -> Result<Pipeline, String> {
    let d = &v["deployment"];
    let mut p = pipeline(Event::Deployment);
    p.commit = str_at(d, "/sha");
    let (git_ref, branch) = deployment_ref(
        &str_at(d, "/ref"),
        &p.commit,
        &str_at(v, "/repository/default_branch"),
    );
    p.git_ref = git_ref;
    p.branch = branch;
    p.message = str_at(d, "/description");
    p.timestamp = rfc3339_to_unix(&str_at(d, "/created_at"));
    p.author = first_str(v, &["/sender/login", "/deployment/creator/login"]);
    p.author_avatar = str_at(v, "/sender/avatar_url");
    p.sender = str_at(v, "/sender/login");
    p.forge_url = str_at(d, "/url");
    p.deploy_to = str_at(d, "/environment");
    p.deploy_task = str_at(d, "/task");
    Ok(p)
}

/// A deployment's `ref` as a full ref plus its branch, decided as Woodpecker decides: a
/// commit id (or a prefix of the deployed commit, or nothing) means the default branch; a
/// bare name becomes `refs/heads/<name>` (GitHub does not say whether it names a tag); a full
/// ref stays as it is.
pub fn deployment_ref(raw: &str, commit: &str, default_branch: &str) -> (String, String) {
    if commit.starts_with(raw) {
        return (
            format!("refs/heads/{default_branch}"),
            default_branch.to_string(),
        );
    }
    if raw.starts_with("refs/") {
        return (raw.to_string(), short_ref(raw).to_string());
    }
    (format!("refs/heads/{raw}"), raw.to_string())
}

#[cfg(test)]
mod tests {
    //! The typed push parser against the `Value`-pointer reading it replaced (kept here as
    //! the reference), on the captured hook and on payloads with missing and mistyped fields.

    use super::*;
    use woodlark_plugin_sdk::headers::text;
    use woodlark_plugin_sdk::json::array_at;
    use woodlark_plugin_sdk::serde_json::{self, json};

    fn reference_repo(r: &Value) -> Repo {
        let mut repo = repo();
        repo.forge_remote_id = str_at(r, "/id");
        repo.owner = first_str(r, &["/owner/login", "/owner/name"]);
        repo.name = str_at(r, "/name");
        repo.full_name = str_at(r, "/full_name");
        repo.avatar_url = str_at(r, "/owner/avatar_url");
        repo.forge_url = str_at(r, "/html_url");
        repo.clone_url = str_at(r, "/clone_url");
        repo.clone_url_ssh = str_at(r, "/ssh_url");
        repo.default_branch = first_str(r, &["/default_branch", "/master_branch"]);
        repo.private = bool_at(r, "/private");
        repo
    }

    fn reference_push(v: &Value) -> Result<Pipeline, String> {
        if bool_at(v, "/deleted") {
            return Err("branch or tag deleted".into());
        }
        let git_ref = str_at(v, "/ref");
        let head = if v["head_commit"].is_object() {
            &v["head_commit"]
        } else {
            &Value::Null
        };
        let mut p = pipeline(Event::Push);
        p.commit = first_str(v, &["/head_commit/id", "/after"]);
        p.git_ref = git_ref.clone();
        p.message = str_at(head, "/message");
        p.timestamp = rfc3339_to_unix(&str_at(head, "/timestamp"));
        p.author = first_str(v, &["/sender/login", "/head_commit/author/username"]);
        p.author_email = first_str(head, &["/author/email"]);
        p.author_avatar = str_at(v, "/sender/avatar_url");
        p.sender = str_at(v, "/sender/login");
        p.forge_url = first_str(v, &["/head_commit/url", "/compare"]);
        if git_ref.starts_with("refs/tags/") {
            p.event = Event::Tag;
            p.branch = str_at(v, "/base_ref")
                .strip_prefix("refs/heads/")
                .unwrap_or("")
                .to_string();
        } else {
            p.branch = short_ref(&git_ref).to_string();
            p.changed_files = changed_files(array_at(v, "/commits"));
        }
        Ok(p)
    }

    fn reference(body: &[u8]) -> String {
        let v: Value = serde_json::from_slice(body).unwrap();
        let out = match reference_push(&v) {
            Ok(p) => build(reference_repo(&v["repository"]), p, false),
            Err(reason) => ignored(reason),
        };
        format!("{out:?}")
    }

    fn typed(body: &[u8], form: bool) -> String {
        let (ct, body) = if form {
            let enc: String = body
                .iter()
                .map(|b| format!("%{b:02X}"))
                .collect::<Vec<_>>()
                .concat();
            (
                "application/x-www-form-urlencoded",
                format!("payload={enc}").into_bytes(),
            )
        } else {
            ("application/json", body.to_vec())
        };
        let req = HookRequest {
            method: "POST".into(),
            path_and_query: "/api/hook".into(),
            headers: vec![text("content-type", ct), text("x-github-event", "push")],
            body,
        };
        format!("{:?}", parse_payload("push", &req).unwrap())
    }

    fn same(v: Value) {
        let body = serde_json::to_vec(&v).unwrap();
        assert_eq!(typed(&body, false), reference(&body), "payload {v}");
        assert_eq!(typed(&body, true), reference(&body), "form payload {v}");
    }

    #[test]
    fn typed_push_reads_like_the_value_reference() {
        let fixture =
            include_bytes!("../../../core/plugin-host/src/tests/fixtures/github-push.json");
        assert_eq!(typed(fixture, false), reference(fixture));
        let v: Value = serde_json::from_slice(fixture).unwrap();
        same(v.clone());
        let mut tag = v.clone();
        tag["ref"] = json!("refs/tags/v1.2");
        tag["base_ref"] = json!("refs/heads/main");
        same(tag);
        let mut deleted = v.clone();
        deleted["deleted"] = json!(true);
        same(deleted);
        let mut mistyped = v.clone();
        mistyped["head_commit"] = json!(null);
        mistyped["repository"]["id"] = json!(1.5e3);
        mistyped["repository"]["owner"] = json!("someone");
        mistyped["repository"]["private"] = json!("yes");
        mistyped["sender"] = json!([1, 2]);
        mistyped["commits"] = json!([{"added": ["a", 3, null, "a\"b"], "removed": "x"}, 7, null]);
        mistyped["ref"] = json!({"nested": [true]});
        same(mistyped);
        same(json!({}));
        same(json!([]));
        same(json!("push"));
        same(json!({"ref": "refs/heads/m\u{e9}\\n", "after": 12, "compare": false}));
    }
}
