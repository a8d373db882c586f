//! What the server lends the plugin host: durable `kv` storage and named secrets for
//! `signing`.
//!
//! Plugin calls run on the async runtime, so both await the store; the writes go through
//! the store's single writer like every other write.
//!
//! Secret names a plugin may be granted (`[plugins.instances.<name>] secrets = [...]`):
//! - `forge:<id>`: the webhook secret generated for forge `<id>` (shown to admins by
//!   `GET /api/forges/<id>`), the usual choice for verifying a forge's webhook signatures;
//! - any other name: the instance-wide CI secret of that name (`/api/secrets`).

use std::time::Duration;

use woodlark_plugin_host::{KvError, KvStore, SecretSource, ServiceFuture};

use crate::auth::sealing::SealKey;
use crate::forge_secrets::webhook_secret;
use crate::store::{Store, forges, now_unix_ms, plugin_kv, secrets};

pub struct StoreKv {
    pub store: Store,
}

fn kv_err(e: impl std::fmt::Display) -> KvError {
    KvError(e.to_string())
}

impl KvStore for StoreKv {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a str,
    ) -> ServiceFuture<'a, Result<Option<Vec<u8>>, KvError>> {
        let (ns, k) = (namespace.to_string(), key.to_string());
        Box::pin(async move {
            self.store
                .read(move |c| plugin_kv::get(c, &ns, &k, now_unix_ms()))
                .await
                .map_err(kv_err)
        })
    }

    fn set<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a str,
        value: &'a [u8],
        ttl: Option<Duration>,
    ) -> ServiceFuture<'a, Result<(), KvError>> {
        let (ns, k, v) = (namespace.to_string(), key.to_string(), value.to_vec());
        let expires = ttl.map(|t| now_unix_ms() + t.as_millis() as i64);
        Box::pin(async move {
            self.store
                .write(move |c| plugin_kv::set(c, &ns, &k, &v, expires))
                .await
                .map_err(kv_err)
        })
    }

    fn delete<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a str,
    ) -> ServiceFuture<'a, Result<(), KvError>> {
        let (ns, k) = (namespace.to_string(), key.to_string());
        Box::pin(async move {
            self.store
                .write(move |c| plugin_kv::delete(c, &ns, &k))
                .await
                .map_err(kv_err)
        })
    }
}

pub struct StoreSecrets {
    pub store: Store,
    pub seal: SealKey,
}

impl SecretSource for StoreSecrets {
    fn secret<'a>(&'a self, name: &'a str) -> ServiceFuture<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            if let Some(id) = name
                .strip_prefix("forge:")
                .and_then(|i| i.parse::<i64>().ok())
            {
                let row = self.store.read(move |c| forges::by_id(c, id)).await.ok()?;
                return webhook_secret(&self.seal, &row)
                    .ok()
                    .map(String::into_bytes);
            }
            let n = name.to_string();
            let row = self
                .store
                .read(move |c| secrets::find(c, secrets::ResourceScope::GLOBAL, &n))
                .await
                .ok()?;
            self.seal
                .open(secrets::SEAL_PURPOSE, &row.sealed_value)
                .ok()
        })
    }
}
