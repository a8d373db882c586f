//! Status at a glance: badges, CCTray, the user's feed and repository list, agent tasks.

use serde_json::{Value, json};
use woodlark::store::repos::{self, Perm};

use crate::pipelines::{push_files, step_of, wait_for};
use crate::util::TestServer;

/// Upstream's badge (3.17, its template and renderer) for a failed step `a` of the
/// workflow `woodpecker`.
const STEP_BADGE: &str = concat!(
    r##"<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="126" height="20">"##,
    r##"<linearGradient id="smooth" x2="0" y2="100%"><stop offset="0" stop-color="#bbb" stop-opacity=".1"/><stop offset="1" stop-opacity=".1"/></linearGradient>"##,
    r##"<mask id="round"><rect width="126" height="20" rx="3" fill="#fff"/></mask>"##,
    r##"<g mask="url(#round)"><rect width="86" height="20" fill="#555"/><rect x="86" width="40" height="20" fill="#e05d44"/><rect width="126" height="20" fill="url(#smooth)"/></g>"##,
    r##"<g fill="#fff" text-anchor="middle" font-family="DejaVu Sans,Verdana,Geneva,sans-serif" font-size="11">"##,
    r##"<text x="44" y="15" fill="#010101" fill-opacity=".3">woodpecker: a</text><text x="44" y="14">woodpecker: a</text>"##,
    r##"<text x="105" y="15" fill="#010101" fill-opacity=".3">failure</text><text x="105" y="14">failure</text></g></svg>"##
);

fn fixture(name: &str) -> String {
    let all: Value = serde_json::from_str(include_str!("fixtures/woodpecker-badges.json")).unwrap();
    all["svgs"][name].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn badges_cc_xml_feed_and_repo_list() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    let badge = format!("/api/badges/{id}/status.svg");

    // Private repository: the badge needs a token with pull permission.
    s.http.get(&badge, None).await.expect(401);
    s.http.get(&badge, Some(&p.bob)).await.expect(404);
    let none = s.http.get(&badge, Some(&p.alice)).await.expect(200);
    assert_eq!(none.header("content-type"), Some("image/svg+xml"));
    assert_eq!(
        none.text(),
        fixture("badgeNone"),
        "no pipeline yet: byte-identical to upstream"
    );
    s.http
        .get(&format!("/api/badges/{id}/cc.xml"), Some(&p.alice))
        .await
        .expect(404);

    s.http
        .patch(
            &format!("/api/repos/{id}"),
            Some(&p.alice),
            r#"{"visibility":"public"}"#,
        )
        .await
        .expect(200);
    push_files(
        &s,
        "alice/app",
        &[(
            ".woodpecker.yaml",
            "steps:\n  - name: a\n    image: sh\n    commands: [\"true\"]\n",
        )],
        "ok",
    )
    .await;
    wait_for(&s.http, &p.alice, id, 1, 60, |p| p["status"] == "success").await;
    assert_eq!(
        s.http.get(&badge, None).await.expect(200).text(),
        fixture("badgeSuccess")
    );
    assert_eq!(
        s.http
            .get("/api/badges/alice/app/status.svg", None)
            .await
            .expect(200)
            .text(),
        fixture("badgeSuccess")
    );
    // Another branch has no pipeline; events other than push do not count by default.
    assert_eq!(
        s.http
            .get(&format!("{badge}?branch=dev"), None)
            .await
            .expect(200)
            .text(),
        fixture("badgeNone")
    );
    assert_eq!(
        s.http
            .get(&format!("{badge}?events=manual"), None)
            .await
            .expect(200)
            .text(),
        fixture("badgeNone")
    );

    push_files(
        &s,
        "alice/app",
        &[(
            ".woodpecker.yaml",
            "steps:\n  - name: a\n    image: sh\n    commands: [\"exit 1\"]\n",
        )],
        "bad",
    )
    .await;
    wait_for(&s.http, &p.alice, id, 2, 60, |p| p["status"] == "failure").await;
    assert_eq!(
        s.http.get(&badge, None).await.expect(200).text(),
        fixture("badgeFailure")
    );
    // One workflow's badge, one step's, and one the pipeline does not have; the widths are
    // upstream's for these names (its renderer's output, to the byte, for the step's).
    let step_badge = s
        .http
        .get(&format!("{badge}?workflow=woodpecker&step=a"), None)
        .await
        .expect(200)
        .text();
    assert_eq!(step_badge, STEP_BADGE);
    let workflow_badge = s
        .http
        .get(&format!("{badge}?workflow=woodpecker"), None)
        .await
        .expect(200)
        .text();
    assert!(
        workflow_badge.contains(r#"<text x="37" y="14">woodpecker</text>"#)
            && workflow_badge.contains(">failure</text>"),
        "{workflow_badge}"
    );
    let missing = s
        .http
        .get(&format!("{badge}?workflow=nope&step=a"), None)
        .await
        .expect(200)
        .text();
    assert!(
        missing.contains(">nope</text>") && missing.contains(">none</text>"),
        "{missing}"
    );
    // A step without its workflow is ignored, as upstream does.
    assert_eq!(
        s.http
            .get(&format!("{badge}?step=a"), None)
            .await
            .expect(200)
            .text(),
        fixture("badgeFailure")
    );
    let bad = s
        .http
        .get(&format!("{badge}?events=push,pushh"), None)
        .await
        .expect(400);
    assert!(
        bad.text().contains("\"pushh\" is not an event"),
        "{}",
        bad.text()
    );

    let cc = s
        .http
        .get(&format!("/api/badges/{id}/cc.xml"), None)
        .await
        .expect(200);
    let xml = cc.text();
    assert!(
        xml.starts_with("<Projects><Project name=\"alice/app\""),
        "{xml}"
    );
    assert!(
        xml.contains("activity=\"Sleeping\"")
            && xml.contains("lastBuildStatus=\"Failure\"")
            && xml.contains("lastBuildLabel=\"2\""),
        "{xml}"
    );
    assert!(xml.contains(&format!("/repos/{id}/pipeline/2\"")), "{xml}");

    // The user's feed and repository list.
    s.http.get("/api/user/feed", None).await.expect(401);
    let feed = s
        .http
        .get("/api/user/feed", Some(&p.alice))
        .await
        .expect(200)
        .json();
    let numbers: Vec<i64> = feed
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["number"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, [2, 1], "newest first");
    assert_eq!(feed[0]["full_name"], "alice/app");
    assert!(
        s.http
            .get("/api/user/feed", Some(&p.bob))
            .await
            .json()
            .as_array()
            .unwrap()
            .is_empty()
    );
    // As upstream's feed: the repositories the user may push to or administer, not those
    // they may merely pull.
    let bob = s.http.get("/api/user", Some(&p.bob)).await.json()["id"]
        .as_i64()
        .unwrap();
    let feed_of_bob = |perm: Perm| {
        let (store, http, token) = (
            s.app_state.ci.store_for_tests().clone(),
            s.http.clone(),
            p.bob.clone(),
        );
        async move {
            store
                .write(move |c| repos::set_perm(c, bob, id, perm))
                .await
                .unwrap();
            http.get("/api/user/feed", Some(&token))
                .await
                .expect(200)
                .json()
        }
    };
    let pulling = feed_of_bob(Perm::pull_only()).await;
    assert!(pulling.as_array().unwrap().is_empty(), "{pulling}");
    let pushing = feed_of_bob(Perm {
        pull: true,
        push: true,
        ..Perm::default()
    })
    .await;
    assert_eq!(pushing.as_array().unwrap().len(), 2, "{pushing}");
    let repos = s
        .http
        .get("/api/user/repos", Some(&p.alice))
        .await
        .expect(200)
        .json();
    assert_eq!(repos[0]["full_name"], "alice/app");
    assert_eq!(repos[0]["last_pipeline"]["number"], 2);

    // `?latest=true`: each active repository the caller works on, by name, with its newest
    // pipeline; one without a pipeline is its id and name alone. As upstream's, a feed
    // entry leaves out what is empty or zero.
    let empty = s.git_repo(&p.admin, &p.alice, "alice/empty").await["id"]
        .as_i64()
        .unwrap();
    let latest = s
        .http
        .get("/api/user/feed?latest=true", Some(&p.alice))
        .await
        .expect(200)
        .json();
    let latest = latest.as_array().unwrap();
    assert_eq!(latest.len(), 2, "{latest:?}");
    assert_eq!(
        (
            &latest[0]["full_name"],
            &latest[0]["number"],
            &latest[0]["status"]
        ),
        (&json!("alice/app"), &json!(2), &json!("failure"))
    );
    assert_eq!(
        latest[1],
        json!({"repo_id": empty, "full_name": "alice/empty"})
    );
    for entry in latest.iter().chain(feed.as_array().unwrap()) {
        for (key, value) in entry.as_object().unwrap() {
            assert!(
                key == "repo_id" || (value != "" && value != 0),
                "{key} is empty in {entry}"
            );
        }
    }
    let of_bob = s
        .http
        .get("/api/user/feed?latest=1", Some(&p.bob))
        .await
        .expect(200)
        .json();
    assert_eq!(of_bob.as_array().unwrap().len(), 1, "{of_bob}");
    let bad = s
        .http
        .get("/api/user/feed?latest=yes", Some(&p.alice))
        .await
        .expect(400);
    assert!(
        bad.text().contains("invalid latest \"yes\""),
        "{}",
        bad.text()
    );
    s.http
        .delete(&format!("/api/repos/{empty}?remove=1"), Some(&p.alice))
        .await
        .expect(200);
    s.http
        .delete(&format!("/api/repos/{id}"), Some(&p.alice))
        .await
        .expect(200);
    assert!(
        s.http
            .get("/api/user/repos", Some(&p.alice))
            .await
            .json()
            .as_array()
            .unwrap()
            .is_empty()
    );
    let all = s
        .http
        .get("/api/user/repos?all=true", Some(&p.alice))
        .await
        .json();
    // The forge's two repositories (the removed one can be added again).
    assert_eq!(all.as_array().unwrap().len(), 2);
    let ok = s
        .http
        .post("/api/user/repos/refresh", Some(&p.alice), "")
        .await
        .expect(200)
        .json();
    assert_eq!(ok, "Ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_tasks_list_the_running_workflows() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/app").await;
    let id = repo["id"].as_i64().unwrap();
    push_files(
        &s,
        "alice/app",
        &[(
            ".woodpecker.yaml",
            "steps:\n  - name: slow\n    image: sh\n    commands: [\"sleep 30\"]\n",
        )],
        "slow",
    )
    .await;
    let running = wait_for(&s.http, &p.alice, id, 1, 60, |p| {
        p["workflows"].as_array().is_some_and(|w| !w.is_empty())
            && step_of(p, "slow")["state"] == "running"
    })
    .await;
    let agent = running["workflows"][0]["agent_id"].as_i64().unwrap();
    s.http
        .get(&format!("/api/agents/{agent}/tasks"), Some(&p.alice))
        .await
        .expect(403);
    let tasks = s
        .http
        .get(&format!("/api/agents/{agent}/tasks"), Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(tasks.as_array().unwrap().len(), 1);
    assert_eq!(
        tasks[0]["id"],
        running["workflows"][0]["id"].as_i64().unwrap().to_string()
    );
    assert_eq!(tasks[0]["labels"]["repo"], "alice/app");
    let local = s
        .http
        .get(&format!("/api/agents/{agent}"), Some(&p.admin))
        .await
        .expect(200)
        .json();
    assert_eq!(
        local["name"],
        crate::util::embedded_agent_name(s.dir.path()).as_str()
    );
    s.http
        .post(
            &format!("/api/repos/{id}/pipelines/1/cancel"),
            Some(&p.alice),
            "",
        )
        .await
        .expect(204);
    // The pipeline is `killed` at once; the task ends when the runner reports back.
    wait_for(&s.http, &p.alice, id, 1, 10, |p| {
        p["workflows"][0]["state"] == "killed"
    })
    .await;
    let tasks = s
        .http
        .get(&format!("/api/agents/{agent}/tasks"), Some(&p.admin))
        .await
        .json();
    assert!(tasks.as_array().unwrap().is_empty());
}
