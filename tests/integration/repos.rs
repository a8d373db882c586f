//! Forges, repositories, organisations and the hook endpoint, with the auth matrix.

use std::process::Command;

use serde_json::Value;

use crate::util::{TestServer, git};

/// Field names of a swagger definition, for shape checks.
fn swagger_fields(definition: &str) -> Vec<String> {
    let spec: Value =
        serde_json::from_str(include_str!("fixtures/woodpecker-definitions.json")).unwrap();
    let mut fields: Vec<String> = spec["definitions"][definition]["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    fields.sort();
    fields
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

#[tokio::test]
async fn forges_admin_writes_everyone_reads_public_fields() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let url = format!("file://{}", s.forge_dir().display());
    let body = serde_json::json!({"type": "git", "url": url, "client": "c", "oauth_client_secret": "topsecret"}).to_string();
    s.http.post("/api/forges", None, &body).await.expect(401);
    s.http
        .post("/api/forges", Some(&p.alice), &body)
        .await
        .expect(403);
    let created = s
        .http
        .post("/api/forges", Some(&p.admin), &body)
        .await
        .expect(200)
        .json();
    let id = created["id"].as_i64().unwrap();
    // The UI knows no `git` icon: the built-in forge is reported as `addon`.
    assert_eq!(created["type"], "addon");
    assert_eq!(created["woodlark_type"], "git");
    assert!(created["webhook_secret"].as_str().unwrap().len() >= 32);
    assert!(
        !created.to_string().contains("topsecret"),
        "client secret never returned"
    );
    for f in swagger_fields("Forge") {
        assert!(created.get(&f).is_some(), "Forge field {f} missing");
    }

    // Non-admins (and anonymous callers) see id, type (and our own type) and url only, plus
    // where a git forge's users sign in (the login page labels its button with that host).
    for token in [None, Some(p.alice.as_str())] {
        let list = s.http.get("/api/forges", token).await.expect(200).json();
        assert_eq!(
            keys(&list[0]),
            ["id", "oauth_host", "type", "url", "woodlark_type"]
        );
        let one = s
            .http
            .get(&format!("/api/forges/{id}"), token)
            .await
            .expect(200)
            .json();
        assert_eq!(
            keys(&one),
            ["id", "oauth_host", "type", "url", "woodlark_type"]
        );
    }
    let full = s
        .http
        .get(&format!("/api/forges/{id}"), Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(full["client"], "c");

    let patched = s
        .http
        .patch(
            &format!("/api/forges/{id}"),
            Some(&p.admin),
            r#"{"skip_verify":true}"#,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(patched["skip_verify"], true);
    // Sending back what was read (`type: "addon"`) keeps the forge a `git` forge.
    let resent = s
        .http
        .patch(
            &format!("/api/forges/{id}"),
            Some(&p.admin),
            &full.to_string(),
        )
        .await
        .expect(200)
        .json();
    assert_eq!(resent["woodlark_type"], "git");
    assert_eq!(resent["type"], "addon");
    s.http
        .patch(
            &format!("/api/forges/{id}"),
            Some(&p.bob),
            r#"{"skip_verify":true}"#,
        )
        .await
        .expect(403);

    // Validation.
    for bad in [
        r#"{"type":"svn","url":"https://x"}"#,
        r#"{"type":"git","url":"https://not-a-dir"}"#,
        r#"{"type":"git","url":"file:///does/not/exist"}"#,
        r#"{"type":"github","url":"ftp://x"}"#,
        r#"{"type":"github"}"#,
        r#"{"url":"https://gitea.example.com"}"#,
    ] {
        s.http
            .post("/api/forges", Some(&p.admin), bad)
            .await
            .expect(422);
    }
    s.http
        .post("/api/forges", Some(&p.admin), r#"{"type":5}"#)
        .await
        .expect(400);
    s.http
        .get("/api/forges/999", Some(&p.admin))
        .await
        .expect(404);
    s.http
        .get("/api/forges/abc", Some(&p.admin))
        .await
        .expect(400);

    // A forge with repositories cannot be deleted; an empty one can.
    let repo = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let branches = format!("/api/repos/{}/branches", repo["id"]);
    s.http.get(&branches, Some(&p.alice)).await.expect(200);
    // The forge's driver is kept between calls, and a change to the forge replaces it: moved
    // to an empty directory the repository is gone, moved back it is there again.
    let elsewhere = s.dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    for (dir, status) in [(elsewhere, 404), (s.forge_dir(), 200)] {
        let moved = serde_json::json!({"url": format!("file://{}", dir.display())}).to_string();
        s.http
            .patch(&format!("/api/forges/{id}"), Some(&p.admin), &moved)
            .await
            .expect(200);
        s.http.get(&branches, Some(&p.alice)).await.expect(status);
    }
    s.http
        .delete(&format!("/api/forges/{id}"), Some(&p.alice))
        .await
        .expect(403);
    s.http
        .delete(&format!("/api/forges/{id}"), Some(&p.admin))
        .await
        .expect(409);
    let other =
        serde_json::json!({"type": "gitea", "url": "https://gitea.example.com"}).to_string();
    let other = s
        .http
        .post("/api/forges", Some(&p.admin), &other)
        .await
        .expect(200)
        .json();
    s.http
        .delete(&format!("/api/forges/{}", other["id"]), Some(&p.admin))
        .await
        .expect(204);
}

#[tokio::test]
async fn activation_from_a_real_git_repository() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let forge = s.git_forge(&p.admin).await;
    s.init_git_repo("alice/hello");

    let path = format!("/api/repos?forge_remote_id=alice/hello&forge_id={forge}");
    s.http.post(&path, None, "").await.expect(401);
    // bob may not activate alice's repositories.
    s.http.post(&path, Some(&p.bob), "").await.expect(403);
    let repo = s
        .http
        .post(&path, Some(&p.alice), "")
        .await
        .expect(200)
        .json();
    assert_eq!(repo["full_name"], "alice/hello");
    assert_eq!(repo["owner"], "alice");
    assert_eq!(repo["name"], "hello");
    assert_eq!(repo["forge_remote_id"], "alice/hello");
    assert_eq!(repo["default_branch"], "main");
    assert_eq!(repo["visibility"], "private");
    assert_eq!(repo["private"], true);
    assert_eq!(repo["active"], true);
    assert!(repo["clone_url"].as_str().unwrap().starts_with("file:///"));
    assert!(repo.get("hash").is_none() && repo.get("user_id").is_none());
    let mut expected = swagger_fields("Repo");
    expected.sort();
    assert_eq!(
        keys(&repo),
        expected,
        "Repo fields as the swagger defines them"
    );

    // Activating again is a conflict; unknown or malformed ids are clear errors.
    s.http.post(&path, Some(&p.alice), "").await.expect(409);
    s.http
        .post(
            &format!("/api/repos?forge_remote_id=alice/nope&forge_id={forge}"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(404);
    s.http
        .post(
            &format!("/api/repos?forge_remote_id=../etc&forge_id={forge}"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(422);
    s.http
        .post("/api/repos", Some(&p.alice), "")
        .await
        .expect(400);
    s.http
        .post(
            "/api/repos?forge_remote_id=alice/hello&forge_id=77",
            Some(&p.alice),
            "",
        )
        .await
        .expect(404);

    // The hook is installed in the repository.
    let hook = s.forge_dir().join("alice/hello.git/hooks/post-receive");
    let script = std::fs::read_to_string(&hook).unwrap();
    assert!(script.contains("/api/hook?access_token="));

    // Her org exists and she administers it.
    let org_id = repo["org_id"].as_i64().unwrap();
    let perm = s
        .http
        .get(&format!("/api/orgs/{org_id}/permissions"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(perm, serde_json::json!({"member": true, "admin": true}));
}

#[tokio::test]
async fn repo_reads_and_settings_auth_matrix() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let id = repo["id"].as_i64().unwrap();

    let reads = [
        format!("/api/repos/{id}"),
        "/api/repos/lookup/alice/hello".to_string(),
        format!("/api/repos/{id}/permissions"),
        format!("/api/repos/{id}/branches"),
        format!("/api/repos/{id}/pull_requests"),
    ];
    for path in &reads {
        s.http.get(path, None).await.expect(401);
        s.http.get(path, Some(&p.bob)).await.expect(404);
        s.http.get(path, Some(&p.alice)).await.expect(200);
        s.http.get(path, Some(&p.admin)).await.expect(200);
    }
    let branches = s
        .http
        .get(&format!("/api/repos/{id}/branches"), Some(&p.alice))
        .await
        .json();
    assert_eq!(branches, serde_json::json!(["main"]));
    let prs = s
        .http
        .get(&format!("/api/repos/{id}/pull_requests"), Some(&p.alice))
        .await
        .json();
    assert_eq!(prs, serde_json::json!([]));
    let perm = s
        .http
        .get(&format!("/api/repos/{id}/permissions"), Some(&p.alice))
        .await
        .json();
    assert_eq!(
        (
            perm["pull"].as_bool(),
            perm["push"].as_bool(),
            perm["admin"].as_bool()
        ),
        (Some(true), Some(true), Some(true))
    );
    for f in swagger_fields("Perm") {
        assert!(perm.get(&f).is_some(), "Perm field {f}");
    }

    // Settings: owner and admin may patch; bob cannot even see it.
    let before = s
        .http
        .get(&format!("/api/repos/{id}"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_ne!(before["timeout"], 30);
    let patch = r#"{"visibility":"public","timeout":30,"allow_deploy":true,"require_approval":"all_events","cancel_previous_pipeline_events":["push"]}"#;
    s.http
        .patch(&format!("/api/repos/{id}"), None, patch)
        .await
        .expect(401);
    s.http
        .patch(&format!("/api/repos/{id}"), Some(&p.bob), patch)
        .await
        .expect(404);
    let patched = s
        .http
        .patch(&format!("/api/repos/{id}"), Some(&p.alice), patch)
        .await
        .expect(200)
        .json();
    assert_eq!(patched["visibility"], "public");
    assert_eq!(patched["private"], false);
    assert_eq!(patched["timeout"], 30);
    assert_eq!(patched["require_approval"], "all_events");
    // The repository's body is kept between reads, never past a change.
    let after = s
        .http
        .get(&format!("/api/repos/{id}"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(after, patched);

    // Now public: anyone may read, bob still may not change it (403 now that he can see it).
    s.http
        .get(&format!("/api/repos/{id}"), None)
        .await
        .expect(200);
    s.http
        .get(&format!("/api/repos/{id}"), Some(&p.bob))
        .await
        .expect(200);
    s.http
        .patch(&format!("/api/repos/{id}"), Some(&p.bob), patch)
        .await
        .expect(403);
    let perm = s
        .http
        .get(&format!("/api/repos/{id}/permissions"), Some(&p.bob))
        .await
        .json();
    assert_eq!(
        (perm["pull"].as_bool(), perm["admin"].as_bool()),
        (Some(true), Some(false))
    );

    // Instance-admin-only settings.
    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.alice),
            r#"{"trusted":{"network":true}}"#,
        )
        .await
        .expect(403);
    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.alice),
            r#"{"timeout":600}"#,
        )
        .await
        .expect(403);
    let t = s
        .http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.admin),
            r#"{"trusted":{"network":true},"timeout":600}"#,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(
        t["trusted"],
        serde_json::json!({"network": true, "volumes": false, "security": false})
    );

    // Bad input.
    for bad in [
        r#"{"visibility":"secret"}"#,
        r#"{"require_approval":"sometimes"}"#,
        r#"{"timeout":0}"#,
        r#"{"timeout":"long"}"#,
        r#"{"cancel_previous_pipeline_events":["push","lunch"]}"#,
        r#"{"config_file":"../../etc/passwd"}"#,
        "nope",
    ] {
        s.http
            .patch(&format!("/api/repos/{id}"), Some(&p.alice), bad)
            .await
            .expect(400);
    }
    s.http
        .get("/api/repos/abc", Some(&p.alice))
        .await
        .expect(400);
    s.http
        .get("/api/repos/999", Some(&p.alice))
        .await
        .expect(404);
    s.http
        .get("/api/repos/lookup/alice/nope", Some(&p.alice))
        .await
        .expect(404);
}

#[tokio::test]
async fn admin_repo_listing_chown_repair_move_delete() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let a = s.git_repo(&p.admin, &p.alice, "alice/one").await;
    let b = s.git_repo(&p.admin, &p.alice, "alice/two").await;
    let (a_id, b_id) = (a["id"].as_i64().unwrap(), b["id"].as_i64().unwrap());

    s.http.get("/api/repos", None).await.expect(401);
    s.http.get("/api/repos", Some(&p.alice)).await.expect(403);
    let all = s
        .http
        .get("/api/repos", Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(all.as_array().unwrap().len(), 2);
    s.http
        .get("/api/repos?active=maybe", Some(&p.admin))
        .await
        .expect(400);

    // Deactivate one: the hook goes away, the record stays (inactive).
    let hook = s.forge_dir().join("alice/two.git/hooks/post-receive");
    assert!(hook.exists());
    s.http
        .delete(&format!("/api/repos/{b_id}"), Some(&p.bob))
        .await
        .expect(404);
    let gone = s
        .http
        .delete(&format!("/api/repos/{b_id}"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(gone["active"], false);
    assert!(!hook.exists());
    let active = s
        .http
        .get("/api/repos?active=true", Some(&p.admin))
        .await
        .json();
    assert_eq!(active.as_array().unwrap().len(), 1);
    let inactive = s
        .http
        .get("/api/repos?active=false", Some(&p.admin))
        .await
        .json();
    assert_eq!(inactive[0]["id"], b_id);
    // Re-activation of an inactive repository works and keeps its id.
    let forge = s.git_forge(&p.admin).await;
    let again = s
        .http
        .post(
            &format!("/api/repos?forge_remote_id=alice/two&forge_id={forge}"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(200)
        .json();
    assert_eq!(again["id"], b_id);
    assert!(hook.exists());
    // remove=true deletes it for good.
    s.http
        .delete(&format!("/api/repos/{b_id}?remove=true"), Some(&p.alice))
        .await
        .expect(200);
    s.http
        .get(&format!("/api/repos/{b_id}"), Some(&p.admin))
        .await
        .expect(404);

    // chown: an instance admin takes over ownership.
    s.http
        .post(&format!("/api/repos/{a_id}/chown"), Some(&p.bob), "")
        .await
        .expect(404);
    s.http
        .post(&format!("/api/repos/{a_id}/chown"), Some(&p.admin), "")
        .await
        .expect(200);

    // repair re-installs a removed hook.
    let hook = s.forge_dir().join("alice/one.git/hooks/post-receive");
    std::fs::remove_file(&hook).unwrap();
    s.http
        .post(&format!("/api/repos/{a_id}/repair"), Some(&p.bob), "")
        .await
        .expect(404);
    s.http
        .post(&format!("/api/repos/{a_id}/repair"), Some(&p.alice), "")
        .await
        .expect(204);
    assert!(hook.exists());
    std::fs::remove_file(&hook).unwrap();
    s.http
        .post("/api/repos/repair", Some(&p.alice), "")
        .await
        .expect(403);
    s.http
        .post("/api/repos/repair", Some(&p.admin), "")
        .await
        .expect(204);
    assert!(hook.exists());

    // move: the repository was renamed on the forge.
    std::fs::rename(
        s.forge_dir().join("alice/one.git"),
        s.forge_dir().join("alice/uno.git"),
    )
    .unwrap();
    s.http
        .post(&format!("/api/repos/{a_id}/move"), Some(&p.alice), "")
        .await
        .expect(400);
    s.http
        .post(
            &format!("/api/repos/{a_id}/move?to=alice/missing"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(404);
    s.http
        .post(
            &format!("/api/repos/{a_id}/move?to=alice/uno"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(204);
    let moved = s
        .http
        .get(&format!("/api/repos/{a_id}"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(moved["full_name"], "alice/uno");
    assert!(
        s.forge_dir()
            .join("alice/uno.git/hooks/post-receive")
            .exists()
    );
}

#[tokio::test]
async fn orgs_auth_matrix() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let org = repo["org_id"].as_i64().unwrap();

    s.http.get("/api/orgs", None).await.expect(401);
    s.http.get("/api/orgs", Some(&p.alice)).await.expect(403);
    let all = s
        .http
        .get("/api/orgs", Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert!(all.as_array().unwrap().iter().any(|o| o["name"] == "alice"));
    assert_eq!(keys(&all[0]), swagger_fields("Org"));

    s.http
        .get(&format!("/api/orgs/{org}"), None)
        .await
        .expect(401);
    s.http
        .get(&format!("/api/orgs/{org}"), Some(&p.bob))
        .await
        .expect(403);
    let got = s
        .http
        .get(&format!("/api/orgs/{org}"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(got["name"], "alice");
    assert_eq!(got["is_user"], true);
    s.http
        .get(&format!("/api/orgs/{org}"), Some(&p.admin))
        .await
        .expect(200);
    s.http
        .get("/api/orgs/9999", Some(&p.alice))
        .await
        .expect(404);
    s.http.get("/api/orgs/x", Some(&p.alice)).await.expect(400);

    let anon = s
        .http
        .get(&format!("/api/orgs/{org}/permissions"), None)
        .await
        .expect(200)
        .json();
    assert_eq!(anon, serde_json::json!({"member": false, "admin": false}));
    let bob = s
        .http
        .get(&format!("/api/orgs/{org}/permissions"), Some(&p.bob))
        .await
        .expect(200)
        .json();
    assert_eq!(bob, serde_json::json!({"member": false, "admin": false}));

    for path in ["/api/org/lookup/alice", "/api/orgs/lookup/alice"] {
        s.http.get(path, None).await.expect(401);
        s.http.get(path, Some(&p.bob)).await.expect(404);
        assert_eq!(
            s.http.get(path, Some(&p.alice)).await.expect(200).json()["id"],
            org
        );
    }
    s.http
        .get("/api/org/lookup/nobody", Some(&p.admin))
        .await
        .expect(404);

    // A non-user org created by activation; deletion needs an empty org and an instance admin.
    let team = s.git_repo(&p.admin, &p.admin, "team/app").await;
    let team_org = team["org_id"].as_i64().unwrap();
    let t = s
        .http
        .get(&format!("/api/orgs/{team_org}"), Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(t["is_user"], false);
    s.http
        .delete(&format!("/api/orgs/{team_org}"), Some(&p.alice))
        .await
        .expect(403);
    s.http
        .delete(&format!("/api/orgs/{team_org}"), Some(&p.admin))
        .await
        .expect(409);
    s.http
        .delete(
            &format!("/api/repos/{}?remove=true", team["id"]),
            Some(&p.admin),
        )
        .await
        .expect(200);
    s.http
        .delete(&format!("/api/orgs/{team_org}"), Some(&p.admin))
        .await
        .expect(204);
    s.http
        .get(&format!("/api/orgs/{team_org}"), Some(&p.admin))
        .await
        .expect(404);
}

#[tokio::test]
async fn git_push_reaches_the_hook_endpoint() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let bare = s.forge_dir().join("alice/hello.git");
    let work = s.dir.path().join("work/alice/hello");
    std::fs::write(work.join("CHANGES"), "second\n").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "second"]);
    // The hook calls back into this server, which runs on this test's runtime: push from a
    // blocking thread so the runtime stays free to answer.
    let (w, b) = (work.clone(), bare.clone());
    let out = tokio::task::spawn_blocking(move || {
        Command::new("git")
            .arg("-C")
            .arg(&w)
            .args(["push", b.to_str().unwrap(), "main"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("could not notify"),
        "git push output: {stderr}"
    );
    // The repository has no pipeline config: the hook is accepted with 204.
    let metrics = s.http.get("/metrics", None).await.text();
    assert!(
        metrics.contains("route=\"/api/hook\",method=\"POST\",status=\"204\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn hook_rejects_bad_tokens_and_bodies() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let path = &s.hook_path("alice/hello");
    let token = path.split("access_token=").nth(1).unwrap();
    let head = git(
        &s.forge_dir().join("alice/hello.git"),
        &["rev-parse", "main"],
    );
    let line = format!("{} {} refs/heads/main\n", "0".repeat(40), head.trim());

    s.http.post("/api/hook", None, &line).await.expect(400);
    s.http
        .post("/api/hook?access_token=garbage", None, &line)
        .await
        .expect(400);
    // A user token is not a hook token.
    s.http
        .post(&format!("/api/hook?access_token={}", p.alice), None, &line)
        .await
        .expect(400);
    // A forged signature is refused.
    let forged = format!("{}x", &token[..token.len() - 1]);
    s.http
        .post(&format!("/api/hook?access_token={forged}"), None, &line)
        .await
        .expect(400);
    // Bad bodies.
    let r = s
        .http
        .post(path, None, "not a ref update")
        .await
        .expect(400);
    assert!(r.text().contains("failure to parse hook"));
    s.http.post(path, None, "").await.expect(400);
    // Good (no config in the repository, so nothing to run: 204): via query and via Bearer.
    s.http.post(path, None, &line).await.expect(204);
    s.http
        .send("POST", "/api/hook", Some(token), Some(line.as_bytes()), &[])
        .await
        .expect(204);
    // A commit the repository does not have.
    let ghost = format!("{} {} refs/heads/main\n", "0".repeat(40), "a".repeat(40));
    s.http.post(path, None, &ghost).await.expect(404);
    // An inactive repository answers 204.
    s.http
        .delete(&format!("/api/repos/{}", repo["id"]), Some(&p.alice))
        .await
        .expect(200);
    s.http.post(path, None, &line).await.expect(204);
}

#[tokio::test]
async fn resource_changes_write_events() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let start = s
        .app_state
        .ci
        .reads
        .read(|c| woodlark::store::events::list_after(c, 0, 10_000))
        .await
        .unwrap()
        .last()
        .map(|e| e.seq)
        .unwrap_or(0);
    let repo = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let id = repo["id"].as_i64().unwrap();
    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.alice),
            r#"{"timeout":15}"#,
        )
        .await
        .expect(200);
    s.http
        .delete(&format!("/api/repos/{id}?remove=true"), Some(&p.alice))
        .await
        .expect(200);
    let events = s
        .app_state
        .ci
        .reads
        .read(move |c| woodlark::store::events::list_after(c, start, 100))
        .await
        .unwrap();
    let types: Vec<String> = events.iter().map(|e| e.event_type()).collect();
    assert_eq!(
        types,
        [
            "forges.created",
            "repos.created",
            "repos.updated",
            "repos.deleted"
        ]
    );
    assert_eq!(events[1].object["full_name"], "alice/hello");
    assert_eq!(events[2].previous, Some(serde_json::json!({"timeout": 60})));
    assert_eq!(events[3].object["id"], id);
    assert!(
        events
            .iter()
            .all(|e| !e.object.to_string().contains("webhook_secret"))
    );
    assert_eq!(events[1].repo_id, Some(id));
}
