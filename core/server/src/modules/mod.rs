//! The interfaces the server speaks, one folder each, all the same shape.
//!
//! A [`Module`] adds its routes under the mount prefix its config section names (`[ci] mount`,
//! …) and decides how its errors look. Handlers are plain `async fn(Ctx, Request) ->
//! Result<Response, ApiError>`: they parse the request, authorise the caller (see
//! `ci::access`), call the services (`crate::ci`, `crate::participation`) for any change —
//! usually one; the agent's `next` and the webhook intake call several — and render the
//! result. They read through `ctx.ci.reads`, a view with no write method.

pub mod ci;
pub mod events;
pub mod participation;
pub mod ui;
pub mod web;

use crate::http::{ErrorStyle, Scope};
use crate::state::Ctx;

pub trait Module: Send + Sync {
    /// The config section (and log name) of the module.
    fn name(&self) -> &'static str;

    fn error_style(&self) -> ErrorStyle;

    /// Routes below the module's mount prefix.
    fn routes(&self, scope: &mut Scope<'_, Ctx>);

    /// Routes at the server root regardless of the mount (`/healthz` and friends).
    fn root_routes(&self, _scope: &mut Scope<'_, Ctx>) {}
}
