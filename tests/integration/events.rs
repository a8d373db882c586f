//! The events feed: Clever's wire format, cursor paging, filters, visibility, retention.

use serde_json::Value;

use crate::util::{Principals, TestServer};

async fn feed(s: &TestServer, token: &str, query: &str) -> Value {
    s.http
        .get(&format!("/events{query}"), Some(token))
        .await
        .expect(200)
        .json()
}

pub fn ids(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["data"]["id"].as_str().unwrap().to_string())
        .collect()
}

fn link(page: &Value, rel: &str) -> Option<String> {
    page["links"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["rel"] == rel)
        .map(|l| l["uri"].as_str().unwrap().to_string())
}

/// A server with some history: users, a forge, two repositories.
async fn with_history() -> (TestServer, Principals) {
    let s = TestServer::start().await;
    let p = s.principals().await;
    s.git_repo(&p.admin, &p.alice, "alice/one").await;
    s.git_repo(&p.admin, &p.bob, "bob/two").await;
    s.http
        .patch(
            "/api/users/alice",
            Some(&p.admin),
            r#"{"email":"alice@example.com"}"#,
        )
        .await
        .expect(200);
    (s, p)
}

#[tokio::test]
async fn wire_format_and_auth() {
    let (s, p) = with_history().await;
    let r = s.http.get("/events", None).await.expect(401);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    assert!(r.json()["message"].is_string());
    s.http.get("/events", Some("bogus")).await.expect(401);

    let page = feed(&s, &p.admin, "").await;
    let data = page["data"].as_array().unwrap();
    assert!(data.len() >= 10);
    let first = &data[0];
    assert!(first["uri"].as_str().unwrap().starts_with("/events/"));
    let event = &first["data"];
    assert_eq!(event["id"].as_str().unwrap().len(), 24);
    assert!(event["created"].as_str().unwrap().ends_with('Z'));
    assert_eq!(event["type"], "orgs.created");
    assert!(event["data"]["object"].is_object());
    // Ids strictly increase as strings.
    let all = ids(&page);
    assert!(all.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(link(&page, "self").as_deref(), Some("/events"));
    assert!(link(&page, "next").is_none() && link(&page, "prev").is_none());

    // An update carries the previous values of the changed fields only.
    let update = data
        .iter()
        .map(|e| &e["data"])
        .find(|e| e["type"] == "users.updated")
        .unwrap();
    assert_eq!(update["data"]["object"]["email"], "alice@example.com");
    // As in Clever's schemas, the record's id is a string (the CI API keeps numbers).
    let alice = s.http.get("/api/user", Some(&p.alice)).await.json();
    assert_eq!(update["data"]["object"]["id"], alice["id"].to_string());
    assert_eq!(
        update["data"]["previous_attributes"],
        serde_json::json!({"email": ""})
    );

    // GET /events/{id}.
    let one = s
        .http
        .get(&format!("/events/{}", all[3]), Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(one["data"]["id"], all[3].as_str());
    s.http
        .get(&format!("/events/{}", "f".repeat(24)), Some(&p.admin))
        .await
        .expect(404);
    let r = s
        .http
        .get("/events/not-an-id", Some(&p.admin))
        .await
        .expect(404);
    assert!(r.json()["message"].is_string());
    s.http
        .get(&format!("/events/{}", all[3]), None)
        .await
        .expect(401);
}

#[tokio::test]
async fn cursor_paging_both_ways_keeps_filters() {
    let (s, p) = with_history().await;
    let everything = ids(&feed(&s, &p.admin, "?limit=10000").await);
    let n = everything.len();

    // Forward, 3 at a time, following `next` links.
    let mut seen = Vec::new();
    let mut uri = "/events?limit=3".to_string();
    loop {
        let page = s.http.get(&uri, Some(&p.admin)).await.expect(200).json();
        let got = ids(&page);
        assert!(got.len() <= 3);
        seen.extend(got);
        match link(&page, "next") {
            Some(next) => {
                assert!(next.contains("limit=3"));
                uri = next;
            }
            None => break,
        }
    }
    assert_eq!(seen, everything);

    // Backward from the end, following `prev` links.
    let last = &everything[n - 1];
    let mut back = Vec::new();
    let mut uri = format!("/events?limit=4&ending_before={last}");
    loop {
        let page = s.http.get(&uri, Some(&p.admin)).await.expect(200).json();
        let got = ids(&page);
        assert!(
            got.windows(2).all(|w| w[0] < w[1]),
            "pages are oldest first"
        );
        back.splice(0..0, got);
        match link(&page, "prev") {
            Some(prev) => uri = prev,
            None => break,
        }
    }
    assert_eq!(back, everything[..n - 1].to_vec());

    // A window between two cursors, and CamelCase spellings.
    let page = feed(
        &s,
        &p.admin,
        &format!(
            "?StartingAfter={}&EndingBefore={}&Limit=100",
            everything[1], everything[5]
        ),
    )
    .await;
    assert_eq!(ids(&page), everything[2..5].to_vec());

    // record_type: repeatable and comma-separated; links keep it.
    let repos_only = feed(&s, &p.admin, "?record_type=repos").await;
    assert!(
        repos_only["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["data"]["type"].as_str().unwrap().starts_with("repos."))
    );
    assert_eq!(repos_only["data"].as_array().unwrap().len(), 2);
    let two = feed(&s, &p.admin, "?record_type=repos,forges&limit=1").await;
    assert_eq!(two["data"][0]["data"]["type"], "forges.created");
    let next = link(&two, "next").unwrap();
    assert!(
        next.contains("record_type=repos") && next.contains("record_type=forges"),
        "{next}"
    );
    let rep = feed(&s, &p.admin, "?RecordType=repos&record_type=forges").await;
    assert_eq!(rep["data"].as_array().unwrap().len(), 3);

    // school: by org id or by name.
    let alice_org = s.http.get("/api/user", Some(&p.alice)).await.json()["org_id"]
        .as_i64()
        .unwrap();
    let by_id = feed(&s, &p.admin, &format!("?school={alice_org}")).await;
    let by_name = feed(&s, &p.admin, "?school=alice").await;
    assert_eq!(ids(&by_id), ids(&by_name));
    assert!(!ids(&by_id).is_empty());
    assert!(by_id["data"].as_array().unwrap().iter().all(|e| {
        let o = &e["data"]["data"]["object"];
        o["org_id"] == alice_org || o["id"] == alice_org.to_string().as_str()
    }));
    assert!(ids(&feed(&s, &p.admin, "?school=nobody").await).is_empty());
}

#[tokio::test]
async fn bad_parameters() {
    let (s, p) = with_history().await;
    let a = Some(p.admin.as_str());
    for (q, status) in [
        ("?limit=abc", 400),
        ("?limit=-1", 400),
        ("?limit=0", 400),
        ("?limit=10001", 413),
        ("?limit=10000", 200),
        ("?starting_after=nope", 404),
        ("?ending_before=ffffffffffffffffffffffff", 404),
        ("?limit=1&Limit=2", 400),
    ] {
        let r = s.http.get(&format!("/events{q}"), a).await;
        assert_eq!(r.status.as_u16(), status, "{q}: {}", r.text());
        if status != 200 {
            assert!(r.json()["message"].as_str().unwrap().len() > 5, "{q}");
        }
    }
}

#[tokio::test]
async fn non_admins_see_only_what_they_may_read() {
    let (s, p) = with_history().await;
    let alice = feed(&s, &p.alice, "?limit=10000").await;
    let objects: Vec<&Value> = alice["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["data"]["data"]["object"])
        .collect();
    assert!(objects.iter().any(|o| o["full_name"] == "alice/one"));
    assert!(
        !objects.iter().any(|o| o["full_name"] == "bob/two"),
        "bob's private repo is hidden"
    );
    assert!(
        !objects.iter().any(|o| o["login"] == "bob"),
        "bob's user record is hidden"
    );
    assert!(
        !alice["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["data"]["type"] == "forges.created"),
        "instance-wide records are admin-only"
    );
    // An event alice cannot see is a 404 for her, not a 403.
    let everything = feed(&s, &p.admin, "?record_type=repos").await;
    let bobs = everything["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["data"]["data"]["object"]["full_name"] == "bob/two")
        .unwrap();
    let id = bobs["data"]["id"].as_str().unwrap();
    s.http
        .get(&format!("/events/{id}"), Some(&p.alice))
        .await
        .expect(404);
    s.http
        .get(&format!("/events/{id}"), Some(&p.bob))
        .await
        .expect(200);
    // Once bob's repository is public, alice sees its events too.
    let repo_id: i64 = bobs["data"]["data"]["object"]["id"]
        .as_str()
        .expect("feed ids are strings")
        .parse()
        .unwrap();
    s.http
        .patch(
            &format!("/api/repos/{repo_id}"),
            Some(&p.bob),
            r#"{"visibility":"public"}"#,
        )
        .await
        .expect(200);
    s.http
        .get(&format!("/events/{id}"), Some(&p.alice))
        .await
        .expect(200);
}

#[tokio::test]
async fn a_client_resumes_across_a_restart_without_gap_or_duplicate() {
    let (s, p) = with_history().await;
    let first = feed(&s, &p.admin, "?limit=10000").await;
    let mut seen = ids(&first);
    let last = seen.last().unwrap().clone();

    let dir = s.stop().await;
    let s = TestServer::start_in(dir, "").await;
    // Changes made after the restart.
    s.http
        .post("/api/users", Some(&p.admin), r#"{"login":"carol"}"#)
        .await
        .expect(200);
    s.http
        .delete("/api/users/carol", Some(&p.admin))
        .await
        .expect(204);

    let resumed = feed(&s, &p.admin, &format!("?starting_after={last}&limit=10000")).await;
    let new = ids(&resumed);
    let types: Vec<&str> = resumed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["data"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "orgs.created",
            "users.created",
            "users.deleted",
            "orgs.deleted"
        ]
    );
    seen.extend(new);
    let all = ids(&feed(&s, &p.admin, "?limit=10000").await);
    assert_eq!(seen, all, "no gap, no duplicate");
}

#[tokio::test]
async fn retention_removes_old_events_and_cursors_say_so() {
    let s = TestServer::start_with_tables("[events]\nmax_events = 3\nprune_interval_secs = 3600\n")
        .await;
    let p = s.principals().await;
    let before = ids(&feed(&s, &p.admin, "?limit=10000").await);
    assert_eq!(before.len(), 6);
    let removed = woodlark::retention::prune_events(
        s.app_state.ci.store_for_tests(),
        &s.app_state.config.events,
    )
    .await
    .unwrap();
    assert_eq!(removed, 3);
    let after = ids(&feed(&s, &p.admin, "?limit=10000").await);
    assert_eq!(after, before[3..].to_vec());
    let r = s
        .http
        .get(
            &format!("/events?starting_after={}", before[0]),
            Some(&p.admin),
        )
        .await
        .expect(404);
    assert!(r.json()["message"].as_str().unwrap().contains("retention"));
    s.http
        .get(&format!("/events/{}", before[0]), Some(&p.admin))
        .await
        .expect(404);
    // The cursor right at the removal point still pages correctly.
    let page = feed(&s, &p.admin, &format!("?starting_after={}", before[3])).await;
    assert_eq!(ids(&page), before[4..].to_vec());
}

/// Events since `after`, as (type, object, previous_attributes).
async fn events_since(s: &TestServer, token: &str, after: &str) -> Vec<(String, Value, Value)> {
    let q = if after.is_empty() {
        "?limit=10000".to_string()
    } else {
        format!("?limit=10000&starting_after={after}")
    };
    let page = feed(s, token, &q).await;
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let e = &e["data"];
            (
                e["type"].as_str().unwrap().to_string(),
                e["data"]["object"].clone(),
                e["data"]
                    .get("previous_attributes")
                    .cloned()
                    .unwrap_or(Value::Null),
            )
        })
        .collect()
}

fn last_id(page: &Value) -> String {
    ids(page).last().cloned().unwrap_or_default()
}

/// Runs `op`, then asserts the exact event types it produced and returns them.
/// A record's id in the feed (a string, as in Clever's schemas) as the CI API's number.
fn object_id(object: &Value) -> i64 {
    object["id"]
        .as_str()
        .expect("feed ids are strings")
        .parse()
        .unwrap()
}

macro_rules! expect_events {
    ($s:expr, $token:expr, $op:expr, [$($ty:expr),* $(,)?]) => {{
        let before = last_id(&feed($s, $token, "?limit=10000").await);
        $op;
        let got = events_since($s, $token, &before).await;
        let types: Vec<&str> = got.iter().map(|(t, _, _)| t.as_str()).collect();
        let want: Vec<&str> = vec![$($ty),*];
        assert_eq!(types, want, "events of {}", stringify!($op));
        got
    }};
}

#[tokio::test]
async fn every_mutating_operation_records_exactly_its_events() {
    let s = TestServer::start().await;
    let p = s.principals().await;
    let a = p.admin.as_str();
    let h = &s.http;

    // Users.
    let ev = expect_events!(
        &s,
        a,
        h.post("/api/users", Some(a), r#"{"login":"carol","email":"c@x"}"#)
            .await
            .expect(200),
        ["orgs.created", "users.created"]
    );
    assert_eq!(ev[1].1["login"], "carol");
    let ev = expect_events!(
        &s,
        a,
        h.patch(
            "/api/users/carol",
            Some(a),
            r#"{"email":"c@y","admin":true}"#
        )
        .await
        .expect(200),
        ["users.updated"]
    );
    assert_eq!(ev[0].2, serde_json::json!({"email": "c@x", "admin": false}));
    expect_events!(
        &s,
        a,
        h.patch("/api/users/carol", Some(a), r#"{"email":"c@y"}"#)
            .await
            .expect(200),
        []
    );
    expect_events!(
        &s,
        a,
        h.delete("/api/user/token", Some(&p.bob)).await.expect(200),
        []
    );
    expect_events!(
        &s,
        a,
        h.delete("/api/users/carol", Some(a)).await.expect(204),
        ["users.deleted", "orgs.deleted"]
    );

    // Forges.
    let url = format!("file://{}", s.forge_dir().display());
    let body = serde_json::json!({"type": "git", "url": url}).to_string();
    let ev = expect_events!(
        &s,
        a,
        h.post("/api/forges", Some(a), &body).await.expect(200),
        ["forges.created"]
    );
    assert!(
        ev[0].1.get("webhook_secret").is_none(),
        "no secret in events"
    );
    let forge = object_id(&ev[0].1);
    let ev = expect_events!(
        &s,
        a,
        h.patch(
            &format!("/api/forges/{forge}"),
            Some(a),
            r#"{"skip_verify":true}"#
        )
        .await
        .expect(200),
        ["forges.updated"]
    );
    assert_eq!(ev[0].2, serde_json::json!({"skip_verify": false}));

    // Repositories: activation creates the team org too.
    s.init_git_repo("team/app");
    let ev = expect_events!(
        &s,
        a,
        h.post(
            &format!("/api/repos?forge_remote_id=team/app&forge_id={forge}"),
            Some(a),
            ""
        )
        .await
        .expect(200),
        ["orgs.created", "repos.created"]
    );
    let repo = object_id(&ev[1].1);
    let org = object_id(&ev[0].1);
    let ev = expect_events!(
        &s,
        a,
        h.patch(
            &format!("/api/repos/{repo}"),
            Some(a),
            r#"{"timeout":30,"allow_deploy":true}"#
        )
        .await
        .expect(200),
        ["repos.updated"]
    );
    assert_eq!(
        ev[0].2,
        serde_json::json!({"timeout": 60, "allow_deploy": false})
    );

    // Secrets at three scopes: never a value.
    for (scope, path) in [
        ("global", "/api/secrets".to_string()),
        ("org", format!("/api/orgs/{org}/secrets")),
        ("repo", format!("/api/repos/{repo}/secrets")),
    ] {
        let ev = expect_events!(
            &s,
            a,
            h.post(
                &path,
                Some(a),
                r#"{"name":"token","value":"s3cr3t-value","events":["push"]}"#
            )
            .await
            .expect(200),
            ["secrets.created"]
        );
        assert!(!ev[0].1.to_string().contains("s3cr3t-value"), "{scope}");
        let ev = expect_events!(
            &s,
            a,
            h.patch(
                &format!("{path}/token"),
                Some(a),
                r#"{"events":["push","tag"]}"#
            )
            .await
            .expect(200),
            ["secrets.updated"]
        );
        assert_eq!(ev[0].2, serde_json::json!({"events": ["push"]}), "{scope}");
        expect_events!(
            &s,
            a,
            h.delete(&format!("{path}/token"), Some(a))
                .await
                .expect(204),
            ["secrets.deleted"]
        );
    }
    // Registries.
    let path = format!("/api/repos/{repo}/registries");
    let ev = expect_events!(
        &s,
        a,
        h.post(
            &path,
            Some(a),
            r#"{"address":"registry.example.com","username":"u","password":"pw-value"}"#
        )
        .await
        .expect(200),
        ["registries.created"]
    );
    assert!(!ev[0].1.to_string().contains("pw-value"));
    let ev = expect_events!(
        &s,
        a,
        h.patch(
            &format!("{path}/registry.example.com"),
            Some(a),
            r#"{"username":"v"}"#
        )
        .await
        .expect(200),
        ["registries.updated"]
    );
    assert_eq!(ev[0].2, serde_json::json!({"username": "u"}));
    expect_events!(
        &s,
        a,
        h.delete(&format!("{path}/registry.example.com"), Some(a))
            .await
            .expect(204),
        ["registries.deleted"]
    );
    // Agents.
    let ev = expect_events!(
        &s,
        a,
        h.post("/api/agents", Some(a), r#"{"name":"a1"}"#)
            .await
            .expect(200),
        ["agents.created"]
    );
    let agent = object_id(&ev[0].1);
    assert_eq!(ev[0].1["token"], "", "agent tokens are not recorded");
    let ev = expect_events!(
        &s,
        a,
        h.patch(
            &format!("/api/agents/{agent}"),
            Some(a),
            r#"{"no_schedule":true}"#
        )
        .await
        .expect(200),
        ["agents.updated"]
    );
    assert_eq!(ev[0].2["no_schedule"], false);
    expect_events!(
        &s,
        a,
        h.delete(&format!("/api/agents/{agent}"), Some(a))
            .await
            .expect(204),
        ["agents.deleted"]
    );
    // Cron.
    let ev = expect_events!(
        &s,
        a,
        h.post(
            &format!("/api/repos/{repo}/cron"),
            Some(a),
            r#"{"name":"nightly","schedule":"0 3 * * *"}"#
        )
        .await
        .expect(200),
        ["crons.created"]
    );
    let cron = object_id(&ev[0].1);
    let ev = expect_events!(
        &s,
        a,
        h.patch(
            &format!("/api/repos/{repo}/cron/{cron}"),
            Some(a),
            r#"{"enabled":false}"#
        )
        .await
        .expect(200),
        ["crons.updated"]
    );
    assert_eq!(ev[0].2["enabled"], true);
    expect_events!(
        &s,
        a,
        h.delete(&format!("/api/repos/{repo}/cron/{cron}"), Some(a))
            .await
            .expect(204),
        ["crons.deleted"]
    );

    // Pipelines (no runner: it stays pending), then cancel and delete.
    let ev = expect_events!(
        &s,
        a,
        crate::pipelines::push_files(
            &s,
            "team/app",
            &[(
                ".woodpecker.yaml",
                "steps:\n  - name: a\n    image: sh\n    commands: [\"true\"]\n"
            )],
            "ci"
        )
        .await,
        [
            "pipelines.created",
            "workflows.created",
            "steps.created",
            "steps.created"
        ]
    );
    assert_eq!(ev[0].1["status"], "pending");
    assert_eq!(ev[2].1["name"], "clone");
    let ev = expect_events!(
        &s,
        a,
        h.post(
            &format!("/api/repos/{repo}/pipelines/1/cancel"),
            Some(a),
            ""
        )
        .await
        .expect(204),
        [
            "steps.updated",
            "steps.updated",
            "workflows.updated",
            "pipelines.updated"
        ]
    );
    assert_eq!(ev[3].1["status"], "canceled");
    assert_eq!(ev[3].2["status"], "pending");
    assert_eq!(ev[2].2["state"], "pending");
    expect_events!(
        &s,
        a,
        h.delete(&format!("/api/repos/{repo}/pipelines/1"), Some(a))
            .await
            .expect(204),
        [
            "steps.deleted",
            "steps.deleted",
            "workflows.deleted",
            "pipelines.deleted"
        ]
    );

    // Deactivate, delete the repository, the org and the forge.
    let ev = expect_events!(
        &s,
        a,
        h.delete(&format!("/api/repos/{repo}"), Some(a))
            .await
            .expect(200),
        ["repos.updated"]
    );
    assert_eq!(ev[0].2, serde_json::json!({"active": true}));
    expect_events!(
        &s,
        a,
        h.delete(&format!("/api/repos/{repo}?remove=true"), Some(a))
            .await
            .expect(200),
        ["repos.deleted"]
    );
    expect_events!(
        &s,
        a,
        h.delete(&format!("/api/orgs/{org}"), Some(a))
            .await
            .expect(204),
        ["orgs.deleted"]
    );
    expect_events!(
        &s,
        a,
        h.delete(&format!("/api/forges/{forge}"), Some(a))
            .await
            .expect(204),
        ["forges.deleted"]
    );
    // Participation keys record `participation_keys.*` the same way (tests/integration/participation.rs).
}
