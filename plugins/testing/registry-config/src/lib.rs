//! TEST ONLY. Registry auth: credentials from config (`address`, `username`, `password`) for
//! images whose registry host equals `address`.

use woodlark_plugin_sdk::config;
use woodlark_plugin_sdk::registry::*;

struct ConfigRegistry;

woodlark_plugin_sdk::registry_auth!(ConfigRegistry);

impl RegistryAuth for ConfigRegistry {
    fn credential_for(image: String, _repo: String) -> Result<Option<Credential>, PluginError> {
        let address = config::get("address").ok_or_else(|| invalid("address not configured"))?;
        let host = image.split('/').next().unwrap_or_default();
        if host != address {
            return Ok(None);
        }
        Ok(Some(Credential {
            address,
            username: config::get_or("username", ""),
            password: config::get_or("password", ""),
        }))
    }
}
