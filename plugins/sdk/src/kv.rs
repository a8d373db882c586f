//! The instance's private key-value store (a cache; values may expire).

use crate::PluginError;
use crate::host_api::kv;

pub fn get(key: &str) -> Result<Option<Vec<u8>>, PluginError> {
    kv::get(key)
}

pub fn set(key: &str, value: &[u8], ttl_seconds: Option<u32>) -> Result<(), PluginError> {
    kv::set(key, value, ttl_seconds)
}

pub fn delete(key: &str) -> Result<(), PluginError> {
    kv::delete(key)
}
