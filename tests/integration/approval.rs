//! Approval, written as the attack: a pull request from a fork must not run with the base
//! repository's secrets before someone with push access approves it.
//!
//! One server serves a forge of every plugin type with pull requests (each behind a fake API
//! answering the repository and its config), and signed deliveries made from the recorded
//! payloads, edited into fork and same-repository pull requests. The git forge (pushes only)
//! has its own test. Upstream's rule: `none` holds nothing, `forks` fork pull requests,
//! `pull_requests` every pull request, `all_events` every forge event; cron and manual runs
//! never wait, nor does anything a login in `approval_allowed_users` sends.

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::pipelines::{finished, push_files, step_of, wait_for};
use crate::plugins::{fake_service, plugins_table};
use crate::util::{Http, TestServer, first_party_plugins, with_runner};

const SECRET: &str = "basetokenvalue";
/// [`SECRET`] as the step prints it (rot13), so log masking cannot hide a leak.
const SECRET_PRINTED: &str = "onfrgbxrainyhr";
const CONFIG: &str = "skip_clone: true\nsteps:\n  - name: leak\n    image: sh\n    environment:\n      TOKEN: {from_secret: deploy_token}\n    commands:\n      - echo \"leak=$$(echo $${TOKEN} | tr a-z n-za-m)\"\n";

fn fixture(name: &str) -> Value {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../plugin-host/src/tests/fixtures"
    );
    let text = std::fs::read_to_string(format!("{dir}/{name}")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// How a forge's deliveries are authenticated.
#[derive(Clone, Copy)]
enum Signing {
    /// Hex HMAC-SHA256 of the body in `header`, after `prefix`.
    Hmac(&'static str, &'static str),
    /// The webhook secret itself in `header` (GitLab).
    Token(&'static str),
}

/// One plugin forge type and how to make its deliveries.
struct ForgeType {
    kind: &'static str,
    /// The repository as `POST /repos?forge_remote_id=` names it.
    full_name: &'static str,
    /// The repository resource on the forge's API.
    repo_path: &'static str,
    /// The adapter reads its API root from `api-url` (else from the forge URL).
    api_url_config: bool,
    pr_fixture: &'static str,
    /// The repository object of a pull-request payload (served as the API's answer).
    repo_of: fn(&Value) -> Value,
    /// Makes a pull-request payload's head repository a fork of its base, or the base.
    set_fork: fn(&mut Value, bool),
    /// A push to the pull request's base repository.
    push: fn(&Value) -> Value,
    pr_headers: &'static [(&'static str, &'static str)],
    push_headers: &'static [(&'static str, &'static str)],
    signing: Signing,
}

fn forge_types() -> Vec<ForgeType> {
    let gitea_fork = |v: &mut Value, fork: bool| {
        let id = if fork { 141 } else { 140 };
        v["pull_request"]["head"]["repo_id"] = json!(id);
        v["pull_request"]["head"]["repo"]["id"] = json!(id);
    };
    let gitea_push = |pr: &Value| {
        let mut v = fixture("gitea-push.json");
        v["repository"] = pr["repository"].clone();
        v
    };
    vec![
        ForgeType {
            kind: "github",
            full_name: "octocat/hello-world",
            repo_path: "/repos/octocat/hello-world",
            api_url_config: true,
            pr_fixture: "github-pull-request.json",
            repo_of: |v| v["repository"].clone(),
            set_fork: |v, fork| {
                let mut head = v["pull_request"]["base"]["repo"].clone();
                if fork {
                    head["id"] = json!(186853003);
                    head["full_name"] = json!("mallory/hello-world");
                }
                v["pull_request"]["head"]["repo"] = head;
            },
            push: |pr| {
                let mut v = fixture("github-push.json");
                v["repository"] = pr["repository"].clone();
                v
            },
            pr_headers: &[("x-github-event", "pull_request")],
            push_headers: &[("x-github-event", "push")],
            signing: Signing::Hmac("x-hub-signature-256", "sha256="),
        },
        ForgeType {
            kind: "gitea",
            full_name: "gitea/webhooks",
            repo_path: "/api/v1/repos/gitea/webhooks",
            api_url_config: false,
            pr_fixture: "gitea-pull-request.json",
            repo_of: |v| v["repository"].clone(),
            set_fork: gitea_fork,
            push: gitea_push,
            pr_headers: &[("x-gitea-event", "pull_request")],
            push_headers: &[("x-gitea-event", "push")],
            signing: Signing::Hmac("x-gitea-signature", ""),
        },
        ForgeType {
            kind: "forgejo",
            full_name: "gitea/webhooks",
            repo_path: "/api/v1/repos/gitea/webhooks",
            api_url_config: false,
            pr_fixture: "gitea-pull-request.json",
            repo_of: |v| v["repository"].clone(),
            set_fork: gitea_fork,
            push: gitea_push,
            pr_headers: &[("x-forgejo-event", "pull_request")],
            push_headers: &[("x-forgejo-event", "push")],
            signing: Signing::Hmac("x-forgejo-signature", ""),
        },
        ForgeType {
            kind: "gitlab",
            full_name: "gitlabhq/gitlab-test",
            repo_path: "/api/v4/projects/gitlabhq%2Fgitlab-test",
            api_url_config: false,
            pr_fixture: "gitlab-merge-request.json",
            repo_of: |v| v["project"].clone(),
            set_fork: |v, fork| {
                let target = v["object_attributes"]["target_project_id"].clone();
                v["object_attributes"]["source_project_id"] = if fork { json!(14) } else { target };
            },
            push: |pr| {
                let mut v = fixture("gitlab-push.json");
                v["project"] = pr["project"].clone();
                v["project_id"] = pr["project"]["id"].clone();
                v
            },
            pr_headers: &[("x-gitlab-event", "Merge Request Hook")],
            push_headers: &[("x-gitlab-event", "Push Hook")],
            signing: Signing::Token("x-gitlab-token"),
        },
        ForgeType {
            kind: "bitbucket",
            full_name: "acme/widget",
            repo_path: "/repositories/acme/widget",
            api_url_config: true,
            pr_fixture: "bitbucket-pr-created.json",
            repo_of: |v| v["repository"].clone(),
            set_fork: |v, fork| {
                let mut source = v["pullrequest"]["destination"]["repository"].clone();
                if fork {
                    source["uuid"] = json!("{0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6}");
                    source["full_name"] = json!("mallory/widget");
                }
                v["pullrequest"]["source"]["repository"] = source;
            },
            push: |pr| {
                let mut v = fixture("bitbucket-push.json");
                v["repository"] = pr["repository"].clone();
                v
            },
            pr_headers: &[("x-event-key", "pullrequest:created")],
            push_headers: &[("x-event-key", "repo:push")],
            signing: Signing::Hmac("x-hub-signature", "sha256="),
        },
        ForgeType {
            kind: "bitbucket-dc",
            full_name: "ACME/widget",
            repo_path: "/rest/api/1.0/projects/ACME/repos/widget",
            api_url_config: false,
            pr_fixture: "bitbucket-dc-pr-opened.json",
            repo_of: |v| v["pullRequest"]["toRef"]["repository"].clone(),
            set_fork: |v, fork| {
                let mut from = v["pullRequest"]["toRef"]["repository"].clone();
                if fork {
                    from["id"] = json!(85);
                }
                v["pullRequest"]["fromRef"]["repository"] = from;
            },
            push: |pr| {
                let mut v = fixture("bitbucket-dc-refs-changed.json");
                v["repository"] = pr["pullRequest"]["toRef"]["repository"].clone();
                v
            },
            pr_headers: &[("x-event-key", "pr:opened"), ("x-request-id", "1")],
            push_headers: &[("x-event-key", "repo:refs_changed"), ("x-request-id", "2")],
            signing: Signing::Hmac("x-hub-signature", "sha256="),
        },
    ]
}

/// A fake forge API: the repository resource at `repo_path`, [`CONFIG`] as
/// `.woodpecker.yaml` at any commit, 404 for everything else (webhooks, folders).
async fn fake_forge_api(repo_path: &'static str, repo: Value) -> std::net::SocketAddr {
    let repo = repo.to_string();
    fake_service(move |r| {
        Some(if r.method == "GET" && r.path == repo_path {
            (200, repo.clone())
        } else if r.method == "GET" && r.path.contains(".woodpecker.yaml") {
            (200, CONFIG.to_string())
        } else {
            (404, r#"{"message":"Not Found"}"#.to_string())
        })
    })
    .await
}

/// Every log line of every step of pipeline `number`.
async fn all_log_lines(http: &Http, token: &str, repo: i64, number: i64) -> String {
    let p = http
        .get(
            &format!("/api/repos/{repo}/pipelines/{number}"),
            Some(token),
        )
        .await
        .expect(200)
        .json();
    let mut out = String::new();
    for wf in p["workflows"].as_array().into_iter().flatten() {
        for step in wf["children"].as_array().into_iter().flatten() {
            let r = http
                .get(
                    &format!("/api/repos/{repo}/logs/{number}/{}", step["id"]),
                    Some(token),
                )
                .await;
            if r.status == 404 {
                continue;
            }
            for e in r.expect(200).json().as_array().into_iter().flatten() {
                use base64::Engine;
                let data = e["data"].as_str().unwrap_or("");
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .unwrap();
                out.push_str(&String::from_utf8_lossy(&bytes));
                out.push('\n');
            }
        }
    }
    out
}

/// A forge of one type, its activated repository and what signs its deliveries.
struct Setup<'a> {
    s: &'a TestServer,
    admin: &'a str,
    t: &'a ForgeType,
    forge: i64,
    repo: i64,
    secret: String,
}

impl Setup<'_> {
    async fn mode(&self, mode: &str, allowed: &[&str]) {
        let body = json!({"require_approval": mode, "approval_allowed_users": allowed});
        let r = self
            .s
            .http
            .patch(
                &format!("/api/repos/{}", self.repo),
                Some(self.admin),
                &body.to_string(),
            )
            .await
            .expect(200)
            .json();
        assert_eq!(r["require_approval"], mode);
    }

    /// Posts `payload` signed as the forge signs it; the created pipeline.
    async fn deliver(&self, payload: &Value, headers: &[(&str, &str)]) -> Value {
        // Every call is a delivery of its own: a forge's delivery id is never reused, and
        // neither is its body (a real event's payload differs at least in its times). The
        // server answers a repeated id or body with the pipeline it made.
        static DELIVERIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = DELIVERIES
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_string();
        let mut payload = payload.clone();
        payload["test_delivery"] = json!(id);
        let body = payload.to_string();
        let (name, value) = match self.t.signing {
            Signing::Hmac(header, prefix) => {
                let mut mac = Hmac::<Sha256>::new_from_slice(self.secret.as_bytes()).unwrap();
                mac.update(body.as_bytes());
                let hex: String = mac
                    .finalize()
                    .into_bytes()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect();
                (header, format!("{prefix}{hex}"))
            }
            Signing::Token(header) => (header, self.secret.clone()),
        };
        let mut all: Vec<(&str, &str)> = headers
            .iter()
            .map(|&(k, v)| {
                if k == "x-request-id" {
                    (k, id.as_str())
                } else {
                    (k, v)
                }
            })
            .collect();
        all.push((name, value.as_str()));
        let r = self
            .s
            .http
            .send(
                "POST",
                &format!("/api/hook?forge={}", self.forge),
                None,
                Some(body.as_bytes()),
                &all,
            )
            .await;
        assert_eq!(r.status, 200, "{}: {}", self.t.kind, r.text());
        let p = r.json();
        assert!(p["number"].is_i64(), "{}: no pipeline: {p}", self.t.kind);
        p
    }

    async fn pr(&self, fork: bool) -> Value {
        let mut payload = fixture(self.t.pr_fixture);
        (self.t.set_fork)(&mut payload, fork);
        let p = self.deliver(&payload, self.t.pr_headers).await;
        assert_eq!(p["event"], "pull_request", "{}: {p}", self.t.kind);
        // Upstream omits `from_fork` when false.
        assert_eq!(
            p["from_fork"].as_bool().unwrap_or(false),
            fork,
            "{}: {p}",
            self.t.kind
        );
        p
    }

    async fn push(&self) -> Value {
        let payload = (self.t.push)(&fixture(self.t.pr_fixture));
        let p = self.deliver(&payload, self.t.push_headers).await;
        assert_eq!(p["event"], "push", "{}: {p}", self.t.kind);
        p
    }

    async fn get(&self, number: i64) -> Value {
        self.s
            .http
            .get(
                &format!("/api/repos/{}/pipelines/{number}", self.repo),
                Some(self.admin),
            )
            .await
            .expect(200)
            .json()
    }

    /// Pipeline `number` waits: never queued, no step ran, the secret in no log.
    async fn assert_held(&self, number: i64) {
        let kind = self.t.kind;
        let p = self.get(number).await;
        assert_eq!(p["status"], "blocked", "{kind}: {p:#}");
        let step = step_of(&p, "leak");
        assert_eq!(step["state"], "blocked", "{kind}: {p:#}");
        // A step that never ran has no times at all (upstream omits zero times; the web UI
        // reads a `finished` key as "ended").
        assert!(
            step.get("started").is_none() && step.get("finished").is_none(),
            "{kind}: {step:#}"
        );
        let logs = all_log_lines(&self.s.http, self.admin, self.repo, number).await;
        assert!(
            !logs.contains(SECRET) && !logs.contains(SECRET_PRINTED),
            "{kind}: the secret leaked from held pipeline {number}: {logs}"
        );
    }

    /// Pipeline `number` runs to success and its step read the secret.
    async fn assert_ran(&self, number: i64) {
        let kind = self.t.kind;
        let p = wait_for(&self.s.http, self.admin, self.repo, number, 60, finished).await;
        assert_eq!(p["status"], "success", "{kind}: {p:#}");
        let step = step_of(&p, "leak");
        assert!(
            step["started"].as_i64().is_some_and(|t| t > 0)
                && step["finished"].as_i64().is_some_and(|t| t > 0),
            "{kind}: {step:#}"
        );
        let logs = all_log_lines(&self.s.http, self.admin, self.repo, number).await;
        assert!(
            logs.contains(&format!("leak={SECRET_PRINTED}")),
            "{kind}: {logs}"
        );
    }
}

/// Every mode against every plugin forge type, as the attacker delivers (signed, from the
/// forge): what is held stays held with the secret unread; what may run runs with it.
async fn check_forge_type(setup: Setup<'_>) {
    let kind = setup.t.kind;
    let n = |p: &Value| p["number"].as_i64().unwrap();

    // The default mode holds the fork's pull request; the same repository's runs.
    setup.mode("forks", &[]).await;
    let fork_held = setup.pr(true).await;
    assert_eq!(fork_held["status"], "blocked", "{kind}: {fork_held:#}");
    let own_runs = setup.pr(false).await;
    assert_eq!(own_runs["status"], "pending", "{kind}: {own_runs:#}");

    setup.mode("pull_requests", &[]).await;
    let own_held = setup.pr(false).await;
    assert_eq!(own_held["status"], "blocked", "{kind}: {own_held:#}");

    setup.mode("all_events", &[]).await;
    let push_held = setup.push().await;
    assert_eq!(push_held["status"], "blocked", "{kind}: {push_held:#}");

    setup.mode("none", &[]).await;
    let fork_runs = setup.pr(true).await;
    assert_eq!(fork_runs["status"], "pending", "{kind}: {fork_runs:#}");

    // The sender the forge signed for is trusted; another login is not.
    let sender = fork_held["sender"].as_str().unwrap().to_string();
    assert!(!sender.is_empty(), "{kind}: {fork_held:#}");
    setup.mode("forks", &["someone-else"]).await;
    let other_held = setup.pr(true).await;
    assert_eq!(other_held["status"], "blocked", "{kind}: {other_held:#}");
    setup.mode("forks", &[sender.as_str()]).await;
    let allowed_runs = setup.pr(true).await;
    assert_eq!(
        allowed_runs["status"], "pending",
        "{kind}: {allowed_runs:#}"
    );

    for p in [&own_runs, &fork_runs, &allowed_runs] {
        setup.assert_ran(n(p)).await;
    }
    // The runner had every chance: the held ones are still held.
    for p in [&fork_held, &own_held, &push_held, &other_held] {
        setup.assert_held(n(p)).await;
    }

    // Approval runs the fork's pipeline; a restart of it keeps `from_fork` and, asked for
    // by a user with push access, is not held again (as upstream).
    setup.mode("forks", &[]).await;
    let approved = setup
        .s
        .http
        .post(
            &format!(
                "/api/repos/{}/pipelines/{}/approve",
                setup.repo,
                n(&fork_held)
            ),
            Some(setup.admin),
            "",
        )
        .await
        .expect(200)
        .json();
    assert_eq!(approved["status"], "pending", "{kind}: {approved:#}");
    assert_eq!(approved["from_fork"], true, "{kind}: {approved:#}");
    setup.assert_ran(n(&fork_held)).await;
    let restarted = setup
        .s
        .http
        .post(
            &format!("/api/repos/{}/pipelines/{}", setup.repo, n(&fork_held)),
            Some(setup.admin),
            "",
        )
        .await
        .expect(200)
        .json();
    assert_eq!(restarted["from_fork"], true, "{kind}: {restarted:#}");
    assert_eq!(restarted["status"], "pending", "{kind}: {restarted:#}");
    setup.assert_ran(n(&restarted)).await;

    // Decline still ends a held one.
    let declined = setup
        .s
        .http
        .post(
            &format!(
                "/api/repos/{}/pipelines/{}/decline",
                setup.repo,
                n(&own_held)
            ),
            Some(setup.admin),
            "",
        )
        .await
        .expect(200)
        .json();
    assert_eq!(declined["status"], "declined", "{kind}: {declined:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_forges_hold_what_their_mode_requires() {
    let types = forge_types();
    let mut apis = Vec::new();
    for t in &types {
        let repo = (t.repo_of)(&fixture(t.pr_fixture));
        apis.push(fake_forge_api(t.repo_path, repo).await);
    }
    // Forge ids are given in order from 1: each plugin instance is granted its forge's secret.
    let mut instances = String::new();
    for (i, (t, api)) in types.iter().zip(&apis).enumerate() {
        let id = i + 1;
        let api_url = if t.api_url_config {
            format!(", api-url = \"http://{api}\"")
        } else {
            String::new()
        };
        instances.push_str(&format!(
            "[plugins.instances.gate-{kind}]\nfile = \"forge-{kind}.wasm\"\nallowed_hosts = [\"http://{api}\"]\nsecrets = [\"forge:{id}\"]\nconfig = {{ hook-secret = \"forge:{id}\"{api_url} }}\n",
            kind = t.kind
        ));
    }
    let data = tempfile::tempdir().unwrap();
    let tables =
        with_runner(data.path()) + &plugins_table(&first_party_plugins(), false, &instances);
    let s = TestServer::start_in_with_tables(data, "", &tables).await;
    let p = s.principals().await;

    let mut setups = Vec::new();
    for (i, (t, api)) in types.iter().zip(&apis).enumerate() {
        let forge = s
            .http
            .post(
                "/api/forges",
                Some(&p.admin),
                &json!({
                    "type": t.kind,
                    "url": format!("http://{api}"),
                    "oauth_client_secret": "api-token",
                    "additional_options": {"plugin": format!("gate-{}", t.kind)},
                })
                .to_string(),
            )
            .await
            .expect(200)
            .json();
        assert_eq!(forge["id"], i as i64 + 1);
        let forge_id = forge["id"].as_i64().unwrap();
        let repo = s
            .http
            .post(
                &format!(
                    "/api/repos?forge_remote_id={}&forge_id={forge_id}",
                    t.full_name
                ),
                Some(&p.admin),
                "",
            )
            .await
            .expect(200)
            .json();
        let repo_id = repo["id"].as_i64().unwrap();
        assert_eq!(repo["require_approval"], "forks", "the default mode");
        s.http
            .post(
                &format!("/api/repos/{repo_id}/secrets"),
                Some(&p.admin),
                &json!({
                    "name": "deploy_token",
                    "value": SECRET,
                    "events": ["push", "pull_request", "pull_request_metadata"],
                })
                .to_string(),
            )
            .await
            .expect(200);
        setups.push(Setup {
            s: &s,
            admin: &p.admin,
            t,
            forge: forge_id,
            repo: repo_id,
            secret: forge["webhook_secret"].as_str().unwrap().to_string(),
        });
    }
    let Ok([a, b, c, d, e, f]) = <[Setup; 6]>::try_from(setups) else {
        unreachable!("six forge types")
    };
    tokio::join!(
        check_forge_type(a),
        check_forge_type(b),
        check_forge_type(c),
        check_forge_type(d),
        check_forge_type(e),
        check_forge_type(f),
    );
}

/// The git forge has pushes only: `all_events` holds them, `forks` and `pull_requests` do
/// not; manual runs and cron never wait. A commit's author is whatever the pusher wrote, so
/// it never passes `approval_allowed_users`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_forge_holds_pushes_under_all_events_only() {
    let s = TestServer::start_with_runner().await;
    let p = s.principals().await;
    let repo = s.git_repo(&p.admin, &p.alice, "alice/gated").await;
    let id = repo["id"].as_i64().unwrap();
    assert_eq!(repo["require_approval"], "forks");
    s.http
        .post(
            &format!("/api/repos/{id}/secrets"),
            Some(&p.alice),
            &json!({"name": "deploy_token", "value": SECRET, "events": ["push", "manual", "cron"]})
                .to_string(),
        )
        .await
        .expect(200);
    let set = |body: Value| {
        let http = &s.http;
        let alice = p.alice.clone();
        async move {
            http.patch(&format!("/api/repos/{id}"), Some(&alice), &body.to_string())
                .await
        }
    };
    // Unknown modes are refused, and leave the repository as it was.
    for bad in ["sometimes", "", "Forks"] {
        let r = set(json!({"require_approval": bad})).await;
        assert_eq!(r.status, 400, "{bad:?}: {}", r.text());
    }
    let latest = || async {
        s.http
            .get(&format!("/api/repos/{id}/pipelines"), Some(&p.alice))
            .await
            .expect(200)
            .json()[0]
            .clone()
    };

    // The commits' author is "Tester" (see `util::git`): listing it allows nothing.
    set(json!({"require_approval": "all_events", "approval_allowed_users": ["Tester"]}))
        .await
        .expect(200);
    push_files(&s, "alice/gated", &[(".woodpecker.yaml", CONFIG)], "held").await;
    let held = latest().await;
    assert_eq!(held["event"], "push");
    assert_eq!(held["author"], "Tester");
    assert_eq!(held["status"], "blocked", "{held:#}");

    let manual =
        crate::pipelines::start_manually(&s.http, &p.alice, id, r#"{"branch":"main"}"#).await;
    assert_eq!(manual["status"], "pending", "{manual:#}");
    let cron = s
        .http
        .post(
            &format!("/api/repos/{id}/cron"),
            Some(&p.alice),
            r#"{"name":"nightly","schedule":"@daily","branch":"main"}"#,
        )
        .await
        .expect(200)
        .json();
    let cron_run = s
        .http
        .post(
            &format!("/api/repos/{id}/cron/{}", cron["id"]),
            Some(&p.alice),
            "",
        )
        .await
        .expect(200)
        .json();
    assert_eq!(cron_run["event"], "cron");
    assert_eq!(cron_run["status"], "pending", "{cron_run:#}");

    let mut ran = vec![manual, cron_run];
    for (i, mode) in ["forks", "pull_requests", "none"].into_iter().enumerate() {
        set(json!({"require_approval": mode})).await.expect(200);
        push_files(&s, "alice/gated", &[("n.txt", &i.to_string())], mode).await;
        let pushed = latest().await;
        assert_ne!(pushed["status"], "blocked", "{mode}: {pushed:#}");
        ran.push(pushed);
    }
    for p_ in &ran {
        let number = p_["number"].as_i64().unwrap();
        let done = wait_for(&s.http, &p.alice, id, number, 60, finished).await;
        assert_eq!(done["status"], "success", "{done:#}");
    }
    let n = held["number"].as_i64().unwrap();
    let still = s
        .http
        .get(&format!("/api/repos/{id}/pipelines/{n}"), Some(&p.alice))
        .await
        .json();
    assert_eq!(still["status"], "blocked", "{still:#}");
    let logs = all_log_lines(&s.http, &p.alice, id, n).await;
    assert!(!logs.contains(SECRET_PRINTED), "{logs}");
}
