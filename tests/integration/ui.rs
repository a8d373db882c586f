//! Woodlark's own web UI (crate `woodlark-ui`, `[web] dir` empty): the pages over real HTTP — the
//! sign-in page and a login link's session, the repository list with its filter, a
//! repository's pipelines with paging, a pipeline's steps and a step's log; who sees what
//! (the REST API's answers: anonymous 401, another user 404), bad ids, escaping of
//! hostile commit messages and log lines, and the Content-Security-Policy.

use std::time::Instant;

use crate::browser::login_link;
use crate::pipelines::{push_files, step_of, wait_for};
use crate::util::{Resp, TestServer, with_runner};
use crate::web::Browser;

use woodlark::pipeline::status::Status;
use woodlark::pipeline::types::Commit;
use woodlark::store::pipelines::{self, Pipeline};

const HOSTILE: &str = "<script>alert(\"boom\")</script> & <b>bold</b>";

/// `text` as the templates escape it.
fn escaped(text: &str) -> String {
    text.replace('&', "&#38;")
        .replace('<', "&#60;")
        .replace('>', "&#62;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

/// A UI page: HTML with the strict policy (no inline script or style).
fn assert_page(r: &Resp) {
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let csp = r.header("content-security-policy").unwrap_or_default();
    assert!(csp.contains("default-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    let page = r.text();
    assert!(!page.contains("<script>"), "an inline script: {page}");
    assert!(!page.contains("<style"), "an inline style: {page}");
    assert!(!page.contains(" style="), "an inline style: {page}");
}

async fn set_visibility(s: &TestServer, token: &str, id: i64, visibility: &str) {
    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(token),
            &format!(r#"{{"visibility":"{visibility}"}}"#),
        )
        .await
        .expect(200);
}

/// Stores `n` finished pipelines of repository `repo_id` straight into the store (the UI
/// only reads them), every message hostile.
async fn seed_pipelines(s: &TestServer, repo_id: i64, n: i64) {
    s.app_state
        .ci
        .store_for_tests()
        .write(move |c| {
            for number in 1..=n {
                let p = Pipeline {
                    status: if number % 2 == 0 {
                        Status::Failure
                    } else {
                        Status::Success
                    },
                    started: 1_000,
                    finished: 1_065,
                    commit: Commit {
                        sha: format!("{number:040}"),
                        branch: "main".into(),
                        git_ref: "refs/heads/main".into(),
                        message: format!("{HOSTILE} {number}\nsecond line"),
                        author: "<i>mallory</i>".into(),
                        ..Commit::default()
                    },
                    ..Pipeline::default()
                };
                pipelines::create(c, repo_id, number, &p, &[], &[])?;
            }
            Ok(())
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn pages_without_a_runner_sign_in_list_and_page_with_access_as_the_api() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let http = &s.http;

    // The home page and the login page, anonymous.
    let home = http.get("/", None).await.expect(200);
    assert_page(&home);
    assert!(home.text().contains("/login"), "{}", home.text());
    let login = http.get("/login", None).await.expect(200);
    assert_page(&login);
    let page = login.text();
    assert!(page.contains("name=\"form_token\""), "{page}");
    assert!(page.contains("<label for=\"token\">"), "{page}");
    assert!(page.contains("user login-link"), "{page}");
    assert!(
        login
            .headers
            .get_all("set-cookie")
            .iter()
            .any(|c| c.to_str().unwrap().starts_with("woodlark_login=")),
        "the token form's nonce cookie"
    );
    let css = http.get("/assets/woodlark.css", None).await.expect(200);
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
    assert!(css.text().contains("prefers-color-scheme: dark"));
    let js = http.get("/assets/woodlark.js", None).await.expect(200);
    assert!(
        js.header("content-type")
            .unwrap()
            .starts_with("application/javascript")
    );
    // The repository list needs a user: the login page.
    let r = http.get("/repos", None).await.expect(303);
    assert_eq!(r.header("location"), Some("/login?next=%2Frepos"));
    http.get("/user", None).await.expect(303);

    // Alice's private repository with 51 pipelines, messages hostile.
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    set_visibility(&s, &p.alice, id, "private").await;
    seed_pipelines(&s, id, 51).await;
    s.git_repo(&p.admin, &p.alice, "alice/lib").await;

    // Signed in through a login link, as a browser: the cookie session.
    let mut alice = Browser::new(http);
    let link = login_link(&s, "alice");
    let signed = alice.get(&link[link.find("/authorize").unwrap()..]).await;
    assert_eq!(signed.status.as_u16(), 303);
    assert!(alice.cookie("user_sess").is_some());
    let r = alice.get("/").await;
    assert_eq!(r.status.as_u16(), 303);
    assert_eq!(r.header("location"), Some("/repos"));
    let r = alice.get("/repos").await.expect(200);
    assert_page(&r);
    let page = r.text();
    assert!(page.contains("Signed in as alice"), "{page}");
    assert!(
        page.contains("alice/app") && page.contains("alice/lib"),
        "{page}"
    );
    assert!(page.contains(&format!("href=\"/repos/{id}\"")), "{page}");
    // Each one's newest pipeline: #51, a success, on main.
    assert!(page.contains("#51") && page.contains("s-success"), "{page}");
    assert!(page.contains("no pipelines yet"), "alice/lib: {page}");
    // The filter is a GET form: it works without a script.
    let page = alice.get("/repos?q=LIB").await.expect(200).text();
    assert!(
        page.contains("alice/lib") && !page.contains("alice/app"),
        "{page}"
    );
    assert!(page.contains("value=\"LIB\""), "{page}");
    let page = alice.get("/repos?q=%3Cb%3E").await.expect(200).text();
    assert!(
        page.contains("&#60;b&#62;") && !page.contains("<b>"),
        "{page}"
    );
    let page = alice.get("/user").await.expect(200).text();
    assert!(page.contains("alice"), "{page}");

    // The repository's pipelines, 50 a page, escaped; rendered within a few milliseconds.
    let path = format!("/repos/{id}");
    let r = alice.get(&path).await.expect(200);
    assert_page(&r);
    let page = r.text();
    assert!(page.contains("<h1 id=\"repo\">alice/app</h1>"), "{page}");
    assert!(page.contains("#51") && !page.contains("#1<"), "{page}");
    assert!(page.contains(&format!("{} 51", escaped(HOSTILE))), "{page}");
    assert!(!page.contains("<script>alert"), "{page}");
    assert!(page.contains("by &#60;i&#62;mallory&#60;/i&#62;"), "{page}");
    assert!(page.contains("1m 05s"), "the duration: {page}");
    assert!(
        page.contains(&format!("href=\"/repos/{id}?page=2\"")),
        "{page}"
    );
    let page = alice
        .get(&format!("{path}?page=2"))
        .await
        .expect(200)
        .text();
    assert!(page.contains("#1<") && !page.contains("#2<"), "{page}");
    assert!(
        page.contains(&format!("href=\"/repos/{id}?page=1\"")),
        "{page}"
    );
    // A last page that is full links no older page (51 = 3 × 17).
    let page = alice
        .get(&format!("{path}?perPage=17&page=3"))
        .await
        .expect(200)
        .text();
    assert!(page.contains("#1<") && page.contains("#17<"), "{page}");
    assert!(!page.contains("rel=\"next\""), "{page}");
    let page = alice
        .get(&format!("{path}?perPage=17&page=2"))
        .await
        .expect(200)
        .text();
    // The pager keeps the page size: the next 17 follow these 17.
    assert!(
        page.contains(&format!("href=\"/repos/{id}?page=3&#38;perPage=17\""))
            && page.contains(&format!("href=\"/repos/{id}?page=1&#38;perPage=17\"")),
        "{page}"
    );
    let mut best = u128::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        alice.get(&path).await.expect(200);
        best = best.min(start.elapsed().as_micros());
    }
    eprintln!("GET /repos/{id} (50 pipelines): best of 5 {best} µs");
    // A debug build on a shared machine: generous, but it catches a read per row.
    assert!(best < 250_000, "{best} µs");

    // A pipeline without workflows, escaped in full.
    let r = alice
        .get(&format!("/repos/{id}/pipeline/2"))
        .await
        .expect(200);
    assert_page(&r);
    let page = r.text();
    assert!(
        page.contains("Pipeline #2") && page.contains("s-failure"),
        "{page}"
    );
    assert!(page.contains(&escaped(HOSTILE)) && !page.contains("<script>alert"));
    assert!(page.contains("second line"), "the whole message: {page}");

    // The upstream pipeline page's tabs open the pipeline.
    for tab in ["config", "changed-files", "errors", "debug"] {
        let page = alice
            .get(&format!("/repos/{id}/pipeline/2/{tab}"))
            .await
            .expect(200)
            .text();
        assert!(page.contains("Pipeline #2"), "{tab}: {page}");
    }

    // Who sees the private repository's pages: as the API answers.
    let pages = [
        path.clone(),
        format!("/repos/{id}/pipeline/2"),
        format!("/repos/{id}/pipeline/2/1"),
    ];
    for page_path in &pages {
        let api = format!("/api/repos/{id}/pipelines/2");
        http.get(&api, None).await.expect(401);
        let anonymous = http.get(page_path, None).await.expect(401);
        assert_page(&anonymous);
        assert!(anonymous.text().contains("/login"), "a sign-in offer");
        assert!(
            !anonymous.text().contains("boom"),
            "nothing of the repository"
        );
        http.get(&api, Some(&p.bob)).await.expect(404);
        let bob = http.get(page_path, Some(&p.bob)).await.expect(404);
        assert!(!bob.text().contains("boom"), "nothing of the repository");
    }
    http.get(&path, Some(&p.admin)).await.expect(200);
    http.get(&format!("/repos/{id}/pipeline/2"), Some(&p.alice))
        .await
        .expect(200);
    // Public: anyone reads it, anonymous readers are offered the sign-in.
    set_visibility(&s, &p.alice, id, "public").await;
    let page = http.get(&path, None).await.expect(200).text();
    assert!(
        page.contains("alice/app")
            && page.contains(&format!("href=\"/login?next=%2Frepos%2F{id}\"")),
        "{page}"
    );
    http.get(&path, Some(&p.bob)).await.expect(200);
    // The settings link only for those the API lets change them (repository admins, the
    // instance admin); the layout's admin link only for instance admins.
    let settings_link = format!("href=\"/repos/{id}/settings\"");
    for (who, token, shown) in [
        ("anonymous", None, false),
        ("bob", Some(&p.bob), false),
        ("alice", Some(&p.alice), true),
        ("root", Some(&p.admin), true),
    ] {
        let page = http
            .get(&path, token.map(String::as_str))
            .await
            .expect(200)
            .text();
        assert_eq!(page.contains(&settings_link), shown, "{who}: {page}");
        let admin_link = page.contains("href=\"/admin\"");
        assert_eq!(admin_link, who == "root", "{who}: {page}");
    }

    // Bad input: unknown repository, pipeline or step is the not-found page; ids that are
    // no numbers are refused.
    for (bad, status) in [
        ("/repos/999".to_string(), 404),
        (format!("/repos/{id}/pipeline/99"), 404),
        (format!("/repos/{id}/pipeline/2/99"), 404),
        ("/repos/abc".to_string(), 400),
        (format!("/repos/{id}/pipeline/x"), 400),
        (format!("/repos/{id}/pipeline/2/x"), 400),
        ("/repos/99999999999999999999".to_string(), 400),
    ] {
        let r = alice.get(&bad).await;
        assert_eq!(r.status.as_u16(), status, "{bad}: {}", r.text());
        assert_page(&r);
        assert!(r.text().contains(&format!("Error {status}")), "{bad}");
    }
    // A forge with an OAuth app gets a sign-in button; the built-in git forge none.
    let body = serde_json::json!({"type": "gitea", "url": "https://gitea.example",
        "client": "id", "oauth_client_secret": "secret"});
    let forge = http
        .post("/api/forges", Some(&p.admin), &body.to_string())
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    let page = http.get("/login", None).await.expect(200).text();
    assert!(
        page.contains(&format!(
            "<a class=\"button\" href=\"/authorize?forge_id={forge}\">Sign in with Gitea (gitea.example)</a>"
        )),
        "{page}"
    );
    assert_eq!(page.matches("/authorize?forge_id=").count(), 1, "{page}");
    // A failed forge sign-in lands on the login page with its message only.
    let page = http
        .get(
            "/login?error=oauth_error&error_description=%3Cevil%3E",
            None,
        )
        .await
        .expect(200)
        .text();
    assert!(
        page.contains("The forge did not let us sign you in."),
        "{page}"
    );
    assert!(!page.contains("evil"), "{page}");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_steps_log_with_line_anchors_colours_and_escaping() {
    let data = tempfile::tempdir().unwrap();
    let tables = with_runner(data.path());
    let s = TestServer::start_in_with_tables(data, "", &tables).await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    set_visibility(&s, &p.alice, id, "private").await;
    let config = "steps:\n  - name: hello\n    image: sh\n    commands:\n      - echo '<img src=x onerror=alert(1)>'\n      - printf '\\033[31mred text\\033[0m plain\\n'\n  - name: long\n    image: sh\n    commands:\n      - seq 1 50000\n";
    push_files(&s, "alice/app", &[(".woodpecker.yaml", config)], HOSTILE).await;
    let done = wait_for(&s.http, &p.alice, id, 1, 60, |p| p["status"] == "success").await;
    let step = step_of(&done, "hello");
    let pid = step["pid"].as_i64().unwrap();
    let step_id = step["id"].as_i64().unwrap();

    let pipeline = format!("/repos/{id}/pipeline/1");
    let page = s
        .http
        .get(&pipeline, Some(&p.alice))
        .await
        .expect(200)
        .text();
    assert!(
        page.contains(&format!("href=\"{pipeline}/{pid}\"")),
        "{page}"
    );
    assert!(
        page.contains(">hello<") && page.contains("s-success"),
        "{page}"
    );
    assert!(page.contains(&escaped(HOSTILE)), "{page}");
    // The compiler's advice (no `when` filter) shows as a warning, not an error.
    assert!(page.contains("notice warning\">Warning: "), "{page}");

    let r = s
        .http
        .get(&format!("{pipeline}/{pid}"), Some(&p.alice))
        .await
        .expect(200);
    assert_page(&r);
    let page = r.text();
    assert!(page.contains("aria-current=\"page\""), "{page}");
    assert!(
        page.contains("id=\"L1\"") && page.contains("href=\"#L1\""),
        "{page}"
    );
    assert!(
        page.contains("&lt;img src=x onerror=alert(1)&gt;"),
        "{page}"
    );
    assert!(!page.contains("<img"), "{page}");
    assert!(
        page.contains("<span class=\"f1\">red text</span> plain"),
        "{page}"
    );
    assert!(!page.contains('\u{1b}'), "no escape character is left");
    let download = format!("/api/repos/{id}/logs/1/{step_id}/download");
    assert!(page.contains(&format!("href=\"{download}\"")), "{page}");
    let raw = s
        .http
        .get(&download, Some(&p.alice))
        .await
        .expect(200)
        .text();
    assert!(raw.contains("<img src=x onerror=alert(1)>"), "{raw}");

    // A long log (50 000 lines): the page holds its first chunk of 1 000 lines and a link
    // for each other chunk, never the whole log; rendered fast, small.
    let long = step_of(&done, "long");
    let long_page = format!("{pipeline}/{}", long["pid"]);
    let mut best = u128::MAX;
    let mut page = String::new();
    for _ in 0..3 {
        let start = Instant::now();
        page = s
            .http
            .get(&long_page, Some(&p.alice))
            .await
            .expect(200)
            .text();
        best = best.min(start.elapsed().as_micros());
    }
    eprintln!(
        "GET {long_page} (50 000 log lines, first chunk, {} bytes): best of 3 {best} µs",
        page.len()
    );
    assert!(best < 2_000_000, "{best} µs");
    assert!(page.contains("id=\"L1000\"") && !page.contains("id=\"L1001\""));
    assert!(
        page.contains("href=\"?from=1000#L1001\">Lines 1001–2000</a>"),
        "a link for the next chunk"
    );
    assert!(page.contains("href=\"?from=49000#L49001\">Lines 49001–50000</a>"));
    // The command's echo (`+ seq …`) is line 1: 50 001 lines, the last one alone in its chunk.
    assert!(page.contains("href=\"?from=50000#L50001\">Lines 50001–50001</a>"));
    assert_eq!(
        page.matches("class=\"chunk\"").count(),
        50,
        "one link a chunk"
    );
    let before_log = &page[..page.find("id=\"log\"").unwrap()];
    assert!(
        before_log.len() < 100_000,
        "{} bytes before the log",
        before_log.len()
    );
    assert!(page.len() < 200_000, "{} bytes in all", page.len());
    // Without a script, a chunk's link opens the page at that chunk.
    let at = s
        .http
        .get(&format!("{long_page}?from=12000"), Some(&p.alice))
        .await
        .expect(200)
        .text();
    assert!(at.contains("id=\"L12001\"") && at.contains("id=\"L13000\""));
    assert!(!at.contains("id=\"L1\"") && !at.contains("id=\"L13001\""));
    assert!(
        at.contains("href=\"?from=0#L1\">Lines 1–1000</a>"),
        "the earlier chunks"
    );
    // The script's fetch: rendered lines from any line, and where the next ones start.
    let r = s
        .http
        .get(&format!("{long_page}/lines?from=49500"), Some(&p.alice))
        .await
        .expect(200);
    assert_eq!(r.header("x-next-line"), Some("50001"));
    let lines = r.text();
    assert!(
        lines.starts_with("<div class=\"line\" id=\"L49501\">"),
        "{lines}"
    );
    assert_eq!(lines.matches("class=\"line\"").count(), 501);
    assert!(lines.contains("id=\"L50001\"") && !lines.contains("id=\"L50002\""));
    for bad in ["?from=-1", "?from=x"] {
        s.http
            .get(&format!("{long_page}/lines{bad}"), Some(&p.alice))
            .await
            .expect(400);
        s.http
            .get(&format!("{long_page}{bad}"), Some(&p.alice))
            .await
            .expect(400);
    }
    for who in [None, Some(p.bob.as_str())] {
        let r = s.http.get(&format!("{long_page}/lines"), who).await;
        assert!(matches!(r.status.as_u16(), 401 | 404), "{}", r.status);
        assert!(!r.text().contains("class=\"line\""));
    }
    s.http
        .get(&format!("{long_page}/lines"), Some(&p.admin))
        .await
        .expect(200);
    s.http
        .get(&format!("{pipeline}/99/lines"), Some(&p.alice))
        .await
        .expect(404);

    // The log is the repository's: refused as the API refuses it.
    s.http
        .get(&format!("{pipeline}/{pid}"), None)
        .await
        .expect(401);
    s.http
        .get(&format!("{pipeline}/{pid}"), Some(&p.bob))
        .await
        .expect(404);
    s.http
        .get(&format!("{pipeline}/{pid}"), Some(&p.admin))
        .await
        .expect(200);
    s.stop().await;
}

/// Under a root path (`[web] root_path`), every link and redirect of the UI carries it.
#[tokio::test]
async fn pages_under_a_root_path_link_within_it() {
    let s = TestServer::start_with_tables("[web]\nroot_path = \"/ci\"\n").await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    for home in ["/ci", "/ci/"] {
        let r = s.http.get(home, None).await.expect(200);
        assert_page(&r);
        let page = r.text();
        assert!(page.contains("href=\"/ci/login\""), "{page}");
        assert!(page.contains("href=\"/ci/assets/woodlark.css\""), "{page}");
    }
    s.http
        .get("/ci/assets/woodlark.css", None)
        .await
        .expect(200);
    s.http.get("/repos", None).await.expect(404);
    let r = s.http.get("/ci/repos", None).await.expect(303);
    assert_eq!(r.header("location"), Some("/ci/login?next=%2Fci%2Frepos"));
    let page = s.http.get("/ci/login", None).await.expect(200).text();
    assert!(page.contains("action=\"/ci/authorize\""), "{page}");
    let page = s
        .http
        .get("/ci/repos", Some(&p.alice))
        .await
        .expect(200)
        .text();
    assert!(page.contains(&format!("href=\"/ci/repos/{id}\"")), "{page}");
    let r = s.http.get("/ci/", Some(&p.alice)).await.expect(303);
    assert_eq!(r.header("location"), Some("/ci/repos"));
}

/// The repository list comes in pages of 50, as the API's lists do (`page`): a Next link
/// while there are more, a Previous link after the first, the filter kept across pages; a
/// page past the end says so. Every repository is on exactly one page.
#[tokio::test]
async fn the_repository_list_pages_past_fifty() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    for n in 0..52 {
        s.git_repo(&p.admin, &p.alice, &format!("alice/r{n:02}"))
            .await;
    }
    let names = |page: &str| -> Vec<String> {
        page.split("data-name=\"")
            .skip(1)
            .map(|rest| rest[..rest.find('"').unwrap()].to_string())
            .collect()
    };
    let get = |path: String| {
        let (http, token) = (s.http.clone(), p.alice.clone());
        async move {
            let r = http.get(&path, Some(&token)).await.expect(200);
            assert_page(&r);
            r.text()
        }
    };
    let first = get("/repos".into()).await;
    assert_eq!(names(&first).len(), 50, "{first}");
    assert!(
        first.contains("rel=\"next\" href=\"/repos?page=2\""),
        "{first}"
    );
    assert!(!first.contains("rel=\"prev\""), "{first}");
    let second = get("/repos?page=2".into()).await;
    assert_eq!(names(&second).len(), 2, "{second}");
    assert!(
        second.contains("rel=\"prev\" href=\"/repos?page=1\""),
        "{second}"
    );
    assert!(!second.contains("rel=\"next\""), "{second}");
    let mut all: Vec<String> = names(&first).into_iter().chain(names(&second)).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 52, "each repository once: {all:?}");
    let past = get("/repos?page=3".into()).await;
    assert!(
        names(&past).is_empty() && past.contains("No more repositories."),
        "{past}"
    );
    // Exactly a page: no Next link to an empty page.
    let page = get("/repos?perPage=26&page=2".into()).await;
    assert_eq!(names(&page).len(), 26, "{page}");
    assert!(!page.contains("rel=\"next\""), "{page}");
    // Filtered: the filter rides along the pager's links; a bad page number is the first.
    let filtered = get("/repos?q=r&perPage=30&page=2".into()).await;
    assert_eq!(names(&filtered).len(), 22, "{filtered}");
    assert!(
        filtered.contains("href=\"/repos?page=1&#38;q=r\""),
        "{filtered}"
    );
    let bad = get("/repos?page=x".into()).await;
    assert_eq!(names(&bad), names(&first));
    s.stop().await;
}
