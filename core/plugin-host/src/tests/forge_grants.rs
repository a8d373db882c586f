//! What a forge grants its adapter, call by call (`ForgeGrant`): the forge's own hosts and
//! webhook secret with no instance table, never another forge's; a refused host named in the
//! call's error; functions an adapter leaves out counted apart from errors.

use serde_json::json;

use super::fake_http::fake_server;
use super::*;
use crate::config::Origin;
use crate::error::PluginError;
use crate::types::*;

/// A host with the GitHub adapter and no grants at all (an unlisted file).
async fn bare_github() -> (tempfile::TempDir, PluginHost) {
    let dir = plugin_dir(&[("forge-github.wasm", "forge-github")]);
    let cfg = config(dir.path(), vec![("github", instance("forge-github.wasm"))]);
    let host = host(cfg, MapSecrets::default()).await;
    (dir, host)
}

fn grant(id: i64, origin: &str, secret: &str) -> ForgeGrant {
    ForgeGrant {
        label: format!("forge {id}"),
        origins: vec![Origin::parse(origin).unwrap()],
        hook_secret: Some(NamedSecret {
            name: format!("forge:{id}"),
            value: secret.as_bytes().to_vec(),
        }),
        config: [("api-url".to_string(), format!("{origin}/api/v3"))].into(),
    }
}

fn ctx_for(origin: &str, grant: ForgeGrant) -> ApiContext {
    ApiContext {
        forge_url: origin.to_string(),
        token: "tok".into(),
        skip_verify: false,
        grant,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forge_grants_its_own_hosts_and_never_another_forges() {
    let repo = json!({"id": 9, "name": "r", "full_name": "o/r", "owner": {"login": "o"},
        "clone_url": "x", "html_url": "x", "default_branch": "main", "private": false});
    let (a, seen_a) = fake_server({
        let repo = repo.clone();
        move |_| (200, repo.to_string())
    })
    .await;
    let (b, seen_b) = fake_server(move |_| (200, repo.to_string())).await;
    let (_dir, host) = bare_github().await;

    let found = host
        .repo_info("github", ctx_for(&a, grant(1, &a, "sa")), "o/r")
        .await
        .unwrap();
    assert_eq!(found.name, "r", "forge 1's call reaches forge 1's host");
    assert_eq!(seen_a.lock().unwrap().len(), 1);

    // Forge 1's grant, but forge 2's API root: the host refuses and the error says which
    // plugin, which host and how to allow it.
    let mut crossed = grant(1, &a, "sa");
    crossed
        .config
        .insert("api-url".into(), format!("{b}/api/v3"));
    let err = host
        .repo_info("github", ctx_for(&a, crossed), "o/r")
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::HostDenied { .. }), "{err:?}");
    let text = err.to_string();
    let b_origin = Origin::parse(&b).unwrap().to_string();
    for part in [
        "\"github\"",
        b_origin.as_str(),
        "repo-info for forge 1",
        "allowed_hosts",
    ] {
        assert!(text.contains(part), "{text:?} names {part:?}");
    }
    assert!(
        seen_b.lock().unwrap().is_empty(),
        "forge 2 was never called"
    );

    // No forge at all: nothing is granted.
    let err = host
        .repo_info("github", ctx_for(&a, ForgeGrant::default()), "o/r")
        .await
        .unwrap_err();
    assert!(matches!(err, PluginError::HostDenied { .. }), "{err:?}");
}

fn signed_push(secret: &str) -> HookRequest {
    let body = fixture("github-push.json");
    let sig = format!("sha256={}", hmac_sha256_hex(secret, &body));
    HookRequest::post(
        "/api/hook?forge=1",
        &[
            ("Content-Type", "application/json"),
            ("X-GitHub-Event", "push"),
            ("X-GitHub-Delivery", "d-1"),
            ("X-Hub-Signature-256", &sig),
        ],
        body,
    )
}

/// Whether the adapter verified the delivery's signature: a signature that does not match
/// the secret it may use is an error (`denied`), none to check with an unverified build.
fn verified(outcome: Result<HookOutcome, PluginError>) -> bool {
    match outcome {
        Ok(HookOutcome::Build(b)) => b.signature_verified,
        Ok(HookOutcome::Ignored(r)) => panic!("ignored: {r}"),
        Err(e) => {
            assert_eq!(e.kind(), Some(crate::error::ErrorKind::Denied), "{e}");
            false
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forges_webhook_secret_verifies_its_deliveries_only() {
    let (_dir, host) = bare_github().await;
    let forge_1 = grant(1, "https://one.example.com", "secret of forge one");
    let out = host
        .parse_hook_for(
            "github",
            signed_push("secret of forge one"),
            forge_1.clone(),
        )
        .await;
    assert!(verified(out), "forge 1's secret, granted by forge 1");
    let out = host
        .parse_hook_for("github", signed_push("secret of forge two"), forge_1)
        .await;
    assert!(!verified(out), "signed with another forge's secret");
    let out = host
        .parse_hook("github", signed_push("secret of forge one"))
        .await;
    assert!(!verified(out), "no forge, no table: no secret");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_for_one_forge_cannot_use_another_forges_secret_even_if_the_instance_may() {
    let dir = plugin_dir(&[("forge-github.wasm", "forge-github")]);
    let mut inst = instance("forge-github.wasm");
    inst.secrets = vec!["forge:2".into()];
    inst.config.insert("hook-secret".into(), "forge:2".into());
    let secrets = MapSecrets::default().with("forge:2", "secret of forge two");
    let host = host(config(dir.path(), vec![("github", inst)]), secrets).await;
    // The instance table's name is overridden by forge 1's own secret ...
    let forge_1 = grant(1, "https://one.example.com", "secret of forge one");
    let out = host
        .parse_hook_for(
            "github",
            signed_push("secret of forge two"),
            forge_1.clone(),
        )
        .await;
    assert!(!verified(out));
    // ... and without a secret of its own, forge 1's call may still not use forge 2's.
    let mut no_secret = forge_1;
    no_secret.hook_secret = None;
    let out = host
        .parse_hook_for("github", signed_push("secret of forge two"), no_secret)
        .await;
    assert!(
        !verified(out),
        "forge 2's secret refused in a call for forge 1"
    );
    // Without a forge the instance's grant holds, as before.
    let out = host
        .parse_hook("github", signed_push("secret of forge two"))
        .await;
    assert!(verified(out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_functions_are_counted_apart_from_errors() {
    let dir = tempfile::tempdir().unwrap();
    let frozen = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../plugins/testing/frozen/forge-github-0.1.0.wasm");
    std::fs::copy(frozen, dir.path().join("forge-github-0.1.0.wasm")).unwrap();
    let cfg = config(
        dir.path(),
        vec![("old", instance("forge-github-0.1.0.wasm"))],
    );
    let host = host(cfg, MapSecrets::default()).await;
    for _ in 0..2 {
        let err = host
            .current_user(
                "old",
                ctx_for("https://x.example.com", ForgeGrant::default()),
            )
            .await
            .unwrap_err();
        assert!(err.is_unsupported(), "{err:?}");
    }
    let info = host.list().into_iter().find(|p| p.name == "old").unwrap();
    assert_eq!(info.calls.errors, 0);
    assert_eq!(info.calls.unsupported, 2);
    assert_eq!(info.calls.unsupported_by_function["current-user"], 2);
}
