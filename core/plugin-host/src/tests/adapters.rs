//! One test per event type per first-party forge adapter, each parsed through the real
//! component and checked field by field against what upstream Woodpecker's parser sets for
//! it (branch, ref, commit, event, reason, PR number, fork, title, message, sender, author,
//! links, changed files). Variants of a fixture are made by editing its JSON.

use serde_json::{Value, json};

use super::*;
use crate::types::*;

fn edit(name: &str, f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(&fixture(name)).unwrap();
    f(&mut v);
    serde_json::to_vec(&v).unwrap()
}

/// A host with every first-party forge adapter, no secrets.
async fn adapters() -> (tempfile::TempDir, PluginHost) {
    let files = [
        ("github", "forge-github"),
        ("gitea", "forge-gitea"),
        ("forgejo", "forge-forgejo"),
        ("gitlab", "forge-gitlab"),
        ("bitbucket", "forge-bitbucket"),
        ("bitbucket-dc", "forge-bitbucket-dc"),
    ];
    let copies: Vec<(String, &str)> = files
        .iter()
        .map(|(n, c)| (format!("{n}.wasm"), *c))
        .collect();
    let refs: Vec<(&str, &str)> = copies.iter().map(|(f, c)| (f.as_str(), *c)).collect();
    let dir = plugin_dir(&refs);
    let cfg = config(
        dir.path(),
        files
            .iter()
            .map(|(n, _)| (*n, instance(&format!("{n}.wasm"))))
            .collect(),
    );
    let host = host(cfg, MapSecrets::default()).await;
    (dir, host)
}

async fn outcome(plugin: &str, headers: &[(&str, &str)], body: Vec<u8>) -> HookOutcome {
    let (_d, host) = adapters().await;
    host.parse_hook(plugin, HookRequest::post("/api/hook", headers, body))
        .await
        .unwrap()
}

async fn parsed(plugin: &str, headers: &[(&str, &str)], body: Vec<u8>) -> HookBuild {
    match outcome(plugin, headers, body).await {
        HookOutcome::Build(b) => *b,
        HookOutcome::Ignored(r) => panic!("expected a build, got ignored: {r}"),
    }
}

async fn ignored(plugin: &str, headers: &[(&str, &str)], body: Vec<u8>) -> String {
    match outcome(plugin, headers, body).await {
        HookOutcome::Ignored(r) => r,
        HookOutcome::Build(b) => panic!("expected ignored, got {:?}", b.pipeline.event),
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

// ---- GitHub ----

fn gh(event: &str) -> Vec<(&'static str, String)> {
    vec![
        ("X-GitHub-Event", event.to_string()),
        ("Content-Type", "application/json".to_string()),
    ]
}

async fn github(event: &str, body: Vec<u8>) -> Pipeline {
    let hs = gh(event);
    let hs: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    parsed("github", &hs, body).await.pipeline
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_push() {
    let p = github("push", fixture("github-push.json")).await;
    assert_eq!(p.event, Event::Push);
    assert_eq!(p.commit, "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c");
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/heads/main", "main")
    );
    assert_eq!(
        (p.author.as_str(), p.sender.as_str()),
        ("octocat", "octocat")
    );
    // Upstream links the head commit, not the compare view.
    assert_eq!(
        p.forge_url,
        "https://github.com/octocat/hello-world/commit/0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"
    );
    assert_eq!(p.changed_files, strings(&["README.md", "docs/new.md"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_tag() {
    let body = edit("github-push.json", |v| {
        v["ref"] = json!("refs/tags/v1.2.0");
        v["base_ref"] = json!("refs/heads/main");
    });
    let p = github("push", body).await;
    assert_eq!(p.event, Event::Tag);
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/tags/v1.2.0", "main")
    );
    assert_eq!(p.commit, "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c");
    assert!(p.changed_files.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_pull_request() {
    let body = edit("github-pull-request.json", |v| {
        v["action"] = json!("synchronize")
    });
    let p = github("pull_request", body).await;
    assert_eq!(p.event, Event::PullRequest);
    assert_eq!(p.event_reason, strings(&["synchronize"]));
    assert_eq!(p.commit, "ec26c3e57ca3a959ca5aad62de7213c562f8c821");
    assert_eq!(p.git_ref, "refs/pull/2/head");
    // GitHub PRs keep the target branch (upstream does the same for this forge).
    assert_eq!(
        (p.branch.as_str(), p.refspec.as_str()),
        ("main", "changes:main")
    );
    assert_eq!(p.pr_number, Some(2));
    assert_eq!((p.author.as_str(), p.sender.as_str()), ("hubot", "hubot"));
    assert_eq!(p.title, "Update the README with new information.");
    assert_eq!(p.message, p.title);
    assert!(p.from_fork);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_pull_request_closed() {
    let body = edit("github-pull-request.json", |v| {
        v["action"] = json!("closed");
        v["pull_request"]["merged"] = json!(true);
    });
    let p = github("pull_request", body).await;
    assert_eq!(p.event, Event::PullRequestClosed);
    assert_eq!(p.event_reason, strings(&["merged"]));
    assert_eq!(p.git_ref, "refs/pull/2/head");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_pull_request_metadata() {
    let p = github(
        "pull_request",
        edit("github-pull-request.json", |v| {
            v["action"] = json!("unlabeled")
        }),
    )
    .await;
    assert_eq!(p.event, Event::PullRequestMetadata);
    assert_eq!(p.event_reason, strings(&["label_updated"]));
    assert_eq!(p.pr_labels, strings(&["bug", "docs"]));
    let p = github(
        "pull_request",
        edit("github-pull-request.json", |v| {
            v["action"] = json!("unlabeled");
            v["pull_request"]["labels"] = json!([]);
        }),
    )
    .await;
    assert_eq!(p.event_reason, strings(&["label_cleared"]));
    // Other metadata actions keep GitHub's name, as upstream does.
    for action in ["demilestoned", "unassigned", "ready_for_review", "locked"] {
        let p = github(
            "pull_request",
            edit("github-pull-request.json", |v| v["action"] = json!(action)),
        )
        .await;
        assert_eq!(
            (p.event, p.event_reason),
            (Event::PullRequestMetadata, strings(&[action]))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_release() {
    let p = github("release", fixture("github-release.json")).await;
    assert_eq!(p.event, Event::Release);
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/tags/v1.1.0", "main")
    );
    assert_eq!(p.title, "Version 1.1");
    assert_eq!(
        (p.author.as_str(), p.sender.as_str()),
        ("octocat", "octocat")
    );
    assert_eq!(
        p.forge_url,
        "https://github.com/octocat/hello-world/releases/tag/v1.1.0"
    );
    let r = p.release.unwrap();
    assert_eq!((r.tag.as_str(), r.prerelease), ("v1.1.0", true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_deployment() {
    // A bare branch name becomes a full ref.
    let p = github("deployment", fixture("github-deployment.json")).await;
    assert_eq!(p.event, Event::Deployment);
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/heads/main", "main")
    );
    assert_eq!(p.commit, "f95f852bd8fca8fcc58a9a2d6c842781e32a215e");
    assert_eq!(
        (p.deploy_to.as_str(), p.deploy_task.as_str()),
        ("production", "deploy:migrations")
    );
    assert_eq!(p.message, "Deploy request from hubot");
    // A (short) commit id means the default branch; a full ref stays.
    let body = edit("github-deployment.json", |v| {
        v["deployment"]["ref"] = json!("f95f852");
        v["repository"]["default_branch"] = json!("trunk");
    });
    let p = github("deployment", body).await;
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/heads/trunk", "trunk")
    );
    let body = edit("github-deployment.json", |v| {
        v["deployment"]["ref"] = json!("refs/tags/v1.0.0")
    });
    let p = github("deployment", body).await;
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/tags/v1.0.0", "v1.0.0")
    );
}

// ---- Gitea and Forgejo (one parser, two header sets) ----

fn family(plugin: &str, event: &'static str) -> Vec<(&'static str, &'static str)> {
    let key = if plugin == "forgejo" {
        "X-Forgejo-Event"
    } else {
        "X-Gitea-Event"
    };
    vec![(key, event), ("Content-Type", "application/json")]
}

async fn gitea_push(plugin: &str) {
    let b = parsed(plugin, &family(plugin, "push"), fixture("gitea-push.json")).await;
    let p = b.pipeline;
    assert_eq!(p.event, Event::Push);
    assert_eq!(p.commit, "bffeb74224043ba2feb48d137756c8a9331c449a");
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/heads/develop", "develop")
    );
    assert_eq!(p.message, "Webhooks Yay!\n");
    assert_eq!((p.author.as_str(), p.sender.as_str()), ("gitea", "gitea"));
    assert_eq!(p.author_email, "someone@gitea.io");
    // One commit: its own page (upstream), not the compare view.
    assert_eq!(
        p.forge_url,
        "https://gitea.example.com/gitea/webhooks/commit/bffeb74224043ba2feb48d137756c8a9331c449a"
    );
    assert_eq!(
        p.changed_files,
        strings(&["CHANGELOG.md", "main.go", "old.txt"])
    );
}

async fn gitea_tag(plugin: &str) {
    let b = parsed(
        plugin,
        &family(plugin, "create"),
        fixture("gitea-create-tag.json"),
    )
    .await;
    let p = b.pipeline;
    assert_eq!(p.event, Event::Tag);
    assert_eq!(p.commit, "bffeb74224043ba2feb48d137756c8a9331c449a");
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/tags/v1.0.0", "")
    );
    assert_eq!((p.author.as_str(), p.sender.as_str()), ("gitea", "gitea"));
    assert_eq!(
        p.forge_url,
        "https://gitea.example.com/gitea/webhooks/src/tag/v1.0.0"
    );
}

async fn gitea_pull_request(plugin: &str) {
    let body = edit("gitea-pull-request.json", |v| {
        v["action"] = json!("synchronized");
        v["sender"]["email"] = json!("bob@example.com");
        v["sender"]["login"] = json!("bob");
        v["pull_request"]["head"]["repo_id"] = json!(141);
    });
    let p = parsed(plugin, &family(plugin, "pull_request"), body)
        .await
        .pipeline;
    assert_eq!(p.event, Event::PullRequest);
    assert_eq!(p.commit, "c0ffee0d029cb852e4844d9c718537df08844e03");
    assert_eq!(p.git_ref, "refs/pull/5/head");
    assert_eq!(
        (p.branch.as_str(), p.refspec.as_str()),
        ("main", "feature:main")
    );
    assert_eq!(p.pr_number, Some(5));
    // The PR's poster is the author; the e-mail is the sender's (as upstream).
    assert_eq!((p.author.as_str(), p.sender.as_str()), ("alice", "bob"));
    assert_eq!(p.author_email, "bob@example.com");
    assert_eq!(
        p.forge_url,
        "https://gitea.example.com/gitea/webhooks/pulls/5"
    );
    assert_eq!(p.pr_labels, strings(&["enhancement"]));
    assert!(p.from_fork);
}

async fn gitea_pull_request_closed(plugin: &str) {
    let body = edit("gitea-pull-request.json", |v| {
        v["action"] = json!("closed");
        v["pull_request"]["merged"] = json!(true);
    });
    let p = parsed(plugin, &family(plugin, "pull_request"), body)
        .await
        .pipeline;
    assert_eq!(
        (p.event, p.event_reason),
        (Event::PullRequestClosed, strings(&["merged"]))
    );
    assert!(!p.from_fork);
}

async fn gitea_pull_request_metadata(plugin: &str) {
    let body = edit("gitea-pull-request.json", |v| {
        v["action"] = json!("label_cleared")
    });
    let p = parsed(plugin, &family(plugin, "pull_request"), body)
        .await
        .pipeline;
    assert_eq!(p.event, Event::PullRequestMetadata);
    assert_eq!(p.event_reason, strings(&["label_cleared"]));
    assert!(p.pr_labels.is_empty());
    let body = edit("gitea-pull-request.json", |v| v["action"] = json!("edited"));
    let p = parsed(plugin, &family(plugin, "pull_request"), body)
        .await
        .pipeline;
    assert_eq!(
        (p.event, p.event_reason),
        (Event::PullRequestMetadata, strings(&["edited"]))
    );
}

async fn gitea_release(plugin: &str) {
    let body = edit("gitea-release.json", |v| {
        v["sender"]["login"] = json!("releaser");
        v["sender"]["email"] = json!("rel@example.com");
    });
    let p = parsed(plugin, &family(plugin, "release"), body)
        .await
        .pipeline;
    assert_eq!(p.event, Event::Release);
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/tags/v2.0.0", "main")
    );
    assert_eq!(p.title, "Two");
    // The account that published it (upstream), not the release's author field.
    assert_eq!(
        (p.author.as_str(), p.sender.as_str()),
        ("releaser", "releaser")
    );
    assert_eq!(p.author_email, "rel@example.com");
    assert_eq!(
        p.forge_url,
        "https://gitea.example.com/gitea/webhooks/releases/tag/v2.0.0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_events_push() {
    gitea_push("gitea").await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_events_tag() {
    gitea_tag("gitea").await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_events_pull_request() {
    gitea_pull_request("gitea").await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_events_pull_request_closed() {
    gitea_pull_request_closed("gitea").await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_events_pull_request_metadata() {
    gitea_pull_request_metadata("gitea").await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_events_release() {
    gitea_release("gitea").await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgejo_events_push() {
    gitea_push("forgejo").await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgejo_events_tag() {
    gitea_tag("forgejo").await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgejo_events_pull_request() {
    gitea_pull_request("forgejo").await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgejo_events_pull_request_closed() {
    gitea_pull_request_closed("forgejo").await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgejo_events_pull_request_metadata() {
    gitea_pull_request_metadata("forgejo").await;
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgejo_events_release() {
    gitea_release("forgejo").await;
}

// ---- GitLab ----

async fn gitlab(event: &'static str, body: Vec<u8>) -> HookBuild {
    parsed(
        "gitlab",
        &[
            ("X-Gitlab-Event", event),
            ("Content-Type", "application/json"),
        ],
        body,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_push() {
    let p = gitlab("Push Hook", fixture("gitlab-push.json"))
        .await
        .pipeline;
    assert_eq!(p.event, Event::Push);
    assert_eq!(p.commit, "da1560886d4f094c3e6c9ef40349f7d38b5d27d7");
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/heads/master", "master")
    );
    assert_eq!(p.message, "fixed readme");
    assert_eq!((p.author.as_str(), p.sender.as_str()), ("jsmith", "jsmith"));
    // The head commit's author, as upstream takes it.
    assert_eq!(p.author_email, "gitlabdev@dv6700.(none)");
    let body = edit("gitlab-push.json", |v| {
        v["total_commits_count"] = json!(0);
        v["commits"] = json!([]);
    });
    let (_d, host) = adapters().await;
    let o = host
        .parse_hook(
            "gitlab",
            HookRequest::post("/api/hook", &[("X-Gitlab-Event", "Push Hook")], body),
        )
        .await
        .unwrap();
    assert!(matches!(o, HookOutcome::Ignored(r) if r == "push without commits"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_tag() {
    let b = gitlab("Tag Push Hook", fixture("gitlab-tag-push.json")).await;
    let p = b.pipeline;
    assert_eq!(p.event, Event::Tag);
    // The tagged commit, not the annotated tag's object (`after`).
    assert_eq!(p.commit, "82b3d5ae55f7080f1e6022629cdb57bfae7cccc7");
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/tags/v1.0.0", "")
    );
    assert_eq!(p.message, "Release 1.0.0");
    assert_eq!(p.author, "jsmith");
    assert_eq!(
        p.forge_url,
        "http://example.com/jsmith/example/-/tags/v1.0.0"
    );
    assert_eq!(b.repo.full_name, "jsmith/example");
    let body = edit("gitlab-tag-push.json", |v| {
        v["after"] = json!("0000000000000000000000000000000000000000");
        v["checkout_sha"] = Value::Null;
    });
    assert_eq!(
        ignored("gitlab", &[("X-Gitlab-Event", "Tag Push Hook")], body).await,
        "tag deleted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_merge_request() {
    let body = edit("gitlab-merge-request.json", |v| {
        v["object_attributes"]["action"] = json!("update");
        v["object_attributes"]["oldrev"] = json!("0a1b2c3d4e5f60718293a4b5c6d7e8f901234567");
    });
    let b = gitlab("Merge Request Hook", body).await;
    let p = b.pipeline;
    assert_eq!(p.event, Event::PullRequest);
    assert_eq!(p.commit, "da1560886d4f094c3e6c9ef40349f7d38b5d27d7");
    assert_eq!(p.git_ref, "refs/merge-requests/1/head");
    // The source branch, as upstream sets it for merge requests.
    assert_eq!(
        (p.branch.as_str(), p.refspec.as_str()),
        ("ms-viewport", "ms-viewport:master")
    );
    assert_eq!(p.pr_number, Some(1));
    assert_eq!(p.title, "MS-Viewport");
    assert_eq!(p.message, "fixed readme");
    assert_eq!((p.author.as_str(), p.sender.as_str()), ("root", "root"));
    assert_eq!(p.forge_url, "http://example.com/diaspora/merge_requests/1");
    assert!(p.from_fork);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_merge_request_closed() {
    let body = edit("gitlab-merge-request.json", |v| {
        v["object_attributes"]["action"] = json!("merge");
        v["object_attributes"]["state"] = json!("merged");
    });
    let p = gitlab("Merge Request Hook", body).await.pipeline;
    assert_eq!(
        (p.event, p.event_reason),
        (Event::PullRequestClosed, strings(&["merged"]))
    );
    assert_eq!(p.branch, "ms-viewport");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_merge_request_metadata() {
    let body = edit("gitlab-merge-request.json", |v| {
        v["object_attributes"]["action"] = json!("update");
        v["changes"] = json!({
            "title": {"previous": "Old", "current": "MS-Viewport"},
            "labels": {"previous": [], "current": [{"id": 206, "title": "API"}]},
            "reviewers": {"previous": [], "current": [{"id": 2, "username": "rev"}]},
            "milestone_id": {"previous": null, "current": 3}
        });
    });
    let p = gitlab("Merge Request Hook", body).await.pipeline;
    assert_eq!(p.event, Event::PullRequestMetadata);
    assert_eq!(
        p.event_reason,
        strings(&[
            "milestoned",
            "title_edited",
            "label_added",
            "review_requested"
        ])
    );
    // New commits on a closed MR are not a PR run (upstream): metadata without changes.
    let body = edit("gitlab-merge-request.json", |v| {
        v["object_attributes"]["action"] = json!("update");
        v["object_attributes"]["state"] = json!("closed");
        v["object_attributes"]["oldrev"] = json!("0a1b2c3d");
    });
    assert_eq!(
        ignored("gitlab", &[("X-Gitlab-Event", "Merge Request Hook")], body).await,
        "merge request update without supported changes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_release() {
    let p = gitlab("Release Hook", fixture("gitlab-release.json"))
        .await
        .pipeline;
    assert_eq!(p.event, Event::Release);
    assert_eq!(p.commit, "ee0f691d5d6b1afb2d3f4a4dc3e6d2d2b6c3f0a9");
    assert_eq!(p.git_ref, "refs/tags/v1.1");
    assert_eq!(
        (p.author.as_str(), p.sender.as_str()),
        ("Example User", "Example User")
    );
    assert_eq!(p.author_email, "user@example.com");
    assert_eq!(
        p.forge_url,
        "https://example.com/gitlab-org/release-webhook-example/-/releases/v1.1"
    );
}

// ---- Bitbucket Cloud ----

async fn bitbucket(key: &'static str, body: Vec<u8>) -> HookBuild {
    parsed(
        "bitbucket",
        &[
            ("X-Event-Key", key),
            ("X-Hook-UUID", "0b7f5a4e-1111-4c1e-9a0e-123456789abc"),
        ],
        body,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_push() {
    let p = bitbucket("repo:push", fixture("bitbucket-push.json"))
        .await
        .pipeline;
    assert_eq!(p.event, Event::Push);
    assert_eq!(p.commit, "709d658dc5b6d6afcd46049c2f332ee3f515a67d");
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/heads/main", "main")
    );
    assert_eq!(p.message, "Add build badge\n");
    assert_eq!(p.author_email, "ada@example.com");
    assert_eq!((p.author.as_str(), p.sender.as_str()), ("ada", "ada"));
    assert_eq!(
        p.forge_url,
        "https://bitbucket.org/workspace1/repo1/commits/709d658dc5b6d6afcd46049c2f332ee3f515a67d"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_tag() {
    let body = edit("bitbucket-push.json", |v| {
        v["push"]["changes"][0]["new"]["type"] = json!("annotated_tag");
        v["push"]["changes"][0]["new"]["name"] = json!("v3.0");
    });
    let p = bitbucket("repo:push", body).await.pipeline;
    assert_eq!(p.event, Event::Tag);
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/tags/v3.0", "")
    );
    assert_eq!(p.commit, "709d658dc5b6d6afcd46049c2f332ee3f515a67d");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_pull_request() {
    let b = bitbucket("pullrequest:created", fixture("bitbucket-pr-created.json")).await;
    let p = b.pipeline;
    assert_eq!(p.event, Event::PullRequest);
    assert_eq!(p.event_reason, strings(&["opened"]));
    assert_eq!(p.commit, "1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6e5");
    assert_eq!(p.git_ref, "refs/pull-requests/12/from");
    // The source branch, as upstream sets it.
    assert_eq!(
        (p.branch.as_str(), p.refspec.as_str()),
        ("feature/sizing", "feature/sizing:main")
    );
    assert_eq!(p.pr_number, Some(12));
    assert_eq!(
        (p.title.as_str(), p.message.as_str()),
        ("Add widget sizing", "Add widget sizing")
    );
    // Upstream credits the actor, not the PR's author.
    assert_eq!((p.author.as_str(), p.sender.as_str()), ("emma", "emma"));
    assert!(p.author_avatar.ends_with("/emma.png"));
    assert_eq!(
        p.forge_url,
        "https://bitbucket.org/acme/widget/pull-requests/12"
    );
    assert!(p.from_fork);
    assert_eq!(b.repo.full_name, "acme/widget");
    assert_eq!(
        b.repo.avatar_url,
        "https://bitbucket.org/account/acme/avatar/"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_pull_request_closed() {
    // Merged: the merge commit on the destination branch.
    let p = bitbucket(
        "pullrequest:fulfilled",
        fixture("bitbucket-pr-fulfilled.json"),
    )
    .await
    .pipeline;
    assert_eq!(
        (p.event, p.event_reason),
        (Event::PullRequestClosed, strings(&["merged"]))
    );
    assert_eq!(p.commit, "aa11bb22cc33");
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/heads/main", "main")
    );
    // Declined: the source head, on the source branch.
    let body = edit("bitbucket-pr-created.json", |v| {
        v["pullrequest"]["state"] = json!("DECLINED")
    });
    let p = bitbucket("pullrequest:rejected", body).await.pipeline;
    assert_eq!(
        (p.event, p.event_reason),
        (Event::PullRequestClosed, strings(&["declined"]))
    );
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/pull-requests/12/from", "feature/sizing")
    );
}

// ---- Bitbucket Data Center ----

async fn dc_outcome(key: &'static str, body: Vec<u8>) -> HookOutcome {
    outcome(
        "bitbucket-dc",
        &[
            ("X-Event-Key", key),
            ("X-Request-Id", "c5a1b7a2-6f6e-4b8e-9d1a-2b3c4d5e6f70"),
            ("Content-Type", "application/json; charset=utf-8"),
        ],
        body,
    )
    .await
}

async fn dc(key: &'static str, body: Vec<u8>) -> HookBuild {
    match dc_outcome(key, body).await {
        HookOutcome::Build(b) => *b,
        HookOutcome::Ignored(r) => panic!("expected a build, got ignored: {r}"),
    }
}

fn dc_pr(key: &str) -> Vec<u8> {
    edit("bitbucket-dc-pr-opened.json", |v| {
        v["eventKey"] = json!(key)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_dc_push() {
    let b = dc(
        "repo:refs_changed",
        fixture("bitbucket-dc-refs-changed.json"),
    )
    .await;
    let (r, p) = (b.repo, b.pipeline);
    assert_eq!(
        (r.forge_remote_id.as_str(), r.full_name.as_str()),
        ("84", "ACME/widget")
    );
    assert_eq!((r.owner.as_str(), r.name.as_str()), ("ACME", "widget"));
    assert_eq!(
        r.clone_url,
        "https://bitbucket.example.com/scm/acme/widget.git"
    );
    assert_eq!(
        r.clone_url_ssh,
        "ssh://git@bitbucket.example.com:7999/acme/widget.git"
    );
    assert_eq!(
        r.forge_url,
        "https://bitbucket.example.com/projects/ACME/repos/widget/browse"
    );
    assert!(r.private);
    assert_eq!(p.event, Event::Push);
    assert_eq!(p.commit, "178864a7d521b6f5e720b386b2c2b0ef8563e0dc");
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/heads/main", "main")
    );
    assert_eq!((p.author.as_str(), p.sender.as_str()), ("jdoe", "jdoe"));
    assert_eq!(p.author_email, "jdoe@example.com");
    assert_eq!(
        p.author_avatar,
        "https://bitbucket.example.com/users/jdoe/avatar.png"
    );
    assert_eq!(p.timestamp, 1_714_564_800);
    assert_eq!(
        p.forge_url,
        "https://bitbucket.example.com/projects/ACME/repos/widget/commits/178864a7d521b6f5e720b386b2c2b0ef8563e0dc"
    );
    assert!(!b.signature_verified);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_dc_tag() {
    let body = edit("bitbucket-dc-refs-changed.json", |v| {
        v["changes"][0] = json!({
            "ref": {"id": "refs/tags/v1.0", "displayId": "v1.0", "type": "TAG"},
            "refId": "refs/tags/v1.0",
            "fromHash": "0000000000000000000000000000000000000000",
            "toHash": "6f7e8d9c0b1a2938475665748392a1b0c9d8e7f6",
            "type": "ADD"
        })
    });
    let p = dc("repo:refs_changed", body).await.pipeline;
    assert_eq!(p.event, Event::Tag);
    assert_eq!(
        (p.git_ref.as_str(), p.branch.as_str()),
        ("refs/tags/v1.0", "")
    );
    assert_eq!(p.commit, "6f7e8d9c0b1a2938475665748392a1b0c9d8e7f6");
    assert_eq!(
        p.forge_url,
        "https://bitbucket.example.com/projects/ACME/repos/widget/browse?at=refs%2Ftags%2Fv1.0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_dc_branch_deleted() {
    let body = edit("bitbucket-dc-refs-changed.json", |v| {
        v["changes"][0]["toHash"] = json!("0000000000000000000000000000000000000000");
        v["changes"][0]["type"] = json!("DELETE");
    });
    let o = dc_outcome("repo:refs_changed", body).await;
    assert!(matches!(o, HookOutcome::Ignored(r) if r == "branch deleted"));
}

/// The fields every PR event shares.
fn assert_dc_pr(p: &Pipeline) {
    assert_eq!(p.commit, "ef8755f06ee4b28c96a847a95cb8ec8ed6ddd1ca");
    assert_eq!(p.git_ref, "refs/pull-requests/7/from");
    assert_eq!(
        (p.branch.as_str(), p.refspec.as_str()),
        ("feature/sizing", "feature/sizing:main")
    );
    assert_eq!(p.pr_number, Some(7));
    assert_eq!(
        (p.title.as_str(), p.message.as_str()),
        ("Add widget sizing", "Add widget sizing")
    );
    assert_eq!((p.author.as_str(), p.sender.as_str()), ("jdoe", "jdoe"));
    assert!(p.from_fork);
    assert_eq!(
        p.forge_url,
        "https://bitbucket.example.com/projects/~JDOE/repos/widget/commits/ef8755f06ee4b28c96a847a95cb8ec8ed6ddd1ca"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_dc_pr_opened() {
    let b = dc("pr:opened", dc_pr("pr:opened")).await;
    assert_eq!(b.repo.full_name, "ACME/widget", "the target repository");
    assert_eq!(
        (b.pipeline.event, b.pipeline.event_reason.clone()),
        (Event::PullRequest, strings(&["opened"]))
    );
    assert_eq!(b.pipeline.timestamp, 1_714_564_800);
    assert_dc_pr(&b.pipeline);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_dc_pr_from_ref_updated() {
    let p = dc("pr:from_ref_updated", dc_pr("pr:from_ref_updated"))
        .await
        .pipeline;
    assert_eq!(
        (p.event, p.event_reason.clone()),
        (Event::PullRequest, strings(&["from_ref_updated"]))
    );
    assert_dc_pr(&p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_dc_pr_modified() {
    let p = dc("pr:modified", dc_pr("pr:modified")).await.pipeline;
    assert_eq!(
        (p.event, p.event_reason.clone()),
        (Event::PullRequest, strings(&["modified"]))
    );
    assert_dc_pr(&p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_dc_pr_merged() {
    let p = dc("pr:merged", dc_pr("pr:merged")).await.pipeline;
    assert_eq!(
        (p.event, p.event_reason.clone()),
        (Event::PullRequestClosed, strings(&["merged"]))
    );
    assert_dc_pr(&p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_dc_pr_declined() {
    let p = dc("pr:declined", dc_pr("pr:declined")).await.pipeline;
    assert_eq!(
        (p.event, p.event_reason.clone()),
        (Event::PullRequestClosed, strings(&["declined"]))
    );
    assert_dc_pr(&p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_dc_pr_deleted() {
    let p = dc("pr:deleted", dc_pr("pr:deleted")).await.pipeline;
    assert_eq!(
        (p.event, p.event_reason.clone()),
        (Event::PullRequestClosed, strings(&["deleted"]))
    );
    assert_dc_pr(&p);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_dc_recognition_and_signature() {
    let dir = plugin_dir(&[
        ("dc.wasm", "forge-bitbucket-dc"),
        ("bb.wasm", "forge-bitbucket"),
    ]);
    let mut dc = instance("dc.wasm");
    dc.secrets = vec!["dc-secret".into()];
    dc.config.insert("hook-secret".into(), "dc-secret".into());
    let cfg = config(dir.path(), vec![("dc", dc), ("bb", instance("bb.wasm"))]);
    let host = host(
        cfg,
        MapSecrets::default().with("dc-secret", "bbdc hook secret"),
    )
    .await;
    let body = fixture("bitbucket-dc-refs-changed.json");
    let sig = format!("sha256={}", hmac_sha256_hex("bbdc hook secret", &body));
    let hs = [
        ("X-Event-Key", "repo:refs_changed"),
        ("X-Request-Id", "c5a1b7a2-6f6e-4b8e-9d1a-2b3c4d5e6f70"),
        ("X-Hub-Signature", sig.as_str()),
    ];
    let req = HookRequest::post("/api/hook", &hs, body.clone());
    let (name, o) = host.detect_and_parse(req).await.unwrap();
    assert_eq!(name, "dc", "X-Request-Id tells Data Center from Cloud");
    assert!(matches!(o, HookOutcome::Build(b) if b.signature_verified));
    let bad = [hs[0], hs[1], ("X-Hub-Signature", "sha256=00")];
    let err = host
        .parse_hook("dc", HookRequest::post("/api/hook", &bad, body))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some(crate::error::ErrorKind::Denied), "{err}");
    // Bitbucket Cloud's headers are not Data Center's.
    let cloud = [("X-Event-Key", "repo:push"), ("X-Hook-UUID", "0b7f5a4e")];
    let req = HookRequest::post("/api/hook", &cloud, fixture("bitbucket-push.json"));
    assert_eq!(host.detect_and_parse(req).await.unwrap().0, "bb");
}

/// A pull request whose source repository is gone from the delivery (a deleted fork: the
/// forges send a null or an empty one) counts as from a fork, on every adapter: the source
/// is unknown, so approval must hold it (issue 45 asked this of GitLab and both Bitbuckets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_request_whose_source_is_gone_counts_as_from_a_fork() {
    let body = edit("gitlab-merge-request.json", |v| {
        v["object_attributes"]["source_project_id"] = Value::Null;
        v["object_attributes"]["source"] = Value::Null;
    });
    assert!(gitlab("Merge Request Hook", body).await.pipeline.from_fork);
    let body = edit("bitbucket-pr-created.json", |v| {
        v["pullrequest"]["source"]["repository"] = Value::Null;
    });
    assert!(
        bitbucket("pullrequest:created", body)
            .await
            .pipeline
            .from_fork
    );
    let body = edit("bitbucket-dc-pr-opened.json", |v| {
        v["pullRequest"]["fromRef"]["repository"] = Value::Null;
    });
    assert!(dc("pr:opened", body).await.pipeline.from_fork);
    let body = edit("github-pull-request.json", |v| {
        v["pull_request"]["head"]["repo"] = Value::Null;
    });
    assert!(github("pull_request", body).await.from_fork);
    for plugin in ["gitea", "forgejo"] {
        let body = edit("gitea-pull-request.json", |v| {
            v["pull_request"]["head"]["repo_id"] = Value::Null;
            v["pull_request"]["head"]["repo"] = Value::Null;
        });
        let p = parsed(plugin, &family(plugin, "pull_request"), body).await;
        assert!(p.pipeline.from_fork, "{plugin}");
    }
}
