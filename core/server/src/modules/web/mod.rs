//! The browser surface (`[web]`): what a single-page web UI built for Woodpecker's API needs
//! from the server besides the API itself.
//!
//! Mounted at `[web] root_path` (Woodpecker's `ROOT_PATH`, "" by default):
//! - [`files`]: the UI directory (`[web] dir`) with `/BASE_PATH` rewriting, long-lived caching
//!   of hashed assets and the SPA fallback to `index.html`; `assets/custom.{js,css}`; without a
//!   directory, a small built-in page at the root.
//! - [`config_js`]: `/web-config.js`, the page's globals, rendered per request.
//! - [`login`]: `/authorize` (sign in with a personal access token, or a one-time login link
//!   from `woodlark user login-link`) and `/logout`. A sign-in sets the `user_sess` cookie to a
//!   session token (`auth::session`), which `ci::access::current` accepts like a personal
//!   access token, with a CSRF check on writes.
//!
//! Errors are plain text, like the CI API's; pages are small self-contained HTML.

pub mod browser;
pub mod config_js;
pub mod files;
pub mod login;
mod oauth;

use crate::config::WebConfig;
use crate::http::{Method, Scope};
use crate::state::Ctx;

pub use browser::{
    SESSION_COOKIE, cookie, cookie_value, escape_html, home, html_page, over_tls, page_frame,
    push_escaped, redirect, set_cookie,
};

/// The web module's routes, which depend on its settings: the UI directory's files when
/// `[web] dir` names one, else the built-in UI.
pub(super) fn routes_for(
    config: &WebConfig,
) -> impl Fn(&mut Scope<'_, Ctx>) + Send + Sync + 'static {
    let root_path = config.root_path().to_string();
    let has_dir = !config.dir.as_os_str().is_empty();
    move |scope| routes(scope, &root_path, has_dir)
}

fn routes(scope: &mut Scope<'_, Ctx>, root_path: &str, has_dir: bool) {
    scope
        .get("/web-config.js", config_js::render)
        .get("/authorize", login::authorize)
        .post("/authorize", login::authorize_with_token)
        .get("/logout", login::logout)
        .get("/assets/custom.js", files::custom_js)
        .get("/assets/custom.css", files::custom_css);
    if !has_dir {
        // Woodlark's own web UI (crate `woodlark-ui`, mounted by `modules::ui`), at the
        // upstream UI's paths; its login
        // page is where a failed sign-in through a forge lands.
        super::ui::routes(scope, root_path);
    } else {
        scope.get("", files::index);
        if !root_path.is_empty() {
            scope.get("/", files::index);
        }
        // Every other path below the root: a file of the UI, else the SPA's index.html
        // (GET/HEAD outside the API mounts), else 404. Registered for the other methods
        // too, so they get a 404 rather than a 405 from this catch-all.
        for method in [
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ] {
            scope.route(method, "/{*path}", files::file_or_fallback);
        }
    }
}
