//! The built-in UI's settings pages (`core/ui/src/settings.rs`, `settings_actions.rs`,
//! `scoped_actions.rs`, `admin.rs`, the user page's token and sign-out): each page and form
//! with who may use it (the REST API's answers), the CSRF field refused when wrong, bad
//! input answered with a readable 4xx page that changes nothing, and secret values and
//! registry passwords on no page.

use crate::browser::login_link;
use crate::util::{Resp, TestServer};
use crate::web::Browser;

const FORM: &str = "application/x-www-form-urlencoded";

/// A UI page: HTML under the strict policy.
pub(crate) fn assert_page(r: &Resp) {
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let csp = r.header("content-security-policy").unwrap_or_default();
    assert!(csp.contains("default-src 'self'") && !csp.contains("unsafe-inline"));
}

/// The CSRF field's value on a page.
pub(crate) fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no csrf field: {page}"));
    let rest = &page[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// A form body from pairs.
pub(crate) fn form(pairs: &[(&str, &str)]) -> String {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        out.append_pair(k, v);
    }
    out.finish()
}

/// A browser signed in as `login` through a login link.
pub(crate) async fn signed_in(s: &TestServer, login: &str) -> Browser {
    let mut b = Browser::new(&s.http);
    let link = login_link(s, login);
    let r = b.get(&link[link.find("/authorize").unwrap()..]).await;
    assert_eq!(r.status.as_u16(), 303);
    b
}

/// Posts a form as a signed-in browser, with the CSRF field of the page at `page`.
pub(crate) async fn post_form(
    b: &mut Browser,
    page: &str,
    action: &str,
    pairs: &[(&str, &str)],
) -> Resp {
    let csrf = csrf_of(&b.get(page).await.expect(200).text());
    let mut all = vec![("csrf", csrf.as_str())];
    all.extend_from_slice(pairs);
    b.send("POST", action, Some(&form(&all)), &[("content-type", FORM)])
        .await
}

/// Posts a form with a bearer token (no session: no CSRF field needed, as for the API).
async fn post_token(
    s: &TestServer,
    token: Option<&str>,
    action: &str,
    pairs: &[(&str, &str)],
) -> Resp {
    s.http
        .send(
            "POST",
            action,
            token,
            Some(form(pairs).as_bytes()),
            &[("content-type", FORM)],
        )
        .await
}

#[tokio::test]
async fn repo_settings_page_and_forms_as_the_api_decides() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let http = &s.http;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    http.patch(
        &format!("/api/repos/{id}"),
        Some(&p.alice),
        r#"{"visibility":"private"}"#,
    )
    .await
    .expect(200);
    let page_path = format!("/repos/{id}/settings");
    let secrets_api = format!("/api/repos/{id}/secrets");

    // Who sees the page: anonymous the sign-in offer, bob (no pull) not found, alice (the
    // repository's admin) and the instance admin the page.
    let r = http.get(&page_path, None).await.expect(401);
    assert_page(&r);
    assert!(r.text().contains("/login"), "{}", r.text());
    http.get(&page_path, Some(&p.bob)).await.expect(404);
    http.get(&secrets_api, Some(&p.bob)).await.expect(404);
    let r = http.get(&page_path, Some(&p.admin)).await.expect(200);
    assert!(r.text().contains("Settings of alice/app"), "{}", r.text());
    // A reader who is no admin: 403, as the API's settings routes.
    http.patch(
        &format!("/api/repos/{id}"),
        Some(&p.alice),
        r#"{"visibility":"public"}"#,
    )
    .await
    .expect(200);
    http.get(&secrets_api, Some(&p.bob)).await.expect(403);
    let r = http.get(&page_path, Some(&p.bob)).await.expect(403);
    assert!(
        r.text().contains("admin permission required"),
        "{}",
        r.text()
    );
    http.get(&page_path, None).await.expect(401);

    let mut alice = signed_in(&s, "alice").await;
    let r = alice.get(&page_path).await.expect(200);
    assert_page(&r);
    let page = r.text();
    for section in [
        "id=\"general\"",
        "id=\"secrets\"",
        "id=\"registries\"",
        "id=\"crons\"",
        "id=\"badge\"",
    ] {
        assert!(page.contains(section), "{section}: {page}");
    }
    // Alice is no instance admin: the trusted flags are shown, not editable.
    assert!(
        page.contains("name=\"trusted_network\" value=\"true\" disabled"),
        "{page}"
    );
    assert!(
        page.contains(&format!("/api/badges/{id}/status.svg?branch=")),
        "{page}"
    );
    assert!(page.contains("[![status-badge]("), "{page}");
    // The preview is the page's own origin, whatever `public_url` names (the policy allows
    // no other); the snippet to copy keeps the public address.
    assert!(
        page.contains(&format!("<img src=\"/api/badges/{id}/status.svg?branch=")),
        "{page}"
    );

    // A secret added through the form: listed by name, its value on no page.
    const VALUE: &str = "s3cr3t-value-never-shown";
    let add = format!("{page_path}/secrets");
    let r = post_form(
        &mut alice,
        &page_path,
        &add,
        &[
            ("name", "deploy_key"),
            ("value", VALUE),
            ("events", "push"),
            ("events", "tag"),
            ("images", "alpine, debian"),
        ],
    )
    .await
    .expect(303);
    assert_eq!(
        r.header("location"),
        Some(format!("{page_path}#secrets").as_str())
    );
    let page = alice.get(&page_path).await.expect(200).text();
    assert!(
        page.contains("deploy_key") && page.contains("push, tag"),
        "{page}"
    );
    assert!(page.contains("Secret added."), "the message: {page}");
    assert!(!page.contains(VALUE), "the value shown: {page}");
    let listed = http
        .get(&secrets_api, Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(listed[0]["name"], "deploy_key");
    assert_eq!(listed[0]["images"], serde_json::json!(["alpine", "debian"]));
    for other in ["/repos".to_string(), format!("/repos/{id}"), "/user".into()] {
        assert!(!alice.get(&other).await.text().contains(VALUE), "{other}");
    }

    // A wrong or missing CSRF field: 403, nothing stored.
    for csrf in ["", "not-a-token"] {
        let body = form(&[
            ("csrf", csrf),
            ("name", "sneaky"),
            ("value", "x"),
            ("events", "push"),
        ]);
        let r = alice
            .send("POST", &add, Some(&body), &[("content-type", FORM)])
            .await
            .expect(403);
        assert_page(&r);
        assert!(r.text().contains("reload the page"), "{}", r.text());
    }
    // Bad input: the API's 422 as a page, nothing stored; a duplicate 409.
    let r = post_form(
        &mut alice,
        &page_path,
        &add,
        &[("name", "no_events"), ("value", "x")],
    )
    .await
    .expect(422);
    assert_page(&r);
    assert!(r.text().contains("invalid secret event"), "{}", r.text());
    let r = post_form(
        &mut alice,
        &page_path,
        &add,
        &[("name", "deploy_key"), ("value", "y"), ("events", "push")],
    )
    .await;
    assert_eq!(r.status.as_u16(), 409, "{}", r.text());
    let r = post_form(&mut alice, &page_path, &add, &[("name", "x")]).await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text());
    // Not a form: from a session without its CSRF field 403, with a token the reason.
    let json_body = "{\"name\":\"j\"}";
    let json = [("content-type", "application/json")];
    alice
        .send("POST", &add, Some(json_body), &json)
        .await
        .expect(403);
    let r = http
        .send(
            "POST",
            &add,
            Some(&p.alice),
            Some(json_body.as_bytes()),
            &json,
        )
        .await
        .expect(400);
    assert!(r.text().contains("x-www-form-urlencoded"), "{}", r.text());
    let names: Vec<_> = http
        .get(&secrets_api, Some(&p.alice))
        .await
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["deploy_key"]);

    // Edited without its value (the value kept), then deleted.
    post_form(
        &mut alice,
        &page_path,
        &format!("{page_path}/secrets/edit"),
        &[
            ("name", "deploy_key"),
            ("value", ""),
            ("events", "deployment"),
        ],
    )
    .await
    .expect(303);
    let one = http
        .get(&format!("{secrets_api}/deploy_key"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(one["events"], serde_json::json!(["deployment"]));
    assert!(one.get("value").is_none_or(|v| v == ""), "{one}");

    // Others cannot post the forms: anonymous the sign-in page, bob 403 (he reads the
    // public repository) with the API's message; nothing changes.
    let del = format!("{page_path}/secrets/delete");
    post_token(&s, None, &del, &[("name", "deploy_key")])
        .await
        .expect(401);
    let r = post_token(&s, Some(&p.bob), &del, &[("name", "deploy_key")])
        .await
        .expect(403);
    assert_page(&r);
    http.get(&format!("{secrets_api}/deploy_key"), Some(&p.alice))
        .await
        .expect(200);
    // The instance admin may.
    post_token(&s, Some(&p.admin), &del, &[("name", "deploy_key")])
        .await
        .expect(303);
    http.get(&format!("{secrets_api}/deploy_key"), Some(&p.alice))
        .await
        .expect(404);
    let r = post_form(&mut alice, &page_path, &del, &[("name", "gone")])
        .await
        .expect(404);
    assert!(r.text().contains("Secret not found"), "{}", r.text());

    // General settings, as PATCH /api/repos/{id} takes them.
    let r = post_form(
        &mut alice,
        &page_path,
        &page_path,
        &[("timeout", "soon"), ("visibility", "private")],
    )
    .await
    .expect(400);
    assert!(
        r.text().contains("timeout must be a whole number"),
        "{}",
        r.text()
    );
    let r = post_form(
        &mut alice,
        &page_path,
        &page_path,
        &[("timeout", "30"), ("visibility", "secret")],
    )
    .await
    .expect(400);
    assert!(r.text().contains("invalid visibility"), "{}", r.text());
    let got = http
        .get(&format!("/api/repos/{id}"), Some(&p.alice))
        .await
        .json();
    assert_eq!(got["visibility"], "public", "nothing changed: {got}");
    post_form(
        &mut alice,
        &page_path,
        &page_path,
        &[
            ("config_file", ".ci.yaml"),
            ("timeout", "30"),
            ("visibility", "internal"),
            ("require_approval", "all_events"),
            ("allow_pr", "true"),
            ("cancel_previous_pipeline_events", "push"),
        ],
    )
    .await
    .expect(303);
    let got = http
        .get(&format!("/api/repos/{id}"), Some(&p.alice))
        .await
        .json();
    assert_eq!(got["config_file"], ".ci.yaml");
    assert_eq!(got["timeout"], 30);
    assert_eq!(got["visibility"], "internal");
    assert_eq!(got["require_approval"], "all_events");
    assert_eq!(got["allow_pr"], true);
    assert_eq!(got["allow_deploy"], false);
    assert_eq!(
        got["cancel_previous_pipeline_events"],
        serde_json::json!(["push"])
    );
    // Trusted flags: refused for a repository admin (403, as the API), set by an admin.
    let r = post_form(
        &mut alice,
        &page_path,
        &page_path,
        &[("timeout", "30"), ("trusted_network", "true")],
    )
    .await
    .expect(403);
    assert!(
        r.text()
            .contains("trusted settings needs an instance admin"),
        "{}",
        r.text()
    );
    let page = http.get(&page_path, Some(&p.admin)).await.text();
    assert!(
        page.contains("name=\"trusted_network\" value=\"true\">"),
        "editable: {page}"
    );
    post_token(
        &s,
        Some(&p.admin),
        &page_path,
        &[
            ("timeout", "30"),
            ("visibility", "internal"),
            ("trusted_volumes", "true"),
        ],
    )
    .await
    .expect(303);
    let got = http
        .get(&format!("/api/repos/{id}"), Some(&p.alice))
        .await
        .json();
    assert_eq!(got["trusted"]["volumes"], true, "{got}");
    assert_eq!(got["trusted"]["network"], false, "{got}");

    // Registries: added, listed without the password, deleted.
    const PASSWORD: &str = "registry-password-never-shown";
    post_form(
        &mut alice,
        &page_path,
        &format!("{page_path}/registries"),
        &[
            ("address", "registry.example.com"),
            ("username", "robot"),
            ("password", PASSWORD),
        ],
    )
    .await
    .expect(303);
    let page = alice.get(&page_path).await.expect(200).text();
    assert!(
        page.contains("registry.example.com") && page.contains("robot"),
        "{page}"
    );
    assert!(!page.contains(PASSWORD), "{page}");
    let r = post_form(
        &mut alice,
        &page_path,
        &format!("{page_path}/registries"),
        &[("address", "r.example"), ("username", "u")],
    )
    .await
    .expect(422);
    assert!(r.text().contains("empty password"), "{}", r.text());
    post_form(
        &mut alice,
        &page_path,
        &format!("{page_path}/registries/delete"),
        &[("address", "registry.example.com")],
    )
    .await
    .expect(303);
    let regs = http
        .get(&format!("/api/repos/{id}/registries"), Some(&p.alice))
        .await
        .json();
    assert_eq!(regs, serde_json::json!([]));

    // Crons: added, listed, a bad schedule refused, deleted; running one on a branch without
    // a configuration is the API's 404 as a page.
    let crons = format!("{page_path}/crons");
    post_form(
        &mut alice,
        &page_path,
        &crons,
        &[
            ("name", "nightly"),
            ("schedule", "@daily"),
            ("branch", "main"),
        ],
    )
    .await
    .expect(303);
    let r = post_form(
        &mut alice,
        &page_path,
        &crons,
        &[("name", "bad"), ("schedule", "every now and then")],
    )
    .await;
    assert_eq!(r.status.as_u16(), 422, "{}", r.text());
    let listed = http
        .get(&format!("/api/repos/{id}/cron"), Some(&p.alice))
        .await
        .json();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let cron_id = listed[0]["id"].as_i64().unwrap().to_string();
    let page = alice.get(&page_path).await.text();
    assert!(
        page.contains("nightly") && page.contains("@daily"),
        "{page}"
    );
    let r = post_form(
        &mut alice,
        &page_path,
        &format!("{crons}/run"),
        &[("id", &cron_id)],
    )
    .await;
    assert_eq!(r.status.as_u16(), 404, "{}", r.text());
    assert_page(&r);
    let r = post_form(
        &mut alice,
        &page_path,
        &format!("{crons}/delete"),
        &[("id", "x")],
    )
    .await
    .expect(400);
    assert_page(&r);
    post_form(
        &mut alice,
        &page_path,
        &format!("{crons}/delete"),
        &[("id", &cron_id)],
    )
    .await
    .expect(303);
    let listed = http
        .get(&format!("/api/repos/{id}/cron"), Some(&p.alice))
        .await
        .json();
    assert_eq!(listed, serde_json::json!([]));
}

#[tokio::test]
async fn admin_page_and_forms_for_instance_admins_only() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let http = &s.http;

    // Anonymous: the sign-in page; a user: the API's 403 as a page; an admin: the page.
    let r = http.get("/admin", None).await.expect(303);
    assert_eq!(r.header("location"), Some("/login?next=%2Fadmin"));
    let r = http.get("/admin", Some(&p.bob)).await.expect(403);
    assert_page(&r);
    assert!(
        r.text().contains("admin permission required"),
        "{}",
        r.text()
    );
    let r = http.get("/admin", Some(&p.admin)).await.expect(200);
    assert_page(&r);
    let page = r.text();
    for section in [
        "id=\"users\"",
        "id=\"agents\"",
        "id=\"queue\"",
        "id=\"forges\"",
        "id=\"secrets\"",
        "id=\"registries\"",
    ] {
        assert!(page.contains(section), "{section}: {page}");
    }
    assert!(page.contains("alice") && page.contains("bob"), "{page}");
    let version = http.get("/version", None).await.json()["version"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(page.contains(&version), "{page}");

    let mut root = signed_in(&s, "root").await;
    // Users: added (a bad login refused, nothing made), made admin, revoked, deleted.
    let r = post_form(
        &mut root,
        "/admin",
        "/admin/users",
        &[("login", "carol"), ("email", "carol@example.com")],
    )
    .await
    .expect(303);
    assert_eq!(r.header("location"), Some("/admin#users"));
    http.get("/api/users/carol", Some(&p.admin))
        .await
        .expect(200);
    let r = post_form(
        &mut root,
        "/admin",
        "/admin/users",
        &[("login", "no spaces allowed")],
    )
    .await;
    assert_eq!(r.status.as_u16(), 400, "{}", r.text());
    assert_page(&r);
    http.get("/api/users/no%20spaces%20allowed", Some(&p.admin))
        .await
        .expect(404);
    post_form(
        &mut root,
        "/admin",
        "/admin/users/admin",
        &[("login", "carol"), ("admin", "true")],
    )
    .await
    .expect(303);
    assert_eq!(
        http.get("/api/users/carol", Some(&p.admin)).await.json()["admin"],
        true
    );
    post_form(
        &mut root,
        "/admin",
        "/admin/users/admin",
        &[("login", "carol"), ("admin", "maybe")],
    )
    .await
    .expect(400);
    post_form(
        &mut root,
        "/admin",
        "/admin/users/admin",
        &[("login", "carol"), ("admin", "false")],
    )
    .await
    .expect(303);
    assert_eq!(
        http.get("/api/users/carol", Some(&p.admin)).await.json()["admin"],
        false
    );
    // Bob may not; a wrong CSRF field is refused.
    post_token(
        &s,
        Some(&p.bob),
        "/admin/users/delete",
        &[("login", "carol")],
    )
    .await
    .expect(403);
    post_token(&s, None, "/admin/users/delete", &[("login", "carol")])
        .await
        .expect(401);
    let body = form(&[("csrf", "forged"), ("login", "carol")]);
    root.send(
        "POST",
        "/admin/users/delete",
        Some(&body),
        &[("content-type", FORM)],
    )
    .await
    .expect(403);
    http.get("/api/users/carol", Some(&p.admin))
        .await
        .expect(200);
    post_form(
        &mut root,
        "/admin",
        "/admin/users/delete",
        &[("login", "carol")],
    )
    .await
    .expect(303);
    http.get("/api/users/carol", Some(&p.admin))
        .await
        .expect(404);

    // Agents: the new agent's token shown on the answer, once; then deleted.
    let r = post_form(
        &mut root,
        "/admin",
        "/admin/agents",
        &[("name", "runner-one")],
    )
    .await
    .expect(200);
    assert_page(&r);
    let agents = http.get("/api/agents", Some(&p.admin)).await.json();
    let agent = agents
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "runner-one")
        .unwrap()
        .clone();
    let token = agent["token"].as_str().unwrap();
    assert!(!token.is_empty());
    assert!(r.text().contains(token), "{}", r.text());
    let page = root.get("/admin").await.expect(200).text();
    assert!(
        page.contains("runner-one") && !page.contains(token),
        "{page}"
    );
    post_form(&mut root, "/admin", "/admin/agents", &[("name", "")])
        .await
        .expect(422);
    post_token(&s, Some(&p.bob), "/admin/agents", &[("name", "bobs")])
        .await
        .expect(403);
    let agent_id = agent["id"].as_i64().unwrap().to_string();
    post_form(
        &mut root,
        "/admin",
        "/admin/agents/delete",
        &[("id", &agent_id)],
    )
    .await
    .expect(303);
    http.get(&format!("/api/agents/{agent_id}"), Some(&p.admin))
        .await
        .expect(404);

    // The queue: paused and resumed as the API's info says.
    post_form(&mut root, "/admin", "/admin/queue/pause", &[])
        .await
        .expect(303);
    assert_eq!(
        http.get("/api/queue/info", Some(&p.admin)).await.json()["paused"],
        true
    );
    assert!(
        root.get("/admin")
            .await
            .text()
            .contains("<dd id=\"queue-state\">paused</dd>")
    );
    post_token(&s, Some(&p.bob), "/admin/queue/resume", &[])
        .await
        .expect(403);
    post_form(&mut root, "/admin", "/admin/queue/resume", &[])
        .await
        .expect(303);
    assert_eq!(
        http.get("/api/queue/info", Some(&p.admin)).await.json()["paused"],
        false
    );

    // An instance secret: added here, listed read-only on a repository's settings, its
    // value on no page; users may not add one.
    const VALUE: &str = "instance-wide-value-never-shown";
    post_form(
        &mut root,
        "/admin",
        "/admin/secrets",
        &[
            ("name", "shared_token"),
            ("value", VALUE),
            ("events", "push"),
        ],
    )
    .await
    .expect(303);
    post_token(
        &s,
        Some(&p.bob),
        "/admin/secrets",
        &[("name", "bobs"), ("value", "v"), ("events", "push")],
    )
    .await
    .expect(403);
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let settings = format!("/repos/{}/settings", repo["id"]);
    let mut alice = signed_in(&s, "alice").await;
    let page = alice.get(&settings).await.expect(200).text();
    assert!(page.contains("shared_token"), "{page}");
    for path in ["/admin", settings.as_str()] {
        assert!(!root.get(path).await.text().contains(VALUE), "{path}");
    }
    post_form(
        &mut root,
        "/admin",
        "/admin/secrets/delete",
        &[("name", "shared_token")],
    )
    .await
    .expect(303);
    http.get("/api/secrets/shared_token", Some(&p.admin))
        .await
        .expect(404);
}

#[tokio::test]
async fn user_page_shows_and_resets_the_token_and_signs_out() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let http = &s.http;
    let mut alice = signed_in(&s, "alice").await;
    let page = alice.get("/user").await.expect(200).text();
    assert!(
        page.contains("action=\"/user/token\"") && page.contains("action=\"/logout\""),
        "{page}"
    );
    assert!(!page.contains(&p.alice), "no token before it is asked for");

    // Shown: the API's token, working.
    let r = post_form(&mut alice, "/user", "/user/token", &[])
        .await
        .expect(200);
    assert_page(&r);
    let api_token = http
        .send("POST", "/api/user/token", Some(&p.alice), None, &[])
        .await
        .expect(200)
        .text();
    assert!(r.text().contains(api_token.trim()), "{}", r.text());
    post_token(&s, None, "/user/token", &[]).await.expect(401);
    let body = form(&[("csrf", "forged")]);
    alice
        .send(
            "POST",
            "/user/token",
            Some(&body),
            &[("content-type", FORM)],
        )
        .await
        .expect(403);

    // Reset: a new token that works; the old one and the session no longer do.
    let r = post_form(&mut alice, "/user", "/user/token/reset", &[])
        .await
        .expect(200);
    let page = r.text();
    assert!(page.contains("older tokens"), "{page}");
    let start = page.find("<p class=\"token\">").unwrap() + "<p class=\"token\">".len();
    let new_token = &page[start..start + page[start..].find('<').unwrap()];
    assert_ne!(new_token, p.alice);
    http.get("/api/user", Some(&p.alice)).await.expect(401);
    assert_eq!(
        http.get("/api/user", Some(new_token))
            .await
            .expect(200)
            .json()["login"],
        "alice"
    );
    alice.get("/user").await.expect(303);

    // Sign out: a forged post changes nothing, the page's form signs out.
    let mut bob = signed_in(&s, "bob").await;
    let body = form(&[("csrf", "forged")]);
    bob.send("POST", "/logout", Some(&body), &[("content-type", FORM)])
        .await
        .expect(403);
    assert!(bob.cookie("user_sess").is_some());
    bob.get("/user").await.expect(200);
    post_form(&mut bob, "/user", "/logout", &[])
        .await
        .expect(303);
    assert!(bob.cookie("user_sess").is_none());
    bob.get("/user").await.expect(303);
}

#[tokio::test]
async fn branches_and_pull_requests_link_to_the_filtered_pipelines() {
    use crate::pipelines::push_files;
    let s = TestServer::start().await;
    let p = s.principals().await;
    let http = &s.http;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    http.patch(
        &format!("/api/repos/{id}"),
        Some(&p.alice),
        r#"{"visibility":"private"}"#,
    )
    .await
    .expect(200);
    let config = "steps:\n  - name: hello\n    image: sh\n    commands: [\"true\"]\n";
    push_files(&s, "alice/app", &[(".woodpecker.yaml", config)], "first").await;

    let branches = format!("/repos/{id}/branches");
    let r = http.get(&branches, Some(&p.alice)).await.expect(200);
    assert_page(&r);
    let page = r.text();
    assert!(page.contains("Branches of alice/app"), "{page}");
    assert!(
        page.contains(&format!("href=\"/repos/{id}?branch=main\"")),
        "{page}"
    );
    // The list it links to, filtered by the API's own filter; the pager keeps the filter.
    let page = http
        .get(&format!("/repos/{id}?branch=main"), Some(&p.alice))
        .await
        .expect(200)
        .text();
    assert!(
        page.contains("#1") && page.contains("Show all pipelines"),
        "{page}"
    );
    let page = http
        .get(&format!("/repos/{id}?branch=elsewhere"), Some(&p.alice))
        .await
        .expect(200)
        .text();
    assert!(!page.contains("#1<"), "{page}");
    let r = http
        .get(&format!("/repos/{id}?status=sleepy"), Some(&p.alice))
        .await
        .expect(400);
    assert!(r.text().contains("invalid status"), "{}", r.text());

    let prs = format!("/repos/{id}/pull-requests");
    let page = http.get(&prs, Some(&p.alice)).await.expect(200).text();
    assert!(page.contains("No open pull requests."), "{page}");

    // As the API's /branches and /pull_requests: anonymous sign in, strangers not found.
    for path in [&branches, &prs] {
        let r = http.get(path, None).await.expect(401);
        assert!(r.text().contains("/login"), "{path}");
        http.get(path, Some(&p.bob)).await.expect(404);
        http.get(path, Some(&p.admin)).await.expect(200);
    }
    http.get("/repos/999/branches", Some(&p.alice))
        .await
        .expect(404);
}

#[tokio::test]
async fn an_organisations_page_and_settings_as_the_api_decides() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let http = &s.http;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let (id, org) = (
        repo["id"].as_i64().unwrap(),
        repo["org_id"].as_i64().unwrap(),
    );
    let org_page = format!("/orgs/{org}");
    let settings = format!("/org/{org}/settings");

    // Alice's own namespace: she is its admin.
    let page = http.get(&org_page, Some(&p.alice)).await.expect(200).text();
    assert!(
        page.contains("alice/app") && page.contains(&settings),
        "{page}"
    );
    for path in [&org_page, &settings] {
        let r = http.get(path, None).await.expect(401);
        assert!(r.text().contains("/login"), "{path}");
        let r = http.get(path, Some(&p.bob)).await.expect(403);
        assert_page(&r);
        http.get(path, Some(&p.admin)).await.expect(200);
    }
    http.get("/orgs/9999", Some(&p.alice)).await.expect(404);
    http.get("/org/x/settings", Some(&p.alice))
        .await
        .expect(400);

    // An organisation secret through the form: listed there and, read-only, on the
    // repository's settings; its value on no page. Bob may not add one.
    const VALUE: &str = "org-secret-value-never-shown";
    let mut alice = signed_in(&s, "alice").await;
    let r = post_form(
        &mut alice,
        &settings,
        &format!("{settings}/secrets"),
        &[("name", "org_token"), ("value", VALUE), ("events", "push")],
    )
    .await
    .expect(303);
    assert_eq!(
        r.header("location"),
        Some(format!("{settings}#secrets").as_str())
    );
    post_token(
        &s,
        Some(&p.bob),
        &format!("{settings}/secrets"),
        &[("name", "bobs"), ("value", "v"), ("events", "push")],
    )
    .await
    .expect(403);
    let listed = http
        .get(&format!("/api/orgs/{org}/secrets"), Some(&p.alice))
        .await
        .json();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    for path in [settings.clone(), format!("/repos/{id}/settings")] {
        let page = alice.get(&path).await.expect(200).text();
        assert!(page.contains("org_token"), "{path}: {page}");
        assert!(!page.contains(VALUE), "{path}: {page}");
    }
    post_form(
        &mut alice,
        &settings,
        &format!("{settings}/secrets/delete"),
        &[("name", "org_token")],
    )
    .await
    .expect(303);
    let listed = http
        .get(&format!("/api/orgs/{org}/secrets"), Some(&p.alice))
        .await
        .json();
    assert_eq!(listed, serde_json::json!([]));
}

#[tokio::test]
async fn adding_a_repository_from_the_forges_list() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let http = &s.http;
    let first = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    s.init_git_repo("alice/new");
    s.init_git_repo("bob/theirs");

    let r = http.get("/repos/add", None).await.expect(303);
    assert_eq!(r.header("location"), Some("/login?next=%2Frepos%2Fadd"));
    let mut alice = signed_in(&s, "alice").await;
    let r = alice.get("/repos/add").await.expect(200);
    assert_page(&r);
    let page = r.text();
    // As the API's list: alice/new to activate, alice/app active, nothing of bob's.
    let api = http
        .get("/api/user/repos?all=true", Some(&p.alice))
        .await
        .json();
    assert_eq!(api.as_array().unwrap().len(), 2, "{api}");
    assert!(page.contains("Activate alice/new"), "{page}");
    assert!(
        page.contains(&format!("href=\"/repos/{}\"", first["id"])),
        "{page}"
    );
    assert!(!page.contains("bob/theirs"), "{page}");

    // Bob may not activate in alice's namespace: the API's 403 as a page, nothing made.
    let r = post_token(
        &s,
        Some(&p.bob),
        "/repos/add",
        &[("forge_remote_id", "alice/new")],
    )
    .await
    .expect(403);
    assert_page(&r);
    let r = post_form(
        &mut alice,
        "/repos/add",
        "/repos/add",
        &[("forge_remote_id", "")],
    )
    .await;
    assert_eq!(r.status.as_u16(), 400, "{}", r.text());
    let r = post_form(
        &mut alice,
        "/repos/add",
        "/repos/add",
        &[("forge_remote_id", "alice/new")],
    )
    .await
    .expect(303);
    let location = r.header("location").unwrap().to_string();
    let page = alice.get(&location).await.expect(200).text();
    assert!(
        page.contains("alice/new") && page.contains("Repository activated."),
        "{page}"
    );
    let again = post_form(
        &mut alice,
        "/user",
        "/repos/add",
        &[("forge_remote_id", "alice/new")],
    )
    .await;
    assert_eq!(again.status.as_u16(), 409, "{}", again.text());
}
