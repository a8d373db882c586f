//! The secret-backend and registry-auth worlds end to end, and calls to the wrong world.

use super::*;
use crate::error::PluginError;
use crate::types::*;

async fn worlds_host() -> (tempfile::TempDir, PluginHost) {
    let dir = plugin_dir(&[
        ("secrets.wasm", "testing/secrets-kv"),
        ("registry.wasm", "testing/registry-config"),
        ("github.wasm", "forge-github"),
    ]);
    let mut secrets = instance("secrets.wasm");
    secrets.world = Some(WorldKind::SecretBackend);
    secrets.config.insert("names".into(), "deploy_key".into());
    secrets
        .config
        .insert("secret.deploy_key".into(), "s3cr3t".into());
    let mut registry = instance("registry.wasm");
    registry.config.insert("address".into(), "ghcr.io".into());
    registry.config.insert("username".into(), "bot".into());
    registry.config.insert("password".into(), "hunter2".into());
    let cfg = config(
        dir.path(),
        vec![
            ("vault", secrets),
            ("ghcr", registry),
            ("github", instance("github.wasm")),
        ],
    );
    let host = host(cfg, MapSecrets::default()).await;
    (dir, host)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_backend_uses_kv_across_calls() {
    let (_d, host) = worlds_host().await;
    let scope = SecretScope {
        org: "acme".into(),
        repo: "acme/app".into(),
        event: "push".into(),
    };
    let first = host.list_secrets("vault", scope.clone()).await.unwrap();
    assert_eq!(first[0].name, "calls");
    assert_eq!(first[0].value, "1");
    assert_eq!(first[1].name, "deploy_key");
    assert_eq!(first[1].value, "s3cr3t");
    assert_eq!(first[1].events, vec!["push"]);
    assert!(
        !format!("{:?}", first[1]).contains("s3cr3t"),
        "Debug must redact values"
    );
    // Fresh instance per call, state kept in the host's kv.
    let second = host
        .get_secret("vault", scope, "calls")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.value, "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_auth_answers_by_registry_host() {
    let (_d, host) = worlds_host().await;
    let c = host
        .credential_for("ghcr", "ghcr.io/acme/tool:1", "acme/app")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (c.address.as_str(), c.username.as_str(), c.password.as_str()),
        ("ghcr.io", "bot", "hunter2")
    );
    assert!(
        host.credential_for("ghcr", "docker.io/library/alpine", "acme/app")
            .await
            .unwrap()
            .is_none()
    );
    let list = host.list();
    let worlds: Vec<_> = list.iter().map(|p| (p.name.as_str(), p.world)).collect();
    assert_eq!(
        worlds,
        vec![
            ("ghcr", Some(WorldKind::RegistryAuth)),
            ("github", Some(WorldKind::ForgeAdapter)),
            ("vault", Some(WorldKind::SecretBackend)),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calling_the_wrong_world_is_an_error_not_a_trap() {
    let (_d, host) = worlds_host().await;
    let err = host
        .parse_hook("vault", HookRequest::post("/", &[], "{}"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            PluginError::WrongWorld {
                expected: WorldKind::ForgeAdapter,
                actual: WorldKind::SecretBackend,
                ..
            }
        ),
        "{err}"
    );
    let err = host.credential_for("github", "x", "y").await.unwrap_err();
    assert!(matches!(err, PluginError::WrongWorld { .. }), "{err}");
    assert!(matches!(
        host.list_secrets("nope", SecretScope::default())
            .await
            .unwrap_err(),
        PluginError::NotLoaded(_)
    ));
    // Forge detection only asks forge adapters.
    assert_eq!(
        host.names(WorldKind::ForgeAdapter),
        vec!["github".to_string()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_file_config_for_the_offline_bench() {
    let cfg = PluginsConfig::single_file(&component("forge-gitlab"), "bench");
    let host = PluginHost::new(cfg, services(MapSecrets::default())).unwrap();
    let h = host.clone();
    let report = tokio::task::spawn_blocking(move || h.reload())
        .await
        .unwrap();
    assert!(
        matches!(report[0].1, crate::ReloadAction::Loaded { .. }),
        "{report:?}"
    );
    let req = HookRequest::post(
        "/",
        &[("X-Gitlab-Event", "Push Hook")],
        fixture("gitlab-push.json"),
    );
    let out = host.parse_hook("bench", req).await.unwrap();
    let json = serde_json::to_value(&out).unwrap();
    assert_eq!(json["build"]["pipeline"]["event"], "push");
    assert_eq!(json["build"]["signature_verified"], false);
}
