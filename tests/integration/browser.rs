//! A real browser against the real server: headless Chromium (Debian's `chromium`, installed
//! by `.ci/test`) loads a small single-page app from `[web] dir`, signs in through a
//! `woodlark user login-link`, and renders a repository and a pipeline's log text that it
//! fetched from the API with its session cookie.

use std::path::Path;
use std::process::Command;

use crate::pipelines::{push_files, step_of, wait_for};
use crate::util::{BIN, TestServer, with_runner, write_config};

/// The fixture app: signed-in user from `/web-config.js`, then repositories, the first
/// pipeline and its `hello` step's log, rendered into the page.
fn fixture_app(base: &Path) -> std::path::PathBuf {
    let dir = base.join("app");
    std::fs::create_dir_all(dir.join("assets")).unwrap();
    std::fs::write(
        dir.join("index.html"),
        "<!doctype html><html><head><script src=\"/BASE_PATH/web-config.js\"></script></head>\
         <body><div id=\"out\">loading</div><script src=\"/BASE_PATH/assets/app-1a2b.js\"></script></body></html>",
    )
    .unwrap();
    std::fs::write(
        dir.join("assets/app-1a2b.js"),
        r#"(async () => {
  const out = document.getElementById('out');
  const user = window.WOODPECKER_USER;
  if (!user) { out.textContent = 'not signed in'; return; }
  const repos = await (await fetch('/BASE_PATH/api/user/repos')).json();
  const repo = repos[0];
  const p = await (await fetch(`/BASE_PATH/api/repos/${repo.id}/pipelines/1`)).json();
  const step = p.workflows[0].children.find(s => s.name === 'hello');
  const logs = await (await fetch(`/BASE_PATH/api/repos/${repo.id}/logs/1/${step.id}`)).json();
  const text = logs.filter(l => l.type === 0).map(l => atob(l.data)).join('\n');
  out.innerHTML = '';
  const who = document.createElement('p'); who.id = 'who'; who.textContent = 'signed in as ' + user.login; out.appendChild(who);
  const h = document.createElement('h1'); h.id = 'repo'; h.textContent = repo.full_name; out.appendChild(h);
  const st = document.createElement('p'); st.id = 'status'; st.textContent = 'pipeline ' + p.number + ' ' + p.status; out.appendChild(st);
  const pre = document.createElement('pre'); pre.id = 'log'; pre.textContent = text; out.appendChild(pre);
})();
"#,
    )
    .unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_signs_in_and_renders_a_repository_and_its_log() {
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("chromium is not installed (bash .ci/test installs it)");
    let data = tempfile::tempdir().unwrap();
    let app = fixture_app(data.path());
    let tables =
        with_runner(data.path()) + &format!("[web]\ndir = {:?}\n", app.display().to_string());
    let s = TestServer::start_in_with_tables(data, "", &tables).await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    push_files(&s, "alice/app", &[(".woodpecker.yaml", "steps:\n  - name: hello\n    image: sh\n    commands: [\"echo rendered by a real browser\"]\n")], "ci").await;
    let done = wait_for(&s.http, &p.alice, id, 1, 60, |p| p["status"] == "success").await;
    assert_eq!(step_of(&done, "hello")["state"], "success");

    let config = write_config(s.dir.path(), "");
    let out = Command::new(BIN)
        .args(["user", "login-link", "alice", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let link = String::from_utf8(out.stdout).unwrap();
    let path = &link.trim()[link.trim().find("/authorize").unwrap()..];
    let url = format!("http://{}{path}", s.http.addr);

    let profile = tempfile::tempdir().unwrap();
    let dom = tokio::task::spawn_blocking(move || {
        Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-quic",
                "--virtual-time-budget=15000",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("--dump-dom")
            .arg(&url)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let html = String::from_utf8_lossy(&dom.stdout);
    assert!(
        html.contains("signed in as alice"),
        "page: {html}\nstderr: {}",
        String::from_utf8_lossy(&dom.stderr)
    );
    assert!(html.contains("<h1 id=\"repo\">alice/app</h1>"), "{html}");
    assert!(html.contains("pipeline 1 success"), "{html}");
    assert!(html.contains("rendered by a real browser"), "{html}");
    // The link was used up by the browser.
    s.http.get(path, None).await.expect(401);
}
