//! Token-exchange registry auth, for registries that hand out short-lived bearer tokens
//! (the Docker registry token flow: Harbor, GitLab's registry, `registry:2` with a token
//! server, and the like).
//!
//! Flow, for an image whose registry host (Docker's rule, see `image-ref`) equals `registry`:
//! 1. `GET {token-url}?service={service}&scope={scope}` with `Accept: application/json` and,
//!    when `username` is set, HTTP Basic auth `username:password`. `scope` defaults to
//!    `repository:{name}:pull,push`, `{name}` being the image's repository path (`acme/app`,
//!    `library/alpine` on the Hub); `service` is left out when not configured.
//! 2. The JSON reply's `token` (or, failing that, `access_token`) becomes the credential's
//!    password; its username is `token-username` (default `<token>`; registries that want a
//!    fixed name take e.g. `oauth2accesstoken`), its address the registry host.
//! 3. The token is cached in the instance's kv store per scope until its `expires_in`
//!    (seconds; 60 when absent, as the token spec says) minus a margin of a tenth, at most
//!    10 s. Later calls for the same repository reuse it without a request.
//!
//! Errors: a non-2xx reply (e.g. 401 for a wrong password) or a network failure is
//! `unavailable`; a reply that is not JSON or has no token is `invalid-input`. Images on other
//! registries get none (no request).
//!
//! Config keys: `registry` (required, host[:port]), `token-url` (required, in
//! `allowed_hosts`), `username`, `password`, `service`, `scope`, `token-username`.

use woodlark_plugin_sdk::registry::*;
use woodlark_plugin_sdk::serde_json::{self, Value};
use woodlark_plugin_sdk::{clock, config, headers, http, kv, log};

struct TokenExchange;

woodlark_plugin_sdk::registry_auth!(TokenExchange);

/// Docker's token spec: a token without `expires_in` is valid for 60 seconds.
const DEFAULT_EXPIRES_IN: u64 = 60;

impl RegistryAuth for TokenExchange {
    fn credential_for(image: String, _repo: String) -> Result<Option<Credential>, PluginError> {
        let registry = image_ref::normalize_host(&required("registry")?);
        let Some(img) = image_ref::parse(&image) else {
            return Err(invalid(format!("not an image reference: {image:?}")));
        };
        if img.host != registry {
            return Ok(None);
        }
        let scope =
            config::get_or("scope", "repository:{name}:pull,push").replace("{name}", &img.path);
        let token = match cached(&scope) {
            Some(t) => t,
            None => fetch(&scope)?,
        };
        Ok(Some(Credential {
            address: registry,
            username: config::get_or("token-username", "<token>"),
            password: token,
        }))
    }
}

fn required(key: &str) -> Result<String, PluginError> {
    config::get(key)
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| invalid(format!("config key `{key}` is not set")))
}

fn cache_key(scope: &str) -> String {
    format!("token:{scope}")
}

/// A cached, unexpired token for `scope`. Entries are `<expiry unix ms>\n<token>`; the expiry
/// is checked here too, so a kv store that drops expired entries lazily is still safe.
fn cached(scope: &str) -> Option<String> {
    let raw = kv::get(&cache_key(scope)).ok().flatten()?;
    let text = String::from_utf8(raw).ok()?;
    let (expiry, token) = text.split_once('\n')?;
    let expiry: u64 = expiry.parse().ok()?;
    (clock::now_unix_ms() < expiry && !token.is_empty()).then(|| token.to_string())
}

fn fetch(scope: &str) -> Result<String, PluginError> {
    let token_url = required("token-url")?;
    let mut url = token_url.clone();
    url.push(if url.contains('?') { '&' } else { '?' });
    if let Some(service) = config::get("service").filter(|s| !s.is_empty()) {
        url.push_str(&format!("service={}&", http::encode(&service)));
    }
    url.push_str(&format!("scope={}", http::encode(scope)));

    let mut hs = vec![headers::text("accept", "application/json")];
    if let Some(user) = config::get("username").filter(|s| !s.is_empty()) {
        let pass = config::get_or("password", "");
        let basic = base64(format!("{user}:{pass}").as_bytes());
        hs.push(headers::text("authorization", &format!("Basic {basic}")));
    }
    let resp = http::send(&http::request("GET", &url, hs)).map_err(|e| match e {
        PluginError::Unavailable(m) => unavailable(format!("token endpoint {token_url}: {m}")),
        other => other,
    })?;
    if !(200..300).contains(&resp.status) {
        let hint = match resp.status {
            401 | 403 => " (check `username` and `password`)",
            _ => "",
        };
        return Err(unavailable(format!(
            "token endpoint {token_url}: HTTP {}{hint}",
            resp.status
        )));
    }
    let v: Value = serde_json::from_slice(&resp.body).map_err(|e| {
        invalid(format!(
            "token endpoint {token_url}: reply is not JSON: {e}"
        ))
    })?;
    let token = ["token", "access_token"]
        .iter()
        .filter_map(|k| v.get(*k).and_then(Value::as_str))
        .find(|t| !t.is_empty())
        .ok_or_else(|| {
            invalid(format!(
                "token endpoint {token_url}: reply has no `token` or `access_token`"
            ))
        })?
        .to_string();

    let expires_in = v
        .get("expires_in")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_EXPIRES_IN);
    let ttl = expires_in - (expires_in / 10).min(10);
    let key = cache_key(scope);
    if ttl > 0 && key.len() <= 512 {
        let ttl = u32::try_from(ttl).unwrap_or(u32::MAX);
        let expiry = clock::now_unix_ms() + u64::from(ttl) * 1000;
        if let Err(e) = kv::set(&key, format!("{expiry}\n{token}").as_bytes(), Some(ttl)) {
            log::warn(&format!("not caching the token for {scope}: {e:?}"));
        }
    }
    Ok(token)
}

/// Standard base64 with padding (RFC 4648), for the Basic auth header.
fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_matches_rfc4648() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("robot:pa55:w0rd", "cm9ib3Q6cGE1NTp3MHJk"),
        ] {
            assert_eq!(super::base64(i.as_bytes()), o);
        }
    }
}
