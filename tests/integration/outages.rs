//! Outages cost time, never data: a server stopped for 20 s under a remote agent, and a
//! PostgreSQL database gone for 20 s under two replicas' embedded runners, while steps run
//! and print. Every line arrives once and in order, and every step's state is its own.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::pipelines::{finished, log_text, push_files, step_of, wait_for};
use crate::util::{Http, TestServer, on_postgres, spawn_agent};

/// A step printing `line 1` … `line 30`, one a second, then exiting with `code`.
fn printing_step(name: &str, code: i32) -> String {
    format!(
        "skip_clone: true\nsteps:\n  - name: {name}\n    image: sh\n    commands:\n      - for i in $(seq 1 30); do echo \"line $$i\"; sleep 1; done; exit {code}\n"
    )
}

fn thirty_lines() -> Vec<String> {
    (1..=30).map(|i| format!("line {i}")).collect()
}

/// Waits until step `name` of pipeline 1 of `repo` has stored at least `lines` lines (its
/// shell trace counts); `context` says more when it never does.
async fn wait_for_lines(
    http: &Http,
    token: &str,
    repo: i64,
    name: &str,
    lines: usize,
    context: impl Fn() -> String,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let p = http
            .get(&format!("/api/repos/{repo}/pipelines/1"), Some(token))
            .await
            .json();
        let found = p["workflows"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|w| w["children"].as_array().into_iter().flatten())
            .find(|s| s["name"] == name)
            .and_then(|s| s["id"].as_i64());
        if let Some(step) = found
            && log_text(http, token, repo, 1, step).await.len() >= lines
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "step {name} never printed: {p:#}\n{}",
            context()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Asserts step `name` ended `state` with `exit_code` and stored its thirty lines once each,
/// in order.
async fn assert_whole(
    http: &Http,
    token: &str,
    repo: i64,
    p: &Value,
    name: &str,
    state: &str,
    exit_code: i64,
) {
    let step = step_of(p, name);
    assert_eq!(step["state"], state, "{p:#}");
    assert_eq!(step["exit_code"], exit_code, "{p:#}");
    let mut lines = log_text(http, token, repo, 1, step["id"].as_i64().unwrap()).await;
    // (After the shell's trace of the command.)
    assert!(
        lines.first().is_some_and(|l| l.starts_with("+ for i")),
        "{lines:?}"
    );
    lines.remove(0);
    assert_eq!(
        lines,
        thirty_lines(),
        "step {name}: every line once and in order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_stopped_for_20_s_under_a_remote_agent_loses_no_line() {
    let s = TestServer::start().await; // runner off: the remote agent runs the steps
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let agent = s
        .http
        .post("/api/agents", Some(&p.admin), r#"{"name":"remote"}"#)
        .await
        .expect(200)
        .json();
    let agent_log = s.dir.path().join("agent.log");
    let workdir = s.dir.path().join("agent-runs");
    let _agent = spawn_agent(
        s.http.addr,
        agent["token"].as_str().unwrap(),
        &workdir,
        &agent_log,
    );
    push_files(
        &s,
        "alice/app",
        &[(".woodpecker.yaml", &printing_step("print", 0))],
        "print",
    )
    .await;
    let log = || std::fs::read_to_string(&agent_log).unwrap_or_default();
    wait_for_lines(&s.http, &p.alice, id, "print", 5, || {
        format!("agent log:\n{}", log())
    })
    .await;

    // The server stops (an upgrade) for 20 s and comes back on the same data dir.
    let addr = s.http.addr;
    let dir = s.stop().await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let s = TestServer::start_in_at(dir, "", addr).await;

    let done = wait_for(&s.http, &p.alice, id, 1, 90, finished).await;
    assert_eq!(done["status"], "success", "{done:#}\nagent log:\n{}", log());
    assert_whole(&s.http, &p.alice, id, &done, "print", "success", 0).await;
    assert!(
        log().contains("holding this workflow's reports"),
        "the agent held its reports while the server was away:\n{}",
        log()
    );
}

/// `[runner]` of a replica: one workflow at a time, so two workflows run on two replicas.
fn one_at_a_time(data_dir: &std::path::Path) -> String {
    format!(
        "#runner\n[runner]\nenabled = true\nbackend = \"local\"\ncapacity = 1\nworkdir = {:?}\n",
        data_dir.join("runs").display().to_string()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_gone_for_20_s_under_two_replicas_loses_no_line_and_no_exit_code() {
    // Its own PostgreSQL cluster, stopped and started by the test; once per suite (the
    // PostgreSQL pass would run the same thing again).
    if on_postgres() {
        return;
    }
    let cluster = woodlark_store::pg::testing::Cluster::start();
    let url = std::thread::scope(|s| s.spawn(|| cluster.database("outage")).join()).unwrap();
    let dir_a = tempfile::tempdir().unwrap();
    // Replicas share the sealing key as they share the database.
    let key = dir_a.path().join("secrets.key").display().to_string();
    let storage = format!("[storage]\nurl = {url:?}\nsecret_key_file = {key:?}\n");
    let tables_a = one_at_a_time(dir_a.path()) + &storage;
    let a = TestServer::start_in_with_tables(dir_a, "", &tables_a).await;
    let dir_b = tempfile::tempdir().unwrap();
    let tables_b = one_at_a_time(dir_b.path()) + &storage;
    let b = TestServer::start_in_with_tables(dir_b, "", &tables_b).await;

    let p = a.principals().await;
    let repo = a.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    push_files(
        &a,
        "alice/app",
        &[
            (".woodpecker/ok.yaml", &printing_step("passes", 0)),
            (".woodpecker/fails.yaml", &printing_step("fails", 3)),
        ],
        "two workflows",
    )
    .await;
    wait_for_lines(&a.http, &p.alice, id, "passes", 5, String::new).await;
    wait_for_lines(&a.http, &p.alice, id, "fails", 5, String::new).await;

    let stopped = Instant::now();
    std::thread::scope(|s| s.spawn(|| cluster.stop_for_outage()).join()).unwrap();
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(stopped.elapsed())).await;
    std::thread::scope(|s| s.spawn(|| cluster.start_again()).join()).unwrap();

    let done = wait_for(&b.http, &p.alice, id, 1, 120, finished).await;
    assert_eq!(done["status"], "failure", "{done:#}");
    let agents: Vec<&Value> = done["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| &w["agent_id"])
        .collect();
    assert_ne!(
        agents[0], agents[1],
        "each replica ran one workflow: {done:#}"
    );
    for server in [&a, &b] {
        assert_whole(&server.http, &p.alice, id, &done, "passes", "success", 0).await;
        assert_whole(&server.http, &p.alice, id, &done, "fails", "failure", 3).await;
    }
}

/// A server without a runner (the test is the agent), alice's repository with a one-step
/// pipeline pushed, and agents named `names` (their tokens); the first has leased the
/// workflow: its id and its step's.
struct Leased {
    s: TestServer,
    alice: String,
    repo: i64,
    tokens: Vec<String>,
    workflow: i64,
    step: i64,
}

async fn leased_by(names: &[&str]) -> Leased {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let mut tokens = Vec::new();
    for name in names {
        let body = serde_json::json!({ "name": name }).to_string();
        let agent = s.http.post("/api/agents", Some(&p.admin), &body).await;
        tokens.push(
            agent.expect(200).json()["token"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    push_files(
        &s,
        "alice/app",
        &[(
            ".woodpecker.yaml",
            "skip_clone: true\nsteps:\n  - name: a\n    image: sh\n    commands: [\"true\"]\n",
        )],
        "one step",
    )
    .await;
    let work = s
        .http
        .send(
            "POST",
            "/api/agent/next",
            Some(&tokens[0]),
            Some(AGENT_INFO),
            &[],
        )
        .await
        .expect(200)
        .json();
    Leased {
        repo: repo["id"].as_i64().unwrap(),
        alice: p.alice,
        tokens,
        workflow: work["workflow_id"].as_i64().unwrap(),
        step: work["steps"][0]["id"].as_i64().unwrap(),
        s,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_sent_again_changes_nothing() {
    let Leased {
        s,
        alice,
        repo: id,
        tokens,
        workflow: wf,
        step,
    } = leased_by(&["holder", "other"]).await;
    let (holder, other) = (&tokens[0], &tokens[1]);
    let call = |token: &str, what: &str, body: String| {
        let (http, token, path) = (
            &s.http,
            token.to_string(),
            format!("/api/agent/workflows/{wf}/{what}"),
        );
        async move {
            http.send("POST", &path, Some(&token), Some(body.as_bytes()), &[])
                .await
        }
    };
    let report = |state: &str, code: i64, seq: i64| {
        format!(
            r#"{{"step_id":{step},"state":"{state}","exit_code":{code},"started":1,"finished":2,"seq":{seq}}}"#
        )
    };
    call(holder, "init", String::new()).await.expect(204);
    call(holder, "steps", report("running", 0, 1))
        .await
        .expect(204);
    call(holder, "steps", report("failure", 3, 2))
        .await
        .expect(204);
    // The first report once more (its answer was lost), and a stale copy of it: taken,
    // and the step keeps its end.
    call(holder, "steps", report("running", 0, 1))
        .await
        .expect(204);
    call(holder, "steps", report("failure", 3, 2))
        .await
        .expect(204);
    let p1 = s
        .http
        .get(&format!("/api/repos/{id}/pipelines/1"), Some(&alice))
        .await
        .json();
    assert_eq!(step_of(&p1, "a")["state"], "failure", "{p1:#}");
    assert_eq!(step_of(&p1, "a")["exit_code"], 3, "{p1:#}");
    // Another agent is refused, numbered or not.
    call(other, "steps", report("success", 0, 9))
        .await
        .expect(409);

    let done = r#"{"state":"failure"}"#.to_string();
    call(holder, "done", done.clone()).await.expect(204);
    // The end said again by the agent that ended it: taken; by another, or another end: not.
    call(holder, "done", done.clone()).await.expect(204);
    call(other, "done", done).await.expect(409);
    call(holder, "done", r#"{"state":"success"}"#.into())
        .await
        .expect(409);
    let p1 = wait_for(&s.http, &alice, id, 1, 10, finished).await;
    assert_eq!(p1["status"], "failure", "{p1:#}");
    assert_eq!(step_of(&p1, "a")["exit_code"], 3, "{p1:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_end_never_arrived_says_its_report_was_lost() {
    let Leased {
        s,
        alice,
        repo: id,
        tokens,
        workflow: wf,
        step,
    } = leased_by(&["lossy"]).await;
    let token = &tokens[0];
    for (what, body) in [
        ("init", String::new()),
        (
            "steps",
            format!(r#"{{"step_id":{step},"state":"running","started":1,"seq":1}}"#),
        ),
        ("done", r#"{"state":"success"}"#.to_string()),
    ] {
        s.http
            .send(
                "POST",
                &format!("/api/agent/workflows/{wf}/{what}"),
                Some(token),
                Some(body.as_bytes()),
                &[],
            )
            .await
            .expect(204);
    }
    let p1 = wait_for(&s.http, &alice, id, 1, 10, finished).await;
    let a = step_of(&p1, "a");
    assert_eq!(a["state"], "error", "not skipped: {p1:#}");
    assert!(
        a["error"]
            .as_str()
            .unwrap()
            .contains("no report of this step's end"),
        "{p1:#}"
    );
}

/// What an agent says about itself when it asks for work.
const AGENT_INFO: &[u8] =
    br#"{"platform":"linux/amd64","backend":"local","capacity":1,"version":"test"}"#;

/// Delivers the push hook of the git forge (`body`: `<old> <new> <ref>`) as a proxy in front
/// of the replicas would: to replica `first`, and on a refused connection or a 5xx to the
/// next one. Returns the replicas that failed it, with when.
async fn deliver_through_proxy(
    addrs: &[std::net::SocketAddr],
    hook: &str,
    body: &str,
    first: usize,
) -> Vec<(usize, Instant, String)> {
    let mut failed = Vec::new();
    for attempt in 0..addrs.len() * 5 {
        let replica = (first + attempt) % addrs.len();
        let http = Http::new(addrs[replica]);
        let headers = [("content-type", "text/plain"), ("x-woodlark-event", "push")];
        let sent = tokio::time::timeout(
            Duration::from_secs(10),
            http.try_send("POST", hook, None, Some(body.as_bytes()), &headers),
        )
        .await
        .unwrap_or_else(|_| Err("no answer within 10 s".into()));
        match sent {
            Ok(r) if r.status.is_success() => return failed,
            Ok(r) if r.status.is_server_error() => failed.push((
                replica,
                Instant::now(),
                format!("{}: {}", r.status, r.text()),
            )),
            Ok(r) => panic!("the hook was refused: {} {}", r.status, r.text()),
            Err(e) => failed.push((replica, Instant::now(), e)),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("no replica took the hook: {failed:?}");
}

/// A step printing five numbered lines of push `n` over about two seconds.
fn short_step(n: usize) -> String {
    format!(
        "skip_clone: true\nsteps:\n  - name: build\n    image: sh\n    commands:\n      - for i in 1 2 3 4 5; do echo \"push {n} line $$i\"; sleep 0.4; done\n"
    )
}

/// Runs `git` in `dir` off the runtime's threads; its stdout.
async fn git_off_thread(dir: std::path::PathBuf, args: Vec<String>) -> String {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        crate::util::git(&dir, &args)
    })
    .await
    .unwrap()
}

/// How many pushes the rolling restart test makes, one a second.
const ROLLING_PUSHES: usize = 18;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_three_replicas_loses_and_repeats_nothing() {
    // Always on PostgreSQL (replicas): once per suite.
    if on_postgres() {
        return;
    }
    let shared = crate::storage::SharedDatabase::new();
    let mut servers = Vec::new();
    for _ in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let tables = shared.tables(dir.path(), true);
        servers.push(Some(
            TestServer::start_in_with_tables(dir, "", &tables).await,
        ));
    }
    let addrs: Vec<std::net::SocketAddr> = servers
        .iter()
        .map(|s| s.as_ref().unwrap().http.addr)
        .collect();
    let first = servers[0].as_ref().unwrap();
    let p = first.principals().await;
    let repo = first.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    // The proxy, not git's hook, delivers the pushes.
    let hook = first.hook_path("alice/app");
    let bare = first.forge_dir().join("alice/app.git");
    std::fs::remove_file(bare.join("hooks/post-receive")).unwrap();
    let work = first.dir.path().join("work/alice/app");

    let pusher = tokio::spawn({
        let (addrs, hook, bare, work) = (addrs.clone(), hook.clone(), bare.clone(), work.clone());
        async move {
            let mut failed = Vec::new();
            for n in 1..=ROLLING_PUSHES {
                let started = Instant::now();
                std::fs::write(work.join(".woodpecker.yaml"), short_step(n)).unwrap();
                let git = |args: &[&str]| {
                    git_off_thread(work.clone(), args.iter().map(|a| a.to_string()).collect())
                };
                let old = git(&["rev-parse", "HEAD"]).await;
                git(&["add", "-A"]).await;
                git(&["commit", "-q", "-m", &format!("push {n}")]).await;
                let new = git(&["rev-parse", "HEAD"]).await;
                git(&["push", "-q", bare.to_str().unwrap(), "HEAD:main"]).await;
                let body = format!("{} {} refs/heads/main\n", old.trim(), new.trim());
                failed.extend(deliver_through_proxy(&addrs, &hook, &body, n % 3).await);
                tokio::time::sleep(Duration::from_secs(1).saturating_sub(started.elapsed())).await;
            }
            failed
        }
    });

    // One replica after the other: SIGTERM's graceful stop, then a start on the same data
    // dir and address, while the pushes go on.
    let mut windows = Vec::new();
    for (i, slot) in servers.iter_mut().enumerate() {
        tokio::time::sleep(Duration::from_secs(4)).await;
        let from = Instant::now();
        let dir = slot.take().unwrap().stop().await;
        let tables = shared.tables(dir.path(), true);
        *slot = Some(TestServer::start_in_at(dir, &tables, addrs[i]).await);
        windows.push((i, from, Instant::now()));
    }
    let failed = pusher.await.unwrap();
    let servers: Vec<TestServer> = servers.into_iter().map(Option::unwrap).collect();

    // Only a restarting replica failed a delivery (the proxy took it elsewhere).
    for (replica, when, why) in &failed {
        assert!(
            windows.iter().any(|(r, from, to)| r == replica
                && when >= from
                && *when <= *to + Duration::from_millis(500)),
            "replica {replica} failed a hook while it was not restarting: {why}"
        );
    }
    // Every push made one pipeline, and every pipeline ran once to success.
    for number in 1..=ROLLING_PUSHES as i64 {
        let reader = &servers[number as usize % 3];
        let done = wait_for(&reader.http, &p.alice, id, number, 120, finished).await;
        assert_eq!(done["status"], "success", "pipeline {number}: {done:#}");
        let step = step_of(&done, "build")["id"].as_i64().unwrap();
        let lines = log_text(&reader.http, &p.alice, id, number, step).await;
        let printed: Vec<String> = (1..=5).map(|i| format!("push {number} line {i}")).collect();
        assert_eq!(
            lines[1..],
            printed[..],
            "pipeline {number}: every line once (one run of the step)"
        );
    }
    let list = servers[0]
        .http
        .get(
            &format!("/api/repos/{id}/pipelines?per_page=50"),
            Some(&p.alice),
        )
        .await
        .expect(200)
        .json();
    let numbers: Vec<i64> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["number"].as_i64().unwrap())
        .collect();
    assert_eq!(
        numbers,
        (1..=ROLLING_PUSHES as i64).rev().collect::<Vec<_>>(),
        "one pipeline per push, none twice"
    );
    let feeds = crate::storage::in_turn(
        servers
            .iter()
            .map(|s| crate::storage::all_events(s, &p.admin)),
    )
    .await;
    for feed in &feeds {
        assert_eq!(feed, &feeds[0], "a replica pages another feed");
    }
    let took: Vec<u128> = windows
        .iter()
        .map(|(_, a, b)| (*b - *a).as_millis())
        .collect();
    eprintln!(
        "rolling restart: {ROLLING_PUSHES} pushes, {} pipelines, {} events on each replica, \
         {} deliveries retried elsewhere ({:?}), restarts took {took:?} ms",
        numbers.len(),
        feeds[0].len(),
        failed.len(),
        failed
            .iter()
            .map(|(r, _, why)| format!("replica {r}: {why}"))
            .collect::<Vec<_>>()
    );
}
