//! Contract 0.2.0: the Gitea and Forgejo adapters' sign-in and user calls against a fake
//! Gitea `/api/v1` and `/login/oauth` on 127.0.0.1 (fields as Gitea's API answers them).

use serde_json::json;

use super::fake_http::{Seen, fake_server};
use super::forge_signin::{adapter_host, client, ctx, form_of, last, post_each_status};
use crate::types::*;

const TOKEN: &str = "gta_user1";

fn repo(id: u64, name: &str, archived: bool, perm: (bool, bool, bool)) -> serde_json::Value {
    json!({"id": id, "name": name, "full_name": format!("o/{name}"), "private": true,
        "archived": archived, "owner": {"id": 3, "login": "o", "username": "o",
            "avatar_url": "/avatars/o", "visibility": "public"},
        "html_url": format!("https://gitea.example/o/{name}"),
        "clone_url": format!("https://gitea.example/o/{name}.git"),
        "ssh_url": format!("git@gitea.example:o/{name}.git"), "default_branch": "main",
        "permissions": {"admin": perm.0, "push": perm.1, "pull": perm.2}})
}

/// A fake Gitea: code `good` and refresh token `r1` accepted; two pages of repositories at
/// `limit=2`; `octo` an admin member of `acme`, `dev` a plain member.
fn gitea(s: &Seen) -> (u16, String) {
    let authed = s.headers.get("authorization").map(String::as_str) == Some("token gta_user1");
    let page = s.query.get("page").map(String::as_str).unwrap_or("1");
    match (s.method.as_str(), s.path.as_str()) {
        ("POST", "/login/oauth/access_token") => {
            let f = form_of(s);
            let grant = f.get("grant_type").map(String::as_str);
            if grant == Some("authorization_code")
                && f.get("code").map(String::as_str) == Some("good")
            {
                (
                    200,
                    json!({"access_token": TOKEN, "token_type": "bearer", "expires_in": 3600,
                    "refresh_token": "r1"})
                    .to_string(),
                )
            } else if grant == Some("refresh_token")
                && f.get("refresh_token").map(String::as_str) == Some("r1")
            {
                (
                    200,
                    json!({"access_token": "gta_new", "token_type": "bearer", "expires_in": 3600,
                    "refresh_token": "r2"})
                    .to_string(),
                )
            } else {
                (
                    400,
                    json!({"error": "unauthorized_client",
                    "error_description": "client is not authorized"})
                    .to_string(),
                )
            }
        }
        _ if !authed => (401, json!({"message": "token is required"}).to_string()),
        ("GET", "/api/v1/user") => (
            200,
            json!({"id": 42, "login": "octo", "username": "octo",
            "full_name": "Octo", "email": "octo@example.com", "avatar_url": "/avatars/42"})
            .to_string(),
        ),
        ("GET", "/api/v1/user/repos") if page == "1" => (
            200,
            json!([
                repo(1, "r", false, (false, true, true)),
                repo(2, "old", true, (true, true, true)),
            ])
            .to_string(),
        ),
        ("GET", "/api/v1/user/repos") if page == "2" => (
            200,
            json!([repo(3, "docs", false, (false, false, true)),]).to_string(),
        ),
        ("GET", "/api/v1/user/repos") => (200, "[]".into()),
        ("GET", "/api/v1/repos/o/r") => (200, repo(1, "r", false, (true, true, true)).to_string()),
        ("GET", "/api/v1/user/orgs") => (
            200,
            json!([{"id": 9, "name": "acme", "username": "acme",
            "full_name": "Acme", "avatar_url": "https://gitea.example/avatars/acme"}])
            .to_string(),
        ),
        ("GET", "/api/v1/orgs/acme/members/octo" | "/api/v1/orgs/acme/members/dev") => {
            (204, String::new())
        }
        ("GET", "/api/v1/users/octo/orgs/acme/permissions") => (
            200,
            json!({"is_owner": false,
            "is_admin": true, "can_write": true, "can_read": true, "can_create_repository": true})
            .to_string(),
        ),
        ("GET", "/api/v1/users/dev/orgs/acme/permissions") => (
            200,
            json!({"is_owner": false,
            "is_admin": false, "can_write": false, "can_read": true})
            .to_string(),
        ),
        ("GET", "/api/v1/repos/o/r/pulls") => (
            200,
            json!([
                {"id": 100, "number": 7, "title": "Add a thing", "state": "open"},
                {"id": 101, "number": 5, "title": "Fix", "state": "open"},
            ])
            .to_string(),
        ),
        ("POST", "/api/v1/repos/o/r/statuses/abc123") => (201, "{}".into()),
        _ => (
            404,
            json!({"message": "The target couldn't be found.", "errors": []}).to_string(),
        ),
    }
}

async fn sign_in(name: &str, comp: &str) {
    let (origin, seen) = fake_server(gitea).await;
    let (_dir, host) = adapter_host(name, comp, &origin).await;
    assert_eq!(host.forge_contract(name).as_deref(), Some("0.2.0"));

    let url = host
        .authorize_url(name, client(&origin), "st/1")
        .await
        .unwrap();
    assert_eq!(
        url,
        format!(
            "{origin}/login/oauth/authorize?client_id=Iv1.abc&redirect_uri=https%3A%2F%2Fci.example.com%2Fauthorize&response_type=code&state=st%2F1"
        )
    );
    let mut public = client(&origin);
    public.oauth_host = "https://login.example.com".into();
    let url = host.authorize_url(name, public.clone(), "s").await.unwrap();
    assert!(
        url.starts_with("https://login.example.com/login/oauth/authorize?"),
        "{url}"
    );
    assert!(
        seen.lock().unwrap().is_empty(),
        "authorize-url makes no request"
    );

    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    // The token endpoint is on the forge, even with a public oauth host.
    let token = host.exchange_code(name, public, "good").await.unwrap();
    assert_eq!(
        (token.access_token.as_str(), token.refresh_token.as_str()),
        (TOKEN, "r1")
    );
    assert!(
        (now + 3600..=now + 3605).contains(&token.expiry),
        "{}",
        token.expiry
    );
    let req = last(&seen);
    assert_eq!(req.path, "/login/oauth/access_token");
    let form = form_of(&req);
    assert_eq!(form["client_id"], "Iv1.abc");
    assert_eq!(form["client_secret"], "shh");
    assert_eq!(form["redirect_uri"], "https://ci.example.com/authorize");

    let bad = host
        .exchange_code(name, client(&origin), "stale")
        .await
        .unwrap_err();
    assert_eq!(bad.kind(), Some(crate::ErrorKind::Denied), "{bad}");
    assert!(bad.to_string().contains("unauthorized_client"), "{bad}");

    let fresh = host
        .refresh_token(name, client(&origin), "r1")
        .await
        .unwrap();
    assert_eq!(
        (fresh.access_token.as_str(), fresh.refresh_token.as_str()),
        ("gta_new", "r2")
    );
    assert_eq!(form_of(&last(&seen))["grant_type"], "refresh_token");
    let refused = host
        .refresh_token(name, client(&origin), "r0")
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), Some(crate::ErrorKind::Denied));
}

async fn user_view(name: &str, comp: &str) {
    let (origin, seen) = fake_server(gitea).await;
    let (_dir, host) = adapter_host(name, comp, &origin).await;
    let c = || ctx(&origin, TOKEN);

    let user = host.current_user(name, c()).await.unwrap();
    assert_eq!(
        user,
        ForgeUser {
            remote_id: "42".into(),
            login: "octo".into(),
            email: "octo@example.com".into(),
            avatar_url: format!("{origin}/avatars/42"),
        }
    );
    assert_eq!(last(&seen).headers["authorization"], "token gta_user1");
    assert!(
        host.current_user(name, ctx(&origin, "wrong"))
            .await
            .is_err()
    );

    let page1 = host.user_repos(name, c(), 1, 2).await.unwrap();
    assert_eq!(
        page1.len(),
        1,
        "archived repositories are left out: {page1:?}"
    );
    assert_eq!(page1[0].repo.full_name, "o/r");
    assert_eq!(page1[0].repo.forge_remote_id, "1");
    assert_eq!(page1[0].repo.clone_url, "https://gitea.example/o/r.git");
    assert_eq!(
        page1[0].perm,
        Perm {
            pull: true,
            push: true,
            admin: false
        }
    );
    let q = &last(&seen).query;
    assert_eq!((q["limit"].as_str(), q["page"].as_str()), ("2", "1"));
    let page2 = host.user_repos(name, c(), 2, 2).await.unwrap();
    assert_eq!(page2.len(), 1);
    assert_eq!(page2[0].repo.full_name, "o/docs");
    assert_eq!(
        page2[0].perm,
        Perm {
            pull: true,
            push: false,
            admin: false
        }
    );
    assert!(host.user_repos(name, c(), 3, 500).await.unwrap().is_empty());
    assert_eq!(
        last(&seen).query["limit"],
        "50",
        "Gitea serves at most 50 a page"
    );

    let perm = host.repo_perm(name, c(), "o/r").await.unwrap();
    assert_eq!(
        perm,
        Perm {
            pull: true,
            push: true,
            admin: true
        }
    );
    let none = host.repo_perm(name, c(), "o/hidden").await.unwrap();
    assert_eq!(none, Perm::default(), "404 is no access");

    let orgs = host.user_orgs(name, c(), 1, 10).await.unwrap();
    assert_eq!(
        orgs,
        [Team {
            login: "acme".into(),
            avatar_url: "https://gitea.example/avatars/acme".into()
        }]
    );
    let admin = host
        .org_membership(name, c(), "acme", "octo")
        .await
        .unwrap();
    assert_eq!(
        admin,
        OrgMembership {
            member: true,
            admin: true
        }
    );
    let dev = host.org_membership(name, c(), "acme", "dev").await.unwrap();
    assert_eq!(
        dev,
        OrgMembership {
            member: true,
            admin: false
        }
    );
    let stranger = host
        .org_membership(name, c(), "acme", "nobody")
        .await
        .unwrap();
    assert_eq!(stranger, OrgMembership::default(), "404: not a member");
    assert_eq!(
        last(&seen).path,
        "/api/v1/orgs/acme/members/nobody",
        "no permissions lookup for a stranger"
    );

    let pulls = host.pull_requests(name, c(), "o/r", 1, 30).await.unwrap();
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
    let q = &last(&seen).query;
    assert_eq!((q["state"].as_str(), q["limit"].as_str()), ("open", "30"));
    assert!(
        host.pull_requests(name, c(), "o/empty", 1, 30)
            .await
            .unwrap()
            .is_empty()
    );

    let netrc = host
        .netrc(name, c(), "https://gitea.example:3000/o/r.git")
        .await
        .unwrap();
    assert_eq!(netrc.machine, "gitea.example");
    assert_eq!(netrc.password, TOKEN);
    assert!(!netrc.login.is_empty());

    // Upstream's mapping: killed is a failure on Gitea and Forgejo.
    let body = post_each_status(
        &host,
        name,
        c(),
        &seen,
        [
            (StatusState::Pending, "pending"),
            (StatusState::Running, "pending"),
            (StatusState::Success, "success"),
            (StatusState::Failure, "failure"),
            (StatusState::Error, "error"),
            (StatusState::Killed, "failure"),
        ],
    )
    .await;
    assert_eq!(last(&seen).path, "/api/v1/repos/o/r/statuses/abc123");
    assert_eq!(body["context"], "ci/woodpecker/push/build");
    assert_eq!(
        body["target_url"],
        "https://ci.example.com/repos/1/pipeline/2"
    );
    assert_eq!(body["description"], "Pipeline was canceled");
}

#[tokio::test]
async fn gitea_oauth_sign_in() {
    sign_in("gitea", "forge-gitea").await;
}

#[tokio::test]
async fn forgejo_oauth_sign_in() {
    sign_in("forgejo", "forge-forgejo").await;
}

#[tokio::test]
async fn gitea_user_repos_orgs_pulls_netrc_status() {
    user_view("gitea", "forge-gitea").await;
}

#[tokio::test]
async fn forgejo_user_repos_orgs_pulls_netrc_status() {
    user_view("forgejo", "forge-forgejo").await;
}
