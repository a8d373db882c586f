//! `config.toml`: the operator's settings, loaded once at start-up.
//!
//! Loading is two steps, like ripgrep's low-level/high-level args: serde reads the raw file into
//! [`Config`] (every struct denies unknown keys, so a typo stops start-up), then environment
//! overrides are applied and [`Config::validate`] checks values that serde cannot (addresses,
//! mount prefixes, log levels). Every error names the offending key and the file it came from,
//! on one line, because that is what an operator reads first.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::logging::LogLevel;

pub mod backups;
pub mod forges;
mod runner;
mod woodpecker;

pub use forges::{ForgeConfig, ForgeOrigin};
pub use runner::{RunnerConfig, check_sandbox, embedded_runner};

/// `[plugins]`: the plugin directory, the compiled-code cache, limits and per-plugin grants
/// (defined by the plugin host, which owns their meaning).
pub use woodlark_plugin_host::PluginsConfig;

/// Environment variables that override keys of the file (they win over it).
pub const ENV_OVERRIDES: &[(&str, &str)] = &[
    ("WOODLARK_LISTEN", "server.listen"),
    ("WOODLARK_DATA_DIR", "server.data_dir"),
    ("WOODLARK_STORAGE_URL", "storage.url"),
    ("WOODLARK_LOG_LEVEL", "server.log_level"),
    ("WOODLARK_PUBLIC_URL", "server.public_url"),
    ("WOODLARK_ADMINS", "auth.admins"),
    ("WOODLARK_OPEN", "auth.open"),
    ("WOODLARK_PLUGINS_DIR", "plugins.dir"),
    ("WOODLARK_RUNNER_ENABLED", "runner.enabled"),
    ("WOODLARK_RUNNER_BACKEND", "runner.backend"),
];

/// The value of variable `name` in `env` (the last one when set twice).
fn env_value(env: &[(String, String)], name: &str) -> Option<String> {
    env.iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
}

/// A boolean environment variable: `1`/`true` or `0`/`false`.
fn env_bool(value: &str) -> Result<bool, String> {
    match value {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        other => Err(format!("expected true or false, got {other:?}")),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read: {error}")]
    Read { file: String, error: std::io::Error },
    #[error(
        "{file}: no such file; create it (every key is optional: an empty file runs on the \
         defaults, and the repository's config.toml lists them all) or pass --config PATH"
    )]
    Missing { file: String },
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: {key}: {message}")]
    Invalid {
        file: String,
        key: String,
        message: String,
    },
}

/// The whole configuration. Field docs are the reference; `config.toml` repeats them as comments.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub auth: AuthConfig,
    pub ci: ModuleConfig,
    pub events: EventsConfig,
    pub participation: ParticipationConfig,
    pub plugins: PluginsConfig,
    pub pipeline: PipelineConfig,
    pub runner: RunnerConfig,
    /// `[web]`: the browser surface (web UI files, `/web-config.js`, sign-in).
    pub web: WebConfig,
    /// `[[forges]]`: forges applied at start under their ids (plus forge 1 from Woodpecker's
    /// variables, see `woodpecker`).
    pub forges: Vec<ForgeConfig>,
    /// Where the configuration came from, for error messages (not a key).
    #[serde(skip)]
    pub source: String,
    /// What start-up should tell the operator about how the configuration was assembled
    /// (Woodpecker variables used or overridden); not a key.
    #[serde(skip)]
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address the HTTP server binds, `host:port`.
    pub listen: String,
    /// Directory for the database, keys and caches; created if missing.
    pub data_dir: PathBuf,
    /// Initial log level (changeable at run time through `/api/log-level`).
    pub log_level: String,
    /// URL under which forges and agents reach this server (hook URLs are built from it).
    pub public_url: String,
    /// Default request body limit in bytes; routes such as webhooks may allow more.
    pub max_body_bytes: usize,
    /// A client must finish sending request headers within this many milliseconds, counted
    /// from accept for a connection's first request and from the previous response's end
    /// for a later one.
    pub header_read_timeout_ms: u64,
    /// A connection with no request in flight for this many milliseconds (or for
    /// `header_read_timeout_ms`, when shorter) is closed.
    pub idle_timeout_ms: u64,
    /// A client must finish sending a request body within this many milliseconds (408).
    pub body_read_timeout_ms: u64,
    /// On SIGINT/SIGTERM, open connections get this long to finish.
    pub shutdown_grace_ms: u64,
    /// Client connections served at once (lowered to fit the open-file limit); one more is
    /// answered 503 and closed.
    pub max_connections: usize,
    /// Bytes that request bodies from senders not yet authenticated (webhooks checked only
    /// by their forge's signature) may hold at once, all together; past it, 503 with
    /// `Retry-After`. Bounds what a flood of large bodies can take.
    pub unauthenticated_body_budget_bytes: usize,
    /// If set, `GET /metrics` requires `Authorization: Bearer <token>`.
    pub metrics_token: String,
    /// PEM certificate chain; with `tls_key`, the server speaks HTTPS (HTTP/2 by ALPN).
    pub tls_cert: PathBuf,
    /// PEM private key of `tls_cert`.
    pub tls_key: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// "" = SQLite in `data_dir`; `postgres://user:pass@host:port/db?sslmode=verify-full&sslrootcert=…` = that
    /// PostgreSQL database (13 or newer), which several servers may share.
    pub url: String,
    /// Number of read-only connections (the single writer is separate).
    pub readers: usize,
    /// SQLite `synchronous` mode for the writer: "full" or "normal".
    pub synchronous: String,
    /// File holding the key that encrypts secret values at rest ("" = `<data_dir>/secrets.key`).
    pub secret_key_file: PathBuf,
    /// Step log lines older than this many days are removed (0 = keep them).
    pub log_retention_days: u64,
    /// How long `serve` waits for a PostgreSQL database that does not accept connections yet
    /// (started beside it, restarting), answering 503 meanwhile; 0 = fail at once.
    pub wait_for_database_secs: u64,
    /// Where the server writes scheduled backups of its SQLite databases ("" = none), one
    /// directory each, as `woodlark backup` writes them (without the key).
    pub backup_dir: PathBuf,
    /// Hours between scheduled backups; fractions allowed (0.5 = every half hour).
    pub backup_every_hours: f64,
    /// Scheduled backups kept: the newest ones; older ones are removed after each backup.
    pub backup_keep: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[derive(Default)]
pub struct AuthConfig {
    /// Logins that are always instance admins (`admin_env` in the API).
    pub admins: Vec<String>,
    /// Anyone with an account on a forge may sign in through it and gets a user here (as
    /// upstream's `WOODPECKER_OPEN`); when false only existing users and `admins` may.
    pub open: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModuleConfig {
    /// Serve this interface at all.
    pub enabled: bool,
    /// Path prefix the interface's routes are mounted under ("" = root).
    pub mount: String,
}

/// `[pipeline]`: the CI services' own settings type, read from the config as it is (one list
/// of fields, documented where the services use them).
pub type PipelineConfig = crate::ci::PipelineSettings;

/// `[events]`: the events feed and the retention of the outbox behind it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "EventsToml", into = "EventsToml")]
pub struct EventsConfig {
    /// `enabled` and `mount`, as for the other interfaces.
    pub module: ModuleConfig,
    /// Events older than this many days are removed (0 = keep regardless of age).
    pub retention_days: u64,
    /// At most this many events are kept, the newest (0 = no limit).
    pub max_events: u64,
    /// How often the retention task runs, in seconds.
    pub prune_interval_secs: u64,
}

/// The `[events]` table as written in the file.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct EventsToml {
    enabled: bool,
    mount: String,
    retention_days: u64,
    max_events: u64,
    prune_interval_secs: u64,
}

impl Default for EventsToml {
    fn default() -> Self {
        EventsToml {
            enabled: true,
            mount: "/events".into(),
            retention_days: 30,
            max_events: 0,
            prune_interval_secs: 60,
        }
    }
}

impl From<EventsToml> for EventsConfig {
    fn from(t: EventsToml) -> Self {
        EventsConfig {
            module: ModuleConfig {
                enabled: t.enabled,
                mount: t.mount,
            },
            retention_days: t.retention_days,
            max_events: t.max_events,
            prune_interval_secs: t.prune_interval_secs,
        }
    }
}

impl From<EventsConfig> for EventsToml {
    fn from(c: EventsConfig) -> Self {
        EventsToml {
            enabled: c.module.enabled,
            mount: c.module.mount,
            retention_days: c.retention_days,
            max_events: c.max_events,
            prune_interval_secs: c.prune_interval_secs,
        }
    }
}

impl Default for EventsConfig {
    fn default() -> Self {
        EventsToml::default().into()
    }
}

/// `[participation]`: the algod-compatible participation-key interface.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "ParticipationToml", into = "ParticipationToml")]
pub struct ParticipationConfig {
    /// `enabled` and `mount`, as for the other interfaces.
    pub module: ModuleConfig,
    /// algod's admin API token (64-256 visible ASCII characters). "" = read
    /// `<data_dir>/algod.admin.token`, generating it (64 hex characters, mode 0600) if missing.
    pub admin_token: String,
}

/// The `[participation]` table as written in the file.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct ParticipationToml {
    enabled: bool,
    mount: String,
    admin_token: String,
}

impl Default for ParticipationToml {
    fn default() -> Self {
        ParticipationToml {
            enabled: true,
            mount: String::new(),
            admin_token: String::new(),
        }
    }
}

impl From<ParticipationToml> for ParticipationConfig {
    fn from(t: ParticipationToml) -> Self {
        ParticipationConfig {
            module: ModuleConfig {
                enabled: t.enabled,
                mount: t.mount,
            },
            admin_token: t.admin_token,
        }
    }
}

impl From<ParticipationConfig> for ParticipationToml {
    fn from(c: ParticipationConfig) -> Self {
        ParticipationToml {
            enabled: c.module.enabled,
            mount: c.module.mount,
            admin_token: c.admin_token,
        }
    }
}

impl Default for ParticipationConfig {
    fn default() -> Self {
        ParticipationToml::default().into()
    }
}

/// `[web]`: the browser surface: a web UI directory, `/web-config.js`, `/authorize` and
/// `/logout`. Mounted like an interface, with `root_path` as its mount.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "WebToml", into = "WebToml")]
pub struct WebConfig {
    /// `enabled`, and `root_path` as the mount.
    pub module: ModuleConfig,
    /// Directory of a built single-page web UI (with `index.html`); empty = a built-in page.
    pub dir: PathBuf,
    /// Files served as `<root_path>/assets/custom.js` and `custom.css` (empty = empty files).
    pub custom_js: PathBuf,
    pub custom_css: PathBuf,
    /// Lifetime of a browser session, in hours.
    pub session_hours: u64,
}

/// The `[web]` table as written in the file.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct WebToml {
    enabled: bool,
    root_path: String,
    dir: PathBuf,
    custom_js: PathBuf,
    custom_css: PathBuf,
    session_hours: u64,
}

impl Default for WebToml {
    fn default() -> Self {
        WebToml {
            enabled: true,
            root_path: String::new(),
            dir: PathBuf::new(),
            custom_js: PathBuf::new(),
            custom_css: PathBuf::new(),
            session_hours: 72,
        }
    }
}

impl From<WebToml> for WebConfig {
    fn from(t: WebToml) -> Self {
        WebConfig {
            module: ModuleConfig {
                enabled: t.enabled,
                mount: t.root_path,
            },
            dir: t.dir,
            custom_js: t.custom_js,
            custom_css: t.custom_css,
            session_hours: t.session_hours,
        }
    }
}

impl From<WebConfig> for WebToml {
    fn from(c: WebConfig) -> Self {
        WebToml {
            enabled: c.module.enabled,
            root_path: c.module.mount,
            dir: c.dir,
            custom_js: c.custom_js,
            custom_css: c.custom_css,
            session_hours: c.session_hours,
        }
    }
}

impl Default for WebConfig {
    fn default() -> Self {
        WebToml::default().into()
    }
}

impl WebConfig {
    /// The path prefix of the web UI ("" = the server root), Woodpecker's `ROOT_PATH`.
    pub fn root_path(&self) -> &str {
        &self.module.mount
    }
}

/// The longest start-up wait or shutdown grace the configuration accepts, in seconds.
const MAX_WAIT_SECS: u64 = 86_400;

impl Default for Config {
    fn default() -> Self {
        Config {
            server: ServerConfig::default(),
            storage: StorageConfig::default(),
            auth: AuthConfig::default(),
            ci: ModuleConfig::mounted("/api"),
            events: EventsConfig::default(),
            participation: ParticipationConfig::default(),
            plugins: PluginsConfig::default(),
            pipeline: PipelineConfig::default(),
            runner: RunnerConfig::default(),
            web: WebConfig::default(),
            forges: Vec::new(),
            source: "<defaults>".into(),
            notes: Vec::new(),
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8000".into(),
            data_dir: "data".into(),
            log_level: "info".into(),
            public_url: String::new(),
            max_body_bytes: 2 * 1024 * 1024,
            header_read_timeout_ms: 10_000,
            idle_timeout_ms: 75_000,
            body_read_timeout_ms: 30_000,
            shutdown_grace_ms: 10_000,
            max_connections: 4096,
            unauthenticated_body_budget_bytes: crate::http::budget::DEFAULT_BODY_BUDGET,
            metrics_token: String::new(),
            tls_cert: PathBuf::new(),
            tls_key: PathBuf::new(),
        }
    }
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            url: String::new(),
            readers: 4,
            synchronous: "full".into(),
            secret_key_file: PathBuf::new(),
            log_retention_days: 0,
            wait_for_database_secs: 60,
            backup_dir: PathBuf::new(),
            backup_every_hours: 24.0,
            backup_keep: 7,
        }
    }
}

impl ModuleConfig {
    fn mounted(prefix: &str) -> Self {
        ModuleConfig {
            enabled: true,
            mount: prefix.into(),
        }
    }
}

impl Default for ModuleConfig {
    fn default() -> Self {
        ModuleConfig::mounted("")
    }
}

impl Config {
    /// Reads `path`, applies `WOODLARK_*` overrides from the process environment, validates.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => ConfigError::Missing { file: file.clone() },
            _ => ConfigError::Read {
                file: file.clone(),
                error,
            },
        })?;
        let env: Vec<(String, String)> = std::env::vars().collect();
        Config::from_toml(&text, &file, &env)
    }

    /// Parses `text` (named `file` in messages), applies overrides from `env`, validates.
    pub fn from_toml(
        text: &str,
        file: &str,
        env: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::parse(text).map_err(|e| parse_error(file, &e, text))?;
        let mut config: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            ConfigError::Parse {
                file: file.to_string(),
                message: describe_serde_error(&key, &inner, text),
            }
        })?;
        config.source = file.to_string();
        config.apply_env(env)?;
        let table: toml::Table = text.parse().unwrap_or_default();
        let file_sets = |key: &str| {
            let mut at = Some(&table);
            let mut parts = key.split('.').peekable();
            while let Some(part) = parts.next() {
                let value = at.and_then(|t| t.get(part));
                if parts.peek().is_none() {
                    return value.is_some();
                }
                at = value.and_then(|v| v.as_table());
            }
            false
        };
        let invalid = |(key, message): (String, String)| ConfigError::Invalid {
            file: file.to_string(),
            key,
            message,
        };
        woodpecker::apply(&mut config, env, &file_sets).map_err(invalid)?;
        forges::load_all(&mut config.forges, env).map_err(invalid)?;
        config.validate()?;
        Ok(config)
    }

    fn apply_env(&mut self, env: &[(String, String)]) -> Result<(), ConfigError> {
        for (name, value) in env {
            let invalid = |message: String| ConfigError::Invalid {
                file: self.source.clone(),
                key: name.clone(),
                message,
            };
            match name.as_str() {
                "WOODLARK_LISTEN" => self.server.listen = value.clone(),
                "WOODLARK_DATA_DIR" => self.server.data_dir = value.into(),
                "WOODLARK_STORAGE_URL" => self.storage.url = value.clone(),
                "WOODLARK_LOG_LEVEL" => self.server.log_level = value.clone(),
                "WOODLARK_PUBLIC_URL" => self.server.public_url = value.clone(),
                "WOODLARK_ADMINS" => {
                    self.auth.admins = value
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(String::from)
                        .collect()
                }
                "WOODLARK_PLUGINS_DIR" => self.plugins.dir = value.into(),
                "WOODLARK_RUNNER_BACKEND" => {
                    self.runner.backend = value.parse().map_err(|e| invalid(format!("{e}")))?
                }
                "WOODLARK_RUNNER_ENABLED" => {
                    self.runner.enabled = env_bool(value).map_err(invalid)?
                }
                "WOODLARK_OPEN" => self.auth.open = env_bool(value).map_err(invalid)?,
                _ => {}
            }
        }
        Ok(())
    }

    /// Checks the values serde accepted but the server cannot use.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            file: self.source.clone(),
            key: key.to_string(),
            message,
        };
        self.listen_addr()
            .map_err(|m| invalid("server.listen", m))?;
        if self.server.data_dir.as_os_str().is_empty() {
            return Err(invalid("server.data_dir", "must not be empty".into()));
        }
        LogLevel::parse(&self.server.log_level).ok_or_else(|| {
            invalid(
                "server.log_level",
                format!(
                    "unknown level {:?} (expected one of {})",
                    self.server.log_level,
                    LogLevel::NAMES.join(", ")
                ),
            )
        })?;
        let url = &self.server.public_url;
        if !(url.is_empty() || url.starts_with("http://") || url.starts_with("https://")) {
            return Err(invalid(
                "server.public_url",
                format!(
                    "{:?} must start with http:// or https://",
                    self.server.public_url
                ),
            ));
        }
        if self.server.tls_cert.as_os_str().is_empty() != self.server.tls_key.as_os_str().is_empty()
        {
            return Err(invalid(
                "server.tls_cert",
                "tls_cert and tls_key must be given together".into(),
            ));
        }
        if self.server.max_body_bytes < 1024 {
            return Err(invalid(
                "server.max_body_bytes",
                "must be at least 1024".into(),
            ));
        }
        if self.server.header_read_timeout_ms == 0 {
            return Err(invalid(
                "server.header_read_timeout_ms",
                "must be greater than 0".into(),
            ));
        }
        if self.server.idle_timeout_ms == 0 {
            return Err(invalid(
                "server.idle_timeout_ms",
                "must be greater than 0".into(),
            ));
        }
        if self.server.body_read_timeout_ms == 0 {
            return Err(invalid(
                "server.body_read_timeout_ms",
                "must be greater than 0".into(),
            ));
        }
        if !(1..=1_000_000).contains(&self.server.max_connections) {
            return Err(invalid(
                "server.max_connections",
                "must be between 1 and 1000000".into(),
            ));
        }
        if self.server.unauthenticated_body_budget_bytes < 1024 * 1024 {
            return Err(invalid(
                "server.unauthenticated_body_budget_bytes",
                "must be at least 1048576".into(),
            ));
        }
        // A body no budget can hold would be refused as "busy, retry" for ever.
        if self.server.unauthenticated_body_budget_bytes < self.server.max_body_bytes {
            return Err(invalid(
                "server.unauthenticated_body_budget_bytes",
                format!(
                    "must be at least server.max_body_bytes ({}): bodies of unknown senders \
                     are read within it",
                    self.server.max_body_bytes
                ),
            ));
        }
        if self.storage.readers == 0 || self.storage.readers > 64 {
            return Err(invalid(
                "storage.readers",
                "must be between 1 and 64".into(),
            ));
        }
        let url = &self.storage.url;
        if !url.is_empty() && !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
            // Not the URL itself: it may hold a password.
            return Err(invalid(
                "storage.url",
                "must be empty (SQLite in data_dir) or a postgres:// URL".into(),
            ));
        }
        // A day at most: a longer wait is a mistake in the unit, not a plan.
        for (key, secs) in [
            (
                "storage.wait_for_database_secs",
                self.storage.wait_for_database_secs,
            ),
            (
                "runner.shutdown_grace_secs",
                self.runner.shutdown_grace_secs,
            ),
        ] {
            if secs > MAX_WAIT_SECS {
                return Err(invalid(
                    key,
                    format!("must be at most {MAX_WAIT_SECS} (a day)"),
                ));
            }
        }
        backups::validate(&self.storage).map_err(|(key, m)| invalid(key, m))?;
        if !matches!(self.storage.synchronous.as_str(), "full" | "normal") {
            return Err(invalid(
                "storage.synchronous",
                format!(
                    "{:?} is not \"full\" or \"normal\"",
                    self.storage.synchronous
                ),
            ));
        }
        for (i, login) in self.auth.admins.iter().enumerate() {
            if login.trim().is_empty() {
                return Err(invalid(&format!("auth.admins[{i}]"), "empty login".into()));
            }
        }
        let mut mounts: Vec<(&str, &str)> = Vec::new();
        for (name, module) in self.modules() {
            // The web module's mount is written `root_path` (Woodpecker's name for it).
            let key = if name == "web" {
                "web.root_path".to_string()
            } else {
                format!("{name}.mount")
            };
            let m = module.mount.as_str();
            if !m.is_empty() && (!m.starts_with('/') || m.ends_with('/')) {
                return Err(invalid(
                    &key,
                    format!("{m:?} must be empty or start with '/' and not end with '/'"),
                ));
            }
            if m.contains(['{', '}', '*', '?', '#', ' ']) {
                return Err(invalid(
                    &key,
                    format!("{m:?} contains a reserved character"),
                ));
            }
            if module.enabled {
                if let Some((other, _)) = mounts.iter().find(|(_, om)| *om == m && !m.is_empty()) {
                    return Err(invalid(
                        &key,
                        format!("{m:?} is already the mount of {other}"),
                    ));
                }
                mounts.push((name, m));
            }
        }
        let token = &self.participation.admin_token;
        if !token.is_empty() && !valid_admin_token(token) {
            return Err(invalid(
                "participation.admin_token",
                "must be 64 to 256 visible ASCII characters (algod's API token rules)".into(),
            ));
        }
        if self.events.prune_interval_secs == 0 {
            return Err(invalid(
                "events.prune_interval_secs",
                "must be at least 1".into(),
            ));
        }
        if self.pipeline.cron_min_interval_secs == 0 {
            return Err(invalid(
                "pipeline.cron_min_interval_secs",
                "must be at least 1".into(),
            ));
        }
        if self.pipeline.max_crons_per_repo == 0 {
            return Err(invalid(
                "pipeline.max_crons_per_repo",
                "must be at least 1".into(),
            ));
        }
        if self.pipeline.status_context.trim().is_empty() {
            return Err(invalid(
                "pipeline.status_context",
                "must not be empty (forges need a name for the status)".into(),
            ));
        }
        self.plugins.validate().map_err(|e| {
            let key = if e.key.starts_with("plugins") {
                e.key.clone()
            } else {
                format!("plugins.{}", e.key)
            };
            invalid(&key, e.message)
        })?;
        self.runner
            .validate()
            .map_err(|(key, message)| invalid(key, message))?;
        self.validate_web()
    }

    /// `[web]`: the files it names must exist, so a typo stops start-up, not the first page.
    fn validate_web(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            file: self.source.clone(),
            key: key.to_string(),
            message,
        };
        let web = &self.web;
        if !(1..=8760).contains(&web.session_hours) {
            return Err(invalid(
                "web.session_hours",
                "must be between 1 and 8760 (a year)".into(),
            ));
        }
        if !web.dir.as_os_str().is_empty() && !web.dir.join("index.html").is_file() {
            return Err(invalid(
                "web.dir",
                format!(
                    "{:?} is not a directory with an index.html",
                    web.dir.display().to_string()
                ),
            ));
        }
        for (key, path) in [
            ("web.custom_js", &web.custom_js),
            ("web.custom_css", &web.custom_css),
        ] {
            if !path.as_os_str().is_empty() && !path.is_file() {
                return Err(invalid(
                    key,
                    format!("{:?} is not a readable file", path.display().to_string()),
                ));
            }
        }
        Ok(())
    }

    /// The modules (three interfaces and the web surface), by their config section name.
    pub fn modules(&self) -> [(&'static str, &ModuleConfig); 4] {
        [
            ("ci", &self.ci),
            ("events", &self.events.module),
            ("participation", &self.participation.module),
            ("web", &self.web.module),
        ]
    }

    pub fn listen_addr(&self) -> Result<SocketAddr, String> {
        self.server.listen.parse().map_err(|_| {
            format!(
                "invalid socket address {:?} (expected host:port, e.g. 127.0.0.1:8000)",
                self.server.listen
            )
        })
    }

    pub fn is_env_admin(&self, login: &str) -> bool {
        self.auth.admins.iter().any(|a| a == login)
    }

    /// The effective configuration (defaults, then the file, then `WOODLARK_*`) with every
    /// secret value replaced by [`REDACTED`]: the tokens of `[server]` and `[participation]`,
    /// and plugin `config` values whose key names a secret ([`names_secret`]). Empty values
    /// stay empty, so "not set" remains visible. Serialized, it reads back as a config file.
    pub fn redacted(&self) -> Config {
        let mut config = self.clone();
        redact(&mut config.server.metrics_token);
        redact(&mut config.participation.admin_token);
        redact_url_password(&mut config.storage.url);
        for instance in config.plugins.instances.values_mut() {
            for (key, value) in instance.config.iter_mut() {
                if names_secret(key) {
                    redact(value);
                }
            }
        }
        config
    }

    /// Where the secrets encryption key lives.
    pub fn secret_key_path(&self) -> PathBuf {
        if self.storage.secret_key_file.as_os_str().is_empty() {
            self.server.data_dir.join(crate::auth::sealing::KEY_FILE)
        } else {
            self.storage.secret_key_file.clone()
        }
    }
}

/// What [`Config::redacted`] puts in place of a secret value.
pub const REDACTED: &str = "<redacted>";

/// `url` with its password hidden (see [`redact_url_password`]), for messages and logs.
pub fn redacted_url(url: &str) -> String {
    let mut url = url.to_string();
    redact_url_password(&mut url);
    url
}

/// Hides the password of a database URL — in its user part (`user:pw@host`) or a
/// `password=` parameter — and keeps the rest (who, where) readable.
fn redact_url_password(url: &mut String) {
    let Some(scheme_end) = url.find("://") else {
        return;
    };
    let start = scheme_end + 3;
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |i| start + i);
    if let Some(at) = url[start..end].rfind('@')
        && let Some(colon) = url[start..start + at].find(':')
    {
        url.replace_range(start + colon + 1..start + at, REDACTED);
    }
    if let Some(query) = url.find('?') {
        let params: Vec<String> = url[query + 1..]
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((key, _)) if key == "password" => format!("{key}={REDACTED}"),
                _ => param.to_string(),
            })
            .collect();
        url.truncate(query + 1);
        url.push_str(&params.join("&"));
    }
}

fn redact(value: &mut String) {
    if !value.is_empty() {
        *value = REDACTED.to_string();
    }
}

/// Whether a plugin `config` key names secret material (`hook-secret`, `api_token`,
/// `password`, `apiKey`, …). Plugin configs are opaque to the server, so the name decides.
pub fn names_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase().replace(['-', '_', '.'], "");
    [
        "secret",
        "token",
        "password",
        "passwd",
        "credential",
        "privatekey",
        "apikey",
    ]
    .iter()
    .any(|word| key.contains(word))
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

fn parse_error(file: &str, e: &toml::de::Error, text: &str) -> ConfigError {
    let at = e
        .span()
        .map(|s| format!("line {}: ", line_of(text, s.start)))
        .unwrap_or_default();
    ConfigError::Parse {
        file: file.to_string(),
        message: format!("{at}{}", e.message().trim().replace('\n', " ")),
    }
}

fn describe_serde_error(path: &str, e: &toml::de::Error, text: &str) -> String {
    let message = e.message().trim().replace('\n', " ");
    let at = e
        .span()
        .map(|s| format!(" (line {})", line_of(text, s.start)))
        .unwrap_or_default();
    // serde_path_to_error's path already ends with the unknown key; say "key", not "field".
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let field = rest.split('`').next().unwrap_or("");
        let key = if path.is_empty() || path == "." {
            field
        } else {
            path
        };
        return format!("unknown key `{key}`{at}");
    }
    if path.is_empty() || path == "." {
        format!("{message}{at}")
    } else {
        format!("{path}: {message}{at}")
    }
}

/// A participation admin token algod would accept: 64–256 visible ASCII characters.
pub fn valid_admin_token(token: &str) -> bool {
    (64..=256).contains(&token.len()) && token.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_token_validity() {
        assert!(valid_admin_token(&"x".repeat(64)));
        assert!(!valid_admin_token(&"x".repeat(63)));
        assert!(!valid_admin_token(&"x".repeat(257)));
        assert!(!valid_admin_token(&format!("{} ", "x".repeat(64))));
    }

    fn load(text: &str) -> Result<Config, ConfigError> {
        Config::from_toml(text, "test.toml", &[])
    }

    #[test]
    fn redacted_config_hides_secrets_and_reads_back() {
        let text = r#"
[server]
metrics_token = "metrics-secret-1"
[participation]
admin_token = "admin-secret-2-0123456789012345678901234567890123456789012345678901234"
[storage]
url = "postgres://ci:db-secret-5@db.example:5432/woodlark?sslmode=disable&password=db-secret-6"
[plugins.instances.github]
file = "forge-github.wasm"
config = { hook-secret = "hook-secret-3", api_token = "tok-4", api-url = "https://api.github.com" }
"#;
        let env = [("WOODLARK_LISTEN".to_string(), "127.0.0.1:9".to_string())];
        let config = Config::from_toml(text, "test.toml", &env).unwrap();
        let shown = serde_json::to_string(&config.redacted()).unwrap();
        for secret in [
            "metrics-secret-1",
            "admin-secret-2",
            "hook-secret-3",
            "tok-4",
            "db-secret-5",
            "db-secret-6",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        let v: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(v["server"]["listen"], "127.0.0.1:9");
        assert_eq!(v["server"]["metrics_token"], REDACTED);
        assert_eq!(v["participation"]["admin_token"], REDACTED);
        assert_eq!(
            v["storage"]["url"],
            format!(
                "postgres://ci:{REDACTED}@db.example:5432/woodlark?sslmode=disable&password={REDACTED}"
            )
        );
        assert_eq!(v["participation"]["enabled"], true);
        assert_eq!(v["web"]["root_path"], "");
        let github = &v["plugins"]["instances"]["github"]["config"];
        assert_eq!(github["api-url"], "https://api.github.com");
        assert_eq!(github["hook-secret"], REDACTED);
        // Unset secrets stay visibly unset.
        let defaults = serde_json::to_value(Config::default().redacted()).unwrap();
        assert_eq!(defaults["server"]["metrics_token"], "");
        // The JSON has the file's shape: it deserializes to the same configuration.
        let back: Config = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), v);
        // Sections come in the file's order.
        assert!(shown.starts_with("{\"server\":{\"listen\":"), "{shown}");
    }

    #[test]
    fn secret_names() {
        for key in [
            "hook-secret",
            "api_token",
            "Password",
            "apiKey",
            "private-key",
            "TOKEN",
        ] {
            assert!(names_secret(key), "{key}");
        }
        for key in ["api-url", "namespace", "username", "cache-seconds", "names"] {
            assert!(!names_secret(key), "{key}");
        }
    }

    #[test]
    fn empty_file_gives_defaults() {
        let c = load("").unwrap();
        assert_eq!(c.server.listen, "127.0.0.1:8000");
        assert_eq!(c.ci.mount, "/api");
        assert_eq!(c.events.module.mount, "/events");
        assert_eq!(c.events.retention_days, 30);
    }

    #[test]
    fn unknown_key_is_named_with_its_table() {
        let err = load("[server]\nlisten = \"127.0.0.1:1\"\nlistne = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("test.toml: "), "{err}");
        assert!(err.contains("unknown key `server.listne`"), "{err}");
        assert!(err.contains("line 3"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn start_up_and_shutdown_waits_have_defaults_and_a_bound() {
        let c = load("").unwrap();
        assert_eq!(c.storage.wait_for_database_secs, 60);
        assert_eq!(c.runner.shutdown_grace_secs, 30);
        let c = load("[storage]\nwait_for_database_secs = 0\n[runner]\nshutdown_grace_secs = 5\n")
            .unwrap();
        assert_eq!(c.storage.wait_for_database_secs, 0);
        assert_eq!(c.runner.shutdown_grace_secs, 5);
        for text in [
            "[storage]\nwait_for_database_secs = 86401\n",
            "[runner]\nshutdown_grace_secs = 100000\n",
        ] {
            let err = load(text).unwrap_err().to_string();
            assert!(err.contains("must be at most 86400"), "{err}");
        }
        let err = load("[runner]\nshutdown_grace_secs = -1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("runner.shutdown_grace_secs"), "{err}");
    }

    #[test]
    fn unknown_table_is_named() {
        let err = load("[sever]\n").unwrap_err().to_string();
        assert!(err.contains("unknown key `sever`"), "{err}");
    }

    #[test]
    fn bad_listen_address_is_named() {
        let err = load("[server]\nlisten = \"nope\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("server.listen"), "{err}");
        assert!(err.contains("invalid socket address"), "{err}");
    }

    #[test]
    fn the_unauthenticated_body_budget_has_a_floor() {
        assert_eq!(
            load("").unwrap().server.unauthenticated_body_budget_bytes,
            64 * 1024 * 1024
        );
        let err = load("[server]\nunauthenticated_body_budget_bytes = 1000\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("server.unauthenticated_body_budget_bytes"),
            "{err}"
        );
        // Below the largest body: such a body could never be read.
        let err = load(
            "[server]\nmax_body_bytes = 8388608\nunauthenticated_body_budget_bytes = 4194304\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("at least server.max_body_bytes (8388608)"),
            "{err}"
        );
        let equal =
            "[server]\nmax_body_bytes = 8388608\nunauthenticated_body_budget_bytes = 8388608\n";
        assert!(load(equal).is_ok());
    }

    #[test]
    fn max_connections_is_bounded() {
        assert_eq!(load("").unwrap().server.max_connections, 4096);
        assert_eq!(
            load("[server]\nmax_connections = 8\n")
                .unwrap()
                .server
                .max_connections,
            8
        );
        for bad in ["0", "1000001"] {
            let err = load(&format!("[server]\nmax_connections = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("server.max_connections"), "{err}");
        }
    }

    #[test]
    fn wrong_type_is_named() {
        let err = load("[server]\nmax_body_bytes = \"big\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("server.max_body_bytes"), "{err}");
    }

    #[test]
    fn env_overrides_win() {
        let env = vec![
            ("WOODLARK_LISTEN".to_string(), "127.0.0.1:9".to_string()),
            ("WOODLARK_ADMINS".to_string(), "a, b".to_string()),
        ];
        let c = Config::from_toml("[server]\nlisten = \"127.0.0.1:1\"\n", "t", &env).unwrap();
        assert_eq!(c.server.listen, "127.0.0.1:9");
        assert_eq!(c.auth.admins, vec!["a", "b"]);
        let env = vec![("WOODLARK_LISTEN".to_string(), "x".to_string())];
        assert!(Config::from_toml("", "t", &env).is_err());
    }

    #[test]
    fn mounts_are_checked() {
        assert!(load("[ci]\nmount = \"api\"\n").is_err());
        assert!(load("[ci]\nmount = \"/api/\"\n").is_err());
        assert!(load("[events]\nmount = \"/api\"\n").is_err());
        assert!(load("[events]\nmount = \"/feed\"\nretention_days = 7\n").is_ok());
        let err = load("[events]\nretention = 7\n").unwrap_err().to_string();
        assert!(err.contains("unknown key `events.retention`"), "{err}");
        assert!(load("[ci]\nmount = \"/woodpecker/api\"\n").is_ok());
    }

    #[test]
    fn participation_table() {
        let c = load("").unwrap();
        assert!(c.participation.module.enabled);
        assert_eq!(c.participation.module.mount, "");
        let token = "t".repeat(64);
        let c = load(&format!(
            "[participation]\nmount = \"/algod\"\nadmin_token = \"{token}\"\n"
        ))
        .unwrap();
        assert_eq!(c.participation.module.mount, "/algod");
        assert_eq!(c.participation.admin_token, token);
        let err = load("[participation]\nadmin_token = \"short\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("participation.admin_token"), "{err}");
        let err = load("[participation]\ntoken = 1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("participation.token"), "{err}");
        assert!(load("[participation]\nmount = \"/api\"\n").is_err());
    }

    #[test]
    fn web_table() {
        let c = load("").unwrap();
        assert!(c.web.module.enabled);
        assert_eq!(c.web.root_path(), "");
        assert_eq!(c.web.session_hours, 72);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("index.html"), "<html>").unwrap();
        let c = load(&format!(
            "[web]\nroot_path = \"/ci\"\ndir = {:?}\nsession_hours = 1\n",
            dir.path().display().to_string()
        ))
        .unwrap();
        assert_eq!(c.web.root_path(), "/ci");
        assert_eq!(c.web.dir, dir.path());
        for (text, key) in [
            ("[web]\nroot_path = \"ci\"\n", "web.root_path"),
            ("[web]\nroot_path = \"/ci/\"\n", "web.root_path"),
            ("[web]\nroot_path = \"/api\"\n", "web.root_path"),
            ("[web]\nsession_hours = 0\n", "web.session_hours"),
            ("[web]\ndir = \"/does/not/exist\"\n", "web.dir"),
            (
                "[web]\ncustom_js = \"/does/not/exist.js\"\n",
                "web.custom_js",
            ),
            ("[web]\nmount = \"/x\"\n", "web.mount"),
        ] {
            let err = load(text).unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }

    #[test]
    fn cron_min_interval() {
        assert_eq!(load("").unwrap().pipeline.cron_min_interval_secs, 60);
        let c = load("[pipeline]\ncron_min_interval_secs = 1\n").unwrap();
        assert_eq!(c.pipeline.cron_min_interval_secs, 1);
        let err = load("[pipeline]\ncron_min_interval_secs = 0\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("pipeline.cron_min_interval_secs: must be at least 1"),
            "{err}"
        );
    }

    #[test]
    fn bad_log_level_is_rejected() {
        let err = load("[server]\nlog_level = \"loud\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("server.log_level"), "{err}");
    }
}
