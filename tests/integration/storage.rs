//! The store as the operator configures it (`[storage]`): what servers sharing one database
//! must agree on (on SQLite, and on PostgreSQL with `WOODLARK_TEST_STORE=postgres`), and
//! several servers on one PostgreSQL database (always on the test process's cluster).

use woodlark::app::App;
use woodlark::config::Config;
use woodlark::logging::{LogControl, LogLevel};

use serde_json::Value;

use crate::pipelines::{push_files, wait_for};
use crate::util::{TestServer, config_text, test_storage_url, with_runner};

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
    let url = woodlark_store::pg::testing::Cluster::shared().fresh_database();
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("shared.key");
    let mut servers = Vec::new();
    for _ in 0..n {
        let dir = tempfile::tempdir().unwrap();
        let tables = with_runner(dir.path())
            + &format!(
                "[storage]\nurl = {url:?}\nsecret_key_file = {:?}\n",
                key.display().to_string()
            );
        servers.push(TestServer::start_in_with_tables(dir, "", &tables).await);
    }
    (keys, servers)
}

/// Every event in the feed, paged from the start by following `next` links.
async fn all_events(s: &TestServer, token: &str) -> Vec<Value> {
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
        let done = wait_for(&reader.http, &p.alice, id, number, 120, |p| {
            p["status"] == "success" || p["status"] == "failure" || p["status"] == "error"
        })
        .await;
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
}

/// Awaits `futures` one after another.
async fn in_turn<T>(futures: impl Iterator<Item = impl std::future::Future<Output = T>>) -> Vec<T> {
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
