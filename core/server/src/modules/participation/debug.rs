//! `/debug/settings/pprof`, `/debug/settings/config` and the profile download.
//!
//! - pprof: the mutex and block profile rates, kept per server. `PUT` decodes strictly (unknown
//!   field, negative or non-integer value → 400), rejects rates above `i32::MAX`, applies the
//!   new values and answers with the **old** values of the fields that were sent. While either
//!   rate is non-zero this server holds the process's CPU sampler ([`crate::profiler`]) on.
//! - `GET /debug/pprof/profile` (Woodlark's addition, at algod's pprof path): what the sampler
//!   recorded, as a pprof protobuf; `404` if profiling was never turned on.
//! - config: Woodlark's effective configuration, secrets redacted ([`Config::redacted`]), as
//!   one JSON object in the shape of `config.toml`.

use std::sync::Mutex;

use bytes::Bytes;
use http::header::{CONTENT_DISPOSITION, HeaderValue};
use serde::{Deserialize, Serialize};

use super::handlers::json;
use crate::app::Ctx;
use crate::config::Config;
use crate::http::{ApiError, Request, Response, StatusCode};
use crate::profiler::{self, ProfileState};

/// algod reads at most this many bytes of a `PUT /debug/settings/pprof` body.
pub const MAX_PPROF_BODY: usize = 128;
/// Response header saying whether a downloaded profile is still growing.
pub const PROFILE_STATE_HEADER: &str = "x-woodlark-profiler";

/// The two rates and whether this server holds the profiler on because of them.
#[derive(Default)]
pub struct Rates {
    mutex: u64,
    block: u64,
    profiling: bool,
}

/// The rates behind a lock: a `PUT` swaps both and switches the profiler as one step.
#[derive(Default)]
pub struct PprofSettings(Mutex<Rates>);

impl PprofSettings {
    fn lock(&self) -> std::sync::MutexGuard<'_, Rates> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self) -> (u64, u64) {
        let rates = self.lock();
        (rates.mutex, rates.block)
    }

    /// Applies the sent rates and starts or stops the profiler to match; returns the old values
    /// of the sent fields. Blocks (starting or stopping the sampler symbolizes).
    fn apply(
        &self,
        sent: &DebugSettingsProf,
    ) -> Result<DebugSettingsProf, profiler::ProfilerError> {
        let mut rates = self.lock();
        let mutex = sent.mutex_rate.unwrap_or(rates.mutex);
        let block = sent.block_rate.unwrap_or(rates.block);
        let want = mutex > 0 || block > 0;
        if want && !rates.profiling {
            profiler::global().acquire()?;
        } else if !want && rates.profiling {
            profiler::global().release();
        }
        let old = DebugSettingsProf {
            mutex_rate: sent.mutex_rate.map(|_| rates.mutex),
            block_rate: sent.block_rate.map(|_| rates.block),
        };
        *rates = Rates {
            mutex,
            block,
            profiling: want,
        };
        Ok(old)
    }
}

impl Drop for PprofSettings {
    fn drop(&mut self) {
        if self.lock().profiling {
            profiler::global().release();
        }
    }
}

#[derive(Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DebugSettingsProf {
    #[serde(rename = "block-rate", skip_serializing_if = "Option::is_none")]
    block_rate: Option<u64>,
    #[serde(rename = "mutex-rate", skip_serializing_if = "Option::is_none")]
    mutex_rate: Option<u64>,
}

/// `GET /debug/settings/pprof`: both rates, always present.
pub async fn get_pprof(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    ctx.participation.authorize(&req)?;
    let (mutex, block) = ctx.participation.pprof.get();
    json(&DebugSettingsProf {
        block_rate: Some(block),
        mutex_rate: Some(mutex),
    })
}

/// `PUT /debug/settings/pprof`: sets the rates, returns the old values of the fields sent.
pub async fn put_pprof(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    ctx.participation.authorize(&req)?;
    if req.body.len() > MAX_PPROF_BODY {
        return Err(ApiError::bad_request("http: request body too large"));
    }
    let opts: DebugSettingsProf = if req.body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("failed to decode object: EOF"));
    } else {
        serde_json::from_slice(&req.body)
            .map_err(|e| ApiError::bad_request(format!("failed to decode object: {e}")))?
    };
    for rate in [opts.mutex_rate, opts.block_rate].into_iter().flatten() {
        if rate > i32::MAX as u64 {
            return Err(ApiError::bad_request(
                "blocking rate cannot be larger than max int32 value",
            ));
        }
    }
    let ctx2 = ctx.clone();
    let old = tokio::task::spawn_blocking(move || ctx2.participation.pprof.apply(&opts))
        .await
        .map_err(|e| ApiError::internal(format!("pprof settings: {e}")))?
        .map_err(|e| ApiError::internal(e.to_string()))?;
    json(&old)
}

/// `GET /debug/pprof/profile`: the CPU profile as a pprof protobuf (uncompressed; pprof tools
/// read it as is). [`PROFILE_STATE_HEADER`] says `running` (samples since the sampler started,
/// still growing) or `stopped` (the last run).
pub async fn get_profile(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    ctx.participation.authorize(&req)?;
    let profile = tokio::task::spawn_blocking(|| profiler::global().profile())
        .await
        .map_err(|e| ApiError::internal(format!("profile: {e}")))?
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let Some((state, bytes)) = profile else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "no CPU profile: profiling has not been turned on \
             (PUT /debug/settings/pprof with a non-zero rate)",
        ));
    };
    let state = match state {
        ProfileState::Running => "running",
        ProfileState::Stopped => "stopped",
    };
    Ok(
        Response::new(StatusCode::OK, "application/octet-stream", bytes)
            .with_header(
                CONTENT_DISPOSITION,
                HeaderValue::from_static("attachment; filename=\"profile.pb\""),
            )
            .with_header(
                http::header::HeaderName::from_static(PROFILE_STATE_HEADER),
                HeaderValue::from_static(state),
            ),
    )
}

/// `GET /debug/settings/config`: the rendering made at start-up.
pub async fn get_config(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    ctx.participation.authorize(&req)?;
    Ok(Response::new(
        StatusCode::OK,
        "application/json",
        ctx.participation.config_json.clone(),
    ))
}

/// The effective configuration, secrets redacted, as newline-terminated JSON.
pub fn render_config(config: &Config) -> Bytes {
    let mut out = serde_json::to_vec(&config.redacted())
        .unwrap_or_else(|e| unreachable!("a configuration always serializes: {e}"));
    out.push(b'\n');
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_the_redacted_woodlark_config() {
        let mut config = Config::default();
        config.server.metrics_token = "do-not-show".into();
        let text = String::from_utf8(render_config(&config).to_vec()).unwrap();
        assert!(text.ends_with("}\n"));
        assert!(!text.contains("do-not-show"));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["server"]["listen"], "127.0.0.1:8000");
        assert_eq!(v["events"]["mount"], "/events");
    }

    #[test]
    fn rates_switch_the_profiler_only_on_zero_crossings() {
        // Only rates that stay zero, so the process-wide sampler is not started here.
        let settings = PprofSettings::default();
        let sent = DebugSettingsProf {
            mutex_rate: Some(0),
            block_rate: None,
        };
        let old = settings.apply(&sent).unwrap();
        assert_eq!(old.mutex_rate, Some(0));
        assert_eq!(old.block_rate, None);
        assert!(!settings.lock().profiling);
    }

    #[test]
    fn pprof_body_is_strict() {
        assert!(serde_json::from_str::<DebugSettingsProf>(r#"{"mutex-rate": 5}"#).is_ok());
        assert!(serde_json::from_str::<DebugSettingsProf>(r#"{"mutex-rate": -1}"#).is_err());
        assert!(serde_json::from_str::<DebugSettingsProf>(r#"{"mutex-rate": 1.5}"#).is_err());
        assert!(serde_json::from_str::<DebugSettingsProf>(r#"{"other": 1}"#).is_err());
        let empty = DebugSettingsProf::default();
        assert_eq!(serde_json::to_string(&empty).unwrap(), "{}");
    }
}
