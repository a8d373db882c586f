//! # woodlark-plugin-host
//!
//! Runs Woodlark's WebAssembly plugins (forge adapters, secret backends, registry auth) as
//! wasmtime components. This is the **only** crate that knows wasmtime: the server sees plain
//! types ([`types`]) and the methods of [`PluginHost`], one per export of each world.
//!
//! ## Layout
//!
//! - [`config`]: `[plugins]` of `config.toml` — directory, cache, grants and limits per instance.
//! - `bindings`: `bindgen!` output for `wit/` (capabilities once, then one module per world).
//! - `engine`: the engine (epoch interruption + a clock that ticks while calls run); `cache`:
//!   compiled-code cache.
//! - `loader`: file → world check → `InstancePre`; `host`: registry, reload, call path;
//!   `watch`: directory watcher (reloads once a burst of `.wasm` events settles).
//! - `caps` + `http_client` + `state`: the host side of the capabilities, per-call state and caps.
//! - [`services`]: what the server provides ([`KvStore`], [`SecretSource`]).
//!
//! ## Using it
//!
//! ```ignore
//! let host = PluginHost::start(config.plugins.clone(), HostServices { kv, secrets }).await?;
//! match host.parse_hook("github", request).await? {
//!     HookOutcome::Build(b) => { /* create the pipeline */ }
//!     HookOutcome::Ignored(reason) => { /* 204 */ }
//! }
//! let rows = host.list(); // GET /api/plugins
//! ```
//!
//! ## Invariants
//!
//! - Every call gets a fresh `Store` (from the version's cached `InstancePre`), an epoch
//!   deadline, a memory limit, and runs on the caller's task under a per-instance semaphore
//!   (wasmtime's async mode: the guest yields to the runtime every epoch tick, and host
//!   imports that wait on I/O are `async`, so no call blocks a runtime worker for longer).
//!   A trap, timeout or limit breach fails that call only and is logged with the plugin name.
//! - A component is checked at load against the world and version it exports and linked
//!   against exactly that world's capabilities; ungranted imports are rejected at load.
//! - A failed (re)load never removes a working version.
//! - Secret values never enter a guest: `signing` compares inside the host.

mod bindings;
mod cache;
mod caps;
pub mod config;
mod convert;
mod engine;
pub mod error;
mod host;
mod http_client;
mod loader;
pub mod services;
mod state;
pub mod types;
mod watch;

#[cfg(test)]
mod tests;

pub use config::{InstanceConfig, Limits, PluginsConfig};
pub use error::{ConfigError, ErrorKind, HostError, LoadError, PluginError, UNSUPPORTED_SUFFIX};
pub use host::{CallCounts, HostServices, PluginHost, PluginInfo, ReloadAction};
pub use services::{KvError, KvStore, MapSecrets, MemoryKv, SecretSource, ServiceFuture};
pub use types::*;

/// The newest WIT package version this host implements (`wit/` must not be newer).
pub const WIT_VERSION: &str = "0.2.0";
