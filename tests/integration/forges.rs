//! The forge round trip, for every forge type the first-party adapters speak to, against
//! fake forges on 127.0.0.1 that answer as the real APIs do and record what they are asked
//! (`forge_fakes`): sign in through the forge (OAuth, with a cookie jar), the user's
//! repositories with their permissions, activation creating the webhook as the user, a
//! signed delivery, the pipeline cloning the private repository over HTTP with the netrc the
//! forge's token makes, and the commit statuses it posts; expiring tokens refreshed before
//! use; a permission dropped on the forge dropped here.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::forge_fakes::{
    ACCESS_PREFIX, CLIENT_ID, CLIENT_SECRET, GOOD_CODE, Kind, REFRESH_PREFIX, Shared, answer, fake,
};
use crate::pipelines::wait_for;
use crate::plugins::{fake_service, plugins_table};
use crate::util::{Principals, TestServer, first_party_plugins, git};
use crate::web::{Browser, globals};

/// Where the round trip's pipelines run.
#[derive(Clone, Copy, PartialEq)]
enum Backend {
    Local,
    Docker,
}

impl Backend {
    /// A config whose one step checks the clone (and so the netrc), then looks for the
    /// repository owner's forge token wherever a step could read it (its environment, its
    /// home, the workspace and the directories around it, `/tmp`, `/etc`) and fails
    /// with 97 or 98 if it finds it, and then exits `code`.
    fn config(self, code: u8) -> String {
        // Host steps: the workflow's directory and the workdir around it. Containers: the
        // volume at /woodpecker and the home (never `/`: /proc and /sys do not end).
        let (image, dirs) = match self {
            Backend::Local => ("sh", r#""$$PWD/.." "$$PWD/../..""#),
            Backend::Docker => (crate::docker::BUSYBOX, "/woodpecker /root"),
        };
        // The token's prefix, spelt so that the step's own script does not contain it.
        let (a, b) = ACCESS_PREFIX.split_at(4);
        format!(
            "steps:\n  - name: check\n    image: {image}\n    commands:\n      - test -f README.md\n      - p={a}; p=\"$${{p}}{b}\"\n      - if env | grep -q \"$$p\"; then echo token in the environment; exit 97; fi\n      - for d in \"$$HOME\" \"$$PWD\" {dirs} /tmp /etc; do if grep -rqs \"$$p\" \"$$d\"; then echo token in $$d; exit 98; fi; done\n      - exit {code}\n"
        )
    }
}

/// Serves the git repositories under `root` over smart HTTP (`git http-backend`) on `bind`,
/// to clients whose basic-auth login `accept` takes (401 with a challenge otherwise): a
/// private forge repository, cloned with the netrc the server hands the runner.
async fn git_over_http(
    bind: std::net::IpAddr,
    root: std::path::PathBuf,
    accept: impl Fn(&str, &str) -> bool + Send + Sync + 'static,
) -> std::net::SocketAddr {
    use base64::Engine;
    use http_body_util::Full;
    let accept = Arc::new(accept);
    let listener = tokio::net::TcpListener::bind((bind, 0)).await.unwrap();
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
pub(crate) async fn sign_in(
    s: &TestServer,
    forge: i64,
    api: std::net::SocketAddr,
    kind: Kind,
) -> Browser {
    let mut browser = Browser::new(&s.http);
    let start = browser
        .get(&format!("/authorize?forge_id={forge}"))
        .await
        .expect(303);
    let to = start.header("location").unwrap().to_string();
    assert!(
        to.starts_with(&format!("http://{api}{}?", kind.authorize_path())),
        "{to}"
    );
    let q = query_of(&to);
    assert_eq!(q["client_id"], CLIENT_ID);
    assert!(
        q["redirect_uri"].ends_with("/authorize"),
        "{}",
        q["redirect_uri"]
    );
    assert_eq!(
        q.get("response_type").map(String::as_str),
        Some("code"),
        "{to}"
    );
    let landed = finish_sign_in(&mut browser, &q["state"]).await;
    assert_eq!(landed.as_deref(), Some("/"));
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

/// A commit on `main` of a local bare repository (the runner clones it).
fn commit(work: &Path, bare: &Path, file: &str) -> String {
    std::fs::write(work.join(file), file).unwrap();
    git(work, &["add", "."]);
    git(work, &["commit", "-q", "-m", file]);
    git(work, &["push", "-q", bare.to_str().unwrap(), "main"]);
    git(work, &["rev-parse", "HEAD"]).trim().to_string()
}

/// A server signed into through a fake forge, with the forge's repository activated.
pub(crate) struct RoundTrip {
    pub(crate) s: TestServer,
    pub(crate) fake: Shared,
    pub(crate) api: std::net::SocketAddr,
    pub(crate) forge: i64,
    /// octocat's personal token.
    pub(crate) pat: String,
    /// The activated repository.
    pub(crate) id: i64,
    /// A clone of the forge's repository, and the bare repository it pushes to.
    work: PathBuf,
    bare: PathBuf,
    /// Removes the docker backend's containers, networks and volumes when the test ends.
    _engine: Option<crate::docker::EngineCleanup>,
    /// A second server on the same PostgreSQL database, without a runner (see
    /// [`gitea_round_trip_with_a_second_replica`]).
    replica: Option<TestServer>,
}

/// A push delivered to the server: its commit, the hook's path, body and headers, and the
/// pipeline it made.
pub(crate) struct Delivered {
    pub(crate) sha: String,
    pub(crate) path: String,
    pub(crate) body: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) created: serde_json::Value,
}

impl RoundTrip {
    /// The server, and the second replica if there is one.
    pub(crate) fn servers(&self) -> Vec<&TestServer> {
        std::iter::once(&self.s).chain(&self.replica).collect()
    }

    /// Pushes a commit and delivers the forge's signed push hook for it (with a replica, to
    /// both at the same moment): what was delivered and the pipeline it made.
    pub(crate) async fn push_and_deliver(&self, file: &str) -> Delivered {
        let sha = commit(&self.work, &self.bare, file);
        self.fake.lock().unwrap().head = sha.clone();
        let (body, headers) = self.fake.lock().unwrap().push_delivery(&sha);
        let (path, _) = self.fake.lock().unwrap().hook().unwrap();
        let deliver = |http: &crate::util::Http| {
            let (http, path, body) = (http.clone(), path.clone(), body.clone());
            let headers = headers.clone();
            async move {
                let headers: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                http.send("POST", &path, None, Some(body.as_bytes()), &headers)
                    .await
                    .expect(200)
                    .json()
            }
        };
        let created = match &self.replica {
            None => deliver(&self.s.http).await,
            // The forge's retry reaching the other replica at the same moment: the write
            // locks the repository's row before it looks the delivery up, so the later one
            // answers with the pipeline the first made.
            Some(replica) => {
                let (first, retry) = tokio::join!(deliver(&self.s.http), deliver(&replica.http));
                assert_eq!(first["number"], retry["number"], "{first} {retry}");
                first
            }
        };
        Delivered {
            sha,
            path,
            body,
            headers,
            created,
        }
    }

    /// Pushes a commit, delivers the forge's signed push hook for it and waits for the
    /// pipeline to end in `want`; then for the forge to have received statuses for the
    /// commit ending in the forge's name for `want`. Returns the pipeline's number and the
    /// statuses' states.
    pub(crate) async fn push_and_check(&self, file: &str, want: &str) -> (i64, Vec<String>) {
        let kind = self.fake.lock().unwrap().kind;
        let Delivered {
            sha,
            path,
            body,
            headers,
            created,
        } = self.push_and_deliver(file).await;
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let number = created["number"].as_i64().unwrap();
        let done = wait_for(&self.s.http, &self.pat, self.id, number, 60, |p| {
            matches!(p["status"].as_str(), Some("success" | "failure" | "error"))
        })
        .await;
        assert_eq!(done["status"], want, "{done:#}");
        // The forge delivers it again (a retry, "redeliver"): the same pipeline, no new one.
        let again = self
            .s
            .http
            .send("POST", &path, None, Some(body.as_bytes()), &headers)
            .await
            .expect(200)
            .json();
        assert_eq!(again["number"], number, "{again:#}");
        let next = format!("/api/repos/{}/pipelines/{}", self.id, number + 1);
        self.s.http.get(&next, Some(&self.pat)).await.expect(404);
        let [pending, success, failure] = kind.state_names();
        let last = if want == "success" { success } else { failure };
        let fake = self.fake.clone();
        let posted = wait_until(30, || {
            let posted = fake.lock().unwrap().statuses_of(&sha);
            posted
                .last()
                .filter(|p| p.state == last)
                .map(|_| posted.clone())
        })
        .await
        .unwrap_or_else(|| {
            panic!(
                "{kind:?}: no {last} status: {:?}",
                self.fake.lock().unwrap().statuses_of(&sha)
            )
        });
        // Each state once: one poster (the replicas' leader), one post per change. A second
        // poster's copies would come in about the same moment: give them that moment.
        let posted = if self.replica.is_some() {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            self.fake.lock().unwrap().statuses_of(&sha)
        } else {
            posted
        };
        // (Some forges name two of our states alike: a state is its name and description.)
        let states: Vec<(&str, &str)> = posted
            .iter()
            .map(|p| (p.state.as_str(), p.description.as_str()))
            .collect();
        let distinct: std::collections::BTreeSet<_> = states.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            states.len(),
            "{kind:?}: posted twice: {states:?}"
        );
        assert_eq!(posted[0].state, pending, "{kind:?}: {posted:?}");
        let final_status = posted.last().unwrap();
        assert_eq!(final_status.context, "ci/woodpecker/push/woodpecker");
        let said = if want == "success" {
            "Pipeline was successful"
        } else {
            "Pipeline failed"
        };
        assert_eq!(final_status.description, said, "{kind:?}");
        assert!(
            final_status
                .link
                .ends_with(&format!("/repos/{}/pipeline/{number}/1", self.id)),
            "{kind:?}: {final_status:?}"
        );
        // Bitbucket shows statuses per ref: Cloud takes the branch, Data Center the ref and
        // the build's timing (its duration once the pipeline finished).
        match kind {
            Kind::Bitbucket => assert!(
                posted.iter().all(|p| p.body["refname"] == "main"),
                "{posted:?}"
            ),
            Kind::BitbucketDc => {
                assert!(
                    posted
                        .iter()
                        .all(|p| p.body["ref"] == "refs/heads/main"
                            && p.body["parent"] == p.body["key"]),
                    "{posted:?}"
                );
                let started = final_status.body["dateAdded"].as_i64().unwrap_or(0);
                assert!(started > 0, "{final_status:?}");
                assert!(final_status.body["duration"].is_u64(), "{final_status:?}");
            }
            _ => {}
        }
        (number, posted.into_iter().map(|p| p.state).collect())
    }
}

/// The whole round trip with a fake `kind` forge: refused callbacks, the OAuth dance, the
/// user's repositories from the forge (its expiring token refreshed first), activation as
/// the UI does it (by the forge's id for the repository) creating the hook as the user,
/// then a signed push whose pipeline clones the private repository over HTTP with the
/// forge's netrc and succeeds, its statuses pending → success on the forge, and a failing
/// one. The forge's tokens never reach the disk in clear.
pub(crate) async fn round_trip(kind: Kind) -> RoundTrip {
    round_trip_set_up(kind, Setup::Api).await
}

/// How the round trip's forge comes to be: each way an operator sets one up. Nothing else
/// is wired: the forge grants its adapter its hosts and webhook secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Setup {
    /// `POST /api/forges`, as Woodpecker's admins create forges.
    Api,
    /// `POST /api/forges` beside a `[plugins.instances]` table granting the adapter the
    /// same by hand (how it had to be done before forges granted their adapters).
    InstanceTable,
    /// `[[forges]]` in config.toml.
    ConfigFile,
    /// Woodpecker's `WOODPECKER_*` server variables.
    WoodpeckerEnv,
}

/// [`round_trip`] with the forge set up as `setup` says.
pub(crate) async fn round_trip_set_up(kind: Kind, setup: Setup) -> RoundTrip {
    round_trip_with(kind, Backend::Local, None, setup).await
}

/// [`round_trip`] with the pipelines on `backend`. On the docker backend the clone runs in
/// a container, which reaches the git server on the host's address on Docker's bridge.
async fn round_trip_on(kind: Kind, backend: Backend) -> RoundTrip {
    round_trip_with(kind, backend, None, Setup::Api).await
}

/// Where the fake forge's API is when the adapter's default for a forge at `api` is not it
/// (the fakes serve GitHub's and Bitbucket Cloud's APIs under their own roots).
fn api_url(kind: Kind, api: std::net::SocketAddr) -> Option<String> {
    match kind {
        Kind::GitHub => Some(format!("http://{api}")),
        Kind::Bitbucket => Some(format!("http://{api}/2.0")),
        _ => None,
    }
}

/// The `WOODPECKER_*` variables an upstream deployment would have for the fake forge.
fn woodpecker_env(kind: Kind, api: std::net::SocketAddr) -> Vec<(String, String)> {
    let stem = match kind {
        Kind::GitHub => "GITHUB",
        Kind::Gitea => "GITEA",
        Kind::Forgejo => "FORGEJO",
        Kind::GitLab => "GITLAB",
        Kind::Bitbucket => "BITBUCKET",
        Kind::BitbucketDc => "BITBUCKET_DC",
    };
    let (client, secret) = if kind == Kind::BitbucketDc {
        ("CLIENT_ID", "CLIENT_SECRET")
    } else {
        ("CLIENT", "SECRET")
    };
    [
        ("WOODPECKER_OPEN".to_string(), "true".to_string()),
        (format!("WOODPECKER_{stem}"), "true".into()),
        (format!("WOODPECKER_{stem}_URL"), format!("http://{api}")),
        (format!("WOODPECKER_{stem}_{client}"), CLIENT_ID.into()),
        (format!("WOODPECKER_{stem}_{secret}"), CLIENT_SECRET.into()),
    ]
    .into()
}

/// The Gitea round trip (local runner, the forge made through the API) with a second
/// replica, the two sharing the PostgreSQL database at `url`.
pub(crate) async fn gitea_round_trip_on_replicas(url: String) -> RoundTrip {
    round_trip_with(Kind::Gitea, Backend::Local, Some(url), Setup::Api).await
}

/// [`round_trip_on`]; with `shared` (a PostgreSQL database's URL), the server and a second
/// one (no runner, its own data dir, the same sealing key) share that database for the
/// whole trip.
async fn round_trip_with(
    kind: Kind,
    backend: Backend,
    shared: Option<String>,
    setup: Setup,
) -> RoundTrip {
    let dist = first_party_plugins();
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("octo")).unwrap();
    let bare = data.path().join("octo/app.git");
    git(
        data.path(),
        &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()],
    );
    let work = data.path().join("octo-work");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    commit(&work, &bare, "README.md");

    let state = fake(kind, &backend.config(0));
    // The repository is private: cloned over HTTP with the owner's token, presented as the
    // forge takes it.
    let tokens = state.clone();
    let (git_bind, runner, engine) = match backend {
        Backend::Local => (
            std::net::IpAddr::from([127, 0, 0, 1]),
            crate::util::with_runner(data.path()),
            None,
        ),
        Backend::Docker => {
            crate::docker::ensure_images();
            (
                crate::docker::bridge_gateway(),
                crate::docker::docker_runner(data.path()),
                Some(crate::docker::EngineCleanup(crate::docker::owner_of(
                    data.path(),
                ))),
            )
        }
    };
    let git_http = git_over_http(
        git_bind,
        data.path().to_path_buf(),
        move |login, password| tokens.lock().unwrap().clone_allowed(login, password),
    )
    .await;
    state.lock().unwrap().clone_url = format!("http://{git_http}/octo/app.git");
    let fake_state = state.clone();
    let api = fake_service(move |r| Some(answer(&fake_state, r))).await;
    const FORGE: i64 = 1;
    const WEBHOOK_SECRET: &str = "a-webhook-secret-of-ours";
    let name = kind.forge_type();
    let instance = match setup {
        Setup::InstanceTable => format!(
            "[plugins.instances.{name}]\nfile = \"forge-{name}.wasm\"\nallowed_hosts = [\"http://{api}\"]\nsecrets = [\"forge:{FORGE}\"]\nconfig = {{ hook-secret = \"forge:{FORGE}\"{} }}\n",
            kind.instance_config(api)
        ),
        Setup::ConfigFile => {
            let secrets = data.path().join("forge-secrets");
            std::fs::create_dir_all(&secrets).unwrap();
            let (oauth, hooks) = (secrets.join("oauth"), secrets.join("hooks"));
            std::fs::write(&oauth, format!("{CLIENT_SECRET}\n")).unwrap();
            std::fs::write(&hooks, WEBHOOK_SECRET).unwrap();
            let api_url = api_url(kind, api)
                .map(|u| format!("api_url = {u:?}\n"))
                .unwrap_or_default();
            format!(
                "[[forges]]\nid = {FORGE}\ntype = {name:?}\nurl = \"http://{api}\"\nclient = {CLIENT_ID:?}\nclient_secret_file = {:?}\nwebhook_secret_file = {:?}\n{api_url}",
                oauth.display().to_string(),
                hooks.display().to_string()
            )
        }
        Setup::Api | Setup::WoodpeckerEnv => String::new(),
    };
    let env = match setup {
        Setup::WoodpeckerEnv => woodpecker_env(kind, api),
        _ => Vec::new(),
    };
    // Anyone with an account on the forge may sign in (`auth.open`; Woodpecker's variables
    // say it with WOODPECKER_OPEN).
    let open = if setup == Setup::WoodpeckerEnv {
        ""
    } else {
        "#open"
    };
    let shared = shared.map(|url| {
        let key = data.path().join("secrets.key").display().to_string();
        format!("[storage]\nurl = {url:?}\nsecret_key_file = {key:?}\n")
    });
    // (`[[forges]]` is an array of tables: it goes after every other table.)
    let tables = runner
        + &plugins_table(
            &dist,
            false,
            if setup == Setup::ConfigFile {
                ""
            } else {
                &instance
            },
        )
        + shared.as_deref().unwrap_or("")
        + if setup == Setup::ConfigFile {
            &instance
        } else {
            ""
        };
    let s = TestServer::start_in_with_env(data, open, &tables, &env).await;
    let replica = match shared {
        Some(storage) => {
            let tables = plugins_table(&dist, false, &instance) + &storage;
            let dir = tempfile::tempdir().unwrap();
            Some(TestServer::start_in_with_env(dir, open, &tables, &env).await)
        }
        None => None,
    };
    let p = s.principals().await;
    match setup {
        Setup::Api | Setup::InstanceTable => {
            let mut options = serde_json::Map::new();
            if setup == Setup::InstanceTable {
                options.insert("plugin".into(), json!(name));
            } else if let Some(url) = api_url(kind, api) {
                options.insert("api_url".into(), json!(url));
            }
            let forge = s
                .http
                .post(
                    "/api/forges",
                    Some(&p.admin),
                    &json!({"type": name, "url": format!("http://{api}"), "client": CLIENT_ID,
                            "oauth_client_secret": CLIENT_SECRET, "webhook_secret": WEBHOOK_SECRET,
                            "additional_options": options})
                    .to_string(),
                )
                .await
                .expect(200)
                .json();
            assert_eq!(forge["id"], FORGE);
            // A secret given on create is the one kept (and shown to the admin once).
            assert_eq!(forge["webhook_secret"], WEBHOOK_SECRET);
        }
        Setup::ConfigFile | Setup::WoodpeckerEnv => {
            // The operator's forge is there under its id, read-only through the API.
            let forge = s
                .http
                .get(&format!("/api/forges/{FORGE}"), Some(&p.admin))
                .await
                .expect(200)
                .json();
            assert_eq!(forge["woodlark_type"], name, "{forge}");
            assert_eq!(forge["url"], format!("http://{api}"));
            assert_eq!(forge["client"], CLIENT_ID);
            let origin = forge["woodlark_configured_in"]
                .as_str()
                .unwrap()
                .to_string();
            let changed = s
                .http
                .patch(
                    &format!("/api/forges/{FORGE}"),
                    Some(&p.admin),
                    &json!({"url": "http://elsewhere.example.com"}).to_string(),
                )
                .await
                .expect(409)
                .text();
            assert!(changed.contains(&origin), "{changed}");
            let want = if setup == Setup::ConfigFile {
                "config.toml"
            } else {
                "WOODPECKER_"
            };
            assert!(changed.contains(want), "{changed}");
            s.http
                .delete(&format!("/api/forges/{FORGE}"), Some(&p.admin))
                .await
                .expect(409);
            if setup == Setup::ConfigFile {
                assert_eq!(forge["webhook_secret"], WEBHOOK_SECRET, "from its file");
            }
            // A forge added through the API comes after it (on PostgreSQL too: the id
            // sequence moved past the configured id).
            let next = s
                .http
                .post(
                    "/api/forges",
                    Some(&p.admin),
                    &json!({"type": "gitea", "url": "https://other.example.com",
                            "oauth_client_secret": "a-token"})
                    .to_string(),
                )
                .await
                .expect(200)
                .json();
            assert_eq!(next["id"], FORGE + 1, "{next}");
        }
    }

    // A callback with a state that is not ours, or ours in another browser, is refused.
    let mut stranger = Browser::new(&s.http);
    assert_eq!(
        finish_sign_in(&mut stranger, "forged").await.as_deref(),
        Some("/login?error=invalid_state")
    );
    let mut victim = Browser::new(&s.http);
    let stolen = start_sign_in(&mut victim, FORGE).await;
    assert_eq!(
        finish_sign_in(&mut stranger, &stolen).await.as_deref(),
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

    // The dance: signed in as the forge's user, made from its account.
    let mut browser = sign_in(&s, FORGE, api, kind).await;
    let config = globals(&browser.get("/web-config.js").await.expect(200));
    assert_eq!(config["USER"]["login"], "octocat");
    assert_eq!(config["USER"]["forge_id"], FORGE);
    assert_eq!(config["USER"]["forge_remote_id"], kind.user_remote_id());
    assert_eq!(config["USER"]["email"], "octocat@example.com");
    let csrf = config["CSRF"].as_str().unwrap().to_string();
    let pat = browser
        .send("POST", "/api/user/token", None, &[("x-csrf-token", &csrf)])
        .await
        .expect(200)
        .text();

    // The user's repositories come from the forge, as them; their token (a minute left) is
    // refreshed first.
    let refreshes = |fake: &Shared| {
        fake.lock()
            .unwrap()
            .seen
            .iter()
            .filter(|s| s.body.contains("refresh_token") && s.method == "POST")
            .count()
    };
    let before = refreshes(&state);
    let listed = s
        .http
        .get("/api/user/repos?all=true", Some(&pat))
        .await
        .expect(200)
        .json();
    let listed = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["full_name"] == kind.full_name())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{kind:?}: {listed}: the forge saw {:?}",
                state.lock().unwrap().seen
            )
        });
    assert!(
        refreshes(&state) > before,
        "{kind:?}: the expiring token was refreshed"
    );
    {
        // The list was read with the refreshed token (the sign-in's own sync may still be
        // using the first one).
        let f = state.lock().unwrap();
        let newest = f.live_tokens.last().unwrap().clone();
        let listed_with: Vec<&str> = f
            .seen
            .iter()
            .filter(|s| s.path == kind.repos_path())
            .map(|s| s.auth.as_str())
            .collect();
        assert!(
            listed_with.iter().any(|a| a.ends_with(&newest)),
            "{kind:?}: the list was read with {newest}: {listed_with:?}"
        );
    }

    // Activation, as the web UI asks for it (by the forge's own id for the repository),
    // creates the webhook as the user; the repository is theirs.
    let remote_id = listed["forge_remote_id"].as_str().unwrap().to_string();
    let repo = s
        .http
        .post(
            &format!(
                "/api/repos?forge_remote_id={}&forge_id={FORGE}",
                form_urlencoded::byte_serialize(remote_id.as_bytes()).collect::<String>()
            ),
            Some(&pat),
            "",
        )
        .await
        .expect(200)
        .json();
    assert_eq!(repo["full_name"], kind.full_name());
    assert_eq!(repo["forge_remote_id"], remote_id.as_str());
    let id = repo["id"].as_i64().unwrap();
    {
        let f = state.lock().unwrap();
        assert_eq!(f.hooks.len(), 1, "{kind:?}: {:?}", f.hooks);
        let created = f
            .seen
            .iter()
            .find(|s| s.method == "POST" && s.body.contains("/api/hook"))
            .unwrap();
        assert!(
            created.auth.contains(ACCESS_PREFIX),
            "{kind:?}: as the user: {:?}",
            created.auth
        );
    }
    let round = RoundTrip {
        s,
        fake: state,
        api,
        forge: FORGE,
        pat,
        id,
        work,
        bare,
        _engine: engine,
        replica,
    };

    // A signed push: the pipeline clones with the forge's netrc, runs, and its statuses
    // reach the forge, pending → success; a failing step gives a failure.
    round.push_and_check("CHANGES.md", "success").await;
    round.fake.lock().unwrap().config = backend.config(3);
    round.push_and_check("NEWS.md", "failure").await;
    round.fake.lock().unwrap().config = backend.config(0);
    let metrics = round.s.http.get("/metrics", None).await.expect(200).text();
    assert!(
        metrics.contains("woodlark_forge_statuses_posted_total"),
        "{metrics}"
    );

    // Repair replaces the hook (one, not two), as the owner.
    round
        .s
        .http
        .post(
            &format!("/api/repos/{}/repair", round.id),
            Some(&round.pat),
            "",
        )
        .await
        .expect(204);
    {
        let f = round.fake.lock().unwrap();
        assert_eq!(
            f.hooks.len(),
            1,
            "{kind:?}: repair leaves one hook: {:?}",
            f.hooks
        );
    }

    // The forge's tokens are nowhere in clear at rest.
    {
        let path = round.s.database();
        let bytes = round.s.stored_bytes();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(ACCESS_PREFIX),
            "{path} holds an access token"
        );
        assert!(
            !text.contains(REFRESH_PREFIX),
            "{path} holds a refresh token"
        );
        assert!(
            !text.contains(CLIENT_SECRET),
            "{path} holds the OAuth secret"
        );
    }
    round
}

/// The round trip, then deactivation: the hook is removed from the forge.
async fn round_trip_and_deactivate(kind: Kind, setup: Setup) {
    let round = round_trip_set_up(kind, setup).await;
    let repo = round
        .s
        .http
        .delete(&format!("/api/repos/{}", round.id), Some(&round.pat))
        .await
        .expect(200)
        .json();
    assert_eq!(repo["active"], false, "{kind:?}: {repo}");
    let f = round.fake.lock().unwrap();
    assert!(
        f.hooks.is_empty(),
        "{kind:?}: the hook stayed: {:?}",
        f.hooks
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_round_trip() {
    round_trip_and_deactivate(Kind::Gitea, Setup::Api).await;
}

/// The round trip with a second replica on the same database: the leader alone posts the
/// commit statuses, each state once, whichever replica ran the pipeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_round_trip_with_a_second_replica() {
    let url = woodlark_store::pg::testing::Cluster::shared().fresh_database();
    let round = gitea_round_trip_on_replicas(url).await;
    let replica = round.replica.as_ref().unwrap();
    let leaders = [&round.s, replica]
        .iter()
        .filter(|s| *s.app_state.ci.reads.leadership().borrow())
        .count();
    assert_eq!(leaders, 1);
}

/// Issue 45, item 4: a captured signed push sent again with another delivery id, or none,
/// makes no pipeline (the id is outside the signature; the body is not), neither while the
/// pipeline it made exists (answered with that one, as a redelivery is) nor after it is
/// deleted. Before bodies were known, each replay made a pipeline, secrets and all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_signed_push_replayed_under_any_delivery_id_makes_no_pipeline() {
    let round = round_trip(Kind::Gitea).await;
    let (number, _) = round.push_and_check("REPLAY.md", "success").await;
    let (body, headers, path) = {
        let fake = round.fake.lock().unwrap();
        let (body, headers) = fake.push_delivery(&fake.head);
        (body, headers, fake.hook().unwrap().0)
    };
    let is_id = |k: &str| k.ends_with("-delivery");
    assert!(headers.iter().any(|(k, _)| is_id(k)), "{headers:?}");
    let replay = |id: Option<&'static str>| {
        let mut sent: Vec<(String, String)> =
            headers.iter().filter(|(k, _)| !is_id(k)).cloned().collect();
        if let Some(id) = id {
            sent.push(("x-gitea-delivery".into(), id.into()));
            sent.push(("x-github-delivery".into(), id.into()));
        }
        let (http, path, body) = (round.s.http.clone(), path.clone(), body.clone());
        async move {
            let sent: Vec<(&str, &str)> =
                sent.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            http.send("POST", &path, None, Some(body.as_bytes()), &sent)
                .await
        }
    };
    let next = format!("/api/repos/{}/pipelines/{}", round.id, number + 1);
    for id in [Some("attacker-1"), Some("attacker-2"), None] {
        let answer = replay(id).await.expect(200).json();
        assert_eq!(answer["number"], number, "{id:?}: {answer:#}");
        round.s.http.get(&next, Some(&round.pat)).await.expect(404);
    }
    round
        .s
        .http
        .delete(
            &format!("/api/repos/{}/pipelines/{number}", round.id),
            Some(&round.pat),
        )
        .await
        .expect(204);
    for id in [Some("attacker-3"), None] {
        let answer = replay(id).await.expect(200);
        assert!(
            answer.text().contains("received before"),
            "{id:?}: {}",
            answer.text()
        );
        round.s.http.get(&next, Some(&round.pat)).await.expect(404);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgejo_round_trip_from_config_toml() {
    round_trip_and_deactivate(Kind::Forgejo, Setup::ConfigFile).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_round_trip_from_woodpeckers_variables() {
    round_trip_and_deactivate(Kind::GitLab, Setup::WoodpeckerEnv).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_cloud_round_trip() {
    round_trip_and_deactivate(Kind::Bitbucket, Setup::InstanceTable).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bitbucket_data_center_round_trip() {
    round_trip_and_deactivate(Kind::BitbucketDc, Setup::Api).await;
}

/// The round trip with the docker backend: the clone container fetches the private
/// repository over HTTP with the `CI_NETRC_*` login GitLab's token makes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitlab_round_trip_on_the_docker_backend() {
    let round = round_trip_on(Kind::GitLab, Backend::Docker).await;
    let (number, _) = round.push_and_check("MORE.md", "success").await;
    let pipeline = round
        .s
        .http
        .get(
            &format!("/api/repos/{}/pipelines/{number}", round.id),
            Some(&round.pat),
        )
        .await
        .expect(200)
        .json();
    let clone = pipeline["workflows"][0]["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "clone")
        .unwrap_or_else(|| panic!("no clone step: {pipeline:#}"));
    assert_eq!(clone["state"], "success", "{clone:#}");
}

/// GitHub's round trip, then what the forge decides beyond it: open pull requests,
/// organisation admins, and a permission dropped on the forge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_round_trip_pull_requests_org_admin_and_dropped_permission() {
    let RoundTrip {
        s,
        fake,
        api,
        forge,
        pat,
        id,
        ..
    } = round_trip(Kind::GitHub).await;

    // Open pull requests come from the forge.
    let prs = s
        .http
        .get(&format!("/api/repos/{id}/pull_requests"), Some(&pat))
        .await
        .expect(200)
        .json();
    assert_eq!(prs, json!([{"index": "7", "title": "Fix the frobnicator"}]));

    // The organisation's admins are who the forge says: octocat administers `octo` there,
    // so here too (its secrets are theirs to manage).
    let repo = s
        .http
        .get(&format!("/api/repos/{id}"), Some(&pat))
        .await
        .expect(200)
        .json();
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

    // The forge drops octocat to pull: signing in again syncs it, and the repository's
    // settings are no longer theirs to change.
    let settings = json!({"timeout": 30}).to_string();
    s.http
        .patch(&format!("/api/repos/{id}"), Some(&pat), &settings)
        .await
        .expect(200);
    fake.lock().unwrap().perm = (true, false, false);
    sign_in(&s, forge, api, Kind::GitHub).await;
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

    // octocat revokes the app on the forge: the forge refuses the token (and the refresh),
    // which is not the forge being down: 403, saying to sign in again.
    fake.lock().unwrap().revoke_all();
    let refused = s
        .http
        .get("/api/user/repos?all=true", Some(&pat))
        .await
        .expect(403)
        .text();
    assert!(refused.contains("sign in again"), "{refused}");
}

/// A manual run as the upstream UI starts one (`RepoManualPipeline.vue`: `POST
/// /api/repos/{id}/pipelines` with `{message, branch, variables}`) on a private GitHub
/// repository. The branch head is read with the forge token of the user who asked (before,
/// it went out with none: the forge's 401 made the run a 502), and only the commit comes
/// from it: author, e-mail, avatar and message are upstream's `createTmpPipeline`'s. Who may:
/// anonymous 401, a stranger 404, a reader 403, none of them reaching the forge; an instance
/// admin with no token from this forge reads the head as the repository's owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_manual_run_reads_the_branch_head_as_the_user_who_asked() {
    let rt = round_trip(Kind::GitHub).await;
    let (s, pat, id) = (&rt.s, rt.pat.as_str(), rt.id);
    let runs = format!("/api/repos/{id}/pipelines");
    let head = rt.fake.lock().unwrap().head.clone();
    // The `Authorization` of each branch-head request the forge received.
    let branch_heads = || -> Vec<String> {
        let fake = rt.fake.lock().unwrap();
        fake.seen
            .iter()
            .filter(|r| r.method == "GET" && r.path == "/repos/octo/app/branches/main")
            .map(|r| r.auth.clone())
            .collect()
    };
    let body = |message: &str| {
        json!({"message": message, "branch": "main", "variables": {"GREETING": "hi"}}).to_string()
    };

    let stranger = s.user("stranger", false).await;
    let reader = s.user("reader", false).await;
    let reader_id = s
        .http
        .get("/api/user", Some(&reader))
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    s.app_state
        .ci
        .store_for_tests()
        .write(move |c| {
            woodlark::store::repos::set_perm(
                c,
                reader_id,
                id,
                woodlark::store::repos::Perm::pull_only(),
            )
        })
        .await
        .unwrap();
    s.http.post(&runs, None, &body("")).await.expect(401);
    s.http
        .post(&runs, Some(&stranger), &body(""))
        .await
        .expect(404);
    s.http
        .post(&runs, Some(&reader), &body(""))
        .await
        .expect(403);
    assert!(branch_heads().is_empty(), "{:?}", branch_heads());

    // octocat, who signed in through the forge: the head is read with their token.
    let run = s
        .http
        .post(&runs, Some(pat), &body(""))
        .await
        .expect(200)
        .json();
    let asked = branch_heads();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].contains(ACCESS_PREFIX), "{asked:?}");
    assert_eq!(run["event"], "manual");
    assert_eq!(run["commit"], head.as_str());
    assert_eq!(run["branch"], "main");
    assert_eq!(run["ref"], "refs/heads/main");
    assert_eq!(run["message"], "MANUAL PIPELINE @ main");
    assert_eq!(run["author"], "octocat");
    assert_eq!(run["author_email"], "octocat@example.com");
    assert_eq!(run["author_avatar"], "https://avatars.example.com/octocat");
    assert_eq!(run["variables"], json!({"GREETING": "hi"}));
    let number = run["number"].as_i64().unwrap();
    let done = wait_for(&s.http, pat, id, number, 60, |p| {
        matches!(p["status"].as_str(), Some("success" | "failure" | "error"))
    })
    .await;
    assert_eq!(done["status"], "success", "{done:#}");

    // The form's message goes into upstream's manual message.
    let run = s
        .http
        .post(&runs, Some(pat), &body("ship it"))
        .await
        .expect(200)
        .json();
    assert_eq!(run["message"], "MANUAL: ship it @ main");

    // An instance admin made here has no token from the forge: the head is read as the
    // repository's owner, and the run is still the admin's.
    let admin = s.user("boss", true).await;
    let run = s
        .http
        .post(&runs, Some(&admin), &body(""))
        .await
        .expect(200)
        .json();
    let asked = branch_heads();
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert!(asked[2].contains(ACCESS_PREFIX), "{asked:?}");
    assert_eq!(run["commit"], head.as_str());
    assert_eq!(run["author"], "boss");
    assert_eq!(run["author_email"], "");
    assert!(
        run["author_avatar"]
            .as_str()
            .unwrap()
            .ends_with("/api/users/boss/avatar.svg"),
        "{run}"
    );
}

/// `(full_name, id)` of each repository `GET path` lists for `token`.
async fn repos_listed(s: &TestServer, path: &str, token: &str) -> Vec<(String, i64)> {
    let listed = s.http.get(path, Some(token)).await.expect(200).json();
    listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["full_name"].as_str().unwrap().to_string(),
                r["id"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// The home list (`GET /api/user/repos?`, the upstream UI's `getRepoList()`) and the "add
/// repository" list (`?all=true`) on GitHub, filtered as upstream's `GetRepos` does by what
/// the forge says the user may do: push to see a repository in either, admin on the forge
/// to be offered one that is not here yet. Listing with `all=true` reads the permissions from
/// the forge first, so the home list follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_repository_lists_follow_the_forge_s_push_and_admin() {
    let rt = round_trip(Kind::GitHub).await;
    let (s, pat, id) = (&rt.s, rt.pat.as_str(), rt.id);
    let (home, all) = ("/api/user/repos?", "/api/user/repos?all=true");
    let app = || vec![("octo/app".to_string(), id)];

    // An admin on the forge: both lists, the home list with the newest pipeline.
    assert_eq!(repos_listed(s, all, pat).await, app());
    let listed = s.http.get(home, Some(pat)).await.expect(200).json();
    assert_eq!(listed[0]["full_name"], "octo/app", "{listed}");
    assert!(listed[0]["last_pipeline"]["number"].as_i64().unwrap() >= 1);

    // Push without admin: still theirs.
    rt.fake.lock().unwrap().perm = (true, true, false);
    assert_eq!(repos_listed(s, all, pat).await, app());
    assert_eq!(repos_listed(s, home, pat).await, app());

    // Pull only: in neither list (the repository is still readable).
    rt.fake.lock().unwrap().perm = (true, false, false);
    assert_eq!(repos_listed(s, all, pat).await, []);
    assert_eq!(repos_listed(s, home, pat).await, []);
    s.http
        .get(&format!("/api/repos/{id}"), Some(pat))
        .await
        .expect(200);

    // Removed here, the forge's repository is offered to add only to one who administers
    // it there.
    rt.fake.lock().unwrap().perm = (true, true, true);
    assert_eq!(repos_listed(s, all, pat).await, app());
    s.http
        .delete(&format!("/api/repos/{id}?remove=true"), Some(pat))
        .await
        .expect(200);
    rt.fake.lock().unwrap().perm = (true, true, false);
    assert_eq!(repos_listed(s, all, pat).await, []);
    rt.fake.lock().unwrap().perm = (true, true, true);
    assert_eq!(
        repos_listed(s, all, pat).await,
        [("octo/app".to_string(), 0)]
    );
    assert_eq!(repos_listed(s, home, pat).await, []);
}

/// Activation by GitHub's id for the repository (`POST /api/repos?forge_remote_id=42`, as the
/// web UI's "add repository" page sends it) when the user's repository list does not have
/// it: the adapter looks the id up as upstream's GitHub forge does, `GET /repositories/{id}`
/// (it used to ask for `/repos/42`, which is no repository).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_activation_by_id_looks_the_repository_up_by_id() {
    let rt = round_trip(Kind::GitHub).await;
    let (s, pat, id) = (&rt.s, rt.pat.as_str(), rt.id);
    s.http
        .delete(&format!("/api/repos/{id}?remove=true"), Some(pat))
        .await
        .expect(200);
    rt.fake.lock().unwrap().unlisted = true;
    let activate = |remote_id: &str| {
        format!(
            "/api/repos?forge_remote_id={remote_id}&forge_id={}",
            rt.forge
        )
    };
    let repo = s
        .http
        .post(&activate("42"), Some(pat), "")
        .await
        .expect(200)
        .json();
    assert_eq!(repo["full_name"], "octo/app");
    assert_eq!(repo["forge_remote_id"], "42");
    assert_eq!(repo["active"], true);
    {
        let fake = rt.fake.lock().unwrap();
        let by_id: Vec<&str> = fake
            .seen
            .iter()
            .filter(|r| r.method == "GET" && r.path == "/repositories/42")
            .map(|r| r.auth.as_str())
            .collect();
        assert!(!by_id.is_empty(), "{:?}", fake.seen);
        assert!(by_id.iter().all(|a| a.contains(ACCESS_PREFIX)), "{by_id:?}");
        assert!(!fake.seen.iter().any(|r| r.path == "/repos/42"));
    }

    // An id GitHub does not know is a clear refusal.
    let unknown = s.http.post(&activate("43"), Some(pat), "").await;
    assert_eq!(unknown.status, 422, "{}", unknown.text());
    assert!(unknown.text().contains("not found"), "{}", unknown.text());
}

#[tokio::test]
async fn sign_in_needs_an_open_server_or_an_admin_login() {
    let (s, p, forge) = github_sign_in_server("", json!(["octo"])).await;
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

/// Signing in through the forge returns to the page that sent the browser to the login page:
/// the login page's forge button carries `next`, the signed OAuth state carries it through
/// the forge and back, and only a path of this site is followed (an absolute URL is
/// dropped: the browser lands on the home page).
#[tokio::test]
async fn sign_in_through_the_forge_returns_to_the_page_that_asked_for_it() {
    let (s, _, forge) = github_sign_in_server("#open", json!([])).await;

    // The login page a private page sent the browser to: its forge button keeps `next`.
    let next = "%2Frepos%2F7%3Fpage%3D2";
    let login = s
        .http
        .get(&format!("/login?next={next}"), None)
        .await
        .expect(200)
        .text();
    let button = format!("href=\"/authorize?forge_id={forge}&#38;next={next}\"");
    assert!(login.contains(&button), "{button} in {login}");
    // Through the forge and back: signed in, and on that page.
    let mut browser = Browser::new(&s.http);
    let start = browser
        .get(&format!("/authorize?forge_id={forge}&next={next}"))
        .await
        .expect(303);
    let to = start.header("location").unwrap().to_string();
    assert!(
        !to.contains("repos"),
        "the page is in the signed state only: {to}"
    );
    let landed = finish_sign_in(&mut browser, &query_of(&to)["state"]).await;
    assert_eq!(landed.as_deref(), Some("/repos/7?page=2"));
    assert!(browser.cookie("user_sess").is_some());

    // Another site, or a protocol-relative URL, is not followed: the home page instead.
    for bad in ["https%3A%2F%2Fevil.example%2F", "%2F%2Fevil.example"] {
        let mut browser = Browser::new(&s.http);
        let start = browser
            .get(&format!("/authorize?forge_id={forge}&next={bad}"))
            .await
            .expect(303);
        let state = query_of(start.header("location").unwrap())["state"].clone();
        let landed = finish_sign_in(&mut browser, &state).await;
        assert_eq!(landed.as_deref(), Some("/"), "{bad}");
        let login = s
            .http
            .get(&format!("/login?next={bad}"), None)
            .await
            .expect(200);
        assert!(!login.text().contains("evil"), "{bad}: {}", login.text());
    }
}

/// A forge with a self-signed certificate: refused while its certificate is checked (the
/// code exchange fails, as an OAuth error), reached once the operator marks it
/// `skip_verify` — sign-in and the API both.
#[tokio::test]
async fn a_forge_marked_skip_verify_is_reached_over_self_signed_tls() {
    let dist = first_party_plugins();
    let data = tempfile::tempdir().unwrap();
    let state = fake(Kind::Gitea, &Backend::Local.config(0));
    let fake_state = state.clone();
    let api = crate::plugins::fake_tls_service(move |r| Some(answer(&fake_state, r))).await;
    let instance = format!(
        "[plugins.instances.gitea]\nfile = \"forge-gitea.wasm\"\nallowed_hosts = [\"https://{api}\"]\n"
    );
    let tables = plugins_table(&dist, false, &instance);
    let s = TestServer::start_in_with_tables(data, "#open", &tables).await;
    let p = s.principals().await;
    let forge = s
        .http
        .post(
            "/api/forges",
            Some(&p.admin),
            &json!({"type": "gitea", "url": format!("https://{api}"), "client": CLIENT_ID,
                    "oauth_client_secret": CLIENT_SECRET, "skip_verify": false,
                    "additional_options": {"plugin": "gitea"}})
            .to_string(),
        )
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    let mut browser = Browser::new(&s.http);
    let started = start_sign_in(&mut browser, forge).await;
    assert_eq!(
        finish_sign_in(&mut browser, &started).await.as_deref(),
        Some("/login?error=oauth_error")
    );
    assert!(
        !state
            .lock()
            .unwrap()
            .seen
            .iter()
            .any(|s| s.method == "POST"),
        "no request got through an unverified handshake"
    );

    s.http
        .patch(
            &format!("/api/forges/{forge}"),
            Some(&p.admin),
            &json!({"skip_verify": true}).to_string(),
        )
        .await
        .expect(200);
    let started = start_sign_in(&mut browser, forge).await;
    assert_eq!(
        finish_sign_in(&mut browser, &started).await.as_deref(),
        Some("/")
    );
    let config = globals(&browser.get("/web-config.js").await.expect(200));
    assert_eq!(config["USER"]["login"], "octocat");
    let csrf = config["CSRF"].as_str().unwrap().to_string();
    let pat = browser
        .send("POST", "/api/user/token", None, &[("x-csrf-token", &csrf)])
        .await
        .expect(200)
        .text();
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
        "{listed}"
    );
}

/// A server (`extra` added to its `[server]` table) with a GitHub forge served by the
/// first-party plugin against a fake GitHub, that forge's sign-in limited to `orgs` (none:
/// anyone): the server, its principals and the forge's id.
async fn github_sign_in_server(extra: &str, orgs: Value) -> (TestServer, Principals, i64) {
    let dist = first_party_plugins();
    let data = tempfile::tempdir().unwrap();
    let fake = fake(Kind::GitHub, "");
    let api = fake_service(move |r| Some(answer(&fake, r))).await;
    let instance = format!(
        "[plugins.instances.github]\nfile = \"forge-github.wasm\"\nallowed_hosts = [\"http://{api}\"]\nconfig = {{ api-url = \"http://{api}\" }}\n"
    );
    let tables = plugins_table(&dist, false, &instance);
    let s = TestServer::start_in_with_tables(data, extra, &tables).await;
    let p = s.principals().await;
    let mut body = json!({"type": "github", "url": format!("http://{api}"), "client": CLIENT_ID,
                          "oauth_client_secret": CLIENT_SECRET,
                          "additional_options": {"plugin": "github"}});
    if orgs.as_array().is_some_and(|o| !o.is_empty()) {
        body["orgs"] = orgs;
    }
    let forge = s
        .http
        .post("/api/forges", Some(&p.admin), &body.to_string())
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    (s, p, forge)
}
