//! `http`: throughput and latency of plain API reads.
//!
//! 16 keep-alive HTTP/1.1 connections in a closed loop ([`crate::client::load`]), 3 s (or
//! 200,000 requests) per row after a 300 ms warm-up: `GET /version`, `GET /healthz` (which
//! commits an empty transaction through the store's writer on every probe), and reads as a
//! user with a token: `/api/user`, a repository, its pipeline list (5 pending pipelines), one
//! pipeline with its steps, a page of `/events`.
//!
//! **Baseline, same run:** a bare hyper HTTP/1.1 server answering `ok` to everything
//! ([`crate::baseline::baseline_server`]), driven by the same client at the same concurrency.
//! It is the first row; every row's req/s, p50 and p99 are reported as ratios to it.
//!
//! `WOODLARK_HTTP_ONLY=<text>` keeps the baseline and the rows whose name contains the text
//! (to profile one endpoint).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::sync::broadcast;

use crate::baseline::baseline_server;
use crate::client::{LoadResult, load};
use crate::report::{ms, pct, ratio, table};
use crate::server::Server;

pub async fn run() {
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
        .pipeline_repo(&admin, &token, "bench/app", config)
        .await;
    server.manual_runs(repo, &token, 5).await;
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
