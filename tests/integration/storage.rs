//! The store as the operator configures it (`[storage]`): what servers sharing one database
//! must agree on (on SQLite, and on PostgreSQL with `WOODLARK_TEST_STORE=postgres`), and
//! several servers on one PostgreSQL database (always on the test process's cluster).

use woodlark::app::App;
use woodlark::config::Config;
use woodlark::logging::{LogControl, LogLevel};

use serde_json::Value;

use crate::pipelines::{finished, push_files, start_manually, step_of, wait_for, wait_for_queue};
use crate::streams::{Sse, entry_text, now_ns};
use crate::util::{
    BIN, Process, TestServer, config_text, server_config_text, test_storage_url, with_runner,
};

/// Config for a server on `data_dir` whose `[storage]` table names `key_file` and `url`.
fn config(data_dir: &std::path::Path, key_file: &std::path::Path, url: Option<&str>) -> Config {
    let mut storage = format!(
        "[storage]\nsecret_key_file = {:?}\n",
        key_file.display().to_string()
    );
    if let Some(url) = url {
        storage += &format!("url = {url:?}\n");
    }
    Config::from_toml(&config_text(data_dir, &storage), "t.toml", &[]).unwrap()
}

fn build(config: Config) -> Result<App, String> {
    App::build(config, LogControl::detached(LogLevel::Info)).map_err(|e| e.to_string())
}

/// TLS to PostgreSQL as the operator gets it wrong: a CA that did not sign the database's
/// certificate, and `verify-full` without a CA. The server refuses to start and says why;
/// with the right CA (every test server on PostgreSQL, `sslmode=verify-full`) it starts.
#[tokio::test]
async fn a_server_refuses_a_database_its_tls_settings_do_not_trust() {
    let url = woodlark_store::pg::testing::Cluster::shared().fresh_database();
    let (base, _) = url
        .split_once("&sslrootcert=")
        .expect("a verify-full test URL");
    let dir = tempfile::tempdir().unwrap();
    let other_ca = dir.path().join("other-ca.pem");
    std::fs::write(
        &other_ca,
        woodlark_store::pg::testing::test_ca("not ours").1,
    )
    .unwrap();
    let key = dir.path().join("secrets.key");

    let wrong_ca = format!("{base}&sslrootcert={}", other_ca.display());
    let err = build(config(dir.path(), &key, Some(&wrong_ca)))
        .err()
        .expect("a certificate from another CA is refused");
    assert!(
        err.contains("cannot connect to PostgreSQL at 127.0.0.1:")
            && err.contains("TLS handshake")
            && err.contains("UnknownIssuer"),
        "{err}"
    );
    let err = build(config(dir.path(), &key, Some(base)))
        .err()
        .expect("verify-full without a CA is refused");
    assert!(err.contains("sslrootcert="), "{err}");
    let app = build(config(dir.path(), &key, Some(&url))).expect("the right CA");
    drop(app);
}

/// A second server on the same database (a replica, or the one server restarted) with
/// another sealing key refuses to start, saying which setting is wrong and showing nothing of
/// either key; with the key the database knows it starts.
#[tokio::test]
async fn a_server_with_another_sealing_key_refuses_to_start() {
    let url = test_storage_url();
    let first_dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let (key, other_key) = (keys.path().join("a.key"), keys.path().join("b.key"));

    let app = build(config(first_dir.path(), &key, url.as_deref())).expect("first start");
    drop(app);
    // A replica's own data dir (or the same one, on SQLite), the other key.
    let replica_dir = tempfile::tempdir().unwrap();
    let second_data = if url.is_some() {
        replica_dir.path()
    } else {
        first_dir.path()
    };
    let err = build(config(second_data, &other_key, url.as_deref()))
        .err()
        .expect("another key is refused");
    assert!(
        err.contains("storage.secret_key_file") && err.contains("same key file"),
        "{err}"
    );
    // Nothing of the key itself is shown.
    let key_text = std::fs::read_to_string(&other_key).unwrap();
    assert!(!err.contains(key_text.trim()), "{err}");
    build(config(second_data, &key, url.as_deref())).expect("the database's key is accepted");
}

/// `n` servers on one PostgreSQL database, each with its own data dir and local runner, all
/// with the same sealing key (in the returned directory): replicas.
async fn replicas(n: usize) -> (tempfile::TempDir, Vec<TestServer>) {
    replicas_with_runners(&vec![true; n]).await
}

/// Replicas as [`replicas`], one per entry of `runners`: whether that one runs workflows.
async fn replicas_with_runners(runners: &[bool]) -> (tempfile::TempDir, Vec<TestServer>) {
    let cluster = SharedDatabase::new();
    let mut servers = Vec::new();
    for runs in runners {
        let dir = tempfile::tempdir().unwrap();
        let tables = cluster.tables(dir.path(), *runs);
        servers.push(TestServer::start_in_with_tables(dir, "", &tables).await);
    }
    (cluster.keys, servers)
}

/// A fresh PostgreSQL database and a sealing key file for replicas to share.
pub(crate) struct SharedDatabase {
    url: String,
    keys: tempfile::TempDir,
}

impl SharedDatabase {
    pub(crate) fn new() -> SharedDatabase {
        SharedDatabase {
            url: woodlark_store::pg::testing::Cluster::shared().fresh_database(),
            keys: tempfile::tempdir().unwrap(),
        }
    }

    /// The config tables of a replica on `data_dir`, with or without a local runner.
    pub(crate) fn tables(&self, data_dir: &std::path::Path, runner: bool) -> String {
        let runner = if runner {
            with_runner(data_dir)
        } else {
            String::new()
        };
        let key = self.keys.path().join("shared.key");
        runner
            + &format!(
                "[storage]\nurl = {:?}\nsecret_key_file = {:?}\n",
                self.url,
                key.display().to_string()
            )
    }
}

/// Every event in the feed, paged from the start by following `next` links.
pub(crate) async fn all_events(s: &TestServer, token: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut uri = "/events?limit=7".to_string();
    loop {
        let page = s.http.get(&uri, Some(token)).await.expect(200).json();
        let data = page["data"].as_array().unwrap().clone();
        if data.is_empty() {
            return out;
        }
        out.extend(data);
        let next = page["links"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["rel"] == "next")
            .and_then(|l| l["uri"].as_str())
            .map(str::to_string);
        match next {
            Some(next) => uri = next,
            None => return out,
        }
    }
}

/// Replicas on one database: 20 pushes delivered to one of them make pipelines 1..=20, each
/// once, all run to success by whichever replica's runner takes them; every replica lists
/// the same pipelines, and pages the same events, also while pushes go on.
async fn pushes_through_replicas(n: usize) {
    let (_keys, servers) = replicas(n).await;
    let first = &servers[0];
    let p = first.principals().await;
    let repo = first.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let pipeline = "steps:\n  - name: build\n    image: sh\n    commands: [\"echo built\"]\n";
    for i in 1..=20 {
        let body = format!("{i}\n");
        push_files(
            first,
            "alice/app",
            &[(".woodpecker.yaml", pipeline), ("n.txt", body.as_str())],
            &format!("push {i}"),
        )
        .await;
        if i == 10 {
            // Mid-way, with pipelines running: every replica pages the same feed.
            let feeds = in_turn(servers.iter().map(|s| all_events(s, &p.admin))).await;
            let seen = feeds.iter().map(Vec::len).min().unwrap();
            for feed in &feeds {
                assert_eq!(feed[..seen], feeds[0][..seen], "a replica's feed differs");
            }
        }
    }
    for number in 1..=20 {
        let reader = &servers[number as usize % n];
        let done = wait_for(&reader.http, &p.alice, id, number, 120, finished).await;
        assert_eq!(done["status"], "success", "pipeline {number}: {done}");
    }
    let lists = in_turn(servers.iter().map(|s| async {
        s.http
            .get(
                &format!("/api/repos/{id}/pipelines?per_page=50"),
                Some(&p.alice),
            )
            .await
            .expect(200)
            .json()
    }))
    .await;
    let numbers: Vec<i64> = lists[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, (1..=20).rev().collect::<Vec<i64>>());
    for list in &lists {
        assert_eq!(list, &lists[0], "a replica lists other pipelines");
    }
    let feeds = in_turn(servers.iter().map(|s| all_events(s, &p.admin))).await;
    for feed in &feeds {
        assert_eq!(feed, &feeds[0], "a replica pages another feed");
    }
    // One signing key, whichever replica answers.
    let keys = in_turn(servers.iter().map(|s| async {
        s.http
            .get("/api/signature/public-key", Some(&p.alice))
            .await
            .expect(200)
            .text()
    }))
    .await;
    for key in &keys {
        assert_eq!(key, &keys[0], "replicas serve different signing keys");
    }
}

/// Awaits `futures` one after another.
pub(crate) async fn in_turn<T>(
    futures: impl Iterator<Item = impl std::future::Future<Output = T>>,
) -> Vec<T> {
    let mut out = Vec::new();
    for f in futures.collect::<Vec<_>>() {
        out.push(f.await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_run_twenty_pushes_once_and_agree() {
    pushes_through_replicas(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_run_twenty_pushes_once_and_agree() {
    pushes_through_replicas(3).await;
}

/// A client's streams on replica A follow a pipeline that replica B runs (A has no runner):
/// its pipeline messages, and its step's log lines while they are written, not only once
/// the step has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_one_replica_follows_a_pipeline_another_runs() {
    let (_keys, servers) = replicas_with_runners(&[false, true]).await;
    let (a, b) = (&servers[0], &servers[1]);
    let p = a.principals().await;
    let repo = a.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let (status, _, mut events) =
        Sse::open(a.http.addr, "/api/stream/events", Some(&p.alice), &[]).await;
    assert_eq!(status, 200);

    let config = "steps:\n  - name: ticker\n    image: sh\n    commands:\n      - sleep 1\n      - for i in 1 2 3 4 5 6; do echo \"tick $$i $$(date +%s%N)\"; sleep 0.5; done\n";
    push_files(a, "alice/app", &[(".woodpecker.yaml", config)], "ticks").await;
    let running = wait_for(&a.http, &p.alice, id, 1, 60, |p| {
        p["workflows"].as_array().is_some_and(|w| !w.is_empty())
            && step_of(p, "ticker")["state"] == "running"
    })
    .await;
    let step_id = step_of(&running, "ticker")["id"].as_i64().unwrap();
    let path = format!("/api/stream/logs/{id}/1/{step_id}");
    let (status, _, mut live) = Sse::open(a.http.addr, &path, Some(&p.alice), &[]).await;
    assert_eq!(status, 200);
    let (mut ticks, mut lags) = (Vec::new(), Vec::new());
    loop {
        let ev = live
            .next(std::time::Duration::from_secs(30))
            .await
            .expect("the log stream ended early");
        if ev.name == "eof" {
            break;
        }
        let entry: Value = serde_json::from_str(&ev.data).unwrap();
        if let Some(rest) = entry_text(&entry).strip_prefix("tick ") {
            let mut parts = rest.split(' ');
            ticks.push(parts.next().unwrap().parse::<i64>().unwrap());
            let written: u128 = parts.next().unwrap().parse().unwrap();
            lags.push(now_ns().saturating_sub(written) / 1_000_000);
        }
    }
    assert_eq!(ticks, [1, 2, 3, 4, 5, 6]);
    // Live: a replay at the end would deliver the first ticks seconds late. Two cores run
    // the whole suite, so one hiccup is tolerated.
    let late = lags[1..].iter().filter(|ms| **ms > 1000).count();
    assert!(late <= 1, "lines arrived late (ms): {lags:?}");

    // The pipeline's messages on A: it ran (on B) and succeeded.
    let mut statuses = Vec::new();
    while statuses.last().map(String::as_str) != Some("success") {
        let ev = events
            .next(std::time::Duration::from_secs(30))
            .await
            .expect("a message for the pipeline B runs");
        let v: Value = serde_json::from_str(&ev.data).unwrap();
        assert_eq!(v["repo"]["full_name"], "alice/app");
        statuses.push(v["pipeline"]["status"].as_str().unwrap().to_string());
    }
    assert!(statuses.iter().any(|s| s == "running"), "{statuses:?}");
    // And B answers the same pipeline.
    let on_b = b
        .http
        .get(&format!("/api/repos/{id}/pipelines/1"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(on_b["status"], "success");
}

/// kill -9 of the replica running a workflow: what it reported before it died is kept, and
/// once its lease runs out (60 s) another replica's runner runs the workflow again and the
/// pipeline ends; nothing stays `running`.
/// Work queued on a replica without a runner reaches another replica's waiting runner as
/// its commit is heard there, not at the runner's 2 s re-check: four times in a row within
/// 700 ms (a re-check lands that soon about once in three).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_takes_work_another_replica_queued_as_it_is_committed() {
    let (_keys, servers) = replicas_with_runners(&[false, true]).await;
    let (a, b) = (&servers[0], &servers[1]);
    let p = a.principals().await;
    let repo = a.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let config = "steps:\n  - name: a\n    image: sh\n    commands: [\"true\"]\n";
    let mut taken = Vec::new();
    for number in 1..=4 {
        // B's two workers wait for work.
        wait_for_queue(&b.http, &p.admin, 30, |info| {
            info["stats"]["worker_count"] == 2
        })
        .await;
        let body = format!("{number}\n");
        push_files(
            a,
            "alice/app",
            &[(".woodpecker.yaml", config), ("n.txt", body.as_str())],
            "push",
        )
        .await;
        let pushed = std::time::Instant::now();
        let path = format!("/api/repos/{id}/pipelines/{number}");
        loop {
            let pipeline = a.http.get(&path, Some(&p.alice)).await.expect(200).json();
            if pipeline["workflows"][0]["agent_id"].as_i64().unwrap_or(0) > 0 {
                break;
            }
            assert!(pushed.elapsed().as_secs() < 60, "never taken: {pipeline}");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        taken.push(pushed.elapsed());
        let done = wait_for(&a.http, &p.alice, id, number, 60, finished).await;
        assert_eq!(done["status"], "success", "{done}");
    }
    assert!(
        taken.iter().all(|t| t.as_millis() < 700),
        "taken after {taken:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_on_a_killed_replica_is_finished_by_another() {
    let db = SharedDatabase::new();
    // A serves the API and at first runs nothing; B, a process of its own, takes the work.
    let a_dir = tempfile::tempdir().unwrap();
    let tables = db.tables(a_dir.path(), false);
    let a = TestServer::start_in_with_tables(a_dir, "", &tables).await;
    let p = a.principals().await;
    let repo = a.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let config = "steps:\n  - name: slow\n    image: sh\n    commands:\n      - echo started\n      - sleep 3\n      - echo finished\n";
    push_files(&a, "alice/app", &[(".woodpecker.yaml", config)], "slow").await;

    let b_dir = tempfile::tempdir().unwrap();
    let b_config = b_dir.path().join("config.toml");
    let text = server_config_text(b_dir.path(), "", &db.tables(b_dir.path(), true));
    std::fs::write(&b_config, text).unwrap();
    let mut b = Process::start(&b_config);
    let running = wait_for(&a.http, &p.alice, id, 1, 60, |p| {
        p["workflows"].as_array().is_some_and(|w| !w.is_empty())
            && step_of(p, "slow")["state"] == "running"
    })
    .await;
    let b_agent = running["workflows"][0]["agent_id"].as_i64().unwrap();
    b.child.kill().unwrap();
    b.child.wait().unwrap();
    let killed = std::time::Instant::now();

    // What B reported is kept: the clone step's end and its log.
    let clone = step_of(&running, "clone");
    assert_eq!(clone["state"], "success", "{running}");
    let clone_log = a
        .http
        .get(
            &format!("/api/repos/{id}/logs/1/{}", clone["id"]),
            Some(&p.alice),
        )
        .await
        .expect(200)
        .json();
    assert!(!clone_log.as_array().unwrap().is_empty());

    // A, restarted with a runner, takes the workflow once B's lease has run out.
    let tables = db.tables(a.dir.path(), true);
    let a_dir = a.stop().await;
    let a = TestServer::start_in_with_tables(a_dir, "", &tables).await;
    let done = wait_for(&a.http, &p.alice, id, 1, 180, finished).await;
    assert_eq!(done["status"], "success", "{done}");
    assert!(
        killed.elapsed() >= std::time::Duration::from_secs(40),
        "re-run before the lease could run out"
    );
    let workflow = &done["workflows"][0];
    assert_eq!(workflow["state"], "success");
    assert_ne!(
        workflow["agent_id"], b_agent,
        "another replica's runner finished it"
    );
    let log = a
        .http
        .get(
            &format!("/api/repos/{id}/logs/1/{}", step_of(&done, "slow")["id"]),
            Some(&p.alice),
        )
        .await
        .expect(200)
        .json();
    let text: Vec<String> = log.as_array().unwrap().iter().map(entry_text).collect();
    assert!(text.iter().any(|l| l.contains("finished")), "{text:?}");
    // Each replica's runner is an agent of its own.
    let agents = a
        .http
        .get("/api/agents", Some(&p.admin))
        .await
        .expect(200)
        .json();
    let names: Vec<&str> = agents
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("local@")), "{names:?}");

    // B's record outlives B. It cannot be deleted while B might only be slow...
    let b_path = format!("/api/agents/{b_agent}");
    let refused = a.http.delete(&b_path, Some(&p.admin)).await.expect(409);
    assert!(
        refused.text().contains("silent for 5 minutes"),
        "{}",
        refused.text()
    );
    // ...and can once it has been silent for five minutes (its last contact moved back
    // rather than waited for).
    a.app_state
        .ci
        .store_for_tests()
        .write(move |c| {
            c.query_row_for_tests(
                "UPDATE agents SET last_contact = last_contact - 300 WHERE id = ?1 RETURNING id",
                [b_agent],
                |r| r.get::<_, i64>(0),
            )
        })
        .await
        .unwrap();
    a.http.delete(&b_path, Some(&p.admin)).await.expect(204);
    a.http.get(&b_path, Some(&p.admin)).await.expect(404);
    // A's own, in use, still cannot: A's runner stored a contact as it took its record.
    let own = agents
        .as_array()
        .unwrap()
        .iter()
        .find(|agent| agent["id"] != b_agent)
        .unwrap()["id"]
        .clone();
    a.http
        .delete(&format!("/api/agents/{own}"), Some(&p.admin))
        .await
        .expect(409);
}

/// Every list the API serves for the records `migrate_copies_a_data_dir…` makes, as JSON
/// (badges as text), keyed by path.
async fn every_list(
    s: &TestServer,
    p: &crate::util::Principals,
    id: i64,
    org: i64,
) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let admin_paths = [
        "/api/users".to_string(),
        "/api/repos".into(),
        "/api/orgs".into(),
        "/api/agents".into(),
        "/api/secrets".into(),
        "/api/registries".into(),
        "/api/pipelines".into(),
        "/api/forges".into(),
    ];
    for path in admin_paths {
        let body = s.http.get(&path, Some(&p.admin)).await.expect(200).json();
        out.push((path, body));
    }
    out.push((
        "/events".into(),
        Value::Array(all_events(s, &p.admin).await),
    ));
    let algod = crate::participation::admin_token(s);
    out.push((
        "/v2/participation".into(),
        crate::participation::list(s, &algod).await,
    ));
    let mut alice_paths = vec![
        "/api/user".to_string(),
        "/api/user/repos".into(),
        "/api/user/feed".into(),
        format!("/api/repos/{id}"),
        format!("/api/repos/{id}/permissions"),
        format!("/api/repos/{id}/branches"),
        format!("/api/repos/{id}/pipelines"),
        format!("/api/repos/{id}/secrets"),
        format!("/api/repos/{id}/registries"),
        format!("/api/repos/{id}/cron"),
        format!("/api/orgs/{org}/secrets"),
        format!("/api/orgs/{org}/registries"),
    ];
    let pipelines = s
        .http
        .get(&format!("/api/repos/{id}/pipelines"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    for pipeline in pipelines.as_array().unwrap() {
        let n = pipeline["number"].as_i64().unwrap();
        let full = s
            .http
            .get(&format!("/api/repos/{id}/pipelines/{n}"), Some(&p.alice))
            .await
            .expect(200)
            .json();
        for workflow in full["workflows"].as_array().unwrap() {
            for step in workflow["children"].as_array().unwrap() {
                alice_paths.push(format!("/api/repos/{id}/logs/{n}/{}", step["id"]));
            }
        }
        alice_paths.push(format!("/api/repos/{id}/pipelines/{n}"));
    }
    for path in alice_paths {
        let body = s.http.get(&path, Some(&p.alice)).await.expect(200).json();
        out.push((path, body));
    }
    let badge = s
        .http
        .get(&format!("/api/badges/{id}/status.svg"), Some(&p.alice))
        .await
        .expect(200)
        .text();
    out.push(("badge".into(), Value::String(badge)));
    // Links name the server's address, which a restart on 127.0.0.1:0 changes.
    let addr = s.http.addr.to_string();
    out.into_iter()
        .map(|(path, body)| {
            let text = body.to_string().replace(&addr, "SERVER");
            (path, serde_json::from_str(&text).unwrap())
        })
        .collect()
}

/// `woodlark migrate --to` moves a stopped server's SQLite data dir — pipelines, logs,
/// secrets, registries, crons, agents, participation keys, events — into an empty
/// PostgreSQL database, and the server on it answers every list the same; a second run into
/// the same database is refused, and the first replica takes over the embedded agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_copies_a_data_dir_and_the_api_answers_the_same() {
    let dir = tempfile::tempdir().unwrap();
    // SQLite, whatever the test pass: the source of the move.
    let sqlite = with_runner(dir.path()) + "[storage]\n";
    let s = TestServer::start_in_with_tables(dir, "", &sqlite).await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let org = repo["org_id"].as_i64().unwrap();
    let config = "steps:\n  - name: build\n    image: sh\n    commands: [\"echo built $${CI_PIPELINE_NUMBER}\"]\n";
    for n in 1..=3 {
        let body = format!("{n}\n");
        push_files(
            &s,
            "alice/app",
            &[(".woodpecker.yaml", config), ("n.txt", body.as_str())],
            &format!("push {n}"),
        )
        .await;
        wait_for(&s.http, &p.alice, id, n, 60, |p| p["status"] == "success").await;
    }
    let post = |path: String, token: &str, body: Value| {
        let http = s.http.clone();
        let token = token.to_string();
        async move {
            http.post(&path, Some(&token), &body.to_string())
                .await
                .expect(200);
        }
    };
    post(
        format!("/api/repos/{id}/secrets"),
        &p.alice,
        serde_json::json!({"name": "deploy_token", "value": "MIGRATED-SECRET", "events": ["push"]}),
    )
    .await;
    post(
        format!("/api/orgs/{org}/secrets"),
        &p.alice,
        serde_json::json!({"name": "org_token", "value": "ORG-SECRET", "events": ["push"]}),
    )
    .await;
    post(
        "/api/secrets".into(),
        &p.admin,
        serde_json::json!({"name": "global_token", "value": "GLOBAL-SECRET", "events": ["push"]}),
    )
    .await;
    post(format!("/api/repos/{id}/registries"), &p.alice, serde_json::json!({"address": "registry.example.com", "username": "bot", "password": "REG-PASS"})).await;
    post(
        format!("/api/repos/{id}/cron"),
        &p.alice,
        serde_json::json!({"name": "nightly", "schedule": "@daily", "branch": "main"}),
    )
    .await;
    post(
        "/api/agents".into(),
        &p.admin,
        serde_json::json!({"name": "remote-1"}),
    )
    .await;
    let algod = crate::participation::admin_token(&s);
    crate::participation::install(&s, &algod, &crate::participation::new_key(3, 0, 100)).await;
    let before = every_list(&s, &p, id, org).await;
    assert!(before.len() > 25, "{} lists", before.len());

    let dir = s.stop().await;
    let config_path = dir.path().join("config.toml");
    std::fs::write(&config_path, server_config_text(dir.path(), "", &sqlite)).unwrap();
    let url = woodlark_store::pg::testing::Cluster::shared().fresh_database();
    let migrate = || {
        std::process::Command::new(BIN)
            .args(["migrate", "--to", &url, "--config"])
            .arg(&config_path)
            .output()
            .unwrap()
    };
    let out = migrate();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for table in [
        "pipelines",
        "steps",
        "log_entries",
        "secrets",
        "events",
        "participation_keys",
        "meta",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(&format!("{table} "))),
            "{table}: {stdout}"
        );
    }
    assert!(stdout.contains("counts and checksums match"), "{stdout}");

    // The same data dir (its sealing key) on the new store: every list answers the same.
    let on_pg = format!("[storage]\nurl = {url:?}\n");
    let s = TestServer::start_in_with_tables(dir, "", &on_pg).await;
    let after = every_list(&s, &p, id, org).await;
    assert_eq!(before.len(), after.len());
    for ((path, was), (_, now)) in before.iter().zip(&after) {
        assert_eq!(was, now, "{path} differs after the move");
    }
    // Into the same database again: refused, saying why.
    let again = migrate();
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("not empty") && err.contains("empty database only"),
        "{err}"
    );
    // A database that does not answer: the reason, said once (it was printed three times).
    let down = std::process::Command::new(BIN)
        .args([
            "migrate",
            "--to",
            "postgres://nobody:x@127.0.0.1:1/db",
            "--config",
        ])
        .arg(&config_path)
        .output()
        .unwrap();
    assert!(!down.status.success());
    let err = String::from_utf8_lossy(&down.stderr);
    assert_eq!(
        err.matches("cannot connect to PostgreSQL").count(),
        1,
        "{err}"
    );
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");

    // With its runner, the server (now a replica) takes over the `local` agent, history and all.
    let dir = s.stop().await;
    let tables = with_runner(dir.path()) + &on_pg;
    let s = TestServer::start_in_with_tables(dir, "", &tables).await;
    let before_agents = &before.iter().find(|(p, _)| p == "/api/agents").unwrap().1;
    let local = before_agents
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "local")
        .unwrap();
    let found = loop {
        let agents = s
            .http
            .get("/api/agents", Some(&p.admin))
            .await
            .expect(200)
            .json();
        if let Some(a) = agents
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["id"] == local["id"] && a["name"] != "local")
        {
            break a.clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let replica = std::fs::read_to_string(s.dir.path().join("replica-id")).unwrap();
    assert_eq!(found["name"], format!("local@{}", replica.trim()));
    let agents = s
        .http
        .get("/api/agents", Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(
        agents.as_array().unwrap().len(),
        before_agents.as_array().unwrap().len()
    );
    // The moved secret still opens with the data dir's key, and numbers go on from 3. (The
    // restart moved the server's port: repairing the repository points its hook there.)
    s.http
        .post(&format!("/api/repos/{id}/repair"), Some(&p.alice), "")
        .await
        .expect(204);
    let uses_secret = "steps:\n  - name: check\n    image: sh\n    environment:\n      TOKEN:\n        from_secret: deploy_token\n    commands: ['test \"$${TOKEN}\" = MIGRATED-SECRET']\n";
    push_files(
        &s,
        "alice/app",
        &[(".woodpecker.yaml", uses_secret)],
        "secret",
    )
    .await;
    let fourth = wait_for(&s.http, &p.alice, id, 4, 60, finished).await;
    assert_eq!(fourth["status"], "success", "{fourth}");
}

/// Behind a proxy without sticky sessions, the sign-in form one replica served is accepted
/// by another, and the session it starts is good on both. (B is a process of its own: keys
/// kept in a process's memory would be shared by servers in this one.)
#[tokio::test]
async fn a_sign_in_form_from_one_replica_is_accepted_by_another() {
    let db = SharedDatabase::new();
    let a_dir = tempfile::tempdir().unwrap();
    let tables = db.tables(a_dir.path(), false);
    let a = TestServer::start_in_with_tables(a_dir, "", &tables).await;
    let b_dir = tempfile::tempdir().unwrap();
    let b_config = b_dir.path().join("config.toml");
    let text = server_config_text(b_dir.path(), "", &db.tables(b_dir.path(), false));
    std::fs::write(&b_config, text).unwrap();
    let b = Process::start(&b_config);
    let b_http = crate::util::Http::new(b.addr);

    let root = a.user("root", true).await;
    let mut browser = crate::web::Browser::new(&a.http);
    let page = browser.get("/authorize").await.expect(200);
    let form_token = crate::web::form_token(&page);
    browser.switch_to(&b_http);
    browser
        .post_form(
            "/authorize",
            &[("form_token", &form_token), ("token", &root)],
        )
        .await
        .expect(303);
    for http in [&b_http, &a.http] {
        browser.switch_to(http);
        let me = crate::web::globals(&browser.get("/web-config.js").await.expect(200));
        assert_eq!(me["USER"]["login"], "root");
    }
}

/// A forge changed through one replica is used as changed by the others: their kept
/// drivers are checked against the stored forge after every identity change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forge_changed_on_one_replica_is_used_as_changed_by_another() {
    let (_keys, servers) = replicas_with_runners(&[false, false]).await;
    let (a, b) = (&servers[0], &servers[1]);
    let p = a.principals().await;
    let forge = a.git_forge(&p.admin).await;
    a.init_git_repo("alice/app");
    b.init_git_repo("alice/other");
    let listed = |s: &TestServer| {
        let http = s.http.clone();
        let token = p.alice.clone();
        async move {
            let all = http
                .get("/api/user/repos?all=true", Some(&token))
                .await
                .expect(200)
                .json();
            all.as_array()
                .unwrap()
                .iter()
                .map(|r| r["full_name"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(a).await, ["alice/app"]);
    let moved = serde_json::json!({"url": format!("file://{}", b.forge_dir().display())});
    b.http
        .patch(
            &format!("/api/forges/{forge}"),
            Some(&p.admin),
            &moved.to_string(),
        )
        .await
        .expect(200);
    assert_eq!(listed(b).await, ["alice/other"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = listed(a).await;
        if now == ["alice/other"] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "A still lists {now:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// A queue paused through one replica holds work on every replica, and a resume through
/// another lets it run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_paused_on_one_replica_is_paused_on_all() {
    let (_keys, servers) = replicas_with_runners(&[true, true]).await;
    let (a, b) = (&servers[0], &servers[1]);
    let p = a.principals().await;
    let repo = a.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    a.http
        .post("/api/queue/pause", Some(&p.admin), "")
        .await
        .expect(204);
    let config = "steps:\n  - name: build\n    image: sh\n    commands: [\"echo built\"]\n";
    push_files(a, "alice/app", &[(".woodpecker.yaml", config)], "held").await;
    // B hears of the pause with A's commit (a notification, milliseconds).
    wait_for_queue(&b.http, &p.admin, 2, |info| info["paused"] == true).await;
    // Longer than a replica takes to read the pause again, and than a runner's re-check.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let held = b
        .http
        .get(&format!("/api/repos/{id}/pipelines/1"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(held["status"], "pending", "{held}");
    b.http
        .post("/api/queue/resume", Some(&p.admin), "")
        .await
        .expect(204);
    let done = wait_for(&a.http, &p.alice, id, 1, 60, finished).await;
    assert_eq!(done["status"], "success", "{done}");
}

/// Manual runs started on two replicas at once, on one repository: each pipeline number is
/// taken once, and each pipeline ran the config compiled for its own number (a replica's
/// guess is often wrong here; the write gives the number back and the creation compiles
/// again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creations_on_two_replicas_at_once_compile_each_pipeline_for_its_number() {
    creations_on_two_replicas_at_once().await
}

/// Creations of one repository reaching two replicas in turn, a moment apart (as a proxy
/// without sticky sessions spreads one repository's hooks): each replica's number book
/// hears the other's creations, so no creation compiles for a number already taken and
/// gives it back. (Without the rule this test saw two numbers given back.)
#[tokio::test]
async fn creations_reaching_two_replicas_in_turn_never_give_a_number_back() {
    let (_keys, servers) = replicas_with_runners(&[false, false]).await;
    let p = servers[0].principals().await;
    let repo = servers[0].git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    push_files(
        &servers[0],
        "alice/app",
        &[(".woodpecker.yaml", "steps:\n  - name: say\n    image: sh\n    commands: [\"echo $${CI_PIPELINE_NUMBER}\"]\n")],
        "numbers",
    )
    .await;
    for n in 2..=7 {
        // A moment apart: the other replica's commit has been heard of.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let http = &servers[n as usize % 2].http;
        let number = start_manually(http, &p.alice, id, r#"{"branch":"main"}"#).await["number"]
            .as_i64()
            .unwrap();
        assert_eq!(number, n);
    }
    for s in &servers {
        let numbers = &s.app_state.ci.numbers;
        assert_eq!((numbers.given_back(), numbers.misses()), (0, 0));
    }
}

async fn creations_on_two_replicas_at_once() {
    let (_keys, servers) = replicas_with_runners(&[true, true]).await;
    let p = servers[0].principals().await;
    let repo = servers[0].git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let config = "steps:\n  - name: say\n    image: sh\n    commands: [\"echo number=$${CI_PIPELINE_NUMBER}\"]\n";
    push_files(
        &servers[0],
        "alice/app",
        &[(".woodpecker.yaml", config)],
        "numbers",
    )
    .await;
    wait_for(&servers[0].http, &p.alice, id, 1, 60, |p| {
        p["status"] == "success"
    })
    .await;
    let runs = (0..10).map(|i| {
        let http = servers[i % 2].http.clone();
        let token = p.alice.clone();
        tokio::spawn(async move {
            start_manually(&http, &token, id, r#"{"branch":"main"}"#).await["number"]
                .as_i64()
                .unwrap()
        })
    });
    let mut numbers = Vec::new();
    for run in runs.collect::<Vec<_>>() {
        numbers.push(run.await.unwrap());
    }
    numbers.sort();
    assert_eq!(numbers, (2..=11).collect::<Vec<i64>>());
    for number in 2..=11 {
        let done = wait_for(&servers[1].http, &p.alice, id, number, 120, finished).await;
        assert_eq!(done["status"], "success", "{done}");
        let step = step_of(&done, "say")["id"].as_i64().unwrap();
        let log = servers[0]
            .http
            .get(
                &format!("/api/repos/{id}/logs/{number}/{step}"),
                Some(&p.alice),
            )
            .await
            .expect(200)
            .json();
        let lines: Vec<String> = log.as_array().unwrap().iter().map(entry_text).collect();
        assert!(
            lines.iter().any(|l| l.trim() == format!("number={number}")),
            "pipeline {number} ran another number's config: {lines:?}"
        );
    }
}
