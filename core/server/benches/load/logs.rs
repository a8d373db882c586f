//! `logs`: lines per second stored for one step printing 200,000 lines (`seq 1 200000`),
//! counted in the logs database, from the first line stored to the last and from the manual
//! run to the pipeline's `success`; then one read-back of them all through `GET
//! /api/repos/{id}/logs/{n}/{step}`.
//!
//! **Baselines, same run:** the same output read line by line from a pipe (the speed of the
//! process itself), and SQLite alone inserting the same lines into the same schema in 200-line
//! transactions with `synchronous = FULL` (the runner's batch size when no output is waiting;
//! the durable floor).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::baseline::durable_sqlite;
use crate::report::{ratio, table};
use crate::server::{Server, statuses};

const LINES: i64 = 200_000;

pub async fn run() {
    println!("\n# logs: one step printing {LINES} lines (`seq 1 {LINES}`), local runner");
    let server = Server::start(true).await;
    let admin = server.user("root", true).await;
    let alice = server.user("alice", false).await;
    let config = format!(
        "skip_clone: true\nsteps:\n  - name: lines\n    image: sh\n    commands: [\"seq 1 {LINES}\"]\n"
    );
    let (repo, _) = server
        .pipeline_repo(&admin, &alice, "alice/logs", &config)
        .await;

    let t0 = Instant::now();
    let created = server.api.run_pipeline(repo, &alice).await;
    let number = created["number"].as_i64().unwrap();
    let step_id = loop {
        let p = server.api.pipeline(repo, number, &alice).await;
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
        let logs = server.state.ci.log_reads.clone();
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
