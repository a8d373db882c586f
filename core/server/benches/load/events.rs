//! `events`: page latency of `GET /events` as the outbox grows from 10 thousand to 1 million
//! rows.
//!
//! The outbox is seeded with `users.updated` events (raw SQL on the writer thread, in
//! organisations nobody in the bench belongs to). Nine page shapes (`limit=100`) are then
//! requested one after the other, up to 200 times or 3 s each: unfiltered from the start, the
//! middle, near the end and backwards, dense and sparse `record_type`, `school`, and a
//! non-admin's visibility-filtered first page; first at 10k rows, then at 1M. At both sizes it
//! also measures the process CPU of one isolated committed write (a `GET /healthz` a second).
//!
//! **Baseline, same run:** the same query at 10k (the `1M ÷ 10k` column: are pages flat?),
//! and `GET /version` on the same server (the floor: `@1M ÷ /version`).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::procfs::cpu_time;
use crate::report::{ms, pct, ratio, table};
use crate::server::{Api, Server};

/// Appends seeded `users.updated` events until the outbox holds `target` rows, in large
/// transactions on the writer thread (raw SQL with the outbox's own column layout). The
/// seeded events belong to organisations nobody in the bench belongs to.
async fn seed_events(server: &Server, target: i64) -> (i64, Duration) {
    let started = Instant::now();
    let have: i64 = server
        .state
        .ci
        .reads
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
            .store_for_tests()
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
        .reads
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

pub async fn run() {
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
