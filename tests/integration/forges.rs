//! The forge round trip, against a fake forge on 127.0.0.1 that answers as the real one's API
//! does and records what it is asked: sign in through the forge (OAuth, with a cookie jar),
//! the user's repositories with their permissions, activation creating the webhook as the
//! user, a signed delivery, the pipeline, and the commit statuses it posts; an expiring token
//! refreshed before use; a permission dropped on the forge dropped here.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::pipelines::wait_for;
use crate::plugins::{FakeRequest, fake_service, plugins_table};
use crate::util::{TestServer, first_party_plugins, git, with_runner};
use crate::web::{Browser, globals};

pub(crate) const CLIENT_ID: &str = "woodlark-test-app";
pub(crate) const CLIENT_SECRET: &str = "oauth-app-secret";
/// The code the fake forge's authorize page hands back.
pub(crate) const GOOD_CODE: &str = "code-from-github";

/// What the fake GitHub holds and saw.
#[derive(Default)]
pub(crate) struct GitHub {
    /// Every request: method, path, query, `Authorization`, body.
    pub(crate) seen: Vec<(String, String, String, String, String)>,
    hooks: Vec<Value>,
    /// Posted statuses: (commit, body).
    statuses: Vec<(String, Value)>,
    /// octocat's permissions on octo/app.
    perm: Value,
    /// Access tokens that work, and the refresh token that gives the next one.
    live_tokens: Vec<String>,
    refresh_token: String,
    issued: u32,
    config: String,
    clone_url: String,
    head: String,
}

pub(crate) type Shared = Arc<Mutex<GitHub>>;

impl GitHub {
    /// A new access token; it expires in a minute (GitHub Apps' user tokens expire), so the
    /// server must refresh it before using it again.
    fn issue(&mut self) -> Value {
        self.issued += 1;
        let access = format!("ghu_token{}", self.issued);
        self.refresh_token = format!("ghr_refresh{}", self.issued);
        self.live_tokens.push(access.clone());
        json!({"access_token": access, "token_type": "bearer", "scope": "repo",
               "expires_in": 60, "refresh_token": self.refresh_token,
               "refresh_token_expires_in": 15_000_000})
    }

    fn repo(&self) -> Value {
        json!({
            "id": 42, "name": "app", "full_name": "octo/app", "private": true,
            "owner": {"login": "octo", "avatar_url": "https://avatars.example.com/octo"},
            "html_url": "https://github.com/octo/app", "clone_url": self.clone_url,
            "default_branch": "main", "permissions": self.perm,
        })
    }
}

fn form_fields(body: &[u8]) -> std::collections::HashMap<String, String> {
    if body.first() == Some(&b'{') {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        return v
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
    }
    form_urlencoded::parse(body).into_owned().collect()
}

/// The fake GitHub: OAuth endpoints at the web root, the REST API at the same address (the
/// adapter's `api-url`).
pub(crate) fn answer(state: &Shared, r: &FakeRequest) -> (u16, String) {
    let mut gh = state.lock().unwrap();
    let auth = r
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    gh.seen.push((
        r.method.clone(),
        r.path.clone(),
        r.query.clone(),
        auth.clone(),
        String::from_utf8_lossy(&r.body).into_owned(),
    ));
    if (r.method.as_str(), r.path.as_str()) == ("GET", "/login/oauth/authorize") {
        // The user approves at once: back to the server's callback with the code and state.
        let q: std::collections::HashMap<String, String> =
            form_urlencoded::parse(r.query.as_bytes())
                .into_owned()
                .collect();
        let back = format!(
            "{}?code={GOOD_CODE}&state={}",
            q.get("redirect_uri").cloned().unwrap_or_default(),
            form_urlencoded::byte_serialize(q.get("state").cloned().unwrap_or_default().as_bytes())
                .collect::<String>()
        );
        let page = format!(
            "<!doctype html><html><body>Authorize?<script>location.replace({})</script></body></html>",
            serde_json::to_string(&back).unwrap()
        );
        return (200, page);
    }
    if (r.method.as_str(), r.path.as_str()) == ("POST", "/login/oauth/access_token") {
        let f = form_fields(&r.body);
        if f.get("client_id").map(String::as_str) != Some(CLIENT_ID)
            || f.get("client_secret").map(String::as_str) != Some(CLIENT_SECRET)
        {
            return (
                200,
                json!({"error": "incorrect_client_credentials"}).to_string(),
            );
        }
        let grant = f.get("grant_type").cloned().unwrap_or_default();
        let ok = if grant == "refresh_token" {
            f.get("refresh_token") == Some(&gh.refresh_token)
        } else {
            f.get("code").map(String::as_str) == Some(GOOD_CODE)
        };
        if !ok {
            return (200, json!({"error": "bad_verification_code"}).to_string());
        }
        return (200, gh.issue().to_string());
    }
    let token = auth
        .strip_prefix("Bearer ")
        .or_else(|| auth.strip_prefix("token "))
        .unwrap_or("");
    if !gh.live_tokens.iter().any(|t| t == token) {
        return (401, json!({"message": "Bad credentials"}).to_string());
    }
    let reply = match (r.method.as_str(), r.path.as_str()) {
        ("GET", "/user") => json!({"id": 1001, "login": "octocat", "email": "octocat@example.com",
                                   "avatar_url": "https://avatars.example.com/octocat"}),
        ("GET", "/user/emails") => {
            json!([{"email": "octocat@example.com", "primary": true, "verified": true}])
        }
        ("GET", "/user/orgs") => json!([{"login": "octo", "avatar_url": ""}]),
        ("GET", "/orgs/octo/memberships/octocat") => {
            json!({"state": "active", "role": "admin", "organization": {"login": "octo"}})
        }
        ("GET", "/user/repos") => {
            if r.query.contains("page=1") || !r.query.contains("page=") {
                json!([gh.repo()])
            } else {
                json!([])
            }
        }
        ("GET", "/repos/octo/app") => gh.repo(),
        ("GET", "/repos/octo/app/contents/.woodpecker.yaml") => {
            return (200, gh.config.clone());
        }
        ("GET", "/repos/octo/app/hooks") => Value::Array(gh.hooks.clone()),
        ("POST", "/repos/octo/app/hooks") => {
            let mut hook: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
            hook["id"] = json!(100 + gh.hooks.len());
            gh.hooks.push(hook.clone());
            return (201, hook.to_string());
        }
        ("DELETE", p) if p.starts_with("/repos/octo/app/hooks/") => {
            let id: u64 = p.rsplit('/').next().unwrap_or("").parse().unwrap_or(0);
            gh.hooks.retain(|h| h["id"].as_u64() != Some(id));
            return (204, String::new());
        }
        ("POST", p) if p.starts_with("/repos/octo/app/statuses/") => {
            let sha = p.rsplit('/').next().unwrap_or("").to_string();
            let body: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
            gh.statuses.push((sha, body.clone()));
            return (201, body.to_string());
        }
        ("GET", "/repos/octo/app/pulls") => json!([
            {"number": 7, "title": "Fix the frobnicator", "state": "open",
             "head": {"ref": "fix", "sha": gh.head}, "base": {"ref": "main"}},
        ]),
        ("GET", "/repos/octo/app/branches/main") => json!({
            "name": "main",
            "commit": {"sha": gh.head, "commit": {"message": "m", "author": {"name": "O", "email": "o@x", "date": "2026-11-20T10:00:00Z"}}},
        }),
        _ => return (404, json!({"message": "Not Found"}).to_string()),
    };
    (200, reply.to_string())
}

/// Serves the git repositories under `root` over smart HTTP (`git http-backend`), to clients
/// whose basic-auth login `accept` takes (401 with a challenge otherwise): a private forge
/// repository, cloned with the netrc the server hands the runner.
async fn git_over_http(
    root: std::path::PathBuf,
    accept: impl Fn(&str, &str) -> bool + Send + Sync + 'static,
) -> std::net::SocketAddr {
    use base64::Engine;
    use http_body_util::Full;
    let accept = Arc::new(accept);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let exec_path = git(&root, &["--exec-path"]).trim().to_string();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (root, accept, exec_path) = (root.clone(), accept.clone(), exec_path.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (root, accept, exec_path) =
                            (root.clone(), accept.clone(), exec_path.clone());
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = http_body_util::BodyExt::collect(body)
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let login = parts
                                .headers
                                .get("authorization")
                                .and_then(|v| v.to_str().ok())
                                .and_then(|v| v.strip_prefix("Basic "))
                                .and_then(|b| {
                                    base64::engine::general_purpose::STANDARD.decode(b).ok()
                                })
                                .map(|b| String::from_utf8_lossy(&b).into_owned())
                                .and_then(|s| {
                                    s.split_once(':')
                                        .map(|(u, p)| (u.to_string(), p.to_string()))
                                });
                            if !login.as_ref().is_some_and(|(u, p)| accept(u, p)) {
                                return Ok::<_, std::convert::Infallible>(
                                    hyper::Response::builder()
                                        .status(401)
                                        .header("www-authenticate", "Basic realm=\"git\"")
                                        .body(Full::new(bytes::Bytes::new()))
                                        .unwrap(),
                                );
                            }
                            let mut child = tokio::process::Command::new(format!(
                                "{exec_path}/git-http-backend"
                            ))
                            .env_clear()
                            .env("GIT_PROJECT_ROOT", &root)
                            .env("GIT_HTTP_EXPORT_ALL", "1")
                            .env("REQUEST_METHOD", parts.method.as_str())
                            .env("PATH_INFO", parts.uri.path())
                            .env("QUERY_STRING", parts.uri.query().unwrap_or(""))
                            .env(
                                "CONTENT_TYPE",
                                parts
                                    .headers
                                    .get("content-type")
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or(""),
                            )
                            .env("CONTENT_LENGTH", body.len().to_string())
                            .env("REMOTE_USER", login.map(|(u, _)| u).unwrap_or_default())
                            .stdin(std::process::Stdio::piped())
                            .stdout(std::process::Stdio::piped())
                            .spawn()
                            .unwrap();
                            let mut stdin = child.stdin.take().unwrap();
                            tokio::io::AsyncWriteExt::write_all(&mut stdin, &body)
                                .await
                                .unwrap();
                            drop(stdin);
                            let out = child.wait_with_output().await.unwrap().stdout;
                            let split = out
                                .windows(4)
                                .position(|w| w == b"\r\n\r\n")
                                .map(|i| (i, 4))
                                .or_else(|| {
                                    out.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2))
                                })
                                .unwrap_or((out.len(), 0));
                            let head = String::from_utf8_lossy(&out[..split.0]).into_owned();
                            let mut response = hyper::Response::builder();
                            for line in head.lines() {
                                if let Some((k, v)) = line.split_once(':') {
                                    if k.eq_ignore_ascii_case("status") {
                                        let code: u16 = v
                                            .trim()
                                            .split(' ')
                                            .next()
                                            .unwrap_or("200")
                                            .parse()
                                            .unwrap_or(200);
                                        response = response.status(code);
                                    } else {
                                        response = response.header(k.trim(), v.trim());
                                    }
                                }
                            }
                            let rest = bytes::Bytes::copy_from_slice(
                                &out[(split.0 + split.1).min(out.len())..],
                            );
                            Ok(response.body(Full::new(rest)).unwrap())
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// The query parameters of a URL.
fn query_of(url: &str) -> std::collections::HashMap<String, String> {
    let query = url.split_once('?').map(|(_, q)| q).unwrap_or("");
    form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}

/// Presses the login button of `forge` in `browser`: the state the forge's authorize page
/// was given.
async fn start_sign_in(browser: &mut Browser, forge: i64) -> String {
    let start = browser
        .get(&format!("/authorize?forge_id={forge}"))
        .await
        .expect(303);
    query_of(start.header("location").unwrap())["state"].clone()
}

/// The login page a callback with [`GOOD_CODE`] and `state` lands `browser` on.
async fn finish_sign_in(browser: &mut Browser, state: &str) -> Option<String> {
    let back = browser
        .get(&format!("/authorize?code={GOOD_CODE}&state={state}"))
        .await
        .expect(303);
    back.header("location").map(str::to_string)
}

/// Signs in through the forge as a browser does: the login button, the forge's authorize
/// page (answered with [`GOOD_CODE`]), the callback. Returns the browser, signed in.
async fn sign_in(s: &TestServer, forge: i64, api: std::net::SocketAddr) -> Browser {
    let mut browser = Browser::new(&s.http);
    let start = browser
        .get(&format!("/authorize?forge_id={forge}"))
        .await
        .expect(303);
    let to = start.header("location").unwrap().to_string();
    assert!(
        to.starts_with(&format!("http://{api}/login/oauth/authorize?")),
        "{to}"
    );
    let q = query_of(&to);
    assert_eq!(q["client_id"], CLIENT_ID);
    assert!(
        q["redirect_uri"].ends_with("/authorize"),
        "{}",
        q["redirect_uri"]
    );
    assert!(q["scope"].contains("repo"), "{:?}", q.get("scope"));
    let state = q["state"].clone();
    let back = browser
        .get(&format!("/authorize?code={GOOD_CODE}&state={state}"))
        .await
        .expect(303);
    assert_eq!(back.header("location"), Some("/"), "{}", back.text());
    assert!(browser.cookie("user_sess").is_some());
    browser
}

async fn wait_until<T>(secs: u64, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn sign(secret: &str, body: &[u8]) -> String {
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
}

/// A commit on `main` of a local bare repository (the runner clones it).
fn commit(work: &std::path::Path, bare: &std::path::Path, file: &str) -> String {
    std::fs::write(work.join(file), file).unwrap();
    git(work, &["add", "."]);
    git(work, &["commit", "-q", "-m", file]);
    git(work, &["push", "-q", bare.to_str().unwrap(), "main"]);
    git(work, &["rev-parse", "HEAD"]).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_sign_in_repos_activation_pipeline_and_statuses() {
    let dist = first_party_plugins();
    let data = tempfile::tempdir().unwrap();
    let bare = data.path().join("octo-app.git");
    git(
        data.path(),
        &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()],
    );
    let work = data.path().join("octo-work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    let first = commit(&work, &bare, "README.md");

    let state: Shared = Arc::new(Mutex::new(GitHub {
        perm: json!({"admin": true, "push": true, "pull": true}),
        config: "steps:\n  - name: hi\n    image: sh\n    commands: [\"test -f README.md\"]\n"
            .into(),
        head: first.clone(),
        ..GitHub::default()
    }));
    // The repository is private: cloned over HTTP with the owner's token, as GitHub's netrc
    // has it (login = token, password = `x-oauth-basic`).
    let tokens = state.clone();
    let git_http = git_over_http(data.path().to_path_buf(), move |login, password| {
        password == "x-oauth-basic"
            && tokens
                .lock()
                .unwrap()
                .live_tokens
                .iter()
                .any(|t| t == login)
    })
    .await;
    state.lock().unwrap().clone_url = format!("http://{git_http}/octo-app.git");
    let fake = state.clone();
    let api = fake_service(move |r| Some(answer(&fake, r))).await;
    const FORGE: i64 = 1;
    let instance = format!(
        "[plugins.instances.github]\nfile = \"forge-github.wasm\"\nallowed_hosts = [\"http://{api}\"]\nsecrets = [\"forge:{FORGE}\"]\nconfig = {{ hook-secret = \"forge:{FORGE}\", api-url = \"http://{api}\" }}\n"
    );
    let tables = with_runner(data.path()) + &plugins_table(&dist, false, &instance);
    // Anyone with an account on the forge may sign in (`auth.open`).
    let s = TestServer::start_in_with_tables(data, "#open", &tables).await;
    let p = s.principals().await;
    let forge = s
        .http
        .post(
            "/api/forges",
            Some(&p.admin),
            &json!({"type": "github", "url": format!("http://{api}"), "client": CLIENT_ID,
                    "oauth_client_secret": CLIENT_SECRET, "webhook_secret": "a-webhook-secret-of-ours",
                    "additional_options": {"plugin": "github"}})
            .to_string(),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(forge["id"], FORGE);
    // A secret given on create is the one kept (and shown to the admin once).
    assert_eq!(forge["webhook_secret"], "a-webhook-secret-of-ours");
    let secret = "a-webhook-secret-of-ours";

    // A callback with a state that is not ours, or ours in another browser, is refused.
    let mut stranger = Browser::new(&s.http);
    let forged = stranger
        .get(&format!("/authorize?code={GOOD_CODE}&state=forged"))
        .await
        .expect(303);
    assert_eq!(
        forged.header("location"),
        Some("/login?error=invalid_state")
    );
    let mut victim = Browser::new(&s.http);
    let stolen = start_sign_in(&mut victim, FORGE).await;
    let replayed = stranger
        .get(&format!("/authorize?code={GOOD_CODE}&state={stolen}"))
        .await
        .expect(303);
    assert_eq!(
        replayed.header("location"),
        Some("/login?error=invalid_state")
    );
    // The forge's own error is passed on; a bad code is an OAuth error.
    let denied = stranger
        .get("/authorize?error=access_denied&error_description=The+user+said+no")
        .await
        .expect(303);
    assert_eq!(
        denied.header("location"),
        Some("/login?error=access_denied&error_description=The+user+said+no")
    );
    let bad_code = victim
        .get(&format!("/authorize?code=wrong&state={stolen}"))
        .await
        .expect(303);
    assert_eq!(
        bad_code.header("location"),
        Some("/login?error=oauth_error")
    );
    assert!(stranger.cookie("user_sess").is_none() && victim.cookie("user_sess").is_none());
    s.http
        .get("/login?error=oauth_error", None)
        .await
        .expect(200);

    // The dance: signed in as the forge's user, made from its account.
    let mut browser = sign_in(&s, FORGE, api).await;
    let config = globals(&browser.get("/web-config.js").await.expect(200));
    assert_eq!(config["USER"]["login"], "octocat");
    assert_eq!(config["USER"]["forge_id"], FORGE);
    assert_eq!(config["USER"]["forge_remote_id"], "1001");
    assert_eq!(config["USER"]["email"], "octocat@example.com");
    let csrf = config["CSRF"].as_str().unwrap().to_string();
    let pat = browser
        .send("POST", "/api/user/token", None, &[("x-csrf-token", &csrf)])
        .await
        .expect(200)
        .text();

    // The user's repositories come from the forge, as them; their token (a minute left) is
    // refreshed first.
    let listed = s
        .http
        .get("/api/user/repos?all=true", Some(&pat))
        .await
        .expect(200)
        .json();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["full_name"] == "octo/app"),
        "{listed}: the forge saw {:?}",
        state.lock().unwrap().seen
    );
    {
        let gh = state.lock().unwrap();
        let refreshed = gh.seen.iter().any(|(_, path, _, _, body)| {
            path == "/login/oauth/access_token" && body.contains("refresh_token")
        });
        assert!(refreshed, "the expiring token was refreshed");
        let last_list = gh
            .seen
            .iter()
            .rev()
            .find(|(_, path, ..)| path == "/user/repos")
            .unwrap();
        assert!(last_list.3.ends_with("ghu_token2"), "{:?}", last_list.3);
    }

    // Activation creates the webhook as the user; the repository is theirs.
    let repo = s
        .http
        .post(
            &format!("/api/repos?forge_remote_id=octo/app&forge_id={FORGE}"),
            Some(&pat),
            "",
        )
        .await
        .expect(200)
        .json();
    let id = repo["id"].as_i64().unwrap();
    let hook_url = {
        let gh = state.lock().unwrap();
        assert_eq!(gh.hooks.len(), 1, "{:?}", gh.hooks);
        let created = gh
            .seen
            .iter()
            .find(|(m, path, ..)| m == "POST" && path == "/repos/octo/app/hooks")
            .unwrap();
        assert!(
            created.3.contains("ghu_token"),
            "as the user: {:?}",
            created.3
        );
        gh.hooks[0]["config"]["url"].as_str().unwrap().to_string()
    };
    let hook_path = hook_url[hook_url.find("/api/hook").unwrap()..].to_string();

    // Open pull requests come from the forge.
    let prs = s
        .http
        .get(
            &format!("/api/repos/{}/pull_requests", repo["id"]),
            Some(&pat),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(prs, json!([{"index": "7", "title": "Fix the frobnicator"}]));

    // The organisation's admins are who the forge says: octocat administers `octo` there,
    // so here too (its secrets are theirs to manage).
    let org = repo["org_id"].as_i64().unwrap();
    let perm = s
        .http
        .get(&format!("/api/orgs/{org}/permissions"), Some(&pat))
        .await
        .expect(200)
        .json();
    assert_eq!(perm, json!({"member": true, "admin": true}));
    s.http
        .post(
            &format!("/api/orgs/{org}/secrets"),
            Some(&pat),
            r#"{"name":"org_token","value":"v","events":["push"]}"#,
        )
        .await
        .expect(200);

    // A signed push: the pipeline runs and its statuses reach the forge, pending → success.
    let push = |sha: &str| {
        let mut payload: Value =
            serde_json::from_str(include_str!("fixtures/github-push.json")).unwrap();
        payload["repository"]["id"] = json!(42);
        payload["repository"]["name"] = json!("app");
        payload["repository"]["full_name"] = json!("octo/app");
        payload["repository"]["owner"]["login"] = json!("octo");
        payload["repository"]["owner"]["name"] = json!("octo");
        payload["after"] = json!(sha);
        payload["head_commit"]["id"] = json!(sha);
        payload.to_string()
    };
    let deliver = |body: String| {
        let http = s.http.clone();
        let path = hook_path.clone();
        async move {
            let sig = sign(secret, body.as_bytes());
            http.send(
                "POST",
                &path,
                None,
                Some(body.as_bytes()),
                &[("x-github-event", "push"), ("x-hub-signature-256", &sig)],
            )
            .await
            .expect(200)
            .json()
        }
    };
    let created = deliver(push(&first)).await;
    let number = created["number"].as_i64().unwrap();
    let done = wait_for(&s.http, &pat, id, number, 60, |p| {
        matches!(p["status"].as_str(), Some("success" | "failure" | "error"))
    })
    .await;
    assert_eq!(done["status"], "success", "{done:#}");
    let states_of = |sha: &str| {
        let gh = state.lock().unwrap();
        gh.statuses
            .iter()
            .filter(|(c, _)| c == sha)
            .map(|(_, b)| b.clone())
            .collect::<Vec<Value>>()
    };
    let posted = wait_until(30, || {
        let s = states_of(&first);
        s.last()
            .filter(|b| b["state"] == "success")
            .map(|_| s.clone())
    })
    .await
    .unwrap_or_else(|| panic!("no success status: {:?}", states_of(&first)));
    assert_eq!(posted[0]["state"], "pending", "{posted:?}");
    let last = posted.last().unwrap();
    assert_eq!(last["context"], "ci/woodpecker/push/woodpecker");
    assert_eq!(last["description"], "Pipeline was successful");
    let target = last["target_url"].as_str().unwrap();
    assert!(
        target.ends_with(&format!("/repos/{id}/pipeline/{number}/1")),
        "{target}"
    );

    // A failing step: its status says failure.
    state.lock().unwrap().config =
        "steps:\n  - name: broken\n    image: sh\n    commands: [\"exit 3\"]\n".into();
    let second = commit(&work, &bare, "CHANGES.md");
    let created = deliver(push(&second)).await;
    let number = created["number"].as_i64().unwrap();
    wait_for(&s.http, &pat, id, number, 60, |p| p["status"] == "failure").await;
    let failed = wait_until(30, || {
        states_of(&second)
            .last()
            .filter(|b| b["state"] == "failure")
            .cloned()
    })
    .await;
    assert!(failed.is_some(), "{:?}", states_of(&second));
    let metrics = s.http.get("/metrics", None).await.expect(200).text();
    assert!(
        metrics.contains("woodlark_forge_statuses_posted_total"),
        "{metrics}"
    );

    // The forge drops octocat to pull: signing in again syncs it, and the repository's
    // settings are no longer theirs to change.
    let settings = json!({"timeout": 30}).to_string();
    s.http
        .patch(&format!("/api/repos/{id}"), Some(&pat), &settings)
        .await
        .expect(200);
    state.lock().unwrap().perm = json!({"admin": false, "push": false, "pull": true});
    sign_in(&s, FORGE, api).await;
    // The sync runs after the sign-in answered.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = s
            .http
            .patch(&format!("/api/repos/{id}"), Some(&pat), &settings)
            .await;
        if r.status == 403 {
            break;
        }
        assert!(Instant::now() < deadline, "still allowed: {}", r.status);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Still a reader.
    s.http
        .get(&format!("/api/repos/{id}"), Some(&pat))
        .await
        .expect(200);

    // The forge's tokens are nowhere in clear on disk.
    for suffix in ["", "-wal"] {
        let path = format!("{}{suffix}", s.db_path().display());
        let bytes = std::fs::read(&path).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("ghu_token"), "{path} holds an access token");
        assert!(
            !text.contains("ghr_refresh"),
            "{path} holds a refresh token"
        );
        assert!(
            !text.contains(CLIENT_SECRET),
            "{path} holds the OAuth secret"
        );
    }
}

#[tokio::test]
async fn sign_in_needs_an_open_server_or_an_admin_login() {
    let dist = first_party_plugins();
    let data = tempfile::tempdir().unwrap();
    let state: Shared = Arc::new(Mutex::new(GitHub::default()));
    let fake = state.clone();
    let api = fake_service(move |r| Some(answer(&fake, r))).await;
    let instance = format!(
        "[plugins.instances.github]\nfile = \"forge-github.wasm\"\nallowed_hosts = [\"http://{api}\"]\nconfig = {{ api-url = \"http://{api}\" }}\n"
    );
    let tables = plugins_table(&dist, false, &instance);
    let s = TestServer::start_in_with_tables(data, "", &tables).await;
    let p = s.principals().await;
    let body = json!({"type": "github", "url": format!("http://{api}"), "client": CLIENT_ID,
                      "oauth_client_secret": CLIENT_SECRET, "orgs": ["octo"],
                      "additional_options": {"plugin": "github"}});
    let forge = s
        .http
        .post("/api/forges", Some(&p.admin), &body.to_string())
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    let mut browser = Browser::new(&s.http);
    let state = start_sign_in(&mut browser, forge).await;
    assert_eq!(
        finish_sign_in(&mut browser, &state).await.as_deref(),
        Some("/login?error=registration_closed")
    );
    assert!(browser.cookie("user_sess").is_none());

    // An organisation the user is not in: refused before any user is made.
    let patch = json!({"orgs": ["someone-else"]}).to_string();
    s.http
        .patch(&format!("/api/forges/{forge}"), Some(&p.admin), &patch)
        .await
        .expect(200);
    let state = start_sign_in(&mut browser, forge).await;
    assert_eq!(
        finish_sign_in(&mut browser, &state).await.as_deref(),
        Some("/login?error=org_access_denied")
    );
    // A forge without an OAuth client, and the git forge, still show the token form.
    let git = s.git_forge(&p.admin).await;
    let form = s
        .http
        .get(&format!("/authorize?forge_id={git}"), None)
        .await
        .expect(200);
    assert!(form.text().contains("Personal access token"));
    s.http
        .get("/authorize?forge_id=999", None)
        .await
        .expect(404);
    // A form-encoded body to the JSON API says what to send.
    let form_post = s
        .http
        .send(
            "POST",
            "/api/forges",
            Some(&p.admin),
            Some(b"type=github&url=https://x"),
            &[("content-type", "application/x-www-form-urlencoded")],
        )
        .await
        .expect(400);
    assert!(
        form_post.text().contains("Content-Type: application/json"),
        "{}",
        form_post.text()
    );
}
