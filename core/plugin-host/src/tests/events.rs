//! Every forge × event the adapters map, including the cases that must be ignored. Variants
//! of a captured payload are made by editing its JSON (`edit`), so each test states exactly
//! what differs from the capture.

use serde_json::{Value, json};

use super::*;
use crate::types::*;

fn edit(name: &str, f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(&fixture(name)).unwrap();
    f(&mut v);
    serde_json::to_vec(&v).unwrap()
}

async fn all_forges() -> (tempfile::TempDir, PluginHost) {
    let dir = plugin_dir(&[
        ("gh.wasm", "forge-github"),
        ("gitea.wasm", "forge-gitea"),
        ("forgejo.wasm", "forge-forgejo"),
        ("gl.wasm", "forge-gitlab"),
        ("bb.wasm", "forge-bitbucket"),
    ]);
    let mut forgejo = instance("forgejo.wasm");
    forgejo.secrets = vec!["fj".into()];
    forgejo.config.insert("hook-secret".into(), "fj".into());
    let cfg = config(
        dir.path(),
        vec![
            ("github", instance("gh.wasm")),
            ("gitea", instance("gitea.wasm")),
            ("forgejo", forgejo),
            ("gitlab", instance("gl.wasm")),
            ("bitbucket", instance("bb.wasm")),
        ],
    );
    let host = host(cfg, MapSecrets::default().with("fj", "forgejo secret")).await;
    (dir, host)
}

async fn parse(
    host: &PluginHost,
    plugin: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> HookOutcome {
    host.parse_hook(plugin, HookRequest::post("/api/hook", headers, body))
        .await
        .unwrap()
}

fn pipeline(o: HookOutcome) -> Pipeline {
    match o {
        HookOutcome::Build(b) => b.pipeline,
        HookOutcome::Ignored(r) => panic!("expected a build, got ignored: {r}"),
    }
}

fn ignored(o: HookOutcome) -> String {
    match o {
        HookOutcome::Ignored(r) => r,
        HookOutcome::Build(b) => panic!("expected ignored, got {:?}", b.pipeline.event),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_events() {
    let (_d, host) = all_forges().await;
    let gh = |e: &'static str| vec![("X-GitHub-Event", e), ("Content-Type", "application/json")];

    // Tag: a push to refs/tags/*, branch from base_ref, no changed files.
    let body = edit("github-push.json", |v| {
        v["ref"] = json!("refs/tags/v1.2.0");
        v["base_ref"] = json!("refs/heads/main");
    });
    let p = pipeline(parse(&host, "github", &gh("push"), body).await);
    assert_eq!(
        (p.event, p.git_ref.as_str(), p.branch.as_str()),
        (Event::Tag, "refs/tags/v1.2.0", "main")
    );
    assert!(p.changed_files.is_empty());

    let body = edit("github-push.json", |v| v["deleted"] = json!(true));
    assert_eq!(
        ignored(parse(&host, "github", &gh("push"), body).await),
        "branch or tag deleted"
    );

    // Pull request: synchronize, closed (merged), labeled, and an unhandled action.
    let body = edit("github-pull-request.json", |v| {
        v["action"] = json!("synchronize")
    });
    let p = pipeline(parse(&host, "github", &gh("pull_request"), body).await);
    assert_eq!(
        (p.event, p.event_reason.clone()),
        (Event::PullRequest, vec!["synchronize".to_string()])
    );
    let body = edit("github-pull-request.json", |v| {
        v["action"] = json!("closed");
        v["pull_request"]["merged"] = json!(true);
    });
    let p = pipeline(parse(&host, "github", &gh("pull_request"), body).await);
    assert_eq!(
        (p.event, p.event_reason.clone()),
        (Event::PullRequestClosed, vec!["merged".to_string()])
    );
    let body = edit("github-pull-request.json", |v| {
        v["action"] = json!("labeled")
    });
    let p = pipeline(parse(&host, "github", &gh("pull_request"), body).await);
    assert_eq!(
        (p.event, p.event_reason.clone()),
        (
            Event::PullRequestMetadata,
            vec!["label_updated".to_string()]
        )
    );
    let body = edit("github-pull-request.json", |v| {
        v["action"] = json!("review_requested")
    });
    assert!(
        ignored(parse(&host, "github", &gh("pull_request"), body).await)
            .contains("review_requested")
    );

    // Release: only "released".
    let p = pipeline(
        parse(
            &host,
            "github",
            &gh("release"),
            fixture("github-release.json"),
        )
        .await,
    );
    assert_eq!(p.event, Event::Release);
    assert_eq!(p.git_ref, "refs/tags/v1.1.0");
    assert_eq!(p.branch, "main");
    assert_eq!(p.title, "Version 1.1");
    assert_eq!(p.message, "created release Version 1.1");
    assert_eq!(
        p.forge_url,
        "https://github.com/octocat/hello-world/releases/tag/v1.1.0"
    );
    assert_eq!(
        p.release,
        Some(ReleaseInfo {
            tag: "v1.1.0".into(),
            title: "Version 1.1".into(),
            prerelease: true
        })
    );
    let body = edit("github-release.json", |v| v["action"] = json!("created"));
    assert!(ignored(parse(&host, "github", &gh("release"), body).await).contains("created"));

    // Deployment.
    let p = pipeline(
        parse(
            &host,
            "github",
            &gh("deployment"),
            fixture("github-deployment.json"),
        )
        .await,
    );
    assert_eq!(p.event, Event::Deployment);
    assert_eq!(p.commit, "f95f852bd8fca8fcc58a9a2d6c842781e32a215e");
    assert_eq!(
        (p.deploy_to.as_str(), p.deploy_task.as_str()),
        ("production", "deploy:migrations")
    );
    assert_eq!(p.branch, "main");
    assert_eq!(p.message, "Deploy request from hubot");
    assert_eq!(p.author, "hubot");

    // Anything else: ignored with the event's name.
    assert!(
        ignored(parse(&host, "github", &gh("issues"), b"{}".to_vec()).await).contains("issues")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_and_forgejo_events() {
    let (_d, host) = all_forges().await;
    let gitea = |e: &'static str| vec![("X-Gitea-Event", e), ("X-GitHub-Event", e)];

    let body = edit("gitea-push.json", |v| v["ref"] = json!("refs/tags/v1"));
    assert!(ignored(parse(&host, "gitea", &gitea("push"), body).await).contains("create event"));
    let body = edit("gitea-push.json", |v| {
        v["after"] = json!("0000000000000000000000000000000000000000")
    });
    assert_eq!(
        ignored(parse(&host, "gitea", &gitea("push"), body).await),
        "branch deleted"
    );
    let body = edit("gitea-create-tag.json", |v| v["ref_type"] = json!("branch"));
    assert!(ignored(parse(&host, "gitea", &gitea("create"), body).await).contains("branch"));

    let p = pipeline(
        parse(
            &host,
            "gitea",
            &gitea("pull_request"),
            fixture("gitea-pull-request.json"),
        )
        .await,
    );
    assert_eq!(p.event, Event::PullRequest);
    assert_eq!(p.commit, "c0ffee0d029cb852e4844d9c718537df08844e03");
    assert_eq!(p.git_ref, "refs/pull/5/head");
    assert_eq!(
        (p.branch.as_str(), p.refspec.as_str()),
        ("main", "feature:main")
    );
    assert_eq!(
        (p.title.as_str(), p.author.as_str()),
        ("Add a feature", "alice")
    );
    assert_eq!(p.pr_labels, vec!["enhancement"]);
    assert_eq!(p.pr_number, Some(5));
    assert!(!p.from_fork);
    assert_eq!(p.timestamp, 1706781900);
    let body = edit("gitea-pull-request.json", |v| {
        v["action"] = json!("synchronized")
    });
    assert_eq!(
        pipeline(parse(&host, "gitea", &gitea("pull_request"), body).await).event,
        Event::PullRequest
    );
    let body = edit("gitea-pull-request.json", |v| {
        v["action"] = json!("closed");
        v["pull_request"]["merged"] = json!(true);
    });
    let p = pipeline(parse(&host, "gitea", &gitea("pull_request"), body).await);
    assert_eq!(
        (p.event, p.event_reason),
        (Event::PullRequestClosed, vec!["merged".to_string()])
    );
    let body = edit("gitea-pull-request.json", |v| {
        v["action"] = json!("label_updated")
    });
    let p = pipeline(parse(&host, "gitea", &gitea("pull_request"), body).await);
    assert_eq!(
        (p.event, p.event_reason),
        (
            Event::PullRequestMetadata,
            vec!["label_updated".to_string()]
        )
    );

    let p = pipeline(
        parse(
            &host,
            "gitea",
            &gitea("release"),
            fixture("gitea-release.json"),
        )
        .await,
    );
    assert_eq!(p.event, Event::Release);
    assert_eq!(
        (p.git_ref.as_str(), p.title.as_str()),
        ("refs/tags/v2.0.0", "Two")
    );
    assert!(!p.release.unwrap().prerelease);
    let body = edit("gitea-release.json", |v| v["action"] = json!("updated"));
    assert!(ignored(parse(&host, "gitea", &gitea("release"), body).await).contains("updated"));

    // Forgejo: its own headers (plus Gitea's), its own signature.
    let body = fixture("gitea-push.json");
    let sig = hmac_sha256_hex("forgejo secret", &body);
    let headers = [
        ("X-Forgejo-Event", "push"),
        ("X-Gitea-Event", "push"),
        ("X-Forgejo-Signature", sig.as_str()),
        ("X-Gitea-Signature", sig.as_str()),
    ];
    match parse(&host, "forgejo", &headers, body.clone()).await {
        HookOutcome::Build(b) => {
            assert!(b.signature_verified);
            assert_eq!(b.pipeline.event, Event::Push);
        }
        other => panic!("{other:?}"),
    }
    let err = host
        .parse_hook(
            "forgejo",
            HookRequest::post("/", &[("X-Forgejo-Event", "push")], body),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some(crate::ErrorKind::Denied));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_events() {
    let (_d, host) = all_forges().await;
    let gl = |e: &'static str| vec![("X-Gitlab-Event", e)];

    let body = edit("gitlab-push.json", |v| {
        v["object_kind"] = json!("tag_push");
        v["ref"] = json!("refs/tags/v1.0.0");
        v["message"] = json!("Release v1.0.0");
        v["commits"] = json!([]);
    });
    let p = pipeline(parse(&host, "gitlab", &gl("Tag Push Hook"), body).await);
    assert_eq!(
        (p.event, p.git_ref.as_str(), p.branch.as_str()),
        (Event::Tag, "refs/tags/v1.0.0", "")
    );
    assert_eq!(p.message, "Release v1.0.0");
    assert_eq!(
        p.forge_url,
        "http://example.com/mike/diaspora/-/tags/v1.0.0"
    );
    let body = edit("gitlab-push.json", |v| {
        v["after"] = json!("0000000000000000000000000000000000000000");
        v["checkout_sha"] = Value::Null;
    });
    assert_eq!(
        ignored(parse(&host, "gitlab", &gl("Push Hook"), body).await),
        "branch deleted"
    );

    let mr = |action: &'static str, extra: fn(&mut Value)| {
        edit("gitlab-merge-request.json", move |v| {
            v["object_attributes"]["action"] = json!(action);
            extra(v);
        })
    };
    let p = pipeline(
        parse(
            &host,
            "gitlab",
            &gl("Merge Request Hook"),
            mr("reopen", |_| {}),
        )
        .await,
    );
    assert_eq!(
        (p.event, p.event_reason),
        (Event::PullRequest, vec!["reopened".to_string()])
    );
    let body = mr("update", |v| {
        v["object_attributes"]["oldrev"] = json!("95790bf891e76fee5e1747ab589903a6a1f80f22")
    });
    let p = pipeline(parse(&host, "gitlab", &gl("Merge Request Hook"), body).await);
    assert_eq!(
        (p.event, p.event_reason),
        (Event::PullRequest, vec!["synchronize".to_string()])
    );
    let body =
        mr(
            "update",
            |v| v["changes"] = json!({"labels": {"previous": [], "current": [{"title": "API"}]}}),
        );
    let p = pipeline(parse(&host, "gitlab", &gl("Merge Request Hook"), body).await);
    assert_eq!(
        (p.event, p.event_reason),
        (Event::PullRequestMetadata, vec!["label_added".to_string()])
    );
    let body = mr("update", |_| {});
    assert!(
        ignored(parse(&host, "gitlab", &gl("Merge Request Hook"), body).await)
            .contains("without supported")
    );
    let p = pipeline(
        parse(
            &host,
            "gitlab",
            &gl("Merge Request Hook"),
            mr("close", |_| {}),
        )
        .await,
    );
    assert_eq!(
        (p.event, p.event_reason),
        (Event::PullRequestClosed, vec!["closed".to_string()])
    );
    let p = pipeline(
        parse(
            &host,
            "gitlab",
            &gl("Merge Request Hook"),
            mr("merge", |_| {}),
        )
        .await,
    );
    assert_eq!(
        (p.event, p.event_reason),
        (Event::PullRequestClosed, vec!["merged".to_string()])
    );
    assert!(
        ignored(
            parse(
                &host,
                "gitlab",
                &gl("Merge Request Hook"),
                mr("approved", |_| {})
            )
            .await
        )
        .contains("approved")
    );

    let p = pipeline(
        parse(
            &host,
            "gitlab",
            &gl("Release Hook"),
            fixture("gitlab-release.json"),
        )
        .await,
    );
    assert_eq!(p.event, Event::Release);
    assert_eq!(p.commit, "ee0f691d5d6b1afb2d3f4a4dc3e6d2d2b6c3f0a9");
    assert_eq!(
        (p.git_ref.as_str(), p.title.as_str()),
        ("refs/tags/v1.1", "v1.1")
    );
    assert_eq!(
        p.forge_url,
        "https://example.com/gitlab-org/release-webhook-example/-/releases/v1.1"
    );
    let body = edit("gitlab-release.json", |v| v["action"] = json!("update"));
    assert!(ignored(parse(&host, "gitlab", &gl("Release Hook"), body).await).contains("update"));
    assert!(
        ignored(
            parse(
                &host,
                "gitlab",
                &gl("Issue Hook"),
                br#"{"object_kind":"issue"}"#.to_vec()
            )
            .await
        )
        .contains("issue")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_events() {
    let (_d, host) = all_forges().await;
    let bb = |k: &'static str| vec![("X-Event-Key", k)];

    let body = edit("bitbucket-push.json", |v| {
        v["push"]["changes"][0]["new"]["type"] = json!("tag");
        v["push"]["changes"][0]["new"]["name"] = json!("v1.0");
    });
    let p = pipeline(parse(&host, "bitbucket", &bb("repo:push"), body).await);
    assert_eq!(
        (p.event, p.git_ref.as_str(), p.branch.as_str()),
        (Event::Tag, "refs/tags/v1.0", "")
    );
    let body = edit("bitbucket-push.json", |v| {
        v["push"]["changes"][0]["new"] = Value::Null
    });
    assert!(ignored(parse(&host, "bitbucket", &bb("repo:push"), body).await).contains("deletion"));

    let p = pipeline(
        parse(
            &host,
            "bitbucket",
            &bb("pullrequest:created"),
            edit("bitbucket-pr-fulfilled.json", |v| {
                v["pullrequest"]["state"] = json!("OPEN")
            }),
        )
        .await,
    );
    assert_eq!(
        (p.event, p.event_reason.clone()),
        (Event::PullRequest, vec!["opened".to_string()])
    );
    assert_eq!(p.commit, "d3adb33fcafe");
    assert_eq!(p.title, "Speed up the parser");
    assert_eq!(
        p.forge_url,
        "https://bitbucket.org/workspace1/repo1/pull-requests/7"
    );
    let p = pipeline(
        parse(
            &host,
            "bitbucket",
            &bb("pullrequest:updated"),
            edit("bitbucket-pr-fulfilled.json", |v| {
                v["pullrequest"]["state"] = json!("OPEN")
            }),
        )
        .await,
    );
    assert_eq!(p.event_reason, vec!["synchronize"]);
    let p = pipeline(
        parse(
            &host,
            "bitbucket",
            &bb("pullrequest:rejected"),
            edit("bitbucket-pr-fulfilled.json", |v| {
                v["pullrequest"]["state"] = json!("DECLINED")
            }),
        )
        .await,
    );
    assert_eq!(
        (p.event, p.event_reason),
        (Event::PullRequestClosed, vec!["declined".to_string()])
    );
    assert!(
        ignored(parse(&host, "bitbucket", &bb("issue:created"), b"{}".to_vec()).await)
            .contains("issue:created")
    );
}
