//! Backups of the embedded store (issue 51): `woodlark backup` (the real binary) against a
//! running server's data dir while clients write, `woodlark restore` and a server started
//! on what it restored, the restores refused, and the scheduled backups with their pruning
//! and metrics. SQLite only: on the PostgreSQL pass the servers' data is not in their data
//! dirs, and `woodlark backup` refuses (checked here too).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::pipelines::{
    finished, log_text, push_files, repo_with_secret, run_manually, step_of, wait_for,
};
use crate::util::{BIN, TestServer, config_text, on_postgres, with_runner, write_config};

/// `woodlark ARGS…` to its end (off the runtime's threads): exit success, stdout, stderr.
async fn woodlark(args: Vec<String>) -> (bool, String, String) {
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(BIN)
            .args(&args)
            .env("NO_COLOR", "1")
            .output()
            .expect("run woodlark")
    })
    .await
    .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn args(list: &[&str], paths: &[&Path]) -> Vec<String> {
    list.iter()
        .map(|s| s.to_string())
        .chain(paths.iter().map(|p| p.display().to_string()))
        .collect()
}

/// `woodlark backup --config CONFIG [--with-key] --to TARGET`.
async fn backup(config: &Path, target: &Path, with_key: bool) -> (bool, String, String) {
    let mut list = args(&["backup", "--config"], &[config]);
    if with_key {
        list.push("--with-key".into());
    }
    list.extend(args(&["--to"], &[target]));
    woodlark(list).await
}

/// `woodlark restore --from BACKUP --config CONFIG`.
async fn restore(backup: &Path, config: &Path) -> (bool, String, String) {
    woodlark(
        args(&["restore", "--from"], &[backup])
            .into_iter()
            .chain(args(&["--config"], &[config]))
            .collect(),
    )
    .await
}

/// A config file, outside `data_dir`, for a server on `data_dir` (`extra` in `[server]`,
/// `tables` after).
fn config_for(data_dir: &Path, tables: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, config_text(data_dir, "") + tables).unwrap();
    (dir, path)
}

/// [`config_for`] with `storage.secret_key_file = key`.
fn config_with_key(data_dir: &Path, key: &Path) -> (tempfile::TempDir, PathBuf) {
    let table = format!(
        "[storage]\nsecret_key_file = {:?}\n",
        key.display().to_string()
    );
    config_for(data_dir, &table)
}

/// The logins of a database file's users.
fn logins_in(db: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn.prepare("SELECT login FROM users").unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_under_four_writers_holds_every_acknowledged_write_and_none_in_part() {
    if on_postgres() {
        return;
    }
    let s = TestServer::start().await;
    let admin = s.user("root", true).await;
    let config = write_config(s.dir.path(), "");
    let stop = Arc::new(AtomicBool::new(false));
    // (login, when the request was sent, when its 200 came back)
    let acked: Arc<Mutex<Vec<(String, Instant, Instant)>>> = Arc::default();
    let mut clients = Vec::new();
    for client in 0..4 {
        let (http, admin, stop, acked) =
            (s.http.clone(), admin.clone(), stop.clone(), acked.clone());
        clients.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let login = format!("w{client}x{n}");
                let sent = Instant::now();
                let body = format!(r#"{{"login":"{login}","email":"{login}@example.com"}}"#);
                http.post("/api/users", Some(&admin), &body)
                    .await
                    .expect(200);
                acked.lock().unwrap().push((login, sent, Instant::now()));
            }
        }));
    }
    // Some thousands of rows first (users and their events).
    while acked.lock().unwrap().len() < 1500 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let target = s.dir.path().join("backups").join("first");
    let began = Instant::now();
    let (ok, out, err) = backup(&config, &target, false).await;
    let ended = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    assert!(ok, "backup failed: {err}\n{out}");
    assert!(out.contains("backed up"), "{out}");
    assert!(
        out.contains("is not in the backup: keep a copy of it apart"),
        "{out}"
    );

    let acked = acked.lock().unwrap().clone();
    let in_backup = logins_in(&target.join("woodlark.db"));
    let before: Vec<&String> = acked
        .iter()
        .filter(|(_, _, at)| *at < began)
        .map(|(l, ..)| l)
        .collect();
    let missing: Vec<&&String> = before.iter().filter(|l| !in_backup.contains(l)).collect();
    assert!(
        missing.is_empty(),
        "acknowledged before the backup, not in it: {missing:?}"
    );
    // Nothing that was never asked for; and the writes went on during the backup.
    for login in &in_backup {
        assert!(
            login == "root" || acked.iter().any(|(l, ..)| l == login),
            "{login} in the backup"
        );
    }
    let during: Vec<Duration> = acked
        .iter()
        .filter(|(_, sent, _)| *sent >= began && *sent <= ended)
        .map(|(_, sent, at)| *at - *sent)
        .collect();
    let outside = acked
        .iter()
        .filter(|(_, sent, _)| *sent < began)
        .map(|(_, sent, at)| *at - *sent)
        .max()
        .unwrap();
    assert!(
        !during.is_empty(),
        "no write was answered while the backup ran"
    );
    assert!(acked.iter().any(|(_, sent, _)| *sent > ended));
    eprintln!(
        "backup of {} users took {:?}; {} writes answered meanwhile, the slowest in {:?} \
         (before it: {:?}); the CLI said:\n{}",
        in_backup.len(),
        ended - began,
        during.len(),
        during.iter().max().unwrap(),
        outside,
        out.lines().next().unwrap_or_default(),
    );
    // Whole transactions only: each user with its `created` event, each such event with
    // its user; and the copy matches its manifest.
    let conn = rusqlite::Connection::open(target.join("woodlark.db")).unwrap();
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
    assert_eq!(
        count(
            "SELECT count(*) FROM users u WHERE NOT EXISTS (SELECT 1 FROM events e \
             WHERE e.record_type = 'users' AND e.action = 'created' \
             AND e.record_id = CAST(u.id AS TEXT))"
        ),
        0
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM events e WHERE e.record_type = 'users' \
             AND e.action = 'created' AND NOT EXISTS (SELECT 1 FROM users u \
             WHERE e.record_id = CAST(u.id AS TEXT))"
        ),
        0
    );
    let manifest = woodlark::store::backup::Manifest::read(&target).unwrap();
    woodlark::store::backup::verify(&target, &manifest).unwrap();
    let users = manifest.databases[0]
        .tables
        .iter()
        .find(|t| t.name == "users")
        .unwrap();
    assert_eq!(users.rows as usize, in_backup.len());
}

const CHECK_SECRET: &str = r#"
skip_clone: true
steps:
  - name: check
    image: sh
    environment:
      MY_SECRET:
        from_secret: my_secret
    commands:
      - test "$${MY_SECRET}" = hunter2
      - echo secret-checked
"#;

/// The events feed's ids, oldest first.
async fn event_ids(s: &TestServer, token: &str, query: &str) -> Vec<String> {
    let page = s
        .http
        .get(&format!("/events?limit=10000{query}"), Some(token))
        .await
        .expect(200)
        .json();
    crate::events::ids(&page)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_on_a_restored_data_dir_goes_on_where_the_backup_was_taken() {
    if on_postgres() {
        return;
    }
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let id = repo_with_secret(&s, &p).await;
    push_files(
        &s,
        "alice/app",
        &[(".woodpecker.yaml", CHECK_SECRET)],
        "check the secret",
    )
    .await;
    let first = wait_for(&s.http, &p.alice, id, 1, 60, finished).await;
    assert_eq!(first["status"], "success", "{first:#}");
    let step = step_of(&first, "check")["id"].as_i64().unwrap();
    let lines = log_text(&s.http, &p.alice, id, 1, step).await;
    assert!(lines.contains(&"secret-checked".to_string()), "{lines:?}");
    let events_before = event_ids(&s, &p.admin, "").await;
    let public_key = s
        .http
        .get("/api/signature/public-key", Some(&p.alice))
        .await
        .expect(200)
        .text();

    let config = write_config(s.dir.path(), "");
    let taken = tempfile::tempdir().unwrap();
    let target = taken.path().join("with-key");
    let (ok, out, err) = backup(&config, &target, true).await;
    assert!(ok, "{err}\n{out}");
    assert!(
        out.contains("The backup directory is private (0700)"),
        "{out}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&target).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
    // The old server stops (its forge's repositories stay where they are).
    let old_dir = s.stop().await;

    let restored = tempfile::tempdir().unwrap();
    let (_config_dir, restore_config) = config_for(restored.path(), "");
    let (ok, out, err) = restore(&target, &restore_config).await;
    assert!(ok, "{err}\n{out}");
    assert!(
        out.contains("counts and checksums match the manifest"),
        "{out}"
    );
    assert!(out.contains("the backup's key, put there"), "{out}");

    let tables = with_runner(restored.path());
    let r = TestServer::start_in_with_tables(restored, "", &tables).await;
    // A token issued before the backup; the same signing key.
    let me = r
        .http
        .get("/api/user", Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(me["login"], "alice");
    let key = r
        .http
        .get("/api/signature/public-key", Some(&p.alice))
        .await
        .expect(200)
        .text();
    assert_eq!(key, public_key);
    // The sealed secret is listed, and opens in a pipeline.
    let secrets = r
        .http
        .get(&format!("/api/repos/{id}/secrets"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert!(
        secrets
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "my_secret"),
        "{secrets}"
    );
    // The old pipeline and its log.
    let old = r
        .http
        .get(&format!("/api/repos/{id}/pipelines/1"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(old["status"], "success");
    assert_eq!(log_text(&r.http, &p.alice, id, 1, step).await, lines);
    // A new run uses the secret.
    let run = run_manually(&r.http, &p.alice, id, r#"{"branch":"main"}"#, 60).await;
    assert_eq!(run["status"], "success", "{run:#}");
    assert_eq!(run["number"], 2);
    let new_step = step_of(&run, "check")["id"].as_i64().unwrap();
    assert!(new_step > step);
    let new_lines = log_text(&r.http, &p.alice, id, 2, new_step).await;
    assert!(
        new_lines.contains(&"secret-checked".to_string()),
        "{new_lines:?}"
    );
    // The events feed goes on after the last event before the backup.
    let events_after = event_ids(&r, &p.admin, "").await;
    assert_eq!(events_after[..events_before.len()], events_before[..]);
    let last = events_before.last().unwrap();
    let newer = event_ids(&r, &p.admin, &format!("&starting_after={last}")).await;
    assert!(!newer.is_empty());
    assert!(newer.iter().all(|e| e > last));
    r.stop().await;
    drop(old_dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restores_into_a_used_data_dir_with_another_key_or_from_a_changed_backup_are_refused() {
    let s = TestServer::start().await;
    s.user("alice", false).await;
    let config = write_config(s.dir.path(), "");
    let taken = tempfile::tempdir().unwrap();
    if on_postgres() {
        let (ok, _, err) = backup(&config, &taken.path().join("b"), false).await;
        assert!(!ok);
        assert!(err.contains("pg_dump --format=custom"), "{err}");
        return;
    }
    let target = taken.path().join("b");
    let (ok, out, err) = backup(&config, &target, false).await;
    assert!(ok, "{err}\n{out}");
    // A second backup under the same name.
    let (ok, _, err) = backup(&config, &target, false).await;
    assert!(!ok);
    assert!(err.contains("exists and is not empty"), "{err}");

    // Into the running server's own data dir.
    let (ok, _, err) = restore(&target, &config).await;
    assert!(!ok);
    assert!(
        err.contains("is not empty") && err.contains("restore only into an empty"),
        "{err}"
    );

    // Without the key, and with another one: refused, and nothing is written.
    let fresh = tempfile::tempdir().unwrap();
    let data = fresh.path().join("data");
    let (_c1, no_key) = config_for(&data, "");
    let (ok, _, err) = restore(&target, &no_key).await;
    assert!(!ok);
    assert!(err.contains("taken without its key"), "{err}");
    assert!(!data.exists());
    let other_key = fresh.path().join("other.key");
    std::fs::write(&other_key, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n").unwrap();
    let (_c2, with_other) = config_with_key(&data, &other_key);
    let (ok, _, err) = restore(&target, &with_other).await;
    assert!(!ok);
    assert!(
        err.contains("has fingerprint") && err.contains("restore with that key"),
        "{err}"
    );
    assert!(!data.exists());

    // A changed table: named.
    let manifest_path = target.join("manifest.json");
    let original = std::fs::read_to_string(&manifest_path).unwrap();
    let mut manifest: Value = serde_json::from_str(&original).unwrap();
    for table in manifest["databases"][0]["tables"].as_array_mut().unwrap() {
        if table["name"] == "users" {
            table["rows"] = Value::from(table["rows"].as_u64().unwrap() + 1);
        }
    }
    std::fs::write(&manifest_path, manifest.to_string()).unwrap();
    let key = s.dir.path().join("secrets.key");
    let (_c3, with_key) = config_with_key(&data, &key);
    let (ok, _, err) = restore(&target, &with_key).await;
    assert!(!ok);
    assert!(
        err.contains("damaged") && err.contains("table users has"),
        "{err}"
    );
    assert!(!data.exists());

    // The same backup as taken, with the server's key: restored.
    std::fs::write(&manifest_path, original).unwrap();
    let (ok, out, err) = restore(&target, &with_key).await;
    assert!(ok, "{err}\n{out}");
    assert!(out.contains("the key already there"), "{out}");
    assert!(logins_in(&data.join("woodlark.db")).contains(&"alice".to_string()));

    // PostgreSQL: pg_dump, not a copy.
    let (_c4, on_pg) = config_for(
        &data,
        "[storage]\nurl = \"postgres://woodlark:pw@127.0.0.1:1/woodlark\"\n",
    );
    let (ok, _, err) = backup(&on_pg, &taken.path().join("pg"), false).await;
    assert!(!ok);
    assert!(err.contains("pg_dump --format=custom"), "{err}");
    assert!(!taken.path().join("pg").exists());
}

/// A `/metrics` value.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_backups_run_keep_the_newest_and_a_failure_shows() {
    let backups = tempfile::tempdir().unwrap();
    // 0.0003 hours: about a second (the shortest interval is a second).
    let tables = format!(
        "[storage]\nbackup_dir = {:?}\nbackup_every_hours = 0.0003\nbackup_keep = 2\n",
        backups.path().display().to_string()
    );
    let s = TestServer::start_with_tables(&tables).await;
    s.user("alice", false).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let listed = || {
        let mut names: Vec<String> = std::fs::read_dir(backups.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("woodlark-"))
            .collect();
        names.sort();
        names
    };
    loop {
        let text = s.http.get("/metrics", None).await.expect(200).text();
        if metric(&text, "woodlark_backups_total") >= 4.0 && listed().len() == 2 {
            assert_eq!(metric(&text, "woodlark_backup_failures_total"), 0.0);
            let last = metric(&text, "woodlark_backup_last_success_timestamp_seconds");
            assert!(
                (last - woodlark::store::now_unix() as f64).abs() < 60.0,
                "{last}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no 4 backups pruned to 2: {text}\n{:?}",
            listed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Stopped first, so that no newer backup prunes one of these while they are read (one
    // that was under way ends within its step, or is written and pruned to two).
    s.stop().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let kept = listed();
    assert_eq!(kept.len(), 2, "{kept:?}");
    for name in kept {
        let dir = backups.path().join(name);
        let manifest = woodlark::store::backup::Manifest::read(&dir).unwrap();
        woodlark::store::backup::verify(&dir, &manifest).unwrap();
        assert!(manifest.key_file.is_none() && !dir.join("secrets.key").exists());
    }

    // A backup dir that cannot be made: each failure counted, requests served all along.
    let blocker = backups.path().join("a-file");
    std::fs::write(&blocker, "").unwrap();
    let tables = format!(
        "[storage]\nbackup_dir = {:?}\nbackup_every_hours = 0.0003\nbackup_keep = 2\n",
        blocker.join("below").display().to_string()
    );
    let s = TestServer::start_with_tables(&tables).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        s.http.get("/healthz", None).await.expect(204);
        let text = s.http.get("/metrics", None).await.expect(200).text();
        if metric(&text, "woodlark_backup_failures_total") >= 2.0 {
            assert_eq!(metric(&text, "woodlark_backups_total"), 0.0);
            assert_eq!(
                metric(&text, "woodlark_backup_last_success_timestamp_seconds"),
                0.0
            );
            break;
        }
        assert!(Instant::now() < deadline, "no failure counted: {text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    s.stop().await;
}
