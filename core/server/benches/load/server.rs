//! The server under test, and a client for its API.
//!
//! [`Server`] starts the real server in process exactly as the integration tests do
//! (tests/integration/util.rs): `App::build` + `App::serve` on `127.0.0.1:0`, a temporary
//! data dir, default storage settings (`synchronous = FULL`: every acknowledged write is
//! fsynced). It creates users through the store (as `woodlark user add` does), the `git`
//! forge, and bare repositories activated over the HTTP API; [`Api`] is the client the
//! scenarios drive it with. [`Binary`] runs the real binary instead, for the scenarios
//! that measure the process (`rss`, `flood`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use woodlark::app::{App, Ctx};
use woodlark::config::Config;
use woodlark::logging::{LogControl, LogLevel};

pub const ECHO: &str = "steps:\n  - name: echo\n    image: sh\n    commands: [\"echo hello\"]\n";

/// How long the bench's client keeps an idle connection for reuse: under the server's idle
/// close (`header_read_timeout_ms`, 10 s by default). With the client's default (90 s) a
/// connection idle exactly as long as the server allows was now and then reused at the
/// instant the server closed it (`IncompleteMessage`): the hooks scenario's turns bring a
/// target's connections back after 10 s.
const CLIENT_IDLE: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Api {
    pub addr: SocketAddr,
    pub client: Client<HttpConnector, Full<Bytes>>,
}

impl Api {
    pub fn new(addr: SocketAddr) -> Api {
        Api {
            addr,
            client: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(CLIENT_IDLE)
                .build_http(),
        }
    }

    pub async fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (StatusCode, Bytes) {
        self.send_with(method, path, token, body, &[]).await
    }

    /// [`send`](Self::send) with extra request headers.
    pub async fn send_with(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
        headers: &[(&str, &str)],
    ) -> (StatusCode, Bytes) {
        let mut builder = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(format!("http://{}{}", self.addr, path));
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        if let Some(t) = token {
            builder = builder.header("authorization", format!("Bearer {t}"));
        }
        if body.is_some() {
            builder = builder.header("content-type", "application/json");
        }
        let req = builder
            .body(Full::new(Bytes::copy_from_slice(
                body.unwrap_or_default().as_bytes(),
            )))
            .unwrap();
        let resp = self.client.request(req).await.expect("request failed");
        let status = resp.status();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, body)
    }

    /// A `GET` with `token`: the status, the response headers and the body.
    pub async fn get_full(
        &self,
        path: &str,
        token: Option<&str>,
    ) -> (StatusCode, hyper::HeaderMap, Bytes) {
        let mut builder = Request::builder().uri(format!("http://{}{}", self.addr, path));
        if let Some(t) = token {
            builder = builder.header("authorization", format!("Bearer {t}"));
        }
        let req = builder.body(Full::new(Bytes::new())).unwrap();
        let resp = self.client.request(req).await.expect("request failed");
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        (parts.status, parts.headers, body)
    }

    /// Sends and insists on `want`; returns the body as JSON (`null` when empty).
    pub async fn expect(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
        want: u16,
    ) -> Value {
        let (status, bytes) = self.send(method, path, token, body).await;
        assert_eq!(
            status.as_u16(),
            want,
            "{method} {path}: {}",
            String::from_utf8_lossy(&bytes)
        );
        if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        }
    }

    /// A manual run of `repo`'s `main` by the user behind `token`; returns the new pipeline.
    pub async fn run_pipeline(&self, repo: i64, token: &str) -> Value {
        self.expect(
            "POST",
            &format!("/api/repos/{repo}/pipelines"),
            Some(token),
            Some(r#"{"branch":"main"}"#),
            200,
        )
        .await
    }

    /// Pipeline `number` of `repo`, with its workflows and steps.
    pub async fn pipeline(&self, repo: i64, number: i64, token: &str) -> Value {
        self.expect(
            "GET",
            &format!("/api/repos/{repo}/pipelines/{number}"),
            Some(token),
            None,
            200,
        )
        .await
    }
}

pub struct Server {
    pub api: Api,
    pub dir: tempfile::TempDir,
    pub state: Ctx,
    pub shutdown: Option<oneshot::Sender<()>>,
    pub task: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    pub async fn start(runner: bool) -> Server {
        Server::start_with(runner, "").await
    }

    /// Starts with `tables` (whole TOML tables) appended to the configuration.
    pub async fn start_with(runner: bool, tables: &str) -> Server {
        Server::start_backend(if runner { Some("local") } else { None }, tables).await
    }

    /// Starts with the embedded runner on `backend` (capacity 2), or without a runner.
    pub async fn start_backend(backend: Option<&str>, tables: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let runner_table = match backend {
            Some(backend) => format!(
                "[runner]\nenabled = true\nbackend = {backend:?}\ncapacity = 2\nworkdir = {:?}\n",
                dir.path().join("runs").display().to_string()
            ),
            None => "[runner]\nenabled = false\n".to_string(),
        };
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = {:?}\nshutdown_grace_ms = 2000\n\n{runner_table}{tables}",
            dir.path().display().to_string()
        );
        let config = Config::from_toml(&text, "bench.toml", &[]).expect("bench config");
        let app = App::build(config, LogControl::detached(LogLevel::Info)).expect("app");
        let state = app.state().clone();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(app.serve(listener, async {
            let _ = rx.await;
        }));
        Server {
            api: Api::new(addr),
            dir,
            state,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// A user created through the store (as `woodlark user add` does) and its token.
    pub async fn user(&self, login: &str, admin: bool) -> String {
        use woodlark::store::users::{self, NewUser};
        let env = self.state.ci.settings.env_admins.clone();
        let new = NewUser {
            login: login.into(),
            admin,
            token_seed: woodlark::auth::random_secret(),
            ..NewUser::default()
        };
        let account = self
            .state
            .ci
            .store_for_tests()
            .write(move |c| users::create(c, &env, &new))
            .await
            .expect("create user");
        woodlark::auth::token::user_token(account.user.id, &self.state.token_key(&account))
    }

    pub fn forge_dir(&self) -> PathBuf {
        let dir = self.dir.path().join("forge");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The `git` forge (created by `admin` on first use).
    pub async fn git_forge(&self, admin: &str) -> i64 {
        let forges = self
            .api
            .expect("GET", "/api/forges", Some(admin), None, 200)
            .await;
        if let Some(f) = forges
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["type"] == "git")
        {
            return f["id"].as_i64().unwrap();
        }
        let body = json!({"type": "git", "url": format!("file://{}", self.forge_dir().display())});
        self.api
            .expect(
                "POST",
                "/api/forges",
                Some(admin),
                Some(&body.to_string()),
                200,
            )
            .await["id"]
            .as_i64()
            .unwrap()
    }

    /// A bare repository `remote_id.git` whose one commit on `main` holds `files`, activated
    /// by the user behind `token`. Returns the repo id and the bare repository's path.
    pub async fn git_repo(
        &self,
        admin: &str,
        token: &str,
        remote_id: &str,
        files: &[(&str, &str)],
    ) -> (i64, PathBuf) {
        let forge = self.git_forge(admin).await;
        let bare = self.forge_dir().join(format!("{remote_id}.git"));
        std::fs::create_dir_all(bare.parent().unwrap()).unwrap();
        git(
            &self.forge_dir(),
            &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()],
        );
        let work = self.dir.path().join("work").join(remote_id);
        std::fs::create_dir_all(&work).unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        std::fs::write(work.join("README.md"), "hello\n").unwrap();
        for (name, body) in files {
            std::fs::write(work.join(name), body).unwrap();
        }
        git(&work, &["add", "."]);
        git(&work, &["commit", "-q", "-m", "bench"]);
        git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
        let repo = self
            .api
            .expect(
                "POST",
                &format!("/api/repos?forge_remote_id={remote_id}&forge_id={forge}"),
                Some(token),
                Some(""),
                200,
            )
            .await;
        (repo["id"].as_i64().unwrap(), bare)
    }

    /// `count` manual runs of `repo`'s `main` by the user behind `token`, one after another.
    pub async fn manual_runs(&self, repo: i64, token: &str, count: usize) {
        for _ in 0..count {
            self.api
                .expect(
                    "POST",
                    &format!("/api/repos/{repo}/pipelines"),
                    Some(token),
                    Some("{}"),
                    200,
                )
                .await;
        }
    }

    /// A [`git_repo`](Self::git_repo) whose commit holds `config` as `.woodpecker.yaml`.
    pub async fn pipeline_repo(
        &self,
        admin: &str,
        token: &str,
        remote_id: &str,
        config: &str,
    ) -> (i64, PathBuf) {
        self.git_repo(admin, token, remote_id, &[(".woodpecker.yaml", config)])
            .await
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

/// Runs git in `dir` with a fixed identity; panics on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .env("GIT_COMMITTER_NAME", "Bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com")
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What the git forge's post-receive hook in bare repository `bare` posts for a push of
/// `main`: the path of its URL (which holds the repository's own hook token) and the body
/// (`<old> <new> <ref>`, a new branch).
pub fn post_receive_hook(bare: &Path) -> (String, String) {
    let script = std::fs::read_to_string(bare.join("hooks/post-receive")).unwrap();
    let url = script
        .lines()
        .find_map(|l| l.strip_prefix("url='"))
        .and_then(|l| l.strip_suffix('\''))
        .expect("hook url")
        .to_string();
    let path = url
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|i| rest[i..].to_string()))
        .expect("hook path");
    let sha = git(bare, &["rev-parse", "main"]).trim().to_string();
    let body = format!("{} {sha} refs/heads/main\n", "0".repeat(40));
    (path, body)
}

/// Pipelines of a repository by status.
pub async fn statuses(server: &Server, repo: i64) -> (i64, i64) {
    server
        .state
        .ci
        .reads
        .read(move |c| {
            Ok(c.raw_for_tests().query_row(
                "SELECT count(*) FILTER (WHERE status = 'success'),
                        count(*) FILTER (WHERE status IN ('failure', 'error', 'killed', 'canceled', 'declined'))
                 FROM pipelines WHERE repo_id = ?1",
                [repo],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?)
        })
        .await
        .unwrap()
}

/// The real `woodlark` binary on the repository's `config.toml` (the first-party plugins
/// loaded from `plugins/dist`, the runner on), with a temporary data dir and a 127.0.0.1 port
/// of its own, logging at `warn`: what `rss` and `flood` measure as a process.
pub struct Binary {
    pub addr: SocketAddr,
    env: [(&'static str, String); 3],
    /// Removed when the scenario is done with the binary.
    _data: tempfile::TempDir,
}

impl Binary {
    pub fn new() -> Binary {
        let data = tempfile::tempdir().unwrap();
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let env = [
            ("WOODLARK_DATA_DIR", data.path().display().to_string()),
            ("WOODLARK_LISTEN", format!("127.0.0.1:{port}")),
            ("WOODLARK_LOG_LEVEL", "warn".to_string()),
        ];
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        Binary {
            addr,
            env,
            _data: data,
        }
    }

    /// `woodlark <args>` in the repository's root, on this data dir and port.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_woodlark"));
        command
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
            .args(args)
            .envs(self.env.iter().cloned());
        command
    }

    /// Starts `woodlark serve` on `config.toml`, waits until it answers and has settled
    /// (plugins loaded, runner registered).
    pub async fn serve(&self) -> std::process::Child {
        let child = self
            .command(&["serve", "--config", "config.toml"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("woodlark serve");
        let up = Instant::now();
        while tokio::net::TcpStream::connect(self.addr).await.is_err() {
            assert!(
                up.elapsed() < Duration::from_secs(60),
                "server did not start"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        child
    }
}
