//! Static secret backend: the secrets are values in the plugin instance's config block.
//!
//! The host's `config.get` reads one key at a time (it cannot list keys), so the secret names
//! are listed once and each one's value and filters follow:
//!
//! - `names` (required): comma-separated secret names, e.g. `deploy_key, npm_token`;
//! - `secret.<NAME>` (required for every listed name): the value;
//! - `secret.<NAME>.events` (optional): comma-separated events that may use it (empty or
//!   unset = every event);
//! - `secret.<NAME>.images` (optional): comma-separated images, making it a plugin-only
//!   secret for those images (unset = any image).
//!
//! Every scope (organisation, repository, event) gets the same list; the server applies the
//! event and image filters. A listed name without a value is a configuration error
//! (`invalid-input`), never a silently missing secret.

use woodlark_plugin_sdk::config;
use woodlark_plugin_sdk::secrets::*;

struct Static;

woodlark_plugin_sdk::secret_backend!(Static);

impl SecretBackend for Static {
    fn list_secrets(_scope: Scope) -> Result<Vec<Secret>, PluginError> {
        let names = config::get("names").unwrap_or_default();
        list(&names)
            .into_iter()
            .map(|name| {
                let value = config::get(&format!("secret.{name}")).ok_or_else(|| {
                    invalid(format!(
                        "secret {name:?} is listed in `names` but `secret.{name}` is not set"
                    ))
                })?;
                Ok(Secret {
                    events: list(
                        &config::get(&format!("secret.{name}.events")).unwrap_or_default(),
                    ),
                    images: list(
                        &config::get(&format!("secret.{name}.images")).unwrap_or_default(),
                    ),
                    name,
                    value,
                })
            })
            .collect()
    }
}

/// The non-empty, trimmed items of a comma-separated list.
fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect()
}
