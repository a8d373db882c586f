//! Tenant isolation, each test written as the attack it closes: an ordinary account must
//! never reach another user's namespace, secrets, pipelines or logs — not by moving a
//! repository, not by inheriting the id of a deleted record, not by reading the data dir.

use serde_json::Value;

use crate::pipelines::{push_files, wait_for};
use crate::util::TestServer;
use woodlark::store::{integrity, logs, repos};

/// No row of the main database names a record that is gone.
async fn assert_no_orphans(s: &TestServer) {
    let found = s.app_state.ci.reads.read(integrity::orphans).await.unwrap();
    assert!(found.is_empty(), "orphaned rows: {found:?}");
}

#[tokio::test]
async fn moving_a_repository_into_another_namespace_is_refused() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let bobs = s.git_repo(&p.admin, &p.bob, "bob/app").await;
    let bob_repo = bobs["id"].as_i64().unwrap();
    let alices = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let alice_org = alices["org_id"].as_i64().unwrap();
    s.http
        .post(
            &format!("/api/orgs/{alice_org}/secrets"),
            Some(&p.alice),
            r#"{"name": "deploy_key", "value": "alice-only", "events": ["push"]}"#,
        )
        .await
        .expect(200);
    // A repository Alice has not activated yet, in her namespace.
    s.init_git_repo("alice/unactivated");

    // The attack: Bob moves his repository there.
    let refused = s
        .http
        .post(
            &format!("/api/repos/{bob_repo}/move?to=alice/unactivated"),
            Some(&p.bob),
            "",
        )
        .await
        .expect(403);
    assert!(refused.text().contains("alice"), "{}", refused.text());
    let still = s
        .http
        .get(&format!("/api/repos/{bob_repo}"), Some(&p.bob))
        .await
        .expect(200)
        .json();
    assert_eq!(still["full_name"], "bob/app");
    assert_eq!(still["org_id"], bobs["org_id"]);

    // Bob is not an admin of Alice's organisation, so her org secrets and agents stay hers.
    let perm = s
        .http
        .get(&format!("/api/orgs/{alice_org}/permissions"), Some(&p.bob))
        .await
        .expect(200)
        .json();
    assert_eq!(perm["admin"], false);
    s.http
        .get(&format!("/api/orgs/{alice_org}/secrets"), Some(&p.bob))
        .await
        .expect(403);

    // Alice herself may move her own repository within her namespace, and admins anywhere.
    s.init_git_repo("alice/renamed");
    s.http
        .post(
            &format!(
                "/api/repos/{}/move?to=alice/renamed",
                alices["id"].as_i64().unwrap()
            ),
            Some(&p.alice),
            "",
        )
        .await
        .expect(204);
    s.init_git_repo("team/app");
    s.http
        .post(
            &format!("/api/repos/{bob_repo}/move?to=team/app"),
            Some(&p.bob),
            "",
        )
        .await
        .expect(403);
    s.http
        .post(
            &format!("/api/repos/{bob_repo}/move?to=team/app"),
            Some(&p.admin),
            "",
        )
        .await
        .expect(204);
}

#[tokio::test]
async fn a_permission_on_one_repository_never_makes_an_org_admin() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let alices = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let (repo_id, alice_org) = (
        alices["id"].as_i64().unwrap(),
        alices["org_id"].as_i64().unwrap(),
    );
    let bob_id = s
        .http
        .get("/api/user", Some(&p.bob))
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    // However Bob came by an admin row on one of Alice's repositories…
    s.app_state
        .ci
        .store_for_tests()
        .write(move |c| repos::set_perm(c, bob_id, repo_id, repos::Perm::all()))
        .await
        .unwrap();
    s.http
        .get(&format!("/api/repos/{repo_id}/secrets"), Some(&p.bob))
        .await
        .expect(200);
    // …it makes him a member of her organisation, never its admin.
    let perm = s
        .http
        .get(&format!("/api/orgs/{alice_org}/permissions"), Some(&p.bob))
        .await
        .expect(200)
        .json();
    assert_eq!(perm, serde_json::json!({"member": true, "admin": false}));
    for path in [
        format!("/api/orgs/{alice_org}/secrets"),
        format!("/api/orgs/{alice_org}/registries"),
        format!("/api/orgs/{alice_org}/agents"),
    ] {
        s.http.get(&path, Some(&p.bob)).await.expect(403);
    }
    s.http
        .post(
            &format!("/api/orgs/{alice_org}/secrets"),
            Some(&p.bob),
            r#"{"name": "x", "value": "y", "events": ["push"]}"#,
        )
        .await
        .expect(403);
    s.http
        .post(
            &format!("/api/orgs/{alice_org}/agents"),
            Some(&p.bob),
            r#"{"name": "bobs-agent"}"#,
        )
        .await
        .expect(403);
    // Nor may he activate repositories in her namespace.
    s.init_git_repo("alice/other");
    s.http
        .post("/api/repos?forge_remote_id=alice/other", Some(&p.bob), "")
        .await
        .expect(403);
}

#[tokio::test]
async fn a_removed_repository_leaves_nothing_for_the_next_one() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let old = s.git_repo(&p.admin, &p.alice, "alice/one").await;
    let old_id = old["id"].as_i64().unwrap();
    push_files(
        &s,
        "alice/one",
        &[(
            ".woodpecker.yaml",
            "steps:\n  build:\n    image: sh\n    commands: [echo alice-private-output]\n",
        )],
        "ci",
    )
    .await;
    wait_for(&s.http, &p.alice, old_id, 1, 30, |p| {
        p["status"] == "success"
    })
    .await;
    s.http
        .post(
            &format!("/api/repos/{old_id}/secrets"),
            Some(&p.alice),
            r#"{"name": "token", "value": "alice-secret", "events": ["push"]}"#,
        )
        .await
        .expect(200);
    let logged = s
        .app_state
        .ci
        .log_reads
        .read(|c| logs::step_ids_after(c, 0, 100))
        .await
        .unwrap();
    assert!(!logged.is_empty());

    s.http
        .delete(&format!("/api/repos/{old_id}?remove=true"), Some(&p.alice))
        .await
        .expect(200);
    assert_no_orphans(&s).await;
    let left = s
        .app_state
        .ci
        .log_reads
        .read(|c| logs::step_ids_after(c, 0, 100))
        .await
        .unwrap();
    assert!(left.is_empty(), "logs of removed steps: {left:?}");

    // The next activated repository gets a new id and none of the old one's data.
    let new = s.git_repo(&p.admin, &p.bob, "bob/two").await;
    let new_id = new["id"].as_i64().unwrap();
    assert!(
        new_id > old_id,
        "ids are never reused: {new_id} after {old_id}"
    );
    let list = s
        .http
        .get(&format!("/api/repos/{new_id}/pipelines"), Some(&p.bob))
        .await
        .expect(200)
        .json();
    assert_eq!(list, serde_json::json!([]));
    let secrets = s
        .http
        .get(&format!("/api/repos/{new_id}/secrets"), Some(&p.bob))
        .await
        .expect(200)
        .json();
    assert_eq!(secrets, serde_json::json!([]));
    s.http
        .get(&format!("/api/repos/{old_id}/pipelines/1"), Some(&p.bob))
        .await
        .expect(404);
    // Bob's event feed shows nothing of Alice's removed repository.
    let feed = s
        .http
        .get("/events?limit=1000", Some(&p.bob))
        .await
        .expect(200)
        .json();
    let text = feed.to_string();
    assert!(!text.contains("alice/one"), "{text}");
    assert!(!text.contains("alice-private-output"));
}

#[tokio::test]
async fn a_deleted_users_permissions_are_not_inherited() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let carol = s.user("carol", false).await;
    let repo = s.git_repo(&p.admin, &carol, "carol/app").await;
    let repo_id = repo["id"].as_i64().unwrap();
    let carol_id = s
        .http
        .get("/api/user", Some(&carol))
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    s.http
        .delete("/api/users/carol", Some(&p.admin))
        .await
        .expect(204);
    assert_no_orphans(&s).await;

    // The next user gets a fresh id and no standing on Carol's repository.
    let dave = s.user("dave", false).await;
    let dave_user: Value = s
        .http
        .get("/api/user", Some(&dave))
        .await
        .expect(200)
        .json();
    assert!(dave_user["id"].as_i64().unwrap() > carol_id);
    s.http
        .get(&format!("/api/repos/{repo_id}"), Some(&dave))
        .await
        .expect(404);
    s.http
        .get(&format!("/api/repos/{repo_id}/secrets"), Some(&dave))
        .await
        .expect(404);
    // Carol's old token names her id and now fails.
    s.http.get("/api/user", Some(&carol)).await.expect(401);
}

#[tokio::test]
async fn deleted_ids_are_never_handed_out_again() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let id = repo["id"].as_i64().unwrap();
    let base = format!("/api/repos/{id}");
    let body = r#"{"name": "one", "value": "v", "events": ["push"]}"#;
    let first = s
        .http
        .post(&format!("{base}/secrets"), Some(&p.alice), body)
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    s.http
        .delete(&format!("{base}/secrets/one"), Some(&p.alice))
        .await
        .expect(204);
    let second = s
        .http
        .post(&format!("{base}/secrets"), Some(&p.alice), body)
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    assert!(second > first, "{second} after {first}");
    let agent = s
        .http
        .post("/api/agents", Some(&p.admin), r#"{"name": "a"}"#)
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    s.http
        .delete(&format!("/api/agents/{agent}"), Some(&p.admin))
        .await
        .expect(204);
    let again = s
        .http
        .post("/api/agents", Some(&p.admin), r#"{"name": "a"}"#)
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();
    assert!(again > agent);
}

#[cfg(unix)]
#[tokio::test]
async fn the_data_dir_is_private_and_the_database_alone_forges_no_token() {
    use std::os::unix::fs::PermissionsExt;
    let s = TestServer::start().await;
    let p = s.principals().await;
    let mode = |path: &std::path::Path| {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    };
    let dir = s.dir.path();
    assert_eq!(mode(dir), 0o700);
    // On PostgreSQL the database is not in the data dir (its server guards its files).
    let files: &[&str] = if crate::util::on_postgres() {
        &["secrets.key"]
    } else {
        &[
            "woodlark.db",
            "woodlark.db-wal",
            "woodlark.db-shm",
            "logs.db",
            "logs.db-wal",
            "secrets.key",
        ]
    };
    for name in files {
        assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
    }

    // The attack: read the admin's token seed from the database and sign a token with it.
    let (id, seed): (i64, String) = woodlark_store::inspect_for_tests(&s.database(), |db| {
        db.query_row_for_tests("SELECT id, hash FROM users WHERE login = 'root'", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap()
    });
    let forged = woodlark::auth::token::user_token(id, &seed);
    s.http.get("/api/user", Some(&forged)).await.expect(401);
    s.http.get("/api/user", Some(&p.admin)).await.expect(200);
}

#[tokio::test]
async fn a_forge_with_repositories_keeps_its_type() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let forge = repo["forge_id"].as_i64().unwrap();
    let r = s
        .http
        .patch(
            &format!("/api/forges/{forge}"),
            Some(&p.admin),
            r#"{"type": "github", "url": "https://github.com"}"#,
        )
        .await
        .expect(409);
    assert!(r.text().contains("1 repositories use it"), "{}", r.text());
    let still = s
        .http
        .get(&format!("/api/forges/{forge}"), Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(still["woodlark_type"], "git");
    // The repository keeps working.
    s.http
        .get(
            &format!("/api/repos/{}/branches", repo["id"]),
            Some(&p.alice),
        )
        .await
        .expect(200);
}

/// Rows of the logs database whose step is gone from the main database.
fn orphan_log_steps(dir: &std::path::Path) -> Vec<i64> {
    let ids: Vec<i64> =
        woodlark_store::inspect_for_tests(&crate::util::logs_database_of(dir), |logs| {
            logs.query_map_for_tests("SELECT DISTINCT step_id FROM log_entries", [], |r| r.get(0))
                .unwrap()
        });
    woodlark_store::inspect_for_tests(&crate::util::database_of(dir), |main| {
        ids.into_iter()
            .filter(|id| {
                let found: i64 = main
                    .query_row_for_tests("SELECT count(*) FROM steps WHERE id = ?1", [id], |r| {
                        r.get(0)
                    })
                    .unwrap();
                found == 0
            })
            .collect()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_deletes_leaves_no_orphan_rows() {
    use crate::util::{Http, Process, cli_user_add, git, with_runner, write_config};
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &with_runner(dir.path()));
    let token = |login: &str, admin: bool| {
        String::from_utf8(cli_user_add(&config, login, admin).stdout)
            .unwrap()
            .trim()
            .to_string()
    };
    let (admin, alice) = (token("root", true), token("alice", false));
    let mut server = Process::start(&config);
    let mut http = Http::new(server.addr);
    let forge_dir = dir.path().join("forge");
    std::fs::create_dir_all(forge_dir.join("alice")).unwrap();
    let body = serde_json::json!({"type": "git", "url": format!("file://{}", forge_dir.display())})
        .to_string();
    let forge = http
        .post("/api/forges", Some(&admin), &body)
        .await
        .expect(200)
        .json()["id"]
        .as_i64()
        .unwrap();

    // Repositories with finished pipelines, logs, secrets and cron jobs to delete.
    let mut repos = Vec::new();
    for i in 0..4 {
        let name = format!("alice/r{i}");
        let bare = forge_dir.join(format!("{name}.git"));
        git(
            &forge_dir,
            &["init", "-q", "--bare", "-b", "main", bare.to_str().unwrap()],
        );
        let work = dir.path().join(format!("w{i}"));
        std::fs::create_dir_all(&work).unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        std::fs::write(
            work.join(".woodpecker.yaml"),
            "steps:\n  a:\n    image: sh\n    commands: [seq 1 50]\n  b:\n    image: sh\n    commands: [seq 1 50]\n",
        )
        .unwrap();
        git(&work, &["add", "."]);
        git(&work, &["commit", "-q", "-m", "ci"]);
        git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
        let id = http
            .post(
                &format!("/api/repos?forge_remote_id={name}&forge_id={forge}"),
                Some(&alice),
                "",
            )
            .await
            .expect(200)
            .json()["id"]
            .as_i64()
            .unwrap();
        for n in 1..=3 {
            http.post(&format!("/api/repos/{id}/pipelines"), Some(&alice), "{}")
                .await
                .expect(200);
            crate::pipelines::wait_for(&http, &alice, id, n, 60, |p| p["status"] == "success")
                .await;
        }
        http.post(
            &format!("/api/repos/{id}/secrets"),
            Some(&alice),
            r#"{"name": "s", "value": "v", "events": ["push"]}"#,
        )
        .await
        .expect(200);
        repos.push(id);
    }

    // Kill -9 at a different moment of each delete; after every crash the database must hold
    // either the whole repository or nothing of it.
    for (i, id) in repos.iter().enumerate() {
        let addr = server.addr;
        let t = alice.clone();
        let path = format!("/api/repos/{id}?remove=true");
        let request = tokio::spawn(async move {
            Http::new(addr)
                .send("DELETE", &path, Some(&t), None, &[])
                .await
        });
        tokio::time::sleep(std::time::Duration::from_millis(i as u64 * 4)).await;
        drop(server); // SIGKILL + wait
        let answered = request.await.ok().map(|r| r.status);
        {
            let id = *id;
            let (found, repo_rows, pipelines) =
                woodlark_store::inspect_for_tests(&crate::util::database_of(dir.path()), |db| {
                    let count = |sql: &str| -> i64 {
                        db.query_row_for_tests(sql, [id], |r| r.get(0)).unwrap()
                    };
                    (
                        integrity::orphans(db).unwrap(),
                        count("SELECT count(*) FROM repos WHERE id = ?1"),
                        count("SELECT count(*) FROM pipelines WHERE repo_id = ?1"),
                    )
                });
            assert!(found.is_empty(), "after kill {i}: orphaned rows {found:?}");
            assert!(
                (repo_rows, pipelines) == (1, 3) || (repo_rows, pipelines) == (0, 0),
                "after kill {i}: repo {repo_rows}, pipelines {pipelines}"
            );
            eprintln!("kill {i}: answer {answered:?}, repository rows left {repo_rows}");
            if answered.is_some_and(|s| s.as_u16() == 200) {
                assert_eq!(repo_rows, 0, "a delete that was answered is durable");
            }
        }
        server = Process::start(&config);
        http = Http::new(server.addr);
        // Logs of deleted steps are swept at start.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let left = orphan_log_steps(dir.path());
            if left.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "after kill {i}: logs of deleted steps remain: {left:?}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    // What survived a crash can still be deleted completely.
    for id in &repos {
        let r = http
            .delete(&format!("/api/repos/{id}?remove=true"), Some(&alice))
            .await;
        assert!(matches!(r.status.as_u16(), 200 | 404), "{}", r.status);
    }
    drop(server);
    let (orphans, left) =
        woodlark_store::inspect_for_tests(&crate::util::database_of(dir.path()), |db| {
            let left: i64 = db
                .query_row_for_tests("SELECT count(*) FROM pipelines", [], |r| r.get(0))
                .unwrap();
            (integrity::orphans(db).unwrap(), left)
        });
    assert!(orphans.is_empty(), "{orphans:?}");
    assert_eq!(left, 0);
    assert!(orphan_log_steps(dir.path()).is_empty());
    let _ = http;
}
