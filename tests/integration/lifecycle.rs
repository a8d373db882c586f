//! The server stops and starts cleanly (issue 47, "nothing lost through outages"): started
//! before its PostgreSQL database is up, it holds its port answering 503 and serves once the
//! database is; on SIGTERM its embedded runner takes no more work, lets running workflows
//! end within `runner.shutdown_grace_secs`, and hands those still running over, with a
//! line in their steps' logs, to run again at once.
//!
//! The database test starts a PostgreSQL cluster of its own (it stops it): it needs
//! Debian's server binaries and fails with the fix, never skips, without them.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::pipelines::{finished, log_text, slow_repo_on, step_of, wait_for};
use crate::util::{Http, Process, cli_user_add, with_runner, write_config};
use woodlark_store::pg::testing::Cluster;

/// Starts `woodlark serve --config CONFIG` and returns once it holds its port, before it
/// serves ([`Process::start`] waits until it serves).
fn start_holding(config: &Path) -> Process {
    Process::start_until(config, "woodlark holds its port")
}

/// Runs `f` on a plain thread: the blocking PostgreSQL client cannot run on the runtime's.
fn blocking<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().expect("the thread panicked"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_before_its_database_waits_for_it_then_serves() {
    let cluster = blocking(Cluster::start);
    let url = blocking(|| cluster.database("woodlark"));
    blocking(|| cluster.stop_for_outage());

    let dir = tempfile::tempdir().unwrap();
    let storage = format!("[storage]\nurl = {url:?}\nwait_for_database_secs = 60\n");
    let config = write_config(dir.path(), &storage);
    let started = Instant::now();
    let mut server = start_holding(&config);
    let http = Http::new(server.addr);

    // The port is held at once: not ready, and saying what it waits for.
    let health = http.get("/healthz", None).await.expect(503);
    let body = health.json();
    assert_eq!(body["ready"], false, "{body}");
    let target = format!("127.0.0.1:{}/woodlark", cluster.port());
    assert!(
        body["waiting_for"].as_str().unwrap().contains(&target),
        "{body}"
    );
    let refused = http.get("/api/user", None).await.expect(503);
    assert_eq!(refused.header("retry-after"), Some("5"));
    let message = refused.json()["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("woodlark is starting: waiting for the database"),
        "{message}"
    );

    // The database comes up 10 s after the server.
    tokio::time::sleep(Duration::from_secs(10).saturating_sub(started.elapsed())).await;
    assert_eq!(
        http.get("/healthz", None).await.status,
        503,
        "still waiting after 10 s"
    );
    blocking(|| cluster.start_again());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = http.get("/healthz", None).await.status.as_u16();
        if (200..300).contains(&status) {
            break;
        }
        assert_eq!(status, 503, "{}", server.stderr());
        assert!(
            Instant::now() < deadline,
            "not ready 30 s after the database came up: {}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // An API call works on the same port, on the database that came up.
    let token = String::from_utf8(cli_user_add(&config, "root", true).stdout).unwrap();
    let me = http
        .get("/api/user", Some(token.trim()))
        .await
        .expect(200)
        .json();
    assert_eq!(me["login"], "root");
    let log = server.stderr();
    assert!(log.contains("waiting for the database"), "{log}");
    assert!(log.contains("the database accepts connections"), "{log}");
    assert!(
        log.contains("woodlark listening"),
        "said once it serves: {log}"
    );
    server.terminate(Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_stays_down_past_the_wait_ends_the_start_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let storage = "[storage]\nurl = \"postgres://woodlark:pw-not-shown@127.0.0.1:1/ci?sslmode=disable\"\nwait_for_database_secs = 2\n";
    let config = write_config(dir.path(), storage);
    let started = Instant::now();
    let mut server = start_holding(&config);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "still waiting: {}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let log = server.stderr();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains(
            "woodlark: the database at 127.0.0.1:1/ci did not accept connections within 2 s \
             (storage.wait_for_database_secs)"
        ),
        "{log}"
    );
    assert!(!log.contains("pw-not-shown"), "{log}");
}

/// A server with the embedded runner, `grace` seconds of it, running one pipeline whose
/// step `slow` prints `first line`, sleeps `sleep` seconds and prints `last line`.
struct Running {
    dir: tempfile::TempDir,
    config: std::path::PathBuf,
    server: Process,
    alice: String,
    repo: i64,
    step_id: i64,
}

async fn running_pipeline(grace: u64, sleep: u64) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let runner = with_runner(dir.path()) + &format!("shutdown_grace_secs = {grace}\n");
    let config = write_config(dir.path(), &runner);
    let token = |login: &str, admin: bool| {
        String::from_utf8(cli_user_add(&config, login, admin).stdout)
            .unwrap()
            .trim()
            .to_string()
    };
    let (admin, alice) = (token("root", true), token("alice", false));
    let server = Process::start(&config);
    let http = Http::new(server.addr);
    let repo = slow_repo_on(&http, dir.path(), &admin, &alice, sleep).await;
    http.post(&format!("/api/repos/{repo}/pipelines"), Some(&alice), "{}")
        .await
        .expect(200);
    let deadline = Instant::now() + Duration::from_secs(30);
    let step_id = loop {
        let p = http
            .get(&format!("/api/repos/{repo}/pipelines/1"), Some(&alice))
            .await
            .json();
        if p["workflows"].as_array().is_some_and(|w| !w.is_empty()) {
            let s = step_of(&p, "slow");
            let id = s["id"].as_i64().unwrap();
            if s["state"] == "running"
                && log_text(&http, &alice, repo, 1, id)
                    .await
                    .iter()
                    .any(|l| l == "first line")
            {
                break id;
            }
        }
        assert!(Instant::now() < deadline, "the step never ran: {p:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    Running {
        dir,
        config,
        server,
        alice,
        repo,
        step_id,
    }
}

/// The states of the queue's tasks, read from the stopped server's database (a task goes
/// when its workflow ends).
fn task_states(dir: &Path) -> Vec<String> {
    woodlark_store::inspect_for_tests(&crate::util::database_of(dir), |db| {
        db.query_map_for_tests("SELECT state FROM tasks", [], |r| r.get(0))
            .unwrap()
    })
}

/// The step's output lines without the shell's trace of its commands (`+ sleep 8`).
async fn output(http: &Http, alice: &str, repo: i64, step_id: i64) -> Vec<String> {
    let lines = log_text(http, alice, repo, 1, step_id).await;
    lines.into_iter().filter(|l| !l.starts_with("+ ")).collect()
}

const HANDED_OVER: &str = "[woodlark] the server stopped before this step ended: the step was stopped, and its workflow is handed over to run again";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_step_shorter_than_the_grace_finish() {
    let Running {
        dir,
        config,
        mut server,
        alice,
        repo,
        step_id,
    } = running_pipeline(20, 3).await;
    let stopping = Instant::now();
    server.terminate(Duration::from_secs(20));
    let took = stopping.elapsed();
    assert!(
        server.stderr().contains("running workflows may finish"),
        "{}",
        server.stderr()
    );
    assert!(took < Duration::from_secs(15), "the stop took {took:?}");
    assert!(task_states(dir.path()).is_empty(), "{}", server.stderr());
    drop(server);

    let server = Process::start(&config);
    let http = Http::new(server.addr);
    let done = wait_for(&http, &alice, repo, 1, 30, finished).await;
    assert_eq!(done["status"], "success", "{done:#}");
    let lines = output(&http, &alice, repo, step_id).await;
    assert_eq!(lines, ["first line", "last line"], "ran once, to its end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_a_step_longer_than_the_grace_with_a_trace_and_hands_it_over() {
    let grace = 2;
    let Running {
        dir,
        config,
        mut server,
        alice,
        repo,
        step_id,
    } = running_pipeline(grace, 8).await;
    let stopping = Instant::now();
    server.terminate(Duration::from_secs(grace + 10));
    let took = stopping.elapsed();
    assert!(
        took < Duration::from_secs(grace + 4),
        "the stop took {took:?}: {}",
        server.stderr()
    );
    assert!(took >= Duration::from_secs(grace), "no grace: {took:?}");
    // Back in the queue as the server stopped, not held until its lease runs out.
    assert_eq!(task_states(dir.path()), ["pending"], "{}", server.stderr());
    assert!(
        server.stderr().contains("workflow handed over"),
        "{}",
        server.stderr()
    );
    drop(server);

    let server = Process::start(&config);
    let http = Http::new(server.addr);
    let done = wait_for(&http, &alice, repo, 1, 60, finished).await;
    assert_eq!(done["status"], "success", "{done:#}");
    let lines = output(&http, &alice, repo, step_id).await;
    assert_eq!(
        lines,
        ["first line", HANDED_OVER, "first line", "last line"],
        "stopped with a trace, then run again to its end"
    );
}

const INFO: &str = r#"{"platform":"linux/amd64","backend":"local","capacity":1,"version":"t"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_remote_agent_hands_its_workflow_over_with_a_trace() {
    let s = crate::util::TestServer::start().await; // runner off
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await["id"]
        .as_i64()
        .unwrap();
    let token = s
        .http
        .post("/api/agents", Some(&p.admin), r#"{"name":"remote-1"}"#)
        .await
        .expect(200)
        .json()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let pipeline = "steps:\n  - name: slow\n    image: sh\n    commands: [\"sleep 600\"]\n";
    crate::pipelines::push_files(&s, "alice/app", &[(".woodpecker.yaml", pipeline)], "one").await;
    let agent = |call: &str, body: Option<String>| {
        let (http, token, call) = (&s.http, token.clone(), call.to_string());
        async move {
            http.send(
                "POST",
                &format!("/api/agent{call}"),
                Some(&token),
                body.as_deref().map(str::as_bytes),
                &[],
            )
            .await
        }
    };
    let work = agent("/next", Some(INFO.into())).await.expect(200).json();
    let wf = work["workflow_id"].as_i64().unwrap();
    let step_id = work["steps"][0]["id"].as_i64().unwrap();
    agent(&format!("/workflows/{wf}/init"), None)
        .await
        .expect(204);
    let running = format!(r#"{{"step_id":{step_id},"state":"running","started":1}}"#);
    agent(&format!("/workflows/{wf}/steps"), Some(running))
        .await
        .expect(204);
    let line = format!(r#"[{{"step_id":{step_id},"line":0,"time":0,"type":0,"data":"started"}}]"#);
    agent(&format!("/workflows/{wf}/logs"), Some(line))
        .await
        .expect(204);

    agent(&format!("/workflows/{wf}/hand-over"), None)
        .await
        .expect(204);
    // Not this agent's any more: a second hand-over is refused.
    agent(&format!("/workflows/{wf}/hand-over"), None)
        .await
        .expect(409);
    let pipeline = s
        .http
        .get(&format!("/api/repos/{repo}/pipelines/1"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(pipeline["workflows"][0]["state"], "pending", "{pipeline:#}");
    assert_eq!(
        step_of(&pipeline, "slow")["state"],
        "pending",
        "{pipeline:#}"
    );
    let lines = log_text(&s.http, &p.alice, repo, 1, step_id).await;
    assert_eq!(
        lines,
        [
            "started",
            "[woodlark] agent \"remote-1\" stopped before this step ended: the step was stopped, and its workflow is handed over to run again",
        ]
    );
    // Back in the queue at once: the next poll gets it again.
    let again = agent("/next", Some(INFO.into())).await.expect(200).json();
    assert_eq!(again["workflow_id"], wf);
}
