//! Hostile and broken plugins are contained: each failure hits that call only.

use std::io::{Read, Write};
use std::net::TcpListener;

use super::*;
use crate::error::{ErrorKind, LoadError, PluginError};
use crate::host::ReloadAction;
use crate::types::*;

fn mode(m: &str) -> HookRequest {
    HookRequest::post("/api/hook", &[("x-hostile-mode", m)], "{}")
}

async fn hostile_host(
    timeout_ms: u64,
    memory_mb: u64,
    allowed: Vec<String>,
) -> (tempfile::TempDir, PluginHost) {
    let dir = plugin_dir(&[
        ("hostile.wasm", "testing/forge-hostile"),
        ("forge-github.wasm", "forge-github"),
    ]);
    let mut hostile = instance("hostile.wasm");
    hostile.timeout_ms = Some(timeout_ms);
    hostile.memory_mb = Some(memory_mb);
    hostile.allowed_hosts = allowed;
    let cfg = config(
        dir.path(),
        vec![
            ("hostile", hostile),
            ("github", instance("forge-github.wasm")),
        ],
    );
    let host = host(cfg, MapSecrets::default()).await;
    (dir, host)
}

async fn still_healthy(host: &PluginHost) {
    assert_eq!(
        host.parse_hook("hostile", mode("calm")).await.unwrap(),
        HookOutcome::Ignored("hostile: calm".into())
    );
    let req = HookRequest::post(
        "/",
        &[("X-GitHub-Event", "push")],
        fixture("github-push.json"),
    );
    assert!(matches!(
        host.parse_hook("github", req).await.unwrap(),
        HookOutcome::Build(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infinite_loop_hits_the_deadline() {
    let (_d, host) = hostile_host(300, 64, vec![]).await;
    let started = std::time::Instant::now();
    let err = host.parse_hook("hostile", mode("loop")).await.unwrap_err();
    assert!(
        matches!(
            err,
            PluginError::Timeout {
                timeout_ms: 300,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(err.is_fault());
    still_healthy(&host).await;
    let info = host
        .list()
        .into_iter()
        .find(|p| p.name == "hostile")
        .unwrap();
    assert_eq!(
        (info.calls.timeouts, info.calls.faults, info.calls.in_flight),
        (1, 1, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_bomb_is_stopped() {
    let (_d, host) = hostile_host(5000, 16, vec![]).await;
    let err = host.parse_hook("hostile", mode("bomb")).await.unwrap_err();
    assert!(
        matches!(err, PluginError::MemoryLimit { memory_mb: 16, .. }),
        "{err}"
    );
    still_healthy(&host).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_fails_only_that_call() {
    let (_d, host) = hostile_host(2000, 64, vec![]).await;
    let err = host.parse_hook("hostile", mode("trap")).await.unwrap_err();
    assert!(matches!(err, PluginError::Trap { .. }), "{err}");
    still_healthy(&host).await;
    // Concurrent calls with one of them trapping: the others succeed.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let h = host.clone();
        tasks.push(tokio::spawn(async move {
            h.parse_hook("hostile", mode(if i == 3 { "trap" } else { "calm" }))
                .await
        }));
    }
    let results: Vec<_> = futures_join(tasks).await;
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 5);
}

async fn futures_join<T: Send + 'static>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_output_and_input_are_refused() {
    let (_d, host) = hostile_host(5000, 64, vec![]).await;
    let err = host.parse_hook("hostile", mode("huge")).await.unwrap_err();
    assert!(
        matches!(err, PluginError::TooLarge { what: "output", .. }),
        "{err}"
    );
    assert!(err.is_fault());
    let big = HookRequest::post("/", &[("x-hostile-mode", "calm")], vec![b'x'; 9 << 20]);
    let err = host.parse_hook("hostile", big).await.unwrap_err();
    assert!(
        matches!(
            err,
            PluginError::TooLarge {
                what: "input: request body",
                ..
            }
        ),
        "{err}"
    );
    // A log flood is truncated and rate-limited, not fatal.
    assert_eq!(
        host.parse_hook("hostile", mode("log-flood")).await.unwrap(),
        HookOutcome::Ignored("flooded".into())
    );
    still_healthy(&host).await;
}

/// A one-shot HTTP server on 127.0.0.1 answering every connection with `response`.
fn serve(response: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(response.as_bytes());
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_http_is_deny_by_default() {
    let port = serve("HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello");
    let redirect = serve(
        "HTTP/1.1 302 Found\r\nlocation: http://example.com/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    );
    let url = format!("http://127.0.0.1:{port}/x");
    let req = |url: &str| {
        HookRequest::post(
            "/",
            &[("x-hostile-mode", "http"), ("x-hostile-url", url)],
            "{}",
        )
    };

    // No grants: denied.
    let (_d, host) = hostile_host(3000, 64, vec![]).await;
    let err = host.parse_hook("hostile", req(&url)).await.unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::Denied), "{err}");

    // Granted origin: allowed; a redirect to an ungranted origin is denied.
    let (_d2, host) = hostile_host(
        3000,
        64,
        vec![
            format!("http://127.0.0.1:{port}"),
            format!("http://127.0.0.1:{redirect}"),
        ],
    )
    .await;
    assert_eq!(
        host.parse_hook("hostile", req(&url)).await.unwrap(),
        HookOutcome::Ignored("http 200: hello".into())
    );
    let err = host
        .parse_hook("hostile", req(&format!("http://127.0.0.1:{redirect}/")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::Denied), "{err}");
    // Same host, other port: a different origin.
    let err = host
        .parse_hook("hostile", req("http://127.0.0.1:1/"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::Denied), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_components_are_rejected_at_load() {
    let dir = plugin_dir(&[
        ("extra.wasm", "testing/forge-extra-import"),
        ("github.wasm", "forge-github"),
    ]);
    std::fs::write(dir.path().join("garbage.wasm"), b"\0asm this is not wasm").unwrap();
    let mut wrong = instance("github.wasm");
    wrong.world = Some(WorldKind::SecretBackend);
    let cfg = config(
        dir.path(),
        vec![
            ("extra", instance("extra.wasm")),
            ("garbage", instance("garbage.wasm")),
            ("wrong", wrong),
            ("absent", instance("absent.wasm")),
            ("fine", instance("github.wasm")),
        ],
    );
    let host = PluginHost::new(cfg, services(MapSecrets::default())).unwrap();
    let h = host.clone();
    let report: std::collections::BTreeMap<_, _> = tokio::task::spawn_blocking(move || h.reload())
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert!(
        matches!(&report["extra"], ReloadAction::Failed(LoadError::Link(m)) if m.contains("woodlark:host/kv")),
        "{:?}",
        report["extra"]
    );
    assert!(
        matches!(
            &report["garbage"],
            ReloadAction::Failed(LoadError::Compile(_))
        ),
        "{:?}",
        report["garbage"]
    );
    assert!(
        matches!(
            &report["wrong"],
            ReloadAction::Failed(LoadError::WrongWorld {
                configured: WorldKind::SecretBackend,
                actual: WorldKind::ForgeAdapter
            })
        ),
        "{:?}",
        report["wrong"]
    );
    assert_eq!(report["absent"], ReloadAction::Missing);
    assert!(matches!(report["fine"], ReloadAction::Loaded { .. }));

    let list = host.list();
    let row = |n: &str| list.iter().find(|p| p.name == n).unwrap().clone();
    assert!(!row("extra").loaded && row("extra").last_error.unwrap().contains("cannot link"));
    assert!(row("fine").loaded && row("fine").last_error.is_none());
    assert_eq!(row("fine").world, Some(WorldKind::ForgeAdapter));
    assert_eq!(row("fine").version.as_deref(), Some("0.2.0"));
    assert!(row("fine").content_hash.unwrap().starts_with("sha256:"));
    assert!(matches!(
        host.parse_hook("extra", mode("calm")).await.unwrap_err(),
        PluginError::NotLoaded(_)
    ));
    // A second reload does not retry (or re-log) an unchanged broken file.
    let h = host.clone();
    let again: std::collections::BTreeMap<_, _> = tokio::task::spawn_blocking(move || h.reload())
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(again["extra"], ReloadAction::Unchanged);
}
