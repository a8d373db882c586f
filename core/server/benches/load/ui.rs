//! `ui`: what the built-in web UI's pages cost (issue 49): a repository of 50 pipelines, its
//! page (all 50 on one page), a pipeline's page and a step's page, and the repository list.
//!
//! For each page: its bytes, then one connection in a closed loop (each request waits for
//! the previous answer, so its latency is the page's whole cost: access, the read, the
//! template and sending — nothing queues), then 16 connections (the page's rate when the
//! two cores are busy with it) against a bare hyper server answering the very same bytes
//! and headers ([`crate::baseline::same_bytes_server`]), in turns. The UI renders every
//! request; no rendered page is cached.
//!
//! `WOODLARK_UI_SECS` (seconds per turn, default 2) changes the load.

use std::time::Duration;

use crate::baseline::same_bytes_server;
use crate::client::load;
use crate::report::{ms, pct, ratio, table};
use crate::server::Server;

/// Pipelines in the bench repository: one UI page of them (the API's page size).
const PIPELINES: usize = 50;

pub async fn run() {
    let secs = std::env::var("WOODLARK_UI_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let t = Duration::from_secs(secs);
    println!(
        "\n# ui: the built-in web UI's pages, a repository of {PIPELINES} pipelines; one \
         connection (latency = the page's cost), then 16 (rate); {secs} s per turn"
    );
    let server = Server::start_with(false, "").await;
    let token = server.user("bench", false).await;
    let admin = server.user("root", true).await;
    let config = "steps:\n  build:\n    image: sh\n    commands: [echo hello]\n";
    let (repo, _) = server
        .pipeline_repo(&admin, &token, "bench/ui", config)
        .await;
    server.manual_runs(repo, &token, PIPELINES).await;
    let (_, _, body) = server
        .api
        .get_full(
            &format!("/api/repos/{repo}/pipelines/{PIPELINES}"),
            Some(&token),
        )
        .await;
    let pipeline: serde_json::Value = serde_json::from_slice(&body).expect("a pipeline");
    let step = pipeline["workflows"][0]["children"][0]["pid"]
        .as_i64()
        .expect("a step");

    let pages = [
        ("/repos (the list)", "/repos".to_string()),
        ("/repos/{id} (50 pipelines)", format!("/repos/{repo}")),
        (
            "/repos/{id}/pipeline/{n}",
            format!("/repos/{repo}/pipeline/{PIPELINES}"),
        ),
        (
            "/repos/{id}/pipeline/{n}/{step}",
            format!("/repos/{repo}/pipeline/{PIPELINES}/{step}"),
        ),
    ];
    let mut rows = Vec::new();
    for (name, path) in pages {
        let (status, headers, body) = server.api.get_full(&path, Some(&token)).await;
        assert!(status.is_success(), "{path}: {status}");
        let bare = same_bytes_server(headers, body.clone()).await;
        let warm = Duration::from_millis(200);
        load(server.api.addr, &path, Some(&token), 1, warm, usize::MAX).await;
        let mut one = load(server.api.addr, &path, Some(&token), 1, t, usize::MAX).await;
        load(bare, &path, Some(&token), 16, warm, usize::MAX).await;
        let same = load(bare, &path, Some(&token), 16, t, usize::MAX).await;
        let many = load(server.api.addr, &path, Some(&token), 16, t, usize::MAX).await;
        one.lat.sort_unstable();
        rows.push(vec![
            name.to_string(),
            body.len().to_string(),
            ms(pct(&one.lat, 0.5)),
            ms(pct(&one.lat, 0.99)),
            format!("{:.0}", same.rps()),
            format!("{:.0}", many.rps()),
            ratio(many.rps(), same.rps()),
            (one.errors + many.errors + same.errors).to_string(),
        ]);
    }
    table(
        "ui: the built-in UI's pages",
        &[
            "page",
            "bytes",
            "1 conn p50 ms",
            "1 conn p99 ms",
            "bare, same bytes req/s",
            "16 conns req/s",
            "÷ bare",
            "errors",
        ],
        &rows,
    );
    server.stop().await;
}
