//! The participation interface: algod's private participation-key and debug-settings API.
//!
//! Routes (below `[participation] mount`, default the root), all behind algod's **admin**
//! API token (`X-Algo-API-Token: <token>` or `Authorization: Bearer <token>`):
//!
//! | route | handler |
//! |---|---|
//! | `GET /v2/participation` | [`handlers::list`] |
//! | `POST /v2/participation` (raw partkey file) | [`handlers::add`] |
//! | `POST /v2/participation/generate/{address}?first=&last=&dilution=` | [`handlers::generate`] |
//! | `GET`, `DELETE`, `POST /v2/participation/{participation-id}` | [`handlers::get`], [`handlers::delete`], [`handlers::append_keys`] |
//! | `GET`, `PUT /debug/settings/pprof` | [`debug::get_pprof`], [`debug::put_pprof`] |
//! | `GET /debug/settings/config` | [`debug::get_config`] |
//! | `GET /debug/pprof/profile` (Woodlark's: the CPU profile, pprof protobuf) | [`debug::get_profile`] |
//!
//! Layout: [`ids`] (addresses, participation ids), [`msgpack`] (algod's canonical msgpack),
//! [`keys`] (key material shapes), [`keygen`] (generation), [`partfile`] (the SQLite partkey
//! file, import and export), [`handlers`] and [`debug`] (HTTP). Storage is
//! `crate::store::partkeys`; private key material is sealed with `ctx.seal` before it reaches
//! the store and never leaves through the API. Errors are algod's `{"message": …}` JSON.
//! Wire-level choices that differ from algod are listed in docs/participation.md.

pub mod debug;
pub mod handlers;
pub mod ids;
pub mod keygen;
pub mod keys;
pub mod msgpack;
pub mod partfile;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::app::{AppError, Ctx};
use crate::auth::{constant_time_eq, keys::write_private, random_bytes};
use crate::config::Config;
use crate::http::{ApiError, ErrorStyle, Method, Request, Scope, StatusCode};

/// The file the admin token is generated into when `[participation] admin_token` is empty.
pub const ADMIN_TOKEN_FILE: &str = "algod.admin.token";
/// Body limit of the two upload routes (partkey files, appended state-proof keys). algod sets
/// none; a partkey file with state-proof keys for 3,000,000 rounds is about 50 MB.
pub const MAX_UPLOAD_BYTES: usize = 128 * 1024 * 1024;
/// algod's bounds on API token length.
pub const MIN_TOKEN_LEN: usize = 64;
pub const MAX_TOKEN_LEN: usize = 256;

pub struct Participation;

impl super::Module for Participation {
    fn name(&self) -> &'static str {
        "participation"
    }

    fn error_style(&self) -> ErrorStyle {
        ErrorStyle::JsonMessage
    }

    fn routes(&self, scope: &mut Scope<'_, Ctx>) {
        // Uploads (partkey files, state-proof keys) may be far larger than the default limit.
        let upload = MAX_UPLOAD_BYTES;
        scope
            .get("/debug/settings/pprof", debug::get_pprof)
            .put("/debug/settings/pprof", debug::put_pprof)
            .get("/debug/settings/config", debug::get_config)
            .get("/debug/pprof/profile", debug::get_profile)
            .get("/v2/participation", handlers::list)
            .route_with_limit(Method::POST, "/v2/participation", upload, handlers::add)
            .post("/v2/participation/generate/{address}", handlers::generate)
            .get("/v2/participation/{participation_id}", handlers::get)
            .delete("/v2/participation/{participation_id}", handlers::delete)
            .route_with_limit(
                Method::POST,
                "/v2/participation/{participation_id}",
                upload,
                handlers::append_keys,
            );
    }
}

/// The module's run-time state, owned by `AppState::participation`.
pub struct State {
    admin_token: String,
    /// Where staged uploads go (the data dir).
    pub(crate) work_dir: PathBuf,
    /// One key generation at a time (algod's `KeygenLimiter`).
    pub(crate) keygen: Arc<tokio::sync::Semaphore>,
    /// `/debug/settings/pprof`'s rates, which switch the CPU profiler.
    pub(crate) pprof: debug::PprofSettings,
    /// `GET /debug/settings/config`, rendered once.
    pub(crate) config_json: Bytes,
}

#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct InitError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

impl From<InitError> for AppError {
    fn from(e: InitError) -> AppError {
        AppError::DataDir {
            path: e.path,
            source: e.source,
        }
    }
}

/// A token algod would accept: 64–256 visible ASCII characters.
pub fn valid_token(token: &str) -> bool {
    (MIN_TOKEN_LEN..=MAX_TOKEN_LEN).contains(&token.len())
        && token.bytes().all(|b| b.is_ascii_graphic())
}

impl State {
    /// Loads or creates the admin token (config first, else `<data_dir>/algod.admin.token`,
    /// generated as 64 hex characters with mode 0600 when missing or invalid, as algod does)
    /// and renders the configuration `GET /debug/settings/config` shows.
    pub fn init(config: &Config) -> Result<State, InitError> {
        let settings = &config.participation;
        let admin_token = if !settings.admin_token.is_empty() {
            settings.admin_token.clone()
        } else if settings.module.enabled {
            load_or_create_token(&config.server.data_dir.join(ADMIN_TOKEN_FILE))?
        } else {
            String::new()
        };
        Ok(State {
            admin_token,
            work_dir: config.server.data_dir.clone(),
            keygen: Arc::new(tokio::sync::Semaphore::new(1)),
            pprof: debug::PprofSettings::default(),
            config_json: debug::render_config(config),
        })
    }

    /// Whether a key generation is running.
    pub fn generating(&self) -> bool {
        self.keygen.available_permits() == 0
    }

    /// Checks the request's admin token: `X-Algo-API-Token`, else `Authorization: Bearer`.
    pub fn authorize(&self, req: &Request) -> Result<(), ApiError> {
        let token = req
            .header("x-algo-api-token")
            .filter(|t| !t.is_empty())
            .or_else(|| {
                let value = req.header("authorization")?;
                let scheme = value.get(..7)?;
                scheme.eq_ignore_ascii_case("bearer ").then(|| &value[7..])
            });
        match token {
            Some(t)
                if !self.admin_token.is_empty()
                    && constant_time_eq(t.as_bytes(), self.admin_token.as_bytes()) =>
            {
                Ok(())
            }
            _ => Err(ApiError::new(StatusCode::UNAUTHORIZED, "Invalid API Token")),
        }
    }
}

fn load_or_create_token(path: &Path) -> Result<String, InitError> {
    let io = |source| InitError {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::read_to_string(path) {
        Ok(text) if valid_token(text.trim()) => return Ok(text.trim().to_string()),
        Ok(_) => {
            tracing::warn!(path = %path.display(), "invalid admin token file; generating a new token")
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let token: String = random_bytes(32)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    write_private(path, &token).map_err(io)?;
    tracing::info!(path = %path.display(), "created the participation admin API token");
    Ok(token)
}

/// Writes installed key `id` back out as an algod partkey file at `path` (for backups and
/// moving keys between servers; not reachable over HTTP). `Err` says why.
pub async fn export_partkey(ctx: &Ctx, id: &str, path: &Path) -> Result<(), String> {
    let id = id.to_string();
    let secrets = ctx
        .store
        .read(move |c| crate::store::partkeys::secrets(c, &id))
        .await
        .map_err(|e| e.to_string())?;
    let ctx = ctx.clone();
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let key = handlers::unseal(&ctx, &secrets)?;
        partfile::write(&key, &path).map_err(|e| format!("{}: {e}", path.display()))
    })
    .await
    .map_err(|e| e.to_string())?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(token: &str) -> State {
        State {
            admin_token: token.into(),
            work_dir: PathBuf::new(),
            keygen: Arc::new(tokio::sync::Semaphore::new(1)),
            pprof: debug::PprofSettings::default(),
            config_json: Bytes::new(),
        }
    }

    #[test]
    fn token_lookup() {
        let token = "a".repeat(64);
        let s = state(&token);
        let mut req = Request::new(Method::GET, "/v2/participation");
        assert!(s.authorize(&req).is_err());
        req.headers
            .insert("x-algo-api-token", token.parse().unwrap());
        assert!(s.authorize(&req).is_ok());
        let mut req = Request::new(Method::GET, "/v2/participation");
        req.headers
            .insert("authorization", format!("BEARER {token}").parse().unwrap());
        assert!(s.authorize(&req).is_ok());
        req.headers
            .insert("authorization", format!("Basic {token}").parse().unwrap());
        assert!(s.authorize(&req).is_err());
        req.headers.insert("authorization", "Bear".parse().unwrap());
        let err = s.authorize(&req).unwrap_err();
        assert_eq!(err.status, StatusCode::UNAUTHORIZED);
        assert_eq!(err.message, "Invalid API Token");
        // An empty configured token never matches.
        let s = state("");
        let mut req = Request::new(Method::GET, "/");
        req.headers
            .insert("authorization", "Bearer ".parse().unwrap());
        assert!(s.authorize(&req).is_err());
    }

    #[test]
    fn token_file_is_created_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(ADMIN_TOKEN_FILE);
        let a = load_or_create_token(&path).unwrap();
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(load_or_create_token(&path).unwrap(), a);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "short").unwrap();
        let b = load_or_create_token(&path).unwrap();
        assert_ne!(b, a);
        assert!(valid_token(&b));
    }

    #[test]
    fn token_validity() {
        assert!(valid_token(&"x".repeat(64)));
        assert!(!valid_token(&"x".repeat(63)));
        assert!(!valid_token(&"x".repeat(257)));
        assert!(!valid_token(&format!("{} ", "x".repeat(64))));
    }
}
