//! The first-party secret-backend and registry-auth plugins (`secrets-vault`,
//! `secrets-static`, `registry-static`, `registry-token`) against small in-test HTTP servers
//! on 127.0.0.1: a Vault KV v2 read endpoint and a registry token endpoint.

use std::sync::{Arc, Mutex};

use super::fake_http::{Seen, fake_server};
use super::*;
use crate::error::{ErrorKind, PluginError};
use crate::types::*;

fn base64(input: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in input.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            out.push(if i <= c.len() {
                A[(n >> (18 - 6 * i)) as usize & 63] as char
            } else {
                '='
            });
        }
    }
    out
}

fn hits(seen: &Arc<Mutex<Vec<Seen>>>) -> usize {
    seen.lock().unwrap().len()
}

fn scope(org: &str, repo: &str, event: &str) -> SecretScope {
    SecretScope {
        org: org.into(),
        repo: repo.into(),
        event: event.into(),
    }
}

/// A host with one instance of `component` named `name`.
async fn one_plugin(
    name: &str,
    component: &str,
    world: WorldKind,
    allowed_hosts: Vec<String>,
    cfg: &[(&str, &str)],
) -> (tempfile::TempDir, PluginHost) {
    let file = format!("{component}.wasm");
    let dir = plugin_dir(&[(&file, component)]);
    let mut inst = instance(&file);
    inst.world = Some(world);
    inst.allowed_hosts = allowed_hosts;
    for (k, v) in cfg {
        inst.config.insert((*k).into(), (*v).into());
    }
    let host = host(
        config(dir.path(), vec![(name, inst)]),
        MapSecrets::default(),
    )
    .await;
    (dir, host)
}

fn assert_kind(err: &PluginError, kind: ErrorKind, needle: &str) {
    assert_eq!(err.kind(), Some(kind), "{err}");
    assert!(err.to_string().contains(needle), "{err:?} lacks {needle:?}");
}

// ---- secrets-vault ----

const VAULT_TOKEN: &str = "hvs.test-token";

/// Vault's KV v2 read endpoint (`GET /v1/<mount>/data/<path>`), as documented: 403 without
/// the right `X-Vault-Token`, 404 for unknown paths.
async fn fake_vault() -> (String, Arc<Mutex<Vec<Seen>>>) {
    fake_server(|req| {
        if req.headers.get("x-vault-token").map(String::as_str) != Some(VAULT_TOKEN) {
            return (403, r#"{"errors":["permission denied"]}"#.into());
        }
        if req.method != "GET" {
            return (405, r#"{"errors":[]}"#.into());
        }
        let data = |d: &str| {
            format!(
                r#"{{"request_id":"r","lease_id":"","renewable":false,"lease_duration":0,
                   "data":{{"data":{d},"metadata":{{"created_time":"2024-05-01T12:00:00Z",
                   "custom_metadata":null,"deletion_time":"","destroyed":false,"version":3}}}},
                   "wrap_info":null,"warnings":null,"auth":null}}"#
            )
        };
        match req.path.as_str() {
            "/v1/secret/data/woodpecker/acme/app" => (
                200,
                data(r#"{"deploy_key":"s3cr3t","npm_token":"npm-abc","port":5432,"gone":null}"#),
            ),
            "/v1/kv/data/ci/acme/app-only" => (200, data(r#"{"org_wide":"from-template"}"#)),
            "/v1/secret/data/woodpecker/acme/deleted" => (200, data("null")),
            "/v1/secret/data/woodpecker/acme/broken" => {
                (500, r#"{"errors":["internal error"]}"#.into())
            }
            "/v1/secret/data/woodpecker/acme/garbage" => (200, "<html>not json".into()),
            "/v1/secret/data/woodpecker/acme/kv1" => (200, r#"{"data":{"a":"b"}}"#.into()),
            _ => (404, r#"{"errors":[]}"#.into()),
        }
    })
    .await
}

async fn vault_host(origin: &str, extra: &[(&str, &str)]) -> (tempfile::TempDir, PluginHost) {
    let mut cfg = vec![("address", origin), ("token", VAULT_TOKEN)];
    cfg.extend_from_slice(extra);
    one_plugin(
        "vault",
        "secrets-vault",
        WorldKind::SecretBackend,
        vec![origin.to_string()],
        &cfg,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vault_reads_kv_v2_secrets_for_the_repo() {
    let (origin, seen) = fake_vault().await;
    let (_d, host) = vault_host(&origin, &[]).await;

    let mut list = host
        .list_secrets("vault", scope("acme", "acme/app", "push"))
        .await
        .unwrap();
    list.sort_by(|a, b| a.name.cmp(&b.name));
    let got: Vec<_> = list
        .iter()
        .map(|s| (s.name.as_str(), s.value.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("deploy_key", "s3cr3t"),
            ("npm_token", "npm-abc"),
            ("port", "5432")
        ]
    );
    assert!(
        list.iter()
            .all(|s| s.events.is_empty() && s.images.is_empty())
    );

    let one = host
        .get_secret("vault", scope("acme", "acme/app", "tag"), "npm_token")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(one.value, "npm-abc");
    assert!(
        host.get_secret("vault", scope("acme", "acme/app", "tag"), "nope")
            .await
            .unwrap()
            .is_none()
    );

    let reqs = seen.lock().unwrap().clone();
    assert_eq!(reqs.len(), 3, "no cache by default");
    assert!(reqs.iter().all(|r| r.method == "GET"
        && r.path == "/v1/secret/data/woodpecker/acme/app"
        && r.headers["x-vault-token"] == VAULT_TOKEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vault_mount_and_path_template() {
    let (origin, seen) = fake_vault().await;
    let (_d, host) = vault_host(
        &origin,
        &[
            ("mount", "kv"),
            ("path-template", "ci/{org}/{repo_name}-only"),
            ("namespace", "team-a"),
        ],
    )
    .await;
    let list = host
        .list_secrets("vault", scope("acme", "acme/app", "push"))
        .await
        .unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(
        (list[0].name.as_str(), list[0].value.as_str()),
        ("org_wide", "from-template")
    );
    let reqs = seen.lock().unwrap().clone();
    assert_eq!(reqs[0].path, "/v1/kv/data/ci/acme/app-only");
    assert_eq!(reqs[0].headers["x-vault-namespace"], "team-a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vault_missing_and_deleted_paths_are_empty() {
    let (origin, _seen) = fake_vault().await;
    let (_d, host) = vault_host(&origin, &[]).await;
    for repo in ["acme/unknown", "acme/deleted"] {
        let list = host
            .list_secrets("vault", scope("acme", repo, "push"))
            .await
            .unwrap();
        assert!(list.is_empty(), "{repo}: {list:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vault_failures_are_clear_errors() {
    let (origin, _seen) = fake_vault().await;
    let (_d, host) = vault_host(&origin, &[]).await;
    let list = |repo: &'static str| {
        let host = host.clone();
        async move {
            host.list_secrets("vault", scope("acme", repo, "push"))
                .await
                .unwrap_err()
        }
    };
    assert_kind(
        &list("acme/broken").await,
        ErrorKind::Unavailable,
        "HTTP 500: internal error",
    );
    assert_kind(
        &list("acme/garbage").await,
        ErrorKind::InvalidInput,
        "malformed response",
    );
    assert_kind(
        &list("acme/kv1").await,
        ErrorKind::InvalidInput,
        "KV v2 engine",
    );

    // A wrong token: the fake answers 403 like Vault does.
    let (_d2, bad) = one_plugin(
        "vault",
        "secrets-vault",
        WorldKind::SecretBackend,
        vec![origin.clone()],
        &[("address", &origin), ("token", "wrong")],
    )
    .await;
    let err = bad
        .list_secrets("vault", scope("acme", "acme/app", "push"))
        .await
        .unwrap_err();
    assert_kind(&err, ErrorKind::Unavailable, "HTTP 403: permission denied");

    // No token configured: a config error before any request.
    let (_d3, untokened) = one_plugin(
        "vault",
        "secrets-vault",
        WorldKind::SecretBackend,
        vec![origin.clone()],
        &[("address", &origin)],
    )
    .await;
    let err = untokened
        .list_secrets("vault", scope("acme", "acme/app", "push"))
        .await
        .unwrap_err();
    assert_kind(&err, ErrorKind::InvalidInput, "`token` is not set");

    // Vault's origin not granted in allowed_hosts: denied by the host.
    let (_d4, ungranted) = one_plugin(
        "vault",
        "secrets-vault",
        WorldKind::SecretBackend,
        vec![],
        &[("address", &origin), ("token", VAULT_TOKEN)],
    )
    .await;
    let err = ungranted
        .list_secrets("vault", scope("acme", "acme/app", "push"))
        .await
        .unwrap_err();
    assert_kind(&err, ErrorKind::Denied, "may not reach");

    // Vault down: unavailable.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let (_d5, down) = vault_host(&dead, &[]).await;
    let err = down
        .list_secrets("vault", scope("acme", "acme/app", "push"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::Unavailable), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vault_cache_seconds_caches_in_kv() {
    let (origin, seen) = fake_vault().await;
    let (_d, host) = vault_host(&origin, &[("cache-seconds", "1")]).await;
    let s = scope("acme", "acme/app", "push");
    for _ in 0..3 {
        let list = host.list_secrets("vault", s.clone()).await.unwrap();
        assert_eq!(list.len(), 3);
    }
    assert_eq!(hits(&seen), 1);
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    host.list_secrets("vault", s).await.unwrap();
    assert_eq!(hits(&seen), 2, "the cache entry expires");
    // Errors are not cached.
    host.list_secrets("vault", scope("acme", "acme/broken", "push"))
        .await
        .unwrap_err();
    host.list_secrets("vault", scope("acme", "acme/broken", "push"))
        .await
        .unwrap_err();
    assert_eq!(hits(&seen), 4);
}

// ---- secrets-static ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_secrets_from_config() {
    let (_d, host) = one_plugin(
        "static",
        "secrets-static",
        WorldKind::SecretBackend,
        vec![],
        &[
            ("names", "deploy_key, docker_password"),
            ("secret.deploy_key", "s3cr3t"),
            ("secret.deploy_key.events", "push, tag"),
            ("secret.docker_password", "hunter2"),
            (
                "secret.docker_password.images",
                "woodpeckerci/plugin-docker-buildx",
            ),
        ],
    )
    .await;
    for s in [
        scope("acme", "acme/app", "push"),
        scope("other", "other/x", "pull-request"),
    ] {
        let list = host.list_secrets("static", s).await.unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(
            (list[0].name.as_str(), list[0].value.as_str()),
            ("deploy_key", "s3cr3t")
        );
        assert_eq!(list[0].events, vec!["push", "tag"]);
        assert!(list[0].images.is_empty());
        assert_eq!(list[1].value, "hunter2");
        assert!(list[1].events.is_empty());
        assert_eq!(list[1].images, vec!["woodpeckerci/plugin-docker-buildx"]);
    }
    let one = host
        .get_secret("static", scope("a", "a/b", "push"), "docker_password")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(one.value, "hunter2");

    // A listed name without a value is a config error, not a silently missing secret.
    let (_d2, broken) = one_plugin(
        "static",
        "secrets-static",
        WorldKind::SecretBackend,
        vec![],
        &[("names", "a,b"), ("secret.a", "1")],
    )
    .await;
    let err = broken
        .list_secrets("static", scope("a", "a/b", "push"))
        .await
        .unwrap_err();
    assert_kind(&err, ErrorKind::InvalidInput, "`secret.b` is not set");
}

// ---- registry-static ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_registry_matches_the_image_host() {
    let (_d, host) = one_plugin(
        "registries",
        "registry-static",
        WorldKind::RegistryAuth,
        vec![],
        &[
            ("registry.ghcr.io.username", "bot"),
            ("registry.ghcr.io.password", "ghp_x"),
            ("registry.localhost:5000", "local:pa:ss"),
            ("registry.docker.io.username", "hubuser"),
            ("registry.docker.io.password", "hubpass"),
        ],
    )
    .await;
    let cred = |image: &'static str| {
        let host = host.clone();
        async move {
            host.credential_for("registries", image, "acme/app")
                .await
                .unwrap()
                .map(|c| (c.address, c.username, c.password))
        }
    };
    let c = |a: &str, u: &str, p: &str| Some((a.to_string(), u.to_string(), p.to_string()));
    assert_eq!(
        cred("ghcr.io/acme/tool:1").await,
        c("ghcr.io", "bot", "ghp_x")
    );
    assert_eq!(
        cred("localhost:5000/acme/app@sha256:00").await,
        c("localhost:5000", "local", "pa:ss")
    );
    for hub in [
        "alpine",
        "alpine:3.20",
        "acme/app:1",
        "docker.io/library/alpine",
        "index.docker.io/acme/app",
    ] {
        assert_eq!(
            cred(hub).await,
            c("docker.io", "hubuser", "hubpass"),
            "{hub}"
        );
    }
    assert_eq!(cred("quay.io/acme/app").await, None);
    // `ghcr.io` is the host only as the first component.
    assert_eq!(
        cred("acme/ghcr.io").await,
        c("docker.io", "hubuser", "hubpass")
    );

    let (_d2, half) = one_plugin(
        "registries",
        "registry-static",
        WorldKind::RegistryAuth,
        vec![],
        &[("registry.ghcr.io.username", "bot")],
    )
    .await;
    let err = half
        .credential_for("registries", "ghcr.io/a/b", "a/b")
        .await
        .unwrap_err();
    assert_kind(&err, ErrorKind::InvalidInput, "registry.ghcr.io.password");
}

// ---- registry-token ----

const TOKEN_USER: &str = "robot";
const TOKEN_PASS: &str = "pa55:w0rd";

/// A registry token server: checks HTTP Basic auth, then issues `tok-<n>` for the requested
/// scope; scopes of `acme/short` expire after 1 s, `acme/access` answers with
/// `access_token`, `acme/notoken` with JSON lacking a token, `acme/garbage` with non-JSON.
async fn fake_token_server() -> (String, Arc<Mutex<Vec<Seen>>>) {
    let issued = Arc::new(Mutex::new(0u32));
    let expected = format!(
        "Basic {}",
        base64(format!("{TOKEN_USER}:{TOKEN_PASS}").as_bytes())
    );
    fake_server(move |req| {
        if req.path != "/token" {
            return (404, "{}".into());
        }
        if req.headers.get("authorization") != Some(&expected) {
            return (401, r#"{"errors":[{"code":"UNAUTHORIZED"}]}"#.into());
        }
        let scope = req.query.get("scope").cloned().unwrap_or_default();
        let n = {
            let mut i = issued.lock().unwrap();
            *i += 1;
            *i
        };
        let token = format!("tok-{n}");
        match scope.as_str() {
            "repository:acme/short:pull,push" => {
                (200, format!(r#"{{"token":"{token}","expires_in":1}}"#))
            }
            "repository:acme/access:pull,push" => (
                200,
                format!(r#"{{"access_token":"{token}","expires_in":300}}"#),
            ),
            "repository:acme/notoken:pull,push" => (200, r#"{"expires_in":300}"#.into()),
            "repository:acme/garbage:pull,push" => (200, "token=abc".into()),
            _ => (
                200,
                format!(
                    r#"{{"token":"{token}","access_token":"{token}","expires_in":300,"issued_at":"2024-05-01T12:00:00Z"}}"#
                ),
            ),
        }
    })
    .await
}

async fn token_host(origin: &str, extra: &[(&str, &str)]) -> (tempfile::TempDir, PluginHost) {
    let url = format!("{origin}/token");
    let mut cfg = vec![
        ("registry", "registry.test:5001"),
        ("token-url", url.as_str()),
        ("username", TOKEN_USER),
        ("password", TOKEN_PASS),
        ("service", "registry.test"),
    ];
    cfg.extend_from_slice(extra);
    one_plugin(
        "tokens",
        "registry-token",
        WorldKind::RegistryAuth,
        vec![origin.to_string()],
        &cfg,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_exchange_with_basic_auth_and_cache() {
    let (origin, seen) = fake_token_server().await;
    let (_d, host) = token_host(&origin, &[]).await;

    let c = host
        .credential_for("tokens", "registry.test:5001/acme/app:1", "acme/app")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (c.address.as_str(), c.username.as_str(), c.password.as_str()),
        ("registry.test:5001", "<token>", "tok-1")
    );
    {
        let reqs = seen.lock().unwrap();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].method, "GET");
        assert_eq!(reqs[0].query["service"], "registry.test");
        assert_eq!(reqs[0].query["scope"], "repository:acme/app:pull,push");
    }
    // Cached until expiry: no second request, same token.
    let again = host
        .credential_for("tokens", "registry.test:5001/acme/app:2", "acme/app")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.password, "tok-1");
    assert_eq!(hits(&seen), 1);
    // Another repository is another scope, hence another token.
    let other = host
        .credential_for("tokens", "registry.test:5001/acme/other", "acme/app")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(other.password, "tok-2");
    // `access_token` is accepted too.
    let access = host
        .credential_for("tokens", "registry.test:5001/acme/access", "acme/app")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(access.password, "tok-3");
    // Other registries: none, and no request.
    let before = hits(&seen);
    for image in ["ghcr.io/acme/app", "alpine", "registry.test/acme/app"] {
        assert!(
            host.credential_for("tokens", image, "acme/app")
                .await
                .unwrap()
                .is_none(),
            "{image}"
        );
    }
    assert_eq!(hits(&seen), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_expiry_is_honoured() {
    let (origin, seen) = fake_token_server().await;
    let (_d, host) = token_host(&origin, &[]).await;
    let get = || async {
        host.credential_for("tokens", "registry.test:5001/acme/short", "acme/app")
            .await
            .unwrap()
            .unwrap()
            .password
    };
    assert_eq!(get().await, "tok-1");
    assert_eq!(get().await, "tok-1", "cached while valid");
    assert_eq!(hits(&seen), 1);
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    assert_eq!(get().await, "tok-2", "refetched after expires_in");
    assert_eq!(hits(&seen), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_options_and_failures() {
    let (origin, seen) = fake_token_server().await;

    // token-username and a custom scope template; no service.
    let url = format!("{origin}/token");
    let (_d, host) = one_plugin(
        "tokens",
        "registry-token",
        WorldKind::RegistryAuth,
        vec![origin.clone()],
        &[
            ("registry", "Registry.Test:5001"),
            ("token-url", &url),
            ("username", TOKEN_USER),
            ("password", TOKEN_PASS),
            ("scope", "repository:{name}:pull"),
            ("token-username", "oauth2accesstoken"),
        ],
    )
    .await;
    let c = host
        .credential_for("tokens", "registry.test:5001/acme/app", "acme/app")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.username, "oauth2accesstoken");
    assert_eq!(c.password, "tok-1");
    {
        let reqs = seen.lock().unwrap();
        assert_eq!(reqs[0].query["scope"], "repository:acme/app:pull");
        assert!(!reqs[0].query.contains_key("service"));
    }

    // Wrong password: 401 from the token server → unavailable.
    let (_d2, wrong) = token_host(&origin, &[("password", "nope")]).await;
    let err = wrong
        .credential_for("tokens", "registry.test:5001/acme/app", "acme/app")
        .await
        .unwrap_err();
    assert_kind(&err, ErrorKind::Unavailable, "HTTP 401");

    // Replies without a token, or not JSON: invalid-input, and nothing cached.
    let (_d3, host) = token_host(&origin, &[]).await;
    for (image, needle) in [
        ("registry.test:5001/acme/notoken", "no `token`"),
        ("registry.test:5001/acme/garbage", "not JSON"),
    ] {
        let err = host
            .credential_for("tokens", image, "acme/app")
            .await
            .unwrap_err();
        assert_kind(&err, ErrorKind::InvalidInput, needle);
    }

    // The token server not granted: denied.
    let (_d4, ungranted) = one_plugin(
        "tokens",
        "registry-token",
        WorldKind::RegistryAuth,
        vec![],
        &[("registry", "registry.test:5001"), ("token-url", &url)],
    )
    .await;
    let err = ungranted
        .credential_for("tokens", "registry.test:5001/acme/app", "acme/app")
        .await
        .unwrap_err();
    assert_kind(&err, ErrorKind::Denied, "may not reach");
}

// ---- the documented config tables ----

#[test]
fn readme_examples_are_valid_config() {
    #[derive(serde::Deserialize)]
    struct Root {
        plugins: PluginsConfig,
    }
    let readme = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/README.md"),
    )
    .unwrap();
    let mut checked = Vec::new();
    for block in readme.split("```toml").skip(1) {
        let block = block.split("```").next().unwrap();
        let root: Root = toml::from_str(block).unwrap_or_else(|e| panic!("{e}\n{block}"));
        root.plugins.validate().unwrap();
        for (name, inst) in &root.plugins.instances {
            checked.push((name.clone(), inst.file.clone()));
        }
    }
    for file in [
        "secrets-vault.wasm",
        "secrets-static.wasm",
        "registry-static.wasm",
        "registry-token.wasm",
    ] {
        assert!(
            checked.iter().any(|(_, f)| f == file),
            "plugins/README.md has no example for {file}"
        );
    }
}
