//! Woodlark's own UI (no `[web] dir`) in a real headless Chromium, driven over the DevTools
//! protocol ([`crate::cdp`]): issue 49's "must show". Signed in through a login link, with
//! nothing configured, the browser reads the repository list, a repository's pipelines, a
//! finished pipeline's steps and a step's log; watches a running step's lines and the
//! pipeline's state arrive without a reload; cancels and restarts from the pages' buttons;
//! adds a secret and sees it listed without its value; and, signed out, is refused the
//! private repository's pages. Every page is saved light and dark under
//! `target/tmp/ui-screenshots/`.
//!
//! The page's CSP is enforced as in any browser, so a live part that only works without it
//! fails here.

use std::path::{Path, PathBuf};

use crate::a11y;
use crate::browser::login_link;
use crate::cdp::{self, Browser, Page};
use crate::pipelines::{push_files, step_of, wait_for};
use crate::util::{TestServer, with_runner};

/// Where the screenshots go: the test output under `target/`, not the repository.
fn screenshot_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A phone's width in CSS pixels.
const PHONE: u32 = 400;

/// Saves the page as `name-light.png` and `name-dark.png`, and at a phone's width as
/// `name-phone-light.png` and `-dark.png`; checks that the dark scheme really is another
/// look, and that at a phone's width nothing makes the page scroll sideways.
async fn shoot(page: &Page, name: &str) {
    let dir = screenshot_dir();
    for (width, suffix) in [(cdp::WIDTH, ""), (PHONE, "-phone")] {
        page.width(width).await;
        let mut shots = Vec::new();
        for scheme in ["light", "dark"] {
            page.color_scheme(scheme).await;
            if width == cdp::WIDTH {
                a11y::audit(page, name, scheme).await;
            }
            let path = dir.join(format!("{name}{suffix}-{scheme}.png"));
            let png = page.screenshot(&path).await;
            assert!(png.starts_with(b"\x89PNG"), "{}", path.display());
            eprintln!("screenshot: {}", path.display());
            shots.push(png);
        }
        assert_ne!(
            shots[0], shots[1],
            "{name}{suffix}: the dark scheme looks like the light one"
        );
    }
    // Still at a phone's width: what sticks out, if anything, for the failure message.
    let overflow = page
        .eval(
            "[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > \
             document.documentElement.clientWidth + 1).map(e => e.tagName + '.' + e.className + ' ' + \
             (e.id || '') + ' ' + Math.round(e.getBoundingClientRect().right)).slice(0, 10)",
        )
        .await;
    let wide = page.eval("document.documentElement.scrollWidth").await;
    assert_eq!(
        wide, PHONE,
        "{name}: wider than a phone ({wide} px): {overflow}"
    );
    page.width(cdp::WIDTH).await;
    page.color_scheme("light").await;
}

/// The status badge of pipeline `n`'s row in a repository's list, with the page's mark: ""
/// until the row is there, `null` once the page was reloaded (the mark gone).
fn list_status(n: i64) -> String {
    format!(
        "(() => {{ if (window.__mark !== 1) return null; \
         const s = document.querySelector('#pipeline-list a.row[href$=\"/pipeline/{n}\"] .status'); \
         return s ? s.textContent : ''; }})()"
    )
}

/// The pipeline page's status badge, with the page's mark (as [`list_status`]).
const HEAD_STATUS: &str = "(() => { if (window.__mark !== 1) return null; \
     const s = document.querySelector('#pipeline-head .status'); return s ? s.textContent : ''; })()";

const SLOW: &str = "steps:\n  - name: count\n    image: sh\n    commands:\n      - \"for i in $(seq 1 40); do echo line-$i; sleep 0.2; done\"\n";
const LONG: &str = "steps:\n  - name: wait\n    image: sh\n    commands:\n      - \"for i in $(seq 1 600); do echo tick-$i; sleep 0.1; done\"\n";
const SECRET_VALUE: &str = "browser-secret-value-never-shown";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_uses_the_built_in_ui_live_parts_and_forms_included() {
    let Some(browser) = Browser::launch() else {
        eprintln!("skipped: chromium is not installed (bash .ci/test installs it)");
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let tables = with_runner(data.path());
    let s = TestServer::start_in_with_tables(data, "", &tables).await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.alice),
            r#"{"visibility":"private"}"#,
        )
        .await
        .expect(200);
    // The second command prints the sixteen ANSI colours, which the audit reads against the
    // log's background in both schemes.
    let hello = r#"steps:
  - name: hello
    image: sh
    commands:
      - echo read in the built-in UI
      - printf "$COLOURS"
    environment:
      COLOURS: '\033[30mc0 \033[31mc1 \033[32mc2 \033[33mc3 \033[34mc4 \033[35mc5 \033[36mc6 \033[37mc7 \033[90mc8 \033[91mc9 \033[92mc10 \033[93mc11 \033[94mc12 \033[95mc13 \033[96mc14 \033[97mc15\033[0m\n'
"#;
    push_files(&s, "alice/app", &[(".woodpecker.yaml", hello)], "first").await;
    let done = wait_for(&s.http, &p.alice, id, 1, 60, |p| p["status"] == "success").await;
    let hello_pid = step_of(&done, "hello")["pid"].as_i64().unwrap();
    let base = format!("http://{}", s.http.addr);

    // Signed in through a login link: the repository list.
    let alice = browser.new_context().await;
    let page = browser.new_page(Some(&alice)).await;
    page.goto(&login_link(&s, "alice")).await;
    assert_eq!(page.path().await, "/repos");
    assert_eq!(page.text("#signed-in").await, "Signed in as alice");
    let admin_link = "!!document.querySelector('#admin-link')";
    assert_eq!(page.eval(admin_link).await, false, "not an instance admin");
    assert_eq!(page.text("#repo-list .repo-name").await, "alice/app");
    assert_eq!(page.text("#repo-list .status").await, "success");
    a11y::check_the_audit(&page).await;
    shoot(&page, "repos").await;

    // The repository's pipelines, and the finished one's steps.
    page.click_to_navigate("#repo-list a.row").await;
    assert_eq!(page.path().await, format!("/repos/{id}"));
    let first = page
        .text("#pipeline-list a.row[href$=\"/pipeline/1\"] .status")
        .await;
    assert_eq!(first, "success");
    shoot(&page, "repo").await;
    page.click_to_navigate("#pipeline-list a.row[href$=\"/pipeline/1\"]")
        .await;
    assert_eq!(page.text("#pipeline-head .status").await, "success");
    assert!(page.text("#workflows").await.contains("hello"));
    shoot(&page, "pipeline").await;
    // A step's log lines.
    page.click_to_navigate(&format!("#workflows a[href$=\"/pipeline/1/{hello_pid}\"]"))
        .await;
    let log = page.text("#log").await;
    assert!(log.contains("read in the built-in UI"), "{log}");
    assert_eq!(
        page.eval("document.querySelectorAll('#log .line').length")
            .await,
        4
    );
    assert_eq!(
        page.eval("document.querySelectorAll('#log .line [class^=f]').length")
            .await,
        16,
        "the colours: {log}"
    );
    shoot(&page, "log").await;

    // Live: a repository page open before the push sees the new pipeline arrive and finish.
    let list = browser.new_page(Some(&alice)).await;
    list.goto(&format!("{base}/repos/{id}")).await;
    list.eval("window.__mark = 1").await;
    push_files(&s, "alice/app", &[(".woodpecker.yaml", SLOW)], "slow").await;
    let running = wait_for(&s.http, &p.alice, id, 2, 30, |p| {
        step_of(p, "count")["state"] == "running"
    })
    .await;
    let count_pid = step_of(&running, "count")["pid"].as_i64().unwrap();

    // A running step's page: lines written after it loaded appear in it, and its state
    // turns to success, without a reload.
    let step = browser.new_page(Some(&alice)).await;
    step.goto(&format!("{base}/repos/{id}/pipeline/2/{count_pid}"))
        .await;
    let at_load = step
        .eval("document.querySelectorAll('#log .line').length")
        .await;
    let at_load = at_load.as_u64().unwrap();
    step.eval("window.__mark = 1").await;
    assert!(
        at_load < 41,
        "the page loaded after the step wrote its last line ({at_load} lines)"
    );
    let lines = "(() => window.__mark === 1 && document.querySelector('#log').textContent.includes('line-40'))()";
    step.wait_until("the step's last line, live", lines).await;
    let ids = step
        .eval("[...document.querySelectorAll('#log .line')].map(e => e.id).join(' ')")
        .await;
    let want: Vec<String> = (1..=41).map(|n| format!("L{n}")).collect();
    assert_eq!(
        ids.as_str().unwrap(),
        want.join(" "),
        "each line once, in order"
    );
    step.wait_until(
        "the pipeline's state to turn to success",
        &format!("{HEAD_STATUS} === 'success'"),
    )
    .await;
    // The step's heading and the pipeline's facts follow too: done, its exit code, how long
    // it took (about 8 s, not the second it had run when the page loaded).
    step.wait_until(
        "the step's heading to say it finished",
        "window.__mark === 1 && document.querySelector('#log-title').textContent.includes('exit code 0')",
    )
    .await;
    assert_eq!(step.text("#log-title .status").await, "success");
    let facts = step.text("#pipeline-facts").await;
    let took = facts
        .split("Duration")
        .nth(1)
        .unwrap_or_default()
        .trim()
        .to_string();
    let secs: u64 = took
        .trim_end_matches('s')
        .parse()
        .unwrap_or_else(|_| panic!("{facts}"));
    assert!(secs >= 7, "the pipeline's duration as it finished: {facts}");
    list.wait_until(
        "the new pipeline in the list",
        &format!("{} !== ''", list_status(2)),
    )
    .await;
    list.wait_until(
        "the listed pipeline to succeed",
        &format!("{} === 'success'", list_status(2)),
    )
    .await;

    // Cancel from the page: a running pipeline's Cancel button.
    push_files(&s, "alice/app", &[(".woodpecker.yaml", LONG)], "long").await;
    wait_for(&s.http, &p.alice, id, 3, 30, |p| {
        step_of(p, "wait")["state"] == "running"
    })
    .await;
    page.goto(&format!("{base}/repos/{id}/pipeline/3")).await;
    assert_eq!(page.text("#pipeline-head .status").await, "running");
    page.click_to_navigate("#cancel").await;
    assert_eq!(page.path().await, format!("/repos/{id}/pipeline/3"));
    assert_eq!(page.text(".flash").await, "Pipeline #3 was canceled.");
    page.eval("window.__mark = 1").await;
    page.wait_until(
        "the page to show it cancelled",
        &format!("{HEAD_STATUS} === 'killed'"),
    )
    .await;
    // The pipeline is killed at once; its running step when the runner has stopped it.
    wait_for(&s.http, &p.alice, id, 3, 30, |p| {
        p["status"] == "killed" && step_of(p, "wait")["state"] == "killed"
    })
    .await;

    // Restart from the page: a finished pipeline's Restart button lands on the new one.
    page.goto(&format!("{base}/repos/{id}/pipeline/1")).await;
    page.click_to_navigate("#restart").await;
    assert_eq!(page.path().await, format!("/repos/{id}/pipeline/4"));
    assert_eq!(page.text(".flash").await, "Pipeline #4 restarts #1.");
    wait_for(&s.http, &p.alice, id, 4, 30, |p| p["status"] == "success").await;

    // A secret added in the settings, listed by name, its value nowhere on the page.
    page.goto(&format!("{base}/repos/{id}/settings")).await;
    shoot(&page, "settings").await;
    page.fill("#secret-name", "browser_secret").await;
    page.fill("#secret-value", SECRET_VALUE).await;
    page.eval("document.querySelector('#ev-new-push').checked = true")
        .await;
    page.click_to_navigate("#add-secret button[type=submit]")
        .await;
    assert_eq!(page.path().await, format!("/repos/{id}/settings"));
    assert_eq!(page.text("code.secret-name").await, "browser_secret");
    let html = page.html_and_values().await;
    assert!(!html.contains(SECRET_VALUE), "the value shown: {html}");
    let secrets = s
        .http
        .get(&format!("/api/repos/{id}/secrets"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(secrets[0]["name"], "browser_secret", "{secrets}");

    // A cron the API refuses: the page again, the summary focused, the fields as typed.
    page.fill("#cron-name", "nightly").await;
    page.fill("#cron-schedule", "every full moon").await;
    page.click_to_navigate("#add-cron button[type=submit]")
        .await;
    assert_eq!(
        page.eval("document.activeElement.id").await,
        "error-summary",
        "the summary takes the focus"
    );
    assert_eq!(
        page.eval("document.querySelector('#cron-schedule').value")
            .await,
        "every full moon"
    );
    shoot(&page, "settings-refused").await;

    page.goto(&format!("{base}/user")).await;
    shoot(&page, "user").await;
    page.goto(&format!("{base}/repos")).await;
    shoot(&page, "repos-after").await;

    // The admin page, as the instance admin sees it.
    let root = browser.new_context().await;
    let admin = browser.new_page(Some(&root)).await;
    admin.goto(&login_link(&s, "root")).await;
    admin.click_to_navigate("#admin-link").await;
    assert_eq!(admin.text("h1").await, "Administration");
    shoot(&admin, "admin").await;

    // Signed out (a fresh cookie jar): the private repository's pages offer the sign-in,
    // which comes back here, and show nothing of the repository.
    let anonymous = browser.new_context().await;
    let visitor = browser.new_page(Some(&anonymous)).await;
    for path in [
        format!("/repos/{id}"),
        format!("/repos/{id}/pipeline/1"),
        format!("/repos/{id}/pipeline/1/{hello_pid}"),
        format!("/repos/{id}/settings"),
    ] {
        visitor.goto(&format!("{base}{path}")).await;
        assert_eq!(
            visitor.text("h1").await,
            "Sign in to see this page",
            "{path}"
        );
        let next = path.replace('/', "%2F");
        let offer = format!("main a[href=\"/login?next={next}\"]");
        assert_eq!(
            visitor
                .eval(&format!("!!document.querySelector('{offer}')"))
                .await,
            true,
            "{path}"
        );
        let html = visitor.html_and_values().await;
        for private in ["alice/app", "read in the built-in UI", "browser_secret"] {
            assert!(!html.contains(private), "{path} shows {private}: {html}");
        }
    }
    // No page threw, logged an error or broke its CSP along the way.
    let problems = browser.problems();
    assert!(problems.is_empty(), "{problems:#?}");
}
