//! Pipelines end to end: real git pushes, the local runner and a remote agent, logs,
//! cancel, approval, restarts, and a crash in the middle of a run.

use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

use crate::util::{
    Http, Principals, Process, TestServer, cli_user_add, git, spawn_agent, with_runner,
    write_config,
};

/// Commits `files` to the work tree of `remote_id` and pushes (the hook fires).
pub async fn push_files(
    s: &TestServer,
    remote_id: &str,
    files: &[(&str, &str)],
    message: &str,
) -> String {
    push(s, remote_id, files, message).await
}

/// A step of a pipeline JSON by name.
pub fn step_of<'a>(p: &'a Value, name: &str) -> &'a Value {
    step(p, name)
}

async fn push(s: &TestServer, remote_id: &str, files: &[(&str, &str)], message: &str) -> String {
    let work = s.dir.path().join("work").join(remote_id);
    for (name, body) in files {
        let path = work.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", message]);
    let bare = s.forge_dir().join(format!("{remote_id}.git"));
    let w = work.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("git")
            .arg("-C")
            .arg(&w)
            .args(["push", "-q", bare.to_str().unwrap(), "HEAD:main"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Starts a manual run (`body`: upstream's `PipelineOptions`); returns the new pipeline.
pub async fn start_manually(http: &Http, token: &str, repo: i64, body: &str) -> Value {
    http.post(&format!("/api/repos/{repo}/pipelines"), Some(token), body)
        .await
        .expect(200)
        .json()
}

/// Starts a manual run (`body`: upstream's `PipelineOptions`) and waits up to `secs` for it
/// to finish; returns the finished pipeline.
pub async fn run_manually(http: &Http, token: &str, repo: i64, body: &str, secs: u64) -> Value {
    let run = start_manually(http, token, repo, body).await;
    let number = run["number"].as_i64().unwrap();
    wait_for(http, token, repo, number, secs, finished).await
}

/// `GET /queue/info` as `admin` sees it, polled every 20 ms until `ready` holds (at most
/// `secs`).
pub async fn wait_for_queue(
    http: &Http,
    admin: &str,
    secs: u64,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let info = http
            .get("/api/queue/info", Some(admin))
            .await
            .expect(200)
            .json();
        if ready(&info) {
            return info;
        }
        assert!(
            Instant::now() < deadline,
            "the queue did not get there in time: {info}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls a pipeline until `done(pipeline)` or the timeout.
pub async fn wait_for(
    http: &Http,
    token: &str,
    repo: i64,
    number: i64,
    secs: u64,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let p = http
            .get(
                &format!("/api/repos/{repo}/pipelines/{number}"),
                Some(token),
            )
            .await
            .json();
        if done(&p) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "pipeline did not get there in time: {p:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn finished(p: &Value) -> bool {
    matches!(
        p["status"].as_str(),
        Some("success" | "failure" | "killed" | "error" | "canceled")
    )
}

fn step<'a>(p: &'a Value, name: &str) -> &'a Value {
    p["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| w["children"].as_array().unwrap())
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {p:#}"))
}

/// A step's output lines.
pub async fn log_text(
    http: &Http,
    token: &str,
    repo: i64,
    number: i64,
    step_id: i64,
) -> Vec<String> {
    let entries = http
        .get(
            &format!("/api/repos/{repo}/logs/{number}/{step_id}"),
            Some(token),
        )
        .await
        .expect(200)
        .json();
    entries
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == 0)
        .map(|e| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(e["data"].as_str().unwrap())
                .unwrap();
            String::from_utf8(bytes).unwrap()
        })
        .collect()
}

const GOOD: &str = r#"
steps:
  - name: hello
    image: sh
    commands:
      - echo hello from $CI_REPO at $CI_COMMIT_BRANCH
      - echo secret is $${MY_SECRET}
    environment:
      MY_SECRET:
        from_secret: my_secret
  - name: broken
    image: sh
    commands:
      - echo about to fail
      - exit 3
    failure: ignore
  - name: after
    image: sh
    commands:
      - test -f README.md
      - echo still running
"#;

/// Alice's repository `alice/app` with the secret `my_secret` = `hunter2` (push and manual
/// events): its id.
pub(crate) async fn repo_with_secret(s: &TestServer, p: &Principals) -> i64 {
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    s.http
        .post(
            &format!("/api/repos/{id}/secrets"),
            Some(&p.alice),
            r#"{"name":"my_secret","value":"hunter2","events":["push","manual"]}"#,
        )
        .await
        .expect(200);
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_runs_the_pipeline_with_statuses_exit_codes_and_masked_logs() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let id = repo_with_secret(&s, &p).await;

    let out = push(&s, "alice/app", &[(".woodpecker.yaml", GOOD)], "add ci").await;
    assert!(out.is_empty() || !out.contains("could not notify"), "{out}");
    let list = s
        .http
        .get(&format!("/api/repos/{id}/pipelines"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(
        list.as_array().unwrap().len(),
        1,
        "the push created one pipeline"
    );
    assert_eq!(list[0]["event"], "push");
    assert_eq!(list[0]["branch"], "main");
    let number = list[0]["number"].as_i64().unwrap();

    let done = wait_for(&s.http, &p.alice, id, number, 60, finished).await;
    assert_eq!(done["status"], "success", "{done:#}");
    assert_eq!(step(&done, "clone")["state"], "success");
    assert_eq!(step(&done, "hello")["state"], "success");
    assert_eq!(step(&done, "hello")["exit_code"], 0);
    assert_eq!(step(&done, "broken")["state"], "failure");
    assert_eq!(step(&done, "broken")["exit_code"], 3);
    assert_eq!(step(&done, "after")["state"], "success");
    assert!(
        done["started"].as_i64().unwrap() > 0
            && done["finished"].as_i64().unwrap() >= done["started"].as_i64().unwrap()
    );

    // `$${VAR}` escapes config substitution, so the shell expands the secret.
    let hello = log_text(
        &s.http,
        &p.alice,
        id,
        number,
        step(&done, "hello")["id"].as_i64().unwrap(),
    )
    .await;
    assert!(
        hello.contains(&"hello from alice/app at main".to_string()),
        "{hello:?}"
    );
    assert!(
        hello.contains(&"secret is ********".to_string()),
        "{hello:?}"
    );
    assert!(
        hello.iter().any(|l| l.starts_with("+ echo hello")),
        "commands are echoed: {hello:?}"
    );
    let broken = log_text(
        &s.http,
        &p.alice,
        id,
        number,
        step(&done, "broken")["id"].as_i64().unwrap(),
    )
    .await;
    assert_eq!(
        broken,
        ["+ echo about to fail", "about to fail", "+ exit 3"]
    );
    // As upstream: output lines only (the exit code is on the step), numbered from 0.
    let raw = s
        .http
        .get(
            &format!(
                "/api/repos/{id}/logs/{number}/{}",
                step(&done, "broken")["id"]
            ),
            Some(&p.alice),
        )
        .await
        .expect(200)
        .json();
    let shape: Vec<(i64, i64)> = raw
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["line"].as_i64().unwrap(), e["type"].as_i64().unwrap()))
        .collect();
    assert_eq!(shape, [(0, 0), (1, 0), (2, 0)]);

    // The secret is nowhere in the API's answers nor in either database file.
    let all = s
        .http
        .get(
            &format!("/api/repos/{id}/pipelines/{number}"),
            Some(&p.alice),
        )
        .await
        .text();
    assert!(!all.contains("hunter2"));
    for file in ["woodlark.db", "woodlark.db-wal", "logs.db", "logs.db-wal"] {
        let bytes = std::fs::read(s.dir.path().join(file)).unwrap_or_default();
        assert!(
            !bytes.windows(7).any(|w| w == b"hunter2"),
            "{file} holds the secret"
        );
    }

    // Download, config and metadata.
    let dl = s
        .http
        .get(
            &format!(
                "/api/repos/{id}/logs/{number}/{}/download",
                step(&done, "hello")["id"]
            ),
            Some(&p.alice),
        )
        .await
        .expect(200);
    assert!(
        dl.header("content-disposition")
            .unwrap()
            .starts_with("attachment")
    );
    assert!(dl.text().contains("secret is ********"));
    let config = s
        .http
        .get(
            &format!("/api/repos/{id}/pipelines/{number}/config"),
            Some(&p.alice),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(config[0]["name"], ".woodpecker.yaml");
    let meta = s
        .http
        .get(
            &format!("/api/repos/{id}/pipelines/{number}/metadata"),
            Some(&p.alice),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(meta["curr"]["number"], number);
    assert_eq!(meta["repo"]["name"], "app");
    assert!(meta["repo"]["org_id"].is_i64());
    // The swagger's `id` is a string; upstream leaves it out.
    assert!(meta.get("id").is_none(), "{meta}");

    // Reads need pull permission: bob gets 404, anonymous 401.
    s.http
        .get(&format!("/api/repos/{id}/pipelines/{number}"), Some(&p.bob))
        .await
        .expect(404);
    s.http
        .get(&format!("/api/repos/{id}/pipelines"), None)
        .await
        .expect(401);
}

const FAILING: &str = r#"
steps:
  - name: build
    image: sh
    commands:
      - echo building
      - exit 2
  - name: deploy
    image: sh
    commands:
      - echo never
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_skip_later_steps_and_filters_work() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    push(&s, "alice/app", &[(".woodpecker.yaml", FAILING)], "failing").await;
    let done = wait_for(&s.http, &p.alice, id, 1, 60, finished).await;
    assert_eq!(done["status"], "failure");
    assert_eq!(step(&done, "build")["state"], "failure");
    assert_eq!(step(&done, "build")["exit_code"], 2);
    assert_eq!(step(&done, "deploy")["state"], "skipped");

    // [skip ci] creates nothing.
    push(&s, "alice/app", &[("x.txt", "1")], "docs [skip ci]").await;
    let list = s
        .http
        .get(&format!("/api/repos/{id}/pipelines"), Some(&p.alice))
        .await
        .json();
    assert_eq!(list.as_array().unwrap().len(), 1);

    // A config that filters everything out: 204 with Pipeline-Filtered on a manual run.
    push(
        &s,
        "alice/app",
        &[(
            ".woodpecker.yaml",
            "when:\n  event: tag\nsteps:\n  - name: a\n    image: sh\n    commands: [\"true\"]\n",
        )],
        "tags only",
    )
    .await;
    let r = s
        .http
        .post(
            &format!("/api/repos/{id}/pipelines"),
            Some(&p.alice),
            r#"{"branch":"main"}"#,
        )
        .await
        .expect(204);
    assert_eq!(r.header("pipeline-filtered"), Some("true"));

    // A broken config: status error with errors[], never a 500.
    push(
        &s,
        "alice/app",
        &[(".woodpecker.yaml", "steps: [unclosed\n")],
        "broken yaml",
    )
    .await;
    let list = s
        .http
        .get(&format!("/api/repos/{id}/pipelines"), Some(&p.alice))
        .await
        .json();
    assert_eq!(list[0]["status"], "error");
    assert!(!list[0]["errors"].as_array().unwrap().is_empty());
    // As upstream: such a pipeline has no `workflows` field (the UI reads `children` of any
    // workflow it is given).
    let broken = s
        .http
        .get(
            &format!("/api/repos/{id}/pipelines/{}", list[0]["number"]),
            Some(&p.alice),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(broken["status"], "error");
    assert!(broken.get("workflows").is_none(), "{broken}");

    // List filters.
    let failed = s
        .http
        .get(
            &format!("/api/repos/{id}/pipelines?status=failure"),
            Some(&p.alice),
        )
        .await
        .json();
    assert_eq!(failed.as_array().unwrap().len(), 1);
    // Asked twice: a refused query is never kept as a rendered page (the cache is looked up
    // before the query is parsed).
    for _ in 0..2 {
        s.http
            .get(
                &format!("/api/repos/{id}/pipelines?status=bogus"),
                Some(&p.alice),
            )
            .await
            .expect(400);
    }
    s.http
        .get(
            &format!("/api/repos/{id}/pipelines?before=yesterday"),
            Some(&p.alice),
        )
        .await
        .expect(400);
    let none = s
        .http
        .get(
            &format!("/api/repos/{id}/pipelines?event=tag"),
            Some(&p.alice),
        )
        .await
        .json();
    assert!(none.as_array().unwrap().is_empty());
    let latest = s
        .http
        .get(&format!("/api/repos/{id}/pipelines/latest"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(latest["status"], "error");

    // Deleting: refused while active, allowed when done; logs too.
    s.http
        .delete(&format!("/api/repos/{id}/pipelines/1"), Some(&p.bob))
        .await
        .expect(404);
    s.http
        .delete(&format!("/api/repos/{id}/logs/1"), Some(&p.alice))
        .await
        .expect(204);
    s.http
        .delete(&format!("/api/repos/{id}/pipelines/1"), Some(&p.alice))
        .await
        .expect(204);
    s.http
        .get(&format!("/api/repos/{id}/pipelines/1"), Some(&p.alice))
        .await
        .expect(404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_a_running_step_within_two_seconds() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    // Steps run sandboxed (their own PID namespace, no view of the data dir): the test finds
    // the step's process by a sleep duration nothing else uses.
    let marker = format!("600.{}", std::process::id());
    let config = format!(
        "steps:\n  - name: sleepy\n    image: sh\n    commands:\n      - sleep {marker} & sleep {marker}; wait\n"
    );
    push(&s, "alice/app", &[(".woodpecker.yaml", &config)], "sleep").await;
    wait_for(&s.http, &p.alice, id, 1, 60, |p| {
        p["workflows"].as_array().is_some_and(|w| !w.is_empty())
            && step(p, "sleepy")["state"] == "running"
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sleepers(&marker).len() < 2 {
        assert!(Instant::now() < deadline, "the step's sleeps never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    s.http
        .post(
            &format!("/api/repos/{id}/pipelines/1/cancel"),
            Some(&p.bob),
            "",
        )
        .await
        .expect(404);
    let started = Instant::now();
    s.http
        .post(
            &format!("/api/repos/{id}/pipelines/1/cancel"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(204);
    let done = wait_for(&s.http, &p.alice, id, 1, 10, |p| {
        step(p, "sleepy")["state"] == "killed"
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(done["status"], "killed");
    assert_eq!(done["cancel_info"]["canceled_by_user"], "alice");
    // The step's processes (the shell's and the sandbox's) are gone.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !sleepers(&marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "step processes {:?} survived the cancel",
            sleepers(&marker)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Canceling again is a clear 400.
    s.http
        .post(
            &format!("/api/repos/{id}/pipelines/1/cancel"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(400);
}

/// Pids of the live (not zombie) processes running `sleep <duration>`.
pub fn sleepers(duration: &str) -> Vec<String> {
    let wanted = format!("sleep\0{duration}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let dir = e.ok()?.path();
            let cmdline = std::fs::read(dir.join("cmdline")).ok()?;
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_string();
            (cmdline == wanted.as_bytes() && state != "Z")
                .then(|| dir.file_name()?.to_str().map(String::from))
                .flatten()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_manual_runs_and_restarts() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.alice),
            r#"{"require_approval":"all_events"}"#,
        )
        .await
        .expect(200);
    push(
        &s,
        "alice/app",
        &[(
            ".woodpecker.yaml",
            "steps:\n  - name: a\n    image: sh\n    commands: [\"echo $GREETING\"]\n",
        )],
        "needs approval",
    )
    .await;
    let blocked = s
        .http
        .get(&format!("/api/repos/{id}/pipelines/1"), Some(&p.alice))
        .await
        .json();
    assert_eq!(blocked["status"], "blocked");
    assert_eq!(step(&blocked, "a")["state"], "blocked");
    s.http
        .post(
            &format!("/api/repos/{id}/pipelines/1/restart"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(404);
    s.http
        .post(&format!("/api/repos/{id}/pipelines/1"), Some(&p.alice), "")
        .await
        .expect(400);
    let approved = s
        .http
        .post(
            &format!("/api/repos/{id}/pipelines/1/approve"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(200)
        .json();
    assert_eq!(approved["status"], "pending");
    assert_eq!(approved["reviewed_by"], "alice");
    s.http
        .post(
            &format!("/api/repos/{id}/pipelines/1/approve"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(400);
    let done = wait_for(&s.http, &p.alice, id, 1, 60, finished).await;
    assert_eq!(done["status"], "success");

    // A second push is blocked and declined.
    push(&s, "alice/app", &[("b.txt", "b")], "second").await;
    let declined = s
        .http
        .post(
            &format!("/api/repos/{id}/pipelines/2/decline"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(200)
        .json();
    assert_eq!(declined["status"], "declined");
    assert_eq!(step(&declined, "a")["state"], "declined");

    // Manual runs skip approval; variables reach the steps.
    let manual = s
        .http
        .post(
            &format!("/api/repos/{id}/pipelines"),
            Some(&p.alice),
            r#"{"branch":"main","variables":{"GREETING":"hi there"}}"#,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(manual["event"], "manual");
    let n = manual["number"].as_i64().unwrap();
    let done = wait_for(&s.http, &p.alice, id, n, 60, finished).await;
    assert_eq!(done["status"], "success");
    let lines = log_text(
        &s.http,
        &p.alice,
        id,
        n,
        step(&done, "a")["id"].as_i64().unwrap(),
    )
    .await;
    assert!(lines.contains(&"hi there".to_string()), "{lines:?}");

    // Restart: a new pipeline with parent and rerun_count; other query params become variables.
    let restarted = s
        .http
        .post(
            &format!("/api/repos/{id}/pipelines/{n}?GREETING=again"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(200)
        .json();
    assert_eq!(restarted["parent"], n);
    assert_eq!(restarted["rerun_count"], 1);
    let n2 = restarted["number"].as_i64().unwrap();
    let done = wait_for(&s.http, &p.alice, id, n2, 60, finished).await;
    let lines = log_text(
        &s.http,
        &p.alice,
        id,
        n2,
        step(&done, "a")["id"].as_i64().unwrap(),
    )
    .await;
    assert!(lines.contains(&"again".to_string()), "{lines:?}");
    s.http
        .post(
            &format!("/api/repos/{id}/pipelines/{n}?event=deployment&deploy_to=prod"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(403);
    s.http
        .post(
            &format!("/api/repos/{id}/pipelines/{n}?event=nonsense"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(400);
    s.http
        .post(&format!("/api/repos/{id}/pipelines"), Some(&p.bob), "{}")
        .await
        .expect(404);
    s.http
        .post(
            &format!("/api/repos/{id}/pipelines"),
            Some(&p.alice),
            r#"{"branch":"nope"}"#,
        )
        .await
        .expect(404);
}

/// The `CI_*` variables that describe the run beyond its commit: the previous pipeline of
/// the branch (`CI_PREV_*`), the step's own URL, the server's host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_see_the_previous_pipeline_of_their_branch() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let config = "steps:\n  - name: a\n    image: sh\n    commands:\n      - echo \"prev=$CI_PREV_PIPELINE_NUMBER/$CI_PREV_PIPELINE_STATUS/$CI_PREV_COMMIT_MESSAGE\"\n      - echo \"step=$CI_STEP_URL host=$CI_SYSTEM_HOST\"\n      - test \"$CI_PIPELINE_NUMBER\" = 1 || exit 0\n      - exit 1\n";
    let log_of = |n: i64| {
        let (http, token) = (s.http.clone(), p.alice.clone());
        async move {
            let done = wait_for(&http, &token, id, n, 60, finished).await;
            let step_id = step(&done, "a")["id"].as_i64().unwrap();
            (done, log_text(&http, &token, id, n, step_id).await)
        }
    };
    push(&s, "alice/app", &[(".woodpecker.yaml", config)], "first").await;
    let (first, lines) = log_of(1).await;
    assert_eq!(first["status"], "failure");
    assert!(lines.contains(&"prev=//".to_string()), "{lines:?}");
    push(&s, "alice/app", &[("b.txt", "b")], "second").await;
    let (second, lines) = log_of(2).await;
    assert_eq!(second["status"], "success");
    assert!(
        lines.contains(&"prev=1/failure/first".to_string()),
        "{lines:?}"
    );
    // `step=<public URL>/repos/{id}/pipeline/2/<step> host=<the public URL's host>`.
    let step_line = lines.iter().find(|l| l.starts_with("step=")).unwrap();
    let (url, host) = step_line["step=".len()..].split_once(" host=").unwrap();
    let (public, step_no) = url
        .split_once(&format!("/repos/{id}/pipeline/2/"))
        .unwrap_or_else(|| panic!("{step_line}"));
    assert!(step_no.parse::<u32>().is_ok(), "{step_line}");
    assert_eq!(
        public.split_once("://").map(|(_, h)| h),
        Some(host),
        "{step_line}"
    );
}

/// As upstream's restart: the event may only be made a deployment, `deploy_to` names its
/// target, `deploy_task` its task, and both reach the steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_as_a_deployment_carries_its_target_and_task() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    push(
        &s,
        "alice/app",
        &[(
            ".woodpecker.yaml",
            "steps:\n  - name: a\n    image: sh\n    commands: [\"echo to=$CI_PIPELINE_DEPLOY_TARGET task=$CI_PIPELINE_DEPLOY_TASK\"]\n",
        )],
        "deployable",
    )
    .await;
    wait_for(&s.http, &p.alice, id, 1, 60, finished).await;
    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.alice),
            r#"{"allow_deploy":true}"#,
        )
        .await
        .expect(200);
    let restart = |query: &'static str| {
        let http = s.http.clone();
        let token = p.alice.clone();
        async move {
            http.post(
                &format!("/api/repos/{id}/pipelines/1?{query}"),
                Some(&token),
                "",
            )
            .await
        }
    };
    let refused = restart("event=push").await.expect(400);
    assert!(
        refused.text().contains("can only be made a deployment"),
        "{}",
        refused.text()
    );
    restart("event=nonsense").await.expect(400);
    let deploy = restart("event=deployment&deploy_to=prod&deploy_task=migrate")
        .await
        .expect(200)
        .json();
    assert_eq!(
        (
            &deploy["event"],
            &deploy["deploy_to"],
            &deploy["deploy_task"]
        ),
        (&json!("deployment"), &json!("prod"), &json!("migrate"))
    );
    assert!(deploy["variables"].get("deploy_task").is_none(), "{deploy}");
    let n = deploy["number"].as_i64().unwrap();
    let done = wait_for(&s.http, &p.alice, id, n, 60, finished).await;
    let lines = log_text(
        &s.http,
        &p.alice,
        id,
        n,
        step(&done, "a")["id"].as_i64().unwrap(),
    )
    .await;
    assert!(
        lines.contains(&"to=prod task=migrate".to_string()),
        "{lines:?}"
    );
    // Without `event`, the target stays the pipeline's; the task is kept unless given.
    let again = restart("deploy_to=staging").await.expect(200).json();
    assert_eq!(
        (&again["event"], &again["deploy_to"], &again["deploy_task"]),
        (&json!("push"), &json!(""), &json!(""))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_admin_endpoints() {
    let s = TestServer::start().await; // no runner: work stays queued
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    push(
        &s,
        "alice/app",
        &[(
            ".woodpecker.yaml",
            "steps:\n  - name: a\n    image: sh\n    commands: [\"true\"]\n",
        )],
        "queued",
    )
    .await;
    for path in ["/api/queue/info", "/api/pipelines"] {
        s.http.get(path, None).await.expect(401);
        s.http.get(path, Some(&p.alice)).await.expect(403);
    }
    let info = s
        .http
        .get("/api/queue/info", Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(info["paused"], false);
    assert_eq!(info["pending"].as_array().unwrap().len(), 1);
    assert_eq!(info["pending"][0]["labels"]["repo"], "alice/app");
    assert_eq!(info["stats"]["pending_count"], 1);
    let active = s
        .http
        .get("/api/pipelines", Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(active[0]["full_name"], "alice/app");
    s.http
        .post("/api/queue/pause", Some(&p.alice), "")
        .await
        .expect(403);
    s.http
        .post("/api/queue/pause", Some(&p.admin), "")
        .await
        .expect(204);
    assert_eq!(
        s.http.get("/api/queue/info", Some(&p.admin)).await.json()["paused"],
        true
    );
    s.http
        .post("/api/queue/resume", Some(&p.admin), "")
        .await
        .expect(204);
    // Nothing is running (only pending): norunningpipelines answers at once.
    s.http
        .get("/api/queue/norunningpipelines", Some(&p.admin))
        .await
        .expect(204);
    // Canceling a pending pipeline: nothing started, so `canceled`.
    s.http
        .post(
            &format!("/api/repos/{id}/pipelines/1/cancel"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(204);
    let p1 = s
        .http
        .get(&format!("/api/repos/{id}/pipelines/1"), Some(&p.alice))
        .await
        .json();
    assert_eq!(p1["status"], "canceled");
    assert_eq!(p1["workflows"][0]["state"], "skipped");
    assert!(
        s.http.get("/api/queue/info", Some(&p.admin)).await.json()["pending"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

/// The attack: an agent asks about a workflow another agent holds. Bob's org agent (another
/// tenant) and an instance-wide agent that never took it learn nothing (404, as for a workflow
/// that does not exist); the agent that leased it learns of the cancel, also after its report
/// ended the lease. Its other calls stay the holder's alone (409).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_learn_only_about_their_own_workflows() {
    let s = TestServer::start().await; // no runner: the remote agents take the work
    let p = s.principals().await;
    let http = &s.http;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let repo_id = repo["id"].as_i64().unwrap();
    let org_of = |token: &str| {
        let token = token.to_string();
        async move {
            http.get("/api/user", Some(&token)).await.expect(200).json()["org_id"]
                .as_i64()
                .unwrap()
        }
    };
    let (alice_org, bob_org) = (org_of(&p.alice).await, org_of(&p.bob).await);
    let agent_token = |path: String, owner: String, name: &'static str| async move {
        let body = format!(r#"{{"name":"{name}"}}"#);
        http.post(&path, Some(&owner), &body)
            .await
            .expect(200)
            .json()["token"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let alices = agent_token(
        format!("/api/orgs/{alice_org}/agents"),
        p.alice.clone(),
        "alices",
    )
    .await;
    let bobs = agent_token(format!("/api/orgs/{bob_org}/agents"), p.bob.clone(), "bobs").await;
    let global = agent_token("/api/agents".into(), p.admin.clone(), "global").await;

    push(
        &s,
        "alice/app",
        &[(
            ".woodpecker.yaml",
            "steps:\n  - name: a\n    image: sh\n    commands: [\"true\"]\n",
        )],
        "queued",
    )
    .await;
    let info = br#"{"platform":"linux/amd64","backend":"local","capacity":1,"version":"t"}"#;
    let work = http
        .send("POST", "/api/agent/next", Some(&alices), Some(info), &[])
        .await
        .expect(200)
        .json();
    let wf = work["workflow_id"].as_i64().unwrap();
    let canceled = format!("/api/agent/workflows/{wf}/canceled");
    let ask = |token: String, wait: u64| {
        let path = canceled.clone();
        async move {
            http.send_within("GET", &path, Some(&token), None, Duration::from_secs(wait))
                .await
        }
    };

    // Before the cancel: the holder's long poll waits; the others are refused at once.
    assert!(ask(alices.clone(), 1).await.is_none(), "the holder waits");
    for (who, token) in [("another org's agent", &bobs), ("another agent", &global)] {
        let r = ask(token.clone(), 5)
            .await
            .unwrap_or_else(|| panic!("{who}: held open instead of refused"));
        assert_eq!(r.status.as_u16(), 404, "{who}: {}", r.text());
        for call in ["init", "extend"] {
            http.send(
                "POST",
                &format!("/api/agent/workflows/{wf}/{call}"),
                Some(token),
                None,
                &[],
            )
            .await
            .expect(409);
        }
        http.send(
            "POST",
            &format!("/api/agent/workflows/{wf}/done"),
            Some(token),
            Some(br#"{"state":"success"}"#),
            &[],
        )
        .await
        .expect(409);
    }
    // A workflow that does not exist reads the same.
    let missing = http
        .send_within(
            "GET",
            "/api/agent/workflows/999999/canceled",
            Some(&alices),
            None,
            Duration::from_secs(5),
        )
        .await
        .expect("answered at once");
    assert_eq!(missing.status.as_u16(), 404);

    // The cancel reaches the holder, also after its `done` ended the lease; only the holder.
    http.post(
        &format!("/api/repos/{repo_id}/pipelines/1/cancel"),
        Some(&p.alice),
        "",
    )
    .await
    .expect(204);
    let told = ask(alices.clone(), 5).await.expect("answered at once");
    assert_eq!(told.status.as_u16(), 200, "{}", told.text());
    assert_eq!(told.json()["canceled"], true);
    http.send(
        "POST",
        &format!("/api/agent/workflows/{wf}/done"),
        Some(&alices),
        Some(br#"{"state":"killed"}"#),
        &[],
    )
    .await
    .expect(204);
    let told = ask(alices.clone(), 5).await.expect("answered at once");
    assert_eq!(told.status.as_u16(), 200, "{}", told.text());
    assert_eq!(told.json()["canceled"], true);
    for token in [&bobs, &global] {
        let r = ask(token.clone(), 5).await.expect("answered at once");
        assert_eq!(r.status.as_u16(), 404, "{}", r.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_agent_runs_the_pipeline_when_the_local_runner_is_off() {
    let s = TestServer::start().await; // runner off
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let agent = s
        .http
        .post("/api/agents", Some(&p.admin), r#"{"name":"remote-1"}"#)
        .await
        .expect(200)
        .json();
    let token = agent["token"].as_str().unwrap().to_string();
    // Wrong tokens are refused by the agent endpoints.
    s.http
        .send("POST", "/api/agent/next", Some("nope"), Some(b"{}"), &[])
        .await
        .expect(401);

    let workdir = s.dir.path().join("remote-runs");
    let agent_log = s.dir.path().join("agent.log");
    let child = spawn_agent(s.http.addr, &token, &workdir, &agent_log);
    push(
        &s,
        "alice/app",
        &[(
            ".woodpecker.yaml",
            "steps:\n  - name: remote\n    image: sh\n    commands: [\"echo ran remotely\"]\n",
        )],
        "remote",
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let p = s
            .http
            .get(&format!("/api/repos/{id}/pipelines/1"), Some(&p.alice))
            .await
            .json();
        if finished(&p) {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "the remote agent did not run the pipeline: {p:#}\nagent log:\n{}",
            std::fs::read_to_string(&agent_log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    drop(child);
    assert_eq!(done["status"], "success", "{done:#}");
    assert_eq!(done["workflows"][0]["agent_id"], agent["id"]);
    let lines = log_text(
        &s.http,
        &p.alice,
        id,
        1,
        step(&done, "remote")["id"].as_i64().unwrap(),
    )
    .await;
    assert!(lines.contains(&"ran remotely".to_string()), "{lines:?}");
    // The agent's contact time is recorded (flushed periodically, not per request).
    s.app_state.ci.queue.flush_contact().await.unwrap();
    let a = s
        .http
        .get(&format!("/api/agents/{}", agent["id"]), Some(&p.admin))
        .await
        .json();
    assert!(a["last_contact"].as_i64().unwrap() > 0);
    assert_eq!(a["backend"], "local", "the agent's own details are stored");
    assert!(a["platform"].as_str().unwrap().contains('/'), "{a}");
    assert_eq!(a["capacity"], 1);
    assert!(a["last_work"].as_i64().unwrap() > 0);
}

/// For a server run as a process: a git forge (in the data dir `dir`), and alice's
/// repository on it whose pipeline is one step `slow` printing `first line`, sleeping
/// `sleep` seconds and printing `last line`; returns the repository's id.
pub async fn slow_repo_on(
    http: &Http,
    dir: &std::path::Path,
    admin: &str,
    alice: &str,
    sleep: u64,
) -> i64 {
    let forge_dir = dir.join("forge");
    std::fs::create_dir_all(forge_dir.join("alice")).unwrap();
    let body = serde_json::json!({"type": "git", "url": format!("file://{}", forge_dir.display())})
        .to_string();
    let forge = http
        .post("/api/forges", Some(admin), &body)
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    let bare = forge_dir.join("alice/app.git");
    git(
        &forge_dir,
        &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()],
    );
    let work = dir.join("w");
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    let pipeline = format!(
        "steps:\n  - name: slow\n    image: sh\n    commands:\n      - echo first line\n      - sleep {sleep}\n      - echo last line\n"
    );
    std::fs::write(work.join(".woodpecker.yaml"), pipeline).unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "slow"]);
    git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
    http.post(
        &format!("/api/repos?forge_remote_id=alice/app&forge_id={forge}"),
        Some(alice),
        "",
    )
    .await
    .expect(200)
    .json()["id"]
        .as_i64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_pipeline_then_restart_finishes_it_and_keeps_logs() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &with_runner(dir.path()));
    let admin = String::from_utf8(cli_user_add(&config, "root", true).stdout)
        .unwrap()
        .trim()
        .to_string();
    let alice = String::from_utf8(cli_user_add(&config, "alice", false).stdout)
        .unwrap()
        .trim()
        .to_string();
    let server = Process::start(&config);
    let http = Http::new(server.addr);
    let id = slow_repo_on(&http, dir.path(), &admin, &alice, 3).await;
    http.post(&format!("/api/repos/{id}/pipelines"), Some(&alice), "{}")
        .await
        .expect(200);

    // Wait until the first line is stored, then kill -9.
    let deadline = Instant::now() + Duration::from_secs(30);
    let step_id = loop {
        let p = http
            .get(&format!("/api/repos/{id}/pipelines/1"), Some(&alice))
            .await
            .json();
        if p["workflows"].as_array().is_some_and(|w| !w.is_empty()) {
            let s = step(&p, "slow");
            if s["state"] == "running" {
                let lines = log_text(&http, &alice, id, 1, s["id"].as_i64().unwrap()).await;
                if lines.iter().any(|l| l == "first line") {
                    break s["id"].as_i64().unwrap();
                }
            }
        }
        assert!(Instant::now() < deadline, "pipeline never started: {p:#}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    drop(server); // SIGKILL + wait

    let server = Process::start(&config);
    let http = Http::new(server.addr);
    let done = wait_for(&http, &alice, id, 1, 60, finished).await;
    assert_eq!(
        done["status"], "success",
        "the pipeline is re-run after the crash: {done:#}"
    );
    let lines = log_text(&http, &alice, id, 1, step_id).await;
    assert!(
        lines.iter().filter(|l| *l == "first line").count() >= 1,
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l == "last line"), "{lines:?}");
    // Line numbers stay unique and increasing across the re-run.
    let entries = http
        .get(&format!("/api/repos/{id}/logs/1/{step_id}"), Some(&alice))
        .await
        .json();
    let numbers: Vec<i64> = entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["line"].as_i64().unwrap())
        .collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_push_supersedes_the_running_one() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.alice),
            r#"{"cancel_previous_pipeline_events":["push"]}"#,
        )
        .await
        .expect(200);
    let slow = "steps:\n  - name: slow\n    image: sh\n    commands: [\"sleep 600\"]\n";
    push(&s, "alice/app", &[(".woodpecker.yaml", slow)], "one").await;
    wait_for(&s.http, &p.alice, id, 1, 60, |p| p["status"] == "running").await;
    push(&s, "alice/app", &[("x", "2")], "two").await;
    let first = wait_for(&s.http, &p.alice, id, 1, 10, finished).await;
    let second = s
        .http
        .get(&format!("/api/repos/{id}/pipelines/2"), Some(&p.alice))
        .await
        .json();
    assert_eq!(first["status"], "killed");
    assert_eq!(first["cancel_info"]["superseded_by"], second["id"]);
    s.http
        .post(
            &format!("/api/repos/{id}/pipelines/2/cancel"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_get_docker_config_for_their_image_registry() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    // Repo scope wins over global for the same address; other registries are not handed out.
    s.http
        .post(
            "/api/registries",
            Some(&p.admin),
            r#"{"address":"registry.example.com","username":"global","password":"g-pass"}"#,
        )
        .await
        .expect(200);
    s.http
        .post(
            &format!("/api/repos/{id}/registries"),
            Some(&p.alice),
            r#"{"address":"registry.example.com","username":"robot","password":"r-pass-123"}"#,
        )
        .await
        .expect(200);
    s.http
        .post(
            &format!("/api/repos/{id}/registries"),
            Some(&p.alice),
            r#"{"address":"ghcr.io","username":"other","password":"o-pass"}"#,
        )
        .await
        .expect(200);
    // The step shows its config.json in the log (base64, so masking leaves it whole): the
    // sandbox lets it write nowhere the test could read but its own workspace.
    let config = "steps:\n  - name: build\n    image: registry.example.com/tools/builder:1\n    commands:\n      - echo docker-config=$$(base64 -w0 $${DOCKER_CONFIG}/config.json)\n      - echo r-pass-123\n  - name: plain\n    image: sh\n    commands:\n      - test -z \"$${DOCKER_CONFIG}\"\n";
    push_files(&s, "alice/app", &[(".woodpecker.yaml", config)], "registry").await;
    let done = wait_for(&s.http, &p.alice, id, 1, 60, finished).await;
    assert_eq!(done["status"], "success", "{done:#}");
    let lines = log_text(
        &s.http,
        &p.alice,
        id,
        1,
        step(&done, "build")["id"].as_i64().unwrap(),
    )
    .await;
    let written: Value = serde_json::from_slice(&docker_config_from(&lines)).unwrap();
    let auths = written["auths"].as_object().unwrap();
    assert_eq!(auths.len(), 1, "{written}");
    let auth = auths["registry.example.com"]["auth"].as_str().unwrap();
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(auth)
            .unwrap(),
        b"robot:r-pass-123"
    );
    assert!(
        lines.contains(&"********".to_string()),
        "registry passwords are masked: {lines:?}"
    );
}

/// The config.json a step printed as `docker-config=<base64>`.
pub fn docker_config_from(lines: &[String]) -> Vec<u8> {
    let encoded = lines
        .iter()
        .find_map(|l| l.strip_prefix("docker-config="))
        .unwrap_or_else(|| panic!("no docker-config= line in {lines:?}"));
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_cancel_step_cancels_the_whole_pipeline() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    // Two workflows: `gate` fails with `failure: cancel`; `slow` would run for a minute.
    push(
        &s,
        "alice/app",
        &[
            (".woodpecker/gate.yaml", "steps:\n  - name: check\n    image: sh\n    commands: [\"sleep 1\", \"exit 4\"]\n    failure: cancel\n"),
            (".woodpecker/slow.yaml", "steps:\n  - name: wait\n    image: sh\n    commands: [\"sleep 60\"]\n"),
        ],
        "gate",
    )
    .await;
    let done = wait_for(&s.http, &p.alice, id, 1, 30, |p| {
        p["status"] == "killed"
            && p["workflows"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| w["state"] != "running" && w["state"] != "pending")
    })
    .await;
    assert_eq!(done["cancel_info"]["canceled_by_step"], "check");
    assert_eq!(step(&done, "check")["state"], "failure");
    assert_eq!(step(&done, "check")["exit_code"], 4);
    assert_eq!(step(&done, "wait")["state"], "killed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_output_and_an_endless_line_are_stored_whole() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    // 30,000 lines at once, then 300,000 bytes without a newline.
    let config = "steps:\n  - name: loud\n    image: sh\n    commands:\n      - seq 1 30000\n      - head -c 300000 /dev/zero | tr '\\0' x\n";
    push(&s, "alice/app", &[(".woodpecker.yaml", config)], "loud").await;
    let done = wait_for(&s.http, &p.alice, id, 1, 60, finished).await;
    assert_eq!(done["status"], "success", "{done:#}");
    let step_id = step(&done, "loud")["id"].as_i64().unwrap();
    let lines = log_text(&s.http, &p.alice, id, 1, step_id).await;
    let numbers: Vec<&String> = lines
        .iter()
        .filter(|l| l.bytes().all(|b| b.is_ascii_digit()) && !l.is_empty())
        .collect();
    assert_eq!(numbers.len(), 30_000, "every line of the flood");
    assert!(
        numbers
            .iter()
            .enumerate()
            .all(|(i, l)| **l == (i + 1).to_string())
    );
    let xs: Vec<&String> = lines
        .iter()
        .filter(|l| !l.is_empty() && l.bytes().all(|b| b == b'x'))
        .collect();
    assert!(xs.len() >= 5, "the endless line is split: {}", xs.len());
    assert!(xs.iter().all(|l| l.len() <= 64 * 1024));
    assert_eq!(xs.iter().map(|l| l.len()).sum::<usize>(), 300_000);
}

/// Pipeline and event bodies are kept between equal requests (`state::rendered`); a read
/// after a change must never get a body from before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_pages_never_outlive_a_change() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/kept").await;
    let id = repo["id"].as_i64().unwrap();
    let get_list = || async {
        s.http
            .get(&format!("/api/repos/{id}/pipelines"), Some(&p.alice))
            .await
            .expect(200)
            .json()
    };
    let get_one = || async {
        s.http
            .get(&format!("/api/repos/{id}/pipelines/1"), Some(&p.alice))
            .await
            .json()
    };
    let events = || async {
        s.http
            .get("/events?limit=100&record_type=pipelines", Some(&p.alice))
            .await
            .expect(200)
            .json()
    };
    for _ in 0..2 {
        assert_eq!(get_list().await, serde_json::json!([]));
        assert_eq!(events().await["data"], serde_json::json!([]));
    }

    push(
        &s,
        "alice/kept",
        &[(
            ".woodpecker.yaml",
            "steps:\n  - name: a\n    image: sh\n    commands: [\"true\"]\n",
        )],
        "first",
    )
    .await;
    let listed: Value = get_list().await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed:#}");
    let pending = get_one().await;
    assert_eq!(
        get_one().await,
        pending,
        "an unchanged pipeline reads the same"
    );
    assert_eq!(pending["status"], "pending");
    let seen = events().await["data"].as_array().unwrap().len();
    assert!(seen >= 1, "the new pipeline is in the feed at once");

    s.http
        .post(
            &format!("/api/repos/{id}/pipelines/1/cancel"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(204);
    let canceled = get_one().await;
    assert_ne!(canceled["status"], "pending", "{canceled:#}");
    assert_eq!(get_list().await[0]["status"], canceled["status"]);
    assert!(events().await["data"].as_array().unwrap().len() > seen);
}

/// Creations compile before their write with the number they expect (`ci::numbers`): runs
/// started at once must each carry their own number, and after the newest pipeline is
/// deleted (the table's next number goes back, the server's guess does not) the write
/// compiles again with the number it really gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pipeline_is_compiled_with_its_own_number() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    push(
        &s,
        "alice/app",
        &[(
            ".woodpecker.yaml",
            "steps:\n  - name: number\n    image: sh\n    environment:\n      SUBSTITUTED: \"n${CI_PIPELINE_NUMBER}\"\n    commands: [\"echo env $CI_PIPELINE_NUMBER sub $$SUBSTITUTED\"]\n",
        )],
        "echo the number",
    )
    .await;
    let says_its_number = |n: i64| {
        let (http, token) = (s.http.clone(), p.alice.clone());
        async move {
            let done = wait_for(&http, &token, id, n, 60, finished).await;
            assert_eq!(done["status"], "success", "{done:#}");
            let step_id = step(&done, "number")["id"].as_i64().unwrap();
            let lines = log_text(&http, &token, id, n, step_id).await;
            assert!(
                lines.contains(&format!("env {n} sub n{n}")),
                "pipeline {n}: {lines:?}"
            );
        }
    };
    says_its_number(1).await;

    let runs: Vec<_> = (0..8)
        .map(|_| {
            let (http, token) = (s.http.clone(), p.alice.clone());
            tokio::spawn(async move {
                start_manually(&http, &token, id, r#"{"branch":"main"}"#).await["number"]
                    .as_i64()
                    .unwrap()
            })
        })
        .collect();
    let mut numbers = Vec::new();
    for run in runs {
        numbers.push(run.await.unwrap());
    }
    numbers.sort();
    assert_eq!(numbers, (2..=9).collect::<Vec<_>>());
    for n in numbers {
        says_its_number(n).await;
    }

    // The newest pipeline goes: the next run gets its number again, compiled for it.
    s.http
        .delete(&format!("/api/repos/{id}/pipelines/9"), Some(&p.alice))
        .await
        .expect(204);
    for expected in [9, 10] {
        let run = start_manually(&s.http, &p.alice, id, r#"{"branch":"main"}"#).await;
        assert_eq!(run["number"], expected);
        says_its_number(expected).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_variables_are_validated_and_never_replace_the_servers() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    push(
        &s,
        "alice/app",
        &[(
            ".woodpecker.yaml",
            "steps:\n  - name: a\n    image: sh\n    commands: [\"echo sha=$CI_COMMIT_SHA\"]\n",
        )],
        "first",
    )
    .await;
    let first = wait_for(&s.http, &p.alice, id, 1, 60, finished).await;
    let runs = format!("/api/repos/{id}/pipelines");
    for (variables, why) in [
        (r#"{"CI_COMMIT_SHA":"0000"}"#, "reserved"),
        (r#"{"ci_repo":"x"}"#, "reserved"),
        (r#"{"CI":"x"}"#, "reserved"),
        (r#"{"A-B":"x"}"#, "is not valid"),
        (r#"{"":"x"}"#, "is not valid"),
        (r#"{"9LIVES":"x"}"#, "is not valid"),
    ] {
        let body = format!(r#"{{"branch":"main","variables":{variables}}}"#);
        let text = s
            .http
            .post(&runs, Some(&p.alice), &body)
            .await
            .expect(400)
            .text();
        assert!(text.contains(why), "{variables}: {text}");
    }
    let restart = format!("/api/repos/{id}/pipelines/1?CI_COMMIT_SHA=0000");
    let text = s
        .http
        .post(&restart, Some(&p.alice), "")
        .await
        .expect(400)
        .text();
    assert!(text.contains("reserved"), "{text}");
    // A cron job's variables are checked the same way, on create and update.
    let crons = format!("/api/repos/{id}/cron");
    let bad = r#"{"name":"nightly","schedule":"@daily","variables":{"CI_REPO":"x"}}"#;
    let text = s
        .http
        .post(&crons, Some(&p.alice), bad)
        .await
        .expect(400)
        .text();
    assert!(text.contains("reserved"), "{text}");
    let cron = s
        .http
        .post(
            &crons,
            Some(&p.alice),
            r#"{"name":"nightly","schedule":"@daily"}"#,
        )
        .await
        .expect(200)
        .json();
    let one = format!("{crons}/{}", cron["id"]);
    let bad = r#"{"variables":{"A B":"x"}}"#;
    let text = s
        .http
        .patch(&one, Some(&p.alice), bad)
        .await
        .expect(400)
        .text();
    assert!(text.contains("is not valid"), "{text}");
    // Nothing was created by the refused requests.
    let list = s.http.get(&runs, Some(&p.alice)).await.expect(200).json();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list:#}");
    let sha = first["commit"].as_str().unwrap().to_string();
    let step_id = step(&first, "a")["id"].as_i64().unwrap();
    let lines = log_text(&s.http, &p.alice, id, 1, step_id).await;
    assert!(lines.contains(&format!("sha={sha}")), "{lines:?}");
}

/// Services and `detach` steps as upstream runs them: running while the workflow goes on,
/// their output kept as a log, stopped when the workflow is over (then success); a detached
/// step that fails by itself shows it without failing the workflow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_and_detached_steps_keep_logs_and_run_until_the_workflow_ends() {
    let s = TestServer::start_with_runner().await;
    services_and_detached_steps(&s, "sh").await;
}

/// A service and two detached steps (one that fails by itself) beside two plain steps, with
/// steps of `image` (the docker backend runs this too).
pub async fn services_and_detached_steps(s: &TestServer, image: &str) {
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let config = "services:\n  - name: db\n    image: sh\n    commands: [\"echo db ready\", \"sleep 60\"]\nsteps:\n  - name: waiter\n    image: sh\n    commands: [\"sleep 3\", \"echo built\"]\n  - name: side\n    image: sh\n    detach: true\n    commands: [\"echo side started\", \"sleep 60\"]\n  - name: flaky\n    image: sh\n    detach: true\n    commands: [\"echo giving up\", \"exit 3\"]\n  - name: last\n    image: sh\n    commands: [\"sleep 1\"]\n"
        .replace("image: sh", &format!("image: {image}"));
    push_files(s, "alice/app", &[(".woodpecker.yaml", &config)], "ci").await;
    // While `waiter` runs, the service is running too (not done a moment after it started).
    let during = wait_for(&s.http, &p.alice, id, 1, 60, |p| {
        p["workflows"][0]["children"].as_array().is_some_and(|c| {
            c.iter()
                .any(|s| s["name"] == "waiter" && s["state"] == "running")
        })
    })
    .await;
    assert_eq!(step_of(&during, "db")["state"], "running", "{during:#}");
    assert!(
        step_of(&during, "db").get("finished").is_none(),
        "{during:#}"
    );

    let started = std::time::Instant::now();
    let done = wait_for(&s.http, &p.alice, id, 1, 60, finished).await;
    assert_eq!(done["status"], "success", "{done:#}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "the workflow waited for its service to end by itself"
    );
    for name in ["db", "side"] {
        let step = step_of(&done, name);
        assert_eq!(step["state"], "success", "{name}: {done:#}");
        assert!(
            step["finished"].as_i64() >= step["started"].as_i64(),
            "{step:#}"
        );
    }
    let flaky = step_of(&done, "flaky");
    assert_eq!(flaky["state"], "failure", "{done:#}");
    assert_eq!(flaky["exit_code"], 3, "{done:#}");
    let log = |name: &str| {
        let step_id = step_of(&done, name)["id"].as_i64().unwrap();
        let (http, token) = (&s.http, p.alice.clone());
        async move { log_text(http, &token, id, 1, step_id).await }
    };
    assert!(
        log("db").await.iter().any(|l| l == "db ready"),
        "service log"
    );
    assert!(
        log("side").await.iter().any(|l| l == "side started"),
        "detached log"
    );
    assert!(log("flaky").await.iter().any(|l| l == "giving up"));
}

/// Upstream's workflow `concurrency:`: with a limit of 1, a second pipeline of the same
/// workflow waits in the queue (pending, visible there) while the first runs, although the
/// runner has a free slot, and runs once it ended; another repository's workflow (another
/// group) does not wait; a waiting pipeline that is canceled leaves the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_limit_makes_a_workflow_wait_for_its_group() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let app = s.git_repo(&p.admin, &p.alice, "alice/app").await["id"]
        .as_i64()
        .unwrap();
    let other = s.git_repo(&p.admin, &p.alice, "alice/other").await["id"]
        .as_i64()
        .unwrap();
    let config =
        "concurrency: 1\nsteps:\n  - name: hold\n    image: sh\n    commands: [\"sleep 4\"]\n";
    let running = |p: &Value| p["status"] == "running";
    push_files(&s, "alice/app", &[(".woodpecker.yaml", config)], "one").await;
    wait_for(&s.http, &p.alice, app, 1, 60, running).await;
    push_files(&s, "alice/app", &[("b.txt", "b")], "two").await;
    push_files(&s, "alice/app", &[("c.txt", "c")], "three").await;

    // The runner has a second slot, but pipelines 2 and 3 wait for their group's one.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let get = |number: i64| {
        let (http, token) = (&s.http, p.alice.clone());
        async move {
            http.get(
                &format!("/api/repos/{app}/pipelines/{number}"),
                Some(&token),
            )
            .await
            .expect(200)
            .json()
        }
    };
    for number in [2, 3] {
        let waiting = get(number).await;
        assert_eq!(waiting["status"], "pending", "{waiting:#}");
    }
    let info = s
        .http
        .get("/api/queue/info", Some(&p.admin))
        .await
        .expect(200)
        .json();
    let pending = info["pending"].as_array().cloned().unwrap_or_default();
    assert!(
        pending.iter().any(|t| t["concurrency_limit"] == 1
            && t["concurrency_group"]
                .as_str()
                .unwrap_or("")
                .ends_with("/woodpecker/")),
        "the waiting workflows are in the queue with their group: {info:#}"
    );

    // Another repository's workflow is another group: it takes the free slot at once.
    push_files(&s, "alice/other", &[(".woodpecker.yaml", config)], "other").await;
    wait_for(&s.http, &p.alice, other, 1, 30, running).await;

    // Pipeline 3 is canceled while it waits: it leaves the queue and never runs.
    s.http
        .post(
            &format!("/api/repos/{app}/pipelines/3/cancel"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(204);

    let first = wait_for(&s.http, &p.alice, app, 1, 60, finished).await;
    let second = wait_for(&s.http, &p.alice, app, 2, 60, finished).await;
    assert_eq!(second["status"], "success", "{second:#}");
    assert!(
        second["started"].as_i64() >= first["finished"].as_i64(),
        "the second ran after the first: {first:#} {second:#}"
    );
    let third = get(3).await;
    assert_eq!(third["status"], "canceled", "{third:#}");
    let step = step_of(&third, "hold");
    assert!(step.get("started").is_none(), "it never ran: {third:#}");
    let info = s
        .http
        .get("/api/queue/info", Some(&p.admin))
        .await
        .expect(200)
        .json();
    let third_wf = third["workflows"][0]["id"].to_string();
    for list in ["pending", "waiting_on_deps", "running"] {
        let tasks = info[list].as_array().cloned().unwrap_or_default();
        assert!(
            !tasks
                .iter()
                .any(|t| t["id"].as_str() == Some(third_wf.as_str())),
            "the canceled workflow left the queue: {info:#}"
        );
    }
}

/// Upstream's linter advice reaches a pipeline's `errors[]` as warnings that do not stop it:
/// a step without an `event` filter, a deprecated variable; a config with the filter has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn linter_advice_is_a_warning_on_the_pipeline() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let config = "steps:\n  - name: build\n    image: sh\n    commands: [\"echo ${CI_COMMIT_AUTHOR_AVATAR}\"]\n";
    push_files(&s, "alice/app", &[(".woodpecker.yaml", config)], "ci").await;
    let done = wait_for(&s.http, &p.alice, id, 1, 60, finished).await;
    assert_eq!(done["status"], "success", "{done:#}");
    let errors = done["errors"].as_array().expect("errors");
    let kinds: Vec<(&str, bool)> = errors
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                e["is_warning"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [("deprecation", true), ("bad_habit", true)],
        "{errors:#?}"
    );
    assert_eq!(errors[1]["data"]["file"], ".woodpecker.yaml");
    assert_eq!(errors[1]["data"]["field"], "steps[0]");
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("`CI_COMMIT_AUTHOR_AVATAR` is deprecated"),
        "{errors:#?}"
    );

    let filtered =
        "when:\n  event: push\nsteps:\n  - name: build\n    image: sh\n    commands: [echo ok]\n";
    push_files(&s, "alice/app", &[(".woodpecker.yaml", filtered)], "ci 2").await;
    let done = wait_for(&s.http, &p.alice, id, 2, 60, finished).await;
    assert_eq!(done["status"], "success", "{done:#}");
    assert!(
        done.get("errors")
            .is_none_or(|e| e.as_array().is_some_and(Vec::is_empty)),
        "{done:#}"
    );
}

/// Issue 45's log attack: a step printing without end. Its log stops at
/// `pipeline.max_step_log_bytes` with a line saying so (the step and the steps after it go
/// on), both read paths stream what is kept, and deleting the pipeline gives the space back
/// (on SQLite it stayed in `logs.db`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_log_stops_at_its_limit_and_a_deleted_pipeline_frees_its_space() {
    let dir = tempfile::tempdir().unwrap();
    let tables = format!(
        "{}[pipeline]\nmax_step_log_bytes = 1500000\n",
        with_runner(dir.path())
    );
    let s = TestServer::start_in_with_tables(dir, "", &tables).await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/loud").await;
    let id = repo["id"].as_i64().unwrap();
    // Lines of 100 bytes with the newline: 12,000 fit (1.2 MB), 20,000 do not.
    let config = r#"
steps:
  - name: big
    image: sh
    commands:
      - i=0; while [ $$i -lt 12000 ]; do printf 'line %05d %088d\n' $$i 0; i=$$((i+1)); done
  - name: loud
    image: sh
    commands:
      - i=0; while [ $$i -lt 20000 ]; do printf 'line %05d %088d\n' $$i 0; i=$$((i+1)); done; echo finished
  - name: after
    image: sh
    commands:
      - echo after
"#;
    push_files(&s, "alice/loud", &[(".woodpecker.yaml", config)], "loud").await;
    let done = wait_for(&s.http, &p.alice, id, 1, 120, finished).await;
    assert_eq!(done["status"], "success", "{done:#}");
    let step_id = |name: &str| step_of(&done, name)["id"].as_i64().unwrap();

    let big = log_text(&s.http, &p.alice, id, 1, step_id("big")).await;
    // Every line printed, in order, under the limit.
    let printed: Vec<&String> = big.iter().filter(|l| l.starts_with("line ")).collect();
    assert_eq!(printed.len(), 12_000, "{:?}", &big[..3]);
    assert!(
        printed[11_999].starts_with("line 11999 "),
        "{}",
        printed[11_999]
    );
    assert!(!big.iter().any(|l| l.contains("reached its limit")));
    let loud = log_text(&s.http, &p.alice, id, 1, step_id("loud")).await;
    let last = loud.last().unwrap();
    assert!(
        last.contains("reached its limit of 1500000 bytes"),
        "{last}"
    );
    assert!(!loud.iter().any(|l| l == "finished"));
    assert!(loud.len() < 15_100 && loud.len() > 14_000, "{}", loud.len());
    assert_eq!(step_of(&done, "loud")["state"], "success");
    assert_eq!(step_of(&done, "after")["state"], "success");
    // The download streams the same text.
    let download = s
        .http
        .get(
            &format!("/api/repos/{id}/logs/1/{}/download", step_id("loud")),
            Some(&p.alice),
        )
        .await
        .expect(200);
    let text = download.text();
    assert!(
        text.ends_with("later output is not kept\n"),
        "{}",
        &text[text.len() - 200..]
    );
    assert_eq!(text.lines().count(), loud.len());

    if crate::util::on_postgres() {
        return;
    }
    let pages = || async {
        s.app_state
            .ci
            .log_reads
            .read(|c| c.query_row_for_tests("PRAGMA page_count", [], |r| r.get::<_, i64>(0)))
            .await
            .unwrap()
    };
    let full = pages().await;
    s.http
        .delete(&format!("/api/repos/{id}/pipelines/1"), Some(&p.admin))
        .await
        .expect(204);
    let emptied = pages().await;
    // About 2.7 MB of lines (660 pages of 4 KiB) left the file.
    assert!(emptied < full - 500, "{full} pages before, {emptied} after");
}
