//! Load benchmarks for the real server, in process, over 127.0.0.1.
//!
//! ```sh
//! cargo bench -p woodlark --bench load -- <http|events|queue|logs|sse|hooks|rss|flood|all>
//! ```
//!
//! Every scenario starts the server exactly as the integration tests do (`App::build` +
//! `App::serve` on `127.0.0.1:0`, a temporary data dir, default storage settings, i.e.
//! `synchronous = FULL`) and reports its numbers next to a **baseline measured in the same
//! run**, as ratios — never against absolute thresholds:
//!
//! - `http`: `GET /version`, `GET /healthz`, `GET /api/user` against a bare hyper hello-world
//!   server (same client, same concurrency).
//! - `events`: `GET /events?…&limit=100` page latency at 10 thousand and at 1 million events
//!   (the 10k run is the baseline of the 1M run; `GET /version` on the same server is the
//!   floor).
//! - `queue`: pipelines/s from hook (or manual run) to `success` for a one-step `echo`
//!   pipeline with the local runner (capacity 2), against running the same processes
//!   directly, two at a time.
//! - `logs`: lines/s stored for one step printing 200,000 lines, against reading the same
//!   process output through a pipe and against inserting the lines into SQLite directly
//!   (same schema, same 200-line batches, same durability).
//! - `sse`: 1,000 concurrent `GET /api/stream/events` clients: memory per client and
//!   delivery lag, against a bare hyper SSE broadcaster. Each side runs in its own child
//!   process (this binary, re-executed) so that resident memory is measured in isolation.
//!
//! - `hooks`: open-loop webhook intake at a fixed rate (500/s for 30 s by default): latency from
//!   sending a push hook to the reply (the pipeline stored and queued; no runner), for the
//!   git forge and for a GitHub forge served by the first-party `forge-github` adapter (a
//!   signed push payload; the config fetched through the adapter from a fake GitHub API on
//!   127.0.0.1), against a bare hyper server answering the same POSTs and bare SQLite
//!   committing a hook's worth of rows at the same rate, in turns (the two server targets
//!   swap places every round; their latencies are also printed by place).
//!   `WOODLARK_HOOKS_RATE` and `WOODLARK_HOOKS_SECS` change rate and duration;
//!   `WOODLARK_HOOKS_CONFIG` is appended to the server's configuration (TOML tables, e.g.
//!   `[storage]` settings, to compare one against another; not `[plugins]`, which the
//!   scenario sets).
//! - `rss` also watches the restarted server doing nothing for 20 s: wake-ups per second
//!   (context switches of its threads) and CPU per minute, beside the bare hyper process.
//! - `rss`: resident memory of the real `woodlark` binary on the default `config.toml` (the
//!   first-party plugins loaded from `plugins/dist`, runner on): idle after the first start
//!   (plugins compiled) and after a restart (compiled-code cache), then after 10,000
//!   authenticated API requests over 16 connections. Absolute numbers (issue 17's
//!   goals: idle < 40 MB, growth ≤ 10 MB), beside a bare hyper process's idle RSS.
//! - `flood`: the real `woodlark` binary on `config.toml` (as in `rss`) gets up to 20,000
//!   connections from 127.0.0.1 at once (fewer when this process's open-file limit is lower),
//!   half of them idle and half sending `GET /version`, held for 5 s and closed: how many were
//!   served, held, refused with a 503 (`server.max_connections`) or failed, and the server's
//!   RSS before, at the peak, and every 5 s for 60 s after. Absolute numbers (issue 32's goal:
//!   back within 50 MB of the pre-flood RSS a minute after).
//! - In `http`, `WOODLARK_HTTP_ONLY=<text>` keeps the baseline and the rows whose name
//!   contains the text (to profile one endpoint).
//! - `docker`: time from a manual run to `success` of a one-step pipeline on the docker
//!   backend (sequential, the image present), against `docker run --rm` of the same image and
//!   command, in the same run. Needs a Docker engine and the test images
//!   (`tests/docker/images.sh`); not part of `all`.
//!
//! Load is bounded in requests and time; `all` finishes in a few minutes on two cores.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Frame;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, mpsc, oneshot};
use woodlark::app::{App, Ctx};
use woodlark::config::Config;
use woodlark::logging::{LogControl, LogLevel};

const SCENARIOS: &[&str] = &[
    "http", "events", "queue", "logs", "sse", "docker", "hooks", "rss", "flood", "all",
];

fn main() {
    raise_fd_limit();
    // `BENCH_LOG=warn` (any filter) shows the server's own log on stderr.
    if let Ok(filter) = std::env::var("BENCH_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .init();
    }
    // `cargo bench` appends `--bench`; flags are not scenarios.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if args.first().map(String::as_str) == Some("__rss_baseline") {
        // The bare hyper server alone in a process; prints its idle RSS in KiB.
        runtime().block_on(async {
            let (feed, _) = broadcast::channel(16);
            let _addr = baseline_server(feed).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let rss = rss_kib(std::process::id());
            let (wakeups, cpu) = idle_activity(std::process::id(), IDLE_SPAN).await;
            println!("{rss} {wakeups} {cpu}");
        });
        return;
    }
    if args.first().map(String::as_str) == Some("__sse_child") {
        let kind = args.get(1).cloned().unwrap_or_default();
        runtime().block_on(sse_child(&kind));
        return;
    }
    let scenario = args.first().cloned().unwrap_or_else(|| "all".into());
    if !SCENARIOS.contains(&scenario.as_str()) {
        eprintln!(
            "unknown scenario {scenario:?}; expected one of {}",
            SCENARIOS.join(", ")
        );
        std::process::exit(2);
    }
    machine_banner();
    let run = |name: &str| scenario == name || scenario == "all";
    let started = Instant::now();
    if run("http") {
        runtime().block_on(http_scenario());
    }
    if run("events") {
        runtime().block_on(events_scenario());
    }
    if run("queue") {
        runtime().block_on(queue_scenario());
    }
    if run("logs") {
        runtime().block_on(logs_scenario());
    }
    if run("sse") {
        sse_scenario();
    }
    if run("rss") {
        runtime().block_on(rss_scenario());
    }
    if run("hooks") {
        runtime().block_on(hooks_scenario());
    }
    if run("flood") {
        runtime().block_on(flood_scenario());
    }
    if scenario == "docker" {
        runtime().block_on(docker_scenario());
    }
    println!("\ndone in {:.1} s", started.elapsed().as_secs_f64());
}

/// Two workers, as many as this machine has cores (client and server share them).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn machine_banner() {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let fsync = fsync_latency();
    println!(
        "machine: {cpus} CPUs ({model}); load average at start: {}; fdatasync of 4 KiB in the temp dir: p50 {} ms",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
        ms(fsync)
    );
}

/// Median time of `fdatasync` after a 4 KiB append in the temp dir (where data dirs live):
/// every durable commit pays at least this.
fn fsync_latency() -> Duration {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let mut f = std::fs::File::create(dir.path().join("probe")).unwrap();
    let mut lat = Vec::new();
    for _ in 0..20 {
        f.write_all(&[0u8; 4096]).unwrap();
        let t = Instant::now();
        f.sync_data().unwrap();
        lat.push(t.elapsed());
    }
    lat.sort();
    pct(&lat, 0.5)
}

fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain libc calls with a valid, initialised struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < 8192 {
            lim.rlim_cur = lim.rlim_max.min(65_536);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Resident set size of this process, in bytes.
fn rss_bytes() -> u64 {
    rss_kib(std::process::id()) * 1024
}

/// User + system CPU time of this process.
fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time (user + system) of this process's threads by thread name, for the threads alive
/// now (a blocking-pool thread that has exited is no longer counted).
fn thread_cpu_times() -> std::collections::BTreeMap<String, Duration> {
    let mut by_name = std::collections::BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Some(stat) = std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|s| ProcStat::parse(&s))
        {
            *by_name.entry(stat.name).or_insert(Duration::ZERO) += stat.cpu;
        }
    }
    by_name
}

/// What the scenarios read from a `/proc/<pid>/stat` (or `…/task/<tid>/stat`) line.
struct ProcStat {
    name: String,
    ppid: i64,
    /// User + system time.
    cpu: Duration,
}

impl ProcStat {
    fn parse(stat: &str) -> Option<ProcStat> {
        // `pid (name) state ppid … utime(14) stime(15) …`; the name may hold spaces and
        // parentheses, so the fields are counted from the last `)`.
        let (open, close) = (stat.find('(')?, stat.rfind(')')?);
        let fields: Vec<&str> = stat.get(close + 2..)?.split_whitespace().collect();
        let ppid = fields.get(1)?.parse().ok()?;
        let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(ProcStat {
            name: stat.get(open + 1..close)?.to_string(),
            ppid,
            // Clock ticks; USER_HZ is 100 on Linux.
            cpu: Duration::from_millis(ticks * 10),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics and tables

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    let v = d.as_secs_f64() * 1000.0;
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 {
        "-".into()
    } else {
        format!("{:.2}x", a / b)
    }
}

/// Prints an aligned table.
fn table(title: &str, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.len());
        }
    }
    println!("\n== {title}");
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
                }
            })
            .collect();
        println!("| {} |", parts.join(" | "));
    };
    line(header.iter().map(|h| h.to_string()).collect());
    println!(
        "|{}|",
        widths
            .iter()
            .enumerate()
            .map(|(i, w)| if i == 0 {
                format!(":{}", "-".repeat(w + 1))
            } else {
                format!("{}:", "-".repeat(w + 1))
            })
            .collect::<Vec<_>>()
            .join("|")
    );
    for row in rows {
        line(row.clone());
    }
}

// ---------------------------------------------------------------------------------------------
// The server under test, started as tests/integration/util.rs does

#[derive(Clone)]
struct Api {
    addr: SocketAddr,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Api {
    fn new(addr: SocketAddr) -> Api {
        Api {
            addr,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (StatusCode, Bytes) {
        self.send_with(method, path, token, body, &[]).await
    }

    /// [`send`](Self::send) with extra request headers.
    async fn send_with(
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

    /// Sends and insists on `want`; returns the body as JSON (`null` when empty).
    async fn expect(
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
}

struct Server {
    api: Api,
    dir: tempfile::TempDir,
    state: Ctx,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    async fn start(runner: bool) -> Server {
        Server::start_with(runner, "").await
    }

    /// Starts with `tables` (whole TOML tables) appended to the configuration.
    async fn start_with(runner: bool, tables: &str) -> Server {
        Server::start_backend(if runner { Some("local") } else { None }, tables).await
    }

    /// Starts with the embedded runner on `backend` (capacity 2), or without a runner.
    async fn start_backend(backend: Option<&str>, tables: &str) -> Server {
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
    async fn user(&self, login: &str, admin: bool) -> String {
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
            .store
            .write(move |c| users::create(c, &env, &new))
            .await
            .expect("create user");
        woodlark::auth::token::user_token(account.user.id, &self.state.token_key(&account))
    }

    fn forge_dir(&self) -> PathBuf {
        let dir = self.dir.path().join("forge");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The `git` forge (created by `admin` on first use).
    async fn git_forge(&self, admin: &str) -> i64 {
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
    async fn git_repo(
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

    async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

/// Runs git in `dir` with a fixed identity; panics on failure.
fn git(dir: &Path, args: &[&str]) -> String {
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

// ---------------------------------------------------------------------------------------------
// Baseline servers: bare hyper, HTTP/1.1, no framework

/// A streaming body fed by a channel (the baseline's SSE responses).
struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

/// Serves HTTP/1.1 on a fresh 127.0.0.1 port, answering every request with `handle` (the
/// bench's own servers: the bare hyper baseline, the fake GitHub API).
async fn serve_http1<F, Fut>(handle: F) -> SocketAddr
where
    F: Fn(Request<hyper::body::Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Response<BoxBody<Bytes, Infallible>>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let handle = handle.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let reply = handle(req);
                    async move { Ok::<_, Infallible>(reply.await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// A bare hyper server: `/sse` streams `feed` (a broadcast with one forwarding task and a
/// 64-message buffer per client, as the real server does), anything else answers `ok`.
async fn baseline_server(feed: broadcast::Sender<Bytes>) -> SocketAddr {
    serve_http1(move |req: Request<hyper::body::Incoming>| {
        let feed = feed.clone();
        async move {
            let body: BoxBody<Bytes, Infallible> = if req.uri().path() == "/sse" {
                let mut sub = feed.subscribe();
                let (tx, rx) = mpsc::channel::<Bytes>(64);
                let _ = tx.try_send(Bytes::from_static(b": ping\n\n"));
                tokio::spawn(async move {
                    loop {
                        tokio::select! {
                            m = sub.recv() => match m {
                                Ok(b) => if tx.try_send(b).is_err() { break },
                                Err(_) => break,
                            },
                            _ = tx.closed() => break,
                        }
                    }
                });
                BoxBody::new(ChannelBody(rx))
            } else {
                BoxBody::new(Full::new(Bytes::from_static(b"ok")))
            };
            Response::new(body)
        }
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Closed-loop HTTP load: `conns` keep-alive HTTP/1.1 connections, one request in flight each

struct LoadResult {
    requests: usize,
    errors: usize,
    elapsed: Duration,
    lat: Vec<Duration>,
}

impl LoadResult {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
}

async fn load(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    conns: usize,
    duration: Duration,
    max_requests: usize,
) -> LoadResult {
    let issued = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (path, token, issued) = (path.to_string(), token.map(str::to_string), issued.clone());
        tasks.push(tokio::spawn(async move {
            let stream = TcpStream::connect(addr).await.expect("connect");
            stream.set_nodelay(true).ok();
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .expect("handshake");
            tokio::spawn(conn);
            let mut lat = Vec::new();
            let mut errors = 0;
            while Instant::now() < deadline && issued.fetch_add(1, Ordering::Relaxed) < max_requests
            {
                let mut req = Request::builder()
                    .uri(path.as_str())
                    .header("host", "127.0.0.1");
                if let Some(t) = &token {
                    req = req.header("authorization", format!("Bearer {t}"));
                }
                let req = req.body(Empty::<Bytes>::new()).unwrap();
                let t0 = Instant::now();
                if sender.ready().await.is_err() {
                    errors += 1;
                    break;
                }
                match sender.send_request(req).await {
                    Ok(resp) => {
                        let ok = resp.status().is_success();
                        let body = resp.into_body().collect().await;
                        if ok && body.is_ok() {
                            lat.push(t0.elapsed());
                        } else {
                            errors += 1;
                        }
                    }
                    Err(_) => {
                        errors += 1;
                        break;
                    }
                }
            }
            (lat, errors)
        }));
    }
    let mut result = LoadResult {
        requests: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        lat: Vec::new(),
    };
    for t in tasks {
        let (lat, errors) = t.await.unwrap();
        result.requests += lat.len();
        result.errors += errors;
        result.lat.extend(lat);
    }
    result.elapsed = started.elapsed();
    result.lat.sort();
    result
}

// ---------------------------------------------------------------------------------------------
// http

async fn http_scenario() {
    const CONNS: usize = 16;
    const DURATION: Duration = Duration::from_secs(3);
    const MAX: usize = 200_000;
    println!(
        "\n# http: {CONNS} keep-alive HTTP/1.1 connections, closed loop, {}s or {MAX} requests per row",
        DURATION.as_secs()
    );
    let (feed, _) = broadcast::channel(16);
    let base_addr = baseline_server(feed).await;
    let server = Server::start(false).await;
    let token = server.user("bench", false).await;
    let admin = server.user("root", true).await;
    let addr = server.api.addr;
    // A repository of the bench user with five (pending) pipelines of one step each.
    let config = "steps:\n  build:\n    image: sh\n    commands: [echo hello]\n";
    let (repo, _) = server
        .git_repo(&admin, &token, "bench/app", &[(".woodpecker.yaml", config)])
        .await;
    for _ in 0..5 {
        server
            .api
            .expect(
                "POST",
                &format!("/api/repos/{repo}/pipelines"),
                Some(&token),
                Some("{}"),
                200,
            )
            .await;
    }
    let pipelines = format!("/api/repos/{repo}/pipelines");
    let pipeline = format!("/api/repos/{repo}/pipelines/5");
    let repo_path = format!("/api/repos/{repo}");

    let mut results: Vec<(&str, LoadResult)> = Vec::new();
    let targets: [(&str, SocketAddr, &str, Option<&str>); 8] = [
        ("baseline: bare hyper `GET /`", base_addr, "/", None),
        ("GET /version", addr, "/version", None),
        ("GET /healthz", addr, "/healthz", None),
        ("GET /api/user (token)", addr, "/api/user", Some(&token)),
        (
            "GET /api/repos/{id} (token)",
            addr,
            &repo_path,
            Some(&token),
        ),
        ("GET …/pipelines (token, 5)", addr, &pipelines, Some(&token)),
        (
            "GET …/pipelines/5 (token, steps)",
            addr,
            &pipeline,
            Some(&token),
        ),
        (
            "GET /events?limit=20 (token)",
            addr,
            "/events?limit=20",
            Some(&token),
        ),
    ];
    // `WOODLARK_HTTP_ONLY=pipelines` measures the baseline and the rows whose name contains
    // the text (for profiling one endpoint).
    let only = std::env::var("WOODLARK_HTTP_ONLY").unwrap_or_default();
    for (i, (name, a, path, tok)) in targets.into_iter().enumerate() {
        if i > 0 && !name.contains(only.as_str()) {
            continue;
        }
        // Warm-up (connections, caches, prepared statements), then the measured run.
        load(a, path, tok, CONNS, Duration::from_millis(300), MAX).await;
        let r = load(a, path, tok, CONNS, DURATION, MAX).await;
        results.push((name, r));
    }
    let base_rps = results[0].1.rps();
    let base_p50 = pct(&results[0].1.lat, 0.5).as_secs_f64();
    let base_p99 = pct(&results[0].1.lat, 0.99).as_secs_f64();
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|(name, r)| {
            let (p50, p99) = (pct(&r.lat, 0.5), pct(&r.lat, 0.99));
            vec![
                name.to_string(),
                r.requests.to_string(),
                r.errors.to_string(),
                format!("{:.0}", r.rps()),
                ratio(r.rps(), base_rps),
                ms(p50),
                ms(p99),
                ratio(p50.as_secs_f64(), base_p50),
                ratio(p99.as_secs_f64(), base_p99),
            ]
        })
        .collect();
    table(
        "http: throughput and latency vs bare hyper",
        &[
            "endpoint",
            "requests",
            "errors",
            "req/s",
            "req/s ÷ base",
            "p50 ms",
            "p99 ms",
            "p50 ÷ base",
            "p99 ÷ base",
        ],
        &rows,
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// events

/// Appends seeded `users.updated` events until the outbox holds `target` rows, in large
/// transactions on the writer thread (raw SQL with the outbox's own column layout). The
/// seeded events belong to organisations nobody in the bench belongs to.
async fn seed_events(server: &Server, target: i64) -> (i64, Duration) {
    let started = Instant::now();
    let have: i64 = server
        .state
        .ci
        .store
        .read(|c| {
            Ok(c.raw_for_tests()
                .query_row("SELECT count(*) FROM events", [], |r| r.get(0))?)
        })
        .await
        .unwrap();
    let mut left = target - have;
    let inserted = left.max(0);
    while left > 0 {
        let n = left.min(100_000);
        left -= n;
        server
            .state
            .ci
            .store
            .write(move |c| {
                let now = woodlark::store::now_unix_ms();
                let mut stmt = c.raw_for_tests().prepare_cached(
                    "INSERT INTO events (created_ms, record_type, action, record_id, object, previous, org_id, repo_id)
                     VALUES (?1, 'users', 'updated', ?2, ?3, ?4, ?5, NULL)",
                )?;
                for i in 0..n {
                    let id = 1_000_000 + i;
                    let object = format!(
                        r#"{{"id":{id},"login":"seed{id}","email":"seed{id}@example.com","avatar_url":"","admin":false,"active":true,"org_id":{org}}}"#,
                        org = 1_000_000 + i % 50
                    );
                    stmt.execute(rusqlite::params![
                        now,
                        id.to_string(),
                        object,
                        r#"{"email":""}"#,
                        1_000_000 + i % 50
                    ])?;
                }
                Ok(())
            })
            .await
            .expect("seed events");
    }
    (inserted, started.elapsed())
}

async fn max_seq(server: &Server) -> i64 {
    server
        .state
        .ci
        .store
        .read(|c| {
            Ok(c.raw_for_tests().query_row(
                "SELECT coalesce(max(seq), 0) FROM events",
                [],
                |r| r.get(0),
            )?)
        })
        .await
        .unwrap()
}

/// Sequential latency of one request: up to `max_reps` or `budget`, at least 5.
async fn latency(
    api: &Api,
    path: &str,
    token: Option<&str>,
    max_reps: usize,
    budget: Duration,
) -> (Vec<Duration>, usize) {
    let (status, body) = api.send("GET", path, token, None).await; // warm-up
    assert!(
        status.is_success(),
        "GET {path}: {status} {}",
        String::from_utf8_lossy(&body)
    );
    let items = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["data"].as_array().map(Vec::len))
        .unwrap_or(0);
    let started = Instant::now();
    let mut lat = Vec::new();
    while lat.len() < max_reps && (lat.len() < 5 || started.elapsed() < budget) {
        let t0 = Instant::now();
        let (status, _) = api.send("GET", path, token, None).await;
        lat.push(t0.elapsed());
        assert!(status.is_success());
    }
    lat.sort();
    (lat, items)
}

struct EventsRun {
    rows: Vec<(String, Vec<Duration>, usize)>,
    healthz_cpu: Duration,
}

async fn events_measure(server: &Server, admin: &str, alice: &str) -> EventsRun {
    let top = max_seq(server).await;
    let id = woodlark::store::events::format_id;
    let mid = id(top / 2);
    let near_end = id(top - 150);
    let queries: Vec<(String, String, &str)> = vec![
        ("GET /version (floor)".into(), "/version".into(), admin),
        (
            "first page (admin)".into(),
            "/events?limit=100".into(),
            admin,
        ),
        (
            "starting_after=middle (admin)".into(),
            format!("/events?starting_after={mid}&limit=100"),
            admin,
        ),
        (
            "starting_after=end-150 (admin)".into(),
            format!("/events?starting_after={near_end}&limit=100"),
            admin,
        ),
        (
            "ending_before=middle (admin)".into(),
            format!("/events?ending_before={mid}&limit=100"),
            admin,
        ),
        (
            "record_type=users, after middle (dense)".into(),
            format!("/events?record_type=users&starting_after={mid}&limit=100"),
            admin,
        ),
        (
            "record_type=repos (sparse)".into(),
            "/events?record_type=repos&limit=100".into(),
            admin,
        ),
        (
            "school=<alice's org> (sparse)".into(),
            "/events?school=alice&limit=100".into(),
            admin,
        ),
        (
            "first page (non-admin: visibility filter)".into(),
            "/events?limit=100".into(),
            alice,
        ),
    ];
    let mut rows = Vec::new();
    for (name, path, token) in queries {
        let (lat, items) =
            latency(&server.api, &path, Some(token), 200, Duration::from_secs(3)).await;
        rows.push((name, lat, items));
    }
    // Process CPU per isolated committed write: `/healthz` commits an (empty) write
    // transaction, and every commit wakes the readers of the outbox (the `/stream/events`
    // tailer). One write per second, so the work each one causes is not coalesced.
    let n = 4;
    let cpu0 = cpu_time();
    for _ in 0..n {
        server.api.expect("GET", "/healthz", None, None, 204).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let healthz_cpu = (cpu_time() - cpu0) / n;
    EventsRun { rows, healthz_cpu }
}

async fn events_scenario() {
    println!("\n# events: GET /events page latency at 10 thousand and at 1 million events");
    let server = Server::start(false).await;
    let admin = server.user("root", true).await;
    let alice = server.user("alice", false).await;
    // A few real events besides the seeded ones: a forge, a repository, users.
    server
        .git_repo(&admin, &alice, "alice/app", &[("a.txt", "a")])
        .await;

    let (n, took) = seed_events(&server, 10_000).await;
    println!(
        "seeded {n} events in {:.2} s; outbox max seq {}",
        took.as_secs_f64(),
        max_seq(&server).await
    );
    let small = events_measure(&server, &admin, &alice).await;
    let (n, took) = seed_events(&server, 1_000_000).await;
    println!(
        "seeded {n} events in {:.2} s ({:.0} rows/s); outbox max seq {}",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64(),
        max_seq(&server).await
    );
    let large = events_measure(&server, &admin, &alice).await;

    let floor_large = pct(&large.rows[0].1, 0.5).as_secs_f64();
    let rows: Vec<Vec<String>> = small
        .rows
        .iter()
        .zip(&large.rows)
        .map(|((name, a, items), (_, b, _))| {
            let (a50, b50) = (pct(a, 0.5), pct(b, 0.5));
            vec![
                name.clone(),
                items.to_string(),
                format!("{}", a.len()),
                ms(a50),
                ms(pct(a, 0.99)),
                format!("{}", b.len()),
                ms(b50),
                ms(pct(b, 0.99)),
                ratio(b50.as_secs_f64(), a50.as_secs_f64()),
                ratio(b50.as_secs_f64(), floor_large),
            ]
        })
        .collect();
    table(
        "events: sequential page latency (limit=100), 10k → 1M events",
        &[
            "query",
            "items",
            "n@10k",
            "p50 ms @10k",
            "p99 ms @10k",
            "n@1M",
            "p50 ms @1M",
            "p99 ms @1M",
            "1M ÷ 10k (p50)",
            "@1M ÷ /version",
        ],
        &rows,
    );
    table(
        "events: process CPU per isolated committed write (one GET /healthz per second), 10k → 1M events",
        &["metric", "@10k", "@1M", "1M ÷ 10k"],
        &[vec![
            "process CPU ms per write".into(),
            ms(small.healthz_cpu),
            ms(large.healthz_cpu),
            ratio(
                large.healthz_cpu.as_secs_f64(),
                small.healthz_cpu.as_secs_f64(),
            ),
        ]],
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// queue

const ECHO: &str = "steps:\n  - name: echo\n    image: sh\n    commands: [\"echo hello\"]\n";
const ECHO_NO_CLONE: &str =
    "skip_clone: true\nsteps:\n  - name: echo\n    image: sh\n    commands: [\"echo hello\"]\n";

/// One-step pipelines on the docker backend vs `docker run --rm` of the same image/command.
async fn docker_scenario() {
    const N: usize = 15;
    const IMAGE: &str = "woodlark-test/busybox:latest";
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/docker/images.sh");
    let built = Command::new("bash").arg(&script).status().expect("bash");
    assert!(built.success(), "{} failed", script.display());
    println!(
        "\n# docker: {N} one-step pipelines (`echo hello` in {IMAGE}), one at a time, docker backend, vs `docker run --rm` of the same image and command"
    );
    let config = format!(
        "skip_clone: true\nsteps:\n  - name: echo\n    image: {IMAGE}\n    commands: [\"echo hello\"]\n"
    );
    let with_clone =
        format!("steps:\n  - name: echo\n    image: {IMAGE}\n    commands: [\"echo hello\"]\n");
    let server = Server::start_backend(Some("docker"), "").await;
    let admin = server.user("root", true).await;
    let alice = server.user("alice", false).await;
    let (plain, _) = server
        .git_repo(
            &admin,
            &alice,
            "alice/plain",
            &[(".woodpecker.yaml", &config)],
        )
        .await;
    let (cloned, _) = server
        .git_repo(
            &admin,
            &alice,
            "alice/cloned",
            &[(".woodpecker.yaml", &with_clone)],
        )
        .await;
    let one_by_one = |repo: i64| {
        let (api, alice) = (server.api.clone(), alice.clone());
        async move {
            let mut times = Vec::with_capacity(N);
            for number in 1..=N as i64 {
                let t = Instant::now();
                api.expect(
                    "POST",
                    &format!("/api/repos/{repo}/pipelines"),
                    Some(&alice),
                    Some(r#"{"branch":"main"}"#),
                    200,
                )
                .await;
                loop {
                    let p = api
                        .expect(
                            "GET",
                            &format!("/api/repos/{repo}/pipelines/{number}"),
                            Some(&alice),
                            None,
                            200,
                        )
                        .await;
                    match p["status"].as_str() {
                        Some("success") => break,
                        Some("failure" | "error" | "killed") => panic!("pipeline failed: {p:#}"),
                        _ => tokio::time::sleep(Duration::from_millis(5)).await,
                    }
                }
                times.push(t.elapsed());
            }
            times.sort();
            times
        }
    };
    let docker_run = || {
        let mut times = Vec::with_capacity(N);
        for _ in 0..N {
            let t = Instant::now();
            let out = Command::new("docker")
                .args(["run", "--rm", IMAGE, "/bin/sh", "-c", "echo hello"])
                .output()
                .expect("docker run");
            assert!(out.status.success());
            times.push(t.elapsed());
        }
        times.sort();
        times
    };
    // Warm both paths once (image cache, page cache).
    let _ = docker_run();
    let baseline = docker_run();
    let skip = one_by_one(plain).await;
    let clone = one_by_one(cloned).await;
    let base_med = pct(&baseline, 0.5);
    let rows: Vec<Vec<String>> = [
        ("`docker run --rm` (baseline)", &baseline),
        ("pipeline, skip_clone", &skip),
        ("pipeline with clone (host git + copy)", &clone),
    ]
    .iter()
    .map(|(name, t)| {
        vec![
            name.to_string(),
            ms(pct(t, 0.5)),
            ms(pct(t, 0.9)),
            ratio(pct(t, 0.5).as_secs_f64(), base_med.as_secs_f64()),
        ]
    })
    .collect();
    table(
        "trigger → success, one pipeline at a time",
        &["path", "median ms", "p90 ms", "÷ docker run"],
        &rows,
    );
    server.stop().await;
}

/// Pipelines of a repository by status.
async fn statuses(server: &Server, repo: i64) -> (i64, i64) {
    server
        .state
        .ci
        .store
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

struct QueueRun {
    n: usize,
    submitted: Duration,
    elapsed: Duration,
    failed: i64,
}

/// Fires `n` triggers (4 in flight) and waits until `n` more pipelines of `repo` are
/// finished than before.
async fn queue_run<F, Fut>(server: &Server, repo: i64, n: usize, trigger: F) -> QueueRun
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let (ok0, failed0) = statuses(server, repo).await;
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut senders = Vec::new();
    for _ in 0..4 {
        let (next, trigger) = (next.clone(), trigger.clone());
        senders.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < n {
                trigger().await;
            }
        }));
    }
    for s in senders {
        s.await.unwrap();
    }
    let submitted = started.elapsed();
    let deadline = started + Duration::from_secs(120);
    loop {
        let (ok, failed) = statuses(server, repo).await;
        let (ok, failed) = (ok - ok0, failed - failed0);
        if ok + failed >= n as i64 || Instant::now() > deadline {
            return QueueRun {
                n: ok as usize,
                submitted,
                elapsed: started.elapsed(),
                failed,
            };
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The same processes the runner starts, run directly, two at a time.
async fn baseline_jobs(n: usize, clone: Option<(PathBuf, String)>) -> Duration {
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let root = tempfile::tempdir().unwrap();
    let mut workers = Vec::new();
    for w in 0..2 {
        let (next, clone, root) = (next.clone(), clone.clone(), root.path().to_path_buf());
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let dir = root.join(format!("{w}-{i}"));
                tokio::fs::create_dir_all(&dir).await.unwrap();
                if let Some((bare, sha)) = &clone {
                    let script = format!(
                        "git clone --quiet --no-checkout {} . && git -c advice.detachedHead=false checkout --quiet {sha}",
                        bare.display()
                    );
                    let st = tokio::process::Command::new("sh")
                        .args(["-e", "-c", &script])
                        .current_dir(&dir)
                        .output()
                        .await
                        .unwrap();
                    assert!(st.status.success());
                }
                let st = tokio::process::Command::new("sh")
                    .args(["-e", "-c", "echo hello"])
                    .current_dir(&dir)
                    .output()
                    .await
                    .unwrap();
                assert!(st.status.success());
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    started.elapsed()
}

async fn queue_scenario() {
    const N: usize = 60;
    println!(
        "\n# queue: {N} one-step `echo` pipelines per row, local runner with capacity 2, until all are `success`"
    );
    let server = Server::start(true).await;
    let admin = server.user("root", true).await;
    let alice = server.user("alice", false).await;
    let (with_clone, bare) = server
        .git_repo(&admin, &alice, "alice/clone", &[(".woodpecker.yaml", ECHO)])
        .await;
    let (hooked, hooked_bare) = server
        .git_repo(&admin, &alice, "alice/hook", &[(".woodpecker.yaml", ECHO)])
        .await;
    let (no_clone, _) = server
        .git_repo(
            &admin,
            &alice,
            "alice/noclone",
            &[(".woodpecker.yaml", ECHO_NO_CLONE)],
        )
        .await;
    let sha = git(&bare, &["rev-parse", "main"]).trim().to_string();

    // The hook URL the post-receive script posts to (the repository's own hook token).
    let script = std::fs::read_to_string(hooked_bare.join("hooks/post-receive")).unwrap();
    let url = script
        .lines()
        .find_map(|l| l.strip_prefix("url='"))
        .and_then(|l| l.strip_suffix('\''))
        .expect("hook url")
        .to_string();
    let hook_path = url
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|i| rest[i..].to_string()))
        .expect("hook path");
    let hook_sha = git(&hooked_bare, &["rev-parse", "main"]).trim().to_string();
    let hook_body = format!("{} {hook_sha} refs/heads/main\n", "0".repeat(40));

    let manual = |api: &Api, repo: i64| {
        let (api, alice) = (api.clone(), alice.clone());
        move || {
            let (api, alice) = (api.clone(), alice.clone());
            async move {
                api.expect(
                    "POST",
                    &format!("/api/repos/{repo}/pipelines"),
                    Some(&alice),
                    Some(r#"{"branch":"main"}"#),
                    200,
                )
                .await;
            }
        }
    };
    let hook = {
        let (api, path, body) = (server.api.clone(), hook_path.clone(), hook_body.clone());
        move || {
            let (api, path, body) = (api.clone(), path.clone(), body.clone());
            async move {
                let (status, text) = api.send("POST", &path, None, Some(&body)).await;
                assert_eq!(
                    status,
                    StatusCode::OK,
                    "hook: {}",
                    String::from_utf8_lossy(&text)
                );
            }
        }
    };
    // Warm-up: one pipeline of each kind (first clone, first process spawns).
    queue_run(&server, hooked, 1, hook.clone()).await;
    queue_run(&server, with_clone, 1, manual(&server.api, with_clone)).await;
    queue_run(&server, no_clone, 1, manual(&server.api, no_clone)).await;

    let hook_run = queue_run(&server, hooked, N, hook).await;
    let clone_run = queue_run(&server, with_clone, N, manual(&server.api, with_clone)).await;
    let bare_run = queue_run(&server, no_clone, N, manual(&server.api, no_clone)).await;
    // Baselines while the server's data dir (and so the bare repository) still exists.
    let base_clone = baseline_jobs(N, Some((bare.clone(), sha))).await;
    let base_echo = baseline_jobs(N, None).await;
    server.stop().await;

    // The same skip_clone run with `storage.synchronous = "normal"` (no fsync per commit).
    let normal = Server::start_with(true, "[storage]\nsynchronous = \"normal\"\n").await;
    let admin = normal.user("root", true).await;
    let alice = normal.user("alice", false).await;
    let (normal_repo, _) = normal
        .git_repo(
            &admin,
            &alice,
            "alice/noclone",
            &[(".woodpecker.yaml", ECHO_NO_CLONE)],
        )
        .await;
    let manual_normal = {
        let (api, alice) = (normal.api.clone(), alice.clone());
        move || {
            let (api, alice) = (api.clone(), alice.clone());
            async move {
                api.expect(
                    "POST",
                    &format!("/api/repos/{normal_repo}/pipelines"),
                    Some(&alice),
                    Some(r#"{"branch":"main"}"#),
                    200,
                )
                .await;
            }
        }
    };
    queue_run(&normal, normal_repo, 1, manual_normal.clone()).await;
    let normal_run = queue_run(&normal, normal_repo, N, manual_normal).await;
    normal.stop().await;

    let per_s = |n: usize, d: Duration| n as f64 / d.as_secs_f64();
    let rows = [
        ("hook → success (clone + echo)", &hook_run, base_clone),
        (
            "manual run → success (clone + echo)",
            &clone_run,
            base_clone,
        ),
        (
            "manual run → success (skip_clone, echo)",
            &bare_run,
            base_echo,
        ),
        ("same, storage.synchronous = normal", &normal_run, base_echo),
    ];
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|(name, r, base)| {
            let rate = per_s(r.n, r.elapsed);
            let base_rate = per_s(N, *base);
            vec![
                name.to_string(),
                format!("{}", r.n),
                format!("{}", r.failed),
                format!("{:.2}", r.submitted.as_secs_f64()),
                format!("{:.2}", r.elapsed.as_secs_f64()),
                format!("{rate:.1}"),
                format!("{:.1}", 1000.0 / rate),
                format!("{base_rate:.1}"),
                ratio(rate, base_rate),
            ]
        })
        .collect();
    table(
        "queue: pipelines/s until all `success` vs the same processes run directly (2 at a time)",
        &[
            "trigger → status",
            "pipelines",
            "failed",
            "submit s",
            "total s",
            "pipelines/s",
            "ms/pipeline",
            "baseline jobs/s",
            "÷ baseline",
        ],
        &table_rows,
    );
}

// ---------------------------------------------------------------------------------------------
// logs

const LINES: i64 = 200_000;

async fn logs_scenario() {
    println!("\n# logs: one step printing {LINES} lines (`seq 1 {LINES}`), local runner");
    let server = Server::start(true).await;
    let admin = server.user("root", true).await;
    let alice = server.user("alice", false).await;
    let config = format!(
        "skip_clone: true\nsteps:\n  - name: lines\n    image: sh\n    commands: [\"seq 1 {LINES}\"]\n"
    );
    let (repo, _) = server
        .git_repo(
            &admin,
            &alice,
            "alice/logs",
            &[(".woodpecker.yaml", &config)],
        )
        .await;

    let t0 = Instant::now();
    let created = server
        .api
        .expect(
            "POST",
            &format!("/api/repos/{repo}/pipelines"),
            Some(&alice),
            Some(r#"{"branch":"main"}"#),
            200,
        )
        .await;
    let number = created["number"].as_i64().unwrap();
    let step_id = loop {
        let p = server
            .api
            .expect(
                "GET",
                &format!("/api/repos/{repo}/pipelines/{number}"),
                Some(&alice),
                None,
                200,
            )
            .await;
        let id = p["workflows"].as_array().and_then(|w| {
            w.iter()
                .flat_map(|w| w["children"].as_array().cloned().unwrap_or_default())
                .find(|s| s["name"] == "lines")
                .and_then(|s| s["id"].as_i64())
        });
        if let Some(id) = id {
            break id;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let count = |server: &Server| {
        let logs = server.state.ci.logs.clone();
        async move {
            logs.read(move |c| {
                Ok(c.raw_for_tests().query_row(
                    "SELECT count(*) FROM log_entries WHERE step_id = ?1",
                    [step_id],
                    |r| r.get::<_, i64>(0),
                )?)
            })
            .await
            .unwrap()
        }
    };
    let mut first_line = None;
    let all_lines;
    loop {
        let n = count(&server).await;
        if n > 0 && first_line.is_none() {
            first_line = Some(t0.elapsed());
        }
        if n >= LINES {
            all_lines = t0.elapsed();
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(180),
            "logs: only {n} lines stored"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let done = loop {
        let (ok, failed) = statuses(&server, repo).await;
        assert_eq!(failed, 0, "the log pipeline failed");
        if ok == 1 {
            break t0.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let stored = count(&server).await;
    let first_line = first_line.unwrap_or_default();
    let ingest = all_lines.saturating_sub(first_line);

    // Read back through the API (one request, every line as a base64 LogEntry).
    let t = Instant::now();
    let (status, body) = server
        .api
        .send(
            "GET",
            &format!("/api/repos/{repo}/logs/{number}/{step_id}"),
            Some(&alice),
            None,
        )
        .await;
    let read_back = t.elapsed();
    assert!(status.is_success());
    let entries = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.as_array().map(Vec::len))
        .unwrap_or(0);

    // Baseline 1: the same output read line by line from a pipe.
    let t = Instant::now();
    let mut child = tokio::process::Command::new("sh")
        .args(["-e", "-c", &format!("seq 1 {LINES}")])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut piped = 0i64;
    let mut line = String::new();
    while tokio::io::AsyncBufReadExt::read_line(&mut reader, &mut line)
        .await
        .unwrap()
        > 0
    {
        piped += 1;
        line.clear();
    }
    child.wait().await.unwrap();
    let pipe_time = t.elapsed();

    // Baseline 2: SQLite alone, same schema, 200-line transactions, synchronous = FULL.
    let sqlite_time = tokio::task::spawn_blocking(|| {
        let dir = tempfile::tempdir().unwrap();
        let c = durable_sqlite(&dir.path().join("logs.db"));
        c.execute_batch(
            "CREATE TABLE log_entries (
                id INTEGER PRIMARY KEY, step_id INTEGER NOT NULL, line INTEGER NOT NULL,
                time INTEGER NOT NULL, type INTEGER NOT NULL, data BLOB NOT NULL,
                created_ms INTEGER NOT NULL, UNIQUE (step_id, line));
             CREATE INDEX log_entries_created ON log_entries (created_ms);",
        )
        .unwrap();
        let t = Instant::now();
        let mut n = 0i64;
        while n < LINES {
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            {
                let mut stmt = c
                    .prepare_cached(
                        "INSERT OR IGNORE INTO log_entries (step_id, line, time, type, data, created_ms)
                         VALUES (1, ?1, 0, 0, ?2, 0)",
                    )
                    .unwrap();
                for _ in 0..200 {
                    n += 1;
                    stmt.execute(rusqlite::params![n, n.to_string().as_bytes()])
                        .unwrap();
                }
            }
            c.execute_batch("COMMIT").unwrap();
        }
        t.elapsed()
    })
    .await
    .unwrap();

    let rate = |n: i64, d: Duration| n as f64 / d.as_secs_f64();
    let ingest_rate = rate(LINES, ingest);
    let e2e_rate = rate(LINES, done);
    let rows = vec![
        vec![
            "woodlark: first stored → all stored".into(),
            format!("{stored}"),
            format!("{:.2}", ingest.as_secs_f64()),
            format!("{ingest_rate:.0}"),
            ratio(ingest_rate, rate(piped, pipe_time)),
            ratio(ingest_rate, rate(LINES, sqlite_time)),
        ],
        vec![
            "woodlark: manual run → `success`".into(),
            format!("{stored}"),
            format!("{:.2}", done.as_secs_f64()),
            format!("{e2e_rate:.0}"),
            ratio(e2e_rate, rate(piped, pipe_time)),
            ratio(e2e_rate, rate(LINES, sqlite_time)),
        ],
        vec![
            "woodlark: GET …/logs/{n}/{step} (read back)".into(),
            format!("{entries}"),
            format!("{:.2}", read_back.as_secs_f64()),
            format!("{:.0}", rate(entries as i64, read_back)),
            "-".into(),
            "-".into(),
        ],
        vec![
            "baseline: pipe, read line by line".into(),
            format!("{piped}"),
            format!("{:.2}", pipe_time.as_secs_f64()),
            format!("{:.0}", rate(piped, pipe_time)),
            "1.00x".into(),
            "-".into(),
        ],
        vec![
            "baseline: SQLite, 200-line txns, FULL sync".into(),
            format!("{LINES}"),
            format!("{:.2}", sqlite_time.as_secs_f64()),
            format!("{:.0}", rate(LINES, sqlite_time)),
            "-".into(),
            "1.00x".into(),
        ],
    ];
    table(
        "logs: lines/s stored vs a bare pipe and bare SQLite",
        &[
            "measurement",
            "lines",
            "seconds",
            "lines/s",
            "÷ pipe",
            "÷ SQLite",
        ],
        &rows,
    );
    println!(
        "(first line stored {:.0} ms after the POST; {} bytes of JSON read back)",
        first_line.as_secs_f64() * 1000.0,
        body.len()
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------------------------
// sse

const CLIENTS: usize = 1_000;
const WAVES: usize = 20;

/// What each SSE client saw: when it was ready (`: ping`) and when each `data:` arrived.
#[derive(Default)]
struct Seen {
    arrivals: Mutex<Vec<Instant>>,
}

/// A raw HTTP/1.1 SSE client; counts `data: ` frames as they arrive.
async fn sse_client(
    addr: SocketAddr,
    path: String,
    token: Option<String>,
    seen: Arc<Seen>,
    ready: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
) {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        closed.fetch_add(1, Ordering::Relaxed);
        return;
    };
    stream.set_nodelay(true).ok();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n{auth}\r\n"
    );
    if stream.write_all(req.as_bytes()).await.is_err() {
        closed.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let mut buf = vec![0u8; 4096];
    let mut carry: Vec<u8> = Vec::with_capacity(4096 + 8);
    let mut is_ready = false;
    loop {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let now = Instant::now();
        carry.extend_from_slice(&buf[..n]);
        if !is_ready && find(&carry, b": ping").is_some() {
            is_ready = true;
            ready.fetch_add(1, Ordering::Relaxed);
        }
        let frames = count(&carry, b"data: ");
        if frames > 0 {
            let mut a = seen.arrivals.lock().unwrap();
            a.extend(std::iter::repeat_n(now, frames));
        }
        // Keep the last 5 bytes: a 6-byte pattern may straddle two reads, and 5 bytes cannot
        // hold one already counted.
        let keep = carry.len().min(5);
        carry.drain(..carry.len() - keep);
    }
    closed.fetch_add(1, Ordering::Relaxed);
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// Runs one side of the SSE benchmark in this (child) process and prints one JSON line.
async fn sse_child(kind: &str) {
    let (feed, _) = broadcast::channel::<Bytes>(4096);
    let mut server = None;
    let (addr, path, token, trigger): (SocketAddr, String, Option<String>, Trigger) =
        if kind == "baseline" {
            let addr = baseline_server(feed.clone()).await;
            let feed = feed.clone();
            let frame = Bytes::from(format!(
                "data: {}\n\n",
                json!({"pipeline": {"status": "x".repeat(2000)}})
            ));
            let trigger: Trigger = Arc::new(move |_| -> BoxFuture {
                let (feed, frame) = (feed.clone(), frame.clone());
                Box::pin(async move {
                    let _ = feed.send(frame);
                })
            });
            (addr, "/sse".into(), None, trigger)
        } else {
            let s = Server::start(false).await;
            let admin = s.user("root", true).await;
            let alice = s.user("alice", false).await;
            let (repo, _) = s
                .git_repo(&admin, &alice, "alice/app", &[(".woodpecker.yaml", ECHO)])
                .await;
            let (api, tok) = (s.api.clone(), alice.clone());
            let last = Arc::new(Mutex::new(0i64));
            // Even waves create a pipeline (pending: the runner is off), odd waves cancel it.
            let trigger: Trigger = Arc::new(move |wave| -> BoxFuture {
                let (api, tok, last) = (api.clone(), tok.clone(), last.clone());
                Box::pin(async move {
                    if wave % 2 == 0 {
                        let p = api
                            .expect(
                                "POST",
                                &format!("/api/repos/{repo}/pipelines"),
                                Some(&tok),
                                Some(r#"{"branch":"main"}"#),
                                200,
                            )
                            .await;
                        *last.lock().unwrap() = p["number"].as_i64().unwrap();
                    } else {
                        let n = *last.lock().unwrap();
                        api.expect(
                            "POST",
                            &format!("/api/repos/{repo}/pipelines/{n}/cancel"),
                            Some(&tok),
                            Some(""),
                            204,
                        )
                        .await;
                    }
                })
            });
            let addr = s.api.addr;
            server = Some(s);
            (addr, "/api/stream/events".into(), Some(alice), trigger)
        };

    // Warm-up: one client through one full create/cancel cycle.
    {
        let (seen, ready, closed) = (
            Arc::new(Seen::default()),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let h = tokio::spawn(sse_client(
            addr,
            path.clone(),
            token.clone(),
            seen.clone(),
            ready.clone(),
            closed.clone(),
        ));
        wait_until(
            || ready.load(Ordering::Relaxed) == 1,
            Duration::from_secs(10),
        )
        .await;
        for w in 0..2 {
            trigger(w).await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        h.abort();
        let _ = h.await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_before = rss_bytes();

    // Connect all clients, 50 connection attempts in flight at a time.
    let ready = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicUsize::new(0));
    let seen: Vec<Arc<Seen>> = (0..CLIENTS).map(|_| Arc::new(Seen::default())).collect();
    let connect_started = Instant::now();
    let mut handles = Vec::with_capacity(CLIENTS);
    for (i, s) in seen.iter().enumerate() {
        handles.push(tokio::spawn(sse_client(
            addr,
            path.clone(),
            token.clone(),
            s.clone(),
            ready.clone(),
            closed.clone(),
        )));
        if i % 50 == 49 {
            let want = i + 1;
            wait_until(
                || ready.load(Ordering::Relaxed) + closed.load(Ordering::Relaxed) >= want,
                Duration::from_secs(30),
            )
            .await;
        }
    }
    wait_until(
        || ready.load(Ordering::Relaxed) + closed.load(Ordering::Relaxed) >= CLIENTS,
        Duration::from_secs(60),
    )
    .await;
    let connect_time = connect_started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_after = rss_bytes();
    let connected = ready.load(Ordering::Relaxed);

    // Waves: trigger, then wait until every live client has a frame newer than the trigger.
    let mut first_wave = Vec::new();
    let mut lags = Vec::new();
    let mut all_received = Vec::new();
    let mut missed = 0usize;
    let mut trigger_times = Vec::new();
    for wave in 0..WAVES {
        let t0 = Instant::now();
        trigger(wave).await;
        trigger_times.push(t0.elapsed());
        let got = |s: &Seen| s.arrivals.lock().unwrap().iter().any(|a| *a >= t0);
        wait_until(
            || seen.iter().filter(|s| got(s)).count() >= connected,
            Duration::from_secs(15),
        )
        .await;
        let mut wave_lags: Vec<Duration> = seen
            .iter()
            .filter_map(|s| {
                s.arrivals
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|a| **a >= t0)
                    .map(|a| *a - t0)
            })
            .collect();
        missed += connected.saturating_sub(wave_lags.len());
        wave_lags.sort();
        if let Some(max) = wave_lags.last() {
            all_received.push(*max);
        }
        if wave == 0 {
            first_wave = wave_lags;
        } else {
            lags.extend(wave_lags);
        }
        // Let trailing frames of this change (steps, workflows) pass before the next one.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    lags.sort();
    all_received.sort();
    trigger_times.sort();
    let frames_client0 = seen[0].arrivals.lock().unwrap().len();
    let disconnected = closed.load(Ordering::Relaxed);
    for h in &handles {
        h.abort();
    }
    if let Some(s) = server {
        s.stop().await;
    }
    let us = |d: Duration| d.as_micros() as u64;
    println!(
        "RESULT {}",
        json!({
            "kind": kind,
            "clients": connected,
            "disconnected": disconnected,
            "connect_ms": connect_time.as_millis() as u64,
            "rss_before": rss_before,
            "rss_after": rss_after,
            "frames_client0": frames_client0,
            "missed": missed,
            "first_p50_us": us(pct(&first_wave, 0.5)),
            "first_max_us": us(first_wave.last().copied().unwrap_or_default()),
            "p50_us": us(pct(&lags, 0.5)),
            "p99_us": us(pct(&lags, 0.99)),
            "max_us": us(lags.last().copied().unwrap_or_default()),
            "all_p50_us": us(pct(&all_received, 0.5)),
            "trigger_p50_us": us(pct(&trigger_times, 0.5)),
        })
    );
}

type BoxFuture = Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
/// Makes the change that the clients should see (the argument is the wave number).
type Trigger = Arc<dyn Fn(usize) -> BoxFuture + Send + Sync>;

async fn wait_until(mut cond: impl FnMut() -> bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while !cond() {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    true
}

fn sse_scenario() {
    println!(
        "\n# sse: {CLIENTS} concurrent HTTP/1.1 clients on one stream endpoint; each side in its own process"
    );
    let mut results = Vec::new();
    for kind in ["baseline", "woodlark"] {
        let exe = std::env::current_exe().expect("current exe");
        let out = Command::new(exe)
            .args(["__sse_child", kind])
            .output()
            .expect("run the sse child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let Some(v) = stdout
            .lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .and_then(|j| serde_json::from_str::<Value>(j).ok())
        else {
            eprintln!(
                "sse child {kind} failed ({}):\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            break;
        };
        results.push(v);
    }
    if results.len() != 2 {
        return;
    }
    let (b, w) = (&results[0], &results[1]);
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let per_client =
        |v: &Value| (f(v, "rss_after") - f(v, "rss_before")) / f(v, "clients").max(1.0);
    let kib = |x: f64| format!("{:.1}", x / 1024.0);
    let msf = |us: f64| format!("{:.2}", us / 1000.0);
    let row = |name: &str, key: &str, fmt: &dyn Fn(f64) -> String| {
        vec![
            name.to_string(),
            fmt(f(b, key)),
            fmt(f(w, key)),
            ratio(f(w, key), f(b, key)),
        ]
    };
    let plain = |x: f64| format!("{x:.0}");
    let mut rows = vec![
        row("clients connected", "clients", &plain),
        row("clients disconnected by the server", "disconnected", &plain),
        row("time to connect all (ms)", "connect_ms", &plain),
        vec![
            "RSS before clients (MiB)".into(),
            format!("{:.1}", f(b, "rss_before") / 1048576.0),
            format!("{:.1}", f(w, "rss_before") / 1048576.0),
            ratio(f(w, "rss_before"), f(b, "rss_before")),
        ],
        vec![
            "RSS with all clients (MiB)".into(),
            format!("{:.1}", f(b, "rss_after") / 1048576.0),
            format!("{:.1}", f(w, "rss_after") / 1048576.0),
            ratio(f(w, "rss_after"), f(b, "rss_after")),
        ],
        vec![
            "RSS per client, client side included (KiB)".into(),
            kib(per_client(b)),
            kib(per_client(w)),
            ratio(per_client(w), per_client(b)),
        ],
    ];
    rows.push(vec![
        "  of which above the baseline (KiB)".into(),
        "-".into(),
        kib(per_client(w) - per_client(b)),
        "-".into(),
    ]);
    rows.extend([
        row("wave 1 (cold): lag p50 (ms)", "first_p50_us", &msf),
        row("wave 1 (cold): lag max (ms)", "first_max_us", &msf),
        row(&format!("waves 2..{WAVES}: lag p50 (ms)"), "p50_us", &msf),
        row(&format!("waves 2..{WAVES}: lag p99 (ms)"), "p99_us", &msf),
        row(&format!("waves 2..{WAVES}: lag max (ms)"), "max_us", &msf),
        row(
            "median time until all clients had it (ms)",
            "all_p50_us",
            &msf,
        ),
        row("client-waves without a frame", "missed", &plain),
        row(
            "trigger round trip p50 (ms; POST reply / broadcast send)",
            "trigger_p50_us",
            &msf,
        ),
    ]);
    table(
        "sse: 1,000 concurrent stream clients, woodlark vs bare hyper broadcaster",
        &["metric", "baseline", "woodlark", "woodlark ÷ base"],
        &rows,
    );
    println!(
        "(lag = from sending the POST that changes a pipeline — or, for the baseline, from the \
         broadcast send — to the first frame read by each client; {} frames reached client 0)",
        f(w, "frames_client0")
    );
}

// ---------------------------------------------------------------------------------------------
// hooks: open-loop webhook intake

/// Sends `make()` every `1/rate` s for `secs` s without waiting for replies (open loop: a slow
/// server cannot slow the sender down); returns each request's latency and the error count.
async fn open_loop<F, Fut>(rate: u64, secs: u64, make: F) -> (Vec<Duration>, usize)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    let total = rate * secs;
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = Vec::with_capacity(total as usize);
    for _ in 0..total {
        tick.tick().await;
        let fut = make();
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            let ok = fut.await;
            (start.elapsed(), ok)
        }));
    }
    let mut lat = Vec::with_capacity(tasks.len());
    let mut errors = 0;
    for t in tasks {
        let (d, ok) = t.await.unwrap();
        lat.push(d);
        if !ok {
            errors += 1;
        }
    }
    lat.sort_unstable();
    (lat, errors)
}

/// A bare SQLite connection as the baselines use it: WAL, every commit synced.
fn durable_sqlite(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_update(None, "journal_mode", "WAL").unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn
}

/// Tables the durable-write baseline fills, one row each per commit: with an index each,
/// plus the header page, a commit writes about as many log frames as a hook's does (22–28).
const BARE_TABLES: usize = 12;

/// The durable-write baseline: SQLite alone, one transaction per request (a row into each of
/// [`BARE_TABLES`] indexed tables), WAL with `synchronous = FULL` and SQLite's default
/// checkpoint (a `PASSIVE` one in the commit that takes the log past 1,000 frames), on a
/// thread of its own that requests queue for, as they do for the server's writer. Its tail
/// is what this disk gives a commit of a hook's size at that rate, beside which the hook's
/// tail is judged. Returns a request maker for [`open_loop`] and a reader of the log frames
/// per commit so far.
fn bare_sqlite(dir: &Path) -> (impl Fn() -> BoxedCheck + use<>, impl Fn() -> f64 + use<>) {
    /// The log's length after the connection's last commit (the WAL hook takes a plain fn).
    static LOG_FRAMES: AtomicUsize = AtomicUsize::new(0);
    fn note(_: &rusqlite::hooks::Wal, frames: std::ffi::c_int) -> rusqlite::Result<()> {
        LOG_FRAMES.store(usize::try_from(frames).unwrap_or(0), Ordering::Relaxed);
        Ok(())
    }
    let conn = durable_sqlite(&dir.join("bare.db"));
    for t in 0..BARE_TABLES {
        conn.execute_batch(&format!(
            "CREATE TABLE t{t} (id INTEGER PRIMARY KEY, state INTEGER, body TEXT);
             CREATE INDEX t{t}_state ON t{t} (state, id);"
        ))
        .unwrap();
    }
    // The hook replaces SQLite's automatic checkpoint, which the loop below does as it would.
    conn.wal_hook(Some(note));
    // (frames written, commits)
    let counts = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
    let counted = counts.clone();
    let (tx, rx) = std::sync::mpsc::channel::<oneshot::Sender<bool>>();
    std::thread::spawn(move || {
        let body = "x".repeat(200);
        let mut last = 0;
        while let Ok(reply) = rx.recv() {
            let commit = || -> rusqlite::Result<()> {
                let tx = conn.unchecked_transaction()?;
                for t in 0..BARE_TABLES {
                    tx.prepare_cached(&format!("INSERT INTO t{t} (state, body) VALUES (?1, ?2)"))?
                        .execute(rusqlite::params![t % 5, body])?;
                }
                tx.commit()
            };
            let ok = commit().is_ok();
            let frames = LOG_FRAMES.load(Ordering::Relaxed);
            // A log that started over counts from its beginning.
            let written = if frames >= last {
                frames - last
            } else {
                frames
            };
            last = frames;
            counted.0.fetch_add(written, Ordering::Relaxed);
            counted.1.fetch_add(1, Ordering::Relaxed);
            if frames >= 1000 {
                let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
            }
            let _ = reply.send(ok);
        }
    });
    let send = move || {
        let (reply, answer) = oneshot::channel();
        let queued = tx.send(reply).is_ok();
        Box::pin(async move { queued && answer.await.unwrap_or(false) }) as BoxedCheck
    };
    let per_commit = move || {
        counts.0.load(Ordering::Relaxed) as f64 / counts.1.load(Ordering::Relaxed).max(1) as f64
    };
    (send, per_commit)
}

/// A request of an open loop: true when it succeeded.
type BoxedCheck = Pin<Box<dyn std::future::Future<Output = bool> + Send>>;

/// Length of one target's turn in the hooks scenario.
const HOOKS_SLICE_SECS: u64 = 5;

/// The hooks scenario's two woodlark targets.
#[derive(Clone, Copy)]
enum HookTarget {
    Git,
    Plugin,
}

/// A fake GitHub API for `octo/app` on 127.0.0.1, as much as activating the repository and
/// a push need: the repository, its webhooks (none listed; the URL of the one created is
/// kept) and the config file at any commit (a `.woodpecker/` directory is not found).
async fn fake_github_api(config: &'static str) -> (SocketAddr, Arc<Mutex<Option<String>>>) {
    let webhook = Arc::new(Mutex::new(None::<String>));
    let registered = webhook.clone();
    let addr = serve_http1(move |req: Request<hyper::body::Incoming>| {
        let registered = registered.clone();
        async move {
            let (method, path) = (req.method().clone(), req.uri().path().to_string());
            let body = req.into_body().collect().await.map(|b| b.to_bytes());
            let (status, reply) = match (method.as_str(), path.as_str()) {
                ("GET", "/repos/octo/app") => (
                    200,
                    json!({
                        "id": 42, "name": "app", "full_name": "octo/app",
                        "private": true, "owner": {"login": "octo"},
                        "html_url": "https://github.com/octo/app",
                        "clone_url": "https://github.com/octo/app.git",
                        "default_branch": "main",
                    })
                    .to_string(),
                ),
                ("GET", "/repos/octo/app/contents/.woodpecker.yaml") => (200, config.to_string()),
                ("GET", "/repos/octo/app/hooks") => (200, "[]".to_string()),
                ("POST", "/repos/octo/app/hooks") => {
                    let hook: Value = body
                        .ok()
                        .and_then(|b| serde_json::from_slice(&b).ok())
                        .unwrap_or(Value::Null);
                    *registered.lock().unwrap() =
                        hook["config"]["url"].as_str().map(str::to_string);
                    (201, "{\"id\": 1}".to_string())
                }
                _ => (404, "{\"message\": \"Not Found\"}".to_string()),
            };
            let mut resp = Response::new(BoxBody::new(Full::new(Bytes::from(reply))));
            *resp.status_mut() = StatusCode::from_u16(status).unwrap();
            resp
        }
    })
    .await;
    (addr, webhook)
}

/// The `[plugins]` tables that load the first-party GitHub adapter for forge `forge_id`,
/// talking to `api` (`plugins/build.sh` builds `plugins/dist` first if it is missing, as the
/// integration tests do).
fn github_plugin_tables(api: SocketAddr, forge_id: i64) -> String {
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins");
    let dist = plugins.join("dist");
    if !dist.join("forge-github.wasm").exists() {
        let built = Command::new("bash")
            .arg(plugins.join("build.sh"))
            .status()
            .expect("run plugins/build.sh");
        assert!(built.success(), "plugins/build.sh failed");
    }
    format!(
        "[plugins]\ndir = {:?}\nwatch = false\n\n[plugins.instances.github]\n\
         file = \"forge-github.wasm\"\nallowed_hosts = [\"http://{api}\"]\n\
         secrets = [\"forge:{forge_id}\"]\n\
         config = {{ hook-secret = \"forge:{forge_id}\", api-url = \"http://{api}\" }}\n",
        dist.canonicalize().unwrap().display().to_string()
    )
}

/// GitHub's push payload (the plugin host's fixture) for `octo/app`, and its
/// `X-Hub-Signature-256` with `secret`.
fn signed_github_push(secret: &str) -> (String, String) {
    use hmac::{Hmac, Mac};
    let mut payload: Value = serde_json::from_str(include_str!(
        "../../plugin-host/src/tests/fixtures/github-push.json"
    ))
    .unwrap();
    payload["repository"]["id"] = json!(42);
    payload["repository"]["name"] = json!("app");
    payload["repository"]["full_name"] = json!("octo/app");
    payload["repository"]["owner"]["login"] = json!("octo");
    payload["repository"]["owner"]["name"] = json!("octo");
    let body = payload.to_string();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    let hex = woodlark_git::hex(&mac.finalize().into_bytes());
    (body, format!("sha256={hex}"))
}

async fn hooks_scenario() {
    let rate: u64 = std::env::var("WOODLARK_HOOKS_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let secs: u64 = std::env::var("WOODLARK_HOOKS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    println!(
        "\n# hooks: open loop, {rate} push hooks/s for {secs} s per target in {} s turns (git forge and GitHub plugin forge, storage.synchronous = full, no runner): hook sent → pipeline queued",
        secs.min(HOOKS_SLICE_SECS)
    );
    let (feed, _) = broadcast::channel(16);
    let base_addr = baseline_server(feed).await;
    let extra = std::env::var("WOODLARK_HOOKS_CONFIG").unwrap_or_default();
    if !extra.is_empty() {
        println!("extra configuration: {extra:?}");
    }
    // The git forge is forge 1 (repository 1); the GitHub plugin forge is forge 2.
    let (github_api, github_webhook) = fake_github_api(ECHO).await;
    let tables = format!("{}{extra}", github_plugin_tables(github_api, 2));
    let server = Server::start_with(false, &tables).await;
    let admin = server.user("root", true).await;
    let alice = server.user("alice", false).await;
    let (_, bare) = server
        .git_repo(&admin, &alice, "alice/hook", &[(".woodpecker.yaml", ECHO)])
        .await;
    let github = server
        .api
        .expect(
            "POST",
            "/api/forges",
            Some(&admin),
            Some(r#"{"type":"github","url":"https://github.com","oauth_client_secret":"gh-api-token","additional_options":{"plugin":"github"}}"#),
            200,
        )
        .await;
    assert_eq!(github["id"], 2, "the GitHub forge's id (its secret's name)");
    server
        .api
        .expect(
            "POST",
            "/api/repos?forge_remote_id=octo/app&forge_id=2",
            Some(&admin),
            Some(""),
            200,
        )
        .await;
    let (github_body, github_sig) =
        signed_github_push(github["webhook_secret"].as_str().expect("webhook secret"));
    // Deliveries go where activation registered the webhook (its URL names the forge).
    let github_path = {
        let url = github_webhook
            .lock()
            .unwrap()
            .clone()
            .expect("webhook created");
        url[url.find("/api/hook").expect("hook URL")..].to_string()
    };
    let github_hook = {
        let api = Arc::new(Api::new(server.api.addr));
        let (path, body, sig) = (
            Arc::new(github_path),
            Arc::new(github_body),
            Arc::new(github_sig),
        );
        move || {
            let (api, path, body, sig) = (api.clone(), path.clone(), body.clone(), sig.clone());
            async move {
                let headers = [("x-github-event", "push"), ("x-hub-signature-256", &**sig)];
                let (status, _) = api
                    .send_with("POST", &path, None, Some(&body), &headers)
                    .await;
                status == StatusCode::OK
            }
        }
    };
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
    let sha = git(&bare, &["rev-parse", "main"]).trim().to_string();
    let body = format!("{} {sha} refs/heads/main\n", "0".repeat(40));

    let run = |api: Api, path: String| {
        let (api, path, body) = (Arc::new(api), Arc::new(path), Arc::new(body.clone()));
        move || {
            let (api, path, body) = (api.clone(), path.clone(), body.clone());
            async move {
                let (status, _) = api.send("POST", &path, None, Some(&body)).await;
                status == StatusCode::OK
            }
        }
    };
    // Warm-up (first git spawn, statement caches), then the measured runs.
    let (_, warm_errors) = open_loop(50, 1, run(Api::new(server.api.addr), path.clone())).await;
    assert_eq!(warm_errors, 0, "warm-up hooks failed");
    let (_, warm_errors) = open_loop(50, 1, &github_hook).await;
    assert_eq!(warm_errors, 0, "warm-up GitHub hooks failed");
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    // The targets take turns, a slice each, so that each sees the machine's fast and slow
    // stretches (its disk's too) alike instead of one of them getting a stall alone.
    let slice = secs.min(HOOKS_SLICE_SECS);
    let rounds = (secs / slice).max(1);
    let bare_dir = tempfile::tempdir().unwrap();
    let (bare_commit, bare_frames) = bare_sqlite(bare_dir.path());
    let hyper_hook = run(Api::new(base_addr), path.clone());
    let woodlark_hook = run(Api::new(server.api.addr), path.clone());
    let (mut base, mut base_errors, mut base_cpu) = (Vec::new(), 0, Duration::ZERO);
    let (mut durable, mut durable_errors, mut durable_cpu) = (Vec::new(), 0, Duration::ZERO);
    let (mut lat, mut errors) = (Vec::new(), 0);
    let (mut server_cpu, mut git_cpu) = (Duration::ZERO, Duration::ZERO);
    let mut by_thread = std::collections::BTreeMap::<String, Duration>::new();
    let mut catch_ups = 0;
    let mut recompiled = 0;
    let (mut plugin_lat, mut plugin_errors, mut plugin_cpu) = (Vec::new(), 0, Duration::ZERO);
    // Both server targets' latencies by their place in the round (first, second).
    let mut by_place: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let before = cpu_time();
        let (l, e) = open_loop(rate, slice, &hyper_hook).await;
        base_cpu += cpu_time().saturating_sub(before);
        base.extend(l);
        base_errors += e;

        let before = cpu_time();
        let (l, e) = open_loop(rate, slice, &bare_commit).await;
        durable_cpu += cpu_time().saturating_sub(before);
        durable.extend(l);
        durable_errors += e;

        // The server's two targets swap places every round: the second inherits the first's
        // unfinished checkpoint work and dirty pages, the first a rested disk.
        let order = if round % 2 == 0 {
            [HookTarget::Git, HookTarget::Plugin]
        } else {
            [HookTarget::Plugin, HookTarget::Git]
        };
        for (place, target) in order.into_iter().enumerate() {
            match target {
                HookTarget::Git => {
                    let before = (cpu_time(), children_cpu_time(), thread_cpu_times());
                    let caught_up = server.state.ci.store.writer_catch_ups();
                    let missed = server.state.ci.numbers.misses();
                    let (l, e) = open_loop(rate, slice, &woodlark_hook).await;
                    catch_ups += server.state.ci.store.writer_catch_ups() - caught_up;
                    recompiled += server.state.ci.numbers.misses() - missed;
                    server_cpu += cpu_time().saturating_sub(before.0);
                    git_cpu += children_cpu_time().saturating_sub(before.1);
                    for (name, after) in thread_cpu_times() {
                        let spent =
                            after.saturating_sub(before.2.get(&name).copied().unwrap_or_default());
                        *by_thread.entry(name).or_default() += spent;
                    }
                    by_place[place].extend(&l);
                    lat.extend(l);
                    errors += e;
                }
                HookTarget::Plugin => {
                    let before = cpu_time();
                    let (l, e) = open_loop(rate, slice, &github_hook).await;
                    plugin_cpu += cpu_time().saturating_sub(before);
                    by_place[place].extend(&l);
                    plugin_lat.extend(l);
                    plugin_errors += e;
                }
            }
        }
    }
    for l in [&mut base, &mut durable, &mut lat, &mut plugin_lat] {
        l.sort_unstable();
    }
    for l in &mut by_place {
        l.sort_unstable();
    }
    let stored = server
        .api
        .expect(
            "GET",
            "/api/repos/1/pipelines?perPage=1",
            Some(&alice),
            None,
            200,
        )
        .await;
    let github_stored = server
        .api
        .expect(
            "GET",
            "/api/repos/2/pipelines?perPage=1",
            Some(&admin),
            None,
            200,
        )
        .await;
    server.stop().await;
    let row = |name: &str, lat: &[Duration], errors: usize| {
        vec![
            name.to_string(),
            lat.len().to_string(),
            errors.to_string(),
            ms(pct(lat, 0.50)),
            ms(pct(lat, 0.99)),
            ms(pct(lat, 0.999)),
            ms(*lat.last().unwrap_or(&Duration::ZERO)),
        ]
    };
    table(
        "hook intake (open loop)",
        &["target", "requests", "errors", "p50", "p99", "p99.9", "max"],
        &[
            row("bare hyper (same POST)", &base, base_errors),
            row(
                &format!(
                    "bare SQLite commit ({:.0} frames, full sync)",
                    bare_frames()
                ),
                &durable,
                durable_errors,
            ),
            row("woodlark /api/hook → pipeline queued", &lat, errors),
            row(
                "woodlark /api/hook, GitHub plugin → pipeline queued",
                &plugin_lat,
                plugin_errors,
            ),
        ],
    );
    let p99 = |lat: &[Duration]| pct(lat, 0.99).as_secs_f64();
    println!(
        "p99 ratio vs bare hyper: {}, vs bare SQLite commit: {}; newest pipeline number {}; \
         load average before: {}",
        ratio(p99(&lat), p99(&base)),
        ratio(p99(&lat), p99(&durable)),
        stored[0]["number"],
        load_before.trim()
    );
    let per_hook = |d: Duration| ms(d / (lat.len().max(1) as u32));
    println!(
        "CPU per hook: {} ms in the bench process (server and client; the client and bare \
         hyper together take {}, the bare SQLite commit and its caller {}), {} ms in git",
        per_hook(server_cpu),
        per_hook(base_cpu),
        per_hook(durable_cpu),
        per_hook(git_cpu),
    );
    // The store's writer is the one thread every hook goes through in turn: its CPU per
    // hook is the steadiest figure of this scenario on a machine whose speed wanders.
    let by_thread: Vec<String> = by_thread
        .iter()
        .filter(|(_, spent)| **spent > Duration::ZERO)
        .map(|(name, spent)| format!("{name} {}", per_hook(*spent)))
        .collect();
    println!("CPU per hook by thread (ms): {}", by_thread.join(", "));
    // Each one held up the jobs queued behind it for a sync of the database file.
    println!("checkpoints the store's writer had to finish itself: {catch_ups}");
    println!("pipelines compiled again in the write (number guessed wrong): {recompiled}");
    println!(
        "GitHub plugin forge (parse-hook and the config fetched from a local fake API through \
         the plugin): p99 ratio vs bare hyper: {}, vs bare SQLite commit: {}; CPU per hook {} ms \
         (server, client and the fake API); newest pipeline number {}",
        ratio(p99(&plugin_lat), p99(&base)),
        ratio(p99(&plugin_lat), p99(&durable)),
        ms(plugin_cpu / (plugin_lat.len().max(1) as u32)),
        github_stored[0]["number"],
    );
    let place = |l: &[Duration]| {
        format!(
            "p50 {} / p99 {} / p99.9 {} ms",
            ms(pct(l, 0.50)),
            ms(pct(l, 0.99)),
            ms(pct(l, 0.999))
        )
    };
    println!(
        "both server targets by their place in the round (they swap every round): first {}, second {}",
        place(&by_place[0]),
        place(&by_place[1])
    );
}

// ---------------------------------------------------------------------------------------------
// rss

/// CPU time (user + system) of this process's child processes that are still running (the
/// forge's long-lived `git cat-file` sessions; `RUSAGE_CHILDREN` counts only waited-for ones).
fn children_cpu_time() -> Duration {
    let me = i64::from(std::process::id());
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|s| ProcStat::parse(&s))
        .filter(|stat| stat.ppid == me)
        .map(|stat| stat.cpu)
        .sum()
}

/// Resident set size of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .unwrap_or(0)
}

/// How often process `pid` has been woken so far (context switches of all its threads) and
/// the CPU time it has used.
fn wakeups_and_cpu(pid: u32) -> (u64, Duration) {
    let switches = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| {
                    l.starts_with("voluntary_ctxt_switches:")
                        || l.starts_with("nonvoluntary_ctxt_switches:")
                })
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum();
    let cpu = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| ProcStat::parse(&s))
        .map_or(Duration::ZERO, |stat| stat.cpu);
    (switches, cpu)
}

/// Wake-ups per second and CPU milliseconds per minute of process `pid` over `span`, doing
/// nothing.
async fn idle_activity(pid: u32, span: Duration) -> (f64, f64) {
    let (w0, c0) = wakeups_and_cpu(pid);
    tokio::time::sleep(span).await;
    let (w1, c1) = wakeups_and_cpu(pid);
    let secs = span.as_secs_f64();
    (
        (w1 - w0) as f64 / secs,
        (c1 - c0).as_secs_f64() * 1000.0 * 60.0 / secs,
    )
}

/// How long the `rss` scenario watches each idle process.
const IDLE_SPAN: Duration = Duration::from_secs(20);

/// Starts `woodlark serve` on the repository's `config.toml` with `env`, waits until `addr`
/// answers and the server has settled (plugins loaded, runner registered).
async fn start_woodlark(env: &[(&str, String)], addr: SocketAddr) -> std::process::Child {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let child = Command::new(env!("CARGO_BIN_EXE_woodlark"))
        .current_dir(&root)
        .args(["serve", "--config", "config.toml"])
        .envs(env.iter().cloned())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("woodlark serve");
    let up = Instant::now();
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(
            up.elapsed() < Duration::from_secs(60),
            "server did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    child
}

async fn rss_scenario() {
    const REQUESTS: usize = 10_000;
    println!("\n# rss: the woodlark binary on config.toml, idle and after {REQUESTS} requests");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bin = env!("CARGO_BIN_EXE_woodlark");
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
    let add = Command::new(bin)
        .current_dir(&root)
        .args(["user", "add", "bench", "--admin", "--config", "config.toml"])
        .envs(env.iter().cloned())
        .output()
        .expect("woodlark user add");
    assert!(
        add.status.success(),
        "{}",
        String::from_utf8_lossy(&add.stderr)
    );
    let token = String::from_utf8_lossy(&add.stdout).trim().to_string();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let serve = || start_woodlark(&env, addr);
    // First start: every plugin is compiled (and written to the compiled-code cache).
    let mut child = serve().await;
    let cold = rss_kib(child.id());
    let _ = child.kill();
    let _ = child.wait();
    // Every later start loads compiled code from the cache.
    let mut child = serve().await;
    let idle = rss_kib(child.id());
    let (idle_wakeups, idle_cpu) = idle_activity(child.id(), IDLE_SPAN).await;
    for path in [
        "/api/user",
        "/api/repos",
        "/api/user/repos",
        "/events?limit=20",
    ] {
        let r = load(
            addr,
            path,
            Some(&token),
            16,
            Duration::from_secs(30),
            REQUESTS / 4,
        )
        .await;
        assert_eq!(r.errors, 0, "{path}");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = rss_kib(child.id());
    let _ = child.kill();
    let _ = child.wait();

    // The baseline: this binary's bare hyper server, alone in a process.
    let base = Command::new(std::env::current_exe().unwrap())
        .arg("__rss_baseline")
        .output()
        .ok()
        .and_then(|o| {
            let out = String::from_utf8_lossy(&o.stdout).to_string();
            let mut fields = out.split_whitespace();
            Some((
                fields.next()?.parse::<u64>().ok()?,
                fields.next()?.parse::<f64>().ok()?,
                fields.next()?.parse::<f64>().ok()?,
            ))
        });
    let mb = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);
    let mut rows = vec![
        vec![
            "woodlark idle, first start (compiles the plugins)".to_string(),
            mb(cold),
        ],
        vec![
            "woodlark idle, restart (compiled-code cache)".to_string(),
            mb(idle),
        ],
    ];
    rows.push(vec![
        format!("woodlark after {REQUESTS} requests (restart)"),
        mb(after),
    ]);
    rows.push(vec!["growth".to_string(), mb(after.saturating_sub(idle))]);
    if let Some((base, ..)) = base {
        rows.push(vec![
            "baseline: bare hyper process, idle".to_string(),
            mb(base),
        ]);
    }
    table("rss: resident memory (MB)", &["process", "RSS MB"], &rows);
    let mut rows = vec![vec![
        "woodlark idle, restart (plugins loaded, local runner)".to_string(),
        format!("{idle_wakeups:.1}"),
        format!("{idle_cpu:.0}"),
    ]];
    if let Some((_, wakeups, cpu)) = base {
        rows.push(vec![
            "baseline: bare hyper process, idle".to_string(),
            format!("{wakeups:.1}"),
            format!("{cpu:.0}"),
        ]);
    }
    table(
        &format!("idle: doing nothing for {} s", IDLE_SPAN.as_secs()),
        &["process", "wake-ups/s", "CPU ms/min"],
        &rows,
    );
}

// ---------------------------------------------------------------------------------------------
// flood

/// Connections the `flood` scenario opens (fewer when this process's open-file limit is lower).
const FLOOD_CONNECTIONS: usize = 20_000;
/// Connection attempts in flight at once.
const FLOOD_PARALLEL: usize = 256;

/// What became of one flood connection.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum FloodOutcome {
    /// Answered 200.
    Served,
    /// Still open without an answer (an idle connection the server admitted).
    Held,
    /// Answered 503 and closed: the clean refusal.
    Refused,
    /// Closed by the server without an answer.
    ClosedUnanswered,
    /// Connect, write or read failed (timeout, reset).
    Errored,
}

/// Opens one flood connection; odd ones send a request. Returns the stream to hold, if any.
async fn flood_connect(addr: SocketAddr, request: bool) -> Option<TcpStream> {
    let mut stream = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    if request
        && stream
            .write_all(b"GET /version HTTP/1.1\r\nHost: flood\r\n\r\n")
            .await
            .is_err()
    {
        return None;
    }
    Some(stream)
}

/// What a held connection has received so far, without waiting.
fn flood_outcome(stream: &TcpStream) -> FloodOutcome {
    let mut buf = [0u8; 512];
    match stream.try_read(&mut buf) {
        Ok(0) => FloodOutcome::ClosedUnanswered,
        Ok(n) if buf[..n].starts_with(b"HTTP/1.1 200") => FloodOutcome::Served,
        Ok(n) if buf[..n].starts_with(b"HTTP/1.1 503") => FloodOutcome::Refused,
        Ok(_) => FloodOutcome::Errored,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => FloodOutcome::Held,
        Err(_) => FloodOutcome::Errored,
    }
}

async fn flood_scenario() {
    let client_fds = {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit fills the struct it is given.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
        lim.rlim_cur as usize
    };
    let n = FLOOD_CONNECTIONS.min(client_fds.saturating_sub(512));
    println!(
        "\n# flood: {n} connections to the woodlark binary on config.toml (half idle, half GET /version), held 5 s, closed"
    );
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
    let mut child = start_woodlark(&env, addr).await;
    let pid = child.id();
    let before = rss_kib(pid);

    // The peak is sampled while the flood runs.
    let peak = Arc::new(AtomicUsize::new(before as usize));
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid) as usize, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let opening = Instant::now();
    let mut held = Vec::with_capacity(n);
    let mut connect_errors = 0usize;
    let mut pending = tokio::task::JoinSet::new();
    for i in 0..n {
        if pending.len() >= FLOOD_PARALLEL
            && let Some(done) = pending.join_next().await
        {
            match done.ok().flatten() {
                Some(stream) => held.push(stream),
                None => connect_errors += 1,
            }
        }
        pending.spawn(flood_connect(addr, i % 2 == 1));
    }
    while let Some(done) = pending.join_next().await {
        match done.ok().flatten() {
            Some(stream) => held.push(stream),
            None => connect_errors += 1,
        }
    }
    let opened_in = opening.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut outcomes = std::collections::BTreeMap::<FloodOutcome, usize>::new();
    for stream in &held {
        *outcomes.entry(flood_outcome(stream)).or_default() += 1;
    }
    *outcomes.entry(FloodOutcome::Errored).or_default() += connect_errors;
    let held_at_end = outcomes.get(&FloodOutcome::Held).copied().unwrap_or(0);
    drop(held);
    tokio::time::sleep(Duration::from_secs(1)).await;
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.await;
    let peak = peak.load(Ordering::Relaxed) as u64;

    let metrics = Api::new(addr).send("GET", "/metrics", None, None).await.1;
    let metric = |name: &str| {
        String::from_utf8_lossy(&metrics)
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")).map(str::to_string))
            .unwrap_or_else(|| "-".into())
    };

    let mut samples = Vec::new();
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        samples.push(rss_kib(pid));
    }
    let _ = child.kill();
    let _ = child.wait();

    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|(outcome, count)| vec![format!("{outcome:?}"), count.to_string()])
        .collect();
    table(
        &format!(
            "flood: outcome of {n} connections (opened in {:.1} s; held {held_at_end} at the end of the hold)",
            opened_in.as_secs_f64()
        ),
        &["outcome", "connections"],
        &rows,
    );
    println!(
        "server's metrics after the flood: woodlark_http_connections_max {}, woodlark_http_connections_refused_total {}, woodlark_http_connections_open {}",
        metric("woodlark_http_connections_max"),
        metric("woodlark_http_connections_refused_total"),
        metric("woodlark_http_connections_open"),
    );
    let mb = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);
    let mut rows = vec![
        vec![
            "before the flood (idle)".to_string(),
            mb(before),
            String::new(),
        ],
        vec![
            "peak (during the flood)".to_string(),
            mb(peak),
            mb(peak.saturating_sub(before)),
        ],
    ];
    for (i, kib) in samples.iter().enumerate() {
        rows.push(vec![
            format!("{} s after closing", (i + 1) * 5),
            mb(*kib),
            mb(kib.saturating_sub(before)),
        ]);
    }
    table(
        "flood: server RSS (MB)",
        &["when", "RSS MB", "above before"],
        &rows,
    );
    let last = samples.last().copied().unwrap_or(0);
    println!(
        "60 s after: {} MB above the pre-flood RSS (goal: within 50 MB)",
        mb(last.saturating_sub(before))
    );
}
