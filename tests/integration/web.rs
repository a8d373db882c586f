//! The browser surface: UI files with SPA fallback and `/BASE_PATH` rewriting, the built-in
//! page, `/web-config.js`, sign-in with a token or a one-time login link (through the real
//! CLI), cookie sessions with CSRF, and logout. A small cookie jar plays the browser.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::util::{BIN, Http, Resp, TestServer, write_config};

/// A browser: an HTTP client that keeps the cookies it is given.
pub(crate) struct Browser {
    http: Http,
    cookies: Vec<(String, String)>,
}

impl Browser {
    pub(crate) fn new(http: &Http) -> Browser {
        Browser {
            http: http.clone(),
            cookies: Vec::new(),
        }
    }

    /// The same browser (its cookies) talking to another server: a replica behind a proxy.
    pub(crate) fn switch_to(&mut self, http: &Http) {
        self.http = http.clone();
    }

    pub(crate) fn cookie(&self, name: &str) -> Option<&str> {
        self.cookies
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn set(&mut self, name: &str, value: &str) {
        self.cookies.retain(|(n, _)| n != name);
        self.cookies.push((name.to_string(), value.to_string()));
    }

    pub(crate) async fn send(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&str>,
        extra: &[(&str, &str)],
    ) -> Resp {
        let cookie_header = self
            .cookies
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let mut headers: Vec<(&str, &str)> = extra.to_vec();
        if !cookie_header.is_empty() {
            headers.push(("cookie", &cookie_header));
        }
        let r = self
            .http
            .send(method, path, None, body.map(str::as_bytes), &headers)
            .await;
        for set in r.headers.get_all("set-cookie") {
            let set = set.to_str().unwrap();
            let (pair, attrs) = set.split_once(';').unwrap_or((set, ""));
            let (name, value) = pair.split_once('=').unwrap();
            self.cookies.retain(|(n, _)| n != name);
            if !attrs.contains("Max-Age=0") {
                self.cookies.push((name.to_string(), value.to_string()));
            }
        }
        r
    }

    pub(crate) async fn get(&mut self, path: &str) -> Resp {
        self.send("GET", path, None, &[]).await
    }

    /// Posts the sign-in form (as a browser would, with whatever cookies it holds).
    pub(crate) async fn post_form(&mut self, path: &str, fields: &[(&str, &str)]) -> Resp {
        let body: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        self.send(
            "POST",
            path,
            Some(&body),
            &[("content-type", "application/x-www-form-urlencoded")],
        )
        .await
    }
}

/// The `window.WOODPECKER_*` globals of a web-config.js, parsed as JSON.
pub(crate) fn globals(r: &Resp) -> serde_json::Map<String, Value> {
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/javascript"),
        "{:?}",
        r.header("content-type")
    );
    let mut out = serde_json::Map::new();
    for line in r.text().lines().filter(|l| !l.trim().is_empty()) {
        let rest = line.strip_prefix("window.WOODPECKER_").expect(line);
        let (name, value) = rest.split_once(" = ").expect(line);
        let value = value.strip_suffix(';').expect(line);
        out.insert(name.to_string(), serde_json::from_str(value).expect(line));
    }
    out
}

/// The hidden form token of a sign-in page.
pub(crate) fn form_token(page: &Resp) -> String {
    let html = page.text();
    let start = html
        .find("name=\"form_token\" value=\"")
        .expect("form token")
        + 25;
    html[start..].split('"').next().unwrap().to_string()
}

fn set_cookie_of<'a>(r: &'a Resp, name: &str) -> Option<&'a str> {
    r.headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with(&format!("{name}=")))
}

/// A small UI build: an index, a hashed script and stylesheet, an icon and an image, plus a
/// file outside the directory and a symlink to it from inside.
fn fake_ui(base: &Path) -> PathBuf {
    let dir = base.join("ui");
    std::fs::create_dir_all(dir.join("assets")).unwrap();
    std::fs::write(
        dir.join("index.html"),
        "<!doctype html><html><head>\
         <link rel=\"icon\" href=\"/BASE_PATH/favicon.svg\">\
         <script src=\"/BASE_PATH/web-config.js\"></script>\
         <script type=\"module\" src=\"/BASE_PATH/assets/index-3f2a.js\"></script>\
         <link rel=\"stylesheet\" href=\"/BASE_PATH/assets/index-9c1d.css\">\
         </head><body><div id=\"app\">fake ui</div></body></html>",
    )
    .unwrap();
    std::fs::write(
        dir.join("assets/index-3f2a.js"),
        "const base = \"/BASE_PATH\"; fetch(base + \"/api/user\");",
    )
    .unwrap();
    std::fs::write(dir.join("assets/index-9c1d.css"), "body{color:red}").unwrap();
    std::fs::write(
        dir.join("favicon.svg"),
        "<svg xmlns=\"http://www.w3.org/2000/svg\"/>",
    )
    .unwrap();
    std::fs::write(dir.join("assets/logo.png"), [0x89, b'P', b'N', b'G']).unwrap();
    std::fs::write(base.join("secret.txt"), "TOP-SECRET").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(base.join("secret.txt"), dir.join("leak.txt")).unwrap();
    dir
}

async fn start_with_ui(web_extra: &str, tables: &str) -> (TestServer, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ui = fake_ui(dir.path());
    let custom = dir.path().join("custom.js");
    std::fs::write(&custom, "console.log('custom');").unwrap();
    let tables = format!(
        "[web]\ndir = {:?}\ncustom_js = {:?}\n{web_extra}\n{tables}",
        ui.display().to_string(),
        custom.display().to_string()
    );
    let s = TestServer::start_in_with_tables(dir, "", &tables).await;
    (s, ui)
}

#[tokio::test]
async fn without_a_ui_dir_the_root_is_a_short_page() {
    let s = TestServer::start().await;
    let r = s.http.get("/", None).await.expect(200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let page = r.text();
    assert!(page.contains("Woodlark"), "{page}");
    assert!(page.contains("https://woodpecker-ci.org/api"), "{page}");
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert!(r.header("content-security-policy").is_some());
    // No SPA fallback without a UI: unknown paths stay 404.
    s.http.get("/repos/1", None).await.expect(404);
    // The UI's customisation hooks answer, empty.
    let js = s.http.get("/assets/custom.js", None).await.expect(200);
    assert!(
        js.header("content-type")
            .unwrap()
            .starts_with("application/javascript")
    );
    assert!(js.body.is_empty());
    let css = s.http.get("/assets/custom.css", None).await.expect(200);
    assert!(css.header("content-type").unwrap().starts_with("text/css"));
}

#[tokio::test]
async fn ui_files_fallback_caching_and_base_path() {
    let (s, _ui) = start_with_ui("", "").await;
    let http = &s.http;

    let index = http.get("/", None).await.expect(200);
    assert_eq!(
        index.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert!(index.header("cache-control").unwrap().contains("no-cache"));
    let html = index.text();
    assert!(!html.contains("BASE_PATH"), "{html}");
    assert!(html.contains("src=\"/web-config.js\""), "{html}");
    assert!(html.contains("src=\"/assets/index-3f2a.js\""), "{html}");

    // Hashed assets: right type, rewritten, cached for a year.
    let js = http.get("/assets/index-3f2a.js", None).await.expect(200);
    assert_eq!(
        js.header("content-type"),
        Some("application/javascript; charset=utf-8")
    );
    assert_eq!(
        js.header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    assert_eq!(js.text(), "const base = \"\"; fetch(base + \"/api/user\");");
    let css = http.get("/assets/index-9c1d.css", None).await.expect(200);
    assert_eq!(css.header("content-type"), Some("text/css; charset=utf-8"));
    let png = http.get("/assets/logo.png", None).await.expect(200);
    assert_eq!(png.header("content-type"), Some("image/png"));
    assert_eq!(&png.body[..], &[0x89, b'P', b'N', b'G']);
    let icon = http.get("/favicon.svg", None).await.expect(200);
    assert_eq!(icon.header("content-type"), Some("image/svg+xml"));
    assert!(icon.header("cache-control").unwrap().contains("no-cache"));
    let head = http
        .send("HEAD", "/assets/index-3f2a.js", None, None, &[])
        .await
        .expect(200);
    assert!(head.body.is_empty());

    // SPA routes get index.html; missing assets and API paths do not.
    for path in [
        "/repos/1/pipeline/2",
        "/login",
        "/org/7/settings?tab=secrets",
    ] {
        let r = http.get(path, None).await.expect(200);
        assert!(r.text().contains("fake ui"), "{path}");
        assert!(r.header("cache-control").unwrap().contains("no-cache"));
    }
    http.get("/assets/index-0000.js", None).await.expect(404);
    let api = http.get("/api/nope", None).await.expect(404);
    assert!(
        api.header("content-type")
            .unwrap()
            .starts_with("text/plain")
    );
    let events = http.get("/events/a/b", None).await.expect(404);
    assert!(
        events.json()["message"].is_string(),
        "events keep their JSON errors"
    );
    let partkeys = http.get("/v2/participation/a/b", None).await.expect(404);
    assert!(partkeys.json()["message"].is_string());
    http.post("/api/nope", None, "{}").await.expect(404);
    http.post("/repos/1", None, "{}").await.expect(404);
    http.get("/healthz", None).await.expect(204);
    http.get("/version", None).await.expect(200);

    // Nothing outside the directory, however the path is spelled.
    for path in [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/assets/%2E%2E/%2E%2E/secret.txt",
        "/assets/..%2f..%2fsecret.txt",
        "/.%2e/secret.txt",
        "/assets/%00",
    ] {
        let r = http.get(path, None).await.expect(404);
        assert!(!r.text().contains("TOP-SECRET"), "{path}");
    }
    // A malformed escape is no path at all.
    http.get("/%zz", None).await.expect(400);
    // A symlink pointing out of the directory is no file of the UI: the SPA gets the path.
    let leak = http.get("/leak.txt", None).await.expect(200);
    assert!(leak.text().contains("fake ui"));

    // Custom files: the configured one, and an empty one.
    let custom = http.get("/assets/custom.js", None).await.expect(200);
    assert_eq!(custom.text(), "console.log('custom');");
    assert!(
        !custom
            .header("cache-control")
            .unwrap()
            .contains("immutable")
    );
    let css = http.get("/assets/custom.css", None).await.expect(200);
    assert!(css.body.is_empty());
}

#[tokio::test]
async fn a_root_path_moves_the_ui_and_its_routes() {
    let (s, _ui) = start_with_ui("root_path = \"/ci\"", "[ci]\nmount = \"/ci/api\"\n").await;
    let http = &s.http;
    for path in ["/ci", "/ci/", "/ci/repos/3"] {
        let html = http.get(path, None).await.expect(200).text();
        assert!(
            html.contains("src=\"/ci/assets/index-3f2a.js\""),
            "{path}: {html}"
        );
        assert!(html.contains("src=\"/ci/web-config.js\""), "{path}");
    }
    let js = http.get("/ci/assets/index-3f2a.js", None).await.expect(200);
    assert!(js.text().starts_with("const base = \"/ci\";"));
    http.get("/ci/api/nope", None).await.expect(404);
    http.get("/ci/assets/custom.css", None).await.expect(200);
    http.get("/", None).await.expect(404);
    let config = globals(&http.get("/ci/web-config.js", None).await.expect(200));
    assert_eq!(config["ROOT_PATH"], "/ci");

    // Sign-in and its cookies live under the root path too.
    let admin = s.user("root", true).await;
    let mut browser = Browser::new(http);
    let page = browser.get("/ci/authorize").await.expect(200);
    assert!(
        set_cookie_of(&page, "woodlark_login")
            .unwrap()
            .contains("Path=/ci/authorize")
    );
    assert!(page.text().contains("action=\"/ci/authorize\""));
    let token = form_token(&page);
    let r = browser
        .post_form(
            "/ci/authorize",
            &[("form_token", &token), ("token", &admin)],
        )
        .await
        .expect(303);
    assert_eq!(r.header("location"), Some("/ci/"));
    assert!(
        set_cookie_of(&r, "user_sess")
            .unwrap()
            .contains("Path=/ci;")
    );
    let me = globals(&browser.get("/ci/web-config.js").await.expect(200));
    assert_eq!(me["USER"]["login"], "root");
    let out = browser.get("/ci/logout").await.expect(303);
    assert_eq!(out.header("location"), Some("/ci/"));
}

#[tokio::test]
async fn web_config_for_anonymous_and_signed_in_callers() {
    let s = TestServer::start().await;
    let anon = globals(&s.http.get("/web-config.js", None).await.expect(200));
    let mut names: Vec<&str> = anon.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "CSRF",
            "DEFAULT_CONFIG_PATHS",
            "ENABLE_SWAGGER",
            "MAX_PIPELINE_LOG_LINE_COUNT",
            "ROOT_PATH",
            "SKIP_VERSION_CHECK",
            "USER",
            "USER_REGISTERED_AGENTS",
            "VERSION"
        ]
    );
    assert_eq!(anon["USER"], Value::Null);
    assert_eq!(anon["CSRF"], "");
    assert_eq!(anon["ROOT_PATH"], "");
    assert_eq!(anon["ENABLE_SWAGGER"], false);
    assert_eq!(anon["SKIP_VERSION_CHECK"], true);
    assert_eq!(anon["USER_REGISTERED_AGENTS"], true);
    assert_eq!(anon["MAX_PIPELINE_LOG_LINE_COUNT"], 5000);
    assert!(anon["DEFAULT_CONFIG_PATHS"].as_array().unwrap().len() >= 2);
    let version = s.http.get("/version", None).await.expect(200).json();
    assert_eq!(anon["VERSION"], version["version"]);
    let r = s.http.get("/web-config.js", None).await;
    assert!(r.header("cache-control").unwrap().contains("no-cache"));

    // A personal access token in the cookie (as upstream allows) signs the page in.
    let token = s.user("alice", false).await;
    let r = s
        .http
        .send(
            "GET",
            "/web-config.js",
            None,
            None,
            &[("cookie", &format!("user_sess={token}"))],
        )
        .await
        .expect(200);
    let me = globals(&r);
    assert_eq!(me["USER"]["login"], "alice");
    assert_eq!(me["USER"]["admin"], false);
    assert!(me["USER"].get("hash").is_none());
    assert!(!me["CSRF"].as_str().unwrap().is_empty());
    // A bad cookie is simply anonymous.
    let r = s
        .http
        .send(
            "GET",
            "/web-config.js",
            None,
            None,
            &[("cookie", "user_sess=garbage")],
        )
        .await
        .expect(200);
    assert_eq!(globals(&r)["USER"], Value::Null);
}

/// The login page says only what an error code means: a link's `error_description` (text of
/// the link maker's choosing, issue 45) never shows, whatever the code.
#[tokio::test]
async fn the_login_page_shows_known_messages_only() {
    let s = TestServer::start().await;
    for (code, said) in [
        ("access_denied", "Access was denied."),
        ("oauth_error", "The forge did not let us sign you in."),
        ("made_up", "Signing in failed."),
    ] {
        let page = s
            .http
            .get(
                &format!("/login?error={code}&error_description=Call+support+at+evil.example"),
                None,
            )
            .await
            .expect(200)
            .text();
        assert!(page.contains(said), "{code}: {page}");
        assert!(!page.contains("evil.example"), "{code}: {page}");
        assert!(!page.contains("made_up"), "{code}: {page}");
    }
}

#[tokio::test]
async fn token_sign_in_sessions_csrf_and_logout() {
    let s = TestServer::start().await;
    let admin = s.user("root", true).await;
    let alice = s.user("alice", false).await;
    let forge = s.git_forge(&admin).await;

    // The forge list reports the git forge as a type the UI knows.
    let forges = s.http.get("/api/forges", None).await.expect(200).json();
    assert_eq!(forges[0]["type"], "addon");
    assert_eq!(forges[0]["woodlark_type"], "git");

    s.http
        .get("/authorize?forge_id=abc", None)
        .await
        .expect(400);
    s.http
        .get("/authorize?forge_id=999", None)
        .await
        .expect(404);

    let mut browser = Browser::new(&s.http);
    let page = browser
        .get(&format!("/authorize?forge_id={forge}"))
        .await
        .expect(200);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let form_cookie = set_cookie_of(&page, "woodlark_login").unwrap();
    assert!(form_cookie.contains("HttpOnly") && form_cookie.contains("SameSite=Strict"));
    let token = form_token(&page);

    // A wrong token re-shows the form with an error, and signs nobody in.
    let bad = browser
        .post_form(
            "/authorize",
            &[("form_token", &token), ("token", "not-a-token")],
        )
        .await
        .expect(401);
    assert!(bad.text().contains("not a valid personal access token"));
    assert!(set_cookie_of(&bad, "user_sess").is_none());
    // A form posted without this browser's form cookie (another site's form) is refused.
    let token = form_token(&bad);
    let mut stranger = Browser::new(&s.http);
    stranger
        .post_form("/authorize", &[("form_token", &token), ("token", &alice)])
        .await
        .expect(400);
    assert!(stranger.cookie("user_sess").is_none());

    // The right token: a session cookie and a redirect to the root.
    let ok = browser
        .post_form("/authorize", &[("form_token", &token), ("token", &alice)])
        .await
        .expect(303);
    assert_eq!(ok.header("location"), Some("/"));
    let sess_cookie = set_cookie_of(&ok, "user_sess").unwrap();
    for attr in ["HttpOnly", "SameSite=Lax", "Path=/;", "Max-Age=259200"] {
        assert!(sess_cookie.contains(attr), "{attr}: {sess_cookie}");
    }
    assert!(!sess_cookie.contains("Secure"));
    let session = browser.cookie("user_sess").unwrap().to_string();
    assert_ne!(session, alice, "a session token, not the PAT");
    assert!(
        browser.cookie("woodlark_login").is_none(),
        "form cookie dropped"
    );

    let config = globals(&browser.get("/web-config.js").await.expect(200));
    assert_eq!(config["USER"]["login"], "alice");
    let csrf = config["CSRF"].as_str().unwrap().to_string();
    browser.get("/api/user").await.expect(200);

    // Writes with the session need the CSRF header.
    browser
        .send("POST", "/api/user/token", None, &[])
        .await
        .expect(401);
    browser
        .send(
            "POST",
            "/api/user/token",
            None,
            &[("x-csrf-token", "forged")],
        )
        .await
        .expect(401);
    let pat = browser
        .send("POST", "/api/user/token", None, &[("x-csrf-token", &csrf)])
        .await
        .expect(200);
    assert_eq!(pat.text(), alice);
    // A personal access token in the cookie needs none (as upstream).
    let mut pat_browser = Browser::new(&s.http);
    pat_browser.set("user_sess", &alice);
    pat_browser
        .send("POST", "/api/user/token", None, &[])
        .await
        .expect(200);

    // Logout clears the cookie and goes back to the root.
    let out = browser.get("/logout").await.expect(303);
    assert_eq!(out.header("location"), Some("/"));
    let cleared = set_cookie_of(&out, "user_sess").unwrap();
    assert!(cleared.contains("Max-Age=0"), "{cleared}");
    assert!(browser.cookie("user_sess").is_none());
    assert_eq!(
        globals(&browser.get("/web-config.js").await)["USER"],
        Value::Null
    );

    // Rotating the user's token secret ends every session.
    browser.set("user_sess", &session);
    browser.get("/api/user").await.expect(200);
    s.http
        .delete("/api/user/token", Some(&alice))
        .await
        .expect(200);
    browser.get("/api/user").await.expect(401);
}

#[tokio::test]
async fn cookies_are_secure_behind_tls() {
    let s = TestServer::start().await;
    let alice = s.user("alice", false).await;
    let mut browser = Browser::new(&s.http);
    let page = browser.get("/authorize").await.expect(200);
    let token = form_token(&page);
    let body: String = form_urlencoded::Serializer::new(String::new())
        .extend_pairs([("form_token", token.as_str()), ("token", alice.as_str())])
        .finish();
    let cookie = format!(
        "woodlark_login={}",
        browser.cookie("woodlark_login").unwrap()
    );
    let r = s
        .http
        .send(
            "POST",
            "/authorize",
            None,
            Some(body.as_bytes()),
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("cookie", &cookie),
                ("x-forwarded-proto", "https"),
            ],
        )
        .await
        .expect(303);
    assert!(
        set_cookie_of(&r, "user_sess")
            .unwrap()
            .ends_with("; Secure")
    );
}

/// `woodlark user login-link LOGIN --config CONFIG`.
fn cli_login_link(config: &Path, login: &str) -> std::process::Output {
    Command::new(BIN)
        .args(["user", "login-link", login, "--config"])
        .arg(config)
        .output()
        .expect("run woodlark user login-link")
}

#[tokio::test]
async fn login_links_sign_in_once() {
    let s = TestServer::start().await;
    s.user("root", true).await;
    let config = write_config(s.dir.path(), "");

    let out = cli_login_link(&config, "root");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let url = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let path = url
        .strip_prefix("http://127.0.0.1:0")
        .unwrap_or_else(|| panic!("{url}"));
    assert!(path.starts_with("/authorize?login_token="), "{url}");

    // A HEAD (link preview) does not use the link up.
    s.http.send("HEAD", path, None, None, &[]).await.expect(200);

    let mut browser = Browser::new(&s.http);
    let r = browser.get(path).await.expect(303);
    assert_eq!(r.header("location"), Some("/"));
    let config_js = globals(&browser.get("/web-config.js").await.expect(200));
    assert_eq!(config_js["USER"]["login"], "root");
    assert_eq!(config_js["USER"]["admin"], true);

    // The second use fails, and signs nobody in.
    let mut other = Browser::new(&s.http);
    let again = other.get(path).await.expect(401);
    assert!(again.text().contains("already used"));
    assert!(other.cookie("user_sess").is_none());

    // Tampered links and unknown users.
    let tampered = format!("{}x", path);
    Browser::new(&s.http).get(&tampered).await.expect(401);
    Browser::new(&s.http)
        .get("/authorize?login_token=nonsense")
        .await
        .expect(401);
    let missing = cli_login_link(&config, "nobody");
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no user \"nobody\""));
}
