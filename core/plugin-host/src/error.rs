//! Errors, by when they happen: [`ConfigError`] at start-up, [`HostError`] when the host is
//! built, [`LoadError`] when a component is (re)loaded (recorded as the plugin's
//! `last_error`, never fatal), [`PluginError`] for one call.

use crate::types::WorldKind;

/// A bad `[plugins]` value; `key` is the dotted config key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

/// The host itself could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("wasmtime engine: {0}")]
    Engine(String),
    #[error("plugin cache dir {path}: {source}")]
    CacheDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("watching {path}: {message}")]
    Watch { path: String, message: String },
    #[error("http client: {0}")]
    Http(String),
}

/// Why a component was not (re)loaded. The previous version, if any, stays in service.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("reading {path}: {message}")]
    Read { path: String, message: String },
    #[error("{path} is {size} bytes, above the {limit}-byte limit for components")]
    TooBig { path: String, size: u64, limit: u64 },
    #[error("not a valid WebAssembly component: {0}")]
    Compile(String),
    #[error(
        "exports no supported Woodlark interface (found: {found}); expected one of woodlark:forge/forge@0.1.x or @0.2.x, woodlark:secrets/secrets@0.1.x, woodlark:registry/auth@0.1.x"
    )]
    UnknownWorld { found: String },
    #[error("unsupported version {version} of {interface} (this host implements {supported})")]
    UnsupportedVersion {
        interface: String,
        version: String,
        supported: &'static str,
    },
    #[error("configured as {configured} but the component is a {actual}")]
    WrongWorld {
        configured: WorldKind,
        actual: WorldKind,
    },
    /// Imports something the world does not grant (or with the wrong type).
    #[error("cannot link: {0}")]
    Link(String),
    #[error("exports do not match the {world} world: {message}")]
    Exports { world: WorldKind, message: String },
}

/// Why one call failed. Only this call is affected; the plugin stays loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    #[error("no plugin named {0:?} is loaded")]
    NotLoaded(String),
    #[error("plugin {plugin:?} is a {actual} plugin, not a {expected}")]
    WrongWorld {
        plugin: String,
        expected: WorldKind,
        actual: WorldKind,
    },
    /// No adapter recognised the request (forge detection).
    #[error("no forge adapter recognises this request")]
    Unrecognized,
    #[error("plugin {plugin:?}: {what} is {size} bytes, above the limit of {limit}")]
    TooLarge {
        plugin: String,
        what: &'static str,
        size: u64,
        limit: u64,
    },
    #[error("plugin {plugin:?} is busy ({max} calls in flight)")]
    Busy { plugin: String, max: u32 },
    #[error("plugin {plugin:?} timed out after {timeout_ms} ms")]
    Timeout { plugin: String, timeout_ms: u64 },
    #[error("plugin {plugin:?} exceeded its memory limit of {memory_mb} MiB")]
    MemoryLimit { plugin: String, memory_mb: u64 },
    #[error("plugin {plugin:?} trapped: {message}")]
    Trap { plugin: String, message: String },
    /// The adapter's contract predates `function` (a forge adapter built against 0.1.0
    /// asked for sign-in, repositories, ...); the host did not call it.
    #[error(
        "plugin {plugin:?} does not support {function} (it implements forge contract {contract})"
    )]
    Unsupported {
        plugin: String,
        function: &'static str,
        contract: String,
    },
    /// The plugin asked for a host it is not granted (and the call failed): the operator's
    /// fix is a grant, not a new token. `detail` names the call and how to allow the host.
    #[error("plugin {plugin:?} may not reach {origin} ({detail})")]
    HostDenied {
        plugin: String,
        origin: String,
        detail: String,
    },
    /// The plugin answered with an error value (`plugin-error` in WIT).
    #[error("plugin {plugin:?}: {kind}: {message}")]
    Plugin {
        plugin: String,
        kind: ErrorKind,
        message: String,
    },
}

/// How an adapter words "not supported" in an `unavailable` error (see the forge WIT).
pub const UNSUPPORTED_SUFFIX: &str = " is not supported by this adapter";

/// The cases of WIT's `plugin-error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    InvalidInput,
    Denied,
    Unavailable,
    Internal,
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::InvalidInput => "invalid input",
            Self::Denied => "denied",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal error",
        })
    }
}

impl PluginError {
    /// The WIT error kind when the plugin answered with an error value.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Self::Plugin { kind, .. } => Some(*kind),
            Self::HostDenied { .. } => Some(ErrorKind::Denied),
            _ => None,
        }
    }

    /// True when the adapter does not offer the function called: its contract predates it
    /// ([`PluginError::Unsupported`]), or it answered `unavailable("… is not supported by
    /// this adapter")`, the contract's wording for a function it leaves out (the SDK's
    /// default bodies). The server then falls back or reports the feature as missing,
    /// rather than the forge as down.
    pub fn is_unsupported(&self) -> bool {
        match self {
            Self::Unsupported { .. } => true,
            Self::Plugin {
                kind: ErrorKind::Unavailable,
                message,
                ..
            } => message.ends_with(UNSUPPORTED_SUFFIX),
            _ => false,
        }
    }

    /// True when the plugin misbehaved (trap, timeout, memory, oversized output) rather
    /// than answering; the server maps these to "plugin unavailable".
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            Self::Timeout { .. } | Self::MemoryLimit { .. } | Self::Trap { .. }
        ) || matches!(self, Self::TooLarge { what, .. } if what.starts_with("output"))
    }
}
