//! A real browser against the real server: headless Chromium (Debian's `chromium`, installed
//! by `.ci/test`) loads a small single-page app from `[web] dir` and signs in through a
//! `woodlark user login-link`.
//!
//! The upstream UI build is not in any package registry this project can reach, so the apps
//! here send the upstream UI's requests, as its source sends them (`web/src/lib/api/index.ts`,
//! `views/RepoAdd.vue`, `components/layout/header/Navbar.vue`,
//! `components/repo/pipeline/PipelineLog.vue`): same paths, methods, bodies, CSRF header,
//! cookie session and `EventSource` log stream, one page (route) per flow.
//!
//! Woodlark's own UI (no `[web] dir`) is driven in a browser by `ui_browser`.

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

/// Debian's headless Chromium binary.
fn chromium() -> &'static str {
    ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("chromium is not installed (bash .ci/test installs it)")
}

/// Loads `url` in a fresh headless Chromium profile and returns the process output, whose
/// stdout is the DOM once the page settled (virtual time pauses while requests are open, so
/// a page that keeps a stream open never settles: those are driven through `cdp` instead).
async fn dump_dom(chromium: &'static str, url: String) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    tokio::task::spawn_blocking(move || {
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
    .unwrap()
}

/// A one-time sign-in link for `login` (`woodlark user login-link`), as a full URL.
pub(crate) fn login_link(s: &TestServer, login: &str) -> String {
    let config = write_config(s.dir.path(), "");
    let out = Command::new(BIN)
        .args(["user", "login-link", login, "--config"])
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
    format!("http://{}{path}", s.http.addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_signs_in_and_renders_a_repository_and_its_log() {
    let chromium = chromium();
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

    let url = login_link(&s, "alice");
    let path = url[url.find("/authorize").unwrap()..].to_string();

    let dom = dump_dom(chromium, url).await;
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
    s.http.get(&path, None).await.expect(401);
}

/// The login app: as the upstream UI's login page (`views/Login.vue`), a button per forge from
/// `GET /api/forges` that opens `/authorize?forge_id=N` (pressed by the script), and, signed
/// in, who the user is.
fn login_app(base: &Path) -> std::path::PathBuf {
    let dir = base.join("login-app");
    std::fs::create_dir_all(dir.join("assets")).unwrap();
    std::fs::write(
        dir.join("index.html"),
        "<!doctype html><html><head><script src=\"/web-config.js\"></script></head>\
         <body><div id=\"out\">loading</div><script src=\"/assets/login-1.js\"></script></body></html>",
    )
    .unwrap();
    std::fs::write(
        dir.join("assets/login-1.js"),
        r#"(async () => {
  const out = document.getElementById('out');
  const user = window.WOODPECKER_USER;
  if (user) { out.textContent = 'signed in as ' + user.login + ' of forge ' + user.forge_id; return; }
  const forges = await (await fetch('/api/forges')).json();
  out.innerHTML = '';
  for (const f of forges) {
    const a = document.createElement('a');
    a.href = '/authorize?forge_id=' + f.id;
    a.textContent = 'Login with ' + (f.oauth_host || f.url);
    out.appendChild(a);
  }
  out.querySelector('a').click();
})();
"#,
    )
    .unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_signs_in_through_the_forge_from_the_login_button() {
    use crate::forge_fakes::{CLIENT_ID, CLIENT_SECRET, Kind, answer, fake};
    use crate::plugins::{fake_service, plugins_table};
    let chromium = chromium();
    let data = tempfile::tempdir().unwrap();
    let app = login_app(data.path());
    let state = fake(Kind::GitHub, "");
    let fake = state.clone();
    let api = fake_service(move |r| Some(answer(&fake, r))).await;
    let instance = format!(
        "[plugins.instances.github]\nfile = \"forge-github.wasm\"\nallowed_hosts = [\"http://{api}\"]\nconfig = {{ api-url = \"http://{api}\" }}\n"
    );
    let tables = format!("[web]\ndir = {:?}\n", app.display().to_string())
        + &plugins_table(&crate::util::first_party_plugins(), false, &instance);
    let s = TestServer::start_in_with_tables(data, "#open", &tables).await;
    let p = s.principals().await;
    let body = serde_json::json!({"type": "github", "url": format!("http://{api}"),
        "client": CLIENT_ID, "oauth_client_secret": CLIENT_SECRET,
        "additional_options": {"plugin": "github"}});
    let forge = s
        .http
        .post("/api/forges", Some(&p.admin), &body.to_string())
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    let dom = dump_dom(chromium, format!("http://{}/login", s.http.addr)).await;
    let html = String::from_utf8_lossy(&dom.stdout);
    assert!(
        html.contains(&format!("signed in as octocat of forge {forge}")),
        "page: {html}\nstderr: {}",
        String::from_utf8_lossy(&dom.stderr)
    );
    // The way there: the login button, the forge's authorize page, the code exchange.
    let seen = state.lock().unwrap().seen.clone();
    let paths: Vec<&str> = seen.iter().map(|s| s.path.as_str()).collect();
    assert!(paths.contains(&"/login/oauth/authorize"), "{paths:?}");
    assert!(paths.contains(&"/login/oauth/access_token"), "{paths:?}");
}

/// The flows app: one SPA route per upstream page, driven by the script itself in one load.
/// `/repos/add` lists and enables a repository; the navbar's avatar image opens the user page;
/// the repository's settings require approval; the repository page follows the live pipeline
/// stream until the test's push arrives, blocked; the pipeline page opens the step's live log,
/// approves, and renders the lines as they stream, numbered as the UI numbers them
/// (`line + 1`).
fn flows_app(base: &Path) -> std::path::PathBuf {
    let dir = base.join("flows");
    std::fs::create_dir_all(dir.join("assets")).unwrap();
    std::fs::write(
        dir.join("index.html"),
        "<!doctype html><html><head><script src=\"/BASE_PATH/web-config.js\"></script></head>\
         <body><nav id=\"nav\"></nav><main id=\"page\"></main><div id=\"out\"></div>\
         <script src=\"/BASE_PATH/assets/flows-9f8e.js\"></script></body></html>",
    )
    .unwrap();
    std::fs::write(
        dir.join("assets/flows-9f8e.js"),
        r#"(async () => {
  const out = document.getElementById('out');
  const say = (id, text) => { const p = document.createElement('p'); p.id = id; p.textContent = text; out.appendChild(p); };
  const user = window.WOODPECKER_USER;
  if (!user) { say('fail', 'not signed in'); return; }
  const api = async (method, path, body) => {
    const res = await fetch('/BASE_PATH' + path, {
      method,
      headers: Object.assign(method !== 'GET' ? { 'X-CSRF-TOKEN': window.WOODPECKER_CSRF } : {},
                             body !== undefined ? { 'Content-Type': 'application/json' } : {}),
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    if (!res.ok) { throw new Error(method + ' ' + path + ': ' + res.status + ' ' + await res.text()); }
    const type = res.headers.get('Content-Type') || '';
    return type.startsWith('application/json') ? res.json() : res.text();
  };
  const page = document.getElementById('page');
  const go = (path) => { history.pushState({}, '', path); page.innerHTML = ''; };
  try {
    // RepoAdd.vue: the list, then "Enable" on the wanted repository.
    go('/repos/add');
    const repos = await api('GET', '/api/user/repos?all=true');
    let enabled;
    for (const r of repos) {
      const li = document.createElement('li');
      li.textContent = r.full_name + (r.active ? ' (enabled)' : '');
      if (!r.active) {
        const b = document.createElement('button');
        b.textContent = 'Enable';
        b.onclick = async () => { enabled = await api('POST', `/api/repos?forge_remote_id=${r.forge_remote_id}`); };
        li.appendChild(b);
        if (r.full_name === 'alice/app') { b.id = 'enable'; }
      }
      page.appendChild(li);
    }
    say('add-list', 'add page lists ' + repos.map(r => r.full_name + ':' + r.id + ':' + r.active).join(','));
    document.getElementById('enable').click();
    while (!enabled) { await api('GET', '/api/user'); }
    say('enabled', 'enabled ' + enabled.full_name + ' as repo ' + enabled.id);

    // Navbar.vue: the avatar image is the way to the user menu.
    const img = document.createElement('img');
    const loaded = new Promise((ok, fail) => { img.onload = ok; img.onerror = () => fail(new Error('avatar failed to load')); });
    img.src = user.avatar_url;
    const menu = document.createElement('a');
    menu.href = '/user'; menu.id = 'user-menu'; menu.appendChild(img);
    menu.onclick = (e) => { e.preventDefault(); go('/user'); say('user-page', 'settings of ' + user.login + ', sign out at /logout'); };
    document.getElementById('nav').appendChild(menu);
    await loaded;
    say('avatar', 'avatar ' + img.naturalWidth + 'x' + img.naturalHeight);
    menu.click();

    // Repository settings: every event needs approval. Then the repository page follows its
    // pipelines live (/api/stream/events) until the next push arrives, waiting for approval.
    go(`/repos/${enabled.id}/settings`);
    await api('PATCH', `/api/repos/${enabled.id}`, { require_approval: 'all_events' });
    go(`/repos/${enabled.id}`);
    const run = await new Promise((ok) => {
      const es = new EventSource('/BASE_PATH/api/stream/events');
      es.onmessage = (ev) => {
        const m = JSON.parse(ev.data);
        if (m.repo && m.repo.id === enabled.id && m.pipeline && m.pipeline.status === 'blocked') { es.close(); ok(m.pipeline); }
      };
    });
    say('run', 'pipeline ' + run.number + ' ' + run.status);

    // PipelineLog.vue: the step's live log is opened while it waits; then Approve.
    go(`/repos/${enabled.id}/pipeline/${run.number}`);
    const p = await api('GET', `/api/repos/${enabled.id}/pipelines/${run.number}`);
    const step = p.workflows[0].children.find(s => s.name === 'hello');
    say('step', 'step ' + step.name + ' ' + step.state);
    const pre = document.createElement('pre'); pre.id = 'log'; page.appendChild(pre);
    const ended = new Promise((ok) => {
      const es = new EventSource(`/BASE_PATH/api/stream/logs/${enabled.id}/${run.number}/${step.id}`);
      es.onmessage = (ev) => { const line = JSON.parse(ev.data); pre.textContent += (line.line + 1) + ' ' + atob(line.data) + '\n'; };
      es.addEventListener('eof', () => { es.close(); ok(); });
    });
    await api('POST', `/api/repos/${enabled.id}/pipelines/${run.number}/approve`);
    say('approved', 'approved');
    await ended;
    say('done', 'log complete');
  } catch (e) {
    say('fail', String(e));
  }
})();
"#,
    )
    .unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_adds_a_repository_opens_the_user_menu_and_approves_with_a_live_log() {
    let chromium = chromium();
    let data = tempfile::tempdir().unwrap();
    let app = flows_app(data.path());
    let tables =
        with_runner(data.path()) + &format!("[web]\ndir = {:?}\n", app.display().to_string());
    let s = TestServer::start_in_with_tables(data, "", &tables).await;
    let p = s.principals().await;
    s.git_forge(&p.admin).await;
    s.init_git_repo("alice/app");
    s.init_git_repo("alice/other");

    // The browser runs the flows; once it has enabled the repository and required approval,
    // a push starts the pipeline it waits for.
    let browser = tokio::spawn(dump_dom(chromium, login_link(&s, "alice")));
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let r = s
            .http
            .get("/api/repos/lookup/alice%2Fapp", Some(&p.alice))
            .await;
        if r.status == 200 && r.json()["require_approval"] == "all_events" {
            break;
        }
        if browser.is_finished() || tokio::time::Instant::now() > deadline {
            let dom = browser.await.unwrap();
            panic!(
                "the browser did not enable the repository and require approval: {}\nstderr: {}",
                String::from_utf8_lossy(&dom.stdout),
                String::from_utf8_lossy(&dom.stderr)
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    push_files(
        &s,
        "alice/app",
        &[(
            ".woodpecker.yaml",
            "steps:\n  - name: hello\n    image: sh\n    commands: [\"echo first\", \"echo second\"]\n",
        )],
        "ci",
    )
    .await;
    let dom = browser.await.unwrap();
    let html = String::from_utf8_lossy(&dom.stdout);
    let stderr = String::from_utf8_lossy(&dom.stderr);
    assert!(
        !html.contains("id=\"fail\""),
        "page: {html}\nstderr: {stderr}"
    );
    assert!(
        html.contains("add page lists alice/app:0:false,alice/other:0:false"),
        "{html}"
    );
    assert!(html.contains("enabled alice/app as repo"), "{html}");
    assert!(html.contains("avatar 64x64"), "{html}");
    assert!(html.contains("settings of alice"), "{html}");
    assert!(html.contains("pipeline 1 blocked"), "{html}");
    assert!(html.contains("step hello blocked"), "{html}");
    assert!(
        html.contains("log complete"),
        "page: {html}\nstderr: {stderr}"
    );
    // Lines numbered from 1 in the UI (0 on the wire), output only.
    assert!(
        html.contains("1 + echo first\n2 first\n3 + echo second\n4 second\n</pre>"),
        "{html}"
    );

    let repo = s
        .http
        .get("/api/repos/lookup/alice%2Fapp", Some(&p.alice))
        .await
        .expect(200)
        .json();
    let id = repo["id"].as_i64().unwrap();
    let done = wait_for(&s.http, &p.alice, id, 1, 60, |p| p["status"] == "success").await;
    assert_eq!(done["reviewed_by"], "alice");
}
