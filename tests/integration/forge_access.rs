//! Access lost on a forge is lost here, written as the attacks of issue 45 item 3 against a
//! fake GitHub (`forge_fakes`) and the real server:
//!
//! - a collaborator removed from the private repository keeps no write that matters
//!   (secrets, registries, settings, crons, manual runs) once the stored permission is older
//!   than `ci::repos::RECHECK_SECS`, and none at all right after signing in again or
//!   listing their repositories — reads keep upstream's hour and do not ask the forge;
//! - a revoked forge token (401 from the forge) ends the browser session signed in with it,
//!   the stored tokens, and every permission that forge granted;
//! - a user who left the organisation can neither read its secrets nor mint its agents;
//! - a user whose push was taken away cannot approve a held pipeline;
//! - an organisation's admin cannot move a repository onto one of its repositories they do
//!   not administer on the forge.

use serde_json::{Value, json};

use crate::forge_fakes::Kind;
use crate::forges::{RoundTrip, round_trip, sign_in};
use crate::util::TestServer;
use woodlark::store::repos::{self, Perm};

/// Older than the re-check of writes (five minutes), younger than the hour of reads.
const STALE_FOR_WRITES: i64 = 6 * 60;

/// octocat's user id.
async fn user_id(s: &TestServer, pat: &str) -> i64 {
    s.http.get("/api/user", Some(pat)).await.expect(200).json()["id"]
        .as_i64()
        .unwrap()
}

/// Gives `user` admin on `repo` as if synced from the forge `age` seconds ago.
async fn grant(s: &TestServer, user: i64, repo: i64, age: i64) {
    s.app_state
        .ci
        .store_for_tests()
        .write(move |c| {
            repos::set_perm(c, user, repo, Perm::all())?;
            repos::backdate_perms(c, user, age)
        })
        .await
        .unwrap();
}

/// How many times the fake was asked for the repository (the permission re-check).
fn repo_reads(rt: &RoundTrip) -> usize {
    let fake = rt.fake.lock().unwrap();
    fake.seen
        .iter()
        .filter(|s| s.method == "GET" && s.path == "/repos/octo/app")
        .count()
}

/// The writes that matter on repository `id`, each as (what, method, path, body).
fn repo_writes(id: i64) -> Vec<(&'static str, &'static str, String, Value)> {
    vec![
        (
            "secret",
            "POST",
            format!("/api/repos/{id}/secrets"),
            json!({"name": "deploy_token", "value": "v", "events": ["push"]}),
        ),
        (
            "registry",
            "POST",
            format!("/api/repos/{id}/registries"),
            json!({"address": "registry.example.com", "username": "u", "password": "p"}),
        ),
        (
            "settings",
            "PATCH",
            format!("/api/repos/{id}"),
            json!({"timeout": 30}),
        ),
        (
            "cron",
            "POST",
            format!("/api/repos/{id}/cron"),
            json!({"name": "nightly", "schedule": "@daily"}),
        ),
        (
            "manual run",
            "POST",
            format!("/api/repos/{id}/pipelines"),
            json!({"branch": "main"}),
        ),
    ]
}

/// The status of `method path` with `body` (none when null) as `pat`.
async fn send(s: &TestServer, pat: &str, method: &str, path: &str, body: &Value) -> u16 {
    let body = (!body.is_null()).then(|| body.to_string());
    s.http
        .send(
            method,
            path,
            Some(pat),
            body.as_deref().map(str::as_bytes),
            &[],
        )
        .await
        .status
        .as_u16()
}

#[tokio::test]
async fn github_removed_collaborator_loses_writes_within_the_recheck_and_at_once_on_sign_in_or_listing()
 {
    let rt = round_trip(Kind::GitHub).await;
    let (s, pat, id) = (&rt.s, rt.pat.as_str(), rt.id);
    let octocat = user_id(s, pat).await;
    rt.fake.lock().unwrap().removed = true;

    // A read with a permission six minutes old keeps upstream's hour: no forge call.
    grant(s, octocat, id, STALE_FOR_WRITES).await;
    let asked = repo_reads(&rt);
    s.http
        .get(&format!("/api/repos/{id}"), Some(pat))
        .await
        .expect(200);
    assert_eq!(repo_reads(&rt), asked, "a read asked the forge");

    // Each write that matters re-checks a permission that old: the forge's 404 ends it, and
    // the private repository is no longer there for them.
    for (what, method, path, body) in repo_writes(id) {
        grant(s, octocat, id, STALE_FOR_WRITES).await;
        let status = send(s, pat, method, &path, &body).await;
        assert_eq!(status, 404, "{what}: {method} {path}");
    }

    // Listing their repositories refreshes at once, even a permission synced a moment ago.
    grant(s, octocat, id, 0).await;
    s.http
        .get("/api/user/repos?all=true", Some(pat))
        .await
        .expect(200);
    for (what, method, path, body) in repo_writes(id) {
        assert_eq!(send(s, pat, method, &path, &body).await, 404, "{what}");
    }

    // So does signing in again, before the sign-in is answered.
    grant(s, octocat, id, 0).await;
    sign_in(s, rt.forge, rt.api, Kind::GitHub).await;
    for (what, method, path, body) in repo_writes(id) {
        assert_eq!(send(s, pat, method, &path, &body).await, 404, "{what}");
    }
}

#[tokio::test]
async fn github_revoked_token_ends_the_forge_session_and_what_the_forge_granted() {
    let rt = round_trip(Kind::GitHub).await;
    let (s, pat, id) = (&rt.s, rt.pat.as_str(), rt.id);
    let octocat = user_id(s, pat).await;
    let mut browser = sign_in(s, rt.forge, rt.api, Kind::GitHub).await;
    browser.get("/api/user").await.expect(200);

    // octocat revokes the app on the forge; their stored permission is older than writes
    // allow, so the next one asks the forge, which answers 401.
    rt.fake.lock().unwrap().revoke_all();
    grant(s, octocat, id, STALE_FOR_WRITES).await;
    let body = json!({"name": "deploy_token", "value": "v", "events": ["push"]});
    let secrets = format!("/api/repos/{id}/secrets");
    assert_eq!(send(s, pat, "POST", &secrets, &body).await, 404);

    // What the forge granted is gone: its tokens and the permissions; the browser session
    // made by signing in through it ends with them.
    let (tokens, perm) = s
        .app_state
        .ci
        .reads
        .read(move |c| {
            Ok((
                woodlark::store::forge_tokens::get(c, octocat)?,
                repos::perm(c, octocat, id)?,
            ))
        })
        .await
        .unwrap();
    assert_eq!(tokens, None);
    assert_eq!(perm, None);
    browser.get("/api/user").await.expect(401);
    // Their personal access token is the server's own credential: it still names them,
    // with nothing the forge granted.
    s.http.get("/api/user", Some(pat)).await.expect(200);
    s.http
        .get(&format!("/api/repos/{id}"), Some(pat))
        .await
        .expect(404);
}

#[tokio::test]
async fn github_lost_org_membership_refuses_org_secrets_and_agent_tokens() {
    let rt = round_trip(Kind::GitHub).await;
    let (s, pat, id) = (&rt.s, rt.pat.as_str(), rt.id);
    let repo = s
        .http
        .get(&format!("/api/repos/{id}"), Some(pat))
        .await
        .expect(200)
        .json();
    let org = repo["org_id"].as_i64().unwrap();
    let secret = json!({"name": "org_token", "value": "v", "events": ["push"]});
    let agent = json!({"name": "org-runner"});
    let org_writes = [
        ("GET", format!("/api/orgs/{org}/secrets"), Value::Null),
        ("POST", format!("/api/orgs/{org}/secrets"), secret),
        ("POST", format!("/api/orgs/{org}/agents"), agent),
    ];
    // The forge says octocat administers `octo` (the answer is now kept for a while).
    for (method, path, body) in &org_writes {
        assert_eq!(
            send(s, pat, method, path, body).await,
            200,
            "{method} {path}"
        );
    }
    // They leave the organisation on the forge; listing their repositories (or signing in)
    // has it asked again.
    rt.fake.lock().unwrap().left_org = true;
    s.http
        .get("/api/user/repos?all=true", Some(pat))
        .await
        .expect(200);
    for (method, path, body) in &org_writes {
        assert_eq!(
            send(s, pat, method, path, body).await,
            403,
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn github_stale_push_cannot_approve_a_held_pipeline() {
    let rt = round_trip(Kind::GitHub).await;
    let (s, pat, id) = (&rt.s, rt.pat.as_str(), rt.id);
    let octocat = user_id(s, pat).await;
    let held = json!({"require_approval": "all_events"}).to_string();
    s.http
        .patch(&format!("/api/repos/{id}"), Some(pat), &held)
        .await
        .expect(200);
    let pipeline = rt.push_and_deliver("held.txt").await.created;
    assert_eq!(pipeline["status"], "blocked", "{pipeline:#}");
    let number = pipeline["number"].as_i64().unwrap();

    // The forge takes octocat's push away; the stored one is older than approvals allow.
    rt.fake.lock().unwrap().perm = (true, false, false);
    grant(s, octocat, id, STALE_FOR_WRITES).await;
    let approve = format!("/api/repos/{id}/pipelines/{number}/approve");
    assert_eq!(send(s, pat, "POST", &approve, &Value::Null).await, 403);
    // Still a reader, and the pipeline still waits.
    let p = s
        .http
        .get(&format!("/api/repos/{id}/pipelines/{number}"), Some(pat))
        .await
        .expect(200)
        .json();
    assert_eq!(p["status"], "blocked");
}

#[tokio::test]
async fn github_move_needs_admin_on_the_target_repository() {
    let rt = round_trip(Kind::GitHub).await;
    let (s, pat, id) = (&rt.s, rt.pat.as_str(), rt.id);
    // octocat administers the `octo` organisation (so the namespace allows it) and may push
    // to `octo/locked`, but the forge says they do not administer it.
    let r = s
        .http
        .post(
            &format!("/api/repos/{id}/move?to=octo/locked"),
            Some(pat),
            "",
        )
        .await
        .expect(403);
    assert!(r.text().contains("admin permission"), "{}", r.text());
    let repo = s
        .http
        .get(&format!("/api/repos/{id}"), Some(pat))
        .await
        .expect(200)
        .json();
    assert_eq!(repo["full_name"], "octo/app");
    // The look-up went out as octocat (their token), not with the forge's own credentials.
    let fake = rt.fake.lock().unwrap();
    let asked = fake
        .seen
        .iter()
        .filter(|seen| seen.path == "/repos/octo/locked")
        .collect::<Vec<_>>();
    assert!(!asked.is_empty(), "the forge was not asked for octo/locked");
    assert!(
        asked
            .iter()
            .all(|seen| seen.auth.contains(crate::forge_fakes::ACCESS_PREFIX)),
        "asked without octocat's token"
    );
}
