//! Server-wide endpoints: health, version, metrics, log level, the signing key.

use serde::{Deserialize, Serialize};

use super::access::{must_admin, must_user};
use crate::ci::version_string;
use crate::http::{ApiError, Request, Response, StatusCode};
use crate::logging::LogLevel;
use crate::state::Ctx;

/// `GET /healthz`: 204 while the database answers reads and writes, else 500.
pub async fn healthz(ctx: Ctx, _req: Request) -> Result<Response, ApiError> {
    match ctx.ci.reads.ping().await {
        Ok(()) => Ok(Response::empty(StatusCode::NO_CONTENT)),
        Err(err) => {
            tracing::error!(%err, "health check failed");
            Ok(Response::empty(StatusCode::INTERNAL_SERVER_ERROR))
        }
    }
}

#[derive(Serialize)]
struct Version {
    source: &'static str,
    version: String,
}

/// `GET /version`.
pub async fn version(_ctx: Ctx, _req: Request) -> Result<Response, ApiError> {
    Ok(Response::json(&Version {
        source: "woodlark",
        version: version_string(),
    }))
}

/// `GET /metrics`: Prometheus text. Open unless `server.metrics_token` is set.
pub async fn metrics(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    let expected = &ctx.config.server.metrics_token;
    if !expected.is_empty() {
        let given = crate::auth::bearer(&req).unwrap_or_default();
        if !crate::auth::constant_time_eq(given.as_bytes(), expected.as_bytes()) {
            return Err(ApiError::unauthorized());
        }
    }
    let uptime = ctx.started.elapsed().as_secs_f64();
    let statuses = &ctx.ci.status_counts;
    let count =
        |n: &std::sync::atomic::AtomicU64| n.load(std::sync::atomic::Ordering::Relaxed) as f64;
    let backups = ctx.backups.metrics();
    let text = ctx.metrics.render(&[
        backups[0],
        backups[1],
        backups[2],
        (
            "woodlark_uptime_seconds",
            "Seconds since the server started.",
            uptime,
        ),
        (
            "woodlark_forge_statuses_posted_total",
            "Commit statuses posted to forges.",
            count(&statuses.posted),
        ),
        (
            "woodlark_forge_status_failures_total",
            "Commit statuses given up after every retry (the forge kept failing).",
            count(&statuses.failed),
        ),
    ]);
    Ok(Response::new(
        StatusCode::OK,
        "text/plain; version=0.0.4; charset=utf-8",
        text,
    ))
}

#[derive(Serialize, Deserialize)]
struct LogLevelBody {
    #[serde(rename = "log-level")]
    log_level: String,
}

/// `GET /api/log-level` (admin).
pub async fn get_log_level(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    Ok(Response::json(&LogLevelBody {
        log_level: ctx.log.level().name().to_string(),
    }))
}

/// `POST /api/log-level` (admin): changes the running filter.
pub async fn set_log_level(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    let body: LogLevelBody = req.json()?;
    let level = LogLevel::parse(&body.log_level).ok_or_else(|| {
        ApiError::bad_request(format!(
            "unknown log level {:?}: expected one of {}",
            body.log_level,
            LogLevel::NAMES.join(", ")
        ))
    })?;
    ctx.log.set(level);
    Ok(Response::json(&LogLevelBody {
        log_level: level.name().to_string(),
    }))
}

/// `GET /api/signature/public-key`: the server's ed25519 public key as PEM.
pub async fn public_key(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_user(&ctx, &req).await?;
    Ok(Response::text(StatusCode::OK, ctx.key.public_pem()))
}
