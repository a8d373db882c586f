//! What the server provides to the host: storage for the `kv` capability ([`KvStore`]) and
//! secret values for `signing` ([`SecretSource`]). Both are called from blocking threads
//! (plugin calls run on tokio's blocking pool), so they are plain synchronous traits.
//! [`MemoryKv`] and [`MapSecrets`] are in-memory implementations for tests and tools.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Failure of the server's key-value storage (reported to the plugin as `unavailable`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KvError(pub String);

/// Per-plugin key-value storage. `namespace` is the plugin instance name; implementations
/// must keep namespaces apart and drop entries whose TTL has passed.
pub trait KvStore: Send + Sync + 'static {
    fn get(&self, namespace: &str, key: &str) -> Result<Option<Vec<u8>>, KvError>;
    fn set(
        &self,
        namespace: &str,
        key: &str,
        value: &[u8],
        ttl: Option<Duration>,
    ) -> Result<(), KvError>;
    fn delete(&self, namespace: &str, key: &str) -> Result<(), KvError>;
}

/// Secret values by name, for `signing`. The host checks the plugin's grant before asking;
/// values are compared inside the host and never handed to the plugin.
pub trait SecretSource: Send + Sync + 'static {
    /// The secret's value, or `None` when no secret of that name exists.
    fn secret(&self, name: &str) -> Option<Vec<u8>>;
}

type Entry = (Vec<u8>, Option<Instant>);

/// An in-memory [`KvStore`].
#[derive(Default)]
pub struct MemoryKv {
    map: Mutex<HashMap<(String, String), Entry>>,
}

impl KvStore for MemoryKv {
    fn get(&self, namespace: &str, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        let mut map = self.map.lock().map_err(|_| KvError("poisoned".into()))?;
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

    fn set(
        &self,
        namespace: &str,
        key: &str,
        value: &[u8],
        ttl: Option<Duration>,
    ) -> Result<(), KvError> {
        let mut map = self.map.lock().map_err(|_| KvError("poisoned".into()))?;
        map.insert(
            (namespace.to_string(), key.to_string()),
            (value.to_vec(), ttl.map(|t| Instant::now() + t)),
        );
        Ok(())
    }

    fn delete(&self, namespace: &str, key: &str) -> Result<(), KvError> {
        let mut map = self.map.lock().map_err(|_| KvError("poisoned".into()))?;
        map.remove(&(namespace.to_string(), key.to_string()));
        Ok(())
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
    fn secret(&self, name: &str) -> Option<Vec<u8>> {
        self.0.get(name).cloned()
    }
}
