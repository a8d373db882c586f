//! [`PluginHost`]: the registry of loaded plugins, reloads, and the call path.
//!
//! **Registry.** An `ArcSwap` of `name → Slot`. A slot holds the current version (an
//! `Arc<LoadedPlugin>`), the last load error, call counters and the concurrency semaphore.
//! Only [`PluginHost::reload`] writes the registry, serialized by a mutex: it builds a new map
//! and swaps it in, so readers never lock and in-flight calls keep the version they started
//! on.
//!
//! **Calls.** Look up the current version → wait (at most the timeout) for a concurrency
//! permit → on the caller's task (wasmtime's async mode, no thread hop): fresh `Store` with
//! limits and an epoch callback that yields every tick and traps at the deadline,
//! instantiate from the cached `InstancePre`, call, drop the store → check output size →
//! count and log. A trap, timeout or limit breach fails that call only.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use serde::Serialize;
use tokio::sync::Semaphore;
use wasmtime::component::{ComponentNamedList, ComponentType, Lift, Lower};
use wasmtime::{Engine, Store, Trap, UpdateDeadline};

use crate::bindings::caps::woodlark::host::types::{Header as WitHeader, PluginError as WitError};
use crate::bindings::forge_v0_1::exports::woodlark::forge0_1_0::forge as wit_forge_v0_1;
use crate::bindings::forge_v0_2::exports::woodlark::forge0_2_0::forge as wit_forge;
use crate::cache::ComponentCache;
use crate::config::{InstanceConfig, Origin, PluginsConfig};
use crate::convert;
use crate::engine::{EpochClock, new_engine};
use crate::error::{HostError, LoadError, PluginError};
use crate::http_client::HttpClient;
use crate::loader::{self, Linkers, LoadedPlugin};
use crate::services::{KvStore, MapSecrets, MemoryKv, SecretSource};
use crate::state::{CallState, Services};
use crate::types::*;

/// Largest total size of hook request headers handed to a plugin.
const MAX_HEADER_BYTES: u64 = 256 * 1024;

/// What the server provides to plugins (see [`crate::services`]).
pub struct HostServices {
    pub kv: Arc<dyn KvStore>,
    pub secrets: Arc<dyn SecretSource>,
}

impl Default for HostServices {
    /// In-memory kv and no secrets (tests, the offline bench).
    fn default() -> Self {
        Self {
            kv: Arc::new(MemoryKv::default()),
            secrets: Arc::new(MapSecrets::default()),
        }
    }
}

/// Call counters of one plugin instance (kept across reloads).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct CallCounts {
    /// Calls started.
    pub total: u64,
    /// Calls that returned a value.
    pub ok: u64,
    /// Calls where the plugin answered with an error value.
    pub errors: u64,
    /// Traps, timeouts, memory-limit breaches and oversized outputs.
    pub faults: u64,
    /// Of the faults, timeouts.
    pub timeouts: u64,
    /// Refused before running (busy, oversized input).
    pub rejected: u64,
    pub in_flight: u64,
    /// Calls of functions the plugin does not offer (its contract predates them, or it
    /// answered "… is not supported by this adapter"): the server fell back. Not errors.
    pub unsupported: u64,
    /// The same, by function (its WIT name).
    pub unsupported_by_function: BTreeMap<String, u64>,
}

#[derive(Default)]
struct Stats {
    total: AtomicU64,
    ok: AtomicU64,
    errors: AtomicU64,
    faults: AtomicU64,
    timeouts: AtomicU64,
    rejected: AtomicU64,
    in_flight: AtomicU64,
    unsupported: Mutex<BTreeMap<&'static str, u64>>,
}

impl Stats {
    /// Counts a call of `function`, which `plugin` does not offer; the first one per
    /// function is logged (a fallback, not a failure, so not on every call).
    fn note_unsupported(&self, plugin: &str, function: &'static str) {
        let mut map = self.unsupported.lock().unwrap_or_else(|p| p.into_inner());
        let count = map.entry(function).or_insert(0);
        *count += 1;
        if *count == 1 {
            tracing::info!(
                plugin,
                function,
                "the plugin does not support this function; the server falls back where it can (counted in GET /api/plugins)"
            );
        }
    }

    fn snapshot(&self) -> CallCounts {
        let unsupported = self.unsupported.lock().unwrap_or_else(|p| p.into_inner());
        CallCounts {
            unsupported: unsupported.values().sum(),
            unsupported_by_function: unsupported
                .iter()
                .map(|(f, n)| (f.to_string(), *n))
                .collect(),
            total: self.total.load(Ordering::Relaxed),
            ok: self.ok.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            faults: self.faults.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            in_flight: self.in_flight.load(Ordering::Relaxed),
        }
    }
}

/// One row of [`PluginHost::list`] (served as `GET /api/plugins`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginInfo {
    pub name: String,
    /// Component file name inside the plugin directory.
    pub file: String,
    /// Whether a version is loaded and callable.
    pub loaded: bool,
    pub world: Option<WorldKind>,
    /// The exported interface's version, e.g. `0.1.0`.
    pub version: Option<String>,
    /// `sha256:<hex>` of the loaded component file.
    pub content_hash: Option<String>,
    /// When the current version was loaded, Unix seconds.
    pub loaded_at: Option<u64>,
    /// The last load error (the previous version, if any, stays loaded).
    pub last_error: Option<String>,
    pub last_error_at: Option<u64>,
    pub calls: CallCounts,
}

/// What a reload did to one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadAction {
    Loaded { sha256: String },
    Unchanged,
    Failed(LoadError),
    Unloaded,
    Missing,
}

#[derive(Clone)]
struct Slot {
    file: String,
    current: Option<Arc<LoadedPlugin>>,
    last_error: Option<(String, SystemTime)>,
    failed_sha: Option<String>,
    stats: Arc<Stats>,
    semaphore: Arc<Semaphore>,
    max_concurrency: u32,
}

type Registry = BTreeMap<String, Arc<Slot>>;

pub(crate) struct Inner {
    config: PluginsConfig,
    engine: Engine,
    /// Ticks `engine`'s epoch while calls run.
    clock: EpochClock,
    cache: ComponentCache,
    linkers: Linkers,
    services: Arc<Services>,
    registry: ArcSwap<Registry>,
    reload_lock: Mutex<()>,
    watcher: Mutex<Option<crate::watch::Watcher>>,
}

/// The plugin host. Cheap to clone; all clones share one registry.
#[derive(Clone)]
pub struct PluginHost {
    inner: Arc<Inner>,
}

impl PluginHost {
    /// Builds the engine, linkers, cache and HTTP client; loads nothing yet. Calls are
    /// `async` and run on the caller's tokio runtime.
    pub fn new(config: PluginsConfig, services: HostServices) -> Result<Self, HostError> {
        config.validate()?;
        let (engine, clock) = new_engine()?;
        let cache = ComponentCache::open(&engine, &config.cache_dir)?;
        let link = |w| {
            crate::caps::linker_for(&engine, w).map_err(|e| HostError::Engine(format!("{e:#}")))
        };
        let linkers = Linkers {
            forge: link(WorldKind::ForgeAdapter)?,
            secrets: link(WorldKind::SecretBackend)?,
            registry: link(WorldKind::RegistryAuth)?,
        };
        let services = Arc::new(Services {
            kv: services.kv,
            secrets: services.secrets,
            http: HttpClient::new()?,
        });
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                engine,
                clock,
                cache,
                linkers,
                services,
                registry: ArcSwap::from_pointee(BTreeMap::new()),
                reload_lock: Mutex::new(()),
                watcher: Mutex::new(None),
            }),
        })
    }

    /// [`new`](Self::new), a first [`reload`](Self::reload) on the blocking pool, and, if
    /// `watch` is on, the directory watcher. What the server calls at start-up.
    pub async fn start(config: PluginsConfig, services: HostServices) -> Result<Self, HostError> {
        let host = Self::new(config, services)?;
        let h = host.clone();
        let report = tokio::task::spawn_blocking(move || h.reload())
            .await
            .map_err(|e| HostError::Engine(format!("initial load panicked: {e}")))?;
        let loaded = report
            .iter()
            .filter(|(_, a)| matches!(a, ReloadAction::Loaded { .. }))
            .count();
        tracing::info!(dir = %host.inner.config.dir.display(), loaded, "plugins loaded");
        if host.inner.config.watch {
            host.watch()?;
        }
        Ok(host)
    }

    /// Starts watching the plugin directory (idempotent). Creates the directory if missing.
    pub fn watch(&self) -> Result<(), HostError> {
        let mut w = self.inner.watcher.lock().unwrap_or_else(|p| p.into_inner());
        if w.is_none() {
            *w = Some(crate::watch::spawn(&self.inner)?);
        }
        Ok(())
    }

    pub fn config(&self) -> &PluginsConfig {
        &self.inner.config
    }

    /// Rescans the plugin directory and (re)loads what changed. Blocking (it may compile):
    /// call it from a blocking thread. Returns what happened per instance.
    pub fn reload(&self) -> Vec<(String, ReloadAction)> {
        self.inner.reload()
    }

    /// Every known instance with its state and counters, by name.
    pub fn list(&self) -> Vec<PluginInfo> {
        let reg = self.inner.registry.load();
        reg.iter()
            .map(|(name, slot)| {
                let cur = slot.current.as_ref();
                PluginInfo {
                    name: name.clone(),
                    file: slot.file.clone(),
                    loaded: cur.is_some(),
                    world: cur.map(|p| p.world),
                    version: cur.map(|p| p.version.clone()),
                    content_hash: cur.map(|p| format!("sha256:{}", p.sha256)),
                    loaded_at: cur.map(|p| unix(p.loaded_at)),
                    last_error: slot.last_error.as_ref().map(|(e, _)| e.clone()),
                    last_error_at: slot.last_error.as_ref().map(|(_, t)| unix(*t)),
                    calls: slot.stats.snapshot(),
                }
            })
            .collect()
    }

    /// Names of loaded plugins of `world`.
    pub fn names(&self, world: WorldKind) -> Vec<String> {
        self.inner
            .registry
            .load()
            .iter()
            .filter(|(_, s)| s.current.as_ref().is_some_and(|p| p.world == world))
            .map(|(n, _)| n.clone())
            .collect()
    }

    // ---- forge adapters ----

    /// Asks forge adapter `plugin` to parse a webhook whose forge is not known (only the
    /// instance's own grants apply).
    pub async fn parse_hook(
        &self,
        plugin: &str,
        req: HookRequest,
    ) -> Result<HookOutcome, PluginError> {
        self.parse_hook_for(plugin, req, ForgeGrant::default())
            .await
    }

    /// Asks forge adapter `plugin` to parse a webhook for the forge that `grant` comes from
    /// (its webhook secret verifies the signature).
    pub async fn parse_hook_for(
        &self,
        plugin: &str,
        req: HookRequest,
        grant: ForgeGrant,
    ) -> Result<HookOutcome, PluginError> {
        let limits_in = self.limits_of(plugin)?;
        let header_bytes: u64 = req
            .headers
            .iter()
            .map(|(n, v)| (n.len() + v.len()) as u64)
            .sum();
        if header_bytes > MAX_HEADER_BYTES {
            return self.reject(
                plugin,
                "input: request headers",
                header_bytes,
                MAX_HEADER_BYTES,
            );
        }
        if req.body.len() as u64 > limits_in.max_input_bytes {
            return self.reject(
                plugin,
                "input: request body",
                req.body.len() as u64,
                limits_in.max_input_bytes,
            );
        }
        let req = convert::hook_request(req);
        let scope = CallScope {
            unverified: None,
            forge: grant,
        };
        let out = self
            .call_export_with(plugin, WorldKind::ForgeAdapter, "parse-hook", (req,), scope)
            .await?;
        let out = convert::outcome(out);
        self.check_output(plugin, &out)?;
        Ok(out)
    }

    /// The first loaded forge adapter (by name) whose `recognize` accepts these headers.
    pub async fn recognize(&self, headers: &[(String, Vec<u8>)]) -> Option<String> {
        let wit_headers = convert::headers(headers);
        for name in self.names(WorldKind::ForgeAdapter) {
            let hs = wit_headers.clone();
            let r = self.call_recognize(&name, hs).await;
            if let Ok(true) = r {
                return Some(name);
            }
        }
        None
    }

    /// Finds the adapter that recognises the request and parses it with that adapter.
    pub async fn detect_and_parse(
        &self,
        req: HookRequest,
    ) -> Result<(String, HookOutcome), PluginError> {
        let name = self
            .recognize(&req.headers)
            .await
            .ok_or(PluginError::Unrecognized)?;
        let out = self.parse_hook(&name, req).await?;
        Ok((name, out))
    }

    pub async fn file_at(
        &self,
        plugin: &str,
        ctx: ApiContext,
        full_name: &str,
        commit: &str,
        path: &str,
    ) -> Result<Option<Vec<u8>>, PluginError> {
        let (full, commit, path) = (full_name.to_string(), commit.to_string(), path.to_string());
        let r: Option<Vec<u8>> = self
            .call_forge(plugin, "file-at", ctx, (full, commit, path))
            .await?;
        let size = r.as_ref().map_or(0, |b| b.len() as u64);
        let limit = self
            .limits_of(plugin)?
            .max_output_bytes
            .max(self.limits_of(plugin)?.max_http_response_bytes);
        if size > limit {
            return self.fault_output(plugin, size, limit);
        }
        Ok(r)
    }

    pub async fn post_status(
        &self,
        plugin: &str,
        ctx: ApiContext,
        full_name: &str,
        commit: &str,
        status: CommitStatus,
    ) -> Result<(), PluginError> {
        // The status record changed shape in 0.2.0 (branch, event, times), so it is lowered
        // per contract here rather than through `call_forge`.
        let (full, commit) = (full_name.to_string(), commit.to_string());
        let scope = CallScope::forge_api(&ctx);
        let function = "post-status";
        self.call(
            plugin,
            WorldKind::ForgeAdapter,
            function,
            scope,
            move |loaded, store| {
                Box::pin(async move {
                    let r = if loaded.is_forge_v0_1() {
                        let ctx = convert::api_context_v0_1(ctx);
                        let params = (ctx, full, commit, convert::commit_status_v0_1(status));
                        invoke::<_, (Result<(), WitError>,)>(loaded, store, "post-status", params)
                            .await
                    } else {
                        let ctx = convert::api_context(ctx);
                        let params = (ctx, full, commit, convert::commit_status(status));
                        invoke::<_, (Result<(), WitError>,)>(loaded, store, "post-status", params)
                            .await
                    };
                    r.map(|(r,)| r)
                })
            },
        )
        .await
    }

    // ---- forge adapters: sign-in and acting as the user (contract 0.2.0) ----

    /// The forge contract version forge adapter `plugin` exports (`0.1.0`, `0.2.0`); `None`
    /// when no forge adapter of that name is loaded.
    pub fn forge_contract(&self, plugin: &str) -> Option<String> {
        let slot = self.slot(plugin).ok()?;
        let loaded = slot.current.as_ref()?;
        (loaded.world == WorldKind::ForgeAdapter).then(|| loaded.version.clone())
    }

    /// Where to send the browser to sign in with the forge (`state` comes back with the code).
    pub async fn authorize_url(
        &self,
        plugin: &str,
        client: OAuthClient,
        state: &str,
    ) -> Result<String, PluginError> {
        self.oauth_export(plugin, "authorize-url", client, state, same)
            .await
    }

    /// Trades the OAuth callback's `code` for tokens.
    pub async fn exchange_code(
        &self,
        plugin: &str,
        client: OAuthClient,
        code: &str,
    ) -> Result<OAuthToken, PluginError> {
        self.oauth_export(plugin, "exchange-code", client, code, convert::oauth_token)
            .await
    }

    /// A fresh access token from `refresh_token`.
    pub async fn refresh_token(
        &self,
        plugin: &str,
        client: OAuthClient,
        refresh_token: &str,
    ) -> Result<OAuthToken, PluginError> {
        self.oauth_export(
            plugin,
            "refresh-token",
            client,
            refresh_token,
            convert::oauth_token,
        )
        .await
    }

    // ---- secret backends ----

    pub async fn list_secrets(
        &self,
        plugin: &str,
        scope: SecretScope,
    ) -> Result<Vec<Secret>, PluginError> {
        let (world, export) = (WorldKind::SecretBackend, Export::new("list-secrets"));
        let params = (convert::scope(scope),);
        self.plain_export(
            plugin,
            world,
            export,
            params,
            CallScope::default(),
            each(convert::secret),
        )
        .await
    }

    pub async fn get_secret(
        &self,
        plugin: &str,
        scope: SecretScope,
        name: &str,
    ) -> Result<Option<Secret>, PluginError> {
        let (world, export) = (WorldKind::SecretBackend, Export::new("get-secret"));
        let params = (convert::scope(scope), name.to_string());
        self.plain_export(
            plugin,
            world,
            export,
            params,
            CallScope::default(),
            maybe(convert::secret),
        )
        .await
    }

    // ---- registry auth ----

    pub async fn credential_for(
        &self,
        plugin: &str,
        image: &str,
        repo: &str,
    ) -> Result<Option<Credential>, PluginError> {
        let (world, export) = (WorldKind::RegistryAuth, Export::new("credential-for"));
        let params = (image.to_string(), repo.to_string());
        self.plain_export(
            plugin,
            world,
            export,
            params,
            CallScope::default(),
            maybe(convert::credential),
        )
        .await
    }

    // ---- the call path ----

    fn slot(&self, plugin: &str) -> Result<Arc<Slot>, PluginError> {
        self.inner
            .registry
            .load()
            .get(plugin)
            .cloned()
            .ok_or_else(|| PluginError::NotLoaded(plugin.to_string()))
    }

    fn limits_of(&self, plugin: &str) -> Result<crate::config::Limits, PluginError> {
        let slot = self.slot(plugin)?;
        slot.current
            .as_ref()
            .map(|p| p.limits)
            .ok_or_else(|| PluginError::NotLoaded(plugin.to_string()))
    }

    fn reject<T>(
        &self,
        plugin: &str,
        what: &'static str,
        size: u64,
        limit: u64,
    ) -> Result<T, PluginError> {
        if let Ok(slot) = self.slot(plugin) {
            slot.stats.rejected.fetch_add(1, Ordering::Relaxed);
        }
        tracing::warn!(
            plugin,
            what,
            size,
            limit,
            "plugin call refused: input too large"
        );
        Err(PluginError::TooLarge {
            plugin: plugin.to_string(),
            what,
            size,
            limit,
        })
    }

    fn fault_output<T>(&self, plugin: &str, size: u64, limit: u64) -> Result<T, PluginError> {
        if let Ok(slot) = self.slot(plugin) {
            slot.stats.ok.fetch_sub(1, Ordering::Relaxed);
            slot.stats.faults.fetch_add(1, Ordering::Relaxed);
        }
        tracing::warn!(plugin, size, limit, "plugin output too large; call failed");
        Err(PluginError::TooLarge {
            plugin: plugin.to_string(),
            what: "output",
            size,
            limit,
        })
    }

    /// Rejects results whose serialized size is above the instance's `max_output_bytes`.
    fn check_output<T: Serialize>(&self, plugin: &str, value: &T) -> Result<(), PluginError> {
        let limit = self
            .limits_of(plugin)
            .map(|l| l.max_output_bytes)
            .unwrap_or(1 << 20);
        let size = serialized_len(value);
        if size > limit {
            return self.fault_output(plugin, size, limit);
        }
        Ok(())
    }

    /// Forge-API export `export` with `ctx` and `args`, its answer converted by `convert`
    /// (see [`Export`] for the contract and the output limit).
    async fn forge_export<A, W, T>(
        &self,
        plugin: &str,
        export: Export,
        ctx: ApiContext,
        args: A,
        convert: impl FnOnce(W) -> T,
    ) -> Result<T, PluginError>
    where
        A: ForgeArgs,
        W: Send + Sync + 'static,
        (Result<W, WitError>,): ComponentNamedList + Lift,
        T: Serialize,
    {
        self.require(plugin, export)?;
        let r = self.call_forge(plugin, export.name, ctx, args).await?;
        self.converted(plugin, export, convert(r))
    }

    /// Export `export` of a `world` plugin with `params` on behalf of `scope`, its answer
    /// converted by `convert` (see [`Export`]).
    async fn plain_export<P, W, T>(
        &self,
        plugin: &str,
        world: WorldKind,
        export: Export,
        params: P,
        scope: CallScope,
        convert: impl FnOnce(W) -> T,
    ) -> Result<T, PluginError>
    where
        P: ComponentNamedList + Lower + Send + Sync + 'static,
        W: Send + Sync + 'static,
        (Result<W, WitError>,): ComponentNamedList + Lift,
        T: Serialize,
    {
        self.require(plugin, export)?;
        let r = self
            .call_export_with(plugin, world, export.name, params, scope)
            .await?;
        self.converted(plugin, export, convert(r))
    }

    /// An OAuth export (contract 0.2): the forge's OAuth client and one string, on behalf of
    /// the client (its token URL's origin).
    async fn oauth_export<W, T>(
        &self,
        plugin: &str,
        name: &'static str,
        client: OAuthClient,
        text: &str,
        convert: impl FnOnce(W) -> T,
    ) -> Result<T, PluginError>
    where
        W: Send + Sync + 'static,
        (Result<W, WitError>,): ComponentNamedList + Lift,
        T: Serialize,
    {
        let (world, export) = (WorldKind::ForgeAdapter, Export::new(name).since_v0_2());
        let scope = CallScope::oauth(&client);
        let params = (convert::oauth_client(client), text.to_string());
        self.plain_export(plugin, world, export, params, scope, convert)
            .await
    }

    /// [`Self::require_v0_2`] for an export that contract 0.1 lacks.
    fn require(&self, plugin: &str, export: Export) -> Result<(), PluginError> {
        if export.since_v0_2 {
            self.require_v0_2(plugin, export.name)?;
        }
        Ok(())
    }

    /// `value`, held to the output limit unless `export` is exempt.
    fn converted<T: Serialize>(
        &self,
        plugin: &str,
        export: Export,
        value: T,
    ) -> Result<T, PluginError> {
        if export.checked {
            self.check_output(plugin, &value)?;
        }
        Ok(value)
    }

    /// Calls export `func` (its WIT name) of `plugin`, a `world` plugin, on a fresh instance
    /// (see [`Self::call`]), on behalf of `scope` (a forge's grant, and its certificate
    /// unchecked when the forge is marked `skip_verify`). The export's
    /// `result<T, plugin-error>` becomes `Ok(T)` or [`PluginError::Plugin`].
    async fn call_export_with<P, T>(
        &self,
        plugin: &str,
        world: WorldKind,
        func: &'static str,
        params: P,
        scope: CallScope,
    ) -> Result<T, PluginError>
    where
        P: ComponentNamedList + Lower + Send + Sync + 'static,
        T: Send + Sync + 'static,
        (Result<T, WitError>,): ComponentNamedList + Lift,
    {
        self.call(plugin, world, func, scope, move |loaded, store| {
            Box::pin(async move {
                invoke::<P, (Result<T, WitError>,)>(loaded, store, func, params)
                    .await
                    .map(|(r,)| r)
            })
        })
        .await
    }

    /// [`PluginError::Unsupported`] when forge adapter `plugin` implements contract 0.1.x,
    /// which lacks `function`. Other errors (not loaded, wrong world) are left to the call.
    fn require_v0_2(&self, plugin: &str, function: &'static str) -> Result<(), PluginError> {
        match self.forge_contract(plugin) {
            Some(v) if v.starts_with("0.1.") => {
                if let Ok(slot) = self.slot(plugin) {
                    slot.stats.note_unsupported(plugin, function);
                }
                Err(PluginError::Unsupported {
                    plugin: plugin.to_string(),
                    function,
                    contract: v,
                })
            }
            _ => Ok(()),
        }
    }

    /// Calls forge-API export `func` with `ctx` and then `args`, in the `api-context` shape of
    /// the adapter's contract version (the other parameters and results have one shape in
    /// every version).
    async fn call_forge<A, T>(
        &self,
        plugin: &str,
        func: &'static str,
        ctx: ApiContext,
        args: A,
    ) -> Result<T, PluginError>
    where
        A: ForgeArgs,
        T: Send + Sync + 'static,
        (Result<T, WitError>,): ComponentNamedList + Lift,
    {
        let scope = CallScope::forge_api(&ctx);
        self.call(
            plugin,
            WorldKind::ForgeAdapter,
            func,
            scope,
            move |loaded, store| {
                Box::pin(async move {
                    let r = if loaded.is_forge_v0_1() {
                        let params = args.v0_1(convert::api_context_v0_1(ctx));
                        invoke::<_, (Result<T, WitError>,)>(loaded, store, func, params).await
                    } else {
                        let params = args.v0_2(convert::api_context(ctx));
                        invoke::<_, (Result<T, WitError>,)>(loaded, store, func, params).await
                    };
                    r.map(|(r,)| r)
                })
            },
        )
        .await
    }

    /// Forge adapter `plugin`'s `recognize` (the one export that doesn't return a result).
    async fn call_recognize(
        &self,
        plugin: &str,
        headers: Vec<WitHeader>,
    ) -> Result<bool, PluginError> {
        let scope = CallScope::default();
        self.call(
            plugin,
            WorldKind::ForgeAdapter,
            "recognize",
            scope,
            move |loaded, store| {
                Box::pin(async move {
                    invoke::<_, (bool,)>(loaded, store, "recognize", (headers,))
                        .await
                        .map(|(b,)| Ok(b))
                })
            },
        )
        .await
    }

    /// Runs `f` on a fresh store of `plugin`'s current version, under its limits, on the
    /// caller's task (wasmtime's async mode: the guest yields to the runtime every epoch
    /// tick, see [`run`]).
    async fn call<T, F>(
        &self,
        plugin: &str,
        world: WorldKind,
        function: &'static str,
        scope: CallScope,
        f: F,
    ) -> Result<T, PluginError>
    where
        F: for<'a> FnOnce(&'a LoadedPlugin, &'a mut Store<CallState>) -> CallFuture<'a, T> + Send,
    {
        let slot = self.slot(plugin)?;
        let loaded = slot
            .current
            .clone()
            .ok_or_else(|| PluginError::NotLoaded(plugin.to_string()))?;
        if loaded.world != world {
            return Err(PluginError::WrongWorld {
                plugin: plugin.to_string(),
                expected: world,
                actual: loaded.world,
            });
        }
        let timeout = loaded.limits.timeout();
        let permit =
            match tokio::time::timeout(timeout, slot.semaphore.clone().acquire_owned()).await {
                Ok(Ok(p)) => p,
                _ => {
                    slot.stats.rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        plugin,
                        max = slot.max_concurrency,
                        "plugin busy; call refused"
                    );
                    return Err(PluginError::Busy {
                        plugin: plugin.to_string(),
                        max: slot.max_concurrency,
                    });
                }
            };
        let stats = slot.stats.clone();
        stats.total.fetch_add(1, Ordering::Relaxed);
        stats.in_flight.fetch_add(1, Ordering::Relaxed);
        let services = self.inner.services.clone();
        // The epoch deadline stops guest code and host I/O is bounded by the same deadline;
        // this outer timeout is a backstop for anything else (dropping the call's future
        // unwinds the guest and throws its store away).
        let result = match tokio::time::timeout(
            timeout + Duration::from_secs(2),
            run(&loaded, &self.inner.clock, services, function, scope, f),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(PluginError::Timeout {
                plugin: plugin.to_string(),
                timeout_ms: timeout.as_millis() as u64,
            }),
        };
        drop(permit);
        stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        match &result {
            Ok(_) => {
                stats.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) if e.is_unsupported() => stats.note_unsupported(plugin, function),
            Err(e @ PluginError::HostDenied { .. }) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(plugin, function, error = %e, "plugin call failed");
            }
            Err(PluginError::Plugin { kind, message, .. }) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(plugin, kind = %kind, error = %message, "plugin returned an error");
            }
            Err(e) => {
                stats.faults.fetch_add(1, Ordering::Relaxed);
                if matches!(e, PluginError::Timeout { .. }) {
                    stats.timeouts.fetch_add(1, Ordering::Relaxed);
                }
                tracing::warn!(plugin, error = %e, "plugin call failed");
            }
        }
        result
    }
}

/// On whose behalf a call runs: the forge whose grant it carries, and the one origin whose
/// certificate it does not check (that forge's, when marked `skip_verify`).
#[derive(Default)]
struct CallScope {
    unverified: Option<Origin>,
    forge: ForgeGrant,
}

impl CallScope {
    fn forge_api(ctx: &ApiContext) -> Self {
        Self {
            unverified: unverified_origin(ctx.skip_verify, &ctx.forge_url),
            forge: ctx.grant.clone(),
        }
    }

    fn oauth(client: &OAuthClient) -> Self {
        Self {
            unverified: unverified_origin(client.skip_verify, &client.forge_url),
            forge: client.grant.clone(),
        }
    }
}

/// The forge origin whose certificate a call skips checking: `forge_url`'s, when the forge
/// is marked `skip_verify`.
fn unverified_origin(skip_verify: bool, forge_url: &str) -> Option<Origin> {
    if !skip_verify {
        return None;
    }
    Origin::of(&forge_url.parse().ok()?)
}

/// The parameters of a forge-API export after its leading `api-context`, so one call path
/// serves every contract version: `api-context` changed shape in 0.2.0 (`skip-verify`), the
/// rest did not. Implemented for tuples of up to three values.
trait ForgeArgs: Send + Sync + 'static {
    type V0_1: ComponentNamedList + Lower + Send + Sync + 'static;
    type V0_2: ComponentNamedList + Lower + Send + Sync + 'static;
    fn v0_1(self, ctx: wit_forge_v0_1::ApiContext) -> Self::V0_1;
    fn v0_2(self, ctx: wit_forge::ApiContext) -> Self::V0_2;
}

macro_rules! forge_args {
    ($($arg:ident),*) => {
        #[allow(non_snake_case)]
        impl<$($arg),*> ForgeArgs for ($($arg,)*)
        where
            $($arg: ComponentType + Lower + Send + Sync + 'static,)*
        {
            type V0_1 = (wit_forge_v0_1::ApiContext, $($arg,)*);
            type V0_2 = (wit_forge::ApiContext, $($arg,)*);
            fn v0_1(self, ctx: wit_forge_v0_1::ApiContext) -> Self::V0_1 {
                let ($($arg,)*) = self;
                (ctx, $($arg,)*)
            }
            fn v0_2(self, ctx: wit_forge::ApiContext) -> Self::V0_2 {
                let ($($arg,)*) = self;
                (ctx, $($arg,)*)
            }
        }
    };
}

forge_args!();
forge_args!(A);
forge_args!(A, B);
forge_args!(A, B, C);

/// How a wrapper calls one export: its WIT name, whether contract 0.1 lacks it (then it is
/// answered [`PluginError::Unsupported`] without a call), and whether its converted answer
/// is held to the instance's `max_output_bytes` (not for answers of a fixed small size).
#[derive(Debug, Clone, Copy)]
struct Export {
    name: &'static str,
    since_v0_2: bool,
    checked: bool,
}

impl Export {
    const fn new(name: &'static str) -> Export {
        Export {
            name,
            since_v0_2: false,
            checked: true,
        }
    }

    const fn since_v0_2(self) -> Export {
        Export {
            since_v0_2: true,
            ..self
        }
    }

    const fn unchecked(self) -> Export {
        Export {
            checked: false,
            ..self
        }
    }
}

/// An answer whose WIT and host types are the same.
fn same<T>(value: T) -> T {
    value
}

/// `convert` over a list answer.
fn each<W, T>(convert: fn(W) -> T) -> impl FnOnce(Vec<W>) -> Vec<T> {
    move |list| list.into_iter().map(convert).collect()
}

/// `convert` over an optional answer.
fn maybe<W, T>(convert: fn(W) -> T) -> impl FnOnce(Option<W>) -> Option<T> {
    move |value| value.map(convert)
}

/// The forge-API wrappers, one line each: `name(args) -> answer = "export" [options] =>
/// conversion`. Each becomes `pub async fn name(&self, plugin, ctx, args)`, calling the
/// export with the context and the arguments (borrowed ones owned) through
/// [`PluginHost::forge_export`].
macro_rules! forge_api_exports {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident: $ty:ty),*) -> $out:ty
            = $export:literal $(.$option:ident())* => $convert:expr;
    )*) => {
        impl PluginHost {$(
            $(#[$doc])*
            pub async fn $name(
                &self,
                plugin: &str,
                ctx: ApiContext,
                $($arg: $ty),*
            ) -> Result<$out, PluginError> {
                let export = Export::new($export)$(.$option())*;
                let args = ($($arg.to_owned(),)*);
                self.forge_export(plugin, export, ctx, args, $convert).await
            }
        )*}
    };
}

forge_api_exports! {
    fn repo_info(full_name: &str) -> Repo = "repo-info" => convert::repo;
    fn dir_at(full_name: &str, commit: &str, path: &str) -> Vec<String> = "dir-at" => same;
    fn branches(full_name: &str) -> Vec<String> = "branches" => same;
    /// The files pull request `pr_number` of `full_name` changes.
    fn changed_files(full_name: &str, pr_number: u64) -> Vec<String> = "changed-files" => same;
    /// The commit `branch` of `full_name` points at.
    fn branch_head(full_name: &str, branch: &str) -> CommitInfo
        = "branch-head" => convert::commit_info;
    /// Makes the forge call `url` for `full_name`'s events, signed with `secret`.
    fn create_hook(full_name: &str, url: &str, secret: &str) -> ()
        = "create-hook".unchecked() => same;
    /// Removes `full_name`'s hooks that call `url`.
    fn delete_hook(full_name: &str, url: &str) -> () = "delete-hook".unchecked() => same;
    /// The account `ctx.token` belongs to.
    fn current_user() -> ForgeUser = "current-user".since_v0_2() => convert::forge_user;
    /// Page `page` (from 1) of the user's repositories with their permissions.
    fn user_repos(page: u32, per_page: u32) -> Vec<RepoWithPerm>
        = "user-repos".since_v0_2() => each(convert::repo_with_perm);
    /// The user's permissions on `full_name`.
    fn repo_perm(full_name: &str) -> Perm
        = "repo-perm".since_v0_2().unchecked() => convert::perm;
    /// Page `page` (from 1) of the organisations the user belongs to.
    fn user_orgs(page: u32, per_page: u32) -> Vec<Team>
        = "user-orgs".since_v0_2() => each(convert::team);
    /// Whether `login` is a member (and admin) of `org`.
    fn org_membership(org: &str, login: &str) -> OrgMembership
        = "org-membership".since_v0_2().unchecked() => convert::org_membership;
    /// Page `page` (from 1) of `full_name`'s open pull requests.
    fn pull_requests(full_name: &str, page: u32, per_page: u32) -> Vec<PullRequestInfo>
        = "pull-requests".since_v0_2() => each(convert::pull_request);
    /// The `.netrc` entry for cloning `clone_url` as the user.
    fn netrc(clone_url: &str) -> NetrcInfo = "netrc".since_v0_2() => convert::netrc;
}

/// Instantiates `loaded` in `store` and calls its export `func` with `params`. Only this
/// function's type is checked (the bindings' `*Pre::instantiate` would check every export's
/// on every call); a mismatch is an error, not undefined behaviour.
async fn invoke<P, R>(
    loaded: &LoadedPlugin,
    store: &mut Store<CallState>,
    func: &str,
    params: P,
) -> wasmtime::Result<R>
where
    P: ComponentNamedList + Lower + Send + Sync,
    R: ComponentNamedList + Lift + Send + Sync + 'static,
{
    let index = loaded.exports.get(func)?;
    let instance = loaded
        .pre
        .instance_pre()
        .instantiate_async(&mut *store)
        .await?;
    let typed = instance.get_typed_func::<P, R>(&mut *store, index)?;
    typed.call_async(&mut *store, params).await
}

/// What a call's body returns: instantiate and call, borrowing the store (boxed, so the
/// borrow can be named in `F`'s signature).
type CallFuture<'a, T> =
    Pin<Box<dyn Future<Output = wasmtime::Result<Result<T, WitError>>> + Send + 'a>>;

/// One call on a fresh store. Runs on the caller's task: the epoch callback (every
/// [`crate::engine::TICK`]) yields to the runtime until the call's deadline, then traps
/// with `Trap::Interrupt`, so a guest holds a runtime worker for at most one tick at a time.
async fn run<T, F>(
    loaded: &LoadedPlugin,
    clock: &EpochClock,
    services: Arc<Services>,
    function: &'static str,
    scope: CallScope,
    f: F,
) -> Result<T, PluginError>
where
    F: for<'a> FnOnce(&'a LoadedPlugin, &'a mut Store<CallState>) -> CallFuture<'a, T>,
{
    let mut state = CallState::new(
        loaded.name.clone(),
        loaded.grants.clone(),
        loaded.limits,
        services,
    );
    state.unverified = scope.unverified;
    state.forge = scope.forge;
    // Declared before the store, so the clock keeps ticking until the store is gone.
    let _ticking = clock.running();
    let mut store = Store::new(&loaded.engine, state);
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|ctx| {
        Ok(if Instant::now() >= ctx.data().deadline {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Yield(1)
        })
    });
    let plugin = &*loaded.name;
    let result = f(loaded, &mut store).await;
    if !matches!(result, Ok(Ok(_)))
        && let Some(origin) = store.data_mut().denied_origin.take()
    {
        let label = &store.data().forge.label;
        let table = format!("add it to allowed_hosts of [plugins.instances.{plugin}]");
        return Err(PluginError::HostDenied {
            plugin: plugin.to_string(),
            origin: origin.to_string(),
            detail: if label.is_empty() {
                format!("calling {function}: {table}")
            } else {
                format!(
                    "calling {function} for {label}: a forge grants its adapter the origins of its url, oauth_host and additional_options.api_url; for another host, {table}"
                )
            },
        });
    }
    match result {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(convert::plugin_error(plugin, e)),
        Err(e) => Err(classify(plugin, &e, &store, loaded)),
    }
}

/// The length of `value` as JSON, counted without building the JSON (this runs on every
/// call's output). `u64::MAX` if it cannot be serialized.
fn serialized_len<T: Serialize>(value: &T) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => u64::MAX,
    }
}

fn classify(
    plugin: &str,
    e: &wasmtime::Error,
    store: &Store<CallState>,
    loaded: &LoadedPlugin,
) -> PluginError {
    if store.data().limiter.memory_exceeded {
        return PluginError::MemoryLimit {
            plugin: plugin.to_string(),
            memory_mb: loaded.limits.memory_mb,
        };
    }
    if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
        return PluginError::Timeout {
            plugin: plugin.to_string(),
            timeout_ms: loaded.limits.timeout_ms,
        };
    }
    PluginError::Trap {
        plugin: plugin.to_string(),
        message: format!("{e:#}"),
    }
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Inner {
    pub(crate) fn dir(&self) -> &Path {
        &self.config.dir
    }

    pub(crate) fn debounce_ms(&self) -> u64 {
        self.config.debounce_ms
    }

    /// Instances wanted now: the configured ones plus, with `load_unlisted`, every other
    /// `*.wasm` file in the directory (named after its stem).
    fn desired(&self) -> Vec<(String, InstanceConfig, bool)> {
        let mut out: Vec<(String, InstanceConfig, bool)> = self
            .config
            .instances
            .iter()
            .map(|(n, i)| (n.clone(), i.clone(), true))
            .collect();
        if self.config.load_unlisted
            && let Ok(entries) = std::fs::read_dir(self.dir())
        {
            let mut files: Vec<String> = entries
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|f| f.ends_with(".wasm") && !f.starts_with('.'))
                .collect();
            files.sort();
            for file in files {
                if self.config.instances.values().any(|i| i.file == file) {
                    continue;
                }
                let name = file.trim_end_matches(".wasm").to_ascii_lowercase();
                if out.iter().any(|(n, _, _)| *n == name) {
                    continue;
                }
                out.push((name, InstanceConfig::bare(file), false));
            }
        }
        out
    }

    pub(crate) fn reload(&self) -> Vec<(String, ReloadAction)> {
        let _guard = self.reload_lock.lock().unwrap_or_else(|p| p.into_inner());
        let old = self.registry.load_full();
        let mut next: Registry = BTreeMap::new();
        let mut report = Vec::new();
        for (name, inst, configured) in self.desired() {
            let path: PathBuf = self.dir().join(&inst.file);
            let limits = inst.limits(&self.config.defaults);
            let mut slot = match old.get(&name) {
                Some(s) => (**s).clone(),
                None => Slot {
                    file: inst.file.clone(),
                    current: None,
                    last_error: None,
                    failed_sha: None,
                    stats: Arc::new(Stats::default()),
                    semaphore: Arc::new(Semaphore::new(limits.max_concurrency as usize)),
                    max_concurrency: limits.max_concurrency,
                },
            };
            if !path.is_file() {
                let action = if slot.current.take().is_some() {
                    tracing::info!(plugin = %name, file = %path.display(), "plugin file removed; unloaded");
                    ReloadAction::Unloaded
                } else {
                    ReloadAction::Missing
                };
                if configured {
                    slot.failed_sha = None;
                    if slot.last_error.is_none() || action == ReloadAction::Unloaded {
                        slot.last_error = Some((
                            format!("file not found: {}", path.display()),
                            SystemTime::now(),
                        ));
                    }
                    next.insert(name.clone(), Arc::new(slot));
                }
                report.push((name, action));
                continue;
            }
            let action = match loader::read_file(&path) {
                Err(e) => {
                    tracing::warn!(plugin = %name, error = %e, "cannot read plugin file");
                    slot.last_error = Some((e.to_string(), SystemTime::now()));
                    ReloadAction::Failed(e)
                }
                Ok((bytes, sha)) => {
                    let same_loaded = slot.current.as_ref().is_some_and(|p| p.sha256 == sha);
                    let same_failed = slot.failed_sha.as_deref() == Some(sha.as_str());
                    if same_loaded || same_failed {
                        ReloadAction::Unchanged
                    } else {
                        match loader::load(
                            &self.engine,
                            &self.cache,
                            &self.linkers,
                            &name,
                            &inst,
                            &self.config.defaults,
                            &bytes,
                            &sha,
                        ) {
                            Ok(p) => {
                                tracing::info!(
                                    plugin = %name,
                                    world = %p.world,
                                    version = %p.version,
                                    sha256 = %sha,
                                    replaced = slot.current.is_some(),
                                    "plugin loaded"
                                );
                                slot.current = Some(Arc::new(p));
                                slot.last_error = None;
                                slot.failed_sha = None;
                                ReloadAction::Loaded { sha256: sha }
                            }
                            Err(e) => {
                                tracing::warn!(
                                    plugin = %name,
                                    sha256 = %sha,
                                    error = %e,
                                    kept_previous = slot.current.is_some(),
                                    "plugin failed to load"
                                );
                                slot.last_error = Some((e.to_string(), SystemTime::now()));
                                slot.failed_sha = Some(sha);
                                ReloadAction::Failed(e)
                            }
                        }
                    }
                }
            };
            next.insert(name.clone(), Arc::new(slot));
            report.push((name, action));
        }
        self.registry.store(Arc::new(next));
        report
    }
}
