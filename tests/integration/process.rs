use std::process::Command;
use std::time::Duration;

use crate::util::{BIN, Http, Process, cli_user_add, git, woodlark_in, write_config};

#[test]
fn unknown_key_fails_start_up_naming_key_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, "[server]\nlisten = \"127.0.0.1:0\"\nbogus = 1\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("unknown key `server.bogus`"), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
}

#[test]
fn bad_listen_address_fails_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    std::fs::write(&path, "[server]\nlisten = \"localhost\"\n").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("server.listen"), "{err}");
    // The environment override is checked the same way and named.
    std::fs::write(&path, "").unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&path)
        .env("WOODLARK_LISTEN", "nope:x")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("server.listen"));
}

#[test]
fn missing_config_file_is_a_clear_error() {
    let out = Command::new(BIN)
        .args(["serve", "--config", "/nonexistent/woodlark.toml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/woodlark.toml"), "{stderr}");
    // Said once, with what to do about it.
    assert_eq!(stderr.matches("no such file").count(), 1, "{stderr}");
    assert!(stderr.contains("every key is optional"), "{stderr}");
}

/// On a fresh install the first command may be `user add`, before any server made the data
/// dir: it makes it (and the key in it), and a server then starts on it.
#[tokio::test]
async fn user_add_on_a_fresh_install_makes_the_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("fresh/data");
    let config = dir.path().join("config.toml");
    std::fs::write(&config, crate::util::config_text(&data, "")).unwrap();
    let out = cli_user_add(&config, "first", true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(data.join("secrets.key").exists());
    let token = String::from_utf8(out.stdout).unwrap();
    let server = Process::start(&config);
    Http::new(server.addr)
        .get("/api/user", Some(token.trim()))
        .await
        .expect(200);
}

/// The user tools check the sealing key as the server does: with another key file (or a
/// missing one, which would make a new key) they refuse and print no token.
#[test]
fn user_tools_refuse_another_sealing_key_and_print_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    assert!(cli_user_add(&config, "first", true).status.success());
    let url = crate::util::database_of(dir.path());
    let url_line = if url.starts_with("postgres://") {
        format!("url = {url:?}\n")
    } else {
        String::new()
    };
    let other_key = dir.path().join("other.key");
    let tables = format!(
        "[storage]\nsecret_key_file = {:?}\n{url_line}",
        other_key.display().to_string()
    );
    let other = dir.path().join("other.toml");
    std::fs::write(
        &other,
        crate::util::server_config_text(dir.path(), "", &tables),
    )
    .unwrap();
    for args in [&["user", "add", "second"][..], &["user", "token", "first"]] {
        let out = Command::new(BIN)
            .args(args)
            .arg("--config")
            .arg(&other)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?} printed a token");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("storage.secret_key_file"), "{err}");
    }
}

/// The commands that only read open the store read-only: on a data dir with no database (and
/// no key) `user token` fails and leaves nothing behind, where opening the store as `user
/// add` does would make both.
#[test]
fn user_token_reads_only_and_makes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, crate::util::config_text(&data, "")).unwrap();
    let out = Command::new(BIN)
        .args(["user", "token", "first", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "printed a token");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("storage.secret_key_file"), "{err}");
    let left: Vec<_> = std::fs::read_dir(&data).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn user_add_prints_only_a_working_token() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let out = cli_user_add(&config, "first", true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1);
    let token = stdout.trim().to_string();

    let again = cli_user_add(&config, "first", false);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    let bad = cli_user_add(&config, "no way", false);
    assert!(!bad.status.success());

    let server = Process::start(&config);
    let http = Http::new(server.addr);
    let me = http.get("/api/user", Some(&token)).await.expect(200).json();
    assert_eq!(me["login"], "first");
    assert_eq!(me["admin"], true);
    // user add also works while the server runs (same data dir, WAL).
    let second = cli_user_add(&config, "second", false);
    assert!(second.status.success());
    let t2 = String::from_utf8(second.stdout).unwrap();
    http.get("/api/user", Some(t2.trim())).await.expect(200);
    http.get("/api/users", Some(t2.trim())).await.expect(403);

    // `user token` prints the current token again (e.g. after an upgrade revoked old ones).
    let shown = std::process::Command::new(BIN)
        .args(["user", "token", "first", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(shown.status.success());
    assert_eq!(String::from_utf8(shown.stdout).unwrap().trim(), token);
    let missing = std::process::Command::new(BIN)
        .args(["user", "token", "nobody", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no user \"nobody\""));
}

#[tokio::test]
async fn sigterm_shuts_down_gracefully() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let mut server = Process::start(&config);
    Http::new(server.addr)
        .get("/healthz", None)
        .await
        .expect(204);
    server.terminate(Duration::from_secs(10));
    assert!(server.stderr().contains("shutdown signal received"));
}

/// A rolling restart may stop a server the moment it announces its address: the signal must
/// lead to a clean exit whenever it comes, not kill the process.
#[test]
fn sigterm_right_after_start_up_shuts_down_gracefully() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    for round in 0..5 {
        let mut child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&config)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut log = String::new();
        // Read the log as it is written and signal on the very line that names the address.
        loop {
            let mut line = String::new();
            if stderr.read_line(&mut line).unwrap() == 0 {
                break;
            }
            log.push_str(&line);
            if line.contains("woodlark listening") {
                // SAFETY: kill(2) on our own child's pid.
                let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
                assert_eq!(sent, 0);
                break;
            }
        }
        assert!(log.contains("woodlark listening"), "round {round}: {log}");
        // The rest of the log arrives until the process exits and closes its stderr.
        let reader = std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = stderr.read_to_string(&mut rest);
            rest
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("round {round}: the server did not stop");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        log.push_str(&reader.join().unwrap());
        assert!(status.success(), "round {round}: {status}: {log}");
        assert!(
            log.contains("shutdown signal received"),
            "round {round}: {log}"
        );
    }
}

#[tokio::test]
async fn kill_9_after_a_successful_create_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let admin = String::from_utf8(cli_user_add(&config, "root", true).stdout).unwrap();
    let admin = admin.trim();
    let mut server = Process::start(&config);
    let http = Http::new(server.addr);
    let created = http
        .post(
            "/api/users",
            Some(admin),
            r#"{"login":"durable","email":"d@example.com"}"#,
        )
        .await
        .expect(200)
        .json();
    // SIGKILL right after the reply: no shutdown code runs.
    server.child.kill().unwrap();
    server.child.wait().unwrap();

    let server = Process::start(&config);
    let http = Http::new(server.addr);
    let got = http
        .get("/api/users/durable", Some(admin))
        .await
        .expect(200)
        .json();
    // The generated avatar's URL names the server's (new) address; the record is the same.
    let without_avatar = |mut v: serde_json::Value| {
        v.as_object_mut().unwrap().remove("avatar_url");
        v
    };
    assert_eq!(without_avatar(got), without_avatar(created.clone()));
    // (The stored record has no avatar; the API shows the generated one.)

    let id = created["id"].as_i64().unwrap().to_string();
    let (object, kind): (String, String) =
        woodlark_store::inspect_for_tests(&crate::util::database_of(dir.path()), |db| {
            db.query_row_for_tests(
                "SELECT object, record_type || '.' || action FROM events
                 WHERE record_type = 'users' AND record_id = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
        });
    assert_eq!(kind, "users.created");
    let object: serde_json::Value = serde_json::from_str(&object).unwrap();
    assert_eq!(without_avatar(object), without_avatar(created));
}

/// `woodlark lint` as editors and pre-commit hooks run it: findings with file and line, exit
/// status 1 on errors (not on warnings), JSON on request, and a workflow file given alone
/// linted with the other files of its `.woodpecker/` folder.
#[test]
fn lint_reports_file_and_line_and_fails_on_errors() {
    let dir = tempfile::tempdir().unwrap();
    let wp = dir.path().join(".woodpecker");
    std::fs::create_dir_all(&wp).unwrap();
    std::fs::write(
        wp.join("build.yaml"),
        "when:\n  event: push\nsteps:\n  build:\n    image: golang\n    commands: [go build]\n    bogus: 1\n",
    )
    .unwrap();
    std::fs::write(
        wp.join("test.yaml"),
        "depends_on: [build]\nsteps:\n  - name: t\n    image: golang\n    commands:\n      - export PATH=$(go env GOPATH)/bin:$PATH\n      - go test ./...\n",
    )
    .unwrap();
    let lint = |args: &[&str]| {
        Command::new(BIN)
            .arg("lint")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let out = lint(&[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.trim(),
        ".woodpecker/build.yaml:7: error: unknown key `bogus` [steps.build.bogus]\n.woodpecker/test.yaml:3: warning: add a `when` block with an `event` filter to this step or to the whole workflow [steps[0]]"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 error in 2 files"));

    // The other file alone has only a warning (its dependency is in the folder): exit 0.
    let out = lint(&[".woodpecker/test.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with(".woodpecker/test.yaml:3: warning:") && stdout.lines().count() == 1,
        "{stdout}"
    );

    let out = lint(&["--format", "json", ".woodpecker/build.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let findings: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(findings[0]["line"], 7, "{findings}");
    assert_eq!(findings[0]["field"], "steps.build.bogus");
    assert_eq!(findings[0]["warning"], false);

    // A missing path is an error saying so.
    let out = lint(&["nowhere.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("reading nowhere.yaml"));
}

/// `woodlark exec` on the local backend: the workflows of `.woodpecker/` run in dependency
/// order in the checkout itself (uncommitted files seen, files written kept), with the
/// checkout's branch, `--env` variables and `--secret` secrets (masked in the output); a
/// failing step makes the exit status 1 and skips what depends on it.
#[test]
fn exec_runs_the_checkout_masks_secrets_and_fails_with_a_failing_step() {
    let dir = tempfile::tempdir().unwrap();
    let wp = dir.path().join(".woodpecker");
    std::fs::create_dir_all(&wp).unwrap();
    std::fs::write(
        wp.join("build.yaml"),
        "steps:\n  build:\n    image: busybox\n    environment:\n      TOKEN:\n        from_secret: api_token\n    commands:\n      - echo \"on $CI_COMMIT_BRANCH for $CI_PIPELINE_EVENT with $GREETING\"\n      - cat notes.txt\n      - echo \"token is $TOKEN\"\n      - echo built > out.txt\n",
    )
    .unwrap();
    std::fs::write(
        wp.join("test.yaml"),
        "depends_on: [build]\nsteps:\n  test:\n    image: busybox\n    commands: [cat out.txt, \"test -z \\\"$FAIL\\\"\"]\n",
    )
    .unwrap();
    std::fs::write(
        wp.join("zz-report.yaml"),
        "depends_on: [test]\nsteps:\n  report:\n    image: busybox\n    commands: [echo reported]\n",
    )
    .unwrap();
    git(dir.path(), &["init", "-q", "-b", "feature"]);
    git(dir.path(), &["add", "."]);
    git(dir.path(), &["commit", "-q", "-m", "ci"]);
    std::fs::write(dir.path().join("notes.txt"), "not committed\n").unwrap();
    let exec = |extra: &[&str]| {
        let base = [
            "exec",
            "--backend",
            "local",
            "--secret",
            "api_token=tok-9f2e71",
        ];
        let args = [&base[..], &["--env", "GREETING=hello"], extra].concat();
        woodlark_in(dir.path(), &args)
    };
    let out = exec(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for want in [
        "# build\n",
        "[build:L1:0s] on feature for manual with hello\n",
        "[build:L3:0s] not committed\n",
        "[build:L5:0s] token is ********\n",
        "[build] success (exit code 0)\n",
        "# test\n",
        "[test:L1:0s] built\n",
        "# zz-report\n",
        "[report:L1:0s] reported\n",
    ] {
        assert!(stdout.contains(want), "{want:?} not in:\n{stdout}");
    }
    assert!(!stdout.contains("tok-9f2e71"), "{stdout}");
    assert!(stdout.find("# build") < stdout.find("# test"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "built\n"
    );

    // A failing step: exit status 1, the dependent workflow skipped.
    let out = exec(&["--env", "FAIL=yes"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stdout.contains("[test] failure (exit code 1)"), "{stdout}");
    assert!(!stdout.contains("# zz-report"), "{stdout}");
    assert!(
        stderr.contains("workflow zz-report: skipped")
            && stderr.contains("the pipeline ended: failure"),
        "{stderr}"
    );

    // `when` filters see `--event` and `--branch`; a config that does not compile runs
    // nothing.
    std::fs::write(
        wp.join("zz-report.yaml"),
        "depends_on: [test]\nwhen:\n  branch: main\nsteps:\n  report:\n    image: busybox\n    commands: [echo reported]\n",
    )
    .unwrap();
    let out = exec(&["--branch", "main", "--event", "push"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("[report:L1:0s] reported"),
        "{out:?}"
    );
    let out = exec(&["--event", "nonsense"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--event \"nonsense\": one of push"));
    std::fs::write(wp.join("test.yaml"), "steps:\n  test:\n    bogus: 1\n").unwrap();
    let out = exec(&[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error:") && stderr.contains("the pipeline does not compile"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("# build"));
}
