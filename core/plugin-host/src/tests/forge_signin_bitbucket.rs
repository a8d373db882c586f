//! Contract 0.2.0: the Bitbucket Cloud adapter's sign-in and user calls against a fake
//! Bitbucket (`/site/oauth2` on the web root, the 2.0 API under `/2.0` via `api-url`) on
//! 127.0.0.1, with Bitbucket's paged `values` lists and fields.

use serde_json::json;

use super::fake_http::{Seen, fake_server};
use super::forge_signin::{adapter_host_with, client, ctx, form_of, last, post_each_status};
use crate::types::*;

const TOKEN: &str = "bb_user1";

fn repo(name: &str) -> serde_json::Value {
    json!({"type": "repository", "full_name": format!("ws/{name}"), "name": name,
        "uuid": format!("{{{name}-uuid}}"),
        "links": {"html": {"href": format!("https://bitbucket.org/ws/{name}")},
                  "avatar": {"href": "https://bytebucket.org/ravatar/x"}}})
}

/// A fake Bitbucket Cloud: client `Iv1.abc:shh` as Basic auth; code `good`, refresh token
/// `r1`; repository permissions on two pages; workspace `ws` members on two pages (`next`).
fn bitbucket(s: &Seen) -> (u16, String) {
    let authed = s.headers.get("authorization").map(String::as_str) == Some("Bearer bb_user1");
    let page = s.query.get("page").map(String::as_str).unwrap_or("1");
    match (s.method.as_str(), s.path.as_str()) {
        ("POST", "/site/oauth2/access_token") => {
            // base64("Iv1.abc:shh")
            if s.headers.get("authorization").map(String::as_str) != Some("Basic SXYxLmFiYzpzaGg=") {
                return (401, json!({"error": "invalid_client", "error_description": "Client credentials missing; this request needs to be authenticated with the OAuth client id and secret"}).to_string());
            }
            let f = form_of(s);
            let grant = f.get("grant_type").map(String::as_str);
            if grant == Some("authorization_code") && f.get("code").map(String::as_str) == Some("good") {
                (200, json!({"access_token": TOKEN, "scopes": "account repository", "token_type": "bearer",
                    "expires_in": 7200, "state": "authorization_code", "refresh_token": "r1"}).to_string())
            } else if grant == Some("refresh_token") && f.get("refresh_token").map(String::as_str) == Some("r1") {
                (200, json!({"access_token": "bb_new", "token_type": "bearer", "expires_in": 7200,
                    "state": "refresh_token", "refresh_token": "r1"}).to_string())
            } else {
                (400, json!({"error": "invalid_grant", "error_description": "Invalid refresh_token"}).to_string())
            }
        }
        _ if !authed => (401, json!({"type": "error", "error": {"message": "Access token expired."}}).to_string()),
        ("GET", "/2.0/user") => (200, json!({"type": "user", "uuid": "{u-1}", "username": "octo",
            "nickname": "octo", "display_name": "Octo", "account_id": "5f0",
            "links": {"avatar": {"href": "https://avatar-management.example/octo.png"}}}).to_string()),
        ("GET", "/2.0/user/emails") => (200, json!({"pagelen": 10, "page": 1, "size": 2, "values": [
            {"type": "email", "email": "old@example.com", "is_primary": false, "is_confirmed": true},
            {"type": "email", "email": "octo@example.com", "is_primary": true, "is_confirmed": true},
        ]}).to_string()),
        ("GET", "/2.0/user/permissions/repositories") if page == "1" => (200, json!({"pagelen": 2, "page": 1, "size": 3,
            "next": "https://api.bitbucket.org/2.0/user/permissions/repositories?pagelen=2&page=2",
            "values": [
                {"type": "repository_permission", "permission": "admin", "repository": repo("r")},
                {"type": "repository_permission", "permission": "write", "repository": repo("w")},
            ]}).to_string()),
        ("GET", "/2.0/user/permissions/repositories") => (200, json!({"pagelen": 2, "page": 2, "size": 3,
            "values": [{"type": "repository_permission", "permission": "read", "repository": repo("docs")}]}).to_string()),
        ("GET", "/2.0/user/workspaces/ws/permissions/repositories") => {
            let q = s.query.get("q").cloned().unwrap_or_default();
            let values = if q == "repository.full_name=\"ws/r\"" {
                json!([{"type": "repository_permission", "permission": "write", "repository": repo("r")}])
            } else {
                json!([])
            };
            (200, json!({"pagelen": 10, "page": 1, "values": values}).to_string())
        }
        ("GET", "/2.0/user/workspaces") => (200, json!({"pagelen": 10, "page": 1, "values": [
            {"type": "workspace_access", "administrator": true, "workspace": {"type": "workspace_base",
             "uuid": "{w-1}", "slug": "ws", "links": {"avatar": {"href": "https://bitbucket.org/workspaces/ws/avatar"}}}},
        ]}).to_string()),
        ("GET", "/2.0/workspaces/ws/permissions") if page == "1" => (200, json!({"pagelen": 100, "page": 1,
            "next": format!("http://{}/2.0/workspaces/ws/permissions?pagelen=100&page=2", s.headers["host"]),
            "values": [{"type": "workspace_membership", "permission": "member",
                        "user": {"nickname": "dev", "uuid": "{u-2}"}}]}).to_string()),
        ("GET", "/2.0/workspaces/ws/permissions") => (200, json!({"pagelen": 100, "page": 2, "values": [
            {"type": "workspace_membership", "permission": "owner", "user": {"nickname": "octo", "uuid": "{u-1}"}},
        ]}).to_string()),
        ("GET", "/2.0/repositories/ws/r/pullrequests") => (200, json!({"pagelen": 10, "page": 1, "values": [
            {"type": "pullrequest", "id": 4, "title": "Add a thing", "state": "OPEN"},
        ]}).to_string()),
        ("POST", "/2.0/repositories/o/r/commit/abc123/statuses/build") => (201, "{}".into()),
        _ => (404, json!({"type": "error", "error": {"message": "Resource not found"}}).to_string()),
    }
}

#[tokio::test]
async fn bitbucket_oauth_sign_in() {
    let (origin, seen) = fake_server(bitbucket).await;
    let api = format!("{origin}/2.0");
    let (_dir, host) = adapter_host_with(
        "bitbucket",
        "forge-bitbucket",
        &origin,
        &[("api-url", &api)],
    )
    .await;
    assert_eq!(host.forge_contract("bitbucket").as_deref(), Some("0.2.0"));

    let url = host
        .authorize_url("bitbucket", client(&origin), "st")
        .await
        .unwrap();
    assert_eq!(
        url,
        format!(
            "{origin}/site/oauth2/authorize?client_id=Iv1.abc&redirect_uri=https%3A%2F%2Fci.example.com%2Fauthorize&response_type=code&state=st"
        )
    );
    let mut cloud = client(&origin);
    cloud.forge_url = String::new();
    let url = host.authorize_url("bitbucket", cloud, "st").await.unwrap();
    assert!(
        url.starts_with("https://bitbucket.org/site/oauth2/authorize?"),
        "{url}"
    );

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let token = host
        .exchange_code("bitbucket", client(&origin), "good")
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
    assert_eq!(form["code"], "good");
    assert!(
        !form.contains_key("client_secret"),
        "the secret goes in the Basic header: {form:?}"
    );

    let mut wrong = client(&origin);
    wrong.client_secret = "nope".into();
    let bad = host
        .exchange_code("bitbucket", wrong, "good")
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), Some(crate::ErrorKind::Denied), "{bad}");
    assert!(bad.to_string().contains("invalid_client"), "{bad}");

    let fresh = host
        .refresh_token("bitbucket", client(&origin), "r1")
        .await
        .unwrap();
    assert_eq!(
        (fresh.access_token.as_str(), fresh.refresh_token.as_str()),
        ("bb_new", "r1")
    );
    assert_eq!(form_of(&last(&seen))["grant_type"], "refresh_token");
    let refused = host
        .refresh_token("bitbucket", client(&origin), "r0")
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), Some(crate::ErrorKind::Denied));
}

#[tokio::test]
async fn bitbucket_user_repos_orgs_pulls_netrc_status() {
    let (origin, seen) = fake_server(bitbucket).await;
    let api = format!("{origin}/2.0");
    let (_dir, host) = adapter_host_with(
        "bitbucket",
        "forge-bitbucket",
        &origin,
        &[("api-url", &api)],
    )
    .await;
    let c = || ctx("https://bitbucket.org", TOKEN);

    let user = host.current_user("bitbucket", c()).await.unwrap();
    assert_eq!(
        user,
        ForgeUser {
            remote_id: "{u-1}".into(),
            login: "octo".into(),
            email: "octo@example.com".into(),
            avatar_url: "https://avatar-management.example/octo.png".into(),
        }
    );

    let page1 = host.user_repos("bitbucket", c(), 1, 2).await.unwrap();
    let q = &last(&seen).query;
    assert_eq!((q["pagelen"].as_str(), q["page"].as_str()), ("2", "1"));
    assert_eq!(page1.len(), 2);
    assert_eq!(page1[0].repo.full_name, "ws/r");
    assert_eq!(page1[0].repo.forge_remote_id, "{r-uuid}");
    assert_eq!(page1[0].repo.clone_url, "https://bitbucket.org/ws/r.git");
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
    let page2 = host.user_repos("bitbucket", c(), 2, 2).await.unwrap();
    assert_eq!(page2[0].repo.full_name, "ws/docs");
    assert_eq!(
        page2[0].perm,
        Perm {
            pull: true,
            push: false,
            admin: false
        }
    );

    let perm = host.repo_perm("bitbucket", c(), "ws/r").await.unwrap();
    assert_eq!(
        perm,
        Perm {
            pull: true,
            push: true,
            admin: false
        }
    );
    let none = host.repo_perm("bitbucket", c(), "ws/hidden").await.unwrap();
    assert_eq!(none, Perm::default(), "not listed is no access");
    let none = host.repo_perm("bitbucket", c(), "other/r").await.unwrap();
    assert_eq!(none, Perm::default(), "404 is no access");

    let orgs = host.user_orgs("bitbucket", c(), 1, 10).await.unwrap();
    assert_eq!(
        orgs,
        [Team {
            login: "ws".into(),
            avatar_url: "https://bitbucket.org/workspaces/ws/avatar".into()
        }]
    );
    let owner = host
        .org_membership("bitbucket", c(), "ws", "octo")
        .await
        .unwrap();
    assert_eq!(
        owner,
        OrgMembership {
            member: true,
            admin: true
        }
    );
    assert_eq!(last(&seen).query["page"], "2", "followed `next`");
    let dev = host
        .org_membership("bitbucket", c(), "ws", "dev")
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
        .org_membership("bitbucket", c(), "ws", "nobody")
        .await
        .unwrap();
    assert_eq!(stranger, OrgMembership::default());

    let pulls = host
        .pull_requests("bitbucket", c(), "ws/r", 1, 100)
        .await
        .unwrap();
    assert_eq!(
        pulls,
        [PullRequestInfo {
            number: 4,
            title: "Add a thing".into()
        }]
    );
    let q = &last(&seen).query;
    assert_eq!((q["state"].as_str(), q["pagelen"].as_str()), ("OPEN", "50"));

    let netrc = host
        .netrc("bitbucket", c(), "https://bitbucket.org/ws/r.git")
        .await
        .unwrap();
    assert_eq!(
        (
            netrc.machine.as_str(),
            netrc.login.as_str(),
            netrc.password.as_str()
        ),
        ("bitbucket.org", "x-token-auth", TOKEN)
    );

    let body = post_each_status(
        &host,
        "bitbucket",
        c(),
        &seen,
        [
            (StatusState::Pending, "INPROGRESS"),
            (StatusState::Running, "INPROGRESS"),
            (StatusState::Success, "SUCCESSFUL"),
            (StatusState::Failure, "FAILED"),
            (StatusState::Error, "FAILED"),
            (StatusState::Killed, "STOPPED"),
        ],
    )
    .await;
    assert_eq!(
        last(&seen).path,
        "/2.0/repositories/o/r/commit/abc123/statuses/build"
    );
    assert_eq!(body["key"], "ci/woodpecker/push/build");
    assert_eq!(body["name"], "ci/woodpecker/push/build");
    assert_eq!(body["url"], "https://ci.example.com/repos/1/pipeline/2");
    // A push's (or pull request's) status names its branch, as upstream sends it.
    assert_eq!(body["refname"], "main");

    // A context longer than Bitbucket's 40-character key: shortened, unique, the name whole.
    let mut keys = Vec::new();
    for workflow in [
        "integration-tests-on-postgres",
        "integration-tests-on-postgres-16",
    ] {
        let context = format!("ci/woodpecker/pull_request/{workflow}");
        let status = CommitStatus {
            state: StatusState::Success,
            context: context.clone(),
            description: String::new(),
            target_url: "https://ci.example.com/repos/1/pipeline/2".into(),
            ..Default::default()
        };
        host.post_status("bitbucket", c(), "o/r", "abc123", status)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&last(&seen).body).unwrap();
        let key = body["key"].as_str().unwrap().to_string();
        assert!(key.chars().count() <= 40, "{key}");
        assert_eq!(body["name"], context.as_str());
        assert!(
            body.get("refname").is_none(),
            "no branch, no refname: {body}"
        );
        keys.push(key);
    }
    assert_ne!(keys[0], keys[1]);
}
