//! The CI interface: Woodpecker CI 3.x's REST API (`/api` by default).
//!
//! One file per resource group, each with its handlers and a `routes` function: [`users`]
//! (the caller, tokens and user administration), [`system`] (health, version, metrics, log
//! level, signing key), [`forges`], [`repos`], [`orgs`], [`hook`] (pushes from forges).
//! [`access`] turns a request's token into a principal and enforces the 401/403/404 rules;
//! [`forge`](crate::ci::forge) holds the forge drivers. Errors are plain text with Woodpecker's status codes.

pub mod access;
pub mod agents;
pub mod avatars;
pub mod badges;
pub mod crons;
pub mod forges;
pub mod hook;
pub mod orgs;
pub mod pagination;
pub mod pipelines;
pub mod plugins;
pub mod registries;
pub mod repos;
pub mod scoped;
pub mod secrets;
pub mod stream;
pub mod system;
pub mod users;

use crate::http::Scope;
use crate::state::Ctx;

/// The CI API's routes below its mount.
pub(super) fn routes(scope: &mut Scope<'_, Ctx>) {
    scope
        .get("/user", users::current)
        .post("/user/token", users::token)
        .get("/user/feed", users::feed)
        .get("/user/repos", users::repos_with_last_pipeline)
        .post("/user/repos/refresh", users::refresh_repos)
        .delete("/user/token", users::rotate_token)
        .get("/users", users::list)
        .post("/users", users::create)
        .get("/users/{login}", users::get)
        .get("/users/{login}/avatar.svg", avatars::avatar)
        .patch("/users/{login}", users::update)
        .delete("/users/{login}", users::delete)
        .get("/log-level", system::get_log_level)
        .post("/log-level", system::set_log_level)
        .get("/signature/public-key", system::public_key);
    forges::routes(scope);
    repos::routes(scope);
    orgs::routes(scope);
    hook::routes(scope);
    pipelines::routes(scope);
    stream::routes(scope);
    badges::routes(scope);
    plugins::routes(scope);
    secrets::routes(scope);
    registries::routes(scope);
    agents::routes(scope);
    crons::routes(scope);
}

/// The routes at the server root: health, version and metrics.
pub(super) fn root_routes(scope: &mut Scope<'_, Ctx>) {
    scope
        .get("/healthz", system::healthz)
        .get("/version", system::version)
        .get("/metrics", system::metrics);
}
