//! Issue 46: a forge works from the place operators put it, with nothing else wired. The
//! round trips in `forges.rs` set their forge up each way (API, `[[forges]]`, Woodpecker's
//! variables); here, what the forge record grants its adapter is checked against a second
//! forge: a delivery verifies only with its own forge's webhook secret (a changed secret on
//! the next call), a host the adapter may not reach is refused and named, and addon forges
//! name their adapter.

use serde_json::json;

use crate::forge_fakes::{Kind, Shared, answer, fake};
use crate::plugins::{fake_service, plugins_table};
use crate::util::{Resp, TestServer, first_party_plugins};

/// A Gitea push of `octo/app` signed with `secret`, delivered to `/api/hook?forge=<forge>`.
async fn deliver(s: &TestServer, forge: i64, secret: &str) -> Resp {
    let signer: Shared = fake(Kind::Gitea, "");
    let (body, headers) = {
        let mut f = signer.lock().unwrap();
        f.hooks = vec![json!({"config": {"url": "http://x/api/hook", "secret": secret}})];
        f.push_delivery(&"a".repeat(40))
    };
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    s.http
        .send(
            "POST",
            &format!("/api/hook?forge={forge}"),
            None,
            Some(body.as_bytes()),
            &headers,
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_forge_verifies_its_deliveries_with_its_own_secret_and_a_change_holds_at_once() {
    let dist = first_party_plugins();
    let s = TestServer::start_with_tables(&plugins_table(&dist, false, "")).await;
    let p = s.principals().await;
    for (n, secret) in [
        (1, "the secret of forge one"),
        (2, "the secret of forge two"),
    ] {
        let forge = s
            .http
            .post(
                "/api/forges",
                Some(&p.admin),
                &json!({"type": "gitea", "url": format!("https://gitea{n}.example.com"),
                        "oauth_client_secret": "an-api-token", "webhook_secret": secret})
                .to_string(),
            )
            .await
            .expect(200)
            .json();
        assert_eq!(forge["id"], n);
    }
    // Verified with forge 1's own secret, no instance table: about a repository not
    // activated here, which the answer says.
    let ok = deliver(&s, 1, "the secret of forge one").await.expect(200);
    assert!(
        ok.text().contains("octo/app is not activated"),
        "{}",
        ok.text()
    );
    // Forge 2's secret does not sign for forge 1, nor a stranger's.
    for secret in ["the secret of forge two", "a secret of nobody's"] {
        let refused = deliver(&s, 1, secret).await;
        assert!(refused.status.is_client_error(), "{secret}: {refused:?}");
    }
    // A changed secret holds for the very next delivery; the old one no longer does.
    s.http
        .patch(
            "/api/forges/1",
            Some(&p.admin),
            &json!({"webhook_secret": "forge one's new secret"}).to_string(),
        )
        .await
        .expect(200);
    deliver(&s, 1, "forge one's new secret").await.expect(200);
    let old = deliver(&s, 1, "the secret of forge one").await;
    assert!(old.status.is_client_error(), "{old:?}");
    deliver(&s, 2, "the secret of forge two").await.expect(200);
}

/// An adapter told (by a hand-written instance table) to call another forge's host is
/// refused: the call for forge 1 never reaches forge 2's host, and the error names the
/// plugin, the host and how to allow it, rather than blaming the credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_for_one_forge_never_reaches_another_forges_host() {
    let dist = first_party_plugins();
    let (one, two) = (fake(Kind::GitHub, ""), fake(Kind::GitHub, ""));
    let (a, b) = (one.clone(), two.clone());
    let api_one = fake_service(move |r| Some(answer(&a, r))).await;
    let api_two = fake_service(move |r| Some(answer(&b, r))).await;
    let instance = format!(
        "[plugins.instances.github]\nfile = \"forge-github.wasm\"\nconfig = {{ api-url = \"http://{api_two}\" }}\n"
    );
    let s = TestServer::start_with_tables(&plugins_table(&dist, false, &instance)).await;
    let p = s.principals().await;
    for api in [api_one, api_two] {
        s.http
            .post(
                "/api/forges",
                Some(&p.admin),
                &json!({"type": "github", "url": format!("http://{api}"),
                        "oauth_client_secret": "an-api-token"})
                .to_string(),
            )
            .await
            .expect(200);
    }
    let refused = s
        .http
        .post(
            "/api/repos?forge_remote_id=octo%2Fapp&forge_id=1",
            Some(&p.admin),
            "",
        )
        .await;
    let text = refused.text();
    assert_eq!(refused.status.as_u16(), 502, "{text}");
    let host = format!("http://{api_two}");
    for part in ["\"github\"", host.as_str(), "for forge 1", "allowed_hosts"] {
        assert!(text.contains(part), "{text:?} names {part:?}");
    }
    assert!(!text.contains("refused the credentials"), "{text}");
    assert!(two.lock().unwrap().seen.is_empty(), "forge 2 was called");
    // The same call for forge 2 may reach forge 2's host.
    let activated = s
        .http
        .post(
            "/api/repos?forge_remote_id=octo%2Fapp&forge_id=2",
            Some(&p.admin),
            "",
        )
        .await;
    assert_ne!(activated.status.as_u16(), 502, "{}", activated.text());
    assert!(!two.lock().unwrap().seen.is_empty());
    assert!(one.lock().unwrap().seen.is_empty(), "forge 1 was called");
}

/// `type: addon` names a third-party adapter (never Woodlark's `git` forge unless at a
/// `file://` URL), as upstream's addon forges name an executable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_addon_forge_names_its_adapter() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let create = |body: serde_json::Value| {
        let http = s.http.clone();
        let admin = p.admin.clone();
        async move {
            http.post("/api/forges", Some(&admin), &body.to_string())
                .await
        }
    };
    let addon = create(json!({"type": "addon", "url": "https://scm.example.com",
        "additional_options": {"plugin": "my-scm"}}))
    .await
    .expect(200)
    .json();
    assert_eq!(addon["woodlark_type"], "addon", "{addon}");
    assert_eq!(addon["type"], "addon");
    // Upstream's form: the executable names the adapter by its file.
    let upstream = create(json!({"type": "addon", "url": "https://scm.example.com",
        "additional_options": {"executable": "/usr/local/bin/my-scm.wasm"}}))
    .await
    .expect(200)
    .json();
    assert_eq!(upstream["woodlark_type"], "addon");
    assert_eq!(upstream["additional_options"]["plugin"], "my-scm");
    let unnamed = create(json!({"type": "addon", "url": "https://scm.example.com"})).await;
    assert_eq!(unnamed.status.as_u16(), 422, "{}", unnamed.text());
    assert!(unnamed.text().contains("additional_options.plugin"));
    // The built-in forge, as the upstream UI creates it.
    let dir = s.forge_dir();
    let git = create(json!({"type": "addon", "url": format!("file://{}", dir.display())}))
        .await
        .expect(200)
        .json();
    assert_eq!(git["woodlark_type"], "git");
    // Other users cannot create one.
    s.http
        .post(
            "/api/forges",
            Some(&p.alice),
            &json!({"type": "addon", "url": "https://x", "additional_options": {"plugin": "x"}})
                .to_string(),
        )
        .await
        .expect(403);
    s.http
        .post("/api/forges", None, &json!({"type": "addon"}).to_string())
        .await
        .expect(401);
}

/// The number of `forges.*` events in the feed.
async fn forge_events(s: &TestServer, admin: &str) -> usize {
    let page = s
        .http
        .get("/events?limit=10000", Some(admin))
        .await
        .expect(200)
        .json();
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["data"]["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("forges."))
        })
        .count()
}

/// `[[forges]]` is applied at every start: created once under its id, left alone while
/// the entry (and its secret's file) stays the same, updated when they change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_forge_changes_only_when_its_entry_does() {
    let dist = first_party_plugins();
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("oauth-secret");
    std::fs::write(&secret, "the first secret\n").unwrap();
    let tables = |url: &str| {
        plugins_table(&dist, false, "")
            + &format!(
                "[[forges]]\nid = 3\ntype = \"gitea\"\nurl = {url:?}\nclient = \"an-app\"\nclient_secret_file = {:?}\n",
                secret.display().to_string()
            )
    };
    let s = TestServer::start_in_with_tables(dir, "", &tables("https://git.example.com")).await;
    let admin = s.user("root", true).await;
    let forge = s
        .http
        .get("/api/forges/3", Some(&admin))
        .await
        .expect(200)
        .json();
    assert_eq!(forge["url"], "https://git.example.com");
    assert_eq!(forge_events(&s, &admin).await, 1, "created");
    let dir = s.stop().await;

    let s = TestServer::start_in_with_tables(dir, "", &tables("https://git.example.com")).await;
    assert_eq!(
        forge_events(&s, &admin).await,
        1,
        "unchanged: nothing written"
    );
    let dir = s.stop().await;

    std::fs::write(&secret, "the second secret\n").unwrap();
    let s = TestServer::start_in_with_tables(dir, "", &tables("https://git2.example.com")).await;
    assert_eq!(forge_events(&s, &admin).await, 2, "updated once");
    let forge = s
        .http
        .get("/api/forges/3", Some(&admin))
        .await
        .expect(200)
        .json();
    assert_eq!(forge["url"], "https://git2.example.com");
    assert_eq!(forge["woodlark_configured_in"], "config.toml ([[forges]])");
    // Non-admins see the forge as any other.
    let alice = s.user("alice", false).await;
    let public = s
        .http
        .get("/api/forges/3", Some(&alice))
        .await
        .expect(200)
        .json();
    assert!(public.get("woodlark_configured_in").is_none(), "{public}");
    assert!(public.get("client").is_none(), "{public}");
    s.http
        .patch("/api/forges/3", Some(&alice), "{}")
        .await
        .expect(403);
}
