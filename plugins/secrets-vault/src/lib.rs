//! HashiCorp Vault KV v2 secret backend.
//!
//! `list-secrets(scope)` reads one KV v2 secret per repository,
//! `GET {address}/v1/{mount}/data/{path}` with `X-Vault-Token`, and returns every key of its
//! `data.data` as a Woodlark secret (no event or image filter: usable by any event and image).
//! String values are used as they are; other JSON values (numbers, booleans, objects) as their
//! JSON text; `null` values are skipped.
//!
//! | Vault answer                  | result                                       |
//! |-------------------------------|----------------------------------------------|
//! | 200 with `data.data` object   | its keys as secrets                          |
//! | 200 with `data.data: null`    | no secrets                                   |
//! | 404 (no such path / deleted)  | no secrets                                   |
//! | 200 with malformed JSON       | `invalid-input`                              |
//! | any other status, network     | `unavailable`, with Vault's `errors` if any  |
//!
//! Config keys:
//! - `address` (required): Vault's base URL, e.g. `http://127.0.0.1:8200`; it must be in the
//!   instance's `allowed_hosts`.
//! - `token` (required): the Vault token sent as `X-Vault-Token`.
//! - `mount`: the KV v2 mount, default `secret`.
//! - `path-template`: the secret's path inside the mount, default `woodpecker/{repo}`.
//!   Placeholders: `{org}` (organisation), `{repo}` (`owner/name`), `{repo_name}` (`name`).
//! - `namespace`: sent as `X-Vault-Namespace` (Vault Enterprise / HCP) when set.
//! - `cache-seconds`: cache each read in the instance's kv store for this many seconds
//!   (default `0`: no cache, every call asks Vault). The cache holds secret values in the
//!   server's kv storage, so keep it short.

use woodlark_plugin_sdk::secrets::*;
use woodlark_plugin_sdk::serde_json::{self, Map, Value};
use woodlark_plugin_sdk::{config, headers, http, kv, log};

struct Vault;

woodlark_plugin_sdk::secret_backend!(Vault);

impl SecretBackend for Vault {
    fn list_secrets(scope: Scope) -> Result<Vec<Secret>, PluginError> {
        let address = required("address")?;
        let token = required("token")?;
        let mount = config::get_or("mount", "secret");
        let template = config::get_or("path-template", "woodpecker/{repo}");
        let path = secret_path(&template, &scope);
        let url = format!(
            "{}/v1/{}/data/{}",
            address.trim_end_matches('/'),
            http::encode_path(mount.trim_matches('/')),
            http::encode_path(&path)
        );

        let cache_seconds = config::get("cache-seconds")
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(0);
        let cache_key = format!("kv2:{mount}:{path}");
        if cache_seconds > 0
            && let Some(body) = kv::get(&cache_key).ok().flatten()
            && let Ok(data) = serde_json::from_slice::<Map<String, Value>>(&body)
        {
            return Ok(secrets_of(data));
        }

        let mut hs = vec![
            headers::text("x-vault-token", &token),
            headers::text("accept", "application/json"),
        ];
        if let Some(ns) = config::get("namespace").filter(|s| !s.is_empty()) {
            hs.push(headers::text("x-vault-namespace", &ns));
        }
        let resp = http::send(&http::request("GET", &url, hs))
            .map_err(|e| with_context(e, &mount, &path))?;
        let data = match resp.status {
            404 => Map::new(),
            200..=299 => parse_data(&resp.body).map_err(|m| {
                invalid(format!(
                    "Vault KV v2 {mount}/{path}: malformed response: {m}"
                ))
            })?,
            s => {
                return Err(unavailable(format!(
                    "Vault KV v2 {mount}/{path}: HTTP {s}{}",
                    vault_errors(&resp.body)
                )));
            }
        };
        if cache_seconds > 0 && cache_key.len() <= 512 {
            let body = Value::Object(data.clone()).to_string();
            if let Err(e) = kv::set(&cache_key, body.as_bytes(), Some(cache_seconds)) {
                log::warn(&format!("not caching {mount}/{path}: {e:?}"));
            }
        }
        Ok(secrets_of(data))
    }
}

fn required(key: &str) -> Result<String, PluginError> {
    config::get(key)
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| invalid(format!("config key `{key}` is not set")))
}

/// The path from `template` with `{org}`, `{repo}` and `{repo_name}` filled in.
fn secret_path(template: &str, scope: &Scope) -> String {
    let repo_name = scope.repo.rsplit('/').next().unwrap_or_default();
    template
        .replace("{org}", &scope.org)
        .replace("{repo_name}", repo_name)
        .replace("{repo}", &scope.repo)
        .trim_matches('/')
        .to_string()
}

/// `data.data` of a KV v2 read; `null` there (a deleted or destroyed version) reads as empty.
fn parse_data(body: &[u8]) -> Result<Map<String, Value>, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    match v.pointer("/data/data") {
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(Value::Null) => Ok(Map::new()),
        Some(_) => Err("`data.data` is not an object".into()),
        None => Err("no `data.data` field (is the mount a KV v2 engine?)".into()),
    }
}

fn secrets_of(data: Map<String, Value>) -> Vec<Secret> {
    data.into_iter()
        .filter_map(|(name, v)| {
            let value = match v {
                Value::String(s) => s,
                Value::Null => return None,
                other => other.to_string(),
            };
            Some(Secret {
                name,
                value,
                events: vec![],
                images: vec![],
            })
        })
        .collect()
}

/// `: <errors>` from Vault's `{"errors": [...]}` body, or nothing.
fn vault_errors(body: &[u8]) -> String {
    let errors: Vec<String> = serde_json::from_slice::<Value>(body)
        .ok()
        .as_ref()
        .and_then(|v| v.get("errors"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|e| e.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if errors.is_empty() {
        String::new()
    } else {
        format!(": {}", errors.join("; "))
    }
}

fn with_context(e: PluginError, mount: &str, path: &str) -> PluginError {
    let ctx = |m: String| format!("Vault KV v2 {mount}/{path}: {m}");
    match e {
        PluginError::InvalidInput(m) => PluginError::InvalidInput(ctx(m)),
        PluginError::Denied(m) => PluginError::Denied(ctx(m)),
        PluginError::Unavailable(m) => PluginError::Unavailable(ctx(m)),
        PluginError::Internal(m) => PluginError::Internal(ctx(m)),
    }
}
