//! What the server provides to the host: storage for the `kv` capability ([`KvStore`]) and
//! secret values for `signing` ([`SecretSource`]). Plugin calls run on the async runtime's
//! worker threads (wasmtime's async mode), so both return futures: an implementation awaits
//! its storage instead of blocking a worker.
//! [`MemoryKv`] and [`MapSecrets`] are in-memory implementations for tests and tools.

use std::collections::HashMap;
use std::future::{Future, ready};
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Failure of the server's key-value storage (reported to the plugin as `unavailable`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KvError(pub String);

/// What a service method returns: a boxed future (the traits are used as `dyn`).
pub type ServiceFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Per-plugin key-value storage. `namespace` is the plugin instance name; implementations
/// must keep namespaces apart and drop entries whose TTL has passed.
pub trait KvStore: Send + Sync + 'static {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a str,
    ) -> ServiceFuture<'a, Result<Option<Vec<u8>>, KvError>>;
    fn set<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a str,
        value: &'a [u8],
        ttl: Option<Duration>,
    ) -> ServiceFuture<'a, Result<(), KvError>>;
    fn delete<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a str,
    ) -> ServiceFuture<'a, Result<(), KvError>>;
}

/// Secret values by name, for `signing`. The host checks the plugin's grant before asking;
/// values are compared inside the host and never handed to the plugin.
pub trait SecretSource: Send + Sync + 'static {
    /// The secret's value, or `None` when no secret of that name exists.
    fn secret<'a>(&'a self, name: &'a str) -> ServiceFuture<'a, Option<Vec<u8>>>;
}

type Entry = (Vec<u8>, Option<Instant>);
type KvMap = HashMap<(String, String), Entry>;

/// An in-memory [`KvStore`].
#[derive(Default)]
pub struct MemoryKv {
    map: Mutex<KvMap>,
}

impl MemoryKv {
    fn lock(&self) -> Result<MutexGuard<'_, KvMap>, KvError> {
        self.map.lock().map_err(|_| KvError("poisoned".into()))
    }

    fn get_now(&self, namespace: &str, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        let mut map = self.lock()?;
        let k = (namespace.to_string(), key.to_string());
        match map.get(&k) {
            Some((_, Some(exp))) if *exp <= Instant::now() => {
                map.remove(&k);
                Ok(None)
            }
            Some((v, _)) => Ok(Some(v.clone())),
            None => Ok(None),
        }
    }
}

impl KvStore for MemoryKv {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a str,
    ) -> ServiceFuture<'a, Result<Option<Vec<u8>>, KvError>> {
        Box::pin(ready(self.get_now(namespace, key)))
    }

    fn set<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a str,
        value: &'a [u8],
        ttl: Option<Duration>,
    ) -> ServiceFuture<'a, Result<(), KvError>> {
        let r = self.lock().map(|mut map| {
            map.insert(
                (namespace.to_string(), key.to_string()),
                (value.to_vec(), ttl.map(|t| Instant::now() + t)),
            );
        });
        Box::pin(ready(r))
    }

    fn delete<'a>(
        &'a self,
        namespace: &'a str,
        key: &'a str,
    ) -> ServiceFuture<'a, Result<(), KvError>> {
        let r = self.lock().map(|mut map| {
            map.remove(&(namespace.to_string(), key.to_string()));
        });
        Box::pin(ready(r))
    }
}

/// A fixed map of secrets (tests, the offline bench).
#[derive(Default, Clone)]
pub struct MapSecrets(pub HashMap<String, Vec<u8>>);

impl MapSecrets {
    pub fn with(mut self, name: &str, value: &str) -> Self {
        self.0.insert(name.to_string(), value.as_bytes().to_vec());
        self
    }
}

impl SecretSource for MapSecrets {
    fn secret<'a>(&'a self, name: &'a str) -> ServiceFuture<'a, Option<Vec<u8>>> {
        Box::pin(ready(self.0.get(name).cloned()))
    }
}
