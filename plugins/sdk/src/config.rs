//! Read-only configuration: `[plugins.instances.<name>].config` in the server's `config.toml`.

/// The configured value for `key`, if the operator set one.
pub fn get(key: &str) -> Option<String> {
    crate::host_api::config::get(key)
}

/// The configured value for `key`, or `default`.
pub fn get_or(key: &str, default: &str) -> String {
    get(key).unwrap_or_else(|| default.to_string())
}
