//! The forge adapters' API calls against fake forges on 127.0.0.1: a branch's head and the
//! webhook create-or-replace / delete dance, with the exact paths, auth headers and bodies each
//! forge's API expects.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::fake_http::{Seen, fake_server};
use super::*;
use crate::types::*;

const HOOK: &str = "https://ci.example.com/api/hook";

/// A host with one adapter instance allowed to reach `origin` (plus its `config`).
async fn adapter(
    file: &str,
    origin: &str,
    config: &[(&str, &str)],
) -> (tempfile::TempDir, PluginHost) {
    let stem = file.trim_end_matches(".wasm");
    let dir = plugin_dir(&[(file, stem)]);
    let mut inst = instance(file);
    inst.allowed_hosts = vec![origin.to_string()];
    for (k, v) in config {
        inst.config.insert(k.to_string(), v.to_string());
    }
    let host = host(config_of(dir.path(), inst), MapSecrets::default()).await;
    (dir, host)
}

fn config_of(dir: &Path, inst: InstanceConfig) -> PluginsConfig {
    config(dir, vec![("forge", inst)])
}

fn ctx(origin: &str) -> ApiContext {
    ApiContext {
        forge_url: origin.to_string(),
        token: "tok-1".into(),
        skip_verify: false,
        grant: ForgeGrant::default(),
    }
}

fn requests(seen: &Arc<Mutex<Vec<Seen>>>) -> Vec<(String, String)> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|s| (s.method.clone(), s.path.clone()))
        .collect()
}

fn posted(seen: &Arc<Mutex<Vec<Seen>>>) -> Value {
    let seen = seen.lock().unwrap();
    let post = seen.iter().find(|s| s.method == "POST").expect("a POST");
    serde_json::from_slice(&post.body).unwrap()
}

fn pair(method: &str, path: &str) -> (String, String) {
    (method.to_string(), path.to_string())
}

#[tokio::test]
async fn gitea_and_forgejo_branch_head_and_hooks() {
    for (file, kind) in [
        ("forge-gitea.wasm", "gitea"),
        ("forge-forgejo.wasm", "forgejo"),
    ] {
        let (origin, seen) = fake_server(|s| match (s.method.as_str(), s.path.as_str()) {
            ("GET", "/api/v1/repos/o/r/branches/feature%2Fx") => (
                200,
                json!({"name": "feature/x", "commit": {
                    "id": "aaaa", "message": "fix it\n", "url": "https://git.example.com/o/r/commit/aaaa",
                    "author": {"name": "Ann", "email": "ann@example.com", "username": "ann"},
                    "timestamp": "2026-11-20T10:00:00Z"}})
                .to_string(),
            ),
            ("GET", "/api/v1/repos/o/r/hooks") => (
                200,
                json!([{"id": 7, "config": {"url": HOOK}}, {"id": 8, "config": {"url": "https://other.example.com/"}}])
                    .to_string(),
            ),
            ("DELETE", "/api/v1/repos/o/r/hooks/7") => (204, String::new()),
            ("POST", "/api/v1/repos/o/r/hooks") => (201, "{}".into()),
            _ => (404, "{}".into()),
        })
        .await;
        let (_dir, host) = adapter(file, &origin, &[]).await;

        let head = host
            .branch_head("forge", ctx(&origin), "o/r", "feature/x")
            .await
            .unwrap();
        assert_eq!(head.sha, "aaaa");
        assert_eq!(head.message, "fix it\n");
        assert_eq!(head.author, "Ann");
        assert_eq!(head.author_email, "ann@example.com");
        assert_eq!(head.timestamp, 1_795_168_800);
        let missing = host.branch_head("forge", ctx(&origin), "o/r", "nope").await;
        assert!(
            missing
                .unwrap_err()
                .to_string()
                .contains("branch nope not found")
        );

        seen.lock().unwrap().clear();
        host.create_hook("forge", ctx(&origin), "o/r", HOOK, "s3cret")
            .await
            .unwrap();
        assert_eq!(
            requests(&seen),
            [
                pair("GET", "/api/v1/repos/o/r/hooks"),
                pair("DELETE", "/api/v1/repos/o/r/hooks/7"),
                pair("POST", "/api/v1/repos/o/r/hooks"),
            ],
            "{kind}: only the hook with the same URL is replaced"
        );
        let body = posted(&seen);
        assert_eq!(body["type"], kind);
        assert_eq!(body["config"]["url"], HOOK);
        assert_eq!(body["config"]["secret"], "s3cret");
        assert_eq!(body["config"]["content_type"], "json");
        assert!(
            body["events"]
                .as_array()
                .unwrap()
                .contains(&json!("pull_request"))
        );
        assert!(
            seen.lock()
                .unwrap()
                .iter()
                .all(|s| s.headers["authorization"] == "token tok-1")
        );

        seen.lock().unwrap().clear();
        host.delete_hook("forge", ctx(&origin), "o/r", HOOK)
            .await
            .unwrap();
        assert_eq!(
            requests(&seen),
            [
                pair("GET", "/api/v1/repos/o/r/hooks"),
                pair("DELETE", "/api/v1/repos/o/r/hooks/7"),
            ]
        );
    }
}

#[tokio::test]
async fn gitlab_branch_head_and_hooks() {
    let (origin, seen) = fake_server(|s| match (s.method.as_str(), s.path.as_str()) {
        ("GET", "/api/v4/projects/g%2Fr/repository/branches/main") => (
            200,
            json!({"name": "main", "commit": {
                "id": "bbbb", "message": "merge", "author_name": "Gil", "author_email": "gil@example.com",
                "committed_date": "2026-11-20T10:00:00.000+00:00", "web_url": "https://gitlab.example.com/g/r/-/commit/bbbb"}})
            .to_string(),
        ),
        ("GET", "/api/v4/projects/g%2Fr/hooks") => (200, json!([{"id": 3, "url": HOOK}]).to_string()),
        ("DELETE", "/api/v4/projects/g%2Fr/hooks/3") => (204, String::new()),
        ("POST", "/api/v4/projects/g%2Fr/hooks") => (201, "{}".into()),
        _ => (404, "{}".into()),
    })
    .await;
    let (_dir, host) = adapter("forge-gitlab.wasm", &origin, &[]).await;
    let head = host
        .branch_head("forge", ctx(&origin), "g/r", "main")
        .await
        .unwrap();
    assert_eq!(
        (
            head.sha.as_str(),
            head.author.as_str(),
            head.forge_url.as_str()
        ),
        (
            "bbbb",
            "Gil",
            "https://gitlab.example.com/g/r/-/commit/bbbb"
        )
    );
    seen.lock().unwrap().clear();
    host.create_hook("forge", ctx(&origin), "g/r", HOOK, "glt")
        .await
        .unwrap();
    assert_eq!(
        requests(&seen),
        [
            pair("GET", "/api/v4/projects/g%2Fr/hooks"),
            pair("DELETE", "/api/v4/projects/g%2Fr/hooks/3"),
            pair("POST", "/api/v4/projects/g%2Fr/hooks"),
        ]
    );
    let body = posted(&seen);
    assert_eq!(body["url"], HOOK);
    assert_eq!(
        body["token"], "glt",
        "GitLab sends it back as X-Gitlab-Token"
    );
    assert_eq!(body["merge_requests_events"], true);
    assert_eq!(
        seen.lock().unwrap()[0].headers["authorization"],
        "Bearer tok-1"
    );
}

#[tokio::test]
async fn bitbucket_branch_head_and_hooks() {
    let (origin, seen) = fake_server(|s| match (s.method.as_str(), s.path.as_str()) {
        ("GET", "/repositories/ws/r/refs/branches/main") => (
            200,
            json!({"name": "main", "target": {
                "hash": "cccc", "message": "init", "date": "2026-11-20T10:00:00+00:00",
                "author": {"raw": "Bo Bit <bo@example.com>", "user": {"display_name": "Bo", "links": {"avatar": {"href": "https://a/bo.png"}}}},
                "links": {"html": {"href": "https://bitbucket.org/ws/r/commits/cccc"}}}})
            .to_string(),
        ),
        ("GET", "/repositories/ws/r/hooks") => (
            200,
            json!({"values": [{"uuid": "{u-1}", "url": HOOK}, {"uuid": "{u-2}", "url": "https://x/"}]}).to_string(),
        ),
        ("DELETE", "/repositories/ws/r/hooks/%7Bu-1%7D") => (204, String::new()),
        ("POST", "/repositories/ws/r/hooks") => (201, "{}".into()),
        _ => (404, "{}".into()),
    })
    .await;
    let (_dir, host) = adapter("forge-bitbucket.wasm", &origin, &[("api-url", &origin)]).await;
    let head = host
        .branch_head("forge", ctx(&origin), "ws/r", "main")
        .await
        .unwrap();
    assert_eq!(head.sha, "cccc");
    assert_eq!(head.author, "Bo");
    assert_eq!(head.author_email, "bo@example.com");
    assert_eq!(head.author_avatar, "https://a/bo.png");
    seen.lock().unwrap().clear();
    host.create_hook("forge", ctx(&origin), "ws/r", HOOK, "bb-secret")
        .await
        .unwrap();
    assert_eq!(
        requests(&seen),
        [
            pair("GET", "/repositories/ws/r/hooks"),
            pair("DELETE", "/repositories/ws/r/hooks/%7Bu-1%7D"),
            pair("POST", "/repositories/ws/r/hooks"),
        ]
    );
    let body = posted(&seen);
    assert_eq!(body["secret"], "bb-secret");
    assert!(
        body["events"]
            .as_array()
            .unwrap()
            .contains(&json!("repo:push"))
    );
}

#[tokio::test]
async fn a_forge_error_is_reported_not_swallowed() {
    // The hooks list answers 403 (a token without hook permissions).
    let (origin, _seen) = fake_server(|s| match s.path.as_str() {
        "/api/v1/repos/o/r/hooks" => (403, "{}".into()),
        _ => (404, "{}".into()),
    })
    .await;
    let (_dir, host) = adapter("forge-gitea.wasm", &origin, &[]).await;
    let err = host
        .create_hook("forge", ctx(&origin), "o/r", HOOK, "s")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("HTTP 403"), "{err}");
}

/// The files of PR 9, as every adapter must report them: old and new paths, sorted, once.
const PR_FILES: [&str; 4] = ["README.md", "docs/new.md", "docs/old.md", "src/lib.rs"];

#[tokio::test]
async fn github_changed_files_follow_pages() {
    let (origin, seen) = fake_server(|s| match (s.path.as_str(), s.query.get("page")) {
        ("/repos/o/r/pulls/9/files", Some(p)) if p == "1" => {
            let mut page: Vec<Value> = (0..99)
                .map(|_| json!({"filename": "src/lib.rs", "status": "modified"}))
                .collect();
            page.push(json!({"filename": "docs/new.md", "previous_filename": "docs/old.md", "status": "renamed"}));
            (200, Value::Array(page).to_string())
        }
        ("/repos/o/r/pulls/9/files", Some(p)) if p == "2" => {
            (200, json!([{"filename": "README.md", "status": "added"}]).to_string())
        }
        _ => (404, "{}".into()),
    })
    .await;
    let (_dir, host) = adapter("forge-github.wasm", &origin, &[("api-url", &origin)]).await;
    let files = host
        .changed_files("forge", ctx(&origin), "o/r", 9)
        .await
        .unwrap();
    assert_eq!(files, PR_FILES);
    assert_eq!(requests(&seen).len(), 2);
    assert_eq!(
        seen.lock().unwrap()[0].headers["authorization"],
        "Bearer tok-1"
    );
    assert_eq!(seen.lock().unwrap()[0].query["per_page"], "100");
}

#[tokio::test]
async fn gitea_and_forgejo_changed_files() {
    for file in ["forge-gitea.wasm", "forge-forgejo.wasm"] {
        let (origin, seen) = fake_server(|s| match s.path.as_str() {
            "/api/v1/repos/o/r/pulls/9/files" => (
                200,
                json!([
                    {"filename": "src/lib.rs", "status": "changed"},
                    {"filename": "docs/new.md", "previous_filename": "docs/old.md", "status": "renamed"},
                    {"filename": "README.md", "status": "added"},
                ])
                .to_string(),
            ),
            _ => (404, "{}".into()),
        })
        .await;
        let (_dir, host) = adapter(file, &origin, &[]).await;
        let files = host
            .changed_files("forge", ctx(&origin), "o/r", 9)
            .await
            .unwrap();
        assert_eq!(files, PR_FILES, "{file}");
        assert_eq!(
            seen.lock().unwrap()[0].headers["authorization"],
            "token tok-1"
        );
    }
}

#[tokio::test]
async fn gitlab_changed_files() {
    let (origin, _seen) = fake_server(|s| match s.path.as_str() {
        "/api/v4/projects/g%2Fr/merge_requests/9/diffs" => (
            200,
            json!([
                {"old_path": "src/lib.rs", "new_path": "src/lib.rs"},
                {"old_path": "docs/old.md", "new_path": "docs/new.md", "renamed_file": true},
                {"old_path": "README.md", "new_path": "README.md", "new_file": true},
            ])
            .to_string(),
        ),
        _ => (404, "{}".into()),
    })
    .await;
    let (_dir, host) = adapter("forge-gitlab.wasm", &origin, &[]).await;
    let files = host
        .changed_files("forge", ctx(&origin), "g/r", 9)
        .await
        .unwrap();
    assert_eq!(files, PR_FILES);
}

#[tokio::test]
async fn bitbucket_changed_files_follow_next() {
    let (origin, seen) = fake_server(move |s| match (s.path.as_str(), s.query.get("page")) {
        ("/repositories/ws/r/pullrequests/9/diffstat", Some(p)) if p == "1" => (
            200,
            json!({
                "values": [
                    {"status": "modified", "old": {"path": "src/lib.rs"}, "new": {"path": "src/lib.rs"}},
                    {"status": "renamed", "old": {"path": "docs/old.md"}, "new": {"path": "docs/new.md"}},
                ],
                "next": "https://api.bitbucket.org/2.0/repositories/ws/r/pullrequests/9/diffstat?page=2"
            })
            .to_string(),
        ),
        ("/repositories/ws/r/pullrequests/9/diffstat", Some(p)) if p == "2" => (
            200,
            json!({"values": [{"status": "added", "old": null, "new": {"path": "README.md"}}]}).to_string(),
        ),
        _ => (404, "{}".into()),
    })
    .await;
    let (_dir, host) = adapter("forge-bitbucket.wasm", &origin, &[("api-url", &origin)]).await;
    let files = host
        .changed_files("forge", ctx(&origin), "ws/r", 9)
        .await
        .unwrap();
    assert_eq!(files, PR_FILES);
    assert_eq!(requests(&seen).len(), 2);
}

#[tokio::test]
async fn changed_files_of_a_missing_pr_is_an_error() {
    let (origin, _seen) = fake_server(|_| (404, "{}".into())).await;
    let (_dir, host) = adapter("forge-gitea.wasm", &origin, &[]).await;
    let err = host
        .changed_files("forge", ctx(&origin), "o/r", 404)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("pull request 404 not found"),
        "{err}"
    );
}

const DC_REPO: &str = "/rest/api/1.0/projects/ACME/repos/widget";

#[tokio::test]
async fn bitbucket_dc_api() {
    let (origin, seen) = fake_server(|s| {
        let path = s.path.strip_prefix(DC_REPO).unwrap_or(s.path.as_str());
        match (s.method.as_str(), path) {
            ("GET", "/pull-requests/9/changes") => (
                200,
                json!({"isLastPage": true, "values": [
                    {"path": {"toString": "src/lib.rs"}, "type": "MODIFY"},
                    {"path": {"toString": "docs/new.md"}, "srcPath": {"toString": "docs/old.md"}, "type": "MOVE"},
                    {"path": {"toString": "README.md"}, "type": "ADD"},
                ]})
                .to_string(),
            ),
            ("GET", "/commits") if s.query.get("until").map(String::as_str) == Some("refs/heads/main") => (
                200,
                json!({"isLastPage": false, "values": [{
                    "id": "dddd", "message": "ship it", "authorTimestamp": 1_795_168_800_000_i64,
                    "author": {"name": "dee", "emailAddress": "dee@example.com"}}]})
                .to_string(),
            ),
            ("GET", "/branches") => (
                200,
                json!({"isLastPage": true, "values": [{"displayId": "main"}, {"displayId": "dev"}]}).to_string(),
            ),
            ("GET", "/raw/.woodpecker/ci.yaml") if s.query.get("at").map(String::as_str) == Some("dddd") => {
                (200, "steps: []\n".into())
            }
            ("GET", "/browse/.woodpecker") => (
                200,
                json!({"children": {"values": [
                    {"path": {"toString": "ci.yaml"}, "type": "FILE"},
                    {"path": {"toString": "sub"}, "type": "DIRECTORY"}]}})
                .to_string(),
            ),
            ("GET", "/webhooks") => (
                200,
                json!({"values": [{"id": 5, "url": HOOK}, {"id": 6, "url": "https://x/"}]}).to_string(),
            ),
            ("DELETE", "/webhooks/5") => (204, String::new()),
            ("POST", "/webhooks") => (201, "{}".into()),
            ("POST", "/rest/build-status/1.0/commits/dddd") => (204, String::new()),
            _ => (404, "{}".into()),
        }
    })
    .await;
    let (_dir, host) = adapter("forge-bitbucket-dc.wasm", &origin, &[]).await;
    let files = host
        .changed_files("forge", ctx(&origin), "ACME/widget", 9)
        .await
        .unwrap();
    assert_eq!(files, PR_FILES);

    let head = host
        .branch_head("forge", ctx(&origin), "ACME/widget", "main")
        .await
        .unwrap();
    assert_eq!(
        (
            head.sha.as_str(),
            head.message.as_str(),
            head.author.as_str(),
            head.timestamp
        ),
        ("dddd", "ship it", "dee", 1_795_168_800)
    );
    assert_eq!(
        head.forge_url,
        format!("{origin}/projects/ACME/repos/widget/commits/dddd")
    );
    let missing = host
        .branch_head("forge", ctx(&origin), "ACME/widget", "nope")
        .await;
    assert!(
        missing
            .unwrap_err()
            .to_string()
            .contains("branch nope not found")
    );

    let branches = host
        .branches("forge", ctx(&origin), "ACME/widget")
        .await
        .unwrap();
    assert_eq!(branches, ["main", "dev"]);
    let file = host
        .file_at(
            "forge",
            ctx(&origin),
            "ACME/widget",
            "dddd",
            ".woodpecker/ci.yaml",
        )
        .await
        .unwrap();
    assert_eq!(file.as_deref(), Some(&b"steps: []\n"[..]));
    let dir = host
        .dir_at("forge", ctx(&origin), "ACME/widget", "dddd", ".woodpecker")
        .await
        .unwrap();
    assert_eq!(dir, [".woodpecker/ci.yaml"]);

    seen.lock().unwrap().clear();
    host.create_hook("forge", ctx(&origin), "ACME/widget", HOOK, "dc-secret")
        .await
        .unwrap();
    assert_eq!(
        requests(&seen),
        [
            pair("GET", &format!("{DC_REPO}/webhooks")),
            pair("DELETE", &format!("{DC_REPO}/webhooks/5")),
            pair("POST", &format!("{DC_REPO}/webhooks")),
        ]
    );
    let body = posted(&seen);
    assert_eq!(body["configuration"]["secret"], "dc-secret");
    assert!(
        body["events"]
            .as_array()
            .unwrap()
            .contains(&json!("pr:from_ref_updated"))
    );
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .all(|s| s.headers["authorization"] == "Bearer tok-1")
    );

    seen.lock().unwrap().clear();
    let status = CommitStatus {
        state: StatusState::Success,
        context: "ci/woodlark/push".into(),
        description: "ok".into(),
        target_url: "https://ci.example.com/1".into(),
        ..Default::default()
    };
    host.post_status("forge", ctx(&origin), "ACME/widget", "dddd", status)
        .await
        .unwrap();
    let body = posted(&seen);
    assert_eq!(
        (body["state"].as_str(), body["key"].as_str()),
        (Some("SUCCESSFUL"), Some("ci/woodlark/push"))
    );

    let err = host
        .changed_files("forge", ctx(&origin), "not-a-pair", 9)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("PROJECT/repository"), "{err}");
}
