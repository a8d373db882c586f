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

use crate::config::WebConfig;
use crate::http::{ErrorStyle, Scope};
use crate::state::Ctx;

/// Adds routes to a scope.
type Routes = Box<dyn Fn(&mut Scope<'_, Ctx>) + Send + Sync>;

/// An interface as the app mounts it: the same few facts for each, so they are data.
pub struct Module {
    /// The config section (and log name) of the module.
    pub name: &'static str,
    pub error_style: ErrorStyle,
    /// Routes below the module's mount prefix.
    routes: Routes,
    /// Routes at the server root regardless of the mount (`/healthz` and friends).
    root_routes: fn(&mut Scope<'_, Ctx>),
}

impl Module {
    fn new(
        name: &'static str,
        error_style: ErrorStyle,
        routes: impl Fn(&mut Scope<'_, Ctx>) + Send + Sync + 'static,
    ) -> Module {
        Module {
            name,
            error_style,
            routes: Box::new(routes),
            root_routes: |_| {},
        }
    }

    fn with_root_routes(self, root_routes: fn(&mut Scope<'_, Ctx>)) -> Module {
        Module {
            root_routes,
            ..self
        }
    }

    /// Adds the routes below the module's mount prefix to `scope`.
    pub fn routes(&self, scope: &mut Scope<'_, Ctx>) {
        (self.routes)(scope)
    }

    /// Adds the routes at the server root to `scope`.
    pub fn root_routes(&self, scope: &mut Scope<'_, Ctx>) {
        (self.root_routes)(scope)
    }
}

/// Every interface this build has, in mount order (`web`: which routes the web module adds
/// depends on it).
pub fn all(web: &WebConfig) -> Vec<Module> {
    vec![
        Module::new("ci", ErrorStyle::PlainText, ci::routes).with_root_routes(ci::root_routes),
        Module::new("events", ErrorStyle::JsonMessage, events::routes),
        Module::new(
            "participation",
            ErrorStyle::JsonMessage,
            participation::routes,
        ),
        Module::new("web", ErrorStyle::PlainText, web::routes_for(web)),
    ]
}
