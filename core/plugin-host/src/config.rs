//! The operator's grants and limits: the `[plugins]` table of `config.toml`.
//!
//! Everything a plugin may do beyond pure computation is granted here, deny by default:
//! which outbound origins its `http-client` may reach, which secret names `signing` may use,
//! which config values it can read, and how much time, memory and concurrency it gets.
//!
//! ```toml
//! [plugins]
//! dir = "plugins/dist"           # watched, non-recursive
//! cache_dir = "data/plugin-cache"
//! debounce_ms = 300
//! [plugins.defaults]
//! timeout_ms = 2000
//! memory_mb = 64
//! max_concurrency = 8
//! [plugins.instances.github]
//! file = "forge-github.wasm"
//! world = "forge-adapter"        # checked against the component's exports
//! allowed_hosts = ["https://api.github.com"]
//! secrets = ["github-hook"]      # names usable through signing.*
//! config = { hook-secret = "github-hook" }
//! ```
//!
//! The server embeds [`PluginsConfig`] under `[plugins]` and calls [`PluginsConfig::validate`]
//! at start-up.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;
use crate::types::WorldKind;

/// `[plugins]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PluginsConfig {
    /// Directory of `*.wasm` components, watched (non-recursively) for changes.
    pub dir: PathBuf,
    /// Where compiled code is cached (`<sha256>-<engine>.cwasm`). Created with mode 0700; only
    /// the server writes here. Empty: no disk cache (compile on every load).
    pub cache_dir: PathBuf,
    /// Watch `dir` and hot-reload changed files.
    pub watch: bool,
    /// Quiet period before a burst of file events triggers a reload.
    pub debounce_ms: u64,
    /// Also load `*.wasm` files that no instance names, as an instance called after the file
    /// stem, with no grants (no hosts, no secrets, no config) and the default limits.
    pub load_unlisted: bool,
    /// Limits for every instance that does not override them.
    pub defaults: Limits,
    /// Configured instances by name (the name the server and `GET /api/plugins` use).
    pub instances: BTreeMap<String, InstanceConfig>,
}

impl Default for PluginsConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("plugins/dist"),
            cache_dir: PathBuf::new(),
            watch: true,
            debounce_ms: 300,
            load_unlisted: true,
            defaults: Limits::default(),
            instances: BTreeMap::new(),
        }
    }
}

/// Per-call limits (`[plugins.defaults]`, overridable per instance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Wall-clock budget of one call, host I/O included (epoch deadline + async timeout).
    pub timeout_ms: u64,
    /// Linear memory a call may grow to; growing beyond traps the call.
    pub memory_mb: u64,
    /// Calls running at once per instance; more wait (up to `timeout_ms`) for a slot.
    pub max_concurrency: u32,
    /// Largest response body the `http-client` hands to the plugin.
    pub max_http_response_bytes: u64,
    /// Largest webhook body (and other inputs) handed to the plugin.
    pub max_input_bytes: u64,
    /// Largest result (serialized size) accepted from the plugin.
    pub max_output_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            timeout_ms: 2000,
            memory_mb: 64,
            max_concurrency: 8,
            max_http_response_bytes: 4 << 20,
            max_input_bytes: 8 << 20,
            max_output_bytes: 1 << 20,
        }
    }
}

impl Limits {
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

/// `[plugins.instances.<name>]`: one loaded plugin and what it is granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceConfig {
    /// Component file name inside `dir` (no directories), e.g. `forge-github.wasm`.
    pub file: String,
    /// The world the component must export; when omitted it is taken from the component.
    #[serde(default)]
    pub world: Option<WorldKind>,
    /// Origins the `http-client` may reach: `https://api.github.com`, `http://10.0.0.5:3000`.
    /// Empty (the default): no outbound HTTP at all.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Secret names `signing.verify`/`signing.equals` may use. Values come from the server's
    /// secret source and never enter the plugin.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Values the plugin reads through `config.get` (e.g. `hook-secret`, `api-url`).
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Per-instance overrides of `[plugins.defaults]`.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub memory_mb: Option<u64>,
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    #[serde(default)]
    pub max_http_response_bytes: Option<u64>,
}

impl InstanceConfig {
    /// An instance for `file` with no grants (used for unlisted files).
    pub fn bare(file: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            world: None,
            allowed_hosts: Vec::new(),
            secrets: Vec::new(),
            config: BTreeMap::new(),
            timeout_ms: None,
            memory_mb: None,
            max_concurrency: None,
            max_http_response_bytes: None,
        }
    }

    /// The defaults with this instance's overrides applied.
    pub fn limits(&self, defaults: &Limits) -> Limits {
        Limits {
            timeout_ms: self.timeout_ms.unwrap_or(defaults.timeout_ms),
            memory_mb: self.memory_mb.unwrap_or(defaults.memory_mb),
            max_concurrency: self.max_concurrency.unwrap_or(defaults.max_concurrency),
            max_http_response_bytes: self
                .max_http_response_bytes
                .unwrap_or(defaults.max_http_response_bytes),
            ..*defaults
        }
    }
}

/// A parsed `allowed_hosts` entry: scheme, lower-case host and explicit-or-default port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    pub scheme: String,
    pub host: String,
    pub port: u16,
}

impl Origin {
    /// Parses `scheme://host[:port]` (a trailing `/` is tolerated; paths are not).
    pub fn parse(s: &str) -> Result<Self, String> {
        let uri: http::Uri = s
            .trim_end_matches('/')
            .parse()
            .map_err(|e| format!("{s:?} is not a URL: {e}"))?;
        let scheme = uri
            .scheme_str()
            .ok_or_else(|| format!("{s:?} has no scheme"))?;
        if scheme != "http" && scheme != "https" {
            return Err(format!("{s:?}: only http and https are allowed"));
        }
        let host = uri.host().ok_or_else(|| format!("{s:?} has no host"))?;
        if uri
            .path_and_query()
            .is_some_and(|p| p.as_str() != "/" && !p.as_str().is_empty())
        {
            return Err(format!(
                "{s:?}: give an origin (scheme://host[:port]), not a path"
            ));
        }
        Ok(Self::from_uri_parts(scheme, host, uri.port_u16()))
    }

    /// The origin of a request URL.
    pub fn of(uri: &http::Uri) -> Option<Self> {
        Some(Self::from_uri_parts(
            uri.scheme_str()?,
            uri.host()?,
            uri.port_u16(),
        ))
    }

    fn from_uri_parts(scheme: &str, host: &str, port: Option<u16>) -> Self {
        let scheme = scheme.to_ascii_lowercase();
        let default = if scheme == "https" { 443 } else { 80 };
        Self {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_ascii_lowercase(),
            port: port.unwrap_or(default),
            scheme,
        }
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

impl PluginsConfig {
    /// Loads only the component at `path`, as instance `name`, with no grants, no watching
    /// and no disk cache: what `woodlark plugin run-hook --plugin FILE.wasm` needs. Call
    /// [`crate::PluginHost::reload`] and look at its report for the load error, if any.
    pub fn single_file(path: &std::path::Path, name: &str) -> Self {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        Self {
            dir: dir.to_path_buf(),
            cache_dir: PathBuf::new(),
            watch: false,
            load_unlisted: false,
            instances: [(name.to_string(), InstanceConfig::bare(file))].into(),
            ..Self::default()
        }
    }

    /// Checks names, files, origins and limits; the first problem is returned with the key
    /// it concerns.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |key: String, msg: String| ConfigError { key, message: msg };
        check_limits(&self.defaults, "plugins.defaults").map_err(|(k, m)| err(k, m))?;
        if self.debounce_ms > 60_000 {
            return Err(err("plugins.debounce_ms".into(), "at most 60000".into()));
        }
        for (name, inst) in &self.instances {
            let key = |f: &str| format!("plugins.instances.{name}.{f}");
            if !valid_name(name) {
                return Err(err(
                    format!("plugins.instances.{name}"),
                    "instance names use a-z, 0-9, '-' and '_' (at most 64)".into(),
                ));
            }
            if inst.file.is_empty()
                || inst.file.contains(['/', '\\'])
                || inst.file.starts_with('.')
                || !inst.file.ends_with(".wasm")
            {
                return Err(err(
                    key("file"),
                    "a file name inside `dir` ending in .wasm".into(),
                ));
            }
            for h in &inst.allowed_hosts {
                Origin::parse(h).map_err(|m| err(key("allowed_hosts"), m))?;
            }
            for s in &inst.secrets {
                if s.is_empty() {
                    return Err(err(key("secrets"), "empty secret name".into()));
                }
            }
            check_limits(
                &inst.limits(&self.defaults),
                &format!("plugins.instances.{name}"),
            )
            .map_err(|(k, m)| err(k, m))?;
        }
        Ok(())
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

fn check_limits(l: &Limits, at: &str) -> Result<(), (String, String)> {
    let bad = |f: &str, m: &str| Err((format!("{at}.{f}"), m.to_string()));
    if !(1..=600_000).contains(&l.timeout_ms) {
        return bad("timeout_ms", "between 1 and 600000");
    }
    if !(1..=4096).contains(&l.memory_mb) {
        return bad("memory_mb", "between 1 and 4096");
    }
    if !(1..=1024).contains(&l.max_concurrency) {
        return bad("max_concurrency", "between 1 and 1024");
    }
    if l.max_http_response_bytes == 0 || l.max_http_response_bytes > 1 << 30 {
        return bad("max_http_response_bytes", "between 1 and 1073741824");
    }
    if l.max_input_bytes == 0 || l.max_input_bytes > 1 << 30 {
        return bad("max_input_bytes", "between 1 and 1073741824");
    }
    if l.max_output_bytes == 0 || l.max_output_bytes > 1 << 30 {
        return bad("max_output_bytes", "between 1 and 1073741824");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let text = r#"
dir = "plugins.d"
cache_dir = "data/plugin-cache"
debounce_ms = 300
[defaults]
timeout_ms = 2000
memory_mb = 64
max_concurrency = 8
max_http_response_bytes = 4_194_304
[instances.github]
file = "forge-github.wasm"
world = "forge-adapter"
allowed_hosts = ["https://api.github.com"]
secrets = ["github-hook"]
config = { hook-secret = "github-hook" }
timeout_ms = 500
"#;
        let cfg: PluginsConfig = toml::from_str(text).unwrap();
        cfg.validate().unwrap();
        let gh = &cfg.instances["github"];
        assert_eq!(gh.world, Some(WorldKind::ForgeAdapter));
        assert_eq!(gh.limits(&cfg.defaults).timeout_ms, 500);
        assert_eq!(gh.limits(&cfg.defaults).memory_mb, 64);
    }

    #[test]
    fn rejects_unknown_keys_and_bad_values() {
        assert!(toml::from_str::<PluginsConfig>("dri = 'x'").is_err());
        let cfg: PluginsConfig =
            toml::from_str("[instances.a]\nfile = 'a.wasm'\nallowed_hosts = ['ftp://x']").unwrap();
        let e = cfg.validate().unwrap_err();
        assert_eq!(e.key, "plugins.instances.a.allowed_hosts");
        let cfg: PluginsConfig = toml::from_str("[instances.a]\nfile = '../a.wasm'").unwrap();
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn origins_normalise_default_ports() {
        let a = Origin::parse("https://API.github.com/").unwrap();
        let b = Origin::of(&"https://api.github.com:443/repos".parse().unwrap()).unwrap();
        assert_eq!(a, b);
        assert!(Origin::parse("https://x/path").is_err());
    }
}
