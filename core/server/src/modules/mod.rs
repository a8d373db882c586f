//! The interfaces the server speaks, one folder each, all the same shape.
//!
//! A [`Module`] adds its routes under the mount prefix its config section names (`[ci] mount`,
//! …) and decides how its errors look. Handlers are plain `async fn(Ctx, Request) ->
//! Result<Response, ApiError>`; they authenticate explicitly (see `ci::access`) and reach the
//! database only through `crate::store`.

pub mod ci;
pub mod events;
pub mod participation;
pub mod rendered;
pub mod web;

use crate::app::Ctx;
use crate::http::{ErrorStyle, Scope};

pub trait Module: Send + Sync {
    /// The config section (and log name) of the module.
    fn name(&self) -> &'static str;

    fn error_style(&self) -> ErrorStyle;

    /// Routes below the module's mount prefix.
    fn routes(&self, scope: &mut Scope<'_, Ctx>);

    /// Routes at the server root regardless of the mount (`/healthz` and friends).
    fn root_routes(&self, _scope: &mut Scope<'_, Ctx>) {}

    /// Background tasks (retention, schedulers) started when the server starts serving and
    /// aborted when it stops.
    fn spawn_background(&self, _ctx: &Ctx) -> Vec<tokio::task::JoinHandle<()>> {
        Vec::new()
    }
}

/// The modules `config` enables, with their config sections.
pub fn enabled(
    config: &crate::config::Config,
) -> Vec<(Box<dyn Module>, crate::config::ModuleConfig)> {
    all(config)
        .into_iter()
        .filter_map(|module| {
            let (_, settings) = config
                .modules()
                .into_iter()
                .find(|(name, _)| *name == module.name())?;
            settings.enabled.then(|| (module, settings.clone()))
        })
        .collect()
}

/// Every module this build has, in mount order. (The web module needs its settings to know
/// which routes it adds: the SPA fallback exists only with a UI directory.)
pub fn all(config: &crate::config::Config) -> Vec<Box<dyn Module>> {
    vec![
        Box::new(ci::Ci),
        Box::new(events::Events),
        Box::new(participation::Participation),
        Box::new(web::Web::new(&config.web)),
    ]
}
