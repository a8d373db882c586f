//! Woodlark's own web UI, served when `[web] dir` is empty (issue 49).
//!
//! Server-rendered HTML from askama templates (`core/ui/templates/`, the one folder a
//! designer needs, checked when this crate compiles), one stylesheet and one small script
//! from `templates/static/`, all in the binary. Pages read without scripts; every page carries a strict Content-Security-Policy
//! (`default-src 'self'`: no inline script or style).
//!
//! The paths are the upstream UI's (`web/src/router.ts`), so commit-status links and
//! bookmarks open the same page: `/repos`, `/repos/{id}`, `/repos/{id}/pipeline/{number}`,
//! `/repos/{id}/pipeline/{number}/{step pid}`, `/login`, `/user`.
//!
//! A crate of its own beside the server's HTTP modules: it depends on the HTTP core and the
//! services (`woodlark-http`, `woodlark-ci`, `woodlark-store`), never on the server (Cargo
//! forbids the cycle, since the server depends on it). The handlers are generic over a
//! [`host::UiHost`], the server as the UI sees it (the server implements it for its app
//! state in `woodlark::modules::ui` and mounts [`routes`]): access is decided as the REST API
//! decides it (`UiHost::repo` is the API's `access::repo`, so a caller the API answers 401
//! gets the sign-in page here, one it answers 404 gets the not-found page); pages only read
//! (`UiHost::services`' `reads`) and every change is the API's own route (`UiHost::api`).
//!
//! - [`pages`]: home, login and user pages; [`repos`]: the repository list and a repository's
//!   pipelines; [`pipeline`]: a pipeline's workflows and steps, and a step's log;
//! - [`forms`]: what every form shares (body, CSRF field, post/redirect/get);
//!   [`actions`]: cancel, restart, approve, decline; [`manual`]: the manual-run form;
//!   [`tabs`]: a pipeline's config and changed files; [`logview`]: a log in chunks and the
//!   rendered lines the live view fetches;
//! - [`settings`] (`/repos/{id}/settings`), [`orgs`] (`/orgs/{id}`, `/org/{id}/settings`),
//!   [`admin`] (`/admin`), [`branches`] (branches, pull requests), [`repo_add`]
//!   (`/repos/add`); their forms in [`settings_actions`], [`scoped_actions`] (secrets and
//!   registries at every scope), [`admin_actions`], [`account`] (token, sign-out), each
//!   carried out by the REST API's own route through [`through_api`]; [`refused`]: a form
//!   the API refused for what was typed, shown again as typed; [`scoped`]: secret and
//!   registry rows without values;
//! - [`ansi`]: a log line's ANSI colours as classes, everything else escaped;
//! - [`when`]: relative times and durations.
//!
//! Where to add a page: a template in `core/ui/templates/` that extends `base.html`, a
//! `#[derive(Template)]` struct with a [`Frame`] beside its handler here, and a route in
//! [`routes`].

use std::sync::Arc;

// The crates below, by the names the UI's modules use for them.
use woodlark_ci as ci;
use woodlark_http as http;
use woodlark_store as store;

mod account;
mod actions;
mod admin;
mod admin_actions;
pub mod ansi;
mod branches;
pub mod forms;
pub mod host;
mod logview;
mod manual;
mod orgs;
mod pages;
mod pipeline;
mod refused;
mod repo_add;
mod repos;
mod scoped;
mod scoped_actions;
mod settings;
mod settings_actions;
mod tabs;
mod through_api;
pub mod when;

use askama::Template;

use crate::http::{ApiError, HeaderValue, Request, Response, Scope, StatusCode, header};
use crate::store::users::Account;
use host::UiHost;

/// The policy of every UI page: our own files only; no inline script or style, no frames,
/// forms only to ourselves.
pub const CSP: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; \
                       base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const STYLESHEET: &str = include_str!("../templates/static/woodlark.css");
const SCRIPT: &str = include_str!("../templates/static/woodlark.js");

/// The UI's routes below the web root (`root`: `[web] root_path`).
pub fn routes<H: UiHost>(scope: &mut Scope<'_, Arc<H>>, root: &str) {
    scope
        .get("", pages::home)
        .get("/login", pages::login)
        .get("/user", pages::user)
        .get("/repos", repos::list)
        .get("/repos/{repo_id}", repos::pipelines)
        .get("/repos/{repo_id}/pipeline/{number}", pipeline::show)
        .get(
            "/repos/{repo_id}/pipeline/{number}/{step_pid}",
            pipeline::step,
        )
        .get("/repos/{repo_id}/settings", settings::show)
        .get("/admin", admin::show)
        .get("/repos/{repo_id}/branches", branches::branches)
        .get("/repos/{repo_id}/pull-requests", branches::pull_requests)
        .get("/assets/woodlark.css", stylesheet)
        .get("/assets/woodlark.js", script);
    settings_actions::routes(scope);
    admin_actions::routes(scope);
    account::routes(scope);
    orgs::routes(scope);
    repo_add::routes(scope);
    // The upstream pipeline page's tabs: until they are pages here, the pipeline (which shows
    // its errors and warnings) is the nearest page.
    for tab in ["errors", "debug"] {
        scope.get(
            &format!("/repos/{{repo_id}}/pipeline/{{number}}/{tab}"),
            pipeline::show,
        );
    }
    if !root.is_empty() {
        scope.get("/", pages::home);
    }
    actions::routes(scope);
    manual::routes(scope);
    tabs::routes(scope);
    logview::routes(scope);
}

async fn stylesheet<S>(_host: S, _req: Request) -> Result<Response, ApiError> {
    Ok(Response::new(
        StatusCode::OK,
        "text/css; charset=utf-8",
        STYLESHEET,
    ))
}

async fn script<S>(_host: S, _req: Request) -> Result<Response, ApiError> {
    Ok(Response::new(
        StatusCode::OK,
        "application/javascript; charset=utf-8",
        SCRIPT,
    ))
}

/// What every page's frame (`base.html`) shows: where the UI is and who is signed in.
#[derive(Clone)]
pub struct Frame {
    /// `[web] root_path` ("" at the server root).
    pub root: String,
    /// The CI API's mount, for links to raw files it serves.
    pub api: String,
    pub title: String,
    /// The signed-in user's login.
    pub user: Option<String>,
    /// The signed-in user is an instance admin: the layout links the admin page.
    pub admin: bool,
    /// The session's CSRF token, for the page's forms (`forms::csrf_field`); "" anonymous.
    pub csrf: String,
    /// A message a form post left for this page (`forms::see_other`), shown once.
    pub flash: Option<forms::Flash>,
    /// This page's path and query, where signing in returns to (`?next=`, URL-encoded).
    pub next: String,
    /// The form of this page the API just refused, with what was typed (`refused`).
    pub refused: Option<refused::Refused>,
}

impl Frame {
    /// The frame for `req`, and the signed-in caller (anonymous when the token is bad).
    async fn of<H: UiHost>(
        host: &Arc<H>,
        req: &Request,
        title: impl Into<String>,
    ) -> (Frame, Option<std::sync::Arc<Account>>) {
        let account = host.current(req).await.ok().flatten();
        let frame = Frame {
            root: host.web_root().to_string(),
            api: host.api_mount().to_string(),
            title: title.into(),
            user: account.as_ref().map(|a| a.user.login.clone()),
            admin: account.as_ref().is_some_and(|a| a.user.admin),
            csrf: forms::csrf_for(host, req, account.as_deref()),
            flash: forms::flash_of(host, req),
            next: next_param(host.web_root(), req),
            refused: req.extensions.get::<refused::Refused>().cloned(),
        };
        (frame, account)
    }

    /// The same frame for a page titled `title`.
    fn titled(self, title: &str) -> Frame {
        Frame {
            title: title.to_string(),
            ..self
        }
    }
}

/// A rendered page with the UI's headers.
fn html(status: StatusCode, body: String) -> Response {
    Response::new(status, "text/html; charset=utf-8", body).with_header(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    )
}

/// `template` rendered as a page (a template that fails to render is a 500).
fn page(status: StatusCode, template: &impl Template) -> Result<Response, ApiError> {
    let body = template.render().map_err(ApiError::internal)?;
    Ok(html(status, body))
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    frame: Frame,
    status: u16,
    heading: &'static str,
    message: String,
    sign_in: bool,
}

/// A page's outcome, its errors as pages: 401 offers the sign-in, 4xx says why, 5xx only
/// that it failed (the cause is in the server's log). A message the frame showed is cleared.
fn or_error_page(frame: Frame, outcome: Result<Response, ApiError>) -> Result<Response, ApiError> {
    let flash = frame.flash.clone();
    let mut response = match outcome {
        Ok(response) => response,
        Err(err) => error_page(frame, err)?,
    };
    if let Some(flash) = &flash {
        forms::clear_flash(flash, &mut response);
    }
    Ok(response)
}

fn error_page(frame: Frame, err: ApiError) -> Result<Response, ApiError> {
    let status = err.status;
    let (heading, message) = match status {
        StatusCode::UNAUTHORIZED => ("Sign in to see this page", String::new()),
        StatusCode::NOT_FOUND => ("Not found", err.message),
        s if s.is_client_error() => ("That did not work", err.message),
        _ => (
            "Something went wrong",
            "The server could not show this page; its log says why.".to_string(),
        ),
    };
    let sign_in = status == StatusCode::UNAUTHORIZED
        || (status == StatusCode::NOT_FOUND && frame.user.is_none());
    let frame = frame.titled(heading);
    page(
        status,
        &ErrorPage {
            frame,
            status: status.as_u16(),
            heading,
            message,
            sign_in,
        },
    )
}

/// A `303 See Other` to the login page, which returns here after signing in.
fn to_login(frame: &Frame) -> Response {
    http::browser::redirect(&format!("{}/login{}", frame.root, frame.next))
}

/// `?next=<this page>` for a link to the login page ("" on the login and home pages, where
/// signing in goes anyway, and for posts).
fn next_param(root: &str, req: &Request) -> String {
    let home = req.path == root || req.path == format!("{root}/");
    if home || req.path == format!("{root}/login") || req.method != crate::http::Method::GET {
        return String::new();
    }
    let here = if req.query.is_empty() {
        req.path.clone()
    } else {
        format!("{}?{}", req.path, req.query)
    };
    next_query('?', &here)
}

/// `next` as a query parameter after `sep` (`?` or `&`), URL-encoded; "" for no `next`.
fn next_query(sep: char, next: &str) -> String {
    if next.is_empty() {
        return String::new();
    }
    let encoded: String = form_urlencoded::byte_serialize(next.as_bytes()).collect();
    format!("{sep}next={encoded}")
}
