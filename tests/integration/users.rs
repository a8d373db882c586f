use serde_json::json;

use crate::util::TestServer;

#[tokio::test]
async fn current_user_needs_a_valid_token() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    s.http.get("/api/user", None).await.expect(401);
    s.http
        .get("/api/user", Some("not-a-token"))
        .await
        .expect(401);
    let me = s
        .http
        .get("/api/user", Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(me["login"], "alice");
    assert_eq!(me["admin"], false);
    assert_eq!(me["admin_env"], false);
    for key in [
        "id",
        "forge_id",
        "forge_remote_id",
        "email",
        "avatar_url",
        "org_id",
    ] {
        assert!(me.get(key).is_some(), "missing {key}");
    }
    assert!(
        me.get("hash").is_none(),
        "the signing secret must never be serialised"
    );
    // Token via query string and via the session cookie, as upstream.
    s.http
        .get(&format!("/api/user?access_token={}", p.bob), None)
        .await
        .expect(200);
    let r = s
        .http
        .send(
            "GET",
            "/api/user",
            None,
            None,
            &[("cookie", &format!("user_sess={}", p.bob))],
        )
        .await
        .expect(200);
    assert_eq!(r.json()["login"], "bob");
}

#[tokio::test]
async fn a_token_signed_for_another_user_is_rejected() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    // Take alice's token and claim bob's id with it: the signature no longer matches.
    let parts: Vec<&str> = p.alice.split('.').collect();
    use base64::Engine;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let bob_id = s.http.get("/api/user", Some(&p.bob)).await.json()["id"].clone();
    let payload = b64.encode(json!({"type": "user", "user-id": bob_id.to_string()}).to_string());
    let forged = format!("{}.{}.{}", parts[0], payload, parts[2]);
    s.http.get("/api/user", Some(&forged)).await.expect(401);
}

#[tokio::test]
async fn token_endpoint_and_rotation() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    s.http.post("/api/user/token", None, "").await.expect(401);
    let r = s
        .http
        .post("/api/user/token", Some(&p.alice), "")
        .await
        .expect(200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    assert_eq!(r.text(), p.alice, "POST returns the current token");

    s.http.delete("/api/user/token", None).await.expect(401);
    let fresh = s
        .http
        .delete("/api/user/token", Some(&p.alice))
        .await
        .expect(200)
        .text();
    assert_ne!(fresh, p.alice);
    // The old token is revoked, the new one works, other users are unaffected.
    s.http.get("/api/user", Some(&p.alice)).await.expect(401);
    s.http.get("/api/user", Some(&fresh)).await.expect(200);
    s.http.get("/api/user", Some(&p.bob)).await.expect(200);
    s.http
        .delete("/api/user/token", Some(&p.alice))
        .await
        .expect(401);
}

#[tokio::test]
async fn admin_routes_auth_matrix() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let routes: &[(&str, &str, Option<&str>)] = &[
        ("GET", "/api/users", None),
        ("POST", "/api/users", Some(r#"{"login":"carol"}"#)),
        ("GET", "/api/users/alice", None),
        (
            "PATCH",
            "/api/users/alice",
            Some(r#"{"email":"a@example.com"}"#),
        ),
        ("DELETE", "/api/users/bob", None),
        ("GET", "/api/log-level", None),
        ("POST", "/api/log-level", Some(r#"{"log-level":"debug"}"#)),
    ];
    for (method, path, body) in routes {
        let body = body.map(str::as_bytes);
        let r = s.http.send(method, path, None, body, &[]).await;
        assert_eq!(r.status, 401, "anonymous {method} {path}");
        let r = s.http.send(method, path, Some(&p.alice), body, &[]).await;
        assert_eq!(r.status, 403, "user {method} {path}");
        let r = s.http.send(method, path, Some(&p.bob), body, &[]).await;
        assert_eq!(r.status, 403, "other user {method} {path}");
    }
    for (method, path, body) in routes {
        let r = s
            .http
            .send(method, path, Some(&p.admin), body.map(str::as_bytes), &[])
            .await;
        assert!(
            r.status.is_success(),
            "admin {method} {path}: {} {}",
            r.status,
            r.text()
        );
    }
}

#[tokio::test]
async fn create_get_list_update_delete() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let created = s
        .http
        .post(
            "/api/users",
            Some(&p.admin),
            r#"{"login":"carol","email":"carol@example.com","avatar_url":"http://a/c.png","id":999,"unknown":1}"#,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(created["login"], "carol");
    assert_eq!(created["email"], "carol@example.com");
    assert_ne!(created["id"], 999, "ids are assigned by the server");
    assert!(created["org_id"].as_i64().unwrap() > 0);

    let got = s
        .http
        .get("/api/users/carol", Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(got, created);
    s.http
        .get("/api/users/nobody", Some(&p.admin))
        .await
        .expect(404);
    s.http
        .get("/api/users/carol?forge_id=7", Some(&p.admin))
        .await
        .expect(404);
    s.http
        .get("/api/users/carol?forge_id=x", Some(&p.admin))
        .await
        .expect(400);

    let list = s
        .http
        .get("/api/users", Some(&p.admin))
        .await
        .expect(200)
        .json();
    let logins: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["login"].as_str().unwrap())
        .collect();
    assert_eq!(logins, ["alice", "bob", "carol", "root"]);
    let page = s
        .http
        .get("/api/users?page=2&perPage=3", Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(page.as_array().unwrap().len(), 1);
    assert_eq!(page[0]["login"], "root");

    let patched = s
        .http
        .patch("/api/users/carol", Some(&p.admin), r#"{"admin":true}"#)
        .await
        .expect(200)
        .json();
    assert_eq!(patched["admin"], true);
    assert_eq!(
        patched["email"], "carol@example.com",
        "fields left out are kept"
    );
    s.http
        .patch("/api/users/nobody", Some(&p.admin), r#"{"admin":true}"#)
        .await
        .expect(404);

    s.http
        .delete("/api/users/carol", Some(&p.admin))
        .await
        .expect(204);
    s.http
        .get("/api/users/carol", Some(&p.admin))
        .await
        .expect(404);
    s.http
        .delete("/api/users/carol", Some(&p.admin))
        .await
        .expect(404);
}

#[tokio::test]
async fn a_deleted_users_token_stops_working() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    s.http
        .delete("/api/users/alice", Some(&p.admin))
        .await
        .expect(204);
    s.http.get("/api/user", Some(&p.alice)).await.expect(401);
}

#[tokio::test]
async fn bad_input_is_400_or_409_and_writes_nothing() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let a = Some(p.admin.as_str());
    let cases: &[(&str, u16)] = &[
        ("", 400),
        ("{", 400),
        ("[]", 400),
        (r#"{"email":"x@y"}"#, 400),
        (r#"{"login":42}"#, 400),
        (r#"{"login":""}"#, 400),
        (r#"{"login":"has space"}"#, 400),
        (r#"{"login":"a/b"}"#, 400),
        (r#"{"login":"ok","admin":"yes"}"#, 400),
        (r#"{"login":"alice"}"#, 409),
    ];
    for (body, status) in cases {
        let r = s.http.post("/api/users", a, body).await;
        assert_eq!(r.status.as_u16(), *status, "body {body:?}: {}", r.text());
        assert!(!r.text().is_empty(), "error bodies say what is wrong");
    }
    let list = s.http.get("/api/users", a).await.json();
    assert_eq!(list.as_array().unwrap().len(), 3);
    s.http
        .patch("/api/users/alice", a, r#"{"admin":"no"}"#)
        .await
        .expect(400);
    s.http
        .patch("/api/users/alice", a, "not json")
        .await
        .expect(400);
}

#[tokio::test]
async fn env_admins_are_admins() {
    let s = TestServer::start().await;
    let token = s.user("envadmin", false).await;
    let me = s
        .http
        .get("/api/user", Some(&token))
        .await
        .expect(200)
        .json();
    assert_eq!(me["admin"], true);
    assert_eq!(me["admin_env"], true);
    s.http.get("/api/users", Some(&token)).await.expect(200);
}

#[tokio::test]
async fn user_changes_are_recorded_as_events_in_the_same_transaction() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let before = s
        .app_state
        .ci
        .reads
        .read(|c| woodlark::store::events::list_after(c, 0, 1000))
        .await
        .unwrap();
    let start = before.last().map(|e| e.seq).unwrap_or(0);

    s.http
        .post(
            "/api/users",
            Some(&p.admin),
            r#"{"login":"dave","email":"d@x"}"#,
        )
        .await
        .expect(200);
    s.http
        .patch(
            "/api/users/dave",
            Some(&p.admin),
            r#"{"email":"d@y","avatar_url":""}"#,
        )
        .await
        .expect(200);
    // A patch that changes nothing records nothing.
    s.http
        .patch("/api/users/dave", Some(&p.admin), r#"{"email":"d@y"}"#)
        .await
        .expect(200);
    s.http
        .delete("/api/users/dave", Some(&p.admin))
        .await
        .expect(204);
    // A failed request records nothing either.
    s.http
        .post("/api/users", Some(&p.admin), r#"{"login":"alice"}"#)
        .await
        .expect(409);

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
            "orgs.created",
            "users.created",
            "users.updated",
            "users.deleted",
            "orgs.deleted"
        ]
    );
    assert_eq!(events[1].object["login"], "dave");
    assert_eq!(events[1].object["email"], "d@x");
    assert_eq!(events[2].object["email"], "d@y");
    assert_eq!(events[2].previous, Some(json!({"email": "d@x"})));
    assert_eq!(events[3].object["email"], "d@y");
    assert!(events.iter().all(|e| e.object.get("hash").is_none()));
    assert!(events.windows(2).all(|w| w[0].id() < w[1].id()));
}
