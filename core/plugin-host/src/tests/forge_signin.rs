//! Contract 0.2.0: the GitHub adapter's sign-in and user calls against a fake GitHub
//! (Enterprise layout: the API under `/api/v3`, OAuth under `/login/oauth`) on 127.0.0.1, and
//! a forge adapter frozen at contract 0.1.0 that still loads, answers the 0.1.0 calls, and
//! reports the new ones as unsupported without being called.

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::fake_http::{Seen, fake_server};
use super::*;
use crate::types::*;

const TOKEN: &str = "gho_user1";

/// A fake GitHub Enterprise: OAuth token endpoint, user, e-mails, repos, orgs, memberships,
/// pulls, statuses. Codes `good` and refresh token `r1` are accepted.
fn github(s: &Seen) -> (u16, String) {
    let authed = s.headers.get("authorization").map(String::as_str) == Some("Bearer gho_user1");
    let page = s.query.get("page").map(String::as_str).unwrap_or("1");
    match (s.method.as_str(), s.path.as_str()) {
        ("POST", "/login/oauth/access_token") => {
            let form = String::from_utf8_lossy(&s.body).to_string();
            if form.contains("grant_type=authorization_code") && form.contains("code=good") {
                (200, json!({"access_token": TOKEN, "token_type": "bearer", "scope": "repo"}).to_string())
            } else if form.contains("grant_type=refresh_token") && form.contains("refresh_token=r1") {
                (200, json!({"access_token": "ghu_new", "refresh_token": "r2", "expires_in": 28800,
                    "refresh_token_expires_in": 15_811_200, "token_type": "bearer"}).to_string())
            } else {
                // GitHub answers a bad code with 200 and an `error` field.
                (200, json!({"error": "bad_verification_code",
                    "error_description": "The code passed is incorrect or expired."}).to_string())
            }
        }
        _ if !authed => (401, json!({"message": "Bad credentials"}).to_string()),
        ("GET", "/api/v3/user") => (
            200,
            json!({"id": 4711, "login": "octo", "email": null,
                "avatar_url": "https://avatars.example/u/4711"})
            .to_string(),
        ),
        ("GET", "/api/v3/user/emails") => (
            200,
            json!([
                {"email": "old@example.com", "primary": false, "verified": true},
                {"email": "octo@example.com", "primary": true, "verified": true},
            ])
            .to_string(),
        ),
        ("GET", "/api/v3/user/repos") if page == "1" => (
            200,
            json!([
                {"id": 1, "name": "r", "full_name": "o/r", "private": true,
                 "owner": {"login": "o", "avatar_url": "https://avatars.example/o"},
                 "html_url": "https://ghe.example/o/r", "clone_url": "https://ghe.example/o/r.git",
                 "ssh_url": "git@ghe.example:o/r.git", "default_branch": "main",
                 "permissions": {"admin": false, "push": true, "pull": true}},
                {"id": 2, "name": "old", "full_name": "o/old", "archived": true,
                 "owner": {"login": "o"}, "permissions": {"admin": true, "push": true, "pull": true}},
            ])
            .to_string(),
        ),
        ("GET", "/api/v3/user/repos") => (200, "[]".into()),
        ("GET", "/api/v3/repos/o/r") => (
            200,
            json!({"id": 1, "full_name": "o/r", "permissions": {"admin": true, "push": true, "pull": true}})
                .to_string(),
        ),
        ("GET", "/api/v3/user/orgs") => (
            200,
            json!([{"login": "acme", "id": 9, "avatar_url": "https://avatars.example/acme"}]).to_string(),
        ),
        ("GET", "/api/v3/orgs/acme/memberships/octo") => (
            200,
            json!({"state": "active", "role": "admin", "organization": {"login": "acme"}}).to_string(),
        ),
        ("GET", "/api/v3/orgs/acme/memberships/pending") => (
            200,
            json!({"state": "pending", "role": "member"}).to_string(),
        ),
        ("GET", "/api/v3/repos/o/r/pulls") => (
            200,
            json!([{"number": 7, "title": "Add a thing", "state": "open"},
                   {"number": 5, "title": "Fix", "state": "open"}])
            .to_string(),
        ),
        ("POST", "/api/v3/repos/o/r/statuses/abc123") => (201, "{}".into()),
        _ => (404, json!({"message": "Not Found"}).to_string()),
    }
}

async fn github_host(origin: &str, file: &str, source: &Path) -> (tempfile::TempDir, PluginHost) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(source, dir.path().join(file)).unwrap();
    let mut inst = instance(file);
    inst.allowed_hosts = vec![origin.to_string()];
    let cfg = config(dir.path(), vec![("github", inst)]);
    let host = host(cfg, MapSecrets::default()).await;
    (dir, host)
}

pub(super) fn ctx(origin: &str, token: &str) -> ApiContext {
    ApiContext {
        forge_url: origin.to_string(),
        token: token.to_string(),
        skip_verify: false,
        grant: ForgeGrant::default(),
    }
}

pub(super) fn client(origin: &str) -> OAuthClient {
    OAuthClient {
        forge_url: origin.to_string(),
        oauth_host: String::new(),
        client_id: "Iv1.abc".into(),
        client_secret: "shh".into(),
        redirect_uri: "https://ci.example.com/authorize".into(),
        skip_verify: false,
        grant: ForgeGrant::default(),
    }
}

pub(super) fn last(seen: &Arc<Mutex<Vec<Seen>>>) -> Seen {
    seen.lock().unwrap().last().cloned().expect("a request")
}

#[tokio::test]
async fn github_oauth_sign_in() {
    let (origin, seen) = fake_server(github).await;
    let (_dir, host) = github_host(&origin, "forge-github.wasm", &component("forge-github")).await;
    assert_eq!(host.forge_contract("github").as_deref(), Some("0.2.0"));

    let url = host
        .authorize_url("github", client(&origin), "st/1 2")
        .await
        .unwrap();
    assert_eq!(
        url,
        format!(
            "{origin}/login/oauth/authorize?client_id=Iv1.abc&redirect_uri=https%3A%2F%2Fci.example.com%2Fauthorize&response_type=code&scope=repo%20repo%3Astatus%20user%3Aemail%20read%3Aorg&state=st%2F1%202"
        )
    );
    let mut public = client(&origin);
    public.oauth_host = "https://login.example.com/".into();
    let url = host.authorize_url("github", public, "s").await.unwrap();
    assert!(
        url.starts_with("https://login.example.com/login/oauth/authorize?"),
        "{url}"
    );
    assert!(
        seen.lock().unwrap().is_empty(),
        "authorize-url makes no request"
    );

    let token = host
        .exchange_code("github", client(&origin), "good")
        .await
        .unwrap();
    assert_eq!(token.access_token, TOKEN);
    assert_eq!(
        (token.refresh_token.as_str(), token.expiry),
        ("", 0),
        "OAuth app tokens do not expire"
    );
    let req = last(&seen);
    assert_eq!(req.headers["accept"], "application/json");
    assert_eq!(
        req.headers["content-type"],
        "application/x-www-form-urlencoded"
    );
    let form = String::from_utf8(req.body).unwrap();
    for field in [
        "client_id=Iv1.abc",
        "client_secret=shh",
        "code=good",
        "redirect_uri=https%3A%2F%2Fci.example.com%2Fauthorize",
    ] {
        assert!(form.contains(field), "{field} in {form}");
    }

    let bad = host
        .exchange_code("github", client(&origin), "stale")
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), Some(crate::ErrorKind::Denied), "{bad}");
    assert!(bad.to_string().contains("bad_verification_code"), "{bad}");
    assert!(!bad.is_unsupported());

    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let fresh = host
        .refresh_token("github", client(&origin), "r1")
        .await
        .unwrap();
    assert_eq!(
        (fresh.access_token.as_str(), fresh.refresh_token.as_str()),
        ("ghu_new", "r2")
    );
    assert!(
        (before + 28800..=before + 28800 + 5).contains(&fresh.expiry),
        "{}",
        fresh.expiry
    );
    assert!(
        String::from_utf8(last(&seen).body)
            .unwrap()
            .contains("grant_type=refresh_token")
    );
    let refused = host.refresh_token("github", client(&origin), "r0").await;
    assert_eq!(refused.unwrap_err().kind(), Some(crate::ErrorKind::Denied));
}

#[tokio::test]
async fn github_user_repos_orgs_pulls_netrc_status() {
    let (origin, seen) = fake_server(github).await;
    let (_dir, host) = github_host(&origin, "forge-github.wasm", &component("forge-github")).await;
    let c = || ctx(&origin, TOKEN);

    let user = host.current_user("github", c()).await.unwrap();
    assert_eq!(
        user,
        ForgeUser {
            remote_id: "4711".into(),
            login: "octo".into(),
            email: "octo@example.com".into(),
            avatar_url: "https://avatars.example/u/4711".into(),
        }
    );
    assert_eq!(last(&seen).path, "/api/v3/user/emails");
    let anonymous = host.current_user("github", ctx(&origin, "wrong")).await;
    assert!(anonymous.is_err());

    let repos = host.user_repos("github", c(), 1, 50).await.unwrap();
    assert_eq!(
        repos.len(),
        1,
        "archived repositories are left out: {repos:?}"
    );
    assert_eq!(repos[0].repo.full_name, "o/r");
    assert_eq!(repos[0].repo.forge_remote_id, "1");
    assert_eq!(repos[0].repo.clone_url, "https://ghe.example/o/r.git");
    assert!(repos[0].repo.private);
    assert_eq!(
        repos[0].perm,
        Perm {
            pull: true,
            push: true,
            admin: false
        }
    );
    let q = &last(&seen).query;
    assert_eq!((q["per_page"].as_str(), q["page"].as_str()), ("50", "1"));
    assert!(
        host.user_repos("github", c(), 2, 500)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        last(&seen).query["per_page"],
        "100",
        "GitHub serves at most 100 a page"
    );

    let perm = host.repo_perm("github", c(), "o/r").await.unwrap();
    assert_eq!(
        perm,
        Perm {
            pull: true,
            push: true,
            admin: true
        }
    );
    let none = host.repo_perm("github", c(), "o/hidden").await.unwrap();
    assert_eq!(
        none,
        Perm::default(),
        "404 (a private repo one cannot see) is no access"
    );

    let orgs = host.user_orgs("github", c(), 1, 100).await.unwrap();
    assert_eq!(
        orgs,
        [Team {
            login: "acme".into(),
            avatar_url: "https://avatars.example/acme".into()
        }]
    );
    let m = host
        .org_membership("github", c(), "acme", "octo")
        .await
        .unwrap();
    assert_eq!(
        m,
        OrgMembership {
            member: true,
            admin: true
        }
    );
    let pending = host
        .org_membership("github", c(), "acme", "pending")
        .await
        .unwrap();
    assert_eq!(
        pending,
        OrgMembership {
            member: false,
            admin: false
        }
    );
    let stranger = host
        .org_membership("github", c(), "acme", "nobody")
        .await
        .unwrap();
    assert_eq!(stranger, OrgMembership::default(), "404: not a member");

    let pulls = host
        .pull_requests("github", c(), "o/r", 1, 30)
        .await
        .unwrap();
    assert_eq!(
        pulls,
        [
            PullRequestInfo {
                number: 7,
                title: "Add a thing".into()
            },
            PullRequestInfo {
                number: 5,
                title: "Fix".into()
            },
        ]
    );
    assert_eq!(last(&seen).query["state"], "open");

    let netrc = host
        .netrc("github", c(), "https://ghe.example:8443/o/r.git")
        .await
        .unwrap();
    assert_eq!(
        (
            netrc.machine.as_str(),
            netrc.login.as_str(),
            netrc.password.as_str()
        ),
        ("ghe.example", TOKEN, "x-oauth-basic")
    );
    assert!(
        !format!("{netrc:?}").contains(TOKEN),
        "Debug redacts the token"
    );
    let bad = host.netrc("github", c(), "not a url").await.unwrap_err();
    assert_eq!(bad.kind(), Some(crate::ErrorKind::InvalidInput), "{bad}");

    // Statuses: upstream's state mapping, and its description when the server sends none.
    for (state, want) in [
        (StatusState::Pending, "pending"),
        (StatusState::Running, "pending"),
        (StatusState::Success, "success"),
        (StatusState::Failure, "failure"),
        (StatusState::Error, "error"),
        (StatusState::Killed, "error"),
    ] {
        let status = CommitStatus {
            state,
            context: "ci/woodpecker/push/build".into(),
            description: String::new(),
            target_url: "https://ci.example.com/repos/1/pipeline/2".into(),
            ..Default::default()
        };
        host.post_status("github", c(), "o/r", "abc123", status)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&last(&seen).body).unwrap();
        assert_eq!(body["state"], want, "{state:?}");
        assert_eq!(body["context"], "ci/woodpecker/push/build");
        assert_eq!(
            body["target_url"],
            "https://ci.example.com/repos/1/pipeline/2"
        );
    }
    let body: serde_json::Value = serde_json::from_slice(&last(&seen).body).unwrap();
    assert_eq!(body["description"], "Pipeline was canceled");
}

#[tokio::test]
async fn github_api_url_override_still_applies() {
    let (origin, seen) = fake_server(github).await;
    let dir = plugin_dir(&[("forge-github.wasm", "forge-github")]);
    let mut inst = instance("forge-github.wasm");
    inst.allowed_hosts = vec![origin.clone()];
    inst.config
        .insert("api-url".into(), format!("{origin}/api/v3/"));
    let host = host(
        config(dir.path(), vec![("github", inst)]),
        MapSecrets::default(),
    )
    .await;
    // The forge URL names another host; `api-url` wins for API calls.
    let user = host
        .current_user("github", ctx("https://ghe.invalid", TOKEN))
        .await
        .unwrap();
    assert_eq!(user.login, "octo");
    assert!(
        seen.lock()
            .unwrap()
            .iter()
            .all(|s| s.path.starts_with("/api/v3/"))
    );
}

/// `plugins/testing/frozen/forge-github-0.1.0.wasm`: the GitHub adapter as built against
/// contract 0.1.0, kept so the host's support for 0.1.0 adapters stays tested.
fn frozen_v0_1() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../plugins/testing/frozen/forge-github-0.1.0.wasm")
}

#[tokio::test]
async fn adapter_built_against_0_1_0_keeps_working() {
    let (origin, seen) = fake_server(github).await;
    let (_dir, host) = github_host(&origin, "old-github.wasm", &frozen_v0_1()).await;
    assert_eq!(host.forge_contract("github").as_deref(), Some("0.1.0"));
    assert_eq!(host.list()[0].version.as_deref(), Some("0.1.0"));

    // A 0.1.0 call with an api-context (lowered in the 0.1.0 shape).
    host.post_status(
        "github",
        ctx(&origin, TOKEN),
        "o/r",
        "abc123",
        CommitStatus {
            state: StatusState::Success,
            context: "ci/woodpecker/push/build".into(),
            description: "Pipeline was successful".into(),
            target_url: "https://ci.example.com/1".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(last(&seen).path, "/api/v3/repos/o/r/statuses/abc123");

    // parse-hook and its records, lifted through the 0.2.0 types.
    let body = fixture("github-push.json");
    let req = HookRequest::post("/api/hook", &[("X-GitHub-Event", "push")], body);
    match host.parse_hook("github", req).await.unwrap() {
        HookOutcome::Build(b) => assert!(!b.repo.full_name.is_empty()),
        other => panic!("expected a build, got {other:?}"),
    }

    // The new calls: unsupported, and the adapter is not called.
    let calls_before = host.list()[0].calls.total;
    let requests_before = seen.lock().unwrap().len();
    let errors = [
        host.authorize_url("github", client(&origin), "s")
            .await
            .unwrap_err(),
        host.exchange_code("github", client(&origin), "good")
            .await
            .unwrap_err(),
        host.refresh_token("github", client(&origin), "r1")
            .await
            .unwrap_err(),
        host.current_user("github", ctx(&origin, TOKEN))
            .await
            .unwrap_err(),
        host.user_repos("github", ctx(&origin, TOKEN), 1, 10)
            .await
            .unwrap_err(),
        host.repo_perm("github", ctx(&origin, TOKEN), "o/r")
            .await
            .unwrap_err(),
        host.user_orgs("github", ctx(&origin, TOKEN), 1, 10)
            .await
            .unwrap_err(),
        host.org_membership("github", ctx(&origin, TOKEN), "acme", "octo")
            .await
            .unwrap_err(),
        host.pull_requests("github", ctx(&origin, TOKEN), "o/r", 1, 10)
            .await
            .unwrap_err(),
        host.netrc("github", ctx(&origin, TOKEN), "https://ghe.example/o/r.git")
            .await
            .unwrap_err(),
    ];
    for e in &errors {
        assert!(e.is_unsupported(), "{e}");
        assert!(e.to_string().contains("forge contract 0.1.0"), "{e}");
    }
    assert_eq!(host.list()[0].calls.total, calls_before);
    assert_eq!(seen.lock().unwrap().len(), requests_before);
}

#[tokio::test]
async fn sdk_defaults_answer_unsupported() {
    // The hostile test adapter (built with the SDK, 0.2.0) leaves the new functions to the
    // SDK's default bodies.
    let dir = plugin_dir(&[("hostile.wasm", "testing/forge-hostile")]);
    let host = host(
        config(dir.path(), vec![("gitea", instance("hostile.wasm"))]),
        MapSecrets::default(),
    )
    .await;
    assert_eq!(host.forge_contract("gitea").as_deref(), Some("0.2.0"));
    assert_eq!(host.forge_contract("nope"), None);
    let e = host
        .current_user("gitea", ctx("https://gitea.example", "t"))
        .await
        .unwrap_err();
    assert!(e.is_unsupported(), "{e}");
    assert_eq!(e.kind(), Some(crate::ErrorKind::Unavailable));
    assert!(
        e.to_string().contains("current-user is not supported"),
        "{e}"
    );
}

/// A host with the adapter `comp` (e.g. `forge-gitea`) loaded as instance `name`, allowed to
/// call `origin`.
pub(super) async fn adapter_host(
    name: &str,
    comp: &str,
    origin: &str,
) -> (tempfile::TempDir, PluginHost) {
    adapter_host_with(name, comp, origin, &[]).await
}

/// [`adapter_host`] with instance config `settings` (e.g. `api-url`).
pub(super) async fn adapter_host_with(
    name: &str,
    comp: &str,
    origin: &str,
    settings: &[(&str, &str)],
) -> (tempfile::TempDir, PluginHost) {
    let file = format!("{comp}.wasm");
    let dir = plugin_dir(&[(&file, comp)]);
    let mut inst = instance(&file);
    inst.allowed_hosts = vec![origin.to_string()];
    for (k, v) in settings {
        inst.config.insert(k.to_string(), v.to_string());
    }
    let host = host(
        config(dir.path(), vec![(name, inst)]),
        MapSecrets::default(),
    )
    .await;
    (dir, host)
}

/// The form fields of a request body (`application/x-www-form-urlencoded`).
pub(super) fn form_of(s: &Seen) -> std::collections::HashMap<String, String> {
    String::from_utf8_lossy(&s.body)
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            (
                super::fake_http::percent_decode(k),
                super::fake_http::percent_decode(v),
            )
        })
        .collect()
}

/// Posts one status per state through instance `name` and checks each body's `state_field`
/// against `want`; returns the last body.
pub(super) async fn post_each_status(
    host: &PluginHost,
    name: &str,
    c: ApiContext,
    seen: &Arc<Mutex<Vec<Seen>>>,
    want: [(StatusState, &str); 6],
) -> serde_json::Value {
    let mut body = serde_json::Value::Null;
    for (state, expected) in want {
        let status = CommitStatus {
            state,
            context: "ci/woodpecker/push/build".into(),
            description: String::new(),
            target_url: "https://ci.example.com/repos/1/pipeline/2".into(),
            branch: "main".into(),
            event: "push".into(),
            started: 1_700_000_000,
            finished: 1_700_000_042,
        };
        host.post_status(name, c.clone(), "o/r", "abc123", status)
            .await
            .unwrap();
        body = serde_json::from_slice(&last(seen).body).unwrap();
        assert_eq!(body["state"], expected, "{state:?}");
    }
    body
}
