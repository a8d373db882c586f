//! Existing clients unchanged: the requests the upstream Woodpecker web UI and API clients
//! generated from its OpenAPI spec send, each as they send it (issue 18, items 1–3, 7, 8; the
//! log stream and failed-config items are in `streams` and `pipelines`).

use std::time::Duration;

use serde_json::{Value, json};

use woodlark::store::repos::{self, Perm};

use crate::util::{TestServer, with_runner};

/// `(full_name, id, active)` of a repository list, sorted by name.
fn listed(list: &Value) -> Vec<(String, i64, bool)> {
    let mut out: Vec<_> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["full_name"].as_str().unwrap().to_string(),
                r["id"].as_i64().unwrap(),
                r["active"].as_bool().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn the_add_repository_page_lists_what_the_user_may_activate() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    s.git_forge(&p.admin).await;
    for id in ["alice/app", "alice/tool", "bob/lib"] {
        s.init_git_repo(id);
    }
    let all = "/api/user/repos?all=true";
    s.http.get(all, None).await.expect(401);

    // Before anything is active: the forge's repositories in the user's namespace, id 0.
    let before = s.http.get(all, Some(&p.alice)).await.expect(200).json();
    assert_eq!(
        listed(&before),
        [
            ("alice/app".to_string(), 0, false),
            ("alice/tool".to_string(), 0, false)
        ]
    );
    assert_eq!(before[0]["forge_remote_id"], "alice/app");
    assert!(
        before[0]["clone_url"]
            .as_str()
            .unwrap()
            .starts_with("file://")
    );
    let bobs = s.http.get(all, Some(&p.bob)).await.expect(200).json();
    assert_eq!(listed(&bobs), [("bob/lib".to_string(), 0, false)]);
    let admins = s.http.get(all, Some(&p.admin)).await.expect(200).json();
    assert_eq!(listed(&admins).len(), 3, "an instance admin may add any");

    // The page's "Enable" button: POST /api/repos?forge_remote_id= (no forge_id).
    let enabled = s
        .http
        .post("/api/repos?forge_remote_id=alice/app", Some(&p.alice), "")
        .await
        .expect(200)
        .json();
    let id = enabled["id"].as_i64().unwrap();
    let after = s.http.get(all, Some(&p.alice)).await.expect(200).json();
    assert_eq!(
        listed(&after),
        [
            ("alice/app".to_string(), id, true),
            ("alice/tool".to_string(), 0, false)
        ]
    );
    // Bob cannot enable Alice's repository from his list either.
    s.http
        .post("/api/repos?forge_remote_id=alice/tool", Some(&p.bob), "")
        .await
        .expect(403);

    // The search box filters by name, case-insensitively.
    let found = s
        .http
        .get("/api/user/repos?all=true&name=TOO", Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(listed(&found), [("alice/tool".to_string(), 0, false)]);

    // Without `all`: the active repositories only, as before.
    let active = s
        .http
        .get("/api/user/repos", Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(listed(&active), [("alice/app".to_string(), id, true)]);

    // A stored repository the forge no longer has is listed and marked.
    std::fs::remove_dir_all(s.forge_dir().join("alice/app.git")).unwrap();
    let stale = s.http.get(all, Some(&p.alice)).await.expect(200).json();
    let app = stale
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["full_name"] == "alice/app")
        .unwrap();
    assert_eq!(app["has_no_forge_repo"], true);
    assert_eq!(app["id"], id);
}

#[tokio::test]
async fn the_upstream_forge_form_edits_and_creates_the_git_forge() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let id = s.git_forge(&p.admin).await;
    let path = format!("/api/forges/{id}");
    let dir_url = format!("file://{}", s.forge_dir().display());

    // Save unchanged: the form sends what it read back, with `https://` put before the URL.
    let mut form = s.http.get(&path, Some(&p.admin)).await.expect(200).json();
    assert_eq!(form["type"], "addon");
    form["url"] = json!(format!("https://{}", form["url"].as_str().unwrap()));
    let saved = s
        .http
        .patch(&path, Some(&p.admin), &form.to_string())
        .await
        .expect(200)
        .json();
    assert_eq!(saved["url"], dir_url);
    assert_eq!(saved["woodlark_type"], "git");

    // "Add forge": the form cannot pick `git`; an addon forge at a file:// URL is one.
    let other = s.dir.path().join("other-forge");
    std::fs::create_dir_all(&other).unwrap();
    let body = json!({
        "type": "addon",
        "url": format!("https://file://{}", other.display()),
        "client": "",
        "oauth_client_secret": "",
        "skip_verify": false,
        "oauth_host": "",
        "additional_options": {"executable": ""},
    });
    let created = s
        .http
        .post("/api/forges", Some(&p.admin), &body.to_string())
        .await
        .expect(200)
        .json();
    assert_eq!(created["woodlark_type"], "git");
    assert_eq!(created["url"], format!("file://{}", other.display()));

    // Validation is as strict as before: the directory must exist, http types need http.
    let missing = json!({"type": "addon", "url": "https://file:///does/not/exist"});
    s.http
        .post("/api/forges", Some(&p.admin), &missing.to_string())
        .await
        .expect(422);
    let github = json!({"type": "github", "url": format!("https://{dir_url}")});
    s.http
        .post("/api/forges", Some(&p.admin), &github.to_string())
        .await
        .expect(422);

    // The login page names a forge after its URL's host; a git forge signs in here.
    let public = s.http.get("/api/forges", None).await.expect(200).json();
    let git = public
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap();
    assert_eq!(
        git["oauth_host"].as_str().unwrap(),
        format!("http://{}", s.http.addr)
    );
}

#[tokio::test]
async fn users_without_an_avatar_get_a_generated_one() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let me = s
        .http
        .get("/api/user", Some(&p.alice))
        .await
        .expect(200)
        .json();
    let url = me["avatar_url"].as_str().unwrap().to_string();
    let prefix = format!("http://{}", s.http.addr);
    assert_eq!(url, format!("{prefix}/api/users/alice/avatar.svg"));

    // Public, like a forge's avatars: the UI loads it in an <img>.
    let svg = s
        .http
        .get(url.strip_prefix(&prefix).unwrap(), None)
        .await
        .expect(200);
    assert_eq!(svg.header("content-type"), Some("image/svg+xml"));
    assert!(svg.text().contains(">AL</text>"), "{}", svg.text());
    s.http
        .get("/api/users/a%20b/avatar.svg", None)
        .await
        .expect(400);

    // Everywhere a user is shown, and a user's own avatar wins.
    let listed = s
        .http
        .get("/api/users", Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|u| u["avatar_url"].as_str().unwrap().ends_with("/avatar.svg"))
    );
    let own = s
        .http
        .patch(
            "/api/users/bob",
            Some(&p.admin),
            r#"{"avatar_url":"https://example.com/bob.png"}"#,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(own["avatar_url"], "https://example.com/bob.png");
}

#[tokio::test]
async fn generated_clients_percent_encode_paths_and_send_back_what_they_read() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();

    let found = s
        .http
        .get("/api/repos/lookup/alice%2Fapp", Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(found["id"], id);
    s.http
        .get("/api/repos/lookup/alice%2Fnope", Some(&p.alice))
        .await
        .expect(404);
    let bad = s
        .http
        .get("/api/repos/lookup/alice%2", Some(&p.alice))
        .await
        .expect(400);
    assert!(bad.text().contains("percent-encoding"), "{}", bad.text());

    // PATCH with the whole body of a GET (unknown fields included), one field changed.
    let mut body = s
        .http
        .get(&format!("/api/repos/{id}"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    body["timeout"] = json!(30);
    body["some_future_field"] = json!({"x": 1});
    let patched = s
        .http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.alice),
            &body.to_string(),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(patched["timeout"], 30);
    // Known fields are still checked.
    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.alice),
            r#"{"visibility":"everyone"}"#,
        )
        .await
        .expect(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_agent_is_visible_and_stays_consistent() {
    let data = tempfile::tempdir().unwrap();
    let tables = with_runner(data.path());
    let s = TestServer::start_in_with_tables(data, "", &tables).await;
    let p = s.principals().await;

    // Idle, the local runner's workers are free (upstream's worker_count).
    crate::pipelines::wait_for_queue(&s.http, &p.admin, 20, |info| {
        info["stats"]["worker_count"].as_i64().unwrap() >= 1
    })
    .await;

    let agents = s
        .http
        .get("/api/agents", Some(&p.admin))
        .await
        .expect(200)
        .json();
    let local = agents
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == crate::util::embedded_agent_name(s.dir.path()).as_str())
        .expect("the embedded agent is listed")
        .clone();
    let path = format!("/api/agents/{}", local["id"]);
    let refused = s.http.delete(&path, Some(&p.admin)).await.expect(409);
    assert!(refused.text().contains("no_schedule"), "{}", refused.text());
    s.http
        .patch(&path, Some(&p.admin), r#"{"name":"renamed"}"#)
        .await
        .expect(409);

    // Paused with no_schedule, it takes no work; resumed, it runs what waited.
    s.http
        .patch(&path, Some(&p.admin), r#"{"no_schedule":true}"#)
        .await
        .expect(200);
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    crate::pipelines::push_files(
        &s,
        "alice/app",
        &[(
            ".woodpecker.yaml",
            "steps:\n  - name: a\n    image: sh\n    commands: [\"true\"]\n",
        )],
        "ci",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let waiting = s
        .http
        .get(&format!("/api/repos/{id}/pipelines/1"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(waiting["status"], "pending", "{waiting}");
    s.http
        .patch(&path, Some(&p.admin), r#"{"no_schedule":false}"#)
        .await
        .expect(200);
    let done =
        crate::pipelines::wait_for(&s.http, &p.alice, id, 1, 60, |p| p["status"] == "success")
            .await;
    assert_eq!(done["workflows"][0]["agent_id"], local["id"]);
}

/// The upstream UI's repository (and organisation) secrets and registries pages list the
/// global ones beside their own (`getGlobalSecretList`, `getGlobalRegistryList`:
/// `GET /api/secrets?page=1`, `GET /api/registries?page=1`). Upstream's router lets every
/// signed-in user read them, never with a value or password; writes stay with instance admins.
#[tokio::test]
async fn the_repository_settings_pages_list_global_secrets_and_registries_without_values() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    s.http
        .post(
            "/api/secrets",
            Some(&p.admin),
            r#"{"name":"global_token","value":"GLOBAL-VALUE","events":["push"]}"#,
        )
        .await
        .expect(200);
    s.http
        .post(
            "/api/registries",
            Some(&p.admin),
            r#"{"address":"docker.io","username":"bot","password":"GLOBAL-PASSWORD"}"#,
        )
        .await
        .expect(200);

    // The pages' requests: anonymous 401; the repository's admin, a user with nothing to do
    // with it, and an instance admin all see the same records, without what they guard.
    let lists = ["/api/secrets?page=1", "/api/registries?page=1"];
    for path in lists {
        s.http.get(path, None).await.expect(401);
    }
    for who in [&p.alice, &p.bob, &p.admin] {
        let secrets = s.http.get(lists[0], Some(who)).await.expect(200);
        assert!(
            !secrets.text().contains("GLOBAL-VALUE"),
            "{}",
            secrets.text()
        );
        let secrets = secrets.json();
        assert_eq!(secrets.as_array().unwrap().len(), 1, "{secrets}");
        assert_eq!(secrets[0]["name"], "global_token");
        assert!(secrets[0].get("value").is_none(), "{secrets}");
        let registries = s.http.get(lists[1], Some(who)).await.expect(200);
        assert!(!registries.text().contains("GLOBAL-PASSWORD"));
        let registries = registries.json();
        assert_eq!(registries[0]["address"], "docker.io");
        assert_eq!(registries[0]["password"], "");
        // One of them, as upstream's `GET /secrets/{secret}` serves it to any user.
        let one = s
            .http
            .get("/api/secrets/global_token", Some(who))
            .await
            .expect(200)
            .json();
        assert_eq!(one, secrets[0]);
        let one = s
            .http
            .get("/api/registries/docker.io", Some(who))
            .await
            .expect(200)
            .json();
        assert_eq!(one, registries[0]);
    }
    s.http
        .get("/api/secrets/global_token", None)
        .await
        .expect(401);
    s.http
        .get("/api/secrets/nope", Some(&p.bob))
        .await
        .expect(404);
    // The page's own list beside them is still the repository admin's alone.
    let own = format!("/api/repos/{id}/secrets?page=1");
    s.http.get(&own, Some(&p.alice)).await.expect(200);
    s.http.get(&own, Some(&p.bob)).await.expect(404);

    // Writes stay with instance admins: 401 anonymous, 403 for every other user, and nothing
    // changes.
    let writes = [
        (
            "POST",
            "/api/secrets",
            r#"{"name":"mine","value":"v","events":["push"]}"#,
        ),
        (
            "PATCH",
            "/api/secrets/global_token",
            r#"{"value":"stolen"}"#,
        ),
        ("DELETE", "/api/secrets/global_token", ""),
        (
            "POST",
            "/api/registries",
            r#"{"address":"ghcr.io","username":"u","password":"p"}"#,
        ),
        (
            "PATCH",
            "/api/registries/docker.io",
            r#"{"username":"evil"}"#,
        ),
        ("DELETE", "/api/registries/docker.io", ""),
    ];
    for (method, path, body) in writes {
        let body = Some(body.as_bytes()).filter(|b| !b.is_empty());
        s.http.send(method, path, None, body, &[]).await.expect(401);
        for who in [&p.alice, &p.bob] {
            s.http
                .send(method, path, Some(who), body, &[])
                .await
                .expect(403);
        }
    }
    let after = s
        .http
        .get(lists[0], Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(after.as_array().unwrap().len(), 1);
    let after = s
        .http
        .get(lists[1], Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(after[0]["username"], "bot");
}

/// The home page's repository list as the upstream UI asks for it (`store/repos.ts`:
/// `getRepoList()`, `GET /api/user/repos?`), and the "add repository" page's
/// (`getRepoList({all: true})`). As upstream's `GetRepos`, both list only what the user owns:
/// repositories they may push to or administer (their own namespace's included), never one
/// they may only pull, public or not, and not every repository for an instance admin; the
/// home list only active ones, `all=true` inactive ones too.
#[tokio::test]
async fn the_home_list_shows_what_the_user_may_push_to_or_administer() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let home = "/api/user/repos?";
    let all = "/api/user/repos?all=true";
    let mut ids = std::collections::HashMap::new();
    for name in ["alice/app", "alice/lib", "alice/old"] {
        let repo = s.git_repo(&p.admin, &p.alice, name).await;
        ids.insert(name, repo["id"].as_i64().unwrap());
    }
    // alice/app is public (anyone may pull it), alice/old no longer active.
    s.http
        .patch(
            &format!("/api/repos/{}", ids["alice/app"]),
            Some(&p.alice),
            r#"{"visibility":"public"}"#,
        )
        .await
        .expect(200);
    s.http
        .delete(&format!("/api/repos/{}", ids["alice/old"]), Some(&p.alice))
        .await
        .expect(200);
    // Bob may pull alice/lib, carol push to it, dave administers alice/app.
    let carol = s.user("carol", false).await;
    let dave = s.user("dave", false).await;
    let grants = [
        (&p.bob, "alice/lib", Perm::pull_only()),
        (
            &carol,
            "alice/lib",
            Perm {
                pull: true,
                push: true,
                ..Perm::default()
            },
        ),
        (&dave, "alice/app", Perm::all()),
    ];
    for (token, repo, perm) in grants {
        let user = s
            .http
            .get("/api/user", Some(token))
            .await
            .expect(200)
            .json()["id"]
            .as_i64()
            .unwrap();
        let repo = ids[repo];
        s.app_state
            .ci
            .store_for_tests()
            .write(move |c| repos::set_perm(c, user, repo, perm))
            .await
            .unwrap();
    }

    let names = |list: &Value| -> Vec<String> {
        let mut names: Vec<String> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["full_name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    s.http.get(home, None).await.expect(401);
    s.http.get(all, None).await.expect(401);
    let cases: [(&str, &str, &[&str], &[&str]); 5] = [
        // Her own namespace: she administers all three; alice/old is inactive.
        (
            "alice",
            &p.alice,
            &["alice/app", "alice/lib"],
            &["alice/app", "alice/lib", "alice/old"],
        ),
        // A pull permission (and a public repository) is not ownership.
        ("bob", &p.bob, &[], &[]),
        ("carol", &carol, &["alice/lib"], &["alice/lib"]),
        ("dave", &dave, &["alice/app"], &["alice/app"]),
        // An instance admin's home list is what they push to too: nothing here. The git
        // forge says nothing of permissions, so what they may add is the local rule's:
        // anything.
        (
            "root",
            &p.admin,
            &[],
            &["alice/app", "alice/lib", "alice/old"],
        ),
    ];
    for (who, token, at_home, with_all) in cases {
        let listed = s.http.get(home, Some(token)).await.expect(200).json();
        assert_eq!(names(&listed), at_home, "{who}: {listed}");
        // The home list carries each repository's newest pipeline (none yet).
        for repo in listed.as_array().unwrap() {
            assert!(repo.get("last_pipeline").is_none(), "{who}: {repo}");
        }
        let listed = s.http.get(all, Some(token)).await.expect(200).json();
        let stored: Vec<String> = names(&listed)
            .into_iter()
            .filter(|n| ids.contains_key(n.as_str()))
            .collect();
        assert_eq!(stored, with_all, "{who}: {listed}");
    }
}
