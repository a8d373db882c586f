//! The CI API called in process: a request the built-in UI makes on a browser's behalf
//! (a form that does what an API call does) goes through the API's own route, with its
//! guard, body limit, access decision and validation, exactly as the browser's own request
//! to the API would. The route table is the CI module's, built once at start-up
//! ([`super::AppState::api`]); its handlers capture no state, so holding it here makes no
//! cycle of owners.

use std::sync::Arc;

use crate::http::router::Lookup;
use crate::http::{ApiError, Request, Response, StatusCode};

use super::Ctx;

/// Runs `req` (method, path under the CI mount with its parameters percent-encoded, query,
/// headers, body, extensions) through the CI API's route for it: the handler's answer, or
/// its refusal. An unknown path is a 404, a known path without the method a 405, a body over
/// the route's limit a 413, as the server answers them.
///
/// A guarded route's head check runs first, as for a client; its shared byte budget (which
/// bounds bodies held for senders not yet known) does not apply: this body is in memory
/// already, sent by a signed-in browser's form.
pub async fn call(ctx: &Ctx, mut req: Request) -> Result<Response, ApiError> {
    let (route, params) = match ctx.api.lookup(&req.method, &req.path) {
        Lookup::Found(route, params) => (route.clone(), params),
        Lookup::NotFound { .. } => {
            return Err(ApiError::not_found(format!("no route for {}", req.path)));
        }
        Lookup::BadPath { param, .. } => {
            return Err(ApiError::bad_request(format!(
                "invalid {param} in {}: malformed percent-encoding",
                req.path
            )));
        }
        Lookup::MethodNotAllowed { .. } | Lookup::Options { .. } => {
            return Err(ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("method {} not allowed on {}", req.method, req.path),
            ));
        }
    };
    if req.body.len() > route.body_limit {
        return Err(ApiError::payload_too_large(route.body_limit));
    }
    req.params = params;
    if let Some(guard) = &route.guard {
        // The head check sees the request without its body, as it does from a client.
        let body = std::mem::take(&mut req.body);
        req = (guard.check)(Arc::clone(ctx), req).await?;
        req.body = body;
    }
    tracing::debug!(route = %route.pattern, method = %req.method, "api called in process");
    (route.handler)(Arc::clone(ctx), req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::App;
    use crate::config::Config;
    use crate::http::Method;
    use crate::logging::{LogControl, LogLevel};

    /// A built (not serving) app on a temporary data dir, its body limit 1 KiB.
    fn app() -> (tempfile::TempDir, App) {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "[server]\ndata_dir = {:?}\nmax_body_bytes = 1024\n[runner]\nenabled = false\n",
            dir.path().display().to_string()
        );
        let config = Config::from_toml(&text, "t.toml", &[]).unwrap();
        let app = App::build(config, LogControl::detached(LogLevel::Warn)).unwrap();
        (dir, app)
    }

    /// A handler's future is moved whole into its box on every request, so the hot reads'
    /// futures must stay small: a slow path (a store read, a forge call) that holds
    /// kilobytes is boxed where it is taken. (Release builds are smaller still: the list's
    /// was 12.8 KB there before the store's PostgreSQL read was boxed, 2.6 KB after.)
    #[tokio::test]
    async fn the_hot_reads_futures_stay_small() {
        let (_dir, app) = app();
        let ctx = app.state();
        for path in [
            "/api/user",
            "/api/repos/1",
            "/api/repos/1/pipelines",
            "/api/repos/1/pipelines/5",
        ] {
            let Lookup::Found(route, params) = ctx.api.lookup(&Method::GET, path) else {
                panic!("no route for {path}");
            };
            let mut req = Request::new(Method::GET, path);
            req.params = params;
            let fut = (route.handler)(Arc::clone(ctx), req);
            let size = std::mem::size_of_val(&*fut);
            assert!(
                size <= 4 * 1024,
                "GET {path}: its handler's future is {size} bytes"
            );
        }
    }

    #[tokio::test]
    async fn a_request_runs_as_the_api_route_would_answer_it() {
        let (_dir, app) = app();
        let ctx = app.state();
        let status = |r: Result<Response, ApiError>| match r {
            Ok(response) => response.status,
            Err(err) => err.status,
        };
        // The route's own handler and access decision: anonymous is refused as over HTTP.
        let user = call(ctx, Request::new(Method::GET, "/api/user")).await;
        assert_eq!(status(user), StatusCode::UNAUTHORIZED);
        let unknown = call(ctx, Request::new(Method::GET, "/api/nowhere")).await;
        assert_eq!(status(unknown), StatusCode::NOT_FOUND);
        let method = call(ctx, Request::new(Method::PUT, "/api/user")).await;
        assert_eq!(status(method), StatusCode::METHOD_NOT_ALLOWED);
        let bad = call(ctx, Request::new(Method::GET, "/api/repos/%ZZ")).await;
        assert_eq!(status(bad), StatusCode::BAD_REQUEST);
        let mut big = Request::new(Method::POST, "/api/users");
        big.body = vec![b' '; 2048].into();
        assert_eq!(status(call(ctx, big).await), StatusCode::PAYLOAD_TOO_LARGE);
        // Only the CI API's mount is reachable: not the web module, not the root routes.
        for path in ["/web-config.js", "/version"] {
            let other = call(ctx, Request::new(Method::GET, path)).await;
            assert_eq!(status(other), StatusCode::NOT_FOUND, "{path}");
        }
    }
}
