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

use http::header::{CONTENT_DISPOSITION, HeaderValue};

use super::handlers::json;
use crate::http::{ApiError, Request, Response, StatusCode};
use crate::profiler::{self, ProfileState};
use crate::state::Ctx;
use crate::state::participation::DebugSettingsProf;

/// algod reads at most this many bytes of a `PUT /debug/settings/pprof` body.
pub const MAX_PPROF_BODY: usize = 128;
/// Response header saying whether a downloaded profile is still growing.
pub const PROFILE_STATE_HEADER: &str = "x-woodlark-profiler";

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
