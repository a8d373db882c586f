//! Wiring: configuration in, a ready-to-serve application out.
//!
//! [`App::build`] prepares everything that can fail before the first connection (data dir,
//! database and migrations, signing key, route table); [`App::serve`] then only serves. Tests
//! build an `App` on a temporary data dir and serve it on `127.0.0.1:0`.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;

use crate::auth::keys::{KeyError, ServerKey};
use crate::auth::sealing::{SealError, SealKey};
use crate::config::Config;
use crate::http::metrics::Metrics;
use crate::http::router::RouteError;
use crate::http::server::{self, Dispatcher, ServerOptions};
use crate::http::{ErrorStyle, Router};
use crate::logging::LogControl;
use crate::modules::{self, Module};
use crate::participation::Keyring;
use crate::state::Mount;
use crate::state::participation::InitError;
pub use crate::state::{AppState, Ctx};
use crate::store::users::EnvAdmins;
use crate::store::{Store, StoreError, StoreOptions};

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("cannot create data dir {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("signing key: {0}")]
    Key(#[from] KeyError),
    #[error("secrets key: {0}")]
    Seal(#[from] SealError),
    /// A command that only reads found no usable key where `storage.secret_key_file` says
    /// (it makes none: a new key could open nothing sealed in the database).
    #[error("storage.secret_key_file: {0}; the key that sealed this data dir's secrets is needed")]
    SealKeyMissing(SealError),
    #[error(transparent)]
    Tls(#[from] server::TlsError),
    #[error("plugins: {0}")]
    Plugins(#[from] woodlark_plugin_host::HostError),
    #[error("route table: {0}")]
    Route(#[from] RouteError),
    /// The local runner cannot run steps as configured (`runner.sandbox`).
    #[error("{0}")]
    Runner(String),
    /// A configured forge (`[[forges]]`, Woodpecker's variables) cannot be applied.
    #[error("configured forges: {0}")]
    Forges(crate::ci::Error),
}

impl From<InitError> for AppError {
    fn from(e: InitError) -> AppError {
        AppError::DataDir {
            path: e.path,
            source: e.source,
        }
    }
}

pub struct App {
    dispatcher: Arc<Dispatcher<Ctx>>,
    options: ServerOptions,
    /// The store and the logs' store, for retention, the one writer besides the services
    /// (handlers get only `ci.reads`).
    retention: (Store, Store),
}

/// The database file inside the data dir.
pub use crate::store::DB_FILE;

/// Creates the data dir (and missing parents) and makes it accessible to its owner only
/// (0700), also when it exists already: it holds the databases, the keys and the plugin cache.
fn make_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Opens the store of `config`'s data dir (creating the dir) with its sealing key, as the
/// CLI's `user add` does: the key is checked against the database's, so a token printed with
/// the wrong key file (or a new one made because the file was missing) is refused, never
/// handed out.
pub fn open_store(config: &Config) -> Result<(Store, SealKey), AppError> {
    let seal = load_seal(config)?;
    let store = open_sealed_store(config, Some(&seal))?;
    Ok((store, seal))
}

/// Opens the store of `config`'s data dir for reading only (`Store::open_read_only`), with
/// its sealing key, which must exist and be the database's: for the CLI's commands that only
/// read (`user token`, `user login-link`), which so change nothing in a data dir a server may
/// be using, and never compete for its replicas' lead.
pub fn open_store_read_only(config: &Config) -> Result<(Store, SealKey), AppError> {
    let seal = SealKey::load(&config.secret_key_path()).map_err(AppError::SealKeyMissing)?;
    let options = store_options(config, Some(&seal));
    let store = if config.storage.url.is_empty() {
        Store::open_read_only(&config.server.data_dir.join(DB_FILE), &options)?
    } else {
        Store::open_postgres_read_only(&config.storage.url, &options)?
    };
    Ok((store, seal))
}

/// How `config` asks for its main store to be opened, checked against `seal`.
fn store_options(config: &Config, seal: Option<&SealKey>) -> StoreOptions {
    StoreOptions {
        readers: config.storage.readers,
        full_sync: config.storage.synchronous == "full",
        sealing_key: seal.map(SealKey::fingerprint),
        competes_for_lead: true,
    }
}

/// The sealing key of `config`, created (in a data dir created first, 0700) on a fresh
/// install.
fn load_seal(config: &Config) -> Result<SealKey, AppError> {
    let dir = &config.server.data_dir;
    make_private_dir(dir).map_err(|source| AppError::DataDir {
        path: dir.clone(),
        source,
    })?;
    Ok(SealKey::load_or_create(&config.secret_key_path())?)
}

/// Opens the store as the server does: refusing a database whose secrets were sealed with
/// another key than `seal` (one of several replicas given the wrong key file).
fn open_sealed_store(config: &Config, seal: Option<&SealKey>) -> Result<Store, AppError> {
    let dir = &config.server.data_dir;
    make_private_dir(dir).map_err(|source| AppError::DataDir {
        path: dir.clone(),
        source,
    })?;
    let options = store_options(config, seal);
    if !config.storage.url.is_empty() {
        return Ok(Store::open_postgres(&config.storage.url, &options)?);
    }
    Ok(Store::open(&dir.join(DB_FILE), &options)?)
}

/// Opens the step logs' store: their own file in the data dir on SQLite, the same database
/// on PostgreSQL.
fn open_logs(config: &Config) -> Result<Store, AppError> {
    // The logs' store never leads: on PostgreSQL it shares the main store's database, and
    // its listener holding the leader lock would leave every replica a follower.
    let options = StoreOptions {
        readers: 2,
        full_sync: config.storage.synchronous == "full",
        sealing_key: None,
        competes_for_lead: false,
    };
    if !config.storage.url.is_empty() {
        return Ok(Store::open_postgres(&config.storage.url, &options)?);
    }
    Ok(Store::open_with(
        &config.server.data_dir.join(crate::store::logs::LOGS_FILE),
        &options,
        crate::store::logs::migrate,
    )?)
}

/// How the server serves connections (timeouts, limits, TLS from `server.tls_*`).
pub fn server_options(config: &Config) -> Result<ServerOptions, AppError> {
    let tls = if config.server.tls_cert.as_os_str().is_empty() {
        None
    } else {
        Some(server::tls_config(
            &config.server.tls_cert,
            &config.server.tls_key,
        )?)
    };
    Ok(ServerOptions {
        header_read_timeout: Duration::from_millis(config.server.header_read_timeout_ms),
        idle_timeout: Duration::from_millis(config.server.idle_timeout_ms),
        shutdown_grace: Duration::from_millis(config.server.shutdown_grace_ms),
        max_connections: config.server.max_connections,
        tls,
    })
}

impl App {
    pub fn build(config: Config, log: LogControl) -> Result<App, AppError> {
        let seal = load_seal(&config)?;
        let store = open_sealed_store(&config, Some(&seal))?;
        let key = ServerKey::load_shared(&store, &seal, &config.server.data_dir)?;
        let logs = open_logs(&config)?;
        let participation = Arc::new(modules::participation::State::init(&config)?);
        let options = server_options(&config)?;
        let plugins = start_plugins(&config, &store, &seal)?;
        // Compiling the plugins (on several threads, each with its own malloc arena) can
        // leave megabytes freed but still resident: trimming a running server by hand took it
        // from 42 to 38 MB. With today's plugins most of a first start's extra heap stays live
        // and this returns little (docs/benchmarks.md, rss); starts from the compiled-code
        // cache do not need it.
        crate::http::heap::release_free_heap();
        if config.ci.enabled && config.runner.enabled {
            crate::config::check_sandbox(&config).map_err(AppError::Runner)?;
        }
        let router = build_router(&config)?;
        let api = build_api_router(&config)?;
        let retention = (store.clone(), logs.clone());
        let ci = crate::ci::Services::new(
            store.clone(),
            logs,
            seal.clone(),
            plugins,
            crate::ci::Settings {
                pipeline: config.pipeline.clone(),
                mount: config.ci.mount.clone(),
                public_url: crate::ci::PublicUrl::new(&config.server.listen),
                env_admins: EnvAdmins(config.auth.admins.clone()),
                open_registration: config.auth.open,
                web_root: config.web.root_path().to_string(),
                configured_forges: config
                    .forges
                    .iter()
                    .map(|f| (f.id, f.origin.describe()))
                    .collect(),
            },
        );
        for note in &config.notes {
            tracing::info!("configuration: {note}");
        }
        let configured: Vec<_> = config.forges.iter().map(|f| f.configured()).collect();
        crate::ci::forges::configure_now(&ci, &configured).map_err(AppError::Forges)?;
        let mounts = enabled(&config)
            .into_iter()
            .map(|(module, settings)| Mount {
                name: module.name,
                prefix: settings.mount,
                style: module.error_style,
            })
            .collect();
        let state = Arc::new(AppState {
            keyring: Keyring::new(store, seal),
            config,
            key,
            ci,
            log,
            metrics: Arc::new(Metrics::default()),
            started: Instant::now(),
            mounts,
            participation,
            access_cache: Default::default(),
            rendered: Default::default(),
            backups: Default::default(),
            api,
        });
        Ok(App {
            dispatcher: Arc::new(Dispatcher {
                router,
                metrics: state.metrics.clone(),
                body_read_timeout: Duration::from_millis(state.config.server.body_read_timeout_ms),
                state,
            }),
            options,
            retention,
        })
    }

    pub fn state(&self) -> &Ctx {
        &self.dispatcher.state
    }

    /// Every route as `METHOD /pattern`.
    pub fn routes(&self) -> Vec<String> {
        self.dispatcher.router.routes()
    }

    /// Serves until `shutdown` resolves, then drains connections and flushes the store.
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let state = &self.dispatcher.state;
        let configured = state
            .config
            .server
            .public_url
            .trim_end_matches('/')
            .to_string();
        let url = match (configured.is_empty(), listener.local_addr()) {
            (false, _) => configured,
            (true, Ok(addr)) if self.options.tls.is_some() => format!("https://{addr}"),
            (true, Ok(addr)) => format!("http://{addr}"),
            (true, Err(_)) => format!("http://{}", state.config.server.listen),
        };
        state.ci.settings.public_url.set(url);
        let ci = state.ci.clone();
        if state.config.plugins.watch
            && let Err(err) = state.ci.plugins.watch()
        {
            tracing::warn!(%err, "cannot watch the plugin directory; changes need a restart");
        }
        let mut background = spawn_background(&state.config, &state.ci, &self.retention);
        if !state.config.storage.backup_dir.as_os_str().is_empty() {
            let scheduled =
                crate::backup::schedule::run(state.config.clone(), state.backups.clone());
            background.push(tokio::spawn(scheduled));
        }
        // On the signal the embedded runner stops taking work at once, while connections
        // drain: its running workflows have their own grace (`runner.shutdown_grace_secs`).
        let runner = ci.runner_shutdown.clone();
        let shutdown = async move {
            shutdown.await;
            runner.begin();
        };
        server::serve(listener, self.dispatcher, self.options, shutdown).await;
        // The store stays open until the runner has finished or handed over its workflows
        // and swept.
        ci.runner_shutdown.stop().await;
        for task in background {
            task.abort();
        }
        tokio::task::spawn_blocking(move || ci.close_stores())
            .await
            .ok();
    }
}

/// Builds the plugin host (inside the current tokio runtime) and loads the plugin directory
/// once; the watcher starts when the server starts serving. Compiled code is cached in
/// `<data_dir>/plugin-cache` unless `plugins.cache_dir` says otherwise.
fn start_plugins(
    config: &Config,
    store: &Store,
    seal: &SealKey,
) -> Result<woodlark_plugin_host::PluginHost, AppError> {
    let handle = tokio::runtime::Handle::try_current().map_err(|_| {
        woodlark_plugin_host::HostError::Engine(
            "the server must be built inside a tokio runtime".into(),
        )
    })?;
    let mut plugins = config.plugins.clone();
    if plugins.cache_dir.as_os_str().is_empty() {
        plugins.cache_dir = config.server.data_dir.join("plugin-cache");
    }
    let services = woodlark_plugin_host::HostServices {
        kv: Arc::new(crate::ci::plugin_services::StoreKv {
            store: store.clone(),
        }),
        secrets: Arc::new(crate::ci::plugin_services::StoreSecrets {
            store: store.clone(),
            seal: seal.clone(),
        }),
    };
    let host = woodlark_plugin_host::PluginHost::new(plugins, services)?;
    let h = host.clone();
    // Loading compiles components: keep it off the async worker threads.
    let report = if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
        tokio::task::block_in_place(move || h.reload())
    } else {
        h.reload()
    };
    for (name, action) in report {
        tracing::info!(plugin = name, outcome = ?action, "plugin");
    }
    Ok(host)
}

/// The interfaces `config` enables, with their config sections.
fn enabled(config: &Config) -> Vec<(Module, crate::config::ModuleConfig)> {
    modules::all(&config.web)
        .into_iter()
        .filter_map(|module| {
            let (_, settings) = config
                .modules()
                .into_iter()
                .find(|(name, _)| *name == module.name)?;
            settings.enabled.then(|| (module, settings.clone()))
        })
        .collect()
}

/// The work that runs beside the requests while the server serves: the pipeline feed, the
/// CI jobs (leases, crons, the embedded runner) and retention. Aborted when serving stops.
fn spawn_background(
    config: &Config,
    ci: &crate::ci::Services,
    (store, logs): &(Store, Store),
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    if config.ci.enabled {
        tasks.push(tokio::spawn(ci.feed.clone().run()));
        tasks.push(tokio::spawn(crate::ci::statuses::run(ci.clone())));
        tasks.push(tokio::spawn(ci.queue.clone().follow_other_replicas()));
        tasks.extend(crate::ci::jobs::spawn(ci));
        if config.runner.enabled {
            // Subscribed now, so a stop that comes before the runner runs still waits for it.
            let shutdown = ci.runner_shutdown.subscribe();
            let runner = crate::ci::embedded::run(
                ci.clone(),
                crate::config::embedded_runner(config),
                shutdown,
            );
            tasks.push(tokio::spawn(runner));
        }
    }
    if config.ci.enabled && config.storage.log_retention_days > 0 {
        let days = config.storage.log_retention_days;
        tasks.push(tokio::spawn(crate::retention::step_logs(
            logs.clone(),
            days,
        )));
    }
    if config.events.module.enabled {
        let settings = config.events.clone();
        tasks.push(tokio::spawn(crate::retention::events(
            store.clone(),
            settings,
        )));
    }
    tasks
}

fn build_router(config: &Config) -> Result<Router<Ctx>, RouteError> {
    let mut router = Router::new(config.server.max_body_bytes)
        .with_body_budget(config.server.unauthenticated_body_budget_bytes);
    for (module, settings) in enabled(config) {
        module.routes(&mut router.scope(&settings.mount, module.error_style));
        module.root_routes(&mut router.scope("", ErrorStyle::PlainText));
    }
    router.finish()
}

/// The CI module's routes alone, at its mount: what the built-in UI calls in process
/// (`state::api`). The same routes and limits as [`build_router`] gives them.
fn build_api_router(config: &Config) -> Result<Router<Ctx>, RouteError> {
    let mut router = Router::new(config.server.max_body_bytes)
        .with_body_budget(config.server.unauthenticated_body_budget_bytes);
    for (module, settings) in enabled(config) {
        if module.name == "ci" {
            module.routes(&mut router.scope(&settings.mount, module.error_style));
        }
    }
    router.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_table_builds_with_defaults_and_custom_mounts() {
        let config = Config::default();
        let routes = build_router(&config).unwrap().routes();
        assert!(routes.contains(&"GET /api/user".to_string()));
        assert!(routes.contains(&"GET /healthz".to_string()));
        let mut config = Config::default();
        config.ci.mount = "/woodpecker/api".into();
        let routes = build_router(&config).unwrap().routes();
        assert!(routes.contains(&"DELETE /woodpecker/api/users/{login}".to_string()));
    }
}
