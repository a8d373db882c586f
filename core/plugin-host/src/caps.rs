//! The host side of `woodlark:host@0.1.0`: one `Host` impl per capability on [`CallState`],
//! and the per-world linkers that decide which capabilities a world gets.
//!
//! Expected failures go back to the guest as `plugin-error` values; nothing a guest sends can
//! make the host allocate beyond the caps in `state.rs`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use wasmtime::Engine;
use wasmtime::component::{HasSelf, Linker};

use crate::bindings::caps::woodlark::host::{clock, config, http_client, kv, log, signing, types};
use crate::http_client::{OutError, OutRequest};
use crate::state::{
    CallState, MAX_HTTP_CALLS_PER_CALL, MAX_HTTP_HEADERS, MAX_HTTP_REQUEST_BODY, MAX_KV_KEY,
    MAX_KV_VALUE, MAX_LOG_LINE, MAX_LOG_LINES_PER_CALL,
};
use crate::types::WorldKind;

type WitError = types::PluginError;

/// A linker holding exactly the capabilities `world` grants (see `wit/worlds.wit`), so a
/// component importing anything else fails `instantiate_pre` at load time.
pub(crate) fn linker_for(engine: &Engine, world: WorldKind) -> wasmtime::Result<Linker<CallState>> {
    let mut l = Linker::<CallState>::new(engine);
    types::add_to_linker::<CallState, HasSelf<CallState>>(&mut l, |s| s)?;
    log::add_to_linker::<CallState, HasSelf<CallState>>(&mut l, |s| s)?;
    config::add_to_linker::<CallState, HasSelf<CallState>>(&mut l, |s| s)?;
    clock::add_to_linker::<CallState, HasSelf<CallState>>(&mut l, |s| s)?;
    http_client::add_to_linker::<CallState, HasSelf<CallState>>(&mut l, |s| s)?;
    match world {
        WorldKind::ForgeAdapter => {
            signing::add_to_linker::<CallState, HasSelf<CallState>>(&mut l, |s| s)?;
        }
        WorldKind::SecretBackend | WorldKind::RegistryAuth => {
            kv::add_to_linker::<CallState, HasSelf<CallState>>(&mut l, |s| s)?;
        }
    }
    Ok(l)
}

impl types::Host for CallState {}

impl log::Host for CallState {
    fn log(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
        self.log_lines += 1;
        if self.log_lines > MAX_LOG_LINES_PER_CALL {
            if self.log_lines == MAX_LOG_LINES_PER_CALL + 1 {
                tracing::warn!(plugin = %self.plugin, "plugin log limit reached; dropping further lines of this call");
            }
            return Ok(());
        }
        let mut msg = message;
        if msg.len() > MAX_LOG_LINE {
            let mut cut = MAX_LOG_LINE;
            while !msg.is_char_boundary(cut) {
                cut -= 1;
            }
            msg.truncate(cut);
            msg.push('…');
        }
        let plugin = &*self.plugin;
        match level {
            log::Level::Trace => tracing::trace!(target: "woodlark::plugin", plugin, "{msg}"),
            log::Level::Debug => tracing::debug!(target: "woodlark::plugin", plugin, "{msg}"),
            log::Level::Info => tracing::info!(target: "woodlark::plugin", plugin, "{msg}"),
            log::Level::Warn => tracing::warn!(target: "woodlark::plugin", plugin, "{msg}"),
            log::Level::Error => tracing::error!(target: "woodlark::plugin", plugin, "{msg}"),
        }
        Ok(())
    }
}

impl config::Host for CallState {
    fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(self.config_value(&key))
    }
}

impl clock::Host for CallState {
    fn now_unix_ms(&mut self) -> wasmtime::Result<u64> {
        Ok(SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0))
    }
}

impl kv::Host for CallState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<Vec<u8>>, WitError>> {
        if key.len() > MAX_KV_KEY {
            return Ok(Err(WitError::InvalidInput(format!(
                "kv key longer than {MAX_KV_KEY} bytes"
            ))));
        }
        Ok(self
            .services
            .kv
            .get(&self.plugin, &key)
            .await
            .map_err(|e| WitError::Unavailable(e.to_string())))
    }

    async fn set(
        &mut self,
        key: String,
        value: Vec<u8>,
        ttl_seconds: Option<u32>,
    ) -> wasmtime::Result<Result<(), WitError>> {
        if key.len() > MAX_KV_KEY {
            return Ok(Err(WitError::InvalidInput(format!(
                "kv key longer than {MAX_KV_KEY} bytes"
            ))));
        }
        if value.len() > MAX_KV_VALUE {
            return Ok(Err(WitError::InvalidInput(format!(
                "kv value larger than {MAX_KV_VALUE} bytes"
            ))));
        }
        let ttl = ttl_seconds.map(|s| Duration::from_secs(u64::from(s)));
        Ok(self
            .services
            .kv
            .set(&self.plugin, &key, &value, ttl)
            .await
            .map_err(|e| WitError::Unavailable(e.to_string())))
    }

    async fn delete(&mut self, key: String) -> wasmtime::Result<Result<(), WitError>> {
        Ok(self
            .services
            .kv
            .delete(&self.plugin, &key)
            .await
            .map_err(|e| WitError::Unavailable(e.to_string())))
    }
}

impl http_client::Host for CallState {
    async fn send(
        &mut self,
        req: http_client::Request,
    ) -> wasmtime::Result<Result<http_client::Response, WitError>> {
        self.http_calls += 1;
        if self.http_calls > MAX_HTTP_CALLS_PER_CALL {
            return Ok(Err(WitError::Denied(format!(
                "more than {MAX_HTTP_CALLS_PER_CALL} HTTP requests in one call"
            ))));
        }
        if req.headers.len() > MAX_HTTP_HEADERS {
            return Ok(Err(WitError::InvalidInput(format!(
                "more than {MAX_HTTP_HEADERS} headers"
            ))));
        }
        if req
            .body
            .as_ref()
            .is_some_and(|b| b.len() > MAX_HTTP_REQUEST_BODY)
        {
            return Ok(Err(WitError::InvalidInput(format!(
                "request body larger than {MAX_HTTP_REQUEST_BODY} bytes"
            ))));
        }
        let remaining = self.remaining();
        let timeout = req
            .timeout_ms
            .map(|ms| Duration::from_millis(u64::from(ms)).min(remaining))
            .unwrap_or(remaining);
        let out = OutRequest {
            method: req.method,
            url: req.url,
            headers: req.headers.into_iter().map(|h| (h.name, h.value)).collect(),
            body: req.body,
            timeout,
        };
        let max = self.limits.max_http_response_bytes;
        let url = out.url.clone();
        let result = {
            let allowed = |o: &crate::config::Origin| self.may_reach(o);
            self.services
                .http
                .send(&allowed, self.unverified.as_ref(), out, max)
                .await
        };
        Ok(match result {
            Ok(r) => {
                tracing::debug!(plugin = %self.plugin, %url, status = r.status, "plugin http request");
                Ok(http_client::Response {
                    status: r.status,
                    headers: r
                        .headers
                        .into_iter()
                        .map(|(name, value)| types::Header { name, value })
                        .collect(),
                    body: r.body,
                })
            }
            Err(OutError::NotAllowed(origin)) => {
                tracing::warn!(plugin = %self.plugin, forge = %self.forge.label, %origin, "plugin http request to a host it is not granted");
                let message = format!("{origin} is not allowed for this plugin");
                self.denied_origin.get_or_insert(origin);
                Err(WitError::Denied(message))
            }
            Err(OutError::Invalid(msg)) => {
                tracing::info!(plugin = %self.plugin, %url, error = %msg, "plugin http request invalid");
                Err(WitError::InvalidInput(msg))
            }
            Err(OutError::Unavailable(msg)) => {
                tracing::info!(plugin = %self.plugin, %url, error = %msg, "plugin http request failed");
                Err(WitError::Unavailable(msg))
            }
        })
    }
}

impl CallState {
    /// The value of a granted secret: the webhook secret of the forge the call is made for,
    /// else one the instance is granted — but never another forge's (`forge:<id>`) in a
    /// call made for a forge. `Err` is the guest-visible error.
    async fn granted_secret(&self, name: &str) -> Result<Vec<u8>, WitError> {
        if let Some(own) = &self.forge.hook_secret
            && own.name == name
        {
            return Ok(own.value.clone());
        }
        let another_forges = self.forge.is_forge() && name.starts_with("forge:");
        if another_forges || !self.grants.secrets.contains(name) {
            tracing::warn!(plugin = %self.plugin, secret = name, "plugin asked for a secret it is not granted");
            return Err(WitError::Denied(format!(
                "secret {name:?} is not granted to this plugin"
            )));
        }
        self.services
            .secrets
            .secret(name)
            .await
            .ok_or_else(|| WitError::Unavailable(format!("secret {name:?} is not set")))
    }
}

impl signing::Host for CallState {
    async fn verify(
        &mut self,
        alg: signing::Algorithm,
        secret: String,
        message: Vec<u8>,
        mac: Vec<u8>,
    ) -> wasmtime::Result<Result<bool, WitError>> {
        let key = match self.granted_secret(&secret).await {
            Ok(k) => k,
            Err(e) => return Ok(Err(e)),
        };
        let ok = match alg {
            signing::Algorithm::HmacSha1 => Hmac::<sha1::Sha1>::new_from_slice(&key)
                .map(|mut m| {
                    m.update(&message);
                    m.verify_slice(&mac).is_ok()
                })
                .unwrap_or(false),
            signing::Algorithm::HmacSha256 => Hmac::<sha2::Sha256>::new_from_slice(&key)
                .map(|mut m| {
                    m.update(&message);
                    m.verify_slice(&mac).is_ok()
                })
                .unwrap_or(false),
        };
        Ok(Ok(ok))
    }

    async fn equals(
        &mut self,
        secret: String,
        candidate: Vec<u8>,
    ) -> wasmtime::Result<Result<bool, WitError>> {
        let key = match self.granted_secret(&secret).await {
            Ok(k) => k,
            Err(e) => return Ok(Err(e)),
        };
        Ok(Ok(constant_time_eq(&key, &candidate)))
    }
}

/// Compares without an early exit on the first differing byte (the length is not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
