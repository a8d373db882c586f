//! Contract 0.2.0: the Bitbucket Data Center adapter's sign-in and user calls against a fake
//! Bitbucket DC (`/rest/oauth2/latest`, REST 1.0 with `start`/`limit` pages, the `whoami`
//! servlet, build-status 1.0) on 127.0.0.1.

use serde_json::json;

use super::fake_http::{Seen, fake_server};
use super::forge_signin::{
    adapter_host, adapter_host_with, client, ctx, form_of, last, post_each_status,
};
use crate::types::*;

const TOKEN: &str = "bbdc_user1";

fn repo(id: u64, slug: &str) -> serde_json::Value {
    json!({"id": id, "slug": slug, "name": slug, "scmId": "git", "state": "AVAILABLE", "public": false,
        "project": {"key": "PRJ", "id": 1, "name": "Project"},
        "links": {"clone": [{"href": format!("https://bb.example/scm/prj/{slug}.git"), "name": "http"},
                            {"href": format!("ssh://git@bb.example:7999/prj/{slug}.git"), "name": "ssh"}],
                  "self": [{"href": format!("https://bb.example/projects/PRJ/repos/{slug}/browse")}]}})
}

fn page(values: serde_json::Value, start: u64, last: bool) -> String {
    let size = values.as_array().map_or(0, Vec::len) as u64;
    let mut v =
        json!({"size": size, "limit": 2, "start": start, "isLastPage": last, "values": values});
    if !last {
        v["nextPageStart"] = json!(start + size);
    }
    v.to_string()
}

/// A fake Bitbucket DC: code `good`, refresh token `r1`; user `octo.cat@corp` (slug
/// `octo.cat_corp`); writable repos `r`, `w` (page 1) and `docs` (page 2), admin of `r` only;
/// project admin of `PRJ`, writer in `OTHER`.
fn bitbucket_dc(s: &Seen) -> (u16, String) {
    let authed = s.headers.get("authorization").map(String::as_str) == Some("Bearer bbdc_user1");
    let q = |k: &str| s.query.get(k).cloned().unwrap_or_default();
    match (s.method.as_str(), s.path.as_str()) {
        ("POST", "/rest/oauth2/latest/token") => {
            let f = form_of(s);
            let grant = f.get("grant_type").map(String::as_str);
            if grant == Some("authorization_code") && f.get("code").map(String::as_str) == Some("good") {
                (200, json!({"scope": "REPO_READ REPO_WRITE REPO_ADMIN", "access_token": TOKEN,
                    "refresh_token": "r1", "token_type": "bearer", "expires_in": 7200}).to_string())
            } else if grant == Some("refresh_token") && f.get("refresh_token").map(String::as_str) == Some("r1") {
                (200, json!({"access_token": "bbdc_new", "refresh_token": "r2", "token_type": "bearer",
                    "expires_in": 7200}).to_string())
            } else {
                (400, json!({"error": "invalid_grant", "error_description": "Invalid authorization code"}).to_string())
            }
        }
        _ if !authed => (401, json!({"errors": [{"message": "Authentication failed."}]}).to_string()),
        ("GET", "/plugins/servlet/applinks/whoami") => (200, "octo.cat@corp".into()),
        ("GET", "/rest/api/1.0/users/octo.cat_corp") => (200, json!({"name": "octo.cat@corp",
            "emailAddress": "octo@corp.example", "id": 101, "displayName": "Octo Cat", "active": true,
            "slug": "octo.cat_corp", "type": "NORMAL"}).to_string()),
        ("GET", "/rest/api/1.0/repos") if q("permission") == "REPO_ADMIN" => {
            (200, page(json!([repo(1, "r")]), 0, true))
        }
        ("GET", "/rest/api/1.0/repos") if q("projectkey") == "PRJ" && q("name") == "r" => {
            (200, page(json!([repo(1, "r")]), 0, true))
        }
        ("GET", "/rest/api/1.0/repos") if q("projectkey") == "OTHER" => (200, page(json!([repo(9, "x")]), 0, true)),
        ("GET", "/rest/api/1.0/repos") if !q("projectkey").is_empty() => (200, page(json!([]), 0, true)),
        ("GET", "/rest/api/1.0/repos") if q("start") == "0" => {
            (200, page(json!([repo(1, "r"), repo(2, "w")]), 0, false))
        }
        ("GET", "/rest/api/1.0/repos") if q("start") == "2" => (200, page(json!([repo(3, "docs")]), 2, true)),
        ("GET", "/rest/api/1.0/repos") => (200, page(json!([]), 0, true)),
        ("GET", "/rest/api/1.0/projects/PRJ/repos/r" | "/rest/api/1.0/projects/PRJ/repos/ro") => {
            (200, repo(if s.path.ends_with("/ro") { 4 } else { 1 }, "r").to_string())
        }
        ("GET", "/rest/api/1.0/projects/PRJ/repos/r/webhooks") => (200, page(json!([]), 0, true)),
        ("GET", "/rest/api/1.0/projects/PRJ/repos/ro/webhooks") => {
            (401, json!({"errors": [{"message": "You are not permitted to access this resource"}]}).to_string())
        }
        ("GET", "/rest/api/1.0/projects") => (200, page(json!([{"key": "PRJ", "id": 1, "name": "Project"}]), 0, true)),
        ("GET", "/rest/api/1.0/projects/PRJ/permissions/users") => (200, page(json!([
            {"user": {"slug": "octo.cat_corp"}, "permission": "PROJECT_ADMIN"}]), 0, true)),
        ("GET", "/rest/api/1.0/projects/OTHER/permissions/users" | "/rest/api/1.0/projects/NONE/permissions/users") => {
            (401, json!({"errors": [{"message": "You are not permitted to access this resource"}]}).to_string())
        }
        ("GET", "/rest/api/1.0/projects/PRJ/repos/r/pull-requests") => (200, page(json!([
            {"id": 12, "version": 0, "title": "Add a thing", "state": "OPEN"}]), 0, true)),
        ("POST", "/rest/build-status/1.0/commits/abc123") => (204, String::new()),
        _ => (404, json!({"errors": [{"message": "Repository does not exist."}]}).to_string()),
    }
}

#[tokio::test]
async fn bitbucket_dc_oauth_sign_in() {
    let (origin, seen) = fake_server(bitbucket_dc).await;
    let (_dir, host) = adapter_host("bbdc", "forge-bitbucket-dc", &origin).await;
    assert_eq!(host.forge_contract("bbdc").as_deref(), Some("0.2.0"));

    let url = host
        .authorize_url("bbdc", client(&origin), "st")
        .await
        .unwrap();
    assert_eq!(
        url,
        format!(
            "{origin}/rest/oauth2/latest/authorize?client_id=Iv1.abc&redirect_uri=https%3A%2F%2Fci.example.com%2Fauthorize&response_type=code&scope=REPO_READ%20REPO_WRITE%20REPO_ADMIN&state=st"
        )
    );

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let token = host
        .exchange_code("bbdc", client(&origin), "good")
        .await
        .unwrap();
    assert_eq!(
        (token.access_token.as_str(), token.refresh_token.as_str()),
        (TOKEN, "r1")
    );
    assert!(
        (now + 7200..=now + 7205).contains(&token.expiry),
        "{}",
        token.expiry
    );
    let form = form_of(&last(&seen));
    assert_eq!(form["client_secret"], "shh");
    assert_eq!(form["redirect_uri"], "https://ci.example.com/authorize");
    let bad = host
        .exchange_code("bbdc", client(&origin), "stale")
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), Some(crate::ErrorKind::Denied), "{bad}");

    let fresh = host
        .refresh_token("bbdc", client(&origin), "r1")
        .await
        .unwrap();
    assert_eq!(
        (fresh.access_token.as_str(), fresh.refresh_token.as_str()),
        ("bbdc_new", "r2")
    );
    let refused = host
        .refresh_token("bbdc", client(&origin), "r0")
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), Some(crate::ErrorKind::Denied));

    // PROJECT_ADMIN only when the operator enables it, as upstream's flag.
    let (_dir2, host) = adapter_host_with(
        "bbdc",
        "forge-bitbucket-dc",
        &origin,
        &[("oauth-project-admin-scope", "true")],
    )
    .await;
    let url = host
        .authorize_url("bbdc", client(&origin), "st")
        .await
        .unwrap();
    assert!(
        url.contains("scope=REPO_READ%20REPO_WRITE%20REPO_ADMIN%20PROJECT_ADMIN&"),
        "{url}"
    );
}

#[tokio::test]
async fn bitbucket_dc_user_repos_orgs_pulls_netrc_status() {
    let (origin, seen) = fake_server(bitbucket_dc).await;
    let (_dir, host) = adapter_host("bbdc", "forge-bitbucket-dc", &origin).await;
    let c = || ctx(&origin, TOKEN);

    let user = host.current_user("bbdc", c()).await.unwrap();
    assert_eq!(
        user,
        ForgeUser {
            remote_id: "101".into(),
            login: "octo.cat_corp".into(),
            email: "octo@corp.example".into(),
            avatar_url: format!("{origin}/users/octo.cat_corp/avatar.png"),
        }
    );
    assert!(
        host.current_user("bbdc", ctx(&origin, "wrong"))
            .await
            .is_err()
    );

    let page1 = host.user_repos("bbdc", c(), 1, 2).await.unwrap();
    let q = &seen
        .lock()
        .unwrap()
        .iter()
        .rev()
        .find(|s| s.query.get("permission").map(String::as_str) == Some("REPO_WRITE"))
        .unwrap()
        .query
        .clone();
    assert_eq!((q["start"].as_str(), q["limit"].as_str()), ("0", "2"));
    let names: Vec<_> = page1.iter().map(|r| r.repo.full_name.as_str()).collect();
    assert_eq!(names, ["PRJ/r", "PRJ/w"]);
    assert_eq!(
        page1[0].perm,
        Perm {
            pull: true,
            push: true,
            admin: true
        }
    );
    assert_eq!(
        page1[1].perm,
        Perm {
            pull: true,
            push: true,
            admin: false
        }
    );
    assert_eq!(page1[0].repo.clone_url, "https://bb.example/scm/prj/r.git");
    let page2 = host.user_repos("bbdc", c(), 2, 2).await.unwrap();
    assert_eq!(page2.len(), 1);
    assert_eq!(page2[0].repo.full_name, "PRJ/docs");
    assert!(host.user_repos("bbdc", c(), 3, 2).await.unwrap().is_empty());

    let perm = host.repo_perm("bbdc", c(), "PRJ/r").await.unwrap();
    assert_eq!(
        perm,
        Perm {
            pull: true,
            push: true,
            admin: true
        }
    );
    let read_only = host.repo_perm("bbdc", c(), "PRJ/ro").await.unwrap();
    assert_eq!(
        read_only,
        Perm {
            pull: true,
            push: false,
            admin: false
        }
    );
    let none = host.repo_perm("bbdc", c(), "PRJ/hidden").await.unwrap();
    assert_eq!(none, Perm::default(), "404 is no access");

    let orgs = host.user_orgs("bbdc", c(), 1, 25).await.unwrap();
    assert_eq!(
        orgs,
        [Team {
            login: "PRJ".into(),
            avatar_url: format!("{origin}/rest/api/1.0/projects/PRJ/avatar.png")
        }]
    );
    let admin = host
        .org_membership("bbdc", c(), "PRJ", "octo.cat_corp")
        .await
        .unwrap();
    assert_eq!(
        admin,
        OrgMembership {
            member: true,
            admin: true
        }
    );
    let writer = host
        .org_membership("bbdc", c(), "OTHER", "octo.cat_corp")
        .await
        .unwrap();
    assert_eq!(
        writer,
        OrgMembership {
            member: true,
            admin: false
        }
    );
    let stranger = host
        .org_membership("bbdc", c(), "NONE", "octo.cat_corp")
        .await
        .unwrap();
    assert_eq!(stranger, OrgMembership::default());

    let pulls = host
        .pull_requests("bbdc", c(), "PRJ/r", 2, 10)
        .await
        .unwrap();
    assert_eq!(
        pulls,
        [PullRequestInfo {
            number: 12,
            title: "Add a thing".into()
        }]
    );
    let q = &last(&seen).query;
    assert_eq!(
        (
            q["state"].as_str(),
            q["start"].as_str(),
            q["limit"].as_str()
        ),
        ("OPEN", "10", "10")
    );

    let netrc = host
        .netrc("bbdc", c(), "https://bb.example/scm/prj/r.git")
        .await
        .unwrap();
    assert_eq!(
        (
            netrc.machine.as_str(),
            netrc.login.as_str(),
            netrc.password.as_str()
        ),
        ("bb.example", "x-token-auth", TOKEN)
    );
    let (_dir2, machine) = adapter_host_with(
        "bbdc",
        "forge-bitbucket-dc",
        &origin,
        &[("git-username", "ci-bot"), ("git-password", "bot-pass")],
    )
    .await;
    let netrc = machine
        .netrc("bbdc", c(), "https://bb.example/scm/prj/r.git")
        .await
        .unwrap();
    assert_eq!(
        (netrc.login.as_str(), netrc.password.as_str()),
        ("ci-bot", "bot-pass"),
        "upstream's machine account"
    );

    // Upstream's mapping: anything but pending, running and success is FAILED.
    let body = post_each_status(
        &host,
        "bbdc",
        c(),
        &seen,
        [
            (StatusState::Pending, "INPROGRESS"),
            (StatusState::Running, "INPROGRESS"),
            (StatusState::Success, "SUCCESSFUL"),
            (StatusState::Failure, "FAILED"),
            (StatusState::Error, "FAILED"),
            (StatusState::Killed, "FAILED"),
        ],
    )
    .await;
    assert_eq!(last(&seen).path, "/rest/build-status/1.0/commits/abc123");
    assert_eq!(body["key"], "ci/woodpecker/push/build");
    assert_eq!(body["url"], "https://ci.example.com/repos/1/pipeline/2");
    assert_eq!(body["description"], "Pipeline was canceled");
    // As upstream: the ref built, the status's parent (its key) and the pipeline's timing.
    assert_eq!(body["ref"], "refs/heads/main");
    assert_eq!(body["parent"], "ci/woodpecker/push/build");
    assert_eq!(body["duration"], 42_000);
    assert_eq!(body["dateAdded"], 1_700_000_000_000i64);
}
