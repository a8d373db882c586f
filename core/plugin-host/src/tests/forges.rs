//! Forge adapters on captured webhook payloads.

use super::*;
use crate::error::{ErrorKind, PluginError};
use crate::types::*;

fn forge_instance(file: &str, secret: Option<&str>) -> InstanceConfig {
    let mut i = instance(file);
    i.world = Some(WorldKind::ForgeAdapter);
    if let Some(s) = secret {
        i.secrets = vec![s.to_string()];
        i.config.insert("hook-secret".into(), s.to_string());
    }
    i
}

/// A host with all five adapters; github and gitea verify signatures with secrets.
async fn forges_host() -> (tempfile::TempDir, PluginHost) {
    let dir = plugin_dir(&[
        ("forge-github.wasm", "forge-github"),
        ("forge-gitea.wasm", "forge-gitea"),
        ("forge-forgejo.wasm", "forge-forgejo"),
        ("forge-gitlab.wasm", "forge-gitlab"),
        ("forge-bitbucket.wasm", "forge-bitbucket"),
    ]);
    let cfg = config(
        dir.path(),
        vec![
            (
                "github",
                forge_instance("forge-github.wasm", Some("gh-secret")),
            ),
            ("github-open", forge_instance("forge-github.wasm", None)),
            (
                "gitea",
                forge_instance("forge-gitea.wasm", Some("gitea-secret")),
            ),
            ("forgejo", forge_instance("forge-forgejo.wasm", None)),
            (
                "gitlab",
                forge_instance("forge-gitlab.wasm", Some("gitlab-token")),
            ),
            ("bitbucket", forge_instance("forge-bitbucket.wasm", None)),
        ],
    );
    let secrets = MapSecrets::default()
        .with("gh-secret", "It's a Secret to Everybody")
        .with("gitea-secret", "gitea hook secret")
        .with("gitlab-token", "glt-123");
    let host = host(cfg, secrets).await;
    (dir, host)
}

fn build(o: HookOutcome) -> HookBuild {
    match o {
        HookOutcome::Build(b) => *b,
        HookOutcome::Ignored(r) => panic!("expected a build, got ignored: {r}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_push_with_valid_signature() {
    let (_d, host) = forges_host().await;
    let body = fixture("github-push.json");
    let sig = format!(
        "sha256={}",
        hmac_sha256_hex("It's a Secret to Everybody", &body)
    );
    let req = HookRequest::post(
        "/api/hook?access_token=x",
        &[
            ("Content-Type", "application/json"),
            ("X-GitHub-Event", "push"),
            ("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
            ("X-Hub-Signature-256", &sig),
        ],
        body,
    );
    let b = build(host.parse_hook("github", req).await.unwrap());
    assert!(b.signature_verified);
    assert_eq!(
        b.repo,
        Repo {
            forge_remote_id: "186853002".into(),
            owner: "octocat".into(),
            name: "hello-world".into(),
            full_name: "octocat/hello-world".into(),
            avatar_url: "https://avatars.githubusercontent.com/u/21031067?v=4".into(),
            forge_url: "https://github.com/octocat/hello-world".into(),
            clone_url: "https://github.com/octocat/hello-world.git".into(),
            clone_url_ssh: "git@github.com:octocat/hello-world.git".into(),
            default_branch: "main".into(),
            private: false,
        }
    );
    let p = b.pipeline;
    assert_eq!(p.event, Event::Push);
    assert_eq!(p.commit, "0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c");
    assert_eq!(p.git_ref, "refs/heads/main");
    assert_eq!(p.branch, "main");
    assert_eq!(p.message, "Update README.md\n\n[skip nothing]");
    assert_eq!(p.timestamp, 1557951630); // 2019-05-15T15:20:30-05:00
    assert_eq!(p.author, "octocat");
    assert_eq!(p.author_email, "mona@github.com");
    assert_eq!(
        p.author_avatar,
        "https://avatars.githubusercontent.com/u/21031067?v=4"
    );
    assert_eq!(p.sender, "octocat");
    assert_eq!(
        p.forge_url,
        "https://github.com/octocat/hello-world/commit/0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c"
    );
    assert_eq!(
        p.changed_files,
        vec!["README.md".to_string(), "docs/new.md".to_string()]
    );
    assert_eq!(p.refspec, "");
    assert_eq!(p.pr_number, None);
    assert!(p.release.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_signature_rejected_or_missing() {
    let (_d, host) = forges_host().await;
    let body = fixture("github-push.json");
    let wrong = format!("sha256={}", hmac_sha256_hex("not the secret", &body));
    let req = HookRequest::post(
        "/api/hook",
        &[("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &wrong)],
        body.clone(),
    );
    let err = host.parse_hook("github", req).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::Denied), "{err}");

    let req = HookRequest::post("/api/hook", &[("X-GitHub-Event", "push")], body.clone());
    let err = host.parse_hook("github", req).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::Denied), "{err}");

    // Without a configured secret the request parses, unverified.
    let req = HookRequest::post("/api/hook", &[("X-GitHub-Event", "push")], body);
    let b = build(host.parse_hook("github-open", req).await.unwrap());
    assert!(!b.signature_verified);
    assert_eq!(
        host.list()
            .iter()
            .find(|p| p.name == "github")
            .unwrap()
            .calls
            .errors,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ungranted_secret_is_denied() {
    let dir = plugin_dir(&[("forge-github.wasm", "forge-github")]);
    let mut inst = forge_instance("forge-github.wasm", None);
    // Names a secret in config but the operator did not grant it.
    inst.config.insert("hook-secret".into(), "gh-secret".into());
    let host = host(
        config(dir.path(), vec![("github", inst)]),
        MapSecrets::default().with("gh-secret", "s"),
    )
    .await;
    let body = fixture("github-push.json");
    let sig = format!("sha256={}", hmac_sha256_hex("s", &body));
    let req = HookRequest::post(
        "/",
        &[("X-GitHub-Event", "push"), ("X-Hub-Signature-256", &sig)],
        body,
    );
    let err = host.parse_hook("github", req).await.unwrap_err();
    assert!(
        matches!(&err, PluginError::Plugin { kind: ErrorKind::Denied, message, .. } if message.contains("not granted")),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_form_encoded_pull_request_and_ping() {
    let (_d, host) = forges_host().await;
    let json = String::from_utf8(fixture("github-pull-request.json")).unwrap();
    let encoded: String = json
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            b' ' => "+".into(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let req = HookRequest::post(
        "/api/hook",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("X-GitHub-Event", "pull_request"),
        ],
        format!("payload={encoded}"),
    );
    let b = build(host.parse_hook("github-open", req).await.unwrap());
    assert!(b.repo.private);
    let p = b.pipeline;
    assert_eq!(p.event, Event::PullRequest);
    assert_eq!(p.event_reason, vec!["opened".to_string()]);
    assert_eq!(p.commit, "ec26c3e57ca3a959ca5aad62de7213c562f8c821");
    assert_eq!(p.git_ref, "refs/pull/2/head");
    assert_eq!(p.branch, "main");
    assert_eq!(p.refspec, "changes:main");
    assert_eq!(p.title, "Update the README with new information.");
    assert_eq!(p.author, "hubot");
    assert_eq!(p.sender, "hubot");
    assert_eq!(p.forge_url, "https://github.com/octocat/hello-world/pull/2");
    assert_eq!(p.pr_number, Some(2));
    assert_eq!(p.pr_labels, vec!["bug".to_string(), "docs".to_string()]);
    assert!(p.from_fork);

    let req = HookRequest::post(
        "/api/hook",
        &[("X-GitHub-Event", "ping")],
        r#"{"zen":"Keep it logically awesome."}"#,
    );
    assert_eq!(
        host.parse_hook("github-open", req).await.unwrap(),
        HookOutcome::Ignored("ping event".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_push_signed_and_create_tag() {
    let (_d, host) = forges_host().await;
    let body = fixture("gitea-push.json");
    let sig = hmac_sha256_hex("gitea hook secret", &body);
    let req = HookRequest::post(
        "/api/hook",
        &[
            ("X-Gitea-Event", "push"),
            ("X-Gitea-Event-Type", "push"),
            ("X-GitHub-Event", "push"),
            ("X-Gogs-Event", "push"),
            ("X-Gitea-Signature", &sig),
        ],
        body,
    );
    let b = build(host.parse_hook("gitea", req).await.unwrap());
    assert!(b.signature_verified);
    assert_eq!(b.repo.forge_remote_id, "140");
    assert_eq!(b.repo.owner, "gitea");
    assert_eq!(b.repo.full_name, "gitea/webhooks");
    assert_eq!(
        b.repo.clone_url_ssh,
        "ssh://gitea@gitea.example.com/gitea/webhooks.git"
    );
    let p = b.pipeline;
    assert_eq!(p.event, Event::Push);
    assert_eq!(p.commit, "bffeb74224043ba2feb48d137756c8a9331c449a");
    assert_eq!(p.branch, "develop");
    assert_eq!(p.message, "Webhooks Yay!\n");
    assert_eq!(p.author, "gitea");
    assert_eq!(p.author_email, "someone@gitea.io");
    // A relative avatar is made absolute against the instance.
    assert_eq!(p.author_avatar, "https://gitea.example.com/avatars/1");
    assert_eq!(p.changed_files, vec!["CHANGELOG.md", "main.go", "old.txt"]);
    assert_eq!(p.timestamp, 1489427531);

    let body = fixture("gitea-create-tag.json");
    let sig = hmac_sha256_hex("gitea hook secret", &body);
    let req = HookRequest::post(
        "/api/hook",
        &[("X-Gitea-Event", "create"), ("X-Gitea-Signature", &sig)],
        body,
    );
    let b = build(host.parse_hook("gitea", req).await.unwrap());
    assert_eq!(b.pipeline.event, Event::Tag);
    assert_eq!(b.pipeline.git_ref, "refs/tags/v1.0.0");
    assert_eq!(
        b.pipeline.commit,
        "bffeb74224043ba2feb48d137756c8a9331c449a"
    );
    assert_eq!(b.pipeline.message, "created tag v1.0.0");
    assert_eq!(
        b.pipeline.forge_url,
        "https://gitea.example.com/gitea/webhooks/src/tag/v1.0.0"
    );
    assert!(b.repo.private);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_push_token_and_merge_request() {
    let (_d, host) = forges_host().await;
    let body = fixture("gitlab-push.json");
    let req = HookRequest::post(
        "/api/hook",
        &[
            ("X-Gitlab-Event", "Push Hook"),
            ("X-Gitlab-Token", "glt-123"),
            ("X-Gitlab-Instance", "http://example.com"),
        ],
        body.clone(),
    );
    let b = build(host.parse_hook("gitlab", req).await.unwrap());
    assert!(b.signature_verified);
    assert_eq!(
        b.repo,
        Repo {
            forge_remote_id: "15".into(),
            owner: "mike".into(),
            name: "diaspora".into(),
            full_name: "mike/diaspora".into(),
            avatar_url: "".into(),
            forge_url: "http://example.com/mike/diaspora".into(),
            clone_url: "http://example.com/mike/diaspora.git".into(),
            clone_url_ssh: "git@example.com:mike/diaspora.git".into(),
            default_branch: "master".into(),
            private: true,
        }
    );
    let p = b.pipeline;
    assert_eq!(p.event, Event::Push);
    assert_eq!(p.commit, "da1560886d4f094c3e6c9ef40349f7d38b5d27d7");
    assert_eq!(p.branch, "master");
    assert_eq!(p.message, "fixed readme");
    assert_eq!(p.author, "jsmith");
    assert_eq!(p.author_email, "gitlabdev@dv6700.(none)");
    assert_eq!(
        p.forge_url,
        "http://example.com/mike/diaspora/commit/da1560886d4f094c3e6c9ef40349f7d38b5d27d7"
    );
    assert_eq!(
        p.changed_files,
        vec!["CHANGELOG", "app/controller/application.rb"]
    );

    let req = HookRequest::post(
        "/api/hook",
        &[("X-Gitlab-Event", "Push Hook"), ("X-Gitlab-Token", "nope")],
        body,
    );
    assert_eq!(
        host.parse_hook("gitlab", req).await.unwrap_err().kind(),
        Some(ErrorKind::Denied)
    );

    let req = HookRequest::post(
        "/api/hook",
        &[
            ("X-Gitlab-Event", "Merge Request Hook"),
            ("X-Gitlab-Token", "glt-123"),
        ],
        fixture("gitlab-merge-request.json"),
    );
    let b = build(host.parse_hook("gitlab", req).await.unwrap());
    assert!(!b.repo.private);
    let p = b.pipeline;
    assert_eq!(p.event, Event::PullRequest);
    assert_eq!(p.git_ref, "refs/merge-requests/1/head");
    assert_eq!(p.refspec, "ms-viewport:master");
    assert_eq!(p.branch, "ms-viewport", "the source branch, as upstream");
    assert_eq!(p.title, "MS-Viewport");
    assert_eq!(p.pr_number, Some(1));
    assert_eq!(p.pr_labels, vec!["API"]);
    assert!(p.from_fork);
    assert_eq!(p.sender, "root");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_push_and_merged_pr() {
    let (_d, host) = forges_host().await;
    let req = HookRequest::post(
        "/api/hook",
        &[
            ("X-Event-Key", "repo:push"),
            ("X-Hook-UUID", "a4e5d2c1-0000-4000-8000-000000000000"),
        ],
        fixture("bitbucket-push.json"),
    );
    let b = build(host.parse_hook("bitbucket", req).await.unwrap());
    assert_eq!(
        b.repo.forge_remote_id,
        "{b2ab7ab0-3c3d-4b38-9c2f-1a2d9a5a1f01}"
    );
    assert_eq!(b.repo.owner, "workspace1");
    assert_eq!(
        b.repo.clone_url,
        "https://bitbucket.org/workspace1/repo1.git"
    );
    assert_eq!(
        b.repo.clone_url_ssh,
        "git@bitbucket.org:workspace1/repo1.git"
    );
    assert_eq!(b.repo.default_branch, "main");
    assert!(b.repo.private);
    let p = b.pipeline;
    assert_eq!(p.event, Event::Push);
    assert_eq!(p.commit, "709d658dc5b6d6afcd46049c2f332ee3f515a67d");
    assert_eq!(p.git_ref, "refs/heads/main");
    assert_eq!(p.author, "ada");
    assert_eq!(p.author_email, "ada@example.com");
    assert_eq!(p.timestamp, 1709288130);

    let req = HookRequest::post(
        "/api/hook",
        &[("X-Event-Key", "pullrequest:fulfilled")],
        fixture("bitbucket-pr-fulfilled.json"),
    );
    let p = build(host.parse_hook("bitbucket", req).await.unwrap()).pipeline;
    assert_eq!(p.event, Event::PullRequestClosed);
    assert_eq!(p.event_reason, vec!["merged"]);
    // Merged: the merge commit on the destination branch, credited to the actor (upstream).
    assert_eq!(p.git_ref, "refs/heads/main");
    assert_eq!(p.commit, "aa11bb22cc33");
    assert_eq!(p.refspec, "feature/fast:main");
    assert_eq!(p.author, "ada");
    assert_eq!(p.sender, "ada");
    assert!(p.from_fork);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_adapter_recognises_each_forge() {
    let (_d, host) = forges_host().await;
    let h = |pairs: &[(&str, &str)]| -> Vec<(String, Vec<u8>)> {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
            .collect()
    };
    assert!(
        host.recognize(&h(&[("X-GitHub-Event", "push")]))
            .await
            .unwrap()
            .starts_with("github")
    );
    // Gitea and Forgejo also send X-GitHub-Event; the specific adapter must win.
    assert_eq!(
        host.recognize(&h(&[("X-GitHub-Event", "push"), ("X-Gitea-Event", "push")]))
            .await
            .as_deref(),
        Some("gitea")
    );
    assert_eq!(
        host.recognize(&h(&[
            ("X-GitHub-Event", "push"),
            ("X-Gitea-Event", "push"),
            ("X-Forgejo-Event", "push")
        ]))
        .await
        .as_deref(),
        Some("forgejo")
    );
    assert_eq!(
        host.recognize(&h(&[("X-Gitlab-Event", "Push Hook")]))
            .await
            .as_deref(),
        Some("gitlab")
    );
    assert_eq!(
        host.recognize(&h(&[("X-Event-Key", "repo:push")]))
            .await
            .as_deref(),
        Some("bitbucket")
    );
    assert_eq!(host.recognize(&h(&[("User-Agent", "curl")])).await, None);

    let req = HookRequest::post(
        "/api/hook",
        &[("X-Event-Key", "repo:push")],
        fixture("bitbucket-push.json"),
    );
    let (name, out) = host.detect_and_parse(req).await.unwrap();
    assert_eq!(name, "bitbucket");
    assert!(matches!(out, HookOutcome::Build(_)));
    let bad = HookRequest::post(
        "/api/hook",
        &[
            ("X-Gitlab-Event", "Push Hook"),
            ("X-Gitlab-Token", "glt-123"),
        ],
        "not json",
    );
    let err = host.parse_hook("gitlab", bad).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidInput));
}
