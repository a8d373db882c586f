//! `hooks`: open-loop webhook intake: latency from sending a push hook to its reply (the
//! pipeline stored and queued; no runner).
//!
//! Hooks go out at a fixed rate whatever the replies do ([`crate::client::open_loop`]; 500/s
//! for 30 s per target by default), so a slow server cannot slow the sender down and the tail
//! shows. Two woodlark targets on one server:
//! - the git forge: the post-receive hook's `POST /api/hook/…`;
//! - a GitHub forge served by the first-party `forge-github` adapter: a signed push payload,
//!   the config fetched through the adapter from a fake GitHub API on 127.0.0.1.
//!
//! **Baselines, same run:** a bare hyper server answering the same POSTs (the client's and
//! HTTP's floor), and bare SQLite committing a hook's worth of rows per request at the same
//! rate with full sync (what this disk gives a commit of that size:
//! [`crate::baseline::bare_sqlite`]). The four targets take turns in 5 s slices, so that each
//! sees the machine's fast and slow stretches alike; the two server targets swap places every
//! round, and their latencies are also printed by place.
//!
//! `WOODLARK_HOOKS_RATE` and `WOODLARK_HOOKS_SECS` change rate and duration;
//! `WOODLARK_HOOKS_CONFIG` is appended to the server's configuration (TOML tables, e.g.
//! `[storage]` settings, to compare one against another; not `[plugins]`, which the scenario
//! sets).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::broadcast;
// The bench's one use of the git object code: lower-case hex of the push's HMAC.
use woodlark_git::hex;

use crate::baseline::{bare_sqlite, baseline_server, serve_http1};
use crate::client::open_loop;
use crate::procfs::{children_cpu_time, cpu_time, thread_cpu_times};
use crate::report::{ms, pct, ratio, table};
use crate::server::{Api, ECHO, Server, post_receive_hook};

/// Length of one target's turn in the hooks scenario.
const HOOKS_SLICE_SECS: u64 = 5;

/// The hooks scenario's two woodlark targets.
#[derive(Clone, Copy)]
enum HookTarget {
    Git,
    Plugin,
}

/// A fake GitHub API for `octo/app` on 127.0.0.1, as much as activating the repository and
/// a push need: the repository, its webhooks (none listed; the URL of the one created is
/// kept) and the config file at any commit (a `.woodpecker/` directory is not found).
async fn fake_github_api(config: &'static str) -> (SocketAddr, Arc<Mutex<Option<String>>>) {
    let webhook = Arc::new(Mutex::new(None::<String>));
    let registered = webhook.clone();
    let addr = serve_http1(move |req: Request<hyper::body::Incoming>| {
        let registered = registered.clone();
        async move {
            let (method, path) = (req.method().clone(), req.uri().path().to_string());
            let body = req.into_body().collect().await.map(|b| b.to_bytes());
            let (status, reply) = match (method.as_str(), path.as_str()) {
                ("GET", "/repos/octo/app") => (
                    200,
                    json!({
                        "id": 42, "name": "app", "full_name": "octo/app",
                        "private": true, "owner": {"login": "octo"},
                        "html_url": "https://github.com/octo/app",
                        "clone_url": "https://github.com/octo/app.git",
                        "default_branch": "main",
                    })
                    .to_string(),
                ),
                ("GET", "/repos/octo/app/contents/.woodpecker.yaml") => (200, config.to_string()),
                ("GET", "/repos/octo/app/hooks") => (200, "[]".to_string()),
                ("POST", "/repos/octo/app/hooks") => {
                    let hook: Value = body
                        .ok()
                        .and_then(|b| serde_json::from_slice(&b).ok())
                        .unwrap_or(Value::Null);
                    *registered.lock().unwrap() =
                        hook["config"]["url"].as_str().map(str::to_string);
                    (201, "{\"id\": 1}".to_string())
                }
                _ => (404, "{\"message\": \"Not Found\"}".to_string()),
            };
            let mut resp = Response::new(BoxBody::new(Full::new(Bytes::from(reply))));
            *resp.status_mut() = StatusCode::from_u16(status).unwrap();
            resp
        }
    })
    .await;
    (addr, webhook)
}

/// The `[plugins]` tables that load the first-party GitHub adapter for forge `forge_id`,
/// talking to `api` (`plugins/build.sh` builds `plugins/dist` first if it is missing, as the
/// integration tests do).
fn github_plugin_tables(api: SocketAddr, forge_id: i64) -> String {
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins");
    let dist = plugins.join("dist");
    if !dist.join("forge-github.wasm").exists() {
        let built = Command::new("bash")
            .arg(plugins.join("build.sh"))
            .status()
            .expect("run plugins/build.sh");
        assert!(built.success(), "plugins/build.sh failed");
    }
    format!(
        "[plugins]\ndir = {:?}\nwatch = false\n\n[plugins.instances.github]\n\
         file = \"forge-github.wasm\"\nallowed_hosts = [\"http://{api}\"]\n\
         secrets = [\"forge:{forge_id}\"]\n\
         config = {{ hook-secret = \"forge:{forge_id}\", api-url = \"http://{api}\" }}\n",
        dist.canonicalize().unwrap().display().to_string()
    )
}

/// GitHub's push payload (the plugin host's fixture) for `octo/app`, and its
/// `X-Hub-Signature-256` with `secret`.
fn signed_github_push(secret: &str) -> (String, String) {
    use hmac::{Hmac, Mac};
    let mut payload: Value = serde_json::from_str(include_str!(
        "../../../plugin-host/src/tests/fixtures/github-push.json"
    ))
    .unwrap();
    payload["repository"]["id"] = json!(42);
    payload["repository"]["name"] = json!("app");
    payload["repository"]["full_name"] = json!("octo/app");
    payload["repository"]["owner"]["login"] = json!("octo");
    payload["repository"]["owner"]["name"] = json!("octo");
    let body = payload.to_string();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    let signature = hex(&mac.finalize().into_bytes());
    (body, format!("sha256={signature}"))
}

pub async fn run() {
    let rate: u64 = std::env::var("WOODLARK_HOOKS_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let secs: u64 = std::env::var("WOODLARK_HOOKS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    println!(
        "\n# hooks: open loop, {rate} push hooks/s for {secs} s per target in {} s turns (git forge and GitHub plugin forge, storage.synchronous = full, no runner): hook sent → pipeline queued",
        secs.min(HOOKS_SLICE_SECS)
    );
    let (feed, _) = broadcast::channel(16);
    let base_addr = baseline_server(feed).await;
    let extra = std::env::var("WOODLARK_HOOKS_CONFIG").unwrap_or_default();
    if !extra.is_empty() {
        println!("extra configuration: {extra:?}");
    }
    // The git forge is forge 1 (repository 1); the GitHub plugin forge is forge 2.
    let (github_api, github_webhook) = fake_github_api(ECHO).await;
    let tables = format!("{}{extra}", github_plugin_tables(github_api, 2));
    let server = Server::start_with(false, &tables).await;
    let admin = server.user("root", true).await;
    let alice = server.user("alice", false).await;
    let (_, bare) = server
        .pipeline_repo(&admin, &alice, "alice/hook", ECHO)
        .await;
    let github = server
        .api
        .expect(
            "POST",
            "/api/forges",
            Some(&admin),
            Some(r#"{"type":"github","url":"https://github.com","oauth_client_secret":"gh-api-token","additional_options":{"plugin":"github"}}"#),
            200,
        )
        .await;
    assert_eq!(github["id"], 2, "the GitHub forge's id (its secret's name)");
    server
        .api
        .expect(
            "POST",
            "/api/repos?forge_remote_id=octo/app&forge_id=2",
            Some(&admin),
            Some(""),
            200,
        )
        .await;
    let (github_body, github_sig) =
        signed_github_push(github["webhook_secret"].as_str().expect("webhook secret"));
    // Deliveries go where activation registered the webhook (its URL names the forge).
    let github_path = {
        let url = github_webhook
            .lock()
            .unwrap()
            .clone()
            .expect("webhook created");
        url[url.find("/api/hook").expect("hook URL")..].to_string()
    };
    let github_hook = {
        let api = Arc::new(Api::new(server.api.addr));
        let (path, body, sig) = (
            Arc::new(github_path),
            Arc::new(github_body),
            Arc::new(github_sig),
        );
        move || {
            let (api, path, body, sig) = (api.clone(), path.clone(), body.clone(), sig.clone());
            async move {
                let headers = [("x-github-event", "push"), ("x-hub-signature-256", &**sig)];
                let (status, _) = api
                    .send_with("POST", &path, None, Some(&body), &headers)
                    .await;
                status == StatusCode::OK
            }
        }
    };
    let (path, body) = post_receive_hook(&bare);

    let run = |api: Api, path: String| {
        let (api, path, body) = (Arc::new(api), Arc::new(path), Arc::new(body.clone()));
        move || {
            let (api, path, body) = (api.clone(), path.clone(), body.clone());
            async move {
                let (status, _) = api.send("POST", &path, None, Some(&body)).await;
                status == StatusCode::OK
            }
        }
    };
    // Warm-up (first git spawn, statement caches), then the measured runs.
    let (_, warm_errors) = open_loop(50, 1, run(Api::new(server.api.addr), path.clone())).await;
    assert_eq!(warm_errors, 0, "warm-up hooks failed");
    let (_, warm_errors) = open_loop(50, 1, &github_hook).await;
    assert_eq!(warm_errors, 0, "warm-up GitHub hooks failed");
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    // The targets take turns, a slice each, so that each sees the machine's fast and slow
    // stretches (its disk's too) alike instead of one of them getting a stall alone.
    let slice = secs.min(HOOKS_SLICE_SECS);
    let rounds = (secs / slice).max(1);
    let bare_dir = tempfile::tempdir().unwrap();
    let (bare_commit, bare_frames) = bare_sqlite(bare_dir.path());
    let hyper_hook = run(Api::new(base_addr), path.clone());
    let woodlark_hook = run(Api::new(server.api.addr), path.clone());
    let (mut base, mut base_errors, mut base_cpu) = (Vec::new(), 0, Duration::ZERO);
    let (mut durable, mut durable_errors, mut durable_cpu) = (Vec::new(), 0, Duration::ZERO);
    let (mut lat, mut errors) = (Vec::new(), 0);
    let (mut server_cpu, mut git_cpu) = (Duration::ZERO, Duration::ZERO);
    let mut by_thread = std::collections::BTreeMap::<String, Duration>::new();
    let mut catch_ups = 0;
    let mut recompiled = 0;
    let (mut plugin_lat, mut plugin_errors, mut plugin_cpu) = (Vec::new(), 0, Duration::ZERO);
    // Both server targets' latencies by their place in the round (first, second).
    let mut by_place: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let before = cpu_time();
        let (l, e) = open_loop(rate, slice, &hyper_hook).await;
        base_cpu += cpu_time().saturating_sub(before);
        base.extend(l);
        base_errors += e;

        let before = cpu_time();
        let (l, e) = open_loop(rate, slice, &bare_commit).await;
        durable_cpu += cpu_time().saturating_sub(before);
        durable.extend(l);
        durable_errors += e;

        // The server's two targets swap places every round: the second inherits the first's
        // unfinished checkpoint work and dirty pages, the first a rested disk.
        let order = if round % 2 == 0 {
            [HookTarget::Git, HookTarget::Plugin]
        } else {
            [HookTarget::Plugin, HookTarget::Git]
        };
        for (place, target) in order.into_iter().enumerate() {
            match target {
                HookTarget::Git => {
                    let before = (cpu_time(), children_cpu_time(), thread_cpu_times());
                    let caught_up = server.state.ci.reads.writer_catch_ups();
                    let missed = server.state.ci.numbers.misses();
                    let (l, e) = open_loop(rate, slice, &woodlark_hook).await;
                    catch_ups += server.state.ci.reads.writer_catch_ups() - caught_up;
                    recompiled += server.state.ci.numbers.misses() - missed;
                    server_cpu += cpu_time().saturating_sub(before.0);
                    git_cpu += children_cpu_time().saturating_sub(before.1);
                    for (name, after) in thread_cpu_times() {
                        let spent =
                            after.saturating_sub(before.2.get(&name).copied().unwrap_or_default());
                        *by_thread.entry(name).or_default() += spent;
                    }
                    by_place[place].extend(&l);
                    lat.extend(l);
                    errors += e;
                }
                HookTarget::Plugin => {
                    let before = cpu_time();
                    let (l, e) = open_loop(rate, slice, &github_hook).await;
                    plugin_cpu += cpu_time().saturating_sub(before);
                    by_place[place].extend(&l);
                    plugin_lat.extend(l);
                    plugin_errors += e;
                }
            }
        }
    }
    for l in [&mut base, &mut durable, &mut lat, &mut plugin_lat] {
        l.sort_unstable();
    }
    for l in &mut by_place {
        l.sort_unstable();
    }
    let stored = server
        .api
        .expect(
            "GET",
            "/api/repos/1/pipelines?perPage=1",
            Some(&alice),
            None,
            200,
        )
        .await;
    let github_stored = server
        .api
        .expect(
            "GET",
            "/api/repos/2/pipelines?perPage=1",
            Some(&admin),
            None,
            200,
        )
        .await;
    server.stop().await;
    let row = |name: &str, lat: &[Duration], errors: usize| {
        vec![
            name.to_string(),
            lat.len().to_string(),
            errors.to_string(),
            ms(pct(lat, 0.50)),
            ms(pct(lat, 0.99)),
            ms(pct(lat, 0.999)),
            ms(*lat.last().unwrap_or(&Duration::ZERO)),
        ]
    };
    table(
        "hook intake (open loop)",
        &["target", "requests", "errors", "p50", "p99", "p99.9", "max"],
        &[
            row("bare hyper (same POST)", &base, base_errors),
            row(
                &format!(
                    "bare SQLite commit ({:.0} frames, full sync)",
                    bare_frames()
                ),
                &durable,
                durable_errors,
            ),
            row("woodlark /api/hook → pipeline queued", &lat, errors),
            row(
                "woodlark /api/hook, GitHub plugin → pipeline queued",
                &plugin_lat,
                plugin_errors,
            ),
        ],
    );
    let p99 = |lat: &[Duration]| pct(lat, 0.99).as_secs_f64();
    println!(
        "p99 ratio vs bare hyper: {}, vs bare SQLite commit: {}; newest pipeline number {}; \
         load average before: {}",
        ratio(p99(&lat), p99(&base)),
        ratio(p99(&lat), p99(&durable)),
        stored[0]["number"],
        load_before.trim()
    );
    let per_hook = |d: Duration| ms(d / (lat.len().max(1) as u32));
    println!(
        "CPU per hook: {} ms in the bench process (server and client; the client and bare \
         hyper together take {}, the bare SQLite commit and its caller {}), {} ms in git",
        per_hook(server_cpu),
        per_hook(base_cpu),
        per_hook(durable_cpu),
        per_hook(git_cpu),
    );
    // The store's writer is the one thread every hook goes through in turn: its CPU per
    // hook is the steadiest figure of this scenario on a machine whose speed wanders.
    let by_thread: Vec<String> = by_thread
        .iter()
        .filter(|(_, spent)| **spent > Duration::ZERO)
        .map(|(name, spent)| format!("{name} {}", per_hook(*spent)))
        .collect();
    println!("CPU per hook by thread (ms): {}", by_thread.join(", "));
    // Each one held up the jobs queued behind it for a sync of the database file.
    println!("checkpoints the store's writer had to finish itself: {catch_ups}");
    println!("pipelines compiled again in the write (number guessed wrong): {recompiled}");
    println!(
        "GitHub plugin forge (parse-hook and the config fetched from a local fake API through \
         the plugin): p99 ratio vs bare hyper: {}, vs bare SQLite commit: {}; CPU per hook {} ms \
         (server, client and the fake API); newest pipeline number {}",
        ratio(p99(&plugin_lat), p99(&base)),
        ratio(p99(&plugin_lat), p99(&durable)),
        ms(plugin_cpu / (plugin_lat.len().max(1) as u32)),
        github_stored[0]["number"],
    );
    let place = |l: &[Duration]| {
        format!(
            "p50 {} / p99 {} / p99.9 {} ms",
            ms(pct(l, 0.50)),
            ms(pct(l, 0.99)),
            ms(pct(l, 0.999))
        )
    };
    println!(
        "both server targets by their place in the round (they swap every round): first {}, second {}",
        place(&by_place[0]),
        place(&by_place[1])
    );
}
