//! Woodlark: one server, three HTTP interfaces, WebAssembly plugins.
//!
//! Layout (read ARCHITECTURE.md at the repository root for the invariants):
//! - [`cli`]: the `woodlark` command line (`serve`, `agent`, `lint`, `exec`, `migrate`,
//!   `backup`, `restore`, `user …`, `plugin run-hook`).
//! - [`config`]: `config.toml` → validated [`config::Config`].
//! - [`app`]: builds the state, the route table and the background jobs, and serves.
//! - [`startup`]: a server starting before its database waits for it, answering 503.
//! - [`state`]: `AppState`/`Ctx`, what every handler receives.
//! - [`http`]: crate `woodlark-http`, the only one that knows hyper: server, router,
//!   request/response, errors, outbound client.
//! - [`ci`]: crate `woodlark-ci`, the CI service layer (every CI state change, the queue,
//!   the embedded agent), no HTTP.
//! - [`participation`]: the participation service (installed keys, key material), no HTTP.
//! - [`retention`]: the jobs that delete aged events and log lines.
//! - [`backup`]: online backups of the embedded store, restores, and scheduled backups.
//! - [`modules`]: one folder per interface (`ci`, …): HTTP handlers only, registering routes
//!   under its mount; they call the services for every change.
//! - [`pipeline`]: crate `woodlark-pipeline`, configs → compiled workflows (no I/O).
//! - [`profiler`]: the process-wide CPU sampler behind `/debug/settings/pprof`.
//! - [`runner`]: crate `woodlark-runner`, runs workflows (embedded agent and `woodlark agent`).
//! - [`store`]: crate `woodlark-store`, SQLite or PostgreSQL (writer thread, reader pool,
//!   migrations, event outbox); the only crate with SQL.
//! - [`auth`]: where a request carries its token, sessions (sealing, token signing and the
//!   server's signing key are in the ci crate's `auth`).
//! - [`logging`]: tracing set-up and the run-time log level.

pub mod app;
pub mod auth;
pub mod backup;
pub use woodlark_ci as ci;
pub mod cli;
pub mod config;
pub use woodlark_http as http;
#[cfg(test)]
mod layering;
pub mod logging;
pub mod modules;
pub mod participation;
pub use woodlark_pipeline as pipeline;
pub mod profiler;
pub mod retention;
pub use woodlark_runner as runner;
pub mod startup;
pub mod state;
pub use woodlark_stdx::timefmt;
pub use woodlark_store as store;
