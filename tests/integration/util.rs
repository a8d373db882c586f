//! Test harness: a real server on 127.0.0.1:0 with a temporary data dir, and a small HTTP
//! client. Two ways to run the server:
//! - [`TestServer::start`]: in this process (fast; most tests), built exactly as `serve` does;
//! - [`Process`]: the `woodlark` binary as a child process (CLI, signals, crash tests).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio::net::TcpListener;
use woodlark::app::App;
use woodlark::config::Config;
use woodlark::logging::{LogControl, LogLevel};

pub const BIN: &str = env!("CARGO_BIN_EXE_woodlark");

/// A response, fully read.
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    #[track_caller]
    pub fn expect(self, status: u16) -> Resp {
        assert_eq!(
            self.status.as_u16(),
            status,
            "unexpected status; body: {:?}",
            self.text()
        );
        self
    }
}

/// An HTTP client bound to one server address.
#[derive(Clone)]
pub struct Http {
    pub addr: SocketAddr,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Http {
    pub fn new(addr: SocketAddr) -> Http {
        Http {
            addr,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// Sends a request; `token` goes into `Authorization: Bearer`.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&[u8]>,
        headers: &[(&str, &str)],
    ) -> Resp {
        self.try_send(method, path, token, body, headers)
            .await
            .expect("request failed")
    }

    /// [`Http::send`] to a server that may be down: the client's error when no answer came.
    pub async fn try_send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&[u8]>,
        headers: &[(&str, &str)],
    ) -> Result<Resp, String> {
        let mut builder = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(format!("http://{}{}", self.addr, path));
        if let Some(t) = token {
            builder = builder.header("authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        if body.is_some()
            && !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        {
            builder = builder.header("content-type", "application/json");
        }
        let req = builder
            .body(Full::new(Bytes::copy_from_slice(body.unwrap_or_default())))
            .unwrap();
        let resp = self.client.request(req).await.map_err(|e| e.to_string())?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok(Resp {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }

    pub async fn get(&self, path: &str, token: Option<&str>) -> Resp {
        self.send("GET", path, token, None, &[]).await
    }

    pub async fn post(&self, path: &str, token: Option<&str>, body: &str) -> Resp {
        self.send("POST", path, token, Some(body.as_bytes()), &[])
            .await
    }

    pub async fn patch(&self, path: &str, token: Option<&str>, body: &str) -> Resp {
        self.send("PATCH", path, token, Some(body.as_bytes()), &[])
            .await
    }

    pub async fn delete(&self, path: &str, token: Option<&str>) -> Resp {
        self.send("DELETE", path, token, None, &[]).await
    }

    /// Like [`Http::send`], for routes that may hold the connection open: `None` when no
    /// response head arrives within `wait` (a long poll still waiting), and the body of an
    /// event stream is not read (it stays empty), so only the status and headers count.
    pub async fn send_within(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&[u8]>,
        wait: Duration,
    ) -> Option<Resp> {
        let mut builder = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(format!("http://{}{}", self.addr, path));
        if let Some(t) = token {
            builder = builder.header("authorization", format!("Bearer {t}"));
        }
        if body.is_some() {
            builder = builder.header("content-type", "application/json");
        }
        let req = builder
            .body(Full::new(Bytes::copy_from_slice(body.unwrap_or_default())))
            .unwrap();
        let resp = tokio::time::timeout(wait, self.client.request(req))
            .await
            .ok()?
            .expect("request failed");
        let (parts, body) = resp.into_parts();
        let streaming = parts
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let body = if streaming {
            Bytes::new()
        } else {
            tokio::time::timeout(wait, body.collect())
                .await
                .ok()?
                .expect("body")
                .to_bytes()
        };
        Some(Resp {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    }
}

/// A server running inside the test's tokio runtime.
pub struct TestServer {
    pub http: Http,
    pub dir: tempfile::TempDir,
    pub app_state: woodlark::app::Ctx,
    /// The router's table (`App::routes`): every route as `METHOD /pattern`.
    pub routes: Vec<String>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// Config text for a test data dir (`#open` in `extra`: anyone may sign in through a forge).
pub fn config_text(data_dir: &Path, extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = {:?}\nshutdown_grace_ms = 2000\n{extra}\n[auth]\nadmins = [\"envadmin\"]\n{}",
        data_dir.display().to_string(),
        // Left out unless wanted: `auth.open` in the file would win over WOODPECKER_OPEN.
        if extra.contains("#open") {
            "open = true\n"
        } else {
            ""
        }
    ) + if extra.contains("#runner") {
        ""
    } else {
        "[runner]\nenabled = false\n"
    } + &plugins_table(data_dir, extra)
        + &storage_table(data_dir, extra)
}

/// A test server's config: [`config_text`] with `extra` in `[server]`, and whole `tables`
/// that replace the defaults they name (`#runner`, `#plugins`, `[storage]`).
pub fn server_config_text(data_dir: &Path, extra: &str, tables: &str) -> String {
    let mut text = config_text(data_dir, extra);
    if tables.contains("#runner") {
        text = text.replace("[runner]\nenabled = false\n", "");
    }
    if tables.contains("#plugins") {
        text = text.replace(&plugins_table(data_dir, ""), "");
    }
    if tables.contains("[storage]") {
        text = text.replace(&storage_table(data_dir, ""), "");
    }
    text + tables
}

/// With `WOODLARK_TEST_STORE=postgres`, a `[storage]` table pointing the server at a fresh
/// database on the test process's PostgreSQL cluster (unless the test brings its own).
/// (The same database for the same data dir: a restarted server finds its data.)
fn storage_table(data_dir: &Path, extra: &str) -> String {
    if extra.contains("[storage]") || test_storage_url_wanted().is_none() {
        return String::new();
    }
    let url = {
        let mut known = DATABASES.lock().unwrap_or_else(|p| p.into_inner());
        match known.iter().find(|(dir, _)| dir == data_dir) {
            Some((_, url)) => url.clone(),
            None => {
                let url = test_storage_url().unwrap_or_default();
                known.push((data_dir.to_path_buf(), url.clone()));
                url
            }
        }
    };
    format!("[storage]\nurl = {url:?}\n")
}

/// The PostgreSQL database given to each data dir's servers (see [`storage_table`]).
static DATABASES: std::sync::Mutex<Vec<(PathBuf, String)>> = std::sync::Mutex::new(Vec::new());

/// The database the servers of `data_dir` use, as `woodlark_store::inspect_for_tests`
/// takes it: their PostgreSQL database, or the SQLite file in the data dir.
pub fn database_of(data_dir: &Path) -> String {
    let known = DATABASES.lock().unwrap_or_else(|p| p.into_inner());
    match known.iter().find(|(dir, _)| dir == data_dir) {
        Some((_, url)) => url.clone(),
        None => data_dir.join(woodlark::app::DB_FILE).display().to_string(),
    }
}

/// Where the step logs of `data_dir`'s servers are: the same PostgreSQL database, or the
/// logs' own SQLite file.
pub fn logs_database_of(data_dir: &Path) -> String {
    let main = database_of(data_dir);
    if main.starts_with("postgres://") {
        return main;
    }
    data_dir
        .join(woodlark_store::logs::LOGS_FILE)
        .display()
        .to_string()
}

/// The name of the embedded runner's agent of the server on `data_dir`: `local`, or
/// `local@<replica id>` on a shared (PostgreSQL) database.
pub fn embedded_agent_name(data_dir: &Path) -> String {
    if !on_postgres() {
        return "local".into();
    }
    let id = std::fs::read_to_string(data_dir.join("replica-id")).expect("the replica's id");
    format!("local@{}", id.trim())
}

/// Whether the test servers run on PostgreSQL (`WOODLARK_TEST_STORE=postgres`).
pub fn on_postgres() -> bool {
    test_storage_url_wanted().is_some()
}

fn test_storage_url_wanted() -> Option<()> {
    (std::env::var("WOODLARK_TEST_STORE").as_deref() == Ok("postgres")).then_some(())
}

/// `storage.url` for a test server: a fresh PostgreSQL database with
/// `WOODLARK_TEST_STORE=postgres`, else none (SQLite in the data dir).
pub fn test_storage_url() -> Option<String> {
    test_storage_url_wanted()
        .map(|()| woodlark_store::pg::testing::Cluster::shared().fresh_database())
}

/// No plugins (an empty directory in the data dir, not watched) unless the test brings its
/// own `[plugins]` table (marked `#plugins`).
fn plugins_table(data_dir: &Path, extra: &str) -> String {
    if extra.contains("#plugins") {
        return String::new();
    }
    format!(
        "[plugins]\ndir = {:?}\nwatch = false\n",
        data_dir.join("plugins").display().to_string()
    )
}

/// The first-party plugins built by `plugins/build.sh` (built here when missing).
pub fn first_party_plugins() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins");
    let dist = root.join("dist");
    if !dist.join("forge-github.wasm").exists() {
        let status = Command::new("bash")
            .arg(root.join("build.sh"))
            .status()
            .expect("run plugins/build.sh");
        assert!(status.success(), "plugins/build.sh failed");
    }
    dist.canonicalize().unwrap()
}

/// `extra` for [`config_text`] that turns the local runner on (workspaces in the data dir).
pub fn with_runner(data_dir: &Path) -> String {
    format!(
        "#runner\n[runner]\nenabled = true\nbackend = \"local\"\ncapacity = 2\nworkdir = {:?}\n",
        data_dir.join("runs").display().to_string()
    )
}

impl TestServer {
    pub async fn start() -> TestServer {
        TestServer::start_with("").await
    }

    /// Starts with `extra` lines appended to the `[server]` table.
    pub async fn start_with(extra: &str) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        TestServer::start_in(dir, extra).await
    }

    pub async fn start_in(dir: tempfile::TempDir, extra: &str) -> TestServer {
        TestServer::start_in_with_tables(dir, extra, "").await
    }

    /// Starts with whole extra tables (e.g. `"[events]\nmax_events = 5\n"`) appended.
    pub async fn start_with_tables(tables: &str) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        TestServer::start_in_with_tables(dir, "", tables).await
    }

    /// Starts with the local runner on.
    pub async fn start_with_runner() -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let tables = with_runner(dir.path());
        TestServer::start_in_with_tables(dir, "", &tables).await
    }

    pub async fn start_in_with_tables(
        dir: tempfile::TempDir,
        extra: &str,
        tables: &str,
    ) -> TestServer {
        TestServer::start_in_with_env(dir, extra, tables, &[]).await
    }

    /// [`Self::start_in_with_tables`] as if the process environment held `env`.
    pub async fn start_in_with_env(
        dir: tempfile::TempDir,
        extra: &str,
        tables: &str,
        env: &[(String, String)],
    ) -> TestServer {
        TestServer::start_listening(dir, extra, tables, env, "127.0.0.1:0").await
    }

    /// [`Self::start_in_with_tables`] on `addr` (a server started again where its agents
    /// and replicas know it).
    pub async fn start_in_at(dir: tempfile::TempDir, tables: &str, addr: SocketAddr) -> TestServer {
        TestServer::start_listening(dir, "", tables, &[], &addr.to_string()).await
    }

    async fn start_listening(
        dir: tempfile::TempDir,
        extra: &str,
        tables: &str,
        env: &[(String, String)],
        listen: &str,
    ) -> TestServer {
        let text = server_config_text(dir.path(), extra, tables);
        let config = Config::from_toml(&text, "test.toml", env).expect("test config");
        let app = App::build(config, LogControl::detached(LogLevel::Info)).expect("app");
        let app_state = app.state().clone();
        let routes = app.routes();
        let listener = TcpListener::bind(listen).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(app.serve(listener, async {
            let _ = rx.await;
        }));
        TestServer {
            http: Http::new(addr),
            dir,
            app_state,
            routes,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// Creates a user directly through the store (the code path `woodlark user add` uses) and
    /// returns its personal access token.
    pub async fn user(&self, login: &str, admin: bool) -> String {
        use woodlark::store::users::{self, NewUser};
        let env = self.app_state.ci.settings.env_admins.clone();
        let new = NewUser {
            login: login.into(),
            admin,
            token_seed: woodlark::auth::random_secret(),
            ..NewUser::default()
        };
        let account = self
            .app_state
            .ci
            .store_for_tests()
            .write(move |c| users::create(c, &env, &new))
            .await
            .expect("create user");
        woodlark::auth::token::user_token(account.user.id, &self.app_state.token_key(&account))
    }

    /// Stops the server gracefully and returns the data dir.
    pub async fn stop(mut self) -> tempfile::TempDir {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
        let TestServer { dir, .. } = self;
        dir
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join(woodlark::app::DB_FILE)
    }

    /// This server's database (see [`database_of`]).
    pub fn database(&self) -> String {
        let url = &self.app_state.config.storage.url;
        if url.is_empty() {
            database_of(self.dir.path())
        } else {
            url.clone()
        }
    }

    /// What is at rest in this server's database, as bytes: the SQLite file and its log
    /// (freed pages included), or every stored value on PostgreSQL.
    pub fn stored_bytes(&self) -> Vec<u8> {
        stored_bytes_in(&self.database())
    }
}

/// [`TestServer::stored_bytes`] of the servers of `data_dir`.
pub fn stored_bytes_of(data_dir: &Path) -> Vec<u8> {
    stored_bytes_in(&database_of(data_dir))
}

/// What is at rest in `target`: a PostgreSQL URL or a SQLite file.
fn stored_bytes_in(target: &str) -> Vec<u8> {
    if target.starts_with("postgres://") {
        return woodlark_store::inspect_for_tests(target, |tx| {
            tx.stored_bytes_for_tests().unwrap()
        });
    }
    let mut bytes = std::fs::read(target).unwrap();
    if let Ok(more) = std::fs::read(format!("{target}-wal")) {
        bytes.extend(more);
    }
    bytes
}

impl TestServer {
    /// The directory of this server's `git` forge (created on first use).
    pub fn forge_dir(&self) -> PathBuf {
        let dir = self.dir.path().join("forge");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Makes sure the `git` forge exists (created by `admin_token`) and returns its id.
    pub async fn git_forge(&self, admin_token: &str) -> i64 {
        let forges = self
            .http
            .get("/api/forges", Some(admin_token))
            .await
            .expect(200)
            .json();
        if let Some(f) = forges
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["woodlark_type"] == "git")
        {
            return f["id"].as_i64().unwrap();
        }
        let body = serde_json::json!({"type": "git", "url": format!("file://{}", self.forge_dir().display())});
        self.http
            .post("/api/forges", Some(admin_token), &body.to_string())
            .await
            .expect(200)
            .json()["id"]
            .as_i64()
            .unwrap()
    }

    /// Creates a bare repository `owner/name.git` with one commit on `main` in the forge dir.
    pub fn init_git_repo(&self, remote_id: &str) -> PathBuf {
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
        git(&work, &["add", "."]);
        git(&work, &["commit", "-q", "-m", "first"]);
        git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
        bare
    }

    /// Creates a git repository and activates it as the user behind `token` (the forge is
    /// created by `admin_token` if needed). Returns the Repo JSON.
    pub async fn git_repo(&self, admin_token: &str, token: &str, remote_id: &str) -> Value {
        let forge = self.git_forge(admin_token).await;
        self.init_git_repo(remote_id);
        self.http
            .post(
                &format!("/api/repos?forge_remote_id={remote_id}&forge_id={forge}"),
                Some(token),
                "",
            )
            .await
            .expect(200)
            .json()
    }
}

impl TestServer {
    /// The path and query the `post-receive` hook of git repository `remote_id` posts to
    /// (`/api/hook?access_token=…`), as its script has it.
    pub fn hook_path(&self, remote_id: &str) -> String {
        let hook = self
            .forge_dir()
            .join(format!("{remote_id}.git/hooks/post-receive"));
        let script = std::fs::read_to_string(hook).unwrap();
        let url = script
            .lines()
            .find_map(|l| l.strip_prefix("url='"))
            .unwrap()
            .trim_end_matches('\'');
        url[url.find("/api/hook").unwrap()..].to_string()
    }
}

/// Runs git in `dir` with a fixed identity; panics on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Tester")
        .env("GIT_AUTHOR_EMAIL", "tester@example.com")
        .env("GIT_COMMITTER_NAME", "Tester")
        .env("GIT_COMMITTER_EMAIL", "tester@example.com")
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Four principals and a server: the auth matrix every endpoint is checked against.
pub struct Principals {
    pub admin: String,
    pub alice: String,
    pub bob: String,
}

impl TestServer {
    pub async fn principals(&self) -> Principals {
        Principals {
            admin: self.user("root", true).await,
            alice: self.user("alice", false).await,
            bob: self.user("bob", false).await,
        }
    }
}

/// The `woodlark` binary running as a child process.
pub struct Process {
    pub child: Child,
    pub addr: SocketAddr,
    pub stderr_path: PathBuf,
}

/// Writes a config file for `data_dir` and returns its path.
pub fn write_config(data_dir: &Path, extra: &str) -> PathBuf {
    let path = data_dir.join("config.toml");
    std::fs::write(&path, config_text(data_dir, extra)).unwrap();
    path
}

/// `woodlark ARGS…` run in `dir`, to its end.
pub fn woodlark_in(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run woodlark")
}

/// `woodlark user add LOGIN [--admin] --config CONFIG`, returning stdout (the token).
pub fn cli_user_add(config: &Path, login: &str, admin: bool) -> std::process::Output {
    let mut cmd = Command::new(BIN);
    cmd.args(["user", "add", login, "--config"]).arg(config);
    if admin {
        cmd.arg("--admin");
    }
    cmd.output().expect("run woodlark user add")
}

impl Process {
    /// Starts `woodlark serve --config CONFIG` and waits until it listens.
    pub fn start(config: &Path) -> Process {
        Process::start_until(config, "woodlark listening")
    }

    /// Starts `woodlark serve --config CONFIG` and waits for the log line containing
    /// `marker` that names the address (`woodlark listening`, or `woodlark holds its port`
    /// for a server waiting for its database).
    // The child is killed and waited for in `Drop`.
    #[allow(clippy::zombie_processes)]
    pub fn start_until(config: &Path, marker: &str) -> Process {
        let stderr_path = config.with_extension(format!("stderr.{}", rand_suffix()));
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(config)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn woodlark");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = std::fs::read_to_string(&stderr_path).unwrap_or_default();
            if let Some(addr) = log
                .lines()
                .find(|l| l.contains(marker))
                .and_then(|l| l.split("address=").nth(1))
                .and_then(|rest| rest.split_whitespace().next())
            {
                let clean: String = addr
                    .chars()
                    .filter(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                    .collect();
                return Process {
                    child,
                    addr: clean.parse().expect("address in log"),
                    stderr_path,
                };
            }
            assert!(Instant::now() < deadline, "server did not start: {log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Sends SIGTERM and waits (up to `within`) for a successful exit.
    pub fn terminate(&mut self, within: Duration) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "exit status {status}: {}", self.stderr());
                return;
            }
            assert!(
                Instant::now() < deadline,
                "server did not stop: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rand_suffix() -> String {
    format!(
        "{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

/// A child process killed and waited for however the test ends.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `woodlark agent` against the server at `addr` with agent token `token`, on the
/// local backend, its workflows under `workdir` and its log in `log`.
pub fn spawn_agent(addr: SocketAddr, token: &str, workdir: &Path, log: &Path) -> KillOnDrop {
    let child = Command::new(BIN)
        .args([
            "agent",
            "--server",
            &format!("http://{addr}"),
            "--token",
            token,
            "--backend",
            "local",
            "--workdir",
        ])
        .arg(workdir)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .expect("spawn woodlark agent");
    KillOnDrop(child)
}

/// The answer's head on `stream` (lower-cased), if one comes within `wait`.
pub async fn answer_within(stream: &mut tokio::net::TcpStream, wait: Duration) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(wait, async {
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    (read.is_ok() && !got.is_empty()).then(|| String::from_utf8_lossy(&got).to_lowercase())
}

/// Opens a connection and sends the head of a `POST` to `path` with `headers` (each line
/// ending in CRLF) declaring `length` bytes of body, then `sent` of them: what a client that
/// sends a large body slowly, or never, looks like to the server.
pub async fn post_head(
    addr: SocketAddr,
    path: &str,
    headers: &str,
    length: usize,
    sent: usize,
) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head =
        format!("POST {path} HTTP/1.1\r\nHost: x\r\n{headers}Content-Length: {length}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&vec![b'{'; sent]).await.unwrap();
    stream
}
