//! The plugin host wired into the server: listing, hot reload, and a GitHub webhook that
//! becomes a pipeline through the first-party forge adapter (with a fake GitHub API on
//! 127.0.0.1 serving the repository and its config).

use std::convert::Infallible;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::Full;
use hyper::service::service_fn;
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::net::TcpListener;

use crate::pipelines::wait_for;
use crate::util::{TestServer, first_party_plugins, git};

fn plugins_table(dir: &std::path::Path, watch: bool, extra: &str) -> String {
    format!(
        "#plugins\n[plugins]\ndir = {:?}\nwatch = {watch}\ndebounce_ms = 100\n{extra}",
        dir.display().to_string()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_are_listed_for_admins() {
    let dist = first_party_plugins();
    let s = TestServer::start_with_tables(&plugins_table(&dist, false, "")).await;
    let p = s.principals().await;
    s.http.get("/api/plugins", None).await.expect(401);
    s.http.get("/api/plugins", Some(&p.alice)).await.expect(403);
    let list = s
        .http
        .get("/api/plugins", Some(&p.admin))
        .await
        .expect(200)
        .json();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    for forge in [
        "forge-github",
        "forge-gitea",
        "forge-forgejo",
        "forge-gitlab",
        "forge-bitbucket",
    ] {
        assert!(names.contains(&forge), "{names:?}");
    }
    let gh = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "forge-github")
        .unwrap();
    assert_eq!(gh["loaded"], true);
    assert_eq!(gh["world"], "forge-adapter");
    assert_eq!(gh["version"], "0.1.0");
    assert!(gh["content_hash"].as_str().unwrap().starts_with("sha256:"));
    assert!(gh["loaded_at"].as_u64().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_directory_is_hot_reloaded() {
    let dist = first_party_plugins();
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::start_with_tables(&plugins_table(dir.path(), true, "")).await;
    let p = s.principals().await;
    let listed = |s: &TestServer, token: String| {
        let http = s.http.clone();
        async move { http.get("/api/plugins", Some(&token)).await.json() }
    };
    assert!(
        listed(&s, p.admin.clone())
            .await
            .as_array()
            .unwrap()
            .is_empty()
    );

    // Write then rename, as documented.
    let tmp = dir.path().join("forge-gitea.wasm.tmp");
    std::fs::copy(dist.join("forge-gitea.wasm"), &tmp).unwrap();
    std::fs::rename(&tmp, dir.path().join("forge-gitea.wasm")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let first_hash = loop {
        let list = listed(&s, p.admin.clone()).await;
        if let Some(pl) = list
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "forge-gitea" && p["loaded"] == true)
        {
            break pl["content_hash"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "plugin not loaded: {list}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // A broken replacement keeps the old version and records the error.
    std::fs::write(&tmp, b"not a component").unwrap();
    std::fs::rename(&tmp, dir.path().join("forge-gitea.wasm")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let list = listed(&s, p.admin.clone()).await;
        let pl = list
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "forge-gitea")
            .unwrap()
            .clone();
        if pl["last_error"].is_string() {
            assert_eq!(pl["loaded"], true, "the previous version stays loaded");
            assert_eq!(pl["content_hash"], first_hash.as_str());
            break;
        }
        assert!(Instant::now() < deadline, "broken file not reported: {pl}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Deleting the file unloads it.
    std::fs::remove_file(dir.path().join("forge-gitea.wasm")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let list = listed(&s, p.admin.clone()).await;
        if !list
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "forge-gitea" && p["loaded"] == true)
        {
            break;
        }
        assert!(Instant::now() < deadline, "plugin not unloaded: {list}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.http.get("/healthz", None).await.expect(204);
}

/// A fake GitHub API for `octo/app`: repository info and the config file at any commit.
async fn fake_github(clone_url: String, config: &'static str) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let clone_url = clone_url.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let clone_url = clone_url.clone();
                    async move {
                        let path = req.uri().path().to_string();
                        let (status, body) = match path.as_str() {
                            "/repos/octo/app" => (200, json!({
                                "id": 42, "name": "app", "full_name": "octo/app", "private": true,
                                "owner": {"login": "octo"}, "html_url": "https://github.com/octo/app",
                                "clone_url": clone_url, "default_branch": "main",
                            }).to_string()),
                            "/repos/octo/app/contents/.woodpecker.yaml" => (200, config.to_string()),
                            _ => (404, "{\"message\":\"Not Found\"}".to_string()),
                        };
                        Ok::<_, Infallible>(
                            hyper::Response::builder()
                                .status(status)
                                .body(Full::new(Bytes::from(body)))
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_github_push_runs_a_pipeline_through_the_plugin() {
    let dist = first_party_plugins();
    let data = tempfile::tempdir().unwrap();
    // The repository's code lives in a local bare repository the runner can clone.
    let bare = data.path().join("octo-app.git");
    git(
        data.path(),
        &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()],
    );
    let work = data.path().join("octo-work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    std::fs::write(work.join("README.md"), "hi\n").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "hello from github"]);
    git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
    let sha = git(&work, &["rev-parse", "HEAD"]).trim().to_string();

    let config = "steps:\n  - name: hi\n    image: sh\n    commands: [\"echo from a github push\", \"test -f README.md\"]\n";
    let api = fake_github(format!("file://{}", bare.display()), config).await;
    let instance = format!(
        "[plugins.instances.github]\nfile = \"forge-github.wasm\"\nallowed_hosts = [\"http://{api}\"]\nsecrets = [\"forge:1\"]\nconfig = {{ hook-secret = \"forge:1\", api-url = \"http://{api}\" }}\n"
    );
    let tables = crate::util::with_runner(data.path()) + &plugins_table(&dist, false, &instance);
    let s = TestServer::start_in_with_tables(data, "", &tables).await;
    let p = s.principals().await;

    let forge = s
        .http
        .post("/api/forges", Some(&p.admin), r#"{"type":"github","url":"https://github.com","additional_options":{"plugin":"github"}}"#)
        .await
        .expect(200)
        .json();
    assert_eq!(forge["id"], 1);
    let secret = forge["webhook_secret"].as_str().unwrap().to_string();
    let repo = s
        .http
        .post(
            "/api/repos?forge_remote_id=octo/app&forge_id=1",
            Some(&p.admin),
            "",
        )
        .await
        .expect(200)
        .json();
    assert_eq!(
        repo["forge_remote_id"], "42",
        "the forge's own id, from the plugin's API call"
    );
    assert_eq!(repo["full_name"], "octo/app");
    let id = repo["id"].as_i64().unwrap();

    // GitHub's push payload for that commit, signed with the forge's webhook secret.
    let mut payload: Value =
        serde_json::from_str(include_str!("fixtures/github-push.json")).unwrap();
    payload["repository"]["id"] = json!(42);
    payload["repository"]["name"] = json!("app");
    payload["repository"]["full_name"] = json!("octo/app");
    payload["repository"]["owner"]["login"] = json!("octo");
    payload["repository"]["owner"]["name"] = json!("octo");
    payload["after"] = json!(sha);
    payload["head_commit"]["id"] = json!(sha);
    let body = payload.to_string();
    let sign = |body: &[u8]| {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(body);
        format!(
            "sha256={}",
            mac.finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        )
    };
    let sig = sign(body.as_bytes());

    // A wrong signature is refused; a ping is ignored with a reason.
    let bad = s
        .http
        .send(
            "POST",
            "/api/hook",
            None,
            Some(body.as_bytes()),
            &[
                ("x-github-event", "push"),
                ("x-hub-signature-256", "sha256=00"),
            ],
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.text());
    let ping_body = b"{\"zen\":\"hi\"}";
    let ping_sig = sign(ping_body);
    let ping = s
        .http
        .send(
            "POST",
            "/api/hook",
            None,
            Some(ping_body),
            &[
                ("x-github-event", "ping"),
                ("x-hub-signature-256", &ping_sig),
            ],
        )
        .await
        .expect(200);
    assert!(ping.text().contains("ignored"), "{}", ping.text());

    let created = s
        .http
        .send(
            "POST",
            "/api/hook",
            None,
            Some(body.as_bytes()),
            &[("x-github-event", "push"), ("x-hub-signature-256", &sig)],
        )
        .await
        .expect(200)
        .json();
    assert_eq!(created["event"], "push");
    assert_eq!(created["commit"], sha.as_str());
    assert_eq!(created["branch"], "main");
    let done = wait_for(
        &s.http,
        &p.admin,
        id,
        created["number"].as_i64().unwrap(),
        60,
        |p| matches!(p["status"].as_str(), Some("success" | "failure" | "error")),
    )
    .await;
    assert_eq!(done["status"], "success", "{done:#}");
    let list = s.http.get("/api/plugins", Some(&p.admin)).await.json();
    let gh = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "github")
        .unwrap();
    assert!(gh["calls"].to_string().contains('1'), "{gh}");
}
