//! Contract 0.2.0: the GitLab adapter's sign-in and user calls against a fake GitLab
//! (`/oauth`, `/api/v4`) on 127.0.0.1, with GitLab's fields and access levels.

use serde_json::json;

use super::fake_http::{Seen, fake_server};
use super::forge_signin::{adapter_host, client, ctx, form_of, last, post_each_status};
use crate::types::*;

const TOKEN: &str = "glpat_user1";

fn project(
    id: u64,
    name: &str,
    visibility: &str,
    permissions: serde_json::Value,
) -> serde_json::Value {
    json!({"id": id, "name": name, "path": name, "path_with_namespace": format!("o/{name}"),
        "visibility": visibility, "default_branch": "main", "avatar_url": null,
        "web_url": format!("https://gitlab.example/o/{name}"),
        "http_url_to_repo": format!("https://gitlab.example/o/{name}.git"),
        "ssh_url_to_repo": format!("git@gitlab.example:o/{name}.git"),
        "permissions": permissions})
}

fn access(level: u64) -> serde_json::Value {
    json!({"access_level": level, "notification_level": 3})
}

/// A fake GitLab: code `good`, refresh token `r1`; projects on two pages (one seen only
/// through an inherited membership, one not at all); group `acme` with 100 members before
/// `octo` (owner) and `dev` (developer).
fn gitlab(s: &Seen) -> (u16, String) {
    let authed = s.headers.get("authorization").map(String::as_str) == Some("Bearer glpat_user1");
    let page = s.query.get("page").map(String::as_str).unwrap_or("1");
    match (s.method.as_str(), s.path.as_str()) {
        ("POST", "/oauth/token") => {
            let f = form_of(s);
            let grant = f.get("grant_type").map(String::as_str);
            if grant == Some("authorization_code")
                && f.get("code").map(String::as_str) == Some("good")
            {
                (
                    200,
                    json!({"access_token": TOKEN, "token_type": "Bearer", "expires_in": 7200,
                    "refresh_token": "r1", "scope": "api", "created_at": 1_700_000_000})
                    .to_string(),
                )
            } else if grant == Some("refresh_token")
                && f.get("refresh_token").map(String::as_str) == Some("r1")
            {
                (
                    200,
                    json!({"access_token": "glpat_new", "token_type": "Bearer", "expires_in": 7200,
                    "refresh_token": "r2", "scope": "api"})
                    .to_string(),
                )
            } else {
                (400, json!({"error": "invalid_grant", "error_description": "The provided authorization grant is invalid, expired, revoked, does not match the redirection URI used in the authorization request, or was issued to another client."}).to_string())
            }
        }
        _ if !authed => (401, json!({"message": "401 Unauthorized"}).to_string()),
        ("GET", "/api/v4/user") => (
            200,
            json!({"id": 7, "username": "octo", "name": "Octo",
            "email": "octo@example.com", "avatar_url": "/uploads/-/system/user/avatar/7/a.png",
            "state": "active"})
            .to_string(),
        ),
        ("GET", "/api/v4/projects") if page == "1" => (
            200,
            json!([
                project(
                    1,
                    "r",
                    "private",
                    json!({"project_access": access(30), "group_access": null})
                ),
                project(
                    2,
                    "shared",
                    "public",
                    json!({"project_access": null, "group_access": access(50)})
                ),
                project(
                    3,
                    "inherited",
                    "public",
                    json!({"project_access": null, "group_access": null})
                ),
                project(4, "gone", "public", serde_json::Value::Null),
            ])
            .to_string(),
        ),
        ("GET", "/api/v4/projects") if page == "2" => (
            200,
            json!([project(
                5,
                "docs",
                "public",
                json!({"project_access": access(20), "group_access": null})
            ),])
            .to_string(),
        ),
        ("GET", "/api/v4/projects") => (200, "[]".into()),
        ("GET", "/api/v4/projects/3/members/all/7") => (
            200,
            json!({"id": 7, "username": "octo",
            "access_level": 40})
            .to_string(),
        ),
        ("GET", "/api/v4/projects/o%2Fr") => (
            200,
            project(
                1,
                "r",
                "private",
                json!({"project_access": access(40), "group_access": null}),
            )
            .to_string(),
        ),
        ("GET", "/api/v4/groups") => (
            200,
            json!([
                {"id": 5, "name": "acme", "path": "acme", "full_path": "acme",
                 "avatar_url": "https://gitlab.example/uploads/acme.png"},
                {"id": 6, "name": "acme-labs", "path": "acme-labs", "full_path": "acme-labs"},
            ])
            .to_string(),
        ),
        ("GET", "/api/v4/groups/5/members/all") if page == "1" => {
            let members: Vec<_> = (0..100)
                .map(|i| json!({"id": 100 + i, "username": format!("user{i}"), "access_level": 30}))
                .collect();
            (200, serde_json::Value::Array(members).to_string())
        }
        ("GET", "/api/v4/groups/5/members/all") => (
            200,
            json!([
                {"id": 7, "username": "octo", "access_level": 50},
                {"id": 8, "username": "dev", "access_level": 30},
            ])
            .to_string(),
        ),
        ("GET", "/api/v4/projects/o%2Fr/merge_requests") => (
            200,
            json!([
                {"id": 1001, "iid": 3, "title": "Add a thing", "state": "opened"},
            ])
            .to_string(),
        ),
        ("POST", "/api/v4/projects/o%2Fr/statuses/abc123") => (201, "{}".into()),
        _ => (404, json!({"message": "404 Project Not Found"}).to_string()),
    }
}

#[tokio::test]
async fn gitlab_oauth_sign_in() {
    let (origin, seen) = fake_server(gitlab).await;
    let (_dir, host) = adapter_host("gitlab", "forge-gitlab", &origin).await;
    assert_eq!(host.forge_contract("gitlab").as_deref(), Some("0.2.0"));

    let url = host
        .authorize_url("gitlab", client(&origin), "st")
        .await
        .unwrap();
    assert_eq!(
        url,
        format!(
            "{origin}/oauth/authorize?client_id=Iv1.abc&redirect_uri=https%3A%2F%2Fci.example.com%2Fauthorize&response_type=code&scope=api&state=st"
        )
    );
    assert!(seen.lock().unwrap().is_empty());

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let token = host
        .exchange_code("gitlab", client(&origin), "good")
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
    let req = last(&seen);
    assert_eq!(req.path, "/oauth/token");
    let form = form_of(&req);
    assert_eq!(form["grant_type"], "authorization_code");
    assert_eq!(form["redirect_uri"], "https://ci.example.com/authorize");
    assert_eq!(form["client_secret"], "shh");

    let bad = host
        .exchange_code("gitlab", client(&origin), "stale")
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), Some(crate::ErrorKind::Denied), "{bad}");
    assert!(bad.to_string().contains("invalid_grant"), "{bad}");

    let fresh = host
        .refresh_token("gitlab", client(&origin), "r1")
        .await
        .unwrap();
    assert_eq!(
        (fresh.access_token.as_str(), fresh.refresh_token.as_str()),
        ("glpat_new", "r2")
    );
    assert_eq!(form_of(&last(&seen))["refresh_token"], "r1");
    let refused = host
        .refresh_token("gitlab", client(&origin), "r0")
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), Some(crate::ErrorKind::Denied));
}

#[tokio::test]
async fn gitlab_user_repos_orgs_pulls_netrc_status() {
    let (origin, seen) = fake_server(gitlab).await;
    let (_dir, host) = adapter_host("gitlab", "forge-gitlab", &origin).await;
    let c = || ctx(&origin, TOKEN);

    let user = host.current_user("gitlab", c()).await.unwrap();
    assert_eq!(
        user,
        ForgeUser {
            remote_id: "7".into(),
            login: "octo".into(),
            email: "octo@example.com".into(),
            avatar_url: format!("{origin}/uploads/-/system/user/avatar/7/a.png"),
        }
    );
    assert_eq!(last(&seen).headers["authorization"], "Bearer glpat_user1");

    let page1 = host.user_repos("gitlab", c(), 1, 4).await.unwrap();
    let q = &seen
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.path == "/api/v4/projects")
        .unwrap()
        .query
        .clone();
    assert_eq!(q["membership"], "true");
    assert_eq!(q["min_access_level"], "30");
    assert_eq!(q["archived"], "false");
    assert_eq!((q["per_page"].as_str(), q["page"].as_str()), ("4", "1"));
    let names: Vec<_> = page1.iter().map(|r| r.repo.full_name.as_str()).collect();
    assert_eq!(
        names,
        ["o/r", "o/shared", "o/inherited"],
        "a project with no membership is left out"
    );
    assert_eq!(
        page1[0].perm,
        Perm {
            pull: true,
            push: true,
            admin: false
        },
        "developer"
    );
    assert_eq!(page1[0].repo.clone_url, "https://gitlab.example/o/r.git");
    assert!(page1[0].repo.private);
    assert_eq!(
        page1[1].perm,
        Perm {
            pull: true,
            push: true,
            admin: true
        },
        "group owner"
    );
    assert_eq!(
        page1[2].perm,
        Perm {
            pull: true,
            push: true,
            admin: true
        },
        "inherited maintainer"
    );
    let page2 = host.user_repos("gitlab", c(), 2, 4).await.unwrap();
    assert_eq!(page2.len(), 1);
    assert_eq!(
        page2[0].perm,
        Perm {
            pull: true,
            push: false,
            admin: false
        },
        "reporter"
    );
    assert!(
        host.user_repos("gitlab", c(), 3, 1000)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(last(&seen).query["per_page"], "100");

    let perm = host.repo_perm("gitlab", c(), "o/r").await.unwrap();
    assert_eq!(
        perm,
        Perm {
            pull: true,
            push: true,
            admin: true
        }
    );
    let none = host.repo_perm("gitlab", c(), "o/hidden").await.unwrap();
    assert_eq!(none, Perm::default(), "404 is no access");

    let orgs = host.user_orgs("gitlab", c(), 1, 20).await.unwrap();
    assert_eq!(
        orgs[0],
        Team {
            login: "acme".into(),
            avatar_url: "https://gitlab.example/uploads/acme.png".into()
        }
    );
    assert_eq!(last(&seen).query["min_access_level"], "30");
    let owner = host
        .org_membership("gitlab", c(), "acme", "octo")
        .await
        .unwrap();
    assert_eq!(
        owner,
        OrgMembership {
            member: true,
            admin: true
        }
    );
    assert_eq!(last(&seen).query["page"], "2", "members are paged through");
    let dev = host
        .org_membership("gitlab", c(), "acme", "dev")
        .await
        .unwrap();
    assert_eq!(
        dev,
        OrgMembership {
            member: true,
            admin: false
        }
    );
    let stranger = host
        .org_membership("gitlab", c(), "acme", "nobody")
        .await
        .unwrap();
    assert_eq!(stranger, OrgMembership::default());
    let no_group = host
        .org_membership("gitlab", c(), "acme-corp", "octo")
        .await
        .unwrap();
    assert_eq!(no_group, OrgMembership::default());

    let pulls = host
        .pull_requests("gitlab", c(), "o/r", 1, 20)
        .await
        .unwrap();
    assert_eq!(
        pulls,
        [PullRequestInfo {
            number: 3,
            title: "Add a thing".into()
        }],
        "the MR's iid"
    );
    assert_eq!(last(&seen).query["state"], "opened");

    let netrc = host
        .netrc("gitlab", c(), "https://gitlab.example/o/r.git")
        .await
        .unwrap();
    assert_eq!(
        (
            netrc.machine.as_str(),
            netrc.login.as_str(),
            netrc.password.as_str()
        ),
        ("gitlab.example", "oauth2", TOKEN)
    );

    let body = post_each_status(
        &host,
        "gitlab",
        c(),
        &seen,
        [
            (StatusState::Pending, "pending"),
            (StatusState::Running, "running"),
            (StatusState::Success, "success"),
            (StatusState::Failure, "failed"),
            (StatusState::Error, "failed"),
            (StatusState::Killed, "canceled"),
        ],
    )
    .await;
    assert_eq!(last(&seen).path, "/api/v4/projects/o%2Fr/statuses/abc123");
    assert_eq!(body["name"], "ci/woodpecker/push/build");
    assert_eq!(
        body["target_url"],
        "https://ci.example.com/repos/1/pipeline/2"
    );
}
