//! The CI service layer (crate `woodlark-ci`): what happens to pipelines, with no HTTP in
//! sight.
//!
//! The Woodpecker API's handlers (`modules::ci`) parse a request, authorize the caller, call
//! into this layer and render the result; the agent protocol's handlers and the embedded
//! agent call the same [`queue::Queue`] methods. Each service is built from the parts it
//! uses (store, sealing key, log bus), not from the HTTP state, and has its own error type
//! that classifies itself (`woodlark_stdx::Classify`) for whoever renders it.
//!
//! - [`queue`]: the queue service: leases, agent reports, cancel, re-queue, idle waits.
//! - [`lifecycle`]: the state transitions the queue makes inside one write (workflow end,
//!   dependents, roll-up, cancel, re-queue), unit-tested on in-memory SQLite.
//! - [`local`]: the embedded agent, the runner fed from the queue in memory.
//! - [`bus`]: live log lines for stream readers.
//! - [`feed`]: pipeline changes for live views, rebuilt from the event outbox.
//! - [`forge_secrets`]: a forge's sealed API token and webhook secret, in clear.
//! - [`forge`]: the forge drivers (the built-in `git` forge, forge-adapter plugins).
//! - [`create`]: a trigger (push, manual run, cron, restart) becomes a pipeline.
//! - [`numbers`]: the pipeline numbers creations compile with before their write.
//! - [`hooks`]: a forge's webhook (a git push, a plugin-parsed delivery) becomes triggers.
//! - [`plugin_services`]: storage and secrets lent to the WebAssembly plugin host.
//!
//! - [`access`]: what a caller may do on a repository or an organisation (the decisions).
//! - [`access_cache`]: what access checks learned, kept for one identity generation.
//! - [`reads`]: the read-only store view everyone above this layer gets ([`Reads`]).
//!
//! [`Services`] bundles the parts; the HTTP state holds one and hands it to this layer.

pub mod access;
pub mod access_cache;
pub mod agents;
pub mod auth;
pub mod bus;
pub mod create;
pub mod crons;
pub mod embedded;
pub mod feed;
pub mod forge;
pub mod forge_secrets;
pub mod forges;
pub mod hooks;
pub mod jobs;
pub mod lifecycle;
pub mod local;
pub mod numbers;
pub mod orgs;
pub mod pipelines;
pub mod plugin_services;
pub mod queue;
pub mod reads;
pub mod repos;
pub mod scoped;
pub mod statuses;
pub mod users;

use std::sync::{Arc, OnceLock};

use woodlark_pipeline as pipeline;
use woodlark_runner as runner;
use woodlark_store as store;

use woodlark_plugin_host::PluginHost;
use woodlark_stdx::{Classify, Fault};

use crate::auth::sealing::SealKey;
use crate::store::users::EnvAdmins;
use crate::store::{Store, StoreError};
pub use reads::Reads;

/// What the CI services are built from. One per server; cheap to clone (every part is a
/// handle to shared state).
#[derive(Clone)]
pub struct Services {
    /// The store the services write through: theirs alone (everyone else reads, through
    /// [`Services::reads`]).
    pub(crate) store: Store,
    /// Step logs, in their own database; written by the queue and the jobs.
    pub(crate) logs: Store,
    /// The store, read-only: what handlers, the CLI and the web UI read through.
    pub reads: Reads,
    /// The step logs' store, read-only.
    pub log_reads: Reads,
    /// Opens secrets and forge tokens, seals compiled workflows.
    pub seal: SealKey,
    pub plugins: PluginHost,
    /// Each forge's record and driver, built once.
    pub drivers: Arc<forge::drivers::Drivers>,
    /// Users' forge tokens, for calls made as them.
    pub tokens: forge::acting::Tokens,
    pub queue: Arc<queue::Queue>,
    pub settings: Arc<Settings>,
    /// The number each repository's next pipeline is expected to get.
    pub numbers: Arc<numbers::NumberBook>,
    /// Pipeline changes for live views, rebuilt from the outbox.
    pub feed: Arc<feed::PipelineFeed>,
    /// Stops the embedded runner; a graceful stop waits until it has swept its backend.
    pub runner_shutdown: Arc<crate::runner::Shutdown>,
    /// Commit statuses posted to forges, and given up.
    pub status_counts: Arc<statuses::StatusCounts>,
    /// Whether any stored forge can show commit statuses (the poster follows the feed only
    /// then).
    pub status_targets: Arc<statuses::Targets>,
    /// Organisation memberships read from forges, kept a few minutes.
    pub memberships: Arc<orgs::MembershipCache>,
    /// Permissions the forge could not give lately, not asked for again yet.
    pub perm_sync_pauses: Arc<repos::PermSyncPauses>,
}

/// The configuration the CI services read, built by the server from its own (this layer
/// knows no configuration file).
pub struct Settings {
    /// `[pipeline]`: secret backends, registry-auth plugins, privileged plugins.
    pub pipeline: PipelineSettings,
    /// Where the CI API is mounted (`/api`): forges post hooks to `<public url><mount>/hook`.
    pub mount: String,
    pub public_url: PublicUrl,
    /// `auth.admins`: logins that are instance admins whatever the database says.
    pub env_admins: EnvAdmins,
    /// `auth.open`: anyone with a forge account may sign in through it.
    pub open_registration: bool,
    /// `web.root_path`: where the web UI and `/authorize` are mounted.
    pub web_root: String,
    /// Forges the operator configured (`[[forges]]`, Woodpecker's variables), by id, with
    /// where each was configured as messages name it: the API shows them read-only.
    pub configured_forges: std::collections::BTreeMap<i64, &'static str>,
}

/// How pipelines are made and run: `[pipeline]` in config.toml, which the server reads into
/// this type directly (its `config::PipelineConfig`), so the fields are listed once.
/// Where pipelines get secrets and registry logins besides the API-managed ones, and how
/// often cron jobs may start them.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineSettings {
    /// Secret-backend plugin instances asked after the built-in store, in order; a name one
    /// of them already gave is not asked again (the built-in store always comes first).
    pub secret_backends: Vec<String>,
    /// Registry-auth plugin instances asked, in order, for a step image's registry when no
    /// registry configured through the API matches.
    pub registry_auth: Vec<String>,
    /// Plugin images that may run `privileged: true` in any repository (docker backend);
    /// everything else needs a repository trusted for security.
    pub privileged_plugins: Vec<String>,
    /// The shortest time between two runs of a cron job, in seconds: every cron job starts a
    /// pipeline, so a schedule firing every second would be a denial of service.
    pub cron_min_interval_secs: u64,
    /// Cron jobs one repository may have: each one starts pipelines on its own, so without a
    /// bound a repository admin could schedule hundreds of runs a minute.
    pub max_crons_per_repo: u64,
    /// Bytes of output kept per step (0 = no limit): past it the step's log ends with a line
    /// saying so and the step goes on. Logs are kept in the database and read whole by the
    /// UI, so one step printing without end would fill the disk.
    pub max_step_log_bytes: u64,
    /// The first part of the commit statuses' names on forges:
    /// `<status_context>/<event>/<workflow>` (upstream's `WOODPECKER_STATUS_CONTEXT`).
    pub status_context: String,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        PipelineSettings {
            secret_backends: Vec::new(),
            registry_auth: Vec::new(),
            privileged_plugins: Vec::new(),
            cron_min_interval_secs: 60,
            max_crons_per_repo: 50,
            max_step_log_bytes: 5 * 1024 * 1024,
            status_context: "ci/woodpecker".into(),
        }
    }
}

impl PipelineSettings {
    /// `cron_min_interval_secs` as the store's schedule arithmetic counts (unix seconds).
    pub fn cron_min_interval(&self) -> i64 {
        i64::try_from(self.cron_min_interval_secs).unwrap_or(i64::MAX)
    }
}

impl Services {
    /// The services over `store` and `logs`, with a fresh queue, number book and feed.
    pub fn new(
        store: Store,
        logs: Store,
        seal: SealKey,
        plugins: PluginHost,
        settings: Settings,
    ) -> Services {
        let settings = Arc::new(settings);
        let drivers = Arc::new(forge::drivers::Drivers::new(
            store.clone(),
            forge::drivers::PluginContext {
                plugins: plugins.clone(),
                seal: seal.clone(),
                settings: settings.clone(),
            },
        ));
        let tokens = forge::acting::Tokens::new(store.clone(), seal.clone());
        Services {
            queue: Arc::new(queue::Queue::new(
                store.clone(),
                logs.clone(),
                seal.clone(),
                drivers.clone(),
                tokens.clone(),
                settings.pipeline.max_step_log_bytes,
            )),
            tokens,
            drivers,
            feed: Arc::new(feed::PipelineFeed::new(store.clone())),
            numbers: Arc::new(numbers::NumberBook::following(store.clone())),
            runner_shutdown: Arc::default(),
            status_counts: Arc::default(),
            status_targets: Arc::default(),
            memberships: Arc::default(),
            perm_sync_pauses: Arc::default(),
            settings,
            reads: Reads::new(store.clone()),
            log_reads: Reads::new(logs.clone()),
            store,
            logs,
            seal,
            plugins,
        }
    }
}

impl Services {
    /// Stops both stores' writers once everything queued has committed: the server's last
    /// step, after the runner has stopped.
    pub fn close_stores(&self) {
        self.store.close();
        self.logs.close();
    }

    /// The writable store, for tests that set up rows no service makes.
    #[cfg(feature = "test-support")]
    pub fn store_for_tests(&self) -> &Store {
        &self.store
    }
}

impl Settings {
    /// The endpoint forge-wide webhooks call (plugin forges); known once the server has its
    /// public URL, so read when needed, not kept.
    pub fn hook_endpoint(&self) -> String {
        format!("{}{}/hook", self.public_url.get(), self.mount)
    }

    /// Where forges send browsers back after sign-in (the OAuth redirect URI operators
    /// register with their forge).
    pub fn oauth_callback(&self) -> String {
        format!("{}{}/authorize", self.public_url.get(), self.web_root)
    }
}

/// The base URL under which forges and agents reach the server: `server.public_url`, or
/// derived from the bound address once the listener exists (set once, at serve time).
pub struct PublicUrl {
    bound: OnceLock<String>,
    /// Until then: `http://<listen>`.
    fallback: String,
}

impl PublicUrl {
    pub fn new(listen: &str) -> PublicUrl {
        PublicUrl {
            bound: OnceLock::new(),
            fallback: format!("http://{listen}"),
        }
    }

    /// Fixes the URL (first call wins); without a trailing slash.
    pub fn set(&self, url: String) {
        let _ = self.bound.set(url);
    }

    /// The URL without a trailing slash.
    pub fn get(&self) -> String {
        self.bound
            .get()
            .cloned()
            .unwrap_or_else(|| self.fallback.clone())
    }
}

/// The Woodpecker API level this server is compatible with; our own version rides along as
/// semver build metadata so clients that compare versions see the API they can use.
pub const COMPATIBLE_WOODPECKER: &str = "3.17.0";

/// The server's version as upstream's API and `CI_SYSTEM_VERSION` report it: the Woodpecker
/// version we are compatible with, then ours.
pub fn version_string() -> String {
    format!(
        "{}+woodlark.{}",
        COMPATIBLE_WOODPECKER,
        env!("CARGO_PKG_VERSION")
    )
}

/// Why a CI service call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Forge(#[from] forge::ForgeError),
    /// The request cannot be acted on; the message says why and is shown.
    #[error("{0}")]
    Invalid(String),
    /// The request clashes with the current state; the message says why and is shown.
    #[error("{0}")]
    Conflict(String),
    /// The caller may not do this (e.g. their forge permission is too low); shown.
    #[error("{0}")]
    Forbidden(String),
    /// Well-formed, but a value in it cannot be used (upstream's 422); shown.
    #[error("{0}")]
    Unprocessable(String),
    /// A stored value could not be opened (its text is logged, never shown).
    #[error("{0}")]
    Internal(String),
}

impl From<forge::DriverError> for Error {
    fn from(e: forge::DriverError) -> Error {
        match e {
            forge::DriverError::Store(e) => Error::Store(e),
            forge::DriverError::Forge(e) => Error::Forge(e),
        }
    }
}

impl Classify for Error {
    fn fault(&self) -> Fault {
        match self {
            Error::Store(e) => e.fault(),
            Error::Forge(e) => e.fault(),
            Error::Invalid(message) => Fault::Invalid(message.clone()),
            Error::Conflict(message) => Fault::Conflict(message.clone()),
            Error::Forbidden(message) => Fault::Forbidden(message.clone()),
            Error::Unprocessable(message) => Fault::Unprocessable(message.clone()),
            Error::Internal(_) => Fault::Internal,
        }
    }
}
