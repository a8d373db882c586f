//! The participation module's run-time state: the admin token, the key-generation slot and
//! the debug settings, built once at start-up and held by `AppState::participation`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::auth::{constant_time_eq, random_bytes};
use crate::config::{Config, valid_admin_token};
use crate::http::{ApiError, Request, StatusCode};
use crate::profiler;
use woodlark_stdx::write_private;

/// The file the admin token is generated into when `[participation] admin_token` is empty.
pub const ADMIN_TOKEN_FILE: &str = "algod.admin.token";

/// The module's run-time state, owned by `AppState::participation`.
pub struct State {
    admin_token: String,
    /// Where staged uploads go (the data dir).
    pub(crate) work_dir: PathBuf,
    /// One key generation at a time (algod's `KeygenLimiter`).
    pub(crate) keygen: Arc<tokio::sync::Semaphore>,
    /// `/debug/settings/pprof`'s rates, which switch the CPU profiler.
    pub(crate) pprof: PprofSettings,
    /// `GET /debug/settings/config`, rendered once.
    pub(crate) config_json: Bytes,
}

#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct InitError {
    pub path: PathBuf,
    pub source: std::io::Error,
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
            pprof: PprofSettings::default(),
            config_json: render_config(config),
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
        Ok(text) if valid_admin_token(text.trim()) => return Ok(text.trim().to_string()),
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
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Rates> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self) -> (u64, u64) {
        let rates = self.lock();
        (rates.mutex, rates.block)
    }

    /// Applies the sent rates and starts or stops the profiler to match; returns the old values
    /// of the sent fields. Blocks (starting or stopping the sampler symbolizes).
    pub(crate) fn apply(
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
pub(crate) struct DebugSettingsProf {
    #[serde(rename = "block-rate", skip_serializing_if = "Option::is_none")]
    pub(crate) block_rate: Option<u64>,
    #[serde(rename = "mutex-rate", skip_serializing_if = "Option::is_none")]
    pub(crate) mutex_rate: Option<u64>,
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
    use crate::http::Method;

    fn state(token: &str) -> State {
        State {
            admin_token: token.into(),
            work_dir: PathBuf::new(),
            keygen: Arc::new(tokio::sync::Semaphore::new(1)),
            pprof: PprofSettings::default(),
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
        assert!(valid_admin_token(&b));
    }

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
