//! `GET /plugins` (admin): the loaded WebAssembly plugins, their state and call counts.

use super::access::must_admin;
use crate::http::{ApiError, Request, Response, Scope};
use crate::state::Ctx;

pub fn routes(scope: &mut Scope<'_, Ctx>) {
    scope.get("/plugins", list);
}

/// Name, world, version, content hash, loaded-at, last error and call counts per plugin.
async fn list(ctx: Ctx, req: Request) -> Result<Response, ApiError> {
    must_admin(&ctx, &req).await?;
    Ok(Response::json(&ctx.ci.plugins.list()))
}
