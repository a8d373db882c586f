//! Tracing set-up and the run-time log level behind `GET|POST /api/log-level`.
//!
//! Woodpecker names its levels after zerolog (`trace` … `panic`, `disabled`); tracing has fewer,
//! so `fatal` and `panic` both filter at `error` and `disabled` turns logging off. The name the
//! operator chose is remembered so that `GET` answers with exactly what was set.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};

use tracing_subscriber::{
    EnvFilter, Registry, layer::SubscriberExt, reload, util::SubscriberInitExt,
};

/// A Woodpecker log level name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
    Fatal,
    Panic,
    Disabled,
}

impl LogLevel {
    pub const NAMES: &'static [&'static str] = &[
        "trace", "debug", "info", "warn", "error", "fatal", "panic", "disabled",
    ];

    pub fn parse(name: &str) -> Option<LogLevel> {
        Some(match name {
            "trace" => LogLevel::Trace,
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "warn" => LogLevel::Warn,
            "error" => LogLevel::Error,
            "fatal" => LogLevel::Fatal,
            "panic" => LogLevel::Panic,
            "disabled" => LogLevel::Disabled,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
            LogLevel::Fatal => "fatal",
            LogLevel::Panic => "panic",
            LogLevel::Disabled => "disabled",
        }
    }

    /// The tracing directive this level filters at.
    fn directive(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error | LogLevel::Fatal | LogLevel::Panic => "error",
            LogLevel::Disabled => "off",
        }
    }

    fn filter(self) -> EnvFilter {
        // Dependencies are noisy at debug/trace; keep them at warn unless asked for by RUST_LOG.
        let d = self.directive();
        let spec = match self {
            LogLevel::Trace | LogLevel::Debug => format!("{d},hyper=warn,h2=warn,rustls=warn"),
            _ => d.to_string(),
        };
        EnvFilter::new(spec)
    }
}

/// Changes the level of the installed subscriber. Cheap to clone.
#[derive(Clone)]
pub struct LogControl {
    inner: Arc<Inner>,
}

struct Inner {
    current: Mutex<LogLevel>,
    reload: Option<reload::Handle<EnvFilter, Registry>>,
}

impl LogControl {
    /// Installs the global subscriber (once per process) with `level`.
    pub fn install(level: LogLevel) -> LogControl {
        let (filter, handle) = reload::Layer::new(level.filter());
        let installed = tracing_subscriber::registry()
            .with(filter)
            .with(
                tracing_subscriber::fmt::layer()
                    .with_target(false)
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::stderr().is_terminal()),
            )
            .try_init()
            .is_ok();
        LogControl {
            inner: Arc::new(Inner {
                current: Mutex::new(level),
                reload: installed.then_some(handle),
            }),
        }
    }

    /// A control that only remembers the level (tests, or when a subscriber already exists).
    pub fn detached(level: LogLevel) -> LogControl {
        LogControl {
            inner: Arc::new(Inner {
                current: Mutex::new(level),
                reload: None,
            }),
        }
    }

    pub fn level(&self) -> LogLevel {
        *self.inner.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set(&self, level: LogLevel) {
        *self.inner.current.lock().unwrap_or_else(|p| p.into_inner()) = level;
        if let Some(handle) = &self.inner.reload
            && let Err(err) = handle.reload(level.filter())
        {
            tracing::warn!(%err, "could not change the log filter");
        }
        tracing::info!(level = level.name(), "log level changed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_round_trips() {
        for name in LogLevel::NAMES {
            assert_eq!(LogLevel::parse(name).unwrap().name(), *name);
        }
        assert!(LogLevel::parse("INFO").is_none());
        assert!(LogLevel::parse("").is_none());
    }

    #[test]
    fn detached_control_remembers() {
        let c = LogControl::detached(LogLevel::Info);
        c.set(LogLevel::Fatal);
        assert_eq!(c.level(), LogLevel::Fatal);
    }
}
