//! The one integration-test binary: every test starts a real server on 127.0.0.1:0 with a
//! temporary data dir and real SQLite, and talks HTTP to it.
//!
//! - `http_core`: routing (404/405/OPTIONS), body limits, timeouts, headers, metrics.
//! - `users`: `/api/user*` and `/api/users*` with the auth matrix.
//! - `system`: health, version, log level, signing key.
//! - `process`: the `woodlark` binary: bad configs, `user add`, SIGTERM, kill -9 durability.
//! - `clients`: the requests of the upstream web UI and generated API clients.
//! - `web`: UI files, `/web-config.js`, browser sign-in, sessions with CSRF, logout.
//! - `ui`: Woodlark's own web UI (no `[web] dir`): its pages, who sees them, escaping.
//! - `ui_browser`: that UI in a real headless Chromium, driven over the DevTools protocol
//!   (`cdp`): clicks, forms, live parts, screenshots light and dark.
//! - `sandbox`: pipeline steps under bubblewrap cannot see the server's files; start-up
//!   refuses a missing bwrap.
//! - `storage`: what servers sharing a database must agree on (the sealing key).
//! - `lifecycle`: starting before the database is up; SIGTERM with workflows running.
//! - `forge_access`: access lost on a forge is lost here (removed collaborator, revoked
//!   token, lost org membership, stale push).
//! - `backups`: `woodlark backup` while clients write, `woodlark restore` and a server on
//!   what it restored, refused restores, scheduled backups (SQLite).
//! - `leadership`: two replicas through eight PostgreSQL restarts: one leader after each,
//!   commit statuses posted after each (the PostgreSQL pass only).
//!
//! With `WOODLARK_TEST_STORE=postgres` every test server gets a PostgreSQL database of its
//! own on one throwaway cluster instead of SQLite in its data dir.

mod util;

mod a11y;
mod approval;
mod authz;
mod backups;
mod browser;
mod cdp;
mod clients;
mod docker;
mod events;
mod forge_access;
mod forge_fakes;
mod forge_setup;
mod forges;
mod glance;
mod http_core;
mod leadership;
mod lifecycle;
mod outages;
mod participation;
mod pipelines;
mod plugins;
mod process;
mod repos;
mod resources;
mod sandbox;
mod storage;
mod streams;
mod system;
mod tenancy;
mod ui;
mod ui_actions;
mod ui_browser;
mod ui_refused;
mod ui_settings;
mod users;
mod web;
