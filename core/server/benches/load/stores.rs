//! `stores`: the server on SQLite, on PostgreSQL, and as two replicas on one PostgreSQL
//! database (issue 36), measured side by side in one run: push hooks/s and authenticated
//! reads/s.
//!
//! Three configurations, each started fresh: the default SQLite store (`synchronous =
//! FULL`); one server with `[storage] url` on a fresh database of the test cluster
//! ([`woodlark_store::pg::testing::Cluster`]); two servers (data dirs of their own, one
//! `storage.secret_key_file`) on another fresh database, the load spread across both.
//! - **Hooks:** the git forge's post-receive hook (`POST /api/hook/…`, as [`crate::hooks`]
//!   sends it; no runner: the pipeline stored and queued), a closed loop of 8 senders (the
//!   replicas' senders alternate between them), 15 s per configuration in 5 s turns;
//! - **Reads:** `GET /api/user` and a repository's pipeline list (`perPage=5`) with a user's
//!   token, 16 keep-alive connections in a closed loop ([`crate::client::load`]; 8 on each
//!   replica), 2 s per turn. No write runs meanwhile, so after its first request each read
//!   is answered from the server's caches (the account and the rendered page, kept while
//!   the store's generations stand): these rows measure the read path above the store.
//!
//! **Baselines, same run:** a bare PostgreSQL commit on the same cluster
//! ([`crate::baseline::bare_postgres`]) and a bare SQLite commit with full sync
//! ([`crate::baseline::bare_sqlite`]), the same 12-row transaction per request, driven by
//! the same closed loop of senders. Every target takes its turn in every round (the server
//! configurations in a rotating order), so each sees the machine's fast and slow stretches.
//!
//! **Caveat:** the test cluster runs with `fsync = off`, `synchronous_commit = off` and
//! `full_page_writes = off` (it is thrown away): its commits never wait for the disk, where
//! SQLite's wait for an `fdatasync`. PostgreSQL against its own bare commit is a fair ratio;
//! PostgreSQL against SQLite flatters PostgreSQL's writes.
//!
//! `WOODLARK_STORES_SECS` (hook seconds per target), `WOODLARK_STORES_SENDERS` and
//! `WOODLARK_STORES_READ_SECS` (read seconds per target and turn) change the load.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hyper::StatusCode;

use crate::baseline::{bare_postgres, bare_sqlite};
use crate::client::{BoxedCheck, LoadResult, gather, load};
use crate::report::{ms, pct, ratio, table};
use crate::server::{Api, ECHO, Server, post_receive_hook};

/// Length of one hook turn.
const SLICE_SECS: u64 = 5;
/// Connections of the read rows (split evenly between replicas).
const READ_CONNS: usize = 16;

/// A request of a closed loop, given its sender's number.
type Sender = Arc<dyn Fn(usize) -> BoxedCheck + Send + Sync>;

/// One configuration of the server under test.
struct Setup {
    name: &'static str,
    servers: Vec<Server>,
    /// The repository's owner's token, and the read paths.
    token: String,
    pipelines: String,
    hook: Sender,
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A fresh database of the shared test cluster (started on first use), on a plain thread:
/// the blocking client cannot run on a runtime's.
pub fn fresh_database() -> String {
    std::thread::spawn(|| woodlark_store::pg::testing::Cluster::shared().fresh_database())
        .join()
        .expect("a fresh PostgreSQL database")
}

/// Starts `count` servers on `tables` (their own data dirs), a user, the git forge and a
/// repository with a pipeline config on the first; the hook goes to the servers in turn.
async fn setup(name: &'static str, count: usize, tables: &str) -> Setup {
    let mut servers = Vec::new();
    for _ in 0..count {
        servers.push(Server::start_with(false, tables).await);
    }
    let first = &servers[0];
    let admin = first.user("root", true).await;
    let token = first.user("alice", false).await;
    let (repo, bare) = first
        .pipeline_repo(&admin, &token, "alice/hook", ECHO)
        .await;
    let (path, body) = post_receive_hook(&bare);
    let apis: Vec<Api> = servers.iter().map(|s| Api::new(s.api.addr)).collect();
    let (path, body) = (Arc::new(path), Arc::new(body));
    let hook: Sender = Arc::new(move |i| {
        let api = apis[i % apis.len()].clone();
        let (path, body) = (path.clone(), body.clone());
        Box::pin(async move {
            let (status, _) = api.send("POST", &path, None, Some(&body)).await;
            status == StatusCode::OK
        })
    });
    Setup {
        name,
        servers,
        token,
        pipelines: format!("/api/repos/{repo}/pipelines?perPage=5"),
        hook,
    }
}

/// `senders` tasks, each sending `make(its number)` and waiting for the answer before the
/// next, for `duration` or `max` requests in all.
async fn closed_loop(senders: usize, duration: Duration, max: usize, make: &Sender) -> LoadResult {
    let issued = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..senders)
        .map(|i| {
            let (make, issued) = (make.clone(), issued.clone());
            tokio::spawn(async move {
                let (mut lat, mut errors) = (Vec::new(), 0);
                while Instant::now() < deadline && issued.fetch_add(1, Ordering::Relaxed) < max {
                    let t0 = Instant::now();
                    if make(i).await {
                        lat.push(t0.elapsed());
                    } else {
                        errors += 1;
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    gather(tasks, started).await
}

/// Reads of `path` with `token` spread over `addrs` at once, [`READ_CONNS`] connections in
/// all, as one result.
async fn reads(addrs: &[SocketAddr], path: &str, token: &str, duration: Duration) -> LoadResult {
    let conns = READ_CONNS / addrs.len();
    let runs: Vec<_> = addrs
        .iter()
        .map(|&a| {
            let (path, token) = (path.to_string(), token.to_string());
            tokio::spawn(
                async move { load(a, &path, Some(&token), conns, duration, 200_000).await },
            )
        })
        .collect();
    let mut total = LoadResult::empty();
    for r in runs {
        let r = r.await.unwrap();
        total.requests += r.requests;
        total.errors += r.errors;
        total.elapsed = total.elapsed.max(r.elapsed);
        total.lat.extend(r.lat);
    }
    total
}

/// The newest pipeline's number in the configuration's repository.
async fn newest_pipeline(s: &Setup) -> i64 {
    let path = s.pipelines.replace("perPage=5", "perPage=1");
    s.servers[0]
        .api
        .expect("GET", &path, Some(&s.token), None, 200)
        .await[0]["number"]
        .as_i64()
        .unwrap_or(0)
}

pub async fn run() {
    let secs = env_or("WOODLARK_STORES_SECS", 15);
    let senders = env_or("WOODLARK_STORES_SENDERS", 8) as usize;
    let read_secs = env_or("WOODLARK_STORES_READ_SECS", 2);
    let slice = secs.clamp(1, SLICE_SECS);
    let rounds = (secs / slice).max(1);
    println!(
        "\n# stores: SQLite, PostgreSQL, two replicas on one PostgreSQL: push hooks (git forge, \
         no runner) in a closed loop of {senders} senders for {secs} s per target in {slice} s \
         turns; authenticated reads on {READ_CONNS} connections for {} s per row in {read_secs} s turns",
        rounds * read_secs
    );
    println!(
        "PostgreSQL is the test cluster: fsync = off, synchronous_commit = off, \
         full_page_writes = off (no commit waits for the disk; SQLite's wait for an fdatasync)"
    );
    let pg_url = fresh_database();
    let replicas_url = fresh_database();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("shared.key").display().to_string();
    let setups = [
        setup("SQLite", 1, "").await,
        setup("PostgreSQL", 1, &format!("[storage]\nurl = {pg_url:?}\n")).await,
        setup(
            "2 replicas, one PostgreSQL",
            2,
            &format!("[storage]\nurl = {replicas_url:?}\nsecret_key_file = {key:?}\n"),
        )
        .await,
    ];
    let bare_pg: Sender = {
        let commit = bare_postgres(&fresh_database());
        Arc::new(move |_| commit())
    };
    let bare_dir = tempfile::tempdir().unwrap();
    let bare_lite: Sender = {
        let (commit, _) = bare_sqlite(bare_dir.path());
        Arc::new(move |_| commit())
    };
    let read_paths = |s: &Setup| {
        [
            ("GET /api/user".to_string(), "/api/user".to_string()),
            ("GET …/pipelines?perPage=5".to_string(), s.pipelines.clone()),
        ]
    };

    // Warm-up: connections, statement caches, the first git reads; the repositories get
    // more than a page of pipelines.
    let warm = Duration::from_secs(1);
    for target in [&bare_pg, &bare_lite] {
        let r = closed_loop(senders, warm, 100_000, target).await;
        assert_eq!(r.errors, 0, "warm-up commits failed");
    }
    let mut warm_hooks = Vec::new();
    for s in &setups {
        let r = closed_loop(senders, warm, 100_000, &s.hook).await;
        assert_eq!(r.errors, 0, "{}: warm-up hooks failed", s.name);
        warm_hooks.push(r.requests);
        let addrs: Vec<SocketAddr> = s.servers.iter().map(|s| s.api.addr).collect();
        for (_, path) in read_paths(s) {
            reads(&addrs, &path, &s.token, Duration::from_millis(300)).await;
        }
    }
    let misses_before: Vec<Vec<u64>> = setups
        .iter()
        .map(|s| {
            s.servers
                .iter()
                .map(|v| v.state.ci.numbers.misses())
                .collect()
        })
        .collect();
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();

    let (mut pg_commits, mut lite_commits) = (LoadResult::empty(), LoadResult::empty());
    let mut hooks: Vec<LoadResult> = setups.iter().map(|_| LoadResult::empty()).collect();
    // [setup][path]
    let mut read_rows: Vec<[LoadResult; 2]> = setups
        .iter()
        .map(|_| [LoadResult::empty(), LoadResult::empty()])
        .collect();
    let hook_turn = Duration::from_secs(slice);
    let read_turn = Duration::from_secs(read_secs);
    for round in 0..rounds as usize {
        pg_commits.add(closed_loop(senders, hook_turn, 1_000_000, &bare_pg).await);
        lite_commits.add(closed_loop(senders, hook_turn, 1_000_000, &bare_lite).await);
        for k in 0..setups.len() {
            let i = (round + k) % setups.len();
            let s = &setups[i];
            hooks[i].add(closed_loop(senders, hook_turn, 1_000_000, &s.hook).await);
            let addrs: Vec<SocketAddr> = s.servers.iter().map(|s| s.api.addr).collect();
            for (j, (_, path)) in read_paths(s).into_iter().enumerate() {
                read_rows[i][j].add(reads(&addrs, &path, &s.token, read_turn).await);
            }
        }
    }
    for r in [&mut pg_commits, &mut lite_commits]
        .into_iter()
        .chain(hooks.iter_mut())
        .chain(read_rows.iter_mut().flatten())
    {
        r.lat.sort_unstable();
    }
    let mut newest = Vec::new();
    let mut misses = Vec::new();
    for (s, before) in setups.iter().zip(&misses_before) {
        newest.push(newest_pipeline(s).await);
        misses.push(
            s.servers
                .iter()
                .zip(before)
                .map(|(v, b)| (v.state.ci.numbers.misses() - b).to_string())
                .collect::<Vec<_>>()
                .join(" + "),
        );
    }
    let read_names: Vec<String> = read_paths(&setups[0]).into_iter().map(|(n, _)| n).collect();
    for s in setups {
        for server in s.servers {
            server.stop().await;
        }
    }

    let p99 = |r: &LoadResult| pct(&r.lat, 0.99).as_secs_f64();
    let (lite, pg, two) = (0, 1, 2);
    let row = |name: String,
               r: &LoadResult,
               vs_sqlite: Option<&LoadResult>,
               vs_pg: Option<&LoadResult>,
               vs_bare: Option<&LoadResult>| {
        let or_dash = |o: Option<String>| o.unwrap_or_else(|| "-".into());
        vec![
            name,
            r.requests.to_string(),
            r.errors.to_string(),
            format!("{:.0}", r.rps()),
            ms(pct(&r.lat, 0.50)),
            ms(pct(&r.lat, 0.99)),
            or_dash(vs_sqlite.map(|b| ratio(r.rps(), b.rps()))),
            or_dash(vs_pg.map(|b| ratio(r.rps(), b.rps()))),
            or_dash(vs_bare.map(|b| ratio(p99(r), p99(b)))),
        ]
    };
    let mut rows = vec![
        row(
            format!("bare PostgreSQL commit ({senders} senders)"),
            &pg_commits,
            None,
            None,
            None,
        ),
        row(
            format!("bare SQLite commit, full sync ({senders} senders)"),
            &lite_commits,
            None,
            None,
            None,
        ),
        row(
            format!("hooks: {}", "SQLite"),
            &hooks[lite],
            None,
            None,
            Some(&lite_commits),
        ),
        row(
            format!("hooks: {}", "PostgreSQL"),
            &hooks[pg],
            Some(&hooks[lite]),
            None,
            Some(&pg_commits),
        ),
        row(
            "hooks: 2 replicas, one PostgreSQL".into(),
            &hooks[two],
            Some(&hooks[lite]),
            Some(&hooks[pg]),
            Some(&pg_commits),
        ),
    ];
    for (j, name) in read_names.iter().enumerate() {
        rows.push(row(
            format!("{name}: SQLite"),
            &read_rows[lite][j],
            None,
            None,
            None,
        ));
        rows.push(row(
            format!("{name}: PostgreSQL"),
            &read_rows[pg][j],
            Some(&read_rows[lite][j]),
            None,
            None,
        ));
        rows.push(row(
            format!("{name}: 2 replicas"),
            &read_rows[two][j],
            Some(&read_rows[lite][j]),
            Some(&read_rows[pg][j]),
            None,
        ));
    }
    table(
        "stores: SQLite vs PostgreSQL vs two replicas (closed loops)",
        &[
            "target",
            "requests",
            "errors",
            "/s",
            "p50 ms",
            "p99 ms",
            "/s ÷ SQLite",
            "/s ÷ one PG",
            "p99 ÷ bare commit",
        ],
        &rows,
    );
    let goal = |v: f64, ok: bool| format!("{v:.2}x ({})", if ok { "met" } else { "not met" });
    let hook_vs_bare = p99(&hooks[pg]) / p99(&pg_commits).max(f64::MIN_POSITIVE);
    println!(
        "goal hook p99 ÷ bare PostgreSQL commit p99 ≤ 2x: one server {}, two replicas {} \
         (SQLite: hook p99 ÷ bare SQLite commit p99 {})",
        goal(hook_vs_bare, hook_vs_bare <= 2.0),
        ratio(p99(&hooks[two]), p99(&pg_commits)),
        ratio(p99(&hooks[lite]), p99(&lite_commits)),
    );
    let reads_vs: Vec<String> = read_names
        .iter()
        .enumerate()
        .map(|(j, name)| {
            let v = read_rows[pg][j].rps() / read_rows[lite][j].rps().max(f64::MIN_POSITIVE);
            format!("{name} {}", goal(v, v >= 0.5))
        })
        .collect();
    println!(
        "goal PostgreSQL reads ÷ SQLite reads ≥ 0.5x: {}",
        reads_vs.join(", ")
    );
    println!(
        "two replicas ÷ one PostgreSQL server: hooks/s {}, hook p99 {}; {}",
        ratio(hooks[two].rps(), hooks[pg].rps()),
        ratio(p99(&hooks[two]), p99(&hooks[pg])),
        read_names
            .iter()
            .enumerate()
            .map(|(j, name)| format!(
                "{name} req/s {}, p99 {}",
                ratio(read_rows[two][j].rps(), read_rows[pg][j].rps()),
                ratio(p99(&read_rows[two][j]), p99(&read_rows[pg][j]))
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let names = ["SQLite", "PostgreSQL", "2 replicas"];
    let stored: Vec<String> = (0..3)
        .map(|i| {
            format!(
                "{} {} answered, newest pipeline {}, numbers guessed wrong {}",
                names[i],
                warm_hooks[i] + hooks[i].requests,
                newest[i],
                misses[i]
            )
        })
        .collect();
    println!(
        "hooks answered 200 (warm-up included) and pipelines stored: {}",
        stored.join("; ")
    );
    println!("load average before: {}", load_before.trim());
}
