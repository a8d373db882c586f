//! Hot reload through the watched directory, in-flight calls, and the compile cache.

use std::path::Path;
use std::time::{Duration, Instant};

use super::*;
use crate::host::ReloadAction;
use crate::types::*;

/// Writes `comp` to `dir/file` the safe way: a temporary name, then a rename.
fn install(dir: &Path, file: &str, comp: &str) {
    let tmp = dir.join(format!("{file}.tmp"));
    std::fs::copy(component(comp), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join(file)).unwrap();
}

/// Polls `cond` for up to 5 s (the issue asks for changes visible within 2 s; the margin
/// absorbs a loaded CI machine compiling a component for the first time).
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if cond() {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn row(host: &PluginHost, name: &str) -> Option<crate::PluginInfo> {
    host.list().into_iter().find(|p| p.name == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_replace_break_and_delete_without_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), vec![]);
    cfg.watch = true;
    cfg.load_unlisted = true;
    let host = host(cfg, MapSecrets::default()).await;
    assert!(host.list().is_empty());

    // Add.
    install(dir.path(), "forge.wasm", "forge-github");
    let took = eventually("forge loaded", || {
        row(&host, "forge").is_some_and(|r| r.loaded)
    })
    .await;
    eprintln!("add visible after {took:?}");
    let gh_hash = row(&host, "forge").unwrap().content_hash.unwrap();
    let gh_req = || {
        HookRequest::post(
            "/",
            &[("X-GitHub-Event", "push")],
            fixture("github-push.json"),
        )
    };
    assert!(matches!(
        host.parse_hook("forge", gh_req()).await.unwrap(),
        HookOutcome::Build(_)
    ));

    // Replace by rename with a different adapter: new behaviour, new hash.
    install(dir.path(), "forge.wasm", "forge-gitlab");
    let took = eventually("forge replaced", || {
        row(&host, "forge")
            .and_then(|r| r.content_hash)
            .is_some_and(|h| h != gh_hash)
    })
    .await;
    eprintln!("replace visible after {took:?}");
    let err = host.parse_hook("forge", gh_req()).await.unwrap_err();
    assert_eq!(
        err.kind(),
        Some(crate::ErrorKind::InvalidInput),
        "gitlab adapter now answers: {err}"
    );
    let gl_hash = row(&host, "forge").unwrap().content_hash.unwrap();

    // A broken file keeps the previous version and records the error.
    std::fs::write(
        dir.path().join("forge.wasm.tmp"),
        b"\0asm\x0d\0\x01\0garbage",
    )
    .unwrap();
    std::fs::rename(
        dir.path().join("forge.wasm.tmp"),
        dir.path().join("forge.wasm"),
    )
    .unwrap();
    eventually("error recorded", || {
        row(&host, "forge").is_some_and(|r| r.last_error.is_some())
    })
    .await;
    let r = row(&host, "forge").unwrap();
    assert!(r.loaded);
    assert_eq!(r.content_hash.as_deref(), Some(gl_hash.as_str()));
    assert!(
        r.last_error
            .unwrap()
            .contains("not a valid WebAssembly component")
    );

    // Delete: unloaded.
    std::fs::remove_file(dir.path().join("forge.wasm")).unwrap();
    eventually("forge unloaded", || row(&host, "forge").is_none()).await;
    assert!(matches!(
        host.parse_hook("forge", gh_req()).await.unwrap_err(),
        crate::PluginError::NotLoaded(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_calls_finish_on_the_old_version() {
    let dir = plugin_dir(&[("p.wasm", "testing/forge-hostile")]);
    let host = host(
        config(dir.path(), vec![("p", instance("p.wasm"))]),
        MapSecrets::default(),
    )
    .await;
    let h = host.clone();
    let slow = tokio::spawn(async move {
        h.parse_hook(
            "p",
            HookRequest::post("/", &[("x-hostile-mode", "slow")], "{}"),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    install(dir.path(), "p.wasm", "forge-github");
    let h = host.clone();
    let report = tokio::task::spawn_blocking(move || h.reload())
        .await
        .unwrap();
    assert!(
        matches!(report[0].1, ReloadAction::Loaded { .. }),
        "{report:?}"
    );
    // The new version answers new calls while the old call is still running...
    let err = host
        .parse_hook(
            "p",
            HookRequest::post("/", &[("x-hostile-mode", "slow")], "{}"),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("X-GitHub-Event"), "{err}");
    // ...and the old call completes on the old code.
    assert_eq!(
        slow.await.unwrap().unwrap(),
        HookOutcome::Ignored("hostile: slow done".into())
    );
    let info = row(&host, "p").unwrap();
    assert_eq!(info.calls.total, 2);
    assert_eq!(info.calls.in_flight, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_code_is_cached_privately() {
    let dir = plugin_dir(&[("gh.wasm", "forge-github")]);
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().join("cache");
    let mut cfg = config(dir.path(), vec![("gh", instance("gh.wasm"))]);
    cfg.cache_dir = cache_dir.clone();
    let first = host(cfg.clone(), MapSecrets::default()).await;
    let entries: Vec<_> = std::fs::read_dir(&cache_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let hash = row(&first, "gh").unwrap().content_hash.unwrap();
    let name = entries[0]
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        name.starts_with(hash.trim_start_matches("sha256:")) && name.ends_with(".cwasm"),
        "{name}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&cache_dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
    // A second host loads from the cache and works the same.
    let second = host(cfg, MapSecrets::default()).await;
    let req = HookRequest::post(
        "/",
        &[("X-GitHub-Event", "push")],
        fixture("github-push.json"),
    );
    assert!(matches!(
        second.parse_hook("gh", req).await.unwrap(),
        HookOutcome::Build(_)
    ));
}
