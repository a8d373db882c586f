//! The built-in UI's forms (`core/ui/src/forms.rs`, `actions.rs`): cancel, restart, approve
//! and decline from a pipeline's page, over real HTTP with a runner: the buttons each viewer
//! gets, who may post (the REST API's answers), the CSRF field a browser session must carry,
//! bad bodies, and the one-shot message after the redirect.

use crate::browser::login_link;
use crate::pipelines::{push_files, wait_for};
use crate::util::{TestServer, with_runner};
use crate::web::Browser;

/// A browser signed in as `login` through a one-time link.
pub(crate) async fn signed_in(s: &TestServer, login: &str) -> Browser {
    let mut b = Browser::new(&s.http);
    let link = login_link(s, login);
    let r = b.get(&link[link.find("/authorize").unwrap()..]).await;
    assert_eq!(r.status.as_u16(), 303);
    b
}

/// The value of the page's first hidden `csrf` field.
pub(crate) fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no csrf field: {page}"));
    let rest = &page[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_actions_from_the_page_as_the_api_allows() {
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
    let slow = "steps:\n  - name: wait\n    image: sh\n    commands:\n      - sleep 120\n";
    push_files(&s, "alice/app", &[(".woodpecker.yaml", slow)], "slow").await;
    wait_for(&s.http, &p.alice, id, 1, 60, |p| p["status"] == "running").await;

    let page_path = format!("/repos/{id}/pipeline/1");
    let cancel = format!("{page_path}/cancel");
    let mut alice = signed_in(&s, "alice").await;
    let page = alice.get(&page_path).await.expect(200).text();
    assert!(page.contains(&format!("action=\"{cancel}\"")), "{page}");
    assert!(!page.contains("/restart\""), "not while running: {page}");
    let csrf = csrf_of(&page);

    // Who may post: anonymous 401 (the sign-in), a stranger 404, as the API; nothing changed.
    let r = s
        .http
        .send("POST", &cancel, None, Some(b"csrf=x"), &[FORM])
        .await
        .expect(401);
    assert!(r.text().contains("/login"), "{}", r.text());
    s.http
        .send("POST", &cancel, Some(&p.bob), Some(b""), &[FORM])
        .await
        .expect(404);
    // A browser session without the form's token, or another session's, is refused: 403.
    let r = alice.send("POST", &cancel, Some(""), &[FORM]).await;
    assert_eq!(r.status.as_u16(), 403, "{}", r.text());
    assert!(r.text().contains("reload the page"), "{}", r.text());
    let other = signed_in(&s, "alice").await;
    let mut other = other;
    let other_csrf = csrf_of(&other.get(&page_path).await.expect(200).text());
    assert_ne!(other_csrf, csrf);
    let body = format!("csrf={other_csrf}");
    let r = alice.send("POST", &cancel, Some(&body), &[FORM]).await;
    assert_eq!(r.status.as_u16(), 403);
    // A body that is no form: 400 saying what is expected (to a caller who may act: a
    // refusal comes first, and a session's token cannot be read from it); too large: 413.
    let r = s
        .http
        .send(
            "POST",
            &cancel,
            Some(&p.alice),
            Some(format!("{{\"csrf\":\"{csrf}\"}}").as_bytes()),
            &[("content-type", "application/json")],
        )
        .await;
    assert_eq!(r.status.as_u16(), 400);
    assert!(r.text().contains("x-www-form-urlencoded"), "{}", r.text());
    let big = format!("csrf={csrf}&pad={}", "x".repeat(70_000));
    let r = alice.send("POST", &cancel, Some(&big), &[FORM]).await;
    assert_eq!(r.status.as_u16(), 413);
    // A bad pipeline number.
    let r = alice
        .post_form(
            &format!("/repos/{id}/pipeline/x/cancel"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(r.status.as_u16(), 400);
    let r = alice
        .post_form(
            &format!("/repos/{id}/pipeline/99/cancel"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(r.status.as_u16(), 404);
    let still = s
        .http
        .get(&format!("/api/repos/{id}/pipelines/1"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(
        still["status"], "running",
        "nothing refused changed anything"
    );

    // Alice cancels with the form: back to the page, which says so once.
    let r = alice.post_form(&cancel, &[("csrf", &csrf)]).await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    assert_eq!(r.header("location"), Some(page_path.as_str()));
    // The page's own script refreshing its live parts (a fetch of the same page) may ask
    // before the browser goes to the page: it neither shows nor takes the message.
    let fetched = alice
        .send("GET", &page_path, None, &[("sec-fetch-mode", "cors")])
        .await
        .expect(200)
        .text();
    assert!(!fetched.contains("was canceled."), "{fetched}");
    let page = alice
        .send("GET", &page_path, None, &[("sec-fetch-mode", "navigate")])
        .await
        .expect(200)
        .text();
    assert!(page.contains("Pipeline #1 was canceled."), "{page}");
    let page = alice.get(&page_path).await.expect(200).text();
    assert!(!page.contains("was canceled."), "shown once: {page}");
    wait_for(&s.http, &p.alice, id, 1, 30, |p| {
        p["status"] == "killed" || p["status"] == "canceled"
    })
    .await;
    // Canceling a finished pipeline: the API's 400, as a page.
    let r = alice.post_form(&cancel, &[("csrf", &csrf)]).await;
    assert_eq!(r.status.as_u16(), 400, "{}", r.text());

    // A finished pipeline offers a restart, which leads to the new pipeline.
    let page = alice.get(&page_path).await.expect(200).text();
    assert!(
        page.contains(&format!("action=\"{page_path}/restart\"")),
        "{page}"
    );
    assert!(!page.contains(&format!("action=\"{cancel}\"")), "{page}");
    let r = alice
        .post_form(&format!("{page_path}/restart"), &[("csrf", &csrf)])
        .await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    assert_eq!(
        r.header("location"),
        Some(format!("/repos/{id}/pipeline/2").as_str())
    );
    let restarted = wait_for(&s.http, &p.alice, id, 2, 60, |p| p["status"] == "running").await;
    assert_eq!(restarted["parent"], 1);
    // An instance admin (a personal access token: no CSRF field needed) may cancel it.
    let r = s
        .http
        .send(
            "POST",
            &format!("/repos/{id}/pipeline/2/cancel"),
            Some(&p.admin),
            Some(b""),
            &[FORM],
        )
        .await
        .expect(303);
    assert_eq!(
        r.header("location"),
        Some(format!("/repos/{id}/pipeline/2").as_str())
    );

    // Public now: bob may read the page but gets no buttons, and his post is the API's 403.
    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.alice),
            r#"{"visibility":"public"}"#,
        )
        .await
        .expect(200);
    let page = s
        .http
        .get(&page_path, Some(&p.bob))
        .await
        .expect(200)
        .text();
    assert!(!page.contains("class=\"actions\""), "{page}");
    s.http
        .send(
            "POST",
            &format!("{page_path}/restart"),
            Some(&p.bob),
            Some(b""),
            &[FORM],
        )
        .await
        .expect(403);
    let page = s.http.get(&page_path, None).await.expect(200).text();
    assert!(!page.contains("class=\"actions\""), "anonymous: {page}");

    // Approval: a held pipeline offers approve and decline, and each does what the API does.
    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.alice),
            r#"{"require_approval":"all_events"}"#,
        )
        .await
        .expect(200);
    let quick = "steps:\n  - name: hi\n    image: sh\n    commands:\n      - echo hi\n";
    push_files(&s, "alice/app", &[(".woodpecker.yaml", quick)], "held").await;
    wait_for(&s.http, &p.alice, id, 3, 30, |p| p["status"] == "blocked").await;
    let held = format!("/repos/{id}/pipeline/3");
    let page = alice.get(&held).await.expect(200).text();
    assert!(
        page.contains(&format!("action=\"{held}/approve\"")),
        "{page}"
    );
    assert!(
        page.contains(&format!("action=\"{held}/decline\"")),
        "{page}"
    );
    assert!(
        !page.contains(&format!("action=\"{held}/restart\"")),
        "{page}"
    );
    s.http
        .send(
            "POST",
            &format!("{held}/approve"),
            Some(&p.bob),
            Some(b""),
            &[FORM],
        )
        .await
        .expect(403);
    let r = alice
        .post_form(&format!("{held}/approve"), &[("csrf", &csrf)])
        .await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    wait_for(&s.http, &p.alice, id, 3, 60, |p| p["status"] == "success").await;
    push_files(&s, "alice/app", &[("README", "again")], "held again").await;
    wait_for(&s.http, &p.alice, id, 4, 30, |p| p["status"] == "blocked").await;
    let r = alice
        .post_form(
            &format!("/repos/{id}/pipeline/4/decline"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    let page = alice
        .get(&format!("/repos/{id}/pipeline/4"))
        .await
        .expect(200)
        .text();
    assert!(page.contains("Pipeline #4 was declined."), "{page}");
    assert!(page.contains("s-declined"), "{page}");
    s.stop().await;
}

#[tokio::test]
async fn the_manual_run_form_runs_as_the_api_and_keeps_what_was_entered() {
    let s = TestServer::start().await;
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
    let config = "steps:\n  - name: hi\n    image: sh\n    commands:\n      - echo $GREETING\n";
    push_files(&s, "alice/app", &[(".woodpecker.yaml", config)], "first").await;
    let form_path = format!("/repos/{id}/manual");

    // The repository page links to the form for those who may run; the form lists the
    // branches the API's /branches gives.
    let mut alice = signed_in(&s, "alice").await;
    let page = alice.get(&format!("/repos/{id}")).await.expect(200).text();
    assert!(page.contains(&format!("href=\"{form_path}\"")), "{page}");
    let page = alice.get(&form_path).await.expect(200).text();
    let branches = s
        .http
        .get(&format!("/api/repos/{id}/branches"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    for b in branches.as_array().unwrap() {
        let b = b.as_str().unwrap();
        assert!(
            page.contains(&format!("<option value=\"{b}\"")),
            "{b}: {page}"
        );
    }
    assert!(
        page.contains("selected>main<"),
        "the default branch: {page}"
    );
    let csrf = csrf_of(&page);

    // Who may open and post it: as the API's manual run (anonymous 401, stranger 404).
    s.http.get(&form_path, None).await.expect(401);
    s.http.get(&form_path, Some(&p.bob)).await.expect(404);
    s.http.get(&form_path, Some(&p.admin)).await.expect(200);
    s.http
        .send("POST", &form_path, None, Some(b"branch=main"), &[FORM])
        .await
        .expect(401);
    s.http
        .send(
            "POST",
            &form_path,
            Some(&p.bob),
            Some(b"branch=main"),
            &[FORM],
        )
        .await
        .expect(404);
    let r = alice.post_form(&form_path, &[("branch", "main")]).await;
    assert_eq!(r.status.as_u16(), 403, "no csrf field: {}", r.text());

    // Bad input: the form again, with the reason and everything entered.
    for (rows, reason) in [
        (vec![("", "orphan value")], "no variable name"),
        (vec![("A", "1"), ("A", "2")], "given twice"),
        (vec![("CI_COMMIT_SHA", "forged")], "CI_"),
    ] {
        let mut fields = vec![
            ("csrf", csrf.as_str()),
            ("branch", "main"),
            ("message", "<kept message>"),
        ];
        for (k, v) in &rows {
            fields.push(("key", k));
            fields.push(("value", v));
        }
        let r = alice.post_form(&form_path, &fields).await;
        assert_eq!(r.status.as_u16(), 400, "{rows:?}: {}", r.text());
        let page = r.text();
        assert!(page.contains(reason), "{reason}: {page}");
        assert!(page.contains("value=\"&#60;kept message&#62;\""), "{page}");
        for (k, v) in &rows {
            assert!(page.contains(&format!("value=\"{v}\"")), "{v}: {page}");
            if !k.is_empty() {
                assert!(page.contains(&format!("value=\"{k}\"")), "{k}: {page}");
            }
        }
    }
    let r = alice
        .post_form(&form_path, &[("csrf", &csrf), ("branch", "no-such-branch")])
        .await;
    assert!(
        r.status.is_client_error() || r.status.is_server_error(),
        "{}",
        r.status
    );
    assert!(r.text().contains("no-such-branch"), "{}", r.text());
    let none = s
        .http
        .get(&format!("/api/repos/{id}/pipelines"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(none.as_array().unwrap().len(), 1, "only the push's: {none}");

    // A run: on to the new pipeline, made as the API makes it.
    let r = alice
        .post_form(
            &form_path,
            &[
                ("csrf", &csrf),
                ("branch", "main"),
                ("message", "by hand"),
                ("key", "GREETING"),
                ("value", "hello there"),
                ("key", ""),
                ("value", ""),
            ],
        )
        .await;
    assert_eq!(r.status.as_u16(), 303, "{}", r.text());
    assert_eq!(
        r.header("location"),
        Some(format!("/repos/{id}/pipeline/2").as_str())
    );
    let made = s
        .http
        .get(&format!("/api/repos/{id}/pipelines/2"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(made["event"], "manual");
    assert_eq!(made["message"], "MANUAL: by hand @ main");
    assert_eq!(made["variables"]["GREETING"], "hello there");
    assert_eq!(made["author"], "alice");
    let page = alice
        .get(&format!("/repos/{id}/pipeline/2"))
        .await
        .expect(200)
        .text();
    assert!(page.contains("Pipeline #2 started."), "{page}");
    s.stop().await;
}

#[tokio::test]
async fn a_pipelines_config_and_changed_files_are_pages_of_their_own() {
    let s = TestServer::start().await;
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
    let config = "# <script>alert('x')</script> & more\nsteps:\n  - name: hi\n    image: sh\n    commands:\n      - echo hi\n";
    push_files(
        &s,
        "alice/app",
        &[(".woodpecker.yaml", config), ("src/<b>odd</b>.txt", "x")],
        "files",
    )
    .await;
    let base = format!("/repos/{id}/pipeline/1");
    wait_for(&s.http, &p.alice, id, 1, 30, |p| p["number"] == 1).await;

    let r = s
        .http
        .get(&format!("{base}/config"), Some(&p.alice))
        .await
        .expect(200);
    let page = r.text();
    assert!(page.contains("<code>.woodpecker.yaml</code>"), "{page}");
    assert!(
        page.contains("# &#60;script&#62;alert(&#39;x&#39;)&#60;/script&#62; &#38; more"),
        "escaped, in full: {page}"
    );
    assert!(!page.contains("<script>"), "{page}");
    // The same files the API's /config gives (its hash shown).
    let api = s
        .http
        .get(
            &format!("/api/repos/{id}/pipelines/1/config"),
            Some(&p.alice),
        )
        .await
        .expect(200)
        .json();
    let hash = api[0]["hash"].as_str().unwrap();
    assert!(page.contains(hash), "{page}");

    let page = s
        .http
        .get(&format!("{base}/changed-files"), Some(&p.alice))
        .await
        .expect(200)
        .text();
    assert!(page.contains("<code>.woodpecker.yaml</code>"), "{page}");
    assert!(
        page.contains("<code>src/&#60;b&#62;odd&#60;/b&#62;.txt</code>"),
        "{page}"
    );

    // Who sees them: as the API (anonymous 401, stranger 404, admin 200); bad ids.
    for tab in ["config", "changed-files"] {
        let path = format!("{base}/{tab}");
        s.http.get(&path, None).await.expect(401);
        s.http.get(&path, Some(&p.bob)).await.expect(404);
        s.http.get(&path, Some(&p.admin)).await.expect(200);
        s.http
            .get(&format!("/repos/{id}/pipeline/9/{tab}"), Some(&p.alice))
            .await
            .expect(404);
        s.http
            .get(&format!("/repos/{id}/pipeline/x/{tab}"), Some(&p.alice))
            .await
            .expect(400);
    }
    s.stop().await;
}

/// Signing in returns to the page that asked for it, and only to a page of this site.
#[tokio::test]
async fn signing_in_returns_to_the_page_and_never_off_site() {
    let s = TestServer::start().await;
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
    // A private page offers the sign-in with itself as `next`; the login page carries it.
    let wanted = format!("/repos/{id}?page=1");
    let page = s.http.get(&wanted, None).await.expect(401).text();
    let next = format!("%2Frepos%2F{id}%3Fpage%3D1");
    assert!(
        page.contains(&format!("href=\"/login?next={next}\"")),
        "{page}"
    );
    let mut b = Browser::new(&s.http);
    let login = b
        .get(&format!("/login?next={next}"))
        .await
        .expect(200)
        .text();
    assert!(
        login.contains(&format!("name=\"next\" value=\"/repos/{id}?page=1\"")),
        "{login}"
    );
    let form_token = {
        let at = login.find("name=\"form_token\" value=\"").unwrap() + 25;
        login[at..at + login[at..].find('"').unwrap()].to_string()
    };
    let r = b
        .post_form(
            "/authorize",
            &[
                ("form_token", &form_token),
                ("token", &p.alice),
                ("next", &wanted),
            ],
        )
        .await;
    assert_eq!(r.status.as_u16(), 303);
    assert_eq!(r.header("location"), Some(wanted.as_str()));
    b.get(&wanted).await.expect(200);

    // Elsewhere is refused: the login page drops it, a sign-in goes home instead.
    for bad in [
        "https://evil.example/",
        "//evil.example/x",
        "/\\evil.example",
        "javascript:alert(1)",
    ] {
        let encoded: String = form_urlencoded::byte_serialize(bad.as_bytes()).collect();
        let login = b
            .get(&format!("/login?next={encoded}"))
            .await
            .expect(200)
            .text();
        assert!(!login.contains("name=\"next\""), "{bad}: {login}");
        let link = login_link(&s, "alice");
        let r = b
            .get(&format!(
                "{}&next={encoded}",
                &link[link.find("/authorize").unwrap()..]
            ))
            .await;
        assert_eq!(r.status.as_u16(), 303, "{bad}");
        assert_eq!(r.header("location"), Some("/"), "{bad}");
    }
    // A login link with a good `next` goes there.
    let link = login_link(&s, "alice");
    let r = b
        .get(&format!(
            "{}&next=%2Frepos%2F{id}",
            &link[link.find("/authorize").unwrap()..]
        ))
        .await;
    assert_eq!(r.header("location"), Some(format!("/repos/{id}").as_str()));
    s.stop().await;
}

/// A forge-supplied link is a link only when it is http(s).
#[tokio::test]
async fn only_http_forge_urls_become_links() {
    use woodlark::pipeline::types::Commit;
    use woodlark::store::pipelines::{self, Pipeline};
    let s = TestServer::start().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    s.app_state
        .ci
        .store_for_tests()
        .write(move |c| {
            for (number, url) in [(1, "javascript:alert(1)"), (2, "https://forge.example/c/1")] {
                let p = Pipeline {
                    commit: Commit {
                        sha: format!("{number:040}"),
                        forge_url: url.into(),
                        ..Commit::default()
                    },
                    ..Pipeline::default()
                };
                pipelines::create(c, id, number, &p, &[], &[])?;
            }
            Ok(())
        })
        .await
        .unwrap();
    let page = s
        .http
        .get(&format!("/repos/{id}/pipeline/1"), Some(&p.alice))
        .await
        .expect(200)
        .text();
    assert!(!page.contains("javascript:"), "{page}");
    assert!(!page.contains("on the forge"), "{page}");
    let page = s
        .http
        .get(&format!("/repos/{id}/pipeline/2"), Some(&p.alice))
        .await
        .expect(200)
        .text();
    assert!(
        page.contains("<a href=\"https://forge.example/c/1\" rel=\"noreferrer\">on the forge</a>"),
        "{page}"
    );
    s.stop().await;
}
