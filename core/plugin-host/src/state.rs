//! Per-call store data: who is calling (the instance name), what it is granted, its limits,
//! and the server's services. A fresh [`CallState`] (and `Store`) is made for every call, so
//! nothing leaks from one webhook to the next and a trap poisons only a throwaway instance.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

use crate::config::{InstanceConfig, Limits, Origin};
use crate::http_client::HttpClient;
use crate::services::{KvStore, SecretSource};
use crate::types::ForgeGrant;

/// The config key under which forge adapters look up the name of the webhook secret.
pub(crate) const HOOK_SECRET_KEY: &str = "hook-secret";

/// The server-provided services shared by every call.
pub(crate) struct Services {
    pub kv: Arc<dyn KvStore>,
    pub secrets: Arc<dyn SecretSource>,
    pub http: HttpClient,
}

/// An instance's grants, resolved from its [`InstanceConfig`].
#[derive(Debug)]
pub(crate) struct Grants {
    pub allowed_hosts: HashSet<Origin>,
    pub secrets: HashSet<String>,
    pub config: BTreeMap<String, String>,
}

impl Grants {
    pub fn from_config(inst: &InstanceConfig) -> Self {
        Self {
            allowed_hosts: inst
                .allowed_hosts
                .iter()
                .filter_map(|h| Origin::parse(h).ok())
                .collect(),
            secrets: inst.secrets.iter().cloned().collect(),
            config: inst.config.clone(),
        }
    }
}

/// Host-side caps on what crosses the boundary through capabilities.
pub(crate) const MAX_LOG_LINE: usize = 4096;
pub(crate) const MAX_LOG_LINES_PER_CALL: u32 = 200;
pub(crate) const MAX_KV_KEY: usize = 512;
pub(crate) const MAX_KV_VALUE: usize = 256 * 1024;
pub(crate) const MAX_HTTP_REQUEST_BODY: usize = 4 << 20;
pub(crate) const MAX_HTTP_HEADERS: usize = 100;
pub(crate) const MAX_HTTP_CALLS_PER_CALL: u32 = 50;

pub(crate) struct CallState {
    pub plugin: Arc<str>,
    pub grants: Arc<Grants>,
    pub limits: Limits,
    pub services: Arc<Services>,
    /// When the whole call must be over; host I/O waits are bounded by it.
    pub deadline: Instant,
    pub limiter: CallLimiter,
    pub log_lines: u32,
    pub http_calls: u32,
    /// The origin whose TLS certificate this call does not verify: the forge of a forge
    /// call made with `skip_verify` (see [`crate::http_client`]).
    pub unverified: Option<Origin>,
    /// What the forge this call is made for grants (nothing for other calls).
    pub forge: ForgeGrant,
    /// The first origin this call was refused, so its failure can say which and why.
    pub denied_origin: Option<Origin>,
}

impl CallState {
    pub fn new(
        plugin: Arc<str>,
        grants: Arc<Grants>,
        limits: Limits,
        services: Arc<Services>,
    ) -> Self {
        Self {
            limiter: CallLimiter::new(limits.memory_mb),
            deadline: Instant::now() + limits.timeout(),
            plugin,
            grants,
            limits,
            services,
            log_lines: 0,
            http_calls: 0,
            unverified: None,
            forge: ForgeGrant::default(),
            denied_origin: None,
        }
    }

    /// Whether this call may reach `origin`: the instance's `allowed_hosts`, then the
    /// forge's own origins.
    pub fn may_reach(&self, origin: &Origin) -> bool {
        self.grants.allowed_hosts.contains(origin) || self.forge.origins.contains(origin)
    }

    /// Config value `key`: the forge's (its webhook secret's name as `hook-secret`, its API
    /// root) before the instance's.
    pub fn config_value(&self, key: &str) -> Option<String> {
        if key == HOOK_SECRET_KEY
            && let Some(secret) = &self.forge.hook_secret
        {
            return Some(secret.name.clone());
        }
        self.forge
            .config
            .get(key)
            .or_else(|| self.grants.config.get(key))
            .cloned()
    }

    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// `StoreLimits` (memory cap, trap on grow failure) plus a flag that tells the caller a trap
/// came from the memory limit.
pub(crate) struct CallLimiter {
    inner: StoreLimits,
    pub memory_exceeded: bool,
}

impl CallLimiter {
    fn new(memory_mb: u64) -> Self {
        Self {
            inner: StoreLimitsBuilder::new()
                .memory_size(usize::try_from(memory_mb << 20).unwrap_or(usize::MAX))
                .table_elements(100_000)
                .instances(64)
                .tables(64)
                .memories(16)
                .trap_on_grow_failure(true)
                .build(),
            memory_exceeded: false,
        }
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let r = self.inner.memory_growing(current, desired, maximum);
        if !matches!(r, Ok(true)) {
            self.memory_exceeded = true;
        }
        r
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.memory_exceeded = true;
        self.inner.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.inner.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}
