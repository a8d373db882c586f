//! Secrets, registries, agents and cron jobs: every operation with the auth matrix
//! (anonymous, owner / org admin, another user, instance admin), the JSON shapes of the
//! swagger definitions, bad input (400 / 422 / 409), the events each write records, and that
//! secret values never reach the database file, a response or a log line.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use woodlark::store::events::{self, StoredEvent};

use crate::util::{Http, Process, Resp, TestServer, cli_user_add, write_config};

// The property sets of the swagger definitions (`Secret` without `value`, which the server
// never returns, as upstream's `value,omitempty` after `Copy()`).
const SECRET: &[&str] = &[
    "id", "org_id", "repo_id", "name", "images", "events", "note",
];
const REGISTRY: &[&str] = &[
    "id", "org_id", "repo_id", "address", "username", "password", "readonly",
];
const AGENT: &[&str] = &[
    "id",
    "created",
    "updated",
    "name",
    "owner_id",
    "token",
    "last_contact",
    "last_work",
    "platform",
    "backend",
    "capacity",
    "version",
    "no_schedule",
    "custom_labels",
    "org_id",
];
const CRON: &[&str] = &[
    "id",
    "name",
    "repo_id",
    "creator_id",
    "next_exec",
    "schedule",
    "timezone",
    "created",
    "branch",
    "enabled",
    "variables",
];

#[track_caller]
fn assert_fields(v: &Value, expected: &[&str]) {
    let got: BTreeSet<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    let want: BTreeSet<&str> = expected.iter().copied().collect();
    assert_eq!(got, want, "fields of {v}");
}

/// The lists above are the swagger's (checked when the reference is beside the repository,
/// as in CI: `shared/` next to the clone).
#[test]
fn field_lists_match_the_swagger() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/reference/woodpecker-swagger.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!("{} not found; skipping", path.display());
        return;
    };
    let swagger: Value = serde_json::from_str(&text).unwrap();
    let props = |name: &str| -> BTreeSet<String> {
        swagger["definitions"][name]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    };
    let set = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    let mut secret = set(SECRET);
    secret.insert("value".into());
    assert_eq!(props("Secret"), secret);
    assert_eq!(props("Registry"), set(REGISTRY));
    assert_eq!(props("Agent"), set(AGENT));
    assert_eq!(props("Cron"), set(CRON));
}

async fn all_events(s: &TestServer) -> Vec<StoredEvent> {
    s.app_state
        .ci
        .reads
        .read(|c| events::list_after(c, 0, 100_000))
        .await
        .unwrap()
}

async fn events_of(s: &TestServer, record_type: &str) -> Vec<StoredEvent> {
    all_events(s)
        .await
        .into_iter()
        .filter(|e| e.record_type == record_type)
        .collect()
}

async fn org_id_of(s: &TestServer, token: &str) -> i64 {
    s.http
        .get("/api/user", Some(token))
        .await
        .expect(200)
        .json()["org_id"]
        .as_i64()
        .unwrap()
}

/// Checks the 401 / 403-or-404 / 200 matrix of one read-only request.
async fn read_matrix(http: &Http, path: &str, allowed: &[&str], refused: &[(&str, u16)]) {
    http.get(path, None).await.expect(401);
    for token in allowed {
        http.get(path, Some(token)).await.expect(200);
    }
    for (token, status) in refused {
        http.get(path, Some(token)).await.expect(*status);
    }
}

/// Writes must refuse (401 anonymous; `status` for `other`) before they look at the body.
async fn write_refused(http: &Http, method: &str, path: &str, other: &str, status: u16) {
    let body = br#"{"name":"x"}"#;
    http.send(method, path, None, Some(body), &[])
        .await
        .expect(401);
    http.send(method, path, Some(other), Some(body), &[])
        .await
        .expect(status);
}

// -------------------------------------------------------------------------------------------
// Secrets

/// Who else may read a scope's items: nobody (refused with the status), or every signed-in
/// user (the global scope, as upstream: without values or passwords).
#[derive(Clone, Copy)]
enum OtherReads {
    Refused(u16),
    Allowed,
}

impl OtherReads {
    /// The status `other` gets for a read of something that exists.
    fn status(self) -> u16 {
        match self {
            OtherReads::Refused(status) => status,
            OtherReads::Allowed => 200,
        }
    }
}

/// Every secret operation at one scope (`base` = `/api/secrets`, `/api/orgs/1/secrets`, …):
/// `owner` may manage it, `other` is refused writes with `refused` and reads as `reads`
/// says.
async fn secrets_at_scope(
    s: &TestServer,
    base: &str,
    owner: &str,
    other: &str,
    refused: u16,
    reads: OtherReads,
    expect_scope: (i64, i64),
) {
    let http = &s.http;
    // Auth matrix on every route, before anything exists.
    match reads {
        OtherReads::Refused(status) => read_matrix(http, base, &[owner], &[(other, status)]).await,
        OtherReads::Allowed => read_matrix(http, base, &[owner, other], &[]).await,
    }
    write_refused(http, "POST", base, other, refused).await;
    let one = format!("{base}/deploy_key");
    http.get(&one, None).await.expect(401);
    let absent = match reads {
        OtherReads::Refused(status) => status,
        OtherReads::Allowed => 404,
    };
    http.get(&one, Some(other)).await.expect(absent);
    write_refused(http, "PATCH", &one, other, refused).await;
    http.delete(&one, None).await.expect(401);
    http.delete(&one, Some(other)).await.expect(refused);

    assert_eq!(
        http.get(base, Some(owner)).await.expect(200).json(),
        json!([])
    );
    let created = http
        .post(
            base,
            Some(owner),
            r#"{"name":"deploy_key","value":"PLAINTEXT-one","events":["tag","push"],"images":["plugins/docker","localhost:5000/x/y:1.2"],"note":"for deploys"}"#,
        )
        .await
        .expect(200)
        .json();
    assert_fields(&created, SECRET);
    assert_eq!(created["name"], "deploy_key");
    assert_eq!(created["events"], json!(["push", "tag"]), "sorted");
    assert_eq!(
        created["images"],
        json!(["plugins/docker", "localhost:5000/x/y:1.2"])
    );
    assert_eq!(created["note"], "for deploys");
    assert_eq!(
        (
            created["org_id"].as_i64().unwrap(),
            created["repo_id"].as_i64().unwrap()
        ),
        expect_scope
    );

    // Bad input.
    let bad = |body: &'static str, status: u16| async move {
        let r = http.post(base, Some(owner), body).await;
        assert_eq!(r.status.as_u16(), status, "{body}: {}", r.text());
        r.text()
    };
    bad("{", 400).await;
    bad("", 400).await;
    bad(r#"{"name":"a","value":"v","events":"push"}"#, 400).await;
    bad(r#"{"name":1,"value":"v","events":["push"]}"#, 400).await;
    assert!(
        bad(r#"{"name":"bad-name","value":"v","events":["push"]}"#, 422)
            .await
            .contains("name")
    );
    bad(r#"{"name":"","value":"v","events":["push"]}"#, 422).await;
    assert!(
        bad(r#"{"name":"a","value":"v","events":[]}"#, 422)
            .await
            .contains("event")
    );
    bad(r#"{"name":"a","value":"v"}"#, 422).await;
    bad(r#"{"name":"a","value":"v","events":["pull"]}"#, 422).await;
    assert!(
        bad(r#"{"name":"a","value":"","events":["push"]}"#, 422)
            .await
            .contains("value")
    );
    bad(r#"{"name":"a","events":["push"]}"#, 422).await;
    assert!(
        bad(
            r#"{"name":"a","value":"v","events":["push"],"images":["bad image"]}"#,
            422
        )
        .await
        .contains("image")
    );
    bad(
        r#"{"name":"a","value":"v","events":["push"],"images":[""]}"#,
        422,
    )
    .await;
    bad(
        r#"{"name":"deploy_key","value":"v","events":["push"]}"#,
        409,
    )
    .await;

    // Get.
    let got = http.get(&one, Some(owner)).await.expect(200).json();
    assert_eq!(got, created);
    let seen = http.get(&one, Some(other)).await.expect(reads.status());
    if let OtherReads::Allowed = reads {
        assert_eq!(seen.json(), created, "the same record, without a value");
    }
    http.get(&format!("{base}/nope"), Some(owner))
        .await
        .expect(404);

    // Update: partial; events validated; value changes only when non-empty.
    let patched = http
        .patch(
            &one,
            Some(owner),
            r#"{"events":["cron","manual"],"value":""}"#,
        )
        .await
        .expect(200)
        .json();
    assert_fields(&patched, SECRET);
    assert_eq!(patched["events"], json!(["cron", "manual"]));
    assert_eq!(patched["images"], created["images"]);
    assert_eq!(patched["note"], "for deploys");
    http.patch(&one, Some(owner), r#"{"value":"PLAINTEXT-two"}"#)
        .await
        .expect(200);
    http.patch(&one, Some(owner), r#"{"events":[]}"#)
        .await
        .expect(422);
    http.patch(&one, Some(owner), r#"{"images":["a b"]}"#)
        .await
        .expect(422);
    http.patch(&one, Some(owner), r#"{"events":7}"#)
        .await
        .expect(400);
    http.patch(&one, Some(owner), "[").await.expect(400);
    http.patch(&format!("{base}/nope"), Some(owner), r#"{"note":"x"}"#)
        .await
        .expect(404);

    // Pagination: perPage / page, ordered by name.
    for name in ["a_1", "a_2"] {
        http.post(
            base,
            Some(owner),
            &json!({"name": name, "value": "PLAINTEXT-page", "events": ["push"]}).to_string(),
        )
        .await
        .expect(200);
    }
    let page1 = http
        .get(&format!("{base}?perPage=2"), Some(owner))
        .await
        .expect(200)
        .json();
    let names: Vec<&str> = page1
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a_1", "a_2"]);
    let page2 = http
        .get(&format!("{base}?perPage=2&page=2"), Some(owner))
        .await
        .expect(200)
        .json();
    assert_eq!(page2.as_array().unwrap().len(), 1);
    assert_fields(&page2[0], SECRET);
    assert_eq!(page2[0]["name"], "deploy_key");

    // Delete.
    for name in ["a_1", "a_2", "deploy_key"] {
        http.delete(&format!("{base}/{name}"), Some(owner))
            .await
            .expect(204);
    }
    http.delete(&one, Some(owner)).await.expect(404);
    assert_eq!(
        http.get(base, Some(owner)).await.expect(200).json(),
        json!([])
    );
}

/// The events of the `deploy_key` secret most recently walked through by
/// [`secrets_at_scope`]: created, updated (events), updated (value only), deleted.
async fn check_secret_events(s: &TestServer, owner_org: Option<i64>, repo: Option<i64>) {
    let evs = events_of(s, "secrets").await;
    let id = evs
        .iter()
        .rev()
        .find(|e| e.action == "created" && e.object["name"] == "deploy_key")
        .unwrap()
        .record_id
        .clone();
    let mine: Vec<&StoredEvent> = evs.iter().filter(|e| e.record_id == id).collect();
    let kinds: Vec<String> = mine.iter().map(|e| e.event_type()).collect();
    assert_eq!(
        kinds,
        [
            "secrets.created",
            "secrets.updated",
            "secrets.updated",
            "secrets.deleted"
        ]
    );
    assert_eq!(
        mine[1].previous,
        Some(json!({"events": ["push", "tag"]})),
        "previous_attributes of the events change"
    );
    assert_eq!(
        mine[2].previous, None,
        "a value-only change shows no attribute"
    );
    for e in &mine {
        assert_fields(&e.object, SECRET);
        assert!(!e.object.to_string().contains("PLAINTEXT"));
        assert_eq!(e.org_id, owner_org);
        assert_eq!(e.repo_id, repo);
    }
}

#[tokio::test]
async fn global_secrets() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    secrets_at_scope(
        &s,
        "/api/secrets",
        &p.admin,
        &p.alice,
        403,
        OtherReads::Allowed,
        (0, 0),
    )
    .await;
    s.http.get("/api/secrets", Some(&p.bob)).await.expect(200);
    check_secret_events(&s, None, None).await;
}

#[tokio::test]
async fn org_secrets() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let org = org_id_of(&s, &p.alice).await;
    let base = format!("/api/orgs/{org}/secrets");
    // The org's own admin (alice: her namespace); bob is refused with 403.
    secrets_at_scope(
        &s,
        &base,
        &p.alice,
        &p.bob,
        403,
        OtherReads::Refused(403),
        (org, 0),
    )
    .await;
    check_secret_events(&s, Some(org), None).await;
    // The instance admin may manage it too.
    s.http.get(&base, Some(&p.admin)).await.expect(200);
    s.http
        .post(
            &base,
            Some(&p.admin),
            r#"{"name":"by_admin","value":"PLAINTEXT-admin","events":["push"]}"#,
        )
        .await
        .expect(200);
    s.http
        .delete(&format!("{base}/by_admin"), Some(&p.admin))
        .await
        .expect(204);
    // Unknown org 404, bad id 400.
    s.http
        .get("/api/orgs/999999/secrets", Some(&p.alice))
        .await
        .expect(404);
    s.http
        .get("/api/orgs/abc/secrets", Some(&p.alice))
        .await
        .expect(400);
}

#[tokio::test]
async fn repo_secrets() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let id = repo["id"].as_i64().unwrap();
    let org = repo["org_id"].as_i64().unwrap();
    let base = format!("/api/repos/{id}/secrets");
    // Private repo: bob cannot see it at all (404, not 403).
    secrets_at_scope(
        &s,
        &base,
        &p.alice,
        &p.bob,
        404,
        OtherReads::Refused(404),
        (0, id),
    )
    .await;
    check_secret_events(&s, Some(org), Some(id)).await;
    s.http.get(&base, Some(&p.admin)).await.expect(200);
    s.http
        .get("/api/repos/999999/secrets", Some(&p.alice))
        .await
        .expect(404);
    s.http
        .get("/api/repos/x/secrets", Some(&p.alice))
        .await
        .expect(400);
    // Once the repo is public bob may read it, but he is no repo admin: 403.
    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.alice),
            r#"{"visibility":"public"}"#,
        )
        .await
        .expect(200);
    s.http.get(&base, Some(&p.bob)).await.expect(403);
    s.http.get(&base, None).await.expect(401);
}

#[tokio::test]
async fn secret_names_may_be_percent_encoded_in_paths() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    s.http
        .post(
            "/api/secrets",
            Some(&p.admin),
            r#"{"name":"my_key","value":"v","events":["push"]}"#,
        )
        .await
        .expect(200);
    s.http
        .get("/api/secrets/my%5Fkey", Some(&p.admin))
        .await
        .expect(200);
    s.http
        .get("/api/secrets/my%5", Some(&p.admin))
        .await
        .expect(400);
}

// -------------------------------------------------------------------------------------------
// Registries

async fn registries_at_scope(
    s: &TestServer,
    base: &str,
    owner: &str,
    other: &str,
    refused: u16,
    reads: OtherReads,
    expect_scope: (i64, i64),
) {
    let http = &s.http;
    match reads {
        OtherReads::Refused(status) => read_matrix(http, base, &[owner], &[(other, status)]).await,
        OtherReads::Allowed => read_matrix(http, base, &[owner, other], &[]).await,
    }
    write_refused(http, "POST", base, other, refused).await;
    let one = format!("{base}/docker.io");
    http.get(&one, None).await.expect(401);
    let absent = match reads {
        OtherReads::Refused(status) => status,
        OtherReads::Allowed => 404,
    };
    http.get(&one, Some(other)).await.expect(absent);
    write_refused(http, "PATCH", &one, other, refused).await;
    http.delete(&one, Some(other)).await.expect(refused);

    let created = http
        .post(
            base,
            Some(owner),
            r#"{"address":"docker.io","username":"bot","password":"REGPASS-one","readonly":true}"#,
        )
        .await
        .expect(200)
        .json();
    assert_fields(&created, REGISTRY);
    assert_eq!(created["address"], "docker.io");
    assert_eq!(created["username"], "bot");
    assert_eq!(created["password"], "", "never returned");
    assert_eq!(created["readonly"], false, "not writable through the API");
    let seen = http.get(&one, Some(other)).await.expect(reads.status());
    if let OtherReads::Allowed = reads {
        assert_eq!(seen.json(), created, "the same record, without a password");
    }
    assert_eq!(
        (
            created["org_id"].as_i64().unwrap(),
            created["repo_id"].as_i64().unwrap()
        ),
        expect_scope
    );
    for (body, status) in [
        ("{", 400),
        (r#"{"address":5}"#, 400),
        (r#"{"username":"u","password":"p"}"#, 422),
        (r#"{"address":"a b","username":"u","password":"p"}"#, 422),
        (r#"{"address":"ghcr.io","password":"p"}"#, 422),
        (r#"{"address":"ghcr.io","username":"u"}"#, 422),
        (r#"{"address":"ghcr.io","username":"u","password":""}"#, 422),
        (
            r#"{"address":"docker.io","username":"u","password":"p"}"#,
            409,
        ),
    ] {
        let r = http.post(base, Some(owner), body).await;
        assert_eq!(r.status.as_u16(), status, "{body}: {}", r.text());
    }
    let got = http.get(&one, Some(owner)).await.expect(200).json();
    assert_eq!(got, created);
    http.get(&format!("{base}/quay.io"), Some(owner))
        .await
        .expect(404);
    let list = http.get(base, Some(owner)).await.expect(200).json();
    assert_eq!(list, json!([created]));

    // Update: username; password only when non-empty; rename by address (409 onto another).
    let patched = http
        .patch(&one, Some(owner), r#"{"username":"robot","password":""}"#)
        .await
        .expect(200)
        .json();
    assert_eq!(patched["username"], "robot");
    assert_eq!(patched["password"], "");
    http.patch(&one, Some(owner), r#"{"password":"REGPASS-two"}"#)
        .await
        .expect(200);
    http.post(
        base,
        Some(owner),
        r#"{"address":"ghcr.io","username":"u","password":"REGPASS-three"}"#,
    )
    .await
    .expect(200);
    http.patch(&one, Some(owner), r#"{"address":"ghcr.io"}"#)
        .await
        .expect(409);
    http.patch(&one, Some(owner), r#"{"address":"a b"}"#)
        .await
        .expect(422);
    let renamed = http
        .patch(&one, Some(owner), r#"{"address":"localhost:5000"}"#)
        .await
        .expect(200)
        .json();
    assert_eq!(renamed["address"], "localhost:5000");
    http.get(&one, Some(owner)).await.expect(404);
    http.patch(&one, Some(owner), r#"{"username":"x"}"#)
        .await
        .expect(404);
    let page = http
        .get(&format!("{base}?perPage=1&page=2"), Some(owner))
        .await
        .expect(200)
        .json();
    assert_eq!(page[0]["address"], "localhost:5000");

    http.delete(&format!("{base}/localhost:5000"), Some(owner))
        .await
        .expect(204);
    http.delete(&format!("{base}/ghcr.io"), Some(owner))
        .await
        .expect(204);
    http.delete(&format!("{base}/ghcr.io"), Some(owner))
        .await
        .expect(404);

    // Events: created, updated ×3 (username; password only; address), deleted.
    let evs = events_of(s, "registries").await;
    let id = created["id"].to_string();
    let mine: Vec<&StoredEvent> = evs.iter().filter(|e| e.record_id == id).collect();
    let kinds: Vec<String> = mine.iter().map(|e| e.event_type()).collect();
    assert_eq!(
        kinds,
        [
            "registries.created",
            "registries.updated",
            "registries.updated",
            "registries.updated",
            "registries.deleted"
        ]
    );
    assert_eq!(mine[1].previous, Some(json!({"username": "bot"})));
    assert_eq!(mine[2].previous, None);
    assert_eq!(mine[3].previous, Some(json!({"address": "docker.io"})));
    for e in evs {
        assert_fields(&e.object, REGISTRY);
        assert_eq!(e.object["password"], "");
        assert!(!e.object.to_string().contains("REGPASS"));
    }
}

#[tokio::test]
async fn global_registries() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    registries_at_scope(
        &s,
        "/api/registries",
        &p.admin,
        &p.bob,
        403,
        OtherReads::Allowed,
        (0, 0),
    )
    .await;
    s.http
        .get("/api/registries", Some(&p.alice))
        .await
        .expect(200);
}

#[tokio::test]
async fn org_registries() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let org = org_id_of(&s, &p.alice).await;
    let base = format!("/api/orgs/{org}/registries");
    registries_at_scope(
        &s,
        &base,
        &p.alice,
        &p.bob,
        403,
        OtherReads::Refused(403),
        (org, 0),
    )
    .await;
    s.http.get(&base, Some(&p.admin)).await.expect(200);
}

#[tokio::test]
async fn repo_registries() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let id = repo["id"].as_i64().unwrap();
    let base = format!("/api/repos/{id}/registries");
    registries_at_scope(
        &s,
        &base,
        &p.alice,
        &p.bob,
        404,
        OtherReads::Refused(404),
        (0, id),
    )
    .await;
    s.http.get(&base, Some(&p.admin)).await.expect(200);
}

// -------------------------------------------------------------------------------------------
// Agents

#[tokio::test]
async fn global_agents() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let http = &s.http;
    let admin_id = http.get("/api/user", Some(&p.admin)).await.json()["id"].clone();

    read_matrix(
        http,
        "/api/agents",
        &[p.admin.as_str()],
        &[(p.alice.as_str(), 403), (p.bob.as_str(), 403)],
    )
    .await;
    write_refused(http, "POST", "/api/agents", &p.alice, 403).await;

    let created = http
        .post(
            "/api/agents",
            Some(&p.admin),
            r#"{"name":"runner-1","no_schedule":true,"platform":"ignored","token":"mine","org_id":5}"#,
        )
        .await
        .expect(200)
        .json();
    assert_fields(&created, AGENT);
    assert_eq!(created["name"], "runner-1");
    assert_eq!(created["no_schedule"], true);
    assert_eq!(created["org_id"], -1);
    assert_eq!(created["owner_id"], admin_id);
    assert_eq!(created["platform"], "");
    assert_eq!(created["custom_labels"], json!({}));
    let token = created["token"].as_str().unwrap().to_string();
    assert!(token.len() >= 40 && token != "mine", "a generated token");
    assert!(created["created"].as_i64().unwrap() > 1_600_000_000);
    let id = created["id"].as_i64().unwrap();
    let one = format!("/api/agents/{id}");

    // The token finds the agent (for the agent protocol).
    let t = token.clone();
    let found = s
        .app_state
        .ci
        .reads
        .read(move |c| woodlark::store::agents::by_token(c, &t))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.agent.id, id);

    for (body, status) in [
        ("{", 400),
        (r#"{"name":7}"#, 400),
        (r#"{}"#, 422),
        (r#"{"name":"  "}"#, 422),
    ] {
        let r = http.post("/api/agents", Some(&p.admin), body).await;
        assert_eq!(r.status.as_u16(), status, "{body}: {}", r.text());
    }

    // Get / tasks / update / delete with the matrix.
    read_matrix(http, &one, &[p.admin.as_str()], &[(p.alice.as_str(), 403)]).await;
    let got = http.get(&one, Some(&p.admin)).await.expect(200).json();
    assert_eq!(got["token"], token.as_str(), "shown again to its managers");
    let tasks = format!("{one}/tasks");
    read_matrix(http, &tasks, &[p.admin.as_str()], &[(p.bob.as_str(), 403)]).await;
    assert_eq!(http.get(&tasks, Some(&p.admin)).await.json(), json!([]));
    http.get("/api/agents/999999/tasks", Some(&p.admin))
        .await
        .expect(404);
    http.get("/api/agents/999999", Some(&p.admin))
        .await
        .expect(404);
    http.get("/api/agents/x", Some(&p.admin)).await.expect(400);

    write_refused(http, "PATCH", &one, &p.alice, 403).await;
    let patched = http
        .patch(&one, Some(&p.admin), r#"{"name":"runner-one"}"#)
        .await
        .expect(200)
        .json();
    assert_fields(&patched, AGENT);
    assert_eq!(patched["name"], "runner-one");
    assert_eq!(patched["no_schedule"], true, "absent fields stay");
    assert_eq!(patched["token"], token.as_str());
    http.patch(&one, Some(&p.admin), r#"{"name":""}"#)
        .await
        .expect(422);
    http.patch(&one, Some(&p.admin), r#"{"no_schedule":"yes"}"#)
        .await
        .expect(400);
    http.patch("/api/agents/999999", Some(&p.admin), r#"{"name":"x"}"#)
        .await
        .expect(404);

    let list = http
        .get("/api/agents", Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_fields(&list[0], AGENT);

    http.delete(&one, None).await.expect(401);
    http.delete(&one, Some(&p.bob)).await.expect(403);
    http.delete(&one, Some(&p.admin)).await.expect(204);
    http.delete(&one, Some(&p.admin)).await.expect(404);

    let evs = events_of(&s, "agents").await;
    let kinds: Vec<String> = evs.iter().map(|e| e.event_type()).collect();
    assert_eq!(
        kinds,
        ["agents.created", "agents.updated", "agents.deleted"]
    );
    assert_eq!(evs[1].previous.as_ref().unwrap()["name"], "runner-1");
    for e in &evs {
        assert_fields(&e.object, AGENT);
        assert_eq!(e.object["token"], "", "events never carry the token");
    }
    // Neither the token nor its hash's source is stored in clear.
    let db = db_bytes(&s);
    assert!(!contains(&db, token.as_bytes()));
}

#[tokio::test]
async fn org_agents() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let http = &s.http;
    let alice_org = org_id_of(&s, &p.alice).await;
    let bob_org = org_id_of(&s, &p.bob).await;
    let base = format!("/api/orgs/{alice_org}/agents");

    read_matrix(
        http,
        &base,
        &[p.alice.as_str(), p.admin.as_str()],
        &[(p.bob.as_str(), 403)],
    )
    .await;
    write_refused(http, "POST", &base, &p.bob, 403).await;
    let created = http
        .post(&base, Some(&p.alice), r#"{"name":"alice-runner"}"#)
        .await
        .expect(200)
        .json();
    assert_fields(&created, AGENT);
    assert_eq!(created["org_id"], alice_org);
    assert_eq!(created["no_schedule"], false);
    assert!(!created["token"].as_str().unwrap().is_empty());
    let id = created["id"].as_i64().unwrap();
    http.post(&base, Some(&p.alice), r#"{"name":""}"#)
        .await
        .expect(422);

    // Bob's own org agent, and a global one.
    let bobs = http
        .post(
            &format!("/api/orgs/{bob_org}/agents"),
            Some(&p.bob),
            r#"{"name":"bob-runner"}"#,
        )
        .await
        .expect(200)
        .json();
    http.post("/api/agents", Some(&p.admin), r#"{"name":"global"}"#)
        .await
        .expect(200);

    let list = http.get(&base, Some(&p.alice)).await.expect(200).json();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alice-runner"]);
    let all = http
        .get("/api/agents", Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(all.as_array().unwrap().len(), 3);

    let one = format!("{base}/{id}");
    write_refused(http, "PATCH", &one, &p.bob, 403).await;
    let patched = http
        .patch(&one, Some(&p.alice), r#"{"no_schedule":true}"#)
        .await
        .expect(200)
        .json();
    assert_eq!(patched["no_schedule"], true);
    assert_eq!(patched["name"], "alice-runner");
    http.patch(&one, Some(&p.admin), r#"{"name":"renamed"}"#)
        .await
        .expect(200);
    // An agent of another org (or a global one) is not found through this org.
    let foreign = format!("{base}/{}", bobs["id"]);
    http.patch(&foreign, Some(&p.alice), r#"{"name":"mine"}"#)
        .await
        .expect(404);
    http.delete(&foreign, Some(&p.alice)).await.expect(404);
    http.delete(&format!("{base}/999999"), Some(&p.alice))
        .await
        .expect(404);
    http.delete(&one, None).await.expect(401);
    http.delete(&one, Some(&p.bob)).await.expect(403);
    http.delete(&one, Some(&p.alice)).await.expect(204);
    http.delete(&one, Some(&p.alice)).await.expect(404);

    let evs = events_of(&s, "agents").await;
    assert!(
        evs.iter()
            .filter(|e| e.record_id == id.to_string())
            .all(|e| e.org_id == Some(alice_org))
    );
}

// -------------------------------------------------------------------------------------------
// Cron

#[tokio::test]
async fn crons() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let http = &s.http;
    let alice_id = http.get("/api/user", Some(&p.alice)).await.json()["id"].clone();
    let admin_id = http.get("/api/user", Some(&p.admin)).await.json()["id"].clone();
    let repo = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let repo_id = repo["id"].as_i64().unwrap();
    let base = format!("/api/repos/{repo_id}/cron");

    read_matrix(
        http,
        &base,
        &[p.alice.as_str(), p.admin.as_str()],
        &[(p.bob.as_str(), 404)],
    )
    .await;
    write_refused(http, "POST", &base, &p.bob, 404).await;
    http.get("/api/repos/999999/cron", Some(&p.alice))
        .await
        .expect(404);

    let before = woodlark::store::now_unix();
    let created = http
        .post(
            &base,
            Some(&p.alice),
            r#"{"name":"nightly","schedule":"0 3 * * *","timezone":"Europe/Berlin","variables":{"MODE":"full"},"next_exec":1,"creator_id":99}"#,
        )
        .await
        .expect(200)
        .json();
    assert_fields(&created, CRON);
    assert_eq!(created["name"], "nightly");
    assert_eq!(created["repo_id"], repo_id);
    assert_eq!(created["creator_id"], alice_id);
    assert_eq!(created["enabled"], true);
    assert_eq!(created["branch"], "");
    assert_eq!(created["timezone"], "Europe/Berlin");
    assert_eq!(created["variables"], json!({"MODE": "full"}));
    let next = created["next_exec"].as_i64().unwrap();
    assert!(next > before && next <= before + 86400 + 3600, "{next}");
    // 03:00 in Berlin is 01:00 or 02:00 UTC.
    let hour_utc = (next % 86400) / 3600;
    assert!([1, 2].contains(&hour_utc), "{hour_utc}");
    assert_eq!(next % 3600, 0);
    let id = created["id"].as_i64().unwrap();
    let one = format!("{base}/{id}");

    // Defaults, macros and seconds.
    let hourly = http
        .post(
            &base,
            Some(&p.alice),
            r#"{"name":"hourly","schedule":"@hourly","branch":"main","enabled":false}"#,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(hourly["timezone"], "UTC");
    assert_eq!(hourly["enabled"], false);
    assert_eq!(hourly["branch"], "main");
    assert_eq!(hourly["variables"], json!({}));
    assert_eq!(hourly["next_exec"].as_i64().unwrap() % 3600, 0);
    let every = http
        .post(
            &base,
            Some(&p.admin),
            r#"{"name":"often","schedule":"@every 90s"}"#,
        )
        .await
        .expect(200)
        .json();
    let after = every["next_exec"].as_i64().unwrap() - woodlark::store::now_unix();
    assert!((85..=90).contains(&after), "{after}");
    assert_eq!(every["creator_id"], admin_id);
    http.post(
        &base,
        Some(&p.alice),
        r#"{"name":"secs","schedule":"30 */5 * * * *"}"#,
    )
    .await
    .expect(200);

    for (body, status) in [
        ("{", 400),
        (r#"{"name":"x","schedule":5}"#, 400),
        (
            r#"{"name":"x","schedule":"@daily","variables":{"A":1}}"#,
            400,
        ),
        (r#"{"name":"x","schedule":"@daily","enabled":"yes"}"#, 400),
        (r#"{"schedule":"@daily"}"#, 422),
        (r#"{"name":"","schedule":"@daily"}"#, 422),
        (r#"{"name":"x"}"#, 422),
        (r#"{"name":"x","schedule":"not a cron"}"#, 422),
        (r#"{"name":"x","schedule":"61 * * * *"}"#, 422),
        (r#"{"name":"x","schedule":"* * * *"}"#, 422),
        (r#"{"name":"x","schedule":"@fortnightly"}"#, 422),
        (r#"{"name":"x","schedule":"@every 5"}"#, 422),
        (
            r#"{"name":"x","schedule":"@daily","timezone":"Mars/Olympus"}"#,
            422,
        ),
        (r#"{"name":"x","schedule":"@daily","branch":"a b"}"#, 422),
        (r#"{"name":"nightly","schedule":"@daily"}"#, 409),
    ] {
        let r = http.post(&base, Some(&p.alice), body).await;
        assert_eq!(r.status.as_u16(), status, "{body}: {}", r.text());
    }

    // Get with the matrix; ids.
    read_matrix(
        http,
        &one,
        &[p.alice.as_str(), p.admin.as_str()],
        &[(p.bob.as_str(), 404)],
    )
    .await;
    assert_eq!(http.get(&one, Some(&p.alice)).await.json(), created);
    http.get(&format!("{base}/999999"), Some(&p.alice))
        .await
        .expect(404);
    http.get(&format!("{base}/abc"), Some(&p.alice))
        .await
        .expect(400);
    // A cron of another repository is not found through this one.
    let other = s.git_repo(&p.admin, &p.alice, "alice/other").await;
    http.get(
        &format!("/api/repos/{}/cron/{id}", other["id"]),
        Some(&p.alice),
    )
    .await
    .expect(404);

    // Pagination, by name: hourly, nightly, often, secs.
    let page = http
        .get(&format!("{base}?perPage=3&page=2"), Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(page.as_array().unwrap().len(), 1);
    assert_eq!(page[0]["name"], "secs");

    // Update: the matrix, partial changes, next_exec recomputed on schedule / timezone.
    write_refused(http, "PATCH", &one, &p.bob, 404).await;
    let patched = http
        .patch(&one, Some(&p.admin), r#"{"branch":"dev","variables":{}}"#)
        .await
        .expect(200)
        .json();
    assert_fields(&patched, CRON);
    assert_eq!(patched["branch"], "dev");
    assert_eq!(patched["variables"], json!({}));
    assert_eq!(patched["schedule"], "0 3 * * *");
    assert_eq!(
        patched["next_exec"], created["next_exec"],
        "unchanged schedule"
    );
    assert_eq!(
        patched["creator_id"], admin_id,
        "as upstream: the last editor"
    );
    let moved = http
        .patch(&one, Some(&p.alice), r#"{"timezone":"UTC","name":""}"#)
        .await
        .expect(200)
        .json();
    assert_eq!(moved["name"], "nightly", "an empty name is ignored");
    assert_eq!(moved["timezone"], "UTC");
    assert_eq!((moved["next_exec"].as_i64().unwrap() % 86400) / 3600, 3);
    let rescheduled = http
        .patch(
            &one,
            Some(&p.alice),
            r#"{"schedule":"@weekly","enabled":false}"#,
        )
        .await
        .expect(200)
        .json();
    assert_eq!(rescheduled["schedule"], "@weekly");
    assert_eq!(rescheduled["enabled"], false);
    let weekly = rescheduled["next_exec"].as_i64().unwrap();
    // Sunday midnight UTC: 1970-01-04 was a Sunday.
    assert_eq!((weekly - 3 * 86400) % (7 * 86400), 0);
    for (body, status) in [
        (r#"{"schedule":"bogus"}"#, 422),
        (r#"{"timezone":"Nowhere/Else"}"#, 422),
        (r#"{"name":"hourly"}"#, 409),
        (r#"{"enabled":1}"#, 400),
        ("[", 400),
    ] {
        let r = http.patch(&one, Some(&p.alice), body).await;
        assert_eq!(r.status.as_u16(), status, "{body}: {}", r.text());
    }
    http.patch(&format!("{base}/999999"), Some(&p.alice), r#"{"name":"x"}"#)
        .await
        .expect(404);
    assert_eq!(http.get(&one, Some(&p.alice)).await.json(), rescheduled);

    // Due crons for the scheduler: enabled and past next_exec.
    let due = s
        .app_state
        .ci
        .reads
        .read(|c| woodlark::store::crons::due(c, i64::MAX, 100))
        .await
        .unwrap();
    let due_names: BTreeSet<String> = due.iter().map(|c| c.name.clone()).collect();
    assert_eq!(
        due_names,
        ["often", "secs"].iter().map(|s| s.to_string()).collect()
    );

    // Delete.
    http.delete(&one, None).await.expect(401);
    http.delete(&one, Some(&p.bob)).await.expect(404);
    http.delete(&one, Some(&p.alice)).await.expect(204);
    http.delete(&one, Some(&p.alice)).await.expect(404);
    http.delete(&format!("{base}/x"), Some(&p.alice))
        .await
        .expect(400);

    let evs = events_of(&s, "crons").await;
    let mine: Vec<&StoredEvent> = evs
        .iter()
        .filter(|e| e.record_id == id.to_string())
        .collect();
    let kinds: Vec<String> = mine.iter().map(|e| e.event_type()).collect();
    assert_eq!(
        kinds,
        [
            "crons.created",
            "crons.updated",
            "crons.updated",
            "crons.updated",
            "crons.deleted"
        ]
    );
    let prev = mine[1].previous.as_ref().unwrap();
    assert_eq!(prev["branch"], "");
    assert_eq!(prev["variables"], json!({"MODE": "full"}));
    assert_eq!(prev["creator_id"], alice_id);
    assert_eq!(
        mine[2].previous.as_ref().unwrap()["timezone"],
        "Europe/Berlin"
    );
    for e in &mine {
        assert_fields(&e.object, CRON);
        assert_eq!(e.repo_id, Some(repo_id));
    }
}

/// A repository has at most `pipeline.max_crons_per_repo` cron jobs (issue 45: 300 crons at
/// once a minute were accepted): one more is 409 naming the limit, and nothing is stored.
#[tokio::test]
async fn a_repository_has_at_most_the_configured_number_of_crons() {
    let s = TestServer::start_with_tables("[pipeline]\nmax_crons_per_repo = 3\n").await;
    let p = s.principals().await;
    let http = &s.http;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let base = format!("/api/repos/{}/cron", repo["id"]);
    let mut ids = Vec::new();
    for n in 0..3 {
        let body = json!({"name": format!("c{n}"), "schedule": "@hourly"}).to_string();
        ids.push(
            http.post(&base, Some(&p.alice), &body)
                .await
                .expect(200)
                .json()["id"]
                .clone(),
        );
    }
    let r = http
        .post(
            &base,
            Some(&p.alice),
            r#"{"name":"one-more","schedule":"@hourly"}"#,
        )
        .await
        .expect(409);
    assert!(
        r.text().contains("pipeline.max_crons_per_repo = 3"),
        "{}",
        r.text()
    );
    let listed = http.get(&base, Some(&p.alice)).await.expect(200).json();
    assert_eq!(listed.as_array().unwrap().len(), 3);
    // Another repository has its own allowance; removing one makes room again.
    let other = s.git_repo(&p.admin, &p.alice, "alice/other").await;
    let body = r#"{"name":"c0","schedule":"@hourly"}"#;
    http.post(
        &format!("/api/repos/{}/cron", other["id"]),
        Some(&p.alice),
        body,
    )
    .await
    .expect(200);
    http.delete(&format!("{base}/{}", ids[0]), Some(&p.alice))
        .await
        .expect(204);
    http.post(
        &base,
        Some(&p.alice),
        r#"{"name":"one-more","schedule":"@hourly"}"#,
    )
    .await
    .expect(200);
}

/// A cron job starts a pipeline each time it runs: schedules firing more often than
/// `pipeline.cron_min_interval_secs` (default 60) are refused with 400, nothing is stored or
/// changed, and the scheduler keeps crons stored before the rule to the minimum.
#[tokio::test]
async fn crons_run_no_more_often_than_the_minimum() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let http = &s.http;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let base = format!("/api/repos/{}/cron", repo["id"]);

    for (schedule, message) in [
        (
            "@every 1s",
            r#"schedule "@every 1s" runs every 1s; the minimum interval is 60s"#,
        ),
        (
            "* * * * * *",
            r#"schedule "* * * * * *" has runs only 1s apart; the minimum interval is 60s"#,
        ),
        (
            "*/30 * * * * *",
            r#"schedule "*/30 * * * * *" has runs only 30s apart; the minimum interval is 60s"#,
        ),
        (
            "CRON_TZ=Europe/Berlin @every 59s",
            r#"schedule "CRON_TZ=Europe/Berlin @every 59s" runs every 59s; the minimum interval is 60s"#,
        ),
    ] {
        let body = json!({"name": "flood", "schedule": schedule}).to_string();
        let r = http.post(&base, Some(&p.alice), &body).await;
        assert_eq!(r.status.as_u16(), 400, "{schedule}: {}", r.text());
        assert!(r.text().contains(message), "{schedule}: {}", r.text());
    }
    let listed = http.get(&base, Some(&p.alice)).await.expect(200).json();
    assert_eq!(listed, json!([]), "nothing stored");
    assert!(events_of(&s, "crons").await.is_empty());

    // Once a minute, with or without a seconds field, is fine.
    for (name, schedule) in [("minutely", "* * * * *"), ("fives", "0 */5 * * * *")] {
        let body = json!({"name": name, "schedule": schedule}).to_string();
        http.post(&base, Some(&p.alice), &body).await.expect(200);
    }
    let cron = http
        .post(
            &base,
            Some(&p.alice),
            r#"{"name":"hourly","schedule":"@every 1m"}"#,
        )
        .await
        .expect(200)
        .json();
    let one = format!("{base}/{}", cron["id"]);
    for body in [
        r#"{"schedule":"@every 1s"}"#,
        r#"{"schedule":"* * * * * *","name":"renamed","enabled":false}"#,
        r#"{"schedule":"0,30 * * * * *","timezone":"Europe/Berlin"}"#,
    ] {
        let r = http.patch(&one, Some(&p.alice), body).await;
        assert_eq!(r.status.as_u16(), 400, "{body}: {}", r.text());
        assert!(
            r.text().contains("the minimum interval is 60s"),
            "{body}: {}",
            r.text()
        );
    }
    assert_eq!(
        http.get(&one, Some(&p.alice)).await.expect(200).json(),
        cron,
        "nothing changed"
    );
    let updates = events_of(&s, "crons")
        .await
        .iter()
        .filter(|e| e.event_type() == "crons.updated")
        .count();
    assert_eq!(updates, 0);

    // A cron stored before the rule (straight into the store) runs no more often than the
    // minimum: the scheduler's next time is at least 60 s after the due one.
    let repo_id = repo["id"].as_i64().unwrap();
    let due = woodlark::store::now_unix() - 1;
    let old = s
        .app_state
        .ci
        .store_for_tests()
        .write(move |c| {
            woodlark::store::crons::create(
                c,
                &woodlark::store::crons::NewCron {
                    name: "legacy".into(),
                    repo_id,
                    creator_id: 1,
                    next_exec: due,
                    schedule: "@every 1s".into(),
                    timezone: "UTC".into(),
                    enabled: true,
                    ..Default::default()
                },
                u64::MAX,
            )
        })
        .await
        .unwrap();
    woodlark::ci::jobs::run_due_crons(&s.app_state.ci).await;
    let after = http
        .get(&format!("{base}/{}", old.id), Some(&p.alice))
        .await
        .expect(200)
        .json();
    let next = after["next_exec"].as_i64().unwrap();
    assert!(next >= due + 60, "next {next}, due {due}");
}

/// A lower minimum lets faster schedules through.
#[tokio::test]
async fn a_lower_cron_minimum_accepts_faster_schedules() {
    let s = TestServer::start_with_tables("[pipeline]\ncron_min_interval_secs = 1\n").await;
    let p = s.principals().await;
    let http = &s.http;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let base = format!("/api/repos/{}/cron", repo["id"]);
    let every = http
        .post(
            &base,
            Some(&p.alice),
            r#"{"name":"fast","schedule":"@every 2s"}"#,
        )
        .await
        .expect(200)
        .json();
    let one = format!("{base}/{}", every["id"]);
    http.patch(&one, Some(&p.alice), r#"{"schedule":"* * * * * *"}"#)
        .await
        .expect(200);
}

// -------------------------------------------------------------------------------------------
// Cascades

#[tokio::test]
async fn deleting_a_repo_or_org_removes_its_resources_with_events() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let http = &s.http;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/hello").await;
    let id = repo["id"].as_i64().unwrap();
    http.post(
        &format!("/api/repos/{id}/secrets"),
        Some(&p.alice),
        r#"{"name":"s","value":"v","events":["push"]}"#,
    )
    .await
    .expect(200);
    http.post(
        &format!("/api/repos/{id}/registries"),
        Some(&p.alice),
        r#"{"address":"docker.io","username":"u","password":"p"}"#,
    )
    .await
    .expect(200);
    http.post(
        &format!("/api/repos/{id}/cron"),
        Some(&p.alice),
        r#"{"name":"c","schedule":"@daily"}"#,
    )
    .await
    .expect(200);
    http.delete(&format!("/api/repos/{id}?remove=true"), Some(&p.alice))
        .await
        .expect(200);
    let evs = all_events(&s).await;
    for kind in ["secrets.deleted", "registries.deleted", "crons.deleted"] {
        let e = evs
            .iter()
            .find(|e| e.event_type() == kind)
            .unwrap_or_else(|| panic!("no {kind}"));
        assert_eq!(e.repo_id, Some(id));
    }
    let left: i64 = s
        .app_state
        .ci
        .reads
        .read(move |c| {
            c.query_row_for_tests(
                "SELECT (SELECT count(*) FROM secrets WHERE repo_id = ?1)
                      + (SELECT count(*) FROM registries WHERE repo_id = ?1)
                      + (SELECT count(*) FROM crons WHERE repo_id = ?1)",
                [id],
                |r| r.get(0),
            )
        })
        .await
        .unwrap();
    assert_eq!(left, 0);

    // An organisation (bob's namespace; no repositories) with a secret, a registry and an
    // agent: deleting it (instance admin) deletes them too.
    let org = org_id_of(&s, &p.bob).await;
    http.post(
        &format!("/api/orgs/{org}/secrets"),
        Some(&p.bob),
        r#"{"name":"s","value":"v","events":["push"]}"#,
    )
    .await
    .expect(200);
    http.post(
        &format!("/api/orgs/{org}/registries"),
        Some(&p.bob),
        r#"{"address":"docker.io","username":"u","password":"p"}"#,
    )
    .await
    .expect(200);
    http.post(
        &format!("/api/orgs/{org}/agents"),
        Some(&p.bob),
        r#"{"name":"a"}"#,
    )
    .await
    .expect(200);
    http.delete(&format!("/api/orgs/{org}"), Some(&p.admin))
        .await
        .expect(204);
    let evs = all_events(&s).await;
    for kind in ["secrets.deleted", "registries.deleted", "agents.deleted"] {
        assert!(
            evs.iter()
                .any(|e| e.event_type() == kind && e.org_id == Some(org)),
            "no {kind} for org {org}"
        );
    }
    let left: i64 = s
        .app_state
        .ci
        .reads
        .read(move |c| {
            c.query_row_for_tests(
                "SELECT (SELECT count(*) FROM secrets WHERE org_id = ?1)
                      + (SELECT count(*) FROM registries WHERE org_id = ?1)
                      + (SELECT count(*) FROM agents WHERE org_id = ?1)",
                [org],
                |r| r.get(0),
            )
        })
        .await
        .unwrap();
    assert_eq!(left, 0);
}

// -------------------------------------------------------------------------------------------
// Plaintext never leaves

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// What is at rest in the server's database, as bytes.
fn db_bytes(s: &TestServer) -> Vec<u8> {
    s.stored_bytes()
}

/// Runs the real binary at trace level, stores secrets and registry passwords at every scope,
/// reads everything back, and then looks for the plaintexts in every response, the database
/// file and its WAL, and the server's log.
#[tokio::test]
async fn plaintext_values_never_leave() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "log_level = \"trace\"");
    let out = cli_user_add(&config, "root", true);
    assert!(out.status.success());
    let admin = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let out = cli_user_add(&config, "carol", false);
    let carol = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let server = Process::start(&config);
    let http = Http::new(server.addr);
    let org = http.get("/api/user", Some(&carol)).await.expect(200).json()["org_id"]
        .as_i64()
        .unwrap();

    const SECRET_VALUE: &str = "PLAINTEXT-b7e1c4-secret-value";
    const SECRET_VALUE_2: &str = "PLAINTEXT-9d22aa-rotated-value";
    const PASSWORD: &str = "PLAINTEXT-5f0c3e-registry-password";
    let mut seen: Vec<Resp> = Vec::new();
    let scopes = [
        (
            "/api/secrets".to_string(),
            "/api/registries".to_string(),
            admin.as_str(),
        ),
        (
            format!("/api/orgs/{org}/secrets"),
            format!("/api/orgs/{org}/registries"),
            carol.as_str(),
        ),
    ];
    for (secrets, registries, token) in &scopes {
        let body = json!({"name": "api_key", "value": SECRET_VALUE, "events": ["push"]});
        seen.push(
            http.post(secrets, Some(token), &body.to_string())
                .await
                .expect(200),
        );
        seen.push(
            http.patch(
                &format!("{secrets}/api_key"),
                Some(token),
                &json!({"value": SECRET_VALUE_2}).to_string(),
            )
            .await
            .expect(200),
        );
        seen.push(http.get(secrets, Some(token)).await.expect(200));
        seen.push(
            http.get(&format!("{secrets}/api_key"), Some(token))
                .await
                .expect(200),
        );
        // A failing write must not echo the value either.
        let dup = json!({"name": "api_key", "value": SECRET_VALUE, "events": ["push"]});
        seen.push(
            http.post(secrets, Some(token), &dup.to_string())
                .await
                .expect(409),
        );
        let invalid = json!({"name": "bad name", "value": SECRET_VALUE, "events": ["push"]});
        seen.push(
            http.post(secrets, Some(token), &invalid.to_string())
                .await
                .expect(422),
        );
        let reg = json!({"address": "registry.example.com", "username": "u", "password": PASSWORD});
        seen.push(
            http.post(registries, Some(token), &reg.to_string())
                .await
                .expect(200),
        );
        seen.push(http.get(registries, Some(token)).await.expect(200));
        seen.push(
            http.get(&format!("{registries}/registry.example.com"), Some(token))
                .await
                .expect(200),
        );
        seen.push(
            http.patch(
                &format!("{registries}/registry.example.com"),
                Some(token),
                &json!({"password": PASSWORD}).to_string(),
            )
            .await
            .expect(200),
        );
    }
    for r in &seen {
        for plain in [SECRET_VALUE, SECRET_VALUE_2, PASSWORD] {
            assert!(
                !contains(&r.body, plain.as_bytes()),
                "response contains a plaintext: {}",
                r.text()
            );
        }
    }
    let db = crate::util::stored_bytes_of(dir.path());
    assert!(!db.is_empty());
    for plain in [SECRET_VALUE, SECRET_VALUE_2, PASSWORD] {
        assert!(!contains(&db, plain.as_bytes()), "{plain} in the database");
        // The common prefix shows the search itself works on these bytes.
    }
    assert!(contains(&db, b"api_key"), "the scan sees plain columns");
    let log = server.stderr();
    assert!(log.contains("secret created"), "the log is captured");
    for plain in [SECRET_VALUE, SECRET_VALUE_2, PASSWORD] {
        assert!(!log.contains(plain), "{plain} in the log");
    }
}

/// A registry's address is its key in the path, decoded once: a `/` and a `%` in it come
/// through as sent (`%2F`, `%25`), through the API and through the admin page's form.
#[tokio::test]
async fn a_registry_address_with_a_slash_and_a_percent_is_its_own_key() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    const ADDRESS: &str = "reg.example/50%off";
    let path = "/api/registries/reg.example%2F50%25off";
    s.http
        .post(
            "/api/registries",
            Some(&p.admin),
            &json!({"address": ADDRESS, "username": "u", "password": "pw"}).to_string(),
        )
        .await
        .expect(200);
    let got = s.http.get(path, Some(&p.admin)).await.expect(200).json();
    assert_eq!(got["address"], ADDRESS);
    let changed = s
        .http
        .patch(path, Some(&p.admin), r#"{"username":"v"}"#)
        .await
        .expect(200)
        .json();
    assert_eq!(changed["username"], "v");
    // Another address (the `%` read as an escape would have made this one, or a 400).
    s.http
        .get("/api/registries/reg.example%2F50off", Some(&p.admin))
        .await
        .expect(404);
    // The admin page's delete form names the address as typed.
    let mut root = crate::ui_settings::signed_in(&s, "root").await;
    crate::ui_settings::post_form(
        &mut root,
        "/admin",
        "/admin/registries/delete",
        &[("address", ADDRESS)],
    )
    .await
    .expect(303);
    s.http.get(path, Some(&p.admin)).await.expect(404);
}
