//! What the server lends the plugin host: durable `kv` storage and named secrets for
//! `signing`.
//!
//! Both are called from blocking threads (plugin calls run there), so they reach the async
//! store through the runtime handle; the writes go through the store's single writer like
//! every other write.
//!
//! Secret names a plugin may be granted (`[plugins.instances.<name>] secrets = [...]`):
//! - `forge:<id>`: the webhook secret generated for forge `<id>` (shown to admins by
//!   `GET /api/forges/<id>`), the usual choice for verifying a forge's webhook signatures;
//! - any other name: the instance-wide CI secret of that name (`/api/secrets`).

use std::time::Duration;

use tokio::runtime::Handle;
use woodlark_plugin_host::{KvError, KvStore, SecretSource};

use crate::auth::sealing::SealKey;
use crate::ci::forge_secrets::webhook_secret;
use crate::store::{Store, forges, now_unix_ms, plugin_kv, secrets};

pub struct StoreKv {
    pub store: Store,
    pub handle: Handle,
}

fn kv_err(e: impl std::fmt::Display) -> KvError {
    KvError(e.to_string())
}

impl KvStore for StoreKv {
    fn get(&self, namespace: &str, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        let (ns, k) = (namespace.to_string(), key.to_string());
        self.handle
            .block_on(
                self.store
                    .read(move |c| plugin_kv::get(c, &ns, &k, now_unix_ms())),
            )
            .map_err(kv_err)
    }

    fn set(
        &self,
        namespace: &str,
        key: &str,
        value: &[u8],
        ttl: Option<Duration>,
    ) -> Result<(), KvError> {
        let (ns, k, v) = (namespace.to_string(), key.to_string(), value.to_vec());
        let expires = ttl.map(|t| now_unix_ms() + t.as_millis() as i64);
        self.handle
            .block_on(
                self.store
                    .write(move |c| plugin_kv::set(c, &ns, &k, &v, expires)),
            )
            .map_err(kv_err)
    }

    fn delete(&self, namespace: &str, key: &str) -> Result<(), KvError> {
        let (ns, k) = (namespace.to_string(), key.to_string());
        self.handle
            .block_on(self.store.write(move |c| plugin_kv::delete(c, &ns, &k)))
            .map_err(kv_err)
    }
}

pub struct StoreSecrets {
    pub store: Store,
    pub seal: SealKey,
    pub handle: Handle,
}

impl SecretSource for StoreSecrets {
    fn secret(&self, name: &str) -> Option<Vec<u8>> {
        if let Some(id) = name
            .strip_prefix("forge:")
            .and_then(|i| i.parse::<i64>().ok())
        {
            let row = self
                .handle
                .block_on(self.store.read(move |c| forges::by_id(c, id)))
                .ok()?;
            return webhook_secret(&self.seal, &row)
                .ok()
                .map(String::into_bytes);
        }
        let n = name.to_string();
        let row = self
            .handle
            .block_on(
                self.store
                    .read(move |c| secrets::find(c, secrets::ResourceScope::GLOBAL, &n)),
            )
            .ok()?;
        self.seal
            .open(secrets::SEAL_PURPOSE, &row.sealed_value)
            .ok()
    }
}
