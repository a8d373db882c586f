//! Starting on a database that is not up yet (issue 47): after an outage, or with the
//! database started beside the server, `woodlark serve` binds its port at once, answers 503
//! while it waits for PostgreSQL (with backoff, bounded by `storage.wait_for_database_secs`)
//! and while it builds the app, then serves the real app on the same listener.
//!
//! SQLite needs no wait: its database is a file, there when the server is.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::net::TcpListener;

use crate::app::App;
use crate::config::Config;
use crate::logging::LogControl;

use crate::http::server::Answer;
use crate::http::{ApiError, ErrorStyle, Method, Response, StatusCode, header};
use crate::store::pg;

/// The first pause between two attempts; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(200);
const MAX_PAUSE: Duration = Duration::from_secs(5);
/// What a refused client is told to wait before it asks again.
const RETRY_AFTER_SECS: u32 = 5;

/// Why the server could not start on its database.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The database did not come up in time.
    #[error(
        "the database at {target} did not accept connections within {secs} s \
         (storage.wait_for_database_secs); last error: {last}"
    )]
    TimedOut {
        target: String,
        secs: u64,
        last: String,
    },
    /// Waiting cannot mend this one (a bad URL, a refused sign-in, a missing database).
    #[error(transparent)]
    Refused(#[from] pg::PgError),
}

/// What a starting server is doing, for its 503 answers.
#[derive(Clone)]
pub struct Starting {
    inner: Arc<Mutex<Phase>>,
    since: Instant,
}

#[derive(Clone)]
enum Phase {
    /// Waiting for the database at `target`; the last attempt's error.
    Database { target: String, error: String },
    /// The database answers: migrations, keys, plugins.
    Building,
}

impl Starting {
    pub fn waiting_for(target: String) -> Starting {
        Starting {
            inner: Arc::new(Mutex::new(Phase::Database {
                target,
                error: String::new(),
            })),
            since: Instant::now(),
        }
    }

    fn set(&self, phase: Phase) {
        *self.inner.lock().unwrap_or_else(|p| p.into_inner()) = phase;
    }

    fn phase(&self) -> Phase {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The database answered; the app is being built.
    pub fn building(&self) {
        self.set(Phase::Building);
    }

    /// What the server waits for, in words.
    fn waiting_for_text(&self) -> (String, String) {
        match self.phase() {
            Phase::Database { target, error } => (format!("the database at {target}"), error),
            Phase::Building => ("start-up (migrations, keys, plugins)".into(), String::new()),
        }
    }

    /// The answer to every request while the server starts: `/healthz` says not ready and
    /// what it waits for; anything else is a 503 with `Retry-After` and a readable message.
    pub fn answer(&self) -> Answer {
        let starting = self.clone();
        Arc::new(move |method: &Method, path: &str| starting.respond(method, path))
    }

    fn respond(&self, _method: &Method, path: &str) -> Response {
        let (what, error) = self.waiting_for_text();
        if path == "/healthz" {
            let mut body = json!({
                "ready": false,
                "waiting_for": what,
                "waited_secs": self.since.elapsed().as_secs(),
            });
            if !error.is_empty() {
                body["error"] = json!(error);
            }
            return Response::json_status(StatusCode::SERVICE_UNAVAILABLE, &body)
                .with_header(header::RETRY_AFTER, RETRY_AFTER_SECS.into());
        }
        let mut message = format!("woodlark is starting: waiting for {what}");
        if !error.is_empty() {
            message.push_str(&format!(" ({error})"));
        }
        message.push_str(&format!("; try again in {RETRY_AFTER_SECS} s"));
        ApiError::busy(message, RETRY_AFTER_SECS).render(ErrorStyle::JsonMessage)
    }
}

/// Waits until the PostgreSQL database at `url` accepts work, trying again with backoff
/// (0.2 s doubling to 5 s) for at most `bound`, each attempt logged with its error. An error
/// waiting cannot mend ends the wait at once.
pub async fn wait_for_database(
    url: &str,
    bound: Duration,
    starting: &Starting,
) -> Result<(), WaitError> {
    let target = pg::target(url);
    let deadline = Instant::now() + bound;
    let mut pause = FIRST_PAUSE;
    for attempt in 1u32.. {
        let left = deadline.saturating_duration_since(Instant::now());
        let probe_url = url.to_string();
        let timeout = left.clamp(Duration::from_secs(1), MAX_PAUSE);
        let probed = tokio::task::spawn_blocking(move || pg::probe(&probe_url, timeout))
            .await
            .unwrap_or_else(|join| {
                Err(pg::PgError::Url(format!(
                    "the probe did not finish: {join}"
                )))
            });
        let error = match probed {
            Ok(()) => {
                if attempt > 1 {
                    tracing::info!(
                        database = %target,
                        attempts = attempt,
                        waited_ms = starting.since.elapsed().as_millis() as u64,
                        "the database accepts connections"
                    );
                }
                return Ok(());
            }
            Err(error) if !error.is_transient() => return Err(error.into()),
            Err(error) => error,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(WaitError::TimedOut {
                target,
                secs: bound.as_secs(),
                last: error.to_string(),
            });
        }
        let wait = pause.min(left);
        tracing::warn!(
            database = %target,
            attempt,
            %error,
            retry_in_ms = wait.as_millis() as u64,
            left_secs = left.as_secs(),
            "waiting for the database"
        );
        starting.set(Phase::Database {
            target: target.clone(),
            error: error.to_string(),
        });
        tokio::time::sleep(wait).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
    unreachable!("the attempts are counted without end")
}

/// Builds the app once the database at `config.storage.url` accepts work, holding
/// `listener` meanwhile ([`Starting::answer`]); hands back the app and the listener to serve
/// it on, or `None` when `stop` came first (a clean exit).
pub async fn build_when_database_is_up(
    config: Config,
    log: LogControl,
    listener: TcpListener,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<Option<(App, TcpListener)>> {
    let bound = Duration::from_secs(config.storage.wait_for_database_secs);
    let mut options = crate::app::server_options(&config)?;
    // Its answers are instant: in-flight ones need no long drain before the app takes over.
    options.shutdown_grace = options.shutdown_grace.min(Duration::from_secs(2));
    let starting = Starting::waiting_for(pg::target(&config.storage.url));
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let answer = starting.answer();
    let held = tokio::spawn(async move {
        let until = async {
            let _ = released.await;
        };
        crate::http::server::hold(listener, answer, &options, until).await
    });
    let waited = tokio::select! {
        waited = wait_for_database(&config.storage.url, bound, &starting) => Some(waited),
        () = stop => None,
    };
    let built = match waited {
        None => {
            tracing::info!("stopped while waiting for the database");
            Ok(None)
        }
        Some(Err(err)) => Err(anyhow::Error::from(err)),
        Some(Ok(())) => {
            starting.building();
            App::build(config, log)
                .map(Some)
                .map_err(anyhow::Error::from)
        }
    };
    let _ = release.send(());
    let listener = held.await?;
    Ok(built?.map(|app| (app, listener)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_starting_server_says_what_it_waits_for() {
        let starting = Starting::waiting_for("db:5432/ci".into());
        starting.set(Phase::Database {
            target: "db:5432/ci".into(),
            error: "connection refused".into(),
        });
        let health = starting.respond(&Method::GET, "/healthz");
        assert_eq!(health.status, StatusCode::SERVICE_UNAVAILABLE);
        let body: serde_json::Value = serde_json::from_slice(&health.body).unwrap();
        assert_eq!(body["ready"], false);
        assert_eq!(body["waiting_for"], "the database at db:5432/ci");
        assert_eq!(body["error"], "connection refused");
        let other = starting.respond(&Method::POST, "/api/repos");
        assert_eq!(other.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(other.headers["retry-after"], "5");
        let body: serde_json::Value = serde_json::from_slice(&other.body).unwrap();
        let message = body["message"].as_str().unwrap();
        assert!(
            message.contains("waiting for the database at db:5432/ci (connection refused)"),
            "{message}"
        );
        starting.building();
        let body: serde_json::Value =
            serde_json::from_slice(&starting.respond(&Method::GET, "/healthz").body).unwrap();
        assert!(
            body["waiting_for"]
                .as_str()
                .unwrap()
                .starts_with("start-up")
        );
    }

    #[tokio::test]
    async fn the_wait_ends_at_its_bound_naming_the_key_and_the_last_error() {
        let url = "postgres://u:secret-pw@127.0.0.1:1/ci?sslmode=disable";
        let starting = Starting::waiting_for(pg::target(url));
        let started = Instant::now();
        let err = wait_for_database(url, Duration::from_millis(700), &starting)
            .await
            .expect_err("nothing listens on port 1");
        assert!(started.elapsed() < Duration::from_secs(5));
        let text = err.to_string();
        assert!(text.contains("127.0.0.1:1/ci"), "{text}");
        assert!(text.contains("storage.wait_for_database_secs"), "{text}");
        assert!(!text.contains("secret-pw"), "{text}");
        // Waiting cannot mend a URL it cannot read: no wait at all.
        let started = Instant::now();
        let err = wait_for_database(
            "postgres://u@h:notaport/db",
            Duration::from_secs(30),
            &starting,
        )
        .await
        .expect_err("bad URL");
        assert!(matches!(err, WaitError::Refused(_)), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
