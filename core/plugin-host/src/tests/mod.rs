//! Tests against the real components built from `plugins/` (built by `plugins/build.sh` on
//! first use when `plugins/dist` lacks them).
//!
//! - `forges`: captured webhook payloads per forge, signatures, detection;
//! - `events`: every forge × event mapping, ignored cases;
//! - `adapters`: one test per event type per adapter, field by field against upstream's parsers;
//! - `hostile`: loops, memory bombs, traps, huge outputs, denied hosts, bad components;
//! - `reload`: hot reload through the watched directory, in-flight calls, the cache;
//! - `worlds`: the secret-backend and registry-auth worlds, kv, world mismatches;
//! - `first_party_backends`: the Vault, static-secrets, static-registry and token-exchange
//!   plugins against in-test HTTP servers (`fake_http`);
//! - `forge_api`: the forge adapters' API calls (branch heads, webhooks, PR changed files)
//!   against fake forges.

mod adapters;
mod events;
mod fake_http;
mod first_party_backends;
mod forge_api;
mod forge_grants;
mod forge_signin;
mod forge_signin_bitbucket;
mod forge_signin_bitbucket_dc;
mod forge_signin_gitea;
mod forge_signin_gitlab;
mod forges;
mod hostile;
mod reload;
mod worlds;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::config::{InstanceConfig, PluginsConfig};
use crate::host::{HostServices, PluginHost};
use crate::services::{MapSecrets, MemoryKv};

/// `plugins/dist`, built if a component is missing (once per test process).
pub(crate) fn dist() -> &'static Path {
    static DIST: OnceLock<PathBuf> = OnceLock::new();
    static BUILD: Mutex<()> = Mutex::new(());
    DIST.get_or_init(|| {
        let _g = BUILD.lock().unwrap_or_else(|p| p.into_inner());
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins");
        let dist = root.join("dist");
        let needed = [
            "forge-github.wasm",
            "forge-gitea.wasm",
            "forge-forgejo.wasm",
            "forge-gitlab.wasm",
            "forge-bitbucket.wasm",
            "forge-bitbucket-dc.wasm",
            "secrets-vault.wasm",
            "secrets-static.wasm",
            "registry-static.wasm",
            "registry-token.wasm",
            "testing/forge-hostile.wasm",
            "testing/forge-extra-import.wasm",
            "testing/secrets-kv.wasm",
            "testing/registry-config.wasm",
        ];
        if needed.iter().any(|f| !dist.join(f).is_file()) {
            let status = std::process::Command::new("bash")
                .arg(root.join("build.sh"))
                .status()
                .expect("running plugins/build.sh");
            assert!(status.success(), "plugins/build.sh failed");
        }
        dist
    })
}

/// A component from `plugins/dist` (e.g. `forge-github` or `testing/forge-hostile`).
pub(crate) fn component(name: &str) -> PathBuf {
    dist().join(format!("{name}.wasm"))
}

/// A shared compile cache so each component is compiled once per test run.
pub(crate) fn cache_dir() -> PathBuf {
    std::env::temp_dir().join("woodlark-plugin-host-test-cache")
}

/// A plugin directory with `files` copied in as `(file name, component)`.
pub(crate) fn plugin_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (file, comp) in files {
        std::fs::copy(component(comp), dir.path().join(file)).unwrap();
    }
    dir
}

pub(crate) fn config(dir: &Path, instances: Vec<(&str, InstanceConfig)>) -> PluginsConfig {
    PluginsConfig {
        dir: dir.to_path_buf(),
        cache_dir: cache_dir(),
        watch: false,
        debounce_ms: 100,
        load_unlisted: false,
        instances: instances
            .into_iter()
            .map(|(n, i)| (n.to_string(), i))
            .collect(),
        ..PluginsConfig::default()
    }
}

pub(crate) fn instance(file: &str) -> InstanceConfig {
    InstanceConfig::bare(file)
}

pub(crate) fn services(secrets: MapSecrets) -> HostServices {
    HostServices {
        kv: std::sync::Arc::new(MemoryKv::default()),
        secrets: std::sync::Arc::new(secrets),
    }
}

/// A host over `cfg`, loaded once (no watcher unless `cfg.watch`).
pub(crate) async fn host(cfg: PluginsConfig, secrets: MapSecrets) -> PluginHost {
    PluginHost::start(cfg, services(secrets)).await.unwrap()
}

pub(crate) fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/tests/fixtures")
            .join(name),
    )
    .unwrap()
}

pub(crate) fn hmac_sha256_hex(key: &str, body: &[u8]) -> String {
    use hmac::{Hmac, Mac};
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(key.as_bytes()).unwrap();
    m.update(body);
    crate::loader::hex(&m.finalize().into_bytes())
}

#[test]
fn wit_version_matches_the_host() {
    // The root package in wit/ must be the one this host implements, and no package may be
    // newer (Zed shipped an API version without widening its host range once; this guards
    // against that). Older versions stay beside it for the plugins built against them.
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../wit");
    let worlds = std::fs::read_to_string(wit.join("worlds.wit")).unwrap();
    assert!(worlds.contains(&format!("package woodlark:plugins@{};", crate::WIT_VERSION)));
    let semver = |v: &str| -> Vec<u64> { v.split('.').map(|n| n.parse().unwrap()).collect() };
    let host = semver(crate::WIT_VERSION);
    let mut newest = Vec::new();
    for entry in std::fs::read_dir(wit.join("deps")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let (_, version) = name.split_once('@').expect("deps/<package>@<version>");
        let version = semver(version);
        assert!(
            version <= host,
            "wit/deps/{name} is newer than the host supports"
        );
        newest = newest.max(version);
    }
    assert!(newest <= host);
    assert!(!worlds.contains("wasi:"), "no world may import WASI");
}
