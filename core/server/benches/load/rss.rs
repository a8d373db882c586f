//! `rss`: resident memory and idle activity of the real `woodlark` binary on the repository's
//! `config.toml` (the first-party plugins loaded from `plugins/dist`, runner on).
//!
//! RSS idle after the first start (the plugins compiled), after a restart (the compiled-code
//! cache), and after 10,000 authenticated API requests over 16 connections; then the
//! restarted server doing nothing for 20 s: wake-ups per second (context switches of its
//! threads) and CPU per minute.
//!
//! **Baseline, same run:** the bench's bare hyper server alone in a process (this binary
//! re-executed as `__rss_baseline`): its idle RSS, wake-ups and CPU. The memory numbers also
//! stand on their own (issue 17's goals: idle < 40 MB, growth ≤ 10 MB).

use std::process::Command;
use std::time::Duration;

use tokio::sync::broadcast;

use crate::baseline::baseline_server;
use crate::client::load;
use crate::procfs::{idle_activity, rss_kib};
use crate::report::{mb, table};
use crate::server::Binary;

/// How long the `rss` scenario watches each idle process.
pub const IDLE_SPAN: Duration = Duration::from_secs(20);

/// The baseline's side, in its own process (`__rss_baseline`): the bare hyper server alone;
/// prints its idle RSS in KiB, wake-ups per second and CPU ms per minute.
pub async fn baseline_child() {
    let (feed, _) = broadcast::channel(16);
    let _addr = baseline_server(feed).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = rss_kib(std::process::id());
    let (wakeups, cpu) = idle_activity(std::process::id(), IDLE_SPAN).await;
    println!("{rss} {wakeups} {cpu}");
}

pub async fn run() {
    const REQUESTS: usize = 10_000;
    println!("\n# rss: the woodlark binary on config.toml, idle and after {REQUESTS} requests");
    let woodlark = Binary::new();
    let add = woodlark
        .command(&["user", "add", "bench", "--admin", "--config", "config.toml"])
        .output()
        .expect("woodlark user add");
    assert!(
        add.status.success(),
        "{}",
        String::from_utf8_lossy(&add.stderr)
    );
    let token = String::from_utf8_lossy(&add.stdout).trim().to_string();
    let addr = woodlark.addr;
    let serve = || woodlark.serve();
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
