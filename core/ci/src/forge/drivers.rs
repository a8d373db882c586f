//! Forge drivers, built once per forge and kept until the forge changes.
//!
//! Everything that talks to a forge (a webhook delivery, a cron run, the queue handing out
//! clone credentials, activation) asks [`Drivers::get`] for the forge's record and driver
//! together, so a delivery reads the forge row at most once and usually not at all. A cached
//! entry is dropped when `ci::forges` changes or removes the forge ([`Drivers::forget`]); a
//! plugin forge's entry is also rebuilt when another adapter now serves its type (a plugin
//! loaded or unloaded). On a database shared with other replicas, which change forges
//! without this server's `forget`, a kept entry is checked against the stored row after
//! every change to the identity tables (forges are among them), and rebuilt if it differs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use woodlark_plugin_host::{ForgeGrant, PluginHost};

use super::plugin::{PluginForge, plugin_for};
use super::{DriverError, ForgeDriver, ForgeError, git};
use crate::Settings;
use crate::auth::sealing::SealKey;
use crate::store::Store;
use crate::store::forges::{self, ForgeKind, ForgeRow};

/// A forge's record and the driver built from it.
pub struct ForgeHandle {
    pub row: ForgeRow,
    pub driver: Arc<dyn ForgeDriver>,
    /// The adapter serving a plugin forge when the driver was built.
    plugin: Option<String>,
    /// What the forge grants its adapter (nothing for the built-in forge).
    grant: ForgeGrant,
}

impl ForgeHandle {
    pub fn kind(&self) -> ForgeKind {
        self.row.forge.kind
    }

    /// The forge-adapter plugin serving the forge; `None` for the built-in `git` forge.
    pub fn plugin(&self) -> Option<&str> {
        self.plugin.as_deref()
    }

    /// What the forge grants its adapter, for calls (a webhook's parsing) made for it.
    pub fn grant(&self) -> &ForgeGrant {
        &self.grant
    }
}

/// What a plugin forge's driver needs besides its record.
pub struct PluginContext {
    pub plugins: PluginHost,
    pub seal: SealKey,
    /// Where forge-wide webhooks post ([`Settings::hook_endpoint`]).
    pub settings: Arc<Settings>,
}

/// A built driver and the identity generation its row was last known current at.
struct Kept {
    handle: Arc<ForgeHandle>,
    checked: u64,
}

/// The drivers of every forge used so far.
pub struct Drivers {
    store: Store,
    context: PluginContext,
    built: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    handles: HashMap<i64, Kept>,
    /// Bumped by every [`Drivers::forget`]: a driver built from a row read before it is not
    /// kept.
    generation: u64,
}

impl Drivers {
    pub fn new(store: Store, context: PluginContext) -> Drivers {
        Drivers {
            store,
            context,
            built: Mutex::default(),
        }
    }

    /// Forge `forge_id`'s record and driver.
    pub async fn get(&self, forge_id: i64) -> Result<Arc<ForgeHandle>, DriverError> {
        // Only another replica's change can make a kept row stale without `forget`.
        let identity = if self.store.is_shared() {
            self.store.identity_generation()
        } else {
            0
        };
        let (generation, kept) = {
            let cache = self.cache();
            let kept = cache
                .handles
                .get(&forge_id)
                .filter(|k| self.is_current(&k.handle));
            if let Some(kept) = kept
                && kept.checked == identity
            {
                return Ok(kept.handle.clone());
            }
            (cache.generation, kept.map(|k| k.handle.clone()))
        };
        let row = self.store.read(move |c| forges::by_id(c, forge_id)).await?;
        let handle = match kept {
            Some(handle) if handle.row == row => handle,
            _ => Arc::new(self.build(row)?),
        };
        let mut cache = self.cache();
        if cache.generation == generation {
            let kept = Kept {
                handle: handle.clone(),
                checked: identity,
            };
            cache.handles.insert(forge_id, kept);
        }
        Ok(handle)
    }

    /// Drops what is kept of forge `forge_id` (its record changed or it was removed).
    pub fn forget(&self, forge_id: i64) {
        let mut cache = self.cache();
        cache.handles.remove(&forge_id);
        cache.generation += 1;
    }

    /// A driver for `row`, as it would be kept.
    fn build(&self, row: ForgeRow) -> Result<ForgeHandle, ForgeError> {
        if row.forge.kind.is_builtin() {
            return Ok(ForgeHandle {
                driver: Arc::new(git::GitForge::from_url(&row.forge.url)?),
                row,
                plugin: None,
                grant: ForgeGrant::default(),
            });
        }
        let plugin = plugin_for(&self.context.plugins, &row.forge)
            .ok_or_else(|| ForgeError::NoDriver(row.forge.kind.to_string()))?;
        let driver = PluginForge::new(&self.context, &row, plugin.clone())?;
        Ok(ForgeHandle {
            grant: driver.grant().clone(),
            driver: Arc::new(driver),
            row,
            plugin: Some(plugin),
        })
    }

    /// A kept plugin driver is stale once another adapter (or none) serves its forge.
    fn is_current(&self, handle: &ForgeHandle) -> bool {
        match &handle.plugin {
            None => true,
            Some(name) => {
                plugin_for(&self.context.plugins, &handle.row.forge).as_ref() == Some(name)
            }
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.built
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
