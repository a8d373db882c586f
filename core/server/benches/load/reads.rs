//! `reads`: what the hot authenticated reads cost beyond sending their bytes, and what
//! PostgreSQL costs against SQLite for a page no cache holds (issue 50).
//!
//! Two figures, each a ratio taken in one run:
//! - **Against the same bytes.** For each hot read (`/api/user`, a repository, its pipeline
//!   list, a pipeline with its steps, a page of `/events`), the response is fetched once
//!   from the SQLite server and a bare hyper server is started that answers every request
//!   with exactly those bytes and headers ([`crate::baseline::same_bytes_server`]). The
//!   two are loaded in turns (bare, then Woodlark, `ROUNDS` times), 16 keep-alive
//!   connections in a closed loop ([`crate::client::load`]). What is left between them is
//!   what Woodlark does besides sending: routing, the token, the access decision, the cache
//!   look-up or the store read and the rendering.
//! - **PostgreSQL against SQLite.** The same repository of 25 pipelines on a SQLite server
//!   and on a PostgreSQL one (a fresh database of the test cluster); reads of its list
//!   with `perPage=25` (about 22 KB) under a new query string each time (`miss={n}`, which
//!   the API ignores: no cache can hold the answer, so every request reads the store and
//!   renders), the same page asked again and again (past the rendered-body cache's old
//!   16 KiB per-body limit), and `perPage=5` (a page every cache holds), in turns.
//! - **PostgreSQL by itself.** After each PostgreSQL turn of the miss row, PostgreSQL's own
//!   `pgbench` runs the statement behind that page (prepared, the same parameters) from
//!   [`CONNS`] clients on two threads over the same kind of connection, for as long. Its
//!   client is C that keeps the rows and throws them away, with no HTTP and no rendering:
//!   its rate is about the most any client gets that page from this database on this
//!   machine, so `pgbench ÷ SQLite` is as far as the PostgreSQL-against-SQLite ratio can go
//!   here (the backends share the cores with everything else).
//! - **A snapshot read, PostgreSQL against SQLite.** The read behind `GET …/pipelines/5` (a
//!   pipeline with its workflows and steps: three statements in one snapshot,
//!   `Store::read`) called through the servers' own read handle, 16 tasks in a closed loop,
//!   with no cache in front (over HTTP the rendered page would answer): what a snapshot
//!   read costs on each store, without the HTTP around it.
//!
//! `WOODLARK_READS_SECS` (seconds per turn, default 2) and `WOODLARK_READS_ROUNDS`
//! (default 2) change the load; `WOODLARK_READS_PG_READERS=N` gives the PostgreSQL server
//! `[storage] readers = N` (default: the config's default) and `WOODLARK_READS_PG_TLS=0`
//! connects it without TLS (`sslmode=disable`; the test cluster's default is verify-full);
//! `WOODLARK_READS_PG_SOCKET=1` connects it over the cluster's Unix socket (no TCP, no TLS:
//! a database on the server's own machine); `WOODLARK_READS_ONLY=<text>` keeps the rows whose name
//! contains the text.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::baseline::same_bytes_server;
use crate::client::{LoadResult, load};
use crate::report::{ms, pct, ratio, table};
use crate::server::Server;

const CONNS: usize = 16;
const MAX: usize = 400_000;
/// Pipelines in the bench repository (the over-the-cache page shows them all).
const PIPELINES: usize = 25;

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A server with a user, a repository of theirs and [`PIPELINES`] pending pipelines;
/// returns the server, the token and the repository's id.
async fn server_with_pipelines(tables: &str) -> (Server, String, i64) {
    let server = Server::start_with(false, tables).await;
    let token = server.user("bench", false).await;
    let admin = server.user("root", true).await;
    let config = "steps:\n  build:\n    image: sh\n    commands: [echo hello]\n";
    let (repo, _) = server
        .pipeline_repo(&admin, &token, "bench/app", config)
        .await;
    server.manual_runs(repo, &token, PIPELINES).await;
    (server, token, repo)
}

/// Loads `path` on `addr` for `turn` after a short warm-up, adding to `total`.
async fn turn(
    total: &mut LoadResult,
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    t: Duration,
) {
    load(addr, path, token, CONNS, Duration::from_millis(200), MAX).await;
    total.add(load(addr, path, token, CONNS, t, MAX).await);
}

/// Loads `a` and `b` in turns, `rounds` times: their totals.
async fn in_turns(
    rounds: u64,
    t: Duration,
    a: (SocketAddr, &str, &str),
    b: (SocketAddr, &str, &str),
) -> (LoadResult, LoadResult) {
    let (mut ta, mut tb) = (LoadResult::empty(), LoadResult::empty());
    for _ in 0..rounds {
        turn(&mut ta, a.0, a.1, Some(a.2), t).await;
        turn(&mut tb, b.0, b.1, Some(b.2), t).await;
    }
    (ta, tb)
}

/// `CONNS` tasks reading pipeline 5 of `repo` with its workflows and steps through `reads`
/// (one snapshot read each, no cache) in a closed loop for `t`.
async fn snapshot_reads(reads: &woodlark::ci::Reads, repo: i64, t: Duration) -> LoadResult {
    let start = Instant::now();
    let tasks: Vec<_> = (0..CONNS)
        .map(|_| {
            let reads = reads.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut errors = 0;
                while start.elapsed() < t {
                    let sent = Instant::now();
                    let read = reads
                        .read(move |c| woodlark::store::pipelines::full_json(c, repo, 5))
                        .await;
                    match read {
                        Ok(json) if !json.is_empty() => lat.push(sent.elapsed()),
                        _ => errors += 1,
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    let mut total = LoadResult::empty();
    for task in tasks {
        let (lat, errors) = task.await.expect("a read task");
        total.requests += lat.len();
        total.errors += errors;
        total.lat.extend(lat);
    }
    total.elapsed = start.elapsed();
    total
}

/// The script `pgbench` runs: the statement of the first page of [`PIPELINES`] in `repo`, as
/// the store writes it (`pipelines::first_page_statement`), its `?N` placeholders turned
/// into `pgbench` variables `:pN`, which `-M prepared` binds as parameters of a prepared
/// statement, as the server's are.
fn list_script(repo: i64) -> String {
    use rusqlite::types::Value;
    let (mut sql, args) = woodlark_store::pipelines::first_page_statement(repo, PIPELINES as u32);
    let mut script = String::new();
    // The highest first: `?1` is a prefix of `?10`.
    for (i, arg) in args.iter().enumerate().rev() {
        let Value::Integer(n) = arg else {
            panic!("the first page's statement takes numbers only, got {arg:?}");
        };
        let n_th = i + 1;
        sql = sql.replace(&format!("?{n_th}"), &format!(":p{n_th}"));
        script.push_str(&format!("\\set p{n_th} {n}\n"));
    }
    script + &sql + ";\n"
}

/// Runs [`list_script`] for `repo` with `pgbench` from [`CONNS`] clients on two threads (one
/// per core) over `url` for `t`: its transactions per second.
async fn pgbench(url: &str, repo: i64, t: Duration) -> f64 {
    let script = tempfile::NamedTempFile::new().expect("a temporary file");
    std::fs::write(script.path(), list_script(repo)).expect("write the pgbench script");
    let program = woodlark_store::pg::testing::Cluster::shared().program("pgbench");
    let out = tokio::process::Command::new(&program)
        .args(["-n", "-M", "prepared", "-c"])
        .arg(CONNS.to_string())
        .args(["-j", "2", "-T"])
        .arg(t.as_secs().max(1).to_string())
        .arg("-f")
        .arg(script.path())
        .arg(url)
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pgbench failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // "tps = 12345.678901 (without initial connection time)"
    text.lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no tps in pgbench's report: {text}"))
}

/// A table row of one read on both stores: rates, PostgreSQL's ratio, p99s and errors.
fn side_by_side(name: &str, lite: &mut LoadResult, pg: &mut LoadResult) -> Vec<String> {
    vec![
        name.to_string(),
        format!("{:.0}", lite.rps()),
        format!("{:.0}", pg.rps()),
        ratio(pg.rps(), lite.rps()),
        ms(p99(lite)),
        ms(p99(pg)),
        (lite.errors + pg.errors).to_string(),
    ]
}

fn p99(r: &mut LoadResult) -> Duration {
    r.lat.sort_unstable();
    pct(&r.lat, 0.99)
}

pub async fn run() {
    let secs = env_or("WOODLARK_READS_SECS", 2);
    let rounds = env_or("WOODLARK_READS_ROUNDS", 2);
    let only = std::env::var("WOODLARK_READS_ONLY").unwrap_or_default();
    let t = Duration::from_secs(secs);
    println!(
        "\n# reads: hot reads against bare hyper sending the same bytes; PostgreSQL against \
         SQLite for a page over every cache; {CONNS} keep-alive connections, closed loop, \
         {rounds} turns of {secs} s per row"
    );
    let (lite, token, repo) = server_with_pipelines("").await;
    let mut pg_url = crate::stores::fresh_database();
    if std::env::var("WOODLARK_READS_PG_SOCKET").is_ok_and(|v| v == "1") {
        let name = pg_url
            .split('?')
            .next()
            .and_then(|base| base.rsplit_once('/'))
            .map(|(_, name)| name.to_string())
            .expect("the test cluster's URL names its database");
        pg_url = woodlark_store::pg::testing::Cluster::shared().socket_url(&name);
    } else if std::env::var("WOODLARK_READS_PG_TLS").is_ok_and(|v| v == "0") {
        let (base, _) = pg_url
            .split_once('?')
            .expect("the test cluster's URL has options");
        pg_url = format!("{base}?sslmode=disable");
    }
    let pg_readers = std::env::var("WOODLARK_READS_PG_READERS")
        .map(|n| format!("readers = {n}\n"))
        .unwrap_or_default();
    let (pg, pg_token, pg_repo) =
        server_with_pipelines(&format!("[storage]\nurl = {pg_url:?}\n{pg_readers}")).await;

    // Against the same bytes.
    let hot: Vec<(String, String)> = [
        ("GET /api/user", "/api/user".to_string()),
        ("GET /api/repos/{id}", format!("/api/repos/{repo}")),
        (
            "GET …/pipelines?perPage=5",
            format!("/api/repos/{repo}/pipelines?perPage=5"),
        ),
        (
            "GET …/pipelines?perPage=25",
            format!("/api/repos/{repo}/pipelines?perPage=25"),
        ),
        (
            "GET …/pipelines/5 (steps)",
            format!("/api/repos/{repo}/pipelines/5"),
        ),
        ("GET /events?limit=20", "/events?limit=20".to_string()),
    ]
    .into_iter()
    .filter(|(name, _)| name.contains(only.as_str()))
    .map(|(n, p)| (n.to_string(), p))
    .collect();
    let mut rows = Vec::new();
    for (name, path) in &hot {
        let (status, headers, body) = lite.api.get_full(path, Some(&token)).await;
        assert!(status.is_success(), "{path}: {status}");
        let bare = same_bytes_server(headers, body.clone()).await;
        let (mut b, mut w) = in_turns(
            rounds,
            t,
            (bare, path, &token),
            (lite.api.addr, path, &token),
        )
        .await;
        rows.push(vec![
            name.clone(),
            body.len().to_string(),
            format!("{:.0}", b.rps()),
            format!("{:.0}", w.rps()),
            ratio(w.rps(), b.rps()),
            ms(p99(&mut b)),
            ms(p99(&mut w)),
            (b.errors + w.errors).to_string(),
        ]);
    }
    table(
        "reads: Woodlark (SQLite) against bare hyper sending the same bytes",
        &[
            "read",
            "bytes",
            "bare req/s",
            "woodlark req/s",
            "÷ bare",
            "bare p99 ms",
            "woodlark p99 ms",
            "errors",
        ],
        &rows,
    );

    // PostgreSQL against SQLite.
    let pages = [
        (
            "…/pipelines?perPage=25 (a new query each time: misses every cache)",
            "perPage=25&miss={n}",
        ),
        ("…/pipelines?perPage=25 (the same query)", "perPage=25"),
        ("…/pipelines?perPage=5 (the same query)", "perPage=5"),
    ];
    let mut rows = Vec::new();
    let mut by_itself = None;
    for (i, (name, query)) in pages.into_iter().enumerate() {
        if !name.contains(only.as_str()) {
            continue;
        }
        let lite_path = format!("/api/repos/{repo}/pipelines?{query}");
        let pg_path = format!("/api/repos/{pg_repo}/pipelines?{query}");
        let (mut l, mut p) = if i == 0 {
            // The misses: PostgreSQL by itself after each PostgreSQL turn.
            let (mut l, mut p, mut rates) = (LoadResult::empty(), LoadResult::empty(), vec![]);
            for _ in 0..rounds {
                turn(&mut l, lite.api.addr, &lite_path, Some(&token), t).await;
                turn(&mut p, pg.api.addr, &pg_path, Some(&pg_token), t).await;
                rates.push(pgbench(&pg_url, pg_repo, t).await);
            }
            by_itself = Some((l.rps(), p.rps(), rates));
            (l, p)
        } else {
            in_turns(
                rounds,
                t,
                (lite.api.addr, &lite_path, &token),
                (pg.api.addr, &pg_path, &pg_token),
            )
            .await
        };
        rows.push(side_by_side(name, &mut l, &mut p));
    }
    table(
        "reads: PostgreSQL against SQLite, the same page",
        &[
            "page",
            "SQLite req/s",
            "PostgreSQL req/s",
            "÷ SQLite",
            "SQLite p99 ms",
            "PostgreSQL p99 ms",
            "errors",
        ],
        &rows,
    );

    if let Some((lite_rps, pg_rps, rates)) = by_itself {
        let mean = rates.iter().sum::<f64>() / rates.len() as f64;
        let each: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
        table(
            "reads: PostgreSQL by itself (pgbench, the misses' statement), against the misses above",
            &[
                "statement",
                "pgbench tx/s (each turn)",
                "PostgreSQL misses ÷ pgbench",
                "pgbench ÷ SQLite misses (the ratio's ceiling)",
            ],
            &[vec![
                format!("the list's SELECT, {PIPELINES} rows, {CONNS} clients"),
                each.join(", "),
                ratio(pg_rps, mean),
                ratio(mean, lite_rps),
            ]],
        );
    }

    // A snapshot read, no cache in front.
    let name = "a pipeline with its workflows and steps (Store::read, no cache)";
    if name.contains(only.as_str()) {
        let (mut l, mut p) = (LoadResult::empty(), LoadResult::empty());
        for _ in 0..rounds {
            snapshot_reads(&lite.state.ci.reads, repo, Duration::from_millis(200)).await;
            l.add(snapshot_reads(&lite.state.ci.reads, repo, t).await);
            snapshot_reads(&pg.state.ci.reads, pg_repo, Duration::from_millis(200)).await;
            p.add(snapshot_reads(&pg.state.ci.reads, pg_repo, t).await);
        }
        table(
            "reads: a snapshot read, PostgreSQL against SQLite",
            &[
                "read",
                "SQLite reads/s",
                "PostgreSQL reads/s",
                "÷ SQLite",
                "SQLite p99 ms",
                "PostgreSQL p99 ms",
                "errors",
            ],
            &[side_by_side(name, &mut l, &mut p)],
        );
    }
    lite.stop().await;
    pg.stop().await;
}
