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

fn ids(page: &Value) -> Vec<String> {
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
        o["org_id"] == alice_org || o["id"] == alice_org
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
    let repo_id = bobs["data"]["data"]["object"]["id"].as_i64().unwrap();
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
    let removed = woodlark::modules::events::prune_once(&s.app_state)
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
