//! What every handler receives: the configuration, the services and the modules' own state.
//!
//! This module sits below the HTTP modules and above the services: handlers import [`Ctx`]
//! from here, and nothing here imports a handler (`layering::the_app_state_imports_no_handler`).
//! The modules' own state lives here for that reason: [`participation`] (the admin token,
//! key-generation slot and debug settings) and [`rendered`] (bodies of hot reads); the access
//! cache is the services' (`ci::access_cache`). State changes are not made through
//! `AppState` directly: it hands out the services ([`crate::ci::Services`], the participation
//! [`Keyring`]) that make them.

use std::sync::Arc;
use std::time::Instant;

use crate::auth::keys::ServerKey;
use crate::ci::Services;
use crate::ci::access_cache::AccessCache;
use crate::config::Config;
use crate::http::metrics::Metrics;
use crate::http::{ErrorStyle, Router};
use crate::logging::LogControl;
use crate::participation::Keyring;
use crate::store::users::Account;

pub mod api;
pub mod participation;
pub mod rendered;

use participation::State as ParticipationState;
use rendered::RenderedPages;

/// Shared by every handler.
pub struct AppState {
    pub config: Config,
    /// The CI service layer: store, logs, sealing key, plugins, queue, pipeline feed.
    pub ci: Services,
    /// The participation service: installed keys.
    pub keyring: Keyring,
    /// Signs what the server vouches for (`/api/signature/public-key`).
    pub key: ServerKey,
    pub log: LogControl,
    pub metrics: Arc<Metrics>,
    pub started: Instant,
    /// Every enabled interface's mount and error style (the web UI never answers below them).
    pub mounts: Vec<Mount>,
    /// The participation module's admin token, key-generation slot and debug settings.
    pub participation: Arc<ParticipationState>,
    /// The CI module's verified tokens and repository permissions, valid for one identity
    /// generation.
    pub access_cache: AccessCache,
    /// Pipeline and event bodies, valid while the tables they came from are unchanged.
    pub rendered: RenderedPages,
    /// Scheduled backups written and failed (`/metrics`).
    pub backups: Arc<crate::backup::schedule::BackupCounts>,
    /// The CI API's routes (below its mount), for requests made in process ([`api::call`]:
    /// the built-in UI's forms). Empty when the CI module is off.
    pub api: Router<Ctx>,
}

/// Where one interface is mounted and how its errors look.
#[derive(Debug, Clone)]
pub struct Mount {
    pub name: &'static str,
    pub prefix: String,
    pub style: ErrorStyle,
}

impl AppState {
    /// The key that signs and verifies `account`'s tokens (personal, session, CSRF, login link).
    pub fn token_key(&self, account: &Account) -> String {
        crate::auth::user_token_key(&self.ci.seal, account)
    }

    /// The public base URL without a trailing slash.
    pub fn public_url(&self) -> String {
        self.ci.settings.public_url.get()
    }
}

/// What handlers receive: cheap to clone.
pub type Ctx = Arc<AppState>;
