//! The local runner's sandbox (`runner.sandbox`), tested as the attack it stops: pipeline
//! steps that try to read or change the server's files. And start-up: no working bwrap, no
//! server (unless `runner.sandbox = "none"`, which is said loudly).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::pipelines::{finished, log_text, push_files, run_manually, step_of, wait_for};
use crate::util::{BIN, TestServer, write_config};

/// Outside /tmp (which every step gets fresh and empty anyway), so that only the cover over
/// each sensitive path can hide it.
fn outside_tmp() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_cannot_read_or_change_the_servers_files() {
    let data = outside_tmp();
    let elsewhere = outside_tmp();
    let d = data.path().canonicalize().unwrap();
    let key = elsewhere.path().canonicalize().unwrap().join("secrets.key");
    let cache = elsewhere
        .path()
        .canonicalize()
        .unwrap()
        .join("plugin-cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::write(cache.join("forge.cwasm"), "compiled").unwrap();
    // The runner's defaults (sandbox "bwrap", workspaces in the system temp dir); the secrets
    // key and the plugin cache outside the data dir.
    let tables = format!(
        "#runner\n[runner]\nenabled = true\nbackend = \"local\"\n[storage]\nsecret_key_file = {key:?}\n\
         #plugins\n[plugins]\ndir = {plugins:?}\nwatch = false\ncache_dir = {cache:?}\n",
        key = key.display().to_string(),
        plugins = d.join("plugins").display().to_string(),
        cache = cache.display().to_string(),
    );
    let s = TestServer::start_in_with_tables(data, "", &tables).await;
    assert_eq!(
        s.app_state.config.runner.sandbox,
        woodlark::runner::sandbox::SandboxMode::Bwrap
    );
    let db = d.join(woodlark::app::DB_FILE);
    assert!(db.is_file() && key.is_file());
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();

    let (d_, db_, key_, cache_) = (d.display(), db.display(), key.display(), cache.display());
    let config = format!(
        r#"
steps:
  - name: peek-db
    image: sh
    commands:
      - cat {db_}
    failure: ignore
  - name: peek-key
    image: sh
    commands:
      - cat {key_}
    failure: ignore
  - name: list
    image: sh
    commands:
      - ls -A {d_}
      - ls -A {cache_}
      - echo listed
  - name: plant
    image: sh
    commands:
      - echo owned > {d_}/planted
    failure: ignore
  - name: open-files
    image: sh
    commands:
      - ls -l /proc/self/fd/
  - name: write
    image: sh
    commands:
      - echo carried from step to step > carried.txt
  - name: read
    image: sh
    commands:
      - cat carried.txt
      - test -f README.md
"#
    );
    push_files(&s, "alice/app", &[(".woodpecker.yaml", &config)], "attack").await;
    let done = wait_for(&s.http, &p.alice, id, 1, 60, finished).await;
    let log = |name: &str| {
        let step_id = step_of(&done, name)["id"].as_i64().unwrap();
        log_text(&s.http, &p.alice, id, 1, step_id)
    };

    // Reading the database fails: the data dir is empty to the step.
    assert_eq!(step_of(&done, "peek-db")["state"], "failure", "{done:#}");
    assert_eq!(step_of(&done, "peek-db")["exit_code"], 1);
    let lines = log("peek-db").await;
    assert_eq!(
        lines,
        [
            format!("+ cat {db_}"),
            format!("cat: {db_}: No such file or directory")
        ]
    );
    // The secrets key outside the data dir is covered too.
    assert_eq!(step_of(&done, "peek-key")["state"], "failure");
    assert_eq!(step_of(&done, "peek-key")["exit_code"], 1);
    let lines = log("peek-key").await;
    assert_eq!(
        lines,
        [
            format!("+ cat {key_}"),
            format!("cat: {key_}: Permission denied")
        ]
    );
    // Listing shows nothing of the data dir nor of the plugin cache.
    assert_eq!(step_of(&done, "list")["state"], "success");
    assert_eq!(
        log("list").await,
        [
            format!("+ ls -A {d_}"),
            format!("+ ls -A {cache_}"),
            "+ echo listed".to_string(),
            "listed".to_string()
        ]
    );
    // Nothing can be written there either.
    assert_eq!(step_of(&done, "plant")["state"], "failure");
    assert!(
        log("plant").await[1].contains("Read-only file system"),
        "{:?}",
        log("plant").await
    );
    assert!(!d.join("planted").exists());
    // No descriptor of the server's files leaks into the step.
    assert_eq!(step_of(&done, "open-files")["state"], "success");
    let fds = log("open-files").await;
    assert!(
        !fds.iter()
            .any(|l| l.contains(".db") || l.contains(&d_.to_string())),
        "{fds:?}"
    );
    // The workspace (with the clone) still carries files from step to step.
    assert_eq!(step_of(&done, "clone")["state"], "success");
    assert_eq!(step_of(&done, "write")["state"], "success");
    assert_eq!(step_of(&done, "read")["state"], "success");
    assert!(
        log("read")
            .await
            .contains(&"carried from step to step".to_string())
    );
    assert_eq!(done["status"], "success", "{done:#}");
}

/// Issue 45's attack on the local backend: a fork bomb and a memory hog in one repository's
/// steps. Without limits both run to the end (the bomb exhausted the machine's process budget
/// and another tenant's clone failed); with `runner.pids` and `runner.memory_mb` applied
/// through a cgroup per step, each fails on its own and the other tenant's pipeline succeeds
/// at the same time. The agent says how its steps are bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_or_a_memory_hog_is_bounded_to_its_own_step() {
    let dir = tempfile::tempdir().unwrap();
    let tables = format!(
        "{}[runner]\nenabled = true\nbackend = \"local\"\ncapacity = 2\npids = 48\nmemory_mb = 96\n",
        "#runner\n"
    );
    let s = TestServer::start_in_with_tables(dir, "", &tables).await;
    let p = s.principals().await;
    // The embedded agent records what it runs with once its backend is chosen.
    let deadline = Instant::now() + Duration::from_secs(20);
    let limits = loop {
        let agents = s
            .http
            .get("/api/agents", Some(&p.admin))
            .await
            .expect(200)
            .json();
        let limits = agents[0]["woodlark_limits"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if !limits.is_empty() {
            break limits;
        }
        assert!(Instant::now() < deadline, "no limits: {agents:#}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        limits.starts_with("cgroup v1: memory 96 MiB, 48 processes")
            || limits.starts_with("cgroup v2: memory 96 MiB, 48 processes"),
        "{limits}"
    );

    let attacker = s.git_repo(&p.admin, &p.alice, "alice/bomb").await;
    let tenant = s.git_repo(&p.admin, &p.alice, "alice/tenant").await;
    let bomb = r#"
steps:
  - name: bomb
    image: sh
    commands:
      - i=0; while [ $$i -lt 400 ]; do sleep 30 & i=$$((i+1)); done; echo all 400 started
    failure: ignore
  - name: hog
    image: sh
    commands:
      - x=$$(head -c 400000000 /dev/zero | tr '\0' a); echo held $${#x} bytes
"#;
    push_files(&s, "alice/bomb", &[(".woodpecker.yaml", bomb)], "bomb").await;
    let ok = "steps:\n  - name: work\n    image: sh\n    commands: [\"test -f README.md\", \"echo fine\"]\n";
    push_files(&s, "alice/tenant", &[(".woodpecker.yaml", ok)], "tenant").await;
    let bombed = wait_for(
        &s.http,
        &p.alice,
        attacker["id"].as_i64().unwrap(),
        1,
        120,
        finished,
    )
    .await;
    let fine = wait_for(
        &s.http,
        &p.alice,
        tenant["id"].as_i64().unwrap(),
        1,
        120,
        finished,
    )
    .await;
    assert_eq!(fine["status"], "success", "{fine:#}");
    assert_eq!(step_of(&bombed, "clone")["state"], "success", "{bombed:#}");
    let step_log = |name: &str| {
        let step_id = step_of(&bombed, name)["id"].as_i64().unwrap();
        log_text(
            &s.http,
            &p.alice,
            attacker["id"].as_i64().unwrap(),
            1,
            step_id,
        )
    };
    assert_eq!(step_of(&bombed, "bomb")["state"], "failure", "{bombed:#}");
    let lines = step_log("bomb").await;
    assert!(
        lines.iter().any(|l| l.contains("fork")) && !lines.iter().any(|l| l == "all 400 started"),
        "{lines:?}"
    );
    assert_eq!(step_of(&bombed, "hog")["state"], "failure", "{bombed:#}");
    let lines = step_log("hog").await;
    assert!(!lines.iter().any(|l| l.starts_with("held ")), "{lines:?}");
    assert_eq!(bombed["status"], "failure");
}

/// How `woodlark serve` went.
#[derive(Debug)]
enum Start {
    /// It exited (success, stderr).
    Exited(bool, String),
    /// It listened (and was stopped); its stderr so far.
    Listened(String),
}

/// Runs `woodlark serve --config CONFIG` with `PATH` as given until it exits or listens.
fn serve_with_path(config: &std::path::Path, path: &str) -> Start {
    let log = config.with_extension(format!("stderr.{}", std::process::id()));
    let mut child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(config)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stderr = std::fs::read_to_string(&log).unwrap_or_default();
        if let Some(status) = child.try_wait().unwrap() {
            return Start::Exited(
                status.success(),
                std::fs::read_to_string(&log).unwrap_or_default(),
            );
        }
        if stderr.contains("woodlark listening") {
            let _ = child.kill();
            let _ = child.wait();
            return Start::Listened(stderr);
        }
        assert!(
            Instant::now() < deadline,
            "neither exited nor listened: {stderr}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn without_a_working_bwrap_the_server_refuses_to_start_and_says_how_to_fix_it() {
    let data = tempfile::tempdir().unwrap();
    let config = write_config(
        data.path(),
        "#runner\n[runner]\nenabled = true\nbackend = \"local\"\n",
    );
    // A PATH without bwrap.
    let bin = tempfile::tempdir().unwrap();
    let Start::Exited(false, stderr) = serve_with_path(&config, &bin.path().display().to_string())
    else {
        panic!("the server started without bwrap");
    };
    // The start-up log, then the error on one line.
    let line = stderr.trim().lines().last().unwrap_or_default();
    assert!(
        line.starts_with(&format!("woodlark: {}: runner.sandbox: ", config.display())),
        "{line}"
    );
    assert!(line.contains("apt-get install bubblewrap"), "{line}");
    assert!(line.contains("runner.sandbox = \"none\""), "{line}");

    // An unusable bwrap (here: one that always fails as a kernel without user namespaces
    // makes it fail) is refused the same way, with bwrap's reason.
    let fake = bin.path().join("bwrap");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    let Start::Exited(false, stderr) = serve_with_path(&config, &path) else {
        panic!("the server started with a broken bwrap");
    };
    assert!(
        stderr.contains("does not work here: bwrap: No permissions to create new namespace"),
        "{stderr}"
    );
    assert!(stderr.contains("runner.sandbox = \"none\""), "{stderr}");

    // With the runner off, bwrap is not needed.
    let off = write_config(data.path(), "");
    let started = serve_with_path(&off, &bin.path().display().to_string());
    assert!(matches!(started, Start::Listened(_)), "{started:?}");
}

#[test]
fn sandbox_none_starts_with_a_loud_warning() {
    let data = tempfile::tempdir().unwrap();
    let config = write_config(
        data.path(),
        "#runner\n[runner]\nenabled = true\nbackend = \"local\"\nsandbox = \"none\"\n",
    );
    let Start::Listened(stderr) = serve_with_path(&config, &std::env::var("PATH").unwrap()) else {
        panic!("the server did not start");
    };
    assert!(stderr.contains("NOT sandboxed"), "{stderr}");
    assert!(stderr.contains("runner.sandbox"), "{stderr}");
}

/// Variables that configure git, as an attacker with push access passes them to a manual run:
/// on the host they would run `core.fsmonitor` as the server's user.
pub fn git_config_attack() -> serde_json::Value {
    serde_json::json!({
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.fsmonitor",
        "GIT_CONFIG_VALUE_0": "echo FSMONITOR-RAN >&2; false",
        "GIT_CONFIG_PARAMETERS": "'core.fsmonitor'='echo PARAMETERS-RAN >&2; false'",
        "GIT_SSH_COMMAND": "echo SSH-RAN >&2",
        "DEPLOY_NOTE": "from-the-run",
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_variables_do_not_configure_the_host_clone_and_sockets_stay_hidden() {
    // A socket of a service under /run, as the Docker engine's is: a step that reaches it
    // talks to a process with the host's rights.
    struct Removed(std::path::PathBuf);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let socket =
        std::path::PathBuf::from(format!("/run/woodlark-test-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&socket);
    let _listener = std::os::unix::net::UnixListener::bind(&socket)
        .unwrap_or_else(|e| panic!("bind {}: {e} (the tests run as root)", socket.display()));
    let _removed = Removed(socket.clone());
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let sock = socket.display();
    let config = format!(
        r#"
steps:
  - name: look
    image: sh
    commands:
      - echo "note=$${{DEPLOY_NOTE}} count=$${{GIT_CONFIG_COUNT}}"
      - if [ -S {sock} ]; then echo TEST-SOCKET-REACHABLE; fi
      - if [ -S /var/run/docker.sock ] || [ -S /run/docker.sock ]; then echo ENGINE-REACHABLE; fi
      - find /run /var/run -type s 2>/dev/null | while read -r f; do if [ -S "$$f" ]; then echo "SOCKET $$f"; fi; done
      - echo looked
"#
    );
    push_files(&s, "alice/app", &[(".woodpecker.yaml", &config)], "ci").await;
    wait_for(&s.http, &p.alice, id, 1, 60, finished).await;
    let body = serde_json::json!({"branch": "main", "variables": git_config_attack()});
    let done = run_manually(&s.http, &p.alice, id, &body.to_string(), 60).await;
    let n = done["number"].as_i64().unwrap();
    let log = |name: &str| {
        let step_id = step_of(&done, name)["id"].as_i64().unwrap();
        log_text(&s.http, &p.alice, id, n, step_id)
    };
    assert_eq!(
        done["status"],
        "success",
        "{done:#}\n{:?}",
        log("clone").await
    );
    let clone = log("clone").await.join("\n");
    for marker in ["FSMONITOR-RAN", "PARAMETERS-RAN", "SSH-RAN"] {
        assert!(
            !clone.contains(marker),
            "the host clone obeyed {marker}: {clone}"
        );
    }
    let look = log("look").await;
    // The author's own commands get the run's variables...
    assert!(
        look.contains(&"note=from-the-run count=1".to_string()),
        "{look:?}"
    );
    // ...but no socket of the host's services.
    assert!(look.contains(&"looked".to_string()), "{look:?}");
    assert!(
        !look
            .iter()
            .filter(|l| !l.starts_with("+ "))
            .any(|l| l.contains("REACHABLE") || l.starts_with("SOCKET ")),
        "{look:?}"
    );
}
